"""count_messages over message dicts: contextwindow vs the pure-Python reference (dicts
to canonical messages, then its per-message rule), tiktoken (exact: encode + len of every
text of every message, plus 3 per message), LangChain's ``count_tokens_approximately``
and LiteLLM's ``token_counter(messages=)``. Per-message cost is what matters: the table
reports µs per message."""

from __future__ import annotations

from typing import Any

import pytest

import contextwindow as cw
from contextwindow import _reference as ref
from contextwindow.adapters import to_canonical

IMPLS = ["contextwindow", "reference", "tiktoken", "langchain", "litellm"]
Conv = list[dict[str, Any]]


def counter(impl: str, peer: Any, strings: Any) -> Any:
    """``conversation -> tokens`` for ``impl`` (the peers skip when not installed)."""
    if impl == "contextwindow":
        return cw.count_messages
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


@pytest.mark.parametrize("impl", IMPLS)
def test_count_corpus(impl: str, corpus: list[tuple[Conv, str]], measure: Any, peer: Any, strings: Any) -> None:
    count = counter(impl, peer, strings)
    convs = [msgs for msgs, _ in corpus]

    def fn() -> int:
        return sum(count(msgs) for msgs in convs)

    n = sum(map(len, convs))
    group = f"count_messages: the {len(convs)} corpus conversations ({n:,} messages)"
    assert measure(fn, group=group, impl=impl, messages=n, slow=impl == "reference") > 0


@pytest.mark.parametrize("impl", IMPLS)
def test_count_short_chat(impl: str, short_chat: Conv, measure: Any, peer: Any, strings: Any) -> None:
    count = counter(impl, peer, strings)
    n = len(short_chat)
    group = f"count_messages: {n:,} short chat messages"
    assert measure(lambda: count(short_chat), group=group, impl=impl, messages=n) > 0
