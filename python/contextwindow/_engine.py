"""Bridge between the public API and the Rust engine (``contextwindow._native``).

Turns any accepted input (OpenAI dicts, Anthropic dicts, ``Message`` structs) into the
canonical JSON the engine reads, and applies the engine's answer back onto the caller's
objects: an unchanged message is returned as the very object given; a changed or new
message is converted to the caller's shape.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, get_args

import msgspec

from . import _native
from . import _reference as ref
from ._jsontext import (
    ENCODER,
    MAX_DEPTH,
    KeyClash,
    check_name_type,
    clean_value,
    depth_unbounded,
    field_path,
    has_odd_keys,
    json_fault,
    json_hook,
    loads_keeping_numbers,
    nested_deeper,
    nesting,
    quote,
    shown,
    too_deep,
)
from .adapters import (
    _FUNCTION_ROLE,
    _SYSTEM_BLOCK,
    _no_calls,
    _source,
    _unknown_role,
    _written,
    anthropic_only_type,
    anthropic_to_message,
    detect_format,
    file_fault,
    openai_to_message,
    to_canonical,
)
from .errors import InvalidMessageError
from .messages import ContentKind, ImagePart, Message, OpaquePart, TextPart, ToolCall, ToolResult
from .report import FitReport, TrimResult

Provider = Literal["openai", "anthropic"]
InputFormat = Literal["openai", "anthropic", "canonical"]

_ENCODER = ENCODER  # one encoder for every value taken as JSON (_jsontext.json_hook)

#: Whether the native dict reader may run (``_native.count_dicts``, ``trim_turns_dicts``
#: ...): it walks a list of OpenAI/Anthropic dicts once in Rust, with exactly the
#: adapters' rules, and answers ``None`` for anything it does not take, which then goes
#: through :func:`prepare`. Private switch: ``tests/test_fast_reader.py`` sets it to
#: ``False`` to compare with the Python adapters.
FAST_READER = True


def fast_reader(messages: Any, format: str | None) -> bool:
    """Whether the native dict reader may try ``messages`` (a plain ``list``; ``format``
    ``None``, ``"openai"`` or ``"anthropic"``); it still falls back on what it does not
    take."""
    return FAST_READER and type(messages) is list and format in (None, "openai", "anthropic")


class _Op(msgspec.Struct, frozen=True):
    src: int | None
    msg: Message | None = None


class _Outcome(msgspec.Struct, frozen=True):
    messages: list[_Op]
    report: FitReport


_OUTCOME = msgspec.json.Decoder(_Outcome)


def json_type_name(value: Any) -> str:
    """JSON's name for the type of a Python value, as the gateway's errors name a JSON
    value's (``a string``, ``null``, ``an object``); a number kept as written
    (``msgspec.Raw``, :func:`loads_keeping_numbers`) is ``a number``; a type JSON has not
    is ``a Python <type>``.

    >>> json_type_name([1]), json_type_name(None), json_type_name({1, 2})
    ('an array', 'null', 'a Python set')
    """
    if value is None:
        return "null"
    if isinstance(value, msgspec.Raw):
        return "a number"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return f"a Python {type(value).__name__}"


def tool_definition_error(i: int, tool: Any) -> str | None:
    """What is wrong with the shape of the request's tool definition ``tools[i]``, in the
    gateway's words (``gateway.rs``, ``tool_shape``), or ``None``.

    A definition is an object; an OpenAI one's ``function`` (when present) is an object
    whose ``name`` is a string; a ``name`` at the top (when present) is a string;
    a ``"type": "function"`` tool has a ``function`` or (the flat shape) a ``name``; an
    Anthropic client tool (one with an ``input_schema`` and no ``function``, the mark
    the format detection reads) has a ``name``, as Anthropic's API requires, and so has
    one of its built-in tools (a dated ``type``, :func:`is_dated_tool_type`:
    ``{"type": "bash_20250124", "name": "bash"}``), and so has a tool with no ``type``
    (or a null or empty one) that is none of these (``{}``, ``{"description": "d"}``:
    neither API takes it; fresh44 #4), and so has a ``"type": "custom"`` tool with no
    ``custom`` object (OpenAI's names itself there; a ``custom``, when present, is
    checked as a ``function`` is). A ``type`` that is not a string, and a name that is the
    empty string, are refused too (fresh45 #6, fresh46 #2). Other keys are counted
    as they are, and so are tools of other types (``{"type": "other"}``, OpenAI's
    ``file_search``)
    (fresh12 O4: ``{"function": 5}`` used to be counted, never refused; fresh16a F5: a
    function with no name was counted; fresh18 F5: so was ``{"input_schema": {}}``;
    tools19: so was ``{"type": "bash_20250124"}``).

    >>> tool_definition_error(0, {"type": "function", "function": 5})
    'tools[0].function: must be an object, got a number'
    >>> tool_definition_error(1, {"type": "function", "function": {}})
    'tools[1].function.name: is missing'
    >>> tool_definition_error(0, {"description": "d", "input_schema": {}})
    'tools[0].name: is missing'
    >>> tool_definition_error(0, {"type": "web_search_20250305", "max_uses": 5})
    'tools[0].name: is missing'
    >>> tool_definition_error(0, {"description": "no name, no type"})
    'tools[0].name: is missing'
    >>> tool_definition_error(0, {"type": 5, "name": "x"})
    'tools[0].type: must be a string, got a number'
    """
    if not isinstance(tool, Mapping):
        return f"tools[{i}]: a tool definition must be an object, got {json_type_name(tool)}"
    kind = tool.get("type")
    if kind is not None and not isinstance(kind, str):
        # fresh45 #6: {"type": 5, "name": "x"} was counted
        return f"tools[{i}].type: must be a string, got {json_type_name(kind)}"
    # a function tool names itself in "function", OpenAI's custom tool in "custom": each,
    # when present, is an object with a non-empty string name (fresh46 #2: {"type":
    # "custom", "custom": {}} was counted)
    for key in ("function", "custom"):
        if key not in tool:
            continue
        named = tool[key]
        if not isinstance(named, Mapping):
            return f"tools[{i}].{key}: must be an object, got {json_type_name(named)}"
        if "name" not in named:
            return f"tools[{i}].{key}.name: is missing"
        if not isinstance(named["name"], str):
            return f"tools[{i}].{key}.name: must be a string, got {json_type_name(named['name'])}"
        if not named["name"]:
            return f"tools[{i}].{key}.name: must not be empty"
    if "name" in tool:
        if not isinstance(tool["name"], str):
            return f"tools[{i}].name: must be a string, got {json_type_name(tool['name'])}"
        if not tool["name"]:
            return f"tools[{i}].name: must not be empty"
    if "function" not in tool and "name" not in tool:
        if kind == "function":
            return f"tools[{i}].function: is missing"
        # Anthropic's shape, or one of its built-in tools: the API requires a name; so
        # does a tool of no type (null or "" is none), neither API's unless a named
        # Anthropic tool (fresh44 #4: {} and {"description": ...} were counted), and a
        # custom tool that names itself neither at the top (Anthropic) nor in "custom"
        # (OpenAI; fresh45 #6)
        if (
            "input_schema" in tool
            or is_dated_tool_type(kind)
            or not kind
            or (kind == "custom" and "custom" not in tool)
        ):
            return f"tools[{i}].name: is missing"
    return None


def is_dated_tool_type(value: Any) -> bool:
    """Whether ``value`` is the ``type`` of an Anthropic built-in tool: a string ending in
    ``_`` and an eight-digit date (``bash_20250124``, ``web_search_20250305``,
    ``text_editor_20250728``), the versioned form every such type has. OpenAI's tool
    types have no such suffix (``web_search_preview_2025_03_11``, ``code_interpreter``),
    nor have Anthropic's undated ones (``custom``, ``mcp_toolset``), which are not asked
    for a name here. The gateway reads it the same way (``gateway.rs``,
    ``dated_tool_type``).

    >>> is_dated_tool_type("bash_20250124"), is_dated_tool_type("web_search_preview_2025_03_11")
    (True, False)
    """
    return (
        isinstance(value, str) and len(value) > 9 and value[-9] == "_" and value[-8:].isascii() and value[-8:].isdigit()
    )


def _carries_odd_keys(parts: Any) -> bool:
    """Whether a value the parts carry as it is (a part's ``extra``, an opaque part's
    ``raw``, an image's ``source``, and the same in a tool result's parts) has a key
    that is not a ``str`` (:func:`has_odd_keys`). A ``parts`` that is not a list is
    msgspec's to name (fresh17 #6: ``content=None`` raised "'NoneType' object is not
    iterable" with no message index)."""
    if not isinstance(parts, list):
        return False
    for p in parts:
        t = type(p)
        if t is TextPart or t is ToolCall:
            if p.extra is not None and has_odd_keys(p.extra):
                return True
        elif t is ToolResult:
            if (p.extra is not None and has_odd_keys(p.extra)) or _carries_odd_keys(p.content):
                return True
        else:  # an opaque part's raw, an image's source, anything else a caller built
            for v in (getattr(p, "extra", None), getattr(p, "raw", None), getattr(p, "source", None)):
                if v is not None and type(v) is not str and has_odd_keys(v):
                    return True
    return False


def _encode(messages: Sequence[Message]) -> bytes:
    """:func:`encode_messages`, raising :class:`KeyClash` (its path starts with the
    message's index) for two keys that lone surrogates made one, or that JSON writes
    alike (``{1: "a", "1": "b"}``, fresh14 #11)."""
    try:
        payload = _ENCODER.encode(messages)
    except UnicodeEncodeError:
        return _ENCODER.encode(clean_value(msgspec.to_builtins(messages, enc_hook=json_hook)))
    if any(
        (m.extra is not None and has_odd_keys(m.extra)) or _carries_odd_keys(m.content) for m in _unchecked(messages)
    ):
        clean_value(msgspec.to_builtins(messages, enc_hook=json_hook))  # raises KeyClash for two keys written alike
    return payload


def _clash_error(clash: KeyClash, index: int | None = None) -> InvalidMessageError:
    """``clash`` as the gateway words a repeated key: ``message 0, field content[0]: the
    key "\ufffd" appears more than once``; without ``index``, the first step of its path
    is the message's index."""
    path = clash.path
    if index is None:
        index, path = (path[0], path[1:]) if path and isinstance(path[0], int) else (None, path)
    return InvalidMessageError(clash.reason(), index=index, field=field_path(path) or None)


def encode_messages(messages: Sequence[Message]) -> bytes:
    """Canonical messages as the JSON the engine reads (lone surrogates replaced).

    Raises:
        InvalidMessageError: two keys of one object differ only in lone surrogates, so
            they are one key once replaced (``message 0, field extra: the key "\ufffd"
            appears more than once``, the gateway's words): writing one would drop the
            other's value.
    """
    try:
        return _encode(messages)
    except KeyClash as clash:
        raise _clash_error(clash) from None


@dataclass(frozen=True)
class Prepared:
    """Input made ready for the engine."""

    original: Sequence[Any]
    format: InputFormat
    provider: Provider
    canonical: list[Message]
    payload: bytes


def _provider_of(messages: Sequence[Message], detected: InputFormat) -> Provider:
    """Whose rules the engine applies when the caller did not say.

    A plain chat (only user and assistant messages, only text and images whose source is
    an Anthropic source object) is valid in both shapes; the engine then places the
    breadcrumb as a leading text block of the first kept user message, which both
    providers accept, rather than as a message of its own, which would break Anthropic's
    alternation.
    """

    # a plain chat may hold images whose source is an Anthropic source object (a dict, as
    # the Anthropic adapter reads one; fresh19b #2: such a chat was read as OpenAI's and
    # the breadcrumb became a user message of its own beside the first kept one); an
    # image given as a URL string leaves it OpenAI's, as any other sign of a shape does
    def plain(p: object) -> bool:
        return isinstance(p, TextPart) or (isinstance(p, ImagePart) and isinstance(p.source, Mapping))

    if all(m.role in ("user", "assistant") and all(plain(p) for p in m.content) for m in messages):
        return "anthropic"
    if detected in ("openai", "anthropic"):
        return detected
    # a system message after the first is OpenAI's (Anthropic takes one leading system
    # prompt and refuses a second): results in a user message do not outweigh it (found
    # by hypothesis: such structs were read as Anthropic's and refused as a second system
    # prompt, where OpenAI's rules count them and repair the results)
    one_system = all(m.role != "system" for m in messages[1:])
    for m in messages:
        if m.role == "tool":
            return "openai"
        if m.role == "user" and one_system and any(isinstance(p, ToolResult) for p in m.content):
            return "anthropic"
        # a block only Anthropic has (a thinking block, Claude's server tools, a document:
        # fresh48 #1, structs holding them were trimmed as OpenAI's and the breadcrumb
        # broke the alternation), as detect_format reads dicts
        if one_system and any(isinstance(p, OpaquePart) and anthropic_only_type(p.type) for p in m.content):
            return "anthropic"
    return "openai"


_PATH = re.compile(r"at `\$\[(\d+)\]\.?([^`]*)`")


def _check_canonical(messages: Sequence[Message]) -> bytes:
    """Encode ``Message`` structs, checking every field's type on the way.

    Raises:
        InvalidMessageError: naming the message index and field that is wrong (or that
            holds two keys lone surrogates make one: ``field extra``); a field is checked
            by its Python type first (:func:`_struct_fault`: NaN where a string belongs
            is ``field name: must be a string``, bytes in ``extra`` ``field extra.k:
            holds a value JSON cannot represent (a Python bytes)``), then by msgspec; a
            ``refusal`` in ``extra`` that is neither a string nor ``None`` is ``field
            refusal: must be a string``, as for a dict (fresh16a F5), unless a field
            msgspec checks is wrong in that message or an earlier one. The first message
            at fault is named.
    """
    fault = _struct_fault(messages)
    try:
        payload = _encode(messages)
        try:
            _CANONICAL.decode(payload)
        except msgspec.ValidationError as exc:
            if "out of range" not in str(exc):
                raise
            # a number kept as written (msgspec.Raw(b"1e400")): check the rest
            msgspec.convert(loads_keeping_numbers(payload), list[Message])
    except KeyClash as clash:  # named by the struct's fields: "message 0, field extra"
        if fault is not None and (not clash.path or not isinstance(clash.path[0], int) or fault[0] < clash.path[0]):
            raise _fault_error(fault) from None
        raise _clash_error(clash) from None
    except (TypeError, msgspec.ValidationError, msgspec.EncodeError) as exc:
        text = str(exc)
        m = _PATH.search(text)
        index, field = (int(m.group(1)), m.group(2) or None) if m else (None, None)
        reason = text.split(" - at ")[0]
        if fault is not None and (index is None or fault[0] < index or (fault[0] == index and fault[3])):
            raise _fault_error(fault) from None
        if isinstance(exc, msgspec.ValidationError) and index is not None and field is not None:
            field, reason = _struct_reason(messages[index], field, reason)
        raise InvalidMessageError(reason, index=index, field=field) from None
    except ValueError as exc:  # an int too long for Python to write as text (10**5000)
        try:
            _encode_located(messages)  # names the message
        except KeyClash as clash:
            raise _clash_error(clash) from None
        except InvalidMessageError as located:
            if fault is not None and located.index is not None and fault[0] <= located.index:
                raise _fault_error(fault) from None
            raise
        raise InvalidMessageError(str(exc)) from None
    if fault is not None:
        raise _fault_error(fault)
    return payload


def _fault_error(fault: _Fault) -> InvalidMessageError:
    return InvalidMessageError(fault[2], index=fault[0], field=fault[1])


_BYTES = (bytes, bytearray, memoryview)
_STRING = "must be a string"
_BOOL = "must be a bool"
_KINDS = (
    "must be " + ", ".join(quote(k) for k in get_args(ContentKind)[:-1]) + f" or {quote(get_args(ContentKind)[-1])}"
)
#: (index, field, reason, typed): ``typed`` for a field of the wrong type, else a value
#: JSON cannot represent or a bad ``refusal`` (which a field msgspec checks in the same
#: message comes before, as the adapters read a message's fields first)
_Fault = tuple[int, str, str, bool]


def _json_value(value: Any, field: str) -> tuple[str, str] | None:
    """``(field, reason)`` for a value inside ``value`` (at ``field``) that JSON cannot
    represent, in the dict path's words, or ``None``."""
    found = json_fault(value)
    if found is None:
        return None
    path, what = found
    return field_path(path, field), f"holds a value JSON cannot represent ({what})"


def _at(base: str, sub: str) -> str:
    return f"{base}.{sub}" if sub else base


#: Block types a message's ``OpaquePart`` must not have: the parts that pairing and
#: ``validate`` read (inside a tool result's content, a ``tool_use`` block is no call and
#: stays opaque, as the adapters read it).
_MODELED_CALLS = {
    "tool_use": "must not be 'tool_use' in an OpaquePart: a tool call is a ToolCall part, which pairing reads",
    "tool_result": (
        "must not be 'tool_result' in an OpaquePart: a tool result is a ToolResult part, which pairing reads"
    ),
}


def _part_fault(part: Any, nested: bool) -> tuple[str, str, bool] | None:
    """The first fault of a part struct, as ``(field below the part, reason, typed)``
    (``""``: the part itself): a field of the wrong type (typed first, as msgspec would
    find them), else a value JSON cannot represent in its ``extra``, ``raw`` or
    ``source``. Field names are built only for a fault: this runs on every call."""
    kind = type(part)
    if kind is TextPart:
        if type(part.text) is not str and not isinstance(part.text, str):
            return "text", _STRING, True
    elif kind is ToolCall and not nested:
        if type(part.id) is not str and not isinstance(part.id, str):
            return "id", _STRING, True
        if type(part.name) is not str and not isinstance(part.name, str):
            return "name", _STRING, True
        if type(part.arguments) is not str and not isinstance(part.arguments, str):
            return "arguments", _STRING, True
    elif kind is ImagePart:
        for name in ("width", "height"):
            v = getattr(part, name)
            if v is not None and not isinstance(v, int):  # NaN and inf: msgspec writes null
                return name, "must be an int", True
        if part.detail is not None and not isinstance(part.detail, str):
            return "detail", _STRING, True
        source = part.source
        if isinstance(source, _BYTES):  # where a URL string belongs
            return "source", _STRING, True
        if source is not None and not isinstance(source, (str, Mapping)):
            # an URL string (OpenAI) or a source object (Anthropic); a list or a number
            # was counted as an image of unknown size (fresh17c #8)
            return "source", "must be a string or a dict", True
        if source is not None and type(source) is not str:
            bad = _json_value(source, "source")
            if bad is not None:
                return (*bad, False)
    elif kind is ToolResult and not nested:
        if type(part.call_id) is not str and not isinstance(part.call_id, str):
            return "call_id", _STRING, True
        if part.is_error is not True and part.is_error is not False:
            return "is_error", _BOOL, True
        if part.content_kind is not None and not isinstance(part.content_kind, str):
            return "content_kind", _KINDS, True
        content = part.content
        if isinstance(content, list):  # a tuple too is refused, as the dict path does
            later = None
            for k, inner in enumerate(content):
                if type(inner) is TextPart and type(inner.text) is str and inner.extra is None:
                    continue
                found = _part_fault(inner, True)
                if found is not None:
                    found = (_at(f"content[{k}]", found[0]), found[1], found[2])
                    if found[2]:
                        return found
                    later = later or found
            if later is not None:
                return later
        else:
            return "content", "must be a list of parts", True
    elif kind is OpaquePart:
        if type(part.type) is not str and not isinstance(part.type, str):
            return "type", _STRING, True
        raw = part.raw
        if raw is not None and type(raw) is not str:
            bad = _json_value(raw, "raw")
            if bad is not None:
                return (*bad, False)
        # fresh45 #2: the writers send ``raw``, counting reads ``type``, and pairing reads
        # ToolCall and ToolResult parts only: a struct whose two types differ, or that
        # hides a call or a result in an opaque part, was counted as one block and sent
        # as another, and passed validate where the written request did not
        if isinstance(raw, Mapping) and "type" in raw and raw["type"] != part.type:
            return "type", f"must be the type of its raw block ({shown(raw['type'])}), got {shown(part.type)}", False
        if not nested and part.type in _MODELED_CALLS:
            return "type", _MODELED_CALLS[part.type], False
        if part.type == "file" and isinstance(raw, Mapping):
            # the dicts' rule and words (fresh48 #3: a struct's malformed file part was
            # counted, passed validate and was written out as it was)
            fault = file_fault(raw)
            if fault is not None:
                return (*fault, False)
        return None
    elif kind is not ToolCall and kind is not ToolResult:
        # not a part: a dict with a "kind" too, which msgspec would decode to one (struct18
        # #2: counted, handed back as the dict), as the dict path refuses a block without
        # a "type"; a ToolCall or ToolResult in a result is msgspec's to name
        return "", _RESULT_PARTS if nested else _PARTS, True
    extra = getattr(part, "extra", None)
    if extra is not None:
        if not isinstance(extra, Mapping):
            return "extra", "must be a dict", True
        bad = _json_value(extra, "extra")
        if bad is not None:
            return (*bad, False)
    return None


_CALLS_IN_EXTRA = "a Message carries tool calls as ToolCall parts; in extra they would be written uncounted"
_FIELD_IN_EXTRA = "a Message's own field; in extra it would be written uncounted or dropped"
#: Keys of a ``Message``'s ``extra`` that the writers would send but counting, ``validate``
#: and pairing never see (an assistant's ``tool_calls``, ``function_call``), or that stand
#: for one of its fields (``role``, ``content``): the adapters never leave them there when
#: they read a dict (but ``tool_calls`` null or ``[]`` and ``function_call`` null, kept
#: verbatim), so a struct holding them was built so (fresh20b #5). Since fresh49 #2 the
#: adapters read ``tool_calls`` on a user, system or developer message as calls and refuse
#: them on a tool message, so ``extra.tool_calls`` is refused whatever the role.
_SMUGGLED = {
    "extra.role": _FIELD_IN_EXTRA,
    "extra.content": _FIELD_IN_EXTRA,
    "extra.tool_calls": _CALLS_IN_EXTRA,
    "extra.function_call": _CALLS_IN_EXTRA,
}


def _smuggled(extra: Mapping[str, Any]) -> str | None:
    """The field (``extra.tool_calls``) of the first key of :data:`_SMUGGLED` that a
    message's ``extra`` holds, or ``None``."""
    if "role" in extra:
        return "extra.role"
    if "content" in extra:
        return "extra.content"
    if not _no_calls(extra.get("tool_calls")):
        return "extra.tool_calls"
    if extra.get("function_call") is not None:
        return "extra.function_call"
    return None


def _message_fault(m: Message) -> tuple[str, str, bool] | None:
    """:func:`_struct_fault` for one message: ``(field, reason, typed)`` or ``None``."""
    role = m.role
    if type(role) is not str and not isinstance(role, str):
        return "role", _STRING, True
    if m.pinned is not False and m.pinned is not True:
        return "pinned", _BOOL, True
    priority = m.priority
    if priority is not None and not isinstance(priority, int):  # NaN, inf: written null
        return "priority", "must be an int 0-3", True
    v = m.name
    if v is not None and type(v) is not str and not isinstance(v, str):
        return "name", _STRING, True
    v = m.id
    if v is not None and type(v) is not str and not isinstance(v, str):
        return "id", _STRING, True
    if m.content_kind is not None and not isinstance(m.content_kind, str):
        return "content_kind", _KINDS, True
    later: tuple[str, str, bool] | None = None
    content = m.content
    if isinstance(content, list):  # a tuple too is refused, as the dict path does (struct18 #2)
        for k, part in enumerate(content):
            if type(part) is TextPart and type(part.text) is str and part.extra is None:
                continue  # the common part, without a call
            found = _part_fault(part, False)
            if found is not None:
                found = (_at(f"content[{k}]", found[0]), found[1], found[2])
                if found[2]:
                    return found[0], found[1], True
                later = later or found
    else:
        return "content", "must be a list of parts", True
    extra = m.extra
    if extra is not None:
        if not isinstance(extra, Mapping):
            return "extra", "must be a dict", True
        smuggled = _smuggled(extra)
        if smuggled is not None:
            return smuggled, _SMUGGLED[smuggled], False
        refusal = extra.get("refusal")
        if refusal is not None and not isinstance(refusal, str):
            return "refusal", _STRING, False
        if later is None:
            bad = _json_value(extra, "extra")
            if bad is not None:
                later = (*bad, False)
    if later is not None:
        return later[0], later[1], False
    return None


def _struct_fault(messages: Sequence[Message]) -> _Fault | None:
    """The first fault msgspec's encoding hides in ``Message`` structs, as
    ``(index, field, reason, typed)``, or ``None``: a field of the wrong type (msgspec
    writes bytes as base64 text and a ``Decimal`` as a string, where a string belongs;
    NaN and inf as ``null``, where an optional int or string belongs; it refuses an
    ``object()`` or a ``Fraction`` with no index; fresh17 #5, fresh17b #1, #4), a
    ``refusal`` in ``extra`` that is neither a string nor ``None`` (the estimator counts
    a string one; fresh16a F5), or a value JSON cannot represent (:func:`json_fault`:
    bytes, sets, ``object()``) in an ``extra``, an opaque part's ``raw`` or an image's
    ``source`` (fresh17b #3). In a message, a field of the wrong type comes first, then
    the refusal, then a value JSON cannot represent, as the adapters read a dict.

    It runs on every call: a message of text parts and no optional field is checked
    inline, without a call (about 90 µs per 1,000 one-part messages, measured on a busy
    2-core machine where the walk for bytes it replaces took about 390 µs)."""
    for i, m in enumerate(messages):
        content = m.content
        if (
            type(m.role) is str
            and m.extra is None
            and m.name is None
            and m.id is None
            and m.priority is None
            and (m.content_kind is None or type(m.content_kind) is str)
            and (m.pinned is False or m.pinned is True)
            and type(content) is list
        ):
            for part in content:
                if type(part) is not TextPart or type(part.text) is not str or part.extra is not None:
                    break
            else:
                continue  # the common message: text parts, no optional field (no call)
        found = _message_fault(m)
        if found is not None:
            return (i, *found)
    return None


_CANONICAL = msgspec.json.Decoder(list[Message])

# msgspec's words for a value of the wrong type or out of range: "Expected `str | null`,
# got `int`", "Expected `int` >= 0"
_EXPECTED = re.compile(r"Expected `([^`]*)`(?:, got `[^`]*`)?(?: ([<>]=?) (-?\d+))?$")
_MISSING = re.compile(r"Object missing required field `([^`]*)`$")
_TYPE_WORDS = {"str": "a string", "int": "an int", "bool": "a bool", "float": "a number", "object": "a dict"}
_PARTS = "must be a TextPart, ImagePart, ToolCall, ToolResult or OpaquePart"
_RESULT_PARTS = "must be a TextPart, ImagePart or OpaquePart"
_PART_ITEM = re.compile(r"(?:^|\.)content\[\d+\]$")


def _struct_reason(message: Any, field: str, reason: str) -> tuple[str, str]:
    """The field and reason of an error msgspec found in a ``Message`` struct (``field``
    from its path, ``reason`` its words), in the adapters' words (fresh11 N6: a struct got
    ``Invalid enum value 'wizard'`` where a dict gets ``unknown role "wizard"``).

    A role is checked by the adapters' rule itself (``function``, the deprecated
    function-calling form's, is named as :func:`~contextwindow.adapters.openai_to_message`
    names it); a value of the wrong type is ``must
    be a string`` (``a list of parts`` for a content, a part class for a content item);
    ``None`` is never named, as the dict path does not name ``null`` for ``name``. Words
    msgspec uses that are not mapped here are kept as they are.
    """
    if field == "role":
        role = getattr(message, "role", None)
        if not isinstance(role, str):
            return field, "must be a string"
        # the deprecated form's "function" role gets the words a dict gets (tools19)
        return field, _FUNCTION_ROLE if role == "function" else _unknown_role(role)
    if field.endswith(".kind"):  # a dict with a "kind" no part has: not a part
        field = field[: -len(".kind")]
        reason = "Expected `object`"
    nested = field.count("content[") > 1  # inside a ToolResult's content
    if _PART_ITEM.search(field) and (reason.startswith("Expected `object`") or reason.startswith("Invalid value")):
        return field, _RESULT_PARTS if nested else _PARTS
    missing = _MISSING.match(reason)
    if missing is not None:
        if missing.group(1) == "kind" and _PART_ITEM.search(field):
            return field, _RESULT_PARTS if nested else _PARTS
        return f"{field}.{missing.group(1)}", "is missing"
    last = field.rsplit(".", 1)[-1]
    if last == "priority":
        return field, "must be an int 0-3"
    if last == "content_kind":
        kinds = [quote(k) for k in get_args(ContentKind)]
        return field, f"must be {', '.join(kinds[:-1])} or {kinds[-1]}"
    expected = _EXPECTED.match(reason)
    if expected is None:
        return field, reason
    names, op, bound = expected.groups()
    if op is not None:
        return field, f"must be an int {op} {bound}"
    kinds = [k for k in names.split(" | ") if k != "null"]
    if kinds == ["array"]:
        return field, "must be a list of parts" if last == "content" else "must be a list"
    words = [_TYPE_WORDS.get(k, k) for k in kinds]
    return field, "must be " + " or ".join(words)


def _encode_located(messages: Sequence[Message], originals: Sequence[Any] | None = None) -> bytes:
    """Encode, and on failure name the first message that cannot be encoded (a value of a
    type JSON has not, an int too long for Python to write as text: 10**5000); a
    :class:`KeyClash` goes to the caller, who names it in the caller's terms. With
    ``originals`` (the caller's dicts the messages were read from), a value of a type JSON
    has not is named by its place in the dict too (``message 1, field content[0].k``),
    and so is one msgspec writes though JSON has no such type (bytes as base64 text, a set
    as an array: :func:`json_fault`; fresh17b #1, #3)."""
    try:
        payload = _encode(messages)
    except (TypeError, ValueError, msgspec.EncodeError) as exc:
        for i, m in enumerate(messages):
            if originals is not None:
                bad = _dict_fault(originals[i], i)
                if bad is not None:
                    raise bad from None
            try:
                _encode([m])
            except KeyClash as clash:  # found before the value that cannot be encoded
                clash.path[0] = i
                raise
            except (TypeError, ValueError, msgspec.EncodeError):
                raise InvalidMessageError(f"holds a value JSON cannot represent ({exc})", index=i) from None
        raise InvalidMessageError(str(exc)) from None
    if originals is not None:
        index = _carried_fault(messages)
        if index is not None:
            bad = _dict_fault(originals[index], index)
            if bad is not None:
                raise bad
    return payload


def _carried(parts: Any) -> bool:
    """Whether a value the parts carry as the caller gave it (an ``extra``, an opaque
    part's ``raw``, an image's ``source``; in a tool result's parts too) holds a value
    JSON cannot represent (:func:`json_fault`)."""
    for p in parts:
        t = type(p)
        if t is OpaquePart:
            if json_fault(p.raw) is not None:
                return True
            continue
        extra = getattr(p, "extra", None)
        if extra is not None and json_fault(extra) is not None:
            return True
        if t is ImagePart:
            if json_fault(p.source) is not None:
                return True
        elif t is ToolResult and p.content and _carried(p.content):
            return True
    return False


def _carried_fault(messages: Sequence[Message]) -> int | None:
    """The index of the first message read from a dict whose carried values (its
    ``extra`` and its parts', :func:`_carried`) hold a value JSON cannot represent, or
    ``None``: the adapters checked every typed field already."""
    scope = _SCOPE.get()
    plain = scope.plain if scope is not None else {}
    for i, m in enumerate(messages):
        if plain.get(id(m)) is m:
            continue  # decoded from JSON: every value is of a JSON type
        if (m.extra is not None and json_fault(m.extra) is not None) or _carried(m.content):
            return i
    return None


def _unchecked(messages: Sequence[Message]) -> Sequence[Message]:
    """``messages`` but those a :func:`reuse_conversions` scope knows were decoded from
    JSON (``_Scope.plain``): in those every key is a ``str``, so no two are written alike."""
    scope = _SCOPE.get()
    if scope is None or not scope.plain:
        return messages
    plain = scope.plain
    return [m for m in messages if plain.get(id(m)) is not m]


def _dict_fault(message: Any, index: int) -> InvalidMessageError | None:
    """A value of a type JSON has not in the caller's dict ``message``, named by its place
    there (:func:`json_fault`), or ``None``."""
    found = json_fault(message)
    if found is None:
        return None
    path, what = found
    return InvalidMessageError(
        f"holds a value JSON cannot represent ({what})", index=index, field=field_path(path) or None
    )


class _Scope:
    """What :func:`reuse_conversions` remembers, by object identity (each object is held,
    so its id cannot be reused while the scope lasts)."""

    def __init__(self) -> None:
        # (id(dict), format) -> (the dict, its canonical message)
        self.messages: dict[Any, tuple[Any, Any]] = {}
        # id(canonical message) -> (it, the message decoded from its JSON)
        self.decoded: dict[Any, tuple[Any, Any]] = {}
        # (id(message), profile) -> (the message, its tokens)
        self.costs: dict[Any, tuple[Any, Any]] = {}
        # (id(list), format) -> (the list, what prepare made of it)
        self.prepared: dict[Any, tuple[Any, Any]] = {}
        # (id(Prepared), profile) -> (it, what read() gave for it: messages, costs)
        self.reads: dict[Any, tuple[Any, list[Message], list[int] | None]] = {}
        # id(message) -> the message, for the messages decoded from JSON in this scope
        # (the reader's, decoded()'s): their keys are strs and their values of JSON types,
        # so the checks of encode_messages and of _carried_fault find nothing in them
        self.plain: dict[int, Message] = {}
        # values made once per scope (see scoped())
        self.made: dict[str, Any] = {}
        # what is worked out once per conversation (see shaped()): kind -> (the messages
        # of the latest list it was asked for, the answer)
        self.shaped: dict[str, tuple[list[Message], Any]] = {}


def _recall(memo: dict[Any, tuple[Any, Any]], key: Any, obj: Any) -> Any:
    """What ``memo`` holds for ``obj`` under ``key`` (built from ``id(obj)``), or ``None``."""
    hit = memo.get(key)
    return hit[1] if hit is not None and hit[0] is obj else None


_SCOPE: ContextVar[_Scope | None] = ContextVar("_SCOPE", default=None)

_T = TypeVar("_T")


def call_shape(m: Message) -> tuple[Any, ...]:
    """All :func:`_reference.resolve` reads of a message: its role and each part's kind
    with its call id; and a call's name (``compact._tool_names`` reads that too)."""
    return (
        m.role,
        [
            (1, p.id, p.name) if isinstance(p, ToolCall) else (2, p.call_id) if isinstance(p, ToolResult) else 0
            for p in m.content
        ],
    )


def turn_shape(m: Message) -> tuple[Any, ...]:
    """All the segmentation reads of a message (``_reference.segment``, whose rules the
    Rust engine's ``segment_turns`` shares): :func:`call_shape`, whether it is a real
    user message (its role tells a preamble message), whether it is of media alone (a
    screenshot joins the tool unit before it: fresh49 #1, fresh50 #1) and whether it is
    a text-action observation (a screenshot after one is no real user message: fresh53
    #2)."""
    return (call_shape(m), ref.is_real_user(m), ref.is_media_only(m), ref.is_observation(m))


def shaped(kind: str, msgs: Sequence[Message], shape: Callable[[Message], Any], compute: Callable[[], _T]) -> _T:
    """``compute()``, an answer about ``msgs`` that reads of each message only what
    ``shape`` gives. Inside :func:`reuse_conversions`, the answer last worked out under
    ``kind`` is given again when ``msgs`` is as long as that list and each of its messages
    is the one at the same index there or has the same shape: a step's output is mostly
    its input's messages, and the ones it changed (a tool result cleared or cut) mostly
    keep their shape, so the guard's steps resolve and segment one conversation once.
    The answer is shared: callers only read it."""
    scope = _SCOPE.get()
    if scope is None:
        return compute()
    hit = scope.shaped.get(kind)
    if hit is not None:
        old, value = hit
        if len(old) == len(msgs) and all(a is b or shape(a) == shape(b) for a, b in zip(old, msgs, strict=True)):
            scope.shaped[kind] = (list(msgs), value)  # the latest: the next list is mostly its messages
            return value  # type: ignore[no-any-return]
    value = compute()
    scope.shaped[kind] = (list(msgs), value)
    return value


def scoped(key: str, make: Callable[[], _T]) -> _T:
    """``make()``, made once per :func:`reuse_conversions` scope (under ``key``); outside
    one, made anew on every call."""
    scope = _SCOPE.get()
    if scope is None:
        return make()
    if key not in scope.made:
        scope.made[key] = make()
    return scope.made[key]  # type: ignore[no-any-return]


def resolved(msgs: list[Message]) -> ref.Resolved:
    """:func:`_reference.resolve` of ``msgs``, once per conversation in a
    :func:`reuse_conversions` scope (:func:`shaped`)."""
    return shaped("resolve", msgs, call_shape, lambda: ref.resolve(msgs))


@contextmanager
def reuse_conversions() -> Iterator[None]:
    """Within the block, :func:`prepare` converts each provider dict (by identity) once,
    and :func:`message_costs` counts each canonical message once per profile; a list
    :func:`read` read already is not read again; answers that read only the shape of the
    messages (:func:`resolved`, the segmentation, the tool names) are worked out once per
    conversation (:func:`shaped`); messages decoded from JSON are not walked again for
    keys JSON writes alike or values it cannot represent.

    For a caller that prepares and counts the same messages several times in one call,
    none of which it changes in between (``ContextGuard.check`` runs up to four steps on
    lists that share most of their dicts); outside the block nothing is remembered, so a
    caller editing a dict between two public calls is always read afresh.
    """
    token = _SCOPE.set(_SCOPE.get() or _Scope())
    try:
        yield
    finally:
        _SCOPE.reset(token)


@contextmanager
def outside_reuse() -> Iterator[None]:
    """Within the block nothing is remembered, also inside :func:`reuse_conversions`: for
    the caller's code that a call runs in the middle of it (``ContextGuard``'s
    subscribers), which may edit a dict and make a public call of its own (fresh55 #3:
    a ``fit`` made from a subscriber read the dicts as they were before its edit)."""
    token = _SCOPE.set(None)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def _to_canonical(messages: list[Any], fmt: str) -> list[Message]:
    scope = _SCOPE.get()
    if scope is None or fmt not in ("openai", "anthropic"):
        return to_canonical(messages, fmt)  # type: ignore[arg-type]
    memo = scope.messages
    convert = openai_to_message if fmt == "openai" else anthropic_to_message
    out = []
    for i, d in enumerate(messages):
        hit = memo.get((id(d), fmt))  # _recall, inline: once per message of every step
        if hit is not None and hit[0] is d:
            m = hit[1]
        else:
            m = convert(d, i)
            memo[(id(d), fmt)] = (d, m)
        out.append(m)
    return out


def message_costs(msgs: Sequence[Message], profile: str, payload: bytes | None = None) -> list[int]:
    """Tokens of each canonical message (the Rust estimator); ``payload``, when given, is
    ``msgs`` encoded already. Inside :func:`reuse_conversions` a message object already
    counted for ``profile`` is not counted again."""
    if not msgs:
        return []
    scope = _SCOPE.get()
    if scope is None:
        body = payload if payload is not None else encode_messages(msgs)
        return [int(n) for n in native.count_messages(body, profile)]
    memo = scope.costs
    out = [0] * len(msgs)
    miss = []
    for i, m in enumerate(msgs):
        hit = memo.get((id(m), profile))  # _recall, inline
        if hit is None or hit[0] is not m:
            miss.append(i)
        else:
            out[i] = hit[1]
    if miss:
        if len(miss) == len(msgs) and payload is not None:
            body = payload
        else:
            body = encode_messages([msgs[i] for i in miss])
        for i, n in zip(miss, native.count_messages(body, profile), strict=True):
            out[i] = int(n)
            memo[(id(msgs[i]), profile)] = (msgs[i], out[i])
    return out


def _too_deep(messages: list[Any]) -> int | None:
    """The first message that cannot be encoded for nesting, to name it in the error;
    when each encodes alone (the list failed a few levels deeper in the stack), the one
    nested deepest (:func:`deepest_message`; fresh17 #4: the error had no index)."""
    for i, m in enumerate(messages):
        try:
            _ENCODER.encode(m)
        except RecursionError:
            return i
        except (TypeError, ValueError, msgspec.EncodeError):
            continue
    return deepest_message(messages)


def deepest_message(messages: Any) -> int | None:
    """The index of the message nested deepest (the first of equals) when it is deep
    enough to have run into Python's recursion limit (half of it or more), else ``None``:
    a ``RecursionError`` with only shallow messages is not theirs to explain."""
    if not isinstance(messages, (list, tuple)) or not messages:
        return None
    limit = sys.getrecursionlimit()
    depths = [nesting(m, limit + 1) for m in messages]
    top = max(depths)
    return depths.index(top) if top >= min(MAX_DEPTH, limit) // 2 else None


_F = TypeVar("_F", bound=Callable[..., Any])


def nesting_errors(at: int = 0) -> Callable[[_F], _F]:
    """Decorate a public function taking messages as positional argument ``at`` (or
    keyword ``messages``): a ``RecursionError`` from anywhere inside it, with a message
    nested deep enough to cause it, becomes ``InvalidMessageError("is nested too
    deeply")`` naming that message. Nesting a few levels under the limit passes the first
    read of the messages and fails a few frames deeper, in a later encode (fresh17 #4: a
    bare ``RecursionError`` from ``fit``, ``prune_middle`` and ``trim_turns(tokenizer=)``
    at 989-991 levels)."""

    def wrap(fn: _F) -> _F:
        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except RecursionError:
                messages = args[at] if len(args) > at else kwargs.get("messages")
                index = deepest_message(messages)
                if index is None or messages is None:
                    raise
                reason, field = too_deep(messages[index])
                raise InvalidMessageError(reason, index=index, field=field) from None

        return guarded  # type: ignore[return-value]

    return wrap


_SECOND_SYSTEM = 'an Anthropic request takes one system prompt, its top-level "system"; this is a second'


def _one_system(canonical: Sequence[Message]) -> None:
    """Refuse a system message after a leading one in Anthropic dicts, and in ``Message``
    structs under Anthropic's rules: the leading one stands for the top-level ``system``,
    and the Messages API refuses a system message next to it (the gateway and the CLI
    refuse the same in a body; fresh7 N13; structs were counted, struct18 #1). A system
    message with none leading is taken, as the gateway takes it in a body without a
    top-level ``system``."""
    if canonical and canonical[0].role == "system":
        for i, m in enumerate(canonical[1:], 1):
            if m.role == "system":
                raise InvalidMessageError(_SECOND_SYSTEM, index=i, field="role")


def system_text_only(canonical: Sequence[Message]) -> None:
    """Refuse a part of a system message that is not a :class:`TextPart`, for ``Message``
    structs under Anthropic's rules: the Messages API's ``system`` holds text blocks only,
    and the Anthropic dict path refuses any other block there in these words
    (``message 0, field content[1]: must be a text block``; fresh17b #4: a struct's
    tool call there was counted, then dropped by the trim, and an image kept)."""
    for i, m in enumerate(canonical):
        if m.role == "system":
            for j, p in enumerate(m.content):
                if type(p) is not TextPart:
                    raise InvalidMessageError(_SYSTEM_BLOCK, index=i, field=f"content[{j}]")


def anthropic_sources(canonical: Sequence[Message], format: str) -> None:
    """Refuse an ``image`` or ``document`` block without a valid ``source`` under
    Anthropic's rules, whatever read it, in the Anthropic reader's words (``message 0,
    field content[0].source: must be an object``): the OpenAI reader keeps such a block as
    an :class:`OpaquePart`, and ``validate(m, "anthropic")`` returned ``[]`` for a list
    ``format="anthropic"`` refuses. ``format`` is the shape the messages were read in: an
    OpenAI ``tool`` message's parts are its own ``content[k]``."""
    for i, m in enumerate(canonical):
        for j, p in enumerate(m.content):
            if type(p) is OpaquePart and p.type in _SOURCED:
                _source(p.raw, i, f"content[{j}]")
            elif type(p) is ToolResult:
                at = "content" if format == "openai" and m.role == "tool" else f"content[{j}].content"
                for k, q in enumerate(p.content):
                    if type(q) is OpaquePart and q.type in _SOURCED:
                        _source(q.raw, i, f"{at}[{k}]")


#: The Anthropic block types that must hold a ``source``.
_SOURCED = frozenset({"image", "document"})


def anthropic_systems(canonical: Sequence[Message]) -> None:
    """Anthropic's rules for the system messages of ``Message`` structs, in the dict
    path's words: text parts only (:func:`system_text_only`), then no system message
    after a leading one (:func:`_one_system`; struct18 #1: structs were counted where
    the same dicts are refused)."""
    system_text_only(canonical)
    _one_system(canonical)


def _first_clash(messages: Sequence[Any], stop: int, top_of: int | None = None) -> InvalidMessageError | None:
    """The first of ``messages[:stop]`` (provider dicts, as the caller gave them) in which
    two keys of one object differ only in lone surrogates, named by the path in the
    caller's dict (``message 0, field content[0].input.a``); then, when ``top_of`` is
    given, the top-level keys of that message (the gateway reads those before its role).
    ``None`` when there is none."""
    for i, d in enumerate(messages[:stop]):
        try:
            clean_value(d)
        except KeyClash as clash:
            return _clash_error(clash, i)
        except RecursionError:
            return None  # named as too deep by the caller
    if top_of is not None and isinstance(messages[top_of], Mapping):
        try:
            clean_value(dict.fromkeys(messages[top_of]))
        except KeyClash as clash:
            return _clash_error(clash, top_of)
    return None


def prepare(messages: Any, format: str | None = None) -> Prepared:
    """Check, convert and encode the caller's messages.

    Raises:
        InvalidMessageError: ``messages`` is not a list of messages, or one is malformed
            (the error names the message index and field), or holds two keys of one
            object that differ only in lone surrogates (one key once replaced: ``message
            0: the key "\ufffd" appears more than once``, the gateway's words; fresh10 N4).
        ValueError: ``format`` is not ``"openai"``, ``"anthropic"`` or ``None``.
    """
    if isinstance(messages, (str, bytes, bytearray, dict)) or not isinstance(messages, Sequence):
        raise InvalidMessageError(f"messages must be a list of messages, got {type(messages).__name__}")
    check_name_type(format, "format", "'openai', 'anthropic'")
    if format not in (None, "openai", "anthropic", "canonical"):
        raise ValueError(f"format must be 'openai', 'anthropic' or None, got {shown(format)}")
    given = messages
    messages = list(messages)  # a snapshot: indices stay right if another thread edits the list
    scope = _SCOPE.get()
    if scope is not None:
        # the same list, holding the same objects, prepared already in this scope (the
        # guard's steps prepare the list the step before returned more than once)
        hit = scope.prepared.get((id(given), format))
        if (
            hit is not None
            and hit[0] is given
            and len(hit[1].original) == len(messages)
            and all(a is b for a, b in zip(hit[1].original, messages, strict=True))
        ):
            return hit[1]  # type: ignore[no-any-return]
    prep = _prepare(messages, format)
    if scope is not None:
        scope.prepared[(id(given), format)] = (given, prep)
    return prep


def _check_depth(messages: list[Any], fmt: InputFormat) -> None:
    """Refuse the first message nested more than :data:`MAX_DEPTH` levels deep (the
    message is level 1), before anything recursive (msgspec, :func:`clean_value`) runs
    on it; a fault in an earlier message is raised first, as the adapters read in order
    (fresh14 #10: past Python's recursion limit it was the only bound, and a raised
    limit let msgspec overflow the C stack)."""
    for i, m in enumerate(messages):
        if nested_deeper(m):
            # the messages before it, read as they would be (their faults first)
            if fmt == "canonical":
                _check_canonical(messages[:i])
            else:
                _to_canonical(messages[:i], fmt)
                earlier = _first_clash(messages, i)
                if earlier is not None:
                    raise earlier
                _encode_located(_to_canonical(messages[:i], fmt), messages[:i])
            reason, field = too_deep(m)
            raise InvalidMessageError(reason, index=i, field=field)


def _prepare(messages: list[Any], format: str | None) -> Prepared:
    """:func:`prepare` on a snapshot of the caller's list, ``format`` checked."""
    if format == "canonical" and not all(isinstance(m, Message) for m in messages):
        bad = next(i for i, m in enumerate(messages) if not isinstance(m, Message))
        raise InvalidMessageError(
            f"format='canonical' takes Message structs, got {type(messages[bad]).__name__}; "
            "use 'openai' or 'anthropic' (or None) for dicts",
            index=bad,
        )
    try:
        fmt: InputFormat
        if format is None:
            fmt = detect_format(messages)
        elif messages and all(isinstance(m, Message) for m in messages):
            # (not an empty list: it keeps the format given, which the CLI's inspect
            # names as its count does; fresh43 #2)
            fmt = "canonical"
        else:
            fmt = format  # type: ignore[assignment]
        if depth_unbounded():
            _check_depth(messages, fmt)
        if fmt == "canonical":
            canonical = list(messages)
            payload = _check_canonical(canonical)
        else:
            try:
                canonical = _to_canonical(messages, fmt)
            except InvalidMessageError as exc:
                # two keys that lone surrogates make one, in an earlier message (or at the
                # top of this one), come first, as the gateway reads the body in order
                earlier = None if exc.index is None else _first_clash(messages, exc.index, exc.index)
                if earlier is not None:
                    raise earlier from None
                raise
            try:
                payload = _encode_located(canonical, messages)
            except KeyClash as clash:
                # named where the caller's dict holds it (a message's own keys are
                # "message 0", not the canonical "extra")
                raise _first_clash(messages, len(messages)) or _clash_error(clash) from None
    except RecursionError:
        index = _too_deep(messages)
        reason, field = ("is nested too deeply", None) if index is None else too_deep(messages[index])
        raise InvalidMessageError(reason, index=index, field=field) from None
    if fmt == "anthropic":
        _one_system(canonical)
    if format in ("openai", "anthropic"):
        provider: Provider = format  # type: ignore[assignment]
    else:
        provider = _provider_of(canonical, fmt)
    if fmt == "canonical" and provider == "anthropic":
        anthropic_systems(canonical)
    return Prepared(messages, fmt, provider, canonical, payload)


def apply(prep: Prepared, outcome_json: str) -> TrimResult[Any]:
    """Build the caller-shaped output from the engine's ops."""
    return apply_outcome(prep.original, prep.format, outcome_json)


def apply_outcome(original: Sequence[Any], format: InputFormat, outcome_json: str) -> TrimResult[Any]:
    """Build the caller-shaped output from the engine's outcome JSON, for ``original``
    messages of shape ``format`` (also for input the dict reader read, with no
    :class:`Prepared`)."""
    outcome = _OUTCOME.decode(outcome_json)
    return _build(original, format, [(op.src, op.msg) for op in outcome.messages], outcome.report)


def apply_ops(prep: Prepared, ops: Sequence[tuple[int | None, Message | None]], report: FitReport) -> TrimResult[Any]:
    """Build the caller-shaped output from ``(src, message or None)`` ops (the Rust
    engine's, or ``_reference``'s when a custom token counter drives the trim)."""
    return _build(prep.original, prep.format, ops, report)


def _build(
    original: Sequence[Any],
    format: InputFormat,
    ops: Sequence[tuple[int | None, Message | None]],
    report: FitReport,
) -> TrimResult[Any]:
    out: list[Any] = []
    for src, msg in ops:
        if msg is None:
            assert src is not None
            out.append(original[src])
        elif format == "canonical":
            out.append(msg)
        else:
            out.append(_written(msg, format) if src is None else _in_order_of(_written(msg, format), original[src]))
    return TrimResult(messages=out, report=report)


def _in_order_of(new: Any, old: Any) -> Any:
    """``new``, a changed message written back as a dict, with its keys in the order
    ``old`` (the input message it came from) has them, keys ``old`` lacks after them: a
    rewritten message keeps the caller's layout (``repair --missing drop`` wrote
    ``role`` before the ``content`` the input had first). Same keys, same values."""
    if not isinstance(new, dict) or not isinstance(old, Mapping) or list(new) == [k for k in old if k in new]:
        return new
    return {**{k: new[k] for k in old if k in new}, **new}


@dataclass(frozen=True)
class Read:
    """What :func:`read` returns: the prepared input, its canonical messages as the engine
    reads them (:func:`decoded`), and each one's tokens when the dict reader counted them."""

    prep: Prepared
    messages: list[Message]
    costs: list[int] | None


def read(messages: Any, format: str | None, profile: str | None = None) -> Read:
    """:func:`prepare` then :func:`decoded`, through the native dict reader when it takes
    the input (one walk in Rust instead of the Python adapters, then one decode), and
    with ``profile`` each message's tokens from the same reader.

    The reader builds the canonical messages with the adapters' rules and declines what
    it does not take (``None``: malformed input, lone surrogates, anything but plain
    dicts, lists and strs), which then goes through :func:`prepare`, so errors are
    unchanged. Its JSON decodes to the messages :func:`decoded` gives for the same input.

    Raises:
        InvalidMessageError: as :func:`prepare`.
        ValueError: as :func:`prepare`.
    """
    scope = _SCOPE.get()
    if scope is not None and scope.messages:
        # the scope remembers conversions, decodings and costs of what an earlier step
        # read: cheaper than reading again, and a list read already is not walked again
        prep = prepare(messages, format)
        hit = scope.reads.get((id(prep), profile))
        if hit is not None and hit[0] is prep:
            return Read(prep, list(hit[1]), None if hit[2] is None else list(hit[2]))
        msgs = decoded(prep)
        costs = None if profile is None else message_costs(msgs, profile, prep.payload)
        scope.reads[(id(prep), profile)] = (prep, list(msgs), None if costs is None else list(costs))
        return Read(prep, msgs, costs)
    if fast_reader(messages, format):
        snapshot = messages.copy()  # indices stay right if another thread edits the list
        got = native.read_dicts(snapshot, format)
        if got is not None:
            fmt, provider, text = got
            payload = text.encode()
            msgs = _decode_payload(payload)
            costs = None
            if profile is not None:
                counted = native.count_dicts(snapshot, fmt, profile)
                costs = None if counted is None else [int(n) for n in counted]
            prep = Prepared(snapshot, fmt, provider, msgs, payload)  # type: ignore[arg-type]
            if scope is not None and len(msgs) == len(snapshot):
                # what prepare, decoded and message_costs would remember: each dict's
                # canonical message (decoded from the reader's JSON, which is what
                # decoded() gives for the adapters' one), decoded as itself, and its cost
                ids = list(map(id, msgs))
                keys = [(id(d), fmt) for d in snapshot]
                scope.messages.update(zip(keys, zip(snapshot, msgs, strict=True), strict=True))
                scope.decoded.update(zip(ids, zip(msgs, msgs, strict=True), strict=True))
                scope.plain.update(zip(ids, msgs, strict=True))
                if costs is not None:
                    cost_keys = [(k, profile) for k in ids]
                    scope.costs.update(zip(cost_keys, zip(msgs, costs, strict=True), strict=True))
                # what prepare would make of this list (the same messages, format and
                # provider; the reader's JSON of them) and what read gives for it
                scope.prepared[(id(messages), format)] = (messages, prep)
                if costs is not None or profile is None:
                    scope.reads[(id(prep), profile)] = (prep, list(msgs), None if costs is None else list(costs))
            return Read(prep, msgs, costs)
    prep = prepare(messages, format)
    return Read(prep, decoded(prep), None)


def _decode_payload(payload: bytes) -> list[Message]:
    try:
        out: list[Message] = _CANONICAL.decode(payload)
    except msgspec.DecodeError:  # a number msgspec's decoder refuses (1e400), kept as written
        out = msgspec.convert(loads_keeping_numbers(payload), list[Message])
    return out


def decoded(prep: Prepared) -> list[Message]:
    """The canonical messages exactly as the engine reads them (lone surrogates already
    U+FFFD), for the pure-Python engine; index ``i`` is the caller's message ``i``."""
    scope = _SCOPE.get()
    if scope is not None:
        # messages decoded already in this scope: those very objects; only the others are
        # encoded and decoded (a step's output is mostly its input's messages)
        memo = scope.decoded
        known: list[Message | None] = []
        unknown: list[int] = []
        for i, m in enumerate(prep.canonical):
            hit = memo.get(id(m))  # _recall, inline
            if hit is not None and hit[0] is m:
                known.append(hit[1])
            else:
                known.append(None)
                unknown.append(i)
        if not unknown:
            return known  # type: ignore[return-value]
        if len(unknown) < len(known):
            fresh = _decode_payload(encode_messages([prep.canonical[i] for i in unknown]))
            if len(fresh) == len(unknown):
                for i, d in zip(unknown, fresh, strict=True):
                    memo[id(prep.canonical[i])] = (prep.canonical[i], d)
                    scope.plain[id(d)] = d
                    known[i] = d
                return known  # type: ignore[return-value]
    out = _decode_payload(prep.payload)
    if scope is not None and len(out) == len(prep.canonical):
        # the same object for the same canonical message, so message_costs knows it
        memo = scope.decoded
        for i, m in enumerate(prep.canonical):
            seen = _recall(memo, id(m), m)
            if seen is None:
                memo[id(m)] = (m, out[i])
                scope.plain[id(out[i])] = out[i]
            else:
                out[i] = seen
    return out


native = _native
