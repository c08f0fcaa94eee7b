//! The counts of a task's history (messages.jsonl) by one full read: [`HistoryStats`], which
//! the host also keeps incrementally ([`crate::task::history_counts`], whose checkpoint stores
//! them) and which repair and the tests compare with. Below both: it reads the file only.

use ctxhost_format::HistoryLine;

use crate::invariants::queries::open_lines;
use crate::task_dir::TaskDir;

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
    /// The last line is a summary (a compression's last write before it installs the new
    /// context; nothing was appended after it).
    pub ends_with_summary: bool,
}

/// Stream the history file `name` (messages.jsonl) of `dir` and count its lines, last seq
/// and agent steps. A missing file is empty. Errors name the file and line of a line that
/// does not parse. A full read: the host keeps these counts incrementally
/// ([`crate::task::HistoryCounts::stats`]); this is the reference the tests (unit,
/// `tests/all/lifecycle.rs`, `tests/all/security.rs`) compare them with, hence public.
pub fn history_stats(dir: &TaskDir, name: &str) -> anyhow::Result<HistoryStats> {
    let mut stats = HistoryStats::default();
    let Some(mut lines) = open_lines(dir, name)? else {
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
        self.add_parts(h.seq, &h.role, h.summary_id);
    }

    /// [`HistoryStats::add`] from the fields it reads: the line's `seq`, `role` and
    /// `summary_id`.
    pub fn add_parts(&mut self, seq: u64, role: &str, summary_id: Option<u64>) {
        self.lines += 1;
        self.last_seq = seq;
        self.ends_with_summary = summary_id.is_some();
        if role == "assistant" && summary_id.is_none() {
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
        let s = history_stats(&TaskDir::open(dir.path()).unwrap(), MESSAGES).unwrap();
        assert_eq!((s.lines, s.last_seq, s.agent_steps), (5, 5, 2));
    }
}
