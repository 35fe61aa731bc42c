"""The breadcrumb never costs the current request (fresh8 N1).

The breadcrumb is a courtesy: it may cost whole old turns, never anything of the newest
turn. ``trim_turns`` returns the result with the breadcrumb when it fits and takes no more
of the newest turn (characters cut, tool-unit messages dropped) than the result without
it; else the result without it when that fits; else (neither fits) the smaller of the two
(the one with it on a tie).

Hand-worked values use the ``fim`` profile: text tokens = floor(ASCII / 4) (at least 1),
plus 4 per message; a tool call costs its name and argument text (``f`` + ``{}`` = 1 + 1).
The breadcrumb (49 ASCII characters) is 12 tokens: 16 as an OpenAI message of its own,
12 as an Anthropic leading text block.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_trim import a, call, result, u

import contextwindow as cw
from contextwindow.cli import main
from contextwindow.messages import Message

from shared_data import corpus_files, ids, load, need
from strategies import case

BC = cw.BREADCRUMB
REQ_TEXT = "Please fix the failing test in tests/test_io.py and explain the cause briefly."


SYS = {"role": "system", "content": "Be terse."}  # 9 ASCII: 2 + 4 = 6
REQ = u(REQ_TEXT)  # 78 ASCII: 19 + 4 = 23
OLD = [u("old question"), a("old answer")]  # 12 -> 3 + 4 = 7; 10 -> 2 + 4 = 6


def test_hand_costs() -> None:
    assert len(REQ_TEXT) == 78 and len(BC) == 49  # 19 and 12 tokens
    assert cw.message_tokens([SYS, *OLD, REQ], "fim", format="openai") == [6, 7, 6, 23]
    assert cw.message_tokens([call("c"), result("c", "r" * 40)], "fim", format="openai") == [6, 14]


@pytest.mark.parametrize("budget", range(29, 42))
def test_old_turn_cheaper_than_breadcrumb_goes_without_it(budget: int) -> None:
    """6 + 7 + 6 + 23 = 42. Dropping the old turn saves 13 but the breadcrumb message costs
    16 (6 + 16 + 23 = 45 > 42): with it, nothing was dropped and the request was cut to one
    letter (budgets 31-41) or nothing was done (29, 30). [system, request] = 29 fits whole."""
    m = [SYS, *OLD, REQ]
    r = cw.trim_turns(m, budget, profile="fim")
    assert r.messages[0] is SYS and r.messages[1] is REQ and len(r.messages) == 2
    assert (r.report.fits, r.report.tokens_after, r.report.breadcrumb) == (True, 29, False)
    assert [f.rule for f in r.report.fates] == ["preamble", "oldest_turn", "oldest_turn", "kept_turn"]
    assert r.report.truncated_messages == 0


def test_below_the_request_alone_the_request_is_cut_without_the_breadcrumb() -> None:
    """Budget 28 < 29: the request must be cut. Without the breadcrumb (old turn gone):
    6 + 4 + text <= 28, text <= 18 tokens <= 75 characters; the marker for 36 removed
    characters is 33 long, so 42 kept (head 21, tail 21). With it nothing could fit (old
    turn kept: 19 + 4 + 8-token marker = 31 > 28), so it used to say fits=False."""
    m = [SYS, *OLD, REQ]
    r = cw.trim_turns(m, 28, profile="fim")
    assert r.report.fits and r.report.tokens_after == 28 and not r.report.breadcrumb
    cut = REQ_TEXT[:21] + "\n[... 36 characters removed ...]\n" + REQ_TEXT[-21:]
    assert [x["content"] for x in r.messages] == ["Be terse.", cut]
    assert r.report.fates[3].chars_removed == 36


def test_the_breadcrumb_stays_when_it_fits_with_the_request_whole() -> None:
    """A huge old answer (3,300 ASCII: 825 + 4 = 829): dropping it always helps. At 45 the
    breadcrumb fits (6 + 16 + 23); at 29-44 the request goes whole without it (the
    breadcrumb variant cut the request to 'Please fix ... e brief' at 40)."""
    m = [SYS, OLD[0], a("old answer " * 300), REQ]
    assert cw.count_messages(m, "fim") == 6 + 7 + 829 + 23
    r45 = cw.trim_turns(m, 45, profile="fim", format="openai")
    assert [x["content"] for x in r45.messages] == ["Be terse.", BC, REQ_TEXT]
    assert (r45.report.fits, r45.report.tokens_after, r45.report.breadcrumb) == (True, 45, True)
    for budget in range(29, 45):
        r = cw.trim_turns(m, budget, profile="fim", format="openai")
        assert [x["content"] for x in r.messages] == ["Be terse.", REQ_TEXT], budget
        assert (r.report.fits, r.report.tokens_after, r.report.breadcrumb) == (True, 29, False)


def test_plain_chat_openai() -> None:
    """[old q, old a, request] = 7 + 6 + 23 = 36; the breadcrumb message (16) costs more
    than the old turn (13): from 23 (the request alone) to 35 the request goes whole (was:
    fits=False at 23-24, the request cut at 25-35)."""
    m = [*OLD, REQ]
    for budget in range(23, 36):
        r = cw.trim_turns(m, budget, profile="fim", format="openai")
        assert len(r.messages) == 1 and r.messages[0] is REQ, budget
        assert (r.report.fits, r.report.tokens_after, r.report.breadcrumb) == (True, 23, False)
    assert all(x is y for x, y in zip(cw.trim_turns(m, 36, profile="fim").messages, m, strict=True))


def test_plain_chat_anthropic() -> None:
    """As a leading text block the breadcrumb costs 12 < 13: dropping the old turn helps,
    and at 35 (23 + 12) it fits with it. At 23-34 it would need the request cut (the
    tester's case: cut to nothing next to the breadcrumb at 25), so it is left out."""
    m = [*OLD, REQ]
    for budget in range(23, 35):
        r = cw.trim_turns(m, budget, profile="fim", format="anthropic")
        assert len(r.messages) == 1 and r.messages[0] is REQ, budget
        assert (r.report.fits, r.report.tokens_after, r.report.breadcrumb) == (True, 23, False)
    r = cw.trim_turns(m, 35, profile="fim", format="anthropic")
    assert r.messages == [
        {"role": "user", "content": [{"type": "text", "text": BC}, {"type": "text", "text": REQ_TEXT}]}
    ]
    assert (r.report.fits, r.report.tokens_after, r.report.breadcrumb) == (True, 35, True)


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_plain_chat_conservative_budgets_20_to_30(fmt: str) -> None:
    """The tester's plain chat with the default profile: whenever the request alone fits,
    the result fits with the request whole, and the breadcrumb is there exactly when the
    request fits whole next to it (checked against ``breadcrumb=False``)."""
    m = [*OLD, REQ]
    alone = cw.count_messages([REQ], format=fmt)
    # the breadcrumb: a message of its own (OpenAI) or a leading text block (no overhead)
    crumb = cw.count_messages([u(BC)], format=fmt) if fmt == "openai" else cw.estimate_tokens(BC)
    total = cw.count_messages(m, format=fmt)
    assert total >= 25  # the budgets below reach under it (the old turn must go)
    for budget in range(20, min(31, total)):
        r = cw.trim_turns(m, budget, format=fmt)
        bare = cw.trim_turns(m, budget, breadcrumb=False, format=fmt)
        if alone <= budget:
            assert r.report.fits and r.report.truncated_messages == 0, budget
            assert r.report.tokens_after == alone + (crumb if r.report.breadcrumb else 0), budget
            assert r.report.breadcrumb == (alone + crumb <= budget), budget
        if not r.report.breadcrumb:
            assert r.messages == bare.messages and r.report == bare.report


def test_a_tool_unit_of_the_newest_turn_is_not_dropped_for_the_breadcrumb() -> None:
    """old turn 14 + 14; newest turn: q 5, call 6 + result 14, call 6 + result 14, done 5
    = 50; total 78. With the breadcrumb (16) it needs 66: at 50-65 the old code dropped the
    first tool unit (20) to make room for it; now the turn stays whole, without it."""
    m = [u("a" * 40), a("b" * 40), u("q"), call("c1"), result("c1", "r" * 40)]
    m += [call("c2"), result("c2", "y" * 40), a("done")]
    assert cw.count_messages(m, "fim") == 78
    for budget in (50, 57, 65):
        r = cw.trim_turns(m, budget, profile="fim")
        assert all(x is y for x, y in zip(r.messages, m[2:], strict=True)) and len(r.messages) == 6
        assert (r.report.fits, r.report.tokens_after, r.report.breadcrumb) == (True, 50, False)
    r = cw.trim_turns(m, 66, profile="fim")
    assert r.messages[0]["content"] == BC and r.messages[1:] == m[2:]
    assert (r.report.fits, r.report.tokens_after, r.report.breadcrumb) == (True, 66, True)


def test_a_tool_result_is_not_cut_more_for_the_breadcrumb() -> None:
    """old turn 28; newest turn: q 5, call 6, result of 400 ASCII 104, done 5 = 120.
    Budget 110, without the breadcrumb: others 20, text <= 90 tokens <= 363 characters:
    330 kept + a 33-character marker (70 removed). With it (16 more) 135 would go; the
    result without it is returned."""
    m = [u("a" * 40), a("b" * 40), u("q"), call("c1"), result("c1", "r" * 400), a("done")]
    assert cw.count_messages(m, "fim") == 148
    r = cw.trim_turns(m, 110, profile="fim")
    assert (r.report.fits, r.report.tokens_after, r.report.breadcrumb) == (True, 110, False)
    assert r.messages[2]["content"] == "r" * 165 + "\n[... 70 characters removed ...]\n" + "r" * 165
    assert r.report.fates[4].chars_removed == 70


def test_nothing_fits_gives_the_smaller_variant() -> None:
    """Budget 10: even the request cut to its 33-character marker (4 + 8 = 12) is over, so
    it stays whole. With the breadcrumb nothing is dropped (the old turn's 13 <= the
    breadcrumb's 16: the input, 36 tokens); without it the old turn goes (23, still
    over). Neither fits: the smaller comes back, the one without the breadcrumb. It was
    the one with it, the input whole, while budget 29 gave 29 tokens: a larger budget
    kept fewer tokens (fresh14 #7)."""
    m = [*OLD, REQ]
    r = cw.trim_turns(m, 10, profile="fim", format="openai")
    assert not r.report.fits and r.report.tokens_after == 23 and r.report.reason == "token_budget"
    assert r.messages == [REQ] and r.messages[0] is REQ and not r.report.breadcrumb
    assert [f.rule for f in r.report.fates] == ["oldest_turn", "oldest_turn", "kept_turn"]
    bare = cw.trim_turns(m, 10, profile="fim", format="openai", breadcrumb=False)
    assert bare.report == r.report


def test_nothing_fits_never_keeps_more_than_a_larger_budget() -> None:
    """The fresh tester's case (conservative): costs 5, 6, 5, 7 (4 per message). Below 12
    nothing fits; with the breadcrumb (about 14 tokens) dropping the old turn (11) would
    grow the conversation, so that variant is the input (23). The result is [system,
    request] (12) at every budget from 0 to 22, the input from 23 on; before, budgets 0-11
    gave the input whole and 12-22 two messages (at 3 per message: 4, 5, 4, 6, 10, 19)."""
    m = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hello there"},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "q2"},
    ]
    assert cw.message_tokens(m) == [5, 6, 5, 7]
    body = json.dumps({"messages": m}).encode()
    kept = []
    for budget in range(0, 26):
        r = cw.trim_turns(m, budget)
        want = m if budget >= 23 else [m[0], m[3]]
        assert r.messages == want, budget
        assert r.report.fits == (budget >= 12)
        out, rep = cw.fit_request(body, budget=budget, report=True)
        assert json.loads(out)["messages"] == want and rep.report.tokens_after == r.report.tokens_after
        kept.append(r.report.tokens_after)
    assert kept == [12] * 23 + [23] * 3


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_fit_request_same_bytes(fmt: str) -> None:
    """The gateway runs the same engine: the same choice on the same bytes."""
    body = json.dumps({"model": "m", "messages": [SYS, *OLD, REQ] if fmt == "openai" else [*OLD, REQ]}).encode()
    out, req = cw.fit_request(body, budget=30, profile="fim", provider=fmt, report=True)
    rep = req.report
    assert json.loads(out)["messages"] == ([SYS, REQ] if fmt == "openai" else [REQ])
    assert (rep.fits, rep.tokens_after, rep.breadcrumb, rep.truncated_messages) == (
        True,
        29 if fmt == "openai" else 23,
        False,
        0,
    )


class _Stdin:
    def __init__(self, data: bytes) -> None:
        import io

        self.buffer = io.BytesIO(data)


def test_cli_fit_keeps_the_last_message(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The tester's JSONL: three one-letter messages of n tokens each (conservative: 3 per
    message and 1 for the letter, 4; 5 when the tester found it); at budget n the last
    message alone fits (it said DOES NOT FIT, exit 1)."""
    body = b'{"role":"user","content":"a"}\n{"role":"assistant","content":"b"}\n{"role":"user","content":"c"}'
    n = cw.message_tokens([u("c")])[0]
    assert cw.message_tokens([u("a"), a("b"), u("c")]) == [n, n, n] and n in (4, 5)
    monkeypatch.setattr("sys.stdin", _Stdin(body))
    assert main(["fit", "-", "--budget", str(n)]) == 0
    got = capsys.readouterr()
    assert [json.loads(line) for line in got.out.splitlines()] == [u("c")]
    assert got.err.startswith(f"<stdin>: {3 * n} -> {n} tokens (budget {n}) fits")


FILES = corpus_files()


@pytest.mark.parametrize("path", need(FILES, "../shared/corpus"), ids=ids(FILES) or None)
def test_corpus_breadcrumb_never_costs_the_newest_turn(path: Path) -> None:
    """For sampled budgets: whenever ``breadcrumb=False`` fits with nothing taken from the
    newest turn, ``trim_turns`` does too (the tester found 56 of 8,929 trims that cut the
    request or said fits=False). Budgets: 12 spread over the whole range, plus every budget
    from just under the size of the preamble and newest turn to 40 over it (where the
    breadcrumb decides)."""
    doc = load(path)
    msgs, fmt = doc["messages"], doc["format"]
    total = cw.count_messages(msgs, format=fmt)
    floor = cw.trim_turn_count(msgs, 1, breadcrumb=False, format=fmt).report.tokens_after
    budgets = sorted({total * k // 12 for k in range(12)} | set(range(max(0, floor - 3), floor + 40, 2)))
    for budget in budgets:
        bare = cw.trim_turns(msgs, budget, breadcrumb=False, format=fmt).report
        whole = bare.fits and bare.truncated_messages == 0
        whole = whole and not any(f.rule == "oldest_tool_unit" for f in bare.fates)
        if whole:
            r = cw.trim_turns(msgs, budget, format=fmt).report
            assert r.fits and r.truncated_messages == 0, budget
            assert not any(f.rule == "oldest_tool_unit" for f in r.fates), budget


def _loss(rep: cw.FitReport) -> tuple[int, int]:
    return sum(f.chars_removed for f in rep.fates), sum(f.rule == "oldest_tool_unit" for f in rep.fates)


@pytest.mark.parametrize("engine", ["rust", "python"])
def test_a_breadcrumb_that_could_not_go_in_costs_no_turn(engine: str) -> None:
    """Found by hypothesis (``test_generated_the_rule_holds``): turns 1, 5 and 6 pinned,
    Anthropic, budget 29 (1% of 2,946 tokens). Without the breadcrumb, dropping turns 2
    and 3 fits (20 tokens). With it, the breadcrumb before turn 4 did not fit, so turn 4
    went too, and then none went in: the message after the dropped turns (5) has no
    content, which cannot take one. The result dropped 3 messages where 2 fit. Since
    fresh53 #1 the empty messages open no turn: the pinned first one is in the first
    image's turn and pins it, the second image is the request with the rest in its turn,
    and nothing can go (fits=False, the input whole, no breadcrumb)."""
    thinking = cw.OpaquePart(type="thinking", raw={"type": "thinking", "thinking": ""})
    image = cw.ImagePart(source="https://example.com/a.png")
    msgs = [
        Message(role="system", content=[cw.TextPart(text="")]),
        Message(role="user", content=[], pinned=True),
        Message(role="user", content=[thinking, image]),
        Message(role="user", content=[thinking, image]),
        Message(role="user", content=[cw.TextPart(text="")]),
        Message(role="user", content=[], pinned=True),
        Message(role="user", content=[], pinned=True),
    ]
    if engine == "rust":
        kw: dict[str, Any] = {"profile": "conservative"}
    else:
        kw = {"token_counter": lambda ms: cw.count_messages(ms, "conservative", format="anthropic")}
    assert cw.count_messages(msgs, "conservative", format="anthropic") == 2946
    r = cw.trim_turns(msgs, 29, format="anthropic", **kw).report
    assert (r.fits, r.tokens_after, r.dropped_messages, r.breadcrumb) == (False, 2946, 0, False)
    assert cw.segment_turns(msgs, format="anthropic").turns == [(1, 3), (3, 7)]


@given(case(), st.integers(0, 110), st.sampled_from(["conservative", "fim", "bytes4"]))
def test_generated_the_rule_holds(c: tuple[str, list[Message]], pct: int, profile: str) -> None:
    """On generated conversations: the result is one of the two variants, chosen by the
    rule (the breadcrumb's when it fits and loses no more of the newest turn, then the
    bare one when it fits, then the breadcrumb's)."""
    provider, msgs = c
    budget = cw.count_messages(msgs, profile, format=provider) * pct // 100
    r = cw.trim_turns(msgs, budget, profile=profile, format=provider).report
    bare = cw.trim_turns(msgs, budget, profile=profile, format=provider, breadcrumb=False).report
    if bare.fits and _loss(bare) == (0, 0):
        assert r.fits and _loss(r) == (0, 0)
    if r.fits and bare.fits:
        assert _loss(r)[0] <= _loss(bare)[0] and _loss(r)[1] <= _loss(bare)[1]
    if bare.fits:
        assert r.fits
    if r.breadcrumb is False and r != bare and bare.fits and r.reason is not None:
        # the breadcrumb's variant without a breadcrumb: it kept an old turn the bare run
        # dropped, since dropping it would have cost the breadcrumb more than it saved
        # (found by hypothesis: an empty old user message, 3 tokens, kept at budgets where
        # both runs drop the same tool units of the newest turn); never less than bare keeps
        assert r.fits and r.dropped_messages < bare.dropped_messages


def _newest_turn_must_lose_a_unit(old: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``old`` then a newest turn of 208 ``fim`` tokens: the request 23, call ``c`` 6,
    its result of 600 characters 154, call ``d`` 6, its result 14, the answer 5."""
    return [*old, REQ, call("c"), result("c", "r" * 600), call("d"), result("d", "r" * 40), a("done")]


@pytest.mark.parametrize("engine", ["rust", "python"])
@pytest.mark.parametrize("breadcrumb", [True, False])
def test_old_turns_come_back_once_the_newest_turn_lost_a_unit(engine: str, breadcrumb: bool) -> None:
    """fresh41 #1. Three old turns of 13 tokens and the newest turn of 208, budget 150:
    with every old turn gone the newest turn is over (208, 224 with the breadcrumb), so
    its older unit goes (160), leaving 48. The three old turns (39) then fit again, so
    they come back, and with them no breadcrumb is needed: 87 tokens with or without it.
    Before, 64 came back with the breadcrumb and 48 without (all old turns lost)."""
    m = _newest_turn_must_lose_a_unit(OLD * 3)
    assert cw.count_messages(m, "fim", format="openai") == 39 + 208
    kw: dict[str, Any] = {"profile": "fim"}
    if engine == "python":
        kw = {"token_counter": lambda ms: cw.count_messages(ms, "fim", format="openai")}
    r = cw.trim_turns(m, 150, breadcrumb=breadcrumb, **kw)
    assert (r.report.fits, r.report.tokens_after, r.report.breadcrumb) == (True, 87, False)
    assert (r.report.dropped_turns, r.report.dropped_messages) == (0, 2)
    assert [f.index for f in r.report.fates if f.fate == "dropped"] == [7, 8]
    assert {f.rule for f in r.report.fates[:6]} == {"kept_turn"}
    assert all(x is y for x, y in zip(r.messages, m[:7] + m[9:], strict=True))


@pytest.mark.parametrize("engine", ["rust", "python"])
def test_old_turns_come_back_newest_first_and_only_while_each_fits(engine: str) -> None:
    """Old turns of 13, 13 and 106 tokens, the large one newest; the newest turn loses its
    older unit at budgets under 224 (208 + the breadcrumb's 16), leaving 48.
    - 150: the large old turn does not fit with the breadcrumb (48 + 106 + 16 = 170), so
      none comes back (the two small ones are older, and turns go oldest first): 64.
    - 180: it comes back (170); the next one does not (170 + 13 = 183): 170.
    - 200: that one comes back (183), then the oldest, which needs no breadcrumb:
      48 + 106 + 26 = 180."""
    big = [u("q" * 384), a("a" * 8)]
    m = _newest_turn_must_lose_a_unit([*OLD, *OLD, *big])
    assert cw.message_tokens(m, "fim", format="openai")[:6] == [7, 6, 7, 6, 100, 6]
    kw: dict[str, Any] = {"profile": "fim"}
    if engine == "python":
        kw = {"token_counter": lambda ms: cw.count_messages(ms, "fim", format="openai")}
    want = {150: ([0, 1, 2, 3, 4, 5], 64, True), 180: ([0, 1, 2, 3], 170, True), 200: ([], 180, False)}
    for budget, (turns_gone, tokens, crumb) in want.items():
        r = cw.trim_turns(m, budget, **kw).report
        assert [f.index for f in r.fates if f.fate == "dropped"] == [*turns_gone, 7, 8], budget
        assert (r.fits, r.tokens_after, r.breadcrumb) == (True, tokens, crumb), budget
        assert r.dropped_turns == len(turns_gone) // 2


@pytest.mark.parametrize("engine", ["rust", "python"])
@pytest.mark.parametrize("blank", ["", " ", "\n", [], [{"type": "text", "text": ""}], [{"type": "text", "text": " "}]])
def test_no_breadcrumb_goes_into_a_message_of_blank_text(engine: str, blank: Any) -> None:
    """fresh41 #5: an Anthropic user message of ``""``, whitespace or empty text blocks
    holds nothing, as ``[]`` does: the breadcrumb went in beside the blank block, which
    stayed (the API refuses it either way). Since fresh53 #1 such a message opens no turn
    at all: it goes with the turn before it, and the breadcrumb goes into the next real
    user message, the request."""
    m = [u("old " * 100), a("a"), u(blank), a("b"), u("new")]
    kw: dict[str, Any] = {"profile": "conservative"}
    if engine == "python":
        kw = {"token_counter": lambda ms: cw.count_messages(ms, "conservative", format="anthropic")}
    r = cw.trim_turns(m, 30, format="anthropic", **kw)
    crumb = {"type": "text", "text": cw.BREADCRUMB}
    assert r.messages == [u([crumb, {"type": "text", "text": "new"}])]
    assert (r.report.breadcrumb, r.report.dropped_turns, r.report.fits) == (True, 1, True)
    assert [f.rule for f in r.report.fates] == [*["oldest_turn"] * 4, "breadcrumb_added"]


@pytest.mark.parametrize("engine", ["rust", "python"])
def test_the_breadcrumb_keeps_no_smaller_unit_of_the_newest_turn(engine: str) -> None:
    """fresh42 #2. Messages cost 5, 5 (an old turn of 10), 7 (the request), then the
    units a = 37 + 6, b = 37 + 15, c = 37 + 103; 252 in all, budget 201.
    - With the breadcrumb on, the old turn stays: dropping it (10) would not pay for the
      breadcrumb (16). The newest turn then drops a and b (10 + 7 + 140 = 157) and puts
      back a, the only one that fits (200): 52 tokens of units lost, and no breadcrumb.
    - Without it, the old turn goes, a goes (7 + 52 + 140 = 199), nothing comes back:
      43 tokens of units lost.
    Loss counted in units (one each) chose the first; in tokens it loses more of the
    newest turn, so the second comes back with the breadcrumb on too."""
    msgs = [u("hi"), a("ok"), u("Fix it."), call("a"), result("a", "data "), call("b"), result("b", "data " * 10)]
    msgs += [call("c"), result("c", "data " * 100)]
    assert cw.message_tokens(msgs, "conservative", format="openai") == [5, 5, 7, 37, 6, 37, 15, 37, 103]
    kw: dict[str, Any] = {"profile": "conservative"}
    if engine == "python":
        kw = {"token_counter": lambda ms: cw.count_messages(ms, "conservative", format="openai")}
    for breadcrumb in (True, False):
        r = cw.trim_turns(msgs, 201, breadcrumb=breadcrumb, **kw)
        assert (r.report.fits, r.report.tokens_after, r.report.breadcrumb) == (True, 199, False)
        assert [f.index for f in r.report.fates if f.fate == "dropped"] == [0, 1, 3, 4]
        assert [m.get("tool_call_id") for m in r.messages if m["role"] == "tool"] == ["b", "c"]
