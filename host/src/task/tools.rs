//! [`ToolStore`]: `tools.jsonl` and `tool-results/`, the record of every tool call of a task.
//! The only writer of both.
//!
//! One line per call (`ctxhost_format::ToolLine`: `{seq, tool, tool_call_id, args, result?,
//! status, error?, duration_ms, timestamp}`), appended as a whole line. `seq` runs from 1 per
//! task and continues after a resume. `result` / `error` hold what the model was given: when the
//! output exceeded `max_tool_output_tokens` that is the cut text plus a note, and the full
//! output is in `tool-results/{seq}.txt`. tools.jsonl is created by the first call, so a task
//! without tool calls has none.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::time::{Duration, Instant};

use ctxhost_format::files::{TOOL_RESULTS_DIR, TOOLS};
use ctxhost_format::{ChatMessage, ToolCall, ToolLine, ToolStatus};

use crate::task_dir::TaskDir;
use crate::tools::{CallOutcome, ToolError, bound};

/// What one call produced, as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedCall {
    /// Its seq in tools.jsonl.
    pub seq: u64,
    /// `success`, or `error` for a tool error (the model still gets the content).
    pub status: ToolStatus,
    /// Content of the `tool` message: the (possibly cut) result, or `Error: ...`.
    pub content: String,
    /// Where the full output was saved when it was cut (relative to the task directory).
    pub spilled_to: Option<String>,
    /// Wall time of the call, in milliseconds.
    pub duration_ms: u64,
}

impl RecordedCall {
    /// The `tool` message answering `call`: `{role: tool, content, tool_call_id, tool_name,
    /// is_error?}`, with `is_error` set when the call failed.
    pub fn to_message(&self, call: &ToolCall) -> ChatMessage {
        ChatMessage {
            is_error: self.status == ToolStatus::Error,
            ..ChatMessage::tool_result(call, self.content.clone())
        }
    }
}

/// Appends to a task's tools.jsonl and writes its tool-results/ files.
pub struct ToolStore {
    dir: TaskDir,
    /// Opened by the first call when tools.jsonl did not exist.
    file: Option<File>,
    next_seq: u64,
    max_output_tokens: u64,
}

impl ToolStore {
    /// The tool store of `task_dir`. An existing tools.jsonl whose last line is unterminated
    /// (a crash mid-write) loses that line; seq continues after the lines already there.
    /// `max_output_tokens` is `tools.max_tool_output_tokens`.
    pub fn open(dir: &TaskDir, max_output_tokens: u64) -> Result<ToolStore, ToolError> {
        let path = dir.file_path(TOOLS);
        let (file, lines) = match dir.open_read_append(TOOLS) {
            Ok(mut file) => {
                let (lines, complete_len) =
                    count_complete_lines(&mut file).map_err(|e| ToolError::io(&path, e))?;
                let len = file.metadata().map_err(|e| ToolError::io(&path, e))?.len();
                if complete_len < len {
                    tracing::warn!(
                        "{}: cutting a torn last line ({} bytes)",
                        path.display(),
                        len - complete_len
                    );
                    file.set_len(complete_len)
                        .map_err(|e| ToolError::io(&path, e))?;
                }
                (Some(file), lines)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (None, 0),
            Err(e) => return Err(ToolError::io(&path, e)),
        };
        Ok(ToolStore {
            dir: dir.clone(),
            file,
            next_seq: lines + 1,
            max_output_tokens,
        })
    }

    /// Change the cap of what one result puts into the context (estimated tokens), e.g. once
    /// the tool definitions' share of the window is known.
    pub fn set_max_output_tokens(&mut self, max_output_tokens: u64) {
        self.max_output_tokens = max_output_tokens;
    }

    /// The cap of what one result puts into the context (estimated tokens).
    pub fn max_output_tokens(&self) -> u64 {
        self.max_output_tokens
    }

    /// The seq the next call will get.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Run `call` with `run` (which returns what the tool produced) and record it. A call that
    /// fails because its server is gone (`Err` from `run`) is recorded as an error and returned
    /// as `Err`, so the task fails with that message.
    pub fn run(
        &mut self,
        call: &ToolCall,
        run: impl FnOnce(&ToolCall) -> Result<CallOutcome, ToolError>,
    ) -> Result<RecordedCall, ToolError> {
        let started = Instant::now();
        match run(call) {
            Ok(outcome) => self.record(call, &outcome, started.elapsed()),
            Err(fatal) => {
                self.record(
                    call,
                    &CallOutcome::Error(fatal.to_string()),
                    started.elapsed(),
                )?;
                Err(fatal)
            }
        }
    }

    /// Record one call's `outcome` (bounding its text, spilling the full text when cut) and
    /// return what goes back to the model. Errors: [`ToolError::Io`] naming the file.
    pub fn record(
        &mut self,
        call: &ToolCall,
        outcome: &CallOutcome,
        duration: Duration,
    ) -> Result<RecordedCall, ToolError> {
        let (name, arguments) = (&call.function.name, &call.function.arguments);
        let seq = self.next_seq;
        let (status, text) = match outcome {
            CallOutcome::Success(t) => (ToolStatus::Success, t.clone()),
            CallOutcome::Error(t) => (ToolStatus::Error, error_text(t)),
        };
        let (content, spilled_to) = match bound::cut_point(&text, self.max_output_tokens) {
            None => (text, None),
            Some(cut) => {
                let rel = format!("{TOOL_RESULTS_DIR}/{seq}.txt");
                self.dir
                    .create_dir(TOOL_RESULTS_DIR)
                    .map_err(|e| ToolError::io(self.dir.file_path(TOOL_RESULTS_DIR), e))?;
                self.dir
                    .create(&rel)
                    .and_then(|mut f| f.write_all(text.as_bytes()))
                    .map_err(|e| ToolError::io(self.dir.file_path(&rel), e))?;
                let content = format!(
                    "{}\n\n[output cut: showing {} of {} characters (~{} of ~{} tokens); the full output is in {rel}]",
                    &text[..cut.kept_bytes],
                    cut.kept_chars,
                    cut.total_chars,
                    cut.kept_tokens,
                    cut.total_tokens
                );
                (content, Some(rel))
            }
        };
        let duration_ms = duration.as_millis().min(u64::MAX as u128) as u64;
        let line = ToolLine {
            seq,
            tool: name.to_string(),
            tool_call_id: Some(call.id.clone()),
            args: serde_json::from_str(arguments)
                .unwrap_or_else(|_| serde_json::Value::String(arguments.to_string())),
            result: (status == ToolStatus::Success).then(|| content.clone()),
            status,
            error: (status == ToolStatus::Error).then(|| content.clone()),
            duration_ms,
            timestamp: crate::db::now_rfc3339(),
        };
        let path = self.dir.file_path(TOOLS);
        let mut bytes = ctxhost_format::jsonl::to_line(&line)
            .map_err(|e| ToolError::io(&path, e))?
            .into_bytes();
        bytes.push(b'\n');
        let file = match &mut self.file {
            Some(f) => f,
            empty @ None => empty.insert(
                self.dir
                    .open_append(TOOLS)
                    .map_err(|e| ToolError::io(&path, e))?,
            ),
        };
        file.write_all(&bytes)
            .map_err(|e| ToolError::io(&path, e))?;
        self.next_seq += 1;
        Ok(RecordedCall {
            seq,
            status,
            content,
            spilled_to,
            duration_ms,
        })
    }

    /// The recorded status of the calls `ids` (tool call ids), streamed from tools.jsonl; an id
    /// with no line (a call whose result repair wrote after a crash) is missing from the map.
    pub fn statuses(
        &self,
        ids: &[&str],
    ) -> anyhow::Result<std::collections::HashMap<String, ToolStatus>> {
        let mut out = std::collections::HashMap::new();
        let Some(mut lines) = crate::invariants::queries::open_lines(&self.dir, TOOLS)? else {
            return Ok(out);
        };
        while let Some((_, line)) = lines.next_value::<ToolLine>()? {
            if let Some(id) = line.tool_call_id
                && ids.contains(&id.as_str())
            {
                out.insert(id, line.status);
            }
        }
        Ok(out)
    }

    /// Flush tools.jsonl to disk (at step boundaries). Nothing to do before the first call.
    pub fn sync(&self) -> Result<(), ToolError> {
        match &self.file {
            Some(f) => f
                .sync_data()
                .map_err(|e| ToolError::io(self.dir.file_path(TOOLS), e)),
            None => Ok(()),
        }
    }
}

/// `Error: message`, unless the message already says it is an error.
fn error_text(message: &str) -> String {
    let lower = message.trim_start().get(..5).map(str::to_ascii_lowercase);
    if lower.as_deref() == Some("error") {
        message.to_string()
    } else {
        format!("Error: {message}")
    }
}

/// Number of `\n`-terminated lines in `file` and the byte length they cover, reading it once
/// in blocks.
fn count_complete_lines(file: &mut File) -> std::io::Result<(u64, u64)> {
    file.seek(SeekFrom::Start(0))?;
    let mut buf = vec![0u8; 64 * 1024];
    let (mut lines, mut offset, mut complete) = (0u64, 0u64, 0u64);
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        for (i, b) in buf[..n].iter().enumerate() {
            if *b == b'\n' {
                lines += 1;
                complete = offset + i as u64 + 1;
            }
        }
        offset += n as u64;
    }
    Ok((lines, complete))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, arguments: &str) -> ToolCall {
        ToolCall::new(format!("call_{name}"), name, arguments)
    }

    fn read_lines(dir: &std::path::Path) -> Vec<ToolLine> {
        std::fs::read_to_string(dir.join(TOOLS))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn records_success_and_error_lines() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = ToolStore::open(&TaskDir::open(dir.path()).unwrap(), 1000).unwrap();
        assert!(
            !dir.path().join(TOOLS).exists(),
            "created by the first call"
        );
        let ok = j
            .record(
                &call("read", r#"{"path":"a"}"#),
                &CallOutcome::Success("hello".into()),
                Duration::from_millis(7),
            )
            .unwrap();
        let err = j
            .record(
                &call("read", "{bad"),
                &CallOutcome::Error("no such file".into()),
                Duration::ZERO,
            )
            .unwrap();
        assert_eq!(
            (ok.seq, ok.status, ok.content.as_str()),
            (1, ToolStatus::Success, "hello")
        );
        assert_eq!(
            (err.seq, err.status, err.content.as_str()),
            (2, ToolStatus::Error, "Error: no such file")
        );
        let lines = read_lines(dir.path());
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].args["path"], "a");
        assert_eq!(lines[0].tool_call_id.as_deref(), Some("call_read"));
        assert_eq!(lines[0].result.as_deref(), Some("hello"));
        assert_eq!(lines[0].duration_ms, 7);
        assert_eq!(lines[1].args, serde_json::Value::String("{bad".into()));
        assert_eq!(lines[1].error.as_deref(), Some("Error: no such file"));
        assert_eq!(lines[1].result, None);
    }

    #[test]
    fn seq_continues_after_reopen_and_a_torn_line_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = ToolStore::open(&TaskDir::open(dir.path()).unwrap(), 1000).unwrap();
        j.record(
            &call("t", "{}"),
            &CallOutcome::Success("x".into()),
            Duration::ZERO,
        )
        .unwrap();
        drop(j);
        let path = dir.path().join(TOOLS);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(br#"{"seq":2,"tool":"t","ar"#).unwrap();
        drop(f);
        let mut j = ToolStore::open(&TaskDir::open(dir.path()).unwrap(), 1000).unwrap();
        assert_eq!(j.next_seq(), 2);
        j.record(
            &call("t", "{}"),
            &CallOutcome::Success("y".into()),
            Duration::ZERO,
        )
        .unwrap();
        let lines = read_lines(dir.path());
        assert_eq!(lines.iter().map(|l| l.seq).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn long_output_is_cut_and_spilled() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = ToolStore::open(&TaskDir::open(dir.path()).unwrap(), 200).unwrap();
        let text = "ab€".repeat(5000);
        let r = j
            .record(
                &call("big", "{}"),
                &CallOutcome::Success(text.clone()),
                Duration::ZERO,
            )
            .unwrap();
        assert_eq!(r.spilled_to.as_deref(), Some("tool-results/1.txt"));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("tool-results/1.txt")).unwrap(),
            text
        );
        assert!(
            r.content
                .contains("the full output is in tool-results/1.txt"),
            "{}",
            r.content
        );
        assert!(
            ctxhost_format::estimate_tokens(&r.content) <= 200,
            "{}",
            r.content.len()
        );
        assert!(text.starts_with(r.content.split("\n\n[output cut").next().unwrap()));
    }
}
