"""Every case of ../shared/cases: inputs that broke peer libraries, with the outcome we owe.

The expectations are the case files' own (written by hand by whoever filed each case).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

import contextwindow as cw
from contextwindow.messages import MISSING_RESULT

from shared_data import case_files, ids, load, need


def text_of(m: dict[str, Any]) -> str:
    c = m.get("content")
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return "\n".join(p.get("text", "") for p in c if isinstance(p, dict) and p.get("type") == "text")
    return ""


def inserted(m: dict[str, Any]) -> bool:
    return text_of(m) in (cw.BREADCRUMB, MISSING_RESULT)


def run_case(case: dict[str, Any]) -> tuple[Any, Any]:
    fn, args = case["call"]["fn"], dict(case["call"]["args"])
    msgs = case["messages"]
    fmt = case["format"]
    if fn == "trim_turns":
        return cw.trim_turns(msgs, args.pop("budget"), format=fmt, **args), None
    if fn == "repair_tool_pairs":
        return cw.repair_tool_pairs(msgs, format=fmt, **args), None
    if fn == "count_messages":
        with_tools = args.pop("with_tools", False)
        n = cw.count_messages(msgs, format=fmt, tools=case.get("tools") if with_tools else None, **args)
        return None, n
    if fn == "estimate_tokens":
        return None, cw.estimate_tokens(**args)
    raise AssertionError(f"unknown fn {fn}")


@pytest.mark.parametrize("path", need(case_files(), "../shared/cases"), ids=ids(case_files()) or None)
def test_case(path: Path) -> None:
    case = load(path)
    before = copy.deepcopy(case["messages"])
    result, number = run_case(case)
    exp = case["expect"]
    assert case["messages"] == before, "input was mutated"
    profile = case["call"]["args"].get("profile", "conservative")
    if result is not None:
        out = result.messages
        originals = case["messages"]
        from_input = [m for m in out if not inserted(m)]
        if "validate" in exp:
            assert cw.validate(out, exp["validate"]) == []
        if exp.get("unchanged"):
            assert out == originals
        if exp.get("identity"):
            assert all(a is b for a, b in zip(out, originals, strict=True)) and len(out) == len(originals)
        if "fits" in exp:
            assert result.report.fits is exp["fits"]
        if exp.get("non_empty"):
            assert out
        for key in ("first_kept", "first_message"):
            if key in exp:
                first = from_input[0]
                assert first["role"] == exp[key]["role"]
                assert text_of(first).startswith(exp[key]["content_startswith"])
        if "kept_contents" in exp:
            assert [text_of(m) for m in out] == exp["kept_contents"]
        for s in exp.get("kept_contents_include", []):
            assert any(s in text_of(m) for m in out), s
        if "kept_count" in exp:
            assert len(from_input) == exp["kept_count"]
        if "kept_roles" in exp:
            assert [m["role"] for m in from_input] == exp["kept_roles"]
        if "last_user_text" in exp:
            users = [m for m in out if m["role"] == "user" and not inserted(m)]
            assert text_of(users[-1]) == exp["last_user_text"]
        if "max_tokens" in exp:
            assert cw.count_messages(out, profile=profile) <= exp["max_tokens"]
        if "min_tokens" in exp:
            assert cw.count_messages(out, profile=profile) >= exp["min_tokens"]
    if number is not None:
        if "min" in exp:
            assert number >= exp["min"]
        if "max" in exp:
            assert number <= exp["max"]
    if "more_than_without_tools_by" in exp:
        without = cw.count_messages(case["messages"], profile=profile)
        with_tools = cw.count_messages(case["messages"], profile=profile, tools=case["tools"])
        assert with_tools - without >= exp["more_than_without_tools_by"]
