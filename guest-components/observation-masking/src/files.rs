//! The files of the task directory this component touches (paths relative to the preopened
//! task directory); they are read and written with `ctxhost_plugin::jsonl`.

/// The live context (read only).
pub const CURRENT: &str = ctxhost_plugin::format::files::CURRENT;
/// The tool call log (read only): where the full text of a masked result stays.
pub const TOOLS: &str = ctxhost_plugin::format::files::TOOLS;
/// The new context handed to the host.
pub const COMPRESSED: &str = ctxhost_plugin::format::files::COMPRESSED;
