"""OpenAI Chat Completions *custom* (free-form) tool calls on every path.

``{"id", "type": "custom", "custom": {"name", "input"}}`` is the free-form counterpart of a
function call: it is read as a :class:`ToolCall` whose ``arguments`` is the input text and
whose ``extra`` holds ``{"type": "custom"}`` (what writes it back in its shape). It counts
like a function call; an Anthropic ``tool_use`` cannot hold free text, so converting one
there is refused. Found by a tester: every path refused it as a function call without
``function``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import contextwindow as cw
from contextwindow import _engine
from contextwindow._native import count_dicts
from contextwindow.adapters import from_canonical, message_to_anthropic, to_canonical
from contextwindow.errors import InvalidMessageError
from contextwindow.messages import Message, ToolCall

CALL = {"id": "c1", "type": "custom", "custom": {"name": "code_exec", "input": "print(1)"}}
TESTER = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "1"},
]
# fim: 4 per message, text floor(ascii / 4) but at least 1, tool call overhead 0
# (_reference.PROFILES["fim"]); a tool call costs overhead + name + arguments:
#   user "hi":            4 + max(2 // 4, 1) = 5
#   assistant, one call:  4 + 0 + "code_exec" 9 // 4 = 2 + "print(1)" 8 // 4 = 2 = 8
#   tool "1":             4 + max(1 // 4, 1) = 5
TESTER_FIM = [5, 8, 5]


def body(messages: list[Any]) -> bytes:
    return json.dumps({"model": "m", "messages": messages}).encode()


def test_the_testers_example_counts_on_every_path() -> None:
    assert cw.message_tokens(TESTER, "fim") == TESTER_FIM
    assert cw.count_messages(TESTER, "fim") == sum(TESTER_FIM) == 18
    assert count_dicts(TESTER, None, "fim") == TESTER_FIM  # the native reader reads it itself
    _engine.FAST_READER = False
    try:
        assert cw.message_tokens(TESTER, "fim") == TESTER_FIM  # the Python adapters agree
    finally:
        _engine.FAST_READER = True
    assert cw.count_request(body(TESTER), profile="fim") == 18
    for profile in ("conservative", "cl100k", "tekken", "bytes4"):
        assert cw.count_request(body(TESTER), profile=profile) == cw.count_messages(TESTER, profile)


def test_a_custom_call_costs_what_the_same_function_call_costs() -> None:
    function = {"id": "c1", "type": "function", "function": {"name": "code_exec", "arguments": "print(1)"}}
    same = [TESTER[0], {**TESTER[1], "tool_calls": [function]}, TESTER[2]]
    for profile in ("conservative", "cl100k", "tekken", "fim", "bytes4"):
        assert cw.message_tokens(TESTER, profile) == cw.message_tokens(same, profile)


def test_validate_pairs_results_by_tool_call_id() -> None:
    assert cw.validate(TESTER, "openai") == []
    orphan = [TESTER[0], TESTER[1], {"role": "tool", "tool_call_id": "other", "content": "1"}]
    codes = [v.code for v in cw.validate(orphan, "openai")]
    assert codes == ["unanswered_call", "orphan_result"]


def test_round_trip_through_canonical() -> None:
    msgs = to_canonical(TESTER, "openai")
    assert msgs[1].content == [ToolCall(id="c1", name="code_exec", arguments="print(1)", extra={"type": "custom"})]
    assert [from_canonical(m, "openai") for m in msgs] == TESTER
    # other keys, at both levels, come back as they do for function calls
    odd = {"id": "c2", "type": "custom", "index": 0, "custom": {"name": "sh", "input": "", "format": {"type": "text"}}}
    m = to_canonical([{"role": "assistant", "tool_calls": [odd]}], "openai")[0]
    assert m.content == [
        ToolCall(
            id="c2",
            name="sh",
            arguments="",
            extra={"type": "custom", "index": 0, "custom": {"format": {"type": "text"}}},
        )
    ]
    assert from_canonical(m, "openai") == {"role": "assistant", "tool_calls": [odd]}


def test_trim_turns_keeps_and_drops_custom_calls_whole() -> None:
    msgs = [*TESTER, {"role": "assistant", "content": "done"}, {"role": "user", "content": "next one"}]
    # fim: 18 as above, + "done" 4 + 1 = 5, + "next one" 4 + 8 // 4 = 6 -> 29 in all
    assert cw.count_messages(msgs, "fim") == 29
    kept = cw.trim_turns(msgs, 29, profile="fim")
    assert kept.messages == msgs and all(a is b for a, b in zip(kept.messages, msgs, strict=True))
    trimmed = cw.trim_turns(msgs, 28, profile="fim", breadcrumb=False)
    assert trimmed.messages == [msgs[-1]]  # the first turn (call and result together) goes
    assert cw.count_messages(trimmed.messages, "fim") == 6


def test_fit_request_trims_and_rewrites_custom_calls_in_their_shape() -> None:
    msgs = [*TESTER, {"role": "assistant", "content": "done"}, {"role": "user", "content": "next one"}]
    raw = body(msgs)
    assert cw.count_request(raw, profile="fim") == cw.count_messages(msgs, "fim") == 29
    assert cw.fit_request(raw, budget=29, profile="fim") is raw
    out = json.loads(cw.fit_request(raw, budget=28, profile="fim", breadcrumb=False))
    assert out["messages"] == [msgs[-1]]
    # an assistant message the gateway writes anew (the repeated call id is removed) keeps
    # its custom call in its shape, extra keys included, as trim_turns does on dicts
    call = {**CALL, "x": 1}
    dup = [TESTER[0], {"role": "assistant", "content": "ok", "tool_calls": [call, call]}, TESTER[2]]
    out = json.loads(cw.fit_request(body(dup), budget=1000, profile="fim"))
    assert out["messages"][1]["tool_calls"] == [call]
    assert out["messages"] == cw.trim_turns(dup, 1000, profile="fim").messages


BAD = [
    ({"id": "c", "type": "custom"}, "tool_calls[0].custom", "must be an object with name and input"),
    (
        {"id": "c", "type": "custom", "custom": "print(1)"},
        "tool_calls[0].custom",
        "must be an object with name and input",
    ),
    ({"id": "c", "type": "custom", "custom": {"input": "x"}}, "tool_calls[0].custom.name", "is missing"),
    (
        {"id": "c", "type": "custom", "custom": {"name": 1, "input": "x"}},
        "tool_calls[0].custom.name",
        "must be a string",
    ),
    ({"id": "c", "type": "custom", "custom": {"name": "f"}}, "tool_calls[0].custom.input", "is missing"),
    (
        {"id": "c", "type": "custom", "custom": {"name": "f", "input": {}}},
        "tool_calls[0].custom.input",
        "must be a string",
    ),
    # a custom call spelled with a function object is not read as a function call
    ({"id": "c", "type": "custom", "function": {"name": "f", "arguments": "{}"}}, "tool_calls[0].custom", None),
    ({"id": "c", "type": "foo"}, "tool_calls[0].type", 'must be "function" or "custom"'),
    ({"id": "c", "type": "foo", "function": {"name": "f", "arguments": "{}"}}, "tool_calls[0].type", None),
    ({"id": "c", "type": 3, "function": {"name": "f", "arguments": "{}"}}, "tool_calls[0].type", None),
]


@pytest.mark.parametrize(("call", "field", "reason"), BAD)
def test_bad_shapes_name_the_field_on_every_path(call: dict[str, Any], field: str, reason: str | None) -> None:
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": None, "tool_calls": [call]}]
    checks = [
        lambda: cw.count_messages(msgs),
        lambda: cw.validate(msgs, "openai"),
        lambda: cw.trim_turns(msgs, 10),
        lambda: cw.count_request(body(msgs)),
        lambda: cw.fit_request(body(msgs), budget=10),
    ]
    errors = []
    for check in checks:
        with pytest.raises(InvalidMessageError) as err:
            check()
        assert (err.value.index, err.value.field) == (1, field)
        errors.append(str(err.value))
    assert len(set(errors)) == 1, errors  # the gateway words it as the adapters do
    if reason is not None:
        assert errors[0] == f"message 1, field {field}: {reason}"


def test_anthropic_conversion_is_refused() -> None:
    m = to_canonical(TESTER, "openai")[1]
    with pytest.raises(InvalidMessageError) as err:
        message_to_anthropic(m)
    assert err.value.field == "content[0]"
    assert "free-text input" in str(err.value)
    with pytest.raises(InvalidMessageError):
        from_canonical(m, "anthropic")
    # a function call with the same text is refused for its arguments, not its kind
    plain = Message(role="assistant", content=[ToolCall(id="c1", name="code_exec", arguments="print(1)")])
    with pytest.raises(InvalidMessageError) as err:
        message_to_anthropic(plain)
    assert err.value.field == "content[0].arguments"


def test_a_null_type_reads_as_a_function_call_on_every_path() -> None:
    # a missing type always read as "function"; null now does too (stream accumulators
    # can leave it null), and it is written back as it came
    call = {"id": "c1", "type": None, "function": {"name": "f", "arguments": "{}"}}
    msgs = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "1"},
    ]
    plain = [msgs[0], {**msgs[1], "tool_calls": [{**call, "type": "function"}]}, msgs[2]]
    want = cw.count_messages(plain, "fim")
    assert cw.count_messages(msgs, "fim") == want
    assert cw.count_request(json.dumps({"messages": msgs}).encode(), profile="fim") == want
    assert cw.validate(msgs, "openai") == []
    assert from_canonical(to_canonical(msgs, "openai")[1], "openai") == msgs[1]
