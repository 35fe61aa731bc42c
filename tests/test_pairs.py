"""repair_tool_pairs, validate and segment_turns on hand-built conversations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

import contextwindow as cw
from contextwindow.adapters import to_canonical
from contextwindow.cli import main
from contextwindow.messages import MISSING_RESULT, RESULTS_REMOVED


def call(*ids: str) -> dict[str, Any]:
    calls = [{"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def res(cid: str, text: str = "r") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": text}


def u(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def use(*ids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "tool_use", "id": i, "name": "f", "input": {}} for i in ids]}


def carrier(*ids: str, text: str | None = None) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"type": "tool_result", "tool_use_id": i, "content": "r"} for i in ids]
    if text is not None:
        blocks.append({"type": "text", "text": text})
    return {"role": "user", "content": blocks}


def test_parallel_results_in_any_order_are_valid() -> None:
    msgs = [u("go"), call("A", "B"), res("B"), res("A"), {"role": "assistant", "content": "done"}]
    assert cw.validate(msgs, "openai") == []
    r = cw.repair_tool_pairs(msgs)
    assert (
        all(x is y for x, y in zip(r.messages, msgs, strict=True))
        and r.report.reason is None
        and r.report.repairs == []
    )


def test_separated_result_moves_back_next_to_its_call() -> None:
    msgs = [u("go"), call("c1", "c2"), res("c1"), u("hm"), res("c2")]
    assert [(v.index, v.code, v.call_id) for v in cw.validate(msgs, "openai")] == [
        (1, "unanswered_call", "c2"),
        (4, "orphan_result", "c2"),
    ]
    r = cw.repair_tool_pairs(msgs)
    assert [m is msgs[i] for m, i in zip(r.messages, [0, 1, 2, 4, 3], strict=True)] == [True] * 5
    assert [(c.kind, c.index, c.call_id) for c in r.report.repairs] == [("result_moved", 4, "c2")]
    assert cw.validate(r.messages, "openai") == []


def test_orphan_dropped_missing_stubbed() -> None:
    msgs = [u("go"), res("zz"), call("c1"), u("next")]
    r = cw.repair_tool_pairs(msgs)
    assert r.messages == [msgs[0], msgs[2], {"role": "tool", "tool_call_id": "c1", "content": MISSING_RESULT}, msgs[3]]
    kinds = [(c.kind, c.index, c.call_id) for c in r.report.repairs]
    assert kinds == [("orphan_result_dropped", 1, "zz"), ("stub_inserted", 2, "c1")]
    assert r.report.fates[1].fate == "dropped" and r.report.inserted_messages == 1
    # idempotent
    again = cw.repair_tool_pairs(r.messages)
    assert again.report.repairs == [] and all(x is y for x, y in zip(again.messages, r.messages, strict=True))


def test_drop_mode_removes_unanswered_calls_and_empty_messages() -> None:
    msgs = [u("go"), call("c1", "c2"), res("c1"), u("next"), call("c3")]
    r = cw.repair_tool_pairs(msgs, missing="drop")
    assert r.messages[1]["tool_calls"] == [msgs[1]["tool_calls"][0]]
    assert r.messages[2] is msgs[2] and r.messages[3] is msgs[3] and len(r.messages) == 4
    kinds = [(c.kind, c.index, c.call_id) for c in r.report.repairs]
    assert kinds == [("call_removed", 1, "c2"), ("call_removed", 4, "c3"), ("message_dropped", 4, None)]
    assert cw.validate(r.messages, "openai") == []


def test_reused_id_answers_nearest_preceding_call() -> None:
    msgs = [u("one"), call("c1"), res("c1", "first"), u("two"), call("c1"), res("c1", "second")]
    assert cw.validate(msgs, "openai") == []
    seg = cw.segment_turns(msgs)
    assert seg.turns == [(0, 3), (3, 6)] and seg.units == [[1, 2], [4, 5]] and seg.current_request == 3


def test_anthropic_stub_goes_into_next_user_message_ahead_of_text() -> None:
    msgs = [u("go"), use("t1", "t2"), carrier("t1", text="and also this")]
    r = cw.repair_tool_pairs(msgs, format="anthropic")
    blocks = r.messages[2]["content"]
    assert [b["type"] for b in blocks] == ["tool_result", "tool_result", "text"]
    assert blocks[1] == {"type": "tool_result", "tool_use_id": "t2", "content": MISSING_RESULT}
    assert cw.validate(r.messages, "anthropic") == []
    # no user message after the calls: one is created
    r2 = cw.repair_tool_pairs([u("go"), use("t9")], format="anthropic")
    assert r2.messages[-1]["role"] == "user" and r2.messages[-1]["content"][0]["tool_use_id"] == "t9"


def test_anthropic_result_after_text_is_reordered() -> None:
    msgs = [
        u("go"),
        use("t1"),
        {"role": "user", "content": [{"type": "text", "text": "x"}, carrier("t1")["content"][0]]},
    ]
    assert [v.code for v in cw.validate(msgs, "anthropic")] == ["result_after_content"]
    r = cw.repair_tool_pairs(msgs, format="anthropic")
    assert [b["type"] for b in r.messages[2]["content"]] == ["tool_result", "text"]
    assert [c.kind for c in r.report.repairs] == ["results_reordered"]


def _block(kind: str, key: str) -> dict[str, Any]:
    if kind == "result":
        return {"type": "tool_result", "tool_use_id": key, "content": "r" + key}
    if kind == "use":
        return {"type": "tool_use", "id": key, "name": "f", "input": {}}
    return {"type": "text", "text": key}


def test_anthropic_result_after_text_is_reordered_even_when_a_result_comes_first() -> None:
    # left17: [result_a, text, result_b] was rebuilt as [result_a, result_b, text] with no
    # change recorded and the message's fate kept, because only a first part that is not a
    # result counted as a reorder
    msgs = [
        u("go"),
        use("a", "b"),
        {"role": "user", "content": [_block("result", "a"), _block("text", "note"), _block("result", "b")]},
    ]
    assert [v.code for v in cw.validate(msgs, "anthropic")] == ["result_after_content"]
    want = [_block("result", "a"), _block("result", "b"), _block("text", "note")]
    fates = [("kept", "fits"), ("kept", "fits"), ("repaired", "results_reordered")]
    r = cw.repair_tool_pairs(msgs, format="anthropic")
    assert r.messages[2]["content"] == want
    assert [(c.kind, c.index, c.call_id) for c in r.report.repairs] == [("results_reordered", 2, None)]
    assert [(f.fate, f.rule) for f in r.report.fates] == fates
    assert cw.validate(r.messages, "anthropic") == []
    for t in (cw.trim_turns(msgs, 10_000, format="anthropic"), cw.fit(msgs, 10_000, format="anthropic")):
        assert t.messages[2]["content"] == want and t.report.reason == "tool_pairs"
        assert [(f.fate, f.rule) for f in t.report.fates] == fates
    # an orphan first, then text, then the caller's result: reordered (and the orphan gone)
    msgs[2] = {"role": "user", "content": [_block("result", "zz"), _block("text", "n"), _block("result", "a")]}
    r = cw.repair_tool_pairs(msgs, format="anthropic")
    assert r.messages[2]["content"] == [
        _block("result", "a"),
        {"type": "tool_result", "tool_use_id": "b", "content": MISSING_RESULT},
        _block("text", "n"),
    ]
    assert [(c.kind, c.index, c.call_id) for c in r.report.repairs] == [
        ("stub_inserted", 1, "b"),
        ("orphan_result_dropped", 2, "zz"),
        ("results_reordered", 2, None),
    ]


def test_anthropic_no_reorder_reported_when_no_result_of_the_caller_follows_other_content() -> None:
    # the rebuilt order of the message's own parts is the input's: no results_reordered
    # (the old rule reported one whenever the first part was not a result)
    cases = [
        # text, then an orphan (dropped); the stub for a goes ahead of the text, as always
        (
            [_block("text", "n"), _block("result", "zz")],
            [{"type": "tool_result", "tool_use_id": "a", "content": MISSING_RESULT}, _block("text", "n")],
            [("stub_inserted", 1, "a"), ("orphan_result_dropped", 2, "zz")],
        ),
        # a tool_use in a user message (removed), then the caller's result
        (
            [_block("use", "x"), _block("result", "a")],
            [_block("result", "a")],
            [("call_removed", 2, "x")],
        ),
    ]
    for content, want, changes in cases:
        msgs = [u("go"), use("a"), {"role": "user", "content": content}]
        r = cw.repair_tool_pairs(msgs, format="anthropic")
        assert r.messages[2]["content"] == want
        assert [(c.kind, c.index, c.call_id) for c in r.report.repairs] == changes


def test_anthropic_role_rules() -> None:
    msgs = [{"role": "assistant", "content": "hi"}, u("a"), u("b")]
    assert [(v.index, v.code) for v in cw.validate(msgs, "anthropic")] == [
        (0, "first_not_user"),
        (2, "not_alternating"),
    ]


def test_carrier_is_not_a_turn() -> None:
    msgs = [
        u("go"),
        use("t1"),
        carrier("t1", text="extra"),
        {"role": "assistant", "content": "ok"},
        u("[Tool results] x"),
    ]
    seg = cw.segment_turns(msgs, format="anthropic")
    assert seg.turns == [(0, 5)] and seg.current_request == 0


def test_validate_rejects_unknown_provider() -> None:
    with pytest.raises(ValueError, match="provider"):
        cw.validate([u("x")], "gemini")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="missing"):
        cw.repair_tool_pairs([u("x")], missing="maybe")  # type: ignore[arg-type]


def test_duplicate_results_are_flagged_and_dropped() -> None:
    """Found by the fresh-install review: a second result for one call passed unchanged."""
    msgs = [u("go"), call("c1"), res("c1", "first"), res("c1", "again"), u("next")]
    assert [(v.index, v.code) for v in cw.validate(msgs, "openai")] == [(3, "duplicate_result")]
    r = cw.repair_tool_pairs(msgs)
    assert [m is msgs[i] for m, i in zip(r.messages, [0, 1, 2, 4], strict=True)] == [True] * 4
    assert [(c.kind, c.index) for c in r.report.repairs] == [("orphan_result_dropped", 3)]
    anth = [u("go"), use("t1"), carrier("t1", "t1")]
    assert [v.code for v in cw.validate(anth, "anthropic")] == ["duplicate_result"]
    fixed = cw.repair_tool_pairs(anth, format="anthropic").messages
    assert [b["tool_use_id"] for b in fixed[2]["content"]] == ["t1"]


def test_calls_outside_assistant_messages_are_not_calls() -> None:
    msgs = [u("go"), {"role": "user", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]}]
    seg = cw.segment_turns(msgs, format="anthropic")
    assert seg.units == []
    assert [v.code for v in cw.validate(msgs, "anthropic")] == ["not_alternating", "call_outside_assistant"]
    r = cw.repair_tool_pairs(msgs, format="anthropic")
    assert r.messages == [msgs[0]] and [c.kind for c in r.report.repairs] == ["call_removed", "message_dropped"]


def test_results_in_the_wrong_message_are_moved_to_their_call() -> None:
    """Found by the fresh-install review: a tool_result block inside an assistant message
    was kept where it was and the output failed validate."""
    stray = {"type": "tool_result", "tool_use_id": "t1", "content": "r"}
    msgs = [u("go"), use("t1"), {"role": "assistant", "content": [{"type": "text", "text": "hm"}, stray]}]
    assert "result_outside_user_message" in [v.code for v in cw.validate(msgs, "anthropic")]
    r = cw.repair_tool_pairs(msgs, format="anthropic")
    assert r.messages == [
        msgs[0],
        msgs[1],
        {"role": "user", "content": [stray]},
        {"role": "assistant", "content": [{"type": "text", "text": "hm"}]},
    ]
    assert [(c.kind, c.index) for c in r.report.repairs] == [("result_moved", 2)]
    assert cw.validate(r.messages, "anthropic") == []
    # OpenAI: a result inside a user message becomes a tool message after its call
    canon = [
        cw.Message(role="user", content=[cw.TextPart(text="go")]),
        cw.Message(role="assistant", content=[cw.ToolCall(id="c1", name="f", arguments="{}")]),
        cw.Message(
            role="user", content=[cw.TextPart(text="x"), cw.ToolResult(call_id="c1", content=[cw.TextPart(text="r")])]
        ),
    ]
    out = cw.repair_tool_pairs(canon, format="openai").messages
    assert [m.role for m in out] == ["user", "assistant", "tool", "user"]
    assert out[2].content[0].call_id == "c1" and out[3].content == [cw.TextPart(text="x")]
    assert cw.validate(out, "openai") == []


def test_result_in_its_calls_assistant_message_moves_with_its_content() -> None:
    """fresh16a F6: a tool_result block in the assistant message of its own call was
    dropped as an orphan and the call stubbed; it moves to the next user message, ahead of
    its content, with its real content (a user message is made when none follows)."""
    real = {"type": "tool_result", "tool_use_id": "a", "content": "THE REAL OUTPUT"}
    q2 = {"type": "text", "text": "q2"}
    ms = [u("q"), {"role": "assistant", "content": [*use("a")["content"], real]}, u("q2")]
    r = cw.repair_tool_pairs(ms)
    assert r.messages == [u("q"), use("a"), {"role": "user", "content": [real, q2]}]
    assert [(c.kind, c.index, c.call_id) for c in r.report.repairs] == [("result_moved", 1, "a")]
    assert [(f.fate, f.rule) for f in r.report.fates][1] == ("repaired", "result_moved")
    assert cw.validate(r.messages, "anthropic") == []
    assert cw.repair_tool_pairs(r.messages).report.repairs == []
    # before its call in the message: the same
    before = [u("q"), {"role": "assistant", "content": [real, *use("a")["content"]]}, u("q2")]
    assert cw.repair_tool_pairs(before).messages == r.messages
    # no user message after it, or an assistant message: a user message is made
    last = cw.repair_tool_pairs(ms[:2])
    assert last.messages == [u("q"), use("a"), {"role": "user", "content": [real]}]
    then = cw.repair_tool_pairs([*ms[:2], {"role": "assistant", "content": "more"}])
    assert then.messages == [
        u("q"),
        use("a"),
        {"role": "user", "content": [real]},
        {"role": "assistant", "content": "more"},
    ]
    # a result in the next user message answers the call: the copy in the call's message
    # is a duplicate and goes
    other = {"type": "tool_result", "tool_use_id": "a", "content": "Y"}
    dup = cw.repair_tool_pairs([*ms[:2], {"role": "user", "content": [other, q2]}])
    assert dup.messages == [u("q"), use("a"), {"role": "user", "content": [other, q2]}]
    assert [(c.kind, c.index) for c in dup.report.repairs] == [("orphan_result_dropped", 1)]
    # one of two calls answered in its own message, the other in the next one: the moved
    # result comes first (input order)
    rb = {"type": "tool_result", "tool_use_id": "b", "content": "B"}
    two = cw.repair_tool_pairs(
        [u("q"), {"role": "assistant", "content": [*use("a", "b")["content"], rb]}, carrier("a")]
    )
    assert two.messages == [u("q"), use("a", "b"), {"role": "user", "content": [rb, carrier("a")["content"][0]]}]
    assert [(c.kind, c.index, c.call_id) for c in two.report.repairs] == [("result_moved", 1, "b")]
    # OpenAI shape (a canonical message: OpenAI dicts cannot hold it): a tool message
    # after the call
    canon = [
        cw.Message(role="user", content=[cw.TextPart(text="q")]),
        cw.Message(
            role="assistant",
            content=[
                cw.ToolCall(id="c1", name="f", arguments="{}"),
                cw.ToolResult(call_id="c1", content=[cw.TextPart(text="out")]),
            ],
        ),
        cw.Message(role="user", content=[cw.TextPart(text="q2")]),
    ]
    o = cw.repair_tool_pairs(canon, format="openai")
    assert [m.role for m in o.messages] == ["user", "assistant", "tool", "user"]
    assert o.messages[1].content == [cw.ToolCall(id="c1", name="f", arguments="{}")]
    assert o.messages[2].content == [cw.ToolResult(call_id="c1", content=[cw.TextPart(text="out")])]
    assert [(c.kind, c.index, c.call_id) for c in o.report.repairs] == [("result_moved", 1, "c1")]
    assert cw.validate(o.messages, "openai") == []


def test_anthropic_blocks_under_format_openai_are_refused() -> None:
    msgs = [u("go"), use("t1"), carrier("t1")]
    with pytest.raises(
        cw.InvalidMessageError, match=r'message 1, field content\[0\]\.type: "tool_use" is an Anthropic'
    ):
        cw.trim_turns(msgs, 60, format="openai")


def test_validate_refuses_a_tool_use_input_that_is_not_an_object() -> None:
    # fresh tester's N5: validate(..., "anthropic") returned [] and the block was counted
    msgs = [
        u("q"),
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": "str"}]},
        carrier("a"),
    ]
    for check in (lambda: cw.validate(msgs, "anthropic"), lambda: cw.count_messages(msgs, format="anthropic")):
        with pytest.raises(cw.InvalidMessageError) as err:
            check()
        assert str(err.value) == "message 1, field content[0].input: must be an object"
        assert (err.value.index, err.value.field) == (1, "content[0].input")


def test_validate_refuses_bad_image_sources_and_openai_messages_without_content() -> None:
    # the lead's findings: each was counted (1643 = 3 + 1640 for the image of unknown size,
    # and 3 tokens) and validate returned []
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": 7}}
    cases = [
        (
            [{"role": "user", "content": [image]}],
            "anthropic",
            "message 0, field content[0].source.data: must be a string",
        ),
        ([{"role": "user"}], "openai", "message 0, field content: is missing"),
        ([u("q"), {"role": "system"}], "openai", "message 1, field content: is missing"),
        (
            [u("q"), call("c1"), {"role": "tool", "tool_call_id": "c1", "content": None}],
            "openai",
            "message 2, field content: must be a string or a list of blocks",
        ),
    ]
    for msgs, provider, text in cases:
        with pytest.raises(cw.InvalidMessageError) as err:
            cw.validate(msgs, provider)
        assert str(err.value) == text
        with pytest.raises(cw.InvalidMessageError) as err:
            cw.count_messages(msgs, format=provider)
        assert str(err.value) == text
    # an assistant message with tool calls and no content stays valid
    assert (
        cw.validate([u("q"), {"role": "assistant", "tool_calls": call("c1")["tool_calls"]}, res("c1")], "openai") == []
    )


def test_validate_under_anthropic_rules_refuses_an_image_without_a_source() -> None:
    # a new user's finding: validate(m, "anthropic") returned [] where
    # count_messages(m, format="anthropic") refused the block, and a source {} passed both
    # (1645 tokens: 5 for the message, 1640 for an image of unknown size)
    no_source = [{"role": "user", "content": [{"type": "image"}]}]
    empty = [{"role": "user", "content": [{"type": "image", "source": {}}]}]
    untyped = [{"role": "user", "content": [{"type": "image", "source": {"url": "https://x/a.png"}}]}]
    cases = [
        (no_source, "message 0, field content[0].source: must be an object"),
        (empty, "message 0, field content[0].source.type: is missing"),
        (untyped, "message 0, field content[0].source.type: is missing"),
    ]
    for msgs, text in cases:
        checks = [
            ("validate", "anthropic", None),  # no_source is read as OpenAI's (detected)
            ("validate", "anthropic", "anthropic"),
            ("validate", "anthropic", "openai"),
            ("count_messages", None, "anthropic"),
        ]
        for name, provider, fmt in checks:
            with pytest.raises(cw.InvalidMessageError) as err:
                if name == "validate":
                    cw.validate(msgs, provider, format=fmt)
                else:
                    cw.count_messages(msgs, format=fmt)
            assert str(err.value) == text, (name, provider, fmt)
    # inside an OpenAI tool message, and inside a struct's tool result, named where it is
    tool = [u("q"), call("c1"), {"role": "tool", "tool_call_id": "c1", "content": [{"type": "image"}]}]
    with pytest.raises(cw.InvalidMessageError) as err:
        cw.validate(tool, "anthropic")
    assert str(err.value) == "message 2, field content[0].source: must be an object"
    structs = to_canonical(tool, "openai")
    with pytest.raises(cw.InvalidMessageError) as err:
        cw.validate(structs, "anthropic")
    assert str(err.value) == "message 2, field content[0].content[0].source: must be an object"
    # the block is opaque under OpenAI's rules (auto-detected: counted as its JSON text),
    # and an Anthropic block type the Chat Completions API refuses (fresh47 #2)
    assert [(v.index, v.code) for v in cw.validate(no_source, "openai")] == [(0, "block_not_allowed")]
    assert cw.count_messages(no_source) == cw.count_messages([{"role": "user", "content": '{"type":"image"}'}])


def test_repeated_call_id_in_one_message_is_one_call() -> None:
    """Found by the second fresh-install review: a fitting input came back with a stub for
    the repeated id and then failed validate with duplicate_result."""
    m = [u("q"), call("a", "a"), res("a"), u("next")]
    assert [(v.index, v.code) for v in cw.validate(m, "openai")] == [(1, "duplicate_call")]
    r = cw.repair_tool_pairs(m)
    assert r.messages[1]["tool_calls"] == [m[1]["tool_calls"][0]] and r.messages[2:] == m[2:]
    assert [(c.kind, c.index, c.call_id) for c in r.report.repairs] == [("call_removed", 1, "a")]
    assert cw.validate(r.messages, "openai") == []
    assert cw.validate(cw.trim_turns(m, 10**6).messages, "openai") == []


def test_anthropic_drop_mode_keeps_alternation() -> None:
    """Found by the third review: dropping a call-only assistant message left two user
    messages side by side; its calls get stub results instead."""
    m = [u("q1"), use("b"), u("q2")]
    r = cw.repair_tool_pairs(m, missing="drop", format="anthropic")
    assert cw.validate(r.messages, "anthropic") == []
    assert r.messages[1] is m[1] and r.messages[2]["content"][0]["tool_use_id"] == "b"
    assert [c.kind for c in r.report.repairs] == ["stub_inserted"]
    # OpenAI has no alternation rule: the call-only message goes
    assert [x["role"] for x in cw.repair_tool_pairs([u("q1"), call("b"), u("q2")], missing="drop").messages] == [
        "user",
        "user",
    ]


def test_calls_outside_assistant_are_removed_in_both_shapes() -> None:
    """Found by the third review: a tool call in an OpenAI user message stayed put."""
    call_part = cw.ToolCall(id="a", name="f", arguments="{}")
    msgs = [
        cw.Message(role="user", content=[cw.TextPart(text="go")]),
        cw.Message(role="user", content=[cw.TextPart(text="x"), call_part]),
        cw.Message(role="assistant", content=[cw.TextPart(text="ok")]),
    ]
    for fmt in ("openai", "anthropic"):
        r = cw.repair_tool_pairs(msgs, format=fmt)
        assert r.messages[1].content == [cw.TextPart(text="x")], fmt
        assert [(c.kind, c.index) for c in r.report.repairs] == [("call_removed", 1)]
        assert [v.code for v in cw.validate(r.messages, fmt) if v.code == "call_outside_assistant"] == []


def test_drop_falls_back_to_a_stub_when_anthropic_roles_would_not_alternate() -> None:
    # documented fallback (found by a new user): dropping the only call would empty the
    # assistant message and leave two user messages in a row
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
        {"role": "user", "content": "no result"},
    ]
    r = cw.repair_tool_pairs(msgs, format="anthropic", missing="drop")
    assert [c.kind for c in r.report.repairs] == ["stub_inserted"]
    assert cw.validate(r.messages, "anthropic", format="anthropic") == []


def test_violation_details_use_the_wire_role_names() -> None:
    """A tool message is a user message under Anthropic's rules (as ``message_to_anthropic``
    writes it, fresh19 F5), so the role Anthropic does not allow is the developer's here."""
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "developer", "content": "d"},
        {"role": "tool", "tool_call_id": "x", "content": "r"},
    ]
    details = [v.detail for v in cw.validate(msgs, "anthropic", format="openai")]
    assert details == [
        "role developer is not allowed in Anthropic messages",
        'tool_result "x" does not answer a tool_use of the previous message',
    ]


def test_violation_text_says_a_user_message() -> None:
    """Found by a new user (fresh16a F7): "tool result "a" is in an user message"."""
    m = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "r"}]},
    ]
    texts = [v.detail for v in cw.validate(m, "openai", format="anthropic") if v.code == "result_outside_tool_message"]
    assert texts == ['tool result "a" is in a user message, not a tool message']


def test_violation_text_says_an_assistant_message() -> None:
    """Found by the fresh-install review (fresh8 N9): "is in a assistant message"."""
    m = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "stray", "content": "r"}]},
        {"role": "user", "content": "go"},
    ]
    texts = [v.detail for v in cw.validate(m, "anthropic") if v.code == "result_outside_user_message"]
    assert texts == ['tool_result "stray" is in an assistant message, not a user message']


def _stub(call_id: str) -> cw.ToolResult:
    return cw.ToolResult(call_id=call_id, content=[cw.TextPart(text=MISSING_RESULT)])


def _tool(*ids: str) -> cw.Message:
    return cw.Message(role="tool", content=[cw.ToolResult(call_id=i, content=[cw.TextPart(text=i)]) for i in ids])


def _calls(*ids: str) -> cw.Message:
    return cw.Message(role="assistant", content=[cw.ToolCall(id=i, name="f", arguments="{}") for i in ids])


_Q = cw.Message(role="user", content=[cw.TextPart(text="q")])


@pytest.mark.parametrize(
    ("given", "want", "repairs"),
    [
        # both results answer the calls right before: one tool message each, in order
        (
            [_Q, _calls("a", "b"), _tool("a", "b")],
            [_Q, _calls("a", "b"), _tool("a"), _tool("b")],
            [("result_moved", 2, "a"), ("result_moved", 2, "b"), ("message_dropped", 2, None)],
        ),
        # b's call comes after the tool message: b's result moves after it (moved20: it
        # was dropped and the call stubbed; before that it was left in place, an
        # orphan_result in the output)
        (
            [_Q, _calls("a"), _tool("a", "b"), _Q, _calls("b")],
            [_Q, _calls("a"), _tool("a"), _Q, _calls("b"), _tool("b")],
            [("result_moved", 2, "a"), ("message_dropped", 2, None), ("result_moved", 2, "b")],
        ),
        # the same with b's id reused by a second call: b answers nothing (dropped), its
        # calls are stubbed
        (
            [_Q, _calls("a"), _tool("a", "b"), _Q, _calls("b"), _tool("b"), _Q, _calls("b")],
            [
                _Q,
                _calls("a"),
                _tool("a"),
                _Q,
                _calls("b"),
                _tool("b"),
                _Q,
                _calls("b"),
                cw.Message(role="tool", content=[_stub("b")]),
            ],
            [
                ("result_moved", 2, "a"),
                ("orphan_result_dropped", 2, "b"),
                ("message_dropped", 2, None),
                ("stub_inserted", 7, "b"),
            ],
        ),
        # results for two assistant messages: each goes to its call (the whole message
        # went to a's, and the second repair stubbed b: not idempotent)
        (
            [_Q, _calls("a"), _Q, _calls("b"), _tool("a", "b")],
            [_Q, _calls("a"), _tool("a"), _Q, _calls("b"), _tool("b")],
            [("result_moved", 4, "a"), ("result_moved", 4, "b"), ("message_dropped", 4, None)],
        ),
        # an orphan and a second result for one call go, as anywhere else (were kept)
        (
            [_Q, _calls("a"), _tool("a", "zz")],
            [_Q, _calls("a"), _tool("a")],
            [("result_moved", 2, "a"), ("orphan_result_dropped", 2, "zz"), ("message_dropped", 2, None)],
        ),
        (
            [_Q, _calls("a"), _tool("a", "a")],
            [_Q, _calls("a"), _tool("a")],
            [("result_moved", 2, "a"), ("orphan_result_dropped", 2, "a"), ("message_dropped", 2, None)],
        ),
    ],
)
def test_an_openai_tool_message_holding_several_results_is_split(
    given: list[cw.Message], want: list[cw.Message], repairs: list[tuple[str, int, str | None]]
) -> None:
    """struct18 #5: a Message struct tool message can hold several ToolResults, which the
    OpenAI adapter cannot write (a tool message holds one) and validate reports
    (unwritable_message). Repair placed it whole with the call of its first result, so an
    orphan or a second result in it stayed, a result for another assistant message was
    left an orphan there, and a second repair changed the output again. Its results are
    now placed one by one, as results found outside a tool message are: each in a tool
    message of its own after its call (result_moved), the message itself dropped."""
    r = cw.repair_tool_pairs(given, format="openai")
    assert r.messages == want
    assert [(c.kind, c.index, c.call_id) for c in r.report.repairs] == repairs
    assert cw.validate(r.messages, "openai") == []
    again = cw.repair_tool_pairs(r.messages, format="openai")
    assert again.report.repairs == [] and all(x is y for x, y in zip(again.messages, r.messages, strict=True))
    if len(given) == 3 and given[2].content[1].call_id == "b":  # the first case
        assert [(f.fate, f.rule) for f in r.report.fates] == [
            ("kept", "fits"),
            ("kept", "fits"),
            ("dropped", "emptied_by_repair"),
        ]
    # trim_turns and fit repair first: the same messages, the split reported as tool_pairs
    for out in (cw.trim_turns(given, 10**6, format="openai"), cw.fit(given, 10**6, format="openai")):
        assert out.messages == want and out.report.reason == "tool_pairs"


def _found(msgs: Any, provider: str) -> list[tuple[int, str, str]]:
    return [(v.index, v.code, v.detail) for v in cw.validate(msgs, provider)]


_NO_CONTENT = "a user message has no content; only a final assistant message may be empty"
_EMPTY_BLOCK = "content[0] is an empty text block; text blocks must be non-empty"
_WHITESPACE_STRING = "content is a string of whitespace only; text must contain non-whitespace text"
_WHITESPACE_BLOCK = "content[0] is a text block of whitespace only; text blocks must contain non-whitespace text"
_EMPTY_CALLS = (
    "tool_calls is an empty list; the Chat Completions API takes a list of at least one call, or no tool_calls key"
)


def test_validate_reports_empty_anthropic_content() -> None:
    """fresh18 F2: an empty content list and an empty text block passed ``validate``, but
    the Messages API refuses both with HTTP 400 ("all messages must have non-empty content
    except for the optional final assistant message", "text content blocks must be
    non-empty")."""
    msgs = [
        {"role": "user", "content": []},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": ""}]},
    ]
    assert _found(msgs, "anthropic") == [(0, "empty_content", _NO_CONTENT), (2, "empty_content", _EMPTY_BLOCK)]
    # the library leaves such messages as they are: no pairing fault, nothing to repair
    r = cw.repair_tool_pairs(msgs, format="anthropic")
    assert r.report.reason is None and all(a is b for a, b in zip(r.messages, msgs, strict=True))


def test_empty_anthropic_content_cases() -> None:
    q = {"role": "user", "content": "q"}
    ok = {"role": "assistant", "content": "ok"}
    # the string "" is no content, as an empty list is; the final assistant message (a
    # prefill) may have none
    for empty in ("", []):
        assert _found([q, {"role": "assistant", "content": empty}], "anthropic") == []
        assert _found([{"role": "user", "content": empty}, ok, q], "anthropic") == [(0, "empty_content", _NO_CONTENT)]
        not_final = [q, {"role": "assistant", "content": empty}, q]
        assert _found(not_final, "anthropic") == [
            (1, "empty_content", "an assistant message has no content; only a final assistant message may be empty")
        ]
    # an empty text block is refused in any message, the final assistant one too, next to
    # other blocks too (content[j] names it; one violation each, empty19 #2)
    block = {"type": "text", "text": ""}
    assert _found([q, {"role": "assistant", "content": [block]}], "anthropic") == [(1, "empty_content", _EMPTY_BLOCK)]
    tool_use = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    two = [q, {"role": "assistant", "content": [{"type": "text", "text": "x"}, block, tool_use]}, carrier("t1")]
    assert _found(two, "anthropic") == [
        (1, "empty_content", "content[1] is an empty text block; text blocks must be non-empty")
    ]
    # a block that is not text is content; a text of one space is not (empty19 #1)
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    assert _found([{"role": "user", "content": [image]}, ok, {"role": "user", "content": " "}], "anthropic") == [
        (2, "empty_content", _WHITESPACE_STRING)
    ]
    # the empty_content violation comes after the message's other violations
    assert [(i, c) for i, c, _ in _found([{"role": "assistant", "content": []}, q], "anthropic")] == [
        (0, "first_not_user"),
        (0, "empty_content"),
    ]


def test_validate_reports_openai_empty_tool_calls() -> None:
    """fresh18 F2: ``tool_calls: []`` passed ``validate``; the Chat Completions API refuses
    it ("empty array. Expected an array with minimum length 1"). The adapter keeps the
    empty list (an unknown key, written back as it is), so validate sees it."""
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "user", "content": "z"},
    ]
    assert _found(msgs, "openai") == [(1, "empty_content", _EMPTY_CALLS)]
    with_text = [msgs[0], {"role": "assistant", "content": "x", "tool_calls": []}]
    assert _found(with_text, "openai") == [(1, "empty_content", _EMPTY_CALLS)]
    # null is no tool_calls key; an empty content is taken by the Chat Completions API
    assert _found([msgs[0], {"role": "assistant", "content": None, "tool_calls": None}, msgs[2]], "openai") == []
    assert _found([{"role": "user", "content": ""}, {"role": "assistant", "content": ""}], "openai") == []
    r = cw.repair_tool_pairs(msgs, format="openai")
    assert r.report.reason is None and all(a is b for a, b in zip(r.messages, msgs, strict=True))


def test_empty_content_on_message_structs() -> None:
    from contextwindow.messages import Message, TextPart, ToolCall

    q = Message(role="user", content=[TextPart(text="q")])
    # a lone empty TextPart is written as the string "" (no content), or as an empty
    # text block when spelled as parts or when it has extra keys
    for m, detail in [
        (Message(role="user", content=[TextPart(text="")]), _NO_CONTENT),
        (Message(role="user", content=[]), _NO_CONTENT),
        (Message(role="user", content=[TextPart(text="")], content_kind="parts"), _EMPTY_BLOCK),
        (
            Message(role="user", content=[TextPart(text="", extra={"cache_control": {"type": "ephemeral"}})]),
            _EMPTY_BLOCK,
        ),
    ]:
        ok = Message(role="assistant", content=[TextPart(text="ok")])
        assert _found([m, ok, q], "anthropic") == [(0, "empty_content", detail)]
    empty_calls = Message(role="assistant", content=[], extra={"tool_calls": []})
    assert _found([q, empty_calls], "openai") == [(1, "empty_content", _EMPTY_CALLS)]
    # with a call, the calls are written and the empty list in extra is not
    call = Message(role="assistant", content=[ToolCall(id="c1", name="f", arguments="{}")], extra={"tool_calls": []})
    result = cw.adapters.openai_to_message({"role": "tool", "tool_call_id": "c1", "content": "r"})
    assert _found([q, call, result], "openai") == []


def test_repair_adds_no_empty_content() -> None:
    """A stub placed after an assistant message that ends the conversation makes it no
    longer the final one; its empty text block was refused there already (the final
    assistant message is exempt from having content, not from empty blocks), so repair
    adds no violation."""
    msgs = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": ""}, {"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
        },
    ]
    assert [(i, c) for i, c, _ in _found(msgs, "anthropic")] == [(1, "unanswered_call"), (1, "empty_content")]
    r = cw.repair_tool_pairs(msgs, format="anthropic")
    assert [c.kind for c in r.report.repairs] == ["stub_inserted"] and r.messages[1] is msgs[1]
    assert _found(r.messages, "anthropic") == [(1, "empty_content", _EMPTY_BLOCK)]
    for out in (cw.trim_turns(msgs, 1000).messages, cw.fit(msgs, 1000).messages):
        assert _found(out, "anthropic") == [(1, "empty_content", _EMPTY_BLOCK)]


#: The Unicode White_Space property (PropList.txt): what validate takes for whitespace.
_WHITE_SPACE = [0x9, 0xA, 0xB, 0xC, 0xD, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B)]
_WHITE_SPACE += [0x2028, 0x2029, 0x202F, 0x205F, 0x3000]


def test_validate_reports_whitespace_only_text() -> None:
    """empty19 #1: the Messages API refuses a text block of whitespace only ("text content
    blocks must contain non-whitespace text"), in any message, the final assistant one
    too; a string content is one text block."""
    q = {"role": "user", "content": "q"}
    ok = {"role": "assistant", "content": "ok"}
    for text in (" ", "\n\n", "\t \u3000"):
        block = {"type": "text", "text": text}
        assert _found([{"role": "user", "content": [block]}, ok, q], "anthropic") == [
            (0, "empty_content", _WHITESPACE_BLOCK)
        ]
        assert _found([q, {"role": "assistant", "content": text}], "anthropic") == [
            (1, "empty_content", _WHITESPACE_STRING)
        ]
        tool_use = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
        msgs = [q, {"role": "assistant", "content": [{"type": "text", "text": "x"}, block, tool_use]}, carrier("t1")]
        assert _found(msgs, "anthropic") == [
            (
                1,
                "empty_content",
                "content[1] is a text block of whitespace only; text blocks must contain non-whitespace text",
            )
        ]
    # whitespace around other text is text
    assert _found([{"role": "user", "content": [{"type": "text", "text": " q\n"}]}], "anthropic") == []
    # OpenAI takes it
    assert (
        _found(
            [{"role": "user", "content": " "}, {"role": "assistant", "content": [{"type": "text", "text": " "}]}],
            "openai",
        )
        == []
    )


def test_whitespace_is_unicode_white_space() -> None:
    """empty19 #1: whitespace is the Unicode White_Space property, its 25 code points, in
    the engine and in ``_reference``; Python's ``str.isspace`` also takes U+001C..U+001F
    (information separators, not White_Space), which are text here, as are U+180E (not
    White_Space since Unicode 6.3), U+200B and U+FEFF."""
    from contextwindow import _reference as ref
    from contextwindow.messages import Message, TextPart

    q = Message(role="user", content=[TextPart(text="q")])
    assert len(_WHITE_SPACE) == 25
    for cp in range(0x3001):
        c = chr(cp)
        if cp not in _WHITE_SPACE and not c.isspace() and cp not in (0x180E, 0x200B):
            continue
        msgs = [q, Message(role="assistant", content=[TextPart(text=c)], content_kind="parts")]
        want = [(1, "empty_content")] if cp in _WHITE_SPACE else []
        assert [(v.index, v.code) for v in cw.validate(msgs, "anthropic")] == want, hex(cp)
        assert [(v.index, v.code) for v in ref.validate(msgs, "anthropic")] == want, hex(cp)
    for cp in (0x1C, 0x1D, 0x1E, 0x1F):
        assert chr(cp).isspace()  # where str.isspace and White_Space part
    assert sorted(ord(c) for c in ref._WHITE_SPACE) == _WHITE_SPACE
    for text in ("\ufeff", "\u200b", " \x1c"):
        assert _found([q, Message(role="assistant", content=[TextPart(text=text)])], "anthropic") == []


_PREFILL_SPACE = (
    "the final assistant message (a prefill) ends in whitespace; final assistant content cannot end with "
    "trailing whitespace"
)


def test_validate_reports_a_prefill_ending_in_whitespace() -> None:
    """small20 (a helper's leftover of fresh16b #2): the Messages API refuses a final
    assistant message, a prefill, that ends in whitespace ("final assistant content
    cannot end with trailing whitespace"); Anthropic's rules report it as
    ``trailing_whitespace``, OpenAI's do not (Chat Completions takes it). Only the final
    message's last part counts, and a blank one is ``empty_content`` alone."""
    from contextwindow import _engine
    from contextwindow import _reference as ref

    q = {"role": "user", "content": "Write a haiku."}
    space = [(1, "trailing_whitespace", _PREFILL_SPACE)]
    cases: list[tuple[list[Any], list[tuple[int, str, str]]]] = [
        ([q, {"role": "assistant", "content": "Sure: "}], space),
        ([q, {"role": "assistant", "content": "Sure:\n"}], space),
        ([q, {"role": "assistant", "content": "Sure:\u3000"}], space),  # White_Space
        (
            [q, {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b\t"}]}],
            space,
        ),
        # only the last part: whitespace inside is text
        ([q, {"role": "assistant", "content": [{"type": "text", "text": "a "}, {"type": "text", "text": "b"}]}], []),
        ([q, {"role": "assistant", "content": " Sure:"}], []),
        # not White_Space: text
        ([q, {"role": "assistant", "content": "Sure:\u200b"}], []),
        ([q, {"role": "assistant", "content": "Sure:\x1c"}], []),
        # not the final message
        ([q, {"role": "assistant", "content": "Sure: "}, {"role": "user", "content": "go"}], []),
        # a blank prefill is empty_content alone; an empty one is taken
        ([q, {"role": "assistant", "content": " "}], [(1, "empty_content", _WHITESPACE_STRING)]),
        ([q, {"role": "assistant", "content": ""}], []),
        # a final user message is not a prefill
        ([{"role": "user", "content": "q "}], []),
        # the last part is a call (unanswered): not text
        (
            [
                q,
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Let me look. "},
                        {"type": "tool_use", "id": "c", "name": "f", "input": {}},
                    ],
                },
            ],
            [(1, "unanswered_call", 'tool call "c" has no result in the next user message')],
        ),
    ]
    for msgs, want in cases:
        assert _found(msgs, "anthropic") == want, msgs
        canonical = _engine.prepare(msgs, "anthropic").canonical
        assert [(v.index, v.code) for v in ref.validate(canonical, "anthropic")] == [(i, c) for i, c, _ in want], msgs
        # OpenAI takes it (and a blank one): only the unanswered call is reported
        calls = [(i, c) for i, c, _ in want if c == "unanswered_call"]
        assert [(i, c) for i, c, _ in _found(msgs, "openai")] == calls, msgs
        assert [(v.index, v.code) for v in ref.validate(canonical, "openai")] == calls, msgs
    # structs: the provider's rules
    structs = [
        cw.Message(role="user", content=[cw.TextPart(text="q")]),
        cw.Message(role="assistant", content=[cw.TextPart(text="ok ")]),
    ]
    assert _found(structs, "anthropic") == space
    assert _found(structs, "openai") == []
    # a tool struct is a user message in an Anthropic request: not a prefill
    tool = cw.Message(role="tool", content=[cw.ToolResult(call_id="c", content=[cw.TextPart(text="r ")])])
    call = cw.Message(role="assistant", content=[cw.ToolCall(id="c", name="f", arguments="{}")])
    assert _found([structs[0], call, tool], "anthropic") == []
    # trim_turns and fit keep such a prefill as it is (validate reports, nothing rewrites
    # it): their output carries the same violation
    msgs = cases[0][0]
    for out in (cw.trim_turns(msgs, 10**6, format="anthropic"), cw.fit(msgs, 10**6, format="anthropic")):
        assert out.messages == msgs
        assert _found(out.messages, "anthropic") == space


_TOOL_RESULT_EMPTY = "content[0].content[1] is an empty text block; text blocks must be non-empty"


def test_validate_reports_blank_text_in_tool_results_and_system() -> None:
    """empty19 #2: a text block is refused as empty or of whitespace only wherever it is:
    in a ``tool_result``'s content list and in a ``system`` written as a list of text
    blocks. A ``tool_result`` whose content is a string (``""`` too) or absent or ``[]``
    is taken (the Messages API makes ``content`` optional there), and so is a ``system``
    string (``""`` too) and an empty list."""
    call = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]}
    q = {"role": "user", "content": "q"}

    def result(content: Any) -> dict[str, Any]:
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": "t1"}
        if content is not None:
            block["content"] = content
        return {"role": "user", "content": [block]}

    text = {"type": "text", "text": "r"}
    for blank, detail in (
        ("", _TOOL_RESULT_EMPTY),
        (
            " \n",
            _TOOL_RESULT_EMPTY.replace(
                "an empty text block; text blocks must be non-empty",
                "a text block of whitespace only; text blocks must contain non-whitespace text",
            ),
        ),
    ):
        msgs = [q, call, result([text, {"type": "text", "text": blank}])]
        assert _found(msgs, "anthropic") == [(2, "empty_content", detail)]
    for fine in (None, "", " ", [], [text]):
        assert _found([q, call, result(fine)], "anthropic") == [], fine
    # the system: a list of text blocks holds none blank; a string or no block is taken
    for blank in ("", "\u3000"):
        system = {"role": "system", "content": [{"type": "text", "text": "s"}, {"type": "text", "text": blank}]}
        found = _found([system, q], "anthropic")
        assert [(i, c) for i, c, _ in found] == [(0, "empty_content")]
        assert found[0][2].startswith("content[1] is ")
        assert _found([system, q], "openai") == []
    for fine in ("", " ", []):
        assert _found([{"role": "system", "content": fine}, q], "anthropic") == []


def test_dropping_the_last_call_takes_an_empty_tool_calls_key_with_it() -> None:
    """empty19 #3: a struct with a call and ``extra={"tool_calls": []}`` is written with
    its call (the key is not written); ``missing="drop"`` removed the call and kept the
    key, which the OpenAI adapter then wrote, so the output had an ``empty_content``
    violation the input did not have. The key goes with the last call; other keys stay,
    in their order."""
    from contextwindow.messages import Message, TextPart, ToolCall

    q = Message(role="user", content=[TextPart(text="q")])
    z = Message(role="user", content=[TextPart(text="z")])
    call = ToolCall(id="c1", name="f", arguments="{}")
    for extra, left in (({"tool_calls": []}, None), ({"a": 1, "tool_calls": [], "b": [2]}, {"a": 1, "b": [2]})):
        a = Message(role="assistant", content=[TextPart(text="x"), call], extra=extra)
        msgs = [q, a, z]
        assert [(v.index, v.code) for v in cw.validate(msgs, "openai")] == [(1, "unanswered_call")]
        r = cw.repair_tool_pairs(msgs, missing="drop", format="openai")
        assert [c.kind for c in r.report.repairs] == ["call_removed"]
        assert r.messages[1] == Message(role="assistant", content=[TextPart(text="x")], extra=left)
        if left is not None:
            assert list(r.messages[1].extra) == ["a", "b"]
        assert cw.validate(r.messages, "openai") == []
        assert cw.adapters.message_to_openai(r.messages[1]) == {"role": "assistant", "content": "x", **(left or {})}
        # "stub" keeps the call, and the key is still not written
        stubbed = cw.repair_tool_pairs(msgs, format="openai")
        assert stubbed.messages[1] is a and cw.validate(stubbed.messages, "openai") == []
    # a call that stays keeps the key as it is (not written while a call is there)
    two = Message(
        role="assistant", content=[call, ToolCall(id="c2", name="f", arguments="{}")], extra={"tool_calls": []}
    )
    answer = cw.adapters.openai_to_message({"role": "tool", "tool_call_id": "c2", "content": "r"})
    r = cw.repair_tool_pairs([q, two, answer], missing="drop", format="openai")
    assert r.messages[1].extra == {"tool_calls": []} and cw.validate(r.messages, "openai") == []


def test_validate_under_anthropic_rules_refuses_a_second_system_in_any_shape() -> None:
    """empty19 #4: plain-text dicts read the same in both shapes and are detected as
    OpenAI's; ``validate(dicts, "anthropic")`` then let two system messages pass, which
    Anthropic refuses (its one top-level ``system``) and which ``format="anthropic"``
    refused. The provider's rules apply whatever shape the messages were read in."""
    d = [{"role": "system", "content": "a"}, {"role": "system", "content": "b"}, {"role": "user", "content": "u"}]
    want = (
        'message 1, field role: an Anthropic request takes one system prompt, its top-level "system"; this is a second'
    )
    for fmt in (None, "openai", "anthropic"):
        with pytest.raises(cw.InvalidMessageError) as info:
            cw.validate(d, "anthropic", format=fmt)
        assert str(info.value) == want
    assert cw.validate(d, "openai") == []  # OpenAI takes several
    # a system message holding other than text, read as OpenAI's, is refused the same way
    img = {"type": "image_url", "image_url": {"url": "https://x/i.png"}}
    with pytest.raises(cw.InvalidMessageError, match=r"message 0, field content\[1\]: must be a text block"):
        cw.validate([{"role": "system", "content": [{"type": "text", "text": "s"}, img]}, d[2]], "anthropic")
    assert cw.validate([d[0], d[2]], "anthropic") == []


def test_a_developer_struct_under_anthropic_rules_is_counted_and_reported() -> None:
    """empty19 #5, a decision: ``developer`` is a role of the canonical model (a preamble
    message), so a struct holding it is counted, trimmed and fitted under Anthropic's
    rules as under OpenAI's, and ``validate`` reports it as ``role_not_allowed``; an
    Anthropic dict cannot say the role and is refused (README, "Errors")."""
    from contextwindow.messages import Message, TextPart

    dev = Message(role="developer", content=[TextPart(text="be brief")])
    q = Message(role="user", content=[TextPart(text="q")])
    msgs = [dev, q]
    found = [(v.index, v.code, v.detail) for v in cw.validate(msgs, "anthropic")]
    assert found == [(0, "role_not_allowed", "role developer is not allowed in Anthropic messages")]
    as_system = [Message(role="system", content=[TextPart(text="be brief")]), q]
    assert cw.count_messages(msgs, format="anthropic") == cw.count_messages(as_system, format="anthropic")
    for out in (cw.trim_turns(msgs, 1, format="anthropic"), cw.fit(msgs, 1, format="anthropic")):
        assert out.messages[0] is dev  # the preamble is kept
        assert [(v.index, v.code) for v in cw.validate(out.messages, "anthropic")] == [(0, "role_not_allowed")]
    with pytest.raises(cw.InvalidMessageError, match='message 0, field role: unknown role "developer"'):
        cw.count_messages(
            [{"role": "developer", "content": "be brief"}, {"role": "user", "content": "q"}], format="anthropic"
        )


def test_a_blank_block_is_one_violation_so_a_moved_result_adds_none() -> None:
    """empty19 #2: one ``empty_content`` for each blank text block, not one per message:
    repair moves a result holding one out of a message holding another, and a count per
    message then grew from one to two (the output added a violation)."""
    tu = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    blank_result = {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": " "}]}
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [tu]},
        {"role": "user", "content": [{"type": "text", "text": "x"}]},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": [blank_result, {"type": "text", "text": ""}]},
    ]
    ws = "content[0].content[0] is a text block of whitespace only; text blocks must contain non-whitespace text"
    found = _found(msgs, "anthropic")
    assert [(i, c) for i, c, _ in found] == [
        (1, "unanswered_call"),
        (4, "orphan_result"),
        (4, "empty_content"),
        (4, "empty_content"),
    ]
    assert [d for _, c, d in found if c == "empty_content"] == [
        ws,
        "content[1] is an empty text block; text blocks must be non-empty",
    ]
    for missing in ("stub", "drop"):
        r = cw.repair_tool_pairs(msgs, missing, format="anthropic")
        assert [c.kind for c in r.report.repairs] == ["result_moved"]
        assert r.messages[2]["content"][0] == blank_result
        assert _found(r.messages, "anthropic") == [
            (2, "empty_content", ws),
            (4, "empty_content", "content[0] is an empty text block; text blocks must be non-empty"),
        ]


# ------------------------------------------- a tool struct read as Anthropic's (fresh19 F5)

_M, _T, _TR, _TC = cw.Message, cw.TextPart, cw.ToolResult, cw.ToolCall


def _orphan_first(role: str) -> list[cw.Message]:
    return [
        _M(role="system", content=[_T(text="s")]),
        _M(role=role, content=[_TR(call_id="zz", content=[_T(text="o")])]),
        _M(role="assistant", content=[_T(text="a")]),
        _M(role="user", content=[_T(text="now")]),
    ]


@pytest.mark.parametrize("role", ["user", "tool"])
def test_an_emptied_tool_struct_stays_as_the_placeholder_as_a_user_one_does(role: str) -> None:
    """fresh19 F5: an orphan ``Message(role="tool")`` read as Anthropic's was dropped by
    repair, leaving an assistant message first (``first_not_user``, 39 of 400 random
    broken struct conversations); a user struct stayed as the placeholder. Under
    Anthropic's rules a tool struct is the user message ``message_to_anthropic`` writes:
    it stays holding ``RESULTS_REMOVED``, with its role, reported as the user one is."""
    s = _orphan_first(role)
    r = cw.repair_tool_pairs(s, format="anthropic")
    assert [m.role for m in r.messages] == ["system", role, "assistant", "user"]
    assert r.messages[1].content == [_T(text=cw.messages.RESULTS_REMOVED)]
    assert [a is b for a, b in zip(r.messages, s, strict=True)] == [True, False, True, True]
    assert [(c.kind, c.index, c.call_id) for c in r.report.repairs] == [
        ("orphan_result_dropped", 1, "zz"),
        ("placeholder_inserted", 1, None),
    ]
    assert [(f.fate, f.rule) for f in r.report.fates] == [
        ("kept", "fits"),
        ("repaired", "orphan_result"),
        ("kept", "fits"),
        ("kept", "fits"),
    ]
    assert cw.validate(r.messages, "anthropic") == []
    assert cw.adapters.message_to_anthropic(r.messages[1]) == {"role": "user", "content": cw.messages.RESULTS_REMOVED}
    # the input's only fault is the orphan (a tool struct is no role_not_allowed here)
    assert [(v.index, v.code) for v in cw.validate(s, "anthropic")] == [(1, "orphan_result")]
    for budget in (0, 10, 100):  # trim_turns never drops the one turn: its output too
        out = cw.trim_turns(s, budget, format="anthropic").messages
        assert [m.role for m in out] == ["system", role, "assistant", "user"]
        assert cw.validate(out, "anthropic") == []


def test_an_emptied_tool_struct_between_assistant_messages_stays() -> None:
    """fresh19 F5, in the middle: dropped, the orphan tool struct made two assistant
    messages meet (``not_alternating``)."""
    s = [
        _M(role="user", content=[_T(text="q")]),
        _M(role="assistant", content=[_T(text="a")]),
        _M(role="tool", content=[_TR(call_id="zz", content=[_T(text="o")])]),
        _M(role="assistant", content=[_T(text="b")]),
        _M(role="user", content=[_T(text="now")]),
    ]
    r = cw.repair_tool_pairs(s, format="anthropic")
    assert [m.role for m in r.messages] == ["user", "assistant", "tool", "assistant", "user"]
    assert r.messages[2].content == [_T(text=cw.messages.RESULTS_REMOVED)]
    assert [c.kind for c in r.report.repairs] == ["orphan_result_dropped", "placeholder_inserted"]
    assert cw.validate(r.messages, "anthropic") == []
    # an orphan tool struct between user messages goes, as a user one does
    s2 = [s[0], s[1], _M(role="user", content=[_T(text="more")]), s[2], s[4]]
    r2 = cw.repair_tool_pairs(s2, format="anthropic")
    assert [m.role for m in r2.messages] == ["user", "assistant", "user", "user"]
    assert [c.kind for c in r2.report.repairs] == ["orphan_result_dropped", "message_dropped"]
    assert [(f.fate, f.rule) for f in r2.report.fates][3] == ("dropped", "emptied_by_repair")


def test_a_tool_struct_answering_the_calls_before_it_is_a_valid_anthropic_user_message() -> None:
    """A tool struct holding the results of the calls before it is what
    ``message_to_anthropic`` writes as the user message answering them: ``validate`` took
    it as a fault (``unanswered_call``, ``role_not_allowed``,
    ``result_outside_user_message``), and repair moved its results into a new user
    message, whose next user message then met it (``not_alternating``, a fault the input
    did not have). Now it is valid and repair leaves it as it is."""
    s = [
        _M(role="user", content=[_T(text="q")]),
        _M(role="assistant", content=[_TC(id="c1", name="f", arguments="{}")]),
        _M(role="tool", content=[_TR(call_id="c1", content=[_T(text="o")])]),
        _M(role="assistant", content=[_T(text="done")]),
        _M(role="user", content=[_T(text="next")]),
    ]
    assert cw.validate(s, "anthropic") == []
    r = cw.repair_tool_pairs(s, format="anthropic")
    assert r.report.reason is None and r.report.repairs == []
    assert all(a is b for a, b in zip(r.messages, s, strict=True)) and len(r.messages) == len(s)
    t = cw.trim_turns(s, 0, format="anthropic")  # the current request alone
    assert [m.role for m in t.messages] == ["user"] and cw.validate(t.messages, "anthropic") == []
    # the call's result in a tool struct after a plain user message moves there, and
    # the emptied tool struct goes (between two user messages it would stay as nothing)
    s2 = [s[0], s[1], _M(role="user", content=[_T(text="wait")]), s[2]]
    r2 = cw.repair_tool_pairs(s2, format="anthropic")
    assert [m.role for m in r2.messages] == ["user", "assistant", "user"]
    assert r2.messages[2].content == [s[2].content[0], _T(text="wait")]
    assert [(c.kind, c.index) for c in r2.report.repairs] == [("result_moved", 3), ("message_dropped", 3)]
    assert cw.validate(r2.messages, "anthropic") == []


def test_validate_takes_a_tool_struct_as_an_anthropic_user_message() -> None:
    """Under Anthropic's rules a tool struct is checked as the user message
    ``message_to_anthropic`` writes (role order, results, content); ``developer`` is
    still a role Anthropic has not (``role_not_allowed``)."""
    tool_text = _M(role="tool", content=[_T(text="x")])
    user = _M(role="user", content=[_T(text="q")])
    assistant = _M(role="assistant", content=[_T(text="a")])
    assert cw.validate([tool_text, assistant], "anthropic") == []
    found = cw.validate([user, tool_text], "anthropic")
    assert [(v.index, v.code, v.detail) for v in found] == [
        (1, "not_alternating", "two messages in a row have the same role")
    ]
    assert [(v.index, v.code) for v in cw.validate([assistant, tool_text], "anthropic")] == [(0, "first_not_user")]
    empty = _M(role="tool", content=[])
    assert [(v.index, v.code, v.detail) for v in cw.validate([user, assistant, empty], "anthropic")] == [
        (2, "empty_content", "a tool message has no content; only a final assistant message may be empty")
    ]
    dev = _M(role="developer", content=[_T(text="d")])
    assert [(v.index, v.code) for v in cw.validate([user, dev], "anthropic")] == [(1, "role_not_allowed")]
    # OpenAI's rules are unchanged: a tool message answers the assistant's calls
    assert [(v.index, v.code) for v in cw.validate([user, tool_text], "openai")] == [(1, "empty_tool_message")]


def test_fit_and_prune_take_a_tool_struct_as_a_user_message() -> None:
    """fit evicts the placeholder repair keeps for an orphan tool struct, leaving the
    assistant message first; prune_middle removes the assistant message between the
    current request and such a placeholder. A user struct there gives a valid output."""
    from contextwindow.compact import prune_middle

    s = _orphan_first("tool")
    assert cw.validate(cw.fit(s, 21, format="anthropic").messages, "anthropic") == []
    turns = [_M(role=r, content=[_T(text=f"{r[0]}{k}")]) for k in range(3) for r in ("user", "assistant")]
    s2 = [*turns, _M(role="tool", content=[_TR(call_id="c1", content=[_T(text="x")])])]
    assert cw.validate(prune_middle(s2, keep_recent=1, format="anthropic").messages, "anthropic") == []


def test_dropping_a_trailing_call_adds_no_empty_user_message() -> None:
    """fresh19b #1: ``missing="drop"`` in Anthropic shape removed the unanswered call of
    an assistant message that keeps other content and then appended
    ``{"role": "user", "content": []}`` (the carrier for its results, with none), which
    ``validate`` and the API refuse. Nothing is owed, so no message is added."""
    call = {"type": "tool_use", "id": "t1", "name": "w", "input": {}}
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": "write the file"},
        {"role": "assistant", "content": [{"type": "text", "text": "Writing."}, call]},
    ]
    r = cw.repair_tool_pairs(msgs, missing="drop")
    assert r.messages == [msgs[0], {"role": "assistant", "content": [{"type": "text", "text": "Writing."}]}]
    assert cw.validate(r.messages, "anthropic") == []
    assert [c.kind for c in r.report.repairs] == ["call_removed"] and r.report.inserted_messages == 0
    # another assistant message after it: the two stay side by side, as in the input (no
    # new violation; stubbing would put a user message of results between them)
    more = [*msgs, {"role": "assistant", "content": "more"}]
    r = cw.repair_tool_pairs(more, missing="drop")
    assert [m["role"] for m in r.messages] == ["user", "assistant", "assistant"]
    assert [v.code for v in cw.validate(r.messages, "anthropic")] == ["not_alternating"]
    assert "not_alternating" in [v.code for v in cw.validate(more, "anthropic")]
    # the reference agrees
    from contextwindow import _reference as ref

    canon = cw.adapters.to_canonical(msgs, "anthropic")
    ops, _ = ref.repair_tool_pairs(canon, "drop", "conservative", "anthropic")
    assert len(ops) == 2


# --------------------------------------------------------------------------- a result before its call (moved20)


def test_result_before_its_call_moves_after_it() -> None:
    """moved20: a tool result that comes before its call was dropped as an orphan and the
    call given the stub (the result's text lost). Where it is unambiguous (its id is that
    of one call, made later by the assistant, and of no other result) it moves after the
    call, as a separated result does."""
    msgs = [u("hi"), res("c1", "result text"), call("c1"), u("next")]
    r = cw.repair_tool_pairs(msgs)
    assert r.messages == [msgs[0], msgs[2], msgs[1], msgs[3]]
    assert all(x is msgs[i] for x, i in zip(r.messages, [0, 2, 1, 3], strict=True))
    assert [(c.kind, c.index, c.call_id) for c in r.report.repairs] == [("result_moved", 1, "c1")]
    assert [(f.fate, f.rule) for f in r.report.fates] == [
        ("kept", "fits"),
        ("repaired", "result_moved"),
        ("kept", "fits"),
        ("kept", "fits"),
    ]
    assert r.report.inserted_messages == 0
    assert cw.validate(r.messages, "openai") == []
    # the same messages in another order: the same tokens
    assert r.report.tokens_after == r.report.tokens_before == cw.count_messages(msgs)
    again = cw.repair_tool_pairs(r.messages)
    assert again.report.repairs == [] and all(x is y for x, y in zip(again.messages, r.messages, strict=True))
    # "drop" keeps the call, which has its result now
    assert cw.repair_tool_pairs(msgs, "drop").messages == r.messages
    # the call's results in place first, then the early one
    two = [u("hi"), res("c1", "early"), call("c1", "c2"), res("c2"), u("next")]
    r2 = cw.repair_tool_pairs(two)
    assert r2.messages == [two[0], two[2], two[3], two[1], two[4]]
    assert [(c.kind, c.index, c.call_id) for c in r2.report.repairs] == [("result_moved", 1, "c1")]
    # Message structs: the same
    canon = to_canonical(msgs)
    out = cw.repair_tool_pairs(canon, format="openai").messages
    assert [m is canon[i] for m, i in zip(out, [0, 2, 1, 3], strict=True)] == [True] * 4


def test_result_before_its_call_moves_anthropic() -> None:
    """moved20, Anthropic shape: a ``tool_result`` block in a user message before the
    assistant's ``tool_use`` goes into the user message after it, ahead of its content;
    the message it left keeps what else it held, or, emptied, stays as the placeholder
    where its going would put two assistant messages side by side."""
    block = {"type": "tool_result", "tool_use_id": "t1", "content": "THE OUTPUT"}
    see = {"type": "text", "text": "see"}
    hm = {"role": "assistant", "content": "hm"}
    msgs = [u("q"), hm, {"role": "user", "content": [block, see]}, use("t1"), u("next")]
    r = cw.repair_tool_pairs(msgs)
    assert r.messages == [
        msgs[0],
        msgs[1],
        {"role": "user", "content": [see]},
        msgs[3],
        {"role": "user", "content": [block, {"type": "text", "text": "next"}]},
    ]
    assert [(c.kind, c.index, c.call_id) for c in r.report.repairs] == [("result_moved", 2, "t1")]
    fates = [(f.fate, f.rule) for f in r.report.fates]
    assert fates[2] == fates[4] == ("repaired", "result_moved") and fates[3] == ("kept", "fits")
    assert cw.validate(r.messages, "anthropic") == []
    assert cw.repair_tool_pairs(r.messages).report.repairs == []
    # the block alone in its message: the message stays as the placeholder
    alone = [u("q"), hm, {"role": "user", "content": [block]}, use("t1"), u("next")]
    r = cw.repair_tool_pairs(alone)
    assert r.messages[2] == {"role": "user", "content": [{"type": "text", "text": RESULTS_REMOVED}]}
    assert r.messages[4] == {"role": "user", "content": [block, {"type": "text", "text": "next"}]}
    assert [(c.kind, c.index, c.call_id) for c in r.report.repairs] == [
        ("placeholder_inserted", 2, None),
        ("result_moved", 2, "t1"),
    ]
    assert cw.validate(r.messages, "anthropic") == []
    # the next user message was the current request: it still is (fit keeps it whole)
    f = cw.fit(alone, 10_000)
    assert f.messages == r.messages and f.report.fits


def test_result_before_its_call_with_a_reused_id_is_dropped() -> None:
    """moved20: where the id is reused (agents reuse ids like ``call_0``), the early result
    is not moved: it goes as an orphan and an unanswered call gets the stub, as before."""
    stub = {"role": "tool", "tool_call_id": "k", "content": MISSING_RESULT}
    # two results with the id
    msgs = [u("hi"), res("k", "x"), res("k", "y"), call("k"), u("next")]
    r = cw.repair_tool_pairs(msgs)
    assert r.messages == [msgs[0], msgs[3], stub, msgs[4]]
    assert [(c.kind, c.index) for c in r.report.repairs] == [
        ("orphan_result_dropped", 1),
        ("orphan_result_dropped", 2),
        ("stub_inserted", 3),
    ]
    # the call answered after it
    msgs = [u("hi"), res("call_0", "early"), call("call_0"), res("call_0", "own"), u("next")]
    r = cw.repair_tool_pairs(msgs)
    assert r.messages == [msgs[0], msgs[2], msgs[3], msgs[4]]
    assert [(c.kind, c.index) for c in r.report.repairs] == [("orphan_result_dropped", 1)]
    # two later calls with the id
    msgs = [u("hi"), res("k", "x"), call("k"), u("n"), call("k"), u("m")]
    r = cw.repair_tool_pairs(msgs)
    assert r.messages == [msgs[0], msgs[2], stub, msgs[3], msgs[4], stub, msgs[5]]
    assert [(c.kind, c.index) for c in r.report.repairs] == [
        ("orphan_result_dropped", 1),
        ("stub_inserted", 2),
        ("stub_inserted", 4),
    ]
    # a call with the id in the result's own (user) message is no call, but the id is
    # not one call's alone: as before
    stray = {
        "role": "user",
        "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}, *carrier("t")["content"]],
    }
    r = cw.repair_tool_pairs([u("q"), {"role": "assistant", "content": "a"}, stray, use("t"), u("n")])
    assert ("result_moved", 2) not in [(c.kind, c.index) for c in r.report.repairs]


def test_result_before_its_call_in_a_request_body() -> None:
    """moved20: the gateway's body path moves the early result as repair does; the body's
    token count is that of its messages, moved or not."""
    msgs = [u("hi"), res("c1", "result text"), call("c1"), u("next")]
    body = json.dumps({"model": "m", "messages": msgs}).encode()
    out, rep = cw.fit_request(body, budget=10_000, provider="openai", report=True)
    assert json.loads(out)["messages"] == [msgs[0], msgs[2], msgs[1], msgs[3]]
    assert [(c.kind, c.index) for c in rep.report.repairs] == [("result_moved", 1)]
    assert rep.report.tokens_after == cw.count_request(body) == cw.count_messages(msgs)
    anth = [u("q"), {"role": "assistant", "content": "hm"}, carrier("t1", text="see"), use("t1"), u("next")]
    anth[2]["content"][0]["content"] = "THE OUTPUT"
    body = json.dumps({"model": "m", "max_tokens": 10, "messages": anth}).encode()
    out, rep = cw.fit_request(body, budget=10_000, provider="anthropic", report=True)
    assert json.loads(out)["messages"] == cw.repair_tool_pairs(anth, format="anthropic").messages
    assert json.loads(out)["messages"][4]["content"][0]["content"] == "THE OUTPUT"
    assert [(c.kind, c.index) for c in rep.report.repairs] == [("result_moved", 2)]


def test_result_before_its_call_in_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """moved20: ``contextwindow repair`` moves the early result as repair_tool_pairs does."""
    msgs = [u("hi"), res("c1", "result text"), call("c1"), u("next")]
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"model": "m", "messages": msgs}))
    assert main(["repair", str(f), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"model": "m", "messages": [msgs[0], msgs[2], msgs[1], msgs[3]]}
    assert [(c["kind"], c["index"]) for c in json.loads(captured.err)["repairs"]] == [("result_moved", 1)]


def test_drop_mode_trims_the_whitespace_of_a_final_prefill_it_leaves() -> None:
    """``missing="drop"`` removing the calls of the final assistant message leaves its text
    as a prefill; the whitespace the calls followed goes too, so the output adds no
    ``trailing_whitespace`` (small20's leftover: ``"Let me look. "`` stayed, and the Messages
    API refuses it). Rust and the reference alike; not the last message, or OpenAI's shape:
    the text stays as it is."""
    from contextwindow import _reference as ref

    call = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    msgs = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me look. \n\u3000"}, call]},
    ]
    r = cw.repair_tool_pairs(msgs, missing="drop")
    assert r.messages[1] == {"role": "assistant", "content": [{"type": "text", "text": "Let me look."}]}
    assert [(c.kind, c.index) for c in r.report.repairs] == [("call_removed", 1)]
    assert cw.validate(r.messages, "anthropic") == []
    assert msgs[1]["content"][0]["text"] == "Let me look. \n\u3000"  # the input as it was
    structs = to_canonical(msgs, "anthropic")
    items, _ = ref.repair(structs, "anthropic", "drop")
    assert items[1].msg(structs).content[0].text == "Let me look."
    # a user message after it: not a prefill, the text stays
    later = [*msgs, {"role": "user", "content": "go on"}]
    r = cw.repair_tool_pairs(later, missing="drop")
    assert r.messages[1]["content"][0]["text"] == "Let me look. \n\u3000"
    # OpenAI's rules take a final assistant message ending in whitespace
    openai = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "Let me look. ",
            "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
    ]
    r = cw.repair_tool_pairs(openai, missing="drop")
    assert r.messages[1] == {"role": "assistant", "content": "Let me look. "}


def _anthropic_tool_loop(ids: list[str], name: str = "bash") -> list[dict[str, Any]]:
    """A user request, then for each id an assistant ``tool_use`` and its result, then a
    final answer and a new request (fresh20b #4's shape)."""
    ms: list[dict[str, Any]] = [{"role": "user", "content": "list files"}]
    for k, i in enumerate(ids):
        ms.append({"role": "assistant", "content": [{"type": "tool_use", "id": i, "name": name, "input": {}}]})
        ms.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": i, "content": f"r{k}"}]})
    return [*ms, {"role": "assistant", "content": "Done."}, {"role": "user", "content": "thanks"}]


def test_anthropic_tool_use_id_reused_across_messages_is_reported() -> None:
    """fresh20b #4: Anthropic refuses a request whose tool_use ids repeat ("tool_use ids
    must be unique"), across messages too; validate passed it. Reported once per reusing
    message and id, naming the first user; OpenAI's rules leave it alone."""
    ms = _anthropic_tool_loop(["toolu_1", "toolu_1", "toolu_2", "toolu_1"])
    found = cw.validate(ms, "anthropic", format="anthropic")
    assert [(v.index, v.code, v.call_id) for v in found] == [
        (3, "reused_call_id", "toolu_1"),
        (7, "reused_call_id", "toolu_1"),
    ]
    assert found[0].detail == 'tool call id "toolu_1" is already used by message 1; tool_use ids must be unique'
    openai_ms: list[dict[str, Any]] = [{"role": "user", "content": "list files"}]
    for k, i in enumerate(["call_0", "call_0", "call_1", "call_0"]):
        call = {"id": i, "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        openai_ms.append({"role": "assistant", "content": None, "tool_calls": [call]})
        openai_ms.append({"role": "tool", "tool_call_id": i, "content": f"r{k}"})
    assert cw.validate(openai_ms, "openai") == []  # OpenAI's rules: no known refusal
    # repair does not rename ids: the violation stays, and repair adds nothing
    assert cw.repair_tool_pairs(ms, format="anthropic").report.repairs == []
    # an id twice in one message, also used before: duplicate_call (repair mends it) and
    # one reused_call_id
    two = {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}] * 2}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "x"}]}
    ms2 = [*_anthropic_tool_loop(["a"])[:3], two, result]
    got = [(v.index, v.code) for v in cw.validate(ms2, "anthropic", format="anthropic")]
    assert got == [(3, "duplicate_call"), (3, "reused_call_id")]


@pytest.mark.parametrize(
    ("call_id", "name", "codes"),
    [
        ("", "read", ["call_id_not_allowed"]),
        ("functions.read:0", "read", ["call_id_not_allowed"]),
        ("toolu_ü", "read", ["call_id_not_allowed"]),
        ("t1", "", ["tool_name_not_allowed"]),
        ("t1", "read.file", ["tool_name_not_allowed"]),
        ("t1", "x" * 65, ["tool_name_not_allowed"]),
        ("a b", "a b", ["tool_name_not_allowed", "call_id_not_allowed"]),
        ("t-1_A9", "x" * 64, []),
    ],
)
def test_anthropic_tool_use_id_and_name_patterns(call_id: str, name: str, codes: list[str]) -> None:
    """fresh20b #6: the Messages API checks a tool_use id against ^[a-zA-Z0-9_-]+$ and a
    name against ^[a-zA-Z0-9_-]{1,64}$; validate passed "", Kimi's "functions.read:0"
    and an empty name. OpenAI's rules report neither."""
    ms = _anthropic_tool_loop([call_id], name)
    found = cw.validate(ms, "anthropic", format="anthropic")
    assert [(v.index, v.code, v.call_id) for v in found] == [(1, c, call_id) for c in codes]
    if codes and codes[0] == "call_id_not_allowed":
        assert found[0].detail == f'tool_use id "{call_id}" does not match ^[a-zA-Z0-9_-]+$'
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}
    openai_ms = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": "r"},
    ]
    assert cw.validate(openai_ms, "openai") == []
    # the same on Message structs, and trim keeps the violation as the input has it
    structs = to_canonical(ms, "anthropic")
    assert [v.code for v in cw.validate(structs, "anthropic")] == codes
    out = cw.trim_turns(ms, 10_000, format="anthropic").messages
    assert [v.code for v in cw.validate(out, "anthropic", format="anthropic")] == codes


@pytest.mark.parametrize(
    ("call", "detail"),
    [
        (
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{not json"}},
            "field content[0].arguments: tool call arguments are not JSON",
        ),
        (
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "[1]"}},
            "field content[0].arguments: tool call arguments are not a JSON object",
        ),
    ],
)
def test_openai_dicts_checked_against_anthropic_rules_report_what_cannot_be_written(
    call: dict[str, Any], detail: str
) -> None:
    """fresh30 #2: ``validate(dicts, "anthropic")`` passed OpenAI calls whose arguments
    are not a JSON object, which the same messages as structs were reported for
    (``unwritable_message``) and which fail to convert. Dicts read in the other
    provider's shape are checked with its writer as structs are; dicts in the provider's
    own shape and the OpenAI rules on them are unchanged."""
    from contextwindow.adapters import openai_to_message

    d = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "a", "content": "r"},
    ]
    got = cw.validate(d, "anthropic")
    assert [(v.index, v.code, v.detail) for v in got] == [(1, "unwritable_message", detail)]
    assert got == cw.validate([openai_to_message(m) for m in d], "anthropic")
    assert cw.validate(d, "openai") == []


def _pinned_caller(provider: str, after: list[cw.Message]) -> list[cw.Message]:
    """A pinned assistant message holding its call's result before the call (moved out
    by repair), then ``after``."""
    held = cw.ToolResult(call_id="c1", content=[cw.TextPart(text="r1")])
    return [
        cw.Message(role="user", content=[cw.TextPart(text="go")]),
        cw.Message(role="assistant", content=[held, cw.ToolCall(id="c1", name="f", arguments="{}")], pinned=True),
        *after,
    ]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_result_moved_out_of_a_pinned_message_stays_pinned(provider: str) -> None:
    """Hypothesis (test_guard_properties): a result moved out of a pinned message went
    into a new message without the flag, so the guard's character cap cut it on the next
    call (the loop's request changed though it fitted). What the caller pinned survives
    every operation (DESIGN.md section 8): the message that receives it is pinned."""
    from contextwindow import _reference as ref

    out = cw.repair_tool_pairs(_pinned_caller(provider, []), format=provider).messages
    assert [(m.role, m.pinned) for m in out] == [
        ("user", False),
        ("assistant", True),
        ("tool" if provider == "openai" else "user", True),
    ]
    assert out[2].content[0].call_id == "c1" and out[2].content[0].content[0].text == "r1"
    # a user message after the caller (Anthropic) receives it and is pinned with it
    nxt = cw.Message(role="user", content=[cw.TextPart(text="next")])
    msgs = _pinned_caller(provider, [nxt])
    out = cw.repair_tool_pairs(msgs, format=provider).messages
    want = [False, True, True, False] if provider == "openai" else [False, True, True]
    assert [m.pinned for m in out] == want
    assert nxt.pinned is False  # the caller's message is not edited
    # the same rules in Python
    ops, _ = ref.repair_tool_pairs(msgs, provider=provider)
    assert [(m if m is not None else msgs[s]).pinned for s, m in ops] == want
    # nothing pinned: nothing pinned after
    plain = [msgspec.structs.replace(m, pinned=False) for m in msgs]
    assert not any(m.pinned for m in cw.repair_tool_pairs(plain, format=provider).messages)


def test_anthropic_block_a_tool_result_cannot_hold() -> None:
    """fresh35 #5: a ``tool_result`` nested in a ``tool_result``'s content passed
    ``validate(..., "anthropic")``; the Messages API takes text, image, document and
    search_result blocks there. A block that belongs in a message only (a tool call or
    result, the server's too, a thinking block) is ``block_not_allowed``, one each, with
    its result's call id; other block types (unknown ones included) are left alone."""
    from contextwindow import _reference as ref

    def conv(inner: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": inner}]},
        ]

    nested = {"type": "tool_result", "tool_use_id": "t", "content": "r"}
    use = {"type": "tool_use", "id": "u", "name": "g", "input": {}}
    server = {"type": "web_search_tool_result", "tool_use_id": "s", "content": []}
    think = {"type": "thinking", "thinking": "hm", "signature": "sig"}
    got = cw.validate(conv([nested, {"type": "text", "text": "ok"}, use, server, think]), "anthropic")
    assert [(v.index, v.code, v.call_id) for v in got] == [(2, "block_not_allowed", "t")] * 4
    assert got[0].detail == (
        "a tool_result's content holds a \"tool_result\" block, which belongs in a message's content: "
        "the Messages API refuses it there"
    )
    # the same in Python
    msgs = to_canonical(conv([nested, use]), "anthropic")
    got = ref.validate(msgs, "anthropic")
    assert [(v.index, v.code, v.call_id) for v in got] == [(2, "block_not_allowed", "t")] * 2
    # blocks the API takes there, and types this library does not know, pass
    fine = [{"type": "text", "text": "ok"}, {"type": "search_result", "source": "s", "title": "t", "content": []}]
    assert cw.validate(conv([*fine, {"type": "future_block"}]), "anthropic") == []
    # a repair leaves it (no rule moves a nested block): the guard does not repair for it
    assert [c.kind for c in cw.repair_tool_pairs(conv([nested]), format="anthropic").report.repairs] == []


def test_openai_file_and_audio_parts_outside_a_user_message() -> None:
    """fresh45 #5: a ``file`` part in a system message passed ``validate(..., "openai")``
    (and was priced as a 3,000-token document). The Chat Completions API takes file and
    audio parts in user messages only: elsewhere each is ``block_not_allowed``, with the
    call id when a tool result holds it; in a user message it passes."""
    from contextwindow import _reference as ref

    file = {"type": "file", "file": {"file_id": "f"}}
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    call = {"id": "x", "type": "function", "function": {"name": "a", "arguments": "{}"}}
    msgs = [
        {"role": "system", "content": [{"type": "text", "text": "sys"}, file]},
        {"role": "user", "content": [{"type": "text", "text": "hi"}, file, audio]},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "x", "content": [{"type": "text", "text": "r"}, audio]},
        {"role": "assistant", "content": [file]},
    ]
    got = cw.validate(msgs, "openai")
    assert [(v.index, v.code, v.call_id) for v in got] == [
        (0, "block_not_allowed", None),
        (3, "block_not_allowed", "x"),
        (4, "block_not_allowed", None),
    ]
    assert got[0].detail == (
        'content[1] is a part of type "file" in a system message; the Chat Completions API takes image, '
        "file and audio parts only in user messages"
    )
    assert got[1].detail == (
        'content[1] of the result of tool call "x" is a part of type "input_audio"; the Chat Completions '
        "API takes image, file and audio parts only in user messages, a tool message's content text only"
    )
    assert got[2].detail.startswith('content[0] is a part of type "file" in an assistant message;')
    # the same in Python
    assert [(v.index, v.code, v.call_id) for v in ref.validate(to_canonical(msgs, "openai"), "openai")] == [
        (v.index, v.code, v.call_id) for v in got
    ]
    # user messages take them: nothing to report
    assert cw.validate(msgs[1:2], "openai") == []
    # counting is unchanged: the system's file is still a document by reference
    assert cw.count_messages(msgs[:1]) - cw.count_messages([{"role": "system", "content": "sys"}]) > 3_000


def test_the_other_providers_blocks_are_block_not_allowed() -> None:
    """fresh47 #2: a user message holding an OpenAI ``image_url`` part and an Anthropic
    ``image`` block passed ``validate`` under both providers' rules; the reader keeps the
    other provider's block as an opaque part (counted as its JSON text), and each API
    refuses it. Under OpenAI's rules an Anthropic block (an ``image``, a ``document``,
    a server tool block ...) is ``block_not_allowed``; under Anthropic's an OpenAI part
    (``image_url``, ``input_audio``, ``file``); in a tool result, with its call id."""
    from contextwindow import _reference as ref

    url_image = {"type": "image_url", "image_url": {"url": "http://x/a.png"}}
    source_image = {"type": "image", "source": {"type": "url", "url": "http://y/b.png"}}
    mixed = [{"role": "user", "content": [url_image, source_image]}]
    got = cw.validate(mixed, "openai")  # read as OpenAI's: the image_url decides
    assert [(v.index, v.code, v.call_id) for v in got] == [(0, "block_not_allowed", None)]
    assert got[0].detail == ('content[1] is an Anthropic block of type "image"; the Chat Completions API refuses it')
    got = cw.validate(mixed, "anthropic", format="anthropic")
    assert [(v.index, v.code, v.call_id) for v in got] == [(0, "block_not_allowed", None)]
    assert got[0].detail == 'content[0] is an OpenAI part of type "image_url"; the Messages API refuses it'
    # in tool results
    call = {"id": "x", "type": "function", "function": {"name": "a", "arguments": "{}"}}
    doc = {"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}}
    openai = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "x", "content": [{"type": "text", "text": "r"}, doc]},
    ]
    got = cw.validate(openai, "openai")
    assert [(v.index, v.code, v.call_id) for v in got] == [(2, "block_not_allowed", "x")]
    assert got[0].detail == (
        'content[1] of the result of tool call "x" is an Anthropic block of type "document"; '
        "the Chat Completions API refuses it"
    )
    anthropic = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [url_image]}]},
    ]
    got = cw.validate(anthropic, "anthropic")
    assert [(v.index, v.code, v.call_id) for v in got] == [(2, "block_not_allowed", "t")]
    # the pure-Python engine agrees
    for msgs, fmt in ((mixed, "openai"), (mixed, "anthropic"), (openai, "openai"), (anthropic, "anthropic")):
        want = [(v.index, v.code, v.call_id) for v in cw.validate(msgs, fmt, format=fmt)]
        assert [(v.index, v.code, v.call_id) for v in ref.validate(to_canonical(msgs, fmt), fmt)] == want
    # each provider's own blocks pass
    assert cw.validate([{"role": "user", "content": [url_image]}], "openai") == []
    assert cw.validate([{"role": "user", "content": [source_image, doc]}], "anthropic") == []


def test_an_image_url_part_read_as_opaque_outside_a_user_message() -> None:
    """fresh48 #5: in a list read as Anthropic's an ``image_url`` part is an opaque block;
    under OpenAI's rules it went unreported in an assistant message or a tool result,
    where a ``file`` or ``input_audio`` part was ``block_not_allowed``."""
    from contextwindow import _reference as ref

    img = {"type": "image_url", "image_url": {"url": "https://x/a.png"}}
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    use = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    m = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [img, audio]}]},
        {"role": "assistant", "content": [{"type": "text", "text": "x"}, img]},
    ]
    # read as Anthropic's (its pairing, OpenAI's violations of their own, aside)
    got = [v for v in cw.validate(m, "openai", format="anthropic") if v.code == "block_not_allowed"]
    assert [(v.index, v.code, v.call_id) for v in got] == [
        (2, "block_not_allowed", "t1"),
        (2, "block_not_allowed", "t1"),
        (3, "block_not_allowed", None),
    ]
    assert got[0].detail.startswith('content[0] of the result of tool call "t1" is a part of type "image_url";')
    assert got[2].detail.startswith('content[1] is a part of type "image_url" in an assistant message;')
    python = ref.validate(to_canonical(m, "anthropic"), "openai")
    assert [(v.index, v.code, v.call_id) for v in python if v.code == "block_not_allowed"] == [
        (v.index, v.code, v.call_id) for v in got
    ]
    # in a user message it is taken
    assert cw.validate([{"role": "user", "content": [img]}], "openai", format="anthropic") == []
