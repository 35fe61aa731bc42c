"""The engine releases the GIL; concurrent calls on shared inputs give the single-thread
results (no timing is asserted: speed lives in benchmarks)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import msgspec
import pytest

import contextwindow as cw

from shared_data import corpus_files, load


def test_eight_threads_agree_with_one() -> None:
    files = corpus_files()[:12]
    if not files:
        pytest.skip("../shared/corpus not found beside the repo")
    convs = [(load(f)["messages"], load(f)["format"]) for f in files]

    def work(i: int) -> bytes:
        msgs, fmt = convs[i % len(convs)]
        n = cw.count_messages(msgs, format=fmt)
        r = cw.trim_turns(msgs, n // 4, format=fmt)
        return msgspec.json.encode([n, r.report, r.messages])

    expected = [work(i) for i in range(len(convs) * 4)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        got = list(pool.map(work, range(len(convs) * 4), timeout=120))
    assert got == expected
