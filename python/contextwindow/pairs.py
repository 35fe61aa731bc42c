"""Tool-pair validation and repair (DESIGN.md section 4)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from . import _engine
from ._engine import nesting_errors
from ._jsontext import check_name_type, shown
from .adapters import from_canonical
from .errors import InvalidMessageError
from .estimate import DEFAULT_PROFILE, resolve_profile
from .messages import Message, TextPart, ToolResult
from .report import TrimResult, Violation

__all__ = ["repair_tool_pairs", "validate"]

_VIOLATIONS = msgspec.json.Decoder(list[Violation])


@nesting_errors()
def repair_tool_pairs(
    messages: Any,
    missing: Literal["stub", "drop"] = "stub",
    *,
    format: str | None = None,
    profile: str | None = DEFAULT_PROFILE,
) -> TrimResult[Any]:
    """Make every tool call and tool result a valid pair.

    Drops results whose call does not exist (a result answers the nearest preceding call
    with its id; one inside the assistant message of its own call answers that call when
    no result in another message does) and a call's second result; moves a result that
    is separated from its call back next to it (one in its call's own message too, and one
    before its call when its id is that of that call alone and of no other result); for a
    call without a result either inserts ``[tool result missing]`` right after the call's
    results (``missing="stub"``) or removes the call, and its message when nothing else
    remains (``"drop"``). In Anthropic shape results go into the next user message, ahead
    of its other content (a user message is created only when none follows); there
    ``"drop"`` falls back to a stub (reported as ``stub_inserted``) when removing the
    calls would empty the assistant message, since dropping it would put two user messages
    side by side. A message left without any block goes, unless (Anthropic) that would
    leave two messages of one role side by side, or an assistant message first or last:
    it then holds ``messages.RESULTS_REMOVED`` (``[Tool results] (removed by tool-pair
    repair)``, change ``placeholder_inserted``; found by a tester: an orphan result that
    was a user message's only block made the output fail ``validate``). A result moved
    out of a pinned message goes into a pinned message (a new tool or user message, or
    the user message that receives it): what the caller pinned stays pinned. Idempotent;
    a valid conversation comes back as the same objects.

    Args:
        messages: OpenAI dicts, Anthropic dicts or ``Message`` structs.
        missing: ``"stub"`` or ``"drop"``.
        format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.
        profile: profile for the report's token counts (``None``: ``conservative``).

    Returns:
        ``TrimResult`` with the repaired messages (caller's shape) and a ``FitReport``
        whose ``repairs`` lists every change.

    Raises:
        InvalidMessageError: a message is malformed.
        ValueError: ``missing`` is not ``"stub"`` or ``"drop"``.

    >>> r = repair_tool_pairs([{"role": "user", "content": "hi"},
    ...                        {"role": "tool", "tool_call_id": "x", "content": "orphan"}])
    >>> [m["role"] for m in r.messages], r.report.repairs[0].kind
    (['user'], 'orphan_result_dropped')
    """
    if missing not in ("stub", "drop"):
        raise ValueError(f"missing must be 'stub' or 'drop', got {shown(missing)}")
    prep = _engine.prepare(messages, format)
    out = _engine.native.repair_tool_pairs(prep.payload, prep.provider, missing, resolve_profile(profile))
    return _engine.apply(prep, out)


@nesting_errors()
def validate(messages: Any, provider: Literal["openai", "anthropic"], *, format: str | None = None) -> list[Violation]:
    """List every violation of the provider's message rules.

    OpenAI: every tool message answers a call of the assistant message before its run of
    tool messages; every call is answered before the next non-tool message. Anthropic:
    ``tool_result`` blocks sit in the user message right after their ``tool_use``, ahead
    of other content; the first message is a user message; roles alternate; a ``tool``
    message (OpenAI's, or a ``Message`` struct) is checked as the user message of
    ``tool_result`` blocks :func:`~contextwindow.adapters.message_to_anthropic` writes it
    as, and a ``developer`` one is ``role_not_allowed``. Content the
    provider refuses as empty is ``empty_content``: under Anthropic's rules a user or
    assistant message with no content (``[]`` or ``""``; the final assistant message, a
    prefill, may have none), and, one violation each, a text block that is empty or of
    whitespace only (Unicode ``White_Space``; a string content is one block), in any
    message, in a ``tool_result``'s content list, and in a leading system message
    written as a list of text blocks (a ``tool_result`` or system string is taken);
    under OpenAI's, an assistant message with ``"tool_calls": []``. Under Anthropic's
    rules a final assistant message (a prefill) whose last part is text ending in
    whitespace is ``trailing_whitespace`` (the API refuses it; OpenAI's takes it). Under
    OpenAI's rules an image whose ``detail`` is not ``"low"``, ``"high"`` or ``"auto"``
    (``"Low"``, ``""``), in a message or a tool result, is ``detail_not_allowed``, one
    violation each (counting prices such an image as ``"high"``), and an image anywhere but
    in a user message (an assistant, system, developer or tool message, or a tool result:
    "Image URLs are only allowed for messages with role 'user'", the API's HTTP 400) is
    ``image_not_allowed``, one violation each; no repair moves it. A ``file`` or
    ``input_audio`` part there is ``block_not_allowed`` under OpenAI's rules (the API
    takes them in user messages only; in a tool result, with its call id), and so is the
    other provider's block the reader kept as an unknown one: an Anthropic block (an
    ``image``, a ``document``, a server tool block) under OpenAI's rules, an OpenAI part
    (``image_url``, ``input_audio``, ``file``) under Anthropic's. Under Anthropic's
    rules a ``tool_use`` name not matching ``^[a-zA-Z0-9_-]{1,64}$`` is
    ``tool_name_not_allowed``, an id not matching ``^[a-zA-Z0-9_-]+$``
    ``call_id_not_allowed`` (``""``, Kimi's ``functions.read:0``), and an id an earlier
    assistant message already used ``reused_call_id`` ("tool_use ids must be unique";
    one inside a message is ``duplicate_call``); OpenAI's rules report neither. Under
    Anthropic's rules a block in a ``tool_result``'s content that belongs in a message
    only (``tool_use``, ``tool_result``, ``server_tool_use``, ``mcp_tool_use``, a type
    ending in ``_tool_result``, ``thinking``, ``redacted_thinking``: the API takes text,
    image, document and search_result blocks there) is ``block_not_allowed``, one each;
    no repair moves it. For
    ``Message`` structs, a message the provider's adapter cannot write
    (:func:`~contextwindow.adapters.from_canonical`) is ``unwritable_message``, beside
    its other violations (but for the placement of an OpenAI message's tool results,
    which they name), so an empty answer means the conversation can be sent; so is one
    of dicts read in the other provider's shape (an OpenAI call whose arguments are not a
    JSON object, checked against Anthropic's rules).
    ``provider`` decides the rules, ``format`` only how the messages are read.

    Args:
        messages: OpenAI dicts, Anthropic dicts or ``Message`` structs.
        provider: ``"openai"`` or ``"anthropic"``: whose rules to check.
        format: input shape, when auto-detection should be skipped.

    Returns:
        Violations in message order; empty when the conversation is valid.

    Raises:
        InvalidMessageError: a message is malformed (under Anthropic's rules, whatever
            ``format`` read the messages, structs and dicts alike: a system message
            holding a part other than text: ``message 0, field content[1]: must be a
            text block``; a system message after a leading one: ``message 2, field
            role: an Anthropic request takes one system prompt, its top-level
            "system"; this is a second``; an ``image`` or ``document`` block without
            a valid ``source``, which the Anthropic reader refuses in these words, also
            when the messages were read as OpenAI's: ``message 0, field
            content[0].source: must be an object``).
        TypeError: ``provider`` is not a string, or ``format`` is neither a string nor ``None``.
        ValueError: unknown provider or format.

    >>> validate([{"role": "tool", "tool_call_id": "x", "content": "r"}], "openai")[0].code
    'orphan_result'
    """
    check_name_type(provider, "provider", "'openai', 'anthropic'", none=False)
    if provider not in ("openai", "anthropic"):
        raise ValueError(f"provider must be 'openai' or 'anthropic', got {shown(provider)}")
    if format is None and isinstance(messages, (list, tuple)) and all(isinstance(m, Message) for m in messages):
        # structs have no shape: the provider's rules are checked, not the ones prepare
        # would infer (an OpenAI conversation with a user message holding a ToolResult
        # reads as Anthropic's, whose system rules then refused it under "openai")
        format = provider
    prep = _engine.prepare(messages, format)
    if provider == "anthropic":
        # the provider's rules, whatever shape the messages were read in: plain-text
        # dicts, read alike in both shapes, are detected as OpenAI's (empty19 #4: a
        # second system message passed, which format="anthropic" refused)
        _engine.anthropic_systems(prep.canonical)
        # an image or document block the Anthropic reader refuses for its source, read
        # as an opaque OpenAI block (detected: no source, no Anthropic shape)
        _engine.anthropic_sources(prep.canonical, prep.format)
    found = _VIOLATIONS.decode(_engine.native.validate(prep.payload, provider))
    if prep.format != provider:
        # structs, or dicts read in the other provider's shape: its reader took them, the
        # provider's writer may not (fresh30 #2: OpenAI calls with arguments that are not
        # a JSON object passed validate(dicts, "anthropic") and failed to convert)
        found = _unwritable(prep.canonical, provider, found)
    return found


#: The OpenAI writer's words for a tool result where Chat Completions has no place for it
#: (a tool message holding other than one, a result in another message): the placement
#: that the engine's pairing violations name and repair mends.
_PLACEMENT = frozenset(
    {"a tool message must hold one ToolResult and nothing else", "a ToolResult cannot be an OpenAI content part"}
)


def _unwritable(canonical: list[Message], provider: str, found: list[Violation]) -> list[Violation]:
    """``found`` with an ``unwritable_message`` violation for each ``Message`` struct the
    provider's adapter cannot write (:func:`~contextwindow.adapters.from_canonical`: an
    OpenAI tool message holding two results, an image with no source a provider takes,
    a custom tool call bound for Anthropic, tool call arguments that are not a JSON
    object bound for Anthropic), in message order; so passing ``validate`` means the
    conversation can be written and sent (fresh17b #5). A message that another
    violation names is reported too (small20: non-JSON arguments in a call without a
    result were not, and the repaired output, the stub added, was), but for the
    placement of its tool results (:data:`_PLACEMENT`), which that violation names:
    its parts are then checked without it. Dicts read in the provider's own shape were
    read by its adapter: they can be written."""
    named = {v.index for v in found}
    extra: list[Violation] = []
    for i, m in enumerate(canonical):
        exc = _write_error(m, provider)
        if exc is not None and i in named and exc.reason in _PLACEMENT:
            exc = _error_beside_placement(m, provider)
        if exc is not None:
            detail = exc.reason if exc.field is None else f"field {exc.field}: {exc.reason}"
            extra.append(Violation(index=i, code="unwritable_message", detail=detail))
    if not extra:
        return found
    return sorted(found + extra, key=lambda v: v.index)  # stable: the engine's first


def _write_error(m: Message, provider: str) -> InvalidMessageError | None:
    """Why the provider's adapter cannot write ``m``, or ``None`` when it can."""
    try:
        from_canonical(m, provider)  # type: ignore[arg-type]
    except InvalidMessageError as exc:
        return exc
    return None


def _error_beside_placement(m: Message, provider: str) -> InvalidMessageError | None:
    """What else keeps the OpenAI adapter from writing ``m``, whose tool results are
    misplaced (:data:`_PLACEMENT`): ``m`` with each result an empty text part (a message
    other than a tool message), then each result as a tool message of its own (where
    repair puts it), its field named as in ``m`` (``content[k].content`` for a result's
    content)."""
    results = [(k, p) for k, p in enumerate(m.content) if isinstance(p, ToolResult)]
    if m.role != "tool":
        rest = [TextPart(text="") if isinstance(p, ToolResult) else p for p in m.content]
        exc = _write_error(msgspec.structs.replace(m, content=rest), provider)
        if exc is not None:
            return exc
    for k, result in results:
        exc = _write_error(Message(role="tool", content=[result]), provider)
        if exc is not None:
            # a tool message's fields name its result's content
            field = f"content[{k}]" if exc.field is None else f"content[{k}].{exc.field}"
            return InvalidMessageError(exc.reason, field=field)
    return None
