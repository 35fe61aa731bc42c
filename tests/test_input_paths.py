"""The same input gives the same output or the same refusal on every path: the dict API
(Python adapters and the native dict reader), the gateway (``fit_request`` /
``count_request``) and the CLI. Each test is a tester's finding (fresh7 N3, N5-N13)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

import contextwindow as cw
from contextwindow import _engine
from contextwindow.cli import main

from shared_data import corpus_files, ids

BREADCRUMB_BLOCK = {"type": "text", "text": cw.BREADCRUMB}


class _Stdin:
    """A stand-in for ``sys.stdin`` whose ``buffer`` holds ``data``."""

    def __init__(self, data: bytes) -> None:
        self.buffer = io.BytesIO(data)


def write(tmp_path: Path, name: str, data: str | bytes) -> str:
    p = tmp_path / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(p)


@pytest.fixture(params=[True, False], ids=["native", "adapters"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Run a dict-API test through the native dict reader and through the Python adapters."""
    monkeypatch.setattr(_engine, "FAST_READER", request.param)
    return bool(request.param)


# ----------------------------------------------------------------------------------- N3

PLAIN = [
    {"role": "user", "content": "old question " * 50},
    {"role": "assistant", "content": "old answer " * 50},
    {"role": "user", "content": "new question"},
]
# what fit_request and cw.trim_turns give at budget 40: the old turn dropped, the
# breadcrumb the leading text block of the kept user message (README, "A plain chat ...")
PLAIN_FITTED = [{"role": "user", "content": [BREADCRUMB_BLOCK, {"type": "text", "text": "new question"}]}]


@pytest.mark.parametrize(
    ("name", "data", "messages_of"),
    [
        (
            "body.json",
            json.dumps({"model": "claude", "max_tokens": 100, "messages": PLAIN}),
            lambda out: json.loads(out)["messages"],
        ),
        ("list.json", json.dumps(PLAIN), json.loads),
        ("plain.jsonl", "\n".join(json.dumps(m) for m in PLAIN), lambda out: [json.loads(x) for x in out.splitlines()]),
    ],
)
def test_cli_fit_places_a_plain_chats_breadcrumb_as_the_gateway_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, data: str, messages_of: Any
) -> None:
    """fresh7 N3: `fit` wrote the breadcrumb as a user message of its own ahead of the
    kept user message (two user messages in a row, Anthropic-invalid), because it passed
    the detected "openai" on as if the user had named it."""
    f = write(tmp_path, name, data)
    assert main(["fit", f, "--budget", "40"]) == 0
    got = messages_of(capsys.readouterr().out)
    assert got == PLAIN_FITTED
    assert got == cw.trim_turns(PLAIN, budget=40).messages
    if name == "body.json":
        assert json.loads(cw.fit_request(data.encode(), budget=40))["messages"] == PLAIN_FITTED
    assert cw.validate(got, "anthropic") == [] and cw.validate(got, "openai") == []
    # naming the shape keeps its rule, as format="openai" does on the dict path
    assert main(["fit", f, "--budget", "40", "--format", "openai"]) == 0
    named = messages_of(capsys.readouterr().out)
    assert named == cw.trim_turns(PLAIN, budget=40, format="openai").messages
    assert named == [{"role": "user", "content": cw.BREADCRUMB}, PLAIN[2]]


def test_cli_fit_plain_chat_with_text_blocks_from_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """N3's corpus case: Claude text blocks in a body without "system" read as a plain chat."""
    msgs = [
        {"role": "user", "content": [{"type": "text", "text": "first " * 40}]},
        {"role": "assistant", "content": [{"type": "text", "text": "reply " * 40}]},
        {"role": "user", "content": [{"type": "text", "text": "second"}]},
    ]
    body = json.dumps({"model": "m", "messages": msgs}).encode()
    monkeypatch.setattr("sys.stdin", _Stdin(body))
    assert main(["fit", "-", "--budget", "30"]) == 0
    got = json.loads(capsys.readouterr().out)["messages"]
    assert got == [{"role": "user", "content": [BREADCRUMB_BLOCK, {"type": "text", "text": "second"}]}]
    assert got == json.loads(cw.fit_request(body, budget=30))["messages"]


def _corpus_runs() -> list[tuple[Path, int]]:
    runs = []
    for path in corpus_files():
        total = cw.count_request(path.read_bytes())
        runs += [(path, b) for b in sorted({total // 2, total // 5, 200})]
    return runs


@pytest.mark.parametrize(
    ("path", "budget"), _corpus_runs(), ids=[f"{i}-{b}" for (p, b) in _corpus_runs() for i in ids([p])]
)
def test_cli_fit_from_stdin_equals_fit_request_on_the_corpus(
    path: Path, budget: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """N3 over the corpus: `contextwindow fit - --budget B < file` writes the document
    `fit_request(file, budget=B)` returns (the CLI keeps every top-level key too), and
    exits 1 exactly when the gateway's report says it does not fit."""
    body = path.read_bytes()
    monkeypatch.setattr("sys.stdin", _Stdin(body))
    code = main(["fit", "-", "--budget", str(budget)])
    cli = json.loads(capsys.readouterr().out)
    out, report = cw.fit_request(body, budget=budget, report=True)
    assert cli == json.loads(out)
    assert code == (0 if report.report.fits else 1)
