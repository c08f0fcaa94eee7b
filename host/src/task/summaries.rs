//! [`SummaryStore`]: typed, streaming reader of a task's `summaries.jsonl` (written by the
//! compressor component, one [`SummaryLine`] per compression).

use std::io::BufReader;
use std::path::PathBuf;

use anyhow::Context;
use ctxhost_format::SummaryLine;
use ctxhost_format::files::SUMMARIES;
use ctxhost_format::jsonl::LineReader;

use crate::task_dir::TaskDir;

/// The summaries of one task (read only: the compressor owns the file).
#[derive(Debug, Clone)]
pub struct SummaryStore {
    dir: TaskDir,
}

impl SummaryStore {
    /// The store of the task directory `dir` (the file may not exist yet: no summary).
    pub fn new(dir: &TaskDir) -> SummaryStore {
        SummaryStore { dir: dir.clone() }
    }

    /// Path of summaries.jsonl, for messages.
    pub fn path(&self) -> PathBuf {
        self.dir.file_path(SUMMARIES)
    }

    /// Number of summaries (lines). Errors name the file and the line that does not parse.
    pub fn count(&self) -> anyhow::Result<u64> {
        let mut n = 0;
        self.for_each(|_| n += 1)?;
        Ok(n)
    }

    /// The most recent summary, if any (streams the file; one line in memory).
    pub fn latest(&self) -> anyhow::Result<Option<SummaryLine>> {
        let mut last = None;
        self.for_each(|s| last = Some(s))?;
        Ok(last)
    }

    fn for_each(&self, mut f: impl FnMut(SummaryLine)) -> anyhow::Result<()> {
        let file = match self.dir.open_read_if_exists(SUMMARIES) {
            Ok(Some(file)) => file,
            Ok(None) => return Ok(()),
            Err(e) => {
                return Err(e).with_context(|| format!("cannot open {}", self.dir.show(SUMMARIES)));
            }
        };
        let mut lines = LineReader::new(BufReader::new(file), self.dir.show(SUMMARIES));
        while let Some((_, s)) = lines.next_value::<SummaryLine>()? {
            f(s);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_finds_the_latest_summary() {
        let dir = tempfile::tempdir().unwrap();
        let store = SummaryStore::new(&TaskDir::open(dir.path()).unwrap());
        assert_eq!(store.count().unwrap(), 0);
        assert_eq!(store.latest().unwrap(), None);
        let line = |id: u64, end: u64| {
            serde_json::json!({"id": id, "start_seq": 2, "end_seq": end, "summary": "s",
                "original_tokens": 100, "summary_tokens": 10, "ratio": 0.1,
                "timestamp": "2025-01-01T00:00:00.000Z"})
            .to_string()
        };
        std::fs::write(store.path(), format!("{}\n{}\n", line(1, 5), line(2, 9))).unwrap();
        assert_eq!(store.count().unwrap(), 2);
        assert_eq!(store.latest().unwrap().unwrap().end_seq, 9);
        std::fs::write(store.path(), "{\"id\":").unwrap();
        let e = format!("{:#}", store.count().unwrap_err());
        assert!(e.contains("summaries.jsonl"), "{e}");
    }
}
