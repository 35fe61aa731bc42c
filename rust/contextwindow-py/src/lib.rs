//! PyO3 glue for contextwindow: extract arguments, release the GIL, call the core,
//! map errors in one place. No logic lives here.

use std::borrow::Cow;

mod reader;

use contextwindow_core::{api, estimate, gateway, Error};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::types::{PyBytes, PyDict};

use reader::Read;

/// The module's Rust allocations (messages read from dicts, parsed request bodies,
/// reports) come and go by the thousand per call; mimalloc serves them faster than the
/// system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The one conversion point from core errors to Python exceptions.
fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let kwargs = PyDict::new(py);
    let (class, args) = match &e {
        Error::InvalidJson { .. } => ("InvalidRequestError", e.to_string()),
        Error::InvalidRequest { offset, .. } => {
            if let Err(err) = kwargs.set_item("offset", *offset) {
                return err;
            }
            ("InvalidRequestError", e.to_string())
        }
        Error::InvalidMessage {
            index,
            field,
            reason,
            offset,
        } => {
            let field = (!field.is_empty()).then_some(field.as_str());
            if let Err(err) = kwargs
                .set_item("index", *index)
                .and_then(|()| kwargs.set_item("field", field))
                .and_then(|()| kwargs.set_item("offset", *offset))
            {
                return err;
            }
            ("InvalidMessageError", reason.clone())
        }
        Error::InvalidArgument { .. } => return PyValueError::new_err(e.to_string()),
    };
    match py
        .import("contextwindow.errors")
        .and_then(|m| m.getattr(class))
        .and_then(|cls| cls.call((args,), Some(&kwargs)))
    {
        Ok(exc) => PyErr::from_value(exc),
        Err(import_error) => import_error,
    }
}

fn utf8(py: Python<'_>, data: &[u8]) -> PyResult<String> {
    String::from_utf8(data.to_vec()).map_err(|e| {
        to_py(
            py,
            Error::InvalidJson {
                line: 0,
                column: e.utf8_error().valid_up_to(),
                reason: "invalid UTF-8".into(),
            },
        )
    })
}

/// Run `f` on owned input with the GIL released, mapping its error.
fn run<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> contextwindow_core::Result<T> + Send,
) -> PyResult<T> {
    py.detach(f).map_err(|e| to_py(py, e))
}

/// Text (UTF-8 bytes) above which a call on read dicts releases the GIL: below it the
/// work is a few microseconds, about what releasing and taking back the GIL costs under
/// contention.
const DETACH_BYTES: usize = 4096;

/// Run `f` on what the dict reader built, releasing the GIL when there is enough text.
fn run_read<T: Send>(
    py: Python<'_>,
    bytes: usize,
    f: impl FnOnce() -> contextwindow_core::Result<T> + Send,
) -> PyResult<T> {
    if bytes >= DETACH_BYTES {
        run(py, f)
    } else {
        f().map_err(|e| to_py(py, e))
    }
}

/// Tokens of every message of a list of OpenAI or Anthropic dicts (`format` `None`
/// detects), read in one walk without JSON; `None` when the dict reader does not take
/// the input and the caller must use the Python adapters (see `reader`).
#[pyfunction]
#[pyo3(signature = (messages, format, profile))]
fn count_dicts(
    py: Python<'_>,
    messages: &Bound<'_, PyAny>,
    format: Option<&str>,
    profile: &str,
) -> PyResult<Option<Vec<u64>>> {
    if let Some((texts, bytes)) = reader::plain_chat(messages) {
        return run_read(py, bytes, || api::count_plain(&texts, profile)).map(Some);
    }
    let Ok(read) = reader::read(messages, format) else {
        return Ok(None);
    };
    let msgs = &read.messages;
    run_read(py, read.bytes, || api::count_parsed(msgs, profile)).map(Some)
}

/// Total tokens of each conversation of dicts; `None` for a conversation the dict reader
/// does not take. All the counting runs in one GIL release.
#[pyfunction]
#[pyo3(signature = (conversations, format, profile))]
fn count_many_dicts(
    py: Python<'_>,
    conversations: Vec<Bound<'_, PyAny>>,
    format: Option<&str>,
    profile: &str,
) -> PyResult<Vec<Option<u64>>> {
    /// A conversation as read: a plain chat's texts, the full reader's messages, or not taken.
    enum Conv {
        Plain(Vec<PyBackedStr>),
        Read(Read),
        Not,
    }
    let mut bytes = 0;
    let convs: Vec<Conv> = conversations
        .iter()
        .map(|c| {
            if let Some((texts, n)) = reader::plain_chat(c) {
                bytes += n;
                return Conv::Plain(texts);
            }
            match reader::read(c, format) {
                Ok(r) => {
                    bytes += r.bytes;
                    Conv::Read(r)
                }
                Err(_) => Conv::Not,
            }
        })
        .collect();
    let convs = &convs;
    run_read(py, bytes, || {
        convs
            .iter()
            .map(|c| match c {
                Conv::Plain(texts) => Ok(Some(api::count_plain(texts, profile)?.iter().sum())),
                Conv::Read(r) => Ok(Some(api::count_parsed(&r.messages, profile)?.iter().sum())),
                Conv::Not => Ok(None),
            })
            .collect()
    })
}

/// A trim on a list of dicts read in one walk: `(format, provider, outcome JSON)`, or
/// `None` when the dict reader does not take the input.
type TrimRead = Option<(&'static str, &'static str, String)>;

fn trim_read<F>(
    py: Python<'_>,
    messages: &Bound<'_, PyAny>,
    format: Option<&str>,
    trim: F,
) -> PyResult<TrimRead>
where
    F: FnOnce(
            &[contextwindow_core::model::Message],
            &'static str,
        ) -> contextwindow_core::Result<String>
        + Send,
{
    let Ok(read) = reader::read(messages, format) else {
        return Ok(None);
    };
    let (msgs, provider) = (&read.messages, read.provider.name());
    let out = run_read(py, read.bytes, || trim(msgs, provider))?;
    Ok(Some((read.format.name(), provider, out)))
}

/// `trim_turns` on a list of dicts read in one walk: `(format, provider, outcome JSON)`,
/// or `None` when the dict reader does not take the input.
#[pyfunction]
#[pyo3(signature = (messages, format, budget, profile, breadcrumb, pinned = Vec::new()))]
fn trim_turns_dicts(
    py: Python<'_>,
    messages: &Bound<'_, PyAny>,
    format: Option<&str>,
    budget: u64,
    profile: &str,
    breadcrumb: bool,
    pinned: Vec<usize>,
) -> PyResult<TrimRead> {
    trim_read(py, messages, format, |msgs, provider| {
        api::trim_turns_parsed(msgs, budget, profile, breadcrumb, provider, &pinned)
    })
}

/// `trim_turn_count` on a list of dicts read in one walk (see `trim_turns_dicts`).
#[pyfunction]
#[pyo3(signature = (messages, format, max_turns, profile, breadcrumb, pinned = Vec::new()))]
fn trim_turn_count_dicts(
    py: Python<'_>,
    messages: &Bound<'_, PyAny>,
    format: Option<&str>,
    max_turns: u64,
    profile: &str,
    breadcrumb: bool,
    pinned: Vec<usize>,
) -> PyResult<TrimRead> {
    trim_read(py, messages, format, |msgs, provider| {
        api::trim_turn_count_parsed(msgs, max_turns, profile, breadcrumb, provider, &pinned)
    })
}

/// For the differential tests: the canonical messages the dict reader builds, as the
/// engine's JSON, with `(format, provider)`; `None` when it does not take the input.
#[pyfunction]
#[pyo3(signature = (messages, format))]
fn read_dicts(
    py: Python<'_>,
    messages: &Bound<'_, PyAny>,
    format: Option<&str>,
) -> PyResult<Option<(&'static str, &'static str, String)>> {
    let Ok(read) = reader::read(messages, format) else {
        return Ok(None);
    };
    let json = serde_json::to_string(&read.messages).map_err(|e| to_py(py, e.into()))?;
    Ok(Some((read.format.name(), read.provider.name(), json)))
}

/// For the differential tests: canonical message JSON (the slow path's payload) as the
/// engine reads it, written back the way [`read_dicts`] writes.
#[pyfunction]
fn reencode(py: Python<'_>, messages: &[u8]) -> PyResult<String> {
    let json = utf8(py, messages)?;
    let msgs = contextwindow_core::model::parse_messages(&json).map_err(|e| to_py(py, e))?;
    serde_json::to_string(&msgs).map_err(|e| to_py(py, e.into()))
}

#[pyfunction]
fn estimate_text(py: Python<'_>, text: &str, profile: &str) -> PyResult<u64> {
    run(py, || api::estimate_text(text, profile))
}

#[pyfunction]
fn count_features(py: Python<'_>, text: &str, family: &str) -> PyResult<Vec<(&'static str, u64)>> {
    run(py, || api::count_features(text, family))
}

/// A profile's per-message, per-tool-call, per-tool and per-name overheads, in tokens.
#[pyfunction]
fn profile_overheads(py: Python<'_>, profile: &str) -> PyResult<(u64, u64, u64, u64)> {
    let p = estimate::profile(profile).map_err(|e| to_py(py, e))?;
    Ok((
        p.message_overhead,
        p.tool_call_overhead,
        p.tool_overhead,
        p.name_overhead,
    ))
}

/// A family's Bloom filter and cost table, as embedded (for the Python reference).
#[pyfunction]
fn vocab_data<'py>(
    py: Python<'py>,
    family: &str,
) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
    let v = estimate::vocab(family)
        .ok_or_else(|| PyValueError::new_err(format!("unknown family {family:?}")))?;
    Ok((
        PyBytes::new(py, v.bloom.as_slice()),
        PyBytes::new(py, v.table.as_slice()),
    ))
}

/// Tokens of each text; the strings are read in place (CPython's cached UTF-8) and the
/// whole batch runs without the GIL.
#[pyfunction]
fn estimate_many(py: Python<'_>, texts: Vec<PyBackedStr>, profile: &str) -> PyResult<Vec<u64>> {
    run(py, || api::estimate_many(&texts, profile))
}

/// Total tokens of each conversation (canonical message JSON bytes), without the GIL.
#[pyfunction]
fn count_many(
    py: Python<'_>,
    conversations: Vec<PyBackedBytes>,
    profile: &str,
) -> PyResult<Vec<u64>> {
    let jsons = conversations
        .iter()
        .map(|b| {
            std::str::from_utf8(b).map_err(|e| {
                to_py(
                    py,
                    Error::InvalidJson {
                        line: 0,
                        column: e.valid_up_to(),
                        reason: "invalid UTF-8".into(),
                    },
                )
            })
        })
        .collect::<PyResult<Vec<&str>>>()?;
    run(py, || api::count_many(&jsons, profile))
}

#[pyfunction]
fn count_messages(py: Python<'_>, messages: &[u8], profile: &str) -> PyResult<Vec<u64>> {
    let json = utf8(py, messages)?;
    run(py, || api::count_messages(&json, profile))
}

#[pyfunction]
fn segment_turns(py: Python<'_>, messages: &[u8]) -> PyResult<String> {
    let json = utf8(py, messages)?;
    run(py, || api::segment_turns(&json))
}

#[pyfunction]
fn validate(py: Python<'_>, messages: &[u8], format: &str) -> PyResult<String> {
    let json = utf8(py, messages)?;
    run(py, || api::validate_messages(&json, format))
}

#[pyfunction]
fn repair_tool_pairs(
    py: Python<'_>,
    messages: &[u8],
    format: &str,
    missing: &str,
    profile: &str,
) -> PyResult<String> {
    let json = utf8(py, messages)?;
    run(py, || {
        api::repair_tool_pairs(&json, format, missing, profile)
    })
}

#[pyfunction]
#[pyo3(signature = (messages, budget, profile, breadcrumb, format, pinned = Vec::new()))]
fn trim_turns(
    py: Python<'_>,
    messages: &[u8],
    budget: u64,
    profile: &str,
    breadcrumb: bool,
    format: &str,
    pinned: Vec<usize>,
) -> PyResult<String> {
    let json = utf8(py, messages)?;
    run(py, || {
        api::trim_turns_json(&json, budget, profile, breadcrumb, format, &pinned)
    })
}

#[pyfunction]
#[pyo3(signature = (messages, max_turns, profile, breadcrumb, format, pinned = Vec::new()))]
fn trim_turn_count(
    py: Python<'_>,
    messages: &[u8],
    max_turns: u64,
    profile: &str,
    breadcrumb: bool,
    format: &str,
    pinned: Vec<usize>,
) -> PyResult<String> {
    let json = utf8(py, messages)?;
    run(py, || {
        api::trim_turn_count_json(&json, max_turns, profile, breadcrumb, format, &pinned)
    })
}

/// `fit_request`: the new body (the very `body` object when nothing changed) and the
/// report as JSON.
#[pyfunction]
#[pyo3(signature = (body, budget, profile, provider, breadcrumb, pinned = Vec::new()))]
fn fit_request<'py>(
    py: Python<'py>,
    body: Bound<'py, PyBytes>,
    budget: u64,
    profile: &str,
    provider: Option<&str>,
    breadcrumb: bool,
    pinned: Vec<usize>,
) -> PyResult<(Bound<'py, PyBytes>, String)> {
    let data = body.as_bytes();
    let (out, report) = run(py, || {
        let fitted = gateway::fit_request(data, budget, profile, provider, breadcrumb, &pinned)?;
        let report = fitted.report_json()?;
        Ok((fitted.body, report))
    })?;
    Ok((new_body(py, &body, out), report))
}

/// The body a fit wrote: the caller's own `body` object when it was left as it was.
fn new_body<'py>(
    py: Python<'py>,
    body: &Bound<'py, PyBytes>,
    out: Cow<'_, [u8]>,
) -> Bound<'py, PyBytes> {
    match out {
        Cow::Borrowed(_) => body.clone(),
        Cow::Owned(new) => PyBytes::new(py, &new),
    }
}

/// `fit_request` without its report: the new body (the very `body` object when nothing
/// changed); old turns that cannot be kept are not estimated.
#[pyfunction]
#[pyo3(signature = (body, budget, profile, provider, breadcrumb, pinned = Vec::new()))]
fn fit_request_body<'py>(
    py: Python<'py>,
    body: Bound<'py, PyBytes>,
    budget: u64,
    profile: &str,
    provider: Option<&str>,
    breadcrumb: bool,
    pinned: Vec<usize>,
) -> PyResult<Bound<'py, PyBytes>> {
    let data = body.as_bytes();
    let out = run(py, || {
        gateway::fit_request_body(data, budget, profile, provider, breadcrumb, &pinned)
    })?;
    Ok(new_body(py, &body, out))
}

/// `count_request`: tokens of a request body's messages and tool definitions.
#[pyfunction]
#[pyo3(signature = (body, profile, provider))]
fn count_request(
    py: Python<'_>,
    body: &[u8],
    profile: &str,
    provider: Option<&str>,
) -> PyResult<u64> {
    run(py, || gateway::count_request(body, profile, provider))
}

/// `(byte offset, reason)` of why `text` is not one JSON value (`one_value`) or not a
/// sequence of them (JSONL), `None` when it is (see `gateway::json_syntax_error`); reads
/// in place, any depth, without the GIL.
#[pyfunction]
#[pyo3(signature = (text, one_value = false))]
fn json_syntax_error(
    py: Python<'_>,
    text: &str,
    one_value: bool,
) -> Option<(Option<usize>, String)> {
    py.detach(|| match gateway::json_syntax_error(text, one_value) {
        Some(Error::InvalidRequest { offset, reason }) => Some((offset, reason)),
        Some(other) => Some((None, other.to_string())),
        None => None,
    })
}

/// Whether the JSON (or JSONL) `text` nests `limit` levels deep somewhere, from its top
/// (see `gateway::nests_as_deep`); reads in place, without the GIL.
#[pyfunction]
fn nests_as_deep(py: Python<'_>, text: &str, limit: usize) -> bool {
    py.detach(|| gateway::nests_as_deep(text.as_bytes(), limit))
}

/// Native engine of contextwindow. Private: use the `contextwindow` package.
#[pymodule(gil_used = false)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(estimate_text, m)?)?;
    m.add_function(wrap_pyfunction!(count_features, m)?)?;
    m.add_function(wrap_pyfunction!(vocab_data, m)?)?;
    m.add_function(wrap_pyfunction!(profile_overheads, m)?)?;
    m.add_function(wrap_pyfunction!(count_messages, m)?)?;
    m.add_function(wrap_pyfunction!(fit_request_body, m)?)?;
    m.add_function(wrap_pyfunction!(json_syntax_error, m)?)?;
    m.add_function(wrap_pyfunction!(nests_as_deep, m)?)?;
    m.add_function(wrap_pyfunction!(estimate_many, m)?)?;
    m.add_function(wrap_pyfunction!(count_many, m)?)?;
    m.add_function(wrap_pyfunction!(count_dicts, m)?)?;
    m.add_function(wrap_pyfunction!(read_dicts, m)?)?;
    m.add_function(wrap_pyfunction!(reencode, m)?)?;
    m.add_function(wrap_pyfunction!(count_many_dicts, m)?)?;
    m.add_function(wrap_pyfunction!(trim_turns_dicts, m)?)?;
    m.add_function(wrap_pyfunction!(trim_turn_count_dicts, m)?)?;
    m.add_function(wrap_pyfunction!(segment_turns, m)?)?;
    m.add_function(wrap_pyfunction!(validate, m)?)?;
    m.add_function(wrap_pyfunction!(repair_tool_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(trim_turns, m)?)?;
    m.add_function(wrap_pyfunction!(trim_turn_count, m)?)?;
    m.add_function(wrap_pyfunction!(fit_request, m)?)?;
    m.add_function(wrap_pyfunction!(count_request, m)?)?;
    m.add("PROFILES", estimate::PROFILES.map(|p| p.name))?;
    m.add("FAMILIES", estimate::FAMILY_NAMES)?;
    m.add("PROFILE_JSON", estimate::PROFILE_JSON)?;
    Ok(())
}
