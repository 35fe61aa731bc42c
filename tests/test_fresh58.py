"""Session 38: fresh53 #1 (a user message of no words is no request) and fresh58's
findings (a tester on a fresh clone), each with its failing input."""

from __future__ import annotations

import json
from typing import Any

import pytest

import contextwindow as cw
from contextwindow import _reference as ref
from contextwindow.compact import prune_middle

TASK = "Refactor the parser module and add tests. " * 30  # 335 tokens with its message
BLANKS: list[Any] = ["", " ", "\n", "\u200b", [], [{"type": "text", "text": ""}], [{"type": "text", "text": " \n"}]]


def u(c: Any) -> dict[str, Any]:
    return {"role": "user", "content": c}


def a(c: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": c}


@pytest.mark.parametrize("blank", BLANKS)
def test_fresh53_1_a_user_message_of_no_words_is_no_request(blank: Any) -> None:
    # it was the current request: the task before it was an old turn, dropped whole, and
    # the output ([system, breadcrumb, ""], 29 tokens) asked nothing, fits=True
    m = [{"role": "system", "content": "You are an agent."}, u(TASK), a("Working on it."), u(blank)]
    seg = cw.segment_turns(m)
    assert (seg.turns, seg.current_request) == ([(1, 4)], 1)
    assert ref.segment(cw.adapters.to_canonical(m)).turns == [(1, 4)]
    r = cw.trim_turns(m, 300)
    assert r.report.fits and 298 <= r.report.tokens_after <= 300 and not r.report.breadcrumb
    assert [(f.index, f.rule) for f in r.report.fates] == [
        (0, "preamble"),
        (1, "request_truncated"),
        (2, "kept_turn"),
        (3, "kept_turn"),
    ]
    # the task is cut as a request is: its head and tail, one marker between
    kept = r.messages[1]["content"]
    assert kept.startswith("Refactor the parser") and kept.endswith("add tests. ") and "characters removed" in kept
    assert r.messages[0] is m[0] and r.messages[2:] == m[2:]
    # fit keeps the task too (P0, cut less: it evicts the reply and the blank, P1)
    f = cw.fit(m, 300)
    assert f.report.fits and [x.rule for x in f.report.fates] == [
        "preamble",
        "request_truncated",
        "p1_evicted",
        "p1_evicted",
    ]
    assert f.messages[1]["content"].startswith("Refactor the parser") and not f.report.breadcrumb
    # the gateway and the reference engine read it as trim_turns does
    out, rep = cw.fit_request(json.dumps({"model": "x", "messages": m}).encode(), budget=300, report=True)
    assert json.loads(out)["messages"] == r.messages and rep.report == r.report
    py = cw.trim_turns(m, 300, token_counter=lambda ms: cw.count_messages(ms))
    assert py.messages == r.messages and py.report == r.report


def test_fresh53_1_a_blank_message_after_a_tool_unit_is_no_request() -> None:
    # [system, task, call, result, ""] at 300 gave [system, breadcrumb, ""], 29 tokens
    call = {"id": "a", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    m = [
        {"role": "system", "content": "You are an agent."},
        u(TASK),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "a", "content": "x " * 300},
        u(""),
    ]
    seg = cw.segment_turns(m)
    assert (seg.turns, seg.units, seg.current_request) == ([(1, 5)], [[2, 3]], 1)
    r = cw.trim_turns(m, 300)
    assert r.report.fits and r.report.tokens_after == 300
    rules = [(f.index, f.rule) for f in r.report.fates]
    assert rules == [
        (0, "preamble"),
        (1, "request_truncated"),
        (2, "kept_turn"),
        (3, "tool_result_shrunk"),
        (4, "kept_turn"),
    ]
    assert r.messages[1]["content"].startswith("Refactor") and r.messages[4] is m[4]


def _thinking_loop() -> list[dict[str, Any]]:
    th = {"type": "thinking", "thinking": "plan", "signature": "s"}

    def call(i: str) -> dict[str, Any]:
        return {"type": "tool_use", "id": i, "name": "ls", "input": {}}

    def res(i: str, t: str) -> dict[str, Any]:
        return {"type": "tool_result", "tool_use_id": i, "content": t}

    # a zero-width message, the only blank the Messages API takes (the others are
    # empty_content), after which the thinking tool loop runs
    return [
        u("Fix the failing build. " * 20),
        a("ok"),
        u("\u200b"),
        a([th, call("c1")]),
        u([res("c1", "log line\n" * 200)]),
        a([th, call("c2")]),
        u([res("c2", "more\n" * 200)]),
    ]


def test_fresh53_1_the_api_ends_a_thinking_turn_at_a_message_of_no_words() -> None:
    # no turn of ours (the task is the request), but the Messages API's: its final
    # assistant turn starts after the blank, with a thinking block, so the input is valid
    m = _thinking_loop()
    assert cw.validate(m, "anthropic") == []
    seg = cw.segment_turns(m, format="anthropic")
    assert (seg.turns, seg.current_request) == ([(0, 7)], 0)
    can = cw.adapters.to_canonical(m, format="anthropic")
    assert ref.thinking_turn_start(can) == 3 and ref.thinking_anchor(can, "anthropic") == 3
    # without the blank the final turn starts at "ok", which has no thinking block
    assert "thinking_not_first" in [v.code for v in cw.validate([*m[:2], *m[3:]], "anthropic")]
    for budget in (900, 400, 200):
        for r in (
            cw.trim_turns(m, budget, format="anthropic"),
            cw.fit(m, budget, format="anthropic"),
            cw.fit(m, budget, cw.FitPolicy(priorities={1: 0}), format="anthropic"),
            prune_middle(m, budget, keep_recent=0, format="anthropic"),
        ):
            assert cw.validate(r.messages, "anthropic") == [], budget
            assert r.messages[0]["content"].startswith("Fix the failing build.")
            assert u("\u200b") in r.messages and any(x["content"] == "ok" for x in r.messages)
    # fit holds the blank as it holds the thinking message: evicted, the API's final
    # turn would begin at "ok"
    f = cw.fit(m, 400, format="anthropic")
    assert f.report.fits and [(x.index, x.rule) for x in f.report.fates][1:4] == [
        (1, "kept"),
        (2, "thinking_block"),
        (3, "thinking_block"),
    ]


# --------------------------------------------------------------------------- fresh58's findings


def test_fresh58_nit2_the_guards_documented_errors() -> None:
    guard = cw.ContextGuard(context_window=8000, max_output_tokens=2000)
    with pytest.raises(TypeError, match="callback must be callable, got int"):
        guard.subscribe(3)  # type: ignore[arg-type]
    for bad in (-1, 1.5, True, None, "3"):
        with pytest.raises(ValueError, match="prompt_tokens must be a non-negative int"):
            guard.record_usage(bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="completion_tokens must be a non-negative int"):
            guard.record_usage(1, bad)  # type: ignore[arg-type]
    assert (guard.stats.prompt_tokens, guard.stats.completion_tokens) == (0, 0)  # nothing half-added
    guard.record_usage(1200, 300)
    guard.record_usage(800)
    assert (guard.stats.prompt_tokens, guard.stats.completion_tokens) == (2000, 300)


def test_fresh58_nit3_inner_arrays_must_be_lists() -> None:
    # README, at a glance: a tuple is taken for the messages, not inside a message
    m = [{"role": "user", "content": "hi"}]
    assert cw.count_messages(tuple(m)) == cw.count_messages(m)
    with pytest.raises(cw.InvalidMessageError, match="message 0, field content: must be a string or a list of blocks"):
        cw.count_messages([{"role": "user", "content": ({"type": "text", "text": "hi"},)}])
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    with pytest.raises(cw.InvalidMessageError, match="message 1, field tool_calls: must be a list or null"):
        cw.count_messages([m[0], {"role": "assistant", "content": None, "tool_calls": (call,)}])


SNIPPET = """
import contextwindow as cw

def gateway(body: bytearray, flag: bool) -> int:
    n = cw.count_request(body)
    cw.fit_request(memoryview(bytes(body)), budget=10)
    either = cw.fit_request(body, budget=10, report=flag)
    only: bytes = cw.fit_request(bytes(body), budget=10)
    pair: tuple[bytes, cw.RequestReport] = cw.fit_request(bytes(body), budget=10, report=True)
    b = cw.resolve_budget(8000, 1000)
    cw.fit([{"role": "user", "content": "x"}], b)
    cw.trim_turns([{"role": "user", "content": "x"}], b)
    return n + cw.count_messages([], tools=({"type": "function", "function": {"name": "f"}},))
"""


def test_fresh58_low1_to_3_the_type_hints_take_what_the_docs_say(tmp_path: Any) -> None:
    # mypy --strict refused each call: bytearray/memoryview bodies (LOW-1), report=bool
    # (LOW-2), a Budget for fit/trim_turns (LOW-3), tools as a tuple (nit-1)
    api = pytest.importorskip("mypy.api")
    path = tmp_path / "snippet.py"
    path.write_text(SNIPPET)
    out, err, status = api.run(["--strict", "--no-incremental", "--config-file", "", str(path)])
    assert status == 0, out + err
    # and they all run
    ns: dict[str, Any] = {}
    exec(compile(SNIPPET, str(path), "exec"), ns)
    assert ns["gateway"](bytearray(b'{"messages": []}'), False) == 24


def test_fresh53_5_an_observation_right_after_a_tool_unit_goes_with_it() -> None:
    # trim_turns dropped the unit and the newer step, and kept the observation, cut, right
    # after the task (command output with no command); fit grouped it with the next step
    def big(n: int) -> str:
        return "[Tool results]\n" + "line of output\n" * n

    call = {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    m = [
        u("TASK"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "a", "content": "r" * 3000},
        u(big(200)),
        a("cmd"),
        u(big(200)),
        a("cmd"),
        u(big(20)),
    ]
    assert cw.message_tokens(m) == [7, 37, 992, 792, 5, 792, 5, 87]
    seg = cw.segment_turns(m)
    assert (seg.turns, seg.units) == ([(0, 8)], [[1, 2, 3]])
    assert ref.segment(cw.adapters.to_canonical(m)).units == [[1, 2, 3]]
    # the unit goes whole, observation included, before any newer step: 7 + 797 + 92
    r = cw.trim_turns(m, 1000)
    assert (r.report.fits, r.report.tokens_after) == (True, 896)
    assert [f.index for f in r.report.fates if f.fate == "dropped"] == [1, 2, 3]
    assert r.messages == [m[0], *m[4:]]
    # at 700 the older step goes too; nothing is cut
    r = cw.trim_turns(m, 700)
    assert (r.report.tokens_after, r.messages) == (99, [m[0], *m[6:]])
    # fit evicts the same unit first (at 1,500: 896 is under its low-water mark, 0.8)
    f = cw.fit(m, 1500)
    assert f.report.tokens_after == 896 and f.messages == [m[0], *m[4:]]
    # a screenshot after such an observation joins the unit too
    shot = u([{"type": "image_url", "image_url": {"url": "https://x/s.png", "detail": "low"}}])
    assert cw.segment_turns([*m[:4], shot, *m[4:]]).units == [[1, 2, 3, 4]]


def test_fresh57_4_the_cut_across_counts_capped_parts_as_given() -> None:
    # the marker named 179,158 characters for 294 parts of 178,866: one too many for each
    # part the 50,000-character cap had cut (its marker's line breaks)
    lines = ["\n".join(f"row {i}.{j} status ok" for j in range(30)) for i in range(300)]
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    msgs = [
        {"role": "system", "content": "sys"},
        u("go"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": t} for t in lines]},
    ]
    out = cw.budget_tool_results(msgs, 1000).messages[-1]["content"]
    assert len(out) == 7 and out[3]["text"] == "[... 178866 characters (8820 lines) removed ...]"
    assert sum(len(t) for t in lines[3:297]) == 178866
    assert sum(t.count("\n") + 1 for t in lines[3:297]) == 8820
