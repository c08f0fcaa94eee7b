//! The host side of the component imports `ctxhost:plugin/log`, `ctxhost:plugin/llm` and
//! `ctxhost:plugin/planning`, for every supported WIT version (each version's bindings call
//! these from their `Host` impls, see [`super::wit`]).
//!
//! `log` goes to `tracing` (target `ctxhost::plugin`, field `component`). `llm.complete` calls
//! the instance's [`super::LlmImport`] (compressors and strategies; other worlds cannot import
//! `llm`), at most the instance's call limit per component call (strategies: 4 per hook); the
//! time it takes is credited back to the call's deadline. `llm.estimate-tokens` is
//! [`ctxhost_format::estimate_tokens`]. `planning` calls the instance's
//! [`super::PlanningImport`] (strategies only).

use std::time::Instant;

use super::sandbox::StoreState;
use super::types::{Completion, PlanningImport};

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
    if let Some(limit) = state.llm_call_limit
        && state.llm_calls >= limit
    {
        return Err(format!(
            "refused: this call already made {limit} llm calls, the most one call may make"
        ));
    }
    let started = Instant::now();
    let result = match state.llm.as_mut() {
        Some(llm) => {
            state.llm_calls += 1;
            llm.complete(messages_file, max_output_tokens)
        }
        None => Err("no LLM is available to this component".to_string()),
    };
    let spent = started.elapsed();
    state.host_time += spent;
    state.llm_time += spent;
    if let Err(reason) = &result {
        tracing::debug!(target: "ctxhost::plugin", component = &*state.component, "llm.complete failed: {reason}");
    }
    result
}

/// A `planning` function: `f` on the instance's [`PlanningImport`] (an error when it has none).
/// `Err(text)` becomes WIT `plugin-error::invalid-input(text)` where the function has one.
pub(crate) fn planning<T>(
    state: &mut StoreState,
    f: impl FnOnce(&mut dyn PlanningImport) -> Result<T, String>,
) -> Result<T, String> {
    match state.planning.as_mut() {
        Some(p) => f(p.as_mut()),
        None => Err("no planning history is available to this component".to_string()),
    }
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
