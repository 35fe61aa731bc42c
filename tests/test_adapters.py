"""Provider adapters and conversation files: lossless round trips, detection, errors.

Run with ``PYTHONPATH=python python -m pytest tests/test_adapters.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contextwindow as cw
from contextwindow.adapters import (
    anthropic_to_message,
    detect_format,
    from_canonical,
    message_to_anthropic,
    message_to_openai,
    openai_to_message,
    to_canonical,
)
from contextwindow.errors import InvalidMessageError, InvalidRequestError
from contextwindow.io import (
    Conversation,
    _may_repeat_a_key,
    _repeated_key,
    dump_conversation,
    load_conversation,
)
from contextwindow.messages import (
    MISSING_RESULT,
    ImagePart,
    Message,
    OpaquePart,
    TextPart,
    ToolCall,
    ToolResult,
)

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
CORPUS_FILES = sorted(CORPUS.glob("*/*.json")) if CORPUS.is_dir() else []
MAX_EXAMPLES = settings().max_examples  # the profile of conftest.py (CW_MAX_EXAMPLES)
SLOW = [HealthCheck.too_slow]  # no deadline either: CI machines and parallel runs vary

TO: dict[str, Callable[[Any, int], Message]] = {
    "openai": openai_to_message,
    "anthropic": anthropic_to_message,
}
BACK: dict[str, Callable[[Message], dict[str, Any]]] = {
    "openai": message_to_openai,
    "anthropic": message_to_anthropic,
}


def roundtrip(fmt: str, d: Any) -> Message:
    """Convert ``d`` to canonical, assert it comes back equal, return the canonical form."""
    m = TO[fmt](d, 0)
    assert BACK[fmt](m) == d
    assert msgspec.json.decode(msgspec.json.encode(m), type=Message) == m
    return m


# ------------------------------------------------------------------------------ (a) corpus


@pytest.mark.parametrize("path", CORPUS_FILES or [None], ids=lambda p: p and f"{p.parent.name}/{p.stem}")
def test_corpus_round_trip(path: Path | None) -> None:
    if path is None:
        pytest.skip(f"no corpus at {CORPUS}")
    doc = msgspec.json.decode(path.read_bytes())
    fmt = doc["format"]
    for i, d in enumerate(doc["messages"]):
        m = TO[fmt](d, i)
        assert BACK[fmt](m) == d, f"message {i}"
    conv = load_conversation(path)
    assert (conv.kind, conv.format, conv.messages) == ("corpus", fmt, doc["messages"])
    assert msgspec.json.decode(dump_conversation(conv, conv.messages)) == doc
    shaped = any(
        isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result", "image")
        for d in doc["messages"]
        for b in (d["content"] if isinstance(d.get("content"), list) else [])
    )
    assert detect_format(doc["messages"]) == ("openai" if fmt == "openai" or not shaped else fmt)


# ----------------------------------------------------------------------- (b) OpenAI by hand

CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}


def test_openai_text_with_name() -> None:
    m = roundtrip("openai", {"role": "user", "content": "hi", "name": "bob"})
    assert m == Message(role="user", content=[TextPart(text="hi")], name="bob", content_kind="text")


def test_openai_null_content_with_tool_calls() -> None:
    m = roundtrip("openai", {"role": "assistant", "content": None, "tool_calls": [CALL]})
    call = ToolCall(id="call_1", name="get_weather", arguments="{}")
    assert m == Message(role="assistant", content=[call], content_kind="null")


def test_openai_missing_content() -> None:
    m = roundtrip("openai", {"role": "assistant", "tool_calls": [CALL]})
    assert m.content_kind == "absent"
    assert "content" not in message_to_openai(m)


def test_openai_tool_calls_after_text() -> None:
    d = {"role": "assistant", "content": "Let me look.", "tool_calls": [CALL, {**CALL, "id": "c2"}]}
    m = roundtrip("openai", d)
    assert [type(p).__name__ for p in m.content] == ["TextPart", "ToolCall", "ToolCall"]
    assert m.content[2] == ToolCall(id="c2", name="get_weather", arguments="{}")


@pytest.mark.parametrize("calls", [None, []])
def test_openai_tool_calls_null_or_empty(calls: list[Any] | None) -> None:
    m = roundtrip("openai", {"role": "assistant", "content": "It is sunny.", "tool_calls": calls})
    expected = [TextPart(text="It is sunny.")]
    assert m == Message(role="assistant", content=expected, extra={"tool_calls": calls}, content_kind="text")


def test_openai_unknown_keys_kept() -> None:
    d = {
        "role": "assistant",
        "content": "x",
        "reasoning_content": "think",
        "refusal": None,
        "audio": {"id": "a1"},
    }
    m = roundtrip("openai", d)
    assert m.extra == {"reasoning_content": "think", "refusal": None, "audio": {"id": "a1"}}


def test_openai_non_string_name_is_refused() -> None:
    # it went to extra, read as no name; the API takes a string (null is no name)
    with pytest.raises(InvalidMessageError, match=r"^message 3, field name: must be a string$"):
        openai_to_message({"role": "user", "content": "x", "name": 7}, 3)
    m = roundtrip("openai", {"role": "user", "content": "x", "name": None})
    assert (m.name, m.extra) == (None, {"name": None})


def test_openai_tool_message() -> None:
    d = {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "sunny"}
    m = roundtrip("openai", d)
    result = ToolResult(call_id="c1", content=[TextPart(text="sunny")], content_kind="text")
    assert m == Message(role="tool", content=[result], name="get_weather")


@pytest.mark.parametrize(
    ("content", "parts", "kind"),
    [
        ([{"type": "text", "text": "a"}], [TextPart(text="a")], "parts"),
        ("", [TextPart(text="")], "text"),
        # null is refused: the Chat Completions API needs a tool message's content
    ],
)
def test_openai_tool_message_content(content: Any, parts: list[Any], kind: str) -> None:
    m = roundtrip("openai", {"role": "tool", "tool_call_id": "c1", "content": content})
    assert m.content == [ToolResult(call_id="c1", content=parts, content_kind=kind)]


def test_openai_tool_call_without_type_and_with_extra_keys() -> None:
    bare = {"id": "c1", "function": {"name": "f", "arguments": "{}"}}
    m = roundtrip("openai", {"role": "assistant", "content": None, "tool_calls": [bare]})
    assert m.content == [ToolCall(id="c1", name="f", arguments="{}", extra={})]
    odd = {
        "id": "c1",
        "type": "function",
        "index": 0,
        "function": {"name": "f", "arguments": "", "x": 1},
    }
    m = roundtrip("openai", {"role": "assistant", "tool_calls": [odd]})
    extra = {"type": "function", "index": 0, "function": {"x": 1}}
    assert m.content == [ToolCall(id="c1", name="f", arguments="", extra=extra)]


def test_openai_image_parts() -> None:
    part = {
        "type": "image_url",
        "image_url": {"url": "https://x/a.png", "detail": "low", "f": 1},
        "g": 2,
    }
    m = roundtrip("openai", {"role": "user", "content": [part]})
    assert m.content == [ImagePart(source="https://x/a.png", detail="low", extra={"g": 2, "image_url": {"f": 1}})]
    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA", "detail": None}}
    m = roundtrip("openai", {"role": "user", "content": [part]})
    assert m.content == [ImagePart(source="data:image/png;base64,AA", extra={"image_url": {"detail": None}})]


def test_openai_opaque_parts() -> None:
    audio = {"type": "input_audio", "input_audio": {"data": "AAA", "format": "wav"}}
    refusal = {"type": "refusal", "refusal": "no"}
    m = roundtrip("openai", {"role": "user", "content": [audio, refusal]})
    assert m.content == [
        OpaquePart(type="input_audio", raw=audio),
        OpaquePart(type="refusal", raw=refusal),
    ]


def test_openai_text_part_extra() -> None:
    part = {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}
    m = roundtrip("openai", {"role": "system", "content": [part]})
    assert m.content == [TextPart(text="a", extra={"cache_control": {"type": "ephemeral"}})]


def test_openai_from_built_messages() -> None:
    call = ToolCall(id="c", name="f", arguments="{}")
    assert message_to_openai(Message(role="user", content=[TextPart(text="hi")])) == {
        "role": "user",
        "content": "hi",
    }
    assert message_to_openai(Message(role="assistant", content=[call])) == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }
    stub = ToolResult(call_id="c", content=[TextPart(text=MISSING_RESULT)])
    assert message_to_openai(Message(role="tool", content=[stub])) == {
        "role": "tool",
        "tool_call_id": "c",
        "content": "[tool result missing]",
    }
    two = Message(role="user", content=[TextPart(text="a"), TextPart(text="b")], content_kind="text")
    assert message_to_openai(two)["content"] == [
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b"},
    ]
    empty = Message(role="user", content=[], content_kind="parts")
    assert message_to_openai(empty) == {"role": "user", "content": []}


def test_openai_cannot_express() -> None:
    with pytest.raises(InvalidMessageError) as err:
        message_to_openai(Message(role="tool", content=[TextPart(text="x")]))
    assert err.value.field == "content"
    # fresh46 #1: an opaque tool_use or tool_result (what the Anthropic adapter reads inside
    # a tool_result's content) was written into a tool message that openai_to_message
    # then refused; now the writer refuses it, in the reader's words for the block
    for kind in ("tool_use", "tool_result"):
        raw = {"type": kind, "id": "z", "name": "g", "input": {}}
        result = ToolResult(call_id="t", content=[TextPart(text="r"), OpaquePart(type=kind, raw=raw)])
        with pytest.raises(InvalidMessageError) as err:
            message_to_openai(Message(role="tool", content=[result]))
        assert (err.value.field, err.value.reason) == (
            "content[1].type",
            f'"{kind}" is an Anthropic block, which an OpenAI message cannot hold',
        )
        assert message_to_anthropic(Message(role="tool", content=[result]))["content"][0]["content"][1] == raw
    carrier = Message(role="user", content=[ToolResult(call_id="c")])
    with pytest.raises(InvalidMessageError) as err:
        message_to_openai(carrier)
    assert err.value.field == "content[0]"


@pytest.mark.parametrize("write", [message_to_openai, message_to_anthropic])
@pytest.mark.parametrize(
    ("value", "name"),
    [({"role": "user", "content": "x"}, "dict"), ([], "list"), (None, "NoneType"), ("hi", "str")],
)
def test_writers_refuse_what_is_not_a_message(write: Callable[[Any], Any], value: Any, name: str) -> None:
    # fresh44 #3: a provider dict (or a list, None) raised AttributeError from inside
    with pytest.raises(TypeError, match=f"^m must be a Message, got {name}$"):
        write(value)
    for fmt in ("openai", "anthropic", "canonical"):
        with pytest.raises(TypeError, match=f"^m must be a Message, got {name}$"):
            from_canonical(value, fmt)  # type: ignore[arg-type]


# -------------------------------------------------------------------- (b) Anthropic by hand


def tool_result(**kw: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": "t1", **kw}


def test_anthropic_text_and_string_content() -> None:
    m = roundtrip("anthropic", {"role": "user", "content": "hi"})
    assert m == Message(role="user", content=[TextPart(text="hi")], content_kind="text")
    block = {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}, "citations": []}
    m = roundtrip("anthropic", {"role": "user", "content": [block]})
    extra = {"cache_control": {"type": "ephemeral"}, "citations": []}
    assert m == Message(role="user", content=[TextPart(text="hi", extra=extra)], content_kind="parts")


def test_anthropic_tool_use() -> None:
    block = {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "search",
        "input": {"q": "日本", "n": [1, 2.5]},
    }
    m = roundtrip("anthropic", {"role": "assistant", "content": [block]})
    assert m.content == [ToolCall(id="toolu_1", name="search", arguments='{"q":"日本","n":[1,2.5]}')]


@pytest.mark.parametrize(
    ("flag", "is_error", "extra"),
    [
        ({}, False, None),
        ({"is_error": False}, False, {"is_error": False}),
        ({"is_error": True}, True, None),
    ],
)
def test_anthropic_is_error(flag: dict[str, Any], is_error: bool, extra: Any) -> None:
    m = roundtrip("anthropic", {"role": "user", "content": [tool_result(content="ok", **flag)]})
    expected = ToolResult(
        call_id="t1",
        content=[TextPart(text="ok")],
        is_error=is_error,
        extra=extra,
        content_kind="text",
    )
    assert m.content == [expected]


def test_anthropic_tool_result_content_shapes() -> None:
    src = {"type": "base64", "media_type": "image/png", "data": "iVBO"}
    listed = [
        {"type": "text", "text": "a"},
        {"type": "image", "source": src},
        {"type": "search_result", "x": 1},
    ]
    m = roundtrip(
        "anthropic",
        {
            "role": "user",
            "content": [tool_result(content=listed), {"type": "text", "text": "next"}],
        },
    )
    assert m.content == [
        ToolResult(
            call_id="t1",
            content=[
                TextPart(text="a"),
                ImagePart(source=src),
                OpaquePart(type="search_result", raw=listed[2]),
            ],
            content_kind="parts",
        ),
        TextPart(text="next"),
    ]
    m = roundtrip("anthropic", {"role": "user", "content": [tool_result()]})
    assert m.content == [ToolResult(call_id="t1", content_kind="absent")]
    m = roundtrip("anthropic", {"role": "user", "content": [tool_result(content="")]})
    assert m.content == [ToolResult(call_id="t1", content=[TextPart(text="")], content_kind="text")]


def test_anthropic_image_and_opaque_blocks() -> None:
    src = {"type": "url", "url": "https://x/a.png"}
    image = {"type": "image", "source": src, "cache_control": {"type": "ephemeral"}}
    thinking = {"type": "thinking", "thinking": "hm", "signature": "sig"}
    redacted = {"type": "redacted_thinking", "data": "xyz"}
    m = roundtrip("anthropic", {"role": "assistant", "content": [thinking, redacted, image]})
    assert m.content == [
        OpaquePart(type="thinking", raw=thinking),
        OpaquePart(type="redacted_thinking", raw=redacted),
        ImagePart(source=src, extra={"cache_control": {"type": "ephemeral"}}),
    ]


def test_anthropic_system_and_nested_tool_use_is_opaque() -> None:
    system = [{"type": "text", "text": "Be brief."}]
    m = roundtrip("anthropic", {"role": "system", "content": system})
    assert m == Message(role="system", content=[TextPart(text="Be brief.")], content_kind="parts")
    nested = {"type": "tool_use", "id": "x", "name": "f", "input": {}}
    m = roundtrip("anthropic", {"role": "user", "content": [tool_result(content=[nested])]})
    assert m.content[0].content == [OpaquePart(type="tool_use", raw=nested)]


def test_anthropic_from_built_messages() -> None:
    carrier = Message(
        role="user",
        content=[ToolResult(call_id="c", content=[TextPart(text="x")]), TextPart(text="next")],
    )
    assert message_to_anthropic(carrier) == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "c", "content": "x"},
            {"type": "text", "text": "next"},
        ],
    }
    err = Message(role="tool", content=[ToolResult(call_id="c", is_error=True)])
    assert message_to_anthropic(err) == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "c", "is_error": True}],
    }


def test_cross_format_calls_and_images() -> None:
    openai = {
        "role": "assistant",
        "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}],
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}],
    }
    assert message_to_anthropic(openai_to_message(openai, 0)) == {
        "role": "assistant",
        "content": [
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
            },
            {"type": "tool_use", "id": "c", "name": "f", "input": {"a": 1}},
        ],
    }
    anthropic = {
        "role": "user",
        "content": [{"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}],
    }
    assert message_to_openai(anthropic_to_message(anthropic, 0)) == {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": "https://x/a.png"}}],
    }
    bad = Message(role="assistant", content=[ToolCall(id="c", name="f", arguments="{oops")])
    with pytest.raises(InvalidMessageError) as err:
        message_to_anthropic(bad)
    assert err.value.field == "content[0].arguments"
    # JSON, but not an object: Anthropic's input must be one, and reading it back would fail
    for arguments in ('"str"', "[1]", "null", "3"):
        bad = Message(role="assistant", content=[ToolCall(id="c", name="f", arguments=arguments)])
        with pytest.raises(InvalidMessageError) as err:
            message_to_anthropic(bad)
        assert str(err.value) == "field content[0].arguments: tool call arguments are not a JSON object"


# ----------------------------------------------------------------------- (b) bad input


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def calls(*tool_calls: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": list(tool_calls)}


def uses(**block: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "tool_use", **block}]}


def image(**source: Any) -> dict[str, Any]:
    return {"type": "image", "source": source}


def document(**source: Any) -> dict[str, Any]:
    return {"type": "document", "source": source}


TEXT = {"type": "text", "text": "a"}
FN = {"name": "f", "arguments": "{}"}
OK_CALL = {"id": "c", "type": "function", "function": FN}
BAD_OPENAI = [
    ("not a dict", None),
    ({"content": "x"}, "role"),
    ({"role": 5, "content": "x"}, "role"),
    ({"role": "function", "name": "f", "content": "x"}, "role"),
    (user(5), "content"),
    (user(TEXT), "content"),
    (user(["x"]), "content[0]"),
    (user([TEXT, TEXT, {"text": "c"}]), "content[2].type"),
    (user([{"type": "text", "text": None}]), "content[0].text"),
    (user([{"type": "image_url", "image_url": "https://x"}]), "content[0].image_url"),
    (user([{"type": "image_url", "image_url": {"detail": "low"}}]), "content[0].image_url.url"),
    ({"role": "assistant", "tool_calls": "call"}, "tool_calls"),
    (calls(OK_CALL, "x"), "tool_calls[1]"),
    (calls(OK_CALL, {"type": "function", "function": FN}), "tool_calls[1].id"),
    (calls({"id": "c", "function": "f"}), "tool_calls[0].function"),
    (calls({"id": "c", "function": {"arguments": "{}"}}), "tool_calls[0].function.name"),
    (calls({"id": "c", "function": {**FN, "arguments": {}}}), "tool_calls[0].function.arguments"),
    ({"role": "tool", "content": "x"}, "tool_call_id"),
    ({"role": "tool", "tool_call_id": 3, "content": "x"}, "tool_call_id"),
    # the Chat Completions API needs content for these roles (only assistant may omit it)
    ({"role": "user"}, "content"),
    ({"role": "system", "content": None}, "content"),
    ({"role": "developer"}, "content"),
    ({"role": "tool", "tool_call_id": "c"}, "content"),
    ({"role": "tool", "tool_call_id": "c", "content": None}, "content"),
]
BAD_ANTHROPIC = [
    ([], None),
    ({"role": "tool", "content": "x"}, "role"),
    ({"role": "developer", "content": "x"}, "role"),
    ({"role": "user"}, "content"),
    (user(None), "content"),
    (user([TEXT, 7]), "content[1]"),
    (uses(id="t", input={}), "content[0].name"),
    (uses(id=1, name="f", input={}), "content[0].id"),
    (uses(id="t", name="f"), "content[0].input"),
    (uses(id="t", name="f", input={1j}), "content[0].input"),
    # the Messages API takes an object only (fresh tester's N5)
    (uses(id="t", name="f", input="str"), "content[0].input"),
    (uses(id="t", name="f", input=[1]), "content[0].input"),
    (uses(id="t", name="f", input=None), "content[0].input"),
    (user([{"type": "tool_result", "content": "x"}]), "content[0].tool_use_id"),
    (user([tool_result(content=5)]), "content[0].content"),
    (user([tool_result(content=[{"type": 1}])]), "content[0].content[0].type"),
    (user([{"type": "image"}]), "content[0].source"),
    (user([{"type": "image", "source": "https://x"}]), "content[0].source"),
    # a source without a string type (priced as an image of unknown size, 1645 tokens)
    (user([image()]), "content[0].source.type"),
    (user([image(url="https://x")]), "content[0].source.type"),
    (user([image(type=None, url="https://x")]), "content[0].source.type"),
    (user([image(type=["url"], url="https://x")]), "content[0].source.type"),
    (user([document(media_type="text/plain", data="d")]), "content[0].source.type"),
    (user([tool_result(content=[TEXT, image()])]), "content[0].content[1].source.type"),
    # the Messages API's image/document source fields, by source type
    (user([image(type="base64", media_type="image/png", data=7)]), "content[0].source.data"),
    (user([image(type="base64", media_type="image/png")]), "content[0].source.data"),
    (user([image(type="base64", data="AAAA")]), "content[0].source.media_type"),
    (user([image(type="base64", media_type=None, data="AAAA")]), "content[0].source.media_type"),
    (user([image(type="url")]), "content[0].source.url"),
    (user([image(type="url", url=["https://x"])]), "content[0].source.url"),
    (user([image(type="file", file_id=3)]), "content[0].source.file_id"),
    (user([TEXT, image(type="file")]), "content[1].source.file_id"),
    (user([{"type": "document"}]), "content[0].source"),
    (user([{"type": "document", "source": "https://x/a.pdf"}]), "content[0].source"),
    (user([document(type="base64", media_type="application/pdf", data=None)]), "content[0].source.data"),
    (user([document(type="url", url=1)]), "content[0].source.url"),
    (user([document(type="file")]), "content[0].source.file_id"),
    (
        user([tool_result(content=[TEXT, image(type="base64", media_type="image/png")])]),
        "content[0].content[1].source.data",
    ),
    (user([tool_result(content=[document(type="url")])]), "content[0].content[0].source.url"),
]


@pytest.mark.parametrize(
    ("fmt", "d", "field"),
    [("openai", d, f) for d, f in BAD_OPENAI] + [("anthropic", d, f) for d, f in BAD_ANTHROPIC],
)
def test_bad_input_names_index_and_field(fmt: str, d: Any, field: str | None) -> None:
    with pytest.raises(InvalidMessageError) as err:
        TO[fmt](d, 3)
    assert (err.value.index, err.value.field) == (3, field)
    with pytest.raises(InvalidMessageError) as err:
        to_canonical([{"role": "user", "content": "ok"}, d], fmt)
    assert (err.value.index, err.value.field) == (1, field)


def test_tool_use_input_must_be_an_object() -> None:
    # fresh tester's N5: the Anthropic Messages API needs an object; a string was counted
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [TEXT, {"type": "tool_use", "id": "a", "name": "f", "input": "str"}]},
    ]
    with pytest.raises(InvalidMessageError) as err:
        to_canonical(msgs, "anthropic")
    assert str(err.value) == "message 1, field content[1].input: must be an object"


def test_image_source_fields_are_checked() -> None:
    # the lead's finding: data 7 was counted as an image of unknown size (4 + 1640 + ...)
    # and passed validate; the Messages API needs string media_type and data for base64
    cases = [
        (image(type="base64", media_type="image/png", data=7), "content[0].source.data: must be a string"),
        (image(type="base64", media_type="image/png"), "content[0].source.data: is missing"),
        (image(type="base64", media_type=1, data="AAAA"), "content[0].source.media_type: must be a string"),
        (image(type="url", url=None), "content[0].source.url: must be a string"),
        (image(type="file"), "content[0].source.file_id: is missing"),
        (document(type="base64", data="JVBE"), "content[0].source.media_type: is missing"),
        (
            tool_result(content=[TEXT, image(type="base64", media_type="image/png", data=7)]),
            "content[0].content[1].source.data: must be a string",
        ),
    ]
    for block, text in cases:
        msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, user([block])]
        with pytest.raises(InvalidMessageError) as err:
            to_canonical(msgs, "anthropic")
        assert str(err.value) == f"message 2, field {text}", block


def test_image_and_document_sources_that_are_accepted() -> None:
    # the three checked types, well formed; other source types (document text/content,
    # types the API may add) are left as they are (forward compatibility); a source with
    # no type is refused (BAD_ANTHROPIC)
    blocks = [
        image(type="base64", media_type="image/png", data="AAAA"),
        image(type="url", url="https://x/a.png"),
        image(type="file", file_id="file_1"),
        image(type="later", data=7),
        document(type="base64", media_type="application/pdf", data="JVBE"),
        document(type="text", media_type="text/plain", data="plain text"),
        document(type="content", content=[TEXT]),
        document(type="url", url="https://x/a.pdf"),
        document(type="file", file_id="file_2"),
        tool_result(content=[image(type="url", url="https://x/b.png"), document(type="file", file_id="f")]),
    ]
    for block in blocks:
        d = user([block])
        assert message_to_anthropic(anthropic_to_message(d, 0)) == d, block


def test_openai_content_is_required_but_for_assistant() -> None:
    # the lead's finding: [{"role": "user"}] counted 3 tokens and passed validate
    for d, text in [
        ({"role": "user"}, "content: is missing"),
        ({"role": "system"}, "content: is missing"),
        ({"role": "developer"}, "content: is missing"),
        ({"role": "tool", "tool_call_id": "c"}, "content: is missing"),
        ({"role": "user", "content": None}, "content: must be a string or a list of blocks"),
        ({"role": "tool", "tool_call_id": "c", "content": None}, "content: must be a string or a list of blocks"),
    ]:
        with pytest.raises(InvalidMessageError) as err:
            to_canonical([d], "openai")
        assert str(err.value) == f"message 0, field {text}", d
    # an assistant message may still omit content or set it null (with tool calls, or not)
    for d in [
        {"role": "assistant"},
        {"role": "assistant", "content": None},
        {"role": "assistant", "tool_calls": [OK_CALL]},
        {"role": "assistant", "content": None, "tool_calls": [OK_CALL]},
    ]:
        assert message_to_openai(openai_to_message(d, 0)) == d


def test_message_to_openai_writes_content_where_it_is_required() -> None:
    # what openai_to_message refuses is never written: an Anthropic tool_result without
    # content, or a user message holding only a (stray) tool call, get content ""
    empty = ToolResult(call_id="t1", content=[], content_kind="absent")
    assert message_to_openai(Message(role="tool", content=[empty])) == {
        "role": "tool",
        "tool_call_id": "t1",
        "content": "",
    }
    null = Message(role="user", content=[], content_kind="null")
    assert message_to_openai(null) == {"role": "user", "content": ""}
    stray = Message(role="user", content=[ToolCall(id="c", name="f", arguments="{}")])
    assert message_to_openai(stray)["content"] == ""
    # an assistant message keeps its spelling
    assert message_to_openai(Message(role="assistant", content=[], content_kind="absent")) == {"role": "assistant"}
    for m in (Message(role="tool", content=[empty]), null, stray):
        openai_to_message(message_to_openai(m), 0)  # reads back without an error


# ------------------------------------------------------------------- detection / dispatch


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([], "openai"),
        ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "openai"),
        ([{"role": "tool", "tool_call_id": "c", "content": "x"}], "openai"),
        ([{"role": "assistant", "content": None, "tool_calls": None}], "openai"),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}],
            "openai",
        ),
        ([{"role": "user", "content": [{"type": "image", "source": {}}]}], "anthropic"),
        ([{"role": "assistant", "content": [{"type": "thinking", "thinking": ""}]}], "anthropic"),
        (
            [{"role": "system", "content": "s"}, {"role": "user", "content": [tool_result()]}],
            "anthropic",
        ),
        (
            [{"role": "user", "content": [tool_result()]}, {"role": "tool", "content": "x"}],
            "openai",
        ),
        ([Message(role="user")], "canonical"),
        (["junk", {"role": "user", "content": [tool_result()]}], "anthropic"),
        # the deprecated "function" role is OpenAI's only (tools19): it outweighs an
        # Anthropic block as a tool message does; a role of no hashable type is no mark
        ([{"role": "user", "content": "q"}, {"role": "function", "name": "f", "content": "x"}], "openai"),
        (
            [{"role": "assistant", "content": [{"type": "thinking", "thinking": ""}]}, {"role": "function"}],
            "openai",
        ),
        ([{"role": ["function"]}, {"role": "user", "content": [tool_result()]}], "anthropic"),
    ],
)
def test_detect_format(messages: list[Any], expected: str) -> None:
    assert detect_format(messages) == expected


_SERVER_BLOCKS = {
    "web search": [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "weather"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
    ],
    "mcp": [
        {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "f", "server_name": "s", "input": {}},
        {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_1", "content": []},
    ],
    "code execution": [{"type": "code_execution_tool_result", "tool_use_id": "srvtoolu_2", "content": {}}],
}


@pytest.mark.parametrize("name", sorted(_SERVER_BLOCKS))
def test_blocks_only_anthropic_has_make_the_list_anthropic(name: str) -> None:
    """fresh47 #1: a conversation whose only Anthropic blocks were Claude's web search
    (or MCP, or search results) was read as OpenAI's, so a trim put its breadcrumb in a
    user message of its own, next to the request: two user messages in a row. Every
    detector (adapters, the Rust dict reader, the gateway) reads it as Anthropic's."""
    answer = [*_SERVER_BLOCKS[name], {"type": "text", "text": "It is sunny. " * 30}]
    m = [
        {"role": "user", "content": "Weather in Paris? " * 20},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "And in Rome? " * 20},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "Thanks, and Oslo?"},
    ]
    assert detect_format(m) == "anthropic"
    assert cw.validate(m, "anthropic") == []
    assert cw.validate(cw.prune_middle(m, 60).messages, "anthropic") == []
    for out in (cw.trim_turns(m, 60), cw.fit(m, 60)):
        assert cw.validate(out.messages, "anthropic") == []
        # the breadcrumb went into the kept request, a leading text block
        assert out.messages == [
            {
                "role": "user",
                "content": [{"type": "text", "text": cw.BREADCRUMB}, {"type": "text", "text": "Thanks, and Oslo?"}],
            }
        ]
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": m}).encode()
    out, rep = cw.fit_request(body, budget=60, report=True)
    assert rep.provider == "anthropic"
    assert [x["role"] for x in json.loads(out)["messages"]] == ["user"]
    # a search_result block in a user message marks it too
    cited = [{"role": "user", "content": [{"type": "search_result", "source": "s", "title": "t", "content": []}]}]
    assert detect_format(cited) == "anthropic"
    body = json.dumps({"model": "m", "max_tokens": 10, "messages": cited}).encode()
    assert cw.fit_request(body, budget=10_000, report=True)[1].provider == "anthropic"
    # an OpenAI-only mark still wins: the adapter then names the Anthropic block
    assert detect_format([*m, {"role": "tool", "tool_call_id": "x", "content": "r"}]) == "openai"


def test_detect_format_mixed() -> None:
    with pytest.raises(InvalidMessageError) as err:
        detect_format([{"role": "user", "content": "x"}, Message(role="user")])
    assert err.value.index == 1
    with pytest.raises(InvalidMessageError) as err:
        detect_format([Message(role="user"), Message(role="user"), {"role": "user"}])
    assert err.value.index == 2


@pytest.mark.parametrize("btype", [[], {}, [1], {"a": 1}])
def test_a_block_type_that_is_not_a_string_is_named_when_the_format_is_detected(btype: Any) -> None:
    # found by a tester: detection looked the type up in a set, so a list or dict raised
    # TypeError (unhashable) from inside detect_format, and the CLI printed a traceback
    msgs = [{"role": "user", "content": [{"type": btype, "text": "x"}]}]
    assert detect_format(msgs) == "openai"
    for call in (
        lambda: cw.count_messages(msgs),
        lambda: cw.validate(msgs, "openai"),
        lambda: cw.trim_turns(msgs, 5),
        lambda: cw.fit(msgs, 5),
        lambda: cw.ContextGuard(context_window=1000, max_output_tokens=100).check(msgs),
    ):
        with pytest.raises(InvalidMessageError, match=r"^message 0, field content\[0\]\.type: must be a string$"):
            call()


def test_a_legacy_function_call_is_refused_on_every_path() -> None:
    # found by a tester: an assistant "function_call" (the deprecated form of tool_calls,
    # whose "function" role is refused) was kept as an unknown key and its arguments
    # counted 0 tokens: 14,012 characters of arguments cost 8 tokens in all
    call = {"name": "run", "arguments": json.dumps({"code": "x = 1\n" * 2000})}
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "function_call": call}]
    want = r"^message 1, field function_call: the deprecated function-calling form is not read; send tool_calls$"
    body = json.dumps({"messages": msgs}).encode()
    for f in (
        lambda: cw.count_messages(msgs),
        lambda: cw.count_messages(msgs, format="openai"),
        lambda: cw.validate(msgs, "openai"),
        lambda: cw.trim_turns(msgs, 100),
        lambda: cw.count_request(body),
    ):
        with pytest.raises(InvalidMessageError, match=want):
            f()
    # what the OpenAI SDK's model_dump() writes for a plain answer: every null is fine
    dumped = {"role": "assistant", "content": "ok", "function_call": None, "refusal": None, "tool_calls": None}
    plain = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]
    assert cw.count_messages([plain[0], dumped]) == cw.count_messages(plain)
    assert cw.count_request(json.dumps({"messages": [plain[0], dumped]}).encode()) == cw.count_messages(plain)


@pytest.mark.parametrize("role", ["user", "system", "developer"])
def test_tool_calls_off_an_assistant_message_are_read_as_misplaced_calls(role: str) -> None:
    # fresh49 #2: tool_calls on a user message were kept as an unknown key: not counted
    # (10 tokens for 4,944 on an assistant), not paired (their result an orphan), passed
    # by validate and sent back as they came. Now read as calls: counted as on an
    # assistant message, reported as misplaced, removed by repair with their result.
    call = {"id": "a", "type": "function", "function": {"name": "f", "arguments": json.dumps({"blob": "z " * 5000})}}
    result = {"role": "tool", "tool_call_id": "a", "content": "r"}
    msgs = [{"role": "system", "content": "s"}, {"role": role, "content": "x", "tool_calls": [call]}, result]
    on_assistant = [msgs[0], {"role": "assistant", "content": "x", "tool_calls": [call]}, result]
    # the same parts as on an assistant message: the same count (a role costs the same)
    assert cw.count_messages(msgs) == cw.count_messages(on_assistant) > 4900
    assert cw.count_request(json.dumps({"messages": msgs}).encode()) == cw.count_messages(msgs)
    assert [(v.code, v.index) for v in cw.validate(msgs, "openai")] == [
        ("call_outside_assistant", 1),
        ("orphan_result", 2),
    ]
    repaired = cw.repair_tool_pairs(msgs).messages
    assert repaired == [msgs[0], {"role": role, "content": "x"}]
    # read back as written: the writer puts a misplaced call in tool_calls
    assert message_to_openai(openai_to_message(msgs[1], 1)) == msgs[1]
    # null and [] hold no call: kept in extra verbatim, as on an assistant message
    for empty in (None, []):
        kept = [msgs[0], {**msgs[1], "tool_calls": empty}]
        assert cw.count_messages(kept) == cw.count_messages([msgs[0], {"role": role, "content": "x"}])
        assert openai_to_message(kept[1], 1).extra == {"tool_calls": empty}


def test_tool_calls_on_a_tool_message_are_refused_on_every_path() -> None:
    # a tool message's one part is its result: calls there would go uncounted
    call = {"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    asked = {"role": "assistant", "content": None, "tool_calls": [{**call, "id": "a"}]}
    msgs = [
        {"role": "user", "content": "u"},
        asked,
        {"role": "tool", "tool_call_id": "a", "content": "r", "tool_calls": [call]},
    ]
    want = r"^message 2, field tool_calls: a tool message holds a tool result, not tool calls; they would go uncounted$"
    body = json.dumps({"messages": msgs}).encode()
    for f in (
        lambda: cw.count_messages(msgs),
        lambda: cw.validate(msgs, "openai"),
        lambda: cw.trim_turns(msgs, 100),
        lambda: cw.fit(msgs, 100),
        lambda: cw.count_request(body),
        lambda: cw.fit_request(body, budget=100),
    ):
        with pytest.raises(InvalidMessageError, match=want):
            f()
    for empty in (None, []):
        kept = [*msgs[:2], {**msgs[2], "tool_calls": empty}]
        assert cw.count_messages(kept) == cw.count_messages(
            [*msgs[:2], {k: v for k, v in msgs[2].items() if k != "tool_calls"}]
        )
    # a struct holding calls in extra is refused, whatever its role
    struct = Message(role="user", content=[TextPart(text="x")], extra={"tool_calls": [call]})
    with pytest.raises(InvalidMessageError, match=r"^message 0, field extra\.tool_calls: a Message carries"):
        cw.count_messages([struct])


def test_to_and_from_canonical() -> None:
    ms = [Message(role="user", content=[TextPart(text="hi")])]
    out = to_canonical(ms, "canonical")
    assert out == ms and out is not ms and out[0] is ms[0]
    assert from_canonical(ms[0], "canonical") is ms[0]
    assert to_canonical([{"role": "user", "content": "hi"}]) == [
        Message(role="user", content=[TextPart(text="hi")], content_kind="text")
    ]
    assert from_canonical(ms[0], "openai") == {"role": "user", "content": "hi"}
    with pytest.raises(InvalidMessageError) as err:
        to_canonical([ms[0], {"role": "user"}], "canonical")
    assert err.value.index == 1
    with pytest.raises(ValueError, match="unknown format"):
        to_canonical(ms, "gemini")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown format"):
        from_canonical(ms[0], "gemini")  # type: ignore[arg-type]


# ------------------------------------------------------------------------ (c) hypothesis

finite = st.floats(allow_nan=False, allow_infinity=False)
json_leaf = st.none() | st.booleans() | st.integers() | finite | st.text(max_size=8)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
short = st.text(max_size=12)


def extra_keys(names: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(names), json_value, max_size=2)


@st.composite
def openai_part(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["text", "image_url", "opaque"]))
    if kind == "text":
        return {"type": "text", "text": draw(short), **draw(extra_keys(["cache_control", "x"]))}
    if kind == "image_url":
        img = {"url": draw(short), **draw(extra_keys(["width", "x"]))}
        # a detail is a string or null (anything else is refused: fresh16a F5)
        img.update(draw(st.sampled_from([{}, {"detail": None}]) | st.builds(lambda s: {"detail": s}, short)))
        return {"type": "image_url", "image_url": img, **draw(extra_keys(["x", "cache_control"]))}
    ptype = draw(st.sampled_from(["input_audio", "file", "refusal", "custom"]))
    if ptype == "file":
        # a file object, its known keys strings or null (anything else is refused: fresh45 #5)
        keys = st.sampled_from(["file_id", "file_data", "filename"])
        file = draw(st.dictionaries(keys, st.none() | short, max_size=3))
        return {"type": "file", "file": {**file, **draw(extra_keys(["x"]))}, **draw(extra_keys(["x"]))}
    return {"type": ptype, **draw(extra_keys([ptype, "x"]))}


def openai_content(role: str) -> st.SearchStrategy[dict[str, Any]]:
    given = short.map(lambda s: {"content": s}) | st.lists(openai_part(), max_size=3).map(lambda ps: {"content": ps})
    if role != "assistant":  # only an assistant message may omit content or set it null
        return given
    return st.one_of(st.just({}), st.just({"content": None}), given)


@st.composite
def openai_call(draw: st.DrawFn) -> dict[str, Any]:
    type_ = draw(st.sampled_from(["function", "function", "custom", None]))
    key, text = ("custom", "input") if type_ == "custom" else ("function", "arguments")
    body = {"name": draw(short), text: draw(short), **draw(extra_keys(["x"]))}
    call = {"id": draw(short), key: body, **draw(extra_keys(["index", "x"]))}
    return call if type_ is None else {**call, "type": type_}


@st.composite
def openai_message(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["system", "developer", "user", "assistant", "tool"]))
    d: dict[str, Any] = {"role": role, **draw(openai_content(role))}
    d.update(draw(extra_keys(["reasoning_content", "audio"])))
    # a refusal is a string or null (anything else is refused: fresh16a F5)
    d.update(draw(st.sampled_from([{}, {"refusal": None}]) | st.builds(lambda s: {"refusal": s}, short)))
    # a name is a string or null (anything else is refused: test_openai_non_string_name_is_refused)
    d.update(draw(st.sampled_from([{}, {"name": None}]) | st.builds(lambda n: {"name": n}, short)))
    if role == "tool":
        d["tool_call_id"] = draw(short)
    if role == "assistant":
        d.update(draw(st.sampled_from([{}, {"tool_calls": None}, {"tool_calls": []}])))
        calls = draw(st.lists(openai_call(), max_size=3))
        if calls:
            d["tool_calls"] = calls
    return d


def block_source() -> st.SearchStrategy[dict[str, Any]]:
    """An image or document ``source``: the three types the Messages API spells out, with
    their string fields, or any object with a string ``type`` other than those (taken as
    it is)."""
    return st.one_of(
        st.builds(lambda m, d, e: {"type": "base64", "media_type": m, "data": d, **e}, short, short, extra_keys(["x"])),
        st.builds(lambda u, e: {"type": "url", "url": u, **e}, short, extra_keys(["x"])),
        st.builds(lambda f, e: {"type": "file", "file_id": f, **e}, short, extra_keys(["x"])),
        st.builds(
            lambda t, rest: {**rest, "type": t},
            short.filter(lambda t: t not in ("base64", "url", "file")),
            st.dictionaries(short, json_value, max_size=2),
        ),
    )


@st.composite
def anthropic_block(draw: st.DrawFn, nested: bool = False, system: bool = False) -> dict[str, Any]:
    # a system holds text blocks only (fresh7 N5)
    kinds = ["text"] if system else ["text", "image", "opaque"] + ([] if nested else ["tool_use", "tool_result"])
    kind = draw(st.sampled_from(kinds))
    cache = draw(extra_keys(["cache_control", "citations"]))
    if kind == "text":
        return {"type": "text", "text": draw(short), **cache}
    if kind == "image":
        return {"type": "image", "source": draw(block_source()), **cache}
    if kind == "tool_use":
        return {
            "type": "tool_use",
            "id": draw(short),
            "name": draw(short),
            "input": draw(st.dictionaries(short, json_value, max_size=3)),
            **cache,
        }
    if kind == "tool_result":
        block = {"type": "tool_result", "tool_use_id": draw(short), **cache}
        block.update(draw(st.sampled_from([{}, {"is_error": True}, {"is_error": False}])))
        content = draw(st.one_of(st.none(), short, st.lists(anthropic_block(nested=True), max_size=2)))
        return block if content is None else {**block, "content": content}
    btype = draw(st.sampled_from(["thinking", "redacted_thinking", "document", "server_tool_use"]))
    if btype == "document":  # the Messages API needs its source
        return {"type": btype, "source": draw(block_source()), **draw(extra_keys(["title", "x"]))}
    return {"type": btype, **draw(extra_keys(["data", "signature", "x"]))}


@st.composite
def anthropic_message(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["user", "assistant", "system"]))
    content = draw(short | st.lists(anthropic_block(system=role == "system"), max_size=4))
    return {"role": role, "content": content, **draw(extra_keys(["x"]))}


@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=SLOW)
@given(openai_message())
def test_openai_round_trip_property(d: dict[str, Any]) -> None:
    roundtrip("openai", d)


@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=SLOW)
@given(anthropic_message())
def test_anthropic_round_trip_property(d: dict[str, Any]) -> None:
    roundtrip("anthropic", d)


VALUES = "user assistant tool system text tool_use tool_result image_url image function custom"
fuzz_value = st.recursive(
    json_leaf | st.sampled_from(VALUES.split()),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(short, inner, max_size=3),
    max_leaves=8,
)
maybe_str = short | fuzz_value


def fuzz_dict(required: dict[str, Any], optional: str) -> st.SearchStrategy[dict[str, Any]]:
    """Dicts with the given keys and a random subset of ``optional`` (space-separated)."""
    return st.fixed_dictionaries(required, optional=dict.fromkeys(optional.split(), maybe_str))


fuzz_nested = fuzz_dict({"type": st.sampled_from(VALUES.split())}, "text source url x")
fuzz_block = fuzz_dict(
    {"type": st.sampled_from(VALUES.split())},
    "text image_url source id name input tool_use_id is_error x",
).flatmap(lambda b: st.one_of(st.just(b), st.lists(fuzz_nested, max_size=2).map(lambda c: {**b, "content": c})))
fuzz_call = fuzz_dict({"id": maybe_str}, "type x").flatmap(
    lambda c: (
        fuzz_dict({}, "name arguments x").map(lambda f: {**c, "function": f})
        | fuzz_dict({}, "name input x").map(lambda f: {**c, "custom": f})
        | st.just(c)
    )
)
fuzz_message = fuzz_dict({"role": st.sampled_from(VALUES.split())}, "tool_call_id name x").flatmap(
    lambda m: st.fixed_dictionaries(
        {},
        optional={
            "content": st.lists(fuzz_block | fuzz_value, max_size=3) | maybe_str,
            "tool_calls": st.lists(fuzz_call | fuzz_value, max_size=2) | fuzz_value,
        },
    ).map(lambda more: {**m, **more})
)


@settings(max_examples=MAX_EXAMPLES * 2, deadline=None, suppress_health_check=SLOW)
@given(fuzz_message | fuzz_value, st.sampled_from(["openai", "anthropic"]))
def test_fuzz_only_invalid_message_error(d: Any, fmt: str) -> None:
    """Anything is either rejected with InvalidMessageError or round-trips exactly."""
    try:
        m = TO[fmt](d, 0)
    except InvalidMessageError:
        return
    assert BACK[fmt](m) == d


# ------------------------------------------------------------------------------- (d) files


def write(tmp_path: Path, name: str, data: bytes | str) -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def test_openai_body(tmp_path: Path) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}]
    body = {"model": "gpt-4o", "messages": msgs, "tools": tools, "temperature": 0}
    conv = load_conversation(write(tmp_path, "b.json", msgspec.json.encode(body)))
    assert (conv.kind, conv.format, conv.messages, conv.tools) == (
        "openai_body",
        "openai",
        msgs,
        tools,
    )
    out = dump_conversation(conv, msgs[1:])
    assert out.startswith(b'{\n  "model": "gpt-4o",\n  "messages": [\n    {\n      "role"')
    assert msgspec.json.decode(out) == {**body, "messages": msgs[1:]}
    assert conv.document == body  # not mutated


def test_anthropic_body_system(tmp_path: Path) -> None:
    system = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    body = {"model": "claude", "max_tokens": 64, "system": system, "messages": msgs}
    conv = load_conversation(write(tmp_path, "a.json", msgspec.json.encode(body)))
    assert (conv.kind, conv.format) == ("anthropic_body", "anthropic")
    assert conv.messages == [{"role": "system", "content": system}, *msgs]
    assert msgspec.json.decode(dump_conversation(conv, conv.messages)) == body
    new = [{"role": "system", "content": "New."}, msgs[1]]
    assert msgspec.json.decode(dump_conversation(conv, new)) == {
        **body,
        "system": "New.",
        "messages": [msgs[1]],
    }
    assert msgspec.json.decode(dump_conversation(conv, msgs)) == {
        "model": "claude",
        "max_tokens": 64,
        "messages": msgs,
    }


def test_anthropic_body_detected_by_tools_or_blocks(tmp_path: Path) -> None:
    plain = [{"role": "user", "content": "hi"}]
    body = {"messages": plain, "tools": [{"name": "f", "input_schema": {"type": "object"}}]}
    assert load_conversation(write(tmp_path, "t.json", msgspec.json.encode(body))).format == "anthropic"
    blocks = [{"role": "user", "content": [tool_result(content="x")]}]
    conv = load_conversation(write(tmp_path, "k.json", msgspec.json.encode({"messages": blocks})))
    assert (conv.kind, conv.format) == ("anthropic_body", "anthropic")
    conv = load_conversation(write(tmp_path, "p.json", msgspec.json.encode({"messages": plain})))
    assert (conv.kind, conv.format) == ("openai_body", "openai")
    conv = load_conversation(tmp_path / "p.json", format="anthropic")
    assert (conv.kind, conv.format) == ("anthropic_body", "anthropic")


def test_bare_list(tmp_path: Path) -> None:
    conv = load_conversation(write(tmp_path, "l.json", '[{"role": "user", "content": "hi"}]'))
    assert (conv.kind, conv.format, conv.tools) == ("list", "openai", None)
    assert dump_conversation(conv, conv.messages) == b'[\n  {\n    "role": "user",\n    "content": "hi"\n  }\n]\n'


def test_jsonl(tmp_path: Path) -> None:
    text = '{"role": "user", "content": "hi"}\n\n  \n{"role":"assistant","content":"yo"}\n'
    conv = load_conversation(write(tmp_path, "c.jsonl", text))
    assert (conv.kind, conv.format) == ("jsonl", "openai")
    assert conv.messages == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"},
    ]
    assert dump_conversation(conv, conv.messages) == (
        b'{"role":"user","content":"hi"}\n{"role":"assistant","content":"yo"}\n'
    )
    one = load_conversation(write(tmp_path, "one.jsonl", '{"role": "user", "content": "hi"}\n'))
    assert (one.kind, one.messages) == ("jsonl", [{"role": "user", "content": "hi"}])


def test_jsonl_bad_line(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.jsonl", '{"role": "user", "content": "a"}\n{"role": "user"}\n{"role": \n')
    with pytest.raises(InvalidRequestError, match=r"bad\.jsonl: line 3: invalid JSON"):
        load_conversation(path)
    path = write(tmp_path, "num.jsonl", '{"role": "user", "content": "a"}\n42\n')
    with pytest.raises(InvalidRequestError, match=r"num\.jsonl: line 2: expected one message object"):
        load_conversation(path)


def test_corpus_file(tmp_path: Path) -> None:
    msgs = [{"role": "user", "content": "안녕"}, {"role": "assistant", "content": "네"}]
    doc = {"format": "anthropic", "source": "s", "license": "MIT", "messages": msgs, "notes": "n"}
    conv = load_conversation(write(tmp_path, "c.json", msgspec.json.encode(doc)))
    assert (conv.kind, conv.format, conv.messages) == ("corpus", "anthropic", msgs)
    out = dump_conversation(conv, msgs[:1])
    assert msgspec.json.decode(out) == {**doc, "messages": msgs[:1]}
    assert "안녕".encode() in out
    assert load_conversation(tmp_path / "c.json", format="openai").format == "openai"


def test_invalid_utf8_is_replaced(tmp_path: Path) -> None:
    path = write(tmp_path, "u.json", b'[{"role": "user", "content": "caf\xe9 \xff!"}]')
    conv = load_conversation(path)
    assert conv.messages == [{"role": "user", "content": "caf\ufffd \ufffd!"}]
    out = dump_conversation(conv, conv.messages)
    assert "caf\ufffd \ufffd!" in out.decode("utf-8")


def test_lone_surrogates_become_replacement(tmp_path: Path) -> None:
    path = write(tmp_path, "s.json", '[{"role": "user", "content": "abc\\ud83d"}]')
    assert load_conversation(path).messages == [{"role": "user", "content": "abc\ufffd"}]
    conv = Conversation(str(path), "openai", "list", [], None, [])
    out = dump_conversation(conv, [{"role": "user", "content": "x\ud800y"}])
    assert msgspec.json.decode(out) == [{"role": "user", "content": "x\ufffdy"}]
    assert load_conversation(write(tmp_path, "bom.json", b"\xef\xbb\xbf[]")).messages == []


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            "hello world",
            "invalid JSON: line 1, column 1: expected value (byte 0)",
        ),
        ('{"messages": [\n  {"role": "user",, }\n]}', "invalid JSON: line 2, column 19:"),
        ("42", "top-level JSON is a number"),
        ('{"model": "gpt-4o"}', 'no "messages" list'),
        ('{"messages": {"role": "user"}}', '"messages" is an object, not a list'),
        ('{"messages": [], "tools": {}}', '"tools" is an object, not a list'),
        ("", "the file is empty"),
    ],
)
def test_bad_files(tmp_path: Path, data: str, message: str) -> None:
    path = write(tmp_path, "bad.json", data)
    with pytest.raises(InvalidRequestError) as err:
        load_conversation(path)
    assert str(err.value).startswith(f"{path}: ")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("data", "kind", "fmt"),
    [
        ('{"format": "anthropic", "messages": []}', "corpus", "anthropic"),
        ('{"format": "openai", "system": "s", "messages": []}', "corpus", "openai"),
        # any other value is a body's unknown key (fresh16a F1: Ollama's "format")
        ('{"format": "gemini", "messages": []}', "openai_body", "openai"),
        ('{"format": "json", "system": "s", "messages": []}', "anthropic_body", "anthropic"),
        ('{"format": {"type": "object"}, "messages": []}', "openai_body", "openai"),
        ('{"format": null, "messages": []}', "openai_body", "openai"),
    ],
)
def test_the_format_key_names_a_shape_only_when_it_is_a_provider(
    tmp_path: Path, data: str, kind: str, fmt: str
) -> None:
    conv = load_conversation(write(tmp_path, "f.json", data))
    assert (conv.kind, conv.format) == (kind, fmt)
    assert msgspec.json.decode(dump_conversation(conv, conv.messages)) == json.loads(data)


@st.composite
def json_with_keys(draw: st.DrawFn, depth: int = 0) -> tuple[str, bool]:
    """A JSON text built pair by pair (so it can repeat keys) and whether any object in it
    repeats one: the oracle for io's repeated-key check. Keys and strings hold the
    characters the check counts (quotes, colons, backslashes); keys are sometimes spelled
    with \\u escapes, and the colon has whitespace around it sometimes."""
    tricky = st.sampled_from(['":', '\\":', "\\", ":", '"', " : ", "a", "é", "role"])
    text = st.lists(tricky, max_size=4).map("".join)
    if depth >= 2 or draw(st.booleans()):
        if draw(st.booleans()):
            return json.dumps(draw(text), ensure_ascii=draw(st.booleans())), False
        return json.dumps(draw(st.integers() | st.none())), False
    if draw(st.booleans()):
        items = draw(st.lists(json_with_keys(depth + 1), max_size=3))
        return "[" + ",".join(t for t, _ in items) + "]", any(r for _, r in items)
    keys = draw(st.lists(st.sampled_from(["a", "b", "a\\", ":", '"x"', "é"]) | text, max_size=4))
    members, repeats = [], len(set(keys)) < len(keys)
    for k in keys:
        spelled = json.dumps(k, ensure_ascii=draw(st.booleans()))
        if draw(st.booleans()):  # every character as a \u escape
            spelled = '"' + "".join(f"\\u{ord(c):04x}" for c in k) + '"'
        value, inner = draw(json_with_keys(depth + 1))
        repeats |= inner
        colon = draw(st.sampled_from([":", ":", ": ", " :", "\n:\t"]))
        members.append(f"{spelled}{colon}{value}")
    return "{" + ",".join(members) + "}", repeats


@settings(max_examples=MAX_EXAMPLES * 2, deadline=None, suppress_health_check=SLOW)
@given(json_with_keys())
def test_repeated_key_check_never_misses_one(case: tuple[str, bool]) -> None:
    text, repeats = case
    value = msgspec.json.decode(text)
    if repeats:
        assert _may_repeat_a_key(text, value)
        assert _repeated_key(text) is not None
    else:
        assert _repeated_key(text) is None


def test_repeated_key_check_is_false_for_ordinary_files() -> None:
    # the cheap check alone decides these: no second parse (tool arguments hold \":)
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"path": "a.py"}'}}
    assistant = {"role": "assistant", "content": None, "tool_calls": [call]}
    body = {"messages": [{"role": "user", "content": "see https://x.y: a"}, assistant]}
    for text in (json.dumps(body), json.dumps(body, indent=2), msgspec.json.encode(body).decode()):
        assert not _may_repeat_a_key(text, msgspec.json.decode(text))
    # 5 keys and a string that opens with a colon: 6 "\":" for 5 entries, so it looks
    assert _may_repeat_a_key('{"a":{"b":":","c":1},"d":[{"e":2}]}', {"a": {"b": ":", "c": 1}, "d": [{"e": 2}]})


def test_missing_file_and_bad_format(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequestError, match=r"nope\.json: cannot read"):
        load_conversation(tmp_path / "nope.json")
    with pytest.raises(InvalidRequestError, match="unknown format 'gemini'"):
        load_conversation(write(tmp_path, "ok.json", "[]"), format="gemini")


def test_lone_surrogates_in_tool_arguments_become_replacement_characters() -> None:
    """Found by the gateway helper's hypothesis run: writing a tool call with a lone
    surrogate in its arguments to Anthropic shape raised a bare UnicodeEncodeError."""
    from contextwindow import Message, ToolCall
    from contextwindow.adapters import message_to_anthropic

    m = Message(role="assistant", content=[ToolCall(id="t", name="f", arguments='{"a": "x\ud800"}')])
    assert message_to_anthropic(m)["content"][0]["input"] == {"a": "x\ufffd"}


def test_canonical_format_with_dicts_says_what_it_takes() -> None:
    # found by a new user: msgspec's "Expected `array`, got `str`" named no cause
    from contextwindow import count_messages

    with pytest.raises(InvalidMessageError, match="format='canonical' takes Message structs, got dict") as info:
        count_messages([{"role": "user", "content": "hi"}], format="canonical")
    assert info.value.index == 0


def test_writers_refuse_structs_the_engine_refuses() -> None:
    """fresh19b #3: message_to_anthropic raised AttributeError on a str content or dict
    arguments; message_to_openai wrote dict arguments, an unknown role or bytes text out.
    Both now refuse as count_messages does, naming the field."""
    from contextwindow.adapters import message_to_anthropic, message_to_openai
    from contextwindow.errors import InvalidMessageError

    call = ToolCall(id="a", name="f", arguments={"x": 1})  # type: ignore[arg-type]
    cases = [
        (Message(role="user", content="hello"), "field content: must be a list of parts"),  # type: ignore[arg-type]
        (Message(role="assistant", content=[call]), "field content[0].arguments: must be a string"),
        (Message(role="wizard", content=[TextPart(text="x")]), 'field role: unknown role "wizard"'),  # type: ignore[arg-type]
        (Message(role="user", content=[TextPart(text=b"x")]), "field content[0].text: must be a string"),  # type: ignore[arg-type]
    ]
    for m, words in cases:
        for write in (message_to_openai, message_to_anthropic):
            with pytest.raises(InvalidMessageError) as e:
                write(m)
            assert str(e.value) == words, (write.__name__, m)
        for fmt in ("openai", "anthropic"):  # the public from_canonical checks too
            with pytest.raises(InvalidMessageError, match="field "):
                cw.adapters.from_canonical(m, fmt)
            with pytest.raises(InvalidMessageError):
                cw.count_messages([m])


_BIG_CALL = {
    "id": "c1",
    "type": "function",
    "function": {"name": "read_file", "arguments": '{"p": "' + "x" * 800 + '"}'},
}


@pytest.mark.parametrize(
    ("extra", "field", "reason"),
    [
        ({"tool_calls": [_BIG_CALL]}, "extra.tool_calls", "a Message carries tool calls as ToolCall parts"),
        (
            {"function_call": {"name": "f", "arguments": "{}"}},
            "extra.function_call",
            "a Message carries tool calls as ToolCall parts",
        ),
        ({"content": "smuggled text"}, "extra.content", "a Message's own field"),
        ({"role": "system"}, "extra.role", "a Message's own field"),
    ],
)
def test_struct_extra_cannot_smuggle_calls_or_fields(extra: dict[str, Any], field: str, reason: str) -> None:
    """fresh20b #5: a struct's ``extra`` holding ``tool_calls`` or ``function_call`` was
    written by the adapters but neither counted nor paired (13 tokens counted, a
    5,403-token request with an unanswered call written); ``content`` and ``role`` were
    dropped or written. Every path taking structs refuses them, naming the field."""
    ms = [
        Message(role="user", content=[TextPart(text="read it")]),
        Message(role="assistant", content=[TextPart(text="ok")], extra=extra),
        Message(role="user", content=[TextPart(text="next")]),
    ]
    calls: list[Callable[[], object]] = [
        lambda: cw.count_messages(ms, format="openai"),
        lambda: cw.count_messages(ms),
        lambda: cw.validate(ms, "openai"),
        lambda: cw.validate(ms, "anthropic"),
        lambda: cw.trim_turns(ms, 100, format="openai"),
        lambda: cw.repair_tool_pairs(ms),
        lambda: cw.fit(ms, 100),
        lambda: cw.count_many([ms]),
    ]
    for call in calls:
        with pytest.raises(
            InvalidMessageError, match=f"^(conversation 0: )?message 1, field {field}: {reason}"
        ) as info:
            call()
        assert (info.value.index, info.value.field) == (1, field)
    for write in (message_to_openai, message_to_anthropic, lambda m: from_canonical(m, "openai")):
        with pytest.raises(InvalidMessageError, match=f"^field {field}: {reason}"):
            write(ms[1])


@pytest.mark.parametrize("extra", [{"tool_calls": None}, {"tool_calls": []}, {"function_call": None}, {"k": 1}])
def test_struct_extra_keeps_what_reading_a_dict_leaves(extra: dict[str, Any]) -> None:
    """What the adapters leave in ``extra`` when they read a dict (``tool_calls`` null or
    ``[]``, ``function_call`` null) still round-trips (fresh20b #5 refuses the rest)."""
    m = Message(role="assistant", content=[TextPart(text="ok")], extra=extra)
    assert message_to_openai(m) == {"role": "assistant", "content": "ok", **extra}
    assert cw.count_messages([Message(role="user", content=[TextPart(text="q")]), m]) > 0


@pytest.mark.parametrize(
    ("source", "field"),
    [
        ({}, "content[1].source.type"),
        ({"type": None}, "content[1].source.type"),
        ({"type": "url"}, "content[1].source.url"),
        ({"type": "base64", "data": "AA"}, "content[1].source.media_type"),
        (None, "content[1].source"),
    ],
)
def test_struct_image_source_is_checked_when_written_for_anthropic(source: Any, field: str) -> None:
    """An ``ImagePart`` whose source is an object was written for Anthropic as it came:
    ``ImagePart(source={})`` passed ``validate(..., "anthropic")`` and went out as
    ``{"type": "image", "source": {}}``, a block the API refuses and that a dict input
    is refused for (``content[0].source.type: is missing``). The writer checks it as the
    reader does: ``InvalidMessageError`` naming the field, ``unwritable_message`` in
    ``validate``. A good source is written as it came."""
    from contextwindow.adapters import from_canonical
    from contextwindow.messages import ImagePart, Message, TextPart

    m = Message(role="user", content=[TextPart(text="hi"), ImagePart(source=source)])
    with pytest.raises(cw.InvalidMessageError) as err:
        from_canonical(m, "anthropic")
    assert err.value.field == field
    assert [(v.index, v.code) for v in cw.validate([m], "anthropic")] == [(0, "unwritable_message")]
    good = {"type": "url", "url": "https://example.com/a.png", "x": 1}
    out = from_canonical(Message(role="user", content=[ImagePart(source=good)]), "anthropic")
    assert out == {"role": "user", "content": [{"type": "image", "source": good}]}


@pytest.mark.parametrize(
    "block",
    [
        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
        {"type": "redacted_thinking", "data": "abc"},
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},
    ],
)
def test_structs_holding_blocks_only_anthropic_has_are_trimmed_as_anthropic(block: dict[str, Any]) -> None:
    """fresh48 #1: ``Message`` structs from ``anthropic_to_message`` holding a thinking
    block (or Claude's server tools) were trimmed under OpenAI's rules: the breadcrumb
    became a user message of its own and the output failed ``validate(..., "anthropic")``
    with not_alternating. The same list as dicts was fine."""
    dicts = [
        {"role": "user", "content": "q1 " * 100},
        {"role": "assistant", "content": [block, {"type": "text", "text": "ok"}]},
        {"role": "user", "content": "q2 " * 100},
        {"role": "assistant", "content": "a2"},
        {"role": "user", "content": "q3"},
    ]
    structs = [anthropic_to_message(d) for d in dicts]
    assert cw.validate(structs, "anthropic") == []
    for trim in (cw.trim_turns, cw.fit, cw.prune_middle):
        out = trim(structs, 150)
        assert cw.validate(out.messages, "anthropic") == [], trim.__name__
        assert [m.role for m in out.messages] == [m["role"] for m in trim(dicts, 150).messages], trim.__name__
    kept = cw.trim_turns(structs, 150).messages
    assert len(kept) == 1 and [p.text for p in kept[0].content] == [cw.BREADCRUMB, "q3"]  # type: ignore[union-attr]
