"""Hypothesis strategies: canonical conversations in OpenAI or Anthropic layout.

They produce what breaks context managers: parallel calls, results in any order, results
separated from their calls, orphan results, calls without results, ids reused across
turns, CJK, kana, hangul, emoji ZWJ sequences, combining marks, lone surrogates, null or
empty content, huge tool results, pinned messages, our own breadcrumb and
``[Tool results]`` carriers.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from contextwindow.messages import (
    BREADCRUMB,
    ImagePart,
    Message,
    OpaquePart,
    TextPart,
    ToolCall,
    ToolResult,
)

PIECES = [
    "hello",
    " world",
    "The quick brown fox",
    ", ",
    ".\n",
    "    indent",
    "12345678",
    '{"key": [1, 2]}',
    "x = 1\\n",
    "你好世界",
    "日本語のテキスト",
    "ひらがな",
    "한국어 문장",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467",
    "\U0001f44d\U0001f3fd",
    "\U0001f1ef\U0001f1f5\U0001f1fa\U0001f1f8",
    "a\u05b0b\u064bc\u0e31d\u0915\u094d\u0937",
    "\u0c95\u0cf3\uff76\uff9e\u0e01\u0e33\u1100\u1161\u11a8\u0600\u0661a\u200cb",
    "x\r\ny",
    "e\u0301",
    "\u00e9t\u00e9",
    "\u0416\u0443\u043a",
    "\ud83d",
    "\t\r\n",
    "!!!",
]

IDS = ["c1", "c2", "c3", "call_9"]

text = st.lists(st.sampled_from(PIECES), max_size=8).map("".join)
big_text = st.tuples(st.sampled_from(PIECES[:12]), st.integers(50, 2500)).map(lambda t: t[0] * t[1])
any_text = st.one_of(text, text, text, big_text, st.sampled_from(["", BREADCRUMB, "[Tool results] x"]))


def _text_parts(draw: Any) -> list[Any]:
    parts: list[Any] = [TextPart(text=t) for t in draw(st.lists(any_text, max_size=2))]
    if draw(st.integers(0, 9)) == 0:
        parts.append(
            ImagePart(
                width=draw(st.none() | st.integers(1, 5000)),
                height=draw(st.none() | st.integers(1, 5000)),
                detail=draw(st.sampled_from([None, "low", "high", "auto"])),
                source="https://example.com/a.png",
            )
        )
    if draw(st.integers(0, 14)) == 0:
        parts.append(OpaquePart(type="thinking", raw={"type": "thinking", "thinking": draw(text)}))
    return parts


@st.composite
def conversation(draw: Any, provider: str) -> list[Message]:
    msgs: list[Message] = []
    for _ in range(draw(st.integers(0, 2))):
        msgs.append(Message(role=draw(st.sampled_from(["system", "developer"])), content=[TextPart(text=draw(text))]))
    for _ in range(draw(st.integers(1, 9))):
        kind = draw(st.sampled_from(["user", "user", "assistant", "tools", "tools", "orphan"]))
        pinned = draw(st.integers(0, 12)) == 0
        if kind == "user":
            msgs.append(Message(role="user", content=_text_parts(draw), pinned=pinned))
        elif kind == "assistant":
            msgs.append(Message(role="assistant", content=_text_parts(draw), pinned=pinned))
        elif kind == "orphan" and draw(st.integers(0, 3)) == 0:
            # a tool_use block in a user message: not a call (repair removes it)
            stray = ToolCall(id=draw(st.sampled_from(IDS)), name="f", arguments="{}")
            msgs.append(Message(role="user", content=[*_text_parts(draw), stray]))
        elif kind == "orphan" and draw(st.integers(0, 3)) == 0:
            # a tool result where it does not belong (an assistant message, or an OpenAI
            # user message): repair moves it to its call or drops it
            r = ToolResult(call_id=draw(st.sampled_from(IDS)), content=[TextPart(text=draw(text))])
            role = draw(st.sampled_from(["assistant", "user"] if provider == "openai" else ["assistant"]))
            msgs.append(Message(role=role, content=[*_text_parts(draw), r]))
        elif kind == "orphan":
            r = ToolResult(call_id=draw(st.sampled_from(IDS)), content=[TextPart(text=draw(any_text))])
            role = "tool" if provider == "openai" else "user"
            msgs.append(Message(role=role, content=[r]))
        else:
            ids = draw(st.lists(st.sampled_from(IDS), min_size=1, max_size=3, unique=draw(st.integers(0, 7)) > 0))
            calls = [
                ToolCall(id=i, name=draw(st.sampled_from(["read_file", "search"])), arguments=draw(text)) for i in ids
            ]
            pre = [TextPart(text=draw(text))] if draw(st.booleans()) else []
            msgs.append(Message(role="assistant", content=pre + calls, pinned=pinned))
            answered = draw(st.permutations(ids))
            answered = answered[: draw(st.integers(0, len(answered)))] if draw(st.integers(0, 3)) == 0 else answered
            results = [
                ToolResult(
                    call_id=i,
                    content=[TextPart(text=draw(any_text))],
                    is_error=draw(st.integers(0, 5)) == 0,
                )
                for i in answered
            ]
            if provider == "openai":
                msgs.extend(Message(role="tool", content=[r]) for r in results)
            elif results:
                tail = [TextPart(text=draw(text))] if draw(st.integers(0, 4)) == 0 else []
                msgs.append(Message(role="user", content=[*results, *tail]))
    if draw(st.booleans()):
        msgs.append(Message(role="user", content=[TextPart(text=draw(any_text))]))
    return msgs


provider = st.sampled_from(["openai", "anthropic"])


@st.composite
def case(draw: Any) -> tuple[str, list[Message]]:
    p = draw(provider)
    return p, draw(conversation(p))
