"""Errors and calibrators cross process boundaries (fresh20a F2).

A ``ProcessPoolExecutor`` pickles a worker's exception to send it to the parent: an error
class that could not be unpickled (``TokenCounterError``'s keyword-only ``counter``,
``ReserveError``'s ``window`` and ``source``) broke the pool (``BrokenProcessPool``) and
lost the message. A ``Calibrator`` (and an ``Estimator`` holding one) holds a lock, so it
could be neither pickled nor deep-copied.
"""

from __future__ import annotations

import copy
import pickle
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

import contextwindow as cw
from contextwindow.budget import ReserveError

# (error, str(error), attributes), each message written out by hand from the class's format
ERRORS: list[tuple[BaseException, str, dict[str, Any]]] = [
    (cw.ContextWindowError("plain"), "plain", {}),
    (
        cw.InvalidMessageError("must be a string", index=3, field="role", offset=17),
        "message 3, field role: must be a string",
        {"index": 3, "field": "role", "reason": "must be a string", "offset": 17},
    ),
    (
        cw.InvalidRequestError("invalid request body at byte 7: expected value", offset=7),
        "invalid request body at byte 7: expected value",
        {"offset": 7},
    ),
    (
        cw.ContextOverflowError("too big", tokens=130_000, capacity=111_616),
        "too big",
        {"tokens": 130_000, "capacity": 111_616, "over": 18_384},
    ),
    (
        cw.TokenCounterError("returned -1, expected an int >= 0", counter="tokenizer <lambda>", index=0),
        "tokenizer <lambda> on message 0: returned -1, expected an int >= 0",
        {"counter": "tokenizer <lambda>", "index": 0, "reason": "returned -1, expected an int >= 0"},
    ),
    (
        cw.TokenCounterError("raised", counter="token_counter f"),
        "token_counter f: raised",
        {"counter": "token_counter f", "index": None, "reason": "raised"},
    ),
    (
        ReserveError(8_000, 8_000, "argument"),
        "output reserve max_output_tokens=8,000 is as large as the context window 8,000 (no token left for the input)",
        {"reserve": 8_000, "window": 8_000, "source": "argument"},
    ),
    (
        ReserveError(100, 10, "env", " (LLM_MAX_OUTPUT_TOKENS)"),
        "output reserve max_output_tokens=100 is larger than the context window 10 (LLM_MAX_OUTPUT_TOKENS)",
        {"reserve": 100, "window": 10, "source": "env"},
    ),
]


@pytest.mark.parametrize(("err", "text", "attrs"), ERRORS, ids=lambda v: type(v).__name__)
@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_every_error_round_trips_through_pickle(
    err: BaseException, text: str, attrs: dict[str, Any], protocol: int
) -> None:
    assert str(err) == text
    back = pickle.loads(pickle.dumps(err, protocol))
    assert type(back) is type(err)
    assert str(back) == text and back.args == err.args == (text,)
    assert {k: getattr(back, k) for k in attrs} == attrs
    for dup in (copy.copy(err), copy.deepcopy(err)):
        assert type(dup) is type(err) and str(dup) == text
        assert {k: getattr(dup, k) for k in attrs} == attrs


def test_a_subclass_and_a_note_survive() -> None:
    class Mine(cw.TokenCounterError):
        pass

    err = cw.TokenCounterError("boom", counter="tokenizer t", index=2)
    err.add_note("while counting request 7")
    back = pickle.loads(pickle.dumps(err))
    assert back.__notes__ == ["while counting request 7"]
    dup = copy.deepcopy(Mine("boom", counter="tokenizer t"))
    assert type(dup) is Mine and str(dup) == "tokenizer t: boom"


def _bad_tokenizer_job(_: int) -> int:
    return cw.Estimator("cl100k", tokenizer=lambda s: -1).count_messages([{"role": "user", "content": "x"}])


def _bad_reserve_job(_: int) -> object:
    return cw.resolve_budget(context_window=100, max_output_tokens=100)


def test_a_worker_error_reaches_the_parent_typed() -> None:
    """The finding's input: both jobs broke the pool (BrokenProcessPool) before."""
    with ProcessPoolExecutor(1) as ex:
        with pytest.raises(cw.TokenCounterError) as got:
            ex.submit(_bad_tokenizer_job, 1).result()
        assert got.value.counter == "tokenizer <lambda>" and got.value.index == 0
        assert str(got.value).startswith("tokenizer <lambda> on message 0: returned -1")
        with pytest.raises(ReserveError) as bad:
            ex.submit(_bad_reserve_job, 1).result()
        assert (bad.value.reserve, bad.value.window, bad.value.source) == (100, 100, "argument")
        assert str(bad.value).startswith("output reserve max_output_tokens=100 is as large as the context window 100")
        assert ex.submit(abs, -3).result() == 3  # the pool still works


def test_a_calibrator_pickles_and_copies_with_its_state() -> None:
    cal = cw.Calibrator(alpha=0.5, min_factor=0.5, max_factor=3.0)
    cal.observe(100, 120)
    cal.observe(100, 100)  # 1.2 + 0.5 * (1.0 - 1.2) = 1.1
    for back in (pickle.loads(pickle.dumps(cal)), copy.deepcopy(cal), copy.copy(cal)):
        assert (back.alpha, back.min_factor, back.max_factor) == (0.5, 0.5, 3.0)
        assert (back.factor, back.observations) == (pytest.approx(1.1), 2)
        assert back.scale(100) == 110
        # its own state and lock: observing the copy leaves the original alone
        assert back.observe(100, 300) == pytest.approx(2.05)  # 1.1 + 0.5 * (3.0 - 1.1)
        assert cal.observations == 2 and cal.factor == pytest.approx(1.1)
    fresh = pickle.loads(pickle.dumps(cw.Calibrator()))
    assert (fresh.factor, fresh.observations) == (1.0, 0)


def test_an_estimator_with_a_calibrator_pickles() -> None:
    cal = cw.Calibrator(alpha=1.0)
    cal.observe(100, 150)
    est = cw.Estimator("cl100k", calibrator=cal)
    msgs = [{"role": "user", "content": "hello there"}]
    back = pickle.loads(pickle.dumps(est))
    assert back.profile == "cl100k" and back.calibrator is not None and back.calibrator.factor == 1.5
    assert back.count_messages(msgs) == est.count_messages(msgs)
    assert copy.deepcopy(est).count_messages(msgs) == est.count_messages(msgs)
