//! The scanner as first written: byte by byte, every family hashing its own keys. Kept
//! (tests only) as the straightforward oracle the fast scanner in `features.rs` must equal
//! on every input.

use super::*;

impl Vocab {
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

/// Whether a 3-byte CJK, kana or hangul character starts at `i`.
fn cjk_char(bytes: &[u8], i: usize) -> bool {
    i + 3 <= bytes.len() && (0xE0..0xF0).contains(&bytes[i]) && is_cjkish(group(decode(bytes, i).0))
}

/// Whether a 3-byte character of an n-gram group ([`is_ngram_group`]) starts at `i`.
fn ngram_char(bytes: &[u8], i: usize) -> bool {
    i + 3 <= bytes.len()
        && (0xE0..0xF0).contains(&bytes[i])
        && is_ngram_group(group(decode(bytes, i).0))
}

/// Whether `cp` is an uppercase letter of the BMP: a binary search of the generated
/// ranges (the fast scanner reads a flag of its group table instead).
fn is_upper(cp: u32) -> bool {
    let k = crate::marks::UPPER.partition_point(|&(lo, _)| lo <= cp);
    cp < 0x10000 && k > 0 && cp <= crate::marks::UPPER[k - 1].1
}

/// [`super::scan`], the plain way.
pub fn scan_scalar<const K: usize>(text: &str, vocabs: &[Vocab; K]) -> [Features; K] {
    let mut out = [[0u64; N_FEATURES]; K];
    let b = text.as_bytes();
    let n = b.len();
    let kind = |i: usize| if i < n { KIND[b[i] as usize] } else { NA };
    // Byte donated to the next piece as its leading character (a space or a single
    // punctuation character before letters, a space before punctuation).
    let mut prefix: Option<usize> = None;
    let mut na_prev_letter = false;
    let mut na_prev_upper = false;
    // Per family: end of the n-gram (CJK, symbols, or a space and CJK) being consumed.
    let mut consumed = [0usize; K];
    let mut i = 0;
    while i < n {
        let k = KIND[b[i] as usize];
        if k == NA {
            let (cp, len) = decode(b, i);
            let g = group(cp);
            let upper = is_upper(cp);
            // the code point before: an ASCII byte, or the non-ASCII code point read last
            let prev_upper =
                i > 0 && (b[i - 1].is_ascii_uppercase() || (b[i - 1] >= 0x80 && na_prev_upper));
            if upper && prev_upper {
                for f in out.iter_mut() {
                    f[F_NA_UPPER_AFTER_UPPER] += 1;
                }
            }
            na_prev_upper = upper;
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
                    && is_ngram_group(g)
                    && ngram_char(b, i + 3)
                    && v.may_pair(cp, decode(b, i + 3).0)
                    && v.contains_at(b, i, i + 6)
                {
                    // a 2-character token, extended to 3 when that is a token too
                    let m =
                        if ngram_char(b, i + 6) && v.may_triple(cp) && v.contains_at(b, i, i + 9) {
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
                        letter_segment_scalar(&mut out, vocabs, b, lead, s, j);
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
                    let breaks = j;
                    while kind(j) == NL {
                        j += 1;
                    }
                    let cr = b[breaks..j].contains(&b'\r');
                    let punct = |f: &mut Features, v: &Vocab, s: usize, e: usize| {
                        if !v.known(b, s, e) {
                            f[F_UNKNOWN_PUNCT] += 1;
                            f[F_UNKNOWN_PUNCT_X] += (e - s).saturating_sub(2) as u64;
                            f[F_UNKNOWN_PUNCT_SWITCHES] +=
                                ((s + 1..e).filter(|&q| b[q] != b[q - 1]).count() as u64)
                                    .saturating_sub(3);
                            // each run of one punctuation character, in the family's
                            // characters per token of it
                            let mut q = s;
                            while q < e {
                                let mut r = q + 1;
                                while r < e && b[r] == b[q] {
                                    r += 1;
                                }
                                if r - q >= 2 && kind(q) == PU {
                                    let per = v.runs[b[q] as usize].max(1) as usize;
                                    f[F_UNKNOWN_PUNCT_RUN_TOKENS] += (r - q).div_ceil(per) as u64;
                                }
                                q = r;
                            }
                        } else {
                            f[F_KNOWN] += 1;
                        }
                    };
                    for (f, v) in out.iter_mut().zip(vocabs) {
                        if cr && !v.known(b, start, j) {
                            // the punctuation, then its line breaks as whitespace
                            punct(f, v, start, breaks);
                            whitespace(f, v, b, breaks, j);
                        } else {
                            punct(f, v, start, j);
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
                // per family: CJK-ish characters after the last space that make one token
                // with it (0: none)
                let spaced: [usize; K] = if a_end < j && b[j - 1] == b' ' {
                    core::array::from_fn(|k| spaced_ngram(&vocabs[k], b, j))
                } else {
                    [0; K]
                };
                let mut ws = |s: usize, e: usize, only: [bool; K]| {
                    if e > s {
                        for ((f, v), on) in out.iter_mut().zip(vocabs).zip(only) {
                            if on {
                                whitespace(f, v, b, s, e);
                            }
                        }
                    }
                };
                ws(i, a_end, [true; K]);
                prefix = None;
                if spaced.iter().any(|&m| m > 0) {
                    // (the run is followed by a 3-byte character: a family without the
                    // n-gram splits its last byte off, as below)
                    ws(a_end, j - 1, [true; K]);
                    ws(j - 1, j, spaced.map(|m| m == 0));
                    for ((f, c), m) in out.iter_mut().zip(consumed.iter_mut()).zip(spaced) {
                        if m > 0 {
                            f[F_NGRAMS] += 1;
                            *c = j + 3 * m;
                        }
                    }
                } else if a_end < j {
                    if is_letter(next) || (next == PU && b[j - 1] == b' ') {
                        ws(a_end, j - 1, [true; K]);
                        prefix = Some(j - 1);
                    } else if next == DG || (next == NA && j < n) {
                        // the last whitespace byte before digits or a non-ASCII character
                        // is a piece of its own
                        ws(a_end, j - 1, [true; K]);
                        ws(j - 1, j, [true; K]);
                    } else {
                        ws(a_end, j, [true; K]);
                    }
                }
            }
        }
        i = j;
    }
    out
}

/// CJK-ish characters (1 to 3) after the space at `j - 1` that make one token of `v`
/// with it, or 0: 2 tried first, extended to 3, else 1 (see [`super::scan`]).
fn spaced_ngram(v: &Vocab, b: &[u8], j: usize) -> usize {
    if !cjk_char(b, j) || !v.may_follow_space(decode(b, j).0) {
        return 0;
    }
    if cjk_char(b, j + 3) && v.contains_at(b, j - 1, j + 6) {
        if cjk_char(b, j + 6) && v.contains_at(b, j - 1, j + 9) {
            3
        } else {
            2
        }
    } else if v.contains_at(b, j - 1, j + 3) {
        1
    } else {
        0
    }
}

/// Features of the letter segment `b[s..e]`, led by the byte at `lead` when given.
#[inline(always)]
fn letter_segment_scalar<const K: usize>(
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
                    unknown_letters(&mut At(f, 0), v.rare, &b[s..e]);
                    f[F_UNKNOWN_PREFIXED] += 1;
                }
            }
            None => {
                if v.known(b, s, e) {
                    f[F_KNOWN] += 1;
                } else {
                    unknown_letters(&mut At(f, 0), v.rare, &b[s..e]);
                }
            }
        }
    }
}

/// The features of the whitespace piece `b[s..e]` (not empty) for one vocabulary.
fn whitespace(f: &mut Features, v: &Vocab, b: &[u8], s: usize, e: usize) {
    if v.known(b, s, e) {
        f[F_KNOWN] += 1;
    } else {
        f[F_UNKNOWN_SPACE] += 1;
        f[F_UNKNOWN_SPACE_X] += (e - s).saturating_sub(2) as u64;
        f[F_UNKNOWN_SPACE_SWITCHES] += b[s..e].windows(2).filter(|p| p[0] != p[1]).count() as u64;
        f[F_UNKNOWN_NEWLINES] += b[s..e]
            .iter()
            .filter(|&&c| c == b'\n' || c == b'\r')
            .count() as u64;
    }
}
