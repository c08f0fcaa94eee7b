//! Building `plugin-error`s: OS errors (`io`) and JSONL reading errors (`io` or
//! `invalid-input`). Compiled into every builtin component with
//! `#[path = "../../shared/plugin_error.rs"] mod plugin_error;` (it uses that crate's bindings:
//! every world generates the same `ctxhost::plugin::types::PluginError`).

use std::io;

use ctxhost_format::jsonl::JsonlError;

use crate::ctxhost::plugin::types::PluginError;

/// `io` error: `<what>: <OS error>`, e.g. `opening current.jsonl: Permission denied`.
pub fn io_error(what: impl std::fmt::Display, e: io::Error) -> PluginError {
    PluginError::Io(format!("{what}: {e}"))
}

/// A failed read is `io`; a line that is not UTF-8 or not the expected shape is
/// `invalid-input`. Either way the text names the file and line ([`JsonlError`]'s `Display`).
impl From<JsonlError> for PluginError {
    fn from(e: JsonlError) -> Self {
        match e {
            JsonlError::Io { .. } => PluginError::Io(e.to_string()),
            JsonlError::Invalid { .. } => PluginError::InvalidInput(e.to_string()),
        }
    }
}
