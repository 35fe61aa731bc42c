//! Error type of the core crate. Every fallible entry point returns [`Result`].

use thiserror::Error;

/// What went wrong, with enough detail to name the offending input.
#[derive(Debug, Error)]
pub enum Error {
    /// The canonical message JSON could not be parsed.
    #[error("invalid message JSON at line {line}, column {column}: {reason}")]
    InvalidJson {
        line: usize,
        column: usize,
        reason: String,
    },
    /// A message is structurally wrong (index and field name it); `offset` is the byte
    /// offset in a request body (the raw gateway path) when known: a repeated key's.
    #[error("message {index}, field {field}: {reason}")]
    InvalidMessage {
        index: usize,
        field: String,
        reason: String,
        offset: Option<usize>,
    },
    /// A request body is not UTF-8, not JSON, or not a request (raw gateway path);
    /// `offset` is the byte offset in the body where the problem is, when known.
    #[error("invalid request body{}: {reason}", at(.offset))]
    InvalidRequest {
        offset: Option<usize>,
        reason: String,
    },
    /// An argument is out of its domain (unknown profile, bad format name, ...).
    #[error("invalid argument {name}: {reason}")]
    InvalidArgument { name: String, reason: String },
}

fn at(offset: &Option<usize>) -> String {
    offset.map(|o| format!(" at byte {o}")).unwrap_or_default()
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::InvalidJson {
            line: e.line(),
            column: e.column(),
            reason: e.to_string(),
        }
    }
}

/// Result alias of the core crate.
pub type Result<T> = std::result::Result<T, Error>;

/// `s` as a JSON string on one line, to quote a caller's string in an error (a role, a
/// repeated key): escaped as serde_json escapes it (`"`, `\\`, every C0 control: `\n`,
/// `\t`, `\u0000`), and DEL, the C1 controls (U+0085 NEXT LINE among them; U+009B is CSI
/// to some terminals), U+2028 and U+2029 as `\u007f`, `\u0085`, `\u2028`, which JSON
/// may hold as they are but a terminal or Python's `str.splitlines` takes as control;
/// every other character as it is. `_jsontext.quote` writes the same (fresh9 B5); so do
/// `validate`'s details, which the CLI prints (fresh11 N2: a tool call id holding an
/// escape sequence reached the terminal as it was).
pub(crate) fn quote(s: &str) -> String {
    let json = serde_json::to_string(s).unwrap_or_default();
    if !json.contains(unprinted) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 10);
    for c in json.chars() {
        if unprinted(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// What JSON may hold as it is but a terminal or `str.splitlines` takes as control: DEL,
/// the C1 controls, U+2028, U+2029 ([`quote`] escapes them).
pub(crate) fn unprinted(c: char) -> bool {
    matches!(c, '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}')
}
