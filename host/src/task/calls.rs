//! [`CallLog`]: the task's `llm_calls.jsonl`, one line per LLM call (of the agent loop, or of
//! a compressor) and per compression
//! (`ctxhost_format::CallLogLine`), so the context's size at every call can be shown without
//! replaying the history (the web dashboard's chart reads it).
//!
//! Appended as whole lines through the task directory's handle ([`TaskDir::append_line`]:
//! a link named llm_calls.jsonl is refused, never followed); a failure to write it is logged
//! and never fails the task (it is a record for people, not state the task needs). A torn last
//! line after a crash is skipped by readers.

use std::path::PathBuf;

use ctxhost_format::files::LLM_CALLS;
use ctxhost_format::{
    CallLogLine, CallStatus, CallUsage, CompressionLine, LlmCallLine, SummaryCallLine,
};

use crate::runtime::Usage;
use crate::task_dir::TaskDir;

/// What is known about one LLM call of the agent loop when it ends.
#[derive(Debug, Clone)]
pub struct CallRecord<'a> {
    /// The task's step number (1-based, continuing after a resume).
    pub step: u32,
    /// Estimated tokens of current.jsonl sent with the call.
    pub context_tokens: u64,
    /// `llm.context_length`.
    pub context_length: u64,
    /// `context_length × compression_threshold`, when a compressor is configured.
    pub threshold_tokens: Option<u64>,
    /// Size of request.json, bytes (0 when it was not written).
    pub request_bytes: u64,
    /// Wall time of the exchange, milliseconds.
    pub duration_ms: u64,
    /// Provider usage, when reported.
    pub usage: Option<Usage>,
    /// `None` for a call that succeeded; the error text otherwise.
    pub error: Option<&'a str>,
    /// The call was given up for a pause or stop request (status `interrupted`, not `error`).
    pub interrupted: bool,
}

/// A line's token counts: the provider's, all absent when it reported none.
fn reported(usage: Option<Usage>) -> CallUsage {
    CallUsage {
        prompt_tokens: usage.map(|u| u.prompt_tokens),
        completion_tokens: usage.map(|u| u.completion_tokens),
        total_tokens: usage.map(|u| u.total_tokens),
    }
}

/// The task's `llm_calls.jsonl` (the host is its only writer).
#[derive(Debug, Clone)]
pub struct CallLog {
    dir: TaskDir,
}

impl CallLog {
    /// The log of the task directory `dir` (created by the first line).
    pub fn new(dir: &TaskDir) -> CallLog {
        CallLog { dir: dir.clone() }
    }

    /// Path of llm_calls.jsonl, for messages.
    pub fn path(&self) -> PathBuf {
        self.dir.file_path(LLM_CALLS)
    }

    /// Append the line of one agent-loop call, at `timestamp` (RFC 3339).
    pub fn record_call(&self, call: &CallRecord<'_>, timestamp: &str) {
        self.append(&CallLogLine::Call(LlmCallLine {
            n: u64::from(call.step),
            timestamp: timestamp.to_string(),
            context_tokens: call.context_tokens,
            context_length: call.context_length,
            threshold_tokens: call.threshold_tokens,
            request_bytes: call.request_bytes,
            duration_ms: call.duration_ms,
            status: status_of(call.error, call.interrupted),
            usage: reported(call.usage),
            cache_read_tokens: call.usage.map(|u| u.cache_read_tokens).filter(|n| *n > 0),
            reasoning_tokens: call.usage.map(|u| u.reasoning_tokens).filter(|n| *n > 0),
            error: call.error.map(str::to_string),
        }));
    }

    /// Append the line of one compressor request (`input_tokens`: estimate of what it sent;
    /// `request_bytes` of its request body; `duration_ms` of the exchange; `interrupted`: it
    /// was given up for a pause or stop request).
    #[allow(clippy::too_many_arguments)]
    pub fn record_summary_call(
        &self,
        input_tokens: u64,
        request_bytes: u64,
        duration_ms: u64,
        usage: Option<Usage>,
        error: Option<&str>,
        interrupted: bool,
        timestamp: &str,
    ) {
        self.append(&CallLogLine::SummaryCall(SummaryCallLine {
            timestamp: timestamp.to_string(),
            input_tokens,
            request_bytes,
            duration_ms,
            status: status_of(error, interrupted),
            usage: reported(usage),
            error: error.map(str::to_string),
        }));
    }

    /// Append the line of one compression (the context's tokens before and after, the
    /// summary's id if the strategy made one).
    pub fn record_compression(
        &self,
        before_tokens: u64,
        after_tokens: u64,
        summary_id: Option<u64>,
        timestamp: &str,
    ) {
        self.append(&CallLogLine::Compression(CompressionLine {
            timestamp: timestamp.to_string(),
            before_tokens,
            after_tokens,
            summary_id,
        }));
    }

    fn append(&self, line: &CallLogLine) {
        let result = serde_json::to_string(line)
            .map_err(anyhow::Error::from)
            .and_then(|text| Ok(self.dir.append_line(LLM_CALLS, &text)?));
        if let Err(e) = result {
            tracing::warn!(
                "{}: cannot record the LLM call: {e:#}",
                self.path().display()
            );
        }
    }
}

fn status_of(error: Option<&str>, interrupted: bool) -> CallStatus {
    if interrupted {
        CallStatus::Interrupted
    } else if error.is_some() {
        CallStatus::Error
    } else {
        CallStatus::Ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_and_compressions_are_appended_as_tagged_lines() {
        let dir = tempfile::tempdir().unwrap();
        let log = CallLog::new(&TaskDir::open(dir.path()).unwrap());
        log.record_call(
            &CallRecord {
                step: 1,
                context_tokens: 900,
                context_length: 1000,
                threshold_tokens: Some(700),
                request_bytes: 4000,
                duration_ms: 12,
                usage: Some(Usage {
                    prompt_tokens: 800,
                    completion_tokens: 20,
                    total_tokens: 820,
                    ..Default::default()
                }),
                error: None,
                interrupted: false,
            },
            "t1",
        );
        log.record_summary_call(600, 2500, 40, None, Some("boom"), false, "t2");
        log.record_compression(900, 300, Some(1), "t3");
        let text = std::fs::read_to_string(log.path()).unwrap();
        let lines: Vec<CallLogLine> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        let CallLogLine::SummaryCall(s) = &lines[1] else {
            panic!("{lines:?}")
        };
        assert_eq!((s.input_tokens, s.status), (600, CallStatus::Error));
        let CallLogLine::Call(c) = &lines[0] else {
            panic!("{lines:?}")
        };
        assert_eq!(
            (
                c.n,
                c.context_tokens,
                c.threshold_tokens,
                c.usage.total_tokens
            ),
            (1, 900, Some(700), Some(820))
        );
        assert_eq!(c.status, CallStatus::Ok);
        let CallLogLine::Compression(k) = &lines[2] else {
            panic!("{lines:?}")
        };
        assert_eq!(
            (k.before_tokens, k.after_tokens, k.summary_id),
            (900, 300, Some(1))
        );
    }

    /// Both kinds of call line carry the provider's usage as the same flat fields, in the
    /// order `llm_calls.schema.json` documents, byte for byte, and each matches the schema.
    #[test]
    fn call_lines_serialise_their_usage_flat_and_match_the_schema() {
        let dir = tempfile::tempdir().unwrap();
        let log = CallLog::new(&TaskDir::open(dir.path()).unwrap());
        let usage = |p, c, cached| Usage {
            prompt_tokens: p,
            completion_tokens: c,
            total_tokens: p + c,
            cache_read_tokens: cached,
            ..Default::default()
        };
        let call = |step, usage, error| CallRecord {
            step,
            context_tokens: 900,
            context_length: 1000,
            threshold_tokens: Some(700),
            request_bytes: 4000,
            duration_ms: 12,
            usage,
            error,
            interrupted: false,
        };
        log.record_call(
            &call(1, Some(usage(800, 20, 5)), None),
            "2025-01-01T00:00:01.000Z",
        );
        log.record_call(&call(2, None, Some("down")), "2025-01-01T00:00:02.000Z");
        log.record_summary_call(
            600,
            2500,
            40,
            Some(usage(600, 50, 0)),
            None,
            false,
            "2025-01-01T00:00:03.000Z",
        );
        log.record_summary_call(
            600,
            2500,
            40,
            None,
            Some("boom"),
            false,
            "2025-01-01T00:00:04.000Z",
        );
        log.record_call(
            &CallRecord {
                interrupted: true,
                ..call(3, None, Some("paused"))
            },
            "2025-01-01T00:00:05.000Z",
        );
        let text = std::fs::read_to_string(log.path()).unwrap();
        let expected = [
            r#"{"type":"call","n":1,"timestamp":"2025-01-01T00:00:01.000Z","context_tokens":900,"context_length":1000,"threshold_tokens":700,"request_bytes":4000,"duration_ms":12,"status":"ok","prompt_tokens":800,"completion_tokens":20,"total_tokens":820,"cache_read_tokens":5}"#,
            r#"{"type":"call","n":2,"timestamp":"2025-01-01T00:00:02.000Z","context_tokens":900,"context_length":1000,"threshold_tokens":700,"request_bytes":4000,"duration_ms":12,"status":"error","error":"down"}"#,
            r#"{"type":"summary_call","timestamp":"2025-01-01T00:00:03.000Z","input_tokens":600,"request_bytes":2500,"duration_ms":40,"status":"ok","prompt_tokens":600,"completion_tokens":50,"total_tokens":650}"#,
            r#"{"type":"summary_call","timestamp":"2025-01-01T00:00:04.000Z","input_tokens":600,"request_bytes":2500,"duration_ms":40,"status":"error","error":"boom"}"#,
            r#"{"type":"call","n":3,"timestamp":"2025-01-01T00:00:05.000Z","context_tokens":900,"context_length":1000,"threshold_tokens":700,"request_bytes":4000,"duration_ms":12,"status":"interrupted","error":"paused"}"#,
        ];
        assert_eq!(text.lines().collect::<Vec<_>>(), expected);
        for line in expected {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            let mismatches = crate::schemas::Schema::LlmCalls.validate(&value).unwrap();
            assert!(mismatches.is_empty(), "{line}: {mismatches:?}");
            // And it reads back as it was written.
            let parsed: CallLogLine = serde_json::from_str(line).unwrap();
            assert_eq!(serde_json::to_string(&parsed).unwrap(), line);
        }
    }
}
