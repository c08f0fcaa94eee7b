//! The host side of the component imports `ctxhost:plugin/log` and `ctxhost:plugin/llm`.
//!
//! `log` goes to `tracing` (target `ctxhost::plugin`, field `component`). `llm.complete` calls
//! the instance's [`super::LlmImport`] (compressors only; other worlds cannot import `llm`);
//! the time it takes is credited back to the call's deadline. `llm.estimate-tokens` is
//! [`ctxhost_format::estimate_tokens`].

use std::time::Instant;

use super::bindings::{wit_llm, wit_log, wit_types};
use super::sandbox::StoreState;

/// Longest log message forwarded (bytes); longer ones are cut at a character boundary.
const MAX_LOG_BYTES: usize = 16 * 1024;

impl wit_types::Host for StoreState {}

impl wit_log::Host for StoreState {
    fn log(&mut self, level: wit_log::Level, message: String) {
        let message = truncate(&message, MAX_LOG_BYTES);
        let component = &*self.component;
        match level {
            wit_log::Level::Trace => {
                tracing::trace!(target: "ctxhost::plugin", component, "{message}")
            }
            wit_log::Level::Debug => {
                tracing::debug!(target: "ctxhost::plugin", component, "{message}")
            }
            wit_log::Level::Info => {
                tracing::info!(target: "ctxhost::plugin", component, "{message}")
            }
            wit_log::Level::Warn => {
                tracing::warn!(target: "ctxhost::plugin", component, "{message}")
            }
            wit_log::Level::Error => {
                tracing::error!(target: "ctxhost::plugin", component, "{message}")
            }
        }
    }
}

impl wit_llm::Host for StoreState {
    fn complete(
        &mut self,
        messages_file: String,
        max_output_tokens: u32,
    ) -> Result<wit_llm::Completion, wit_types::PluginError> {
        let started = Instant::now();
        let result = match self.llm.as_mut() {
            Some(llm) => llm.complete(&messages_file, max_output_tokens),
            None => Err("no LLM is available to this component".to_string()),
        };
        self.host_time += started.elapsed();
        match result {
            Ok(completion) => Ok(completion.into()),
            Err(reason) => {
                tracing::debug!(target: "ctxhost::plugin", component = &*self.component, "llm.complete failed: {reason}");
                Err(wit_types::PluginError::Llm(reason))
            }
        }
    }

    fn estimate_tokens(&mut self, text: String) -> u64 {
        ctxhost_format::estimate_tokens(&text)
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
