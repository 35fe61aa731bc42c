"""Run every ``>>>`` example in the package's docstrings (they are part of the docs)."""

from __future__ import annotations

import doctest
import importlib
import re
from pathlib import Path
from typing import Any

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


ROOT = Path(__file__).resolve().parents[1]

#: Where the package and the Rust engine write a report's ``reason`` as a literal.
_REASON_LITERALS = [
    re.compile(r'\breason\s*=\s*"([a-z_]+)"'),  # reason="micro_compact", reason = "tool_pairs"
    re.compile(r'\bREASON_[A-Z]+\s*=\s*"([a-z_]+)"'),  # fit.py's REASON_FIT
    re.compile(r'\breasons\.add\("([a-z_]+)"\)'),  # budget_tool_results
    re.compile(r'"reason":\s*"([a-z_]+)"'),  # a guard event's
]


def _readme_reasons() -> set[str]:
    """The reasons the README's Report bullet lists: each written `name` (functions)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("* **Report.**")
    bullet = text[start : text.index("\n* ", start + 1)]
    listed = bullet[bullet.index("reason, ") : bullet.index("`None` when")]
    return set(re.findall(r"`([a-z_]+)`\s+\(", listed))


def _produced_reasons() -> set[str]:
    """Every reason the public functions give, each made by hand (``fim``: a message is
    4 + its characters / 4)."""
    import contextwindow as cw

    def call(i: str) -> dict[str, Any]:
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": i, "type": "function", "function": {"name": "read", "arguments": "{}"}}],
        }

    def result(i: str, n: int) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": i, "content": "x" * n}

    long = [
        {"role": "user", "content": "a " * 400},
        {"role": "assistant", "content": "b " * 400},
        {"role": "user", "content": "c " * 400},
        {"role": "assistant", "content": "d " * 400},
        {"role": "user", "content": "go"},
    ]
    tools = [{"role": "user", "content": "q"}]
    for k in range(8):
        tools += [call(f"c{k}"), result(f"c{k}", 4000)]
    tools.append({"role": "user", "content": "go"})
    broken = [{"role": "user", "content": "q"}, call("c"), {"role": "user", "content": "next"}]
    reports = [
        cw.trim_turns(long, 300, profile="fim").report,
        cw.trim_turn_count(long, 1).report,
        cw.trim_turns(broken, 10_000).report,
        cw.repair_tool_pairs(broken).report,
        cw.fit(long, 300).report,
        cw.recover_from_overflow(long, budget=10_000).report,
        cw.budget_tool_results(tools, 8_000, profile="fim").report,
        cw.budget_tool_results(
            [{"role": "user", "content": "z" * 600}, {"role": "assistant", "content": "ok"}, *long[-1:]],
            1_000_000,
            max_message_chars=100,
        ).report,
        cw.micro_compact(tools, keep_recent=1).report,
        cw.prune_middle(long + long[:-1] + [{"role": "user", "content": "end"}], 500, profile="fim").report,
    ]
    return {r.reason for r in reports if r.reason is not None}


def test_readme_lists_every_report_reason() -> None:
    # a new user's finding: the README listed token_budget, turn_limit and tool_pairs
    # while fit, the compaction functions and recover_from_overflow give six more
    listed = _readme_reasons()
    assert listed == _produced_reasons()
    assert len(listed) == 9
    written = set()
    for path in sorted((ROOT / "python" / "contextwindow").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        for pattern in _REASON_LITERALS:
            written.update(pattern.findall(text))
    # the Rust trims: st.finish(.., Some("token_budget"), ..), reason.or(Some("tool_pairs"))
    trim = (ROOT / "rust/contextwindow-core/src/trim.rs").read_text(encoding="utf-8")
    written.update(re.findall(r'\.finish\([^;]*?Some\("([a-z_]+)"\)', trim))
    written.update(re.findall(r'reason\.or\(Some\("([a-z_]+)"\)\)', trim))
    assert {"token_budget", "turn_limit", "tool_pairs", "priority_budget", "micro_compact"} <= written
    assert written <= listed, written - listed


def test_the_package_namespace_holds_its_api_and_submodules_only() -> None:
    """fresh32 #12: ``dir(contextwindow)`` listed ``annotations``, the ``__future__``
    import of ``__init__.py``. Every public name is in ``__all__`` or is a submodule."""
    import types

    import contextwindow

    extra = {
        n
        for n in dir(contextwindow)
        if not n.startswith("_")
        and n not in contextwindow.__all__
        and not isinstance(getattr(contextwindow, n), types.ModuleType)
    }
    assert extra == set()
