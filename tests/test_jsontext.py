"""``contextwindow._jsontext``: the one lone-surrogate cleaning every front uses, and the
refusal of two keys it makes one (fresh10 N4), against an independent implementation."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextwindow._jsontext import KeyClash, clean_value, field_path, quote

# high, low, a pair's halves, the pair's character, U+FFFD itself, a plain letter
PIECES = ["a", "\ud800", "\udbff", "\udc00", "\ud83d", "\ude00", "\U0001f600", "\ufffd"]
HI, LO, LOW = "\ud800", "\udbff", "\udc00"  # all U+FFFD once cleaned (named: ruff takes them for one key)
TEXT = st.text(alphabet=st.sampled_from(PIECES), max_size=3)
VALUES = st.recursive(
    st.none() | st.integers() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


def utf16_clean(s: str) -> str:
    """The rule by the UTF-16 codec (slow on long runs, hence clean_str): a high surrogate
    followed by a low one is their character, every other surrogate U+FFFD."""
    return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def oracle(value: Any, path: list[Any]) -> tuple[Any, tuple[list[Any], str] | None]:
    """The cleaned copy, and the first clash in document order (an object's value before
    its key): ``(path to the object, key)``."""
    if isinstance(value, str):
        return utf16_clean(value), None
    if isinstance(value, list):
        out = []
        for i, v in enumerate(value):
            c, clash = oracle(v, [*path, i])
            if clash:
                return None, clash
            out.append(c)
        return out, None
    if isinstance(value, dict):
        seen: dict[str, Any] = {}
        for k, v in value.items():
            key = utf16_clean(k)
            c, clash = oracle(v, [*path, key])
            if clash:
                return None, clash
            if key in seen:
                return None, (path, key)
            seen[key] = c
        return seen, None
    return value, None


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_clean_value_agrees_with_the_utf16_codec_and_refuses_merged_keys(value: Any) -> None:
    before = copy.deepcopy(value)
    want, clash = oracle(value, [])
    if clash is None:
        assert clean_value(value) == want
    else:
        with pytest.raises(KeyClash) as info:
            clean_value(value)
        assert (info.value.path, info.value.key) == clash
    assert value == before  # the caller's value is never changed


def test_clean_value_by_hand() -> None:
    # "\ud800" and "\udbff" are both U+FFFD: the second key is refused, the path names the
    # object that holds it (list index 1, key "k")
    with pytest.raises(KeyClash) as info:
        clean_value([{}, {"k": {HI: 1, LO: 2}}])
    assert (info.value.path, info.value.key, info.value.reason()) == (
        [1, "k"],
        "\ufffd",
        'the key "\ufffd" appears more than once',
    )
    # an object's value is read before its key: the inner clash (under "\udc00") comes
    # first, named under its cleaned key
    with pytest.raises(KeyClash) as info:
        clean_value({"\ufffd": 0, LOW: {"x" + HI: 1, "x\ufffd": 2}})
    assert (info.value.path, info.value.key) == (["\ufffd"], "x\ufffd")
    # a pair held as two code points is the character: it meets the character's own key
    with pytest.raises(KeyClash):
        clean_value({"\U0001f600": 1, "\ud83d\ude00": 2})
    # tuples are arrays; no clash, no change but the cleaning
    assert clean_value(({"a\ud800": ("b\ud83d\ude00",)},)) == [{"a\ufffd": ["b\U0001f600"]}]


# ------------------------------------------------------------- quote (fresh9 B5)

SHORT = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def quote_by_hand(s: str) -> str:
    """JSON's escapes, written out: the short ones, ``\\u00XX`` for the other C0
    controls, and DEL, C1, U+2028, U+2029 as ``\\uXXXX``; all else as it is. Only the
    first 100 characters (of the cleaned text) are written, then how many were left out
    (fresh11 N6)."""
    text = utf16_clean(s)
    left_out = len(text) - 100
    marker = "" if left_out <= 0 else f"... ({left_out:,} more character{'s' if left_out > 1 else ''})"
    out = []
    for c in text[:100]:
        if c in SHORT:
            out.append(SHORT[c])
        elif ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c in "\u2028\u2029":
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"' + marker


@settings(max_examples=300, deadline=None)
@given(
    st.text(
        alphabet=st.characters(max_codepoint=0x3000) | st.sampled_from(["\ud800", "\U0001f600", "\u2029"]),
        max_size=300,
    )
)
def test_quote_escapes_what_json_and_terminals_need_and_nothing_else(s: str) -> None:
    q = quote(s)
    assert q == quote_by_hand(s)
    assert q.splitlines() == [q]  # one line, by Python's widest rule
    if len(utf16_clean(s)) <= 100:
        assert json.loads(q) == utf16_clean(s)  # still a JSON string, read back as the text
    else:  # the first 100 characters as a JSON string, then the marker
        head, marker = q.rsplit('"... (', 1)
        assert json.loads(head + '"') == utf16_clean(s)[:100]
        assert marker == f"{len(utf16_clean(s)) - 100:,} more character{'s' if len(utf16_clean(s)) > 101 else ''})"


def test_quote_by_hand() -> None:
    # the fresh9 B5 role: NUL, U+2028, TAB, DEL, U+0085 escaped; the emoji and "/" kept
    assert quote("\U0001f600\x00\u2028\t\x7f\x85/") == '"\U0001f600\\u0000\\u2028\\t\\u007f\\u0085/"'
    # no-break and ideographic spaces, é, U+FFFD are printable: kept; a lone surrogate is U+FFFD
    assert quote("é\xa0\u3000\ufffd x\ud800") == '"é\xa0\u3000\ufffd x\ufffd"'
    assert quote('a"b\\') == '"a\\"b\\\\"'


def test_quote_and_field_path_bound_a_long_string() -> None:
    """fresh11 N6: a 10 KB role gave a 10 KB one-line error. A quoted string or a key in
    a field path keeps its first 100 characters, then says how many were left out; Rust
    ``error::quote`` and the gateway's paths write the same."""
    assert quote("w" * 100) == '"' + "w" * 100 + '"'
    assert quote("w" * 101) == '"' + "w" * 100 + '"... (1 more character)'
    assert quote("w" * 10_000) == '"' + "w" * 100 + '"... (9,900 more characters)'
    # characters of the text as read: a surrogate pair is one, a lone surrogate one U+FFFD
    assert quote("é" * 99 + "\ud83d\ude00" + "\ud800" * 3) == '"' + "é" * 99 + '\U0001f600"... (3 more characters)'
    # escapes are written for the characters kept, and do not count: 102 newlines
    assert quote("\n" * 102) == '"' + "\\n" * 100 + '"... (2 more characters)'
    # a key in a field path, not quoted: the same bound and marker
    assert field_path(["content", 0, "k" * 150, "q"]) == "content[0]." + "k" * 100 + "... (50 more characters).q"
    assert field_path(["\u2028" * 101]) == "\\u2028" * 100 + "... (1 more character)"
