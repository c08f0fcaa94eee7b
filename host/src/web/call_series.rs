//! The context chart's data: a constant-size summary of a task's `llm_calls.jsonl`, read
//! incrementally and cached per task, so the chart of a task with 30,000 LLM calls costs what
//! the chart of a task with 30 does once it has been read, and a running task's chart only
//! reads the lines appended since the last look.
//!
//! [`CallSeries`] keeps at most `2 ×` [`MAX_GROUPS`] groups of consecutive calls (a group holds
//! the maximum context of its calls: peaks before a compression are never averaged away); when
//! full, neighbours merge and groups double in size. Up to [`MAX_MARKERS`] compressions are kept
//! for markers; beyond that they are only counted. [`ChartCache`] holds the series of the
//! [`CACHE_ENTRIES`] most recently viewed tasks, keyed by UUID and checked against the file's
//! identity (device, inode) and length: a replaced or shortened file is read again.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::sync::Mutex;

use ctxhost_format::CallStatus;
use serde::Deserialize;

/// Groups kept after a merge (the chart draws at most twice this many line vertices).
pub const MAX_GROUPS: usize = 750;
/// Compressions kept for markers.
pub const MAX_MARKERS: usize = 200;
/// Tasks whose series are cached.
pub const CACHE_ENTRIES: usize = 32;

/// Consecutive LLM calls drawn as one vertex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Index (0-based, in file order) of its first call.
    pub first: u64,
    /// Calls in it.
    pub count: u64,
    /// The largest context of its calls, tokens.
    pub max_tokens: u64,
    /// `n` (the task's step number) of its first call.
    pub first_n: u64,
    /// How many of its calls failed.
    pub errors: u64,
}

/// A compression, placed after `after_calls` calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compression {
    pub after_calls: u64,
    pub before_tokens: u64,
    pub after_tokens: u64,
    pub summary_id: Option<u64>,
}

/// The summary of a task's llm_calls.jsonl.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallSeries {
    /// Consecutive groups covering calls `0..calls`.
    pub groups: Vec<Group>,
    /// Calls per group (a power of two; 1 while every call is its own group).
    pub group_size: u64,
    /// Agent-loop calls read.
    pub calls: u64,
    /// Compressions kept for markers (empty once there were more than [`MAX_MARKERS`]).
    pub compressions: Vec<Compression>,
    /// All compressions read.
    pub compressions_total: u64,
    /// Compressor requests read (listed, not drawn: they do not send the context).
    pub summary_calls: u64,
    /// Lines that did not parse.
    pub unreadable: u64,
    /// The compression threshold of the last call that had one, tokens.
    pub threshold: Option<u64>,
    /// The context window of the last call, tokens.
    pub window: Option<u64>,
    /// The largest context seen (calls, and compressions' "before"), tokens.
    pub max_tokens: u64,
    /// Bytes of the file read (complete lines only).
    offset: u64,
}

/// What the reader takes from a line (the other fields of `ctxhost_format::CallLogLine` are
/// ignored; a projection is faster to parse than the tagged enum).
#[derive(Deserialize)]
struct Line {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    n: u64,
    #[serde(default)]
    context_tokens: u64,
    #[serde(default)]
    context_length: Option<u64>,
    #[serde(default)]
    threshold_tokens: Option<u64>,
    #[serde(default)]
    status: Option<CallStatus>,
    #[serde(default)]
    before_tokens: u64,
    #[serde(default)]
    after_tokens: u64,
    #[serde(default)]
    summary_id: Option<u64>,
}

impl CallSeries {
    /// An empty series.
    pub fn new() -> CallSeries {
        CallSeries {
            group_size: 1,
            ..Default::default()
        }
    }

    /// Whether every call is its own group (the chart can draw each call).
    pub fn exact(&self) -> bool {
        self.group_size == 1
    }

    /// Add one call.
    pub fn push_call(&mut self, n: u64, context_tokens: u64, ok: bool) {
        self.max_tokens = self.max_tokens.max(context_tokens);
        let errors = u64::from(!ok);
        match self.groups.last_mut() {
            Some(g) if g.count < self.group_size => {
                g.count += 1;
                g.max_tokens = g.max_tokens.max(context_tokens);
                g.errors += errors;
            }
            _ => {
                if self.groups.len() >= 2 * MAX_GROUPS {
                    self.merge();
                    return self.push_call_after_merge(n, context_tokens, errors);
                }
                self.groups.push(Group {
                    first: self.calls,
                    count: 1,
                    max_tokens: context_tokens,
                    first_n: n,
                    errors,
                });
            }
        }
        self.calls += 1;
    }

    fn push_call_after_merge(&mut self, n: u64, context_tokens: u64, errors: u64) {
        // After a merge every group is full (2 × the old size), so the call starts a new one.
        self.groups.push(Group {
            first: self.calls,
            count: 1,
            max_tokens: context_tokens,
            first_n: n,
            errors,
        });
        self.calls += 1;
    }

    /// Halve the number of groups by merging neighbours.
    fn merge(&mut self) {
        let merged = self
            .groups
            .chunks(2)
            .map(|pair| Group {
                first: pair[0].first,
                count: pair.iter().map(|g| g.count).sum(),
                max_tokens: pair.iter().map(|g| g.max_tokens).max().unwrap_or(0),
                first_n: pair[0].first_n,
                errors: pair.iter().map(|g| g.errors).sum(),
            })
            .collect();
        self.groups = merged;
        self.group_size *= 2;
    }

    /// Add one compression (after the calls read so far).
    pub fn push_compression(&mut self, before: u64, after: u64, summary_id: Option<u64>) {
        self.max_tokens = self.max_tokens.max(before);
        self.compressions_total += 1;
        if self.compressions_total as usize > MAX_MARKERS {
            self.compressions.clear();
        } else {
            self.compressions.push(Compression {
                after_calls: self.calls,
                before_tokens: before,
                after_tokens: after,
                summary_id,
            });
        }
    }

    /// Whether the compressions are all kept (false: too many to mark).
    pub fn markers_complete(&self) -> bool {
        self.compressions_total as usize <= MAX_MARKERS
    }

    fn push_line(&mut self, bytes: &[u8]) {
        let Ok(line) = serde_json::from_slice::<Line>(bytes) else {
            self.unreadable += 1;
            return;
        };
        match line.kind.as_str() {
            "call" => {
                self.threshold = line.threshold_tokens.or(self.threshold);
                self.window = line.context_length.or(self.window);
                self.push_call(
                    line.n,
                    line.context_tokens,
                    line.status != Some(CallStatus::Error),
                );
            }
            "summary_call" => self.summary_calls += 1,
            "compression" => {
                self.push_compression(line.before_tokens, line.after_tokens, line.summary_id)
            }
            _ => self.unreadable += 1,
        }
    }

    /// Read the complete lines of `file` after what was read already, up to `len` bytes. A
    /// last line without its `\n` (being written) is left for the next read.
    pub fn read_more(&mut self, file: &mut File, len: u64) -> io::Result<()> {
        if len <= self.offset {
            return Ok(());
        }
        file.seek(SeekFrom::Start(self.offset))?;
        let mut r = BufReader::with_capacity(64 * 1024, file);
        let mut buf = Vec::new();
        while self.offset < len {
            buf.clear();
            let n = r.read_until(b'\n', &mut buf)?;
            if n == 0 || buf.last() != Some(&b'\n') {
                break;
            }
            self.offset += n as u64;
            if !buf.trim_ascii().is_empty() {
                self.push_line(&buf);
            }
        }
        Ok(())
    }
}

struct Entry {
    dev: u64,
    ino: u64,
    series: CallSeries,
    used: u64,
}

/// The series of recently viewed tasks.
#[derive(Default)]
pub struct ChartCache {
    entries: Mutex<(HashMap<String, Entry>, u64)>,
}

impl ChartCache {
    /// The series of `file` (the task `uuid`'s llm_calls.jsonl), reading only what was appended
    /// since the last call when the cached one is for the same file.
    pub fn series(&self, uuid: &str, file: &mut File) -> io::Result<CallSeries> {
        let meta = file.metadata()?;
        let (dev, ino, len) = (meta.dev(), meta.ino(), meta.len());
        let cached = {
            let mut guard = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            guard
                .0
                .remove(uuid)
                .filter(|e| e.dev == dev && e.ino == ino && e.series.offset <= len)
        };
        let mut series = cached.map_or_else(CallSeries::new, |e| e.series);
        series.read_more(file, len)?;
        let mut guard = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let (map, clock) = &mut *guard;
        *clock += 1;
        if map.len() >= CACHE_ENTRIES
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
        map.insert(
            uuid.to_string(),
            Entry {
                dev,
                ino,
                series: series.clone(),
                used: *clock,
            },
        );
        Ok(series)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn groups_merge_and_keep_the_peaks() {
        let mut s = CallSeries::new();
        for i in 0..10_000u64 {
            // A sawtooth: peak 1000 every 100 calls.
            s.push_call(i + 1, if i % 100 == 99 { 1000 } else { i % 100 }, i != 5);
        }
        assert_eq!(s.calls, 10_000);
        assert!(!s.exact());
        assert!(s.groups.len() <= 2 * MAX_GROUPS);
        assert_eq!(s.groups.iter().map(|g| g.count).sum::<u64>(), 10_000);
        assert_eq!(s.groups.iter().map(|g| g.errors).sum::<u64>(), 1);
        // Groups are consecutive.
        for w in s.groups.windows(2) {
            assert_eq!(w[0].first + w[0].count, w[1].first);
        }
        // Every group of at least 100 calls holds a peak.
        assert!(
            s.groups
                .iter()
                .filter(|g| g.count >= 100)
                .all(|g| g.max_tokens == 1000)
        );
        assert_eq!(s.max_tokens, 1000);
    }

    #[test]
    fn many_compressions_are_counted_not_kept() {
        let mut s = CallSeries::new();
        for i in 0..(MAX_MARKERS as u64 + 5) {
            s.push_call(i + 1, 10, true);
            s.push_compression(20, 5, Some(i + 1));
        }
        assert!(!s.markers_complete());
        assert!(s.compressions.is_empty());
        assert_eq!(s.compressions_total, MAX_MARKERS as u64 + 5);
    }

    #[test]
    fn the_cache_reads_only_appended_lines_and_notices_a_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("llm_calls.jsonl");
        let call = |n: u64| {
            format!(
                "{{\"type\":\"call\",\"n\":{n},\"timestamp\":\"t\",\"context_tokens\":{},\"context_length\":100,\"threshold_tokens\":70,\"duration_ms\":1,\"status\":\"ok\"}}\n",
                n * 10
            )
        };
        std::fs::write(&p, call(1) + &call(2)).unwrap();
        let cache = ChartCache::default();
        let s = cache.series("t", &mut File::open(&p).unwrap()).unwrap();
        assert_eq!((s.calls, s.threshold, s.window), (2, Some(70), Some(100)));
        // Appended: a compression, a call, a summary request, a torn line.
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        write!(f, "{{\"type\":\"compression\",\"timestamp\":\"t\",\"before_tokens\":90,\"after_tokens\":30,\"summary_id\":1}}\n{}{{\"type\":\"summary_call\",\"timestamp\":\"t\",\"input_tokens\":5,\"duration_ms\":1,\"status\":\"ok\"}}\n{{\"type\":\"ca", call(3)).unwrap();
        let s = cache.series("t", &mut File::open(&p).unwrap()).unwrap();
        assert_eq!(
            (s.calls, s.compressions_total, s.summary_calls, s.unreadable),
            (3, 1, 1, 0)
        );
        assert_eq!(s.compressions[0].after_calls, 2);
        assert_eq!(s.max_tokens, 90);
        // The torn line is read once it is complete.
        writeln!(f, "ll\",\"n\":4,\"context_tokens\":5}}").unwrap();
        let s = cache.series("t", &mut File::open(&p).unwrap()).unwrap();
        assert_eq!(s.calls, 4);
        // A replaced file (new inode) is read from the start.
        let q = dir.path().join("new.jsonl");
        std::fs::write(&q, call(1)).unwrap();
        std::fs::rename(&q, &p).unwrap();
        let s = cache.series("t", &mut File::open(&p).unwrap()).unwrap();
        assert_eq!(s.calls, 1);
        // Garbage lines are counted.
        std::fs::write(&p, "not json\n{\"type\":\"other\"}\n").unwrap();
        let s = cache.series("u", &mut File::open(&p).unwrap()).unwrap();
        assert_eq!((s.calls, s.unreadable), (0, 2));
    }

    #[test]
    fn the_cache_keeps_a_bounded_number_of_tasks() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.jsonl");
        std::fs::write(&p, "").unwrap();
        let cache = ChartCache::default();
        for i in 0..(CACHE_ENTRIES + 10) {
            cache
                .series(&format!("t{i}"), &mut File::open(&p).unwrap())
                .unwrap();
        }
        assert_eq!(cache.entries.lock().unwrap().0.len(), CACHE_ENTRIES);
    }
}
