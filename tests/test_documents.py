"""Documents given by reference (README, Token estimates): an Anthropic ``document`` whose
``source`` is a ``url`` or a ``file``, or an OpenAI ``file`` part whose ``file`` holds a
``file_id`` and no ``file_data``, add ``UNSEEN_DOCUMENT_TOKENS`` (3,000: one page) to their
JSON text in every profile, through every path (dicts, structs, the gateway, the
pure-Python engine). A document whose data is in the request is counted as its text.
fresh44 #1: a PDF by URL counted 37 tokens, whatever its pages.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import contextwindow as cw
from contextwindow import _reference as ref
from contextwindow.adapters import to_canonical

PAGE = 3_000
PROFILES = ["conservative", "cl100k", "tekken", "fim", "bytes4"]

URL_DOC = {"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}}
FILE_DOC = {"type": "document", "source": {"type": "file", "file_id": "file_011CN"}, "title": "Q3"}
OPENAI_FILE = {"type": "file", "file": {"file_id": "file-abc123"}}
B64_DOC = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"}}
TEXT_DOC = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "hello"}}
OPENAI_DATA = {"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBE"}}

# (block, format, by reference)
BLOCKS = [
    (URL_DOC, "anthropic", True),
    (FILE_DOC, "anthropic", True),
    (OPENAI_FILE, "openai", True),
    ({"type": "file", "file": {"file_id": "f", "file_data": None}}, "openai", True),
    (B64_DOC, "anthropic", False),
    (TEXT_DOC, "anthropic", False),
    (OPENAI_DATA, "openai", False),
    ({"type": "file", "file": {"file_id": "f", "filename": None}}, "openai", True),
]


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def conversation(block: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "text", "text": "Summarise it."}, block]}]


def test_fim_by_hand() -> None:
    # fim: 4 per message + floor(ASCII characters / 4) per text; the block is its compact JSON
    text = 13 // 4  # "Summarise it."
    assert len(compact(URL_DOC)) == 67  # 16 tokens
    assert cw.count_messages(conversation(URL_DOC), "fim", format="anthropic") == 4 + 3 + 16 + PAGE
    # a base64 document: its text only
    assert cw.count_messages(conversation(B64_DOC), "fim") == 4 + text + len(compact(B64_DOC)) // 4
    assert cw.count_messages(conversation(OPENAI_FILE), "fim") == 4 + text + len(compact(OPENAI_FILE)) // 4 + PAGE


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize(("block", "fmt", "by_reference"), BLOCKS)
def test_every_path_adds_the_page(profile: str, block: dict[str, Any], fmt: str, by_reference: bool) -> None:
    messages = conversation(block)
    text_only = cw.message_tokens(
        [{"role": "user", "content": [{"type": "text", "text": "Summarise it."}]}], profile, format=fmt
    )[0]
    got = cw.count_messages(messages, profile, format=fmt)
    # the block's JSON text, and the page when it is a reference
    assert got == text_only + cw.estimate_tokens(compact(block), profile) + (PAGE if by_reference else 0)
    # structs, the pure-Python engine, the gateway
    structs = to_canonical(messages, fmt)
    assert cw.count_messages(structs, profile) == got
    p = ref.PROFILES[profile]
    assert sum(ref.message_tokens(m, p) for m in structs) == got
    body = json.dumps({"model": "m", "messages": messages}).encode()
    assert cw.count_request(body, profile=profile, provider=fmt) == got + cw.count_messages([], profile)


def test_inside_an_anthropic_tool_result() -> None:
    call = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "fetch", "input": {}}]}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [URL_DOC]}]}
    bare = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": []}]}
    got = cw.message_tokens([call, result], format="anthropic")[1]
    empty = cw.message_tokens([call, bare], format="anthropic")[1]
    assert got == empty + cw.estimate_tokens(compact(URL_DOC)) + PAGE


def test_a_trim_sees_the_page() -> None:
    # the referenced PDF's turn no longer fits a 2,000-token budget: it goes, and the
    # request takes the breadcrumb; at 4,000 everything stays
    old = [*conversation(URL_DOC), {"role": "assistant", "content": "It says hello."}]
    messages = [*old, {"role": "user", "content": "And now?"}]
    before = cw.count_messages(messages, format="anthropic")
    assert before > PAGE
    out = cw.trim_turns(messages, 2_000, format="anthropic")
    assert out.report.tokens_before == before
    assert [f.fate for f in out.report.fates][:2] == ["dropped", "dropped"]
    assert len(out.messages) == 1 and out.messages[0]["content"][-1] == {"type": "text", "text": "And now?"}
    assert out.report.fits
    kept = cw.trim_turns(messages, 4_000, format="anthropic")
    assert kept.report.reason is None and kept.messages == messages


@pytest.mark.parametrize(
    ("block", "field", "reason"),
    [
        ({"type": "file"}, "content[1].file", "must be an object"),
        ({"type": "file", "file": "file-abc"}, "content[1].file", "must be an object"),
        ({"type": "file", "file": None}, "content[1].file", "must be an object"),
        ({"type": "file", "file": {"file_id": 7}}, "content[1].file.file_id", "must be a string"),
        (
            {"type": "file", "file": {"file_id": "f", "file_data": ["x"]}},
            "content[1].file.file_data",
            "must be a string",
        ),
        ({"type": "file", "file": {"file_data": "x", "filename": 1.5}}, "content[1].file.filename", "must be a string"),
    ],
)
def test_a_malformed_openai_file_part_is_refused(block: dict[str, Any], field: str, reason: str) -> None:
    # fresh45 #5: {"file_id": 5} or "file": "x" was counted as a few tokens of JSON,
    # silently, where a file_id is priced as a document; every reader refuses it in the
    # same words, as an Anthropic document without a valid source is refused
    messages = conversation(block)
    want = f"message 0, field {field}: {reason}"
    for call in (
        lambda: cw.count_messages(messages),  # the fast reader falls back to the adapters
        lambda: cw.count_messages(messages, format="openai"),
        lambda: to_canonical(messages, "openai"),
        lambda: cw.trim_turns(messages, 100),
        lambda: cw.validate(messages, "openai"),
    ):
        with pytest.raises(cw.InvalidMessageError) as info:
            call()
        assert str(info.value) == want
    body = json.dumps({"model": "m", "messages": messages}).encode()
    for call in (lambda: cw.count_request(body), lambda: cw.fit_request(body, budget=100)):
        with pytest.raises(cw.InvalidMessageError) as info:
            call()
        assert str(info.value) == want
    # a struct's OpaquePart of type file is refused in the same words on every entry,
    # the writer too (fresh48 #3: it was counted, passed validate and was written out)
    struct = [
        cw.Message(role="user", content=[cw.TextPart(text="Summarise it."), cw.OpaquePart(type="file", raw=block)])
    ]
    for call in (
        lambda: cw.count_messages(struct),
        lambda: cw.trim_turns(struct, 100),
        lambda: cw.validate(struct, "openai"),
        lambda: cw.fit(struct, 100),
    ):
        with pytest.raises(cw.InvalidMessageError) as info:
            call()
        assert str(info.value) == want
    with pytest.raises(cw.InvalidMessageError) as info:
        cw.adapters.message_to_openai(struct[0])
    assert str(info.value) == f"field {field}: {reason}"


def test_a_caller_built_opaque_part() -> None:
    part = cw.OpaquePart(type="document", raw=URL_DOC)
    m = cw.Message(role="user", content=[part])
    empty = cw.count_messages([cw.Message(role="user", content=[])])
    assert cw.count_messages([m]) == empty + cw.estimate_tokens(compact(URL_DOC)) + PAGE
    # a raw that is not an object is text only
    odd = cw.Message(role="user", content=[cw.OpaquePart(type="document", raw=["https://x/a.pdf"])])
    assert cw.count_messages([odd]) == empty + cw.estimate_tokens('["https://x/a.pdf"]')
