"""Errors that name an option the caller passed (a profile, a format, a provider, a
model) cut it after 100 characters with how many were left out, as errors cut a
message's values; the CLI's repair lines cut tool call ids the same (fresh12 N1, N2)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import contextwindow as cw
from contextwindow.cli import main
from contextwindow.io import load_conversation

LONG = "Z" * 10_000
# repr of the first 100 characters, then the marker: 10,000 - 100 = 9,900 left out
SHOWN = "'" + "Z" * 100 + "'... (9,900 more characters)"
CHAT = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("estimate_tokens profile", lambda: cw.estimate_tokens("a", LONG)),
        ("count_messages profile", lambda: cw.count_messages(CHAT, profile=LONG)),
        ("count_messages format", lambda: cw.count_messages(CHAT, format=LONG)),
        ("trim_turns profile", lambda: cw.trim_turns(CHAT, 10, profile=LONG)),
        ("validate provider", lambda: cw.validate(CHAT, LONG)),
        ("repair_tool_pairs missing", lambda: cw.repair_tool_pairs(CHAT, missing=LONG)),
        ("fit_request provider", lambda: cw.fit_request(b'{"messages": []}', budget=10, provider=LONG)),
        ("count_request profile", lambda: cw.count_request(b'{"messages": []}', profile=LONG)),
        ("ContextGuard.check hint", lambda: cw.ContextGuard(cw.resolve_budget(8000, 1000)).check(CHAT, hint=LONG)),
    ],
)
def test_long_option_is_cut_in_the_error(name: str, call: Callable[[], Any]) -> None:
    with pytest.raises(ValueError) as info:
        call()
    text = str(info.value)
    assert SHOWN in text, name
    assert len(text) < 400, name


def test_short_option_is_named_whole() -> None:
    with pytest.raises(ValueError, match=r"^unknown profile 'nope'; known: "):
        cw.estimate_tokens("a", "nope")


def test_cli_long_model_is_cut(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(CHAT))
    assert main(["fit", str(path), "--model", "m" * 300]) == 2
    err = capsys.readouterr().err
    assert "'" + "m" * 100 + "'... (200 more characters)" in err
    assert "m" * 101 not in err


def test_cli_repair_line_cuts_a_long_call_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "orphan.json"
    path.write_text(
        json.dumps([{"role": "user", "content": "q"}, {"role": "tool", "tool_call_id": "i" * 300, "content": "r"}])
    )
    main(["repair", str(path)])
    err = capsys.readouterr().err
    # the id's first 100 characters and the marker, as validate's details cut it
    assert "(" + "i" * 100 + "... (200 more characters))" in err
    assert "i" * 101 not in err


BODY = b'{"messages": [{"role": "user", "content": "hi"}]}'


@pytest.mark.parametrize("bad", [5, b"openai", ["openai"]])
@pytest.mark.parametrize(
    ("option", "call"),
    [
        ("format", lambda v: cw.count_messages(CHAT, format=v)),
        ("format", lambda v: cw.trim_turns(CHAT, 10, format=v)),
        ("format", lambda v: cw.fit(CHAT, 10, format=v)),
        ("format", lambda v: cw.validate(CHAT, "openai", format=v)),
        ("format", lambda v: cw.adapters.to_canonical(CHAT, v)),
        ("format", lambda v: cw.adapters.from_canonical(cw.adapters.to_canonical(CHAT, "openai")[0], v)),
        ("format", lambda v: load_conversation("x.json", format=v)),
        ("provider", lambda v: cw.validate(CHAT, v)),
        ("provider", lambda v: cw.fit_request(BODY, budget=10, provider=v)),
        ("provider", lambda v: cw.count_request(BODY, provider=v)),
        ("profile", lambda v: cw.estimate_tokens("a", v)),
        ("profile", lambda v: cw.Estimator(v)),
        ("profile", lambda v: cw.ContextGuard(cw.resolve_budget(8000, 1000), profile=v)),
        ("family", lambda v: cw.count_features("x", v)),  # fresh48 #8
    ],
)
def test_option_of_the_wrong_type_is_a_type_error(option: str, call: Callable[[object], Any], bad: object) -> None:
    # fresh46 #6: a format, provider or profile that is not a string was a ValueError
    # ("unknown format 5"); the README's rule: TypeError for an object of the wrong type
    with pytest.raises(TypeError, match=rf"^{option} must be a .*, got {type(bad).__name__}$"):
        call(bad)
