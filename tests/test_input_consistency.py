"""The three doors refuse the same input with the same words.

The dict path (``count_messages`` on Python dicts), the gateway (``count_request`` /
``fit_request`` on the raw body) and the CLI (``contextwindow count`` on a file) read the
same messages with the same rules (DESIGN section 1: one engine, many doors). Where a
message is bad, all three name the first bad message, with the same text (fresh8 N7).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import io
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contextwindow as cw
from contextwindow._engine import loads_keeping_numbers
from contextwindow.adapters import detect_format
from contextwindow.cli import main
from contextwindow.compact import budget_tool_results, micro_compact, prune_middle
from contextwindow.errors import InvalidMessageError
from contextwindow.messages import Message, TextPart, ToolCall

from shared_data import corpus_files, load


def dict_error(messages: list[Any], fmt: str | None = None) -> str:
    """The dict path's error text for ``messages``."""
    with pytest.raises(InvalidMessageError) as info:
        cw.count_messages(messages, format=fmt)
    return str(info.value)


def gateway_errors(body: bytes, provider: str | None = None) -> list[str]:
    """``count_request``'s and ``fit_request``'s error texts for ``body``."""
    out = []
    for call in (
        lambda: cw.count_request(body, provider=provider),
        lambda: cw.fit_request(body, budget=10**6, provider=provider),
    ):
        with pytest.raises(cw.ContextWindowError) as info:
            call()
        out.append(str(info.value))
    return out


def cli_error(body: bytes, fmt: str | None = None) -> str:
    """What ``contextwindow count`` prints for a file holding ``body``, without the
    ``contextwindow: error: <path>: `` prefix; it must exit 2 with one line."""
    with tempfile.TemporaryDirectory() as d:
        f = str(Path(d) / "in.json")
        Path(f).write_bytes(body)
        argv = ["count", f] + (["--format", fmt] if fmt else [])
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(argv)
    text = err.getvalue()
    assert rc == 2, text
    prefix = f"contextwindow: error: {f}: "
    assert text.startswith(prefix) and text.count("\n") == 1, text
    return text[len(prefix) : -1]


def same_everywhere(messages: list[Any], fmt: str | None = None) -> str:
    """The one error text all three doors give for ``messages`` (in a body of its own)."""
    body = json.dumps({"model": "m", "messages": messages}).encode()
    want = dict_error(messages, fmt)
    assert gateway_errors(body, fmt) == [want, want]
    assert cli_error(body, fmt) == want
    return want


# ------------------------------------------------------------------ fresh8 N7, repros


def test_first_bad_message_is_named_not_a_later_non_object() -> None:
    # message 0 has a bad content, message 2 is not an object: message 0 is named first
    msgs = [{"role": "user", "content": 5}, {"role": "user", "content": "a"}, "x"]
    assert same_everywhere(msgs) == "message 0, field content: must be a string or a list of blocks"
    # the other way round: the non-object is the first bad message
    msgs = [{"role": "user", "content": "a"}, 7, {"role": "user", "content": 5}]
    assert same_everywhere(msgs) == "message 1: must be an object"
    # Anthropic shape (a tool_use block makes it so), a non-object after a bad block
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "s"}]},
        None,
    ]
    assert same_everywhere(msgs) == "message 1, field content[0].input: must be an object"


def test_unknown_role_is_quoted_the_same_way() -> None:
    assert same_everywhere([{"role": "wizard", "content": "a"}]) == 'message 0, field role: unknown role "wizard"'
    # both shapes, and a name that needs escaping: written as a JSON string on every path
    assert (
        same_everywhere([{"role": "it's", "content": "a"}], "anthropic")
        == 'message 0, field role: unknown role "it\'s"'
    )
    assert same_everywhere([{"role": 'a"b\n', "content": "a"}], "openai") == (
        r'message 0, field role: unknown role "a\"b\n"'
    )
    # a non-ASCII name is written as it is (json.dumps(ensure_ascii=False), serde_json)
    assert same_everywhere([{"role": "мастер", "content": "a"}]) == 'message 0, field role: unknown role "мастер"'


def test_the_deprecated_function_role_is_named_as_function_call_is() -> None:
    """fresh18 F5: a ``function`` message (the result half of the deprecated
    function-calling form, whose call half ``function_call`` is named so) got ``unknown
    role "function"``; OpenAI's shape names the form and what to send instead."""
    msgs = [{"role": "user", "content": "q"}, {"role": "function", "name": "f", "content": "x"}]
    want = 'message 1, field role: the deprecated function-calling form is not read; send a "tool" message'
    assert same_everywhere(msgs) == want
    assert same_everywhere(msgs, "openai") == want
    # the finding's call, word for word: the message alone
    assert same_everywhere([{"role": "function", "name": "f", "content": "x"}]) == want.replace("1", "0", 1)
    # Anthropic's API never had a function role: a role it does not know, as before
    assert same_everywhere(msgs, "anthropic") == 'message 1, field role: unknown role "function"'
    # the role is checked first, as any unknown role: a bad content after it is not named
    assert same_everywhere([{"role": "function", "content": 5}]) == want.replace("1", "0", 1)


@pytest.mark.parametrize("fast_reader", [True, False])
def test_a_function_message_marks_a_list_as_openai(monkeypatch: pytest.MonkeyPatch, fast_reader: bool) -> None:
    """tools19: only OpenAI has the ``function`` role, yet the format detection did not
    take it as OpenAI's mark (``tool`` and ``developer`` are): a list that held an
    Anthropic block besides was read as Anthropic's and got ``unknown role "function"``.
    Now read as OpenAI's on every path (the adapters, the native dict reader, the
    gateway, the CLI), whose words name the deprecated form."""
    monkeypatch.setattr(cw._engine, "FAST_READER", fast_reader)
    want = 'message 1, field role: the deprecated function-calling form is not read; send a "tool" message'
    function = {"role": "function", "name": "f", "content": "x"}
    # otherwise ambiguous (plain text): OpenAI's, as any plain chat, before and after
    plain = [{"role": "user", "content": "q"}, function, {"role": "assistant", "content": "a"}]
    assert detect_format(plain) == "openai"
    assert same_everywhere(plain) == want
    # a thinking block (Anthropic's mark) after it, or an image with a source: was anthropic
    thinking = {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}]}
    image = {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}]}
    for msgs in ([{"role": "user", "content": "q"}, function, thinking], [image, function]):
        assert detect_format(msgs) == "openai"
        assert same_everywhere(msgs) == want
        # told the shape, each adapter says what it said before
        assert dict_error(msgs, "anthropic") == 'message 1, field role: unknown role "function"'
    # read as Anthropic's for a top-level "system": the gateway and the CLI say why, as
    # for a tool message
    body = json.dumps({"system": "s", "messages": [{"role": "user", "content": "q"}, function]}).encode()
    why = ' (read as an Anthropic body for its top-level "system"; {} reads it as OpenAI\'s)'
    unknown = 'message 1, field role: unknown role "function"'
    assert gateway_errors(body) == [unknown + why.format('provider="openai"')] * 2
    assert cli_error(body) == unknown + why.format("--format openai")


# ------------------------------------------------ fresh11 N6: Message structs, dict words


def _struct_error(call: Any, messages: list[Any]) -> str:
    """The error text of ``call(messages)``, without the ``conversation 0: `` that
    ``count_many`` puts first."""
    with pytest.raises(InvalidMessageError) as info:
        call(messages)
    return str(info.value).removeprefix("conversation 0: ")


#: every public entry point that takes a list of messages (structs included)
_ENTRY_POINTS = [
    cw.count_messages,
    lambda m: cw.count_many([m]),
    lambda m: cw.trim_turns(m, 10**6),
    lambda m: cw.trim_turn_count(m, 5),
    lambda m: cw.fit(m, 10**6),
    cw.segment_turns,
    cw.repair_tool_pairs,
    lambda m: cw.validate(m, "openai"),
    cw.token_breakdown,
    lambda m: cw.Estimator().count_messages(m),
    lambda m: cw.ContextGuard(context_window=8000, max_output_tokens=2000).check(m),
    micro_compact,
    lambda m: prune_middle(m, keep_recent=1),
    lambda m: budget_tool_results(m, 10**6),
    lambda m: cw.recover_from_overflow(m, budget=10**6),
]


@pytest.mark.parametrize(
    ("struct", "as_dict", "want"),
    [
        # the README's words, which dicts get: a role name quoted as a JSON string
        (
            Message(role="wizard", content=[TextPart(text="x")]),  # type: ignore[arg-type]
            {"role": "wizard", "content": "x"},
            'message 0, field role: unknown role "wizard"',
        ),
        (
            Message(role='a"b\n', content=[TextPart(text="x")]),  # type: ignore[arg-type]
            {"role": 'a"b\n', "content": "x"},
            r'message 0, field role: unknown role "a\"b\n"',
        ),
        (
            Message(role="us\ud800er", content=[TextPart(text="x")]),  # type: ignore[arg-type]
            {"role": "us\ud800er", "content": "x"},
            'message 0, field role: unknown role "us\ufffder"',
        ),
        # tools19: the deprecated form's "function" role got `unknown role "function"` as a
        # struct, the form's words as a dict (fresh18 F5)
        (
            Message(role="function", name="f", content=[TextPart(text="x")]),  # type: ignore[arg-type]
            {"role": "function", "name": "f", "content": "x"},
            'message 0, field role: the deprecated function-calling form is not read; send a "tool" message',
        ),
        (
            Message(role=3, content=[TextPart(text="x")]),  # type: ignore[arg-type]
            {"role": 3, "content": "x"},
            "message 0, field role: must be a string",
        ),
        (
            Message(role="user", name=5, content=[TextPart(text="x")]),  # type: ignore[arg-type]
            {"role": "user", "name": 5, "content": "x"},
            "message 0, field name: must be a string",
        ),
        (
            Message(role="user", content=[TextPart(text=3)]),  # type: ignore[arg-type]
            {"role": "user", "content": [{"type": "text", "text": 3}]},
            "message 0, field content[0].text: must be a string",
        ),
        (
            Message(role="assistant", content=[ToolCall(id="t", name=None, arguments="{}")]),  # type: ignore[arg-type]
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": None, "input": {}}]},
            "message 0, field content[0].name: must be a string",
        ),
    ],
)
def test_message_structs_are_refused_in_the_words_dicts_get(struct: Message, as_dict: Any, want: str) -> None:
    """fresh11 N6: a struct with a bad role got msgspec's ``Invalid enum value 'wizard'``,
    a dict the README's ``unknown role "wizard"``; now both, on every entry point."""
    assert dict_error([as_dict]) == want
    for call in _ENTRY_POINTS:
        assert _struct_error(call, [struct]) == want


@pytest.mark.parametrize(
    ("struct", "want"),
    [
        # what only a struct can get wrong, in the adapters' style ("must be ...")
        (
            Message(role="user", content="hi"),  # type: ignore[arg-type]
            "message 0, field content: must be a list of parts",
        ),
        (
            Message(role="user", content=["hi"]),  # type: ignore[list-item]
            "message 0, field content[0]: must be a TextPart, ImagePart, ToolCall, ToolResult or OpaquePart",
        ),
        (
            Message(role="user", content=[{"type": "text", "text": "hi"}]),  # type: ignore[list-item]
            "message 0, field content[0]: must be a TextPart, ImagePart, ToolCall, ToolResult or OpaquePart",
        ),
        (
            Message(role="tool", content=[cw.ToolResult(call_id="t", content="r")]),  # type: ignore[arg-type]
            "message 0, field content[0].content: must be a list of parts",
        ),
        (
            Message(role="tool", content=[cw.ToolResult(call_id="t", content=[5])]),  # type: ignore[list-item]
            "message 0, field content[0].content[0]: must be a TextPart, ImagePart or OpaquePart",
        ),
        (
            Message(role="tool", content=[cw.ToolResult(call_id=7, content=[])]),  # type: ignore[arg-type]
            "message 0, field content[0].call_id: must be a string",
        ),
        (
            Message(role="user", pinned="yes", content=[TextPart(text="x")]),  # type: ignore[arg-type]
            "message 0, field pinned: must be a bool",
        ),
        (
            Message(role="user", priority=7, content=[TextPart(text="x")]),
            "message 0, field priority: must be an int 0-3",
        ),
        (
            Message(role="user", priority="1", content=[TextPart(text="x")]),  # type: ignore[arg-type]
            "message 0, field priority: must be an int 0-3",
        ),
        (
            Message(role="user", content=[cw.ImagePart(width=-1)]),
            "message 0, field content[0].width: must be an int >= 0",
        ),
        (
            Message(role="user", content=[TextPart(text="x")], content_kind="str"),  # type: ignore[arg-type]
            'message 0, field content_kind: must be "text", "parts", "null" or "absent"',
        ),
        (
            Message(role="user", content=[TextPart(text="x")], extra=[1]),  # type: ignore[arg-type]
            "message 0, field extra: must be a dict",
        ),
        # fresh16a F5: the struct fields a dict's detail, is_error and refusal become
        (
            Message(role="user", content=[cw.ImagePart(source="https://x", detail=5)]),  # type: ignore[arg-type]
            "message 0, field content[0].detail: must be a string",
        ),
        (
            Message(role="tool", content=[cw.ToolResult(call_id="t", content=[], is_error="yes")]),  # type: ignore[arg-type]
            "message 0, field content[0].is_error: must be a bool",
        ),
        (
            Message(role="assistant", content=[], extra={"refusal": 5}),
            "message 0, field refusal: must be a string",
        ),
    ],
)
def test_message_struct_fields_of_the_wrong_type_are_named_in_words(struct: Message, want: str) -> None:
    for call in _ENTRY_POINTS:
        assert _struct_error(call, [struct]) == want


_STRUCT_PART = "must be a TextPart, ImagePart, ToolCall, ToolResult or OpaquePart"


@pytest.mark.parametrize(
    ("struct", "as_dict", "dict_want", "want"),
    [
        (
            Message(role="user", content=[{"kind": "text", "text": "hi"}]),  # type: ignore[list-item]
            {"role": "user", "content": [{"kind": "text", "text": "hi"}]},
            "message 0, field content[0].type: is missing",
            f"message 0, field content[0]: {_STRUCT_PART}",
        ),
        (
            Message(role="user", content=(TextPart(text="hi"),)),  # type: ignore[arg-type]
            {"role": "user", "content": ({"type": "text", "text": "hi"},)},
            "message 0, field content: must be a string or a list of blocks",
            "message 0, field content: must be a list of parts",
        ),
        (
            Message(role="user", content=[cw.ToolResult(call_id="t", content=[{"kind": "text", "text": "r"}])]),  # type: ignore[list-item]
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"kind": "text"}]}]},
            "message 0, field content[0].content[0].type: is missing",
            "message 0, field content[0].content[0]: must be a TextPart, ImagePart or OpaquePart",
        ),
        (
            Message(role="user", content=[cw.ToolResult(call_id="t", content=(TextPart(text="r"),))]),  # type: ignore[arg-type]
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": ({"type": "text"},)}]},
            "message 0, field content[0].content: must be a string or a list of blocks",
            "message 0, field content[0].content: must be a list of parts",
        ),
    ],
)
def test_struct_content_holding_a_dict_part_or_a_tuple_is_refused(
    struct: Message, as_dict: Any, dict_want: str, want: str
) -> None:
    """struct18 #2: a dict with a ``kind`` in a struct's content was taken as the part
    msgspec decodes it to (counted, handed back as the dict; validate(..., "anthropic")
    raised AttributeError writing it), and a tuple content was taken; the dict path
    refuses both, a dict block without ``type`` and a content that is not a list. A
    struct's content is ``list[Part]``: a dict is not a part (one without ``kind`` was
    refused already) and a tuple not a list. Refused in the struct words for the same
    faults, naming message and field, on every entry point."""
    assert dict_error([as_dict], "anthropic") == dict_want
    for call in [*_ENTRY_POINTS, lambda m: cw.validate(m, "anthropic")]:
        assert _struct_error(call, [struct]) == want


def test_message_structs_name_the_first_bad_message() -> None:
    ok = Message(role="user", content=[TextPart(text="x")])
    msgs = [ok, Message(role="user", content="x"), Message(role="wizard", content=[])]  # type: ignore[arg-type]
    assert dict_error(msgs) == "message 1, field content: must be a list of parts"
    msgs = [ok, Message(role="wizard", content=[]), Message(role="user", content="x")]  # type: ignore[arg-type]
    assert dict_error(msgs) == 'message 1, field role: unknown role "wizard"'


# ------------------------------------ fresh11 N6: an echoed string is bounded, everywhere


def test_a_long_unknown_role_is_cut_the_same_way_on_every_path() -> None:
    """fresh11 N6: a 10 KB role gave a 10 KB one-line error. The first 100 characters
    are quoted, then how many were left out (10,000 - 100 = 9,900)."""
    want = 'message 0, field role: unknown role "' + "w" * 100 + '"... (9,900 more characters)'
    assert same_everywhere([{"role": "w" * 10_000, "content": "a"}]) == want
    assert same_everywhere([{"role": "w" * 10_000, "content": "a"}], "anthropic") == want
    assert dict_error([Message(role="w" * 10_000, content=[])]) == want  # type: ignore[arg-type]
    # 101 characters, not bytes: a surrogate pair (as JSON escapes it) is one
    want = 'message 0, field role: unknown role "' + "é" * 99 + '\U0001f600"... (1 more character)'
    assert same_everywhere([{"role": "é" * 99 + "\ud83d\ude00x", "content": "a"}]) == want
    # and a lone surrogate one U+FFFD (the CLI warns about it first: dict path and gateway)
    msgs = [{"role": "é" * 99 + "\ud83d\ude00\ud800", "content": "a"}]
    assert dict_error(msgs) == want
    assert gateway_errors(json.dumps({"messages": msgs}).encode()) == [want, want]


def test_a_long_repeated_key_and_a_long_key_in_a_path_are_cut_on_every_path() -> None:
    # a message's own key, 300 characters and a lone surrogate: 301 - 100 = 201 left out
    msgs = [{"role": "user", "content": "x", "K" * 300 + HI: 1, "K" * 300 + LO: 2}]
    want = 'message 0: the key "' + "K" * 100 + '"... (201 more characters) appears more than once'
    assert same_everywhere(_sur(msgs)) == want
    # a key on the way to the repeat (a tool_use input), named in the field path
    call = {"type": "tool_use", "id": "t", "name": "f", "input": {"L" * 250: {"x" + HI: 1, "x" + LO: 2}}}
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": [call]}]
    want = (
        "message 1, field content[0].input."
        + "L" * 100
        + '... (150 more characters): the key "x\ufffd" appears more than once'
    )
    assert same_everywhere(_sur(msgs)) == want


def test_a_long_call_id_is_cut_in_validate_details_and_the_cli() -> None:
    # validate's details quote ids with the same quote (Rust error::quote)
    call = {"id": "c" * 250, "type": "function", "function": {"name": "f", "arguments": "{}"}}
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": None, "tool_calls": [call]}]
    want = 'tool call "' + "c" * 100 + '"... (150 more characters) has no result before the next non-tool message'
    assert [v.detail for v in cw.validate(msgs, "openai")] == [want]
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "in.json"
        f.write_text(json.dumps({"messages": msgs}))
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            assert main(["validate", str(f)]) == 1
    assert out.getvalue() == f"{f}: message 1: unanswered_call: {want}\n"


# ------------------------------------------- differential: corpus messages, injected faults

FILES = corpus_files()


@functools.cache
def corpus_messages(i: int) -> tuple[str, str]:
    """File ``i``'s format and its messages as JSON text (decoded afresh per example)."""
    d = load(FILES[i])
    return d["format"], json.dumps(d["messages"])


FAULTS = ["non_object", "content_number", "unknown_role", "no_role", "role_number"]


def inject(messages: list[Any], at: int, fault: str) -> None:
    """Make message ``at`` bad in one of the ways every door refuses."""
    m = messages[at]
    if fault == "non_object" or not isinstance(m, dict):
        messages[at] = ["x"] if fault == "non_object" else 5
    elif fault == "content_number":
        m["content"] = 5
    elif fault == "unknown_role":
        m["role"] = "wizard"
    elif fault == "no_role":
        m.pop("role", None)
    else:
        m["role"] = 3


@pytest.mark.skipif(not FILES, reason="corpus not found beside the repo")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_corpus_with_faults_gives_the_same_error_on_every_door(data: st.DataObject) -> None:
    fmt, text = corpus_messages(data.draw(st.integers(0, len(FILES) - 1), label="file"))
    messages = json.loads(text)
    if not messages:
        return
    n = data.draw(st.integers(1, 3), label="faults")
    for _ in range(n):
        at = data.draw(st.integers(0, len(messages) - 1), label="at")
        inject(messages, at, data.draw(st.sampled_from(FAULTS), label="fault"))
    provider = data.draw(st.sampled_from([None, fmt]), label="provider")
    body = json.dumps({"messages": messages}).encode()
    want = dict_error(messages, provider)
    assert gateway_errors(body, provider) == [want, want]
    assert cli_error(body, provider) == want


# ------------------------------------------------------- fresh8 N5: numbers out of range

#: 10**5000 as JSON text: more digits than Python converts by default (4,300) and than a
#: float holds; msgspec's decoder refuses it ("Integer value out of range").
BIG = "1" + "0" * 5000


def cli_count(body: bytes, profile: str) -> int:
    """``contextwindow count --json`` on a file holding ``body``: its tokens."""
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "in.json"
        f.write_bytes(body)
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            assert main(["count", str(f), "--json", "--profile", profile]) == 0
    return json.loads(out.getvalue())[0]["tokens"]


def tool_use(value: str) -> str:
    """An Anthropic chat whose tool_use input is ``{"x": <value>}`` (JSON text), answered."""
    return (
        '[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t",'
        '"name":"f","input":{"x":NUM}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t",'
        '"content":"r"}]}]'.replace("NUM", value)
    )


NUMBERS = {
    # the tester's table: an extra key, a block the model does not hold, a tool_use input
    "extra key 10**5000": '[{"role":"user","content":"a"},{"role":"assistant","content":"b","x":NUM}]'.replace(
        "NUM", BIG
    ),
    "unknown block 10**5000": '[{"role":"user","content":[{"type":"weird","x":NUM}]}]'.replace("NUM", BIG),
    "tool_use input 10**5000": tool_use(BIG),
    "extra key 1e400": '[{"role":"user","content":"a","x":1e400}]',
    "unknown block -1e400": '[{"role":"user","content":[{"type":"weird","x":-1e400}]}]',
    "tool_use input 1e400": tool_use("1e400"),
    "tool schema 1e400": (
        '{"tools":[{"name":"f","input_schema":{"maximum":1e400}}],"messages":[{"role":"user","content":"a"}]}'
    ),
}


@pytest.mark.parametrize("profile", ["conservative", "bytes4"])
@pytest.mark.parametrize("name", list(NUMBERS))
def test_numbers_out_of_range_are_kept_and_counted_alike(name: str, profile: str) -> None:
    text = NUMBERS[name]
    doc = loads_keeping_numbers(text)
    body = (text if text.startswith("{") else '{"messages":' + text + "}").encode()
    if isinstance(doc, list):
        doc = {"messages": doc}
    # the dict path on what the CLI reads (msgspec.Raw for the numbers msgspec refuses)
    want = cw.count_messages(doc["messages"], profile, tools=doc.get("tools"))
    assert cw.count_request(body, profile=profile) == want
    assert cli_count(body, profile) == want
    # kept and counted as written: fit_request gives the body back unchanged
    assert cw.fit_request(body, budget=10**6, profile=profile) == body


def test_a_number_out_of_range_costs_what_its_text_costs() -> None:
    # bytes4: ceil(UTF-8 bytes / 4) + 4 per message, so a value of the same length costs
    # the same: 1e400 (5 bytes) as 12345; 10**5000 (5,001 bytes) as a string of 4,999
    # digits in quotes (5,001 bytes)
    for text, same in ((tool_use("1e400"), tool_use("12345")), (tool_use(BIG), tool_use('"%s"' % ("9" * 4999)))):
        body, same_body = b'{"messages":%s}' % text.encode(), b'{"messages":%s}' % same.encode()
        assert cw.count_request(body, profile="bytes4") == cw.count_request(same_body, profile="bytes4")
        assert cli_count(body, "bytes4") == cli_count(same_body, "bytes4")
    # the gateway counts such a value by its text as sent, whitespace included; the CLI
    # and the dict path by the compact text msgspec writes: three spaces more in a
    # 4-byte-per-token profile can cost a token more
    spaced = tool_use("1e400").replace('{"x":1e400}', '{ "x": 1e400 }')
    body = b'{"messages":%s}' % spaced.encode()
    assert cw.count_request(body, profile="bytes4") == cw.count_request(
        b'{"messages":%s}' % tool_use('"12345678"').encode(), profile="bytes4"
    )
    assert cli_count(body, "bytes4") == cli_count(b'{"messages":%s}' % tool_use("1e400").encode(), "bytes4")


def _beyond_64_bits_as_float(text: str) -> Any:
    """``json.loads`` keeping an integer outside int64/uint64 as the text of the nearest
    float the way the gateway reads it (serde_json: the float) and counts it (as msgspec
    writes that float: ``1.2345678901234568e29``); other integers stay ints."""

    def read(s: str) -> Any:
        n = int(s)
        return n if -(2**63) <= n < 2**64 else msgspec.Raw(msgspec.json.encode(float(n)))

    return json.loads(text, parse_int=read)


@pytest.mark.parametrize("profile", ["conservative", "bytes4"])
@pytest.mark.parametrize(
    "number", ["123456789012345678901234567890", "-123456789012345678901234567890", "18446744073709551616"]
)
def test_integers_beyond_64_bits_are_accepted_everywhere_and_counted_by_each_parser(number: str, profile: str) -> None:
    # A float holds these, so serde_json does not refuse them: it reads the nearest
    # float, and the gateway counts that float's text as msgspec writes it
    # (1.2345678901234568e29, 21 bytes, against the int's 30 digits; 2**64 is
    # 1.8446744073709552e19, 21 bytes against 20). The dict path and the CLI keep
    # Python's exact int. serde_json's arbitrary_precision feature would keep the digits,
    # but it changes number handling crate-wide, so the gateway's count may differ from
    # the dict path's by the difference in length.
    text = tool_use(number)
    body = b'{"messages":%s}' % text.encode()
    exact = cw.count_messages(json.loads(text), profile)
    rounded = cw.count_messages(_beyond_64_bits_as_float(text), profile)
    assert cw.count_request(body, profile=profile) == rounded
    assert cli_count(body, profile) == exact
    if profile == "bytes4" and number.lstrip("-") == "123456789012345678901234567890":
        # bytes4 is ceil(bytes / 4) per text: the input {"x":N} is 6 + 30 = 36 bytes (9)
        # on the dict path, 6 + 21 = 27 (7) on the gateway, 2 tokens fewer; negative,
        # 6 + 31 = 37 (10) against 6 + 22 = 28 (7), 3 fewer
        assert rounded == exact - (3 if number.startswith("-") else 2)
    # accepted on every door and, under budget, sent as it came
    assert cw.fit_request(body, budget=10**6, profile=profile) == body


def test_numbers_out_of_range_where_a_message_field_is_read() -> None:
    # a content that is such a number is named as any number there, on all three doors
    # (json.loads reads 1e400 as inf on the dict path)
    msgs = '[{"role":"user","content":"a"},{"role":"user","content":1e400}]'
    assert dict_error(json.loads(msgs)) == "message 1, field content: must be a string or a list of blocks"
    body = b'{"messages":%s}' % msgs.encode()
    assert gateway_errors(body) == ["message 1, field content: must be a string or a list of blocks"] * 2
    assert cli_error(body) == "message 1, field content: must be a string or a list of blocks"
    # a later bad message after a huge number is named (msgspec stopped at the number)
    body = b'{"messages":[{"role":"user","content":"a","x":%s},{"role":1,"content":"b"}]}' % BIG.encode()
    assert gateway_errors(body) == ["message 1, field role: must be a string"] * 2
    assert cli_error(body) == "message 1, field role: must be a string"
    # "messages" itself
    body = b'{"messages":1e400}'
    assert gateway_errors(body) == ['invalid request body at byte 12: "messages" is a number, not a list'] * 2
    assert cli_error(body) == '"messages" is a number, not a list'
    # a syntax error past such a number: the gateway's words at its byte, no msgspec
    # "$[...]" path ('{"messages":[' is 13 bytes, the message 39, then ', ': the ']' is byte 54)
    body = b'{"messages":[{"role":"user","content":"a","x":1e400}, ]}'
    assert cli_error(body) == "invalid JSON: line 1, column 55: trailing comma (byte 54)"
    assert gateway_errors(body) == ["invalid request body at byte 54: trailing comma"] * 2
    # NaN is no JSON either, after such a number too (its "N" is byte 56)
    body = b'{"messages":[{"role":"user","content":"a","x":1e400,"y":NaN}]}'
    assert cli_error(body) == "invalid JSON: line 1, column 57: expected value (byte 56)"
    assert gateway_errors(body) == ["invalid request body at byte 56: expected value"] * 2


def test_dict_path_refuses_an_int_python_cannot_write_naming_the_message() -> None:
    # a Python int of 5,001 digits: more than sys.get_int_max_str_digits() (4,300 by
    # default) lets msgspec write, so JSON text cannot be made of it
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "x": 10**5000}]
    assert dict_error(msgs).startswith("message 1: holds a value JSON cannot represent (")


# ------------------------------------------- option types: fit's convention everywhere

# fit's convention (fresh7 N13: fit(m, "10") is a ValueError, as in trim_turns and
# fit_request): a number option (a token budget, a count, a share) given anything but a
# number in range, a string or a bool as much as a negative number, raises ValueError
# naming the option; an option that is an object or a collection (a policy, a Budget,
# tool names, pinned indices, subscribers) of the wrong type raises TypeError.

BAD_NUMBERS = ["10", True, 1.5, [10], -1]
TOOL_CHAT = [
    {"role": "user", "content": "read it"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "r1", "type": "function", "function": {"name": "Read", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "r1", "content": "x" * 400},
    {"role": "user", "content": "thanks"},
]


def _guard(**kw: Any) -> Any:
    return cw.ContextGuard(cw.resolve_budget(8_000, 2_000, env={}), **kw)


# (call taking the option's value, option name, values that are fine)
NUMBER_OPTIONS = [
    (lambda v: _guard(max_message_chars=v), "max_message_chars", [1, None]),
    (lambda v: _guard(max_result_share=v), "max_result_share", [0.5, 1]),
    (lambda v: _guard(max_total_share=v), "max_total_share", [0.75, 1]),
    (lambda v: _guard(keep_recent_results=v), "keep_recent_results", [0, 6]),
    (lambda v: _guard(policy=cw.FitPolicy(recent_turns=v)), "recent_turns", [0, 2]),
    (lambda v: fit_with(cw.FitPolicy(recent_turns=v)), "recent_turns", [0, 2]),
    (lambda v: budget_tool_results(TOOL_CHAT, v), "context_window", [1, 8_000]),
    (lambda v: budget_tool_results(TOOL_CHAT, 8_000, max_result_share=v), "max_result_share", [0.5, None]),
    (lambda v: budget_tool_results(TOOL_CHAT, 8_000, max_total_share=v), "max_total_share", [0.75, None]),
    (lambda v: budget_tool_results(TOOL_CHAT, 8_000, max_message_chars=v), "max_message_chars", [1, None]),
    (lambda v: budget_tool_results(TOOL_CHAT, 8_000, keep_recent=v), "keep_recent", [0, None]),
    (lambda v: micro_compact(TOOL_CHAT, v), "keep_recent", [0, 6]),
    (lambda v: prune_middle(TOOL_CHAT, v), "budget", [0, None, 10**6]),
    (lambda v: prune_middle(TOOL_CHAT, keep_recent=v), "keep_recent", [0, None]),
    # fresh13 N2: check_capacity raised TypeError for a string, bool or float
    (lambda v: cw.check_capacity(v, 8_000), "tokens", [0, 100]),
    (lambda v: cw.check_capacity(1, v), "budget", [2, 8_000]),
    (lambda v: cw.check_capacity(1, 8_000, max_output_tokens=v), "max_output_tokens", [0, 100]),
    (lambda v: cw.check_capacity(1, 8_000, tool_schema_tokens=v), "tool_schema_tokens", [0, None]),
    # with a Budget the reserve is the Budget's, but a bad one is still refused
    (
        lambda v: cw.check_capacity(1, cw.resolve_budget(8_000, 2_000, env={}), max_output_tokens=v),
        "max_output_tokens",
        [0, 100],
    ),
    (
        lambda v: cw.check_capacity(1, cw.resolve_budget(8_000, 2_000, env={}), tool_schema_tokens=v),
        "tool_schema_tokens",
        [0, None],
    ),
]


def fit_with(policy: cw.FitPolicy) -> Any:
    return cw.fit(TOOL_CHAT, 10**6, policy)


@pytest.mark.parametrize("bad", BAD_NUMBERS, ids=repr)
@pytest.mark.parametrize(
    ("call", "name", "good"), NUMBER_OPTIONS, ids=[f"{i}-{o[1]}" for i, o in enumerate(NUMBER_OPTIONS)]
)
def test_a_bad_number_option_is_a_value_error(call: Any, name: str, good: list[Any], bad: Any) -> None:
    if name in ("max_result_share", "max_total_share") and bad == 1.5:
        bad = 2.5  # 1.5 is a float, the right type for a share: out of range either way
    with pytest.raises(ValueError, match=rf"^{name} must be") as err:
        call(bad)
    assert not isinstance(err.value, TypeError)
    for v in good:
        call(v)  # accepted


OBJECT_OPTIONS = [
    (lambda: _guard(output_heavy_tools="bash"), "output_heavy_tools"),
    (lambda: _guard(protected_tools=[1]), "protected_tools"),
    (lambda: _guard(subscribers=None), "subscribers"),
    (lambda: _guard(subscribers=[1]), "subscribers"),
    (lambda: _guard(policy={"low_water": 1}), "policy"),
    (lambda: cw.ContextGuard(8_000), "budget"),
    (lambda: budget_tool_results(TOOL_CHAT, 8_000, output_heavy_tools="bash"), "output_heavy_tools"),
    (lambda: budget_tool_results(TOOL_CHAT, 8_000, protected_tools=[1]), "protected_tools"),
    (lambda: budget_tool_results(TOOL_CHAT, 8_000, pinned=3), "pinned"),
    (lambda: micro_compact(TOOL_CHAT, 1, tools="Read"), "tools"),
    (lambda: micro_compact(TOOL_CHAT, 1, pinned="0"), "pinned"),
    (lambda: prune_middle(TOOL_CHAT, pinned=3), "pinned"),
]


@pytest.mark.parametrize(("call", "name"), OBJECT_OPTIONS, ids=[o[1] for o in OBJECT_OPTIONS])
def test_an_object_option_of_the_wrong_type_is_a_type_error(call: Any, name: str) -> None:
    with pytest.raises(TypeError, match=name):
        call()


# ------------------------------------------------------------- a name that is not a string


@pytest.mark.parametrize("name", [5, [1], {"a": 1}, True, 1.5])
def test_a_name_that_is_not_a_string_is_refused_everywhere(name: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # OpenAI's `name` is a string; any other value was read as no name and went on as an
    # unknown key, silently. Now it is named, after role, content and function_call, as
    # the adapters check the fields
    msgs = [{"role": "user", "content": "a"}, {"role": "user", "content": "b", "name": name}]
    want = "message 1, field name: must be a string"
    assert same_everywhere(msgs) == want
    assert same_everywhere(msgs, "openai") == want
    # the Python adapters say the same as the native dict reader (which falls back to them)
    monkeypatch.setattr(cw._engine, "FAST_READER", False)
    assert dict_error(msgs) == want
    # a bad content comes first, as the fields are read in that order
    msgs[1]["content"] = 5
    assert same_everywhere(msgs) == "message 1, field content: must be a string or a list of blocks"


def test_a_string_or_null_name_is_read() -> None:
    # the name is counted as a string (fim: 4 per message + ceil(chars / 4) for ASCII:
    # "a" 1, "bob" 1 -> 4 + 1 + 1 = 6) and null is no name, kept as it is
    msgs = [{"role": "user", "content": "a", "name": "bob"}]
    body = json.dumps({"messages": msgs}).encode()
    assert cw.count_messages(msgs, "fim") == cw.count_request(body, profile="fim") == 6
    msgs = [{"role": "user", "content": "a", "name": None}]
    body = json.dumps({"messages": msgs}).encode()
    assert cw.count_messages(msgs, "fim") == cw.count_request(body, profile="fim") == 5  # 4 + 1
    assert cw.fit_request(body, budget=100) == body
    # in Anthropic shape `name` is no field of the Messages API: an unknown key, copied
    msgs = [{"role": "user", "content": "a", "name": 5}]
    assert cw.count_messages(msgs, "fim", format="anthropic") == 5


# ------------------------------------------- a repeated key inside a counted value


@pytest.mark.parametrize(
    ("body", "place"),
    [
        (
            b'{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f",'
            b'"input":{"q":{"x":1,"x":2}}}]}]}',
            'message 0, field content[0].input.q: the key "x"',
        ),
        (
            b'{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f",'
            b'"input":{"a":[{"x":1},{"y":1,"y":2}]}}]}]}',
            'message 0, field content[0].input.a[1]: the key "y"',
        ),
        (
            b'{"messages":[{"role":"user","content":"hi"},{"role":"user","content":[{"type":"citations_x",'
            b'"k":{"z":1,"z":2}}]}]}',
            'message 1, field content[0].k: the key "z"',
        ),
        (
            b'{"messages":[],"tools":[{"name":"f","input_schema":{"properties":{"a":'
            b'{"type":"string","type":"number"}}}}]}',
            'tools[0].input_schema.properties.a: the key "type"',
        ),
        # serde_json stops at a number out of range before the repeat: still found
        (
            b'{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f",'
            b'"input":{"n":1e400,"a":[{"x":1},{"y":1,"y":2}]}}]}]}',
            'message 0, field content[0].input.a[1]: the key "y"',
        ),
        (
            b'{"messages":[],"tools":[{"name":"f","input_schema":{"maximum":1e400,"properties":{"a":'
            b'{"type":"string","type":"number"}}}}]}',
            'tools[0].input_schema.properties.a: the key "type"',
        ),
    ],
)
def test_a_repeated_key_in_a_counted_value_is_named_by_its_path_as_the_cli_does(body: bytes, place: str) -> None:
    # the gateway named the value it counts (content[0].input), the CLI the object that
    # holds the repeat (content[0].input.q): both name the object now
    want = f"{place} appears more than once"
    for err in gateway_errors(body):
        # in a message an InvalidMessageError (fresh9 B2), elsewhere with the byte
        assert re.sub(r"^invalid request body at byte \d+: ", "", err) == want, err
        assert err.startswith("invalid request body") == (not place.startswith("message")), err
    assert cli_error(body) == want


def test_message_structs_holding_a_number_kept_as_written() -> None:
    # what the CLI reads (msgspec.Raw for 1e400) may reach the engine as Message structs
    # too: checked and counted, not refused by msgspec's decoder ("Number out of range")
    raw = msgspec.Raw(b"1e400")
    m = [
        Message(role="user", content=[TextPart(text="a")], extra={"x": raw}),
        Message(role="assistant", content=[ToolCall(id="t", name="f", arguments="{}")], extra={"y": [raw]}),
    ]
    plain = [msgspec.structs.replace(x, extra={"x": 1}) for x in m]
    # extra keys are not counted: the same tokens as with an ordinary number there
    assert cw.count_messages(m) == cw.count_messages(plain)
    r = cw.trim_turns(m, 10**6)
    assert r.messages[0] is m[0] and r.messages[1] is m[1]
    assert cw.fit(m, 10**6).messages[0] is m[0]
    # a field of the wrong type is still named
    bad = [msgspec.structs.replace(m[0], name=5)]  # type: ignore[arg-type]
    assert dict_error(bad) == "message 0, field name: must be a string"


def test_unknown_role_with_a_lone_surrogate_reads_as_u_fffd() -> None:
    """fresh9 B1: the dict path quoted a lone surrogate as it was, so ``print(e)`` and
    logging the error raised UnicodeEncodeError; the gateway and the CLI write U+FFFD
    (DESIGN.md section 7). Now all three say the same, and the text prints and logs."""
    import logging

    msgs = [{"role": "us\ud800er", "content": "x"}]
    want = 'message 0, field role: unknown role "us\ufffder"'
    assert dict_error(msgs) == want
    body = json.dumps({"messages": msgs}).encode()  # holds the escape \ud800
    assert b"\\ud800" in body
    assert gateway_errors(body) == [want, want]
    with tempfile.TemporaryDirectory() as d:
        f = str(Path(d) / "in.json")
        Path(f).write_bytes(body)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            assert main(["count", f]) == 2
    # first the warning about the escape, then the error
    assert err.getvalue().splitlines()[-1] == f"contextwindow: error: {f}: {want}"
    with pytest.raises(InvalidMessageError) as info:
        cw.count_messages(msgs)
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    print(info.value, file=out)
    handler = logging.StreamHandler(out)
    log = logging.getLogger("contextwindow.test_b1")
    log.addHandler(handler)
    try:
        log.error("failed: %s", info.value)
    finally:
        log.removeHandler(handler)
    out.flush()
    assert out.buffer.getvalue().decode() == f"{want}\nfailed: {want}\n"  # type: ignore[attr-defined]


def test_errors_quote_input_with_lone_surrogates_as_u_fffd() -> None:
    """Every error class that can quote the caller's text (a field path holding a key, a
    counter's own exception text, a request key) writes a lone surrogate as U+FFFD; a
    high surrogate followed by a low one is the character they encode."""
    from contextwindow.errors import InvalidRequestError, TokenCounterError

    e = InvalidMessageError('unknown role "\udfffa"', index=2, field="content[0].input.k\ud800")
    assert (e.reason, e.field) == ('unknown role "\ufffda"', "content[0].input.k\ufffd")
    assert str(e) == 'message 2, field content[0].input.k\ufffd: unknown role "\ufffda"'
    assert str(InvalidRequestError('the key "\ud83d\ude00\ud800" appears more than once', offset=3)) == (
        'the key "\U0001f600\ufffd" appears more than once'
    )
    t = TokenCounterError("raised ValueError: bad \ud800", counter="token_counter f\udc00", index=1)
    assert str(t) == "token_counter f\ufffd on message 1: raised ValueError: bad \ufffd"


def test_tool_definition_and_input_errors_read_the_same_on_every_path() -> None:
    """fresh9 B4 and D4: a tool definition that is not an object was ``must be a dict,
    got str`` on the dict path (and the CLI) and ``must be an object, got a string`` on
    the gateway; now JSON's words everywhere. Too deep a tool definition is ``is nested
    too deeply`` on every path, and an int Python cannot write as text in a ``tool_use``
    input ``holds a value JSON cannot represent``, as everywhere else on the dict path."""
    msgs = [{"role": "user", "content": "q"}]
    for tool, got in (("x", "a string"), (None, "null"), (1, "a number"), (True, "a boolean"), ([], "an array")):
        want = f"tools[0]: a tool definition must be an object, got {got}"
        with pytest.raises(cw.InvalidRequestError) as info:
            cw.count_messages(msgs, tools=[tool])
        assert str(info.value) == want
        body = json.dumps({"messages": msgs, "tools": [tool]}).encode()
        for err in gateway_errors(body):
            # {"messages": [{"role": "user", "content": "q"}], "tools": [ is 59 bytes
            assert err == f"invalid request body at byte 59: {want}"
        with tempfile.TemporaryDirectory() as d:
            f = Path(d) / "t.json"
            f.write_bytes(body)
            err_out = io.StringIO()
            with contextlib.redirect_stderr(err_out), contextlib.redirect_stdout(io.StringIO()):
                assert main(["count", str(f)]) == 2
            assert err_out.getvalue() == f"contextwindow: error: {f}: {want}\n"
    # a Python value JSON has no name for
    with pytest.raises(cw.InvalidRequestError) as info:
        cw.count_messages(msgs, tools=[{1, 2}])
    assert str(info.value) == "tools[0]: a tool definition must be an object, got a Python set"
    # nesting: 5,000 levels in a tool definition
    deep: Any = {}
    for _ in range(5000):
        deep = {"a": deep}
    with pytest.raises(cw.InvalidRequestError) as info:
        cw.count_messages(msgs, tools=[deep])
    assert str(info.value) == "tools[0]: is nested too deeply"
    body = (
        b'{"messages": [{"role": "user", "content": "q"}], "tools": [' + b'{"a": ' * 5000 + b"{}" + b"}" * 5000 + b"]}"
    )
    for err in gateway_errors(body):
        assert err.endswith(": tools[0]: is nested too deeply"), err
    # an int of 5,001 digits in a tool_use input
    big = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {"n": 10**5000}}]},
    ]
    with pytest.raises(InvalidMessageError) as err:
        cw.count_messages(big)
    assert str(err.value).startswith(
        "message 1, field content[0].input: holds a value JSON cannot represent (Exceeds the limit (4300 digits)"
    ), str(err.value)
    # the same message with the int in an extra key: the same words (no field there)
    extra = [big[0], {"role": "assistant", "content": "a", "x": 10**5000}]
    with pytest.raises(InvalidMessageError) as err:
        cw.count_messages(extra)
    assert str(err.value).startswith("message 1: holds a value JSON cannot represent (Exceeds the limit"), str(
        err.value
    )


# ------------------------------------------- one rule for lone surrogates (_jsontext)


def test_a_surrogate_pair_held_as_two_code_points_is_its_character_on_every_path() -> None:
    """Python may hold U+1F600 as two code points, ``"\\ud83d\\ude00"`` (a JSON decoder
    that keeps lone surrogates, a UTF-16 source); JSON's escape pair reads as the
    character. The adapters cleaned a tool_use ``input`` one surrogate at a time (two
    U+FFFD, 5 tokens fewer here than the gateway counted); one function now cleans every
    value, message text and tool schemas as before."""
    from contextwindow.adapters import anthropic_to_message, message_to_anthropic

    pair = "\ud83d\ude00"
    block = {"type": "tool_use", "id": "t", "name": "f", "input": {"q": pair, pair: 1}}
    m = anthropic_to_message({"role": "assistant", "content": [block]}, 1)
    assert m.content[0].arguments == '{"q":"\U0001f600","\U0001f600":1}'
    assert message_to_anthropic(m)["content"][0]["input"] == {"q": "\U0001f600", "\U0001f600": 1}
    msgs = [{"role": "user", "content": "hi " + pair}, {"role": "assistant", "content": [block]}]
    tools = [{"name": "f" + pair, "input_schema": {"type": "object"}}]
    same = json.loads(json.dumps(msgs).replace("\\ud83d\\ude00", "\U0001f600"))
    same_tools = [{"name": "f\U0001f600", "input_schema": {"type": "object"}}]
    want = cw.count_messages(same, tools=same_tools, format="anthropic")
    assert cw.count_messages(msgs, tools=tools, format="anthropic") == want
    body = json.dumps({"model": "m", "messages": msgs, "tools": tools}).encode()
    assert b"\\ud83d\\ude00" in body  # the escape pair
    assert cw.count_request(body) == want


# ------------------------- fresh10 N4: keys that differ only in lone surrogates are one key

HI, LO = "\ud800", "\udbff"  # both read as U+FFFD: the same key once cleaned


def _sur(messages: list[Any]) -> list[Any]:
    """A deep copy (``json.dumps`` writes a lone surrogate as its escape, ``\\ud800``)."""
    return json.loads(json.dumps(messages))


@pytest.mark.parametrize(
    ("messages", "want"),
    [
        # the repro: the message's own keys
        ([{"role": "user", "content": "x", HI: 1, LO: 2}], 'message 0: the key "\ufffd" appears more than once'),
        # read before the role, by the gateway as by the dict path
        ([{"role": "wizard", "content": "x", HI: 1, LO: 2}], 'message 0: the key "\ufffd" appears more than once'),
        # an earlier message's clash comes before a later message's fault
        (
            [{"role": "user", "content": [{"type": "text", "text": "x", HI: 1, LO: 2}]}, {"role": 5}],
            'message 0, field content[0]: the key "\ufffd" appears more than once',
        ),
        (
            [
                {"role": "user", "content": "q"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}", HI: 1, LO: 2}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c", "content": "r"},
            ],
            'message 1, field tool_calls[0].function: the key "\ufffd" appears more than once',
        ),
        (
            [
                {"role": "user", "content": "q"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"a": {HI: 1, LO: 2}}}],
                },
            ],
            'message 1, field content[0].input.a: the key "\ufffd" appears more than once',
        ),
        # a high surrogate followed by a low one is the character they encode (JSON's pair)
        (
            [{"role": "user", "content": "x", "\ud83d\ude00": 1, "\U0001f600": 2}],
            'message 0: the key "\U0001f600" appears more than once',
        ),
    ],
)
def test_keys_that_differ_only_in_lone_surrogates_are_refused_the_same_everywhere(
    messages: list[Any], want: str
) -> None:
    """fresh10 N4: the dict path kept the later value of the two (``trim_turns`` returned
    the message with one ``"\\ufffd": 2`` key), the CLI wrote the file back without the
    other and said "unchanged"; the gateway refused the same bytes. All three refuse it
    now, in the gateway's words."""
    assert same_everywhere(messages) == want
    before = _sur(messages)
    assert dict_error(messages) == want
    assert _sur(messages) == before  # nothing the caller passed was changed


def test_the_repro_trim_turns_refuses_and_mutates_nothing() -> None:
    m = {"role": "user", "content": "x " * 3000, HI: 1, LO: 2}
    before = dict(m)
    for call in (
        lambda: cw.trim_turns([m], 100),
        lambda: cw.trim_turns([m], 10**6),  # unchanged, but counted with one key lost
        lambda: cw.fit([m], 100),
        lambda: cw.trim_turn_count([m], 1),
        lambda: cw.repair_tool_pairs([m]),
        lambda: cw.validate([m], "openai"),
        lambda: cw.segment_turns([m]),
        lambda: prune_middle([m], 100),
    ):
        with pytest.raises(InvalidMessageError) as info:
            call()
        assert (info.value.index, info.value.field) == (0, None)
        assert info.value.reason == 'the key "\ufffd" appears more than once'
    assert m == before and list(m) == ["role", "content", HI, LO]


def test_keys_only_copied_are_refused_on_the_dict_path_and_in_the_cli() -> None:
    """The gateway copies a key it does not read byte for byte (both escapes stay, nothing
    is lost); the dict path and the CLI read every value into Python, where the two keys
    are one once cleaned, so they refuse it, naming the object that holds them."""
    msgs = [{"role": "user", "content": "x", "meta": {"a": [{HI: 1, LO: 2}]}}]
    want = 'message 0, field meta.a[0]: the key "\ufffd" appears more than once'
    assert dict_error(msgs) == want
    body = json.dumps({"model": "m", "messages": msgs}).encode()
    assert cli_error(body) == want
    assert cw.fit_request(body, budget=10**6) == body  # the gateway: unchanged, both keys kept
    # an earlier message's copied key comes before a later message's fault on the dict path
    assert dict_error([*msgs, {"role": "wizard", "content": "x"}]) == want


def test_message_structs_and_tool_definitions_holding_such_keys_are_refused() -> None:
    from contextwindow.adapters import message_to_anthropic
    from contextwindow.errors import InvalidRequestError

    m = Message(role="user", content=[TextPart(text="x", extra={HI: 1, LO: 2})])
    assert dict_error([m]) == 'message 0, field content[0].extra: the key "\ufffd" appears more than once'
    m = Message(role="user", content=[TextPart(text="x")], extra={"k": {HI: 1, LO: 2}})
    assert dict_error([m]) == 'message 0, field extra.k: the key "\ufffd" appears more than once'
    # tool-call arguments held as text with such keys, written as an Anthropic input object
    call = ToolCall(id="c", name="f", arguments='{"a": {"' + HI + '": 1, "' + LO + '": 2}}')
    with pytest.raises(InvalidMessageError) as info:
        message_to_anthropic(Message(role="assistant", content=[call]))
    assert str(info.value) == 'field content[0].arguments.a: the key "\ufffd" appears more than once'
    # a tool definition: the gateway's words, after its "invalid request body at byte N: "
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"p": {HI: 1, LO: 2}}}}]
    want = 'tools[0].function.parameters.p: the key "\ufffd" appears more than once'
    with pytest.raises(InvalidRequestError) as req:
        cw.count_messages([{"role": "user", "content": "x"}], tools=tools)
    assert str(req.value) == want
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": tools}).encode()
    assert [re.sub(r"^invalid request body at byte \d+: ", "", e) for e in gateway_errors(body)] == [want, want]
    assert cli_error(body) == want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        # the fresh10 repro files: k2.json and k3.json (a top-level key: the CLI writes the
        # whole file back)
        (r'{"messages":[{"role":"user","content":"x","\ud800":1,"\udbff":2}]}', 'message 0: the key "\ufffd"'),
        (r'{"model":"x","\ud800":1,"\udbff":2,"messages":[{"role":"user","content":"x"}]}', 'the key "\ufffd"'),
        (
            r'{"messages":[],"tools":[{"name":"f","input_schema":{"\udc00":1,"\udfff":2}}]}',
            'tools[0].input_schema: the key "\ufffd"',
        ),
        # JSONL, a bare list, an Anthropic body whose system is lifted (still message 0)
        (
            '{"role":"user","content":"x"}\n{"role":"user","content":"y","\\ud800":1,"\\udbff":2}\n',
            'message 1: the key "\ufffd"',
        ),
        (
            r'[{"role":"user","content":[{"type":"text","text":"x","\ud800":1,"\udbff":2}]}]',
            'message 0, field content[0]: the key "\ufffd"',
        ),
        (
            r'{"system":"s","messages":[{"role":"user","content":"x","\ud800":1,"\udbff":2}]}',
            'message 0: the key "\ufffd"',
        ),
    ],
)
def test_cli_refuses_keys_that_lone_surrogates_make_one(tmp_path: Path, text: str, want: str) -> None:
    f = tmp_path / "k.json"
    f.write_text(text)
    out = tmp_path / "out.json"
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()) as stdout:
        assert main(["fit", str(f), "--budget", "100000", "-o", str(out)]) == 2
    assert err.getvalue() == f"contextwindow: error: {f}: {want} appears more than once\n"
    assert not out.exists() and stdout.getvalue() == ""


# ------------------------------- fresh9 B5: a quoted role or key is one line, the same everywhere


@pytest.mark.parametrize(
    ("role", "quoted"),
    [
        # the B5 body's role: NUL, U+2028, TAB, DEL, U+0085 escaped as JSON escapes them
        ("\U0001f600\x00\u2028\t\x7f\x85/", '"\U0001f600\\u0000\\u2028\\t\\u007f\\u0085/"'),
        ("a\u2029b\x9bc", '"a\\u2029b\\u009bc"'),  # U+009B: CSI to some terminals
        # spaces are characters as any other: the CLI made one space of the three
        ("a  b\xa0c\u3000d", '"a  b\xa0c\u3000d"'),
    ],
)
def test_a_quoted_role_is_one_line_and_the_same_everywhere(role: str, quoted: str) -> None:
    want = f"message 0, field role: unknown role {quoted}"
    assert same_everywhere([{"role": role, "content": "x"}]) == want
    assert same_everywhere([{"role": role, "content": "x"}], "anthropic") == want
    assert want.splitlines() == [want]


def test_a_quoted_key_is_one_line_and_the_same_everywhere() -> None:
    # two keys that lone surrogates make one (the dict path can hold no other repeat)
    msgs = [{"role": "user", "content": "x", "k\u2028\x85" + HI: 1, "k\u2028\x85" + LO: 2}]
    want = 'message 0: the key "k\\u2028\\u0085\ufffd" appears more than once'
    assert same_everywhere(msgs) == want
    # a key repeated as written, in the gateway and the CLI
    body = '{"messages":[{"role":"user","content":"x","k\u2028\x85":1,"k\u2028\x85":2}]}'.encode()
    want = 'message 0: the key "k\\u2028\\u0085" appears more than once'
    assert gateway_errors(body) == [want, want]
    assert cli_error(body) == want


def test_a_key_in_a_field_path_has_its_controls_escaped_the_same_everywhere() -> None:
    # a field path is not quoted: a quote stays as it is, a line break is escaped
    key = 'a\u2028\n"b\x85'
    msgs = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {key: {HI: 1, LO: 2}}}],
        },
    ]
    want = 'message 1, field content[0].input.a\\u2028\\n"b\\u0085: the key "\ufffd" appears more than once'
    assert same_everywhere(msgs) == want
    assert want.splitlines() == [want]


@pytest.mark.parametrize(
    ("tools", "want", "offset"),
    [
        # {"messages": [{"role": "user", "content": "q"}], "tools": [ is 59 bytes; then
        # {"type": "function", "function":  is 33 more: the 5 starts at byte 92
        ([{"type": "function", "function": 5}], "tools[0].function: must be an object, got a number", 92),
        ([{"type": "function", "function": None}], "tools[0].function: must be an object, got null", 92),
        # 92 + len('{"name": ') = 92 + 9 = 101
        (
            [{"type": "function", "function": {"name": 7, "parameters": {}}}],
            "tools[0].function.name: must be a string, got a number",
            101,
        ),
        # a function with no name (fresh16a F5): named at the function, byte 92
        ([{"type": "function", "function": {}}], "tools[0].function.name: is missing", 92),
        (
            [{"type": "function", "function": {"description": "d", "parameters": {}}}],
            "tools[0].function.name: is missing",
            92,
        ),
        # a function tool with neither a function nor a name: named at the tool, byte 59
        ([{"type": "function"}], "tools[0].function: is missing", 59),
        # Anthropic: 59 + len('{"name": ') = 68
        ([{"name": ["f"], "input_schema": {}}], "tools[0].name: must be a string, got an array", 68),
        # the second tool: 59 + len('{"name": "f"}, {"name": ') = 59 + 13 + 2 + 9 = 83
        ([{"name": "f"}, {"name": False}], "tools[1].name: must be a string, got a boolean", 83),
        # an Anthropic tool (it has an input_schema) with no name (fresh18 F5): named at
        # the tool, byte 59, as a function tool with neither a function nor a name
        ([{"input_schema": {}}], "tools[0].name: is missing", 59),
        ([{"type": "custom", "description": "d", "input_schema": {"type": "object"}}], "tools[0].name: is missing", 59),
        # the second tool: 59 + len('{"name": "f", "input_schema": {}}, ') = 59 + 35 = 94
        ([{"name": "f", "input_schema": {}}, {"input_schema": {}}], "tools[1].name: is missing", 94),
        # an Anthropic built-in tool (a dated type, no input_schema) with no name
        # (tools19: counted), at the tool; a name that is not a string, at the name:
        # 59 + len('{"type": "text_editor_20250728", "name": ') = 59 + 41 = 100
        ([{"type": "bash_20250124"}], "tools[0].name: is missing", 59),
        ([{"type": "web_search_20250305", "max_uses": 5}], "tools[0].name: is missing", 59),
        ([{"type": "text_editor_20250728", "name": None}], "tools[0].name: must be a string, got null", 100),
        ([{"name": "f", "input_schema": {}}, {"type": "code_execution_20250522"}], "tools[1].name: is missing", 94),
        # a tool of no type (or a null one) with no name and no function is neither API's
        # (fresh44 #4: {} and {"description": ...} were counted), at the tool
        ([{}], "tools[0].name: is missing", 59),
        ([{"description": "no name at all"}], "tools[0].name: is missing", 59),
        ([{"type": None, "parameters": {}}], "tools[0].name: is missing", 59),
        ([{"name": "f"}, {"description": "d"}], "tools[1].name: is missing", 74),
        # fresh45 #6: an empty type is none; a custom tool with no name and no "custom";
        # a type that is not a string (at the type: 59 + 9); an empty name (at the name:
        # 59 + 9, and 92 + 9 in a function)
        ([{"type": ""}], "tools[0].name: is missing", 59),
        ([{"type": "custom", "description": "d"}], "tools[0].name: is missing", 59),
        ([{"type": 5, "name": "x"}], "tools[0].type: must be a string, got a number", 68),
        ([{"type": ["function"], "function": {"name": "f"}}], "tools[0].type: must be a string, got an array", 68),
        ([{"name": "", "input_schema": {}}], "tools[0].name: must not be empty", 68),
        ([{"type": "function", "function": {"name": ""}}], "tools[0].function.name: must not be empty", 101),
        # fresh46 #2: OpenAI's custom tool is checked as a function tool is; '{"type":
        # "custom", "custom": ' is 29 bytes: its value at 88, its name's at 88 + 9
        ([{"type": "custom", "custom": None}], "tools[0].custom: must be an object, got null", 88),
        ([{"type": "custom", "custom": "c"}], "tools[0].custom: must be an object, got a string", 88),
        ([{"type": "custom", "custom": {}}], "tools[0].custom.name: is missing", 88),
        ([{"type": "custom", "custom": {"name": 3}}], "tools[0].custom.name: must be a string, got a number", 97),
        ([{"type": "custom", "custom": {"name": ""}}], "tools[0].custom.name: must not be empty", 97),
    ],
)
def test_a_tool_whose_function_or_name_has_the_wrong_type_is_refused_on_every_path(
    tools: list[Any], want: str, offset: int
) -> None:
    """fresh12 O4: ``tools: [{"type": "function", "function": 5}]`` was counted (23
    tokens) by the CLI, ``count_messages(tools=)`` and ``count_request`` alike."""
    msgs = [{"role": "user", "content": "q"}]
    with pytest.raises(cw.InvalidRequestError) as info:
        cw.count_messages(msgs, tools=tools)
    assert str(info.value) == want
    with pytest.raises(cw.InvalidRequestError) as info:
        cw.token_breakdown(msgs, tools=tools)
    assert str(info.value) == want
    with pytest.raises(cw.InvalidRequestError) as info:  # the struct path
        cw.count_messages([cw.Message(role="user", content=[cw.TextPart(text="q")])], tools=tools)
    assert str(info.value) == want
    body = json.dumps({"messages": msgs, "tools": tools}).encode()
    for err in gateway_errors(body):
        assert err == f"invalid request body at byte {offset}: {want}"
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "t.json"
        f.write_bytes(body)
        for command in (["count"], ["fit", "--budget", "100"], ["validate"]):
            err_out = io.StringIO()
            with contextlib.redirect_stderr(err_out), contextlib.redirect_stdout(io.StringIO()):
                assert main([command[0], str(f), *command[1:]]) == 2
            assert err_out.getvalue() == f"contextwindow: error: {f}: {want}\n"


def test_tools_of_every_documented_shape_are_still_counted() -> None:
    """The shape check refuses only wrong types: OpenAI function tools, Anthropic client
    tools and Anthropic server tools (no input_schema) count as their JSON text."""
    msgs = [{"role": "user", "content": "q"}]
    tools = [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
        {"name": "g", "description": "d", "input_schema": {"type": "object"}},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
        # the flat (Responses API) shape: the name at the top, no function
        {"type": "function", "name": "h", "parameters": {"type": "object"}},
        # a custom tool names itself in "custom"; a tool of no known type is copied
        {"type": "custom", "custom": {"name": "c"}},
        {"type": "other"},
        # Anthropic's built-in tools: a type and a name, no input_schema (fresh18 F5)
        {"type": "bash_20250124", "name": "bash"},
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool", "max_characters": 10000},
        {"type": "computer_20250124", "name": "computer", "display_width_px": 1024, "display_height_px": 768},
        # an Anthropic client tool may say its type; a tool naming itself in `function`
        # is not asked for a name at the top, whatever else it carries
        {"type": "custom", "name": "k", "input_schema": {"type": "object"}},
        {"type": "function", "function": {"name": "m"}, "input_schema": {}},
        # types with no date suffix are not asked for a name: OpenAI's built-in tools
        # (its dated one has underscores in the date), Anthropic's MCP toolset; nor are
        # types that only look dated (seven digits, no text before the date, a letter)
        {"type": "web_search_preview_2025_03_11"},
        {"type": "file_search", "vector_store_ids": ["v"]},
        {"type": "mcp_toolset", "mcp_server_name": "s"},
        {"type": "x_2025012"},
        {"type": "_20250124"},
        {"type": "bash_2025012a"},
        {"type": "bash_\uff12\uff10\uff12\uff15\uff10\uff11\uff12\uff14"},  # fullwidth digits
    ]
    n = cw.count_messages(msgs, tools=tools)
    assert n == cw.count_request(json.dumps({"messages": msgs, "tools": tools}).encode())
    assert n > cw.count_messages(msgs)


# --------------------------------------------------------------------------- keys that JSON writes alike


def _use(value: Any) -> list[Any]:
    return [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": value}]},
    ]


@pytest.mark.parametrize(
    ("messages", "want"),
    [
        # fresh14 #11's repro: msgspec (and json.dumps) write the int key 1 as "1"
        (_use({1: "a", "1": "b"}), 'message 1, field content[0].input: the key "1" appears more than once'),
        # a float key is written as msgspec writes the float, "1.5"
        (
            _use({"x": {1.5: "a", "1.5": "b"}}),
            'message 1, field content[0].input.x: the key "1.5" appears more than once',
        ),
        # the message's own keys, an extra key's object, a block's keys
        ([{"role": "user", "content": "q", 1: "a", "1": "b"}], 'message 0: the key "1" appears more than once'),
        (
            [{"role": "user", "content": "q", "meta": {"x": [{2: "a", "2": "b"}]}}],
            'message 0, field meta.x[0]: the key "2" appears more than once',
        ),
        (
            [{"role": "user", "content": [{"type": "text", "text": "q", 7: "a", "7": "b"}]}],
            'message 0, field content[0]: the key "7" appears more than once',
        ),
        # an OrderedDict (a dict subclass) inside an extra key
        (
            [{"role": "user", "content": "q", "meta": collections.OrderedDict([(3, "a"), ("3", "b")])}],
            'message 0, field meta: the key "3" appears more than once',
        ),
        # a Message struct's extra
        (
            [Message(role="user", content=[TextPart(text="q")], extra={"k": {1: "a", "1": "b"}})],
            'message 0, field extra.k: the key "1" appears more than once',
        ),
    ],
    ids=["int_input", "float_input", "message_keys", "extra_object", "block_keys", "ordered_dict", "struct_extra"],
)
def test_keys_json_writes_alike_are_refused(messages: list[Any], want: str) -> None:
    """fresh14 #11: ``{1: "a", "1": "b"}`` was accepted and both values counted, while
    the JSON written for it holds the key "1" twice (parsers disagree on which value
    wins). Refused as two keys lone surrogates make one are, in the same words."""
    assert dict_error(messages) == want
    for call in (
        lambda: cw.trim_turns(messages, 10),
        lambda: cw.fit(messages, 10),
        lambda: cw.message_tokens(messages),
        lambda: cw.count_many([messages]),
        lambda: cw.ContextGuard(cw.resolve_budget(context_window=10**5, max_output_tokens=10)).check(messages),
    ):
        with pytest.raises(InvalidMessageError) as info:
            call()
        assert str(info.value).endswith(want)


def test_keys_json_writes_alike_in_a_tool_definition_are_refused() -> None:
    from contextwindow.errors import InvalidRequestError

    tools = [{"type": "function", "function": {"name": "f", "parameters": {1: "a", "1": "b"}}}]
    with pytest.raises(InvalidRequestError) as req:
        cw.count_messages([{"role": "user", "content": "x"}], tools=tools)
    assert str(req.value) == 'tools[0].function.parameters: the key "1" appears more than once'


def test_one_int_key_is_read_as_its_text_and_bool_or_none_keys_are_refused() -> None:
    """An int or float key alone is written as its text, as msgspec writes it, and
    counted so ({1: "a"} costs what {"1": "a"} costs); a bool or None key has no JSON
    text msgspec writes (json.dumps would write "true", "null"): refused as a value JSON
    cannot represent, as before."""
    assert cw.count_messages(_use({1: "a"})) == cw.count_messages(_use({"1": "a"}))
    assert cw.count_messages(_use({2.5: "a"})) == cw.count_messages(_use({"2.5": "a"}))
    for key in (True, None):
        # named in the library's words since fresh17c #6 (msgspec's named no field in structs)
        assert dict_error(_use({key: "a"})) == (
            "message 1, field content[0].input: holds a value JSON cannot represent "
            f"(a Python {type(key).__name__} as a key)"
        )


# ------------------------------------- fresh16a F5: optional fields of the wrong type

_Q = {"role": "user", "content": "q"}
_USE = {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]}


def _result(**kw: Any) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "r", **kw}]}


def _image(detail: Any) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x", "detail": detail}}]}


@pytest.mark.parametrize(
    ("messages", "want"),
    [
        # the finding's repros: each was read as if the field were absent, silently
        ([_Q, {"role": "assistant", "content": None, "refusal": 5}], "message 1, field refusal: must be a string"),
        (
            [_Q, {"role": "assistant", "content": None, "refusal": ["I can't"] * 50}],
            "message 1, field refusal: must be a string",
        ),
        (
            [_Q, {"role": "assistant", "content": "a", "refusal": {"text": "no"}}],
            "message 1, field refusal: must be a string",
        ),
        ([_Q, {"role": "assistant", "content": "a", "refusal": False}], "message 1, field refusal: must be a string"),
        # the estimator counts a refusal on any message: an Anthropic one too
        ([{"role": "user", "content": "q", "refusal": 5}], "message 0, field refusal: must be a string"),
        ([_image(5)], "message 0, field content[0].image_url.detail: must be a string"),
        ([_image(["high"])], "message 0, field content[0].image_url.detail: must be a string"),
        ([_Q, _USE, _result(is_error="yes")], "message 2, field content[0].is_error: must be a bool"),
        ([_Q, _USE, _result(is_error=1)], "message 2, field content[0].is_error: must be a bool"),
        ([_Q, _USE, _result(is_error={})], "message 2, field content[0].is_error: must be a bool"),
        # the order the fields are read in: content, then name, then refusal, then the calls
        (
            [_Q, {"role": "assistant", "content": 5, "refusal": 5}],
            "message 1, field content: must be a string or a list of blocks",
        ),
        (
            [_Q, {"role": "assistant", "content": "a", "name": 5, "refusal": 5}],
            "message 1, field name: must be a string",
        ),
        (
            [_Q, {"role": "assistant", "content": None, "refusal": 5, "tool_calls": 5}],
            "message 1, field refusal: must be a string",
        ),
        # a tool result's content before its is_error
        (
            [
                _Q,
                _USE,
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": 5, "is_error": 5}]},
            ],
            "message 2, field content[0].content: must be a string or a list of blocks",
        ),
        # the first bad message is named
        (
            [_Q, {"role": "assistant", "content": "a", "refusal": 5}, {"role": "wizard", "content": "x"}],
            "message 1, field refusal: must be a string",
        ),
    ],
)
def test_an_optional_field_of_the_wrong_type_is_refused_the_same_everywhere(
    messages: list[Any], want: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fresh16a F5: ``refusal: 5``, ``detail: 5`` and ``is_error: "yes"`` were read as
    absent on the dict path, the gateway and the CLI alike; now each is named, in the
    words the other read fields get (``name: must be a string``)."""
    assert same_everywhere(messages) == want
    # the Python adapters say the same as the native dict reader (which falls back to them)
    monkeypatch.setattr(cw._engine, "FAST_READER", False)
    assert dict_error(messages) == want
    # and every entry point that reads messages
    for call in _ENTRY_POINTS:
        assert _struct_error(call, messages) == want


def test_optional_fields_that_are_absent_or_null_are_still_read() -> None:
    """Null is what the SDKs' ``model_dump()`` writes for a field not set: read as
    absent, and copied as it is; a string (or a bool for ``is_error``) is read."""
    msgs = [
        _Q,
        {"role": "assistant", "content": "a", "refusal": None},
        {"role": "assistant", "content": None, "refusal": "I can't help with that."},
        _image(None),
        _image("low"),
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x"}}]},
    ]
    body = json.dumps({"messages": msgs}).encode()
    n = cw.count_messages(msgs)
    assert n == cw.count_request(body) == cli_count(body, "conservative")
    assert cw.fit_request(body, budget=10**6) == body
    # by hand (fim): 4 per message; "q" 1, "a" 1, the refusal 23 chars -> 5, images 765
    # each for fim whatever the detail
    assert cw.count_messages(msgs, "fim") == 6 * 4 + 1 + 1 + 5 + 3 * 765
    anthropic = [
        _Q,
        _USE,
        _result(is_error=None),
        _USE,
        _result(is_error=False),
        _USE,
        _result(is_error=True),
        _USE,
        _result(),
    ]
    body = json.dumps({"messages": anthropic}).encode()
    assert cw.count_messages(anthropic) == cw.count_request(body) == cli_count(body, "conservative")
    assert cw.fit_request(body, budget=10**6) == body
    # an is_error of null or false is copied as it came
    out = cw.trim_turns(anthropic, budget=10**6).messages
    assert out[2]["content"][0]["is_error"] is None and out[4]["content"][0]["is_error"] is False


def _cyclic() -> dict[str, Any]:
    d: dict[str, Any] = {"a": 1}
    d["self"] = d
    return d


def test_a_value_that_holds_itself_is_named_a_cycle() -> None:
    """fresh17c #10: a value holding itself said "is nested too deeply" (true of what
    the walk sees, not of what the caller wrote). The depth error looks for a cycle on the
    path the walk went down, and names the field of the object that holds itself."""
    d = _cyclic()
    loop: list[Any] = [1]
    loop.append(loop)
    cases: list[tuple[list[Any], str | None]] = [
        ([{"role": "user", "content": "a", "meta": d}], "meta"),
        ([{"role": "user", "content": "hi"}, {"role": "user", "content": "a", "meta": {"x": [0, d]}}], "meta.x[1]"),
        (
            [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": d}]}],
            "content[0].input",
        ),
        ([{"role": "user", "content": [{"type": "text", "text": "a", "x": loop}]}], "content[0].x"),
        ([Message(role="user", content=[TextPart(text="a")], extra={"m": d})], "extra.m"),
    ]
    for msgs, field in cases:
        index = len(msgs) - 1
        for call in (
            cw.count_messages,
            lambda m: cw.trim_turns(m, 100),
            lambda m: cw.fit(m, 100),
            lambda m: prune_middle(m, 100),
            lambda m: cw.count_many([m]),
        ):
            with pytest.raises(InvalidMessageError) as info:
                call(msgs)
            assert (info.value.index, info.value.field, info.value.reason) == (index, field, "holds itself (a cycle)")
        # past a raised recursion limit, where the depth is checked before msgspec runs
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(20_000)
        try:
            with pytest.raises(InvalidMessageError) as info:
                cw.count_messages(msgs)
        finally:
            sys.setrecursionlimit(limit)
        assert (info.value.index, info.value.field, info.value.reason) == (index, field, "holds itself (a cycle)")
    # the message itself
    m: dict[str, Any] = {"role": "user", "content": "a"}
    m["meta"] = m
    with pytest.raises(InvalidMessageError) as info:
        cw.count_messages([m])
    assert str(info.value) == "message 0: holds itself (a cycle)"
    # a tool definition
    with pytest.raises(cw.InvalidRequestError) as err:
        cw.count_messages([{"role": "user", "content": "a"}], tools=[{"name": "x", "input_schema": d}])
    assert str(err.value) == "tools[0].input_schema: holds itself (a cycle)"
    # a value really nested too deeply keeps its words
    deep: list[Any] = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(InvalidMessageError) as info:
        cw.count_messages([{"role": "user", "content": "a", "meta": deep}])
    assert str(info.value) == "message 0: is nested too deeply"


class _Price(float):
    """A float subclass, as numpy.float64 is."""


class _Count(int):
    """An int subclass that is not an enum."""


class _OwnFloat(float):
    """A float subclass whose ``__float__`` is not its value (json.dumps writes the value)."""

    def __float__(self) -> float:
        return 99999.125


class _OwnInt(int):
    """An int subclass whose ``__int__`` is not its value (json.dumps writes the value)."""

    def __int__(self) -> int:
        return 1234567


class _Path(str):
    """A str subclass that is not an enum, whose ``str()`` is not its text."""

    def __str__(self) -> str:
        return "not the text"


@pytest.mark.parametrize(
    ("odd", "plain"),
    [
        (_Price(2.5), 2.5),
        (_Count(7), 7),
        (_Path("src/a.txt"), "src/a.txt"),
        ({_Path("k"): [_Path("v")]}, {"k": ["v"]}),
        ([_OwnFloat(0.5), _OwnInt(7)], [0.5, 7]),
        ({_OwnInt(7): 1, _OwnFloat(0.5): 2}, {7: 1, 0.5: 2}),
        (__import__("types").MappingProxyType({"a": [1, 2]}), {"a": [1, 2]}),
        (collections.UserDict({"a": "b"}), {"a": "b"}),
    ],
    ids=[
        "float subclass",
        "int subclass",
        "str subclass",
        "str subclass key",
        "own __float__ and __int__",
        "own __int__ and __float__ keys",
        "mappingproxy",
        "UserDict",
    ],
)
def test_json_values_msgspec_does_not_write_itself_count_as_their_plain_values(odd: Any, plain: Any) -> None:
    """A float, int or str subclass (numpy.float64, a path type) and a Mapping that is
    not a dict are JSON values (json.dumps writes them; the docs call them so) and count
    as the plain number, text or dict does, in a tool_use input, an unknown key, a
    struct's extra, an OpaquePart's raw and a tool schema; they were refused with
    msgspec's words ("Encoding objects of type _Price is unsupported"), naming no field
    (a str subclass until fresh38 #1: msgspec 0.23 refuses one). A number subclass counts
    as its value even when its own ``__int__`` or ``__float__`` says otherwise (fresh39 #1:
    ``float()`` gave 99999.125 for 0.5)."""

    def anthropic(v: Any) -> list[dict[str, Any]]:
        return [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {"x": v}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "ok"}]},
        ]

    assert cw.count_messages(anthropic(odd)) == cw.count_messages(anthropic(plain))
    meta = [{"role": "user", "content": "hi", "meta": {"v": odd}}]
    assert cw.count_messages(meta) == cw.count_messages([{"role": "user", "content": "hi", "meta": {"v": plain}}])
    tool = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "default": odd}}}]
    plain_tool = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "default": plain}}}]
    chat = [{"role": "user", "content": "hi"}]
    assert cw.count_messages(chat, tools=tool) == cw.count_messages(chat, tools=plain_tool)
    extra = [Message(role="user", content=[TextPart(text="hi")], extra={"v": odd})]
    plain_extra = [Message(role="user", content=[TextPart(text="hi")], extra={"v": plain})]
    assert cw.count_messages(extra) == cw.count_messages(plain_extra)
    raw = [Message(role="user", content=[cw.OpaquePart(type="x", raw={"type": "x", "v": odd})])]
    plain_raw = [Message(role="user", content=[cw.OpaquePart(type="x", raw={"type": "x", "v": plain})])]
    assert cw.count_messages(raw) == cw.count_messages(plain_raw)
    # trimming reads them as it reads the plain values
    tail = [
        {"role": "user", "content": "x " * 400},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "go"},
    ]
    got, want = cw.trim_turns(anthropic(odd) + tail, 40), cw.trim_turns(anthropic(plain) + tail, 40)
    assert got.report == want.report and got.report.dropped_turns == 1


_TOOL_USE = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "ls"}}
_URL_DOC = {"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}}


@pytest.mark.parametrize(
    ("part", "field", "reason"),
    [
        # a call or a result hidden in an opaque part: pairing and validate never saw it
        (
            cw.OpaquePart(type="tool_use", raw=_TOOL_USE),
            "content[0].type",
            "must not be 'tool_use' in an OpaquePart: a tool call is a ToolCall part, which pairing reads",
        ),
        (
            cw.OpaquePart(type="tool_result", raw={"type": "tool_result", "tool_use_id": "toolu_1"}),
            "content[0].type",
            "must not be 'tool_result' in an OpaquePart: a tool result is a ToolResult part, which pairing reads",
        ),
        # counted as one block, written as another
        (
            cw.OpaquePart(type="foo", raw=_URL_DOC),
            "content[0].type",
            "must be the type of its raw block ('document'), got 'foo'",
        ),
        (
            cw.OpaquePart(type="thinking", raw={"type": "tool_use", "id": "t", "name": "f", "input": {}}),
            "content[0].type",
            "must be the type of its raw block ('tool_use'), got 'thinking'",
        ),
    ],
)
def test_an_opaque_part_that_hides_a_block_is_refused_on_every_entry(
    part: cw.OpaquePart, field: str, reason: str
) -> None:
    """fresh45 #2: an assistant struct holding ``OpaquePart(type="tool_use", raw=...)``
    passed ``validate`` and repair, counted 40 tokens, and was written as a real
    ``tool_use`` (53 tokens, ``unanswered_call``); ``OpaquePart(type="foo", raw=<document
    by URL>)`` counted 24 tokens and was written as a 3,024-token document. The adapters
    never make such parts (a ``tool_use`` inside a tool result stays opaque, and is still
    taken there)."""
    from contextwindow.adapters import from_canonical

    msgs = [
        cw.Message(role="user", content=[cw.TextPart(text="list files")]),
        cw.Message(role="assistant", content=[part]),
        cw.Message(role="user", content=[cw.TextPart(text="and?")]),
    ]
    for call in (
        lambda: cw.validate(msgs, "anthropic"),
        lambda: cw.count_messages(msgs),
        lambda: cw.trim_turns(msgs, 100),
        lambda: cw.fit(msgs, 100),
        lambda: cw.repair_tool_pairs(msgs),
    ):
        with pytest.raises(cw.InvalidMessageError) as err:
            call()
        assert (err.value.index, err.value.field, err.value.reason) == (1, field, reason)
    with pytest.raises(cw.InvalidMessageError) as err:
        from_canonical(msgs[1], "anthropic")
    assert (err.value.field, err.value.reason) == (field, reason)


def test_an_opaque_tool_use_inside_a_tool_result_is_still_taken() -> None:
    """The Anthropic adapter reads a ``tool_use`` block inside a ``tool_result``'s content
    as an opaque part (no call there); a struct built the same way is taken alike, and
    an opaque part whose raw block has no ``type`` is not checked against it."""
    d = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [_TOOL_USE]}]},
    ]
    structs = [
        cw.Message(role="user", content=[cw.TextPart(text="go")]),
        cw.Message(role="assistant", content=[cw.ToolCall(id="t", name="f", arguments="{}")]),
        cw.Message(
            role="user",
            content=[cw.ToolResult(call_id="t", content=[cw.OpaquePart(type="tool_use", raw=_TOOL_USE)])],
        ),
    ]
    assert cw.count_messages(structs) == cw.count_messages(d, format="anthropic")
    # taken, and named as the dicts are (the Messages API refuses a tool_use there)
    found = cw.validate(structs, "anthropic")
    assert found == cw.validate(d, "anthropic") and [v.code for v in found] == ["block_not_allowed"]
    bare = [cw.Message(role="assistant", content=[cw.OpaquePart(type="redacted_thinking", raw={})])]
    assert cw.count_messages(bare) > 0
