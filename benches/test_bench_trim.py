"""trim_turns on a 1,000-message agent conversation built from corpus turns (tool calls
included; see ``conftest.agent_conversation``), budget 32,000 tokens: contextwindow vs
the pure-Python reference (dicts to canonical messages, then the same rules), LangChain's
``trim_messages(strategy="last", start_on="human")`` with its approximate counter, and
LiteLLM's ``trim_messages`` (tiktoken counts; it keeps no tool-pair or turn safety).
contextwindow runs with the default profile and with ``fim`` (an approximate counter of
the same kind as LangChain's, so that row is the cost of the turn and tool-pair rules)."""

from __future__ import annotations

from typing import Any

import pytest

import contextwindow as cw
from contextwindow import _reference as ref
from contextwindow.adapters import to_canonical

BUDGET = 32_000
IMPLS = [
    ("contextwindow", "conservative"),
    ("contextwindow", "fim"),
    ("reference", None),
    ("langchain", None),
    ("litellm", None),
]


@pytest.mark.parametrize(("impl", "profile"), IMPLS, ids=[f"{i}-{p}" if p else i for i, p in IMPLS])
def test_trim_agent(impl: str, profile: str | None, agent: list[dict[str, Any]], measure: Any, peer: Any) -> None:
    slow = False
    if impl == "contextwindow":

        def fn() -> int:
            return len(cw.trim_turns(agent, BUDGET, profile=profile).messages)

    elif impl == "reference":
        slow = True

        def fn() -> int:
            return len(ref.trim_turns(to_canonical(agent, "openai"), BUDGET, "conservative", True, "openai")[0])

    elif impl == "langchain":
        lc = peer.module("langchain")

        def fn() -> int:
            kept = lc.trim_messages(
                agent,
                max_tokens=BUDGET,
                token_counter=lc.count_tokens_approximately,
                strategy="last",
                start_on="human",
                include_system=True,
            )
            return len(kept)

    else:
        litellm = peer.module("litellm")
        slow = True

        def fn() -> int:
            return len(litellm.utils.trim_messages(agent, model="gpt-4", max_tokens=BUDGET))

    group = f"trim_turns: {len(agent):,}-message agent conversation, budget {BUDGET:,}"
    kept = measure(fn, group=group, impl=impl, profile=profile, messages=len(agent), trim=True, slow=slow)
    assert 0 < kept < len(agent)


@pytest.mark.parametrize("fn_name", ["fit", "guard.check"])
def test_fit_and_guard_agent(fn_name: str, agent: list[dict[str, Any]], measure: Any) -> None:
    """The priority fitter and a guard check (pure Python over the Rust estimator) on the
    same conversation and budget: linear in the number of messages (a scan per eviction
    once made ``fit`` quadratic: 15 s at 20,000 messages)."""
    if fn_name == "fit":

        def fn() -> int:
            return len(cw.fit(agent, BUDGET).messages)

    else:
        guard = cw.ContextGuard(cw.resolve_budget(BUDGET * 2, BUDGET, env={}))

        def fn() -> int:
            return len(guard.check(agent).messages)

    group = f"fit / ContextGuard.check: {len(agent):,}-message agent conversation, budget {BUDGET:,}"
    kept = measure(fn, group=group, impl=fn_name, messages=len(agent), trim=True)
    assert 0 < kept < len(agent)


def _parallel_batch(n: int) -> list[dict[str, Any]]:
    """One assistant message with ``n`` parallel calls, their ``n`` tool messages, a reply
    and the next request (OpenAI shape)."""
    call = [{"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": "{}"}} for i in range(n)]
    return [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": call},
        *({"role": "tool", "tool_call_id": f"c{i}", "content": "out"} for i in range(n)),
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "next"},
    ]


def _pinned_chat(n: int) -> list[dict[str, Any]]:
    """``n`` plain chat messages (every 4th one pinned by the caller)."""
    return [
        m
        for i in range(n // 2)
        for m in ({"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"})
    ]


@pytest.mark.parametrize("n", [2_000, 16_000])
@pytest.mark.parametrize("shape", ["parallel calls", "anthropic, every 4th pinned"])
def test_prune_middle_scales(shape: str, n: int, measure: Any) -> None:
    """``prune_middle`` on one batch of ``n`` parallel calls, and on an Anthropic chat of
    ``n`` messages every 4th of them pinned: the two sizes' rows show it linear (fresh30
    #1: 0.27 and 7.65 s, 1.0 and 8.8 s, with a unit walked once per member, one role gap
    mended per pass and a list membership test in the Python pair repair)."""
    if shape == "parallel calls":
        msgs, kwargs = _parallel_batch(n), {}
    else:
        msgs, kwargs = _pinned_chat(n), {"format": "anthropic", "pinned": list(range(0, n - 1, 4))}

    def fn() -> int:
        return len(cw.prune_middle(msgs, 10, **kwargs).messages)

    group = f"prune_middle: {shape}, {n:,} messages"
    kept = measure(fn, group=group, impl="contextwindow", messages=len(msgs), trim=True)
    # the batch is one tool unit, kept whole with the recent messages in it: nothing goes
    assert kept == len(msgs) if shape == "parallel calls" else 0 < kept < len(msgs)


@pytest.mark.parametrize("parts", [500, 2_000])
def test_fit_with_a_tokenizer_on_a_result_in_parts(parts: int, measure: Any) -> None:
    """``fit`` with the caller's costs (``tokenizer=``, the pure-Python engine) on a tool
    result in ``parts`` text parts: the two sizes' rows show it linear (fresh31 #2: each
    part's cut was weighed by pricing the whole message, 0.64 s at 500 parts and 9.4 s
    at 2,000)."""
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": f"p{i} " * 30} for i in range(parts)],
                }
            ],
        },
    ]

    def fn() -> int:
        return cw.fit(msgs, 300, format="anthropic", tokenizer=lambda s: len(s) // 4).report.tokens_after

    group = f"fit with tokenizer=: a tool result in {parts:,} text parts, budget 300"
    total = cw.Estimator(tokenizer=lambda s: len(s) // 4).count_messages(msgs)
    # every part goes down to its marker and the result stays over 300 (README Known
    # limits: the character cap on results of many small parts), well under the input
    assert measure(fn, group=group, impl="contextwindow", messages=len(msgs), trim=True) < total // 2


def _agent_turn(n: int) -> list[dict[str, Any]]:
    """One Anthropic agent turn of ``n`` tool units (every 10th result long), an answer
    and the next request."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "do the task"}]
    for i in range(n):
        msgs.append(
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "bash", "input": {}}]}
        )
        text = "out " * (200 if i % 10 == 0 else 5)
        msgs.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": text}]})
    return [*msgs, {"role": "assistant", "content": "done"}, {"role": "user", "content": "next"}]


@pytest.mark.parametrize("n", [2_000, 10_000])
def test_fit_puts_back_units_in_a_long_turn(n: int, measure: Any) -> None:
    """``fit`` on one Anthropic agent turn of ``n`` tool units at budget 5,000: most units
    go, then the ones a later eviction made needless come back; each unit's kept
    neighbours were found by a scan over the evicted run (10,000 units: 0.43 s without
    the put-back, 5.8 s with it; now 0.43 s): the two sizes' rows show it linear."""
    msgs = _agent_turn(n)

    def fn() -> int:
        return len(cw.fit(msgs, 5_000, format="anthropic").messages)

    group = f"fit: one Anthropic agent turn, {n:,} tool units"
    kept = measure(fn, group=group, impl="contextwindow", messages=len(msgs), trim=True)
    assert 0 < kept < len(msgs)
