"""token_breakdown: where a conversation's tokens go, checked by hand (fim profile) and
against message_tokens / count_messages on the example session."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

import contextwindow as cw
from contextwindow.adapters import to_canonical
from contextwindow.breakdown import UNKNOWN_TOOL, token_breakdown
from contextwindow.errors import InvalidMessageError
from contextwindow.estimate import message_tokens
from contextwindow.io import load_conversation
from contextwindow.messages import Message, TextPart, ToolCall, ToolResult

from shared_data import corpus_files, ids, need

CORPUS_FILES = corpus_files()

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# fim: 4 tokens a message, ASCII text at floor(chars / 4) (at least 1), no per-call overhead
SMALL = [
    {"role": "system", "content": "be brief"},  # 4 + 8 // 4 = 6
    {"role": "user", "content": "list files please"},  # 4 + 17 // 4 = 8
    {
        "role": "assistant",
        "content": None,
        # 4 + "bash" 4 // 4 + '{"cmd":"ls"}' 12 // 4 = 4 + 1 + 3 = 8
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd":"ls"}'}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "a.txt b.txt c.txt d.txt"},  # 4 + 23 // 4 = 9
    {"role": "assistant", "content": "four files"},  # 4 + 10 // 4 = 6
    {"role": "user", "content": "thanks"},  # 4 + 6 // 4 = 5
]
TOOL = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}


def test_small_conversation_by_hand() -> None:
    before = copy.deepcopy(SMALL)
    b = token_breakdown(SMALL, tools=[TOOL], profile="fim", top=3)
    assert SMALL == before  # input not mutated
    schema = len(json.dumps(TOOL, separators=(",", ":"))) // 4  # fim: compact JSON text / 4, no overhead
    # messages: 6 + 8 + 8 + 9 + 6 + 5 = 42
    assert (b.message_tokens, b.tool_schema_tokens, b.total_tokens) == (42, schema, 42 + schema)
    assert (b.messages, b.turns, b.format, b.profile) == (6, 2, "openai", "fim")
    # user 8 + 5 = 13; assistant 8 + 6 = 14
    assert [(r.role, r.messages, r.tokens) for r in b.by_role] == [
        ("system", 1, 6),
        ("user", 2, 13),
        ("assistant", 2, 14),
        ("tool", 1, 9),
    ]
    # preamble [0, 1) 6; turn 1 [1, 5) 8 + 8 + 9 + 6 = 31; turn 2 [5, 6) 5
    assert [(t.turn, t.start, t.end, t.messages, t.tokens) for t in b.by_turn] == [
        (0, 0, 1, 1, 6),
        (1, 1, 5, 4, 31),
        (2, 5, 6, 1, 5),
    ]
    # the call part without its message's 4: 1 + 3 = 4; the result part: 5
    [bash] = b.by_tool
    assert (bash.tool, bash.calls, bash.results, bash.call_tokens, bash.result_tokens, bash.tokens) == (
        "bash",
        1,
        1,
        4,
        5,
        9,
    )
    assert bash.share == pytest.approx(9 / (42 + schema))
    # largest: 9 (index 3), then the two 8s in order (1, 2)
    assert [(m.index, m.tokens, m.turn, m.tool) for m in b.largest] == [
        (3, 9, 1, "bash"),
        (1, 8, 1, None),
        (2, 8, 1, "bash"),
    ]
    assert b.largest[0].preview == "a.txt b.txt c.txt d.txt"
    assert b.largest[2].preview == 'bash({"cmd":"ls"})'
    assert [(s.tool, s.tokens) for s in b.tool_schemas] == [("bash", schema)]
    assert sum(r.share for r in b.by_role) + sum(s.share for s in b.tool_schemas) == pytest.approx(1.0)


@pytest.mark.parametrize("name", ["agent_session.json", "agent_session_anthropic.json"])
def test_example_sessions_parts_add_up(name: str) -> None:
    src = json.loads((EXAMPLES / name).read_text())
    fmt = "anthropic" if "anthropic" in name else "openai"
    messages = src["messages"]
    if fmt == "anthropic":
        messages = [{"role": "system", "content": src["system"]}, *messages]
    per = message_tokens(messages, format=fmt)
    b = token_breakdown(messages, tools=src["tools"], format=fmt)
    tools = cw.count_messages([], tools=src["tools"], format=fmt)
    assert (b.message_tokens, b.tool_schema_tokens, b.total_tokens) == (sum(per), tools, sum(per) + tools)
    # per-role numbers = the sum of message_tokens over that role's messages
    roles = [m["role"] for m in messages]
    for r in b.by_role:
        assert r.tokens == sum(n for n, role in zip(per, roles, strict=True) if role == r.role)
        assert r.messages == roles.count(r.role)
    assert sum(r.tokens for r in b.by_role) == b.message_tokens
    # turns: the segmentation's ranges, covering every message once
    seg = cw.segment_turns(messages, format=fmt)
    assert [(t.start, t.end) for t in b.by_turn] == [(0, seg.preamble_end), *seg.turns]
    assert sum(t.tokens for t in b.by_turn) == b.message_tokens
    assert [t.tokens for t in b.by_turn] == [sum(per[s:e]) for s, e in [(0, seg.preamble_end), *seg.turns]]
    assert sum(s.tokens for s in b.tool_schemas) == tools
    assert [s.tool for s in b.tool_schemas] == ["read_file", "bash"]
    # three read_file calls and one bash call, each answered; bash holds the big build log
    assert [(t.tool, t.calls, t.results) for t in b.by_tool] == [("bash", 1, 1), ("read_file", 3, 3)]
    assert b.largest[0].tool == "bash" and b.largest[0].tokens == max(per)
    # tool parts never cost more than the messages that hold them
    tool_msgs = sum(n for n, m in zip(per, messages, strict=True) if m["role"] == "tool" or m.get("tool_calls"))
    if fmt == "openai":
        assert sum(t.tokens for t in b.by_tool) < tool_msgs


def test_result_without_a_call_and_canonical_input() -> None:
    msgs = [
        Message(role="user", content=[TextPart(text="hi")]),
        Message(role="assistant", content=[TextPart(text="ok")]),
    ]
    b = token_breakdown(msgs, profile="fim")
    assert b.format == "canonical" and b.by_tool == [] and b.tool_schemas == []
    orphan = [
        {"role": "user", "content": "x"},
        {"role": "tool", "tool_call_id": "nope", "content": "lost result"},
    ]
    b = token_breakdown(orphan, profile="fim", format="openai")
    # "lost result" 11 // 4 = 2
    assert [(t.tool, t.calls, t.results, t.result_tokens) for t in b.by_tool] == [(UNKNOWN_TOOL, 0, 1, 2)]


def test_bad_arguments() -> None:
    # the words every int option uses (fresh18 F5: "top must be >= 0, got -1")
    with pytest.raises(ValueError, match=r"^top must be an int >= 0, got -1$"):
        token_breakdown(SMALL, top=-1)
    # a number option: ValueError for a string too (README, Errors; fresh16a F3)
    with pytest.raises(ValueError, match="top must be an int >= 0, got '3'"):
        token_breakdown(SMALL, top="3")  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError, match="message 0"):
        token_breakdown([{"role": "wizard", "content": "x"}])
    assert token_breakdown([], profile="fim").total_tokens == 0
    assert token_breakdown(SMALL, top=0).largest == []


@pytest.mark.parametrize("path", need(CORPUS_FILES, "../shared/corpus"), ids=ids(CORPUS_FILES) or None)
def test_corpus_parts_add_up(path: Path) -> None:
    conv = load_conversation(path)
    per = message_tokens(conv.messages, format=conv.format)
    b = token_breakdown(conv.messages, tools=conv.tools, format=conv.format, top=len(per))
    assert b.total_tokens == cw.count_messages(conv.messages, format=conv.format, tools=conv.tools)
    assert sum(r.tokens for r in b.by_role) == sum(t.tokens for t in b.by_turn) == b.message_tokens == sum(per)
    assert sum(s.tokens for s in b.tool_schemas) == b.tool_schema_tokens
    assert sorted(m.index for m in b.largest) == list(range(len(per)))
    assert [t.end for t in b.by_turn[:-1]] == [t.start for t in b.by_turn[1:]]
    # every call and result part is counted under some tool, once
    canonical = to_canonical(conv.messages, conv.format)
    parts = [p for m in canonical for p in m.content]
    assert sum(t.calls for t in b.by_tool) == sum(isinstance(p, ToolCall) for p in parts)
    assert sum(t.results for t in b.by_tool) == sum(isinstance(p, ToolResult) for p in parts)


def test_tool_schemas_are_named_for_every_tool_shape() -> None:
    # found by a tester: an OpenAI custom tool showed as "tools[1]"
    tools = [
        {"type": "function", "function": {"name": "bash", "parameters": {}}},
        {"type": "custom", "custom": {"name": "apply_patch", "description": "a patch"}},
        {"name": "search", "input_schema": {}},
        {"type": "web_search"},
    ]
    b = cw.token_breakdown([{"role": "user", "content": "hi"}], tools=tools, profile="fim")
    assert [s.tool for s in b.tool_schemas] == ["bash", "apply_patch", "search", "tools[3]"]


def test_a_bad_tool_definition_is_named_before_a_bad_message() -> None:
    """fresh13 N5: token_breakdown named the message error first where count_messages,
    count_request, fit_request and the CLI (inspect included) name the tool error first."""
    msgs = [{"role": "wizard", "content": "x"}]
    tools = [{"type": "function", "function": 5}]
    want = "tools[0].function: must be an object, got a number"
    with pytest.raises(cw.InvalidRequestError) as counted:
        cw.count_messages(msgs, tools=tools)
    assert str(counted.value) == want
    with pytest.raises(cw.InvalidRequestError) as got:
        token_breakdown(msgs, tools=tools)
    assert str(got.value) == want
    # with good tools, the message is named as before
    with pytest.raises(InvalidMessageError) as bad_message:
        token_breakdown(msgs, tools=[{"type": "function", "function": {"name": "f"}}])
    assert str(bad_message.value) == 'message 0, field role: unknown role "wizard"'


def test_a_message_is_shown_by_its_costliest_tool_part() -> None:
    """fresh33 #4: a user message holding a 5-token ``bash`` error and a ``read_file``
    result of thousands of tokens was listed as ``tool="bash"`` with the error as its
    preview. ``tool`` and ``preview`` now come from its costliest call or result."""
    msgs = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "a", "name": "bash", "input": {}},
                {"type": "tool_use", "id": "b", "name": "read_file", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "ls: permission denied", "is_error": True},
                {"type": "tool_result", "tool_use_id": "b", "content": "line of the file\n" * 500},
            ],
        },
    ]
    big = cw.token_breakdown(msgs).largest[0]
    assert big.index == 2 and big.tools == ["bash", "read_file"]
    assert big.tool == "read_file" and big.preview.startswith("line of the file line of")
