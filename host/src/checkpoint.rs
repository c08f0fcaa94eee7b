//! Reading the host's checkpoint files from a task directory: `history_checkpoint.json`
//! ([`crate::task::history_counts`]) and `context_checkpoint.json`
//! ([`crate::invariants::context_check`]), both a JSON object with a `version` field
//! ([`ctxhost_format::checkpoint::CHECKPOINT_VERSION`]), written atomically by the task process.
//!
//! A checkpoint is a derived cache: one that is missing, not a regular file, larger than its
//! bound, not of its shape or of another version is not used, and its reader reads the file it
//! summarises whole, as without one. [`read`] says why a checkpoint cannot be used;
//! [`load`] logs that at debug level and gives `None`.
//!
//! This module knows the files and their common rules only; each reader keeps its own rule for
//! whether its checkpoint still holds (`verify_checkpoint` of [`crate::task::history_counts`]
//! and [`crate::invariants::context_check`]), and `ctxhost fsck` ([`crate::fsck`]) asks each.

use std::io::{self, Seek, SeekFrom};

use anyhow::Context as _;
use ctxhost_format::checkpoint::{CHECKPOINT_VERSION, FileMark, StoreCheckpoint};
use ctxhost_format::files::{
    CONTEXT_CHECKPOINT, CURRENT, HISTORY_CHECKPOINT, MESSAGES, STORE_CHECKPOINT,
};
use serde::de::DeserializeOwned;

use crate::task_dir::{TaskDir, file_id};

/// The checkpoint files of a task directory (DESIGN.md §2): the message store's and the host's.
pub const FILES: [&str; 3] = [STORE_CHECKPOINT, HISTORY_CHECKPOINT, CONTEXT_CHECKPOINT];

/// A checkpoint file's shape: a JSON object whose `version` says how to read the rest.
pub trait Versioned: DeserializeOwned {
    /// The file's `version` field.
    fn version(&self) -> u32;
}

/// The checkpoint `name` of `dir`: `Ok(None)` when there is none; an error when it is not a
/// regular file, is larger than `max_bytes`, is not a JSON object that parses
/// as `T`, or is not of version [`CHECKPOINT_VERSION`]. The error does not repeat the name:
/// every caller shows it ([`load`]'s log line, fsck's problem).
pub fn read<T: Versioned>(dir: &TaskDir, name: &str, max_bytes: u64) -> anyhow::Result<Option<T>> {
    let Some(file) = dir.open_read_if_exists(name)? else {
        return Ok(None);
    };
    anyhow::ensure!(
        file.metadata()?.len() <= max_bytes,
        "larger than {max_bytes} bytes; not read"
    );
    // Parsed as it is read (64 KiB at a time, never more than max_bytes + 1 bytes), not from
    // a copy of the whole file: a history checkpoint of a long conversation holds ~2 MiB of
    // call-id hashes, which would otherwise be in memory twice.
    let mut reader = io::BufReader::with_capacity(64 * 1024, io::Read::take(file, max_bytes + 1));
    // serde's derived structs also read a JSON array of the fields in order; a checkpoint is
    // an object (its schema says so), so anything else is refused as not one.
    let start = io::BufRead::fill_buf(&mut reader)?;
    let first = start.iter().find(|b| !b.is_ascii_whitespace());
    anyhow::ensure!(first == Some(&b'{'), "not a checkpoint: not a JSON object");
    let cp: T = serde_json::from_reader(reader).context("not a checkpoint")?;
    anyhow::ensure!(
        cp.version() == CHECKPOINT_VERSION,
        "version {} (this host reads {CHECKPOINT_VERSION})",
        cp.version()
    );
    Ok(Some(cp))
}

/// [`read`], an error logged at debug level (with `fallback`, what the caller does without the
/// checkpoint) and taken as no checkpoint: a checkpoint only saves a read.
pub fn load<T: Versioned>(dir: &TaskDir, name: &str, max_bytes: u64, fallback: &str) -> Option<T> {
    read(dir, name, max_bytes).unwrap_or_else(|e| {
        tracing::debug!("{} ignored ({fallback}): {e:#}", dir.show(name));
        None
    })
}

impl Versioned for StoreCheckpoint {
    fn version(&self) -> u32 {
        self.version
    }
}

/// The checkpoints that count the file `name` (DESIGN.md §2): messages.jsonl is counted by the
/// message store's and the history's, current.jsonl by the message store's and the context
/// check's; no other file has one.
pub fn describing(name: &str) -> &'static [&'static str] {
    match name {
        MESSAGES => &[STORE_CHECKPOINT, HISTORY_CHECKPOINT],
        CURRENT => &[STORE_CHECKPOINT, CONTEXT_CHECKPOINT],
        _ => &[],
    }
}

/// Delete the checkpoints of `dir` that count the file `name` ([`describing`]): what every
/// repair does before it rewrites or cuts that file, so that no checkpoint outlives the bytes
/// it counts. A crash between the two costs the next open a full read, never counts of bytes
/// that changed. An append needs none of this: a checkpoint counts a prefix of its file, which
/// an append keeps. Returns the names deleted (those that existed). Errors name the file.
pub fn remove_describing(dir: &TaskDir, name: &str) -> anyhow::Result<Vec<&'static str>> {
    let mut removed = Vec::new();
    for cp in describing(name) {
        if dir
            .remove_file_if_exists(cp)
            .with_context(|| format!("cannot delete {}", dir.show(cp)))?
        {
            tracing::debug!("{} deleted: {name} is about to change", dir.show(cp));
            removed.push(*cp);
        }
    }
    Ok(removed)
}

/// That `mark` still names a prefix of file `name` of `dir` ([`FileMark::holds`]) and, with
/// `id`, that the file is the one it was taken of ([`file_id`]); a missing file holds only
/// an empty mark. The error says which (and names the file).
pub fn ensure_holds(
    dir: &TaskDir,
    name: &str,
    id: Option<&str>,
    mark: &FileMark,
) -> anyhow::Result<()> {
    let shown = dir.show(name);
    let Some(mut f) = dir
        .open_read_if_exists(name)
        .with_context(|| format!("cannot open {shown}"))?
    else {
        anyhow::ensure!(
            mark.bytes == 0,
            "counts {} bytes of {name}, which is missing",
            mark.bytes
        );
        return Ok(());
    };
    if let Some(id) = id {
        let now = file_id(&f).with_context(|| format!("cannot read {shown}"))?;
        anyhow::ensure!(
            now == id,
            "counts another {name} (file {id}; it is now {now}: the file was replaced)"
        );
    }
    let len = f
        .seek(SeekFrom::End(0))
        .with_context(|| format!("cannot read {shown}"))?;
    anyhow::ensure!(
        mark.holds(&mut f, len, &shown)?,
        "{name} no longer starts with the {} bytes it counts",
        mark.bytes
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_of_another_version_or_too_large_is_not_read() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        assert!(
            read::<StoreCheckpoint>(&dir, STORE_CHECKPOINT, 1024)
                .unwrap()
                .is_none()
        );
        let other = StoreCheckpoint {
            version: CHECKPOINT_VERSION + 1,
            ..StoreCheckpoint::default()
        };
        let bytes = serde_json::to_vec(&other).unwrap();
        dir.write_atomic(STORE_CHECKPOINT, &bytes).unwrap();
        let e = read::<StoreCheckpoint>(&dir, STORE_CHECKPOINT, 1024).unwrap_err();
        assert!(format!("{e:#}").contains("version 2"), "{e:#}");
        let e = read::<StoreCheckpoint>(&dir, STORE_CHECKPOINT, 10).unwrap_err();
        assert!(format!("{e:#}").contains("larger than 10 bytes"), "{e:#}");
        assert!(load::<StoreCheckpoint>(&dir, STORE_CHECKPOINT, 1024, "read whole").is_none());
    }
}
