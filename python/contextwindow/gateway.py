"""Raw JSON gateway path: count and trim a request body without building Python objects.

For LLM gateways and proxies that hold the request as bytes. :func:`fit_request` parses an
OpenAI chat or Anthropic Messages request body in Rust, trims its messages with the same
engine and rules as :func:`~contextwindow.trim_turns`, and writes the body back:

* every top-level key other than ``messages`` (``model``, ``temperature``, ``tools``,
  unknown keys, an Anthropic ``system``) keeps its exact bytes, in its place; so does the
  whitespace between them;
* every message kept unchanged is written as its original bytes; the new ``messages``
  array is compact (no whitespace between messages);
* messages the engine makes or changes (breadcrumb, stub tool results, shortened tool
  results or request, repaired tool calls) are written in the body's provider shape,
  as :func:`~contextwindow.trim_turns` writes them for dicts;
* a body that already fits comes back unchanged: the very ``bytes`` object given.

Tool definitions count against the budget as the CLI's ``fit`` counts them: per tool, its
compact JSON text plus the profile's per-tool overhead. So does a structured-output
schema, which the provider puts before the model too: OpenAI's
``response_format.json_schema`` (when ``response_format.type`` is ``"json_schema"``) and
Anthropic's ``output_config.format.schema`` or beta ``output_format.schema`` (when the
format's ``type`` is ``"json_schema"``), each as its compact JSON text (how a provider
renders it is not published; the text is what the gateway can count). The messages then
get ``budget - tool tokens - schema tokens``. ``provider=None`` detects the shape: a top-level ``"format"`` whose
value is exactly ``"openai"`` or ``"anthropic"`` names it as ``provider`` would, a plain
chat's breadcrumb placement included (the convention of the corpus files, which the CLI
reads the same way; any other ``format``, such as Ollama's ``"json"`` or a JSON schema, is
an unknown key, kept, and a repeated ``format`` is refused, whatever its value); else Anthropic when the body has a
top-level ``system`` key or a tool with ``input_schema`` or Anthropic content blocks,
otherwise OpenAI.

Errors: a body that is not UTF-8 or not JSON raises
:class:`~contextwindow.errors.InvalidRequestError` whose ``offset`` is the byte offset of
the problem; a body that is not an object or has no ``messages`` list raises
``InvalidRequestError`` too; a malformed message raises
:class:`~contextwindow.errors.InvalidMessageError` naming its index in the body's
``messages`` array and the field. A key repeated in an object the gateway reads (a
message, a block, a tool call, the top-level ``messages``/``system``/``tools``) raises
``InvalidRequestError`` naming it, where it is and its offset: which value a provider takes
is not settled. Escaped lone surrogates (``"\\ud800"``, valid JSON but
not Unicode text) count as U+FFFD, as on the dict path; messages the engine rewrites carry
``\\ufffd`` in their place, while everything the engine keeps (the other keys, the
messages kept unchanged) keeps its escapes, and a body that fits comes back untouched.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, overload

import msgspec

from . import _engine
from ._jsontext import as_int, check_name_type, int_cause, shown
from .compact import _pinned_type
from .estimate import DEFAULT_PROFILE, resolve_profile
from .report import FitReport

__all__ = ["RequestReport", "count_request", "fit_request"]

Provider = Literal["openai", "anthropic"]
_MAX = 2**63 - 1


class RequestReport(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`fit_request` did to a request body.

    Attributes:
        provider: the shape the body was read in, ``"openai"`` or ``"anthropic"``.
        budget: the request's token budget, as given.
        tool_tokens: tokens of the tool definitions, taken off the budget first.
        schema_tokens: tokens of the structured-output schema (``response_format``,
            ``output_config``, ``output_format``; module docs), taken off the budget first.
        report: the :class:`~contextwindow.FitReport` of the messages; its ``budget`` is
            ``budget - tool_tokens - schema_tokens``. In an Anthropic body with a top-level ``system``,
            message 0 of ``report.fates`` is that system prompt and body message ``i`` is
            ``i + 1``.

    >>> RequestReport(provider="openai", budget=10, tool_tokens=0, report=None).provider
    'openai'
    """

    provider: str
    budget: int
    tool_tokens: int
    report: FitReport
    schema_tokens: int = 0


_REPORT = msgspec.json.Decoder(RequestReport)


def _body(body: object) -> bytes:
    """``body`` as ``bytes``: itself, or a copy of any buffer of single bytes (``bytearray``,
    ``memoryview``, ``array.array("B")``, ``mmap``; fresh18 F4: only the first three were
    taken, and a ``memoryview`` of ``int`` items was read as its raw bytes)."""
    if isinstance(body, bytes):
        return body
    if not isinstance(body, str):
        try:
            view = memoryview(body)  # type: ignore[arg-type]
        except TypeError:
            pass
        else:
            with view:
                if view.itemsize != 1:
                    raise TypeError(
                        f"body must be a buffer of bytes, got a {type(body).__name__} of {view.itemsize}-byte items"
                    )
                return view.tobytes()
    raise TypeError(f"body must be bytes or another buffer of bytes (bytearray, memoryview), got {type(body).__name__}")


def _provider(provider: object) -> str | None:
    check_name_type(provider, "provider", "'openai', 'anthropic'")
    if provider not in (None, "openai", "anthropic"):
        raise ValueError(f"provider must be 'openai', 'anthropic' or None, got {shown(provider)}")
    return provider


@overload
def fit_request(
    body: bytes | bytearray | memoryview,
    *,
    budget: int,
    profile: str | None = ...,
    provider: Provider | None = ...,
    breadcrumb: bool = ...,
    report: Literal[False] = ...,
    pinned: Iterable[int] = ...,
) -> bytes: ...


@overload
def fit_request(
    body: bytes | bytearray | memoryview,
    *,
    budget: int,
    profile: str | None = ...,
    provider: Provider | None = ...,
    breadcrumb: bool = ...,
    report: Literal[True],
    pinned: Iterable[int] = ...,
) -> tuple[bytes, RequestReport]: ...


@overload
def fit_request(
    body: bytes | bytearray | memoryview,
    *,
    budget: int,
    profile: str | None = ...,
    provider: Provider | None = ...,
    breadcrumb: bool = ...,
    report: bool = ...,
    pinned: Iterable[int] = ...,
) -> bytes | tuple[bytes, RequestReport]: ...


def fit_request(
    body: bytes | bytearray | memoryview,
    *,
    budget: int,
    profile: str | None = DEFAULT_PROFILE,
    provider: Provider | None = None,
    breadcrumb: bool = True,
    report: bool = False,
    pinned: Iterable[int] = (),
) -> bytes | tuple[bytes, RequestReport]:
    """Trim the messages of a raw request body to a token budget and return the new body.

    Same rules as :func:`~contextwindow.trim_turns` (whole turns, tool pairs kept
    together, preamble and current request kept, breadcrumb), run on the body's bytes in
    Rust with the GIL released; see the module docs for what is kept byte for byte.

    Args:
        body: an OpenAI chat or Anthropic Messages request body, UTF-8 JSON
            (``bytes``, ``bytearray`` or ``memoryview``).
        budget: tokens the request may use: messages, tool definitions and a
            structured-output schema.
        profile: name of a built-in profile (``None``: ``conservative``).
        provider: ``"openai"`` or ``"anthropic"``; ``None`` detects it from the body
            (a top-level ``"format": "openai"|"anthropic"`` names it; module docs).
        breadcrumb: insert the breadcrumb where turns were dropped.
        report: also return a :class:`RequestReport`. Without it, the messages of old
            turns that no trim to the budget could keep are not estimated (the body is the
            same): a body that loses half its turns costs about half the estimation.
        pinned: indices into the body's ``messages`` array (an Anthropic top-level
            ``system`` is not in it, and is kept anyway) of messages to treat as pinned:
            their turns are never dropped, as :func:`~contextwindow.trim_turns`'
            ``pinned``. The report counts a top-level ``system`` as its message 0, so
            in such a body ``pinned=[i]``'s fate is ``report.fates[i + 1]``
            (:class:`RequestReport`).

    Returns:
        The new body (the ``body`` object itself when it already fits and was ``bytes``),
        or ``(body, report)`` with ``report=True``.

    Raises:
        InvalidRequestError: the body is not UTF-8, not JSON, not an object, has no
            ``messages`` list, a bad ``tools`` or ``system``, or an object the gateway
            reads outside the messages repeats a key (``the key "tools" appears more
            than once``); ``offset`` says where.
        InvalidMessageError: a message is malformed (``index`` in ``messages``, ``field``,
            and ``offset``, where the message's value starts in the body), or repeats a key
            (``message 0: the key "role" appears more than once``, ``offset`` at the repeat).
        ValueError: unknown profile or provider, a budget that is not an int >= 0, a
            ``pinned`` index past the ``messages`` array or negative, named with the
            array's range (``invalid argument pinned: index -1 is not an index of the
            body's messages (0..5)``; a body the engine refuses is named first, as for an
            index past it).
        TypeError: ``body`` is not bytes-like, ``breadcrumb`` or ``report`` is not a
            bool, ``pinned`` is not a collection of ints.

    >>> body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    >>> fit_request(body, budget=100) is body   # fits: the same object, no copy
    True
    >>> new, rep = fit_request(b'{"messages": [{"role": "user", "content": "' + b"x " * 500
    ...     + b'"}, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "go"}]}',
    ...     budget=30, provider="openai", report=True)
    >>> import json
    >>> [m["content"][:9] for m in json.loads(new)["messages"]]   # breadcrumb, current request
    ['[earlier ', 'go']
    >>> new.endswith(b'{"role": "user", "content": "go"}]}')      # kept message: its own bytes
    True
    >>> rep.report.dropped_turns, rep.report.fits
    (1, True)
    """
    data = _body(body)
    n = as_int(budget)
    if n is None or n < 0:
        raise ValueError(f"budget must be a non-negative int, got {shown(budget)}") from int_cause(budget)
    for name, flag in (("breadcrumb", breadcrumb), ("report", report)):
        if not isinstance(flag, bool):  # "no" is truthy: refused, never read as True (fresh9 D1)
            raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
    pins = sorted(_pinned_type(pinned))
    args = (data, min(n, _MAX), resolve_profile(profile), _provider(provider), breadcrumb, pins)
    if pins and not (0 <= pins[0] and pins[-1] <= _MAX):
        raise _pinned_error(args, pins[0] if pins[0] < 0 else pins[-1])
    if not report:
        # the body alone: old turns that cannot be kept are not estimated (same body)
        return _engine.native.fit_request_body(*args)
    out, rep = _engine.native.fit_request(*args)
    return out, _REPORT.decode(rep)


def _pinned_error(args: tuple[Any, int, str, str | None, bool, list[int]], bad: int) -> Exception:
    """The engine's error for a ``pinned`` index it cannot take (negative, or past
    ``2**63 - 1``): the one it gives for an index past the body's messages, which names
    their range (``(0..5)``, ``(there are none)``), with ``bad`` in its words; the body's
    own error when the engine refuses the body (read before the indices, as for any
    index past it). A new user's finding: ``pinned=[-1]`` named no range."""
    sentinel = f"invalid argument pinned: index {_MAX} "
    try:
        data, budget, profile, provider, breadcrumb, _ = args
        _engine.native.fit_request_body(data, budget, profile, provider, breadcrumb, [_MAX])
    except ValueError as exc:
        if not str(exc).startswith(sentinel):
            return exc
        return ValueError(f"invalid argument pinned: index {bad} {str(exc)[len(sentinel) :]}")
    # no body holds 2**63 messages: the engine always refuses the sentinel index
    return ValueError(f"invalid argument pinned: index {bad} is not an index of the body's messages")


def count_request(
    body: bytes | bytearray | memoryview, *, profile: str | None = DEFAULT_PROFILE, provider: Provider | None = None
) -> int:
    """Estimate the tokens of a raw request body: its messages, tool definitions and
    structured-output schema.

    Equal to ``count_messages(messages, profile, tools=tools)`` on the parsed body (with an
    Anthropic top-level ``system`` counted as a leading system message), plus
    ``estimate_tokens`` of the compact JSON text of a structured-output schema
    (``response_format``, ``output_config``, ``output_format``: module docs), without
    building Python objects.

    Args:
        body: an OpenAI chat or Anthropic Messages request body, UTF-8 JSON.
        profile: name of a built-in profile (``None``: ``conservative``).
        provider: ``"openai"`` or ``"anthropic"``; ``None`` detects it from the body, as
            :func:`fit_request` does.

    Returns:
        Estimated prompt tokens.

    Raises:
        InvalidRequestError: the body is not UTF-8, not JSON, or not a request body
            (as for :func:`fit_request`).
        InvalidMessageError: a message is malformed or repeats a key (as for :func:`fit_request`).
        ValueError: unknown profile or provider.
        TypeError: ``body`` is not bytes-like.

    >>> count_request(b'{"messages": [{"role": "user", "content": "abcdefgh"}]}', profile="fim")
    6
    """
    return int(_engine.native.count_request(_body(body), resolve_profile(profile), _provider(provider)))
