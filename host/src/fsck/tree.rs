//! The rows against the tree: every task directory found, where each row's status keeps it
//! ([`crate::lifecycle::dir_fix`]), processes that are gone, directories without a row, entries
//! that are not task directories, interrupted cleanups; the modes of `contexts/`, its folders,
//! `.cache/`, store.json and tasks.db.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use super::{Pass, Problem, ProblemKind, files, problem};
use crate::db::{DB_FILE, Db, Dialect, Status, TaskRow};
use crate::layout::{DELETING_PREFIX, DirState, Layout, parse_uuid};
use crate::lifecycle::{self, DirFix};
use crate::recovery::process_runs_task;

/// The modes of what `contexts/` holds outside the task directories: the folder itself, its
/// state folders, `.cache/` and its files, store.json, and on SQLite tasks.db and its WAL files.
fn check_tree_modes(db: &Db, layout: &Layout, problems: &mut Vec<Problem>) {
    let mut paths: Vec<PathBuf> = vec![layout.root().to_path_buf()];
    paths.extend(DirState::ALL.iter().map(|s| layout.state_dir(*s)));
    let cache = layout.cache_dir();
    paths.push(cache.clone());
    if let Ok(entries) = fs::read_dir(&cache) {
        let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        files.sort();
        paths.extend(files);
    }
    // contexts/store.json (which store the tree belongs to) on either store.
    paths.push(crate::db::binding::store_file(layout.root()));
    if db.dialect() == Dialect::Sqlite {
        let db_path = layout.root().join(DB_FILE);
        for suffix in ["", "-wal", "-shm"] {
            let mut p = db_path.clone().into_os_string();
            p.push(suffix);
            paths.push(PathBuf::from(p));
        }
    }
    for path in paths {
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            continue;
        }
        if let Some(p) = files::loose_mode(&path, None, meta.permissions().mode(), meta.is_dir()) {
            problems.push(p);
        }
    }
}

/// One read-only pass over the rows and the tree.
pub(crate) fn check(db: &Db, layout: &Layout) -> anyhow::Result<Pass> {
    let me = crate::host::ThisHost::current();
    let host = &me.name;
    let rows: Vec<TaskRow> = db.list(&Default::default())?;
    let now_ms = db.now_ms()?;
    let mut problems = Vec::new();
    check_tree_modes(db, layout, &mut problems);

    // Where each task directory is.
    let mut found: BTreeMap<String, Vec<DirState>> = BTreeMap::new();
    for state in DirState::ALL {
        let folder = layout.state_dir(state);
        let entries = match fs::read_dir(&folder) {
            Ok(e) => e,
            Err(e) => {
                problems.push(problem(
                    ProblemKind::Unreadable,
                    None,
                    Some(&folder),
                    None,
                    format!("cannot list: {e}"),
                    false,
                ));
                continue;
            }
        };
        let mut names: Vec<(String, PathBuf)> = entries
            .flatten()
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
            .collect();
        names.sort();
        for (name, path) in names {
            if state == DirState::Completed && name.starts_with(DELETING_PREFIX) {
                let uuid = parse_uuid(&name[DELETING_PREFIX.len()..]).ok();
                problems.push(problem(
                    ProblemKind::InterruptedCleanup,
                    uuid.as_deref(),
                    Some(&path),
                    None,
                    "left by an interrupted `ctxhost cleanup`; run it again (or `ctxhost fsck --repair`) to finish deleting it",
                    uuid.is_some(),
                ));
            } else if parse_uuid(&name).ok().as_deref() == Some(name.as_str()) && path.is_dir() {
                found.entry(name).or_default().push(state);
            } else {
                problems.push(problem(
                    ProblemKind::NotATaskDir,
                    None,
                    Some(&path),
                    None,
                    "not a task directory (task directories are named by their UUID)",
                    false,
                ));
            }
        }
    }
    let dirs = found.values().map(Vec::len).sum();

    let mut with_row = BTreeSet::new();
    for row in &rows {
        let uuid = row.uuid.as_str();
        with_row.insert(uuid.to_string());
        let states = found.get(uuid).cloned().unwrap_or_default();
        // Only a process of this very host (name and identity) can be checked here.
        let on_this_host = me.recorded(row.hostname.as_deref(), row.host_id.as_deref());
        let expired = row.lease_expires_at.is_none_or(|t| t < now_ms);
        let alive = row.status == Status::Running
            && match (on_this_host, row.process_id) {
                (true, Some(p)) => process_runs_task(p, uuid, row.worker_id.as_deref()),
                // Held by a recovery, or on another host: the lease tells.
                _ => !expired,
            };
        if row.status == Status::Running && !alive {
            problems.push(match (on_this_host, row.process_id) {
                (true, Some(p)) => problem(
                    ProblemKind::DeadProcess,
                    Some(uuid),
                    None,
                    None,
                    format!(
                        "running, but its process {p} on {host} is gone (the worker or `ctxhost recover` repairs and requeues it)"
                    ),
                    true,
                ),
                _ => problem(
                    ProblemKind::ExpiredLease,
                    Some(uuid),
                    None,
                    None,
                    format!(
                        "running, but its lease {} (worker {}, task process {} on {}): any worker, or `ctxhost recover` on any host, repairs and requeues it",
                        match row.lease_expires_at {
                            Some(t) => format!("expired {:.1} s ago", (now_ms - t) as f64 / 1000.0),
                            None => "is missing".to_string(),
                        },
                        row.worker_id.as_deref().unwrap_or("?"),
                        row.process_id.map(|p| p.to_string()).unwrap_or_else(|| "?".into()),
                        row.hostname.as_deref().unwrap_or("?")
                    ),
                    true,
                ),
            });
        }
        if states.len() > 1 {
            let list: Vec<String> = states.iter().map(|s| format!("{s}/")).collect();
            problems.push(problem(
                ProblemKind::DuplicateDir,
                Some(uuid),
                None,
                None,
                format!(
                    "has a directory in more than one place: {}",
                    list.join(", ")
                ),
                false,
            ));
            continue;
        }
        let here = states.first().copied();
        let rule = lifecycle::dir_rule(row.status);
        let deleted = row.files_deleted_at.is_some();
        match lifecycle::dir_fix(row.status, deleted, &states) {
            // A running task: its process owns the directory (it may not have created it
            // yet, or be taking it back from paused/).
            _ if row.status == Status::Running => {
                if alive && here == Some(DirState::Completed) {
                    problems.push(problem(
                        ProblemKind::DirMismatch,
                        Some(uuid),
                        Some(&layout.task_dir(DirState::Completed, uuid)),
                        None,
                        "status running but the directory is in completed/",
                        false,
                    ));
                }
            }
            DirFix::InPlace => {
                // A task that ran had a directory: only cleanup removes a finished one.
                if here.is_none() && row.status.is_final() && row.started_at.is_some() && !deleted
                {
                    problems.push(missing(uuid, row.status, rule.folder));
                }
            }
            DirFix::Missing | DirFix::Create => {
                problems.push(missing(uuid, row.status, rule.folder));
            }
            DirFix::Move { from, to } => problems.push(problem(
                ProblemKind::InterruptedTransition,
                Some(uuid),
                Some(&layout.task_dir(from, uuid)),
                None,
                format!(
                    "status {} but the directory is still in {from}/ (expected {to}/): a transition interrupted between writing the row and moving the directory; recovery finishes it",
                    row.status
                ),
                true,
            )),
            DirFix::Delete { from } => problems.push(problem(
                ProblemKind::InterruptedCleanup,
                Some(uuid),
                Some(&layout.task_dir(from, uuid)),
                None,
                "its files are marked deleted but the directory is still there: a `ctxhost cleanup` interrupted half-way; run it again to finish deleting it",
                true,
            )),
            DirFix::Unexplained { at } => problems.push(problem(
                ProblemKind::DirMismatch,
                Some(uuid),
                Some(&layout.task_dir(at, uuid)),
                None,
                format!(
                    "status {} but the directory is in {at}/ (expected {}/), where no transition into {} leaves it",
                    row.status, rule.folder, row.status
                ),
                true,
            )),
            DirFix::Duplicate => {}
        }
        if let Some(state) = here {
            let dir = layout.task_dir(state, uuid);
            let rules = super::FileRules::for_status(row.status);
            files::check_dir(&dir, Some(uuid), alive, &rules, &mut problems);
        }
    }
    for (uuid, states) in &found {
        if with_row.contains(uuid) {
            continue;
        }
        for state in states {
            let dir = layout.task_dir(*state, uuid);
            problems.push(problem(
                ProblemKind::DirWithoutRow,
                Some(uuid),
                Some(&dir),
                None,
                format!("no row in {}", db.location()),
                false,
            ));
            files::check_dir(
                &dir,
                Some(uuid),
                false,
                &super::FileRules::lenient(),
                &mut problems,
            );
        }
    }
    Ok(Pass {
        tasks: rows.len(),
        dirs,
        problems,
    })
}

/// A [`ProblemKind::MissingDir`] of task `uuid` with `status`, expected in `folder/`.
fn missing(uuid: &str, status: Status, folder: DirState) -> Problem {
    problem(
        ProblemKind::MissingDir,
        Some(uuid),
        None,
        None,
        format!("status {status} but its directory is missing (expected {folder}/)"),
        false,
    )
}
