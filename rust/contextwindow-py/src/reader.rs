//! The fast reader: a Python list of OpenAI or Anthropic message dicts straight to the
//! core's canonical messages, in one walk, without building `Message` structs or JSON in
//! Python.
//!
//! It applies exactly the rules of `contextwindow.adapters` (`detect_format`,
//! `openai_to_message`, `anthropic_to_message`) and of `_engine.prepare` (which provider's
//! rules apply), and produces what the engine would read from the slow path's JSON
//! payload: the same parts, the same `content_kind`s, the same `extra`/`raw`/`source`
//! JSON text (msgspec's compact encoding, byte for byte), `content` of a tool result left
//! out when empty as msgspec's `omit_defaults` leaves it out.
//!
//! Anything it does not handle answers [`Fallback`]: the caller then runs the Python
//! adapters, which accept the input or raise the precise `InvalidMessageError` naming
//! index and field. So the reader never decides an error itself. It falls back on: a
//! malformed message, a non-`dict` message or block, a `str`/`list` subclass, a string
//! holding lone surrogates (the slow path replaces them with U+FFFD), a dict key that is
//! not a `str`, a container that is not exactly a `dict`, `list` or `tuple` (a dict
//! subclass may hold keys JSON writes alike), a scalar that is not a `float`, `int` or
//! `str` (bytes, a `Decimal`: JSON has no such type), values nested deeper than [`MAX_DEPTH`],
//! any Python exception, and the empty list.
//!
//! Strings are read in place (`PyUnicode_AsUTF8AndSize`: compact ASCII directly, other
//! text through CPython's cached UTF-8) and copied once into the owned canonical message.

use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};

use contextwindow_core::model::{anthropic_only_block, Message, Part, PartKind, Role};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::sync::PyOnceLock;
use pyo3::types::{
    PyBool, PyBytes, PyDict, PyFloat, PyFrozenSet, PyInt, PyList, PySet, PyString, PyTuple,
};
use serde_json::value::RawValue;

/// The reader does not take this input; run the Python adapters instead.
#[derive(Debug)]
pub struct Fallback;

impl From<PyErr> for Fallback {
    fn from(_: PyErr) -> Fallback {
        Fallback
    }
}

type R<T> = Result<T, Fallback>;

/// Deepest nesting of `extra`/`raw`/`input` values the reader encodes itself; deeper
/// values go to the slow path (which raises "nested too deeply" where Python does).
pub const MAX_DEPTH: usize = 64;

/// A provider's message shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    OpenAI,
    Anthropic,
}

impl Shape {
    /// The name `contextwindow` uses for it.
    pub fn name(self) -> &'static str {
        match self {
            Shape::OpenAI => "openai",
            Shape::Anthropic => "anthropic",
        }
    }
}

/// A conversation as read.
pub struct Read {
    pub messages: Vec<Message>,
    /// The shape the caller's dicts have (`format=` or detected).
    pub format: Shape,
    /// Whose rules the engine applies (`_engine._provider_of`).
    pub provider: Shape,
    /// UTF-8 bytes of text copied: decides whether releasing the GIL pays.
    pub bytes: usize,
}

/// Read a conversation of dicts; `format` is `None` (detect), `"openai"` or
/// `"anthropic"`. Never panics (a panic inside is caught and becomes [`Fallback`]).
pub fn read(messages: &Bound<'_, PyAny>, format: Option<&str>) -> R<Read> {
    catch_unwind(AssertUnwindSafe(|| read_inner(messages, format))).unwrap_or(Err(Fallback))
}

fn read_inner(messages: &Bound<'_, PyAny>, format: Option<&str>) -> R<Read> {
    let list = messages.cast_exact::<PyList>().map_err(|_| Fallback)?;
    if list.is_empty() {
        return Err(Fallback);
    }
    // One pass over each message's keys (no per-key lookups), kept for the conversion.
    let mut fields = Vec::with_capacity(list.len());
    for item in list.iter() {
        fields.push(Fields::of(&item)?);
    }
    let explicit = format.is_some();
    let format = match format {
        None => detect(&fields)?,
        Some("openai") => Shape::OpenAI,
        Some("anthropic") => Shape::Anthropic,
        Some(_) => return Err(Fallback),
    };
    let mut r = Reader { bytes: 0 };
    let mut out = Vec::with_capacity(list.len());
    for f in &fields {
        out.push(match format {
            Shape::OpenAI => r.openai_message(f)?,
            Shape::Anthropic => r.anthropic_message(f)?,
        });
    }
    // _engine._one_system: a system message after a leading one (which stands for the
    // top-level system) is refused by the adapters' path
    if format == Shape::Anthropic
        && out.first().is_some_and(|m| m.role == Role::System)
        && out.iter().skip(1).any(|m| m.role == Role::System)
    {
        return Err(Fallback);
    }
    // _engine.prepare: the format given, else _provider_of: a plain chat (user/assistant
    // text only) takes the Anthropic placement, valid in both shapes, else the detected.
    let plain = || {
        out.iter().all(|m| {
            matches!(m.role, Role::User | Role::Assistant)
                && m.content.iter().all(|p| p.kind == PartKind::Text)
        })
    };
    let provider = if !explicit && plain() {
        Shape::Anthropic
    } else {
        format
    };
    Ok(Read {
        messages: out,
        format,
        provider,
        bytes: r.bytes,
    })
}

/// The texts of a plain chat, found without building messages: every message an exact
/// `dict` of exactly two keys, `role` (the `str` `"user"` or `"assistant"`) and `content`
/// (an exact `str` without lone surrogates). Both shapes read such a dict as a user or
/// assistant message of one text part and nothing else (`Reader::openai_message`,
/// `Reader::anthropic_message`), so its tokens are `api::count_plain`'s. `None` for
/// anything else, the empty list included: the full reader then decides. With the UTF-8
/// bytes of the texts. The strings are held (a reference each), so the count may run
/// with the GIL released.
pub fn plain_chat(messages: &Bound<'_, PyAny>) -> Option<(Vec<PyBackedStr>, usize)> {
    catch_unwind(AssertUnwindSafe(|| plain_chat_inner(messages))).unwrap_or(None)
}

fn plain_chat_inner(messages: &Bound<'_, PyAny>) -> Option<(Vec<PyBackedStr>, usize)> {
    let list = messages.cast_exact::<PyList>().ok()?;
    if list.is_empty() {
        return None;
    }
    let py = messages.py();
    let (role, content) = (intern!(py, "role"), intern!(py, "content"));
    let mut texts = Vec::with_capacity(list.len());
    let mut bytes = 0;
    for item in list.iter() {
        let d = item.cast_exact::<PyDict>().ok()?;
        if d.len() != 2 {
            return None;
        }
        let r = d.get_item(role).ok()??;
        if !r.is_exact_instance_of::<PyString>()
            || !matches!(
                r.cast::<PyString>().ok()?.to_str().ok()?,
                "user" | "assistant"
            )
        {
            return None;
        }
        let c = d.get_item(content).ok()??;
        let c = c.cast_exact::<PyString>().ok()?;
        let text = PyBackedStr::try_from(c.clone()).ok()?;
        bytes += text.len();
        texts.push(text);
    }
    Some((texts, bytes))
}

// ----------------------------------------------------------------------------- helpers

/// A `str` of exactly type `str`, read in place; lone surrogates fall back.
fn exact_str<'a>(v: &'a Bound<'_, PyAny>) -> R<&'a str> {
    if v.is_exact_instance_of::<PyString>() {
        Ok(v.cast::<PyString>().map_err(|_| Fallback)?.to_str()?)
    } else {
        Err(Fallback)
    }
}

/// Append `s` as a JSON string, as serde_json writes it. A string with nothing to escape
/// (no `"`, `\` or control character below U+0020: base64 image data, most text) is
/// copied whole, checked 64 bytes at a time, where serde_json escapes byte by byte (the
/// corpus's five base64 images were 5% of `count_messages`' instructions); any other
/// string is serde_json's.
fn json_str(out: &mut Vec<u8>, s: &str) -> R<()> {
    let plain = s.as_bytes().chunks(64).all(|c| {
        !c.iter().fold(false, |hit, &b| {
            hit | (b < 0x20) | (b == b'"') | (b == b'\\')
        })
    });
    if plain {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
        Ok(())
    } else {
        serde_json::to_writer(&mut *out, s).map_err(|_| Fallback)
    }
}

/// A `tool_calls` value that holds no call: `None` or an empty `list` (kept in `extra`,
/// verbatim; `adapters._no_calls`).
fn empty_calls(v: &Bound<'_, PyAny>) -> bool {
    v.is_none() || v.cast_exact::<PyList>().is_ok_and(|l| l.is_empty())
}

/// A `tool_calls` value that marks a list as OpenAI's: a `list` of one or more
/// (`adapters._holds_calls`; fresh54 #4: `()`, `{}` and `""` decide nothing).
fn holds_calls(v: &Bound<'_, PyAny>) -> bool {
    v.cast::<PyList>().is_ok_and(|l| !l.is_empty())
}

/// `v if isinstance(v, str) else None`; a `str` subclass falls back.
fn opt_str<'a>(v: Option<&'a Bound<'_, PyAny>>) -> R<Option<&'a str>> {
    match v {
        Some(v) if v.is_instance_of::<PyString>() => exact_str(v).map(Some),
        _ => Ok(None),
    }
}

/// `d[key]` that must be a `str` (`adapters._str`).
fn req_str<'a>(v: &'a Option<Bound<'_, PyAny>>) -> R<&'a str> {
    v.as_ref().map_or(Err(Fallback), |v| exact_str(v))
}

/// `d[key]`, which must be a plain dict (anything else, or no such key, falls back: the
/// adapters name it).
fn dict_at<'py>(d: &Bound<'py, PyDict>, key: &Bound<'py, PyString>) -> R<Bound<'py, PyDict>> {
    let v = get(d, key)?.ok_or(Fallback)?;
    v.cast_into_exact::<PyDict>().map_err(|_| Fallback)
}

/// `d.get(key)` for an interned key.
fn get<'py>(d: &Bound<'py, PyDict>, key: &Bound<'py, PyString>) -> R<Option<Bound<'py, PyAny>>> {
    Ok(d.get_item(key)?)
}

/// The keys of a message dict the adapters read, found in one pass over it.
struct Fields<'py> {
    dict: Bound<'py, PyDict>,
    role: Option<Bound<'py, PyAny>>,
    content: Option<Bound<'py, PyAny>>,
    name: Option<Bound<'py, PyAny>>,
    tool_calls: Option<Bound<'py, PyAny>>,
    tool_call_id: Option<Bound<'py, PyAny>>,
    /// Whether the dict holds a `function_call` that is not `None` (refused by the
    /// adapters: the deprecated form of `tool_calls`).
    function_call: bool,
    /// Whether the dict holds a `refusal` that is neither a `str` nor `None` (refused by
    /// the adapters: its text is counted).
    bad_refusal: bool,
}

impl<'py> Fields<'py> {
    /// A message of exactly type `dict` whose keys are all `str`s.
    fn of(item: &Bound<'py, PyAny>) -> R<Fields<'py>> {
        let dict = item.cast_exact::<PyDict>().map_err(|_| Fallback)?.clone();
        let mut f = Fields {
            role: None,
            content: None,
            name: None,
            tool_calls: None,
            tool_call_id: None,
            function_call: false,
            bad_refusal: false,
            dict,
        };
        let py = item.py();
        let (role, content) = (intern!(py, "role"), intern!(py, "content"));
        for (k, v) in f.dict.iter() {
            // the keys of a dict written in the source are the interned strings: found
            // by identity, with no UTF-8 read and compare
            if k.is(role) {
                f.role = Some(v);
                continue;
            }
            if k.is(content) {
                f.content = Some(v);
                continue;
            }
            match exact_str(&k)? {
                "role" => f.role = Some(v),
                "content" => f.content = Some(v),
                "name" => f.name = Some(v),
                "tool_calls" => f.tool_calls = Some(v),
                "tool_call_id" => f.tool_call_id = Some(v),
                "function_call" => f.function_call = !v.is_none(),
                "refusal" => f.bad_refusal = !v.is_none() && !v.is_instance_of::<PyString>(),
                _ => {}
            }
        }
        Ok(f)
    }
}

/// `adapters._source`: the `source` of an image or document block, an exact `dict`
/// holding a string `type` and the string fields the Messages API requires for it
/// (`base64`: `media_type` and `data`; `url`: `url`; `file`: `file_id`; any other type:
/// none). Anything else (a missing or wrong field or `type`, a `str` subclass) goes to
/// the adapters, which name it.
fn checked_source<'py>(b: &Bound<'py, PyDict>) -> R<Bound<'py, PyDict>> {
    let py = b.py();
    let source = dict_at(b, intern!(py, "source"))?;
    let stype = get(&source, intern!(py, "type"))?;
    let keys: &[&Bound<'py, PyString>] = match req_str(&stype)? {
        "base64" => &[intern!(py, "media_type"), intern!(py, "data")],
        "url" => &[intern!(py, "url")],
        "file" => &[intern!(py, "file_id")],
        _ => &[],
    };
    for key in keys {
        req_str(&get(&source, key)?)?;
    }
    Ok(source)
}

fn raw(json: Vec<u8>) -> R<Box<RawValue>> {
    let text = String::from_utf8(json).map_err(|_| Fallback)?;
    RawValue::from_string(text).map_err(|_| Fallback)
}

fn part(kind: PartKind) -> Part {
    Part::empty(kind)
}

/// Whether msgspec would write `v` as an object or an array by walking it: a `dict`,
/// `list`, `tuple`, `set` or `frozenset` (or a subclass), a msgspec struct, a dataclass
/// or an attrs class.
fn is_container(v: &Bound<'_, PyAny>) -> R<bool> {
    let py = v.py();
    Ok(v.is_instance_of::<PyDict>()
        || v.is_instance_of::<PyList>()
        || v.is_instance_of::<PyTuple>()
        || v.is_instance_of::<PySet>()
        || v.is_instance_of::<PyFrozenSet>()
        || v.hasattr(intern!(py, "__struct_fields__"))?
        || v.hasattr(intern!(py, "__dataclass_fields__"))?
        || v.hasattr(intern!(py, "__attrs_attrs__"))?)
}

fn msgspec_encode<'py>(v: &Bound<'py, PyAny>) -> R<Bound<'py, PyBytes>> {
    static ENCODE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let py = v.py();
    let encode = ENCODE.get_or_try_init(py, || {
        Ok::<_, PyErr>(py.import("msgspec.json")?.getattr("encode")?.unbind())
    })?;
    encode
        .bind(py)
        .call1((v,))?
        .cast_into::<PyBytes>()
        .map_err(|_| Fallback)
}

struct Reader {
    bytes: usize,
}

/// What a content part parser is: OpenAI part, Anthropic block, nested Anthropic block.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PartShape {
    OpenAI,
    Anthropic,
    AnthropicNested,
}

impl Reader {
    fn text(&mut self, s: &str) -> String {
        self.bytes += s.len();
        s.to_owned()
    }

    // ------------------------------------------------------------------ JSON encoding

    /// Append msgspec's compact JSON of `v` (same bytes as `msgspec.json.encode`).
    fn encode(&mut self, v: &Bound<'_, PyAny>, out: &mut Vec<u8>, depth: usize) -> R<()> {
        if depth > MAX_DEPTH {
            return Err(Fallback);
        }
        if v.is_none() {
            out.extend_from_slice(b"null");
        } else if v.is_exact_instance_of::<PyString>() {
            let s = exact_str(v)?;
            self.bytes += s.len();
            json_str(out, s)?;
        } else if v.is_exact_instance_of::<PyBool>() {
            out.extend_from_slice(if v.is_truthy()? { b"true" } else { b"false" });
        } else if v.is_exact_instance_of::<PyInt>() {
            if let Ok(n) = v.extract::<i64>() {
                write!(out, "{n}").map_err(|_| Fallback)?;
            } else if let Ok(n) = v.extract::<u64>() {
                write!(out, "{n}").map_err(|_| Fallback)?;
            } else {
                out.extend_from_slice(msgspec_encode(v)?.as_bytes());
            }
        } else if let Ok(d) = v.cast_exact::<PyDict>() {
            self.object(d, &[], None, out, depth)?;
        } else if let Ok(l) = v.cast_exact::<PyList>() {
            out.push(b'[');
            for (i, x) in l.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                self.encode(&x, out, depth + 1)?;
            }
            out.push(b']');
        } else if let Ok(t) = v.cast_exact::<PyTuple>() {
            out.push(b'[');
            for (i, x) in t.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                self.encode(&x, out, depth + 1)?;
            }
            out.push(b']');
        } else {
            // Floats (msgspec's shortest repr; inf/nan fall back) and int subclasses (an
            // IntEnum): msgspec's own bytes. A type it rejects (a str subclass, ...) and
            // lone surrogates inside (UnicodeEncodeError) fall back; so does any
            // container (a dict or list subclass, a set, a struct or dataclass: an object
            // or array), before msgspec walks it: the adapters check its keys (`{1: "a",
            // "1": "b"}` is written with the key "1" twice) and, first, its depth (after
            // `sys.setrecursionlimit(1_000_000)` msgspec overflowed the C stack on a
            // 200,000-deep one; fresh14 #10, #11).
            if !v.is_exact_instance_of::<PyFloat>() && is_container(v)? {
                return Err(Fallback);
            }
            // A scalar JSON has no type for (bytes, which msgspec writes as base64 text;
            // a Decimal or datetime, written as a string; a msgspec.Raw number, which the
            // adapters take) falls back too: the adapters refuse it, naming where it is
            // (fresh17b #3).
            if !(v.is_instance_of::<PyFloat>()
                || v.is_instance_of::<PyInt>()
                || v.is_instance_of::<PyString>())
            {
                return Err(Fallback);
            }
            let encoded = msgspec_encode(v)?;
            // An object or array falls back; so does a NaN or infinite float, which
            // msgspec writes as `null`: JSON has no such number, and the adapters refuse
            // it, naming where it is (struct18 #3).
            if matches!(encoded.as_bytes().first(), Some(b'{' | b'['))
                || encoded.as_bytes() == b"null"
            {
                return Err(Fallback);
            }
            out.extend_from_slice(encoded.as_bytes());
        }
        Ok(())
    }

    /// Append `d` as a JSON object without the keys in `skip`, then `tail` as one more
    /// member (a key `d` does not hold).
    fn object(
        &mut self,
        d: &Bound<'_, PyDict>,
        skip: &[&str],
        tail: Option<(&str, &[u8])>,
        out: &mut Vec<u8>,
        depth: usize,
    ) -> R<()> {
        if depth > MAX_DEPTH {
            return Err(Fallback);
        }
        out.push(b'{');
        let mut first = true;
        for (k, v) in d.iter() {
            let key = exact_str(&k)?;
            if skip.contains(&key) {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            json_str(out, key)?;
            out.push(b':');
            self.encode(&v, out, depth + 1)?;
        }
        if let Some((key, value)) = tail {
            if !first {
                out.push(b',');
            }
            json_str(out, key)?;
            out.push(b':');
            out.extend_from_slice(value);
        }
        out.push(b'}');
        Ok(())
    }

    /// `adapters._rest(d, skip)` as JSON: `None` when `d` holds only keys of `skip`.
    /// `present` is how many keys of `skip` `d` holds (the caller knows).
    fn rest(
        &mut self,
        d: &Bound<'_, PyDict>,
        skip: &[&str],
        present: usize,
    ) -> R<Option<Box<RawValue>>> {
        if d.len() == present {
            return Ok(None);
        }
        let mut out = Vec::new();
        self.object(d, skip, None, &mut out, 0)?;
        raw(out).map(Some)
    }

    fn json(&mut self, v: &Bound<'_, PyAny>) -> R<Box<RawValue>> {
        let mut out = Vec::new();
        self.encode(v, &mut out, 0)?;
        raw(out)
    }

    // ------------------------------------------------------------------------ content

    /// `adapters._content`: parts and how `content` was spelled.
    fn content(
        &mut self,
        value: Option<&Bound<'_, PyAny>>,
        shape: PartShape,
        nullable: bool,
    ) -> R<(Vec<Part>, &'static str)> {
        let Some(value) = value else {
            return if nullable {
                Ok((Vec::new(), "absent"))
            } else {
                Err(Fallback)
            };
        };
        if value.is_exact_instance_of::<PyString>() {
            let mut p = part(PartKind::Text);
            p.text = Some(self.text(exact_str(value)?));
            return Ok((vec![p], "text"));
        }
        if let Ok(list) = value.cast_exact::<PyList>() {
            let mut parts = Vec::with_capacity(list.len());
            for item in list.iter() {
                parts.push(self.block(&item, shape)?);
            }
            return Ok((parts, "parts"));
        }
        if nullable && value.is_none() {
            return Ok((Vec::new(), "null"));
        }
        Err(Fallback)
    }

    /// A text part (`type: "text"`) of either provider.
    fn text_part(&mut self, b: &Bound<'_, PyDict>) -> R<Part> {
        let text = get(b, intern!(b.py(), "text"))?;
        let mut p = part(PartKind::Text);
        p.text = Some(self.text(req_str(&text)?));
        p.extra = self.rest(b, &["type", "text"], 2)?;
        Ok(p)
    }

    fn opaque(&mut self, b: &Bound<'_, PyDict>, btype: &str) -> R<Part> {
        let mut p = part(PartKind::Opaque);
        p.type_ = Some(self.text(btype));
        p.raw = Some(self.json(b.as_any())?);
        Ok(p)
    }

    /// One content part / block (`adapters._openai_part`, `_anthropic_block`).
    fn block(&mut self, item: &Bound<'_, PyAny>, shape: PartShape) -> R<Part> {
        let py = item.py();
        let b = item.cast_exact::<PyDict>().map_err(|_| Fallback)?;
        let btype = get(b, intern!(py, "type"))?;
        let btype = req_str(&btype)?;
        match (btype, shape) {
            ("text", _) => self.text_part(b),
            ("image_url", PartShape::OpenAI) => {
                let img = &dict_at(b, intern!(py, "image_url"))?;
                let url = get(img, intern!(py, "url"))?;
                let url = req_str(&url)?;
                let detail_value = get(img, intern!(py, "detail"))?;
                if detail_value
                    .as_ref()
                    .is_some_and(|d| !d.is_none() && !d.is_instance_of::<PyString>())
                {
                    return Err(Fallback); // a detail of another type: the adapters name it
                }
                let detail = opt_str(detail_value.as_ref())?;
                let skip: &[&str] = if detail.is_some() {
                    &["url", "detail"]
                } else {
                    &["url"]
                };
                let inner = self.rest(img, skip, skip.len())?;
                let mut p = part(PartKind::Image);
                p.detail = detail.map(|s| self.text(s));
                let mut source = Vec::with_capacity(url.len() + 2);
                self.bytes += url.len();
                json_str(&mut source, url)?;
                p.source = Some(raw(source)?);
                p.extra = match inner {
                    None => self.rest(b, &["type", "image_url"], 2)?,
                    Some(inner) => {
                        let mut out = Vec::new();
                        let tail = ("image_url", inner.get().as_bytes());
                        self.object(b, &["type", "image_url"], Some(tail), &mut out, 0)?;
                        Some(raw(out)?)
                    }
                };
                Ok(p)
            }
            ("tool_use" | "tool_result", PartShape::OpenAI) => Err(Fallback),
            ("file", PartShape::OpenAI) => {
                // `adapters._check_file`: an object whose file_id, file_data and filename
                // are strings or null; anything else goes to the adapters, which name it
                let file = &dict_at(b, intern!(py, "file"))?;
                for key in [
                    intern!(py, "file_id"),
                    intern!(py, "file_data"),
                    intern!(py, "filename"),
                ] {
                    if let Some(v) = get(file, key)? {
                        if !v.is_none() {
                            exact_str(&v)?;
                        }
                    }
                }
                self.opaque(b, btype)
            }
            ("image", PartShape::Anthropic | PartShape::AnthropicNested) => {
                let source = checked_source(b)?;
                let mut p = part(PartKind::Image);
                p.source = Some(self.json(source.as_any())?);
                p.extra = self.rest(b, &["type", "source"], 2)?;
                Ok(p)
            }
            ("document", PartShape::Anthropic | PartShape::AnthropicNested) => {
                checked_source(b)?;
                self.opaque(b, btype)
            }
            ("tool_use", PartShape::Anthropic) => {
                let id = get(b, intern!(py, "id"))?;
                let name = get(b, intern!(py, "name"))?;
                let input = get(b, intern!(py, "input"))?;
                let mut p = part(PartKind::ToolCall);
                p.id = Some(self.text(req_str(&id)?));
                p.name = Some(self.text(req_str(&name)?));
                // an object only (a dict subclass, or anything else, goes to the adapters,
                // which take any Mapping and refuse the rest by name)
                let input = input.as_ref().ok_or(Fallback)?;
                let input = input.cast_exact::<PyDict>().map_err(|_| Fallback)?;
                let mut args = Vec::new();
                self.object(input, &[], None, &mut args, 0)?;
                p.arguments = Some(String::from_utf8(args).map_err(|_| Fallback)?);
                p.extra = self.rest(b, &["type", "id", "name", "input"], 4)?;
                Ok(p)
            }
            ("tool_result", PartShape::Anthropic) => {
                let call_id = get(b, intern!(py, "tool_use_id"))?;
                let content = get(b, intern!(py, "content"))?;
                let (parts, kind) =
                    self.content(content.as_ref(), PartShape::AnthropicNested, true)?;
                // `is True`: True is the only bool that is truthy.
                let is_error = match get(b, intern!(py, "is_error"))? {
                    Some(v) if v.is_exact_instance_of::<PyBool>() => v.is_truthy()?,
                    Some(v) if v.is_none() => false,
                    // anything else (a str, an int): the adapters name it
                    Some(_) => return Err(Fallback),
                    None => false,
                };
                let mut p = part(PartKind::ToolResult);
                p.call_id = Some(self.text(req_str(&call_id)?));
                p.content = (!parts.is_empty()).then_some(parts); // omit_defaults
                p.is_error = is_error;
                p.content_kind = Some(kind.to_owned());
                let has_content = content.is_some() as usize;
                p.extra = if is_error {
                    self.rest(
                        b,
                        &["type", "tool_use_id", "content", "is_error"],
                        3 + has_content,
                    )?
                } else {
                    self.rest(b, &["type", "tool_use_id", "content"], 2 + has_content)?
                };
                Ok(p)
            }
            _ => self.opaque(b, btype),
        }
    }

    // ----------------------------------------------------------------------- messages

    /// `adapters._openai_call`.
    fn openai_call(&mut self, item: &Bound<'_, PyAny>) -> R<Part> {
        let py = item.py();
        let tc = item.cast_exact::<PyDict>().map_err(|_| Fallback)?;
        let id = get(tc, intern!(py, "id"))?;
        let id = req_str(&id)?;
        // a missing or null type reads as "function"; any other type than these two goes
        // to the adapters, which name it
        let ty = match get(tc, intern!(py, "type"))? {
            None => None,
            Some(t) if t.is_none() => None,
            Some(t) if t.is_instance_of::<PyString>() => Some(exact_str(&t)?.to_owned()),
            Some(_) => return Err(Fallback),
        };
        let (key, text, key_s, text_s) = match ty.as_deref() {
            None | Some("function") => (
                "function",
                "arguments",
                intern!(py, "function"),
                intern!(py, "arguments"),
            ),
            Some("custom") => (
                "custom",
                "input",
                intern!(py, "custom"),
                intern!(py, "input"),
            ),
            Some(_) => return Err(Fallback),
        };
        let body = &dict_at(tc, key_s)?;
        let name = get(body, intern!(py, "name"))?;
        let arguments = get(body, text_s)?;
        let mut p = part(PartKind::ToolCall);
        p.id = Some(self.text(id));
        p.name = Some(self.text(req_str(&name)?));
        p.arguments = Some(self.text(req_str(&arguments)?));
        let body_extra = body.len() > 2;
        if !body_extra && key == "function" && ty.is_some() && tc.len() == 3 {
            return Ok(p);
        }
        // Not the standard function shape: every other key verbatim ({} records a missing
        // "type"; {"type": "custom"} is what writes a custom call back as one).
        let mut out = Vec::new();
        if body_extra {
            let mut inner = Vec::new();
            self.object(body, &["name", text], None, &mut inner, 1)?;
            self.object(tc, &["id", key], Some((key, &inner)), &mut out, 0)?;
        } else {
            self.object(tc, &["id", key], None, &mut out, 0)?;
        }
        p.extra = Some(raw(out)?);
        Ok(p)
    }

    /// `adapters.openai_to_message`.
    fn openai_message(&mut self, f: &Fields<'_>) -> R<Message> {
        let d = &f.dict;
        let role = match req_str(&f.role)? {
            "system" => Role::System,
            "developer" => Role::Developer,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            _ => return Err(Fallback),
        };
        if f.function_call {
            return Err(Fallback); // the adapters name it
        }
        // Chat Completions: only an assistant message may omit content or set it null
        let nullable = role == Role::Assistant;
        let (mut parts, kind) = self.content(f.content.as_ref(), PartShape::OpenAI, nullable)?;
        // a name that is neither a str nor None: the adapters name it
        if f.name
            .as_ref()
            .is_some_and(|n| !n.is_none() && !n.is_instance_of::<PyString>())
        {
            return Err(Fallback);
        }
        let name = opt_str(f.name.as_ref())?.map(|s| self.text(s));
        if f.bad_refusal {
            return Err(Fallback); // a refusal that is not a str: the adapters name it
        }
        // Keys the canonical message holds: role, content when present, name when a str.
        let mut present = 1 + f.content.is_some() as usize + name.is_some() as usize;
        // The keys to leave out of `extra`: the first `n` of `skip` (no allocation).
        let mut skip = ["role", "content", "name", "", ""];
        let mut n = 2 + name.is_some() as usize;
        let mut m = Message::new(role, Vec::new());
        m.name = name;
        if role == Role::Tool {
            let mut result = part(PartKind::ToolResult);
            result.call_id = Some(self.text(req_str(&f.tool_call_id)?));
            result.content = (!parts.is_empty()).then_some(parts); // omit_defaults
            result.content_kind = Some(kind.to_owned());
            if f.tool_calls.as_ref().is_some_and(|v| !empty_calls(v)) {
                return Err(Fallback); // tool calls on a tool message: the adapters name it
            }
            skip[n] = "tool_call_id";
            m.extra = self.rest(d, &skip[..n + 1], present + 1)?;
            m.content = vec![result];
            return Ok(m);
        }
        // on a user, system or developer message too: misplaced calls (fresh49 #2)
        if let Some(calls) = &f.tool_calls {
            if !calls.is_none() {
                let calls = calls.cast_exact::<PyList>().map_err(|_| Fallback)?;
                if !calls.is_empty() {
                    // null and [] stay in extra, verbatim
                    parts.reserve(calls.len());
                    for tc in calls.iter() {
                        parts.push(self.openai_call(&tc)?);
                    }
                    skip[n] = "tool_calls";
                    n += 1;
                    present += 1;
                }
            }
        }
        m.extra = self.rest(d, &skip[..n], present)?;
        m.content = parts;
        m.content_kind = Some(kind.to_owned());
        Ok(m)
    }

    /// `adapters.anthropic_to_message`.
    fn anthropic_message(&mut self, f: &Fields<'_>) -> R<Message> {
        let role = match req_str(&f.role)? {
            "system" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            _ => return Err(Fallback),
        };
        let (parts, kind) = self.content(f.content.as_ref(), PartShape::Anthropic, false)?;
        if f.function_call || f.tool_calls.as_ref().is_some_and(|v| !empty_calls(v)) {
            return Err(Fallback); // OpenAI's call keys: the adapters name them
        }
        if role == Role::System && parts.iter().any(|p| p.kind != PartKind::Text) {
            return Err(Fallback); // a system holds text blocks only: the adapters name it
        }
        if f.bad_refusal {
            return Err(Fallback); // a refusal that is not a str: the adapters name it
        }
        let mut m = Message::new(role, parts);
        m.extra = self.rest(&f.dict, &["role", "content"], 2)?;
        m.content_kind = Some(kind.to_owned());
        Ok(m)
    }
}

/// `adapters.detect_format` on a list of plain dicts (anything else falls back).
fn detect(messages: &[Fields<'_>]) -> R<Shape> {
    let mut anthropic = false;
    for m in messages {
        if let Some(role) = &m.role {
            if role.is_instance_of::<PyString>()
                && matches!(exact_str(role)?, "tool" | "developer" | "function")
            {
                return Ok(Shape::OpenAI);
            }
        }
        // only a list of calls decides: None, [] (fresh52 #5), (), {} or "" (fresh54 #4)
        // decide nothing, nor does a tool_call_id of None (fresh53 #4)
        if m.tool_calls.as_ref().is_some_and(holds_calls)
            || m.tool_call_id.as_ref().is_some_and(|v| !v.is_none())
        {
            return Ok(Shape::OpenAI);
        }
        let Some(content) = &m.content else {
            continue;
        };
        if content.is_instance_of::<PyList>() {
            let py = content.py();
            let blocks = content.cast_exact::<PyList>().map_err(|_| Fallback)?;
            for b in blocks.iter() {
                let b = b.cast_exact::<PyDict>().map_err(|_| Fallback)?;
                let Some(btype) = get(b, intern!(py, "type"))? else {
                    continue;
                };
                if btype.is_none() {
                    continue;
                }
                match exact_str(&btype)? {
                    "image_url" | "input_audio" => return Ok(Shape::OpenAI),
                    t if anthropic_only_block(t) => anthropic = true,
                    "image" if b.contains(intern!(py, "source"))? => anthropic = true,
                    _ => {}
                }
            }
        }
    }
    Ok(if anthropic {
        Shape::Anthropic
    } else {
        Shape::OpenAI
    })
}
