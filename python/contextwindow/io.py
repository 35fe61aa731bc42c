"""Reading and writing conversation files for the CLI.

A conversation file is one of: an OpenAI request body, an Anthropic request body, a bare
JSON list of messages, JSONL (one message per line) or a corpus file
(``{"format", "messages", "tools"?, "source", ...}``). :func:`load_conversation` reads any of
them into a :class:`Conversation`; :func:`dump_conversation` writes a new message list back
into the same kind of document.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import msgspec

from .adapters import _scrub, anthropic_to_message, detect_format
from .errors import InvalidMessageError, InvalidRequestError

__all__ = ["Conversation", "DocumentKind", "FileFormat", "dump_conversation", "load_conversation"]

FileFormat = Literal["openai", "anthropic"]
DocumentKind = Literal["openai_body", "anthropic_body", "list", "jsonl", "corpus"]

_BYTE_POS = re.compile(r"\(byte (\d+)\)")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


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


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json_type(value: Any) -> str:
    """JSON's name for a decoded value, as the gateway's errors say it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _duplicate_top_key(text: str, key: str) -> bool:
    """Whether the top-level object of ``text`` (valid JSON) holds ``key`` twice. msgspec
    keeps the last silently; only this rare case (the key's text appears twice) is parsed
    again, with the standard ``json`` module, which shows every pair."""
    last: list[list[tuple[str, Any]]] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        last[:] = [items]  # objects close innermost first: the top level closes last
        return dict(items)

    try:
        json.loads(text, object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return False
    return bool(last) and sum(k == key for k, _ in last[0]) > 1


def _decode(text: str) -> Any:
    """Decode JSON with msgspec; escaped lone surrogates (which msgspec rejects) become U+FFFD.

    Only for those is the standard ``json`` module used, as a fallback.
    """
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        if not _SURROGATE_ESCAPE.search(text):
            raise
        try:
            value = json.loads(text, parse_constant=_reject_constant)
        except ValueError:
            raise exc from None
        return _scrub(value)


def _where(text: str, exc: Exception) -> str:
    """msgspec's message, prefixed with the line and column its byte offset points at."""
    found = _BYTE_POS.search(str(exc))
    if not found:
        return str(exc)
    before = text.encode()[: int(found[1])].decode("utf-8", errors="replace")
    line = before.count("\n") + 1
    column = len(before) - (before.rfind("\n") + 1) + 1
    return f"line {line}, column {column}: {exc}"


def _jsonl(text: str, where: str) -> list[Any] | None:
    """Parse ``text`` as JSONL, or ``None`` when it does not look like JSONL at all."""
    lines = [(n, s) for n, s in enumerate(text.splitlines(), 1) if s.strip()]
    if len(lines) < 2:
        return None
    messages = []
    for n, line in lines:
        try:
            value = _decode(line)
        except msgspec.MsgspecError as exc:
            if not messages:
                return None  # first line is not JSON either: report the whole document
            raise InvalidRequestError(f"{where}: line {n}: invalid JSON: {exc}") from None
        if not isinstance(value, dict):
            if not messages:
                return None
            raise InvalidRequestError(f"{where}: line {n}: expected one message object per line")
        messages.append(value)
    return messages


def _format_of(messages: Sequence[Any]) -> FileFormat:
    return "anthropic" if detect_format(messages) == "anthropic" else "openai"


def load_conversation(path: str | Path, format: str | None = None) -> Conversation:
    """Read a conversation file.

    Invalid UTF-8 is replaced with U+FFFD before parsing. The format is, in order: the
    ``format`` argument, a corpus file's ``"format"`` key, an Anthropic marker of a request
    body (top-level ``system``, tools with ``input_schema``), then
    :func:`~contextwindow.adapters.detect_format` on the messages.

    Args:
        path: the file; ``"-"`` reads standard input (named ``<stdin>`` in messages).
        format: ``"openai"`` or ``"anthropic"`` to skip detection.

    Returns:
        The parsed :class:`Conversation`.

    Raises:
        InvalidRequestError: the file cannot be read, is not JSON/JSONL, or holds no message
            list, or an Anthropic top-level ``system`` is not a string or a list of text
            blocks; the one-line message names the path and, for JSON errors, the position.

    >>> import pathlib, tempfile
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "body.json"
    >>> _ = p.write_text('{"system": "Be brief.", "messages": [{"role": "user", "content": "hi"}]}')
    >>> conv = load_conversation(p)
    >>> conv.format, conv.kind, conv.messages[0]
    ('anthropic', 'anthropic_body', {'role': 'system', 'content': 'Be brief.'})
    """
    stdin = str(path) == "-"
    where = "<stdin>" if stdin else str(path)
    if format not in (None, "openai", "anthropic"):
        raise InvalidRequestError(f"{where}: unknown format {format!r}: expected openai or anthropic")
    explicit = cast("FileFormat | None", format)
    try:
        raw = sys.stdin.buffer.read() if stdin else Path(path).read_bytes()
    except OSError as exc:
        raise InvalidRequestError(f"{where}: cannot read: {exc.strerror or exc}") from None
    # decoded once; only bytes that are not UTF-8 are decoded again, replacing them
    try:
        text, bad = raw.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        text, bad = raw.decode("utf-8", errors="replace"), exc.start
    conv = _parse(text.removeprefix("\ufeff"), where, explicit)
    conv.bad_utf8_at = bad
    return conv


def _parse(text: str, where: str, explicit: FileFormat | None) -> Conversation:
    """The document in ``text`` (BOM removed), named ``where`` in errors."""
    if not text.strip():
        raise InvalidRequestError(f"{where}: the file is empty")
    try:
        doc = _decode(text)
    except msgspec.MsgspecError as exc:
        lines = _jsonl(text, where)
        if lines is None:
            raise InvalidRequestError(f"{where}: invalid JSON: {_where(text, exc)}") from None
        return Conversation(where, explicit or _format_of(lines), "jsonl", lines, None, lines)
    if isinstance(doc, list):
        return Conversation(where, explicit or _format_of(doc), "list", list(doc), None, doc)
    if not isinstance(doc, dict):
        raise InvalidRequestError(
            f"{where}: top-level JSON is {_json_type(doc)}, expected an object with "
            '"messages", a list of messages or JSONL'
        )
    if "messages" not in doc:
        if isinstance(doc.get("role"), str):  # JSONL holding a single message
            return Conversation(where, explicit or _format_of([doc]), "jsonl", [doc], None, [doc])
        raise InvalidRequestError(f'{where}: the top-level object has no "messages" list')
    if text.count('"messages"') > 1 and _duplicate_top_key(text, "messages"):
        # which one would a provider read? The gateway refuses too (fit_request)
        raise InvalidRequestError(f'{where}: the key "messages" appears more than once')
    messages, tools = doc["messages"], doc.get("tools")
    if not isinstance(messages, list):
        raise InvalidRequestError(f'{where}: "messages" is {_json_type(messages)}, not a list')
    if tools is not None and not isinstance(tools, list):
        raise InvalidRequestError(f'{where}: "tools" is {_json_type(tools)}, not a list')
    if "format" in doc:
        if doc["format"] not in ("openai", "anthropic"):
            raise InvalidRequestError(f"{where}: unknown corpus format {doc['format']!r}")
        kind: DocumentKind = "corpus"
        fmt: FileFormat = explicit or doc["format"]
    else:
        anthropic_tools = any(isinstance(t, Mapping) and "input_schema" in t for t in tools or ())
        if explicit is not None:
            fmt = explicit
        elif "system" in doc or anthropic_tools:
            fmt = "anthropic"
        else:
            fmt = _format_of(messages)
        kind = "anthropic_body" if fmt == "anthropic" else "openai_body"
    if fmt == "anthropic" and doc.get("system") is not None:
        messages = [_system_message(doc["system"], where), *messages]
    return Conversation(where, fmt, kind, list(messages), tools, doc)


def _encode(value: Any, where: str) -> bytes:
    try:
        try:
            return msgspec.json.encode(value)
        except UnicodeEncodeError:  # lone surrogates from Python callers: U+FFFD
            return msgspec.json.encode(_scrub(value))
    except (TypeError, ValueError, msgspec.MsgspecError) as exc:
        raise InvalidRequestError(f"{where}: cannot write JSON: {exc}") from None


def dump_conversation(conv: Conversation, messages: list[Any]) -> bytes:
    """Write ``messages`` back into the kind of document ``conv`` was read from.

    Bodies and corpus files keep every other top-level key, with ``"messages"`` replaced; in
    Anthropic format a leading system-role dict goes back to the top-level ``system``
    verbatim (and ``system`` is removed if that message is gone). JSON is pretty-printed
    with a 2-space indent; JSONL gets one compact message per line. Lone surrogates become
    U+FFFD, so the output is always valid UTF-8.

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
    if conv.kind == "jsonl":
        return b"".join(_encode(m, conv.path) + b"\n" for m in messages)
    doc: Any = messages
    if conv.kind != "list":
        doc = dict(conv.document)
        if conv.format == "anthropic":
            first = messages[0] if messages else None
            if isinstance(first, Mapping) and first.get("role") == "system":
                doc["system"] = first.get("content")
                messages = messages[1:]
            elif doc.get("system") is not None:  # it was lifted into messages, then dropped
                del doc["system"]
        doc["messages"] = messages
    return msgspec.json.format(_encode(doc, conv.path), indent=2) + b"\n"
