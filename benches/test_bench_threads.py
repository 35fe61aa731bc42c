"""Throughput of count_messages and trim_turns from 1, 2, 4 and 8 threads
(ThreadPoolExecutor) on shared inputs. The Rust engine runs with the GIL released, so
the native part can scale with cores; the Python part (checking dicts, converting them,
building the output) holds the GIL. estimate_tokens on 1 MB, almost all native, is the
control. The table reports calls per second and the speedup over one thread."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import contextwindow as cw

THREADS = [1, 2, 4, 8]
#: trim_turns calls per round: the agent conversation, trimmed to this many budgets.
TRIM_BUDGETS = [4_000, 8_000, 16_000, 32_000, 48_000, 64_000, 96_000, 128_000]


@pytest.fixture(params=THREADS, ids=[f"{n}-threads" for n in THREADS])
def pool(request: pytest.FixtureRequest) -> Iterator[tuple[int, ThreadPoolExecutor]]:
    """``(threads, executor)``, its workers started outside the timing."""
    n = request.param
    with ThreadPoolExecutor(max_workers=n) as ex:
        list(ex.map(lambda _: None, range(n)))
        yield n, ex


def test_threads_count(
    pool: tuple[int, ThreadPoolExecutor], corpus: list[tuple[list[dict[str, Any]], str]], measure: Any
) -> None:
    threads, ex = pool
    convs = [msgs for msgs, _ in corpus] * 2

    def fn() -> int:
        return sum(ex.map(cw.count_messages, convs))

    group = f"threads: count_messages, {len(convs)} corpus conversations per round"
    assert measure(fn, group=group, impl="contextwindow", threads=threads, calls=len(convs)) > 0


def test_threads_trim(pool: tuple[int, ThreadPoolExecutor], agent: list[dict[str, Any]], measure: Any) -> None:
    threads, ex = pool

    def one(budget: int) -> int:
        return len(cw.trim_turns(agent, budget).messages)

    def fn() -> int:
        return sum(ex.map(one, TRIM_BUDGETS))

    group = f"threads: trim_turns, the {len(agent):,}-message conversation x {len(TRIM_BUDGETS)} budgets per round"
    assert measure(fn, group=group, impl="contextwindow", threads=threads, calls=len(TRIM_BUDGETS)) > 0


def test_threads_estimate(pool: tuple[int, ThreadPoolExecutor], corpus_text: str, measure: Any) -> None:
    threads, ex = pool
    calls = 8

    def fn() -> int:
        return sum(ex.map(cw.estimate_tokens, [corpus_text] * calls))

    group = f"threads: estimate_tokens, 1 MB of corpus text x {calls} per round"
    assert measure(fn, group=group, impl="contextwindow", threads=threads, calls=calls) > 0
