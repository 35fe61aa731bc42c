"""fresh55's findings (a final tester on a fresh clone), each with its failing input."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import contextwindow as cw
from contextwindow import _reference as ref
from contextwindow.cli import main


def _grep_hits(n: int) -> list[dict[str, Any]]:
    return [{"type": "text", "text": f"src/pkg/module_{i:05d}/file.py:12: match found here\n"} for i in range(n)]


def _grep_session(n: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Find every call site."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "grep", "input": {"q": "foo"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": _grep_hits(n)}]},
    ]


def test_fresh55_1_a_result_in_many_small_parts_is_cut_across_parts() -> None:
    # each of 1,500 parts was cut to its marker: no hit left, 18,054 tokens for 2,000
    m = _grep_session(1500)
    assert cw.count_messages(m) == 28554
    body = json.dumps({"model": "c", "max_tokens": 5, "messages": m}).encode()
    for budget in (300, 2000, 8000):
        r = cw.trim_turns(m, budget)
        assert r.report.fits and r.report.tokens_after <= budget
        parts = r.messages[2]["content"][0]["content"]
        hits = _grep_hits(1500)
        # the first and last parts whole, one marker between them naming what went
        k = len(parts) - 1
        h, t = k - k // 2, k // 2
        assert parts[:h] == hits[:h] and parts[h + 1 :] == hits[1500 - t :]
        gone = sum(len(p["text"]) for p in hits[h : 1500 - t])
        assert parts[h] == {"type": "text", "text": f"\n[... {gone} characters removed ...]\n"}
        assert r.report.fates[2].chars_removed == gone and r.report.fates[2].rule == "tool_result_shrunk"
        # the most parts that fit: one more part would not
        more = [*hits[: k + 1 - (k + 1) // 2], parts[h], *hits[1500 - (k + 1) // 2 :]]
        assert cw.count_messages([*m[:2], {**m[2], "content": [{**m[2]["content"][0], "content": more}]}]) > budget
        # fit, the gateway and the reference agree
        assert cw.fit(m, budget).messages == r.messages
        assert json.loads(cw.fit_request(body, budget=budget))["messages"] == r.messages
        _, rep = ref.trim_turns(cw.adapters.to_canonical(m), budget)
        assert rep.tokens_after == r.report.tokens_after
    assert [len(cw.trim_turns(m, b).messages[2]["content"][0]["content"]) for b in (300, 2000, 8000)] == [13, 102, 418]
    # the guard fits it (it raised ContextOverflowError: 18,054 over a capacity of 8,000)
    g = cw.ContextGuard(cw.resolve_budget(context_window=10000, max_output_tokens=2000)).check(m)
    assert g.fits
    # OpenAI shape: a tool message of text parts
    call = {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
    o = [
        {"role": "user", "content": "Find every call site."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": _grep_hits(1500)},
    ]
    r = cw.trim_turns(o, 2000)
    assert r.report.fits and 2 < len(r.messages[2]["content"]) < 1500
    # a result whose parts can each keep head and tail is cut as before: every part kept
    few = _grep_session(4)
    few[2]["content"][0]["content"] = [{"type": "text", "text": "line\n" * 400} for _ in range(4)]
    r = cw.trim_turns(few, 600)
    assert r.report.fits and len(r.messages[2]["content"][0]["content"]) == 4


def test_fresh55_2_a_pinned_thinking_anchor_is_never_unpinned() -> None:
    def th(sig: str) -> dict[str, Any]:
        return {"type": "thinking", "thinking": "Let me think. " * 5, "signature": sig}

    def use(i: str, name: str) -> dict[str, Any]:
        return {"type": "tool_use", "id": i, "name": name, "input": {"cmd": "x"}}

    def res(i: str, text: str) -> dict[str, Any]:
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i, "content": text}]}

    m = [
        {"role": "user", "content": "Fix the failing test."},
        {"role": "assistant", "content": [th("sig1"), use("toolu_a", "bash")]},
        res("toolu_a", "FAILED test_x.py::test_y - AssertionError\n" * 60),
        {"role": "assistant", "content": [use("toolu_b", "read_file")]},
        res("toolu_b", "def y():\n    return 1\n"),
        {"role": "assistant", "content": [th("sig2"), use("toolu_c", "bash")]},
        res("toolu_c", "ok"),
    ]
    plain = cw.fit(m, 500)
    for pinned in (cw.FitPolicy(pinned=(1,)), None):
        if pinned is None:  # a struct's own pin
            structs = cw.adapters.to_canonical(m)
            structs[1] = cw.Message(role="assistant", content=structs[1].content, pinned=True)
            r = cw.fit(structs, 500)
            out = [cw.adapters.from_canonical(x, "anthropic") for x in r.messages]
        else:
            r = cw.fit(m, 500, pinned)
            out = r.messages
            assert out == plain.messages
        # it was unpinned by the share and evicted: thinking_not_first, a 400
        assert r.report.fates[1].rule == "thinking_block" and 490 <= r.report.tokens_after <= 500
        assert cw.validate(out, "anthropic") == []
    for usable in (300, 500):
        b = cw.resolve_budget(context_window=usable + 100, max_output_tokens=100, floor=0)
        assert b.usable == usable
        g = cw.ContextGuard(b, policy=cw.FitPolicy(pinned=(1,))).check(m)
        assert cw.validate(g.messages, "anthropic") == [] and g.messages[1] == m[1]


def test_fresh55_2_a_pinned_request_keeps_its_pin_whatever_its_size() -> None:
    # the tester's "related inconsistency" is the rule: a pin keeps the request uncut
    # (README: "keep the request pinned"), so it is not weighed by the share
    m = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "old question " * 30},
        {"role": "assistant", "content": "old answer " * 30},
        {"role": "user", "content": "Please review this spec: " + "requirement text " * 150},
    ]
    plain = cw.fit(m, 250)
    assert plain.report.fits and plain.report.fates[3].rule == "request_truncated"
    r = cw.fit(m, 250, cw.FitPolicy(pinned=(3,)))
    assert not r.report.fits and r.messages[-1] == m[3] and r.report.fates[3].rule == "current_request"


def test_fresh55_3_a_subscriber_reads_what_it_edited() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    history = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Run the build."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "OLD LOG LINE\n" * 3000},
    ]
    guard = cw.ContextGuard(cw.resolve_budget(context_window=4200, max_output_tokens=100))
    seen: dict[str, Any] = {}

    def on_event(ev: Any) -> None:
        if seen:
            return
        history[3]["content"] = "NEW LOG LINE\n" * 6000
        seen["fit"] = cw.fit(history, 500)
        history[0]["content"] = "SYSTEM PROMPT " * 3000
        seen["big"] = cw.fit(history, 4100)

    guard.subscribe(on_event)
    guard.check(history)
    # it read the dicts as they were before the edit: 'OLD LOG LINE...'
    assert seen["fit"].messages[3]["content"].startswith("NEW LOG LINE")
    big = seen["big"]
    assert big.report.tokens_after == cw.count_messages(big.messages)
    assert not big.report.fits  # the system prompt alone is over (it said fits=True at 31)


def test_fresh55_4_the_share_cuts_a_result_in_many_parts_across_them() -> None:
    # 8,000 parts took 31 s and ended at 120,050 tokens, 60 times over the share
    for n in (1000, 8000):
        m = _grep_session(n)
        r = cw.budget_tool_results(m, 4000)
        alone = cw.count_messages([r.messages[2]])
        assert alone <= 2000 < cw.count_messages([m[2]])
        parts = r.messages[2]["content"][0]["content"]
        assert sum("characters (" in p["text"] for p in parts) >= 1 and len(parts) < n
    # with no character cap the kept parts are the input's, first and last
    m = _grep_session(1000)
    r = cw.budget_tool_results(m, 4000, max_message_chars=None)
    parts = r.messages[2]["content"][0]["content"]
    hits = _grep_hits(1000)
    k = len(parts) - 1
    h, t = k - k // 2, k // 2
    assert parts[:h] == hits[:h] and parts[h + 1 :] == hits[1000 - t :]
    gone = hits[h : 1000 - t]
    assert parts[h]["text"] == f"[... {sum(len(p['text']) for p in gone)} characters ({len(gone)} lines) removed ...]"
    assert r.report.fates[2].chars_removed == sum(len(p["text"]) for p in gone)
    g = cw.ContextGuard(cw.resolve_budget(context_window=200000, max_output_tokens=16000)).check(_grep_session(8000))
    assert g.fits


def test_fresh55_6_namespaced_tool_names_match_by_their_last_segment() -> None:
    def session(name: str) -> list[dict[str, Any]]:
        return [
            {"role": "user", "content": "read it"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": name, "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x = 1\n" * 2000}]},
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "next"},
        ]

    for name, cleared in [
        ("mcp__filesystem__read_file", True),
        ("functions.read_file", True),
        ("run_terminal_cmd", True),
        ("Read", True),
        ("mcp__filesystem__write_file", False),
        ("mcp__fs__edit_file", False),  # protected by its last segment
        ("mcp__x__unknown", False),
    ]:
        r = cw.budget_tool_results(session(name), 5000, max_result_share=None)
        assert (r.report.fates[2].rule == "tool_result_cleared") is cleared, name


def test_fresh55_6_inspect_top_0_prints_no_empty_table(capsys: pytest.CaptureFixture[str]) -> None:
    example = Path(__file__).resolve().parent.parent / "examples" / "agent_session.json"
    assert main(["inspect", str(example), "--top", "0"]) == 0
    out = capsys.readouterr().out
    assert "largest messages" not in out and "by turn" in out
    assert main(["inspect", str(example), "--top", "2"]) == 0
    assert "largest messages" in capsys.readouterr().out


def test_fresh52_2_a_screenshot_after_the_results_counts_under_its_tool() -> None:
    # an OpenAI computer-use agent sends each screenshot in a user message after the tool
    # messages: it goes with the unit, and inspect counted it under role user, the tool's
    # results at 6 tokens
    image = {"type": "image_url", "image_url": {"url": "https://example.com/s.png", "detail": "low"}}
    call = {"id": "c0", "type": "function", "function": {"name": "computer", "arguments": "{}"}}

    def session(shots: bool) -> list[dict[str, Any]]:
        m: list[dict[str, Any]] = [
            {"role": "system", "content": "You operate a desktop."},
            {"role": "user", "content": "Open Settings."},
        ]
        for i in range(3):
            m += [
                {"role": "assistant", "content": None, "tool_calls": [{**call, "id": f"c{i}"}]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": "done"},
            ]
            if shots:
                m.append({"role": "user", "content": [image]})
        return [*m, {"role": "assistant", "content": "Settings is open."}]

    shot = cw.count_messages([{"role": "user", "content": [image]}]) - cw.count_messages(
        [{"role": "user", "content": ""}]
    )
    assert shot == 85
    plain = cw.token_breakdown(session(False)).by_tool
    b = cw.token_breakdown(session(True))
    assert [(t.tool, t.results) for t in b.by_tool] == [("computer", 3)]
    assert b.by_tool[0].result_tokens == plain[0].result_tokens + 3 * shot
    assert b.by_tool[0].tokens == b.by_tool[0].call_tokens + b.by_tool[0].result_tokens
    # the largest messages name the tool
    assert all(m.tools == ["computer"] for m in b.largest if m.role == "user" and m.index > 1)
    # an image alone after the assistant's answer is the user's: not counted under a tool
    after = [*session(False), {"role": "user", "content": [image]}]
    assert cw.token_breakdown(after).by_tool[0].result_tokens == plain[0].result_tokens
    # nor one after an orphan result (it opens a turn)
    orphan = [
        {"role": "user", "content": "q"},
        {"role": "tool", "tool_call_id": "zz", "content": "r"},
        {"role": "user", "content": [image]},
    ]
    rows = {t.tool: t.result_tokens for t in cw.token_breakdown(orphan).by_tool}
    assert rows == {"(no matching call)": cw.token_breakdown(orphan[:2]).by_tool[0].result_tokens}


def test_fresh56_1_more_budget_never_keeps_less_of_a_result_in_many_parts() -> None:
    # where 300 bare markers fit (3,750 to 3,950 tokens), every part was cut to its
    # marker: none of the output left, where 3,650 kept 95 lines whole; budget_tool_results
    # kept 119 lines whole at a window of 9,000 and 7 characters of each at 9,100
    parts = [{"type": "text", "text": f"src/file{i:05d}.py:{i}: match line {'x' * 30}\n"} for i in range(300)]
    call = {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": '{"q": "foo"}'}}
    msgs = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Find all matches of foo."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": parts},
    ]
    marker = re.compile(r"\n?\[\.\.\. [\d,]+ characters(?: \([\d,]+ lines?\))? removed \.\.\.\]\n?")

    def kept(m: dict[str, Any]) -> int:  # characters of the tool's output left
        return sum(len(marker.sub("", p["text"])) for p in m["content"])

    body = json.dumps({"messages": msgs}).encode()
    last = 0
    for budget in range(3500, 12001, 250):
        r = cw.trim_turns(msgs, budget)
        assert r.report.fits and kept(r.messages[-1]) >= last, budget
        last = kept(r.messages[-1])
        assert json.loads(cw.fit_request(body, budget=budget))["messages"] == r.messages
        if budget % 2000 == 0:  # the reference (slow): the same rule
            _, rep = ref.trim_turns(cw.adapters.to_canonical(msgs), budget)
            assert rep.tokens_after == r.report.tokens_after
    r = cw.trim_turns(msgs, 3850)  # 100 lines whole, the first one first
    assert kept(r.messages[-1]) == 6340 and r.messages[-1]["content"][0] == parts[0]
    assert len(r.messages[-1]["content"]) == 101
    last = 0
    for window in range(8000, 20001, 500):
        out = cw.budget_tool_results(msgs, window).messages[-1]
        assert kept(out) >= last, window
        last = kept(out)
    assert kept(cw.budget_tool_results(msgs, 9100).messages[-1]) == 7610  # 120 lines whole


def test_fresh56_3_inspect_keeps_message_numbers_whole_at_80_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    m: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for i in range(12):
        call = {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": "mcp__filesystem__read_text_file", "arguments": "{}"},
        }
        m += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": "data " * (50 * i + 10)},
        ]
    f = tmp_path / "mcp.json"
    f.write_text(json.dumps({"messages": m}))
    assert main(["inspect", str(f)]) == 0
    out = capsys.readouterr().out
    rows = out[out.index("largest messages") :].splitlines()[3:8]
    # the index was squeezed to "…" for every message numbered 10 or above
    assert [r.split("│")[0].strip() for r in rows] == ["24", "22", "20", "18", "16"]


def test_fresh57_2_a_first_part_too_large_to_keep_leaves_the_rest_to_the_tail() -> None:
    # a 900-character first part and 201 short ones: every budget short of the first part
    # whole cut the result to one marker (80 of 320 tokens used, the final error gone)
    big = "Traceback line " * 60
    parts = [{"type": "text", "text": big}, *({"type": "text", "text": f"hit {i}: foo"} for i in range(200))]
    parts.append({"type": "text", "text": "FINAL ERROR: build failed"})
    call = {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "Search the repo for TODO"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": parts},
    ]
    body = json.dumps({"messages": msgs}).encode()
    for budget in (120, 200, 320):
        r = cw.trim_turns(msgs, budget)
        out = r.messages[-1]["content"]
        assert r.report.fits and r.report.tokens_after > budget - 10
        # the marker first, then the last parts whole, the final error last
        assert "characters removed" in out[0]["text"] and out[1:] == parts[len(parts) - len(out) + 1 :]
        assert len(out) > 5
        assert json.loads(cw.fit_request(body, budget=budget))["messages"] == r.messages
        _, rep = ref.trim_turns(cw.adapters.to_canonical(msgs), budget)
        assert rep.tokens_after == r.report.tokens_after
