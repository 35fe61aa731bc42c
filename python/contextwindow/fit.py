"""Priority fitting, the low-water mark and overflow recovery (DESIGN.md section 5 ``fit``;
issue 5 items 4, 5 and 6).

:func:`fit` gives every message a priority class and evicts whole units, lowest priority
first, until the conversation fits a token budget:

* **P0**, never evicted: the preamble (leading system/developer messages), pinned
  messages (``Message.pinned``, or ``FitPolicy.pinned`` indices for dict input), the
  current request (the last real user message; still the request when repair moved a
  tool result into it, see ``_reference.current_request``), the open tool call (see below)
  and, under Anthropic rules, the newest turn's first assistant message when it starts with
  a ``thinking``/``redacted_thinking`` block (rule ``thinking_block``, its tool unit whole,
  not subject to ``pinned_share``: with extended thinking on, the API refuses a request
  whose final assistant turn does not start with one).
* **P1**: the other messages of the newest ``FitPolicy.recent_turns`` turns (the current
  turn counts as one of them, and is always P1 or P0).
* **P2**: older turns: their opening user message and long loose messages.
* **P3**: old tool output and chatter: in older turns, every tool unit (the assistant
  message with tool calls plus every message holding one of its results) and every
  *chatter* message.

*Chatter* is a loose message (not part of a tool unit, not the user message that opens
its turn) of role ``user`` or ``assistant`` that costs fewer than
``FitPolicy.chatter_tokens`` tokens (default 32): "ok", "Let me check.", "thanks".

The *open tool call* is the tool unit of the current turn that the model needs to
continue: the newest unit of the turn when nothing follows it (the turn is in flight,
the model has not answered yet), its results missing or not (repair gives a call
without one a ``[tool result missing]`` stub). A unit whose call had no result but that
other messages follow is not open: the model went on without the result, so it is
evicted like any other unit, and the classes are the same whether or not the input went
through ``repair_tool_pairs`` first, in either shape (fresh16b #1).

A *text-action step* (an assistant message without tool calls and the ``[Tool results]``
texts right after it, a text-action agent's command and its output) is one unit like a
tool unit: the command and its output stay or go together.

The *newest exchange* after the current request (the newest tool unit of the newest
turn when something follows it, and the loose messages at the end from the last
assistant message a user message answers: a command and its ``[Tool results]`` output,
a prefill or answer) is P1, but when the eviction took some of it ``fit`` keeps it if a
result fits the budget with it and cuts the request no more (fresh14 findings 1 and 4):
it is never evicted merely to reach the low-water mark. Where keeping it would cut the
request further (the request alone is over the budget) it goes: the request's cut is
then the same with or without it, so it never grows with the budget (fresh15 #3).

A conversation without a real user message has no current request; its last message
stands in for it (P0), so the output is never empty.

Costs are the Rust estimator's (``contextwindow.estimate.message_tokens``), additive over
messages. Pair repair runs first (``repair_tool_pairs``, the Rust engine's; the
segmentation of the repaired list is the engine's too, and the breadcrumb placement
``_reference``'s, which the differential tests hold equal to the engine), and eviction
only ever removes whole units, so every output passes ``validate``. Dict input is read,
counted and decoded once, in Rust (the native dict reader), and repaired, segmented and
classed once per call however many runs it takes (with and without the breadcrumb,
holding the newest exchange back); planning and eviction are pure Python, linear in the
messages: about
6-8x ``trim_turns`` (all Rust) on the 1,000-message agent conversation of
``benches/conftest.py``.
"""

from __future__ import annotations

import bisect
import copy
import itertools
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import msgspec

from . import _engine
from . import _reference as ref
from ._engine import nesting_errors
from ._jsontext import as_int, int_cause, shown
from .budget import Budget, token_budget
from .calibrate import scale_tokens
from .estimate import resolve_profile
from .estimator import caller_cost, cost_source, on_raw_costs, raw_budget, scaled_report, uncalibrated
from .messages import Message, TextPart, ToolResult
from .report import PairChange, TrimResult
from .turns import _SEG

__all__ = ["FitPolicy", "Recovery", "fit", "priorities", "recover_from_overflow"]

_MAX = 2**63 - 1

#: Report ``reason`` of :func:`fit` when it evicted anything.
REASON_FIT = "priority_budget"
#: Report ``reason`` of :func:`recover_from_overflow` when it evicted anything.
REASON_OVERFLOW = "context_overflow"


class FitPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How :func:`fit` ranks and evicts messages (DESIGN.md section 5 ``fit``).

    Attributes:
        recent_turns: how many of the newest turns are P1 (the current turn counts as
            one; values below 1 still keep the current turn at P1).
        eviction_order: the classes to evict, in order; default ``(3, 2, 1)``. Classes
            left out are never evicted. Only 1, 2 and 3, each at most once.
        pinned: input indices to treat as pinned (for dict input, which has no
            ``pinned`` field); added to ``Message.pinned``. A tuple, list, set or range of ints
            (a set is read in sorted order): another type, or an item that is not an
            int, is a ``TypeError``; an index outside the messages a ``ValueError``
            (README, Errors).
        priorities: ``{input index: class 0-3}`` overrides, winning over
            ``Message.priority`` and over the derived class. The preamble, the current
            request and the open tool calls are always P0; a pinned message stays P0
            unless unpinned by ``pinned_share``. Class 0 is never evicted and is not subject to
            ``pinned_share``.
        pinned_share: pinned messages together may take at most this share of the
            budget (DESIGN.md section 5: 0.5); above it the oldest pinned messages are
            unpinned (demoted to their own class; Fate rule ``unpinned_over_share``)
            until the rest is under. The share is of ``budget``, not of the low-water mark.
            A pin keeps its tool unit (the calls and their results) or text-action step
            whole, so what it weighs is that unit's tokens, counted once however many of
            its messages are pinned, less what stays for another reason (the preamble,
            the request, an open call, class 0) (fresh19 F1).
        low_water: when the input does not fit, evict down to ``low_water * budget``
            tokens (issue 5 item 6: the kept prefix then stays byte-stable for the next
            calls of a growing conversation); 1.0 trims to the budget exactly. In (0, 1].
        chatter_tokens: a loose message under this many tokens is chatter (P3 in older
            turns).
        breadcrumb: insert ``[earlier turns omitted to fit the context window]`` where
            whole turns were evicted (placed as ``trim_turns`` places it).

    >>> FitPolicy(low_water=1.0).eviction_order
    (3, 2, 1)
    """

    recent_turns: int = 2
    eviction_order: tuple[int, ...] = (3, 2, 1)
    pinned: tuple[int, ...] = ()
    priorities: dict[int, int] = {}
    pinned_share: float = 0.5
    low_water: float = 0.7
    chatter_tokens: int = 32
    breadcrumb: bool = True


class Recovery(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`recover_from_overflow` returns.

    Attributes:
        messages: the trimmed conversation, in the caller's shape (unchanged messages
            are the caller's objects).
        report: the :class:`~contextwindow.report.FitReport` (its ``budget`` is
            ``target``).
        removed: whether anything was removed (tokens after < tokens before); ``False``
            means retrying cannot help.
        target: the token target trimmed to (estimated tokens): ``E * B // N`` or two
            thirds of the estimate, or, with a reported count, the smallest target the
            fit meets when it cannot meet ``E * B // N``
            (:func:`recover_from_overflow`).

    >>> Recovery(messages=[], report=None, removed=False, target=0).removed
    False
    """

    messages: list[Any]
    report: Any
    removed: bool
    target: int


def _index_order(i: Any) -> tuple[int, int, str]:
    """Sort key of a ``pinned`` set's items: ints (of any int type) by value, anything
    else after them (it is refused as it comes, by the loop that reads them)."""
    k = as_int(i)
    return (0, k, "") if k is not None else (1, 0, type(i).__name__)


def _check_policy(policy: Any, n: int | None = None) -> FitPolicy:
    """``policy`` checked (``None`` is the default policy), its ints read as plain ints:
    a field that holds an integer of another type (``numpy.int64``, an ``IntEnum``;
    fresh16a F3) comes back as an ``int`` in a copy of the policy."""
    if policy is None:
        return FitPolicy()
    if not isinstance(policy, FitPolicy):
        raise TypeError(f"policy must be a FitPolicy or None, got {type(policy).__name__}")
    p = policy
    recent = as_int(p.recent_turns)
    if recent is None or recent < 0:
        # a number option: ValueError for any bad value, as for the budget
        raise ValueError(f"recent_turns must be an int >= 0, got {shown(p.recent_turns)}") from int_cause(
            p.recent_turns
        )
    if not isinstance(p.eviction_order, (tuple, list)):
        raise TypeError(f"eviction_order must be a tuple or list of ints, got {type(p.eviction_order).__name__}")
    # pinned is a set of indices: a set, frozenset or range is taken as trim_turns'
    # pinned= takes it (fresh35 #6, fresh47 #5), read in sorted order
    if not isinstance(p.pinned, (tuple, list, set, frozenset, range)):
        raise TypeError(f"pinned must be a tuple, list, set or range of ints, got {type(p.pinned).__name__}")
    # README, Errors: a collection of the wrong type, or an item of the wrong type in it,
    # is a TypeError; an int out of range a ValueError (fresh11 N6)
    order = []
    for c in p.eviction_order:
        k = as_int(c)
        if k is None:
            raise TypeError(f"eviction_order must hold classes (int), got {type(c).__name__}") from int_cause(c)
        order.append(k)
    if any(c not in (1, 2, 3) for c in order) or len(set(order)) != len(order):
        raise ValueError(f"eviction_order must hold distinct classes among 1, 2, 3, got {shown(tuple(order))}")
    for name in ("pinned_share", "low_water"):
        v = getattr(p, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            raise ValueError(f"{name} must be a number in (0, 1], got {shown(v)}")
    chatter = as_int(p.chatter_tokens)
    if chatter is None or chatter < 0:
        raise ValueError(f"chatter_tokens must be a non-negative int, got {shown(p.chatter_tokens)}") from int_cause(
            p.chatter_tokens
        )
    if not isinstance(p.breadcrumb, bool):
        raise TypeError(f"breadcrumb must be a bool, got {type(p.breadcrumb).__name__}")
    where = f" (0..{n - 1})" if n is not None else ""
    pinned = []
    as_set = isinstance(p.pinned, (set, frozenset))
    for i in sorted(p.pinned, key=_index_order) if as_set else p.pinned:
        k = as_int(i)
        if k is None:
            raise TypeError(f"pinned must hold message indices (int), got {type(i).__name__}") from int_cause(i)
        if k < 0 or (n is not None and k >= n):
            raise ValueError(f"pinned index {shown(k)} is not a message index{where}")
        pinned.append(k)
    if not isinstance(p.priorities, Mapping):
        raise TypeError("priorities must be a mapping {index: class}")
    prio = {}
    for i, c in p.priorities.items():
        k = as_int(i)
        if k is None:
            raise TypeError(f"priorities keys must be message indices (int), got {type(i).__name__}") from int_cause(i)
        if k < 0 or (n is not None and k >= n):
            raise ValueError(f"priorities key {shown(k)} is not a message index{where}")
        cls = as_int(c)
        if cls is None:
            raise TypeError(f"priorities values must be classes (int 0-3), got {type(c).__name__}") from int_cause(c)
        if cls not in (0, 1, 2, 3):
            raise ValueError(f"priorities[{k}] must be a class 0-3, got {shown(cls)}")
        prio[k] = cls
    plain = (
        type(p.recent_turns) is int
        and type(p.chatter_tokens) is int
        and all(type(v) is int for v in p.eviction_order)
        and not as_set
        and all(type(v) is int for v in p.pinned)
        and all(type(k) is int and type(v) is int for k, v in p.priorities.items())
    )
    if plain:
        return p
    return msgspec.structs.replace(
        p,
        recent_turns=recent,
        eviction_order=tuple(order),
        pinned=tuple(pinned),
        priorities=prio,
        chatter_tokens=chatter,
    )


def _check_budget(budget: Any, name: str = "budget") -> int:
    n = as_int(budget)
    if n is None or n < 0:
        raise ValueError(f"{name} must be a non-negative int, got {shown(budget)}") from int_cause(budget)
    return min(n, _MAX)


def _usable(budget: Any) -> int:
    """An int budget, or the ``usable`` tokens of a ``contextwindow.budget.Budget``.

    Anything else is a ``ValueError``, a string or a bool as much as a negative number, as
    in :func:`~contextwindow.trim_turns` and :func:`~contextwindow.fit_request` (fresh7
    N13: ``fit(m, "10")`` raised ``TypeError`` where they raise ``ValueError``)."""
    usable = token_budget(budget)  # one reading with prune_middle (fresh13 N3)
    assert usable is not None
    return usable


class _NativeCost:
    """Message costs from the Rust estimator; the input's costs are counted in one call."""

    def __init__(
        self, prep: _engine.Prepared, msgs: list[Message], profile: str, counts: list[int] | None = None
    ) -> None:
        self.profile = profile
        if counts is None:
            # `msgs` are decoded from the payload (so it is their encoding too)
            counts = _engine.message_costs(msgs, profile, prep.payload)
        self._known = {id(m): c for m, c in zip(msgs, counts, strict=True)}
        self.msgs = msgs  # keeps the ids above alive; planning uses these very objects

    def message_tokens(self, m: Message) -> int:
        c = self._known.get(id(m))
        if c is None:
            c = int(_engine.native.count_messages(_engine.encode_messages([m]), self.profile)[0])
        return c


class _CallerCost:
    """Message costs from the caller's ``token_counter``, ``estimator`` or ``tokenizer``
    (:func:`~contextwindow.estimator.counter_cost`, ``Estimator._trim_cost``): no
    ``profile``, so the breadcrumb is priced by the cost model and the newest turn is
    shrunk by the pure-Python ``trim_turns`` with the same costs."""

    def __init__(self, msgs: list[Message], model: Any) -> None:
        self.msgs = msgs
        self._model = model
        # the model's cost of one part, where it has one: trial cuts priced by their part
        # alone (``_reference._cost_with``), not by the whole message each time
        self.part_tokens = getattr(model, "part_tokens", None)

    def message_tokens(self, m: Message) -> int:
        return int(self._model.message_tokens(m))


@dataclass
class _Plan:
    """Classes and eviction candidates of the repaired working list."""

    st: Any  # ref._State
    seg: Any  # Segmentation of the working list
    cls: list[int]  # class per work item
    why0: list[str]  # for P0 items, the rule: preamble, pinned, current_request, open_tool_call, thinking_block
    unpinned: set[int]  # work items unpinned by pinned_share
    turn_of: list[int]  # turn index per work item (-1 for the preamble)
    cands: list[tuple[int, list[int], int | None]]  # (first item, items, turn index if whole turn)
    crumbs: list[int]  # work items that are our breadcrumb
    # the newest exchange after the current request (see _newest_exchange): left out of
    # the class passes when fit tries to keep it
    held: set[int]
    # the current request (_reference.current_request) when it is a carrier, else None
    carrier_request: int | None


class _Changes(msgspec.Struct):
    """The part of a repair's report :func:`_repaired` reads (its other fields, a fate per
    message among them, are skipped unread)."""

    repairs: list[PairChange]


class _Repair(msgspec.Struct):
    """The Rust engine's repair outcome, as :func:`_repaired` reads it."""

    messages: list[_engine._Op]
    report: _Changes


_REPAIR = msgspec.json.Decoder(_Repair)


def _repaired(prep: _engine.Prepared, msgs: list[Message]) -> tuple[list[ref.Item], list[PairChange]]:
    """The pair repair of ``msgs`` (decoded from ``prep.payload``) by the Rust engine, as
    :func:`_reference.repair` gives it: an item per message of the repaired list (its
    input index, and the new message when repair changed it) and the changes. The
    engine's report prices its result: the cheapest profile does, as only the messages
    and the changes are read here."""
    out = _REPAIR.decode(_engine.native.repair_tool_pairs(prep.payload, prep.provider, "stub", "fim"))
    item = ref.Item
    return [item(op.src, op.msg) for op in out.messages], out.report.repairs


def _plan(prep: _engine.Prepared, pol: FitPolicy, cost: _NativeCost | _CallerCost, budget: int | None) -> _Plan:
    # the messages the costs were counted for (decoding again would make new objects,
    # which the cost cache does not know: each would be encoded and counted once more)
    msgs = cost.msgs
    # pair repair and segmentation are the Rust engine's (the rules of _reference.repair
    # and _reference.segment, which the differential tests hold equal to it): the pure
    # Python ones resolved the calls and results twice, once for repair and once more to
    # segment what repair changed, most of fit's time on long conversations
    st = ref._state(msgs, cost, prep.provider, pol.breadcrumb, "stub", repaired=_repaired(prep, msgs))
    work = [it.msg(msgs) for it in st.work]
    real = [ref.is_real_user(m) for m in work]  # asked once per message, here and below
    # when repair changed nothing, the working list is the input, whose JSON is at hand
    same = len(work) == len(msgs) and all(it.new is None and it.src == w for w, it in enumerate(st.work))
    # once per conversation in the guard's steps (the segmentation reads only turn_shape;
    # budget_tool_results asks the Rust engine for it too)
    seg = _engine.shaped(
        "segment",
        work,
        _engine.turn_shape,
        # the messages are the payload's and the engine's, decoded from JSON: nothing in
        # them for encode_messages' checks to find (a key JSON writes like another, a
        # lone surrogate), which walk every message in Python
        lambda: _SEG.decode(_engine.native.segment_turns(prep.payload if same else _engine._ENCODER.encode(work))),
    )
    nw = len(work)
    turn_of = [-1] * nw
    for t, (a, b) in enumerate(seg.turns):
        for w in range(a, b):
            turn_of[w] = t
    unit_of: dict[int, int] = {}
    for u, items in enumerate(seg.units):
        for w in items:
            unit_of[w] = u
    # real where they stand: a screenshot in a tool unit or after a text-action
    # observation is none (ref.real_users; fresh50 #1, fresh53 #2)
    real = ref.real_users_in(work, seg.units, real)
    srcs = [it.src for it in st.work]
    # the input's request stays the request when repair made it a carrier (a result moved
    # into it): P0, the exchange after it held (before, the last real user message before
    # it, or the last message, stood in for it, and the request could go as P1)
    req = seg.current_request if same else ref.current_request(msgs, srcs, seg.current_request)
    nt = len(seg.turns)
    recent = max(1, pol.recent_turns)
    # the user message that opens each turn (the first real one; a breadcrumb or, in the
    # first turn, other messages may come before it)
    head_of = [next((w for w in range(a, b) if real[w]), None) for a, b in seg.turns]
    pinned_idx = set(pol.pinned)
    # the first assistant message of the newest turn when it starts with a thinking block
    # (Anthropic): P0 (rule thinking_block), held as a pinned message is, its tool unit
    # whole, and not subject to the share rule: the API refuses the request without it
    # (fresh20b #1)
    anchor = ref.thinking_anchor(work, prep.provider)  # in the repaired list, the one sent
    # and a user message of no words that ends the turn before it, in the newest turn (no
    # turn of ours, but the API's: ref.thinking_turn_start): evicted, the API's final turn
    # would begin earlier, at an assistant message with no thinking block
    start = ref.thinking_turn_start(work)
    bound = start - 1 if anchor is not None and start > 0 and ref.is_blank_user(work[start - 1]) else None
    # our own breadcrumb and repair's placeholder: single-part messages only
    crumb = [len(m.content) == 1 and ref.is_breadcrumb(m) for m in work]
    placeholder = [len(m.content) == 1 and ref.is_placeholder(m) for m in work]

    def src(w: int) -> int | None:
        return srcs[w]

    # the open tool call: the newest unit of the newest turn when the conversation ends
    # inside it. Not a unit whose call had no result when something follows it: the model
    # went on without the result, and whether repair's stub for it is a new message (the
    # OpenAI shape) or a block in a message of the input (mostly Anthropic) must not decide
    # its class, nor must running repair_tool_pairs first (fresh16b #1: one lost call of a
    # parallel batch made its whole unit P0 in OpenAI shape only, and fit could not fit)
    open_units: set[int] = set()
    if nt:
        la, lb = seg.turns[-1]
        last = [u for u, items in enumerate(seg.units) if la <= items[0] < lb]
        if last and seg.units[last[-1]][-1] == lb - 1:
            open_units.add(last[-1])
    req_like: int | None
    if req is None and nw > seg.preamble_end:
        req_like = nw - 1  # no real user message: the last message stands in for it
    else:
        req_like = req

    def derived(w: int) -> int:
        t = turn_of[w]
        if t >= nt - recent:
            return 1
        if w in unit_of:
            return 3
        m = work[w]
        head = w == head_of[t]
        if not head and m.role in ("user", "assistant") and st.costs[w] < pol.chatter_tokens:
            return 3
        return 2

    def override(w: int) -> int | None:
        s = src(w)
        if s is None:
            return None
        if s in pol.priorities:
            return pol.priorities[s]
        return msgs[s].priority

    cls = [0] * nw
    why0 = [""] * nw
    pinned_items: list[int] = []
    priorities = pol.priorities
    for w in range(nw):
        s = srcs[w]
        if w < seg.preamble_end:
            why0[w] = "preamble"
            continue
        pin = s is not None and (msgs[s].pinned or s in pinned_idx)
        if w == req_like:
            # not weighed by the share: a pin keeps the request uncut, as in trim_turns
            # (README, "keep the request pinned"; test_current_request_is_never_unpinned_or_evicted)
            why0[w] = "current_request"
            continue
        if open_units and w in unit_of and unit_of[w] in open_units:
            why0[w] = "open_tool_call"
            continue
        # before the pin: a pinned anchor is no pin either, never unpinned by the share
        # (fresh55 #2: it was, evicted, and the output failed thinking_not_first)
        if w == anchor or w == bound:
            why0[w] = "thinking_block"
            continue
        # override(w), inline
        own = None if s is None else priorities[s] if s in priorities else msgs[s].priority
        if pin:
            why0[w] = "pinned"
            pinned_items.append(w)
            continue
        cls[w] = derived(w) if own is None else own
        if cls[w] == 0:
            why0[w] = "priority_override"
    # a text-action step: an assistant message (no tool calls) and the `[Tool results]`
    # texts right after it that answer it go together, never one without the other
    # (fresh15 #2: the command went, its output stayed)
    # (ref.text_action_steps, the grouping trim_turns drops by too)
    step_of: dict[int, list[int]] = {}
    for a, b in seg.turns:
        for step in ref.text_action_steps(work, unit_of, a, b):
            for v in step:
                step_of[v] = step
    # pinned over their share of the budget: unpin the oldest first. A pin keeps its tool
    # unit or text-action step whole, so it weighs what it keeps (fresh19 F1: a pinned
    # 36-token call kept its 298-token result, which the share never saw); what is kept
    # for another reason (the preamble, the request, an open call, class 0) weighs nothing,
    # and what two pins keep counts once
    unpinned: set[int] = set()
    if budget is not None:
        share = int(budget * pol.pinned_share)
        keeps = {
            w: [
                v for v in (seg.units[unit_of[w]] if w in unit_of else step_of.get(w, [w])) if why0[v] in ("", "pinned")
            ]
            for w in pinned_items
        }
        cover = Counter(v for items in keeps.values() for v in items)
        total = sum(st.costs[v] for v in cover)
        for w in pinned_items:
            if total <= share:
                break
            for v in keeps[w]:
                cover[v] -= 1
                if not cover[v]:
                    total -= st.costs[v]
            unpinned.add(w)
            own = override(w)
            cls[w] = derived(w) if own is None else own
            why0[w] = "" if cls[w] else "priority_override"
    for w in range(nw):
        if why0[w]:
            cls[w] = 0
    # candidates: whole turns (opened by a real user message other than the request) and,
    # inside every turn, each tool unit, each text-action step and each loose message but
    # the opening one
    cands: list[tuple[int, list[int], int | None]] = []
    for t, (a, b) in enumerate(seg.turns):
        if head_of[t] is not None and head_of[t] != req_like:
            cands.append((a, list(range(a, b)), t))
        seen: set[int] = set()
        for w in range(a, b):
            if w == head_of[t] or crumb[w]:
                continue  # these go only with their whole turn
            if w in unit_of:
                u = unit_of[w]
                if u not in seen:
                    seen.add(u)
                    cands.append((w, list(seg.units[u]), None))
            elif w in step_of:
                if step_of[w][0] == w:
                    cands.append((w, list(step_of[w]), None))
            else:
                cands.append((w, [w], None))
        # the placeholder repair keeps so Anthropic roles alternate (RESULTS_REMOVED) never
        # opens a turn and cannot go alone, nor can its neighbours: it goes with the unit or
        # loose message on either side (fresh8 N3: before a pinned message neither could go)
        for w in range(a, b):
            if not placeholder[w]:
                continue
            for n in (w - 1, w + 1):
                if not a <= n < b or n == head_of[t] or crumb[n]:
                    continue
                items = sorted({w, *(seg.units[unit_of[n]] if n in unit_of else step_of.get(n, [n]))})
                cands.append((items[0], items, None))
    # oldest first; a whole turn goes after its own tool units, so a turn that must shrink
    # loses its oldest units before its opening user message (as trim_turns does in the
    # newest turn): a long agent turn followed by a short follow-up keeps its task and
    # newest results instead of going whole (found by a new user)
    last_unit = [-1] * len(seg.turns)
    for first, items, turn in cands:
        if turn is None and len(items) > 1 and turn_of[first] >= 0:  # a tool unit
            t = turn_of[first]
            last_unit[t] = max(last_unit[t], first)

    def order(c: tuple[int, list[int], int | None]) -> tuple[int, int]:
        return (max(c[0], last_unit[c[2]]), 1) if c[2] is not None else (c[0], 0)

    cands.sort(key=order)
    held = _newest_exchange(seg, work, req, unit_of, cls, why0, lambda w: override(w) not in (None, derived(w)))
    return _Plan(
        st,
        seg,
        cls,
        why0,
        unpinned,
        turn_of,
        cands,
        [w for w in range(nw) if crumb[w]],
        held,
        req if req is not None and not real[req] else None,
    )


def _newest_exchange(
    seg: Any,
    work: list[Message],
    req: int | None,
    unit_of: dict[int, int],
    cls: list[int],
    why0: list[str],
    moved: Callable[[int], bool],
) -> set[int]:
    """The newest exchange after the current request, the part the next reply answers
    or continues, which :func:`fit` keeps when a result fits with it at no cost to the
    request (fresh14 findings 1 and 4; see :func:`fit_target`):

    * the newest tool unit of the newest turn after the request, when it is not an open
      tool call already (something follows it);
    * the loose messages at the end, after the request and that unit, from the last
      assistant message a user message answers: a trailing ``[Tool results]`` text with
      the command it answers, an assistant prefill or answer, a trailing notice.

    Not P0 messages, nor those an override (``Message.priority``,
    ``FitPolicy.priorities``) gives another class than their own (``moved``). The
    older steps after the request stay plain P1, evicted oldest first to the low-water
    mark."""
    if req is None or not seg.turns:
        return set()
    la, lb = seg.turns[-1]
    if not la <= req < lb:
        return set()
    units = [items for items in seg.units if la <= items[0] < lb and items[-1] > req]
    out = set(units[-1]) if units else set()
    start = req + 1
    if units:
        start = max(start, units[-1][-1] + 1)
    for w in range(lb - 2, start - 1, -1):
        if work[w].role == "assistant" and work[w + 1].role == "user" and w not in unit_of and w + 1 not in unit_of:
            start = w
            break
    out.update(w for w in range(start, lb) if w not in unit_of)
    return {w for w in out if cls[w] and not why0[w] and not moved(w)}


class _Nav:
    """Nearest kept item or kept turn, for :func:`_evict`, where items and turns are only
    ever evicted, never restored: union-find style skip pointers with path compression
    make each lookup amortized O(1) instead of a scan over everything already evicted
    (a scan per candidate made ``fit`` quadratic in the number of messages)."""

    def __init__(self, plan: _Plan) -> None:
        st = plan.st
        self.plan = plan
        n = len(st.work)
        self.n = n
        self.left = list(range(-1, n - 1))  # index to try next going left
        self.right = list(range(1, n + 1))  # going right (n: none)
        self.turn_right = list(range(1, len(plan.seg.turns) + 1))
        self.dropped_turns: set[int] = set()
        self.first_dropped: int | None = None
        self.crumbs = plan.crumbs
        # bc_at's answer and how many turns were dropped when it was found
        self._at: int | None = None
        self._at_dropped = -1

    def _find(self, w: int, step: list[int], end: int, live: Callable[[int], bool]) -> int:
        root = w
        while root != end and not live(root):
            root = step[root]
        while w != end and w != root and not live(w):  # compress the path walked
            step[w], w = root, step[w]
        return root

    def prev_kept(self, w: int) -> int | None:
        """The nearest kept item at or before ``w``."""
        if w < 0 or self.n == 0:
            return None
        keep = self.plan.st.keep
        v = self._find(min(w, self.n - 1), self.left, -1, keep.__getitem__)
        return None if v < 0 else v

    def next_kept(self, w: int) -> int | None:
        """The nearest kept item at or after ``w``."""
        if w >= self.n:
            return None
        keep = self.plan.st.keep
        v = self._find(max(w, 0), self.right, self.n, keep.__getitem__)
        return None if v >= self.n else v

    def next_kept_turn(self, t: int) -> int | None:
        end = len(self.plan.seg.turns)
        if t >= end:
            return None
        v = self._find(t, self.turn_right, end, lambda u: u not in self.dropped_turns)
        return None if v >= end else v

    def drop_turn(self, t: int) -> None:
        self.dropped_turns.add(t)
        if self.first_dropped is None or t < self.first_dropped:
            self.first_dropped = t

    def bc_at(self) -> int | None:
        """:func:`_bc_at` for the current state."""
        if self.first_dropped is None:
            return None
        if not self.crumbs and self._at_dropped == len(self.dropped_turns):
            return self._at  # no turn dropped since: the same place (no breadcrumb to look back for)
        t = self.next_kept_turn(self.first_dropped + 1)
        at: int | None = None if t is None else self.plan.seg.turns[t][0]
        self._at, self._at_dropped = at, len(self.dropped_turns)
        if at is None:
            return None
        if self.crumbs:
            prev = self.prev_kept(at - 1)
            if prev is not None and ref.is_breadcrumb(self.plan.st.m(prev)):
                return None
        return at

    def alternates(self, drop: set[int], provider: str, pre: int) -> bool:
        """Anthropic shape: does removing the kept items ``drop`` keep a user message first
        and keep roles alternating where the removal makes new neighbours?"""
        if provider != "anthropic":
            return True
        st = self.plan.st
        lo, hi = min(drop), max(drop)

        def kept_before(w: int) -> int | None:
            v = self.prev_kept(w - 1)
            while v is not None and v in drop:
                v = self.prev_kept(v - 1)
            return v if v is not None and v >= pre else None

        def kept_after(w: int) -> int | None:
            v = self.next_kept(w + 1)
            while v is not None and v in drop:
                v = self.next_kept(v + 1)
            return v

        if kept_before(lo) is None:  # the removal reaches the start: what comes first then?
            head = self.next_kept(pre)
            new_head = head
            while new_head is not None and new_head in drop:
                new_head = self.next_kept(new_head + 1)
            # a tool struct is written as a user message of tool_result blocks (repair19)
            role = ref.anthropic_role
            if (
                head is not None
                and new_head is not None
                and role(st.m(head).role) == "user" != role(st.m(new_head).role)
            ):
                return False
        # every gap the removal opens (the loop spans one candidate: a unit or a turn)
        w = lo
        while w <= hi:
            if w in drop and st.keep[w]:
                end = w
                while end + 1 <= hi and (end + 1 in drop or not st.keep[end + 1]):
                    end += 1
                a, b = kept_before(w), kept_after(end)
                if (
                    a is not None
                    and b is not None
                    and ref.anthropic_role(st.m(a).role) == ref.anthropic_role(st.m(b).role)
                ):
                    return False
                w = end + 1
            else:
                w += 1
        return True


class _BreadcrumbCosts:
    """Counts ahead what the breadcrumb costs at the start of the next turns, in one
    native call, for :meth:`_reference._State.bc_cost` (Anthropic shape).

    There the breadcrumb is a text block of the first kept turn's first message, so its
    cost depends on that message; as ``_evict`` drops turn after turn it moves to the
    next turn's message, and counting each one alone (a native call per evicted turn) was
    most of ``fit``'s time on long plain chats. Filling ``bc_cost``'s memo with the very
    values it computes (``max(0, tokens(with breadcrumb) - tokens(message))``, by the
    message's identity) changes no result. The batch doubles, so a fit that drops few
    turns counts few."""

    def __init__(self, plan: _Plan) -> None:
        st = plan.st
        self.st = st
        self.on = st.breadcrumb and st.provider == "anthropic"
        self.turn_at = {a: t for t, (a, _) in enumerate(plan.seg.turns)} if self.on else {}
        self.starts = [a for a, _ in plan.seg.turns]
        self.batch = 8

    def ensure(self, w: int) -> None:
        """Make sure the memo holds the cost at item ``w`` (and at the next turns' starts)."""
        if not self.on:
            return
        st = self.st
        m = st.m(w)
        hit = st._bc_memo.get(id(m))
        if (hit is not None and hit[0] is m) or st.has_bc(w):
            return
        t = self.turn_at.get(w)
        todo = [w] if t is None else self.starts[t : t + self.batch]
        self.batch = min(2 * self.batch, 1024)
        msgs: list[Message] = []
        for v in todo:
            if st.has_bc(v):
                continue
            mv = st.m(v)
            hit = st._bc_memo.get(id(mv))
            if hit is None or hit[0] is not mv:
                msgs.append(mv)
        if not msgs:
            return
        cost = st.cost
        profile = getattr(cost, "profile", None)
        if profile is None:  # not the native cost model: bc_cost counts as it always did
            return
        led = [ref._with_breadcrumb(mv) for mv in msgs]
        counts = _engine.native.count_messages(_engine.encode_messages(led), profile)
        for mv, n in zip(msgs, counts, strict=True):
            st._bc_memo[id(mv)] = (mv, max(0, int(n) - cost.message_tokens(mv)))


def _bc_at(plan: _Plan, dropped_turns: set[int]) -> int | None:
    """Where the breadcrumb goes: the first kept turn after the first evicted turn
    (``trim_turns``' placement), unless a breadcrumb message already precedes it."""
    if not dropped_turns:
        return None
    first = min(dropped_turns)
    st, seg = plan.st, plan.seg
    t = next((t for t in range(first + 1, len(seg.turns)) if t not in dropped_turns), None)
    if t is None:
        return None
    at: int = seg.turns[t][0]
    prev = next((w for w in range(at - 1, -1, -1) if st.keep[w]), None)
    if prev is not None and ref.is_breadcrumb(st.m(prev)):
        return None
    return at


def _evict(plan: _Plan, pol: FitPolicy, target: int, provider: str, hold: bool = False) -> set[int]:
    """Evict candidates by ``pol.eviction_order``, oldest first, until ``target`` is met;
    returns the whole turns evicted. With ``hold``, no candidate holding a message of
    ``plan.held`` (the newest exchange after the request) goes."""
    st, seg, cls = plan.st, plan.seg, plan.cls
    nav = _Nav(plan)
    prefetch = _BreadcrumbCosts(plan)

    last: list[Any] = [None, None, 0]  # bc_cost's answer for (item index, item)

    def tokens() -> int:
        bc = nav.bc_at()
        total: int = st.total()
        if bc is None:
            return total
        item = st.work[bc]
        if last[0] != bc or last[1] is not item:  # a pure function of the item there
            prefetch.ensure(bc)
            last[:] = [bc, item, st.bc_cost(bc)]
        crumb: int = last[2]
        return total + crumb

    def over() -> bool:
        return tokens() > target

    start = tokens()
    evicted: list[int] = []
    groups: list[tuple[list[int], int | None]] = []  # each eviction: its items, its whole turn
    turns: list[int] = []  # the whole turns evicted, in order
    # the smallest state seen so far, the first of equals: (tokens, len(evicted),
    # len(turns)); evicting a whole turn adds the breadcrumb, so a step can make the
    # conversation larger (fresh16b #5: 37 -> 44 tokens, two messages lost)
    best = [start, 0, 0]

    def stepped() -> None:
        now = tokens()
        if now < best[0]:
            best[:] = [now, len(evicted), len(turns)]

    # the candidates holding an item of each class, in order: one without class c cannot
    # go in c's pass (its live items are among its items), so the pass never looks at it
    having: dict[int, list[tuple[int, list[int], int | None]]] = {c: [] for c in pol.eviction_order}
    held = plan.held if hold else set()
    for cand in plan.cands:
        if held and any(w in held for w in cand[1]):
            continue
        for c in {cls[w] for w in cand[1]}:
            if c in having:
                having[c].append(cand)
    keep, stub_head = st.keep, st.stub_head  # lists updated in place by set_keep
    anthropic = provider == "anthropic"  # alternates() only checks that shape
    allowed: set[int] = set()
    for c in pol.eviction_order:
        allowed.add(c)
        changed = True
        while changed and over():
            changed = False
            for _, items, turn in having[c]:
                if len(items) == 1:
                    # one message (most candidates): the checks below, for one item
                    w = items[0]
                    if not keep[w] or cls[w] != c:
                        continue  # gone already, or not of this pass's class
                    if not over():
                        break
                    if anthropic and not nav.alternates({w}, provider, seg.preamble_end):
                        continue
                    if stub_head[w] and keep[w - 1]:
                        continue
                    st.set_keep(w, False)
                    evicted.append(w)
                    groups.append(([w], turn))
                    if turn is not None:
                        nav.drop_turn(turn)
                        turns.append(turn)
                    stepped()
                    changed = True
                    continue
                if not over():
                    break
                live = [w for w in items if st.keep[w]]
                if not live or any(cls[w] not in allowed for w in live):
                    continue
                if c not in {cls[w] for w in live}:
                    continue
                drop = set(live)
                if not nav.alternates(drop, provider, seg.preamble_end):
                    continue
                # a message holding stubs for the calls of the one before it goes only
                # with them (its stubs go with the calls, see _reference._State.set_stubs)
                if any(st.stub_head[w] and st.keep[w - 1] and w - 1 not in drop for w in live):
                    continue
                for w in live:
                    st.set_keep(w, False)
                evicted.extend(live)
                groups.append((live, turn))
                if turn is not None:
                    nav.drop_turn(turn)
                    turns.append(turn)
                stepped()
                changed = True
    # the evictions after the smallest state only made it larger (tiny turns under a
    # breadcrumb that costs more than they did): undo them, back to that state, which
    # keeps more and costs less. The states are one sequence whatever the target, cut
    # at the first under it, so a larger target never ends smaller (fresh16b #5: 44
    # tokens at budgets 45-52, 37 at 53). `nav` is not used after this: its skip
    # pointers know no restored item.
    _, n_items, n_turns = best
    for w in evicted[n_items:]:
        st.set_keep(w, True)
    done, n = [], 0
    for g in groups:
        if n >= n_items:
            break
        n += len(g[0])
        done.append(g)
    _put_back(plan, done, target, best[0] - st.total(), provider)
    return set(turns[:n_turns])


def _put_back(
    plan: _Plan, groups: list[tuple[list[int], int | None]], target: int, bc_cost: int, provider: str
) -> None:
    """Put evicted units back, the last evicted first (the highest class, the newest in
    it), each one that keeps the conversation within ``target`` (fresh33 #1: four small old
    tool units went first, then the large one that alone would have been enough, and fit
    kept 350 of a 20,000 budget whose low-water mark was 14,000; ``trim_turns`` puts
    dropped units back the same way). Not whole turns (the breadcrumb and the turn count
    follow them), not a unit whose turn went whole, not one next to repair's stubs, and in
    Anthropic shape not one that would break the alternation of roles. ``bc_cost``: the
    breadcrumb's tokens, which units inside kept turns do not move."""
    st, seg = plan.st, plan.seg
    n = len(st.work)
    starts = [a for a, _ in seg.turns]
    role = ref.anthropic_role
    anthropic = provider == "anthropic"
    # the kept items in order, for each unit's kept neighbours by bisection (a scan over
    # the evicted run between them made a long agent turn quadratic: 10,000 tool units
    # 0.43 -> 5.8 s)
    kept = [v for v in range(n) if st.keep[v]] if anthropic and groups else []
    for items, turn in reversed(groups):
        if turn is not None or any(st.keep[w] for w in items):
            continue
        lo, hi = items[0], items[-1]
        t = bisect.bisect_right(starts, lo) - 1
        if t < 0 or not st.keep[starts[t]]:
            continue
        if any(st.stub_head[w] for w in items) or (hi + 1 < n and st.stub_head[hi + 1]):
            continue
        if anthropic:
            i, j = bisect.bisect_left(kept, lo), bisect.bisect_right(kept, hi)
            before = kept[i - 1] if i > 0 and kept[i - 1] >= seg.preamble_end else None
            after = kept[j] if j < len(kept) else None
            seq = ([] if before is None else [before]) + items + ([] if after is None else [after])
            roles = [role(st.m(w).role) for w in seq]
            if (before is None and roles[0] != "user") or any(x == y for x, y in itertools.pairwise(roles)):
                continue
        for w in items:
            st.set_keep(w, True)
        if st.total() + bc_cost > target:
            for w in items:
                st.set_keep(w, False)
        elif anthropic:
            for w in items:
                bisect.insort(kept, w)


def fit_target(
    prep: _engine.Prepared,
    budget: int,
    target: int,
    policy: FitPolicy,
    profile: str,
    reason: str = REASON_FIT,
    read: _engine.Read | None = None,
    cost: _CallerCost | None = None,
) -> TrimResult[Any]:
    """:func:`fit` on prepared input, evicting down to ``target`` once over ``budget``.

    For :mod:`contextwindow` internals (the guard, :func:`recover_from_overflow`).
    ``read``: ``prep``'s decoded messages (and costs) from :func:`_engine.read`, when at
    hand. ``cost``: the caller's costs (its ``msgs`` are ``read``'s), else ``profile``'s.

    >>> prep = _engine.prepare([{"role": "user", "content": "hi"}])
    >>> fit_target(prep, 10, 7, FitPolicy(), "fim").report.reason is None
    True
    """
    if read is None:
        read = _engine.Read(prep, _engine.decoded(prep), None)
    # decoded, counted, repaired and planned once for every run below (up to four: with
    # and without the breadcrumb, holding the newest exchange back or not); each run
    # works on its own copy of the plan's state
    model = _NativeCost(prep, read.messages, profile, read.costs) if cost is None else cost
    plan = _plan(prep, policy, model, budget)
    r, held = _fit_variants(prep, plan, budget, target, policy, reason, False)
    if held and any(r.report.fates[s].fate == "dropped" for s in held):
        # the newest exchange after the request went: keep it when a result fits with it
        # at no cost to the request (fresh14 findings 1 and 4), see _worth_holding
        kept, _ = _fit_variants(prep, plan, budget, target, policy, reason, True)
        if _worth_holding(kept.report, r.report, held, read.messages):
            return kept
    return r


def _fit_variants(
    prep: _engine.Prepared,
    plan: _Plan,
    budget: int,
    target: int,
    policy: FitPolicy,
    reason: str,
    hold: bool,
) -> tuple[TrimResult[Any], list[int]]:
    """:func:`_fit_once` with the breadcrumb, and without it when that is better
    (``plan``: :func:`_plan` of the input for ``policy`` and ``budget``, left as it is)."""
    r, held = _fit_once(prep, _fresh(plan, policy.breadcrumb), budget, target, policy, reason, hold)
    if not policy.breadcrumb or (r.report.fits and not r.report.truncated_messages):
        return r, held
    # the breadcrumb is a courtesy, never paid for with the request (fresh8 N1): when the
    # result does not fit, or fits only by cutting, the run without it may fit with less
    # cut (dropping a turn smaller than the breadcrumb gains nothing with it, so the
    # eviction was undone and only cutting the request was left)
    bare_policy = msgspec.structs.replace(policy, breadcrumb=False)
    bare, _ = _fit_once(prep, _fresh(plan, False), budget, target, bare_policy, reason, hold)
    if _cut_rank(bare.report) > _cut_rank(r.report):
        return bare, held
    return r, held


def _request_cut(report: Any) -> int:
    """The characters cut from the current request."""
    return sum(f.chars_removed for f in report.fates if f.rule == "request_truncated")


def _worth_holding(kept: Any, plain: Any, held: list[int], msgs: list[Message]) -> bool:
    """Whether the run that held the newest exchange back (``kept``) is the result
    instead of the plain run (``plain``, where some of it was evicted as P1).

    Only when it fits, keeps every held message, cuts no more of the request than the
    plain run does, and keeps some held message with more than its marker. So the request
    is cut exactly as in the plain run, whose cut never grows with the budget: a rule that
    cut the request further to keep the exchange could not be monotone, since below the
    budget where the exchange stops fitting the plain run keeps more of the request
    (fresh15 #3). Where the request alone is over the budget, the exchange therefore goes.
    """
    if not kept.fits:
        return False
    fates = kept.fates
    if any(fates[s].fate == "dropped" for s in held):
        return False
    if _request_cut(kept) > _request_cut(plain):
        return False
    return not all(fates[s].fate == "truncated" and fates[s].chars_removed >= _text_chars(msgs[s]) for s in held)


def _text_chars(m: Message) -> int:
    """The characters of a message's text and tool-result text (what a cut removes)."""
    n = 0
    for q in m.content:
        if isinstance(q, ToolResult):
            n += sum(len(x.text) for x in q.content if isinstance(x, TextPart))
        elif isinstance(q, TextPart):
            n += len(q.text)
    return n


def _cut_rank(report: Any) -> tuple[bool, int, int]:
    """Higher is better: fits, then fewer characters cut from the request, then fewer
    characters cut in all."""
    total = sum(f.chars_removed for f in report.fates if f.fate == "truncated")
    return (report.fits, -_request_cut(report), -total)


def _fresh(plan: _Plan, breadcrumb: bool) -> _Plan:
    """``plan`` with a copy of its state, whose breadcrumb setting is ``breadcrumb``: what
    :func:`_plan` gives for a policy that differs in ``breadcrumb`` only (the setting is
    read by the state alone, when it prices and places the breadcrumb). A run of
    :func:`_fit_once` changes the state it works on (what is kept, cut, stubbed, the
    fates); the classes and candidates of the plan only ever are read. The state's memos
    (a stub head without its stubs, the breadcrumb's cost at a message) are pure
    functions of the item or message they are kept for, so the copies share them."""
    st = copy.copy(plan.st)
    st.breadcrumb = breadcrumb
    st.work = list(st.work)
    st.costs = list(st.costs)
    st.keep = list(st.keep)
    st.saved = list(st.saved)
    st.fates = [dict(f) for f in st.fates]
    return replace(plan, st=st)


def _fit_once(
    prep: _engine.Prepared,
    plan: _Plan,
    budget: int,
    target: int,
    policy: FitPolicy,
    reason: str,
    hold: bool = False,
) -> tuple[TrimResult[Any], list[int]]:
    """:func:`fit_target` with the policy's breadcrumb setting as given; with ``hold``
    the newest exchange after the request is left out of the class passes. Also returns
    the input indices of that exchange (empty when nothing was evicted). ``plan``: the
    input's plan for ``policy`` and ``budget`` (:func:`_fresh`), which the run changes."""
    st, seg = plan.st, plan.seg
    nt = len(seg.turns)
    if st.total() <= budget or not seg.turns:
        ops, report = ref._finish(st, budget, None, (nt, nt), None)
        return _engine.apply_ops(prep, ops, report), []
    held = sorted(s for s in (st.work[w].src for w in plan.held) if s is not None)
    dropped_turns = _evict(plan, policy, min(target, budget), prep.provider, hold)
    for w in range(len(st.work)):
        s = st.work[w].src
        if s is None:
            continue
        if not st.keep[w]:
            rule = "unpinned_over_share" if w in plan.unpinned else f"p{plan.cls[w]}_evicted"
            st.set_fate(w, "dropped", rule)
        elif st.fates[s]["fate"] == "repaired":
            continue
        elif plan.why0[w]:
            st.set_fate(w, "kept", plan.why0[w])
        elif w in plan.unpinned:
            st.set_fate(w, "kept", "unpinned_over_share")
        else:
            st.set_fate(w, "kept", "kept")
    bc = _bc_at(plan, dropped_turns)
    turns = (nt, nt - len(dropped_turns))
    # _finish marks the message given the breadcrumb (its rule): kept to undo below
    given = st.work[bc].src if bc is not None else None
    given_fate = dict(st.fates[given]) if given is not None else None
    ops, report = ref._finish(st, budget, reason, turns, bc)
    if not report.fits:
        ops, report = _shrink_newest_turn(prep, plan, policy, ops, report, budget, reason)
    if not report.fits and bc is not None:
        # the breadcrumb is a courtesy: when it alone keeps the result over budget, it is
        # left out, as trim_turns does (found by a new user: 49 tokens over 40, 35 without);
        # and when neither fits, the smaller comes back, as in trim_turns (fresh14 #7: 25
        # tokens at budget 9, 10 at budget 12)
        if given is not None:
            st.fates[given] = given_fate
        ops0, report0 = ref._finish(st, budget, reason, turns, None)
        if not report0.fits:
            ops0, report0 = _shrink_newest_turn(prep, plan, policy, ops0, report0, budget, reason)
        if report0.fits or report0.tokens_after < report.tokens_after:
            ops, report = ops0, report0
    ops, report = _unexposed_prefill(prep, plan, ops, report, budget)
    return _engine.apply_ops(prep, ops, report), held


def _unexposed_prefill(
    prep: _engine.Prepared, plan: _Plan, ops: list[tuple[int | None, Message | None]], report: Any, budget: int
) -> tuple[list[tuple[int | None, Message | None]], Any]:
    """Under Anthropic rules, an assistant message that eviction leaves last (a prefill it
    was not in the input) without the whitespace its text ends in, which the Messages API
    refuses (``trailing_whitespace``), as repair treats a final message whose calls it
    removes (:func:`_reference._trim_prefill_end`). Found by hypothesis: the messages
    after a pinned ``[thinking, "[Tool results] "]`` were evicted. The report's
    ``tokens_after`` (and ``fits``) follow; the message's fate is kept."""
    trimmed = ref.trim_exposed_prefill(ops, plan.st.msgs, prep.provider)
    if trimmed is ops:
        return ops, report
    cost = plan.st.cost
    old_m, new_m = ops[-1], trimmed[-1][1]
    assert old_m[0] is not None and new_m is not None
    before = old_m[1] if old_m[1] is not None else plan.st.msgs[old_m[0]]
    after = report.tokens_after - cost.message_tokens(before) + cost.message_tokens(new_m)
    report = msgspec.structs.replace(report, tokens_after=after, fits=after <= budget)
    return trimmed, report


def _shrink_newest_turn(
    prep: _engine.Prepared,
    plan: _Plan,
    policy: FitPolicy,
    ops: list[tuple[int | None, Message | None]],
    report: Any,
    budget: int,
    reason: str,
) -> tuple[list[tuple[int | None, Message | None]], Any]:
    """Still over budget with nothing left to evict: run ``trim_turns`` (the Rust engine)
    on what is left, so it shrinks inside the newest turn: drops its oldest complete tool
    units, cuts oversized tool results (and ``[Tool results]`` texts) to head + tail, then
    the reply after the request, then the request if that makes it fit. What ``fit``
    must keep is passed to it as pinned: pinned messages, class-0 overrides, classes the
    policy never evicts. Not the open tool call, the newest unit of the newest turn (its
    results may be cut, never dropped: ``trim_turns`` never drops the newest unit)."""
    st = plan.st
    msgs = st.msgs  # the decoded input the plan was made for
    order = set(policy.eviction_order)
    keep_pinned: dict[int, bool] = {}
    for w, it in enumerate(st.work):
        if it.src is None:
            continue
        why = plan.why0[w]
        pinned = (msgs[it.src].pinned or it.src in policy.pinned) and w not in plan.unpinned
        held = (
            pinned or why in ("pinned", "priority_override", "thinking_block") or (not why and plan.cls[w] not in order)
        )
        # a request that repair made a carrier (a result moved into it) is no real user
        # message to trim_turns, which would take it for an older tool unit's results and
        # could drop it: pinned, it stays whole
        held = held or w == plan.carrier_request
        keep_pinned[it.src] = held
    first = [m if m is not None else msgs[s] for s, m in ops]
    marked = [
        msgspec.structs.replace(m, pinned=keep_pinned[s]) if s is not None and m.pinned != keep_pinned[s] else m
        for (s, _), m in zip(ops, first, strict=True)
    ]
    breadcrumb = policy.breadcrumb and not report.breadcrumb
    cost = plan.st.cost
    if isinstance(cost, _CallerCost):
        # the caller's costs: the pure-Python engine, the same rules (trim_turns does so)
        second_ops, r2 = ref.trim_turns(marked, budget, cost, breadcrumb, prep.provider)
    else:
        raw = _engine.native.trim_turns(
            _engine.encode_messages(marked), budget, cost.profile, breadcrumb, prep.provider
        )
        second = _engine._OUTCOME.decode(raw)
        second_ops, r2 = [(op.src, op.msg) for op in second.messages], second.report
    out: list[tuple[int | None, Message | None]] = []
    for src, msg in second_ops:
        if src is None:
            out.append((None, msg))
        elif msg is None:
            out.append(ops[src])
        else:  # changed by trim_turns: back to the caller's own pinned flag
            out.append((ops[src][0], msgspec.structs.replace(msg, pinned=first[src].pinned)))
    fates = list(report.fates)
    # a pinned message unpinned by pinned_share keeps saying so when it goes or is cut
    # here (fresh14 finding 9: it read oldest_turn when an override kept fit's passes
    # from evicting it)
    unpinned = {st.work[w].src for w in plan.unpinned}
    for f in r2.fates:
        s = ops[f.index][0]
        if s is not None and f.fate in ("dropped", "truncated"):
            rule = "unpinned_over_share" if s in unpinned else f.rule
            fates[s] = msgspec.structs.replace(fates[s], fate=f.fate, rule=rule, chars_removed=f.chars_removed)
        elif s is not None and f.rule == "breadcrumb_added":
            fates[s] = msgspec.structs.replace(fates[s], rule="breadcrumb_added")
    merged = msgspec.structs.replace(
        report,
        tokens_after=r2.tokens_after,
        fits=r2.fits,
        reason=report.reason if r2.reason is None else reason,
        kept_turns=report.kept_turns - r2.dropped_turns,
        dropped_turns=report.dropped_turns + r2.dropped_turns,
        dropped_messages=sum(f.fate == "dropped" for f in fates),
        truncated_messages=sum(f.fate == "truncated" for f in fates),
        inserted_messages=report.inserted_messages + r2.inserted_messages,
        breadcrumb=report.breadcrumb or r2.breadcrumb,
        fates=fates,
    )
    return out, merged


@nesting_errors()
def fit(
    messages: Any,
    budget: int | Budget,
    policy: FitPolicy | None = None,
    *,
    profile: str | None = None,
    format: str | None = None,
    token_counter: Any = None,
    estimator: Any = None,
    tokenizer: Any = None,
) -> TrimResult[Any]:
    """Fit a conversation into a token budget by evicting whole units by priority.

    If the estimate fits, the input comes back unchanged (same objects, reason ``None``).
    Otherwise units are evicted class by class in ``policy.eviction_order`` (default P3,
    then P2, then P1; see the module docs for the classes), oldest first within a class,
    until the conversation costs at most ``policy.low_water * budget`` tokens (the
    low-water mark, issue 5 item 6). A unit is a whole turn (its opening user message
    goes only with the whole turn), a tool unit (the call message and all its results,
    parallel calls included) or one loose message; a unit goes only when every message
    still in it has a class evicted so far, so P0 messages are never evicted. In
    Anthropic shape a unit whose removal would break role alternation is skipped.
    Pinned messages costing more than ``policy.pinned_share`` of ``budget`` are unpinned
    oldest first (the current request never is). Where whole turns went, the breadcrumb
    is inserted as :func:`~contextwindow.trim_turns` does it (never twice in a row);
    evictions that leave the conversation larger than it was before them (tiny turns
    under a breadcrumb that costs more) are undone: it goes back to the smallest state
    the eviction passed through, so a smaller budget never gets more tokens with less
    content (fresh16b #5). Then the units evicted, the last first, go back in where the
    result stays within the mark (not whole turns, not next to repair's stubs, not
    breaking Anthropic's alternation; fresh33 #1: four small old units went before the
    large one that alone was enough). The breadcrumb never costs the request: when
    the result does not fit or cuts something, ``fit`` also runs without it and keeps
    the run that fits, then cuts fewer characters of the request, then fewer in all
    (fresh8 N1). The placeholder pair repair keeps so Anthropic roles alternate
    (``RESULTS_REMOVED``) goes together with the loose message or tool unit on either
    side of it (alone, either would break the alternation). A text-action step (a
    command and the ``[Tool results]`` texts answering it) goes as one unit, before its
    turn's opening message, like a tool unit. When the eviction took some of the newest
    exchange after the current request (see the module docs: a trailing command and its
    output, a prefill), ``fit`` runs again with it held back and keeps that result when
    it fits, keeps all of the exchange, some of it with more than a cut marker, and cuts
    no more of the request: the exchange goes only as the last resort and never merely to
    reach the low-water mark, and the request is cut as much as without it.
    When nothing more can be evicted and it is still over ``budget`` (not the low-water
    mark), the shrinking inside the newest turn is delegated to
    :func:`~contextwindow.trim_turns` on what is left, with every message ``fit`` must
    keep marked pinned for it: it drops the newest turn's oldest complete tool units
    (never the newest, which holds the open tool call if any), cuts oversized tool results to head + tail with a
    marker, then the assistant text after the request the same way, then cuts the
    request only if that makes it fit (never a pinned request, never to its markers
    and blanks alone). If
    it still does not fit the report says ``fits=False``; never empty, the P0 messages
    are all there. Deterministic: the same input gives the same output.

    Report: ``reason="priority_budget"``; each input message's Fate rule is one of
    ``preamble``, ``pinned``, ``current_request``, ``open_tool_call``,
    ``thinking_block`` (see the module docs), ``priority_override`` (class 0 by override), ``kept``, ``p1_evicted``,
    ``p2_evicted``, ``p3_evicted`` (the message's own class), ``unpinned_over_share`` (a
    pinned message demoted by the share rule, kept, cut or dropped: see ``fate``), or a repair
    rule (``orphan_result``, ``result_moved``, ...; repair runs first),
    ``breadcrumb_added``, or one of ``trim_turns``' (``oldest_turn``,
    ``oldest_tool_unit``, ``tool_result_shrunk``, ``reply_shrunk``,
    ``request_truncated``) when the
    delegated step changed it.

    Args:
        messages: OpenAI dicts, Anthropic dicts or ``Message`` structs.
        budget: token budget for the messages (tokens of ``profile``), >= 0: an int, or
            an object with an int ``usable`` (``contextwindow.budget.Budget``).
        policy: a :class:`FitPolicy`; ``None`` uses the defaults.
        profile: built-in profile name; ``None`` means ``conservative`` (or the
            estimator's profile).
        format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.
        token_counter: ``list of messages -> tokens`` (LangChain's convention), called
            with one message at a time in the caller's shape, as in
            :func:`~contextwindow.trim_turns`; ``budget``, ``chatter_tokens``,
            ``pinned_share`` and the report are then in its tokens.
        estimator: an :class:`~contextwindow.Estimator` (profile, tokenizer, calibrator).
        tokenizer: ``str -> tokens``, replacing ``profile``'s text rule.

    With one of the last three, the same rules run in the pure-Python engine
    (``_reference.py``) on the caller's costs, as ``trim_turns`` does (README, Exact
    mode): every distinct input message is counted once, each message the engine makes
    or changes once, plus trial cuts when a text must be shortened.

    Returns:
        ``TrimResult(messages, report)``, messages in the caller's shape.

    Raises:
        InvalidMessageError: a message is malformed.
        TokenCounterError: the counter or tokenizer raised, or returned something other
            than an ``int >= 0`` (names it and the message index).
        ValueError: ``budget`` is neither an int >= 0 nor has one in ``usable`` (a
            string or a bool too, as in ``trim_turns``), unknown profile, a policy value
            out of range (an index that is not a message, a class outside 0-3, a share
            outside (0, 1]), more than one cost source, ``profile`` together with
            ``token_counter``. A hand-built ``Budget`` that
            :func:`~contextwindow.resolve_budget` could never return (fields that
            disagree; a reserve as large as the window, a ``ReserveError``; a non-int
            field is a ``TypeError``): see
            ``contextwindow.budget.checked_budget``.
        TypeError: ``policy`` is not a ``FitPolicy``, or one of its collections (``pinned``,
            ``priorities``, ``eviction_order``) is of the wrong type or holds an item of
            the wrong type (``priorities={"0": 1}``); ``breadcrumb`` is not a bool;
            ``token_counter``/``tokenizer`` not callable, ``estimator`` not an
            ``Estimator``.

    >>> msgs = [{"role": "system", "content": "s"},
    ...         {"role": "user", "content": "old " * 40}, {"role": "assistant", "content": "ok"},
    ...         {"role": "user", "content": "new"}]
    >>> r = fit(msgs, budget=30, policy=FitPolicy(recent_turns=1), profile="fim")
    >>> [m["content"][:8] for m in r.messages]
    ['s', '[earlier', 'new']
    >>> [f.rule for f in r.report.fates]
    ['preamble', 'p2_evicted', 'p3_evicted', 'current_request']
    """
    name, est, counter = cost_source(profile, token_counter, estimator, tokenizer)
    budget = _usable(budget)
    calibrated = on_raw_costs(est, budget, lambda b, kw: fit(messages, b, policy, format=format, **kw))
    if calibrated is not None:
        return calibrated  # type: ignore[no-any-return]
    caller = est is not None or counter is not None
    read = _engine.read(messages, format, None if caller else name)
    pol = _check_policy(policy, len(read.messages))
    cost = _CallerCost(read.messages, caller_cost(read.prep, read.messages, est, counter)) if caller else None
    return fit_target(read.prep, budget, int(budget * pol.low_water), pol, name, read=read, cost=cost)


@nesting_errors()
def priorities(
    messages: Any, policy: FitPolicy | None = None, *, profile: str | None = None, format: str | None = None
) -> list[int]:
    """The priority class (0-3) :func:`fit` gives each input message (see the module docs).

    No budget is involved, so no pinned message is unpinned here. A message that pair
    repair removes (an orphan tool result) has class 3. ``profile`` prices chatter.

    Args:
        messages: OpenAI dicts, Anthropic dicts or ``Message`` structs.
        policy: a :class:`FitPolicy`; ``None`` uses the defaults.
        profile: built-in profile name; ``None`` means ``conservative``.
        format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.

    Returns:
        One class per input message, in input order.

    Raises:
        InvalidMessageError: a message is malformed.
        ValueError: unknown profile or a policy value out of range.
        TypeError: ``policy`` is not a ``FitPolicy``, or a policy collection or an item in
            it is of the wrong type.

    >>> priorities([{"role": "system", "content": "s"}, {"role": "user", "content": "a"},
    ...             {"role": "assistant", "content": "ok"}, {"role": "user", "content": "b"}],
    ...            FitPolicy(recent_turns=1))
    [0, 2, 3, 0]
    """
    name = resolve_profile(profile)
    read = _engine.read(messages, format, name)
    prep = read.prep
    pol = _check_policy(policy, len(read.messages))
    plan = _plan(prep, pol, _NativeCost(prep, read.messages, name, read.costs), None)
    out = [3] * len(read.messages)
    for w, it in enumerate(plan.st.work):
        if it.src is not None:
            out[it.src] = plan.cls[w]
    return out


@nesting_errors()
def recover_from_overflow(
    messages: Any,
    reported_tokens: int | None = None,
    *,
    budget: Any,
    profile: str | None = None,
    format: str | None = None,
    policy: FitPolicy | None = None,
    token_counter: Any = None,
    estimator: Any = None,
    tokenizer: Any = None,
) -> Recovery:
    """Trim after the provider said the context overflowed, so the retry can succeed.

    With ``E`` the current estimate of ``messages`` and ``B`` the token budget: without
    ``reported_tokens`` the target is ``min(E * 2 // 3, B)``, two thirds of the current
    estimated size (second seed: the reactive recovery path trims to two thirds and
    retries), and never above the budget. With the provider's
    count ``N``, the estimate is scaled by the provider's
    ratio so that its count lands under the budget: ``target = E * B // N`` (when
    ``N > B``; otherwise the count does not say how much to remove and the two-thirds
    rule applies). Then :func:`fit` evicts down to the target exactly (no low-water
    mark). When the provider's count sets the target and even the smallest result (what
    is never evicted, the current request cut as far as it goes) is above it, :func:`fit`
    would keep the request whole (and maybe everything); the target is then raised to the
    smallest one the fit meets (found by bisection), so a larger reported overflow never
    keeps more than a smaller one, but never above ``B``: when none up to ``B`` is met,
    the result does not fit (``fits=False``, fresh34 #2). At ``B >= N`` the two-thirds
    rule takes over, so a budget at the reported count can keep less than one just under
    it (fresh34 #7). Under the two-thirds rule such a conversation keeps its
    request whole, as from :func:`fit` (``removed=False`` when nothing else can go).
    ``removed`` is ``True`` only when tokens went down, so calling this again on
    its own output either removes more or returns ``removed=False``: a retry loop ends.
    Never empty: P0 messages (preamble, pinned, current request, open tool calls) stay.

    Args:
        messages: OpenAI dicts, Anthropic dicts or ``Message`` structs.
        reported_tokens: the prompt tokens the provider reported, when it did.
        budget: the token budget for messages: an int, or an object with an int
            ``usable`` attribute (``contextwindow.budget.Budget``).
        profile: built-in profile name; ``None`` means ``conservative`` (or the
            estimator's profile).
        format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.
        policy: a :class:`FitPolicy` for classes and order (``low_water`` is ignored).
        token_counter: ``list of messages -> tokens`` (LangChain's convention), as in
            :func:`fit`; ``E``, the target and the report are then in its tokens.
        estimator: an :class:`~contextwindow.Estimator` (profile, tokenizer, calibrator).
        tokenizer: ``str -> tokens``, replacing ``profile``'s text rule.

    Returns:
        A :class:`Recovery`; ``report.budget`` is the target, ``report.reason`` is
        ``"context_overflow"`` when anything changed.

    Raises:
        InvalidMessageError: a message is malformed.
        TokenCounterError: the counter or tokenizer raised, or returned something other
            than an ``int >= 0`` (names it and the message index).
        ValueError: ``budget`` is neither an int >= 0 nor has one in ``usable``,
            negative ``reported_tokens``, unknown profile, a policy value out of range,
            more than one cost source, ``profile`` together with ``token_counter``.
            A hand-built ``Budget`` that :func:`~contextwindow.resolve_budget` could
            never return (fields that disagree; a reserve as large as the window, a
            ``ReserveError``; a non-int field is a ``TypeError``): see
            ``contextwindow.budget.checked_budget``.
        TypeError: ``policy`` is not a ``FitPolicy``, or a policy collection or an item in
            it is of the wrong type; ``token_counter``/``tokenizer`` not callable,
            ``estimator`` not an ``Estimator``.

    >>> msgs = [{"role": "user", "content": "a" * 400}, {"role": "assistant", "content": "b" * 400},
    ...         {"role": "user", "content": "go"}]
    >>> r = recover_from_overflow(msgs, budget=1000, profile="fim")
    >>> r.target, r.removed, [m["content"][0]["text"][:8] for m in r.messages]  # 2/3 of 104+104+5
    (142, True, ['[earlier'])
    """
    _, est, _ = cost_source(profile, token_counter, estimator, tokenizer)  # checks the arguments
    usable = _usable(budget)
    if reported_tokens is not None:
        reported_tokens = _check_budget(reported_tokens, "reported_tokens")
    cal = uncalibrated(est)
    if cal is not None:  # the raw costs, the target found in them (estimator.uncalibrated)
        # (the budget and the provider's count are real tokens, compared as they are; the
        # target E * B // N is then in raw tokens, and scaled for the report; the
        # two-thirds rule's cap, the budget, is the largest raw count within it)
        kw, factor = cal
        raw = _recover(messages, reported_tokens, usable, raw_budget(usable, factor), format, policy, kw)
        target = scale_tokens(raw.target, factor)
        report = scaled_report(raw.report, factor, target)
        return Recovery(messages=raw.messages, report=report, removed=raw.removed, target=target)
    kw = {"profile": profile, "token_counter": token_counter, "estimator": estimator, "tokenizer": tokenizer}
    return _recover(messages, reported_tokens, usable, usable, format, policy, kw)


def _recover(
    messages: Any,
    reported_tokens: int | None,
    usable: int,
    cap: int,
    format: str | None,
    policy: FitPolicy | None,
    kw: dict[str, Any],
) -> Recovery:
    """:func:`recover_from_overflow` on costs without a calibrator (``kw``: the cost
    source's arguments), ``cap`` the largest target the two-thirds rule may give (the
    budget, in those costs)."""
    name, est, counter = cost_source(
        kw.get("profile"), kw.get("token_counter"), kw.get("estimator"), kw.get("tokenizer")
    )
    caller = est is not None or counter is not None
    read = _engine.read(messages, format, None if caller else name)
    prep = read.prep
    pol = _check_policy(policy, len(read.messages))
    cost = _CallerCost(read.messages, caller_cost(prep, read.messages, est, counter)) if caller else None
    if cost is not None:
        current = sum(cost.message_tokens(m) for m in read.messages)
    else:
        if read.costs is None:
            counts = _engine.native.count_messages(prep.payload, name)
            read = _engine.Read(prep, read.messages, [int(c) for c in counts])
        current = sum(read.costs)  # type: ignore[arg-type]
    if reported_tokens is not None and reported_tokens > usable:
        scaled, target = True, current * usable // reported_tokens
    else:
        # and never above the budget (fresh32 #2: budget=500 without a count kept 1,598
        # tokens, two thirds of 2,630, reported as fitting)
        scaled, target = False, min(current * 2 // 3, cap)
    r = fit_target(prep, target, target, pol, name, REASON_OVERFLOW, read=read, cost=cost)
    if scaled and not r.report.fits and target + 1 < min(current, cap + 1):
        # never above the budget (fresh34 #2: budget 10 and a reported 146 raised the
        # target to 27, "fitting", with the request cut to one letter)
        r, target = _smallest_fit(prep, r, target, min(current, cap + 1), pol, name, read, cost)
    removed = r.report.tokens_after < r.report.tokens_before
    return Recovery(messages=r.messages, report=r.report, removed=removed, target=target)


def _smallest_fit(
    prep: _engine.Prepared,
    r: TrimResult[Any],
    target: int,
    current: int,
    policy: FitPolicy,
    profile: str,
    read: _engine.Read,
    cost: _CallerCost | None = None,
) -> tuple[TrimResult[Any], int]:
    """The fit at the smallest target in ``(target, current)`` that it meets, and that
    target, when it keeps fewer tokens than ``r`` (the fit at ``target``, which did not
    meet it); else ``(r, target)``.

    :func:`fit` leaves the current request whole when even the request cut to its first character
    (with what else is never evicted) is above the target, so below that smallest result
    a target keeps more than a slightly larger one: a provider reporting a larger overflow
    got more back than a smaller report (the whole input and ``removed=False``, fresh22
    #2; or the old turns dropped and the request whole, 68 tokens where a smaller report
    got 17, fresh22b #1). Found by bisection (about ``log2(current)`` fits), on the rule
    that a target the fit meets is met by every larger one below ``current``.
    """

    def meets(t: int) -> TrimResult[Any] | None:
        got = fit_target(prep, t, t, policy, profile, REASON_OVERFLOW, read=read, cost=cost)
        return got if got.report.fits else None

    hi = current - 1
    best = meets(hi)
    if best is None:
        return r, target
    lo = target  # not met at lo, met at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        got = meets(mid)
        if got is None:
            lo = mid
        else:
            hi, best = mid, got
    if best.report.tokens_after >= r.report.tokens_after:
        return r, target
    return best, hi
