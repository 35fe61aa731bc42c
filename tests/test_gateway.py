"""The raw JSON gateway path (``fit_request``, ``count_request``) against the dict path.

On every corpus conversation wrapped as a request body, at several budgets, the fitted
body decodes to the body with ``messages`` replaced by ``trim_turns``'s output (tools
taken off the budget as the CLI's ``fit`` does), the report is the same, every other key
keeps its bytes and place, and every unchanged message keeps its bytes. Bad bodies raise
``InvalidRequestError`` with the byte offset, or ``InvalidMessageError``; never anything else.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import contextwindow as cw
from contextwindow.adapters import from_canonical
from contextwindow.errors import ContextWindowError, InvalidMessageError, InvalidRequestError
from contextwindow.estimate import output_schema_texts

from shared_data import case_files, corpus_files, ids, load, need
from strategies import case

FILES = corpus_files()
CASES = case_files()
PCTS = [5, 25, 50, 90, 100, 200]
EXTRA: dict[str, Any] = {"model": "m", "temperature": 0.2, "x-unknown": {"a": [1, 2]}}


def wrap(fmt: str, messages: list[Any], tools: list[Any] | None = None, system: Any = None) -> dict[str, Any]:
    """A request body around ``messages``: extra keys first, then messages, then tools."""
    doc: dict[str, Any] = dict(EXTRA)
    if fmt == "anthropic" and system is not None:
        doc["system"] = system
    doc["messages"] = messages
    if tools is not None:
        doc["tools"] = tools
    return doc


def python_path(doc: dict[str, Any], budget: int, fmt: str, **kw: Any) -> tuple[dict[str, Any], cw.FitReport]:
    """What the dict path makes of ``doc``: the expected body and report."""
    messages = list(doc["messages"])
    lifted = fmt == "anthropic" and doc.get("system") is not None
    if lifted:
        messages = [{"role": "system", "content": doc["system"]}, *messages]
    tools = doc.get("tools")
    profile = kw.get("profile", "conservative")
    tool_tokens = cw.count_messages([], profile, tools=tools) if tools else 0
    schema_tokens = sum(cw.estimate_tokens(t, profile) for t in output_schema_texts(doc))
    r = cw.trim_turns(messages, max(0, budget - tool_tokens - schema_tokens), format=fmt, **kw)
    out = list(r.messages)
    expected = dict(doc)
    if lifted:
        assert out[0]["role"] == "system"
        expected["system"] = out[0]["content"]
        out = out[1:]
    expected["messages"] = out
    return expected, r.report


def _replace_lone_surrogates(x: Any) -> Any:
    """Every lone surrogate as U+FFFD (UTF-16 round trip with replacement)."""
    if isinstance(x, str):
        return x.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    if isinstance(x, list):
        return [_replace_lone_surrogates(v) for v in x]
    if isinstance(x, dict):
        return {_replace_lone_surrogates(k): _replace_lone_surrogates(v) for k, v in x.items()}
    return x


def check(
    doc: dict[str, Any],
    body: bytes,
    budget: int,
    fmt: str | None,
    verbatim: bool = True,
    ascii_only: bool = True,
    **kw: Any,
) -> None:
    ref_fmt = fmt or ("anthropic" if "system" in doc else "openai")
    expected, report = python_path(doc, budget, ref_fmt, **kw)
    out, rep = cw.fit_request(body, budget=budget, provider=fmt, report=True, **kw)
    # without the report, old turns that cannot be kept are not estimated: the same body
    assert cw.fit_request(body, budget=budget, provider=fmt, **kw) == out
    got = json.loads(out)
    assert got == expected
    assert list(got) == list(doc), "top-level key order changed"
    assert rep.report == report
    assert rep.provider == ref_fmt
    if report.reason is None:
        assert out == body
    if verbatim:
        # every message the dict path returned as the caller's object is in the output verbatim
        kept = [m for m in expected["messages"] if any(m is x for x in doc["messages"])]
        for m in kept:
            assert json.dumps(m, ensure_ascii=ascii_only).encode() in out
        # every other key keeps its bytes: the text outside "messages" is unchanged
        start = body.index(b'"messages": [') + len(b'"messages": ')
        assert out[:start] == body[:start]
        tail = body[start + len(json.dumps(doc["messages"], ensure_ascii=ascii_only).encode()) :]
        assert out.endswith(tail)


def corpus_doc(path: Path) -> tuple[str, dict[str, Any]]:
    d = load(path)
    return d["format"], wrap(d["format"], d["messages"], d.get("tools"))


@pytest.mark.parametrize("path", need(FILES, "../shared/corpus"), ids=ids(FILES) or None)
def test_corpus_agrees_with_dict_path(path: Path) -> None:
    fmt, doc = corpus_doc(path)
    body = json.dumps(doc).encode()  # ensure_ascii: non-ASCII as \\uXXXX escapes, kept verbatim
    total = cw.count_request(body, provider=fmt)
    tools = doc.get("tools")
    assert total == cw.count_messages(doc["messages"], tools=tools, format=fmt)
    for pct in PCTS:
        check(doc, body, total * pct // 100, fmt)
    pretty = json.dumps(doc, ensure_ascii=False, indent=2).encode()
    for pct in (25, 90):
        check(doc, pretty, total * pct // 100, fmt, verbatim=False)


@pytest.mark.parametrize("path", need(FILES, "../shared/corpus"), ids=ids(FILES) or None)
def test_corpus_profiles_and_no_breadcrumb(path: Path) -> None:
    fmt, doc = corpus_doc(path)
    body = json.dumps(doc, ensure_ascii=False).encode()
    for profile in ("fim", "cl100k"):
        total = cw.count_request(body, provider=fmt, profile=profile)
        check(doc, body, total // 3, fmt, ascii_only=False, profile=profile, breadcrumb=False)


@pytest.mark.parametrize("path", need(CASES, "../shared/cases"), ids=ids(CASES) or None)
def test_cases_agree_with_dict_path(path: Path) -> None:
    case = load(path)
    fmt, msgs = case["format"], case["messages"]
    doc = wrap(fmt, msgs)
    body = json.dumps(doc).encode()
    try:
        json.dumps(doc, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        # An escaped lone surrogate: valid JSON, read as U+FFFD like the dict path does
        # (found by the second fresh-install review: it was an InvalidRequestError here).
        clean = _replace_lone_surrogates(doc)
        assert (
            cw.count_request(body, provider=fmt)
            == cw.count_request(json.dumps(clean).encode(), provider=fmt)
            == cw.count_messages(msgs, format=fmt)
        )
        total = cw.count_request(body, provider=fmt)
        for budget in [total * pct // 100 for pct in PCTS]:
            expected, report = python_path(clean, budget, fmt)
            out, rep = cw.fit_request(body, budget=budget, provider=fmt, report=True)
            assert rep.report == report
            # a body that fits comes back as given; in a trimmed one the messages the
            # engine writes carry U+FFFD, the rest keeps its escapes (fresh17b #2)
            if report.reason is None:
                assert out == body
            else:
                assert _replace_lone_surrogates(json.loads(out)) == expected
        return
    total = cw.count_request(body, provider=fmt)
    budgets = [total * pct // 100 for pct in PCTS]
    if case["call"]["fn"] == "trim_turns":
        budgets.append(case["call"]["args"]["budget"])
    for budget in budgets:
        check(doc, body, budget, fmt)


def test_anthropic_system_and_tools_detected() -> None:
    msgs = [
        {"role": "user", "content": "question one " * 50},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"q": [1, 2.5]}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "result " * 400}]},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "question two"},
    ]
    tools = [{"name": "f", "description": "find", "input_schema": {"type": "object", "properties": {}}}]
    for system in ("Be brief.", [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]):
        doc = wrap("anthropic", msgs, tools, system)
        body = json.dumps(doc).encode()
        total = cw.count_request(body)
        assert total == cw.count_messages(
            [{"role": "system", "content": system}, *msgs], tools=tools, format="anthropic"
        )
        for budget in (0, 60, 150, total // 2, total):
            check(doc, body, budget, None)


SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string"}, "risks": {"type": "array", "items": {"type": "string"}}},
    "required": ["summary", "risks"],
    "additionalProperties": False,
}


def test_count_request_adds_the_structured_output_schema() -> None:
    # fim: a message is 4 + characters // 4, a text of ASCII characters // 4 (at least 1)
    msgs = [{"role": "user", "content": "abcdefgh"}]
    rf = {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}}
    body = json.dumps({"model": "m", "response_format": rf, "messages": msgs}).encode()
    # '{"name":"r","schema":{"type":"object"}}' is 39 characters: 9 tokens
    assert cw.count_request(body, profile="fim") == 6 + 9
    for key, value in (
        ("output_config", {"format": {"type": "json_schema", "schema": {"type": "object"}}}),
        ("output_format", {"type": "json_schema", "schema": {"type": "object"}}),
    ):
        # '{"type":"object"}' is 17 characters: 4 tokens
        body = json.dumps({"model": "m", key: value, "messages": msgs}).encode()
        assert cw.count_request(body, profile="fim") == 6 + 4
    # JSON mode has no schema: nothing added
    body = json.dumps({"response_format": {"type": "json_object"}, "messages": msgs}).encode()
    assert cw.count_request(body, profile="fim") == 6


def test_output_schema_keys_are_read_in_either_shape_and_both_anthropic_keys_count() -> None:
    # fresh25 #4, as the README documents: an overcount when a body holds both, never an undercount
    msgs = [{"role": "user", "content": "abcdefgh"}]  # fim: 4 + 8 // 4 = 6
    fmt = {"type": "json_schema", "schema": {"type": "object"}}  # '{"type":"object"}': 17 // 4 = 4
    both = {"output_config": {"format": fmt}, "output_format": fmt, "messages": msgs}
    assert cw.count_request(json.dumps(both).encode(), profile="fim") == 6 + 4 + 4
    openai = {"format": "openai", "output_config": {"format": fmt}, "messages": msgs}
    assert cw.count_request(json.dumps(openai).encode(), profile="fim") == 6 + 4
    assert cw.count_request(json.dumps(openai).encode(), provider="openai", profile="fim") == 6 + 4


def test_output_schema_keys_refuse_their_own_repeated_keys_and_copy_deeper_ones() -> None:
    # fresh25 #2: which repeats in these keys are refused (README, Gateway path)
    m = '[{"role":"user","content":"hi"}]'
    refused = {
        '{"messages":%s,"output_config":{"effort":"low","effort":"high"}}': 'output_config: the key "effort"',
        '{"messages":%s,"response_format":{"type":"text","x":1,"x":2}}': 'response_format: the key "x"',
        '{"messages":%s,"output_format":{"type":"text","a":1,"a":2}}': 'output_format: the key "a"',
        '{"messages":%s,"output_config":{"format":{"type":"text","a":1,"a":2}}}': 'output_config.format: the key "a"',
        '{"messages":%s,"response_format":{"type":"json_schema","json_schema":{"a":1,"a":2}}}': (
            'response_format.json_schema: the key "a"'
        ),
    }
    for body, named in refused.items():
        with pytest.raises(cw.InvalidRequestError) as got:
            cw.count_request((body % m).encode())
        assert named + " appears more than once" in str(got.value)
    plain = cw.count_request(b'{"messages":' + m.encode() + b"}")
    for body in (
        '{"messages":%s,"output_config":{"other":{"a":1,"a":2}}}',
        '{"messages":%s,"response_format":{"type":"text","json_schema":{"a":1,"a":2}}}',
    ):
        full = (body % m).encode()
        assert cw.count_request(full) == plain
        assert cw.fit_request(full, budget=1000) == full  # copied as it came


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_fit_request_takes_the_structured_output_schema_off_the_budget(fmt: str) -> None:
    # a new user's structured-output schema was not counted (README Known limits, before)
    msgs = [
        {"role": "user", "content": "review the first file " * 40},
        {"role": "assistant", "content": "first review " * 40},
        {"role": "user", "content": "now the second"},
    ]
    doc = wrap(fmt, msgs)
    key = "response_format" if fmt == "openai" else "output_config"
    if fmt == "openai":
        doc[key] = {"type": "json_schema", "json_schema": {"name": "review", "schema": SCHEMA}}
    else:
        doc[key] = {"format": {"type": "json_schema", "schema": SCHEMA}}
    body = json.dumps(doc).encode()
    (text,) = output_schema_texts(doc)
    schema = cw.estimate_tokens(text)
    assert schema > 20
    total = cw.count_request(body)
    assert total == cw.count_messages(msgs, format=fmt) + schema
    _, rep = cw.fit_request(body, budget=total, report=True)
    assert (rep.schema_tokens, rep.tool_tokens, rep.report.budget, rep.report.reason) == (
        schema,
        0,
        total - schema,
        None,
    )
    # one token short: the old turn goes, which it would not without the schema
    out, rep = cw.fit_request(body, budget=total - 1, report=True)
    assert rep.report.dropped_turns == 1 and rep.report.fits
    assert json.loads(out)[key] == doc[key]
    for budget in (0, schema, total // 2, total - 1, total):
        check(doc, body, budget, fmt)


_JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-1000, 1000), st.text(max_size=8))
_SCHEMA_LIKE = st.recursive(
    _JSON_LEAF,
    lambda inner: st.dictionaries(st.text(max_size=6), inner, max_size=3) | st.lists(inner, max_size=3),
    max_leaves=8,
)
_OBJECT = st.dictionaries(st.text(max_size=6), _SCHEMA_LIKE, max_size=3)
_FORMAT = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["json_schema"] * 4 + ["json_object", "text", "JSON_SCHEMA", None, 1]),
        "json_schema": st.one_of(_OBJECT, st.just("r")),
        "schema": st.one_of(_OBJECT, st.just("r")),
    }
)


SCHEMA_SHAPES: list[tuple[str, Any, int]] = [
    # (key, value, schemas counted)
    ("response_format", {"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA}}, 1),
    ("response_format", {"json_schema": {"schema": SCHEMA}, "type": "json_schema", "x": 1}, 1),
    ("response_format", {"type": "json_schema", "json_schema": {}}, 1),
    ("output_config", {"effort": "low", "format": {"type": "json_schema", "schema": SCHEMA}}, 1),
    ("output_format", {"type": "json_schema", "schema": SCHEMA}, 1),
    ("response_format", {"type": "json_object"}, 0),
    ("response_format", {"type": "text"}, 0),
    ("response_format", {"type": "text", "json_schema": "r"}, 0),
    ("response_format", {"json_schema": {"schema": SCHEMA}}, 0),
    ("response_format", "json", 0),
    ("response_format", None, 0),
    ("output_config", {"type": "json_schema", "schema": SCHEMA}, 0),  # not under "format"
    ("output_config", {"format": {"type": "text"}}, 0),
    ("output_format", {"type": "JSON_SCHEMA", "schema": SCHEMA}, 0),
    ("format", {"type": "json_schema", "schema": SCHEMA}, 0),  # Ollama's key
    ("text", {"format": {"type": "json_schema", "schema": SCHEMA}}, 0),  # the Responses API's
]

#: A "json_schema" format without its schema object, which the providers refuse (a new
#: user's finding: each was counted as 0): (key, value, the error's words).
SCHEMA_REFUSED: list[tuple[str, Any, str]] = [
    ("response_format", {"type": "json_schema", "schema": SCHEMA}, "response_format.json_schema: is missing"),
    (
        "response_format",
        {"type": "json_schema", "json_schema": "r"},
        "response_format.json_schema: must be an object, got a string",
    ),
    (
        "response_format",
        {"type": "json_schema", "json_schema": None},
        "response_format.json_schema: must be an object, got null",
    ),
    ("output_config", {"format": {"type": "json_schema"}}, "output_config.format.schema: is missing"),
    (
        "output_config",
        {"format": {"type": "json_schema", "schema": 1}},
        "output_config.format.schema: must be an object, got a number",
    ),
    (
        "output_format",
        {"type": "json_schema", "json_schema": SCHEMA},
        "output_format.schema: is missing",
    ),  # OpenAI's field
    (
        "output_format",
        {"type": "json_schema", "schema": [SCHEMA]},
        "output_format.schema: must be an object, got an array",
    ),
]


@pytest.mark.parametrize(("key", "value", "n"), SCHEMA_SHAPES)
def test_which_structured_output_schemas_count(key: str, value: Any, n: int) -> None:
    msgs = [{"role": "user", "content": "hi"}]
    texts = output_schema_texts({key: value})
    assert len(texts) == n
    body = json.dumps({"messages": msgs, key: value}).encode()
    assert cw.count_request(body) == cw.count_messages(msgs) + sum(cw.estimate_tokens(t) for t in texts)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["response_format", "output_config", "output_format", "format"]),
    st.one_of(_FORMAT, st.fixed_dictionaries({"format": _FORMAT, "effort": st.text(max_size=4)}), _SCHEMA_LIKE),
)
def test_the_gateway_counts_the_schemas_the_cli_counts(key: str, value: Any) -> None:
    # two implementations of one rule: the gateway's (Rust) and output_schema_texts (the
    # CLI's); a schema both refuse, in the same words
    assume(value not in ("openai", "anthropic"))  # a "format" of those names the shape
    msgs = [{"role": "user", "content": "hi"}]
    body = json.dumps({"messages": msgs, key: value}).encode()
    try:
        texts = output_schema_texts({key: value})
    except cw.InvalidRequestError as err:
        with pytest.raises(cw.InvalidRequestError) as got:
            cw.count_request(body, provider="openai")
        assert str(got.value).endswith(f": {err}")
        return
    want = cw.count_messages(msgs, format="openai") + sum(cw.estimate_tokens(t) for t in texts)
    assert cw.count_request(body, provider="openai") == want


@pytest.mark.parametrize(("key", "value", "reason"), SCHEMA_REFUSED)
def test_a_json_schema_format_without_its_schema_object_is_refused(key: str, value: Any, reason: str) -> None:
    msgs = [{"role": "user", "content": "hi"}]
    with pytest.raises(cw.InvalidRequestError) as err:
        output_schema_texts({key: value})
    assert str(err.value) == reason
    body = json.dumps({"messages": msgs, key: value}).encode()
    for call in (lambda: cw.count_request(body), lambda: cw.fit_request(body, budget=100)):
        with pytest.raises(cw.InvalidRequestError) as got:
            call()
        assert str(got.value).endswith(f": {reason}") and got.value.offset is not None


def test_openai_tool_chain_shrinks_result() -> None:
    msgs = [
        {"role": "developer", "content": "dev"},
        {"role": "user", "content": "read it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"p": 1}'}},
                {"id": "c2", "function": {"name": "read", "arguments": "{}"}, "x": 1},
            ],
            "reasoning_content": "hm",
        },
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "é " * 3000}]},
        {"role": "tool", "tool_call_id": "c1", "content": "long " * 3000, "name": "read"},
    ]
    doc = wrap("openai", msgs)
    body = json.dumps(doc).encode()
    for budget in (40, 200, 1000, 3000):
        check(doc, body, budget, None)


def test_untouched_fields_byte_for_byte() -> None:
    head = b'{ "model" :"m","temperature": 1.0000000000000002, "x":"\\u00e9\\/", "n": 1E2,\n  "messages":'
    msgs = b' [ {"role":"user","content":"' + b"old " * 400 + b'"} ,{"role":"assistant","content":"a"},'
    msgs += b'{"role": "user", "content": "caf\\u00e9"}]'
    tail = b' , "stop":["\\n"], "tools": [], "z": {"deep": [[[]]]} }\n'
    body = head + msgs + tail
    # a plain chat: with the shape named, OpenAI's placement (a breadcrumb message)
    out = cw.fit_request(body, budget=40, provider="openai")
    assert out.startswith(head) and out.endswith(tail)
    assert out[len(head) : len(out) - len(tail)] == (
        b' [{"role":"user","content":"[earlier turns omitted to fit the context window]"},'
        b'{"role": "user", "content": "caf\\u00e9"}]'
    )
    assert cw.fit_request(body, budget=10**6) is body  # fits: the same object


def test_plain_chat_places_the_breadcrumb_like_the_dict_path() -> None:
    """Found by the second fresh-install review: without ``provider``, a plain chat (user
    and assistant text only, valid in both shapes) got a breadcrumb message of its own here
    but a leading text block on the dict path."""
    msgs = [{"role": "user", "content": "old " * 300}, {"role": "assistant", "content": "a"}]
    msgs.append({"role": "user", "content": "new"})
    body = json.dumps({"model": "m", "messages": msgs}).encode()
    got = json.loads(cw.fit_request(body, budget=40))["messages"]
    assert got == cw.trim_turns(msgs, 40).messages
    assert got[0]["content"][0] == {"type": "text", "text": cw.BREADCRUMB}


def test_repeated_keys_in_a_message_are_refused_not_read_like_json_loads() -> None:
    """They used to be read as json.loads reads them (the last value); a provider whose
    parser keeps the first would see another message (fresh tester's N4)."""
    body = b'{"messages": [{"role": "user", "content": "' + b"a " * 500 + b'", "content": "short", "x": 1, "x": 2},'
    body += b'{"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]}'
    for budget in (5, 30, 10**6):
        with pytest.raises(InvalidMessageError) as info:
            cw.fit_request(body, budget=budget)
        assert info.value.offset == body.index(b'"content": "short"')
        assert str(info.value) == 'message 0: the key "content" appears more than once'
    # a repeated key inside a value the gateway does not read is copied as it is
    body = b'{"messages": [{"role": "user", "content": "hi", "x": {"k": 1, "k": 2}}], "m": 1, "m": 2}'
    assert cw.fit_request(body, budget=100) is body


def test_anthropic_breadcrumb_block_and_system_kept() -> None:
    body = (
        b'{"system":[{"type":"text","text":"S"}], "max_tokens": 10, "messages": ['
        b'{"role":"user","content":"' + b"x " * 300 + b'"},{"role":"assistant","content":"y"},'
        b'{"role":"user","content":[{"type":"text","text":"now"}], "extra_key": 1}]}'
    )
    out = cw.fit_request(body, budget=40)
    doc = json.loads(out)
    assert out.startswith(b'{"system":[{"type":"text","text":"S"}], "max_tokens": 10, "messages": [')
    assert doc["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "[earlier turns omitted to fit the context window]"},
                {"type": "text", "text": "now"},
            ],
            "extra_key": 1,
        }
    ]


# ------------------------------------------------------------------------------- errors


def raises_request(body: bytes) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as info:
        cw.fit_request(body, budget=100)
    with pytest.raises(InvalidRequestError):
        cw.count_request(body)
    return info.value


@pytest.mark.parametrize(
    ("body", "offset", "words"),
    [
        (b'{"messages": [{"role": "user", "content": "ab\xffc"}]}', 45, "UTF-8"),
        (b"\xc3", 0, "UTF-8"),
        (b'{"messages": [}', 14, "expected value"),
        (b'{"messages": [', 14, "EOF"),
        (b"", 0, "EOF"),
        (b'{"messages": [],\n "a": tru}', 26, "expected ident"),
        (b'{"messages": []} x', 17, "trailing"),
        (b"[1, 2]", 0, "an array"),
        (b'  "hi"', 2, "a string"),
        (b'{"messages": {}}', 13, "not a list"),
        (b'{"messages": [], "tools": 3}', 26, "not a list"),
        (b'{"messages": [], "tools": [1]}', 27, "tools[0]"),
        (b'{"system": 5, "messages": []}', 11, "system: must be a string or a list of text blocks"),
        (b'{"system": [{"type": "text"}], "messages": []}', 11, "system[0].text"),
    ],
)
def test_request_errors_name_the_byte(body: bytes, offset: int, words: str) -> None:
    err = raises_request(body)
    assert err.offset == offset, str(err)
    assert words in str(err)
    assert f"at byte {offset}" in str(err)


@pytest.mark.parametrize(
    ("body", "offset", "problem"),
    [
        # the fresh tester's N4: read as role "tool", where a provider keeping the first
        # value sees a user message; 13 bytes of {"messages":[ then {"role":"user", (15)
        (b'{"messages":[{"role":"user","role":"tool","content":"hi"}]}', 28, 'message 0: the key "role"'),
        (
            b'{"messages":[{"role":"user","content":[{"type":"text","text":"a","text":"b"}]}]}',
            65,  # 28 + "content":[{"type":"text", (27) + "text":"a", (10)
            'message 0, field content[0]: the key "text"',
        ),
        # 14 bytes of {"messages": [, the same message, then ], "messages": at 17 + 6
        (b'{"messages": [], "messages": []}', 17, 'the key "messages"'),
    ],
)
def test_a_repeated_key_is_refused_with_its_place(body: bytes, offset: int, problem: str) -> None:
    """In a message it is an InvalidMessageError naming the message, as any other error
    there (fresh9 B2: it was an InvalidRequestError, which ``except InvalidMessageError``
    missed), with the offset; outside the messages an InvalidRequestError."""
    in_message = problem.startswith("message ")
    for call in (lambda: cw.count_request(body), lambda: cw.fit_request(body, budget=1)):
        with pytest.raises(InvalidMessageError if in_message else InvalidRequestError) as info:
            call()
        if in_message:
            assert str(info.value) == f"{problem} appears more than once"
            assert info.value.index == 0
        else:
            assert str(info.value) == f"invalid request body at byte {offset}: {problem} appears more than once"
        assert info.value.offset == offset


def test_a_repeated_key_in_a_message_is_caught_as_invalid_message_error() -> None:
    """fresh9 B2, the tester's repro: ``except cw.InvalidMessageError`` catches a key
    repeated in a message as it catches too deep a value there; index, field, offset set.
    A lifted Anthropic system block keeps its own place and is not a message."""
    body = b'{"messages":[{"role":"user","role":"user","content":"q"}]}'
    try:
        cw.count_request(body)
    except cw.InvalidMessageError as e:
        # {"messages":[ (13) + {"role":"user", (15): the second "role" at 28
        assert (e.index, e.field, e.offset, e.reason) == (0, None, 28, 'the key "role" appears more than once')
    else:
        pytest.fail("not refused")
    body = b'{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use",'
    body += b'"id":"a","name":"f","input":{"q":{"x":1,"x":2}}}]}]}'
    with pytest.raises(cw.InvalidMessageError) as info:
        cw.fit_request(body, budget=100)
    # deep in a counted value the offset is just past the repeat's value (the "2")
    assert (info.value.index, info.value.field, info.value.offset) == (1, "content[0].input.q", body.index(b"2}") + 1)
    assert str(info.value) == 'message 1, field content[0].input.q: the key "x" appears more than once'
    body = b'{"system":[{"type":"text","text":"a","text":"b"}],"messages":[]}'
    with pytest.raises(InvalidRequestError) as req:
        cw.count_request(body)
    at = body.index(b'"text":"b"')
    assert str(req.value) == f'invalid request body at byte {at}: system[0]: the key "text" appears more than once'
    assert req.value.offset == at


@pytest.mark.parametrize(
    ("body", "offset", "message"),
    [
        # offsets counted by hand: `{"messages":[` is 13 bytes, message 0 29, then a comma
        (
            b'{"messages":[{"role":"user","content":"x"},{"role":1,"content":"x"}]}',
            43,
            "message 1, field role: must be a string",
        ),
        (b'{"messages":[{"role":"user","content":"x"}, 5]}', 44, "message 1: must be an object"),
        (
            b'{"messages":[{"role":"user","content":[{"type":"text"}]}]}',
            13,
            "message 0, field content[0].text: is missing",
        ),
        # after a top-level system: `{"system":"s",` is 14 bytes more
        (
            b'{"system":"s","messages":[{"role":"user","content":"x"},{"role":"system","content":"y"}]}',
            56,
            "message 1, field role: ",
        ),
    ],
)
def test_message_errors_of_a_body_have_the_messages_offset(body: bytes, offset: int, message: str) -> None:
    """fresh39 #3: an error inside a message of a body had no offset (a repeated key's
    had); now it is where the message's value starts, as a proxy logging a bad body needs."""
    with pytest.raises(cw.InvalidMessageError) as info:
        cw.count_request(body)
    assert str(info.value).startswith(message) and info.value.offset == offset
    assert body[offset : offset + 1] in (b"{", b"5")


def test_request_errors_without_offset() -> None:
    err = raises_request(b'{"messages": [], "messages": []}')
    assert "more than once" in str(err)


def test_a_body_without_messages_names_where_its_object_starts() -> None:
    # fresh18 F4: the offset was None, though the docs say offset says where
    err = raises_request(b'{"model": "m"}')
    assert (err.offset, str(err)) == (0, 'invalid request body at byte 0: the top-level object has no "messages" list')
    assert raises_request(b' \r\n\t{"model": "m"}').offset == 4


@pytest.mark.parametrize(
    ("messages", "provider", "index", "field"),
    [
        ([{"role": "user", "content": "a"}, 3], None, 1, None),
        ([{"role": "user", "content": 5}], None, 0, "content"),
        ([{"content": "a"}], None, 0, "role"),
        ([{"role": "robot", "content": "a"}], None, 0, "role"),
        ([{"role": "tool", "content": "a"}], None, 0, "tool_call_id"),
        ([{"role": "assistant", "tool_calls": [{"id": "c"}]}], None, 0, "tool_calls[0].function"),
        ([{"role": "assistant", "tool_calls": 3}], None, 0, "tool_calls"),
        ([{"role": "user", "content": [{"type": "text"}]}], None, 0, "content[0].text"),
        ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}], "openai", 0, "content[0].type"),
        ([{"role": "user"}], "anthropic", 0, "content"),
        ([{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f"}]}], None, 0, "content[0].input"),
        (
            [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "s"}]}],
            None,
            0,
            "content[0].input",
        ),
        (
            [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": [1]}]}],
            None,
            0,
            "content[0].input",
        ),
        ([{"role": "user", "content": [{"type": "image", "source": "u"}]}], "anthropic", 0, "content[0].source"),
        # image/document source fields by type (the Messages API), nested ones too
        (
            [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png"}}]}],
            "anthropic",
            0,
            "content[0].source.data",
        ),
        (
            [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": 1}}]}],
            "anthropic",
            0,
            "content[0].source.url",
        ),
        (
            [{"role": "user", "content": [{"type": "document", "source": {"type": "file"}}]}],
            "anthropic",
            0,
            "content[0].source.file_id",
        ),
        ([{"role": "user", "content": [{"type": "document", "source": 3}]}], "anthropic", 0, "content[0].source"),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t",
                            "content": [
                                {"type": "text", "text": "x"},
                                {"type": "image", "source": {"type": "base64", "data": "AAAA"}},
                            ],
                        }
                    ],
                }
            ],
            "anthropic",
            0,
            "content[0].content[1].source.media_type",
        ),
        # content is required but for assistant messages (Chat Completions)
        ([{"role": "user", "content": "a"}, {"role": "user"}], None, 1, "content"),
        ([{"role": "system", "content": None}], None, 0, "content"),
        ([{"role": "developer"}], None, 0, "content"),
        ([{"role": "tool", "tool_call_id": "c"}], None, 0, "content"),
    ],
)
def test_message_errors_like_dict_path(
    messages: list[Any], provider: str | None, index: int, field: str | None
) -> None:
    body = json.dumps({"messages": messages}).encode()
    with pytest.raises(InvalidMessageError) as info:
        cw.fit_request(body, budget=100, provider=provider)
    err = info.value
    assert (err.index, err.field) == (index, field), str(err)
    fmt = provider or ("anthropic" if any("tool_use" in json.dumps(m) for m in messages) else "openai")
    with pytest.raises(InvalidMessageError) as ref:
        cw.trim_turns(messages, 100, format=fmt)
    assert (ref.value.index, ref.value.field) == (index, field)


@pytest.mark.parametrize(
    ("messages", "provider", "text"),
    [
        (
            [
                {
                    "role": "user",
                    "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": 7}}],
                }
            ],
            "anthropic",
            "message 0, field content[0].source.data: must be a string",
        ),
        (
            [{"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}],
            "anthropic",
            "message 0, field content[0].source.file_id: is missing",
        ),
        # a source without a type (priced as an image of unknown size: 1645 tokens), or no
        # source in a body read as Anthropic's
        (
            [{"role": "user", "content": [{"type": "image", "source": {}}]}],
            None,
            "message 0, field content[0].source.type: is missing",
        ),
        (
            [{"role": "user", "content": [{"type": "image", "source": {"type": None, "url": "u"}}]}],
            "anthropic",
            "message 0, field content[0].source.type: must be a string",
        ),
        (
            [{"role": "user", "content": [{"type": "image"}]}],
            "anthropic",
            "message 0, field content[0].source: must be an object",
        ),
        ([{"role": "user"}], "openai", "message 0, field content: is missing"),
        ([{"role": "user"}], None, "message 0, field content: is missing"),
        (
            [{"role": "tool", "tool_call_id": "c", "content": None}],
            None,
            "message 0, field content: must be a string or a list of blocks",
        ),
    ],
)
def test_new_message_errors_have_the_dict_path_text(messages: list[Any], provider: str | None, text: str) -> None:
    # the lead's findings: these were counted (1643 and 3 tokens) instead of refused
    body = json.dumps({"messages": messages}).encode()
    for call in (
        lambda: cw.count_request(body, provider=provider),
        lambda: cw.fit_request(body, budget=100, provider=provider),
        lambda: cw.count_messages(messages, format=provider),
    ):
        with pytest.raises(InvalidMessageError) as info:
            call()
        assert str(info.value) == text


def test_argument_errors() -> None:
    body = b'{"messages": []}'
    with pytest.raises(TypeError):
        cw.fit_request("{}", budget=1)  # type: ignore[call-overload]
    with pytest.raises(ValueError):
        cw.fit_request(body, budget=-1)
    with pytest.raises(ValueError):
        cw.fit_request(body, budget=1, provider="gemini")  # type: ignore[call-overload]
    with pytest.raises(ValueError):
        cw.count_request(body, profile="nope")
    with pytest.raises(TypeError):
        cw.fit_request(body, budget=1, breadcrumb=1)  # type: ignore[call-overload]
    assert cw.fit_request(bytearray(body), budget=1) == body
    assert cw.fit_request(memoryview(body), budget=1) == body


def test_any_buffer_of_single_bytes_is_a_body() -> None:
    """fresh18 F4: an array of bytes or an mmap was refused ("body must be bytes", though a
    bytearray and a memoryview were taken), and a memoryview of ints was read as raw bytes."""
    import array
    import mmap

    body = b'{"messages": [{"role": "user", "content": "hi"}]}'
    assert cw.fit_request(array.array("B", body), budget=100) == body
    assert cw.count_request(array.array("b", body)) == cw.count_request(body)
    with mmap.mmap(-1, len(body)) as mm:
        mm.write(body)
        assert cw.fit_request(mm, budget=100) == body
    with pytest.raises(TypeError) as info:
        cw.fit_request(memoryview(array.array("i", [1, 2, 3])), budget=5)
    assert str(info.value) == "body must be a buffer of bytes, got a memoryview of 4-byte items"
    for bad in ("{}", None, 3, [1]):
        with pytest.raises(TypeError) as info:
            cw.count_request(bad)  # type: ignore[arg-type]
        assert str(info.value).startswith("body must be bytes or another buffer of bytes (bytearray, memoryview), got ")


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    # untouched: copied through
    body = b'{"x": ' + deep + b', "messages": [{"role": "user", "content": "hi"}]}'
    assert cw.fit_request(body, budget=100) == body
    for inner in (
        b'{"role": "user", "content": [{"type": "blob", "v": ' + deep + b"}]}",
        b'{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"a": '
        + deep
        + b"}}]}",
    ):
        # named as the dict path names it (fresh7 N7), no longer serde's "recursion limit"
        with pytest.raises(InvalidMessageError, match=r"^message 0: is nested too deeply$"):
            cw.fit_request(b'{"messages": [' + inner + b"]}", budget=100)
    # byte 159: '{"messages": [], "tools": [{"a": ' is 33 bytes, then 126 '[' (the tool's
    # object and 126 arrays: 127 levels); the next '[', at 33 + 126, would be the 128th
    with pytest.raises(
        InvalidRequestError, match=r"^invalid request body at byte 159: tools\[0\]: is nested too deeply$"
    ):
        cw.count_request(b'{"messages": [], "tools": [{"a": ' + deep + b"}]}")
    with pytest.raises(InvalidMessageError):
        cw.fit_request(b'{"messages": [' + deep + b"]}", budget=100)


# --------------------------------------------------------------------------- hypothesis

BODY = json.dumps(
    wrap(
        "openai",
        [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "q " * 40},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c", "content": "r " * 80},
            {"role": "user", "content": "é"},
        ],
        [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    )
).encode()


@given(st.binary(max_size=300))
def test_random_bytes_never_crash(data: bytes) -> None:
    for body in (data, b'{"messages": [' + data + b"]}", BODY[: len(BODY) // 2] + data):
        try:
            out = cw.fit_request(body, budget=50)
        except ContextWindowError:
            continue
        json.loads(out)


@given(st.integers(0, len(BODY)), st.binary(max_size=3))
def test_truncated_and_corrupted_bodies(cut: int, junk: bytes) -> None:
    for body in (BODY[:cut], BODY[:cut] + junk + BODY[cut:]):
        try:
            out = cw.fit_request(body, budget=60)
        except InvalidRequestError as exc:
            assert exc.offset is None or 0 <= exc.offset <= len(body)
            continue
        except InvalidMessageError:
            continue
        json.loads(out)


def _as_body(provider: str, msgs: list[cw.Message]) -> dict[str, Any] | None:
    try:
        dicts = [from_canonical(m, provider) for m in msgs]  # type: ignore[arg-type]
    except (InvalidMessageError, UnicodeEncodeError):  # arguments not JSON, or lone surrogates
        return None
    system = None
    if provider == "anthropic":
        if dicts and dicts[0]["role"] == "system":
            system, dicts = dicts[0]["content"], dicts[1:]
        if any(d["role"] not in ("user", "assistant") for d in dicts):
            return None
    return wrap(provider, dicts, [{"name": "f", "input_schema": {}}] if provider == "anthropic" else None, system)


# About half the generated conversations have no body (Anthropic tool calls whose
# arguments are not JSON, OpenAI images without a URL): now and then that trips the
# filter health check before enough bodies are made, though every body made is checked.
@settings(suppress_health_check=[HealthCheck.filter_too_much])
@given(case(), st.integers(0, 400), st.booleans())
def test_generated_conversations_agree(c: tuple[str, list[cw.Message]], budget: int, ascii_only: bool) -> None:
    provider, msgs = c
    doc = _as_body(provider, msgs)
    assume(doc is not None)
    assert doc is not None
    try:
        body = json.dumps(doc, ensure_ascii=ascii_only).encode()
        json.dumps(doc, ensure_ascii=False).encode()
    except UnicodeEncodeError:  # lone surrogates: not a UTF-8 body
        assume(False)
    check(doc, body, budget, provider, ascii_only=ascii_only)
    assert cw.count_request(body, provider=provider) == cw.count_messages(
        ([{"role": "system", "content": doc["system"]}] if "system" in doc else []) + doc["messages"],
        tools=doc.get("tools"),
        format=provider,
    )


def test_threads_share_one_body() -> None:
    from concurrent.futures import ThreadPoolExecutor

    body = BODY
    budgets = [0, 30, 60, 120, 10**6] * 8
    want = [cw.fit_request(body, budget=b) for b in budgets]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda b: cw.fit_request(body, budget=b), budgets, timeout=60))
    assert got == want


@pytest.mark.parametrize("text", ["\\ud800", "\\ud800x", "a\\udc00", "\\ud83d\\ud83d\\ude00", "\\\\ud800"])
def test_escaped_lone_surrogates_count_as_replacement_characters(text: str) -> None:
    """Found by the second fresh-install review: valid JSON that escapes a lone surrogate
    was an InvalidRequestError ("unexpected end of hex escape") on this path only."""
    body = ('{"model": "m", "messages": [{"role": "user", "content": "' + text + '"}]}').encode()
    msgs = json.loads(body)["messages"]
    assert cw.count_request(body) == cw.count_messages(msgs)
    assert cw.fit_request(body, budget=1000) is body


def test_a_trim_keeps_lone_surrogates_outside_the_messages_it_writes() -> None:
    """fresh17b #2: once a body was trimmed, every escaped lone surrogate in it was written
    ``\\ufffd``: the model, a tool's name (which the client's registry then no longer
    matches), unknown keys and messages reported ``kept``. Only the messages the engine
    writes may carry U+FFFD (README: every other key and every message kept unchanged
    keeps its exact bytes)."""
    msgs = [
        {"role": "user", "content": "old " * 100},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "x\ud800y"},
    ]
    tools = [{"name": "f\ud800", "input_schema": {"type": "object"}}]
    body = json.dumps({"model": "m \ud800", "tools": tools, "messages": msgs, "x": "\udc00"}).encode()
    out = cw.fit_request(body, budget=120)
    assert out != body
    head = b'{"model": "m \\ud800", "tools": [{"name": "f\\ud800", "input_schema": {"type": "object"}}], "messages": ['
    assert out.startswith(head)
    assert out.endswith(b'], "x": "\\udc00"}')
    # the last message took the breadcrumb: written by the engine, with U+FFFD
    assert json.loads(out)["messages"][-1]["content"][-1] == {"type": "text", "text": "x\ufffdy"}
    # a message kept unchanged: its own bytes, as trim_turns returns the caller's object
    plain = json.dumps({"messages": msgs}).encode()
    out, rep = cw.fit_request(plain, budget=5, report=True)
    assert out == b'{"messages": [{"role": "user", "content": "x\\ud800y"}]}'
    assert (rep.report.fates[2].fate, rep.report.fates[2].rule) == ("kept", "kept_turn")
    assert json.loads(out)["messages"] == cw.trim_turns(msgs, 5).messages


@pytest.mark.parametrize("value", ["no", 1, 0, None, [True]])
def test_bool_flags_refuse_non_bools_with_the_same_words(value: object) -> None:
    """fresh9 D1: ``fit_request(report="no")`` returned the report tuple (any truthy
    value did) while ``breadcrumb=`` on the same function refused a non-bool. Every bool
    flag of the public functions now raises the same TypeError naming it."""
    body = b'{"messages":[{"role":"user","content":"hi"}]}'
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]
    got = type(value).__name__
    for name, call in (
        ("report", lambda: cw.fit_request(body, budget=100, report=value)),
        ("breadcrumb", lambda: cw.fit_request(body, budget=100, breadcrumb=value)),
        ("breadcrumb", lambda: cw.trim_turns(msgs, 1, breadcrumb=value)),
        ("breadcrumb", lambda: cw.trim_turn_count(msgs, 1, breadcrumb=value)),
        ("breadcrumb", lambda: cw.fit(msgs, 1, policy=cw.FitPolicy(breadcrumb=value))),  # type: ignore[arg-type]
    ):
        with pytest.raises(TypeError) as info:
            call()
        assert str(info.value) == f"{name} must be a bool, got {got}"
    # the bools themselves still work
    assert cw.fit_request(body, budget=100, report=False) is body
    out, rep = cw.fit_request(body, budget=100, report=True)
    assert out is body and rep.report.fits


def test_a_format_key_names_the_shape_only_when_it_is_a_provider() -> None:
    """fresh16a F1: a top-level ``"format": "openai"|"anthropic"`` (the corpus files'
    convention, as the CLI reads it) names the shape when ``provider`` is not given; any
    other value (Ollama's ``"json"``, a JSON schema, null) is an unknown key, kept."""
    plain = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    for value, want in (("anthropic", "anthropic"), ("openai", "openai"), ("json", "openai"), (None, "openai")):
        body = json.dumps({"format": value, "messages": plain}).encode()
        assert cw.fit_request(body, budget=100, report=True)[1].provider == want
    # over the body's marks: a top-level system is an unknown key of an OpenAI body
    body = json.dumps({"format": "openai", "system": "s " * 100, "messages": plain}).encode()
    # "hi": 1 token + 4 per message
    assert cw.count_request(body) == cw.count_request(body, provider="openai") == 5
    # provider= still wins
    assert cw.fit_request(body, budget=100, provider="anthropic", report=True)[1].provider == "anthropic"
    # a body read in the shape its key names gets no "(read as an Anthropic body for ...)"
    # hint, as the CLI gives none: the file said so
    tool = {"role": "tool", "tool_call_id": "c", "content": "r"}
    body = json.dumps({"format": "anthropic", "messages": [*plain, tool]}).encode()
    with pytest.raises(InvalidMessageError) as err:
        cw.count_request(body)
    assert str(err.value) == 'message 1, field role: unknown role "tool"'


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_body_alone_is_the_body_with_the_report_at_every_budget(provider: str) -> None:
    """``fit_request`` without ``report`` estimates only the turns a trim can keep (old
    turns past the first that cannot fit are not estimated); the body is the same at every
    budget from 0 past the total: tiny old turns (worth less than the breadcrumb), a
    pinned-free tool turn and a newest turn over any small budget."""
    long = "word " * 300
    for tiny in range(1, 5):
        msgs: list[dict[str, Any]] = [{"role": "user", "content": f"q{i}"} for i in range(tiny)]
        msgs += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": long}]
        doc: dict[str, Any] = (
            {"system": "s", "messages": msgs}
            if provider == "anthropic"
            else {"messages": [{"role": "system", "content": "s"}, *msgs]}
        )
        body = json.dumps(doc).encode()
        total = cw.count_request(body, provider=provider)
        for budget in range(total + 2):
            out, _ = cw.fit_request(body, budget=budget, provider=provider, report=True)
            assert cw.fit_request(body, budget=budget, provider=provider) == out, budget


def test_a_pinned_message_fate_counts_the_lifted_system_first() -> None:
    """fresh20b #8: in an Anthropic body with a top-level system, ``pinned=[i]`` counts the
    ``messages`` array and the report counts the system as message 0, so the pinned
    message's fate is ``fates[i + 1]`` (documented next to ``pinned``)."""
    msgs: list[dict[str, Any]] = []
    for t in range(5):
        msgs += [
            {"role": "user", "content": f"question {t} " + "word " * 80},
            {"role": "assistant", "content": f"answer {t} " + "word " * 80},
        ]
    msgs.append({"role": "user", "content": "final"})
    raw = json.dumps({"model": "claude", "system": "You are helpful.", "messages": msgs}).encode()
    body, rep = cw.fit_request(raw, budget=300, pinned=[2], report=True)
    fates = rep.report.fates
    assert len(fates) == len(msgs) + 1
    assert (fates[0].fate, fates[3].fate) == ("kept", "kept")  # the system, messages[2]
    assert fates[2].fate == "dropped"  # messages[1], "answer 0"
    kept = [json.dumps(m["content"]) for m in json.loads(body)["messages"]]
    # the breadcrumb goes into the pinned message, now the first one
    assert fates[3].rule == "breadcrumb_added" and "question 1 " in kept[0]
    assert not any("answer 0 " in c for c in kept)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_body_alone_is_the_body_with_the_report_when_old_turns_come_back(provider: str) -> None:
    """Old turns dropped before the newest turn lost a tool unit come back when they fit
    after it (fresh41 #1). So the turns the body alone leaves unestimated are the ones a
    trim cannot keep even with the newest turn at nothing: 20 old turns of a few tokens,
    a newest turn with a 2,000-character tool result; at every budget the body is the
    one with the report."""
    msgs: list[dict[str, Any]] = []
    for i in range(20):
        msgs += [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]
    msgs.append({"role": "user", "content": "now run both"})
    for cid, size in (("c", 2000), ("d", 40)):
        if provider == "anthropic":
            msgs += [
                {"role": "assistant", "content": [{"type": "tool_use", "id": cid, "name": "f", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": cid, "content": "r" * size}]},
            ]
        else:
            fn = {"name": "f", "arguments": "{}"}
            msgs += [
                {"role": "assistant", "content": None, "tool_calls": [{"id": cid, "type": "function", "function": fn}]},
                {"role": "tool", "tool_call_id": cid, "content": "r" * size},
            ]
    msgs.append({"role": "assistant", "content": "done"})
    body = json.dumps({"model": "m", "messages": msgs}).encode()
    total = cw.count_request(body, provider=provider)
    came_back = 0
    for budget in range(total + 2):
        out, rep = cw.fit_request(body, budget=budget, provider=provider, report=True)
        assert cw.fit_request(body, budget=budget, provider=provider) == out, budget
        unit_gone = any(f.rule == "oldest_tool_unit" for f in rep.report.fates)
        came_back += unit_gone and rep.report.dropped_turns < 20
    assert came_back > 50
