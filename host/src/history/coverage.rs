//! [`coverage`]: what a range of messages.jsonl holds that a summary replaces — the tool
//! results it elides (seq, tool, full size, where the full text is) and the file paths it
//! mentions — so summaries.jsonl can say what each summary stands for.

use std::sync::LazyLock;

use serde::{Deserialize, Serialize};

use super::HistoryError;
use super::search::spilled_file;
use crate::task_dir::TaskDir;

/// Most file paths recorded per range (the first ones mentioned).
pub const MAX_PATHS: usize = 50;

/// Longest path recorded, bytes.
const MAX_PATH_BYTES: usize = 200;

/// A path-like word: `a/b`, `./a/b.c`, `/abs/x`, or a file name with a usual extension.
static PATH: LazyLock<Option<regex::Regex>> = LazyLock::new(|| {
    regex::Regex::new(
        r"(?x)
        (?:\.{1,2}/|/)?(?:[A-Za-z0-9_.@-]+/)+[A-Za-z0-9_.@-]+
        | \b[A-Za-z0-9_-]+\.(?:rs|py|js|ts|tsx|jsx|go|java|kt|c|h|cc|cpp|hpp|cs|rb|php|swift|sh|toml|ya?ml|json|jsonl|md|txt|lock|cfg|ini|xml|html|css|sql|log|wit|wasm)\b",
    )
    .ok()
});

/// One tool result of the range (elided by a summary of it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElidedResult {
    /// Its seq in messages.jsonl.
    pub seq: u64,
    /// The tool that produced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Bytes of its full text (the tool-results/ file when the context got it cut).
    pub bytes: u64,
    /// `tool-results/N.txt` when the context got it cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_text: Option<String>,
}

/// What a seq range of the history holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Messages in the range (lines read).
    pub messages: u64,
    /// Its tool results, in seq order.
    pub tool_results: Vec<ElidedResult>,
    /// File paths mentioned in its messages and tool calls, first mention first, each once,
    /// at most [`MAX_PATHS`].
    pub paths: Vec<String>,
}

/// What messages `start..=end` of `dir`'s messages.jsonl hold (module doc). Summaries in the
/// range (an earlier compression's) are not looked into: their own line says what they cover.
/// Errors: an unreadable file or line, naming it.
pub fn coverage(dir: &TaskDir, start: u64, end: u64) -> Result<Coverage, HistoryError> {
    let mut out = Coverage::default();
    let mut spilled: Vec<(usize, String)> = Vec::new();
    super::for_each_line(dir, start, end, |line| {
        out.messages += 1;
        if line.summary_id.is_some() {
            return true;
        }
        let content = line.content.as_deref().unwrap_or("");
        if line.role == "tool" {
            let full_text = spilled_file(content);
            if let Some(f) = &full_text {
                spilled.push((out.tool_results.len(), f.clone()));
            }
            out.tool_results.push(ElidedResult {
                seq: line.seq,
                tool: line.tool_name.clone(),
                bytes: content.len() as u64,
                full_text,
            });
        }
        add_paths(&mut out.paths, content);
        for call in line.tool_calls.iter().flatten() {
            add_paths(&mut out.paths, &call.function.arguments);
        }
        true
    })?;
    // A cut result's full size is its tool-results/ file's.
    for (i, f) in spilled {
        if let Ok(Some(m)) = dir.metadata(&f) {
            out.tool_results[i].bytes = m.len();
        }
    }
    Ok(out)
}

fn add_paths(paths: &mut Vec<String>, text: &str) {
    let Some(re) = PATH.as_ref() else {
        return;
    };
    for m in re.find_iter(text) {
        if paths.len() >= MAX_PATHS {
            return;
        }
        let p = m.as_str().trim_end_matches(['.', ',', ':']);
        // Not a URL's tail, not a bare number or a lone dot name.
        let before = &text[..m.start()];
        if p.len() > MAX_PATH_BYTES
            || before.ends_with(':')
            || before.ends_with(":/")
            || p.starts_with(ctxhost_format::files::TOOL_RESULTS_DIR)
            || !p.chars().any(|c| c.is_ascii_alphabetic())
            || paths.iter().any(|q| q == p)
        {
            continue;
        }
        paths.push(p.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxhost_format::files::MESSAGES;
    use ctxhost_format::{ChatMessage, HistoryLine, ToolCall};

    #[test]
    fn tool_results_and_paths_of_a_range() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        std::fs::create_dir(tmp.path().join("tool-results")).unwrap();
        std::fs::write(tmp.path().join("tool-results/1.txt"), "y".repeat(12_345)).unwrap();
        let call = ToolCall::new("c1", "read_file", r#"{"path":"src/lib.rs"}"#);
        let messages = [
            ChatMessage::text("user", "fix host/src/main.rs, see https://example.com/a/b"),
            ChatMessage::assistant_calls(vec![call.clone()]),
            ChatMessage::tool_result(
                &call,
                "yyy\n\n[output cut: showing 3 of 12345 characters; the full output is in tool-results/1.txt]",
            ),
            ChatMessage::text(
                "assistant",
                "Cargo.toml and ./scripts/run.sh, version 1.2.3",
            ),
            ChatMessage::tool_result(&call, "short"),
        ];
        let text: String = messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                serde_json::to_string(&HistoryLine::of(
                    i as u64 + 1,
                    m,
                    "2026-01-01T00:00:00.000Z",
                ))
                .unwrap()
                    + "\n"
            })
            .collect();
        std::fs::write(tmp.path().join(MESSAGES), text).unwrap();
        let c = coverage(&dir, 1, 4).unwrap();
        assert_eq!(c.messages, 4);
        assert_eq!(
            c.tool_results,
            [ElidedResult {
                seq: 3,
                tool: Some("read_file".into()),
                bytes: 12_345,
                full_text: Some("tool-results/1.txt".into()),
            }]
        );
        assert_eq!(
            c.paths,
            [
                "host/src/main.rs",
                "src/lib.rs",
                "Cargo.toml",
                "./scripts/run.sh"
            ]
        );
        let c = coverage(&dir, 5, 9).unwrap();
        assert_eq!((c.messages, c.tool_results[0].bytes), (1, 5));
    }
}
