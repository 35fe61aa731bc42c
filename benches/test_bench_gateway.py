"""The raw JSON gateway path end to end, through the Python module: ``count_request`` and
``fit_request`` on a 1 MB OpenAI request body (bytes in, bytes out).

The body is built as the core crate's criterion bench builds it
(``rust/contextwindow-core/benches/gateway.rs``): the non-system messages of the OpenAI
conversations of ``../shared/corpus``, in file order, after one system prompt, repeated
until the body holds 1 MB, with ``model``, ``temperature`` and the first corpus tool list.
``fit_request`` runs at half the body's tokens, so that it drops old turns and writes a
new body. No peer library has a request-body path, so the rows compare profiles only.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import contextwindow as cw

from shared_data import corpus_files, load

MEGABYTE = 1_000_000


@pytest.fixture(scope="module")
def body() -> bytes:
    pool: list[dict[str, Any]] = []
    tools: Any = None
    for path in corpus_files():
        doc = load(path)
        if doc.get("format") != "openai":
            continue
        if tools is None:
            tools = doc.get("tools")
        pool += [m for m in doc["messages"] if m.get("role") != "system"]
    if not pool:
        pytest.skip("../shared/corpus not found beside the repo")
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful agent."}]
    while True:
        messages += pool
        doc = {"model": "gpt-4o", "temperature": 0.2, "messages": messages, "tools": tools}
        raw = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
        if len(raw) >= MEGABYTE:
            return raw


@pytest.mark.parametrize("profile", ["conservative", "bytes4"])
@pytest.mark.parametrize("call", ["count_request", "fit_request"])
def test_gateway(call: str, profile: str, body: bytes, measure: Any) -> None:
    total = cw.count_request(body, profile=profile)
    if call == "count_request":

        def fn() -> Any:
            return cw.count_request(body, profile=profile)

    else:

        def fn() -> Any:
            return cw.fit_request(body, budget=total // 2, profile=profile)

    group = f"{call}: 1 MB OpenAI request body" + (", budget half its tokens" if call == "fit_request" else "")
    out = measure(fn, group=group, impl="contextwindow", profile=profile, bytes=len(body))
    if call == "count_request":
        assert out == total
    else:
        # old turns dropped: a shorter body that still parses, within the budget
        assert len(out) < len(body) and cw.count_request(out, profile=profile) <= total // 2


@pytest.fixture(scope="module")
def one_result_body() -> bytes:
    """A 1 MB OpenAI body that fits only by cutting one tool result: one request, one
    call and its result, the result the tool results of ``../shared/corpus`` joined and
    repeated to 1 MB (an agent's ``cat`` of a large log)."""
    texts: list[str] = []
    for path in corpus_files():
        doc = load(path)
        if doc.get("format") == "openai":
            texts += [
                m["content"] for m in doc["messages"] if m.get("role") == "tool" and isinstance(m.get("content"), str)
            ]
    if not texts:
        pytest.skip("../shared/corpus not found beside the repo")
    output = ""
    while len(output.encode()) < MEGABYTE:
        output += "\n".join(texts) + "\n"
    call = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "cat log"}'}}
    messages = [
        {"role": "user", "content": "Run the build and tell me what failed."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": output},
    ]
    return json.dumps({"model": "gpt-4o", "messages": messages}, ensure_ascii=False).encode()


@pytest.mark.parametrize("share", ["2,000 tokens", "half its tokens"])
def test_gateway_cut_one_result(share: str, one_result_body: bytes, measure: Any) -> None:
    # Cutting one text searches for the cut that fits: each trial cut is estimated again
    # (README Benchmarks, "Cutting one large text"), so this runs well below count_request.
    total = cw.count_request(one_result_body)
    budget = 2_000 if share == "2,000 tokens" else total // 2

    def fn() -> Any:
        return cw.fit_request(one_result_body, budget=budget)

    group = f"fit_request: 1 MB OpenAI body, one tool result cut to fit {share}"
    out = measure(fn, group=group, impl="contextwindow", profile="conservative", bytes=len(one_result_body))
    assert len(out) < len(one_result_body) and cw.count_request(out) <= budget
