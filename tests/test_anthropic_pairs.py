"""Anthropic tool-pair repairs that must keep roles alternating and turns intact.

Found by the fresh7 tester (``/work/fresh7-findings.md``):

* N1: an orphan ``tool_result`` that was a user message's only block emptied the
  message, and dropping it put two assistant messages side by side (``not_alternating``)
  or an assistant message first (``first_not_user``). The emptied message now stays,
  holding ``RESULTS_REMOVED`` (DESIGN.md section 4: roles keep alternating).
* N2: a call the user interrupted (assistant ``tool_use``, then a plain user message)
  got its stub result inside the user's new message, which then no longer started a
  turn: the old turn could not be dropped. A user message whose only tool results are
  stubs, next to what the user wrote, starts a turn; when the call's turn goes, the
  stub goes with it, as the OpenAI shape drops the stub's tool message with its unit.

Expected outputs are built by hand; token counts are those of the hand-built output
(``count_messages``, additive over messages), and the interrupted call is compared with
the same conversation where the call never happened (the old turn goes whole either way).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import contextwindow as cw
from contextwindow import _engine
from contextwindow import _reference as ref
from contextwindow._engine import _OUTCOME, encode_messages
from contextwindow._engine import native as rs
from contextwindow.cli import main
from contextwindow.compact import prune_middle
from contextwindow.messages import MISSING_RESULT, RESULTS_REMOVED, Message, TextPart, ToolCall, ToolResult

from shared_data import violations
from strategies import anthropic_agent

BC = cw.BREADCRUMB
BIG = "lorem ipsum dolor sit amet " * 400


def u(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def a(content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def orphan(cid: str = "zz") -> dict[str, Any]:
    return u([{"type": "tool_result", "tool_use_id": cid, "content": "r"}])


def placeholder() -> dict[str, Any]:
    return u([{"type": "text", "text": RESULTS_REMOVED}])


def calling(cid: str = "t1") -> dict[str, Any]:
    return a([{"type": "text", "text": "calling"}, {"type": "tool_use", "id": cid, "name": "f", "input": {}}])


def body(msgs: list[dict[str, Any]], **extra: Any) -> bytes:
    return json.dumps({"model": "m", "max_tokens": 5, **extra, "messages": msgs}).encode()


def engine_agrees(msgs: list[dict[str, Any]], budget: int) -> None:
    """The Rust engine and ``_reference`` give the same ops and report."""
    payload = _engine.prepare(msgs, "anthropic").payload
    cm = msgspec.json.decode(payload, type=list[Message])
    o = _OUTCOME.decode(rs.trim_turns(payload, budget, "conservative", True, "anthropic"))
    assert ([(op.src, op.msg) for op in o.messages], o.report) == ref.trim_turns(
        cm, budget, "conservative", True, "anthropic"
    )


# --------------------------------------------------------------------------- N1


N1 = [u("hi"), a("a"), orphan(), a("b"), u("q")]
N1_FIXED = [u("hi"), a("a"), placeholder(), a("b"), u("q")]
N1_FIRST = [orphan(), a("a"), u("q")]
N1_FIRST_FIXED = [placeholder(), a("a"), u("q")]


@pytest.mark.parametrize(
    ("msgs", "fixed", "k"), [(N1, N1_FIXED, 2), (N1_FIRST, N1_FIRST_FIXED, 0)], ids=["middle", "first"]
)
def test_orphan_only_carrier_keeps_alternation(msgs: list[dict[str, Any]], fixed: list[dict[str, Any]], k: int) -> None:
    """``k``: the orphan carrier's index."""
    assert [v.code for v in cw.validate(msgs, "anthropic")] == ["orphan_result"]
    for r in (
        cw.repair_tool_pairs(msgs, format="anthropic"),
        cw.trim_turns(msgs, budget=1000, format="anthropic"),
        cw.fit(msgs, 1000, format="anthropic"),
    ):
        assert r.messages == fixed
        assert cw.validate(r.messages, "anthropic") == []
        # every other message is the caller's own object
        assert all(r.messages[i] is m for i, m in enumerate(msgs) if i != k)
        assert [(c.kind, c.index, c.call_id) for c in r.report.repairs] == [
            ("orphan_result_dropped", k, "zz"),
            ("placeholder_inserted", k, None),
        ]
        # the message stays (repaired), nothing is dropped
        assert (r.report.fates[k].fate, r.report.fates[k].rule) == ("repaired", "orphan_result")
        assert r.report.dropped_messages == 0 and r.report.reason == "tool_pairs"
        assert r.report.tokens_after == cw.count_messages(fixed, format="anthropic")
    g = cw.ContextGuard(context_window=100_000, max_output_tokens=1000).check(msgs, format="anthropic")
    assert g.messages == fixed
    out, rep = cw.fit_request(body(msgs, system="s"), budget=1000, report=True)
    assert json.loads(out)["messages"] == fixed and json.loads(out)["system"] == "s"
    # the gateway's report holds the system as entry 0
    assert [(c.kind, c.index) for c in rep.report.repairs] == [
        ("orphan_result_dropped", k + 1),
        ("placeholder_inserted", k + 1),
    ]
    engine_agrees(msgs, 1000)


def test_placeholder_is_not_a_turn_and_repair_is_idempotent() -> None:
    """The placeholder starts with ``[Tool results]``: it never starts a turn or becomes
    the current request, and repairing the repaired list changes nothing."""
    fixed = cw.repair_tool_pairs(N1, format="anthropic").messages
    seg = cw.segment_turns(fixed, format="anthropic")
    assert seg.turns == [(0, 4), (4, 5)] and seg.current_request == 4
    again = cw.repair_tool_pairs(fixed, format="anthropic")
    assert again.report.reason is None and all(x is y for x, y in zip(again.messages, fixed, strict=True))
    # a trailing orphan carrier: the conversation still ends with a user message (an
    # assistant message last would be read as a prefill of the answer)
    tail = cw.repair_tool_pairs([u("hi"), a("a"), orphan()], format="anthropic").messages
    assert tail[-1] == placeholder() and cw.validate(tail, "anthropic") == []


def test_orphan_next_to_text_keeps_the_message_as_repaired() -> None:
    """A carrier holding text as well loses only the orphan: its fate is ``repaired``
    (it was reported ``dropped`` although it stayed), and no placeholder is needed."""
    msgs = [u([{"type": "tool_result", "tool_use_id": "zz", "content": "r"}, {"type": "text", "text": "and"}]), a("b")]
    r = cw.repair_tool_pairs(msgs, format="anthropic")
    assert r.messages == [u([{"type": "text", "text": "and"}]), a("b")]
    assert (r.report.fates[0].fate, r.report.fates[0].rule) == ("repaired", "orphan_result")
    assert r.report.dropped_messages == 0
    # OpenAI: an orphan tool message goes whole
    o = cw.repair_tool_pairs([u("x"), {"role": "tool", "tool_call_id": "zz", "content": "r"}])
    assert (o.report.fates[1].fate, o.report.fates[1].rule) == ("dropped", "orphan_result")


def test_moved_results_leave_a_placeholder() -> None:
    """A result separated from its call moves to the user message after the call; the
    message it left would be empty and two assistant messages would meet."""
    stray = {"type": "tool_result", "tool_use_id": "t1", "content": "r"}
    msgs = [u("go"), calling(), u("hmm"), a("ok"), u([stray]), a("done"), u("next")]
    r = cw.repair_tool_pairs(msgs, format="anthropic")
    assert r.messages == [u("go"), calling(), u([stray, {"type": "text", "text": "hmm"}]), a("ok"), placeholder(),
                          a("done"), u("next")]  # fmt: skip
    assert cw.validate(r.messages, "anthropic") == []
    assert [(c.kind, c.index) for c in r.report.repairs] == [("result_moved", 4), ("placeholder_inserted", 4)]
    assert (r.report.fates[4].fate, r.report.fates[4].rule) == ("repaired", "result_moved")


def test_emptied_assistant_message_stays_between_user_messages() -> None:
    """An assistant message holding only a misplaced tool_result loses it; dropping the
    message would make the user messages around it meet, so it stays as a placeholder.
    At the end of the list, or with no user message on one side, it goes."""
    stray = a([{"type": "tool_result", "tool_use_id": "zz", "content": "r"}])
    r = cw.repair_tool_pairs([u("hi"), stray, u("q")], format="anthropic")
    assert r.messages == [u("hi"), a([{"type": "text", "text": RESULTS_REMOVED}]), u("q")]
    assert [(c.kind, c.index) for c in r.report.repairs] == [("orphan_result_dropped", 1), ("placeholder_inserted", 1)]
    assert cw.validate(r.messages, "anthropic") == []
    tail = cw.repair_tool_pairs([u("hi"), stray], format="anthropic")
    assert tail.messages == [u("hi")] and tail.report.fates[1].fate == "dropped"
    # an emptied user message and an emptied assistant message side by side: dropping
    # both leaves "hi" and "b" alternating
    both = cw.repair_tool_pairs([u("hi"), a("a"), orphan(), stray, u("q")], format="anthropic")
    assert both.messages == [u("hi"), a("a"), u("q")]


def test_cli_repair_then_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "orphan.json"
    src.write_text(json.dumps(N1))
    fixed = tmp_path / "fixed.json"
    assert main(["repair", str(src), "-o", str(fixed)]) == 0
    assert json.loads(fixed.read_text()) == N1_FIXED
    capsys.readouterr()
    assert main(["validate", str(fixed), "--provider", "anthropic"]) == 0


# --------------------------------------------------------------------------- N2


ANTH = [u("first task: " + BIG), calling(), u("never mind, new question")]
# the same conversation where the call never happened
PLAIN = [u("first task: " + BIG), a([{"type": "text", "text": "calling"}]), u("never mind, new question")]
OPENAI = [
    u("first task: " + BIG),
    {"role": "assistant", "content": "calling", "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    u("never mind, new question"),
]  # fmt: skip
WANT = [u([{"type": "text", "text": BC}, {"type": "text", "text": "never mind, new question"}])]


def test_interrupted_call_segments_like_openai() -> None:
    # the input: three turns? two: the old task (with its call) and the new question
    assert cw.segment_turns(ANTH, format="anthropic").turns == [(0, 2), (2, 3)]
    fixed = cw.repair_tool_pairs(ANTH, format="anthropic").messages
    stub = {"type": "tool_result", "tool_use_id": "t1", "content": MISSING_RESULT}
    assert fixed[2] == u([stub, {"type": "text", "text": "never mind, new question"}])
    # the repaired message still starts a turn: a stub next to what the user wrote
    seg = cw.segment_turns(fixed, format="anthropic")
    assert seg.turns == [(0, 2), (2, 3)] and seg.current_request == 2 and seg.units == [[1]]
    # a carrier holding real results next to text stays a carrier (DESIGN.md section 4)
    real = [
        u("go"),
        calling(),
        u([{"type": "tool_result", "tool_use_id": "t1", "content": "r"}, {"type": "text", "text": "x"}]),
    ]
    assert cw.segment_turns(real, format="anthropic").turns == [(0, 3)]
    # stubs alone are a carrier too
    only = [u("go"), calling(), u([stub]), a("k"), u("next")]
    assert cw.segment_turns(only, format="anthropic").turns == [(0, 4), (4, 5)]


def test_interrupted_call_trim_turns() -> None:
    r = cw.trim_turns(ANTH, budget=500, format="anthropic")
    assert r.messages == WANT
    assert r.report.fits and r.report.tokens_after == cw.count_messages(WANT, format="anthropic")
    assert [(f.fate, f.rule) for f in r.report.fates] == [
        ("dropped", "oldest_turn"),
        ("dropped", "oldest_turn"),
        ("kept", "breadcrumb_added"),
    ]
    assert (r.report.turns_before, r.report.kept_turns, r.report.dropped_turns) == (2, 1, 1)
    # the same as when the call never happened, and as the OpenAI shape (where the
    # breadcrumb is a message of its own)
    assert r.messages == cw.trim_turns(PLAIN, budget=500, format="anthropic").messages
    o = cw.trim_turns(OPENAI, budget=500)
    assert [m["content"] for m in o.messages] == [BC, "never mind, new question"]
    engine_agrees(ANTH, 500)


def test_interrupted_call_with_a_token_counter() -> None:
    """The pure-Python engine (a caller's counter) gives the same messages, and counts
    the user's message once: without the stub it is the caller's own object again."""
    seen: list[Any] = []

    def counter(ms: list[Any]) -> int:
        seen.append(ms[0])
        return len(json.dumps(ms[0])) // 4 + 1

    r = cw.trim_turns(ANTH, budget=100, token_counter=counter, format="anthropic")
    assert r.messages == WANT and r.report.fits
    assert sum(m is ANTH[2] for m in seen) == 1
    assert r.report.tokens_after == counter([WANT[0]])


def test_interrupted_call_gateway_and_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, rep = cw.fit_request(body(ANTH), budget=500, report=True)
    assert json.loads(out)["messages"] == WANT and rep.report.fits
    assert rep.report.tokens_after == cw.count_messages(WANT, format="anthropic")
    f = tmp_path / "anth_merge.json"
    f.write_bytes(body(ANTH))
    dst = tmp_path / "out.json"
    assert main(["fit", str(f), "--budget", "500", "-o", str(dst)]) == 0
    assert json.loads(dst.read_text())["messages"] == WANT
    assert "DOES NOT FIT" not in capsys.readouterr().out


def test_interrupted_call_with_later_turns() -> None:
    """The user's "never mind" turn is a turn of its own: it stays when only the old one
    has to go (it went with the old turn, 16 tokens kept where OpenAI kept 33)."""
    more = [u("never mind, new task"), a("ok"), u("go")]
    anth = [*ANTH[:2], *more]
    plain = [*PLAIN[:2], *more]
    r = cw.trim_turns(anth, budget=500, format="anthropic")
    assert r.messages == cw.trim_turns(plain, budget=500, format="anthropic").messages
    assert r.messages == [u([{"type": "text", "text": BC}, {"type": "text", "text": "never mind, new task"}]),
                          a("ok"), u("go")]  # fmt: skip
    assert r.report.turns_before == 3 == len(cw.segment_turns(anth, format="anthropic").turns)
    assert cw.validate(r.messages, "anthropic") == []
    engine_agrees(anth, 500)


def test_interrupted_call_trim_turn_count() -> None:
    small = [u("first task"), calling(), u("never mind, new question")]
    r = cw.trim_turn_count(small, max_turns=1, format="anthropic")
    assert r.messages == WANT
    assert (r.report.turns_before, r.report.reason) == (2, "turn_limit")
    o = cw.trim_turn_count([small[0], OPENAI[1], small[2]], max_turns=1)
    assert (len(o.messages), o.report.turns_before) == (2, 2)


def test_interrupted_call_fit_keeps_the_new_request() -> None:
    """``fit`` took the old first message as the current request (cut to head and tail)
    and kept the stale call as an open call."""
    r = cw.fit(ANTH, 300, format="anthropic")
    assert r.messages == WANT
    assert [f.fate for f in r.report.fates] == ["dropped", "dropped", "kept"]
    assert [f.rule for f in r.report.fates[:2]] == ["p1_evicted", "p1_evicted"]
    assert r.report.tokens_after == cw.count_messages(WANT, format="anthropic")
    assert r.messages == cw.fit(PLAIN, 300, format="anthropic").messages
    o = cw.fit(OPENAI, 300)
    assert [f.rule for f in o.report.fates] == ["p1_evicted", "p1_evicted", "current_request"]


def test_interrupted_call_guard_with_image() -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    new = u([{"type": "text", "text": "never mind, look at this"}, image])
    budget = cw.resolve_budget(context_window=5000, max_output_tokens=3000, floor=0)
    got = cw.ContextGuard(budget).check([ANTH[0], calling(), new], format="anthropic")
    same = cw.ContextGuard(budget).check([PLAIN[0], PLAIN[1], new], format="anthropic")
    assert got.messages == same.messages and got.tokens_after == same.tokens_after
    assert got.messages[-1]["content"][-2:] == new["content"]
    assert all("first task" not in json.dumps(m) for m in got.messages)


def test_stub_stays_while_its_call_stays() -> None:
    """A pinned turn holding the call keeps it: the stub's message (the next turn) then
    cannot go without it, and an older turn can still be dropped."""
    msgs = [
        Message(role="user", content=[TextPart(text="old " * 200)]),
        Message(role="assistant", content=[TextPart(text="old answer")]),
        Message(role="user", content=[TextPart(text="pinned task")], pinned=True),
        Message(role="assistant", content=[ToolCall(id="t1", name="f", arguments="{}")]),
        Message(role="user", content=[TextPart(text="never mind " * 50)]),
        Message(role="assistant", content=[TextPart(text="ok")]),
        Message(role="user", content=[TextPart(text="go")]),
    ]
    for budget in (10, 60, 150):
        r = cw.trim_turns(msgs, budget, format="anthropic")
        assert cw.validate(r.messages, "anthropic") == []
        texts = [p.text for m in r.messages for p in m.content if isinstance(p, TextPart)]
        assert "pinned task" in texts and texts[-1] == "go"
        stubbed = [m for m in r.messages if any(isinstance(p, ToolResult) for p in m.content)]
        assert len(stubbed) == 1  # the call is kept, so is its stub
        payload = encode_messages(msgs)
        cm = msgspec.json.decode(payload, type=list[Message])
        o = _OUTCOME.decode(rs.trim_turns(payload, budget, "conservative", True, "anthropic"))
        assert ([(op.src, op.msg) for op in o.messages], o.report) == ref.trim_turns(
            cm, budget, "conservative", True, "anthropic"
        )


# --------------------------------------------------------------------------- fuzz


@st.composite
def agent_conversation(draw: Any) -> list[dict[str, Any]]:
    """An Anthropic agent conversation with alternating roles, where some user messages
    are orphan-only carriers and some calls are interrupted by a plain user message."""
    words = st.sampled_from(["hello", "read the file", "x" * 300, "日本語のテキスト" * 20, "ok", "fix the bug " * 40])
    msgs: list[dict[str, Any]] = []
    if draw(st.integers(0, 3)) == 0:
        msgs.append(orphan(draw(st.sampled_from(["zz", "t9"]))))
    else:
        msgs.append(u(draw(words)))
    n = 0
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["chat", "tools", "tools", "interrupted", "orphan"]))
        if kind == "tools" or kind == "interrupted":
            ids = [f"t{n + k}" for k in range(draw(st.integers(1, 2)))]
            n += len(ids)
            blocks = [{"type": "tool_use", "id": i, "name": "f", "input": {"q": draw(words)}} for i in ids]
            msgs.append(a([{"type": "text", "text": draw(words)}, *blocks]))
            if kind == "tools":
                results = [{"type": "tool_result", "tool_use_id": i, "content": draw(words)} for i in ids]
                msgs.append(u(results))
                msgs.append(a(draw(words)))
            content: Any = draw(words)
            if draw(st.integers(0, 3)) == 0:
                content = [{"type": "text", "text": content}, {"type": "image", "source": {"type": "url", "url": "u"}}]
            msgs.append(u(content))
        elif kind == "orphan":
            msgs.append(a(draw(words)))
            msgs.append(orphan(draw(st.sampled_from(["zz", "t0"]))))
        else:
            msgs.append(a(draw(words)))
            msgs.append(u(draw(words)))
    return msgs


def last_user_text(msgs: list[dict[str, Any]]) -> str:
    m = msgs[-1]
    assert m["role"] == "user"
    c = m["content"]
    return c if isinstance(c, str) else json.dumps([b for b in c if b.get("type") != "tool_result"][-1])


@settings(max_examples=60, deadline=None)
@given(agent_conversation(), st.integers(0, 110), st.booleans())
def test_every_output_validates(msgs: list[dict[str, Any]], pct: int, system: bool) -> None:
    total = cw.count_messages(msgs, format="anthropic")
    budget = max(1, total * pct // 100)
    real_last = msgs[-1]["content"] if msgs[-1]["content"] and not _is_orphan(msgs[-1]) else None
    guard = cw.ContextGuard(cw.resolve_budget(context_window=budget + 60, max_output_tokens=50, floor=0))
    try:
        guarded = guard.check(msgs, format="anthropic").messages
    except cw.ContextOverflowError as exc:  # the best it could do is still over
        guarded = exc.result.messages  # type: ignore[attr-defined]
    trimmed = cw.trim_turns(msgs, budget, format="anthropic")
    fitted = cw.fit(msgs, budget, format="anthropic")
    # without results to move (an orphan "t0" answers a call far back: moved next to it,
    # it makes the user message there a carrier), repair makes no turn and merges none:
    # an interrupted call's stub does not merge the user's next turn into the call's
    # (found by the fresh7 tester: 2 turns reported of 3)
    # (nor with a result before its call, which repair moves after it since moved20: the
    # message it sat in may start a turn once it no longer holds a result)
    if '"tool_use_id": "t0"' not in json.dumps(msgs[1:]) and not _result_before_call(msgs):
        turns = len(cw.segment_turns(msgs, format="anthropic").turns)
        assert trimmed.report.turns_before == fitted.report.turns_before == turns
    outs = [cw.repair_tool_pairs(msgs, format="anthropic").messages, trimmed.messages, fitted.messages, guarded]
    extra = {"system": "be brief"} if system else {}
    outs.append(json.loads(cw.fit_request(body(msgs, **extra), budget=budget + (10 if system else 0)))["messages"])
    for out in outs:
        assert cw.validate(out, "anthropic") == [], out
        if real_last is not None:
            assert _texts(out[-1]).endswith(_texts(msgs[-1])) or "characters removed" in _texts(out[-1])


def _result_before_call(msgs: list[dict[str, Any]]) -> bool:
    """Whether a tool_result block sits in a message before the first with a tool_use of
    its id."""

    def blocks(m: dict[str, Any]) -> list[dict[str, Any]]:
        return m["content"] if isinstance(m["content"], list) else []

    first_call: dict[str, int] = {}
    for i, m in enumerate(msgs):
        for b in blocks(m):
            if b.get("type") == "tool_use":
                first_call.setdefault(b["id"], i)
    return any(
        b.get("type") == "tool_result" and first_call.get(b["tool_use_id"], -1) > i
        for i, m in enumerate(msgs)
        for b in blocks(m)
    )


def _is_orphan(m: dict[str, Any]) -> bool:
    return isinstance(m["content"], list) and all(b.get("type") == "tool_result" for b in m["content"])


def _texts(m: dict[str, Any]) -> str:
    c = m["content"]
    if isinstance(c, str):
        return c
    return "".join(b.get("text", "") for b in c if b.get("type") == "text")


@given(anthropic_agent(tool_structs=True), st.integers(0, 110), st.integers(0, 8))
def test_fit_guard_prune_validate_whole(msgs: list[Message], pct: int, keep: int) -> None:
    """The same, on canonical messages from ``strategies.anthropic_agent`` (pinned
    messages, big texts, images, partial results): ``fit``, the guard and
    ``prune_middle`` give outputs that pass ``validate`` whole."""
    total = cw.count_messages(msgs, format="anthropic")
    budget = total * pct // 100
    outs = [
        cw.fit(msgs, budget, format="anthropic").messages,
        prune_middle(msgs, keep_recent=keep if keep < 8 else None, format="anthropic").messages,
    ]
    guard = cw.ContextGuard(cw.resolve_budget(context_window=budget + 60, max_output_tokens=50, floor=0))
    try:
        outs.append(guard.check(msgs, format="anthropic").messages)
    except cw.ContextOverflowError as exc:
        outs.append(exc.result.messages)  # type: ignore[attr-defined]
    for out in outs:
        assert violations(out, "anthropic", msgs) == []


def test_the_message_that_received_the_stub_is_reported_repaired() -> None:
    """fresh8 N8: the user message that got the stub came back rewritten but was reported
    ``kept``. It is ``repaired`` (``stub_inserted``) now, as the call's message is (the
    repair change names the call); a message repair changed stays ``repaired`` when
    trimming keeps its turn (it was reported ``kept_turn``)."""
    m = [
        u("q1"),
        calling(),
        u([{"type": "text", "text": "interrupt!"}]),
        a("ok"),
        u("final"),
    ]
    r = cw.repair_tool_pairs(m)
    assert [r.messages[i] is m[i] for i in range(5)] == [True, True, False, True, True]
    assert [(f.fate, f.rule) for f in r.report.fates][1:3] == [("repaired", "stub_inserted")] * 2
    # the oldest turn goes, the call's turn stays: both repaired messages keep their fate
    big = [u("old question " * 200), a("old answer"), *m]
    t = cw.trim_turns(big, budget=cw.count_messages(m, format="anthropic") + 40, format="anthropic")
    assert t.report.fits and t.report.fates[0].fate == "dropped"
    assert [(f.fate, f.rule) for f in t.report.fates][3:5] == [("repaired", "stub_inserted")] * 2
    assert t.messages[-4] is m[1] and t.messages[-3] != m[2]


def test_prune_middle_reports_the_stubbed_message_as_trim_does() -> None:
    """prune_middle has main's trim rule since 9bd3b86: the Anthropic user message that
    received a repair stub is ``repaired`` (``stub_inserted``) while it holds the stub,
    and ``kept`` again when pruning takes the stub out with the call's message."""
    msgs = [
        u("task"),  # 0: the first request, kept
        a("a1"),  # 1
        u("u2"),  # 2
        a("a3"),  # 3
        u("u4"),  # 4
        calling(),  # 5: the call the user interrupted
        u([{"type": "text", "text": "interrupt!"}]),  # 6: receives the stub
        a("a7"),  # 7
        u("final"),  # 8: the current request
    ]
    # pinned 6: kept [0, 6, 7, 8] (7 and 8 are recent); 0 and 6 are both user messages,
    # so the nearest assistant before 6 (the call, 5) is kept for alternation: 6 keeps its
    # stub, and both 5 and 6 are repaired/stub_inserted (6 was reported kept/pinned)
    r = prune_middle(msgs, keep_recent=2, pinned=[6], format="anthropic")
    assert [i for i, f in enumerate(r.report.fates) if f.fate != "dropped"] == [0, 5, 6, 7, 8]
    assert r.messages[1] is msgs[5] and r.messages[2]["content"][0]["type"] == "tool_result"
    assert [(f.fate, f.rule) for f in r.report.fates][5:7] == [("repaired", "stub_inserted")] * 2
    # what repair_tool_pairs and trim_turns report for them
    assert [(f.fate, f.rule) for f in cw.repair_tool_pairs(msgs).report.fates][5:7] == [
        ("repaired", "stub_inserted")
    ] * 2
    # pinned 3 too: 3 (assistant) is kept before 6 (user), so nothing is kept for
    # alternation and the call (5) goes; 6 loses the stub, is the caller's object again
    # and is kept (the notice goes to message 0, before the first removed run)
    r = prune_middle(msgs, keep_recent=2, pinned=[3, 6], format="anthropic")
    assert [i for i, f in enumerate(r.report.fates) if f.fate != "dropped"] == [0, 3, 6, 7, 8]
    assert r.messages[2] is msgs[6]
    assert (r.report.fates[6].fate, r.report.fates[6].rule) == ("kept", "pinned")
    assert cw.validate(r.messages, "anthropic") == []
    # under budget nothing is pruned: the fates are repair's (the stubbed message repaired)
    r = prune_middle(msgs, budget=10**6, format="anthropic")
    assert [(f.fate, f.rule) for f in r.report.fates][5:7] == [("repaired", "stub_inserted")] * 2
    assert r.messages[6] is not msgs[6] and r.messages[5] is msgs[5]


def _fates(r: Any) -> list[tuple[str, str]]:
    return [(f.fate, f.rule) for f in r.report.fates]


def _all_reports(m: list[dict[str, Any]]) -> list[list[tuple[str, str]]]:
    """The fates every entry point reports for ``m`` (which fits: nothing trimmed), and
    those of the pure-Python reference."""
    engine_agrees(m, 10_000)
    cm = msgspec.json.decode(_engine.prepare(m, "anthropic").payload, type=list[Message])
    return [
        _fates(cw.repair_tool_pairs(m)),
        _fates(cw.trim_turns(m, 10_000)),
        _fates(cw.fit(m, 10_000, format="anthropic")),
        _fates(prune_middle(m, budget=10**6, format="anthropic")),
        [(f.fate, f.rule) for f in ref.trim_turns(cm, 10_000, "conservative", True, "anthropic")[1].fates],
    ]


def test_a_carrier_that_received_a_stub_is_reported_repaired() -> None:
    """fates16: a carrier (a user message of tool results only) that received the stub of
    the second, unanswered call came back changed but was reported ``kept``/``fits``; a
    real user message that got a stub was already ``repaired`` (fresh8 N8)."""
    m: list[dict[str, Any]] = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "a", "name": "f", "input": {}},
                {"type": "tool_use", "id": "b", "name": "f", "input": {}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "r"}]},
    ]
    r = cw.repair_tool_pairs(m)
    assert r.messages[2]["content"][1] == {"type": "tool_result", "tool_use_id": "b", "content": MISSING_RESULT}
    assert r.report.fates[2] == cw.Fate(index=2, fate="repaired", rule="stub_inserted", chars_removed=0)
    assert cw.trim_turns(m, 10000).report.fates[2].rule == "stub_inserted"
    want = [("kept", "fits"), ("repaired", "stub_inserted"), ("repaired", "stub_inserted")]
    assert _all_reports(m) == [want] * 5


def test_a_message_that_received_a_moved_result_is_reported_repaired() -> None:
    """fates16: the user message that receives a result moved out of another message (here
    the assistant message of its own call) was reported ``kept``; it is ``repaired``
    (``result_moved``), like the message the result left. Receiving a moved result and a
    stub, it is ``result_moved`` (that rule wins)."""
    real = {"type": "tool_result", "tool_use_id": "a", "content": "X"}
    m: list[dict[str, Any]] = [
        u("q"),
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}, real]},
        u("q2"),
    ]
    r = cw.repair_tool_pairs(m)
    assert r.messages[2] == {"role": "user", "content": [real, {"type": "text", "text": "q2"}]}
    want = [("kept", "fits"), ("repaired", "result_moved"), ("repaired", "result_moved")]
    assert _all_reports(m) == [want] * 5
    # the same into a carrier of the other call's result (input order: the moved one first)
    rb = {"type": "tool_result", "tool_use_id": "b", "content": "B"}
    ra = {"type": "tool_result", "tool_use_id": "a", "content": "A"}
    two: list[dict[str, Any]] = [
        u("q"),
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "a", "name": "f", "input": {}},
                {"type": "tool_use", "id": "b", "name": "f", "input": {}},
                rb,
            ],
        },
        {"role": "user", "content": [ra]},
    ]
    assert cw.repair_tool_pairs(two).messages[2] == {"role": "user", "content": [rb, ra]}
    assert _all_reports(two) == [want] * 5
    # a moved result (b) and a stub (c) into one carrier: result_moved
    both: list[dict[str, Any]] = [
        u("q"),
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "a", "name": "f", "input": {}},
                {"type": "tool_use", "id": "b", "name": "f", "input": {}},
                {"type": "tool_use", "id": "c", "name": "f", "input": {}},
                rb,
            ],
        },
        {"role": "user", "content": [ra]},
    ]
    stub_c = {"type": "tool_result", "tool_use_id": "c", "content": MISSING_RESULT}
    assert cw.repair_tool_pairs(both).messages[2] == {"role": "user", "content": [rb, ra, stub_c]}
    assert _all_reports(both) == [want] * 5


def test_prune_middle_trims_the_prefill_it_exposes() -> None:
    """Found by hypothesis (``test_fit_guard_prune_validate_whole``): repair moved the
    late result of ``c1`` next to its call and left a placeholder last, ``keep_recent=0``
    pruned it, and the pinned ``", , , "`` became the final message, a prefill ending in
    a space (``trailing_whitespace``, refused by the Messages API). It loses the space,
    as ``fit`` treats a prefill eviction exposes; the input is not touched."""
    result = {"type": "tool_result", "tool_use_id": "c1", "content": "r"}
    msgs = [
        u([result]),
        a([{"type": "tool_use", "id": "c1", "name": "f", "input": {}}]),
        u([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]),
        a(", , , "),
        u([{**result, "content": "r2"}]),
    ]
    before = json.dumps(msgs)
    r = prune_middle(msgs, keep_recent=0, pinned=[1, 2, 3], format="anthropic")
    assert r.report.reason == "middle_pruned"
    assert [m["role"] for m in r.messages] == ["user", "assistant", "user", "assistant"]
    assert r.messages[-1] == {"role": "assistant", "content": ", , ,"}
    assert cw.validate(r.messages, "anthropic") == []
    assert r.report.tokens_after == cw.count_messages(r.messages, format="anthropic")
    assert json.dumps(msgs) == before
    # the input's own final message is the caller's prefill: left as it came
    own = prune_middle(msgs[:4], keep_recent=0, pinned=[1, 2, 3], format="anthropic")
    assert own.messages[-1] is msgs[3]


def test_prune_middle_keeps_the_turn_start_of_a_thinking_turn() -> None:
    """Found by hypothesis (``test_fit_guard_prune_validate_whole``): repair moved the
    result held in the thinking turn's assistant message into the request ("final"),
    which made the request a result carrier, so the newest turn started at "mid" in the
    repaired list. ``prune_middle`` kept the request and the thinking message but pruned
    "mid": the turn of the pinned call joined the newest one, whose first assistant
    message then had no thinking block (``thinking_not_first``). "mid" stays now (rule
    ``thinking_block``), and the assistant message before it for alternation; the two
    before those still go."""
    thinking = {"type": "thinking", "thinking": "plan", "signature": "sig"}
    msgs = [
        u("q"),
        a([{"type": "tool_use", "id": "c0", "name": "f", "input": {}}]),
        u([{"type": "tool_result", "tool_use_id": "c0", "content": "r0"}]),
        a("thinking aloud " * 50),
        u("go on " * 50),
        a("more"),
        u("mid"),
        a(
            [
                thinking,
                {"type": "tool_use", "id": "c1", "name": "f", "input": {}},
                {"type": "tool_result", "tool_use_id": "c1", "content": "out"},
            ]
        ),
        u("final"),
    ]
    r = prune_middle(msgs, keep_recent=0, pinned=[1], format="anthropic")
    assert r.report.reason == "middle_pruned"
    assert cw.validate(r.messages, "anthropic") == []
    assert [(f.fate, f.rule) for f in r.report.fates][3:7] == [
        *[("dropped", "middle_pruned")] * 2,
        ("kept", "alternation"),
        ("kept", "thinking_block"),
    ]
    assert r.messages[-3] == msgs[6] and r.messages[-2]["content"][0] == thinking


def test_prune_middle_notice_never_ends_a_turn_start() -> None:
    """Found by hypothesis (``test_fit_guard_prune_validate_whole``): the notice went
    into the first kept user message after the gap, an empty one (``[]``) that started
    the thinking turn; holding the notice alone it was the notice's own message, no turn
    start, and the turn before joined the newest (``thinking_not_first`` at "ok"). Since
    fresh53 #1 an empty message is no turn of ours (the request is "more"), but it still
    ends the API's turn before the thinking call: it is kept with that call (the case as
    found, one exchange shorter, now prunes nothing), and the notice goes into the first
    kept user message after the gap, the request, which stays one."""
    thinking = {"type": "thinking", "thinking": "", "signature": "s"}
    msgs = [
        u("q"),
        a("ok"),
        u("mid " * 60),
        a("mid reply " * 30),
        u("more " * 60),
        a("hello " * 60),
        u([]),
        a([thinking, {"type": "tool_use", "id": "c1", "name": "f", "input": {}}]),
        u([{"type": "tool_result", "tool_use_id": "c1", "content": "out"}]),
    ]
    assert cw.segment_turns(msgs, format="anthropic").current_request == 4
    r = prune_middle(msgs, keep_recent=0, pinned=[1, 6], format="anthropic")
    assert r.report.reason == "middle_pruned"
    assert [v.code for v in cw.validate(r.messages, "anthropic")] == ["empty_content"]  # the input's u([])
    assert r.messages[:2] == msgs[:2] and r.messages[3:] == msgs[5:]
    assert r.messages[2]["content"][0] == {"type": "text", "text": "[context compacted: 2 earlier messages removed]"}
    assert [(f.fate, f.rule) for f in r.report.fates] == [
        ("kept", "first_user_message"),
        ("kept", "pinned"),
        ("dropped", "middle_pruned"),
        ("dropped", "middle_pruned"),
        ("kept", "notice_added"),
        ("kept", "alternation"),
        ("kept", "pinned"),
        ("kept", "thinking_block"),
        ("kept", "tool_unit"),
    ]
    # one exchange shorter, as found: every message is kept, nothing changes
    short = [*msgs[:2], *msgs[4:]]
    again = prune_middle(short, keep_recent=0, pinned=[1, 4], format="anthropic")
    assert again.report.reason is None and again.messages == short
