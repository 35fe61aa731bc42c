"""Turn-atomic trimming (DESIGN.md section 5)."""

from __future__ import annotations

from typing import Any

from . import _engine
from .estimate import DEFAULT_PROFILE, PROFILES
from .report import TrimResult

__all__ = ["trim_turns", "trim_turn_count"]


_MAX = 2**63 - 1  # larger budgets mean "no limit"; the engine counts in u64


def _check(profile: str, n: Any, name: str) -> int:
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"{name} must be a non-negative int, got {n!r}")
    return min(n, _MAX)


def trim_turns(
    messages: Any,
    budget: int,
    *,
    profile: str = DEFAULT_PROFILE,
    breadcrumb: bool = True,
    format: str | None = None,
) -> TrimResult[Any]:
    """Fit a conversation into a token budget by dropping whole turns, oldest first.

    If the estimate fits, the input comes back unchanged (same objects, same order).
    Otherwise the oldest whole turns are dropped until it fits, keeping the preamble and
    always the newest turn, and the breadcrumb ``[earlier turns omitted to fit the
    context window]`` is inserted after the preamble (Anthropic shape: as the leading
    text block of the first kept user message). When the newest turn alone is over
    budget, its oldest complete tool units are dropped until it fits (never the newest
    unit, never a unit holding a pinned message), and dropped units that still fit are
    put back, newest first; then the largest tool results are cut to head + tail with a
    marker that names the number of characters removed; then the request itself, but
    only when that makes the conversation fit. Turns
    holding a pinned message are never dropped. If it still does not fit the report says ``fits=False``. Broken
    tool pairs are repaired first, so the output always passes ``validate``. A plain chat
    (only user and assistant text, valid in both shapes) gets the breadcrumb as a leading
    text block of the first kept user message, which both providers accept.

    Args:
        messages: OpenAI dicts, Anthropic dicts or ``Message`` structs.
        budget: token budget (tokens of ``profile``), >= 0; values above 2**63 - 1 are
            treated as 2**63 - 1 (no limit in practice).
        profile: name of a built-in profile.
        breadcrumb: insert the breadcrumb when turns are dropped.
        format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.

    Returns:
        ``TrimResult(messages, report)``; messages in the caller's shape.

    Raises:
        InvalidMessageError: a message is malformed.
        ValueError: unknown profile or negative budget.

    >>> msgs = [{"role": "system", "content": "sys"},
    ...         {"role": "user", "content": "old " * 100}, {"role": "assistant", "content": "ok"},
    ...         {"role": "user", "content": "new"}]
    >>> r = trim_turns(msgs, budget=40, profile="fim")
    >>> [m["content"] for m in r.messages]
    ['sys', '[earlier turns omitted to fit the context window]', 'new']
    """
    budget = _check(profile, budget, "budget")
    prep = _engine.prepare(messages, format)
    out = _engine.native.trim_turns(prep.payload, budget, profile, bool(breadcrumb), prep.provider)
    return _engine.apply(prep, out)


def trim_turn_count(
    messages: Any,
    max_turns: int,
    *,
    profile: str = DEFAULT_PROFILE,
    breadcrumb: bool = True,
    format: str | None = None,
) -> TrimResult[Any]:
    """Keep the newest ``max(1, max_turns)`` whole turns (plus the preamble).

    Args:
        messages: OpenAI dicts, Anthropic dicts or ``Message`` structs.
        max_turns: how many turns to keep; 0 still keeps the newest turn.
        profile: profile for the report's token counts.
        breadcrumb: insert the breadcrumb when turns are dropped.
        format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.

    Returns:
        ``TrimResult(messages, report)`` with ``report.reason == "turn_limit"`` when
        turns were dropped.

    Raises:
        InvalidMessageError: a message is malformed.
        ValueError: unknown profile or negative ``max_turns``.

    >>> msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "a"},
    ...         {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]
    >>> [m["content"] for m in trim_turn_count(msgs, 1).messages]
    ['s', '[earlier turns omitted to fit the context window]', 'c']
    """
    max_turns = _check(profile, max_turns, "max_turns")
    prep = _engine.prepare(messages, format)
    out = _engine.native.trim_turn_count(prep.payload, max_turns, profile, bool(breadcrumb), prep.provider)
    return _engine.apply(prep, out)
