"""The same input gives the same output or the same refusal on every path: the dict API
(Python adapters and the native dict reader), the gateway (``fit_request`` /
``count_request``) and the CLI. Each test is a tester's finding (fresh7 N3, N5-N13)."""

from __future__ import annotations

import decimal
import fractions
import io
import json
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import contextwindow as cw
from contextwindow import _engine, _native
from contextwindow.cli import main
from contextwindow.io import _deepest, _top_keys, load_conversation

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


# ------------------------------------------------------------------ fresh16b #6 and #8


@pytest.mark.parametrize(
    ("declared", "fitted"),
    [
        # a breadcrumb message of its own, as `--format openai` / provider="openai" place it
        ("openai", [{"role": "user", "content": cw.BREADCRUMB}, PLAIN[2]]),
        # Anthropic's rule either way: the leading text block
        ("anthropic", PLAIN_FITTED),
    ],
)
def test_a_declared_format_places_a_plain_chats_breadcrumb_as_the_named_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], declared: str, fitted: list[dict[str, Any]]
) -> None:
    """fresh16b #6: a corpus file's `"format": "openai"` named the shape (README: "as
    `--format` would") but not the breadcrumb's form: the gateway and the CLI placed a
    plain chat's breadcrumb as the leading text block of the undeclared case."""
    doc = {"format": declared, "messages": PLAIN}
    body = json.dumps(doc).encode()
    want = {"format": declared, "messages": fitted}
    assert fitted == cw.trim_turns(PLAIN, budget=40, format=declared).messages
    assert json.loads(cw.fit_request(body, budget=40)) == want
    assert json.loads(cw.fit_request(body, budget=40, provider=declared)) == want
    f = write(tmp_path, "corpus.json", body)
    for named in ([], ["--format", declared]):
        assert main(["fit", f, "--budget", "40", *named]) == 0
        assert json.loads(capsys.readouterr().out) == want


def test_a_plain_chat_under_another_format_value_keeps_the_detected_placement(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only "openai" and "anthropic" declare a shape: Ollama's `"format": "json"` is an
    unknown key, so the plain chat is read undeclared (the leading text block)."""
    body = json.dumps({"format": "json", "messages": PLAIN}).encode()
    want = {"format": "json", "messages": PLAIN_FITTED}
    assert json.loads(cw.fit_request(body, budget=40)) == want
    assert main(["fit", write(tmp_path, "ollama.json", body), "--budget", "40"]) == 0
    assert json.loads(capsys.readouterr().out) == want


@pytest.mark.parametrize(
    ("body", "second"),
    [
        (b'{"format":"openai","format":"anthropic","messages":[{"role":"user","content":"hi"}]}', 19),
        # whatever its value: the gateway reads the key to tell a declared shape
        (b'{"format":"json","format":{"type":"object"},"messages":[{"role":"user","content":"hi"}]}', 17),
    ],
)
def test_a_repeated_top_level_format_is_refused_by_the_gateway_as_by_the_cli(
    tmp_path: Path, body: bytes, second: int
) -> None:
    """fresh16b #8: the gateway read the first of two "format" keys (json.loads and
    serde_json keep the last) where it refuses a repeated "messages", "system" or "tools";
    the CLI refused the file already. The offset is the second key's opening quote."""
    calls = [
        lambda: cw.fit_request(body, budget=100),
        lambda: cw.fit_request(body, budget=100, report=True),
        lambda: cw.fit_request(body, budget=100, provider="anthropic"),
        lambda: cw.count_request(body),
        lambda: cw.count_request(body, provider="openai"),
    ]
    for call in calls:
        with pytest.raises(cw.InvalidRequestError) as err:
            call()
        assert str(err.value) == f'invalid request body at byte {second}: the key "format" appears more than once'
        assert err.value.offset == second
    # the words and offset of a repeated "messages"
    messages = b'{"messages":[],"messages":[{"role":"user","content":"hi"}]}'
    with pytest.raises(cw.InvalidRequestError) as err:
        cw.count_request(messages)
    assert str(err.value) == 'invalid request body at byte 15: the key "messages" appears more than once'
    assert err.value.offset == 15
    f = write(tmp_path, "twice.json", body)
    with pytest.raises(cw.InvalidRequestError) as err:
        load_conversation(f)
    assert str(err.value) == f'{f}: the key "format" appears more than once'


# ----------------------------------------------------------------------------------- N5

SYSTEM_NOT_TEXT = [
    {"type": "tool_use", "id": "t", "name": "f", "input": {}},
    {"type": "tool_result", "tool_use_id": "zz", "content": "r"},
    {"type": "image", "source": {}},
    {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "d"}},
    {"type": "weird"},
]


@pytest.mark.parametrize("block", SYSTEM_NOT_TEXT, ids=[b["type"] for b in SYSTEM_NOT_TEXT])
def test_a_system_holds_text_blocks_only_on_the_dict_path(reader: bool, block: dict[str, Any]) -> None:
    """fresh7 N5: a tool_use in a system was "valid", then repair removed it and rewrote
    the system; an image with "source": {} counted 1,648 tokens. The Messages API takes
    a string or text blocks in `system`; the leading system message stands for it."""
    msgs = [{"role": "system", "content": [{"type": "text", "text": "s"}, block]}, {"role": "user", "content": "a"}]
    for call in (
        lambda: cw.count_messages(msgs, format="anthropic"),
        lambda: cw.validate(msgs, "anthropic", format="anthropic"),
        lambda: cw.repair_tool_pairs(msgs, format="anthropic"),
        lambda: cw.trim_turns(msgs, budget=10**6, format="anthropic"),
        lambda: cw.fit(msgs, 10**6, format="anthropic"),
    ):
        with pytest.raises(cw.InvalidMessageError) as err:
            call()
        assert str(err.value) == "message 0, field content[1]: must be a text block"
        assert (err.value.index, err.value.field) == (0, "content[1]")
    # a text block with extra keys (cache_control) is a text block
    fine = [{"role": "system", "content": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}]}]
    assert cw.count_messages([*fine, msgs[1]], format="anthropic") > 0


@pytest.mark.parametrize("block", SYSTEM_NOT_TEXT, ids=[b["type"] for b in SYSTEM_NOT_TEXT])
def test_a_top_level_system_holds_text_blocks_only_in_gateway_and_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], block: dict[str, Any]
) -> None:
    body = json.dumps(
        {
            "model": "claude",
            "max_tokens": 5,
            "system": [{"type": "text", "text": "s"}, block],
            "messages": [{"role": "user", "content": "a"}],
        }
    ).encode()
    at = body.index(b"[", body.index(b'"system"'))  # the error points at the system value
    for call in (
        lambda: cw.count_request(body),
        lambda: cw.fit_request(body, budget=10**6),
        lambda: cw.fit_request(body, budget=10),
    ):
        with pytest.raises(cw.InvalidRequestError) as err:
            call()
        assert str(err.value) == f"invalid request body at byte {at}: system[1]: must be a text block"
    f = write(tmp_path, "sys.json", body)
    for argv in (["count", f], ["validate", f], ["repair", f], ["fit", f, "--budget", "10"], ["inspect", f]):
        assert main(argv) == 2
        assert capsys.readouterr().err == f"contextwindow: error: {f}: system[1]: must be a text block\n"


def test_a_system_message_inside_an_anthropic_body_holds_text_blocks_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same rule for a system-role message in `messages` (no top-level system)."""
    msgs = [
        {"role": "system", "content": [{"type": "image", "source": {"type": "url", "url": "u"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]},
    ]
    body = json.dumps({"model": "claude", "messages": msgs}).encode()
    with pytest.raises(cw.InvalidMessageError) as err:
        cw.count_request(body)
    assert str(err.value) == "message 0, field content[0]: must be a text block"
    f = write(tmp_path, "m.json", body)
    assert main(["count", f]) == 2
    assert capsys.readouterr().err == f"contextwindow: error: {f}: message 0, field content[0]: must be a text block\n"


# ----------------------------------------------------------------------------------- N6

OPENAI_CALLS = "OpenAI's tool-calling form is not read in an Anthropic message; send tool_use blocks"


def _anthropic_with(key: str, value: Any) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}], key: value},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]},
    ]


OPENAI_KEYS = [
    ("function_call", {"name": "g", "arguments": "x" * 4000}),
    ("tool_calls", [{"id": "c", "type": "custom", "custom": {"name": "p", "input": "x" * 1000}}]),
    ("function_call", False),
]


def test_empty_tool_calls_on_an_anthropic_message_are_kept_as_they_are(reader: bool) -> None:
    """fresh50 #3: an OpenAI user message's ``"tool_calls": []`` stays in ``extra``, and
    the Anthropic writer writes it back; reading that refused it, though it holds no call
    (nothing goes uncounted). Null and ``[]`` are kept verbatim on every path, as on an
    OpenAI message."""
    fn = {"name": "f", "arguments": "{}"}
    structs = cw.adapters.to_canonical([{"role": "user", "content": "x", "tool_calls": []}])
    assert cw.validate(structs, "anthropic") == []
    written = [cw.adapters.from_canonical(s, "anthropic") for s in structs]
    assert written == [{"role": "user", "content": "x", "tool_calls": []}]
    assert cw.count_messages(written, format="anthropic") == cw.count_messages(structs)
    assert cw.adapters.to_canonical(written, "anthropic") == structs
    for value in ([], None):
        m = _anthropic_with("tool_calls", value)
        assert cw.validate(m, "anthropic", format="anthropic") == []
        assert cw.trim_turns(m, 10**6, format="anthropic").messages == m
        body = json.dumps({"model": "claude", "max_tokens": 5, "system": "s", "messages": m}).encode()
        assert cw.fit_request(body, budget=10**6) == body
        # counted as the same body without the key (an unknown key is not counted)
        bare = json.dumps({"model": "claude", "max_tokens": 5, "system": "s", "messages": _anthropic_with("x", 1)})
        assert cw.count_request(body) == cw.count_request(bare.encode())
    # and a tool_calls of [] or null decides no shape (fresh52 #5: the list above, with a
    # call written as tool_use, read as OpenAI's and was refused)
    oa = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "x", "tool_calls": []},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": fn}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ]
    an = [cw.adapters.from_canonical(x, "anthropic") for x in cw.adapters.to_canonical(oa)]
    assert an[1]["tool_calls"] == [] and an[3]["content"][0]["type"] == "tool_use"
    assert cw.adapters.detect_format(an) == "anthropic"
    assert cw.count_messages(an) == cw.count_messages(an, format="anthropic") == cw.count_messages(oa)
    assert cw.validate(an, "anthropic") == []
    assert cw.count_request(json.dumps({"model": "c", "max_tokens": 5, "messages": an}).encode()) == cw.count_messages(
        oa
    )
    assert cw.adapters.detect_format([{"role": "user", "content": "q", "tool_calls": None}]) == "openai"
    # nor does a tool_call_id of null, which frameworks write for every optional field
    # (fresh53 #4), on any path
    nulled = [{**an[0], "tool_call_id": None}, *an[1:]]
    assert cw.adapters.detect_format(nulled) == "anthropic"
    assert cw.count_messages(nulled) == cw.count_messages(nulled, format="anthropic")
    body = json.dumps({"model": "c", "max_tokens": 5, "messages": nulled}).encode()
    assert cw.count_request(body) == cw.count_messages(nulled, format="anthropic")
    assert cw.adapters.detect_format([{"role": "assistant", "content": "q", "tool_calls": [{}]}]) == "openai"
    # "[ ]" in a body too
    spaced = b'{"system": "s", "messages": [{"role": "user", "content": "a", "tool_calls": [ \n ]}]}'
    assert cw.count_request(spaced) == cw.count_request(spaced.replace(b'"tool_calls": [ \n ]', b'"tool_calls": []'))


@pytest.mark.parametrize("value", [(), {}, "", ("c",)], ids=["tuple", "dict", "str", "tuple1"])
def test_fresh54_4_only_a_list_of_calls_decides_the_shape(value: Any) -> None:
    # an empty tuple (or {}, "") made an Anthropic list OpenAI's, and the error then
    # blamed its tool_use block; only a list of calls decides now, and the field is named
    m = _anthropic_with("tool_calls", value)
    assert cw.adapters.detect_format(m) == "anthropic"
    want = f"message 1, field tool_calls: {OPENAI_CALLS}"
    for call in (
        lambda: cw.count_messages(m),
        lambda: cw.trim_turns(m, 10**6),
        lambda: cw.adapters.to_canonical(m),
        lambda: cw.validate(m, "anthropic"),
    ):
        with pytest.raises(cw.InvalidMessageError) as err:
            call()
        assert str(err.value) == want
    if not isinstance(value, tuple):
        # the messages decided the shape, not the body: no hint about its tools or system
        body = json.dumps({"model": "c", "max_tokens": 5, "messages": m}).encode()
        with pytest.raises(cw.InvalidMessageError) as err:
            cw.count_request(body)
        assert str(err.value) == want
    # an OpenAI list names the field's type
    with pytest.raises(cw.InvalidMessageError) as err:
        cw.count_messages([{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": value}])
    assert str(err.value) == "message 1, field tool_calls: must be a list or null"


@pytest.mark.parametrize(("key", "value"), OPENAI_KEYS, ids=["function_call", "custom", "false"])
def test_openai_call_keys_on_an_anthropic_message_are_refused(
    reader: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: Any
) -> None:
    """fresh7 N6: the 4,000 characters of a function_call on an Anthropic assistant
    message went uncounted (count_request 53), and validate said valid."""
    m = _anthropic_with(key, value)
    want = f"message 1, field {key}: {OPENAI_CALLS}"
    for call in (
        lambda: cw.count_messages(m, format="anthropic"),
        lambda: cw.validate(m, "anthropic", format="anthropic"),
        lambda: cw.trim_turns(m, budget=10**6, format="anthropic"),
        lambda: cw.fit(m, 10**6, format="anthropic"),
        # detected: the tool_use makes it Anthropic's (a tool_calls key makes it OpenAI's,
        # whose adapter names the tool_use block instead)
        lambda: cw.count_messages(m) if key == "function_call" else cw.count_messages(m, format="anthropic"),
    ):
        with pytest.raises(cw.InvalidMessageError) as err:
            call()
        assert str(err.value) == want
    body = json.dumps({"model": "claude", "max_tokens": 5, "system": "s", "messages": m}).encode()
    # a tool_calls key is OpenAI's mark: the gateway and the CLI say why they read the body
    # as Anthropic's (N11)
    why = ' (read as an Anthropic body for its top-level "system"; '
    for gateway in (lambda: cw.count_request(body), lambda: cw.fit_request(body, budget=10**6)):
        with pytest.raises(cw.InvalidMessageError) as err:
            gateway()
        hinted = f'{why}provider="openai" reads it as OpenAI\'s)' if key == "tool_calls" else ""
        assert str(err.value) == want + hinted
    f = write(tmp_path, "b.json", body)
    hint = f"{why}--format openai reads it as OpenAI's)"
    for argv in (["count", f], ["validate", f], ["fit", f, "--budget", "100"]):
        assert main(argv) == 2
        assert capsys.readouterr().err == f"contextwindow: error: {f}: {want}{hint if key == 'tool_calls' else ''}\n"


def test_null_openai_call_keys_on_an_anthropic_message_are_fine(reader: bool) -> None:
    """null is what a model_dump() writes; it carries nothing to count."""
    m = _anthropic_with("function_call", None)
    m[1]["tool_calls"] = None
    plain = _anthropic_with("function_call", None)
    del plain[1]["function_call"]
    assert cw.count_messages(m, format="anthropic") == cw.count_messages(plain, format="anthropic")
    out = cw.trim_turns(m, budget=10**6, format="anthropic").messages
    assert all(a is b for a, b in zip(out, m, strict=True))
    body = json.dumps({"model": "claude", "system": "s", "messages": m}).encode()
    assert cw.fit_request(body, budget=10**6) is body


# ---------------------------------------------------------------------------- N13 first

SECOND_SYSTEM = 'an Anthropic request takes one system prompt, its top-level "system"; this is a second'


def test_a_system_message_next_to_the_top_level_system_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fresh7 N13 (fresh6 N7): counted 15 and passed through fit_request unchanged; the
    Messages API refuses it. Named by its index in the body's messages."""
    msgs = [{"role": "user", "content": "a"}, {"role": "system", "content": "again"}, {"role": "user", "content": "b"}]
    body = json.dumps({"model": "claude", "max_tokens": 5, "system": "s", "messages": msgs}).encode()
    want = f"message 1, field role: {SECOND_SYSTEM}"
    for call in (lambda: cw.count_request(body), lambda: cw.fit_request(body, budget=10**6)):
        with pytest.raises(cw.InvalidMessageError) as err:
            call()
        assert str(err.value) == want
    f = write(tmp_path, "b.json", body)
    for argv in (["count", f], ["validate", f], ["repair", f], ["fit", f, "--budget", "100"], ["inspect", f]):
        assert main(argv) == 2
        assert capsys.readouterr().err == f"contextwindow: error: {f}: {want}\n"
    # without the top-level system, a leading system message stands for it: the same rule
    two = json.dumps({"model": "claude", "messages": [{"role": "system", "content": "s"}, *msgs]}).encode()
    with pytest.raises(cw.InvalidMessageError) as err:
        cw.fit_request(two, budget=10**6, provider="anthropic")
    assert str(err.value) == f"message 2, field role: {SECOND_SYSTEM}"
    # one system, either way, is fine
    assert cw.count_request(json.dumps({"system": "s", "messages": [msgs[0]]}).encode()) > 0


def test_a_second_system_message_in_anthropic_dicts_is_refused(reader: bool) -> None:
    """The dict path: the leading system message stands for the top-level system."""
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]},
        {"role": "system", "content": "again"},
    ]
    for call in (
        lambda: cw.count_messages(msgs),  # detected Anthropic (the tool_result)
        lambda: cw.trim_turns(msgs, budget=10**6, format="anthropic"),
        lambda: cw.validate(msgs, "anthropic"),
    ):
        with pytest.raises(cw.InvalidMessageError) as err:
            call()
        assert str(err.value) == f"message 2, field role: {SECOND_SYSTEM}"
    # in OpenAI shape several system messages are fine
    plain = [{"role": "system", "content": "s"}, {"role": "user", "content": "a"}, {"role": "system", "content": "b"}]
    assert cw.count_messages(plain, format="openai") > 0


def test_a_second_system_message_in_anthropic_structs_is_refused() -> None:
    """struct18 #1: Message structs with a system message after a leading one were
    counted, trimmed and validated under Anthropic's rules, where the same dicts are
    refused (``_engine._one_system``); now the dict path's words, naming the second."""
    m = [
        cw.Message(role="system", content=[cw.TextPart(text="s")]),
        cw.Message(role="user", content=[cw.TextPart(text="q")]),
        cw.Message(role="system", content=[cw.TextPart(text="again")]),
        cw.Message(role="user", content=[cw.TextPart(text="r")]),
    ]
    d = [cw.adapters.message_to_anthropic(x) for x in m]
    with pytest.raises(cw.InvalidMessageError) as want:
        cw.count_messages(d, format="anthropic")
    assert str(want.value) == f"message 2, field role: {SECOND_SYSTEM}"
    for call in (
        lambda: cw.count_messages(m, format="anthropic"),
        lambda: cw.validate(m, "anthropic"),
        lambda: cw.trim_turns(m, 5, format="anthropic"),
        lambda: cw.fit(m, 10**6, format="anthropic"),
        lambda: cw.repair_tool_pairs(m, format="anthropic"),
        lambda: cw.segment_turns(m, format="anthropic"),
    ):
        with pytest.raises(cw.InvalidMessageError) as info:
            call()
        assert str(info.value) == str(want.value)
    # OpenAI's rules take several system messages; one leading system message, or one
    # that is not leading (no top-level system then), is fine under Anthropic's too
    assert cw.count_messages(m, format="openai") == cw.count_messages(d, format="openai")
    assert cw.count_messages(m[:2], format="anthropic") == cw.count_messages(d[:2], format="anthropic")
    assert cw.count_messages(m[1:], format="anthropic") == cw.count_messages(d[1:], format="anthropic")
    # validate checks the rules of the provider it is given, whatever a struct list reads
    # as: a user message holding a ToolResult reads as Anthropic's, not under "openai"
    carrier = cw.Message(role="user", content=[cw.ToolResult(call_id="c", content=[cw.TextPart(text="r")])])
    assert [v.code for v in cw.validate([m[0], m[2], carrier], "openai")] == ["result_outside_tool_message"]


# ----------------------------------------------------------------------------------- N8

BIG = 10**5000


def _too_long() -> str:
    """Python's own words for an int it will not write as text."""
    try:
        str(BIG)
    except ValueError as exc:
        return str(exc)
    raise AssertionError("str(10**5000) is expected to raise")


@pytest.mark.parametrize(
    "second",
    [
        {"role": "user", "content": "a", "x": BIG},
        {"role": "user", "content": [{"type": "weird", "x": BIG}]},
        cw.Message(role="user", content=[cw.TextPart(text="a")], extra={"x": [BIG]}),
    ],
    ids=["extra-key", "unknown-block", "message-struct"],
)
def test_a_huge_int_names_its_message(reader: bool, second: Any) -> None:
    """fresh7 N8: a raw ValueError from msgspec, not a ContextWindowError, naming nothing."""
    first: Any = (
        cw.Message(role="user", content=[cw.TextPart(text="a")])
        if isinstance(second, cw.Message)
        else {"role": "user", "content": "a"}
    )
    msgs = [first, second]
    want = f"message 1: holds a value JSON cannot represent ({_too_long()})"
    budget = cw.resolve_budget(context_window=5000, max_output_tokens=1000)
    for call in (
        lambda: cw.count_messages(msgs),
        lambda: cw.trim_turns(msgs, budget=5),
        lambda: cw.validate(msgs, "openai"),
        lambda: cw.fit(msgs, 5),
        lambda: cw.repair_tool_pairs(msgs),
        lambda: cw.ContextGuard(budget).check(msgs),
    ):
        with pytest.raises(cw.InvalidMessageError) as err:
            call()
        assert str(err.value) == want
        assert err.value.index == 1


# ----------------------------------------------------------------------------------- N7


def _deep(n: int) -> str:
    return "[" * n + "]" * n


# the CLI's words: its limit is the dict path's (fresh15 #5); a 1,000-level value in a
# message is 1,001 levels from the message
TOO_DEEP = "is nested too deeply (more than 1,000 levels)"


@pytest.mark.parametrize(
    ("name", "data"),
    [
        # the tester's file: 1,000 levels in an extra key of message 1
        ("body.json", '{"messages":[{"role":"user","content":"a"},{"role":"user","content":"a","x":DEEP}]}'),
        # brackets inside a string do not count
        ("list.json", '[{"role":"user","content":"[[[[\\"{{"},{"role":"user","content":"a","x":DEEP}]'),
        ("lines.jsonl", '{"role":"user","content":"a"}\n{"role":"user","content":"a","x":DEEP}\n'),
    ],
)
def test_nested_too_deeply_names_the_message_in_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, data: str
) -> None:
    """fresh7 N7: the CLI said "input is nested too deeply", naming no message."""
    f = write(tmp_path, name, data.replace("DEEP", _deep(1000)))
    for argv in (["count", f], ["fit", f, "--budget", "10"], ["validate", f]):
        assert main(argv) == 2
        assert capsys.readouterr().err == f"contextwindow: error: {f}: message 1: {TOO_DEEP}\n"
    first = write(tmp_path, "first.jsonl", '{"role":"user","content":"a","x":DEEP}\n{"role":"user","content":"b"}\n')
    Path(first).write_text(Path(first).read_text().replace("DEEP", _deep(1000)))
    assert main(["count", first]) == 2
    assert capsys.readouterr().err == f"contextwindow: error: {first}: message 0: {TOO_DEEP}\n"
    tools = write(
        tmp_path, "tools.json", '{"messages":[],"tools":[{"type":"function","x":DEEP}]}'.replace("DEEP", _deep(1000))
    )
    assert main(["count", tools]) == 2
    assert capsys.readouterr().err == f"contextwindow: error: {tools}: tools[0]: {TOO_DEEP}\n"


def test_cli_tells_truncated_json_from_deep_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """fresh9 B3: a truncated file of 50,000 ``[`` is not JSON at all; the CLI said
    "message 0: is nested too deeply" (msgspec gives up on depth first), the gateway "EOF
    while parsing a list". Now serde_json checks the syntax when the parser gives up on
    depth, and the error is the one a shallow truncated file gets."""
    cases = [
        ("cut.json", "[" * 50_000, "invalid JSON: line 1, column 50001: EOF while parsing a list (byte 50000)"),
        ("bad.json", "[" * 3000 + "x" + "]" * 3000, "invalid JSON: line 1, column 3001: expected value (byte 3000)"),
        ("deep.json", "[" * 50_000 + "]" * 50_000, f"message 0: {TOO_DEEP}"),
        (
            "cut.jsonl",
            '{"role":"user","content":"a"}\n' + "[" * 5000 + "\n",
            "line 2: invalid JSON: EOF while parsing a list (byte 5030)",  # the file's byte: 30 + 5,000
        ),
    ]
    for name, text, said in cases:
        f = write(tmp_path, name, text)
        assert main(["count", f]) == 2
        assert capsys.readouterr().err == f"contextwindow: error: {f}: {said}\n"
    # a shallow truncated file says the same
    f = write(tmp_path, "short.json", "[[[")
    assert main(["count", f]) == 2
    assert (
        capsys.readouterr().err
        == f"contextwindow: error: {f}: invalid JSON: line 1, column 4: EOF while parsing a list (byte 3)\n"
    )


def _deep_message(n: int) -> str:
    """A message whose key ``x`` holds ``n`` levels: ``34 + 2n`` bytes."""
    return '{"role":"user","content":"a","x":' + _deep(n) + "}"


_OK = '{"role":"user","content":"b"}'  # 29 bytes
_BODY_LINE = (
    'a request body (it has "messages"), where JSONL holds one message per line; pass one request body per file'
)


@pytest.mark.parametrize("limit", [None, 100_000])
def test_a_file_too_deep_for_the_parser_is_read_as_a_shallow_one_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], limit: int | None
) -> None:
    """tools19 (cli18's leftover): a text too deep for the parser (2,100 levels: the CLI's
    parser gives up at 2,000; with a raised recursion limit the depth pre-check stops it)
    was checked as a stream of values, and the error named the deepest point: two values
    on one line were JSONL, a JSONL file's bad line was named as a document's, a line
    holding a request body or no object was "message N", and a list named a later
    message deeper still than the first one too deep. Now it is read as a shallow text
    is: one value (a document), else JSONL line by line, else the document's syntax
    error; the first message too deep is named, as the dict path names it. ``limit``: the
    CLI's own recursion limit, or a caller's raised one."""
    deep = _deep_message(2100)  # 4,234 bytes
    cases = [
        # two values on one line: the second starts at byte 4,234 + 1 (column 4,236), as
        # the shallow file below says at byte 30 (was: message 0 nested too deeply)
        (f"{deep} {_OK}\n", "invalid JSON: line 1, column 4236: trailing characters (byte 4235)"),
        (f"{_OK} {_OK}\n", "invalid JSON: line 1, column 31: trailing characters (byte 30)"),
        # JSONL: the deep first line is its first problem, before line 3's (was: "invalid
        # JSON: line 3, column 1: expected value", a document's words)
        (f"{deep}\n{_OK}\n}}\n", f"message 0: {TOO_DEEP}"),
        # a line holding a request body, first or second, is named so (was: message N)
        (f'{{"messages": [{deep}]}}\n{{"messages": []}}\n', f"line 1: {_BODY_LINE}"),
        (f'{_OK}\n{{"messages": [{deep}]}}\n', f"line 2: {_BODY_LINE}"),
        # a later line that is no object (was: message 1)
        (f"{_OK}\n{_deep(2100)}\n", "line 2: expected one message object per line"),
        # a first line that is no object: not JSONL, the document's error where line 2
        # starts, byte 4,200 + 1
        (f"{_deep(2100)}\n{_OK}\n", "invalid JSON: line 2, column 1: trailing characters (byte 4201)"),
        # a list: the first message too deep (1,500 levels), as the dict path names it,
        # not the deeper second (was: message 1)
        (f"[{_deep_message(1500)},{_deep_message(3000)}]", f"message 0: {TOO_DEEP}"),
        (f'{{"messages": [{_OK}, {_deep_message(1500)}, {_deep_message(3000)}]}}', f"message 1: {TOO_DEEP}"),
    ]
    _count_errors(tmp_path, capsys, cases, limit)
    # the dict path names the first of the list's messages too
    msgs = []
    for n in (1500, 3000):
        x: list[Any] = []
        for _ in range(n - 1):
            x = [x]
        msgs.append({"role": "user", "content": "a", "x": x})
    with pytest.raises(cw.InvalidMessageError, match=r"^message 0: is nested too deeply$"):
        cw.count_messages(msgs)


def _count_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cases: list[tuple[str, str]], limit: int | None
) -> None:
    """``contextwindow count`` on each case's text exits 2 saying exactly its words, at
    the recursion limit ``limit`` (``None``: as it is)."""
    before = sys.getrecursionlimit()
    try:
        if limit is not None:
            sys.setrecursionlimit(limit)
        for i, (text, said) in enumerate(cases):
            f = write(tmp_path, f"{i}.json", text)
            assert main(["count", f]) == 2
            assert capsys.readouterr().err == f"contextwindow: error: {f}: {said}\n", i
    finally:
        sys.setrecursionlimit(before)


@pytest.mark.parametrize("limit", [None, 100_000])
def test_a_body_then_junk_and_a_deep_message_first_key_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], limit: int | None
) -> None:
    """small20 (helpers' leftovers of cli18 and tools19): a file whose line 1 is a request
    body and line 2 is not JSON got the JSONL words for a log of bodies (``line 1: a
    request body ... pass one request body per file``), where it is one body with junk
    after it: now the document's syntax error, ``trailing characters`` at line 2, the
    byte the gateway names. And a one-message file too deep for the parser, its deep key
    before ``"role"``, was named by that key (``x: is nested too deeply``), the scan
    having stopped before it read ``role``: now ``message 0``, as the dict path says. A
    body's deep unknown key is still named by its key. Bytes by hand: ``{"messages":
    []}`` is 16 bytes, so line 2 starts at byte 17; ``_deep_message(2100)`` is 4,234, in
    ``{"messages": [...]}`` 4,250."""
    body = '{"messages": []}'
    deep_body = '{"messages": [' + _deep_message(2100) + "]}"
    deep_first = '{"x":' + _deep(2100) + ',"role":"user","content":"a"}'
    cases = [
        (f"{body}\njunk\n", "invalid JSON: line 2, column 1: trailing characters (byte 17)"),
        (f"{deep_body}\njunk\n", "invalid JSON: line 2, column 1: trailing characters (byte 4251)"),
        # a body, then a line of JSON: a log of bodies, as before
        (f"{body}\n{body}\n", f"line 1: {_BODY_LINE}"),
        (f"{body}\n{_OK}\n", f"line 1: {_BODY_LINE}"),
        (f"{deep_body}\n{body}\n", f"line 1: {_BODY_LINE}"),
        (deep_first, f"message 0: {TOO_DEEP}"),
        ('{"x":' + _deep(2100) + ',"messages":[]}', f"x: {TOO_DEEP}"),
        ('{"x":' + _deep(2100) + ',"messages":[' + _OK + "]}", f"x: {TOO_DEEP}"),
    ]
    _count_errors(tmp_path, capsys, cases, limit)
    # the gateway names the same byte
    with pytest.raises(cw.InvalidRequestError, match=r"^invalid request body at byte 17: trailing characters$"):
        cw.fit_request(f"{body}\njunk\n".encode(), budget=100)


# strings full of what the depth scan must skip: brackets, quotes, backslashes, escapes
_JSON_TEXT = st.text(alphabet=st.sampled_from(["[", "]", "{", "}", '"', "\\", "a", "\n", "\u2028", "é"]), max_size=6)
_JSON_VALUES = st.recursive(
    st.none() | st.integers() | _JSON_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_JSON_TEXT, inner, max_size=3),
    max_leaves=20,
)


@settings(max_examples=500, deadline=None)
@given(
    values=st.lists(_JSON_VALUES, min_size=1, max_size=3),
    ascii_only=st.booleans(),
    indent=st.sampled_from([None, 1]),
    limit=st.integers(1, 9),
)
def test_the_native_depth_check_finds_what_the_python_scan_finds(
    values: list[Any], ascii_only: bool, indent: int | None, limit: int
) -> None:
    """tools19: the CLI's depth check before its parser (a raised recursion limit) is
    ``_native.nests_as_deep``, where the Python scan ``_deepest`` read 25 MB in 1.5 s
    (13 ms natively); on JSON and JSONL texts (values one a line, or spread over lines)
    both find a point ``limit`` levels deep, or neither does."""
    text = "\n".join(json.dumps(v, ensure_ascii=ascii_only, indent=indent) for v in values)
    assert _native.nests_as_deep(text, limit) == (_deepest(text, limit)[1] >= limit)


def test_nested_too_deeply_names_the_message_in_the_gateway() -> None:
    """fresh7 N7: "invalid request body at byte 185: recursion limit exceeded" (serde's
    words, an offset only) for 5,000 levels inside a content block."""
    deep = _deep(5000)
    for body in (
        '{"messages":[{"role":"user","content":"a"},{"role":"user","content":[{"type":"weird","x":DEEP}]}]}',
        '{"system":"s","messages":[{"role":"user","content":"a"},'
        '{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"a":DEEP}}]}]}',
    ):
        for call in (cw.count_request, lambda b: cw.fit_request(b, budget=10)):
            with pytest.raises(cw.InvalidMessageError) as err:
                call((body.replace("DEEP", deep)).encode())
            assert str(err.value) == "message 1: is nested too deeply"
    # the same value on the dict path: the same words
    value: list[Any] = []
    for _ in range(5000):
        value = [value]
    call = {"type": "tool_use", "id": "t", "name": "f", "input": {"a": value}}
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": [call]}]
    with pytest.raises(cw.InvalidMessageError) as err:
        cw.count_messages(msgs)
    assert str(err.value) == "message 1: is nested too deeply"
    tool = (
        '{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","x":DEEP}]}'.replace("DEEP", deep)
    ).encode()
    with pytest.raises(cw.InvalidRequestError, match=r"at byte \d+: tools\[0\]: is nested too deeply$"):
        cw.count_request(tool)


# ------------------------------------------------- one nesting limit, whatever the recursion limit


def _nest(n: int) -> list[Any]:
    """``n`` nested lists: ``[]`` is 1, ``[[]]`` is 2."""
    value: list[Any] = []
    for _ in range(n - 1):
        value = [value]
    return value


def _use(value: Any) -> list[Any]:
    return [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": value}]},
    ]


def test_a_raised_recursion_limit_gives_the_depth_error_not_a_crash() -> None:
    """fresh14 #10: after ``sys.setrecursionlimit(1_000_000)`` a 200,000-deep ``tool_use``
    input killed the interpreter (SIGSEGV in ``msgspec.json.encode``, from
    ``adapters._encode_input``) instead of raising "is nested too deeply"."""
    import subprocess
    import sys

    code = """
import collections, sys, contextwindow as cw
sys.setrecursionlimit(1_000_000)
v = []
for _ in range(200_000):
    v = [v]
msgs = [{"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"a": v}}]}]
extra = [{"role": "user", "content": "q", "meta": v}]
g = cw.ContextGuard(cw.resolve_budget(context_window=100_000, max_output_tokens=1_000))
for call in (lambda: cw.count_messages(msgs), lambda: cw.trim_turns(msgs, 10), lambda: cw.fit(msgs, 10),
             lambda: g.check(msgs), lambda: cw.validate(msgs, "anthropic"), lambda: cw.count_messages(extra),
             lambda: cw.count_many([extra]), lambda: cw.message_tokens(extra),
             lambda: cw.count_messages(msgs[:1], tools=[{"name": "f", "a": v}]),
             lambda: cw.count_messages([{"role": "user", "content": "q", "meta": collections.OrderedDict(a=v)}]),
             lambda: cw.count_messages([{"role": "user", "content": "q", "meta": (v,)}])):
    try:
        call()
    except cw.ContextWindowError as exc:
        print(type(exc).__name__, exc)
    else:
        print("accepted")
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert run.stdout.splitlines() == [
        *["InvalidMessageError message 1: is nested too deeply"] * 5,
        "InvalidMessageError message 0: is nested too deeply",
        "InvalidMessageError conversation 0: message 0: is nested too deeply",
        "InvalidMessageError message 0: is nested too deeply",
        "InvalidRequestError tools[0]: is nested too deeply",
        *["InvalidMessageError message 0: is nested too deeply"] * 2,
    ]


@pytest.fixture
def raised_recursion_limit() -> Any:
    import sys

    before = sys.getrecursionlimit()
    sys.setrecursionlimit(5_000)
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


@pytest.mark.usefixtures("raised_recursion_limit")
def test_the_dict_path_takes_1000_levels_whatever_the_recursion_limit() -> None:
    """fresh14 #10: 2,989 levels were accepted after ``sys.setrecursionlimit(3000)``, 989 at
    the default. Now 1,000 levels from the message (the message is level 1; objects and
    arrays count) are the most taken: an extra key's value of 999 levels (1 + 999), a
    ``tool_use`` input ``{"a": 996 levels}`` (message, content, block, input: 4 + 996), a
    tool definition's 999 (1 + 999), a ``Message`` struct's ``extra`` dict holding 998
    (struct, extra, 998)."""
    from contextwindow.messages import Message

    cases: list[tuple[Any, Any, str]] = [
        (
            lambda d: cw.count_messages([{"role": "user", "content": "q", "meta": _nest(d)}]),
            999,
            "message 0: is nested too deeply",
        ),
        (lambda d: cw.count_messages(_use({"a": _nest(d)})), 996, "message 1: is nested too deeply"),
        (lambda d: cw.trim_turns(_use({"a": _nest(d)}), 10), 996, "message 1: is nested too deeply"),
        (
            lambda d: cw.count_messages([{"role": "user", "content": "q"}], tools=[{"name": "f", "a": _nest(d)}]),
            999,
            "tools[0]: is nested too deeply",
        ),
        (
            lambda d: cw.count_messages([Message(role="user", content=[], extra={"k": _nest(d)})]),
            998,
            "message 0: is nested too deeply",
        ),
    ]
    for call, most, want in cases:
        call(most)
        with pytest.raises(cw.ContextWindowError) as err:
            call(most + 1)
        assert str(err.value) == want
    # an earlier message's fault comes first, as the adapters read in order
    deep = {"role": "user", "content": "q", "meta": _nest(1000)}
    with pytest.raises(cw.InvalidMessageError, match=r'^message 0, field role: unknown role "wizard"$'):
        cw.count_messages([{"role": "wizard", "content": "x"}, deep])


def test_what_the_default_recursion_limit_took_is_still_taken() -> None:
    """The limit refuses nothing the default recursion limit (1,000) let through: 989
    levels in an extra key, 985 in a ``tool_use`` input (fresh14 #10's measures; in a
    fresh interpreter, whose stack is as shallow as a script's: pytest's frames count
    against the recursion limit too)."""
    import subprocess
    import sys

    code = """
import contextwindow as cw
def nest(n):
    v = []
    for _ in range(n - 1):
        v = [v]
    return v
print(cw.count_messages([{"role": "user", "content": "q", "meta": nest(989)}]) > 0)
use = {"type": "tool_use", "id": "t", "name": "f", "input": {"a": nest(985)}}
print(cw.count_messages([{"role": "user", "content": "q"}, {"role": "assistant", "content": [use]}]) > 0)
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert (run.returncode, run.stdout) == (0, "True\nTrue\n"), run.stderr[-2000:]


@pytest.mark.parametrize(
    ("name", "template", "most", "place"),
    [
        # fresh15 #5's file: a top-level key the CLI only copies; its value is level 1
        ("copied.json", '{"x":DEEP,"messages":[{"role":"user","content":"hi"}]}', 1000, "x"),
        # inside a message, counted from the message as on the dict path (message 1, meta 2)
        ("meta.json", '{"messages":[{"role":"user","content":"hi","meta":DEEP}]}', 999, "message 0"),
        ("list.json", '[{"role":"user","content":"hi","meta":DEEP}]', 999, "message 0"),
        ("one.json", '{"role":"user","content":"hi","meta":DEEP}', 999, "message 0"),
        (
            "lines.jsonl",
            '{"role":"user","content":"a"}\n{"role":"user","content":"hi","meta":DEEP}\n',
            999,
            "message 1",
        ),
        (
            "tools.json",
            '{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"},"x":DEEP}]}',
            999,
            "tools[0]",
        ),
        # an Anthropic top-level system is the content of the message it becomes: level 2,
        # its block 3, the block's key 4 to 1,000
        (
            "system.json",
            '{"system":[{"type":"text","text":"s","x":DEEP}],"messages":[{"role":"user","content":"hi"}]}',
            997,
            "system",
        ),
    ],
    ids=["copied", "meta", "list", "one", "jsonl", "tools", "system"],
)
def test_the_cli_takes_the_dict_paths_1000_levels_and_names_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, template: str, most: int, place: str
) -> None:
    """fresh15 #5: the CLI refused 987 levels from the top of the file (its parser's
    recursion limit), even in a key it only copies, and named ``x[0]``, not the limit.
    Now it takes the dict path's 1,000 levels, counted from each message, tool
    definition or other top-level value, whatever the recursion limit, and says so."""
    import sys

    limit = sys.getrecursionlimit()
    ok = write(tmp_path, name, template.replace("DEEP", _deep(most)))
    out = str(tmp_path / ("out-" + name))
    assert main(["count", ok]) == 0
    assert main(["fit", ok, "--budget", "100000", "-o", out]) == 0
    assert Path(out).read_text().count("[") == Path(ok).read_text().count("[")  # written back whole
    capsys.readouterr()
    bad = write(tmp_path, "bad-" + name, template.replace("DEEP", _deep(most + 1)))
    assert main(["count", bad]) == 2
    assert capsys.readouterr().err == (
        f"contextwindow: error: {bad}: {place}: is nested too deeply (more than 1,000 levels)\n"
    )
    assert sys.getrecursionlimit() == limit  # the CLI gives back the caller's


def test_load_conversation_at_a_raised_recursion_limit_refuses_not_crashes(tmp_path: Path) -> None:
    """A caller that raised the recursion limit past the CLI's own: msgspec would parse a
    200,000-deep file as deep as it goes and overflow the stack (fresh14 #10's crash, on
    the file path); the text is scanned first, without recursion."""
    import subprocess
    import sys

    f = write(tmp_path, "deep.json", '{"messages":[{"role":"user","content":"a","x":' + _deep(200_000) + "}]}")
    ok = write(tmp_path, "ok.json", '{"messages":[{"role":"user","content":"a","x":' + _deep(999) + "}]}")
    code = f"""
import sys
from contextwindow.cli import main
from contextwindow.io import load_conversation
from contextwindow.io import load_conversation
sys.setrecursionlimit(1_000_000)
try:
    load_conversation({f!r})
except Exception as exc:
    print(type(exc).__name__, exc)
print(len(load_conversation({ok!r}).messages))
print(main(["count", {f!r}]))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert run.stdout == f"InvalidRequestError {f}: message 0: {TOO_DEEP}\n1\n2\n"
    assert run.stderr == f"contextwindow: error: {f}: message 0: {TOO_DEEP}\n"


# ---------------------------------------------------------------------------------- N11


def test_the_cli_names_its_own_option_for_an_anthropic_block(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fresh7 N11: the CLI told its user to `pass format='anthropic'` (the Python keyword);
    its option is --format. The gateway says provider="anthropic", the dict path format=."""
    # (a tool call marks the list as OpenAI's; a tool_calls of [] no longer does: fresh52 #5)
    call = {"id": "t", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    msgs = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]},
    ]
    f = write(tmp_path, "b.json", json.dumps({"model": "m", "messages": msgs}))
    assert main(["count", f]) == 2
    assert capsys.readouterr().err == (
        f"contextwindow: error: {f}: message 2, field content[0].type:"
        ' "tool_result" is an Anthropic block in a list read as OpenAI\'s (one list cannot mix the two shapes);'
        " pass --format anthropic for an Anthropic list\n"
    )
    with pytest.raises(cw.InvalidMessageError) as err:
        cw.count_messages(msgs)
    assert (
        str(err.value)
        == 'message 2, field content[0].type: "tool_result" is an Anthropic block in a list read as OpenAI\'s'
        " (one list cannot mix the two shapes); pass format='anthropic' for an Anthropic list"
    )
    with pytest.raises(cw.InvalidMessageError) as err:
        cw.count_request(json.dumps({"messages": msgs}).encode())
    assert str(err.value) == (
        'message 2, field content[0].type: "tool_result" is an Anthropic block in a body read as OpenAI\'s'
        ' (one body cannot mix the two shapes); pass provider="anthropic" for an Anthropic body'
    )


def test_the_gateway_says_why_it_read_an_openai_body_as_anthropic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fresh7 N11: a stray top-level system in an OpenAI body; the CLI said why it read the
    body as Anthropic's, the gateway did not."""
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    msgs = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "r"},
    ]
    body = json.dumps({"model": "gpt", "system": "stray", "messages": msgs}).encode()
    why = 'read as an Anthropic body for its top-level "system"'
    with pytest.raises(cw.InvalidMessageError) as err:
        cw.count_request(body)
    assert str(err.value) == (
        f"message 1, field content: must be a string or a list of blocks ({why};"
        ' provider="openai" reads it as OpenAI\'s)'
    )
    assert cw.count_request(body, provider="openai") > 0
    f = write(tmp_path, "b.json", body)
    assert main(["count", f]) == 2
    assert capsys.readouterr().err == (
        f"contextwindow: error: {f}: message 1, field content: must be a string or a list of blocks ({why};"
        " --format openai reads it as OpenAI's)\n"
    )
    # Anthropic tools are the other body marker
    tools = json.dumps({"tools": [{"name": "f", "input_schema": {}}], "messages": msgs}).encode()
    with pytest.raises(cw.InvalidMessageError, match=r'for its tools with "input_schema"; provider="openai"'):
        cw.count_request(tools)
    # a real Anthropic body gets no such remark
    with pytest.raises(cw.InvalidMessageError) as err:
        cw.count_request(json.dumps({"system": "x", "messages": [{"role": "user", "content": 5}]}).encode())
    assert str(err.value) == "message 0, field content: must be a string or a list of blocks"


# ----------------------------------------------------------------------------------- N9


def test_the_cli_warns_about_an_escaped_lone_surrogate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """fresh7 N9: `fit` wrote "\\ufffdx" for "\\ud800x" with no word, even when nothing was
    trimmed; invalid UTF-8 gets a warning. Column 40: '{"messages":[{"role":"user","content":"'
    is 39 characters."""
    f = write(tmp_path, "s.json", '{"messages":[{"role":"user","content":"\\ud800x"}]}')
    assert main(["fit", f, "--budget", "100"]) == 0
    out, err = capsys.readouterr()
    # counted as U+FFFD, written back as read, as fit_request keeps it (fresh17c #9)
    assert json.loads(out)["messages"][0]["content"] == "\ud800x" and '"\\ud800x"' in out
    assert err.startswith(
        f"contextwindow: warning: {f}: lone surrogate escape \\ud800 at line 1, column 40 (message 0, field"
        " content); such escapes read as U+FFFD\n"
    )
    # a low one alone, on line 2 (column 28: '{"role":"user","content":"x' is 27 characters);
    # a pair is one code point and an escaped backslash is no escape: no warning for those
    lines = write(
        tmp_path,
        "s.jsonl",
        '{"role":"user","content":"ok \\ud83d\\ude00 \\\\ud800 fine"}\n{"role":"user","content":"x\\udc00"}\n',
    )
    assert main(["count", lines]) == 0
    assert capsys.readouterr().err == (
        f"contextwindow: warning: {lines}: lone surrogate escape \\udc00 at line 2, column 28 (message 1,"
        " field content); such escapes read as U+FFFD\n"
    )
    fine = write(tmp_path, "ok.json", '[{"role":"user","content":"ok \\ud83d\\ude00 \\\\ud800 \\u00e9"}]')
    assert main(["count", fine]) == 0
    assert capsys.readouterr().err == ""
    # a high one followed by another high one (column 28: '[{"role":"user","content":"' is
    # 27 characters), and one ending a key (column 8: '[{"role' is 7)
    for data, where in (
        (
            '[{"role":"user","content":"\\ud800\\ud800"}]',
            "2 lone surrogate escapes, the first \\ud800 at line 1, column 28 (message 0, field content)",
        ),
        ('[{"role\\udbff":"user"}]', "lone surrogate escape \\udbff at line 1, column 8 (message 0, field role\ufffd)"),
    ):
        g = write(tmp_path, "h.json", data)
        main(["count", g])
        assert f"contextwindow: warning: {g}: {where}; such escapes read as U+FFFD\n" in capsys.readouterr().err


def test_the_lone_surrogate_warning_counts_them_and_names_the_first_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It named only the first escape: now how many there are and the first three fields
    that hold one (message index and field, as errors name them), then how many more."""
    call = {"id": "c\ud800", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    body = {
        "messages": [
            {"role": "system", "content": "s\ud800"},  # 1
            {"role": "user", "content": "a\ud800b\udc00"},  # 2 in one field
            {"role": "assistant", "content": None, "tool_calls": [call]},  # 1
            {"role": "tool", "tool_call_id": "c\ud800", "content": "r"},  # 1
        ],
        "tools": [{"type": "function", "function": {"name": "f", "description": "d\udfff"}}],  # 1
    }
    text = json.dumps(body)  # writes each lone surrogate as its escape
    f = write(tmp_path, "many.json", text)
    # '{"messages": [{"role": "system", "content": "s' is 46 characters: the first at column 47
    assert text.index("\\ud800") == 46
    assert main(["count", f]) == 0
    assert capsys.readouterr().err == (
        f"contextwindow: warning: {f}: 6 lone surrogate escapes, the first \\ud800 at line 1, column 47 (message 0,"
        " field content; message 1, field content; message 2, field tool_calls[0].id; and 2 more fields);"
        " such escapes read as U+FFFD\n"
    )
    # JSONL: one a line, each line a message; a lifted Anthropic system is "system"
    lines = "\n".join(json.dumps({"role": "user", "content": f"x{i}\ud800"}) for i in range(5)) + "\n"
    g = write(tmp_path, "many.jsonl", lines)
    assert main(["count", g]) == 0
    # '{"role": "user", "content": "x0' is 31 characters: column 32
    assert capsys.readouterr().err.startswith(
        f"contextwindow: warning: {g}: 5 lone surrogate escapes, the first \\ud800 at line 1, column 32 (message 0,"
        " field content; message 1, field content; message 2, field content; and 2 more fields);"
    )
    h = write(tmp_path, "a.json", json.dumps({"system": "s\udc00", "messages": [{"role": "user", "content": "q"}]}))
    assert main(["count", h]) == 0
    # '{"system": "s' is 13 characters: column 14
    assert capsys.readouterr().err == (
        f"contextwindow: warning: {h}: lone surrogate escape \\udc00 at line 1, column 14 (system);"
        " such escapes read as U+FFFD\n"
    )


# --------------------------------------------------------------------------- N13 last


@pytest.mark.parametrize("budget", ["10", True, None, 1.5, -1, [10]])
def test_a_bad_budget_is_the_same_error_everywhere(budget: Any) -> None:
    """fresh7 N13: fit(m, "10") and fit(m, True) raised TypeError, trim_turns and
    fit_request ValueError. One kind now: ValueError naming the budget."""
    msgs = [{"role": "user", "content": "a"}]
    body = json.dumps({"messages": msgs}).encode()
    for call in (
        lambda: cw.fit(msgs, budget),
        lambda: cw.trim_turns(msgs, budget),
        lambda: cw.fit_request(body, budget=budget),
        lambda: cw.recover_from_overflow(msgs, budget=budget),
    ):
        with pytest.raises(ValueError, match=r"^budget must be a non-negative int") as err:
            call()
        assert not isinstance(err.value, TypeError)


def _deep_dict(levels: int) -> dict[str, Any]:
    top: dict[str, Any] = {}
    cur = top
    for _ in range(levels - 1):
        cur["a"] = {}
        cur = cur["a"]
    return top


def _deep_conversations(levels: int) -> list[list[dict[str, Any]]]:
    openai = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": None,
            "x": _deep_dict(levels),
            "tool_calls": [{"id": "t", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "t", "content": "r"},
    ]
    anthropic = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": _deep_dict(levels)}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]},
    ]
    return [openai, anthropic]


def test_nesting_near_the_recursion_limit_is_always_a_typed_error_naming_the_message() -> None:
    """fresh17 #4: a few levels under Python's recursion limit, the first read of the
    messages passed and a later encode, a few frames deeper, raised a bare RecursionError
    (fit, prune_middle, recover_from_overflow, trim_turns(tokenizer=)), or the error had no
    message index. Every depth in the band, in both shapes, through every entry point: it
    works or it is InvalidMessageError naming message 1."""
    import sys

    limit = sys.getrecursionlimit()
    calls = {
        "fit": lambda m: cw.fit(m, 5),
        "prune_middle": lambda m: cw.prune_middle(m, 5),
        "recover_from_overflow": lambda m: cw.recover_from_overflow(m, budget=5),
        "trim_turns": lambda m: cw.trim_turns(m, budget=5),
        "trim_turns(tokenizer=)": lambda m: cw.trim_turns(m, budget=5, tokenizer=len),
        "count_messages": lambda m: cw.count_messages(m),
        "token_breakdown": lambda m: cw.token_breakdown(m),
        "repair_tool_pairs": lambda m: cw.repair_tool_pairs(m),
        "ContextGuard.check": lambda m: cw.ContextGuard(context_window=40, max_output_tokens=20).check(m),
    }
    refused = 0
    for levels in range(limit - 120, limit + 8, 2):
        for conversation in _deep_conversations(levels):
            for name, call in calls.items():
                try:
                    call(conversation)
                except cw.InvalidMessageError as exc:
                    assert exc.index == 1, (name, levels, str(exc))
                    assert "nested too deeply" in str(exc), (name, levels, str(exc))
                    refused += 1
                except cw.ContextOverflowError:
                    pass  # the guard: it read the messages, then nothing fit 5 tokens
    assert refused > 0  # the sweep reached the limit


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (cw.Message(role="user", content=[cw.TextPart(text=b"x" * 50)]), "content[0].text"),  # type: ignore[arg-type]
        (cw.Message(role="user", content=[cw.TextPart(text="q")], name=b"bob"), "name"),  # type: ignore[arg-type]
        (cw.Message(role="user", content=[cw.TextPart(text="q")], id=bytearray(b"m1")), "id"),  # type: ignore[arg-type]
        (
            cw.Message(role="assistant", content=[cw.ToolCall(id="c", name="f", arguments=memoryview(b"{}"))]),  # type: ignore[arg-type]
            "content[0].arguments",
        ),
        (cw.Message(role="assistant", content=[cw.ToolCall(id=b"c", name="f", arguments="{}")]), "content[0].id"),  # type: ignore[arg-type]
        (cw.Message(role="user", content=[cw.ImagePart(source=b"\x89PNG")]), "content[0].source"),
        (
            cw.Message(role="user", content=[cw.ToolResult(call_id="c", content=[cw.TextPart(text=b"r")])]),  # type: ignore[arg-type]
            "content[0].content[0].text",
        ),
    ],
)
def test_struct_fields_holding_bytes_are_refused_as_dicts_are(message: cw.Message, field: str) -> None:
    """fresh17 #5: msgspec writes bytes as base64 text, so a struct's bytes passed the type
    check: counted and cut as base64 and sent back as text (a dict's are refused)."""
    ms = [
        cw.Message(role="user", content=[cw.TextPart(text="old")]),
        cw.Message(role="assistant", content=[cw.TextPart(text="a")]),
        message,
    ]
    calls = [
        lambda: cw.count_messages(ms),
        lambda: cw.trim_turns(ms, budget=50),
        lambda: cw.token_breakdown(ms),
        lambda: cw.validate(ms, provider="openai"),
        lambda: cw.fit(ms, 50),
    ]
    for call in calls:
        with pytest.raises(cw.InvalidMessageError) as info:
            call()
        assert (info.value.index, info.value.field) == (2, field)
        assert str(info.value) == f"message 2, field {field}: must be a string"


@pytest.mark.parametrize("content", [None, 5])
def test_struct_content_that_is_not_a_list_names_the_field(content: Any) -> None:
    """fresh17 #6: content=None said "'NoneType' object is not iterable", no index."""
    with pytest.raises(cw.InvalidMessageError) as info:
        cw.count_messages(
            [cw.Message(role="user", content=[cw.TextPart(text="q")]), cw.Message(role="user", content=content)]
        )
    assert str(info.value) == "message 1, field content: must be a list of parts"


# ---------------------- struct17: values JSON cannot represent, struct fields of any type


def _struct_calls(ms: list[Any]) -> list[Any]:
    return [
        lambda: cw.count_messages(ms),
        lambda: cw.trim_turns(ms, budget=50),
        lambda: cw.validate(ms, provider="openai"),
        lambda: cw.fit(ms, 50),
        lambda: cw.repair_tool_pairs(ms),
    ]


class _Odd:
    """A value of a type JSON has not (the tester used ``object()``)."""


_Q_STRUCT = cw.Message(role="user", content=[cw.TextPart(text="ok")])


@pytest.mark.parametrize(
    ("message", "field", "reason"),
    [
        # typed fields: the dict's words for a value of the wrong type
        (
            cw.Message(role="user", content=[cw.TextPart(text="x")], name=fractions.Fraction(1, 2)),
            "name",
            "must be a string",
        ),  # type: ignore[arg-type]
        (cw.Message(role="user", content=[cw.TextPart(text="x")], id=complex(1, 2)), "id", "must be a string"),  # type: ignore[arg-type]
        (cw.Message(role="user", content=[cw.TextPart(text=_Odd())]), "content[0].text", "must be a string"),  # type: ignore[arg-type]
        (
            cw.Message(role="user", content=[cw.TextPart(text=decimal.Decimal("1"))]),
            "content[0].text",
            "must be a string",
        ),  # type: ignore[arg-type]
        (
            cw.Message(role="assistant", content=[cw.ToolCall(id="c", name=_Odd(), arguments="{}")]),  # type: ignore[arg-type]
            "content[0].name",
            "must be a string",
        ),
        (cw.Message(role="user", content=[cw.TextPart(text="x")], name=float("nan")), "name", "must be a string"),  # type: ignore[arg-type]
        (cw.Message(role="user", content=[cw.TextPart(text="x")], id=float("inf")), "id", "must be a string"),  # type: ignore[arg-type]
        (
            cw.Message(role="user", content=[cw.TextPart(text="x")], priority=float("inf")),
            "priority",
            "must be an int 0-3",
        ),  # type: ignore[arg-type]
        (
            cw.Message(role="user", content=[cw.TextPart(text="x")], content_kind=float("nan")),  # type: ignore[arg-type]
            "content_kind",
            'must be "text", "parts", "null" or "absent"',
        ),
        (
            cw.Message(role="user", content=[cw.ImagePart(width=float("nan"), height=5)]),
            "content[0].width",
            "must be an int",
        ),  # type: ignore[arg-type]
        # values the library treats as JSON: the dict path's words, and where the value is
        (
            cw.Message(role="user", content=[cw.TextPart(text="x", extra={"k": _Odd()})]),
            "content[0].extra.k",
            "holds a value JSON cannot represent (a Python _Odd)",
        ),
        (
            cw.Message(role="user", content=[cw.TextPart(text="x")], extra={"k": [1, b"ab"]}),
            "extra.k[1]",
            "holds a value JSON cannot represent (a Python bytes)",
        ),
        (
            cw.Message(role="user", content=[cw.OpaquePart(type="input_audio", raw={"data": bytearray(b"RIFF")})]),
            "content[0].raw.data",
            "holds a value JSON cannot represent (a Python bytearray)",
        ),
        (
            cw.Message(role="user", content=[cw.ImagePart(source={"type": "base64", "data": {1, 2}})]),
            "content[0].source.data",
            "holds a value JSON cannot represent (a Python set)",
        ),
        (
            cw.Message(
                role="tool",
                content=[cw.ToolResult(call_id="c", content=[cw.TextPart(text="r", extra={"m": memoryview(b"x")})])],
            ),
            "content[0].content[0].extra.m",
            "holds a value JSON cannot represent (a Python memoryview)",
        ),
        (
            cw.Message(role="user", content=[cw.TextPart(text="x", extra={"k": fractions.Fraction(1, 3)})]),
            "content[0].extra.k",
            "holds a value JSON cannot represent (a Python Fraction)",
        ),
    ],
)
def test_struct_values_of_any_type_are_refused_naming_message_and_field(
    message: cw.Message, field: str, reason: str
) -> None:
    """fresh17b #1, #3, #4: object(), Fraction, complex in any struct field gave msgspec's
    bare "Encoding objects of type object is unsupported" (no index, no field); NaN/inf
    (msgspec writes null) and Decimal (written as a string) passed where a dict's is
    refused; bytes, sets and memoryviews in extra/raw/source were counted as base64 text
    or arrays and handed back."""
    ms = [_Q_STRUCT, message]
    for call in _struct_calls(ms):
        with pytest.raises(cw.InvalidMessageError) as info:
            call()
        assert (info.value.index, info.value.field) == (1, field)
        assert str(info.value) == f"message 1, field {field}: {reason}"


def test_struct_fault_in_an_earlier_message_is_named_first() -> None:
    """A value the type check finds (message 1) comes before one msgspec finds later
    (message 2), and the reverse."""
    bad_late = cw.Message(role="user", content=[cw.TextPart(text=5)])  # type: ignore[arg-type]
    bad_early = cw.Message(role="user", content=[cw.TextPart(text="x")], extra={"k": b"x"})
    with pytest.raises(cw.InvalidMessageError) as info:
        cw.count_messages([_Q_STRUCT, bad_early, bad_late])
    assert (info.value.index, info.value.field) == (1, "extra.k")
    with pytest.raises(cw.InvalidMessageError) as info:
        cw.count_messages([_Q_STRUCT, bad_late, bad_early])
    assert str(info.value) == "message 1, field content[0].text: must be a string"


def _use_of(value: Any) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {"blob": value}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "r"}]},
    ]


@pytest.mark.parametrize(
    "value", [b"x" * 300, bytearray(b"ab"), memoryview(b"ab"), {1, 2}, frozenset(), decimal.Decimal("1")]
)
def test_dict_values_json_cannot_represent_are_refused_naming_message_and_field(reader: bool, value: Any) -> None:
    """fresh17b #3: bytes, bytearray, memoryview and sets in a value the dict path counts
    as JSON (a tool_use input, a thinking block, an unknown key, an OpenAI part's unknown
    key, an image's source) were written by msgspec as base64 text or an array, counted
    so, and handed back as they were (the native reader did the same)."""
    name = type(value).__name__
    cases = [
        (_use_of(value), 1, "content[0].input.blob"),
        ([{"role": "user", "content": [{"type": "thinking", "thinking": value}]}], 0, "content[0].thinking"),
        ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "x": {"y": value}}], 1, "x.y"),
        ([{"role": "user", "content": [{"type": "text", "text": "t", "cache": [value]}]}], 0, "content[0].cache[0]"),
        (
            [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": value, "format": "wav"}}]}],
            0,
            "content[0].input_audio.data",
        ),
        (
            [{"role": "user", "content": [{"type": "image", "source": {"type": "other", "blob": value}}]}],
            0,
            "content[0].source.blob",
        ),
    ]
    for msgs, index, field in cases:
        for call in (
            lambda m: cw.count_messages(m),
            lambda m: cw.trim_turns(m, 5),
            lambda m: cw.fit(m, 5),
            lambda m: cw.validate(m, "anthropic"),
        ):
            with pytest.raises(cw.InvalidMessageError) as info:
                call(msgs)
            assert (
                str(info.value)
                == f"message {index}, field {field}: holds a value JSON cannot represent (a Python {name})"
            )


def test_dict_object_in_an_unknown_key_names_the_field(reader: bool) -> None:
    """fresh17b #1: the dict's error named the message only; now the key too, as a
    struct's."""
    msgs = [
        {"role": "user", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": "x", "k": _Odd()}]},
    ]
    with pytest.raises(cw.InvalidMessageError) as info:
        cw.count_messages(msgs)
    assert str(info.value) == "message 1, field content[0].k: holds a value JSON cannot represent (a Python _Odd)"


@pytest.mark.parametrize("value", [b"xx", {1}, memoryview(b"a")])
def test_tool_schemas_holding_values_json_cannot_represent_are_refused(value: Any) -> None:
    """fresh17b #3: a tool schema holding bytes was counted as base64 text."""
    tools = [{"name": "g", "input_schema": {}}, {"name": "f", "input_schema": {"type": "object", "b": value}}]
    with pytest.raises(cw.InvalidRequestError) as info:
        cw.count_messages([{"role": "user", "content": "x"}], tools=tools)
    assert str(info.value) == (
        f"tools[1].input_schema.b: holds a value JSON cannot represent (a Python {type(value).__name__})"
    )


class _Float(float):
    """A float subclass (as ``numpy.float64`` is one)."""


_NAN, _INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    ("message", "field", "what"),
    [
        (cw.Message(role="user", content=[cw.TextPart(text="x")], extra={"k": _NAN}), "extra.k", "a float nan"),
        (
            cw.Message(role="user", content=[cw.TextPart(text="x", extra={"k": [1.5, -_INF]})]),
            "content[0].extra.k[1]",
            "a float -inf",
        ),
        (
            cw.Message(role="assistant", content=[cw.ToolCall(id="c", name="f", arguments="{}", extra={"t": _INF})]),
            "content[0].extra.t",
            "a float inf",
        ),
        (
            cw.Message(role="assistant", content=[cw.OpaquePart(type="thinking", raw={"type": "thinking", "n": _NAN})]),
            "content[0].raw.n",
            "a float nan",
        ),
        (
            cw.Message(role="assistant", content=[cw.OpaquePart(type="x", raw=_Float("inf"))]),
            "content[0].raw",
            "a float inf",
        ),
        (
            cw.Message(
                role="user", content=[cw.ImagePart(source={"type": "url", "url": "https://x/a.png", "w": _NAN})]
            ),
            "content[0].source.w",
            "a float nan",
        ),
        (
            cw.Message(
                role="tool",
                content=[cw.ToolResult(call_id="c", content=[cw.TextPart(text="r", extra={"m": {"n": _NAN}})])],
            ),
            "content[0].content[0].extra.m.n",
            "a float nan",
        ),
    ],
)
def test_struct_nan_and_inf_in_json_values_are_refused(message: cw.Message, field: str, what: str) -> None:
    """struct18 #3: NaN and inf in a value the library carries as JSON (a struct's
    extra, an opaque part's raw, an image's source) were written as ``null`` (msgspec's
    choice; JSON has no such number), counted so and handed back; now refused as any
    value JSON cannot represent, naming message and field."""
    ms = [_Q_STRUCT, message]
    for call in [*_struct_calls(ms), lambda: cw.validate(ms, "anthropic")]:
        with pytest.raises(cw.InvalidMessageError) as info:
            call()
        assert str(info.value) == f"message 1, field {field}: holds a value JSON cannot represent ({what})"


@pytest.mark.parametrize(("value", "what"), [(_NAN, "nan"), (_INF, "inf"), (-_INF, "-inf"), (_Float("nan"), "nan")])
def test_dict_nan_and_inf_in_json_values_are_refused(reader: bool, value: float, what: str) -> None:
    """struct18 #3: the dict path (adapters and native reader) wrote NaN and inf in a
    tool_use input, an unknown key, a block it does not model or an image's source as
    ``null``; a tool schema's too."""
    cases = [
        (_use_of(value), 1, "content[0].input.blob"),
        ([{"role": "user", "content": [{"type": "thinking", "thinking": "t", "n": value}]}], 0, "content[0].n"),
        ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "x": {"y": value}}], 1, "x.y"),
        ([{"role": "user", "content": "q", "x": value}], 0, "x"),
        ([{"role": "user", "content": [{"type": "text", "text": "t", "cache": [value]}]}], 0, "content[0].cache[0]"),
        (
            [{"role": "user", "content": [{"type": "image", "source": {"type": "other", "blob": value}}]}],
            0,
            "content[0].source.blob",
        ),
        (
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}, "n": value}
                    ],
                },
                {"role": "tool", "tool_call_id": "a", "content": "r"},
            ],
            0,
            "tool_calls[0].n",
        ),
    ]
    for msgs, index, field in cases:
        for call in (
            lambda m: cw.count_messages(m),
            lambda m: cw.trim_turns(m, 5),
            lambda m: cw.trim_turns(m, 10**6),
            lambda m: cw.fit(m, 5),
        ):
            with pytest.raises(cw.InvalidMessageError) as info:
                call(msgs)
            assert (
                str(info.value)
                == f"message {index}, field {field}: holds a value JSON cannot represent (a float {what})"
            )
    tools = [{"name": "g", "input_schema": {}}, {"name": "f", "input_schema": {"type": "object", "b": [value]}}]
    with pytest.raises(cw.InvalidRequestError) as err:
        cw.count_messages([{"role": "user", "content": "x"}], tools=tools)
    assert str(err.value) == f"tools[1].input_schema.b[0]: holds a value JSON cannot represent (a float {what})"


def test_finite_floats_in_json_values_are_still_taken(reader: bool) -> None:
    """Finite floats (-0.0, the largest) stay JSON numbers, counted as msgspec writes
    them; a finite float as a key is a key JSON writes as its text ("1.5")."""
    for value in (2.5, -0.0, 1.7976931348623157e308):
        # counted as the number's text (a Raw is a number kept as written), never as null
        assert cw.count_messages(_use_of(value)) == cw.count_messages(_use_of(msgspec.Raw(msgspec.json.encode(value))))
        m = [cw.Message(role="user", content=[cw.TextPart(text="x")], extra={"k": value})]
        assert cw.trim_turns(m, 10**6).messages[0] is m[0]
    as_text = cw.count_messages([{"role": "user", "content": "q", "x": {"1.5": 1}}])
    assert cw.count_messages([{"role": "user", "content": "q", "x": {1.5: 1}}]) == as_text


@pytest.mark.parametrize(("key", "what"), [(_NAN, "nan"), (_INF, "inf"), (-_INF, "-inf"), (_Float("nan"), "nan")])
def test_nan_and_inf_as_keys_are_refused_as_such_values_are(reader: bool, key: float, what: str) -> None:
    """tools19: a NaN or infinite float as a dict key inside a JSON value was written as
    the key "nan" (msgspec's text; json.dumps writes "NaN") and counted, while such a
    float as a value is refused. Now refused in the same words, named at the object
    holding the key, as a key of another type JSON has not (``None``) is."""
    reason = f"holds a value JSON cannot represent (a float {what} as a key)"
    cases = [
        (_use_of({key: 1}), 1, "content[0].input.blob"),
        ([{"role": "user", "content": "q", "x": {key: 1}}], 0, "x"),
        (
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "x": {"y": [{key: 1}]}}],
            1,
            "x.y[0]",
        ),
        (
            [{"role": "user", "content": [{"type": "thinking", "thinking": "t", "n": {"a": 1, key: 2}}]}],
            0,
            "content[0].n",
        ),
    ]
    for msgs, index, field in cases:
        for call in (
            lambda m: cw.count_messages(m),
            lambda m: cw.trim_turns(m, 10**6),
            lambda m: cw.fit(m, 5),
        ):
            with pytest.raises(cw.InvalidMessageError) as info:
                call(msgs)
            assert str(info.value) == f"message {index}, field {field}: {reason}"
    structs = [
        (cw.Message(role="user", content=[cw.TextPart(text="x")], extra={"k": {key: 1}}), "extra.k"),
        (
            cw.Message(role="assistant", content=[cw.ToolCall(id="c", name="f", arguments="{}", extra={key: 1})]),
            "content[0].extra",
        ),
        (cw.Message(role="assistant", content=[cw.OpaquePart(type="x", raw={"r": [{key: 0}]})]), "content[0].raw.r[0]"),
    ]
    for message, field in structs:
        ms = [_Q_STRUCT, message]
        for scall in [*_struct_calls(ms), lambda ms=ms: cw.validate(ms, "anthropic")]:
            with pytest.raises(cw.InvalidMessageError) as info:
                scall()
            assert str(info.value) == f"message 1, field {field}: {reason}"
    tools = [{"name": "g", "input_schema": {}}, {"name": "f", "input_schema": {"properties": {key: {}}}}]
    with pytest.raises(cw.InvalidRequestError) as err:
        cw.count_messages([{"role": "user", "content": "x"}], tools=tools)
    assert str(err.value) == f"tools[1].input_schema.properties: {reason}"


def test_the_gateway_reads_no_nan() -> None:
    """struct18 #3: the gateway reads JSON, which has no NaN: ``NaN`` in a body is a
    syntax error there, as before, never a value to count."""
    body = b'{"messages": [{"role": "user", "content": "x", "k": NaN}]}'
    for call in (lambda: cw.count_request(body), lambda: cw.fit_request(body, budget=10**6)):
        with pytest.raises(cw.InvalidRequestError) as info:
            call()
        assert str(info.value) == "invalid request body at byte 52: expected value"


def test_json_values_still_taken_as_before(reader: bool) -> None:
    """What JSON represents stays accepted: tuples as arrays, int and float subclasses,
    str subclasses, None, bools, nested objects."""
    import enum

    class Level(enum.IntEnum):
        LOW = 1

    value = {"t": (1, 2.5, None, True), "e": Level.LOW, "s": [{"n": "x"}]}
    assert cw.count_messages(_use_of(value)) == cw.count_messages(
        _use_of({"t": [1, 2.5, None, True], "e": 1, "s": [{"n": "x"}]})
    )
    s = [_Q_STRUCT, cw.Message(role="user", content=[cw.TextPart(text="x", extra={"t": (1, 2)})])]
    assert cw.count_messages(s) == cw.count_messages(
        [_Q_STRUCT, cw.Message(role="user", content=[cw.TextPart(text="x", extra={"t": [1, 2]})])]
    )


@pytest.mark.parametrize(
    "part",
    [
        cw.ToolCall(id="a", name="f", arguments="{}"),
        cw.ImagePart(source="https://x/y.png"),
        cw.OpaquePart(type="x", raw={"type": "x"}),
    ],
)
def test_an_anthropic_struct_system_message_holds_text_parts_only(part: Any) -> None:
    """fresh17b #4: a struct system message holding a tool call or an image passed
    count_messages(format="anthropic") and validate(..., "anthropic"); the dict that
    message_to_anthropic writes for it is refused."""
    m = [
        cw.Message(role="system", content=[cw.TextPart(text="s"), part]),
        cw.Message(role="user", content=[cw.TextPart(text="q")]),
    ]
    # the writer refuses it as reading it does (fresh50 #3: it wrote it)
    with pytest.raises(cw.InvalidMessageError) as wrote:
        cw.adapters.message_to_anthropic(m[0])
    assert str(wrote.value) == "field content[1]: must be a text block"
    tool_use = {"type": "tool_use", "id": "a", "name": "f", "input": {}}
    d = [{"role": "system", "content": [{"type": "text", "text": "s"}, tool_use]}, {"role": "user", "content": "q"}]
    with pytest.raises(cw.InvalidMessageError) as want:
        cw.count_messages(d, format="anthropic")
    assert str(want.value) == "message 0, field content[1]: must be a text block"
    for call in (
        lambda: cw.count_messages(m, format="anthropic"),
        lambda: cw.validate(m, "anthropic"),
        lambda: cw.trim_turns(m, 5, format="anthropic"),
    ):
        with pytest.raises(cw.InvalidMessageError) as info:
            call()
        assert str(info.value) == str(want.value)
    assert cw.count_messages(m, format="openai") > 0  # OpenAI's rules are another matter


def test_validate_reports_struct_messages_the_adapters_cannot_write() -> None:
    """fresh17b #5: validate passed struct conversations message_to_openai cannot write
    (a tool message holding two results, an image with no source), so "passes validate"
    did not mean "can be sent"."""
    m = [
        cw.Message(role="user", content=[cw.TextPart(text="q")]),
        cw.Message(
            role="assistant",
            content=[cw.ToolCall(id="a", name="f", arguments="{}"), cw.ToolCall(id="b", name="f", arguments="{}")],
        ),
        cw.Message(role="tool", content=[cw.ToolResult(call_id="a"), cw.ToolResult(call_id="b")]),
    ]
    found = cw.validate(m, "openai")
    assert [(v.index, v.code) for v in found] == [(2, "unwritable_message")]
    assert found[0].detail == "field content: a tool message must hold one ToolResult and nothing else"
    # fresh50 #2: one result and a call said "must hold exactly one ToolResult", which it did
    with_call = cw.Message(
        role="tool", content=[cw.ToolResult(call_id="a"), cw.ToolCall(id="c", name="f", arguments="{}")]
    )
    odd = cw.validate([*m[:2], with_call, cw.Message(role="tool", content=[cw.ToolResult(call_id="b")])], "openai")
    with pytest.raises(cw.InvalidMessageError, match="a tool message must hold one ToolResult and nothing else"):
        cw.adapters.from_canonical(with_call, "openai")
    # validate names the call (which repair removes), not the writer's refusal of it too
    # (fresh50 #2: it named only that)
    assert [(v.index, v.code) for v in odd] == [(2, "call_outside_assistant")]
    # Anthropic: message_to_anthropic writes the tool message as a user message holding
    # both tool_result blocks, which answers the calls before it; validate takes it as
    # that user message (fresh19 F5: role_not_allowed, result_outside_user_message and
    # unanswered_call for what the writer writes and Anthropic takes)
    assert cw.validate(m, "anthropic") == []
    assert cw.adapters.message_to_anthropic(m[2]) == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "a"}, {"type": "tool_result", "tool_use_id": "b"}],
    }
    m2 = [
        cw.Message(role="developer", content=[cw.ImagePart(width=10, height=10)]),
        cw.Message(role="user", content=[cw.TextPart(text="q")]),
    ]
    found = cw.validate(m2, "openai")
    # (an image in a developer message is image_not_allowed too: fresh23 #2)
    assert [(v.index, v.code, v.detail) for v in found][1:] == [
        (0, "unwritable_message", "field content: image has no source an OpenAI image_url can hold")
    ]
    assert found[0].code == "image_not_allowed"
    # what the adapters write passes
    ok = [m[0], cw.Message(role="user", content=[cw.ImagePart(source="https://x/i.png")])]
    assert cw.validate(ok, "openai") == []


def test_validate_reports_an_unwritable_message_another_violation_names() -> None:
    """small20 (a helper's leftover): a call with non-JSON arguments and no result, bound
    for Anthropic, got ``unanswered_call`` alone (a message another violation named was
    not checked for writing), while the repaired output, the stub added, got
    ``unwritable_message``: validating the input did not tell that the request fails
    either way. Now every message the adapter cannot write is reported, but for where
    an OpenAI message's tool results are, which the pairing violations name and repair
    mends: what else in it the adapter cannot write is then reported."""
    q = cw.Message(role="user", content=[cw.TextPart(text="q")])
    call = cw.Message(role="assistant", content=[cw.ToolCall(id="c", name="f", arguments="not json")])
    args = (1, "unwritable_message", "field content[0].arguments: tool call arguments are not JSON")
    found = [(v.index, v.code, v.detail) for v in cw.validate([q, call], "anthropic")]
    assert found == [(1, "unanswered_call", 'tool call "c" has no result in the next user message'), args]
    repaired = cw.repair_tool_pairs([q, call], format="anthropic").messages
    assert [(v.index, v.code, v.detail) for v in cw.validate(repaired, "anthropic")] == [args]
    # OpenAI takes any arguments string: the call is the one fault
    assert [(v.index, v.code) for v in cw.validate([q, call], "openai")] == [(1, "unanswered_call")]
    # a custom call bound for Anthropic, unanswered, likewise
    custom = cw.Message(
        role="assistant", content=[cw.ToolCall(id="c", name="f", arguments="x", extra={"type": "custom"})]
    )
    assert [(v.index, v.code) for v in cw.validate([q, custom], "anthropic")] == [
        (1, "unanswered_call"),
        (1, "unwritable_message"),
    ]
    # OpenAI: a result in a user message is result_outside_tool_message alone (the
    # adapter's "a ToolResult cannot be an OpenAI content part" is that), but an image
    # beside it with no source is reported (the user message keeps it after repair)
    ok_call = cw.Message(role="assistant", content=[cw.ToolCall(id="c", name="f", arguments="{}")])
    placed = cw.Message(role="user", content=[cw.ToolResult(call_id="c", content=[cw.TextPart(text="r")])])
    assert [(v.index, v.code) for v in cw.validate([q, ok_call, placed], "openai")] == [
        (1, "unanswered_call"),
        (2, "result_outside_tool_message"),
    ]
    image = cw.Message(role="user", content=[*placed.content, cw.ImagePart(width=10, height=10)])
    no_source = "field content: image has no source an OpenAI image_url can hold"
    found = [(v.index, v.code, v.detail) for v in cw.validate([q, ok_call, image], "openai")]
    assert [f[:2] for f in found] == [
        (1, "unanswered_call"),
        (2, "result_outside_tool_message"),
        (2, "unwritable_message"),
    ]
    assert found[2][2] == no_source
    repaired = cw.repair_tool_pairs([q, ok_call, image], format="openai").messages
    assert [(v.index, v.code, v.detail) for v in cw.validate(repaired, "openai")] == [
        (3, "unwritable_message", no_source)
    ]
    # a tool message holding an orphan beside its result: orphan_result alone; an image
    # without a source inside one of its results is reported, named in the message
    tool = cw.Message(role="tool", content=[cw.ToolResult(call_id="c"), cw.ToolResult(call_id="zz")])
    assert [(v.index, v.code) for v in cw.validate([q, ok_call, tool], "openai")] == [(2, "orphan_result")]
    bad = cw.ToolResult(call_id="c", content=[cw.ImagePart(width=10, height=10)], content_kind="parts")
    tool = cw.Message(role="tool", content=[cw.ToolResult(call_id="zz"), bad])
    found = [(v.index, v.code, v.detail) for v in cw.validate([q, ok_call, tool], "openai")]
    # (the image in a tool result is image_not_allowed first: fresh23 #2)
    assert found[1:] == [
        (2, "orphan_result", 'tool result "zz" does not answer a call of the preceding assistant message'),
        (2, "unwritable_message", "field content[1].content: image has no source an OpenAI image_url can hold"),
    ]
    assert found[0][:2] == (2, "image_not_allowed")
    repaired = cw.repair_tool_pairs([q, ok_call, tool], format="openai").messages
    assert [(v.index, v.code) for v in cw.validate(repaired, "openai")] == [
        (2, "image_not_allowed"),
        (2, "unwritable_message"),
    ]


@pytest.mark.parametrize(
    ("messages", "text"),
    [
        (
            [cw.Message(role="user", content=[cw.TextPart(text="a")]), None],
            "message 1: must be a Message struct, got None",
        ),
        (
            [None, cw.Message(role="user", content=[cw.TextPart(text="a")])],
            "message 0: must be a Message struct, got None",
        ),
        ([cw.Message(role="user", content=[cw.TextPart(text="a")]), 5], "message 1: must be a Message struct, got int"),
        (
            [cw.Message(role="user", content=[cw.TextPart(text="a")]), {"role": "user", "content": "x"}],
            "message 1: mixes Message structs and dicts",
        ),
    ],
)
def test_a_struct_list_holding_neither_struct_nor_dict_says_so(messages: list[Any], text: str) -> None:
    """fresh17c #10: a None among structs was "mixes Message structs and dicts"."""
    with pytest.raises(cw.InvalidMessageError) as info:
        cw.count_messages(messages)
    assert str(info.value) == text


@pytest.mark.parametrize("source", [[1, 2], 5, 2.5, True])
def test_an_image_source_that_is_neither_string_nor_dict_is_refused(source: Any) -> None:
    """fresh17c #8: a list or a number was counted as an image of unknown size (1,643
    tokens); an URL string (OpenAI) or a source object (Anthropic) is what it can be."""
    with pytest.raises(cw.InvalidMessageError) as info:
        cw.count_messages([cw.Message(role="user", content=[cw.ImagePart(source=source)])])
    assert str(info.value) == "message 0, field content[0].source: must be a string or a dict"


@pytest.mark.parametrize(
    ("messages", "field", "what"),
    [
        (
            [
                cw.Message(role="user", content=[cw.TextPart(text="a")]),
                cw.Message(role="user", content=[cw.TextPart(text="b")], extra={None: 1}),
            ],
            "message 1, field extra",
            "a Python NoneType as a key",
        ),
        (
            [cw.Message(role="user", content=[cw.OpaquePart(type="x", raw={"a": {(1, 2): 3}})])],
            "message 0, field content[0].raw.a",
            "a Python tuple as a key",
        ),
        (
            [cw.Message(role="user", content=[cw.TextPart(text="a", extra={True: 1})])],
            "message 0, field content[0].extra",
            "a Python bool as a key",
        ),
        (
            [{"role": "user", "content": "a"}, {"role": "user", "content": "b", "x": {None: 1}}],
            "message 1, field x",
            "a Python NoneType as a key",
        ),
        (
            [
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"q": {False: 1}}}],
                }
            ],
            "message 0, field content[0].input.q",
            "a Python bool as a key",
        ),
    ],
)
def test_a_key_json_cannot_write_names_the_message_and_field(messages: list[Any], field: str, what: str) -> None:
    """fresh17c #6: msgspec's "Only dicts with str-like or number-like keys are supported"
    named no message (structs) or no field (dicts). Number keys are written as text and
    stay accepted."""
    with pytest.raises(cw.InvalidMessageError) as info:
        cw.count_messages(messages)
    assert str(info.value) == f"{field}: holds a value JSON cannot represent ({what})"
    assert cw.count_messages([cw.Message(role="user", content=[cw.TextPart(text="a", extra={1: 1, 2.5: 2})])]) > 0


@settings(max_examples=300, deadline=None)
@given(
    value=st.dictionaries(_JSON_TEXT, _JSON_VALUES, max_size=4),
    ascii_only=st.booleans(),
    indent=st.sampled_from([None, 1]),
)
def test_top_keys_are_the_objects_keys(value: dict[str, Any], ascii_only: bool, indent: int | None) -> None:
    """small20: ``_top_keys``, which names a deep one-message file ``message 0``, reads
    every key of the top-level object, whatever its values hold (brackets and quotes in
    strings, runs of brackets)."""
    assert _top_keys(json.dumps(value, ensure_ascii=ascii_only, indent=indent)) == set(value)
    deep = {**value, "x": [[[[[]]]]], "role": "user"}
    assert _top_keys(json.dumps(deep, ensure_ascii=ascii_only, indent=indent)) == set(deep)
