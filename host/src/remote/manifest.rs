//! The per-task manifest (`PREFIX/tasks/{uuid}/manifest.json`) and the object keys it names.
//!
//! The manifest is the commit point of a sync: segments and blobs go up first, the manifest
//! last, so what it names always exists. It is written with a conditional PUT (`If-Match` on
//! the ETag read or written last, `If-None-Match: *` for the first), and carries the fence:
//! `epoch` goes up by one at every claim of the task, so a host that lost its lease finds its
//! late write refused (`412`) and, reading the manifest again, a newer epoch than its own.
//!
//! ```text
//! PREFIX/tasks/{uuid}/manifest.json
//! PREFIX/tasks/{uuid}/seg/{file}/{epoch}-{version}-{start}   bytes [start, start+len) of an append-only file
//! PREFIX/tasks/{uuid}/idx/{file}/{sha256}                    a sealed list of segments (or of indexes)
//! PREFIX/tasks/{uuid}/blob/{sha256}                          the whole content of a replaced file
//! ```
//!
//! **Formats.** Format 1 lists every segment of an append-only file in the manifest, so the
//! manifest grows with the task. Format 2 keeps it small: every [`SEAL`] segments of a file are
//! sealed into an immutable index object ([`Index`], `idx/`, named by its SHA-256), every
//! [`SEAL`] indexes of one level into an index of the next level, and the manifest lists only
//! the indexes ([`IndexRef`]) and the open segments — at most `SEAL - 1` entries per level and
//! file (a few KB after 1,000 steps). A manifest is written as format 1 while no file has an
//! index (hosts that read only format 1 can still read it), as format 2 from then on; both are
//! read.

use std::collections::BTreeMap;

use ctxhost_format::files::{
    CURRENT, LLM_CALLS, MESSAGES, PLANNING_DIR, REPLY_STREAM, SUMMARIES, TOOLS,
};
use serde::{Deserialize, Serialize};

/// The newest `format` of the manifests this host writes and reads (it reads 1 too).
pub const MANIFEST_FORMAT: u32 = 2;

/// Entries of one level sealed into an index object of the next: segments into a level-1
/// index, level-1 indexes into a level-2 one, and so on.
pub const SEAL: usize = 8;

/// Name of the manifest object under a task's prefix.
pub const MANIFEST: &str = "manifest.json";

/// Most bytes a manifest may have when read (a larger one is refused, not parsed).
pub const MAX_MANIFEST_BYTES: u64 = 64 * 1024 * 1024;

/// Bytes at the end of an append-only file's synced part whose hash is kept
/// ([`FileEntry::Appended::tail_sha256`]): the next sync checks them before it uploads only
/// what follows.
pub const TAIL_BYTES: u64 = 4096;

/// One task directory as synced: every regular file, by its name relative to the directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`].
    pub format: u32,
    /// The task.
    pub uuid: String,
    /// Goes up by one at every write of the manifest.
    pub version: u64,
    /// The fence: goes up by one at every claim of the task (the claimer's first write).
    pub epoch: u64,
    /// Who holds the epoch: the worker id and task process of the claim (`worker:pid`).
    pub holder: String,
    /// When this version was written (RFC 3339, the writer's clock; informational).
    pub written_at: String,
    /// The files, by relative name (`messages.jsonl`, `planning/{uuid}.jsonl`, `tool-results/3.txt`).
    pub files: BTreeMap<String, FileEntry>,
}

/// How one file is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum FileEntry {
    /// An append-only file ([`is_append_only`]): its bytes are those of the indexes' segments,
    /// then of the open segments, in order.
    Appended {
        /// Bytes synced (the sum of the indexes' and segments' lengths).
        size: u64,
        /// SHA-256 (hex) of the last [`TAIL_BYTES`] (or fewer) bytes before `size`.
        tail_sha256: String,
        /// The sealed parts (format 2), contiguous from offset 0, levels never going up.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        indexes: Vec<IndexRef>,
        /// The open segments, contiguous from the end of the indexes (fewer than [`SEAL`] once
        /// synced by a host writing format 2).
        segments: Vec<Segment>,
        /// For a file that grows by appends but is replaced now and then (current.jsonl,
        /// [`Kind::Growing`]): the writer's local identity of it (`device:inode`); another
        /// identity means it was replaced, and it goes up again from offset 0.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file_id: Option<String>,
    },
    /// A file replaced as a whole: one blob named by its content's hash.
    Whole {
        /// Bytes.
        size: u64,
        /// SHA-256 (hex) of the content; the blob's key is `blob/{sha256}`.
        sha256: String,
        /// The local modification time seen when it was hashed (ns since the Unix epoch): a
        /// file of the same size and time is not hashed again by the host that wrote it.
        mtime_ns: i64,
    },
}

/// An immutable object holding bytes `[start, start + len)` of an append-only file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Segment {
    /// Its key relative to the task's prefix (`seg/...`).
    pub key: String,
    /// Offset of its first byte in the file.
    pub start: u64,
    /// Bytes.
    pub len: u64,
    /// SHA-256 (hex) of its bytes, checked when downloaded.
    pub sha256: String,
}

/// An index object of the manifest (or of an index of the level above): it covers bytes
/// `[start, start + len)` of its file. Its key is `idx/{file}/{sha256}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexRef {
    /// 1: it lists segments; `n > 1`: indexes of level `n - 1`.
    pub level: u32,
    /// Offset of its first byte in the file.
    pub start: u64,
    /// Bytes of the file it covers.
    pub len: u64,
    /// Bytes of the index object itself.
    pub bytes: u64,
    /// SHA-256 (hex) of the index object, checked when it is read; also its name.
    pub sha256: String,
}

/// The content of an index object (compact JSON, written once, never changed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Index {
    /// The file it belongs to.
    pub file: String,
    /// Its level ([`IndexRef::level`]).
    pub level: u32,
    /// Offset of its first byte in the file.
    pub start: u64,
    /// Bytes covered.
    pub len: u64,
    /// Level 1: the segments, contiguous from `start`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub segments: Vec<Segment>,
    /// Level > 1: the indexes of the level below, contiguous from `start`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub indexes: Vec<IndexRef>,
}

impl Index {
    /// Parse the index object `r` of `file` (task `uuid`), checking that it is the one `r`
    /// names (hash, size, place, level) and that its parts are contiguous.
    pub fn parse(bytes: &[u8], uuid: &str, file: &str, r: &IndexRef) -> anyhow::Result<Index> {
        let key = index_key(file, &r.sha256);
        if bytes.len() as u64 != r.bytes || sha256_hex(bytes) != r.sha256 {
            anyhow::bail!(
                "task {uuid}: the index object {key} does not match the manifest (size or SHA-256)"
            );
        }
        let i: Index = serde_json::from_slice(bytes).map_err(|e| {
            anyhow::anyhow!("task {uuid}: the index object {key} is not valid: {e}")
        })?;
        let fits = i.file == file
            && i.level == r.level
            && i.start == r.start
            && i.len == r.len
            && if i.level == 1 {
                i.indexes.is_empty() && !i.segments.is_empty()
            } else {
                i.segments.is_empty()
                    && !i.indexes.is_empty()
                    && i.indexes.iter().all(|c| c.level + 1 == i.level)
            };
        if !fits {
            anyhow::bail!(
                "task {uuid}: the index object {key} does not describe what the manifest says it does"
            );
        }
        let end = contiguous(
            i.start,
            i.segments
                .iter()
                .map(|s| (s.start, s.len))
                .chain(i.indexes.iter().map(|c| (c.start, c.len))),
        )
        .map_err(|at| {
            anyhow::anyhow!("task {uuid}: the index object {key} is not contiguous at byte {at}")
        })?;
        if end != i.start.saturating_add(i.len) {
            anyhow::bail!(
                "task {uuid}: the index object {key} does not cover {} bytes",
                i.len
            );
        }
        Ok(i)
    }
}

/// Where parts `(start, len)` that must follow each other from `from` end; `Err(at)` at the
/// first gap or overlap.
fn contiguous(from: u64, parts: impl Iterator<Item = (u64, u64)>) -> Result<u64, u64> {
    let mut at = from;
    for (start, len) in parts {
        if start != at {
            return Err(at);
        }
        at = at.saturating_add(len);
    }
    Ok(at)
}

impl FileEntry {
    /// The file's size in bytes.
    pub fn size(&self) -> u64 {
        match self {
            FileEntry::Appended { size, .. } | FileEntry::Whole { size, .. } => *size,
        }
    }

    /// The objects the manifest names for it (the indexes, not what they list), relative to
    /// the task's prefix, with their sizes; `name` is the file's.
    pub fn objects(&self, name: &str) -> Vec<(String, u64)> {
        match self {
            FileEntry::Appended {
                indexes, segments, ..
            } => indexes
                .iter()
                .map(|i| (index_key(name, &i.sha256), i.bytes))
                .chain(segments.iter().map(|s| (s.key.clone(), s.len)))
                .collect(),
            FileEntry::Whole { size, sha256, .. } => vec![(blob_key(sha256), *size)],
        }
    }
}

impl Manifest {
    /// The manifest of a task never synced: epoch 0, version 0, no files.
    pub fn empty(uuid: &str) -> Manifest {
        Manifest {
            format: 1,
            uuid: uuid.to_string(),
            version: 0,
            epoch: 0,
            holder: String::new(),
            written_at: String::new(),
            files: BTreeMap::new(),
        }
    }

    /// Parse a manifest read from the store (format 1 or 2); the error says why it cannot be
    /// used.
    pub fn parse(bytes: &[u8], uuid: &str) -> anyhow::Result<Manifest> {
        let m: Manifest = serde_json::from_slice(bytes)
            .map_err(|e| anyhow::anyhow!("the manifest of task {uuid} is not valid: {e}"))?;
        if !(1..=MANIFEST_FORMAT).contains(&m.format) {
            anyhow::bail!(
                "the manifest of task {uuid} has format {}, this host reads formats 1 to {MANIFEST_FORMAT}",
                m.format
            );
        }
        if m.uuid != uuid {
            anyhow::bail!("the manifest of task {uuid} names task {}", m.uuid);
        }
        for (name, e) in &m.files {
            check_name(name)?;
            if let FileEntry::Appended {
                size,
                indexes,
                segments,
                ..
            } = e
            {
                if m.format < 2 && !indexes.is_empty() {
                    anyhow::bail!(
                        "the manifest of task {uuid} has format {} but lists indexes of {name}",
                        m.format
                    );
                }
                if indexes.iter().any(|i| i.level == 0)
                    || indexes.windows(2).any(|w| w[1].level > w[0].level)
                {
                    anyhow::bail!(
                        "the manifest of task {uuid}: the indexes of {name} are not in order of level"
                    );
                }
                let at = contiguous(
                    0,
                    indexes
                        .iter()
                        .map(|i| (i.start, i.len))
                        .chain(segments.iter().map(|s| (s.start, s.len))),
                )
                .map_err(|at| {
                    anyhow::anyhow!(
                        "the manifest of task {uuid}: the segments of {name} are not contiguous at byte {at}"
                    )
                })?;
                if at != *size {
                    anyhow::bail!(
                        "the manifest of task {uuid}: the segments of {name} hold {at} bytes, not {size}"
                    );
                }
            }
        }
        Ok(m)
    }

    /// Every object the manifest itself names (relative keys) with its size: blobs, open
    /// segments and indexes (not what the indexes list: [`super::index::objects`]).
    pub fn objects(&self) -> BTreeMap<String, u64> {
        self.files
            .iter()
            .flat_map(|(name, e)| e.objects(name))
            .collect()
    }

    /// Set `format` to the oldest that can hold it: 1 while no file has an index, else 2.
    pub fn set_format(&mut self) {
        let indexed = self
            .files
            .values()
            .any(|e| matches!(e, FileEntry::Appended { indexes, .. } if !indexes.is_empty()));
        self.format = if indexed { 2 } else { 1 };
    }

    /// Bytes of all files.
    pub fn total_bytes(&self) -> u64 {
        self.files.values().map(FileEntry::size).sum()
    }
}

/// How a task-directory file is synced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only ever grows by appends ([`is_append_only`]): segments of what was appended.
    AppendOnly,
    /// Grows by appends, replaced at a compaction (current.jsonl): segments while its identity
    /// stays, from offset 0 again once replaced.
    Growing,
    /// Replaced as a whole (metadata.json, task_state.json, tools.json, the checkpoints,
    /// tool-results/…): one blob per content.
    Whole,
    /// Not synced: the temporaries of a step ([`ctxhost_format::files::is_temporary`]) and
    /// reply.stream (the raw body of the last streamed reply, whose content the history holds).
    Skipped,
}

/// How the file `name` (relative to the task directory) is synced.
pub fn kind_of(name: &str) -> Kind {
    let base = name.rsplit('/').next().unwrap_or(name);
    if ctxhost_format::files::is_temporary(base) || name == REPLY_STREAM {
        Kind::Skipped
    } else if is_append_only(name) {
        Kind::AppendOnly
    } else if name == CURRENT {
        Kind::Growing
    } else {
        Kind::Whole
    }
}

/// Whether the task-directory file `name` only ever grows by appends: messages.jsonl,
/// tools.jsonl, llm_calls.jsonl, summaries.jsonl and the planning histories.
pub fn is_append_only(name: &str) -> bool {
    [MESSAGES, TOOLS, LLM_CALLS, SUMMARIES].contains(&name)
        || name
            .strip_prefix(PLANNING_DIR)
            .and_then(|r| r.strip_prefix('/'))
            .is_some_and(|r| !r.contains('/') && r.ends_with(".jsonl"))
}

/// The key of the index object of file `name` with content hash `sha256`, relative to the
/// task's prefix.
pub fn index_key(name: &str, sha256: &str) -> String {
    format!("idx/{name}/{sha256}")
}

/// The key of a blob with content hash `sha256`, relative to the task's prefix.
pub fn blob_key(sha256: &str) -> String {
    format!("blob/{sha256}")
}

/// The key of the segment of `name` starting at `start`, written by manifest `version` of `epoch`:
/// unique, so a segment is never overwritten.
pub fn segment_key(name: &str, epoch: u64, version: u64, start: u64) -> String {
    format!("seg/{name}/{epoch:010}-{version:012}-{start:016}")
}

/// A file name from a manifest must stay inside the task directory: relative, no `.`/`..`
/// or empty parts, no control characters.
pub fn check_name(name: &str) -> anyhow::Result<()> {
    let bad = name.is_empty()
        || name.starts_with('/')
        || name
            .split('/')
            .any(|p| p.is_empty() || p == "." || p == "..")
        || name.chars().any(char::is_control);
    if bad {
        anyhow::bail!("the manifest names a file `{name}` outside the task directory");
    }
    Ok(())
}

/// SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    let d = sha2::Sha256::digest(bytes);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_only_files_are_the_histories() {
        for n in [
            "messages.jsonl",
            "tools.jsonl",
            "llm_calls.jsonl",
            "summaries.jsonl",
            "planning/ab.jsonl",
        ] {
            assert!(is_append_only(n), "{n}");
        }
        for n in [
            "current.jsonl",
            "metadata.json",
            "planning/x/y.jsonl",
            "tool-results/1.txt",
            "planning.jsonl",
        ] {
            assert!(!is_append_only(n), "{n}");
        }
    }

    #[test]
    fn kinds_of_files() {
        assert_eq!(kind_of("current.jsonl"), Kind::Growing);
        assert_eq!(kind_of("request.json"), Kind::Skipped);
        assert_eq!(kind_of("reply.stream"), Kind::Skipped);
        assert_eq!(kind_of(".metadata.json.tmp-12"), Kind::Skipped);
        assert_eq!(kind_of("tool-results/3.txt"), Kind::Whole);
        assert_eq!(kind_of("messages.jsonl"), Kind::AppendOnly);
    }

    #[test]
    fn a_manifest_with_a_gap_or_an_escaping_name_is_refused() {
        let mut m = Manifest::empty("u");
        m.files.insert(
            "messages.jsonl".into(),
            FileEntry::Appended {
                size: 10,
                tail_sha256: String::new(),
                indexes: Vec::new(),
                segments: vec![Segment {
                    key: "seg/a".into(),
                    start: 0,
                    len: 4,
                    sha256: String::new(),
                }],
                file_id: None,
            },
        );
        let bytes = serde_json::to_vec(&m).unwrap();
        assert!(
            Manifest::parse(&bytes, "u")
                .unwrap_err()
                .to_string()
                .contains("hold 4 bytes")
        );
        let mut m = Manifest::empty("u");
        m.files.insert(
            "../x".into(),
            FileEntry::Whole {
                size: 0,
                sha256: String::new(),
                mtime_ns: 0,
            },
        );
        let bytes = serde_json::to_vec(&m).unwrap();
        assert!(
            Manifest::parse(&bytes, "u")
                .unwrap_err()
                .to_string()
                .contains("outside")
        );
        assert!(
            Manifest::parse(&bytes, "v")
                .unwrap_err()
                .to_string()
                .contains("names task")
        );
    }
}
