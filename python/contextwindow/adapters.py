"""Provider adapters: OpenAI chat and Anthropic Messages dicts <-> canonical :class:`Message`.

One message at a time, lossless: ``message_to_openai(openai_to_message(d, i)) == d`` for every
message OpenAI accepts (and every message the adapter accepts at all), likewise for Anthropic.
Keys the canonical model has no field for travel in ``extra`` and come back verbatim; how
``content`` was spelled (string, list, null, missing) travels in ``content_kind``.

Bad input raises :class:`~contextwindow.errors.InvalidMessageError` naming the message index
and the dotted field; never ``KeyError``, ``TypeError`` or ``AttributeError``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NoReturn

import msgspec

from ._jsontext import (
    ENCODER,
    KeyClash,
    check_name_type,
    clean_str,
    clean_value,
    field_path,
    has_odd_keys,
    json_fault,
    loads_keeping_numbers,
    quote,
    shown,
)
from .errors import InvalidMessageError
from .messages import (
    ContentKind,
    ImagePart,
    Message,
    OpaquePart,
    Part,
    TextPart,
    ToolCall,
    ToolResult,
)

__all__ = [
    "Format",
    "anthropic_to_message",
    "detect_format",
    "from_canonical",
    "message_to_anthropic",
    "message_to_openai",
    "openai_to_message",
    "to_canonical",
]

Format = Literal["openai", "anthropic", "canonical"]

OPENAI_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
# Roles only OpenAI's shape has: a message with one makes detect_format say "openai" (the
# "function" role of the deprecated function-calling form too, which the adapter then
# refuses in its words, _FUNCTION_ROLE)
OPENAI_ONLY_ROLES = frozenset({"tool", "developer", "function"})
ANTHROPIC_ROLES = frozenset({"system", "user", "assistant"})
# Part types only one provider uses; they decide detect_format.
_OPENAI_PART_TYPES = frozenset({"image_url", "input_audio"})
_FUNCTION_CALL = "the deprecated function-calling form is not read; send tool_calls"
# its result half, a "function" message (fresh18 F5: it got `unknown role "function"`)
_FUNCTION_ROLE = 'the deprecated function-calling form is not read; send a "tool" message'
_CUSTOM_TO_ANTHROPIC = "an OpenAI custom tool call has free-text input; an Anthropic tool_use takes an object input"
# tool_calls on a tool message: its one part is the result, so they would go uncounted
# (on a user, system or developer message they are read as misplaced calls, which validate
# reports as call_outside_assistant: fresh49 #2)
_CALLS_ON_TOOL = "a tool message holds a tool result, not tool calls; they would go uncounted"


def _no_calls(calls: Any) -> bool:
    """A ``tool_calls`` value holding no call: null or ``[]``, kept in ``extra`` verbatim."""
    return calls is None or (isinstance(calls, list) and not calls)


def _holds_calls(calls: Any) -> bool:
    """A ``tool_calls`` value that marks a list as OpenAI's: a list of one or more. Any
    other value decides nothing, and the reader of the shape the rest decides names it:
    ``must be a list or null`` (OpenAI) or OpenAI's form in an Anthropic message (fresh54
    #4: ``()``, ``{}`` or ``""`` made an Anthropic list OpenAI's, and the error blamed its
    ``tool_use`` block; Rust ``reader::holds_calls``, ``gateway::holds_calls``)."""
    return isinstance(calls, list) and bool(calls)


# OpenAI's call keys on an Anthropic message: not read, so their payload would go uncounted
_OPENAI_CALLS = "OpenAI's tool-calling form is not read in an Anthropic message; send tool_use blocks"
_SYSTEM_BLOCK = "must be a text block"  # a system (top-level or message) holds text blocks only
_CALL_TYPE = 'must be "function" or "custom"'  # the two Chat Completions tool call types
#: Block types only Anthropic's Messages API has (with ``*_tool_result``; Rust
#: ``model::anthropic_only_block``): a list of dicts holding one is Anthropic's (fresh47 #1:
#: a conversation whose only such blocks were Claude's web search was read as OpenAI's).
_ANTHROPIC_BLOCK_TYPES = frozenset(
    {
        "tool_use",
        "tool_result",
        "server_tool_use",
        "mcp_tool_use",
        "thinking",
        "redacted_thinking",
        "document",
        "search_result",
        "container_upload",
    }
)
_ABSENT: Any = object()  # "leave the key out"
_DATA_URL = re.compile(r"data:([^;,]+);base64,(.*)", re.DOTALL)


# --------------------------------------------------------------------------- shared helpers


def _fail(reason: str, index: int | None, field: str | None) -> NoReturn:
    raise InvalidMessageError(reason, index=index, field=field)


def _rest(d: Mapping[str, Any], skip: Sequence[str]) -> dict[str, Any] | None:
    """The keys of ``d`` not in ``skip``, or ``None`` when there are none."""
    rest = {k: v for k, v in d.items() if k not in skip}
    return rest or None


def _str(d: Mapping[str, Any], key: str, index: int | None, field: str) -> str:
    value = d.get(key, _ABSENT)
    if not isinstance(value, str):
        _fail("is missing" if value is _ABSENT else "must be a string", index, field)
    return _plain(value)


def _check_refusal(d: Mapping[str, Any], index: int) -> None:
    """Refuse a ``refusal`` that is neither a string nor null: its text is counted (an
    OpenAI assistant message that declined; the estimator reads it on any message), and
    another value was read as none, silently (fresh16a F5). Checked after ``name`` in
    OpenAI messages, after the call keys in Anthropic ones, as the gateway does."""
    refusal = d.get("refusal")
    if refusal is not None and not isinstance(refusal, str):
        _fail("must be a string", index, "refusal")


def _unknown_role(role: str) -> str:
    """Why a role is refused: ``unknown role "wizard"``, the name written as a JSON string
    on one line (:func:`~contextwindow._jsontext.quote`), as the gateway (``count_request``)
    writes it, so the three paths say the same (fresh8 N7, fresh9 B5)."""
    return f"unknown role {quote(role)}"


def _plain(s: str) -> str:
    """A ``str`` subclass (``numpy.str_`` from pandas, ...) as a plain ``str``."""
    return s if type(s) is str else str.__str__(s)


def _typed(p: object, index: int, field: str) -> tuple[Mapping[str, Any], str]:
    """Check that a part is an object with a string ``type``; return both."""
    if not isinstance(p, Mapping):
        _fail("must be an object", index, field)
    return p, _str(p, "type", index, f"{field}.type")


def _merge(out: dict[str, Any], extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """Add ``extra`` to ``out`` without overriding what the adapter wrote."""
    for k, v in (extra or {}).items():
        out.setdefault(k, v)
    return out


def _as_dict(p: Mapping[str, Any]) -> dict[str, Any]:
    return p if isinstance(p, dict) else dict(p)


def _content(
    d: Mapping[str, Any],
    index: int,
    field: str,
    parse: Callable[[object, int, str], Any],
    *,
    nullable: bool,
) -> tuple[list[Any], ContentKind]:
    """Parse ``d["content"]`` into parts and the way it was spelled."""
    value = d.get("content", _ABSENT)
    if isinstance(value, str):
        return [TextPart(text=_plain(value))], "text"
    if isinstance(value, list):
        return [parse(p, index, f"{field}[{j}]") for j, p in enumerate(value)], "parts"
    if nullable and value is _ABSENT:
        return [], "absent"
    if nullable and value is None:
        return [], "null"
    if value is _ABSENT:
        _fail("is missing", index, field)
    _fail("must be a string or a list of blocks", index, field)


def _emit(
    kind: ContentKind | None,
    parts: Sequence[Part],
    convert: Callable[[Any, int], Any],
    empty: Any,
) -> Any:
    """Spell ``parts`` back as ``kind`` said; ``empty`` is the default for no parts."""
    if not parts:
        spelled = {"null": None, "absent": _ABSENT, "text": "", "parts": []}
        return spelled[kind] if kind is not None else empty
    if kind in ("text", None) and len(parts) == 1:
        only = parts[0]
        if isinstance(only, TextPart) and only.extra is None:
            return only.text
    return [convert(p, j) for j, p in enumerate(parts)]


def _text_out(p: TextPart) -> dict[str, Any]:
    return _merge({"type": "text", "text": p.text}, p.extra)


# --------------------------------------------------------------------------------- OpenAI


def _openai_part(part: object, index: int, field: str) -> TextPart | ImagePart | OpaquePart:
    p, ptype = _typed(part, index, field)
    if ptype == "text":
        return TextPart(text=_str(p, "text", index, f"{field}.text"), extra=_rest(p, ("type", "text")))
    if ptype == "image_url":
        img = p.get("image_url")
        if not isinstance(img, Mapping):
            _fail("must be an object with a url", index, f"{field}.image_url")
        url = _str(img, "url", index, f"{field}.image_url.url")
        detail = img.get("detail")
        if detail is not None and not isinstance(detail, str):
            # it decides the image's cost: read as no detail, it went on uncounted (fresh16a F5)
            _fail("must be a string", index, f"{field}.image_url.detail")
        extra = _rest(p, ("type", "image_url")) or {}
        inner = _rest(img, ("url", "detail") if detail is not None else ("url",))
        if inner:
            extra["image_url"] = inner
        return ImagePart(source=url, detail=detail, extra=extra or None)
    if ptype in ("tool_use", "tool_result"):
        # Kept as an opaque block it would never be paired: the caller meant Anthropic.
        # fresh47 #3: "pass format='anthropic'" alone sent the caller of a mixed list in a
        # circle (read as Anthropic's, its tool message is refused in turn)
        _fail(
            f"{quote(ptype)} is an Anthropic block in a list read as OpenAI's (one list cannot mix the two"
            " shapes); pass format='anthropic' for an Anthropic list",
            index,
            f"{field}.type",
        )
    if ptype == "file":
        _check_file(p, index, field)
    return OpaquePart(type=ptype, raw=_as_dict(p))


#: The keys of an OpenAI ``file`` part's ``file`` object, each a string when given.
_FILE_KEYS = ("file_id", "file_data", "filename")


def _check_file(p: Mapping[str, Any], index: int, field: str) -> None:
    """Refuse an OpenAI ``file`` part whose ``file`` is not an object, or one of whose
    ``file_id``, ``file_data`` and ``filename`` is neither a string nor null: a ``file_id``
    without ``file_data`` is priced as a document (3,000 tokens), and ``{"file_id": 5}``
    or ``"file": "x"`` was counted as a few tokens of JSON, silently (fresh45 #5). The
    part is counted by its JSON text, as any block the adapters do not model."""
    fault = file_fault(p)
    if fault is not None:
        _fail(fault[1], index, f"{field}.{fault[0]}")


def file_fault(p: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first fault of an OpenAI ``file`` part ``p`` as ``(field below the part,
    reason)``, or ``None`` (:func:`_check_file`'s rule; a ``Message`` struct's
    ``OpaquePart`` of type ``file`` is checked by it too).

    >>> file_fault({"type": "file", "file": {"file_id": 5}})
    ('file.file_id', 'must be a string')
    """
    file = p.get("file")
    if not isinstance(file, Mapping):
        return "file", "must be an object"
    for key in _FILE_KEYS:
        value = file.get(key)
        if value is not None and not isinstance(value, str):
            return f"file.{key}", "must be a string"
    return None


def _openai_call(tc: object, index: int, field: str) -> ToolCall:
    if not isinstance(tc, Mapping):
        _fail("must be an object", index, field)
    call_id = _str(tc, "id", index, f"{field}.id")
    kind = tc.get("type", _ABSENT)
    if kind is _ABSENT or kind is None or kind == "function":  # null reads as missing
        key, text = "function", "arguments"
    elif kind == "custom":  # a free-form call: its input is text, not JSON
        key, text = "custom", "input"
    else:
        _fail(_CALL_TYPE, index, f"{field}.type")
    body = tc.get(key)
    if not isinstance(body, Mapping):
        _fail(f"must be an object with name and {text}", index, f"{field}.{key}")
    name = _str(body, "name", index, f"{field}.{key}.name")
    arguments = _str(body, text, index, f"{field}.{key}.{text}")
    body_extra = _rest(body, ("name", text))
    if body_extra is None and kind == "function" and len(tc) == 3:
        return ToolCall(id=call_id, name=name, arguments=arguments)
    # Not the standard function shape: keep every other key verbatim ({} records a missing
    # "type"; {"type": "custom"} is what writes a custom call back as one).
    extra = {k: v for k, v in tc.items() if k not in ("id", key)}
    if body_extra:
        extra[key] = body_extra
    return ToolCall(id=call_id, name=name, arguments=arguments, extra=extra)


def openai_to_message(d: Mapping[str, Any], index: int = 0) -> Message:
    """Convert one OpenAI chat message to a canonical :class:`Message`.

    Args:
        d: the message dict (``role``, ``content``, ``tool_calls``, ``tool_call_id`` ...).
        index: its position in the conversation, used in error messages.

    Returns:
        The canonical message; assistant ``tool_calls`` become :class:`ToolCall` parts after
        the content parts, a ``tool`` message holds one :class:`ToolResult`. A custom
        (free-form) call ``{"id", "type": "custom", "custom": {"name", "input"}}`` becomes
        a :class:`ToolCall` whose ``arguments`` is the ``input`` text and whose ``extra``
        holds ``{"type": "custom"}``, which :func:`message_to_openai` writes back as one.

    Raises:
        InvalidMessageError: the message does not have an OpenAI shape (e.g. a
            ``system``, ``developer``, ``user`` or ``tool`` message without content:
            ``content: is missing``, or with ``content: null``: ``content: must be a
            string or a list of blocks``; the Chat Completions API lets only an assistant
            message omit it; a tool call whose ``type`` is neither ``function`` nor
            ``custom``: ``tool_calls[0].type``; a custom call without an object
            ``custom`` holding string ``name`` and ``input``: ``tool_calls[0].custom``;
            a ``name`` that is neither a string nor null: ``name: must be a string``; so
            is a ``refusal``, and an image part's ``detail``:
            ``content[0].image_url.detail: must be a string``; the deprecated
            function-calling form: ``function_call: the deprecated function-calling form
            is not read; send tool_calls``, and for a ``function`` role ``role: ...; send a
            "tool" message``; ``tool_calls`` but null or ``[]`` on a tool message:
            ``tool_calls: a tool message holds a tool result, not tool calls; they would
            go uncounted``). Tool calls on a user, system or developer message are read as
            calls (misplaced: ``validate`` reports ``call_outside_assistant``).

    >>> m = openai_to_message({"role": "tool", "tool_call_id": "c1", "content": "42"})
    >>> m.content[0].call_id, m.content[0].content, m.content[0].content_kind
    ('c1', [TextPart(text='42', extra=None)], 'text')
    """
    if not isinstance(d, Mapping):
        _fail("must be an object", index, None)
    role = _str(d, "role", index, "role")
    if role not in OPENAI_ROLES:
        _fail(_FUNCTION_ROLE if role == "function" else _unknown_role(role), index, "role")
    # Chat Completions: only an assistant message may omit content or set it null
    parts, kind = _content(d, index, "content", _openai_part, nullable=role == "assistant")
    if d.get("function_call") is not None:
        # the deprecated form of tool_calls (with the "function" role, refused above in
        # the same words): its arguments would go uncounted
        _fail(_FUNCTION_CALL, index, "function_call")
    name = d.get("name")
    if name is not None and not isinstance(name, str):
        # read as no name, it went on as an unknown key (the API takes a string)
        _fail("must be a string", index, "name")
    name = _plain(name) if name is not None else None
    _check_refusal(d, index)
    skip = ["role", "content"] + (["name"] if name is not None else [])
    if role == "tool":
        call_id = _str(d, "tool_call_id", index, "tool_call_id")
        result = ToolResult(call_id=call_id, content=parts, content_kind=kind)
        if not _no_calls(d.get("tool_calls")):
            _fail(_CALLS_ON_TOOL, index, "tool_calls")
        extra = _rest(d, [*skip, "tool_call_id"])
        return Message(role="tool", content=[result], name=name, extra=extra)
    calls = d.get("tool_calls")
    if calls is not None:  # on a user, system or developer message too: misplaced calls
        if not isinstance(calls, list):
            _fail("must be a list or null", index, "tool_calls")
        if calls:  # null and [] stay in extra, verbatim
            parts = parts + [_openai_call(tc, index, f"tool_calls[{j}]") for j, tc in enumerate(calls)]
            skip.append("tool_calls")
    return Message(role=role, content=parts, name=name, extra=_rest(d, skip), content_kind=kind)  # type: ignore[arg-type]


def _openai_url(source: Any) -> str:
    if isinstance(source, str):
        return source
    if isinstance(source, Mapping):
        if source.get("type") == "url" and isinstance(source.get("url"), str):
            return str(source["url"])
        media, data = source.get("media_type"), source.get("data")
        if source.get("type") == "base64" and isinstance(media, str) and isinstance(data, str):
            return f"data:{media};base64,{data}"
    _fail("image has no source an OpenAI image_url can hold", None, "content")


def _openai_part_out(p: Part, j: int) -> Any:
    if isinstance(p, TextPart):
        return _text_out(p)
    if isinstance(p, ImagePart):
        extra = dict(p.extra or {})
        inner = extra.pop("image_url", None)
        img: dict[str, Any] = {"url": _openai_url(p.source)}
        if p.detail is not None:
            img["detail"] = p.detail
        if isinstance(inner, Mapping):
            _merge(img, inner)
        return _merge({"type": "image_url", "image_url": img}, extra)
    if isinstance(p, OpaquePart):
        if p.type in ("tool_use", "tool_result"):
            # what openai_to_message refuses, not written for the dict path to refuse
            # (fresh46 #1: an opaque tool_use in a ToolResult's content passed every
            # struct entry and came out as a tool message no entry takes)
            _fail(
                f"{quote(p.type)} is an Anthropic block, which an OpenAI message cannot hold",
                None,
                f"content[{j}].type",
            )
        return p.raw
    _fail(f"a {type(p).__name__} cannot be an OpenAI content part", None, f"content[{j}]")


def _is_custom(tc: ToolCall) -> bool:
    """Whether ``tc`` was read from an OpenAI custom (free-form) tool call."""
    return tc.extra is not None and tc.extra.get("type") == "custom"


def _openai_call_out(tc: ToolCall) -> dict[str, Any]:
    key, text = ("custom", "input") if _is_custom(tc) else ("function", "arguments")
    body = {"name": tc.name, text: tc.arguments}
    if tc.extra is None:
        return {"id": tc.id, "type": "function", "function": body}
    out: dict[str, Any] = {"id": tc.id}
    for k, v in tc.extra.items():
        if k == key and isinstance(v, Mapping):
            _merge(body, v)
        else:
            out.setdefault(k, v)
    out[key] = body
    return out


def _required(kind: ContentKind | None) -> ContentKind | None:
    """A content spelling for a role whose content the Chat Completions API requires:
    null or missing (from an Anthropic ``tool_result`` without content, say) becomes the
    default, an empty string."""
    return None if kind in ("null", "absent") else kind


def _checked(m: Message) -> None:
    """Refuse a struct the engine's entry points refuse (a field of the wrong type, an
    unknown role, ``content`` that is not a list of parts, tool call arguments that are
    not a string), in the same words, naming the field only (fresh19b #3: the writers
    raised ``AttributeError`` or wrote such a message out)."""
    from . import _engine  # _engine imports this module

    if not isinstance(m, Message):
        # fresh44 #3: a dict or a list raised AttributeError from the struct check
        raise TypeError(f"m must be a Message, got {type(m).__name__}")
    try:
        _engine._check_canonical([m])
    except InvalidMessageError as exc:
        raise InvalidMessageError(exc.reason, field=exc.field) from None


def message_to_openai(m: Message) -> dict[str, Any]:
    """Convert a canonical :class:`Message` to an OpenAI chat message dict.

    Args:
        m: the message; ``content_kind`` and ``extra`` restore the original spelling.

    Returns:
        A new dict. Messages built without ``content_kind`` get the usual spelling: a
        string for a single text part, ``null`` content next to an assistant's tool
        calls. Content is never null or missing but in an assistant message (what
        :func:`openai_to_message` reads back): an empty one is ``""`` there. A
        :class:`ToolCall` whose ``extra`` has ``"type": "custom"`` is written as a custom
        call, ``{"custom": {"name", "input": arguments}}``.

    Raises:
        InvalidMessageError: the message cannot be expressed in OpenAI shape (a tool message
            without exactly one :class:`ToolResult`, a result outside a tool message, an
            :class:`OpaquePart` of type ``tool_use`` or ``tool_result``, an Anthropic block
            that ``openai_to_message`` refuses too), or
            is a struct the engine refuses (a field of the wrong type, an unknown role),
            named by its field as ``count_messages`` names it.
        TypeError: ``m`` is not a :class:`Message` (a provider dict, a list).

    >>> d = message_to_openai(
    ...     Message(role="assistant", content=[ToolCall(id="c1", name="f", arguments="{}")])
    ... )
    >>> d["content"], d["tool_calls"][0]["function"]
    (None, {'name': 'f', 'arguments': '{}'})
    """
    _checked(m)
    return _to_openai(m)


def _to_openai(m: Message) -> dict[str, Any]:
    """:func:`message_to_openai` of a struct known to be well formed (the engine's own
    output, decoded from its JSON), without the struct check."""
    out: dict[str, Any] = {"role": m.role}
    if m.role == "tool":
        result = m.content[0] if len(m.content) == 1 else None
        if not isinstance(result, ToolResult):
            _fail("a tool message must hold one ToolResult and nothing else", None, "content")
        out["tool_call_id"] = result.call_id
        content = _emit(_required(result.content_kind), result.content, _openai_part_out, "")
    else:
        calls = [p for p in m.content if isinstance(p, ToolCall)]
        body = [p for p in m.content if not isinstance(p, ToolCall)]
        if m.role == "assistant":
            content = _emit(m.content_kind, body, _openai_part_out, None if calls else "")
        else:
            content = _emit(_required(m.content_kind), body, _openai_part_out, "")
        if calls:
            out["tool_calls"] = [_openai_call_out(tc) for tc in calls]
    if content is not _ABSENT:
        out["content"] = content
    if m.name is not None:
        out["name"] = m.name
    return _merge(out, m.extra)


# ------------------------------------------------------------------------------ Anthropic


def _encode_input(value: Any, index: int, field: str) -> str:
    found = json_fault(value)  # bytes msgspec writes as base64 text, a set as an array (fresh17b #3)
    if found is not None:
        _fail(f"holds a value JSON cannot represent ({found[1]})", index, field_path(found[0], field))
    try:
        try:
            text = ENCODER.encode(value).decode()
        except UnicodeEncodeError:  # lone surrogates: U+FFFD, never a crash
            return ENCODER.encode(clean_value(value)).decode()
        if has_odd_keys(value):  # {1: "a", "1": "b"} is written with the key "1" twice
            clean_value(value)
        return text
    except KeyClash as clash:  # two keys lone surrogates make one: the gateway's words
        _fail(clash.reason(), index, field_path(clash.path, field))
    except (TypeError, ValueError, msgspec.MsgspecError) as exc:
        # the words of every other place on the dict path (_engine._encode_located; fresh9 D4)
        _fail(f"holds a value JSON cannot represent ({exc})", index, field)


# The string fields the Messages API requires in an image or document ``source``, by its
# ``type`` (a string the source must hold); a source of any other type is taken as it is
# (types the API may add, and a document's ``text`` and ``content``).
_SOURCE_FIELDS = {"base64": ("media_type", "data"), "url": ("url",), "file": ("file_id",)}


def _source(b: Mapping[str, Any], index: int | None, field: str) -> Mapping[str, Any]:
    """The ``source`` of an image or document block, checked against its ``type``: an
    object whose ``type`` is a string (``{}`` was priced as an image of unknown size)."""
    source = b.get("source")
    if not isinstance(source, Mapping):
        _fail("must be an object", index, f"{field}.source")
    stype = _str(source, "type", index, f"{field}.source.type")
    for key in _SOURCE_FIELDS.get(stype, ()):
        _str(source, key, index, f"{field}.source.{key}")
    return source


def _anthropic_block(block: object, index: int, field: str, *, nested: bool = False) -> Any:
    b, btype = _typed(block, index, field)
    if btype == "text":
        return TextPart(text=_str(b, "text", index, f"{field}.text"), extra=_rest(b, ("type", "text")))
    if btype == "image":
        return ImagePart(source=_source(b, index, field), extra=_rest(b, ("type", "source")))
    if btype == "document":  # counted by its JSON text, as any block we do not model
        _source(b, index, field)
        return OpaquePart(type=btype, raw=_as_dict(b))
    if btype == "tool_use" and not nested:
        call_id = _str(b, "id", index, f"{field}.id")
        name = _str(b, "name", index, f"{field}.name")
        if "input" not in b:
            _fail("is missing", index, f"{field}.input")
        if not isinstance(b["input"], Mapping):  # the Messages API takes an object only
            _fail("must be an object", index, f"{field}.input")
        arguments = _encode_input(b["input"], index, f"{field}.input")
        extra = _rest(b, ("type", "id", "name", "input"))
        return ToolCall(id=call_id, name=name, arguments=arguments, extra=extra)
    if btype == "tool_result" and not nested:
        call_id = _str(b, "tool_use_id", index, f"{field}.tool_use_id")
        parts, kind = _content(b, index, f"{field}.content", _anthropic_nested, nullable=True)
        flag = b.get("is_error")
        if flag is not None and not isinstance(flag, bool):
            # "yes" was read as false, silently (fresh16a F5); null stays, as missing
            _fail("must be a bool", index, f"{field}.is_error")
        is_error = flag is True
        # An explicit "is_error": false (or null) stays in extra, verbatim.
        skip = ("type", "tool_use_id", "content") + (("is_error",) if is_error else ())
        return ToolResult(
            call_id=call_id,
            content=parts,
            is_error=is_error,
            extra=_rest(b, skip),
            content_kind=kind,
        )
    return OpaquePart(type=btype, raw=_as_dict(b))


def _anthropic_nested(b: object, index: int, field: str) -> Any:
    return _anthropic_block(b, index, field, nested=True)


def _anthropic_system_block(b: object, index: int, field: str) -> Any:
    """A block of a system message (a top-level ``system``): the Messages API takes text
    blocks only there (its ``system`` is a string or a list of text blocks)."""
    _, btype = _typed(b, index, field)
    if btype != "text":
        _fail(_SYSTEM_BLOCK, index, field)
    return _anthropic_block(b, index, field)


def anthropic_to_message(d: Mapping[str, Any], index: int = 0) -> Message:
    """Convert one Anthropic Messages API message to a canonical :class:`Message`.

    Args:
        d: the message dict (``role`` user or assistant, ``content`` string or blocks); role
            ``system`` is accepted for the leading message made from a top-level ``system``.
        index: its position in the conversation, used in error messages.

    Returns:
        The canonical message: ``tool_use`` blocks become :class:`ToolCall` (``input`` as
        compact JSON text), ``tool_result`` blocks :class:`ToolResult`, unknown blocks
        :class:`OpaquePart`.

    Raises:
        InvalidMessageError: the message does not have an Anthropic shape (e.g. a
            ``tool_use`` whose ``input`` is not an object: ``content[1].input: must be an
            object``, as the Messages API requires; an image or document ``source``
            that is not an object, or whose ``type`` is ``base64`` without string
            ``media_type`` and ``data``, ``url`` without a string ``url``, ``file``
            without a string ``file_id``: ``content[0].source.data: must be a string``,
            or that has no string ``type``: ``content[0].source.type: is missing``,
            also inside a ``tool_result``: ``content[0].content[1].source.data``; a
            block of a ``system`` message that is not a text block, as the Messages API
            refuses one in its top-level ``system``: ``content[1]: must be a text
            block``; OpenAI's ``tool_calls`` or ``function_call`` not null, whose
            payload would go uncounted: ``tool_calls: OpenAI's tool-calling form is not
            read in an Anthropic message; send tool_use blocks``; a ``tool_use``
            ``input`` holding two keys that differ only in lone surrogates, one key once
            replaced: ``content[0].input: the key "\ufffd" appears more than once``, or
            two keys JSON writes alike, ``{1: "a", "1": "b"}``: ``the key "1"``; a
            ``tool_result``'s ``is_error`` that is neither a bool nor null:
            ``content[0].is_error: must be a bool``; a ``refusal`` key (counted as text
            on any message) that is neither a string nor null: ``refusal: must be a
            string``).

    >>> m = anthropic_to_message({"role": "assistant", "content": [
    ...     {"type": "tool_use", "id": "t1", "name": "f", "input": {"q": 1}}]})
    >>> m.content[0].arguments
    '{"q":1}'
    """
    if not isinstance(d, Mapping):
        _fail("must be an object", index, None)
    role = _str(d, "role", index, "role")
    if role not in ANTHROPIC_ROLES:
        _fail(_unknown_role(role), index, "role")
    parse = _anthropic_system_block if role == "system" else _anthropic_block
    parts, kind = _content(d, index, "content", parse, nullable=False)
    # null, as the OpenAI SDK's model_dump() writes it, is fine, and so is a tool_calls of
    # [], which holds no call either (kept verbatim, as on an OpenAI message: fresh50 #3)
    if not _no_calls(d.get("tool_calls")):
        _fail(_OPENAI_CALLS, index, "tool_calls")
    if d.get("function_call") is not None:
        _fail(_OPENAI_CALLS, index, "function_call")
    _check_refusal(d, index)
    return Message(role=role, content=parts, extra=_rest(d, ("role", "content")), content_kind=kind)  # type: ignore[arg-type]


def _anthropic_source(source: Any, j: int) -> Any:
    """The Anthropic ``source`` object of an ``ImagePart`` source: a URL or data URL
    string written as one, or an object checked as :func:`_source` checks a block read
    in (``ImagePart(source={})`` was written as it came, a block the API refuses)."""
    if isinstance(source, str):
        data_url = _DATA_URL.fullmatch(source)
        if data_url:
            return {"type": "base64", "media_type": data_url[1], "data": data_url[2]}
        return {"type": "url", "url": source}
    if not isinstance(source, Mapping):
        _fail("image has no source", None, f"content[{j}].source")
    return _source({"source": source}, None, f"content[{j}]")


def _anthropic_block_out(p: Part, j: int) -> Any:
    if isinstance(p, TextPart):
        return _text_out(p)
    if isinstance(p, ImagePart):
        return _merge({"type": "image", "source": _anthropic_source(p.source, j)}, p.extra)
    if isinstance(p, ToolCall):
        if _is_custom(p):  # tool_use takes an object input; free text has no place there
            _fail(_CUSTOM_TO_ANTHROPIC, None, f"content[{j}]")
        try:
            try:
                value = msgspec.json.decode(p.arguments) if p.arguments.strip() else {}
            except UnicodeEncodeError:  # lone surrogates: U+FFFD, as everywhere else
                value = msgspec.json.decode(clean_str(p.arguments))
                # read again with them kept, to see two keys they make one
                clean_value(loads_keeping_numbers(p.arguments))
        except KeyClash as clash:
            _fail(clash.reason(), None, field_path(clash.path, f"content[{j}].arguments"))
        except msgspec.MsgspecError:
            _fail("tool call arguments are not JSON", None, f"content[{j}].arguments")
        if not isinstance(value, dict):  # what anthropic_to_message would refuse as input
            _fail("tool call arguments are not a JSON object", None, f"content[{j}].arguments")
        block = {"type": "tool_use", "id": p.id, "name": p.name, "input": value}
        return _merge(block, p.extra)
    if isinstance(p, ToolResult):
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": p.call_id}
        content = _emit(p.content_kind, p.content, _anthropic_block_out, _ABSENT)
        if content is not _ABSENT:
            result["content"] = content
        if p.is_error:
            result["is_error"] = True
        return _merge(result, p.extra)
    return p.raw


def message_to_anthropic(m: Message) -> dict[str, Any]:
    """Convert a canonical :class:`Message` to an Anthropic Messages API message dict.

    Args:
        m: the message; ``content_kind`` and ``extra`` restore the original spelling. A
            ``tool`` message becomes a user message holding ``tool_result`` blocks.

    Returns:
        A new dict; ``ToolCall.arguments`` is decoded back into ``input``.

    Raises:
        InvalidMessageError: tool call arguments that are not a JSON object, or whose
            object holds two keys that differ only in lone surrogates (one key once
            replaced: ``content[0].arguments.a: the key "\ufffd" appears more than
            once``), an OpenAI custom tool call (its input is free text; a ``tool_use``
            takes an object: ``content[0]``), an image without source, a part other
            than text in a system message (``content[1]: must be a text block``, as
            reading it says); a struct the
            engine refuses (a field of the wrong type, an unknown role), named by its
            field as ``count_messages`` names it.
        TypeError: ``m`` is not a :class:`Message` (a provider dict, a list).

    >>> result = ToolResult(call_id="t1", content=[TextPart(text="42")])
    >>> message_to_anthropic(Message(role="tool", content=[result]))["content"]
    [{'type': 'tool_result', 'tool_use_id': 't1', 'content': '42'}]
    """
    _checked(m)
    return _to_anthropic(m)


def _to_anthropic(m: Message) -> dict[str, Any]:
    """:func:`message_to_anthropic` of a struct known to be well formed, without the
    struct check."""
    if m.role == "system":  # a system prompt holds text blocks only (fresh50 #3)
        for j, p in enumerate(m.content):
            if not isinstance(p, TextPart):
                _fail(_SYSTEM_BLOCK, None, f"content[{j}]")
    out: dict[str, Any] = {"role": "user" if m.role == "tool" else m.role}
    content = _emit(m.content_kind, m.content, _anthropic_block_out, [])
    if content is not _ABSENT:
        out["content"] = content
    return _merge(out, m.extra)


# ------------------------------------------------------------------------------- dispatch


def anthropic_only_type(btype: str) -> bool:
    """Whether a block of type ``btype`` exists in Anthropic's Messages API only (Rust
    ``model::anthropic_only_block``): a list holding one is Anthropic's.

    >>> anthropic_only_type("web_search_tool_result"), anthropic_only_type("image_url")
    (True, False)
    """
    return btype in _ANTHROPIC_BLOCK_TYPES or btype.endswith("_tool_result")


def detect_format(messages: Sequence[object]) -> Format:
    """Tell which shape a message list has.

    ``canonical`` when every item is a :class:`Message`. ``openai`` when any message has
    role ``tool``, ``developer`` or ``function`` (the deprecated function-calling form,
    which the OpenAI adapter then refuses), ``tool_calls`` holding anything but null or
    ``[]`` (which hold no call, and both shapes keep), ``tool_call_id`` (not null) or ``image_url`` /
    ``input_audio`` parts. Otherwise ``anthropic`` when any block is of a type only the
    Messages API has (``tool_use``, ``tool_result``, ``server_tool_use``, ``mcp_tool_use``,
    a type ending in ``_tool_result``, ``thinking``, ``redacted_thinking``, ``document``,
    ``search_result``, ``container_upload``) or an ``image`` with a ``source`` (a leading
    ``system`` message does not outweigh that: it is how a top-level Anthropic ``system``
    is carried). Otherwise ``openai``: plain text chats, and the empty
    list, read the same in both shapes.

    Args:
        messages: the conversation.

    Returns:
        ``"openai"``, ``"anthropic"`` or ``"canonical"``.

    Raises:
        InvalidMessageError: the list mixes :class:`Message` structs and dicts.

    >>> detect_format([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}])
    'anthropic'
    """
    items = list(messages)
    structs = [isinstance(m, Message) for m in items]
    if any(structs):
        if all(structs):
            return "canonical"
        bad = structs.index(not structs[0])
        if isinstance(items[bad], Mapping) or isinstance(items[0], Mapping):
            _fail("mixes Message structs and dicts", bad, None)
        # neither a struct nor a dict (fresh17c #10: a None was "mixes structs and dicts")
        first = next(i for i, m in enumerate(items) if not isinstance(m, (Message, Mapping)))
        odd = items[first]
        _fail(f"must be a Message struct, got {'None' if odd is None else type(odd).__name__}", first, None)
    anthropic = False
    for m in items:
        if not isinstance(m, Mapping):
            continue
        role = m.get("role")
        # a tool_calls of null or [] holds no call and decides nothing: both readers keep
        # it (fresh52 #5: the Anthropic writer writes one back, which read as OpenAI's)
        if (isinstance(role, str) and role in OPENAI_ONLY_ROLES) or _holds_calls(m.get("tool_calls")):
            return "openai"
        if m.get("tool_call_id") is not None:  # null, as a framework writes every field, too (fresh53 #4)
            return "openai"
        content = m.get("content")
        for b in content if isinstance(content, list) else ():
            btype = b.get("type") if isinstance(b, Mapping) else None
            if not isinstance(btype, str):
                continue  # the adapter names it (a list or dict here is not even hashable)
            if btype in _OPENAI_PART_TYPES:
                return "openai"
            if anthropic_only_type(btype) or (btype == "image" and "source" in b):
                anthropic = True
    return "anthropic" if anthropic else "openai"


def to_canonical(messages: Sequence[Any], format: Format | None = None) -> list[Message]:
    """Convert a whole conversation to canonical messages.

    Args:
        messages: provider dicts or :class:`Message` structs.
        format: ``"openai"``, ``"anthropic"`` or ``"canonical"``; ``None`` detects it.

    Returns:
        A new list; for ``canonical`` it holds the very objects given.

    Raises:
        InvalidMessageError: a message does not have the format's shape.
        TypeError: ``format`` is neither a string nor ``None``.
        ValueError: an unknown format name.

    >>> to_canonical([{"role": "user", "content": "hi"}], "openai")[0].content
    [TextPart(text='hi', extra=None)]
    """
    check_name_type(format, "format", "'openai', 'anthropic', 'canonical'")
    fmt = detect_format(messages) if format is None else format
    if fmt == "canonical":
        for i, m in enumerate(messages):
            if not isinstance(m, Message):
                _fail("must be a Message", i, None)
        return list(messages)
    if fmt == "openai":
        return [openai_to_message(d, i) for i, d in enumerate(messages)]
    if fmt == "anthropic":
        return [anthropic_to_message(d, i) for i, d in enumerate(messages)]
    raise ValueError(f"unknown format {shown(format)}: expected openai, anthropic or canonical")


def from_canonical(m: Message, format: Format) -> Any:
    """Convert one canonical message to the given format.

    Args:
        m: the message.
        format: ``"openai"``, ``"anthropic"`` or ``"canonical"`` (returns ``m`` itself).

    Returns:
        A provider dict, or ``m``.

    Raises:
        InvalidMessageError: the message cannot be expressed in that format.
        TypeError: ``m`` is not a :class:`Message` (one message, not the list
            :func:`to_canonical` returns), or ``format`` is not a string.
        ValueError: an unknown format name.

    >>> from_canonical(Message(role="user", content=[TextPart(text="hi")]), "anthropic")
    {'role': 'user', 'content': 'hi'}
    """
    check_name_type(format, "format", "'openai', 'anthropic', 'canonical'", none=False)
    if format in ("openai", "anthropic"):
        _checked(m)
    elif format == "canonical" and not isinstance(m, Message):
        raise TypeError(f"m must be a Message, got {type(m).__name__}")
    return _written(m, format)


def _written(m: Message, format: Format) -> Any:
    """:func:`from_canonical` of a struct known to be well formed (the engine's output,
    decoded from its own JSON), without the struct check the public writers make.

    >>> _written(Message(role="user", content=[TextPart(text="hi")]), "openai")
    {'role': 'user', 'content': 'hi'}
    """
    if format == "canonical":
        return m
    if format == "openai":
        return _to_openai(m)
    if format == "anthropic":
        return _to_anthropic(m)
    raise ValueError(f"unknown format {shown(format)}: expected openai, anthropic or canonical")
