//! Single-pass text features for the fitted estimators (DESIGN.md section 3).
//!
//! The scanner splits text into the pieces a BPE tokenizer's pre-tokenizer would make
//! (letter segments with an optional leading space or punctuation character, punctuation
//! runs, whitespace runs, digits, non-ASCII code points) and, for every tokenizer family
//! it is given, looks each short piece up in that family's vocabulary. A piece found
//! there is one token; a piece not found contributes length features. Non-ASCII code
//! points add the family's cost of the character on its own (a 2-bit table over the
//! Basic Multilingual Plane and the emoji blocks); CJK, kana and hangul also try the
//! family's 2- and 3-character tokens, greedily. One pass over the bytes, no allocation.
//!
//! The vocabulary is a blocked Bloom filter (2^20 bits in 512-bit blocks, 3 bits per key,
//! [`key_hash`]) of every ASCII token of at most 16 bytes and every 2- or 3-character CJK
//! token; about 1% of pieces that are not tokens test positive. Both it and the cost table are data files
//! written by `tools/fit_profiles.py` from the real vocabularies.
//!
//! `contextwindow._reference` implements the same rules in Python; the two agree exactly.

/// Bytes in a Bloom filter: 2^20 bits.
pub const BLOOM_BYTES: usize = 1 << 17;
/// Entries in a cost table: the BMP, then U+1F000..=U+1FAFF.
pub const TABLE_ENTRIES: usize = 0x10000 + 0xB00;
/// Bytes in a cost table (2 bits per entry).
pub const TABLE_BYTES: usize = TABLE_ENTRIES / 4;
/// Longest piece looked up in the vocabulary, in bytes.
pub const MAX_KEY: usize = 16;

/// Script groups of non-ASCII code points, in feature order.
pub const GROUPS: [&str; 14] = [
    "latin", "grcy", "armgeo", "rtl", "indic", "sea", "otherl", "cjk", "kana", "hangul", "sym",
    "emoji", "joiner", "astral",
];
const G_LATIN: u8 = 0;
const G_GRCY: u8 = 1;
const G_ARMGEO: u8 = 2;
const G_RTL: u8 = 3;
const G_INDIC: u8 = 4;
const G_SEA: u8 = 5;
const G_OTHERL: u8 = 6;
const G_CJK: u8 = 7;
const G_KANA: u8 = 8;
const G_HANGUL: u8 = 9;
const G_SYM: u8 = 10;
const G_EMOJI: u8 = 11;
const G_JOINER: u8 = 12;
const G_ASTRAL: u8 = 13;

/// Number of features.
pub const N_FEATURES: usize = 21 + 2 * GROUPS.len();

/// Feature names, in order: piece features, then `ch_<group>` (code points of the
/// group that are not part of a CJK n-gram token), then `ex_<group>` (their standalone
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
    "ch_latin",
    "ch_grcy",
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
    "ex_grcy",
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
const F_CH: usize = 21;
const F_EX: usize = 21 + GROUPS.len();

/// Feature counts of one text for one family.
pub type Features = [u64; N_FEATURES];

/// Bytes of the rare-bigram mask: one bit per ordered pair of ASCII letters (case folded),
/// bit `26 * a + b`.
pub const RARE_BYTES: usize = 85;

/// A tokenizer family's vocabulary data.
#[derive(Clone, Copy)]
pub struct Vocab {
    /// Letter pairs that are rare inside tokens (random strings are full of them).
    pub rare: &'static [u8; RARE_BYTES],
    /// Bloom filter of short tokens, [`BLOOM_BYTES`] long.
    pub bloom: &'static [u8; BLOOM_BYTES],
    /// Standalone cost table, [`TABLE_BYTES`] long, 2 bits per entry (cost - 1).
    pub table: &'static [u8; TABLE_BYTES],
}

/// Hash of a key of 1 to 16 bytes: its two little-endian 64-bit halves (zero padded)
/// and its length, mixed with splitmix64-style multiplies.
#[inline]
pub fn key_hash(key: &[u8]) -> u64 {
    let mut buf = [0u8; 16];
    buf[..key.len()].copy_from_slice(key);
    let (lo, hi) = halves(&buf, 0, key.len());
    mix(lo, hi, key.len())
}

#[inline(always)]
fn mix(lo: u64, hi: u64, len: usize) -> u64 {
    let mut h = (lo ^ 0x9E37_79B9_7F4A_7C15).wrapping_mul(0xBF58_476D_1CE4_E5B9)
        ^ (hi ^ len as u64).wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^= h >> 31;
    h = h.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    h ^ (h >> 32)
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
    let keep = |n: usize| {
        if n >= 8 {
            u64::MAX
        } else {
            (1u64 << (8 * n)) - 1
        }
    };
    (lo & keep(len), hi & keep(len.saturating_sub(8)))
}

impl Vocab {
    /// Whether `key` (1 to 16 bytes) tests positive in the Bloom filter: a blocked
    /// filter, 2048 blocks of 512 bits (one cache line each), 3 bits per key.
    #[inline]
    pub fn contains(&self, key: &[u8]) -> bool {
        self.contains_hash(key_hash(key))
    }

    #[inline(always)]
    fn contains_hash(&self, h: u64) -> bool {
        let base = ((h >> 53) as usize) << 9;
        let bit = |p: usize| self.bloom[p >> 3] >> (p & 7) & 1 == 1;
        bit(base + (h & 511) as usize)
            && bit(base + ((h >> 9) & 511) as usize)
            && bit(base + ((h >> 18) & 511) as usize)
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

    /// A piece of one byte is always a token (byte-level vocabularies hold every byte).
    #[inline(always)]
    fn known(&self, bytes: &[u8], s: usize, e: usize) -> bool {
        let len = e - s;
        if len == 1 {
            return true;
        }
        if len > MAX_KEY {
            return false;
        }
        self.contains_at(bytes, s, e)
    }

    /// [`Vocab::contains`] of `bytes[s..e]` (1 to 16 bytes), loading the key in place
    /// when 16 bytes are readable from `s`.
    #[inline(always)]
    fn contains_at(&self, bytes: &[u8], s: usize, e: usize) -> bool {
        let len = e - s;
        if s + 16 <= bytes.len() {
            let (lo, hi) = halves(bytes, s, len);
            self.contains_hash(mix(lo, hi, len))
        } else {
            self.contains(&bytes[s..e])
        }
    }
}

/// Script group of a non-ASCII code point.
pub fn group(cp: u32) -> u8 {
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
        0x370..=0x52F => G_GRCY,
        0x530..=0x58F => G_ARMGEO,
        0x590..=0x8FF => G_RTL,
        0x900..=0xDFF => G_INDIC,
        0x10A0..=0x10FF => G_ARMGEO,
        0xE00..=0x10FF => G_SEA,
        0x1780..=0x17FF => G_SEA,
        0x1E00..=0x1EFF => G_LATIN,
        0x1F00..=0x1FFF => G_GRCY,
        0x2000..=0x2BFF => G_SYM,
        0xFB1D..=0xFDFF | 0xFE70..=0xFEFF => G_RTL,
        0xE000..=0xF8FF => G_SYM,
        _ => G_OTHERL,
    }
}

/// [`group`] of every BMP code point, built once.
fn group_table() -> &'static [u8; 0x10000] {
    static TABLE: std::sync::OnceLock<Box<[u8; 0x10000]>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = Box::new([0u8; 0x10000]);
        for (cp, g) in t.iter_mut().enumerate() {
            *g = group(cp as u32);
        }
        t
    })
}

#[inline(always)]
fn group_of(table: &[u8; 0x10000], cp: u32) -> u8 {
    if cp < 0x10000 {
        table[cp as usize]
    } else {
        group(cp)
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

/// Whether a 3-byte CJK, kana or hangul character starts at `i`.
#[inline(always)]
fn cjk_char(groups: &[u8; 0x10000], bytes: &[u8], i: usize) -> bool {
    i + 3 <= bytes.len()
        && (0xE0..0xF0).contains(&bytes[i])
        && is_cjkish(group_of(groups, decode(bytes, i).0))
}

#[inline(always)]
fn unknown_letters(f: &mut Features, rare: &[u8; RARE_BYTES], seg: &[u8]) {
    let len = seg.len();
    let bucket = match len {
        0..=3 => 0,
        4..=6 => 1,
        7..=9 => 2,
        10..=13 => 3,
        _ => {
            f[F_UNKNOWN_X] += (len - 14) as u64;
            4
        }
    };
    f[F_UNKNOWN_1 + bucket] += 1;
    f[F_UNKNOWN_RARE_BIGRAMS] += seg
        .windows(2)
        .filter(|p| {
            let k = 26 * ((p[0] | 0x20) - b'a') as usize + ((p[1] | 0x20) - b'a') as usize;
            rare[k >> 3] >> (k & 7) & 1 == 1
        })
        .count() as u64;
}

/// Features of the letter segment `b[s..e]`, led by the byte at `lead` when given.
#[inline(always)]
fn letter_segment<const K: usize>(
    out: &mut [Features; K],
    vocabs: &[Vocab; K],
    b: &[u8],
    lead: Option<usize>,
    s: usize,
    e: usize,
) {
    for (f, v) in out.iter_mut().zip(vocabs) {
        match lead {
            Some(p) => {
                if v.known(b, p, e) {
                    f[F_KNOWN] += 1;
                } else if v.known(b, s, e) {
                    f[F_KNOWN_BARE] += 1;
                } else {
                    unknown_letters(f, v.rare, &b[s..e]);
                    f[F_UNKNOWN_PREFIXED] += 1;
                }
            }
            None => {
                if v.known(b, s, e) {
                    f[F_KNOWN] += 1;
                } else {
                    unknown_letters(f, v.rare, &b[s..e]);
                }
            }
        }
    }
}

/// Count the features of `text` for each vocabulary in `vocabs`, in one pass.
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
    let groups = group_table();
    let b = text.as_bytes();
    let n = b.len();
    let kind = |i: usize| if i < n { KIND[b[i] as usize] } else { NA };
    // Byte donated to the next piece as its leading character (a space or a single
    // punctuation character before letters, a space before punctuation).
    let mut prefix: Option<usize> = None;
    let mut na_prev_letter = false;
    // Per family: end of the CJK n-gram being consumed.
    let mut consumed = [0usize; K];
    let mut i = 0;
    while i < n {
        let k = KIND[b[i] as usize];
        if k == NA {
            let (cp, len) = decode(b, i);
            let g = group_of(groups, cp);
            let isl = is_letter_group(g);
            if isl && !na_prev_letter {
                for f in out.iter_mut() {
                    f[F_NA_WORDS] += 1;
                }
            }
            na_prev_letter = isl;
            for (f, (v, c)) in out.iter_mut().zip(vocabs.iter().zip(consumed.iter_mut())) {
                if i < *c {
                    continue;
                }
                if len == 3
                    && is_cjkish(g)
                    && cjk_char(groups, b, i + 3)
                    && v.contains_at(b, i, i + 6)
                {
                    // a 2-character token, extended to 3 when that is a token too
                    let m = if cjk_char(groups, b, i + 6) && v.contains_at(b, i, i + 9) {
                        3
                    } else {
                        2
                    };
                    f[F_NGRAMS] += 1;
                    *c = i + 3 * m;
                    continue;
                }
                f[F_CH + g as usize] += 1;
                f[F_EX + g as usize] += v.cost(cp) - 1;
            }
            prefix = None;
            i += len;
            continue;
        }
        na_prev_letter = false;
        let mut j = i + 1;
        match k {
            LO | UP => {
                // one pass over the letters: a segment ends at a lowercase-to-uppercase
                // switch or at the end of the run
                let mut s = i;
                let mut lead = prefix;
                let mut prev = k;
                loop {
                    let kj = kind(j);
                    let end = !is_letter(kj);
                    if end || (prev == LO && kj == UP) {
                        letter_segment(&mut out, vocabs, b, lead, s, j);
                        lead = None;
                        s = j;
                        if end {
                            break;
                        }
                    }
                    prev = kj;
                    j += 1;
                }
                prefix = None;
            }
            DG => {
                while kind(j) == DG {
                    j += 1;
                }
                let len = (j - i) as u64;
                for f in out.iter_mut() {
                    f[F_DIGITS] += len;
                    f[F_DIGIT_GROUPS] += len.div_ceil(3);
                }
                prefix = None;
            }
            CT => {
                for f in out.iter_mut() {
                    f[F_CONTROLS] += 1;
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
                    for (f, v) in out.iter_mut().zip(vocabs) {
                        if !v.known(b, start, j) {
                            f[F_UNKNOWN_PUNCT] += 1;
                            f[F_UNKNOWN_PUNCT_X] += (j - start).saturating_sub(2) as u64;
                        } else {
                            f[F_KNOWN] += 1;
                        }
                    }
                    prefix = None;
                }
            }
            _ => {
                // whitespace: up to the last line break, then the rest
                let mut last_nl = None;
                if k == NL {
                    last_nl = Some(i);
                }
                while matches!(kind(j), SP | NL | TB) {
                    if kind(j) == NL {
                        last_nl = Some(j);
                    }
                    j += 1;
                }
                let next = kind(j);
                let a_end = last_nl.map_or(i, |p| p + 1);
                let mut ws = |s: usize, e: usize| {
                    if e > s {
                        for (f, v) in out.iter_mut().zip(vocabs) {
                            if v.known(b, s, e) {
                                f[F_KNOWN] += 1;
                            } else {
                                f[F_UNKNOWN_SPACE] += 1;
                                f[F_UNKNOWN_SPACE_X] += (e - s).saturating_sub(2) as u64;
                                f[F_UNKNOWN_SPACE_SWITCHES] +=
                                    b[s..e].windows(2).filter(|p| p[0] != p[1]).count() as u64;
                                f[F_UNKNOWN_NEWLINES] += b[s..e]
                                    .iter()
                                    .filter(|&&c| c == b'\n' || c == b'\r')
                                    .count()
                                    as u64;
                            }
                        }
                    }
                };
                ws(i, a_end);
                prefix = None;
                if a_end < j {
                    if is_letter(next) || (next == PU && b[j - 1] == b' ') {
                        ws(a_end, j - 1);
                        prefix = Some(j - 1);
                    } else {
                        ws(a_end, j);
                    }
                }
            }
        }
        i = j;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const REFERENCE_HELLO: u64 = 0x4881_cdf0_6c3c_c2f0;

    #[test]
    fn groups() {
        assert_eq!(group(0xE9), G_LATIN); // é
        assert_eq!(group(0xD7), G_SYM); // ×
        assert_eq!(group(0x416), G_GRCY); // Ж
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
    fn key_hash_pads_and_mixes_length() {
        // "a" and "a\0" differ only in length
        assert_ne!(key_hash(b"a"), key_hash(b"a\0"));
        assert_ne!(key_hash(b"abcdefgh"), key_hash(b"abcdefgh\0"));
        // value computed by hand with Python's int arithmetic (see _reference.key_hash)
        assert_eq!(key_hash(b"hello"), REFERENCE_HELLO);
    }
}
