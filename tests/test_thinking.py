"""Anthropic extended-thinking blocks (fresh20b findings 1 and 2).

In a tool loop with thinking on, the first assistant message of the current turn (after
the last real user message) starts with a ``thinking`` block; the Messages API refuses a
request whose final assistant turn does not start with one, and an assistant message whose
final block is one. Every trim keeps that first message as it keeps a pinned one (its tool
unit whole), ``validate`` reports both rules, and ``repair_tool_pairs(missing="drop")``
never leaves a message ending in a thinking block.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

import contextwindow as cw
from contextwindow import _reference as ref
from contextwindow.adapters import anthropic_to_message
from contextwindow.messages import Message, OpaquePart, TextPart, ToolCall

A = "anthropic"
THINK = {"type": "thinking", "thinking": "Read the test, then run it.", "signature": "EqQBsig"}


def loop() -> list[dict[str, Any]]:
    """The finding's reproducer: one turn, a thinking block before the first call, a large
    first result (200 lines) and a second call without thinking."""
    return [
        {"role": "user", "content": "fix the failing test"},
        {
            "role": "assistant",
            "content": [
                copy.deepcopy(THINK),
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "t.py"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "def test():\n    assert f() == 2\n" * 200}
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_2", "name": "bash", "input": {"cmd": "pytest"}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "FAILED test_x.py::test - assert 1 == 2\n" * 20,
                }
            ],
        },
    ]


def firsts(msgs: list[dict[str, Any]]) -> list[str]:
    return [m["content"][0]["type"] for m in msgs if m["role"] == "assistant"]


def check_kept(msgs: list[dict[str, Any]], out: list[dict[str, Any]]) -> None:
    """The thinking message stays as it came in, with both its call and its result (the
    unit whole), the second unit too, and the output validates."""
    assert out[1] == msgs[1]
    assert firsts(out) == ["thinking", "tool_use"]
    assert out[2]["content"][0]["tool_use_id"] == "toolu_1"
    assert cw.validate(out, A, format=A) == []


@pytest.mark.parametrize("fn", [cw.trim_turns, cw.fit])
def test_trim_and_fit_keep_the_thinking_message(fn: Any) -> None:
    msgs = loop()
    r = fn(msgs, 800, format=A)
    check_kept(msgs, r.messages)
    assert r.report.fits
    fates = {f.index: (f.fate, f.rule) for f in r.report.fates}
    # before: messages 1 and 2 went (oldest_tool_unit / p1_evicted); now the first result
    # is cut to fit instead
    assert fates[1] == ("kept", "kept_turn" if fn is cw.trim_turns else "thinking_block")
    assert fates[2][0] == "truncated"
    assert fates[2][1] == "tool_result_shrunk"


def test_trim_turns_pure_python_engine_keeps_it() -> None:
    """A token counter runs the pure-Python engine (_reference)."""
    msgs = loop()
    r = cw.trim_turns(msgs, 800, format=A, token_counter=lambda ms: len(json.dumps(ms, default=str)) // 4)
    check_kept(msgs, r.messages)


def test_trim_turns_on_structs_keeps_it_and_comes_back_unpinned() -> None:
    msgs = [anthropic_to_message(m) for m in loop()]
    r = cw.trim_turns(msgs, 800, format=A)
    assert r.messages[1] == msgs[1]
    assert not r.messages[1].pinned
    assert isinstance(r.messages[1].content[0], OpaquePart)


def test_prune_middle_keeps_it() -> None:
    """prune_middle keeps it as a pinned message: nothing in the middle may go here, so it
    cannot fit (it does not cut results) and says so; before, it dropped messages 1-2."""
    msgs = loop()
    r = cw.prune_middle(msgs, 800, format=A)
    assert r.messages == msgs
    assert not r.report.fits
    assert cw.validate(r.messages, A, format=A) == []


def test_prune_middle_keeps_it_when_the_middle_goes() -> None:
    """A longer turn: the middle unit goes, the thinking message stays (rule thinking_block)."""
    msgs = loop()
    msgs[4:4] = [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "x " * 400}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_3", "name": "bash", "input": {}}]},
    ]
    msgs[4], msgs[6] = msgs[6], msgs[4]
    msgs[6]["content"][0]["tool_use_id"] = "toolu_3"
    msgs[5]["content"][0]["id"] = "toolu_3"
    # 0 request, 1 thinking+call 1, 2 result 1, 3 call 2, 4 result 2, 5 call 3, 6 result 3
    msgs[4]["content"][0]["tool_use_id"] = "toolu_2"
    assert cw.validate(msgs, A, format=A) == []
    r = cw.prune_middle(msgs, 600, format=A, keep_recent=2)
    assert r.messages[1] == msgs[1]
    assert cw.validate(r.messages, A, format=A) == []
    fates = {f.index: (f.fate, f.rule) for f in r.report.fates}
    assert fates[1] == ("kept", "thinking_block")
    assert fates[3][0] == "dropped"


def test_guard_check_keeps_it() -> None:
    msgs = loop()
    g = cw.ContextGuard(cw.resolve_budget(context_window=1800, max_output_tokens=1000)).check(msgs, format=A)
    check_kept(msgs, g.messages)
    assert g.fits


def test_fit_request_keeps_it() -> None:
    msgs = loop()
    body = {"model": "claude-sonnet-4", "thinking": {"type": "enabled", "budget_tokens": 2000}, "messages": msgs}
    out = json.loads(cw.fit_request(json.dumps(body).encode(), budget=800))
    check_kept(msgs, out["messages"])


def test_fit_share_rule_does_not_unpin_it() -> None:
    """A tiny pinned_share unpins every pinned message over it, not this one (no pin: the
    share rule does not weigh it)."""
    msgs = loop()
    r = cw.fit(msgs, 800, cw.FitPolicy(pinned_share=0.01), format=A)
    check_kept(msgs, r.messages)


def test_openai_shape_unchanged() -> None:
    """The same loop as structs under OpenAI rules: no anchor, the oldest unit goes as
    before (thinking blocks are Anthropic's)."""
    msgs = [anthropic_to_message(m) for m in loop()]
    assert ref.thinking_anchor(msgs, "openai") is None
    assert ref.thinking_anchor(msgs, "anthropic") == 1
    r = cw.trim_turns(msgs, 800, format="openai")
    fates = {f.index: (f.fate, f.rule) for f in r.report.fates}
    assert fates[1] == ("dropped", "oldest_tool_unit")


def test_older_turns_unchanged() -> None:
    """A new request after the loop: the loop is an older turn, its thinking block may go
    (the API only asks for it in the final assistant turn), and the whole turn goes."""
    msgs = [*loop(), {"role": "assistant", "content": "The fix is in f."}, {"role": "user", "content": "thanks, now b"}]
    assert ref.thinking_anchor([anthropic_to_message(m) for m in msgs], A) is None
    r = cw.trim_turns(msgs, 200, format=A)
    fates = {f.index: (f.fate, f.rule) for f in r.report.fates}
    assert all(fates[i] == ("dropped", "oldest_turn") for i in range(6))
    assert cw.validate(r.messages, A, format=A) == []


def test_anchor_is_the_first_assistant_of_the_turn_only() -> None:
    """A later assistant message that starts with thinking is no anchor; nor is a first one
    that does not start with it; redacted_thinking counts."""
    ms = [anthropic_to_message(m) for m in loop()]
    think = Message(role="assistant", content=[OpaquePart(type="thinking", raw=THINK), *ms[3].content])
    later = [*ms[:3], think, ms[4]]
    later[1] = Message(role="assistant", content=ms[1].content[1:])
    assert ref.thinking_anchor(later, A) is None
    red = [ms[0], Message(role="assistant", content=[OpaquePart(type="redacted_thinking", raw={}), *ms[1].content[1:]])]
    assert ref.thinking_anchor(red, A) == 1


# validate (finding 1's second half, finding 2)


def codes(msgs: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(v.index, v.code) for v in cw.validate(msgs, A, format=A)]


def test_validate_thinking_not_first() -> None:
    """Reported at the newest turn's first assistant message when an assistant message of
    that turn holds a thinking block and that first one does not start with one."""
    msgs = loop()
    assert codes(msgs) == []
    # the finding's trimmed output: no thinking block left in the turn, nothing to say
    # (the API refuses it only when the request enables thinking, which validate cannot see)
    assert codes([msgs[0], msgs[3], msgs[4]]) == []
    # the thinking block in the turn's second assistant message, not its first
    second = copy.deepcopy(msgs[3])
    second["content"].insert(0, copy.deepcopy(THINK))
    first = copy.deepcopy(msgs[1])
    del first["content"][0]
    assert codes([msgs[0], first, msgs[2], second, msgs[4]]) == [(1, "thinking_not_first")]
    # text before the thinking block in the first message: not first either
    texted = copy.deepcopy(msgs[1])
    texted["content"].insert(0, {"type": "text", "text": "hm"})
    assert codes([msgs[0], texted, msgs[2]]) == [(1, "thinking_not_first")]
    # an older turn: only the newest turn counts
    older = [msgs[0], first, msgs[2], second, msgs[4], {"role": "assistant", "content": "done"}]
    assert codes([*older, {"role": "user", "content": "next"}]) == []
    assert codes([*older, {"role": "user", "content": "next"}, {"role": "assistant", "content": "ok"}]) == []


def test_validate_thinking_last() -> None:
    """Finding 2's output: an assistant message holding only a thinking block; and one
    ending in redacted_thinking after text. OpenAI rules do not apply the thinking
    rules; they report the thinking block itself as an Anthropic block (fresh47 #2)."""
    only = [{"role": "user", "content": "read t.py"}, {"role": "assistant", "content": [copy.deepcopy(THINK)]}]
    assert codes(only) == [(1, "thinking_last")]
    red = {"type": "redacted_thinking", "data": "abc"}
    ends = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "a"}, red]},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": [red, {"type": "text", "text": "b"}]},
    ]
    assert codes(ends) == [(1, "thinking_last")]
    structs = [anthropic_to_message(m) for m in only]
    assert [v.code for v in cw.validate(structs, "openai")] == ["block_not_allowed"]


# repair(missing="drop") (finding 2)


def interrupted() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "read t.py"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Let me check the file.", "signature": "EqQBsig"},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "t.py"}},
            ],
        },
        {"role": "user", "content": "never mind, say hi"},
    ]


@pytest.mark.parametrize("prefill", [False, True])
def test_drop_does_not_leave_only_a_thinking_block(prefill: bool) -> None:
    """Only the thinking block would stay: the message counts as emptied, and an Anthropic
    assistant message that dropping would empty is stubbed instead (alternation), so the
    call stays with a stub result: valid; before, message 1 was the thinking block alone."""
    msgs = interrupted()[: 2 if prefill else 3]
    r = cw.repair_tool_pairs(msgs, "drop", format=A)
    assert r.messages[1] == msgs[1]
    assert r.messages[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": "[tool result missing]",
    }
    assert [(c.kind, c.index) for c in r.report.repairs] == [("stub_inserted", 1)]
    assert cw.validate(r.messages, A, format=A) == []


def test_drop_keeps_thinking_then_text() -> None:
    """Text after the thinking block: the call goes, the message ends in text: valid."""
    msgs = interrupted()
    msgs[1]["content"].insert(1, {"type": "text", "text": "Reading it."})
    r = cw.repair_tool_pairs(msgs, "drop", format=A)
    assert r.messages[1]["content"] == msgs[1]["content"][:2]
    assert [(c.kind, c.index) for c in r.report.repairs] == [("call_removed", 1)]
    assert cw.validate(r.messages, A, format=A) == []


def test_drop_openai_structs_drop_the_thinking_only_message() -> None:
    """OpenAI rules (no alternation to keep): a message left with only its thinking block
    goes whole (message_dropped), as an emptied one does."""
    ms = [
        Message(role="user", content=[TextPart(text="read t.py")]),
        Message(
            role="assistant",
            content=[OpaquePart(type="thinking", raw=THINK), ToolCall(id="c1", name="read_file", arguments="{}")],
        ),
        Message(role="user", content=[TextPart(text="never mind")]),
    ]
    r = cw.repair_tool_pairs(ms, "drop", format="openai")
    assert [m.role for m in r.messages] == ["user", "user"]
    assert [(c.kind, c.index) for c in r.report.repairs] == [("call_removed", 1), ("message_dropped", 1)]
    assert ref.repair_tool_pairs(ms, "drop", "fim", "openai")[0] == [(0, None), (2, None)]


def test_fit_leaves_no_prefill_ending_in_whitespace_it_exposed() -> None:
    """Found by hypothesis (test_fit_guard_prune_validate_whole): fit evicted the messages
    after a pinned assistant message whose text ends in a space, which became the final
    message, a prefill the Messages API refuses (``trailing_whitespace``); the guard,
    which fits the same way, too. The exposed prefill loses its trailing whitespace, as
    repair's does; the input's own final message is left as it is."""
    from contextwindow.messages import Message, OpaquePart, TextPart, ToolResult

    think = OpaquePart(type="thinking", raw={"type": "thinking", "thinking": ""})
    msgs = [
        Message(role="user", content=[TextPart(text="hello" * 800)], pinned=True),
        Message(role="assistant", content=[think, TextPart(text="[Tool results] ")], pinned=True),
        Message(role="user", content=[ToolResult(call_id="c1", content=[TextPart(text="")])]),
        Message(role="assistant", content=[TextPart(text="")]),
    ]
    assert [v.code for v in cw.validate(msgs, "anthropic")] == ["orphan_result"]
    r = cw.fit(msgs, 48, format="anthropic")
    assert [m.role for m in r.messages] == ["user", "assistant"]
    assert r.messages[1].content == [think, TextPart(text="[Tool results]")]
    assert cw.validate(r.messages, "anthropic") == []
    assert r.report.tokens_after == cw.count_messages(r.messages, format="anthropic")
    guard = cw.ContextGuard(cw.resolve_budget(context_window=98, max_output_tokens=50, floor=0))
    with pytest.raises(cw.ContextOverflowError) as e:
        guard.check(msgs, format="anthropic")
    assert cw.validate(e.value.result.messages, "anthropic") == []  # type: ignore[attr-defined]
    # the input's own final prefill ending in a space stays as the input has it
    own = [
        Message(role="user", content=[TextPart(text="q")]),
        Message(role="assistant", content=[TextPart(text="ok ")]),
    ]
    assert cw.fit(own, 1000, format="anthropic").messages == own


def test_no_breadcrumb_into_an_empty_user_message() -> None:
    """Hypothesis (test_anthropic_outputs_validate_whole, this session): with every turn
    but the pinned messages dropped, the breadcrumb went into the first kept turn's user
    message, which was pinned and empty; the breadcrumb alone is no user's words, so that
    message stopped being a turn boundary, the newest turn reached back to an assistant
    message without a thinking block, and the output broke the thinking rule
    (thinking_not_first at index 3). The breadcrumb now stays out of an empty message (its
    cost with it), in the engine and in ``_reference``."""
    from contextwindow import ImagePart, ToolResult

    img = ImagePart(source="https://example.com/a.png")
    call = ToolCall(id="c1", name="read_file", arguments="")

    def think(sig: bool = False) -> OpaquePart:
        raw = {"type": "thinking", "thinking": "", **({"signature": "s"} if sig else {})}
        return OpaquePart(type="thinking", raw=raw)

    msgs = [
        Message(role="user", content=[ToolResult(call_id="c1", content=[TextPart(text="")])]),
        Message(role="assistant", content=[ToolResult(call_id="c2", content=[TextPart(text="")])], pinned=True),
        Message(role="user", content=[img], pinned=True),
        Message(role="assistant", content=[think(), img], pinned=True),
        Message(role="user", content=[img], pinned=True),
        Message(role="assistant", content=[TextPart(text="ok")], pinned=True),
        Message(role="user", content=[]),
        Message(role="assistant", content=[TextPart(text="ok")]),
        Message(role="user", content=[], pinned=True),
        Message(role="assistant", content=[think(True), call], pinned=True),
        Message(role="user", content=[img], pinned=True),
        Message(role="assistant", content=[TextPart(text="")]),
    ]
    assert not [v for v in cw.validate(msgs, "anthropic") if v.code.startswith("thinking")]
    for r in (
        cw.trim_turn_count(msgs, 0, format="anthropic"),
        cw.trim_turns(msgs, 0, profile="conservative", format="anthropic"),
    ):
        assert not [v for v in cw.validate(r.messages, "anthropic") if v.code.startswith("thinking")]
        # the pinned empty user message is kept as it is, and the breadcrumb is left out
        assert not r.report.breadcrumb
        assert any(m.role == "user" and m.content == [] and m.pinned for m in r.messages)
        assert all(ref.first_text(m) != cw.BREADCRUMB for m in r.messages)
    ref_out, ref_report = ref.trim_turn_count(msgs, 0, provider="anthropic")
    engine = cw.trim_turn_count(msgs, 0, format="anthropic").messages
    # (the reference's output: input index and the message when changed)
    ref_msgs = [m if m is not None else msgs[i] for i, m in ref_out if i is not None or m is not None]
    assert [m.content for m in ref_msgs] == [m.content for m in engine]
    assert not ref_report.breadcrumb


def test_dropping_an_orphan_beside_text_makes_a_turn_boundary_known_limit() -> None:
    # fresh26 #1, README Known limits: message 4 carries a result (no turn start), so the
    # newest turn starts at 0 and its first assistant message starts with thinking. Repair
    # drops the orphan: message 4 is then a real user message, the newest turn starts at 5,
    # whose first assistant message has no thinking block while 7 has one.
    def tu(i: str) -> dict[str, Any]:
        return {"type": "tool_use", "id": i, "name": "bash", "input": {}}

    def tr(i: str) -> dict[str, Any]:
        return {"type": "tool_result", "tool_use_id": i, "content": "ok"}

    th = {"type": "thinking", "thinking": "hm", "signature": "s"}
    msgs = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": [th, tu("t1")]},
        {"role": "user", "content": [tr("t1")]},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
        {"role": "user", "content": [tr("orph"), {"type": "text", "text": "next"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "x"}, tu("t2")]},
        {"role": "user", "content": [tr("t2")]},
        {"role": "assistant", "content": [th, {"type": "text", "text": "done"}]},
    ]
    assert [(v.index, v.code) for v in cw.validate(msgs, "anthropic")] == [(4, "orphan_result")]
    repaired = cw.repair_tool_pairs(msgs).messages
    assert repaired[4] == {"role": "user", "content": [{"type": "text", "text": "next"}]}
    assert [(v.index, v.code) for v in cw.validate(repaired, "anthropic")] == [(5, "thinking_not_first")]
