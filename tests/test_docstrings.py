"""Run every ``>>>`` example in the package's docstrings (they are part of the docs)."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

MODULES = [
    "contextwindow",
    "contextwindow.accuracy",
    "contextwindow.adapters",
    "contextwindow.calibrate",
    "contextwindow.compact",
    "contextwindow.cli",
    "contextwindow.errors",
    "contextwindow.estimate",
    "contextwindow.estimator",
    "contextwindow.fit",
    "contextwindow.guard",
    "contextwindow.gateway",
    "contextwindow.io",
    "contextwindow.messages",
    "contextwindow.pairs",
    "contextwindow.report",
    "contextwindow.trim",
    "contextwindow.turns",
    "contextwindow._engine",
    "contextwindow._jsontext",
    "contextwindow._image",
    "contextwindow.budget",
    "contextwindow.breakdown",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0 or name in ("contextwindow.cli",)


def test_readme_examples() -> None:
    readme = Path(__file__).resolve().parents[1] / "README.md"
    result = doctest.testfile(str(readme), module_relative=False, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 10
