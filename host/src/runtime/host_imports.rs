//! The host side of the component imports `ctxhost:plugin/log` and `ctxhost:plugin/llm`, for
//! every supported WIT version (each version's bindings call these from their `Host` impls,
//! see [`super::wit`]).
//!
//! `log` goes to `tracing` (target `ctxhost::plugin`, field `component`). `llm.complete` calls
//! the instance's [`super::LlmImport`] (compressors only; other worlds cannot import `llm`);
//! the time it takes is credited back to the call's deadline. `llm.estimate-tokens` is
//! [`ctxhost_format::estimate_tokens`].

use std::time::Instant;

use super::sandbox::StoreState;
use super::types::Completion;

/// Longest log message forwarded (bytes); longer ones are cut at a character boundary.
const MAX_LOG_BYTES: usize = 16 * 1024;

/// WIT `log.level`, the same in every supported WIT version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// `log.log`: `message` (cut at [`MAX_LOG_BYTES`]) to `tracing` at `level`.
pub(crate) fn log(state: &mut StoreState, level: LogLevel, message: &str) {
    let message = truncate(message, MAX_LOG_BYTES);
    let component = &*state.component;
    match level {
        LogLevel::Trace => tracing::trace!(target: "ctxhost::plugin", component, "{message}"),
        LogLevel::Debug => tracing::debug!(target: "ctxhost::plugin", component, "{message}"),
        LogLevel::Info => tracing::info!(target: "ctxhost::plugin", component, "{message}"),
        LogLevel::Warn => tracing::warn!(target: "ctxhost::plugin", component, "{message}"),
        LogLevel::Error => tracing::error!(target: "ctxhost::plugin", component, "{message}"),
    }
}

/// `llm.complete`: the instance's [`super::LlmImport`] (an error when it has none), its time
/// credited back to the call's deadline. `Err(text)` becomes WIT `plugin-error::llm(text)`.
pub(crate) fn complete(
    state: &mut StoreState,
    messages_file: &str,
    max_output_tokens: u32,
) -> Result<Completion, String> {
    let started = Instant::now();
    let result = match state.llm.as_mut() {
        Some(llm) => llm.complete(messages_file, max_output_tokens),
        None => Err("no LLM is available to this component".to_string()),
    };
    state.host_time += started.elapsed();
    if let Err(reason) = &result {
        tracing::debug!(target: "ctxhost::plugin", component = &*state.component, "llm.complete failed: {reason}");
    }
    result
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("上下文", 4), "上");
        assert_eq!(truncate("abc", 10), "abc");
    }
}
