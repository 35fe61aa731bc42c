"""Bridge between the public API and the Rust engine (``contextwindow._native``).

Turns any accepted input (OpenAI dicts, Anthropic dicts, ``Message`` structs) into the
canonical JSON the engine reads, and applies the engine's answer back onto the caller's
objects: an unchanged message is returned as the very object given; a changed or new
message is converted to the caller's shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from . import _native
from .adapters import detect_format, from_canonical, to_canonical
from .errors import InvalidMessageError
from .messages import Message
from .report import FitReport, TrimResult

Provider = Literal["openai", "anthropic"]
InputFormat = Literal["openai", "anthropic", "canonical"]

_ENCODER = msgspec.json.Encoder()


class _Op(msgspec.Struct, frozen=True):
    src: int | None
    msg: Message | None = None


class _Outcome(msgspec.Struct, frozen=True):
    messages: list[_Op]
    report: FitReport


_OUTCOME = msgspec.json.Decoder(_Outcome)


def clean_str(s: str) -> str:
    """Replace lone surrogates with U+FFFD (one per surrogate); other text unchanged.

    >>> clean_str("ab\\ud83d")
    'ab\\ufffd'
    """
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return clean_str(value)
    if isinstance(value, dict):
        return {clean_str(k) if isinstance(k, str) else k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def encode_messages(messages: Sequence[Message]) -> bytes:
    """Canonical messages as the JSON the engine reads (lone surrogates replaced)."""
    try:
        return _ENCODER.encode(messages)
    except UnicodeEncodeError:
        return _ENCODER.encode(_clean(msgspec.to_builtins(messages)))


@dataclass(frozen=True)
class Prepared:
    """Input made ready for the engine."""

    original: Sequence[Any]
    format: InputFormat
    provider: Provider
    canonical: list[Message]
    payload: bytes


def _provider_of(messages: Sequence[Message]) -> Provider:
    for m in messages:
        if m.role == "tool":
            return "openai"
        if m.role == "user" and any(p.__class__.__name__ == "ToolResult" for p in m.content):
            return "anthropic"
    return "openai"


def prepare(messages: Any, format: str | None = None) -> Prepared:
    """Check, convert and encode the caller's messages.

    Raises:
        InvalidMessageError: ``messages`` is not a list of messages, or one is malformed.
    """
    if isinstance(messages, (str, bytes, bytearray, dict)) or not isinstance(messages, Sequence):
        raise InvalidMessageError(f"messages must be a list of messages, got {type(messages).__name__}")
    if format not in (None, "openai", "anthropic", "canonical"):
        raise ValueError(f"format must be 'openai', 'anthropic' or None, got {format!r}")
    fmt: InputFormat
    if format is None:
        fmt = detect_format(messages)
    elif all(isinstance(m, Message) for m in messages):
        fmt = "canonical"
    else:
        fmt = format  # type: ignore[assignment]
    canonical = list(messages) if fmt == "canonical" else to_canonical(messages, fmt)
    if fmt == "canonical":
        provider: Provider = format if format in ("openai", "anthropic") else _provider_of(canonical)  # type: ignore[assignment]
    else:
        provider = fmt  # type: ignore[assignment]
    return Prepared(messages, fmt, provider, canonical, encode_messages(canonical))


def apply(prep: Prepared, outcome_json: str) -> TrimResult[Any]:
    """Build the caller-shaped output from the engine's ops."""
    outcome = _OUTCOME.decode(outcome_json)
    out: list[Any] = []
    for op in outcome.messages:
        if op.msg is None:
            assert op.src is not None
            out.append(prep.original[op.src])
        elif prep.format == "canonical":
            out.append(op.msg)
        else:
            out.append(from_canonical(op.msg, prep.format))
    return TrimResult(messages=out, report=outcome.report)


native = _native
