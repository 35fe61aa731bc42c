"""trim_turns / trim_turn_count rules on small conversations, values worked out by hand.

All use the ``fim`` profile: text tokens = floor((3 * ASCII + 8 * other) / 12), at least 1,
plus 4 per message. ``"a" * 40`` is 10 tokens, so such a message costs 14; the breadcrumb
(50 ASCII characters) is 12 tokens, 16 as an OpenAI message.
"""

from __future__ import annotations

from typing import Any

import contextwindow as cw
from contextwindow import _reference as ref
from contextwindow._engine import _OUTCOME, encode_messages, native
from contextwindow.messages import RESULTS_REMOVED, Message, TextPart, ToolCall, ToolResult

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


def test_request_is_cut_only_when_that_makes_it_fit() -> None:
    msgs = [{"role": "system", "content": "s" * 400}, u("q" * 400)]  # 104 + 104
    r = cw.trim_turns(msgs, 150, profile="fim")
    # 108 + floor((k + 34) / 4) <= 150 -> k = 137: head 69, tail 68, 263 removed
    assert r.messages[1]["content"] == "q" * 69 + "\n[... 263 characters removed ...]\n" + "q" * 68
    assert r.report.tokens_after == 150 and r.report.fates[1].rule == "request_truncated"
    # at 100 even a fully cut request (marker only, 8 tokens) leaves 116: keep it whole
    r2 = cw.trim_turns(msgs, 100, profile="fim")
    assert all(x is y for x, y in zip(r2.messages, msgs, strict=True)) and r2.report.fits is False


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
    assert cw.validate(r.messages, "anthropic") == []
    engine = _OUTCOME.decode(native.trim_turns(encode_messages(msgs), 0, "conservative", True, "anthropic"))
    assert [(op.src, op.msg) for op in engine.messages] == ref.trim_turns(msgs, 0, "conservative", True, "anthropic")[0]


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
    turn (10) would only grow it, so the input comes back. At 5 the last message alone
    fits without the breadcrumb (fresh8 N1: it used to say fits=False, 15 tokens)."""
    msgs = [u("a"), a("k"), u("x")]
    r = cw.trim_turns(msgs, 4, profile="fim", format="openai")
    assert r.report.fits is False and r.report.tokens_after == 15
    assert all(x is y for x, y in zip(r.messages, msgs, strict=True))
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
