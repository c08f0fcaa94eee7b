//! Task directories for reading (`show`, the dashboard, context inheritance) on a host whose
//! `contexts/` is a working copy of the bucket: this host's own copy while it is the bucket's,
//! else a read-only copy downloaded from the bucket on demand.
//!
//! A downloaded copy is kept as `contexts/.remote/view/{uuid}/{version}` (`version`: the
//! manifest's, 12 digits), made whole beside it and then renamed into place, so a reader never
//! sees half of one and two readers downloading at once both end with the same copy. It is a
//! cache: the next reader of the same manifest version reuses it without downloading; a newer
//! version replaces it (older versions are deleted once the newer one is in place).
//!
//! **Readers never touch the working copy.** The folders `running/`, `paused/` and
//! `completed/` hold only what this host's own task processes synced or claimed (their record
//! is `contexts/.remote/{uuid}.json`); a reader's copy lives apart, so it can never be taken
//! for a working copy with newer state. A claim may adopt a reader's copy instead of
//! downloading ([`take_for_claim`]) only when it is of exactly the manifest version the claim
//! read and every file has the size that manifest gives; the claim's conditional manifest write
//! then fences it as it fences any download (a manifest changed in between makes the claim
//! read it again and download).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::manifest::Manifest;
use super::{Store, download, read_manifest, read_state};
use crate::layout::{DirState, Layout};

/// Where the directory of a task is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// This host's working copy, in this state folder.
    Local(DirState),
    /// A read-only copy downloaded from the bucket (`contexts/.remote/view/…`).
    Bucket,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Local(s) => write!(f, "{s}"),
            Source::Bucket => f.write_str("bucket"),
        }
    }
}

/// `contexts/.remote/view/{uuid}`: the read-only copies of task `uuid`.
pub fn views_of(layout: &Layout, uuid: &str) -> PathBuf {
    layout
        .root()
        .join(download::REMOTE_DIR)
        .join("view")
        .join(uuid)
}

fn version_name(version: u64) -> String {
    format!("{version:012}")
}

/// The directory to read task `uuid` from on this host, and where it is: this host's working
/// copy when there is no bucket (`store` `None`), when the bucket has no manifest for the task,
/// or when this host synced or downloaded the bucket's latest manifest itself (a task running
/// here is always so); else the read-only copy of the bucket's latest manifest, downloaded if
/// this host does not hold it yet. `None`: the task has no directory here nor in the bucket.
/// Errors: the bucket cannot be read, or an object does not match its manifest.
pub fn for_reading(
    store: Option<&Store>,
    layout: &Layout,
    uuid: &str,
) -> anyhow::Result<Option<(Source, PathBuf)>> {
    let local = layout
        .find_task_dir(uuid)
        .map(|(s, d)| (Source::Local(s), d));
    let Some(store) = store else {
        return Ok(local);
    };
    // The task may be running elsewhere: a sync that commits during the download deletes what
    // its new manifest no longer names; the download then starts again from the new manifest.
    let mut tries = 0;
    loop {
        tries += 1;
        let Some(remote) = read_manifest(store, uuid)? else {
            return Ok(local);
        };
        if local.is_some() && read_state(layout, uuid).is_some_and(|l| l.etag == remote.etag) {
            return Ok(local);
        }
        match copy_of(store, layout, uuid, &remote.manifest) {
            Ok(dir) => return Ok(Some((Source::Bucket, dir))),
            Err(e)
                if tries < 3
                    && e.downcast_ref::<super::store::Unreachable>().is_none()
                    && read_manifest(store, uuid)?.is_some_and(|now| now.etag != remote.etag) =>
            {
                tracing::debug!(%uuid, "the manifest changed during the download; again: {e:#}");
            }
            Err(e) => {
                return Err(e.context(format!("cannot download task {uuid} from {}", store.url())));
            }
        }
    }
}

/// The read-only copy of task `uuid` as manifest `m` describes it, downloaded unless this
/// host holds it already; older copies are deleted once it is in place.
fn copy_of(store: &Store, layout: &Layout, uuid: &str, m: &Manifest) -> anyhow::Result<PathBuf> {
    let views = views_of(layout, uuid);
    let dir = views.join(version_name(m.version));
    if !dir.is_dir() {
        crate::layout::create_private_dir_all(&views)
            .with_context(|| format!("cannot create {}", views.display()))?;
        let work = download::work_dir(layout)?;
        let nonce = &uuid::Uuid::new_v4().simple().to_string()[..8];
        let fresh = work.join(format!("view-{uuid}-{nonce}"));
        if let Err(e) = download::download_into(store, uuid, m, &fresh) {
            let _ = fs::remove_dir_all(&fresh);
            return Err(e);
        }
        if let Err(e) = fs::rename(&fresh, &dir) {
            // Another reader put the same version in place first: same files, use theirs.
            let _ = fs::remove_dir_all(&fresh);
            if !dir.is_dir() {
                return Err(e).with_context(|| format!("cannot move a copy to {}", dir.display()));
            }
        }
        crate::layout::sync_dir(&views)?;
    }
    remove_older(&views, m.version);
    Ok(dir)
}

/// Delete the copies in `views` older than `version` (and anything else that is not a copy).
/// A reader still inside one keeps its open files; a failure only leaves it for the next time.
fn remove_older(views: &Path, version: u64) {
    let Ok(entries) = fs::read_dir(views) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let older = name.parse::<u64>().map_or(true, |v| v < version);
        if older {
            let p = e.path();
            let _ = if p.is_dir() {
                fs::remove_dir_all(&p)
            } else {
                fs::remove_file(&p)
            };
        }
    }
}

/// For a claim of task `uuid` that read manifest `m`: this host's read-only copy of exactly
/// that version, moved out of the cache (readers download again) into a folder of its own
/// under `contexts/.remote/`, ready to be swapped in as the working copy. `None` (download
/// instead) when there is no such copy, or a file of `m` is missing from it or has another
/// size, or it holds a file `m` does not list.
pub fn take_for_claim(layout: &Layout, uuid: &str, m: &Manifest) -> Option<PathBuf> {
    let dir = views_of(layout, uuid).join(version_name(m.version));
    if !dir.is_dir() || !matches_sizes(&dir, m) {
        return None;
    }
    let work = download::work_dir(layout).ok()?;
    let nonce = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let taken = work.join(format!("download-{uuid}-{nonce}"));
    fs::rename(&dir, &taken).ok()?;
    // Checked again once it is ours: a reader cannot have changed it in between, but the
    // check costs a stat per file.
    if matches_sizes(&taken, m) {
        Some(taken)
    } else {
        let _ = fs::remove_dir_all(&taken);
        None
    }
}

/// Whether `dir` holds exactly the files of `m`, each a regular file of the size `m` gives.
fn matches_sizes(dir: &Path, m: &Manifest) -> bool {
    let sizes_match = m.files.iter().all(|(name, e)| {
        fs::symlink_metadata(dir.join(name))
            .is_ok_and(|meta| meta.is_file() && meta.len() == e.size())
    });
    sizes_match && count_files(dir) == Some(m.files.len())
}

/// Regular files under `dir` (`None`: something else than files and folders, or unreadable).
fn count_files(dir: &Path) -> Option<usize> {
    let mut n = 0;
    for e in fs::read_dir(dir).ok()?.flatten() {
        let t = e.file_type().ok()?;
        if t.is_dir() {
            n += count_files(&e.path())?;
        } else if t.is_file() {
            n += 1;
        } else {
            return None;
        }
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::os::unix::fs::MetadataExt as _;

    use super::*;
    use crate::remote::TaskSync;
    use crate::remote::tests::{host, test_store};
    use crate::task_dir::TaskDir;

    fn append(dir: &Path, line: &str) {
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("messages.jsonl"))
            .unwrap();
        f.write_all(line.as_bytes()).unwrap();
    }

    fn history(dir: &Path) -> String {
        fs::read_to_string(dir.join("messages.jsonl")).unwrap()
    }

    #[cfg_attr(
        not(ctxhost_s3_tests),
        ignore = "needs CTXHOST_TEST_S3_URL (scripts/test-s3.sh start)"
    )]
    #[test]
    fn a_readers_copy_is_reused_and_a_claim_takes_it_only_at_the_bucket_s_version() {
        let store = test_store();
        let (_a, host_a) = host();
        let (_b, host_b) = host();
        let uuid = uuid::Uuid::new_v4().hyphenated().to_string();
        let dir_a = host_a.task_dir(DirState::Running, &uuid);
        crate::layout::create_private_dir_all(&dir_a).unwrap();
        append(&dir_a, "{\"seq\":1}\n");
        let mut a = TaskSync::claim(store.clone(), &host_a, &uuid, "a/1", &dir_a).unwrap();
        a.sync(&TaskDir::open(&dir_a).unwrap()).unwrap();

        // Host a reads its own copy; host b a copy of the bucket's, reused while it holds.
        let (src, path) = for_reading(Some(&store), &host_a, &uuid).unwrap().unwrap();
        assert_eq!(
            (src, path),
            (Source::Local(DirState::Running), dir_a.clone())
        );
        let (src, first) = for_reading(Some(&store), &host_b, &uuid).unwrap().unwrap();
        assert_eq!(src, Source::Bucket);
        assert_eq!(history(&first), "{\"seq\":1}\n");
        let inode = fs::metadata(first.join("messages.jsonl")).unwrap().ino();
        let (_, again) = for_reading(Some(&store), &host_b, &uuid).unwrap().unwrap();
        assert_eq!(again, first);
        assert_eq!(
            fs::metadata(again.join("messages.jsonl")).unwrap().ino(),
            inode,
            "not downloaded again"
        );

        // A newer version replaces it.
        append(&dir_a, "{\"seq\":2}\n");
        a.sync(&TaskDir::open(&dir_a).unwrap()).unwrap();
        let (_, second) = for_reading(Some(&store), &host_b, &uuid).unwrap().unwrap();
        assert_ne!(second, first);
        assert!(!first.exists(), "the older copy is deleted");
        assert_eq!(history(&second), "{\"seq\":1}\n{\"seq\":2}\n");

        // Host a appends a step it never syncs (it dies). Host b's copy is of the bucket's
        // version: its claim takes it, downloading nothing, and holds what the bucket holds.
        append(&dir_a, "{\"seq\":3,\"unsynced\":true}\n");
        let dir_b = host_b.task_dir(DirState::Running, &uuid);
        let mut b = TaskSync::claim(store.clone(), &host_b, &uuid, "b/1", &dir_b).unwrap();
        assert_eq!(b.downloaded(), 0);
        assert_eq!(history(&dir_b), "{\"seq\":1}\n{\"seq\":2}\n");
        assert!(!second.exists(), "taken out of the reader's cache");

        // Host a reads a copy now (b's claim changed the manifest), then b syncs a step: a's
        // claim does not take its older copy, it downloads b's state.
        let (src, stale) = for_reading(Some(&store), &host_a, &uuid).unwrap().unwrap();
        assert_eq!(src, Source::Bucket);
        append(&dir_b, "{\"seq\":3}\n");
        b.sync(&TaskDir::open(&dir_b).unwrap()).unwrap();
        let a2 = TaskSync::claim(store.clone(), &host_a, &uuid, "a/2", &dir_a).unwrap();
        assert!(a2.downloaded() > 0);
        assert_eq!(history(&dir_a), "{\"seq\":1}\n{\"seq\":2}\n{\"seq\":3}\n");
        assert!(stale.exists(), "the older copy is left to the next reader");
        crate::remote::delete_task(&store, &host_a, &uuid).unwrap();
        assert!(!views_of(&host_a, &uuid).exists());
    }
}
