//! The checkpoints of one task directory ([`crate::checkpoint::FILES`]: store_checkpoint.json,
//! history_checkpoint.json, context_checkpoint.json): each present one must be readable, of its
//! shape and version, match its published schema and still describe the files it counts
//! ([`verify`], its reader's own rule). A checkpoint is a derived cache, so
//! every fault is fixable: `--repair` deletes it ([`remove_bad`]) and
//! the next open of the task reads the file whole and writes a new one.

use ctxhost_format::checkpoint::StoreCheckpoint;
use ctxhost_format::files::{
    CONTEXT_CHECKPOINT, CURRENT, HISTORY_CHECKPOINT, MESSAGES, STORE_CHECKPOINT,
};

use super::{Problem, ProblemKind, problem};
use crate::checkpoint;
use crate::schemas::Schema;
use crate::task::history_counts::MAX_CHECKPOINT_BYTES;
use crate::task_dir::{MAX_RECORD_BYTES, TaskDir};

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

/// Why the checkpoint `name` (one of [`checkpoint::FILES`]) of `dir` would not be used by its reader — it
/// cannot be read, is not of its shape or version, or no longer describes the file(s) it
/// counts — as an error naming the file; `Ok` when it is absent or would be used.
pub(crate) fn verify(dir: &TaskDir, name: &str) -> anyhow::Result<()> {
    match name {
        STORE_CHECKPOINT => {
            // builtin:jsonl-store's rule (guest-components/jsonl-store): each mark holds.
            if let Some(cp) = checkpoint::read::<StoreCheckpoint>(dir, name, MAX_RECORD_BYTES)? {
                checkpoint::ensure_holds(dir, MESSAGES, None, &cp.messages)?;
                checkpoint::ensure_holds(dir, CURRENT, None, &cp.current)?;
            }
            Ok(())
        }
        HISTORY_CHECKPOINT => crate::task::history_counts::verify_checkpoint(dir),
        CONTEXT_CHECKPOINT => crate::invariants::context_check::verify_checkpoint(dir),
        _ => anyhow::bail!("{name} is not a checkpoint file"),
    }
}

/// Why checkpoint `name` of `dir` is bad, if it is.
fn fault(dir: &TaskDir, name: &str) -> Option<String> {
    if let Err(e) = verify(dir, name) {
        return Some(format!("{e:#}"));
    }
    // Its reader would use it: it parsed, so it is JSON of at most the largest bound.
    let bytes = dir
        .read_bounded_if_exists(name, MAX_CHECKPOINT_BYTES)
        .ok()??;
    let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    super::schema_check::schema_mismatch(Schema::for_task_file(name)?, &value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::context_check::ContextCheck;
    use crate::repair::testing::{one_round, write_task};
    use crate::task::HistoryCounts;
    use ctxhost_format::checkpoint::{CHECKPOINT_VERSION, FileMark};
    use std::fs;

    #[test]
    fn checkpoints_that_hold_are_kept_and_stale_ones_are_named_and_deleted() {
        let tmp = tempfile::tempdir().unwrap();
        write_task(tmp.path(), &one_round(), &one_round());
        let dir = TaskDir::open(tmp.path()).unwrap();
        let mut check = ContextCheck::load(&dir);
        check.check(&dir, CURRENT, true).unwrap();
        check.save(&dir).unwrap();
        HistoryCounts::open(&dir).unwrap();
        for name in [HISTORY_CHECKPOINT, CONTEXT_CHECKPOINT] {
            assert!(dir.is_file(name), "{name} written");
            verify(&dir, name).unwrap();
        }
        // None yet: nothing to say.
        verify(&dir, STORE_CHECKPOINT).unwrap();
        assert!(checkpoint::FILES.iter().all(|f| verify(&dir, f).is_ok()));

        // Both files replaced by copies of the same bytes (as an atomic rewrite does): the
        // marks hold, the files are not the ones counted.
        for name in [MESSAGES, CURRENT] {
            let copy = tmp.path().join("copy");
            fs::copy(tmp.path().join(name), &copy).unwrap();
            fs::rename(&copy, tmp.path().join(name)).unwrap();
        }
        for name in [HISTORY_CHECKPOINT, CONTEXT_CHECKPOINT] {
            let e = format!("{:#}", verify(&dir, name).unwrap_err());
            assert!(e.contains("the file was replaced"), "{name}: {e}");
        }
        // A store checkpoint counting more of messages.jsonl than it has.
        let store = StoreCheckpoint {
            version: CHECKPOINT_VERSION,
            messages: FileMark {
                bytes: 1 << 20,
                last_line: "0123456789abcdef".into(),
            },
            ..StoreCheckpoint::default()
        };
        dir.write_atomic(STORE_CHECKPOINT, &serde_json::to_vec(&store).unwrap())
            .unwrap();
        let e = format!("{:#}", verify(&dir, STORE_CHECKPOINT).unwrap_err());
        assert!(e.contains("messages.jsonl no longer starts with"), "{e}");
        assert!(checkpoint::FILES.iter().all(|f| verify(&dir, f).is_err()));
    }
}
