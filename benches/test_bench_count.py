"""count_messages over message dicts: contextwindow vs the pure-Python reference (dicts
to canonical messages, then its per-message rule), tiktoken (exact: encode + len of every
text of every message, plus 3 per message), LangChain's ``count_tokens_approximately``
and LiteLLM's ``token_counter(messages=)``. Per-message cost is what matters: the table
reports µs per message. contextwindow runs twice: with the default profile, and with
``fim`` (byte classes only, no vocabulary: an approximate counter of the same kind as
LangChain's characters / 4), which separates the cost of the message walk from the
estimator's."""

from __future__ import annotations

from typing import Any

import pytest

import contextwindow as cw
from contextwindow import _reference as ref
from contextwindow.adapters import to_canonical

IMPLS = [
    ("contextwindow", "conservative"),
    ("contextwindow", "fim"),
    ("reference", None),
    ("tiktoken", None),
    ("langchain", None),
    ("litellm", None),
]
IDS = [f"{i}-{p}" if p else i for i, p in IMPLS]
Conv = list[dict[str, Any]]


def counter(impl: str, profile: str | None, peer: Any, strings: Any) -> Any:
    """``conversation -> tokens`` for ``impl`` (the peers skip when not installed)."""
    if impl == "contextwindow":
        return lambda msgs: cw.count_messages(msgs, profile=profile)
    if impl == "reference":
        p = ref.PROFILES[cw.estimate.DEFAULT_PROFILE]
        return lambda msgs: sum(ref.message_tokens(m, p) for m in to_canonical(msgs))
    if impl == "tiktoken":
        enc = peer.tiktoken_encoding()
        return lambda msgs: sum(3 + sum(len(enc.encode(s, disallowed_special=())) for s in strings([m])) for m in msgs)
    if impl == "langchain":
        return peer.module("langchain").count_tokens_approximately
    litellm = peer.module("litellm")
    return lambda msgs: litellm.token_counter(model="gpt-4", messages=msgs)


@pytest.mark.parametrize(("impl", "profile"), IMPLS, ids=IDS)
def test_count_corpus(
    impl: str, profile: str | None, corpus: list[tuple[Conv, str]], measure: Any, peer: Any, strings: Any
) -> None:
    count = counter(impl, profile, peer, strings)
    convs = [msgs for msgs, _ in corpus]

    def fn() -> int:
        return sum(count(msgs) for msgs in convs)

    n = sum(map(len, convs))
    group = f"count_messages: the {len(convs)} corpus conversations ({n:,} messages)"
    slow = impl == "reference"
    assert measure(fn, group=group, impl=impl, profile=profile, messages=n, slow=slow) > 0


@pytest.mark.parametrize(("impl", "profile"), IMPLS, ids=IDS)
def test_count_short_chat(
    impl: str, profile: str | None, short_chat: Conv, measure: Any, peer: Any, strings: Any
) -> None:
    count = counter(impl, profile, peer, strings)
    n = len(short_chat)
    group = f"count_messages: {n:,} short chat messages"
    assert measure(lambda: count(short_chat), group=group, impl=impl, profile=profile, messages=n) > 0
