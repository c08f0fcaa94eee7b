//! Readers of a task directory's files that repair and `ctxhost fsck` share: which JSONL files
//! it has, and the counts of its history.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use anyhow::Context;
use ctxhost_format::HistoryLine;
use ctxhost_format::files::{PLANNING_DIR, is_temporary};

use crate::invariants::queries::open_lines;

/// The JSONL files of a task directory that are not temporaries: `*.jsonl` at its top level
/// and in `planning/`, sorted by path.
pub fn jsonl_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for sub in [dir.to_path_buf(), dir.join(PLANNING_DIR)] {
        let entries = match fs::read_dir(&sub) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot list {}", sub.display())),
        };
        for entry in entries {
            let entry = entry.with_context(|| format!("cannot list {}", sub.display()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".jsonl") && !is_temporary(&name) && entry.path().is_file() {
                files.push(entry.path());
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Counts of messages.jsonl ([`history_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct HistoryStats {
    /// Non-blank lines.
    pub lines: u64,
    /// Seq of the last line (0 when empty).
    pub last_seq: u64,
    /// Assistant messages that are not summaries: the agent loop's LLM calls that got an answer
    /// (what `agent.max_steps` counts).
    pub agent_steps: u64,
}

/// Stream `path` (messages.jsonl) and count its lines, last seq and agent steps. A missing
/// file is empty. Errors name the file and line of a line that does not parse.
pub fn history_stats(path: &Path) -> anyhow::Result<HistoryStats> {
    let mut stats = HistoryStats::default();
    let Some(mut lines) = open_lines(path)? else {
        return Ok(stats);
    };
    while let Some((_, h)) = lines.next_value::<HistoryLine>()? {
        stats.add(&h);
    }
    Ok(stats)
}

impl HistoryStats {
    /// Count one more history line (the next one of the file).
    pub fn add(&mut self, h: &HistoryLine) {
        self.lines += 1;
        self.last_seq = h.seq;
        if h.role == "assistant" && h.summary_id.is_none() {
            self.agent_steps += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repair::testing::*;
    use ctxhost_format::ChatMessage;
    use ctxhost_format::files::MESSAGES;

    #[test]
    fn history_stats_count_agent_steps_without_summaries() {
        let dir = tempfile::tempdir().unwrap();
        write_task(
            dir.path(),
            &[
                sys(),
                ChatMessage::text("user", "go"),
                call(&["a"]),
                result("a"),
                ChatMessage::text("assistant", "done"),
            ],
            &[],
        );
        let s = history_stats(&dir.path().join(MESSAGES)).unwrap();
        assert_eq!((s.lines, s.last_seq, s.agent_steps), (5, 5, 2));
    }
}
