"""trim_turns and the CLI on every real transcript in ../shared/corpus (skipped when absent).

For budgets of 10%, 25%, 50%, 90%, 100% and 200% of each conversation's estimate the
output passes ``validate``, keeps the preamble and the current request, is never empty, is
the input itself when it fits, and is within budget or says ``fits=False``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

import contextwindow as cw
from contextwindow.io import load_conversation

from shared_data import corpus_files, ids, load, need

FILES = corpus_files()
PCTS = [10, 25, 50, 90, 100, 200]


@pytest.mark.parametrize("path", need(FILES, "../shared/corpus"), ids=ids(FILES) or None)
def test_corpus_input_is_valid(path: Path) -> None:
    doc = load(path)
    assert cw.validate(doc["messages"], doc["format"], format=doc["format"]) == []


@pytest.mark.parametrize("pct", PCTS)
@pytest.mark.parametrize("path", need(FILES, "../shared/corpus"), ids=ids(FILES) or None)
def test_trim_turns_on_corpus(path: Path, pct: int) -> None:
    doc = load(path)
    fmt, msgs = doc["format"], doc["messages"]
    before = msgspec.json.encode(msgs)
    total = cw.count_messages(msgs, format=fmt)
    budget = total * pct // 100
    r = cw.trim_turns(msgs, budget, format=fmt)
    out = r.messages
    assert msgspec.json.encode(msgs) == before, "input mutated"
    assert cw.validate(out, fmt, format=fmt) == []
    assert out
    seg = cw.segment_turns(msgs, format=fmt)
    assert all(a is b for a, b in zip(out[: seg.preamble_end], msgs[: seg.preamble_end], strict=True))
    if seg.current_request is not None:
        assert r.report.fates[seg.current_request].fate in ("kept", "truncated")
        request = msgs[seg.current_request]
        fate = r.report.fates[seg.current_request]
        if fate.fate == "kept" and fate.rule != "breadcrumb_added":
            assert any(m is request for m in out)
    if total <= budget:
        assert len(out) == len(msgs) and all(a is b for a, b in zip(out, msgs, strict=True))
        assert r.report.reason is None
    assert r.report.tokens_after == cw.count_messages(out, format=fmt)
    assert r.report.fits == (r.report.tokens_after <= budget)
    if not r.report.fits:  # the request is cut only when that makes it fit
        assert all(f.rule != "request_truncated" for f in r.report.fates)


@pytest.mark.parametrize("path", need(FILES, "../shared/corpus"), ids=ids(FILES) or None)
def test_cli_fit_quarter_budget(path: Path, tmp_path: Path) -> None:
    conv = load_conversation(path)
    tokens = cw.count_messages(conv.messages, format=conv.format, tools=conv.tools)
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, "-m", "contextwindow", "fit", str(path), "--budget", str(tokens // 4), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # exit 1 when the result does not fit (a preamble or request larger than the budget)
    assert proc.returncode in (0, 1), proc.stderr
    assert "tokens" in proc.stdout
    assert (proc.returncode == 1) == ("DOES NOT FIT" in proc.stdout)
    fitted = load_conversation(out)
    assert fitted.format == conv.format and fitted.kind == conv.kind
    assert cw.validate(fitted.messages, fitted.format, format=fitted.format) == []
    assert fitted.messages


@pytest.mark.parametrize("path", need(FILES, "../shared/corpus"), ids=ids(FILES) or None)
def test_the_gateway_reads_a_corpus_file_in_its_format(path: Path, tmp_path: Path) -> None:
    """A corpus file's ``"format"`` names its shape to ``fit_request``/``count_request`` as
    to the CLI (fresh16a F1: the three LogicKor Claude files, plain chats in Anthropic text
    blocks, were read as OpenAI's by the gateway), and the CLI's ``fit`` writes the
    document ``fit_request`` gives on the file's bytes, no provider named."""
    raw = path.read_bytes()
    fmt = load(path)["format"]
    total = cw.count_request(raw)
    assert total == cw.count_request(raw, provider=fmt)
    budget = total // 4
    out, rep = cw.fit_request(raw, budget=budget, report=True)
    assert rep.provider == fmt
    # and its rules, a plain chat's breadcrumb included (fresh16b #6)
    assert out == cw.fit_request(raw, budget=budget, provider=fmt)
    proc = subprocess.run(
        [sys.executable, "-m", "contextwindow", "fit", str(path), "--budget", str(budget)],
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == (0 if rep.report.fits else 1), proc.stderr
    assert msgspec.json.decode(proc.stdout) == msgspec.json.decode(out)
