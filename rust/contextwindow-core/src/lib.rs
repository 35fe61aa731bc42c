//! contextwindow-core: the engine of contextwindow.
//!
//! Estimates tokens in one pass, segments conversations into turns and tool units,
//! validates and repairs tool pairs, and trims whole turns to a token budget. Pure Rust,
//! no Python: the PyO3 binding (`contextwindow-py`) only converts and maps errors.
//!
//! The JSON entry points ([`api`]) take a JSON array of canonical messages (the
//! msgspec encoding of `contextwindow.messages.Message`) and return JSON.

pub mod api;
pub mod error;
pub mod estimate;
pub mod features;
pub mod gateway;
pub mod image;
pub mod marks;
pub mod model;
pub mod pairs;
pub mod trim;
pub mod turns;

pub use error::{Error, Result};
