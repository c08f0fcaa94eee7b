//! Reading the host's checkpoint files from a task directory: `history_checkpoint.json`
//! ([`crate::task::history_counts`]) and `context_checkpoint.json`
//! ([`crate::invariants::context_check`]), both a JSON object with a `version` field
//! ([`ctxhost_format::checkpoint::CHECKPOINT_VERSION`]), written atomically by the task process.
//!
//! A checkpoint is a derived cache: one that is missing, not a regular file, larger than its
//! bound, not of its shape or of another version is not used, and its reader reads the file it
//! summarises whole, as without one. [`read`] says why a checkpoint cannot be used (for
//! `ctxhost fsck`); [`load`] logs that at debug level and gives `None`.

use anyhow::Context as _;
use ctxhost_format::checkpoint::CHECKPOINT_VERSION;
use serde::de::DeserializeOwned;

use crate::task_dir::TaskDir;

/// A checkpoint file's shape: a JSON object whose `version` says how to read the rest.
pub trait Versioned: DeserializeOwned {
    /// The file's `version` field.
    fn version(&self) -> u32;
}

/// The checkpoint `name` of `dir`: `Ok(None)` when there is none; an error (naming the file)
/// when it is not a regular file, is larger than `max_bytes`, does not parse as `T` or is not
/// of version [`CHECKPOINT_VERSION`].
pub fn read<T: Versioned>(dir: &TaskDir, name: &str, max_bytes: u64) -> anyhow::Result<Option<T>> {
    let Some(bytes) = dir.read_bounded_if_exists(name, max_bytes)? else {
        return Ok(None);
    };
    let cp: T =
        serde_json::from_slice(&bytes).with_context(|| format!("{name}: not a checkpoint"))?;
    anyhow::ensure!(
        cp.version() == CHECKPOINT_VERSION,
        "{name}: version {} (this host reads {CHECKPOINT_VERSION})",
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
