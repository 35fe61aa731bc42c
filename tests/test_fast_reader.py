"""The native dict reader (``rust/contextwindow-py/src/reader.rs``) against the Python
adapters it replaces on the hot path.

The fast path reads a list of OpenAI/Anthropic dicts in Rust; the slow path converts them
with ``contextwindow.adapters`` to ``Message`` structs, encodes them to JSON and the engine
parses that. Both must give the engine the very same canonical messages: checked field by
field (the engine's JSON of what each built, ``extra``/``raw``/``source`` JSON text byte for
byte), then on the public results (counts, trims, reports) with the private switch
``_engine.FAST_READER`` off and on. Inputs: every corpus conversation, every shared case,
hypothesis conversations (``tests/strategies.py``) turned into provider dicts with extra keys
of every JSON type sprinkled in, and malformed inputs, which the reader must leave to the
Python adapters so the errors are the same.
"""

from __future__ import annotations

import collections
import datetime
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contextwindow as cw
from contextwindow import _engine, _jsontext
from contextwindow._native import count_dicts, read_dicts, reencode
from contextwindow.adapters import from_canonical
from contextwindow.errors import InvalidMessageError
from contextwindow.messages import Message, TextPart
from contextwindow.report import TrimResult

import strategies as strat
from shared_data import case_files, corpus_files, ids, load, need

MAX_EXAMPLES = int(os.environ.get("CONTEXTWINDOW_MAX_EXAMPLES", "150"))
PROFILES = ["conservative", "cl100k", "fim"]
CALIBRATOR = cw.Calibrator(alpha=0.5)
CALIBRATOR.observe(estimated=1000, reported=1200)  # estimates scaled by 1.2


@contextmanager
def slow_path() -> Iterator[None]:
    """Force the Python adapters (the path before the dict reader existed)."""
    _engine.FAST_READER = False
    try:
        yield
    finally:
        _engine.FAST_READER = True


def outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``("ok", fn(...))``, or the error it raised as comparable data."""
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as exc:  # the error is the result being compared
        return ("error", type(exc), str(exc), getattr(exc, "index", None), getattr(exc, "field", None))


def same(fn: Callable[..., Any], msgs: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(msgs, ...)`` gives the same result or the same error on the fast path and on
    the slow path; returns the fast path's outcome."""
    fast = outcome(fn, msgs, *args, **kwargs)
    with slow_path():
        slow = outcome(fn, msgs, *args, **kwargs)
    assert fast[0] == slow[0], (fast, slow)
    if fast[0] == "ok" and isinstance(fast[1], TrimResult):
        same_trim(fast[1], slow[1], msgs)
    else:
        assert fast == slow
    return fast


def same_canonical(msgs: list[Any], fmt: str | None) -> None:
    """The reader takes ``msgs`` and builds exactly what the slow path's JSON holds."""
    read = read_dicts(msgs, fmt)
    assert read is not None, "the dict reader fell back on input it should take"
    prep = _engine.prepare(msgs, fmt)
    assert read[0] == prep.format
    assert read[1] == prep.provider
    assert read[2] == reencode(prep.payload)


def same_trim(fast: TrimResult[Any], slow: TrimResult[Any], msgs: Any) -> None:
    assert fast.messages == slow.messages
    # unchanged messages are the caller's objects on both paths, at the same places
    assert [any(m is o for o in msgs) for m in fast.messages] == [any(m is o for o in msgs) for m in slow.messages]
    assert msgspec.json.encode(fast.report) == msgspec.json.encode(slow.report)


def same_everything(msgs: list[Any], fmt: str | None, budgets: list[int] | None = None) -> None:
    """Counts, per-message counts, trims and turn-count trims agree on both paths."""
    same_canonical(msgs, fmt)
    for profile in PROFILES:
        same(cw.message_tokens, msgs, profile, format=fmt)
        same(cw.count_messages, msgs, profile, format=fmt)
    calibrated = cw.Estimator("cl100k", calibrator=CALIBRATOR)
    same(calibrated.message_tokens, msgs, format=fmt)
    same(calibrated.count_messages, msgs, format=fmt, limit=100)
    total = cw.count_messages(msgs, format=fmt)
    for budget in budgets if budgets is not None else [0, total // 4, total // 2, total - 1, total]:
        assert same(cw.trim_turns, msgs, budget, format=fmt)[0] == "ok"
    same(cw.trim_turns, msgs, total // 3, profile="fim", breadcrumb=False, format=fmt)
    for turns in (0, 1, 3):
        same(cw.trim_turn_count, msgs, turns, format=fmt)


# ------------------------------------------------------------------------------ real data

CORPUS = corpus_files()


@pytest.mark.parametrize("path", need(CORPUS, "../shared/corpus"), ids=ids(CORPUS) or None)
def test_corpus(path: Path) -> None:
    doc = load(path)
    msgs, fmt = doc["messages"], doc["format"]
    same_everything(msgs, fmt)
    same_everything(msgs, None, budgets=[cw.count_messages(msgs) // 2])


def test_count_many_corpus() -> None:
    convs = [load(p)["messages"] for p in CORPUS]
    if not convs:
        pytest.skip("../shared/corpus not found beside the repo")
    convs.insert(1, [{"role": "user", "content": "x\ud800"}])  # the slow path in between
    fast = same(cw.count_many, convs)
    assert fast == ("ok", [cw.count_messages(c) for c in convs])


CASES = case_files()


@pytest.mark.parametrize("path", need(CASES, "../shared/cases"), ids=ids(CASES) or None)
def test_cases(path: Path) -> None:
    case = load(path)
    msgs, fmt = case.get("messages"), case.get("format")
    if not isinstance(msgs, list) or not msgs:
        pytest.skip("no message list in this case")
    args = {k: v for k, v in case["call"]["args"].items() if k in ("profile", "breadcrumb")}
    for f in (fmt, None):
        same(cw.message_tokens, msgs, format=f)
        same(cw.count_messages, msgs, format=f)
        for budget in (0, 50, 500, 5000):
            same(cw.trim_turns, msgs, budget, format=f, **args)
    if not has_surrogate(msgs) and outcome(_engine.prepare, msgs, fmt)[0] == "ok":
        same_canonical(msgs, fmt)


# --------------------------------------------------------------------- generated dicts

# Values of every JSON type (and a few msgspec encodes its own way) for extra keys.
EXTRA_VALUES = [
    None,
    True,
    False,
    0,
    -1,
    2**63 - 1,
    -(2**63),
    2**64 - 1,
    2**64,
    -(2**70),
    0.1,
    1e16,
    1e-7,
    -0.0,
    1.5e300,
    math.inf,
    math.nan,
    "",
    "plain",
    "".join(chr(i) for i in range(0x20)) + '"\\/\x7f',
    "é 你好 \U0001f468\u200d\U0001f469",
    [],
    {},
    (1, "a", None),
    [1, [2, [3, {"deep": [None]}]]],
    {"type": "ephemeral"},
    {"nested": {"k": [1.25, "v", {"x": False}]}},
    datetime.datetime(2024, 1, 2, 3, 4, 5),
]

extra_value = st.sampled_from(EXTRA_VALUES)
extra_key = st.sampled_from(["cache_control", "reasoning_content", "weight", "x", "citations", "名前"])


def add_extras(draw: Any, d: Any, depth: int = 0) -> Any:
    """``d`` with extra keys added here and there, recursively (new objects)."""
    if isinstance(d, list):
        return [add_extras(draw, x, depth + 1) for x in d]
    if not isinstance(d, dict):
        return d
    out = {k: add_extras(draw, v, depth + 1) for k, v in d.items()}
    for _ in range(draw(st.integers(0, 2)) if draw(st.integers(0, 3)) == 0 else 0):
        out[draw(extra_key)] = draw(extra_value)
    return out


@st.composite
def odd_openai(draw: Any, d: dict[str, Any]) -> dict[str, Any]:
    """OpenAI spellings the adapters must keep: null/missing content, names, tool_calls
    null or [], non-standard tool calls, extra image_url keys, a detail or refusal of
    any type (the adapters refuse one that is neither a string nor null, and the reader
    leaves it to them)."""
    d = dict(d)
    choice = draw(st.integers(0, 12))
    if choice == 0 and d.get("content") in ("", None) and d["role"] == "assistant":  # the others need content
        if draw(st.booleans()):
            d.pop("content", None)
        else:
            d["content"] = None
    elif choice == 1:
        d["name"] = draw(st.sampled_from(["bob", "", 7, None]))
    elif choice == 2 and d["role"] != "tool" and "tool_calls" not in d:
        d["tool_calls"] = draw(st.sampled_from([None, []]))
    elif choice == 3 and d.get("tool_calls"):
        calls = [dict(tc) for tc in d["tool_calls"]]
        tc = calls[0]
        what = draw(st.integers(0, 3))
        if what == 0:
            tc.pop("type", None)
        elif what == 1:
            tc["function"] = {**tc["function"], "strict": True}
        elif what == 2:  # a custom (free-form) call: read by the reader itself
            fn = tc.pop("function")
            custom = {"name": fn["name"], "input": fn["arguments"]}
            if draw(st.booleans()):
                custom["format"] = {"type": "text"}
            tc.update(type="custom", custom=custom)
        else:  # refused by the adapters, which name the type
            tc["type"] = draw(st.sampled_from(["custom", "foo", 3, None]))
        d["tool_calls"] = calls
    elif choice == 4 and isinstance(d.get("content"), list):
        parts = []
        for p in d["content"]:
            if isinstance(p, dict) and p.get("type") == "image_url":
                img = dict(p["image_url"])
                img[draw(st.sampled_from(["detail", "mime"]))] = draw(st.sampled_from([None, 5, "low", "png"]))
                p = {**p, "image_url": img}
            parts.append(p)
        d["content"] = [*parts, {"type": "input_audio", "input_audio": {"data": "AAA", "format": "wav"}}]
    elif choice == 5 and d["role"] == "tool":
        d["tool_calls"] = []  # not a call list on a tool message: stays in extra
    elif choice == 6:  # a string or null is read; anything else the adapters name
        d["refusal"] = draw(st.sampled_from(["I can't", None, 5, ["no"], {"text": "no"}]))
    return d


@st.composite
def odd_anthropic(draw: Any, d: dict[str, Any]) -> dict[str, Any]:
    """Anthropic spellings: is_error false/true/other, tool_result without content or
    with null content, nested tool_use (opaque), name key, document/thinking blocks."""
    d = dict(d)
    content = d.get("content")
    if not isinstance(content, list):
        return d
    blocks = []
    for b in content:
        if isinstance(b, dict) and b.get("type") == "tool_result":
            b = dict(b)
            choice = draw(st.integers(0, 6))
            if choice == 0:
                b["is_error"] = draw(st.sampled_from([False, True, 1, None, "yes"]))
            elif choice == 1:
                b.pop("content", None)
            elif choice == 2:
                b["content"] = None
            elif choice == 3:
                b["content"] = [
                    {"type": "tool_use", "id": "n", "name": "f", "input": {}},
                    {"type": "text", "text": "t"},
                ]
        elif isinstance(b, dict) and b.get("type") == "tool_use" and draw(st.integers(0, 4)) == 0:
            b = {**b, "input": draw(st.sampled_from([{}, [], None, 3, "s", {"a": [1.5, None, True]}]))}
        blocks.append(b)
    if draw(st.integers(0, 9)) == 0:
        blocks.append({"type": "document", "source": {"type": "text", "data": "doc"}, "title": "t"})
    if draw(st.integers(0, 9)) == 0:
        d["name"] = "nm"
    if draw(st.integers(0, 9)) == 0:  # counted on any message: a string or null
        d["refusal"] = draw(st.sampled_from(["I can't", None, 5, ["no"]]))
    d["content"] = blocks
    return d


@st.composite
def dict_conversation(draw: Any) -> tuple[str, list[dict[str, Any]]]:
    provider, msgs = draw(strat.case())
    dicts = []
    for m in msgs:
        try:
            dicts.append(from_canonical(m, provider))
        except InvalidMessageError:  # e.g. an image without a source in OpenAI shape
            continue
    odd = odd_openai if provider == "openai" else odd_anthropic
    dicts = [draw(odd(d)) for d in dicts]
    dicts = [add_extras(draw, d) for d in dicts]
    if draw(st.booleans()):  # the strategies like lone surrogates; the reader leaves them to Python
        dicts = _jsontext.clean_value(dicts)
    return provider, dicts


def has_surrogate(value: Any) -> bool:
    try:
        msgspec.json.encode(value)
    except UnicodeEncodeError:
        return True
    return False


@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dict_conversation())
def test_generated_canonical(case: tuple[str, list[dict[str, Any]]]) -> None:
    provider, msgs = case
    if not msgs:
        return
    for fmt in (provider, None):
        if has_surrogate(msgs):  # the slow path replaces lone surrogates: left to it
            assert read_dicts(msgs, fmt) is None
        elif outcome(_engine.prepare, msgs, fmt)[0] == "error":  # e.g. detected wrong
            assert read_dicts(msgs, fmt) is None
        else:
            same_canonical(msgs, fmt)


@settings(max_examples=MAX_EXAMPLES // 2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dict_conversation(), st.integers(0, 400))
def test_generated_results(case: tuple[str, list[dict[str, Any]]], budget: int) -> None:
    provider, msgs = case
    for fmt in (provider, None):
        same(cw.message_tokens, msgs, format=fmt)
        same(cw.count_messages, msgs, "fim", format=fmt)
        same(cw.trim_turns, msgs, budget, format=fmt)
    same(cw.trim_turn_count, msgs, 1, format=provider)
    same(cw.count_many, [msgs, msgs[:1]], format=provider)


# ---------------------------------------------------------------------------- fallbacks


class StrSub(str):
    pass


class DictSub(dict):  # type: ignore[type-arg]
    pass


def _deep(n: int) -> Any:
    v: Any = "x"
    for _ in range(n):
        v = [v]
    return v


# Inputs the reader leaves to the Python adapters: malformed ones (same errors), and valid
# ones outside what it reads (same results).
MALFORMED: list[tuple[str, Any, str | None]] = [
    ("not a dict", ["hi"], None),
    ("no role", [{"content": "x"}], None),
    ("unknown role", [{"role": "robot", "content": "x"}], "openai"),
    ("anthropic tool role", [{"role": "tool", "content": "x"}], "anthropic"),
    ("content a number", [{"role": "user", "content": 5}], None),
    ("anthropic missing content", [{"role": "user"}], "anthropic"),
    ("anthropic null content", [{"role": "user", "content": None}], "anthropic"),
    ("part not a dict", [{"role": "user", "content": ["x"]}], "openai"),
    ("part without type", [{"role": "user", "content": [{"text": "x"}]}], "openai"),
    ("text without text", [{"role": "user", "content": [{"type": "text"}]}], None),
    ("text not str", [{"role": "user", "content": [{"type": "text", "text": 3}]}], None),
    ("image_url not a dict", [{"role": "user", "content": [{"type": "image_url", "image_url": "u"}]}], None),
    ("image_url without url", [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], None),
    ("tool_use in openai", [{"role": "user", "content": [{"type": "tool_use", "id": "a"}]}], "openai"),
    ("tool without id", [{"role": "tool", "content": "x"}], None),
    ("tool_calls not a list", [{"role": "assistant", "content": None, "tool_calls": {}}], None),
    ("call not a dict", [{"role": "assistant", "tool_calls": ["x"]}], None),
    ("call without id", [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": ""}}]}], None),
    ("call without function", [{"role": "assistant", "tool_calls": [{"id": "c"}]}], None),
    ("custom call without custom", [{"role": "assistant", "tool_calls": [{"id": "c", "type": "custom"}]}], None),
    (
        "custom input not str",
        [{"role": "assistant", "tool_calls": [{"id": "c", "type": "custom", "custom": {"name": "f", "input": {}}}]}],
        None,
    ),
    (
        "call of another type",
        [{"role": "assistant", "tool_calls": [{"id": "c", "type": "foo", "function": {"name": "f", "arguments": ""}}]}],
        None,
    ),
    (
        "arguments not str",
        [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {}}}]}],
        None,
    ),
    (
        "tool_use without input",
        [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f"}]}],
        "anthropic",
    ),
    (
        "tool_use input a string",
        [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "str"}]}],
        "anthropic",
    ),
    (
        "tool_use input a list",
        [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": [1]}]}],
        None,
    ),
    (
        "tool_use input not JSON",
        [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {1j}}]}],
        "anthropic",
    ),
    ("tool_result without id", [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}], "anthropic"),
    ("image without source", [{"role": "user", "content": [{"type": "image"}]}], "anthropic"),
    ("image source without type", [{"role": "user", "content": [{"type": "image", "source": {}}]}], None),
    (
        "image source type null",
        [{"role": "user", "content": [{"type": "image", "source": {"type": None, "url": "u"}}]}],
        "anthropic",
    ),
    (
        "base64 image data a number",
        [
            {
                "role": "user",
                "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": 7}}],
            }
        ],
        "anthropic",
    ),
    (
        "base64 image without media_type",
        [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": "AAAA"}}]}],
        None,
    ),
    ("url image without url", [{"role": "user", "content": [{"type": "image", "source": {"type": "url"}}]}], None),
    (
        "file image file_id a number",
        [{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": 1}}]}],
        "anthropic",
    ),
    (
        "str subclass image data",
        [
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": StrSub("AAAA")}}
                ],
            }
        ],
        "anthropic",
    ),
    ("document without source", [{"role": "user", "content": [{"type": "document"}]}], "anthropic"),
    (
        "document file without file_id",
        [{"role": "user", "content": [{"type": "document", "source": {"type": "file"}}]}],
        None,
    ),
    (
        "nested image url a number",
        [
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t",
                        "content": [
                            {"type": "text", "text": "x"},
                            {"type": "image", "source": {"type": "url", "url": 5}},
                        ],
                    }
                ],
            }
        ],
        "anthropic",
    ),
    ("openai user without content", [{"role": "user"}], "openai"),
    ("openai system without content", [{"role": "system"}], None),
    ("openai developer null content", [{"role": "developer", "content": None}], None),
    ("openai tool without content", [{"role": "tool", "tool_call_id": "c"}], None),
    ("openai tool null content", [{"role": "tool", "tool_call_id": "c", "content": None}], "openai"),
    ("extra not JSON", [{"role": "user", "content": "x", "meta": object()}], None),
    ("extra bytes key", [{"role": "user", "content": "x", "meta": {b"k": 1}}], None),
    ("extra too deep", [{"role": "user", "content": "x", "meta": _deep(100_000)}], None),
    ("lone surrogate", [{"role": "user", "content": "a\ud83d"}], None),
    ("lone surrogate in extra", [{"role": "user", "content": "a", "k": ["\udc00"]}], None),
    ("str subclass content", [{"role": "user", "content": StrSub("hi")}], None),
    ("str subclass extra", [{"role": "user", "content": "hi", "k": StrSub("v")}], None),
    ("dict subclass message", [DictSub(role="user", content="hi")], None),
    ("Message structs", [Message(role="user", content=[TextPart(text="hi")])], None),
    ("mixed", [Message(role="user", content=[]), {"role": "user", "content": "x"}], None),
    ("empty", [], None),
    ("self-referential extra", [{"role": "user", "content": "x", "meta": (_loop := [])}], None),
    ("int key in a message (valid)", [{"role": "user", "content": "x", 1: 2}], None),
    ("int key in a part (valid)", [{"role": "user", "content": [{"type": "text", "text": "x", 1: 2}]}], None),
    # a container msgspec would write (its keys are the adapters' to check: fresh14 #11)
    ("dict subclass in extra (valid)", [{"role": "user", "content": "x", "k": collections.OrderedDict(a=1)}], None),
    ("set in extra (valid)", [{"role": "user", "content": "x", "k": {1, 2}}], None),
]
_loop.append(_loop)


@pytest.mark.parametrize(("name", "msgs", "fmt"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_fallback_gives_the_same_errors(name: str, msgs: list[Any], fmt: str | None) -> None:
    assert count_dicts(msgs, fmt, "conservative") is None, f"{name}: the reader must leave it to the adapters"
    same(cw.message_tokens, msgs, format=fmt)
    same(cw.count_messages, msgs, format=fmt)
    same(cw.trim_turns, msgs, 10, format=fmt)
    same(cw.trim_turn_count, msgs, 1, format=fmt)
    same(cw.Estimator("fim", calibrator=CALIBRATOR).count_messages, msgs, format=fmt)
    same(cw.count_many, [[{"role": "user", "content": "ok"}], msgs], format=fmt)


def test_surrogates_count_as_replacement_characters() -> None:
    # "a\ud83d" reads as "a\ufffd" (DESIGN.md section 7) on both paths
    msgs = [{"role": "user", "content": "a\ud83d"}]
    assert cw.count_messages(msgs, "bytes4") == cw.count_messages([{"role": "user", "content": "a\ufffd"}], "bytes4")
    # bytes4: 4 per message + ceil(4 UTF-8 bytes / 4) = 5
    assert cw.count_messages(msgs, "bytes4") == 5


@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 127, 128, 129, 1000])
@pytest.mark.parametrize("odd", ['"', "\\", "\n", "\x00", "\x1f", "\x7f", "é", "中", "😀", None])
def test_json_strings_are_written_as_msgspec_writes_them(n: int, odd: str | None) -> None:
    # the reader copies a string with nothing to escape whole, 64 bytes checked at a time,
    # and escapes any other through serde_json: both must give msgspec's bytes, wherever
    # in a 64-byte chunk the character to escape sits (first, last, past the last chunk)
    for at in sorted({0, n // 2, max(n - 1, 0), n}):
        text = "A" * n if odd is None else "A" * at + odd + "A" * (n - at)
        url = "data:image/png;base64," + text
        msgs = [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}, "note": {text: [text]}}]},
            {"role": "assistant", "content": [{"type": "text", "text": "ok", text: text}]},
        ]
        same_canonical(msgs, "openai")
        source = {"type": "base64", "media_type": "image/png", "data": text}
        anthropic = [
            {"role": "user", "content": [{"type": "image", "source": source}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"q": text}}]},
        ]
        same_canonical(anthropic, "anthropic")


def test_reader_handles_typical_chat_itself() -> None:
    msgs = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "abcdefgh"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    # fim: 4 per message; "be brief" 8 ASCII -> 2; "abcdefgh" -> 2; "f" -> 1, "{}" -> 1; "42" -> 1
    assert count_dicts(msgs, None, "fim") == [6, 6, 6, 5]
    assert cw.message_tokens(msgs, "fim") == [6, 6, 6, 5]
    got = read_dicts(msgs, None)
    assert got is not None and got[:2] == ("openai", "openai")
    # a custom call too; "sh" -> 1 (at least 1), "ls -la" 6 ASCII -> 1
    custom = {"id": "c1", "type": "custom", "custom": {"name": "sh", "input": "ls -la"}}
    msgs[2] = {**msgs[2], "tool_calls": [custom]}
    assert count_dicts(msgs, None, "fim") == [6, 6, 6, 5]
    same_canonical(msgs, None)
    # found by hypothesis: a null type reads as missing ("function", kept in extra), as the
    # adapters read it; the reader fell back on it
    null_type = {"id": "c1", "type": None, "function": {"name": "f", "arguments": "{}"}}
    msgs[2] = {**msgs[2], "tool_calls": [null_type]}
    assert count_dicts(msgs, None, "fim") == [6, 6, 6, 5]
    same_canonical(msgs, None)


def test_plain_chat_counts_as_built_messages() -> None:
    # the plain chat path (every message {"role": "user"|"assistant", "content": str} and
    # nothing else: reader.rs `plain_chat`) counts without building messages.
    # fim: 4 per message; "abcdefgh" 8 ASCII -> 2; "ok" -> 1 (at least 1); "" -> 0
    msgs = [{"role": "user", "content": "abcdefgh"}, {"role": "assistant", "content": "ok"}]
    assert count_dicts(msgs, None, "fim") == [6, 5]
    assert count_dicts([{"content": "", "role": "user"}], "anthropic", "fim") == [4]
    # bytes4: 4 per message + ceil(UTF-8 bytes / 4): "日本語" is 9 bytes -> 3
    assert count_dicts([{"role": "user", "content": "日本語"}], "openai", "bytes4") == [7]
    for variant in (
        msgs,
        [*msgs, {"role": "user", "content": "x", "name": "ann"}],  # a third key: the full reader
        [{"role": "system", "content": "be brief"}, *msgs],  # a system message: the full reader
    ):
        for profile in PROFILES:
            same(cw.message_tokens, variant, profile)
            same(cw.count_messages, variant, profile)
            same(cw.count_many, [variant, msgs, [{"role": "user", "content": "a\ud83d"}]], profile)


_PLAIN_TEXT = st.lists(
    st.characters(codec="utf-8") | st.sampled_from(["\ud83d", "日本", "👩‍👩‍👧", " the", "\n\n"]), max_size=30
).map("".join)


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["user", "assistant", "system", "tool"]), _PLAIN_TEXT, st.booleans()),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from([None, "openai", "anthropic"]),
    st.sampled_from(PROFILES),
)
def test_generated_plain_chats_count_as_the_adapters_do(
    rows: list[tuple[str, str, bool]], fmt: str | None, profile: str
) -> None:
    # mostly plain chats (the plain chat path), some with a key more, a system or tool
    # role or a lone surrogate (the full reader or the adapters): the same counts or the
    # same error as the Python adapters
    msgs: list[dict[str, Any]] = [
        {"role": role, "content": text, **({"tool_call_id": "c"} if role == "tool" else {})} for role, text, _ in rows
    ]
    for m, (_, _, more) in zip(msgs, rows, strict=True):
        if more:
            m["k"] = 1
    same(cw.message_tokens, msgs, profile, format=fmt)
    same(cw.count_many, [msgs, msgs[:1]], profile, format=fmt)


def test_switch_really_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    msgs = [{"role": "user", "content": "hi"}]
    calls: list[str] = []
    real_prepare = _engine.prepare

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append("prepare")
        return real_prepare(*args, **kwargs)

    monkeypatch.setattr(_engine, "prepare", spy)
    cw.count_messages(msgs)
    cw.trim_turns(msgs, 1)
    assert calls == []
    with slow_path():
        cw.count_messages(msgs)
        cw.trim_turns(msgs, 1)
    assert calls == ["prepare", "prepare"]
