//! Token estimation (DESIGN.md section 3).
//!
//! `fim` and `bytes4` are the seeds' rules. The fitted profiles (`cl100k`, `tekken`)
//! weigh the single-pass features of [`crate::features`] with integer weights (units of
//! 1/[`SCALE`] token) fitted by `tools/fit_profiles.py` against the real tokenizers and
//! stored in `data/profiles.json`; `build.rs` turns that file into constants at build
//! time. `conservative` has a vocabulary of its own (the keys that are tokens in both
//! families, each character at its larger cost), weights fitted to the larger of the two
//! families' real counts, and a margin: one scan, where taking the larger of two fitted
//! estimates took a scan with both vocabularies.
//! Integer arithmetic throughout, so the Rust engine and the pure-Python reference
//! (`contextwindow._reference`) agree exactly.

#[cfg(test)]
use crate::features::scan;
use crate::features::{char_table, scan_into, Sink, Vocab, Vocabs, GROUP_TABLE, N_FEATURES};
use crate::model::{Message, Part, PartKind};

mod data {
    include!(concat!(env!("OUT_DIR"), "/profile_data.rs"));
}

const fn same_names(a: &[&str], b: &[&str]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        let (x, y) = (a[i].as_bytes(), b[i].as_bytes());
        if x.len() != y.len() {
            return false;
        }
        let mut j = 0;
        while j < x.len() {
            if x[j] != y[j] {
                return false;
            }
            j += 1;
        }
        i += 1;
    }
    true
}

// The data file's features must be the scanner's, in the same order.
const _: () = assert!(same_names(&data::FEATURES, &crate::features::FEATURE_NAMES));

/// Weight unit of the fitted profiles: a weight of `SCALE` is one token per feature count.
pub const SCALE: i64 = data::SCALE;

/// The profile data file, as embedded at build time (JSON).
pub const PROFILE_JSON: &str = include_str!("../data/profiles.json");

/// Tokenizer families with fitted weights and overheads.
pub const FAMILY_NAMES: [&str; 2] = ["cl100k", "tekken"];

/// The built-in vocabularies: the families', then `conservative`'s (index 2 of the
/// weight tables).
pub const VOCAB_NAMES: [&str; 3] = ["cl100k", "tekken", "conservative"];

/// Letter pairs rare inside tokens of both families (`data/profiles.json`).
pub static RARE_BIGRAMS: [u8; crate::features::RARE_BYTES] = data::RARE_BIGRAMS;

/// [`RARE_BIGRAMS`] as the scanner reads it ([`crate::features::rare_pairs`]).
static RARE_PAIRS: [u8; crate::features::RARE_PAIRS] =
    crate::features::rare_pairs(&data::RARE_BIGRAMS);

/// The vocabularies' characters tables ([`crate::features::char_table`]), built at
/// compile time from their cost tables and the characters of their n-gram tokens.
static CL100K_CHARS: [u8; 0x10000] = char_table(
    &GROUP_TABLE,
    include_bytes!("../data/cl100k.cost"),
    data::PAIR_CHARS[0],
);
static TEKKEN_CHARS: [u8; 0x10000] = char_table(
    &GROUP_TABLE,
    include_bytes!("../data/tekken.cost"),
    data::PAIR_CHARS[1],
);
static CONSERVATIVE_CHARS: [u8; 0x10000] = char_table(
    &GROUP_TABLE,
    include_bytes!("../data/conservative.cost"),
    data::PAIR_CHARS[2],
);

const CL100K_VOCAB: Vocab = Vocab {
    rare: &RARE_PAIRS,
    bloom: include_bytes!("../data/cl100k.bloom"),
    table: include_bytes!("../data/cl100k.cost"),
    chars: &CL100K_CHARS,
    cjk_blocks: true,
    remix: false,
    runs: &data::RUN_CHARS[0],
};

const TEKKEN_VOCAB: Vocab = Vocab {
    rare: &RARE_PAIRS,
    bloom: include_bytes!("../data/tekken.bloom"),
    table: include_bytes!("../data/tekken.cost"),
    chars: &TEKKEN_CHARS,
    cjk_blocks: false,
    remix: true,
    runs: &data::RUN_CHARS[1],
};

/// `conservative`'s: a key is a token when it is one in both families; a character
/// costs what the dearer family spends on it; a punctuation run merges as in the family
/// that merges it less (`tools/fit_profiles.py`).
const CONSERVATIVE_VOCAB: Vocab = Vocab {
    rare: &RARE_PAIRS,
    bloom: include_bytes!("../data/conservative.bloom"),
    table: include_bytes!("../data/conservative.cost"),
    chars: &CONSERVATIVE_CHARS,
    cjk_blocks: true,
    remix: false,
    runs: &data::RUN_CHARS[2],
};

static VOCABS: [Vocab; 3] = [CL100K_VOCAB, TEKKEN_VOCAB, CONSERVATIVE_VOCAB];

/// The built-in vocabularies as unit types: the scanner monomorphized for one of them
/// sees the filter addresses and settings as constants.
struct Builtin<const F: usize>;

static ONE: [[Vocab; 1]; 3] = [[CL100K_VOCAB], [TEKKEN_VOCAB], [CONSERVATIVE_VOCAB]];

impl<const F: usize> Vocabs<1> for Builtin<F> {
    #[inline(always)]
    fn vocabs(&self) -> &[Vocab; 1] {
        &ONE[F]
    }
}

/// A built-in vocabulary by name ([`VOCAB_NAMES`]).
pub fn vocab(name: &str) -> Option<Vocab> {
    vocab_index(name).map(|i| VOCABS[i])
}

/// The index of a built-in vocabulary in [`VOCAB_NAMES`] (and in the data's tables).
fn vocab_index(name: &str) -> Option<usize> {
    VOCAB_NAMES.iter().position(|f| *f == name)
}

/// The characters of a built-in vocabulary's n-gram tokens, as its characters table
/// holds them ([`crate::features::char_table`]): the first and second characters of its
/// 2-character tokens, the first of its 3-character ones, and the first after the space
/// of its tokens of a space and CJK, kana or hangul characters.
pub fn pair_chars(name: &str) -> Option<[&'static [u16]; 4]> {
    vocab_index(name).map(|i| data::PAIR_CHARS[i])
}

/// Fitted weights of a vocabulary (an index into [`VOCAB_NAMES`]), in 1/SCALE tokens
/// per feature.
pub fn weights(family: usize) -> &'static [i64; N_FEATURES] {
    &data::WEIGHTS[family]
}

/// The fitted sum of one vocabulary (`F`, an index into [`VOCAB_NAMES`]), weights read
/// from the embedded table at a constant index, so each count the scanner adds is one
/// multiply-add by a constant.
#[derive(Clone, Copy)]
struct FamilySum<const F: usize>(i64);

impl<const F: usize> Sink for FamilySum<F> {
    #[inline(always)]
    fn add(&mut self, _: usize, f: usize, n: u64) {
        self.0 += data::WEIGHTS[F][f] * n as i64;
    }
}

/// Bytes per block of [`ascii_and_other`]: counts of one block fit in `u8` lanes.
const FIM_BLOCK: usize = 64;

/// Count code points by ASCII or not, in one pass (for `fim`): the ASCII bytes and the
/// bytes that start a code point (not `0b10xx_xxxx`), 64 bytes at a time so LLVM keeps
/// the counts in vector lanes; `text` is valid UTF-8, so starts minus ASCII bytes are
/// the non-ASCII code points.
fn ascii_and_other(text: &str) -> (u64, u64) {
    let bytes = text.as_bytes();
    let mut blocks = bytes.chunks_exact(FIM_BLOCK);
    let (mut ascii, mut lead) = (0u64, 0u64);
    for block in blocks.by_ref() {
        // per block: at most 64 each, so u8 sums cannot overflow
        let a: u8 = block.iter().map(|&b| (b < 0x80) as u8).sum();
        let l: u8 = block.iter().map(|&b| ((b as i8) >= -0x40) as u8).sum();
        ascii += a as u64;
        lead += l as u64;
    }
    for &b in blocks.remainder() {
        ascii += (b < 0x80) as u64;
        lead += ((b as i8) >= -0x40) as u64;
    }
    (ascii, lead - ascii)
}

/// How a profile turns text into tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextRule {
    /// First seed: floor(ASCII / 4 + other code points / 1.5), at least 1.
    Fim,
    /// Second seed: ceil(UTF-8 bytes / 4).
    Bytes4,
    /// A fitted family's weights: round to nearest, at least 1.
    Fitted { family: usize },
    /// `conservative`'s weights (vocabulary 2 of [`VOCAB_NAMES`]) times
    /// `margin_percent` / 100, rounded up.
    Conservative { margin_percent: i64 },
}

pub use crate::image::ImageModel;

/// A token estimation profile (DESIGN.md section 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub name: &'static str,
    pub rule: TextRule,
    /// Tokens added per message (role markers, delimiters).
    pub message_overhead: u64,
    /// Tokens added per tool call on top of its name and arguments.
    pub tool_call_overhead: u64,
    /// Tokens added per tool definition on top of its JSON text.
    pub tool_overhead: u64,
    /// Tokens added per message that has a `name`, on top of the name's text.
    pub name_overhead: u64,
    pub image: ImageModel,
}

/// `fim`: the first seed's rule. ASCII 4 characters a token, every other code point
/// 1.5 characters a token, floor, at least 1 for non-empty text; images 765; 4 per message.
pub const FIM: Profile = Profile {
    name: "fim",
    rule: TextRule::Fim,
    message_overhead: 4,
    tool_call_overhead: 0,
    tool_overhead: 0,
    name_overhead: 0,
    image: ImageModel::Fixed(765),
};

/// `bytes4`: the second seed's rule. ceil(UTF-8 bytes / 4), 4 per message.
pub const BYTES4: Profile = Profile {
    name: "bytes4",
    rule: TextRule::Bytes4,
    message_overhead: 4,
    tool_call_overhead: 0,
    tool_overhead: 0,
    name_overhead: 0,
    image: ImageModel::Fixed(765),
};

/// `cl100k`: fitted against tiktoken's cl100k_base (GPT-4, GPT-3.5); overheads from
/// OpenAI's chat format (`data/profiles.json`).
pub const CL100K: Profile = Profile {
    name: "cl100k",
    rule: TextRule::Fitted { family: 0 },
    message_overhead: data::OVERHEADS[0].0,
    tool_call_overhead: data::OVERHEADS[0].1,
    tool_overhead: data::OVERHEADS[0].2,
    name_overhead: data::OVERHEADS[0].3,
    image: ImageModel::Provider,
};

/// `tekken`: fitted against Mistral's Tekken tokenizer (mistral-common); overheads
/// measured on its chat format (`data/profiles.json`).
pub const TEKKEN: Profile = Profile {
    name: "tekken",
    rule: TextRule::Fitted { family: 1 },
    message_overhead: data::OVERHEADS[1].0,
    tool_call_overhead: data::OVERHEADS[1].1,
    tool_overhead: data::OVERHEADS[1].2,
    name_overhead: data::OVERHEADS[1].3,
    image: ImageModel::Provider,
};

/// `conservative` (the default): its own vocabulary and weights, fitted to the larger of
/// the `cl100k` and `tekken` real counts, plus a margin (`data/profiles.json`), rounded
/// up, and the larger overheads; set so that no more than a few percent of held-out text
/// segments are undercounted by more than 5% by either family.
pub const CONSERVATIVE: Profile = Profile {
    name: "conservative",
    rule: TextRule::Conservative {
        margin_percent: data::MARGIN_PERCENT,
    },
    message_overhead: max(data::OVERHEADS[0].0, data::OVERHEADS[1].0),
    tool_call_overhead: max(data::OVERHEADS[0].1, data::OVERHEADS[1].1),
    tool_overhead: max(data::OVERHEADS[0].2, data::OVERHEADS[1].2),
    name_overhead: max(data::OVERHEADS[0].3, data::OVERHEADS[1].3),
    image: ImageModel::Provider,
};

/// Tokens of `conservative`'s fitted sum `top` (1/[`SCALE`] tokens) with
/// `margin_percent`: `top * margin / (SCALE * 100)` rounded up, 0 when not positive. In
/// i64, since a 128-bit division is a library call, unless that overflows (past about
/// 10^16 tokens).
fn max_tokens(top: i64, margin_percent: i64) -> u64 {
    let den = SCALE * 100;
    match top.checked_mul(margin_percent) {
        Some(sum) if sum <= 0 => 0,
        Some(sum) if sum <= i64::MAX - den => ((sum + den - 1) / den) as u64,
        _ => {
            let (sum, den) = (top as i128 * margin_percent as i128, den as i128);
            if sum <= 0 {
                0
            } else {
                ((sum + den - 1) / den) as u64
            }
        }
    }
}

const fn max(a: u64, b: u64) -> u64 {
    if a > b {
        a
    } else {
        b
    }
}

/// Every built-in profile.
pub const PROFILES: [&Profile; 5] = [&CONSERVATIVE, &CL100K, &TEKKEN, &FIM, &BYTES4];

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
    /// Tokens of a text: 0 for `""`, at least 1 otherwise.
    ///
    /// ```
    /// use contextwindow_core::estimate::FIM;
    /// assert_eq!(FIM.text_tokens("abcdefgh"), 2);
    /// assert_eq!(FIM.text_tokens("你好世"), 2);
    /// assert_eq!(FIM.text_tokens("a"), 1);
    /// ```
    pub fn text_tokens(&self, text: &str) -> u64 {
        if text.is_empty() {
            return 0;
        }
        let t = match self.rule {
            TextRule::Fim => {
                let (ascii, other) = ascii_and_other(text);
                (ascii * 3000 + other * 8000) / 12_000
            }
            TextRule::Bytes4 => (text.len() as u64).div_ceil(4),
            TextRule::Fitted { family } => {
                let sum = if family == 0 {
                    let mut w = FamilySum::<0>(0);
                    scan_into(text, &Builtin::<0>, &mut w);
                    w.0
                } else {
                    let mut w = FamilySum::<1>(0);
                    scan_into(text, &Builtin::<1>, &mut w);
                    w.0
                };
                if sum <= 0 {
                    0
                } else {
                    ((sum + SCALE / 2) / SCALE) as u64
                }
            }
            TextRule::Conservative { margin_percent } => {
                let mut w = FamilySum::<2>(0);
                scan_into(text, &Builtin::<2>, &mut w);
                max_tokens(w.0, margin_percent)
            }
        };
        t.max(1)
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
            PartKind::Opaque => {
                self.text_tokens(p.raw.as_ref().map(|r| r.get()).unwrap_or(""))
                    + if unseen_document(p) {
                        UNSEEN_DOCUMENT_TOKENS
                    } else {
                        0
                    }
            }
        }
    }

    /// [`Profile::message_tokens`] of a message whose content is one text part and that
    /// has no name and no other key (a plain chat message), from its text alone.
    #[inline]
    pub fn plain_message_tokens(&self, text: &str) -> u64 {
        self.message_overhead + self.text_tokens(text)
    }

    /// Tokens of a message: overhead + name (its overhead and text) + refusal + every part.
    pub fn message_tokens(&self, m: &Message) -> u64 {
        self.message_overhead
            + m.name
                .as_deref()
                .map_or(0, |n| self.name_overhead + self.text_tokens(n))
            + m.extra
                .as_deref()
                .map_or(0, |e| self.text_tokens(&refusal(e)))
            + m.content.iter().map(|p| self.part_tokens(p)).sum::<u64>()
    }
}

/// Tokens a document given by reference adds to its JSON text, in every profile: an
/// Anthropic `document` block whose `source` is of type `url` or `file`, or an OpenAI
/// `file` part whose `file` holds a `file_id` and no `file_data`. The request does not
/// hold the document, so no rule can read its pages: this is one page at the top of the
/// 1,500-3,000 tokens a page of text that Anthropic's PDF support page gives (a page is
/// also sent as a picture; a one-page text PDF measured 2,100-2,500 tokens on Claude).
/// A document of more pages costs more than this (Known limits in the README). A
/// document whose data is in the request (`base64`, `text`, `file_data`) is counted as
/// its text, as any other block the library does not model.
pub const UNSEEN_DOCUMENT_TOKENS: u64 = 3_000;

/// Whether the opaque part `p` is a document given by reference ([`UNSEEN_DOCUMENT_TOKENS`]).
/// Its JSON is read only for a part of type `document` or `file`, with every other key
/// skipped unread.
fn unseen_document(p: &Part) -> bool {
    use serde_json::value::RawValue;
    use std::collections::HashMap;
    // an object's keys, each to its value unread; a key given twice is its last value, as
    // Python's `json` and the adapters read it (a struct would refuse it)
    type Object<'a> = HashMap<String, &'a RawValue>;
    fn object(raw: &RawValue) -> Option<Object<'_>> {
        serde_json::from_str(raw.get()).ok()
    }
    fn string(raw: &RawValue) -> Option<String> {
        serde_json::from_str(raw.get()).ok()
    }
    let Some(raw) = p.raw.as_deref() else {
        return false;
    };
    // the object under `outer`, the part's JSON read once
    let inner = |outer: &str| object(raw).and_then(|o| o.get(outer).copied().and_then(object));
    match p.type_.as_deref() {
        Some("document") => inner("source")
            .and_then(|s| s.get("type").and_then(|v| string(v)))
            .is_some_and(|t| t == "url" || t == "file"),
        Some("file") => inner("file").is_some_and(|f| {
            f.get("file_id").and_then(|v| string(v)).is_some()
                && f.get("file_data").is_none_or(|v| v.get() == "null")
        }),
        _ => false,
    }
}

/// The text of a string `refusal` among a message's other keys (`""` when there is none):
/// an OpenAI assistant message that declined to answer carries it beside `content`
/// (`null`), and the model reads it back as the message's text. Looked for only when the
/// key's name is in the JSON text; any other value of it is not text and counts nothing.
fn refusal(extra: &serde_json::value::RawValue) -> std::borrow::Cow<'_, str> {
    #[derive(serde::Deserialize)]
    struct Keys<'a> {
        #[serde(borrow, default)]
        refusal: Option<std::borrow::Cow<'a, str>>,
    }
    let text = extra.get();
    if memchr::memmem::find(text.as_bytes(), b"\"refusal\"").is_none() {
        return "".into();
    }
    serde_json::from_str::<Keys<'_>>(text)
        .ok()
        .and_then(|k| k.refusal)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_message_costs_what_the_same_message_built_costs() {
        use crate::model::{Message, Part, PartKind, Role};
        let texts = [
            "",
            "hi",
            "The quick brown fox.",
            "これは日本語の文章です。",
            "👩‍👩‍👧 ok\n\n",
        ];
        for p in PROFILES {
            for role in [Role::User, Role::Assistant] {
                for t in texts {
                    let mut part = Part::empty(PartKind::Text);
                    part.text = Some(t.to_owned());
                    let built = p.message_tokens(&Message::new(role, vec![part]));
                    assert_eq!(p.plain_message_tokens(t), built, "{} {t:?}", p.name);
                }
            }
        }
    }

    #[test]
    fn a_document_by_reference_adds_a_page_to_its_json_text() {
        use crate::model::{Part, PartKind};
        let opaque = |ty: &str, raw: &str| Part {
            type_: Some(ty.to_owned()),
            raw: Some(serde_json::value::RawValue::from_string(raw.to_owned()).unwrap()),
            ..Part::empty(PartKind::Opaque)
        };
        // (type, raw, by reference)
        let cases = [
            (
                "document",
                r#"{"type":"document","source":{"type":"url","url":"https://x/a.pdf"}}"#,
                true,
            ),
            (
                "document",
                r#"{"type":"document","source":{"type":"file","file_id":"file_01"}}"#,
                true,
            ),
            (
                "document",
                r#"{"source":{"file_id":"f","type":"file"},"type":"document","title":"t"}"#,
                true,
            ),
            (
                "file",
                r#"{"type":"file","file":{"file_id":"file-abc"}}"#,
                true,
            ),
            (
                "file",
                r#"{"type":"file","file":{"file_id":"file-abc","file_data":null}}"#,
                true,
            ),
            // a key given twice is its last value, as Python's json reads it
            (
                "document",
                r#"{"type":"document","source":{"type":"base64","type":"url"}}"#,
                true,
            ),
            (
                "file",
                r#"{"type":"file","file":{"file_data":"x","file_id":"f","file_data":null}}"#,
                true,
            ),
            (
                "file",
                r#"{"type":"file","file":{"file_data":null,"file_id":"f","file_data":"x"}}"#,
                false,
            ),
            // the document is in the request: its text is counted
            (
                "document",
                r#"{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0x"}}"#,
                false,
            ),
            (
                "document",
                r#"{"type":"document","source":{"type":"text","media_type":"text/plain","data":"hi"}}"#,
                false,
            ),
            (
                "file",
                r#"{"type":"file","file":{"file_id":"f","file_data":"data:application/pdf;base64,JVBE"}}"#,
                false,
            ),
            (
                "file",
                r#"{"type":"file","file":{"filename":"a.pdf"}}"#,
                false,
            ),
            // not a reference the rule knows: no string file_id, no source object
            ("file", r#"{"type":"file","file":{"file_id":5}}"#, false),
            ("file", r#"{"type":"file","file":"file-abc"}"#, false),
            (
                "document",
                r#"{"type":"document","source":"https://x/a.pdf"}"#,
                false,
            ),
            (
                "document",
                r#"{"type":"document","source":{"type":null}}"#,
                false,
            ),
            ("document", r#"[1, 2]"#, false),
            // another block type with the same keys
            (
                "image",
                r#"{"type":"image","source":{"type":"url","url":"u"}}"#,
                false,
            ),
            (
                "search_result",
                r#"{"type":"search_result","source":{"type":"url"}}"#,
                false,
            ),
        ];
        for p in PROFILES {
            for (ty, raw, by_reference) in cases {
                let part = opaque(ty, raw);
                let text = p.text_tokens(raw);
                let want = text
                    + if by_reference {
                        UNSEEN_DOCUMENT_TOKENS
                    } else {
                        0
                    };
                assert_eq!(p.part_tokens(&part), want, "{} {raw}", p.name);
                // inside a tool result, the same
                let result = Part {
                    content: Some(vec![part]),
                    ..Part::empty(PartKind::ToolResult)
                };
                assert_eq!(p.part_tokens(&result), want, "{} {raw}", p.name);
            }
        }
        // fim: 24 ASCII characters / 4, and the page
        assert_eq!(
            FIM.part_tokens(&opaque("file", r#"{"file":{"file_id":"f"}}"#)),
            3_006
        );
    }

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

    /// The weighted-sum sinks give the dot product of the scanner's feature counts.
    #[test]
    fn sums_equal_the_dot_product_of_the_counts() {
        let dot = |f: &crate::features::Features, family: usize| -> i64 {
            f.iter()
                .zip(weights(family))
                .map(|(n, w)| *n as i64 * w)
                .sum()
        };
        let texts = [
            "The quick brown fox, again.\n\n  x = foo(bar)[0]; // 12345 HTTPResponse",
            "これは日本語の文章です。中文文本也在这里。한국어 문장입니다. 😀👨\u{200d}👩 é",
            "{\"role\": \"user\", \"content\": \"qzxjvkw 0xDEADBEEF aGVsbG8gd29ybGQ=\"}\t\t\r\n",
        ];
        for t in texts {
            // one scan with all three vocabularies counts what three scans count
            let [a, b, c] = scan(t, &VOCABS);
            let mut one = FamilySum::<0>(0);
            scan_into(t, &Builtin::<0>, &mut one);
            let mut two = FamilySum::<1>(0);
            scan_into(t, &Builtin::<1>, &mut two);
            let mut three = FamilySum::<2>(0);
            scan_into(t, &Builtin::<2>, &mut three);
            assert_eq!(one.0, dot(&a, 0), "{t:?}");
            assert_eq!(two.0, dot(&b, 1), "{t:?}");
            assert_eq!(three.0, dot(&c, 2), "{t:?}");
        }
    }

    /// The i64 path equals the 128-bit computation on both sides of its overflow.
    #[test]
    fn max_tokens_rounds_up_without_128_bit_division() {
        let wide = |top: i64, m: i64| {
            let (sum, den) = (top as i128 * m as i128, SCALE as i128 * 100);
            if sum <= 0 {
                0
            } else {
                ((sum + den - 1) / den) as u64
            }
        };
        let m = data::MARGIN_PERCENT;
        let edge = (i64::MAX - SCALE * 100) / m;
        for top in [
            -5,
            0,
            1,
            SCALE - 1,
            SCALE,
            123_456_789,
            edge - 1,
            edge,
            edge + 1,
            i64::MAX / m + 1,
            i64::MAX,
            i64::MIN,
        ] {
            assert_eq!(max_tokens(top, m), wide(top, m), "{top}");
        }
        // by hand: 1,000 tokens' sum with a 10% margin is 1,100 tokens
        assert_eq!(max_tokens(1_000 * SCALE, 110), 1_100);
        assert_eq!(max_tokens(1_000 * SCALE + 1, 110), 1_101);
    }

    #[test]
    fn bytes4_is_ceil_bytes_over_4() {
        for t in ["", "a", "abcd", "abcde", "你", "你好", "👨‍👩‍👧"] {
            let want = (t.len() as u64).div_ceil(4);
            assert_eq!(BYTES4.text_tokens(t), want, "{t:?}");
        }
    }
}
