//! What every suite uses: the results collector ([`Suite`]), a scratch task directory removed on
//! drop ([`Scratch`]), JSONL readers and writers, and sample messages.

use std::fmt::Display;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use ctxhost_format::{ChatMessage, ToolCall};

use super::report::{Check, Status};
use crate::runtime::RuntimeError;

/// Collects check results. Details never name the scratch directory: its path (gone after
/// the check unless `--keep` was given) is cut from them, leaving paths relative to it such as
/// `compress/compressed.jsonl line 3` (and `--keep DIR` keeps them under DIR).
pub(super) struct Suite {
    pub(super) checks: Vec<Check>,
    /// The scratch directory's path with a trailing `/`, cut from details.
    pub(super) root: Option<String>,
}

pub(super) type Outcome = Result<String, String>;

/// A check that did not fail: passed, passed with a warning, or did not apply.
pub(super) enum Note {
    Pass(String),
    Warn(String),
    Skip(String),
}

impl Suite {
    pub(super) fn new(root: Option<&Path>) -> Suite {
        Suite {
            checks: Vec::new(),
            root: root.map(|r| format!("{}/", r.display())),
        }
    }

    pub(super) fn record(&mut self, name: &str, outcome: Outcome) {
        self.record_note(name, outcome.map(Note::Pass));
    }

    pub(super) fn record_note(&mut self, name: &str, outcome: Result<Note, String>) {
        let (status, detail) = match outcome {
            Ok(Note::Pass(d)) => (Status::Pass, d),
            Ok(Note::Warn(d)) => (Status::Warn, d),
            Ok(Note::Skip(d)) => (Status::Skip, d),
            Err(d) => (Status::Fail, d),
        };
        let detail = match &self.root {
            Some(root) => detail.replace(root.as_str(), ""),
            None => detail,
        };
        self.checks.push(Check {
            name: name.to_string(),
            passed: status != Status::Fail,
            status,
            detail,
        });
    }
}

pub(super) fn e(err: impl Display) -> String {
    err.to_string()
}

/// The directory the checks' task directories go in: under the system temp dir and removed on
/// drop, or the `--keep` directory, which stays.
pub(super) struct Scratch {
    path: PathBuf,
    keep: bool,
}

impl Scratch {
    pub(super) fn new(what: &str) -> std::io::Result<Scratch> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let path =
            std::env::temp_dir().join(format!("ctxhost-{what}-{}-{nanos}", std::process::id()));
        fs::create_dir(&path)?;
        Ok(Scratch { path, keep: false })
    }

    /// `dir` (created with its parents; it must be empty if it exists), kept after the check.
    pub(super) fn kept(dir: &Path) -> Result<Scratch, String> {
        if dir.exists() {
            let empty = fs::read_dir(dir)
                .map(|mut d| d.next().is_none())
                .map_err(|err| format!("--keep {}: {err}", dir.display()))?;
            if !empty {
                return Err(format!(
                    "--keep {}: the directory is not empty; give a new or empty one",
                    dir.display()
                ));
            }
        }
        fs::create_dir_all(dir).map_err(|err| format!("--keep {}: {err}", dir.display()))?;
        let path = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        Ok(Scratch { path, keep: true })
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// A new, empty task directory `name` inside.
    pub(super) fn task(&self, name: &str) -> Result<PathBuf, String> {
        let dir = self.path.join(name);
        fs::create_dir(&dir).map_err(|err| format!("creating {}: {err}", dir.display()))?;
        Ok(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.keep {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Shared helpers

/// Characters of a line that does not parse quoted in [`read_lines`]'s error (a component's or
/// a `--context` file's line may be megabytes long).
const QUOTED_LINE_CHARS: usize = 200;

/// Every non-blank line of `path` parsed as `T`, naming file and line on error (quoting the
/// line's first [`QUOTED_LINE_CHARS`] characters).
pub(super) fn read_lines<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>, String> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let file = fs::File::open(path).map_err(|err| format!("{name}: {err}"))?;
    parse_lines(&name, BufReader::new(file))
}

/// Every non-blank line of `reader` parsed as `T`, naming `name` and the line on error (as
/// [`read_lines`]).
pub(super) fn parse_lines<T: serde::de::DeserializeOwned>(
    name: &str,
    reader: impl BufRead,
) -> Result<Vec<T>, String> {
    let mut out = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|err| format!("{name} line {}: {err}", i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(serde_json::from_str(&line).map_err(|err| {
            let quoted = ctxhost_format::body::snippet(line.as_bytes(), QUOTED_LINE_CHARS);
            format!("{name} line {}: {err}: {quoted}", i + 1)
        })?);
    }
    Ok(out)
}

pub(super) fn write_lines<T: serde::Serialize>(path: &Path, items: &[T]) -> Result<(), String> {
    let mut text = String::new();
    for item in items {
        text.push_str(&serde_json::to_string(item).map_err(e)?);
        text.push('\n');
    }
    fs::write(path, text).map_err(|err| format!("writing {}: {err}", path.display()))
}

/// `m` with `tool_calls: Some(vec![])` read as `None`, for comparisons.
pub(super) fn normalized(m: &ChatMessage) -> ChatMessage {
    let mut m = m.clone();
    if m.tool_calls.as_ref().is_some_and(|c| c.is_empty()) {
        m.tool_calls = None;
    }
    m
}

pub(super) fn tool_call_message(id: &str, name: &str, arguments: &str) -> ChatMessage {
    ChatMessage {
        role: "assistant".into(),
        content: None,
        tool_calls: Some(vec![ToolCall::new(id, name, arguments)]),
        ..Default::default()
    }
}

pub(super) fn tool_result(id: &str, name: &str, content: &str) -> ChatMessage {
    ChatMessage {
        role: "tool".into(),
        content: Some(content.into()),
        tool_call_id: Some(id.into()),
        tool_name: Some(name.into()),
        ..Default::default()
    }
}

pub(super) fn is_plugin_error(err: &RuntimeError) -> bool {
    matches!(err, RuntimeError::Plugin { .. })
}

pub(super) fn names_line(message: &str, line: u64) -> bool {
    message.contains(&format!("line {line}")) || message.contains(&format!(":{line}"))
}

// ---------------------------------------------------------------------------------------------
// Message store

pub(super) const CJK_TEXT: &str =
    "请总结上下文压缩的设计。\"quoted\" back\\slash\nnew line 😀 — こんにちは";

/// The messages the store suite adds. The tool call carries two reasoning items (a signed
/// Anthropic `thinking` block, an OpenAI-compatible `reasoning_content`) and its result is a
/// failed call's (`is_error`): both must come back byte for byte in messages.jsonl and
/// current.jsonl.
pub(super) fn sample_messages() -> Vec<ChatMessage> {
    let mut call = tool_call_message("call_1", "read_text_file", r#"{"path":"src/main.rs"}"#);
    let mut result = tool_result(
        "call_1",
        "read_text_file",
        "fn main() {\n    println!(\"hi\");\n}\n",
    );
    call.reasoning = vec![
        ctxhost_format::ReasoningItem {
            provider: "anthropic".into(),
            kind: "thinking".into(),
            data: r#"{"type":"thinking","thinking":"Read main.rs — 先に。","signature":"EqQBCkgIARABGAIiQL+/s="}"#.into(),
        },
        ctxhost_format::ReasoningItem {
            provider: "openai-chat".into(),
            kind: "reasoning_content".into(),
            data: r#""Then answer.\n""#.into(),
        },
    ];
    result.is_error = true;
    vec![ChatMessage::text("user", CJK_TEXT), call, result]
}

pub(super) const TIMESTAMPS: [&str; 3] = [
    "2026-01-02T03:04:05Z",
    "2026-01-02T03:04:06Z",
    "2026-01-02T03:04:07Z",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_line_is_quoted_only_in_part() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("current.jsonl");
        let long = format!(
            "{{\"role\":\"user\",\"content\":\"{}\"}} trailing",
            "a".repeat(1 << 20)
        );
        fs::write(
            &path,
            format!("{{\"role\":\"system\",\"content\":\"s\"}}\n{long}\n"),
        )
        .unwrap();
        let err = read_lines::<ChatMessage>(&path).unwrap_err();
        assert!(
            err.starts_with("current.jsonl line 2: trailing characters"),
            "{err}"
        );
        assert!(
            err.contains("{\"role\":\"user\",\"content\":\"aaa"),
            "{err}"
        );
        assert!(
            err.ends_with("..."),
            "the quote is cut: {}",
            &err[err.len() - 20..]
        );
        assert!(err.len() < 400, "{} bytes", err.len());
    }
}
