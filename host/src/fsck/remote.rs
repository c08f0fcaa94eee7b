//! `ctxhost fsck` with task directories kept in a bucket (`context_storage.remote`): compare
//! each task's manifest, its objects and its row.
//!
//! - a task that has run (it has a `started_at`) and whose files were not deleted has a
//!   manifest that parses ([`ProblemKind::RemoteManifest`]);
//! - every object the manifest names exists with the size it says
//!   ([`ProblemKind::RemoteObject`]);
//! - a task whose files `ctxhost cleanup` deleted has no objects left
//!   ([`ProblemKind::RemoteLeftover`]; `--repair` deletes them).
//!
//! On a working copy, a task's directory need not be here: the local checks' "missing
//! directory" and "directory in the wrong folder" are dropped for a task whose manifest is in
//! the bucket and that this host is not running (its local copy is a stale one, replaced
//! at the next claim here).

use std::collections::BTreeMap;

use super::{FsckReport, Problem, ProblemKind, problem};
use crate::db::{Db, TaskFilter};
use crate::remote::Store;
use crate::remote::manifest::MANIFEST;

/// Add the bucket's problems to `report` (first pass and remaining), after dropping the local
/// ones a working copy does not have; with `repair`, delete the objects of tasks whose files
/// were deleted.
pub fn check(
    report: &mut FsckReport,
    db: &Db,
    layout: &crate::layout::Layout,
    store: &Store,
    repair: bool,
) -> anyhow::Result<()> {
    let mut found = Vec::new();
    let mut in_bucket = std::collections::BTreeSet::new();
    for row in db.list(&TaskFilter::default())? {
        let uuid = row.uuid.as_str();
        let objects: BTreeMap<String, u64> = store.list(uuid)?.into_iter().collect();
        let shown = format!("{}/tasks/{uuid}", store.url().trim_end_matches('/'));
        if row.files_deleted_at.is_some() {
            if !objects.is_empty() {
                let mut p = problem(
                    ProblemKind::RemoteLeftover,
                    Some(uuid),
                    Some(std::path::Path::new(&shown)),
                    None,
                    format!(
                        "the task's files were deleted but {} object(s) of it are left in the bucket",
                        objects.len()
                    ),
                    true,
                );
                if repair {
                    let n = crate::remote::delete_task(store, layout, uuid)?;
                    p.repaired = Some(format!("deleted {n} object(s)"));
                }
                found.push(p);
            }
            continue;
        }
        if !objects.contains_key(MANIFEST) {
            if row.started_at.is_some() {
                found.push(problem(
                    ProblemKind::RemoteManifest,
                    Some(uuid),
                    Some(std::path::Path::new(&shown)),
                    None,
                    "the task has run but the bucket holds no manifest of it (its host never synced it, or it was deleted)",
                    false,
                ));
            }
            continue;
        }
        let manifest = match crate::remote::read_manifest(store, uuid) {
            Ok(Some(b)) => b.manifest,
            Ok(None) => continue,
            Err(e) => {
                found.push(problem(
                    ProblemKind::RemoteManifest,
                    Some(uuid),
                    Some(std::path::Path::new(&shown)),
                    None,
                    format!("{e:#}"),
                    false,
                ));
                continue;
            }
        };
        in_bucket.insert(uuid.to_string());
        for (key, size) in manifest.objects() {
            match objects.get(&key) {
                Some(s) if *s == size => {}
                Some(s) => found.push(problem(
                    ProblemKind::RemoteObject,
                    Some(uuid),
                    Some(std::path::Path::new(&format!("{shown}/{key}"))),
                    None,
                    format!(
                        "holds {s} bytes, the manifest (version {}) says {size}",
                        manifest.version
                    ),
                    false,
                )),
                None => found.push(problem(
                    ProblemKind::RemoteObject,
                    Some(uuid),
                    Some(std::path::Path::new(&format!("{shown}/{key}"))),
                    None,
                    format!(
                        "is missing, though the manifest (version {}) names it",
                        manifest.version
                    ),
                    false,
                )),
            }
        }
    }
    let host = crate::host::ThisHost::current();
    let running_here = |uuid: &str| {
        db.get(uuid).ok().flatten().is_some_and(|r| {
            r.status == crate::db::Status::Running
                && host.recorded(r.hostname.as_deref(), r.host_id.as_deref())
        })
    };
    let local_only = |p: &Problem| {
        matches!(p.kind, ProblemKind::MissingDir | ProblemKind::DirMismatch)
            && p.uuid
                .as_deref()
                .is_some_and(|u| in_bucket.contains(u) && !running_here(u))
    };
    report.problems.retain(|p| !local_only(p));
    report.remaining.retain(|p| !local_only(p));
    report
        .remaining
        .extend(found.iter().filter(|p| p.repaired.is_none()).cloned());
    report.problems.extend(found);
    Ok(())
}
