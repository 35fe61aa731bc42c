//! The scanner's fast path for ASCII text: 64 bytes classified at once, then every
//! piece of the window read off bit masks.
//!
//! The byte-by-byte loop of [`super::scan_into`] finds each piece's end from the previous
//! one (a load, a mask, `trailing_zeros`) and picks the next piece's kind with a
//! branch that real text makes hard to predict. Here the byte classes of a 64-byte
//! window come from four 16-byte compares (SSE2, part of every x86-64 CPU; two 32-byte
//! ones with AVX2, one 64-byte compare per class with AVX-512BW; a plain loop
//! elsewhere), and the window's pieces are read off bit masks, one kind at a time:
//! letter segments with their leading byte, punctuation runs with the line breaks they
//! take, digit runs, whitespace runs. The counts are sums, so the order of the pieces
//! does not matter. The rules are the byte-by-byte loop's, restated on masks; anything
//! they do not cover (tabs, controls, non-ASCII bytes, a space before a line break;
//! `'\r'` is a line break as `'\n'` is, so CRLF text takes the path) ends the window's
//! region, and the loop goes on from the last piece boundary before it. The counts are the same as the loop's (property-tested against
//! the byte-by-byte oracle).

use super::{
    hash_in_window, letter_segment, punct_piece, space_piece, Sink, Vocabs, F_DIGITS,
    F_DIGIT_GROUPS, F_KNOWN, MAX_KEY,
};

/// Bytes per window.
pub(super) const WINDOW: usize = 64;

/// Byte classes of a window, one bit per byte (bit `i` is byte `at + i`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Classes {
    /// `a-z`.
    pub lower: u64,
    /// `A-Z`.
    pub upper: u64,
    /// `0-9`.
    pub digit: u64,
    /// `' '` (not tab).
    pub space: u64,
    /// `'\n'` and `'\r'` (the byte-by-byte loop's line breaks, kind `NL`).
    pub newline: u64,
    /// ASCII punctuation and symbols: `!` to `~` except letters and digits.
    pub punct: u64,
    /// Everything else: tabs, controls, DEL, non-ASCII bytes.
    pub other: u64,
}

impl Classes {
    /// The classes from bit `d` on, as if the window started there.
    #[inline(always)]
    fn shifted(&self, d: usize) -> Classes {
        Classes {
            lower: self.lower >> d,
            upper: self.upper >> d,
            digit: self.digit >> d,
            space: self.space >> d,
            newline: self.newline >> d,
            punct: self.punct >> d,
            other: self.other >> d,
        }
    }
}

/// Which instructions classify a window, chosen once per scan by what the CPU has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Simd {
    /// A plain loop (targets other than x86-64).
    #[cfg_attr(target_arch = "x86_64", allow(dead_code))]
    Plain,
    /// Four 16-byte compares and `movemask`s (every x86-64 CPU).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Sse2,
    /// Two 32-byte compares and `movemask`s.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx2,
    /// One 64-byte compare per class straight into a mask register (AVX-512BW), with
    /// the AVX2 level's other instructions. Measured on an Intel Xeon with AVX-512
    /// (best of 300 calls on 1 MB, alternating runs): ASCII prose and code 3-5% faster
    /// than [`Simd::Avx2`] (an earlier check on another CPU found no gain). (Hashing and looking the words up eight at a time, the
    /// filter words gathered, was 5-15% slower there than the scalar loop: a gather
    /// took about 35 cycles.)
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx512,
}

impl Simd {
    /// The best the running CPU has (the standard library caches the answer): the
    /// 32-byte level also needs BMI1, BMI2, LZCNT and POPCNT, which the fast path is
    /// compiled with at that level; the 64-byte level those and AVX-512F and BW.
    pub(super) fn detect() -> Simd {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let bits = has!("bmi1") && has!("bmi2") && has!("lzcnt") && has!("popcnt");
            if bits && has!("avx2") && has!("avx512f") && has!("avx512bw") {
                Simd::Avx512
            } else if bits && has!("avx2") {
                Simd::Avx2
            } else {
                Simd::Sse2
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Simd::Plain
        }
    }
}

impl Simd {
    /// Whether the level includes AVX2, BMI1, BMI2, LZCNT and POPCNT (the CJK blocks'
    /// instructions).
    #[inline]
    pub(super) fn has_avx2(self) -> bool {
        matches!(self, Simd::Avx2 | Simd::Avx512)
    }

    /// [`Simd::detect`], worked out once per process (one load after that), or in tests
    /// the level [`FORCE`] sets for this thread.
    #[inline]
    pub(super) fn for_scan() -> Simd {
        #[cfg(test)]
        if let Some(simd) = FORCE.with(|f| f.get()) {
            return simd;
        }
        static LEVEL: std::sync::OnceLock<Simd> = std::sync::OnceLock::new();
        *LEVEL.get_or_init(Simd::detect)
    }

    /// Every level the running CPU can run, the plain loop first.
    #[cfg(test)]
    pub(super) fn available() -> Vec<Simd> {
        let mut levels = vec![Simd::Plain];
        #[cfg(target_arch = "x86_64")]
        {
            levels.push(Simd::Sse2);
            if Simd::detect().has_avx2() {
                levels.push(Simd::Avx2);
            }
            if Simd::detect() == Simd::Avx512 {
                levels.push(Simd::Avx512);
            }
        }
        levels
    }
}

#[cfg(test)]
thread_local! {
    /// The level scans on this thread use (tests run the fast path at every level).
    pub(super) static FORCE: std::cell::Cell<Option<Simd>> = const { std::cell::Cell::new(None) };
    /// Bytes the fast path took on this thread (the tests check how much it takes).
    pub(super) static TAKEN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// [`Classes`] of `b[at..at + 64]` with the instructions `simd` names, which the CPU
/// must have ([`Simd::detect`]).
#[inline(always)]
pub(super) fn classes(simd: Simd, b: &[u8], at: usize) -> Classes {
    let w = &b[at..at + WINDOW];
    match simd {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Simd::detect` found AVX2 on this CPU.
        Simd::Avx2 => unsafe { x86::classes_avx2(w) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Simd::detect` found AVX-512F and AVX-512BW on this CPU.
        Simd::Avx512 => unsafe { x86::classes_avx512(w) },
        #[cfg(target_arch = "x86_64")]
        Simd::Sse2 => x86::classes_sse2(w),
        _ => classes_plain(w),
    }
}

/// [`Classes`] of a 64-byte window by a plain loop: the definition the SIMD versions
/// must match (tested), and the path on targets other than x86-64.
pub(super) fn classes_plain(w: &[u8]) -> Classes {
    let mut c = Classes::default();
    for (i, &x) in w[..WINDOW].iter().enumerate() {
        let bit = 1u64 << i;
        match x {
            b'a'..=b'z' => c.lower |= bit,
            b'A'..=b'Z' => c.upper |= bit,
            b' ' => c.space |= bit,
            b'\n' | b'\r' => c.newline |= bit,
            b'0'..=b'9' => c.digit |= bit,
            0x21..=0x7e => c.punct |= bit,
            _ => c.other |= bit,
        }
    }
    c
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Classes, WINDOW};
    use core::arch::x86_64::*;

    /// The masks of a window from per-class byte masks (`graphic`: `!` to `~`).
    #[inline(always)]
    fn assemble(
        lower: u64,
        upper: u64,
        digit: u64,
        space: u64,
        newline: u64,
        graphic: u64,
    ) -> Classes {
        Classes {
            lower,
            upper,
            digit,
            space,
            newline,
            punct: graphic & !(lower | upper | digit),
            other: !(graphic | space | newline),
        }
    }

    /// 64 bytes as four 16-byte vectors: `x + (0x80 - lo)` wraps the ASCII range
    /// `lo..lo + n` onto -128..-128 + n, the only bytes that land there, so each range
    /// is one signed compare.
    pub(super) fn classes_sse2(w: &[u8]) -> Classes {
        let w = &w[..WINDOW];
        let (mut lower, mut upper, mut digit) = (0u64, 0u64, 0u64);
        let (mut space, mut newline, mut graphic) = (0u64, 0u64, 0u64);
        // SAFETY: SSE2 is part of the x86-64 baseline, so every x86-64 CPU runs these
        // intrinsics; each load reads one 16-byte `chunk` of `w` (no alignment needed).
        unsafe {
            for (q, chunk) in w.chunks_exact(16).enumerate() {
                let x = _mm_loadu_si128(chunk.as_ptr().cast());
                macro_rules! range {
                    ($lo:expr, $n:expr) => {
                        _mm_cmplt_epi8(
                            _mm_add_epi8(x, _mm_set1_epi8(0x80u8.wrapping_sub($lo) as i8)),
                            _mm_set1_epi8(($n as i8).wrapping_add(i8::MIN)),
                        )
                    };
                }
                let bits = |m: i32| (m as u32 as u64 & 0xFFFF) << (16 * q);
                lower |= bits(_mm_movemask_epi8(range!(b'a', 26u8)));
                upper |= bits(_mm_movemask_epi8(range!(b'A', 26u8)));
                digit |= bits(_mm_movemask_epi8(range!(b'0', 10u8)));
                graphic |= bits(_mm_movemask_epi8(range!(0x21u8, 94u8)));
                space |= bits(_mm_movemask_epi8(_mm_cmpeq_epi8(
                    x,
                    _mm_set1_epi8(b' ' as i8),
                )));
                newline |= bits(_mm_movemask_epi8(_mm_or_si128(
                    _mm_cmpeq_epi8(x, _mm_set1_epi8(b'\n' as i8)),
                    _mm_cmpeq_epi8(x, _mm_set1_epi8(b'\r' as i8)),
                )));
            }
        }
        assemble(lower, upper, digit, space, newline, graphic)
    }

    /// 64 bytes as two 32-byte vectors, the same compares as [`classes_sse2`].
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn classes_avx2(w: &[u8]) -> Classes {
        let w = &w[..WINDOW];
        let (mut lower, mut upper, mut digit) = (0u64, 0u64, 0u64);
        let (mut space, mut newline, mut graphic) = (0u64, 0u64, 0u64);
        for (q, chunk) in w.chunks_exact(32).enumerate() {
            // SAFETY: `chunk` is 32 readable bytes; no alignment needed.
            let x = unsafe { _mm256_loadu_si256(chunk.as_ptr().cast()) };
            macro_rules! range {
                ($lo:expr, $n:expr) => {
                    _mm256_cmpgt_epi8(
                        _mm256_set1_epi8(($n as i8).wrapping_add(i8::MIN)),
                        _mm256_add_epi8(x, _mm256_set1_epi8(0x80u8.wrapping_sub($lo) as i8)),
                    )
                };
            }
            let shift = 32 * q;
            let bits = |m: i32| (m as u32 as u64) << shift;
            lower |= bits(_mm256_movemask_epi8(range!(b'a', 26u8)));
            upper |= bits(_mm256_movemask_epi8(range!(b'A', 26u8)));
            digit |= bits(_mm256_movemask_epi8(range!(b'0', 10u8)));
            graphic |= bits(_mm256_movemask_epi8(range!(0x21u8, 94u8)));
            space |= bits(_mm256_movemask_epi8(_mm256_cmpeq_epi8(
                x,
                _mm256_set1_epi8(b' ' as i8),
            )));
            newline |= bits(_mm256_movemask_epi8(_mm256_or_si256(
                _mm256_cmpeq_epi8(x, _mm256_set1_epi8(b'\n' as i8)),
                _mm256_cmpeq_epi8(x, _mm256_set1_epi8(b'\r' as i8)),
            )));
        }
        assemble(lower, upper, digit, space, newline, graphic)
    }

    /// 64 bytes as one 64-byte vector, each class one compare into a mask register.
    ///
    /// # Safety
    /// The CPU must have AVX-512F and AVX-512BW.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn classes_avx512(w: &[u8]) -> Classes {
        let w = &w[..WINDOW];
        // SAFETY: `w` is 64 readable bytes; no alignment needed.
        let x = unsafe { _mm512_loadu_si512(w.as_ptr().cast()) };
        // bytes in `lo..lo + n`: `x - lo` below `n` unsigned
        let range = |lo: u8, n: u8| {
            _mm512_cmplt_epu8_mask(
                _mm512_sub_epi8(x, _mm512_set1_epi8(lo as i8)),
                _mm512_set1_epi8(n as i8),
            )
        };
        let lower = range(b'a', 26);
        let upper = range(b'A', 26);
        let digit = range(b'0', 10);
        let graphic = range(0x21, 94);
        let space = _mm512_cmpeq_epi8_mask(x, _mm512_set1_epi8(b' ' as i8));
        let newline = _mm512_cmpeq_epi8_mask(x, _mm512_set1_epi8(b'\n' as i8))
            | _mm512_cmpeq_epi8_mask(x, _mm512_set1_epi8(b'\r' as i8));
        assemble(lower, upper, digit, space, newline, graphic)
    }
}

/// The classes of the window the fast path read last, kept for the next call: in code
/// the fast path is tried at every word after a space and stops a few bytes later, so
/// one window serves several tries.
#[derive(Debug, Clone, Copy)]
pub(super) struct Window {
    /// Where the window starts ([`NO_WINDOW`] before the first one).
    base: usize,
    /// The instructions that classify it.
    simd: Simd,
    classes: Classes,
    /// No try before this position: the last try took little or nothing, as most tries
    /// in code do, so the text up to here is left to the byte-by-byte loop.
    skip_until: usize,
    /// How far the next such miss skips: one window after a useful try, doubling with
    /// each miss after that (up to [`MAX_SKIP`]), so code pays for few windows.
    skip: usize,
}

impl Window {
    /// No window yet, for a text of `n` bytes: one shorter than [`MIN_TAIL`] never tries.
    #[inline(always)]
    pub(super) fn for_text(n: usize) -> Self {
        let short = n < MIN_TAIL;
        Window {
            base: NO_WINDOW,
            simd: if short { Simd::Plain } else { Simd::for_scan() },
            classes: Classes::default(),
            skip_until: if short { usize::MAX } else { 0 },
            skip: WINDOW,
        }
    }
}

/// A [`Sink`] that keeps the known-piece counts (the common case) in registers and
/// passes every other count on: the caller's sink lives in memory, and adding to it
/// once per word would chain each word's add to the last one through a store and a
/// load.
struct Tally<'a, S: Sink, const K: usize> {
    out: &'a mut S,
    known: [u64; K],
}

impl<S: Sink, const K: usize> Sink for Tally<'_, S, K> {
    #[inline(always)]
    fn add(&mut self, k: usize, f: usize, n: u64) {
        if f == F_KNOWN {
            self.known[k] += n;
        } else {
            self.out.add(k, f, n);
        }
    }
}

/// A try that takes fewer bytes than this is not worth its window: the tries after it
/// skip ahead (`Window::skip`).
const SHORT: u32 = 24;

/// The longest skip after misses, in bytes.
const MAX_SKIP: usize = 4096;

/// A window is reused while the next try starts within its first `REUSE` bytes.
const REUSE: usize = 32;

/// [`Window::base`] before the first window: far enough above every offset in a text
/// that `s - base` wraps to 2^63 or more (for the largest `base`, `usize::MAX`, it
/// wrapped to `s + 1`: every text's first try, at 0, "reused" a window of no classes,
/// took nothing, and skipped the text's first 64 bytes).
const NO_WINDOW: usize = usize::MAX / 2 + 1;

/// The fewest bytes, from a try to the end of the text, for which the text's last
/// window is worth its copy (see [`tail_run`]).
pub(super) const MIN_TAIL: usize = 16;

/// The pieces of a window's region, as bit masks (bit `i` is the window's byte `i`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Region {
    /// Where the region ends: a piece boundary at which the byte-by-byte loop goes on
    /// with no leading byte pending (0: no region).
    pub end: u32,
    /// Bytes that lead the letter segment after them: a space, or a punctuation mark
    /// that is a run of its own and not led by a space.
    pub leads: u64,
    /// Line breaks that belong to the punctuation run before them.
    pub absorbed: u64,
}

/// Where the fast path's region ends in the window `c` (only its first `known` bits, 2
/// to 64, are the text's) and which bytes lead words or follow punctuation. The region
/// is the longest that holds only letters, digits, spaces, line breaks and punctuation,
/// has no space right before a line break, and ends at a piece boundary where the
/// byte-by-byte loop has no leading byte pending: the start of a whitespace, digit,
/// unled punctuation or unled letter run, or a space that leads a word (its run's
/// other spaces are in the region). Bit 0 starts a piece with nothing pending (the
/// bytes before the window are not looked at).
#[inline(always)]
pub(super) fn region(c: &Classes, known: u32) -> Region {
    let letter = c.lower | c.upper;
    let space_leads = c.space & (letter >> 1);
    let punct_leads = c.punct & (letter >> 1) & !(c.punct << 1) & !(c.space << 1);
    let leads = space_leads | punct_leads;
    // line-break runs right after punctuation belong to the punctuation piece
    let newline_starts = c.newline & !(c.newline << 1);
    let absorbed = c.newline & !c.newline.wrapping_add(newline_starts & (c.punct << 1));
    let white = (c.space | c.newline) & !absorbed;
    let boundaries = (white & !(white << 1))
        | (c.digit & !(c.digit << 1))
        | (c.punct & !(c.punct << 1) & !(c.space << 1))
        | (letter & !(letter << 1) & !(leads << 1))
        | space_leads;
    // a space before a line break splits its run in ways the masks do not follow; the
    // byte after the last known one is unknown
    let bad = c.other | (c.space & (c.newline >> 1)) | (!0u64 << (known - 1));
    let before = (1u64 << bad.trailing_zeros()) - 1;
    let ends = boundaries & before & !1;
    Region {
        end: if ends == 0 {
            0
        } else {
            63 - ends.leading_zeros()
        },
        leads,
        absorbed,
    }
}

/// Count the pieces of the ASCII text from `s` (a piece start where the byte-by-byte
/// loop has no leading byte pending) up to the last piece boundary that the fast path
/// can reach in the window from `s` (see [`region`]); returns that boundary (`s` when
/// the fast path takes nothing). The caller goes on from there with nothing pending.
#[inline(always)]
pub(super) fn ascii_run<S: Sink + Copy, V: Vocabs<K>, const K: usize>(
    out: &mut S,
    families: &V,
    b: &[u8],
    s: usize,
    window: &mut Window,
) -> usize {
    if s < window.skip_until {
        return s;
    }
    // no window to reuse and no room for a new one: the text's last bytes, once
    let end = if s.wrapping_sub(window.base) >= REUSE && s + WINDOW > b.len() {
        tail_run(out, families, b, s, window)
    } else {
        region_at(out, families, b, s, window)
    };
    #[cfg(test)]
    TAKEN.with(|t| t.set(t.get() + end - s));
    end
}

/// [`region_pieces`] compiled for the instructions `window.simd` names.
#[inline(always)]
fn region_at<S: Sink + Copy, V: Vocabs<K>, const K: usize>(
    out: &mut S,
    families: &V,
    b: &[u8],
    s: usize,
    window: &mut Window,
) -> usize {
    match window.simd {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Simd::detect` found AVX2, BMI1, BMI2, LZCNT and POPCNT.
        Simd::Avx2 => unsafe { region_v3(out, families, b, s, window) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Simd::detect` found AVX-512F, AVX-512BW, AVX2, BMI1, BMI2, LZCNT and
        // POPCNT.
        Simd::Avx512 => unsafe { region_v4(out, families, b, s, window) },
        _ => region_v1(out, families, b, s, window),
    }
}

/// The fast path over the text's last bytes (fewer than [`WINDOW`] from `s`), tried once
/// per text unless the last try missed: they are copied into a window padded with bytes
/// that are not ASCII, whose region then ends at the last piece boundary before the
/// text's last piece (the padding ends it as any non-ASCII byte would), and the
/// byte-by-byte loop reads on from there.
#[inline(never)]
fn tail_run<S: Sink + Copy, V: Vocabs<K>, const K: usize>(
    out: &mut S,
    families: &V,
    b: &[u8],
    s: usize,
    window: &mut Window,
) -> usize {
    // once; and not after a try that took little (French, say: the accents end most
    // regions early, and the copy and the classes would be spent for nothing)
    let missed = window.skip > WINDOW;
    window.skip_until = usize::MAX;
    let rest = &b[s..];
    if rest.len() < MIN_TAIL || missed {
        return s;
    }
    let mut padded = [0x80u8; WINDOW + 16];
    padded[..rest.len()].copy_from_slice(rest);
    let mut last = Window {
        base: NO_WINDOW,
        simd: window.simd,
        classes: Classes::default(),
        skip_until: 0,
        skip: WINDOW,
    };
    s + region_at(out, families, &padded, 0, &mut last)
}

/// [`region_pieces`] for any CPU. Not inlined: called about once per window, it keeps
/// its own registers.
#[inline(never)]
fn region_v1<S: Sink + Copy, V: Vocabs<K>, const K: usize>(
    out: &mut S,
    families: &V,
    b: &[u8],
    s: usize,
    window: &mut Window,
) -> usize {
    region_runs(out, families, b, s, window)
}

/// [`region_pieces`] compiled for AVX2-era CPUs: `tzcnt`, `lzcnt`, `popcnt`, `blsr`
/// and `shlx` in place of their longer baseline sequences.
///
/// # Safety
/// The CPU must have AVX2, BMI1, BMI2, LZCNT and POPCNT.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,bmi2,lzcnt,popcnt")]
#[inline(never)]
unsafe fn region_v3<S: Sink + Copy, V: Vocabs<K>, const K: usize>(
    out: &mut S,
    families: &V,
    b: &[u8],
    s: usize,
    window: &mut Window,
) -> usize {
    region_runs(out, families, b, s, window)
}

/// [`region_v3`] with the classes from AVX-512BW compares.
///
/// # Safety
/// The CPU must have AVX-512F, AVX-512BW, AVX2, BMI1, BMI2, LZCNT and POPCNT.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2,bmi1,bmi2,lzcnt,popcnt")]
#[inline(never)]
unsafe fn region_v4<S: Sink + Copy, V: Vocabs<K>, const K: usize>(
    out: &mut S,
    families: &V,
    b: &[u8],
    s: usize,
    window: &mut Window,
) -> usize {
    region_runs(out, families, b, s, window)
}

/// [`region_pieces`] from `s`, then again from where it stopped for as long as the
/// byte-by-byte loop would call it there at once: after a take of [`SHORT`] bytes or
/// more (no skip set), with room for a new window, at a byte that starts the fast path
/// (the test of `scan_into`). One call of the fast path per window of prose, not
/// counting its registers out and back in each time.
#[inline(always)]
fn region_runs<S: Sink + Copy, V: Vocabs<K>, const K: usize>(
    out: &mut S,
    families: &V,
    b: &[u8],
    s: usize,
    window: &mut Window,
) -> usize {
    let mut s = s;
    loop {
        let end = region_pieces(out, families, b, s, window);
        if end - s < SHORT as usize || end + WINDOW > b.len() || !super::starts_fast_path(b[end]) {
            return end;
        }
        s = end;
    }
}

/// The fast path past its skip check, inlined into one function per instruction set.
#[inline(always)]
fn region_pieces<S: Sink + Copy, V: Vocabs<K>, const K: usize>(
    sink: &mut S,
    families: &V,
    b: &[u8],
    s: usize,
    window: &mut Window,
) -> usize {
    let vocabs = families.vocabs();
    // `s` before the window wraps to a large offset
    let mut d = s.wrapping_sub(window.base);
    let c = if d >= REUSE {
        if s + WINDOW > b.len() {
            return s;
        }
        window.base = s;
        window.classes = classes(window.simd, b, s);
        d = 0;
        window.classes
    } else {
        window.classes.shifted(d)
    };
    let r = region(&c, (WINDOW - d) as u32);
    if r.end < SHORT {
        window.skip_until = s + window.skip;
        window.skip = (2 * window.skip).min(MAX_SKIP);
        if r.end == 0 {
            return s;
        }
    } else {
        window.skip = WINDOW;
    }
    let end = r.end as usize;
    let inside = (1u64 << end) - 1;
    // runs that start inside the region end by its end (byte `end` included)
    let upto = inside | 1 << end;
    let letter = c.lower | c.upper;
    let white = (c.space | c.newline) & !r.absorbed;
    // counted in a copy the compiler can keep in registers (see `three_byte_run`)
    let mut local = *sink;
    let mut tally = Tally {
        out: &mut local,
        known: [0; K],
    };

    // letter segments: uppercase then lowercase letters, led by the byte before them
    // when it is in `leads`; a word whose key (leading byte included) every family
    // knows is one known token, found here with one hash and one probe per family,
    // and anything else goes through `letter_segment`. Each key is found from where it
    // starts, the leading byte of a led segment (never a letter, never a segment's
    // last byte) or the first letter of an unled one: its length is the distance to
    // the segment's last letter, and a key of one byte (a letter alone) is a token.
    let camel = c.upper & (c.lower << 1);
    let starts = ((letter & !(letter << 1)) | camel) & inside;
    let seg_last = (letter & !(letter >> 1)) | (c.lower & (c.upper >> 1));
    let led_at = r.leads << 1;
    let keys = (starts & !led_at) | ((starts & led_at) >> 1);
    let ones = keys & seg_last;
    let mut keys = keys & !ones;
    // every key is counted known, less those that are not (the common case changes no
    // register)
    let mut known_words = (ones | keys).count_ones() as u64;
    // the 16 bytes from every key start (at most 63): the text's, or when fewer than 80
    // bytes are left from `s`, a copy (the hash reads only the key's bytes)
    let mut copy;
    let w: &[u8; WINDOW + 16] = match b.get(s..s + WINDOW + 16).and_then(|w| w.try_into().ok()) {
        Some(w) => w,
        None => {
            let rest = &b[s..];
            copy = [0u8; WINDOW + 16];
            copy[..rest.len()].copy_from_slice(rest);
            &copy
        }
    };
    while keys != 0 {
        let p = keys.trailing_zeros() as usize;
        keys &= keys - 1;
        let len = (seg_last >> p).trailing_zeros() as usize + 1;
        // `known_all`'s test, written out so that the probes stop at the first family
        // that lacks the key (calling `known_all` here: `conservative` prose 864 -> 732
        // MiB/s, criterion)
        if len <= MAX_KEY && {
            let h = hash_in_window(w, p, len);
            vocabs.iter().all(|v| v.contains_hash(h))
        } {
            continue;
        }
        known_words -= 1;
        // the segment's first letter: `p`, or the byte after it when `p` is its lead
        let i = p + (!letter >> p & 1) as usize;
        let lead = (p < i).then_some(s + p);
        // with one family, the probe above found the key missing (or it is too long to be
        // one): `letter_segment` need not probe it again
        letter_segment(&mut tally, vocabs, b, lead, (s + i, s + p + len), K == 1);
    }
    for n in &mut tally.known {
        *n += known_words;
    }

    // punctuation runs: a single mark, not led and before a space or digit, is a known
    // token; a single mark before a letter leads it; every other run, with the space
    // before it and the line breaks after it, is a piece
    let punct_starts = c.punct & !(c.punct << 1);
    let led = c.space << 1;
    let single = punct_starts & !(c.punct >> 1);
    let lone = single & !led & !(letter >> 1) & !(c.newline >> 1) & inside;
    for n in &mut tally.known {
        *n += lone.count_ones() as u64;
    }
    let mut runs = punct_starts & !lone & !r.leads & inside;
    while runs != 0 {
        let i = runs.trailing_zeros() as usize;
        runs &= runs - 1;
        let q = i + (!(c.punct >> i)).trailing_zeros() as usize;
        let e = q + (!(c.newline >> q)).trailing_zeros() as usize;
        let p = i - (led >> i & 1) as usize;
        punct_piece(&mut tally, vocabs, b, s + p, s + e);
    }

    // digit runs
    let digits = c.digit & inside;
    let digit_count = digits.count_ones() as u64;
    let mut groups = 0u64;
    let mut runs = digits & !(digits << 1);
    while runs != 0 {
        let i = runs.trailing_zeros() as usize;
        runs &= runs - 1;
        groups += ((!(c.digit >> i)).trailing_zeros() as u64).div_ceil(3);
    }
    for k in 0..K {
        tally.out.add(k, F_DIGITS, digit_count);
        tally.out.add(k, F_DIGIT_GROUPS, groups);
    }

    // whitespace runs: the line breaks (first) are a piece, then the spaces, less the
    // last one when it leads a word or punctuation, or when it is right before a digit
    // (then a piece of its own, a known token: a digit run takes no leading space, so
    // tokenizers split "   5" as "  ", " ", "5"); a run of one byte is a known token
    // unless it is that leading space
    let white_starts = white & !(white << 1);
    let one = white_starts & !(white >> 1) & inside;
    let leading = c.space & ((letter | c.punct) >> 1);
    let before_digit = c.space & (c.digit >> 1);
    for n in &mut tally.known {
        *n += (one & !leading).count_ones() as u64;
    }
    let mut runs = white_starts & !one & inside;
    while runs != 0 {
        let i = runs.trailing_zeros() as usize;
        runs &= runs - 1;
        let j = i + (!(white >> i)).trailing_zeros() as usize;
        debug_assert!(
            upto >> (j - 1) & 1 == 1,
            "a run inside the region ends by its end"
        );
        let a = i + (!(c.newline >> i)).trailing_zeros() as usize;
        space_piece(&mut tally, vocabs, b, s + i, s + a);
        let last = j - ((leading | before_digit) >> (j - 1) & 1) as usize;
        space_piece(&mut tally, vocabs, b, s + a, s + last.max(a));
        // the space split off before a digit (the byte before it is a space, so `a <= last`)
        let split = before_digit >> (j - 1) & 1;
        for n in &mut tally.known {
            *n += split;
        }
    }

    for (k, n) in tally.known.into_iter().enumerate() {
        tally.out.add(k, F_KNOWN, n);
    }
    *sink = local;
    s + end
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes of `text` the fast path takes at `simd`.
    fn taken(text: &str, simd: Simd) -> usize {
        let v = crate::estimate::vocab("cl100k").expect("cl100k");
        FORCE.with(|f| f.set(Some(simd)));
        TAKEN.with(|t| t.set(0));
        super::super::scan(text, &[v]);
        FORCE.with(|f| f.set(None));
        TAKEN.with(|t| t.get())
    }

    #[test]
    fn the_fast_path_takes_a_texts_first_and_last_bytes() {
        // 62 bytes a sentence. The byte-by-byte loop is left the text's last piece:
        // the padding after the text ends the region at the last piece boundary
        // before it, the final space (1 byte) or " dog" (the space that leads a word
        // and the word: 4). The fast path used to skip the first 64 bytes (the first
        // try "reused" a window of no classes) and the last 64 (no room for a window)
        let s = "The quick brown fox jumps over the lazy dog, again and again. ";
        for simd in Simd::available() {
            let cases = [
                (s.repeat(3), 1),
                (s.into(), 1),
                (s[..40].into(), 1),
                (s[..43].into(), 4),
            ];
            for (text, left) in cases {
                assert_eq!(taken(&text, simd), text.len() - left, "{simd:?} {text:?}");
            }
            // shorter than MIN_TAIL: never tried
            assert_eq!(taken("The quick brown", simd), 0);
        }
    }

    #[test]
    fn classes_match_the_plain_definition_for_every_byte() {
        let all: Vec<u8> = (0..=255u8).chain(0..=255u8).collect();
        for simd in Simd::available() {
            for at in 0..all.len() - WINDOW {
                let want = classes_plain(&all[at..at + WINDOW]);
                assert_eq!(classes(simd, &all, at), want, "{simd:?} at {at}");
            }
        }
    }

    /// The region end of the first 64 bytes of `text` padded with `pad`.
    fn end_of(text: &str, pad: char) -> u32 {
        let mut t = text.to_string();
        while t.len() < WINDOW {
            t.push(pad);
        }
        region(&classes_plain(t.as_bytes()), 64).end
    }

    #[test]
    fn region_ends_at_the_last_piece_boundary_before_what_the_masks_do_not_follow() {
        // prose: the last space before a word (byte 63 has no known successor)
        let prose = " the quick brown fox jumps over the lazy dog and again and again";
        assert_eq!(end_of(prose, 'x'), 58);
        // a tab: the space before "quick" is the last boundary
        assert_eq!(end_of("the quick\tbrown fox", 'x'), 3);
        // a space before a line break (byte 13): of the boundaries before it (2, 3, 5:
        // whitespace and digit runs; 7: "x" after the led "("; 8: ")"; 10: "foo" after
        // the line break that ")" takes) the last is 10
        assert_eq!(end_of("ab 12 (x)\nfoo \nbar", 'x'), 10);
        // non-ASCII at byte 0: nothing
        assert_eq!(end_of("é the quick brown fox", 'x'), 0);
    }
}
