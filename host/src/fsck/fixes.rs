//! `ctxhost fsck --repair`: the fixes of one task's fixable problems, made with the lifecycle
//! (recovery, interrupted transitions, misplaced directories), the crash-repair functions
//! of [`crate::repair`] (NUL bytes, torn lines, temporaries, current.jsonl behind, tool-call
//! pairing) and the task directory's handle (symbolic links deleted, modes tightened, bad or
//! stale checkpoints deleted: [`super::checkpoints::remove_bad`]).

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::Context;
use ctxhost_format::files::CURRENT;

use super::{Problem, ProblemKind};
use crate::db::lease::Holder;
use crate::db::{Db, Status, now_rfc3339};
use crate::layout::Layout;
use crate::lifecycle;
use crate::recovery::{Lost, Recoverer, recover_task};
use crate::repair::nul::remove_nul_bytes;
use crate::repair::pairing::{note_text, repair_context};
use crate::repair::{fix_torn_tail, jsonl_files, reconcile_current, remove_temporaries};
use crate::task_dir::{DIR_MODE, FILE_MODE, TaskDir};

/// Set `path` (not a link) owner-only: 0700 for a folder, 0600 for a file. Returns what was done.
pub(crate) fn tighten(path: &Path) -> anyhow::Result<String> {
    let meta = std::fs::symlink_metadata(path)
        .with_context(|| format!("cannot look at {}", path.display()))?;
    if meta.file_type().is_symlink() {
        anyhow::bail!("{} is a symbolic link; not changed", path.display());
    }
    let mode = if meta.is_dir() { DIR_MODE } else { FILE_MODE };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot change the mode of {}", path.display()))?;
    Ok(format!("mode set to {mode:04o}"))
}

/// Delete the links in task directory `dir` and make everything in it owner-only. Returns what
/// was done.
fn secure_dir(dir: &TaskDir) -> anyhow::Result<Vec<String>> {
    let mut done = Vec::new();
    let links = dir
        .remove_foreign_entries()
        .with_context(|| format!("cannot remove the links in {}", dir.path().display()))?;
    if !links.is_empty() {
        done.push(format!(
            "deleted link(s) or special file(s) {}",
            links.join(", ")
        ));
    }
    let mut loose = Vec::new();
    dir.walk(|rel, m| {
        if cap_std::fs::PermissionsExt::mode(&m.permissions()) & super::files::LOOSE_BITS != 0 {
            loose.push((rel.to_string(), m.is_dir()));
        }
    })
    .with_context(|| format!("cannot list {}", dir.path().display()))?;
    for (rel, is_dir) in &loose {
        dir.set_owner_only(rel, *is_dir)
            .with_context(|| format!("cannot change the mode of {}", dir.show(rel)))?;
    }
    let top = std::fs::symlink_metadata(dir.path())
        .with_context(|| format!("cannot look at {}", dir.path().display()))?;
    if top.permissions().mode() & super::files::LOOSE_BITS != 0 {
        tighten(dir.path())?;
        loose.push((".".to_string(), true));
    }
    if !loose.is_empty() {
        done.push(format!("made {} entr(ies) owner-only", loose.len()));
    }
    Ok(done)
}

/// Repair the fixable problems `indexes` of task `uuid`; returns what was done.
pub(crate) fn repair_task(
    db: &Db,
    layout: &Layout,
    uuid: &str,
    indexes: &[usize],
    problems: &[Problem],
    max_crashes: u32,
    lease: std::time::Duration,
) -> anyhow::Result<String> {
    let kinds: BTreeSet<ProblemKind> = indexes.iter().map(|i| problems[*i].kind).collect();
    let row = db.get(uuid)?;
    let dead = kinds.contains(&ProblemKind::DeadProcess);
    if (dead || kinds.contains(&ProblemKind::ExpiredLease))
        && let Some(row) = &row
    {
        let process = row
            .process_id
            .map(|p| p.to_string())
            .unwrap_or_else(|| "?".into());
        let lost = Lost {
            holder: Holder::of(row),
            cause: if dead {
                format!("task process {process} is gone (found by ctxhost fsck)")
            } else {
                format!(
                    "the lease of worker {} (task process {process}) expired (found by ctxhost fsck)",
                    row.worker_id.as_deref().unwrap_or("?")
                )
            },
            only_if_expired: !dead,
            crash: true,
        };
        let me = Recoverer::new(lease);
        return Ok(
            match recover_task(db, layout, uuid, &lost, max_crashes, &me)? {
                Some(r) => format!("recovered: {}", r.message),
                None => "the task changed meanwhile; nothing done".to_string(),
            },
        );
    }
    let mut done = Vec::new();
    // Read again inside the lifecycle: only a task that no process runs is moved.
    if kinds.contains(&ProblemKind::InterruptedTransition)
        || kinds.contains(&ProblemKind::InterruptedCleanup)
    {
        if let Some(what) = lifecycle::complete_interrupted(db, layout, uuid, None)? {
            done.push(what);
        }
    } else if kinds.contains(&ProblemKind::DirMismatch)
        && let Some(what) = lifecycle::force_placement(db, layout, uuid)?
    {
        done.push(what);
    }
    let file_kinds = [
        ProblemKind::NulBytes,
        ProblemKind::TornLine,
        ProblemKind::TemporaryFile,
        ProblemKind::CurrentBehind,
        ProblemKind::ContextInvariant,
    ];
    let open = |path: &Path| {
        TaskDir::open(path).with_context(|| format!("cannot open {}", path.display()))
    };
    if (kinds.contains(&ProblemKind::Symlink)
        || kinds.contains(&ProblemKind::SpecialFile)
        || kinds.contains(&ProblemKind::LooseMode))
        && let Some((_, path)) = layout.find_task_dir(uuid)
    {
        done.extend(secure_dir(&open(&path)?)?);
    }
    if file_kinds.iter().any(|k| kinds.contains(k))
        && let Some((_, path)) = layout.find_task_dir(uuid)
    {
        let dir = open(&path)?;
        let keep_debug = row.as_ref().is_some_and(|r| r.status == Status::Failed);
        let removed = remove_temporaries(&dir, keep_debug)?;
        if !removed.is_empty() {
            done.push(format!("deleted {}", removed.join(", ")));
        }
        if indexes
            .iter()
            .any(|i| problems[*i].kind == ProblemKind::NulBytes)
        {
            for file in jsonl_files(&dir)? {
                if let Some(fix) = remove_nul_bytes(&dir, &file)? {
                    done.push(format!("{}: {fix}", dir.show(&file)));
                }
            }
        }
        for file in jsonl_files(&dir)? {
            if let Some(fix) = fix_torn_tail(&dir, &file, true)? {
                done.push(fix.to_string());
            }
        }
        let appended = reconcile_current(&dir, true)?;
        if !appended.is_empty() {
            done.push(format!("appended seq {appended:?} to {CURRENT}"));
        }
        // A paused or queued task makes the calls waiting at the end when it runs again.
        let allow_pending = row.as_ref().is_some_and(|r| !r.status.is_final());
        let fixes = repair_context(&dir, &now_rfc3339(), allow_pending)?;
        if !fixes.is_empty() {
            done.push(note_text(&fixes));
        }
    }
    if kinds.contains(&ProblemKind::UncommittedPlanning)
        && let Some((_, path)) = layout.find_task_dir(uuid)
    {
        let cut = crate::task::PlanningStore::repair(&open(&path)?, uuid)?;
        if cut > 0 {
            done.push(format!(
                "cut {cut} uncommitted planning line(s) (kept in the planning file's .torn)"
            ));
        }
    }
    // Last: a checkpoint reported bad, or left stale by a fix above (a file rewritten or
    // replaced), is deleted; the next open reads the files whole and writes a new one.
    let rewrote = [ProblemKind::BadCheckpoint]
        .iter()
        .chain(&file_kinds)
        .any(|k| kinds.contains(k));
    if rewrote && let Some((_, path)) = layout.find_task_dir(uuid) {
        let removed = super::checkpoints::remove_bad(&open(&path)?)?;
        if !removed.is_empty() {
            done.push(format!(
                "deleted {} (rebuilt by a full read when the task next opens)",
                removed.join(", ")
            ));
        }
    }
    Ok(if done.is_empty() {
        "nothing left to do".to_string()
    } else {
        done.join("; ")
    })
}
