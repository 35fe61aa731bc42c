//! Tool-pair validation and repair (DESIGN.md section 4).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::error::quote;
use crate::model::{
    anthropic_only_block, message_level_block, Format, Message, Part, PartKind, Role,
    RESULTS_REMOVED, USER_ONLY_PARTS,
};
use crate::turns::{resolve, CallRef, Resolution};

/// One violation of a provider's message rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Index of the offending message.
    pub index: usize,
    /// Machine-readable kind: `orphan_result`, `duplicate_result`, `unanswered_call`,
    /// `result_after_content`, `result_outside_tool_message`, `empty_tool_message`,
    /// `call_outside_assistant`, `duplicate_call`, `result_outside_user_message`,
    /// `first_not_user`, `not_alternating`, `role_not_allowed`, `empty_content`,
    /// `trailing_whitespace`, `detail_not_allowed`, `image_not_allowed`,
    /// `tool_name_not_allowed`, `call_id_not_allowed`, `reused_call_id`,
    /// `block_not_allowed`.
    pub code: &'static str,
    /// The tool call id concerned, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// What is wrong, in words.
    pub detail: String,
}

/// A role with its indefinite article, as a violation's message says it ("an assistant",
/// "a user": the article follows the sound, and "user" starts with a consonant sound).
fn with_article(role: Role) -> String {
    let article = match role {
        Role::Assistant => "an",
        Role::System | Role::Developer | Role::User | Role::Tool => "a",
    };
    format!("{article} {}", role.name())
}

fn v(index: usize, code: &'static str, call_id: Option<&str>, detail: String) -> Violation {
    Violation {
        index,
        code,
        call_id: call_id.map(str::to_owned),
        detail,
    }
}

fn call_ids(m: &Message) -> Vec<&str> {
    m.tool_calls()
        .map(|p| p.id.as_deref().unwrap_or(""))
        .collect()
}

fn result_ids(m: &Message) -> impl Iterator<Item = &str> {
    m.content
        .iter()
        .filter(|p| p.kind == PartKind::ToolResult)
        .map(|p| p.call_id.as_deref().unwrap_or(""))
}

/// List every violation of the provider's rules, in message order.
///
/// OpenAI: every tool message answers a call of the assistant message before its run of
/// tool messages, and every call is answered before the next non-tool message.
/// Anthropic: tool results sit in the user message right after their calls, ahead of
/// other content; the first message is a user message; roles alternate; system prompts
/// only lead; a user or assistant message holds no text block that is empty or of
/// whitespace only (see `blank`), its `tool_result` blocks none in their content lists
/// (`empty_content`, one for each), and it has content unless it is the final assistant
/// message (`empty_content`); the leading system message, when written as a list of text
/// blocks, holds no such block either; the final message, when it is an assistant
/// message (a prefill), does not end in whitespace (`trailing_whitespace`); a tool call's
/// name matches `^[a-zA-Z0-9_-]{1,64}$` (`tool_name_not_allowed`), its id
/// `^[a-zA-Z0-9_-]+$` (`call_id_not_allowed`), and no id is used by two assistant
/// messages (`reused_call_id`; see `check_calls_anthropic`).
/// OpenAI: an assistant message has no `"tool_calls": []` (`empty_content`), an
/// image's `detail` is `"low"`, `"high"` or `"auto"` (`detail_not_allowed`, one for each
/// other, in the message's parts and its tool results' parts, reported first), and images
/// are in user messages only (`image_not_allowed`, one for each image of another role's
/// message or of a tool result, reported next; see `refused_images`).
pub fn validate(messages: &[Message], format: Format) -> Vec<Violation> {
    match format {
        Format::OpenAI => validate_openai(messages),
        Format::Anthropic => validate_anthropic(messages),
    }
}

/// Flag tool calls outside assistant messages, and calls of `m` that `answered` lacks.
fn check_calls<'m>(
    out: &mut Vec<Violation>,
    i: usize,
    m: &'m Message,
    answered: impl FnOnce() -> HashSet<&'m str>,
    place: &str,
) {
    if !m.has_tool_calls() {
        return;
    }
    if m.role != Role::Assistant {
        let detail = format!("a {} message holds tool calls", m.role);
        out.push(v(i, "call_outside_assistant", None, detail));
        return;
    }
    let answered = answered();
    let mut seen: HashSet<&str> = HashSet::new();
    for id in call_ids(m) {
        if !seen.insert(id) {
            let detail = format!("tool call id {} is used twice in one message", quote(id));
            out.push(v(i, "duplicate_call", Some(id), detail));
        } else if !answered.contains(id) {
            let detail = format!("tool call {} has no result {place}", quote(id));
            out.push(v(i, "unanswered_call", Some(id), detail));
        }
    }
}

/// The `detail` values the Chat Completions API takes for an image (it refuses any
/// other, `"Low"` too; counting prices every other as `"high"`: fresh20a F7).
pub const OPENAI_DETAILS: [&str; 3] = ["low", "high", "auto"];

/// The `detail` of each image of `m` (its parts, then each tool result's parts, in
/// order) that the Chat Completions API refuses.
fn refused_details(m: &Message) -> Vec<&str> {
    let mut out = Vec::new();
    for p in &m.content {
        let inner = p.content.as_deref().unwrap_or(&[]);
        for q in std::iter::once(p).chain(inner.iter()) {
            if q.kind != PartKind::Image {
                continue;
            }
            if let Some(d) = q.detail.as_deref() {
                if !OPENAI_DETAILS.contains(&d) {
                    out.push(d);
                }
            }
        }
    }
    out
}

/// Where each image of `m` is that the Chat Completions API refuses, in words, in order:
/// every image of a message whose role is not `user` (its parts), and every image of a
/// tool result (a tool message's content takes text parts only). The API's own words
/// for it: "Image URLs are only allowed for messages with role 'user', but this message
/// with role 'tool' contains an image URL" (HTTP 400; the same for `assistant`); its
/// reference gives system and developer messages text parts only.
fn refused_images(m: &Message) -> Vec<String> {
    let mut out = Vec::new();
    for (j, p) in m.content.iter().enumerate() {
        if p.kind == PartKind::Image && m.role != Role::User {
            out.push(format!(
                "content[{j}] is an image in {} message; the Chat Completions API takes \
                 images only in user messages",
                with_article(m.role)
            ));
        }
        if p.kind == PartKind::ToolResult {
            let id = p.call_id.as_deref().unwrap_or("");
            for (k, q) in p.inner().iter().enumerate() {
                if q.kind == PartKind::Image {
                    out.push(format!(
                        "content[{k}] of the result of tool call {} is an image; the Chat \
                         Completions API takes images only in user messages, a tool \
                         message's content text only",
                        quote(id)
                    ));
                }
            }
        }
    }
    out
}

/// Each opaque part of `m`, its own and then each tool result's, in order: the call id of
/// the tool result holding it (`None` for a part of the message), its place in words
/// (`content[1]`, `content[0] of the result of tool call "x"`) and its type.
fn opaque_parts(m: &Message) -> Vec<(Option<&str>, String, &str)> {
    fn opaque(p: &Part) -> Option<&str> {
        p.type_.as_deref().filter(|_| p.kind == PartKind::Opaque)
    }
    let mut out = Vec::new();
    for (j, p) in m.content.iter().enumerate() {
        if let Some(ty) = opaque(p) {
            out.push((None, format!("content[{j}]"), ty));
        }
        if p.kind == PartKind::ToolResult {
            let id = p.call_id.as_deref().unwrap_or("");
            for (k, q) in p.inner().iter().enumerate() {
                if let Some(ty) = opaque(q) {
                    let at = format!("content[{k}] of the result of tool call {}", quote(id));
                    out.push((Some(id), at, ty));
                }
            }
        }
    }
    out
}

/// Where each image, file or audio part of `m` kept as an opaque part is that the Chat
/// Completions API refuses, in words, in order, with the call id of the tool result
/// holding it: every one of a message whose role is not `user`, and every one of a tool
/// result (fresh45 #5: they were counted, and priced as documents, with no violation).
fn refused_payloads(m: &Message) -> Vec<(Option<&str>, String)> {
    let mut out = Vec::new();
    for (id, at, ty) in opaque_parts(m) {
        if !USER_ONLY_PARTS.contains(&ty) {
            continue;
        }
        let detail = match id {
            Some(_) => format!(
                "{at} is a part of type {}; the Chat Completions API takes image, file and \
                 audio parts only in user messages, a tool message's content text only",
                quote(ty)
            ),
            None if m.role != Role::User => format!(
                "{at} is a part of type {} in {} message; the Chat Completions API takes \
                 image, file and audio parts only in user messages",
                quote(ty),
                with_article(m.role)
            ),
            None => continue,
        };
        out.push((id, detail));
    }
    out
}

/// The other provider's blocks in `m`, each as the call id of the tool result holding it
/// (`None` for a part of the message) and where it is, in words, in order: the parts the
/// reader kept as opaque blocks, since it does not read them (fresh47 #2: a user message
/// holding an OpenAI `image_url` part and an Anthropic `image` block passed `validate`
/// under both providers' rules, and the one read as opaque was counted as its JSON text).
/// Under OpenAI's rules an Anthropic block ([`anthropic_only_block`], or an `image`);
/// under Anthropic's an OpenAI part (`image_url`, `input_audio`, `file`).
fn foreign_blocks(m: &Message, provider: Format) -> Vec<(Option<&str>, String)> {
    let (theirs, api) = match provider {
        Format::OpenAI => ("an Anthropic block", "the Chat Completions API"),
        Format::Anthropic => ("an OpenAI part", "the Messages API"),
    };
    opaque_parts(m)
        .into_iter()
        .filter(|&(_, _, ty)| match provider {
            Format::OpenAI => anthropic_only_block(ty) || ty == "image",
            Format::Anthropic => USER_ONLY_PARTS.contains(&ty),
        })
        .map(|(id, at, ty)| {
            (
                id,
                format!("{at} is {theirs} of type {}; {api} refuses it", quote(ty)),
            )
        })
        .collect()
}

fn validate_openai(messages: &[Message]) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut owner_calls: HashSet<&str> = HashSet::new(); // calls of the run's assistant
    let mut seen: HashSet<&str> = HashSet::new(); // call ids answered in this run
    for (i, m) in messages.iter().enumerate() {
        for d in refused_details(m) {
            let detail = format!(
                "image detail {} is not \"low\", \"high\" or \"auto\", the values the Chat \
                 Completions API takes",
                quote(d)
            );
            out.push(v(i, "detail_not_allowed", None, detail));
        }
        for detail in refused_images(m) {
            out.push(v(i, "image_not_allowed", None, detail));
        }
        for (id, detail) in refused_payloads(m)
            .into_iter()
            .chain(foreign_blocks(m, Format::OpenAI))
        {
            out.push(v(i, "block_not_allowed", id, detail));
        }
        if m.role == Role::Tool {
            let results: Vec<&str> = result_ids(m).collect();
            if results.is_empty() {
                out.push(v(
                    i,
                    "empty_tool_message",
                    None,
                    "tool message holds no tool result".into(),
                ));
            }
            for id in results {
                let ok = owner_calls.contains(id);
                if ok && !seen.insert(id) {
                    out.push(v(
                        i,
                        "duplicate_result",
                        Some(id),
                        format!("a second result for tool call {}", quote(id)),
                    ));
                } else if !ok {
                    out.push(v(
                        i,
                        "orphan_result",
                        Some(id),
                        format!(
                            "tool result {} does not answer a call of the preceding assistant message",
                            quote(id)
                        ),
                    ));
                }
            }
            if m.has_tool_calls() {
                let detail = "a tool message holds tool calls".to_string();
                out.push(v(i, "call_outside_assistant", None, detail));
            }
            continue;
        }
        if m.has_tool_results() {
            for id in result_ids(m) {
                out.push(v(
                    i,
                    "result_outside_tool_message",
                    Some(id),
                    format!(
                        "tool result {} is in {} message, not a tool message",
                        quote(id),
                        with_article(m.role)
                    ),
                ));
            }
        }
        owner_calls = if m.role == Role::Assistant {
            call_ids(m).into_iter().collect()
        } else {
            HashSet::new()
        };
        seen.clear();
        let answered = || -> HashSet<&str> {
            messages[i + 1..]
                .iter()
                .take_while(|n| n.role == Role::Tool)
                .flat_map(result_ids)
                .collect()
        };
        check_calls(&mut out, i, m, answered, "before the next non-tool message");
        if m.role == Role::Assistant && !m.has_tool_calls() && empty_tool_calls(m) {
            out.push(v(
                i,
                "empty_content",
                None,
                "tool_calls is an empty list; the Chat Completions API takes a list of \
                 at least one call, or no tool_calls key"
                    .into(),
            ));
        }
    }
    out
}

/// Whether the message's unknown keys hold `"tool_calls": []` (the OpenAI adapter keeps
/// an empty list there, verbatim, and writes it back when the message has no call).
fn empty_tool_calls(m: &Message) -> bool {
    #[derive(serde::Deserialize)]
    struct Calls {
        tool_calls: Option<serde_json::Value>,
    }
    m.extra
        .as_ref()
        .and_then(|raw| serde_json::from_str::<Calls>(raw.get()).ok())
        .and_then(|c| c.tool_calls)
        .is_some_and(|t| matches!(t, serde_json::Value::Array(a) if a.is_empty()))
}

/// Whether `c` is whitespace as [`blank`] takes it: the Unicode `White_Space` property,
/// its 25 code points listed (the set `char::is_whitespace` tests, spelled out so that
/// `_reference._WHITE_SPACE` can hold the same list; Python's `str.isspace` also takes
/// U+001C..U+001F, which are not `White_Space`, and are content here).
pub(crate) fn is_white_space(c: char) -> bool {
    matches!(
        c,
        '\u{9}'..='\u{d}'
            | ' '
            | '\u{85}'
            | '\u{a0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200a}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202f}'
            | '\u{205f}'
            | '\u{3000}'
    )
}

/// Whether `text` is empty or of whitespace only ([`is_white_space`]): what the Messages
/// API refuses in a text block ("text content blocks must be non-empty", "text content
/// blocks must contain non-whitespace text"; which characters it takes for whitespace
/// is not documented).
fn blank(text: &str) -> bool {
    text.chars().all(is_white_space)
}

/// Whether the Anthropic adapter writes `parts`, spelled `kind`, as a string: a single
/// text part without extra keys, spelled `"text"` or not at all (`_emit` in adapters.py).
fn written_as_string(parts: &[Part], kind: Option<&str>) -> bool {
    matches!(parts, [p] if p.kind == PartKind::Text && p.extra.is_none())
        && matches!(kind, None | Some("text"))
}

/// Why the Messages API refuses text block `p`, named `at`, if it does.
fn blank_block(p: &Part, at: &str) -> Option<String> {
    if p.kind != PartKind::Text || !blank(p.text_str()) {
        None
    } else if p.text_str().is_empty() {
        Some(format!(
            "{at} is an empty text block; text blocks must be non-empty"
        ))
    } else {
        Some(format!(
            "{at} is a text block of whitespace only; text blocks must contain \
             non-whitespace text"
        ))
    }
}

/// Each text block of `parts` (written as blocks), and of a `tool_result`'s content list
/// among them, that the Messages API refuses as blank, in words, in order: one violation
/// each, so that a result moved to another message takes its own with it (a count per
/// message would grow when repair moves a result out of a message holding another). A
/// `tool_result` whose content is written as a string, or has none, is not looked into.
fn blank_blocks(parts: &[Part]) -> Vec<String> {
    let mut out = Vec::new();
    for (j, p) in parts.iter().enumerate() {
        if p.kind != PartKind::ToolResult {
            out.extend(blank_block(p, &format!("content[{j}]")));
            continue;
        }
        let inner = p.inner();
        if !written_as_string(inner, p.content_kind.as_deref()) {
            for (k, q) in inner.iter().enumerate() {
                out.extend(blank_block(q, &format!("content[{j}].content[{k}]")));
            }
        }
    }
    out
}

/// Why Anthropic's Messages API refuses the content of message `i` (`m`, a user or
/// assistant message), one reason a violation: no content (no block, or the string
/// `""`), which only the final message may have when it is an assistant message (a
/// prefill); or text of whitespace only, as the string or in a text block, or an empty
/// text block (also in a `tool_result`'s content list), which no message may hold.
fn empty_content_anthropic(messages: &[Message], i: usize, m: &Message) -> Vec<String> {
    let string = written_as_string(&m.content, m.content_kind.as_deref());
    if m.content.is_empty() || (string && m.content[0].text_str().is_empty()) {
        let prefill = m.role == Role::Assistant && i + 1 == messages.len();
        if prefill {
            return Vec::new();
        }
        return vec![format!(
            "{} message has no content; only a final assistant message may be empty",
            with_article(m.role)
        )];
    }
    if string {
        if !blank(m.content[0].text_str()) {
            return Vec::new();
        }
        return vec![
            "content is a string of whitespace only; text must contain non-whitespace text"
                .to_owned(),
        ];
    }
    blank_blocks(&m.content)
}

/// Why the Messages API refuses system message `m` (one leading the conversation, its
/// top-level `system`), one reason a violation: written as a list of text blocks, one
/// of them is empty or of whitespace only. A `system` string, even `""`, is taken, and
/// so is no system content.
fn empty_system_anthropic(m: &Message) -> Vec<String> {
    if written_as_string(&m.content, m.content_kind.as_deref()) {
        return Vec::new();
    }
    blank_blocks(&m.content)
}

/// The blocks of `m`'s `tool_result`s' content that the Messages API refuses there
/// ([`message_level_block`]): each as its result's call id and the block's type. The
/// Anthropic reader keeps such a block as an opaque part (a tester's `tool_result` nested
/// in a `tool_result` passed `validate`, and the API refuses it).
fn nested_blocks(m: &Message) -> Vec<(Option<&str>, &str)> {
    let mut out = Vec::new();
    for p in m.content.iter().filter(|p| p.kind == PartKind::ToolResult) {
        for q in p.inner() {
            if let (PartKind::Opaque, Some(ty)) = (q.kind, q.type_.as_deref()) {
                if message_level_block(ty) {
                    out.push((p.call_id.as_deref(), ty));
                }
            }
        }
    }
    out
}

fn validate_anthropic(messages: &[Message]) -> Vec<Violation> {
    let mut out = Vec::new();
    let start = messages
        .iter()
        .position(|m| m.role != Role::System)
        .unwrap_or(messages.len());
    for (i, m) in messages.iter().enumerate().take(start) {
        for detail in empty_system_anthropic(m) {
            out.push(v(i, "empty_content", None, detail));
        }
    }
    let mut prev: Option<Role> = None;
    let mut used: HashMap<&str, usize> = HashMap::new();
    for (i, m) in messages.iter().enumerate().skip(start) {
        // a `tool` struct is written as a user message (`Role::in_anthropic`)
        let role = m.role.in_anthropic();
        if !matches!(role, Role::User | Role::Assistant) {
            out.push(v(
                i,
                "role_not_allowed",
                None,
                format!("role {} is not allowed in Anthropic messages", m.role),
            ));
        } else if prev.is_none() && role != Role::User {
            out.push(v(
                i,
                "first_not_user",
                None,
                "the first message must be a user message".into(),
            ));
        } else if prev == Some(role) {
            out.push(v(
                i,
                "not_alternating",
                None,
                "two messages in a row have the same role".into(),
            ));
        }
        prev = Some(role);
        if m.has_tool_results() && role != Role::User {
            for id in result_ids(m) {
                out.push(v(
                    i,
                    "result_outside_user_message",
                    Some(id),
                    format!(
                        "tool_result {} is in {} message, not a user message",
                        quote(id),
                        with_article(m.role)
                    ),
                ));
            }
        } else if m.has_tool_results() {
            let calls: HashSet<&str> = if i > 0 && messages[i - 1].role == Role::Assistant {
                call_ids(&messages[i - 1]).into_iter().collect()
            } else {
                HashSet::new()
            };
            let mut seen: HashSet<&str> = HashSet::new();
            for id in result_ids(m) {
                if calls.contains(&id) && !seen.insert(id) {
                    out.push(v(
                        i,
                        "duplicate_result",
                        Some(id),
                        format!("a second tool_result for {}", quote(id)),
                    ));
                } else if !calls.contains(&id) {
                    out.push(v(
                        i,
                        "orphan_result",
                        Some(id),
                        format!(
                            "tool_result {} does not answer a tool_use of the previous message",
                            quote(id)
                        ),
                    ));
                }
            }
            let first_other = m
                .content
                .iter()
                .position(|p| p.kind != PartKind::ToolResult);
            let last_result = m
                .content
                .iter()
                .rposition(|p| p.kind == PartKind::ToolResult);
            if let (Some(f), Some(l)) = (first_other, last_result) {
                if f < l {
                    out.push(v(
                        i,
                        "result_after_content",
                        None,
                        "tool_result blocks must come before other content".into(),
                    ));
                }
            }
        }
        let answered = || -> HashSet<&str> {
            match messages.get(i + 1) {
                Some(n) if n.role.in_anthropic() == Role::User => result_ids(n).collect(),
                _ => HashSet::new(),
            }
        };
        check_calls(&mut out, i, m, answered, "in the next user message");
        if m.role == Role::Assistant {
            check_calls_anthropic(&mut out, i, m, &mut used);
        }
        if matches!(role, Role::User | Role::Assistant) {
            for detail in empty_content_anthropic(messages, i, m) {
                out.push(v(i, "empty_content", None, detail));
            }
        }
        for (id, ty) in nested_blocks(m) {
            out.push(v(
                i,
                "block_not_allowed",
                id,
                format!(
                    "a tool_result's content holds a {} block, which belongs in a message's \
                     content: the Messages API refuses it there",
                    quote(ty)
                ),
            ));
        }
        for (id, detail) in foreign_blocks(m, Format::Anthropic) {
            out.push(v(i, "block_not_allowed", id, detail));
        }
        if role == Role::Assistant && i + 1 == messages.len() && prefill_ends_in_space(m) {
            out.push(v(
                i,
                "trailing_whitespace",
                None,
                "the final assistant message (a prefill) ends in whitespace; final \
                 assistant content cannot end with trailing whitespace"
                    .into(),
            ));
        }
    }
    out.extend(thinking_violations(messages));
    out
}

/// The Messages API's rules for extended-thinking blocks ([`Part::is_thinking`]), in
/// message order, after the other Anthropic violations: `thinking_not_first` at the
/// first assistant message of the assistant's final turn
/// ([`crate::model::thinking_turn_start`]) when an assistant message of that turn holds
/// a thinking block but that first message does not start with one (with thinking on,
/// the API refuses it: fresh20b #1), and
/// `thinking_last` at an assistant message whose final block is a thinking block ("The
/// final block in an assistant message cannot be `thinking`": fresh20b #2).
fn thinking_violations(messages: &[Message]) -> Vec<Violation> {
    let start = crate::model::thinking_turn_start(messages);
    let newest: Vec<usize> = (start..messages.len())
        .filter(|&i| messages[i].role == Role::Assistant)
        .collect();
    let not_first = newest.first().copied().filter(|&a| {
        !messages[a].content.first().is_some_and(Part::is_thinking)
            && newest
                .iter()
                .any(|&i| messages[i].content.iter().any(Part::is_thinking))
    });
    let mut out = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        if Some(i) == not_first {
            out.push(v(
                i,
                "thinking_not_first",
                None,
                "the final assistant turn holds a thinking block but its first assistant \
                 message does not start with one; with thinking enabled a final assistant \
                 message must start with a thinking block"
                    .into(),
            ));
        }
        if m.role == Role::Assistant && m.content.last().is_some_and(Part::is_thinking) {
            out.push(v(
                i,
                "thinking_last",
                None,
                "the final block in an assistant message cannot be a thinking block".into(),
            ));
        }
    }
    out
}

/// Whether `s` matches `^[a-zA-Z0-9_-]+$`, the pattern the Messages API checks a
/// `tool_use` id against (and, with at most 64 characters, its name).
fn anthropic_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Anthropic's rules for the tool calls of assistant message `i` (`m`), one call at a
/// time: a name not matching `^[a-zA-Z0-9_-]{1,64}$` (`tool_name_not_allowed`), an id not
/// matching `^[a-zA-Z0-9_-]+$` (`call_id_not_allowed`), and an id an earlier message
/// already used (`reused_call_id`, once for each id in `m`: "tool_use ids must be
/// unique" holds across the request; an id repeated inside `m` is `duplicate_call`,
/// which repair mends, where this one it leaves to the caller). `used` maps each id
/// seen to its first message.
fn check_calls_anthropic<'m>(
    out: &mut Vec<Violation>,
    i: usize,
    m: &'m Message,
    used: &mut HashMap<&'m str, usize>,
) {
    let mut here: HashSet<&str> = HashSet::new();
    for p in m.tool_calls() {
        let id = p.id.as_deref().unwrap_or("");
        let name = p.name.as_deref().unwrap_or("");
        if !anthropic_token(name) || name.len() > 64 {
            let detail = format!(
                "tool_use name {} does not match ^[a-zA-Z0-9_-]{{1,64}}$",
                quote(name)
            );
            out.push(v(i, "tool_name_not_allowed", Some(id), detail));
        }
        if !anthropic_token(id) {
            let detail = format!("tool_use id {} does not match ^[a-zA-Z0-9_-]+$", quote(id));
            out.push(v(i, "call_id_not_allowed", Some(id), detail));
        }
        if !here.insert(id) {
            continue;
        }
        match used.get(id) {
            Some(&first) => {
                let detail = format!(
                    "tool call id {} is already used by message {first}; tool_use ids must be unique",
                    quote(id)
                );
                out.push(v(i, "reused_call_id", Some(id), detail));
            }
            None => {
                used.insert(id, i);
            }
        }
    }
}

/// Whether assistant message `m`, the final message of an Anthropic request (a prefill
/// the model continues), ends in whitespace ([`is_white_space`]), which the Messages API
/// refuses ("final assistant content cannot end with trailing whitespace"): its last part
/// is a text part (a string content is one) that is not blank (a blank one is
/// `empty_content` already) and whose last character is whitespace.
fn prefill_ends_in_space(m: &Message) -> bool {
    match m.content.last() {
        Some(p) if p.kind == PartKind::Text => {
            let text = p.text_str();
            !blank(text) && text.ends_with(is_white_space)
        }
        _ => false,
    }
}

/// `m`, a final assistant message the repair changed, without the whitespace its text
/// ends in ([`prefill_ends_in_space`]): `missing="drop"` removing the calls that followed
/// `"Let me look. "` must not leave a prefill the Messages API refuses.
fn trim_prefill_end(m: &mut Message) {
    if prefill_ends_in_space(m) {
        if let Some(p) = m.content.last_mut() {
            p.text = p
                .text
                .as_deref()
                .map(|t| t.trim_end_matches(is_white_space).to_owned());
        }
    }
}

/// What to do with a tool call that has no result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// Insert a synthetic result `[tool result missing]`.
    Stub,
    /// Remove the call (and its message when nothing else remains).
    Drop,
}

impl Missing {
    /// Parse `"stub"` or `"drop"`.
    pub fn parse(name: &str) -> crate::Result<Missing> {
        match name {
            "stub" => Ok(Missing::Stub),
            "drop" => Ok(Missing::Drop),
            other => Err(crate::Error::InvalidArgument {
                name: "missing".into(),
                reason: format!("expected \"stub\" or \"drop\", got {}", quote(other)),
            }),
        }
    }
}

/// One change made by [`repair`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PairChange {
    /// `orphan_result_dropped`, `result_moved`, `stub_inserted`, `call_removed`,
    /// `message_dropped`, `results_reordered`, `placeholder_inserted` (an Anthropic user
    /// message left empty holds [`RESULTS_REMOVED`] instead of going, where its going
    /// would break alternation; see `settle_placeholders`).
    pub kind: &'static str,
    /// Input index of the message concerned (for `stub_inserted`: the call's message).
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
}

/// A message of a working list: where it came from and whether it was changed.
#[derive(Debug, Clone)]
pub struct Work<'a> {
    /// Input index, `None` for a synthetic message.
    pub src: Option<usize>,
    /// The message; `Cow::Owned` when changed or new.
    pub msg: Cow<'a, Message>,
}

impl AsRef<Message> for Work<'_> {
    fn as_ref(&self) -> &Message {
        &self.msg
    }
}

impl Work<'_> {
    /// Whether the message differs from input message `src` (or is new).
    pub fn changed(&self) -> bool {
        matches!(self.msg, Cow::Owned(_)) || self.src.is_none()
    }
}

/// Unchanged working list of the input.
pub fn identity(messages: &[Message]) -> Vec<Work<'_>> {
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| Work {
            src: Some(i),
            msg: Cow::Borrowed(m),
        })
        .collect()
}

fn change(kind: &'static str, index: usize, call_id: Option<&str>) -> PairChange {
    PairChange {
        kind,
        index,
        call_id: call_id.map(str::to_owned),
    }
}

/// Repair tool pairs: drop orphan results, move separated results next to their call
/// (from its own message too: [`resolve`]; from before it, where its id is unambiguous:
/// `with_early_results`), stub or drop unanswered calls. Returns the input unchanged (every item borrowed, same
/// order) when there is nothing to repair. Idempotent.
pub fn repair(
    messages: &[Message],
    format: Format,
    missing: Missing,
) -> (Vec<Work<'_>>, Vec<PairChange>) {
    repair_resolved(messages, &resolve(messages), format, missing)
}

/// [`repair`] with the resolution of `messages` computed by the caller (which keeps it:
/// `trim.rs` segments the repaired list with it when repair left the list as it was).
pub(crate) fn repair_resolved<'a>(
    messages: &'a [Message],
    res: &Resolution,
    format: Format,
    missing: Missing,
) -> (Vec<Work<'a>>, Vec<PairChange>) {
    let res = with_early_results(messages, res);
    match format {
        Format::OpenAI => repair_openai(messages, &res, missing),
        Format::Anthropic => repair_anthropic(messages, &res, missing),
    }
}

/// `res` with each result that comes before its call resolved to that call, where that
/// is unambiguous: the result's id is that of one tool call in the whole conversation
/// (none before the result, none in its own message, none repeated), made by an
/// assistant message after the result's, and of no other result (agents reuse ids like
/// `call_0`: a reused id keeps the result an orphan, dropped). Repair then moves the
/// result after its call as any separated result (`result_moved`; before, it was
/// dropped as an orphan and the call stubbed, and its text was lost). Borrowed when
/// there is no such result (`_reference._with_early_results`).
fn with_early_results<'r>(messages: &[Message], res: &'r Resolution) -> Cow<'r, Resolution> {
    let orphan = |j: usize, p: usize, part: &Part| {
        part.kind == PartKind::ToolResult && res.results[j][p].is_none()
    };
    let any_orphan = messages.iter().enumerate().any(|(j, m)| {
        m.content
            .iter()
            .enumerate()
            .any(|(p, part)| orphan(j, p, part))
    });
    if !any_orphan {
        return Cow::Borrowed(res);
    }
    // per id: how many results; how many calls, and the call when there is one
    let mut result_count: HashMap<&str, usize> = HashMap::new();
    let mut calls: HashMap<&str, (usize, CallRef)> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        for (p, part) in m.content.iter().enumerate() {
            match part.kind {
                PartKind::ToolResult => {
                    *result_count
                        .entry(part.call_id.as_deref().unwrap_or(""))
                        .or_default() += 1;
                }
                PartKind::ToolCall => {
                    let at = CallRef {
                        message: i,
                        part: p,
                    };
                    calls
                        .entry(part.id.as_deref().unwrap_or(""))
                        .or_insert((0, at))
                        .0 += 1;
                }
                _ => {}
            }
        }
    }
    let mut out: Option<Resolution> = None;
    for (j, m) in messages.iter().enumerate() {
        for (p, part) in m.content.iter().enumerate() {
            if !orphan(j, p, part) {
                continue;
            }
            let id = part.call_id.as_deref().unwrap_or("");
            let Some(&(1, c)) = calls.get(id) else {
                continue;
            };
            let later = c.message > j && messages[c.message].role == Role::Assistant;
            if result_count.get(id) != Some(&1)
                || !later
                || !res.answered_by[c.message][c.part].is_empty()
            {
                continue;
            }
            let r = out.get_or_insert_with(|| res.clone());
            r.results[j][p] = Some(c);
            r.answered_by[c.message][c.part].push(j);
        }
    }
    out.map_or(Cow::Borrowed(res), Cow::Owned)
}

/// Unanswered call ids of message `i`, in call order.
fn unanswered<'m>(messages: &'m [Message], res: &Resolution, i: usize) -> Vec<&'m str> {
    let mut seen: HashSet<&str> = HashSet::new();
    messages[i]
        .content
        .iter()
        .enumerate()
        .filter(|(_, part)| part.kind == PartKind::ToolCall)
        .filter(|(_, part)| seen.insert(part.id.as_deref().unwrap_or("")))
        .filter(|(p, _)| res.answered_by[i][*p].is_empty())
        .map(|(_, part)| part.id.as_deref().unwrap_or(""))
        .collect()
}

/// `m` without repeats of a tool call id it already used (the first call stays).
fn without_repeated_calls<'a>(
    m: Cow<'a, Message>,
    i: usize,
    changes: &mut Vec<PairChange>,
) -> Cow<'a, Message> {
    let mut seen: HashSet<&str> = HashSet::new();
    let repeats: Vec<usize> = m
        .content
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            p.kind == PartKind::ToolCall && !seen.insert(p.id.as_deref().unwrap_or(""))
        })
        .map(|(k, _)| k)
        .collect();
    if repeats.is_empty() {
        return m;
    }
    let mut out = m.into_owned();
    for &k in repeats.iter().rev() {
        let part = out.content.remove(k);
        changes.push(change("call_removed", i, part.id.as_deref()));
    }
    Cow::Owned(out)
}

/// Remove the given unanswered calls from an assistant message; `None` when it is empty.
/// When no call remains, a `"tool_calls": []` among its unknown keys goes too: with calls
/// the OpenAI adapter wrote the calls and not that key, without them it would write the
/// empty list, which the Chat Completions API refuses (`empty_content`; empty19 #3: a
/// struct with a call and that key came out of `missing="drop"` with a violation the
/// input did not have).
fn without_calls(m: &Message, drop_ids: &[&str]) -> Option<Message> {
    let drop_ids: HashSet<&str> = drop_ids.iter().copied().collect();
    let mut out = m.clone();
    out.content.retain(|p| {
        !(p.kind == PartKind::ToolCall && drop_ids.contains(&p.id.as_deref().unwrap_or("")))
    });
    if out.content.is_empty() {
        return None;
    }
    if !out.has_tool_calls() && empty_tool_calls(&out) {
        out.extra = out.extra.as_deref().and_then(without_tool_calls_key);
    }
    Some(out)
}

/// The keys of a JSON object, in order, each with its value as written.
struct Entries(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Entries, D::Error> {
        struct Keys;
        impl<'de> Visitor<'de> for Keys {
            type Value = Entries;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry::<String, Box<RawValue>>()? {
                    out.push(entry);
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(Keys)
    }
}

/// `extra` (a JSON object) without its `tool_calls` key, the other keys in their order
/// and their values as written; `None` when no key remains. Unreadable: as it was.
fn without_tool_calls_key(extra: &RawValue) -> Option<Box<RawValue>> {
    let Ok(Entries(entries)) = serde_json::from_str::<Entries>(extra.get()) else {
        return Some(extra.to_owned());
    };
    let mut text = String::from("{");
    for (key, value) in entries.iter().filter(|(k, _)| k != "tool_calls") {
        if text.len() > 1 {
            text.push(',');
        }
        text.push_str(&quote_key(key));
        text.push(':');
        text.push_str(value.get());
    }
    if text.len() == 1 {
        return None;
    }
    text.push('}');
    Some(RawValue::from_string(text).unwrap_or_else(|_| extra.to_owned()))
}

/// `key` as a JSON string.
fn quote_key(key: &str) -> String {
    serde_json::to_string(key).unwrap_or_else(|_| format!("{key:?}"))
}

/// Message `i` without tool results, which do not belong in it (they are placed with
/// their calls, or dropped as orphans), and without tool calls unless it is the
/// assistant's; `None` when nothing remains.
fn strip_results<'a>(
    messages: &'a [Message],
    res: &Resolution,
    i: usize,
    changes: &mut Vec<PairChange>,
) -> Option<Cow<'a, Message>> {
    let m = &messages[i];
    let stray_calls = m.role != Role::Assistant && m.has_tool_calls();
    if !m.has_tool_results() && !stray_calls {
        return Some(Cow::Borrowed(m));
    }
    let mut out = m.clone();
    out.content.clear();
    for (p, part) in m.content.iter().enumerate() {
        match part.kind {
            PartKind::ToolResult if res.results[i][p].is_none() => {
                changes.push(change("orphan_result_dropped", i, part.call_id.as_deref()))
            }
            PartKind::ToolResult => {} // placed with its call
            PartKind::ToolCall if stray_calls => {
                // Only the assistant makes tool calls.
                changes.push(change("call_removed", i, part.id.as_deref()))
            }
            _ => out.content.push(part.clone()),
        }
    }
    if out.content.is_empty() {
        changes.push(change("message_dropped", i, None));
        return None;
    }
    out.fix_content_kind();
    Some(Cow::Owned(out))
}

/// Emit assistant message `i` (as `base`), applying `missing`; returns the unanswered
/// ids to stub. With `keep_whole`, a message that dropping would empty (or leave ending in
/// a thinking block) is stubbed instead.
fn emit_caller<'a>(
    base: Cow<'a, Message>,
    messages: &'a [Message],
    res: &Resolution,
    i: usize,
    (missing, keep_whole): (Missing, bool),
    out: &mut Vec<Work<'a>>,
    changes: &mut Vec<PairChange>,
) -> Vec<&'a str> {
    let open = unanswered(messages, res, i);
    let base = without_repeated_calls(base, i, changes);
    // A message left ending in a thinking block (only a thinking block, mostly: the
    // calls followed it) counts as emptied: the Messages API refuses an assistant message
    // whose final block is one (fresh20b #2).
    let remaining = match missing {
        Missing::Drop if !open.is_empty() => Some(
            without_calls(&base, &open)
                .filter(|m| !m.content.last().is_some_and(Part::is_thinking)),
        ),
        _ => None,
    };
    // Dropping an Anthropic assistant message whole would put two user messages side
    // by side: its unanswered calls get stub results instead.
    let stub = match &remaining {
        None => true,
        Some(None) => keep_whole,
        Some(Some(_)) => false,
    };
    if stub {
        out.push(Work {
            src: Some(i),
            msg: base,
        });
        return open;
    }
    for id in &open {
        changes.push(change("call_removed", i, Some(id)));
    }
    match remaining.flatten() {
        Some(m) => out.push(Work {
            src: Some(i),
            msg: Cow::Owned(m),
        }),
        None => changes.push(change("message_dropped", i, None)),
    }
    Vec::new()
}

/// Whether `m` is an OpenAI tool message whose results are placed with it as one: a tool
/// message holding several results (a `Message` struct can; the OpenAI adapter writes one
/// result per tool message) is not: its results are placed one by one, as results found
/// outside a tool message are (`_reference.whole_tool_message`; struct18 #5: an orphan
/// or a second result in it stayed, and a result for another call's message was left
/// an orphan there).
fn whole_tool_message(m: &Message) -> bool {
    m.role == Role::Tool
        && !(m.content.len() > 1 && m.content.iter().all(|p| p.kind == PartKind::ToolResult))
}

/// Tool message `j` without the tool calls it holds, each a `call_removed`: only the
/// assistant makes calls, and a `Message` struct can put one in a tool message (the
/// OpenAI dicts refuse it; fresh50 #2: it went on as it was, or went with its message
/// with no word of it).
fn calls_stripped<'a>(m: &'a Message, j: usize, changes: &mut Vec<PairChange>) -> Cow<'a, Message> {
    if !m.has_tool_calls() {
        return Cow::Borrowed(m);
    }
    let mut out = m.clone();
    out.content.retain(|p| {
        let call = p.kind == PartKind::ToolCall;
        if call {
            changes.push(change("call_removed", j, p.id.as_deref()));
        }
        !call
    });
    Cow::Owned(out)
}

fn repair_openai<'a>(
    messages: &'a [Message],
    res: &Resolution,
    missing: Missing,
) -> (Vec<Work<'a>>, Vec<PairChange>) {
    let n = messages.len();
    // Target assistant of each tool message: the call of its first resolved result.
    let target: Vec<Option<usize>> = (0..n)
        .map(|j| {
            if !whole_tool_message(&messages[j]) {
                return None;
            }
            res.results[j].iter().flatten().next().map(|c| c.message)
        })
        .collect();
    let mut belongs: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (j, t) in target.iter().enumerate() {
        if let Some(t) = t {
            belongs[*t].push(j);
        }
    }
    // Results found outside tool messages (or in one holding several), by the message of
    // their call.
    let mut loose: Vec<Vec<(usize, usize)>> = vec![Vec::new(); n];
    for (j, row) in res.results.iter().enumerate() {
        if !whole_tool_message(&messages[j]) {
            for (p, c) in row.iter().enumerate() {
                if let Some(c) = c {
                    loose[c.message].push((j, p));
                }
            }
        }
    }
    let mut out = Vec::with_capacity(n);
    let mut changes = Vec::new();
    for i in 0..n {
        let m = &messages[i];
        if whole_tool_message(m) {
            if target[i].is_none() {
                for id in result_ids(m) {
                    changes.push(change("orphan_result_dropped", i, Some(id)));
                }
                for id in call_ids(m) {
                    changes.push(change("call_removed", i, Some(id)));
                }
                if !m.has_tool_results() {
                    changes.push(change("message_dropped", i, None));
                }
            }
            continue; // emitted with its call
        }
        let Some(base) = strip_results(messages, res, i, &mut changes) else {
            continue;
        };
        if !(m.role == Role::Assistant && m.has_tool_calls()) {
            out.push(Work {
                src: Some(i),
                msg: base,
            });
            continue;
        }
        let open = emit_caller(
            base,
            messages,
            res,
            i,
            (missing, false),
            &mut out,
            &mut changes,
        );
        let zone_end = (i + 1..n)
            .find(|&j| messages[j].role != Role::Tool)
            .unwrap_or(n);
        // its tool messages right after it first; then the others, in input order (one
        // before the call too: `with_early_results`)
        let (inside, outside): (Vec<usize>, Vec<usize>) =
            belongs[i].iter().partition(|&&j| i < j && j < zone_end);
        for j in inside.into_iter().chain(outside.iter().copied()) {
            if j < i || j >= zone_end {
                let id = result_ids(&messages[j]).next();
                changes.push(change("result_moved", j, id));
            }
            out.push(Work {
                src: Some(j),
                msg: calls_stripped(&messages[j], j, &mut changes),
            });
        }
        for &(j, p) in &loose[i] {
            let part = &messages[j].content[p];
            changes.push(change("result_moved", j, part.call_id.as_deref()));
            // a result moved out of a pinned message stays pinned: what the caller
            // pinned survives every operation (DESIGN.md section 8), and a guard run on
            // its own output cut it when the carrier lost the flag
            let mut carrier = Message::new(Role::Tool, vec![part.clone()]);
            carrier.pinned = messages[j].pinned;
            out.push(Work {
                src: None,
                msg: Cow::Owned(carrier),
            });
        }
        for id in open {
            changes.push(change("stub_inserted", i, Some(id)));
            out.push(Work {
                src: None,
                msg: Cow::Owned(Message::new(Role::Tool, vec![Part::missing_result(id)])),
            });
        }
    }
    (out, changes)
}

fn repair_anthropic<'a>(
    messages: &'a [Message],
    res: &Resolution,
    missing: Missing,
) -> (Vec<Work<'a>>, Vec<PairChange>) {
    let n = messages.len();
    // Every resolved result part, grouped by the message holding its call.
    let mut belongs: Vec<Vec<(usize, usize)>> = vec![Vec::new(); n];
    for (j, row) in res.results.iter().enumerate() {
        for (p, c) in row.iter().enumerate() {
            if let Some(c) = c {
                belongs[c.message].push((j, p));
            }
        }
    }
    let mut out: Vec<Work<'a>> = Vec::with_capacity(n);
    let mut changes = Vec::new();
    // Stubs and results owed to the next user message: (caller index, ids to stub).
    let mut owed: Option<(usize, Vec<&'a str>)> = None;
    // User messages repair emptied: (position in `out`, index of their change).
    let mut emptied: Vec<(usize, usize)> = Vec::new();
    for i in 0..n {
        let m = &messages[i];
        // A `tool` struct is a user message here, as it is written (`Role::in_anthropic`):
        // results stay in it, and emptied it goes or stays as a user message does (fresh19
        // F5: dropped, it left an assistant message first).
        let user = m.role.in_anthropic() == Role::User;
        if let Some((caller, stubs)) = owed.take() {
            if user {
                let (w, empty) = rebuild_user(
                    messages,
                    res,
                    &belongs,
                    i,
                    Some((caller, &stubs)),
                    &mut changes,
                );
                if empty {
                    emptied.push((out.len(), changes.len() - 1));
                }
                out.push(w);
                continue;
            }
            // No user message follows the calls: create one.
            out.extend(carrier_for(
                messages,
                &belongs,
                caller,
                &stubs,
                &mut changes,
            ));
        }
        if user {
            let (w, empty) = rebuild_user(messages, res, &belongs, i, None, &mut changes);
            if empty {
                emptied.push((out.len(), changes.len() - 1));
            }
            out.push(w);
            continue;
        }
        let Some(base) = strip_results(messages, res, i, &mut changes) else {
            if m.role == Role::Assistant {
                // emptied (it held only misplaced results): see `settle_placeholders`
                emptied.push((out.len(), changes.len() - 1));
                out.push(placeholder(m, i));
            }
            continue;
        };
        if m.role == Role::Assistant && m.has_tool_calls() {
            let open = emit_caller(
                base,
                messages,
                res,
                i,
                (missing, true),
                &mut out,
                &mut changes,
            );
            let caller_kept = out.last().is_some_and(|w| w.src == Some(i));
            if caller_kept && i + 1 == n {
                // the final message, changed (calls removed): a prefill ending in
                // whitespace is refused, so the whitespace the calls followed goes too
                if let Some(w) = out.last_mut().filter(|w| w.changed()) {
                    trim_prefill_end(w.msg.to_mut());
                }
            }
            if caller_kept {
                owed = Some((i, open));
            }
            continue;
        }
        out.push(Work {
            src: Some(i),
            msg: base,
        });
    }
    if let Some((caller, stubs)) = owed.take() {
        out.extend(carrier_for(
            messages,
            &belongs,
            caller,
            &stubs,
            &mut changes,
        ));
    }
    let out = settle_placeholders(out, &emptied, &mut changes);
    (out, changes)
}

/// Messages that repair emptied (`emptied`: their positions in `out`, in order, and the
/// index of their `message_dropped` change; user messages, and assistant messages that
/// held only misplaced results). They go, but where a run of adjacent ones going would
/// break Anthropic's role order, the first one of the role that mends it stays, holding
/// [`RESULTS_REMOVED`] (its change becomes `placeholder_inserted`): a user message when
/// no user message would be left before or after the run (two assistant messages side
/// by side, an assistant message first, or an assistant message last, which Anthropic
/// reads as the start of the answer), an assistant message when user messages would meet
/// (found by a tester: an orphan result that was a user message's only block made the
/// output fail `validate`). Roles are taken as written for Anthropic
/// ([`Role::in_anthropic`]): a `tool` struct is a user message (fresh19 F5).
fn settle_placeholders<'a>(
    out: Vec<Work<'a>>,
    emptied: &[(usize, usize)],
    changes: &mut [PairChange],
) -> Vec<Work<'a>> {
    if emptied.is_empty() {
        return out;
    }
    let mut gone = vec![false; out.len()];
    let mut k = 0;
    while k < emptied.len() {
        let mut end = k;
        while end + 1 < emptied.len() && emptied[end + 1].0 == emptied[end].0 + 1 {
            end += 1;
        }
        let (first, last) = (emptied[k].0, emptied[end].0);
        // roles as written for Anthropic: a `tool` struct is a user message
        let before = out[..first]
            .iter()
            .rev()
            .map(|w| w.msg.role.in_anthropic())
            .find(|&r| r != Role::System);
        let after = out.get(last + 1).map(|w| w.msg.role.in_anthropic());
        let user = Some(Role::User);
        let needed = if before == user && after == user {
            Some(Role::Assistant)
        } else if before != user && after != user {
            Some(Role::User)
        } else {
            None
        };
        let keep = emptied[k..=end]
            .iter()
            .map(|&(pos, _)| pos)
            .find(|&pos| Some(out[pos].msg.role.in_anthropic()) == needed);
        for &(pos, c) in &emptied[k..=end] {
            if Some(pos) == keep {
                changes[c].kind = "placeholder_inserted";
            } else {
                gone[pos] = true;
            }
        }
        k = end + 1;
    }
    out.into_iter()
        .zip(gone)
        .filter_map(|(w, g)| (!g).then_some(w))
        .collect()
}

/// Result parts owed to `caller` (from anywhere) followed by stubs.
fn owed_parts(
    messages: &[Message],
    belongs: &[Vec<(usize, usize)>],
    caller: usize,
    stubs: &[&str],
    here: Option<usize>,
    changes: &mut Vec<PairChange>,
) -> Vec<Part> {
    let mut parts = Vec::new();
    for &(j, p) in &belongs[caller] {
        let part = &messages[j].content[p];
        if Some(j) != here {
            changes.push(change("result_moved", j, part.call_id.as_deref()));
        }
        parts.push(part.clone());
    }
    for id in stubs {
        changes.push(change("stub_inserted", caller, Some(id)));
        parts.push(Part::missing_result(id));
    }
    parts
}

/// A new user message holding the results owed to `caller` and its stubs; `None` when
/// there are none.
fn carrier_for<'a>(
    messages: &[Message],
    belongs: &[Vec<(usize, usize)>],
    caller: usize,
    stubs: &[&str],
    changes: &mut Vec<PairChange>,
) -> Option<Work<'a>> {
    let parts = owed_parts(messages, belongs, caller, stubs, None, changes);
    // nothing owed (the calls were dropped, `missing="drop"`): no message (fresh19b #1:
    // an empty user message was added, which Anthropic refuses)
    (!parts.is_empty()).then(|| {
        let mut carrier = Message::new(Role::User, parts);
        carrier.pinned = owed_pinned(messages, belongs, caller, None);
        Work {
            src: None,
            msg: Cow::Owned(carrier),
        }
    })
}

/// Whether a result owed to `caller` moves out of a pinned message other than `here`:
/// the message that receives it is then pinned too, so the pinned content keeps its
/// protection (DESIGN.md section 8: pinned messages survive every operation).
fn owed_pinned(
    messages: &[Message],
    belongs: &[Vec<(usize, usize)>],
    caller: usize,
    here: Option<usize>,
) -> bool {
    belongs[caller]
        .iter()
        .any(|&(j, _)| Some(j) != here && messages[j].pinned)
}

/// Rebuild user message `i`: results owed to the previous caller first (its own ones
/// and moved ones, in input order), then stubs, then its other parts; results that
/// belong elsewhere or nowhere are removed. Borrowed when nothing changes. A message
/// left empty comes back holding [`RESULTS_REMOVED`], flagged `true`.
fn rebuild_user<'a>(
    messages: &'a [Message],
    res: &Resolution,
    belongs: &[Vec<(usize, usize)>],
    i: usize,
    caller: Option<(usize, &Vec<&str>)>,
    changes: &mut Vec<PairChange>,
) -> (Work<'a>, bool) {
    let m = &messages[i];
    let borrowed = Work {
        src: Some(i),
        msg: Cow::Borrowed(m),
    };
    let owes = caller.is_some_and(|(c, s)| !belongs[c].is_empty() || !s.is_empty());
    if !owes && !m.has_tool_results() && !m.has_tool_calls() {
        return (borrowed, false);
    }
    let mut content = match caller {
        Some((c, stubs)) => owed_parts(messages, belongs, c, stubs, Some(i), changes),
        None => Vec::new(),
    };
    for (p, part) in m.content.iter().enumerate() {
        if part.kind == PartKind::ToolCall {
            // Only the assistant makes tool calls.
            changes.push(change("call_removed", i, part.id.as_deref()));
        } else if part.kind != PartKind::ToolResult {
            content.push(part.clone());
        } else if res.results[i][p].is_none() {
            changes.push(change("orphan_result_dropped", i, part.call_id.as_deref()));
        }
        // Results resolved to some caller were placed with that caller.
    }
    let same = content.len() == m.content.len()
        && content
            .iter()
            .zip(m.content.iter())
            .all(|(a, b)| std::ptr::eq(a, b) || part_eq(a, b));
    if same {
        return (borrowed, false);
    }
    if content.is_empty() {
        // `settle_placeholders` keeps it (renaming the change) or drops it
        changes.push(change("message_dropped", i, None));
        return (placeholder(m, i), true);
    }
    if caller.is_some_and(|(c, _)| results_follow_content(m, &res.results[i], c)) {
        changes.push(change("results_reordered", i, None));
    }
    let mut edited = m.clone();
    edited.content = content;
    edited.fix_content_kind();
    if let Some((c, _)) = caller {
        edited.pinned |= owed_pinned(messages, belongs, c, Some(i));
    }
    let w = Work {
        src: Some(i),
        msg: Cow::Owned(edited),
    };
    (w, false)
}

/// Whether a part of `m` that stays (not a tool call, not a tool result) comes before a
/// result of `m` answering a call of message `caller` (`results`: `m`'s row of the
/// resolution): then [`rebuild_user`], which puts the caller's results first, changes the
/// order of `m`'s own parts (left17: `[result_a, text, result_b]` became
/// `[result_a, result_b, text]` unreported, and `[text, orphan]` was reported reordered).
fn results_follow_content(m: &Message, results: &[Option<CallRef>], caller: usize) -> bool {
    let mut content_seen = false;
    for (part, r) in m.content.iter().zip(results) {
        match part.kind {
            PartKind::ToolResult => {
                if content_seen && r.is_some_and(|r| r.message == caller) {
                    return true;
                }
            }
            PartKind::ToolCall => {}
            _ => content_seen = true,
        }
    }
    false
}

/// Message `i` (`m`) holding only [`RESULTS_REMOVED`].
fn placeholder(m: &Message, i: usize) -> Work<'_> {
    let mut edited = m.clone();
    edited.content = vec![Part::text(RESULTS_REMOVED)];
    edited.fix_content_kind();
    Work {
        src: Some(i),
        msg: Cow::Owned(edited),
    }
}

/// Structural equality of two parts (raw JSON compared as text).
pub fn part_eq(a: &Part, b: &Part) -> bool {
    let raw = |r: &Option<Box<serde_json::value::RawValue>>| r.as_ref().map(|x| x.get().to_owned());
    a.kind == b.kind
        && a.text == b.text
        && a.width == b.width
        && a.height == b.height
        && a.detail == b.detail
        && raw(&a.source) == raw(&b.source)
        && a.id == b.id
        && a.name == b.name
        && a.arguments == b.arguments
        && a.call_id == b.call_id
        && a.is_error == b.is_error
        && a.content_kind == b.content_kind
        && a.type_ == b.type_
        && raw(&a.raw) == raw(&b.raw)
        && raw(&a.extra) == raw(&b.extra)
        && match (&a.content, &b.content) {
            (None, None) => true,
            (Some(x), Some(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| part_eq(p, q)),
            _ => false,
        }
}
