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

/// How many characters of a caller's string an error quotes ([`quote`]) or names in a
/// field path; the rest is counted, not written (fresh11 N6: a 10 KB role gave a 10 KB
/// one-line error). `_jsontext.QUOTE_CHARS` is the same.
pub(crate) const QUOTE_CHARS: usize = 100;

/// The first [`QUOTE_CHARS`] characters (code points) of `s`, and the marker that says
/// how many were left out (`... (9,900 more characters)`; empty when none was).
/// `_jsontext._bounded` cuts the same.
pub(crate) fn bounded(s: &str) -> (&str, String) {
    match s.char_indices().nth(QUOTE_CHARS) {
        None => (s, String::new()),
        Some((at, _)) => {
            let left_out = s[at..].chars().count();
            let plural = if left_out > 1 { "s" } else { "" };
            (
                &s[..at],
                format!("... ({} more character{plural})", thousands(left_out)),
            )
        }
    }
}

/// `n` with a comma between groups of three digits, as Python's `f"{n:,}"`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `s` as a JSON string on one line, to quote a caller's string in an error (a role, a
/// repeated key): escaped as serde_json escapes it (`"`, `\\`, every C0 control: `\n`,
/// `\t`, `\u0000`), and DEL, the C1 controls (U+0085 NEXT LINE among them; U+009B is CSI
/// to some terminals), U+2028 and U+2029 as `\u007f`, `\u0085`, `\u2028`, which JSON
/// may hold as they are but a terminal or Python's `str.splitlines` takes as control;
/// every other character as it is. Only the first [`QUOTE_CHARS`] characters are
/// written, then how many were left out, after the closing quote (`"www"... (9,900 more
/// characters)`, fresh11 N6). `_jsontext.quote` writes the same (fresh9 B5); so do
/// `validate`'s details, which the CLI prints (fresh11 N2: a tool call id holding an
/// escape sequence reached the terminal as it was).
pub(crate) fn quote(s: &str) -> String {
    let (head, marker) = bounded(s);
    let json = serde_json::to_string(head).unwrap_or_default();
    if !json.contains(unprinted) {
        return json + &marker;
    }
    let mut out = String::with_capacity(json.len() + 10 + marker.len());
    for c in json.chars() {
        if unprinted(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out + &marker
}

/// What JSON may hold as it is but a terminal or `str.splitlines` takes as control: DEL,
/// the C1 controls, U+2028, U+2029 ([`quote`] escapes them).
pub(crate) fn unprinted(c: char) -> bool {
    matches!(c, '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_keeps_the_first_100_characters_and_counts_the_rest() {
        // fresh11 N6: a 10 KB role gave a 10 KB one-line error
        let w100 = "w".repeat(100);
        assert_eq!(quote(&w100), format!("\"{w100}\""));
        assert_eq!(
            quote(&"w".repeat(101)),
            format!("\"{w100}\"... (1 more character)")
        );
        assert_eq!(
            quote(&"w".repeat(10_000)),
            format!("\"{w100}\"... (9,900 more characters)")
        );
        // characters, not bytes: 99 two-byte é and a four-byte emoji are 100
        let head = format!("{}😀", "é".repeat(99));
        assert_eq!(
            quote(&format!("{head}\u{fffd}\u{fffd}\u{fffd}")),
            format!("\"{head}\"... (3 more characters)")
        );
        // escapes are written for the characters kept and do not count
        assert_eq!(
            quote(&"\n".repeat(102)),
            format!("\"{}\"... (2 more characters)", "\\n".repeat(100))
        );
        assert_eq!(
            quote(&format!("{}\u{85}", "\u{2028}".repeat(100))),
            format!("\"{}\"... (1 more character)", "\\u2028".repeat(100))
        );
    }

    #[test]
    fn thousands_groups_digits_as_python_does() {
        for (n, want) in [
            (0, "0"),
            (999, "999"),
            (1_000, "1,000"),
            (9_900, "9,900"),
            (1_234_567, "1,234,567"),
        ] {
            assert_eq!(thousands(n), want);
        }
    }
}
