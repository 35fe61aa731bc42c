"""estimate_tokens on 1 MB of text: contextwindow vs the pure-Python reference, tiktoken's
exact cl100k count (encode + len) and LiteLLM's ``token_counter(text=)``.

LangChain has no text counter (``count_tokens_approximately`` takes messages: characters
/ 4 of their content), so it appears in the message benchmarks only.
"""

from __future__ import annotations

from typing import Any

import pytest

import contextwindow as cw
from contextwindow import _reference as ref

IMPLS = [
    ("contextwindow", "conservative"),
    ("contextwindow", "fim"),
    ("reference", "conservative"),
    ("reference", "fim"),
    ("tiktoken", None),
    ("litellm", None),
]


@pytest.mark.parametrize("kind", ["corpus", "prose"])
@pytest.mark.parametrize(("impl", "profile"), IMPLS, ids=[f"{i}-{p}" if p else i for i, p in IMPLS])
def test_estimate_tokens(
    kind: str, impl: str, profile: str | None, corpus_text: str, prose_text: str, measure: Any, peer: Any
) -> None:
    text = corpus_text if kind == "corpus" else prose_text
    group = "estimate_tokens: corpus text, 1 MB" if kind == "corpus" else "estimate_tokens: ASCII prose, 1 MB"
    slow = False
    if impl == "contextwindow":

        def fn() -> int:
            return cw.estimate_tokens(text, profile)

    elif impl == "reference":
        p = ref.PROFILES[profile or ""]
        slow = profile != "fim"

        def fn() -> int:
            return ref.text_tokens(text, p)

    elif impl == "tiktoken":
        enc = peer.tiktoken_encoding()

        def fn() -> int:
            return len(enc.encode(text, disallowed_special=()))

    else:
        litellm = peer.module("litellm")

        def fn() -> int:
            return int(litellm.token_counter(model="gpt-4", text=text))

    n = measure(fn, group=group, impl=impl, profile=profile, bytes=len(text.encode()), slow=slow)
    assert n > 0
