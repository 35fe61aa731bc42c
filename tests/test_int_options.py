"""Integer options take any integer :func:`operator.index` takes, never a bool
(fresh16a F3: ``numpy.int64(100)`` was refused as a budget with "must be a non-negative
int, got np.int64(100)" while the Calibrator and token counters took it).

numpy is not a dependency: :class:`Index` stands in for it (a class with ``__index__``),
and the numpy cases run only where numpy is installed. Every value read comes back a
plain ``int`` (a report must encode, the engine counts in u64).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

import contextwindow as cw
from contextwindow._jsontext import as_int
from contextwindow.budget import checked_budget

M = [{"role": "user", "content": "hi"}]
BODY = b'{"messages":[{"role":"user","content":"hi"}]}'
# six messages of alternating roles, for the options that need some history
LONG = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " * 20} for i in range(6)]


class Index:
    """An integer that is not an ``int``: what ``numpy.int64`` is to Python."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value

    def __repr__(self) -> str:
        return f"Index({self.value})"


class Size(enum.IntEnum):
    HUNDRED = 100
    THOUSAND = 1000
    TEN_THOUSAND = 10000


def test_as_int_reads_any_index_but_a_bool() -> None:
    assert as_int(5) == 5 and type(as_int(Index(7))) is int and as_int(Index(7)) == 7
    assert as_int(Size.HUNDRED) == 100 and type(as_int(Size.HUNDRED)) is int
    for bad in (True, False, 5.0, "5", None, [5], b"5"):
        assert as_int(bad) is None, bad


def _entries(make: Callable[[int], Any]) -> list[tuple[str, Callable[[], Any]]]:
    """Every entry that reads an int option, each given ``make(100)`` (``make(1000)``,
    ``make(10000)`` for a window) where it takes one."""
    n, big, huge = make(100), make(1000), make(10000)
    policy = cw.FitPolicy(recent_turns=n, chatter_tokens=n, pinned=(Index(0),), priorities={Index(1): Index(2)})
    return [
        ("fit_request", lambda: cw.fit_request(BODY, budget=n, report=True)[1].budget),
        ("trim_turns", lambda: cw.trim_turns(M, budget=n).report.budget),
        ("trim_turn_count", lambda: len(cw.trim_turn_count(LONG, n).messages)),
        ("fit", lambda: cw.fit(M, n).report.budget),
        ("fit policy", lambda: cw.fit(LONG, n, policy=policy).report.budget),
        ("recover_from_overflow", lambda: cw.recover_from_overflow(LONG, n, budget=big).target),
        ("count_messages limit", lambda: cw.count_messages(M, limit=n)),
        ("Estimator limit", lambda: cw.Estimator("fim").count_messages(M, limit=n)),
        ("token_breakdown top", lambda: len(cw.token_breakdown(LONG, top=n).largest)),
        ("prune_middle", lambda: len(cw.prune_middle(LONG, n, keep_recent=n).messages)),
        ("micro_compact", lambda: len(cw.micro_compact(LONG, keep_recent=n, pinned=[Index(0)]).messages)),
        ("resolve_budget", lambda: cw.resolve_budget(context_window=big, max_output_tokens=n, env={}).usable),
        ("check_capacity", lambda: cw.check_capacity(n, big, max_output_tokens=n)),
        ("Calibrator.scale", lambda: cw.Calibrator().scale(n)),
        ("Calibrator.observe", lambda: cw.Calibrator().observe(n, n)),
        (
            "ContextGuard",
            lambda: cw.ContextGuard(
                context_window=huge,
                max_output_tokens=n,
                max_message_chars=n,
                keep_recent_results=n,
                policy=policy,
            ).check(LONG),
        ),
    ]


# By hand: budgets 100 fit "hi" (4 tokens) whole, so each report's budget is 100;
# trim_turn_count(LONG, 100) and prune_middle at 100 tokens with 100 recent keep all six;
# token_breakdown lists all six; micro_compact changes nothing of six plain messages;
# recover_from_overflow of LONG with 100 tokens reported and a budget of 1000 gets the
# same target as with plain ints; resolve_budget(1000, 100) leaves 900; check_capacity(100,
# 1000, 100) leaves 800; scale(100) at factor 1.0 is 100; observe(100, 100) is 1.0.
@pytest.mark.parametrize("make", [Index, Size], ids=["__index__", "IntEnum"])
def test_every_int_option_takes_an_integer_of_another_type(make: Callable[[int], Any]) -> None:
    want = {name: entry() for name, entry in _entries(int)}
    assert want["fit_request"] == want["trim_turns"] == want["fit"] == 100
    assert want["trim_turn_count"] == 6 and want["token_breakdown top"] == 6
    assert want["resolve_budget"] == 900 and want["check_capacity"] == 800
    assert want["Calibrator.scale"] == 100 and want["Calibrator.observe"] == 1.0
    for name, entry in _entries(make):
        got = entry()
        if name == "ContextGuard":
            msgspec.json.encode(got)  # every number in it a plain int
            fields = ("messages", "tokens_before", "tokens_after", "budget", "fits")
            assert [getattr(got, f) for f in fields] == [getattr(want[name], f) for f in fields]
            continue
        assert got == want[name], name
        assert type(got) is type(want[name]), name


def test_the_values_read_are_plain_ints() -> None:
    n = Index(100)
    report = cw.fit(M, n).report
    assert type(report.budget) is int
    msgspec.json.encode(report)  # a numpy int in a report would not encode
    guard = cw.ContextGuard(context_window=Index(8000), max_output_tokens=Index(1000), keep_recent_results=n)
    assert type(guard.keep_recent_results) is int and type(guard.budget.usable) is int
    guard.record_usage(Index(5), Index(6))
    assert (guard.stats.prompt_tokens, guard.stats.completion_tokens) == (5, 6)
    assert type(guard.stats.prompt_tokens) is int
    pinned = cw.FitPolicy(recent_turns=Index(1), pinned=(Index(0),), priorities={Index(1): Index(2)})
    checked = cw.ContextGuard(context_window=8000, max_output_tokens=1000, policy=pinned).policy
    assert checked.pinned == (0,) and type(checked.pinned[0]) is int
    assert checked.priorities == {1: 2} and all(
        type(k) is int and type(v) is int for k, v in checked.priorities.items()
    )
    assert type(checked.recent_turns) is int
    plain = cw.FitPolicy(pinned=(0,))
    assert cw.ContextGuard(context_window=8000, max_output_tokens=1000, policy=plain).policy is plain
    # a hand-built Budget whose numbers are integers of another type: read as plain ints
    b = cw.resolve_budget(context_window=1000, max_output_tokens=200, env={})
    odd = msgspec.structs.replace(b, usable=Index(b.usable), capacity=Index(b.capacity))
    assert checked_budget(odd) == b and type(checked_budget(odd).usable) is int
    assert checked_budget(b) is b
    assert cw.fit(M, odd).report.budget == 800
    # a models= table whose numbers are integers of another type
    models = {"m": {"context_window": Index(1000), "max_output_tokens": Index(10)}}
    assert cw.resolve_budget(model="m", models=models, env={}).usable == 990


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: cw.fit(M, True), "budget must be a non-negative int or have an int 'usable', got True"),
        (lambda: cw.fit(M, 100.0), "budget must be a non-negative int or have an int 'usable', got 100.0"),
        (lambda: cw.fit_request(BODY, budget=Index(-1)), "budget must be a non-negative int, got Index(-1)"),
        (
            lambda: cw.trim_turns(M, budget=False),
            "budget must be a non-negative int or have an int 'usable', got False",
        ),
        (lambda: cw.count_messages(M, limit=Index(-1)), "limit must be None or a non-negative int, got Index(-1)"),
        (lambda: cw.token_breakdown(M, top="3"), "top must be an int >= 0, got '3'"),
        (lambda: cw.token_breakdown(M, top=True), "top must be an int >= 0, got True"),
        (lambda: cw.token_breakdown(M, top=Index(-1)), "top must be an int >= 0, got -1"),
        (lambda: cw.fit(M, 10, policy=cw.FitPolicy(recent_turns=Index(-1))), "recent_turns must be an int >= 0"),
        (lambda: cw.fit(M, 10, policy=cw.FitPolicy(pinned=(Index(3),))), "pinned index 3 is not a message index"),
    ],
)
def test_a_bool_a_float_or_a_negative_integer_is_still_a_value_error(call: Callable[[], Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        call()
    assert str(info.value).startswith(message)


def test_numpy_integers_where_numpy_is_installed() -> None:
    np = pytest.importorskip("numpy")
    # the finding's calls, word for word
    assert cw.fit_request(BODY, budget=np.int64(100)) == BODY
    assert cw.trim_turns(M, budget=np.int64(100)).report.budget == 100
    assert cw.fit(M, np.int64(100)).report.budget == 100
    assert cw.count_messages(M, limit=np.int64(100)) == 5  # "hi": 1 + 4 per message
    assert cw.Calibrator().scale(np.int64(100)) == 100
    want = dict(_entries(int))
    for name, entry in _entries(np.int64):
        got = entry()  # no error
        if name != "ContextGuard":
            assert got == want[name]() and type(got) is type(want[name]()), name
    with pytest.raises(ValueError, match=r"got np\.float64\(100\.0\)"):
        cw.fit(M, np.float64(100))


class Broken:
    """An integer whose ``__index__`` raises (a caller's bug, or a value that is not an
    integer after all): ``error`` is what it raises."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __index__(self) -> int:
        raise self.error

    def __repr__(self) -> str:
        return "Broken()"


@pytest.mark.parametrize(
    "error",
    [RuntimeError("boom"), ValueError("not an integer"), OverflowError("too big"), TypeError("no")],
    ids=["RuntimeError", "ValueError", "OverflowError", "TypeError"],
)
def test_an_integer_whose_index_raises_is_refused_as_a_bad_int(error: BaseException) -> None:
    """struct18 #4: ``__index__`` raising anything but ``TypeError`` went out of every
    entry as the caller's own exception (a ``RuntimeError`` from ``fit``), where any
    other bad int is a ``ValueError`` (a ``TypeError`` for an item of a collection)
    naming the option. Now the same refusal as for a float or a string, chained from the
    caller's exception, so its traceback is kept."""
    for name, entry in _entries(lambda n: Broken(error)):
        with pytest.raises((ValueError, TypeError)) as info:
            entry()
        assert info.value is not error, name
        assert info.value.__cause__ is error, name
        assert "Broken" in str(info.value), name
    with pytest.raises(ValueError) as info:
        cw.fit(M, Broken(error))
    assert str(info.value) == "budget must be a non-negative int or have an int 'usable', got Broken()"
    assert info.value.__cause__ is error
    with pytest.raises(TypeError) as info:
        cw.fit(M, 10, policy=cw.FitPolicy(pinned=(Broken(error),)))
    assert str(info.value) == "pinned must hold message indices (int), got Broken"
    assert info.value.__cause__ is error
    # a models= table: msgspec names the field the number was read for
    with pytest.raises(TypeError) as info:
        cw.resolve_budget(model="m", models={"m": {"context_window": Broken(error), "max_output_tokens": 10}}, env={})
    assert str(info.value) == "models['m']: Expected `int`, got `Broken` - at `$.context_window`"
    assert info.value.__cause__ is error


@pytest.mark.parametrize("error", [KeyError("boom"), RuntimeError("x")], ids=["KeyError", "RuntimeError"])
def test_a_usable_that_raises_is_refused_as_a_bad_usable(error: BaseException) -> None:
    """fresh44 #5: a budget object whose ``usable`` property raises sent that exception
    out of ``fit``, ``prune_middle`` and ``recover_from_overflow`` as it came; now the
    refusal of a ``usable`` that is not an int, chained from it. A ``usable`` that raises
    AttributeError reads as no ``usable`` at all, as ``hasattr`` reads it."""

    class Raising:
        @property
        def usable(self) -> int:
            raise error

    for entry in (
        lambda: cw.fit(M, Raising()),
        lambda: cw.prune_middle(M, Raising()),
        lambda: cw.recover_from_overflow(M, budget=Raising()),
    ):
        with pytest.raises(ValueError) as info:
            entry()
        assert str(info.value) == f"budget.usable must be a non-negative int, could not read it: {error!r}"
        assert info.value.__cause__ is error
    # the guard needs a whole Budget: refused for its type, the property never read
    with pytest.raises(TypeError, match=r"^budget must be a Budget from resolve_budget, got Raising \(an object"):
        cw.ContextGuard(Raising())  # type: ignore[arg-type]

    class Missing:
        @property
        def usable(self) -> int:
            raise AttributeError("usable")

        def __repr__(self) -> str:
            return "Missing()"

    with pytest.raises(
        ValueError, match=r"^budget must be a non-negative int or have an int 'usable', got Missing\(\)$"
    ):
        cw.fit(M, Missing())


def test_an_index_returning_a_non_int_is_refused_chained() -> None:
    """``operator.index`` refuses an ``__index__`` that returns a str: that TypeError is
    the cause; a float (no ``__index__``) is refused with no cause, as before."""

    class Text:
        def __index__(self) -> Any:
            return "5"

    with pytest.raises(ValueError) as info:
        cw.trim_turns(M, budget=Text())
    assert str(info.value).startswith("budget must be a non-negative int or have an int 'usable', got ")
    assert isinstance(info.value.__cause__, TypeError)
    assert "__index__ returned non-int" in str(info.value.__cause__)
    with pytest.raises(ValueError) as info:
        cw.trim_turns(M, budget=5.0)
    assert info.value.__cause__ is None


def test_an_interrupt_in_index_is_not_swallowed() -> None:
    """``KeyboardInterrupt`` (a ``BaseException``, not an ``Exception``) goes out as it is."""
    stop = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt) as info:
        cw.trim_turns(M, budget=Broken(stop))
    assert info.value is stop
