"""``tools/bench_table.py``'s footer: the machine line under the README's benchmark table."""

from __future__ import annotations

import doctest
import importlib.util
import pathlib
from types import ModuleType
from typing import Any

import pytest

PATH = pathlib.Path(__file__).parents[1] / "tools" / "bench_table.py"


@pytest.fixture(scope="module")
def bench_table() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_table", PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docstring_examples(bench_table: ModuleType) -> None:
    result = doctest.testmod(bench_table)
    assert result.attempted >= 2 and result.failed == 0


def test_the_machine_line_says_which_instruction_set_the_estimator_ran(bench_table: ModuleType) -> None:
    # the same code measured 540 MB/s of corpus text on a CPU with AVX2 and would take its
    # SSE2 paths on one without: the footer says which (BMI2 missing is enough for SSE2)
    data: dict[str, Any] = {
        "machine_info": {
            "cpu": {"brand_raw": "Intel(R) Xeon(R) Processor", "family": 6, "model": 106, "flags": ["avx2", "bmi1"]},
            "python_version": "3.11.7",
            "system": "Linux",
        },
        "commit_info": {"id": "0123456789abcdef"},
    }
    line = bench_table.machine(data, (0.5, 0.4, 0.3))
    assert "(Intel(R) Xeon(R) Processor, family 6 model 106, estimator on SSE2)" in line
    assert "commit 0123456789;" in line and "load average before the run 0.50 (1 min), 0.30 (15 min)" in line
    data["machine_info"]["cpu"]["flags"] = ["avx2", "bmi1", "bmi2", "abm", "popcnt", "sse2"]
    assert "family 6 model 106, estimator on AVX2)" in bench_table.machine(data, None)


def test_langchain_rows_give_the_ratio_over_fim_too(bench_table: ModuleType) -> None:
    # LangChain counts characters / 4: its rows give the speedup over the default profile
    # and over `fim` (the same kind of counter); tiktoken's rows only the first
    def row(impl: str, profile: str | None, median: float) -> dict[str, Any]:
        info = {"impl": impl, "messages": 1000, "trim": True, **({"profile": profile} if profile else {})}
        return {"group": "trim_turns: x", "stats": {"median": median}, "extra_info": info}

    data = {
        "benchmarks": [
            row("contextwindow", "conservative", 0.002),
            row("contextwindow", "fim", 0.0005),
            row("langchain", None, 0.010),
            row("tiktoken", None, 0.030),
        ]
    }
    lines = bench_table.table(data).splitlines()
    assert lines[2] == "| trim_turns: x | contextwindow (`conservative`) | 2.00 ms | 2.00 ms per trim |  |"
    assert lines[3] == "|  | contextwindow (`fim`) | 500.0 µs | 0.50 ms per trim |  |"
    # 10 / 2 = 5.0x, 10 / 0.5 = 20.0x
    assert lines[4] == "|  | langchain | 10.00 ms | 10.00 ms per trim | 5.0x (`fim`: 20.0x) |"
    assert lines[5] == "|  | tiktoken | 30.00 ms | 30.00 ms per trim | 15.0x |"


def test_every_bench_group_has_a_place_in_the_table(bench_table: ModuleType) -> None:
    """A group whose name starts with no known scenario made ``table`` raise (the new
    ``prune_middle`` benches); each gets its rows, after the ``fit`` ones."""

    def row(group: str, median: float, **info: Any) -> dict[str, Any]:
        return {"group": group, "stats": {"median": median}, "extra_info": {"impl": "contextwindow", **info}}

    data = {
        "benchmarks": [
            row("prune_middle: parallel calls, 2,000 messages", 0.05, messages=2004, trim=True),
            row("fit / ContextGuard.check: x", 0.015, trim=True),
        ]
    }
    lines = bench_table.table(data).splitlines()
    assert lines[2].startswith("| fit / ContextGuard.check: x | contextwindow | 15.00 ms")
    assert lines[3].startswith("| prune_middle: parallel calls, 2,000 messages | contextwindow | 50.00 ms")
    assert lines[3].endswith("| 50.00 ms per trim |  |")
