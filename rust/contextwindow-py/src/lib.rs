//! PyO3 glue for contextwindow: extract arguments, release the GIL, call the core,
//! map errors in one place. No logic lives here.

use std::borrow::Cow;

use contextwindow_core::{api, estimate, gateway, Error};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::types::{PyBytes, PyDict};

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
        } => {
            let field = (!field.is_empty()).then_some(field.as_str());
            if let Err(err) = kwargs
                .set_item("index", *index)
                .and_then(|()| kwargs.set_item("field", field))
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

#[pyfunction]
fn estimate_text(py: Python<'_>, text: &str, profile: &str) -> PyResult<u64> {
    run(py, || api::estimate_text(text, profile))
}

#[pyfunction]
fn count_features(py: Python<'_>, text: &str, family: &str) -> PyResult<Vec<(&'static str, u64)>> {
    run(py, || api::count_features(text, family))
}

/// A profile's per-message, per-tool-call and per-tool overheads, in tokens.
#[pyfunction]
fn profile_overheads(py: Python<'_>, profile: &str) -> PyResult<(u64, u64, u64)> {
    let p = estimate::profile(profile).map_err(|e| to_py(py, e))?;
    Ok((p.message_overhead, p.tool_call_overhead, p.tool_overhead))
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
fn trim_turns(
    py: Python<'_>,
    messages: &[u8],
    budget: u64,
    profile: &str,
    breadcrumb: bool,
    format: &str,
) -> PyResult<String> {
    let json = utf8(py, messages)?;
    run(py, || {
        api::trim_turns_json(&json, budget, profile, breadcrumb, format)
    })
}

#[pyfunction]
fn trim_turn_count(
    py: Python<'_>,
    messages: &[u8],
    max_turns: u64,
    profile: &str,
    breadcrumb: bool,
    format: &str,
) -> PyResult<String> {
    let json = utf8(py, messages)?;
    run(py, || {
        api::trim_turn_count_json(&json, max_turns, profile, breadcrumb, format)
    })
}

/// `fit_request`: the new body (the very `body` object when nothing changed) and the
/// report as JSON.
#[pyfunction]
#[pyo3(signature = (body, budget, profile, provider, breadcrumb))]
fn fit_request<'py>(
    py: Python<'py>,
    body: Bound<'py, PyBytes>,
    budget: u64,
    profile: &str,
    provider: Option<&str>,
    breadcrumb: bool,
) -> PyResult<(Bound<'py, PyBytes>, String)> {
    let data = body.as_bytes();
    let (out, report) = run(py, || {
        let fitted = gateway::fit_request(data, budget, profile, provider, breadcrumb)?;
        let report = fitted.report_json()?;
        Ok((fitted.body, report))
    })?;
    match out {
        Cow::Borrowed(_) => Ok((body, report)),
        Cow::Owned(new) => Ok((PyBytes::new(py, &new), report)),
    }
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

/// Native engine of contextwindow. Private: use the `contextwindow` package.
#[pymodule(gil_used = false)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(estimate_text, m)?)?;
    m.add_function(wrap_pyfunction!(count_features, m)?)?;
    m.add_function(wrap_pyfunction!(vocab_data, m)?)?;
    m.add_function(wrap_pyfunction!(profile_overheads, m)?)?;
    m.add_function(wrap_pyfunction!(count_messages, m)?)?;
    m.add_function(wrap_pyfunction!(estimate_many, m)?)?;
    m.add_function(wrap_pyfunction!(count_many, m)?)?;
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
