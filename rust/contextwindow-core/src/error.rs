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
