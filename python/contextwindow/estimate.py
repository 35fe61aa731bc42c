"""Token estimation (DESIGN.md section 3).

One pass over the UTF-8 bytes counts code points by class (ASCII letters and digits,
ASCII whitespace, ASCII punctuation, CJK, kana, hangul, emoji, joiners, other), then a
profile's weights turn the counts into tokens. The work is done in Rust.

Profiles:

* ``conservative`` (default): one token per ASCII letter segment (a letter run split at
  lowercase-to-uppercase switches; each switch costs 1/4 more), 1/8 per letter beyond the
  fourth of a segment and 1/2 beyond the twelfth; one per group of up to 3 digits; one per
  ASCII punctuation run plus 1/4 per further punctuation character; one per free-standing
  whitespace run (a single space before a word or punctuation merges into it, as BPE
  tokenizers do) and per indentation after a line break, plus 1/4 per further line break
  and 1/16 per further space; 1.4 tokens per CJK character, kana and hangul syllable, 0.75
  per other code point of the Basic Multilingual Plane, 4 per other code point above
  U+FFFF (CJK extension B, math alphanumerics: their UTF-8 bytes), 3 per emoji, 2 per
  joiner (ZWJ, variation selector), 1 per ASCII control character;
  rounded up; 4 tokens per message, 3 per tool call; images by OpenAI tiles when their
  size is known, else 765. Against cl100k on ``../shared/corpus`` text it overcounts by a
  median of 8-18% and undercounts by more than 5% on 2% of segments
  (``tools/measure_estimates.py``); base64 is undercounted by about a quarter.
* ``fim``: the FIM One rule: ASCII 4 characters a token, every code point >= 128 at 1.5
  characters a token, floor, at least 1 for non-empty text; 765 per image; 4 per message.
* ``bytes4``: ceil(UTF-8 bytes / 4) per text; 4 per message; 765 per image.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from . import _engine
from ._engine import clean_str

__all__ = ["PROFILES", "DEFAULT_PROFILE", "estimate_tokens", "count_messages", "count_classes"]

#: Names of the built-in profiles.
PROFILES: tuple[str, ...] = tuple(_engine.native.PROFILES)
#: The profile used when none is named.
DEFAULT_PROFILE = "conservative"


def _check_profile(profile: str) -> None:
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")


def estimate_tokens(text: str, profile: str = DEFAULT_PROFILE) -> int:
    """Estimate the tokens of a text.

    Args:
        text: any string; lone surrogates count as U+FFFD.
        profile: name of a built-in profile (see module docs).

    Returns:
        Estimated tokens: 0 for ``""``, at least 1 for any other text.

    Raises:
        TypeError: ``text`` is not a ``str``.
        ValueError: unknown profile.

    >>> estimate_tokens("abcdefgh", profile="fim")
    2
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    _check_profile(profile)
    try:
        return int(_engine.native.estimate_text(text, profile))
    except UnicodeEncodeError:
        return int(_engine.native.estimate_text(clean_str(text), profile))


def count_classes(text: str) -> dict[str, int]:
    """Count a text's code points by class and its run features, in one pass.

    Args:
        text: any string.

    Returns:
        Code points per class (``ascii_alnum``, ``ascii_space``, ``ascii_punct``, ``cjk``,
        ``kana``, ``hangul``, ``emoji``, ``joiner``, ``other``, ``ascii_control``,
        ``astral``), run features (``words``, ``word_excess``, ``digit_groups``,
        ``punct_runs``, ``punct_extra``, ``space_runs``, ``word_long``,
        ``case_switches``, ``newline_extra``, ``space_extra``) and ``bytes``.

    >>> count_classes("ab 你")["cjk"]
    1
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    return dict(_engine.native.count_classes(clean_str(text)))


def check_limit(limit: Any) -> int | None:
    """``limit`` as given (``None`` or an ``int >= 0``); ``ValueError`` otherwise."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be None or a non-negative int, got {limit!r}")
    return limit


def tools_text(tools: Any) -> str:
    """The JSON text of a request's tool definitions (what is counted for them)."""
    if not isinstance(tools, (list, tuple)):
        raise ValueError(f"tools must be a list of tool definitions, got {type(tools).__name__}")
    return msgspec.json.encode(tools).decode() if tools else ""


def sum_until(counts: Iterable[int], limit: int | None, scale: Callable[[int], int] = int) -> int:
    """``scale(sum(counts))``, stopping at the first running total whose scaled value
    exceeds ``limit`` and returning that value (``> limit``); lazy ``counts`` are not
    consumed further."""
    total = 0
    for n in counts:
        total += n
        if limit is not None and scale(total) > limit:
            break
    return scale(total)


def count_messages(
    messages: Any,
    profile: str = DEFAULT_PROFILE,
    tools: list[Any] | None = None,
    *,
    format: str | None = None,
    limit: int | None = None,
) -> int:
    """Estimate the tokens of a conversation as sent to the model.

    Message cost = per-message overhead + name + text parts + images + tool-call names
    and argument text (+ per-call overhead) + tool results. Additive: the count of a list
    is the sum of the counts of its messages. ``tools`` (the request's tool definitions)
    add the estimate of their JSON text, every key included.

    With ``limit``, counting may stop once the answer is known to exceed it: the running
    total (tool schemas first, then the messages in order) is returned as soon as it
    exceeds ``limit``. So a result ``<= limit`` is the exact count, and a result
    ``> limit`` is the count of the tools plus the shortest prefix of messages that
    exceeds ``limit`` (a lower bound of the full count).

    Args:
        messages: OpenAI dicts, Anthropic dicts or ``Message`` structs.
        profile: name of a built-in profile.
        tools: the request's tool definitions, in any provider's shape.
        format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.
        limit: stop counting once the total exceeds this many tokens (``None``: count all).

    Returns:
        Estimated prompt tokens (see ``limit``).

    Raises:
        InvalidMessageError: a message is malformed (names its index and field).
        ValueError: unknown profile, ``tools`` is not a list, or ``limit`` is not an
            ``int >= 0``.

    >>> count_messages([{"role": "user", "content": "abcdefgh"}], profile="fim")
    6
    >>> count_messages([{"role": "user", "content": "abcdefgh"}] * 3, profile="fim", limit=7)   # 6 + 6 > 7
    12
    """
    _check_profile(profile)
    text = tools_text(tools) if tools is not None else ""
    limit = check_limit(limit)
    prep = _engine.prepare(messages, format)
    per = _engine.native.count_messages(prep.payload, profile)
    return sum_until([estimate_tokens(text, profile), *per], limit)


def message_tokens(messages: Any, profile: str = DEFAULT_PROFILE, *, format: str | None = None) -> list[int]:
    """Estimate the tokens of each message.

    Args:
        messages: OpenAI dicts, Anthropic dicts or ``Message`` structs.
        profile: name of a built-in profile.
        format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.

    Returns:
        One token count per message, in order.

    >>> message_tokens([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}], "fim")
    [5, 5]
    """
    _check_profile(profile)
    prep = _engine.prepare(messages, format)
    return [int(n) for n in _engine.native.count_messages(prep.payload, profile)]
