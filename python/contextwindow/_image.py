"""Image token costs, pure Python: the mirror of the Rust module ``image.rs``.

Used by :mod:`contextwindow._reference` (the oracle in differential tests), so it must
agree with the engine exactly: integer arithmetic only, and the same bytes read in the same
order (a header byte is decoded from its own 4-character base64 quantum, so an invalid
character elsewhere in the data does not matter to either).

Rules (DESIGN.md section 3). An image costs by its pixel size when that is known, from the
part's explicit ``width``/``height`` (both above 0) or else from the header of inline base64
data (PNG, GIF, WebP, JPEG); otherwise a constant. Never by the length of the base64 text,
never 0. The rule follows the part's provider shape, which the canonical model keeps in
``source``: a string is an OpenAI ``image_url.url`` (:func:`openai_tokens`), an object an
Anthropic ``source`` (:func:`anthropic_tokens`); a part with neither costs the larger of
the two, so it is never undercounted whichever provider receives it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "ANTHROPIC_MAX_EDGE",
    "ANTHROPIC_MAX_PIXELS",
    "ANTHROPIC_PIXELS_PER_TOKEN",
    "ANTHROPIC_UNKNOWN",
    "OPENAI_LOW",
    "OPENAI_UNKNOWN",
    "anthropic_tokens",
    "dims_from_base64",
    "image_tokens",
    "inline_dims",
    "openai_tokens",
    "shape",
]

#: OpenAI's cost of a ``detail: "low"`` image, whatever its size (tokens).
OPENAI_LOW = 85
#: OpenAI cost of a high/auto-detail image of unknown size (tokens): the most the tile rule
#: can give (at most 768x2048 pixels after scaling, 2x4 tiles: 85 + 170 * 8). Source: OpenAI
#: vision guide, "Calculating costs".
OPENAI_UNKNOWN = 1445
#: Anthropic's long-edge limit before its downscale (pixels). Source: Anthropic vision
#: guide, "Evaluate image size".
ANTHROPIC_MAX_EDGE = 1568
#: Pixel ceiling: 784x1568, the largest entry of the same guide's table of sizes that are
#: not resized (its prose says "~1,600 tokens"; the table's 3:4, 2:3 and 1:2 entries exceed
#: that, so the ceiling is the table's).
ANTHROPIC_MAX_PIXELS = 784 * 1568
#: ``tokens = (width px * height px) / 750`` (same guide, "Calculate image costs").
ANTHROPIC_PIXELS_PER_TOKEN = 750
#: Anthropic cost of an image of unknown size (tokens): the most :func:`anthropic_tokens`
#: can give, ceil(784 * 1568 / 750) = 1640.
ANTHROPIC_UNKNOWN = -(-ANTHROPIC_MAX_PIXELS // ANTHROPIC_PIXELS_PER_TOKEN)

_B64 = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}
_B64["-"], _B64["_"] = 62, 63
_SPACE = str.maketrans("", "", " \t\n\r")
_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def openai_tokens(w: int, h: int, detail: str | None = None) -> int:
    """OpenAI tokens of an image of ``w`` x ``h`` pixels (both at least 1).

    ``detail="low"`` costs 85. Otherwise (``"high"``, ``"auto"``, ``None`` or any other
    value, which the API refuses and ``validate`` reports) the image is scaled to fit 2048x2048, then its short
    side down to 768 (integer division, never below 1 pixel, never scaled up), and costs
    85 + 170 per 512-pixel tile.

    Args:
        w: width in pixels.
        h: height in pixels.
        detail: the OpenAI ``detail`` value (``"low"``, ``"high"``, ``"auto"``) or ``None``.

    Returns:
        Tokens.

    >>> openai_tokens(1024, 1024), openai_tokens(2048, 4096, "high"), openai_tokens(4096, 8192, "low")
    (765, 1105, 85)
    """
    if detail == "low":
        return OPENAI_LOW
    longest = max(w, h)
    if longest > 2048:
        w, h = max(1, w * 2048 // longest), max(1, h * 2048 // longest)
    shortest = min(w, h)
    if shortest > 768:
        w, h = max(1, w * 768 // shortest), max(1, h * 768 // shortest)
    return OPENAI_LOW + 170 * _ceil_div(w, 512) * _ceil_div(h, 512)


def anthropic_tokens(w: int, h: int) -> int:
    """Anthropic tokens of an image of ``w`` x ``h`` pixels (both at least 1).

    A long edge above 1568 is scaled to 1568 (integer division, never below 1 pixel), the
    pixels are capped at :data:`ANTHROPIC_MAX_PIXELS`, and the cost is ceil(pixels / 750),
    at least 1. This reproduces the guide's examples (200x200 ~54, 1000x1000 ~1334,
    1092x1092 ~1590).

    Args:
        w: width in pixels.
        h: height in pixels.

    Returns:
        Tokens.

    >>> anthropic_tokens(1092, 1092), anthropic_tokens(200, 200), anthropic_tokens(8000, 8000)
    (1590, 54, 1640)
    """
    longest = max(w, h)
    if longest > ANTHROPIC_MAX_EDGE:
        w, h = max(1, w * ANTHROPIC_MAX_EDGE // longest), max(1, h * ANTHROPIC_MAX_EDGE // longest)
    pixels = min(w * h, ANTHROPIC_MAX_PIXELS)
    return max(1, _ceil_div(pixels, ANTHROPIC_PIXELS_PER_TOKEN))


def shape(source: Any) -> str:
    """The provider shape of an image part from its ``source``.

    Args:
        source: the part's ``source``.

    Returns:
        ``"openai"`` for a string, ``"anthropic"`` for an object, ``"unknown"`` otherwise.

    >>> shape("https://x/a.png"), shape({"type": "url", "url": "https://x/a.png"}), shape(None)
    ('openai', 'anthropic', 'unknown')
    """
    if isinstance(source, str):
        return "openai"
    if isinstance(source, Mapping):
        return "anthropic"
    return "unknown"


def image_tokens(width: int | None, height: int | None, detail: str | None, source: Any) -> int:
    """Tokens of an image part under the provider rules (the ``conservative`` profile).

    Args:
        width: explicit width in pixels, or ``None``.
        height: explicit height in pixels, or ``None``.
        detail: the OpenAI ``detail`` value, or ``None``.
        source: the part's ``source`` (URL string, data URL, Anthropic object, or ``None``).

    Returns:
        Tokens: explicit size first, then the size read from inline base64 data, then
        :data:`OPENAI_UNKNOWN` / :data:`ANTHROPIC_UNKNOWN` (``detail="low"`` OpenAI images
        are 85 whatever their size).

    >>> image_tokens(None, None, None, "https://example.com/a.png")
    1445
    """
    kind = shape(source)
    if kind == "openai" and detail == "low":
        return OPENAI_LOW
    dims: tuple[int, int] | None
    if width and height and width > 0 and height > 0:
        dims = (width, height)
    else:
        dims = inline_dims(source)
    if dims is not None:
        openai, anthropic = openai_tokens(*dims, detail), anthropic_tokens(*dims)
    else:
        openai, anthropic = (OPENAI_LOW if detail == "low" else OPENAI_UNKNOWN), ANTHROPIC_UNKNOWN
    if kind == "openai":
        return openai
    if kind == "anthropic":
        return anthropic
    return max(openai, anthropic)


def inline_dims(source: Any) -> tuple[int, int] | None:
    """Pixel size of the image inline in ``source``.

    Args:
        source: a string (OpenAI data URL, or bare base64) or an object with
            ``"type": "base64"`` and a string ``data`` (Anthropic).

    Returns:
        ``(width, height)``, or ``None`` for a remote URL, a file reference, or data whose
        header is not understood.

    >>> inline_dims({"type": "base64", "media_type": "image/gif", "data": "R0lGODlhAwACAAAAAAAA"})
    (3, 2)
    """
    if isinstance(source, str):
        return dims_from_base64(source)
    if isinstance(source, Mapping):
        data = source.get("data")
        if source.get("type") == "base64" and isinstance(data, str):
            return dims_from_base64(data)
    return None


class _Base64:
    """Random access to the bytes encoded by base64 text: reading byte ``i`` decodes only
    the 4-character quantum that holds it."""

    def __init__(self, chars: str, length: int) -> None:
        self.chars = chars
        self.len = length

    def byte(self, i: int) -> int | None:
        if i >= self.len:
            return None
        start = i // 3 * 4
        v = 0
        for c in self.chars[start : start + 4].ljust(4, "A"):
            d = _B64.get(c)
            if d is None:
                return None
            v = (v << 6) | d
        return (v >> (16 - 8 * (i % 3))) & 0xFF

    def read(self, off: int, n: int) -> bytes | None:
        out = bytearray()
        for k in range(n):
            b = self.byte(off + k)
            if b is None:
                return None
            out.append(b)
        return bytes(out)


def _reader(text: str) -> _Base64 | None:
    chars = text
    for _ in range(2):
        if chars.endswith("="):
            chars = chars[:-1]
    n = len(chars)
    extra = {0: 0, 2: 1, 3: 2}.get(n % 4)
    if extra is None:
        return None
    return _Base64(chars, n // 4 * 3 + extra)


def dims_from_base64(data: str) -> tuple[int, int] | None:
    """Pixel size of a PNG, GIF, WebP or JPEG image given as base64 text.

    Only the base64 quanta that hold the header bytes are decoded (a JPEG's segments are
    skipped by their length fields). ASCII spaces, tabs and line breaks are ignored.

    Args:
        data: bare base64 (standard or URL-safe alphabet, padded or not) or a
            ``data:<type>;base64,<data>`` URL (``data:`` and ``;base64`` in any ASCII case).

    Returns:
        ``(width, height)`` in pixels, or ``None`` for non-ASCII text, other formats, a
        malformed or truncated header, or a size of 0.

    >>> dims_from_base64("data:image/gif;base64,R0lGODlhAwACAAAAAAAA")
    (3, 2)
    """
    if data[:5].translate(_LOWER) == "data:":
        head, comma, data = data.partition(",")
        if not comma or len(head) < 7 or head[-7:].translate(_LOWER) != ";base64":
            return None
    if not data.isascii():
        return None
    r = _reader(data.translate(_SPACE))
    if r is None:
        return None
    head4 = r.read(0, 4)
    if head4 is None:
        return None
    parse: Callable[[_Base64], tuple[int, int] | None] | None = None
    if head4[:2] == b"\xff\xd8":
        parse = _jpeg
    elif head4 == b"\x89PNG":
        parse = _png
    elif head4 == b"GIF8":
        parse = _gif
    elif head4 == b"RIFF":
        parse = _webp
    dims = parse(r) if parse is not None else None
    if dims is None or dims[0] == 0 or dims[1] == 0:
        return None
    return dims


def _png(r: _Base64) -> tuple[int, int] | None:
    """The 8-byte signature, then IHDR: width and height, 32-bit big-endian."""
    h = r.read(0, 24)
    if h is None or h[:8] != b"\x89PNG\r\n\x1a\n" or h[12:16] != b"IHDR":
        return None
    return int.from_bytes(h[16:20], "big"), int.from_bytes(h[20:24], "big")


def _gif(r: _Base64) -> tuple[int, int] | None:
    """``GIF87a``/``GIF89a``, then the logical screen size, 16-bit little-endian."""
    h = r.read(0, 10)
    if h is None or h[:6] not in (b"GIF87a", b"GIF89a"):
        return None
    return int.from_bytes(h[6:8], "little"), int.from_bytes(h[8:10], "little")


def _webp(r: _Base64) -> tuple[int, int] | None:
    """``RIFF``, size, ``WEBP``, then a ``VP8 ``, ``VP8L`` or ``VP8X`` chunk."""
    h = r.read(0, 16)
    if h is None or h[8:12] != b"WEBP":
        return None
    chunk = h[12:16]
    if chunk == b"VP8 ":
        f = r.read(20, 10)
        if f is None or f[3:6] != b"\x9d\x01\x2a":
            return None
        return int.from_bytes(f[6:8], "little") & 0x3FFF, int.from_bytes(f[8:10], "little") & 0x3FFF
    if chunk == b"VP8L":
        f = r.read(20, 5)
        if f is None or f[0] != 0x2F:
            return None
        bits = int.from_bytes(f[1:5], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        f = r.read(20, 10)
        if f is None:
            return None
        return int.from_bytes(f[4:7], "little") + 1, int.from_bytes(f[7:10], "little") + 1
    return None


def _jpeg(r: _Base64) -> tuple[int, int] | None:
    """Walk the marker segments to the first start-of-frame (C0-CF but C4, C8, CC): its
    header holds precision, then height and width, 16-bit big-endian."""
    pos = 2
    while True:
        if r.byte(pos) != 0xFF:
            return None
        marker = r.byte(pos + 1)
        while marker == 0xFF:  # fill bytes before a marker
            pos += 1
            marker = r.byte(pos + 1)
        if marker is None:
            return None
        pos += 2
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # standalone: TEM, RSTn, SOI
            continue
        if marker in (0x00, 0xD9, 0xDA):
            return None
        raw = r.read(pos, 2)
        if raw is None:
            return None
        length = int.from_bytes(raw, "big")
        if length < 2:
            return None
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            f = r.read(pos + 2, 5)
            if f is None:
                return None
            return int.from_bytes(f[3:5], "big"), int.from_bytes(f[1:3], "big")
        pos += length
