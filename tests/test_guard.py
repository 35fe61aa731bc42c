"""ContextGuard (issue 5 item 7): steps in the seeds' order, events, stats, hints, recovery,
capacity, threads, and the corpus invariants.

Costs use the ``fim`` profile so every number can be checked by hand: a message costs 4
tokens plus, per text, ASCII characters // 4 (at least 1); a tool call costs its name and
its arguments as two texts (``read_file`` 9 // 4 = 2, ``{}`` -> 1: 4 + 2 + 1 = 7;
``bash`` 4 // 4 = 1: 4 + 1 + 1 = 6).
"""

from __future__ import annotations

import copy
import re
import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

import contextwindow as cw
from contextwindow.budget import resolve_budget
from contextwindow.guard import (
    ContextGuard,
    HistoryTrimmed,
    MessageTruncated,
    MiddlePruned,
    OverflowRecovered,
    ToolResultsCleared,
    ToolResultTruncated,
    hint_priorities,
)

from shared_data import PAIRING, corpus_files, ids, load, need
from strategies import case

FILES = corpus_files()


def call(i: int, name: str) -> dict[str, Any]:
    fn = {"name": name, "arguments": "{}"}
    return {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function", "function": fn}]}


def res(i: int, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"c{i}", "content": text}


def agent() -> list[dict[str, Any]]:
    """Three turns; costs (fim): [14, 14, 7, 1004, 14, 14, 6, 1004, 14, 14] = 2,105."""
    return [
        {"role": "system", "content": "s" * 40},  # 4 + 10
        {"role": "user", "content": "u" * 40},  # 14
        call(1, "read_file"),  # 7
        res(1, "x" * 4000),  # 4 + 1000
        {"role": "assistant", "content": "a" * 40},  # 14
        {"role": "user", "content": "v" * 40},  # 14
        call(2, "bash"),  # 6
        res(2, "y" * 4000),  # 1004
        {"role": "assistant", "content": "b" * 40},  # 14
        {"role": "user", "content": "w" * 40},  # 14: the current request
    ]


def guard(window: int, output: int, **kw: Any) -> ContextGuard:
    return ContextGuard(resolve_budget(window, output), profile="fim", **kw)


def test_agent_costs_are_what_the_module_docstring_says() -> None:
    assert cw.message_tokens(agent(), "fim") == [14, 14, 7, 1004, 14, 14, 6, 1004, 14, 14]


def test_under_budget_returns_the_input_objects_and_no_event() -> None:
    msgs = agent()
    g = guard(10_000, 1_000)  # usable 9,000 >= 2,105
    seen: list[Any] = []
    g.subscribe(seen.append)
    r = g.check(msgs, hint="react_iteration")
    assert all(a is b for a, b in zip(r.messages, msgs, strict=True)) and len(r.messages) == len(msgs)
    assert (r.fits, r.changed, r.tokens_before, r.tokens_after, r.budget) == (True, False, 2105, 2105, 9000)
    assert seen == [] and [s.step for s in r.steps] == ["tool_output"]
    assert g.stats.checks == 1 and g.stats.compactions == 0


def test_message_char_cap_first_seed() -> None:
    # 60,000 characters; the cap is 50,000 including the marker "\n[Truncated: 10038
    # characters removed]" (13 + 5 + 20 = 38 characters): head 49,962, removed 10,038.
    # The current request is never capped (a pasted log keeps the question at its end).
    msgs = [
        {"role": "system", "content": "s" * 40},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "a" * 60_000},
        {"role": "user", "content": "q" * 60_000},
    ]
    g = guard(1_000_000, 1_000)
    r = g.check(msgs)
    [e] = r.events
    assert isinstance(e, MessageTruncated)
    # before 14 + (4 + 0 -> 1: "go" 2 // 4 = 0, at least 1) 5 + 15,004 + 15,004 = 30,027;
    # after the assistant text is 4 + 50,000 // 4 = 12,504: 30,027 - 2,500 = 27,527
    assert (e.messages, e.chars_removed, e.tokens_before, e.tokens_after) == (1, 10_038, 30_027, 27_527)
    assert r.messages[2]["content"] == "a" * 49_962 + "\n[Truncated: 10038 characters removed]"
    assert r.messages[3] is msgs[3]
    assert g.stats.messages_truncated == 1


def test_single_tool_result_over_half_the_window_is_cut() -> None:
    # window 2,000: a result may take 1,000 tokens; res 1 costs 1,004. The character cap is
    # off so only the share rule acts.
    msgs = agent()[:4]
    g = guard(2_000, 100, max_message_chars=None)
    r = g.check(msgs)
    [e] = r.events
    assert isinstance(e, ToolResultTruncated) and e.results == 1 and e.chars_removed > 0
    assert cw.message_tokens([r.messages[3]], "fim")[0] <= 1_000
    assert g.stats.tool_results_cut == 1
    assert cw.validate(r.messages, "openai") == []


def test_over_budget_clears_old_output_heavy_results_to_the_low_water_mark() -> None:
    # window 3,000 - output 1,400 = budget 1,600 < 2,105; low water 0.7 * 1,600 = 1,120.
    # Clearing the oldest output-heavy result (read_file, turn 1) leaves the marker
    # "[tool result cleared: 4000 characters of read_file output]" (58 chars: 4 + 14):
    # 2,105 - 1,004 + 18 = 1,119 <= 1,120, so bash's result (turn 2) stays.
    msgs = agent()
    g = guard(3_000, 1_400, keep_recent_results=0)
    events: list[Any] = []
    g.subscribe(events.append)
    r = g.check(msgs, hint="general")
    [e] = r.events
    assert events == [e]
    assert isinstance(e, ToolResultsCleared)
    assert (e.step, e.reason, e.results, e.tokens_before, e.tokens_after) == (
        "tool_results",
        "token_budget",
        1,
        2105,
        1119,
    )
    assert r.messages[3]["content"] == "[tool result cleared: 4000 characters of read_file output]"
    assert all(r.messages[i] is msgs[i] for i in range(10) if i != 3)
    assert (r.tokens_after, r.fits) == (1119, True)
    assert g.stats.tool_results_cleared == 1 and g.stats.compactions == 1


def test_hint_priorities_move_only_derived_classes_before_the_newest_turn() -> None:
    msgs = agent()
    # derived: preamble and current request P0; turn 2 and the current turn are the 2
    # recent turns (P1); turn 1's user message P2, its tool unit and 14-token chatter P3
    assert hint_priorities(msgs, "general", profile="fim") == [0, 2, 3, 3, 3, 1, 1, 1, 1, 0]
    assert hint_priorities(msgs, "react_iteration", profile="fim") == [0, 2, 3, 3, 3, 1, 1, 1, 1, 0]
    # planner_input: user messages at least P1, tool calls/results P3
    assert hint_priorities(msgs, "planner_input", profile="fim") == [0, 1, 3, 3, 3, 1, 3, 3, 1, 0]
    # step_dependency: tool calls/results at least P2, assistant text P3
    assert hint_priorities(msgs, "step_dependency", profile="fim") == [0, 2, 2, 2, 3, 1, 1, 1, 3, 0]
    pinned = cw.FitPolicy(priorities={1: 3})
    assert hint_priorities(msgs, "planner_input", pinned, profile="fim")[1] == 3  # explicit stays
    with pytest.raises(ValueError, match="unknown hint"):
        hint_priorities(msgs, "chat")


def test_hint_priorities_read_the_input_as_the_caller_asked() -> None:
    # OpenAI structs with two system messages and a tool result in a user message (an
    # orphan: no call c1): hint_priorities segmented the structs again without the
    # format, auto-detection read them as Anthropic's and refused the second system
    # message (InvalidMessageError), in check and recover with a moving hint too. Read as
    # OpenAI's: message 2 carries a result, so "x" opens the first turn and "go" the
    # newest; before it, planner_input makes the carrier P3, step_dependency the
    # assistant texts P3 and keeps the carrier at P2 (fit's classes: repair removes the
    # orphan, so message 2 opens an older turn, P2).
    M, T = cw.Message, cw.TextPart
    msgs = [
        M(role="system", content=[T(text="a")]),
        M(role="system", content=[T(text="b")]),
        M(role="user", content=[T(text="q"), cw.ToolResult(call_id="c1", content=[T(text="r")])]),
        M(role="assistant", content=[T(text="a" * 200)]),
        M(role="user", content=[T(text="x")]),
        M(role="assistant", content=[T(text="y")]),
        M(role="user", content=[T(text="go")]),
    ]
    assert cw.priorities(msgs, format="openai") == [0, 0, 2, 2, 1, 1, 0]
    assert hint_priorities(msgs, "planner_input", format="openai") == [0, 0, 3, 2, 1, 1, 0]
    assert hint_priorities(msgs, "step_dependency", format="openai") == [0, 0, 2, 3, 1, 3, 0]
    g = ContextGuard(resolve_budget(2_000, 0, floor=0, env={}), profile="fim")
    assert g.recover(msgs, hint="planner_input", format="openai").events


def test_step_dependency_keeps_tool_results_and_trims_history_instead() -> None:
    # step 2 (clearing tool results) is skipped for step_dependency; the history step
    # evicts by the hint's classes down to 1,120: P3 first, oldest first: message 4
    # (14) and message 8 (14): 2,077; then P2, oldest first, a turn's tool units before
    # the turn itself: read_file's unit (7 + 1,004): 2,077 - 1,011 = 1,066 <= 1,120; then
    # messages 8 and 4 are put back, the last evicted first: 1,080, 1,094 <= 1,120
    # (fresh33 #1). Turn 1's user message stays (no breadcrumb: no whole turn went).
    msgs = agent()
    g = guard(3_000, 1_400)
    r = g.check(msgs, hint="step_dependency")
    [e] = r.events
    assert isinstance(e, HistoryTrimmed) and e.hint == "step_dependency"
    assert (e.tokens_before, e.tokens_after, e.dropped_messages) == (2105, 1094, 2)
    assert [m.get("content") for m in r.messages] == [
        "s" * 40,
        "u" * 40,
        "a" * 40,
        "v" * 40,
        None,
        "y" * 4000,
        "b" * 40,
        "w" * 40,
    ]
    assert cw.validate(r.messages, "openai") == []


def test_capacity_exceeded_raises_before_the_request_is_sent() -> None:
    # trimming disabled (max_context_tokens=0); capacity 1,000 - 200 = 800; the request
    # costs 4 + 4,000 // 4 = 1,004: 204 over
    g = ContextGuard(resolve_budget(1_000, 200, max_context_tokens=0), profile="fim")
    with pytest.raises(cw.ContextOverflowError) as info:
        g.check([{"role": "user", "content": "z" * 4_000}])
    exc = info.value
    assert (exc.tokens, exc.capacity, exc.over) == (1004, 800, 204)
    assert exc.result.tokens_after == 1004 and g.stats.checks == 1  # type: ignore[attr-defined]


def test_recover_trims_to_two_thirds_then_stops() -> None:
    msgs = agent()
    g = guard(3_000, 1_400)
    r = g.recover(msgs)
    [e] = r.events
    # target 2,105 * 2 // 3 = 1,403: the oldest P3 unit (read_file, 7 + 1,004) goes:
    # 2,105 - 1,011 = 1,094 <= 1,403
    assert isinstance(e, OverflowRecovered)
    assert (e.target, e.tokens_before, e.tokens_after, e.dropped_messages) == (1403, 2105, 1094, 2)
    # recovery never loops: each call removes something or reports nothing; the
    # conversation always keeps its preamble and current request
    cur, calls = r.messages, 1
    while True:
        nxt = g.recover(cur)
        calls += 1
        assert calls < 20
        if not nxt.changed:
            break
        assert nxt.tokens_after < nxt.tokens_before
        cur = nxt.messages
    assert cur[0] is msgs[0] and cur[-1] is msgs[-1]
    assert g.stats.recoveries == calls


def test_events_arrive_in_step_order_and_unsubscribe_works() -> None:
    # bash's result is 60,000 characters (4 + 15,000 tokens): 16,105 in all.
    # Step 1: the character cap cuts it to 50,000 (4 + 12,500): 13,605, keeping its head
    # and tail: the widest marker "[... 60000 characters (1 line) removed ...]" (43, and
    # a line break each side) leaves 49,955 kept, 10,045 removed; the cut is inside the
    # one line, so the marker names no line (fresh15 #6): "[... 10045 characters removed
    # ...]", 34 characters, 49,991 in all; the 9 left over are kept too: 24,982 "y"
    # each side of "[... 10036 characters removed ...]"; 12,504 is under
    # half the 26,000 window and 13,605 under 75% of it, so nothing else in step 1.
    # Budget 26,000 - 13,000 = 13,000 < 13,605: step 2 clears down to 0.7 * 13,000 =
    # 9,100: read_file's result (1,004 -> 18, "[tool result cleared: 4000 characters of
    # read_file output]"): 12,619; then bash's (12,504 -> 17, "[tool result cleared:
    # 60001 characters of bash output]", 54 chars): 132.
    msgs = agent()
    msgs[7] = res(2, "y" * 60_000)
    g = guard(26_000, 13_000, keep_recent_results=0)
    seen: list[Any] = []
    stop = g.subscribe(seen.append)
    r = g.check(msgs)
    assert seen == r.events
    first, second = r.events
    assert isinstance(first, MessageTruncated) and isinstance(second, ToolResultsCleared)
    assert (first.step, first.tokens_before, first.tokens_after, first.chars_removed) == (
        "tool_output",
        16105,
        13605,
        10036,
    )
    assert (second.step, second.tokens_before, second.tokens_after, second.results) == ("tool_results", 13605, 132, 2)
    # the marker names the output the cut result stands for (fresh27 #4: it named the
    # 50,000 the cap left): the 60,000 "y", plus the line break the cap's cut put before
    # its marker in the one long line (README: counted as a character)
    assert r.messages[7]["content"] == "[tool result cleared: 60001 characters of bash output]"
    stop()
    g.check(msgs)
    assert len(seen) == 2
    s = g.stats
    assert (s.checks, s.compactions, s.messages_truncated, s.tool_results_cleared) == (2, 2, 2, 4)


def test_record_usage_and_bad_arguments() -> None:
    g = guard(8_000, 2_000)
    g.record_usage(1_200, 300)
    g.record_usage(800)
    assert (g.stats.prompt_tokens, g.stats.completion_tokens) == (2_000, 300)
    with pytest.raises(ValueError, match="prompt_tokens"):
        g.record_usage(-1)
    with pytest.raises(ValueError, match="unknown hint"):
        g.check(agent(), hint="planner")
    with pytest.raises(TypeError, match="Budget"):
        ContextGuard(6000)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown profile"):
        ContextGuard(context_window=8_000, max_output_tokens=2_000, profile="gpt")
    with pytest.raises(cw.InvalidMessageError):
        g.check([{"role": "user", "content": 5}])


def test_input_is_never_mutated() -> None:
    msgs = agent()
    msgs[7] = res(2, "y" * 60_000)
    before = copy.deepcopy(msgs)
    g = guard(3_000, 1_400)
    g.check(msgs)
    g.recover(msgs)
    assert msgs == before


def test_eight_threads_share_one_guard() -> None:
    msgs = agent()
    g = guard(3_000, 1_400)
    want = msgspec.json.encode(g.check(msgs).messages)
    got: list[bytes] = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(10):
            out = msgspec.json.encode(g.check(msgs).messages)
            with lock:
                got.append(out)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert got == [want] * 80
    assert g.stats.checks == 81 and g.stats.compactions == 81


def test_growing_conversation_keeps_a_stable_prefix() -> None:
    """With the low-water mark, consecutive checks of a growing conversation send the
    same prefix far more often than trimming to the budget exactly."""

    def run(low_water: float) -> int:
        g = ContextGuard(resolve_budget(3_000, 1_000), profile="fim", policy=cw.FitPolicy(low_water=low_water))
        msgs: list[dict[str, Any]] = [{"role": "system", "content": "s" * 40}]
        prev: list[Any] | None = None
        stable = 0
        for k in range(40):
            msgs = [*msgs, {"role": "user", "content": f"question {k} " + "q" * 200}]
            r = g.check(msgs)
            out = r.messages
            if prev is not None and out[: len(prev)] == prev:
                stable += 1
            prev = out
            msgs = [*out, {"role": "assistant", "content": f"answer {k} " + "a" * 400}]
        return stable

    low, exact = run(0.7), run(1.0)
    assert low > exact


@pytest.mark.parametrize("hint", ["react_iteration", "planner_input", "step_dependency", "general"])
@pytest.mark.parametrize("path", need(FILES, "../shared/corpus"), ids=ids(FILES) or None)
def test_guard_on_corpus(path: Path, hint: str) -> None:
    doc = load(path)
    fmt, msgs = doc["format"], doc["messages"]
    before = msgspec.json.encode(msgs)
    total = cw.count_messages(msgs, "conservative", format=fmt)
    g = ContextGuard(resolve_budget(max(total, 8) * 3 // 4, max(total, 8) // 4))  # budget half the estimate
    try:
        r = g.check(msgs, hint=hint, format=fmt)
    except cw.ContextOverflowError as exc:
        r = exc.result  # type: ignore[attr-defined]
    out = r.messages
    assert msgspec.json.encode(msgs) == before, "input mutated"
    assert out and cw.validate(out, fmt, format=fmt) == []
    seg = cw.segment_turns(msgs, format=fmt)
    assert all(a is b for a, b in zip(out[: seg.preamble_end], msgs[: seg.preamble_end], strict=True))
    assert r.tokens_after == cw.count_messages(out, format=fmt)
    if seg.current_request is not None:
        out_seg = cw.segment_turns(out, format=fmt)
        assert out_seg.current_request is not None


@pytest.mark.parametrize("hint", ["planner_input", "step_dependency"])
def test_hints_keep_the_pinned_share_rule(hint: str) -> None:
    # costs (fim): 4 + 240 // 4 = 64 (pinned), 4 + 160 // 4 = 44, 64 (pinned), 44, 14:
    # 230 > budget 200. Pinned 64 + 64 = 128 > 50% of 200 = 100: the oldest pinned
    # message (0) is unpinned, then 64 <= 100. Before the fix the hints turned every class
    # into an override, pinned messages became class-0 overrides and were never unpinned.
    msgs = [
        {"role": "user", "content": "p" * 240},
        {"role": "assistant", "content": "a" * 160},
        {"role": "user", "content": "q" * 240},
        {"role": "assistant", "content": "b" * 160},
        {"role": "user", "content": "w" * 40},
    ]
    g = ContextGuard(resolve_budget(200, 0, floor=0, env={}), profile="fim", policy=cw.FitPolicy(pinned=(0, 2)))
    r = g.check(msgs, hint=hint, format="openai")  # the breadcrumb a message of its own
    fates = r.steps[-1].report.fates
    assert (fates[0].fate, fates[0].rule) == ("dropped", "unpinned_over_share")
    assert (fates[2].fate, fates[2].rule) == ("kept", "pinned")
    assert r.messages[-1] is msgs[-1] and msgs[2] in r.messages
    assert r.tokens_after <= 140  # the low-water mark: 200 * 0.7


def test_tool_results_step_clears_to_the_target_exactly() -> None:
    # costs (fim): user 4 + 8 // 4 = 6; bash calls 6; results 4 + 1,600 // 4 = 404 and
    # 4 + 216 // 4 = 58; request 4 + 4 // 4 = 5: 485. Budget 98, low_water 1.0: target 98.
    # A cleared result is 4 + 53 // 4 = 17 ("[tool result cleared: 1600 characters of
    # bash output]", 53 characters): clearing the first gives 485 - 404 + 17 = 98 <= 98,
    # so the second stays. (98 / 3,000 * 3,000 is 97.99...: the step used to clear to 97.)
    msgs = [
        {"role": "user", "content": "u" * 8},
        call(1, "bash"),
        res(1, "x" * 1_600),
        call(2, "bash"),
        res(2, "y" * 216),
        {"role": "user", "content": "w" * 4},
    ]
    b = resolve_budget(3_000, 0, max_context_tokens=98, floor=0, env={})
    r = ContextGuard(b, profile="fim", policy=cw.FitPolicy(low_water=1.0), keep_recent_results=0).check(msgs)
    [e] = r.events
    assert isinstance(e, ToolResultsCleared) and (e.results, e.tokens_before, e.tokens_after) == (1, 485, 98)
    assert r.messages[4] is msgs[4] and r.fits


def test_target_zero_still_runs_every_step() -> None:
    # budget 1 token (max_context_tokens=1, floor 0): the low-water target is
    # int(1 * 0.7) = 0. Costs (fim): 14 + 6 + 104 + 14 + 14 = 152; the bash result
    # clears to 4 + 52 // 4 = 17: 65; the history step keeps only the request (14), not
    # the breadcrumb (4 + 50 // 4 = 16: neither result fits, the smaller comes back,
    # fresh14 #7; it kept it, 30), over the budget but under the capacity 1,000, so no
    # ContextOverflowError (it used to raise ValueError on a 0 share).
    msgs = [
        {"role": "user", "content": "u" * 40},
        call(1, "bash"),
        res(1, "x" * 400),
        {"role": "assistant", "content": "a" * 40},
        {"role": "user", "content": "w" * 40},
    ]
    b = resolve_budget(1_000, 0, max_context_tokens=1, floor=0, env={})
    r = ContextGuard(b, profile="fim", keep_recent_results=0).check(msgs)
    assert [type(e).__name__ for e in r.events] == ["ToolResultsCleared", "HistoryTrimmed"]
    assert [e.tokens_after for e in r.events] == [65, 14]
    assert [m["content"] for m in r.messages] == ["w" * 40]
    assert not r.fits


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"policy": cw.FitPolicy(low_water=2.0)}, ValueError, "low_water"),
        ({"policy": cw.FitPolicy(low_water=float("nan"))}, ValueError, "low_water"),
        ({"max_result_share": float("nan")}, ValueError, "max_result_share"),
        ({"max_total_share": 0}, ValueError, "max_total_share"),
        ({"max_message_chars": -1}, ValueError, "max_message_chars"),
        ({"output_heavy_tools": "bash"}, TypeError, "output_heavy_tools"),
        ({"protected_tools": [1]}, TypeError, "protected_tools"),
        ({"subscribers": [1]}, TypeError, "subscribers"),
        ({"subscribers": None}, TypeError, "subscribers"),
    ],
)
def test_bad_options_fail_when_the_guard_is_made(kwargs: dict[str, Any], exc: type[Exception], match: str) -> None:
    # these used to pass the constructor and fail (or, for a bare string of tool names,
    # silently match single letters) inside the first check that reached the step
    with pytest.raises(exc, match=match):
        ContextGuard(resolve_budget(8_000, 2_000, env={}), **kwargs)


def test_parallel_results_in_one_carrier_are_counted_per_result() -> None:
    # Anthropic: both results share one user message, so its one Fate cannot say that
    # one result was cut and the other cleared. Costs (fim): "read both" 4 + 9 // 4 = 6;
    # two Read calls 4 + 2 * (1 + 1) = 8; carrier 4 + 1,000 + 1,000 = 2,004; 5; 5: 2,028.
    # Window 1,500: each result alone (4 + 1,000) is over 750, so each is cut to k
    # characters + "\n[... N characters removed ...]\n" (35 characters with a 4-digit N;
    # no line count: the cut is inside the one line, fresh15 #6): 4 + (k + 35) // 4 <=
    # 750 -> k = 2,952, N = 1,048; the carrier is
    # 4 + 746 + 746 = 1,496 and the total 1,520 > 1,500 (share 1.0), so the older
    # result is cleared: "[tool result cleared: 2987 characters of Read output]" (53
    # characters, 13 tokens): 1,520 - 746 + 13 = 787. Before the fix the cut was lost
    # (no ToolResultTruncated, stats.tool_results_cut 0) and the cleared event said
    # 5,058 characters.
    msgs = [
        {"role": "user", "content": "read both"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "r1", "name": "Read", "input": {}},
                {"type": "tool_use", "id": "r2", "name": "Read", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "r1", "content": "x" * 4_000},
                {"type": "tool_result", "tool_use_id": "r2", "content": "y" * 4_000},
            ],
        },
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "next"},
    ]
    g = ContextGuard(resolve_budget(1_500, 0, floor=0, env={}), profile="fim", max_total_share=1.0)
    r = g.check(msgs)
    cut, cleared = r.events
    assert isinstance(cut, ToolResultTruncated) and (cut.results, cut.chars_removed) == (1, 1_048)
    assert isinstance(cleared, ToolResultsCleared) and (cleared.results, cleared.chars_removed) == (1, 4_000)
    assert cleared.tokens_after == 787
    assert (g.stats.tool_results_cut, g.stats.tool_results_cleared) == (1, 1)


def test_recover_applies_the_guards_policy() -> None:
    # costs (fim): 4 + 400 // 4 = 104 four times, then 14: 430; target 430 * 2 // 3 =
    # 286. The guard pins message 1 (dict input: FitPolicy.pinned). Turn 0 cannot go
    # whole and message 1 is P0, so the newer turn 1 (P1) goes: 430 - 208 + the
    # breadcrumb 16 = 238. recover() used to ignore the guard's policy and evict turn 0
    # with the pinned message in it.
    msgs = [
        {"role": "user", "content": "p" * 400},
        {"role": "assistant", "content": "a" * 400},
        {"role": "user", "content": "q" * 400},
        {"role": "assistant", "content": "b" * 400},
        {"role": "user", "content": "w" * 40},
    ]
    g = ContextGuard(resolve_budget(2_000, 0, floor=0, env={}), profile="fim", policy=cw.FitPolicy(pinned=(1,)))
    r = g.recover(msgs, format="openai")  # the breadcrumb a message of its own
    [e] = r.events
    assert isinstance(e, OverflowRecovered) and (e.target, e.tokens_after) == (286, 238)
    assert r.messages == [msgs[0], msgs[1], {"role": "user", "content": cw.BREADCRUMB}, msgs[4]]
    assert r.messages[1] is msgs[1]


def test_recover_prune_middle_keeps_policy_pinned_messages() -> None:
    # costs (fim): 4 + 400 // 4 = 104 four times, then 14: 430. Message 1 is P0 by
    # override and 3 is pinned (FitPolicy.pinned, dict input), so neither turn 0 nor turn
    # 1 can go whole and their opening user messages never go alone:
    # recover_from_overflow removes nothing and the middle is pruned. 5 messages,
    # N = min(6, 5 // 3) = 1, kept: the first user message 0, message 1 (class 0), the
    # pinned message 3 and the request 4; only message 2 (P1) goes. Notice (47
    # characters): 4 + 47 // 4 = 15; 104 + 104 + 15 + 104 + 14 = 341. prune_middle used
    # to see only Message.pinned and removed message 3; then it ignored the classes and
    # removed message 1 (fresh19 F2).
    msgs = [
        {"role": "user", "content": "p" * 400},
        {"role": "assistant", "content": "a" * 400},
        {"role": "user", "content": "q" * 400},
        {"role": "assistant", "content": "b" * 400},
        {"role": "user", "content": "w" * 40},
    ]
    policy = cw.FitPolicy(pinned=(3,), priorities={1: 0})
    assert cw.priorities(msgs, policy) == [2, 0, 1, 0, 0]
    g = ContextGuard(resolve_budget(2_000, 0, floor=0, env={}), profile="fim", policy=policy)
    r = g.recover(msgs, format="openai")  # the notice a message of its own
    [e] = r.events
    assert isinstance(e, MiddlePruned) and (e.tokens_after, e.removed_messages) == (341, 1)
    notice = {"role": "user", "content": "[context compacted: 1 earlier messages removed]"}
    assert r.messages == [msgs[0], msgs[1], notice, msgs[3], msgs[4]]
    assert [(f.fate, f.rule) for f in r.steps[1].report.fates] == [
        ("kept", "first_user_message"),
        ("kept", "policy_class"),
        ("dropped", "middle_pruned"),
        ("kept", "pinned"),
        ("kept", "recent_messages"),
    ]


def _p0_agent() -> list[dict[str, Any]]:
    """fresh19 F2: a system prompt, a task, 12 bash calls with their results, a request."""
    conv: list[dict[str, Any]] = [{"role": "system", "content": "s"}, {"role": "user", "content": "first"}]
    for i in range(12):
        conv += [call(i, "bash"), res(i, f"o{i} " * 50)]
    conv.append({"role": "user", "content": "now"})
    return conv


@pytest.mark.parametrize("policy", ["every_message_p0", "eviction_order_2"])
def test_recover_middle_pruning_spares_what_the_policy_never_evicts(policy: str) -> None:
    # fresh19 F2: every message class 0, or eviction_order (2,) where every message is P0
    # or P1 (both turns are recent): recover_from_overflow rightly removes nothing, and
    # the middle pruning removed 9 of the 12 tool units anyway (27 messages -> 10). It
    # spares them now, so nothing can go: no event, the input's own objects back.
    conv = _p0_agent()
    n = len(conv)
    if policy == "every_message_p0":
        pol = cw.FitPolicy(priorities=dict.fromkeys(range(n), 0))
        assert cw.priorities(conv, pol) == [0] * n
    else:
        pol = cw.FitPolicy(eviction_order=(2,))
        assert cw.priorities(conv, pol) == [0] + [1] * (n - 2) + [0]
    assert not cw.recover_from_overflow(conv, budget=100_000, policy=pol).removed
    g = ContextGuard(context_window=100_000, max_output_tokens=100, policy=pol)
    r = g.recover(conv)
    assert [s.step for s in r.steps] == ["overflow", "middle"]
    assert r.steps[1].report.reason is None and r.steps[1].report.dropped_messages == 0
    assert not r.changed and r.events == [] and len(r.messages) == n
    assert all(a is b for a, b in zip(r.messages, conv, strict=True))
    assert g.stats.messages_dropped == 0 and g.stats.compactions == 0


def test_recover_middle_pruning_removes_what_the_eviction_order_allows() -> None:
    # eviction_order (2,), recent_turns 2: turns [first], [h0 c0 r0] .. [h3 c3 r3],
    # [now]. The older turns' opening messages h0-h2 are P2, their tool units P3, turn
    # [h3 c3 r3] P1, the preamble, the request and "first" (by override) P0; call c0
    # and result r1 are P2 by override, the rest of their units P3. recover_from_overflow
    # removes nothing: a whole older turn or unit holds P3 (never evicted here) and an
    # opening message never goes alone. The middle pruning may remove only P2, and tool
    # units stay whole (c0 stays with r0, r1 with c1): 15 messages, N = min(6, 15 // 3) = 5
    # (r2 .. now); "first" is the first user message. h0, h1, h2 go (fim: 4 + 60 // 4 = 19
    # each, 57), the notice stands before c0 (4 + 47 // 4 = 15): 42 tokens fewer. Before,
    # it removed 2-8: h0-h2 and the units of c0 and c1, whose P3 messages must stay.
    conv: list[dict[str, Any]] = [{"role": "system", "content": "s"}, {"role": "user", "content": "first"}]
    for i in range(4):
        conv += [{"role": "user", "content": f"h{i} " * 20}, call(i, "bash"), res(i, f"o{i} " * 50)]
    conv.append({"role": "user", "content": "now"})
    pol = cw.FitPolicy(eviction_order=(2,), priorities={1: 0, 3: 2, 7: 2})
    assert cw.priorities(conv, pol) == [0, 0, 2, 2, 3, 2, 3, 2, 2, 3, 3, 1, 1, 1, 0]
    assert cw.message_tokens(conv[2:3], "fim") == [19]
    g = ContextGuard(resolve_budget(100_000, 100, floor=0, env={}), profile="fim", policy=pol)
    r = g.recover(conv)
    [e] = r.events
    assert isinstance(e, MiddlePruned) and e.removed_messages == 3
    assert e.tokens_before - e.tokens_after == 57 - 15
    notice = {"role": "user", "content": "[context compacted: 3 earlier messages removed]"}
    assert r.messages == [conv[0], conv[1], notice, *conv[3:5], *conv[6:8], *conv[9:]]
    assert cw.validate(r.messages, "openai") == []
    assert [(f.fate, f.rule) for f in r.steps[1].report.fates] == [
        ("kept", "preamble"),
        ("kept", "first_user_message"),
        ("dropped", "middle_pruned"),
        ("kept", "tool_unit"),
        ("kept", "policy_class"),
        ("dropped", "middle_pruned"),
        ("kept", "policy_class"),
        ("kept", "tool_unit"),
        ("dropped", "middle_pruned"),
        ("kept", "policy_class"),
        *[("kept", "recent_messages")] * 5,
    ]


def test_broken_pairs_are_repaired_under_the_budget() -> None:
    # the middle orphan (a tool result without a call, cases/middle-orphan) is dropped
    # even though the conversation fits: 14 + (4 + 1) + 14 = 33 tokens (fim), 28 after
    # the orphan goes. The guard used to return it unchanged and the provider rejected it.
    msgs = [
        {"role": "user", "content": "u" * 40},
        {"role": "tool", "tool_call_id": "zz", "content": "orph"},
        {"role": "user", "content": "w" * 40},
    ]
    g = guard(8_000, 2_000)
    r = g.check(msgs)
    assert r.messages == [msgs[0], msgs[2]] and r.messages[0] is msgs[0]
    assert cw.validate(r.messages, "openai") == []
    [e] = r.events
    assert isinstance(e, HistoryTrimmed) and (e.reason, e.dropped_messages) == ("tool_pairs", 1)
    assert (e.tokens_before, e.tokens_after, r.tokens_after) == (33, 28, 28)
    # valid input under the budget: no step, the same objects
    again = g.check(r.messages)
    assert not again.changed and all(a is b for a, b in zip(again.messages, r.messages, strict=True))


def test_recover_never_reports_a_middle_pruning_that_grows_the_request() -> None:
    # eviction_order (3,): the chatter "ok" is P1 (both turns are recent), so
    # recover_from_overflow removes nothing; prune_middle would replace "ok" (4 + 1 = 5
    # tokens, fim) by the notice (4 + 47 // 4 = 15): 33 -> 43, so it declines. That is no
    # recovery: no event, the input back, and the caller stops retrying.
    msgs = [
        {"role": "user", "content": "u" * 40},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "w" * 40},
    ]
    g = ContextGuard(resolve_budget(2_000, 0, floor=0, env={}), profile="fim", policy=cw.FitPolicy(eviction_order=(3,)))
    r = g.recover(msgs)
    assert [s.step for s in r.steps] == ["overflow", "middle"]
    assert r.steps[1].report.reason is None and r.steps[1].report.tokens_after == 33
    assert not r.changed and r.tokens_after == 33
    assert all(a is b for a, b in zip(r.messages, msgs, strict=True))


def test_recover_weighs_the_middle_pruning_against_the_repaired_input() -> None:
    """left17: recover compared the pruned size with the unrepaired input's count. fim:
    "u" * 40 14, "a" * 40 14, "b" * 60 4 + 15 = 19, the unanswered call 6, "w" * 40 14:
    67; repaired, the stub "[tool result missing]" (4 + 21 // 4 = 9) answers c1: 76.
    Messages 1 and 3 are P0 by override, so no turn can go whole and "b", which opens
    its turn, never goes alone: recover_from_overflow removes nothing (76, not under 67).
    prune_middle (6 messages repaired, N = 2: the stub and the request, so the call's
    unit; message 1 is class 0) removes "b" (19 tokens) for the notice (47 characters:
    15): 72, under the 76 the pair repair alone sends, but not under 67, so the guard
    declined it and sent the 76 tokens."""
    msgs = [
        {"role": "user", "content": "u" * 40},
        {"role": "assistant", "content": "a" * 40},
        {"role": "user", "content": "b" * 60},
        call(1, "bash"),
        {"role": "user", "content": "w" * 40},
    ]
    assert cw.message_tokens(msgs, "fim") == [14, 14, 19, 6, 14]
    policy = cw.FitPolicy(priorities={1: 0, 3: 0})
    g = ContextGuard(resolve_budget(2_000, 0, floor=0, env={}), profile="fim", policy=policy)
    r = g.recover(msgs)
    assert [s.step for s in r.steps] == ["overflow", "middle"]
    assert r.steps[0].report.tokens_after == 76
    [e] = r.events
    assert isinstance(e, MiddlePruned) and e.step == "middle"
    assert (e.tokens_before, e.tokens_after, e.removed_messages) == (67, 72, 1)
    notice = {"role": "user", "content": "[context compacted: 1 earlier messages removed]"}
    stub = {"role": "tool", "tool_call_id": "c1", "content": "[tool result missing]"}
    assert r.messages == [msgs[0], msgs[1], notice, msgs[3], stub, msgs[4]]
    assert cw.validate(r.messages, "openai") == []
    assert (r.tokens_before, r.tokens_after) == (67, 72)
    assert g.stats.messages_dropped == 1 and g.stats.compactions == 1


def test_recover_weighs_the_overflow_eviction_against_the_repaired_input() -> None:
    """left17, the same for the first step: fim "u" * 40 14, "ok" 4 + 1 = 5, "b" * 12 7,
    the unanswered call 6, "w" * 40 14: 46; 55 repaired (the stub costs 9). Only P3 may
    go, and only "ok" is P3: recover_from_overflow evicts it, 55 - 5 = 50, which is not
    under 46, so its ``removed`` is False and the guard dropped its result; the middle
    pruning declined too (the notice, 15, costs more than "ok" and "b", 12), and the
    repaired input, 55 tokens, went back instead of the 50."""
    msgs = [
        {"role": "user", "content": "u" * 40},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "b" * 12},
        call(1, "bash"),
        {"role": "user", "content": "w" * 40},
    ]
    assert cw.message_tokens(msgs, "fim") == [14, 5, 7, 6, 14]
    policy = cw.FitPolicy(eviction_order=(3,), breadcrumb=False)
    assert cw.priorities(msgs, policy) == [2, 3, 1, 1, 0]
    g = ContextGuard(resolve_budget(2_000, 0, floor=0, env={}), profile="fim", policy=policy)
    r = g.recover(msgs)
    assert [s.step for s in r.steps] == ["overflow"]
    [e] = r.events
    assert isinstance(e, OverflowRecovered)
    assert (e.tokens_before, e.tokens_after, e.dropped_messages, e.target) == (46, 50, 1, 30)
    stub = {"role": "tool", "tool_call_id": "c1", "content": "[tool result missing]"}
    assert r.messages == [msgs[0], msgs[2], msgs[3], stub, msgs[4]]
    assert (r.tokens_before, r.tokens_after) == (46, 50)
    # never loops: on its own output (repaired) nothing changes. The middle pruning spares
    # what eviction_order (3,) leaves out: "u" is P2, "b", the call and its stub P1
    # (it removed the last three, 50 -> 43 tokens, before fresh19 F2)
    assert cw.priorities(r.messages, policy) == [2, 1, 1, 1, 0]
    again = g.recover(r.messages)
    assert not again.changed and all(a is b for a, b in zip(again.messages, r.messages, strict=True))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_recover_repairs_broken_pairs_when_it_can_remove_nothing(provider: str) -> None:
    """fresh16b #4: neither step could remove anything (overflow recovery keeps the one
    turn; the middle pruning's repaired result, 20 tokens, is not under the input's 16),
    so recover returned the input with an unanswered call and an orphan result. fim:
    "run it" 4 + 1 = 5, the call 4 + 1 + 1 = 6, the result "r" 4 + 1 = 5: 16; repaired,
    the orphan goes and "[tool result missing]" answers c1/t1 (4 + 21 // 4 = 9): 20, as
    check gives. In Anthropic shape the stub replaces the orphan block in the same user
    message: no message dropped."""
    if provider == "openai":
        msgs: list[dict[str, Any]] = [
            {"role": "user", "content": "run it"},
            call(1, "bash"),
            {"role": "tool", "tool_call_id": "c2", "content": "r"},
        ]
        stub = {"role": "tool", "tool_call_id": "c1", "content": "[tool result missing]"}
    else:
        msgs = [
            {"role": "user", "content": "run it"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "zz", "content": "r"}]},
        ]
        stub = {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "[tool result missing]"}],
        }
    assert len(cw.validate(msgs, provider)) == 2
    snapshot = copy.deepcopy(msgs)
    g = ContextGuard(context_window=8000, max_output_tokens=1000, profile="fim")
    r = g.recover(msgs, reported_tokens=9000)
    assert msgs == snapshot
    assert cw.validate(r.messages, provider) == []
    assert r.messages == [msgs[0], msgs[1], stub] and r.messages[0] is msgs[0] and r.messages[1] is msgs[1]
    assert [s.step for s in r.steps] == ["overflow", "middle", "history"]
    [e] = r.events
    dropped = 1 if provider == "openai" else 0
    assert isinstance(e, HistoryTrimmed) and e.step == "history" and e.reason == "tool_pairs"
    assert (e.tokens_before, e.tokens_after, e.dropped_messages) == (16, 20, dropped)
    assert (r.tokens_before, r.tokens_after, r.changed) == (16, 20, True)
    assert g.stats.recoveries == 1 and g.stats.compactions == 1 and g.stats.messages_dropped == dropped
    # the same output as check, and recover_from_overflow's messages
    assert g.check(msgs).messages == r.messages
    assert cw.recover_from_overflow(msgs, 9000, budget=7000).messages == r.messages
    # never loops: on its own output recover changes nothing
    again = g.recover(r.messages, reported_tokens=9000)
    assert not again.changed and all(a is b for a, b in zip(again.messages, r.messages, strict=True))


def test_tool_output_step_spares_policy_pinned_messages() -> None:
    # the bash result costs 4 + 12,000 // 4 = 3,004 tokens (fim), over 50% of the 5,000
    # window, so step 1 cuts it; pinned by the guard's policy (dict input) it stays whole
    # (3,004 + 6 + 6 = 3,016 <= 5,000: nothing else runs)
    msgs = [
        {"role": "user", "content": "build it"},
        call(1, "bash"),
        res(1, "ok\n" * 4000),
    ]
    assert [type(e).__name__ for e in guard(5_000, 0).check(msgs).events] == ["ToolResultTruncated"]
    g = ContextGuard(resolve_budget(5_000, 0, env={}), profile="fim", policy=cw.FitPolicy(pinned=(2,)))
    r = g.check(msgs)
    assert not r.changed and r.tokens_after == 3_016 and r.messages[2] is msgs[2]


def test_message_structs_keep_the_provider_asked_for() -> None:
    # Message structs with format="anthropic": every step must place things the Anthropic
    # way. Costs (fim): 104, 104, 14, call 4 + 1 + 1 = 6: 228 > budget 1,000 - 800 = 200,
    # low-water 140. Turn 0 goes (208); the breadcrumb leads the request as a text block
    # (50 // 4 = 12): 26; the open call 6; its stub result in a new user message
    # (4 + 21 // 4 = 9): 41. The guard used to drop the format for structs, so fit
    # placed the breadcrumb and the stub the OpenAI way (a "tool" message).
    m = [
        cw.Message(role="user", content=[cw.TextPart(text="u" * 400)]),
        cw.Message(role="assistant", content=[cw.TextPart(text="a" * 400)]),
        cw.Message(role="user", content=[cw.TextPart(text="w" * 40)]),
        cw.Message(role="assistant", content=[cw.ToolCall(id="c1", name="bash", arguments="{}")]),
    ]
    g = ContextGuard(resolve_budget(1_000, 800, floor=0, env={}), profile="fim")
    r = g.check(m, format="anthropic")
    assert r.tokens_after == 41 and [x.role for x in r.messages] == ["user", "assistant", "user"]
    assert r.messages[1] is m[3] and isinstance(r.messages[2].content[0], cw.ToolResult)
    assert cw.validate(r.messages, "anthropic") == []


def _pairing(msgs: list[cw.Message], provider: str) -> list[cw.Violation]:
    return [v for v in cw.validate(msgs, provider) if v.code in PAIRING]


@given(case(), st.integers(1, 120), st.sampled_from(cw.HINTS), st.sampled_from([0.3, 0.7, 1.0]))
def test_guard_properties(c: tuple[str, list[cw.Message]], pct: int, hint: str, low_water: float) -> None:
    """DESIGN.md section 8 on generated conversations, as an agent loop uses the guard:
    found by this review: broken pairs passed through under the budget, struct input lost
    its provider, evictions that grew the request."""
    provider, msgs = c
    snapshot = msgspec.to_builtins(msgs)
    total = cw.count_messages(msgs, format=provider)
    w = max(20, total * pct // 100)

    def run(m: list[cw.Message]) -> Any:
        g = ContextGuard(resolve_budget(w * 2, w, floor=0, env={}), policy=cw.FitPolicy(low_water=low_water))
        try:
            return g.check(m, hint=hint, format=provider)
        except cw.ContextOverflowError as exc:
            return exc.result  # type: ignore[attr-defined]

    r = run(msgs)
    out = r.messages
    assert msgspec.to_builtins(msgs) == snapshot
    assert _pairing(out, provider) == []
    assert out or not cw.repair_tool_pairs(msgs, format=provider).messages
    assert r.tokens_after == cw.count_messages(out, format=provider)
    pre = next((i for i, m in enumerate(msgs) if m.role not in ("system", "developer")), len(msgs))
    assert all(a is b for a, b in zip(out[:pre], msgs[:pre], strict=True))
    repaired = any(s.report.repairs for s in r.steps)
    assert all(e.tokens_after <= e.tokens_before for e in r.events) or repaired
    assert msgspec.to_builtins(run(msgs).messages) == msgspec.to_builtins(out)  # deterministic
    if r.fits:  # the next call of the loop sends the same request
        assert not run(out).events


@given(case(), st.data(), st.sampled_from(cw.HINTS))
def test_recover_middle_pruning_properties(c: tuple[str, list[cw.Message]], data: Any, hint: str) -> None:
    """fresh19 F2 on generated conversations and policies: the middle pruning never
    removes a message of a class the policy never evicts (class 0, or one outside
    ``eviction_order``, by the hint's classes as the overflow step reads them); the output
    passes validate for pairing; a protected message kept outside the tail and the
    first/last user messages is named ``pinned`` or ``policy_class`` (or a tool unit's)."""
    provider, msgs = c
    n = len(msgs)
    order = tuple(data.draw(st.lists(st.sampled_from([1, 2, 3]), unique=True, min_size=1, max_size=3)))
    over = data.draw(st.dictionaries(st.integers(0, n - 1), st.integers(0, 3), max_size=n)) if n else {}
    pol = cw.FitPolicy(eviction_order=order, priorities=over)
    g = ContextGuard(resolve_budget(100_000, 0, floor=0, env={}), policy=pol)
    r = g.recover(msgs, hint=hint, format=provider)
    assert _pairing(r.messages, provider) == []
    middle = [s.report for s in r.steps if s.step == "middle"]
    if not middle:
        return
    classes = hint_priorities(msgs, hint, pol, format=provider)
    protected = [i for i, k in enumerate(classes) if k == 0 or k not in order]
    fates = middle[0].fates
    assert all(fates[i].rule != "middle_pruned" for i in protected)
    assert middle[0].reason == "middle_pruned" or all(f.rule != "policy_class" for f in fates)
    assert middle[0].reason != "middle_pruned" or all(
        fates[i].rule in ("preamble", "first_user_message", "current_request", "recent_messages", "pinned")
        or fates[i].rule in ("policy_class", "tool_unit", "alternation", "notice_added", "notice_removed")
        or fates[i].fate != "kept"
        for i in protected
    )


def test_single_turn_agent_loop_gets_old_output_cleared() -> None:
    """An agent loop is one long turn: step 1 never clears the current turn, step 2 spares
    only the newest ``keep_recent_results`` (6) results."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "s" * 40}, {"role": "user", "content": "do the task"}]
    for i in range(10):
        msgs += [call(i, "bash"), res(i, "y" * 4000)]
    # 14 + (4 + 11 // 4 = 6) + 10 x (6 + 1,004) = 10,120. Window 14,000: 75% is 10,500, so
    # step 1 clears nothing. Budget 14,000 - 5,000 = 9,000, target 0.7 x 9,000 = 6,300.
    # A cleared result is 4 + 53 // 4 = 17 ("[tool result cleared: 4000 characters of bash
    # output]"), saving 987: three give 7,159 > 6,300, four give 6,172 <= 6,300.
    assert cw.count_messages(msgs, "fim") == 10_120
    g = guard(14_000, 5_000)
    r = g.check(msgs, hint="react_iteration")
    [e] = r.events
    assert isinstance(e, ToolResultsCleared) and (e.results, e.tokens_before, e.tokens_after) == (4, 10_120, 6_172)
    cleared = [i for i, m in enumerate(r.messages) if m is not msgs[i]]
    assert cleared == [3, 5, 7, 9]  # results of calls 0-3; the newest 6 results stay
    assert cw.validate(r.messages, "openai") == []
    # with every result protected, the history step evicts whole units instead
    r = guard(14_000, 5_000, keep_recent_results=10).check(msgs, hint="react_iteration")
    assert [type(e).__name__ for e in r.events] == ["HistoryTrimmed"]


def test_budget_and_model_are_exclusive() -> None:
    with pytest.raises(ValueError, match="either budget"):
        ContextGuard(resolve_budget(8_000, 2_000), model="gpt-4o")


def test_plain_chat_keeps_alternating_roles() -> None:
    """A plain chat (user/assistant text only) reads as Anthropic-compatible, as in
    trim_turns and fit: the breadcrumb leads the kept user message, never a user message
    of its own (found by a new user on the logickor_claude35_ko corpus files)."""
    msgs = [
        {"role": "user", "content": "q1 " * 900},
        {"role": "assistant", "content": "a1 " * 900},
        {"role": "user", "content": "q2"},
    ]
    g = ContextGuard(resolve_budget(4_800, 4_000, floor=0, env={}))
    for r in (g.check(msgs), g.recover(msgs)):
        assert [m["role"] for m in r.messages] == ["user"]
        assert cw.validate(r.messages, "anthropic") == [] and cw.validate(r.messages, "openai") == []
    structs = [cw.Message(role=m["role"], content=[cw.TextPart(text=m["content"])]) for m in msgs]
    r = g.check(structs)
    assert [m.role for m in r.messages] == ["user"] and r.messages[0].content[0].text == cw.BREADCRUMB


def test_unknown_model_is_refused_like_the_cli() -> None:
    with pytest.raises(ValueError, match="unknown model 'gpt-9'"):
        ContextGuard(model="gpt-9")
    g = ContextGuard(model="gpt-9", context_window=10_000, max_output_tokens=1_000)
    assert g.budget.usable == 9_000


def test_bad_policy_index_names_it_without_a_range() -> None:
    # found by a new user: the guard checks its policy before it knows the messages
    with pytest.raises(ValueError, match=r"pinned index -1 is not a message index$"):
        ContextGuard(resolve_budget(8_000, 2_000, env={}), policy=cw.FitPolicy(pinned=(-1,)))
    with pytest.raises(ValueError, match=r"priorities key -2 is not a message index$"):
        ContextGuard(resolve_budget(8_000, 2_000, env={}), policy=cw.FitPolicy(priorities={-2: 1}))
    # a key of the wrong type is a TypeError (README: a collection of the wrong type)
    with pytest.raises(TypeError, match=r"^priorities keys must be message indices \(int\), got str$"):
        ContextGuard(resolve_budget(8_000, 2_000, env={}), policy=cw.FitPolicy(priorities={"a": 1}))  # type: ignore[dict-item]


W = "alpha beta gamma delta "


def interrupted_anthropic() -> list[dict[str, Any]]:
    """fresh8 N2: a call the user interrupted; repair adds a ``[tool result missing]``
    stub to the next user message (119 -> 125 tokens, conservative)."""
    return [
        {"role": "user", "content": [{"type": "text", "text": W * 10}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "edit", "input": {"p": "x"}}]},
        {"role": "user", "content": [{"type": "text", "text": "stop, do this instead: " + W * 5}]},
    ]


def interrupted_openai() -> list[dict[str, Any]]:
    """The OpenAI form: tool_calls then a plain user message (repair adds a tool message)."""
    call_ = {"id": "call_1", "type": "function", "function": {"name": "edit", "arguments": '{"p":"x"}'}}
    return [
        {"role": "user", "content": W * 10},
        {"role": "assistant", "content": None, "tool_calls": [call_]},
        {"role": "user", "content": "stop, do this instead: " + W * 5},
    ]


@pytest.mark.parametrize(("make", "provider"), [(interrupted_anthropic, "anthropic"), (interrupted_openai, "openai")])
def test_repair_stub_over_the_budget_is_trimmed_not_raised(make: Any, provider: str) -> None:
    """fresh8 N2: every budget in [count, count after repair) raised ContextOverflowError
    (the guard compared the unrepaired size with the budget, then the stub pushed it
    over). The repaired size is what must fit: the history step runs and the guard's
    result fits whenever fit's does; from the repaired size up, repair alone is enough."""
    msgs = make()
    before = cw.count_messages(msgs)
    after = cw.count_messages(cw.repair_tool_pairs(msgs).messages)
    assert before < after  # 119 < 125 (Anthropic), 115 < 124 (OpenAI)
    for budget in range(before - 2, after + 2):
        guard = ContextGuard(resolve_budget(context_window=budget + 10, max_output_tokens=10, floor=1))
        assert guard.budget.usable == budget
        r = guard.check(copy.deepcopy(msgs))
        assert r.fits and r.tokens_after <= budget, budget
        assert r.tokens_after == cw.count_messages(r.messages)
        assert cw.validate(r.messages, provider) == []
        assert cw.fit(msgs, budget).report.fits
        if budget >= after:  # repair alone: the stubbed conversation, nothing evicted
            assert r.tokens_after == after
            assert [e.reason for e in r.events] == ["tool_pairs"]


def test_guard_with_a_pin_evicts_the_placeholder() -> None:
    """fresh8 N3 through the guard: the history step's fit evicts the placeholder and the
    assistant after it (messages 2-4 cost 78 to 80) instead of raising at capacity 80."""
    orphan = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": W * 3}]}
    msgs = [
        orphan,
        {"role": "assistant", "content": [{"type": "text", "text": W * 5}]},
        {"role": "user", "content": [{"type": "text", "text": "pinned note"}]},
        {"role": "assistant", "content": [{"type": "text", "text": W * 5}]},
        {"role": "user", "content": [{"type": "text", "text": "FINAL please summarise the findings about " + W * 8}]},
    ]
    guard = ContextGuard(
        resolve_budget(context_window=90, max_output_tokens=10, floor=1), policy=cw.FitPolicy(pinned=(2,))
    )
    rest = cw.count_messages(msgs[2:])
    assert rest <= 80
    r = guard.check(msgs)
    assert (r.fits, r.tokens_after) == (True, rest)
    assert all(a is b for a, b in zip(r.messages, msgs[2:], strict=True))
    assert cw.validate(r.messages, "anthropic") == []


def test_guard_drops_the_old_turn_not_the_request() -> None:
    """fresh8 N1 through the guard: capacities 27, 31 and 35 (window - 10), [system,
    request] 27 tokens, all 39 (4 per message; 25, 35 and capacities 25, 29, 33 at 3):
    the old turn goes, the breadcrumb is left out, the request stays whole."""
    req = {"role": "user", "content": "Please fix the failing test in tests/test_io.py and explain the cause briefly."}
    msgs = [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "old question"},
        {"role": "assistant", "content": "old answer"},
        req,
    ]
    assert (cw.count_messages(msgs), cw.count_messages([msgs[0], req])) == (39, 27)
    for window in (37, 41, 45):
        r = ContextGuard(resolve_budget(context_window=window, max_output_tokens=10, floor=1)).check(msgs)
        assert r.messages == [msgs[0], req] and r.messages[1] is req
        assert (r.fits, r.tokens_after) == (True, 27)


def test_guard_never_does_worse_than_fit_on_its_input() -> None:
    """Hypothesis found (test_invariants) a conversation where the guard's own tool-output
    step made eviction worse: clearing the tool result that repair moves into a pinned
    message lowered the pinned messages' total, so fewer were unpinned over their share,
    and the turn holding it could no longer go. ``fit`` on the input fit the budget; the
    guard raised ContextOverflowError at 543 tokens. The guard now falls back on ``fit``
    of its input when eviction after its steps does not fit. Since a pin weighs the whole
    tool unit it keeps (fresh19 F1), clearing that result no longer changes what is
    unpinned: eviction after the guard's own steps fits here and gives fit's result."""
    Message, TextPart = cw.Message, cw.TextPart

    def result(text: str) -> cw.ToolResult:
        return cw.ToolResult(call_id="c1", content=[TextPart(text=text)])

    call = cw.ToolCall(id="c1", name="read_file", arguments="")
    # (hypothesis's three pinned user messages were empty; each has a letter now, as a
    # message with no words opens no turn: fresh53 #1)
    msgs = [
        Message(role="user", content=[result("")]),
        Message(
            role="assistant",
            content=[cw.OpaquePart(type="thinking", raw={"type": "thinking", "thinking": ""})],
            pinned=True,
        ),
        Message(role="user", content=[TextPart(text="12345678" * 50)], pinned=True),
        Message(role="assistant", content=[call], pinned=True),
        Message(role="user", content=[TextPart(text="a")], pinned=True),
        Message(role="assistant", content=[result("hello" * 50)]),
        Message(role="user", content=[TextPart(text="b")], pinned=True),
        Message(role="assistant", content=[TextPart(text="ok")], pinned=True),
        Message(role="user", content=[TextPart(text="c")], pinned=True),
        Message(role="assistant", content=[TextPart(text="ok")], pinned=True),
        Message(role="user", content=[result("hello" * 250)]),
        Message(role="assistant", content=[call], pinned=True),
        Message(role="user", content=[result(""), TextPart(text="")]),
    ]
    before = copy.deepcopy(msgs)
    total = cw.count_messages(msgs, format="anthropic")
    budget = total * 8 // 100
    fitted = cw.fit(msgs, budget, format="anthropic")
    assert fitted.report.fits
    # what the guard's first step leaves fits by eviction alone, as the input does
    capped = cw.budget_tool_results(msgs, budget + 10, format="anthropic")
    assert cw.fit(capped.messages, budget, format="anthropic").report.fits
    guard = cw.ContextGuard(resolve_budget(context_window=budget + 10, max_output_tokens=10, floor=1))
    assert guard.budget.usable == budget
    g = guard.check(msgs, format="anthropic")
    assert g.fits and g.tokens_after == fitted.report.tokens_after
    assert g.messages == fitted.messages
    assert [s.step for s in g.steps] == ["tool_output", "tool_results", "history"]
    assert msgs == before


def test_guard_falls_back_on_its_policy_when_a_hints_priorities_reach_a_dead_end() -> None:
    """fresh11 N1: under ``step_dependency``'s priorities (the image message P3, the tool
    call P2, the user message that gets its stub P1) fit evicts the image first, and then
    the call and its stub cannot go without two user messages meeting (Anthropic roles
    alternate): stuck at 1,024 tokens over 1,000. The default order drops the call and
    the long user message instead. The guard raised ContextOverflowError; now fit of its
    input by the guard's own policy is the result. (The case had an empty first message
    and an empty request, 777 tokens kept; a message with no words opens no turn now,
    fresh53 #1, so they have a word each: 791 tokens, the breadcrumb of 12 ``fim`` tokens
    in the request.)"""
    msgs = [
        {"role": "user", "content": "a"},
        {
            "role": "assistant",
            "content": [{"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}],
        },
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "read_file", "input": {}}]},
        {"role": "user", "content": "hello" * 800},
        {"role": "user", "content": "go"},
    ]
    before = copy.deepcopy(msgs)
    pol = cw.FitPolicy(pinned=(0,))
    fitted = cw.fit(msgs, 1000, pol, profile="fim", format="anthropic")
    assert fitted.report.fits and fitted.report.tokens_after == 791 and fitted.report.breadcrumb
    stuck = cw.fit(
        msgs, 1000, cw.FitPolicy(pinned=(0,), priorities={1: 3, 2: 2, 3: 1}), profile="fim", format="anthropic"
    )
    assert not stuck.report.fits and stuck.report.tokens_after == 1026
    guard = cw.ContextGuard(
        resolve_budget(context_window=1010, max_output_tokens=10, floor=1, env={}), profile="fim", policy=pol
    )
    for hint in ("step_dependency", "general"):
        g = guard.check(msgs, hint=hint, format="anthropic")
        assert g.fits and g.tokens_after == 791 and g.messages == fitted.messages
    assert msgs == before


def test_the_guards_cap_keeps_the_end_of_a_build_log() -> None:
    """fresh14 finding 2, the tester's reproducer: a 78,941-character log under a 200k
    window (the conversation needed no trimming) lost its ERROR line to the head-only cap.
    Now the cap keeps head and tail: 29,000 characters (1,450 lines) go, as
    test_compact.test_the_character_cap_keeps_a_tool_results_head_and_tail works out."""
    log = "".join(f"build step {i}: ok\n" for i in range(4000)) + "ERROR: linker failed: undefined reference to `foo'\n"
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "why does the build fail?"},
        call(1, "bash"),
        res(1, log),
        {"role": "user", "content": "now"},
    ]
    r = ContextGuard(resolve_budget(context_window=200_000, max_output_tokens=8_000)).check(msgs)
    [e] = r.events
    assert isinstance(e, MessageTruncated) and (e.messages, e.chars_removed) == (1, 29_000)
    out = r.messages[3]["content"]
    assert out == log[:24_970] + "[... 29000 characters (1450 lines) removed ...]\n" + log[-24_971:]
    assert r.fits and "ERROR: linker" in out and "[Truncated" not in out
    # a small window: the cap and the share rule make one cut between them, the tail kept
    small = ContextGuard(resolve_budget(context_window=10_000, max_output_tokens=1_000)).check(msgs)
    cut = small.messages[3]["content"]
    # 5,191 characters of head and 5,191 of tail: 78,941 - 10,382 = 68,559 removed in
    # all, 29,000 by the cap and 39,559 by the share rule
    head, tail = cut.split("[... 68559 characters (3464 lines) removed ...]\n")
    assert (head, tail) == (log[:5_191], log[-5_191:]) and tail.endswith(log[-51:])
    kinds = [(type(e).__name__, e.chars_removed) for e in small.events]  # type: ignore[attr-defined]
    assert kinds[:2] == [("MessageTruncated", 29_000), ("ToolResultTruncated", 39_559)]


def test_history_event_counts_the_cut_fit_made_further() -> None:
    """Last session's note: when the tool-output step's cut was not enough and ``fit``
    (the history step) cut the same tool result further, ``HistoryTrimmed`` did not say
    so. It carries ``truncated_messages`` and ``chars_removed`` (the step report's
    fates, summed): the characters cut from the step's input text, i.e. the growth of the
    marker's count plus the earlier marker the recut took out."""
    big = "\n".join(f"line {i}: " + "data " * 20 for i in range(3000))
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "read the log"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": big},
    ]
    budget = cw.resolve_budget(context_window=6000, max_output_tokens=1000, floor=0)
    r = cw.ContextGuard(budget, max_result_share=0.95, max_total_share=0.95).check(msgs)
    assert r.fits
    history = next(e for e in r.events if isinstance(e, cw.HistoryTrimmed))
    assert (history.dropped_messages, history.truncated_messages) == (0, 1)
    first = r.steps[0].report.fates[3].chars_removed  # the tool-output step's marker count
    (final,) = re.findall(r"\[\.\.\. (\d+) characters removed \.\.\.\]", r.messages[3]["content"])
    grew = int(final) - first
    assert 0 < grew <= history.chars_removed <= grew + len(f"[... {first} characters (9999 lines) removed ...]")
    assert history.chars_removed == sum(f.chars_removed for f in r.steps[-1].report.fates)


def test_guard_leaves_its_own_output_alone_when_repair_moved_a_pinned_result() -> None:
    """Hypothesis (test_guard_properties): a pinned assistant message holding its call's
    result of 60,000 characters. Repair moves the result into a tool message; that message
    lost the pin, so the next check cut it to the 50,000-character cap although the first
    check had left it whole (the loop's request changed while it fitted)."""
    big = cw.ToolResult(call_id="c1", content=[cw.TextPart(text="hello " * 10_000)])
    msgs = [
        cw.Message(role="user", content=[cw.TextPart(text="go")], pinned=True),
        cw.Message(role="assistant", content=[big, cw.ToolCall(id="c1", name="f", arguments="{}")], pinned=True),
    ]
    g = ContextGuard(resolve_budget(200_000, 0, floor=0, env={}), profile="fim")
    r = g.check(msgs, format="openai")
    assert [e.reason for e in r.events] == ["tool_pairs"]
    assert [(m.role, m.pinned) for m in r.messages] == [("user", True), ("assistant", True), ("tool", True)]
    assert r.messages[2].content[0].content[0].text == "hello " * 10_000
    again = g.check(r.messages, format="openai")
    assert not again.events and again.messages == r.messages


def test_check_refuses_a_priorities_key_outside_the_messages_whether_or_not_it_trims() -> None:
    """fresh37 #4: ``fit`` refused ``priorities={99: 1}`` on one message; ``check`` took it
    when the conversation fit (no trim ran), and refused it only when it trimmed."""
    g = ContextGuard(resolve_budget(1_000, 100, env={}), policy=cw.FitPolicy(priorities={99: 1}))
    with pytest.raises(ValueError, match=r"priorities key 99 is not a message index \(0\.\.0\)"):
        g.check([{"role": "user", "content": "x"}])
