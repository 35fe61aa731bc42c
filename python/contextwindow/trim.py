"""Turn-atomic trimming (DESIGN.md section 5).

Token costs come from a built-in profile (the Rust engine), or from the caller:

* ``token_counter=``: LangChain's ``trim_messages`` convention, a callable taking a list
  of messages and returning their tokens. It is called with one message at a time, in
  the caller's shape (the caller's own object when the message is unchanged; a new dict
  or ``Message`` for the breadcrumb, stub results and shortened copies).
* ``estimator=``: an :class:`~contextwindow.Estimator` (profile, exact tokenizer,
  calibrator).
* ``tokenizer=``: a ``str -> int`` callable replacing the profile's text rule
  (shorthand for ``estimator=Estimator(profile, tokenizer)``).

With any of these the pure-Python engine (``_reference``, which mirrors the Rust rules
exactly, as the differential tests check) runs with those costs: same rules, same output
shape, same report. Each message is counted once: every input message once (the
report's ``tokens_before`` needs them all), and each message the engine makes or changes
once, plus a binary search of trial cuts (about log2 of the text's length) when a text
must be shortened; a dropped message is never counted again. A counter that adds a per-call constant
(e.g. 3 reply-priming tokens) adds it to every message, so its totals err high.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import msgspec

from . import _engine
from . import _reference as ref
from ._engine import nesting_errors
from ._jsontext import as_int, int_cause, shown
from .budget import Budget, token_budget
from .compact import _pinned_range, _pinned_type
from .estimator import Estimator, caller_cost, on_raw_costs
from .estimator import cost_source as _costs
from .report import TrimResult

__all__ = ["trim_turns", "trim_turn_count"]


_MAX = 2**63 - 1  # larger budgets mean "no limit"; the engine counts in u64

TokenCounter = Callable[[list[Any]], int]


def _budget(budget: Any) -> int:
    """``trim_turns``' budget, read as ``fit`` reads it: an int >= 0, a
    :class:`~contextwindow.Budget` or another object with an int ``usable`` (fresh44 note:
    ``trim_turns(m, resolve_budget(...))`` was refused), in ``fit``'s words when it is none
    of them (fresh46 #3: ``trim_turns``' own named no ``usable``)."""
    return cast(int, token_budget(budget))  # never None: that is prune_middle's (allow_none)


def _check_n(n: Any, name: str) -> int:
    k = as_int(n)
    if k is None or k < 0:
        raise ValueError(f"{name} must be a non-negative int, got {shown(n)}") from int_cause(n)
    return min(k, _MAX)


def _python_cost(
    prep: _engine.Prepared, est: Estimator | None, counter: TokenCounter | None, pins: set[int]
) -> tuple[Any, Any]:
    """The canonical messages (those at ``pins`` pinned) and their cost model for the
    pure-Python engine."""
    msgs = [
        msgspec.structs.replace(m, pinned=True) if i in pins and not m.pinned else m
        for i, m in enumerate(_engine.decoded(prep))
    ]
    return msgs, caller_cost(prep, msgs, est, counter)


def _flag(breadcrumb: object) -> bool:
    if not isinstance(breadcrumb, bool):
        raise TypeError(f"breadcrumb must be a bool, got {type(breadcrumb).__name__}")
    return breadcrumb


def _unpinned(
    ops: Sequence[tuple[int | None, Any]], original: Sequence[Any], pins: set[int]
) -> list[tuple[int | None, Any]]:
    """The pure-Python engine's ops with a changed message that only ``pins`` pinned
    unpinned again, as it came in (the Rust engine does the same)."""
    return [
        (src, msgspec.structs.replace(m, pinned=False))
        if m is not None and src in pins and m.pinned and not original[src].pinned
        else (src, m)
        for src, m in ops
    ]


def _pins(pinned: Any, messages: Any) -> set[int]:
    """``pinned`` checked: its type, then its range when ``messages`` is a list (else the
    engine's reading raises first, and the range is checked after it)."""
    pins = _pinned_type(pinned)
    if pins and isinstance(messages, Sequence) and not isinstance(messages, (str, bytes, bytearray)):
        _pinned_range(pins, len(messages))
    return pins


def _fast_trim(
    native: Callable[..., Any], messages: Any, format: str | None, limit: int, pins: set[int], *rest: Any
) -> TrimResult[Any] | None:
    """A trim through the native dict reader (one walk, no JSON), or ``None`` when it does
    not take the input and the caller must use the Python adapters."""
    if not _engine.fast_reader(messages, format):
        return None
    snapshot = messages.copy()  # indices stay right if another thread edits the list
    read = native(snapshot, format, limit, *rest, sorted(pins))
    if read is None:
        return None
    fmt, _provider, out = read
    return _engine.apply_outcome(snapshot, fmt, out)


@nesting_errors()
def trim_turns(
    messages: Any,
    budget: int | Budget,
    *,
    profile: str | None = None,
    breadcrumb: bool = True,
    format: str | None = None,
    token_counter: TokenCounter | None = None,
    estimator: Estimator | None = None,
    tokenizer: Callable[[str], int] | None = None,
    pinned: Iterable[int] = (),
) -> TrimResult[Any]:
    """Fit a conversation into a token budget by dropping whole turns, oldest first.

    If the estimate fits, the input comes back unchanged (same objects, same order).
    Otherwise the oldest whole turns are dropped until it fits, keeping the preamble and
    always the newest turn, and the breadcrumb ``[earlier turns omitted to fit the
    context window]`` is inserted after the preamble (Anthropic shape: as the leading
    text block of the first kept user message). When the newest turn alone is over
    budget, its oldest complete tool units are dropped until it fits (never the newest
    unit, never a unit holding a pinned message), and dropped units that still fit are
    put back, newest first, and then the old turns that went, newest first, while each
    fits with its breadcrumb (fresh41 #1); then the largest tool results are cut to head + tail with a
    marker that names the number of characters removed (a text-action agent's
    observation, user text starting with ``[Tool results]``, counts as a tool result
    here and keeps that prefix; fresh15 #4); then, the same way, the
    assistant text after the request (a finished transcript: the answer to it; fate
    rule ``reply_shrunk``; in Anthropic shape a trailing assistant message, a prefill,
    never ends in whitespace: cut to nothing after the marker, the marker loses its final
    newline); then the request itself, but only when that makes the conversation fit,
    and never to its markers and blanks alone (fresh32 #1, fresh34 #1: it stays whole,
    ``fits=False``).
    No cut is made whose marker costs as many tokens as the text it removes, or more
    (fresh12 O1): the text is cut a little further instead (the request too: left whole,
    it was over budget where a smaller budget fit with a cut; fresh18 F1). Turns holding
    a pinned message are never dropped. The breadcrumb may cost whole old turns,
    never anything of the newest turn: it is left out when the result fits only without
    it, or when with it more of the newest turn would be cut or dropped (characters, tokens
    of tool units) than without it (fresh8 N1, fresh42 #2). If it still does not fit the
    report says ``fits=False``. Broken tool pairs are repaired first, so the output
    always passes ``validate``. A plain chat (only user and assistant text, valid in both
    shapes) gets the breadcrumb as a leading text block of the first kept user message,
    which both providers accept.

    Costs come from ``profile`` (default ``conservative``), or from one of
    ``token_counter``, ``estimator`` or ``tokenizer`` (see the module docs); the rules and
    the report are the same either way, in the counter's tokens.

    Args:
        messages: OpenAI dicts, Anthropic dicts or ``Message`` structs.
        budget: token budget (tokens of the chosen costs), >= 0; values above 2**63 - 1
            are treated as 2**63 - 1 (no limit in practice). A
            :class:`~contextwindow.Budget` from :func:`~contextwindow.resolve_budget`
            (or another object with an int ``usable``) gives its ``usable``, as in
            :func:`~contextwindow.fit`.
        profile: name of a built-in profile; ``None`` means ``conservative`` (or the
            estimator's profile).
        breadcrumb: insert the breadcrumb when turns are dropped.
        format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.
        token_counter: ``list of messages -> tokens`` (LangChain's convention), called
            with one message at a time in the caller's shape.
        estimator: an :class:`~contextwindow.Estimator` (profile, tokenizer, calibrator).
        tokenizer: ``str -> tokens``, replacing ``profile``'s text rule.
        pinned: input indices to treat as pinned (dicts have no ``pinned`` field; as
            ``prune_middle``'s and ``FitPolicy.pinned``), added to ``Message.pinned``.
            Changed messages come back with the ``pinned`` they came in with.

    Returns:
        ``TrimResult(messages, report)``; messages in the caller's shape.

    Raises:
        InvalidMessageError: a message is malformed.
        TokenCounterError: the counter or tokenizer raised, or returned something other
            than an ``int >= 0`` (names it and the message index).
        ValueError: unknown profile, a budget that is not an int >= 0 or an object with
            one in ``usable`` (a string or a bool too; :func:`~contextwindow.fit`'s
            words: ``budget must be a non-negative int or have an int 'usable', got
            '5'``), more than one cost source,
            ``profile`` together with ``token_counter``, or a ``pinned`` index that is
            not a message index.
        TypeError: ``token_counter``/``tokenizer`` not callable, ``estimator`` not an
            ``Estimator``, ``breadcrumb`` not a bool, or ``pinned`` not a collection of
            ints.

    >>> msgs = [{"role": "system", "content": "sys"},
    ...         {"role": "user", "content": "old " * 100}, {"role": "assistant", "content": "ok"},
    ...         {"role": "user", "content": "new"}]
    >>> r = trim_turns(msgs, budget=40, profile="fim")
    >>> [m["content"] for m in r.messages]
    ['sys', '[earlier turns omitted to fit the context window]', 'new']
    >>> r = trim_turns(msgs, budget=30, token_counter=lambda ms: 10 * len(ms))   # 10 per message
    >>> [m["content"][:5] for m in r.messages], r.report.tokens_after
    (['sys', '[earl', 'new'], 30)
    """
    name, est, counter = _costs(profile, token_counter, estimator, tokenizer)
    budget = _budget(budget)
    calibrated = on_raw_costs(
        est, budget, lambda b, kw: trim_turns(messages, b, breadcrumb=breadcrumb, format=format, pinned=pinned, **kw)
    )
    if calibrated is not None:
        return calibrated  # type: ignore[no-any-return]
    pins = _pins(pinned, messages)
    if est is None and counter is None and isinstance(breadcrumb, bool):
        fast = _fast_trim(_engine.native.trim_turns_dicts, messages, format, budget, pins, name, breadcrumb)
        if fast is not None:
            return fast
    prep = _engine.prepare(messages, format)
    _pinned_range(pins, len(prep.original))
    if est is None and counter is None:
        out = _engine.native.trim_turns(prep.payload, budget, name, _flag(breadcrumb), prep.provider, sorted(pins))
        return _engine.apply(prep, out)
    msgs, cost = _python_cost(prep, est, counter, pins)
    ops, report = ref.trim_turns(msgs, budget, cost, _flag(breadcrumb), prep.provider)
    return _engine.apply_ops(prep, _unpinned(ops, _engine.decoded(prep), pins), report)


@nesting_errors()
def trim_turn_count(
    messages: Any,
    max_turns: int,
    *,
    profile: str | None = None,
    breadcrumb: bool = True,
    format: str | None = None,
    token_counter: TokenCounter | None = None,
    estimator: Estimator | None = None,
    tokenizer: Callable[[str], int] | None = None,
    pinned: Iterable[int] = (),
) -> TrimResult[Any]:
    """Keep the newest ``max(1, max_turns)`` whole turns (plus the preamble).

    Older turns holding a pinned message stay too, as in :func:`trim_turns` (so does a
    turn that opens with stub results answering the calls of a turn that stays); the
    report's ``kept_turns`` counts them. The breadcrumb goes before the first kept turn
    after a dropped one.

    Args:
        messages: OpenAI dicts, Anthropic dicts or ``Message`` structs.
        max_turns: how many turns to keep; 0 still keeps the newest turn.
        profile: profile for the report's token counts (``None``: ``conservative``).
        breadcrumb: insert the breadcrumb when turns are dropped.
        format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.
        token_counter: ``list of messages -> tokens`` for the report's counts (see
            :func:`trim_turns`).
        estimator: an :class:`~contextwindow.Estimator` for the report's counts.
        tokenizer: ``str -> tokens``, replacing ``profile``'s text rule in the report.
        pinned: input indices to treat as pinned, as in :func:`trim_turns`.

    Returns:
        ``TrimResult(messages, report)`` with ``report.reason == "turn_limit"`` when
        turns were dropped.

    Raises:
        InvalidMessageError: a message is malformed.
        TokenCounterError: the counter or tokenizer failed (see :func:`trim_turns`).
        ValueError: unknown profile, negative ``max_turns``, conflicting cost sources or a
            ``pinned`` index that is not a message index.
        TypeError: a cost source of the wrong type, ``breadcrumb`` not a bool, or
            ``pinned`` not a collection of ints.

    >>> msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "a"},
    ...         {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]
    >>> [m["content"] for m in trim_turn_count(msgs, 1).messages]
    ['s', '[earlier turns omitted to fit the context window]', 'c']
    >>> trim_turn_count(msgs, 1, token_counter=len).report.tokens_after   # 1 per message
    3
    """
    name, est, counter = _costs(profile, token_counter, estimator, tokenizer)
    max_turns = _check_n(max_turns, "max_turns")
    calibrated = on_raw_costs(  # no budget: the report's totals scaled once
        est,
        None,
        lambda _, kw: trim_turn_count(messages, max_turns, breadcrumb=breadcrumb, format=format, pinned=pinned, **kw),
    )
    if calibrated is not None:
        return calibrated  # type: ignore[no-any-return]
    pins = _pins(pinned, messages)
    if est is None and counter is None and isinstance(breadcrumb, bool):
        fast = _fast_trim(_engine.native.trim_turn_count_dicts, messages, format, max_turns, pins, name, breadcrumb)
        if fast is not None:
            return fast
    prep = _engine.prepare(messages, format)
    _pinned_range(pins, len(prep.original))
    if est is None and counter is None:
        out = _engine.native.trim_turn_count(
            prep.payload, max_turns, name, _flag(breadcrumb), prep.provider, sorted(pins)
        )
        return _engine.apply(prep, out)
    msgs, cost = _python_cost(prep, est, counter, pins)
    ops, report = ref.trim_turn_count(msgs, max_turns, cost, _flag(breadcrumb), prep.provider)
    return _engine.apply_ops(prep, _unpinned(ops, _engine.decoded(prep), pins), report)
