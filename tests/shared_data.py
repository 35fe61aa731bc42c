"""Where ../shared lives, and corpus/case loaders that skip cleanly when it is absent."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CONTEXTWINDOW_SHARED", ROOT.parent / "shared"))
CORPUS = SHARED / "corpus"
CASES = SHARED / "cases"


def corpus_files() -> list[Path]:
    """Every conversation file of ../shared/corpus (empty when absent)."""
    if not CORPUS.is_dir():
        return []
    return sorted(p for p in CORPUS.rglob("*.json"))


def case_files() -> list[Path]:
    """Every case file of ../shared/cases (empty when absent)."""
    if not CASES.is_dir():
        return []
    return sorted(CASES.glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def ids(paths: list[Path]) -> list[str]:
    return [f"{p.parent.name}/{p.stem}" for p in paths]


def need(paths: list[Path], what: str) -> list[Any]:
    """Parametrize values, or one skip marker when the shared data is absent."""
    if paths:
        return paths
    return [pytest.param(None, marks=pytest.mark.skip(reason=f"{what} not found beside the repo"))]


#: Violation codes about tool pairing (``validate``); the others are about roles.
PAIRING = {
    "orphan_result",
    "duplicate_result",
    "unanswered_call",
    "result_after_content",
    "result_outside_tool_message",
    "call_outside_assistant",
    "duplicate_call",
    "result_outside_user_message",
}


def violations(out: list[Any], provider: str, given: list[Any]) -> list[Any]:
    """``cw.validate(out, provider)``, without the violations the input ``given`` already
    had and the library leaves as they are, so an output passes when it adds no fault:

    * ``unwritable_message`` when ``given`` (``Message`` structs) holds a message the
      provider's adapter cannot write (an image with no source, tool call arguments that
      are not a JSON object bound for Anthropic: the strategies draw such messages, which
      trimming and fitting keep as they are);
    * ``empty_content`` when ``given`` has at least as many (a message with no content, a
      text block empty or of whitespace only, one violation each, in a tool result's
      content too: the strategies draw them, and the library neither mends nor drops a
      message for it; trims only remove messages and repair moves a result with its
      blocks, so the count can only fall);
    * ``trailing_whitespace`` when ``given`` has it (a prefill ending in whitespace: the
      strategies draw a final assistant message of any text, which the library keeps as
      it is and whose cuts keep its end);
    * ``tool_name_not_allowed``, ``call_id_not_allowed`` and ``reused_call_id`` when
      ``given`` has at least as many of each (Anthropic: the strategies draw ids reused
      across messages; the library renames no id and drops no message for it);
    * ``image_not_allowed`` when ``given`` has at least as many (OpenAI: the strategies
      draw images in assistant messages and tool results; the library moves no image, and
      a result moved by repair takes its images with it, still in a tool result).
    """
    import contextwindow as cw
    from contextwindow.adapters import from_canonical

    found = cw.validate(out, provider)
    try:
        for m in given:
            from_canonical(m, provider)  # type: ignore[arg-type]
    except cw.InvalidMessageError:
        found = [v for v in found if v.code != "unwritable_message"]
    empty = sum(v.code == "empty_content" for v in found)
    if empty and empty <= sum(v.code == "empty_content" for v in cw.validate(given, provider)):
        found = [v for v in found if v.code != "empty_content"]
    if any(v.code == "trailing_whitespace" for v in cw.validate(given, provider)):
        found = [v for v in found if v.code != "trailing_whitespace"]
    # a block the provider refuses where it is (block_not_allowed) stays as an image does
    for code in (
        "tool_name_not_allowed",
        "call_id_not_allowed",
        "reused_call_id",
        "image_not_allowed",
        "block_not_allowed",
    ):
        n = sum(v.code == code for v in found)
        if n and n <= sum(v.code == code for v in cw.validate(given, provider)):
            found = [v for v in found if v.code != code]
    return found
