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
