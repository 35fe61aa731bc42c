"""Hypothesis strategies: canonical conversations in OpenAI or Anthropic layout.

They produce what breaks context managers: parallel calls, results in any order, results
separated from their calls, orphan results, calls without results, ids reused across
turns, CJK, kana, hangul, emoji ZWJ sequences, combining marks, lone surrogates, null or
empty content, huge tool results, pinned messages, our own breadcrumb, ``[Tool results]``
carriers and observations (long ones too); images with and without a size, remote or
inline, whose base64 data holds a real PNG, GIF, WebP or JPEG header (built here byte by
byte), sometimes truncated, corrupted, line-wrapped or URL-safe, also inside tool results.
"""

from __future__ import annotations

import base64
from typing import Any

import msgspec
from hypothesis import strategies as st

from contextwindow._reference import is_thinking, last_real_user, repair, validate
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
# a text-action agent's observation: its tool output as user text (fresh15 #4: cut like a
# tool result, prefix kept; a combining mark right after the prefix stays with it)
observation = st.tuples(
    st.sampled_from(["[Tool results] ", "[Tool results]\n", "[Tool results]\u0301"]), st.one_of(text, big_text)
).map("".join)
any_text = st.one_of(text, text, text, big_text, observation, st.sampled_from(["", BREADCRUMB, "[Tool results] x"]))


# ------------------------------------------------------------------- image headers, by hand


def png_bytes(w: int, h: int) -> bytes:
    """PNG signature and IHDR chunk (CRC not checked by anyone) for a ``w`` x ``h`` image."""
    return b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR" + w.to_bytes(4, "big") + h.to_bytes(4, "big") + bytes(9)


def gif_bytes(w: int, h: int) -> bytes:
    """GIF89a header with the logical screen size."""
    return b"GIF89a" + w.to_bytes(2, "little") + h.to_bytes(2, "little") + b"\xf7\x00\x00"


def _riff(chunk: bytes, payload: bytes) -> bytes:
    size = (len(payload) + 12).to_bytes(4, "little")
    return b"RIFF" + size + b"WEBP" + chunk + len(payload).to_bytes(4, "little") + payload


def webp_bytes(kind: str, w: int, h: int) -> bytes:
    """WebP with a ``VP8 `` (lossy, 14-bit size), ``VP8L`` (lossless) or ``VP8X`` chunk."""
    if kind == "VP8 ":
        frame = b"\x30\x01\x00\x9d\x01\x2a" + w.to_bytes(2, "little") + h.to_bytes(2, "little")
        return _riff(b"VP8 ", frame)
    if kind == "VP8L":
        return _riff(b"VP8L", b"\x2f" + ((w - 1) | (h - 1) << 14).to_bytes(4, "little"))
    return _riff(b"VP8X", b"\x10\x00\x00\x00" + (w - 1).to_bytes(3, "little") + (h - 1).to_bytes(3, "little"))


def jpeg_bytes(w: int, h: int, sof: int = 0xC0, segments: tuple[bytes, ...] = ()) -> bytes:
    """SOI, APP0 (JFIF), ``segments`` (marker + payload, e.g. an EXIF APP1), DQT, DHT, the
    frame header ``sof`` with the size, SOS, a little scan data and EOI."""
    out = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    for seg in segments:
        out += b"\xff" + seg[:1] + (len(seg) + 1).to_bytes(2, "big") + seg[1:]
    out += b"\xff\xff\xdb\x00\x04\x00\x01"  # a fill byte, then DQT
    out += b"\xff\xc4\x00\x03\x00"  # DHT: C4 is not a frame header
    out += b"\xff" + bytes([sof]) + b"\x00\x0b\x08" + h.to_bytes(2, "big") + w.to_bytes(2, "big") + b"\x01\x01\x11\x00"
    return out + b"\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00\x12\x34\xff\xd9"


@st.composite
def image_bytes(draw: Any) -> bytes:
    """A small image file of any of the four formats with a random size (0 sometimes)."""
    fmt = draw(st.sampled_from(["png", "gif", "VP8 ", "VP8L", "VP8X", "jpeg"]))
    if fmt == "png":
        return png_bytes(draw(st.integers(0, 70_000)), draw(st.integers(0, 70_000)))
    if fmt == "gif":
        return gif_bytes(draw(st.integers(0, 65_535)), draw(st.integers(0, 65_535)))
    if fmt == "VP8 ":
        return webp_bytes(fmt, draw(st.integers(0, 65_535)), draw(st.integers(0, 65_535)))
    if fmt in ("VP8L", "VP8X"):
        top = 16_384 if fmt == "VP8L" else 1 << 24
        return webp_bytes(fmt, draw(st.integers(1, top)), draw(st.integers(1, top)))
    segments = draw(
        st.lists(
            st.tuples(st.integers(0xE1, 0xEF), st.binary(max_size=300)).map(lambda t: bytes([t[0]]) + t[1]),
            max_size=3,
        )
    )
    sof = draw(st.sampled_from([0xC0, 0xC1, 0xC2, 0xC3, 0xC4, 0xC5, 0xC8, 0xCB, 0xCC, 0xCF]))
    return jpeg_bytes(draw(st.integers(0, 65_535)), draw(st.integers(0, 65_535)), sof, tuple(segments))


@st.composite
def image_base64(draw: Any) -> str:
    """Base64 text of an image header, sometimes damaged or unusually spelled."""
    data = draw(image_bytes())
    damage = draw(st.sampled_from(["none", "none", "none", "cut", "flip", "tail"]))
    if damage == "cut":
        data = data[: draw(st.integers(0, len(data)))]
    elif damage == "flip":
        i = draw(st.integers(0, len(data) - 1))
        data = data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1 :]
    elif damage == "tail":
        data += draw(st.binary(max_size=200))
    text = base64.b64encode(data).decode()
    spelling = draw(st.sampled_from(["plain", "plain", "urlsafe", "unpadded", "wrapped", "spaces", "junk", "odd"]))
    if spelling == "urlsafe":
        text = text.replace("+", "-").replace("/", "_")
    elif spelling == "unpadded":
        text = text.rstrip("=")
    elif spelling == "wrapped":
        text = draw(st.sampled_from(["\n", "\r\n"])).join(text[i : i + 76] for i in range(0, len(text), 76))
    elif spelling == "spaces":
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.sampled_from([" ", "\t", "\n "])) + text[i:]
    elif spelling == "junk":  # an invalid or non-ASCII character somewhere
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.sampled_from(["!", "=", "\u00e9", "."])) + text[i:]
    elif spelling == "odd":  # a length that is not base64
        text += "A"
    return text


@st.composite
def image_part(draw: Any) -> ImagePart:
    """An image part in OpenAI shape (URL string), Anthropic shape (source object) or none."""
    size = draw(st.sampled_from(["none", "none", "both", "one"]))
    width = draw(st.integers(0, 9000)) if size != "none" else None
    height = draw(st.integers(1, 9000)) if size == "both" else None
    detail = draw(st.sampled_from([None, "low", "high", "auto"]))
    kind = draw(st.sampled_from(["url", "data_url", "data_url", "anthropic", "anthropic", "anthropic_url", "none"]))
    source: Any = None
    if kind == "url":
        source = "https://example.com/a.png"
    elif kind == "data_url":
        prefix = draw(st.sampled_from(["data:image/png;base64,", "DATA:image/jpeg;BASE64,", "data:image/png,", ""]))
        source = prefix + draw(image_base64())
    elif kind == "anthropic":
        media = draw(st.sampled_from(["image/png", "image/jpeg", "image/gif", "image/webp"]))
        source = {"type": draw(st.sampled_from(["base64", "base64", "text"])), "media_type": media}
        source["data"] = draw(image_base64())
    elif kind == "anthropic_url":
        source = {"type": "url", "url": "https://example.com/a.png"}
    return ImagePart(width=width, height=height, detail=detail, source=source)


def _text_parts(draw: Any, thinking: bool = True) -> list[Any]:
    """Text parts, sometimes an image, and (``thinking``) sometimes a thinking block first,
    where Claude puts it, when other parts follow (a message ending in one is refused)."""
    parts: list[Any] = [TextPart(text=t) for t in draw(st.lists(any_text, max_size=2))]
    if draw(st.integers(0, 9)) == 0:
        parts.append(draw(image_part()))
    if thinking and parts and draw(st.integers(0, 14)) == 0:
        parts.insert(0, OpaquePart(type="thinking", raw={"type": "thinking", "thinking": draw(text)}))
    return parts


def _result_parts(draw: Any) -> list[Any]:
    """A tool result's content: text, sometimes in two or three text parts (MCP tools,
    Anthropic ``tool_result`` lists: cut to one common keep, fresh26 #3), and sometimes
    an image (a screenshot tool)."""
    parts: list[Any] = [TextPart(text=draw(any_text)) for _ in range(1 + draw(st.sampled_from([0, 0, 0, 1, 2])))]
    if draw(st.integers(0, 7)) == 0:
        parts.insert(draw(st.integers(0, 1)), draw(image_part()))
    return parts


def _own_results(draw: Any, results: list[ToolResult]) -> tuple[list[ToolResult], list[ToolResult]]:
    """Results to put in their calls' own message, and those left for their usual place:
    mostly none; else some of them, or a copy of one (the other stays where it belongs)."""
    how = draw(st.integers(0, 7))
    if how > 1 or not results:
        return [], results
    if how == 0:
        k = draw(st.integers(1, len(results)))
        return results[:k], results[k:]
    copy = msgspec.structs.replace(results[0], content=[TextPart(text="copy")])
    return [copy], results


#: The role of a struct holding tool results read as Anthropic's: a user message, or a
#: ``tool`` one, which ``message_to_anthropic`` writes as a user message and the library
#: takes as one under Anthropic's rules (fresh19 F5: an orphan one repair emptied was
#: dropped, leaving an assistant message first, as a user one is not).
_anthropic_user = st.sampled_from(["user", "user", "tool"])


@st.composite
def conversation(draw: Any, provider: str) -> list[Message]:
    msgs: list[Message] = []
    for _ in range(draw(st.integers(0, 2))):
        # Anthropic's rules take one system message, a leading one (it stands for the
        # top-level system): a second is refused, in structs as in dicts
        roles = (
            ["developer"] if provider == "anthropic" and msgs and msgs[0].role == "system" else ["system", "developer"]
        )
        msgs.append(Message(role=draw(st.sampled_from(roles)), content=[TextPart(text=draw(text))]))
    for _ in range(draw(st.integers(1, 9))):
        kind = draw(st.sampled_from(["user", "user", "assistant", "tools", "tools", "orphan", "step"]))
        pinned = draw(st.integers(0, 12)) == 0
        if kind == "step":
            # a text-action step: a command, its observation, sometimes screenshots after
            # it (they go with the step: fresh52 #1, fresh53 #2)
            msgs.append(Message(role="assistant", content=[TextPart(text=draw(text))], pinned=pinned))
            msgs.append(Message(role="user", content=[TextPart(text="[Tool results] " + draw(any_text))]))
            for _ in range(draw(st.integers(0, 2))):
                msgs.append(Message(role="user", content=[draw(image_part())]))
        elif kind == "user":
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
            role = "tool" if provider == "openai" else draw(_anthropic_user)
            msgs.append(Message(role=role, content=[r]))
        else:
            ids = draw(st.lists(st.sampled_from(IDS), min_size=1, max_size=3, unique=draw(st.integers(0, 7)) > 0))
            calls = [
                ToolCall(id=i, name=draw(st.sampled_from(["read_file", "search"])), arguments=draw(text)) for i in ids
            ]
            pre = [TextPart(text=draw(text))] if draw(st.booleans()) else []
            answered = draw(st.permutations(ids))
            answered = answered[: draw(st.integers(0, len(answered)))] if draw(st.integers(0, 3)) == 0 else answered
            results = [
                ToolResult(
                    call_id=i,
                    content=_result_parts(draw),
                    is_error=draw(st.integers(0, 5)) == 0,
                )
                for i in answered
            ]
            # sometimes some results sit in the calls' own message, before or after the
            # calls (fresh16a F6: repair moves them where they belong), or a copy does
            own, results = _own_results(draw, results)
            body = own + pre + calls if draw(st.integers(0, 3)) == 0 else pre + calls + own
            msgs.append(Message(role="assistant", content=body, pinned=pinned))
            if provider == "openai":
                msgs.extend(Message(role="tool", content=[r]) for r in results)
            elif results:
                tail = [TextPart(text=draw(text))] if draw(st.integers(0, 4)) == 0 else []
                msgs.append(Message(role=draw(_anthropic_user), content=[*results, *tail]))
            # sometimes screenshots after the results, a user message of images alone each,
            # as an OpenAI agent sends them (they go with the unit: fresh49 #1), sometimes
            # with a blank caption (fresh51 #2) or a word (then the user's: a turn)
            if draw(st.integers(0, 4)) == 0:
                for _ in range(draw(st.integers(1, 2))):
                    caption = draw(
                        st.sampled_from([[], [], [TextPart(text="")], [TextPart(text=" \n")], [TextPart(text="see")]])
                    )
                    msgs.append(Message(role="user", content=[*caption, draw(image_part())]))
    if draw(st.booleans()):
        msgs.append(Message(role="user", content=[TextPart(text=draw(any_text))]))
    return msgs


provider = st.sampled_from(["openai", "anthropic"])


@st.composite
def case(draw: Any) -> tuple[str, list[Message]]:
    p = draw(provider)
    return p, draw(conversation(p))


@st.composite
def anthropic_agent(draw: Any, tool_structs: bool = False) -> list[Message]:
    """An Anthropic agent conversation whose roles alternate (a user message first, after
    an optional system message), so every output must pass ``validate`` whole, role rules
    included. Steps: chat, calls answered in the next user message (sometimes with text
    after the results, sometimes only some of them), calls the user interrupted (a plain
    user message after the ``tool_use``, no result), orphan-only user messages (an id no
    call made, or one a call made long ago), first, in the middle or last, and assistant
    messages holding only a ``tool_result`` block, and results (or a copy of one) in
    the message of their calls, then a plain user message when none is left. With
    ``tool_structs``, a message of results or an orphan is sometimes a ``tool`` struct (a
    user message under Anthropic's rules, as ``message_to_anthropic`` writes it; not yet
    for ``fit``, the guard and ``prune_middle``, whose role checks see it as no user
    message: see ``test_pairs.test_fit_and_prune_take_a_tool_struct_as_a_user_message``). Parts come
    from the strategies above: big texts, CJK, emoji, images, pinned messages, our own
    breadcrumb and ``[Tool results]`` text."""
    msgs: list[Message] = []
    if draw(st.booleans()):
        msgs.append(Message(role="system", content=[TextPart(text=draw(text))]))
    results_role = _anthropic_user if tool_structs else st.just("user")

    def orphan() -> Message:
        r = ToolResult(call_id=draw(st.sampled_from([*IDS, "zz"])), content=[TextPart(text=draw(any_text))])
        return Message(role=draw(results_role), content=[r])

    def user() -> Message:
        # no thinking block: only assistant messages hold them (a user message that did
        # made the newest turn reach back past its thinking-led first assistant message
        # once a trim emptied the request: thinking_not_first, from input no API takes)
        return Message(role="user", content=_text_parts(draw, thinking=False), pinned=draw(st.integers(0, 12)) == 0)

    def turn_first() -> bool:
        """Whether an assistant message appended now is the first of the newest turn."""
        last = last_real_user(msgs)  # where it stands: a screenshot in a unit is none
        return all(m.role != "assistant" for m in msgs[0 if last is None else last + 1 :])

    msgs.append(orphan() if draw(st.integers(0, 4)) == 0 else user())
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["chat", "tools", "tools", "interrupted", "orphan", "stray"]))
        pinned = draw(st.integers(0, 12)) == 0
        if kind == "stray":  # an assistant message holding only a tool_result block
            msgs.append(Message(role="assistant", content=orphan().content, pinned=pinned))
            msgs.append(user())
        elif kind in ("tools", "interrupted"):
            ids = draw(st.lists(st.sampled_from(IDS), min_size=1, max_size=3, unique=True))
            calls = [
                ToolCall(id=i, name=draw(st.sampled_from(["read_file", "search"])), arguments=draw(text)) for i in ids
            ]
            pre = [TextPart(text=draw(text))] if draw(st.booleans()) else []
            # extended thinking: the first assistant message after a real user message
            # sometimes starts with a thinking block (only there: valid input)
            if turn_first() and draw(st.integers(0, 2)) == 0:
                kind_ = draw(st.sampled_from(["thinking", "redacted_thinking"]))
                pre = [OpaquePart(type=kind_, raw={"type": kind_, "thinking": draw(text), "signature": "s"}), *pre]
            msgs.append(Message(role="assistant", content=pre + calls, pinned=pinned))
            if kind == "interrupted":
                msgs.append(user())
                continue
            answered = draw(st.permutations(ids))
            if draw(st.integers(0, 4)) == 0:
                answered = answered[: draw(st.integers(1, len(answered)))]
            results = [ToolResult(call_id=i, content=_result_parts(draw)) for i in answered]
            own, results = _own_results(draw, results)
            if own:  # results in the calls' own message (fresh16a F6)
                msgs[-1] = Message(role="assistant", content=[*msgs[-1].content, *own], pinned=pinned)
            tail = [TextPart(text=draw(text))] if draw(st.integers(0, 4)) == 0 else []
            msgs.append(Message(role=draw(results_role), content=[*results, *tail]) if results else user())
        else:
            # a thinking block only where valid input has one (see turn_first)
            content = _text_parts(draw, thinking=turn_first()) or [TextPart(text="ok")]
            msgs.append(Message(role="assistant", content=content, pinned=pinned))
            msgs.append(orphan() if kind == "orphan" else user())
    if draw(st.integers(0, 5)) == 0:
        msgs.append(Message(role="assistant", content=[TextPart(text=draw(text))]))
    # A result repair moves (one in its call's own message, an orphan answering an old
    # call) into a real user message, or stubs it puts into an empty one, make that message
    # a result carrier, no turn boundary: the turn before joins the newest turn, whose
    # first assistant message then lacks a thinking block (thinking_not_first). Valid input
    # has neither, so thinking blocks stay only where repair's output keeps the thinking
    # rules (README Known limits).
    # The same when repair leaves no real user message at all (the first a text-action
    # observation, the rest carriers): no current request, so no newest turn whose
    # thinking-led start the trims keep, and fit may evict it (found by
    # test_fit_guard_prune_validate_whole: thinking_not_first).
    repaired = [it.msg(msgs) for it in repair(msgs, "anthropic", "stub")[0]]
    if any(v.code.startswith("thinking_") for v in validate(repaired, "anthropic")) or last_real_user(repaired) is None:
        msgs = [
            msgspec.structs.replace(m, content=[q for q in m.content if not is_thinking(q)] or [TextPart(text="ok")])
            if m.role == "assistant"
            else m
            for m in msgs
        ]
    return msgs


def request_source(msgs: list[Any], provider: str) -> int | None:
    """The input index of a conversation's current request: its last real user message,
    or the last real one after repair when that is later (README Tool pairs), found by
    origin through the reference's repair, not by identity (a message repair changed is a
    new object). ``None`` when there is none or repair made it."""
    from contextwindow import _engine
    from contextwindow import _reference as ref

    canon = _engine.decoded(_engine.prepare(msgs, provider))  # lone surrogates replaced
    state = ref._state(canon, ref.cost_model("conservative"), provider, False, "stub")
    srcs = [it.src for it in state.work]
    work = [it.msg(canon) for it in state.work]
    real_req = ref.last_real_user(work)  # a screenshot in a tool unit is none (fresh50 #1)
    req = ref.current_request(canon, srcs, real_req)
    return None if req is None else srcs[req]
