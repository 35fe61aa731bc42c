//! Token estimation: one pass over UTF-8 text counting code points by class, then a
//! weighted sum (DESIGN.md section 3).
//!
//! Weights are integers in units of 1/[`SCALE`] token so that the Rust engine and the
//! pure-Python reference (`contextwindow._reference`) agree exactly, with no floating
//! point in the text rule.

use crate::model::{Message, Part, PartKind};

/// Weight unit: a weight of `SCALE` is one token per code point (or per byte).
pub const SCALE: u64 = 12_000;

/// Number of code point classes.
pub const N_CLASSES: usize = 11;

/// Code point classes, in the order of [`Counts::classes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Class {
    /// `[A-Za-z0-9]`
    AsciiAlnum = 0,
    /// ASCII space, tab, newline, carriage return, form feed, vertical tab.
    AsciiSpace = 1,
    /// ASCII punctuation and symbols (`!` to `~` that are not letters or digits).
    AsciiPunct = 2,
    /// Han ideographs, CJK symbols and punctuation, fullwidth forms.
    Cjk = 3,
    /// Hiragana, katakana, halfwidth katakana.
    Kana = 4,
    /// Hangul syllables and jamo.
    Hangul = 5,
    /// Emoji and pictographic symbols.
    Emoji = 6,
    /// Joiners and modifiers inside emoji sequences (ZWJ, variation selectors, tags).
    Joiner = 7,
    /// Any other code point of the Basic Multilingual Plane (accented Latin, Cyrillic,
    /// Greek, Arabic, Indic, symbols, ...).
    Other = 8,
    /// ASCII control characters other than whitespace (NUL, ESC, DEL, ...).
    AsciiControl = 9,
    /// Code points above U+FFFF that are not emoji or tags (CJK extension B and later,
    /// math alphanumerics, historic scripts, supplementary private use): real tokenizers
    /// spend several byte-level tokens on each.
    Astral = 10,
}

/// Class names as exposed to Python, in class order.
pub const CLASS_NAMES: [&str; N_CLASSES] = [
    "ascii_alnum",
    "ascii_space",
    "ascii_punct",
    "cjk",
    "kana",
    "hangul",
    "emoji",
    "joiner",
    "other",
    "ascii_control",
    "astral",
];

const fn ascii_table() -> [u8; 128] {
    let mut t = [Class::AsciiPunct as u8; 128];
    let mut b = 0;
    while b < 128 {
        let c = b as u8;
        if c.is_ascii_alphanumeric() {
            t[b] = Class::AsciiAlnum as u8;
        } else if matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c) {
            t[b] = Class::AsciiSpace as u8;
        } else if c < 0x20 || c == 0x7f {
            t[b] = Class::AsciiControl as u8;
        }
        b += 1;
    }
    t
}

static ASCII_CLASS: [u8; 128] = ascii_table();

/// Class of a non-ASCII code point.
pub fn classify_non_ascii(c: u32) -> Class {
    match c {
        0x200D | 0xFE00..=0xFE0F | 0xE0020..=0xE007F | 0x20E3 => Class::Joiner,
        0x3040..=0x30FF | 0x31F0..=0x31FF | 0xFF66..=0xFF9F => Class::Kana,
        0x1100..=0x11FF | 0x3130..=0x318F | 0xA960..=0xA97F | 0xAC00..=0xD7FF => Class::Hangul,
        0x2E80..=0x303F
        | 0x3190..=0x31EF
        | 0x3400..=0x4DBF
        | 0x4E00..=0x9FFF
        | 0xF900..=0xFAFF
        | 0xFE30..=0xFE4F
        | 0xFF00..=0xFFEF => Class::Cjk,
        0x2190..=0x21FF
        | 0x2300..=0x23FF
        | 0x25A0..=0x27BF
        | 0x2900..=0x297F
        | 0x2B00..=0x2BFF
        | 0x1F000..=0x1FAFF => Class::Emoji,
        0x10000.. => Class::Astral,
        _ => Class::Other,
    }
}

/// Number of run features.
pub const N_RUNS: usize = 10;

/// Run features, in the order of [`Counts::runs`]. They follow how BPE tokenizers
/// pre-split ASCII text: every letter run, digit group, punctuation run and free-standing
/// whitespace run becomes at least one token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Run {
    /// Maximal runs of ASCII letters.
    Words = 0,
    /// Letters beyond the fourth in each letter segment (a letter run split at
    /// lowercase-to-uppercase switches).
    WordExcess = 1,
    /// Groups of up to 3 digits in each maximal ASCII digit run.
    DigitGroups = 2,
    /// Maximal runs of ASCII punctuation/symbols.
    PunctRuns = 3,
    /// Punctuation characters beyond the first in each punctuation run.
    PunctExtra = 4,
    /// Maximal ASCII whitespace runs, except a single space right before a letter or
    /// punctuation (which the tokenizer merges into the next token), plus one for each
    /// indentation that follows a line break inside a run.
    SpaceRuns = 5,
    /// Letters beyond the twelfth in each letter segment (ids, hashes, random text:
    /// real tokenizers split these every 2-3 characters).
    WordLong = 6,
    /// Lowercase-to-uppercase switches inside letter runs (camelCase, base64).
    CaseSwitches = 7,
    /// `\n` and `\r` in a whitespace run after its first character.
    NewlineExtra = 8,
    /// Other whitespace in a whitespace run after its first character (not counting
    /// the first character of an indentation after a line break).
    SpaceExtra = 9,
}

/// Run feature names as exposed to Python, in run order.
pub const RUN_NAMES: [&str; N_RUNS] = [
    "words",
    "word_excess",
    "digit_groups",
    "punct_runs",
    "punct_extra",
    "space_runs",
    "word_long",
    "case_switches",
    "newline_extra",
    "space_extra",
];

/// Per-class code point counts of a text, its run features and its UTF-8 length.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Code points per [`Class`].
    pub classes: [u64; N_CLASSES],
    /// Run features per [`Run`].
    pub runs: [u64; N_RUNS],
    /// UTF-8 length in bytes.
    pub bytes: u64,
}

impl Counts {
    /// Number of code points.
    pub fn chars(&self) -> u64 {
        self.classes.iter().sum()
    }
}

// Kinds of code point for the run state machine.
const K_LETTER: u8 = 0;
const K_DIGIT: u8 = 1;
const K_SPACE: u8 = 2; // ' '
const K_WS: u8 = 3; // other ASCII whitespace
const K_PUNCT: u8 = 4;
const K_OTHER: u8 = 5; // non-ASCII or an ASCII control character

const fn kind_table() -> [u8; 128] {
    let mut t = [K_PUNCT; 128];
    let mut b = 0;
    while b < 128 {
        let c = b as u8;
        if c.is_ascii_alphabetic() {
            t[b] = K_LETTER;
        } else if c.is_ascii_digit() {
            t[b] = K_DIGIT;
        } else if c == b' ' {
            t[b] = K_SPACE;
        } else if matches!(c, b'\t' | b'\n' | b'\r' | 0x0b | 0x0c) {
            t[b] = K_WS;
        } else if c < 0x20 || c == 0x7f {
            t[b] = K_OTHER; // a control character stands alone, like a non-ASCII one
        }
        b += 1;
    }
    t
}

static KIND: [u8; 128] = kind_table();

/// Run state: the kind of the current run and its length so far.
struct Runs {
    runs: [u64; N_RUNS],
    kind: u8,
    len: u64,
    /// The current whitespace run is exactly one ' '.
    single_space: bool,
    /// The previous byte when ASCII.
    prev: u8,
    /// Length of the current letter segment.
    seg: u64,
}

impl Runs {
    fn new() -> Self {
        Runs {
            runs: [0; N_RUNS],
            kind: u8::MAX,
            len: 0,
            seg: 0,
            single_space: false,
            prev: 0,
        }
    }

    /// Close the current run; `next` is the kind that follows (u8::MAX at the end).
    #[inline]
    fn close(&mut self, next: u8) {
        match self.kind {
            K_LETTER => {
                self.runs[Run::Words as usize] += 1;
                self.close_segment();
            }
            K_DIGIT => self.runs[Run::DigitGroups as usize] += self.len.div_ceil(3),
            K_PUNCT => {
                self.runs[Run::PunctRuns as usize] += 1;
                self.runs[Run::PunctExtra as usize] += self.len - 1;
            }
            K_SPACE | K_WS => {
                let merges = self.single_space && (next == K_LETTER || next == K_PUNCT);
                if !merges {
                    self.runs[Run::SpaceRuns as usize] += 1;
                }
            }
            _ => {}
        }
    }

    /// Add one code point of kind `k`; `b` is its byte when ASCII (else 0).
    #[inline]
    fn push(&mut self, k: u8, b: u8) {
        let group = |k: u8| if k == K_WS { K_SPACE } else { k };
        if group(k) == group(self.kind) && k != K_OTHER {
            self.len += 1;
            self.single_space = false;
            match k {
                K_LETTER => {
                    if self.prev.is_ascii_lowercase() && b.is_ascii_uppercase() {
                        self.runs[Run::CaseSwitches as usize] += 1;
                        self.close_segment();
                    }
                    self.seg += 1;
                }
                K_WS if b == b'\n' || b == b'\r' => self.runs[Run::NewlineExtra as usize] += 1,
                // Indentation after a line break is a token of its own.
                K_SPACE | K_WS if self.prev == b'\n' || self.prev == b'\r' => {
                    self.runs[Run::SpaceRuns as usize] += 1
                }
                K_SPACE | K_WS => self.runs[Run::SpaceExtra as usize] += 1,
                _ => {}
            }
            self.prev = b;
            return;
        }
        self.close(k);
        self.kind = k;
        self.len = 1;
        self.seg = 1;
        self.single_space = k == K_SPACE;
        self.prev = b;
    }

    /// Length features of the letter segment that just ended (a letter run is split into
    /// segments at lowercase-to-uppercase switches, as camelCase words are).
    #[inline]
    fn close_segment(&mut self) {
        self.runs[Run::WordExcess as usize] += self.seg.saturating_sub(4);
        self.runs[Run::WordLong as usize] += self.seg.saturating_sub(12);
        self.seg = 0;
    }
}

/// Count code points by class and run features in one pass over the UTF-8 bytes.
///
/// ```
/// use contextwindow_core::estimate::{count, Class, Run};
/// let c = count("ab 你, 12345");
/// assert_eq!(c.classes[Class::AsciiAlnum as usize], 7);
/// assert_eq!(c.classes[Class::Cjk as usize], 1);
/// assert_eq!(c.runs[Run::Words as usize], 1);
/// assert_eq!(c.runs[Run::DigitGroups as usize], 2);
/// assert_eq!(c.bytes, 13);
/// ```
pub fn count(text: &str) -> Counts {
    let mut classes = [0u64; N_CLASSES];
    let mut runs = Runs::new();
    let bytes = text.as_bytes();
    let n = bytes.len();
    let mut i = 0;
    while i < n {
        let b = bytes[i];
        if b < 0x80 {
            classes[ASCII_CLASS[b as usize] as usize] += 1;
            runs.push(KIND[b as usize], b);
            i += 1;
            continue;
        }
        // `text` is valid UTF-8, so the lead byte tells the length.
        let (cp, len) = if b < 0xE0 {
            (((b as u32 & 0x1F) << 6) | (bytes[i + 1] as u32 & 0x3F), 2)
        } else if b < 0xF0 {
            (
                ((b as u32 & 0x0F) << 12)
                    | ((bytes[i + 1] as u32 & 0x3F) << 6)
                    | (bytes[i + 2] as u32 & 0x3F),
                3,
            )
        } else {
            (
                ((b as u32 & 0x07) << 18)
                    | ((bytes[i + 1] as u32 & 0x3F) << 12)
                    | ((bytes[i + 2] as u32 & 0x3F) << 6)
                    | (bytes[i + 3] as u32 & 0x3F),
                4,
            )
        };
        classes[classify_non_ascii(cp) as usize] += 1;
        runs.push(K_OTHER, 0);
        i += len;
    }
    runs.close(u8::MAX);
    Counts {
        classes,
        runs: runs.runs,
        bytes: n as u64,
    }
}

/// How the weighted sum is turned into whole tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    Floor,
    Ceil,
}

pub use crate::image::ImageModel;

/// A token estimation profile (DESIGN.md section 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub name: &'static str,
    /// Weight per code point of each class, in 1/SCALE tokens.
    pub class_weights: [u64; N_CLASSES],
    /// Weight per run feature, in 1/SCALE tokens.
    pub run_weights: [u64; N_RUNS],
    /// Weight per UTF-8 byte, in 1/SCALE tokens.
    pub byte_weight: u64,
    pub rounding: Rounding,
    /// Tokens added per message (role markers, delimiters).
    pub message_overhead: u64,
    /// Tokens added per tool call on top of its name and arguments.
    pub tool_call_overhead: u64,
    pub image: ImageModel,
}

/// `fim`: the first seed's rule. ASCII 4 characters a token, every other code point
/// 1.5 characters a token, floor, at least 1 for non-empty text; images 765; 4 per message.
pub const FIM: Profile = Profile {
    name: "fim",
    class_weights: [
        3000, 3000, 3000, 8000, 8000, 8000, 8000, 8000, 8000, 3000, 8000,
    ],
    run_weights: [0; N_RUNS],
    byte_weight: 0,
    rounding: Rounding::Floor,
    message_overhead: 4,
    tool_call_overhead: 0,
    image: ImageModel::Fixed(765),
};

/// `bytes4`: the second seed's rule. ceil(UTF-8 bytes / 4), 4 per message.
pub const BYTES4: Profile = Profile {
    name: "bytes4",
    class_weights: [0; N_CLASSES],
    run_weights: [0; N_RUNS],
    byte_weight: 3000,
    rounding: Rounding::Ceil,
    message_overhead: 4,
    tool_call_overhead: 0,
    image: ImageModel::Fixed(765),
};

/// `conservative` (the default): one token per ASCII letter segment (a letter run split
/// at lowercase-to-uppercase switches, each switch 1/4 more), 1/8 per letter beyond the
/// fourth of a segment and 1/2 beyond the twelfth, one per group of up to 3 digits, one
/// per punctuation run plus 1/4 per further punctuation character, one per free-standing
/// whitespace run or indentation after a line break plus 1/4 per further line break and
/// 1/16 per further space; CJK, kana and hangul at 1.4 tokens per code point, other
/// non-ASCII at 0.75, emoji at 3, other code points above U+FFFF at 4 (their UTF-8
/// bytes: the most a byte-level BPE can spend), joiners at 2, ASCII control characters
/// at 1; rounded up. Set by a grid search against
/// cl100k on `../shared/corpus` text (segments of 20+ tokens: median +18% prose, +15%
/// code, +8% CJK; 2% of segments undercounted by more than 5%;
/// `tools/measure_estimates.py`) and on generated extremes (line-break runs, spaces,
/// random letters, hex, UUIDs within 5%; base64 -26%). Issue 3 replaces it with fitted
/// weights.
pub const CONSERVATIVE: Profile = Profile {
    name: "conservative",
    class_weights: [
        0, 0, 0, 16800, 16800, 16800, 36000, 24000, 9000, 12000, 48000,
    ],
    run_weights: [
        12000, 1500, 12000, 12000, 3000, 12000, 6000, 15000, 3000, 750,
    ],
    byte_weight: 0,
    rounding: Rounding::Ceil,
    message_overhead: 4,
    tool_call_overhead: 3,
    image: ImageModel::Provider,
};

/// Every built-in profile.
pub const PROFILES: [&Profile; 3] = [&CONSERVATIVE, &FIM, &BYTES4];

/// Look up a built-in profile by name.
pub fn profile(name: &str) -> crate::Result<&'static Profile> {
    PROFILES
        .iter()
        .copied()
        .find(|p| p.name == name)
        .ok_or_else(|| crate::Error::InvalidArgument {
            name: "profile".into(),
            reason: format!(
                "unknown profile {name:?}; known: {}",
                PROFILES.map(|p| p.name).join(", ")
            ),
        })
}

impl Profile {
    /// Tokens of counted text.
    pub fn tokens_from_counts(&self, c: &Counts) -> u64 {
        if c.bytes == 0 {
            return 0;
        }
        let mut sum = c.bytes * self.byte_weight;
        for (n, w) in c.classes.iter().zip(self.class_weights.iter()) {
            sum += n * w;
        }
        for (n, w) in c.runs.iter().zip(self.run_weights.iter()) {
            sum += n * w;
        }
        let t = match self.rounding {
            Rounding::Floor => sum / SCALE,
            Rounding::Ceil => sum.div_ceil(SCALE),
        };
        t.max(1)
    }

    /// Tokens of a text: 0 for `""`, at least 1 otherwise.
    ///
    /// ```
    /// use contextwindow_core::estimate::FIM;
    /// assert_eq!(FIM.text_tokens("abcdefgh"), 2);
    /// assert_eq!(FIM.text_tokens("你好世"), 2);
    /// assert_eq!(FIM.text_tokens("a"), 1);
    /// ```
    pub fn text_tokens(&self, text: &str) -> u64 {
        self.tokens_from_counts(&count(text))
    }

    /// Tokens of an image part: see [`crate::image::image_tokens`].
    pub fn image_tokens(&self, p: &Part) -> u64 {
        crate::image::image_tokens(self.image, p)
    }

    /// Tokens of one part (a tool result counts its inner parts).
    pub fn part_tokens(&self, p: &Part) -> u64 {
        match p.kind {
            PartKind::Text => self.text_tokens(p.text_str()),
            PartKind::Image => self.image_tokens(p),
            PartKind::ToolCall => {
                self.tool_call_overhead
                    + self.text_tokens(p.name.as_deref().unwrap_or(""))
                    + self.text_tokens(p.arguments.as_deref().unwrap_or(""))
            }
            PartKind::ToolResult => p.inner().iter().map(|q| self.part_tokens(q)).sum(),
            PartKind::Opaque => self.text_tokens(p.raw.as_ref().map(|r| r.get()).unwrap_or("")),
        }
    }

    /// Tokens of a message: overhead + name + every part.
    pub fn message_tokens(&self, m: &Message) -> u64 {
        self.message_overhead
            + self.text_tokens(m.name.as_deref().unwrap_or(""))
            + m.content.iter().map(|p| self.part_tokens(p)).sum::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fim_matches_seed_rule() {
        // floor(ascii/4 + nonascii/1.5), at least 1
        let cases: &[(&str, u64)] = &[
            ("", 0),
            ("a", 1),
            ("abcd", 1),
            ("abcdefg", 1),
            ("abcdefgh", 2),
            ("你", 1),
            ("你好", 1),
            ("你好世", 2),
            ("ab你好", 1), // 0.5 + 1.333 = 1.83
            ("abcd你好", 2),
            ("é", 1),
        ];
        for (t, want) in cases {
            assert_eq!(FIM.text_tokens(t), *want, "{t:?}");
        }
    }

    #[test]
    fn bytes4_is_ceil_bytes_over_4() {
        for t in ["", "a", "abcd", "abcde", "你", "你好", "👨‍👩‍👧"] {
            let want = (t.len() as u64).div_ceil(4);
            assert_eq!(BYTES4.text_tokens(t), want, "{t:?}");
        }
    }

    #[test]
    fn runs() {
        let c = count("Hello,  world!!\n\n1234567 x");
        // letter runs: Hello, world, x; excess: 1 + 1
        assert_eq!(c.runs[Run::Words as usize], 3);
        assert_eq!(c.runs[Run::WordExcess as usize], 2);
        // 1234567 -> 123 456 7
        assert_eq!(c.runs[Run::DigitGroups as usize], 3);
        // "," and "!!"
        assert_eq!(c.runs[Run::PunctRuns as usize], 2);
        assert_eq!(c.runs[Run::PunctExtra as usize], 1);
        // "  " (two spaces, does not merge), "\n\n"; " " before x merges
        assert_eq!(c.runs[Run::SpaceRuns as usize], 2);
        assert_eq!(c.runs[Run::NewlineExtra as usize], 1);
        assert_eq!(c.runs[Run::SpaceExtra as usize], 1);

        let c = count("parseHTTPResponse abcdefghijklmnop\n    x");
        // segments: parse | HTTPResponse (no lower-to-upper switch inside HTTPR), abc...p
        assert_eq!(c.runs[Run::CaseSwitches as usize], 1);
        assert_eq!(c.runs[Run::WordExcess as usize], 1 + 8 + 12);
        assert_eq!(c.runs[Run::WordLong as usize], 4);
        // " " before abc... merges; "\n    " is a line break, then an indentation run:
        // 2 runs, 3 extra spaces
        assert_eq!(c.runs[Run::SpaceRuns as usize], 2);
        assert_eq!(c.runs[Run::SpaceExtra as usize], 3);
    }

    #[test]
    fn classes() {
        let c = count("Hi, 世界 ひら 한국 🙂\u{200d}é\n");
        assert_eq!(c.classes[Class::AsciiAlnum as usize], 2);
        assert_eq!(c.classes[Class::AsciiPunct as usize], 1);
        assert_eq!(c.classes[Class::AsciiSpace as usize], 5);
        assert_eq!(c.classes[Class::Cjk as usize], 2);
        assert_eq!(c.classes[Class::Kana as usize], 2);
        assert_eq!(c.classes[Class::Hangul as usize], 2);
        assert_eq!(c.classes[Class::Emoji as usize], 1);
        assert_eq!(c.classes[Class::Joiner as usize], 1);
        assert_eq!(c.classes[Class::Other as usize], 1);
        assert_eq!(c.bytes, "Hi, 世界 ひら 한국 🙂\u{200d}é\n".len() as u64);
    }

    #[test]
    fn controls_and_astral() {
        let c = count("\u{1b}[0m\u{20000}\u{1D400}\u{1F600}");
        assert_eq!(c.classes[Class::AsciiControl as usize], 1);
        assert_eq!(c.classes[Class::Astral as usize], 2); // CJK ext B, math bold A
        assert_eq!(c.classes[Class::Emoji as usize], 1);
        assert_eq!(CONSERVATIVE.text_tokens("\u{0}\u{0}"), 2);
        assert_eq!(CONSERVATIVE.text_tokens("\u{20000}"), 4);
        assert_eq!(FIM.text_tokens("\u{20000}\u{20000}\u{20000}"), 2);
    }

    #[test]
    fn conservative_never_below_one_per_cjk_or_emoji() {
        assert_eq!(CONSERVATIVE.text_tokens("你好世界"), 6); // 4 * 1.4 = 5.6
        assert_eq!(CONSERVATIVE.text_tokens("ひらがな"), 6);
        assert_eq!(CONSERVATIVE.text_tokens("한국어"), 5); // 4.2
        assert_eq!(CONSERVATIVE.text_tokens("🙂🙂"), 6);
        // hello(1.125) world(1.125) !(1): the single space merges into "world"
        assert_eq!(CONSERVATIVE.text_tokens("hello world!"), 4);
        // x(1) ' ='(1) ' '(1) 1(1) \\(1) nx(1): cl100k gives 5 per repetition too
        assert_eq!(CONSERVATIVE.text_tokens("x = 1\\nx = 1"), 9);
    }
}
