"""Readable pure-Python implementation of the engine's rules.

This is the oracle for differential tests (``tests/test_differential.py`` asserts the
Rust engine and this module agree exactly, token counts and cut positions included) and
the pure-Python baseline in benchmarks. It favours clarity over speed; it mirrors the Rust
modules ``estimate``, ``turns``, ``pairs`` and ``trim`` function by function.

Everything here works on canonical :class:`~contextwindow.messages.Message` lists and
returns ``(ops, report)`` where ``ops`` is a list of ``(src, message_or_None)``: ``src``
is the input index (``None`` for a synthetic message) and the message is ``None`` when the
input message is kept unchanged.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from . import _image
from ._jsontext import ENCODER
from ._marks import ATTACH, CONSONANT, LINKER, PREPEND, UPPER
from .adapters import anthropic_only_type
from .messages import (
    BREADCRUMB,
    MISSING_RESULT,
    RESULTS_REMOVED,
    ImagePart,
    Message,
    OpaquePart,
    Part,
    TextPart,
    ToolCall,
    ToolResult,
)
from .report import Fate, FitReport, PairChange, Segmentation, Violation

_ATTACH0, _PREPEND0, _LINKER0, _CONSONANT0 = ([lo for lo, _ in t] for t in (ATTACH, PREPEND, LINKER, CONSONANT))

SCALE = 10_000
TOOL_RESULTS_PREFIX = "[Tool results]"

# --------------------------------------------------------------------------- estimate
# Mirrors rust/contextwindow-core/src/features.rs and estimate.rs.

MAX_KEY = 16
GROUPS = (
    "latin", "greek", "cyrl", "armgeo", "rtl", "indic", "sea", "otherl",
    "cjk", "kana", "hangul", "sym", "emoji", "joiner", "astral",
)  # fmt: skip
LETTER_GROUPS = frozenset(("latin", "greek", "cyrl", "armgeo", "rtl", "indic", "sea", "otherl", "hangul"))
CJKISH = frozenset(("cjk", "kana", "hangul"))
# groups whose 2-3 character tokens are looked up: CJK-ish words and symbol runs (box drawing)
NGRAM_GROUPS = CJKISH | {"sym"}
FEATURES = (
    "ngrams", "known", "known_bare", "unknown_1_3", "unknown_4_6", "unknown_7_9", "unknown_10_13",
    "unknown_14_up", "unknown_letters_beyond_14", "unknown_prefixed", "unknown_punct",
    "unknown_punct_beyond_2", "unknown_space", "unknown_space_beyond_2", "unknown_newlines",
    "unknown_space_switches", "unknown_rare_bigrams", "digits", "digit_groups", "controls",
    "non_ascii_words", "unknown_punct_switches", "unknown_punct_run_tokens",
    "unknown_upper_beyond_1", "non_ascii_upper_after_upper",
    *(f"ch_{g}" for g in GROUPS),
    *(f"ex_{g}" for g in GROUPS),
)  # fmt: skip
_IX = {f: i for i, f in enumerate(FEATURES)}
_BUCKETS = ("unknown_1_3", "unknown_4_6", "unknown_7_9", "unknown_10_13", "unknown_14_up")


_M64 = 0xFFFFFFFFFFFFFFFF


def key_hash(key: bytes) -> int:
    """Hash of a 1-16 byte key: little-endian halves (zero padded), each xored with a
    constant (the length into the high half), multiplied as 128-bit numbers and folded."""
    lo = int.from_bytes(key[:8], "little")
    hi = int.from_bytes(key[8:16], "little")
    r = (lo ^ 0x9E3779B97F4A7C15) * (hi ^ 0xD6E8FEB86659FD93 ^ len(key))
    return (r & _M64) ^ (r >> 64)


# Families whose filter takes its bit positions from a remixed key hash. The two
# vocabularies share most short tokens, so with the same positions their filters' set bits
# coincide and so do their false positives (a punctuation run "known" to both): remixed,
# the two families' filters err independently. (`conservative` has a filter of its own.)
REMIX = {"cl100k": False, "tekken": True}


def family_hash(h: int, remix: bool) -> int:
    """The key hash a family's filter uses: ``h`` itself, or ``h`` rotated left by 26 bits,
    so the word comes from bits 22-37 and the bit positions from bits 38-61 of ``h``, where
    ``h``'s own word comes from bits 48-63 and its positions from bits 0-23."""
    if not remix:
        return h
    return ((h << 26) | (h >> 38)) & _M64


# A filter's 64-bit words: 2^16 (2^22 bits, 512 KiB). At 2^14 words about 1.4% of random
# 10-15-letter words were false positives of cl100k's filter; at 2^16, about 0.03%.
BLOOM_WORD_BITS = 16


def bloom_bits(key: bytes, remix: bool = False) -> tuple[int, int, int, int]:
    """The four bit positions of a key, all in one 64-bit word: the (family's) hash's top 16
    bits (``BLOOM_WORD_BITS``) pick the word, its four lowest 6-bit fields the bits."""
    h = family_hash(key_hash(key), remix)
    base = (h >> (64 - BLOOM_WORD_BITS)) << 6
    return base + (h & 63), base + ((h >> 6) & 63), base + ((h >> 12) & 63), base + ((h >> 18) & 63)


@dataclass(frozen=True)
class PairChars:
    """The characters of a vocabulary's n-gram tokens (``pair_chars`` in the profile data,
    from ``tools/fit_profiles.py``): ``first`` and ``second`` of its 2-character tokens,
    ``triple`` the first of its 3-character ones, ``spaced`` the first after the space of
    its tokens of a space and 1-3 CJK, kana or hangul characters. A pair is looked up in
    the Bloom filter only when its characters are in ``first`` and ``second``, a
    3-character key only when its first is in ``triple``, a space and what follows only
    when the character after the space is in ``spaced`` (the scanner's characters table,
    ``char_table`` in Rust)."""

    first: frozenset[int]
    second: frozenset[int]
    triple: frozenset[int]
    spaced: frozenset[int]

    @staticmethod
    def of(lists: dict[str, str]) -> PairChars:
        """From the profile data's strings of characters."""
        return PairChars(*(frozenset(map(ord, lists[k])) for k in ("first", "second", "triple", "spaced")))


@dataclass(frozen=True)
class Vocab:
    """A tokenizer family's Bloom filter of short tokens and standalone-cost table, and the
    mask of letter pairs rare inside tokens (bit ``26 * a + b``, case folded)."""

    bloom: bytes
    table: bytes
    rare: bytes
    remix: bool = False
    # characters per token in a long run of each ASCII character (the tokenizer's count
    # of 240 in a row): 4 for "(" in cl100k, 2 in Tekken, 60 for "-" in cl100k
    runs: bytes = bytes([1]) * 128
    # the characters of its n-gram tokens; None: every pair goes to the Bloom filter
    pairs: PairChars | None = None

    def may_pair(self, a: int, b: int) -> bool:
        """Whether the characters ``a``, ``b`` can be a 2-character token (then the
        Bloom filter decides)."""
        return self.pairs is None or (a in self.pairs.first and b in self.pairs.second)

    def may_triple(self, a: int) -> bool:
        """Whether a 3-character token can start with ``a``."""
        return self.pairs is None or a in self.pairs.triple

    def may_follow_space(self, a: int) -> bool:
        """Whether a token of a space and CJK, kana or hangul can go on with ``a``."""
        return self.pairs is None or a in self.pairs.spaced

    def is_rare(self, a: int, b: int) -> bool:
        k = 26 * ((a | 0x20) - 0x61) + ((b | 0x20) - 0x61)
        return bool(self.rare[k >> 3] >> (k & 7) & 1)

    def __contains__(self, key: bytes) -> bool:
        return all(self.bloom[p >> 3] >> (p & 7) & 1 for p in bloom_bits(key, self.remix))

    def cost(self, cp: int) -> int:
        if cp < 0x10000:
            idx = cp
        elif 0x1F000 <= cp <= 0x1FAFF:
            idx = 0x10000 + cp - 0x1F000
        else:
            return 4
        return ((self.table[idx >> 2] >> ((idx & 3) * 2)) & 3) + 1


def group(cp: int) -> str:
    """Script group of a non-ASCII code point."""
    if cp in (0x200D, 0x20E3) or 0xFE00 <= cp <= 0xFE0F or 0xE0000 <= cp <= 0xE007F:
        return "joiner"
    if 0x3040 <= cp <= 0x30FF or 0x31F0 <= cp <= 0x31FF or 0xFF66 <= cp <= 0xFF9F:
        return "kana"
    if 0x1100 <= cp <= 0x11FF or 0x3130 <= cp <= 0x318F or 0xA960 <= cp <= 0xA97F or 0xAC00 <= cp <= 0xD7FF:
        return "hangul"
    if (
        0x2E80 <= cp <= 0x303F
        or 0x3190 <= cp <= 0x31EF
        or 0x3400 <= cp <= 0x4DBF
        or 0x4E00 <= cp <= 0x9FFF
        or 0xF900 <= cp <= 0xFAFF
        or 0xFE30 <= cp <= 0xFE4F
        or 0xFF00 <= cp <= 0xFFEF
        or 0x20000 <= cp <= 0x3FFFF
    ):
        return "cjk"
    if 0x1F000 <= cp <= 0x1FAFF:
        return "emoji"
    if cp >= 0x10000:
        return "astral"
    if cp <= 0x2FF:
        return "latin" if cp >= 0xC0 and cp not in (0xD7, 0xF7) else "sym"
    for lo, hi, g in (
        (0x300, 0x36F, "joiner"),
        (0x370, 0x3FF, "greek"),
        (0x400, 0x52F, "cyrl"),
        (0x530, 0x58F, "armgeo"),
        (0x590, 0x8FF, "rtl"),
        (0x900, 0xDFF, "indic"),
        (0x10A0, 0x10FF, "armgeo"),
        (0xE00, 0x10FF, "sea"),
        (0x1780, 0x17FF, "sea"),
        (0x1E00, 0x1EFF, "latin"),
        (0x1F00, 0x1FFF, "greek"),
        (0x2000, 0x2BFF, "sym"),
        (0xFB1D, 0xFDFF, "rtl"),
        (0xFE70, 0xFEFF, "rtl"),
        (0xE000, 0xF8FF, "sym"),
    ):
        if lo <= cp <= hi:
            return g
    return "otherl"


_UPPER0 = [lo for lo, _ in UPPER]


def is_upper(cp: int) -> bool:
    """Whether a code point is an uppercase letter of the BMP (``_marks.UPPER``)."""
    k = bisect.bisect_right(_UPPER0, cp) - 1
    return k >= 0 and cp <= UPPER[k][1]


def _akind(x: int) -> str:
    if 0x61 <= x <= 0x7A:
        return "lo"
    if 0x41 <= x <= 0x5A:
        return "up"
    if 0x30 <= x <= 0x39:
        return "dg"
    if x == 0x20:
        return "sp"
    if x in (0x0A, 0x0D):
        return "nl"
    if x in (0x09, 0x0B, 0x0C):
        return "tb"
    if x < 0x20 or x == 0x7F:
        return "ct"
    return "pu" if x < 0x80 else "na"


def features(text: str, vocab: Vocab) -> dict[str, int]:
    """The single-pass features of ``text`` for one family (see features.rs)."""
    f = [0] * len(FEATURES)
    b = text.encode("utf-8")
    n = len(b)
    kinds = [_akind(x) for x in b] + ["na"]

    def known(s: int, e: int) -> bool:
        return e - s == 1 or (e - s <= MAX_KEY and b[s:e] in vocab)

    def unknown_letters(s: int, e: int) -> None:
        length = e - s
        bucket = 0 if length <= 3 else 1 if length <= 6 else 2 if length <= 9 else 3 if length <= 13 else 4
        f[_IX[_BUCKETS[bucket]]] += 1
        if bucket == 4:
            f[_IX["unknown_letters_beyond_14"]] += length - 14
        f[_IX["unknown_rare_bigrams"]] += sum(vocab.is_rare(b[q], b[q + 1]) for q in range(s, e - 1))
        # words in capitals split into more pieces than their lowercase forms
        f[_IX["unknown_upper_beyond_1"]] += max(0, sum(kinds[q] == "up" for q in range(s, e)) - 1)

    def piece(s: int, e: int, unknown: str) -> None:
        if known(s, e):
            f[_IX["known"]] += 1
        else:
            f[_IX[unknown]] += 1
            f[_IX[unknown + "_beyond_2"]] += max(0, e - s - 2)
            switches = sum(1 for q in range(s + 1, e) if b[q] != b[q - 1])
            if unknown == "unknown_space":
                f[_IX["unknown_newlines"]] += sum(1 for x in b[s:e] if x in (0x0A, 0x0D))
                f[_IX["unknown_space_switches"]] += switches
            else:  # punctuation: "()()()" is a token per character, "======" merges;
                # the first two switches are in the piece's own weight ("),", ");")
                f[_IX["unknown_punct_switches"]] += max(0, switches - 3)
                f[_IX["unknown_punct_run_tokens"]] += run_tokens(s, e)

    def run_tokens(s: int, e: int) -> int:
        # each run of one punctuation character (2 or more), in the family's characters
        # per token of it: tokenizers merge "(" 2-4 at a time but "-" dozens at a time
        total, q = 0, s
        while q < e:
            r = q + 1
            while r < e and b[r] == b[q]:
                r += 1
            if r - q >= 2 and kinds[q] == "pu":
                total += -(-(r - q) // max(1, vocab.runs[b[q]]))
            q = r
        return total

    def char_in(q: int, groups: frozenset[str]) -> bool:
        # a 3-byte character of one of the groups starts at q
        return q + 3 <= n and 0xE0 <= b[q] < 0xF0 and group(ord(b[q : q + 3].decode())) in groups

    def cjk_char(q: int) -> bool:
        return char_in(q, CJKISH)

    def spaced_ngram(q: int) -> int:
        # CJK-ish characters (1-3) after the space at q - 1 that make one token with it, or
        # 0: tokenizers keep the space before a word with the word, as with letters
        if not cjk_char(q) or not vocab.may_follow_space(ord(b[q : q + 3].decode())):
            return 0
        if cjk_char(q + 3) and b[q - 1 : q + 6] in vocab:
            return 3 if cjk_char(q + 6) and b[q - 1 : q + 9] in vocab else 2
        return 1 if b[q - 1 : q + 3] in vocab else 0

    i = 0
    prefix: int | None = None
    na_prev_letter = False
    na_prev_upper = False
    consumed = 0
    while i < n:
        k = kinds[i]
        if k == "na":
            size = 2 if b[i] < 0xE0 else 3 if b[i] < 0xF0 else 4
            cp = ord(b[i : i + size].decode())
            g = group(cp)
            # an uppercase letter right after an uppercase letter (ASCII, or the non-ASCII
            # code point just read): text in capitals, which tokenizers split finely
            up = is_upper(cp)
            if up and i > 0 and (kinds[i - 1] == "up" or (b[i - 1] >= 0x80 and na_prev_upper)):
                f[_IX["non_ascii_upper_after_upper"]] += 1
            na_prev_upper = up
            if g in LETTER_GROUPS and not na_prev_letter:
                f[_IX["non_ascii_words"]] += 1
            na_prev_letter = g in LETTER_GROUPS
            if i >= consumed:
                hit = 0
                if (
                    size == 3
                    and g in NGRAM_GROUPS
                    and char_in(i + 3, NGRAM_GROUPS)
                    and vocab.may_pair(cp, ord(b[i + 3 : i + 6].decode()))
                    and b[i : i + 6] in vocab
                ):
                    # a 2-character token, extended to 3 when that is a token too
                    third = char_in(i + 6, NGRAM_GROUPS) and vocab.may_triple(cp)
                    hit = 3 if third and b[i : i + 9] in vocab else 2
                if hit:
                    f[_IX["ngrams"]] += 1
                    consumed = i + 3 * hit
                else:
                    f[_IX["ch_" + g]] += 1
                    f[_IX["ex_" + g]] += vocab.cost(cp) - 1
            prefix = None
            i += size
            continue
        na_prev_letter = False
        j = i + 1
        if k in ("lo", "up"):
            while kinds[j] in ("lo", "up"):
                j += 1
            s, first = i, True
            for m in range(i + 1, j + 1):
                if m == j or (kinds[m - 1] == "lo" and kinds[m] == "up"):
                    if first and prefix is not None:
                        if known(prefix, m):
                            f[_IX["known"]] += 1
                        elif known(s, m):
                            f[_IX["known_bare"]] += 1
                        else:
                            unknown_letters(s, m)
                            f[_IX["unknown_prefixed"]] += 1
                    elif known(s, m):
                        f[_IX["known"]] += 1
                    else:
                        unknown_letters(s, m)
                    first, s = False, m
            prefix = None
        elif k == "dg":
            while kinds[j] == "dg":
                j += 1
            f[_IX["digits"]] += j - i
            f[_IX["digit_groups"]] += -(-(j - i) // 3)
            prefix = None
        elif k == "ct":
            f[_IX["controls"]] += 1
            prefix = None
        elif k == "pu":
            while kinds[j] == "pu":
                j += 1
            if j - i == 1 and prefix is None and kinds[j] in ("lo", "up"):
                prefix = i  # a single punctuation character leads the next letters
            else:
                start = i if prefix is None else prefix
                q = j  # where the line breaks the piece takes start
                while kinds[j] == "nl":
                    j += 1
                if 0x0D in b[q:j] and not known(start, j):
                    # a carriage return among them, and the piece no token: the
                    # punctuation, then its line breaks as whitespace (Tekken spends a
                    # token on "\r" and one on "\n" after ",": ",\r\n" is 3 there)
                    piece(start, q, "unknown_punct")
                    piece(q, j, "unknown_space")
                else:
                    piece(start, j, "unknown_punct")
                prefix = None
        else:  # whitespace: up to the last line break, then the rest
            while kinds[j] in ("sp", "nl", "tb"):
                j += 1
            nl = [m for m in range(i, j) if kinds[m] == "nl"]
            a_end = nl[-1] + 1 if nl else i
            if a_end > i:
                piece(i, a_end, "unknown_space")
            prefix = None
            if a_end < j:
                hit = spaced_ngram(j) if b[j - 1] == 0x20 else 0
                if hit:
                    # the space and the CJK-ish characters after it are one token
                    if j - 1 > a_end:
                        piece(a_end, j - 1, "unknown_space")
                    f[_IX["ngrams"]] += 1
                    consumed = j + 3 * hit
                elif kinds[j] in ("lo", "up") or (kinds[j] == "pu" and b[j - 1] == 0x20):
                    if j - 1 > a_end:
                        piece(a_end, j - 1, "unknown_space")
                    prefix = j - 1
                elif kinds[j] == "dg" or (kinds[j] == "na" and j < n):
                    # a digit run takes no leading whitespace, but the run's last byte is
                    # a piece of its own before it ("   5": "  ", " ", "5"); so before a
                    # non-ASCII character ("我  们": the run as one piece lost a token)
                    if j - 1 > a_end:
                        piece(a_end, j - 1, "unknown_space")
                    piece(j - 1, j, "unknown_space")
                else:
                    piece(a_end, j, "unknown_space")
        i = j
    return dict(zip(FEATURES, f, strict=True))


def _data() -> tuple[dict[str, Any], dict[str, Vocab]]:
    from . import _native

    data = msgspec.json.decode(_native.PROFILE_JSON)
    rare = bytes.fromhex(data["rare_bigrams"])

    # run_chars is absent only from an engine built before the data had it (while
    # tools/fit_profiles.py rewrites the data); build.rs requires it
    def vocab(name: str, entry: dict[str, Any], remix: bool) -> Vocab:
        runs = bytes.fromhex(entry.get("run_chars", "01" * 128))
        pairs = PairChars.of(entry["pair_chars"]) if "pair_chars" in entry else None
        return Vocab(*_native.vocab_data(name), rare, remix, runs, pairs)

    vocabs = {name: vocab(name, fam, REMIX[name]) for name, fam in data["families"].items()}
    # the conservative profile's own vocabulary (keys of both families, larger costs)
    vocabs["conservative"] = vocab("conservative", data["conservative"], False)
    return data, vocabs


_DATA, VOCABS = _data()


@dataclass(frozen=True)
class Profile:
    """A profile: its text rule and overheads; see ``contextwindow.estimate``."""

    name: str
    rule: str  # "fim", "bytes4", "fitted" or "conservative" (its own weights times its margin)
    family: str | None
    message_overhead: int
    tool_call_overhead: int
    tool_overhead: int
    name_overhead: int  # per message with a name, beside the name's text
    image_fixed: int | None  # None: the provider rules of contextwindow._image


def _fitted(name: str) -> Profile:
    fam = _DATA["families"][name]
    return Profile(
        name,
        "fitted",
        name,
        fam["message_overhead"],
        fam["tool_call_overhead"],
        fam["tool_overhead"],
        fam["name_overhead"],
        None,
    )


def _max_overhead(key: str) -> int:
    return int(max(fam[key] for fam in _DATA["families"].values()))


PROFILES = {
    "conservative": Profile(
        "conservative",
        "conservative",
        None,
        _max_overhead("message_overhead"),
        _max_overhead("tool_call_overhead"),
        _max_overhead("tool_overhead"),
        _max_overhead("name_overhead"),
        None,
    ),
    "cl100k": _fitted("cl100k"),
    "tekken": _fitted("tekken"),
    "fim": Profile("fim", "fim", None, 4, 0, 0, 0, 765),
    "bytes4": Profile("bytes4", "bytes4", None, 4, 0, 0, 0, 765),
}


def weighted_sum(text: str, family: str) -> int:
    """Sum of a vocabulary's weights (a family's, or ``conservative``'s) times the text's
    features, in 1/SCALE tokens."""
    w = (_DATA["conservative"] if family == "conservative" else _DATA["families"][family])["weights"]
    return sum(n * wi for n, wi in zip(features(text, VOCABS[family]).values(), w, strict=True))


def text_tokens(text: str, p: Profile) -> int:
    """Tokens of a text: 0 for "", at least 1 otherwise."""
    if not text:
        return 0
    if p.rule == "fim":
        ascii_ = sum(1 for c in text if ord(c) < 128)
        t = (ascii_ * 3000 + (len(text) - ascii_) * 8000) // 12_000
    elif p.rule == "bytes4":
        t = -(-len(text.encode("utf-8")) // 4)
    elif p.rule == "fitted":
        s = weighted_sum(text, p.family or "")
        t = (s + SCALE // 2) // SCALE if s > 0 else 0
    else:
        s = weighted_sum(text, "conservative") * _DATA["conservative"]["margin_percent"]
        t = -(-s // (SCALE * 100)) if s > 0 else 0
    return max(t, 1)


def image_tokens(part: ImagePart, p: Profile) -> int:
    """A profile's fixed cost, else the provider rules of ``contextwindow._image``."""
    if p.image_fixed is not None:
        return p.image_fixed
    return _image.image_tokens(part.width, part.height, part.detail, part.source)


UNSEEN_DOCUMENT_TOKENS = 3_000
"""Tokens a document given by reference adds to its JSON text, in every profile (the
Rust core's ``UNSEEN_DOCUMENT_TOKENS``): one page at the top of the 1,500-3,000 tokens a
page of text that Anthropic's PDF support page gives. The request does not hold the
document, so no rule can read its pages."""


def unseen_document(part: OpaquePart) -> bool:
    """Whether an opaque part is a document given by reference: an Anthropic ``document``
    whose ``source`` has ``type`` ``url`` or ``file``, or an OpenAI ``file`` part whose
    ``file`` holds a string ``file_id`` and no ``file_data`` (null is none)."""
    raw = part.raw
    if not isinstance(raw, dict):
        return False
    if part.type == "document":
        source = raw.get("source")
        return isinstance(source, dict) and source.get("type") in ("url", "file")
    if part.type == "file":
        f = raw.get("file")
        return isinstance(f, dict) and isinstance(f.get("file_id"), str) and f.get("file_data") is None
    return False


def part_tokens(part: Part, p: Profile, text: Callable[[str], int] | None = None) -> int:
    """Tokens of one part; ``text`` replaces the profile's text rule when given."""
    t = text or (lambda s: text_tokens(s, p))
    if isinstance(part, TextPart):
        return t(part.text)
    if isinstance(part, ImagePart):
        return image_tokens(part, p)
    if isinstance(part, ToolCall):
        return p.tool_call_overhead + t(part.name) + t(part.arguments)
    if isinstance(part, ToolResult):
        return sum(part_tokens(q, p, t) for q in part.content)
    if isinstance(part, OpaquePart):
        return t(ENCODER.encode(part.raw).decode()) + (UNSEEN_DOCUMENT_TOKENS if unseen_document(part) else 0)
    raise TypeError(type(part))


def message_tokens(m: Message, p: Profile, text: Callable[[str], int] | None = None) -> int:
    """Overhead + name (its overhead and text) + refusal + every part; ``text`` replaces the profile's text rule
    when given. A string ``refusal`` among the message's other keys (an OpenAI assistant
    message that declined) is text the model reads back; any other value counts nothing."""
    t = text or (lambda s: text_tokens(s, p))
    refusal = m.extra.get("refusal") if isinstance(m.extra, dict) else None
    if not isinstance(refusal, str):
        refusal = ""
    # extras are kept as given; lone surrogates count as U+FFFD, as in every other text
    refusal = refusal.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    name = 0 if m.name is None else p.name_overhead + t(m.name)
    return p.message_overhead + name + t(refusal) + sum(part_tokens(q, p, t) for q in m.content)


# --------------------------------------------------------------------------- cost models


class CostModel(Protocol):
    """What trimming needs to know about tokens: the cost of one message.

    Trimming only ever asks for whole-message costs (a breadcrumb message, a message with a
    breadcrumb block prepended, a message with one text shortened), so any message-level
    counter fits, a LangChain-style ``list of messages -> int`` counter included. With a
    built-in profile every such cost is additive over parts, which is what the Rust engine
    computes directly.

    A model whose message costs are a fixed amount plus a cost per part (a profile, a
    tokenizer) may also offer ``part_tokens(part)``: a trial cut is then priced by the one
    part it changes (:func:`_cost_with`).
    """

    def message_tokens(self, m: Message) -> int: ...


@dataclass(frozen=True)
class ProfileCost:
    """A built-in profile's rules: exactly what the Rust engine counts."""

    p: Profile

    def text_tokens(self, text: str) -> int:
        return text_tokens(text, self.p)

    def part_tokens(self, part: Part) -> int:
        return part_tokens(part, self.p)

    def message_tokens(self, m: Message) -> int:
        return message_tokens(m, self.p)


class TextRuleCost:
    """A profile's rules with its text rule replaced by ``text`` (``str -> tokens``).

    Every other rule stays: per-message and per-tool-call overhead, images, names, tool
    results counted by their inner parts, opaque blocks by their JSON text (and
    :data:`UNSEEN_DOCUMENT_TOKENS` for a document given by reference). ``""`` costs 0
    without calling ``text``. With ``text = lambda s: text_tokens(s, p)`` this gives exactly
    ``message_tokens(m, p)`` (``tests/test_exact.py`` checks it on generated messages).
    Each distinct string is counted once per instance.
    """

    def __init__(self, p: Profile, text: Callable[[str], int]) -> None:
        self.p = p
        self.text = text
        self._memo: dict[str, int] = {}

    def text_tokens(self, text: str) -> int:
        if not text:
            return 0
        n = self._memo.get(text)
        if n is None:
            n = self._memo[text] = self.text(text)
        return n

    def part_tokens(self, part: Part) -> int:
        return part_tokens(part, self.p, self.text_tokens)

    def message_tokens(self, m: Message) -> int:
        return message_tokens(m, self.p, self.text_tokens)


def cost_model(profile: str | Profile | CostModel) -> CostModel:
    """A profile name, a :class:`Profile` or a cost model, as a cost model."""
    if isinstance(profile, str):
        return ProfileCost(PROFILES[profile])
    if isinstance(profile, Profile):
        return ProfileCost(profile)
    return profile


# --------------------------------------------------------------------------- turns


def is_preamble_role(m: Message) -> bool:
    return m.role in ("system", "developer")


def has_calls(m: Message) -> bool:
    return any(isinstance(q, ToolCall) for q in m.content)


def has_results(m: Message) -> bool:
    return any(isinstance(q, ToolResult) for q in m.content)


#: The Chat Completions part types only a user message takes, kept as opaque parts (files,
#: audio, an ``image_url`` in a list read as Anthropic's; Rust ``model::USER_ONLY_PARTS``).
USER_ONLY_TYPES = frozenset({"file", "input_audio", "image_url"})
#: Opaque part types that are media, as an image is (``is_media_only``).
MEDIA_TYPES = USER_ONLY_TYPES | {"image", "document"}


def is_media_only(m: Message) -> bool:
    """A user message of images, files, audio or documents alone (no text but text parts
    with no words, :func:`_wordless`; no tool results): right after a message
    holding tool results it belongs to that message's tool unit (a screenshot an OpenAI
    agent sends after the tool messages; Rust ``Message::is_media_only``)."""
    if m.role != "user":
        return False
    media = [isinstance(q, ImagePart) or (isinstance(q, OpaquePart) and q.type in MEDIA_TYPES) for q in m.content]
    # a text part with no words (_wordless) is no text: an agent that always sends a
    # caption sends an empty one (fresh51 #2; fresh53 #3: one definition of blank)
    return any(media) and all(
        is_media or (isinstance(q, TextPart) and _wordless(q.text))
        for q, is_media in zip(m.content, media, strict=True)
    )


def first_text(m: Message) -> str | None:
    if m.content and isinstance(m.content[0], TextPart):
        return m.content[0].text
    return None


def is_breadcrumb(m: Message) -> bool:
    return m.role == "user" and len(m.content) == 1 and first_text(m) == BREADCRUMB


NOTICE_RE = re.compile(r"\[context compacted: [0-9]+ earlier messages removed\]")


def is_notice(m: Message) -> bool:
    """A user message that is only a middle-pruning notice (``compact.COMPACTION_NOTICE``)."""
    ft = first_text(m)
    return m.role == "user" and len(m.content) == 1 and ft is not None and NOTICE_RE.fullmatch(ft) is not None


def is_missing_result(q: Part) -> bool:
    """A synthetic result like ``_missing``'s (by its content: an earlier repair's too)."""
    return (
        isinstance(q, ToolResult)
        and not q.is_error
        and len(q.content) == 1
        and isinstance(q.content[0], TextPart)
        and q.content[0].text == MISSING_RESULT
    )


def is_blank_user(m: Message) -> bool:
    """A user message of no words: no parts, or text parts with none (``_wordless``). It
    asks nothing, so it is no real user message: it opens no turn and is never the current
    request (fresh53 #1). The Messages API still takes it for the end of the assistant's
    turn (:func:`_thinking_violations`). Rust ``Message::is_blank_user``."""
    return m.role == "user" and all(isinstance(q, TextPart) and _wordless(q.text) for q in m.content)


def is_real_user(m: Message) -> bool:
    """Starts a turn. A message of no words does not (:func:`is_blank_user`). Stub results
    next to what the user wrote do not make a carrier: repair
    put the stub of a call the user interrupted into the user's next message (Anthropic).
    Reads the message alone; where it stands, a screenshot in a tool unit is no real user
    message either (:func:`real_users`)."""
    if m.role != "user":
        return False
    content = m.content
    rest = [q for q in content if not isinstance(q, ToolResult)]
    # len(rest) < len(content): has_results(m)
    if len(rest) < len(content) and (
        not rest or not all(is_missing_result(q) for q in content if isinstance(q, ToolResult))
    ):
        return False
    ft = rest[0].text if rest and isinstance(rest[0], TextPart) else None
    only = len(rest) == 1 and ft is not None
    return (
        not (rest and all(isinstance(q, ToolCall) for q in rest))
        and not is_blank_user(m)
        and not (ft is not None and ft.startswith(TOOL_RESULTS_PREFIX))
        and not (only and ft == BREADCRUMB)
        and not (only and NOTICE_RE.fullmatch(ft or "") is not None)
    )


def current_request(msgs: list[Message], srcs: list[int | None], real_req: int | None) -> int | None:
    """The current request among the items of a repaired conversation (``srcs``: each
    item's input index, ``None`` for a message repair made): the input's last real user
    message, found by origin, or the last real user message after repair (``real_req``,
    :attr:`Segmentation.current_request` of the items) when that is later.

    Repair can make the input's request a tool-result carrier (a result moved out of the
    assistant message of its call goes into the next user message, ahead of what the
    user wrote): it starts no turn then, but is still what the user asked. And a message
    holding an orphan result beside what the user wrote is a carrier in the input and a
    real user message once repair drops the orphan: the later of the two is the request.
    """
    last = last_real_user(msgs)
    if last is None:
        return real_req
    lo = -1 if real_req is None else real_req
    w = next((w for w in range(len(srcs) - 1, lo, -1) if srcs[w] == last), None)
    return real_req if w is None else w


def is_thinking(part: Part) -> bool:
    """Whether ``part`` is an Anthropic extended-thinking block (``thinking`` or
    ``redacted_thinking``, kept opaque)."""
    return isinstance(part, OpaquePart) and part.type in ("thinking", "redacted_thinking")


def thinking_turn_start(msgs: Sequence[Message]) -> int:
    """Where the assistant's final turn starts, as the Messages API reads it for its
    extended-thinking rule: after the last real user message or the last user message of
    no words (:func:`is_blank_user`: no turn of ours, but the API's), 0 when there is
    neither. Rust ``model::thinking_turn_start``."""
    last = last_real_user(msgs)
    blank = next((i for i in range(len(msgs) - 1, -1, -1) if is_blank_user(msgs[i])), None)
    ends = [i for i in (last, blank) if i is not None]
    return max(ends) + 1 if ends else 0


def thinking_anchor(msgs: Sequence[Message], provider: str) -> int | None:
    """Under Anthropic rules, the first assistant message of the assistant's final turn
    (:func:`thinking_turn_start`; the conversation's first assistant message when no user
    message ends one) when its first part is a thinking block. With extended thinking on,
    the API refuses a request whose final assistant turn does not start with one, so every
    trim keeps this message as it keeps a pinned one (fresh20b #1)."""
    if provider != "anthropic":
        return None
    start = thinking_turn_start(msgs)
    a = next((i for i in range(start, len(msgs)) if msgs[i].role == "assistant"), None)
    if a is None or not msgs[a].content or not is_thinking(msgs[a].content[0]):
        return None
    return a


def is_observation(m: Message) -> bool:
    """A text-action agent's observation: a user message whose first part other than tool
    results is text starting with ``[Tool results]``. It never starts a turn, and
    :func:`trim_turns` cuts its text as it cuts tool results."""
    if m.role != "user":
        return False
    first = next((q for q in m.content if not isinstance(q, ToolResult)), None)
    return isinstance(first, TextPart) and first.text.startswith(TOOL_RESULTS_PREFIX)


def without_stubs(m: Message) -> Message | None:
    """``m`` without its stub results, ``None`` when it holds none."""
    if not any(is_missing_result(q) for q in m.content):
        return None
    return msgspec.structs.replace(m, content=[q for q in m.content if not is_missing_result(q)])


def resolve(msgs: list[Message]) -> tuple[list[list[tuple[int, int] | None]], list[list[list[int]]]]:
    """For each result part its call (message, part) or None; for each call the messages
    holding its results. A result answers the nearest preceding call with its id; one in
    an assistant message that makes a call with its id answers that call (whatever their
    order), and only when no result in another message does."""
    latest: dict[str, tuple[int, int]] = {}
    results: list[list[tuple[int, int] | None]] = []
    answered_by: list[list[list[int]]] = [[[] for _ in m.content] for m in msgs]
    own: list[tuple[int, int, int]] = []  # results in the assistant message of their call
    for i, m in enumerate(msgs):
        row: list[tuple[int, int] | None] = [None] * len(m.content)
        first: dict[str, int] = {}
        if m.role == "assistant" and has_results(m):
            for q, part in enumerate(m.content):
                if isinstance(part, ToolCall):
                    first.setdefault(part.id, q)
        for p, part in enumerate(m.content):
            if isinstance(part, ToolResult) and part.call_id in first:
                own.append((i, p, first[part.call_id]))
            elif isinstance(part, ToolResult) and part.call_id in latest:
                c = latest[part.call_id]
                lst = answered_by[c[0]][c[1]]
                if not lst:  # a call is answered once; a later result is a duplicate
                    row[p] = c
                    lst.append(i)
        results.append(row)
        if m.role == "assistant":
            here: set[str] = set()  # an id repeated in one message is one call: the first
            for p, part in enumerate(m.content):
                if isinstance(part, ToolCall) and part.id not in here:
                    here.add(part.id)
                    latest[part.id] = (i, p)
    for i, p, q in own:  # last: a result found elsewhere wins (fresh16a F6)
        if not answered_by[i][q]:
            results[i][p] = (i, q)
            answered_by[i][q].append(i)
    return results, answered_by


def real_users(msgs: list[Message], results: list[list[tuple[int, int] | None]] | None = None) -> list[bool]:
    """Of each message, whether it is a real user message where it stands: one
    (:func:`is_real_user`) that is not a screenshot in a tool unit (a user message of media
    alone right after a unit's results, :func:`tool_units`). Such a message is what a tool
    showed, not what the user asked: it opens no turn and is never the current request,
    so an OpenAI computer-use agent's task stays its turn's request as in the Anthropic
    shape (fresh50 #1; Rust ``turns::real_users``). ``results``: :func:`resolve`'s first
    answer for ``msgs``, when the caller has it already."""
    if results is None:
        results, _ = resolve(msgs)
    real = [is_real_user(m) for m in msgs]
    return real_users_in(msgs, tool_units(msgs, results, real), real)


def real_users_in(msgs: Sequence[Message], units: list[list[int]], real: list[bool] | None = None) -> list[bool]:
    """:func:`real_users` given the tool units of ``msgs`` (a segmentation's), and
    ``real``, :func:`is_real_user` of each message, when the caller has it: a user
    message of media alone is in a unit only as a screenshot there."""
    flags = [is_real_user(m) for m in msgs] if real is None else list(real)
    for u in units:
        for w in u:
            if flags[w] and is_media_only(msgs[w]):
                flags[w] = False
    for w, after in enumerate(after_observations(msgs)):
        if after:
            flags[w] = False
    return flags


def after_observations(msgs: Sequence[Message]) -> list[bool]:
    """Of each message, whether it is a user message of media alone right after a
    text-action agent's observation (:func:`is_observation`) or after another such
    message: the screenshot such an agent gets with its tool's text output, no real user
    message (:func:`real_users`) and in no tool unit; it goes with the observation's step
    (fresh53 #2; Rust ``turns::after_observations``)."""
    after = [False] * len(msgs)
    for i in range(1, len(msgs)):
        after[i] = is_media_only(msgs[i]) and (after[i - 1] or is_observation(msgs[i - 1]))
    return after


def last_real_user(msgs: Sequence[Message]) -> int | None:
    """Index of the last real user message where it stands (:func:`real_users`): the
    current request. Resolves the calls only when the last :func:`is_real_user` is a
    message of media alone (Rust ``turns::last_real_user``)."""
    last = next((i for i in range(len(msgs) - 1, -1, -1) if is_real_user(msgs[i])), None)
    if last is None or not is_media_only(msgs[last]):
        return last
    real = real_users(list(msgs))
    return next((i for i in range(len(real) - 1, -1, -1) if real[i]), None)


def tool_units(
    msgs: list[Message], results: list[list[tuple[int, int] | None]], real: list[bool] | None = None
) -> list[list[int]]:
    """Tool units (see DESIGN.md section 4), each with the user messages of media alone
    right after its results (:func:`is_media_only`: a screenshot an OpenAI agent sends
    after the tool messages; fresh49 #1) and the ``[Tool results]`` observations there
    (:func:`is_observation`; fresh53 #5); ``real``: :func:`is_real_user` of each message,
    when the caller has it already."""
    parent = list(range(len(msgs)))

    def find(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    if real is None:
        real = [is_real_user(m) for m in msgs]
    in_unit = [m.role == "assistant" and has_calls(m) for m in msgs]
    for i, row in enumerate(results):
        if real[i]:
            continue  # its results are stubs; the message opens a turn
        for c in row:
            if c is not None:
                a, b = find(i), find(c[0])
                parent[max(a, b)] = min(a, b)
                in_unit[i] = in_unit[c[0]] = True
    # a user message of media alone right after a message of the unit holding tool
    # results (or after another such message) is what the tool showed (a screenshot an
    # OpenAI agent sends after the tool messages): it goes with the unit (fresh49 #1); so
    # does a `[Tool results]` observation there, output with no command of its own
    # (fresh53 #5: in no unit and no step, it stayed while newer steps went)
    shown = False
    for i in range(1, len(msgs)):
        joins = is_media_only(msgs[i]) or is_observation(msgs[i])
        shown = joins and (shown or (in_unit[i - 1] and has_results(msgs[i - 1])))
        if shown:
            a, b = find(i), find(i - 1)
            parent[max(a, b)] = min(a, b)
            in_unit[i] = True
    groups: dict[int, list[int]] = {}
    for i in range(len(msgs)):
        if in_unit[i]:
            groups.setdefault(find(i), []).append(i)
    return sorted(groups.values(), key=lambda u: u[0])


def segment(
    msgs: list[Message],
    real_user: list[bool] | None = None,
    results: list[list[tuple[int, int] | None]] | None = None,
) -> Segmentation:
    """Preamble, turns, tool units and current request of ``msgs``; ``real_user``
    (:func:`is_real_user` of each message) and ``results`` (:func:`resolve`'s first
    answer for ``msgs``), when the caller has them already."""
    n = len(msgs)
    pre = next((i for i, m in enumerate(msgs) if not is_preamble_role(m)), n)
    if results is None:
        results, _ = resolve(msgs)
    flags = [is_real_user(m) for m in msgs] if real_user is None else real_user
    units = tool_units(msgs, results, flags)
    # a screenshot in a tool unit or after an observation is not a real user message
    where = real_users_in(msgs, units, flags)
    real = [i for i in range(pre, n) if where[i]]
    boundary = set(real[1:])
    for u in units:
        boundary -= set(range(u[0] + 1, u[-1] + 1))
    turns: list[tuple[int, int]] = []
    if pre < n:
        start = pre
        for i in range(pre + 1, n):
            if i in boundary:
                turns.append((start, i))
                start = i
        turns.append((start, n))
    return Segmentation(preamble_end=pre, turns=turns, units=units, current_request=real[-1] if real else None)


# --------------------------------------------------------------------------- pairs


def fix_content_kind(m: Message) -> Message:
    """``content_kind="text"`` only fits a single text part; otherwise ``"parts"``."""
    rest = [q for q in m.content if not isinstance(q, ToolCall)]
    single_text = len(rest) == 1 and isinstance(rest[0], TextPart)
    if m.content_kind == "text" and not single_text:
        return msgspec.structs.replace(m, content_kind="parts")
    return m


def _call_ids(m: Message) -> list[str]:
    return [q.id for q in m.content if isinstance(q, ToolCall)]


def _result_ids(m: Message) -> list[str]:
    return [q.call_id for q in m.content if isinstance(q, ToolResult)]


#: The ``detail`` values the Chat Completions API takes for an image (Rust ``OPENAI_DETAILS``).
OPENAI_DETAILS = ("low", "high", "auto")


def _refused_details(m: Message) -> list[str]:
    """The ``detail`` of each image of ``m`` (its parts, then each tool result's parts, in
    order) that the Chat Completions API refuses (fresh20a F7)."""
    out: list[str] = []
    for p in m.content:
        inner = p.content if isinstance(p, ToolResult) else []
        for q in [p, *inner]:
            if isinstance(q, ImagePart) and q.detail is not None and q.detail not in OPENAI_DETAILS:
                out.append(q.detail)
    return out


def _refused_images(m: Message) -> int:
    """How many images of ``m`` the Chat Completions API refuses: those of a message whose
    role is not ``user``, and those of a tool result (the Rust ``refused_images``)."""
    n = 0
    for p in m.content:
        if isinstance(p, ImagePart) and m.role != "user":
            n += 1
        if isinstance(p, ToolResult):
            n += sum(isinstance(q, ImagePart) for q in p.content)
    return n


def _opaque_parts(m: Message) -> list[tuple[str | None, str]]:
    """Each opaque part of ``m``, its own and then each tool result's, in order, as the
    call id of the tool result holding it (``None`` for a part of the message) and its
    type (the Rust ``opaque_parts``)."""
    out: list[tuple[str | None, str]] = []
    for p in m.content:
        if isinstance(p, OpaquePart):
            out.append((None, p.type))
        if isinstance(p, ToolResult):
            out.extend((p.call_id, q.type) for q in p.content if isinstance(q, OpaquePart))
    return out


def _refused_payloads(m: Message) -> list[str | None]:
    """The image, file and audio parts of ``m`` kept as opaque parts that the Chat
    Completions API refuses, as the call id of the tool result holding each (``None``
    for a part of the message): those of a message whose role is not ``user``, and those
    of a tool result (the Rust ``refused_payloads``)."""
    return [cid for cid, t in _opaque_parts(m) if t in USER_ONLY_TYPES and (cid is not None or m.role != "user")]


def validate(msgs: list[Message], provider: str) -> list[Violation]:
    """Provider rule violations (same codes and order as the Rust engine; detail omitted)."""
    out: list[Violation] = []

    def v(i: int, code: str, cid: str | None = None) -> None:
        out.append(Violation(index=i, code=code, detail="", call_id=cid))

    if provider == "openai":
        owner: int | None = None
        seen: set[str] = set()
        for i, m in enumerate(msgs):
            for _ in _refused_details(m):
                v(i, "detail_not_allowed")
            for _ in range(_refused_images(m)):
                v(i, "image_not_allowed")
            for cid in [*_refused_payloads(m), *_foreign_blocks(m, "openai")]:
                v(i, "block_not_allowed", cid)
            if m.role == "tool":
                ids = _result_ids(m)
                if not ids:
                    v(i, "empty_tool_message")
                for cid in ids:
                    ok = owner is not None and cid in _call_ids(msgs[owner])
                    if ok and cid in seen:
                        v(i, "duplicate_result", cid)
                    elif not ok:
                        v(i, "orphan_result", cid)
                    seen.add(cid)
                if has_calls(m):
                    v(i, "call_outside_assistant")
                continue
            seen = set()
            for cid in _result_ids(m):
                v(i, "result_outside_tool_message", cid)
            owner = i if m.role == "assistant" and has_calls(m) else None
            if has_calls(m) and m.role != "assistant":
                v(i, "call_outside_assistant")
            elif has_calls(m):
                answered: set[str] = set()
                for n in msgs[i + 1 :]:
                    if n.role != "tool":
                        break
                    answered.update(_result_ids(n))
                seen_calls: set[str] = set()
                for cid in _call_ids(m):
                    if cid in seen_calls:
                        v(i, "duplicate_call", cid)
                    elif cid not in answered:
                        v(i, "unanswered_call", cid)
                    seen_calls.add(cid)
            if m.role == "assistant" and not has_calls(m) and _empty_tool_calls(m):
                v(i, "empty_content")
        return out
    start = next((i for i, m in enumerate(msgs) if m.role != "system"), len(msgs))
    for i in range(start):
        if not _written_as_string(msgs[i].content, msgs[i].content_kind):
            for _ in range(_blank_blocks(msgs[i].content)):
                v(i, "empty_content")
    prev: str | None = None
    used: set[str] = set()
    for i in range(start, len(msgs)):
        m = msgs[i]
        role = anthropic_role(m.role)  # a tool struct is written as a user message
        if role not in ("user", "assistant"):
            v(i, "role_not_allowed")
        elif prev is None and role != "user":
            v(i, "first_not_user")
        elif prev == role:
            v(i, "not_alternating")
        prev = role
        if has_results(m) and role != "user":
            for cid in _result_ids(m):
                v(i, "result_outside_user_message", cid)
        elif has_results(m):
            calls = _call_ids(msgs[i - 1]) if i > 0 and msgs[i - 1].role == "assistant" else []
            seen_here: set[str] = set()
            for cid in _result_ids(m):
                if cid in calls and cid in seen_here:
                    v(i, "duplicate_result", cid)
                elif cid not in calls:
                    v(i, "orphan_result", cid)
                seen_here.add(cid)
            kinds = [isinstance(q, ToolResult) for q in m.content]
            first_other = next((k for k, r in enumerate(kinds) if not r), None)
            last_result = max((k for k, r in enumerate(kinds) if r), default=None)
            if first_other is not None and last_result is not None and first_other < last_result:
                v(i, "result_after_content")
        if has_calls(m) and m.role != "assistant":
            v(i, "call_outside_assistant")
        elif has_calls(m):
            nxt = msgs[i + 1] if i + 1 < len(msgs) else None
            answered = set(_result_ids(nxt)) if nxt is not None and anthropic_role(nxt.role) == "user" else set()
            seen_calls = set()
            for cid in _call_ids(m):
                if cid in seen_calls:
                    v(i, "duplicate_call", cid)
                elif cid not in answered:
                    v(i, "unanswered_call", cid)
                seen_calls.add(cid)
        if m.role == "assistant":
            _check_calls_anthropic(m, i, used, v)
        if role in ("user", "assistant"):
            for _ in range(_empty_anthropic(m, final=i == len(msgs) - 1)):
                v(i, "empty_content")
        for cid in _nested_blocks(m):
            v(i, "block_not_allowed", cid)
        for cid in _foreign_blocks(m, "anthropic"):
            v(i, "block_not_allowed", cid)
        if role == "assistant" and i == len(msgs) - 1 and _prefill_ends_in_space(m):
            v(i, "trailing_whitespace")
    out.extend(_thinking_violations(msgs))
    return out


_MESSAGE_LEVEL_BLOCKS = frozenset(
    {"tool_use", "tool_result", "server_tool_use", "mcp_tool_use", "thinking", "redacted_thinking"}
)


def _nested_blocks(m: Message) -> list[str | None]:
    """The call id of each block of ``m``'s tool results' content that the Messages API
    refuses there: an opaque block of a type that belongs in a message only (a tool call
    or result, the server's and MCP's too, a thinking block; Rust ``nested_blocks``)."""
    return [
        q.call_id
        for q in m.content
        if isinstance(q, ToolResult)
        for r in q.content
        if isinstance(r, OpaquePart) and (r.type in _MESSAGE_LEVEL_BLOCKS or r.type.endswith("_tool_result"))
    ]


def _foreign_blocks(m: Message, provider: str) -> list[str | None]:
    """The other provider's blocks in ``m`` (opaque parts), each as the call id of the
    tool result holding it (``None`` for a part of the message), in order (Rust
    ``foreign_blocks``): under OpenAI's rules an Anthropic block (or an ``image``), under
    Anthropic's an OpenAI part (``image_url``, ``input_audio``, ``file``)."""

    def foreign(t: str) -> bool:
        if provider == "openai":
            return anthropic_only_type(t) or t == "image"
        return t in USER_ONLY_TYPES

    return [cid for cid, t in _opaque_parts(m) if foreign(t)]


def _thinking_violations(msgs: list[Message]) -> list[Violation]:
    """The Messages API's rules for extended-thinking blocks, in message order, after the
    other Anthropic violations (Rust ``thinking_violations``): ``thinking_not_first`` at
    the first assistant message of the assistant's final turn (:func:`thinking_turn_start`)
    when an assistant message of that turn holds a thinking block but that first one does
    not start with one (fresh20b #1), ``thinking_last`` at an
    assistant message whose final block is a thinking block (fresh20b #2)."""
    start = thinking_turn_start(msgs)
    newest = [i for i in range(start, len(msgs)) if msgs[i].role == "assistant"]
    not_first = None
    if newest:
        a = newest[0]
        opens = bool(msgs[a].content) and is_thinking(msgs[a].content[0])
        if not opens and any(is_thinking(q) for i in newest for q in msgs[i].content):
            not_first = a
    out: list[Violation] = []
    for i, m in enumerate(msgs):
        if i == not_first:
            out.append(Violation(index=i, code="thinking_not_first", detail="", call_id=None))
        if m.role == "assistant" and m.content and is_thinking(m.content[-1]):
            out.append(Violation(index=i, code="thinking_last", detail="", call_id=None))
    return out


_ANTHROPIC_TOKEN = re.compile(r"[a-zA-Z0-9_-]+")


def _check_calls_anthropic(m: Message, i: int, used: set[str], v: Callable[[int, str, str | None], None]) -> None:
    """Anthropic's rules for the tool calls of assistant message ``i`` (Rust
    ``check_calls_anthropic``): a name not matching ``^[a-zA-Z0-9_-]{1,64}$``
    (``tool_name_not_allowed``), an id not matching ``^[a-zA-Z0-9_-]+$``
    (``call_id_not_allowed``), an id an earlier message used (``reused_call_id``, once for
    each id in ``m``). ``used`` gains the ids of ``m``."""
    here: set[str] = set()
    for q in m.content:
        if not isinstance(q, ToolCall):
            continue
        if not _ANTHROPIC_TOKEN.fullmatch(q.name) or len(q.name) > 64:
            v(i, "tool_name_not_allowed", q.id)
        if not _ANTHROPIC_TOKEN.fullmatch(q.id):
            v(i, "call_id_not_allowed", q.id)
        if q.id in here:
            continue
        here.add(q.id)
        if q.id in used:
            v(i, "reused_call_id", q.id)
        used.add(q.id)


def anthropic_role(role: str) -> str:
    """The role a message has in an Anthropic request: a ``tool`` message (a ``Message``
    struct can have that role) is a user message of ``tool_result`` blocks, as
    ``message_to_anthropic`` writes it (Rust ``Role::in_anthropic``); any other is itself."""
    return "user" if role == "tool" else role


def _empty_tool_calls(m: Message) -> bool:
    """Whether ``m.extra`` holds ``"tool_calls": []`` (the OpenAI adapter keeps an empty
    list there and writes it back when the message has no call)."""
    calls = m.extra.get("tool_calls") if isinstance(m.extra, Mapping) else None
    return isinstance(calls, (list, tuple)) and not calls


#: The Unicode ``White_Space`` property, its 25 code points: whitespace as :func:`_blank`
#: takes it (Rust's ``is_white_space`` in pairs.rs lists the same; ``char::is_whitespace``
#: is this set). Not ``str.isspace``, which also takes U+001C..U+001F.
_WHITE_SPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)


def _blank(text: str) -> bool:
    """Whether ``text`` is empty or of whitespace only (:data:`_WHITE_SPACE`): what the
    Messages API refuses in a text block."""
    return all(c in _WHITE_SPACE for c in text)


def _written_as_string(parts: Sequence[Any], kind: str | None) -> bool:
    """Whether the Anthropic adapter writes ``parts`` spelled ``kind`` as a string (one
    text part without extra keys, spelled ``"text"`` or not at all)."""
    return len(parts) == 1 and isinstance(parts[0], TextPart) and parts[0].extra is None and kind in (None, "text")


def _holds_nothing(m: Message) -> bool:
    """No content, or only empty or whitespace text parts: nothing a breadcrumb could go
    before (fresh41 #5; Rust ``holds_nothing``)."""
    return all(isinstance(p, TextPart) and _blank(p.text) for p in m.content)


def _blank_blocks(parts: Sequence[Any]) -> int:
    """How many text blocks of ``parts`` (written as blocks), and of the content lists of
    the ``ToolResult`` parts among them, are empty or of whitespace only (one violation
    each, so that a moved result takes its own along)."""
    n = 0
    for q in parts:
        if isinstance(q, ToolResult):
            if not _written_as_string(q.content, q.content_kind):
                n += sum(isinstance(r, TextPart) and _blank(r.text) for r in q.content)
        elif isinstance(q, TextPart) and _blank(q.text):
            n += 1
    return n


def _empty_anthropic(m: Message, *, final: bool) -> int:
    """How many ``empty_content`` violations user or assistant message ``m``'s content
    makes: one when it has none (no block, or the string ``""``; a final assistant
    message, a prefill, may have none), or is a string of whitespace only; else one for
    each empty text block or one of whitespace only, also in a ``ToolResult``'s content
    list (no message may hold one)."""
    string = _written_as_string(m.content, m.content_kind)
    if not m.content or (string and m.content[0].text == ""):  # type: ignore[union-attr]
        return int(not (final and m.role == "assistant"))
    return _blank_blocks(m.content)


def _prefill_ends_in_space(m: Message) -> bool:
    """Whether assistant message ``m``, the final message of an Anthropic request (a
    prefill), ends in whitespace (:data:`_WHITE_SPACE`), which the Messages API refuses:
    its last part is a ``TextPart`` (a string content is one) that is not blank (that is
    ``empty_content``) and whose last character is whitespace (Rust
    ``prefill_ends_in_space``)."""
    last = m.content[-1] if m.content else None
    return isinstance(last, TextPart) and not _blank(last.text) and last.text[-1] in _WHITE_SPACE


def _trim_prefill_end(m: Message) -> Message:
    """``m``, a final assistant message the repair changed, without the whitespace its
    text ends in (:func:`_prefill_ends_in_space`)."""
    if not _prefill_ends_in_space(m):
        return m
    last = m.content[-1]
    assert isinstance(last, TextPart)
    text = last.text
    while text and text[-1] in _WHITE_SPACE:
        text = text[:-1]
    return msgspec.structs.replace(m, content=[*m.content[:-1], msgspec.structs.replace(last, text=text)])


def trim_exposed_prefill(
    ops: list[tuple[int | None, Message | None]], msgs: list[Message], provider: str
) -> list[tuple[int | None, Message | None]]:
    """``ops`` (an output as ``(input index or None, new message or None)`` pairs) with
    the final message, when it is an input assistant message other than the input's own
    final one (eviction or pruning exposed it as a prefill), without the whitespace its
    text ends in, which the Messages API refuses (Anthropic rules only; ``trailing_whitespace``
    in ``validate``). Used by ``fit`` and ``prune_middle`` (found by hypothesis: a pinned
    ``", , "`` left last once the messages after it went)."""
    if provider != "anthropic" or not ops:
        return ops
    src, new = ops[-1]
    if src is None or src == len(msgs) - 1:
        return ops  # a message the engine made, or the input's own final message
    m = new if new is not None else msgs[src]
    if m.role != "assistant" or not _prefill_ends_in_space(m):
        return ops
    return [*ops[:-1], (src, _trim_prefill_end(m))]


@dataclass
class Item:
    """A message of a working list: its input index (None if new) and, when changed,
    the new message (``None`` means the input message unchanged)."""

    src: int | None
    new: Message | None

    def msg(self, msgs: list[Message]) -> Message:
        if self.new is not None:
            return self.new
        assert self.src is not None
        return msgs[self.src]


def _change(kind: str, index: int, cid: str | None = None) -> PairChange:
    return PairChange(kind=kind, index=index, call_id=cid)


def _missing(cid: str) -> ToolResult:
    return ToolResult(call_id=cid, content=[TextPart(text=MISSING_RESULT)])


def _unanswered(msgs: list[Message], answered_by: list[list[list[int]]], i: int) -> list[str]:
    out, seen = [], set()
    for p, q in enumerate(msgs[i].content):
        if isinstance(q, ToolCall) and q.id not in seen:
            seen.add(q.id)
            if not answered_by[i][p]:
                out.append(q.id)
    return out


def _without_repeated_calls(base: Item, msgs: list[Message], i: int, changes: list[PairChange]) -> Item:
    m = base.msg(msgs)
    seen: set[str] = set()
    repeats = []
    for k, q in enumerate(m.content):
        if isinstance(q, ToolCall):
            if q.id in seen:
                repeats.append(k)
            seen.add(q.id)
    if not repeats:
        return base
    content = list(m.content)
    for k in reversed(repeats):
        part = content.pop(k)
        changes.append(_change("call_removed", i, part.id))  # type: ignore[union-attr]
    return Item(i, msgspec.structs.replace(m, content=content))


def _strip_results(msgs, results, i, changes) -> Item | None:  # type: ignore[no-untyped-def]
    """Message ``i`` without tool results, which do not belong in it; None if emptied."""
    m = msgs[i]
    stray_calls = m.role != "assistant" and has_calls(m)
    if not has_results(m) and not stray_calls:
        return Item(i, None)
    kept = []
    for p, q in enumerate(m.content):
        if isinstance(q, ToolResult):
            if results[i][p] is None:
                changes.append(_change("orphan_result_dropped", i, q.call_id))
        elif isinstance(q, ToolCall) and stray_calls:  # only the assistant makes calls
            changes.append(_change("call_removed", i, q.id))
        else:
            kept.append(q)
    if not kept:
        changes.append(_change("message_dropped", i))
        return None
    return Item(i, fix_content_kind(msgspec.structs.replace(m, content=kept)))


def _emit_caller(base, msgs, answered_by, i, missing, keep_whole, out, changes) -> list[str]:  # type: ignore[no-untyped-def]
    open_ids = _unanswered(msgs, answered_by, i)
    base = _without_repeated_calls(base, msgs, i, changes)
    if not open_ids or missing == "stub":
        out.append(base)
        return open_ids
    m = base.msg(msgs)
    kept = [q for q in m.content if not (isinstance(q, ToolCall) and q.id in open_ids)]
    # left ending in a thinking block (the API refuses an assistant message whose final
    # block is one: fresh20b #2), it counts as emptied
    if kept and is_thinking(kept[-1]):
        kept = []
    if not kept and keep_whole:  # dropping it whole would break Anthropic alternation
        out.append(base)
        return open_ids
    for cid in open_ids:
        changes.append(_change("call_removed", i, cid))
    if kept:
        extra = m.extra
        if not any(isinstance(q, ToolCall) for q in kept) and _empty_tool_calls(m):
            # the adapter would write the empty list that the calls stood in for
            extra = {k: val for k, val in m.extra.items() if k != "tool_calls"} or None
        out.append(Item(i, msgspec.structs.replace(m, content=kept, extra=extra)))
    else:
        changes.append(_change("message_dropped", i))
    return []


Resolved = tuple[list[list[tuple[int, int] | None]], list[list[list[int]]]]


def whole_tool_message(m: Message) -> bool:
    """Whether ``m`` is an OpenAI tool message whose results are placed with it as one. A
    tool message holding several results (a ``Message`` struct can; the OpenAI adapter
    writes one result per tool message) is not: its results are placed one by one, as
    results found outside a tool message are, each in a tool message of its own after its
    call (struct18 #5: an orphan or a second result in it stayed, and a result for another
    call's message was left an orphan there)."""
    return m.role == "tool" and not (len(m.content) > 1 and all(isinstance(p, ToolResult) for p in m.content))


def _with_early_results(msgs: list[Message], resolved: Resolved) -> Resolved:
    """``resolved`` with each result that comes before its call resolved to that call, where
    that is unambiguous: the result's id is that of one tool call in the whole conversation
    (none before the result, none in its own message, none repeated), made by an assistant
    message after the result's, and of no other result (a reused id keeps the result an
    orphan). Repair then moves it after its call (``result_moved``). ``resolved`` itself
    is not changed (the engine caches it); returned as it is when there is no such result."""
    results, answered_by = resolved
    orphans = [
        (j, p)
        for j, m in enumerate(msgs)
        for p, q in enumerate(m.content)
        if isinstance(q, ToolResult) and results[j][p] is None
    ]
    if not orphans:
        return resolved
    result_count: dict[str, int] = {}
    calls: dict[str, tuple[int, tuple[int, int]]] = {}  # per id: how many calls, the first
    for i, m in enumerate(msgs):
        for p, q in enumerate(m.content):
            if isinstance(q, ToolResult):
                result_count[q.call_id] = result_count.get(q.call_id, 0) + 1
            elif isinstance(q, ToolCall):
                k, at = calls.get(q.id, (0, (i, p)))
                calls[q.id] = (k + 1, at)
    new_results: list[list[tuple[int, int] | None]] | None = None
    new_answered: list[list[list[int]]] = answered_by
    for j, p in orphans:
        cid = msgs[j].content[p].call_id  # type: ignore[union-attr]
        k, c = calls.get(cid, (0, (0, 0)))
        if k != 1 or result_count[cid] != 1 or c[0] <= j or msgs[c[0]].role != "assistant" or answered_by[c[0]][c[1]]:
            continue
        if new_results is None:
            new_results = [list(row) for row in results]
            new_answered = [[list(x) for x in row] for row in answered_by]
        new_results[j][p] = c
        new_answered[c[0]][c[1]].append(j)
    return resolved if new_results is None else (new_results, new_answered)


def repair(
    msgs: list[Message], provider: str, missing: str = "stub", resolved: Resolved | None = None
) -> tuple[list[Item], list[PairChange]]:
    """Drop orphan results, move separated results next to their call (from before it
    too, where its id is unambiguous: :func:`_with_early_results`), stub or drop
    unanswered calls. ``resolved``: :func:`resolve` of ``msgs``, when the caller has it."""
    results, answered_by = _with_early_results(msgs, resolve(msgs) if resolved is None else resolved)
    n = len(msgs)
    out: list[Item] = []
    changes: list[PairChange] = []
    if provider == "openai":
        target: list[int | None] = []
        for j, m in enumerate(msgs):
            t = next((c[0] for c in results[j] if c is not None), None) if whole_tool_message(m) else None
            target.append(t)
        belongs: dict[int, list[int]] = {}
        for j, t in enumerate(target):
            if t is not None:
                belongs.setdefault(t, []).append(j)
        loose: dict[int, list[tuple[int, int]]] = {}  # results outside tool messages
        for j, row in enumerate(results):
            if not whole_tool_message(msgs[j]):
                for p, c in enumerate(row):
                    if c is not None:
                        loose.setdefault(c[0], []).append((j, p))
        for i, m in enumerate(msgs):
            if whole_tool_message(m):
                if target[i] is None:
                    for cid in _result_ids(m):
                        changes.append(_change("orphan_result_dropped", i, cid))
                    for cid in _call_ids(m):
                        changes.append(_change("call_removed", i, cid))
                    if not has_results(m):
                        changes.append(_change("message_dropped", i))
                continue
            base = _strip_results(msgs, results, i, changes)
            if base is None:
                continue
            if not (m.role == "assistant" and has_calls(m)):
                out.append(base)
                continue
            open_ids = _emit_caller(base, msgs, answered_by, i, missing, False, out, changes)
            zone_end = next((j for j in range(i + 1, n) if msgs[j].role != "tool"), n)
            mine = belongs.get(i, [])
            # its tool messages right after it first; then the others, in input order (one
            # before the call too: _with_early_results)
            inside = [j for j in mine if i < j < zone_end]
            # (by range, not by membership in `inside`: quadratic in a batch of parallel
            # calls, fresh30 #1)
            for j in inside + [j for j in mine if not i < j < zone_end]:
                if j < i or j >= zone_end:
                    ids = _result_ids(msgs[j])
                    changes.append(_change("result_moved", j, ids[0] if ids else None))
                # without the calls a struct put in it, each a call_removed (fresh50 #2)
                calls = _call_ids(msgs[j])
                for cid in calls:
                    changes.append(_change("call_removed", j, cid))
                kept = [q for q in msgs[j].content if not isinstance(q, ToolCall)]
                out.append(Item(j, msgspec.structs.replace(msgs[j], content=kept) if calls else None))
            for j, p in loose.get(i, []):
                part = msgs[j].content[p]
                assert isinstance(part, ToolResult)
                changes.append(_change("result_moved", j, part.call_id))
                # a result moved out of a pinned message stays pinned (Rust repair)
                out.append(Item(None, Message(role="tool", content=[part], pinned=msgs[j].pinned)))
            for cid in open_ids:
                changes.append(_change("stub_inserted", i, cid))
                out.append(Item(None, Message(role="tool", content=[_missing(cid)])))
        return out, changes

    owned: dict[int, list[tuple[int, int]]] = {}
    for j, row in enumerate(results):
        for p, c in enumerate(row):
            if c is not None:
                owned.setdefault(c[0], []).append((j, p))

    def owed_parts(caller: int, stubs: list[str], here: int | None) -> list[Part]:
        parts: list[Part] = []
        for j, p in owned.get(caller, []):
            part = msgs[j].content[p]
            assert isinstance(part, ToolResult)
            if j != here:
                changes.append(_change("result_moved", j, part.call_id))
            parts.append(part)
        for cid in stubs:
            changes.append(_change("stub_inserted", caller, cid))
            parts.append(_missing(cid))
        return parts

    def owed_pinned(caller: int, here: int | None) -> bool:
        # a result owed to `caller` moving out of a pinned message other than `here`: its
        # new message is pinned too (Rust owed_pinned)
        return any(j != here and msgs[j].pinned for j, _ in owned.get(caller, []))

    def rebuild_user(i: int, caller: tuple[int, list[str]] | None) -> Item:
        m = msgs[i]
        owes = caller is not None and (bool(owned.get(caller[0])) or bool(caller[1]))
        if not owes and not has_results(m) and not has_calls(m):
            return Item(i, None)
        content: list[Part] = owed_parts(caller[0], caller[1], i) if caller is not None else []
        for p, part in enumerate(m.content):
            if isinstance(part, ToolCall):  # only the assistant makes tool calls
                changes.append(_change("call_removed", i, part.id))
            elif not isinstance(part, ToolResult):
                content.append(part)
            elif results[i][p] is None:
                changes.append(_change("orphan_result_dropped", i, part.call_id))
        if content == m.content:
            return Item(i, None)
        if not content:  # settle_placeholders keeps it (renaming the change) or drops it
            changes.append(_change("message_dropped", i))
            emptied.append((len(out), len(changes) - 1))
            return _placeholder(m, i)
        if caller is not None and _results_follow_content(m, results[i], caller[0]):
            changes.append(_change("results_reordered", i))
        pinned = m.pinned or (caller is not None and owed_pinned(caller[0], i))
        return Item(i, fix_content_kind(msgspec.structs.replace(m, content=content, pinned=pinned)))

    owed: tuple[int, list[str]] | None = None
    emptied: list[tuple[int, int]] = []  # user messages emptied: (position in out, change index)
    for i, m in enumerate(msgs):
        # a tool struct is a user message here, as it is written (fresh19 F5: dropped when
        # emptied, it left an assistant message first)
        user = anthropic_role(m.role) == "user"
        if owed is not None:
            caller, stubs = owed
            owed = None
            if user:
                out.append(rebuild_user(i, (caller, stubs)))
                continue
            # nothing owed (the calls were dropped, missing="drop"): no message (fresh19b #1:
            # an empty user message was added, which Anthropic refuses)
            if parts := owed_parts(caller, stubs, None):
                out.append(Item(None, Message(role="user", content=parts, pinned=owed_pinned(caller, None))))
        if user:
            out.append(rebuild_user(i, None))
            continue
        base = _strip_results(msgs, results, i, changes)
        if base is None:
            if m.role == "assistant":  # emptied (only misplaced results): see _settle_placeholders
                emptied.append((len(out), len(changes) - 1))
                out.append(_placeholder(m, i))
            continue
        if m.role == "assistant" and has_calls(m):
            open_ids = _emit_caller(base, msgs, answered_by, i, missing, True, out, changes)
            if out and out[-1].src == i and out[-1].new is not None and i == len(msgs) - 1:
                # the final message, changed (calls removed): a prefill ending in
                # whitespace is refused, so the whitespace the calls followed goes too
                # (Rust trim_prefill_end)
                out[-1] = Item(i, _trim_prefill_end(out[-1].new))
            if out and out[-1].src == i:
                owed = (i, open_ids)
            continue
        out.append(base)
    if owed is not None and (parts := owed_parts(owed[0], owed[1], None)):
        out.append(Item(None, Message(role="user", content=parts, pinned=owed_pinned(owed[0], None))))
    return _settle_placeholders(out, emptied, changes, msgs), changes


def _results_follow_content(m: Message, row: list[tuple[int, int] | None], caller: int) -> bool:
    """Whether a part of ``m`` that stays (not a tool call, not a tool result) comes before
    a result of ``m`` answering a call of message ``caller`` (``row``: ``m``'s results):
    then rebuilding it, the caller's results first, changes the order of its own parts
    (left17: ``[result_a, text, result_b]`` was reordered unreported)."""
    content_seen = False
    for part, r in zip(m.content, row, strict=True):
        if isinstance(part, ToolResult):
            if content_seen and r is not None and r[0] == caller:
                return True
        elif not isinstance(part, ToolCall):
            content_seen = True
    return False


def _placeholder(m: Message, i: int) -> Item:
    return Item(i, fix_content_kind(msgspec.structs.replace(m, content=[TextPart(text=RESULTS_REMOVED)])))


def _settle_placeholders(
    out: list[Item], emptied: list[tuple[int, int]], changes: list[PairChange], msgs: list[Message]
) -> list[Item]:
    """Messages repair emptied go; in each run of adjacent ones, the first of the role that
    keeps Anthropic's role order stays (holding ``RESULTS_REMOVED``; its change becomes
    ``placeholder_inserted``): a user message when no user message is left before or
    after the run, an assistant message when two user messages would meet."""
    gone: set[int] = set()
    roles = [anthropic_role(it.msg(msgs).role) for it in out]  # as written: a tool struct is a user message
    k = 0
    while k < len(emptied):
        end = k
        while end + 1 < len(emptied) and emptied[end + 1][0] == emptied[end][0] + 1:
            end += 1
        first, last = emptied[k][0], emptied[end][0]
        before = next((r for r in reversed(roles[:first]) if r != "system"), None)
        after = roles[last + 1] if last + 1 < len(out) else None
        if before == "user" and after == "user":
            needed: str | None = "assistant"
        elif before != "user" and after != "user":
            needed = "user"
        else:
            needed = None
        run = emptied[k : end + 1]
        keep = next((pos for pos, _ in run if roles[pos] == needed), None)
        for pos, c in run:
            if pos == keep:
                changes[c] = _change("placeholder_inserted", changes[c].index)
            else:
                gone.add(pos)
        k = end + 1
    return [it for p, it in enumerate(out) if p not in gone]


# --------------------------------------------------------------------------- trim


def marker(removed: int) -> str:
    return f"\n[... {removed} characters removed ...]\n"


def _in(table: tuple[tuple[int, int], ...], starts: list[int], c: str) -> bool:
    o = ord(c)
    k = bisect.bisect_right(starts, o) - 1
    return k >= 0 and table[k][0] <= o <= table[k][1]


def _is_regional(c: str) -> bool:
    return 0x1F1E6 <= ord(c) <= 0x1F1FF


def _hangul(c: str) -> str:
    o = ord(c)
    if 0x1100 <= o <= 0x115F or 0xA960 <= o <= 0xA97C:
        return "L"
    if 0x1160 <= o <= 0x11A7 or 0xD7B0 <= o <= 0xD7C6:
        return "V"
    if 0x11A8 <= o <= 0x11FF or 0xD7CB <= o <= 0xD7FB:
        return "T"
    if 0xAC00 <= o <= 0xD7A3:
        return "LV" if (o - 0xAC00) % 28 == 0 else "LVT"
    return ""


def _hangul_joins(a: str, b: str) -> bool:
    ka, kb = _hangul(a), _hangul(b)
    return (
        (ka == "L" and kb in ("L", "V", "LV", "LVT"))
        or (ka in ("LV", "V") and kb in ("V", "T"))
        or (ka in ("LVT", "T") and kb == "T")
    )


#: Code points of one grapheme cluster after which a cut may fall inside it (UAX #15's
#: stream-safe limit, a base and 30 non-starters, for any cluster; Rust ``MAX_CLUSTER``).
_MAX_CLUSTER = 31


def _bad_cut(s: str, p: int) -> bool:
    """A cut before ``s[p]`` would split a grapheme (UAX #29 with the generated tables,
    ``_splits_cluster``) whose first ``_MAX_CLUSTER`` code points do not all precede it."""
    return _splits_cluster(s, p) and not (
        p >= _MAX_CLUSTER and all(_splits_cluster(s, p - k) for k in range(1, _MAX_CLUSTER))
    )


def _splits_cluster(s: str, p: int) -> bool:
    """A cut before ``s[p]`` would split a grapheme (UAX #29 with the generated tables)."""
    if not 0 < p < len(s):
        return False
    a, b = s[p - 1], s[p]
    if (
        _in(ATTACH, _ATTACH0, b)
        or a == "\u200d"
        or _in(PREPEND, _PREPEND0, a)
        or (a == "\r" and b == "\n")
        or _hangul_joins(a, b)
        or (_in(LINKER, _LINKER0, a) and _in(CONSONANT, _CONSONANT0, b))
    ):
        return True
    if _is_regional(a) and _is_regional(b):
        run = 0
        while run < p and _is_regional(s[p - 1 - run]):
            run += 1
        return run % 2 == 1
    return False


#: The cut markers this library writes (trimming's and the compaction functions'), as a
#: cut finds them in a text it cuts again (Rust ``find_markers``; fresh27 #1).
_MARKER_RE = re.compile(r"\[\.\.\. ([0-9]{1,18}) characters(?: \(([0-9]{1,18}) lines?\))? removed \.\.\.\]")


@functools.lru_cache(maxsize=16)
def _markers(s: str) -> tuple[tuple[int, int, int], ...]:
    """The cut markers ``s`` holds: ``(start, end, count named)``, leftmost first."""
    return tuple((m.start(), m.end(), int(m.group(1))) for m in _MARKER_RE.finditer(s))


def shown_removed(s: str, head: int, tail: int) -> int:
    """The count the marker of a cut removing ``s[head:tail]`` names: the characters
    removed, each marker among them counted as the characters it names (Rust
    ``shown_removed``)."""
    shown = tail - head
    for a, b, n in _markers(s):
        if head <= a and b <= tail:
            shown = min(shown - (b - a) + n, 2**64 - 1)
    return shown


def cut_points(s: str, keep: int, floor: int = 0) -> tuple[int, int]:
    """Where :func:`shrink_text` cuts to keep about ``keep`` characters after the first
    ``floor``, which always stay (0, or the ``[Tool results]`` prefix of an observation):
    the end of the head and the start of the tail (equal, nothing removed, when
    ``floor + keep >= len(s)``). The head never ends before ``floor``: a cut right there
    that would split a grapheme moves forward instead (never with ``floor`` 0, the start
    of the text), and when the head then reaches the tail, nothing is removed."""
    n = len(s)
    if floor + keep >= n:
        return n, n
    head = floor + (keep + 1) // 2
    while head > floor and _bad_cut(s, head):
        head -= 1
    while head < n and _bad_cut(s, head):
        head += 1
    tail = n - keep // 2
    while tail < n and _bad_cut(s, tail):
        tail += 1
    if head >= tail:
        return n, n
    # a marker the text holds is never split: the cut takes it whole (fresh27 #1)
    for a, b, _ in _markers(s):
        if a < head < b:
            head = a if a >= floor and not _bad_cut(s, a) else b
            while head < n and _bad_cut(s, head):
                head += 1
        if a < tail < b:
            tail = b
            while tail < n and _bad_cut(s, tail):
                tail += 1
    if head >= tail:
        return n, n
    return head, tail


def cut_marker(removed: int, end: bool, tail_empty: bool) -> str:
    """The marker of a cut; with ``end`` (the text ends an Anthropic prefill: see
    :func:`_ends_prefill`) and nothing kept after the cut, without its final newline (the
    Messages API refuses a final assistant message ending in whitespace: fresh16b #2)."""
    m = marker(removed)
    return m[:-1] if end and tail_empty else m


def prefill_cut_points(s: str, keep: int, floor: int = 0, end: bool = False) -> tuple[int, int]:
    """:func:`cut_points`, and for a cut that ends an Anthropic prefill (``end``) a tail of
    whitespace only goes with the cut: the marker then ends the text without its final
    newline (:func:`cut_marker`), so the cut never ends in whitespace (fresh30 #3: a
    prefill of ``"\r\n" * 200`` kept ``"\r\n\r\n"`` after the marker). Rust
    ``prefill_cut_points``."""
    head, tail = cut_points(s, keep, floor)
    if end and head < tail < len(s) and all(c in _WHITE_SPACE for c in s[tail:]):
        return head, len(s)
    return head, tail


def shrink_text(s: str, keep: int, floor: int = 0, end: bool = False) -> tuple[str, int]:
    """Keep about ``keep`` characters: first half + marker + last half (after the first
    ``floor`` characters, which always stay: see :func:`cut_points`); ``end``: see
    :func:`cut_marker` and :func:`prefill_cut_points`."""
    head, tail = prefill_cut_points(s, keep, floor, end)
    if head == tail:
        return s, 0
    removed = tail - head
    return s[:head] + cut_marker(shown_removed(s, head, tail), end, tail == len(s)) + s[tail:], removed


@dataclass
class _State:
    msgs: list[Message]
    cost: CostModel
    provider: str
    breadcrumb: bool
    work: list[Item]
    repairs: list[PairChange]
    tokens_before: int
    costs: list[int] = field(default_factory=list)
    keep: list[bool] = field(default_factory=list)
    fates: list[dict] = field(default_factory=list)  # type: ignore[type-arg]

    def m(self, w: int) -> Message:
        return self.work[w].msg(self.msgs)

    running: int = 0  # sum of the costs of kept items, kept up to date like Rust's
    # bc_cost's answers by message (the message itself kept, so its id is not reused):
    # fit asks for the same one after every eviction
    _bc_memo: dict[int, tuple[Message | None, int]] = field(default_factory=dict)

    def total(self) -> int:
        return self.running

    # work items that are real user messages holding stubs for the calls of the item
    # before them (an Anthropic call the user interrupted), and while that caller is
    # dropped, each one's item with its stubs and its cost
    stub_head: list[bool] = field(default_factory=list)
    saved: list[tuple[Item, int] | None] = field(default_factory=list)
    _stripped: dict[int, tuple[Item, tuple[Item, int]]] = field(default_factory=dict)

    def set_keep(self, w: int, keep: bool) -> None:
        """Keep or drop item ``w``, keeping the running total. The stubs of the next item
        answer ``w``'s calls: they go and come back with ``w``."""
        if self.keep[w] != keep:
            self.keep[w] = keep
            self.running += self.costs[w] if keep else -self.costs[w]
            if w + 1 < len(self.stub_head) and self.stub_head[w + 1]:
                self.set_stubs(w + 1, keep)

    def stripped(self, h: int) -> tuple[Item, int] | None:
        """Stub head ``h`` without its stubs, and its cost (``None`` when it is no stub
        head or holds no stub); the input message itself when that is all repair changed
        (counted as the caller's own object, as every input message)."""
        if not self.stub_head[h]:
            return None
        it = self.work[h]
        hit = self._stripped.get(h)
        if hit is not None and hit[0] is it:
            return hit[1]
        bare = without_stubs(self.m(h))
        if bare is None:
            return None
        if it.src is not None and bare.content == self.msgs[it.src].content:
            out = (Item(it.src, None), self.cost.message_tokens(self.msgs[it.src]))
        else:
            bare = fix_content_kind(bare)
            out = (Item(it.src, bare), self.cost.message_tokens(bare))
        self._stripped[h] = (it, out)
        return out

    def stub_tokens(self, h: int) -> int:
        """Tokens the stubs of stub head ``h`` add, else 0."""
        got = self.stripped(h)
        return 0 if got is None else self.costs[h] - got[1]

    def set_stubs(self, h: int, with_stubs: bool) -> None:
        """Take out or put back the stubs of stub head ``h``."""
        if with_stubs:
            saved = self.saved[h]
            if saved is None:
                return
            self.saved[h] = None
            item, cost = saved
        else:
            got = self.stripped(h)
            if got is None:
                return
            item, cost = got
            self.saved[h] = (self.work[h], self.costs[h])
        if self.keep[h]:
            self.running += cost - self.costs[h]
        self.work[h] = item
        self.costs[h] = cost
        # its fate follows: changed while it holds the stubs, the input message again
        # (kept) when taking them out was all repair changed
        src = item.src
        if src is not None:
            f = self.fates[src]
            rule = None if item.new is None else received_rule(self.msgs[src], item.new)
            if with_stubs and rule is not None and f["fate"] == "kept":
                f.update(fate="repaired", rule=rule, chars_removed=0)
            elif not with_stubs and item.new is None and (f["fate"], f["rule"]) == ("repaired", "stub_inserted"):
                f.update(fate="kept", rule="fits", chars_removed=0)

    def set_cost(self, w: int, cost: int) -> None:
        if self.keep[w]:
            self.running += cost - self.costs[w]
        self.costs[w] = cost

    def set_fate(self, w: int, fate: str, rule: str) -> None:
        """Keeping a message does not hide that repair changed it: ``repaired`` stays."""
        src = self.work[w].src
        if src is not None and not (fate == "kept" and self.fates[src]["fate"] == "repaired"):
            self.fates[src]["fate"] = fate
            self.fates[src]["rule"] = rule

    def has_bc(self, w: int | None) -> bool:
        # Anthropic: the breadcrumb is prepended to message w, but not when it leads with
        # one, nor when w holds nothing (the breadcrumb alone is no user's words: w would
        # be no turn boundary, and its turn would join the one before), nor only blank
        # text, which the API refuses with or without it (fresh41 #5)
        return (
            self.provider == "anthropic"
            and w is not None
            and (_holds_nothing(self.m(w)) or first_text(self.m(w)) == BREADCRUMB)
        )

    def bc_cost(self, w: int | None) -> int:
        """Tokens the breadcrumb adds: its own message (OpenAI), or the cost of prepending
        it as a text block to message ``w`` (Anthropic); never negative."""
        if not self.breadcrumb or self.has_bc(w):
            return 0
        m = None if self.provider == "openai" or w is None else self.m(w)
        hit = self._bc_memo.get(id(m))
        if hit is not None and hit[0] is m:
            return hit[1]
        if self.provider == "openai":
            cost = self.cost.message_tokens(_breadcrumb_message())
        else:
            to = m if m is not None else Message(role="user")
            cost = max(0, self.cost.message_tokens(_with_breadcrumb(to)) - self.cost.message_tokens(to))
        self._bc_memo[id(m)] = (m, cost)
        return cost


def _breadcrumb_message() -> Message:
    return Message(role="user", content=[TextPart(text=BREADCRUMB)])


def _with_breadcrumb(m: Message) -> Message:
    """``m`` led by the breadcrumb as a text block (Anthropic placement)."""
    return fix_content_kind(msgspec.structs.replace(m, content=[TextPart(text=BREADCRUMB), *m.content]))


def repair_fates(
    fates: list[dict[str, Any]], repairs: list[PairChange], items: list[Item], msgs: list[Message]
) -> None:
    """Set the Fate of every message a pair repair changed, as ``trim_turns`` reports it
    (``items``: the repaired list of ``msgs``; a message with orphans is dropped only if
    gone from it). A message that received stubs (Anthropic: the user message after the
    call, a carrier of results too) is ``repaired`` (``stub_inserted``) too, though the
    repair change names the call's message (fresh8 N8); one that received a result moved
    out of another message is ``repaired`` (``result_moved``), which wins over
    ``stub_inserted`` when it received both (see ``received_rule``)."""
    for c in repairs:
        f = fates[c.index]
        if c.kind == "orphan_result_dropped":
            f.update(fate="repaired", rule="orphan_result", chars_removed=0)
        elif c.kind == "message_dropped":
            f.update(fate="dropped", rule="emptied_by_repair", chars_removed=0)
        elif c.kind == "call_removed":
            f.update(fate="repaired", rule="call_removed", chars_removed=0)
        elif (
            c.kind in ("result_moved", "stub_inserted", "results_reordered", "placeholder_inserted")
            and f["fate"] == "kept"
        ):
            f.update(fate="repaired", rule=c.kind, chars_removed=0)
    present = {it.src for it in items}
    for i, f in enumerate(fates):
        if f["rule"] == "orphan_result" and i not in present:
            f["fate"] = "dropped"  # an OpenAI tool message of orphan results goes whole
    for it in items:
        if it.src is None or it.new is None or fates[it.src]["fate"] != "kept":
            continue
        rule = received_rule(msgs[it.src], it.new)
        if rule is not None:
            fates[it.src].update(fate="repaired", rule=rule, chars_removed=0)


def received_rule(orig: Message, new: Message) -> str | None:
    """The fate rule of a message that repair changed only by giving it results (``new``,
    the repaired ``orig``): ``result_moved`` when it received a result moved out of another
    message (even if it received stubs too), else ``stub_inserted`` when it received stubs;
    ``None`` when it received neither. Counted by kind: such a message lost no result.

    Args:
        orig: The input message.
        new: The message as repair left it.

    Returns:
        The rule, or ``None``.
    """

    def count(m: Message, stub: bool) -> int:
        return sum(1 for q in m.content if isinstance(q, ToolResult) and is_missing_result(q) == stub)

    if count(new, False) > count(orig, False):
        return "result_moved"
    if count(new, True) > count(orig, True):
        return "stub_inserted"
    return None


def _state(
    msgs: list[Message],
    cost: CostModel,
    provider: str,
    breadcrumb: bool,
    missing: str,
    resolved: Resolved | None = None,
    repaired: tuple[list[Item], list[PairChange]] | None = None,
) -> _State:
    """The working state of ``msgs`` after pair repair; ``repaired``: :func:`repair`'s
    answer for ``msgs``, when the caller has it (``fit`` asks the Rust engine's)."""
    work, repairs = repair(msgs, provider, missing, resolved) if repaired is None else repaired
    st = _State(msgs, cost, provider, breadcrumb, work, repairs, sum(cost.message_tokens(m) for m in msgs))
    st.costs = [cost.message_tokens(it.msg(msgs)) for it in work]
    st.keep = [True] * len(work)
    st.running = sum(st.costs)
    st.fates = [{"index": i, "fate": "kept", "rule": "fits", "chars_removed": 0} for i in range(len(msgs))]
    repair_fates(st.fates, repairs, work, msgs)
    ms = [it.msg(msgs) for it in work]
    st.stub_head = [
        w > 0 and ms[w - 1].role == "assistant" and is_real_user(ms[w]) and has_results(ms[w]) for w in range(len(work))
    ]
    st.saved = [None] * len(work)
    return st


def _text_replaced(pt: Part, inner: int | None, text: str) -> Part:
    """Part ``pt`` with its text (or that of its inner part ``inner``) replaced."""
    if inner is not None:
        inner_parts = list(pt.content)  # type: ignore[union-attr]
        inner_parts[inner] = msgspec.structs.replace(inner_parts[inner], text=text)
        return msgspec.structs.replace(pt, content=inner_parts)
    return msgspec.structs.replace(pt, text=text)


def _with_part(m: Message, part: int, new: Part) -> Message:
    """``m`` with ``content[part]`` replaced by ``new``."""
    content = list(m.content)
    content[part] = new
    return msgspec.structs.replace(m, content=content)


def _with_text(m: Message, part: int, inner: int | None, text: str) -> Message:
    """``m`` with the text of ``content[part]`` (or of its inner part ``inner``) replaced."""
    return _with_part(m, part, _text_replaced(m.content[part], inner, text))


def _cost_with(st: _State, m: Message, tokens: int, part: int, new: Part, built: Message | None = None) -> int:
    """The tokens of ``m`` (``tokens`` of them) with ``content[part]`` replaced by ``new``
    (``built``, when the caller has made that message already).

    Where the cost model offers ``part_tokens`` (a message's cost is a fixed amount plus
    its parts': a profile, a tokenizer), ``tokens`` less the old part's plus the new one's,
    exactly what pricing the new message gives; else (a counter of whole messages) the
    new message priced whole. Pricing the whole message for every trial cut of every
    part made a request in thousands of text parts quadratic with a tokenizer (2,000
    parts: 3.4 s, the Rust engine 15 ms)."""
    parts: Callable[[Part], int] | None = getattr(st.cost, "part_tokens", None)
    if parts is not None:
        return tokens - parts(m.content[part]) + parts(new)
    return st.cost.message_tokens(_with_part(m, part, new) if built is None else built)


def largest_fitting(n: int, fits: Callable[[int], bool]) -> int:
    """The largest ``k`` in ``[0, n - 1]`` with ``fits(k)``, by binary search (``fits`` must
    be monotone); ``0`` when none fits (a text is then cut to its marker alone)."""
    lo = 0
    if fits(0):
        hi = max(n - 1, 0)
        while lo < hi:
            mid = lo + (hi - lo + 1) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid - 1
    return lo


def _text_tokens(st: _State, text: str) -> int:
    """The tokens of a user message holding ``text`` alone, in ``st``'s cost model: what a
    cut's marker and the span it replaces are weighed by (their difference is that of the
    two texts' tokens where costs add up over parts, as the Rust engine weighs them).
    Pricing the whole message with each in place made a result in thousands of parts
    quadratic with the caller's costs (fresh31 #2)."""
    return st.cost.message_tokens(Message(role="user", content=[TextPart(text=text)]))


def _cuts(s: str, k: int) -> bool:
    """Whether keeping about ``k`` characters of ``s`` cuts anything (:func:`cut_points`)."""
    head, tail = cut_points(s, k, 0)
    return head != tail


def _shrink_evenly(st: _State, w: int, part: int, qs: list[int], budget: int, rule: str) -> None:
    """Cut the text parts ``qs`` (two or more) of tool result ``part`` of item ``w`` to one
    common ``keep``, the largest with which the total fits (:func:`largest_fitting`):
    parts no longer than that stay whole, each cut part keeps its head and its tail, so
    a result in several text parts keeps the head of its first part and the tail of its
    last (fresh26 #3: cut largest first, one part went down to its marker before the
    next was touched). Parts whose cut at that keep would not pay for its marker stay
    whole and the others are cut again; with one part left, it is cut as
    :func:`_shrink` cuts a text. When that cuts nothing, the keep is the largest below
    the first one with which the total fits, the parts whose cut there pays for its
    marker cut and the others whole (as :func:`_shrink` cuts a text further; a budget
    was met and one token more was not: test_fits_once_fits_for_every_larger_budget).
    The cut across the parts (:func:`_span_plan`) is taken instead where every part at its
    marker is still over, or where it fits and removes fewer characters (or the cut inside
    does not fit). Rust ``State::shrink_evenly``."""
    m = st.m(w)
    result = m.content[part]
    assert isinstance(result, ToolResult)
    texts = {q: result.content[q].text for q in qs}  # type: ignore[union-attr]
    old = st.costs[w]
    others = st.total() - old

    def at(k: int, cut: list[int]) -> tuple[ToolResult, dict[int, int]]:
        inner = list(result.content)
        gone: dict[int, int] = {}
        for q in cut:
            t, g = shrink_text(texts[q], k)
            if g:
                inner[q] = msgspec.structs.replace(inner[q], text=t)
                gone[q] = g
        return msgspec.structs.replace(result, content=inner), gone

    def priced(new: ToolResult) -> int:  # item w's tokens with ``new`` for the result
        return _cost_with(st, m, old, part, new)

    def worth(q: int, k: int) -> bool:  # the marker costs fewer tokens than what it stands for
        head, tail = cut_points(texts[q], k, 0)
        mark = cut_marker(shown_removed(texts[q], head, tail), False, tail == len(texts[q]))
        return _text_tokens(st, mark) < _text_tokens(st, texts[q][head:tail])

    # every part whose cut pays for its marker cut to its marker alone: the fewest tokens
    # cuts inside the parts reach; over the budget, one marker for the middle parts
    # instead (fresh55 #1: 1,500 grep hits were each cut to a marker, 18,054 tokens for a
    # budget of 2,000)
    span = _span_plan(st, w, part, qs, budget)
    if others + priced(at(0, [q for q in qs if worth(q, 0)])[0]) > budget:
        if span[1] < old:
            _put_cut(st, w, span[0], span[1], rule, span[2])
        return

    # the cut inside the parts, then the cut across them instead when that fits and keeps
    # more characters (fresh56 #1: where 300 bare markers fit, all 300 parts were cut to
    # their markers, while a smaller budget kept 95 of them whole)
    def even() -> None:  # the cut inside the parts (Rust: the 'even block)
        active = list(qs)
        fallback: tuple[ToolResult, dict[int, int]] | None = None
        while len(active) >= 2:
            top = max(len(texts[q]) for q in active)

            def cost(k: int, cut: list[int] = active) -> int:
                return others + priced(at(k, cut)[0])

            k = largest_within(top, cost, budget, others + old)
            new_r, gone = at(k, active)
            unworthy = [q for q in gone if not worth(q, k)]
            if unworthy:
                if fallback is None:
                    # the largest smaller keep that fits with the parts whose cut there pays
                    # for its marker cut (as a single text is cut further), the others whole:
                    # used when keeping the unworthy parts whole cuts nothing
                    def worthy(j: int, parts: list[int] = active) -> list[int]:
                        return [q for q in parts if _cuts(texts[q], j) and worth(q, j)]

                    def ok(j: int) -> bool:
                        cut = worthy(j)
                        return bool(cut) and others + priced(at(j, cut)[0]) <= budget

                    j = largest_fitting(k, ok)
                    if ok(j):
                        fallback = at(j, worthy(j))
                active = [q for q in active if q not in unworthy]
                continue
            new_m = _with_part(m, part, new_r)
            new_cost = _cost_with(st, m, old, part, new_r, new_m)
            if gone and new_cost < old:
                _put_cut(st, w, new_m, new_cost, rule, sum(gone.values()))
                return
            break
        else:
            if len(active) == 1:
                _shrink(st, w, part, active[0], budget, rule)
                if st.m(w) is not m:
                    return
        if fallback is not None:  # no cut made otherwise (test_fits_once_fits_for_every_larger_budget)
            new_r, gone = fallback
            new_m = _with_part(m, part, new_r)
            new_cost = _cost_with(st, m, old, part, new_r, new_m)
            if new_cost < old:
                _put_cut(st, w, new_m, new_cost, rule, sum(gone.values()))

    src = st.work[w].src
    saved = (st.work[w], st.costs[w], None if src is None else dict(st.fates[src]))
    removed_before = 0 if src is None else st.fates[src]["chars_removed"]
    even()
    even_fits = st.total() <= budget
    even_removed = (0 if src is None else st.fates[src]["chars_removed"]) - removed_before
    if others + span[1] <= budget and span[1] < old and (not even_fits or span[2] < even_removed):
        st.work[w] = saved[0]
        st.set_cost(w, saved[1])
        if src is not None and saved[2] is not None:
            st.fates[src] = saved[2]
        _put_cut(st, w, span[0], span[1], rule, span[2])


def _span_plan(st: _State, w: int, part: int, qs: list[int], budget: int) -> tuple[Message, int, int]:
    """The cut of the text parts ``qs`` (two or more) of tool result ``part`` of item ``w``
    across parts: the first and last parts whole, the ones between them gone behind one
    marker in the first of their places, naming the characters they held
    (:func:`shown_removed`). Keeps the most parts with which the total fits
    (:func:`largest_fitting`), the head one more than the tail when odd, or the most from
    the tail alone or the head alone where that keeps more than twice as many; one marker
    alone when none fit. Returns the message, its tokens and the characters removed. Taken
    where cuts inside each part cannot fit, or keep fewer characters
    (:func:`_shrink_evenly`; fresh55 #1, fresh56 #1). Rust ``span_plan``."""
    m = st.m(w)
    result = m.content[part]
    assert isinstance(result, ToolResult)
    texts = [result.content[q].text for q in qs]  # type: ignore[union-attr]
    old = st.costs[w]
    others = st.total() - old
    n = len(qs)

    def at(h: int, t: int) -> tuple[Message, int, int]:  # h parts kept at the head, t at the tail
        mark = cut_marker(sum(shown_removed(x, 0, len(x)) for x in texts[h : n - t]), False, False)
        gone = set(qs[h + 1 : n - t])
        inner = [
            msgspec.structs.replace(x, text=mark) if q == qs[h] else x
            for q, x in enumerate(result.content)
            if q not in gone
        ]
        new_r = msgspec.structs.replace(result, content=inner)
        new_m = _with_part(m, part, new_r)
        return new_m, _cost_with(st, m, old, part, new_r, new_m), sum(len(x) for x in texts[h : n - t])

    return at(*span_split(n, lambda h, t: others + at(h, t)[1] <= budget))


def span_split(n: int, fits: Callable[[int, int], bool]) -> tuple[int, int]:
    """How many of ``n`` parts a cut across them keeps at the head and at the tail: the
    most from both ends with which ``fits(head, tail)`` (the head one more when odd), or
    the most from the tail alone or the head alone where that keeps more than twice as
    many (a first part too large to keep whole kept nothing of the others: fresh57 #2; a
    few more short lines are not worth the end). ``fits`` must be monotone in each
    search (:func:`largest_fitting`). Used by :func:`_span_plan` and
    ``budget_tool_results``' share; Rust ``span_plan``.

    >>> span_split(10, lambda h, t: h + t <= 4), span_split(10, lambda h, t: h == 0 and t <= 5)
    ((2, 2), (0, 5))
    """
    best = (0, 0)
    splits: tuple[Callable[[int], tuple[int, int]], ...] = (
        lambda k: (k - k // 2, k // 2),
        lambda k: (0, k),
        lambda k: (k, 0),
    )
    for split in splits:

        def ok(k: int, split: Callable[[int], tuple[int, int]] = split) -> bool:
            return fits(*split(k))

        h, t = split(largest_fitting(n, ok))
        if h + t > 2 * sum(best):
            best = (h, t)
    return best


#: Texts of at least this many characters are cut after a search by interpolation
#: (:func:`largest_within`), shorter ones after a binary search (Rust ``INTERPOLATE_FROM``).
INTERPOLATE_FROM = 65_536


def largest_within(n: int, cost: Callable[[int], int], limit: int, top: int) -> int:
    """The largest ``k`` in ``[0, n - 1]`` with ``cost(k) <= limit``, ``0`` when ``cost(0)``
    is over (a text is then cut to its marker alone); ``top``: the cost at ``n`` (the text
    whole), over ``limit``. Regula falsi with the Illinois step on ``2 cost(k) - 2 limit -
    1`` (never 0) while the bracket is over 64 wide, at most 12 steps, then a binary
    search inside it (fresh26 #2: trial cuts land near the answer at once). Rust
    ``largest_within``, step for step. Below :data:`INTERPOLATE_FROM` characters it is
    :func:`largest_fitting` (the cuts the tests and the README check by hand)."""
    if n < INTERPOLATE_FROM:
        return largest_fitting(n, lambda k: cost(k) <= limit)
    c0 = cost(0)
    if c0 > limit or n <= 1:
        return 0

    def f(c: int) -> int:
        return 2 * c - 2 * limit - 1

    lo, f_lo = 0, f(c0)
    hi, f_hi = n, f(max(top, limit + 1))
    side = 0  # -1: lo moved last, 1: hi moved last
    steps = 0
    while hi - lo > 64 and steps < 12:
        steps += 1
        k = lo + (-f_lo) * (hi - lo) // (f_hi - f_lo)
        k = min(max(k, lo + 1), hi - 1)
        fk = f(cost(k))
        if fk < 0:
            lo, f_lo = k, fk
            if side == -1:
                f_hi = max(f_hi // 2, 1)
            side = -1
        else:
            hi, f_hi = k, fk
            if side == 1:
                f_lo = min(-((-f_lo) // 2), -1)  # toward 0, as Rust's `/ 2`
            side = 1
    while hi - lo > 1:
        mid = lo + (hi - lo) // 2
        if cost(mid) <= limit:
            lo = mid
        else:
            hi = mid
    return lo


def _ends_prefill(st: _State, w: int, part: int) -> bool:
    """Part ``part`` of item ``w`` ends an Anthropic prefill: the last part of an assistant
    message that is the last message kept (the model continues it)."""
    m = st.m(w)
    return (
        st.provider == "anthropic"
        and m.role == "assistant"
        and part == len(m.content) - 1
        and not any(st.keep[w + 1 :])
    )


def _shrink(
    st: _State, w: int, part: int, inner: int | None, budget: int, rule: str, floor: int = 0
) -> tuple[int, bool]:
    """Cut text part ``(part, inner)`` of work item ``w`` so the total fits, if it helps.

    Never a cut whose marker costs as many tokens as the text it removes, or more
    (fresh12 O1). The cut is the largest that fits; when that one is not worth its
    marker, the largest smaller one that fits and is (the request too: fresh18 F1, it was
    left whole and over budget where a smaller budget fit with a cut). The first
    ``floor`` characters always stay (an observation's ``[Tool results]`` prefix).
    Returns the characters the cut removed (0: no cut) and, for the request's rule,
    whether what it kept is blank (``False`` for the other rules)."""
    m = st.m(w)
    pt = m.content[part]
    target = pt.content[inner] if inner is not None else pt  # type: ignore[union-attr]
    text = target.text  # type: ignore[union-attr]
    old = st.costs[w]
    others = st.total() - old
    end = inner is None and _ends_prefill(st, w, part)

    def cost(k: int) -> int:
        cut = shrink_text(text, k, floor, end)[0]
        return others + _cost_with(st, m, old, part, _text_replaced(pt, inner, cut))

    def fits(k: int) -> bool:
        return cost(k) <= budget

    def worth(k: int) -> bool:  # the marker costs fewer tokens than what it stands for
        head, tail = prefill_cut_points(text, k, floor, end)
        mark = cut_marker(shown_removed(text, head, tail), end, tail == len(text))
        return _text_tokens(st, mark) < _text_tokens(st, text[head:tail])

    lo = largest_within(len(text) - floor, cost, budget, others + old)
    if lo > 0 and not worth(lo):
        lo = largest_fitting(lo, lambda k: fits(k) and worth(k))
    new_text, removed = shrink_text(text, lo, floor, end)
    if removed == 0:
        return 0, False
    new_m = _with_text(m, part, inner, new_text)
    new_cost = _cost_with(st, m, old, part, new_m.content[part], new_m)
    if new_cost < old and worth(lo):
        _put_cut(st, w, new_m, new_cost, rule, removed)
        if rule != "request_truncated":  # no other rule asks whether the cut kept only blanks
            return removed, False
        head, tail = prefill_cut_points(text, lo, floor, end)
        return removed, _wordless(text[:head] + text[tail:])
    return 0, False


def _put_cut(st: _State, w: int, new_m: Message, new_cost: int, rule: str, removed: int) -> None:
    """Item ``w`` becomes ``new_m`` (``new_cost`` tokens), cut by ``rule``: its message's
    fate is ``truncated`` and counts ``removed`` more characters (Rust ``State::put_cut``)."""
    st.work[w] = Item(st.work[w].src, new_m)
    st.set_cost(w, new_cost)
    src = st.work[w].src
    if src is not None:
        f = st.fates[src]
        f["fate"], f["rule"] = "truncated", rule
        f["chars_removed"] += removed


def _finish(
    st: _State, budget: int | None, reason: str | None, turns: tuple[int, int], bc_at: int | None
) -> tuple[list[tuple[int | None, Message | None]], FitReport]:
    out: list[Item] = []
    inserted = sum(1 for it, k in zip(st.work, st.keep, strict=True) if k and it.src is None)
    breadcrumb = False
    for w, it in enumerate(st.work):
        if not st.keep[w]:
            continue
        if bc_at == w and st.breadcrumb:
            if st.provider == "openai":
                out.append(Item(None, Message(role="user", content=[TextPart(text=BREADCRUMB)])))
                inserted += 1
                breadcrumb = True
            elif first_text(it.msg(st.msgs)) != BREADCRUMB and not _holds_nothing(it.msg(st.msgs)):
                it = Item(it.src, _with_breadcrumb(it.msg(st.msgs)))
                breadcrumb = True
                if it.src is not None and st.fates[it.src]["fate"] == "kept":
                    st.fates[it.src]["rule"] = "breadcrumb_added"
        out.append(it)
    tokens_after = sum(st.cost.message_tokens(it.msg(st.msgs)) for it in out)
    changed = len(out) != len(st.msgs) or any(it.new is not None or it.src != i for i, it in enumerate(out))
    report = FitReport(
        tokens_before=st.tokens_before,
        tokens_after=tokens_after,
        budget=budget,
        fits=budget is None or tokens_after <= budget,
        reason=(reason or "tool_pairs") if changed else None,
        turns_before=turns[0],
        kept_turns=turns[1],
        dropped_turns=turns[0] - turns[1],
        dropped_messages=sum(f["fate"] == "dropped" for f in st.fates),
        truncated_messages=sum(f["fate"] == "truncated" for f in st.fates),
        inserted_messages=inserted,
        breadcrumb=breadcrumb,
        repairs=st.repairs,
        fates=[Fate(**f) for f in st.fates],
    )
    return [(it.src, it.new) for it in out], report


def trim_turns(
    msgs: list[Message],
    budget: int,
    profile: str | Profile | CostModel = "conservative",
    breadcrumb: bool = True,
    provider: str = "openai",
) -> tuple[list[tuple[int | None, Message | None]], FitReport]:
    """Same rules as ``contextwindow.trim_turns``, on canonical messages; ``profile`` may
    be a cost model (message costs from any counter).

    The breadcrumb is a courtesy: it may cost whole old turns, never anything of the
    newest turn. With ``breadcrumb`` on, the result with it is worked out first, and the
    result without it too unless the first fits with nothing taken from the newest turn;
    the one returned is, in order: (1) the result with the breadcrumb, when it fits and
    loses no more of the newest turn than the result without it (no more characters cut
    from tool results and the request, no more tokens of the newest turn's messages
    dropped with its tool units), unless it put no breadcrumb in after all and dropped more messages
    than the result without it; (2) else the result without it, when that fits; (3) else (neither
    fits) the smaller of the two, the one with the breadcrumb on a tie (fresh8 N1: the
    request was cut, or nothing done, where leaving the breadcrumb out fit the request
    whole; fresh14 #7: with the breadcrumb always, the input came back whole at one budget
    and two messages at the next)."""
    ops, report, units = _trim_turns_once(msgs, budget, profile, breadcrumb, provider)
    # a result that dropped turns and still put no breadcrumb in is compared with the
    # one without it (it may have dropped a turn more for a breadcrumb that was free)
    if not breadcrumb or (
        report.fits
        and all(f.chars_removed == 0 and f.rule != "oldest_tool_unit" for f in report.fates)
        and (report.breadcrumb or report.dropped_turns == 0)
    ):
        return ops, report
    bare_ops, bare, bare_units = _trim_turns_once(msgs, budget, profile, False, provider)
    return (ops, report) if _choose_with_breadcrumb((report, units), (bare, bare_units)) else (bare_ops, bare)


#: Unicode's default-ignorable code points (``Default_Ignorable_Code_Point``) and U+2800
#: BRAILLE PATTERN BLANK, which show nothing (Rust ``model::is_ignorable``), as inclusive
#: ranges.
_IGNORABLE = (
    (0xAD, 0xAD),
    (0x34F, 0x34F),
    (0x61C, 0x61C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x2800, 0x2800),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)


def _wordless(text: str) -> bool:
    """Whether ``text`` holds none of a request's words: only whitespace, characters
    that show nothing (:data:`_IGNORABLE`) and marks that attach to a base character
    (``ATTACH``: UAX #29's Extend, SpacingMark and ZWJ) with none to attach to; a request
    is never cut to that (fresh52 #6, fresh54 #3; Rust ``model::wordless``)."""
    return all(
        c in _WHITE_SPACE or any(lo <= ord(c) <= hi for lo, hi in _IGNORABLE) or _in(ATTACH, _ATTACH0, c) for c in text
    )


def is_results_text(m: Message) -> bool:
    """A text-action agent's observation as the step grouping reads one: a user message
    whose first part is text starting with ``[Tool results]`` (it starts no turn,
    DESIGN.md section 4; Rust ``trim::is_results_text``)."""
    return m.role == "user" and (first_text(m) or "").startswith(TOOL_RESULTS_PREFIX)


def is_placeholder(m: Message) -> bool:
    """A message pair repair emptied and kept to hold ``RESULTS_REMOVED``."""
    return len(m.content) == 1 and first_text(m) == RESULTS_REMOVED


def text_action_steps(work: Sequence[Message], in_unit: Container[int], a: int, b: int) -> list[list[int]]:
    """The text-action steps of messages ``a``..``b`` (one turn), in order: an assistant
    message in no tool unit (``in_unit``) and no placeholder, the observations right after
    it (:func:`is_results_text`, in no unit, no placeholder) and the screenshots after
    those (user messages of media alone: :func:`after_observations`). ``fit`` evicts and
    ``trim_turns`` drops each whole, as a tool unit (fresh15 #2, fresh52 #1, fresh53 #2;
    Rust ``trim::newest_turn_units``)."""
    steps: list[list[int]] = []
    w = a
    while w + 1 < b:
        if work[w].role != "assistant" or w in in_unit or is_placeholder(work[w]):
            w += 1
            continue
        e = w + 1
        while (
            e < b
            and e not in in_unit
            and not is_placeholder(work[e])
            and (is_results_text(work[e]) or (e > w + 1 and is_media_only(work[e])))
        ):
            e += 1
        if e > w + 1:
            steps.append(list(range(w, e)))
        w = max(e, w + 1)
    return steps


def _newest_turn_units(work: list[Message], seg: Segmentation, la: int, lb: int) -> list[list[int]]:
    """The newest turn's (``la``..``lb``) tool units and text-action steps
    (:func:`text_action_steps`), in order; dropped oldest first (fresh52 #1; Rust
    ``newest_turn_units``)."""
    in_unit = {w for u in seg.units for w in u}
    units = [u for u in seg.units if la <= u[0] < lb] + text_action_steps(work, in_unit, la, lb)
    return sorted(units, key=lambda u: u[0])


def _newest_turn_loss(report: FitReport, units: int) -> tuple[int, int]:
    """(characters cut from tool results and the request, tokens of the messages dropped
    with the newest turn's oldest tool units: ``units``). Tokens, not messages: keeping a
    smaller unit where the other keeps a larger one loses more (fresh42 #2)."""
    return sum(f.chars_removed for f in report.fates), units


def _choose_with_breadcrumb(with_units: tuple[FitReport, int], bare_units: tuple[FitReport, int]) -> bool:
    """The rule of ``trim_turns``: whether the result with the breadcrumb wins (each
    result given with the tokens of its dropped tool units)."""
    (with_, wu), (bare, bu) = with_units, bare_units
    if with_.fits:
        a, b = _newest_turn_loss(with_, wu), _newest_turn_loss(bare, bu)
        if not bare.fits or (a[0] <= b[0] and a[1] <= b[1]):
            # unless no breadcrumb went in after all and the result without it fits,
            # loses no more of the newest turn and drops fewer messages
            bare_better = (
                not with_.breadcrumb
                and bare.fits
                and b[0] <= a[0]
                and b[1] <= a[1]
                and bare.dropped_messages < with_.dropped_messages
            )
            return not bare_better
    return not bare.fits and with_.tokens_after <= bare.tokens_after


def _holds_pinned(st: _State, a: int, b: int) -> bool:
    """Whether work items ``a..b`` (a turn) hold a pinned message (Rust ``holds_pinned``)."""
    return any(st.m(w).pinned for w in range(a, b))


def _droppable_turns(st: _State, seg: Segmentation) -> list[int]:
    """The turns a trim may drop, oldest first: never the newest turn, never one holding a
    pinned message, never one opened by stubs answering the calls of a turn that stays
    (the stubs go with those calls)."""
    nt = len(seg.turns)
    pinned_turn = [_holds_pinned(st, a, b) for a, b in seg.turns]
    can_go = [False] * nt
    for i in range(nt - 1):
        after_kept = i > 0 and st.stub_head[seg.turns[i][0]] and not can_go[i - 1]
        can_go[i] = not pinned_turn[i] and not after_kept
    return [i for i in range(nt - 1) if can_go[i]]


def _trim_turns_once(
    msgs: list[Message],
    budget: int,
    profile: str | Profile | CostModel,
    breadcrumb: bool,
    provider: str,
) -> tuple[list[tuple[int | None, Message | None]], FitReport, int]:
    """``trim_turns`` with the breadcrumb as given, whether or not it fits; with the tokens
    of the newest turn's tool units it dropped."""
    st = _state(msgs, cost_model(profile), provider, breadcrumb, "stub")
    seg = segment([it.msg(msgs) for it in st.work])
    nt = len(seg.turns)
    if st.total() <= budget or not seg.turns:
        return (*_finish(st, budget, None, (nt, nt), None), 0)
    for w in range(seg.preamble_end):
        st.set_fate(w, "kept", "preamble")
    turn_cost = [sum(st.costs[a:b]) for a, b in seg.turns]
    pre = sum(st.costs[: seg.preamble_end])
    # dropping a turn takes the stubs answering its calls out of the next one, which then
    # costs saving[i] less
    saving = [st.stub_tokens(a) for a, _ in seg.turns]
    droppable = _droppable_turns(st, seg)

    # the breadcrumb goes before the first kept turn after a dropped one: with the k oldest
    # droppable turns gone, the turn right after the leading run of consecutive indices
    consecutive = next((j for j, i in enumerate(droppable) if i != droppable[0] + j), len(droppable))

    def bc_turn(k: int) -> int | None:
        return droppable[0] + min(k, consecutive) if droppable else None

    def start_of(i: int | None) -> int | None:
        return None if i is None else seg.turns[i][0]

    dropped, feasible = len(droppable), False
    kept_cost = pre + sum(turn_cost)
    for k in range(1, len(droppable) + 1):
        d = droppable[k - 1]
        # turn d - 1 went before d when d's head holds stubs (see can_go)
        kept_cost -= turn_cost[d] - saving[d] + (saving[d + 1] if d + 1 < nt else 0)
        # the breadcrumb costs >= 0: only count it once the turns alone fit
        if kept_cost <= budget and kept_cost + st.bc_cost(start_of(bc_turn(k))) <= budget:
            dropped, feasible = k, True
            break
    # out of reach anyway: drop only if that shrinks the conversation at all
    if not feasible and dropped > 0:
        if pre + sum(turn_cost) - kept_cost <= st.bc_cost(start_of(bc_turn(dropped))):
            dropped = 0
    gone = set(droppable[:dropped])
    # a pinned turn stayed for its pin where a newer turn went, or where the turns that
    # could go were not enough (Rust trim_turns_once)
    newest_gone = droppable[dropped - 1] if dropped > 0 else None
    # each dropped turn's fates just before it went, to put it back with
    fates_before: dict[int, list[tuple[int, dict[str, Any]]]] = {}
    for i, (a, b) in enumerate(seg.turns):
        held = (
            i + 1 < nt and (not feasible or (newest_gone is not None and newest_gone > i)) and _holds_pinned(st, a, b)
        )
        if i in gone:
            srcs = [s for s in (st.work[w].src for w in range(a, b)) if s is not None]
            fates_before[i] = [(s, dict(st.fates[s])) for s in srcs]
        for w in range(a, b):
            if i in gone:
                st.set_keep(w, False)
                st.set_fate(w, "dropped", "oldest_turn")
            else:
                st.set_fate(w, "kept", "pinned_turn" if held else "kept_turn")

    def bc_at_k(k: int) -> tuple[int | None, int]:
        if k == 0:
            return None, 0
        at = start_of(bc_turn(k))
        return at, st.bc_cost(at)

    bc_at, bc_cost = bc_at_k(dropped)
    la, lb = seg.turns[-1]
    req = current_request(msgs, [it.src for it in st.work], seg.current_request)
    # the first assistant message of the newest turn when it starts with a thinking block
    # stays as a pinned one does, its tool unit whole (fresh20b #1)
    # (found in the repaired list, the one sent)
    anchor = thinking_anchor([it.msg(msgs) for it in st.work], provider)

    def over() -> bool:
        return st.total() + bc_cost > budget

    unit_tokens = 0
    if over():
        units = _newest_turn_units([it.msg(msgs) for it in st.work], seg, la, lb)
        # each with the fates its messages had before it went (a repair's stays when it
        # comes back: fresh42 #1)
        gone_units: list[tuple[list[int], list[tuple[int, dict[str, Any]]]]] = []
        for u in units[:-1]:
            if not over():
                break
            # nor a call whose stubs sit in the real user message after it (before the
            # first real user message): two user messages would meet
            stubbed = u[-1] + 1 < len(st.work) and st.stub_head[u[-1] + 1]
            if stubbed or any(st.m(w).pinned or w in (req, anchor) for w in u):
                continue
            srcs = [s for s in (st.work[w].src for w in u) if s is not None]
            before = [(s, dict(st.fates[s])) for s in srcs]
            for w in u:
                st.set_keep(w, False)
                st.set_fate(w, "dropped", "oldest_tool_unit")
            gone_units.append((u, before))
        for u, before in reversed(gone_units):  # refill, newest first, what still fits
            cost = sum(st.costs[w] for w in u)
            if st.total() + cost + bc_cost <= budget:
                for s, f in before:
                    st.fates[s].clear()
                    st.fates[s].update(f)
                for w in u:
                    st.set_keep(w, True)
                    st.set_fate(w, "kept", "kept_turn")
            else:
                unit_tokens += cost
    # then the old turns that went before the newest turn was worked on come back, newest
    # first, while they fit with their breadcrumb (fresh41 #1); the first that does not
    # fit ends it (Rust trim_turns_once)
    if not feasible and not over():
        while dropped > 0:
            a, b = seg.turns[droppable[dropped - 1]]
            at, cost = bc_at_k(dropped - 1)
            if st.total() + sum(st.costs[a:b]) + cost > budget:
                break
            for s, f in fates_before[droppable[dropped - 1]]:
                st.fates[s].clear()
                st.fates[s].update(f)
            for w in range(a, b):
                st.set_keep(w, True)
                st.set_fate(w, "kept", "kept_turn")
            if st.total() + cost > budget:
                for w in range(a, b):
                    st.set_keep(w, False)
                    st.set_fate(w, "dropped", "oldest_turn")
                break
            dropped -= 1
            bc_at, bc_cost = at, cost
    inner_budget = budget - min(bc_cost, budget)
    # the tool results, and the text of observations (a text-action agent's tool output,
    # given back as user text starting with "[Tool results]": fresh15 #4), largest first;
    # an observation keeps its prefix, so it still reads as one
    if over():
        # (-len, w, part, inner: -1 for an observation's own text part, the text parts of
        # the same tool result, cut with it to one common keep: fresh26 #3); a tool result
        # in several text parts takes its place by its longest, the first of equals
        cands: list[tuple[int, int, int, int, list[int]]] = []
        for w in range(la, lb):
            m = st.m(w)
            if not st.keep[w] or m.pinned:
                continue
            observation = is_observation(m)
            for p, part in enumerate(m.content):
                if isinstance(part, ToolResult):
                    texts = [
                        (-len(x.text), q) for q, x in enumerate(part.content) if isinstance(x, TextPart) and x.text
                    ]
                    if texts:
                        neg_len, q = min(texts)
                        cands.append((neg_len, w, p, q, [q for _, q in texts]))
                elif observation and isinstance(part, TextPart) and part.text:
                    cands.append((-len(part.text), w, p, -1, []))
        for _, w, p, q, group in sorted(cands):
            if not over():
                break
            if len(group) >= 2:
                _shrink_evenly(st, w, p, sorted(group), inner_budget, "tool_result_shrunk")
            elif q >= 0:
                _shrink(st, w, p, q, inner_budget, "tool_result_shrunk")
            else:
                text = st.m(w).content[p].text  # type: ignore[union-attr]
                floor = len(TOOL_RESULTS_PREFIX) if text.startswith(TOOL_RESULTS_PREFIX) else 0
                _shrink(st, w, p, None, inner_budget, "tool_result_shrunk", floor)
    # a finished transcript: the newest turn's assistant text after the current request
    # (the answer to it) is cut as tool results are, largest first, before the request is
    if over() and req is not None and la <= req < lb:
        # a text-action step's command is its call, not a reply: never cut (fresh54 #1;
        # Rust trim_turns_once)
        in_unit = {w for u in seg.units for w in u}
        heads = {step[0] for step in text_action_steps([it.msg(msgs) for it in st.work], in_unit, la, lb)}
        cands3 = []
        for w in range(req + 1, lb):
            m = st.m(w)
            if not st.keep[w] or m.pinned or w == anchor or m.role != "assistant" or w in heads:
                continue
            for p, part in enumerate(m.content):
                if isinstance(part, TextPart) and part.text:
                    cands3.append((-len(part.text), w, p))
        for _, w, p in sorted(cands3):
            if not over():
                break
            _shrink(st, w, p, None, inner_budget, "reply_shrunk")
    if over() and req is not None and la <= req < lb and not st.m(req).pinned:
        w = req
        cands2 = [(-len(q.text), i) for i, q in enumerate(st.m(w).content) if isinstance(q, TextPart) and q.text]
        # the parts with words left: those not cut, and those cut to more than blanks
        worded = [isinstance(q, TextPart) and not _wordless(q.text) for q in st.m(w).content]
        any_words = any(worded)
        # a shortcut: no cut is tried when even every part cut to its marker would leave
        # the conversation over budget (the restore below keeps the rule otherwise)
        cut_saving = 0
        m = st.m(w)
        for neg_len, i in cands2:  # each text cut down to its marker alone
            alone = _text_replaced(m.content[i], None, marker(-neg_len))
            cut_saving += max(0, st.costs[w] - _cost_with(st, m, st.costs[w], i, alone))
        if st.total() + bc_cost > budget + cut_saving:
            cands2 = []
        # the request as it was, put back when its cuts do not make it fit: a part whose
        # marker would cost as much as its text is never cut, so the saving above can be
        # more than the cuts give
        src = st.work[w].src
        whole = (st.work[w], st.costs[w], dict(st.fates[src]) if src is not None else None)
        for _, p in sorted(cands2):
            if not over():
                break
            removed, kept_blank = _shrink(st, w, p, None, inner_budget, "request_truncated")
            if removed:
                worded[p] = not kept_blank
        # nor when they leave none of its words, its markers alone or blanks (fresh32 #1:
        # a request of 486 characters came back as its marker, reported to fit; fresh34
        # #1: an indented one as a space)
        if over() or (any_words and not any(worded)):
            st.work[w] = whole[0]
            st.set_cost(w, whole[1])
            if src is not None and whole[2] is not None:
                st.fates[src] = whole[2]
    return (*_finish(st, budget, "token_budget", (nt, nt - dropped), bc_at), unit_tokens)


def trim_turn_count(
    msgs: list[Message],
    max_turns: int,
    profile: str | Profile | CostModel = "conservative",
    breadcrumb: bool = True,
    provider: str = "openai",
) -> tuple[list[tuple[int | None, Message | None]], FitReport]:
    """Same rules as ``contextwindow.trim_turn_count``, on canonical messages."""
    st = _state(msgs, cost_model(profile), provider, breadcrumb, "stub")
    seg = segment([it.msg(msgs) for it in st.work])
    t = len(seg.turns)
    keep = min(max(1, max_turns), t)
    # the turns older than the newest `keep` that may go, as in trim_turns (fresh19 F3:
    # a pinned message in an old turn was dropped)
    droppable = [i for i in _droppable_turns(st, seg) if i < t - keep]
    pinned_old = any(_holds_pinned(st, a, b) for a, b in seg.turns[: t - keep])
    if not droppable and not pinned_old:
        return _finish(st, None, None, (t, t), None)
    for w in range(seg.preamble_end):
        st.set_fate(w, "kept", "preamble")
    gone = set(droppable)
    for i, (a, b) in enumerate(seg.turns):
        # a pinned turn older than the newest `keep` stays for its pin
        held = i < t - keep and _holds_pinned(st, a, b)
        for w in range(a, b):
            if i in gone:
                st.set_keep(w, False)
                st.set_fate(w, "dropped", "turn_limit")
            else:
                st.set_fate(w, "kept", "pinned_turn" if held else "kept_turn")
    if not droppable:
        # nothing may go, but the limit applied: the fates say which turns stay over it
        # for their pin
        return _finish(st, None, "turn_limit", (t, t), None)
    # the breadcrumb goes before the first kept turn after a dropped one
    consecutive = next((j for j, i in enumerate(droppable) if i != droppable[0] + j), len(droppable))
    return _finish(st, None, "turn_limit", (t, t - len(droppable)), seg.turns[droppable[0] + consecutive][0])


def repair_tool_pairs(
    msgs: list[Message], missing: str = "stub", profile: str = "conservative", provider: str = "openai"
) -> tuple[list[tuple[int | None, Message | None]], FitReport]:
    """Same rules as ``contextwindow.repair_tool_pairs``, on canonical messages."""
    st = _state(msgs, cost_model(profile), provider, False, missing)
    t = len(segment([it.msg(msgs) for it in st.work]).turns)
    return _finish(st, None, "tool_pairs", (t, t), None)
