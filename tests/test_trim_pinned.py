"""``trim_turns(pinned=...)`` and ``trim_turn_count(pinned=...)``: input indices pinned like
``Message.pinned`` (dicts have no such field), on the dict reader, the struct path and the
pure-Python engine (a token counter). Values worked out by hand with the ``fim`` profile:
text tokens = floor(3 * ASCII / 12), at least 1, plus 4 per message; ``"a" * 40`` is 14
tokens as a message, ``"s"`` 5, the breadcrumb 16 as an OpenAI message.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import contextwindow as cw
from contextwindow.adapters import message_to_anthropic, message_to_openai
from contextwindow.messages import Message, TextPart

import strategies as strat

BC = cw.BREADCRUMB


def chat() -> list[dict[str, Any]]:
    """A system prompt (5 tokens) and three turns of 28, 28 and 14 tokens: 75 in all."""
    return [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "a" * 40},
        {"role": "assistant", "content": "a" * 40},
        {"role": "user", "content": "b" * 40},
        {"role": "assistant", "content": "b" * 40},
        {"role": "user", "content": "c" * 40},
    ]


def heads(r: cw.TrimResult[Any]) -> list[str]:
    return [m["content"][:1] if m["content"] != BC else "BC" for m in r.messages]


def test_trim_turns_keeps_the_turn_of_a_pinned_index() -> None:
    msgs = chat()
    before = copy.deepcopy(msgs)
    # unpinned: 5 + 16 (breadcrumb) + 14 = 35 <= 50; with turn 2 too, 63
    r = cw.trim_turns(msgs, 50, profile="fim")
    assert heads(r) == ["s", "BC", "c"]
    assert r.report.tokens_after == 35
    # the pinned user message (index 1) keeps turn 1: 5 + 28 + 14 = 47, and the breadcrumb
    # (16 more: 63) is left out, as it fits only without it
    for pins in ([1], (2,), {1, 2}, range(1, 3)):
        r = cw.trim_turns(msgs, 50, profile="fim", pinned=pins)
        assert heads(r) == ["s", "a", "a", "c"], pins
        assert (r.report.tokens_after, r.report.fits, r.report.dropped_turns) == (47, True, 1)
        assert r.messages[1] is msgs[1] and r.messages[2] is msgs[2]
    # pinning in turn 2 keeps turn 2 instead
    assert heads(cw.trim_turns(msgs, 50, profile="fim", pinned=[4])) == ["s", "b", "b", "c"]
    # the preamble and the newest turn stay anyway: pinning them changes nothing
    unpinned = cw.trim_turns(msgs, 50, profile="fim")
    assert cw.trim_turns(msgs, 50, profile="fim", pinned=[0, 5]) == unpinned
    assert msgs == before


def test_trim_turn_count_keeps_the_turn_of_a_pinned_index() -> None:
    msgs = chat()
    assert heads(cw.trim_turn_count(msgs, 1, profile="fim")) == ["s", "BC", "c"]
    r = cw.trim_turn_count(msgs, 1, profile="fim", pinned=[2])
    # the breadcrumb goes before the first kept turn after a dropped one
    assert heads(r) == ["s", "a", "a", "BC", "c"]
    assert r.report.kept_turns == 2


def test_pinned_indices_equal_pinned_structs() -> None:
    """The same conversation as structs with ``Message.pinned`` set gives the same trim."""
    msgs = chat()
    structs = [cw.adapters.openai_to_message(m, i) for i, m in enumerate(msgs)]
    flagged = [msgspec.structs.replace(m, pinned=i == 3) for i, m in enumerate(structs)]
    for budget in (40, 50, 63, 75):
        want = cw.trim_turns(flagged, budget, profile="fim")
        got = cw.trim_turns(msgs, budget, profile="fim", pinned=[3])
        assert [message_to_openai(m) for m in want.messages] == got.messages, budget
        assert want.report == got.report, budget


def test_pinned_with_a_token_counter() -> None:
    """The pure-Python engine (a counter: 10 tokens a message) takes the pins too."""
    msgs = chat()
    r = cw.trim_turns(msgs, 50, token_counter=lambda ms: 10, pinned=[1])
    # 5 messages of 10: system, turn 1 (pinned), the breadcrumb, the newest turn
    assert heads(r) == ["s", "a", "a", "BC", "c"]
    assert r.report.tokens_after == 50
    assert heads(cw.trim_turns(msgs, 50, token_counter=lambda ms: 10)) == ["s", "BC", "b", "b", "c"]
    r = cw.trim_turn_count(msgs, 1, token_counter=lambda ms: 10, pinned=[4])
    assert heads(r) == ["s", "BC", "b", "b", "c"]


@pytest.mark.parametrize("counter", [None, lambda ms: 14])
def test_a_changed_message_comes_back_pinned_as_it_came_in(counter: Any) -> None:
    """A pinned-by-index struct that the trim changes (here the breadcrumb goes into it,
    the first kept user message of a plain chat) keeps ``pinned=False``."""
    texts = [("user", "a"), ("assistant", "a"), ("user", "b"), ("assistant", "b"), ("user", "c")]
    msgs = [Message(role=r, content=[TextPart(text=t * 40)]) for r, t in texts]
    r = cw.trim_turns(msgs, 60, profile=None if counter else "fim", token_counter=counter, pinned=[2])
    first = r.messages[0]
    assert [p.text for p in first.content] == [BC, "b" * 40]
    assert first.pinned is False
    assert r.messages[1:] == msgs[3:]
    assert all(not m.pinned for m in msgs)


@pytest.mark.parametrize(
    ("pinned", "error", "words"),
    [
        ([6], ValueError, "pinned index 6 is not a message index (0..5)"),
        ([-1], ValueError, "pinned index -1 is not a message index (0..5)"),
        ("1", TypeError, "pinned must be a collection of message indices, got str"),
        (1, TypeError, "pinned must be a collection of message indices, got int"),
        ([1.5], TypeError, "pinned must hold message indices (int), got float"),
        ([True], TypeError, "pinned must hold message indices (int), got bool"),
    ],
)
def test_bad_pinned(pinned: Any, error: type[Exception], words: str) -> None:
    for fn, limit in ((cw.trim_turns, 50), (cw.trim_turn_count, 1)):
        with pytest.raises(error) as e:
            fn(chat(), limit, pinned=pinned)
        assert str(e.value) == words
        structs = [cw.adapters.openai_to_message(m, i) for i, m in enumerate(chat())]
        with pytest.raises(error) as e:
            fn(structs, limit, pinned=pinned)
        assert str(e.value) == words
    with pytest.raises(ValueError, match=r"pinned index 0 is not a message index \(there are no messages\)"):
        cw.trim_turns([], 10, pinned=[0])


@given(strat.case(), st.data())
def test_pinned_indices_match_pinned_structs(case: tuple[str, list[Message]], data: st.DataObject) -> None:
    """On generated conversations (tool units, orphans, both shapes) and budgets: dicts
    with ``pinned=`` trim as the same structs with those messages pinned do."""
    provider, structs = case
    pins = data.draw(st.sets(st.integers(0, max(0, len(structs) - 1)), max_size=3)) if structs else set()
    budget = data.draw(st.integers(0, 400))
    write = message_to_openai if provider == "openai" else message_to_anthropic
    read = cw.adapters.openai_to_message if provider == "openai" else cw.adapters.anthropic_to_message
    try:
        dicts = [write(m) for m in structs]
        structs = [read(d, i) for i, d in enumerate(dicts)]  # what the dicts say, exactly
        cw.count_messages(dicts, profile="fim", format=provider)
    except cw.InvalidMessageError:
        # a part the provider's dicts cannot hold (an image with no source), or dicts
        # the provider does not take (a developer message in Anthropic's)
        assume(False)
    # dicts have no pinned field: their pins are the drawn ones and the structs' own
    every = pins | {i for i, m in enumerate(case[1]) if m.pinned}
    flagged = [msgspec.structs.replace(m, pinned=i in every) for i, m in enumerate(structs)]
    want = cw.trim_turns(flagged, budget, profile="fim", format=provider)
    got = cw.trim_turns(dicts, budget, profile="fim", format=provider, pinned=every)
    assert got.messages == [write(m) for m in want.messages]
    assert got.report == want.report
    got = cw.trim_turns(structs, budget, profile="fim", format=provider, pinned=every)
    assert [write(m) for m in got.messages] == [write(m) for m in want.messages]
    assert got.report == want.report
    if provider == "openai":
        # the gateway on the same messages as a request body
        body = json.dumps({"model": "m", "messages": dicts}).encode()
        new, rep = cw.fit_request(body, budget=budget, profile="fim", provider="openai", pinned=every, report=True)
        assert json.loads(new)["messages"] == [write(m) for m in want.messages]
        assert rep.report == want.report
    want = cw.trim_turn_count(flagged, 1, profile="fim", format=provider)
    got = cw.trim_turn_count(dicts, 1, profile="fim", format=provider, pinned=every)
    assert got.messages == [write(m) for m in want.messages]
    assert got.report == want.report


def test_fit_request_pinned() -> None:
    """The gateway's ``pinned``: indices into the body's ``messages`` array (an Anthropic
    top-level ``system`` is not in it)."""
    body = json.dumps({"model": "m", "messages": chat()}).encode()
    new = cw.fit_request(body, budget=50, profile="fim")
    assert json.loads(new)["messages"] == cw.trim_turns(chat(), 50, profile="fim").messages
    new, rep = cw.fit_request(body, budget=50, profile="fim", pinned=[1], report=True)
    want = cw.trim_turns(chat(), 50, profile="fim", pinned=[1])
    assert json.loads(new)["messages"] == want.messages
    assert [m["content"][:1] for m in want.messages] == ["s", "a", "a", "c"]
    assert rep.report == want.report
    assert cw.fit_request(body, budget=50, profile="fim", pinned=[1]) == new
    # Anthropic: the system prompt is top-level, so message 0 of the array is the user's
    anthropic = {"model": "m", "max_tokens": 10, "system": "s", "messages": chat()[1:]}
    new = cw.fit_request(json.dumps(anthropic).encode(), budget=50, profile="fim", pinned=[0])
    got = json.loads(new)
    assert got["system"] == "s"
    assert [m["content"][:1] for m in got["messages"]] == ["a", "a", "c"]
    dicts = [{"role": "system", "content": "s"}, *chat()[1:]]
    want = cw.trim_turns(dicts, 50, profile="fim", format="anthropic", pinned=[1])
    assert got["messages"] == want.messages[1:]


@pytest.mark.parametrize(
    ("pinned", "error", "words"),
    [
        ([6], ValueError, "invalid argument pinned: index 6 is not an index of the body's messages (0..5)"),
        ([2, 99], ValueError, "invalid argument pinned: index 99 is not an index of the body's messages (0..5)"),
        # a new user's finding: a negative index named no range, as a positive one does
        ([-1], ValueError, "invalid argument pinned: index -1 is not an index of the body's messages (0..5)"),
        ([-3, 2, 99], ValueError, "invalid argument pinned: index -3 is not an index of the body's messages (0..5)"),
        (
            [2**64],
            ValueError,
            "invalid argument pinned: index 18446744073709551616 is not an index of the body's messages (0..5)",
        ),
        ("1", TypeError, "pinned must be a collection of message indices, got str"),
        ([None], TypeError, "pinned must hold message indices (int), got NoneType"),
    ],
)
def test_fit_request_bad_pinned(pinned: Any, error: type[Exception], words: str) -> None:
    body = json.dumps({"messages": chat()}).encode()
    for report in (False, True):
        with pytest.raises(error) as e:
            cw.fit_request(body, budget=50, pinned=pinned, report=report)
        assert str(e.value) == words


def test_fit_request_negative_pinned_names_the_range_as_every_pinned_taker() -> None:
    # the range of the body's messages after a lifted Anthropic system, "there are none"
    # for an empty array, and a body the engine refuses named first, as for an index past it
    anthropic = json.dumps({"model": "m", "max_tokens": 5, "system": "s", "messages": chat()[1:]}).encode()
    for body, words in [
        (anthropic, "index -1 is not an index of the body's messages (0..4)"),
        (b'{"messages": []}', "index -1 is not an index of the body's messages (there are none)"),
    ]:
        with pytest.raises(ValueError) as e:
            cw.fit_request(body, budget=50, pinned=[-1])
        assert str(e.value) == f"invalid argument pinned: {words}"
    with pytest.raises(cw.InvalidRequestError, match="is a number, not a list"):
        cw.fit_request(b'{"messages": 5}', budget=50, pinned=[-1])
    # the other functions taking pinned= name the range for a negative index too
    msgs = chat()
    words = "pinned index -1 is not a message index (0..5)"
    for call in (
        lambda: cw.fit(msgs, 50, policy=cw.FitPolicy(pinned=[-1])),
        lambda: cw.trim_turns(msgs, 50, pinned=[-1]),
        lambda: cw.trim_turn_count(msgs, 1, pinned=[-1]),
        lambda: cw.budget_tool_results(msgs, 1000, pinned=[-1]),
        lambda: cw.micro_compact(msgs, pinned=[-1]),
        lambda: cw.prune_middle(msgs, 50, pinned=[-1]),
    ):
        with pytest.raises(ValueError) as e:
            call()
        assert str(e.value) == words


def test_cli_fit_pin(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """``fit --pin N``: N indexes the file's messages (an Anthropic top-level ``system`` is
    not one of them); out of range: exit 2 naming it."""
    from contextwindow.cli import main

    body = tmp_path / "oai.json"
    body.write_text(json.dumps({"model": "m", "messages": chat()}))
    out = tmp_path / "out.json"
    assert main(["fit", str(body), "--budget", "50", "--profile", "fim", "--pin", "1", "-o", str(out)]) == 0
    assert [m["content"][:1] for m in json.loads(out.read_text())["messages"]] == ["s", "a", "a", "c"]
    anthropic = tmp_path / "ant.json"
    anthropic.write_text(json.dumps({"model": "m", "max_tokens": 5, "system": "s", "messages": chat()[1:]}))
    assert (
        main(["fit", str(anthropic), "--budget", "50", "--profile", "fim", "--pin", "0", "--pin", "0", "-o", str(out)])
        == 0
    )
    got = json.loads(out.read_text())
    assert (got["system"], [m["content"][:1] for m in got["messages"]]) == ("s", ["a", "a", "c"])
    capsys.readouterr()
    assert main(["fit", str(anthropic), "--budget", "50", "--pin", "5"]) == 2
    err = capsys.readouterr().err
    assert f"{anthropic}: --pin 5 is not an index of the file's messages (0..4)" in err
    assert main(["fit", str(anthropic), "--budget", "50", "--pin", "-1"]) == 2
    assert "--pin -1 is not an index of the file's messages (0..4)" in capsys.readouterr().err


def _fim_counter(msgs: list[Any]) -> int:
    """``fim`` as a token counter (the pure-Python engine) on dicts or structs of one
    ASCII text each (the breadcrumb is one): 4 per message plus floor(3 * chars / 12),
    at least 1."""

    def text(m: Any) -> str:
        if isinstance(m, dict):
            return m["content"] if isinstance(m["content"], str) else "".join(b["text"] for b in m["content"])
        return "".join(p.text for p in m.content if isinstance(p, TextPart))

    return sum(4 + max(1, 3 * len(text(m)) // 12) for m in msgs)


def rules(r: cw.TrimResult[Any]) -> list[str]:
    return [f.rule for f in r.report.fates]


@pytest.mark.parametrize("engine", ["rust", "python"])
def test_a_turn_kept_for_its_pin_is_named_pinned_turn(engine: str) -> None:
    """fresh35 #2: a pinned old turn that a trim had to keep read ``kept_turn``, as if the
    budget had kept it. Turns of 28, 28 and 14 tokens after a 5-token system prompt.
    Turn 1 pinned, budget 50: turn 2 goes (47 left, the breadcrumb would make it 63),
    turn 1 stayed for its pin: ``pinned_turn``. Turn 2 pinned, budget 63: turn 1 goes,
    the breadcrumb fits (5 + 16 + 28 + 14), turn 2 would have stayed anyway:
    ``kept_turn``. ``trim_turn_count(1)`` with turn 1 pinned: turn 2 goes (``turn_limit``),
    turn 1 is older than the newest turn: ``pinned_turn``."""
    kw: dict[str, Any] = {"profile": "fim"} if engine == "rust" else {"token_counter": _fim_counter}
    r = cw.trim_turns(chat(), 50, pinned=[1], **kw)
    assert (r.report.fits, r.report.tokens_after) == (True, 47)
    assert rules(r) == ["preamble", "pinned_turn", "pinned_turn", "oldest_turn", "oldest_turn", "kept_turn"]
    r = cw.trim_turns(chat(), 63, pinned=[3], **kw)
    assert (r.report.fits, r.report.tokens_after) == (True, 63)
    assert rules(r) == ["preamble", "oldest_turn", "oldest_turn", "kept_turn", "kept_turn", "kept_turn"]
    r = cw.trim_turn_count(chat(), 1, pinned=[1], **kw)
    assert rules(r) == ["preamble", "pinned_turn", "pinned_turn", "turn_limit", "turn_limit", "kept_turn"]
    # a pinned old turn that keeps the trim over its budget (the tester's case): the
    # turns that could go were not enough
    m = [
        Message(role="system", content=[TextPart(text="s")]),
        Message(role="user", content=[TextPart(text="pinned fact " * 50)], pinned=True),
        Message(role="assistant", content=[TextPart(text="ok " * 200)]),
        Message(role="user", content=[TextPart(text="q")]),
    ]
    r = cw.trim_turns(m, 100, **kw)
    assert not r.report.fits and rules(r) == ["preamble", "pinned_turn", "pinned_turn", "kept_turn"]
    # trim_turn_count where the only older turn is pinned: nothing goes (the input comes
    # back, no reason), and the fates say why two turns stay under a limit of one (they
    # said `fits` for every message)
    two = chat()[:5]
    r = cw.trim_turn_count(two, 1, pinned=[1], **kw)
    assert (r.messages, r.report.reason, r.report.kept_turns, r.report.dropped_turns) == (two, None, 2, 0)
    assert rules(r) == ["preamble", "pinned_turn", "pinned_turn", "kept_turn", "kept_turn"]
    assert rules(cw.trim_turn_count(two, 2, pinned=[1], **kw)) == ["fits"] * 5


def test_pinned_as_a_mapping_is_refused() -> None:
    """fresh36 #5: ``pinned={1: 2}`` pinned message 1 (a dict iterates its keys); a
    mapping is a mistake (``priorities``-style input), a TypeError as for FitPolicy."""
    with pytest.raises(TypeError, match="pinned must be a collection of message indices, got dict"):
        cw.trim_turns(chat(), 50, pinned={1: 2})
    with pytest.raises(TypeError, match="pinned must be a collection of message indices, got dict"):
        cw.fit_request(json.dumps({"messages": chat()}).encode(), budget=50, pinned={1: 2})


def test_a_pinned_orphan_result_is_dropped_by_the_repair_on_every_path() -> None:
    """fresh44 #6, documented under Shapes and pinning: the pair repair runs before the pins
    are weighed, so a pinned tool result that answers no call goes (the request would be
    refused with it), named ``orphan_result``; the other messages stay."""
    m = [
        {"role": "user", "content": "q"},
        {"role": "tool", "tool_call_id": "zz", "content": "important output"},
        {"role": "user", "content": "next"},
    ]
    given = copy.deepcopy(m)
    for out in (
        cw.trim_turns(m, 1000, pinned=[1]),
        cw.prune_middle(m, 1000, pinned=[1]),
        cw.fit(m, 1000, cw.FitPolicy(pinned=[1])),
    ):
        fate = out.report.fates[1]
        assert (fate.fate, fate.rule) == ("dropped", "orphan_result")
        assert "dropped" not in (out.report.fates[0].fate, out.report.fates[2].fate)
        assert all("tool_call_id" not in x for x in out.messages)
        assert out.messages[-1] is m[-1]
    assert m == given
