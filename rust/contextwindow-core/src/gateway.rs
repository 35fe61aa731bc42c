//! Raw JSON gateway path: count and trim an OpenAI chat or Anthropic Messages request
//! body without leaving Rust (issue 4, item 3).
//!
//! The body is parsed with [`RawValue`]s borrowed from it: every top-level key other than
//! `messages` (and an unchanged Anthropic `system`) stays where it is, byte for byte,
//! because the output is the input with only the `messages` value spliced out and a new
//! one spliced in. In that new array, every message the engine keeps unchanged is its
//! original bytes; messages the engine makes or changes (breadcrumb, stub results,
//! shortened tool results, repaired calls) are written in the body's provider shape, the
//! way `contextwindow.adapters` writes them.
//!
//! The mapping to canonical [`Message`]s mirrors `python/contextwindow/adapters.py`
//! (its spec), so the engine sees what `trim_turns` sees on the same messages, and the
//! budget counts tool schemas like the CLI's `fit`: per tool, its compact JSON text plus
//! the profile's per-tool overhead; a structured-output schema (OpenAI `response_format`,
//! Anthropic `output_config`/`output_format`) counts as its compact JSON text.

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashSet;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::error::{bounded, quote, unprinted};
use crate::estimate::{profile, Profile};
use crate::model::{anthropic_only_block, Format, Message, Part, PartKind, Role};
use crate::trim::{trim_turns, trim_turns_kept_only, Report, TrimOptions};
use crate::{Error, Result};

// ------------------------------------------------------------------ borrowed JSON pieces

/// An object key, borrowed from the body unless it holds escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> std::result::Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> std::result::Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> std::result::Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A JSON object's entries in order, values raw, and the first key it repeats. A message
/// object ([`Msg`]) holds its `content` apart, decoded in the same pass.
///
/// A repeated key is refused wherever the object is read ([`Ctx::obj`], [`parse`]): which
/// value would a provider take? serde_json and Python keep the last, other parsers the
/// first, so a body read one way here and the other way upstream would be counted and
/// trimmed as one message and sent as another (the fresh tester's N4).
struct Obj<'a>(
    Vec<(Cow<'a, str>, &'a RawValue)>,
    Option<Content<'a>>,
    Option<Repeat<'a>>,
);

/// A key an object holds twice: its decoded name and the value of its second occurrence
/// (borrowed from the body, so it says where the key is: [`Ctx::key_start`]).
struct Repeat<'a> {
    key: Cow<'a, str>,
    value: &'a RawValue,
}

/// An object's entries as they are read, and the first repeated key. Checking a key scans
/// the keys before it (the objects read here have a few) and, past [`KeyLog::SCAN`] keys,
/// looks it up in a hash set instead, so a many-keyed object stays linear. This replaces
/// the scan that kept the last of two values, at the same cost.
struct KeyLog<'a> {
    entries: Vec<(Cow<'a, str>, &'a RawValue)>,
    index: Option<HashSet<Cow<'a, str>>>,
    repeat: Option<Repeat<'a>>,
}

impl<'a> KeyLog<'a> {
    const SCAN: usize = 16;

    fn new() -> Self {
        KeyLog {
            entries: Vec::new(),
            index: None,
            repeat: None,
        }
    }

    fn holds(&self, k: &str) -> bool {
        match &self.index {
            Some(set) => set.contains(k),
            None => self.entries.iter().any(|(e, _)| e == k),
        }
    }

    /// Add an entry; a key already held is remembered as the first repeat (when none is
    /// yet) and not added again.
    fn push(&mut self, k: Cow<'a, str>, v: &'a RawValue) {
        if self.holds(&k) {
            self.repeat_of(k, v);
            return;
        }
        if let Some(set) = &mut self.index {
            set.insert(k.clone());
        } else if self.entries.len() + 1 == Self::SCAN {
            let mut set: HashSet<Cow<'a, str>> =
                self.entries.iter().map(|(e, _)| e.clone()).collect();
            set.insert(k.clone());
            self.index = Some(set);
        }
        self.entries.push((k, v));
    }

    /// Remember `k` (held apart from the entries, as `content` is) as repeated.
    fn repeat_of(&mut self, key: Cow<'a, str>, value: &'a RawValue) {
        if self.repeat.is_none() {
            self.repeat = Some(Repeat { key, value });
        }
    }

    fn obj(self, content: Option<Content<'a>>) -> Obj<'a> {
        Obj(self.entries, content, self.repeat)
    }
}

/// A `content` (or `messages`) value: a string decoded, an array split into its raw
/// items, null, or the name of another JSON type.
enum Content<'a> {
    Text(String),
    Parts(Vec<&'a RawValue>),
    Null,
    Other(&'static str),
}

impl<'de> Deserialize<'de> for Content<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Content<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E>(self, v: &str) -> std::result::Result<Content<'de>, E> {
                Ok(Content::Text(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> std::result::Result<Content<'de>, E> {
                Ok(Content::Text(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<Content<'de>, A::Error> {
                let mut items = Vec::new();
                while let Some(x) = seq.next_element::<&'de RawValue>()? {
                    items.push(x);
                }
                Ok(Content::Parts(items))
            }
            fn visit_unit<E>(self) -> std::result::Result<Content<'de>, E> {
                Ok(Content::Null)
            }
            fn visit_none<E>(self) -> std::result::Result<Content<'de>, E> {
                Ok(Content::Null)
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Content<'de>, A::Error> {
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(Content::Other("an object"))
            }
            fn visit_bool<E>(self, _: bool) -> std::result::Result<Content<'de>, E> {
                Ok(Content::Other("a boolean"))
            }
            fn visit_i64<E>(self, _: i64) -> std::result::Result<Content<'de>, E> {
                Ok(Content::Other("a number"))
            }
            fn visit_u64<E>(self, _: u64) -> std::result::Result<Content<'de>, E> {
                Ok(Content::Other("a number"))
            }
            fn visit_f64<E>(self, _: f64) -> std::result::Result<Content<'de>, E> {
                Ok(Content::Other("a number"))
            }
        }
        d.deserialize_any(V)
    }
}

/// A message object: like [`Obj`], with `content` decoded in the same pass; and its first
/// key when it is borrowed from the body (no escapes), which says where the object starts
/// ([`inline_spans`]).
struct Msg<'a>(Obj<'a>, Option<&'a str>);

impl<'de> Deserialize<'de> for Msg<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Msg<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Msg<'de>, A::Error> {
                let mut log = KeyLog::new();
                let mut content = None;
                let mut first = None;
                while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
                    if first.is_none() {
                        first = Some(match k {
                            Cow::Borrowed(b) => Some(b),
                            Cow::Owned(_) => None,
                        });
                    }
                    if k == "content" && content.is_none() {
                        content = Some(map.next_value::<Content<'de>>()?);
                    } else if k == "content" {
                        let v: &'de RawValue = map.next_value()?;
                        log.repeat_of(k, v);
                    } else {
                        let v: &'de RawValue = map.next_value()?;
                        log.push(k, v);
                    }
                }
                Ok(Msg(log.obj(content), first.flatten()))
            }
        }
        d.deserialize_map(V)
    }
}

/// The request body's top level: `messages` read in the same pass as an `M` (its raw
/// messages, [`Content`], or each message read whole, `Vec<Msg>`), every other entry
/// raw. Only the keys read here (`messages`, `system`, `tools`, and `format`, which says
/// whether a corpus file declares its shape) must not repeat (`obj.2`); the others are
/// copied byte for byte and never looked up.
struct Top<'a, M> {
    obj: Obj<'a>,
    messages: Option<M>,
    /// The key that follows the first `messages` (`Some(None)`: none does, the object
    /// ends there), when it is borrowed from the body: it says where the array ends
    /// ([`inline_spans`]).
    after: Option<Option<&'a str>>,
}

impl<'de, M: Deserialize<'de>> Deserialize<'de> for Top<'de, M> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<M>(std::marker::PhantomData<M>);
        impl<'de, M: Deserialize<'de>> Visitor<'de> for V<M> {
            type Value = Top<'de, M>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Top<'de, M>, A::Error> {
                let mut out: Vec<(Cow<'de, str>, &'de RawValue)> = Vec::new();
                let mut messages = None;
                let mut repeat = None;
                let mut after = None;
                let mut just_read = false;
                loop {
                    let Some(Key(k)) = map.next_key::<Key<'de>>()? else {
                        if just_read {
                            after = Some(None);
                        }
                        break;
                    };
                    if just_read {
                        after = match &k {
                            Cow::Borrowed(b) => Some(Some(*b)),
                            Cow::Owned(_) => None,
                        };
                        just_read = false;
                    }
                    if k == "messages" && messages.is_none() {
                        messages = Some(map.next_value::<M>()?);
                        just_read = true;
                        continue;
                    }
                    let v: &'de RawValue = map.next_value()?;
                    // one scan per `system`, `tools` or `format` key until the first
                    // repeat (a repeated `format`: fresh16b #8)
                    let read_here = k == "messages"
                        || k == "system"
                        || k == "tools"
                        || k == "format"
                        || OUTPUT_SCHEMA_KEYS.contains(&k.as_ref());
                    if repeat.is_none()
                        && read_here
                        && (k == "messages" || out.iter().any(|(e, _)| *e == k))
                    {
                        repeat = Some(Repeat { key: k, value: v });
                    } else {
                        out.push((k, v));
                    }
                }
                Ok(Top {
                    obj: Obj(out, None, repeat),
                    messages,
                    after,
                })
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

impl<'de> Deserialize<'de> for Obj<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Obj<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Obj<'de>, A::Error> {
                let mut log = KeyLog::new();
                while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
                    let v: &'de RawValue = map.next_value()?;
                    log.push(k, v);
                }
                Ok(log.obj(None))
            }
        }
        d.deserialize_map(V)
    }
}

impl<'a> Obj<'a> {
    fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    /// The entries whose key is not in `skip`, plus `add`, as a JSON object; `None`
    /// when that is empty.
    fn rest(&self, skip: &[&str], add: Option<(&str, &RawValue)>) -> Option<Box<RawValue>> {
        let keep = |k: &str| !skip.contains(&k);
        if !self.0.iter().any(|(k, _)| keep(k)) && add.is_none() {
            return None;
        }
        to_raw(&Entries(
            self.0
                .iter()
                .filter(|(k, _)| keep(k))
                .map(|(k, v)| (k.as_ref(), *v))
                .chain(add)
                .collect(),
        ))
    }
}

/// Serializes as a JSON object whose values are raw JSON.
struct Entries<'a>(Vec<(&'a str, &'a RawValue)>);

impl Serialize for Entries<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

fn to_raw<T: Serialize + ?Sized>(v: &T) -> Option<Box<RawValue>> {
    serde_json::value::to_raw_value(v).ok()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Str,
    Obj,
    Arr,
    Null,
    Bool,
    Num,
}

fn kind(v: &RawValue) -> Kind {
    match v.get().as_bytes().first() {
        Some(b'"') => Kind::Str,
        Some(b'{') => Kind::Obj,
        Some(b'[') => Kind::Arr,
        Some(b'n') => Kind::Null,
        Some(b't' | b'f') => Kind::Bool,
        _ => Kind::Num,
    }
}

/// The shape of the request's tool definition `tools[i]` (an object already): an OpenAI
/// one's `function`, when present, is an object whose `name` is a string; a `name` at
/// the top, when present, is a string; a `"type": "function"` tool has a `function` or
/// (the flat shape) a `name`; an Anthropic client tool (an `input_schema` and no
/// `function`) has a `name`, and so has one of its built-in tools (a dated `type`:
/// [`dated_tool_type`]). The dict path says the same
/// (`_engine.tool_definition_error`); fresh12 O4: `{"function": 5}` was counted,
/// fresh18 F5: so was `{"input_schema": {}}`, tools19: so was `{"type": "bash_20250124"}`.
fn tool_shape(cx: &Ctx<'_>, i: usize, tool: &RawValue, o: &Obj<'_>) -> Result<()> {
    let wrong = |v: &RawValue, field: &str, want: &str| {
        invalid(
            Some(cx.start_of(v.get())),
            format!("tools[{i}].{field}: must be {want}, got {}", type_name(v)),
        )
    };
    let missing = |v: &RawValue, field: &str| {
        invalid(
            Some(cx.start_of(v.get())),
            format!("tools[{i}].{field}: is missing"),
        )
    };
    let empty = |v: &RawValue, field: &str| {
        invalid(
            Some(cx.start_of(v.get())),
            format!("tools[{i}].{field}: must not be empty"),
        )
    };
    let ty = o.get("type").filter(|t| kind(t) != Kind::Null);
    if let Some(t) = ty {
        // fresh45 #6: `{"type": 5, "name": "x"}` was counted
        if kind(t) != Kind::Str {
            return Err(wrong(t, "type", "a string"));
        }
    }
    // a function tool names itself in `function`, OpenAI's custom tool in `custom`: each,
    // when present, is an object with a non-empty string name (a function with no name
    // was counted, fresh16a F5, and `{"type": "custom", "custom": {}}`, fresh46 #2; named
    // at the object)
    for key in ["function", "custom"] {
        let Some(f) = o.get(key) else {
            continue;
        };
        let Some(fo) = cx.obj(f, || Place::Other(format!("tools[{i}].{key}")))? else {
            return Err(wrong(f, key, "an object"));
        };
        let field = format!("{key}.name");
        let Some(name) = fo.get("name") else {
            return Err(missing(f, &field));
        };
        if kind(name) != Kind::Str {
            return Err(wrong(name, &field, "a string"));
        }
        if cx.str_is(Some(name), "") {
            return Err(empty(name, &field));
        }
    }
    if let Some(name) = o.get("name") {
        if kind(name) != Kind::Str {
            return Err(wrong(name, "name", "a string"));
        }
        if cx.str_is(Some(name), "") {
            return Err(empty(name, "name"));
        }
    }
    if o.get("function").is_none() && o.get("name").is_none() {
        // a function tool holds its name in `function`, or (the flat shape) in `name`
        if cx.str_is(ty, "function") {
            return Err(missing(tool, "function"));
        }
        // Anthropic's shape (as the format detection reads it), or one of its built-in
        // tools (a dated type): the API requires a name; so does a tool of no type (null
        // or "" is none), which is neither API's unless it is a named Anthropic tool
        // (fresh44 #4: `{}` and `{"description": ...}` were counted), and a custom tool
        // that names itself neither at the top (Anthropic) nor in `custom` (OpenAI;
        // fresh45 #6)
        if o.get("input_schema").is_some()
            || dated_tool_type(cx, ty)
            || ty.is_none_or(|t| cx.str_is(Some(t), ""))
            || (cx.str_is(ty, "custom") && o.get("custom").is_none())
        {
            return Err(missing(tool, "name"));
        }
    }
    Ok(())
}

/// Whether `v` is the `type` of an Anthropic built-in tool: a string ending in `_` and an
/// eight-digit date (`bash_20250124`, `web_search_20250305`), the versioned form every
/// such type has; OpenAI's tool types have no such suffix
/// (`web_search_preview_2025_03_11`). `_engine.is_dated_tool_type` on the dict path.
fn dated_tool_type<'a>(cx: &Ctx<'a>, v: Option<&'a RawValue>) -> bool {
    let Some(v) = v.filter(|v| kind(v) == Kind::Str) else {
        return false;
    };
    cx.text(v).is_ok_and(|t| {
        let b = t.as_bytes();
        b.len() > 9 && b[b.len() - 9] == b'_' && b[b.len() - 8..].iter().all(u8::is_ascii_digit)
    })
}

fn type_name(v: &RawValue) -> &'static str {
    match kind(v) {
        Kind::Str => "a string",
        Kind::Obj => "an object",
        Kind::Arr => "an array",
        Kind::Null => "null",
        Kind::Bool => "a boolean",
        Kind::Num => "a number",
    }
}

fn invalid(offset: Option<usize>, reason: impl Into<String>) -> Error {
    Error::InvalidRequest {
        offset,
        reason: reason.into(),
    }
}

/// serde_json's error for a value nested deeper than it reads (128 levels).
const RECURSION: &str = "recursion limit exceeded";

/// `e`, raised while reading message `index`, named as the dict path names it when it is
/// serde_json's nesting limit (`message 1: is nested too deeply`, `_engine.prepare`).
fn nested_in(index: usize, e: Error) -> Error {
    match e {
        Error::InvalidRequest { reason, .. } if reason.starts_with(RECURSION) => {
            bad_message(index, "", "is nested too deeply")
        }
        other => other,
    }
}

/// `e`, raised while reading the value `place` names (`tools[0]`, `system`), saying so
/// when it is serde_json's nesting limit; the offset stays.
fn nested_at(place: &str, e: Error) -> Error {
    match e {
        Error::InvalidRequest { offset, reason } if reason.starts_with(RECURSION) => {
            invalid(offset, format!("{place}: is nested too deeply"))
        }
        other => other,
    }
}

/// `message 1, field content[0]` (`message 1` for the message itself), as an
/// `InvalidMessageError` names the place.
fn place(index: usize, field: &str) -> Place {
    Place::Message(index, field.to_owned())
}

/// Where a value read is, for the error about a key repeated in it: a field of message
/// `index` (`""`: the message itself), whose error is an `InvalidMessageError` as any
/// other error in a message (fresh9 B2), or a place outside the messages (`tools[0]`).
#[derive(Clone)]
enum Place {
    Message(usize, String),
    Other(String),
}

impl std::fmt::Display for Place {
    /// `message 0, field content[1]`, `message 0`, `tools[0]`.
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Place::Message(index, field) if field.is_empty() => write!(f, "message {index}"),
            Place::Message(index, field) => write!(f, "message {index}, field {field}"),
            Place::Other(s) => f.write_str(s),
        }
    }
}

/// The error for a key repeated below `place`: `path` leads from it to the object that
/// holds the key (`.q[1]`, `""` for the value itself), `what` says which key; `offset`
/// is where in the body. In a message: an `InvalidMessage` naming it and the field.
fn repeat_at(place: Place, path: &str, what: &str, offset: Option<usize>) -> Error {
    match place {
        Place::Message(index, field) => Error::InvalidMessage {
            index,
            field: format!("{field}{path}").trim_start_matches('.').to_owned(),
            reason: what.to_owned(),
            offset,
        },
        Place::Other(s) => {
            let sep = if s.is_empty() && path.is_empty() {
                ""
            } else {
                ": "
            };
            invalid(offset, format!("{s}{path}{sep}{what}"))
        }
    }
}

fn bad_message(index: usize, field: &str, reason: impl Into<String>) -> Error {
    Error::InvalidMessage {
        index,
        field: field.to_owned(),
        reason: reason.into(),
        offset: None,
    }
}

/// Parsing context: the whole body, to turn positions inside any slice of it into
/// byte offsets of the body.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    body: &'a str,
    /// Read for [`count_request`]: what only writing a message back needs (how its
    /// content was spelled, `content_kind`) is not kept.
    count_only: bool,
}

impl<'a> Ctx<'a> {
    /// A context for reading `body` (which the fitted body is written from).
    fn new(body: &'a str) -> Self {
        Ctx {
            body,
            count_only: false,
        }
    }

    /// `content_kind` of a message or tool result whose content was spelled `ckind`
    /// (`None` when only counting: the count does not read it).
    fn spelled(&self, ckind: &str) -> Option<String> {
        (!self.count_only).then(|| ckind.to_owned())
    }

    fn start_of(&self, s: &str) -> usize {
        (s.as_ptr() as usize).wrapping_sub(self.body.as_ptr() as usize)
    }

    /// A serde_json error while parsing `within` (a slice of the body) as an
    /// `InvalidRequest` error with the byte offset in the body.
    fn json_err(&self, e: serde_json::Error, within: &str) -> Error {
        let base = self.start_of(within);
        let base = if base <= self.body.len() { base } else { 0 };
        let offset = if e.is_eof() {
            Some(base + within.len())
        } else if e.line() == 0 {
            None
        } else {
            let bytes = within.as_bytes();
            let mut line = 1;
            let mut start = 0;
            if e.line() > 1 {
                for (i, &b) in bytes.iter().enumerate() {
                    if b == b'\n' {
                        line += 1;
                        if line == e.line() {
                            start = i + 1;
                            break;
                        }
                    }
                }
            }
            // column 0: the newline ending the line before (a raw one inside a string)
            let at = match e.column() {
                0 => start.saturating_sub(1),
                c => start + c - 1,
            };
            Some(base + offending_byte(bytes, at, &e).min(within.len()))
        };
        let text = e.to_string();
        let mut reason = match text.rfind(" at line ") {
            Some(i) => text[..i].to_owned(),
            None => text,
        };
        if offset.is_some_and(|at| trailing_comma(self.body.as_bytes(), at, &reason)) {
            // the words serde_json has where it reads an array or object itself (the
            // top level, `messages`), not those of its raw-value pass (fresh17b #6: the
            // CLI, which asks that pass, said "key must be a string")
            reason = "trailing comma".to_owned();
        }
        invalid(offset, reason)
    }

    /// `v` as an object (`None` when it is not one); `place` names it in the error
    /// for a repeated key (`message 0, field content[1]`).
    fn obj(&self, v: &'a RawValue, place: impl FnOnce() -> Place) -> Result<Option<Obj<'a>>> {
        if kind(v) != Kind::Obj {
            return Ok(None);
        }
        let o: Obj<'a> = serde_json::from_str(v.get()).map_err(|e| self.json_err(e, v.get()))?;
        match &o.2 {
            Some(r) => Err(self.repeated(r, place())),
            None => Ok(Some(o)),
        }
    }

    /// The error for a repeated key: its name, where it is read (`place`, or the top
    /// level when empty) and the byte offset of its second occurrence.
    fn repeated(&self, r: &Repeat<'_>, place: Place) -> Error {
        let what = format!("the key {} appears more than once", quote(r.key.as_ref()));
        repeat_at(place, "", &what, Some(self.key_start(r.value)))
    }

    /// Offset of the opening quote of the key whose value is `v`: back over the `:` and
    /// whitespace to the key's closing quote, then to the nearest quote before it that is
    /// not escaped (preceded by an even number of backslashes).
    fn key_start(&self, v: &RawValue) -> usize {
        let b = self.body.as_bytes();
        let mut i = self.start_of(v.get()).min(b.len());
        while i > 0 && matches!(b[i - 1], b' ' | b'\t' | b'\n' | b'\r' | b':') {
            i -= 1;
        }
        // b[i - 1] is the key's closing quote
        let mut j = i.saturating_sub(1);
        while j > 0 {
            j -= 1;
            if b[j] == b'"' && b[..j].iter().rev().take_while(|&&c| c == b'\\').count() % 2 == 0 {
                return j;
            }
        }
        0
    }

    fn array(&self, v: &'a RawValue) -> Result<Vec<&'a RawValue>> {
        serde_json::from_str(v.get()).map_err(|e| self.json_err(e, v.get()))
    }

    /// The JSON string `v` decoded. One without a backslash is its text between the
    /// quotes: serde_json read it as a raw value, which checked it is a valid string (no
    /// control character), so there is nothing to decode.
    fn string(&self, v: &'a RawValue) -> Result<String> {
        self.text(v).map(Cow::into_owned)
    }

    /// [`Ctx::string`], borrowed from the body when the string holds no escape.
    fn text(&self, v: &'a RawValue) -> Result<Cow<'a, str>> {
        let t = v.get();
        if t.len() >= 2
            && t.starts_with('"')
            && t.ends_with('"')
            && memchr::memchr(b'\\', t.as_bytes()).is_none()
        {
            return Ok(Cow::Borrowed(&t[1..t.len() - 1]));
        }
        serde_json::from_str(t)
            .map(Cow::Owned)
            .map_err(|e| self.json_err(e, t))
    }

    /// `o`, an object read already (by [`Calls`]), as [`Ctx::obj`] gives it: an error
    /// when a key repeats in it.
    fn checked(&self, o: Obj<'a>, place: impl FnOnce() -> Place) -> Result<Obj<'a>> {
        match &o.2 {
            Some(r) => Err(self.repeated(r, place())),
            None => Ok(o),
        }
    }

    /// Whether `v` is the JSON string `s`.
    fn str_is(&self, v: Option<&'a RawValue>, s: &str) -> bool {
        match v {
            Some(v) if kind(v) == Kind::Str => {
                let t = v.get();
                if !t.contains('\\') {
                    t.len() == s.len() + 2 && &t[1..t.len() - 1] == s
                } else {
                    self.string(v).is_ok_and(|x| x == s)
                }
            }
            _ => false,
        }
    }

    /// `d[key]` as a string (`_str` in the adapters).
    fn req_str(&self, d: &Obj<'a>, key: &str, index: usize, field: &str) -> Result<String> {
        self.req_str_at(d, key, index, || field.to_owned())
    }

    /// [`Ctx::req_str`], borrowed from the body when the string holds no escape.
    fn req_text(&self, d: &Obj<'a>, key: &str, index: usize, field: &str) -> Result<Cow<'a, str>> {
        match d.get(key) {
            None => Err(bad_message(index, field, "is missing")),
            Some(v) if kind(v) == Kind::Str => self.text(v),
            Some(_) => Err(bad_message(index, field, "must be a string")),
        }
    }

    /// [`Ctx::req_str`] with the field's name written only for an error.
    fn req_str_at(
        &self,
        d: &Obj<'a>,
        key: &str,
        index: usize,
        field: impl FnOnce() -> String,
    ) -> Result<String> {
        match d.get(key) {
            None => Err(bad_message(index, &field(), "is missing")),
            Some(v) if kind(v) == Kind::Str => self.string(v),
            Some(_) => Err(bad_message(index, &field(), "must be a string")),
        }
    }

    /// The compact JSON text of `v` as `msgspec.json.encode` writes it on the dict path
    /// (serde_json's writer with numbers laid out as msgspec lays them out:
    /// [`MsgspecNumbers`], and `-0` read as the int 0: [`int_zeros`]; fresh10 F-num),
    /// which is counted: a key repeated in any object inside it is refused (which value would the
    /// provider read?), named with `place` (`tools[0]`, `message 1, field content[0]`)
    /// and the path from there to the object that holds it (`.input.q`, `[1]`, as the
    /// CLI names it), with the offset just past the repeat's value.
    ///
    /// serde_json reads the value ([`Unique`]). A number it refuses as out of range (a
    /// float cannot hold `1e400` or `1` and 5,000 zeros) is not refused here: the value is
    /// then counted by its text as sent ([`RawValue::get`]), after [`Ctx::check_keys`]
    /// looked for repeated keys in it (fresh8 N5). An integer beyond 64 bits that a float
    /// holds (30 digits) is read by serde_json as the nearest float and counted as that
    /// float's text (`1.2345678901234568e29`; Python keeps the int's digits):
    /// serde_json's `arbitrary_precision` would keep the digits but changes number
    /// handling crate-wide.
    fn compact(&self, v: &'a RawValue, place: impl FnOnce() -> Place) -> Result<String> {
        let text = v.get();
        let mut de = serde_json::Deserializer::from_str(text);
        let neg_zero = Cell::new(false);
        let read = Unique(Path::Root, &neg_zero)
            .deserialize(&mut de)
            .and_then(|value| de.end().map(|()| value));
        match read {
            Ok(mut value) => {
                if neg_zero.get() {
                    // rare: a -0.0 was read; which of them were written `-0`?
                    int_zeros(&mut value, v).map_err(|e| self.json_err(e, text))?;
                }
                msgspec_text(&value)
            }
            Err(e) if out_of_range(&e) => {
                // a rare path (a number out of range): the place is written out once
                self.check_keys(v, Path::Root, 1, &place())?;
                Ok(text.to_owned())
            }
            Err(e) => {
                // only a repeated key is a data error ([`Unique`]); the reason holds the
                // path and the key, the place is put in front of it
                let repeat = e.classify() == serde_json::error::Category::Data;
                Err(match self.json_err(e, text) {
                    Error::InvalidRequest { offset, reason } if repeat => {
                        // `{path}: the key "k" ...` (repeat_reason); the key is written as a
                        // JSON string, where a quote is escaped, so the last `: the key "`
                        // is the one repeat_reason wrote, whatever the path's keys hold
                        match reason.rfind(REPEAT) {
                            Some(i) => repeat_at(place(), &reason[..i], &reason[i + 2..], offset),
                            None => invalid(offset, format!("{}{reason}", place())),
                        }
                    }
                    other => other,
                })
            }
        }
    }

    /// The check [`Unique`] makes, on a value serde_json cannot read into a
    /// `serde_json::Value` because a number in it is out of range: every object and array
    /// in `v` is read by serde_json into its raw entries ([`Pairs`]), which are checked
    /// in document order, a key's value before the key itself, as [`Unique`] checks them
    /// (`depth` counts the brackets open at `v`, up to serde_json's limit of 128).
    fn check_keys(
        &self,
        v: &'a RawValue,
        path: Path<'_>,
        depth: usize,
        place: &Place,
    ) -> Result<()> {
        let k = kind(v);
        if !matches!(k, Kind::Obj | Kind::Arr) {
            return Ok(());
        }
        if depth >= MAX_NESTING {
            // named by the callers (`nested_in`, `nested_at`), as serde_json's error is
            return Err(invalid(Some(self.start_of(v.get())), RECURSION));
        }
        if k == Kind::Arr {
            for (i, item) in self.array(v)?.into_iter().enumerate() {
                self.check_keys(item, Path::Index(&path, i), depth + 1, place)?;
            }
            return Ok(());
        }
        let Pairs(entries) =
            serde_json::from_str(v.get()).map_err(|e| self.json_err(e, v.get()))?;
        let mut seen: HashSet<&str> = HashSet::with_capacity(entries.len());
        for (key, value) in &entries {
            self.check_keys(value, Path::Key(&path, key), depth + 1, place)?;
            if !seen.insert(key) {
                let end = self.start_of(value.get()) + value.get().len();
                let what = format!("the key {} appears more than once", quote(key));
                return Err(repeat_at(
                    place.clone(),
                    &path.to_string(),
                    &what,
                    Some(end),
                ));
            }
        }
        Ok(())
    }

    fn compact_raw(&self, v: &'a RawValue, place: impl FnOnce() -> Place) -> Result<Box<RawValue>> {
        let text = self.compact(v, place)?;
        RawValue::from_string(text).map_err(|e| invalid(None, e.to_string()))
    }
}

/// The compact JSON text of `value` with its numbers written as `msgspec.json.encode`
/// writes them ([`MsgspecNumbers`]).
fn msgspec_text(value: &Value) -> Result<String> {
    let mut out = Vec::with_capacity(128);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, MsgspecNumbers);
    value
        .serialize(&mut ser)
        .map_err(|e| invalid(None, e.to_string()))?;
    String::from_utf8(out).map_err(|e| invalid(None, e.to_string()))
}

/// serde_json's compact writer, but a float laid out as `msgspec.json.encode` (the dict
/// path's writer) lays it out. Both write the shortest digits that read back as the same
/// float, fixed for a decimal exponent in -5..=15 (`100000.0`, `0.00001`) and in
/// exponent form outside it, where serde_json writes a `+` msgspec leaves out
/// (`1e+16` against `1e16`, `1.5e+300` against `1.5e300`; a negative exponent is
/// `1e-7` in both, no exponent is zero-padded). Integers are written alike by both.
struct MsgspecNumbers;

impl serde_json::ser::Formatter for MsgspecNumbers {
    fn write_f64<W: ?Sized + std::io::Write>(&mut self, w: &mut W, v: f64) -> std::io::Result<()> {
        // serde_json's own digits and layout into a buffer (at most 24 bytes:
        // `-1.2345678901234567e-308`), then everything but an exponent's `+`
        let mut buf = [0u8; 32];
        let mut cur = std::io::Cursor::new(&mut buf[..]);
        serde_json::ser::Formatter::write_f64(&mut serde_json::ser::CompactFormatter, &mut cur, v)?;
        let n = usize::try_from(cur.position()).unwrap_or(buf.len());
        let s = &buf[..n];
        match memchr::memchr(b'+', s) {
            Some(i) => {
                w.write_all(&s[..i])?;
                w.write_all(&s[i + 1..])
            }
            None => w.write_all(s),
        }
    }
}

/// Where `value` (read from `raw` by [`Unique`]) holds a -0.0 that was written `-0`, the
/// int 0: serde_json reads `-0` as the float -0.0 (written `-0.0`), Python's `json.loads`
/// as the int 0 (written `0`); `-0.0` and `-0e0` are the float -0.0 in both. Only values
/// whose text holds `-0` are looked into; each is read again into its raw entries, as
/// [`Ctx::check_keys`] reads them (an object's entries come in the order of `value`'s,
/// which keeps the order read: serde_json's `preserve_order`, and no key is repeated).
fn int_zeros(value: &mut Value, raw: &RawValue) -> serde_json::Result<()> {
    let text = raw.get();
    if memchr::memmem::find(text.as_bytes(), b"-0").is_none() {
        return Ok(());
    }
    match value {
        Value::Number(n) if text == "-0" && n.as_f64() == Some(0.0) => {
            *value = Value::from(0u64);
        }
        Value::Array(items) => {
            let raws: Vec<&RawValue> = serde_json::from_str(text)?;
            for (x, r) in items.iter_mut().zip(raws) {
                int_zeros(x, r)?;
            }
        }
        Value::Object(map) => {
            let Pairs(entries) = serde_json::from_str(text)?;
            for (x, (_, r)) in map.values_mut().zip(entries) {
                int_zeros(x, r)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// serde_json's nesting limit: the 128th open bracket is refused.
const MAX_NESTING: usize = 128;

/// Whether serde_json refused a number as out of range: a float cannot hold it (`1e400`,
/// an integer of 310 digits or more). It is serde_json's own syntax error, told from a
/// message a visitor raises (a data error) by its category. serde_json reads a number so
/// where a value is decoded: a counted value ([`Ctx::compact`]), `content`, `messages`;
/// everywhere else numbers stay raw text.
fn out_of_range(e: &serde_json::Error) -> bool {
    e.classify() == serde_json::error::Category::Syntax
        && e.to_string().starts_with("number out of range")
}

/// Where [`Unique`] reads in a counted value: the key or index of each object or array
/// around it, innermost last, kept on the stack (the text is made only for an error).
#[derive(Clone, Copy)]
enum Path<'p> {
    Root,
    Key(&'p Path<'p>, &'p str),
    Index(&'p Path<'p>, usize),
}

impl std::fmt::Display for Path<'_> {
    /// As the CLI writes a field below another (`_jsontext.field_path`): `.key` (its
    /// controls escaped: [`escape_controls`]; cut after
    /// [`crate::error::QUOTE_CHARS`] characters, as [`quote`] cuts), `[index]`.
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Key(up, k) => {
                // a long key is cut as `quote` cuts a string (fresh11 N6)
                let (head, marker) = bounded(k);
                write!(f, "{up}.{}{marker}", escape_controls(head))
            }
            Path::Index(up, i) => write!(f, "{up}[{i}]"),
        }
    }
}

/// `.q: the key "x" appears more than once`: the reason for a key repeated in the object
/// at `path`, to follow the place of the counted value.
fn repeat_reason(path: &Path<'_>, key: &str) -> String {
    format!("{path}: the key {} appears more than once", quote(key))
}

/// What [`repeat_reason`] writes between the path and the key.
const REPEAT: &str = ": the key \"";

/// A JSON value read as `serde_json::Value` reads it (a [`DeserializeSeed`] carrying the
/// path to the value it reads), except that an object holding a key twice is an error
/// naming the path to that object ([`repeat_reason`]; `Value` keeps the last value
/// silently). It sets its flag when it reads a float -0.0 (`-0`, `-0.0`: [`int_zeros`]).
struct Unique<'p>(Path<'p>, &'p Cell<bool>);

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = serde_json::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> std::result::Result<Value, E> {
        Ok(v.into())
    }
    fn visit_i64<E>(self, v: i64) -> std::result::Result<Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E>(self, v: u64) -> std::result::Result<Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E>(self, v: f64) -> std::result::Result<Value, E> {
        if v == 0.0 && v.is_sign_negative() {
            self.1.set(true);
        }
        Ok(v.into())
    }
    fn visit_str<E>(self, v: &str) -> std::result::Result<Value, E> {
        Ok(v.into())
    }
    fn visit_string<E>(self, v: String) -> std::result::Result<Value, E> {
        Ok(v.into())
    }
    fn visit_unit<E>(self) -> std::result::Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(x) =
            seq.next_element_seed(Unique(Path::Index(&self.0, out.len()), self.1))?
        {
            out.push(x);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(Key(k)) = map.next_key()? {
            let x = map.next_value_seed(Unique(Path::Key(&self.0, &k), self.1))?;
            if out.contains_key(k.as_ref()) {
                return Err(serde::de::Error::custom(repeat_reason(&self.0, &k)));
            }
            out.insert(k.into_owned(), x);
        }
        Ok(Value::Object(out))
    }
}

/// An object's entries in order, a repeated key as often as it is written, values raw
/// ([`Ctx::check_keys`]).
struct Pairs<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Pairs<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Pairs<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Pairs<'de>, A::Error> {
                let mut out = Vec::new();
                while let Some((Key(k), v)) = map.next_entry::<Key<'de>, &'de RawValue>()? {
                    out.push((k, v));
                }
                Ok(Pairs(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// The tool calls of an OpenAI message read in one pass, each as [`Call`] reads one; when
/// one is not read so (see [`Call`]), the array is read again call by call from the raw
/// values, as [`openai_call`] reads them, which says what is wrong.
struct Calls<'a>(Vec<Call<'a>>);

impl<'de> Deserialize<'de> for Calls<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Calls<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of function calls")
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<Calls<'de>, A::Error> {
                let mut out = Vec::new();
                while let Some(c) = seq.next_element::<Call<'de>>()? {
                    out.push(c);
                }
                Ok(Calls(out))
            }
        }
        d.deserialize_seq(V)
    }
}

/// A function call read whole: its entries but `function` as [`Obj`] reads them (a
/// repeated key kept, for [`openai_call`] to refuse in its turn), and its `function`
/// ([`Function`]). Only a call whose `type` is missing, null or `"function"` and whose
/// `function` is read so, once, is read here; any other is an error, which sends the
/// array to the raw read.
struct Call<'a> {
    obj: Obj<'a>,
    function: Function<'a>,
}

/// The `function` of a [`Call`]: an object holding `name` and `arguments` strings, decoded
/// in the same pass, and its other entries raw; a repeated key, a missing or non-string
/// `name` or `arguments`, or a value that is not an object is an error.
struct Function<'a> {
    rest: Obj<'a>,
    name: Cow<'a, str>,
    arguments: Cow<'a, str>,
}

/// The error a [`Call`] or [`Function`] raises for a call it leaves to the raw read.
fn not_read_here<E: serde::de::Error>() -> E {
    E::custom("left to the raw read")
}

impl<'de> Deserialize<'de> for Call<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Call<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a function call")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Call<'de>, A::Error> {
                let mut log = KeyLog::new();
                let mut function = None;
                while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
                    if k == "function" {
                        if function.is_some() {
                            return Err(not_read_here());
                        }
                        function = Some(map.next_value::<Function<'de>>()?);
                    } else {
                        let v: &'de RawValue = map.next_value()?;
                        log.push(k, v);
                    }
                }
                let obj = log.obj(None);
                // a function call's type (`openai_call` reads it the same way)
                let function_type = match obj.get("type") {
                    None => true,
                    Some(t) => match kind(t) {
                        Kind::Null => true,
                        Kind::Str => serde_json::from_str::<Key<'_>>(t.get())
                            .is_ok_and(|Key(t)| t == "function"),
                        _ => false,
                    },
                };
                match function {
                    Some(function) if function_type => Ok(Call { obj, function }),
                    _ => Err(not_read_here()),
                }
            }
        }
        d.deserialize_map(V)
    }
}

impl<'de> Deserialize<'de> for Function<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Function<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object with name and arguments")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Function<'de>, A::Error> {
                let mut log = KeyLog::new();
                let (mut name, mut arguments) = (None, None);
                while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
                    let slot = match k.as_ref() {
                        "name" => &mut name,
                        "arguments" => &mut arguments,
                        _ => {
                            let v: &'de RawValue = map.next_value()?;
                            log.push(k, v);
                            continue;
                        }
                    };
                    if slot.is_some() {
                        return Err(not_read_here());
                    }
                    let Key(text) = map.next_value::<Key<'de>>()?;
                    *slot = Some(text);
                }
                match (name, arguments, log.repeat.is_none()) {
                    (Some(name), Some(arguments), true) => Ok(Function {
                        rest: log.obj(None),
                        name,
                        arguments,
                    }),
                    _ => Err(not_read_here()),
                }
            }
        }
        d.deserialize_map(V)
    }
}

fn part(kind: PartKind) -> Part {
    let mut p = Part::text("");
    p.kind = kind;
    p.text = None;
    p
}

fn text_part(text: String, extra: Option<Box<RawValue>>) -> Part {
    let mut p = Part::text("");
    p.text = Some(text);
    p.extra = extra;
    p
}

fn opaque(ty: String, raw: Box<RawValue>) -> Part {
    let mut p = part(PartKind::Opaque);
    p.type_ = Some(ty);
    p.raw = Some(raw);
    p
}

type PartFn<'a> = fn(&Ctx<'a>, &'a RawValue, usize, &str, bool) -> Result<Part>;

/// `d["content"]`: decoded already for a message, read from the raw value otherwise.
fn take_content<'a>(cx: &Ctx<'a>, d: &mut Obj<'a>) -> Result<Option<Content<'a>>> {
    if let Some(c) = d.1.take() {
        return Ok(Some(c));
    }
    let Some(v) = d.get("content") else {
        return Ok(None);
    };
    Ok(Some(match kind(v) {
        Kind::Str => Content::Text(cx.string(v)?),
        Kind::Arr => Content::Parts(cx.array(v)?),
        Kind::Null => Content::Null,
        _ => Content::Other(type_name(v)),
    }))
}

/// Parse `d["content"]` into parts and how it was spelled (`_content` in the adapters).
fn content<'a>(
    cx: &Ctx<'a>,
    d: &mut Obj<'a>,
    index: usize,
    field: &str,
    parse: PartFn<'a>,
    nested: bool,
    nullable: bool,
) -> Result<(Vec<Part>, &'static str)> {
    match take_content(cx, d)? {
        Some(Content::Text(t)) => Ok((vec![text_part(t, None)], "text")),
        Some(Content::Parts(items)) => {
            let mut parts = Vec::with_capacity(items.len());
            for (j, p) in items.into_iter().enumerate() {
                parts.push(parse(cx, p, index, &format!("{field}[{j}]"), nested)?);
            }
            Ok((parts, "parts"))
        }
        None if nullable => Ok((Vec::new(), "absent")),
        Some(Content::Null) if nullable => Ok((Vec::new(), "null")),
        None => Err(bad_message(index, field, "is missing")),
        Some(_) => Err(bad_message(
            index,
            field,
            "must be a string or a list of blocks",
        )),
    }
}

/// A part: an object with a string `type` (`_typed` in the adapters).
fn typed<'a>(
    cx: &Ctx<'a>,
    v: &'a RawValue,
    index: usize,
    field: &str,
) -> Result<(Obj<'a>, String)> {
    let Some(p) = cx.obj(v, || place(index, field))? else {
        return Err(bad_message(index, field, "must be an object"));
    };
    let ty = cx.req_str(&p, "type", index, &format!("{field}.type"))?;
    Ok((p, ty))
}

// ----------------------------------------------------------------------------- OpenAI

fn openai_part<'a>(
    cx: &Ctx<'a>,
    v: &'a RawValue,
    index: usize,
    field: &str,
    _nested: bool,
) -> Result<Part> {
    let (p, ty) = typed(cx, v, index, field)?;
    match ty.as_str() {
        "text" => {
            let text = cx.req_str(&p, "text", index, &format!("{field}.text"))?;
            Ok(text_part(text, p.rest(&["type", "text"], None)))
        }
        "image_url" => {
            let img = match p.get("image_url") {
                Some(i) => cx.obj(i, || place(index, &format!("{field}.image_url")))?,
                None => None,
            };
            let Some(img) = img else {
                return Err(bad_message(
                    index,
                    &format!("{field}.image_url"),
                    "must be an object with a url",
                ));
            };
            cx.req_str(&img, "url", index, &format!("{field}.image_url.url"))?;
            let url = img.get("url").map(RawValue::to_owned);
            let detail = match img.get("detail") {
                Some(d) if kind(d) == Kind::Str => Some(cx.string(d)?),
                None => None,
                Some(d) if kind(d) == Kind::Null => None,
                // it decides the image's cost; read as none, it went on (fresh16a F5)
                Some(_) => {
                    return Err(bad_message(
                        index,
                        &format!("{field}.image_url.detail"),
                        "must be a string",
                    ))
                }
            };
            let skip: &[&str] = if detail.is_some() {
                &["url", "detail"]
            } else {
                &["url"]
            };
            let inner = img.rest(skip, None);
            let mut out = part(PartKind::Image);
            out.source = url;
            out.detail = detail;
            out.extra = p.rest(
                &["type", "image_url"],
                inner.as_deref().map(|r| ("image_url", r)),
            );
            Ok(out)
        }
        "tool_use" | "tool_result" => Err(bad_message(
            index,
            &format!("{field}.type"),
            format!(
                "{ty:?} is an Anthropic block in a body read as OpenAI's (one body cannot mix \
                 the two shapes); pass provider=\"anthropic\" for an Anthropic body"
            ),
        )),
        "file" => {
            checked_file(cx, &p, index, field)?;
            Ok(opaque(ty, cx.compact_raw(v, || place(index, field))?))
        }
        _ => Ok(opaque(ty, cx.compact_raw(v, || place(index, field))?)),
    }
}

/// Refuse an OpenAI `file` part whose `file` is not an object, or one of whose `file_id`,
/// `file_data` and `filename` is neither a string nor null (`adapters._check_file`): a
/// `file_id` without `file_data` is priced as a document, and `{"file_id": 5}` or
/// `"file": "x"` was counted as a few tokens of JSON, silently (fresh45 #5).
fn checked_file<'a>(cx: &Ctx<'a>, p: &Obj<'a>, index: usize, field: &str) -> Result<()> {
    let place_of = || place(index, &format!("{field}.file"));
    let Some(file) = p
        .get("file")
        .map(|f| cx.obj(f, place_of))
        .transpose()?
        .flatten()
    else {
        return Err(bad_message(
            index,
            &format!("{field}.file"),
            "must be an object",
        ));
    };
    for key in ["file_id", "file_data", "filename"] {
        if file
            .get(key)
            .is_some_and(|v| !matches!(kind(v), Kind::Str | Kind::Null))
        {
            return Err(bad_message(
                index,
                &format!("{field}.file.{key}"),
                "must be a string",
            ));
        }
    }
    Ok(())
}

/// The tool calls of an OpenAI message, each from its raw value, or read already with the
/// others ([`Calls`]), as parts. The names of fields are written only for an error.
fn openai_calls<'a>(cx: &Ctx<'a>, calls: &'a RawValue, index: usize) -> Result<Vec<Part>> {
    let place_of = |j: usize| place(index, &format!("tool_calls[{j}]"));
    match serde_json::from_str(calls.get()) {
        Ok(Calls(read)) => {
            let mut parts = Vec::with_capacity(read.len());
            for (j, Call { obj, function }) in read.into_iter().enumerate() {
                let tc = cx.checked(obj, || place_of(j))?;
                parts.push(openai_call(cx, Some(tc), Some(function), index, j)?);
            }
            Ok(parts)
        }
        Err(_) => {
            let raw = cx.array(calls)?;
            let mut parts = Vec::with_capacity(raw.len());
            for (j, v) in raw.into_iter().enumerate() {
                let tc = cx.obj(v, || place_of(j))?;
                parts.push(openai_call(cx, tc, None, index, j)?);
            }
            Ok(parts)
        }
    }
}

/// Tool call `j` of message `index`: `tc` its object (`None`: it is not one), `read` its
/// `function` when [`Calls`] read it.
fn openai_call<'a>(
    cx: &Ctx<'a>,
    tc: Option<Obj<'a>>,
    read: Option<Function<'a>>,
    index: usize,
    j: usize,
) -> Result<Part> {
    let at = |rest: &str| format!("tool_calls[{j}]{rest}");
    let Some(tc) = tc else {
        return Err(bad_message(index, &at(""), "must be an object"));
    };
    let id = cx.req_str_at(&tc, "id", index, || at(".id"))?;
    let ty = tc.get("type");
    // a missing or null type is a function call's (adapters.py reads them so)
    let (key, text) = if ty.is_none_or(|t| kind(t) == Kind::Null) || cx.str_is(ty, "function") {
        ("function", "arguments")
    } else if cx.str_is(ty, "custom") {
        // a free-form call: its input is text, not JSON
        ("custom", "input")
    } else {
        return Err(bad_message(index, &at(".type"), CALL_TYPE));
    };
    // the call's entries, `function` among them (a call read whole holds it apart)
    let entries = tc.len() + usize::from(read.is_some());
    let (name, arguments, body_extra) = match read {
        // a call read whole is a function call ([`Call`]): `key` is "function"
        Some(f) if key == "function" => (
            f.name.into_owned(),
            f.arguments.into_owned(),
            f.rest.rest(&[], None),
        ),
        Some(_) => return Err(internal("a call read whole is not a function call")),
        None => {
            let body = match tc.get(key) {
                Some(f) => cx.obj(f, || place(index, &at(&format!(".{key}"))))?,
                None => None,
            };
            let Some(body) = body else {
                return Err(bad_message(
                    index,
                    &at(&format!(".{key}")),
                    format!("must be an object with name and {text}"),
                ));
            };
            let name = cx.req_str_at(&body, "name", index, || at(&format!(".{key}.name")))?;
            let arguments = cx.req_str_at(&body, text, index, || at(&format!(".{key}.{text}")))?;
            (name, arguments, body.rest(&["name", text], None))
        }
    };
    let mut out = part(PartKind::ToolCall);
    out.id = Some(id);
    out.name = Some(name);
    out.arguments = Some(arguments);
    if body_extra.is_some() || key != "function" || ty.is_none() || entries != 3 {
        // Not the standard function shape: every other key verbatim ({} records a missing
        // "type"; {"type": "custom"} is what writes a custom call back as one).
        let extra = tc.rest(&["id", key], body_extra.as_deref().map(|r| (key, r)));
        out.extra = Some(extra.unwrap_or_else(empty_object));
    }
    Ok(out)
}

fn empty_object() -> Box<RawValue> {
    RawValue::from_string("{}".to_owned()).unwrap_or_else(|_| RawValue::NULL.to_owned())
}

/// Why an OpenAI `function_call` is refused: the deprecated form of `tool_calls`, whose
/// arguments would go uncounted (`adapters._FUNCTION_CALL`).
const FUNCTION_CALL: &str = "the deprecated function-calling form is not read; send tool_calls";

/// Why an OpenAI `function` message is refused: the result half of the same deprecated
/// form (`adapters._FUNCTION_ROLE`; fresh18 F5: it got `unknown role "function"`).
const FUNCTION_ROLE: &str =
    r#"the deprecated function-calling form is not read; send a "tool" message"#;

/// Why a tool call of another `type` is refused (`adapters._CALL_TYPE`).
const CALL_TYPE: &str = r#"must be "function" or "custom""#;

/// Why a role is refused: `unknown role "wizard"`, the name quoted by [`quote`]
/// (`adapters._unknown_role` writes it the same way, so the three paths say the same).
fn unknown_role(name: &str) -> String {
    format!("unknown role {}", quote(name))
}

/// Why `tool_calls` (but null or `[]`) on a tool message is refused: its one part is the
/// result, so they would go uncounted (`adapters._CALLS_ON_TOOL`; on a user, system or
/// developer message they are read as misplaced calls: fresh49 #2).
const CALLS_ON_TOOL: &str =
    "a tool message holds a tool result, not tool calls; they would go uncounted";

/// Whether a raw `tool_calls` value holds no call: null or an empty array.
fn no_calls(v: &RawValue) -> bool {
    match kind(v) {
        Kind::Null => true,
        Kind::Arr => v.get()[1..v.get().len() - 1].trim().is_empty(),
        _ => false,
    }
}

/// A `tool_calls` value that marks the messages as OpenAI's: an array of one or more
/// (`adapters._holds_calls`).
fn holds_calls(v: &RawValue) -> bool {
    kind(v) == Kind::Arr && !no_calls(v)
}

/// A key as a field path names it (`content[0].input.a\u2028b`, not quoted): the
/// controls [`quote`] escapes, escaped the same way (`\n`, `\u0001`, `\u0085`,
/// `\u2028`), every other character as it is (`"` and `\\` too), so an error naming the
/// path stays on one line (`_jsontext.field_path` writes the same).
fn escape_controls(s: &str) -> Cow<'_, str> {
    if !s.contains(|c: char| c < ' ' || unprinted(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 10);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if c < ' ' || unprinted(c) => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Refuse a `refusal` that is neither a string nor null (`adapters._check_refusal`): its
/// text is counted, and another value was read as none, silently (fresh16a F5).
fn check_refusal(d: &Obj<'_>, index: usize) -> Result<()> {
    match d.get("refusal").map(kind) {
        None | Some(Kind::Str | Kind::Null) => Ok(()),
        Some(_) => Err(bad_message(index, "refusal", "must be a string")),
    }
}

fn role_of(name: &str) -> Option<Role> {
    Some(match name {
        "system" => Role::System,
        "developer" => Role::Developer,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" => Role::Tool,
        _ => return None,
    })
}

fn openai_message<'a>(cx: &Ctx<'a>, d: &mut Obj<'a>, index: usize) -> Result<Message> {
    let role_name = cx.req_text(d, "role", index, "role")?;
    let role = role_of(&role_name).ok_or_else(|| {
        let reason = if role_name == "function" {
            FUNCTION_ROLE.to_owned()
        } else {
            unknown_role(&role_name)
        };
        bad_message(index, "role", reason)
    })?;
    // Chat Completions: only an assistant message may omit content or set it null
    let nullable = role == Role::Assistant;
    let (mut parts, ckind) = content(cx, d, index, "content", openai_part, false, nullable)?;
    if d.get("function_call")
        .is_some_and(|v| kind(v) != Kind::Null)
    {
        // the deprecated form of tool_calls (adapters.py says the same)
        return Err(bad_message(index, "function_call", FUNCTION_CALL));
    }
    let name = match d.get("name") {
        Some(n) if kind(n) == Kind::Str => Some(cx.string(n)?),
        None => None,
        Some(n) if kind(n) == Kind::Null => None,
        // the API takes a string; read as no name, it went on as an unknown key
        Some(_) => return Err(bad_message(index, "name", "must be a string")),
    };
    check_refusal(d, index)?;
    // the keys read, left out of `extra`: role, content, then name, tool_call_id and
    // tool_calls when they are read
    let mut skip = ["role", "content", "", "", ""];
    let mut skipped = 2;
    let mut skip_also = |key| {
        skip[skipped] = key;
        skipped += 1;
    };
    if name.is_some() {
        skip_also("name");
    }
    if role == Role::Tool {
        let call_id = cx.req_str(d, "tool_call_id", index, "tool_call_id")?;
        let mut result = part(PartKind::ToolResult);
        result.call_id = Some(call_id);
        result.content = Some(parts);
        result.content_kind = cx.spelled(ckind);
        skip_also("tool_call_id");
        if d.get("tool_calls").is_some_and(|v| !no_calls(v)) {
            return Err(bad_message(index, "tool_calls", CALLS_ON_TOOL));
        }
        let mut m = Message::new(Role::Tool, vec![result]);
        m.name = name;
        m.extra = d.rest(&skip[..skipped], None);
        return Ok(m);
    }
    // on a user, system or developer message too: misplaced calls (fresh49 #2)
    if let Some(calls) = d.get("tool_calls") {
        match kind(calls) {
            Kind::Null => {}
            Kind::Arr => {
                // every call read in one pass when each is a function call read so
                // ([`Calls`]); else each from its raw value, as [`openai_call`] says
                // what is wrong
                let calls = openai_calls(cx, calls, index)?;
                if !calls.is_empty() {
                    parts.extend(calls);
                    skip_also("tool_calls");
                }
            }
            _ => return Err(bad_message(index, "tool_calls", "must be a list or null")),
        }
    }
    let mut m = Message::new(role, parts);
    m.name = name;
    m.extra = d.rest(&skip[..skipped], None);
    m.content_kind = cx.spelled(ckind);
    Ok(m)
}

// -------------------------------------------------------------------------- Anthropic

fn anthropic_block<'a>(
    cx: &Ctx<'a>,
    v: &'a RawValue,
    index: usize,
    field: &str,
    nested: bool,
) -> Result<Part> {
    let (mut b, ty) = typed(cx, v, index, field)?;
    match ty.as_str() {
        "text" => {
            let text = cx.req_str(&b, "text", index, &format!("{field}.text"))?;
            Ok(text_part(text, b.rest(&["type", "text"], None)))
        }
        "image" => {
            let source = checked_source(cx, &b, index, field)?;
            let mut out = part(PartKind::Image);
            out.source = Some(source.to_owned());
            out.extra = b.rest(&["type", "source"], None);
            Ok(out)
        }
        "document" => {
            // counted by its JSON text, as any block the model does not hold
            checked_source(cx, &b, index, field)?;
            Ok(opaque(ty, cx.compact_raw(v, || place(index, field))?))
        }
        "tool_use" if !nested => {
            let id = cx.req_str(&b, "id", index, &format!("{field}.id"))?;
            let name = cx.req_str(&b, "name", index, &format!("{field}.name"))?;
            let Some(input) = b.get("input") else {
                return Err(bad_message(index, &format!("{field}.input"), "is missing"));
            };
            if kind(input) != Kind::Obj {
                // the Messages API takes an object only (adapters.py says the same)
                return Err(bad_message(
                    index,
                    &format!("{field}.input"),
                    "must be an object",
                ));
            }
            let mut out = part(PartKind::ToolCall);
            out.id = Some(id);
            out.name = Some(name);
            out.arguments = Some(cx.compact(input, || place(index, &format!("{field}.input")))?);
            out.extra = b.rest(&["type", "id", "name", "input"], None);
            Ok(out)
        }
        "tool_result" if !nested => {
            let call_id = cx.req_str(&b, "tool_use_id", index, &format!("{field}.tool_use_id"))?;
            let (parts, ckind) = content(
                cx,
                &mut b,
                index,
                &format!("{field}.content"),
                anthropic_block,
                true,
                true,
            )?;
            let is_error = match b.get("is_error").map(kind) {
                None | Some(Kind::Null) => false,
                Some(Kind::Bool) => b.get("is_error").is_some_and(|v| v.get() == "true"),
                // "yes" was read as false, silently (fresh16a F5)
                Some(_) => {
                    return Err(bad_message(
                        index,
                        &format!("{field}.is_error"),
                        "must be a bool",
                    ))
                }
            };
            let skip: &[&str] = if is_error {
                &["type", "tool_use_id", "content", "is_error"]
            } else {
                &["type", "tool_use_id", "content"]
            };
            let mut out = part(PartKind::ToolResult);
            out.call_id = Some(call_id);
            out.content = Some(parts);
            out.is_error = is_error;
            out.extra = b.rest(skip, None);
            out.content_kind = cx.spelled(ckind);
            Ok(out)
        }
        _ => Ok(opaque(ty, cx.compact_raw(v, || place(index, field))?)),
    }
}

/// Why a system message in an Anthropic request that has its system already (the
/// top-level `system`, or on the dict path the leading system message standing for it)
/// is refused (`_engine._SECOND_SYSTEM`).
const SECOND_SYSTEM: &str =
    "an Anthropic request takes one system prompt, its top-level \"system\"; this is a second";

/// Why OpenAI's `tool_calls` / `function_call` (not null) on an Anthropic message are
/// refused: not read, their payload would go uncounted (`adapters._OPENAI_CALLS`).
const OPENAI_CALLS: &str =
    "OpenAI's tool-calling form is not read in an Anthropic message; send tool_use blocks";

/// Why a block of a system message (an Anthropic top-level `system`) other than a text
/// block is refused (`adapters._SYSTEM_BLOCK`).
const SYSTEM_BLOCK: &str = "must be a text block";

/// A block of a system message: text blocks only, as the Messages API takes in its
/// `system` (`adapters._anthropic_system_block`).
fn anthropic_system_block<'a>(
    cx: &Ctx<'a>,
    v: &'a RawValue,
    index: usize,
    field: &str,
    nested: bool,
) -> Result<Part> {
    let (_, ty) = typed(cx, v, index, field)?;
    if ty != "text" {
        return Err(bad_message(index, field, SYSTEM_BLOCK));
    }
    anthropic_block(cx, v, index, field, nested)
}

/// The `source` of an image or document block (`_source` in the adapters): an object
/// holding a string `type` and the string fields the Messages API requires for it
/// (`base64`: `media_type` and `data`; `url`: `url`; `file`: `file_id`; any other type:
/// none). A source without a `type` (`{}`) was priced as an image of unknown size.
fn checked_source<'a>(
    cx: &Ctx<'a>,
    b: &Obj<'a>,
    index: usize,
    field: &str,
) -> Result<&'a RawValue> {
    let at = format!("{field}.source");
    let Some(raw) = b.get("source") else {
        return Err(bad_message(index, &at, "must be an object"));
    };
    let Some(source) = cx.obj(raw, || place(index, &at))? else {
        return Err(bad_message(index, &at, "must be an object"));
    };
    let ty = source.get("type");
    match ty {
        Some(v) if kind(v) == Kind::Str => {}
        Some(_) => {
            return Err(bad_message(
                index,
                &format!("{at}.type"),
                "must be a string",
            ))
        }
        None => return Err(bad_message(index, &format!("{at}.type"), "is missing")),
    }
    let keys: &[&str] = if cx.str_is(ty, "base64") {
        &["media_type", "data"]
    } else if cx.str_is(ty, "url") {
        &["url"]
    } else if cx.str_is(ty, "file") {
        &["file_id"]
    } else {
        &[]
    };
    for key in keys {
        // the kind only: a base64 `data` can be megabytes, not worth decoding here
        match source.get(key) {
            Some(v) if kind(v) == Kind::Str => {}
            Some(_) => {
                return Err(bad_message(
                    index,
                    &format!("{at}.{key}"),
                    "must be a string",
                ))
            }
            None => return Err(bad_message(index, &format!("{at}.{key}"), "is missing")),
        }
    }
    Ok(raw)
}

fn anthropic_message<'a>(cx: &Ctx<'a>, d: &mut Obj<'a>, index: usize) -> Result<Message> {
    let role_name = cx.req_text(d, "role", index, "role")?;
    let role = match role_name.as_ref() {
        "system" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        _ => return Err(bad_message(index, "role", unknown_role(&role_name))),
    };
    let parse: PartFn<'a> = if role == Role::System {
        anthropic_system_block
    } else {
        anthropic_block
    };
    let (parts, ckind) = content(cx, d, index, "content", parse, false, false)?;
    // null, and a `tool_calls` of `[]`, hold no call: kept verbatim, as on an OpenAI
    // message (fresh50 #3: the writer wrote `[]` from an OpenAI user message and the
    // reader refused it)
    if d.get("tool_calls").is_some_and(|v| !no_calls(v)) {
        return Err(bad_message(index, "tool_calls", OPENAI_CALLS));
    }
    if d.get("function_call")
        .is_some_and(|v| kind(v) != Kind::Null)
    {
        return Err(bad_message(index, "function_call", OPENAI_CALLS));
    }
    check_refusal(d, index)?;
    let mut m = Message::new(role, parts);
    m.extra = d.rest(&["role", "content"], None);
    m.content_kind = cx.spelled(ckind);
    Ok(m)
}

// -------------------------------------------------------------------------- the body

/// A request body, parsed.
struct Request<'a> {
    cx: Ctx<'a>,
    format: Format,
    /// Byte range of the `messages` array in the body (`None` when it is empty).
    messages_span: Option<(usize, usize)>,
    /// The text of each message of the body's `messages` (a slice of the body).
    raw: Vec<&'a str>,
    /// Anthropic top-level `system`, when not null: canonical message 0.
    system: Option<&'a RawValue>,
    /// Canonical messages (the lifted system first).
    canonical: Vec<Message>,
    /// Whose placement rules the engine applies: `format`, except that a plain chat
    /// (only user and assistant text) read without a named shape (no `provider`, no
    /// corpus `"format"`) gets the breadcrumb as a leading text block, as the dict path
    /// does (`_engine._provider_of`).
    rules: Format,
    /// Compact JSON text of each tool definition.
    tools: Vec<String>,
    /// Compact JSON text of each structured-output schema ([`output_schemas`]).
    schemas: Vec<String>,
}

/// `"openai"`, `"anthropic"` or `None` (detect).
pub fn parse_provider(name: Option<&str>) -> Result<Option<Format>> {
    match name {
        None => Ok(None),
        Some("openai") => Ok(Some(Format::OpenAI)),
        Some("anthropic") => Ok(Some(Format::Anthropic)),
        Some(other) => Err(Error::InvalidArgument {
            name: "provider".into(),
            reason: format!("expected \"openai\", \"anthropic\" or None, got {other:?}"),
        }),
    }
}

/// `detect_format` of the adapters, on raw messages.
/// A message that is not an object (`None`) is skipped, as `detect_format` skips it; the
/// conversion names it, in its turn.
fn detect_messages<'a>(cx: &Ctx<'a>, msgs: &[Option<Obj<'a>>]) -> Result<Format> {
    let mut anthropic = false;
    for (i, m) in msgs.iter().enumerate() {
        let Some(m) = m else {
            continue;
        };
        let role = m.get("role");
        if cx.str_is(role, "tool")
            || cx.str_is(role, "developer")
            || cx.str_is(role, "function")
            // only an array of calls decides: null, [] (fresh52 #5), {} or "" (fresh54 #4)
            // decide nothing
            || m.get("tool_calls").is_some_and(holds_calls)
            || m.get("tool_call_id").is_some_and(|v| kind(v) != Kind::Null)
        {
            return Ok(Format::OpenAI);
        }
        let Some(Content::Parts(blocks)) = &m.1 else {
            continue;
        };
        for (j, &b) in blocks.iter().enumerate() {
            let Some(b) = cx.obj(b, || place(i, &format!("content[{j}]")))? else {
                continue;
            };
            let t = b.get("type");
            if cx.str_is(t, "image_url") || cx.str_is(t, "input_audio") {
                return Ok(Format::OpenAI);
            }
            let anthropic_type = match t {
                Some(t) if kind(t) == Kind::Str => {
                    cx.text(t).is_ok_and(|t| anthropic_only_block(&t))
                }
                _ => false,
            };
            if anthropic_type || (cx.str_is(t, "image") && b.get("source").is_some()) {
                anthropic = true;
            }
        }
    }
    Ok(if anthropic {
        Format::Anthropic
    } else {
        Format::OpenAI
    })
}

/// The offset of the byte serde_json's error `e` is about, from `at`, the byte its line
/// and column point at: the first byte that cannot be where it is (fresh17b #8). Its
/// column is that byte's for most errors, but one past a raw control character found
/// while skipping a string (a `RawValue`, as the first pass over the body reads every
/// value; a string read as a string is right), and the last of the four hex digits of a
/// `\u` escape that holds something else (the first such byte is the problem).
fn offending_byte(b: &[u8], at: usize, e: &serde_json::Error) -> usize {
    let reason = e.to_string();
    if reason.starts_with("control character") {
        if b.get(at).is_some_and(|&c| c >= 0x20) && b.get(at + 1).is_some_and(|&c| c < 0x20) {
            return at + 1;
        }
    } else if reason.starts_with("invalid escape") && at >= 5 {
        let e = at - 5;
        if escaped_u(b, e) {
            if let Some(k) = b[e + 2..=at].iter().position(|c| !c.is_ascii_hexdigit()) {
                return e + 2 + k;
            }
        }
    }
    at
}

/// Whether serde_json's `reason` at `at` is a comma before the end of an array (`expected
/// value` at its `]`) or an object (`key must be a string` at its `}`).
fn trailing_comma(b: &[u8], at: usize, reason: &str) -> bool {
    let end = match reason {
        "expected value" => b']',
        "key must be a string" => b'}',
        _ => return false,
    };
    b.get(at) == Some(&end)
        && b[..at]
            .iter()
            .rev()
            .find(|c| !matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
            == Some(&b',')
}

/// Whether a `\u` that starts an escape is at `i`.
fn escaped_u(b: &[u8], i: usize) -> bool {
    b.get(i) == Some(&b'\\') && b.get(i + 1) == Some(&b'u') && starts_escape(b, i)
}

/// Whether a message has what only OpenAI's shape has (a `tool`, `developer` or
/// `function` role, `tool_calls`, `tool_call_id`): `io._openai_marked`.
fn openai_marked<'a>(cx: &Ctx<'a>, msgs: &[Option<Obj<'a>>]) -> bool {
    msgs.iter().flatten().any(|m| {
        let role = m.get("role");
        cx.str_is(role, "tool")
            || cx.str_is(role, "developer")
            || cx.str_is(role, "function")
            || m.get("tool_calls").is_some()
            || m.get("tool_call_id").is_some()
    })
}

/// The body with every escaped lone surrogate (`\ud800` not followed by a low surrogate
/// escape, or a low one not preceded by a high one) written `\ufffd`: the same length, so
/// byte offsets do not move. JSON allows these escapes and the Python path reads them as
/// U+FFFD, but they are not Unicode scalar values and serde_json rejects them. Borrowed
/// when there are none.
///
/// Only a `\u` can start one, so the body is searched for that pair of bytes (memchr's
/// vectorised `memmem`): a body of text with a `\n` on every line is one pass, not a stop
/// at every backslash. A backslash found so starts an escape when the run of backslashes
/// right before it is of even length (`\\u` is an escaped backslash, then text), which
/// is where a walk from one escape to the next lands (the walk it replaced is the oracle
/// of `surrogate_tests`).
pub fn replace_lone_surrogates(body: &[u8]) -> Cow<'_, [u8]> {
    let mut out: Option<Vec<u8>> = None;
    for i in memchr::memmem::find_iter(body, b"\\u") {
        let Some(u @ 0xD800..=0xDFFF) = escaped_unit(body, i) else {
            continue;
        };
        if !starts_escape(body, i) {
            continue;
        }
        let paired = if u <= 0xDBFF {
            // an escape starts right after this one's four hex digits
            matches!(escaped_unit(body, i + 6), Some(0xDC00..=0xDFFF))
        } else {
            i >= 6
                && matches!(escaped_unit(body, i - 6), Some(0xD800..=0xDBFF))
                && starts_escape(body, i - 6)
        };
        if !paired {
            out.get_or_insert_with(|| body.to_vec())[i..i + 6].copy_from_slice(b"\\ufffd");
        }
    }
    out.map_or(Cow::Borrowed(body), Cow::Owned)
}

/// The code unit of the `\uXXXX` at `i` (`None` when `b[i..]` is not one).
fn escaped_unit(b: &[u8], i: usize) -> Option<u16> {
    if b.get(i) != Some(&b'\\') || b.get(i + 1) != Some(&b'u') {
        return None;
    }
    let hex = std::str::from_utf8(b.get(i + 2..i + 6)?).ok()?;
    u16::from_str_radix(hex, 16).ok()
}

/// Whether the backslash at `i` starts an escape: an even number of backslashes (pairs,
/// each an escaped backslash) run up to it.
fn starts_escape(b: &[u8], i: usize) -> bool {
    b[..i].iter().rev().take_while(|&&c| c == b'\\').count() % 2 == 0
}

/// Read a request body; `count_only` for [`count_request`] (see [`Ctx::count_only`]).
fn parse(body: &[u8], provider: Option<Format>, count_only: bool) -> Result<Request<'_>> {
    // simdutf8's validator (SIMD, chosen at run time) is several times std's on
    // non-ASCII text; its `compat` flavour reports where the first bad byte is
    let text = simdutf8::compat::from_utf8(body).map_err(|e| {
        invalid(
            Some(e.valid_up_to()),
            "invalid UTF-8 (the first bad byte is here)",
        )
    })?;
    if text.starts_with('\u{FEFF}') {
        // RFC 8259 8.1: a JSON text sent over a network must not begin with one
        return Err(invalid(
            Some(0),
            "a UTF-8 byte order mark (U+FEFF) starts the body; a JSON request body must not have one",
        ));
    }
    let cx = Ctx {
        body: text,
        count_only,
    };
    let trimmed = text.trim_start_matches([' ', '\t', '\n', '\r']);
    if !trimmed.starts_with('{') && !trimmed.is_empty() {
        // Still report a syntax error first, with its offset.
        let v: &RawValue = serde_json::from_str(text).map_err(|e| cx.json_err(e, text))?;
        return Err(invalid(
            Some(cx.start_of(v.get())),
            format!(
                "the request body is {}, expected an object with \"messages\"",
                type_name(v)
            ),
        ));
    }
    // One pass reads the top level and every message in it ([`read_inline`]); a body it
    // does not take (an error anywhere, a message that is not an object, a key with
    // escapes where a message starts or the array ends) is read as before: the top level
    // with each message raw, then each message, which says what is wrong and where.
    let (top, raw, pending) = match read_inline(&cx, text) {
        Some(read) => read,
        None => read_raw(&cx, text)?,
    };
    let messages_span = match (raw.first(), raw.last()) {
        (Some(first), Some(last)) => Some(array_span(&cx, first, last)?),
        _ => None,
    };
    let mut tools: Vec<String> = Vec::new();
    let mut anthropic_tools = false;
    match top.get("tools") {
        None => {}
        Some(t) if kind(t) == Kind::Null => {}
        Some(t) if kind(t) == Kind::Arr => {
            for (i, tool) in cx.array(t)?.into_iter().enumerate() {
                let Some(o) = cx.obj(tool, || Place::Other(format!("tools[{i}]")))? else {
                    return Err(invalid(
                        Some(cx.start_of(tool.get())),
                        format!(
                            "tools[{i}]: a tool definition must be an object, got {}",
                            type_name(tool)
                        ),
                    ));
                };
                anthropic_tools |= o.get("input_schema").is_some();
                let text = cx.compact(tool, || Place::Other(format!("tools[{i}]")));
                tools.push(text.map_err(|e| nested_at(&format!("tools[{i}]"), e))?);
                // then its shape, after its JSON text, as the dict path (fresh12 O4)
                tool_shape(&cx, i, tool, &o)?;
            }
        }
        Some(t) => {
            return Err(invalid(
                Some(cx.start_of(t.get())),
                format!("\"tools\" is {}, not a list", type_name(t)),
            ))
        }
    }
    let schemas = output_schemas(&cx, &top)?;
    // A message that is not an object is `None` here and refused when the conversion below
    // comes to it, so an earlier message's field error is named first, as the dict path
    // (`to_canonical`) and the CLI name the first bad message (fresh8 N7).
    let mut objs = Vec::with_capacity(raw.len());
    for (i, (m, o)) in raw.iter().zip(pending).enumerate() {
        let o = match o {
            Some(o) => o,
            None if !m.starts_with('{') => {
                objs.push(None);
                continue;
            }
            None => match serde_json::from_str(m) {
                Ok(Msg(o, _)) => o,
                // a `content` that is a number too large for a float (`1e400`), which `Msg`
                // reads as a value: read it raw instead, for the conversion to name it as it
                // names any number there (fresh8 N5)
                Err(e) if out_of_range(&e) => {
                    serde_json::from_str(m).map_err(|e| nested_in(i, cx.json_err(e, m)))?
                }
                Err(e) => return Err(nested_in(i, cx.json_err(e, m))),
            },
        };
        if let Some(r) = &o.2 {
            return Err(cx.repeated(r, place(i, "")));
        }
        objs.push(Some(o));
    }
    // A top-level `"format"` of exactly "openai" or "anthropic" is the corpus files'
    // convention (`{"format", "messages", "source", ...}`): it names the shape as
    // `provider` would, the CLI reads it so (io.load_conversation), and no request API
    // has such a key. Any other value (Ollama's `"json"` or a JSON schema) is an unknown
    // key, copied (fresh16a F1).
    let declared = if cx.str_is(top.get("format"), "openai") {
        Some(Format::OpenAI)
    } else if cx.str_is(top.get("format"), "anthropic") {
        Some(Format::Anthropic)
    } else {
        None
    };
    let body_marked = top.get("system").is_some() || anthropic_tools;
    let format = match provider.or(declared) {
        Some(f) => f,
        None if body_marked => Format::Anthropic,
        None => detect_messages(&cx, &objs)?,
    };
    // Read as Anthropic's for a body marker while a message has OpenAI's marks: an error
    // in a message then says why (the CLI says the same, io.Conversation.describe). Not
    // when the messages decided it (a `tool_calls` of `{}` beside a `tool_use` block
    // named tools the body did not have: fresh54 #4)
    let hint = if provider.or(declared).is_none() && body_marked && openai_marked(&cx, &objs) {
        let why = if top.get("system").is_some() {
            r#"top-level "system""#
        } else {
            r#"tools with "input_schema""#
        };
        format!(
            r#" (read as an Anthropic body for its {why}; provider="openai" reads it as OpenAI's)"#
        )
    } else {
        String::new()
    };
    let system = match format {
        Format::Anthropic => top.get("system").filter(|s| kind(s) != Kind::Null),
        Format::OpenAI => None,
    };
    let mut canonical = Vec::with_capacity(objs.len() + 1);
    if let Some(s) = system {
        canonical.push(system_message(&cx, s)?);
    }
    // where message `i`'s value starts in the body: the offset of an error in it that has
    // none closer (a repeated key has its own)
    let start = |i: usize| raw.get(i).map(|m| cx.start_of(m));
    for (i, o) in objs.into_iter().enumerate() {
        let m = match (o, format) {
            (None, _) => Err(bad_message(i, "", "must be an object")),
            (Some(mut o), Format::OpenAI) => openai_message(&cx, &mut o, i),
            (Some(mut o), Format::Anthropic) => anthropic_message(&cx, &mut o, i),
        };
        canonical.push(m.map_err(|e| match nested_in(i, e) {
            // a repeated key (the one kind with an offset) is not about the shape read
            Error::InvalidMessage {
                index,
                field,
                reason,
                offset: None,
            } => Error::InvalidMessage {
                index,
                field,
                reason: if hint.is_empty() {
                    reason
                } else {
                    reason + &hint
                },
                offset: start(i),
            },
            other => other,
        })?);
    }
    if format == Format::Anthropic && canonical.first().is_some_and(|m| m.role == Role::System) {
        // the Messages API refuses a system message next to its top-level system (which
        // a leading system message stands for, as on the dict path: _engine._one_system)
        let second = canonical
            .iter()
            .skip(1)
            .position(|m| m.role == Role::System);
        if let Some(i) = second {
            let index = i + 1 - usize::from(system.is_some()); // in the body's messages
            return Err(Error::InvalidMessage {
                index,
                field: "role".to_owned(),
                reason: SECOND_SYSTEM.into(),
                offset: start(index),
            });
        }
    }
    let plain = canonical.iter().all(|m| {
        matches!(m.role, Role::User | Role::Assistant)
            && m.content.iter().all(|p| p.kind == PartKind::Text)
    });
    // A declared `"format"` names the shape as `provider` does, for the rules too: a plain
    // chat under `"format": "openai"` gets the breadcrumb as a message of its own, as the
    // CLI places it (`cli._rules_format`; fresh16b #6).
    let rules = if provider.or(declared).is_none() && plain {
        Format::Anthropic
    } else {
        format
    };
    Ok(Request {
        rules,
        cx,
        format,
        messages_span,
        raw,
        system,
        canonical,
        tools,
        schemas,
    })
}

/// The top-level keys that carry a structured-output JSON schema ([`output_schemas`]).
const OUTPUT_SCHEMA_KEYS: [&str; 3] = ["response_format", "output_config", "output_format"];

/// Compact JSON text of each structured-output schema the body sends, which the provider
/// puts before the model as it puts the tool definitions: OpenAI chat's
/// `response_format.json_schema` (its `name`, `description`, `schema`, `strict`) when
/// `response_format.type` is `"json_schema"`; Anthropic's `output_config.format.schema`
/// (structured outputs) and `output_format.schema` (their beta spelling) when that
/// format's `type` is `"json_schema"`. Counted as their text, as a tool definition is:
/// how a provider renders a schema is not published. A `"json_schema"` format whose
/// schema is missing or not an object is refused, as the providers refuse it
/// (`response_format.json_schema: must be an object, got a string`,
/// `output_config.format.schema: is missing`; it was counted as 0). Anything else under
/// these keys (`{"type": "json_object"}`, `{"type": "text"}`, a value of another shape)
/// adds nothing and is copied as it was; a key repeated in an object read on the way is
/// refused, as in the tools.
fn output_schemas(cx: &Ctx<'_>, top: &Obj<'_>) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for key in OUTPUT_SCHEMA_KEYS {
        let Some(mut at_format) = top.get(key) else {
            continue;
        };
        let Some(mut format) = cx.obj(at_format, || Place::Other(key.to_owned()))? else {
            continue;
        };
        let mut place = key.to_owned();
        if key == "output_config" {
            let Some(v) = format.get("format") else {
                continue;
            };
            place.push_str(".format");
            let Some(inner) = cx.obj(v, || Place::Other(place.clone()))? else {
                continue;
            };
            format = inner;
            at_format = v;
        }
        if !cx.str_is(format.get("type"), "json_schema") {
            continue;
        }
        let field = if key == "response_format" {
            "json_schema"
        } else {
            "schema"
        };
        let at = format!("{place}.{field}");
        match format.get(field) {
            Some(schema) if kind(schema) == Kind::Obj => {
                let text = cx.compact(schema, || Place::Other(at.clone()));
                out.push(text.map_err(|e| nested_at(&at, e))?);
            }
            Some(other) => {
                return Err(invalid(
                    Some(cx.start_of(other.get())),
                    format!("{at}: must be an object, got {}", type_name(other)),
                ))
            }
            None => {
                return Err(invalid(
                    Some(cx.start_of(at_format.get())),
                    format!("{at}: is missing"),
                ))
            }
        }
    }
    Ok(out)
}

/// What reading the top level gives [`parse`]: the top-level entries, each message's
/// text (a slice of the body), and each message read already (`None`: not yet).
type TopRead<'a> = (Obj<'a>, Vec<&'a str>, Vec<Option<Obj<'a>>>);

/// The top level with every message read in the same pass (one scan of the body, where
/// [`read_raw`] scans each message twice: once to find its end, once to read it), or
/// `None` when it cannot say everything [`read_raw`] says: the body is read again that
/// way then (an error anywhere, a message that is not an object or has no keys, a
/// repeated top-level key, ...). Each message's text is found from the keys that are
/// borrowed from the body ([`inline_spans`]), so a message is still copied byte for byte.
///
/// Reading a message here is reading it on its own ([`read_raw`] and the loop in
/// [`parse`]): the same visitor ([`Msg`]) on the same bytes, two levels deeper, so it
/// gives the same object whenever it succeeds.
fn read_inline<'a>(cx: &Ctx<'a>, text: &'a str) -> Option<TopRead<'a>> {
    let top: Top<'a, Vec<Msg<'a>>> = serde_json::from_str(text).ok()?;
    if top.obj.2.is_some() {
        return None;
    }
    let msgs = top.messages?;
    let raw = inline_spans(cx, &msgs, top.after?)?;
    let objs = msgs.into_iter().map(|Msg(o, _)| Some(o)).collect();
    Some((top.obj, raw, objs))
}

/// The text of each message [`read_inline`] read, from where its first key starts to
/// where the next message's does (or the array ends, just before `after`, the key that
/// follows `messages`, or the end of the object). JSON puts nothing but whitespace and
/// one `{`, `,` or `]` between them, which is checked: `None` when a key is not borrowed
/// from the body (it holds escapes) or a message has no keys.
fn inline_spans<'a>(
    cx: &Ctx<'a>,
    msgs: &[Msg<'a>],
    after: Option<&'a str>,
) -> Option<Vec<&'a str>> {
    let b = cx.body.as_bytes();
    let ws = |c: u8| matches!(c, b' ' | b'\t' | b'\n' | b'\r');
    // the byte before `at`, past whitespace, when it is `want`: its offset
    let back = |at: usize, want: u8| -> Option<usize> {
        let mut i = at;
        while i > 0 && ws(b[i - 1]) {
            i -= 1;
        }
        (i > 0 && b[i - 1] == want).then(|| i - 1)
    };
    let mut starts = Vec::with_capacity(msgs.len());
    for Msg(_, first) in msgs {
        // the key's opening quote, then the object's `{`
        let quote = cx.start_of((*first)?).checked_sub(1)?;
        starts.push(back(quote, b'{')?);
    }
    // the array's `]`: before the next key's quote and its `,`, or before the `}` that
    // ends the body's object (only whitespace follows it)
    let close = match after {
        Some(key) => back(back(cx.start_of(key).checked_sub(1)?, b',')?, b']')?,
        None => {
            let end = back(b.len(), b'}')?;
            back(end, b']')?
        }
    };
    let mut raw = Vec::with_capacity(msgs.len());
    for (k, &start) in starts.iter().enumerate() {
        let end = match starts.get(k + 1) {
            Some(&next) => back(back(next, b',')?, b'}')? + 1,
            None => back(close, b'}')? + 1,
        };
        raw.push(cx.body.get(start..end)?);
    }
    Some(raw)
}

/// The top level read with each message raw (its text found, not read): what
/// [`read_inline`] reads in one pass, for a body it does not take; says what is wrong
/// with the top level and where.
fn read_raw<'a>(cx: &Ctx<'a>, text: &'a str) -> Result<TopRead<'a>> {
    let top: Top<'_, Content<'_>> = match serde_json::from_str(text) {
        Ok(top) => top,
        Err(e) if out_of_range(&e) => {
            // `messages` is a number too large for a float: say what it is, as for any
            // other number there
            let top: Obj<'_> = serde_json::from_str(text).map_err(|e| cx.json_err(e, text))?;
            match top.get("messages") {
                Some(v) if kind(v) == Kind::Num => {
                    return Err(invalid(
                        Some(cx.start_of(v.get())),
                        "\"messages\" is a number, not a list",
                    ))
                }
                _ => return Err(cx.json_err(e, text)),
            }
        }
        Err(e) => return Err(cx.json_err(e, text)),
    };
    if let Some(r) = &top.obj.2 {
        // Which one would a provider read? Refuse to guess.
        return Err(cx.repeated(r, Place::Other(String::new())));
    }
    let raw = match top.messages {
        None => {
            // where the top-level object starts (after JSON whitespace)
            let start = text.len() - text.trim_start_matches([' ', '\t', '\n', '\r']).len();
            return Err(invalid(
                Some(start),
                "the top-level object has no \"messages\" list",
            ));
        }
        Some(Content::Parts(items)) => items,
        Some(other) => {
            let name = match other {
                Content::Text(_) => "a string",
                Content::Null => "null",
                Content::Other(n) => n,
                Content::Parts(_) => "an array",
            };
            return Err(invalid(
                messages_offset(cx, text),
                format!("\"messages\" is {name}, not a list"),
            ));
        }
    };
    let pending = raw.iter().map(|_| None).collect();
    Ok((top.obj, raw.iter().map(|m| m.get()).collect(), pending))
}

/// Offset of the `messages` value (to name where a wrong one is; slow path).
fn messages_offset(cx: &Ctx<'_>, text: &str) -> Option<usize> {
    let top: Obj<'_> = serde_json::from_str(text).ok()?;
    top.get("messages").map(|v| cx.start_of(v.get()))
}

/// Byte range of the array whose first and last items are `first` and `last` (`[` to
/// `]`): only whitespace separates them from the brackets.
fn array_span(cx: &Ctx<'_>, first: &str, last: &str) -> Result<(usize, usize)> {
    let b = cx.body.as_bytes();
    let ws = |c: u8| matches!(c, b' ' | b'\t' | b'\n' | b'\r');
    let mut start = cx.start_of(first);
    let mut end = cx.start_of(last) + last.len();
    while start > 0 && ws(b[start - 1]) {
        start -= 1;
    }
    while end < b.len() && ws(b[end]) {
        end += 1;
    }
    if start == 0 || b[start - 1] != b'[' || end >= b.len() || b[end] != b']' {
        return Err(internal("cannot locate the messages array"));
    }
    Ok((start - 1, end + 1))
}

/// The leading system message made from an Anthropic top-level `system`.
fn system_message<'a>(cx: &Ctx<'a>, s: &'a RawValue) -> Result<Message> {
    if !matches!(kind(s), Kind::Str | Kind::Arr) {
        // named `system`, in the Messages API's words (io.py says the same for the CLI)
        return Err(invalid(
            Some(cx.start_of(s.get())),
            "system: must be a string or a list of text blocks",
        ));
    }
    let mut d = Obj(vec![(Cow::Borrowed("content"), s)], None, None);
    let (parts, ckind) = content(
        cx,
        &mut d,
        0,
        "content",
        anthropic_system_block,
        false,
        false,
    )
    .map_err(|e| match e {
        Error::InvalidMessage {
            field,
            reason,
            offset,
            ..
        } => invalid(
            offset.or(Some(cx.start_of(s.get()))),
            format!("system{}: {reason}", field.trim_start_matches("content")),
        ),
        // too deep, or a repeated key in a block: named from the system, not message 0
        Error::InvalidRequest { offset, reason } if reason.starts_with(RECURSION) => {
            invalid(offset, "system: is nested too deeply")
        }
        Error::InvalidRequest { offset, reason } => {
            match reason.strip_prefix("message 0, field content") {
                Some(rest) => invalid(offset, format!("system{rest}")),
                None => invalid(offset, reason),
            }
        }
        other => other,
    })?;
    let mut m = Message::new(Role::System, parts);
    m.content_kind = cx.spelled(ckind);
    Ok(m)
}

fn tools_tokens(p: &Profile, tools: &[String]) -> u64 {
    tools
        .iter()
        .map(|t| p.text_tokens(t) + p.tool_overhead)
        .sum()
}

/// Tokens of the structured-output schemas: their text, no overhead (none is published).
fn schemas_tokens(p: &Profile, schemas: &[String]) -> u64 {
    schemas.iter().map(|s| p.text_tokens(s)).sum()
}

/// Why `text` is not JSON: with `one_value`, not one JSON value, as the gateway reads a
/// body (the same byte and words as `fit_request`'s error: a second value after the
/// first is "trailing characters" where it starts); else not a sequence of JSON values
/// (one, or one a line as in JSONL). serde_json reads each as a raw value, which checks
/// the syntax at any depth without building anything, and its error comes back as the
/// gateway words it (`InvalidRequest` with the byte offset); `None` when `text` is JSON.
/// The CLI asks this for every syntax error it reports (one value for a document or a
/// JSONL line), and, as a sequence, when its own parser gives up on depth, to tell a
/// value nested too deep from a file that is not JSON at all (a truncated `[[[[...`:
/// fresh9 B3).
///
/// ```
/// use contextwindow_core::gateway::json_syntax_error;
/// assert!(json_syntax_error(&"[".repeat(1000), false).is_some());
/// assert!(json_syntax_error(&format!("{}{}\n{{}}", "[".repeat(1000), "]".repeat(1000)), false).is_none());
/// assert!(json_syntax_error("{}\n{}", true).is_some());
/// ```
pub fn json_syntax_error(text: &str, one_value: bool) -> Option<Error> {
    let cx = Ctx::new(text);
    let single = serde_json::from_str::<&RawValue>(text)
        .err()
        .map(|e| cx.json_err(e, text));
    if one_value {
        // The body's top-level object cut short after a comma: the gateway reads that
        // object itself and says "EOF while parsing a value" (the key it looked for);
        // the raw-value pass says "... an object" (fresh17c #5, found by a fuzz). The
        // comma is the top level's when closing the object there makes the text one value.
        if let Some(Error::InvalidRequest { offset, reason }) = &single {
            let cut = text.trim_end_matches([' ', '\t', '\n', '\r']);
            if reason == "EOF while parsing an object"
                && cut.ends_with(',')
                && serde_json::from_str::<&RawValue>(&format!("{}}}", &cut[..cut.len() - 1]))
                    .is_ok()
            {
                return Some(invalid(*offset, "EOF while parsing a value"));
            }
        }
        return single;
    }
    let found = serde_json::Deserializer::from_str(text)
        .into_iter::<&RawValue>()
        .find_map(|v| v.err())
        .map(|e| cx.json_err(e, text))?;
    // A byte right after the first value that starts no value: "trailing characters",
    // as the gateway says of a body, rather than the stream's "expected value" there.
    let at = |e: &Error| match e {
        Error::InvalidRequest { offset, reason } => (*offset, reason.clone()),
        _ => (None, String::new()),
    };
    if let Some(single) = single {
        let (one, why) = at(&single);
        if why == "trailing characters" && one.is_some() && one == at(&found).0 {
            return Some(single);
        }
    }
    Some(found)
}

/// Whether the JSON (or JSONL) `text` nests `limit` levels deep somewhere, counted from
/// the top (a top-level object or array is level 1); brackets inside strings do not
/// count, and a string never closed ends the search (no parser reads past it). Bytes
/// only, nothing built, stopping at the first point that deep: the CLI's depth check
/// before its parser, which walks as deep as the text once a caller raised Python's
/// recursion limit (`io._deepest` finds the same point, with its path, in Python: it
/// made that check read 25 MB in 1.5 s; tools19).
///
/// ```
/// use contextwindow_core::gateway::nests_as_deep;
/// assert!(nests_as_deep(b"[{\"a\": [1]}]", 3));
/// assert!(!nests_as_deep(b"[{\"a\": [1]}]", 4));
/// assert!(!nests_as_deep(br#"["[[[\"[[", {}]"#, 3)); // inside strings, escapes too
/// assert!(nests_as_deep(b"[]\n[[[]]]", 3)); // JSONL: each line from the top
/// ```
pub fn nests_as_deep(text: &[u8], limit: usize) -> bool {
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(&b) = text.get(i) {
        match b {
            b'"' => {
                // to the closing quote: past every escape (a backslash and the byte after)
                i += 1;
                loop {
                    let Some(k) = text.get(i..).and_then(|t| memchr::memchr2(b'"', b'\\', t))
                    else {
                        return false;
                    };
                    if text[i + k] == b'"' {
                        i += k;
                        break;
                    }
                    i += k + 2;
                }
            }
            b'[' | b'{' => {
                depth += 1;
                if depth >= limit {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    false
}

/// Tokens of a request body: its messages (an Anthropic `system` included), its tool
/// definitions (compact JSON text + per-tool overhead), like
/// `count_messages(messages, tools=tools)` on the parsed body, and its structured-output
/// schema (compact JSON text, `output_schemas`).
pub fn count_request(body: &[u8], profile_name: &str, provider: Option<&str>) -> Result<u64> {
    let p = profile(profile_name)?;
    let body = replace_lone_surrogates(body);
    let req = parse(&body, parse_provider(provider)?, true)?;
    let msgs: u64 = req.canonical.iter().map(|m| p.message_tokens(m)).sum();
    Ok(msgs + tools_tokens(p, &req.tools) + schemas_tokens(p, &req.schemas))
}

/// A fitted request body and what was done to it.
#[derive(Debug)]
pub struct FittedRequest<'a> {
    /// The new body; the input itself (borrowed) when nothing changed.
    pub body: Cow<'a, [u8]>,
    /// The provider shape the body was read in.
    pub provider: Format,
    /// The request's token budget.
    pub budget: u64,
    /// Tokens of the tool definitions, taken off the budget before trimming.
    pub tool_tokens: u64,
    /// Tokens of the structured-output schema (OpenAI `response_format`, Anthropic
    /// `output_config`/`output_format`), taken off the budget before trimming.
    pub schema_tokens: u64,
    /// The trim report for the messages (index 0 is the system prompt of an Anthropic
    /// body that has one; the report's budget is `budget - tool_tokens - schema_tokens`).
    pub report: Report,
}

impl FittedRequest<'_> {
    /// `{"provider", "budget", "tool_tokens", "schema_tokens", "report"}` as JSON.
    pub fn report_json(&self) -> Result<String> {
        #[derive(Serialize)]
        struct J<'a> {
            provider: &'static str,
            budget: u64,
            tool_tokens: u64,
            schema_tokens: u64,
            report: &'a Report,
        }
        Ok(serde_json::to_string(&J {
            provider: match self.provider {
                Format::OpenAI => "openai",
                Format::Anthropic => "anthropic",
            },
            budget: self.budget,
            tool_tokens: self.tool_tokens,
            schema_tokens: self.schema_tokens,
            report: &self.report,
        })?)
    }
}

/// Trim the messages of a request body to `budget` tokens (tool definitions and a
/// structured-output schema count against it) with `trim_turns`, and write the body back: every other top-level key is
/// left byte for byte, every message kept unchanged is its original bytes. The messages at
/// `pins` (indices into the body's `messages` array; an Anthropic top-level `system` is
/// not in it) are pinned: `trim_turns` never drops their turns; an index past the array
/// is an [`Error::InvalidArgument`].
pub fn fit_request<'b>(
    body: &'b [u8],
    budget: u64,
    profile_name: &str,
    provider: Option<&str>,
    breadcrumb: bool,
    pins: &[usize],
) -> Result<FittedRequest<'b>> {
    fit(body, budget, profile_name, provider, breadcrumb, pins, true)
}

/// The body [`fit_request`] writes, without its report: the messages of old turns that
/// no trim to the budget could keep are not estimated (`trim::trim_turns_kept_only`), so
/// a body that loses half its turns costs about half the estimation. Same errors.
pub fn fit_request_body<'b>(
    body: &'b [u8],
    budget: u64,
    profile_name: &str,
    provider: Option<&str>,
    breadcrumb: bool,
    pins: &[usize],
) -> Result<Cow<'b, [u8]>> {
    Ok(fit(
        body,
        budget,
        profile_name,
        provider,
        breadcrumb,
        pins,
        false,
    )?
    .body)
}

/// [`fit_request`]; `report` false: [`fit_request_body`] (the report's `tokens_before`
/// is 0 then).
fn fit<'b>(
    body: &'b [u8],
    budget: u64,
    profile_name: &str,
    provider: Option<&str>,
    breadcrumb: bool,
    pins: &[usize],
    report: bool,
) -> Result<FittedRequest<'b>> {
    let p = profile(profile_name)?;
    let clean = replace_lone_surrogates(body);
    let req = parse(&clean, parse_provider(provider)?, false)?;
    let canonical = pinned(&req, pins)?;
    let tool_tokens = tools_tokens(p, &req.tools);
    let schema_tokens = schemas_tokens(p, &req.schemas);
    let opts = TrimOptions {
        profile: p,
        breadcrumb,
        format: req.rules,
    };
    let room = budget.saturating_sub(tool_tokens.saturating_add(schema_tokens));
    let outcome = if report {
        trim_turns(&canonical, room, opts)
    } else {
        trim_turns_kept_only(&canonical, room, opts)
    };
    let n = req.canonical.len();
    let unchanged = outcome.messages.len() == n
        && outcome
            .messages
            .iter()
            .enumerate()
            .all(|(i, w)| !w.changed() && w.src == Some(i));
    let out = if unchanged {
        Cow::Borrowed(body)
    } else {
        Cow::Owned(write_body(&req, &outcome.messages, body)?)
    };
    Ok(FittedRequest {
        body: out,
        provider: req.format,
        budget,
        tool_tokens,
        schema_tokens,
        report: outcome.report,
    })
}

/// The request's canonical messages with those at `pins` (indices into the body's
/// `messages` array, after a lifted system) pinned; borrowed when there are none.
fn pinned<'r>(req: &'r Request<'_>, pins: &[usize]) -> Result<Cow<'r, [Message]>> {
    let lift = usize::from(req.system.is_some());
    crate::model::pinned_at(
        &req.canonical,
        pins,
        lift,
        ("an index of the body's messages", "there are none"),
    )
}

fn internal(reason: &str) -> Error {
    invalid(None, format!("internal error: {reason}"))
}

/// The fitted body: `original` (the body as sent) with the `messages` array, and an
/// Anthropic `system` the engine changed, spliced out and written anew. `req` was read
/// from `original` with its lone surrogate escapes written `\ufffd`
/// ([`replace_lone_surrogates`], same length, so every offset in `req` is an offset in
/// `original`): what is kept (the other keys, the whitespace, every message kept
/// unchanged) is copied from `original`, so only the messages the engine writes carry
/// `\ufffd` (fresh17b #2: the model, tool names, unknown keys and `kept` messages were
/// cleaned too).
fn write_body(
    req: &Request<'_>,
    ops: &[crate::pairs::Work<'_>],
    original: &[u8],
) -> Result<Vec<u8>> {
    let cx = req.cx;
    let lift = usize::from(req.system.is_some());
    let mut ops = ops.iter();
    let mut system_out: Option<String> = None;
    if let Some(s) = req.system {
        let first = ops
            .next()
            .ok_or_else(|| internal("the system prompt was dropped"))?;
        if first.src != Some(0) {
            return Err(internal("the system prompt was dropped"));
        }
        if first.changed() {
            let m: &Message = &first.msg;
            let parts: Vec<&Part> = m.content.iter().collect();
            let c = emit(m.content_kind.as_deref(), &parts, anthropic_part_out, None)?;
            system_out = Some(c.unwrap_or_else(|| s.get().to_owned()));
        }
    }
    let Some((ms, me)) = req.messages_span else {
        return Err(internal("an empty messages array changed"));
    };
    if original.len() != cx.body.len() {
        return Err(internal("the cleaned body is not the body's length"));
    }
    // the bytes `s` (a slice of the cleaned body) stand for in the body as sent
    let as_sent = |s: &str| -> Result<&[u8]> {
        let st = cx.start_of(s);
        original
            .get(st..st.wrapping_add(s.len()))
            .ok_or_else(|| internal("a kept span is outside the body"))
    };
    let mut arr: Vec<u8> = Vec::with_capacity(me - ms + 256);
    arr.push(b'[');
    for (k, w) in ops.enumerate() {
        if k > 0 {
            arr.push(b',');
        }
        match w.src {
            Some(i) if !w.changed() && i >= lift => {
                let raw = req
                    .raw
                    .get(i - lift)
                    .ok_or_else(|| internal("message index out of range"))?;
                arr.extend_from_slice(as_sent(raw)?);
            }
            _ => {
                if w.src == Some(0) && lift == 1 {
                    return Err(internal("the system prompt was moved"));
                }
                let m: &Message = &w.msg;
                let text = match req.format {
                    Format::OpenAI => message_to_openai(m)?,
                    Format::Anthropic => message_to_anthropic(m)?,
                };
                arr.extend_from_slice(text.as_bytes());
            }
        }
    }
    arr.push(b']');
    let mut splices: Vec<(usize, usize, &[u8])> = Vec::with_capacity(2);
    splices.push((ms, me, &arr));
    if let (Some(s), Some(new)) = (req.system, system_out.as_deref()) {
        let st = cx.start_of(s.get());
        splices.push((st, st + s.get().len(), new.as_bytes()));
    }
    splices.sort_by_key(|s| s.0);
    let mut out = Vec::with_capacity(original.len());
    let mut at = 0;
    for (start, end, text) in splices {
        if start < at || end > original.len() {
            return Err(internal("overlapping splices"));
        }
        out.extend_from_slice(&original[at..start]);
        out.extend_from_slice(text);
        at = end;
    }
    out.extend_from_slice(&original[at..]);
    Ok(out)
}

// ------------------------------------------------------------------ writing messages

/// Object under construction: keys with JSON texts, in order.
struct ObjOut(Vec<(String, String)>);

impl ObjOut {
    fn new() -> Self {
        ObjOut(Vec::new())
    }
    fn put(&mut self, k: &str, json: String) {
        self.0.push((k.to_owned(), json));
    }
    fn has(&self, k: &str) -> bool {
        self.0.iter().any(|(x, _)| x == k)
    }
    /// Add the keys of `extra` this object does not have yet (`_merge`).
    fn merge(&mut self, extra: Option<&RawValue>) -> Result<()> {
        let Some(e) = extra else { return Ok(()) };
        let o: Obj<'_> = serde_json::from_str(e.get()).map_err(|x| invalid(None, x.to_string()))?;
        for (k, v) in o.0 {
            if !self.has(&k) {
                self.0.push((k.into_owned(), v.get().to_owned()));
            }
        }
        Ok(())
    }
    fn json(&self) -> String {
        let mut s = String::from("{");
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            s.push_str(&jstr(k));
            s.push(':');
            s.push_str(v);
        }
        s.push('}');
        s
    }
}

fn jstr(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

type PartOut = fn(&Part, usize) -> Result<String>;

/// Spell `parts` back as `kind` says (`_emit`); `None` leaves the key out, `empty` is
/// the spelling of no parts when `kind` is unknown.
fn emit(
    kind: Option<&str>,
    parts: &[&Part],
    convert: PartOut,
    empty: Option<&str>,
) -> Result<Option<String>> {
    if parts.is_empty() {
        return Ok(match kind {
            Some("null") => Some("null".to_owned()),
            Some("absent") => None,
            Some("text") => Some("\"\"".to_owned()),
            Some("parts") => Some("[]".to_owned()),
            _ => empty.map(str::to_owned),
        });
    }
    if matches!(kind, Some("text") | None) && parts.len() == 1 {
        let only = parts[0];
        if only.kind == PartKind::Text && only.extra.is_none() {
            return Ok(Some(jstr(only.text_str())));
        }
    }
    let mut s = String::from("[");
    for (j, p) in parts.iter().enumerate() {
        if j > 0 {
            s.push(',');
        }
        s.push_str(&convert(p, j)?);
    }
    s.push(']');
    Ok(Some(s))
}

fn text_out(p: &Part) -> Result<String> {
    let mut o = ObjOut::new();
    o.put("type", jstr("text"));
    o.put("text", jstr(p.text_str()));
    o.merge(p.extra.as_deref())?;
    Ok(o.json())
}

fn raw_or_null(r: &Option<Box<RawValue>>) -> String {
    r.as_ref()
        .map(|x| x.get().to_owned())
        .unwrap_or_else(|| "null".to_owned())
}

fn source_str(source: Option<&RawValue>) -> Result<Option<String>> {
    match source {
        Some(s) if kind(s) == Kind::Str => serde_json::from_str(s.get())
            .map(Some)
            .map_err(|e| invalid(None, e.to_string())),
        _ => Ok(None),
    }
}

fn openai_url(source: Option<&RawValue>) -> Result<String> {
    if let Some(s) = source_str(source)? {
        return Ok(s);
    }
    if let Some(s) = source.filter(|s| kind(s) == Kind::Obj) {
        let v: serde_json::Value =
            serde_json::from_str(s.get()).map_err(|e| invalid(None, e.to_string()))?;
        let get = |k: &str| v.get(k).and_then(|x| x.as_str());
        if get("type") == Some("url") {
            if let Some(u) = get("url") {
                return Ok(u.to_owned());
            }
        }
        if let (Some("base64"), Some(media), Some(data)) =
            (get("type"), get("media_type"), get("data"))
        {
            return Ok(format!("data:{media};base64,{data}"));
        }
    }
    Err(invalid(
        None,
        "image has no source an OpenAI image_url can hold",
    ))
}

fn openai_part_out(p: &Part, j: usize) -> Result<String> {
    match p.kind {
        PartKind::Text => text_out(p),
        PartKind::Image => {
            let mut img = ObjOut::new();
            img.put("url", jstr(&openai_url(p.source.as_deref())?));
            if let Some(d) = &p.detail {
                img.put("detail", jstr(d));
            }
            let extra: Option<Obj<'_>> = match &p.extra {
                Some(e) => {
                    Some(serde_json::from_str(e.get()).map_err(|x| invalid(None, x.to_string()))?)
                }
                None => None,
            };
            if let Some(inner) = extra.as_ref().and_then(|e| e.get("image_url")) {
                if kind(inner) == Kind::Obj {
                    img.merge(Some(inner))?;
                }
            }
            let mut o = ObjOut::new();
            o.put("type", jstr("image_url"));
            o.put("image_url", img.json());
            o.merge(p.extra.as_deref())?;
            Ok(o.json())
        }
        PartKind::Opaque => Ok(raw_or_null(&p.raw)),
        _ => Err(invalid(
            None,
            format!(
                "content[{j}]: a {:?} part cannot be an OpenAI content part",
                p.kind
            ),
        )),
    }
}

/// Whether the `extra` of a tool call says it was an OpenAI custom (free-form) call
/// (`adapters._is_custom`).
fn is_custom(extra: Option<&Obj<'_>>) -> bool {
    extra.is_some_and(|e| {
        e.get("type")
            .is_some_and(|t| serde_json::from_str::<String>(t.get()).is_ok_and(|t| t == "custom"))
    })
}

fn openai_call_out(tc: &Part) -> Result<String> {
    let extra: Option<Obj<'_>> = match &tc.extra {
        Some(e) => Some(serde_json::from_str(e.get()).map_err(|x| invalid(None, x.to_string()))?),
        None => None,
    };
    let (key, text) = if is_custom(extra.as_ref()) {
        ("custom", "input")
    } else {
        ("function", "arguments")
    };
    let mut body = ObjOut::new();
    body.put("name", jstr(tc.name.as_deref().unwrap_or("")));
    body.put(text, jstr(tc.arguments.as_deref().unwrap_or("")));
    let mut o = ObjOut::new();
    o.put("id", jstr(tc.id.as_deref().unwrap_or("")));
    match &extra {
        None => {
            o.put("type", jstr("function"));
            o.put("function", body.json());
        }
        Some(extra) => {
            for (k, v) in &extra.0 {
                if k == key && kind(v) == Kind::Obj {
                    body.merge(Some(v))?;
                } else if !o.has(k) {
                    o.put(k, v.get().to_owned());
                }
            }
            o.put(key, body.json());
        }
    }
    Ok(o.json())
}

/// `message_to_openai` of the adapters.
fn message_to_openai(m: &Message) -> Result<String> {
    let mut o = ObjOut::new();
    o.put("role", jstr(role_name(m.role)));
    let content = if m.role == Role::Tool {
        let result = match m.content.as_slice() {
            [r] if r.kind == PartKind::ToolResult => r,
            _ => {
                return Err(invalid(
                    None,
                    "a tool message must hold exactly one tool result",
                ))
            }
        };
        o.put(
            "tool_call_id",
            jstr(result.call_id.as_deref().unwrap_or("")),
        );
        let inner: Vec<&Part> = result.inner().iter().collect();
        emit(
            result.content_kind.as_deref(),
            &inner,
            openai_part_out,
            Some("\"\""),
        )?
    } else {
        let calls: Vec<&Part> = m.tool_calls().collect();
        let body: Vec<&Part> = m
            .content
            .iter()
            .filter(|p| p.kind != PartKind::ToolCall)
            .collect();
        let empty = if calls.is_empty() { "\"\"" } else { "null" };
        let c = emit(
            m.content_kind.as_deref(),
            &body,
            openai_part_out,
            Some(empty),
        )?;
        if !calls.is_empty() {
            let mut s = String::from("[");
            for (i, tc) in calls.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                s.push_str(&openai_call_out(tc)?);
            }
            s.push(']');
            o.put("tool_calls", s);
        }
        c
    };
    if let Some(c) = content {
        o.put("content", c);
    }
    if let Some(n) = &m.name {
        o.put("name", jstr(n));
    }
    o.merge(m.extra.as_deref())?;
    Ok(o.json())
}

fn anthropic_source(source: Option<&RawValue>) -> Result<String> {
    if let Some(s) = source_str(source)? {
        let mut o = ObjOut::new();
        let data = s
            .strip_prefix("data:")
            .and_then(|rest| rest.split_once(";base64,"))
            .filter(|(media, _)| !media.is_empty() && !media.contains([';', ',']));
        match data {
            Some((media, data)) => {
                o.put("type", jstr("base64"));
                o.put("media_type", jstr(media));
                o.put("data", jstr(data));
            }
            None => {
                o.put("type", jstr("url"));
                o.put("url", jstr(&s));
            }
        }
        return Ok(o.json());
    }
    match source {
        Some(s) if kind(s) == Kind::Obj => Ok(s.get().to_owned()),
        _ => Err(invalid(None, "image has no source")),
    }
}

fn anthropic_part_out(p: &Part, j: usize) -> Result<String> {
    match p.kind {
        PartKind::Text => text_out(p),
        PartKind::Image => {
            let mut o = ObjOut::new();
            o.put("type", jstr("image"));
            o.put("source", anthropic_source(p.source.as_deref())?);
            o.merge(p.extra.as_deref())?;
            Ok(o.json())
        }
        PartKind::ToolCall => {
            let args = p.arguments.as_deref().unwrap_or("");
            let input = if args.trim().is_empty() {
                "{}".to_owned()
            } else {
                let v: &RawValue = serde_json::from_str(args).map_err(|_| {
                    invalid(
                        None,
                        format!("content[{j}].arguments: tool call arguments are not JSON"),
                    )
                })?;
                v.get().to_owned()
            };
            let mut o = ObjOut::new();
            o.put("type", jstr("tool_use"));
            o.put("id", jstr(p.id.as_deref().unwrap_or("")));
            o.put("name", jstr(p.name.as_deref().unwrap_or("")));
            o.put("input", input);
            o.merge(p.extra.as_deref())?;
            Ok(o.json())
        }
        PartKind::ToolResult => {
            let mut o = ObjOut::new();
            o.put("type", jstr("tool_result"));
            o.put("tool_use_id", jstr(p.call_id.as_deref().unwrap_or("")));
            let inner: Vec<&Part> = p.inner().iter().collect();
            if let Some(c) = emit(p.content_kind.as_deref(), &inner, anthropic_part_out, None)? {
                o.put("content", c);
            }
            if p.is_error {
                o.put("is_error", "true".to_owned());
            }
            o.merge(p.extra.as_deref())?;
            Ok(o.json())
        }
        PartKind::Opaque => Ok(raw_or_null(&p.raw)),
    }
}

/// `message_to_anthropic` of the adapters.
fn message_to_anthropic(m: &Message) -> Result<String> {
    let mut o = ObjOut::new();
    let role = if m.role == Role::Tool {
        "user"
    } else {
        role_name(m.role)
    };
    o.put("role", jstr(role));
    let parts: Vec<&Part> = m.content.iter().collect();
    if let Some(c) = emit(
        m.content_kind.as_deref(),
        &parts,
        anthropic_part_out,
        Some("[]"),
    )? {
        o.put("content", c);
    }
    o.merge(m.extra.as_deref())?;
    Ok(o.json())
}

fn role_name(r: Role) -> &'static str {
    match r {
        Role::System => "system",
        Role::Developer => "developer",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offset_of(body: &[u8]) -> Option<usize> {
        match fit_request(body, 100, "conservative", None, true, &[]) {
            Err(Error::InvalidRequest { offset, .. }) => offset,
            other => panic!("expected InvalidRequest, got {other:?}"),
        }
    }

    /// A read object as text: each entry's key and where its raw value is in the body
    /// (offset and length), the content held apart, the repeat.
    fn describe(cx: &Ctx<'_>, o: &Obj<'_>) -> String {
        let mut s = String::new();
        for (k, v) in &o.0 {
            s += &format!("{k:?}@{}+{} ", cx.start_of(v.get()), v.get().len());
        }
        s += &match &o.1 {
            None => "no content".to_owned(),
            Some(Content::Text(t)) => format!("text {t:?}"),
            Some(Content::Parts(p)) => {
                let at: Vec<_> = p
                    .iter()
                    .map(|v| (cx.start_of(v.get()), v.get().len()))
                    .collect();
                format!("parts {at:?}")
            }
            Some(Content::Null) => "null".to_owned(),
            Some(Content::Other(n)) => (*n).to_owned(),
        };
        s + &format!(" repeat {:?}", o.2.as_ref().map(|r| r.key.clone()))
    }

    /// [`read_inline`] on `body`: `None` when it leaves the body to [`read_raw`], else
    /// whether it read what `read_raw` and reading each message on its own read (the same
    /// entries at the same places, the same message texts).
    fn inline_agrees(body: &str) -> Option<bool> {
        let cx = Ctx::new(body);
        let (top, raw, objs) = read_inline(&cx, body)?;
        let (top2, raw2, pending) = read_raw(&cx, body).ok()?;
        assert!(pending.iter().all(Option::is_none));
        let same_texts =
            raw.len() == raw2.len() && raw.iter().zip(&raw2).all(|(a, b)| std::ptr::eq(*a, *b));
        let same_objs = objs.iter().zip(&raw2).all(|(o, m)| {
            let Ok(Msg(o2, _)) = serde_json::from_str::<Msg<'_>>(m) else {
                return false;
            };
            o.as_ref()
                .is_some_and(|o| describe(&cx, o) == describe(&cx, &o2))
        });
        Some(describe(&cx, &top) == describe(&cx, &top2) && same_texts && same_objs)
    }

    #[test]
    fn one_pass_reads_what_two_passes_read() {
        let m1 = r#"{"role": "user", "content": "a \"b\"\nc"}"#;
        let m2 = r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}"#;
        let m3 = r#"{ "content" : [ {"type": "text", "text": "x"} ] , "role" : "user" , "x": {"y": [1, 2]} }"#;
        let msgs = [m1, m2, m3].join(" ,\n\t");
        let taken = [
            format!(r#"{{"model": "m", "messages": [{msgs}], "tools": []}}"#),
            format!(r#"{{"messages":[{m1}]}}"#),
            format!("\n {{ \"messages\" :\r\n[ \n{msgs}\n ]\n }} \n"),
            format!(r#"{{"a": 1, "messages": [{msgs}]   }}"#),
            r#"{"messages": [], "b": 2}"#.to_owned(),
            format!(r#"{{"messages": [{m2}], "t": {{"messages": 1}}, "s": "}}]"}}"#),
        ];
        for body in &taken {
            assert_eq!(inline_agrees(body), Some(true), "{body}");
        }
        // left to the two passes: a message whose first key holds an escape, a key after
        // `messages` that does, a message that is not an object or is empty, a repeated
        // top-level key, an error
        let left = [
            r#"{"messages": [{"\u0072ole": "user", "content": "a"}]}"#.to_owned(),
            format!(r#"{{"messages": [{m1}], "\u0061": 1}}"#),
            format!(r#"{{"messages": [{m1}, "x"]}}"#),
            format!(r#"{{"messages": [{m1}, {{}}]}}"#),
            format!(r#"{{"messages": [{m1}], "tools": [], "tools": []}}"#),
            format!(r#"{{"messages": [{m1}] "#),
            r#"{"messages": "no"}"#.to_owned(),
        ];
        for body in &left {
            assert_eq!(inline_agrees(body), None, "{body}");
        }
    }

    #[test]
    fn one_pass_reads_the_corpus_as_two_passes_do() {
        // every JSON file of ../shared/corpus that holds messages, as a request body,
        // compact and pretty-printed (skipped when the corpus is absent)
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus");
        let mut stack = vec![root];
        let mut read = 0;
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                    continue;
                }
                let Ok(doc) =
                    serde_json::from_slice::<Value>(&std::fs::read(&p).unwrap_or_default())
                else {
                    continue;
                };
                if !doc["messages"].is_array() {
                    continue;
                }
                let body = serde_json::json!({"model": "m", "messages": doc["messages"], "tools": doc["tools"]});
                for text in [
                    body.to_string(),
                    serde_json::to_string_pretty(&body).unwrap_or_default(),
                ] {
                    assert_eq!(inline_agrees(&text), Some(true), "{}", p.display());
                    read += 1;
                }
            }
        }
        eprintln!("{read} corpus bodies read both ways");
    }

    #[test]
    fn a_format_key_names_the_shape_only_when_it_is_a_provider() {
        // the corpus convention: "openai"/"anthropic" name the shape (over a top-level
        // system), any other value is an unknown key; `provider` wins over the key
        let count = |body: &str, provider: Option<&str>| {
            count_request(body.as_bytes(), "conservative", provider).map_err(|e| e.to_string())
        };
        let system = r#""system": "You are a pirate. You are a pirate. You are a pirate.""#;
        let msgs = r#""messages": [{"role": "user", "content": "hi"}]"#;
        for (format, want) in [
            (r#""openai""#, "openai"),
            (r#""anthropic""#, "anthropic"),
            (r#""json""#, "anthropic"),
            (r#"{"type": "object"}"#, "anthropic"),
            ("null", "anthropic"),
        ] {
            let body = format!(r#"{{"format": {format}, {system}, {msgs}}}"#);
            assert_eq!(count(&body, None), count(&body, Some(want)), "{body}");
        }
        let body = format!(r#"{{"format": "openai", {system}, {msgs}}}"#);
        assert_ne!(count(&body, None), count(&body, Some("anthropic")));
        // "hi": 1 token + 4 per message (the system is an unknown key of an OpenAI body)
        assert_eq!(count(&body, None), Ok(5));
    }

    #[test]
    fn a_declared_format_names_the_rules_of_a_plain_chat() {
        // fresh16b #6: `"format": "openai"` places a plain chat's breadcrumb as
        // `provider = "openai"` does (a message of its own), not as the undeclared body
        // (a leading text block); "anthropic" and any other value keep the block
        let fit = |body: &str, provider: Option<&str>| {
            let f = fit_request(body.as_bytes(), 40, "conservative", provider, true, &[]).unwrap();
            String::from_utf8(f.body.into_owned()).unwrap()
        };
        let old = "old ".repeat(50);
        let chat = format!(
            r#""messages": [{{"role": "user", "content": "{old}"}}, {{"role": "assistant", "content": "a"}}, {{"role": "user", "content": "new"}}]"#
        );
        let own = r#""messages": [{"role":"user","content":"[earlier turns omitted to fit the context window]"},{"role": "user", "content": "new"}]"#;
        let block = r#""messages": [{"role":"user","content":[{"type":"text","text":"[earlier turns omitted to fit the context window]"},{"type":"text","text":"new"}]}]"#;
        for (format, want) in [
            (r#""openai""#, own),
            (r#""anthropic""#, block),
            (r#""json""#, block),
        ] {
            let body = format!(r#"{{"format": {format}, {chat}}}"#);
            assert_eq!(
                fit(&body, None),
                format!(r#"{{"format": {format}, {want}}}"#)
            );
        }
        let body = format!(r#"{{"format": "openai", {chat}}}"#);
        assert_eq!(fit(&body, None), fit(&body, Some("openai")));
    }

    #[test]
    fn a_byte_order_mark_is_named() {
        let err = count_request(b"\xef\xbb\xbf{\"messages\": []}", "conservative", None);
        match err {
            Err(Error::InvalidRequest { offset, reason }) => {
                assert_eq!(offset, Some(0));
                assert!(reason.contains("byte order mark"), "{reason}");
            }
            other => panic!("expected InvalidRequest, got {other:?}"),
        }
    }

    #[test]
    fn error_offsets() {
        let cases: &[(&[u8], Option<usize>)] = &[
            (b"{\"messages\": [\"a\xff\"]}", Some(16)),
            (b"{\"messages\": [}", Some(14)),
            (b"{\"messages\": [", Some(14)),
            (b"{\n\"messages\": [],\n\"a\": x}", Some(23)),
            (b"[]", Some(0)),
            (b"{\"messages\": 1}", Some(13)),
            (b"{\"model\": \"m\"}", Some(0)), // where the object starts (fresh18 F4)
            // a byte order mark (the fresh tester's N3: the error said "expected value")
            (b"\xef\xbb\xbf{\"messages\": []}", Some(0)),
            // fresh17b #8: the first byte that cannot be there, whatever serde_json's
            // column says: a raw control character (skipped as a raw value, or read as a
            // key), a trailing byte, the digit after a leading zero, the first non-hex
            // digit of a \u escape, the letter after a backslash, the end of `tru`
            (
                b"{\"messages\": [{\"role\":\"user\",\"content\":\"a\x01b\"}]}",
                Some(41),
            ),
            (b"{\"messages\": [\"\x1f\"]}", Some(15)),
            (b"{\"messages\": [\"a\nb\"]}", Some(16)),
            (b"{\"a\x01\": 1, \"messages\": []}", Some(3)),
            (b"{\"a\n\": 1, \"messages\": []}", Some(3)),
            (b"{\"messages\": []} xyz", Some(17)),
            (b"{\"messages\": [], \"m\": 01}", Some(23)),
            (b"{\"messages\": [\"a\\u12g4\"]}", Some(20)),
            (b"{\"messages\": [\"a\\ug234\"]}", Some(18)),
            (b"{\"messages\": [\"a\\u12\\x\"]}", Some(20)),
            (b"{\"messages\": [\"a\\x\"]}", Some(17)),
            (b"{\"messages\": [tru]}", Some(17)),
            (b"{\"messages\": [], }", Some(17)),
        ];
        for (body, want) in cases {
            assert_eq!(
                offset_of(body),
                *want,
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
    }

    /// fresh17b #6 and #8: the CLI asks `json_syntax_error` (serde_json's raw-value pass,
    /// a stream of values) and must name the byte and the problem the gateway names.
    #[test]
    fn syntax_errors_have_the_gateways_offset_and_words() {
        let cases: &[(&str, usize, &str)] = &[
            (r#"{"messages": [], }"#, 17, "trailing comma"),
            (r#"{"messages": [1,]}"#, 16, "trailing comma"),
            (r#"{"messages": [{"a": 1 ,}]}"#, 23, "trailing comma"),
            (r#"{"messages": [1, }"#, 17, "expected value"),
            (r#"{"messages": []} xyz"#, 17, "trailing characters"),
            ("{\"messages\": [\"a\u{1}b\"]}", 16, "control character"),
            (r#"{"messages": ["a\u12g4"]}"#, 20, "invalid escape"),
            // a lone surrogate escape is no syntax error: the trailing comma after it is
            (
                r#"{"messages": [{"role": "user", "content": "a\ud800"}], }"#,
                55,
                "trailing comma",
            ),
        ];
        for (text, at, words) in cases {
            for got in [
                json_syntax_error(text, false),
                json_syntax_error(text, true),
                count_request(text.as_bytes(), "conservative", None).err(),
            ] {
                match got {
                    Some(Error::InvalidRequest { offset, reason }) => {
                        assert_eq!(offset, Some(*at), "{text}: {reason}");
                        assert!(reason.starts_with(words), "{text}: {reason}");
                    }
                    other => panic!("{text}: {other:?}"),
                }
            }
        }
        // JSONL: a second line that is not JSON is the error, not the first line's end
        match json_syntax_error("{}\n{]", false) {
            Some(Error::InvalidRequest { offset, reason }) => {
                assert_eq!((offset, reason.as_str()), (Some(4), "key must be a string"));
            }
            other => panic!("{other:?}"),
        }
        assert!(json_syntax_error("{}\n{}\n", false).is_none());
        // fresh17c #5: one value (a document, a JSONL line): a second value where the
        // first ends is "trailing characters" there, as the gateway says, also when
        // the second is cut short (the sequence's error is its EOF)
        let second: &[(&str, usize, &str)] = &[
            (
                r#"{"messages":[]}{"messages":[]}"#,
                15,
                "trailing characters",
            ),
            (r#"{"messages":[]}[1]"#, 15, "trailing characters"),
            (r#"{"messages":[]} "x""#, 16, "trailing characters"),
            ("[1]\n[2]", 4, "trailing characters"),
            (
                r#"{"messages":[{"role":"user","content":"x"}]}{"#,
                44,
                "trailing characters",
            ),
            (r#"{"messages":["#, 13, "EOF while parsing a list"),
            // cut after a comma: the top-level object's words are the gateway's own
            (r#"{"messages": [], "#, 17, "EOF while parsing a value"),
            ("{\"a\": 1 ,\n", 10, "EOF while parsing a value"),
            (
                r#"{"messages": [], "x": {"a": 1, "#,
                31,
                "EOF while parsing an object",
            ),
            (
                r#"{"messages": [{"role": "user", "#,
                31,
                "EOF while parsing an object",
            ),
        ];
        for (text, at, words) in second {
            for got in [
                json_syntax_error(text, true),
                count_request(text.as_bytes(), "conservative", None).err(),
            ] {
                match got {
                    Some(Error::InvalidRequest { offset, reason }) => {
                        assert_eq!((offset, reason.as_str()), (Some(*at), *words), "{text}");
                    }
                    other => panic!("{text}: {other:?}"),
                }
            }
        }
        assert!(json_syntax_error("{}\n{}\n", true).is_some());
        assert!(json_syntax_error(" {} \n", true).is_none());
    }

    #[test]
    fn keeps_other_keys_and_kept_messages_byte_for_byte() {
        let long = "word ".repeat(400);
        let head = r#"{"temperature": 1.0000000000000002, "x": "\u00e9", "messages": "#;
        let kept = r#"{"role": "user",  "content": "caf\u00e9"}"#;
        let tail = r#", "tools": [], "z": [[[]]]}"#;
        let body = format!(
            r#"{head}[{{"role":"user","content":"{long}"}}, {{"role":"assistant","content":"a"}}, {kept}]{tail}"#
        );
        // a plain chat: with the shape named, the breadcrumb is a message of its own and the
        // kept message keeps its bytes
        let fitted = fit_request(
            body.as_bytes(),
            40,
            "conservative",
            Some("openai"),
            true,
            &[],
        )
        .unwrap();
        let out = String::from_utf8(fitted.body.into_owned()).unwrap();
        assert!(out.starts_with(head) && out.ends_with(tail), "{out}");
        assert!(out.contains(kept));
        // detected, it gets the dict path's placement: a leading text block
        let detected = fit_request(body.as_bytes(), 40, "conservative", None, true, &[]).unwrap();
        let out = String::from_utf8(detected.body.into_owned()).unwrap();
        assert!(out.starts_with(head) && out.ends_with(tail), "{out}");
        assert!(
            out.contains(r#"[{"type":"text","text":"[earlier turns omitted"#),
            "{out}"
        );
        assert_eq!(fitted.report.dropped_turns, 1);
        let fits =
            fit_request(body.as_bytes(), 1_000_000, "conservative", None, true, &[]).unwrap();
        assert!(matches!(fits.body, Cow::Borrowed(_)));
    }

    /// fresh17b #2: the body was read with its lone surrogate escapes written `\ufffd`,
    /// and the fitted body was written from that cleaned copy, so a trim rewrote them in
    /// the model, the tool names, unknown keys and messages reported `kept`.
    #[test]
    fn a_trim_keeps_lone_surrogate_escapes_outside_the_messages_it_writes() {
        let old = "old ".repeat(100);
        let kept = r#"{"role": "user", "content": "x\ud800y"}"#;
        let messages = format!(
            r#"[{{"role": "user", "content": "{old}"}}, {{"role": "assistant", "content": "ok"}}, {kept}]"#
        );
        let head = r#"{"model": "m \ud800", "tools": [{"name": "f\ud800", "input_schema": {"type": "object"}}], "messages": "#;
        let tail = r#", "x": "\udc00"}"#;
        // the last message takes the breadcrumb (changed: written anew, with U+FFFD);
        // everything around the messages is the body's bytes
        let body = format!("{head}{messages}{tail}");
        let fitted = fit_request(body.as_bytes(), 120, "conservative", None, true, &[]).unwrap();
        let out = String::from_utf8(fitted.body.into_owned()).unwrap();
        assert!(out.starts_with(head) && out.ends_with(tail), "{out}");
        assert!(out.contains("x\u{fffd}y"), "{out}");
        // a message kept unchanged is its original bytes, lone surrogate included
        let body = format!(r#"{{"messages": {messages}}}"#);
        let fitted = fit_request(body.as_bytes(), 5, "conservative", None, true, &[]).unwrap();
        let out = String::from_utf8(fitted.body.into_owned()).unwrap();
        assert_eq!(out, format!(r#"{{"messages": [{kept}]}}"#));
        assert_eq!(
            (fitted.report.fates[2].fate, fitted.report.fates[2].rule),
            ("kept", "kept_turn")
        );
        // an Anthropic system prompt kept as it is, and a high surrogate before a tool's
        // name (a pair only across the two: each escape is alone)
        let body = format!(
            r#"{{"system": "s\udbff", "tools": [{{"name": "\ud800g", "input_schema": {{}}}}], "messages": {messages}}}"#
        );
        let fitted = fit_request(body.as_bytes(), 5, "conservative", None, true, &[]).unwrap();
        let out = String::from_utf8(fitted.body.into_owned()).unwrap();
        assert!(
            out.starts_with(r#"{"system": "s\udbff", "tools": [{"name": "\ud800g", "#),
            "{out}"
        );
        assert!(out.ends_with(&format!("{kept}]}}")), "{out}");
    }

    #[test]
    fn count_includes_system_and_tools() {
        let p = profile("fim").unwrap();
        let body = br#"{"system": "abcdefgh", "tools": [{"name": "f", "input_schema": {}}],
            "messages": [{"role": "user", "content": "abcdefgh"}]}"#;
        let tool = r#"{"name":"f","input_schema":{}}"#;
        let want = 2 * (p.message_overhead + 2) + p.text_tokens(tool) + p.tool_overhead;
        assert_eq!(count_request(body, "fim", None).unwrap(), want);
    }

    #[test]
    fn count_includes_a_structured_output_schema() {
        // fim: a message is 4 + its characters / 4; a text of ASCII is its characters / 4
        let user = r#""messages": [{"role": "user", "content": "abcdefgh"}]"#;
        let count = |rest: &str| {
            let body = format!("{{{user}, {rest}}}");
            count_request(body.as_bytes(), "fim", None).unwrap()
        };
        assert_eq!(count(r#""model": "m""#), 6);
        // OpenAI: the json_schema object, compact: {"name":"r","schema":{"type":"object"}}
        // is 39 characters, 9 tokens
        let openai = r#""response_format": {"type": "json_schema",
            "json_schema": {"name": "r", "schema": {"type": "object"}}}"#;
        assert_eq!(count(openai), 6 + 9);
        // Anthropic: the schema, compact: {"type":"object"} is 17 characters, 4 tokens
        let ga = r#""output_config": {"effort": "low",
            "format": {"type": "json_schema", "schema": {"type": "object"}}}"#;
        assert_eq!(count(ga), 6 + 4);
        let beta = r#""output_format": {"type": "json_schema", "schema": {"type": "object"}}"#;
        assert_eq!(count(beta), 6 + 4);
        // no schema, or not one read as such: nothing added
        for other in [
            r#""response_format": {"type": "json_object"}"#,
            r#""response_format": {"type": "text"}"#,
            r#""response_format": {"json_schema": {"name": "r", "schema": {}}}"#,
            r#""response_format": {"type": "json_object", "json_schema": "r"}"#,
            r#""response_format": "json""#,
            r#""response_format": null"#,
            r#""output_config": {"effort": "low"}"#,
            r#""output_config": {"format": {"type": "text"}}"#,
            r#""output_format": {"type": "json", "schema": {"type": "object"}}"#,
            r#""format": {"type": "json_schema", "schema": {"type": "object"}}"#,
        ] {
            assert_eq!(count(other), 6, "{other}");
        }
    }

    #[test]
    fn fit_takes_the_structured_output_schema_off_the_budget() {
        let schema = r#"{"name": "answer", "schema": {"type": "object", "properties":
            {"summary": {"type": "string"}}, "required": ["summary"]}}"#;
        let body = format!(
            r#"{{"model": "m", "response_format": {{"type": "json_schema", "json_schema": {schema}}},
            "messages": [{{"role": "user", "content": "{old}"}}, {{"role": "assistant", "content": "ok"}},
            {{"role": "user", "content": "go"}}]}}"#,
            old = "word ".repeat(200)
        );
        let p = profile("fim").unwrap();
        let compact = r#"{"name":"answer","schema":{"type":"object","properties":{"summary":{"type":"string"}},"required":["summary"]}}"#;
        let schema_tokens = p.text_tokens(compact);
        assert_eq!(schema_tokens, 110 / 4); // 110 characters
        let whole = count_request(body.as_bytes(), "fim", None).unwrap();
        // (4 + 250) + (4 + 1: a text is at least 1) twice, plus the schema
        assert_eq!(whole, 254 + 5 + 5 + schema_tokens);
        // a budget the messages alone fit in, the schema with them not
        let budget = whole - 1;
        let fitted = fit_request(body.as_bytes(), budget, "fim", None, true, &[]).unwrap();
        assert_eq!(fitted.schema_tokens, schema_tokens);
        assert_eq!(fitted.tool_tokens, 0);
        assert_eq!(fitted.report.budget, Some(budget - schema_tokens));
        assert!(fitted.report.fits);
        assert_eq!(fitted.report.dropped_turns, 1);
        let out = std::str::from_utf8(&fitted.body).unwrap();
        // the schema itself is kept byte for byte
        assert!(
            out.contains(&format!(r#""json_schema": {schema}}},"#)),
            "{out}"
        );
        let json: Value = serde_json::from_str(&fitted.report_json().unwrap()).unwrap();
        assert_eq!(json["schema_tokens"], schema_tokens);
        assert_eq!(json["tool_tokens"], 0);
        // the same body without the schema: the same budget keeps everything
        let plain = body.replacen(r#""response_format""#, r#""response_formats""#, 1);
        let kept = fit_request(plain.as_bytes(), budget, "fim", None, true, &[]).unwrap();
        assert!(matches!(kept.body, Cow::Borrowed(_)));
        assert_eq!(kept.schema_tokens, 0);
    }

    #[test]
    fn a_json_schema_format_without_a_schema_object_is_refused() {
        // a new user's finding: these were counted as 0 (5 tokens for the body), and the
        // providers refuse them; the offset is the value's, or the format's when missing
        let head = r#"{"messages": [{"role": "user", "content": "hi"}], "#;
        assert_eq!(head.len(), 50);
        for (rest, offset, reason) in [
            // 50 + len(`"response_format": {"type": "json_schema", "json_schema": `) = 50 + 58
            (
                r#""response_format": {"type": "json_schema", "json_schema": "x"}"#,
                108,
                "response_format.json_schema: must be an object, got a string",
            ),
            (
                r#""response_format": {"type": "json_schema", "json_schema": null}"#,
                108,
                "response_format.json_schema: must be an object, got null",
            ),
            // 50 + len(`"response_format": `) = 50 + 19
            (
                r#""response_format": {"type": "json_schema"}"#,
                69,
                "response_format.json_schema: is missing",
            ),
            // 50 + len(`"output_config": {"format": `) = 50 + 28
            (
                r#""output_config": {"format": {"type": "json_schema"}}"#,
                78,
                "output_config.format.schema: is missing",
            ),
            // 78 + len(`{"type": "json_schema", "schema": `) = 78 + 34
            (
                r#""output_config": {"format": {"type": "json_schema", "schema": [1]}}"#,
                112,
                "output_config.format.schema: must be an object, got an array",
            ),
            // 50 + len(`"output_format": {"type": "json_schema", "schema": `) = 50 + 51
            (
                r#""output_format": {"type": "json_schema", "schema": true}"#,
                101,
                "output_format.schema: must be an object, got a boolean",
            ),
        ] {
            let body = format!("{head}{rest}}}");
            for got in [
                count_request(body.as_bytes(), "fim", None).map(|_| ()),
                fit_request(body.as_bytes(), 100, "fim", None, true, &[]).map(|_| ()),
            ] {
                match got {
                    Err(Error::InvalidRequest {
                        offset: Some(o),
                        reason: r,
                    }) => assert_eq!((o, r.as_str()), (offset, reason), "{body}"),
                    other => panic!("{body}: expected InvalidRequest, got {other:?}"),
                }
            }
        }
    }

    #[test]
    fn a_repeated_key_in_a_structured_output_schema_is_refused() {
        let msgs = r#""messages": [{"role": "user", "content": "hi"}]"#;
        for (rest, reason) in [
            (
                r#""response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object", "type": "array"}}}"#,
                r#"response_format.json_schema.schema: the key "type" appears more than once"#,
            ),
            (
                r#""response_format": {"type": "text", "type": "json_schema", "json_schema": {}}"#,
                r#"response_format: the key "type" appears more than once"#,
            ),
            (
                r#""output_config": {"format": {"type": "json_schema", "schema": {}, "schema": {"a": 1}}}"#,
                r#"output_config.format: the key "schema" appears more than once"#,
            ),
            (
                r#""output_format": {}, "output_format": {}"#,
                r#"the key "output_format" appears more than once"#,
            ),
        ] {
            let body = format!("{{{msgs}, {rest}}}");
            let err = count_request(body.as_bytes(), "fim", None).unwrap_err();
            let Error::InvalidRequest {
                reason: got,
                offset,
            } = &err
            else {
                panic!("{err:?}");
            };
            assert_eq!(got, reason, "{body}");
            assert!(offset.is_some(), "{body}");
        }
    }

    fn message_error(body: &[u8]) -> (usize, String, String) {
        message_error_fim(body)
    }

    fn message_error_fim(body: &[u8]) -> (usize, String, String) {
        match count_request(body, "fim", None) {
            Err(Error::InvalidMessage {
                index,
                field,
                reason,
                ..
            }) => (index, field, reason),
            other => panic!("expected InvalidMessage, got {other:?}"),
        }
    }

    #[test]
    fn numbers_are_counted_as_msgspec_writes_them() {
        // fresh10 F-num: (as sent, as counted), each checked by hand against
        // `msgspec.json.encode(json.loads(sent))`: shortest digits, fixed for a decimal
        // exponent in -5..=15 (`.0` on a whole number), else `d.ddde[-]N`, no `+`, no
        // padding; `-0` is Python's int 0; ints within 64 bits keep their digits
        let cases = [
            ("-0", "0"),
            ("0", "0"),
            ("0.0", "0.0"),
            ("-0.0", "-0.0"),
            ("-0e0", "-0.0"),
            ("-0.0E-3", "-0.0"),
            ("1e5", "100000.0"),
            ("1E5", "100000.0"),
            ("1.0", "1.0"),
            ("-1.50", "-1.5"),
            ("1.5e300", "1.5e300"),
            ("1.5E+300", "1.5e300"),
            ("1.7976931348623157e308", "1.7976931348623157e308"),
            ("-1.7976931348623157e+308", "-1.7976931348623157e308"),
            ("5e-324", "5e-324"),
            ("2.5e-310", "2.5e-310"),
            ("1e-7", "1e-7"),
            ("-1e-07", "-1e-7"),
            ("1.5e-6", "1.5e-6"),
            ("0.00001", "0.00001"),
            ("1.5e-5", "0.000015"),
            ("0.0001", "0.0001"),
            ("1e15", "1000000000000000.0"),
            ("1e16", "1e16"),
            // halfway between two floats, read to the even one as Python reads it (serde_json
            // reads ...566 without its `float_roundtrip` feature)
            ("12345678901234567.0", "1.2345678901234568e16"),
            ("1e22", "1e22"),
            ("123456789012345678", "123456789012345678"),
            ("-123456789012345678", "-123456789012345678"),
            ("9223372036854775807", "9223372036854775807"),
            ("-9223372036854775808", "-9223372036854775808"),
            ("18446744073709551615", "18446744073709551615"),
            // beyond 64 bits: the nearest float (Python keeps the 30 digits; README)
            ("123456789012345678901234567890", "1.2345678901234568e29"),
        ];
        for (sent, counted) in cases {
            // alone, in an array, in an object, nested, next to a string "-0" and a key
            // "-0" (both kept as they are)
            let raw = format!(r#"{{"a":{sent},"b":[{sent},{{"-0":[{sent}],"s":"-0"}}]}}"#);
            let want =
                format!(r#"{{"a":{counted},"b":[{counted},{{"-0":[{counted}],"s":"-0"}}]}}"#);
            let raw = RawValue::from_string(raw).unwrap();
            let cx = Ctx::new(raw.get());
            let got = cx.compact(&raw, || Place::Other(String::new())).unwrap();
            assert_eq!(got, want, "{sent}");
            // the writer alone, on the value serde_json reads
            let v: Value = serde_json::from_str(sent).unwrap();
            if sent != "-0" {
                assert_eq!(msgspec_text(&v).unwrap(), counted, "{sent}");
            }
        }
        // serde_json's reading of -0 (why int_zeros is needed): the float -0.0
        let v: Value = serde_json::from_str("-0").unwrap();
        assert_eq!(msgspec_text(&v).unwrap(), "-0.0");
        // -0 and -0.0 side by side, each as Python reads it; spaces go as for any value
        let raw = RawValue::from_string(r#"[ -0 , -0.0, [-0], {"k": -0e0, "j" : -0} ]"#.into());
        let raw = raw.unwrap();
        let cx = Ctx::new(raw.get());
        let got = cx.compact(&raw, || Place::Other(String::new())).unwrap();
        assert_eq!(got, r#"[0,-0.0,[0],{"k":-0.0,"j":0}]"#);
    }

    #[test]
    fn numbers_a_float_cannot_hold_are_kept_as_written() {
        // fresh8 N5: `1e400` and 10**5000 in a counted value were refused (number out of
        // range); now such a value costs what its text as sent costs. bytes4 is
        // ceil(bytes / 4) + 4 per message, over the block's text `{"type":"weird","x":X}`
        // (21 bytes + X): a value of the same length costs the same (1e400 as 12345)
        let body = |x: &str| {
            format!(r#"{{"messages":[{{"role":"user","content":[{{"type":"weird","x":{x}}}]}}]}}"#)
        };
        let count = |x: &str| count_request(body(x).as_bytes(), "bytes4", None).unwrap();
        assert_eq!(count("1e400"), count("12345"));
        assert_eq!(count("-1e400"), count("123456"));
        let big = format!("1{}", "0".repeat(5000));
        assert_eq!(count(&big), count(&format!("\"{}\"", &big[..4999])));
        // 30 digits fit a float: serde_json reads the nearest one, counted as msgspec
        // writes it, 1.2345678901234568e29 (21 bytes; Python's int keeps all 30, so the
        // dict path counts 21 + 30 = 51 bytes, 13 + 4 = 17, against 21 + 21 = 42 bytes,
        // 11 + 4 = 15), as a string of 19 digits in quotes
        let digits = "123456789012345678901234567890";
        assert_eq!(count(digits), 15);
        assert_eq!(count(digits), count(&format!("\"{}\"", &digits[..19])));
        // -0 is read as the float -0.0 but counted as the int 0, as Python reads it
        // (fresh10 F-num): 22 bytes, 6 + 4 = 10, as 1 (-0.0 would be 25 bytes, 7 + 4)
        assert_eq!(count("-0"), 10);
        assert_eq!(count("-0"), count("1"));
        assert_eq!(count("-0.0"), 11);
        // the text kept is the text as sent: whitespace and escapes stay (31 bytes)
        let sent = r#"{ "a" : [ 1e400 , "\u0041" ] }"#;
        let raw = RawValue::from_string(sent.to_owned()).unwrap();
        let cx = Ctx::new(raw.get());
        assert_eq!(
            cx.compact(&raw, || Place::Other(String::new())).unwrap(),
            sent
        );
        let spaced = |x: &str| {
            let b = format!(
                r#"{{"messages":[{{"role":"user","content":[{{ "type":"weird", "x":{x} }}]}}]}}"#
            );
            count_request(b.as_bytes(), "bytes4", None).unwrap()
        };
        // 24 + 5 bytes: 8 + 4 = 12; with 12345 the three spaces go (21 + 5 = 26: 7 + 4 = 11)
        assert_eq!(spaced("1e400"), 12);
        assert_eq!(spaced("12345"), 11);
    }

    #[test]
    fn a_value_holding_a_number_out_of_range_is_still_checked() {
        // serde_json stops at 1e400 before the rest of the value: the raw walk
        // (Ctx::check_keys) still refuses a later repeated key, named by its path, at the
        // offset just past the repeat's value, as Unique does without the 1e400
        let with = |n: &str| {
            format!(
                r#"{{"messages":[{{"role":"assistant","content":[{{"type":"tool_use","id":"a","name":"f","input":{{"n":{n},"q":[{{"x":1}},{{"x":1,"x":[2]}}]}}}}]}}]}}"#
            )
        };
        for n in ["1e400", "7"] {
            let body = with(n);
            let end = body.find(r#""x":[2]"#).unwrap() + r#""x":[2]"#.len();
            // in a message: an InvalidMessage naming it (fresh9 B2), with the offset
            assert_eq!(
                repeat_in_message(&body),
                (
                    0,
                    "content[0].input.q[1]".to_owned(),
                    r#"the key "x" appears more than once"#.to_owned(),
                    Some(end)
                ),
                "{n}"
            );
        }
        // nesting past serde_json's limit (128 open brackets) after a 1e400, in a tool
        // schema: refused as without it
        for n in ["1e400", "7"] {
            let deep = format!("{}{}", "[".repeat(130), "]".repeat(130));
            let body = format!(
                r#"{{"messages":[],"tools":[{{"name":"f","input_schema":{{"n":{n},"d":{deep}}}}}]}}"#
            );
            // the 128th bracket: the tool's object is the 1st, input_schema's the 2nd
            let at = body.find("[[").unwrap() + 125;
            match count_request(body.as_bytes(), "fim", None) {
                Err(Error::InvalidRequest { offset, reason }) => {
                    assert_eq!(reason, "tools[0]: is nested too deeply", "{n}");
                    assert_eq!(offset, Some(at), "{n}");
                }
                other => panic!("expected InvalidRequest, got {other:?}"),
            }
        }
        // a key repeated at the top of the value, and one whose value holds the 1e400
        let body =
            br#"{"messages":[{"role":"user","content":[{"type":"weird","k":1e400,"k":2}]}]}"#;
        let (index, field, reason, _) = repeat_in_message(std::str::from_utf8(body).unwrap());
        assert_eq!(
            (index, field.as_str(), reason.as_str()),
            (0, "content[0]", r#"the key "k" appears more than once"#)
        );
    }

    /// The InvalidMessage that `body` is refused with, as its parts and offset.
    fn repeat_in_message(body: &str) -> (usize, String, String, Option<usize>) {
        match count_request(body.as_bytes(), "fim", None) {
            Err(Error::InvalidMessage {
                index,
                field,
                reason,
                offset,
            }) => (index, field, reason, offset),
            other => panic!("expected InvalidMessage, got {other:?}"),
        }
    }

    #[test]
    fn the_first_bad_message_is_named_and_a_role_quoted_as_json() {
        // fresh8 N7: a later non-object message was named before message 0's field error
        let body = br#"{"messages": [{"role": "user", "content": 5}, {"role": "user", "content": "a"}, "x"]}"#;
        let want = (
            0,
            "content".to_owned(),
            "must be a string or a list of blocks".to_owned(),
        );
        assert_eq!(message_error(body), want);
        let body = br#"{"messages": [{"role": "user", "content": "a"}, 7, {"role": "user", "content": 5}]}"#;
        assert_eq!(
            message_error(body),
            (1, String::new(), "must be an object".to_owned())
        );
        // the role as a JSON string, as adapters.py writes it (was Rust's Debug form)
        let body = br#"{"messages": [{"role": "a\"b\n", "content": "a"}]}"#;
        let want = (0, "role".to_owned(), r#"unknown role "a\"b\n""#.to_owned());
        assert_eq!(message_error(body), want);
        // fresh18 F5: the deprecated "function" role is named as function_call is
        let body = br#"{"messages": [{"role": "function", "name": "f", "content": "x"}]}"#;
        let want = (0, "role".to_owned(), FUNCTION_ROLE.to_owned());
        assert_eq!(message_error(body), want);
        assert_eq!(
            FUNCTION_ROLE,
            r#"the deprecated function-calling form is not read; send a "tool" message"#
        );
        // tools19: only OpenAI has that role, so it marks the messages as OpenAI's past an
        // Anthropic block (the thinking block made them Anthropic's: an unknown role)
        let body = br#"{"messages": [{"role": "user", "content": "q"},
            {"role": "function", "name": "f", "content": "x"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "t"}]}]}"#;
        let want = (1, "role".to_owned(), FUNCTION_ROLE.to_owned());
        assert_eq!(message_error(body), want);
        // read as Anthropic's for its top-level system: the error says why
        let body = br#"{"system": "s", "messages": [{"role": "user", "content": "q"},
            {"role": "function", "name": "f", "content": "x"}]}"#;
        let why = r#" (read as an Anthropic body for its top-level "system"; provider="openai" reads it as OpenAI's)"#;
        let want = (
            1,
            "role".to_owned(),
            format!(r#"unknown role "function"{why}"#),
        );
        assert_eq!(message_error(body), want);
    }

    #[test]
    fn a_quoted_role_or_key_is_one_line() {
        // fresh9 B5: U+2028 and U+0085 (and DEL) were quoted as they are, so the CLI's
        // one-line error turned them into spaces and the texts differed
        let body = r#"{"messages":[{"role":"😀\u0000\u2028\t\u007f\u0085/","content":"x"}]}"#;
        let want = r#"unknown role "😀\u0000\u2028\t\u007f\u0085/""#;
        assert_eq!(message_error(body.as_bytes()).2, want);
        // every C0 control as serde_json writes it, DEL and the C1 controls, the two
        // separators; everything else as it is (é, U+00A0, U+3000, U+FFFD, an emoji)
        for (s, want) in [
            ("plain", r#""plain""#),
            ("\n\r\t\u{8}\u{c}\u{1}\u{1f}", r#""\n\r\t\b\f\u0001\u001f""#),
            (
                "\u{7f}\u{80}\u{85}\u{9b}\u{9f}",
                r#""\u007f\u0080\u0085\u009b\u009f""#,
            ),
            ("a\u{2028}b\u{2029}", r#""a\u2028b\u2029""#),
            (
                "é\u{a0}\u{3000}\u{fffd}😀\u{a0}",
                "\"é\u{a0}\u{3000}\u{fffd}😀\u{a0}\"",
            ),
        ] {
            assert_eq!(quote(s), want, "{s:?}");
        }
        // a repeated key is quoted the same way
        let body = r#"{"messages":[{"role":"user","content":"x","k\u2028":1,"k\u2028":2}]}"#;
        let got = message_error(body.as_bytes()).2;
        assert_eq!(got, r#"the key "k\u2028" appears more than once"#);
        // a key in a field path is not quoted: its controls are escaped all the same
        let body = r#"{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f",
            "input":{"a\u2028\n\"b":{"x":1,"x":2}}}]}]}"#;
        let (index, field, reason) = message_error(body.as_bytes());
        assert_eq!(index, 0);
        assert_eq!(field, r#"content[0].input.a\u2028\n"b"#);
        assert_eq!(reason, r#"the key "x" appears more than once"#);
        assert_eq!(escape_controls("plain"), Cow::Borrowed("plain"));
        assert_eq!(escape_controls("\u{1}\u{9b}é\\"), r#"\u0001\u009bé\"#);
        // fresh11 N6: a long key in the path and a long repeated key are cut after
        // QUOTE_CHARS characters, with how many were left out, as _jsontext cuts them
        let long = "L".repeat(crate::error::QUOTE_CHARS + 150);
        let key = "K".repeat(crate::error::QUOTE_CHARS + 201);
        let body = format!(
            r#"{{"messages":[{{"role":"assistant","content":[{{"type":"tool_use","id":"t","name":"f",
            "input":{{"{long}":{{"{key}":1,"{key}":2}}}}}}]}}]}}"#
        );
        let (index, field, reason) = message_error(body.as_bytes());
        assert_eq!(index, 0);
        let head = "L".repeat(100);
        assert_eq!(
            field,
            format!("content[0].input.{head}... (150 more characters)")
        );
        let head = "K".repeat(100);
        assert_eq!(
            reason,
            format!(r#"the key "{head}"... (201 more characters) appears more than once"#)
        );
        let body = format!(r#"{{"messages":[{{"role":"{long}","content":"x"}}]}}"#);
        let (_, field, reason) = message_error(body.as_bytes());
        assert_eq!(field, "role");
        assert_eq!(
            reason,
            format!(
                r#"unknown role "{}"... (150 more characters)"#,
                "L".repeat(100)
            )
        );
    }

    #[test]
    fn openai_call_keys_on_an_anthropic_message_are_refused() {
        // fresh7 N6: a function_call on an Anthropic message went uncounted
        for key in ["function_call", "tool_calls"] {
            let body = format!(
                r#"{{"system": "s", "messages": [{{"role": "user", "content": "a"}},
                {{"role": "assistant", "content": "b", "{key}": {{"name": "g"}}}}]}}"#
            );
            // a tool_calls key is OpenAI's mark: the error says why the body read as Anthropic's
            let hint = if key == "tool_calls" {
                r#" (read as an Anthropic body for its top-level "system"; provider="openai" reads it as OpenAI's)"#
            } else {
                ""
            };
            assert_eq!(
                message_error(body.as_bytes()),
                (1, key.to_owned(), format!("{OPENAI_CALLS}{hint}"))
            );
            let null = body.replace(r#"{"name": "g"}"#, "null");
            assert!(count_request(null.as_bytes(), "conservative", None).is_ok());
        }
    }

    #[test]
    fn tool_calls_on_a_tool_message_are_refused_but_empty_ones() {
        // fresh49 #2: a tool message's one part is its result; calls there went uncounted
        let call =
            r#"{"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}}"#;
        let body = |calls: &str| {
            format!(
                r#"{{"messages": [{{"role": "user", "content": "u"}},
                {{"role": "assistant", "tool_calls": [{{"id": "a", "function": {{"name": "f", "arguments": "{{}}"}}}}]}},
                {{"role": "tool", "tool_call_id": "a", "content": "r", "tool_calls" : {calls} }}]}}"#
            )
        };
        let want = (2, "tool_calls".to_owned(), CALLS_ON_TOOL.to_owned());
        assert_eq!(message_error(body(&format!("[{call}]")).as_bytes()), want);
        assert_eq!(message_error(body(&format!("[ {call} ]")).as_bytes()), want);
        assert_eq!(message_error(body(r#""x""#).as_bytes()), want);
        // null and empty arrays hold no call: kept as they are
        let plain = count_request(body("null").as_bytes(), "fim", None).unwrap();
        for empty in ["[]", "[ ]", "[\n\t ]"] {
            let n = count_request(body(empty).as_bytes(), "fim", None).unwrap();
            assert_eq!(n, plain, "{empty}");
        }
        // on a user message they are read as calls (misplaced): counted as an assistant's
        let user = format!(
            r#"{{"messages": [{{"role": "user", "content": "u", "tool_calls": [{call}]}}]}}"#
        );
        let asst = format!(
            r#"{{"messages": [{{"role": "assistant", "content": "u", "tool_calls": [{call}]}}]}}"#
        );
        assert_eq!(
            count_request(user.as_bytes(), "fim", None).unwrap(),
            count_request(asst.as_bytes(), "fim", None).unwrap()
        );
    }

    #[test]
    fn a_null_tool_call_type_reads_as_a_function_call() {
        // as a missing type does, and as adapters.py reads it
        let null = br#"{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":null,"function":{"name":"read","arguments":"{}"}}]}]}"#;
        let plain = br#"{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"read","arguments":"{}"}}]}]}"#;
        // fim: 4 per message, no per-call overhead, "read" 4 // 4 = 1, "{}" at least 1: 6
        assert_eq!(count_request(null, "fim", None).ok(), Some(6));
        assert_eq!(count_request(plain, "fim", None).ok(), Some(6));
    }

    #[test]
    fn custom_tool_calls_are_read_and_written_back_in_their_shape() {
        // the tester's example: {"type": "custom", "custom": {"name", "input"}} was refused
        let body = br#"{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant",
            "content": null, "tool_calls": [{"id": "c1", "type": "custom",
            "custom": {"name": "code_exec", "input": "print(1)"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "1"}]}"#;
        // fim: 4 per message, floor(ascii / 4) at least 1 per text, 0 per call:
        // "hi" 4 + 1; call 4 + "code_exec" 9 / 4 = 2 + "print(1)" 8 / 4 = 2; "1" 4 + 1
        assert_eq!(count_request(body, "fim", None).unwrap(), 5 + 8 + 5);
        // the same call as a function call costs the same
        let function = br#"{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant",
            "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "code_exec", "arguments": "print(1)"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "1"}]}"#;
        assert_eq!(count_request(function, "fim", None).unwrap(), 18);
        // a repeated call id is removed: the message is written anew, the call keeps its
        // shape and its other keys (the type spelled with an escape is still "custom")
        let call =
            r#"{"id":"c1","type":"cu\u0073tom","x":1,"custom":{"name":"f","input":"a b","y":2}}"#;
        let dup = format!(
            r#"{{"messages":[{{"role":"user","content":"hi"}},{{"role":"assistant","content":"ok","tool_calls":[{call},{call}]}},{{"role":"tool","tool_call_id":"c1","content":"1"}}]}}"#
        );
        let fitted = fit_request(dup.as_bytes(), 1_000_000, "fim", None, true, &[]).unwrap();
        let out = String::from_utf8(fitted.body.into_owned()).unwrap();
        let want = r#"{"role":"assistant","tool_calls":[{"id":"c1","type":"cu\u0073tom","x":1,"custom":{"name":"f","input":"a b","y":2}}],"content":"ok"}"#;
        assert!(out.contains(want), "{out}");
        for (call, field, reason) in [
            (
                r#"{"id":"c","type":"custom"}"#,
                "tool_calls[0].custom",
                "must be an object with name and input",
            ),
            (
                r#"{"id":"c","type":"custom","custom":{"name":"f","input":{}}}"#,
                "tool_calls[0].custom.input",
                "must be a string",
            ),
            (
                r#"{"id":"c","type":"foo","function":{"name":"f","arguments":""}}"#,
                "tool_calls[0].type",
                CALL_TYPE,
            ),
            (
                r#"{"id":"c","type":3,"function":{"name":"f","arguments":""}}"#,
                "tool_calls[0].type",
                CALL_TYPE,
            ),
        ] {
            let body = format!(r#"{{"messages":[{{"role":"assistant","tool_calls":[{call}]}}]}}"#);
            let (index, f, r) = message_error(body.as_bytes());
            assert_eq!(
                (index, f.as_str(), r.as_str()),
                (0, field, reason),
                "{call}"
            );
        }
    }

    #[test]
    fn tool_use_input_must_be_an_object() {
        // the fresh tester's N5: a string input was counted without an error
        for input in [r#""str""#, "[1]", "null", "3", "true"] {
            let body = format!(
                r#"{{"messages": [{{"role": "user", "content": "q"}}, {{"role": "assistant",
                "content": [{{"type": "text", "text": "x"}},
                {{"type": "tool_use", "id": "a", "name": "f", "input": {input}}}]}}]}}"#
            );
            let (index, field, reason) = message_error(body.as_bytes());
            assert_eq!(
                (index, field.as_str(), reason.as_str()),
                (1, "content[1].input", "must be an object"),
                "{input}"
            );
        }
        let ok = br#"{"messages": [{"role": "assistant", "content": [
            {"type": "tool_use", "id": "a", "name": "f", "input": {}}]}]}"#;
        assert!(count_request(ok, "conservative", None).is_ok());
    }

    #[test]
    fn tool_function_and_name_must_have_their_types() {
        // fresh12 O4: {"function": 5} was counted (23 tokens) instead of refused
        let head = r#"{"messages": [{"role": "user", "content": "q"}], "tools": ["#;
        assert_eq!(head.len(), 59);
        let cases = [
            // 59 + len(`{"type": "function", "function": `) = 59 + 33 = 92
            (
                r#"{"type": "function", "function": 5}"#,
                92,
                "tools[0].function: must be an object, got a number",
            ),
            (
                r#"{"type": "function", "function": "f"}"#,
                92,
                "tools[0].function: must be an object, got a string",
            ),
            // 92 + len(`{"name": `) = 92 + 9 = 101
            (
                r#"{"type": "function", "function": {"name": null}}"#,
                101,
                "tools[0].function.name: must be a string, got null",
            ),
            // 59 + 9 = 68
            (
                r#"{"name": {}, "input_schema": {}}"#,
                68,
                "tools[0].name: must be a string, got an object",
            ),
            // 59 + len(`{"name": "f"}, {"name": `) = 59 + 13 + 2 + 9 = 83
            (
                r#"{"name": "f"}, {"name": 1}"#,
                83,
                "tools[1].name: must be a string, got a number",
            ),
            // fresh16a F5: a function with no name, named at the function (byte 92)
            (
                r#"{"type": "function", "function": {"parameters": {}}}"#,
                92,
                "tools[0].function.name: is missing",
            ),
            // a function tool with neither a function nor a name, at the tool (byte 59)
            (
                r#"{"type": "function"}"#,
                59,
                "tools[0].function: is missing",
            ),
            (
                r#"{"type": "fun\u0063tion", "parameters": {}}"#,
                59,
                "tools[0].function: is missing",
            ),
            // fresh18 F5: an Anthropic tool (an input_schema, no function) with no name,
            // at the tool (byte 59); the second: 59 + len(`{"name": "f", "input_schema": {}}, `) = 94
            (r#"{"input_schema": {}}"#, 59, "tools[0].name: is missing"),
            (
                r#"{"name": "f", "input_schema": {}}, {"type": "custom", "input_schema": {}}"#,
                94,
                "tools[1].name: is missing",
            ),
            // tools19: an Anthropic built-in tool (a dated type) with no name, at the
            // tool; the type's escape is read as its character
            (
                r#"{"type": "bash_20250124"}"#,
                59,
                "tools[0].name: is missing",
            ),
            (
                r#"{"type": "web_search\u005f20250305", "max_uses": 5}"#,
                59,
                "tools[0].name: is missing",
            ),
            // 59 + len(`{"type": "text_editor_20250728", "name": `) = 59 + 41 = 100
            (
                r#"{"type": "text_editor_20250728", "name": null}"#,
                100,
                "tools[0].name: must be a string, got null",
            ),
        ];
        for (tools, offset, reason) in cases {
            refused_at(&format!("{head}{tools}]}}"), offset, reason, 1);
        }
        // the documented shapes still count: OpenAI function, Anthropic client and server tools
        let ok = format!(
            "{head}{}]}}",
            r#"{"type": "function", "function": {"name": "f", "parameters": {}}},
            {"name": "g", "input_schema": {}}, {"type": "web_search_20250305", "name": "web_search"},
            {"type": "function", "name": "h", "parameters": {}}, {"type": "other"},
            {"type": "bash_20250124", "name": "bash"},
            {"type": "function", "function": {"name": "m"}, "input_schema": {}},
            {"type": "web_search_preview_2025_03_11"}, {"type": "file_search"},
            {"type": "mcp_toolset", "mcp_server_name": "s"}, {"type": "x_2025012"},
            {"type": "_20250124"}, {"type": "bash_2025012a"}"#
        );
        assert!(count_request(ok.as_bytes(), "conservative", None).is_ok());
    }

    #[test]
    fn optional_fields_of_the_wrong_type_are_named() {
        // fresh16a F5: each was read as absent, silently; null is read as absent still
        let q = r#"{"role": "user", "content": "q"}"#;
        let use_ = r#"{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]}"#;
        let result = |flag: &str| {
            format!(
                r#"{{"role": "user", "content": [{{"type": "tool_result", "tool_use_id": "a", "content": "r", "is_error": {flag}}}]}}"#
            )
        };
        let image = |detail: &str| {
            format!(
                r#"{{"role": "user", "content": [{{"type": "image_url", "image_url": {{"url": "https://x", "detail": {detail}}}}}]}}"#
            )
        };
        let refusal =
            |v: &str| format!(r#"{{"role": "assistant", "content": null, "refusal": {v}}}"#);
        let bad = [
            (vec![q.to_owned(), refusal("5")], 1, "refusal", "must be a string"),
            (vec![q.to_owned(), refusal(r#"["no"]"#)], 1, "refusal", "must be a string"),
            (vec![q.to_owned(), refusal("true")], 1, "refusal", "must be a string"),
            // on an Anthropic message too: the estimator counts it on any message
            (
                vec![r#"{"role": "user", "content": [{"type": "text", "text": "q"}], "refusal": {}}"#.to_owned()],
                0,
                "refusal",
                "must be a string",
            ),
            (vec![image("5")], 0, "content[0].image_url.detail", "must be a string"),
            (vec![image("[]")], 0, "content[0].image_url.detail", "must be a string"),
            (
                vec![q.to_owned(), use_.to_owned(), result(r#""yes""#)],
                2,
                "content[0].is_error",
                "must be a bool",
            ),
            (
                vec![q.to_owned(), use_.to_owned(), result("1")],
                2,
                "content[0].is_error",
                "must be a bool",
            ),
            // content is read before the refusal, the name before it too
            (
                vec![q.to_owned(), r#"{"role": "assistant", "content": 5, "refusal": 5}"#.to_owned()],
                1,
                "content",
                "must be a string or a list of blocks",
            ),
            (
                vec![q.to_owned(), r#"{"role": "assistant", "content": "a", "name": 5, "refusal": 5}"#.to_owned()],
                1,
                "name",
                "must be a string",
            ),
        ];
        for (msgs, index, field, reason) in bad {
            let body = format!(r#"{{"messages": [{}]}}"#, msgs.join(", "));
            let want = (index, field.to_owned(), reason.to_owned());
            assert_eq!(message_error(body.as_bytes()), want, "{body}");
            assert!(fit_request(body.as_bytes(), 100, "fim", None, true, &[]).is_err());
        }
        // null, a string, a bool: read
        let ok = [
            vec![q.to_owned(), refusal("null"), refusal(r#""I can't""#)],
            vec![image("null"), image(r#""low""#)],
            vec![
                q.to_owned(),
                use_.to_owned(),
                result("null"),
                use_.to_owned(),
                result("false"),
                use_.to_owned(),
                result("true"),
            ],
        ];
        for msgs in ok {
            let body = format!(r#"{{"messages": [{}]}}"#, msgs.join(", "));
            assert!(
                count_request(body.as_bytes(), "fim", None).is_ok(),
                "{body}"
            );
        }
        // a refusal counts as text, null as nothing: fim, 4 per message + 8 chars / 4 = 2
        let body = format!(r#"{{"messages": [{}]}}"#, refusal(r#""12345678""#));
        assert_eq!(count_request(body.as_bytes(), "fim", None).ok(), Some(6));
        let body = format!(r#"{{"messages": [{}]}}"#, refusal("null"));
        assert_eq!(count_request(body.as_bytes(), "fim", None).ok(), Some(4));
    }

    #[test]
    fn image_and_document_sources_need_their_fields() {
        // the lead's finding: a number for data was counted as an image of unknown size
        let cases = [
            (
                r#"{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": 7}}"#,
                "content[0].source.data",
                "must be a string",
            ),
            (
                r#"{"type": "image", "source": {"type": "base64", "data": "AAAA"}}"#,
                "content[0].source.media_type",
                "is missing",
            ),
            (
                r#"{"type": "image", "source": {"type": "url", "url": null}}"#,
                "content[0].source.url",
                "must be a string",
            ),
            (
                r#"{"type": "document", "source": {"type": "file"}}"#,
                "content[0].source.file_id",
                "is missing",
            ),
            (
                r#"{"type": "document"}"#,
                "content[0].source",
                "must be an object",
            ),
            (
                r#"{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "x"},
                {"type": "image", "source": {"type": "url"}}]}"#,
                "content[0].content[1].source.url",
                "is missing",
            ),
            // a source without a string type was priced as an image of unknown size
            (
                r#"{"type": "image", "source": {}}"#,
                "content[0].source.type",
                "is missing",
            ),
            (
                r#"{"type": "image", "source": {"type": null, "url": "u"}}"#,
                "content[0].source.type",
                "must be a string",
            ),
            (
                r#"{"type": "document", "source": {"data": "d"}}"#,
                "content[0].source.type",
                "is missing",
            ),
        ];
        for (block, want_field, want_reason) in cases {
            let body = format!(r#"{{"messages": [{{"role": "user", "content": [{block}]}}]}}"#);
            let (index, field, reason) = message_error(body.as_bytes());
            assert_eq!(
                (index, field.as_str(), reason.as_str()),
                (0, want_field, want_reason),
                "{block}"
            );
        }
        // an image without a source, read as Anthropic's (detected, it is an OpenAI
        // block of a type we do not know, counted by its JSON text)
        let no_source = br#"{"messages": [{"role": "user", "content": [{"type": "image"}]}]}"#;
        match count_request(no_source, "fim", Some("anthropic")) {
            Err(Error::InvalidMessage {
                index,
                field,
                reason,
                ..
            }) => assert_eq!(
                (index, field.as_str(), reason.as_str()),
                (0, "content[0].source", "must be an object")
            ),
            other => panic!("expected InvalidMessage, got {other:?}"),
        }
        // other source types are taken as they are
        let ok = br#"{"messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "later", "data": 7}},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "d"}},
            {"type": "image", "source": {"type": "file", "file_id": "f"}}]}]}"#;
        assert!(count_request(ok, "conservative", Some("anthropic")).is_ok());
    }

    #[test]
    fn openai_content_is_required_but_for_assistant() {
        // the lead's finding: [{"role": "user"}] was counted as 3 tokens
        for (message, want) in [
            (r#"{"role": "user"}"#, "is missing"),
            (r#"{"role": "system"}"#, "is missing"),
            (
                r#"{"role": "developer", "content": null}"#,
                "must be a string or a list of blocks",
            ),
            (r#"{"role": "tool", "tool_call_id": "c"}"#, "is missing"),
        ] {
            let body = format!(r#"{{"messages": [{message}]}}"#);
            let (index, field, reason) = message_error(body.as_bytes());
            assert_eq!(
                (index, field.as_str(), reason.as_str()),
                (0, "content", want)
            );
        }
        let ok = br#"{"messages": [{"role": "user", "content": "q"}, {"role": "assistant"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
            "function": {"name": "f", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "c",
            "content": "r"}]}"#;
        assert!(count_request(ok, "conservative", Some("openai")).is_ok());
    }

    #[test]
    fn a_bad_system_is_named_system() {
        // the fresh tester's N6 (end): the error must say `system`, not message 0's content
        for (system, want) in [
            ("5", "system: must be a string or a list of text blocks"),
            ("{}", "system: must be a string or a list of text blocks"),
            ("[5]", "system[0]: must be an object"),
            // fresh7 N5: text blocks only, whatever the other block holds
            (
                r#"[{"type": "text", "text": "s"}, {"type": "tool_use", "id": "t", "input": []}]"#,
                "system[1]: must be a text block",
            ),
            (
                r#"[{"type": "image", "source": {}}]"#,
                "system[0]: must be a text block",
            ),
        ] {
            let body = format!(r#"{{"system": {system}, "messages": []}}"#);
            match count_request(body.as_bytes(), "conservative", None) {
                Err(Error::InvalidRequest { offset, reason }) => {
                    assert_eq!((offset, reason.as_str()), (Some(11), want));
                }
                other => panic!("expected InvalidRequest, got {other:?}"),
            }
        }
    }

    /// Byte offset of the `n`th (0-based) occurrence of `needle` in `body`.
    fn nth(body: &str, needle: &str, n: usize) -> usize {
        body.match_indices(needle).nth(n).map(|(i, _)| i).unwrap()
    }

    #[test]
    fn tool_calls_read_in_one_pass_are_refused_in_their_order() {
        // the calls of a message are read together when each is an object, one by one
        // from their raw values when one is not: either way the first bad call is named,
        // a repeated key with the offset of its second occurrence
        let ok = r#"{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}"#;
        let twice = r#"{"id": "b", "id": "c", "function": {"name": "f", "arguments": "{}"}}"#;
        let body = |calls: &[&str]| {
            format!(
                r#"{{"messages": [{{"role": "user", "content": "q"}}, {{"role": "assistant", "content": null, "tool_calls": [{}]}}]}}"#,
                calls.join(", ")
            )
        };
        let repeat = |b: &str| {
            (
                1,
                "tool_calls[1]".to_owned(),
                r#"the key "id" appears more than once"#.to_owned(),
                Some(nth(b, r#""id""#, 2)),
            )
        };
        // call 1 repeats "id" (the third "id" of the body: call 0's, then call 1's two)
        let b = body(&[ok, twice, "7"]);
        assert_eq!(repeat_in_message(&b), repeat(&b));
        let b = body(&[ok, twice, ok]);
        assert_eq!(repeat_in_message(&b), repeat(&b));
        let b = body(&[ok, "7", twice]);
        let e = message_error(b.as_bytes());
        assert_eq!(e, (1, "tool_calls[1]".into(), "must be an object".into()));
        let b = body(&[ok, r#"{"id": "b", "function": {"name": "f"}}"#, "[1e400]"]);
        let e = message_error(b.as_bytes());
        assert_eq!(
            e,
            (
                1,
                "tool_calls[1].function.arguments".into(),
                "is missing".into()
            )
        );
        // calls read in one pass are counted: fim, 4 per message (8), "q" 1 (a non-empty
        // text is at least 1), each call "f" 1 + "{}" 1 and no call overhead (4): 13
        let one = count_request(body(&[ok, ok]).as_bytes(), "fim", None).unwrap();
        assert_eq!(one, 13);
    }

    #[test]
    fn a_call_read_whole_is_the_call_read_from_its_raw_value() {
        // openai_call on a call read with the others ([`Calls`]) gives the part (or the
        // error) it gives on the raw value; calls `Calls` does not take are read raw
        let taken = [
            r#"{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{\"p\": 1}"}}"#,
            r#"{"function": {"arguments": "{}", "name": "f"}, "id": "a"}"#,
            r#"{"id": "a", "type": null, "function": {"name": "f", "arguments": ""}}"#,
            r#"{"id": "a", "type": "f\u0075nction", "x": [1, {"y": 2}], "function": {"name": "f\n", "arguments": "{}", "strict": true}}"#,
            r#"{"id": "a", "\u0066unction": {"n\u0061me": "f", "arguments": "{}"}}"#,
            r#"{"id": "a", "id": "b", "function": {"name": "f", "arguments": "{}"}}"#,
            r#"{"type": "function", "function": {"name": "f", "arguments": "{}"}}"#,
            r#"{"id": 7, "function": {"name": "f", "arguments": "{}"}}"#,
        ];
        let left = [
            r#"{"id": "a", "type": "custom", "custom": {"name": "f", "input": "x"}}"#,
            r#"{"id": "a", "type": "custom", "function": {"name": "f", "arguments": "x"}, "custom": {"name": "f", "input": "x"}}"#,
            r#"{"id": "a", "type": "tool", "function": {"name": "f", "arguments": "{}"}}"#,
            r#"{"id": "a", "function": {"name": "f", "arguments": "{}"}, "function": {"name": "g", "arguments": "{}"}}"#,
            r#"{"id": "a", "function": {"name": "f", "name": "g", "arguments": "{}"}}"#,
            r#"{"id": "a", "function": {"name": "f", "arguments": "{}", "s": 1, "s": 2}}"#,
            r#"{"id": "a", "function": {"name": 1, "arguments": "{}"}}"#,
            r#"{"id": "a", "function": {"name": "f"}}"#,
            r#"{"id": "a", "function": "f"}"#,
            r#"{"id": "a"}"#,
            r#""a call""#,
        ];
        let show = |r: Result<Part>| match r {
            Ok(p) => serde_json::to_string(&p).unwrap_or_default(),
            Err(e) => format!("{e:?}"),
        };
        for text in taken {
            // both read from one text, so an error's offset is the same too
            let arr = format!("[{text}]");
            let cx = Ctx::new(&arr);
            let raw: &RawValue = serde_json::from_str(&arr[1..arr.len() - 1]).unwrap();
            let Ok(Calls(mut calls)) = serde_json::from_str::<Calls<'_>>(&arr) else {
                panic!("not read whole: {text}");
            };
            let Call { obj, function } = calls.remove(0);
            let whole = cx
                .checked(obj, || place(3, "tool_calls[2]"))
                .and_then(|tc| openai_call(&cx, Some(tc), Some(function), 3, 2));
            let alone = cx
                .obj(raw, || place(3, "tool_calls[2]"))
                .and_then(|tc| openai_call(&cx, tc, None, 3, 2));
            let (whole, alone) = (show(whole), show(alone));
            assert_eq!(whole, alone, "{text}");
        }
        for text in left {
            assert!(
                serde_json::from_str::<Calls<'_>>(&format!("[{text}]")).is_err(),
                "{text}"
            );
        }
    }

    #[test]
    fn a_repeated_key_in_an_object_read_is_refused_by_name_and_offset() {
        // the fresh tester's N4: the last "role" was read, a provider keeping the first
        // would see another message
        let role = r#"{"messages":[{"role":"user","role":"tool","content":"hi"}]}"#;
        // {"messages":[ is 13 bytes, {"role":"user", 15 more: the second key is at 28
        let cases: Vec<(String, usize, &str)> = vec![
            (
                role.to_owned(),
                28,
                r#"message 0: the key "role" appears more than once"#,
            ),
            (
                r#"{"messages":[{"role":"user","content":"a","content":"b"}]}"#.to_owned(),
                42, // 13 + {"role":"user", (15) + "content":"a", (14)
                r#"message 0: the key "content" appears more than once"#,
            ),
            (
                // spelled with an escape: the same key once decoded
                r#"{"messages":[{"role":"user","ro\u006ce":"tool","content":"hi"}]}"#.to_owned(),
                28,
                r#"message 0: the key "role" appears more than once"#,
            ),
        ];
        let block =
            r#"{"messages":[{"role":"user","content":[{"type":"text","text":"a","text":"b"}]}]}"#;
        let call = r#"{"messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","id":"d","function":{"name":"f","arguments":"{}"}}]}]}"#;
        let function = r#"{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}","name":"g"}}]}]}"#;
        let image = r#"{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u","url":"v"}}]}]}"#;
        let tool_use = r#"{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":{},"input":{"x":1}}]}]}"#;
        let top_system = r#"{"system":"a","messages":[],"system":"b"}"#;
        let top_tools = r#"{"tools":[],"messages":[],"tools":[]}"#;
        let top_messages = r#"{"messages":[],"messages":[]}"#;
        // read to tell a declared shape, whatever its value (fresh16b #8)
        let top_format = r#"{"format":"openai","format":"anthropic","messages":[]}"#;
        let top_other = r#"{"format":"json","messages":[],"format":null}"#;
        let tool_def = r#"{"messages":[],"tools":[{"name":"f","name":"g"}]}"#;
        let more: Vec<(String, usize, &str)> = vec![
            (
                block.to_owned(),
                nth(block, r#""text""#, 2),
                r#"message 0, field content[0]: the key "text" appears more than once"#,
            ),
            (
                call.to_owned(),
                nth(call, r#""id""#, 1),
                r#"message 1, field tool_calls[0]: the key "id" appears more than once"#,
            ),
            (
                function.to_owned(),
                nth(function, r#""name""#, 1),
                r#"message 0, field tool_calls[0].function: the key "name" appears more than once"#,
            ),
            (
                image.to_owned(),
                nth(image, r#""url""#, 1),
                r#"message 0, field content[0].image_url: the key "url" appears more than once"#,
            ),
            (
                tool_use.to_owned(),
                nth(tool_use, r#""input""#, 1),
                r#"message 0, field content[0]: the key "input" appears more than once"#,
            ),
            (
                top_system.to_owned(),
                28,
                r#"the key "system" appears more than once"#,
            ),
            (
                top_tools.to_owned(),
                26,
                r#"the key "tools" appears more than once"#,
            ),
            (
                top_messages.to_owned(),
                15,
                r#"the key "messages" appears more than once"#,
            ),
            (
                top_format.to_owned(),
                19,
                r#"the key "format" appears more than once"#,
            ),
            (
                top_other.to_owned(),
                31,
                r#"the key "format" appears more than once"#,
            ),
            (
                tool_def.to_owned(),
                nth(tool_def, r#""name""#, 1),
                r#"tools[0]: the key "name" appears more than once"#,
            ),
        ];
        for (body, offset, reason) in cases.iter().chain(&more) {
            refused_at(body, *offset, reason, 1);
        }
    }

    /// `count_request` refuses `body` with `reason` at byte `offset`, and `fit_request` at
    /// `budget` gives the same error.
    fn refused_at(body: &str, offset: usize, reason: &str, budget: u64) {
        let got = count_request(body.as_bytes(), "conservative", None);
        // in a message: an InvalidMessage naming it and the field, with the offset (fresh9 B2)
        let want = match reason.strip_prefix("message ") {
            Some(rest) => {
                let i = rest.rfind(REPEAT).unwrap();
                let (head, what) = (&rest[..i], &rest[i + 2..]);
                let (index, field) = head.split_once(", field ").unwrap_or((head, ""));
                Error::InvalidMessage {
                    index: index.parse().unwrap(),
                    field: field.to_owned(),
                    reason: what.to_owned(),
                    offset: Some(offset),
                }
            }
            None => Error::InvalidRequest {
                offset: Some(offset),
                reason: reason.to_owned(),
            },
        };
        assert_eq!(
            format!("{got:?}"),
            format!("{:?}", Err::<u64, _>(want)),
            "{body}"
        );
        let fit = fit_request(body.as_bytes(), budget, "conservative", None, true, &[]);
        assert_eq!(
            format!("{:?}", fit.err()),
            format!("{:?}", got.err()),
            "{body}"
        );
    }

    #[test]
    fn a_repeated_key_anywhere_in_a_counted_value_is_refused() {
        // a tool definition, a tool_use input and a block the model does not hold are
        // counted by their JSON text: a repeat at any depth is refused, named by where
        // the value is, at the offset just past the repeat's value (a first-wins
        // parser upstream would see another schema than the one counted)
        let schema = r#"{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"},"parameters":{}}}]}"#;
        let deep = r#"{"messages":[],"tools":[{"name":"f","input_schema":{"properties":{"a":{"type":"string","type":"number"}}}}]}"#;
        let input = r#"{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":{"q":{"x":1,"x":2}}}]}]}"#;
        let block = r#"{"messages":[{"role":"user","content":[{"type":"citations_x","k":{"z":1,"z":2}}]}]}"#;
        let past = |body: &str, value: &str, n: usize| nth(body, value, n) + value.len();
        let cases = [
            (
                schema,
                past(schema, r#""parameters":{}"#, 0),
                r#"tools[0].function: the key "parameters" appears more than once"#,
            ),
            (
                deep,
                past(deep, r#""type":"number""#, 0),
                r#"tools[0].input_schema.properties.a: the key "type" appears more than once"#,
            ),
            (
                input,
                past(input, r#""x":2"#, 0),
                r#"message 0, field content[0].input.q: the key "x" appears more than once"#,
            ),
            (
                block,
                past(block, r#""z":2"#, 0),
                r#"message 0, field content[0].k: the key "z" appears more than once"#,
            ),
        ];
        for (body, offset, reason) in cases {
            refused_at(body, offset, reason, 1_000_000);
        }
        // the same values without the repeat count
        let ok = schema.replace(r#","parameters":{}"#, "");
        assert!(count_request(ok.as_bytes(), "conservative", None).is_ok());
    }

    #[test]
    fn a_repeated_key_in_an_image_source_is_named() {
        // the source is read now (its fields are checked): "url" twice is two images
        let body = r#"{"messages": [{"role": "user", "content": [{"type": "image",
            "source": {"type": "url", "url": "https://a", "url": "https://b"}}]}]}"#;
        assert_eq!(
            repeat_in_message(body),
            (
                0,
                "content[0].source".to_owned(),
                r#"the key "url" appears more than once"#.to_owned(),
                Some(nth(body, r#""url""#, 2))
            )
        );
    }

    #[test]
    fn a_repeated_key_in_a_system_block_is_named_from_the_system() {
        let body = r#"{"system": [{"type": "text", "text": "a", "text": "b"}], "messages": []}"#;
        match count_request(body.as_bytes(), "conservative", None) {
            Err(Error::InvalidRequest { offset, reason }) => {
                assert_eq!(offset, Some(nth(body, r#""text""#, 2)));
                assert_eq!(
                    reason,
                    r#"system[0]: the key "text" appears more than once"#
                );
            }
            other => panic!("expected InvalidRequest, got {other:?}"),
        }
    }

    #[test]
    fn a_repeated_key_the_gateway_does_not_read_is_left_alone() {
        // copied byte for byte: nothing here decides what the provider or the engine sees
        // differently from what contextwindow counted
        let body = br#"{"model":"a","model":"b","messages":[{"role":"user","content":"hi","x":{"k":1,"k":2}}]}"#;
        let fitted = fit_request(body, 1000, "conservative", None, true, &[]).unwrap();
        assert!(matches!(fitted.body, Cow::Borrowed(_)));
    }

    #[test]
    fn deep_nesting_is_an_error() {
        let deep = format!("{}{}", "[".repeat(50_000), "]".repeat(50_000));
        let body = format!(
            r#"{{"messages": [{{"role": "user", "content": [{{"type": "x", "v": {deep}}}]}}]}}"#
        );
        // named as the dict path names it (fresh7 N7)
        assert_eq!(
            message_error_fim(body.as_bytes()),
            (0, String::new(), "is nested too deeply".to_owned())
        );
        let untouched = format!(r#"{{"v": {deep}, "messages": []}}"#);
        assert_eq!(count_request(untouched.as_bytes(), "fim", None).unwrap(), 0);
    }
}

#[cfg(test)]
mod surrogate_tests {
    use super::replace_lone_surrogates;
    use std::borrow::Cow;

    /// The walk `replace_lone_surrogates` was before it searched for `\u` only: from one
    /// backslash to the next, an escape at a time (the oracle of the test below).
    fn walk(body: &[u8]) -> Cow<'_, [u8]> {
        fn unit(b: &[u8], i: usize) -> Option<u16> {
            if b.get(i) != Some(&b'\\') || b.get(i + 1) != Some(&b'u') {
                return None;
            }
            let hex = std::str::from_utf8(b.get(i + 2..i + 6)?).ok()?;
            u16::from_str_radix(hex, 16).ok()
        }
        let mut out: Option<Vec<u8>> = None;
        let mut i = 0;
        while i < body.len() {
            let Some(at) = memchr::memchr(b'\\', &body[i..]) else {
                break;
            };
            i += at;
            match unit(body, i) {
                Some(0xD800..=0xDBFF) if matches!(unit(body, i + 6), Some(0xDC00..=0xDFFF)) => {
                    i += 12
                }
                Some(0xD800..=0xDFFF) => {
                    out.get_or_insert_with(|| body.to_vec())[i..i + 6].copy_from_slice(b"\\ufffd");
                    i += 6;
                }
                Some(_) => i += 6,
                None => i += 2,
            }
        }
        out.map_or(Cow::Borrowed(body), Cow::Owned)
    }

    #[test]
    fn the_search_agrees_with_the_walk() {
        // texts made of the pieces escapes are made of, from a fixed LCG: runs of
        // backslashes, `u`, surrogate and other hex digits, `+` (which Rust's hex parse
        // takes as a sign), a two-byte character and plain text
        let pieces: &[&str] = &[
            "\\", "\\\\", "u", "d8", "D8", "dc", "DC", "00", "3d", "de", "+", "x", "é", "\"",
            "\\ud800", "\\udc00", "\\ud83d", "\\ude00", "\\u00e9",
        ];
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: usize| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) as usize % n
        };
        let mut changed = 0;
        for _ in 0..200_000 {
            let len = 1 + next(12);
            let text: String = (0..len).map(|_| pieces[next(pieces.len())]).collect();
            let (got, want) = (
                replace_lone_surrogates(text.as_bytes()),
                walk(text.as_bytes()),
            );
            assert_eq!(got, want, "{text}");
            assert_eq!(
                matches!(got, Cow::Owned(_)),
                matches!(want, Cow::Owned(_)),
                "{text}"
            );
            changed += usize::from(matches!(want, Cow::Owned(_)));
        }
        // the pieces make lone surrogates often, and pairs and escaped backslashes too
        assert!(changed > 10_000, "{changed}");
    }

    #[test]
    fn lone_surrogate_escapes_become_replacement_characters() {
        let cases: &[(&str, &str)] = &[
            (r#""a\ud800b""#, r#""a\ufffdb""#),
            (r#""\udc00""#, r#""\ufffd""#),
            (r#""\ud83d\ude00""#, r#""\ud83d\ude00""#), // a valid pair stays
            (r#""\ud83d\ud83d\ude00""#, r#""\ufffd\ud83d\ude00""#),
            (r#""\\ud800""#, r#""\\ud800""#), // an escaped backslash, then text
            (r#""\u00e9\n""#, r#""\u00e9\n""#),
            (r#""\ud800"#, r#""\ufffd"#), // truncated: same length, the parser reports it
            // a backslash as the last byte or two: the search stops at the end
            ("\"a\\", "\"a\\"),
            ("\\", "\\"),
            ("\\u", "\\u"),
            ("\\ud8", "\\ud8"),
        ];
        for (input, want) in cases {
            let got = replace_lone_surrogates(input.as_bytes());
            assert_eq!(std::str::from_utf8(&got).unwrap(), *want, "{input}");
            assert_eq!(got.len(), input.len());
        }
        assert!(matches!(
            replace_lone_surrogates(br#"{"a": "b"}"#),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
