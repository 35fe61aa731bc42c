"""Reading and writing conversation files for the CLI.

A conversation file is one of: an OpenAI request body, an Anthropic request body, a bare
JSON list of messages, JSONL (one message per line) or a corpus file
(``{"format": "openai"|"anthropic", "messages", "tools"?, "source", ...}``; a ``"format"``
of any other value is a body's unknown key). :func:`load_conversation` reads any of
them into a :class:`Conversation`; :func:`dump_conversation` writes a new message list back
into the same kind of document.
"""

from __future__ import annotations

import codecs
import json
import re
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import msgspec

from . import _native
from ._engine import json_type_name, tool_definition_error
from ._jsontext import (
    MAX_DEPTH,
    KeyClash,
    check_name_type,
    clean_value,
    field_path,
    loads_keeping_numbers,
    nested_deeper,
    quote,
    shown,
)
from .adapters import OPENAI_ONLY_ROLES, anthropic_to_message, detect_format
from .errors import InvalidMessageError, InvalidRequestError

__all__ = [
    "CLI_RECURSION_LIMIT",
    "Conversation",
    "DocumentKind",
    "FileFormat",
    "LoneSurrogates",
    "dump_conversation",
    "load_conversation",
]

FileFormat = Literal["openai", "anthropic"]
DocumentKind = Literal["openai_body", "anthropic_body", "list", "jsonl", "corpus"]

_BYTE_POS = re.compile(r"\(byte (\d+)\)")

#: The recursion limit the CLI runs with (``cli.main`` raises a lower one for the run):
#: room for msgspec, ``json`` and the dict path to walk a file nested
#: :data:`~contextwindow._jsontext.MAX_DEPTH` levels below its top-level values, so the
#: CLI's limit is that fixed one, not its parser's (fresh15 #5: 987 levels from the top of
#: the file). A file nested deeper makes the parser give up well past it, safely.
CLI_RECURSION_LIMIT = MAX_DEPTH + 1_000
_TOO_DEEP = f"is nested too deeply (more than {MAX_DEPTH:,} levels)"
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_QUOTE_SPACE_COLON = re.compile(r'"[ \t\r\n]+:')


@dataclass
class Conversation:
    """A conversation file, parsed.

    Attributes:
        path: the file it came from.
        format: ``"openai"`` or ``"anthropic"``.
        kind: the document's shape: ``openai_body``, ``anthropic_body``, ``list``, ``jsonl``
            or ``corpus``.
        messages: the provider-shaped message dicts; an Anthropic top-level ``system`` is
            the leading ``{"role": "system", "content": <system verbatim>}``.
        tools: the document's ``tools`` list, if any.
        document: the whole parsed top-level value, for writing back.
        bad_utf8_at: byte offset of the first invalid UTF-8 byte (such bytes were read as
            U+FFFD), or ``None``.
        system_lifted: whether ``messages[0]`` is the Anthropic top-level ``system`` (which
            :func:`dump_conversation` writes back there); a system message the file holds
            inside ``messages`` is not lifted.
        lone_surrogate_at: line, column and text of the first escaped lone surrogate
            (``\\ud800`` without its pair, read as U+FFFD), or ``None``.
        lone_surrogates: how many escaped lone surrogates the file holds, and where, as
            :class:`LoneSurrogates`.

    >>> Conversation("c.jsonl", "openai", "jsonl", [], None, []).kind
    'jsonl'
    """

    path: str
    format: FileFormat
    kind: DocumentKind
    messages: list[Any]
    tools: list[Any] | None = None
    document: Any = None
    bad_utf8_at: int | None = None
    system_lifted: bool = False
    #: The first escaped lone surrogate (read as U+FFFD): ``(line, column, escape)``.
    lone_surrogate_at: tuple[int, int, str] | None = None
    #: How many escaped lone surrogates, and the fields that hold them.
    lone_surrogates: LoneSurrogates | None = None
    #: Why the format was taken as Anthropic's when the caller did not name one (a
    #: top-level ``system``, tools with ``input_schema``), for error messages; else ``None``.
    detected_from: str | None = None
    #: When the file holds escaped lone surrogates: :attr:`messages` as the file holds
    #: them, one for one, each lone surrogate kept (a Python string holds it as a code
    #: point), for :func:`dump_conversation` to write back as read; else ``None``.
    messages_as_read: list[Any] | None = None
    #: The same for :attr:`document`.
    document_as_read: Any = None

    def label(self, index: int) -> str:
        """How the file names entry ``index`` of :attr:`messages`: ``message N`` with N its
        index in the file's ``messages`` (a lifted top-level ``system`` is ``system``).

        >>> c = Conversation("a.json", "anthropic", "anthropic_body", [{}, {}], system_lifted=True)
        >>> c.label(0), c.label(1)
        ('system', 'message 0')
        """
        if self.system_lifted:
            return "system" if index == 0 else f"message {index - 1}"
        return f"message {index}"

    def describe(self, exc: InvalidMessageError) -> str:
        """``exc`` (raised on :attr:`messages`) in the file's numbering (:meth:`label`),
        saying why the file was read as Anthropic's when that was guessed.

        >>> c = Conversation("a.json", "anthropic", "anthropic_body", [{}, {}], system_lifted=True)
        >>> c.describe(InvalidMessageError("is missing", index=1, field="content"))
        'message 0, field content: is missing'
        """
        hint = f" (read as an Anthropic body for its {self.detected_from}; --format openai reads it as OpenAI's)"
        hint = hint if self.detected_from else ""
        # the adapters' advice in the CLI's words: its option is --format
        exc = InvalidMessageError(
            exc.reason.replace("pass format='anthropic'", "pass --format anthropic"), index=exc.index, field=exc.field
        )
        if exc.index is None or not self.system_lifted:
            return f"{exc}{hint}"
        if exc.index == 0:  # the lifted system: its content is the top-level value
            field = (exc.field or "content").removeprefix("content")
            return f"system{field}: {exc.reason}{hint}"
        field = f", field {exc.field}" if exc.field is not None else ""
        return f"{self.label(exc.index)}{field}: {exc.reason}{hint}"


def _system_message(system: Any, where: str) -> dict[str, Any]:
    """The leading system message made from an Anthropic top-level ``system``. A bad one is
    named ``system`` (not "message 0, field content", which the file does not hold), in the
    gateway's words (``fit_request``)."""
    if not isinstance(system, (str, list)):
        raise InvalidRequestError(f"{where}: system: must be a string or a list of text blocks")
    message = {"role": "system", "content": system}
    try:
        anthropic_to_message(message, 0)
    except InvalidMessageError as exc:
        field = (exc.field or "content").removeprefix("content")
        raise InvalidRequestError(f"{where}: system{field}: {exc.reason}") from None
    return message


def _openai_marked(messages: list[Any]) -> bool:
    """Whether a message has what only OpenAI's shape has (a ``tool``, ``developer`` or
    ``function`` role, ``tool_calls``, ``tool_call_id``): :data:`~contextwindow.adapters.OPENAI_ONLY_ROLES`."""
    return any(
        isinstance(m, Mapping)
        and (
            (isinstance(role := m.get("role"), str) and role in OPENAI_ONLY_ROLES)
            or "tool_calls" in m
            or "tool_call_id" in m
        )
        for m in messages
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _entries(value: Any) -> int:
    """How many key-value pairs the objects inside ``value`` hold, all levels together."""
    n, stack = 0, [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            n += len(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return n


def _may_repeat_a_key(text: str, value: Any) -> bool:
    r"""Whether the JSON ``text`` may repeat a key inside an object, ``value`` being what
    msgspec decoded from it (keeping the last of repeated keys, silently). False is
    certain; True means: look (:func:`_repeated_key`).

    Every key ends in an unescaped quote, then optional whitespace, then ``:``. Unless the
    text holds a quote, whitespace and a colon, or two backslashes before ``":`` (a key
    ending in an escaped backslash), every key end is a ``":`` with no backslash before
    it, so the text holds at most ``count('":') - count('\":')`` keys (the other ``":``
    are escaped quotes inside strings, or a string that opens with a colon). The decoded
    value holds the keys minus the repeats, so when that bound equals its entry count,
    nothing repeats. Three C string scans and one walk of the decoded value: no second
    parse for the files that do not need one (nearly all).
    """
    if '\\\\":' in text or _QUOTE_SPACE_COLON.search(text):
        return True
    return text.count('":') - text.count('\\":') > _entries(value)


def _repeated_key(text: str) -> tuple[list[str | int], str] | None:
    """The first object in ``text`` (document order) that holds a key twice: its path
    from the top and the key; ``None`` when none does. Parses with the standard ``json``
    module, which shows every pair (msgspec keeps the last silently). A text too deeply
    nested for it counts as holding none (msgspec read it; nothing else can tell)."""

    class Repeats(dict[str, Any]):
        key = ""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        d = dict(items)
        if len(d) == len(items):
            return d
        seen: set[str] = set()
        out = Repeats(d)
        out.key = next(k for k, _ in items if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        return out

    try:
        doc = loads_keeping_numbers(text, object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return None
    stack: list[tuple[Any, list[str | int]]] = [(doc, [])]
    while stack:
        v, path = stack.pop()
        if isinstance(v, Repeats):
            return path, v.key
        if isinstance(v, dict):
            stack.extend((x, [*path, k]) for k, x in reversed(v.items()))
        elif isinstance(v, list):
            stack.extend((x, [*path, i]) for i, x in reversed(list(enumerate(v))))
    return None


def _place(path: list[str | int], shape: Literal["body", "list", "message"], index: int) -> str:
    """Where the object at ``path`` (from the top of the document) is, as the adapters
    name a field (``message 2, field content[0]: ``), or its path from the top when it is
    not in a message (``tools[0]: ``; ``""`` for the top-level object); ``shape`` and
    ``index`` as for :func:`_refuse_repeated_keys`."""
    if shape == "message":
        path = [index, *path]
    elif shape == "body" and path[:1] == ["messages"] and len(path) > 1:
        path = path[1:]
    elif shape == "body":
        path = ["", *path]  # not in a message: named by its path from the top
    if path and isinstance(path[0], int):
        field = field_path(path[1:])
        return f"message {path[0]}" + (f", field {field}" if field else "") + ": "
    return f"{field_path(path[1:])}: " if len(path) > 1 else ""


def _refuse_repeated_keys(
    text: str,
    value: Any,
    where: str,
    shape: Literal["body", "list", "message"],
    index: int = 0,
    *,
    surrogates: bool = False,
    lone: LoneSurrogates | None = None,
) -> Any:
    """Raise when an object in ``text`` repeats a key. Which value counts? msgspec keeps the
    last, other parsers the first, and the CLI writes the whole file back: one of the two
    would vanish silently. The gateway (``fit_request``) refuses the same in what it reads.
    Return ``value``, with its lone surrogates replaced (U+FFFD) when ``surrogates`` says
    it holds some; two keys of one object that differ only in lone surrogates are the
    same key then, and refused as a repeated key, as the gateway refuses the same bytes
    (fresh10 N4: the CLI kept the later value and said "unchanged").

    ``shape`` says where the messages are, to name a repeat inside one as the adapters
    name a field (``message 2, field content[0]``): under ``"messages"`` of a ``body``
    (request or corpus file), at the top of a ``list``, or ``value`` is ``message``
    ``index`` itself (a JSONL line). The lone surrogates ``value`` holds are added to
    ``lone`` (:class:`LoneSurrogates`), naming their fields the same way.
    """
    if _may_repeat_a_key(text, value):
        found = _repeated_key(text)
        if found is not None:
            path, key = found
            place = _place(path, shape, index)
            raise InvalidRequestError(f"{where}: {place}the key {quote(key)} appears more than once")
    if not surrogates:
        return value
    if lone is not None:  # counted, and their fields named, before U+FFFD replaces them
        lone.add(value, lambda path: _place(path, shape, index).removesuffix(": "))
    try:
        return clean_value(value)
    except KeyClash as clash:
        raise InvalidRequestError(f"{where}: {_place(clash.path, shape, index)}{clash.reason()}") from None


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|.)", re.DOTALL)


_LONE = re.compile("[\ud800-\udfff]")


class LoneSurrogates:
    """The escaped lone surrogates of a file (``\\ud800`` without its pair, read as
    U+FFFD; DESIGN.md section 7): how many, and the fields holding them, in document
    order, named as errors name a field (``message 2, field content[0].text``,
    ``tools[0].function.description``, ``system``). A decoded string holds one
    surrogate code point per lone escape (a pair decodes to its character), so they are
    counted in the values before U+FFFD replaces them.

    Attributes:
        count: escaped lone surrogates seen.
        fields: the first :attr:`SHOWN` fields holding one.
        more_fields: how many other fields hold one (a key and its value are one field).

    >>> found = LoneSurrogates()
    >>> found.add({"content": "a\\ud800\\udc00", "name": "b"}, lambda path: f"field {path[0]}")
    >>> found.count, found.fields, found.more_fields
    (2, ['field content'], 0)
    """

    #: how many fields the CLI's warning names
    SHOWN = 3

    def __init__(self) -> None:
        self.count = 0
        self.fields: list[str] = []
        self.more_fields = 0
        self._named: set[str] = set()  # a key and its value holding one are one field

    def add(self, value: Any, name: Callable[[list[str | int]], str]) -> None:
        """Count the lone surrogates in every string and key of ``value`` (not yet
        cleaned); ``name(path)`` names the field at ``path`` (keys and indices from the
        top of ``value``) for the first :attr:`SHOWN`."""
        stack: list[tuple[list[str | int], Any]] = [([], value)]
        while stack:  # depth first, in document order (a key before its value)
            path, v = stack.pop()
            if isinstance(v, str):
                self._string(v, path, name)
            elif isinstance(v, Mapping):
                for k, item in reversed(list(v.items())):
                    stack.append(([*path, k], item))
                    if isinstance(k, str):
                        stack.append(([*path, k], _Key(k)))
            elif isinstance(v, list):
                stack.extend(([*path, i], item) for i, item in reversed(list(enumerate(v))))
            elif isinstance(v, _Key):
                self._string(v.key, path, name)

    def _string(self, text: str, path: list[str | int], name: Callable[[list[str | int]], str]) -> None:
        n = len(_LONE.findall(text)) if _LONE.search(text) else 0
        if not n:
            return
        self.count += n
        field = name(path)
        if field in self._named:
            return
        self._named.add(field)
        if len(self.fields) < self.SHOWN:
            self.fields.append(field)
        else:
            self.more_fields += 1


class _Key:
    """A key of an object, in :meth:`LoneSurrogates.add`'s stack (a key holding a lone
    surrogate names the field it is the key of)."""

    def __init__(self, key: str) -> None:
        self.key = key


def _lone_surrogate(text: str) -> tuple[int, int, str] | None:
    """The first escaped lone surrogate in the JSON ``text`` (``\\ud800`` not followed by
    a low surrogate escape, or a low one not preceded by a high one), which the reader
    takes as U+FFFD: its line, column and escape; ``None`` when there is none."""
    if not _SURROGATE_ESCAPE.search(text):
        return None
    found = None
    for string in _STRING.finditer(text):
        high: re.Match[str] | None = None
        for e in _ESCAPE.finditer(string.group()):
            unit = int(e[1], 16) if e[1] else -1
            if high is not None and e.start() == high.end() and 0xDC00 <= unit <= 0xDFFF:
                high = None  # a pair: one code point
                continue
            if high is not None:
                break
            if 0xD800 <= unit <= 0xDBFF:
                high = e
            elif 0xDC00 <= unit <= 0xDFFF:
                high = e
                break
        if high is not None:
            found = string.start() + high.start(), high.group()
            break
    if found is None:
        return None
    pos, escape = found
    before = text[:pos]
    return before.count("\n") + 1, pos - (before.rfind("\n") + 1) + 1, escape


_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]')


def _deepest(text: str, limit: int) -> tuple[int, int, int, list[str | int], set[str]]:
    """Where the JSON (or JSONL) ``text`` nests deepest, found without parsing it (the
    parsers stop at their recursion limit): how many top-level values the text holds,
    how deep it nests (counted from the top: a top-level value is level 1), which value
    holds the deepest point, the first two steps of the path to it from that value
    (keys and indices, outermost first: all :func:`_too_deep` names), and the keys of
    the first value when it is an object. Strings are skipped whole, so brackets inside
    them do not count. Linear in the text: the whole path, copied at each new depth,
    made a 100,000-deep file take minutes. The scan stops at the first point ``limit``
    levels deep: a 20 MB file of brackets took 12 s to scan whole."""
    stack: list[list[Any]] = []  # [opening bracket, current key or index, expecting a key]
    values, deepest, at, path = 0, 0, 0, []
    top_keys: set[str] = set()
    for m in _TOKEN.finditer(text):
        t = m.group()
        if t in "{[":
            values += not stack
            stack.append([t, 0 if t == "[" else None, t == "{"])
            if len(stack) > deepest:
                deepest, at, path = len(stack), values - 1, [e[1] for e in stack[: min(2, len(stack) - 1)]]
                if deepest >= limit:
                    break
        elif t in "}]":
            if stack:
                stack.pop()
        elif t == ",":
            if stack and stack[-1][0] == "[":
                stack[-1][1] += 1
            elif stack:
                stack[-1][2] = True
        elif stack and stack[-1][2]:  # a string where a key is expected: the key
            try:
                key = json.loads(t)
            except ValueError:
                key = t[1:-1]
            stack[-1][1:] = [key, False]
            if len(stack) == 1 and values == 1:
                top_keys.add(key)
    return values, deepest, at, path, top_keys


_RUN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|\[+|\]+|\{+|\}+|,')


def _top_keys(text: str) -> set[str]:
    """The keys of the object ``text`` starts with, all of them, found without parsing
    (as :func:`_deepest` finds them, which stops at its limit): runs of one bracket are
    one step, so a value nested thousands of levels deep by runs of brackets is skipped
    in a few steps."""
    keys: set[str] = set()
    depth, expect_key = 0, False
    for m in _RUN.finditer(text):
        t = m.group()
        if t[0] in "[{":
            depth += len(t)
            expect_key = depth == 1 and t == "{"
        elif t[0] in "]}":
            depth -= len(t)
            if depth <= 0:
                break
        elif t == ",":
            expect_key = depth == 1
        elif expect_key:
            try:
                keys.add(json.loads(t))
            except ValueError:
                keys.add(t[1:-1])
            expect_key = False
    return keys


def _parser_unbounded() -> bool:
    """Whether a caller raised the recursion limit past the CLI's own, so msgspec would
    walk a text as deep as it nests (and overflow the C stack) instead of giving up."""
    return sys.getrecursionlimit() > CLI_RECURSION_LIMIT


def _deeper_than_any_place(text: str) -> bool:
    """Whether the JSON ``text`` nests more than :data:`MAX_DEPTH` + 2 levels from its top
    (a message in a body is 2 levels down), too deep wherever the deepest point is:
    ``_native.nests_as_deep``, which finds the point :func:`_deepest` finds (tools19: the
    scan in Python read a 25 MB file in 1.5 s)."""
    return _native.nests_as_deep(text, MAX_DEPTH + 3)


def _too_deep_text(text: str, where: str) -> InvalidRequestError:
    """The error for a ``text`` the parser cannot read whole for its depth, found as a
    shallow text's would be: when it is one JSON value, the place in it nested too deeply
    (:func:`_too_deep`); else, as JSONL when :func:`_jsonl` takes it, its first bad line's
    (a line nested too deeply is ``message N``, unless it is no message object or a
    request body, named as such lines are); else the document's syntax error,
    ``trailing characters`` where a second value starts. The syntax check read the text
    as a stream of values (tools19): two values on one line were JSONL there and a
    ``trailing characters`` error elsewhere, a JSONL file's bad line was named as a
    document's (``invalid JSON: line 3, column 1: ...``), and the first line's depth
    hid what a later line held."""
    if _syntax_error(text) is None:
        return _too_deep(text, where)
    try:
        lines = _jsonl(text, where, guard_depth=True)
    except InvalidRequestError as exc:
        return exc
    if lines is None:
        return InvalidRequestError(f"{where}: invalid JSON: {_syntax_error(text)}")
    return _too_deep(text, where)  # every line read: not reached, a line holds the depth


def _too_deep(text: str, where: str) -> InvalidRequestError:
    """The error for a ``text`` holding one JSON value nested deeper than the parser
    reads, naming the message that holds the first point too deep for any place
    (:data:`MAX_DEPTH` + 3 levels from the top, or the recursion limit when lower) as the
    dict path names the first message nested too deeply (``message 1``), or the tool
    definition (``tools[0]``) or other top-level value (``x``, ``system``) when no
    message does. It searched up to the recursion limit, so a later message deeper still
    was named (tools19), and the search read that far, the whole text when nothing was
    that deep. At the CLI's recursion limit (:data:`CLI_RECURSION_LIMIT`) the parser
    gives up far past :data:`~contextwindow._jsontext.MAX_DEPTH`, and the error says that
    limit (fresh15 #5); a caller of :func:`load_conversation` with a lower recursion
    limit gets the parser's own, unnamed."""
    _, _, _, path, top_keys = _deepest(text, min(sys.getrecursionlimit(), MAX_DEPTH + 3))
    if path and isinstance(path[0], str) and not {"messages", "role"} & top_keys:
        # the scan stopped inside the value of key path[0]: keys after it were not read
        # (small20: a one message file whose deep key came before "role" was named by
        # that key, where the dict path names message 0)
        top_keys = _top_keys(text)
    if path and isinstance(path[0], int):  # a list of messages
        place = f"message {path[0]}"
    elif path[:1] == ["messages"] and len(path) > 1 and isinstance(path[1], int):
        place = f"message {path[1]}"
    elif path[:1] == ["tools"] and len(path) > 1 and isinstance(path[1], int):
        place = f"tools[{path[1]}]"
    elif "messages" not in top_keys and "role" in top_keys:  # one message
        place = "message 0"
    else:  # the top-level value that holds it, not a step inside (fresh15 #5: "x[0]")
        place = field_path(path[:1]) or "the document"
    named = sys.getrecursionlimit() >= CLI_RECURSION_LIMIT
    return InvalidRequestError(f"{where}: {place}: {_TOO_DEEP if named else 'is nested too deeply'}")


def _nesting_error(doc: Any, kind: Literal["list", "body"], where: str) -> InvalidRequestError | None:
    """The error for the first value of a parsed document nested more than
    :data:`~contextwindow._jsontext.MAX_DEPTH` levels deep, counted as the dict path
    counts (a message is level 1, so is a tool definition and any other top-level value;
    an Anthropic top-level ``system`` is level 2, the content of the message it becomes),
    or ``None``. ``doc`` is a ``list`` of messages (``kind`` ``list``) or a body's object
    (``body``). Walked without recursion (fresh15 #5: the limit was the parser's, 987
    levels from the top of the file)."""
    places: list[tuple[str, Any, int]]
    if kind == "list":
        places = [(f"message {i}", m, MAX_DEPTH) for i, m in enumerate(doc)]
    else:
        places = []
        for key, value in doc.items():
            if key in ("messages", "tools") and isinstance(value, list):
                named = "message {}" if key == "messages" else "tools[{}]"
                places.extend((named.format(i), m, MAX_DEPTH) for i, m in enumerate(value))
            else:
                places.append((field_path([key]), value, MAX_DEPTH - 1 if key == "system" else MAX_DEPTH))
    for place, value, limit in places:
        if nested_deeper(value, limit):
            return InvalidRequestError(f"{where}: {place}: {_TOO_DEEP}")
    return None


def _syntax_error(text: str, one_value: bool = True) -> str | None:
    """Why ``text`` is not one JSON value (or, not ``one_value``, not a sequence of them,
    one a line as in JSONL), with its line and column (``line 1, column 50001: EOF while
    parsing a list (byte 50000)``), or ``None`` when it is JSON; serde_json checks it
    (``_native.json_syntax_error``), at any depth and without building it.

    Every syntax error the CLI reports comes from here or :func:`_line_syntax_error`, so
    it names the problem and the byte the gateway names (``fit_request``'s ``.offset``:
    the first byte that cannot be there, 0-based), in its words, not msgspec's: msgspec
    put some one byte further (a trailing character, an invalid escape, a second value:
    fresh17c #5), named a lone surrogate escape, which the CLI reads, in place of the real
    error after it (fresh17b #6, #8), and said "Input data was truncated" with no byte
    where the gateway says "EOF while parsing a list"."""
    found = _native.json_syntax_error(text, one_value)
    if found is None:
        return None
    offset, reason = found
    return _where(text, msgspec.DecodeError(f"{reason} (byte {offset})")) if offset is not None else reason


def _line_syntax_error(line: str, start: int) -> str | None:
    """Why the JSONL ``line`` is not one JSON value, or ``None`` when it is: serde_json's
    words, as for a whole document (:func:`_syntax_error`), and the byte of the text the
    line is in, ``start`` being the line's first (``load_conversation`` makes it the
    file's byte)."""
    found = _native.json_syntax_error(line, True)
    if found is None:
        return None
    offset, reason = found
    return f"{reason} (byte {start + offset})" if offset is not None else reason


def _decode(text: str) -> tuple[Any, bool]:
    """Decode JSON with msgspec, and say whether the value holds lone surrogates: escaped
    ones (which msgspec rejects) are kept, for :func:`_refuse_repeated_keys` to replace
    with U+FFFD; a number msgspec refuses as out of range (``1e400``, an integer of 4,300
    digits or more) is kept as written, as the gateway keeps it (fresh8 N5).

    Only for those is the standard ``json`` module used, as a fallback
    (:func:`~contextwindow._jsontext.loads_keeping_numbers`).
    """
    try:
        return msgspec.json.decode(text), False
    except msgspec.DecodeError as exc:
        surrogates = _SURROGATE_ESCAPE.search(text) is not None
        out_of_range = "out of range" in str(exc)
        if not (surrogates or out_of_range):
            raise
        try:
            value = loads_keeping_numbers(text, parse_constant=_reject_constant)
        except ValueError:  # a syntax error (JSONDecodeError), NaN or Infinity (_reject_constant)
            # not JSON: serde_json, which refuses every text json refuses, names the error
            # (_syntax_error); msgspec's words, or json's, are never shown
            raise exc from None
        return value, surrogates


def _where(text: str, exc: Exception) -> str:
    """The error's message, prefixed with the line and column its ``(byte N)`` points at."""
    found = _BYTE_POS.search(str(exc))
    if not found:
        return str(exc)
    offset = int(found[1])
    before = text.encode()[:offset].decode("utf-8", errors="replace")
    line = before.count("\n") + 1
    column = len(before) - (before.rfind("\n") + 1) + 1
    return f"line {line}, column {column}: {exc}"


def _jsonl(
    text: str,
    where: str,
    found: LoneSurrogates | None = None,
    as_read: list[Any] | None = None,
    guard_depth: bool = False,
) -> list[Any] | None:
    """Parse ``text`` as JSONL, or ``None`` when it does not look like JSONL at all; each
    line's value as read (lone surrogates kept) is added to ``as_read``.

    Lines end at ``\n`` only (JSON Lines): ``str.splitlines`` also splits at U+2028,
    U+0085 and the other Unicode line breaks, which JSON strings may hold as they are, and
    a message holding one was refused as invalid JSON (found after fresh9 B5).

    A line too deep for the parser is named as a shallow line in its place would be: not
    JSON, not an object or a request body in the words for those, else ``message N``
    (:func:`_deep_line`). With ``guard_depth`` (a text known to nest too deeply) and a
    recursion limit past the CLI's, a line that deep is not given to the parser, which
    would walk as deep as it nests."""
    lines, start = [], 0  # (number, line, where it starts in `text`: a character index)
    for n, s in enumerate(text.split("\n"), 1):
        if s.strip():
            lines.append((n, s, start))
        start += len(s) + 1
    if len(lines) < 2:
        return None
    messages: list[Any] = []
    guard = guard_depth and _parser_unbounded()

    def body_then_junk(k: int) -> bool:
        # the first line is a request body and the next is not JSON: one body with
        # something after it, not JSONL of bodies; the document's error says where
        # (small20: "trailing characters" at line 2, as the gateway says; it was
        # "line 1: a request body ..., pass one request body per file")
        return k == 0 and _native.json_syntax_error(lines[1][1], True) is not None

    for k, (n, line, at) in enumerate(lines):
        try:
            if guard and _deeper_than_any_place(line):
                raise RecursionError  # as the parser would, had it a limit
            value, surrogates = _decode(line)
        except RecursionError:
            error = _deep_line(line, n, len(text[:at].encode()), len(messages), where)
            if error is None or (str(error) == str(_body_line(where, n)) and body_then_junk(k)):
                return None  # the first line is not a message: the whole document
            raise error from None
        except msgspec.MsgspecError as exc:
            if not messages:
                return None  # first line is not JSON either: report the whole document
            bad = _line_syntax_error(line, len(text[:at].encode())) or str(exc)
            raise InvalidRequestError(f"{where}: line {n}: invalid JSON: {bad}") from None
        if not isinstance(value, dict):
            if not messages:
                return None
            raise InvalidRequestError(f"{where}: line {n}: expected one message object per line")
        if "messages" in value and "role" not in value:
            if body_then_junk(k):
                return None
            # a log of request bodies, one a line (fresh18 F3: it was "message 0, field
            # role: is missing", naming no line)
            raise _body_line(where, n)
        if nested_deeper(value):
            raise InvalidRequestError(f"{where}: message {len(messages)}: {_TOO_DEEP}")
        messages.append(
            _refuse_repeated_keys(line, value, where, "message", len(messages), surrogates=surrogates, lone=found)
        )
        if as_read is not None:
            as_read.append(value)
    return messages


def _body_line(where: str, n: int) -> InvalidRequestError:
    """The error for JSONL line ``n`` holding a request body (fresh18 F3)."""
    return InvalidRequestError(
        f'{where}: line {n}: a request body (it has "messages"), where JSONL holds one message'
        " per line; pass one request body per file"
    )


def _deep_line(line: str, n: int, start: int, index: int, where: str) -> InvalidRequestError | None:
    """The error for JSONL line ``n`` (its first byte ``start`` in the text), nested too
    deeply for the parser, ``index`` messages read before it: the words :func:`_jsonl`
    has for a shallow line in its place, or ``None`` (the first line is not a message
    object, so the text is not JSONL)."""
    bad = _line_syntax_error(line, start)
    is_object = line.lstrip().startswith("{")
    if bad is not None or not is_object:
        if not index:
            return None
        if bad is not None:
            return InvalidRequestError(f"{where}: line {n}: invalid JSON: {bad}")
        return InvalidRequestError(f"{where}: line {n}: expected one message object per line")
    keys = _deepest(line, len(line) + 1)[4]  # the keys of the line's object, all read
    if "messages" in keys and "role" not in keys:
        return _body_line(where, n)
    named = _TOO_DEEP if sys.getrecursionlimit() >= CLI_RECURSION_LIMIT else "is nested too deeply"
    return InvalidRequestError(f"{where}: message {index}: {named}")


def _format_of(messages: Sequence[Any]) -> FileFormat:
    return "anthropic" if detect_format(messages) == "anthropic" else "openai"


def load_conversation(path: str | Path, format: str | None = None) -> Conversation:
    """Read a conversation file.

    Invalid UTF-8 is replaced with U+FFFD before parsing. The format is, in order: the
    ``format`` argument, a top-level ``"format"`` key whose value is exactly ``"openai"``
    or ``"anthropic"`` (a corpus file; ``fit_request`` reads the key the same way; any
    other value is an unknown key, kept), an Anthropic marker of a request body (top-level
    ``system``, tools with ``input_schema``), then
    :func:`~contextwindow.adapters.detect_format` on the messages.

    Args:
        path: the file; ``"-"`` reads standard input (named ``<stdin>`` in messages).
        format: ``"openai"`` or ``"anthropic"`` to skip detection.

    Returns:
        The parsed :class:`Conversation`.

    Raises:
        InvalidRequestError: the path is empty (``'': no file name``), the file cannot be
            read, is not JSON/JSONL, or holds no message
            list, or an Anthropic top-level ``system`` is not a string or a list of text
            blocks, or an object repeats a key (anywhere: the whole file is written back;
            two keys that differ only in lone surrogates are one key once read);
            the one-line message names the path and, for JSON errors, the position.
        TypeError: ``format`` is neither a string nor ``None``.

    >>> import pathlib, tempfile
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "body.json"
    >>> _ = p.write_text('{"system": "Be brief.", "messages": [{"role": "user", "content": "hi"}]}')
    >>> conv = load_conversation(p)
    >>> conv.format, conv.kind, conv.messages[0]
    ('anthropic', 'anthropic_body', {'role': 'system', 'content': 'Be brief.'})
    """
    stdin = str(path) == "-"
    where = "<stdin>" if stdin else str(path)
    check_name_type(format, "format", "'openai', 'anthropic'")
    if format not in (None, "openai", "anthropic"):
        raise InvalidRequestError(f"{where}: unknown format {shown(format)}: expected openai or anthropic")
    explicit = cast("FileFormat | None", format)
    if str(path) == "":  # Path("") is the current directory: "cannot read: Is a directory"
        raise InvalidRequestError("'': no file name")
    try:
        raw = sys.stdin.buffer.read() if stdin else Path(path).read_bytes()
    except OSError as exc:
        raise InvalidRequestError(f"{where}: cannot read: {exc.strerror or exc}") from None
    # decoded once; only bytes that are not UTF-8 are decoded again, replacing them
    try:
        text, bad = raw.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        text, bad = raw.decode("utf-8", errors="replace"), exc.start
    bom = text.startswith("\ufeff")
    text = text.removeprefix("\ufeff")
    found = LoneSurrogates()
    try:
        conv = _parse(text, where, explicit, found)
    except InvalidRequestError as exc:
        # a syntax error names a byte of the decoded text (a whole document's, or a JSONL
        # line's): the file's instead
        if (bad is None and not bom) or not _SYNTAX_ERROR.match(str(exc), len(where)):
            raise
        raise InvalidRequestError(_file_bytes(str(exc), raw, bom, bad)) from None
    conv.bad_utf8_at = bad
    conv.lone_surrogate_at = _lone_surrogate(text)
    conv.lone_surrogates = found if found.count else None
    return conv


_BYTE_AT = re.compile(r"\(byte (\d+)\)")
#: A syntax error's message after its ``where``: the whole document's, or a JSONL line's.
_SYNTAX_ERROR = re.compile(r": (line \d+: )?invalid JSON: ")

#: The error handler :func:`_file_bytes` decodes with: "replace", recording each run it
#: replaces in this thread's ``_RECORDED.spans``.
_RECORD = "contextwindow-record"
_RECORDED = threading.local()


def _record(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    spans = getattr(_RECORDED, "spans", None)
    if spans is not None:
        spans.append((exc.start, exc.end))
    return "\ufffd", exc.end


codecs.register_error(_RECORD, _record)


def _file_bytes(message: str, raw: bytes, bom: bool, bad: int | None) -> str:
    """An error about the decoded text (``(byte N)``: a byte of its UTF-8, without the
    BOM, every invalid byte read as U+FFFD's 3) with the file's own byte in place of N,
    and where the file stops being UTF-8 (fresh17c #3: 58 for an error at byte 48 of a file
    holding five invalid bytes, and no word of them)."""
    spans: list[tuple[int, int]] = []  # (start, end) in `raw` of each run read as U+FFFD
    if bad is not None:
        # one more decode, recording what "replace" replaced (decoding the rest again
        # after each run was quadratic in a file full of invalid bytes)
        _RECORDED.spans = spans
        try:
            raw.decode("utf-8", errors=_RECORD)
        finally:
            _RECORDED.spans = None

    def to_file(offset: int) -> int:
        at = offset + (3 if bom else 0)  # in the decoded text's UTF-8, BOM put back
        shift = 0  # bytes the replacements added before `at`
        for s, e in spans:
            replaced = s + shift  # where this run's U+FFFD starts in the decoded UTF-8
            if at < replaced:
                break
            if at < replaced + 3:
                return s
            shift += 3 - (e - s)
        return at - shift

    out = _BYTE_AT.sub(lambda m: f"(byte {to_file(int(m.group(1)))})", message)
    if bad is not None:
        out += f"; the file is not UTF-8 from byte {bad} (such bytes read as U+FFFD)"
    return out


def _parse(text: str, where: str, explicit: FileFormat | None, found: LoneSurrogates | None = None) -> Conversation:
    """The document in ``text`` (BOM removed), named ``where`` in errors; the lone
    surrogates it holds are added to ``found``."""
    if not text.strip():
        raise InvalidRequestError(f"{where}: the file is empty")
    if _parser_unbounded() and _deeper_than_any_place(text):
        # a caller raised the recursion limit past the CLI's own: the parser would walk
        # as deep as the text, and overflow the stack (fresh14 #10); a message in a
        # body is 2 levels down, so deeper than that is too deep wherever it is
        raise _too_deep_text(text, where)
    try:
        doc, surrogates = _decode(text)
    except RecursionError:
        raise _too_deep_text(text, where) from None
    except msgspec.MsgspecError as exc:
        read: list[Any] = []
        lines = _jsonl(text, where, found, read)
        if lines is None:
            raise InvalidRequestError(f"{where}: invalid JSON: {_syntax_error(text) or _where(text, exc)}") from None
        conv = Conversation(where, explicit or _format_of(lines), "jsonl", lines, None, lines)
        if found is not None and found.count:
            conv.messages_as_read = conv.document_as_read = read
        return conv
    raw = doc if surrogates else None  # as read, lone surrogates kept
    deep = None
    if isinstance(doc, list):
        deep = _nesting_error(doc, "list", where)
    elif isinstance(doc, dict):
        one = "messages" not in doc and isinstance(doc.get("role"), str)
        deep = _nesting_error([doc] if one else doc, "list" if one else "body", where)
    if deep is not None:
        raise deep
    if isinstance(doc, list):
        doc = _refuse_repeated_keys(text, doc, where, "list", surrogates=surrogates, lone=found)
        conv = Conversation(where, explicit or _format_of(doc), "list", list(doc), None, doc)
        if raw is not None:
            conv.messages_as_read, conv.document_as_read = list(raw), raw
        return conv
    if not isinstance(doc, dict):
        raise InvalidRequestError(
            f"{where}: top-level JSON is {json_type_name(doc)}, expected an object with "
            '"messages", a list of messages or JSONL'
        )
    one_message = "messages" not in doc and isinstance(doc.get("role"), str)
    shape: Literal["message", "body"] = "message" if one_message else "body"
    doc = _refuse_repeated_keys(text, doc, where, shape, surrogates=surrogates, lone=found)
    if "messages" not in doc:
        if one_message:  # JSONL holding a single message
            conv = Conversation(where, explicit or _format_of([doc]), "jsonl", [doc], None, [doc])
            if raw is not None:
                conv.messages_as_read = conv.document_as_read = [raw]
            return conv
        raise InvalidRequestError(f'{where}: the top-level object has no "messages" list')
    messages, tools = doc["messages"], doc.get("tools")
    if not isinstance(messages, list):
        raise InvalidRequestError(f'{where}: "messages" is {json_type_name(messages)}, not a list')
    if tools is not None and not isinstance(tools, list):
        raise InvalidRequestError(f'{where}: "tools" is {json_type_name(tools)}, not a list')
    for i, t in enumerate(tools or ()):
        # every command refuses it, as count and fit do (validate and repair, which do
        # not count the tools, used to pass such a file; fresh11 N2)
        # and a function that is not an object, a name that is not a string (fresh12 O4)
        if (wrong := tool_definition_error(i, t)) is not None:
            raise InvalidRequestError(f"{where}: {wrong}")
    detected_from: str | None = None
    declared = doc.get("format")
    if declared in ("openai", "anthropic"):
        # the corpus convention, which fit_request/count_request honour the same way; any
        # other "format" (Ollama's "json" or a JSON schema for structured output, null)
        # is an unknown key, copied (fresh16a F1)
        kind: DocumentKind = "corpus"
        fmt: FileFormat = explicit or declared
    else:
        anthropic_tools = any(isinstance(t, Mapping) and "input_schema" in t for t in tools or ())
        if explicit is not None:
            fmt = explicit
        elif "system" in doc or anthropic_tools:
            fmt = "anthropic"
            if _openai_marked(messages):  # an error will then say why it was read so
                detected_from = 'top-level "system"' if "system" in doc else 'tools with "input_schema"'
        else:
            fmt = _format_of(messages)
        kind = "anthropic_body" if fmt == "anthropic" else "openai_body"
    lifted = fmt == "anthropic" and doc.get("system") is not None
    if lifted:
        messages = [_system_message(doc["system"], where), *messages]
    conv = Conversation(where, fmt, kind, list(messages), tools, doc, system_lifted=lifted, detected_from=detected_from)
    if raw is not None:
        system = [{"role": "system", "content": raw["system"]}] if lifted else []
        conv.messages_as_read, conv.document_as_read = [*system, *raw["messages"]], raw
    return conv


# U+0085, U+2028, U+2029 in UTF-8 (each lead byte starts a character, so these bytes
# are always those characters; msgspec writes non-ASCII only inside strings)
_LINE_BREAK_BYTES = ((b"\xc2\x85", b"\\u0085"), (b"\xe2\x80\xa8", b"\\u2028"), (b"\xe2\x80\xa9", b"\\u2029"))


def escape_line_breaks(data: bytes) -> bytes:
    """JSON text (UTF-8) with U+0085, U+2028 and U+2029 written as the escapes ``\\u0085``,
    ``\\u2028``, ``\\u2029``: JSON strings may hold them as they are (msgspec writes them
    so), but Python's ``str.splitlines`` splits a line there, so a JSON Lines reader that
    uses it would read a line in two (fresh10 N7). The same JSON value; every other byte
    kept. What the CLI writes goes through here.

    >>> escape_line_breaks('["a\\u2028b\\x85"]'.encode())
    b'["a\\\\u2028b\\\\u0085"]'
    """
    for raw, escaped in _LINE_BREAK_BYTES:
        data = data.replace(raw, escaped)
    return data


def _encode(value: Any, where: str) -> bytes:
    try:
        try:
            return msgspec.json.encode(value)
        except UnicodeEncodeError:  # lone surrogates from Python callers: U+FFFD
            return msgspec.json.encode(clean_value(value))
    except KeyClash as clash:  # never written with one of the two values dropped
        place = f"{field_path(clash.path)}: " if clash.path else ""
        raise InvalidRequestError(f"{where}: cannot write JSON: {place}{clash.reason()}") from None
    except (TypeError, ValueError, msgspec.MsgspecError) as exc:
        raise InvalidRequestError(f"{where}: cannot write JSON: {exc}") from None


def dump_conversation(conv: Conversation, messages: list[Any]) -> bytes:
    """Write ``messages`` back into the kind of document ``conv`` was read from.

    Bodies and corpus files keep every other top-level key, with ``"messages"`` replaced; a
    system prompt stays where the file had it: one read from an Anthropic top-level
    ``system`` (:attr:`Conversation.system_lifted`) goes back there verbatim (and
    ``system`` is removed if that message is gone), a system message inside ``messages``
    stays in ``messages``, as ``fit_request`` writes the same bytes. JSON is pretty-printed
    with a 2-space indent; JSONL gets one compact message per line. An escaped lone
    surrogate of the file (``\\ud800``) is written back as that escape in what the file
    held (the other keys, a top-level ``system``, every message of ``conv.messages``
    passed back, the same object), as ``fit_request`` keeps it on the same bytes; in a
    message the engine or the caller made, a lone surrogate becomes U+FFFD, so the output
    is always UTF-8. U+0085, U+2028 and U+2029 are written as JSON escapes
    (:func:`escape_line_breaks`), so ``str.splitlines`` reads JSONL output line by line.

    Args:
        conv: the conversation as loaded.
        messages: the new provider-shaped message list.

    Returns:
        The file's new content, UTF-8 encoded, ending with a newline.

    Raises:
        InvalidRequestError: a message holds a value JSON cannot represent.

    >>> conv = Conversation("c.jsonl", "openai", "jsonl", [], None, [])
    >>> dump_conversation(conv, [{"role": "user", "content": "hi"}])
    b'{"role":"user","content":"hi"}\\n'
    """
    messages = list(messages)
    if conv.messages_as_read is None:
        return _dump(conv, messages, None)
    for mark in _MARKS:
        marks = _Marks(mark)
        data = _dump(conv, messages, marks)
        if data.count(marks.encoded) == marks.count:  # every one a mark: none was in the text
            return marks.unmark(data)
    return _dump(conv, messages, None)  # every mark is in the text: U+FFFD


#: Characters :class:`_Marks` may stand in for a lone surrogate with: Unicode's
#: noncharacters U+FDD0-U+FDEF, never in text meant for interchange; the first that the
#: output does not otherwise hold is taken.
_MARKS = [chr(c) for c in range(0xFDD0, 0xFDF0)]
_MARKED = re.compile(r"[\ud800-\udfff]")


class _Marks:
    """Lone surrogates written back as the file's escapes: msgspec writes no lone
    surrogate (a Python string holds one as a code point, which UTF-8 cannot encode), so
    each is written as ``mark`` and its 4 hex digits, which :meth:`unmark` turns into the
    escape ``\\udXXX`` in the JSON text (after msgspec's indenting, which refuses a lone
    surrogate escape).

    >>> m = _Marks("\\ufdd0")
    >>> m.unmark(msgspec.json.encode(m.apply({"k\\udc00": ["a\\ud800"]})))
    b'{"k\\\\udc00":["a\\\\ud800"]}'
    """

    def __init__(self, mark: str) -> None:
        self.mark = mark
        self.encoded = mark.encode()
        self.count = 0  # marks written by apply
        self._escape = re.compile(re.escape(self.encoded) + b"([0-9a-f]{4})")

    def _sub(self, found: re.Match[str]) -> str:
        self.count += 1
        return f"{self.mark}{ord(found.group()):04x}"

    def apply(self, value: Any) -> Any:
        """``value`` (a JSON value as read) with every lone surrogate marked, as a copy
        where one is (keys included)."""
        if isinstance(value, str):
            return _MARKED.sub(self._sub, value) if _MARKED.search(value) else value
        if isinstance(value, dict):
            return {self.apply(k): self.apply(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.apply(v) for v in value]
        return value

    def unmark(self, data: bytes) -> bytes:
        """JSON text with every mark and its digits written as the escape."""
        return self._escape.sub(rb"\\u\1", data)


def _dump(conv: Conversation, messages: list[Any], marks: _Marks | None) -> bytes:
    """:func:`dump_conversation`, with the file's lone surrogates marked by ``marks``
    (``None``: U+FFFD)."""
    if marks is not None and conv.messages_as_read is not None:
        as_read = {id(m): r for m, r in zip(conv.messages, conv.messages_as_read, strict=True)}
        messages = [marks.apply(as_read[id(m)]) if id(m) in as_read else m for m in messages]
    if conv.kind == "jsonl":
        return escape_line_breaks(b"".join(_encode(m, conv.path) + b"\n" for m in messages))
    doc: Any = messages
    if conv.kind != "list":
        if marks is not None and conv.document_as_read is not None:
            # keys and values as read, in their order ("messages" and a lifted "system",
            # replaced below, left unmarked: a mark must be written to count)
            replaced = ("messages", "system") if conv.system_lifted else ("messages",)
            doc = {marks.apply(k): v if k in replaced else marks.apply(v) for k, v in conv.document_as_read.items()}
        else:
            doc = dict(conv.document)
        if conv.system_lifted:
            # only a system the reading lifted out of the top-level ``system`` goes back
            # there; a system message the file held in ``messages`` stays in ``messages``,
            # as ``fit_request`` keeps it on the same bytes (fresh14 finding 5)
            first = messages[0] if messages else None
            if isinstance(first, Mapping) and first.get("role") == "system":
                doc["system"] = first.get("content")
                messages = messages[1:]
            else:  # it was lifted into messages, then dropped
                del doc["system"]
        doc["messages"] = messages
    return escape_line_breaks(msgspec.json.format(_encode(doc, conv.path), indent=2)) + b"\n"
