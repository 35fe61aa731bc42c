"""The engine releases the GIL; concurrent calls on shared inputs give the single-thread
results (no timing is asserted: speed lives in benches/).

Every test runs the same calls once in this thread, then from 8 threads at once on the
very same input objects (corpus conversations as dicts, generated canonical
conversations, a large generated agent conversation, large strings), and compares the
results. A pool that does not finish within ``TIMEOUT`` seconds fails the
test instead of hanging it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import contextwindow as cw

from shared_data import corpus_files, load
from strategies import PIECES, case

THREADS = 8
TIMEOUT = 120
PROFILES = ["conservative", "cl100k", "tekken", "fim", "bytes4"]
T = TypeVar("T")


def in_threads(fn: Callable[[T], Any], items: Sequence[T]) -> list[Any]:
    """``[fn(x) for x in items]``, from ``THREADS`` threads at once (``TimeoutError`` after
    ``TIMEOUT`` seconds; the pool is then abandoned rather than waited for)."""
    pool = ThreadPoolExecutor(max_workers=THREADS)
    try:
        return list(pool.map(fn, items, timeout=TIMEOUT))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def count_and_trim(msgs: Any, fmt: str | None = None) -> tuple[Any, ...]:
    """The count, per-message counts, and a trim to a third of the count (messages and
    report; compared by value, as msgspec Structs and dicts compare)."""
    n = cw.count_messages(msgs, format=fmt)
    r = cw.trim_turns(msgs, n // 3, format=fmt)
    return n, cw.message_tokens(msgs, "fim", format=fmt), r.report, r.messages


def test_eight_threads_agree_with_one_on_the_corpus() -> None:
    files = corpus_files()
    if not files:
        pytest.skip("../shared/corpus not found beside the repo")
    convs = [(d["messages"], d["format"]) for d in map(load, files)]
    work = [convs[i % len(convs)] for i in range(len(convs) * 3)]
    expected = [count_and_trim(msgs, fmt) for msgs, fmt in work]
    assert in_threads(lambda c: count_and_trim(*c), work) == expected
    # format auto-detected, every thread on the same list
    expected = [count_and_trim(msgs) for msgs, _ in convs]
    assert in_threads(lambda i: count_and_trim(convs[i % len(convs)][0]), range(len(convs))) == expected


@settings(max_examples=max(1, settings().max_examples // 10))
@given(st.lists(case(), min_size=1, max_size=12))
def test_eight_threads_agree_with_one_on_generated_conversations(cases: list[tuple[str, list[cw.Message]]]) -> None:
    # each with its provider: two system messages are Anthropic's fault, and a list of
    # structs read without one can be taken for Anthropic's (a result in a user message)
    work = cases * 4
    expected = [count_and_trim(msgs, fmt) for fmt, msgs in work]
    assert in_threads(lambda c: count_and_trim(c[1], c[0]), work) == expected


def agent_conversation(seed: int, turns: int) -> list[dict[str, Any]]:
    """A large OpenAI agent conversation: a system prompt, then turns of a user request,
    parallel tool calls answered in shuffled order with results of up to a few KB, and an
    answer; texts mix ASCII, CJK, hangul, emoji and combining marks."""
    rnd = random.Random(seed)

    def text(lo: int, hi: int) -> str:
        return "".join(rnd.choice(PIECES) for _ in range(rnd.randint(lo, hi))).replace("\ud83d", "?")

    msgs: list[dict[str, Any]] = [{"role": "system", "content": text(5, 40)}]
    for t in range(turns):
        msgs.append({"role": "user", "content": text(1, 60)})
        for step in range(rnd.randint(0, 3)):
            ids = [f"call_{t}_{step}_{k}" for k in range(rnd.randint(1, 3))]
            calls = [
                {"id": i, "type": "function", "function": {"name": "read_file", "arguments": f'{{"path": "{i}"}}'}}
                for i in ids
            ]
            msgs.append({"role": "assistant", "content": None, "tool_calls": calls})
            rnd.shuffle(ids)
            msgs.extend({"role": "tool", "tool_call_id": i, "content": text(0, 600)} for i in ids)
        msgs.append({"role": "assistant", "content": text(1, 80)})
    msgs.append({"role": "user", "content": text(1, 30)})
    return msgs


def test_eight_threads_agree_with_one_on_a_large_agent_conversation() -> None:
    msgs = agent_conversation(7, 150)
    assert len(msgs) > 600
    budgets = [0, 100, 1_000, 5_000, 20_000, 50_000, 100_000, 10**9]

    def work(budget: int) -> bytes:
        r = cw.trim_turns(msgs, budget)
        assert not cw.validate(r.messages, "openai")
        return msgspec.json.encode([cw.count_messages(msgs), r.report, r.messages])  # plain JSON: no surrogates

    expected = [work(b) for b in budgets]
    assert in_threads(work, budgets * 3) == expected * 3


def test_eight_threads_agree_with_one_on_large_strings() -> None:
    rnd = random.Random(11)
    texts = [
        "The quick brown fox jumps over the lazy dog. " * 40_000,
        "".join(rnd.choice(PIECES) for _ in range(150_000)),
        "你好世界\uff0c日本語のテキスト。한국어 문장! " * 20_000,
        "\U0001f468\u200d\U0001f469\u200d\U0001f467\U0001f44d\U0001f3fd" * 50_000,
    ]
    files = corpus_files()
    if files:
        texts.append("\n".join(str(load(f)["messages"]) for f in files))
    work = [(t, p) for t in range(len(texts)) for p in PROFILES]
    expected = [cw.estimate_tokens(texts[t], p) for t, p in work]
    assert in_threads(lambda tp: cw.estimate_tokens(texts[tp[0]], tp[1]), work * 2) == expected * 2
