//! [`HistoryCounts`]: the host's counts of messages.jsonl ([`HistoryStats`]: lines, last seq,
//! agent steps), kept up to a byte offset in `history_checkpoint.json`
//! ([`ctxhost_format::files::HISTORY_CHECKPOINT`]) so a resumed task counts only the lines
//! appended since, not its whole history again.
//!
//! The checkpoint (`{"version":1,"messages":{"bytes":N,"last_line":"…"},"stats":{…}}`) is
//! written when the counts were read from the file (opening), when the task pauses, and at step
//! boundaries once messages.jsonl grew by [`CHECKPOINT_EVERY`] bytes since the last one. It is
//! used only while its [`FileMark`] holds (the file still starts with the counted bytes);
//! otherwise the whole file is read, as without one.

use std::fs::{self, File};
use std::io::{self, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use anyhow::Context;
use ctxhost_format::HistoryLine;
use ctxhost_format::checkpoint::{CHECKPOINT_VERSION, FileMark};
use ctxhost_format::files::{HISTORY_CHECKPOINT, MESSAGES};
use serde::{Deserialize, Serialize};

use crate::layout::atomic_write;
use crate::repair::HistoryStats;

/// Growth of messages.jsonl, bytes, after which a step boundary writes a new checkpoint.
pub const CHECKPOINT_EVERY: u64 = 1024 * 1024;

/// `history_checkpoint.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Checkpoint {
    version: u32,
    messages: FileMark,
    stats: HistoryStats,
}

/// The counts of a task directory's messages.jsonl and the prefix they cover.
#[derive(Debug, Clone)]
pub struct HistoryCounts {
    dir: PathBuf,
    stats: HistoryStats,
    /// The prefix of messages.jsonl `stats` counts.
    mark: FileMark,
    /// The mark of the checkpoint file as last written or read.
    saved: Option<FileMark>,
}

impl HistoryCounts {
    /// The counts of `dir`'s messages.jsonl: from its checkpoint on when it holds, else the
    /// whole file; writes a new checkpoint when lines were read. Errors name the file and line
    /// of a line that does not parse.
    pub fn open(dir: &Path) -> anyhow::Result<HistoryCounts> {
        let saved = read_checkpoint(dir);
        let mut counts = HistoryCounts {
            dir: dir.to_path_buf(),
            stats: HistoryStats::default(),
            mark: FileMark::default(),
            saved: None,
        };
        if let Some(cp) = saved {
            counts.stats = cp.stats;
            counts.mark = cp.messages.clone();
            counts.saved = Some(cp.messages);
        }
        let read = counts.catch_up()?;
        if read {
            counts.save()?;
        }
        Ok(counts)
    }

    /// The counts.
    pub fn stats(&self) -> HistoryStats {
        self.stats
    }

    /// At a step boundary: count the lines appended since, and write the checkpoint when the
    /// file grew by [`CHECKPOINT_EVERY`] bytes since the last one (`force`: whenever it grew).
    pub fn advance(&mut self, force: bool) -> anyhow::Result<()> {
        self.catch_up()?;
        let saved = self.saved.as_ref().map_or(0, |m| m.bytes);
        if self.mark.bytes != saved && (force || self.mark.bytes >= saved + CHECKPOINT_EVERY) {
            self.save()?;
        }
        Ok(())
    }

    /// Count the lines after the mark (all of them when the mark no longer holds) up to the
    /// last whole line; returns whether anything was read.
    fn catch_up(&mut self) -> anyhow::Result<bool> {
        let path = self.dir.join(MESSAGES);
        let mut file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let was = self.mark.bytes > 0;
                self.stats = HistoryStats::default();
                self.mark = FileMark::default();
                return Ok(was);
            }
            Err(e) => return Err(e).with_context(|| format!("cannot open {}", path.display())),
        };
        let shown = path.display().to_string();
        let len = file
            .seek(SeekFrom::End(0))
            .with_context(|| format!("cannot read {shown}"))?;
        if len == self.mark.bytes && self.mark.holds(&mut file, len, &shown)? {
            return Ok(false);
        }
        if self.mark.bytes == 0 || !self.mark.holds(&mut file, len, &shown)? {
            self.stats = HistoryStats::default();
            self.mark = FileMark::default();
        }
        let from = self.mark.bytes;
        file.seek(SeekFrom::Start(from))
            .with_context(|| format!("cannot read {shown}"))?;
        // Whole lines only: a last line without `\n` is being written (or torn) and is left
        // for the next count.
        let mut end = from;
        let mut stats = self.stats;
        let mut reader = BufReader::new(&mut file);
        let mut buf = Vec::new();
        let mut line_no = 0u64;
        loop {
            buf.clear();
            let n = io::BufRead::read_until(&mut reader, b'\n', &mut buf)
                .with_context(|| format!("cannot read {shown}"))?;
            if n == 0 || buf.last() != Some(&b'\n') {
                break;
            }
            line_no += 1;
            end += n as u64;
            if buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let h: HistoryLine = serde_json::from_slice(&buf).map_err(|e| {
                let at = if from > 0 {
                    format!(" (after byte {from})")
                } else {
                    String::new()
                };
                anyhow::anyhow!("{shown}{at} line {line_no}: not valid: {e}")
            })?;
            stats.add(&h);
        }
        let mark = FileMark::of(&mut file, end, &shown)?.unwrap_or_default();
        let read = end != from || self.mark != mark;
        self.stats = stats;
        self.mark = mark;
        Ok(read)
    }

    /// Write the checkpoint (atomically).
    fn save(&mut self) -> anyhow::Result<()> {
        let cp = Checkpoint {
            version: CHECKPOINT_VERSION,
            messages: self.mark.clone(),
            stats: self.stats,
        };
        atomic_write(
            &self.dir.join(HISTORY_CHECKPOINT),
            &serde_json::to_vec(&cp)?,
        )?;
        self.saved = Some(self.mark.clone());
        Ok(())
    }
}

/// The checkpoint of `dir`, if present, readable and of this version.
fn read_checkpoint(dir: &Path) -> Option<Checkpoint> {
    let text = fs::read(dir.join(HISTORY_CHECKPOINT)).ok()?;
    let cp: Checkpoint = serde_json::from_slice(&text).ok()?;
    (cp.version == CHECKPOINT_VERSION).then_some(cp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repair::history_stats;
    use crate::repair::testing::{call, result, sys, write_task};
    use ctxhost_format::ChatMessage;

    fn history() -> Vec<ChatMessage> {
        let mut h = vec![sys(), ChatMessage::text("user", "go")];
        for i in 0..20 {
            h.push(call(&[&format!("c{i}")]));
            h.push(result(&format!("c{i}")));
        }
        h.push(ChatMessage::text("assistant", "done"));
        h
    }

    #[test]
    fn counts_equal_a_full_count_and_later_opens_read_only_what_was_appended() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let h = history();
        write_task(d, &h[..30], &[]);
        let full = |d: &Path| history_stats(&d.join(MESSAGES)).unwrap();
        let counts = HistoryCounts::open(d).unwrap();
        assert_eq!(counts.stats(), full(d));
        assert!(d.join(HISTORY_CHECKPOINT).is_file());
        // More lines, then a line before the checkpoint damaged (same length): an open from
        // the checkpoint never reads it.
        write_task(d, &h, &[]);
        let text = fs::read_to_string(d.join(MESSAGES)).unwrap();
        fs::write(
            d.join(MESSAGES),
            text.replacen("\"seq\":2,", "\"seq\":X,", 1),
        )
        .unwrap();
        let counts = HistoryCounts::open(d).unwrap();
        fs::write(d.join(MESSAGES), &text).unwrap();
        assert_eq!(counts.stats(), full(d));
        assert_eq!(counts.stats().agent_steps, 21);
    }

    #[test]
    fn a_cut_or_rewritten_history_is_counted_again_and_a_torn_last_line_waits() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let h = history();
        write_task(d, &h, &[]);
        let full = |d: &Path| history_stats(&d.join(MESSAGES)).unwrap();
        HistoryCounts::open(d).unwrap();
        write_task(d, &h[..10], &[]);
        assert_eq!(HistoryCounts::open(d).unwrap().stats(), full(d), "cut");
        let mut other = h.clone();
        other[9] = ChatMessage::text("user", "something else entirely");
        write_task(d, &other[..10], &[]);
        assert_eq!(
            HistoryCounts::open(d).unwrap().stats(),
            full(d),
            "rewritten"
        );
        // A last line being written is not counted until it is whole.
        let mut counts = HistoryCounts::open(d).unwrap();
        let before = counts.stats();
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(d.join(MESSAGES))
            .unwrap();
        io::Write::write_all(&mut f, b"{\"seq\":11,\"ro").unwrap();
        counts.advance(true).unwrap();
        assert_eq!(counts.stats(), before);
        fs::remove_file(d.join(MESSAGES)).unwrap();
        counts.advance(true).unwrap();
        assert_eq!(counts.stats(), HistoryStats::default());
    }
}
