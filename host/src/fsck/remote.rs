//! `ctxhost fsck` with task directories kept in a bucket (`context_storage.remote`): compare
//! each task's manifest, its objects and its row.
//!
//! - a task that has run (it has a `started_at`) and whose files were not deleted has a
//!   manifest that parses ([`ProblemKind::RemoteManifest`]);
//! - every object the manifest names, directly or through its index objects (each read and
//!   its SHA-256 checked), exists with the size it says ([`ProblemKind::RemoteObject`]); with
//!   `--deep`, every segment and blob is downloaded (streamed, memory bounded by a chunk) and
//!   its SHA-256 compared with the manifest's, so a same-size object with other bytes is found
//!   too. Off by default: it reads the whole bucket (egress costs on a cloud store);
//! - no object of a task is named by nothing ([`ProblemKind::RemoteUnreferenced`]: written by
//!   a sync that did not commit — a crash mid-sync, a host fenced out; not reported while
//!   young for a running task, whose sync may be committing it; `--repair` deletes those older
//!   than [`UNREFERENCED_GRACE_SECS`], which no sync can still be committing);
//! - a task whose files `ctxhost cleanup` deleted has no objects left
//!   ([`ProblemKind::RemoteLeftover`]; `--repair` deletes them).
//!
//! On a working copy, a task's directory need not be here: the local checks' "missing
//! directory" and "directory in the wrong folder" are dropped for a task whose manifest is in
//! the bucket and that this host is not running (its local copy is a stale one, replaced
//! at the next claim here).

use std::collections::BTreeMap;

use sha2::Digest as _;

use super::{FsckReport, Problem, ProblemKind, problem};
use crate::db::{Db, TaskFilter};
use crate::remote::Store;
use crate::remote::manifest::MANIFEST;
use crate::remote::store::Sink;

/// Age after which an object no manifest names is deleted by `--repair`: a sync writes its
/// objects and then its manifest within seconds (its retries are bounded by
/// `context_storage.remote.retry_secs`, at most an hour).
pub const UNREFERENCED_GRACE_SECS: i64 = 2 * 3600;

/// A download that is only hashed.
struct Hasher {
    h: sha2::Sha256,
}

impl Sink for Hasher {
    fn restart(&mut self) -> std::io::Result<()> {
        self.h = sha2::Sha256::new();
        Ok(())
    }

    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.h.update(bytes);
        Ok(())
    }
}

/// Add the bucket's problems to `report` (first pass and remaining), after dropping the local
/// ones a working copy does not have; with `repair`, delete the objects of tasks whose files
/// were deleted.
pub fn check(
    report: &mut FsckReport,
    db: &Db,
    layout: &crate::layout::Layout,
    store: &Store,
    repair: bool,
    deep: bool,
) -> anyhow::Result<()> {
    let mut found = Vec::new();
    let mut in_bucket = std::collections::BTreeSet::new();
    for row in db.list(&TaskFilter::default())? {
        let uuid = row.uuid.as_str();
        let mut listed = store.list_objects(uuid)?;
        let mut objects: BTreeMap<String, u64> =
            listed.iter().map(|l| (l.rel.clone(), l.size)).collect();
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
            Ok(Some(b)) => {
                let mut manifest = b.manifest;
                if row.status != crate::db::Status::Running
                    && let Some(p) = behind(layout, store, uuid, b.etag.as_deref(), repair)
                {
                    // Uploaded: its objects are checked against the manifest written now, and listed again.
                    if p.repaired.is_some()
                        && let Ok(Some(now)) = crate::remote::read_manifest(store, uuid)
                    {
                        manifest = now.manifest;
                        listed = store.list_objects(uuid)?;
                        objects = listed.iter().map(|l| (l.rel.clone(), l.size)).collect();
                    }
                    found.push(p);
                }
                manifest
            }
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
        let at = |key: &str| format!("{shown}/{key}");
        let named = match crate::remote::index::objects(store, uuid, &manifest) {
            Ok(n) => n,
            Err(e) => {
                // An index object missing or not the one named: what it lists is unknown, so
                // only what the manifest names directly is checked, and nothing is called
                // unreferenced.
                found.push(problem(
                    ProblemKind::RemoteObject,
                    Some(uuid),
                    Some(std::path::Path::new(&shown)),
                    None,
                    format!("{e:#}"),
                    false,
                ));
                for (key, size) in manifest.objects() {
                    if objects.get(&key) != Some(&size) {
                        found.push(problem(
                            ProblemKind::RemoteObject,
                            Some(uuid),
                            Some(std::path::Path::new(&at(&key))),
                            None,
                            format!(
                                "is missing or not {size} bytes, as the manifest (version {}) says",
                                manifest.version
                            ),
                            false,
                        ));
                    }
                }
                continue;
            }
        };
        for (key, n) in &named {
            let problem_at = |message: String| {
                problem(
                    ProblemKind::RemoteObject,
                    Some(uuid),
                    Some(std::path::Path::new(&at(key))),
                    None,
                    message,
                    false,
                )
            };
            match objects.get(key) {
                Some(s) if *s == n.size => {
                    // Index objects were hashed when read; with --deep, every object is.
                    if deep && !key.starts_with("idx/") {
                        let mut h = Hasher {
                            h: sha2::Sha256::new(),
                        };
                        let sha = match store.get_to(uuid, key, &mut h)? {
                            Some(_) => Some(crate::remote::download::hex(&h.h.finalize())),
                            None => None,
                        };
                        match sha {
                            Some(sha) if sha == n.sha256 => {}
                            Some(sha) => found.push(problem_at(format!(
                                "has SHA-256 {sha}, the manifest (version {}) says {}: its bytes were changed",
                                manifest.version, n.sha256
                            ))),
                            None => found.push(problem_at(format!(
                                "is missing, though the manifest (version {}) names it",
                                manifest.version
                            ))),
                        }
                    }
                }
                Some(s) => found.push(problem_at(format!(
                    "holds {s} bytes, the manifest (version {}) says {}",
                    manifest.version, n.size
                ))),
                None => found.push(problem_at(format!(
                    "is missing, though the manifest (version {}) names it",
                    manifest.version
                ))),
            }
        }
        let now = chrono::Utc::now();
        for l in &listed {
            if l.rel == MANIFEST || named.contains_key(&l.rel) {
                continue;
            }
            let old = (now - l.modified).num_seconds() >= UNREFERENCED_GRACE_SECS;
            // A running task's sync may be about to commit a young one: not a problem yet.
            if !old && row.status == crate::db::Status::Running {
                continue;
            }
            let mut p = problem(
                ProblemKind::RemoteUnreferenced,
                Some(uuid),
                Some(std::path::Path::new(&at(&l.rel))),
                None,
                format!(
                    "no manifest names it ({} bytes, written {}): left by a sync that did not commit{}",
                    l.size,
                    l.modified
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    if old {
                        ""
                    } else {
                        "; --repair deletes it once it is 2 hours old (a sync may still be committing it)"
                    }
                ),
                old,
            );
            if repair && old {
                store.delete(uuid, &l.rel)?;
                p.repaired = Some("deleted the object".to_string());
            }
            found.push(p);
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

/// [`ProblemKind::RemoteBehind`] for task `uuid` (not running) when this host's copy is ahead
/// of the bucket's manifest (ETag `etag`); with `repair`, uploaded by a fenced sync
/// ([`crate::remote::catch_up`]).
fn behind(
    layout: &crate::layout::Layout,
    store: &Store,
    uuid: &str,
    etag: Option<&str>,
    repair: bool,
) -> Option<Problem> {
    let (_, dir) = layout.find_task_dir(uuid)?;
    let changed = match crate::remote::ahead_of_bucket(layout, uuid, &dir, etag) {
        Ok(Some(c)) => c,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(%uuid, "cannot compare this host's copy with the bucket: {e:#}");
            return None;
        }
    };
    let mut p = problem(
        ProblemKind::RemoteBehind,
        Some(uuid),
        Some(&dir),
        None,
        format!(
            "this host's copy is ahead of the bucket ({} changed since the last sync: {}); \
             other hosts read the older copy; `ctxhost fsck --repair` on this host uploads it",
            changed.len(),
            changed.join(", ")
        ),
        true,
    );
    if repair {
        match crate::remote::catch_up(store, layout, uuid, &dir) {
            Ok(r) => {
                p.repaired = Some(format!(
                    "uploaded {} object(s), {} byte(s)",
                    r.objects, r.data_bytes
                ))
            }
            Err(e) => p.message.push_str(&format!("; not uploaded: {e:#}")),
        }
    }
    Some(p)
}
