"""trim_turns / trim_turn_count rules on small conversations, values worked out by hand.

All use the ``fim`` profile: text tokens = floor((3 * ASCII + 8 * other) / 12), at least 1,
plus 4 per message. ``"a" * 40`` is 10 tokens, so such a message costs 14; the breadcrumb
(50 ASCII characters) is 12 tokens, 16 as an OpenAI message.
"""

from __future__ import annotations

import base64
import json
import random
import re
import struct
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import contextwindow as cw
from contextwindow import _reference as ref
from contextwindow._engine import _OUTCOME, encode_messages, native
from contextwindow.adapters import openai_to_message
from contextwindow.cli import main
from contextwindow.messages import RESULTS_REMOVED, ImagePart, Message, TextPart, ToolCall, ToolResult

import strategies as strat
from shared_data import CORPUS, load

BC = cw.BREADCRUMB


def u(text: str, **kw: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **kw}


def a(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def call(cid: str) -> dict[str, Any]:
    fn = {"name": "f", "arguments": "{}"}
    return {"role": "assistant", "content": None, "tool_calls": [{"id": cid, "type": "function", "function": fn}]}


def result(cid: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": text}


def test_fits_returns_same_objects() -> None:
    msgs = [u("hi"), a("hello")]
    r = cw.trim_turns(msgs, 100, profile="fim")
    assert r.messages == msgs and all(x is y for x, y in zip(r.messages, msgs, strict=True))
    assert r.report.reason is None and r.report.fits and r.report.tokens_before == r.report.tokens_after == 10


def test_drops_oldest_turn_and_inserts_breadcrumb_after_preamble() -> None:
    msgs = [{"role": "system", "content": "s"}, u("a" * 40), a("b" * 40), u("q")]
    r = cw.trim_turns(msgs, 30, profile="fim")  # 5 + 14 + 14 + 5 = 38 > 30
    assert [m["content"] for m in r.messages] == ["s", BC, "q"]
    assert r.report.tokens_after == 26  # 5 + 16 + 5
    assert (r.report.dropped_turns, r.report.kept_turns, r.report.dropped_messages) == (1, 1, 2)
    assert [f.rule for f in r.report.fates] == ["preamble", "oldest_turn", "oldest_turn", "kept_turn"]
    assert r.report.breadcrumb and r.report.inserted_messages == 1 and r.report.reason == "token_budget"
    # trimming the output again changes nothing: the breadcrumb is not a turn of its own
    again = cw.trim_turns(r.messages, 30, profile="fim")
    assert all(x is y for x, y in zip(again.messages, r.messages, strict=True)) and again.report.reason is None


def test_nothing_left_to_remove_says_does_not_fit() -> None:
    msgs = [{"role": "system", "content": "s"}, u(BC), u("q")]  # 5 + 16 + 5 = 26
    r = cw.trim_turns(msgs, 20, profile="fim")
    assert r.report.fits is False and r.report.tokens_after == 26 and r.report.reason is None
    assert all(x is y for x, y in zip(r.messages, msgs, strict=True))


def test_anthropic_breadcrumb_is_leading_block_of_first_kept_user_message() -> None:
    msgs = [u("a" * 40), a("b" * 40), u("q")]  # 14 + 14 + 5 = 33
    r = cw.trim_turns(msgs, 20, profile="fim", format="anthropic")
    assert r.messages == [{"role": "user", "content": [{"type": "text", "text": BC}, {"type": "text", "text": "q"}]}]
    assert r.report.tokens_after == 17  # 5 + 12: no message overhead for a block
    assert r.report.fates[2].rule == "breadcrumb_added"
    assert cw.validate(r.messages, "anthropic") == []
    # deduplicated: a message already led by the breadcrumb gets no second one
    msgs2 = [u("a" * 40), a("b" * 40), r.messages[0]]
    r2 = cw.trim_turns(msgs2, 20, profile="fim", format="anthropic")
    assert r2.messages[0] is msgs2[2] and not r2.report.breadcrumb


def test_oldest_tool_units_go_first_then_refill() -> None:
    # user 5; each call message 6 (4 + f 1 + {} 1); results 104 ("x"*400) or 14 ("y"*40)
    msgs = [u("go"), call("c1"), result("c1", "y" * 40), call("c2"), result("c2", "x" * 400), call("c3")]
    msgs.append(result("c3", "z" * 40))  # total 5 + 20 + 110 + 20 = 155
    r = cw.trim_turns(msgs, 60, profile="fim")
    # unit c1 (20) goes: 135; unit c2 (110) goes: 25; then c1 fits again: 45
    assert r.messages == [msgs[0], msgs[1], msgs[2], msgs[5], msgs[6]]
    assert r.report.tokens_after == 45
    assert [f.rule for f in r.report.fates] == ["kept_turn"] * 3 + ["oldest_tool_unit"] * 2 + ["kept_turn"] * 2
    assert cw.validate(r.messages, "openai") == []


def test_newest_unit_result_is_shrunk_head_and_tail() -> None:
    msgs = [u("go"), call("c1"), result("c1", "x" * 4000)]  # 5 + 6 + 1004
    r = cw.trim_turns(msgs, 100, profile="fim")
    # 15 + floor((k + 35) / 4) <= 100 -> k = 308 kept: 154 head + 154 tail, 3692 removed
    out = r.messages[2]["content"]
    assert out == "x" * 154 + "\n[... 3692 characters removed ...]\n" + "x" * 154
    assert r.report.tokens_after == 100 and r.report.fits
    assert r.report.fates[2].fate == "truncated" and r.report.fates[2].chars_removed == 3692
    assert r.messages[:2] == msgs[:2] and r.messages[0] is msgs[0]


def test_result_in_two_text_parts_is_cut_to_one_common_keep() -> None:
    # fresh26 #3: cut largest first, the first part went down to its marker alone (its
    # head, the start of the tool's output, lost) before the second was touched
    def lines(tag: str) -> str:
        return "".join(f"{tag} {i:04d}\n" for i in range(200))  # 2,000 characters

    parts = [{"type": "text", "text": lines("head")}, {"type": "text", "text": lines("tail")}]
    msgs = [u("run it"), call("c1"), {"role": "tool", "tool_call_id": "c1", "content": parts}]
    assert cw.count_messages(msgs, "fim") == 5 + 6 + 4 + 500 + 500
    r = cw.trim_turns(msgs, 400, profile="fim")
    # 11 + 4 + 2 * floor(L / 4) <= 400 with L = k + 35 for both parts (the marker of a
    # 4-digit count is 35 characters with its line breaks): L <= 771, k = 736, 368 head +
    # 368 tail of each, 1,264 removed from each; k = 737 would be 2 * 193 + 15 = 401
    marker = "\n[... 1264 characters removed ...]\n"
    got = [p["text"] for p in r.messages[2]["content"]]
    assert got == [
        lines("head")[:368] + marker + lines("head")[-368:],
        lines("tail")[:368] + marker + lines("tail")[-368:],
    ]
    assert r.report.tokens_after == 399 and r.report.fits
    assert r.report.fates[2] == cw.Fate(index=2, fate="truncated", rule="tool_result_shrunk", chars_removed=2528)
    assert parts[0]["text"] == lines("head")  # the input is left as it was
    # the Python engine (the oracle) cuts it the same way
    payload = encode_messages([openai_to_message(m, i) for i, m in enumerate(msgs)])
    cm = msgspec.json.decode(payload, type=list[Message])
    o = _OUTCOME.decode(native.trim_turns(payload, 400, "fim", True, "openai"))
    assert ([(op.src, op.msg) for op in o.messages], o.report) == ref.trim_turns(cm, 400, "fim", True, "openai")


def test_request_is_cut_only_when_that_makes_it_fit() -> None:
    msgs = [{"role": "system", "content": "s" * 400}, u("q" * 400)]  # 104 + 104
    r = cw.trim_turns(msgs, 150, profile="fim")
    # 108 + floor((k + 34) / 4) <= 150 -> k = 137: head 69, tail 68, 263 removed
    assert r.messages[1]["content"] == "q" * 69 + "\n[... 263 characters removed ...]\n" + "q" * 68
    assert r.report.tokens_after == 150 and r.report.fates[1].rule == "request_truncated"
    # at 100 even a fully cut request (marker only, 8 tokens) leaves 116: keep it whole
    r2 = cw.trim_turns(msgs, 100, profile="fim")
    assert all(x is y for x, y in zip(r2.messages, msgs, strict=True)) and r2.report.fits is False


def test_request_is_never_cut_to_its_marker_alone() -> None:
    """fresh32 #1: a request of 486 characters came back as
    ``"\n[... 486 characters removed ...]\n"`` with ``fits=True`` at budget 62 (the marker
    and the 45-token system prompt cost 62): the model got no question and only one fate
    said so. A cut that leaves none of the request's text is not made: the request stays
    whole and the report says it does not fit; from 63 the request keeps its first
    character. The same in ``fit``, in ``_reference`` and on the gateway (one engine)."""
    ask = "Please refactor the payment module so that refunds are idempotent and add tests. " * 6
    msgs = [{"role": "system", "content": "You are helpful. " * 10}, u(ask)]
    assert len(ask) == 486 and cw.count_messages(msgs) == 183
    for trim in (cw.trim_turns, cw.fit):
        r62, r63 = trim(msgs, 62), trim(msgs, 63)
        assert r62.messages[1] == u(ask) and (r62.report.fits, r62.report.tokens_after) == (False, 183)
        assert r62.report.fates[1].rule != "request_truncated"
        assert r63.messages[1] == u("P\n[... 485 characters removed ...]\n")
        assert (r63.report.fits, r63.report.tokens_after, r63.report.fates[1].chars_removed) == (True, 63, 485)
    cm = [openai_to_message(m) for m in msgs]
    engine = _OUTCOME.decode(native.trim_turns(encode_messages(cm), 62, "conservative", True, "openai"))
    ops, report = ref.trim_turns(cm, 62, "conservative", True, "openai")
    assert [(op.src, op.msg) for op in engine.messages] == ops and not report.fits
    body = json.dumps({"model": "m", "messages": msgs}).encode()
    assert json.loads(cw.fit_request(body, budget=62))["messages"][1] == u(ask)


def test_request_is_never_cut_to_blanks() -> None:
    """fresh34 #1: a request indented by four spaces came back at budget 27 as
    ``" \n[... 303 characters removed ...]\n"``, reported to fit. A request whose cuts
    leave none of its words (markers and blanks alone) stays whole, ``fits=False``; from
    29 the cut keeps words (its tail, "ow. "). trim_turns, fit and the gateway alike."""
    ask = "    " + "please fix the failing build in module alpha now. " * 6
    msgs = [{"role": "system", "content": "You are an agent."}, u(ask)]
    assert cw.count_messages(msgs) == 74
    for b in range(25, 34):
        for r in (cw.trim_turns(msgs, b), cw.fit(msgs, b)):
            text = r.messages[1]["content"]
            words = re.sub(r"\n\[\.\.\. [\d,]+ characters removed \.\.\.\]\n", "", text)
            if b <= 28:
                assert text == ask and (r.report.fits, r.report.tokens_after) == (False, 74), b
            else:
                assert r.report.fits and r.report.tokens_after == b and words.strip(), b
        body = json.dumps({"messages": msgs}).encode()
        assert json.loads(cw.fit_request(body, budget=b))["messages"][1] == cw.trim_turns(msgs, b).messages[1]


def test_turn_with_pinned_message_is_never_dropped() -> None:
    msgs = [u("a" * 40, pinned=True), a("b" * 40), u("c" * 40), a("d" * 40), u("q")]  # 61
    msgs_c = [
        Message(role=m["role"], content=[TextPart(text=m["content"])], pinned=m.get("pinned", False)) for m in msgs
    ]
    r = cw.trim_turns(msgs_c, 50, profile="fim", format="openai")
    # only turn 1 may go: 61 - 28 + 16 = 49; the breadcrumb marks where turns were cut
    texts = [m.content[0].text for m in r.messages]
    assert texts == ["a" * 40, "b" * 40, BC, "q"] and r.report.tokens_after == 49 and r.report.fits
    # at 40 the breadcrumb alone (16) keeps it over: 33 + 16 = 49; it is left out and the
    # result fits (found by a new user: fits=False at 49 where 35 fit)
    r40 = cw.trim_turns(msgs_c, 40, profile="fim", format="openai")
    assert [m.content[0].text for m in r40.messages] == ["a" * 40, "b" * 40, "q"]
    assert (r40.report.fits, r40.report.tokens_after, r40.report.breadcrumb) == (True, 33, False)


def test_trim_turn_count_keeps_at_least_one_turn() -> None:
    msgs = [{"role": "system", "content": "s"}, u("1"), a("x"), u("2"), a("y"), u("3")]
    r = cw.trim_turn_count(msgs, 0)
    assert [m["content"] for m in r.messages] == ["s", BC, "3"]
    assert r.report.reason == "turn_limit" and r.report.dropped_turns == 2 and r.report.budget is None
    r2 = cw.trim_turn_count(msgs, 2)
    assert [m["content"] for m in r2.messages] == ["s", BC, "2", "y", "3"]
    assert cw.trim_turn_count(msgs, 3).messages == msgs


def test_trim_turn_count_keeps_turns_holding_a_pinned_message() -> None:
    """fresh19 F3: the turn holding a pinned message was dropped with rule turn_limit.
    As in trim_turns it stays, beside the newest max_turns turns; the breadcrumb goes
    before the first kept turn after a dropped one."""

    def conv(pinned: int) -> list[Message]:
        msgs = [Message(role="system", content=[TextPart(text="sys")])]
        for i in range(4):
            msgs.append(Message(role="user", content=[TextPart(text=f"u{i}")], pinned=i == pinned))
            if i < 3:
                msgs.append(Message(role="assistant", content=[TextPart(text=f"a{i}")]))
        return msgs

    def texts(r: Any) -> list[str]:
        return [m.content[0].text for m in r.messages]

    # the fresh tester's case: the pinned turn is the only older one, so nothing goes
    r = cw.trim_turn_count(conv(0)[:3] + conv(0)[-1:], 1)
    assert texts(r) == ["sys", "u0", "a0", "u3"] and r.report.reason is None
    # pinned oldest turn: turns 1 and 2 go, the breadcrumb sits before the newest turn
    r = cw.trim_turn_count(conv(0), 1)
    assert texts(r) == ["sys", "u0", "a0", BC, "u3"]
    assert (r.report.kept_turns, r.report.dropped_turns, r.report.dropped_messages) == (2, 2, 4)
    assert [f.fate for f in r.report.fates] == ["kept"] * 3 + ["dropped"] * 4 + ["kept"]
    # pinned middle turn: turns 0 and 2 go, the breadcrumb sits before the pinned turn
    r = cw.trim_turn_count(conv(1), 1)
    assert texts(r) == ["sys", BC, "u1", "a1", "u3"]
    # (the pinned turn is older than the newest one: kept for its pin, pinned_turn)
    assert [f.rule for f in r.report.fates] == ["preamble"] + ["turn_limit"] * 2 + ["pinned_turn"] * 2 + [
        "turn_limit"
    ] * 2 + ["kept_turn"]
    # the pure-Python spec agrees
    ops, report = ref.trim_turn_count(conv(1), 1, "conservative", True, "openai")
    assert [None if m is None else m.content[0].text for _, m in ops] == [None, BC, None, None, None]
    assert [i for i, _ in ops] == [0, None, 3, 4, 7] and report.kept_turns == 2


def test_request_that_repair_turned_into_carrier_is_kept() -> None:
    """Found by hypothesis: an Anthropic stub result goes into the next user message (the
    request). The request stays; the call its stub answers stays too: it comes before the
    first real user message, and without it two user messages would meet."""
    msgs = [
        Message(role="user", content=[ToolResult(call_id="c1", content=[TextPart(text="")])]),
        Message(role="assistant", content=[ToolCall(id="c1", name="read_file", arguments="")]),
        Message(role="user", content=[TextPart(text="the request")]),
        Message(role="assistant", content=[ToolCall(id="c1", name="read_file", arguments="")], pinned=True),
    ]
    r = cw.trim_turns(msgs, 0, format="anthropic")
    assert r.report.fates[2].fate != "dropped"
    assert any("the request" in getattr(p, "text", "") for m in r.messages for p in m.content)
    # the input starts with an orphan carrier: it stays as a placeholder, so the first
    # message is still a user message (it went, and the assistant's came first, until the
    # fresh7 tester's N1); the stubbed call before the request stays with it
    assert r.messages[0] == Message(role="user", content=[TextPart(text=RESULTS_REMOVED)])
    # but for the id "c1" the input's two calls share, which the API refuses (fresh20b #4)
    # and trim leaves to the caller
    assert (3, "reused_call_id") in [(v.index, v.code) for v in cw.validate(msgs, "anthropic")]
    assert [(v.index, v.code) for v in cw.validate(r.messages, "anthropic")] == [(3, "reused_call_id")]
    engine = _OUTCOME.decode(native.trim_turns(encode_messages(msgs), 0, "conservative", True, "anthropic"))
    assert [(op.src, op.msg) for op in engine.messages] == ref.trim_turns(msgs, 0, "conservative", True, "anthropic")[0]


def test_request_that_repair_made_real_is_the_request() -> None:
    """The reverse of a request that repair made a carrier: what the user wrote beside an
    orphan ``tool_result`` (its call long gone) is a carrier in the input and a real user
    message once repair drops the orphan. trim_turns found the request by origin only,
    the input's last real user message (here in the dropped old turn), so it never cut
    the request: 78 tokens at 60 (``fits=False``), where the same conversation without
    the orphan cuts the request by 107 characters and fits. The later of the two is the
    request now (``fit`` took the later one already). Anthropic, conservative: old turn
    84 + 84, the request 55, ``ls -la`` 7, its output 97 (1 less each at 3 per message;
    the budget 60 of then is 63 for the 3 messages kept)."""

    def conv(orphan: bool) -> list[Message]:
        req: list[Any] = [TextPart(text="Now fix the bug. " * 10)]
        if orphan:
            req.insert(0, ToolResult(call_id="gone", content=[TextPart(text="x")]))
        return [
            Message(role="user", content=[TextPart(text="old q " * 40)]),
            Message(role="assistant", content=[TextPart(text="old a " * 40)]),
            Message(role="user", content=req),
            Message(role="assistant", content=[TextPart(text="ls -la")]),
            Message(role="user", content=[TextPart(text="[Tool results] " + "file.txt\n" * 30)]),
        ]

    msgs = conv(True)
    assert cw.message_tokens(msgs, format="anthropic") == [84, 84, 55, 7, 97]
    r = cw.trim_turns(msgs, 63, format="anthropic")
    assert [(f.fate, f.rule, f.chars_removed) for f in r.report.fates] == [
        ("dropped", "oldest_turn", 0),
        ("dropped", "oldest_turn", 0),
        ("truncated", "request_truncated", 107),
        ("kept", "kept_turn", 0),
        ("truncated", "tool_result_shrunk", 271),
    ]
    assert (r.report.fits, r.report.tokens_after) == (True, 63)
    assert r.messages == cw.trim_turns(conv(False), 63, format="anthropic").messages
    engine = _OUTCOME.decode(native.trim_turns(encode_messages(msgs), 63, "conservative", True, "anthropic"))
    assert [(op.src, op.msg) for op in engine.messages] == ref.trim_turns(msgs, 63, "conservative", True, "anthropic")[
        0
    ]


def test_bad_arguments() -> None:
    import pytest

    with pytest.raises(ValueError, match="budget"):
        cw.trim_turns([u("x")], -1)
    with pytest.raises(ValueError, match="unknown profile"):
        cw.trim_turns([u("x")], 10, profile="nope")
    with pytest.raises(cw.InvalidMessageError, match="message 1"):
        cw.trim_turns([u("x"), {"role": 3}], 10)
    with pytest.raises(cw.InvalidMessageError):
        cw.trim_turns("not a list", 10)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="budget"):
        cw.trim_turns([u("x")], 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tools"):
        cw.count_messages([u("x")], tools=5)  # type: ignore[arg-type]
    # a budget beyond 64 bits is no limit, not an OverflowError
    assert cw.trim_turns([u("x")], 10**30).report.fits
    assert cw.trim_turn_count([u("x")], 10**30).report.reason is None


def test_long_conversation_keeps_newest_turns() -> None:
    """20,000 messages (the input that exposed a cubic turn search): result checked by hand."""
    msgs = [{"role": "system", "content": "s"}]
    msgs += [{"role": r, "content": "x"} for _ in range(10_000) for r in ("user", "assistant")]
    r = cw.trim_turns(msgs, 100, profile="fim", format="openai")
    # 5 per message; preamble 5 + breadcrumb 16 = 21; 7 turns of 10 fit in the other 79
    assert len(r.messages) == 2 + 14 and r.report.tokens_after == 91
    assert r.messages[0] is msgs[0] and r.messages[1]["content"] == BC and r.messages[-1] is msgs[-1]
    assert r.report.dropped_turns == 9_993


def test_plain_chat_gets_breadcrumb_valid_for_both_providers() -> None:
    """Text-only user/assistant chats are both OpenAI and Anthropic; a separate breadcrumb
    message would break Anthropic's alternation (found on logickor_claude35_ko)."""
    msgs = [u("a" * 40), a("b" * 40), u("q")]
    r = cw.trim_turns(msgs, 20, profile="fim")
    assert r.messages == [{"role": "user", "content": [{"type": "text", "text": BC}, {"type": "text", "text": "q"}]}]
    assert cw.validate(r.messages, "anthropic") == [] and cw.validate(r.messages, "openai") == []
    # an explicit format keeps that provider's placement
    r2 = cw.trim_turns(msgs, 30, profile="fim", format="openai")
    assert [m["content"] for m in r2.messages] == [BC, "q"]


def test_out_of_reach_budget_never_grows_the_conversation() -> None:
    """Found by the second fresh-install review: 15 -> 17 tokens at budget 5 (the dropped
    turn cost less than the breadcrumb). Messages of one letter cost 4 + 1 = 5. At 4
    nothing fits (the last message alone is 5): with the breadcrumb (16) dropping the old
    turn (10) would only grow it, so that result is the input (15); without it, the last
    message alone (5). Neither fits: the smaller comes back (it was the input, 15 tokens,
    where budget 5 keeps 5: fresh14 #7). At 5 the last message alone fits without the
    breadcrumb (fresh8 N1: it used to say fits=False, 15 tokens)."""
    msgs = [u("a"), a("k"), u("x")]
    r = cw.trim_turns(msgs, 4, profile="fim", format="openai")
    assert (r.report.fits, r.report.tokens_after, r.report.breadcrumb) == (False, 5, False)
    assert len(r.messages) == 1 and r.messages[0] is msgs[2]
    r5 = cw.trim_turns(msgs, 5, profile="fim", format="openai")
    assert (r5.report.fits, r5.report.tokens_after, r5.report.breadcrumb) == (True, 5, False)
    assert len(r5.messages) == 1 and r5.messages[0] is msgs[2]


def test_output_is_built_from_a_snapshot_of_the_input_list() -> None:
    """The output's unchanged messages come from a snapshot taken when the call starts,
    not from the caller's live list (another thread editing it gave an IndexError or an
    output without its request; found by a new user). Here the sequence changes under
    us after the first pass over it: indexing it afterwards would fail."""
    from collections.abc import Sequence
    from typing import Any

    class Shifting(Sequence[Any]):
        def __init__(self, items: list[Any]) -> None:
            self.items = items

        def __len__(self) -> int:
            return len(self.items)

        def __getitem__(self, i: Any) -> Any:
            raise IndexError("the list changed under the call")

        def __iter__(self) -> Any:
            return iter(self.items)

    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "old " * 200},
        {"role": "assistant", "content": "reply " * 200},
        {"role": "user", "content": "new"},
    ]
    r = cw.trim_turns(Shifting(msgs), budget=30)
    assert r.messages[0] is msgs[0] and r.messages[-1] is msgs[-1]


# --- fresh12 O1: the reply after the request is cut before the request ----------------------
# fim: floor(ASCII / 4) tokens per text + 4 per message; a marker for a 3-digit count is 34
# characters (8 tokens), for a 2-digit count 33 (8 tokens).


def _engines_agree(msgs: list[dict[str, Any]], budget: int) -> cw.TrimResult[Any]:
    """trim_turns, checked against _reference.trim_turns and the gateway's fit_request."""
    r = cw.trim_turns(msgs, budget, profile="fim")
    canonical = cw.adapters.to_canonical(msgs, "openai")
    ops, report = ref.trim_turns(canonical, budget, "fim", True, "openai")
    assert report == r.report
    # an op is (source index, new message), the message None when unchanged
    assert [canonical[i] if m is None else m for i, m in ops] == cw.adapters.to_canonical(r.messages, "openai")
    body = json.dumps({"messages": msgs}).encode()
    out, rr = cw.fit_request(body, budget=budget, profile="fim", provider="openai", report=True)
    assert json.loads(out)["messages"] == r.messages and rr.report == r.report
    return r


def test_the_reply_after_the_request_is_cut_before_the_request() -> None:
    q = "q" * 400
    msgs = [{"role": "system", "content": "s" * 400}, u(q), a("a" * 400)]  # 104 + 104 + 104 = 312
    r = _engines_agree(msgs, 250)
    # the reply's others: 312 - 100 = 212; 212 + floor((k + 34) / 4) <= 250 -> k = 121:
    # head ceil(121 / 2) = 61, tail 60, 400 - 121 = 279 removed; 212 + floor(155 / 4) = 250
    assert r.messages[2]["content"] == "a" * 61 + "\n[... 279 characters removed ...]\n" + "a" * 60
    assert r.messages[1] is msgs[1] and r.messages[0] is msgs[0]
    assert (r.report.tokens_after, r.report.fits) == (250, True)
    f = r.report.fates[2]
    assert (f.fate, f.rule, f.chars_removed) == ("truncated", "reply_shrunk", 279)
    # a pinned reply is not cut (dicts have no pinned field: Message structs): the request
    # is, by the same numbers
    pinned = [
        *cw.adapters.to_canonical(msgs[:2], "openai"),
        Message(role="assistant", content=[TextPart(text="a" * 400)], pinned=True),
    ]
    r = cw.trim_turns(pinned, 250, profile="fim")
    assert r.messages[1].content[0].text == "q" * 61 + "\n[... 279 characters removed ...]\n" + "q" * 60
    assert r.messages[2] is pinned[2] and r.report.fates[1].rule == "request_truncated"
    # an assistant message before the request (it opens the first turn) is not the answer
    # to it: the request is cut, by the same numbers
    before = [msgs[0], a("a" * 400), u(q)]
    r = _engines_agree(before, 250)
    assert r.messages[2]["content"] == "q" * 61 + "\n[... 279 characters removed ...]\n" + "q" * 60
    assert r.messages[1] is before[1]


def test_a_reply_too_small_to_make_it_fit_is_cut_to_its_marker_then_the_request() -> None:
    msgs = [{"role": "system", "content": "s" * 400}, u("q" * 400), a("a" * 40)]  # 104 + 104 + 14 = 222
    r = _engines_agree(msgs, 150)
    # the reply: 212 + 8 = 220 > 150 even cut to its marker (33 characters, 8 tokens < 10):
    # cut to it. The request: others 220 - 100 = 120; 120 + floor((k + 34) / 4) <= 150 ->
    # k = 89: head 45, tail 44, 311 removed; 120 + floor(123 / 4) = 150
    assert r.messages[2]["content"] == "\n[... 40 characters removed ...]\n"
    assert r.messages[1]["content"] == "q" * 45 + "\n[... 311 characters removed ...]\n" + "q" * 44
    assert (r.report.tokens_after, r.report.fits) == (150, True)
    assert [(f.rule, f.chars_removed) for f in r.report.fates] == [
        ("preamble", 0),
        ("request_truncated", 311),
        ("reply_shrunk", 40),
    ]


def test_a_request_cut_not_worth_its_marker_is_cut_a_little_further() -> None:
    msgs = [{"role": "system", "content": "s" * 400}, u("q" * 100)]  # 104 + 29 = 133
    # budget 132: others 108; 108 + floor((k + 33) / 4) <= 132 -> k = 66 keeps 33 + 33 and
    # removes 34 characters, floor(34 / 4) = 8 tokens, for a marker of 33 characters, 8
    # tokens: as many as it removes, so that cut is not made; the largest smaller one that
    # is worth its marker removes 36 (9 tokens > 8), k = 64, and fits: 108 + 24 = 132.
    # (The request was left whole here, 133 > 132 and fits=False, while budget 131 fit
    # with a cut: fresh18 F1, fits was not monotone in the budget.)
    r = _engines_agree(msgs, 132)
    assert r.messages[1]["content"] == "q" * 32 + "\n[... 36 characters removed ...]\n" + "q" * 32
    assert (r.report.tokens_after, r.report.fits) == (132, True)
    # one token less than the whole: 133 fits whole
    r = _engines_agree(msgs, 133)
    assert all(x is y for x, y in zip(r.messages, msgs, strict=True)) and r.report.fits
    # budget 131: k + 33 <= 95 -> k = 62 removes 38 characters, 9 tokens > 8: made
    r = _engines_agree(msgs, 131)
    assert r.messages[1]["content"] == "q" * 31 + "\n[... 38 characters removed ...]\n" + "q" * 31
    assert (r.report.tokens_after, r.report.fits) == (131, True)


def test_request_cuts_that_do_not_make_it_fit_are_undone() -> None:
    # hypothesis (test_fit_invariants, CI at 775dec1): the saving the request step counts
    # on (every part cut to its marker) assumed each part can be cut, but a part whose
    # cut is not worth its marker is not; the larger part was cut and the conversation
    # stayed over budget (28 > 27), a request cut for nothing. Now the request is put
    # back whole when its cuts do not make it fit; and a cut not worth its marker is made
    # a little smaller (fresh18 F1), so from budget 24 on it fits, and below it the
    # request comes back whole.
    text = (
        "hellohello worldThe quick brown fox\u0c95\u0cf3\uff76\uff9e\u0e01\u0e33\u1100\u1161\u11a8\u0600\u0661a\u200cb"
    )
    msgs = [
        Message(role="system", content=[TextPart(text="")]),
        Message(role="user", content=[TextPart(text=text), TextPart(text=ref.BREADCRUMB)]),
    ]
    assert cw.count_messages(msgs, "fim", format="openai") == 37
    for budget in range(20, 38):
        for r in (
            cw.trim_turns(msgs, budget, profile="fim", format="openai"),
            cw.fit(msgs, budget, profile="fim", format="openai"),
        ):
            if budget < 24:
                assert all(x is y for x, y in zip(r.messages, msgs, strict=True)) and len(r.messages) == 2
                assert (r.report.tokens_after, r.report.fits) == (37, False)
                assert all(f.fate == "kept" for f in r.report.fates)
            else:
                assert r.report.fits and r.report.tokens_after <= budget, budget
    r = cw.trim_turns(msgs, 27, profile="fim", format="openai")
    # both parts cut: the breadcrumb-like part keeps 7 + 7 of its 50 characters
    assert [p.text for p in r.messages[1].content] == [
        "\n[... 49 characters removed ...]\n",
        "[earlie\n[... 36 characters removed ...]\nindow]",
    ]
    ops, report = ref.trim_turns(msgs, 27, "fim", True, "openai")  # the pure-Python spec
    assert report == r.report and [m for _, m in ops] == [None, r.messages[1]]
    ops, report = ref.trim_turns(msgs, 23, "fim", True, "openai")
    assert report == cw.trim_turns(msgs, 23, profile="fim", format="openai").report
    assert all(m is None for _, m in ops)
    body = msgspec.json.encode({"messages": [cw.adapters.message_to_openai(m) for m in msgs]})
    assert cw.fit_request(body, budget=23, profile="fim", provider="openai") == body


def test_a_tool_result_is_cut_further_rather_than_not_worth_its_marker() -> None:
    msgs = [u("go"), call("c1"), result("c1", "x" * 100)]  # 5 + 6 + 29 = 40
    r = _engines_agree(msgs, 39)
    # others 15; 15 + floor((k + 33) / 4) <= 39 -> k <= 66, but k = 66 removes 34 (8
    # tokens) and k = 65 removes 35 (8 tokens) for a marker of 8: k = 64 removes 36 (9
    # tokens); 15 + floor(97 / 4) = 39
    assert r.messages[2]["content"] == "x" * 32 + "\n[... 36 characters removed ...]\n" + "x" * 32
    assert (r.report.tokens_after, r.report.fits) == (39, True)
    assert r.report.fates[2].rule == "tool_result_shrunk"


def test_cli_repro_keeps_the_korean_request_whole(tmp_path: Path) -> None:
    """fresh12 O1: ``contextwindow fit --budget 1263 .../id07_Reasoning.json`` cut the
    75-character Korean question to ``자\\n[... 44 characters removed ...]\\n`` and kept the
    1,398-character answer after it whole."""
    path = CORPUS / "logickor_claude35_ko" / "id07_Reasoning.json"
    if not path.is_file():
        pytest.skip("../shared/corpus is absent")
    doc = json.loads(path.read_text(encoding="utf-8"))
    question, answer = (m["content"][0]["text"] for m in doc["messages"][2:])
    out = tmp_path / "out.json"
    assert main(["fit", "--budget", "1263", str(path), "-o", str(out), "--json"]) == 0
    kept = json.loads(out.read_text(encoding="utf-8"))["messages"]
    # the old turn goes; the request stays whole; the answer is head + marker + tail
    assert [m["role"] for m in kept] == ["user", "assistant"]
    assert kept[0]["content"] == [{"type": "text", "text": question}]
    text = kept[1]["content"][0]["text"]
    head, rest = text.split("\n[... ", 1)
    removed, tail = rest.split(" characters removed ...]\n", 1)
    assert answer.startswith(head) and answer.endswith(tail) and head and tail
    assert len(head) + int(removed) + len(tail) == len(answer)
    r = cw.trim_turns(doc["messages"], 1263, format="anthropic")
    assert r.messages == kept and r.report.fits and r.report.tokens_after <= 1263
    assert [(f.fate, f.rule) for f in r.report.fates] == [
        ("dropped", "oldest_turn"),
        ("dropped", "oldest_turn"),
        ("kept", "kept_turn"),
        ("truncated", "reply_shrunk"),
    ]
    assert cw.count_messages(kept, format="anthropic") == r.report.tokens_after
    # tight: the cut that keeps one character more does not fit
    k = len(head) + len(tail)
    assert ref.shrink_text(answer, k)[0] == text
    longer = [kept[0], {"role": "assistant", "content": [{"type": "text", "text": ref.shrink_text(answer, k + 1)[0]}]}]
    assert cw.count_messages(longer, format="anthropic") > 1263


# --- fresh16b #2: an Anthropic prefill is never left ending in whitespace -------------------


def _last_text(msgs: list[dict[str, Any]]) -> str:
    c = msgs[-1]["content"]
    return c if isinstance(c, str) else c[-1]["text"]


def test_an_anthropic_prefill_cut_to_its_marker_ends_without_a_newline() -> None:
    """fresh16b #2: the prefill was cut to ``"\n[... 2471 characters removed ...]\n"``,
    reported as fitting; the Messages API refuses a final assistant message ending in
    whitespace. Now the marker loses its final newline there (and only there)."""
    pre = "Here is the full analysis of the report. " * 60 + "Conclusion:"  # 2,471 characters
    msgs = [{"role": "user", "content": "Analyse it. " * 100}, {"role": "assistant", "content": pre}]
    r = cw.trim_turns(msgs, 200, format="anthropic")
    assert r.messages[-1]["content"] == "\n[... 2471 characters removed ...]"
    assert (r.report.fits, r.report.tokens_after) == (True, 200)
    assert (r.report.fates[1].rule, r.report.fates[1].chars_removed) == ("reply_shrunk", 2471)
    assert cw.count_messages(r.messages, format="anthropic") == 200
    canonical = cw.adapters.to_canonical(msgs, "anthropic")
    ops, report = ref.trim_turns(canonical, 200, "conservative", True, "anthropic")
    assert report == r.report
    assert [canonical[i] if m is None else m for i, m in ops] == cw.adapters.to_canonical(r.messages, "anthropic")
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": msgs}).encode()
    assert json.loads(cw.fit_request(body, budget=200))["messages"][-1]["content"] == r.messages[-1]["content"]
    # OpenAI shape has no prefill: the marker keeps its newline
    assert cw.trim_turns(msgs, 200, format="openai").messages[-1]["content"].endswith("...]\n")
    # no budget leaves a fitting result ending in whitespace (516 of 0-800 did)
    for budget in range(0, 801, 7):
        r = cw.trim_turns(msgs, budget, format="anthropic")
        text = _last_text(r.messages)
        assert not r.report.fits or text == text.rstrip(), budget


def test_an_anthropic_prefill_cut_keeping_its_head_only_ends_without_a_newline() -> None:
    """The ``fim`` profile (floor(chars / 4) + 4 a message): request 14, prefill 104; at
    26 the prefill may cost 8 tokens, 35 characters: k = 1 is "a" + the marker of 399
    without its newline (34 characters), k = 2 is 36 characters. Both engines agree."""
    msgs = [u("q" * 40), a("a" * 400)]
    r = cw.trim_turns(msgs, 26, profile="fim", format="anthropic")
    assert r.messages[1]["content"] == "a\n[... 399 characters removed ...]"
    assert (r.report.fits, r.report.tokens_after) == (True, 26)
    canonical = cw.adapters.to_canonical(msgs, "anthropic")
    ops, report = ref.trim_turns(canonical, 26, "fim", True, "anthropic")
    assert report == r.report
    assert [canonical[i] if m is None else m for i, m in ops] == cw.adapters.to_canonical(r.messages, "anthropic")
    # the same text is no prefill when a part follows it in the message: newline kept
    two = [
        u("q" * 40),
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "a" * 400}, {"type": "text", "text": "Conclusion:"}],
        },
    ]
    r = cw.trim_turns(two, 28, profile="fim", format="anthropic")
    assert r.messages[1]["content"][0]["text"] == "a\n[... 399 characters removed ...]\n"
    assert (r.report.fits, r.report.tokens_after) == (True, 28)
    ops, report = ref.trim_turns(cw.adapters.to_canonical(two, "anthropic"), 28, "fim", True, "anthropic")
    assert report == r.report


def test_an_anthropic_prefill_of_whitespace_is_cut_without_a_whitespace_tail() -> None:
    """fresh30 #3: a prefill of whitespace only (``empty_content`` already) was cut to
    head + marker + a tail of ``"\r\n"``, a ``trailing_whitespace`` the input did not
    have. A prefill cut whose tail is whitespace only takes the tail too, and the marker
    ends the text. By hand with ``fim`` (floor(chars / 4) + 4 a message): request 14,
    prefill 400 characters; at 26 the prefill may cost 8 tokens, 35 characters: the
    head "\r\n" (one grapheme) and the marker of 398 without its newline (33). Both
    engines agree, and the gateway cuts the same."""
    msgs = [u("q" * 40), a("\r\n" * 200)]
    r = cw.trim_turns(msgs, 26, profile="fim", format="anthropic")
    assert r.messages[1]["content"] == "\r\n\n[... 398 characters removed ...]"
    assert (r.report.fits, r.report.tokens_after, r.report.fates[1].chars_removed) == (True, 26, 398)
    canonical = cw.adapters.to_canonical(msgs, "anthropic")
    ops, report = ref.trim_turns(canonical, 26, "fim", True, "anthropic")
    assert report == r.report
    assert [canonical[i] if m is None else m for i, m in ops] == cw.adapters.to_canonical(r.messages, "anthropic")
    for text in ("\r\n" * 200, "   \n\t " * 100):
        msgs = [u("Write it."), {"role": "assistant", "content": [{"type": "text", "text": text}]}]
        body = json.dumps({"model": "m", "max_tokens": 5, "messages": msgs}).encode()
        outs = [
            cw.trim_turns(msgs, 30).messages,
            cw.fit(msgs, 30).messages,
            cw.recover_from_overflow(msgs, budget=30).messages,
            json.loads(cw.fit_request(body, budget=30))["messages"],
        ]
        for out in outs:
            assert _last_text(out).endswith("removed ...]")
            assert [v.code for v in cw.validate(out, "anthropic")] == []
    # a tail with more than whitespace stays (the input's own trailing whitespace with it)
    kept = cw.trim_turns([u("Write it."), a("word " * 200 + "\n\n\n")], 30, format="anthropic").messages
    assert _last_text(kept).endswith(" word \n\n\n")


# --- fresh15 #4: a text-action agent's observation is cut like a tool result ---------------


def test_a_tool_results_text_is_cut_before_the_request() -> None:
    """The observation (user text starting with ``[Tool results]``, after the request) is
    cut as a tool result is, keeping its prefix; it was never cut, and the request was."""
    q = "q" * 400
    seen = "[Tool results] " + "x" * 385  # 400 characters
    msgs = [{"role": "system", "content": "s" * 400}, u(q), a("ls -la"), u(seen)]  # 104 + 104 + 5 + 104 = 317
    r = _engines_agree(msgs, 250)
    # the observation's others: 217; 217 + floor((14 + k + 34) / 4) <= 250 -> k = 87 after
    # the 14-character prefix: head 14 + 44, tail 43, 400 - 14 - 87 = 299 removed
    assert r.messages[3]["content"] == "[Tool results] " + "x" * 43 + "\n[... 299 characters removed ...]\n" + "x" * 43
    assert all(r.messages[i] is msgs[i] for i in range(3))
    assert (r.report.tokens_after, r.report.fits) == (250, True)
    f = r.report.fates[3]
    assert (f.fate, f.rule, f.chars_removed) == ("truncated", "tool_result_shrunk", 299)
    # at 200 even its marker alone leaves 217 + floor(48 / 4) = 229: it keeps its prefix
    # only; "ls -la" is not worth a marker; then the request: others 129, 129 +
    # floor((k + 34) / 4) <= 200 -> k = 253: head 127, tail 126, 147 removed
    r = _engines_agree(msgs, 200)
    assert r.messages[3]["content"] == "[Tool results]\n[... 386 characters removed ...]\n"
    assert r.messages[1]["content"] == "q" * 127 + "\n[... 147 characters removed ...]\n" + "q" * 126
    assert r.messages[2] is msgs[2] and (r.report.tokens_after, r.report.fits) == (200, True)
    assert [(f.rule, f.chars_removed) for f in r.report.fates] == [
        ("preamble", 0),
        ("request_truncated", 147),
        ("kept_turn", 0),
        ("tool_result_shrunk", 386),
    ]
    # pinned (a Message struct), it is not cut: the request is, as before (the request's
    # others 217: k = 101, head 51, tail 50, 299 removed)
    pinned = cw.adapters.to_canonical(msgs, "openai")
    pinned[3] = Message(role="user", content=[TextPart(text=seen)], pinned=True)
    r = cw.trim_turns(pinned, 250, profile="fim")
    assert r.messages[1].content[0].text == "q" * 51 + "\n[... 299 characters removed ...]\n" + "q" * 50
    assert r.messages[3] is pinned[3] and r.report.fates[1].rule == "request_truncated"


FRESH15_4 = [
    {"role": "system", "content": "You are an agent."},
    {"role": "user", "content": "old question " * 30},
    {"role": "assistant", "content": "old answer " * 30},
    {"role": "user", "content": "Please fix the bug in module foo and run the tests. " * 5},
    {"role": "assistant", "content": "ls -la"},
    {"role": "user", "content": "[Tool results] " + "file.txt\n" * 200},
]


@pytest.mark.parametrize("budget", [104, 304, 630])
def test_fresh15_4_the_request_stays_whole_and_the_observation_is_cut(budget: int) -> None:
    """fresh15 #4 (default profile): at 100 nothing could meet the budget (672 tokens,
    fits False); at 626 the request was cut to one character and the 1,815-character
    ``ls`` output stayed whole. Now the request and the command stay whole at every such
    budget, and the output is cut to the most head and tail that fits, prefix kept.
    (Budgets at 3 per message; 4 more for the 4 messages kept at 4 per message.)"""
    msgs = FRESH15_4
    r = cw.trim_turns(msgs, budget)
    assert r.report.fits and r.report.tokens_after <= budget
    assert r.messages[-3] is msgs[3] and r.messages[-2] is msgs[4]
    assert [(f.fate, f.rule) for f in r.report.fates][3:] == [
        ("kept", "kept_turn"),
        ("kept", "kept_turn"),
        ("truncated", "tool_result_shrunk"),
    ]
    text = r.messages[-1]["content"]
    head, rest = text.split("\n[... ", 1)
    removed, tail = rest.split(" characters removed ...]\n", 1)
    seen = msgs[5]["content"]
    assert head.startswith("[Tool results] f") and seen.startswith(head) and seen.endswith(tail)
    assert len(head) + int(removed) + len(tail) == len(seen) == 1815
    assert r.report.fates[5].chars_removed == int(removed)
    # tight: the cut that keeps one more character after the prefix does not fit
    k = len(head) + len(tail) - 14
    assert ref.shrink_text(seen, k, 14)[0] == text
    longer = [*r.messages[:-1], u(ref.shrink_text(seen, k + 1, 14)[0])]
    assert cw.count_messages(longer) > budget
    # the engine and its spec agree (both breadcrumb choices)
    canonical = cw.adapters.to_canonical(msgs, "openai")
    for breadcrumb in (True, False):
        ops, report = ref.trim_turns(canonical, budget, "conservative", breadcrumb, "openai")
        rb = cw.trim_turns(msgs, budget, breadcrumb=breadcrumb)
        assert report == rb.report
        assert [canonical[i] if m is None else m for i, m in ops] == cw.adapters.to_canonical(rb.messages, "openai")


def test_one_token_more_of_budget_never_stops_a_fit() -> None:
    """fresh18 F1: at budget 20 the request was left whole (21 tokens, fits=False) where
    18 and 19 fit with a cut that removes 27 characters; now 20 makes that cut too (3
    per message; at 4 every figure is 1 more)."""
    m = [{"role": "user", "content": "世界[Tool results]  ok.a b한국어\r\n"}]
    assert cw.count_messages(m) == 22
    for budget in (19, 20, 21):
        r = cw.trim_turns(m, budget)
        assert (r.report.fits, r.report.tokens_after) == (True, 19), budget
        assert r.messages[0]["content"] == "世界\n[... 27 characters removed ...]\n"
    assert cw.trim_turns(m, 22).messages == m


@pytest.mark.skipif(not (CORPUS / "claude_code_viewer/5c0375b4_sidechain1.json").exists(), reason="no corpus")
def test_the_corpus_file_that_stopped_fitting_one_token_up() -> None:
    """fresh18 F1 on a corpus file: budget 207 fit (206 tokens), 208 did not (209)."""
    d = load(CORPUS / "claude_code_viewer/5c0375b4_sidechain1.json")
    for budget in range(200, 260):
        r = cw.trim_turns(d["messages"], budget, format=d["format"])
        assert r.report.fits and r.report.tokens_after <= budget, budget


@settings(max_examples=max(50, settings().max_examples))
@given(strat.case())
def test_fits_once_fits_for_every_larger_budget(c: tuple[str, list[cw.Message]]) -> None:
    """Once a budget is met, every larger one is (fresh18 F1: 18% of small random
    conversations had a budget where one token more gave fits=False)."""
    provider, msgs = c
    total = cw.count_messages(msgs, format=provider, profile="fim")
    met = False
    for budget in range(min(total, 300) + 1):
        fits = cw.trim_turns(msgs, budget, format=provider, profile="fim").report.fits
        assert fits or not met, budget
        met = met or fits


def test_a_result_in_parts_whose_cuts_cannot_pay_is_cut_further() -> None:
    """Found by ``test_fits_once_fits_for_every_larger_budget`` (its input as drawn): a tool
    result in three text parts (``""``, 50 and 45 characters) fit at 68 (``fim``) but not
    at 69. At 69 the largest common keep that fit cut a few characters from both long
    parts, neither cut paid for its marker, both stayed whole, and nothing was cut. As a
    single text is cut further, the keep is then the largest smaller one with which the
    total fits, the parts whose cut there pays cut and the others whole: 36 characters
    go, 69 tokens. Where keeping such parts whole cuts something (68: 39 characters),
    that cut stands. Both engines agree, at every budget. (The four pinned user messages
    were empty in the case drawn; a message with no words opens no turn now, fresh53 #1,
    so each has a letter, 4 ``fim`` tokens more: 72 and 73.)"""
    c = lambda i: ToolCall(id=i, name="read_file", arguments="")  # noqa: E731
    t = lambda s: TextPart(text=s)  # noqa: E731
    parts = [t(""), t(cw.BREADCRUMB), t('hellohellohellohellohellohello{"key": [1, 2]}')]
    empty = Message(role="user", content=[t("a")], pinned=True)
    error = [t("")]
    msgs = [
        empty,
        Message(role="assistant", content=[c("c1"), c("c1")], pinned=True),
        empty,
        Message(role="user", content=[ImagePart(source="https://example.com/a.png")]),
        empty,
        empty,
        Message(
            role="assistant",
            content=[ToolResult(call_id="c1", content=[t("copy")], is_error=True), c("c1"), c("c1"), c("c2")],
            pinned=True,
        ),
        Message(role="tool", content=[ToolResult(call_id="c1", content=error, is_error=True)]),
        Message(role="tool", content=[ToolResult(call_id="c1", content=error, is_error=True)]),
        Message(role="tool", content=[ToolResult(call_id="c2", content=parts, is_error=True)]),
    ]
    got = []
    for budget in range(60, 94):
        r = cw.trim_turns(msgs, budget, format="openai", profile="fim")
        ops, report = ref.trim_turns(msgs, budget, "fim", True, "openai")
        assert report == r.report and [msgs[i] if m is None else m for i, m in ops] == r.messages
        got.append(r.report.fits)
    assert got == sorted(got) and got[-1]  # once met, met for every larger budget
    r72, r73 = (cw.trim_turns(msgs, b, format="openai", profile="fim").report for b in (72, 73))
    assert [(r.fits, r.tokens_after, r.fates[9].chars_removed) for r in (r72, r73)] == [(True, 72, 39), (True, 73, 36)]


def test_struct_chat_with_an_anthropic_image_source_is_read_as_anthropic() -> None:
    """fresh19b #2: a struct chat of text and images whose ``source`` is an Anthropic
    source object was read as OpenAI's, so the breadcrumb became a user message of its
    own beside the first kept one (``user, user``: not_alternating for Anthropic). Such a
    source is Anthropic's mark, as the image block is for dicts; a URL string stays
    neutral (OpenAI's rules, documented in README Shapes)."""

    def chat(src: Any) -> list[Message]:
        img = ImagePart(source=src, width=800, height=600)
        return [
            Message(role="user", content=[img, TextPart(text="What is this? " + "x" * 400)]),
            Message(role="assistant", content=[TextPart(text="A cat. " + "y" * 400)]),
            Message(role="user", content=[img, TextPart(text="And this one?")]),
        ]

    s = chat({"type": "url", "url": "https://example.com/cat.png"})
    r = cw.trim_turns(s, cw.count_messages(s) - 50)
    # the first turn goes; the breadcrumb leads the request as a text block
    assert [[type(p).__name__ for p in m.content] for m in r.messages] == [["TextPart", "ImagePart", "TextPart"]]
    assert r.messages[0].content[0].text == BC and r.report.fits
    assert cw.validate(r.messages, "anthropic") == []
    assert cw.count_messages(s) == cw.count_messages(s, format="anthropic")
    s = chat("https://example.com/cat.png")
    r = cw.trim_turns(s, cw.count_messages(s) - 50)
    assert [m.role for m in r.messages] == ["user", "user"] and r.messages[0].content[0].text == BC
    assert cw.count_messages(s) == cw.count_messages(s, format="openai")


def test_a_cut_takes_a_marker_the_text_holds_whole_and_adds_its_count() -> None:
    # fresh27 #1: text cut before (by an earlier guard step or an earlier call) is cut
    # again; the marker it holds is taken whole and its count added to the new one's
    text = "a" * 100 + "\n[... 500 characters removed ...]\n" + "b" * 100  # marker at 101..133
    # the span 50..184 holds the marker whole: 134 removed, 134 - 32 + 500 named
    assert ref.shrink_text(text, 100) == ("a" * 50 + "\n[... 602 characters removed ...]\n" + "b" * 50, 134)
    # a cut inside the marker (110..124) takes it whole: the count stays 500
    assert ref.shrink_text(text, 220) == ("a" * 100 + "\n\n[... 500 characters removed ...]\n\n" + "b" * 100, 32)
    lined = "x\n[... 20060 characters (2006 lines) removed ...]\n" + "y" * 40
    # 90 characters; keep 10: the head (5) falls in the marker (2..49) and moves to 2, the
    # tail starts at 85: 83 removed, 83 - 47 + 20,060 named
    assert ref.shrink_text(lined, 10) == ("x\n\n[... 20096 characters removed ...]\n" + "y" * 5, 83)
    # the engine cuts as the oracle does, in a tool result of the newest turn
    for body in (text * 20, lined * 30, "中" * 50 + "[... 7 characters removed ...]" + "文" * 50):
        msgs = [u("go"), call("c1"), result("c1", body)]
        payload = encode_messages([openai_to_message(m, i) for i, m in enumerate(msgs)])
        cm = msgspec.json.decode(payload, type=list[Message])
        total = cw.count_messages(msgs)
        for budget in (30, total // 3, total * 2 // 3, total - 5):
            o = _OUTCOME.decode(native.trim_turns(payload, budget, "conservative", True, "openai"))
            want = ref.trim_turns(cm, budget, "conservative", True, "openai")
            assert ([(op.src, op.msg) for op in o.messages], o.report) == want


def test_guard_cuts_a_cut_log_again_with_one_marker_naming_what_is_gone() -> None:
    # fresh27 #1: budget_tool_results cut the 1 MB log, then fit cut the cut text again:
    # the marker said '[... 144 characters removed ...]' where 1,062,849 were gone
    out = "".join(f"[{i:07d}] INFO build step {i % 97} compiling module_{i % 13}.rs ok\n" for i in range(20000))
    msgs = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Run the build."},
        call("c1"),
        {"role": "tool", "tool_call_id": "c1", "content": out},
    ]
    guard = cw.ContextGuard(cw.resolve_budget(context_window=16384, max_output_tokens=8192))
    text = guard.check(msgs).messages[-1]["content"]
    marks = re.findall(r"\n\[\.\.\. (\d+) characters removed \.\.\.\]\n", text)
    assert len(marks) == 1 and text.count("[...") == 1
    head, tail = text.split("\n[... " + marks[0] + " characters removed ...]\n")
    assert out.startswith(head) and out.endswith(tail)
    # what is gone, plus the one line break after the first marker that the second cut
    # took with it (a marker's own line breaks count as text: README)
    assert int(marks[0]) == len(out) - len(head) - len(tail) + 1


@settings(max_examples=60, deadline=None)
@given(
    st.integers(ref.INTERPOLATE_FROM, 2_000_000),
    st.integers(1, 50),
    st.integers(0, 3),
    st.data(),
)
def test_largest_within_finds_the_largest_fitting_cut_of_a_monotone_cost(
    n: int, chars_per_token: int, base: int, data: Any
) -> None:
    # the search by interpolation that long texts are cut after (fresh26 #2) gives what a
    # binary search gives when the cost is monotone in the characters kept
    def cost(k: int) -> int:
        return base + k // chars_per_token

    top = cost(n) + 1
    limit = data.draw(st.integers(0, top - 1))
    probes: list[int] = []

    def counted(k: int) -> int:
        probes.append(k)
        return cost(k)

    got = ref.largest_within(n, counted, limit, top)
    assert got == ref.largest_fitting(n, lambda k: cost(k) <= limit)
    assert len(probes) <= 1 + 12 + n.bit_length()


def test_long_texts_are_cut_as_the_oracle_cuts_them() -> None:
    # 70,000-300,000 characters: the interpolation search, Rust and Python step for step
    words = ["build", "ok", "warning:", "src/lib.rs:12", "错误", "テスト", "🙂", "0x1f3a", "\n"]
    rng = random.Random(27)
    for n in (70_000, 120_000):
        body = " ".join(rng.choice(words) for _ in range(n // 5))[:n]
        assert len(body) >= ref.INTERPOLATE_FROM
        msgs = [u("go"), call("c1"), result("c1", body)]
        payload = encode_messages([openai_to_message(m, i) for i, m in enumerate(msgs)])
        cm = msgspec.json.decode(payload, type=list[Message])
        total = cw.count_messages(msgs)
        for budget in (500, total - 100):
            o = _OUTCOME.decode(native.trim_turns(payload, budget, "conservative", True, "openai"))
            assert o.report.fits and o.report.tokens_after <= budget
            want = ref.trim_turns(cm, budget, "conservative", True, "openai")
            assert ([(op.src, op.msg) for op in o.messages], o.report) == want


def test_a_run_of_combining_marks_past_the_stream_safe_limit_is_cut() -> None:
    """fresh35 #4: a request of one base letter and 100,000 combining acutes is one
    grapheme (UAX #29), which no cut entered: every trim gave up at 198,383 tokens. Past
    a cluster's first 31 code points (UAX #15's stream-safe limit: a base and 30
    non-starters) a cut may fall inside it; a base and 29 marks stay whole."""
    from contextwindow import _reference as ref

    text = "e" + "\u0301" * 100_000
    r = cw.trim_turns([{"role": "user", "content": text}], 150)
    assert r.report.fits and r.report.tokens_after <= 150
    # the head keeps the base and 32 marks (past the grapheme's first 31 code points),
    # the tail 33 marks
    assert r.messages[0]["content"] == "e" + "\u0301" * 32 + "\n[... 99935 characters removed ...]\n" + "\u0301" * 33
    assert cw.trim_turns(r.messages, 150).messages == r.messages
    # at 50 the head moved back to the text's start (a cut after fewer than 30 marks would
    # split the grapheme) and the cut kept 15 lone marks: no word, so the request stays
    # whole (fresh54 #3)
    r = cw.trim_turns([{"role": "user", "content": text}], 50)
    assert not r.report.fits and r.messages[0]["content"] == text
    # the same cut in Python (on 5,000 marks: the reference is slow on 100,000)
    small = [cw.Message(role="user", content=[cw.TextPart(text="e" + "\u0301" * 5_000)])]
    ops, _ = ref.trim_turns(small, 150)
    assert ops[0][1] == cw.trim_turns(small, 150).messages[0]
    # the rule in Python: a cut before a mark is refused until 30 attaching characters
    # precede it, in a run of marks and in a run of ZWJs
    assert [ref._bad_cut(text, p) for p in (1, 30, 31, 99_999)] == [True, True, False, False]
    zwj = "\U0001f468" + "\u200d" * 40 + "x"
    assert [ref._bad_cut(zwj, p) for p in (30, 31, 41)] == [True, False, False]
    short = "a" + "\u0301" * 29 + "b"
    assert all(ref._bad_cut(short, p) for p in range(1, 30)) and not ref._bad_cut(short, 30)
    # any cluster: a chain of 100,000 ZWJ emoji (one grapheme) is cut too; it was left
    # whole, fits=False, at 298,578 tokens
    chain = "\U0001f468" + "\u200d\U0001f468" * 50_000
    got = cw.trim_turns([{"role": "user", "content": chain}], 50)
    assert got.report.fits and got.report.tokens_after <= 50


@pytest.mark.parametrize("engine", ["rust", "python"])
@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_a_repaired_unit_of_the_newest_turn_keeps_its_fate_when_it_comes_back(engine: str, fmt: str) -> None:
    """fresh42 #1. Call c1 has no result (repair inserts a stub after it), c2's result is
    3,600 characters, c3's is "ok". At budget 100 the newest turn drops c1's unit, then
    c2's, and puts c1's back (it fits): its messages read `repaired`/`stub_inserted`
    as at a budget that fits everything, not `kept`/`kept_turn`."""
    if fmt == "openai":
        msgs = [
            u("Fix the build."),
            call("c1"),
            call("c2"),
            result("c2", "log line " * 400),
            call("c3"),
            result("c3", "ok"),
        ]
    else:

        def use(cid: str) -> dict[str, Any]:
            return {"role": "assistant", "content": [{"type": "tool_use", "id": cid, "name": "f", "input": {}}]}

        def res(cid: str, text: str) -> dict[str, Any]:
            return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": cid, "content": text}]}

        msgs = [u("Fix the build."), use("c1"), use("c2"), res("c2", "log line " * 400), use("c3"), res("c3", "ok")]
    kw: dict[str, Any] = {"profile": "conservative"}
    if engine == "python":
        kw = {"token_counter": lambda ms: cw.count_messages(ms, "conservative", format=fmt)}
    whole = cw.trim_turns(msgs, 10**6, format=fmt, **kw).report
    r = cw.trim_turns(msgs, 100, format=fmt, **kw).report
    assert r.fits and [f.index for f in r.fates if f.fate == "dropped"] == [2, 3]
    assert (
        (r.fates[1].fate, r.fates[1].rule)
        == (whole.fates[1].fate, whole.fates[1].rule)
        == ("repaired", "stub_inserted")
    )
    assert [(c.kind, c.index) for c in r.repairs] == [("stub_inserted", 1)]


# --- fresh49 #1: a screenshot sent after the tool messages goes with its call ------------------


def _shot(url: str = "https://example.com/s.png") -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url, "detail": "low"}}]}


def _call(i: int) -> list[dict[str, Any]]:
    call = {"id": f"c{i}", "type": "function", "function": {"name": "click", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{i}", "content": "ok"},
    ]


def test_fresh49_1_a_screenshot_after_tool_messages_joins_the_calls_unit() -> None:
    # OpenAI takes images in user messages only: a computer-use agent sends each
    # screenshot after the tool messages. Each one opened a turn, the last was the current
    # request and the task the oldest turn, which every trim dropped first.
    task = {"role": "user", "content": "Enable dark mode."}
    m: list[dict[str, Any]] = [{"role": "system", "content": "agent"}, task]
    for i in range(4):
        m += [*_call(i), _shot()]
    seg = cw.segment_turns(m)
    assert seg.turns == [(1, 14)]
    assert seg.units == [[2, 3, 4], [5, 6, 7], [8, 9, 10], [11, 12, 13]]
    # a screenshot in a unit is what a tool showed, not a real user message: the task is
    # the current request (fresh50 #1), as it is in the Anthropic shape
    assert seg.current_request == 1
    assert cw.validate(m, "openai") == []
    # a budget for the system, the task and the newest two calls with their screenshots,
    # one token short of three: the oldest two units go whole, screenshots included
    t = cw.message_tokens(m, "fim")
    unit = sum(t[2:5])
    assert t[2:5] * 4 == t[2:] and t[4] > 700  # every unit alike; an image is most of it
    budget = t[0] + t[1] + 3 * unit - 1
    r = cw.trim_turns(m, budget, profile="fim")
    assert r.report.fits and r.report.tokens_after == t[0] + t[1] + 2 * unit
    assert r.messages == [m[0], task, *m[8:14]]
    assert [f.fate for f in r.report.fates] == ["kept", "kept"] + ["dropped"] * 6 + ["kept"] * 6
    body = json.dumps({"messages": m}).encode()
    assert json.loads(cw.fit_request(body, budget=budget, profile="fim"))["messages"] == r.messages
    for out in (cw.fit(m, budget, profile="fim").messages, cw.prune_middle(m, budget, profile="fim").messages):
        assert task in out and m[13] in out
        assert all(x in out for x in m[11:13])  # the newest call stays with its screenshot


def _png(w: int, h: int) -> str:
    """A base64 PNG of just a signature and an IHDR chunk: enough for its size."""
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    head = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr
    return base64.b64encode(head + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))).decode()


def _computer_use(task: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One computer-use session in both shapes: OpenAI (each screenshot in a user message
    after the tool message) and Anthropic (each inside its tool_result)."""
    oa: list[dict[str, Any]] = [{"role": "system", "content": "cu agent"}, {"role": "user", "content": task}]
    an: list[dict[str, Any]] = [{"role": "system", "content": "cu agent"}, {"role": "user", "content": task}]
    for i in range(4):
        fn = {"name": "click", "arguments": "{}"}
        oa += [
            {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function", "function": fn}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": "ok, screenshot attached below"},
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64," + _png(1280 + i, 800)}}
                ],
            },
        ]
        image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _png(1280 + i, 800)}}
        result = {
            "type": "tool_result",
            "tool_use_id": f"t{i}",
            "content": [{"type": "text", "text": "ok, screenshot attached below"}, image],
        }
        an += [
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "click", "input": {}}]},
            {"role": "user", "content": [result]},
        ]
    return oa, an


def test_fresh50_1_a_long_computer_use_task_is_cut_as_the_request_in_both_shapes() -> None:
    # the last screenshot was the current request in the OpenAI shape, so the task, the
    # turn's opener, was neither request nor reply: no rule cut it, and a task longer than
    # the budget made every trim return fits=False (4,695 tokens at 3,500) and the guard
    # raise; the Anthropic shape, screenshots inside the tool_result, cut it and fit
    oa, an = _computer_use("TASK: " + "Fill in the long form with these details. " * 400)
    assert cw.segment_turns(oa).current_request == cw.segment_turns(an).current_request == 1
    assert cw.count_messages(oa[:2]) > 3500  # the task alone is over the budget
    for m in (oa, an):
        r = cw.trim_turns(m, 3500)
        assert r.report.fits and r.report.tokens_after <= 3500
        assert (r.report.fates[1].fate, r.report.fates[1].rule) == ("truncated", "request_truncated")
        assert r.messages[-1] == m[-1]  # the newest screenshot stays, with its call
        assert cw.validate(r.messages, "openai" if m is oa else "anthropic") == []
        f = cw.fit(m, 3500)
        assert f.report.fits and (f.report.fates[1].fate, f.report.fates[1].rule) == ("truncated", "request_truncated")
        guard = cw.ContextGuard(cw.resolve_budget(context_window=4500, max_output_tokens=1000, floor=0))
        assert guard.check(m).fits
        assert cw.priorities(m)[1] == 0  # the request: P0
        body = json.dumps({"messages": m}).encode()
        assert json.loads(cw.fit_request(body, budget=3500))["messages"] == r.messages
    # the OpenAI session keeps the newest unit whole: call, result and screenshot
    r = cw.trim_turns(oa, 3500)
    assert r.messages[2:] == oa[11:14]
    # the engine and the reference agree on who is a real user message where it stands
    can = cw.adapters.to_canonical(oa)
    assert ref.real_users(can) == [False, True] + [False] * 12
    assert ref.last_real_user(can) == 1 and ref.segment(can).current_request == 1
    assert ref.real_users(can[:2]) == [False, True] and ref.last_real_user(can[:1]) is None


def test_fresh51_2_a_blank_caption_is_no_text_for_the_screenshot_rule() -> None:
    # an agent that always sends a text part beside the screenshot sent an empty one; that
    # made each screenshot open a turn, so the task was the oldest turn, dropped first
    image = {"type": "image_url", "image_url": {"url": "https://x/s.png", "detail": "low"}}
    task = {"role": "user", "content": "Book a flight to Paris. " * 20}
    m: list[dict[str, Any]] = [{"role": "system", "content": "You operate a computer."}, task]
    for i, caption in enumerate(["", " ", "\n\t\r ", ""]):
        m += [*_call(i), {"role": "user", "content": [{"type": "text", "text": caption}, image]}]
    seg = cw.segment_turns(m)
    assert seg.turns == [(1, 14)] and seg.current_request == 1
    assert seg.units == [[2, 3, 4], [5, 6, 7], [8, 9, 10], [11, 12, 13]]
    r = cw.trim_turns(m, 400)
    assert r.messages[1] == task and r.report.fits
    # the reference reads them alike
    can = cw.adapters.to_canonical(m)
    assert [ref.is_media_only(x) for x in can] == [False, False] + [False, False, True] * 4
    assert ref.segment(can).turns == [(1, 14)]
    # a caption with a word is the user's: it opens a turn; a blank text alone, with no
    # image, asks nothing and opens none (fresh53 #1)
    worded = [*m[:5], {"role": "user", "content": [{"type": "text", "text": "."}, image]}]
    assert cw.segment_turns(worded).turns == [(1, 5), (5, 6)]
    blank = [*m[:5], {"role": "user", "content": [{"type": "text", "text": " "}]}]
    assert cw.segment_turns(blank).turns == [(1, 6)]
    assert ref.segment(cw.adapters.to_canonical(blank)).turns == [(1, 6)]
    # every whitespace character and every character that shows nothing is blank, in Rust
    # and the reference alike (fresh53 #3: only four characters were)
    for odd in ("\x0b", "\u00a0", "\u2028", "\x85", "\u3000", "\u200b", "\u2800"):
        other = [*m[:5], {"role": "user", "content": [{"type": "text", "text": odd}, image]}]
        assert cw.segment_turns(other).turns == [(1, 6)], repr(odd)
        assert ref.segment(cw.adapters.to_canonical(other)).turns == [(1, 6)]


def test_fresh50_2_a_call_in_a_tool_struct_is_reported_and_removed() -> None:
    # the dicts refuse tool_calls on a tool message; a struct could hold a ToolCall there:
    # validate called it only unwritable (OpenAI), and repair kept it, or dropped it with
    # its message with no call_removed
    tc = cw.ToolCall(id="a", name="f", arguments='{"blob": "z"}')
    q = cw.Message(role="user", content=[cw.TextPart(text="q")])
    asks = cw.Message(role="assistant", content=[cw.ToolCall(id="c", name="g", arguments="{}")])
    both = cw.Message(role="tool", content=[cw.ToolResult(call_id="c", content=[cw.TextPart(text="r")]), tc])
    m = [q, asks, both]
    # (the writer refuses it too, for what this names and repair mends: not reported twice)
    assert [(v.index, v.code, v.detail) for v in cw.validate(m, "openai")] == [
        (2, "call_outside_assistant", "a tool message holds tool calls")
    ]
    r = cw.repair_tool_pairs(m)
    assert [(c.kind, c.index, c.call_id) for c in r.report.repairs] == [("call_removed", 2, "a")]
    assert r.messages[:2] == [q, asks] and r.messages[0] is q
    assert r.messages[2] == cw.Message(role="tool", content=[both.content[0]])
    assert cw.validate(r.messages, "openai") == []
    assert m[2] is both and len(both.content) == 2  # the input is as it was
    t = cw.trim_turns(m, 10_000)
    assert t.messages == r.messages and (t.report.fates[2].fate, t.report.fates[2].rule) == ("repaired", "call_removed")
    # a tool message holding only a call: dropped, and the call named
    alone = [q, asks, cw.Message(role="tool", content=[tc])]
    r = cw.repair_tool_pairs(alone)
    assert [(c.kind, c.index, c.call_id) for c in r.report.repairs] == [
        ("stub_inserted", 1, "c"),
        ("call_removed", 2, "a"),
        ("message_dropped", 2, None),
    ]
    # the reference repairs them alike
    for msgs in (m, alone):
        work, changes = ref.repair(msgs, "openai", "stub")
        assert [(c.kind, c.index, c.call_id) for c in changes] == [
            (c.kind, c.index, c.call_id) for c in cw.repair_tool_pairs(msgs).report.repairs
        ]
        assert [it.msg(msgs) for it in work] == cw.repair_tool_pairs(msgs).messages


def _session(system: str, task: str, steps: Iterable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """A system prompt, a task, then each step's messages in order."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": task}]
    for step in steps:
        out += step
    return out


def test_fresh52_1_a_one_turn_text_action_session_loses_its_oldest_steps() -> None:
    # the README tells a text-action agent to prefix observations with [Tool results], so
    # the session is one turn with the task as its request; trim_turns then dropped no
    # step (a command and its observation) but cut every one to its marker: at 1,000 all
    # 120 were cut and 2,121 tokens were left, fits=False, where fit fit
    t = _session(
        "You are an agent.",
        "Fix the failing test in utils.py.",
        (
            [
                {"role": "assistant", "content": f"Let me run step {i}: grep -n foo src/file{i}.py"},
                {"role": "user", "content": f"[Tool results] src/file{i}.py:12: foo = bar({i})"},
            ]
            for i in range(60)
        ),
    )
    assert cw.segment_turns(t).turns == [(1, 122)]
    tokens = cw.message_tokens(t)
    kept = t[:2] + t[-42:]  # the newest 21 steps, whole; one more would not fit
    assert sum(tokens[:2]) + sum(tokens[-42:]) <= 1000 < sum(tokens[:2]) + sum(tokens[-44:])
    r = cw.trim_turns(t, 1000)
    assert r.report.fits and r.messages == kept and r.report.tokens_after == sum(cw.message_tokens(kept))
    assert [(f.fate, f.rule) for f in r.report.fates[2:80]] == [("dropped", "oldest_tool_unit")] * 78
    body = json.dumps({"messages": t}).encode()
    assert json.loads(cw.fit_request(body, budget=1000))["messages"] == kept
    # the reference drops the same steps
    out, rep = ref.trim_turns(cw.adapters.to_canonical(t), 1000, "conservative")
    assert [src for src, _ in out] == [0, 1, *range(80, 122)] and rep.tokens_after == r.report.tokens_after
    # a step whose observation holds a screenshot goes whole too (it removed nothing)
    image = {"type": "image_url", "image_url": {"url": "https://x/s.png"}}
    shots = t[:2]
    for i in range(4):
        shots += [
            {"role": "assistant", "content": f"click {i}"},
            {"role": "user", "content": [{"type": "text", "text": f"[Tool results] clicked {i}"}, image]},
        ]
    r = cw.trim_turns(shots, 1500)
    assert r.report.fits and r.messages == shots[:2] + shots[-2:]
    # the Anthropic shape too: roles still alternate
    r = cw.trim_turns(t[1:], 1000, format="anthropic")
    assert r.report.fits and cw.validate(r.messages, "anthropic") == [] and r.messages[0] == t[1]


def test_fresh52_6_a_request_is_never_cut_to_an_invisible_character_and_its_marker() -> None:
    # a request starting with a character that shows nothing was cut to that character
    # and the marker, reported to fit: none of its words left
    text = "\u0645\u0631\u062d\u0628\u0627 " * 1000
    # (U+2800 BRAILLE PATTERN BLANK is no default-ignorable, but shows nothing: fresh53 #6)
    for pre in ("\u202e", "\u200b", "\u2060", "\u00ad", "\ufeff", "\u034f", "\U000e0041", "\u2800"):
        m = [{"role": "user", "content": pre + text}]
        r = cw.trim_turns(m, 20)
        assert r.messages == m and not r.report.fits, repr(pre)
        assert ref._wordless(pre) and ref._wordless(pre + " \n" + pre)
    # a letter is a word: cut to it and the marker, it fits (the rule is unchanged)
    r = cw.trim_turns([{"role": "user", "content": text}], 20)
    assert r.report.fits and r.messages[0]["content"].startswith("\u0645\u0631\n[... ")
    assert not ref._wordless("a\u200b") and not ref._wordless("\u00a0x")
    # the reference keeps it whole too
    out, rep = ref.trim_turns(cw.adapters.to_canonical([{"role": "user", "content": "\u200b" + text}]), 20)
    assert out == [(0, None)] and not rep.fits


def test_fresh54_3_a_request_is_never_cut_to_combining_marks_alone() -> None:
    # a cut kept only a lone U+0301 from the tail and the marker, reported to fit: a mark
    # with no base character to attach to is no word
    m = [{"role": "system", "content": "sys"}, {"role": "user", "content": "\u0301" * 400 + "Fix it" + "\u0301" * 400}]
    r = cw.trim_turns(m, 24)
    assert r.messages == m and not r.report.fits
    assert cw.fit(m, 24).messages == m
    body = json.dumps({"messages": m}).encode()
    assert json.loads(cw.fit_request(body, budget=24))["messages"] == m
    out, rep = ref.trim_turns(cw.adapters.to_canonical(m), 24)
    assert out == [(0, None), (1, None)] and not rep.fits
    # Extend, SpacingMark and ZWJ are marks; a letter, a digit or a symbol is a word
    assert ref._wordless("\u0301\u094d\u093f\u200d \u20dd")
    assert not any(ref._wordless(t) for t in ("e\u0301", "1", "\u2600", "\u0e01"))
    # with its base kept, a cut keeps the marks after it (the rule is unchanged)
    r = cw.trim_turns([{"role": "user", "content": "e\u0301 fix " * 400}], 24)
    assert r.report.fits and r.messages[0]["content"].startswith("e\u0301")


def test_fresh53_2_a_screenshot_after_an_observation_goes_with_its_step() -> None:
    # a text-action agent (pyautogui) gets a text observation and a screenshot after each
    # command; each screenshot opened a turn, so the task was the oldest turn, dropped
    image = {"type": "image_url", "image_url": {"url": "https://example.com/s.png", "detail": "low"}}
    m = _session(
        "You operate a desktop.",
        "Enable dark mode in Settings.",
        (
            [
                {"role": "assistant", "content": f"pyautogui.click({i * 10}, 20)"},
                {"role": "user", "content": "[Tool results]\n" + "screen text\n" * 150},
                {"role": "user", "content": [image]},
            ]
            for i in range(3)
        ),
    )
    seg = cw.segment_turns(m)
    assert (seg.turns, seg.units, seg.current_request) == ([(1, 11)], [], 1)
    can = cw.adapters.to_canonical(m)
    assert ref.after_observations(can) == [False] * 4 + [True, False, False, True, False, False, True]
    assert ref.real_users(can) == [False, True] + [False] * 9
    # the steps go whole, oldest first, screenshot and all; the task stays
    t = cw.message_tokens(m)
    step = sum(t[8:11])  # the newest step; the budget leaves no room for another
    r = cw.trim_turns(m, t[0] + t[1] + step)
    assert r.report.fits and r.messages == [*m[:2], *m[8:]]
    assert json.loads(cw.fit_request(json.dumps({"messages": m}).encode(), budget=t[0] + t[1] + step))["messages"] == (
        r.messages
    )
    f = cw.fit(m, 800)
    assert f.report.fits and m[1] in f.messages
    out, _ = ref.trim_turns(can, t[0] + t[1] + step)
    assert [src for src, _ in out] == [0, 1, 8, 9, 10]
    # an image alone after the assistant's answer is still the user's
    tail = [*m, {"role": "assistant", "content": "done"}, {"role": "user", "content": [image]}]
    assert cw.segment_turns(tail).current_request == 12


def test_fresh54_1_a_text_action_command_is_never_cut_as_a_reply() -> None:
    # the newest step's command is its call: it was cut to its marker as "the reply"
    # (reply_shrunk), at 60 too, where the trim did not fit anyway
    req = (
        "Fix the crash in parser.py when the input file is empty; keep the public API unchanged and add a regression "
        "test. "
    ) * 4
    command = "I will look at the parser first.\n```\nopen parser.py\n```"
    ta: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": req},
        {"role": "assistant", "content": command},
        {"role": "user", "content": "[Tool results]\n" + "def parse(x):\n    return x\n" * 10},
    ]
    r = cw.trim_turns(ta, 130)
    assert r.report.fits and r.report.tokens_after <= 130 and r.messages[2] == ta[2]
    assert [(f.fate, f.rule) for f in r.report.fates] == [
        ("kept", "preamble"),
        ("truncated", "request_truncated"),
        ("kept", "kept_turn"),
        ("truncated", "tool_result_shrunk"),
    ]
    r = cw.trim_turns(ta, 60)
    assert not r.report.fits and r.messages[2] == ta[2] and r.report.fates[2].rule == "kept_turn"
    assert json.loads(cw.fit_request(json.dumps({"messages": ta}).encode(), budget=60))["messages"] == r.messages
    out, _ = ref.trim_turns(cw.adapters.to_canonical(ta), 60)
    assert out[2] == (2, None)
    # an answer after the last observation is a reply still, cut before the request is
    answered = [*ta, {"role": "assistant", "content": "The parser is fine. " * 30}]
    r = cw.trim_turns(answered, 300)
    assert r.messages[2] == ta[2] and r.report.fates[4].rule == "reply_shrunk"


def test_fresh49_1_which_media_messages_join_a_unit() -> None:
    task = {"role": "user", "content": "q"}
    answer = {"role": "assistant", "content": "done"}
    # two screenshots in a row after the results both join; so do a file and audio
    audio = {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}
    m = [task, *_call(0), _shot(), audio, answer]
    assert cw.segment_turns(m).units == [[1, 2, 3, 4]]
    assert cw.segment_turns(m).turns == [(0, 6)]
    # images alone after the assistant's answer are the user's: they open a turn
    m = [task, *_call(0), answer, _shot()]
    seg = cw.segment_turns(m)
    assert seg.units == [[1, 2]] and seg.turns == [(0, 4), (4, 5)] and seg.current_request == 4
    # an image with text is the user's too
    with_text = {"role": "user", "content": [{"type": "text", "text": "see"}, _shot()["content"][0]]}
    assert cw.segment_turns([task, *_call(0), with_text]).turns == [(0, 3), (3, 4)]
    # after an orphan result (no unit) a screenshot opens a turn
    orphan = {"role": "tool", "tool_call_id": "zz", "content": "ok"}
    assert cw.segment_turns([task, answer, orphan, _shot()]).turns == [(0, 3), (3, 4)]
    # the Rust engine and the reference agree
    for msgs in ([task, *_call(0), _shot(), audio, answer], [task, *_call(0), answer, _shot()]):
        can = cw.adapters.to_canonical(msgs)
        assert ref.segment(can).units == cw.segment_turns(msgs).units
