"""Token budget resolution: how many tokens the messages of a request may use.

DESIGN.md section 6. Two seeds define the numbers and this module follows both:

* First seed (``000_*``, "Layer 5 - budget configuration"): ``usable = context_size -
  max_output_tokens``; the window and output limit come, in order of precedence, from the
  per-model configuration, the environment (``LLM_CONTEXT_SIZE``,
  ``LLM_MAX_OUTPUT_TOKENS``), then hard-coded defaults (128,000 window, 64,000 output); a
  misconfiguration that yields less than 4,000 tokens is clamped up to a 4,000-token floor.
* Second seed (``002_*``, "token budget"): ``max_context_tokens`` is an absolute budget and
  an explicit 0 disables proactive trimming; ``compact_ratio`` in (0, 1] makes the budget
  that share of the model's context window (out-of-range values count as unset); with both,
  ``max_context_tokens`` caps the ratio budget from above; a history-pruning cap only
  lowers; every positive budget is capped by the model's configured capacity; when the
  capacity is unknown, 32,000 stands in for it; a positive ``max_context_tokens`` with no
  declared window is honoured as is and is also the window. A request that still exceeds
  the capacity fails before it is sent, even with proactive trimming disabled
  (:func:`check_capacity`).

The model table (:data:`MODELS`) plays the part of the first seed's per-model
configuration; the caller's ``models=`` mapping is merged over it.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import sys
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import msgspec

from ._jsontext import as_int, int_cause, shown
from .errors import ContextOverflowError, _reduce_error

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_FLOOR",
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "ENV_CONTEXT_SIZE",
    "ENV_MAX_OUTPUT_TOKENS",
    "FALLBACK_CONTEXT_WINDOW",
    "MODELS",
    "Budget",
    "ModelLimits",
    "check_capacity",
    "model_limits",
    "resolve_budget",
]

#: First seed's hard-coded default context window, in tokens.
DEFAULT_CONTEXT_WINDOW = 128_000
#: First seed's hard-coded default output reserve, in tokens.
DEFAULT_MAX_OUTPUT_TOKENS = 64_000
#: First seed's lower bound on the usable budget, in tokens.
DEFAULT_FLOOR = 4_000
#: Second seed's stand-in for an unknown model capacity, in tokens.
FALLBACK_CONTEXT_WINDOW = 32_000
#: Environment variable for the context window (first seed).
ENV_CONTEXT_SIZE = "LLM_CONTEXT_SIZE"
#: Environment variable for the output reserve (first seed).
ENV_MAX_OUTPUT_TOKENS = "LLM_MAX_OUTPUT_TOKENS"


class ModelLimits(msgspec.Struct, frozen=True):
    """A model's published context window and output limit.

    Attributes:
        context_window: tokens the model reads and writes in one request (input + output).
        max_output_tokens: the most tokens the model may generate in one response;
            ``None`` when the provider publishes no separate output limit (the output
            shares the window), in which case :func:`resolve_budget` takes the output
            reserve from the next source (environment, then the 64,000 default).

    >>> ModelLimits(128_000, 16_384).context_window
    128000
    """

    context_window: int
    max_output_tokens: int | None = None


def _m(window: int, output: int | None, *names: str) -> dict[str, ModelLimits]:
    return dict.fromkeys(names, ModelLimits(window, output))


#: Built-in model table: lower-case model name -> published limits. Lookups also strip a
#: provider prefix and a date/version suffix (see :func:`model_limits`).
MODELS: Mapping[str, ModelLimits] = {
    # OpenAI, platform.openai.com/docs/models (each model's page: "context window",
    # "max output tokens"). gpt-4o points at gpt-4o-2024-08-06 (16,384 output); the first
    # snapshot 2024-05-13 had 4,096.
    **_m(128_000, 16_384, "gpt-4o", "gpt-4o-2024-08-06", "gpt-4o-2024-11-20", "chatgpt-4o-latest"),
    **_m(128_000, 4_096, "gpt-4o-2024-05-13"),
    **_m(128_000, 16_384, "gpt-4o-mini", "gpt-4o-mini-2024-07-18"),
    **_m(128_000, 4_096, "gpt-4-turbo", "gpt-4-turbo-2024-04-09"),
    # gpt-4-turbo-preview points at gpt-4-0125-preview; both previews 128,000 / 4,096. A
    # bare "-preview" is not stripped (o1-preview is not o1), so the aliases are listed
    **_m(128_000, 4_096, "gpt-4-turbo-preview", "gpt-4-0125-preview", "gpt-4-1106-preview"),
    **_m(1_047_576, 32_768, "gpt-4.1", "gpt-4.1-mini", "gpt-4.1-nano"),
    **_m(200_000, 100_000, "o1", "o3", "o3-mini", "o4-mini"),
    **_m(128_000, 32_768, "o1-preview", "o1-preview-2024-09-12"),
    **_m(128_000, 65_536, "o1-mini", "o1-mini-2024-09-12"),
    # older chat models: gpt-4's 8,192 tokens hold prompt and output together (no separate
    # output limit is published, so the caller passes max_output_tokens); gpt-3.5-turbo
    # (0125) 16,385 window, 4,096 output
    **_m(8_192, None, "gpt-4", "gpt-4-0613"),
    **_m(16_385, 4_096, "gpt-3.5-turbo", "gpt-3.5-turbo-0125"),
    **_m(400_000, 128_000, "gpt-5", "gpt-5-mini", "gpt-5-nano"),
    # Anthropic, docs.anthropic.com "Models overview" (context window 200K for all; max
    # output: 3 Haiku 4,096; 3.5 Sonnet / 3.5 Haiku 8,192; 3.7 Sonnet 64,000 (128K only
    # with a beta header); Sonnet 4 64,000; Opus 4 / 4.1 32,000; Sonnet 4.5 / Haiku 4.5
    # 64,000). The 1M-token Sonnet 4 window is a beta and not used here.
    **_m(200_000, 4_096, "claude-3-haiku", "claude-3-opus"),
    **_m(200_000, 8_192, "claude-3-5-sonnet", "claude-3-5-haiku"),
    **_m(200_000, 64_000, "claude-3-7-sonnet"),
    **_m(200_000, 64_000, "claude-sonnet-4", "claude-sonnet-4-0"),
    **_m(200_000, 32_000, "claude-opus-4", "claude-opus-4-0", "claude-opus-4-1"),
    **_m(200_000, 64_000, "claude-sonnet-4-5", "claude-haiku-4-5"),
    # Mistral, docs.mistral.ai "Models overview" (Large 2: 128k; Small 3 (2501): 32k;
    # Small 3.1 / 3.2: 128k); the API's /v1/models reports these as max_context_length
    # 131072 / 32768. Mistral publishes no separate output limit.
    **_m(131_072, None, "mistral-large", "mistral-large-latest", "mistral-large-2407", "mistral-large-2411"),
    **_m(32_768, None, "mistral-small-2501"),
    **_m(131_072, None, "mistral-small-latest", "mistral-small-2503", "mistral-small-2506"),
    # Meta Llama 3.1 / 3.2 / 3.3 model cards: 128K context (max_position_embeddings
    # 131072 in each config.json); no separate output limit.
    **_m(
        131_072,
        None,
        "llama-3.1-8b-instruct",
        "llama-3.1-70b-instruct",
        "llama-3.1-405b-instruct",
        "llama-3.2-1b-instruct",
        "llama-3.2-3b-instruct",
        "llama-3.3-70b-instruct",
        "meta-llama-3.1-8b-instruct",
        "meta-llama-3.1-70b-instruct",
        "meta-llama-3.1-405b-instruct",
    ),
    # Google, ai.google.dev/gemini-api/docs/models ("input token limit", "output token
    # limit"): 1.5 Pro 2,097,152 / 8,192; 1.5 Flash 1,048,576 / 8,192; 2.0 Flash
    # 1,048,576 / 8,192; 2.5 Pro and 2.5 Flash 1,048,576 / 65,536.
    **_m(2_097_152, 8_192, "gemini-1.5-pro"),
    **_m(1_048_576, 8_192, "gemini-1.5-flash", "gemini-2.0-flash", "gemini-2.0-flash-lite"),
    **_m(1_048_576, 65_536, "gemini-2.5-pro", "gemini-2.5-flash"),
}

# provider prefixes that are not separated by "/" (Amazon Bedrock model ids)
_DOT_PREFIX = re.compile(r"^(?:[a-z]{2,4}\.)?(?:anthropic|meta|mistral)\.")
# version suffixes, tried one at a time from the end
_SUFFIXES = [
    re.compile(r"-v\d+(?::\d+)?$"),  # bedrock "-v1:0"
    re.compile(r"[-@]\d{8}$"),  # anthropic "-20250514", vertex "@20250514"
    re.compile(r"-\d{4}-\d{2}-\d{2}$"),  # openai "-2024-08-06"
    re.compile(r"-latest$"),
    re.compile(r"-\d{3}$"),  # gemini "-002"
    re.compile(r"-preview-\d{2}-\d{2}$"),  # gemini "-preview-05-06" (a bare "-preview" is another model: o1-preview)
]


def _candidates(model: str) -> list[str]:
    """Names to look up, most specific first."""
    name = model.strip().lower()
    out = [name]
    if "/" in name:
        name = name.rsplit("/", 1)[1]
        out.append(name)
    bare = _DOT_PREFIX.sub("", name)
    if bare != name:
        name = bare
        out.append(name)
    changed = True
    while changed:
        changed = False
        for pat in _SUFFIXES:
            shorter = pat.sub("", name)
            if shorter != name and shorter:
                name = shorter
                out.append(name)
                changed = True
                break
    return out


def did_you_mean(model: str, models: Mapping[str, Any] | None = None) -> str:
    """``" (did you mean 'NAME'?)"`` naming the model table entry (built-in or the
    caller's ``models``) closest to ``model`` by :func:`difflib.get_close_matches`
    (similarity 0.8 or more, names compared as :func:`model_limits` compares them,
    without provider prefix or date suffix), or ``""`` when none is that close.

    An unknown model falls back to a guessed window; a typo (``gpt-4oo``,
    ``claude-sonet-4``) is then named with its likely fix in the rule and the errors
    that report it.

    >>> did_you_mean("claude-sonet-4-5"), did_you_mean("acme-llm-9000")
    (" (did you mean 'claude-sonnet-4-5'?)", '')
    """
    names = list(MODELS)
    if isinstance(models, Mapping):
        names += [k.strip().lower() for k in models if isinstance(k, str)]
    got = difflib.get_close_matches(_candidates(model)[-1], names, n=1, cutoff=0.8)
    return f" (did you mean {shown(got[0])}?)" if got else ""


def _limits_of(name: str, value: Any) -> ModelLimits:
    if isinstance(value, ModelLimits):
        limits = value
    elif isinstance(value, Mapping):
        # an integer of another type (numpy.int64) read as the int it is, as every int option
        plain = {k: v if (n := as_int(v)) is None else n for k, v in value.items()}
        try:
            limits = msgspec.convert(plain, ModelLimits)
        except msgspec.ValidationError as exc:
            # a number whose __index__ raised is kept as it is, for msgspec to refuse
            cause = next((c for v in value.values() if (c := int_cause(v)) is not None), None)
            raise TypeError(f"models[{shown(name)}]: {exc}") from cause
    else:
        raise TypeError(f"models[{shown(name)}] must be a ModelLimits or a mapping, got {type(value).__name__}")
    w, o = limits.context_window, limits.max_output_tokens
    window = _as_count(w, 1)
    if window is None:
        raise ValueError(f"models[{shown(name)}].context_window must be a positive int, got {shown(w)}") from int_cause(
            w
        )
    output = None if o is None else _as_count(o)
    if o is not None and output is None:
        raise ValueError(
            f"models[{shown(name)}].max_output_tokens must be None or an int >= 0, got {shown(o)}"
        ) from int_cause(o)
    if type(w) is not int or (o is not None and type(o) is not int):
        limits = ModelLimits(context_window=window, max_output_tokens=output)
    return limits


def model_limits(model: str, models: Mapping[str, Any] | None = None) -> ModelLimits | None:
    """Look up a model's context window and output limit.

    The name is matched case-insensitively, first as given, then without a provider
    prefix (``openai/gpt-4o``, ``models/gemini-1.5-pro``, Bedrock's
    ``anthropic.claude-...-v1:0``), then without date or version suffixes one at a time
    (``-2024-08-06``, ``-20250514``, ``@20250514``, ``-latest``, ``-002``, Gemini's
    dated ``-preview-05-06``). A bare ``-preview`` is kept: it often names another model
    (``o1-preview`` is not ``o1``), so a preview is found only when the table or
    ``models`` lists it (``gpt-4-turbo-preview`` is listed; ``o3-preview`` is not known).
    At each step the caller's ``models`` win over the built-in :data:`MODELS`.

    Args:
        model: model name as the caller or the request names it.
        models: extra or replacement entries, name -> :class:`ModelLimits` or a mapping
            with ``context_window`` and ``max_output_tokens``; merged over :data:`MODELS`.

    Returns:
        The limits (in tokens), or ``None`` when the model is not known.

    Raises:
        TypeError: ``model`` is not a string, or a ``models`` entry has the wrong type.
        ValueError: a ``models`` entry has a non-positive window or a negative output limit.

    >>> model_limits("openai/gpt-4o-2024-08-06")
    ModelLimits(context_window=128000, max_output_tokens=16384)
    """
    if not isinstance(model, str):
        raise TypeError(f"model must be a str, got {type(model).__name__}")
    extra: dict[str, ModelLimits] = {}
    if models is not None:
        if not isinstance(models, Mapping):
            raise TypeError(f"models must be a mapping of name -> ModelLimits, got {type(models).__name__}")
        for k, v in models.items():
            if not isinstance(k, str):
                raise TypeError(f"models keys must be model names (str), got {type(k).__name__}")
            extra[k.strip().lower()] = _limits_of(k, v)
    for name in _candidates(model):
        if name in extra:
            return extra[name]
        if name in MODELS:
            return MODELS[name]
    return None


class Budget(msgspec.Struct, frozen=True, kw_only=True):
    """A resolved token budget (DESIGN.md section 6). All numbers are tokens.

    Attributes:
        context_window: the window used for the arithmetic: declared (argument, model
            table, ``LLM_CONTEXT_SIZE``), else ``max_context_tokens`` (second seed), else
            the 32,000 fallback (second seed) or the 128,000 default (first seed).
        max_output_tokens: tokens reserved for the response.
        tool_schema_tokens: tokens of the request's tool definitions, outside ``usable``.
        safety_margin: tokens kept free on top of everything else.
        capacity: ``context_window - max_output_tokens``: the most a request (messages +
            tool schemas) may hold; :func:`check_capacity` enforces it.
        target: the proactive trimming target for the whole request before tool schemas
            and margin: ``capacity`` by default, else from ``max_context_tokens`` /
            ``compact_ratio``, lowered by the history cap, capped by ``capacity``.
        usable: the token budget for the messages: ``target - tool_schema_tokens -
            safety_margin``, raised to ``floor`` but never above ``capacity -
            tool_schema_tokens``; never negative.
        floor: the lower bound asked for (first seed: 4,000).
        trim_enabled: ``False`` when ``max_context_tokens == 0`` (second seed): no
            proactive trimming, only the capacity check.
        capacity_known: ``True`` when the window was declared (argument, model table or
            environment); ``False`` for a default, a fallback or ``max_context_tokens``
            standing in for it.
        model: the model name given, if any.
        rules: one line per decision, ``"<rule>: <what it set>"``, in order.

    >>> resolve_budget(env={}).usable
    64000
    """

    context_window: int
    max_output_tokens: int
    tool_schema_tokens: int
    safety_margin: int
    capacity: int
    target: int
    usable: int
    floor: int
    trim_enabled: bool
    capacity_known: bool
    model: str | None = None
    rules: list[str] = []


class ReserveError(ValueError):
    """The output reserve leaves no token of the context window for the input: it is as
    large as the window or larger (DESIGN.md section 6: a configuration error; a reserve
    equal to the window, capacity 0, can hold no request either: fresh11 N4).

    Not exported: the CLI reads ``source`` to name its own option for the reserve.

    Attributes:
        reserve: the output reserve in tokens.
        window: the context window in tokens.
        source: where the reserve came from: ``"argument"`` (``max_output_tokens=``),
            ``"model"`` (the model table), ``"env"`` (``LLM_MAX_OUTPUT_TOKENS``) or
            ``"default"`` (the first seed's 64,000).

    >>> str(ReserveError(8_000, 8_000, "argument"))
    'output reserve max_output_tokens=8,000 is as large as the context window 8,000 (no token left for the input)'
    """

    def __init__(self, reserve: int, window: int, source: str, hint: str = "") -> None:
        self.reserve = reserve
        self.window = window
        self.source = source
        super().__init__(f"output reserve max_output_tokens={reserve:,} {_too_large(reserve, window)}{hint}")

    def __reduce__(self) -> tuple[Any, ...]:
        # message and attributes, without __init__'s arguments (fresh20a F2: unpickling
        # it raised TypeError, so a ProcessPoolExecutor worker's error broke the pool)
        return _reduce_error(self)


def _too_large(reserve: int, window: int) -> str:
    """``is larger than the context window 8,000``, or for a reserve equal to the window
    ``is as large as the context window 8,000 (no token left for the input)``."""
    if reserve > window:
        return f"is larger than the context window {window:,}"
    return f"is as large as the context window {window:,} (no token left for the input)"


def _as_count(value: Any, minimum: int = 0) -> int | None:
    """``value`` as a plain int when it is an integer (any that :func:`operator.index`
    takes; a bool is not one) >= ``minimum``, else ``None``."""
    n = as_int(value)
    return n if n is not None and n >= minimum else None


def _int_arg(name: str, value: Any, *, minimum: int, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    n = as_int(value)
    if n is None:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}") from int_cause(value)
    if n < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {n}")
    return n


def _number_option(name: str, value: Any, *, minimum: int, what: str = "an int") -> int:
    """``value`` as a plain int when it is an integer >= ``minimum``; anything else is a
    ``ValueError`` naming the option, a string, a bool or a float as much as a number out
    of range (the README's rule for number options, which fit and trim_turns follow)."""
    n = _as_count(value, minimum)
    if n is None:
        raise ValueError(f"{name} must be {what} >= {minimum}, got {shown(value)}") from int_cause(value)
    return n


#: The largest token budget the engine counts to (u64 arithmetic); a larger one means no limit.
_NO_LIMIT = 2**63 - 1


#: What :func:`token_budget` reads as "no ``usable`` attribute".
_NO_USABLE = object()


def token_budget(budget: Any, *, allow_none: bool = False) -> int | None:
    """The token budget for the messages that ``fit``, ``recover_from_overflow`` and
    ``prune_middle`` take: an int >= 0, a :class:`Budget` (checked by
    :func:`checked_budget`, its ``usable`` read), or any other object with an int
    ``usable`` >= 0. One reading for the three (fresh13 N3: each checked an object's
    ``usable`` in other words, and only ``fit`` read one above 2**63 - 1 as no limit).

    Args:
        budget: the budget as the caller gave it.
        allow_none: ``None`` is allowed (``prune_middle``: prune unconditionally).

    Returns:
        The budget in tokens, at most 2**63 - 1 (a larger one means no limit, as
        ``trim_turns`` reads it); ``None`` for ``None`` when allowed.

    Raises:
        ValueError: ``budget`` is neither an int >= 0 nor has a ``usable`` (a string, a
            bool or a float as much as a negative number), or its ``usable`` is not an
            int >= 0 (``budget.usable must be a non-negative int, got '5'``), or reading
            it raised (chained from that exception).
        TypeError: a :class:`Budget` with a field of the wrong type (see
            :func:`checked_budget`, which also raises its ``ValueError``).

    >>> token_budget(resolve_budget(context_window=1000, max_output_tokens=200, env={}, floor=0))
    800
    """
    if budget is None and allow_none:
        return None
    if isinstance(budget, Budget):
        # a hand-built one: resolve_budget's rules (fresh12 O6)
        return min(checked_budget(budget).usable, _NO_LIMIT)
    try:
        value = getattr(budget, "usable", _NO_USABLE)
    except Exception as exc:
        # a property that raises is refused as a usable that is not an int, chained from
        # what it raised, as a failing __index__ is (fresh44 #5: its KeyError went out raw)
        raise ValueError(f"budget.usable must be a non-negative int, could not read it: {exc!r}") from exc
    if value is not _NO_USABLE:
        usable = _as_count(value)
        if usable is None:
            raise ValueError(f"budget.usable must be a non-negative int, got {shown(value)}") from int_cause(value)
        return min(usable, _NO_LIMIT)
    n = _as_count(budget)
    if n is None:
        what = "None, a non-negative int" if allow_none else "a non-negative int"
        raise ValueError(f"budget must be {what} or have an int 'usable', got {shown(budget)}") from int_cause(budget)
    return min(n, _NO_LIMIT)


def _has_usable(budget: object) -> bool:
    """Whether ``budget`` has a ``usable``: one whose property raises (anything but
    AttributeError) has one too; only the wording of a refusal reads this."""
    try:
        return hasattr(budget, "usable")
    except Exception:
        return True


def whole_budget_error(budget: object) -> TypeError:
    """The ``TypeError`` of an entry that needs the whole :class:`Budget` (``ContextGuard``,
    ``check_capacity``: the window and the reserve, not only ``usable``) for ``budget``,
    naming the entries that take an object with a ``usable`` when it has one."""
    text = f"budget must be a Budget from resolve_budget, got {type(budget).__name__}"
    if isinstance(budget, int) and not isinstance(budget, bool):
        text += (
            " (a number is a token budget for fit, trim_turns and the gateway; this needs the window and"
            " the output reserve too: pass resolve_budget(context_window=..., max_output_tokens=...),"
            " or those keywords)"
        )
    elif _has_usable(budget):
        text += (
            " (an object with 'usable' is a token budget for fit, recover_from_overflow and prune_middle;"
            " this needs the window and reserve too)"
        )
    return TypeError(text)


_BUDGET_NUMBERS = (
    "context_window",
    "max_output_tokens",
    "tool_schema_tokens",
    "safety_margin",
    "capacity",
    "target",
    "usable",
    "floor",
)


def checked_budget(budget: Budget) -> Budget:
    """Refuse a hand-built :class:`Budget` that :func:`resolve_budget` could never return.

    Every public entry that takes a ``Budget`` (``ContextGuard``, ``fit``,
    ``recover_from_overflow``, ``prune_middle``, ``check_capacity``) calls this one check
    (fresh12 O6: ``Budget(context_window=100, max_output_tokens=100, capacity=0, ...)``
    was accepted where ``resolve_budget`` refuses the same reserve). The rules are the
    documented relations of the fields: every number an int >= 0 (the window >= 1); the
    flags ``trim_enabled`` and ``capacity_known`` bools (fresh13 N1: ``"no"`` switched
    trimming on), ``model`` a str or ``None``, ``rules`` a list of str; a reserve
    smaller than the window (DESIGN.md section 6); ``capacity == context_window -
    max_output_tokens``; ``target <= capacity``; ``usable <= capacity -
    tool_schema_tokens`` (at least 0).

    Args:
        budget: the :class:`Budget` to check.

    Returns:
        ``budget`` itself, or a copy whose number fields are plain ints when one holds an
        integer of another type (``numpy.int64``, an ``IntEnum``: taken as any int
        option is, fresh16a F3).

    Raises:
        TypeError: a number field is not an int (``Budget.usable must be an int, got str``),
            a flag not a bool (``Budget.trim_enabled must be a bool, got str``), ``model``
            not a str or ``None``, ``rules`` not a list of str.
        ValueError: a number is out of range or the fields disagree (naming the field
            and both numbers); a ``ReserveError`` for a reserve as large as the window
            or larger, worded as :func:`check_capacity`'s.

    >>> checked_budget(resolve_budget(context_window=1000, max_output_tokens=200, env={})).capacity
    800
    """
    plain: dict[str, int] = {}
    for name in _BUDGET_NUMBERS:
        value = getattr(budget, name)
        n = _int_arg(f"Budget.{name}", value, minimum=1 if name == "context_window" else 0)
        if type(value) is not int:
            plain[name] = n  # type: ignore[assignment]
    if plain:
        budget = msgspec.structs.replace(budget, **plain)
    for name in ("trim_enabled", "capacity_known"):  # "no" is true: it would switch trimming on
        flag = getattr(budget, name)
        if not isinstance(flag, bool):
            raise TypeError(f"Budget.{name} must be a bool, got {type(flag).__name__}")
    if budget.model is not None and not isinstance(budget.model, str):
        raise TypeError(f"Budget.model must be a str or None, got {type(budget.model).__name__}")
    if not isinstance(budget.rules, (list, tuple)):
        raise TypeError(f"Budget.rules must be a list of str, got {type(budget.rules).__name__}")
    for i, rule in enumerate(budget.rules):
        if not isinstance(rule, str):
            raise TypeError(f"Budget.rules[{i}] must be a str, got {type(rule).__name__}")
    window, output = budget.context_window, budget.max_output_tokens
    if output >= window:  # resolve_budget's rule, in check_capacity's words
        raise ReserveError(output, window, "argument")
    if budget.capacity != window - output:
        raise ValueError(
            f"Budget.capacity must be context_window - max_output_tokens = {window:,} - {output:,}"
            f" = {window - output:,}, got {budget.capacity:,}"
        )
    if budget.target > budget.capacity:
        raise ValueError(f"Budget.target {budget.target:,} is larger than its capacity {budget.capacity:,}")
    room = max(0, budget.capacity - budget.tool_schema_tokens)
    if budget.usable > room:
        raise ValueError(
            f"Budget.usable {budget.usable:,} is larger than capacity - tool_schema_tokens"
            f" = {budget.capacity:,} - {budget.tool_schema_tokens:,} = {room:,}"
        )
    return budget


def _env_int(env: Mapping[str, str], var: str, *, minimum: int) -> int | None:
    """An integer environment variable; unset or blank -> None; anything else that is not
    an integer >= ``minimum`` raises ValueError naming the variable."""
    raw = env.get(var)
    if raw is None or not str(raw).strip():
        return None
    text = str(raw).strip()
    try:
        value = int(text)  # Python's int syntax: "128000", "128_000"
    except ValueError:
        if re.fullmatch(r"[+-]?\d+(?:_\d+)*", text):  # an integer past Python's digit limit (fresh22 #4)
            raise ValueError(
                f"environment variable {var} is an integer of more digits than Python reads"
                f" ({getattr(sys, 'get_int_max_str_digits', lambda: 4300)():,}), got {shown(raw)}"
            ) from None
        raise ValueError(f"environment variable {var} must be an integer number of tokens, got {shown(raw)}") from None
    if value < minimum:
        raise ValueError(f"environment variable {var} must be >= {minimum}, got {shown(raw)}")
    return value


def _ratio(value: Any) -> float | None:
    """``compact_ratio`` if in (0, 1], else None (out of range counts as unset)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"compact_ratio must be a number, got {type(value).__name__}")
    if math.isnan(value) or not 0 < value <= 1:
        return None
    return float(value)


def resolve_budget(
    context_window: int | None = None,
    max_output_tokens: int | None = None,
    *,
    model: str | None = None,
    models: Mapping[str, Any] | None = None,
    tool_schema_tokens: int = 0,
    safety_margin: int = 0,
    floor: int = DEFAULT_FLOOR,
    max_context_tokens: int | None = None,
    compact_ratio: float | None = None,
    history_cap: int | None = None,
    env: Mapping[str, str] | None = None,
) -> Budget:
    """Work out the token budget for a request's messages (DESIGN.md section 6).

    1. Window, first found: ``context_window``; the model table (``model``, ``models``);
       ``LLM_CONTEXT_SIZE`` (first seed's precedence: per-model configuration, then the
       environment, then defaults). If none is declared: a positive ``max_context_tokens``
       is the window (second seed); else, when a ``model`` was named but is unknown or a
       valid ``compact_ratio`` is set, the 32,000 fallback (second seed); else the first
       seed's 128,000 default.
    2. Output reserve, first found: ``max_output_tokens``; the model table;
       ``LLM_MAX_OUTPUT_TOKENS``; the first seed's 64,000 when the window is declared or
       the 128,000 default; 0 when the window is the 32,000 fallback or
       ``max_context_tokens`` (the second seed's budgets are for the history itself and
       reserve no output). ``capacity = window - output``, at least 1: a reserve as
       large as the window or larger is refused (fresh11 N4).
    3. Target: ``max_context_tokens == 0`` disables proactive trimming (target =
       capacity). A ``compact_ratio`` in (0, 1] gives ``floor(window * ratio)``, capped from
       above by a positive ``max_context_tokens``; a ratio outside (0, 1] (or NaN) counts
       as unset. A positive ``max_context_tokens`` alone is the target. Neither: the
       capacity (first seed: ``window - output``). A positive ``history_cap`` lowers the
       target, never raises it. Then the target is capped by the capacity.
    4. ``usable = target - tool_schema_tokens - safety_margin``, raised to ``floor``, then
       capped at ``capacity - tool_schema_tokens`` and at 0 from below.

    Where the seeds conflict: the first seed's default budget is ``128,000 - 64,000``;
    the second seed's is a flat 32,000. DESIGN.md section 6 makes ``window - output`` the
    rule, so the 32,000 applies only where the second seed needs it: an unknown capacity
    that a named model or a ratio needs. The first seed clamps any too-small budget to the
    floor; an output reserve larger than the window is instead a configuration error
    (DESIGN.md section 6), and the floor never lifts the budget past the capacity, which
    the second seed makes a hard limit.

    Args:
        context_window: the model's context window in tokens (input + output).
        max_output_tokens: tokens to reserve for the response.
        model: model name to look up in the model table.
        models: caller's entries merged over :data:`MODELS` (see :func:`model_limits`).
        tool_schema_tokens: tokens of the request's tool definitions.
        safety_margin: tokens to keep free.
        floor: lowest usable budget (default 4,000, first seed).
        max_context_tokens: absolute budget for the request; 0 disables proactive trimming.
        compact_ratio: budget as a share of the window, in (0, 1].
        history_cap: a history-pruning cap in tokens; only a positive value, and only lowers.
        env: environment to read ``LLM_CONTEXT_SIZE`` / ``LLM_MAX_OUTPUT_TOKENS`` from
            (default ``os.environ``; pass ``{}`` to ignore the environment). A variable
            sets its number only when no argument or model entry decides it, but a set
            variable that is not an integer in range is an error either way (fresh12
            O3); blank counts as unset; ``128_000`` is allowed, ``128,000`` and ``128k``
            are not.

    Returns:
        A :class:`Budget` whose ``rules`` name the rule behind each number.

    Raises:
        TypeError: an option has the wrong type (e.g. a str window, a bool ratio).
        ValueError: an option is out of range (window <= 0, negative reserve, margin or
            cap, an empty or blank model name), a set environment variable is not an
            integer in range, even one an argument or the model table overrides (names
            the variable), or the output reserve is as large as the window or
            larger, leaving no token for the input (names both numbers; a
            ``ReserveError``, which also says where the reserve came from).

    >>> b = resolve_budget(model="gpt-4o", tool_schema_tokens=500, env={})
    >>> (b.context_window, b.max_output_tokens, b.usable)  # 128,000 - 16,384 - 500
    (128000, 16384, 111116)
    """
    window_arg = _int_arg("context_window", context_window, minimum=1, allow_none=True)
    output_arg = _int_arg("max_output_tokens", max_output_tokens, minimum=0, allow_none=True)
    tools = _int_arg("tool_schema_tokens", tool_schema_tokens, minimum=0)
    margin = _int_arg("safety_margin", safety_margin, minimum=0)
    floor_ = _int_arg("floor", floor, minimum=0)
    mct = _int_arg("max_context_tokens", max_context_tokens, minimum=0, allow_none=True)
    cap = _int_arg("history_cap", history_cap, minimum=0, allow_none=True)
    assert tools is not None and margin is not None and floor_ is not None
    ratio = _ratio(compact_ratio)
    if model is not None and not isinstance(model, str):
        raise TypeError(f"model must be a str, got {type(model).__name__}")
    if model is not None and not model.strip():  # the right type, a bad value (fresh9 D3)
        raise ValueError(f"model must be a non-empty str, got {shown(model)}")
    environ: Mapping[str, str] = os.environ if env is None else env
    if not isinstance(environ, Mapping):
        raise TypeError(f"env must be a mapping, got {type(environ).__name__}")
    rules: list[str] = []
    # both variables are checked whether or not they decide a number: a malformed value is
    # the user's explicit setting gone wrong, an error with or without a table model
    # (fresh12 O3); the precedence below is unchanged
    env_window = _env_int(environ, ENV_CONTEXT_SIZE, minimum=1)
    env_output = _env_int(environ, ENV_MAX_OUTPUT_TOKENS, minimum=0)

    limits = model_limits(model, models) if model is not None else None
    if model is not None and limits is None:
        rules.append(f"model_unknown: {shown(model)} is not in the model table{did_you_mean(model, models)}")
    # 1. window
    declared = True
    default_pair = False
    if window_arg is not None:
        window = window_arg
        rules.append(f"window_argument: context_window={window}")
    elif limits is not None:
        window = limits.context_window
        rules.append(f"window_from_model: context_window={window} ({model})")
    elif env_window is not None:
        window = env_window
        rules.append(f"window_from_env: context_window={window} ({ENV_CONTEXT_SIZE})")
    else:
        declared = False
        if mct:
            window = mct
            rules.append(f"window_from_max_context_tokens: context_window={window} (no declared window)")
        elif model is not None or ratio is not None:
            window = FALLBACK_CONTEXT_WINDOW
            rules.append(f"window_fallback_32000: context_window={window} (capacity unknown)")
        else:
            window = DEFAULT_CONTEXT_WINDOW
            default_pair = True
            rules.append(f"window_default_128000: context_window={window}")

    # 2. output reserve
    if output_arg is not None:
        output, source = output_arg, "argument"
        rules.append(f"output_argument: max_output_tokens={output}")
    elif limits is not None and limits.max_output_tokens is not None:
        output, source = limits.max_output_tokens, "model"
        rules.append(f"output_from_model: max_output_tokens={output} ({model})")
    elif env_output is not None:
        output, source = env_output, "env"
        rules.append(f"output_from_env: max_output_tokens={output} ({ENV_MAX_OUTPUT_TOKENS})")
    elif limits is not None and DEFAULT_MAX_OUTPUT_TOKENS > window // 2:
        # a table model that publishes no output limit and whose window the first seed's
        # 64,000 would swallow (gpt-4: 8,192 for prompt and output together): half of it
        output, source = window // 2, "model"
        rules.append(f"output_half_window: max_output_tokens={output} ({model} publishes no output limit)")
    elif declared or default_pair:
        output, source = DEFAULT_MAX_OUTPUT_TOKENS, "default"
        rules.append(f"output_default_64000: max_output_tokens={output}")
    else:
        output, source = 0, "default"
        rules.append("output_none_reserved: max_output_tokens=0 (the budget stands for the history itself)")
    if output >= window:  # at least one token of the window for the input (fresh11 N4)
        raise ReserveError(
            output, window, source, f": set a smaller max_output_tokens (or {ENV_MAX_OUTPUT_TOKENS}) or the real window"
        )
    capacity = window - output

    # 3. target
    trim_enabled = mct != 0
    if not trim_enabled:
        target = capacity
        rules.append("trim_disabled: max_context_tokens=0 disables proactive trimming (capacity check only)")
        if compact_ratio is not None:
            rules.append("compact_ratio_ignored: proactive trimming is disabled")
    else:
        if compact_ratio is not None and ratio is None:
            rules.append(f"compact_ratio_ignored: {shown(compact_ratio)} is outside (0, 1]")
        if ratio is not None:
            target = math.floor(Decimal(window) * Decimal(repr(ratio)))
            rules.append(f"target_compact_ratio: target={target} (floor({window} * {shown(ratio)}))")
            if mct is not None and mct < target:
                target = mct
                rules.append(f"target_capped_by_max_context_tokens: target={target}")
        elif mct is not None:
            target = mct
            rules.append(f"target_max_context_tokens: target={target}")
        else:
            target = capacity
            rules.append(f"target_window_minus_output: target={target} ({window} - {output})")
        if cap == 0:  # said, as any other value is (fresh49 note: it went with no rule)
            rules.append("history_cap_ignored: 0 is no cap (only a positive value lowers the target)")
        elif cap:
            if cap < target:
                target = cap
                rules.append(f"history_cap: target={target} (lowered)")
            else:
                rules.append(f"history_cap_ignored: {cap} does not lower the target {target}")
    if target > capacity:
        target = capacity
        rules.append(f"capped_by_capacity: target={target} ({window} - {output})")

    # 4. usable
    usable = target - tools - margin
    if tools or margin:
        rules.append(f"tools_and_margin: usable={usable} ({target} - {tools} - {margin})")
    if usable < floor_:
        usable = floor_
        rules.append(f"floor: usable={usable} (raised to the floor)")
    room = max(0, capacity - tools)
    if usable > room:
        usable = room
        rules.append(f"floor_capped_by_capacity: usable={usable} ({capacity} - {tools})")
    return Budget(
        context_window=window,
        max_output_tokens=output,
        tool_schema_tokens=tools,
        safety_margin=margin,
        capacity=capacity,
        target=target,
        usable=usable,
        floor=floor_,
        trim_enabled=trim_enabled,
        capacity_known=declared,
        model=model,
        rules=rules,
    )


def check_capacity(
    tokens: int,
    budget: Budget | int,
    *,
    max_output_tokens: int = 0,
    tool_schema_tokens: int | None = None,
) -> int:
    """Fail before sending a request that cannot fit the model's capacity.

    The second seed: a request whose prepared messages, images and tool schemas exceed
    the model's context window fails before it reaches the provider, and this check
    applies even when proactive trimming is disabled (``max_context_tokens = 0``).
    Capacity here is ``window - reserved output`` (DESIGN.md section 6); the safety margin
    and the proactive target do not count, only the hard limit.

    Args:
        tokens: estimated tokens of the request's messages.
        budget: a :class:`Budget`, or a context window in tokens.
        max_output_tokens: output reserve when ``budget`` is a window (ignored otherwise).
        tool_schema_tokens: tokens of the tool definitions, added to ``tokens``; ``None``
            takes ``budget.tool_schema_tokens`` (0 for a bare window).

    Returns:
        The headroom: capacity minus the request's tokens (``>= 0``).

    Raises:
        ContextOverflowError: the request exceeds the capacity; ``.tokens``,
            ``.capacity`` and ``.over`` hold the numbers.
        ValueError: ``tokens``, ``budget``, ``max_output_tokens`` or
            ``tool_schema_tokens`` is not an int in range (a string, a bool or a float
            as much as a negative number; ``max_output_tokens`` is checked next to a
            :class:`Budget` too), or (for a bare window) ``max_output_tokens`` is as
            large as the window or larger, as in :func:`resolve_budget`.
        TypeError / ValueError: a :class:`Budget` that :func:`checked_budget` refuses
            (a field of the wrong type, fields that disagree, a reserve as large as the
            window).
        TypeError: ``budget`` is another object with a ``usable`` (a token budget for
            ``fit``; the capacity needs the window and the reserve).

    >>> check_capacity(100_000, resolve_budget(model="gpt-4o", env={}))  # 128,000 - 16,384 - 100,000
    11616
    """
    n = _number_option("tokens", tokens, minimum=0)
    if isinstance(budget, Budget):
        budget = checked_budget(budget)
        # documented as ignored next to a Budget, but not when it is no reserve at all
        _number_option("max_output_tokens", max_output_tokens, minimum=0)
        capacity = budget.capacity
        window, output = budget.context_window, budget.max_output_tokens
        default_tools = budget.tool_schema_tokens
    elif hasattr(budget, "usable"):
        raise whole_budget_error(budget)
    else:
        window = _number_option("budget", budget, minimum=1, what="a Budget or an int")
        output = _number_option("max_output_tokens", max_output_tokens, minimum=0)
        if output >= window:  # resolve_budget's rule
            raise ReserveError(output, window, "argument")
        capacity = window - output
        default_tools = 0
    tools = default_tools
    if tool_schema_tokens is not None:
        tools = _number_option("tool_schema_tokens", tool_schema_tokens, minimum=0)
    total = n + tools
    if total > capacity:
        raise ContextOverflowError(
            f"request of {total:,} tokens does not fit the model's capacity of {capacity:,}"
            f" (context window {window:,} - output reserve {output:,}): {total - capacity:,} over",
            tokens=total,
            capacity=capacity,
        )
    return capacity - total
