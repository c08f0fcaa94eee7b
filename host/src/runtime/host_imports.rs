//! The host side of the component imports `ctxhost:plugin/log`, `ctxhost:plugin/llm` and
//! `ctxhost:plugin/planning`, for every supported WIT version (each version's bindings call
//! these from their `Host` impls, see [`super::wit`]).
//!
//! `log` goes to `tracing` (target `ctxhost::plugin`, field `component`), bounded and escaped
//! ([`crate::untrusted::text`]). `llm.complete` calls the instance's [`super::LlmImport`]
//! (compressors and strategies; other worlds cannot import `llm`), at most
//! [`super::RuntimeLimits::llm_calls_per_call`] times per call of the component (a strategy:
//! at most [`super::MAX_LLM_CALLS_PER_HOOK`] per hook) and only while
//! [`super::RuntimeLimits::wall_time_per_call`] has time left (which the import gets as its
//! deadline); the time it takes does not count against the component's own call timeout.
//! `llm.estimate-tokens` is [`ctxhost_format::estimate_tokens`]. `planning` calls the
//! instance's [`super::PlanningImport`] (strategies only).

use std::time::Instant;

use super::error::{PluginError, fmt_duration};
use super::sandbox::StoreState;
use super::types::{Completion, PlanningImport};
use crate::untrusted::{self, MAX_LOG_BYTES};

/// WIT `log.level`, the same in every supported WIT version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// `log.log`: `message` (bounded at [`MAX_LOG_BYTES`], control characters escaped) to
/// `tracing` at `level`.
pub(crate) fn log(state: &mut StoreState, level: LogLevel, message: &str) {
    let message = untrusted::text(message, MAX_LOG_BYTES);
    let component = &*state.component;
    match level {
        LogLevel::Trace => tracing::trace!(target: "ctxhost::plugin", component, "{message}"),
        LogLevel::Debug => tracing::debug!(target: "ctxhost::plugin", component, "{message}"),
        LogLevel::Info => tracing::info!(target: "ctxhost::plugin", component, "{message}"),
        LogLevel::Warn => tracing::warn!(target: "ctxhost::plugin", component, "{message}"),
        LogLevel::Error => tracing::error!(target: "ctxhost::plugin", component, "{message}"),
    }
}

/// `llm.complete`: the instance's [`super::LlmImport`] (an error when it has none), unless the
/// call has used up its LLM calls or its wall time; its time is not counted against the
/// component's own call timeout. `Err(text)` becomes WIT `plugin-error::llm(text)`.
pub(crate) fn complete(
    state: &mut StoreState,
    messages_file: &str,
    max_output_tokens: u32,
) -> Result<Completion, String> {
    let limits = state.limits;
    let call = &mut state.call;
    call.llm_calls += 1;
    if call.llm_calls > limits.llm_calls_per_call {
        call.llm_refused += 1;
        return Err(format!(
            "refused: this call already made {} LLM call(s), the most {}",
            limits.llm_calls_per_call, state.llm_limit_source
        ));
    }
    let left = limits
        .wall_time_per_call
        .saturating_sub(call.started.elapsed());
    if left.is_zero() {
        call.llm_refused += 1;
        return Err(format!(
            "refused: this call used up its wall time of {} (context_storage.max_compression_secs)",
            fmt_duration(limits.wall_time_per_call)
        ));
    }
    let started = Instant::now();
    let result = match state.llm.as_mut() {
        Some(llm) => llm.complete(messages_file, max_output_tokens, started + left),
        None => Err("no LLM is available to this component".to_string()),
    };
    state.call.host_time += started.elapsed();
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

/// Most bytes of text one `history.read` returns (its `max-bytes` may not be larger): 1 MiB.
pub(crate) const MAX_HISTORY_READ_BYTES: u32 = 1024 * 1024;

/// A [`crate::history::HistoryError`] as the `plugin-error` a component gets: an argument or a
/// line that does not read is `invalid-input`, a file that cannot be read `io`.
fn history_error(e: crate::history::HistoryError) -> PluginError {
    use crate::history::HistoryError as H;
    match e {
        H::Io { .. } => PluginError::Io(e.to_string()),
        H::Line(_) | H::Argument(_) => PluginError::InvalidInput(e.to_string()),
    }
}

/// `f` on the instance's task directory (an error when it has none), its time counted as the
/// host's ([`super::sandbox::CallState`]).
fn with_history<T>(
    state: &mut StoreState,
    f: impl FnOnce(&crate::task_dir::TaskDir) -> Result<T, crate::history::HistoryError>,
) -> Result<T, PluginError> {
    let Some(dir) = state.history.as_ref() else {
        return Err(PluginError::Unsupported(
            "the task's history is not available to this component".into(),
        ));
    };
    let started = Instant::now();
    let result = f(dir).map_err(history_error);
    state.call.host_time += started.elapsed();
    result
}

/// `history.search`: the newest `limit` matches of `query` (words, or a regular expression).
pub(crate) fn history_search(
    state: &mut StoreState,
    query: &str,
    limit: u32,
    regex: bool,
) -> Result<crate::history::Found, PluginError> {
    with_history(state, |dir| {
        let query = if regex {
            crate::history::Query::regex(query)?
        } else {
            crate::history::Query::words(query)?
        };
        crate::history::search(dir, &query, limit as usize)
    })
}

/// `history.read`: messages.jsonl from `from` to seq `to`, at most `max_bytes` bytes of text
/// (1..=[`MAX_HISTORY_READ_BYTES`]).
pub(crate) fn history_read(
    state: &mut StoreState,
    from: crate::history::Position,
    to: u64,
    max_bytes: u32,
) -> Result<crate::history::ReadResult, PluginError> {
    if !(1..=MAX_HISTORY_READ_BYTES).contains(&max_bytes) {
        return Err(PluginError::InvalidInput(format!(
            "`max-bytes` is {max_bytes}: it must be 1 to {MAX_HISTORY_READ_BYTES}"
        )));
    }
    with_history(state, |dir| {
        crate::history::read(
            dir,
            from,
            to,
            crate::history::Budget::Bytes(u64::from(max_bytes)),
        )
    })
}
