//! `ctxhost cleanup`: delete the directories of tasks that finished long ago (DESIGN §3).
//!
//! A task is eligible when its status is final (`completed`, `failed`, `stopped`), its
//! `completed_at` is more than N days ago (`context_storage.cleanup_days` by default), its
//! directory `completed/{uuid}/` exists, and its files were not deleted before. Its row stays in
//! tasks.db for the statistics, with `files_deleted_at` set: `ctxhost show` and `tasks` read the
//! column to say that the files are gone (the column, not the absence of the directory, so a
//! directory lost by accident is still reported by `ctxhost fsck`).
//!
//! Deleting one directory is a lifecycle transition ([`Transition::DeleteFiles`]): the row is
//! marked first, then the directory is renamed to `completed/.deleting-{uuid}` (atomic) and
//! that tree deleted. A cleanup interrupted half-way leaves a marked row whose directory is
//! still in `completed/`, or a `.deleting-` directory; the next cleanup finishes both.
//!
//! A task's managed worktree (`contexts/.workspaces/<uuid>`, issue 40) is removed with it
//! (`git worktree remove --force`, then `git worktree prune` in its mirror), before its row is
//! marked; a worktree whose task has no row or whose files are gone is removed too.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::db::{Db, Status};
use crate::layout::{DirState, Layout, parse_uuid};
use crate::lifecycle::{self, DirFix, Transition};

pub use crate::layout::DELETING_PREFIX;

/// One directory deleted (or that would be, in a dry run).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CleanupItem {
    /// The task.
    pub uuid: String,
    /// Its (final) status.
    pub status: Status,
    /// RFC 3339 UTC.
    pub completed_at: Option<String>,
    /// The directory.
    pub dir: String,
    /// Bytes of its files (apparent size, symlinks not followed).
    pub bytes: u64,
}

/// What `cleanup` did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CleanupReport {
    /// The age limit, days (0: every finished task, `--all`).
    pub days: u32,
    /// Tasks completed before this moment (RFC 3339 UTC) are eligible.
    pub cutoff: String,
    /// Nothing was changed.
    pub dry_run: bool,
    /// Directories deleted (or to delete), oldest first.
    pub deleted: Vec<CleanupItem>,
    /// Their total size, bytes.
    pub bytes: u64,
    /// Directories left by an interrupted cleanup (`.deleting-` trees, directories of rows
    /// already marked deleted), finished now (or to finish).
    pub leftovers: Vec<String>,
}

/// The cutoff `days` days before now, in the database's timestamp format.
pub fn cutoff(days: u32) -> String {
    let t = chrono::Utc::now() - chrono::Duration::days(i64::from(days));
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Delete (unless `dry_run`) the directories of tasks finished more than `days` days ago;
/// `days` 0 means every finished task (`ctxhost cleanup --all`: config and `--days` ask for at
/// least 1).
pub fn cleanup(
    db: &Db,
    layout: &Layout,
    days: u32,
    dry_run: bool,
) -> anyhow::Result<CleanupReport> {
    cleanup_with(db, layout, days, dry_run, None)
}

/// [`cleanup`] of task directories also kept in a bucket (`context_storage.remote`): a task's
/// objects are deleted with it (after its row is marked), and a task whose directory is only in
/// the bucket (it ran on another host) is cleaned up too; its `dir` is then the bucket's
/// `s3://…/tasks/{uuid}` and its bytes those of its manifest.
pub fn cleanup_with(
    db: &Db,
    layout: &Layout,
    days: u32,
    dry_run: bool,
    remote: Option<&crate::remote::Store>,
) -> anyhow::Result<CleanupReport> {
    let completed = layout.state_dir(DirState::Completed);
    let mut report = CleanupReport {
        days,
        cutoff: cutoff(days),
        dry_run,
        deleted: Vec::new(),
        bytes: 0,
        leftovers: Vec::new(),
    };

    // Leftovers of an interrupted cleanup first: `.deleting-` trees, and directories of rows
    // already marked deleted.
    let mut leftovers: Vec<(PathBuf, String)> = Vec::new();
    if let Ok(entries) = fs::read_dir(&completed) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if !path.is_dir() {
                continue;
            }
            if let Some(rest) = name.strip_prefix(DELETING_PREFIX) {
                if let Ok(uuid) = parse_uuid(rest) {
                    leftovers.push((path, uuid));
                }
            } else if parse_uuid(&name).ok().as_deref() == Some(name.as_str())
                && db.get(&name)?.is_some_and(|r| {
                    let found = [DirState::Completed];
                    matches!(
                        lifecycle::dir_fix(r.status, r.files_deleted_at.is_some(), &found),
                        DirFix::Delete { .. }
                    )
                })
            {
                leftovers.push((path, name));
            }
        }
    }
    // Reader's copies of tasks whose files are deleted (by a cleanup on another host, say),
    // and this host's record of their last sync: `contexts/.remote/view/{uuid}`,
    // `contexts/.remote/{uuid}.json`.
    if remote.is_some() {
        for (path, uuid) in crate::remote::local_records(layout) {
            if db.get(&uuid)?.is_none_or(|r| r.files_deleted_at.is_some()) {
                if !dry_run {
                    crate::remote::forget_local(layout, &uuid)?;
                }
                report.leftovers.push(path.display().to_string());
            }
        }
    }
    leftovers.sort();
    // Managed worktrees (issue 40) of tasks whose files are gone or that have no row.
    if !dry_run && let Ok(entries) = fs::read_dir(layout.workspaces_dir()) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if parse_uuid(&name).ok().as_deref() != Some(name.as_str()) {
                continue;
            }
            if db.get(&name)?.is_none_or(|r| r.files_deleted_at.is_some()) {
                remove_workspace(layout, &name)?;
                report.leftovers.push(entry.path().display().to_string());
            }
        }
    }
    for (path, uuid) in leftovers {
        if !dry_run {
            remove_workspace(layout, &uuid)?;
            // Marks the row (if an old cleanup had not) and deletes what is left.
            lifecycle::apply(db, layout, &uuid, &Transition::DeleteFiles)?;
        }
        report.leftovers.push(path.display().to_string());
    }

    for row in db.finished_before(&report.cutoff)? {
        let uuid = match parse_uuid(&row.uuid) {
            Ok(u) if u == row.uuid => u,
            _ => {
                tracing::warn!(uuid = %row.uuid, "a row with an invalid UUID: skipped (see `ctxhost fsck`)");
                continue;
            }
        };
        let dir = layout.task_dir(DirState::Completed, &uuid);
        let in_bucket = match remote {
            Some(store) => crate::remote::read_manifest(store, &uuid)?
                .map(|b| (store, b.manifest.total_bytes())),
            None => None,
        };
        let (shown, bytes) = if dir.is_dir() {
            (dir.display().to_string(), tree_size(&dir))
        } else if let Some((store, bytes)) = in_bucket {
            (
                format!("{}/tasks/{uuid}", store.url().trim_end_matches('/')),
                bytes,
            )
        } else {
            // Never started, or its directory is elsewhere (`ctxhost fsck` reports that).
            continue;
        };
        if !dry_run {
            // Its managed worktree first: a crash between the two leaves a task whose
            // worktree is gone, which a resume would rebuild, never a worktree without a task.
            remove_workspace(layout, &uuid)?;
            if lifecycle::apply(db, layout, &uuid, &Transition::DeleteFiles)?.is_none() {
                continue;
            }
            if let Some(store) = remote {
                let n = crate::remote::delete_task(store, layout, &uuid)?;
                tracing::info!(%uuid, objects = n, "task objects deleted from the bucket");
            }
            tracing::info!(%uuid, bytes, "task directory deleted");
        }
        report.bytes += bytes;
        report.deleted.push(CleanupItem {
            uuid,
            status: row.status,
            completed_at: row.completed_at.clone(),
            dir: shown,
            bytes,
        });
    }
    Ok(report)
}

/// Remove task `uuid`'s managed worktree `contexts/.workspaces/<uuid>` if there is one
/// (`git worktree remove --force` and `prune` in its mirror). Errors name the folder.
fn remove_workspace(layout: &Layout, uuid: &str) -> anyhow::Result<()> {
    let path = layout.task_workspace(uuid);
    if !path.exists() {
        return Ok(());
    }
    crate::workspace::checkout::remove_worktree(&path, None)
        .map_err(|e| anyhow::anyhow!("removing the worktree of task {uuid}: {e:#}"))?;
    tracing::info!(%uuid, path = %path.display(), "task worktree removed");
    Ok(())
}

/// Total apparent size of the files under `path` (symlinks counted as themselves).
pub fn tree_size(path: &Path) -> u64 {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    fs::read_dir(path)
        .map(|entries| entries.flatten().map(|e| tree_size(&e.path())).sum())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::store_tests;
    use crate::db::{NewTask, TaskKey};

    fn task(db: &Db, layout: &Layout, n: u8, status: Status) -> String {
        let uuid = format!("0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a{n:02x}");
        db.insert_queued(&NewTask {
            uuid: uuid.clone(),
            key: TaskKey {
                task_source: "local".into(),
                ..Default::default()
            },
            prompt: "p".into(),
            user: None,
            llm_provider: "openai".into(),
            model: "m".into(),
            context_length: 1,
            no_inherit: false,
            workspace: None,
        })
        .unwrap();
        if status.is_final() {
            use crate::lifecycle::{Claim, apply};
            apply(db, layout, &uuid, &Transition::Claim(&Claim::test(1))).unwrap();
            let t = Transition::Finish {
                owner: crate::lifecycle::Owner::test(1),
                status,
                error: None,
            };
            apply(db, layout, &uuid, &t).unwrap();
            let dir = layout.task_dir(DirState::Completed, &uuid);
            fs::write(dir.join("messages.jsonl"), "{}\n").unwrap();
        }
        uuid
    }

    store_tests! {
        fn dry_run_lists_and_the_real_run_deletes_finished_dirs_only(store: &TestStore) {
            let layout = Layout::new(store.contexts());
            layout.ensure().unwrap();
            let db = store.open();
            let done = task(&db, &layout, 1, Status::Completed);
            let failed = task(&db, &layout, 2, Status::Failed);
            let queued = task(&db, &layout, 3, Status::Queued);
            // Not old enough.
            let r = cleanup(&db, &layout, 1, false).unwrap();
            assert!(r.deleted.is_empty());
            // Dry run: listed, nothing changes.
            let r = cleanup(&db, &layout, 0, true).unwrap();
            assert_eq!(r.deleted.len(), 2);
            assert_eq!(r.bytes, 6);
            assert!(layout.task_dir(DirState::Completed, &done).is_dir());
            assert!(db.get(&done).unwrap().unwrap().files_deleted_at.is_none());
            // Real run.
            let r = cleanup(&db, &layout, 0, false).unwrap();
            let uuids: Vec<_> = r.deleted.iter().map(|i| i.uuid.clone()).collect();
            assert_eq!(uuids, [done.clone(), failed.clone()]);
            for u in [&done, &failed] {
                assert!(!layout.task_dir(DirState::Completed, u).exists());
                let row = db.get(u).unwrap().unwrap();
                assert!(row.files_deleted_at.is_some());
            }
            assert_eq!(db.get(&queued).unwrap().unwrap().status, Status::Queued);
            // Again: nothing left.
            assert!(cleanup(&db, &layout, 0, false).unwrap().deleted.is_empty());
        }

        fn a_deletion_interrupted_after_its_row_is_finished(store: &TestStore) {
            let layout = Layout::new(store.contexts());
            layout.ensure().unwrap();
            let db = store.open();
            let done = task(&db, &layout, 1, Status::Completed);
            // The row half of the deletion, without its directory half.
            crate::lifecycle::row::mark_files_deleted(&db, &done).unwrap();
            let r = cleanup(&db, &layout, 30, true).unwrap();
            assert_eq!(r.leftovers.len(), 1, "listed by a dry run");
            assert!(layout.task_dir(DirState::Completed, &done).is_dir());
            let r = cleanup(&db, &layout, 30, false).unwrap();
            assert_eq!(r.leftovers.len(), 1);
            assert!(!layout.task_dir(DirState::Completed, &done).exists());
        }

        fn an_interrupted_deletion_is_finished(store: &TestStore) {
            let layout = Layout::new(store.contexts());
            layout.ensure().unwrap();
            let db = store.open();
            let done = task(&db, &layout, 1, Status::Completed);
            let doomed = layout
                .state_dir(DirState::Completed)
                .join(format!("{DELETING_PREFIX}{done}"));
            fs::rename(layout.task_dir(DirState::Completed, &done), &doomed).unwrap();
            let r = cleanup(&db, &layout, 30, false).unwrap();
            assert_eq!(r.leftovers.len(), 1);
            assert!(!doomed.exists());
            assert!(db.get(&done).unwrap().unwrap().files_deleted_at.is_some());
        }
    }
}
