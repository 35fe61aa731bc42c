//! JSON entry points used by the Python binding and the CLI.
//!
//! Each takes canonical messages as a JSON array and returns JSON text. A trimming
//! result is `{"messages": [op, ...], "report": {...}}` where an op is `{"src": i}` for
//! input message `i` unchanged, or `{"src": i | null, "msg": message}` for a changed or
//! new message.

use serde::Serialize;
use std::borrow::Cow;

use crate::estimate::{profile, vocab, VOCAB_NAMES};
use crate::features::{scan, FEATURE_NAMES};
use crate::model::{parse_messages, pinned_at, Format, Message};
use crate::pairs::{validate, Missing};
use crate::trim::{repair_report, trim_turn_count, trim_turns, Outcome, Report, TrimOptions};
use crate::turns::segment;
use crate::Result;

#[derive(Serialize)]
struct Op<'a> {
    src: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    msg: Option<Cow<'a, Message>>,
}

#[derive(Serialize)]
struct OutcomeJson<'a> {
    messages: Vec<Op<'a>>,
    report: &'a Report,
}

fn outcome_json(o: &Outcome<'_>) -> Result<String> {
    outcome_json_pinned(o, &[], &[])
}

/// [`outcome_json`] of a trim of `original` with the messages at `pins` pinned
/// ([`with_pins`]): a changed message that only `pins` pinned goes out unpinned, as it
/// came in.
fn outcome_json_pinned(o: &Outcome<'_>, original: &[Message], pins: &[usize]) -> Result<String> {
    let messages = o
        .messages
        .iter()
        .map(|w| Op {
            src: w.src,
            msg: w.changed().then(|| match w.src {
                Some(s) if w.msg.pinned && pins.contains(&s) && !original[s].pinned => {
                    let mut m = w.msg.clone().into_owned();
                    m.pinned = false;
                    Cow::Owned(m)
                }
                _ => Cow::Borrowed(&*w.msg),
            }),
        })
        .collect();
    Ok(serde_json::to_string(&OutcomeJson {
        messages,
        report: &o.report,
    })?)
}

fn opts<'p>(profile_name: &str, breadcrumb: bool, format: &str) -> Result<TrimOptions<'p>> {
    Ok(TrimOptions {
        profile: profile(profile_name)?,
        breadcrumb,
        format: Format::parse(format)?,
    })
}

/// Tokens of a text under a profile.
pub fn estimate_text(text: &str, profile_name: &str) -> Result<u64> {
    Ok(profile(profile_name)?.text_tokens(text))
}

/// The single-pass features of a text for one tokenizer family, as `(name, count)`
/// pairs (see [`crate::features`]), plus `("bytes", UTF-8 length)`.
pub fn count_features(text: &str, family: &str) -> Result<Vec<(&'static str, u64)>> {
    let v = vocab(family).ok_or_else(|| crate::Error::InvalidArgument {
        name: "family".into(),
        reason: format!(
            "unknown family {family:?}; known: {}",
            VOCAB_NAMES.join(", ")
        ),
    })?;
    let [f] = scan(text, &[v]);
    let mut out: Vec<(&'static str, u64)> = FEATURE_NAMES.iter().copied().zip(f).collect();
    out.push(("bytes", text.len() as u64));
    Ok(out)
}

/// Tokens of each text under a profile, in order (one profile lookup for the batch).
pub fn estimate_many<S: AsRef<str>>(texts: &[S], profile_name: &str) -> Result<Vec<u64>> {
    let p = profile(profile_name)?;
    Ok(texts.iter().map(|t| p.text_tokens(t.as_ref())).collect())
}

/// Total tokens of each conversation (canonical message JSON), in order.
///
/// An error names the conversation: its message index is prefixed with
/// `conversation {i}: `.
pub fn count_many<S: AsRef<str>>(conversations: &[S], profile_name: &str) -> Result<Vec<u64>> {
    let p = profile(profile_name)?;
    conversations
        .iter()
        .enumerate()
        .map(|(i, json)| {
            let msgs = parse_messages(json.as_ref()).map_err(|e| in_conversation(i, e))?;
            Ok(msgs.iter().map(|m| p.message_tokens(m)).sum())
        })
        .collect()
}

fn in_conversation(i: usize, e: crate::Error) -> crate::Error {
    match e {
        crate::Error::InvalidMessage {
            index,
            field,
            reason,
            offset,
        } => crate::Error::InvalidMessage {
            index,
            field,
            reason: format!("{reason} (conversation {i})"),
            offset,
        },
        crate::Error::InvalidJson {
            line,
            column,
            reason,
        } => crate::Error::InvalidJson {
            line,
            column,
            reason: format!("{reason} (conversation {i})"),
        },
        other => other,
    }
}

/// Tokens of every message, in order.
pub fn count_messages(messages_json: &str, profile_name: &str) -> Result<Vec<u64>> {
    count_parsed(&parse_messages(messages_json)?, profile_name)
}

/// Tokens of every message of an already built conversation, in order (the Python
/// binding's dict reader builds the messages without JSON).
pub fn count_parsed(messages: &[Message], profile_name: &str) -> Result<Vec<u64>> {
    let p = profile(profile_name)?;
    Ok(messages.iter().map(|m| p.message_tokens(m)).collect())
}

/// Tokens of each message of a plain chat given as its texts: every message a user or
/// assistant message whose content is one text and nothing else (no name, no other key),
/// as the Python binding's dict reader finds `{"role": ..., "content": "..."}` dicts.
/// Each count is [`count_parsed`]'s for that message: the profile's per-message overhead
/// plus the text's tokens.
pub fn count_plain<S: AsRef<str>>(texts: &[S], profile_name: &str) -> Result<Vec<u64>> {
    let p = profile(profile_name)?;
    Ok(texts
        .iter()
        .map(|t| p.plain_message_tokens(t.as_ref()))
        .collect())
}

/// Preamble, turns, tool units and current request as JSON.
pub fn segment_turns(messages_json: &str) -> Result<String> {
    #[derive(Serialize)]
    struct Seg {
        preamble_end: usize,
        turns: Vec<(usize, usize)>,
        units: Vec<Vec<usize>>,
        current_request: Option<usize>,
    }
    let msgs = parse_messages(messages_json)?;
    let s = segment(&msgs);
    Ok(serde_json::to_string(&Seg {
        preamble_end: s.preamble_end,
        turns: s.turns.iter().map(|r| (r.start, r.end)).collect(),
        units: s.units,
        current_request: s.current_request,
    })?)
}

/// Violations of the provider's rules as a JSON array.
pub fn validate_messages(messages_json: &str, format: &str) -> Result<String> {
    let msgs = parse_messages(messages_json)?;
    Ok(serde_json::to_string(&validate(
        &msgs,
        Format::parse(format)?,
    ))?)
}

/// `repair_tool_pairs`: outcome JSON.
pub fn repair_tool_pairs(
    messages_json: &str,
    format: &str,
    missing: &str,
    profile_name: &str,
) -> Result<String> {
    let msgs = parse_messages(messages_json)?;
    let o = repair_report(
        &msgs,
        Missing::parse(missing)?,
        opts(profile_name, false, format)?,
    );
    outcome_json(&o)
}

/// `messages` with the messages at `pins` (input indices) pinned: borrowed when `pins` is
/// empty. Errors with [`crate::Error::InvalidArgument`] naming the first index that is
/// not a message index.
pub fn with_pins<'m>(messages: &'m [Message], pins: &[usize]) -> Result<Cow<'m, [Message]>> {
    pinned_at(
        messages,
        pins,
        0,
        ("a message index", "there are no messages"),
    )
}

/// `trim_turns`: outcome JSON. `pins`: input indices to treat as pinned.
pub fn trim_turns_json(
    messages_json: &str,
    budget: u64,
    profile_name: &str,
    breadcrumb: bool,
    format: &str,
    pins: &[usize],
) -> Result<String> {
    let msgs = parse_messages(messages_json)?;
    trim_turns_parsed(&msgs, budget, profile_name, breadcrumb, format, pins)
}

/// `trim_turns` on already built messages: outcome JSON. `pins`: input indices to treat
/// as pinned.
pub fn trim_turns_parsed(
    messages: &[Message],
    budget: u64,
    profile_name: &str,
    breadcrumb: bool,
    format: &str,
    pins: &[usize],
) -> Result<String> {
    let pinned = with_pins(messages, pins)?;
    let o = trim_turns(&pinned, budget, opts(profile_name, breadcrumb, format)?);
    outcome_json_pinned(&o, messages, pins)
}

/// `trim_turn_count`: outcome JSON. `pins`: input indices to treat as pinned.
pub fn trim_turn_count_json(
    messages_json: &str,
    max_turns: u64,
    profile_name: &str,
    breadcrumb: bool,
    format: &str,
    pins: &[usize],
) -> Result<String> {
    let msgs = parse_messages(messages_json)?;
    trim_turn_count_parsed(&msgs, max_turns, profile_name, breadcrumb, format, pins)
}

/// `trim_turn_count` on already built messages: outcome JSON. `pins`: input indices to
/// treat as pinned.
pub fn trim_turn_count_parsed(
    messages: &[Message],
    max_turns: u64,
    profile_name: &str,
    breadcrumb: bool,
    format: &str,
    pins: &[usize],
) -> Result<String> {
    let pinned = with_pins(messages, pins)?;
    let o = trim_turn_count(&pinned, max_turns, opts(profile_name, breadcrumb, format)?);
    outcome_json_pinned(&o, messages, pins)
}
