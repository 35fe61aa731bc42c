"""Exact mode and calibrated estimates (DESIGN.md section 3).

An :class:`Estimator` bundles a profile, an optional tokenizer (any ``str -> int``
callable, e.g. ``lambda s: len(enc.encode(s))`` with tiktoken) that replaces the
profile's text rule, and an optional :class:`~contextwindow.calibrate.Calibrator` that
scales the result. Without a tokenizer the counting runs in the Rust engine; with one it
walks the messages in Python, applying every rule of the profile but the text rule.

The trimming functions accept an ``Estimator`` (``estimator=``), a tokenizer
(``tokenizer=``) or a LangChain-style ``token_counter=`` (a callable taking a list of
messages in the caller's shape and returning tokens); this module also builds the cost
models they hand to the pure-Python engine in those cases.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import msgspec

from . import _engine
from . import _reference as ref
from ._engine import Prepared, encode_messages, nesting_errors
from ._jsontext import clean_str, shown
from .adapters import _written
from .calibrate import Calibrator, scale_tokens
from .errors import TokenCounterError
from .estimate import (
    DEFAULT_PROFILE,
    check_limit,
    estimate_tokens,
    profile_counts,
    resolve_profile,
    sum_until,
    tool_texts,
    tools_tokens,
)
from .messages import Message, Part
from .report import TrimResult

__all__ = ["Estimator"]


def callable_name(fn: Any) -> str:
    """A short name for a caller's callable, for error messages."""
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) else type(fn).__name__


def as_count(value: Any, counter: str, index: int | None = None) -> int:
    """``value`` as a token count (``int >= 0``, ``bool`` refused)."""
    if isinstance(value, bool):
        raise TokenCounterError("returned bool, expected an int >= 0", counter=counter, index=index)
    try:
        n = operator.index(value)
    except TypeError:
        hint = " (did you forget len()?)" if isinstance(value, (list, tuple)) else ""
        raise TokenCounterError(
            f"returned {type(value).__name__}, expected an int >= 0{hint}", counter=counter, index=index
        ) from None
    except MemoryError:
        raise
    except Exception as exc:  # an __index__ that raises (fresh23 #5)
        raise TokenCounterError(
            f"returned {type(value).__name__}, whose __index__ raised {type(exc).__name__}: {exc}",
            counter=counter,
            index=index,
        ) from exc
    if n < 0:
        raise TokenCounterError(f"returned {n}, expected an int >= 0", counter=counter, index=index)
    return n


def call_counter(fn: Callable[[Any], Any], arg: Any, counter: str, index: int | None = None) -> int:
    """Call a caller's counter; anything it raises or returns wrongly becomes a
    :class:`TokenCounterError` naming it (and the message index when known)."""
    try:
        value = fn(arg)
    except MemoryError:  # not the counter's fault: as out of memory anywhere (fresh23 #5)
        raise
    except Exception as exc:
        hint = ""
        if isinstance(exc, (TypeError, KeyError, AttributeError)) and counter.startswith("token_counter "):
            # the easy mix-up of three keywords (fresh23 #6)
            hint = " (token_counter gets a list of messages; for a str -> int tokenizer pass tokenizer=)"
        raise TokenCounterError(f"raised {type(exc).__name__}: {exc}{hint}", counter=counter, index=index) from exc
    return as_count(value, counter, index)


def _at(exc: TokenCounterError, index: int | None) -> TokenCounterError:
    """The same error, naming message ``index`` when it did not name one yet."""
    if exc.index is not None or index is None:
        return exc
    out = TokenCounterError(exc.reason, counter=exc.counter, index=index)
    out.__cause__ = exc.__cause__
    return out


class MessageCost:
    """A cost model for the pure-Python engine (``_reference``): ``count(message, index)``
    gives a message's tokens, ``index`` being its position in the caller's list or
    ``None`` for a message the engine made (breadcrumb, stub, shortened copy).

    Each message is counted once: by identity first (every unchanged input message), then
    by content (the same breadcrumb block built twice).

    ``part_tokens``, when given, is the cost of one part where ``count`` is a fixed amount
    per message plus its parts' costs (a tokenizer, uncalibrated): the engine then prices a
    trial cut by the part it changes (``_reference._cost_with``); ``None`` for a counter of
    whole messages.
    """

    def __init__(
        self,
        count: Callable[[Message, int | None], int],
        msgs: list[Message],
        part_tokens: Callable[[Part], int] | None = None,
    ) -> None:
        self._count = count
        self.part_tokens = part_tokens
        self._index = {id(m): i for i, m in enumerate(msgs)}
        self._by_id: dict[int, tuple[Message, int]] = {}
        self._by_content: dict[bytes, int] = {}

    def message_tokens(self, m: Message) -> int:
        hit = self._by_id.get(id(m))
        if hit is not None and hit[0] is m:
            return hit[1]
        key = encode_messages([m])
        n = self._by_content.get(key)
        if n is None:
            n = self._by_content[key] = self._count(m, self._index.get(id(m)))
        self._by_id[id(m)] = (m, n)  # keeps m alive, so its id is not reused
        return n


def counter_cost(token_counter: Callable[[list[Any]], Any], prep: Prepared, msgs: list[Message]) -> MessageCost:
    """Costs from a LangChain-style counter: ``token_counter([message])`` with the
    message in the caller's shape (the caller's own object when it is unchanged)."""
    name = f"token_counter {callable_name(token_counter)}"

    def count(m: Message, index: int | None) -> int:
        shaped = prep.original[index] if index is not None else _written(m, prep.format)
        return call_counter(token_counter, [shaped], name, index)

    return MessageCost(count, msgs)


class Estimator:
    """Token estimates with a profile, an optional exact tokenizer and an optional calibrator.

    ``tokenizer`` replaces the profile's text rule; every other rule of the profile stays
    (per-message and per-tool-call overhead, images, names, tool results counted by their
    inner parts, opaque blocks by their JSON text, a document given by reference 3,000
    tokens more). It is called once per distinct non-empty string of a call (``""`` costs
    0), with lone surrogates replaced by U+FFFD.
    ``calibrator`` scales the final count of each call once (``count_messages`` scales
    the total, ``message_tokens`` each message), so ``count_messages(ms) <=
    sum(message_tokens(ms)) < count_messages(ms) + len(ms)``.

    Args:
        profile: name of a built-in profile (its rules, and its text rule when
            ``tokenizer`` is ``None``).
        tokenizer: ``str -> int`` (tokens), e.g. ``lambda s: len(enc.encode(s))``.
        calibrator: a :class:`~contextwindow.Calibrator`, shared as you like (thread-safe).

    Raises:
        ValueError: unknown profile.
        TypeError: ``tokenizer`` is not callable or ``calibrator`` is not a ``Calibrator``.

    >>> words = Estimator("fim", tokenizer=lambda s: len(s.split()))
    >>> words.count_messages([{"role": "user", "content": "three little words"}])   # fim: 4 per message; + 3
    7
    """

    __slots__ = ("_calibrator", "_profile", "_tokenizer")

    def __init__(
        self,
        profile: str | None = DEFAULT_PROFILE,
        tokenizer: Callable[[str], int] | None = None,
        calibrator: Calibrator | None = None,
    ) -> None:
        profile = resolve_profile(profile)
        if tokenizer is not None and not callable(tokenizer):
            raise TypeError(f"tokenizer must be a callable str -> int, got {type(tokenizer).__name__}")
        if calibrator is not None and not isinstance(calibrator, Calibrator):
            raise TypeError(f"calibrator must be a Calibrator, got {type(calibrator).__name__}")
        if tokenizer is not None and profile not in ref.PROFILES:
            raise ValueError(f"profile {shown(profile)} has no pure-Python rules to pair with a tokenizer")
        self._profile = profile
        self._tokenizer = tokenizer
        self._calibrator = calibrator

    @property
    def profile(self) -> str:
        """Name of the profile whose rules apply."""
        return self._profile

    @property
    def tokenizer(self) -> Callable[[str], int] | None:
        """The ``str -> int`` callable replacing the text rule, or ``None``."""
        return self._tokenizer

    @property
    def calibrator(self) -> Calibrator | None:
        """The calibrator scaling every count, or ``None``."""
        return self._calibrator

    def __repr__(self) -> str:
        tok = None if self._tokenizer is None else callable_name(self._tokenizer)
        return f"Estimator(profile={self._profile!r}, tokenizer={tok}, calibrator={self._calibrator!r})"

    # ------------------------------------------------------------------ internals

    def _factor(self) -> float:
        return 1.0 if self._calibrator is None else self._calibrator.factor

    def _text_rule(self) -> ref.TextRuleCost:
        """The profile's rules with the tokenizer as text rule (checked, memoized per call)."""
        tok = self._tokenizer
        assert tok is not None
        name = f"tokenizer {callable_name(tok)}"
        return ref.TextRuleCost(ref.PROFILES[self._profile], lambda s: call_counter(tok, clean_str(s), name))

    def _raw_text(self, text: str, rule: ref.TextRuleCost | None = None) -> int:
        if self._tokenizer is None:
            return estimate_tokens(text, self._profile)
        return (rule or self._text_rule()).text_tokens(text)

    def _counts(self, messages: Any, format: str | None, rule: ref.TextRuleCost | None) -> Iterable[int]:
        """Uncalibrated tokens per message: the profile's counts (the native dict reader
        when it takes the input), or the tokenizer's, lazily."""
        if rule is None:
            return profile_counts(messages, format, self._profile)
        return self._raw_counts(_engine.prepare(messages, format), rule)

    def _raw_counts(self, prep: Prepared, rule: ref.TextRuleCost) -> Iterator[int]:
        """Uncalibrated tokenizer tokens per message, lazily (the Python walk stops when dropped)."""
        for i, m in enumerate(_engine.decoded(prep)):
            try:
                yield rule.message_tokens(m)
            except TokenCounterError as exc:
                raise _at(exc, i) from exc.__cause__

    def _count(self, messages: Any, tools: Any, format: str | None, limit: int | None, factor: float) -> int:
        texts = tool_texts(tools)
        limit = check_limit(limit)
        rule = self._text_rule() if self._tokenizer is not None else None
        raw = self._counts(messages, format, rule)
        tools_raw = tools_tokens(texts, self._profile, lambda t: self._raw_text(t, rule))
        counts = itertools.chain([tools_raw], raw)
        return sum_until(counts, limit, lambda n: scale_tokens(n, factor))

    def _trim_cost(self, prep: Prepared, msgs: list[Message]) -> MessageCost:
        """Per-message costs for the pure-Python engine (each message scaled once)."""
        factor = self._factor()
        rule = self._text_rule() if self._tokenizer is not None else None
        profile = self._profile

        def count(m: Message, index: int | None) -> int:
            if rule is None:
                raw = int(_engine.native.count_messages(encode_messages([m]), profile)[0])
            else:
                try:
                    raw = rule.message_tokens(m)
                except TokenCounterError as exc:
                    raise _at(exc, index) from exc.__cause__
            return scale_tokens(raw, factor)

        # per part only where costs add up over parts: unscaled (each message's scaled
        # count is rounded up on its own), and the tokenizer's, not the Rust engine's
        part = rule.part_tokens if rule is not None and self._calibrator is None else None
        return MessageCost(count, msgs, part)

    # ------------------------------------------------------------------ public

    def text_tokens(self, text: str) -> int:
        """Tokens of one text (tokenizer or profile rule, then calibrated).

        Args:
            text: any string; lone surrogates count as U+FFFD.

        Returns:
            Tokens; 0 for ``""`` (the tokenizer is not called).

        Raises:
            TypeError: ``text`` is not a ``str``.
            TokenCounterError: the tokenizer raised or returned something other than an
                ``int >= 0``.

        >>> Estimator(tokenizer=lambda s: len(s.split())).text_tokens("a b c")
        3
        >>> Estimator("fim").text_tokens("abcdefgh")   # the profile's rule: 8 / 4
        2
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be str, got {type(text).__name__}")
        return scale_tokens(self._raw_text(text), self._factor())

    def message_tokens(self, messages: Any, *, format: str | None = None) -> list[int]:
        """Tokens of each message (each calibrated on its own).

        Args:
            messages: OpenAI dicts, Anthropic dicts or ``Message`` structs.
            format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.

        Returns:
            One token count per message, in order.

        Raises:
            InvalidMessageError: a message is malformed.
            TokenCounterError: the tokenizer failed (names the message index).

        >>> Estimator("fim", tokenizer=lambda s: len(s.split())).message_tokens(
        ...     [{"role": "user", "content": "hi there"}, {"role": "assistant", "content": "ok"}])
        [6, 5]
        """
        factor = self._factor()
        rule = self._text_rule() if self._tokenizer is not None else None
        return [scale_tokens(n, factor) for n in self._counts(messages, format, rule)]

    @nesting_errors(1)
    def count_messages(
        self,
        messages: Any,
        tools: list[Any] | tuple[Any, ...] | None = None,
        *,
        format: str | None = None,
        limit: int | None = None,
    ) -> int:
        """Tokens of a request: its messages plus its tool definitions (per tool, its
        compact JSON text, through the tokenizer when there is one, plus the profile's
        per-tool overhead).

        The calibrator, if any, scales the total once. With ``limit``, counting stops as
        soon as the running total (tool schemas first, then the messages in order,
        calibrated) exceeds ``limit``, and that total is returned: a result ``<= limit`` is
        the exact count, a result ``> limit`` the count of the tools plus the shortest
        prefix of messages that exceeds ``limit``. With a tokenizer, later messages are
        then never tokenized.

        Args:
            messages: OpenAI dicts, Anthropic dicts or ``Message`` structs.
            tools: the request's tool definitions, in any provider's shape.
            format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.
            limit: stop counting once the total exceeds this many tokens.

        Returns:
            Tokens (see ``limit``).

        Raises:
            InvalidMessageError: a message is malformed.
            TokenCounterError: the tokenizer failed (names the message index).
            ValueError: ``tools`` is not a list or ``limit`` is not an ``int >= 0``.

        >>> est = Estimator("fim", tokenizer=lambda s: len(s.split()))
        >>> msgs = [{"role": "user", "content": "one two"}] * 3       # 4 + 2 tokens each
        >>> est.count_messages(msgs), est.count_messages(msgs, limit=10)
        (18, 12)
        """
        return self._count(messages, tools, format, limit, self._factor())

    def observe(
        self,
        messages: Any,
        reported: int,
        tools: list[Any] | tuple[Any, ...] | None = None,
        *,
        format: str | None = None,
    ) -> float:
        """Feed the calibrator one request: its uncalibrated count and the provider's.

        Args:
            messages: the request's messages, as sent.
            reported: prompt tokens the provider reported for it (see
                :mod:`contextwindow.calibrate` for which usage fields to add up).
            tools: the request's tool definitions, when it had any.
            format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.

        Returns:
            The calibrator's new factor.

        Raises:
            ValueError: the estimator has no calibrator, ``messages`` (with ``tools``)
                estimate 0 tokens (an empty list), or ``reported`` is not an int ``> 0``
                (a ``str``, ``bool`` or ``float`` as much as ``0``).

        >>> est = Estimator("fim", calibrator=Calibrator())
        >>> est.observe([{"role": "user", "content": "a" * 40}], reported=15)   # estimate 14
        1.0714285714285714
        >>> est.count_messages([{"role": "user", "content": "a" * 400}])       # ceil(104 * 15/14)
        112
        """
        if self._calibrator is None:
            raise ValueError("this Estimator has no calibrator; pass calibrator=Calibrator()")
        raw = self._count(messages, tools, format, None, 1.0)
        if raw <= 0:
            # the calibrator would name its own argument, which this caller did not pass
            # (fresh16b #11)
            raise ValueError(f"messages estimate {raw} tokens: nothing to calibrate against (pass the request as sent)")
        return self._calibrator.observe(raw, reported)


def cost_source(
    profile: str | None, token_counter: Any, estimator: Any, tokenizer: Any
) -> tuple[str, Estimator | None, Callable[[list[Any]], Any] | None]:
    """Where a trimming function's costs come from: ``(profile, None, None)`` for the
    Rust engine, else the estimator or the counter that drives the pure-Python engine
    (``trim_turns``, ``trim_turn_count``, ``fit``, ``prune_middle``,
    ``recover_from_overflow``; an estimator with a calibrator first goes through
    :func:`uncalibrated`).

    Raises:
        ValueError: more than one cost source, ``profile`` beside ``token_counter``, a
            profile other than the estimator's, an unknown profile.
        TypeError: ``token_counter`` not callable, ``estimator`` not an ``Estimator``.
    """
    if sum(v is not None for v in (token_counter, estimator, tokenizer)) > 1:
        raise ValueError("pass at most one of token_counter, estimator and tokenizer")
    if isinstance(token_counter, Estimator):
        estimator, token_counter = token_counter, None
    if token_counter is not None:
        if not callable(token_counter):
            kind = type(token_counter).__name__
            raise TypeError(f"token_counter must be a callable list[message] -> int, got {kind}")
        if profile is not None:
            raise ValueError("profile has no effect with token_counter: every cost comes from the counter")
        return DEFAULT_PROFILE, None, token_counter
    if tokenizer is not None:
        estimator = Estimator(DEFAULT_PROFILE if profile is None else profile, tokenizer=tokenizer)
    if estimator is not None:
        if not isinstance(estimator, Estimator):
            raise TypeError(f"estimator must be an Estimator, got {type(estimator).__name__}")
        if profile is not None and profile != estimator.profile:
            raise ValueError(f"profile {shown(profile)} differs from the estimator's {shown(estimator.profile)}")
        if estimator.tokenizer is None and estimator.calibrator is None:
            return estimator.profile, None, None
        return estimator.profile, estimator, None
    return resolve_profile(profile), None, None


def caller_cost(
    prep: Prepared, msgs: list[Message], est: Estimator | None, counter: Callable[[list[Any]], Any] | None
) -> MessageCost:
    """The cost model of what :func:`cost_source` returned beside the profile (one of
    ``est`` and ``counter``), for the decoded messages ``msgs`` of ``prep`` (the very
    objects: an unchanged one reaches the counter as the caller's own)."""
    if counter is not None:
        return counter_cost(counter, prep, msgs)
    assert est is not None
    return est._trim_cost(prep, msgs)


def uncalibrated(est: Estimator | None) -> tuple[dict[str, Any], float] | None:
    """For an ``Estimator`` with a calibrator, the cost keywords of the same costs
    uncalibrated (``profile=`` for the Rust engine, or an ``Estimator`` with the
    tokenizer alone) and the factor, read once; ``None`` otherwise.

    A trimming function runs on these raw costs against :func:`raw_budget` and maps its
    report with :func:`scaled_report`, so it trims to the budget as
    ``est.count_messages`` counts (the calibration scales the total once): scaling and
    rounding each message up on its own trimmed a conversation that fit (fresh31 #1)."""
    if est is None or est.calibrator is None:
        return None
    if est.tokenizer is None:
        return {"profile": est.profile}, est._factor()
    return {"estimator": Estimator(est.profile, tokenizer=est.tokenizer)}, est._factor()


def raw_budget(budget: int, factor: float) -> int:
    """The largest raw count that :func:`~contextwindow.calibrate.scale_tokens` at
    ``factor`` keeps within ``budget`` (tokens), by bisection.

    >>> raw_budget(905, 0.9), scale_tokens(1005, 0.9), scale_tokens(1006, 0.9)
    (1005, 905, 906)
    """
    hi = 1
    while scale_tokens(hi, factor) <= budget:
        hi *= 2
    lo = 0  # scale_tokens(0) == 0 <= budget; scale_tokens(hi) > budget
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if scale_tokens(mid, factor) <= budget:
            lo = mid
        else:
            hi = mid
    return lo


def on_raw_costs(est: Estimator | None, budget: int | None, run: Callable[[Any, dict[str, Any]], Any]) -> Any:
    """For an ``Estimator`` with a calibrator (:func:`uncalibrated`), ``run(raw budget,
    cost keywords)`` (the trimming function called again on the raw costs) as a
    ``TrimResult`` whose report is in calibrated tokens (:func:`scaled_report`);
    ``None`` for any other cost source, which the caller then runs itself."""
    cal = uncalibrated(est)
    if cal is None:
        return None
    kw, factor = cal
    raw = run(None if budget is None else raw_budget(budget, factor), kw)
    return TrimResult(messages=raw.messages, report=scaled_report(raw.report, factor, budget))


def scaled_report(report: Any, factor: float, budget: int | None) -> Any:
    """``report`` of a run on raw costs (:func:`uncalibrated`) in calibrated tokens:
    ``tokens_before``/``tokens_after`` scaled as totals, ``budget`` the caller's, and
    ``fits`` from them."""
    after = scale_tokens(report.tokens_after, factor)
    return msgspec.structs.replace(
        report,
        tokens_before=scale_tokens(report.tokens_before, factor),
        tokens_after=after,
        budget=budget,
        fits=budget is None or after <= budget,
    )
