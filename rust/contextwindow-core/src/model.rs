//! Canonical message model, the Rust side of `contextwindow.messages`.
//!
//! Parts are one flat struct with a `kind` tag rather than a serde enum so that
//! provider data the engine does not interpret (`extra`, image `source`, opaque `raw`)
//! stays as [`RawValue`]: it is carried through byte for byte and never re-encoded.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// Text of the breadcrumb inserted where older turns were removed.
pub const BREADCRUMB: &str = "[earlier turns omitted to fit the context window]";
/// Text of a synthetic tool result for a call that has none.
pub const MISSING_RESULT: &str = "[tool result missing]";
/// A user message whose text starts with this is a tool-result carrier, not a turn.
pub const TOOL_RESULTS_PREFIX: &str = "[Tool results]";
/// Text an Anthropic user message holds when repair removed every block it had (orphan
/// or misplaced results, stray calls): dropping the message would put two assistant
/// messages side by side or an assistant message first. It starts with
/// [`TOOL_RESULTS_PREFIX`], so it never starts a turn.
pub const RESULTS_REMOVED: &str = "[Tool results] (removed by tool-pair repair)";

/// The notice middle pruning leaves in place of the messages it removed
/// (`[context compacted: N earlier messages removed]`, third seed, layer 2).
pub const NOTICE_PREFIX: &str = "[context compacted: ";
/// See [`NOTICE_PREFIX`].
pub const NOTICE_SUFFIX: &str = " earlier messages removed]";

/// Whether `text` is exactly a middle-pruning notice with a decimal count.
pub fn is_notice_text(text: &str) -> bool {
    text.strip_prefix(NOTICE_PREFIX)
        .and_then(|t| t.strip_suffix(NOTICE_SUFFIX))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether a content block of type `ty` exists in Anthropic's Messages API only, so a
/// list of dicts holding one is Anthropic's (with an `image` that has a `source`, which
/// the detectors test apart): a tool call or result (the client's, the server's, an MCP
/// one's: `server_tool_use`, `mcp_tool_use`, a type ending in `_tool_result`), a thinking
/// block, a `document`, a `search_result` or a `container_upload`. The Chat Completions
/// API has none of them (fresh47 #1: a conversation whose only such blocks were Claude's
/// web search was read as OpenAI's, and a trim broke its role alternation).
pub fn anthropic_only_block(ty: &str) -> bool {
    message_level_block(ty) || matches!(ty, "document" | "search_result" | "container_upload")
}

/// Whether an Anthropic block of type `ty` belongs in a message's content only, never in
/// a `tool_result`'s: a tool call or result (the client's, the server's, an MCP one's)
/// or a thinking block. Other types (text, image, document, search_result, and types
/// this library does not know) are left to the API.
pub fn message_level_block(ty: &str) -> bool {
    matches!(
        ty,
        "tool_use"
            | "tool_result"
            | "server_tool_use"
            | "mcp_tool_use"
            | "thinking"
            | "redacted_thinking"
    ) || ty.ends_with("_tool_result")
}

/// The Chat Completions part types that only a user message takes, kept as opaque parts:
/// files and audio input, and an `image_url` part in a list read as Anthropic's (fresh48
/// #5; one read as OpenAI's is an image, `image_not_allowed` there). Its reference gives
/// system and developer messages text parts, an assistant message text and refusal
/// parts, a tool message text parts. With Anthropic's `image` and `document`, they are the
/// media parts of [`Message::is_media_only`].
pub const USER_ONLY_PARTS: [&str; 3] = ["file", "input_audio", "image_url"];

/// Message role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    Developer,
    User,
    Assistant,
    Tool,
}

impl Role {
    /// The role as providers spell it (`"tool"`, `"system"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::Developer => "developer",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    /// The role a message has in an Anthropic request: a `tool` message (a `Message`
    /// struct can have that role) is a user message of `tool_result` blocks, as the
    /// adapters' `message_to_anthropic` writes it; every other role is itself.
    pub fn in_anthropic(self) -> Role {
        match self {
            Role::Tool => Role::User,
            r => r,
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Part kind tag (`kind` in JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartKind {
    Text,
    Image,
    ToolCall,
    ToolResult,
    Opaque,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// One content part. Which fields are meaningful depends on `kind`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Part {
    pub kind: PartKind,
    // text
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    // image
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Box<RawValue>>,
    // tool call
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
    // tool result
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<Part>>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub is_error: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_kind: Option<String>,
    // opaque
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<Box<RawValue>>,
    // every kind
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Box<RawValue>>,
}

impl Part {
    /// A part of `kind` with every field unset.
    pub fn empty(kind: PartKind) -> Part {
        Part {
            kind,
            text: None,
            width: None,
            height: None,
            detail: None,
            source: None,
            id: None,
            name: None,
            arguments: None,
            call_id: None,
            content: None,
            is_error: false,
            content_kind: None,
            type_: None,
            raw: None,
            extra: None,
        }
    }

    /// A text part.
    pub fn text(text: &str) -> Part {
        Part {
            text: Some(text.to_owned()),
            ..Part::empty(PartKind::Text)
        }
    }

    /// A synthetic tool result saying the real one is missing.
    pub fn missing_result(call_id: &str) -> Part {
        Part {
            call_id: Some(call_id.to_owned()),
            content: Some(vec![Part::text(MISSING_RESULT)]),
            ..Part::empty(PartKind::ToolResult)
        }
    }

    /// Whether this is a synthetic result like [`Part::missing_result`]'s (recognised by
    /// its content, so a stub written by an earlier repair is one too).
    pub fn is_missing_result(&self) -> bool {
        self.kind == PartKind::ToolResult
            && !self.is_error
            && matches!(self.inner(), [p] if p.kind == PartKind::Text && p.text_str() == MISSING_RESULT)
    }

    /// Whether this is an Anthropic extended-thinking block (`thinking` or
    /// `redacted_thinking`, kept opaque).
    pub fn is_thinking(&self) -> bool {
        self.kind == PartKind::Opaque
            && matches!(
                self.type_.as_deref(),
                Some("thinking" | "redacted_thinking")
            )
    }

    /// The text of a text part, `""` for other kinds.
    pub fn text_str(&self) -> &str {
        self.text.as_deref().unwrap_or("")
    }

    /// Parts of a tool result, empty for other kinds.
    pub fn inner(&self) -> &[Part] {
        self.content.as_deref().unwrap_or(&[])
    }
}

/// One message in canonical form.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    #[serde(default)]
    pub content: Vec<Part>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub pinned: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Box<RawValue>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_kind: Option<String>,
}

impl Message {
    /// A new message with the given role and parts and nothing else.
    pub fn new(role: Role, content: Vec<Part>) -> Message {
        Message {
            role,
            content,
            pinned: false,
            priority: None,
            name: None,
            id: None,
            extra: None,
            content_kind: None,
        }
    }

    /// Keep `content_kind` truthful after an edit: `"text"` (a bare string in the
    /// provider's shape) only fits a single text part besides tool calls (which OpenAI
    /// keeps outside `content`); anything else becomes `"parts"`.
    pub fn fix_content_kind(&mut self) {
        let mut rest = self.content.iter().filter(|p| p.kind != PartKind::ToolCall);
        let single_text =
            matches!((rest.next(), rest.next()), (Some(p), None) if p.kind == PartKind::Text);
        if self.content_kind.as_deref() == Some("text") && !single_text {
            self.content_kind = Some("parts".into());
        }
    }

    /// Tool calls of this message.
    pub fn tool_calls(&self) -> impl Iterator<Item = &Part> {
        self.content.iter().filter(|p| p.kind == PartKind::ToolCall)
    }

    /// Whether this message holds at least one tool call.
    pub fn has_tool_calls(&self) -> bool {
        self.content.iter().any(|p| p.kind == PartKind::ToolCall)
    }

    /// Whether the message is non-empty and holds nothing but tool calls.
    pub fn only_tool_calls(&self) -> bool {
        !self.content.is_empty() && self.content.iter().all(|p| p.kind == PartKind::ToolCall)
    }

    /// Whether this message holds at least one tool result.
    pub fn has_tool_results(&self) -> bool {
        self.content.iter().any(|p| p.kind == PartKind::ToolResult)
    }

    /// Text of the first part when it is a text part.
    pub fn first_text(&self) -> Option<&str> {
        match self.content.first() {
            Some(p) if p.kind == PartKind::Text => Some(p.text_str()),
            _ => None,
        }
    }

    /// Leading system or developer message.
    pub fn is_preamble_role(&self) -> bool {
        matches!(self.role, Role::System | Role::Developer)
    }

    /// A user message that is only our breadcrumb.
    pub fn is_breadcrumb(&self) -> bool {
        self.role == Role::User
            && self.content.len() == 1
            && self.content[0].kind == PartKind::Text
            && self.content[0].text_str() == BREADCRUMB
    }

    /// A user message that is only a middle-pruning notice (see [`is_notice_text`]).
    pub fn is_notice(&self) -> bool {
        self.role == Role::User
            && self.content.len() == 1
            && self.content[0].kind == PartKind::Text
            && is_notice_text(self.content[0].text_str())
    }

    /// A real user message: starts a turn (DESIGN.md section 4). A user message made
    /// only of (misplaced) tool calls is not one: repair removes it; neither is our own
    /// breadcrumb or middle-pruning notice, a tool-result carrier, or a message of no
    /// words ([`Self::is_blank_user`]). A message whose
    /// only results are stubs ([`Part::is_missing_result`]) next to what the user wrote is
    /// one: repair put the stub of a call the user interrupted into the user's next
    /// message (Anthropic), and that message still opens the user's next turn. Where it
    /// stands, a screenshot in a tool unit is none either ([`crate::turns::real_users`]):
    /// this test reads the message alone.
    pub fn is_real_user(&self) -> bool {
        if self.role != Role::User {
            return false;
        }
        // the parts other than tool results (an iterator: this runs for every message of
        // every trim, and collecting them cost an allocation each time)
        let rest = || {
            self.content
                .iter()
                .filter(|p| p.kind != PartKind::ToolResult)
        };
        let (rest_first, rest_len) = (rest().next(), rest().take(2).count());
        if self.has_tool_results()
            && (rest_first.is_none()
                || !self
                    .content
                    .iter()
                    .all(|p| p.kind != PartKind::ToolResult || p.is_missing_result()))
        {
            return false;
        }
        let first = rest_first
            .filter(|p| p.kind == PartKind::Text)
            .map(|p| p.text_str());
        let only = |f: fn(&str) -> bool| rest_len == 1 && first.is_some_and(f);
        let only_calls = rest_first.is_some() && rest().all(|p| p.kind == PartKind::ToolCall);
        !only_calls
            && !self.is_blank_user()
            && !first.is_some_and(|t| t.starts_with(TOOL_RESULTS_PREFIX))
            && !only(|t| t == BREADCRUMB)
            && !only(is_notice_text)
    }

    /// A user message of no words: no parts, or text parts with none (`""`, `" "`,
    /// `wordless`). It asks nothing, so it is no real user message ([`Self::is_real_user`]):
    /// it opens no turn and is never the current request (fresh53 #1: it was both, and the
    /// task before it went whole as an old turn). The Messages API still sees one as the
    /// end of the assistant's turn ([`crate::pairs`]' thinking rule).
    pub fn is_blank_user(&self) -> bool {
        self.role == Role::User
            && self
                .content
                .iter()
                .all(|p| p.kind == PartKind::Text && wordless(p.text_str()))
    }

    /// A user message of images, files, audio or documents alone (no text but text parts
    /// with no words, `wordless`; no tool results): what an OpenAI agent sends after
    /// the tool messages to show what a tool made (a screenshot), since Chat Completions
    /// takes images in user messages only.
    /// Right after a message holding tool results it belongs to that message's tool unit
    /// ([`crate::turns::tool_units`]; fresh49 #1).
    pub fn is_media_only(&self) -> bool {
        let media = |p: &Part| {
            p.kind == PartKind::Image
                || (p.kind == PartKind::Opaque
                    && p.type_.as_deref().is_some_and(|t| {
                        USER_ONLY_PARTS.contains(&t) || matches!(t, "image" | "document")
                    }))
        };
        // a text part with no words ([`wordless`]) is no text: an agent that always
        // sends a caption sends an empty one (fresh51 #2; fresh53 #3: one definition of
        // blank, not four characters)
        let blank = |p: &Part| p.kind == PartKind::Text && wordless(p.text_str());
        self.role == Role::User
            && self.content.iter().any(media)
            && self.content.iter().all(|p| media(p) || blank(p))
    }

    /// The observation of a text-action agent: a user message whose first part other
    /// than tool results is text starting with [`TOOL_RESULTS_PREFIX`] (what a tool
    /// printed, given back as user text). It never starts a turn, and `trim_turns` cuts
    /// its text as it cuts tool results.
    pub fn is_observation(&self) -> bool {
        self.role == Role::User
            && self
                .content
                .iter()
                .find(|p| p.kind != PartKind::ToolResult)
                .is_some_and(|p| {
                    p.kind == PartKind::Text && p.text_str().starts_with(TOOL_RESULTS_PREFIX)
                })
    }

    /// This message without its stub results ([`Part::is_missing_result`]), or `None`
    /// when it holds none.
    pub fn without_stubs(&self) -> Option<Message> {
        if !self.content.iter().any(Part::is_missing_result) {
            return None;
        }
        let mut out = self.clone();
        out.content.retain(|p| !p.is_missing_result());
        Some(out)
    }
}

/// Whether a Unicode default-ignorable code point (the `Default_Ignorable_Code_Point`
/// property: soft hyphen, zero-width and bidi controls, word joiner, variation
/// selectors, Hangul fillers, tags), and U+2800 BRAILLE PATTERN BLANK: characters that
/// show nothing (`_reference._IGNORABLE`; fresh52 #6, fresh53 #6).
pub(crate) fn is_ignorable(c: char) -> bool {
    matches!(
        c,
        '\u{ad}'
            | '\u{34f}'
            | '\u{61c}'
            | '\u{115f}'..='\u{1160}'
            | '\u{17b4}'..='\u{17b5}'
            | '\u{180b}'..='\u{180f}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{feff}'
            | '\u{ffa0}'
            | '\u{fff0}'..='\u{fff8}'
            | '\u{2800}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0000}'..='\u{e0fff}'
    )
}

/// Whether a text holds no words: only whitespace ([`crate::pairs::is_white_space`]),
/// characters that show nothing ([`is_ignorable`]) and marks that attach to a base
/// character ([`crate::marks::ATTACH`]: UAX #29's Extend, SpacingMark and ZWJ) with none
/// to attach to. A request is never cut to that (fresh52 #6: a request starting with
/// U+202E, U+200B, U+2060 or U+00AD was cut to that character and its marker, reported
/// to fit; fresh54 #3: a request padded with 400 U+0301 was cut to one of them).
pub(crate) fn wordless(t: &str) -> bool {
    t.chars().all(|c| {
        crate::pairs::is_white_space(c) || is_ignorable(c) || in_table(crate::marks::ATTACH, c)
    })
}

/// Whether `c` is in `table`, sorted inclusive code point ranges ([`crate::marks`]).
pub(crate) fn in_table(table: &[(u32, u32)], c: char) -> bool {
    let u = c as u32;
    table
        .binary_search_by(|&(lo, hi)| {
            if hi < u {
                std::cmp::Ordering::Less
            } else if lo > u {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// Where the assistant's final turn starts, as the Messages API reads it for its
/// extended-thinking rule: after the last real user message or the last user message of
/// no words ([`Message::is_blank_user`]: no turn of ours, but the API's), 0 when there is
/// neither. `_reference.thinking_turn_start`.
pub fn thinking_turn_start<M: AsRef<Message>>(messages: &[M]) -> usize {
    let blank = messages.iter().rposition(|m| m.as_ref().is_blank_user());
    crate::turns::last_real_user(messages)
        .max(blank)
        .map_or(0, |i| i + 1)
}

/// Under Anthropic rules, the first assistant message of the assistant's final turn
/// ([`thinking_turn_start`]; the conversation's first assistant message when no user
/// message ends one) when its first part is a thinking block ([`Part::is_thinking`]).
/// With extended thinking on, the API refuses a request whose final assistant turn does
/// not start with one, so every trim keeps this message as it keeps a pinned one
/// (fresh20b #1).
pub fn thinking_anchor<M: AsRef<Message>>(messages: &[M], format: Format) -> Option<usize> {
    if format != Format::Anthropic {
        return None;
    }
    let start = thinking_turn_start(messages);
    let a = (start..messages.len()).find(|&i| messages[i].as_ref().role == Role::Assistant)?;
    messages[a]
        .as_ref()
        .content
        .first()
        .is_some_and(Part::is_thinking)
        .then_some(a)
}

/// Provider shape the messages came in; decides where synthetic content goes and
/// which rules `validate` applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    OpenAI,
    Anthropic,
}

impl Format {
    /// Parse `"openai"` or `"anthropic"`.
    pub fn parse(name: &str) -> crate::Result<Format> {
        match name {
            "openai" => Ok(Format::OpenAI),
            "anthropic" => Ok(Format::Anthropic),
            other => Err(crate::Error::InvalidArgument {
                name: "format".into(),
                reason: format!("expected \"openai\" or \"anthropic\", got {other:?}"),
            }),
        }
    }
}

/// Parse a JSON array of canonical messages.
pub fn parse_messages(json: &str) -> crate::Result<Vec<Message>> {
    Ok(serde_json::from_str(json)?)
}

impl AsRef<Message> for Message {
    fn as_ref(&self) -> &Message {
        self
    }
}

/// `messages` with those at `pins` pinned, the indices counted from `messages[first]` (a
/// request body's `messages` array after a lifted system): borrowed when `pins` is empty.
/// An index past the messages is a [`crate::Error::InvalidArgument`] saying it is not
/// `what.0`, with the range, or `what.1` when there is none.
pub fn pinned_at<'m>(
    messages: &'m [Message],
    pins: &[usize],
    first: usize,
    what: (&str, &str),
) -> crate::Result<std::borrow::Cow<'m, [Message]>> {
    if pins.is_empty() {
        return Ok(std::borrow::Cow::Borrowed(messages));
    }
    let n = messages.len().saturating_sub(first);
    let mut out = messages.to_vec();
    for &i in pins {
        if i >= n {
            let range = if n == 0 {
                what.1.to_string()
            } else {
                format!("0..{}", n - 1)
            };
            return Err(crate::Error::InvalidArgument {
                name: "pinned".into(),
                reason: format!("index {i} is not {} ({range})", what.0),
            });
        }
        out[first + i].pinned = true;
    }
    Ok(std::borrow::Cow::Owned(out))
}
