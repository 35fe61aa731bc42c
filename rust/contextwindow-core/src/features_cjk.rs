//! Runs of CJK, kana and symbol characters eight at a time, for one vocabulary (AVX2).
//!
//! In a block of eight 3-byte characters the vector lanes decode the code points and read
//! each one's entry of the vocabulary's characters table ([`super::char_table`]: scalar
//! loads; on the AMD Zen 5 this was measured on, a gather costs more than eight loads),
//! which holds its group, its standalone cost and whether it can start or end a
//! 2-character token. Only a pair whose first character can start one and second end one
//! (about one in 16 of the corpus's CJK pairs for `conservative`) is hashed and looked up
//! in the Bloom filter, as the scalar loop does; a hit takes the scalar path (the greedy
//! 2- or 3-character n-gram). The counts are the scalar loop's
//! ([`super::three_byte_run`]), checked at every alignment by `fast_equals_scalar`.
//!
//! A block takes its characters up to the first that is not a 3-byte CJK, kana or
//! symbol character (hangul counts word starts, an uppercase letter capitals, and the run
//! may end), and the blocks stop there: the word and case counts of what they take are
//! none.
//! The characters read alone are summed by group in vector lanes and added to the sink
//! once per run. A block with [`DENSE`] positive pairs or more (a rule of box drawing)
//! is left to the scalar loop, which skips what an n-gram consumes.

// the blocks are x86-64 only; elsewhere the scalar loop counts every run
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_imports))]

use super::{
    decode3, first_bytes, load8, mix, ngram_chars, Sink, Vocab, CHAR_COST, CHAR_GROUP_SHIFT, F_CH,
    F_EX, F_NGRAMS, PAIR_FIRST, PAIR_SECOND, TRIPLE_FIRST,
};
use super::{G_CJK, G_KANA, G_SYM};

#[cfg(test)]
thread_local! {
    /// Blocks counted on this thread (the tests check that they ran).
    pub(super) static BLOCKS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Positive pairs in a block from which the run goes to the scalar loop instead.
const DENSE: u32 = 6;

/// Bytes of blocks per call at most, so that the 32-bit lane sums (at most 4 a block)
/// cannot overflow.
const MAX_RUN: usize = 24 << 24;

/// Bytes a block needs readable from its first character: its 24, the next character,
/// and the 16-byte key loads of an n-gram that starts at its last character.
pub(super) const BLOCK_NEED: usize = 48;

/// Whether the run at `i` ([`BLOCK_NEED`] bytes readable) looks worth the blocks: its
/// first eight characters are 3-byte ones, and none of the first three repeats the one
/// before it. A block costs about as much as its table reads' latency, so a run shorter
/// than a block is cheaper in the scalar loop; and a rule of one repeated symbol (box
/// drawing, dots) is a run of n-grams, which the scalar loop skips through (measured on
/// box drawing: 15% slower with the blocks before this check).
#[inline(always)]
pub(super) fn worth_blocks(b: &[u8], i: usize) -> bool {
    let w = &b[i..i + 24];
    (1..8).all(|k| w[3 * k] & 0xF0 == 0xE0) && w[0..3] != w[3..6] && w[3..6] != w[6..9]
}

/// Count the run from `i` (a 3-byte character) into `out` block by block, as the scalar
/// loop would, up to its first character that is not a CJK, kana or symbol one (maybe
/// the run's end), a dense block, or the text's last [`BLOCK_NEED`] bytes. Returns `out`,
/// where the blocks stopped (`i` itself when they took nothing), and the end of the
/// n-gram being consumed (`cons` on entry). The sink goes in and out by value, so that
/// the caller's stays in registers.
///
/// # Safety
/// The CPU must have AVX2, BMI1, BMI2, LZCNT and POPCNT (`words::Simd::Avx2`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,bmi2,lzcnt,popcnt")]
pub(super) unsafe fn blocks<S: Sink>(
    mut out: S,
    v: &Vocab,
    groups: &[u8; 0x10000],
    b: &[u8],
    mut i: usize,
    cons: usize,
) -> (S, usize, usize) {
    use std::arch::x86_64::*;
    let n = b.len();
    let start = i;
    let mut ngrams = 0u64;
    let mut c = cons;
    // each 16-byte half holds 4 characters (bytes 0-11 and 12-23 of the block): byte
    // 3j, 3j+1, 3j+2 of a half into the low three bytes of dword j
    let shuffle = _mm256_setr_epi8(
        0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1, 0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8,
        -1, 9, 10, 11, -1,
    );
    // per group (CJK, kana, symbols): characters read alone, and their tokens beyond
    // one, summed lane by lane
    let mut sums = [(_mm256_setzero_si256(), _mm256_setzero_si256()); 3];
    while i + BLOCK_NEED <= n && i - start < MAX_RUN {
        // SAFETY: i + 48 <= n, so bytes i..i + 28 are readable; no alignment needed.
        let (lo, hi) = unsafe {
            (
                _mm_loadu_si128(b.as_ptr().add(i).cast()),
                _mm_loadu_si128(b.as_ptr().add(i + 12).cast()),
            )
        };
        // 8 x (byte 0 | byte 1 << 8 | byte 2 << 16)
        let y = _mm256_shuffle_epi8(_mm256_set_m128i(hi, lo), shuffle);
        let leads = _mm256_cmpeq_epi32(
            _mm256_and_si256(y, _mm256_set1_epi32(0xF0)),
            _mm256_set1_epi32(0xE0),
        );
        // (a lane whose bytes are no 3-byte character decodes to some code point below
        // 2^16 too: its table reads stay in bounds, and it is not counted)
        let cp = _mm256_or_si256(
            _mm256_or_si256(
                _mm256_slli_epi32(_mm256_and_si256(y, _mm256_set1_epi32(0x0F)), 12),
                _mm256_slli_epi32(
                    _mm256_and_si256(_mm256_srli_epi32(y, 8), _mm256_set1_epi32(0x3F)),
                    6,
                ),
            ),
            _mm256_and_si256(_mm256_srli_epi32(y, 16), _mm256_set1_epi32(0x3F)),
        );
        // entries of the family's character table (block group, cost, pair flags), read
        // with eight scalar loads: a table gather measured slower
        let mut cps = [0u32; 8];
        // SAFETY: `cps` holds 8 dwords; no alignment needed.
        unsafe { _mm256_storeu_si256(cps.as_mut_ptr().cast(), cp) };
        // the eight entries packed into one word by a tree of ors (inserted one by one
        // into a vector, each waited for the last), then widened to the lanes
        let e = cps.map(|c| v.chars[(c & 0xFFFF) as usize] as u64);
        let packed = ((e[0] | e[1] << 8) | (e[2] << 16 | e[3] << 24))
            | ((e[4] << 32 | e[5] << 40) | (e[6] << 48 | e[7] << 56));
        let entry = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(packed as i64));
        let code = _mm256_and_si256(
            _mm256_srli_epi32::<{ CHAR_GROUP_SHIFT as i32 }>(entry),
            _mm256_set1_epi32(3),
        );
        let is = |g: u8| {
            let c = match g {
                G_CJK => 1,
                G_KANA => 2,
                _ => 3,
            };
            _mm256_cmpeq_epi32(code, _mm256_set1_epi32(c))
        };
        let ok = _mm256_andnot_si256(_mm256_cmpeq_epi32(code, _mm256_setzero_si256()), leads);
        // the block's characters up to the first that does not qualify
        let ok = _mm256_movemask_ps(_mm256_castsi256_ps(ok)) as u32;
        let len = (!ok).trailing_zeros();
        if len == 0 {
            break;
        }
        let valid = (1u32 << len) - 1;
        // the flags of each lane's entry, moved to its sign bit
        let flag = |shift: __m256i| {
            _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_sllv_epi32(entry, shift))) as u32
        };
        let first = flag(_mm256_set1_epi32(31 - PAIR_FIRST.trailing_zeros() as i32));
        let second = flag(_mm256_set1_epi32(31 - PAIR_SECOND.trailing_zeros() as i32));
        let triple = flag(_mm256_set1_epi32(31 - TRIPLE_FIRST.trailing_zeros() as i32));
        // each character's partner: the next lane, when it is a 3-byte character (the
        // first that does not qualify included: it is read in place, the lanes before it
        // being 3-byte characters), and for the eighth the character after the block
        let threes = _mm256_movemask_ps(_mm256_castsi256_ps(leads)) as u32;
        let ninth =
            (b[i + 24] & 0xF0 == 0xE0) & (v.chars[decode3(b, i + 24) as usize] & PAIR_SECOND != 0);
        // pairs whose characters can be a token's: their keys go to the Bloom filter
        let cand = first & valid & ((second & threes) >> 1 | (ninth as u32) << 7);
        if cand.count_ones() >= DENSE {
            // pairs on most characters (a rule of box drawing, say): the scalar loop,
            // which skips the characters an n-gram consumes, is faster from here
            break;
        }
        let extra = _mm256_and_si256(entry, _mm256_set1_epi32(CHAR_COST as i32));
        // characters inside an n-gram: those an earlier one consumes, then greedily each
        // character not consumed yet whose pair tests positive starts one of 2 or 3
        // characters (3 when its 3-character key does too)
        let mut inside = 0u32;
        if c > i {
            let k = (c - i).div_ceil(3);
            inside = if k >= 8 { 0xFF } else { (1 << k) - 1 };
        }
        let mut cand = cand & !inside;
        let mut taken = 0u64;
        while cand != 0 {
            let j = cand.trailing_zeros();
            let p = i + 3 * j as usize;
            let w = load8(b, p);
            cand &= cand - 1;
            if !v.contains_hash(mix(w & first_bytes(6), 0, 6)) {
                continue;
            }
            let m = ngram_chars(v, groups, b, p, w, triple >> j & 1 != 0);
            taken += 1;
            c = p + 3 * m;
            let end = j + m as u32;
            inside |= ((1u32 << end) - 1) & !((1u32 << j) - 1);
            cand &= !((1u32 << end) - 1);
        }
        ngrams += taken;
        let alone = !inside & valid;
        // the characters read alone, by group: one more character, and its tokens
        // beyond one, in each lane of the group's sums
        let lanes = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
        let alone = _mm256_cmpeq_epi32(
            _mm256_and_si256(_mm256_set1_epi32(alone as i32), lanes),
            lanes,
        );
        for (g, (n, x)) in [G_CJK, G_KANA, G_SYM].into_iter().zip(sums.iter_mut()) {
            let m = _mm256_and_si256(is(g), alone);
            *n = _mm256_sub_epi32(*n, m);
            *x = _mm256_add_epi32(*x, _mm256_and_si256(extra, m));
        }
        #[cfg(test)]
        BLOCKS.with(|b| b.set(b.get() + 1));
        if len < 8 {
            i += 3 * len as usize;
            break;
        }
        // a constant step, not 3 * len: the next block's loads need not wait for this
        // one's group gather (Chinese text measured 8% faster)
        i += 24;
    }
    out.add(0, F_NGRAMS, ngrams);
    if i > start {
        let totals = lane_sums(sums);
        for (k, g) in [G_CJK, G_KANA, G_SYM].into_iter().enumerate() {
            out.add(0, F_CH + g as usize, totals[2 * k] as u64);
            out.add(0, F_EX + g as usize, totals[2 * k + 1] as u64);
        }
    }
    (out, i, c)
}

/// The sums of the eight 32-bit lanes of each of six vectors (three pairs), in order:
/// horizontal adds, then the two 128-bit halves added.
///
/// # Safety
/// The CPU must have AVX2, BMI1, BMI2, LZCNT and POPCNT (`words::Simd::Avx2`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,bmi2,lzcnt,popcnt")]
fn lane_sums(v: [(std::arch::x86_64::__m256i, std::arch::x86_64::__m256i); 3]) -> [u32; 8] {
    use std::arch::x86_64::*;
    let [(a, b), (c, d), (e, f)] = v;
    let abcd = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
    let ef = _mm256_hadd_epi32(_mm256_hadd_epi32(e, f), _mm256_setzero_si256());
    let lo = _mm_add_epi32(
        _mm256_castsi256_si128(abcd),
        _mm256_extracti128_si256::<1>(abcd),
    );
    let hi = _mm_add_epi32(
        _mm256_castsi256_si128(ef),
        _mm256_extracti128_si256::<1>(ef),
    );
    let mut out = [0u32; 8];
    // SAFETY: `out` holds 8 dwords; no alignment needed.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), _mm256_set_m128i(hi, lo)) };
    out
}
