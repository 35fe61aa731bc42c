//! Single-pass text features for the fitted estimators (DESIGN.md section 3).
//!
//! The scanner splits text into the pieces a BPE tokenizer's pre-tokenizer would make
//! (letter segments with an optional leading space or punctuation character, punctuation
//! runs, whitespace runs, digits, non-ASCII code points) and, for every tokenizer family
//! it is given, looks each short piece up in that family's vocabulary. A piece found
//! there is one token; a piece not found contributes length features. Non-ASCII code
//! points add the family's cost of the character on its own (a 2-bit table over the
//! Basic Multilingual Plane and the emoji blocks); CJK, kana, hangul and symbols also try
//! the family's 2- and 3-character tokens, greedily, and a space before CJK, kana or
//! hangul joins the 1 to 3 characters after it when the family has that token (" 교육").
//! Text in capitals, which tokenizers split into more pieces than the same words in
//! lowercase, is seen twice: the capitals of an unknown ASCII letter segment beyond its
//! first (counted only for unknown segments, off the fast path's common case), and a
//! non-ASCII uppercase letter right after an uppercase letter (a flag of the group table
//! the scanner reads anyway, from `crate::marks::UPPER`).
//! One pass over the bytes, no allocation.
//!
//! The vocabulary is a register-blocked Bloom filter (2^22 bits = 512 KiB in 64-bit
//! words, 4 bits per key in one word, [`key_hash`]) of every ASCII token of at most 16
//! bytes, every 2- or 3-character CJK or symbol token and every token of a space and 1 to
//! 3 CJK characters; about 0.03% of pieces that are not tokens test positive (random
//! 10-15-letter words: 0.03% for `cl100k` and Tekken, 0.005% for `conservative`; at
//! 2^20 bits it was 1.4%). Both it and the cost table are data files
//! written by `tools/fit_profiles.py` from the real vocabularies.
//!
//! `contextwindow._reference` implements the same rules in Python; the two agree exactly.

/// Bytes in a Bloom filter: 2^22 bits, 2^16 64-bit words (fits a core's 1 MiB L2).
pub const BLOOM_BYTES: usize = 1 << 19;
/// Shift that takes a (family) key hash to its filter word's index: its top 16 bits,
/// `h >> BLOOM_SHIFT < BLOOM_BYTES / 8`.
pub const BLOOM_SHIFT: u32 = 64 - (BLOOM_BYTES / 8).trailing_zeros();
/// Entries in a cost table: the BMP, then U+1F000..=U+1FAFF.
pub const TABLE_ENTRIES: usize = 0x10000 + 0xB00;
/// Bytes in a cost table (2 bits per entry).
pub const TABLE_BYTES: usize = TABLE_ENTRIES / 4;
/// Longest piece looked up in the vocabulary, in bytes.
pub const MAX_KEY: usize = 16;

/// Script groups of non-ASCII code points, in feature order.
pub const GROUPS: [&str; 15] = [
    "latin", "greek", "cyrl", "armgeo", "rtl", "indic", "sea", "otherl", "cjk", "kana", "hangul",
    "sym", "emoji", "joiner", "astral",
];
const G_LATIN: u8 = 0;
const G_GREEK: u8 = 1;
const G_CYRL: u8 = 2;
const G_ARMGEO: u8 = 3;
const G_RTL: u8 = 4;
const G_INDIC: u8 = 5;
const G_SEA: u8 = 6;
const G_OTHERL: u8 = 7;
const G_CJK: u8 = 8;
const G_KANA: u8 = 9;
const G_HANGUL: u8 = 10;
const G_SYM: u8 = 11;
const G_EMOJI: u8 = 12;
const G_JOINER: u8 = 13;
const G_ASTRAL: u8 = 14;

/// Number of features.
pub const N_FEATURES: usize = 25 + 2 * GROUPS.len();

/// Feature names, in order: piece features, then `ch_<group>` (code points of the
/// group that are not part of an n-gram token), then `ex_<group>` (their standalone
/// tokens beyond one each).
pub const FEATURE_NAMES: [&str; N_FEATURES] = [
    "ngrams",
    "known",
    "known_bare",
    "unknown_1_3",
    "unknown_4_6",
    "unknown_7_9",
    "unknown_10_13",
    "unknown_14_up",
    "unknown_letters_beyond_14",
    "unknown_prefixed",
    "unknown_punct",
    "unknown_punct_beyond_2",
    "unknown_space",
    "unknown_space_beyond_2",
    "unknown_newlines",
    "unknown_space_switches",
    "unknown_rare_bigrams",
    "digits",
    "digit_groups",
    "controls",
    "non_ascii_words",
    "unknown_punct_switches",
    "unknown_punct_run_tokens",
    "unknown_upper_beyond_1",
    "non_ascii_upper_after_upper",
    "ch_latin",
    "ch_greek",
    "ch_cyrl",
    "ch_armgeo",
    "ch_rtl",
    "ch_indic",
    "ch_sea",
    "ch_otherl",
    "ch_cjk",
    "ch_kana",
    "ch_hangul",
    "ch_sym",
    "ch_emoji",
    "ch_joiner",
    "ch_astral",
    "ex_latin",
    "ex_greek",
    "ex_cyrl",
    "ex_armgeo",
    "ex_rtl",
    "ex_indic",
    "ex_sea",
    "ex_otherl",
    "ex_cjk",
    "ex_kana",
    "ex_hangul",
    "ex_sym",
    "ex_emoji",
    "ex_joiner",
    "ex_astral",
];

const F_NGRAMS: usize = 0;
const F_KNOWN: usize = 1;
const F_KNOWN_BARE: usize = 2;
const F_UNKNOWN_1: usize = 3;
const F_UNKNOWN_X: usize = 8;
const F_UNKNOWN_PREFIXED: usize = 9;
const F_UNKNOWN_PUNCT: usize = 10;
const F_UNKNOWN_PUNCT_X: usize = 11;
const F_UNKNOWN_SPACE: usize = 12;
const F_UNKNOWN_SPACE_X: usize = 13;
const F_UNKNOWN_NEWLINES: usize = 14;
const F_UNKNOWN_SPACE_SWITCHES: usize = 15;
const F_UNKNOWN_RARE_BIGRAMS: usize = 16;
const F_DIGITS: usize = 17;
const F_DIGIT_GROUPS: usize = 18;
const F_CONTROLS: usize = 19;
const F_NA_WORDS: usize = 20;
const F_UNKNOWN_PUNCT_SWITCHES: usize = 21;
const F_UNKNOWN_PUNCT_RUN_TOKENS: usize = 22;
const F_UNKNOWN_UPPER_X: usize = 23;
const F_NA_UPPER_AFTER_UPPER: usize = 24;
const F_CH: usize = 25;
const F_EX: usize = 25 + GROUPS.len();

/// Feature counts of one text for one family.
pub type Features = [u64; N_FEATURES];

/// Bytes of the rare-bigram mask: one bit per ordered pair of ASCII letters (case folded),
/// bit `26 * a + b`.
pub const RARE_BYTES: usize = 85;

/// Entries of a rare-pair table ([`rare_pairs`]): one per pair of 5-bit codes.
pub const RARE_PAIRS: usize = 1024;

/// The rare-bigram mask `bits` ([`RARE_BYTES`]) as a table of 0/1 bytes indexed by the two
/// letters' low five bits, `(a & 31) << 5 | (b & 31)` (`A`/`a` is 1, `Z`/`z` 26): one load
/// per letter pair, where the mask took a multiply, two subtractions and a bit test.
pub const fn rare_pairs(bits: &[u8; RARE_BYTES]) -> [u8; RARE_PAIRS] {
    let mut t = [0u8; RARE_PAIRS];
    let mut a = 0;
    while a < 26 {
        let mut b = 0;
        while b < 26 {
            let k = 26 * a + b;
            t[(a + 1) << 5 | (b + 1)] = bits[k >> 3] >> (k & 7) & 1;
            b += 1;
        }
        a += 1;
    }
    t
}

/// A tokenizer family's vocabulary data.
#[derive(Clone, Copy)]
pub struct Vocab {
    /// Letter pairs that are rare inside tokens (random strings are full of them), as a
    /// [`rare_pairs`] table.
    pub rare: &'static [u8; RARE_PAIRS],
    /// Bloom filter of short tokens, [`BLOOM_BYTES`] long.
    pub bloom: &'static [u8; BLOOM_BYTES],
    /// Standalone cost table, [`TABLE_BYTES`] long, 2 bits per entry (cost - 1).
    pub table: &'static [u8; TABLE_BYTES],
    /// Whether the filter takes its bit positions from the remixed key hash
    /// ([`family_hash`]), so that two families' false positives are independent.
    pub remix: bool,
    /// Whether a run of CJK, kana and symbols goes eight characters at a time on CPUs
    /// with AVX2 (`cjk::blocks`). Measured per vocabulary: for `cl100k` and
    /// `conservative`, whose n-grams start on 2-6% of such characters, Chinese is
    /// 1.4-1.9x and Japanese 1.2x as fast; for Tekken, whose n-grams cover half of
    /// them, 10-20% slower (the scalar loop skips what an n-gram consumes).
    pub cjk_blocks: bool,
    /// Characters per token in a long run of each ASCII character (the tokenizer's own
    /// count of 240 in a row): 4 for `(` in cl100k, 2 in Tekken, 60 for `-` in cl100k.
    pub runs: &'static [u8; 128],
    /// Every BMP code point's entry for the CJK loops ([`char_table`]): its cost, its
    /// n-gram group, and whether it can start or end one of the vocabulary's 2-character
    /// tokens or start a 3-character one.
    pub chars: &'static [u8; 0x10000],
}

/// Bits of a [`char_table`] entry that hold the standalone cost less one (BMP).
pub const CHAR_COST: u8 = 0x03;
/// Bits 2-3 of a [`char_table`] entry: the group of a character the CJK blocks take
/// (CJK 1, kana 2, symbols 3), 0 for other characters and for uppercase ones.
pub const CHAR_GROUP_SHIFT: u8 = 2;
/// Bit of a [`char_table`] entry: the character is the first after the space of a token
/// that is a space and 1-3 CJK, kana or hangul characters.
pub const SPACED_FIRST: u8 = 0x10;
/// Bit of a [`char_table`] entry: the character is the first of a 2-character token.
pub const PAIR_FIRST: u8 = 0x20;
/// Bit of a [`char_table`] entry: the character is the second of a 2-character token.
pub const PAIR_SECOND: u8 = 0x40;
/// Bit of a [`char_table`] entry: the character is the first of a 3-character token.
pub const TRIPLE_FIRST: u8 = 0x80;

/// A vocabulary's characters table (`groups`: `GROUP_TABLE`): one byte per BMP code point holding its standalone
/// cost less one (from the cost table `cost`), its group for the CJK blocks
/// ([`CHAR_GROUP_SHIFT`]), and the flags [`PAIR_FIRST`], [`PAIR_SECOND`],
/// [`TRIPLE_FIRST`] and [`SPACED_FIRST`] from `pairs` (the first characters of the
/// vocabulary's 2-character tokens of n-gram characters, their second characters, the
/// first characters of its 3-character ones, and the first characters after the space of
/// its tokens of a space and CJK, kana or hangul: `pair_chars` in `data/profiles.json`,
/// from `tools/fit_profiles.py`). A pair of characters is looked up in the Bloom filter
/// only when the first has [`PAIR_FIRST`] and the second [`PAIR_SECOND`] (about one pair
/// in 16 of the corpus's CJK text for `conservative`), a space and what follows it only
/// when the character after the space has [`SPACED_FIRST`]. Built at compile time.
pub const fn char_table(
    groups: &[u8; 0x10000],
    cost: &[u8; TABLE_BYTES],
    pairs: [&[u16]; 4],
) -> [u8; 0x10000] {
    let mut t = [0u8; 0x10000];
    let mut cp = 0;
    while cp < 0x10000 {
        let c = (cost[cp >> 2] >> ((cp & 3) * 2)) & 3;
        let e = groups[cp];
        let g = match e {
            G_CJK => 1,
            G_KANA => 2,
            G_SYM => 3,
            _ => 0,
        };
        t[cp] = c | g << CHAR_GROUP_SHIFT;
        cp += 1;
    }
    let flags = [PAIR_FIRST, PAIR_SECOND, TRIPLE_FIRST, SPACED_FIRST];
    let mut k = 0;
    while k < 4 {
        let mut j = 0;
        while j < pairs[k].len() {
            t[pairs[k][j] as usize] |= flags[k];
            j += 1;
        }
        k += 1;
    }
    t
}

/// The key hash a family's filter uses: `h` itself, or, when `remix`, `h` rotated left by
/// 26 bits, so its word comes from bits 22-37 and its bit positions from bits 38-61 of
/// `h` (the plain filter's word comes from bits 48-63, its positions from bits 0-23).
/// The two vocabularies share most short tokens; with the same positions their filters'
/// set bits coincide and so do their false positives (a punctuation run "known" to
/// both): remixed, the two families' filters err independently. (`conservative` has a
/// filter of its own.)
#[inline(always)]
pub fn family_hash(h: u64, remix: bool) -> u64 {
    if remix {
        h.rotate_left(26)
    } else {
        h
    }
}

/// Hash of a key of 1 to 16 bytes: its two little-endian 64-bit halves (zero padded),
/// each xored with a constant (the length into the high half), multiplied as 128-bit
/// numbers and folded, as wyhash's `mum` does: one multiply.
#[inline]
pub fn key_hash(key: &[u8]) -> u64 {
    let mut buf = [0u8; 16];
    buf[..key.len()].copy_from_slice(key);
    let (lo, hi) = halves(&buf, 0, key.len());
    mix(lo, hi, key.len())
}

#[inline(always)]
pub(crate) fn mix(lo: u64, hi: u64, len: usize) -> u64 {
    mum(lo ^ MIX_LO, hi ^ MIX_HI ^ len as u64)
}

/// The constants [`mix`] xors into a key's low and high halves.
const MIX_LO: u64 = 0x9E37_79B9_7F4A_7C15;
const MIX_HI: u64 = 0xD6E8_FEB8_6659_FD93;

/// `a * b` as 128-bit numbers, folded to 64 bits.
#[inline(always)]
fn mum(a: u64, b: u64) -> u64 {
    let r = a as u128 * b as u128;
    (r as u64) ^ ((r >> 64) as u64)
}

/// The key `bytes[s..s + len]` (len 1 to 16) as two little-endian words, zero padded;
/// `bytes` must hold 16 bytes from `s`.
#[inline(always)]
fn halves(bytes: &[u8], s: usize, len: usize) -> (u64, u64) {
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let (lo, hi) = (word(s), word(s + 8));
    let (keep_lo, keep_hi) = KEEP[len];
    (lo & keep_lo, hi & keep_hi)
}

/// Mask keeping the first `n` bytes of a word.
pub(crate) const fn first_bytes(n: usize) -> u64 {
    if n >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * n)) - 1
    }
}

/// What [`hash_in_window`] needs by key length (0 to 16), in one table so that one
/// register holds its address: the masks of [`KEEP`] (rows 0 and 1) and the high half's
/// xor of [`mix`], `MIX_HI ^ len` (row 2).
const KEY_PARTS: [[u64; MAX_KEY + 1]; 4] = {
    let mut t = [[0u64; MAX_KEY + 1]; 4];
    let mut len = 0;
    while len <= MAX_KEY {
        t[0][len] = KEEP[len].0;
        t[1][len] = KEEP[len].1;
        t[2][len] = MIX_HI ^ len as u64;
        t[3][len] = MIX_LO;
        len += 1;
    }
    t
};

/// [`KEY_PARTS`] and [`bit_pairs`] side by side, so that the fast path's word loop
/// reaches both from one register.
struct Tables {
    key_parts: [[u64; MAX_KEY + 1]; 4],
    bit_pairs: [u64; 4096],
}

static TABLES: Tables = Tables {
    key_parts: KEY_PARTS,
    bit_pairs: bit_pairs(),
};

/// Hash of the key `w[p..p + len]` (`len` 1 to 16) as [`key_hash`] computes it, from
/// the 16 bytes at `p`: an 80-byte window holds them for every `p` up to 64 (a
/// `trailing_zeros` of a `u64`), so the loads need no bounds check.
#[inline(always)]
fn hash_in_window(w: &[u8; 80], p: usize, len: usize) -> u64 {
    let word = |at: usize| {
        let mut x = [0u8; 8];
        x.copy_from_slice(&w[at..at + 8]);
        u64::from_le_bytes(x)
    };
    let lo = (word(p) & TABLES.key_parts[0][len]) ^ TABLES.key_parts[3][len];
    let hi = (word(p + 8) & TABLES.key_parts[1][len]) ^ TABLES.key_parts[2][len];
    mum(lo, hi)
}

/// Masks keeping the first `len` bytes of a 16-byte key, by `len` (0 to 16).
static KEEP: [(u64, u64); MAX_KEY + 1] = {
    let mut t = [(0u64, 0u64); MAX_KEY + 1];
    let mut len = 0;
    while len <= MAX_KEY {
        t[len] = (first_bytes(len), first_bytes(len.saturating_sub(8)));
        len += 1;
    }
    t
};

/// The two bits a 12-bit field of a key hash sets in its filter word: bit `x & 63` and
/// bit `x >> 6` (two lookups make a key's four bits in a few instructions).
const fn bit_pairs() -> [u64; 4096] {
    let mut t = [0u64; 4096];
    let mut x = 0;
    while x < 4096 {
        t[x] = 1u64 << (x & 63) | 1u64 << (x >> 6);
        x += 1;
    }
    t
}

impl Vocab {
    /// Whether `key` (1 to 16 bytes) tests positive in the Bloom filter: a register-
    /// blocked filter, 2^16 little-endian 64-bit words, 4 bits per key in one word.
    #[inline]
    pub fn contains(&self, key: &[u8]) -> bool {
        self.contains_hash(key_hash(key))
    }

    /// [`Vocab::contains`] of a key hashed already: the word is the hash's top 16 bits,
    /// the bits its four lowest 6-bit fields; one load, no branch.
    #[inline(always)]
    pub(crate) fn contains_hash(&self, h: u64) -> bool {
        let h = family_hash(h, self.remix);
        let at = (h >> BLOOM_SHIFT) as usize * 8;
        let mut w = [0u8; 8];
        w.copy_from_slice(&self.bloom[at..at + 8]);
        let word = u64::from_le_bytes(w);
        let m = TABLES.bit_pairs[h as usize & 0xFFF] | TABLES.bit_pairs[(h >> 12) as usize & 0xFFF];
        word & m == m
    }

    /// Whether the characters `a` and `b` (code points below 2^16) can be one of the
    /// vocabulary's 2-character tokens: `a` starts one and `b` ends one ([`char_table`]);
    /// the Bloom filter then decides.
    #[inline(always)]
    pub fn may_pair(&self, a: u32, b: u32) -> bool {
        (self.chars[a as usize & 0xFFFF] & PAIR_FIRST != 0)
            & (self.chars[b as usize & 0xFFFF] & PAIR_SECOND != 0)
    }

    /// Whether one of the vocabulary's 3-character tokens can start with `a` (below 2^16).
    #[inline(always)]
    pub fn may_triple(&self, a: u32) -> bool {
        self.chars[a as usize & 0xFFFF] & TRIPLE_FIRST != 0
    }

    /// Whether one of the vocabulary's tokens of a space and CJK, kana or hangul
    /// characters can go on with `a` (below 2^16) after the space.
    #[inline(always)]
    pub fn may_follow_space(&self, a: u32) -> bool {
        self.chars[a as usize & 0xFFFF] & SPACED_FIRST != 0
    }

    /// Tokens of code point `cp` on its own (1 to 4; 4 outside the table).
    #[inline(always)]
    pub fn cost(&self, cp: u32) -> u64 {
        let idx = if cp < 0x10000 {
            cp as usize
        } else if (0x1F000..=0x1FAFF).contains(&cp) {
            0x10000 + (cp - 0x1F000) as usize
        } else {
            return 4;
        };
        ((self.table[idx >> 2] >> ((idx & 3) * 2)) & 3) as u64 + 1
    }
}

/// Script group of a non-ASCII code point.
pub const fn group(cp: u32) -> u8 {
    match cp {
        0x200D | 0x20E3 | 0xFE00..=0xFE0F | 0xE0000..=0xE007F => G_JOINER,
        0x3040..=0x30FF | 0x31F0..=0x31FF | 0xFF66..=0xFF9F => G_KANA,
        0x1100..=0x11FF | 0x3130..=0x318F | 0xA960..=0xA97F | 0xAC00..=0xD7FF => G_HANGUL,
        0x2E80..=0x303F
        | 0x3190..=0x31EF
        | 0x3400..=0x4DBF
        | 0x4E00..=0x9FFF
        | 0xF900..=0xFAFF
        | 0xFE30..=0xFE4F
        | 0xFF00..=0xFFEF
        | 0x20000..=0x3FFFF => G_CJK,
        0x1F000..=0x1FAFF => G_EMOJI,
        0x10000.. => G_ASTRAL,
        0..=0x2FF => {
            if cp >= 0xC0 && cp != 0xD7 && cp != 0xF7 {
                G_LATIN
            } else {
                G_SYM
            }
        }
        0x300..=0x36F => G_JOINER,
        0x370..=0x3FF => G_GREEK,
        0x400..=0x52F => G_CYRL,
        0x530..=0x58F => G_ARMGEO,
        0x590..=0x8FF => G_RTL,
        0x900..=0xDFF => G_INDIC,
        0x10A0..=0x10FF => G_ARMGEO,
        0xE00..=0x10FF => G_SEA,
        0x1780..=0x17FF => G_SEA,
        0x1E00..=0x1EFF => G_LATIN,
        0x1F00..=0x1FFF => G_GREEK,
        0x2000..=0x2BFF => G_SYM,
        0xFB1D..=0xFDFF | 0xFE70..=0xFEFF => G_RTL,
        0xE000..=0xF8FF => G_SYM,
        _ => G_OTHERL,
    }
}

/// Flag of an entry of [`group_table`]: the code point is an uppercase letter
/// (`crate::marks::UPPER`, Unicode category Lu, from `tools/gen_unicode_tables.py`).
const UPPER_FLAG: u8 = 0x80;

/// [`group`] of every BMP code point, with [`UPPER_FLAG`] set on uppercase letters,
/// worked out at compile time: the scanner reads a code point's group and case in one
/// load, and no call pays for building the table (built on first use, it cost the
/// process's first estimate about half a millisecond).
pub(crate) static GROUP_TABLE: [u8; 0x10000] = {
    let mut t = [0u8; 0x10000];
    let mut cp = 0;
    while cp < 0x10000 {
        t[cp] = group(cp as u32);
        cp += 1;
    }
    let mut r = 0;
    while r < crate::marks::UPPER.len() {
        let (lo, hi) = crate::marks::UPPER[r];
        let mut cp = lo;
        while cp <= hi && cp < 0x10000 {
            t[cp as usize] |= UPPER_FLAG;
            cp += 1;
        }
        r += 1;
    }
    t
};

/// [`GROUP_TABLE`].
#[inline(always)]
fn group_table() -> &'static [u8; 0x10000] {
    &GROUP_TABLE
}

/// Group and case of a code point: its [`group_table`] entry in the BMP (group bits and
/// [`UPPER_FLAG`]), its [`group`] elsewhere (no case beyond the BMP).
#[inline(always)]
fn group_of(table: &[u8; 0x10000], cp: u32) -> u8 {
    if cp < 0x10000 {
        table[cp as usize]
    } else {
        group(cp)
    }
}

/// Whether the code point before the non-ASCII one at `i` is an uppercase letter: an
/// ASCII capital, or (the byte before is not ASCII) the code point the scanner read last,
/// whose case is `na_prev_upper`.
#[inline(always)]
fn after_upper(b: &[u8], i: usize, na_prev_upper: bool) -> bool {
    i > 0 && {
        let p = b[i - 1];
        if p < 0x80 {
            p.is_ascii_uppercase()
        } else {
            na_prev_upper
        }
    }
}

#[inline(always)]
fn is_letter_group(g: u8) -> bool {
    g <= G_OTHERL || g == G_HANGUL
}

#[inline(always)]
fn is_cjkish(g: u8) -> bool {
    (G_CJK..=G_HANGUL).contains(&g)
}

/// Groups whose 2- and 3-character tokens the scanner looks up: CJK, kana and hangul
/// words, and symbols (a box-drawing run such as `────────` is one cl100k token, not eight).
#[inline(always)]
fn is_ngram_group(g: u8) -> bool {
    is_cjkish(g) || g == G_SYM
}

// ASCII kinds.
const LO: u8 = 0;
const UP: u8 = 1;
const DG: u8 = 2;
const SP: u8 = 3;
const NL: u8 = 4;
const TB: u8 = 5;
const PU: u8 = 6;
const CT: u8 = 7;
/// A non-ASCII byte (or past the end).
const NA: u8 = 8;

const fn kind_table() -> [u8; 256] {
    let mut t = [NA; 256];
    let mut b = 0;
    while b < 128 {
        let c = b as u8;
        t[b] = if c.is_ascii_lowercase() {
            LO
        } else if c.is_ascii_uppercase() {
            UP
        } else if c.is_ascii_digit() {
            DG
        } else if c == b' ' {
            SP
        } else if c == b'\n' || c == b'\r' {
            NL
        } else if c == b'\t' || c == 0x0b || c == 0x0c {
            TB
        } else if c < 0x20 || c == 0x7f {
            CT
        } else {
            PU
        };
        b += 1;
    }
    t
}

static KIND: [u8; 256] = kind_table();

/// Whether the ASCII fast path is tried at a byte (with nothing pending): a letter,
/// digit, space, line break or punctuation mark.
#[inline(always)]
fn starts_fast_path(x: u8) -> bool {
    let k = KIND[x as usize];
    k <= PU && k != TB
}

#[inline(always)]
fn is_letter(k: u8) -> bool {
    k <= UP
}

#[inline(always)]
fn decode(bytes: &[u8], i: usize) -> (u32, usize) {
    let b = bytes[i] as u32;
    if b < 0xE0 {
        (((b & 0x1F) << 6) | (bytes[i + 1] as u32 & 0x3F), 2)
    } else if b < 0xF0 {
        (
            ((b & 0x0F) << 12) | ((bytes[i + 1] as u32 & 0x3F) << 6) | (bytes[i + 2] as u32 & 0x3F),
            3,
        )
    } else {
        (
            ((b & 0x07) << 18)
                | ((bytes[i + 1] as u32 & 0x3F) << 12)
                | ((bytes[i + 2] as u32 & 0x3F) << 6)
                | (bytes[i + 3] as u32 & 0x3F),
            4,
        )
    }
}

#[inline(always)]
fn unknown_letters<S: Sink>(f: &mut At<'_, S>, rare: &[u8; RARE_PAIRS], seg: &[u8]) {
    let len = seg.len();
    let bucket = match len {
        0..=3 => 0,
        4..=6 => 1,
        7..=9 => 2,
        10..=13 => 3,
        _ => {
            f.add(F_UNKNOWN_X, (len - 14) as u64);
            4
        }
    };
    f.add(F_UNKNOWN_1 + bucket, 1);
    // the segment holds ASCII letters only
    let rare_pairs: u64 = seg
        .windows(2)
        .map(|p| rare[((p[0] & 31) as usize) << 5 | (p[1] & 31) as usize] as u64)
        .sum();
    f.add(F_UNKNOWN_RARE_BIGRAMS, rare_pairs);
    // a segment is its uppercase letters, then its lowercase ones; words in capitals
    // split into more pieces than their lowercase forms
    let upper = seg.iter().take_while(|&&c| c < b'a').count();
    f.add(F_UNKNOWN_UPPER_X, upper.saturating_sub(1) as u64);
}

/// High bit of every byte of a word.
const HIGH: u64 = 0x8080_8080_8080_8080;
/// 0x01 in every byte of a word.
const ONES: u64 = 0x0101_0101_0101_0101;

/// The 8 bytes at `at` as a little-endian word (byte `at` lowest); `at + 8 <= b.len()`.
#[inline(always)]
fn load8(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// SWAR: the high bit of each byte of `x` that lies in `lo..=hi` (ASCII bounds).
/// Clearing the high bits first keeps every per-byte sum below 0x100, so no carry
/// crosses a byte; bytes >= 0x80 are then excluded by `!x`.
#[inline(always)]
fn in_range(x: u64, lo: u8, hi: u8) -> u64 {
    let y = x & !HIGH;
    let ge_lo = y.wrapping_add(ONES * (0x80 - lo as u64));
    let gt_hi = y.wrapping_add(ONES * (0x7f - hi as u64));
    ge_lo & !gt_hi & !x & HIGH
}

/// SWAR: the high bit of each byte of `x` that is a space, tab, line feed, carriage
/// return, vertical tab or form feed (the scanner's whitespace kinds).
#[inline(always)]
fn space_mask(x: u64) -> u64 {
    // 0x09..=0x0d and 0x20; zero bytes of x ^ 0x20 found with the exact SWAR zero test
    let y = x ^ (ONES * 0x20);
    let low7 = y & !HIGH;
    let zero = !((low7.wrapping_add(!HIGH)) | y) & HIGH;
    in_range(x, 0x09, 0x0d) | zero
}

/// End of the run of bytes from `j` whose SWAR mask `mask` is set and whose kind is `k`
/// (the two must agree on every byte): 8 bytes at a time, then byte by byte.
#[inline(always)]
fn run_end(b: &[u8], mut j: usize, mask: impl Fn(u64) -> u64, k: u8) -> usize {
    while j + 8 <= b.len() {
        let stop = !mask(load8(b, j)) & HIGH;
        if stop != 0 {
            return j + (stop.trailing_zeros() / 8) as usize;
        }
        j += 8;
    }
    while j < b.len() && KIND[b[j] as usize] == k {
        j += 1;
    }
    j
}

/// End of the letter segment that starts at `s`: uppercase letters, then lowercase
/// ones. One 8-byte word settles it when the segment ends inside it.
#[inline(always)]
fn segment_end(b: &[u8], s: usize) -> usize {
    if s + 8 <= b.len() {
        let x = load8(b, s);
        if b[s] >= b'a' {
            // most segments start lowercase: no uppercase prefix to skip
            let stop = !in_range(x, b'a', b'z') & HIGH;
            if stop != 0 {
                return s + (stop.trailing_zeros() / 8) as usize;
            }
            return run_end(b, s + 8, |x| in_range(x, b'a', b'z'), LO);
        }
        let not_upper = !in_range(x, b'A', b'Z') & HIGH;
        // every bit below the first byte that is not uppercase (all of them if none is)
        let prefix = not_upper.wrapping_sub(1) & !not_upper;
        let stop = !in_range(x, b'a', b'z') & HIGH & !prefix;
        if stop != 0 {
            return s + (stop.trailing_zeros() / 8) as usize;
        }
    }
    let e = run_end(b, s, |x| in_range(x, b'A', b'Z'), UP);
    run_end(b, e, |x| in_range(x, b'a', b'z'), LO)
}

/// Hash of `bytes[s..e]` (1 to 16 bytes) as [`key_hash`] computes it, loading the key in
/// place when 16 bytes are readable from `s`.
#[inline(always)]
fn hash_at(bytes: &[u8], s: usize, e: usize) -> u64 {
    let len = e - s;
    if s + 16 <= bytes.len() {
        let (lo, hi) = halves(bytes, s, len);
        mix(lo, hi, len)
    } else {
        key_hash(&bytes[s..e])
    }
}

/// [`Vocab::known`] of `bytes[s..e]` for every family, hashing the key once.
#[inline(always)]
fn known_all<const K: usize>(vocabs: &[Vocab; K], bytes: &[u8], s: usize, e: usize) -> [bool; K] {
    let len = e - s;
    if len == 1 {
        return [true; K];
    }
    if len > MAX_KEY {
        return [false; K];
    }
    let h = hash_at(bytes, s, e);
    let mut hit = [false; K];
    for (x, v) in hit.iter_mut().zip(vocabs) {
        *x = v.contains_hash(h);
    }
    hit
}

/// Features of the letter segment `b[s..e]`, led by the byte at `lead` when given; each
/// key is hashed once for all families, the bare key only when some family needs it.
/// `missing`: the caller found already that the segment's key (the led key when `lead`
/// is given, else the bare one) is no family's (the fast path's probe, with one family),
/// so it is not probed again.
#[inline(always)]
fn letter_segment<S: Sink, const K: usize>(
    out: &mut S,
    vocabs: &[Vocab; K],
    b: &[u8],
    lead: Option<usize>,
    (s, e): (usize, usize),
    missing: bool,
) {
    match lead {
        Some(p) => {
            let led = if missing {
                [false; K]
            } else {
                known_all(vocabs, b, p, e)
            };
            if led.iter().all(|&x| x) {
                for k in 0..K {
                    let f = &mut At(&mut *out, k);
                    f.add(F_KNOWN, 1);
                }
                return;
            }
            let bare = known_all(vocabs, b, s, e);
            for (k, v) in vocabs.iter().enumerate() {
                let f = &mut At(&mut *out, k);
                if led[k] {
                    f.add(F_KNOWN, 1);
                } else if bare[k] {
                    f.add(F_KNOWN_BARE, 1);
                } else {
                    unknown_letters(f, v.rare, &b[s..e]);
                    f.add(F_UNKNOWN_PREFIXED, 1);
                }
            }
        }
        None => {
            let bare = if missing {
                [false; K]
            } else {
                known_all(vocabs, b, s, e)
            };
            for (k, v) in vocabs.iter().enumerate() {
                let f = &mut At(&mut *out, k);
                if bare[k] {
                    f.add(F_KNOWN, 1);
                } else {
                    unknown_letters(f, v.rare, &b[s..e]);
                }
            }
        }
    }
}

/// Each run of one punctuation character (2 or more) in `b[s..e]`, in tokens: its length
/// over the family's characters per token for that character ([`Vocab::runs`]), rounded
/// up. Tokenizers merge `(` 2-4 at a time but `-` dozens at a time.
#[inline(never)]
fn run_tokens(v: &Vocab, b: &[u8], s: usize, e: usize) -> u64 {
    let mut total = 0;
    let mut q = s;
    while q < e {
        let mut r = q + 1;
        while r < e && b[r] == b[q] {
            r += 1;
        }
        if r - q >= 2 && KIND[b[q] as usize] == PU {
            total += (r - q).div_ceil(v.runs[b[q] as usize].max(1) as usize) as u64;
        }
        q = r;
    }
    total
}

/// Features of the punctuation piece `b[s..e]`: a run of punctuation, led by a space
/// or not, with the line breaks that follow it.
#[inline(always)]
fn punct_piece<S: Sink, const K: usize>(
    out: &mut S,
    vocabs: &[Vocab; K],
    b: &[u8],
    s: usize,
    e: usize,
) {
    let hit = known_all(vocabs, b, s, e);
    if hit.iter().all(|&x| x) {
        for k in 0..K {
            out.add(k, F_KNOWN, 1);
        }
        return;
    }
    // where the line breaks the piece takes start, and whether a carriage return is among
    // them: a family that has no token for the piece then counts the punctuation, and the
    // line breaks as whitespace (Tekken spends a token on "\r" and one on "\n" after ",":
    // ",\r\n" is 3 tokens there, which the piece's weights, fitted on "\n" text, priced
    // at about 1.9)
    let mut q = e;
    while q > s && KIND[b[q - 1] as usize] == NL {
        q -= 1;
    }
    let cr = b[q..e].contains(&b'\r');
    let mut split = [false; K];
    for (k, known) in hit.into_iter().enumerate() {
        let f = &mut At(&mut *out, k);
        if known {
            f.add(F_KNOWN, 1);
        } else if cr {
            split[k] = true;
        } else {
            unknown_punct(f, &vocabs[k], b, s, e);
        }
    }
    if split.contains(&true) {
        let hit = known_all(vocabs, b, s, q);
        for (k, known) in hit.into_iter().enumerate().filter(|&(k, _)| split[k]) {
            let f = &mut At(&mut *out, k);
            if known {
                f.add(F_KNOWN, 1);
            } else {
                unknown_punct(f, &vocabs[k], b, s, q);
            }
        }
        space_piece_for(out, vocabs, b, q, e, split);
    }
}

/// The features of the punctuation piece `b[s..e]` that family `v` has no token for.
#[inline(always)]
fn unknown_punct<S: Sink>(f: &mut At<'_, S>, v: &Vocab, b: &[u8], s: usize, e: usize) {
    f.add(F_UNKNOWN_PUNCT, 1);
    f.add(F_UNKNOWN_PUNCT_X, (e - s).saturating_sub(2) as u64);
    // "()()()" is a token per character, "======" merges; the first two switches are in
    // the piece's weight ("),", ");")
    let sw = switches(&b[s..e]).saturating_sub(3);
    f.add(F_UNKNOWN_PUNCT_SWITCHES, sw);
    f.add(F_UNKNOWN_PUNCT_RUN_TOKENS, run_tokens(v, b, s, e));
}

/// Adjacent bytes of `piece` that differ (whitespace and punctuation pieces).
#[inline]
fn switches(piece: &[u8]) -> u64 {
    piece.windows(2).filter(|p| p[0] != p[1]).count() as u64
}

/// Features of the whitespace piece `b[s..e]` (empty: nothing).
#[inline(always)]
fn space_piece<S: Sink, const K: usize>(
    out: &mut S,
    vocabs: &[Vocab; K],
    b: &[u8],
    s: usize,
    e: usize,
) {
    space_piece_for(out, vocabs, b, s, e, [true; K]);
}

/// [`space_piece`] for the families whose flag in `only` is set.
#[inline(always)]
fn space_piece_for<S: Sink, const K: usize>(
    out: &mut S,
    vocabs: &[Vocab; K],
    b: &[u8],
    s: usize,
    e: usize,
    only: [bool; K],
) {
    if e <= s || !only.contains(&true) {
        return;
    }
    let hit = known_all(vocabs, b, s, e);
    for (k, (known, on)) in hit.into_iter().zip(only).enumerate() {
        if !on {
            continue;
        }
        let f = &mut At(&mut *out, k);
        if known {
            f.add(F_KNOWN, 1);
        } else {
            f.add(F_UNKNOWN_SPACE, 1);
            f.add(F_UNKNOWN_SPACE_X, (e - s).saturating_sub(2) as u64);
            f.add(F_UNKNOWN_SPACE_SWITCHES, switches(&b[s..e]));
            f.add(
                F_UNKNOWN_NEWLINES,
                b[s..e]
                    .iter()
                    .filter(|&&c| c == b'\n' || c == b'\r')
                    .count() as u64,
            );
        }
    }
}

/// Where the scanner reads its vocabularies: an array of them, or a unit type that
/// names built-in static data, so that the compiler sees each family's filter address and
/// settings as constants in the scanner's loop.
pub trait Vocabs<const K: usize> {
    /// The vocabularies, one per family.
    fn vocabs(&self) -> &[Vocab; K];
}

impl<const K: usize> Vocabs<K> for [Vocab; K] {
    #[inline(always)]
    fn vocabs(&self) -> &[Vocab; K] {
        self
    }
}

/// Where the scanner puts what it counts, for every family at once: `add(k, f, n)` adds
/// `n` to feature `f` (an index into [`FEATURE_NAMES`]) of the `k`-th vocabulary.
/// `[Features; K]` keeps the counts; a sink that keeps only weighted sums
/// (`crate::estimate`) spares the per-call feature array and dot product.
pub trait Sink {
    /// Add `n` counts of feature `f` for the `k`-th vocabulary.
    fn add(&mut self, k: usize, f: usize, n: u64);
}

impl<const K: usize> Sink for [Features; K] {
    #[inline(always)]
    fn add(&mut self, k: usize, f: usize, n: u64) {
        self[k][f] += n;
    }
}

impl Sink for Features {
    #[inline(always)]
    fn add(&mut self, _: usize, f: usize, n: u64) {
        self[f] += n;
    }
}

/// One family's view of a [`Sink`].
struct At<'a, S: Sink>(&'a mut S, usize);

impl<S: Sink> At<'_, S> {
    #[inline(always)]
    fn add(&mut self, f: usize, n: u64) {
        self.0.add(self.1, f, n);
    }
}

/// What a non-ASCII character whose group table entry is `entry` counts for its word
/// and its case, for every family: a word start when it is a letter and the character
/// before was not (`letter`), a capital run when it is an uppercase letter and the one
/// before was too (`upper`). Both are then set for this character; returns its group.
#[inline(always)]
fn word_and_case<S: Sink, const K: usize>(
    out: &mut S,
    entry: u8,
    letter: &mut bool,
    upper: &mut bool,
) -> u8 {
    let g = entry & !UPPER_FLAG;
    let up = entry & UPPER_FLAG != 0;
    if up && *upper {
        for k in 0..K {
            out.add(k, F_NA_UPPER_AFTER_UPPER, 1);
        }
    }
    *upper = up;
    let isl = is_letter_group(g);
    if isl && !*letter {
        for k in 0..K {
            out.add(k, F_NA_WORDS, 1);
        }
    }
    *letter = isl;
    g
}

/// The non-ASCII code point `cp` of group `g` counted on its own by family `k`
/// (vocabulary `v`): one character of its group, and its tokens beyond one.
#[inline(always)]
fn standalone<S: Sink>(out: &mut S, k: usize, v: &Vocab, g: u8, cp: u32) {
    out.add(k, F_CH + g as usize, 1);
    out.add(k, F_EX + g as usize, v.cost(cp) - 1);
}

/// What the scanner remembers of the non-ASCII code point it read last.
#[derive(Default)]
struct NaPrev {
    /// It was a letter and no ASCII byte came since (the next letter is not a word start).
    letter: bool,
    /// It was an uppercase letter; read only when the byte before the next non-ASCII
    /// code point is not ASCII, i.e. when that code point is the next one ([`after_upper`]).
    upper: bool,
}

/// Features of the run of 3-byte characters (U+0800..U+FFFF) that starts at `i`; returns
/// its end. Each character is decoded once; a CJK, kana, hangul or symbol character followed by
/// another tries the family's 2-character token (hashed once for all families), then the
/// 3-character one, greedily; a family inside an n-gram skips the characters it covers
/// (`consumed`). Every other character counts its group and standalone cost.
#[inline(never)]
fn three_byte_run<S: Sink + Copy, V: Vocabs<K>, const K: usize>(
    sink: &mut S,
    families: &V,
    groups: &[u8; 0x10000],
    b: &[u8],
    mut i: usize,
    consumed: &mut [usize; K],
    na_prev: &mut NaPrev,
) -> usize {
    // counted in a copy the compiler can keep in registers (the caller's is in memory,
    // and each add to it would wait for the last one's store)
    let mut local = *sink;
    // one family on a CPU with AVX2: a run that opens with CJK, kana or symbols goes
    // eight characters at a time as far as they go on ([`cjk_start`]); the loop below
    // takes the rest, and hands back every [`RETRY`] characters, at one of those, for
    // the blocks to try again: a run they declined at its start (a repeated character
    // there, as in 谢谢) or that they left (a character of another group) is not left
    // to the scalar loop to its end
    #[cfg(target_arch = "x86_64")]
    let blocky = K == 1 && families.vocabs()[0].cjk_blocks && words::Simd::for_scan().has_avx2();
    #[cfg(not(target_arch = "x86_64"))]
    let blocky = false;
    // characters the scalar loop counts before the next try: [`RETRY`] after a try that
    // took something, doubling after each later one that did not (box drawing, declined
    // every time); a declined try at the run's start leaves it at RETRY
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut wait = RETRY / 2;
    loop {
        #[cfg(target_arch = "x86_64")]
        if blocky {
            let (counted, j) = cjk_start(
                local,
                &families.vocabs()[0],
                groups,
                b,
                i,
                &mut consumed[0],
                na_prev,
            );
            local = counted;
            if j > i {
                i = j;
                wait = RETRY;
                if b[i] & 0xF0 != 0xE0 {
                    // the run ends here (the main loop reads on, a space between 3-byte
                    // characters included)
                    *sink = local;
                    return i;
                }
            } else {
                wait = (2 * wait).min(MAX_RETRY);
            }
        }
        let (end, more) = three_byte_run_in(
            &mut local,
            families.vocabs(),
            groups,
            b,
            i,
            consumed,
            na_prev,
            if blocky { wait } else { 0 },
        );
        if !more {
            *sink = local;
            return end;
        }
        i = end;
    }
}

/// Where the next 3-byte character starts when the bytes from `at` are a gap inside a run
/// of them: one space, or a punctuation mark and a space (`. `, `, ` between Korean or
/// Chinese words); `None` otherwise, or when fewer than 16 bytes are readable from it.
#[inline(always)]
fn gap_end(b: &[u8], at: usize) -> Option<usize> {
    let lead = |q: usize| q < b.len() && b[q] & 0xF0 == 0xE0;
    let j = if at < b.len() && b[at] == b' ' && lead(at + 1) {
        at + 1
    } else if at + 1 < b.len() && KIND[b[at] as usize] == PU && b[at + 1] == b' ' && lead(at + 2) {
        at + 2
    } else {
        return None;
    };
    (j + 16 <= b.len()).then_some(j)
}

/// Count the gap `b[at..j]` ([`gap_end`]) for every family, as the main loop counts it:
/// a punctuation mark is a piece (a token); the space is one too, or, where the family
/// has it, one n-gram with the 1-3 characters after it (`spaced_ngrams`), which its
/// n-gram end `consumed` then covers.
#[inline(always)]
fn count_gap<S: Sink, const K: usize>(
    out: &mut S,
    vocabs: &[Vocab; K],
    groups: &[u8; 0x10000],
    b: &[u8],
    (at, j): (usize, usize),
    consumed: &mut [usize; K],
) {
    if j - at == 2 {
        for k in 0..K {
            out.add(k, F_KNOWN, 1);
        }
    }
    for (k, m) in spaced_ngrams(vocabs, groups, b, j).into_iter().enumerate() {
        if m > 0 {
            out.add(k, F_NGRAMS, 1);
            consumed[k] = j + 3 * m;
        } else {
            out.add(k, F_KNOWN, 1);
        }
    }
}

/// Whether the scalar loop of [`three_byte_run`] hands the run back to its caller, for the
/// blocks to try, at the character whose group table entry is `entry`, right after a gap
/// (a space, or a punctuation mark and a space): a CJK, kana or symbol character, and the
/// blocks are in use (`retry` above 0). Then `na_prev` is set for the byte before it, a
/// space: neither a letter nor uppercase.
#[inline(always)]
fn back_to_blocks(retry: u32, entry: u8, na_prev: &mut NaPrev) -> bool {
    let back = retry > 0 && matches!(entry & !UPPER_FLAG, G_CJK | G_KANA | G_SYM);
    if back {
        na_prev.letter = false;
        na_prev.upper = false;
    }
    back
}

/// Characters the scalar loop of [`three_byte_run`] counts before the blocks try again (at
/// a CJK, kana or symbol character), after a try that took something. A try that
/// declines costs about as much as a character or two, so the wait doubles after each,
/// up to [`MAX_RETRY`].
const RETRY: u32 = 16;

/// The longest wait between tries, in characters.
const MAX_RETRY: u32 = 1024;

/// The start of [`three_byte_run`] for one family (`v`, whose n-gram end is `consumed`)
/// on a CPU with AVX2: the run at `i` block by block ([`cjk::blocks`]) when it opens with CJK, kana or symbols and looks
/// worth it ([`cjk::worth_blocks`]). Returns the sink and where the blocks stopped (`i`
/// when they took nothing). Out of line, so that the scalar loop after it is compiled as
/// it was without it (Korean, which never takes the blocks, measured 5% slower inline).
#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn cjk_start<S: Sink + Copy>(
    local: S,
    v: &Vocab,
    groups: &[u8; 0x10000],
    b: &[u8],
    i: usize,
    consumed: &mut usize,
    na_prev: &mut NaPrev,
) -> (S, usize) {
    if i + cjk::BLOCK_NEED > b.len()
        || !matches!(groups[decode3(b, i) as usize], G_CJK | G_KANA | G_SYM)
        || !cjk::worth_blocks(b, i)
        || !words::Simd::for_scan().has_avx2()
    {
        return (local, i);
    }
    // SAFETY: `Simd::for_scan` found AVX2, BMI1, BMI2, LZCNT and POPCNT on this CPU.
    let (counted, j, c) = unsafe { cjk::blocks(local, v, groups, b, i, *consumed) };
    *consumed = c;
    if j > i {
        // the blocks' characters are neither letters nor uppercase
        na_prev.letter = false;
        na_prev.upper = false;
    }
    (counted, j)
}

/// [`three_byte_run`] into `out`: the run's end, and `false`; or, with `retry` above 0,
/// where it stopped for the blocks to try again (`retry` characters in or more, at a
/// CJK, kana or symbol character, with `na_prev` saved for the character before it), and
/// `true`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn three_byte_run_in<S: Sink, const K: usize>(
    out: &mut S,
    vocabs: &[Vocab; K],
    groups: &[u8; 0x10000],
    b: &[u8],
    mut i: usize,
    consumed: &mut [usize; K],
    na_prev: &mut NaPrev,
    retry: u32,
) -> (usize, bool) {
    let n = b.len();
    let mut cp = decode3(b, i);
    let mut entry = groups[cp as usize];
    let mut prev_upper = after_upper(b, i, na_prev.upper);
    // While 16 bytes are readable from `i`, the character's next 8 bytes come in one load:
    // the next character is decoded from it, and the 2- and 3-character keys are hashed
    // from it in place ([`hash_at`]'s words), with no bounds checks. The rules are the
    // loop's below, which finishes the run.
    let mut letter = na_prev.letter;
    // where the next stop for the blocks may be (none when `retry` is 0): a compare of
    // `i`, not a count of its own (a counter cost the bench's mixed text 2-3%)
    let wait = 3 * retry as usize;
    let mut stop = if retry == 0 { usize::MAX } else { i + wait };
    while i + 16 <= n {
        if K == 1 && entry == G_HANGUL {
            // words of hangul syllables, for one family: the loop below, with the group
            // known (its weights are constants), the n-gram end in a register, and no
            // stop for the blocks (they never take hangul)
            let v = &vocabs[0];
            // the character's entry of the characters table: its cost and pair flags
            let mut c = v.chars[cp as usize & 0xFFFF];
            let mut cons = consumed[0];
            // syllables read alone and their tokens beyond one, added to `out` on the way
            // out (one add each, not two per syllable)
            let (mut alone, mut extra) = (0u64, 0u64);
            // the last start with 16 bytes readable (`n` is 16 or more here); written
            // as a checked subtraction, not `saturating_sub` or `n - 16`: the same value,
            // but the loop compiled from this form ran 1-6% fewer instructions and 5%
            // faster on Korean text (the other forms kept fewer of its values in
            // registers)
            #[allow(clippy::manual_saturating_arithmetic)]
            let last = n.checked_sub(16).unwrap_or(0);
            'words: while entry == G_HANGUL && i <= last {
                // a word's first syllable: a word start after no letter
                if !letter {
                    out.add(0, F_NA_WORDS, 1);
                }
                letter = true;
                prev_upper = false;
                // its syllables followed by another 3-byte character
                let w = loop {
                    let w = load8(b, i);
                    if (w >> 24) as u8 & 0xF0 != 0xE0 {
                        break w;
                    }
                    let cp1 = (((w >> 24) as u32 & 0x0F) << 12)
                        | (((w >> 32) as u32 & 0x3F) << 6)
                        | ((w >> 40) as u32 & 0x3F);
                    let c1 = v.chars[cp1 as usize];
                    if i < cons {
                        // inside an n-gram: counted with it
                    } else if c & PAIR_FIRST != 0
                        && c1 & PAIR_SECOND != 0
                        && v.contains_hash(mix(w & first_bytes(6), 0, 6))
                    {
                        // (a character with PAIR_SECOND is of an n-gram group)
                        let m = ngram_chars(v, groups, b, i, w, c & TRIPLE_FIRST != 0);
                        out.add(0, F_NGRAMS, 1);
                        cons = i + 3 * m;
                    } else {
                        // `standalone`, the cost from the entry (hangul is in the BMP)
                        alone += 1;
                        extra += (c & CHAR_COST) as u64;
                    }
                    i += 3;
                    cp = cp1;
                    c = c1;
                    // a hangul syllable (U+AC00..=U+D7A3) goes on here without the group
                    // table; any other character goes round the outer loop (hangul jamo
                    // back into this one, the rest to the loop below)
                    if cp.wrapping_sub(0xAC00) > 0xD7A3 - 0xAC00 || i > last {
                        entry = groups[cp as usize];
                        break 'words;
                    }
                };
                // the word's last syllable, then a gap (a space, or a mark and a space)
                // and another 3-byte character: the syllable and the gap are counted
                // here, as the loop below and the main loop count them ([`gap_end`],
                // [`count_gap`]), from the bytes of `w` (the next word is hangul, most
                // often, and goes on in this loop)
                let gap = (w >> 24) as u8;
                let j = if gap == b' ' && (w >> 32) as u8 & 0xF0 == 0xE0 {
                    i + 4
                } else if KIND[gap as usize] == PU
                    && (w >> 32) as u8 == b' '
                    && (w >> 40) as u8 & 0xF0 == 0xE0
                {
                    i + 5
                } else {
                    break;
                };
                if j > last {
                    break;
                }
                if i >= cons {
                    alone += 1;
                    extra += (c & CHAR_COST) as u64;
                }
                if j - i == 5 {
                    // the mark: a piece of one byte, a token
                    out.add(0, F_KNOWN, 1);
                }
                // the space, the next character, the one after it and the third's lead
                let x = load8(b, j - 1);
                cp = decode3_word(x >> 8);
                entry = groups[cp as usize];
                c = v.chars[cp as usize];
                let m = spaced_one(v, groups, b, j, x, entry, c);
                if m > 0 {
                    out.add(0, F_NGRAMS, 1);
                    cons = j + 3 * m;
                } else {
                    out.add(0, F_KNOWN, 1);
                }
                letter = false;
                i = j;
                if entry != G_HANGUL && back_to_blocks(retry, entry, na_prev) {
                    consumed[0] = cons;
                    out.add(0, F_CH + G_HANGUL as usize, alone);
                    out.add(0, F_EX + G_HANGUL as usize, extra);
                    return (i, true);
                }
            }
            consumed[0] = cons;
            out.add(0, F_CH + G_HANGUL as usize, alone);
            out.add(0, F_EX + G_HANGUL as usize, extra);
            if i + 16 > n {
                break;
            }
        }
        let w = load8(b, i);
        let g = word_and_case::<_, K>(out, entry, &mut letter, &mut prev_upper);
        let more = (w >> 24) as u8 & 0xF0 == 0xE0;
        let cp1 = (((w >> 24) as u32 & 0x0F) << 12)
            | (((w >> 32) as u32 & 0x3F) << 6)
            | ((w >> 40) as u32 & 0x3F);
        let entry1 = groups[cp1 as usize];
        let pair = more && is_ngram_group(g) && is_ngram_group(entry1 & !UPPER_FLAG);
        for k in 0..K {
            if i < consumed[k] {
                continue;
            }
            let v = &vocabs[k];
            // one branch on the whole test: where the characters often can pair (Tekken's
            // n-grams cover half of CJK text) a branch on the flags alone goes as
            // unpredictably as the probe's
            if pair & v.may_pair(cp, cp1) & v.contains_hash(mix(w & first_bytes(6), 0, 6)) {
                let m = ngram_chars(v, groups, b, i, w, v.may_triple(cp));
                out.add(k, F_NGRAMS, 1);
                consumed[k] = i + 3 * m;
                continue;
            }
            standalone(out, k, v, g, cp);
        }
        i += 3;
        if !more {
            // a gap (one space, or a punctuation mark and a space) and another 3-byte
            // character (words of Korean, CJK text with spaces, `. ` in Korean): what the
            // main loop does for the gap, here, and the run goes on (the call per word
            // cost Korean text about a third)
            if let Some(j) = gap_end(b, i) {
                count_gap(out, vocabs, groups, b, (i, j), consumed);
                letter = false;
                prev_upper = false;
                i = j;
                cp = decode3(b, i);
                entry = groups[cp as usize];
                if back_to_blocks(retry, entry, na_prev) {
                    return (i, true);
                }
                continue;
            }
            na_prev.letter = letter;
            na_prev.upper = prev_upper;
            return (i, false);
        }
        cp = cp1;
        entry = entry1;
        if i >= stop {
            if matches!(entry & !UPPER_FLAG, G_CJK | G_KANA | G_SYM) {
                // the character before `i` is a 3-byte one: `after_upper` reads its case
                na_prev.letter = letter;
                na_prev.upper = prev_upper;
                return (i, true);
            }
            // hangul, say: look again a wait later
            stop = i + wait;
        }
    }
    na_prev.letter = letter;
    loop {
        let g = word_and_case::<_, K>(out, entry, &mut na_prev.letter, &mut prev_upper);
        let more = i + 6 <= n && (0xE0..0xF0).contains(&b[i + 3]);
        let (cp1, entry1) = if more {
            let c = decode3(b, i + 3);
            (c, groups[c as usize])
        } else {
            (0, G_SYM)
        };
        let g1 = entry1 & !UPPER_FLAG;
        let pair = more && is_ngram_group(g) && is_ngram_group(g1);
        let h2 = if pair { hash_at(b, i, i + 6) } else { 0 };
        // the 3-character key, worked out once when a family has the pair: None before
        // that, then Some(None) when the third character is not CJK-ish
        let mut h3: Option<Option<u64>> = None;
        for k in 0..K {
            if i < consumed[k] {
                continue;
            }
            let v = &vocabs[k];
            if pair && v.may_pair(cp, cp1) && v.contains_hash(h2) {
                let tri = *h3.get_or_insert_with(|| {
                    let at = i + 6;
                    let third = at + 3 <= n
                        && (0xE0..0xF0).contains(&b[at])
                        && is_ngram_group(groups[decode3(b, at) as usize] & !UPPER_FLAG);
                    third.then(|| hash_at(b, i, i + 9))
                });
                let m = match tri {
                    Some(h) if v.may_triple(cp) && v.contains_hash(h) => 3,
                    _ => 2,
                };
                out.add(k, F_NGRAMS, 1);
                consumed[k] = i + 3 * m;
                continue;
            }
            standalone(out, k, v, g, cp);
        }
        i += 3;
        if !more {
            na_prev.upper = prev_upper;
            return (i, false);
        }
        cp = cp1;
        entry = entry1;
    }
}

/// Features of the run of 2-byte characters (U+0080..U+07FF: Latin letters with
/// diacritics, Greek, Cyrillic, Armenian, Hebrew, Arabic ...) that starts at `i`, single
/// spaces between them included; returns its end. None of them is part of an n-gram:
/// each counts its group and standalone cost, a letter after no letter a word start, an
/// uppercase letter after one a capital run, as the main loop counts a 2-byte character;
/// a space before another 2-byte character is a token of its own there, as here.
#[inline(never)]
fn two_byte_run<S: Sink + Copy, V: Vocabs<K>, const K: usize>(
    sink: &mut S,
    families: &V,
    groups: &[u8; 0x10000],
    b: &[u8],
    mut i: usize,
    na_prev: &mut NaPrev,
) -> usize {
    let vocabs = families.vocabs();
    // counted in a copy held in registers, as in `three_byte_run`
    let mut local = *sink;
    let out = &mut local;
    let n = b.len();
    let mut prev_upper = after_upper(b, i, na_prev.upper);
    let mut letter = na_prev.letter;
    loop {
        // valid UTF-8: a 2-byte lead is followed by its continuation byte
        let cp = ((b[i] as u32 & 0x1F) << 6) | (b[i + 1] as u32 & 0x3F);
        let entry = groups[cp as usize];
        let g = word_and_case::<_, K>(out, entry, &mut letter, &mut prev_upper);
        for (k, v) in vocabs.iter().enumerate() {
            standalone(out, k, v, g, cp);
        }
        i += 2;
        if i < n && (0xC0..0xE0).contains(&b[i]) {
            continue;
        }
        if i + 1 < n && b[i] == b' ' && (0xC0..0xE0).contains(&b[i + 1]) {
            // the main loop's whitespace arm for one space before a non-ASCII character
            // that starts no n-gram: a piece of one byte, a token
            for k in 0..K {
                out.add(k, F_KNOWN, 1);
            }
            letter = false;
            prev_upper = false;
            i += 1;
            continue;
        }
        break;
    }
    na_prev.letter = letter;
    na_prev.upper = prev_upper;
    *sink = local;
    i
}

/// Characters (2 or 3) of the n-gram at `i`, whose first two characters are a token of
/// `v`: 3 when a 3-character token can start with the first (`triple`,
/// [`Vocab::may_triple`]), the third is a 3-byte character of an n-gram group and the
/// three are a token too. `w` holds the 8 bytes from `i`, and 16 are readable from `i`.
#[inline(always)]
fn ngram_chars(
    v: &Vocab,
    groups: &[u8; 0x10000],
    b: &[u8],
    i: usize,
    w: u64,
    triple: bool,
) -> usize {
    let third = triple
        && (w >> 48) as u8 & 0xF0 == 0xE0
        && is_ngram_group(groups[decode3(b, i + 6) as usize] & !UPPER_FLAG);
    if third && v.contains_hash(mix(w, b[i + 8] as u64, 9)) {
        3
    } else {
        2
    }
}

/// The code point of the 3-byte UTF-8 sequence at `i`.
#[inline(always)]
fn decode3(b: &[u8], i: usize) -> u32 {
    ((b[i] as u32 & 0x0F) << 12) | ((b[i + 1] as u32 & 0x3F) << 6) | (b[i + 2] as u32 & 0x3F)
}

/// Whether a 3-byte CJK, kana or hangul character starts at `i`.
#[inline(always)]
fn cjk_char(groups: &[u8; 0x10000], bytes: &[u8], i: usize) -> bool {
    i + 3 <= bytes.len()
        && (0xE0..0xF0).contains(&bytes[i])
        && is_cjkish(groups[decode3(bytes, i) as usize] & !UPPER_FLAG)
}

/// The code point of the 3-byte UTF-8 sequence in the low three bytes of `x` (lead byte
/// lowest).
#[inline(always)]
fn decode3_word(x: u64) -> u32 {
    ((x as u32 & 0x0F) << 12) | (((x >> 8) as u32 & 0x3F) << 6) | ((x >> 16) as u32 & 0x3F)
}

/// Whether the 3-byte character in the low three bytes of `y` (lead byte lowest; any bytes
/// at all, the table read stays in bounds) is a CJK, kana or hangul one.
#[inline(always)]
fn cjkish_word(groups: &[u8; 0x10000], y: u64) -> bool {
    y as u8 & 0xF0 == 0xE0 && is_cjkish(groups[decode3_word(y) as usize] & !UPPER_FLAG)
}

/// [`spaced_ngrams`] for one family `v` with 16 bytes readable from the space at `j - 1`,
/// the 3-byte character at `j` decoded already: `x` holds the 8 bytes from the space,
/// `entry` and `chars` are the character's entries of the group table and of `v`'s
/// characters table. The keys of 4 and 7 bytes come from `x`, as `hash_at` would hash
/// them.
#[inline(always)]
fn spaced_one(
    v: &Vocab,
    groups: &[u8; 0x10000],
    b: &[u8],
    j: usize,
    x: u64,
    entry: u8,
    chars: u8,
) -> usize {
    if !is_cjkish(entry & !UPPER_FLAG) || chars & SPACED_FIRST == 0 {
        return 0;
    }
    if cjkish_word(groups, x >> 32) && v.contains_hash(mix(x & first_bytes(7), 0, 7)) {
        let third = cjkish_word(groups, load8(b, j + 6));
        let hi = b[j + 7] as u64 | (b[j + 8] as u64) << 8;
        if third && v.contains_hash(mix(x, hi, 10)) {
            3
        } else {
            2
        }
    } else if v.contains_hash(mix(x & first_bytes(4), 0, 4)) {
        1
    } else {
        0
    }
}

/// For each family, how many CJK, kana or hangul characters (1 to 3) after the space at
/// `j - 1` make one token with it; 0 when none do (the space is then a piece of its own).
/// Tokenizers keep the space before a word with the word, in these scripts as in Latin
/// (Tekken's " 교육" is one token): 2 characters are tried first, extended to 3 when that
/// is a token too, else 1. Each key is hashed once for all families.
#[inline]
fn spaced_ngrams<const K: usize>(
    vocabs: &[Vocab; K],
    groups: &[u8; 0x10000],
    b: &[u8],
    j: usize,
) -> [usize; K] {
    let mut hit = [0usize; K];
    if K == 1 && j + 15 <= b.len() {
        // one family, 16 bytes readable from the space: the keys of 4 and 7 bytes come
        // from one load, as `hash_at` would hash them
        let v = &vocabs[0];
        let w = load8(b, j - 1);
        if w >> 8 & 0xF0 != 0xE0 {
            return hit;
        }
        let cp = decode3_word(w >> 8);
        hit[0] = spaced_one(
            v,
            groups,
            b,
            j,
            w,
            groups[cp as usize],
            v.chars[cp as usize],
        );
        return hit;
    }
    if !cjk_char(groups, b, j) {
        return hit;
    }
    let first = decode3(b, j);
    let h2 = cjk_char(groups, b, j + 3).then(|| hash_at(b, j - 1, j + 6));
    let mut h3: Option<Option<u64>> = None;
    let mut h1: Option<u64> = None;
    for (m, v) in hit.iter_mut().zip(vocabs) {
        if !v.may_follow_space(first) {
            continue;
        }
        if matches!(h2, Some(h) if v.contains_hash(h)) {
            let tri = *h3.get_or_insert_with(|| {
                cjk_char(groups, b, j + 6).then(|| hash_at(b, j - 1, j + 9))
            });
            *m = if matches!(tri, Some(h) if v.contains_hash(h)) {
                3
            } else {
                2
            };
        } else if v.contains_hash(*h1.get_or_insert_with(|| hash_at(b, j - 1, j + 3))) {
            *m = 1;
        }
    }
    hit
}

/// Count the features of `text` for each vocabulary in `vocabs`, in one pass.
///
/// Letter, digit and whitespace runs are found 8 bytes at a time (SWAR byte-class masks
/// and `trailing_zeros`); every key is hashed once and probed in each family's filter.
/// The result equals the byte-by-byte scanner's on every input (property-tested).
///
/// ```
/// use contextwindow_core::features::{scan, FEATURE_NAMES};
/// use contextwindow_core::estimate::vocab;
/// let f = scan("x = 12345", &[vocab("cl100k").unwrap()]);
/// let digits = FEATURE_NAMES.iter().position(|n| *n == "digits").unwrap();
/// assert_eq!(f[0][digits], 5);
/// ```
pub fn scan<const K: usize>(text: &str, vocabs: &[Vocab; K]) -> [Features; K] {
    let mut out = [[0u64; N_FEATURES]; K];
    scan_into(text, vocabs, &mut out);
    out
}

/// [`scan`] into any [`Sink`] (`Copy`, so that the hot loops count in a copy held in
/// registers), one per vocabulary; `Weighted` sinks give the fitted
/// sums directly (the same integers as the dot product of [`scan`]'s counts).
pub fn scan_into<S: Sink + Copy, V: Vocabs<K>, const K: usize>(
    text: &str,
    families: &V,
    out: &mut S,
) {
    let vocabs = families.vocabs();
    let groups = group_table();
    let b = text.as_bytes();
    let n = b.len();
    let kind = |i: usize| if i < n { KIND[b[i] as usize] } else { NA };
    let digit = |x: u64| in_range(x, b'0', b'9');
    // Byte donated to the next piece as its leading character (a space or a single
    // punctuation character before letters, a space before punctuation).
    let mut prefix: Option<usize> = None;
    let mut na_prev = NaPrev::default();
    // Per family: end of the n-gram (CJK, symbols, or a space and CJK) being consumed.
    let mut consumed = [0usize; K];
    let mut window = words::Window::for_text(n);
    let mut i = 0;
    while i < n {
        let k = KIND[b[i] as usize];
        if n >= words::MIN_TAIL && prefix.is_none() && starts_fast_path(b[i]) {
            // nothing pending: ASCII text from here is read 64 bytes at a time when it can be
            let r = words::ascii_run(out, families, b, i, &mut window);
            if r > i {
                i = r;
                continue;
            }
        }
        if k == NA {
            if (0xE0..0xF0).contains(&b[i]) {
                i = three_byte_run(out, families, groups, b, i, &mut consumed, &mut na_prev);
            } else if b[i] < 0xE0 {
                i = two_byte_run(out, families, groups, b, i, &mut na_prev);
            } else {
                // a 4-byte character: never part of an n-gram
                let (cp, len) = decode(b, i);
                let entry = group_of(groups, cp);
                let mut upper = after_upper(b, i, na_prev.upper);
                let g = word_and_case::<_, K>(out, entry, &mut na_prev.letter, &mut upper);
                na_prev.upper = upper;
                for (k, v) in vocabs.iter().enumerate() {
                    standalone(out, k, v, g, cp);
                }
                i += len;
            }
            prefix = None;
            continue;
        }
        na_prev.letter = false;
        let mut j = i + 1;
        match k {
            LO | UP => {
                // segments of the letter run: uppercase letters then lowercase ones; a
                // lowercase-to-uppercase switch starts the next segment
                let mut s = i;
                let mut lead = prefix;
                loop {
                    let e = segment_end(b, s);
                    debug_assert!(e > s, "a letter segment holds its first letter");
                    letter_segment(out, vocabs, b, lead, (s, e), false);
                    lead = None;
                    s = e;
                    if is_letter(kind(e)) {
                        continue;
                    }
                    // fast paths, each what the arms below would do without the round
                    // trip: a lone punctuation mark not followed by punctuation, a line
                    // break or a letter is a piece of one byte, always a token...
                    if kind(s) == PU && !matches!(kind(s + 1), PU | NL | LO | UP) {
                        for k in 0..K {
                            let f = &mut At(&mut *out, k);
                            f.add(F_KNOWN, 1);
                        }
                        s += 1;
                    }
                    // ...and one space leads the next word
                    if kind(s) == SP && is_letter(kind(s + 1)) {
                        // ASCII text from here is read 64 bytes at a time when it can be
                        let r = words::ascii_run(out, families, b, s, &mut window);
                        if r > s {
                            s = r;
                            break;
                        }
                        lead = Some(s);
                        s += 1;
                        continue;
                    }
                    break;
                }
                j = s;
                prefix = None;
            }
            DG => {
                j = run_end(b, j, digit, DG);
                let len = (j - i) as u64;
                for k in 0..K {
                    let f = &mut At(&mut *out, k);
                    f.add(F_DIGITS, len);
                    f.add(F_DIGIT_GROUPS, len.div_ceil(3));
                }
                prefix = None;
            }
            CT => {
                for k in 0..K {
                    let f = &mut At(&mut *out, k);
                    f.add(F_CONTROLS, 1);
                }
                prefix = None;
            }
            PU => {
                while kind(j) == PU {
                    j += 1;
                }
                if j - i == 1 && prefix.is_none() && is_letter(kind(j)) {
                    prefix = Some(i);
                } else {
                    let start = prefix.unwrap_or(i);
                    while kind(j) == NL {
                        j += 1;
                    }
                    punct_piece(out, vocabs, b, start, j);
                    prefix = None;
                }
            }
            _ if k == SP && is_letter(kind(j)) => {
                // the common case: one space before a word becomes its leading byte
                prefix = Some(i);
            }
            _ => {
                // whitespace: up to the last line break, then the rest
                j = run_end(b, i, space_mask, SP);
                // run_end's byte-by-byte tail only follows spaces; finish any mixed tail
                while matches!(kind(j), SP | NL | TB) {
                    j += 1;
                }
                let last_nl = b[i..j]
                    .iter()
                    .rposition(|&c| c == b'\n' || c == b'\r')
                    .map(|p| i + p);
                let next = kind(j);
                let a_end = last_nl.map_or(i, |p| p + 1);
                space_piece(out, vocabs, b, i, a_end);
                prefix = None;
                let spaced = if a_end < j && b[j - 1] == b' ' {
                    spaced_ngrams(vocabs, groups, b, j)
                } else {
                    [0; K]
                };
                if spaced.iter().any(|&m| m > 0) {
                    // the families whose token holds the space and the characters after
                    // it: one n-gram, the rest of the run a piece; the others: as below
                    // (a family without it splits the run's last byte off before the
                    // CJK-ish character, as below: the run less it is a piece for all)
                    space_piece(out, vocabs, b, a_end, j - 1);
                    space_piece_for(out, vocabs, b, j - 1, j, spaced.map(|m| m == 0));
                    for (k, (c, m)) in consumed.iter_mut().zip(spaced).enumerate() {
                        if m > 0 {
                            out.add(k, F_NGRAMS, 1);
                            *c = j + 3 * m;
                        }
                    }
                } else if a_end < j {
                    if is_letter(next) || (next == PU && b[j - 1] == b' ') {
                        space_piece(out, vocabs, b, a_end, j - 1);
                        prefix = Some(j - 1);
                    } else if next == DG || (next == NA && j < n) {
                        // a digit run takes no leading whitespace, but the run's last
                        // byte is a piece of its own before it ("   5": "  ", " ", "5");
                        // so before a non-ASCII character ("我  们": "我", " ", " ", "们"
                        // in the scanner's pieces; cl100k's " 们" is 2 tokens: the run
                        // as one piece lost a token, fresh21)
                        space_piece(out, vocabs, b, a_end, j - 1);
                        space_piece(out, vocabs, b, j - 1, j);
                    } else {
                        space_piece(out, vocabs, b, a_end, j);
                    }
                }
            }
        }
        i = j;
    }
}

#[path = "features_words.rs"]
mod words;

#[path = "features_cjk.rs"]
mod cjk;

#[cfg(test)]
#[path = "features_scalar.rs"]
mod scalar;

#[cfg(test)]
mod tests {
    use super::*;

    const REFERENCE_HELLO: u64 = 0xd23e_7d16_e9fe_9d7f;

    #[test]
    fn groups() {
        assert_eq!(group(0xE9), G_LATIN); // é
        assert_eq!(group(0xD7), G_SYM); // ×
        assert_eq!(group(0x416), G_CYRL); // Ж
        assert_eq!(group(0x3B1), G_GREEK); // α
        assert_eq!(group(0x1F00), G_GREEK); // ἀ (Greek Extended)
        assert_eq!(group(0x10D0), G_ARMGEO); // ა
        assert_eq!(group(0x5D0), G_RTL); // א
        assert_eq!(group(0x915), G_INDIC); // क
        assert_eq!(group(0xE01), G_SEA); // ก
        assert_eq!(group(0x4F60), G_CJK);
        assert_eq!(group(0x3042), G_KANA);
        assert_eq!(group(0xD55C), G_HANGUL);
        assert_eq!(group(0x1F600), G_EMOJI);
        assert_eq!(group(0x200D), G_JOINER);
        assert_eq!(group(0x1D400), G_ASTRAL);
        assert_eq!(group(0x1200), G_OTHERL); // Ethiopic
    }

    #[test]
    fn space_before_hangul_joins_the_word() {
        // Tekken: 오|늘|날|의| 교육| 체계|는 (mistral-common): " 교육" and " 체계" (a space
        // and 2 hangul) are in its filter, so the spaces are no pieces of their own: 2
        // n-grams and 5 syllables of one token each. cl100k has neither: 2 spaces
        // (known) and 9 syllables. Same counts as tests/test_estimate.py.
        let families = [
            crate::estimate::vocab("cl100k").unwrap(),
            crate::estimate::vocab("tekken").unwrap(),
        ];
        let [cl100k, tekken] = scan("오늘날의 교육 체계는", &families);
        let hangul = F_CH + G_HANGUL as usize;
        assert_eq!(
            (tekken[F_NGRAMS], tekken[F_KNOWN], tekken[hangul]),
            (2, 0, 5)
        );
        assert_eq!(
            (cl100k[F_NGRAMS], cl100k[F_KNOWN], cl100k[hangul]),
            (0, 2, 9)
        );
        // box drawing: "──" is a token of both, "───" of Tekken only
        let [cl100k, tekken] = scan("────────", &families);
        assert_eq!((cl100k[F_NGRAMS], tekken[F_NGRAMS]), (4, 3));
    }

    #[test]
    fn char_tables_hold_each_code_points_cost_group_and_pair_flags() {
        for name in crate::estimate::VOCAB_NAMES {
            let v = crate::estimate::vocab(name).unwrap();
            for cp in 0..0x10000u32 {
                let e = v.chars[cp as usize];
                assert_eq!((e & CHAR_COST) as u64 + 1, v.cost(cp), "{name} U+{cp:04X}");
                let code = e >> CHAR_GROUP_SHIFT & 3;
                let want = match GROUP_TABLE[cp as usize] {
                    G_CJK => 1,
                    G_KANA => 2,
                    G_SYM => 3,
                    _ => 0,
                };
                assert_eq!(code, want, "{name} U+{cp:04X}");
            }
        }
        // conservative: "これ" is a token of both families, "こ" starts it, "れ" ends it
        let v = crate::estimate::vocab("conservative").unwrap();
        assert!(v.may_pair('こ' as u32, 'れ' as u32));
        assert!(v.contains("これ".as_bytes()));
        // the flags hold what the data lists, and no more
        let lists = crate::estimate::pair_chars("conservative").unwrap();
        for (list, flag) in lists
            .iter()
            .zip([PAIR_FIRST, PAIR_SECOND, TRIPLE_FIRST, SPACED_FIRST])
        {
            let set: std::collections::HashSet<u32> = list.iter().map(|&c| c as u32).collect();
            for cp in 0..0x10000u32 {
                assert_eq!(
                    v.chars[cp as usize] & flag != 0,
                    set.contains(&cp),
                    "U+{cp:04X}"
                );
            }
        }
    }

    #[test]
    fn rare_pairs_hold_the_masks_bits_for_both_cases() {
        let bits = &crate::estimate::RARE_BIGRAMS;
        let t = rare_pairs(bits);
        let mut set = 0;
        for (a, x) in (b'a'..=b'z').enumerate() {
            for (b, y) in (b'a'..=b'z').enumerate() {
                let k = 26 * a + b;
                let want = bits[k >> 3] >> (k & 7) & 1;
                for (p, q) in [(x, y), (x - 32, y), (x, y - 32), (x - 32, y - 32)] {
                    assert_eq!(
                        t[((p & 31) as usize) << 5 | (q & 31) as usize],
                        want,
                        "{p} {q}"
                    );
                }
                set += want as usize;
            }
        }
        // every entry that is no pair of letters is 0; some pairs are rare, most are not
        assert_eq!(t.iter().map(|&x| x as usize).sum::<usize>(), set);
        assert!(set > 0 && set < 26 * 26 / 2, "{set}");
    }

    #[test]
    fn bloom_false_positive_pairs_are_no_ngrams() {
        // "おこ" tests positive in conservative's Bloom filter but is no token of either
        // family (2 cl100k and 2 Tekken tokens, tests/test_estimate.py): its characters
        // start and end no 2-character token, so it is two kana read alone; "→但" the
        // same in cl100k's. "これ" (1 token in both) stays an n-gram.
        for (name, text) in [("conservative", "おこ"), ("cl100k", "→但")] {
            let v = crate::estimate::vocab(name).unwrap();
            assert!(
                v.contains(text.as_bytes()),
                "{name}: {text} is a false positive"
            );
            let [f] = scan(text, &[v]);
            assert_eq!(f[F_NGRAMS], 0, "{name}: {text}");
            // with the text padded to take the CJK blocks (24 characters and more)
            let long = format!("{text}{}", "中文".repeat(16));
            let [g] = scan(&long, &[v]);
            let [h] = scan(&"中文".repeat(16), &[v]);
            assert_eq!(g[F_NGRAMS], h[F_NGRAMS], "{name}: {text} in a run");
        }
        let [f] = scan("これ", &[crate::estimate::vocab("conservative").unwrap()]);
        assert_eq!(f[F_NGRAMS], 1);
    }

    #[test]
    fn filters_of_2_22_bits_pass_no_tester_piece() {
        // fresh17 #1: at 2^20 bits " iedyxudpacvqazt" (9 tokens in both tokenizers)
        // tested positive in cl100k's and conservative's filters, and "瓑鎑", "㥵㞌",
        // "ヘヒ" (2 tokens or more each) in conservative's, as 2-character tokens. The
        // word index is the family hash's top 16 bits.
        assert_eq!((BLOOM_BYTES, BLOOM_SHIFT), (1 << 19, 48));
        for name in crate::estimate::VOCAB_NAMES {
            let v = crate::estimate::vocab(name).unwrap();
            assert!(!v.contains(b" iedyxudpacvqazt"), "{name}");
            for pair in ["瓑鎑", "㥵㞌", "ヘヒ"] {
                assert!(!v.contains(pair.as_bytes()), "{name} {pair}");
            }
            // a long run of one such pair, through the CJK blocks where the family has
            // them: no 2-character token
            let f = scan(&"瓑鎑".repeat(200), &[v]);
            assert_eq!(f[0][F_NGRAMS], 0, "{name}");
        }
    }

    #[test]
    fn capitals() {
        let families = [
            crate::estimate::vocab("cl100k").unwrap(),
            crate::estimate::vocab("tekken").unwrap(),
        ];
        // "INTERNATIONALIZATION" is 20 bytes, too long to look up: an unknown segment
        // whose 20 capitals are 19 beyond its first; " Internationalization" has 1: 0.
        for f in scan("INTERNATIONALIZATION Internationalization", &families) {
            assert_eq!((f[F_UNKNOWN_X], f[F_UNKNOWN_UPPER_X]), (12, 19));
        }
        // non-ASCII capitals right after a capital: Р И В Е Т (5; П starts the text, М
        // follows a space); Ü after the ASCII R (1; ASCII capitals are never counted
        // here); ẞ (3 bytes) after Ä and Ä after ẞ (2; Ä after a lowercase a is not);
        // fullwidth Ｂ after Ａ (1); mathematical bold, beyond the BMP (0)
        for (text, n) in [
            ("ПРИВЕТ Мир", 5),
            ("PRÜFUNG ÜBER", 1),
            ("ÄẞÄ aÄ", 2),
            ("ＡＢ", 1),
            ("\u{1D400}\u{1D401}", 0),
        ] {
            for f in scan(text, &families) {
                assert_eq!(f[F_NA_UPPER_AFTER_UPPER], n, "{text:?}");
            }
        }
        // the group table keeps its groups beside the case flag
        let t = group_table();
        assert_eq!(t[0x416], G_CYRL | UPPER_FLAG); // Ж
        assert_eq!(t[0x436], G_CYRL); // ж
        assert_eq!(t[0x1E9E], G_LATIN | UPPER_FLAG); // ẞ
        assert_eq!(t[0xFF21], G_CJK | UPPER_FLAG); // Ａ
    }

    #[test]
    fn the_compile_time_group_table_is_group_and_case_of_every_bmp_code_point() {
        // built here at run time, as the table was before it was a static
        let mut want = vec![0u8; 0x10000];
        for (cp, g) in want.iter_mut().enumerate() {
            *g = group(cp as u32);
        }
        for &(lo, hi) in crate::marks::UPPER {
            for cp in lo..=hi.min(0xFFFF) {
                want[cp as usize] |= UPPER_FLAG;
            }
        }
        assert_eq!(&group_table()[..], &want[..]);
    }

    #[test]
    fn key_hash_pads_and_mixes_length() {
        // "a" and "a\0" differ only in length
        assert_ne!(key_hash(b"a"), key_hash(b"a\0"));
        assert_ne!(key_hash(b"abcdefgh"), key_hash(b"abcdefgh\0"));
        // value computed by hand with Python's int arithmetic (see _reference.key_hash)
        assert_eq!(key_hash(b"hello"), REFERENCE_HELLO);
    }
}

#[cfg(test)]
mod fast_equals_scalar {
    //! The fast scanner must give the byte-by-byte scanner's counts on every input.
    use super::scalar::scan_scalar;
    use super::*;
    use crate::estimate::vocab;

    fn families() -> [Vocab; 2] {
        [vocab("cl100k").unwrap(), vocab("tekken").unwrap()]
    }

    /// Both scanners, one family at a time and both together, with the fast path at
    /// every instruction-set level the CPU has.
    fn check(text: &str) {
        let [a, b] = families();
        for simd in words::Simd::available() {
            words::FORCE.with(|f| f.set(Some(simd)));
            assert_eq!(
                scan(text, &[a]),
                scan_scalar(text, &[a]),
                "cl100k {simd:?} {text:?}"
            );
            assert_eq!(
                scan(text, &[b]),
                scan_scalar(text, &[b]),
                "tekken {simd:?} {text:?}"
            );
            assert_eq!(
                scan(text, &[a, b]),
                scan_scalar(text, &[a, b]),
                "both {simd:?} {text:?}"
            );
        }
        words::FORCE.with(|f| f.set(None));
    }

    /// Every sub-string starting in the first 17 bytes and ending in the last 17 (at
    /// char boundaries): each piece meets the 8-byte SWAR blocks and the 16-byte key
    /// loads at every alignment, and the end of the text at every distance.
    fn check_alignments(text: &str) {
        let bounds: Vec<usize> = text
            .char_indices()
            .map(|(i, _)| i)
            .chain([text.len()])
            .collect();
        let starts = bounds.iter().filter(|&&i| i <= 17);
        for &s in starts {
            for &e in bounds.iter().filter(|&&e| e >= s && e + 17 >= text.len()) {
                check(&text[s..e]);
            }
        }
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            // splitmix64
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
            xs[self.below(xs.len() as u64) as usize]
        }
    }

    const WORDS: &[&str] = &[
        "the",
        "The",
        "quick",
        "HTTPResponse",
        "camelCaseWord",
        "getX",
        "ABC",
        "a",
        "I",
        "abcdefghijklmnopqrstuvwxyz",
        "qzxjv",
        "Internationalization",
        "don",
        "self",
    ];
    const PUNCT: &[&str] = &[
        ".", ",", "'", "\"", "(", ")", "{\"", "\":", "->", "!!", "----", "/*", "*/", "==", "_",
    ];
    const SPACE: &[&str] = &[
        " ",
        "  ",
        "\n",
        "\n\n",
        "\t",
        "\r\n",
        " \n ",
        "    ",
        "\t\t\n  ",
        "\r",
        "\r\n\r\n    ",
        " \r\n",
        "\n\r",
    ];
    const WIDE: &[&str] = &[
        "中文文本",
        "日本語",
        "これは",
        "한국어",
        "문장입니다",
        "你好世界",
        "です。",
        "😀",
        "👨\u{200d}👩\u{200d}👧",
        "é",
        "Привет",
        "\u{301}",
        "\u{20000}",
        "\u{1D400}",
        "\u{FEFF}",
        "ПРИВЕТ",
        "ÜBER",
        "ẞ",
        "ΑΘΗΝΑ",
        "ＡＢ",
        " 교육",
        "  오늘날의 교육 체계는",
        " 中文 日本 한",
        "────────",
        "╭─ x ─╮\n│  ├──",
        "→",
        "ｶﾀｶﾅ",
        "ก",
        "א",
        "क",
    ];

    /// A random string: tokens of every kind, random code points, long runs.
    fn random_text(r: &mut Rng) -> String {
        let mut s = String::new();
        let n = r.below(48);
        for _ in 0..n {
            match r.below(9) {
                0 | 1 => s.push_str(r.pick(WORDS)),
                2 => s.push_str(r.pick(PUNCT)),
                3 => s.push_str(r.pick(SPACE)),
                4 => s.push_str(r.pick(WIDE)),
                5 => {
                    for _ in 0..r.below(20) {
                        s.push(char::from_u32(b'0' as u32 + r.below(10) as u32).unwrap());
                    }
                }
                6 => {
                    // a long run of one kind
                    let c =
                        [b'a', b'Z', b' ', b'\n', b'-', b'7', b'\t', b'\r'][r.below(8) as usize];
                    for _ in 0..(8 + r.below(40)) {
                        s.push(c as char);
                    }
                }
                7 => {
                    // any ASCII byte, controls included
                    s.push(char::from_u32(r.below(128) as u32).unwrap());
                }
                _ => {
                    let cp = match r.below(4) {
                        0 => 0x80 + r.below(0x780),
                        1 => 0x3000 + r.below(0x7000),
                        2 => 0x1F300 + r.below(0x300),
                        _ => r.below(0x11_0000),
                    } as u32;
                    if let Some(c) = char::from_u32(cp) {
                        s.push(c);
                    }
                }
            }
        }
        s
    }

    /// Random ASCII text of the kinds the 64-byte fast path reads (words, camelCase,
    /// spaces, line breaks and indentation, digits, punctuation runs), a few hundred
    /// bytes long, with a rare byte it does not read (a tab, a carriage return, a
    /// space before a line break, a non-ASCII letter) so that regions end everywhere.
    fn ascii_text(r: &mut Rng) -> String {
        const PIECES: &[&str] = &[
            "the",
            "The",
            "quick",
            "I",
            "a",
            "camelCase",
            "HTTPServer",
            "getX",
            "ABC",
            "qzxjv",
            "don't",
            "e.g.",
            "x",
            "Internationalization",
            "abcdefghijklmnopq",
        ];
        const GLUE: &[&str] = &[
            " ", " ", " ", "  ", "\n", "\n\n", "\n  ", "\n    ", ", ", ". ", ".\n", ": ", " (",
            ") ", "(", ")", "\")", "{\"", "\": \"", "\", ", "->", "==", "...", "---\n", "/", "_",
            "-", " -", "`", " `", "\n- ", "**", " #", "\n\n## ", ";\n",
        ];
        let mut s = String::new();
        let n = 20 + r.below(120);
        for _ in 0..n {
            match r.below(12) {
                0..=4 => s.push_str(r.pick(PIECES)),
                5..=8 => s.push_str(r.pick(GLUE)),
                9 => {
                    for _ in 0..1 + r.below(12) {
                        s.push(char::from(b'0' + r.below(10) as u8));
                    }
                }
                10 => s.push(char::from(0x21 + r.below(0x5e) as u8)),
                _ => {
                    if r.below(8) == 0 {
                        s.push_str(r.pick(&["\t", "\r\n", " \n", "é", "\u{1}", "中"]));
                    } else {
                        s.push(' ');
                    }
                }
            }
        }
        s
    }

    #[test]
    fn random_ascii_texts_at_many_offsets() {
        // every start offset modulo the 64-byte window, and a few more
        let mut r = Rng(0xA5C11);
        for _ in 0..500 {
            let t = ascii_text(&mut r);
            for s in (0..t.len().min(67)).filter(|&s| t.is_char_boundary(s)) {
                check(&t[s..]);
            }
        }
    }

    #[test]
    fn random_texts_at_every_alignment() {
        let mut r = Rng(0x5EED);
        for _ in 0..400 {
            check_alignments(&random_text(&mut r));
        }
    }

    #[test]
    fn fixed_texts_at_every_alignment() {
        for t in [
            "",
            "The quick brown fox jumps over the lazy dog, again and again. ",
            "fn main() { let x = vec![1, 2, 3]; println!(\"{:?}\", x); }\n",
            "これは日本語の文章です。中文文本也在这里。한국어 문장입니다. ",
            "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"hi\"}]}",
            "Hi,  x.append(self)\n\t\t  \r\n你好世界こんにちは한국어🙂\u{200d}🙂 é Привет \
             \u{0}\u{1b}[0m 1234567 ---- abcdefghijklmnopqrstuvwxyz \u{20000}\u{1D400} \
             HTTPResponse camelCaseWord !!\n\n's ПРИВЕТ МИР PRÜFUNG ÄẞÄ ＡＢ ΑΘΗΝΑ",
            "오늘날의 교육 체계는 학생들의  심층\n 작업 능력, 개발을\t완전히 지원하지 못하고 있는 경우가",
            // a punctuation mark and a space between 3-byte characters (counted inside
            // the run), and the same at the text's end and before ASCII
            "한국어 문장입니다. 다음 문장, 그리고! 中文. 日本; 한국. 끝. a. 가",
            "가. 나. 다. 라. 마. 바. 사. 아. 자. 차. 카. 타. 파. 하. 中, 文. 本: 日. ",
            "╭ Warning ──────────────╮\n│   Ignored build scripts   │\n╰────────────────────────╯",
            // runs of 2-byte characters with single and double spaces, capitals after
            // capitals, ASCII letters inside words and a 3-byte dash after a space
            "Москва — столица России. ΑΘΗΝΑ Αθήνα  Ëlan naïve ÉCOLE ÀÉÎ Straße Ĳssel Ամ \
             שלום עולם مرحبا بالعالم ПРИВЕТ МИР é é",
            // right-aligned numbers: the last space (or tab) of a run before digits is a
            // piece of its own; runs of 1 to 12 spaces, after a line break, after text
            "           5\n          42\n     1234567\n  5  7  1  9\n\n   3\n \n 8 x   12.5  x=  7",
            "  PID TTY          TIME CMD\n    1 ?        00:00:03 init\n  732 pts/0    00:00:00 bash\n",
            "\t\t5 \t7\t 9 \t 11\x0b\x0b2\r\n  3\n\t4  (5)  -6   \"7\"",
        ] {
            check_alignments(t);
            check_alignments(&t.repeat(3));
        }
    }

    /// Long runs of CJK, kana and symbols, which the AVX2 level counts eight characters
    /// at a time: 2- and 3-character tokens of `cl100k` and `conservative` (from their
    /// vocabularies: 用户, 数据, 请输入, します ...) at every position of a block, n-grams
    /// that cross blocks, and runs broken by hangul, an uppercase letter, a space, a
    /// digit or the end of the text, each after 0-8 characters that shift the blocks.
    #[test]
    fn cjk_runs_at_every_block_position() {
        let cons = vocab("conservative").unwrap();
        // Tekken does not take the blocks (`cjk_blocks` is false: slower there); a copy
        // that does checks the remixed filter bits of the vector probe
        let tekken = Vocab {
            cjk_blocks: true,
            ..vocab("tekken").unwrap()
        };
        let runs = [
            "用户数据时间成功失败修改文件信息删除名称输入返回类型错误参数函数密码请求登录页面使用",
            "请输入用户名字符串验证码不存在数据库软雅黑手机号设计器初始化服务器管理员命周期动生成",
            "そしてしかしありがとうございますこんにちはいますしますましたメントですこの方法を使用して",
            "────────・・・・・・……！！！！。。。。　　　　★★★★██████【】【】",
            "数据数据数据数据数据数据数据数据数据数据数据数据数据数据数据数据数据数",
            "你好世界这是一个测试用的中文文本没有任何已知的词只是普通的汉字而已",
            // "一ख" tests positive in cl100k's filter (a false positive), but ख
            // (Devanagari) is no n-gram character: no pair across the block's end
            "中中中中中中中一ख中文文本中文文本中文文本中文文本中文文本中文文本中文文本",
            // 成功 is a token and "成功१" tests positive (a false positive), but १ is
            // no n-gram character: no 3-character n-gram across the block's end
            "中中中中中中成功१中文文本中文文本中文文本中文文本中文文本中文文本中文文本",
            // "一 .e" tests positive too: a run that ends inside a block has no pair
            // across its end
            "中中中中中一 .e中文文本中文文本中文文本中文文本中文文本中文文本中文文本",
            // Korean: 2- and 3-syllable tokens, the syllables they cover skipped in the
            // hangul loop, words apart by single spaces
            "안녕하세요저는한국어를공부하고있습니다대한민국서울특별시에살고있어요감사합니다",
            "한국어 문장입니다 대한민국 서울특별시 안녕하세요 감사합니다 사용자 데이터베이스",
        ];
        let breaks = ["", "한", "Ḁ", " ", "7", "x", "。"];
        let shifts = [
            "",
            "a",
            "é",
            "中",
            "中中",
            "中中中",
            "ab中中中中",
            "中中中中中中中",
            "中中中中中中中中",
        ];
        let before = cjk::BLOCKS.with(|b| b.get());
        for run in runs {
            for brk in breaks {
                for shift in shifts {
                    let text = format!("{shift}{run}{brk}{run}{run}");
                    check(&text);
                    for simd in words::Simd::available() {
                        words::FORCE.with(|f| f.set(Some(simd)));
                        for v in [cons, tekken] {
                            assert_eq!(
                                scan(&text, &[v]),
                                scalar::scan_scalar(&text, &[v]),
                                "{simd:?} {text:?}"
                            );
                        }
                    }
                    words::FORCE.with(|f| f.set(None));
                }
                check_alignments(&format!("{run}{brk}{run}"));
            }
        }
        if words::Simd::available().contains(&words::Simd::Avx2) {
            assert!(
                cjk::BLOCKS.with(|b| b.get()) > before + 1000,
                "the blocks ran"
            );
        }
    }

    /// The blocks take a run they declined at its start, or left at a character of
    /// another group, once the scalar loop hands it back ([`RETRY`] characters later):
    /// the same counts, and about as many blocks as the run without the opening.
    #[test]
    fn blocks_try_again_inside_a_run() {
        let cons = vocab("conservative").unwrap();
        // no character twice in a row (the blocks decline a start where one is)
        let long = "你好世界这是一个测试用的中国语言没有任何已知的词只是普通的汉字而已".repeat(4);
        let blocks = |text: &str| {
            words::FORCE.with(|f| f.set(Some(words::Simd::Avx2)));
            let before = cjk::BLOCKS.with(|b| b.get());
            let got = scan(text, &[cons]);
            words::FORCE.with(|f| f.set(None));
            assert_eq!(got, scalar::scan_scalar(text, &[cons]), "{text:?}");
            cjk::BLOCKS.with(|b| b.get()) - before
        };
        // openings the blocks decline (a repeated character, box drawing) and breaks they
        // stop at (hangul, a fullwidth capital after one, a Latin capital of 3 bytes)
        let cases = [
            format!("谢谢{long}"),
            format!("────{long}"),
            format!("{long}한{long}"),
            format!("{long}ＡＢ{long}"),
            format!("{long}Ḁ{long}"),
            format!("{long}한국어{long}ＡＢＣ{long}"),
        ];
        for text in &cases {
            check(text);
            for shift in ["中", "中中", "ＡＢ", "한"] {
                check(&format!("{shift}{text}"));
            }
        }
        if words::Simd::available().contains(&words::Simd::Avx2) {
            // 132 characters a `long`: 16 blocks on their own, the last 48 bytes scalar
            let alone = blocks(&long);
            assert!(alone >= 12, "{alone}");
            for text in &cases[..2] {
                // 16 characters scalar, then the blocks: 13 and 14 blocks where the run
                // alone takes 15 (none before the scalar loop handed runs back)
                let n = blocks(text);
                assert!(n + 2 >= alone, "{n} vs {alone}: {text:?}");
            }
            for text in &cases[2..5] {
                // both halves, less the characters scalar after the break (30 each; the
                // first half alone before)
                let n = blocks(text);
                assert!(n + 2 >= 2 * alone, "{n} vs {alone}: {text:?}");
            }
        }
    }

    /// Korean words in the hangul loop of [`three_byte_run_in`] (one family): words of 1
    /// to 40 syllables, so that they cross the 16-byte loads and the 16 bytes the loop
    /// needs readable at every distance from the text's end, with 2- and 3-syllable
    /// tokens of the families inside them, and every kind of gap between them (one space,
    /// a mark and a space, which the loop counts; two spaces, line breaks, Latin letters,
    /// digits, 2-byte, 4-byte and other 3-byte characters, which end it), with hangul that
    /// is no syllable (jamo, U+D7A4 and up) inside words; then random Korean text. Each
    /// for `conservative` as well as the two families of [`check`].
    #[test]
    fn hangul_words_and_gaps() {
        let cons = vocab("conservative").unwrap();
        let each = |text: &str| {
            check(text);
            for simd in words::Simd::available() {
                words::FORCE.with(|f| f.set(Some(simd)));
                assert_eq!(
                    scan(text, &[cons]),
                    scalar::scan_scalar(text, &[cons]),
                    "conservative {simd:?} {text:?}"
                );
            }
            words::FORCE.with(|f| f.set(None));
        };
        // syllables of common words (있습니다, 대한민국, 사용자 ...: n-grams of the
        // families, some after a space) and of rare ones
        let syllables: Vec<char> = "있습니다한국어문장입니다대한민국서울특별시안녕하세요감사합니다\
                                    사용자데이터베이스오늘날의교육체계는그리고하지만것입니다\
                                    뷁똠퓛쉛괆흛"
            .chars()
            .collect();
        let gaps = [
            " ", ". ", ", ", "! ", "? ", "  ", " \n", "\n", ".\n", " a ", "a", " 12 ", "7", "é",
            " é ", "😀", " 😀 ", "中", " 中 ", "。", "ㄱ", " ㄱ", "\u{1100}", "\u{D7A4}", "Ａ",
            " Ａ", "", "...", " - ", "\t", ".  ", " .", ", \n",
        ];
        for len in 1..=40 {
            let word = |from: usize| -> String {
                (0..len)
                    .map(|k| syllables[(from + k) % syllables.len()])
                    .collect()
            };
            for (g, gap) in gaps.iter().enumerate() {
                let text = format!(
                    "{}{gap}{}{gap}{} {}",
                    word(g),
                    word(len),
                    word(3 * g),
                    word(1)
                );
                each(&text);
                // the end of the text at every distance from the last word's syllables
                each(&format!("{}{gap}{}", word(g), word(2 * g)));
            }
        }
        let mut r = Rng(0x4A_11_9E);
        for round in 0..300 {
            let mut text = String::new();
            for _ in 0..r.below(24) {
                for _ in 0..1 + r.below(8) {
                    text.push(syllables[r.below(syllables.len() as u64) as usize]);
                }
                text.push_str(if r.below(4) == 0 {
                    gaps[r.below(gaps.len() as u64) as usize]
                } else {
                    " "
                });
            }
            if round % 10 == 0 {
                check_alignments(&text);
            }
            each(&text);
        }
    }

    #[test]
    fn corpus_text_when_present() {
        // ../shared/corpus relative to the repo root; skipped when absent
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus");
        let Ok(dirs) = std::fs::read_dir(&root) else {
            return;
        };
        let mut stack: Vec<_> = dirs.flatten().map(|e| e.path()).collect();
        while let Some(p) = stack.pop() {
            if p.is_dir() {
                stack.extend(std::fs::read_dir(&p).unwrap().flatten().map(|e| e.path()));
            } else if let Ok(text) = std::fs::read_to_string(&p) {
                check(&text);
            }
        }
    }
}
