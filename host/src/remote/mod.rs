//! Task directories kept in S3-compatible object storage (`context_storage.remote`): each
//! host's `contexts/` is a working copy, the bucket holds every task directory, PostgreSQL
//! stays the queue and the source of truth for status (DESIGN.md, "Several hosts").
//!
//! - the `context_storage.remote` section (bucket URL, endpoint, region):
//!   [`crate::config::RemoteConfig`];
//! - [`manifest`]: the per-task manifest and the object keys (segments, blobs, indexes);
//! - [`index`]: segment lists sealed into index objects, and read back;
//! - [`store`]: blocking access to the bucket through `object_store`; [`answers`]: what the
//!   store's refusals say that `object_store` drops (`Retry-After`, `Date`);
//! - [`fencing`]: the probe that the store honours conditional writes, else it is refused;
//! - [`sync`]: sync up at a step boundary, fenced by the manifest's epoch and ETag;
//! - [`download`]: a local directory made from a manifest;
//! - [`view`]: task directories for reading (this host's copy when current, else a read-only
//!   copy downloaded on demand).
//!
//! [`TaskSync`] ties them together for one task process: [`TaskSync::claim`] right after the
//! claim (download when this host's copy is not the bucket's, then a new epoch), then
//! [`TaskSync::sync`] at every step boundary and before the task pauses, completes or fails.
//! The manifest this host last synced per task is kept in `contexts/.remote/{uuid}.json`, so a
//! host that still has the latest copy does not download it again.

pub mod answers;
pub mod download;
pub mod fencing;
pub mod index;
pub mod manifest;
pub mod store;
pub mod sync;
pub mod view;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

pub use crate::config::RemoteConfig;
pub use manifest::Manifest;
pub use store::Store;
pub use sync::{Base, Fenced, SyncReport};

use crate::layout::Layout;
use crate::task_dir::TaskDir;
use manifest::{MANIFEST, MAX_MANIFEST_BYTES};

/// Claims in a row that may find the manifest changed under them before [`TaskSync::claim`]
/// gives up.
const CLAIM_ATTEMPTS: u32 = 5;

/// What this host last synced of a task (`contexts/.remote/{uuid}.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct LocalState {
    etag: Option<String>,
    manifest: Manifest,
}

fn state_path(layout: &Layout, uuid: &str) -> PathBuf {
    layout
        .root()
        .join(download::REMOTE_DIR)
        .join(format!("{uuid}.json"))
}

fn read_state(layout: &Layout, uuid: &str) -> Option<LocalState> {
    let bytes = std::fs::read(state_path(layout, uuid)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn write_state(layout: &Layout, uuid: &str, base: &Base) -> anyhow::Result<()> {
    download::work_dir(layout)?;
    let state = LocalState {
        etag: base.etag.clone(),
        manifest: base.manifest.clone(),
    };
    crate::layout::atomic_write(&state_path(layout, uuid), &serde_json::to_vec(&state)?)
}

/// The wait note of task `uuid` (`contexts/.remote/wait/{uuid}`, its folder created): one line
/// saying what its process waits for while the bucket cannot be reached (`object store
/// unreachable: ENDPOINT, retrying (n/N)`), deleted when it no longer waits. Read by
/// [`read_wait_note`] (`ask`, `show --follow`).
pub fn wait_note_path(layout: &Layout, uuid: &str) -> anyhow::Result<PathBuf> {
    let dir = download::work_dir(layout)?.join("wait");
    crate::layout::create_private_dir_all(&dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir.join(uuid))
}

/// The model wait note of task `uuid` (`contexts/.remote/wait/{uuid}.model`, its folder
/// created): one line saying what its LLM calls wait for between attempts (`waiting for the
/// model: stream stalled 120 s, retry 1 of 3`, [`crate::llm::Transport::with_wait_note`]),
/// removed when the attempt waited for ends. Read by [`read_wait_note`].
pub fn model_wait_note_path(layout: &Layout, uuid: &str) -> anyhow::Result<PathBuf> {
    let path = wait_note_path(layout, uuid)?;
    Ok(path.with_file_name(format!("{uuid}.model")))
}

/// What the process of task `uuid` on this host waits for, if anything: the model
/// ([`model_wait_note_path`]) and the object store ([`wait_note_path`]), joined with `; `.
/// Each note is its first line, at most 300 bytes, control characters dropped.
pub fn read_wait_note(layout: &Layout, uuid: &str) -> Option<String> {
    let dir = layout.root().join(download::REMOTE_DIR).join("wait");
    let notes: Vec<String> = [format!("{uuid}.model"), uuid.to_string()]
        .iter()
        .filter_map(|name| read_note(&dir.join(name)))
        .collect();
    (!notes.is_empty()).then(|| notes.join("; "))
}

/// The first line of the note at `path` (at most 300 bytes, control characters dropped).
fn read_note(path: &std::path::Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]);
    let line: String = text
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    (!line.is_empty()).then_some(line)
}

/// The manifest of task `uuid` in the bucket and its ETag; `None` when it has none.
pub fn read_manifest(store: &Store, uuid: &str) -> anyhow::Result<Option<Base>> {
    let Some((bytes, etag)) = store.get(uuid, MANIFEST)? else {
        return Ok(None);
    };
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        anyhow::bail!(
            "task {uuid}: its manifest in {} holds {} bytes, over {MAX_MANIFEST_BYTES}",
            store.url(),
            bytes.len()
        );
    }
    Ok(Some(Base {
        manifest: Manifest::parse(&bytes, uuid)?,
        etag,
    }))
}

/// The open bucket of `cfg`, if one is configured.
pub fn open(cfg: Option<&RemoteConfig>) -> anyhow::Result<Option<Arc<Store>>> {
    cfg.map(|c| Store::open(c).map(Arc::new)).transpose()
}

/// Whether this host's copy `dir` of the task lacks a file of `m`, or holds less of an
/// append-only one than `m` does.
fn lacks_files(dir: &Path, m: &Manifest) -> bool {
    m.files.iter().any(|(name, e)| {
        std::fs::symlink_metadata(dir.join(name))
            .map(|meta| {
                !meta.is_file()
                    || (matches!(e, manifest::FileEntry::Appended { .. }) && meta.len() < e.size())
            })
            .unwrap_or(true)
    })
}

/// The bucket side of one running task, held by its task process.
pub struct TaskSync {
    store: Arc<Store>,
    layout: Layout,
    uuid: String,
    base: Base,
    /// Bytes downloaded by the claim (0: this host's copy was the bucket's).
    downloaded: u64,
}

impl TaskSync {
    /// Right after the claim of task `uuid` by `holder` (`worker:pid`), before anything opens
    /// its directory `dir` (in `running/`): download it when this host's copy is not the one
    /// the bucket's manifest describes, then write the manifest with the next epoch (the
    /// fence: a late write of the previous holder is refused from now on). A task without a
    /// manifest starts from whatever `dir` holds (a new task: nothing).
    pub fn claim(
        store: Arc<Store>,
        layout: &Layout,
        uuid: &str,
        holder: &str,
        dir: &Path,
    ) -> anyhow::Result<TaskSync> {
        // The fence below holds only on a store that honours conditional writes.
        fencing::ensure(&store, layout)?;
        let mut downloaded = 0;
        for _ in 0..CLAIM_ATTEMPTS {
            let remote = read_manifest(&store, uuid)?;
            let local = read_state(layout, uuid);
            let base = match remote {
                Some(r) => {
                    let current = local.as_ref().is_some_and(|l| l.etag == r.etag)
                        && !lacks_files(dir, &r.manifest);
                    if !current {
                        if let Some(copy) = view::take_for_claim(layout, uuid, &r.manifest) {
                            download::swap_in(layout, uuid, &copy, dir)?;
                            tracing::info!(%uuid, version = r.manifest.version,
                                "task directory taken from this host's read-only copy of the same manifest version");
                        } else {
                            downloaded = match download::replace_dir(
                                &store,
                                layout,
                                uuid,
                                &r.manifest,
                                dir,
                            ) {
                                Ok(n) => n,
                                // The previous holder (its lease lost, not knowing yet) committed
                                // a sync meanwhile, deleting what its new manifest no longer
                                // names: start again from that manifest.
                                Err(e)
                                    if e.downcast_ref::<store::Unreachable>().is_none()
                                        && read_manifest(&store, uuid)?
                                            .is_some_and(|now| now.etag != r.etag) =>
                                {
                                    tracing::warn!(%uuid, "the task's manifest changed during its download; reading it again: {e:#}");
                                    continue;
                                }
                                Err(e) => {
                                    return Err(e.context(format!(
                                        "cannot download task {uuid} from {}",
                                        store.url()
                                    )));
                                }
                            };
                            tracing::info!(%uuid, bytes = downloaded, version = r.manifest.version,
                                "task directory downloaded from the bucket");
                        }
                    }
                    r
                }
                None => Base {
                    manifest: Manifest::empty(uuid),
                    etag: None,
                },
            };
            let mut next = base.manifest.clone();
            next.epoch += 1;
            next.version += 1;
            next.holder = holder.to_string();
            next.written_at = crate::db::now_rfc3339();
            next.set_format();
            let bytes = sync::manifest_bytes(&next)?;
            match store.put_manifest(uuid, bytes, base.etag.as_deref())? {
                store::Written::Ok(etag) => {
                    let base = Base {
                        manifest: next,
                        etag,
                    };
                    write_state(layout, uuid, &base)?;
                    return Ok(TaskSync {
                        store,
                        layout: layout.clone(),
                        uuid: uuid.to_string(),
                        base,
                        downloaded,
                    });
                }
                store::Written::Conflict => {
                    tracing::warn!(%uuid, "the task's manifest changed while it was claimed; reading it again");
                }
            }
        }
        anyhow::bail!(
            "task {uuid}: its manifest in {} kept changing during the claim ({CLAIM_ATTEMPTS} attempts)",
            store.url()
        )
    }

    /// Bring the bucket level with `dir` ([`sync::sync_up`]); the local record of the last
    /// sync follows. Errors: [`Fenced`] (another host claimed the task), or an I/O or store
    /// error (the previous sync stays the bucket's state).
    pub fn sync(&mut self, dir: &TaskDir) -> anyhow::Result<SyncReport> {
        let (report, base) = sync::sync_up(
            &self.store,
            &self.uuid,
            dir,
            &self.base,
            &crate::db::now_rfc3339(),
        )?;
        if report.written {
            self.base = base;
            write_state(&self.layout, &self.uuid, &self.base)?;
        }
        Ok(report)
    }

    /// The manifest last synced.
    pub fn manifest(&self) -> &Manifest {
        &self.base.manifest
    }

    /// Bytes of the manifest last synced, as written.
    pub fn manifest_bytes(&self) -> usize {
        sync::manifest_bytes(&self.base.manifest).map_or(0, |b| b.len())
    }

    /// Bytes the claim downloaded (0: this host's copy was already the bucket's).
    pub fn downloaded(&self) -> u64 {
        self.downloaded
    }

    /// The bucket.
    pub fn store(&self) -> &Store {
        &self.store
    }
}

/// How this host's copy of task `uuid` is ahead of the bucket: this host's record of its last
/// sync (`contexts/.remote/{uuid}.json`) names a manifest, and files of its working copy `dir`
/// changed since ([`sync::changed_since`]: a sync that failed, say the final one of a task
/// while the bucket could not be reached), and the bucket's manifest (ETag `bucket_etag`) is
/// still that one. `None`: no record (this host never synced the task), another host wrote
/// the manifest since, or nothing changed. Returns the changed files. Errors: `dir` cannot be
/// read.
pub fn ahead_of_bucket(
    layout: &Layout,
    uuid: &str,
    dir: &Path,
    bucket_etag: Option<&str>,
) -> anyhow::Result<Option<Vec<String>>> {
    let Some(state) = read_state(layout, uuid) else {
        return Ok(None);
    };
    if state.etag.as_deref() != bucket_etag {
        return Ok(None);
    }
    let dir = TaskDir::open(dir).with_context(|| format!("cannot open {}", dir.display()))?;
    let changed = sync::changed_since(&dir, &state.manifest)?;
    Ok((!changed.is_empty()).then_some(changed))
}

/// Upload this host's copy `dir` of task `uuid` (a task no process runs) that is ahead of the
/// bucket ([`ahead_of_bucket`]): a sync based on this host's record of its last sync, so it
/// commits only while the bucket's manifest is still the one this host last wrote, and the
/// record follows. Errors: no record; [`Fenced`] (another host wrote the manifest since: this
/// copy is not the task's latest, nothing is uploaded); an I/O or store error.
pub fn catch_up(
    store: &Store,
    layout: &Layout,
    uuid: &str,
    dir: &Path,
) -> anyhow::Result<SyncReport> {
    let state = read_state(layout, uuid)
        .with_context(|| format!("task {uuid}: this host has no record of a sync of it"))?;
    let base = Base {
        manifest: state.manifest,
        etag: state.etag,
    };
    let dir = TaskDir::open(dir).with_context(|| format!("cannot open {}", dir.display()))?;
    let (report, base) = sync::sync_up(store, uuid, &dir, &base, &crate::db::now_rfc3339())?;
    if report.written {
        write_state(layout, uuid, &base)?;
    }
    Ok(report)
}

/// At worker start: upload this host's copies that are ahead of the bucket
/// ([`ahead_of_bucket`], [`catch_up`]) of the tasks for which `idle` is true (no process runs
/// them: completed, failed or paused), so a final sync that failed does not leave the bucket
/// behind for good. Costs a stat per synced file of each task this host holds a record of;
/// stops at the first bucket that cannot be reached (`ctxhost fsck --repair` does the rest).
/// Returns the tasks uploaded; each failure is logged.
pub fn catch_up_idle(store: &Store, layout: &Layout, idle: impl Fn(&str) -> bool) -> usize {
    let mut uploaded = 0;
    for (path, uuid) in local_records(layout) {
        if !path.is_file() || !idle(&uuid) {
            continue;
        }
        let Some((_, dir)) = layout.find_task_dir(&uuid) else {
            continue;
        };
        let Some(state) = read_state(layout, &uuid) else {
            continue;
        };
        match ahead_of_bucket(layout, &uuid, &dir, state.etag.as_deref()) {
            Ok(Some(_)) => {}
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(%uuid, "cannot compare this host's copy with the bucket: {e:#}");
                continue;
            }
        }
        match catch_up(store, layout, &uuid, &dir) {
            Ok(r) => {
                uploaded += 1;
                tracing::info!(%uuid, objects = r.objects, data_bytes = r.data_bytes,
                    "this host's copy of the task was ahead of the bucket; uploaded");
            }
            Err(e) if e.downcast_ref::<store::Unreachable>().is_some() => {
                tracing::warn!(%uuid, "cannot upload this host's copy, ahead of the bucket: {e:#}; \
                    `ctxhost fsck --repair` on this host uploads it");
                break;
            }
            Err(e) => {
                tracing::warn!(%uuid, "cannot upload this host's copy, ahead of the bucket: {e:#}")
            }
        }
    }
    uploaded
}

/// Delete every object of task `uuid` and this host's record of its last sync and reader's
/// copies ([`forget_local`]). Returns the objects deleted.
pub fn delete_task(store: &Store, layout: &Layout, uuid: &str) -> anyhow::Result<usize> {
    let n = store.delete_task(uuid)?;
    forget_local(layout, uuid)?;
    Ok(n)
}

/// Delete this host's record of the last sync of task `uuid` (`contexts/.remote/{uuid}.json`)
/// and its reader's copies (`contexts/.remote/view/{uuid}`); what is not there is fine.
pub fn forget_local(layout: &Layout, uuid: &str) -> anyhow::Result<()> {
    let state = state_path(layout, uuid);
    match std::fs::remove_file(&state) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot delete {}", state.display())),
    }
    let views = view::views_of(layout, uuid);
    match std::fs::remove_dir_all(&views) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot delete {}", views.display())),
    }
}

/// This host's local records of tasks kept in the bucket: each record of a last sync
/// (`contexts/.remote/{uuid}.json`) and each folder of reader's copies
/// (`contexts/.remote/view/{uuid}`), with the task's UUID, sorted.
pub fn local_records(layout: &Layout) -> Vec<(PathBuf, String)> {
    let root = layout.root().join(download::REMOTE_DIR);
    let mut out = Vec::new();
    let entries = |dir: &Path| {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| (e.path(), e.file_name().to_string_lossy().into_owned()))
            .collect::<Vec<_>>()
    };
    for (path, name) in entries(&root) {
        if let Some(stem) = name.strip_suffix(".json")
            && crate::layout::parse_uuid(stem).is_ok_and(|u| u == stem)
        {
            out.push((path, stem.to_string()));
        }
    }
    for (path, name) in entries(&root.join("view")) {
        if path.is_dir() && crate::layout::parse_uuid(&name).is_ok_and(|u| u == name) {
            out.push((path, name));
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests;
