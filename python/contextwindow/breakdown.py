"""Where the tokens of a conversation go: by role, by turn, by tool, largest messages and
tool schemas (issue 5 item 8; ``contextwindow inspect`` prints it).

Every number is an estimate in tokens from the same estimator as :func:`count_messages`
(DESIGN.md section 3), so the parts add up: the by-role rows, and likewise the by-turn
rows, sum to ``message_tokens``; the schema rows sum to ``tool_schema_tokens``; and
``total_tokens = message_tokens + tool_schema_tokens``. Each ``share`` is a fraction of
``total_tokens``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from . import _engine
from . import _reference as ref
from ._engine import nesting_errors
from ._jsontext import as_int, int_cause, shown
from .estimate import DEFAULT_PROFILE, count_messages, message_tokens, resolve_profile
from .messages import Message, Role, TextPart, ToolCall, ToolResult
from .turns import segment_turns

__all__ = [
    "Breakdown",
    "MessageTokens",
    "RoleTokens",
    "SchemaTokens",
    "ToolTokens",
    "TurnTokens",
    "token_breakdown",
]

#: Roles in the order the by-role table lists them.
ROLE_ORDER: tuple[Role, ...] = ("system", "developer", "user", "assistant", "tool")
#: Characters of text shown for each of the largest messages.
PREVIEW_CHARS = 60
#: Tool name shown for results whose call is not in the conversation.
UNKNOWN_TOOL = "(no matching call)"

_OPTS: dict[str, Any] = {"frozen": True, "kw_only": True}


class RoleTokens(msgspec.Struct, **_OPTS):
    """Tokens of the messages of one role.

    >>> RoleTokens(role="user", messages=2, tokens=40, share=0.5).tokens
    40
    """

    role: str
    messages: int
    tokens: int
    share: float


class TurnTokens(msgspec.Struct, **_OPTS):
    """Tokens of one turn (DESIGN.md section 4).

    Attributes:
        turn: 1-based turn number; 0 is the preamble (leading system/developer messages).
        start: index of the turn's first message.
        end: index one past its last message.

    >>> TurnTokens(turn=1, start=1, end=4, messages=3, tokens=90, share=0.25).end
    4
    """

    turn: int
    start: int
    end: int
    messages: int
    tokens: int
    share: float


class ToolTokens(msgspec.Struct, **_OPTS):
    """Tokens of one tool's calls and results.

    Attributes:
        tool: the tool's name (results whose call is missing: ``"(no matching call)"``).
        calls: number of tool calls.
        results: number of tool results.
        call_tokens: tokens of the call parts (name, argument text, per-call overhead),
            without the assistant message's own overhead.
        result_tokens: tokens of the result parts, without their message's overhead, and
            of the screenshots an OpenAI agent sends after them (a user message of media
            alone right after the results, which goes with the tool unit: its parts,
            without its message's overhead).
        tokens: ``call_tokens + result_tokens``.

    >>> ToolTokens(tool="bash", calls=1, results=1, call_tokens=40, result_tokens=200, tokens=240, share=0.6).tool
    'bash'
    """

    tool: str
    calls: int
    results: int
    call_tokens: int
    result_tokens: int
    tokens: int
    share: float


class MessageTokens(msgspec.Struct, **_OPTS):
    """One of the largest messages.

    Attributes:
        index: position in the conversation.
        turn: its turn number (0: preamble).
        tool: the tool of its costliest call or result (the first of equals), else ``None``.
        tools: every tool whose calls or results it holds, each once, in the order of its
            parts (``[]`` when none).
        preview: the start of its own text, else of that costliest call or result,
            whitespace collapsed, at most 60 characters.

    >>> MessageTokens(index=8, role="tool", turn=2, tokens=5847, share=0.9, tool="bash", preview="...").index
    8
    """

    index: int
    role: str
    turn: int
    tokens: int
    share: float
    tool: str | None = None
    preview: str = ""
    tools: list[str] = msgspec.field(default_factory=list)


class SchemaTokens(msgspec.Struct, **_OPTS):
    """Tokens of one tool definition of the request (JSON text + per-tool overhead).

    >>> SchemaTokens(tool="read_file", tokens=50, share=0.01).tool
    'read_file'
    """

    tool: str
    tokens: int
    share: float


class Breakdown(msgspec.Struct, **_OPTS):
    """Where a conversation's tokens go. Token counts are estimates; shares are fractions
    of ``total_tokens``.

    Attributes:
        format: ``"openai"``, ``"anthropic"`` or ``"canonical"``.
        profile: the estimation profile used.
        total_tokens: ``message_tokens + tool_schema_tokens``.
        message_tokens: tokens of all messages.
        tool_schema_tokens: tokens of the tool definitions.
        messages: number of messages.
        turns: number of turns (the preamble is not one).
        by_role: per role, in the order system, developer, user, assistant, tool.
        by_turn: the preamble (if any) then each turn, in order.
        by_tool: per tool name, most tokens first.
        largest: the largest messages, most tokens first (ties: earlier first).
        tool_schemas: per tool definition, in the request's order.

    >>> token_breakdown([{"role": "user", "content": "hi"}], profile="fim").total_tokens
    5
    """

    format: str
    profile: str
    total_tokens: int
    message_tokens: int
    tool_schema_tokens: int
    messages: int
    turns: int
    by_role: list[RoleTokens]
    by_turn: list[TurnTokens]
    by_tool: list[ToolTokens]
    largest: list[MessageTokens]
    tool_schemas: list[SchemaTokens]


def _schema_name(tool: Any, i: int) -> str:
    if isinstance(tool, Mapping):
        for key in ("function", "custom"):  # OpenAI's function and custom (free-form) tools
            fn = tool.get(key)
            if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
                return str(fn["name"])
        if isinstance(tool.get("name"), str):
            return str(tool["name"])
    return f"tools[{i}]"


def _text_of(parts: list[Any]) -> str:
    for p in parts:
        if isinstance(p, TextPart) and p.text.strip():
            return p.text
        if isinstance(p, ToolCall):
            return f"{p.name}({p.arguments})"
        if isinstance(p, ToolResult):
            inner = _text_of(p.content)
            if inner:
                return inner
    return ""


def _preview(m: Message, heaviest: Any = None) -> str:
    """The start of ``m``'s own text, else of its costliest tool part ``heaviest`` (fresh33
    #4: a 16,968-token message was shown by its 5-token error result), else of its first
    text anywhere."""
    own = next((p.text for p in m.content if isinstance(p, TextPart) and p.text.strip()), "")
    text = own or (_text_of([heaviest]) if heaviest is not None else "") or _text_of(m.content)
    refusal = m.extra.get("refusal") if isinstance(m.extra, dict) else None
    if not text and isinstance(refusal, str):  # an OpenAI assistant message that declined
        text = refusal
    text = " ".join(text.split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 3] + "..."


@nesting_errors()
def token_breakdown(
    messages: Any,
    *,
    tools: list[Any] | tuple[Any, ...] | None = None,
    profile: str | None = DEFAULT_PROFILE,
    format: str | None = None,
    top: int = 10,
) -> Breakdown:
    """Show where a conversation's tokens go: by role, turn and tool, the largest messages,
    and the request's tool schemas.

    Tool results are attributed to the tool of the nearest preceding call with their id
    (DESIGN.md section 4). A call's or result's tokens are its part's cost alone (the
    estimator is additive over parts: message = overhead + sum of parts), so the by-tool
    rows do not include message overheads or assistant text.

    Args:
        messages: OpenAI dicts, Anthropic dicts or ``Message`` structs.
        tools: the request's tool definitions (any provider's shape), or ``None``.
        profile: name of a built-in estimation profile (``None``: ``conservative``).
        format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.
        top: how many of the largest messages to list (``>= 0``).

    Returns:
        A :class:`Breakdown` (tokens; shares as fractions of the total).

    Raises:
        InvalidMessageError: a message is malformed (names its index and field).
        InvalidRequestError: a tool definition cannot be read.
        ValueError: unknown profile, or ``top`` is not an int ``>= 0`` (a string or a
            bool as much as a negative number; any integer :func:`operator.index` takes,
            ``numpy.int64`` say, is one).

    >>> b = token_breakdown([{"role": "user", "content": "abcdefgh"}, {"role": "assistant", "content": "ok"}],
    ...                     profile="fim")
    >>> [(r.role, r.tokens) for r in b.by_role]  # fim: 4 + 8 // 4 = 6; 4 + max(1, 2 // 4) = 5
    [('user', 6), ('assistant', 5)]
    """
    n = as_int(top)
    if n is None:  # a number option: ValueError, as the README's Errors rule says
        raise ValueError(f"top must be an int >= 0, got {shown(top)}") from int_cause(top)
    if n < 0:  # the words every int option uses (fresh18 F5 said "top must be >= 0")
        raise ValueError(f"top must be an int >= 0, got {n}")
    top = n
    profile = resolve_profile(profile)
    # the tools before the messages, as count_messages and the CLI's inspect (fresh13 N5);
    # the whole list first: a bad definition is named by its own index (tools[3]), not as
    # the tools[0] of a one-item list
    schema_total = count_messages([], profile, tools=tools) if tools else 0
    schema_rows = [(_schema_name(t, i), count_messages([], profile, tools=[t])) for i, t in enumerate(tools or [])]
    prep = _engine.prepare(messages, format)
    canonical = prep.canonical
    per_message = message_tokens(canonical, profile)
    seg = segment_turns(canonical)
    msg_total = sum(per_message)
    total = msg_total + schema_total

    def share(n: int) -> float:
        return n / total if total else 0.0

    # turn of each message (0 = preamble)
    turn_of = [0] * len(canonical)
    turn_rows: list[tuple[int, int, int]] = []
    if seg.preamble_end:
        turn_rows.append((0, 0, seg.preamble_end))
    for k, (start, end) in enumerate(seg.turns, start=1):
        turn_rows.append((k, start, end))
        for i in range(start, end):
            turn_of[i] = k

    # per-part costs of tool calls and results, in one estimator call
    empty_cost = {
        role: n
        for role, n in zip(ROLE_ORDER, message_tokens([Message(role=r) for r in ROLE_ORDER], profile), strict=True)
    }
    probes: list[Message] = []
    where: list[tuple[int, Any]] = []
    for i, m in enumerate(canonical):
        for p in m.content:
            if isinstance(p, (ToolCall, ToolResult)):
                probes.append(Message(role=m.role, content=[p]))
                where.append((i, p))
    probe_costs = message_tokens(probes, profile) if probes else []

    tool_rows: dict[str, list[int]] = {}  # name -> [calls, results, call_tokens, result_tokens]
    tools_of_message: dict[int, list[str]] = {}
    heaviest: dict[int, tuple[int, str, Any]] = {}  # message -> its costliest tool part
    last_call: dict[str, str] = {}  # call id -> tool name of the nearest preceding call
    result_tool: dict[int, str] = {}  # message -> the tool of its last result that answers a call
    for (i, p), cost in zip(where, probe_costs, strict=True):
        part_cost = cost - empty_cost[canonical[i].role]
        if isinstance(p, ToolCall):
            name = p.name
            last_call[p.id] = name
            row = tool_rows.setdefault(name, [0, 0, 0, 0])
            row[0] += 1
            row[2] += part_cost
        else:
            name = last_call.get(p.call_id, UNKNOWN_TOOL)
            if p.call_id in last_call:
                result_tool[i] = name
            row = tool_rows.setdefault(name, [0, 0, 0, 0])
            row[1] += 1
            row[3] += part_cost
        names = tools_of_message.setdefault(i, [])
        if name not in names:
            names.append(name)
        if i not in heaviest or part_cost > heaviest[i][0]:
            heaviest[i] = (part_cost, name, p)

    # a screenshot an OpenAI agent sends after the tool messages (a user message of media
    # alone right after results that answer a call, or after another such message) is its
    # tool's output, as an image inside an Anthropic tool_result is: it goes with the unit
    # (turns), and counts under the tool here (fresh52 #2: 6,654 tokens of screenshots read
    # as the user's, the tool's results 6 tokens)
    shot_tool: str | None = None
    for i, m in enumerate(canonical):
        if i in result_tool:
            shot_tool = result_tool[i]
        elif shot_tool is not None and ref.is_media_only(m):
            tool_rows[shot_tool][3] += per_message[i] - empty_cost["user"]
            tools_of_message.setdefault(i, []).append(shot_tool)
        else:
            shot_tool = None

    role_rows: dict[str, list[int]] = {}
    for m, n in zip(canonical, per_message, strict=True):
        row = role_rows.setdefault(m.role, [0, 0])
        row[0] += 1
        row[1] += n

    largest = sorted(range(len(canonical)), key=lambda i: (-per_message[i], i))[:top]
    return Breakdown(
        format=prep.format,
        profile=profile,
        total_tokens=total,
        message_tokens=msg_total,
        tool_schema_tokens=schema_total,
        messages=len(canonical),
        turns=len(seg.turns),
        by_role=[
            RoleTokens(role=r, messages=role_rows[r][0], tokens=role_rows[r][1], share=share(role_rows[r][1]))
            for r in ROLE_ORDER
            if r in role_rows
        ],
        by_turn=[
            TurnTokens(
                turn=k,
                start=s,
                end=e,
                messages=e - s,
                tokens=(n := sum(per_message[s:e])),
                share=share(n),
            )
            for k, s, e in turn_rows
        ],
        by_tool=[
            ToolTokens(
                tool=name,
                calls=row[0],
                results=row[1],
                call_tokens=row[2],
                result_tokens=row[3],
                tokens=row[2] + row[3],
                share=share(row[2] + row[3]),
            )
            for name, row in sorted(tool_rows.items(), key=lambda kv: (-(kv[1][2] + kv[1][3]), kv[0]))
        ],
        largest=[
            MessageTokens(
                index=i,
                role=canonical[i].role,
                turn=turn_of[i],
                tokens=per_message[i],
                share=share(per_message[i]),
                tool=heaviest[i][1] if i in heaviest else None,
                preview=_preview(canonical[i], heaviest[i][2] if i in heaviest else None),
                tools=tools_of_message.get(i, []),
            )
            for i in largest
        ],
        tool_schemas=[SchemaTokens(tool=name, tokens=n, share=share(n)) for name, n in schema_rows],
    )
