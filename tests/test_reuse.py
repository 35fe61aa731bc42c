"""Work done once per call: ``fit`` counts each message once, ``ContextGuard.check``
converts each dict once across its steps (``_engine.reuse_conversions``), and nothing is
remembered between public calls.

The counts below are of calls into the adapters and the Rust estimator, observed by
wrapping them; the results are compared with the same calls made with the reuse turned
off, so the reuse changes how often work is done, never what comes out.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

import contextwindow as cw
from contextwindow import _engine
from contextwindow.budget import resolve_budget

from shared_data import corpus_files, ids, load, need

FILES = corpus_files()


def agent(turns: int) -> list[dict[str, Any]]:
    """A system prompt, then ``turns`` turns of: user, a tool call, its result (800
    characters), an answer; 1 + 4 * turns messages."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
    for t in range(turns):
        fn = {"name": "read_file", "arguments": f'{{"path": "f{t}.txt"}}'}
        out += [
            {"role": "user", "content": f"Question {t}: what is in f{t}.txt?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{t}", "type": "function", "function": fn}]},
            {"role": "tool", "tool_call_id": f"c{t}", "content": f"line {t}\n" * 100},
            {"role": "assistant", "content": f"It holds {t}."},
        ]
    return out


@contextlib.contextmanager
def counting_native(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Messages counted per call of the Rust estimator: ``count_messages`` (canonical
    JSON) and ``count_dicts`` (the dict reader, which counts the input of ``fit``)."""
    calls: list[int] = []
    real = _engine.native.count_messages
    real_dicts = _engine.native.count_dicts

    def spy(payload: bytes, profile: str) -> Any:
        out = real(payload, profile)
        calls.append(len(out))
        return out

    def spy_dicts(messages: Any, format: str | None, profile: str) -> Any:
        out = real_dicts(messages, format, profile)
        if out is not None:
            calls.append(len(out))
        return out

    class Native:
        def __getattr__(self, name: str) -> Any:
            return getattr(real_native, name)

        count_messages = staticmethod(spy)
        count_dicts = staticmethod(spy_dicts)

    real_native = _engine.native
    monkeypatch.setattr(_engine, "native", Native())
    yield calls


@pytest.mark.parametrize("fast", [True, False])
def test_fit_counts_each_message_once(fast: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    msgs = agent(30)  # 121 messages
    total = cw.count_messages(msgs, "fim")
    monkeypatch.setattr(_engine, "FAST_READER", fast)  # the dict reader, or the adapters
    with counting_native(monkeypatch) as calls:
        r = cw.fit(msgs, total // 2, profile="fim")
    assert r.report.dropped_messages > 0
    # the input in one call (121); then only messages fit makes itself (a breadcrumb,
    # a trial): before the fix the planner re-decoded the input and counted all 121
    # again one by one (242 and more)
    assert calls[0] == len(msgs)
    assert sum(calls) - calls[0] <= 3, calls


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("hint", ["general", "step_dependency"])
def test_guard_check_converts_each_dict_once(hint: str, fast: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    msgs = agent(30)
    total = cw.count_messages(msgs, "fim")
    seen: Counter[int] = Counter()
    real = _engine.openai_to_message
    reads: list[int] = []
    real_read = _engine.native.read_dicts

    def spy(d: Any, index: int = 0) -> Any:
        seen[id(d)] += 1
        return real(d, index)

    def spy_read(messages: Any, format: str | None) -> Any:
        reads.append(len(messages))
        return real_read(messages, format)

    class Native:
        def __getattr__(self, name: str) -> Any:
            return getattr(real_native, name)

        read_dicts = staticmethod(spy_read)

    real_native = _engine.native
    monkeypatch.setattr(_engine, "native", Native())
    monkeypatch.setattr(_engine, "openai_to_message", spy)
    monkeypatch.setattr(_engine, "FAST_READER", fast)
    g = cw.ContextGuard(resolve_budget(total, total // 2), profile="fim")
    r = g.check(msgs, hint=hint)
    # general: tool output, then old results cleared; step_dependency: tool output, then
    # history (each step prepares the list it gets)
    second = "history" if hint == "step_dependency" else "tool_results"
    assert r.changed and [s.step for s in r.steps] == ["tool_output", second]
    if fast:
        # the input is read once, in Rust; the adapters convert only dicts a step made
        # (a cleared result), each once
        assert reads == [len(msgs)]
        assert all(id(d) not in seen for d in msgs)
        assert not seen or max(seen.values()) == 1
    else:
        assert reads == []
        assert seen, "the guard did not convert through the spied adapter"
        assert max(seen.values()) == 1, f"{sum(v > 1 for v in seen.values())} dicts converted more than once"


def test_nothing_is_remembered_between_calls() -> None:
    msgs = [{"role": "user", "content": "abcdefgh"}]
    g = cw.ContextGuard(resolve_budget(1000, 100), profile="fim")
    assert g.check(msgs).tokens_after == 4 + 2  # fim: 4 per message + 8 // 4
    msgs[0]["content"] = "abcdefgh" * 4  # the caller edits the same dict
    assert g.check(msgs).tokens_after == 4 + 8
    with _engine.reuse_conversions():
        first = _engine.prepare(msgs)
        assert _engine.prepare(list(msgs)).canonical[0] is first.canonical[0]
    assert _engine.prepare(msgs).canonical[0] is not first.canonical[0]


def _plain(result: Any) -> bytes:
    return msgspec.json.encode([result.messages, result.steps, result.events, result.tokens_after])


@pytest.mark.parametrize("path", need(FILES, "../shared/corpus"), ids=ids(FILES) or None)
def test_guard_results_equal_without_reuse(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = load(path)
    fmt, msgs = doc["format"], doc["messages"]
    total = cw.count_messages(msgs, format=fmt)
    outs = []
    for reuse in (True, False):
        if not reuse:
            monkeypatch.setattr(_engine, "reuse_conversions", contextlib.nullcontext)
        for share in (2, 4):
            g = cw.ContextGuard(resolve_budget(max(total, 8), max(total, 8) - max(total, 8) // share))
            try:
                outs.append(_plain(g.check(msgs, format=fmt)))
            except cw.ContextOverflowError as exc:
                outs.append(_plain(exc.result))  # type: ignore[attr-defined]
    assert outs[:2] == outs[2:]
