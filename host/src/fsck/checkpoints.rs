//! The checkpoints of one task directory ([`crate::checkpoint::FILES`]: store_checkpoint.json,
//! history_checkpoint.json, context_checkpoint.json): each present one must be readable, of its
//! shape and version, match its published schema and still describe the files it counts
//! ([`crate::checkpoint::verify`], its reader's own rule). A checkpoint is a derived cache, so
//! every fault is fixable: `--repair` deletes it ([`remove_bad`]) and
//! the next open of the task reads the file whole and writes a new one.

use super::{Problem, ProblemKind, problem};
use crate::checkpoint;
use crate::schemas::Schema;
use crate::task::history_counts::MAX_CHECKPOINT_BYTES;
use crate::task_dir::TaskDir;

/// What is said of every bad checkpoint after its fault.
const REPAIR: &str = "a cache of counts, rebuilt by a full read of the files it counts when it is \
                      missing; --repair deletes it";

/// Report each checkpoint of `dir` that its reader would not use or that breaks its schema
/// ([`ProblemKind::BadCheckpoint`]). A live task is skipped: its process rewrites them.
pub(crate) fn check_checkpoints(
    dir: &TaskDir,
    uuid: Option<&str>,
    live: bool,
    problems: &mut Vec<Problem>,
) {
    if live {
        return;
    }
    for name in checkpoint::FILES {
        if let Some(fault) = fault(dir, name) {
            problems.push(problem(
                ProblemKind::BadCheckpoint,
                uuid,
                Some(&dir.file_path(name)),
                None,
                format!("{fault}; {REPAIR}"),
                true,
            ));
        }
    }
}

/// Delete each checkpoint of `dir` that [`check_checkpoints`] would report (one its reader would
/// not use, or one that breaks its schema): all are derived caches, rebuilt by a full read when
/// missing. Returns the names deleted.
pub(crate) fn remove_bad(dir: &TaskDir) -> anyhow::Result<Vec<&'static str>> {
    let mut removed = Vec::new();
    for name in checkpoint::FILES {
        if fault(dir, name).is_some() {
            dir.remove_file_if_exists(name)
                .map_err(|e| anyhow::anyhow!("cannot delete {}: {e}", dir.show(name)))?;
            removed.push(name);
        }
    }
    Ok(removed)
}

/// Why checkpoint `name` of `dir` is bad, if it is.
fn fault(dir: &TaskDir, name: &str) -> Option<String> {
    if let Err(e) = checkpoint::verify(dir, name) {
        return Some(format!("{e:#}"));
    }
    // Its reader would use it: it parsed, so it is JSON of at most the largest bound.
    let bytes = dir
        .read_bounded_if_exists(name, MAX_CHECKPOINT_BYTES)
        .ok()??;
    let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    super::files::schema_mismatch(Schema::for_task_file(name)?, &value)
}
