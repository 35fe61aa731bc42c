"""The Rust engine and ``contextwindow._reference`` agree exactly (DESIGN.md invariant 7).

Both run on the same canonical messages (the JSON the engine reads, decoded back, so
lone surrogates are already U+FFFD for both) and must return the same ops, messages,
token counts, cut positions and reports.
"""

from __future__ import annotations

import msgspec
from hypothesis import example, given
from hypothesis import strategies as st

from contextwindow import _reference as ref
from contextwindow._engine import _OUTCOME, encode_messages
from contextwindow._engine import native as rs
from contextwindow.messages import Message, OpaquePart, TextPart, ToolCall, ToolResult
from contextwindow.report import Segmentation

from strategies import anthropic_agent, case, conversation, image_part

PROFILES = ["conservative", "cl100k", "tekken", "fim", "bytes4"]


def canon(msgs: list[Message]) -> tuple[bytes, list[Message]]:
    payload = encode_messages(msgs)
    return payload, msgspec.json.decode(payload, type=list[Message])


def ops(out: str) -> tuple[list[tuple[int | None, Message | None]], object]:
    o = _OUTCOME.decode(out)
    return [(op.src, op.msg) for op in o.messages], o.report


@given(case(), st.sampled_from(PROFILES))
def test_message_tokens_agree(c: tuple[str, list[Message]], profile: str) -> None:
    _, msgs = c
    payload, cm = canon(msgs)
    assert rs.count_messages(payload, profile) == [ref.message_tokens(m, ref.PROFILES[profile]) for m in cm]


@given(st.lists(image_part(), min_size=1, max_size=3), st.sampled_from(PROFILES), st.booleans())
def test_image_tokens_agree(parts: list, profile: str, in_result: bool) -> None:
    """Images alone (and inside a tool result), so every header path is compared."""
    content = [ToolResult(call_id="c1", content=parts)] if in_result else parts
    payload, cm = canon([Message(role="user", content=content)])
    assert rs.count_messages(payload, profile) == [ref.message_tokens(m, ref.PROFILES[profile]) for m in cm]


@given(st.text(), st.sampled_from(PROFILES))
def test_text_tokens_agree(text: str, profile: str) -> None:
    from contextwindow._jsontext import clean_str

    t = clean_str(text)
    assert rs.estimate_text(t, profile) == ref.text_tokens(t, ref.PROFILES[profile])
    for family in ("cl100k", "tekken"):
        got = dict(rs.count_features(t, family))
        assert got.pop("bytes") == len(t.encode("utf-8"))
        assert got == ref.features(t, ref.VOCABS[family])


# Text the scanner treats specially: CJK and symbol n-grams, prefixes, line breaks, long
# pieces.
_PIECES = st.sampled_from(
    [" ", "  ", "\n", "\r\n", "\t", "    ", ".", "(", "))", "!!\n", " -", "a", "Hello", "world", "parseHTTP",
     "Response", "x" * 17, "abcdefghijklmnop", "123", "4567", "你好", "世界", "こんにちは", "한국어", "é", "Привет",
     "🙂", "\u200d", "\U00020000", "\x00", "ทดสอบ", "_name", "'s", "ab\u0301",
     # a space before these joins them (" 교육", " 수", " 있다", " 東京" are Tekken tokens);
     # box drawing runs are symbol n-grams
     "교육", "체계", "수", "있다", "東京", "데이터", "─", "──", "───", "╭", "→",
     # capitals: ASCII, 2-byte (Cyrillic, Greek, Latin-1), 3-byte (ẞ, fullwidth), astral
     "HELLO", "INTERNATIONALIZATION", "ПРИВЕТ", "Ж", "ΑΘΗΝΑ", "Ü", "ẞ", "ＡＢ", "\U0001d400"]  # noqa: RUF001
)  # fmt: skip


@given(st.lists(_PIECES, max_size=40).map("".join), st.sampled_from(PROFILES))
def test_scanner_pieces_agree(text: str, profile: str) -> None:
    assert rs.estimate_text(text, profile) == ref.text_tokens(text, ref.PROFILES[profile])
    for family in ("cl100k", "tekken"):
        got = dict(rs.count_features(text, family))
        got.pop("bytes")
        assert got == ref.features(text, ref.VOCABS[family])


# ASCII text long enough for the engine's 64-byte fast path (features_words.rs): words,
# camelCase, spaces and indentation, line breaks, digits, punctuation runs, and now and
# then a byte the fast path leaves to the byte-by-byte loop.
_ASCII = st.sampled_from(
    ["the", "The", "quick", "I", "a", "camelCase", "HTTPServer", "don't", "e.g.", "abcdefghijklmnopq",
     " ", " ", " ", "  ", "\n", "\n\n", "\n  ", ", ", ". ", ".\n", ": ", " (", ") ", "{\"", "\": ",
     "->", "==", "---\n", "`", " `", "\n- ", "**", "12", "2024", "3.14", "\t", "\r\n", " \n", "é",
     "HELLO", " WORLD", "THE", "Ü"]
)  # fmt: skip


@given(st.lists(_ASCII, min_size=20, max_size=150).map("".join), st.sampled_from(PROFILES))
def test_ascii_fast_path_agrees(text: str, profile: str) -> None:
    assert rs.estimate_text(text, profile) == ref.text_tokens(text, ref.PROFILES[profile])
    for family in ("cl100k", "tekken"):
        got = dict(rs.count_features(text, family))
        got.pop("bytes")
        assert got == ref.features(text, ref.VOCABS[family])


# Long runs of CJK, kana and symbols, which the engine counts eight characters at a time
# on CPUs with AVX2 (features_cjk.rs, cl100k and conservative): 2- and 3-character
# tokens of both families (用户, 数据, 请输入, します ...), plain characters, full-width
# punctuation, and what ends a run or a block: hangul, an uppercase letter (Ḁ), a space,
# digits, ASCII, a 2-byte letter, emoji, a Devanagari letter (a 3-byte character of no
# n-gram group), box drawing.
_CJK = st.sampled_from(
    ["用户", "数据", "时间", "成功", "请输入", "用户名", "字符串", "します", "ました", "です", "この",
     "你", "好", "世", "界", "中", "文", "の", "は", "を", "日本語", "漢字", "。", "、", "「", "」", "！",  # noqa: RUF001
     "（", "・", "…", "→", "★"]  # noqa: RUF001
)  # fmt: skip
_BREAK = st.sampled_from(["한", "국어", "Ḁ", " ", "  ", "7", "2024", "x", "\n", "é", "🙂", "ख", "─", "──"])


@given(
    st.lists(st.one_of(st.lists(_CJK, min_size=1, max_size=40).map("".join), _BREAK), max_size=12).map("".join),
    st.sampled_from(PROFILES),
)
def test_cjk_runs_agree(text: str, profile: str) -> None:
    assert rs.estimate_text(text, profile) == ref.text_tokens(text, ref.PROFILES[profile])
    for family in ("cl100k", "tekken", "conservative"):
        got = dict(rs.count_features(text, family))
        got.pop("bytes")
        assert got == ref.features(text, ref.VOCABS[family])


@given(case())
def test_segment_agrees(c: tuple[str, list[Message]]) -> None:
    _, msgs = c
    payload, cm = canon(msgs)
    assert msgspec.json.decode(rs.segment_turns(payload), type=Segmentation) == ref.segment(cm)


@given(case(), st.sampled_from(["openai", "anthropic"]))
def test_validate_agrees(c: tuple[str, list[Message]], provider: str) -> None:
    _, msgs = c
    payload, cm = canon(msgs)
    got = [(v["index"], v["code"], v.get("call_id")) for v in msgspec.json.decode(rs.validate(payload, provider))]
    assert got == [(v.index, v.code, v.call_id) for v in ref.validate(cm, provider)]


_EMPTYISH = st.lists(
    st.sampled_from(
        [
            TextPart(text=""),
            TextPart(text="x"),
            TextPart(text=" "),
            TextPart(text="\x1c"),
            TextPart(text="\u3000\x85"),
            TextPart(text="ok "),  # a prefill ending in whitespace (trailing_whitespace)
            TextPart(text="a\u2028"),
            TextPart(text="b\x1f"),
            TextPart(text="", extra={"cache_control": {"type": "ephemeral"}}),
            ToolResult(call_id="c1", content=[TextPart(text=" ")]),
            ToolResult(call_id="c1", content=[TextPart(text="")], content_kind="parts"),
            ToolResult(call_id="c1", content=[TextPart(text="r"), TextPart(text="\t")], content_kind="text"),
            ToolResult(call_id="c1", content=[TextPart(text="\u200b")], content_kind="null"),
            ToolCall(id="c1", name="f", arguments="{}"),
            OpaquePart(type="thinking", raw={"type": "thinking", "thinking": ""}),
        ]
    ),
    max_size=3,
)


_EMPTYISH_MSGS = st.lists(
    st.builds(
        Message,
        role=st.sampled_from(["system", "user", "assistant"]),
        content=_EMPTYISH,
        content_kind=st.sampled_from([None, "text", "parts", "null", "absent"]),
        extra=st.sampled_from(
            [None, {"tool_calls": []}, {"tool_calls": None}, {"tool_calls": [1]}, {"k": []}, {"k": 1, "tool_calls": []}]
        ),
    ),
    max_size=5,
)


@given(_EMPTYISH_MSGS, st.sampled_from(["openai", "anthropic"]))
@example(
    [
        Message(role="user", content=[TextPart(text="q")]),
        Message(role="assistant", content=[TextPart(text="")], content_kind=None),
    ],
    "anthropic",
)
@example(
    [
        Message(role="user", content=[TextPart(text="q")]),
        Message(role="assistant", content=[TextPart(text="")], content_kind="text"),
    ],
    "anthropic",
)
@example(
    [
        Message(role="user", content=[TextPart(text="q")]),
        Message(role="assistant", content=[TextPart(text="")], content_kind="parts"),
    ],
    "anthropic",
)
@example(
    [
        Message(role="user", content=[TextPart(text="q")]),
        Message(role="assistant", content=[TextPart(text="", extra={"k": 1})]),
    ],
    "anthropic",
)
@example(
    [Message(role="assistant", content=[ToolCall(id="c1", name="f", arguments="{}")], extra={"tool_calls": []})],
    "openai",
)
@example(
    [
        Message(role="user", content=[TextPart(text="q")]),
        Message(role="assistant", content=[TextPart(text="x"), TextPart(text="ok ")], content_kind="parts"),
    ],
    "anthropic",
)
def test_validate_agrees_on_empty_content(msgs: list[Message], provider: str) -> None:
    """empty_content (fresh18 F2): no content, the string "", empty text blocks with and
    without extra keys, each content spelling, ``tool_calls`` in extra, final or not;
    text of whitespace only, in a message, a tool result's content list or the system
    (empty19 #1, #2); a final assistant message ending in whitespace (small20)."""
    payload, cm = canon(msgs)
    got = [(v["index"], v["code"], v.get("call_id")) for v in msgspec.json.decode(rs.validate(payload, provider))]
    assert got == [(v.index, v.code, v.call_id) for v in ref.validate(cm, provider)]


@given(case(), st.sampled_from(["stub", "drop"]))
def test_repair_agrees(c: tuple[str, list[Message]], missing: str) -> None:
    provider, msgs = c
    payload, cm = canon(msgs)
    assert ops(rs.repair_tool_pairs(payload, provider, missing, "conservative")) == ref.repair_tool_pairs(
        cm, missing, "conservative", provider
    )


@given(case(), st.integers(0, 100), st.sampled_from(PROFILES), st.booleans())
def test_trim_turns_agrees(c: tuple[str, list[Message]], pct: int, profile: str, breadcrumb: bool) -> None:
    provider, msgs = c
    payload, cm = canon(msgs)
    total = sum(ref.message_tokens(m, ref.PROFILES[profile]) for m in cm)
    budget = total * pct // 100
    got = ops(rs.trim_turns(payload, budget, profile, breadcrumb, provider))
    assert got == ref.trim_turns(cm, budget, profile, breadcrumb, provider)


@given(case(), st.integers(0, 5))
def test_trim_turn_count_agrees(c: tuple[str, list[Message]], max_turns: int) -> None:
    provider, msgs = c
    payload, cm = canon(msgs)
    got = ops(rs.trim_turn_count(payload, max_turns, "conservative", True, provider))
    assert got == ref.trim_turn_count(cm, max_turns, "conservative", True, provider)


@given(anthropic_agent(tool_structs=True), st.integers(0, 100), st.integers(0, 4), st.sampled_from(PROFILES))
def test_anthropic_agent_agrees(msgs: list[Message], pct: int, max_turns: int, profile: str) -> None:
    """Orphan-only carriers (placeholders) and interrupted calls (stubs that go with their
    call's turn), on alternating Anthropic conversations."""
    payload, cm = canon(msgs)
    assert msgspec.json.decode(rs.segment_turns(payload), type=Segmentation) == ref.segment(cm)
    for missing in ("stub", "drop"):
        got = ops(rs.repair_tool_pairs(payload, "anthropic", missing, profile))
        assert got == ref.repair_tool_pairs(cm, missing, profile, "anthropic")
    budget = sum(ref.message_tokens(m, ref.PROFILES[profile]) for m in cm) * pct // 100
    got = ops(rs.trim_turns(payload, budget, profile, True, "anthropic"))
    assert got == ref.trim_turns(cm, budget, profile, True, "anthropic")
    got = ops(rs.trim_turn_count(payload, max_turns, profile, True, "anthropic"))
    assert got == ref.trim_turn_count(cm, max_turns, profile, True, "anthropic")


def _n1_cases() -> list[tuple[str, list[Message]]]:
    """fresh8 N1: old turns that cost less than the breadcrumb, a huge old answer, tool
    units and a large tool result in the newest turn (see test_breadcrumb_request.py)."""
    from contextwindow.adapters import openai_to_message

    req = {"role": "user", "content": "Please fix the failing test in tests/test_io.py and explain the cause briefly."}
    sys_, old = (
        {"role": "system", "content": "Be terse."},
        [
            {"role": "user", "content": "old question"},
            {"role": "assistant", "content": "old answer"},
        ],
    )

    def call(cid: str) -> dict:
        fn = {"name": "f", "arguments": "{}"}
        return {"role": "assistant", "content": None, "tool_calls": [{"id": cid, "type": "function", "function": fn}]}

    def res(cid: str, text: str) -> dict:
        return {"role": "tool", "tool_call_id": cid, "content": text}

    head = [
        {"role": "user", "content": "a" * 40},
        {"role": "assistant", "content": "b" * 40},
        {"role": "user", "content": "q"},
    ]
    dicts = [
        ("openai", [sys_, *old, req]),
        ("openai", [*old, req]),
        ("anthropic", [*old, req]),
        ("openai", [sys_, old[0], {"role": "assistant", "content": "old answer " * 300}, req]),
        ("openai", [*head, call("c1"), res("c1", "r" * 40), call("c2"), res("c2", "y" * 40)]),
        ("openai", [*head, call("c1"), res("c1", "r" * 400), {"role": "assistant", "content": "done"}]),
        (
            "openai",
            [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}],
        ),
    ]
    return [(p, [openai_to_message(d, i) for i, d in enumerate(m)]) for p, m in dicts]


def test_breadcrumb_choice_agrees_on_n1_cases() -> None:
    """Every budget from 0 to 90 (where the variants differ: the newest turns cost 5-50)
    and around the conversation's size, every profile, with and without the breadcrumb:
    the engine and the reference pick the same variant, byte for byte."""
    for provider, msgs in _n1_cases():
        payload, cm = canon(msgs)
        for profile in PROFILES:
            total = sum(ref.message_tokens(m, ref.PROFILES[profile]) for m in cm)
            for budget in sorted(set(range(0, min(total, 90))) | {total - 1, total}):
                for breadcrumb in (True, False):
                    got = ops(rs.trim_turns(payload, budget, profile, breadcrumb, provider))
                    assert got == ref.trim_turns(cm, budget, profile, breadcrumb, provider), (profile, budget)


@st.composite
def merged_tool_messages(draw: st.DrawFn) -> list[Message]:
    """OpenAI conversations in which some tool messages hold several results (a
    ``Message`` struct can): a tool message's results go into the tool message before it,
    or into the last one anywhere before it (so one holds results for two assistant
    messages), or it stays (struct18 #5)."""
    msgs = draw(conversation("openai"))
    out: list[Message] = []
    last_tool: int | None = None
    for m in msgs:
        how = draw(st.integers(0, 2)) if m.role == "tool" and last_tool is not None else 0
        if how == 1 and out[-1].role == "tool":
            out[-1] = msgspec.structs.replace(out[-1], content=[*out[-1].content, *m.content])
        elif how == 2 and last_tool is not None:
            out[last_tool] = msgspec.structs.replace(out[last_tool], content=[*out[last_tool].content, *m.content])
        else:
            out.append(m)
        if out[-1].role == "tool":
            last_tool = len(out) - 1
    return out


@given(merged_tool_messages(), st.integers(0, 100), st.sampled_from(PROFILES))
def test_tool_messages_holding_several_results_agree(msgs: list[Message], pct: int, profile: str) -> None:
    """Rust and _reference split them alike, in repair, trim_turns and trim_turn_count."""
    payload, cm = canon(msgs)
    for missing in ("stub", "drop"):
        got = ops(rs.repair_tool_pairs(payload, "openai", missing, profile))
        assert got == ref.repair_tool_pairs(cm, missing, profile, "openai")
    budget = sum(ref.message_tokens(m, ref.PROFILES[profile]) for m in cm) * pct // 100
    got = ops(rs.trim_turns(payload, budget, profile, True, "openai"))
    assert got == ref.trim_turns(cm, budget, profile, True, "openai")
    got = ops(rs.trim_turn_count(payload, 2, profile, True, "openai"))
    assert got == ref.trim_turn_count(cm, 2, profile, True, "openai")


@given(merged_tool_messages(), st.sampled_from(["stub", "drop"]))
def test_repair_splits_tool_messages_holding_several_results(msgs: list[Message], missing: str) -> None:
    """The repaired conversation holds no tool message with several results, violates no
    OpenAI pairing rule (images outside user messages stay where they are), and a second
    repair changes nothing."""
    import contextwindow as cw

    r = cw.repair_tool_pairs(msgs, missing, format="openai")
    assert not any(m.role == "tool" and len(m.content) > 1 for m in r.messages)
    left = {"unwritable_message", "image_not_allowed", "block_not_allowed"}
    assert [v for v in cw.validate(r.messages, "openai") if v.code not in left] == []
    assert cw.repair_tool_pairs(r.messages, missing, format="openai").report.repairs == []


_SPACES = st.text(
    st.sampled_from([chr(c) for c in range(0x3001) if chr(c).isspace()] + ["\u180e", "\u200b", "x"]), max_size=3
)


@given(
    st.lists(st.tuples(_SPACES, st.sampled_from([None, "text", "parts"]), st.booleans()), min_size=1, max_size=4),
    st.sampled_from(["system", "user"]),
)
def test_validate_agrees_on_whitespace(texts: list[tuple[str, str | None, bool]], first: str) -> None:
    """empty19 #1: one set of whitespace (Unicode White_Space) in the engine and the
    reference, where ``str.isspace`` and ``char::is_whitespace`` part (U+001C..U+001F),
    in message text, tool result content and the system."""
    msgs = [Message(role=first, content=[TextPart(text="s")])]
    for k, (text, kind, in_result) in enumerate(texts):
        role = "assistant" if (k + (first == "system")) % 2 else "user"
        part: TextPart | ToolResult = TextPart(text=text)
        if in_result:
            part = ToolResult(call_id="c1", content=[TextPart(text=text)], content_kind=kind)  # type: ignore[arg-type]
        msgs.append(Message(role=role, content=[part], content_kind=kind))  # type: ignore[arg-type]
    payload, cm = canon(msgs)
    got = [(v["index"], v["code"], v.get("call_id")) for v in msgspec.json.decode(rs.validate(payload, "anthropic"))]
    assert got == [(v.index, v.code, v.call_id) for v in ref.validate(cm, "anthropic")]


@example(
    [
        Message(role="user", content=[TextPart(text="q")]),
        Message(
            role="assistant",
            content=[TextPart(text="x"), ToolCall(id="c1", name="f", arguments="{}")],
            extra={"a": 1, "tool_calls": []},
        ),
        Message(role="user", content=[TextPart(text="z")]),
    ],
    "openai",
    "drop",
)
@given(_EMPTYISH_MSGS, st.sampled_from(["openai", "anthropic"]), st.sampled_from(["stub", "drop"]))
def test_repair_agrees_on_empty_content(msgs: list[Message], provider: str, missing: str) -> None:
    """empty19 #3: dropping the last call of a message takes its ``"tool_calls": []``
    (the rest of ``extra`` kept in order), in the engine as in the reference."""
    payload, cm = canon(msgs)
    got = ops(rs.repair_tool_pairs(payload, provider, missing, "conservative"))
    assert got == ref.repair_tool_pairs(cm, missing, "conservative", provider)


@st.composite
def early_results(draw: st.DrawFn) -> tuple[str, list[Message]]:
    """Conversations where tool results come before their calls (moved20), ids shared or
    reused (``call_0``), beside user text, calls and results in place."""
    provider = draw(st.sampled_from(["openai", "anthropic"]))
    ids = st.sampled_from(["a", "b", "call_0"])
    msgs: list[Message] = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["user", "assistant", "results", "results", "calls", "calls"]))
        if kind == "user":
            msgs.append(Message(role="user", content=[TextPart(text=draw(st.sampled_from(["q", "next", "x y"])))]))
        elif kind == "assistant":
            msgs.append(Message(role="assistant", content=[TextPart(text="ok")]))
        elif kind == "calls":
            cids = draw(st.lists(ids, min_size=1, max_size=2, unique=True))
            msgs.append(Message(role="assistant", content=[ToolCall(id=c, name="f", arguments="{}") for c in cids]))
        else:
            rids = draw(st.lists(ids, min_size=1, max_size=2, unique=True))
            results = [ToolResult(call_id=c, content=[TextPart(text=f"out {c}")]) for c in rids]
            if provider == "openai":
                msgs.extend(Message(role="tool", content=[r]) for r in results)
            else:
                tail = [TextPart(text="see")] if draw(st.booleans()) else []
                msgs.append(Message(role="user", content=[*results, *tail]))
    return provider, msgs


@example(
    (
        "openai",
        [
            Message(role="user", content=[TextPart(text="hi")]),
            Message(role="tool", content=[ToolResult(call_id="c1", content=[TextPart(text="result text")])]),
            Message(role="assistant", content=[ToolCall(id="c1", name="f", arguments="{}")]),
            Message(role="user", content=[TextPart(text="next")]),
        ],
    ),
    "stub",
    50,
)
@given(early_results(), st.sampled_from(["stub", "drop"]), st.integers(0, 100))
def test_early_results_agree(c: tuple[str, list[Message]], missing: str, pct: int) -> None:
    """moved20: a result before its call moves after it where that is unambiguous, in the
    engine as in the reference (repair, trim_turns); the repaired list breaks no pairing
    rule and a second repair changes nothing."""
    import contextwindow as cw

    provider, msgs = c
    payload, cm = canon(msgs)
    got = ops(rs.repair_tool_pairs(payload, provider, missing, "conservative"))
    assert got == ref.repair_tool_pairs(cm, missing, "conservative", provider)
    budget = sum(ref.message_tokens(m, ref.PROFILES["fim"]) for m in cm) * pct // 100
    got = ops(rs.trim_turns(payload, budget, "fim", True, provider))
    assert got == ref.trim_turns(cm, budget, "fim", True, provider)
    r = cw.repair_tool_pairs(msgs, missing, format=provider)
    pairing = {"orphan_result", "duplicate_result", "unanswered_call", "result_outside_tool_message"}
    pairing |= {"result_outside_user_message", "duplicate_call", "call_outside_assistant", "result_after_content"}
    assert [v for v in cw.validate(r.messages, provider) if v.code in pairing] == []
    assert cw.repair_tool_pairs(r.messages, missing, format=provider).report.repairs == []


_CALL_IDS = st.sampled_from(["a", "b", "", "x.y", "toolu_ü", "call-0"])
_CALL_NAMES = st.sampled_from(["f", "", "a.b", "x" * 64, "x" * 65, "é"])


@given(st.lists(st.lists(st.tuples(_CALL_IDS, _CALL_NAMES), min_size=1, max_size=3), min_size=1, max_size=4))
def test_validate_agrees_on_call_ids_and_names(turns: list[list[tuple[str, str]]]) -> None:
    """fresh20b #4, #6: tool_use ids reused across messages and ids or names off
    Anthropic's patterns, reported alike by the engine and the reference."""
    msgs = [Message(role="user", content=[TextPart(text="go")])]
    for calls in turns:
        msgs.append(Message(role="assistant", content=[ToolCall(id=i, name=n, arguments="{}") for i, n in calls]))
        results = [ToolResult(call_id=i, content=[TextPart(text="r")]) for i, _ in calls]
        msgs.append(Message(role="user", content=results))
    payload, cm = canon(msgs)
    for provider in ("anthropic", "openai"):
        got = [(v["index"], v["code"], v.get("call_id")) for v in msgspec.json.decode(rs.validate(payload, provider))]
        assert got == [(v.index, v.code, v.call_id) for v in ref.validate(cm, provider)]


@given(anthropic_agent(tool_structs=True), st.data(), st.integers(0, 100))
def test_thinking_rules_agree(msgs: list[Message], data: st.DataObject, pct: int) -> None:
    """Thinking blocks anywhere in assistant messages (first, between parts, last, alone):
    validate's thinking_not_first / thinking_last, repair's drop rule and the trims'
    thinking anchor agree (fresh20b #1, #2)."""
    out = []
    for m in msgs:
        if m.role == "assistant" and data.draw(st.integers(0, 2)) == 0:
            kind = data.draw(st.sampled_from(["thinking", "redacted_thinking"]))
            at = data.draw(st.integers(0, len(m.content)))
            think = OpaquePart(type=kind, raw={"type": kind, "thinking": "t", "signature": "s"})
            m = msgspec.structs.replace(m, content=[*m.content[:at], think, *m.content[at:]])
        out.append(m)
    payload, cm = canon(out)
    got = [(v["index"], v["code"]) for v in msgspec.json.decode(rs.validate(payload, "anthropic"))]
    assert got == [(v.index, v.code) for v in ref.validate(cm, "anthropic")]
    for missing in ("stub", "drop"):
        got_ops = ops(rs.repair_tool_pairs(payload, "anthropic", missing, "fim"))
        assert got_ops == ref.repair_tool_pairs(cm, missing, "fim", "anthropic")
    budget = sum(ref.message_tokens(m, ref.PROFILES["fim"]) for m in cm) * pct // 100
    assert ops(rs.trim_turns(payload, budget, "fim", True, "anthropic")) == ref.trim_turns(
        cm, budget, "fim", True, "anthropic"
    )
