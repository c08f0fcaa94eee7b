//! The agent loop's seam for tools: [`ToolRunner`] runs one tool call and records it.
//!
//! Until MCP tools are configured the task gets [`NoTools`]: every call is answered with an
//! error result (`error: no such tool "X" (no tools are configured)`), recorded in tools.jsonl
//! with status `error`, so the model learns the tool does not exist and the task goes on.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use ctxhost_format::{ChatMessage, ToolCall, ToolLine, ToolStatus};

/// File name of the tool-call record in the task directory.
pub const TOOLS_FILE: &str = "tools.jsonl";

/// Runs the model's tool calls for the agent loop.
pub trait ToolRunner {
    /// Path (relative to the task directory) of a JSON array of OpenAI tool definitions to
    /// offer in every request, or `None` when no tools are offered.
    fn tools_file(&self) -> Option<String>;

    /// Run `call`, append its line to tools.jsonl, and return the `tool` message answering it
    /// (`tool_call_id` = `call.id`). A failing tool is not an error: its message says what
    /// failed. `Err` only when the task cannot go on (e.g. tools.jsonl cannot be written).
    fn run(&mut self, call: &ToolCall) -> anyhow::Result<ChatMessage>;

    /// fsync tools.jsonl (called at step boundaries, before each LLM call).
    fn sync(&mut self) -> anyhow::Result<()>;
}

/// The tool runner of a task without tools: every call gets a "no such tool" error result.
pub struct NoTools {
    path: PathBuf,
    /// Opened on the first call, so a task without tool calls has no tools.jsonl.
    file: Option<File>,
    next_seq: u64,
}

impl NoTools {
    /// For `task_dir/tools.jsonl` (created on the first call); seq continues after its lines.
    pub fn open(task_dir: &Path) -> anyhow::Result<NoTools> {
        let path = task_dir.join(TOOLS_FILE);
        let lines = match File::open(&path) {
            Ok(f) => {
                let mut n = 0u64;
                for line in BufReader::new(f).lines() {
                    let line = line.with_context(|| format!("cannot read {}", path.display()))?;
                    if !line.trim().is_empty() {
                        n += 1;
                    }
                }
                n
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e).with_context(|| format!("cannot open {}", path.display())),
        };
        Ok(NoTools {
            path,
            file: None,
            next_seq: lines + 1,
        })
    }
}

/// The result text given to the model for a call of an unknown tool.
pub fn no_such_tool_text(name: &str) -> String {
    format!("error: no such tool {name:?} (no tools are configured)")
}

impl ToolRunner for NoTools {
    fn tools_file(&self) -> Option<String> {
        None
    }

    fn run(&mut self, call: &ToolCall) -> anyhow::Result<ChatMessage> {
        let name = &call.function.name;
        let text = no_such_tool_text(name);
        let line = ToolLine {
            seq: self.next_seq,
            tool: name.clone(),
            tool_call_id: Some(call.id.clone()),
            args: serde_json::from_str(&call.function.arguments)
                .unwrap_or_else(|_| serde_json::Value::String(call.function.arguments.clone())),
            result: None,
            status: ToolStatus::Error,
            error: Some(text.clone()),
            duration_ms: 0,
            timestamp: crate::db::now_rfc3339(),
        };
        let mut bytes = serde_json::to_vec(&line).context("serialize a tools.jsonl line")?;
        bytes.push(b'\n');
        if self.file.is_none() {
            let f = OpenOptions::new()
                .append(true)
                .create(true)
                .open(&self.path)
                .with_context(|| format!("cannot open {} for appending", self.path.display()))?;
            self.file = Some(f);
        }
        let file = self.file.as_mut().expect("opened above");
        file.write_all(&bytes)
            .with_context(|| format!("cannot append to {}", self.path.display()))?;
        self.next_seq += 1;
        Ok(ChatMessage::tool_result(call, text))
    }

    fn sync(&mut self) -> anyhow::Result<()> {
        match &self.file {
            Some(f) => f
                .sync_data()
                .with_context(|| format!("cannot fsync {}", self.path.display())),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_tools_answers_and_records_each_call() {
        let dir = tempfile::tempdir().unwrap();
        let mut tools = NoTools::open(dir.path()).unwrap();
        let m = tools
            .run(&ToolCall::new("call_1", "read_file", r#"{"path":"a"}"#))
            .unwrap();
        assert_eq!(m.role, "tool");
        assert_eq!(m.tool_call_id.as_deref(), Some("call_1"));
        assert_eq!(
            m.content.as_deref(),
            Some(r#"error: no such tool "read_file" (no tools are configured)"#)
        );
        tools
            .run(&ToolCall::new("call_2", "x", "not json"))
            .unwrap();
        drop(tools);
        let mut again = NoTools::open(dir.path()).unwrap();
        again.run(&ToolCall::new("call_3", "y", "{}")).unwrap();
        let text = std::fs::read_to_string(dir.path().join(TOOLS_FILE)).unwrap();
        let lines: Vec<ToolLine> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.iter().map(|l| l.seq).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(lines[0].args, serde_json::json!({"path": "a"}));
        assert_eq!(lines[1].args, serde_json::Value::String("not json".into()));
        assert!(lines.iter().all(|l| l.status == ToolStatus::Error));
    }
}
