"""The shortcuts that make ``fit`` and ``ContextGuard.check`` faster change how often work
is done, never what comes out.

Each shortcut is checked against the path it replaces, on the corpus (skipped when
../shared/corpus is absent), on hypothesis conversations and on hand-made inputs:

* ``_engine.read``: the dict reader's canonical messages and costs are those of
  ``prepare`` + ``decoded`` + ``message_costs`` (and ``fit``/``guard.check`` give the same
  results with the reader off); what it leaves in a ``reuse_conversions`` scope is what
  ``prepare`` would have left there.
* ``_engine.decoded`` in a scope that knows every message returns those very objects.
* ``_reference.segment``, ``repair`` and ``_state`` given what the caller computed already
  (``is_real_user`` flags, ``resolve``'s answer) answer as without it.
* ``fit._BreadcrumbCosts`` fills ``bc_cost``'s memo with the values ``bc_cost`` computes,
  in few native calls: ``fit`` gives the same result with it turned off.
* ``ContextGuard.check``'s ``reuse_conversions`` scope (a list read once; resolve, the
  segmentation and the tool names once per conversation, ``_engine.shaped``; kept fates
  made once; decoded messages not walked again for odd keys): every hint and option gives
  what it gives without the scope, and the work is done once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contextwindow as cw
from contextwindow import _engine
from contextwindow import _reference as ref
from contextwindow.adapters import from_canonical
from contextwindow.budget import resolve_budget
from contextwindow.fit import FitPolicy, _BreadcrumbCosts, fit, priorities, recover_from_overflow

import strategies as strat
from shared_data import corpus_files, ids, load, need

FILES = corpus_files()
PCTS = [0, 5, 20, 50, 70, 100, 150]


def plain(result: Any) -> bytes:
    """A result as JSON, key order kept (``msgspec.to_builtins`` then the stdlib, which
    writes lone surrogates as escapes)."""
    import json

    return json.dumps(msgspec.to_builtins(result), ensure_ascii=True).encode()


def identity(inp: list[Any], out: list[Any]) -> list[int]:
    """For each output message, the index of the input object it is, else -1."""
    pos = {id(m): i for i, m in enumerate(inp)}
    return [pos.get(id(m), -1) for m in out]


@contextlib.contextmanager
def reader(on: bool) -> Iterator[None]:
    saved = _engine.FAST_READER
    _engine.FAST_READER = on
    try:
        yield
    finally:
        _engine.FAST_READER = saved


def outcome(fn: Any, msgs: list[Any]) -> Any:
    try:
        r = fn()
    except cw.ContextOverflowError as exc:
        r = exc.result  # type: ignore[attr-defined]
    except (ValueError, TypeError) as exc:
        return ("error", type(exc).__name__, str(exc))
    return ("ok", plain(r), identity(msgs, r.messages))


def runs(msgs: list[Any], fmt: str | None, total: int) -> list[Any]:
    """fit, priorities, recover_from_overflow and guard.check at several budgets."""
    out: list[Any] = []
    for pct in PCTS:
        budget = total * pct // 100
        out.append(outcome(lambda b=budget: fit(msgs, b, format=fmt), msgs))
        out.append(outcome(lambda b=budget: fit(msgs, b, FitPolicy(low_water=1.0), format=fmt), msgs))
        if budget > 0:
            guard = cw.ContextGuard(resolve_budget(2 * budget, budget, floor=0, env={}))
            out.append(outcome(lambda g=guard: g.check(msgs, format=fmt), msgs))
    out.append(outcome(lambda: recover_from_overflow(msgs, budget=max(total, 1), format=fmt), msgs))
    try:
        out.append(priorities(msgs, format=fmt))
    except (ValueError, TypeError) as exc:
        out.append(("error", type(exc).__name__, str(exc)))
    return out


@pytest.mark.parametrize("path", need(FILES, "../shared/corpus"), ids=ids(FILES) or None)
def test_reader_gives_what_the_adapters_give(path: Path) -> None:
    doc = load(path)
    fmt, msgs = doc["format"], doc["messages"]
    for f in (None, fmt):
        got = _engine.read(msgs, f, "conservative")
        with reader(False):
            slow = _engine.read(msgs, f, "conservative")
        assert slow.costs is None  # the adapters' path counts nothing itself
        prep = _engine.prepare(msgs, f)
        assert (got.prep.format, got.prep.provider) == (prep.format, prep.provider)
        assert msgspec.json.encode(got.messages) == msgspec.json.encode(_engine.decoded(prep))
        assert got.costs == _engine.message_costs(_engine.decoded(prep), "conservative")
        assert got.prep.original == msgs and got.prep.original is not msgs  # a snapshot
        assert got.prep.canonical is got.messages


@pytest.mark.parametrize("path", need(FILES, "../shared/corpus"), ids=ids(FILES) or None)
def test_fit_and_guard_equal_with_and_without_the_reader(path: Path) -> None:
    doc = load(path)
    fmt, msgs = doc["format"], doc["messages"]
    total = cw.count_messages(msgs, format=fmt)
    fast = runs(msgs, fmt, total)
    with reader(False):
        slow = runs(msgs, fmt, total)
    assert fast == slow


def test_reader_declines_and_the_adapters_raise_as_before() -> None:
    bad = [{"role": "user", "content": "hi"}, {"role": "wizard", "content": "x"}]
    with pytest.raises(cw.InvalidMessageError) as fast:
        _engine.read(bad, None, "fim")
    with reader(False), pytest.raises(cw.InvalidMessageError) as slow:
        _engine.read(bad, None, "fim")
    assert (str(fast.value), fast.value.index) == (str(slow.value), slow.value.index) == (str(fast.value), 1)
    # Message structs and tuples are not for the dict reader: the adapters' path, no costs
    structs = [cw.Message(role="user", content=[cw.TextPart(text="hi")])]
    assert _engine.read(structs, None, "fim").costs is None
    assert _engine.read(tuple(structs), None, "fim").messages == structs


def test_read_in_a_scope_leaves_what_prepare_would() -> None:
    msgs = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"p": 1}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "data"},
    ]
    with _engine.reuse_conversions():
        got = _engine.read(msgs, None, "fim")
        assert got.costs == [int(n) for n in _engine.native.count_dicts(msgs, "openai", "fim")]
        # prepare now finds every dict's canonical message: the reader's decoded ones
        again = _engine.prepare(list(msgs))
        assert all(a is b for a, b in zip(again.canonical, got.messages, strict=True))
        assert again.payload == _engine.prepare(msgs, None).payload
        # decoded() gives those objects back without decoding; costs are remembered
        assert all(a is b for a, b in zip(_engine.decoded(again), got.messages, strict=True))
        assert _engine.message_costs(got.messages, "fim") == got.costs
        # a second read in the scope goes through prepare and its memo: the same objects
        second = _engine.read(list(msgs), None, "fim")
        assert all(a is b for a, b in zip(second.messages, got.messages, strict=True))
        assert second.costs == got.costs
    with reader(False), _engine.reuse_conversions():
        slow = _engine.prepare(msgs)
        assert msgspec.json.encode(slow.canonical) == msgspec.json.encode(got.messages)
    # outside the scope nothing is remembered
    assert _engine.read(msgs, None, "fim").messages[1] is not got.messages[1]


def test_decoded_in_a_scope_decodes_only_what_it_does_not_know() -> None:
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    with _engine.reuse_conversions():
        first = _engine.decoded(_engine.prepare(msgs))
        again = _engine.decoded(_engine.prepare(msgs))
        assert all(a is b for a, b in zip(first, again, strict=True))
        longer = [*msgs, {"role": "user", "content": "c"}]
        more = _engine.decoded(_engine.prepare(longer))
        assert more[0] is first[0] and more[1] is first[1]
    assert msgspec.json.encode(more) == msgspec.json.encode(_engine.decoded(_engine.prepare(longer)))


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(strat.case())
def test_segment_and_repair_given_what_the_caller_has(c: tuple[str, list[cw.Message]]) -> None:
    provider, given = c
    # as fit plans them (lone surrogates replaced); the provider given, since a generated
    # OpenAI conversation may read as Anthropic's, whose rules refuse a second system
    msgs = _engine.decoded(_engine.prepare(given, provider))
    resolved = ref.resolve(msgs)
    flags = [ref.is_real_user(m) for m in msgs]
    assert ref.segment(msgs, flags, resolved[0]) == ref.segment(msgs)
    assert ref.segment(msgs, flags) == ref.segment(msgs)
    assert ref.tool_units(msgs, resolved[0], flags) == ref.tool_units(msgs, resolved[0])
    work, changes = ref.repair(msgs, provider, "stub", resolved)
    assert (work, changes) == ref.repair(msgs, provider, "stub")
    cost = ref.cost_model("fim")
    a = ref._state(msgs, cost, provider, True, "stub", resolved)
    b = ref._state(msgs, cost, provider, True, "stub")
    assert (a.work, a.costs, a.fates, a.stub_head) == (b.work, b.costs, b.fates, b.stub_head)


def plain_chat(turns: int) -> list[dict[str, Any]]:
    """A plain chat (Anthropic placement of the breadcrumb: a text block of the first
    kept user message), each user message a different length."""
    out: list[dict[str, Any]] = []
    for t in range(turns):
        out.append({"role": "user", "content": f"question {t} " + "x" * (t % 7) * 9})
        out.append({"role": "assistant", "content": f"answer {t} " + "y" * (t % 5) * 13})
    return out


@pytest.mark.parametrize("turns", [3, 40, 300])
@pytest.mark.parametrize("pct", [1, 10, 40, 80])
def test_breadcrumb_costs_counted_ahead_change_nothing(turns: int, pct: int, monkeypatch: pytest.MonkeyPatch) -> None:
    msgs = plain_chat(turns)
    total = cw.count_messages(msgs, "fim")
    budget = total * pct // 100
    calls: list[int] = []
    real = _engine.native.count_messages

    class Native:
        def __getattr__(self, name: str) -> Any:
            return getattr(real_native, name)

        @staticmethod
        def count_messages(payload: bytes, profile: str) -> Any:
            out = real(payload, profile)
            calls.append(len(out))
            return out

    real_native = _engine.native
    monkeypatch.setattr(_engine, "native", Native())
    fast = fit(msgs, budget, profile="fim")
    ahead = len(calls)
    monkeypatch.setattr(_BreadcrumbCosts, "ensure", lambda self, w: None)
    calls.clear()
    slow = fit(msgs, budget, profile="fim")
    assert plain(fast) == plain(slow)
    assert identity(msgs, fast.messages) == identity(msgs, slow.messages)
    if fast.report.dropped_turns > 8:
        # one native call per batch of turns (8, 16, 32, ...), not one per dropped turn
        assert ahead < len(calls) and ahead <= 2 + fast.report.dropped_turns.bit_length(), (ahead, len(calls))


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(strat.anthropic_agent(), st.sampled_from([5, 25, 50, 75, 100]), st.booleans())
def test_generated_fit_and_guard_equal_with_and_without_shortcuts(
    msgs: list[cw.Message], pct: int, as_dicts: bool
) -> None:
    fmt = None
    if as_dicts:
        try:
            msgs = [from_canonical(m, "anthropic") for m in msgs]  # type: ignore[misc]
            fmt = "anthropic"
        except cw.InvalidMessageError:
            pass
    try:
        total = cw.count_messages(msgs, format=fmt)
    except cw.InvalidMessageError:
        return
    budget = total * pct // 100
    fast = [outcome(lambda: fit(msgs, budget, format=fmt), msgs)]
    if budget:
        guard = cw.ContextGuard(resolve_budget(2 * budget, budget, floor=0, env={}))
        fast.append(outcome(lambda: guard.check(msgs, format=fmt), msgs))
    with reader(False), pytest.MonkeyPatch.context() as mp:
        mp.setattr(_BreadcrumbCosts, "ensure", lambda self, w: None)
        slow = [outcome(lambda: fit(msgs, budget, format=fmt), msgs)]
        if budget:
            slow.append(outcome(lambda: guard.check(msgs, format=fmt), msgs))
    assert fast == slow


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(strat.case())
def test_text_chars_is_the_sum_over_text_slots(c: tuple[str, list[cw.Message]]) -> None:
    # compact._text_chars walks the parts once instead of building the slot list
    from contextwindow.compact import _slot_text, _text_chars, _text_slots

    for m in c[1]:
        assert _text_chars(m) == sum(len(_slot_text(m, s)) for s in _text_slots(m))


def test_prepare_in_a_scope_reuses_a_list_only_while_it_holds_the_same_objects() -> None:
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    with _engine.reuse_conversions():
        first = _engine.prepare(msgs)
        assert _engine.prepare(msgs) is first  # the same list, the same dicts
        assert _engine.prepare(msgs, "openai") is not first  # another format: prepared anew
        msgs.append({"role": "user", "content": "c"})  # the list changed: prepared anew
        longer = _engine.prepare(msgs)
        assert longer is not first and len(longer.original) == 3
        msgs[2] = {"role": "user", "content": "d"}  # same length, another object
        replaced = _engine.prepare(msgs)
        assert replaced is not longer and replaced.canonical[2].content[0].text == "d"  # type: ignore[union-attr]
        assert replaced.canonical[0] is first.canonical[0]  # dicts still converted once
    assert _engine.prepare(msgs) is not replaced  # nothing is remembered after the scope


@contextlib.contextmanager
def no_scope() -> Iterator[None]:
    """``ContextGuard.check`` without ``reuse_conversions``: every step reads, resolves and
    segments its input afresh (what each shortcut of the scope must agree with)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_engine, "reuse_conversions", contextlib.nullcontext)
        yield


def guard_runs(msgs: list[Any], fmt: str | None, total: int, pcts: list[int]) -> list[Any]:
    """guard.check by every hint, with the default options and with small caps (rule 1,
    keep_recent, a pinned message), at several budgets."""
    out: list[Any] = []
    for pct in pcts:
        budget = total * pct // 100
        if budget <= 0:
            continue
        for hint in ("general", "planner_input", "step_dependency"):
            guard = cw.ContextGuard(resolve_budget(2 * budget, budget, floor=0, env={}))
            out.append(outcome(lambda g=guard, h=hint: g.check(msgs, h, format=fmt), msgs))
        small = cw.ContextGuard(
            resolve_budget(2 * budget, budget, floor=0, env={}),
            max_message_chars=200,
            keep_recent_results=1,
            policy=FitPolicy(pinned=(0,) if msgs else ()),
        )
        out.append(outcome(lambda g=small: g.check(msgs, format=fmt), msgs))
    return out


@pytest.mark.parametrize("path", need(FILES, "../shared/corpus"), ids=ids(FILES) or None)
def test_guard_equal_with_and_without_the_scope(path: Path) -> None:
    # the scope's shortcuts (a list read once, resolve and the segmentation once per
    # conversation, kept fates made once, decoded messages not checked again) change
    # nothing a guard call returns
    doc = load(path)
    fmt, msgs = doc["format"], doc["messages"]
    total = cw.count_messages(msgs, format=fmt)
    fast = guard_runs(msgs, fmt, total, [3, 30, 90])
    with no_scope():
        slow = guard_runs(msgs, fmt, total, [3, 30, 90])
    assert fast == slow


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(strat.case(), st.sampled_from([5, 25, 50, 100]), st.booleans())
def test_generated_guard_equal_with_and_without_the_scope(
    c: tuple[str, list[cw.Message]], pct: int, as_dicts: bool
) -> None:
    provider, msgs = c
    fmt: str | None = None
    if as_dicts:
        try:
            msgs = [from_canonical(m, provider) for m in msgs]  # type: ignore[misc]
            fmt = provider
        except cw.InvalidMessageError:
            pass
    try:
        total = cw.count_messages(msgs, format=fmt)
    except cw.InvalidMessageError:
        return
    fast = guard_runs(msgs, fmt, total, [pct])
    with no_scope():
        slow = guard_runs(msgs, fmt, total, [pct])
    assert fast == slow


def _tool_turns(n: int) -> list[dict[str, Any]]:
    """``n`` turns of a user message, a read_file call and its result (OpenAI dicts)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "s"}]
    for t in range(n):
        out.append({"role": "user", "content": f"task {t}"})
        call = {"id": f"c{t}", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        out.append({"role": "tool", "tool_call_id": f"c{t}", "content": "x" * 300})
    out.append({"role": "user", "content": "go on"})
    return out


def test_shaped_answers_once_per_conversation_and_only_for_the_same_shapes() -> None:
    msgs = _engine.decoded(_engine.prepare(_tool_turns(3)))
    calls: list[int] = []

    def resolve(m: list[cw.Message]) -> Any:
        calls.append(1)
        return ref.resolve(m)

    with _engine.reuse_conversions():
        first = _engine.shaped("r", msgs, _engine.call_shape, lambda: resolve(msgs))
        # a result's text changed (what clearing does): the same shape, the same answer
        cleared = list(msgs)
        result = cleared[3].content[0]
        cleared[3] = msgspec.structs.replace(
            cleared[3], content=[msgspec.structs.replace(result, content=[cw.TextPart(text="[cleared]")])]
        )
        assert _engine.shaped("r", cleared, _engine.call_shape, lambda: resolve(cleared)) is first
        assert first == ref.resolve(cleared) and len(calls) == 1
        # another call id: another shape, worked out afresh
        moved = list(cleared)
        moved[3] = msgspec.structs.replace(moved[3], content=[msgspec.structs.replace(result, call_id="zz")])
        again = _engine.shaped("r", moved, _engine.call_shape, lambda: resolve(moved))
        assert again == ref.resolve(moved) != first and len(calls) == 2
        # another length: afresh
        _engine.shaped("r", moved[:-1], _engine.call_shape, lambda: resolve(moved[:-1]))
        assert len(calls) == 3
        # a message that stops being a real user message changes the segmentation's shape
        seg = _engine.shaped("s", msgs, _engine.turn_shape, lambda: ref.segment(msgs))
        notice = list(msgs)
        notice[1] = msgspec.structs.replace(notice[1], content=[cw.TextPart(text="[Tool results] ok")])
        assert _engine.turn_shape(notice[1]) != _engine.turn_shape(msgs[1])
        assert _engine.shaped("s", notice, _engine.turn_shape, lambda: ref.segment(notice)) == ref.segment(notice)
        assert ref.segment(notice) != seg
    # outside a scope nothing is remembered
    _engine.shaped("r", msgs, _engine.call_shape, lambda: resolve(msgs))
    _engine.shaped("r", msgs, _engine.call_shape, lambda: resolve(msgs))
    assert len(calls) == 5


def test_read_leaves_the_list_prepared_and_read_in_the_scope() -> None:
    msgs = _tool_turns(2)
    with _engine.reuse_conversions():
        got = _engine.read(msgs, None, "fim")
        assert got.costs is not None  # the dict reader took it
        assert _engine.prepare(msgs) is got.prep  # the same list: not prepared again
        again = _engine.read(msgs, None, "fim")
        assert again.prep is got.prep and again.costs == got.costs
        assert all(a is b for a, b in zip(again.messages, got.messages, strict=True))
        assert again.messages is not got.messages  # a list of the caller's own
        msgs.append({"role": "assistant", "content": "ok"})  # the list changed: read anew
        assert _engine.read(msgs, None, "fim").prep is not got.prep


def test_decoded_messages_skip_the_key_checks_others_do_not() -> None:
    # messages decoded from JSON hold only str keys and JSON values: encoding them in the
    # scope skips the walk for odd keys; a message built by the caller is still walked
    clash = cw.Message(role="user", content=[cw.TextPart(text="a")], extra={1: "a", "1": "b"})
    with _engine.reuse_conversions():
        msgs = _engine.read(_tool_turns(1), None, "fim").messages
        assert _engine.encode_messages(msgs) == msgspec.json.encode(msgs)
        with pytest.raises(cw.InvalidMessageError, match="appears more than once"):
            _engine.encode_messages([*msgs, clash])
        assert _engine._carried_fault([*msgs, msgspec.structs.replace(msgs[0], extra={"k": b"x"})]) == len(msgs)


def test_guard_check_resolves_segments_and_reads_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # the brief's profile: 3 resolves, 2 segmentations and 2 preparations of the input per
    # check of an agent conversation whose first step clears results and whose history step
    # evicts; a step that only clears results changes no shape, so each is done once now
    msgs = _tool_turns(40)
    total = cw.count_messages(msgs)
    budget = total // 4
    guard = cw.ContextGuard(resolve_budget(2 * budget, budget, floor=0, env={}), max_total_share=0.3)
    calls: dict[str, int] = {"resolve": 0, "segment_turns": 0, "_prepare": 0}
    real_resolve, real_prepare, real_native = ref.resolve, _engine._prepare, _engine.native

    def resolve(m: Any) -> Any:
        calls["resolve"] += 1
        return real_resolve(m)

    def prepare(*a: Any) -> Any:
        calls["_prepare"] += 1
        return real_prepare(*a)

    class Native:
        def __getattr__(self, name: str) -> Any:
            return getattr(real_native, name)

        @staticmethod
        def segment_turns(payload: bytes) -> Any:
            calls["segment_turns"] += 1
            return real_native.segment_turns(payload)

    monkeypatch.setattr(ref, "resolve", resolve)
    monkeypatch.setattr(_engine, "_prepare", prepare)
    monkeypatch.setattr(_engine, "native", Native())
    r = guard.check(msgs)
    assert [e.step for e in r.events] == ["tool_output", "history"]  # cleared, then evicted
    # one preparation: the first step's output (a new list); the input is read by the
    # dict reader once
    assert calls == {"resolve": 1, "segment_turns": 1, "_prepare": 1}
    monkeypatch.undo()
    with no_scope():
        assert plain(guard.check(msgs)) == plain(r)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(strat.case())
def test_fit_plans_on_the_engines_repair_and_segmentation(c: tuple[str, list[cw.Message]]) -> None:
    # fit._plan asks the Rust engine for the pair repair and the segmentation of what it
    # repaired: they are _reference.repair's and _reference.segment's, item for item
    from contextwindow.fit import _SEG, _repaired

    provider, given = c
    prep = _engine.prepare(given, provider)
    msgs = _engine.decoded(prep)
    work, changes = _repaired(prep, msgs)
    assert (work, changes) == ref.repair(msgs, provider, "stub")
    repaired = [it.msg(msgs) for it in work]
    assert _SEG.decode(_engine.native.segment_turns(_engine._ENCODER.encode(repaired))) == ref.segment(repaired)


def test_fit_runs_on_copies_of_one_plan() -> None:
    # fit plans once; each run (with and without the breadcrumb, holding the newest
    # exchange back) works on its own copy of the state: the plan itself stays as made
    from contextwindow.fit import _fit_once, _fresh, _NativeCost, _plan

    msgs = [{"role": "system", "content": "s"}]
    for t in range(30):
        msgs += [
            {"role": "user", "content": f"task {t} " + "x " * 30},
            {"role": "assistant", "content": None, "tool_calls": [_call(t)]},
            {"role": "tool", "tool_call_id": f"c{t}", "content": "out " * 40},
            {"role": "assistant", "content": "ok"},
        ]
    msgs.append({"role": "user", "content": "now"})
    read = _engine.read(msgs, None, "fim")
    plan = _plan(read.prep, FitPolicy(), _NativeCost(read.prep, read.messages, "fim", read.costs), 200)
    before = (list(plan.st.work), list(plan.st.costs), [dict(f) for f in plan.st.fates], list(plan.st.keep))
    one = _fresh(plan, True)
    assert one.st is not plan.st and one.cls is plan.cls and one.st.breadcrumb
    assert not _fresh(plan, False).st.breadcrumb
    r, _ = _fit_once(read.prep, one, 200, 140, FitPolicy(), "priority_budget")
    assert r.report.dropped_messages > 0 and not all(one.st.keep)
    assert (plan.st.work, plan.st.costs, plan.st.fates, plan.st.keep) == before
    # and a second run on a fresh copy gives the same as the first
    again, _ = _fit_once(read.prep, _fresh(plan, True), 200, 140, FitPolicy(), "priority_budget")
    assert plain(again) == plain(r)


def _call(t: int) -> dict[str, Any]:
    return {"id": f"c{t}", "type": "function", "function": {"name": "read", "arguments": "{}"}}


def test_guard_runs_no_pair_repair_for_a_prefill_ending_in_whitespace() -> None:
    """``trailing_whitespace`` is no pair violation: the guard's check skips the repair that
    would change nothing (small20's note), and the check's output keeps the prefill."""
    from contextwindow import guard as g

    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "Sure: "}]
    prep = _engine.prepare(msgs, "anthropic")
    assert [v.code for v in cw.validate(msgs, "anthropic")] == ["trailing_whitespace"]
    assert g._pair_repair(prep, "conservative") is None
    out = cw.ContextGuard(resolve_budget(10_000, 100, floor=0, env={})).check(msgs, format="anthropic")
    assert out.messages == msgs
