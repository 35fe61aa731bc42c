"""The CLI on files the tests write: outputs, summaries, exit codes and one-line errors."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest

import contextwindow as cw
from contextwindow.cli import main
from contextwindow.estimate import output_schema_texts

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "agent_session.json"


def write(tmp_path: Path, name: str, data: str | bytes) -> str:
    p = tmp_path / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(p)


def chat(n: int) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": "s"}]
    for i in range(n):
        msgs += [{"role": "user", "content": f"question {i} " * 20}, {"role": "assistant", "content": "answer " * 20}]
    return msgs


def test_fit_writes_same_shape_and_prints_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.json"
    assert main(["fit", str(EXAMPLE), "--budget", "2000", "-o", str(out)]) == 0
    summary = capsys.readouterr().out
    body = json.loads(out.read_text())
    src = json.loads(EXAMPLE.read_text())
    tools = cw.count_messages([], tools=src["tools"])
    before = cw.count_messages(src["messages"]) + tools
    after = cw.count_messages(body["messages"]) + tools
    assert after <= 2000 < before
    assert f"{before:,} -> {after:,} tokens (budget 2,000; tool schemas take {tools:,}) fits" in summary
    assert "turns: kept 2 of 4, dropped 2" in summary
    assert {k: v for k, v in body.items() if k != "messages"} == {k: v for k, v in src.items() if k != "messages"}
    assert body["messages"][0] == src["messages"][0] and body["messages"][-1] == src["messages"][-1]
    assert cw.validate(body["messages"], "openai") == []


def test_fit_json_report_and_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = write(tmp_path, "c.jsonl", "\n".join(json.dumps(m) for m in chat(3)) + "\n")
    assert main(["fit", f, "--budget", "200", "--profile", "fim", "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.err)  # the report goes where the summary goes (fresh16a F2)
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert [m["role"] for m in lines] == ["system", "user", "user", "assistant"]
    assert (out["file"], out["budget"], out["tool_tokens"]) == (f, 200, 0)
    report = out["report"]
    assert report["reason"] == "token_budget" and report["fits"] is True and report["dropped_turns"] == 2
    assert main(["fit", f, "--budget", "200", "--profile", "fim"]) == 0
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert [m["role"] for m in lines] == ["system", "user", "user", "assistant"]
    assert lines[1]["content"] == cw.BREADCRUMB and "fits" in captured.err


def test_fit_unchanged_but_too_big_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = write(tmp_path, "c.json", json.dumps([{"role": "user", "content": "x " * 100}]))
    # exit 1: the result does not fit its budget
    assert main(["fit", f, "--budget", "3", "-o", str(tmp_path / "o.json")]) == 1
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out and "unchanged: nothing could be removed" in out
    assert main(["fit", f, "--budget", "3", "--json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.err)["report"]["fits"] is False
    assert json.loads(captured.out) == [{"role": "user", "content": "x " * 100}]


def test_count_and_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["count", str(EXAMPLE), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    src = json.loads(EXAMPLE.read_text())
    tools = cw.count_messages([], tools=src["tools"])
    want = (cw.count_messages(src["messages"]) + tools, tools, 15, 4)
    assert (row["tokens"], row["tool_tokens"], row["messages"], row["turns"]) == want
    bad = write(
        tmp_path,
        "bad.json",
        json.dumps([{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "z", "content": "r"}]),
    )
    assert main(["validate", bad]) == 1
    assert "message 1: orphan_result" in capsys.readouterr().out
    out = tmp_path / "fixed.json"
    assert main(["repair", bad, "-o", str(out)]) == 0
    assert json.loads(out.read_text()) == [{"role": "user", "content": "x"}]
    assert main(["validate", str(out)]) == 0


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        (b"", "the file is empty"),
        (b"not json at all", "invalid JSON"),
        # the file ends inside a value: the position is the end (3 lines; the third is
        # `   "content": "hi` = 17 characters, so column 18)
        # (`   "content": "hi` = 17 characters, so column 18; the file's 51 bytes, byte 51)
        (
            b'{"messages": [\n  {"role": "user",\n   "content": "hi',
            "line 3, column 18: EOF while parsing a string (byte 51)",
        ),
        (b"42", "top-level JSON is a number"),
        (b"[1, 2]", "message 0: must be an object"),
        (b'[{"role": "wizard", "content": "x"}]', "message 0, field role"),
        (b"[" * 5000 + b"]" * 5000, "nested too deeply"),
    ],
)
def test_bad_files_get_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, expect: str
) -> None:
    f = write(tmp_path, "in.json", content)
    for argv in (
        ["count", f],
        ["fit", f, "--budget", "10"],
        ["fit", f, "--model", "gpt-4o"],
        ["inspect", f],
        ["validate", f],
        ["repair", f],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"contextwindow: error: {f}: ") and expect in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("body", "offset", "problem"),
    [
        # fresh17b #8: a raw control character at byte 41 (the CLI said 41, the gateway 40)
        (b'{"messages": [{"role":"user","content":"a\x01b"}]}', 41, "control character"),
        # the "x" at byte 17 (the CLI said 18)
        (b'{"messages": []} xyz', 17, "trailing characters"),
        # "01": the "1" at byte 52 cannot follow a leading zero (both said 52)
        (b'{"messages": [{"role":"user","content":"x"}], "m": 01}', 52, "invalid number"),
        # fresh17b #6: the CLI reads the lone surrogate escape (a warning, U+FFFD) and named
        # it instead of the trailing comma, whose closing brace is at byte 55
        (b'{"messages": [{"role": "user", "content": "a\\ud800"}], }', 55, "trailing comma"),
        (b'{"messages": [{"role": "user", "content": "a"}], }', 49, "trailing comma"),
        (b'{"messages": [{"role": "user", "content": "a\\ud800"}, 1,]}', 56, "trailing comma"),
        # the first byte of a \u escape that is not a hex digit; the letter after a backslash
        (b'{"messages": [{"role": "user", "content": "a\\u12g4"}]}', 48, "invalid escape"),
        (b'{"messages": [{"role": "user", "content": "a\\x"}]}', 45, "invalid escape"),
        # the "}" where "true" should go on (the CLI said 46)
        (b'{"messages": [{"role": "user", "content": tru}]}', 45, "expected ident"),
        (b'{"messages": [{"role": "user", "content": "\\ud800"} "b"]}', 52, "expected `,` or `]`"),
    ],
)
def test_syntax_errors_name_the_gateways_byte_and_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: bytes, offset: int, problem: str
) -> None:
    """The CLI and ``fit_request`` name the same byte, the first that cannot be where it
    is (0-based), and the same problem; a lone surrogate escape before it is no error."""
    with pytest.raises(cw.InvalidRequestError) as info:
        cw.count_request(body)
    assert info.value.offset == offset
    assert f"at byte {offset}: {problem}" in str(info.value)
    f = write(tmp_path, "bad.json", body)
    assert main(["count", f]) == 2
    err = capsys.readouterr().err
    assert f"invalid JSON: line 1, column {offset + 1}: {problem}" in err, err
    assert err.endswith(f" (byte {offset})\n"), err
    assert "surrogate" not in err
    # a line of JSONL names the same problem, at the file's byte: after line 1's 33 bytes
    # and its newline
    f = write(tmp_path, "bad.jsonl", b'{"role": "user", "content": "hi"}\n' + body)
    assert main(["count", f]) == 2
    err = capsys.readouterr().err
    assert f"bad.jsonl: line 2: invalid JSON: {problem}" in err and err.endswith(f" (byte {34 + offset})\n"), err


def test_unwritable_output_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", str(EXAMPLE), "--budget", "5", "-o", str(tmp_path / "no" / "dir" / "o.json")]) == 2
    err = capsys.readouterr().err
    assert "No such file or directory" in err and err.count("\n") == 1


def test_an_empty_file_name_is_named_as_such(capsys: pytest.CaptureFixture[str]) -> None:
    """fresh13 N6: ``-o ''`` gave the raw ``[Errno 21] Is a directory: ''`` and an empty
    input path ``: cannot read: Is a directory`` (read as the current directory)."""
    want = "contextwindow: error: '': no file name\n"
    for argv in (
        ["fit", str(EXAMPLE), "--budget", "500", "-o", ""],
        ["repair", str(EXAMPLE), "-o", ""],
        ["count", ""],
        ["count", str(EXAMPLE), ""],
        ["fit", "", "--budget", "10"],
        ["inspect", ""],
        ["validate", ""],
        ["repair", ""],
        # a DIR too: '' was searched as the current directory
        ["accuracy", "", "--reference", "cl100k"],
    ):
        assert main(argv) == 2, argv
        out, err = capsys.readouterr()
        assert err == want, argv
        assert out == "" or argv[:2] == ["count", str(EXAMPLE)], argv
    # the Python entry says the same
    from contextwindow.io import load_conversation

    with pytest.raises(cw.InvalidRequestError) as got:
        load_conversation("")
    assert str(got.value) == "'': no file name"


def test_accuracy_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tiktoken")
    from contextwindow.accuracy import reference_counter

    text = "The agent read the file and summarised it for the user in three short sentences. " * 3
    (tmp_path / "c.json").write_text(json.dumps([{"role": "user", "content": text}]))
    (tmp_path / "junk.json").write_text("not json")  # skipped: not a conversation
    assert main(["accuracy", str(tmp_path), "--reference", "cl100k", "--profile", "fim", "--json"]) == 0
    [report] = json.loads(capsys.readouterr().out)
    real = reference_counter("cl100k")(text)
    want = (cw.estimate_tokens(text, "fim") - real) / real
    assert report["files"] == 1 and report["segments"]["fim"]["prose"]["n"] == 1
    assert report["segments"]["fim"]["prose"]["median"] == pytest.approx(want)
    assert report["conversations"]["fim"]["median"] == pytest.approx(want)
    assert main(["accuracy", str(tmp_path), "--reference", "cl100k", "--profile", "fim"]) == 0
    assert "| fim | prose | 1 |" in capsys.readouterr().out


def test_accuracy_scores_a_file_reached_through_a_link_once(tmp_path: Path) -> None:
    # fresh25 #7: a link to a file of the directory scored that file twice
    from contextwindow.accuracy import measure

    words = [{"role": "user", "content": "word " * 30}, {"role": "assistant", "content": "reply " * 25}]
    (tmp_path / "a.json").write_text(json.dumps(words))
    once = measure(tmp_path, lambda s: len(s.split()), profiles=["fim"])
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "c.json").symlink_to(tmp_path / "a.json")
    twice = measure(tmp_path, lambda s: len(s.split()), profiles=["fim"])
    assert (once.files, twice.files) == (1, 1)
    assert twice.to_dict() == once.to_dict()


def test_accuracy_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = write(tmp_path, "c.json", "[]")
    assert main(["accuracy", f, "--reference", "cl100k"]) == 2
    assert "not a directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["accuracy", str(tmp_path), "--reference", "gpt2"])


def test_accuracy_skips_junk_and_fails_when_nothing_is_left(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by the fresh-install review: a deeply nested file aborted the whole run with an
    error naming no file, and a directory of junk printed empty tables with exit 0."""
    pytest.importorskip("tiktoken")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "bad.json").write_bytes(b"\xff\xfe not json")
    assert main(["accuracy", str(tmp_path), "--reference", "cl100k"]) == 2
    assert "no conversation files with text" in capsys.readouterr().err
    (tmp_path / "ok.json").write_text(json.dumps([{"role": "user", "content": "hello there " * 20}]))
    assert main(["accuracy", str(tmp_path), "--reference", "cl100k", "--profile", "fim", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)[0]["files"] == 1
    # each file left out is named on stderr (N11 from a new user: 26 of 38 went unsaid)
    warnings = err.splitlines()
    assert len(warnings) == 2 and all(w.startswith("contextwindow: warning: skipped ") for w in warnings)
    assert f"{tmp_path / 'deep.json'}: message 0: is nested too deeply" in err and f"{tmp_path / 'bad.json'}: " in err


def test_accuracy_names_the_skipped_files_when_none_is_readable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fresh20a F6: with every file unreadable, the error said "no conversation files"
    and named none of them; each is now a warning line, as when some file is read."""
    from contextwindow.accuracy import NoConversationsError, measure

    d = tmp_path / "d1"
    d.mkdir()
    (d / "x.json").write_text("garbage\n")
    why = f"{d / 'x.json'}: invalid JSON: line 1, column 1: expected value (byte 0)"
    assert main(["accuracy", str(d), "--reference", "cl100k"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"contextwindow: warning: skipped {why}",
        f"contextwindow: error: {d}: no conversation files with text (*.json, *.jsonl) in the all split",
    ]
    # the Python API names the first and counts them; .skipped lists them all
    (d / "y.jsonl").write_text("[1]\n")
    with pytest.raises(NoConversationsError) as got:
        measure(d, lambda s: 1)
    assert isinstance(got.value, ValueError)
    assert [p for p, _ in got.value.skipped] == [str(d / "x.json"), str(d / "y.jsonl")]
    assert str(got.value) == (
        f"{d}: no conversation files with text (*.json, *.jsonl) in the all split; skipped 2 files: {why} (and 1 more)"
    )
    # a directory with no candidate file at all says only that
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(NoConversationsError, match=r"in the all split$") as none:
        measure(empty, lambda s: 1)
    assert none.value.skipped == []
    # a link to nothing and a file with no text are named too (fresh23b #3, fresh23 #9)
    (empty / "gone.json").symlink_to(tmp_path / "nowhere.json")
    (empty / "none.json").write_text("[]")
    (empty / "images.json").write_text(
        json.dumps([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/a.png"}}]}])
    )
    with pytest.raises(NoConversationsError) as got:
        measure(empty, lambda s: 1)
    assert got.value.skipped == [
        (str(empty / "gone.json"), f"{empty / 'gone.json'}: cannot read: No such file or directory"),
        (str(empty / "images.json"), "holds no text to score"),
        (str(empty / "none.json"), "holds no text to score"),
    ]


def test_count_reports_good_files_when_one_is_bad(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by the fresh-install review: one missing file hid the counts of the others."""
    good = write(tmp_path, "good.json", json.dumps([{"role": "user", "content": "hello"}]))
    assert main(["count", good, str(tmp_path / "missing.json"), good, "--json"]) == 2
    captured = capsys.readouterr()
    assert [r["file"] for r in json.loads(captured.out)] == [good, good]
    assert "missing.json" in captured.err


def test_breadcrumb_must_be_a_bool() -> None:
    """Found by the fresh-install review: breadcrumb="no" was truthy and inserted it."""
    msgs = [
        {"role": "user", "content": "a " * 50},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
    ]
    with pytest.raises(TypeError, match="breadcrumb must be a bool"):
        cw.trim_turns(msgs, 10, breadcrumb="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="breadcrumb must be a bool"):
        cw.trim_turn_count(msgs, 1, breadcrumb=None)  # type: ignore[arg-type]


@pytest.fixture
def no_llm_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLM_CONTEXT_SIZE", raising=False)
    monkeypatch.delenv("LLM_MAX_OUTPUT_TOKENS", raising=False)


@pytest.mark.usefixtures("no_llm_env")
def test_fit_model_takes_the_budget_from_the_model_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.json"
    assert main(["fit", str(EXAMPLE), "--model", "openai/gpt-4o", "-o", str(out)]) == 0
    captured = capsys.readouterr()
    src = json.loads(EXAMPLE.read_text())
    tools = cw.count_messages([], tools=src["tools"])
    before = cw.count_messages(src["messages"]) + tools
    # 128,000 - 16,384 = 111,616 for the request; the messages get 111,616 - tools
    assert "context window 128,000 - output reserve 16,384 = capacity 111,616" in captured.err
    assert f"messages may use {111_616 - tools:,} (tool schemas take {tools:,})" in captured.err
    assert "rule window_from_model: context_window=128000 (openai/gpt-4o)" in captured.err
    assert f"{before:,} -> {before:,} tokens (budget 111,616; tool schemas take {tools:,}) fits" in captured.out
    assert json.loads(out.read_text()) == src  # fits: written back unchanged


@pytest.mark.usefixtures("no_llm_env")
def test_fit_model_overrides_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["fit", str(EXAMPLE), "--model", "gpt-4o", "--context-window", "2500", "--max-output-tokens", "500"]
    assert main([*argv, "--json", "-o", str(tmp_path / "o.json")]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    tools = out["tool_tokens"]
    # 2,500 - 500 = 2,000 for the whole request, 2,000 - tools for the messages
    assert out["budget"] == 2_000
    rb = out["resolved_budget"]
    assert (rb["context_window"], rb["max_output_tokens"], rb["capacity"], rb["usable"]) == (
        2_500,
        500,
        2_000,
        2_000 - tools,
    )
    assert out["report"]["budget"] == 2_000 - tools and out["report"]["reason"] == "token_budget"
    assert out["report"]["tokens_after"] <= 2_000 - tools
    assert "rule window_argument: context_window=2500" in captured.err
    # the same budget as --budget 2000
    assert main(["fit", str(EXAMPLE), "--budget", "2000", "--json", "-o", str(tmp_path / "b.json")]) == 0
    assert json.loads(capsys.readouterr().out)["report"] == out["report"]
    assert (tmp_path / "o.json").read_bytes() == (tmp_path / "b.json").read_bytes()


@pytest.mark.usefixtures("no_llm_env")
@pytest.mark.parametrize(
    ("options", "want"),
    [
        # fresh11 N4: 64,000 and 64,001 ran with capacity 0 and 1 and ended "DOES NOT FIT"
        (
            ["--context-window", "64000"],
            "the output reserve, the 64,000-token default ('nope-1' is not in the model table; no"
            " --max-output-tokens or LLM_MAX_OUTPUT_TOKENS is set), is as large as the context window"
            " 64,000 (no token left for the input): pass --max-output-tokens N, below the window",
        ),
        (
            ["--context-window", "8000", "--max-output-tokens", "8000"],
            "the output reserve, --max-output-tokens 8,000, is as large as the context window 8,000 (no"
            " token left for the input): pass --max-output-tokens N, below the window",
        ),
        (
            ["--context-window", "8000", "--max-output-tokens", "9000"],
            "the output reserve, --max-output-tokens 9,000, is larger than the context window 8,000:"
            " pass --max-output-tokens N, below the window",
        ),
    ],
)
def test_fit_model_reserve_that_leaves_no_input_is_refused(
    options: list[str], want: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fit", str(EXAMPLE), "--model", "nope-1", *options]) == 2
    assert capsys.readouterr().err == f"contextwindow: error: {want}\n"


@pytest.mark.usefixtures("no_llm_env")
def test_fit_model_reserve_from_the_environment_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LLM_MAX_OUTPUT_TOKENS", "9000")
    assert main(["fit", str(EXAMPLE), "--model", "nope-1", "--context-window", "9000"]) == 2
    assert capsys.readouterr().err == (
        "contextwindow: error: the output reserve, LLM_MAX_OUTPUT_TOKENS (9,000 tokens), is as large as the"
        " context window 9,000 (no token left for the input): pass --max-output-tokens N, below the window\n"
    )
    # a window that leaves one token runs (the budget lines say capacity 1)
    assert main(["fit", str(EXAMPLE), "--model", "nope-1", "--context-window", "9001", "-o", os.devnull]) == 1
    assert "= capacity 1;" in capsys.readouterr().err


@pytest.mark.usefixtures("no_llm_env")
@pytest.mark.parametrize("model", ["gpt-4o", "nope-1"])
def test_fit_model_malformed_output_variable_is_an_error_for_any_model(
    model: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # fresh12 O3: gpt-4o's table reserve used to hide LLM_MAX_OUTPUT_TOKENS=abc (rc 0)
    # while nope-1 gave this error (rc 2); now both give it
    monkeypatch.setenv("LLM_MAX_OUTPUT_TOKENS", "abc")
    assert main(["fit", str(EXAMPLE), "--model", model, "-o", os.devnull]) == 2
    assert capsys.readouterr().err == (
        "contextwindow: error: environment variable LLM_MAX_OUTPUT_TOKENS must be an integer number of tokens"
        " (digits 0-9 only, as the flags take), got 'abc'\n"
    )


@pytest.mark.usefixtures("no_llm_env")
@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--model", "gpt-4o", "--context-window", "0"], "--context-window must be >= 1, got 0"),
        (["--model", "gpt-4o", "--context-window", "-3"], "--context-window must be >= 1, got -3"),
        (["--model", "gpt-4o", "--max-output-tokens", "-1"], "--max-output-tokens must be >= 0, got -1"),
        (["--model", ""], "--model must be a non-empty model name, got ''"),
        (["--model", "  ", "--context-window", "0"], "--model must be a non-empty model name, got '  '"),
    ],
)
def test_fit_model_refusals_name_the_flags(argv: list[str], error: str, capsys: pytest.CaptureFixture[str]) -> None:
    """fresh17b #9: they named resolve_budget's parameters ("context_window must be >= 1,
    got 0", "model must be a non-empty str, got ''"), not the flags."""
    assert main(["fit", str(EXAMPLE), *argv, "-o", os.devnull]) == 2
    err = capsys.readouterr().err
    assert err == f"contextwindow: error: {error}\n", err
    assert "context_window" not in err and "non-empty str" not in err


@pytest.mark.usefixtures("no_llm_env")
@pytest.mark.parametrize("var", ["LLM_CONTEXT_SIZE", "LLM_MAX_OUTPUT_TOKENS"])
@pytest.mark.parametrize("value", ["\u0665\u0660\u0660\u0660", " 5000 ", "5000 ", "5_000", "+5000", "\uff15000"])
def test_fit_model_variables_take_what_the_flags_take(
    var: str, value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """fresh17b #9: LLM_CONTEXT_SIZE set to 5000 in Arabic-Indic digits or ' 5000 ' gave a window
    of 5,000 where --context-window refused them (digits 0-9 only)."""
    flag = "--context-window" if var == "LLM_CONTEXT_SIZE" else "--max-output-tokens"
    base = ["fit", str(EXAMPLE), "--model", "nope-1", "-o", os.devnull]
    other = ["--max-output-tokens", "10"] if var == "LLM_CONTEXT_SIZE" else ["--context-window", "9000"]
    with pytest.raises(SystemExit) as info:
        main([*base, *other, flag, value])
    assert info.value.code == 2
    assert "(digits 0-9 only)" in capsys.readouterr().err
    monkeypatch.setenv(var, value)
    assert main([*base, *other]) == 2
    assert capsys.readouterr().err == (
        f"contextwindow: error: environment variable {var} must be an integer number of tokens"
        f" (digits 0-9 only, as the flags take), got {value!r}\n"
    )
    # written with the digits 0-9, the same number is taken from either
    monkeypatch.setenv(var, "5000")
    assert main([*base, *other]) in (0, 1)
    got = capsys.readouterr().err
    assert ("context window 5,000" if var == "LLM_CONTEXT_SIZE" else "output reserve 5,000") in got
    monkeypatch.delenv(var)
    assert main([*base, *other, flag, "5000"]) in (0, 1)
    assert ("context window 5,000" if var == "LLM_CONTEXT_SIZE" else "output reserve 5,000") in capsys.readouterr().err


@pytest.mark.usefixtures("no_llm_env")
def test_fit_model_unknown_or_misused(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", str(EXAMPLE), "--model", "acme-llm-9000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("contextwindow: error: unknown model 'acme-llm-9000'") and err.count("\n") == 1
    # it says the output reserve is needed too (fresh10: "(and --max-output-tokens N)" read
    # as optional, and any window of 64,000 or less then failed on the default reserve)
    assert "--context-window N and --max-output-tokens N (without it 64,000 tokens are reserved" in err
    # fresh17 #10: with --max-output-tokens given, the advice no longer says it is missing
    assert main(["fit", str(EXAMPLE), "--model", "acme-llm-9000", "--max-output-tokens", "100"]) == 2
    assert capsys.readouterr().err == (
        "contextwindow: error: unknown model 'acme-llm-9000': not in the model table; pass --context-window N,"
        " set LLM_CONTEXT_SIZE, or use --budget N\n"
    )
    # a declared window makes an unknown model usable: from the option or the environment
    argv = ["fit", str(EXAMPLE), "--model", "acme-llm-9000", "--context-window", "9000"]
    assert main([*argv, "--max-output-tokens", "1000", "--json"]) == 0
    # the budget's rule lines, then the report: on stderr, the conversation on stdout
    rb = json.loads(capsys.readouterr().err.splitlines()[-1])["resolved_budget"]
    assert (rb["context_window"], rb["max_output_tokens"], rb["capacity"]) == (9_000, 1_000, 8_000)
    # without an output limit, a declared window takes the first seed's 64,000 reserve; the
    # error names the option that sets it and says where the reserve came from (fresh11
    # N3, N4: it named only the Python parameter, not the unknown model)
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "contextwindow: error: the output reserve, the 64,000-token default ('acme-llm-9000' is not in the"
        " model table; no --max-output-tokens or LLM_MAX_OUTPUT_TOKENS is set), is larger than the context"
        " window 9,000: pass --max-output-tokens N, below the window\n"
    )
    monkeypatch.setenv("LLM_CONTEXT_SIZE", "100000")
    monkeypatch.setenv("LLM_MAX_OUTPUT_TOKENS", "4000")
    assert main(["fit", str(EXAMPLE), "--model", "acme-llm-9000", "--json"]) == 0
    assert json.loads(capsys.readouterr().err.splitlines()[-1])["budget"] == 96_000  # 100,000 - 4,000
    # a reserve larger than the window: one line, exit 2, the reserve's source named
    assert main(["fit", str(EXAMPLE), "--model", "gpt-4o", "--context-window", "1000"]) == 2
    assert capsys.readouterr().err == (
        "contextwindow: error: the output reserve, gpt-4o's output limit in the model table (16,384 tokens),"
        " is larger than the context window 1,000: pass --max-output-tokens N, below the window\n"
    )
    for argv in (
        ["fit", str(EXAMPLE), "--model", "gpt-4o", "--budget", "10"],
        ["fit", str(EXAMPLE)],
        ["fit", str(EXAMPLE), "--budget", "10", "--context-window", "100"],
    ):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
    capsys.readouterr()


@pytest.mark.usefixtures("no_llm_env")
def test_fit_model_that_does_not_fit_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = write(
        tmp_path, "c.json", json.dumps([{"role": "system", "content": "x " * 3000}, {"role": "user", "content": "hi"}])
    )
    # 1,000 - 0 = 1,000 < the system prompt alone (the preamble is never cut)
    assert main(["fit", f, "--model", "x", "--context-window", "1000", "--max-output-tokens", "0", "-o", "-"]) == 1
    assert "DOES NOT FIT" in capsys.readouterr().err


def test_inspect_json_on_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(EXAMPLE), "--json", "--top", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    src = json.loads(EXAMPLE.read_text())
    per = cw.message_tokens(src["messages"])
    tools = cw.count_messages([], tools=src["tools"])
    assert out["file"] == str(EXAMPLE)
    assert (out["total_tokens"], out["message_tokens"], out["tool_schema_tokens"]) == (
        sum(per) + tools,
        sum(per),
        tools,
    )
    # sum of parts = total; per-role = sum of message_tokens for that role
    assert (
        sum(r["tokens"] for r in out["by_role"]) + sum(s["tokens"] for s in out["tool_schemas"]) == out["total_tokens"]
    )
    roles = [m["role"] for m in src["messages"]]
    assert {r["role"]: r["tokens"] for r in out["by_role"]} == {
        role: sum(n for n, x in zip(per, roles, strict=True) if x == role) for role in set(roles)
    }
    assert sum(t["tokens"] for t in out["by_turn"]) == sum(per)
    assert [(t["turn"], t["start"], t["end"]) for t in out["by_turn"]] == [
        (0, 0, 1),
        (1, 1, 6),
        (2, 6, 10),
        (3, 10, 14),
        (4, 14, 15),
    ]
    assert [m["index"] for m in out["largest"]] == sorted(range(len(per)), key=lambda i: (-per[i], i))[:3]
    assert [t["tool"] for t in out["by_tool"]] == ["bash", "read_file"]


def test_inspect_text_has_tables_and_bars(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["inspect", str(EXAMPLE), "--profile", "fim"]) == 0
    out = capsys.readouterr().out
    b = cw.count_messages(json.loads(EXAMPLE.read_text())["messages"], profile="fim")
    assert out.startswith(f"{EXAMPLE}: ") and f"{b:,} in 15 messages" in out
    for title in ("by role", "by turn", "by tool", "largest messages", "tool schemas"):
        assert f"\n{title}" in out
    # the bash result holds most of the tokens: the longest bar is on its rows
    bash_rows = [line for line in out.splitlines() if line.startswith("bash ")]
    assert bash_rows and all("█" * 10 in line for line in bash_rows[:1])
    assert "preamble" in out and "compiling module_0" in out  # the preview column, markup-free


def test_fit_says_when_the_tool_schemas_alone_leave_no_room(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # left17: with --budget below the tool schemas' tokens the messages get a budget of 0
    # and nothing can go: the summary blamed the preamble and the request, and said
    # nothing of the schemas (the report's reason is None: the output is the input)
    tools = [{"type": "function", "function": {"name": "f", "description": "d " * 200, "parameters": {}}}]
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
    f = write(tmp_path, "c.json", json.dumps({"format": "openai", "messages": msgs, "tools": tools}))
    schema = cw.count_messages([], tools=tools, format="openai")
    assert schema > 100
    assert main(["fit", f, "--budget", "100", "-o", str(tmp_path / "o.json")]) == 1
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out and "unchanged: nothing could be removed" in out
    assert f"the tool schemas alone take {schema:,} tokens of the budget of 100: none is left for the messages" in out
    assert "without losing the preamble" not in out
    assert main(["fit", f, "--budget", "100", "--json", "-o", str(tmp_path / "o.json")]) == 1
    report = json.loads(capsys.readouterr().out)
    assert (report["budget"], report["tool_tokens"]) == (100, schema)
    assert (report["report"]["budget"], report["report"]["fits"], report["report"]["reason"]) == (0, False, None)


def test_fit_model_option_errors_exit_2_without_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", str(EXAMPLE), "--model", ""]) == 2
    err = capsys.readouterr().err
    assert err.startswith("contextwindow: error:") and "Traceback" not in err and "non-empty" in err


def test_fit_model_budget_never_exceeds_the_capacity(capsys: pytest.CaptureFixture[str]) -> None:
    # the example's tool schemas take 121 tokens; a 100-token capacity cannot hold them
    code = main(
        ["fit", str(EXAMPLE), "--model", "gpt-4o", "--context-window", "150", "--max-output-tokens", "50", "--json"]
    )
    out = capsys.readouterr()
    assert code == 1
    assert json.loads(out.err.splitlines()[-1])["budget"] == 100
    assert "the tool schemas alone exceed the capacity" in out.err
    assert json.loads(out.out)["messages"]  # the conversation, on stdout


def test_invalid_utf8_is_replaced_but_never_silently(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'[{"role": "user", "content": "a\xffb"}]')  # 0xff at byte 31
    assert main(["count", str(bad)]) == 0
    err = capsys.readouterr().err
    assert f"contextwindow: warning: {bad}: invalid UTF-8 at byte 31" in err


def test_empty_file_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text("  \n")
    assert main(["count", str(empty)]) == 2
    assert capsys.readouterr().err.strip() == f"contextwindow: error: {empty}: the file is empty"


def test_option_errors_show_the_subcommands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    # found by a new user: the top-level usage was printed for a subcommand's bad option
    with pytest.raises(SystemExit) as info:
        main(["fit", str(EXAMPLE), "--budget", "-5"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: contextwindow fit ") and "contextwindow fit: error: --budget must be >= 0" in err


class _Stdin:
    """A stand-in for ``sys.stdin`` whose ``buffer`` holds ``data``."""

    def __init__(self, data: bytes) -> None:
        import io

        self.buffer = io.BytesIO(data)


def test_dash_reads_standard_input(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`-` is standard input for every command (M11 from a new user: a gateway pipeline
    pipes the body in), named ``<stdin>`` in summaries, warnings and errors; the fitted
    body is the one the same file gives."""
    body = EXAMPLE.read_bytes()
    assert main(["fit", str(EXAMPLE), "--budget", "2000"]) == 0
    from_file = capsys.readouterr()
    monkeypatch.setattr("sys.stdin", _Stdin(body))
    assert main(["fit", "-", "--budget", "2000"]) == 0
    from_stdin = capsys.readouterr()
    assert from_stdin.out == from_file.out
    assert from_stdin.err == from_file.err.replace(str(EXAMPLE), "<stdin>")
    assert from_stdin.err.startswith("<stdin>: ")
    monkeypatch.setattr("sys.stdin", _Stdin(body))
    assert main(["count", "-", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["file"] == "<stdin>"
    # invalid UTF-8 at byte 40: '{"messages":[{"role":"user","content":"a' is 40 bytes
    monkeypatch.setattr("sys.stdin", _Stdin(b'{"messages":[{"role":"user","content":"a\xffb"}]}'))
    assert main(["validate", "-"]) == 0
    out, err = capsys.readouterr()
    assert "contextwindow: warning: <stdin>: invalid UTF-8 at byte 40" in err
    assert out == "<stdin>: valid for openai (1 message)\n"
    monkeypatch.setattr("sys.stdin", _Stdin(b"  \n"))
    assert main(["inspect", "-"]) == 2
    assert capsys.readouterr().err == "contextwindow: error: <stdin>: the file is empty\n"


@pytest.mark.parametrize(
    ("system", "problem"),
    [
        (5, "system: must be a string or a list of text blocks"),
        ({"type": "text", "text": "s"}, "system: must be a string or a list of text blocks"),
        ([5], "system[0]: must be an object"),
        ([{"type": "text"}], "system[0].text: is missing"),
    ],
)
def test_bad_top_level_system_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], system: object, problem: str
) -> None:
    """Found by the fresh tester (end of N6): "system": 5 said "message 0, field content",
    true only once system has become message 0. The gateway says the same words."""
    body = json.dumps({"system": system, "messages": [{"role": "user", "content": "hi"}]})
    f = write(tmp_path, "s.json", body)
    for command in (["count", f], ["fit", f, "--budget", "100"], ["validate", f]):
        assert main(command) == 2
        assert capsys.readouterr().err == f"contextwindow: error: {f}: {problem}\n"
    with pytest.raises(cw.InvalidRequestError) as err:
        cw.count_request(body.encode())
    assert str(err.value) == f"invalid request body at byte 11: {problem}"


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        # the fresh tester's N4: read silently as an assistant message
        ('[{"role":"user","role":"assistant","content":"hi"}]', 'message 0: the key "role"'),
        (
            '{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":'
            '[{"id":"c","type":"function","function":{"name":"f","arguments":"{}","name":"g"}}]}]}',
            'message 1, field tool_calls[0].function: the key "name"',
        ),
        (
            '{"system":[{"type":"text","text":"a","text":"b"}],"messages":[{"role":"user","content":"hi"}]}',
            'system[0]: the key "text"',
        ),
        ('{"model":"a","model":"b","messages":[]}', 'the key "model"'),
        ('{"messages":[],"tools":[{"type":"function","type":"x"}]}', 'tools[0]: the key "type"'),
        ('{"role":"user","content":"a","content":"b"}', 'message 0: the key "content"'),
        # JSONL: the message of the line
        (
            '{"role":"user","content":"a"}\n{"role":"assistant","content":"b","x":{"k":1,"k":2}}',
            'message 1, field x: the key "k"',
        ),
        # a key spelled with an escape is the same key; one spelled with a space before its colon too
        ('[{"role":"user","r\\u006fle":"tool","content":"hi"}]', 'message 0: the key "role"'),
        ('[{"role" :"user","role" : "tool","content":"hi"}]', 'message 0: the key "role"'),
    ],
)
def test_a_repeated_key_anywhere_in_a_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: str, problem: str
) -> None:
    """msgspec kept the last value silently, and the CLI writes the whole file back, so the
    first would have vanished; the gateway refuses the same in what it reads."""
    f = write(tmp_path, "dup.json", data)
    for command in (["count", f], ["fit", f, "--budget", "100"], ["validate", f]):
        assert main(command) == 2
        assert capsys.readouterr().err == f"contextwindow: error: {f}: {problem} appears more than once\n"


def test_duplicate_messages_key_is_refused_as_the_gateway_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by new users (M8, N3): the CLI kept the last of two "messages" keys (here an
    empty list: "0 tokens, 0 messages", exit 0) where fit_request refuses the body. A
    "messages" key inside a message, or the word inside a string, is not the top level's."""
    body = b'{"messages":[{"role":"user","content":"hi"}],"messages":[]}'
    f = write(tmp_path, "dup.json", body)
    assert main(["count", f]) == 2
    assert capsys.readouterr().err == f'contextwindow: error: {f}: the key "messages" appears more than once\n'
    with pytest.raises(cw.InvalidRequestError, match="appears more than once"):
        cw.count_request(body)
    nested = write(
        tmp_path, "nested.json", '{"messages":[{"role":"user","content":"\\"messages\\"","x":{"messages":1}}]}'
    )
    assert main(["count", nested]) == 0
    assert capsys.readouterr().out.startswith(f"{nested}: ")


def test_one_message_one_turn_and_stdin_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Singular nouns ("1 messages, 1 turns" before) and `count - -`, which read standard
    input twice and then failed on the empty second read (N13)."""
    f = write(tmp_path, "one.json", '[{"role": "user", "content": "hi"}]')
    assert main(["count", f]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{f}: ") and out.endswith(", 1 message, 1 turn [openai, conservative]\n")
    monkeypatch.setattr("sys.stdin", _Stdin(b"[]"))
    assert main(["count", "-", "-"]) == 2
    assert capsys.readouterr().err == "contextwindow: error: - (standard input) can be read once\n"


def test_an_anthropic_system_does_not_shift_message_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # found by a tester: the CLI lifts a top-level system into message 0, and its errors,
    # violations and repairs named messages[1] "message 2" (the gateway and the dict path
    # say "message 1"); "valid (4 messages)" for 3
    def body(messages: list[dict[str, Any]]) -> bytes:
        return json.dumps({"model": "m", "max_tokens": 5, "system": "s", "messages": messages}).encode()

    call = {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}
    bad = write(
        tmp_path,
        "bad.json",
        body([{"role": "user", "content": "hi"}, {**call, "content": [{**call["content"][0], "input": []}]}]),
    )
    for argv in (["count", bad], ["validate", bad], ["repair", bad], ["fit", bad, "--budget", "100"], ["inspect", bad]):
        assert main(argv) == 2
        assert (
            capsys.readouterr().err
            == f"contextwindow: error: {bad}: message 1, field content[0].input: must be an object\n"
        )
    open_call = write(
        tmp_path, "open.json", body([{"role": "user", "content": "hi"}, call, {"role": "user", "content": "go"}])
    )
    assert main(["validate", open_call]) == 1
    assert capsys.readouterr().out.startswith(f"{open_call}: message 1: unanswered_call: ")
    assert main(["repair", open_call, "-o", str(tmp_path / "out.json")]) == 0
    assert capsys.readouterr().out == f"{open_call}: 1 change(s) to tool pairs\n  message 1: stub_inserted (t)\n"
    fine = write(tmp_path, "fine.json", body([{"role": "user", "content": "hi"}]))
    assert main(["validate", fine]) == 0
    assert capsys.readouterr().out == f"{fine}: valid for anthropic (1 message and a system)\n"
    system = write(tmp_path, "system.json", json.dumps({"system": [{"type": "text"}], "messages": []}).encode())
    assert main(["count", system]) == 2
    assert capsys.readouterr().err == f"contextwindow: error: {system}: system[0].text: is missing\n"


def test_an_openai_body_read_as_anthropic_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # found by a tester: a stray top-level "system" in an OpenAI body made it Anthropic's,
    # and the error named a message field without saying how the file had been read
    msgs = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c", "content": "r"},
    ]
    f = write(tmp_path, "b.json", json.dumps({"model": "m", "system": "x", "messages": msgs}))
    assert main(["count", f]) == 2
    assert capsys.readouterr().err == (
        f"contextwindow: error: {f}: message 1, field content: must be a string or a list of blocks"
        ' (read as an Anthropic body for its top-level "system"; --format openai reads it as OpenAI\'s)\n'
    )
    assert main(["count", "--format", "openai", f]) == 0
    # a real Anthropic body gets no such remark
    anth = write(tmp_path, "a.json", json.dumps({"system": "x", "messages": [{"role": "user", "content": 5}]}))
    assert main(["count", anth]) == 2
    assert capsys.readouterr().err.endswith(": message 0, field content: must be a string or a list of blocks\n")


def _run_closed(
    args: list[str], *, read_lines: int = 0, read_bytes: int = 0, close: str = "stdout"
) -> tuple[int, bytes]:
    """Run ``python -m contextwindow ARGS`` with its stdout (or stderr) on a real pipe
    whose reader reads ``read_lines`` lines (or ``read_bytes`` bytes) and then closes it,
    as ``| head -N`` (``| head -c N``) does (neither: closed before the program starts, so
    its first write fails). Returns the exit code and what the program wrote on the other
    stream."""
    import os
    import subprocess
    import sys

    r, w = os.pipe()
    if not read_lines and not read_bytes:
        os.close(r)
    target = {"stdout": w} if close == "stdout" else {"stderr": w}
    other = "stderr" if close == "stdout" else "stdout"
    proc = subprocess.Popen([sys.executable, "-m", "contextwindow", *args], **target, **{other: subprocess.PIPE})
    os.close(w)
    if read_lines or read_bytes:
        with os.fdopen(r, "rb") as reader:
            for _ in range(read_lines):
                reader.readline()
            reader.read(read_bytes)
    out, err = proc.communicate()
    return proc.returncode, out if close == "stderr" else err


def test_closed_pipe_keeps_the_commands_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """fresh9 C1: ``validate bad.json | head -2`` exited 0. The tester's cases: 20,000
    violations read two lines deep (1, as without the pipe), a missing file with stderr
    closed (2), ``fit`` that does not fit (1) and one that fits (141 = 128 + SIGPIPE,
    what a shell reports for ``cat`` in the same pipeline). Nothing is printed about the
    broken pipe at exit (stdout goes to devnull once its reader has gone)."""
    body = {
        "messages": [{"role": "user", "content": "q"}]
        + [{"role": "tool", "tool_call_id": f"x{i}", "content": "r"} for i in range(20000)]
    }
    viol = write(tmp_path, "viol.json", json.dumps(body))
    assert _run_closed(["validate", viol], read_lines=2) == (1, b"")
    assert _run_closed(["validate", viol]) == (1, b"")
    code, _ = _run_closed(["count", str(tmp_path / "nonexistent.json")], close="stderr")
    assert code == 2
    out = str(tmp_path / "o.json")
    assert _run_closed(["fit", str(EXAMPLE), "--budget", "0", "-o", out]) == (1, b"")
    assert _run_closed(["fit", str(EXAMPLE), "--budget", "2000", "-o", out]) == (141, b"")
    assert _run_closed(["inspect", str(EXAMPLE)], read_lines=1) == (141, b"")
    assert _run_closed(["--help"]) == (141, b"")
    # fresh10: an output over the pipe's 64 KiB read 10 bytes deep: the buffered write
    # returned the part the pipe took (65,536 bytes) without raising, and fit exited 0
    big = write(tmp_path, "big.json", json.dumps({"messages": [{"role": "user", "content": "word " * 40_000}]}))
    code, err = _run_closed(["fit", big, "--budget", "100000"], read_bytes=10)
    assert code == 141 and err.endswith(b"unchanged: the conversation already fits\n")
    # the same commands with a reader that takes everything: their own codes
    assert main(["validate", viol]) == 1
    assert main(["fit", str(EXAMPLE), "--budget", "2000", "-o", out]) == 0


C3_BODY = {
    "system": [{"type": "text", "text": "sys"}],
    "messages": [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "a", "name": "f", "input": {}},
                {"type": "tool_use", "id": "b", "name": "g", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "b", "content": "rb"},
                {"type": "tool_result", "tool_use_id": "zz", "content": "orphan"},
            ],
        },
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "next"},
    ],
}


def test_inspect_numbers_messages_as_validate_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """fresh9 C3: with a top-level Anthropic ``system``, ``inspect`` called the assistant
    message that ``validate`` and ``repair`` call ``message 1`` row ``2`` and turn 1
    ``1-4``. The text output now numbers by the file's ``messages`` (the system is
    ``system``), and a message calling f and g is labelled with both; ``--json`` keeps
    the engine's numbering (system is entry 0), as the README says."""
    monkeypatch.setenv("COLUMNS", "120")
    f = write(tmp_path, "c3.json", json.dumps(C3_BODY))
    assert main(["validate", f]) == 1
    assert f"{f}: message 1: unanswered_call" in capsys.readouterr().out
    assert main(["inspect", f, "--top", "6"]) == 0
    out = capsys.readouterr().out
    turns = out[out.index("by turn") : out.index("by tool")]
    # preamble: the system; turn 1: messages 0-3 of the file; turn 2: message 4
    rows = [[c.strip() for c in line.split("│")[:2]] for line in turns.splitlines()[3:] if line.strip()]
    assert rows == [["preamble", "system"], ["1", "0-3"], ["2", "4"]]
    largest = out[out.index("largest messages") :].split("tool schemas")[0]
    rows = [line.split("│")[:2] for line in largest.splitlines()[3:] if line.strip()]
    got = {r[0].strip(): r[1].strip() for r in rows}
    # every message once, by its index in the file's messages, the system as "system"
    assert got == {
        "system": "system",
        "0": "user",
        "1": "assistant (f, g)",
        "2": "user (g, (no matching call))",
        "3": "assistant",
        "4": "user",
    }
    assert main(["inspect", f, "--json", "--top", "6"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert sorted(m["index"] for m in js["largest"]) == [0, 1, 2, 3, 4, 5]
    assert [(t["turn"], t["start"], t["end"]) for t in js["by_turn"]] == [(0, 0, 1), (1, 1, 5), (2, 5, 6)]
    by_index = {m["index"]: m for m in js["largest"]}
    assert (by_index[2]["tool"], by_index[2]["tools"]) == ("f", ["f", "g"])
    # "tool" is the costlier result's: "orphan" (3 tokens) over "rb" (1) (fresh33 #4)
    assert (by_index[3]["tool"], by_index[3]["tools"]) == ("(no matching call)", ["g", "(no matching call)"])
    assert (by_index[4]["tool"], by_index[4]["tools"]) == (None, [])


@pytest.mark.parametrize("sep", ["\u2028", "\u2029", "\u0085"])
def test_jsonl_message_may_hold_unicode_line_breaks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sep: str
) -> None:
    """JSON strings may hold U+2028, U+2029 and U+0085 as they are; the JSONL reader split
    lines at them (``str.splitlines``) and refused the file as invalid JSON. Lines end at
    ``\\n`` only; the count is the dict path's."""
    msgs = [{"role": "user", "content": f"first{sep}second"}, {"role": "assistant", "content": "ok"}]
    f = tmp_path / "chat.jsonl"
    f.write_text("".join(json.dumps(m, ensure_ascii=False) + "\n" for m in msgs), encoding="utf-8")
    assert sep in f.read_text(encoding="utf-8")
    assert main(["count", str(f)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{f}: {cw.count_messages(msgs)} tokens, 2 messages")


@pytest.mark.parametrize("value", ["1_000", "\u0661\u0662\u0663", " 5", "5 ", "+5"])
def test_integer_options_take_ascii_digits_only(capsys: pytest.CaptureFixture[str], value: str) -> None:
    """fresh9 C2: ``--budget`` took what ``int()`` takes: ``1_000``, spaces, Arabic-Indic
    digits (``١٢٣`` ran as 123). A usage error now, as ``1e3`` or ``0x10`` were."""
    for argv in (
        ["fit", "examples/agent_session.json", "--budget", value],
        ["inspect", "examples/agent_session.json", "--top", value],
    ):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        assert f"invalid int value: {value!r} (digits 0-9 only)" in capsys.readouterr().err


def test_integer_option_with_too_many_digits(capsys: pytest.CaptureFixture[str]) -> None:
    """fresh10 N8: a 5,000-digit --budget said "invalid _int value: '999...'" (the helper's
    name and all 5,000 digits): Python reads at most 4,300 digits."""
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "examples/agent_session.json", "--budget", "9" * 5000])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --budget: invalid int value: 5,000 digits, more than Python reads" in err
    assert "_int" not in err and "9" * 100 not in err


@pytest.mark.parametrize("kind", ["jsonl", "json"])
def test_output_escapes_unicode_line_breaks_so_splitlines_reads_it(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes], kind: str
) -> None:
    """fresh10 N7: U+0085 (and U+2028, U+2029) went out as they are; ``str.splitlines``
    splits there, so a JSONL reader using it read one message as two lines. They are
    written as JSON escapes now, in conversations and in ``--json`` reports; the value
    read back is the same."""
    msgs = [
        {"role": "system", "content": "sys\u2028line"},
        {"role": "user", "content": "old\x85one " * 400},
        {"role": "assistant", "content": "a\u2029b"},
        {"role": "user", "content": "last\x85one"},
    ]
    f = tmp_path / f"chat\x85.{kind}"
    if kind == "jsonl":
        f.write_text("".join(json.dumps(m, ensure_ascii=False) + "\n" for m in msgs), encoding="utf-8")
    else:
        f.write_text(json.dumps({"model": "m", "messages": msgs}, ensure_ascii=False), encoding="utf-8")
    # budget 60: the first turn (400 repeats of "old\x85one ") goes, a breadcrumb message
    # takes its place; the system prompt and the last turn stay
    for budget, kept in (("100000", msgs), ("60", [msgs[0], msgs[3]])):
        assert main(["fit", str(f), "--budget", budget]) == 0
        out = capsysbinary.readouterr().out.decode()
        for raw in ("\x85", "\u2028", "\u2029"):
            assert raw not in out
        assert "\\u0085" in out and "\\u2028" in out
        lines = out.splitlines()
        assert lines == out.split("\n")[:-1]  # the same lines by Python's rule as by JSON Lines'
        if kind == "jsonl":
            got = [json.loads(line) for line in lines]
        else:
            got = json.loads(out)["messages"]
        assert [m for m in got if m["content"] != cw.messages.BREADCRUMB] == kept
        assert len(got) == len(kept) + (budget == "60")
    # a --json report (its "file" holds U+0085) is one line by splitlines too
    assert main(["count", str(f), "--json"]) == 0
    out = capsysbinary.readouterr().out.decode()
    assert out.splitlines() == [out.rstrip("\n")] and json.loads(out)[0]["file"] == str(f)


@pytest.mark.parametrize("command", [["count"], ["validate"], ["repair"], ["inspect"], ["fit", "--budget", "100"]])
def test_a_tool_definition_that_is_not_an_object_is_refused_by_every_command(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fresh11 N2: count, fit and inspect refused ``"tools": ["x"]``; validate said "valid
    for openai" and repair wrote it back. The README says such a tool definition is
    refused on all three paths (dict, gateway, CLI)."""
    f = tmp_path / "t.json"
    # tools[0] is well formed (a function tool with no name is refused too, fresh16a F5)
    tools = [{"type": "function", "function": {"name": "f"}}, "x"]
    f.write_text(json.dumps({"messages": [{"role": "user", "content": "q"}], "tools": tools}))
    assert main([command[0], str(f), *command[1:]]) == 2
    err = capsys.readouterr().err
    assert err == f"contextwindow: error: {f}: tools[1]: a tool definition must be an object, got a string\n"


def test_tool_names_and_call_ids_reach_the_terminal_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """fresh11 N2: a tool name or call id holding an escape sequence (``\\x1b[31m`` turned
    the terminal red) or U+2028 was printed as it was by ``inspect`` and ``repair``, and
    ``validate`` wrote Rust's ``\\u{1b}``. All three escape it as errors quote strings."""
    call = {"id": "c\x1b[31mX", "type": "function", "function": {"name": "ls\x1b[31m\u2028", "arguments": "{}"}}
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "user", "content": "next"},
    ]
    f = tmp_path / "esc.json"
    f.write_text(json.dumps({"messages": msgs}))
    assert main(["inspect", str(f)]) == 0
    out = capsys.readouterr().out
    assert "assistant (ls\\u001b[31m\\u2028)" in out and "\x1b" not in out and "\u2028" not in out
    assert main(["validate", str(f)]) == 1
    assert capsys.readouterr().out == (
        f'{f}: message 1: unanswered_call: tool call "c\\u001b[31mX" has no result before the next non-tool message\n'
    )
    assert main(["repair", str(f), "-o", str(tmp_path / "o.json")]) == 0
    assert capsys.readouterr().out == f"{f}: 1 change(s) to tool pairs\n  message 1: stub_inserted (c\\u001b[31mX)\n"
    # the Python API's detail says the same
    assert (
        cw.validate(msgs, "openai")[0].detail
        == 'tool call "c\\u001b[31mX" has no result before the next non-tool message'
    )


# fresh14 finding 5: the CLI moved an Anthropic system message out of "messages" into a
# top-level "system" (even when nothing was trimmed); fit_request keeps it where it was.
_SYS_CALL = {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}
_SYS_RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "res"}]}
_SYS_TOOL_CHAT = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": [{"type": "text", "text": "old question here ok"}]},
    _SYS_CALL,
    _SYS_RESULT,
    {"role": "user", "content": "new"},
]
_SYS_PLAIN = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "a"},
    {"role": "assistant", "content": "b"},
    {"role": "user", "content": "c"},
]
_SYS_BODIES: dict[str, tuple[dict[str, Any], int, list[str]]] = {
    # the tester's reproducers: trimmed, and unchanged with --format anthropic
    "tool_body_trimmed": ({"model": "m", "messages": _SYS_TOOL_CHAT, "max_tokens": 5}, 15, []),
    "plain_body_unchanged": ({"messages": _SYS_PLAIN}, 1000, ["--format", "anthropic"]),
    "plain_body_trimmed": ({"messages": _SYS_PLAIN}, 10, ["--format", "anthropic"]),
    "tool_body_unchanged": ({"model": "m", "messages": _SYS_TOOL_CHAT, "max_tokens": 5}, 1000, []),
    "corpus_file": ({"format": "anthropic", "messages": _SYS_TOOL_CHAT}, 15, []),
    "corpus_file_unchanged": ({"format": "anthropic", "messages": _SYS_TOOL_CHAT}, 1000, []),
    "system_null": ({"system": None, "messages": _SYS_TOOL_CHAT}, 15, ["--format", "anthropic"]),
    # a top-level system stays top-level
    "top_level_trimmed": ({"model": "m", "system": "S", "messages": _SYS_TOOL_CHAT[1:]}, 15, []),
    "top_level_blocks": ({"system": [{"type": "text", "text": "S"}], "messages": _SYS_TOOL_CHAT[1:]}, 15, []),
    "top_level_unchanged": ({"model": "m", "system": "S", "messages": _SYS_TOOL_CHAT[1:]}, 1000, []),
}


@pytest.mark.parametrize("name", list(_SYS_BODIES))
def test_fit_keeps_an_anthropic_system_where_the_file_had_it(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`contextwindow fit` writes the document `fit_request` returns on the same bytes: a
    system message inside `messages` stays there, a top-level `system` stays top-level."""
    doc, budget, extra = _SYS_BODIES[name]
    body = json.dumps(doc).encode()
    f = write(tmp_path, "body.json", body)
    code = main(["fit", f, "--budget", str(budget), *extra])
    cli = json.loads(capsys.readouterr().out)
    out, rep = cw.fit_request(body, budget=budget, provider="anthropic", report=True)
    assert cli == json.loads(out)
    assert code == (0 if rep.report.fits else 1)
    assert ("system" in cli) == ("system" in doc)
    if "system" in doc:
        assert cli["system"] == doc["system"]
    else:
        assert cli["messages"][0] == {"role": "system", "content": "S"}


def test_fit_keeps_the_system_message_in_the_testers_body(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The first reproducer, checked by hand: budget 15 keeps the system (3 + 1 tokens)
    and the request "new" (3 + 1); the old tool turn goes. No top-level "system"."""
    f = write(tmp_path, "c4.json", json.dumps(_SYS_BODIES["tool_body_trimmed"][0]))
    assert main(["fit", f, "--budget", "15"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "model": "m",
        "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "new"}],
        "max_tokens": 5,
    }


@pytest.mark.parametrize("kind", ["list", "jsonl"])
def test_fit_keeps_the_system_message_of_a_list_or_jsonl_read_as_anthropic(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = json.dumps(_SYS_TOOL_CHAT) if kind == "list" else "\n".join(json.dumps(m) for m in _SYS_TOOL_CHAT)
    f = write(tmp_path, f"c.{kind}", text)
    assert main(["fit", f, "--budget", "15", "--format", "anthropic"]) == 0
    out = capsys.readouterr().out
    got = json.loads(out) if kind == "list" else [json.loads(line) for line in out.splitlines()]
    body = json.dumps({"messages": _SYS_TOOL_CHAT}).encode()
    assert got == json.loads(cw.fit_request(body, budget=15, provider="anthropic"))["messages"]
    assert got[0] == {"role": "system", "content": "S"}


@pytest.mark.parametrize("top_level", [False, True])
def test_repair_keeps_an_anthropic_system_where_the_file_had_it(
    top_level: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`repair` writes through the same code as `fit`: a stub answers the open call and
    the system prompt stays where it was."""
    chat = [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}, _SYS_CALL]
    doc: dict[str, Any] = {"model": "m", "messages": chat}
    if top_level:
        doc = {"model": "m", "system": "S", "messages": chat[1:]}
    f = write(tmp_path, "c.json", json.dumps(doc))
    assert main(["repair", f]) == 0
    got = json.loads(capsys.readouterr().out)
    fixed = cw.repair_tool_pairs(chat, format="anthropic").messages
    if top_level:
        assert got == {"model": "m", "system": "S", "messages": fixed[1:]}
    else:
        assert got == {"model": "m", "messages": fixed}
    assert len(fixed) == 4 and fixed[0] == chat[0]


# fresh16a F1: a top-level "format" is the corpus convention only when it names a provider
# ("openai" or "anthropic"); any other value (Ollama's /api/chat "json" or a JSON schema
# for structured output, null) is an unknown key, copied, as fit_request copies it. And
# where it names one, the CLI and the gateway both read the body in that shape.
_OLLAMA = {
    "model": "llama3.2",
    "messages": [{"role": "user", "content": "Why is the sky blue?"}],
    "format": "json",
    "stream": False,
}
_SCHEMA = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}


@pytest.mark.parametrize("value", ["json", _SCHEMA, None, "gemini", "", "OpenAI", 1])
def test_a_format_key_that_names_no_provider_is_an_unknown_key(
    value: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tester's Ollama body: ``count``, ``fit`` (with and without ``--format``) and
    ``validate`` read it as the gateway does; ``fit`` writes the key back unchanged."""
    doc = {**_OLLAMA, "format": value}
    body = json.dumps(doc).encode()
    f = write(tmp_path, "ollama.json", body)
    assert main(["count", f, "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    # "Why is the sky blue?": 10 tokens with its message overhead (the tester's
    # count_request said 9 at 3 per message; the role token makes it 4)
    assert row["tokens"] == cw.count_request(body) == 10
    assert row["format"] == "openai"
    assert main(["validate", f]) == 0
    capsys.readouterr()
    for extra, provider in (([], None), (["--format", "openai"], "openai"), (["--format", "anthropic"], "anthropic")):
        assert main(["fit", f, "--budget", "100", *extra]) == 0
        cli = json.loads(capsys.readouterr().out)
        assert cli == json.loads(cw.fit_request(body, budget=100, provider=provider)) == doc


def test_a_long_format_key_is_an_unknown_key_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = {"format": "z" * 500, "messages": [{"role": "user", "content": "a"}]}
    assert main(["fit", write(tmp_path, "z.json", json.dumps(doc)), "--budget", "100"]) == 0
    assert json.loads(capsys.readouterr().out) == doc


_CF_CHAT = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "old " * 100},
    {"role": "assistant", "content": "ans " * 100},
    {"role": "user", "content": "new"},
]


def test_a_corpus_anthropic_key_reads_the_same_in_the_cli_and_the_gateway(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tester's second reproducer: a chat with a leading system message under
    ``"format": "anthropic"``. Both read it as Anthropic's: the breadcrumb is a leading
    text block of the request (one user message), not a user message of its own, which
    would put two user messages in a row."""
    doc = {"format": "anthropic", "messages": _CF_CHAT}
    body = json.dumps(doc).encode()
    f = write(tmp_path, "cf.json", body)
    assert main(["fit", f, "--budget", "40"]) == 0
    cli = json.loads(capsys.readouterr().out)
    out, rep = cw.fit_request(body, budget=40, report=True)
    assert rep.provider == "anthropic"
    assert cli == json.loads(out)
    assert cli == {
        "format": "anthropic",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": [{"type": "text", "text": cw.BREADCRUMB}, {"type": "text", "text": "new"}]},
        ],
    }
    # --format / provider= name the shape over the key, the same way on both paths
    assert main(["fit", f, "--budget", "40", "--format", "openai"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert cli == json.loads(cw.fit_request(body, budget=40, provider="openai"))
    assert [m["role"] for m in cli["messages"]] == ["system", "user", "user"]


def test_a_corpus_openai_key_reads_the_same_in_the_cli_and_the_gateway(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tester's third reproducer: ``"format": "openai"`` next to a top-level
    ``system``. The key names the shape, so the body is OpenAI's on both paths and its
    ``system`` is an unknown key (not counted, copied): "hi" is 5 tokens (1 + 4 per message)."""
    doc = {"format": "openai", "system": "You are a pirate. " * 50, "messages": [{"role": "user", "content": "hi"}]}
    body = json.dumps(doc).encode()
    f = write(tmp_path, "fo.json", body)
    assert main(["count", f, "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert (row["tokens"], row["format"]) == (5, "openai")
    assert cw.count_request(body) == 5
    assert cw.fit_request(body, budget=5, report=True)[1].provider == "openai"
    # --format anthropic reads the top-level system: 255 tokens on both paths (253 at 3
    # per message: the system and "hi" are 2 messages)
    assert main(["count", f, "--json", "--format", "anthropic"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["tokens"] == cw.count_request(body, provider="anthropic") == 255


def test_a_corpus_key_spelled_with_escapes_is_read_the_same(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """JSON escapes in the key and its value: the same key and value to both readers."""
    text = json.dumps({"format": "anthropic", "messages": _CF_CHAT}).replace(
        '"format": "anthropic"', '"\\u0066ormat": "\\u0061nthropic"'
    )
    assert "\\u0066ormat" in text
    f = write(tmp_path, "esc.json", text)
    assert main(["fit", f, "--budget", "40"]) == 0
    cli = json.loads(capsys.readouterr().out)
    out, rep = cw.fit_request(text.encode(), budget=40, report=True)
    assert rep.provider == "anthropic" and cli == json.loads(out)
    assert len(cli["messages"]) == 2


# fresh16a F2: `fit --json` without -o printed the report alone and threw the fitted
# conversation away (exit 0). The conversation goes where it goes without --json (stdout
# unless -o names a file) and the JSON report where the text summary goes (stderr, or
# stdout when -o takes the conversation); `repair --json` the same.
@pytest.mark.parametrize("output", [[], ["-o", "-"]])
def test_fit_json_without_a_file_keeps_the_conversation(output: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """The tester's command: the conversation on stdout (``fit_request``'s document on
    the same bytes), the report on stderr, one JSON line, the same as with ``-o FILE``."""
    body = EXAMPLE.read_bytes()
    assert main(["fit", str(EXAMPLE), "--budget", "2000", "--json", *output]) == 0
    captured = capsys.readouterr()
    out, rep = cw.fit_request(body, budget=2000, report=True)
    assert json.loads(captured.out) == json.loads(out)
    assert captured.err.count("\n") == 1
    report = json.loads(captured.err)
    assert (report["file"], report["budget"], report["tool_tokens"]) == (str(EXAMPLE), 2000, rep.tool_tokens)
    assert report["report"] == json.loads(msgspec.json.encode(rep.report))
    assert report["report"]["fits"] is True and report["report"]["reason"] == "token_budget"


def test_fit_json_with_a_file_prints_the_report_on_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    o = tmp_path / "o.json"
    assert main(["fit", str(EXAMPLE), "--budget", "2000", "--json", "-o", str(o)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert json.loads(captured.out)["report"]["fits"] is True
    assert json.loads(o.read_bytes()) == json.loads(cw.fit_request(EXAMPLE.read_bytes(), budget=2000))


@pytest.mark.parametrize("output", [[], ["-o", "-"]])
def test_repair_json_without_a_file_keeps_the_conversation(
    output: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chat = [{"role": "user", "content": "hi"}, _SYS_CALL]
    f = write(tmp_path, "c.json", json.dumps({"model": "m", "messages": chat}))
    assert main(["repair", f, "--json", *output]) == 0
    captured = capsys.readouterr()
    fixed = cw.repair_tool_pairs(chat, format="anthropic")
    assert json.loads(captured.out) == {"model": "m", "messages": fixed.messages}
    assert len(fixed.messages) == 3  # the stub result of call "t"
    assert json.loads(captured.err) == json.loads(msgspec.json.encode(fixed.report))


@pytest.mark.parametrize(
    ("body", "offset", "utf8"),
    [
        # five invalid bytes before the error: the x is the file's byte 48 (was 58)
        (b'{"messages":[{"role":"user","content":"\xff\xff\xff\xff\xff"}] x}', 48, 39),
        # the ] after a trailing comma is the file's byte 45 (was 47)
        (b'{"messages":[{"role":"user","content":"a\xffb"},]}', 45, 40),
        # a 3-byte sequence cut after 2 bytes reads as one U+FFFD (3 bytes): one more
        (b'{"messages":[{"role":"user","content":"a\xe2\x82b"},]}', 46, 40),
        # a BOM, which the CLI skips: its 3 bytes count
        (b'\xef\xbb\xbf{"messages":[{"role":"user","content":"ab"},]}', 47, None),
        # 200,000 invalid bytes: one decode records them (a decode of the rest after each
        # was quadratic); the x is at 39 + 200,000 + 4
        (b'{"messages":[{"role":"user","content":"' + b"\xff" * 200_000 + b'"}] x}', 200_043, 39),
    ],
)
def test_syntax_errors_name_the_files_byte_after_invalid_utf8_or_a_bom(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: bytes, offset: int, utf8: int | None
) -> None:
    """fresh17c #3: the CLI read invalid bytes as U+FFFD (3 bytes each) and skipped a BOM,
    then named the byte of that text, not of the file, and did not say the file was not
    UTF-8. The offsets were checked by hand against the bodies."""
    f = write(tmp_path, "bad.json", body)
    assert main(["count", f]) == 2
    err = capsys.readouterr().err
    assert f"(byte {offset})" in err, err
    if utf8 is None:
        assert err.endswith(f"(byte {offset})\n"), err
    else:
        assert err.endswith(f"; the file is not UTF-8 from byte {utf8} (such bytes read as U+FFFD)\n"), err


@pytest.mark.parametrize(
    ("body", "line", "column", "offset", "problem"),
    [
        # the first value is 15 bytes (0-14); the second starts at 15
        (b'{"messages":[]}{"messages":[]}', 1, 16, 15, "trailing characters"),
        (b'{"messages":[]}[1]', 1, 16, 15, "trailing characters"),
        (b'{"messages":[]}1', 1, 16, 15, "trailing characters"),
        (b'{"messages":[]}"x"', 1, 16, 15, "trailing characters"),
        (b'{"messages":[]} x', 1, 17, 16, "trailing characters"),
        # the first value is 44 bytes; a second one cut short is no "truncated" input
        (b'{"messages":[{"role":"user","content":"x"}]}{', 1, 45, 44, "trailing characters"),
        # two values on two lines, the first not a message: no JSONL, one document
        (b"[1]\n[2]", 2, 1, 4, "trailing characters"),
        # truncated: the length of the body, in the gateway's words
        (b'{"messages":[', 1, 14, 13, "EOF while parsing a list"),
        # cut after a comma of the top-level object, which the gateway reads itself
        (b'{"messages": [], ', 1, 18, 17, "EOF while parsing a value"),
        (b'{"messages": [\n  {"role": "user",\n   "content": "hi', 3, 18, 51, "EOF while parsing a string"),
    ],
)
def test_a_second_value_or_a_cut_is_named_as_the_gateway_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: bytes, line: int, column: int, offset: int, problem: str
) -> None:
    """fresh17c #5: a value after the first got msgspec's byte, one too far, and words
    (``JSON is malformed: trailing characters (byte 16)`` where ``fit_request`` says ``at
    byte 15: trailing characters``), a second value cut short and a truncated file
    ``Input data was truncated`` (no byte) where it says ``EOF while parsing``."""
    with pytest.raises(cw.InvalidRequestError) as info:
        cw.fit_request(body, budget=9)
    assert info.value.offset == offset
    assert str(info.value) == f"invalid request body at byte {offset}: {problem}"
    f = write(tmp_path, "bad.json", body)
    assert main(["count", f]) == 2
    err = capsys.readouterr().err
    assert err == f"contextwindow: error: {f}: invalid JSON: line {line}, column {column}: {problem} (byte {offset})\n"


def test_request_bodies_one_a_line_are_named_as_such(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """fresh18 F3: a log of request bodies, one a line, was read as JSONL of messages and
    said "message 0, field role: is missing", naming no line."""
    body = b'{"messages": [{"role": "user", "content": "x"}]}\n'
    f = write(tmp_path, "two.json", body + body)
    assert main(["count", f]) == 2
    assert capsys.readouterr().err == (
        f'contextwindow: error: {f}: line 1: a request body (it has "messages"), where JSONL holds one'
        " message per line; pass one request body per file\n"
    )
    # a message line, then a body: the body's line
    f = write(tmp_path, "mixed.jsonl", b'{"role": "user", "content": "x"}\n' + body)
    assert main(["count", f]) == 2
    assert f"{f}: line 2: a request body" in capsys.readouterr().err


def test_a_jsonl_lines_error_names_the_files_byte(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """fresh17c #3 (JSONL) and #5: a line's error named a byte of the line, counted in the
    decoded text (3 bytes for each invalid byte, read as U+FFFD), after msgspec's words
    for a second value. Now the file's byte (0-based), in serde_json's words, and where
    the file stops being UTF-8. Offsets by hand: line 1 is 30 bytes and its newline."""
    first = b'{"role":"user","content":"hi"}\n'
    assert len(first) == 31
    cases = [
        # two values on line 2: the second starts at its byte 29, the file's 31 + 29
        (first + b'{"role":"user","content":"a"}{"x":1}\n', "trailing characters (byte 60)", None),
        # two invalid bytes on line 2 (at 31 + 27): the x is the line's byte 32, the file's 63
        (first + b'{"role":"user","content":"a\xff\xffb" x}\n', "expected `,` or `}` (byte 63)", 58),
        # an invalid byte on line 1, inside a string: line 2's offsets move by 1, not 3
        (b'{"role":"user","content":"h\xff"}\n{"role":"user","content":"a",}\n', "trailing comma (byte 60)", 27),
        # a BOM: the file's bytes count it
        (b"\xef\xbb\xbf" + first + b'{"role":"user","content":"a",}\n', "trailing comma (byte 63)", None),
        # a line cut short: its end, the file's byte
        (
            first + b'{"role":"user","content":"a\n{"role":"user","content":"b"}\n',
            "EOF while parsing a string (byte 58)",
            None,
        ),
    ]
    for body, said, utf8 in cases:
        f = write(tmp_path, "bad.jsonl", body)
        assert main(["count", f]) == 2
        err = capsys.readouterr().err
        tail = f"; the file is not UTF-8 from byte {utf8} (such bytes read as U+FFFD)" if utf8 is not None else ""
        assert err == f"contextwindow: error: {f}: line 2: invalid JSON: {said}{tail}\n", body


def test_a_bad_line_after_a_message_is_a_jsonl_lines_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The one wording for a file whose first line is a message and a later line is bad
    (cli18's leftover, decided in tools19): the CLI reads such a file as JSONL, so the bad
    line is named as a line, in serde_json's words and the file's byte. The gateway, which
    reads one body, says "trailing characters" where the second line starts, and so
    does the CLI for the same values on one line (one document); for the JSONL file that
    would blame line 2 for line 3 here. Offsets by hand: each good line is 30 bytes and
    its newline."""
    first = b'{"role":"user","content":"a"}\n'
    assert len(first) == 30
    cases = [
        (first + b"}\n", "line 2: invalid JSON: expected value (byte 30)", 30),
        (first + first + b"]\n", "line 3: invalid JSON: expected value (byte 60)", 30),
        (first + b'{"role": oops}\n', "line 2: invalid JSON: expected value (byte 39)", 30),
        # one line: a document followed by a second value
        (first[:-1] + b" }\n", "invalid JSON: line 1, column 31: trailing characters (byte 30)", 30),
    ]
    for body, said, gateway_at in cases:
        f = write(tmp_path, "t.jsonl", body)
        assert main(["count", f]) == 2
        assert capsys.readouterr().err == f"contextwindow: error: {f}: {said}\n", body
        with pytest.raises(cw.InvalidRequestError) as info:
            cw.count_request(body)
        assert str(info.value) == f"invalid request body at byte {gateway_at}: trailing characters"


def _surrogate_chat(system: bool) -> dict[str, Any]:
    """A body whose every part holds an escaped lone surrogate (json.dumps writes a lone
    surrogate code point as its escape, and json.loads reads it back so)."""
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": "old \ud800 " * 60},
        {"role": "assistant", "content": "ok"},
    ]
    msgs += [{"role": "user", "content": "now \udc00 please", "x\udbff": 1}]
    body: dict[str, Any] = {"model": "m \ud800", "messages": msgs, "extra": {"k\udfff": ["\ud800v"]}}
    body["note\ud800"] = "a top-level key holding one"
    if system:
        body["system"] = "sys \ud800 prompt"
        body["tools"] = [{"name": "f\ud800", "input_schema": {"type": "object"}}]
    else:
        msgs.insert(0, {"role": "system", "content": "sys \ud800 prompt"})
        body["tools"] = [{"type": "function", "function": {"name": "f\ud800", "parameters": {}}}]
    return body


@pytest.mark.parametrize("system", [False, True])
@pytest.mark.parametrize("budget", [30, 60, 200, 5000])
def test_fit_writes_the_gateways_document_with_lone_surrogates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], system: bool, budget: int
) -> None:
    """fresh17c #9: ``fit`` wrote U+FFFD for every escaped lone surrogate (``"sys \\ud800
    prompt"`` became ``"sys \ufffd prompt"``), where ``fit_request`` keeps the escape
    outside the messages the engine writes; the README says ``fit`` writes the document
    ``fit_request`` gives on the same bytes. Now the same values (json.loads keeps a lone
    surrogate): the escapes as read in the model, the tools, unknown keys, keys, a
    top-level ``system`` and the messages kept; U+FFFD only in a message the engine
    wrote (the breadcrumb's, a cut one)."""
    body = json.dumps(_surrogate_chat(system)).encode()
    f = write(tmp_path, "s.json", body)
    code = main(["fit", f, "--budget", str(budget)])
    out = capsys.readouterr().out.encode()
    gateway, rep = cw.fit_request(body, budget=budget, report=True)
    assert code == (0 if rep.report.fits else 1)
    assert json.loads(out) == json.loads(gateway)
    assert b"\\ud800" in out and b'"m \\ud800"' in out
    kept = [f.fate for f in rep.report.fates].count("kept")
    assert kept >= 2  # the system prompt and the request at least


def test_fit_and_repair_keep_lone_surrogates_in_lists_and_jsonl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same for a bare list and JSONL, which the gateway does not read: every message
    passed back as read keeps its escapes; one the engine writes has U+FFFD."""
    msgs = [
        {"role": "user", "content": "old \ud800 " * 60},
        {"role": "assistant", "content": "ok \udc00"},
        {"role": "user", "content": "now \udbff"},
    ]
    text = json.dumps(msgs)
    lines = "".join(json.dumps(m) + "\n" for m in msgs)
    for name, data in (("s.json", text), ("s.jsonl", lines)):
        f = write(tmp_path, name, data)
        assert main(["fit", f, "--budget", "5000"]) == 0
        out = capsys.readouterr().out
        got = json.loads(out) if name == "s.json" else [json.loads(line) for line in out.splitlines()]
        assert got == msgs
        assert main(["repair", f]) == 0
        out = capsys.readouterr().out
        got = json.loads(out) if name == "s.json" else [json.loads(line) for line in out.splitlines()]
        assert got == msgs
        # trimmed: the old turn dropped, the request takes the breadcrumb (engine-written)
        assert main(["fit", f, "--budget", "40", "--no-breadcrumb"]) == 0
        out = capsys.readouterr().out
        got = json.loads(out) if name == "s.json" else [json.loads(line) for line in out.splitlines()]
        assert got == [msgs[2]]
        assert main(["fit", f, "--budget", "40"]) == 0
        out = capsys.readouterr().out
        got = json.loads(out) if name == "s.json" else [json.loads(line) for line in out.splitlines()]
        assert len(got) == 1 and "\ufffd" in json.dumps(got[0], ensure_ascii=False) and "\udbff" not in str(got)


def test_inspect_lists_the_largest_turns_when_there_are_more_than_top(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """fresh20b #11: ``inspect`` printed one row per turn (50,000 for a 200,000-message log,
    most of its 26 s). With more turns than ``--top``: the preamble (no turn), the
    ``--top`` largest turns in turn order, and one row summing the rest. ``fim`` by hand:
    the preamble 5 tokens, turns of 14, 24, 34, 5 and 104 (186 in all); the rest 14 + 24 +
    5 = 43, 23.1%."""
    monkeypatch.setenv("COLUMNS", "120")
    texts = ["a" * 40, "b" * 80, "c" * 120, "d" * 4, "e" * 400]
    msgs = [{"role": "system", "content": "s"}, *({"role": "user", "content": t} for t in texts)]
    f = write(tmp_path, "c.json", json.dumps(msgs))
    assert main(["inspect", f, "--profile", "fim", "--top", "2"]) == 0
    out = capsys.readouterr().out
    turns = out[out.index("\nby turn") : out.index("\nlargest messages")].splitlines()
    cells = [[c.strip() for c in line.split("│")][:4] for line in turns if "│" in line]
    assert cells == [
        ["preamble", "0", "5", "2.7%"],
        ["3", "3", "34", "18.3%"],
        ["5", "5", "104", "55.9%"],
        ["3 more turns", "3 messages", "43", "23.1%"],
    ]
    # --top 0 (a new user's finding: "9 more" under a header of 8 turns): the preamble,
    # and every turn in the one row, as many as the header counts
    assert main(["inspect", f, "--profile", "fim", "--top", "0"]) == 0
    out = capsys.readouterr().out
    assert ", 5 turns [openai, fim]" in out and "largest messages" not in out  # no empty table (fresh55 #6)
    turns = out[out.index("\nby turn") :].splitlines()
    cells = [[c.strip() for c in line.split("│")][:4] for line in turns if "│" in line]
    assert cells == [["preamble", "0", "5", "2.7%"], ["5 more turns", "5 messages", "181", "97.3%"]]
    # one turn past --top: "1 more turn"
    assert main(["inspect", f, "--profile", "fim", "--top", "4"]) == 0
    out = capsys.readouterr().out
    turns = out[out.index("\nby turn") : out.index("\nlargest messages")].splitlines()
    cells = [[c.strip() for c in line.split("│")][:4] for line in turns if "│" in line]
    assert cells[-1] == ["1 more turn", "1 message", "5", "2.7%"]
    # the default --top (10) lists every one of these 6 rows; --json always lists all
    assert main(["inspect", f, "--profile", "fim"]) == 0
    out = capsys.readouterr().out
    assert "more" not in out[out.index("\nby turn") : out.index("\nlargest messages")]
    assert main(["inspect", f, "--profile", "fim", "--top", "2", "--json"]) == 0
    assert [t["tokens"] for t in json.loads(capsys.readouterr().out)["by_turn"]] == [5, 14, 24, 34, 5, 104]


def test_count_and_fit_take_the_structured_output_schema_as_the_gateway(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the schema of response_format counts as the gateway counts it (count_request, fit_request)
    schema = {"type": "object", "properties": {"verdict": {"type": "string", "description": "why " * 30}}}
    doc = {
        "model": "m",
        "messages": chat(6),
        "response_format": {"type": "json_schema", "json_schema": {"name": "v", "schema": schema}},
    }
    body = json.dumps(doc).encode()
    f = write(tmp_path, "req.json", body)
    text = json.dumps(doc["response_format"]["json_schema"], separators=(",", ":"))
    tokens = cw.estimate_tokens(text)
    assert tokens > 30
    total = cw.count_request(body)
    assert total == cw.count_messages(doc["messages"]) + tokens
    assert main(["count", f, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["tokens"], row["schema_tokens"], row["tool_tokens"]) == (total, tokens, 0)
    assert main(["count", f]) == 0
    assert f"{total:,} tokens ({tokens:,} for the output schema)" in capsys.readouterr().out
    budget = total - 1
    out_path = tmp_path / "o.json"
    assert main(["fit", f, "--budget", str(budget), "-o", str(out_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    new, rep = cw.fit_request(body, budget=budget, report=True)
    assert json.loads(out_path.read_bytes()) == json.loads(new)
    assert (report["budget"], report["schema_tokens"], report["report"]["budget"]) == (
        budget,
        rep.schema_tokens,
        rep.report.budget,
    )
    assert rep.report.budget == budget - tokens and rep.report.dropped_turns >= 1
    assert main(["fit", f, "--budget", str(budget), "-o", str(out_path)]) == 0
    assert f"(budget {budget:,}; the output schema takes {tokens:,}) fits" in capsys.readouterr().out
    # a budget the schema alone uses up (fresh25 #5: "the output schema alone take")
    assert main(["fit", f, "--budget", str(tokens), "-o", str(out_path)]) == 1
    assert f"the output schema alone takes {tokens:,} tokens of the budget of {tokens:,}" in capsys.readouterr().out
    # with tools too, and a budget the schemas alone use up
    doc["tools"] = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    f = write(tmp_path, "req2.json", json.dumps(doc))
    tools = cw.count_messages([], tools=doc["tools"])
    assert main(["fit", f, "--budget", str(tools + tokens), "-o", str(out_path)]) == 1
    out = capsys.readouterr().out
    assert f"tool schemas take {tools:,}; the output schema {tokens:,})" in out
    assert f"the schemas alone take {tools + tokens:,} tokens of the budget of {tools + tokens:,}" in out


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (
            "response_format",
            {"type": "json_schema", "json_schema": "x"},
            "response_format.json_schema: must be an object, got a string",
        ),
        (
            "response_format",
            {"type": "json_schema", "json_schema": None},
            "response_format.json_schema: must be an object, got null",
        ),
        ("response_format", {"type": "json_schema"}, "response_format.json_schema: is missing"),
        ("output_config", {"format": {"type": "json_schema"}}, "output_config.format.schema: is missing"),
        (
            "output_config",
            {"format": {"type": "json_schema", "schema": [1]}},
            "output_config.format.schema: must be an object, got an array",
        ),
        (
            "output_format",
            {"type": "json_schema", "schema": "s"},
            "output_format.schema: must be an object, got a string",
        ),
    ],
)
def test_a_json_schema_format_without_a_schema_object_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: Any, reason: str
) -> None:
    # a new user's finding: the schema was counted as 0 (count_request gave 5), and the
    # providers refuse the request; the gateway, its Python mirror and the CLI say so
    doc = {"messages": [{"role": "user", "content": "hi"}], key: value}
    body = json.dumps(doc).encode()
    for call in (lambda: cw.count_request(body), lambda: cw.fit_request(body, budget=100)):
        with pytest.raises(cw.InvalidRequestError) as err:
            call()
        assert str(err.value).endswith(f": {reason}")
    with pytest.raises(cw.InvalidRequestError) as err:
        output_schema_texts(doc)
    assert str(err.value) == reason
    f = write(tmp_path, "req.json", body)
    for argv in (["count", f], ["fit", f, "--budget", "100", "-o", str(tmp_path / "o.json")], ["inspect", f]):
        assert main(argv) == 2
        assert capsys.readouterr().err == f"contextwindow: error: {f}: {reason}\n"
    # other types add nothing and pass, also with a json_schema key of another shape
    for other in ({"type": "json_object"}, {"type": "text", "json_schema": "x"}):
        plain = json.dumps({"messages": [{"role": "user", "content": "hi"}], "response_format": other}).encode()
        assert cw.count_request(plain) == cw.count_messages([{"role": "user", "content": "hi"}])


@pytest.mark.usefixtures("no_llm_env")
def test_fit_model_names_the_output_schema_in_its_budget_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the --model line said "tool schemas take N" for tools plus the output schema
    schema = {"type": "object", "properties": {"answer": {"type": "string"}, "sources": {"type": "array"}}}
    msgs = [{"role": "user", "content": "what is in the report?"}]
    rf = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
    doc: dict[str, Any] = {"format": "openai", "response_format": rf, "messages": msgs}
    from contextwindow.estimate import output_schema_texts

    (text,) = output_schema_texts(doc)
    s = cw.estimate_tokens(text)
    f = write(tmp_path, "req.json", json.dumps(doc))
    out = str(tmp_path / "o.json")
    args = ["fit", f, "--model", "gpt-4o", "--context-window", "1000", "--max-output-tokens", "500", "-o", out]
    assert main(args) == 0
    assert f"messages may use {500 - s:,} (the output schema takes {s:,})" in capsys.readouterr().err
    doc["tools"] = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    f = write(tmp_path, "req.json", json.dumps(doc))
    t = cw.count_messages([], tools=doc["tools"])
    assert main(args) == 0  # the same path, rewritten
    assert f"messages may use {500 - s - t:,} (tool schemas take {t:,}; the output schema {s:,})" in (
        capsys.readouterr().err
    )
    # a capacity the output schema alone exceeds
    del doc["tools"]
    f = write(tmp_path, "req.json", json.dumps(doc))
    assert main(["fit", f, "--model", "gpt-4o", "--context-window", str(s), "--max-output-tokens", "1", "-o", out]) == 1
    assert "; the output schema alone exceeds the capacity" in capsys.readouterr().err


def test_accuracy_prints_the_tables_it_can_when_a_reference_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # fresh23b #6: without mistral-common, "--reference cl100k --reference tekken" printed nothing
    import contextwindow.accuracy as acc

    def counter(name: str) -> Any:
        if name == "tekken":
            raise ImportError("the tekken reference needs: pip install mistral-common")
        return lambda s: len(s.split())

    monkeypatch.setattr(acc, "reference_counter", counter)
    (tmp_path / "ok.json").write_text(json.dumps([{"role": "user", "content": "hello there " * 20}]))
    args = ["accuracy", str(tmp_path), "--profile", "fim", "--json"]
    assert main([*args, "--reference", "cl100k", "--reference", "tekken"]) == 2
    out, err = capsys.readouterr()
    assert [r["reference"] for r in json.loads(out)] == ["cl100k"]
    assert err == "contextwindow: error: the tekken reference needs: pip install mistral-common\n"
    assert main([*args, "--reference", "tekken"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "pip install mistral-common" in err


def test_inspect_shows_the_structured_output_schema_as_count_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    schema = {"type": "object", "properties": {"verdict": {"type": "string", "description": "why " * 30}}}
    doc = {
        "model": "m",
        "messages": chat(2),
        "output_format": {"type": "json_schema", "schema": schema},
    }
    f = write(tmp_path, "req.json", json.dumps(doc))
    tokens = cw.estimate_tokens(json.dumps(schema, separators=(",", ":")))
    total = cw.count_request(json.dumps(doc).encode())
    assert total == cw.count_messages(doc["messages"]) + tokens
    assert main(["inspect", f, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["schema_tokens"], got["total_tokens"] + got["schema_tokens"]) == (tokens, total)
    assert main(["inspect", f]) == 0
    assert f": {total:,} tokens (" in capsys.readouterr().out
    assert main(["inspect", f]) == 0
    assert f" + {tokens:,} output schema)" in capsys.readouterr().out


def test_a_rewritten_message_keeps_the_key_order_it_came_with(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`repair --missing drop` wrote the assistant message it removed a call from with
    `role` first although the file had `content` first: a changed message is written
    with its keys in the input's order (same keys, same values), in the CLI and the API;
    keys the rewrite adds go after them (a stub's `tool_call_id` message is new)."""
    msgs = [
        {"role": "user", "content": "hi", "zeta": 1},
        {
            "content": "let me",
            "role": "assistant",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            "alpha": 2,
        },
        {"role": "user", "content": "next"},
    ]
    f = write(tmp_path, "c.json", json.dumps(msgs))
    assert main(["repair", "--missing", "drop", f]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [list(m) for m in got] == [["role", "content", "zeta"], ["content", "role", "alpha"], ["role", "content"]]
    assert got[1] == {"content": "let me", "role": "assistant", "alpha": 2}
    api = cw.repair_tool_pairs(msgs, missing="drop").messages
    assert [list(m) for m in api] == [list(m) for m in got]
    assert list(msgs[1]) == ["content", "role", "tool_calls", "alpha"]  # the input as it came


def test_fit_unknown_model_names_the_closest(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", str(EXAMPLE), "--model", "claude-sonet-4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("contextwindow: error: unknown model 'claude-sonet-4' (did you mean 'claude-sonnet-4'?):")


@pytest.mark.parametrize(
    ("text", "fmt"),
    [("[]", "openai"), ('{"messages": []}', "openai"), ('{"system": "s", "messages": []}', "anthropic")],
)
def test_inspect_names_an_empty_conversation_as_count_does(
    text: str, fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fresh43 #2: an empty list of messages was named `canonical` by inspect (the
    structs' format, as no item says otherwise) where count named the file's format."""
    f = tmp_path / "e.json"
    f.write_text(text)
    assert main(["count", str(f)]) == 0
    assert f"[{fmt}, conservative]" in capsys.readouterr().out
    assert main(["inspect", str(f), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["format"] == fmt
    assert main(["inspect", str(f)]) == 0
    assert f"[{fmt}, conservative]" in capsys.readouterr().out.splitlines()[0]
