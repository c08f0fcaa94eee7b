//! `context_storage`: where task contexts live and when they are compressed.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::Invalid;

/// `context_storage`: where task contexts live and when they are compressed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ContextStorage {
    /// Keep file-based contexts (always true for now; `false` is rejected).
    pub enabled: bool,
    /// The `contexts/` directory (relative paths are relative to the current directory).
    pub base_dir: PathBuf,
    /// Compress when current tokens > context_length × threshold; in (0, 1].
    pub compression_threshold: f64,
    /// Most recent messages kept verbatim by a compression (≥ 1).
    pub keep_recent_messages: u32,
    /// The kept messages hold at most this many estimated tokens as well (≥ 1); `None`: half of
    /// the compression threshold in tokens ([`crate::config::Config::keep_recent_tokens`]).
    /// The newest message's tool-call group is always kept, whatever its size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_recent_tokens: Option<u64>,
    /// Completed task directories older than this many days may be deleted (≥ 1; deleting
    /// every finished task's directory is `ctxhost cleanup --all`).
    pub cleanup_days: u32,
    /// Prompt for summaries; must contain `{messages}`.
    pub summary_prompt: String,
    /// Most bytes one task directory may hold, MiB (≥ 1). A component that writes past it is
    /// stopped in the call that does, and the task fails; the host checks it at every step too.
    pub max_task_dir_mib: u64,
    /// Most files and folders one call of a component may create in the task directory
    /// (≥ 1); a creation past it is refused (WASI `quota`) and the call fails.
    pub max_files_per_call: u64,
    /// Most LLM calls one compression may make through the compressor's `llm` import (≥ 1);
    /// further calls are refused. Each call counts in the task's `llm_call_count`.
    pub max_llm_calls_per_compression: u32,
    /// Longest wall time of one compression, LLM calls included, seconds (≥ 1). The
    /// compressor's own time is also bounded by `runtime.call_timeout_secs`.
    pub max_compression_secs: u64,
    /// Once a compression summarised messages, offer the model the host's `history_search` and
    /// `history_read` tools over the task's full history ([`crate::tools::history`]).
    pub recall: bool,
    /// Keep every task directory in an S3-compatible bucket as well, each host's `contexts/`
    /// being a working copy of it (DESIGN.md, "Several hosts"; [`crate::remote`]); `None`:
    /// task directories live only in `base_dir` (one host, or a shared filesystem).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<super::RemoteConfig>,
}

pub use crate::runtime::DEFAULT_MAX_FILES_PER_CALL;

/// Default summary prompt (contains the `{messages}` placeholder).
pub const DEFAULT_SUMMARY_PROMPT: &str = "Summarize the following conversation between a coding agent and its tools. \
Keep every fact needed to continue the task: the goal, decisions made, files and commands involved, \
results of tool calls, errors seen and what remains to be done. Be concise.\n\n{messages}";

impl Default for ContextStorage {
    fn default() -> Self {
        ContextStorage {
            enabled: true,
            base_dir: PathBuf::from("./contexts"),
            compression_threshold: 0.7,
            keep_recent_messages: 5,
            keep_recent_tokens: None,
            cleanup_days: 30,
            summary_prompt: DEFAULT_SUMMARY_PROMPT.to_string(),
            max_task_dir_mib: 1024,
            max_files_per_call: DEFAULT_MAX_FILES_PER_CALL,
            max_llm_calls_per_compression: 16,
            max_compression_secs: 600,
            recall: true,
            remote: None,
        }
    }
}

impl ContextStorage {
    /// `max_task_dir_mib` in bytes.
    pub fn max_task_dir_bytes(&self) -> u64 {
        self.max_task_dir_mib.saturating_mul(1024 * 1024)
    }

    /// Check value ranges; the error names the key.
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if !self.enabled {
            return Invalid::err(
                "context_storage.enabled",
                "must be true: ctxhost always keeps file-based contexts",
            );
        }
        if self.base_dir.as_os_str().is_empty() {
            return Invalid::err("context_storage.base_dir", "must not be empty");
        }
        let t = self.compression_threshold;
        if !(t > 0.0 && t <= 1.0) {
            return Invalid::err(
                "context_storage.compression_threshold",
                format!("must be in (0, 1], got {t}"),
            );
        }
        if self.keep_recent_messages < 1 {
            return Invalid::err(
                "context_storage.keep_recent_messages",
                "must be at least 1, got 0",
            );
        }
        if self.keep_recent_tokens == Some(0) {
            return Invalid::err(
                "context_storage.keep_recent_tokens",
                "must be at least 1, got 0 (leave it out for the default: half the compression threshold)",
            );
        }
        if self.cleanup_days < 1 {
            return Invalid::err(
                "context_storage.cleanup_days",
                "must be at least 1, got 0 (to delete the directory of every finished task, run `ctxhost cleanup --all`)",
            );
        }
        for (key, v) in [
            ("context_storage.max_task_dir_mib", self.max_task_dir_mib),
            (
                "context_storage.max_files_per_call",
                self.max_files_per_call,
            ),
            (
                "context_storage.max_llm_calls_per_compression",
                u64::from(self.max_llm_calls_per_compression),
            ),
            (
                "context_storage.max_compression_secs",
                self.max_compression_secs,
            ),
        ] {
            if v < 1 {
                return Invalid::err(key, "must be at least 1, got 0");
            }
        }
        if let Some(remote) = &self.remote {
            remote.validate()?;
        }
        if !self.summary_prompt.contains("{messages}") {
            return Invalid::err(
                "context_storage.summary_prompt",
                "must contain the `{messages}` placeholder",
            );
        }
        Ok(())
    }
}
