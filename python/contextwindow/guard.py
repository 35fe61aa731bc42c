"""ContextGuard: the per-iteration budget enforcer an agent loop calls before every model
request (first seed, layer 3; third seed, "before every LLM call"; issue 5).

``guard.check(messages, hint=...)`` runs the steps below, cheapest first, and stops as
soon as the conversation fits:

1. ``tool_output`` (always, before every call): a message over ``max_message_chars``
   characters is cut (first seed, 50,000; a tool result's text keeping head and tail at
   line boundaries, other text its head); a single tool result over
   ``max_result_share`` of the context window is cut keeping head and tail (third seed,
   50%); a text-action observation (user text starting with ``[Tool results]``) is a
   tool result to both cuts, its prefix kept; when the whole input passes
   ``max_total_share`` of the window (third seed, 75%), the oldest results of
   output-heavy tools are cleared (:func:`contextwindow.compact.budget_tool_results`).
2. ``tool_results`` (over the token budget only): the oldest results of output-heavy
   tools are cleared until the estimate is back under the target, sparing the newest
   ``keep_recent_results`` results (not the whole current turn, as step 1 does: an agent
   loop is often one long turn); skipped for the ``step_dependency`` hint, whose
   protected content is the data tool results carry.
3. ``history`` (still over): :func:`contextwindow.fit.fit` evicts whole units by priority
   (P3 old tool output and chatter first, then P2 older turns, then P1 recent turns) down
   to the low-water mark, ``low_water`` x the token budget (default 70%), so the kept
   prefix stays byte-stable for the next calls instead of shifting on every call.
   When it does not run, broken tool pairs are still repaired, as ``fit`` and
   ``trim_turns`` repair them (:func:`contextwindow.repair_tool_pairs`; event reason
   ``tool_pairs``), so every request passes ``validate``. Steps 2 and 3 compare the
   repaired size with the budget: when the ``[tool result missing]`` stub a repair adds
   pushes an input over the budget, they run (fresh8 N2: it used to be sent to step 4
   and raise). The guard never does worse than ``fit`` on its own input with its own
   policy: when eviction after steps 1-2 does not fit (a result cut inside a pinned
   message can leave the pinned messages under their share, so the turn holding one
   cannot go; a hint's priorities can reach a dead end where no unit can go without two
   Anthropic user messages meeting), ``fit`` of the input is the result, by the hint's
   priorities when they fit, else by the guard's policy, and steps 1-2 are left out.
4. ``capacity``: when the result still exceeds the model's capacity (window - reserved
   output), :class:`~contextwindow.ContextOverflowError` is raised before the request is
   sent (second seed). A token budget above the estimate but under the capacity passes:
   the budget is a target, the capacity is the limit.

``guard.recover(messages, reported_tokens=...)`` is the reactive path for a provider that
still says the context overflowed: :func:`contextwindow.fit.recover_from_overflow` (whole
turns down to two thirds of the current size, or what the provider's count implies; second
seed), then :func:`contextwindow.compact.prune_middle` when that could not remove anything
(third seed, layer 2), sparing what the policy never evicts as the first step does (pinned
messages, class 0, classes outside ``eviction_order``, with their tool units); when neither
changed anything, broken tool pairs are still repaired (event reason ``tool_pairs``), so
every output passes ``validate``.

Hints (first seed) say what the history step protects; they are carried on every event and
on the result, for the LLM compaction step a later version adds:

* ``react_iteration``: recent reasoning chain, current goal, key data; old redundant
  steps and verbose tool output go first (the default priorities).
* ``planner_input``: the user's intent as it evolved (every real user message is at
  least P1) and key decisions; tool-call mechanics of older turns go first (P3).
* ``step_dependency``: key data, numbers, conclusions (tool results of older turns are
  P2, never cleared by step 2); reasoning text of older turns goes first (P3).
* ``general``: the default priorities.

Each step that changed something emits one event to every subscriber, in step order, and
adds to :class:`Stats`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable
from typing import Any, Literal, get_args

import msgspec

from . import _engine
from ._engine import nesting_errors
from ._jsontext import as_int, int_cause, shown
from .budget import Budget, check_capacity, checked_budget, did_you_mean, resolve_budget, whole_budget_error
from .compact import OUTPUT_HEAVY_TOOLS, WRITE_TOOLS, _budget_tool_results, _count, _names, _prune_middle, _share
from .errors import ContextOverflowError
from .estimate import count_messages, resolve_profile
from .fit import FitPolicy, _check_policy, fit, priorities, recover_from_overflow
from .messages import ToolCall, ToolResult
from .report import Violation
from .turns import segment_turns

__all__ = [
    "HINTS",
    "ContextGuard",
    "GuardEvent",
    "GuardResult",
    "GuardStep",
    "HistoryTrimmed",
    "Hint",
    "MessageTruncated",
    "MiddlePruned",
    "OverflowRecovered",
    "Stats",
    "ToolResultTruncated",
    "ToolResultsCleared",
    "hint_priorities",
]

Hint = Literal["react_iteration", "planner_input", "step_dependency", "general"]
HINTS: tuple[str, ...] = get_args(Hint)


class GuardEvent(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """One step of a guard call that changed the conversation.

    Attributes:
        step: ``tool_output``, ``tool_results``, ``history``, ``overflow`` or ``middle``.
        reason: why: the step report's reason (``message_char_cap``,
            ``tool_result_budget``, ``priority_budget``, ``context_overflow``,
            ``middle_pruned``, ``tool_pairs`` when the history step only repaired
            broken tool pairs), or ``token_budget`` for the ``tool_results`` step.
        hint: the hint of the call.
        tokens_before: estimated tokens before this step.
        tokens_after: estimated tokens after it.
        messages_before: messages before this step.
        messages_after: messages after it.

    >>> ToolResultsCleared(step="tool_results", reason="token_budget", hint="general",
    ...     tokens_before=900, tokens_after=400, messages_before=5, messages_after=5,
    ...     results=2, chars_removed=2000).tokens_before
    900
    """

    step: str
    reason: str
    hint: str
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int


class MessageTruncated(GuardEvent, frozen=True, kw_only=True):
    """Messages over the character cap were cut (first seed).

    Attributes:
        messages: how many messages were cut.
        chars_removed: characters (code points) removed in all.

    >>> MessageTruncated(step="tool_output", reason="message_char_cap", hint="general",
    ...     tokens_before=20000, tokens_after=12600, messages_before=3, messages_after=3,
    ...     messages=1, chars_removed=30000).messages
    1
    """

    messages: int
    chars_removed: int


class ToolResultTruncated(GuardEvent, frozen=True, kw_only=True):
    """Tool results over their share of the context window were cut (third seed).

    Attributes:
        results: how many results were cut.
        chars_removed: characters (code points) removed in all.

    >>> ToolResultTruncated(step="tool_output", reason="tool_result_budget", hint="general",
    ...     tokens_before=90000, tokens_after=60000, messages_before=4, messages_after=4,
    ...     results=1, chars_removed=120000).results
    1
    """

    results: int
    chars_removed: int


class ToolResultsCleared(GuardEvent, frozen=True, kw_only=True):
    """Old results of output-heavy tools were replaced by a marker (third seed).

    Attributes:
        results: how many results were cleared.
        chars_removed: characters (code points) removed in all.

    >>> ToolResultsCleared(step="tool_output", reason="tool_result_budget", hint="general",
    ...     tokens_before=900, tokens_after=400, messages_before=5, messages_after=5,
    ...     results=2, chars_removed=2000).results
    2
    """

    results: int
    chars_removed: int


class HistoryTrimmed(GuardEvent, frozen=True, kw_only=True):
    """Whole units and turns were evicted by priority (second seed's HistoryTrimmed).

    Attributes:
        dropped_messages: input messages dropped.
        kept_turns: turns kept.
        dropped_turns: whole turns dropped.
        truncated_messages: kept messages whose text the step shortened (``fit`` cuts a
            tool result, or the newest turn, when evicting is not enough; it can cut a
            result the ``tool_output`` step cut already further).
        chars_removed: characters (code points) those cuts removed, summed over the
            step report's fates.

    >>> HistoryTrimmed(step="history", reason="token_budget", hint="general",
    ...     tokens_before=900, tokens_after=400, messages_before=9, messages_after=4,
    ...     dropped_messages=5, kept_turns=1, dropped_turns=2).dropped_turns
    2
    """

    dropped_messages: int
    kept_turns: int
    dropped_turns: int
    truncated_messages: int = 0
    chars_removed: int = 0


class OverflowRecovered(GuardEvent, frozen=True, kw_only=True):
    """The reactive trim after a provider reported an overflow (second seed).

    Attributes:
        target: the token target the trim aimed at.
        dropped_messages: input messages dropped.
        truncated_messages: kept messages whose text the trim shortened.
        chars_removed: characters (code points) it cut from them.

    >>> OverflowRecovered(step="overflow", reason="context_overflow", hint="general",
    ...     tokens_before=900, tokens_after=580, messages_before=9, messages_after=6,
    ...     target=600, dropped_messages=3).target
    600
    """

    target: int
    dropped_messages: int
    truncated_messages: int = 0
    chars_removed: int = 0


class MiddlePruned(GuardEvent, frozen=True, kw_only=True):
    """The middle of the history was replaced by one notice (third seed, layer 2).

    Attributes:
        removed_messages: messages the notice replaced.

    >>> MiddlePruned(step="middle", reason="middle_pruned", hint="general",
    ...     tokens_before=900, tokens_after=300, messages_before=20, messages_after=9,
    ...     removed_messages=12).removed_messages
    12
    """

    removed_messages: int


def _chars_removed(report: Any) -> int:
    """``chars_removed`` of a history or overflow event: the step report's fates' sum."""
    return sum(f.chars_removed for f in report.fates)


AnyEvent = (
    MessageTruncated | ToolResultTruncated | ToolResultsCleared | HistoryTrimmed | OverflowRecovered | MiddlePruned
)


class GuardStep(msgspec.Struct, frozen=True, kw_only=True):
    """The report of one step that ran.

    Attributes:
        step: the step's name (see :class:`GuardEvent`).
        report: that step's :class:`~contextwindow.FitReport`; its message indices refer
            to the step's input, which is the previous step's output.

    >>> GuardStep(step="history", report=None).step
    'history'
    """

    step: str
    report: Any


class GuardResult(msgspec.Struct, frozen=True, kw_only=True):
    """What :meth:`ContextGuard.check` and :meth:`ContextGuard.recover` return.

    Attributes:
        messages: the conversation to send, in the caller's shape; the caller's own
            objects wherever a message was not changed.
        hint: the hint of the call.
        tokens_before: estimated tokens of the input (messages only; the budget already
            accounts for tool schemas).
        tokens_after: estimated tokens of the output.
        budget: the token budget for messages (``Budget.usable``).
        fits: ``tokens_after <= budget``.
        events: one event per step that changed something, in order.
        steps: every step that ran, with its report.

    >>> GuardResult(messages=[], hint="general", tokens_before=0, tokens_after=0, budget=10,
    ...     fits=True, events=[], steps=[]).fits
    True
    """

    messages: list[Any]
    hint: str
    tokens_before: int
    tokens_after: int
    budget: int
    fits: bool
    events: list[Any]
    steps: list[GuardStep]

    @property
    def changed(self) -> bool:
        """Whether any step changed the conversation.

        >>> GuardResult(messages=[], hint="general", tokens_before=0, tokens_after=0,
        ...     budget=10, fits=True, events=[], steps=[]).changed
        False
        """
        return bool(self.events)


class Stats(msgspec.Struct, frozen=True, kw_only=True):
    """What a :class:`ContextGuard` did since it was made (a snapshot).

    Attributes:
        checks: calls to ``check``.
        compactions: calls to ``check`` or ``recover`` that changed the conversation.
        recoveries: calls to ``recover``.
        tokens_before: estimated tokens of every input, summed.
        tokens_after: estimated tokens of every output, summed.
        last_tokens_before: the latest call's input estimate.
        last_tokens_after: the latest call's output estimate.
        messages_truncated: messages cut by the character cap.
        tool_results_cut: tool results cut to their share of the window.
        tool_results_cleared: tool results replaced by a marker.
        messages_dropped: messages evicted by the history, overflow and middle steps.
        prompt_tokens: provider-reported input tokens (``record_usage``), summed.
        completion_tokens: provider-reported output tokens, summed.

    >>> Stats().checks
    0
    """

    checks: int = 0
    compactions: int = 0
    recoveries: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    last_tokens_before: int = 0
    last_tokens_after: int = 0
    messages_truncated: int = 0
    tool_results_cut: int = 0
    tool_results_cleared: int = 0
    messages_dropped: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


def _hint(hint: object) -> str:
    """``hint`` checked (``None``: ``general``, as ``profile=None`` is the default profile)."""
    if hint is None:
        return "general"
    if not isinstance(hint, str) or hint not in HINTS:
        raise ValueError(f"unknown hint {shown(hint)}; known: {', '.join(HINTS)}")
    return hint


def hint_priorities(
    messages: Any,
    hint: str | None,
    policy: FitPolicy | None = None,
    *,
    profile: str | None = None,
    format: str | None = None,
) -> list[int]:
    """Priority classes (0-3, DESIGN.md section 5) the guard's history step uses for a hint.

    Starts from :func:`contextwindow.fit.priorities` and moves only derived classes of
    messages before the newest turn (P0, explicit ``Message.priority`` and
    ``policy.priorities`` stay as they are):

    * ``general``, ``react_iteration``: unchanged.
    * ``planner_input``: real user messages at least P1 (the intent as it evolved); tool
      calls and tool results P3 (tool-call mechanics).
    * ``step_dependency``: tool calls and results at least P2 (the data); assistant text
      without tool calls P3 (the reasoning process).

    Args:
        messages: OpenAI dicts, Anthropic dicts or ``Message`` structs.
        hint: one of :data:`HINTS` (``None``: ``general``).
        policy: the fit policy (default ``FitPolicy()``).
        profile: estimation profile, for what counts as chatter.
        format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.

    Returns:
        One class per input message.

    Raises:
        ValueError: an unknown hint.
        InvalidMessageError: a malformed message.

    >>> hint_priorities([{"role": "user", "content": "hi"}], "planner_input")
    [0]
    """
    hint = _hint(hint)
    policy = FitPolicy() if policy is None else policy
    derived = priorities(messages, policy, profile=profile, format=format)
    if hint in ("general", "react_iteration"):
        return derived
    prep = _engine.prepare(messages, format)
    msgs = prep.canonical
    # read as the caller's messages were: auto-detection on the structs can say otherwise
    # (an OpenAI struct list with a result in a user message read as Anthropic's, whose
    # second system message is refused)
    seg = segment_turns(msgs, format=prep.provider)
    newest = seg.turns[-1][0] if seg.turns else len(msgs)
    out = list(derived)
    for i, m in enumerate(msgs):
        if i in policy.priorities or m.priority is not None or i >= newest or derived[i] == 0:
            continue
        tool = any(isinstance(p, (ToolCall, ToolResult)) for p in m.content)
        if hint == "planner_input":
            if tool:
                out[i] = 3
            elif m.role == "user":
                out[i] = min(derived[i], 1)
        elif tool:
            out[i] = min(derived[i], 2)
        elif m.role == "assistant":
            out[i] = 3
    return out


_VIOLATIONS = msgspec.json.Decoder(list[Violation])
#: validate codes no pair repair changes: role order, empty content, a prefill ending in
#: whitespace (the library leaves such a message as it is), OpenAI's rules on images
#: (no rule moves or drops one) and Anthropic's rules on tool_use ids and names (no rule
#: renames an id)
_NOT_PAIRS = frozenset(
    {
        "first_not_user",
        "not_alternating",
        "role_not_allowed",
        "empty_content",
        "trailing_whitespace",
        "detail_not_allowed",
        "image_not_allowed",
        "tool_name_not_allowed",
        "call_id_not_allowed",
        "reused_call_id",
        "block_not_allowed",
    }
)


def _pair_repair(p: Any, profile: str) -> Any:
    """The tool-pair repair of prepared input ``p`` (a TrimResult in the caller's shape),
    or ``None`` when no pair is broken (``validate`` finds nothing a repair changes)."""
    found = _VIOLATIONS.decode(_engine.native.validate(p.payload, p.provider))  # cheaper than a repair
    if not any(v.code not in _NOT_PAIRS for v in found):
        return None
    return _engine.apply(p, _engine.native.repair_tool_pairs(p.payload, p.provider, "stub", profile))


def _counts(tally: dict[Any, int]) -> tuple[int, int]:
    """How many messages or tool results a rule changed, and the characters it removed."""
    return len(tally), sum(tally.values())


class ContextGuard:
    """Per-iteration context budget enforcement for an agent loop.

    Args:
        budget: a :class:`~contextwindow.budget.Budget` from
            :func:`~contextwindow.resolve_budget`, or ``None`` to resolve one from
            ``model`` / ``context_window`` / ``max_output_tokens`` (and the environment,
            first seed: ``LLM_CONTEXT_SIZE``, ``LLM_MAX_OUTPUT_TOKENS``).
        model: model name looked up in the model table (used when ``budget`` is None).
        context_window: window in tokens (used when ``budget`` is None).
        max_output_tokens: output reserve in tokens (used when ``budget`` is None).
        profile: estimation profile (default ``conservative``).
        policy: the :class:`~contextwindow.fit.FitPolicy` of the history step; its
            ``low_water`` (default 0.7) is the prompt-cache friendly trim target.
        max_message_chars: character cap per message (first seed: 50,000; None: off);
            a tool result's text (or a ``[Tool results]`` observation's, its prefix kept)
            is cut to head + tail at line boundaries, other text to its head
            (:func:`~contextwindow.compact.budget_tool_results`, rule 1).
        max_result_share: a tool result's largest share of the window (third seed: 0.5).
        max_total_share: share of the window above which old output-heavy tool results
            are cleared before every call (third seed: 0.75).
        output_heavy_tools: tool names whose old results may be cleared.
        protected_tools: tool names whose results are never cleared (write/create).
        keep_recent_results: the ``tool_results`` step never clears the newest this many
            tool results (default 6, as :func:`~contextwindow.compact.micro_compact`).
        subscribers: callables receiving each event (see :meth:`subscribe`).

    Raises:
        ValueError: a hand-built ``budget`` that ``resolve_budget`` could never return
            (``contextwindow.budget.checked_budget``: fields that disagree, a reserve as
            large as the window, a ``ReserveError``; a non-int field is a TypeError), an
            unknown profile, the budget options are inconsistent (see
            :func:`~contextwindow.resolve_budget`, which also says which of
            ``model``, ``context_window`` and ``max_output_tokens`` is of the wrong
            type, with a TypeError), a policy value out of range, or a number option
            that is not a number in range, whatever its type (a string or a bool as much
            as a negative number, as for ``fit``'s budget): a share not a number in
            (0, 1], ``max_message_chars`` not an int >= 1 or None,
            ``keep_recent_results`` not an int >= 0.
        TypeError: ``budget`` is not a ``Budget`` (an object with only a ``usable`` is
            a token budget for ``fit``; the guard needs the window and reserve too),
            ``policy`` not a ``FitPolicy`` (or one
            of its collections, or an item in one, of the wrong type:
            ``FitPolicy(priorities={"0": 1})``), a tool list is a bare string or holds
            non-strings, a subscriber is not callable.

    Thread safety: one guard may serve several threads; stats and subscribers are
    guarded by a lock, and each call works on its own inputs.

    >>> guard = ContextGuard(context_window=8000, max_output_tokens=2000)
    >>> r = guard.check([{"role": "user", "content": "hi"}], hint="react_iteration")
    >>> r.fits, r.changed, guard.stats.checks
    (True, False, 1)
    """

    def __init__(
        self,
        budget: Budget | None = None,
        *,
        model: str | None = None,
        context_window: int | None = None,
        max_output_tokens: int | None = None,
        profile: str | None = None,
        policy: FitPolicy | None = None,
        max_message_chars: int | None = 50_000,
        max_result_share: float = 0.5,
        max_total_share: float = 0.75,
        output_heavy_tools: Collection[str] = OUTPUT_HEAVY_TOOLS,
        protected_tools: Collection[str] = WRITE_TOOLS,
        keep_recent_results: int = 6,
        subscribers: Collection[Callable[[Any], None]] = (),
    ) -> None:
        if budget is None:
            budget = resolve_budget(context_window, max_output_tokens, model=model)
            if model is not None and not budget.capacity_known:
                # as the CLI's --model: a guessed window could be larger than the real one
                raise ValueError(
                    f"unknown model {shown(model)}{did_you_mean(model)}: not in the model table; pass"
                    " context_window= (and"
                    " max_output_tokens=), models= to resolve_budget, or a Budget"
                )
        elif not isinstance(budget, Budget):
            raise whole_budget_error(budget)
        elif (model, context_window, max_output_tokens) != (None, None, None):
            raise ValueError("pass either budget or model / context_window / max_output_tokens, not both")
        else:
            budget = checked_budget(budget)  # a hand-built one: resolve_budget's rules (fresh12 O6)
        profile = resolve_profile(profile)
        if policy is not None and not isinstance(policy, FitPolicy):
            raise TypeError(f"policy must be a FitPolicy, got {type(policy).__name__}")
        # options are checked here, not at the first check() deep inside a step
        policy = _check_policy(policy)
        max_message_chars = _count("max_message_chars", max_message_chars, minimum=1, allow_none=True)
        _share(max_result_share, "max_result_share")
        _share(max_total_share, "max_total_share")
        if isinstance(subscribers, (str, bytes)) or not isinstance(subscribers, Iterable):
            raise TypeError(f"subscribers must be a collection of callables, got {type(subscribers).__name__}")
        subs = list(subscribers)
        for fn in subs:
            if not callable(fn):
                raise TypeError(f"subscribers must be callables, got {type(fn).__name__}")
        self.budget = budget
        self.profile = profile
        self.policy = policy
        self.max_message_chars = max_message_chars
        self.max_result_share = max_result_share
        self.max_total_share = max_total_share
        self.keep_recent_results = _count("keep_recent_results", keep_recent_results, minimum=0)
        self.output_heavy_tools = _names(output_heavy_tools, "output_heavy_tools")
        self.protected_tools = _names(protected_tools, "protected_tools")
        self._lock = threading.Lock()
        self._subscribers: list[Callable[[Any], None]] = subs
        self._stats = Stats()

    def __repr__(self) -> str:
        b = self.budget
        return f"ContextGuard(budget={b.usable} tokens, window={b.context_window}, profile={self.profile!r})"

    @property
    def stats(self) -> Stats:
        """A snapshot of what this guard did so far.

        >>> ContextGuard(context_window=8000, max_output_tokens=2000).stats.compactions
        0
        """
        with self._lock:
            return self._stats

    def subscribe(self, callback: Callable[[Any], None]) -> Callable[[], None]:
        """Call ``callback(event)`` for every event from now on.

        Callbacks run in the calling thread after the step results and :attr:`stats` are
        final; an exception a callback raises propagates out of ``check``/``recover``
        (the stats already count that call).

        Args:
            callback: called with each event, one argument: a :class:`GuardEvent`
                (``ToolResultsCleared``, ``HistoryTrimmed``, ``OverflowRecovered``, ...).

        Returns:
            A function that unsubscribes ``callback``.

        Raises:
            TypeError: ``callback`` is not callable.

        >>> guard = ContextGuard(context_window=8000, max_output_tokens=2000)
        >>> stop = guard.subscribe(print); stop()
        """
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def record_usage(self, prompt_tokens: int, completion_tokens: int = 0) -> None:
        """Add the provider-reported usage of one call to :attr:`stats`.

        Args:
            prompt_tokens: the call's prompt (input) tokens as the provider reports them
                (OpenAI ``usage.prompt_tokens``, Anthropic ``usage.input_tokens``), an int
                >= 0; added to ``stats.prompt_tokens``.
            completion_tokens: its output tokens (``completion_tokens`` /
                ``output_tokens``), an int >= 0; added to ``stats.completion_tokens``.

        Raises:
            ValueError: a count that is not an int >= 0 (a bool, float, ``None`` or a
                negative number), naming the argument.

        >>> guard = ContextGuard(context_window=8000, max_output_tokens=2000)
        >>> guard.record_usage(1200, 300); guard.stats.prompt_tokens
        1200
        """
        counts = []
        for name, v in (("prompt_tokens", prompt_tokens), ("completion_tokens", completion_tokens)):
            n = as_int(v)
            if n is None or n < 0:
                raise ValueError(f"{name} must be a non-negative int, got {shown(v)}") from int_cause(v)
            counts.append(n)
        prompt_tokens, completion_tokens = counts
        with self._lock:
            s = self._stats
            self._stats = msgspec.structs.replace(
                s,
                prompt_tokens=s.prompt_tokens + prompt_tokens,
                completion_tokens=s.completion_tokens + completion_tokens,
            )

    # -- steps ---------------------------------------------------------------------------

    def _count(self, messages: Any, fmt: str | None) -> int:
        return count_messages(messages, self.profile, format=fmt)

    def _target(self) -> int:
        return int(self.budget.usable * self.policy.low_water)

    def _hint_policy(self, messages: Any, fmt: str | None, hint: str) -> FitPolicy:
        """The fit policy for ``hint``: explicit priorities stay; derived ones move."""
        if hint in ("general", "react_iteration"):
            return self.policy
        classes = hint_priorities(messages, hint, self.policy, profile=self.profile, format=fmt)
        # class 0 is left to fit (preamble, pinned, current request, open calls,
        # Message.priority=0): as an override it would stop pinned_share from unpinning
        explicit = self.policy.priorities
        moved = {i: c for i, c in enumerate(classes) if c != 0 or i in explicit}
        return msgspec.structs.replace(self.policy, priorities=moved)

    def _emit(self, events: list[Any]) -> None:
        with self._lock:
            subs = list(self._subscribers)
        # the caller's code: what it edits is read afresh by the calls it makes
        with _engine.outside_reuse():
            for e in events:
                for fn in subs:
                    fn(e)

    @nesting_errors(1)
    def check(self, messages: Any, hint: str | None = "general", *, format: str | None = None) -> GuardResult:
        """Make ``messages`` fit the token budget before a model request.

        Args:
            messages: OpenAI dicts, Anthropic dicts or ``Message`` structs.
            hint: ``react_iteration``, ``planner_input``, ``step_dependency`` or
                ``general`` (first seed; ``None``: ``general``): what the history step
                protects.
            format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.

        Returns:
            A :class:`GuardResult`; ``messages`` is a new list of the input's own message
            objects, in order, when nothing had to change.

        Raises:
            ValueError: an unknown hint.
            InvalidMessageError: a malformed message (naming its index and field).
            ContextOverflowError: the result still exceeds the model's capacity (window -
                reserved output); ``.result`` holds the best the guard could do.

        >>> guard = ContextGuard(context_window=8000, max_output_tokens=2000)
        >>> guard.check([{"role": "user", "content": "hi"}]).tokens_after
        5
        """
        hint = _hint(hint)
        # the steps below read lists that share most of their dicts, and change none:
        # each dict is converted to a canonical message once
        with _engine.reuse_conversions():
            return self._check(messages, hint, format)

    def _check(self, messages: Any, hint: str, format: str | None) -> GuardResult:
        # checks the input; through the dict reader, each dict's conversion, decoding and
        # cost are remembered for the steps below (reuse_conversions)
        prep = _engine.read(messages, format, self.profile).prep
        fmt = format  # every step reads the input as the caller asked (auto-detection is stable)
        window = self.budget.context_window
        budget = self.budget.usable
        cur: Any = messages
        events: list[Any] = []
        steps: list[GuardStep] = []
        stats = dict(messages_truncated=0, tool_results_cut=0, tool_results_cleared=0, messages_dropped=0)

        def common(step: str, r: Any, tokens_before: int, n_before: int) -> dict[str, Any]:
            return dict(
                step=step,
                reason=r.report.reason,
                hint=hint,
                tokens_before=tokens_before,
                tokens_after=r.report.tokens_after,
                messages_before=n_before,
                messages_after=len(r.messages),
            )

        def trimmed(r: Any, tokens_before: int, n_before: int) -> HistoryTrimmed:
            """The event of a history step (eviction or repair) that changed something."""
            return HistoryTrimmed(
                **common("history", r, tokens_before, n_before),
                dropped_messages=r.report.dropped_messages,
                kept_turns=r.report.kept_turns,
                dropped_turns=r.report.dropped_turns,
                truncated_messages=r.report.truncated_messages,
                chars_removed=_chars_removed(r.report),
            )

        # 1. tool output, before every call
        r, tally = _budget_tool_results(
            cur,
            window,
            profile=self.profile,
            max_result_share=self.max_result_share,
            max_total_share=self.max_total_share,
            output_heavy_tools=self.output_heavy_tools,
            protected_tools=self.protected_tools,
            max_message_chars=self.max_message_chars,
            pinned=self.policy.pinned,
            format=fmt,
        )
        steps.append(GuardStep(step="tool_output", report=r.report))
        # the policy's indices against the input (step 1 keeps every message): a
        # priorities key outside the messages is an error whether or not a trim runs, as
        # in fit (fresh37 #4: check took it when nothing needed trimming)
        _check_policy(self.policy, len(r.messages))
        before = cur_tokens = r.report.tokens_before  # step 1 counted the input already
        if r.report.reason is not None:
            base = common("tool_output", r, cur_tokens, len(cur))
            n, c = _counts(tally.capped)
            if n:
                events.append(MessageTruncated(**base, messages=n, chars_removed=c))
                stats["messages_truncated"] += n
            n, c = _counts(tally.cut)
            if n:
                events.append(ToolResultTruncated(**base, results=n, chars_removed=c))
                stats["tool_results_cut"] += n
            n, c = _counts(tally.cleared)
            if n:
                events.append(ToolResultsCleared(**base, results=n, chars_removed=c))
                stats["tool_results_cleared"] += n
            cur, cur_tokens = r.messages, r.report.tokens_after

        # broken tool pairs are repaired even under the budget, and the stubs repair adds
        # can push it over (fresh8 N2): the repaired size is what must fit the budget
        repaired: dict[int, tuple[Any, Any]] = {}

        def repair_of(msgs: Any) -> Any:
            """The pair repair of ``msgs`` (a TrimResult), or None when no pair is broken."""
            hit = repaired.get(id(msgs))
            if hit is not None and hit[0] is msgs:
                return hit[1]
            p = prep if msgs is messages else _engine.prepare(msgs, fmt)
            r = _pair_repair(p, self.profile)
            repaired[id(msgs)] = (msgs, r)
            return r

        def needed(msgs: Any, tokens: int) -> int:
            """Tokens ``msgs`` costs once its tool pairs are repaired."""
            r = repair_of(msgs)
            return tokens if r is None else r.report.tokens_after

        if self.budget.trim_enabled and needed(cur, cur_tokens) > budget:
            target = self._target()
            # 2. clear old output-heavy tool results down to the target
            if hint != "step_dependency":
                # the share whose floor(share * window) is the target: + 0.5 so float
                # rounding cannot land one token under it, and > 0 even when the target is 0
                share = min(1.0, (target + 0.5) / window)
                r, tally = _budget_tool_results(
                    cur,
                    window,
                    profile=self.profile,
                    max_result_share=None,
                    max_total_share=share,
                    output_heavy_tools=self.output_heavy_tools,
                    protected_tools=self.protected_tools,
                    max_message_chars=None,
                    pinned=self.policy.pinned,
                    keep_recent=self.keep_recent_results,
                    format=fmt,
                )
                steps.append(GuardStep(step="tool_results", report=r.report))
                if r.report.reason is not None:
                    n, c = _counts(tally.cleared)
                    events.append(
                        ToolResultsCleared(
                            **{**common("tool_results", r, cur_tokens, len(cur)), "reason": "token_budget"},
                            results=n,
                            chars_removed=c,
                        )
                    )
                    stats["tool_results_cleared"] += n
                    cur, cur_tokens = r.messages, r.report.tokens_after
            # 3. evict history by priority, down to the low-water mark (fit repairs first)
            if needed(cur, cur_tokens) > budget:
                policy = self._hint_policy(cur, fmt, hint)
                evicting = cur
                r = fit(cur, budget, policy, profile=self.profile, format=fmt)
                steps.append(GuardStep(step="history", report=r.report))
                if r.report.reason is not None:
                    events.append(trimmed(r, cur_tokens, len(cur)))
                    stats["messages_dropped"] += r.report.dropped_messages
                    cur, cur_tokens = r.messages, r.report.tokens_after
                if not r.report.fits:
                    # the guard never does worse than fit on its own input with its own
                    # policy. The steps above can make eviction worse: a tool result cut
                    # inside a pinned message lowers the pinned messages' total, so fewer
                    # are unpinned over their share, and a whole turn holding one can no
                    # longer go (hypothesis: 543 tokens over a budget of 81, where fit on
                    # the input gives 81). So can a hint's priorities: evicting by them can
                    # reach a dead end the default order avoids (an Anthropic conversation
                    # whose remaining units cannot go without two user messages meeting;
                    # fresh11 N1: 1,024 tokens over 1,000, where fit gives 789). Then fit of
                    # the input is the result, by the hint's priorities when they fit, else
                    # by the guard's policy, and the steps above are left out.
                    tries = [] if evicting is messages else [self._hint_policy(messages, fmt, hint)]
                    if policy is not self.policy:
                        tries.append(self.policy)
                    for p in tries:
                        r0 = fit(messages, budget, p, profile=self.profile, format=fmt)
                        if not r0.report.fits:
                            continue
                        steps = [GuardStep(step="history", report=r0.report)]
                        events = [trimmed(r0, before, len(messages))]
                        stats = dict.fromkeys(stats, 0)
                        stats["messages_dropped"] = r0.report.dropped_messages
                        cur, cur_tokens = r0.messages, r0.report.tokens_after
                        break

        # broken tool pairs are repaired even under the budget (fit does it when it runs),
        # as trim_turns and fit do: every output passes validate (DESIGN.md section 8)
        if not any(s.step == "history" for s in steps):
            r = repair_of(cur)
            if r is not None and r.report.reason is not None:
                steps.append(GuardStep(step="history", report=r.report))
                events.append(trimmed(r, cur_tokens, len(cur)))
                stats["messages_dropped"] += r.report.dropped_messages
                cur, cur_tokens = r.messages, r.report.tokens_after

        result = GuardResult(
            messages=list(cur),
            hint=hint,
            tokens_before=before,
            tokens_after=cur_tokens,
            budget=budget,
            fits=cur_tokens <= budget,
            events=events,
            steps=steps,
        )
        self._account(result, stats, recovery=False)
        self._emit(events)
        # 4. capacity: a request that cannot fit the model is never sent
        try:
            check_capacity(cur_tokens, self.budget)
        except ContextOverflowError as exc:
            exc.result = result  # type: ignore[attr-defined]
            raise
        return result

    @nesting_errors(1)
    def recover(
        self,
        messages: Any,
        reported_tokens: int | None = None,
        *,
        hint: str | None = "general",
        format: str | None = None,
    ) -> GuardResult:
        """Shrink ``messages`` after the provider reported a context overflow.

        Runs :func:`~contextwindow.fit.recover_from_overflow` (whole turns down to two
        thirds of the current estimate, or to what ``reported_tokens`` implies; second
        seed); when that cannot remove anything, :func:`~contextwindow.compact.prune_middle`
        (third seed, layer 2), which keeps, besides what it always keeps, every message
        the policy never evicts: pinned messages, class 0 and classes outside
        ``eviction_order`` (by the classes the first step reads, the hint's; a tool unit
        stays whole, so a protected call keeps its results and a protected result its
        call; fate rule ``policy_class``). A step's result is kept only when it costs less than the
        input with its tool pairs repaired (what goes back otherwise: a stub for an
        unanswered call can make that more than the input, so a kept result can cost more
        than the input). Every output passes ``validate``, as :meth:`check`'s: when
        neither step changes anything, broken tool pairs are still repaired
        (:func:`~contextwindow.repair_tool_pairs`; a ``HistoryTrimmed`` event, step
        ``history``, reason ``tool_pairs``). Never loops: each call on the previous
        output removes more or changes nothing, and a result with no events means the
        caller should stop retrying (a second call does trim again: to two thirds of its
        input once more, or to what ``reported_tokens`` implies, so pass the provider's
        count for the messages being passed, not a stale one: with the first count again
        each call shaves off a little, and a loop can take hundreds of calls to end;
        fresh22b #2).

        Args:
            messages: the conversation that overflowed, any accepted shape.
            reported_tokens: the provider's token count for it, when the error gave one.
            hint: what the trim protects, as in :meth:`check`; carried on the events.
                The guard's ``policy`` (pinned indices, classes, eviction order) applies.
            format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.

        Returns:
            A :class:`GuardResult`.

        Raises:
            ValueError: an unknown hint or a negative ``reported_tokens``.
            InvalidMessageError: a malformed message.

        >>> guard = ContextGuard(context_window=8000, max_output_tokens=2000)
        >>> guard.recover([{"role": "user", "content": "hi"}]).changed
        False
        """
        hint = _hint(hint)
        prep = _engine.prepare(messages, format)  # checks the input before any step
        fmt = format  # every step reads the input as the caller asked (auto-detection is stable)
        budget = self.budget.usable
        before = self._count(messages, fmt)
        events: list[Any] = []
        steps: list[GuardStep] = []
        stats = dict(messages_truncated=0, tool_results_cut=0, tool_results_cleared=0, messages_dropped=0)
        policy = self._hint_policy(messages, fmt, hint)
        rec = recover_from_overflow(
            messages, reported_tokens, budget=budget, profile=self.profile, format=fmt, policy=policy
        )
        steps.append(GuardStep(step="overflow", report=rec.report))
        cur, cur_tokens = messages, before
        # what goes back when neither step helps: the input with its tool pairs repaired
        # (below), whose stubs can cost more than the orphans it drops. Each step is
        # weighed against it, not against the input (left17: rec.removed, under the input,
        # declined an eviction to 50 tokens of an input of 46, 55 repaired, and the 55
        # went back); on a repaired input (the guard's own output) the two are the same
        repair = _pair_repair(prep, self.profile)
        repaired_tokens = before if repair is None else repair.report.tokens_after
        if rec.report.tokens_after < repaired_tokens:
            events.append(
                OverflowRecovered(
                    step="overflow",
                    reason=rec.report.reason or "context_overflow",
                    hint=hint,
                    tokens_before=before,
                    tokens_after=rec.report.tokens_after,
                    messages_before=len(messages),
                    messages_after=len(rec.messages),
                    target=rec.target,
                    dropped_messages=rec.report.dropped_messages,
                    truncated_messages=rec.report.truncated_messages,
                    chars_removed=_chars_removed(rec.report),
                )
            )
            stats["messages_dropped"] += rec.report.dropped_messages
            cur, cur_tokens = rec.messages, rec.report.tokens_after
        else:
            # the middle step spares what the policy never evicts, as the overflow step
            # does: class 0 and classes outside eviction_order, by the classes fit gives
            # (the hint's, as above), and pinned messages (fresh19 F2: every message P0,
            # 27 messages became 10)
            classes = priorities(messages, policy, profile=self.profile, format=fmt)
            order = set(policy.eviction_order)
            protected = {i for i, c in enumerate(classes) if c == 0 or c not in order}
            r = _prune_middle(
                cur,
                None,
                keep_recent=None,
                pinned=policy.pinned,
                profile=self.profile,
                format=fmt,
                protected=protected,
            )
            steps.append(GuardStep(step="middle", report=r.report))
            # a notice can cost more than the few messages it replaces: then nothing helped.
            # Weighed against the repaired input, as prune_middle weighs it (left17: 55
            # tokens, 64 repaired, pruned to 58 was declined as not under 55)
            if r.report.reason == "middle_pruned" and r.report.tokens_after < repaired_tokens:
                events.append(
                    MiddlePruned(
                        step="middle",
                        reason="middle_pruned",
                        hint=hint,
                        tokens_before=cur_tokens,
                        tokens_after=r.report.tokens_after,
                        messages_before=len(cur),
                        messages_after=len(r.messages),
                        removed_messages=r.report.dropped_messages,
                    )
                )
                stats["messages_dropped"] += r.report.dropped_messages
                cur, cur_tokens = r.messages, r.report.tokens_after
        if cur is messages:
            # neither step changed anything: broken tool pairs are still repaired, as both
            # steps and check repair them, so the request sent again passes validate
            # (fresh16b #4: an orphan result went back to the provider that refused it)
            r = repair
            if r is not None and r.report.reason is not None:
                steps.append(GuardStep(step="history", report=r.report))
                events.append(
                    HistoryTrimmed(
                        step="history",
                        reason=r.report.reason,
                        hint=hint,
                        tokens_before=cur_tokens,
                        tokens_after=r.report.tokens_after,
                        messages_before=len(cur),
                        messages_after=len(r.messages),
                        dropped_messages=r.report.dropped_messages,
                        kept_turns=r.report.kept_turns,
                        dropped_turns=r.report.dropped_turns,
                        truncated_messages=r.report.truncated_messages,
                        chars_removed=_chars_removed(r.report),
                    )
                )
                stats["messages_dropped"] += r.report.dropped_messages
                cur, cur_tokens = r.messages, r.report.tokens_after
        result = GuardResult(
            messages=list(cur),
            hint=hint,
            tokens_before=before,
            tokens_after=cur_tokens,
            budget=budget,
            fits=cur_tokens <= budget,
            events=events,
            steps=steps,
        )
        self._account(result, stats, recovery=True)
        self._emit(events)
        return result

    def _account(self, result: GuardResult, counts: dict[str, int], *, recovery: bool) -> None:
        with self._lock:
            s = self._stats
            self._stats = msgspec.structs.replace(
                s,
                checks=s.checks + (0 if recovery else 1),
                recoveries=s.recoveries + (1 if recovery else 0),
                compactions=s.compactions + (1 if result.events else 0),
                tokens_before=s.tokens_before + result.tokens_before,
                tokens_after=s.tokens_after + result.tokens_after,
                last_tokens_before=result.tokens_before,
                last_tokens_after=result.tokens_after,
                messages_truncated=s.messages_truncated + counts["messages_truncated"],
                tool_results_cut=s.tool_results_cut + counts["tool_results_cut"],
                tool_results_cleared=s.tool_results_cleared + counts["tool_results_cleared"],
                messages_dropped=s.messages_dropped + counts["messages_dropped"],
            )
