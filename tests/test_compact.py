"""contextwindow.compact: tool-output budget, micro compaction, middle pruning (issue 5).

Hand-worked values use the ``fim`` profile (first seed): 4 tokens per message, ASCII text
at floor(chars / 4) tokens (at least 1 for non-empty text), a tool call adds its name's
and its arguments' text, an Anthropic ``tool_result`` adds its text. Each test checks its
per-message arithmetic against ``message_tokens`` first, so a changed profile fails loudly.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

import contextwindow as cw
from contextwindow import _reference as ref
from contextwindow.compact import (
    COMPACTION_NOTICE,
    OUTPUT_HEAVY_TOOLS,
    WRITE_TOOLS,
    _text_chars,
    budget_tool_results,
    micro_compact,
    prune_middle,
)
from contextwindow.messages import Message, TextPart, ToolCall, ToolResult

from shared_data import CASES, corpus_files, ids, load, need
from strategies import case, request_source

FIM = "fim"


# --------------------------------------------------------------------------- builders


def oa_call(cid: str, name: str, args: str = "{}") -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [call(cid, name, args)]}


def call(cid: str, name: str, args: str = "{}") -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def oa_result(cid: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": text}


def an_use(cid: str, name: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": cid, "name": name, "input": {}}


def an_result(cid: str, text: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": cid, "content": text}


def texts_of(m: Any) -> str:
    """All text of an OpenAI or Anthropic dict message, tool results included."""
    c = m.get("content")
    if isinstance(c, str):
        return c
    out = []
    for b in c or []:
        if b.get("type") == "text":
            out.append(b["text"])
        elif b.get("type") == "tool_result":
            inner = b.get("content")
            out.append(inner if isinstance(inner, str) else "".join(x.get("text", "") for x in inner or []))
    return "\n".join(out)


def same_objects(out: list[Any], msgs: list[Any]) -> bool:
    return len(out) == len(msgs) and all(a is b for a, b in zip(out, msgs, strict=True))


def codes(vs: list[cw.Violation]) -> list[tuple[int, str, str | None]]:
    return [(v.index, v.code, v.call_id) for v in vs]


# --------------------------------------------------------------------------- rule 2: one result over its share


def numbered_lines(n: int) -> str:
    return "".join(f"line {i:04d}\n" for i in range(n))  # 10 characters a line


def test_single_result_cut_at_line_boundaries_openai() -> None:
    text = numbered_lines(400)  # 4,000 characters
    msgs = [{"role": "user", "content": "run it"}, oa_call("b1", "bash"), oa_result("b1", text)]
    # fim: 4 + 4000 / 4 = 1004 tokens for the result; window 1000 x 0.5 = 500 allowed
    assert cw.message_tokens(msgs, FIM) == [4 + 1, 4 + 1 + 1, 1004]
    before = copy.deepcopy(msgs)
    r = budget_tool_results(msgs, 1000, profile=FIM, max_total_share=None)
    assert msgs == before
    out = r.messages[2]["content"]
    # cost <= 500 means floor(len / 4) <= 496, len <= 1987. The kept text is head + marker
    # + "\n" + tail, whole 10-character lines on each side; the marker for R = 4000 - kept
    # characters (4 digits) and R / 10 lines (3 digits) is 5 + 4 + 13 + 3 + 20 = 45
    # characters. kept + 46 <= 1987 gives kept <= 1941: 97 lines each side (970 + 970);
    # 98 on one side would be 1950. Removed: 4000 - 1940 = 2060 characters, 206 lines.
    marker = "[... 2060 characters (206 lines) removed ...]"
    assert len(marker) == 45
    assert out == numbered_lines(97) + marker + "\n" + "".join(f"line {i:04d}\n" for i in range(303, 400))
    assert cw.message_tokens([r.messages[2]], FIM) == [4 + (1940 + 46) // 4] == [500]
    assert r.report.reason == "tool_result_budget"
    assert r.report.fates[2] == cw.Fate(index=2, fate="truncated", rule="tool_result_cut", chars_removed=2060)
    assert r.report.fates[0].rule == "fits" and r.report.truncated_messages == 1
    assert r.report.tokens_before == 5 + 6 + 1004 and r.report.tokens_after == 5 + 6 + 500
    assert r.messages[0] is msgs[0] and r.messages[1] is msgs[1]
    assert r.messages[2]["tool_call_id"] == "b1"
    assert cw.validate(r.messages, "openai") == []
    # idempotent: the cut result fits its share now
    again = budget_tool_results(r.messages, 1000, profile=FIM, max_total_share=None)
    assert again.report.reason is None and same_objects(again.messages, r.messages)


def test_single_result_cut_in_current_turn_anthropic_parallel() -> None:
    big = numbered_lines(400)
    msgs = [
        {"role": "user", "content": "read both"},
        {"role": "assistant", "content": [an_use("r1", "Read"), an_use("r2", "Read")]},
        {"role": "user", "content": [an_result("r1", "small"), an_result("r2", big)]},
    ]
    r = budget_tool_results(msgs, 1000, profile=FIM, max_total_share=None, format="anthropic")
    blocks = r.messages[2]["content"]
    # r1 untouched, r2 cut exactly as in the OpenAI case (same 500-token share: the result
    # as a message of its own costs 4 + its text)
    assert blocks[0] == an_result("r1", "small")
    assert blocks[1]["tool_use_id"] == "r2" and "[... 2060 characters (206 lines) removed ...]" in blocks[1]["content"]
    assert r.report.fates[2].chars_removed == 2060
    assert cw.validate(r.messages, "anthropic") == []


def tagged_lines(tag: str, n: int) -> str:
    return "".join(f"{tag} {i:04d}\n" for i in range(n))  # 10 characters a line


def test_result_in_two_text_parts_cut_evenly_keeps_head_and_tail() -> None:
    # fresh26 #3: cut largest first, the first part went down to its marker before the
    # second was touched, and the result's head with it
    parts = [{"type": "text", "text": tagged_lines("head", 200)}, {"type": "text", "text": tagged_lines("tail", 200)}]
    msgs = [{"role": "user", "content": "run it"}, oa_call("b1", "bash"), {**oa_result("b1", ""), "content": parts}]
    assert cw.message_tokens(msgs, FIM)[2] == 4 + 500 + 500
    before = copy.deepcopy(msgs)
    r = budget_tool_results(msgs, 1000, profile=FIM, max_total_share=None)
    assert msgs == before
    # share 500: 4 + floor(L1 / 4) + floor(L2 / 4) <= 500. One common keep: 47 whole lines
    # each side of each part, 940 characters + the 45-character marker + "\n" = 986,
    # 246 tokens a part, 496 in all; a line more on both parts is 996, 249 a part, 502.
    marker = "[... 1060 characters (106 lines) removed ...]"
    head, tail = (p["text"] for p in r.messages[2]["content"])
    assert head == tagged_lines("head", 47) + marker + "\n" + tagged_lines("head", 200)[1530:]
    assert tail == tagged_lines("tail", 47) + marker + "\n" + tagged_lines("tail", 200)[1530:]
    assert head.endswith("head 0199\n") and len(head) == len(tail) == 986
    assert cw.message_tokens([r.messages[2]], FIM) == [496]
    assert r.report.fates[2] == cw.Fate(index=2, fate="truncated", rule="tool_result_cut", chars_removed=2120)
    assert cw.validate(r.messages, "openai") == []
    # the same as an Anthropic tool_result list
    an = [
        {"role": "user", "content": "run it"},
        {"role": "assistant", "content": [an_use("r1", "bash")]},
        {"role": "user", "content": [{**an_result("r1", ""), "content": parts}]},
    ]
    ra = budget_tool_results(an, 1000, profile=FIM, max_total_share=None)
    assert [p["text"] for p in ra.messages[2]["content"][0]["content"]] == [head, tail]


def test_character_cap_cuts_several_texts_toward_one_level() -> None:
    # fresh26 #3, rule 1: two 30,000-character parts under a 20,000-character cap each
    # keep their head and tail; the first was cut to its marker alone
    parts = [{"type": "text", "text": tagged_lines("head", 3000)}, {"type": "text", "text": tagged_lines("tail", 3000)}]
    msgs = [
        {"role": "user", "content": "run it"},
        oa_call("b1", "bash"),
        {**oa_result("b1", ""), "content": parts},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "next"},
    ]
    r = budget_tool_results(msgs, 10**6, max_result_share=None, max_total_share=None, max_message_chars=20_000)
    head, tail = (p["text"] for p in r.messages[2]["content"])
    # level 10,000 each. The first: 497 whole lines each side (9,940) + the 47-character
    # marker + "\n" = 9,988 (498 a side would be 10,008). The second may then take
    # 30,000 - (39,988 - 20,000) = 10,012: 498 a side, 10,008.
    assert (
        head
        == tagged_lines("head", 497)
        + "[... 20060 characters (2006 lines) removed ...]\n"
        + tagged_lines("head", 3000)[25030:]
    )
    assert (
        tail
        == tagged_lines("tail", 498)
        + "[... 20040 characters (2004 lines) removed ...]\n"
        + tagged_lines("tail", 3000)[25020:]
    )
    assert (len(head), len(tail)) == (9988, 10008) and len(head) + len(tail) <= 20_000
    assert r.report.fates[2] == cw.Fate(index=2, fate="truncated", rule="message_char_cap", chars_removed=40100)


def test_cut_never_splits_a_zwj_sequence_or_code_point() -> None:
    regex = pytest.importorskip("regex")  # the UAX #29 implementation the tables came from
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # 5 code points, one grapheme
    text = (family + "e\u0301") * 700  # no line breaks: the cut falls back to graphemes
    msgs = [{"role": "user", "content": "q"}, oa_call("c1", "bash"), oa_result("c1", text)]
    r = budget_tool_results(msgs, 1000, max_total_share=None)
    out = r.messages[2]["content"]
    head, rest = out.split("\n[... ", 1)
    tail = rest.split(" ...]\n", 1)[1]
    assert head and tail and text.startswith(head) and text.endswith(tail)
    clusters = set(regex.findall(r"\X", text))
    assert set(regex.findall(r"\X", head)) <= clusters and set(regex.findall(r"\X", tail)) <= clusters
    assert cw.message_tokens([r.messages[2]])[0] <= 500
    removed = len(text) - len(head) - len(tail)
    # no line break: the cut is inside the one line, so the marker names no line (fresh15 #6)
    assert r.report.fates[2].chars_removed == removed and f"\n[... {removed} characters removed ...]\n" in out


def test_cjk_lines_cut_and_counted() -> None:
    text = "".join(f"第{i:03d}行の出力です。\n" for i in range(300))
    line = len("第000行の出力です。\n")  # 1 + 3 + 7 + 1 = 12 characters a line
    assert line == 12
    msgs = [{"role": "user", "content": "q"}, oa_call("c1", "grep"), oa_result("c1", text)]
    r = budget_tool_results(msgs, 600, max_total_share=None)
    out = r.messages[2]["content"]
    head, rest = out.split("[... ", 1)
    n_chars, rest = rest.split(" characters (", 1)
    n_lines = int(rest.split(" lines)", 1)[0])
    tail = rest.split(" ...]\n", 1)[1]
    assert head.endswith("\n") and text.startswith(head) and text.endswith(tail)
    assert int(n_chars) == len(text) - len(head) - len(tail) == line * n_lines
    assert cw.message_tokens([r.messages[2]])[0] <= 300


# --------------------------------------------------------------------------- rule 3: total over its share


def history() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q1"},
        oa_call("a1", "read_file"),
        oa_result("a1", "x" * 800),
        oa_call("w1", "write_file"),
        oa_result("w1", "y" * 800),
        oa_call("b1", "Bash"),
        oa_result("b1", "z" * 800),
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "q2"},
        oa_call("g1", "grep"),
        oa_result("g1", "w" * 800),
    ]


# fim costs: "sys" 4+1; "q1" 4+1; read_file call 4 + 2 (9 chars) + 1 ("{}"); a result
# 4 + 800/4 = 204; write_file call 4 + 2 + 1; Bash call 4 + 1 + 1; "done" 4+1; "q2" 4+1;
# grep call 4 + 1 + 1. Total 862.
HISTORY_COSTS = [5, 5, 7, 204, 7, 204, 6, 204, 5, 5, 6, 204]


def test_history_costs_by_hand() -> None:
    assert cw.message_tokens(history(), FIM) == HISTORY_COSTS and sum(HISTORY_COSTS) == 862


def test_oldest_heavy_result_cleared_first() -> None:
    msgs = history()
    r = budget_tool_results(msgs, 1000, profile=FIM)
    # threshold 0.75 x 1000 = 750 < 862: clear the oldest output-heavy result (read_file).
    # "[tool result cleared: 800 characters of read_file output]" is 22 + 3 + 15 + 9 + 8 =
    # 57 characters: 4 + 14 = 18 tokens; 862 - 204 + 18 = 676 <= 750, so it stops there.
    marker = "[tool result cleared: 800 characters of read_file output]"
    assert len(marker) == 57
    assert r.messages[3] == {"role": "tool", "tool_call_id": "a1", "content": marker}
    assert all(r.messages[i] is msgs[i] for i in range(len(msgs)) if i != 3)
    assert r.report.tokens_after == 676 and r.report.budget == 750 and r.report.fits
    assert r.report.fates[3] == cw.Fate(index=3, fate="truncated", rule="tool_result_cleared", chars_removed=800)
    assert r.report.reason == "tool_result_budget"
    assert cw.validate(r.messages, "openai") == []


def test_write_tools_protected_case_insensitive_names() -> None:
    msgs = history()
    r = budget_tool_results(msgs, 800, profile=FIM)
    # threshold 600: after read_file (676 > 600) the write_file result is skipped and the
    # "Bash" result goes (case-insensitive): its marker is 22 + 3 + 15 + 4 + 8 = 52
    # characters, 4 + 13 = 17 tokens; 676 - 204 + 17 = 489 <= 600.
    assert r.messages[5] is msgs[5]
    assert r.messages[7]["content"] == "[tool result cleared: 800 characters of Bash output]"
    assert r.report.tokens_after == 489 and r.report.budget == 600
    assert [f.rule for f in r.report.fates if f.fate == "truncated"] == ["tool_result_cleared"] * 2


def test_current_turn_never_cleared_reports_not_fitting() -> None:
    msgs = history()
    r = budget_tool_results(msgs, 500, profile=FIM)
    # threshold 375: read_file and Bash go (489 left); write_file is protected and the grep
    # result sits in the current turn (opened by "q2"), so 489 > 375 remains.
    assert r.messages[11] is msgs[11] and r.messages[5] is msgs[5]
    assert r.report.tokens_after == 489 and r.report.budget == 375 and not r.report.fits
    # the one-result share (250) is not passed by any single 204-token result
    assert all(f.rule != "tool_result_cut" for f in r.report.fates)
    again = budget_tool_results(r.messages, 500, profile=FIM)
    assert again.report.reason is None and same_objects(again.messages, r.messages)


def test_custom_tool_lists() -> None:
    msgs = history()
    # write_file made output-heavy and unprotected; read_file protected
    r = budget_tool_results(
        msgs, 800, profile=FIM, output_heavy_tools={"WRITE_FILE", "read_file"}, protected_tools={"read_file"}
    )
    # threshold 600: only write_file qualifies: 862 - 204 + (4 + 58 // 4) = 676 > 600
    assert r.messages[3] is msgs[3] and r.messages[7] is msgs[7]
    assert r.messages[5]["content"] == "[tool result cleared: 800 characters of write_file output]"
    assert r.report.tokens_after == 862 - 204 + 4 + 58 // 4 == 676 and not r.report.fits


def test_anthropic_parallel_results_cleared_one_at_a_time() -> None:
    msgs = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": [an_use("r1", "Read"), an_use("r2", "Read")]},
        {"role": "user", "content": [an_result("r1", "x" * 800), an_result("r2", "y" * 800)]},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "q2"},
    ]
    # fim: 5; 4 + (1 + 1) * 2 = 8; 4 + 200 + 200 = 404; 5; 5 -> 427
    assert cw.message_tokens(msgs, FIM, format="anthropic") == [5, 8, 404, 5, 5]
    r = budget_tool_results(msgs, 500, profile=FIM, format="anthropic")
    # threshold 375: r1 (the older block) is cleared: its 52-character marker is 13 tokens,
    # 427 - 200 + 13 = 240 <= 375, so r2 stays whole
    blocks = r.messages[2]["content"]
    assert blocks[0] == an_result("r1", "[tool result cleared: 800 characters of Read output]")
    assert blocks[1] == an_result("r2", "y" * 800)
    assert r.report.tokens_after == 240
    assert cw.validate(r.messages, "anthropic") == []


def test_cleared_marker_names_non_text_parts_and_keeps_error_flag() -> None:
    img = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    result = {
        "type": "tool_result",
        "tool_use_id": "s1",
        "is_error": True,
        "content": [{"type": "text", "text": "t" * 40}, img],
    }
    msgs = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": [an_use("s1", "web_fetch")]},
        {"role": "user", "content": [result]},
        {"role": "assistant", "content": "seen"},
        {"role": "user", "content": "q2"},
    ]
    r = budget_tool_results(msgs, 100, format="anthropic", max_result_share=None)
    out = r.messages[2]["content"][0]
    assert out["is_error"] is True and out["tool_use_id"] == "s1"
    assert out["content"] == [
        {"type": "text", "text": "[tool result cleared: 40 characters and 1 non-text part of web_fetch output]"}
    ]


# --------------------------------------------------------------------------- rule 1: per-message character cap


def test_message_char_cap_one_text() -> None:
    msgs = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "b" * 1500}]
    r = budget_tool_results(msgs, 10**9, max_message_chars=1000)
    # allowed 1000 characters, marker included: "\n[Truncated: 536 characters removed]" is
    # 1 + 12 + 3 + 20 = 36 characters, so the head keeps 964 and 1500 - 964 = 536 go
    assert r.messages[1]["content"] == "b" * 964 + "\n[Truncated: 536 characters removed]"
    assert len(r.messages[1]["content"]) == 1000
    assert r.report.reason == "message_char_cap"
    assert r.report.fates[1] == cw.Fate(index=1, fate="truncated", rule="message_char_cap", chars_removed=536)
    assert budget_tool_results(r.messages, 10**9, max_message_chars=1000).report.reason is None


def test_message_char_cap_largest_text_first() -> None:
    blocks = [{"type": "text", "text": "a" * 700}, {"type": "text", "text": "c" * 500}]
    msgs = [{"role": "user", "content": "go"}, {"role": "assistant", "content": blocks}]
    r = budget_tool_results(msgs, 10**9, max_message_chars=1000, format="anthropic")
    # 1,200 characters, 200 over: the 700-character block is cut to 500 characters with
    # its marker (36 characters: 464 kept, 236 removed); the other block is untouched
    out = r.messages[1]["content"]
    assert out[0]["text"] == "a" * 464 + "\n[Truncated: 236 characters removed]"
    assert out[1] == {"type": "text", "text": "c" * 500}
    assert r.report.fates[1].chars_removed == 236


def test_message_char_cap_spares_pinned_and_preamble() -> None:
    msgs = [
        Message(role="system", content=[TextPart(text="s" * 2000)]),
        Message(role="user", content=[TextPart(text="p" * 2000)], pinned=True),
        Message(role="assistant", content=[TextPart(text="a" * 2000)]),
        Message(role="user", content=[TextPart(text="u" * 2000)]),
    ]
    r = budget_tool_results(msgs, 10**9, max_message_chars=1000)
    # the preamble, the pinned message and the current request (found by a new user: a
    # long pasted log lost the question at its end) stay whole; the assistant text is cut
    assert r.messages[0] is msgs[0] and r.messages[1] is msgs[1] and r.messages[3] is msgs[3]
    assert isinstance(r.messages[2], Message) and len(r.messages[2].content[0].text) == 1000
    assert budget_tool_results(msgs, 10**9, max_message_chars=None).report.reason is None


def test_the_cap_spares_a_request_holding_an_orphan_beside_its_text() -> None:
    """small20 (a helper's leftover): the cap found the current request in the input as
    it is, where a user message holding an orphan result beside what the user wrote is a
    carrier, not a request: the older user message was taken for the request and the
    real one was cut (``please summari`` + the marker). The request is the one after
    repair (the orphan dropped), as trim_turns, fit and prune_middle take it (README Tool
    pairs); the cap still cuts other messages."""
    text = "please summarise: " + "x" * 80
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a" * 100},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "zz", "content": "r"},
                {"type": "text", "text": text},
            ],
        },
    ]
    r = budget_tool_results(msgs, 10**6, format="anthropic", max_message_chars=50)
    assert r.messages[2] is msgs[2]
    # the assistant text: 15 characters and a 35-character marker make 50
    assert r.messages[1]["content"] == "a" * 15 + "\n[Truncated: 85 characters removed]"
    assert [(f.fate, f.rule, f.chars_removed) for f in r.report.fates] == [
        ("kept", "fits", 0),
        ("truncated", "message_char_cap", 85),
        ("kept", "fits", 0),
    ]
    # the request is the repaired conversation's last real user message, as trim sees it
    assert request_source(msgs, "anthropic") == 2
    # the guard's cap (the same rule) spares it too
    guard = cw.ContextGuard(cw.resolve_budget(context_window=10**6, max_output_tokens=50), max_message_chars=50)
    assert guard.check(msgs, format="anthropic").messages[-1]["content"][-1] == {"type": "text", "text": text}


# fresh14 finding 2: the cap cut tool results head-only, so the error at the end of a long
# build log was lost even when the conversation fitted easily; with a small window rule 2
# then cut the cut text (two markers, the end of the head kept as its "tail").
BUILD_LOG = (
    "".join(f"build step {i}: ok\n" for i in range(4000)) + "ERROR: linker failed: undefined reference to `foo'\n"
)
ERROR_LINE = "ERROR: linker failed: undefined reference to `foo'\n"
_CUTS = r"\[\.\.\. \d+ characters(?: \(\d+ lines?\))? removed \.\.\.\]|\[Truncated: \d+ characters removed\]"


def build_chat(log: str = BUILD_LOG) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "why does the build fail?"},
        oa_call("c1", "bash"),
        oa_result("c1", log),
        {"role": "user", "content": "now"},
    ]


def test_the_character_cap_keeps_a_tool_results_head_and_tail() -> None:
    """The tester's log: lines "build step i: ok\n" of 17 (i < 10), 18, 19 and 20
    (i >= 1000) characters, 78,941 in all with the 51-character ERROR line. Allowed 50,000
    with the marker; the widest marker for this text ("[... 78941 characters (4002 lines)
    removed ...]", 47) and a line break each side leave keep = 49,951: head up to 24,976,
    the last line start before it 18,890 + 304 x 20 = 24,970; tail up to 24,975, the first
    line start after that 51 + 1,246 x 20 = 24,971 from the end. Removed 78,941 - 49,941 =
    29,000 characters, lines 1,304 to 2,753 (1,450)."""
    assert len(BUILD_LOG) == 78_941 and len(ERROR_LINE) == 51
    msgs = build_chat()
    r = budget_tool_results(msgs, 200_000)
    out = r.messages[3]["content"]
    marker = "[... 29000 characters (1450 lines) removed ...]"
    assert out == BUILD_LOG[:24_970] + marker + "\n" + BUILD_LOG[-24_971:]
    assert len(out) == 49_989 and out.endswith(ERROR_LINE) and len(re.findall(_CUTS, out)) == 1
    assert r.report.reason == "message_char_cap"
    assert r.report.fates[3] == cw.Fate(index=3, fate="truncated", rule="message_char_cap", chars_removed=29_000)
    again = budget_tool_results(r.messages, 200_000)
    assert again.report.reason is None and same_objects(again.messages, r.messages)
    # Anthropic tool_result blocks get the same cut
    an = [
        {"role": "user", "content": "why does the build fail?"},
        {"role": "assistant", "content": [an_use("t1", "bash")]},
        {"role": "user", "content": [an_result("t1", BUILD_LOG)]},
        {"role": "assistant", "content": "reading it"},
        {"role": "user", "content": "now"},
    ]
    ra = budget_tool_results(an, 200_000, format="anthropic")
    assert ra.messages[2]["content"] == [an_result("t1", out)]


def test_the_cap_and_the_share_rule_make_one_cut_of_a_tool_result() -> None:
    """Window 10,000: rule 1 cuts the log head + tail to 49,989 characters, then rule 2
    cuts it to its 5,000-token share from the input's text (not from rule 1's output):
    one marker, the real tail; the same text as with the cap off."""
    msgs = build_chat()
    r = budget_tool_results(msgs, 10_000)
    out = r.messages[3]["content"]
    [marker] = re.findall(_CUTS, out)
    head, tail = out.split(marker)
    assert BUILD_LOG.startswith(head) and BUILD_LOG.endswith(tail.removeprefix("\n"))
    assert tail.endswith(ERROR_LINE) and head.endswith("\n") and tail.startswith("\nbuild step ")
    removed = len(BUILD_LOG) - len(head) - len(tail) + 1
    assert (
        marker
        == f"[... {removed} characters ({BUILD_LOG[len(head) : len(head) + removed].count(chr(10))} lines) removed ...]"
    )
    assert r.report.fates[3] == cw.Fate(index=3, fate="truncated", rule="tool_result_cut", chars_removed=removed)
    assert cw.message_tokens([r.messages[3]])[0] <= 5_000
    assert out == budget_tool_results(msgs, 10_000, max_message_chars=None).messages[3]["content"]
    assert budget_tool_results(r.messages, 10_000).report.reason is None


@pytest.mark.parametrize("lines", [True, False], ids=["lines", "one_line"])
def test_a_2mb_tool_result_never_escapes_the_cap(lines: bool) -> None:
    """DESIGN.md, faults we never ship: a 2 MB tool result that escapes truncation. Cut
    head + tail under the 50,000-character cap, with or without line breaks (without
    them, on grapheme boundaries: the widest marker "[... 2000000 characters (1 line)
    removed ...]" is 45 characters, with a break each side 47, so keep = 49,953: 24,977
    + 24,976 kept, 1,950,047 removed; the cut is inside the one line, so the marker names
    no line (fresh15 #6): "[... 1950047 characters removed ...]", 36 characters, 49,991
    in all; the 9 left over are kept too: 24,981 each side, 1,950,038 removed, 24,981 + 1
    + 36 + 1 + 24,981 = 50,000)."""
    log = "compiling unit ... ok\n" * 90_909 + "ERROR: link failed" if lines else "y" * 2_000_000
    assert len(log) >= 2_000_000
    r = budget_tool_results(build_chat(log), 128_000)
    out = r.messages[3]["content"]
    assert len(out) <= 50_000 and len(re.findall(_CUTS, out)) == 1
    assert r.report.fates[3].rule == "message_char_cap"
    if lines:
        assert out.endswith("\nERROR: link failed") and out.startswith("compiling unit ... ok\n")
    else:
        marker = "[... 1950038 characters removed ...]"
        assert out == "y" * 24_981 + "\n" + marker + "\n" + "y" * 24_981 and len(out) == 50_000


def test_the_cap_cuts_text_head_only_and_tool_results_head_and_tail() -> None:
    """Other messages keep the head-only cut with "[Truncated: N characters removed]"."""
    text = "line\n" * 300  # 1,500 characters
    msgs = [
        {"role": "user", "content": "go"},
        oa_call("c1", "bash"),
        oa_result("c1", text),
        {"role": "assistant", "content": text},
        {"role": "user", "content": "now"},
    ]
    r = budget_tool_results(msgs, 10**9, max_message_chars=1000)
    # assistant: 1000 - 36 = 964 kept, 536 removed (as test_message_char_cap_one_text)
    assert r.messages[3]["content"] == text[:964] + "\n[Truncated: 536 characters removed]"
    # tool: widest marker "[... 1500 characters (301 lines) removed ...]" (45) + 2: keep
    # 953; head up to 477 -> 475 (95 lines), tail up to 476 -> 475; 550 characters (110
    # lines) go: 475 + 44 + 1 + 475 = 995 (a wider keep keeps no more lines)
    assert r.messages[2]["content"] == text[:475] + "[... 550 characters (110 lines) removed ...]\n" + text[-475:]


# fresh16b #3: a text-action agent's observation (user text starting with "[Tool results]")
# is its tool output: the cap cut it head-only (the error at its end lost) and the share
# rule left it whole. Both now cut it as a tool result, its "[Tool results]" prefix kept.
OBS_LOG = "".join(f"compiling unit {i}\n" for i in range(5000)) + "error: undefined reference to `foo'\n"
OBS_ERROR = "error: undefined reference to `foo'\n"


def test_the_cap_cuts_an_observation_head_and_tail() -> None:
    """The tester's log: lines "compiling unit i\\n" of 17 (i < 10), 18, 19 and 20 (i >=
    1,000) characters, 98,890 in all, then the 36-character error line; with the prefix
    "[Tool results]\\n" 98,941. Widest marker "[... 98941 characters (5003 lines) removed
    ...]" (47) + 2 and the 14-character prefix leave keep = 50,000 - 49 - 14 = 49,937:
    head up to 14 + 24,969 = 24,983, the last line start before it 15 + 170 + 1,620 +
    17,100 + 303 x 20 = 24,965; tail up to 24,968, the first line start after that 36 +
    1,246 x 20 = 24,956 from the end (98,941 - 24,956 = 73,985). 49,020 characters,
    2,451 whole lines of 20, removed: 24,965 + 47 + 1 + 24,956 = 49,969 (one more line
    each side would be 50,009)."""
    text = "[Tool results]\n" + OBS_LOG
    assert len(text) == 98_941 and text[-36:] == OBS_ERROR
    msgs = [
        {"role": "system", "content": "agent"},
        {"role": "user", "content": "Build it."},
        {"role": "assistant", "content": "```\nmake\n```"},
        {"role": "user", "content": text},
        {"role": "assistant", "content": "Looking."},
        {"role": "user", "content": "Go on."},
    ]
    expected = text[:24_965] + "[... 49020 characters (2451 lines) removed ...]\n" + text[73_985:]
    assert len(expected) == 49_969 and expected.endswith("\ncompiling unit 4999\n" + OBS_ERROR)
    r = budget_tool_results(msgs, 1_000_000)
    assert r.messages[3]["content"] == expected
    assert r.report.fates[3] == cw.Fate(index=3, fate="truncated", rule="message_char_cap", chars_removed=49_020)
    assert budget_tool_results(r.messages, 1_000_000).report.reason is None
    # the tester's guard call, and the agent loop's state right before its next call (the
    # observation last: not the current request, which is "Build it.")
    guard = cw.ContextGuard(context_window=1_000_000, max_output_tokens=1000)
    assert guard.check(msgs).messages[3]["content"] == expected
    last = guard.check(msgs[:4])
    assert last.messages[3]["content"] == expected
    [event] = last.events
    assert isinstance(event, cw.MessageTruncated) and (event.messages, event.chars_removed) == (1, 49_020)
    # a 10,000-token window: the share rule cuts it again from the input's text (one
    # marker, the real tail, the prefix), as with the cap off
    small = budget_tool_results(msgs, 10_000)
    out = small.messages[3]["content"]
    assert len(re.findall(_CUTS, out)) == 1 and out.startswith("[Tool results]\ncompiling unit 0\n")
    assert out.endswith(OBS_ERROR) and cw.message_tokens([small.messages[3]])[0] <= 5_000
    assert out == budget_tool_results(msgs, 10_000, max_message_chars=None).messages[3]["content"]
    assert small.report.fates[3].rule == "tool_result_cut"
    assert small.report.fates[3].chars_removed == len(text) - len(out) + len(re.findall(_CUTS, out)[0]) + 1


def test_the_share_rule_cuts_an_observation() -> None:
    """fim: 4 tokens a message + characters // 4. The observation is 15 + 40 x 7 + 6 =
    301 characters, 4 + 75 = 79 tokens, over half of a 100-token window (50): it may
    keep 4 x 46 + 3 = 187 characters, marker included. Kept: the prefix line and 9
    lines (78), "[... 161 characters (23 lines) removed ...]" (43), a line break and the
    last 8 lines with the error (62): 184 characters, 50 tokens; one more line (191)
    would be 51."""
    text = "[Tool results]\n" + "".join(f"out {i:02d}\n" for i in range(40)) + "ERROR\n"
    msgs = [
        {"role": "user", "content": "run the tests"},
        {"role": "assistant", "content": "pytest"},
        {"role": "user", "content": text},
    ]
    assert len(text) == 301 and cw.message_tokens(msgs, profile=FIM) == [7, 5, 79]
    r = budget_tool_results(msgs, 100, profile=FIM, max_total_share=None)
    out = r.messages[2]["content"]
    assert out == text[:78] + "[... 161 characters (23 lines) removed ...]\n" + text[-62:]
    assert out.startswith("[Tool results]\nout 00\n") and out.endswith("out 39\nERROR\n") and len(out) == 184
    assert cw.message_tokens(r.messages, profile=FIM) == [7, 5, 50]
    assert r.report.reason == "tool_result_budget"
    assert r.report.fates[2] == cw.Fate(index=2, fate="truncated", rule="tool_result_cut", chars_removed=161)
    assert budget_tool_results(r.messages, 100, profile=FIM, max_total_share=None).report.reason is None
    # the guard's step 1 reports it as a cut tool result
    guard = cw.ContextGuard(context_window=100, max_output_tokens=10, profile=FIM)
    g = guard.check(msgs)
    assert g.messages[2]["content"] == out
    assert [(type(e).__name__, e.results, e.chars_removed) for e in g.events] == [("ToolResultTruncated", 1, 161)]


def test_the_cap_keeps_an_observations_prefix_when_only_the_marker_fits() -> None:
    """A 20-character cap on "[Tool results]\\n" + 400 y's (415): no room past the prefix
    (keep 0), so the prefix stays and the rest, the line break and the one line of y's
    (whole: 1 line), become the marker, 14 + 1 + 41 = 56 characters; a second run leaves
    it (cut to its marker alone). A cap of 100 keeps 25 and 26 y's around "[... 349
    characters removed ...]" (within the line: no line count): 15 + 25 + 1 + 32 + 1 + 26 =
    100."""
    text = "[Tool results]\n" + "y" * 400
    msgs = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "cat"},
        {"role": "user", "content": text},
    ]
    r = budget_tool_results(msgs, 10**9, max_message_chars=20)
    assert r.messages[2]["content"] == "[Tool results]\n[... 401 characters (1 line) removed ...]"
    assert r.report.fates[2].chars_removed == 401
    again = budget_tool_results(r.messages, 10**9, max_message_chars=20)
    assert again.report.reason is None and same_objects(again.messages, r.messages)
    r = budget_tool_results(msgs, 10**9, max_message_chars=100)
    out = r.messages[2]["content"]
    assert out == "[Tool results]\n" + "y" * 25 + "\n[... 349 characters removed ...]\n" + "y" * 26
    assert len(out) == 100


def test_giant_tool_result_case() -> None:
    path = CASES / "giant-tool-result.json"
    if not path.exists():
        pytest.skip("../shared/cases not found beside the repo")
    doc = load(path)
    msgs = doc["messages"]
    before = msgspec.json.encode(msgs)
    r = budget_tool_results(msgs, 128_000)
    assert msgspec.json.encode(msgs) == before
    out = r.messages
    # the 2 MB result (95,000 lines of 22 characters, then "ERROR: link failed") is cut
    # under the first seed's 50,000-character cap, marker included, keeping head and tail
    # at line starts (fresh14 finding 2: the cap kept the head only and lost the ERROR
    # line): 1,135 lines of head (24,970 characters), 1,134 lines and the ERROR line of
    # tail (24,966), 2,090,018 - 49,936 = 2,040,082 characters (92,731 lines) removed
    text = out[3]["content"]
    marker = "[... 2040082 characters (92731 lines) removed ...]"
    assert len(text) == 24_970 + len(marker) + 1 + 24_966 == 49_987
    assert text == msgs[3]["content"][:24_970] + marker + "\n" + msgs[3]["content"][-24_966:]
    assert text.endswith("\nERROR: link failed") and text.count(" removed ...]") == 1
    assert r.report.fates[3].chars_removed == 2_040_082
    assert r.report.fates[3].rule == "message_char_cap" and r.report.reason == "message_char_cap"
    assert [m is n for m, n in zip(out, msgs, strict=True)] == [True, True, True, False, True, True]
    assert cw.validate(out, "openai") == []
    # without the cap the share rule cuts it to fit half of the window
    r2 = budget_tool_results(msgs, 128_000, max_message_chars=None)
    assert cw.message_tokens([r2.messages[3]])[0] <= 64_000 and r2.report.fates[3].rule == "tool_result_cut"
    # and the case's own expectation holds after trimming: fits, keeps "sys" and "Fix it"
    t = cw.trim_turns(r.messages, doc["call"]["args"]["budget"], profile=doc["call"]["args"]["profile"])
    assert t.report.fits and cw.validate(t.messages, "openai") == []
    assert {"sys", "Fix it"} <= {m["content"] for m in t.messages if isinstance(m["content"], str)}


def test_bad_options() -> None:
    msgs = history()
    with pytest.raises(ValueError):
        budget_tool_results(msgs, 0)
    with pytest.raises(ValueError):  # a number option: fit's convention (test_input_consistency)
        budget_tool_results(msgs, True)
    with pytest.raises(ValueError):
        budget_tool_results(msgs, 100, max_result_share=1.5)
    with pytest.raises(ValueError):
        budget_tool_results(msgs, 100, max_total_share=0)
    with pytest.raises(TypeError):
        budget_tool_results(msgs, 100, output_heavy_tools="bash")
    with pytest.raises(ValueError):
        budget_tool_results(msgs, 100, max_message_chars=0)
    with pytest.raises(ValueError):
        budget_tool_results(msgs, 100, profile="nope")
    with pytest.raises(cw.InvalidMessageError) as e:
        budget_tool_results([{"role": "user", "content": 5}], 100)
    assert e.value.index == 0
    with pytest.raises(ValueError):
        micro_compact(msgs, -1)
    with pytest.raises(TypeError):
        micro_compact(msgs, 1, tools="bash")
    with pytest.raises(ValueError):
        prune_middle(msgs, "big")
    with pytest.raises(ValueError):
        prune_middle(msgs, -1)
    with pytest.raises(ValueError):
        prune_middle(msgs, keep_recent=-2)


def test_default_tool_lists() -> None:
    assert {"read_file", "read", "bash", "grep", "glob", "search", "web_fetch", "webfetch"} <= OUTPUT_HEAVY_TOOLS
    assert {"write", "write_file", "create", "edit", "multiedit"} <= WRITE_TOOLS
    assert not OUTPUT_HEAVY_TOOLS & WRITE_TOOLS
    assert all(t == t.casefold() for t in OUTPUT_HEAVY_TOOLS | WRITE_TOOLS)


# --------------------------------------------------------------------------- micro_compact


def test_micro_compact_keeps_newest_and_is_idempotent() -> None:
    msgs = history()
    before = copy.deepcopy(msgs)
    r = micro_compact(msgs, keep_recent=2, profile=FIM)
    assert msgs == before
    # four results (3, 5, 7, 11); the newest two (7, 11) stay; 3 and 5 are cleared (every
    # tool, write tools included, as no `tools` list is given)
    assert r.messages[3]["content"] == "[tool result cleared: 800 characters of read_file output]"
    assert r.messages[5]["content"] == "[tool result cleared: 800 characters of write_file output]"
    assert all(r.messages[i] is msgs[i] for i in range(12) if i not in (3, 5))
    assert r.report.reason == "micro_compact"
    # 862 - 204 + 18 - 204 + (4 + 58 // 4) = 490
    assert r.report.tokens_after == 490 and r.report.budget is None
    assert [f.index for f in r.report.fates if f.rule == "tool_result_cleared"] == [3, 5]
    again = micro_compact(r.messages, keep_recent=2, profile=FIM)
    assert again.report.reason is None and same_objects(again.messages, r.messages)
    # a smaller keep_recent clears only the not yet cleared ones, and counts only them
    third = micro_compact(r.messages, keep_recent=0, profile=FIM)
    assert [f.index for f in third.report.fates if f.rule == "tool_result_cleared"] == [7, 11]
    assert third.messages[3] is r.messages[3]


def test_micro_compact_tools_filter_and_short_results() -> None:
    msgs = [*history(), oa_call("b2", "bash"), oa_result("b2", "ok")]
    r = micro_compact(msgs, keep_recent=0, tools=["BASH", "grep"])
    assert r.messages[3] is msgs[3] and r.messages[5] is msgs[5]  # read_file, write_file: not listed
    assert r.messages[7]["content"].startswith("[tool result cleared: 800 characters of Bash")
    assert r.messages[11]["content"].startswith("[tool result cleared: 800 characters of grep")
    assert r.messages[13] is msgs[13]  # "ok" is shorter than its marker would be


def test_micro_compact_never_clears_a_result_its_marker_costs_more_than() -> None:
    """fresh45 #4: a rule line of 120 "=" is longer than its marker in characters but
    cheaper in tokens; clearing it grew the conversation (62 -> 70 tokens, reason
    micro_compact). Now it stays, as budget_tool_results leaves it; a result of 500
    letters the marker is cheaper than is still cleared. ``fim`` (4 characters a token,
    4 a message): the rule line is 30 tokens, its 58-character marker 14, so there it goes."""
    rule = "=" * 120
    msgs = [*history()[:3], oa_result("a1", rule)]
    r = micro_compact(msgs, keep_recent=0)
    assert r.report.reason is None and same_objects(r.messages, msgs)
    assert r.report.tokens_after == r.report.tokens_before
    assert cw.budget_tool_results(msgs, 40, keep_recent=0).report.reason is None
    # the same result in fim's count: 4 + 30 against 4 + 14, cleared
    f = micro_compact(msgs, keep_recent=0, profile=FIM)
    assert f.report.reason == "micro_compact"
    assert f.messages[3]["content"] == "[tool result cleared: 120 characters of read_file output]"
    assert f.report.tokens_before - f.report.tokens_after == 30 - 14


def test_micro_compact_anthropic_and_orphans() -> None:
    msgs = [
        Message(role="user", content=[TextPart(text="q")]),
        Message(role="assistant", content=[ToolCall(id="r1", name="Read", arguments="{}")]),
        Message(role="user", content=[ToolResult(call_id="r1", content=[TextPart(text="x" * 300)])]),
        Message(role="user", content=[ToolResult(call_id="zz", content=[TextPart(text="o" * 300)])]),
        Message(role="assistant", content=[ToolCall(id="r2", name="Read", arguments="{}")], pinned=True),
        Message(role="user", content=[ToolResult(call_id="r2", content=[TextPart(text="y" * 300)])]),
    ]
    r = micro_compact(msgs, keep_recent=1)
    assert r.messages[2].content[0].content[0].text == "[tool result cleared: 300 characters of Read output]"
    # a result that answers no call is named "tool"
    assert r.messages[3].content[0].content[0].text == "[tool result cleared: 300 characters of tool output]"
    assert r.messages[5] is msgs[5]
    assert r.messages[2].content[0].call_id == "r1"


# --------------------------------------------------------------------------- prune_middle


def two_turn_agent() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        oa_call("c1", "bash"),
        oa_result("c1", "out 1"),
        oa_call("c2", "bash"),
        oa_result("c2", "out 2"),
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "next"},
        oa_call("c3", "bash"),
        oa_result("c3", "out 3"),
        oa_call("c4", "bash"),
        oa_result("c4", "out 4"),
        {"role": "assistant", "content": "done"},
    ]


def test_prune_middle_openai() -> None:
    msgs = two_turn_agent()
    before = copy.deepcopy(msgs)
    r = prune_middle(msgs, profile=FIM)
    assert msgs == before
    # 13 messages: N = min(6, 13 // 3) = 4, the tail 9..12 starts at c3's result, so it
    # widens to c3's call (8). Kept: 0 (preamble), 1 (first user), 7 (current request),
    # 8..12. Removed: 2..6, five messages; the notice goes before "next".
    out = r.messages
    notice = {"role": "user", "content": "[context compacted: 5 earlier messages removed]"}
    assert out == [msgs[0], msgs[1], notice, *msgs[7:]]
    assert all(out[i] is msgs[j] for i, j in [(0, 0), (1, 1), (3, 7), (4, 8), (8, 12)])
    assert cw.validate(out, "openai") == []
    rules = [(f.fate, f.rule) for f in r.report.fates]
    assert rules == [
        ("kept", "preamble"),
        ("kept", "first_user_message"),
        *[("dropped", "middle_pruned")] * 5,
        ("kept", "current_request"),
        ("kept", "tool_unit"),
        *[("kept", "recent_messages")] * 4,
    ]
    rep = r.report
    assert rep.reason == "middle_pruned" and rep.dropped_messages == 5 and rep.inserted_messages == 1
    assert (rep.turns_before, rep.kept_turns, rep.dropped_turns) == (2, 2, 0)
    assert rep.tokens_after == cw.count_messages(out, FIM) and rep.tokens_before == cw.count_messages(msgs, FIM)
    seg = cw.segment_turns(out)
    assert out[seg.current_request] is msgs[7]


def test_prune_middle_notice_stands_alone_in_single_turn_loop() -> None:
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    for k in range(1, 6):
        msgs += [oa_call(f"c{k}", "bash"), oa_result(f"c{k}", f"out {k}")]
    # 12 messages: N = min(6, 12 // 3) = 4: the units of c4 and c5 (8..11) stay; 2..7 go.
    # The notice is a user message of its own where the removed run was; it is not a real
    # user message, so it neither starts a turn nor replaces the current request.
    r = prune_middle(msgs)
    out = r.messages
    assert len(out) == 7 and out[0] is msgs[0] and out[1] is msgs[1] and out[3:] == msgs[8:]
    assert out[2] == {"role": "user", "content": "[context compacted: 6 earlier messages removed]"}
    assert r.report.fates[1] == cw.Fate(index=1, fate="kept", rule="current_request")
    assert r.report.inserted_messages == 1
    assert cw.segment_turns(out).current_request == 1
    assert cw.validate(out, "openai") == []


def anthropic_agent() -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
    for k in range(1, 4):
        msgs += [
            {"role": "assistant", "content": [an_use(f"t{k}", "Bash")]},
            {"role": "user", "content": [an_result(f"t{k}", f"out {k}")]},
        ]
    msgs += [
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "next"},
        {"role": "assistant", "content": [an_use("t4", "Bash")]},
        {"role": "user", "content": [an_result("t4", "out 4")]},
        {"role": "assistant", "content": "ok"},
    ]
    return msgs


def test_prune_middle_keeps_a_request_that_received_a_moved_result() -> None:
    """An Anthropic call holding its own result before the ``tool_use``: repair moves the
    result into the request after it, which is then a carrier (no real user message).
    prune_middle kept the real user message before the call ("Read the config.") as the
    current request and pruned the request itself; the request is found by origin now
    (as in trim_turns and fit), kept with its call. keep_recent=4 keeps the last two
    steps; 1 + 12 + 1 + 6 = 20 messages go."""
    call = {
        "role": "assistant",
        "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "cfg"},
            {"type": "tool_use", "id": "t1", "name": "read_file", "input": {}},
        ],
    }
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "first task"}, {"role": "assistant", "content": "ok"}]
    for i in range(6):
        msgs += [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]
    msgs += [{"role": "user", "content": "Read the config."}, call, {"role": "user", "content": "Now fix the bug."}]
    for i in range(5):
        msgs += [{"role": "assistant", "content": f"step {i}"}, {"role": "user", "content": f"[Tool results] out {i}"}]
    r = cw.prune_middle(msgs, keep_recent=4, format="anthropic")
    fates = [(f.fate, f.rule) for f in r.report.fates]
    assert fates[0] == ("kept", "notice_added") and fates[23:] == [("kept", "recent_messages")] * 4
    assert fates[14:17] == [("dropped", "middle_pruned"), ("repaired", "result_moved"), ("repaired", "result_moved")]
    assert [i for i, f in enumerate(fates) if f == ("dropped", "middle_pruned")] == [
        *range(1, 15),
        *range(17, 23),
    ]
    assert r.messages[0]["content"][-1]["text"] == "[context compacted: 20 earlier messages removed]"
    assert r.messages[1:3] == [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read_file", "input": {}}]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "cfg"},
                {"type": "text", "text": "Now fix the bug."},
            ],
        },
    ]
    assert r.messages[3:] == msgs[23:] and cw.validate(r.messages, "anthropic") == []


def test_prune_middle_anthropic_keeps_alternation() -> None:
    msgs = anthropic_agent()
    r = prune_middle(msgs, format="anthropic")
    # 12 messages: N = 4: 8..11 kept, plus 0 (first user) and 8 (current request). 0 and 8
    # are both user messages, so the assistant message 7 ("done") stays too; 1..6 go (6).
    # The message after the removed run is an assistant: the notice becomes the last text
    # block of the user message before it.
    out = r.messages
    assert out[0]["content"] == [
        {"type": "text", "text": "task"},
        {"type": "text", "text": "[context compacted: 6 earlier messages removed]"},
    ]
    assert out[1:] == msgs[7:] and all(a is b for a, b in zip(out[1:], msgs[7:], strict=True))
    assert r.report.fates[7].rule == "alternation"
    assert cw.validate(out, "anthropic") == []


def test_prune_middle_anthropic_plain_chat() -> None:
    msgs = [{"role": "user", "content": "task"}, {"role": "assistant", "content": "a1"}]
    for k in range(2, 7):
        msgs += [{"role": "user", "content": f"u{k}"}, {"role": "assistant", "content": f"a{k}"}]
    # 12 messages, N = 4: keep 0, 8..11 (10, "u6", is the current request). 0 and 8 ("u5")
    # are both user messages, so 7 ("a4") stays too: 1..6 go (6). The first kept message
    # after them is an assistant, so the notice trails "task".
    r = prune_middle(msgs, format="anthropic")
    assert [texts_of(m) for m in r.messages] == [
        "task\n[context compacted: 6 earlier messages removed]",
        "a4",
        "u5",
        "a5",
        "u6",
        "a6",
    ]
    # with keep_recent=3 the kept tail starts at a user message: the notice leads it
    r3 = prune_middle(msgs, keep_recent=3, format="anthropic")
    # tail 9..11 ("a5", "u6", "a6"); 0 "task" (user) then 9 (assistant): roles alternate;
    # 1..8 go (8), the first kept message after them is an assistant: trails "task" again
    assert [texts_of(m) for m in r3.messages] == [
        "task\n[context compacted: 8 earlier messages removed]",
        "a5",
        "u6",
        "a6",
    ]
    r2 = prune_middle(msgs, keep_recent=2, format="anthropic")
    # tail 10..11 ("u6", "a6"): "task" and "u6" are both user, so 9 ("a5") stays; 1..8 go
    assert [texts_of(m) for m in r2.messages] == [
        "task\n[context compacted: 8 earlier messages removed]",
        "a5",
        "u6",
        "a6",
    ]
    for out in (r.messages, r2.messages, r3.messages):
        assert cw.validate(out, "anthropic") == []


def test_prune_middle_anthropic_notice_leads_next_user() -> None:
    # a pinned assistant message in the middle stays, and so does what keeps roles alternating
    structs = [
        Message(role="user", content=[TextPart(text="task")]),
        Message(role="assistant", content=[TextPart(text="a1")], pinned=True),
        Message(role="user", content=[TextPart(text="u2")]),
        Message(role="assistant", content=[TextPart(text="a2")]),
        Message(role="user", content=[TextPart(text="u3")]),
        Message(role="assistant", content=[TextPart(text="a3")]),
        Message(role="user", content=[TextPart(text="u4")]),
        Message(role="assistant", content=[TextPart(text="a4")]),
    ]
    rp = prune_middle(structs, keep_recent=2, format="anthropic")
    # kept: 0, 1 (pinned), 6..7; 1 (assistant) then 6 (user): alternate; 2..5 go. The
    # first kept message after them is "u4", a user message: the notice leads it.
    assert [m.content[0].text for m in rp.messages] == [
        "task",
        "a1",
        "[context compacted: 4 earlier messages removed]",
        "a4",
    ]
    assert rp.messages[2].content[1].text == "u4" and rp.messages[1] is structs[1]
    assert rp.report.fates[1].rule == "pinned" and rp.report.fates[6].rule == "notice_added"
    assert cw.validate(rp.messages, "anthropic") == []


def test_prune_middle_dedupes_notice() -> None:
    msgs = two_turn_agent()
    once = prune_middle(msgs).messages
    # once: sys, task, notice(5), next, c3, r3, c4, r4, done (9 messages). keep_recent=2:
    # tail 7..8 widens to c4's call (6); kept 0, 1, 3 (current request), 6..8; the old
    # notice is replaced; c3 and its result (4, 5) go: 5 + 2 = 7 removed in all. The new
    # notice stands where the removed run was: after the request, before c4's call.
    r = prune_middle(once, keep_recent=2)
    out = r.messages
    assert [texts_of(m) if m["role"] != "assistant" else m.get("content") for m in out][:4] == [
        "sys",
        "task",
        "next",
        "[context compacted: 7 earlier messages removed]",
    ]
    assert out[4:] == once[6:]
    assert sum("[context compacted" in texts_of(m) for m in out if m["role"] != "assistant") == 1
    assert r.report.fates[2] == cw.Fate(index=2, fate="dropped", rule="notice_replaced")
    # pruning that output again moves nothing but its notice: nothing changes
    again = prune_middle(out, keep_recent=2)
    assert again.report.reason is None and same_objects(again.messages, out)
    assert cw.validate(out, "openai") == []


def test_prune_middle_budget_identity_and_repair() -> None:
    msgs = two_turn_agent()
    total = cw.count_messages(msgs)
    r = prune_middle(msgs, total)
    assert r.report.reason is None and same_objects(r.messages, msgs) and r.report.fits
    r = prune_middle(msgs, total - 1)
    assert r.report.reason == "middle_pruned" and r.report.budget == total - 1 and r.report.fits

    class Budget:  # the budget helper's struct exposes the token budget as `usable`
        usable = total

    assert prune_middle(msgs, Budget()).report.reason is None
    # an orphan result in input that fits is repaired, as trim_turns does
    broken = [*msgs, oa_result("zz", "orphan")]
    r = prune_middle(broken, 10**6)
    assert r.report.reason == "tool_pairs" and len(r.messages) == len(msgs)
    assert r.report.fates[-1].rule == "orphan_result"


def test_prune_middle_small_or_nothing_to_remove() -> None:
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    # N = min(6, 2 // 3) = 0, but "hi" is the first and current request; "hello" would go,
    # but the notice costs more than it (conservative), so nothing is pruned
    r = prune_middle(msgs)
    assert r.report.reason is None and same_objects(r.messages, msgs)
    long = [msgs[0], {"role": "assistant", "content": "hello " * 50}]
    r = prune_middle(long)
    assert [texts_of(m) for m in r.messages] == ["hi\n[context compacted: 1 earlier messages removed]"]
    r = prune_middle(msgs, keep_recent=5)
    assert r.report.reason is None and same_objects(r.messages, msgs)
    assert prune_middle([], keep_recent=1).messages == []


# --------------------------------------------------------------------------- corpus


FILES = corpus_files()


@pytest.mark.parametrize("path", need(FILES, "../shared/corpus"), ids=ids(FILES) or None)
def test_corpus(path: Path) -> None:
    doc = load(path)
    fmt, msgs = doc["format"], doc["messages"]
    snapshot = msgspec.json.encode(msgs)
    total = cw.count_messages(msgs, format=fmt)
    seg = cw.segment_turns(msgs, format=fmt)
    runs = [
        budget_tool_results(msgs, max(1, total // 2), format=fmt),
        budget_tool_results(msgs, max(1, total // 8), format=fmt, max_message_chars=2000),
        micro_compact(msgs, 1, format=fmt),
        prune_middle(msgs, format=fmt),
        prune_middle(msgs, max(0, total // 2), keep_recent=2, format=fmt),
    ]
    assert msgspec.json.encode(msgs) == snapshot, "input mutated"
    for r in runs:
        out = r.messages
        assert cw.validate(out, fmt, format=fmt) == []
        assert out[: seg.preamble_end] == msgs[: seg.preamble_end]
        assert all(a is b for a, b in zip(out[: seg.preamble_end], msgs[: seg.preamble_end], strict=True))
        assert r.report.tokens_after == cw.count_messages(out, format=fmt)
        assert len(r.report.fates) == len(msgs)
        if seg.current_request is not None:
            request = msgs[seg.current_request]
            assert r.report.fates[seg.current_request].fate != "dropped"
            if r.report.fates[seg.current_request].rule not in ("notice_added", "message_char_cap"):
                assert any(m is request for m in out)
            oseg = cw.segment_turns(out, format=fmt)
            assert oseg.current_request is not None
            assert texts_of(request)[:200] in texts_of(out[oseg.current_request])
        if r.report.reason is None:
            assert same_objects(out, msgs)
    # idempotence and a single notice
    for r, again in [
        (runs[0], budget_tool_results(runs[0].messages, max(1, total // 2), format=fmt)),
        (runs[2], micro_compact(runs[2].messages, 1, format=fmt)),
    ]:
        assert again.report.reason is None and same_objects(again.messages, r.messages)
    twice = prune_middle(runs[3].messages, format=fmt).messages
    assert sum(texts_of(m).count("[context compacted") for m in twice if m["role"] == "user") <= 1
    assert cw.validate(twice, fmt, format=fmt) == []


# --------------------------------------------------------------------------- properties


ID_RULES = ("tool_name_not_allowed", "call_id_not_allowed", "reused_call_id")


def pairing(msgs: list[Message], provider: str) -> list[tuple[int, str, str | None]]:
    # not pairing faults: roles, a message the adapter cannot write (an image with no
    # source), one with empty content and a prefill ending in whitespace, which
    # prune_middle keeps as they are (checked apart: never more empty_content than the
    # input has), and Anthropic's rules on tool_use ids and names (fresh20b #4, #6: the
    # caller's ids, renamed by no rule; checked apart: never more than the input has)
    alternation = {
        "first_not_user",
        "not_alternating",
        "role_not_allowed",
        "unwritable_message",
        "empty_content",
        "trailing_whitespace",
        *ID_RULES,
        "thinking_not_first",  # the input's thinking blocks, kept as they are
        "thinking_last",
        "image_not_allowed",  # the input's images outside user messages (checked apart)
        "block_not_allowed",  # the input's blocks the provider refuses there (likewise)
    }
    return [c for c in codes(cw.validate(msgs, provider)) if c[1] not in alternation]


@given(case(), st.integers(1, 3000), st.integers(0, 8))
def test_properties(c: tuple[str, list[Message]], window: int, keep: int) -> None:
    provider, msgs = c
    snapshot = msgspec.to_builtins(msgs)
    # a content rule may drop a message's image with no source, which the adapter cannot
    # write: an unwritable_message violation may go, none may come; so may an
    # empty_content one, for a blank text block in a tool result it replaces (empty19 #2),
    # and a trailing_whitespace one, for a prefill whose end a cut replaces by its marker,
    # and an image_not_allowed one, for an image in a tool result a rule clears
    unwritable = "unwritable_message"
    may_go = (unwritable, "empty_content", "trailing_whitespace", "image_not_allowed", "block_not_allowed")
    before = codes(cw.validate(msgs, provider))
    valid_before = [c for c in before if c[1] not in may_go]
    pre = next((i for i, m in enumerate(msgs) if m.role not in ("system", "developer")), len(msgs))

    # content-only rules: structure untouched, same violations as the input, idempotent
    for run in (
        lambda m: budget_tool_results(m, window, format=provider, max_message_chars=500),
        lambda m: micro_compact(m, keep, format=provider),
    ):
        r = run(msgs)
        assert msgspec.to_builtins(msgs) == snapshot
        assert len(r.messages) == len(msgs)
        after = codes(cw.validate(r.messages, provider))
        assert [c for c in after if c[1] not in may_go] == valid_before
        for code in (unwritable, "trailing_whitespace"):
            assert {c for c in after if c[1] == code} <= {c for c in before if c[1] == code}
        for i in range(len(msgs)):  # none comes, in any message
            for code in ("empty_content", "image_not_allowed", "block_not_allowed"):
                assert after.count((i, code, None)) <= before.count((i, code, None))
        assert all(a is b for a, b in zip(r.messages[:pre], msgs[:pre], strict=True))
        assert all(r.messages[i] is m for i, m in enumerate(msgs) if m.pinned)
        assert r.report.tokens_after == cw.count_messages(r.messages, format=provider)
        changed = [i for i, (a, b) in enumerate(zip(r.messages, msgs, strict=True)) if a is not b]
        assert changed == [f.index for f in r.report.fates if f.fate == "truncated"]
        assert (r.report.reason is None) == (not changed)
        again = run(r.messages)
        assert again.report.reason is None and same_objects(again.messages, r.messages)

    # the character cap never cuts the current request's own content, found as trim
    # finds it (small20: one holding an orphan beside its text was cut)
    req = request_source(msgs, provider)
    if req is not None:
        capped = budget_tool_results(msgs, 10**9, format=provider, max_message_chars=100).messages[req]
        own = [[q for q in m.content if not isinstance(q, ToolResult)] for m in (capped, msgs[req])]
        assert own[0] == own[1]

    r = prune_middle(msgs, keep_recent=keep if keep < 8 else None, format=provider)
    out = r.messages
    assert msgspec.to_builtins(msgs) == snapshot
    assert pairing(out, provider) == []
    for code in ("empty_content", "image_not_allowed", "block_not_allowed", *ID_RULES):
        assert sum(c[1] == code for c in codes(cw.validate(out, provider))) <= sum(c[1] == code for c in before)
    repaired = cw.repair_tool_pairs(msgs, format=provider).messages
    if not cw.validate(repaired, provider):
        assert cw.validate(out, provider) == []
    assert all(a is b for a, b in zip(out[:pre], msgs[:pre], strict=True))
    fates = r.report.fates
    assert all(fates[i].fate != "dropped" for i, m in enumerate(msgs) if m.pinned)
    # the current request stays: the input's last real user message, or the last one after
    # repair when that is later (README Tool pairs; a request that received a moved result
    # is a carrier after repair and still the request); found by origin through the
    # reference's repair: a message repair changed is a new object (an orphan result
    # dropped beside an image made the last input message the request: matched by
    # identity, the message before it was taken for the request)
    req = request_source(msgs, provider)
    if req is not None:
        assert fates[req].fate != "dropped"
    assert out or not repaired
    assert r.report.tokens_after == cw.count_messages(out, format=provider)
    notices = sum(
        1 for m in out for p in m.content if isinstance(p, TextPart) and p.text.startswith("[context compacted:")
    )
    assert notices == (1 if r.report.reason == "middle_pruned" else 0)
    twice = prune_middle(out, format=provider).messages
    assert (
        sum(1 for m in twice for p in m.content if isinstance(p, TextPart) and p.text.startswith("[context compacted:"))
        <= 1
    )
    assert pairing(twice, provider) == []


def test_message_char_cap_tiny_cap_is_idempotent() -> None:
    blocks = [{"type": "text", "text": ch * 2000} for ch in "abc"]
    msgs = [{"role": "user", "content": "go"}, {"role": "assistant", "content": blocks}]
    r = budget_tool_results(msgs, 10**9, max_message_chars=10, format="anthropic")
    # 6,000 characters over a 10-character cap: every block goes down to its marker alone,
    # "\n[Truncated: 2000 characters removed]" (1 + 12 + 4 + 20 = 37 characters); 111 > 10
    # remain, which is the most the rule can do
    assert [b["text"] for b in r.messages[1]["content"]] == ["\n[Truncated: 2000 characters removed]"] * 3
    assert r.report.fates[1].chars_removed == 6000
    again = budget_tool_results(r.messages, 10**9, max_message_chars=10, format="anthropic")
    assert again.report.reason is None and same_objects(again.messages, r.messages)


def test_prune_middle_counts_a_notice_block_that_goes() -> None:
    structs = [
        Message(role="user", content=[TextPart(text="task")]),
        Message(role="assistant", content=[TextPart(text="a1")], pinned=True),
        *[
            Message(role=role, content=[TextPart(text=f"{role[0]}{k}")])
            for k in (2, 3, 4)
            for role in ("user", "assistant")
        ],
    ]
    first = prune_middle(structs, keep_recent=2, format="anthropic").messages
    # kept 0, 1 (pinned), 6..7 ("u4", "a4"); 2..5 go (4); the notice leads "u4"
    assert [[p.text for p in m.content] for m in first] == [
        ["task"],
        ["a1"],
        ["[context compacted: 4 earlier messages removed]", "u4"],
        ["a4"],
    ]
    grown = [
        *first,
        *[
            Message(role=role, content=[TextPart(text=f"{role[0]}{k}")])
            for k in (5, 6, 7)
            for role in ("user", "assistant")
        ],
    ]
    r = prune_middle(grown, keep_recent=2, format="anthropic")
    # kept 0, 1, 8..9 ("u7", "a7"); 2..7 go, among them the message the old notice led:
    # 4 counted before + 6 now = 10, in one notice leading "u7"
    assert [[p.text for p in m.content] for m in r.messages] == [
        ["task"],
        ["a1"],
        ["[context compacted: 10 earlier messages removed]", "u7"],
        ["a7"],
    ]
    assert cw.validate(r.messages, "anthropic") == []


@pytest.mark.parametrize("shape", ["openai", "structs"])
def test_nothing_to_do_returns_the_input(shape: str) -> None:
    msgs: list[Any] = history()
    if shape == "structs":
        msgs = [msgspec.structs.replace(m, content_kind=None) for m in cw.adapters.to_canonical(msgs, "openai")]
    # 862 fim tokens: under 0.75 x 10,000; no result over 5,000; no message over 50,000 chars
    r = budget_tool_results(msgs, 10_000, profile=FIM)
    assert r.report.reason is None and same_objects(r.messages, msgs)
    assert r.report.tokens_before == r.report.tokens_after == 862 and r.report.budget == 7500
    assert all(f.fate == "kept" and f.rule == "fits" for f in r.report.fates)
    # every result is among the newest 4
    r = micro_compact(msgs, keep_recent=4)
    assert r.report.reason is None and same_objects(r.messages, msgs)
    # fits the budget; and without a budget, keep_recent covers everything after the request
    for r in (prune_middle(msgs, 862, profile=FIM), prune_middle(msgs, keep_recent=11)):
        assert r.report.reason is None and same_objects(r.messages, msgs)


def test_notice_does_not_start_a_turn() -> None:
    """A standalone middle-pruning notice is ours, like the breadcrumb: it neither starts a
    turn nor becomes the current request, in Rust and in ``_reference`` alike."""
    notice = COMPACTION_NOTICE.format(n=7)
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": notice},
        {"role": "assistant", "content": "b"},
    ]
    seg = cw.segment_turns(msgs, format="openai")
    # one turn from the first user message to the end; the notice is inside it
    assert seg.turns == [(1, 5)] and seg.current_request == 1
    canon = [
        Message(role="user", content=[TextPart(text=t)])
        for t in (notice, "[context compacted: x earlier messages removed]")
    ]
    assert [ref.is_real_user(m) for m in canon] == [False, True]


def test_prune_middle_pinned_indices_for_dict_input() -> None:
    # 12 messages, keep_recent=2: kept 0 (preamble), 1 (first user message), 5 (pinned
    # by index), 10 and 11 (the newest two); removed 2-4 and 6-9: 7 messages, one
    # notice before the first message kept after the first removed run
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    for k in range(5):
        msgs += [{"role": "assistant", "content": f"step {k}"}, {"role": "user", "content": f"more {k}"}]
    r = prune_middle(msgs, keep_recent=2, pinned=[5])
    assert [m["content"] for m in r.messages] == [
        "sys",
        "task",
        "[context compacted: 7 earlier messages removed]",
        "more 1",
        "step 4",
        "more 4",
    ]
    assert r.messages[3] is msgs[5] and r.report.fates[5].rule == "pinned"
    with pytest.raises(ValueError, match="pinned index"):
        prune_middle(msgs, pinned=[12])
    with pytest.raises(TypeError, match="pinned"):
        prune_middle(msgs, pinned=5)  # type: ignore[arg-type]


def test_budget_tool_results_pinned_indices_for_dict_input() -> None:
    # the docstring's conversation: the bash result is 4 + 12,000 // 4 = 3,004 tokens
    # (fim), over 50% of a 2,000 window, so it is cut; pinned by index it stays whole
    msgs = [
        {"role": "user", "content": "build it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "b1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "b1", "content": "ok\n" * 4000},
    ]
    assert budget_tool_results(msgs, 2000, profile="fim").report.fates[2].rule == "tool_result_cut"
    r = budget_tool_results(msgs, 2000, profile="fim", pinned=[2])
    assert r.report.reason is None and all(a is b for a, b in zip(r.messages, msgs, strict=True))
    with pytest.raises(ValueError, match="pinned index"):
        budget_tool_results(msgs, 2000, pinned=[3])
    with pytest.raises(TypeError, match="pinned"):
        budget_tool_results(msgs, 2000, pinned="2")  # type: ignore[arg-type]


@pytest.mark.parametrize("call", [micro_compact, prune_middle, lambda m, **kw: budget_tool_results(m, 2000, **kw)])
def test_pinned_item_of_the_wrong_type_is_a_type_error(call: Any) -> None:
    # README, Errors (fresh11 N6): an item of the wrong type in a collection option is a
    # TypeError, as in FitPolicy; an int out of range stays a ValueError
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    for bad, name in (("0", "str"), (None, "NoneType"), (True, "bool"), (1.0, "float"), ([0], "list")):
        with pytest.raises(TypeError) as info:
            call(msgs, pinned=[bad])
        assert str(info.value) == f"pinned must hold message indices (int), got {name}"
    with pytest.raises(ValueError) as info:
        call(msgs, pinned=[0, 2])
    assert str(info.value) == "pinned index 2 is not a message index (0..1)"


def test_keep_recent_protects_newest_results_instead_of_the_current_turn() -> None:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "s" * 40}, {"role": "user", "content": "do the task"}]
    for i in range(10):
        msgs += [oa_call(f"c{i}", "bash"), oa_result(f"c{i}", "y" * 4000)]
    # 10,120 tokens (fim: 14 + 6 + 10 x (6 + 1,004)); window 12,000: threshold 9,000. All
    # results are in the current turn, so by default nothing is cleared.
    r = budget_tool_results(msgs, 12_000, profile=FIM, max_result_share=None, max_message_chars=None)
    assert r.report.reason is None and same_objects(r.messages, msgs)
    # keep_recent=2: the oldest go first; each clearing saves 1,004 - 17 = 987:
    # 10,120 - 987 = 9,133 > 9,000, - 987 = 8,146 <= 9,000
    r = budget_tool_results(msgs, 12_000, profile=FIM, max_result_share=None, max_message_chars=None, keep_recent=2)
    assert r.report.tokens_after == 8_146
    assert [i for i, m in enumerate(r.messages) if m is not msgs[i]] == [3, 5]
    # the newest keep_recent results are never cleared, whatever the threshold
    r = budget_tool_results(msgs, 12_000, profile=FIM, max_result_share=None, max_total_share=0.01, keep_recent=2)
    assert [i for i, m in enumerate(r.messages) if m is not msgs[i]] == [3, 5, 7, 9, 11, 13, 15, 17]
    with pytest.raises(ValueError, match="keep_recent"):
        budget_tool_results(msgs, 12_000, keep_recent=-1)


def test_prune_middle_never_grows_the_conversation() -> None:
    # fim: each "a"/"b" message costs 4 + 1 = 5; the notice "[context compacted: 2 earlier
    # messages removed]" (46 characters) costs 4 + 11 = 15 > the 10 it would replace
    msgs = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": "c"},
        {"role": "user", "content": "now"},
        {"role": "assistant", "content": "d"},
    ]
    r = prune_middle(msgs, keep_recent=2, profile=FIM)
    assert r.report.reason is None and same_objects(r.messages, msgs)
    big = [*msgs[:1], {"role": "assistant", "content": "a" * 400}, *msgs[2:]]
    r = prune_middle(big, keep_recent=2, profile=FIM)
    assert r.report.reason == "middle_pruned" and r.report.tokens_after < r.report.tokens_before


def test_micro_compact_pinned_indices_for_dict_input() -> None:
    msgs = [
        {"role": "user", "content": "read both"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [oa_call("r1", "Read")["tool_calls"][0], oa_call("r2", "Read")["tool_calls"][0]],
        },
        oa_result("r1", "x" * 500),
        oa_result("r2", "y" * 500),
    ]
    assert [i for i, m in enumerate(micro_compact(msgs, keep_recent=0).messages) if m is not msgs[i]] == [2, 3]
    r = micro_compact(msgs, keep_recent=0, pinned=(2,))
    assert [i for i, m in enumerate(r.messages) if m is not msgs[i]] == [3]
    with pytest.raises(ValueError):
        micro_compact(msgs, pinned=(9,))


def test_a_cut_that_would_not_lower_the_cost_is_not_made() -> None:
    # found by hypothesis: a result whose cost is an unsized image (1,445+ tokens) plus a
    # 49-character text is over half a tiny window; cutting the text to its marker made
    # the result cost more (1,533 -> 1,537 tokens)
    msgs = [
        Message(role="assistant", content=[ToolCall(id="c2", name="read_file", arguments="")]),
        Message(
            role="tool",
            content=[
                ToolResult(
                    call_id="c2",
                    content=[cw.ImagePart(source="https://example.com/a.png"), TextPart(text=cw.BREADCRUMB)],
                )
            ],
        ),
    ]
    r = budget_tool_results(msgs, 40)
    assert r.report.reason is None and same_objects(r.messages, msgs)


def test_prune_middle_anthropic_notice_leads_when_an_assistant_would() -> None:
    """Found by hypothesis: the only message before the gap was a "[Tool results]" carrier
    (not a real user message, so prunable); the first kept message was a pinned assistant
    one, and the notice went into the later user message, so the Anthropic conversation
    started with the assistant. The notice now leads as a user message of its own."""
    from contextwindow.messages import ImagePart, OpaquePart

    thinking = {"type": "thinking", "thinking": ""}
    msgs = [
        Message(
            role="user",
            content=[
                TextPart(text="[Tool results] x"),
                ImagePart(source="https://example.com/a.png"),
                OpaquePart(type="thinking", raw=thinking),
            ],
        ),
        Message(role="assistant", content=[OpaquePart(type="thinking", raw=thinking)], pinned=True),
        Message(role="user", content=[], pinned=True),
    ]
    # the empty user message is refused by the Messages API (empty_content), and so is the
    # assistant message holding only a thinking block (thinking_last, fresh20b #2: after
    # the other violations); the pruned output keeps them as they are, and adds none
    held = [(2, "empty_content", None), (1, "thinking_last", None)]
    assert codes(cw.validate(msgs, "anthropic")) == held
    r = prune_middle(msgs, keep_recent=0, format="anthropic")
    assert codes(cw.validate(r.messages, "anthropic")) == held
    assert [m.role for m in r.messages] == ["user", "assistant", "user"]
    assert r.messages[0].content == [TextPart(text="[context compacted: 1 earlier messages removed]")]
    assert r.messages[1] is msgs[1] and r.messages[2] is msgs[2]
    assert [f.fate for f in r.report.fates] == ["dropped", "kept", "kept"] and r.report.inserted_messages == 1


def test_clearing_an_image_result_never_puts_a_message_over_the_character_cap() -> None:
    # found by hypothesis: a result holding only an image (and an empty text) becomes a
    # 76-character marker when cleared; next to 425 characters of text that made 501,
    # over the 500-character cap, so the next call cut the message and was not a no-op.
    # Such a clearing waits now until the results cleared after it have made room, and
    # is skipped when they have not (the cap holds).
    from contextwindow.messages import ImagePart

    call = ToolCall(id="c1", name="read_file", arguments="")
    image = ImagePart(source="https://example.com/a.png")
    results = Message(
        role="user",
        content=[
            ToolResult(call_id="c1", content=[image, TextPart(text="")], is_error=True),
            ToolResult(call_id="c1", content=[TextPart(text="hello" * 85)], is_error=True),  # 425 characters
            TextPart(text=""),
        ],
    )
    msgs = [
        # a word: a message of none opens no turn (fresh53 #1), and the results would be
        # in the newest turn, which clearing never touches
        Message(role="user", content=[TextPart(text="go")], pinned=True),
        Message(role="assistant", content=[call, call], pinned=True),
        results,
        # the request: an image and a word (an image alone, or with a blank text, right
        # after the results would be what the tool showed, in their unit: fresh49 #1,
        # fresh51 #2)
        Message(role="user", content=[image, TextPart(text="see")], pinned=True),
    ]
    r = budget_tool_results(msgs, 276, format="anthropic", max_message_chars=500)
    again = budget_tool_results(r.messages, 276, format="anthropic", max_message_chars=500)
    assert again.report.reason is None and same_objects(again.messages, r.messages)
    parts = [x for p in r.messages[2].content for x in ([p] if isinstance(p, TextPart) else p.content)]
    assert sum(len(x.text) for x in parts if isinstance(x, TextPart)) <= 500  # the cap holds
    # without the cap the image result is cleared (it saves the image's tokens)
    free = budget_tool_results(msgs, 276, format="anthropic")
    assert free.report.reason == "tool_result_budget"
    assert free.messages[2].content[0].content[0].text.startswith("[tool result cleared: 0 characters and 1 non-text")


# --------------------------------------------------------------------------- the cut marker's line count


@pytest.mark.parametrize(
    ("text", "keep", "want"),
    [
        # three whole lines of 6 characters between the kept "line0\n" and "line4\n"
        (
            "line0\nline1\nline2\nline3\nline4\n",
            12,
            "line0\n[... 18 characters (3 lines) removed ...]\nline4\n",
        ),
        # one whole line: "1 line", not "1 lines"
        ("aaaa\nbbbb\ncccc\n", 10, "aaaa\n[... 5 characters (1 line) removed ...]\ncccc\n"),
        # the cut falls inside one line: no line was removed, so none is claimed
        ("x" * 100, 20, "x" * 10 + "\n[... 80 characters removed ...]\n" + "x" * 10),
        # cut inside the first and the last line (grapheme cuts at 5 and 40): of the three
        # lines touched only "bbb\n" goes whole
        (
            "a" * 20 + "\nbbb\n" + "c" * 20,
            10,
            "a" * 5 + "\n[... 35 characters (1 line) removed ...]\n" + "c" * 5,
        ),
    ],
    ids=["three_lines", "one_line", "inside_a_line", "partial_ends"],
)
def test_the_cut_marker_counts_whole_lines_only(text: str, keep: int, want: str) -> None:
    """fresh15 #6: "(1 lines)", also when no line was removed, only part of one."""
    from contextwindow.compact import _cut_lines

    out, gone = _cut_lines(text, keep)
    assert out == want
    assert gone == int(re.search(r"\[\.\.\. (\d+) characters", out)[1])  # type: ignore[index]


def test_a_cut_inside_one_line_claims_no_line() -> None:
    """fresh15 #6's reproducer: a 70,000-character result with no line break, cut by the
    50,000-character cap. The marker of the widest cut, "[... 70000 characters (1 line)
    removed ...]", is 43 characters, with a break each side 45: keep 49,955, which cuts
    20,045 characters and writes a 34-character marker "[... 20045 characters removed
    ...]": 49,991 in all. The 9 left over go to the kept text: 49,964 (24,982 each side),
    20,036 removed, a marker of the same 34 characters: 49,964 + 2 + 34 = 50,000."""
    tc = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    ms = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [tc]},
        {"role": "tool", "tool_call_id": "c1", "content": "A" * 70_000},
        {"role": "user", "content": "next"},
    ]
    g = cw.ContextGuard(cw.resolve_budget(context_window=10_000_000, max_output_tokens=1000))
    r = g.check(ms)
    assert r.messages[2]["content"] == "A" * 24_982 + "\n[... 20036 characters removed ...]\n" + "A" * 24_982
    assert [type(e).__name__ for e in r.events] == ["MessageTruncated"]
    assert r.events[0].chars_removed == 20_036  # type: ignore[attr-defined]


def test_an_observation_whose_prefix_carries_a_combining_mark_is_cut_once() -> None:
    """A hypothesis example (openai, window 1): the cut's head ends after the combining mark
    on the prefix's ``]`` (never between a character and its mark), and the check for a
    text already cut to its marker looked right after the 14-character prefix, so a
    second pass cut the marker itself again (44 characters, reason tool_result_budget)."""
    msgs = [
        Message(role="user", content=[TextPart(text="q")], pinned=True),
        Message(role="user", content=[TextPart(text="[Tool results]\u0301" + ".\n" * 50)]),
    ]
    r = budget_tool_results(msgs, 1, format="openai", max_message_chars=500)
    assert r.messages[1].content[0].text == "[Tool results]\u0301\n[... 100 characters (49 lines) removed ...]"
    again = budget_tool_results(r.messages, 1, format="openai", max_message_chars=500)
    assert again.report.reason is None and again.messages[1] is r.messages[1]


def test_prune_middle_notice_joins_a_tool_struct_read_as_anthropic() -> None:
    """Hypothesis (the Anthropic prune property test drawing tool structs): the messages
    before an orphan's placeholder, a ``tool`` struct, were pruned and the notice became a
    user message of its own before it; a tool struct is a user message for Anthropic, so
    two user messages met. The notice now goes into the placeholder."""
    from contextwindow.messages import ImagePart, OpaquePart

    def th() -> OpaquePart:
        return OpaquePart(type="thinking", raw={"type": "thinking", "thinking": ""})

    img = ImagePart(source="https://example.com/a.png")
    result = ToolResult(call_id="c1", content=[TextPart(text="")])
    msgs = [
        Message(role="user", content=[TextPart(text="[Tool results] ")]),
        Message(role="assistant", content=[ToolCall(id="c1", name="read_file", arguments=""), result]),
        Message(role="user", content=[ToolResult(call_id="c1", content=[img, TextPart(text="")])]),
        Message(role="assistant", content=[th()]),
        Message(role="tool", content=[result]),
        *[Message(role=r, content=[img, th()], pinned=True) for r in ("assistant", "user") * 3],
    ]
    r = prune_middle(msgs, keep_recent=7, format="anthropic")
    assert [m.role for m in r.messages] == ["tool", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert r.messages[0].content[0].text.startswith("[context compacted: 4 earlier messages removed]")
    # the assistant messages ending in a thinking block are the input's (thinking_last,
    # fresh20b #2), kept as they are; nothing else
    assert {v.code for v in cw.validate(r.messages, "anthropic")} == {"thinking_last"}
    assert {v.code for v in cw.validate(msgs, "anthropic")} >= {"thinking_last"}


def test_cleared_marker_names_the_callers_characters_after_a_share_cut() -> None:
    # fresh27 #4: rule 2 cut the log first, and the cleared marker named what was left
    # of it ("175 characters") where the fate said 7,990
    out = "".join(f"line {j}: some output here\n" for j in range(300))
    assert len(out) == 7990
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "go"},
        oa_call("c1", "bash"),
        oa_result("c1", out),
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "next"},
    ]
    r = budget_tool_results(msgs, 150)
    assert r.messages[3]["content"] == "[tool result cleared: 7990 characters of bash output]"
    assert r.report.fates[3] == cw.Fate(index=3, fate="truncated", rule="tool_result_cleared", chars_removed=7990)
    # the count is read from the cut result (its marker counted as the characters it
    # names), so a run on a cut result names the same and a second run changes nothing
    # (a hypothesis example: naming the input's count made the marker two characters
    # longer, the first run kept the cut result and the second cleared it)
    cut = budget_tool_results(msgs, 150, max_total_share=None)
    assert "characters (" in cut.messages[3]["content"]
    assert budget_tool_results(cut.messages, 150).messages[3]["content"] == r.messages[3]["content"]
    again = budget_tool_results(r.messages, 150)
    assert again.report.reason is None and same_objects(again.messages, r.messages)


def test_observation_in_several_text_parts_is_held_to_one_share() -> None:
    # fresh27 #5: each part of a text-action observation was held to the 50% share
    # alone, so four parts kept 3,965 tokens in a 2,000-token window
    obs = "[Tool results]\n" + "".join(f"out {j:05d} some text\n" for j in range(8000))
    kept = {}
    for k in (1, 2, 4):
        size = -(-len(obs) // k)
        parts = [{"type": "text", "text": obs[i * size : (i + 1) * size]} for i in range(k)]
        msgs = [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "task: fix the bug"},
            {"role": "assistant", "content": "ls"},
            {"role": "user", "content": parts if k > 1 else obs},
            {"role": "assistant", "content": "cat x"},
            {"role": "user", "content": "[Tool results]\nok"},
        ]
        r = budget_tool_results(msgs, 2000)
        content = r.messages[3]["content"]
        texts = [content] if isinstance(content, str) else [p["text"] for p in content]
        kept[k] = cw.count_messages([r.messages[3]])
        assert kept[k] <= 1000 and r.report.fates[3].rule == "tool_result_cut"
        # every part keeps its head and its tail, the first its prefix
        assert texts[0].startswith("[Tool results]\nout 00000")
        for t, p in zip(texts, [obs] if k == 1 else [q["text"] for q in parts], strict=True):
            assert t[:10] == p[:10] and t[-10:] == p[-10:] and "characters (" in t
    # within 1% of the share however many parts (1,000 / 991 / 994 on this input)
    assert min(kept.values()) >= 990


def test_a_cut_of_a_cut_names_what_the_caller_lost_and_splits_no_marker() -> None:
    # fresh28 #1-#3: budget_tool_results cutting text it (or trimming) had cut swallowed
    # the first marker and named only its own removal (38,417 for 203,359 gone), and
    # could cut through a marker, leaving '[... 1002 charact\n[... 88673 ...]\nters removed'
    log = "".join(f"{i:06d} compiling module_{i} ... ok\n" for i in range(6000))
    assert len(log) == 214_890
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "build"},
        oa_call("c1", "bash"),
        oa_result("c1", log),
    ]
    marker = re.compile(r"\[\.\.\. (\d+) characters \((\d+) lines\) removed \.\.\.\]")
    twice = budget_tool_results(budget_tool_results(msgs, 50_000).messages, 10_000).messages[3]["content"]
    once = budget_tool_results(msgs, 10_000).messages[3]["content"]
    (m2,) = marker.finditer(twice)
    (m1,) = marker.finditer(once)
    head, tail = twice[: m2.start()], twice[m2.end() + 1 :]
    assert log.startswith(head) and log.endswith(tail)
    # what is gone from the caller's log, plus the one line break the first cut put
    # after its marker (counted as text: README); the lines: every removed line
    gone = len(log) - len(head) - len(tail)
    assert int(m2.group(1)) == gone + 1 and int(m2.group(2)) == log[len(head) : len(log) - len(tail)].count("\n")
    assert abs(int(m2.group(1)) - int(m1.group(1))) <= 1
    # markers in the text are taken whole, never split
    text = "".join(f"chunk {i} [... {1000 + i} characters removed ...] " for i in range(2000))
    cut = budget_tool_results([*msgs[:3], oa_result("c1", text)], 200).messages[3]["content"]
    whole = re.findall(r"\[\.\.\. \d+ characters(?: \(\d+ lines?\))? removed \.\.\.\]", cut)
    assert len(whole) == cut.count("[...") >= 2


def test_second_pruning_finds_the_notice_in_a_tool_struct() -> None:
    """Found by hypothesis (``test_properties``): under Anthropic's rules the notice went
    after the results of a ``tool`` struct (written as a user message of ``tool_result``
    blocks), the first kept message that could hold it without ending a turn's start;
    pruning the output again did not see it there (only ``user`` messages were searched)
    and added a second notice. Now the second pruning counts it and leaves one notice."""
    from contextwindow.messages import ImagePart, OpaquePart

    t = TextPart
    # (the user messages of hypothesis's case were blank; each now has a word, since a
    # message with no words opens no turn: fresh53 #1)
    msgs = [
        Message(role="user", content=[t(text="a")], pinned=True),
        Message(role="user", content=[ToolCall(id="c1", name="f", arguments="{}")]),
        Message(role="user", content=[t(text="hello" * 50)]),
        Message(role="user", content=[ToolCall(id="c1", name="f", arguments="{}")]),
        Message(role="user", content=[t(text="b")]),
        Message(role="user", content=[t(text="c")]),
        Message(
            role="assistant",
            content=[
                ToolResult(call_id="c1", content=[t(text="copy")], is_error=True),
                ToolCall(id="c1", name="read_file", arguments=""),
            ],
            pinned=True,
        ),
        Message(role="tool", content=[ToolResult(call_id="c1", content=[t(text="")], is_error=True)]),
        Message(
            role="user",
            content=[OpaquePart(type="thinking", raw={"type": "thinking", "thinking": ""}), ImagePart(source="u")],
        ),
        Message(role="user", content=[t(text="d")]),
    ]
    once = prune_middle(msgs, keep_recent=2, format="anthropic").messages

    def notices(out: list[Message]) -> list[str]:
        return [p.text for m in out for p in m.content if isinstance(p, TextPart) and p.text.startswith("[context")]

    assert notices(once) == ["[context compacted: 3 earlier messages removed]"]
    assert once[2].role == "tool"
    twice = prune_middle(once, format="anthropic").messages
    assert len(notices(twice)) == 1


def test_a_result_cut_over_its_share_never_outgrows_the_character_cap() -> None:
    """Hypothesis (test_properties): rule 1 cut a message to its 500-character cap, then
    rule 2 cut one of its results again from the input with a longer marker (lines
    named, another digit), which left the message at 501 characters: the next call cut
    it again (``message_char_cap``, 35 characters), so a second call was not a no-op. A
    rule 2 cut is never longer than the text it replaces."""
    hello = "hellohellohellohellohello\U0001f468\u200d\U0001f469\u200d\U0001f467"
    mixed = "\u0c95\u0cf3\uff76\uff9e\u0e01\u0e33\u1100\u1161\u11a8\u0600\u0661a\u200cb"
    msgs = [
        Message(
            role="assistant",
            content=[
                ToolResult(call_id="c1", content=[TextPart(text="copy")], is_error=True),
                ToolCall(id="c1", name="read_file", arguments=""),
                ToolCall(id="c1", name="read_file", arguments=""),
            ],
            pinned=True,
        ),
        Message(
            role="user",
            content=[
                ToolResult(call_id="c1", content=[TextPart(text="    indent" * 50)], is_error=True),
                ToolResult(
                    call_id="c1",
                    content=[
                        TextPart(text=hello + '{"key": [1, 2]}'),
                        TextPart(text=hello[5:] + mixed),
                    ],
                    is_error=True,
                ),
                TextPart(text=""),
            ],
        ),
        Message(role="user", content=[], pinned=True),
    ]
    r = budget_tool_results(msgs, 166, format="anthropic", max_message_chars=500)
    assert r.report.reason == "tool_result_budget"
    assert _text_chars(r.messages[1]) <= 500  # it was 501
    again = budget_tool_results(r.messages, 166, format="anthropic", max_message_chars=500)
    assert again.report.reason is None and all(a is b for a, b in zip(again.messages, r.messages, strict=True))
