"""Image costs through the public API (DESIGN.md section 3): sizes read from PNG, GIF, WebP
and JPEG headers in base64 data, explicit sizes first, documented constants when the size
is unknown, OpenAI tiles or Anthropic's formula by the part's shape, images inside tool
results, ``detail: "low"``. Expected values are worked out by hand in the comments.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import contextwindow as cw
from contextwindow import _image

from shared_data import corpus_files, load
from strategies import gif_bytes, image_bytes, jpeg_bytes, png_bytes, webp_bytes

# the per-message overhead of the default profile (an empty message costs just that)
OVERHEAD = cw.count_messages([{"role": "user", "content": ""}])


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def openai_msg(data: bytes, detail: str | None = None, media: str = "image/png") -> dict:
    image_url = {"url": f"data:{media};base64,{b64(data)}"}
    if detail is not None:
        image_url["detail"] = detail
    return {"role": "user", "content": [{"type": "image_url", "image_url": image_url}]}


def anthropic_msg(data: bytes, media: str = "image/png") -> dict:
    source = {"type": "base64", "media_type": media, "data": b64(data)}
    return {"role": "user", "content": [{"type": "image", "source": source}]}


# (file bytes, OpenAI tokens, Anthropic tokens), worked by hand:
FORMATS = {
    # 1024x1024 -> short side 768: 768x768, 2x2 tiles: 85 + 4*170 = 765; 1048576/750 = 1398.1
    "png": (png_bytes(1024, 1024), 765, 1399),
    # 640x480: 2x1 tiles: 85 + 340 = 425; 307200/750 = 409.6
    "gif": (gif_bytes(640, 480), 425, 410),
    # 800x600: 2x2 tiles: 765; 480000/750 = 640
    "webp-lossy": (webp_bytes("VP8 ", 800, 600), 765, 640),
    # 300x200: 1 tile: 255; 60000/750 = 80
    "webp-lossless": (webp_bytes("VP8L", 300, 200), 255, 80),
    # 2000x3000 -> fit 2048: 1365x2048 -> short side 768: 768x1152, 2x3 tiles: 1105;
    # long edge 3000 -> 1568: 1045x1568 = 1638560 px, over the 784*1568 cap: 1640
    "webp-extended": (webp_bytes("VP8X", 2000, 3000), 1105, 1640),
    # 1200x900 -> short side 768: 1024x768, 2x2 tiles: 765; 1080000/750 = 1440
    "jpeg": (jpeg_bytes(1200, 900, 0xC0, (b"\xe1Exif\x00\x00" + bytes(5000),)), 765, 1440),
    # progressive (SOF2) 100x50: 1 tile: 255; 5000/750 = 6.7
    "jpeg-progressive": (jpeg_bytes(100, 50, 0xC2), 255, 7),
}


@pytest.mark.parametrize("name", FORMATS)
def test_size_read_from_each_format(name: str) -> None:
    data, openai, anthropic = FORMATS[name]
    assert cw.count_messages([openai_msg(data)]) == OVERHEAD + openai
    assert cw.count_messages([anthropic_msg(data)]) == OVERHEAD + anthropic
    # the pure-Python mirror reads the same size
    assert _image.dims_from_base64(b64(data)) is not None


def test_documented_examples() -> None:
    # OpenAI vision guide: 1024x1024 high 765, 2048x4096 high 1105, 4096x8192 low 85
    assert cw.count_messages([openai_msg(png_bytes(1024, 1024), "high")]) == OVERHEAD + 765
    assert cw.count_messages([openai_msg(png_bytes(2048, 4096), "high")]) == OVERHEAD + 1105
    assert cw.count_messages([openai_msg(png_bytes(4096, 8192), "low")]) == OVERHEAD + 85
    # Anthropic vision guide: 200x200 ~54, 1000x1000 ~1334, 1092x1092 ~1590
    for (w, h), want in [((200, 200), 54), ((1000, 1000), 1334), ((1092, 1092), 1590)]:
        assert cw.count_messages([anthropic_msg(png_bytes(w, h))]) == OVERHEAD + want


def test_never_by_base64_length() -> None:
    # 300 KB of pixel data after the header changes nothing
    small = png_bytes(512, 512)
    big = small + bytes(range(256)) * 1200
    assert cw.count_messages([openai_msg(big)]) == cw.count_messages([openai_msg(small)]) == OVERHEAD + 255
    assert cw.count_messages([anthropic_msg(big)]) == OVERHEAD + 350  # 262144/750 = 349.5


def test_explicit_size_wins_over_header() -> None:
    src = "data:image/png;base64," + b64(png_bytes(4000, 4000))
    part = cw.ImagePart(width=512, height=512, source=src)
    assert cw.count_messages([cw.Message(role="user", content=[part])]) == OVERHEAD + 255
    # only one side given: the header decides (4000x4000 -> 2048 -> 768x768: 765)
    half = cw.ImagePart(width=512, source=src)
    assert cw.count_messages([cw.Message(role="user", content=[half])]) == OVERHEAD + 765


def test_unknown_size_constants() -> None:
    remote = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/a.png"}}]}
    assert cw.count_messages([remote]) == OVERHEAD + 1445  # 768x2048 at most: 2x4 tiles
    remote_a = {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}]}
    assert cw.count_messages([remote_a]) == OVERHEAD + 1640  # ceil(784*1568/750)
    svg = {
        "role": "user",
        "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/svg+xml", "data": b64(b"<svg/>")}}
        ],
    }
    assert cw.count_messages([svg]) == OVERHEAD + 1640
    # no source and no size: the larger of the two constants
    assert cw.count_messages([cw.Message(role="user", content=[cw.ImagePart()])]) == OVERHEAD + 1640
    assert _image.OPENAI_UNKNOWN == _image.openai_tokens(768, 2048)
    assert _image.ANTHROPIC_UNKNOWN == _image.anthropic_tokens(784, 1568)


def test_detail_low() -> None:
    data = png_bytes(4096, 8192)
    assert cw.count_messages([openai_msg(data, "low")]) == OVERHEAD + 85
    remote = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u", "detail": "low"}}]}
    assert cw.count_messages([remote]) == OVERHEAD + 85
    # Anthropic has no detail: a hand-built part without a shape costs the larger rule
    part = cw.ImagePart(width=1000, height=1000, detail="low")
    assert cw.count_messages([cw.Message(role="user", content=[part])]) == OVERHEAD + 1334


def test_image_inside_tool_result() -> None:
    data = png_bytes(1024, 1024)
    # OpenAI: a tool message whose content holds an image part
    tool = {"role": "tool", "tool_call_id": "c1", "content": [openai_msg(data)["content"][0]]}
    assert cw.count_messages([tool], format="openai") == OVERHEAD + 765
    # Anthropic: an image block inside a tool_result block, after some text
    result = {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [{"type": "text", "text": "screenshot"}, anthropic_msg(data)["content"][0]],
    }
    msg = {"role": "user", "content": [result]}
    text = cw.estimate_tokens("screenshot")
    assert cw.count_messages([msg], format="anthropic") == OVERHEAD + text + 1399


def test_fixed_profiles() -> None:
    for profile in ("fim", "bytes4"):
        for data in (png_bytes(10, 10), png_bytes(5000, 5000)):
            assert cw.count_messages([openai_msg(data)], profile=profile) == 4 + 765  # 4 tokens per message
            assert cw.count_messages([anthropic_msg(data)], profile=profile) == 4 + 765


def test_data_url_spellings() -> None:
    text = b64(gif_bytes(3, 2))
    for good in (text, "DATA:image/gif;BASE64," + text, text.rstrip("="), text[:8] + "\r\n" + text[8:]):
        assert _image.dims_from_base64(good) == (3, 2), good
    for bad in ("data:image/gif," + text, "data:image/gif;base64", "https://x/a.gif", "\u00e9" + text):
        assert _image.dims_from_base64(bad) is None, bad


def _expected(data: bytes) -> tuple[int, int] | None:
    """The size the builder wrote, or None when the header says 0 or is not a frame header."""
    if data.startswith(b"\x89PNG"):
        dims = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    elif data.startswith(b"GIF"):
        dims = int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")
    elif data[12:16] == b"VP8 ":
        dims = int.from_bytes(data[26:28], "little") & 0x3FFF, int.from_bytes(data[28:30], "little") & 0x3FFF
    elif data[12:16] == b"VP8L":
        bits = int.from_bytes(data[21:25], "little")
        dims = (bits & 0x3FFF) + 1, (bits >> 14 & 0x3FFF) + 1
    elif data[12:16] == b"VP8X":
        dims = int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    else:
        sof = data.rindex(b"\x00\x0b\x08") - 2  # the frame header the builder wrote
        if data[sof + 1] in (0xC4, 0xC8, 0xCC):
            return None
        dims = int.from_bytes(data[sof + 7 : sof + 9], "big"), int.from_bytes(data[sof + 5 : sof + 7], "big")
    return dims if dims[0] and dims[1] else None


@given(image_bytes())
def test_reads_what_was_written(data: bytes) -> None:
    assert _image.dims_from_base64(b64(data)) == _expected(data)


@given(st.binary(max_size=64), st.sampled_from([b"", b"\xff\xd8", b"\x89PNG", b"GIF8", b"RIFF"]))
def test_garbage_never_raises(data: bytes, magic: bytes) -> None:
    dims = _image.dims_from_base64(b64(magic + data))
    assert dims is None or (dims[0] > 0 and dims[1] > 0)


def _pillow_images() -> list[tuple[str, bytes, tuple[int, int]]]:
    pil = pytest.importorskip("PIL.Image")
    out = []
    for fmt, mode, kwargs in [
        ("PNG", "RGBA", {}),
        ("GIF", "P", {}),
        ("JPEG", "RGB", {}),
        ("JPEG", "RGB", {"progressive": True, "exif": b"Exif\x00\x00" + bytes(3000)}),
        ("WEBP", "RGB", {"quality": 50}),
        ("WEBP", "RGB", {"lossless": True}),
        ("WEBP", "RGBA", {"quality": 50}),  # alpha: VP8X
    ]:
        for size in [(1, 1), (37, 1999), (1500, 1000)]:
            buf = io.BytesIO()
            pil.new(mode, size).save(buf, format=fmt, **kwargs)
            out.append((fmt, buf.getvalue(), size))
    return out


def test_cross_check_with_pillow() -> None:
    """Real files written by Pillow (when installed; never a runtime dependency)."""
    for fmt, data, (w, h) in _pillow_images():
        assert _image.dims_from_base64(b64(data)) == (w, h), fmt
        assert cw.count_messages([anthropic_msg(data)]) == OVERHEAD + _image.anthropic_tokens(w, h)
        assert cw.count_messages([openai_msg(data)]) == OVERHEAD + _image.openai_tokens(w, h)


def _base64_sources(value: Any) -> list[dict[str, Any]]:
    """Every Anthropic base64 image source in a decoded JSON value, tool results included."""
    if isinstance(value, list):
        return [s for v in value for s in _base64_sources(v)]
    if not isinstance(value, dict):
        return []
    if value.get("type") == "image" and isinstance(value.get("source"), dict):
        return [value["source"]] if value["source"].get("type") == "base64" else []
    return [s for v in value.values() for s in _base64_sources(v)]


def test_corpus_images_with_pillow() -> None:
    """The base64 images in ../shared/corpus read the same size as Pillow decodes."""
    pil = pytest.importorskip("PIL.Image")
    found = [(doc["format"], s) for doc in map(load, corpus_files()) for s in _base64_sources(doc["messages"])]
    if not found:
        pytest.skip("no base64 images in ../shared/corpus")
    for fmt, source in found:
        with pil.open(io.BytesIO(base64.b64decode(source["data"]))) as im:
            w, h = im.size
        assert _image.inline_dims(source) == (w, h)
        msg = {"role": "user", "content": [{"type": "image", "source": source}]}
        assert cw.count_messages([msg], format=fmt) == OVERHEAD + _image.anthropic_tokens(w, h)


def _openai_image(detail: Any) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": "https://x/a.png", "detail": detail}}


def test_a_detail_openai_refuses_is_reported_and_priced_as_high() -> None:
    """fresh20a F7: any ``detail`` string was taken silently and priced as ``"high"``;
    the Chat Completions API takes ``"low"``, ``"high"`` and ``"auto"`` only. ``validate``
    reports the others (``detail_not_allowed``, one each); counting is unchanged: an
    image of unknown size is 1,445 (1,449 with the message's 4), ``"low"`` 85 (89)."""
    from contextwindow import _reference as ref
    from contextwindow._engine import prepare

    m = [{"role": "user", "content": [_openai_image("Low")]}]
    assert cw.count_messages(m) == 1_449
    [v] = cw.validate(m, "openai")
    assert (v.index, v.code, v.call_id) == (0, "detail_not_allowed", None)
    assert v.detail == 'image detail "Low" is not "low", "high" or "auto", the values the Chat Completions API takes'
    assert cw.count_messages([{"role": "user", "content": [_openai_image("low")]}]) == 89
    for ok in ("low", "high", "auto"):
        assert cw.validate([{"role": "user", "content": [_openai_image(ok)]}], "openai") == []
    assert (
        cw.validate([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}], "openai") == []
    )
    # every other value, in a message and in a tool result, in order; Anthropic's rules
    # do not see it (its image blocks have no detail)
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": [_openai_image("HIGH"), _openai_image("high"), _openai_image("")]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c", "content": [_openai_image("ultra")]},
    ]
    got = cw.validate(msgs, "openai")
    # (an image in a tool result is image_not_allowed too, after its detail)
    assert [(v.index, v.code) for v in got] == [(0, "detail_not_allowed")] * 2 + [
        (2, "detail_not_allowed"),
        (2, "image_not_allowed"),
    ]
    assert ['"HIGH"' in got[0].detail, '""' in got[1].detail, '"ultra"' in got[2].detail] == [True] * 3
    assert [(v.index, v.code) for v in ref.validate(prepare(msgs, None).canonical, "openai")] == [
        (v.index, v.code) for v in got
    ]
    # a struct with such a detail, and the same rule in the pure-Python engine
    structs = [cw.Message(role="user", content=[cw.ImagePart(source="https://x/a.png", detail="ultra")])]
    assert [v.code for v in cw.validate(structs, "openai")] == ["detail_not_allowed"]
    assert [v.code for v in ref.validate(structs, "openai")] == ["detail_not_allowed"]
    assert cw.validate(structs, "anthropic") == []
    assert cw.count_messages(structs) == cw.count_messages(
        [cw.Message(role="user", content=[cw.ImagePart(source="https://x/a.png", detail="high")])]
    )


def test_an_image_outside_a_user_message_is_reported_under_openai_rules() -> None:
    """fresh23 #2: Chat Completions answers HTTP 400 "Image URLs are only allowed for
    messages with role 'user', but this message with role 'tool' contains an image URL";
    ``validate`` passed it. One ``image_not_allowed`` per image of a non-user message or
    of a tool result; counting and trimming are unchanged, and no repair moves it."""
    from contextwindow import _reference as ref
    from contextwindow._engine import prepare

    img = {"type": "image_url", "image_url": {"url": "https://x/a.png"}}
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": [{"type": "text", "text": "s"}, img]},
        {"role": "user", "content": [img, {"type": "text", "text": "look"}]},
        {"role": "assistant", "content": [img], "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "shot"}, img, img]},
        {"role": "user", "content": "thanks"},
    ]
    got = cw.validate(msgs, "openai")
    assert [(v.index, v.code) for v in got] == [(0, "image_not_allowed"), (2, "image_not_allowed")] + [
        (3, "image_not_allowed")
    ] * 2
    assert got[0].detail == (
        "content[1] is an image in a system message; the Chat Completions API takes images only in user messages"
    )
    assert got[3].detail.startswith('content[2] of the result of tool call "c1" is an image;')
    assert [(v.index, v.code) for v in ref.validate(prepare(msgs, None).canonical, "openai")] == [
        (v.index, v.code) for v in got
    ]
    # the user's own image is fine; the same images as Anthropic blocks are not this rule
    assert cw.validate(msgs[1:2], "openai") == []
    # a repair leaves them where they are, and says nothing of them
    r = cw.repair_tool_pairs(msgs, format="openai")
    assert r.messages == msgs and r.report.repairs == []
