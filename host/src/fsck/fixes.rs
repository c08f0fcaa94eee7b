//! `ctxhost fsck --repair`: the fixes of one task's fixable problems, made with the lifecycle
//! (recovery, interrupted transitions, misplaced directories) and the crash-repair functions
//! of [`crate::repair`] (torn lines, temporaries, current.jsonl behind).

use std::collections::BTreeSet;

use ctxhost_format::files::CURRENT;

use super::{Problem, ProblemKind};
use crate::db::{Db, Status};
use crate::layout::Layout;
use crate::lifecycle;
use crate::recovery::recover_task;
use crate::repair::{fix_torn_tail, jsonl_files, reconcile_current, remove_temporaries};

/// Repair the fixable problems `indexes` of task `uuid`; returns what was done.
pub(crate) fn repair_task(
    db: &Db,
    layout: &Layout,
    uuid: &str,
    indexes: &[usize],
    problems: &[Problem],
    max_crashes: u32,
) -> anyhow::Result<String> {
    let kinds: BTreeSet<ProblemKind> = indexes.iter().map(|i| problems[*i].kind).collect();
    let row = db.get(uuid)?;
    if kinds.contains(&ProblemKind::DeadProcess)
        && let Some(row) = &row
    {
        let cause = format!(
            "task process {} is gone (found by ctxhost fsck)",
            row.process_id
                .map(|p| p.to_string())
                .unwrap_or_else(|| "?".into())
        );
        return Ok(
            match recover_task(db, layout, uuid, row.process_id, &cause, max_crashes)? {
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
        ProblemKind::TornLine,
        ProblemKind::TemporaryFile,
        ProblemKind::CurrentBehind,
    ];
    if file_kinds.iter().any(|k| kinds.contains(k))
        && let Some((_, dir)) = layout.find_task_dir(uuid)
    {
        let keep_debug = row.as_ref().is_some_and(|r| r.status == Status::Failed);
        let removed = remove_temporaries(&dir, keep_debug)?;
        if !removed.is_empty() {
            done.push(format!("deleted {}", removed.join(", ")));
        }
        for file in jsonl_files(&dir)? {
            if let Some(fix) = fix_torn_tail(&file, true)? {
                done.push(fix.to_string());
            }
        }
        let appended = reconcile_current(&dir, true)?;
        if !appended.is_empty() {
            done.push(format!("appended seq {appended:?} to {CURRENT}"));
        }
    }
    if kinds.contains(&ProblemKind::UncommittedPlanning)
        && let Some((_, dir)) = layout.find_task_dir(uuid)
    {
        let cut = crate::task::PlanningStore::repair(&dir, uuid)?;
        if cut > 0 {
            done.push(format!(
                "cut {cut} uncommitted planning line(s) (kept in the planning file's .torn)"
            ));
        }
    }
    if kinds.contains(&ProblemKind::OldSummaryId)
        && let Some((_, dir)) = layout.find_task_dir(uuid)
    {
        done.push(crate::summary_ids::rewrite(&dir)?.to_string());
    }
    Ok(if done.is_empty() {
        "nothing left to do".to_string()
    } else {
        done.join("; ")
    })
}
