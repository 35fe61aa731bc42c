"""Generated agent conversations of any size, for timing ``fit`` and ``ContextGuard.check``
(and for checking that a speed-up changes no output).

    python tools/agent_inputs.py time [N ...]        # least CPU time of fit / guard.check / trim_turns
    python tools/agent_inputs.py save DIR            # outputs of a set of inputs and policies
    python tools/agent_inputs.py compare DIR         # the same outputs again, compared exactly

``benches/conftest.agent_conversation`` builds its 1,000-message conversation from the
corpus; this one needs no corpus and scales to 200,000 messages: a system prompt, then
turns of a user request, assistant text, tool calls (some parallel) and their results,
text-action steps (a command and its ``[Tool results]`` output), chatter, a few broken
pairs (an orphan result, an unanswered call) that repair must fix, in OpenAI or
Anthropic shape; deterministic for a seed.
"""

from __future__ import annotations

import pickle
import random
import sys
import time
from pathlib import Path
from typing import Any

import contextwindow as cw

WORDS = (
    "the agent reads file config value error test build module function returns list "
    "path index token budget request result output line change commit branch merge"
).split()


def _text(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def agent_messages(
    n: int, shape: str = "openai", seed: int = 0, broken: bool = True, tail: str = "request"
) -> list[dict[str, Any]]:
    """An ``n``-message agent conversation (about; the last message is a user request).

    Args:
        n: the number of messages to aim for.
        shape: ``"openai"`` or ``"anthropic"``.
        seed: the random seed (the same seed gives the same conversation).
        broken: include a few broken tool pairs (orphan results, unanswered calls).
        tail: how it ends: ``"request"`` (a short user request), ``"long"`` (a long
            one), ``"open"`` (a request, then a tool call with a long result: an open
            tool call) or ``"step"`` (a request, then a command and its long
            ``[Tool results]`` output).

    Returns:
        The messages as dicts of ``shape``.
    """
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    if shape == "openai":
        out.append({"role": "system", "content": "You are a coding agent. " + _text(rng, 20, 60)})
    call = 0
    while len(out) < n - 1:
        out.append({"role": "user", "content": _text(rng, 5, 80)})
        for _ in range(rng.randint(0, 4)):
            kind = rng.random()
            if kind < 0.6:  # a tool unit, sometimes parallel
                ids = [f"call_{call + k}" for k in range(rng.choice((1, 1, 1, 2, 3)))]
                call += len(ids)
                lost = broken and rng.random() < 0.01
                orphan = broken and rng.random() < 0.01
                if shape == "openai":
                    out.append(
                        {
                            "role": "assistant",
                            "content": _text(rng, 0, 10) or None,
                            "tool_calls": [
                                {
                                    "id": i,
                                    "type": "function",
                                    "function": {"name": "read_file", "arguments": '{"path": "a/b.py"}'},
                                }
                                for i in ids
                            ],
                        }
                    )
                    for i in ids[: -1 if lost else None]:
                        out.append({"role": "tool", "tool_call_id": i, "content": _text(rng, 5, 400)})
                    if orphan:
                        out.append({"role": "tool", "tool_call_id": f"gone_{call}", "content": "stale"})
                else:
                    blocks: list[dict[str, Any]] = []
                    t = _text(rng, 0, 10)
                    if t:
                        blocks.append({"type": "text", "text": t})
                    blocks += [
                        {"type": "tool_use", "id": i, "name": "read_file", "input": {"path": "a.py"}} for i in ids
                    ]
                    out.append({"role": "assistant", "content": blocks})
                    res = [
                        {"type": "tool_result", "tool_use_id": i, "content": _text(rng, 5, 400)}
                        for i in ids[: -1 if lost else None]
                    ]
                    if orphan:
                        res.append({"type": "tool_result", "tool_use_id": f"gone_{call}", "content": "stale"})
                    if not res:
                        res = [{"type": "text", "text": "go on"}]
                    out.append({"role": "user", "content": res})
            elif kind < 0.75:  # a text-action step
                out.append({"role": "assistant", "content": "run: " + _text(rng, 2, 8)})
                out.append({"role": "user", "content": "[Tool results]\n" + _text(rng, 5, 300)})
            elif kind < 0.9 and shape == "openai":  # chatter
                out.append({"role": "assistant", "content": rng.choice(["ok", "Let me check.", "Done."])})
        if out[-1]["role"] != "assistant":
            out.append({"role": "assistant", "content": _text(rng, 3, 60)})
    out.append({"role": "user", "content": "now " + _text(rng, 3, 30 if tail == "request" else 3000)})
    if tail == "open":
        if shape == "openai":
            out.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "last", "type": "function", "function": {"name": "grep", "arguments": "{}"}}],
                }
            )
            out.append({"role": "tool", "tool_call_id": "last", "content": _text(rng, 3000, 4000)})
        else:
            out.append(
                {"role": "assistant", "content": [{"type": "tool_use", "id": "last", "name": "grep", "input": {}}]}
            )
            out.append(
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "last", "content": _text(rng, 3000, 4000)}],
                }
            )
    elif tail == "step":
        out.append({"role": "assistant", "content": "run: make test"})
        out.append({"role": "user", "content": "[Tool results]\n" + _text(rng, 3000, 4000)})
    return out


def plain_chat(n: int) -> list[dict[str, Any]]:
    """fresh19b #5's shape: a system message and user/assistant pairs, ``n`` messages."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    i = 0
    while len(out) < n - 1:
        out.append({"role": "user", "content": f"question {i} " + "word " * 20})
        out.append({"role": "assistant", "content": f"answer {i} " + "word " * 12})
        i += 1
    out.append({"role": "user", "content": "last question"})
    return out


def _policies(n: int) -> list[tuple[str, cw.FitPolicy]]:
    return [
        ("default", cw.FitPolicy()),
        ("pinned", cw.FitPolicy(pinned=(1, 2, n // 3, n // 2), recent_turns=3)),
        ("prio", cw.FitPolicy(priorities={1: 0, 3: 1, 5: 3, n // 2: 2}, eviction_order=(3, 2))),
        ("nocrumb", cw.FitPolicy(breadcrumb=False, low_water=1.0, chatter_tokens=80)),
        ("share", cw.FitPolicy(pinned=tuple(range(1, n, 7)), pinned_share=0.2)),
    ]


def _cases() -> list[tuple[str, list[dict[str, Any]], str]]:
    cases = []
    for n in (12, 40, 300, 3000):
        for shape in ("openai", "anthropic"):
            for seed in (0, 1):
                cases.append((f"{shape}-{n}-{seed}", agent_messages(n, shape, seed), shape))
        for shape in ("openai", "anthropic"):
            for tail in ("long", "open", "step"):
                cases.append((f"{shape}-{n}-{tail}", agent_messages(n, shape, 2, tail=tail), shape))
    cases.append(("plain-500", plain_chat(500), "openai"))
    return cases


def _outputs() -> dict[str, Any]:
    """Every output of the case set: fit's messages and report, the guard's result and
    events, recover_from_overflow's and priorities'."""
    out: dict[str, Any] = {}
    for name, msgs, _fmt in _cases():
        total = cw.count_messages(msgs)
        for frac in (2.0, 0.5, 0.1, 0.02, 0.0):
            budget = int(total * frac)
            for pname, pol in _policies(len(msgs)):
                key = f"{name}/{frac}/{pname}"
                try:
                    r = cw.fit(msgs, budget, pol)
                    out[key + "/fit"] = (r.messages, r.report)
                except Exception as exc:
                    out[key + "/fit"] = repr(exc)
            if frac == 0.0:
                continue
            window = max(budget + 100, 200)
            guard = cw.ContextGuard(cw.resolve_budget(window, window - max(budget, 1), env={}))
            for hint in ("general", "planner_input", "step_dependency"):
                try:
                    g = guard.check(msgs, hint)
                    out[f"{name}/{frac}/guard/{hint}"] = g
                except Exception as exc:
                    out[f"{name}/{frac}/guard/{hint}"] = repr(exc) + repr(getattr(exc, "result", None))
            rec = cw.recover_from_overflow(msgs, budget=max(budget, 1))
            out[f"{name}/{frac}/recover"] = rec
        out[f"{name}/priorities"] = cw.priorities(msgs)
    return out


def _best(fn: Any, rounds: int = 5) -> float:
    """The least CPU time of ``rounds`` calls (CPU time: other jobs on the machine move
    wall-clock times by 2-3x)."""
    best = float("inf")
    for _ in range(rounds):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def main(argv: list[str]) -> None:
    """See the module docs."""
    cmd = argv[0] if argv else "time"
    if cmd == "save":
        Path(argv[1]).mkdir(parents=True, exist_ok=True)
        (Path(argv[1]) / "outputs.pkl").write_bytes(pickle.dumps(_outputs()))
    elif cmd == "compare":
        before = pickle.loads((Path(argv[1]) / "outputs.pkl").read_bytes())
        now = _outputs()
        bad = [k for k in before if before[k] != now.get(k)]
        print(f"{len(before)} outputs, {len(bad)} differ", *bad[:20], sep="\n")
        sys.exit(1 if bad or set(now) != set(before) else 0)
    else:
        sizes = [int(a) for a in argv[1:]] or [1000, 20000, 200000]
        for n in sizes:
            msgs = agent_messages(n)
            budget = min(32_000, cw.count_messages(msgs) // 4)  # never one that fits
            guard = cw.ContextGuard(cw.resolve_budget(budget * 2, budget, env={}))
            rounds = 5 if n <= 20000 else 3
            tf = _best(lambda m=msgs, b=budget: cw.fit(m, b), rounds)
            tg = _best(lambda m=msgs, g=guard: g.check(m), rounds)
            tt = _best(lambda m=msgs, b=budget: cw.trim_turns(m, b), rounds)
            print(
                f"{n:>7} messages, budget {budget}, CPU time: fit {tf:.3f} s  guard.check {tg:.3f} s  "
                f"trim_turns {tt:.3f} s",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1:])
