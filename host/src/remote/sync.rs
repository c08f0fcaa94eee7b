//! Sync up: bring a task's objects in the bucket level with its local directory at a step
//! boundary, uploading only what changed since the last sync (the manifest of the last sync is
//! the base): for an append-only file, one new segment of the bytes appended; for a replaced
//! file, one blob when its content hash changed; then the manifest, last, with a conditional
//! PUT on the ETag of the base. A refused write whose manifest now carries a newer epoch means
//! another host claimed the task: [`Fenced`].

use std::collections::BTreeMap;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::os::unix::fs::MetadataExt as _;

use anyhow::Context as _;

use super::manifest::{
    FileEntry, Kind, MANIFEST, Manifest, Segment, TAIL_BYTES, blob_key, kind_of, segment_key,
    sha256_hex,
};
use super::store::{Store, Written};
use crate::task_dir::{TaskDir, file_id};

/// The manifest of a task was written by a newer claim than this host's: the task is another
/// host's now, and nothing of this one's was written over it.
#[derive(Debug, thiserror::Error)]
#[error(
    "task {uuid}: the bucket's manifest belongs to {holder} (epoch {theirs}, this process holds epoch {ours}): this host lost the task and writes nothing more"
)]
pub struct Fenced {
    /// The task.
    pub uuid: String,
    /// Who holds it now.
    pub holder: String,
    /// The manifest's epoch.
    pub theirs: u64,
    /// This writer's epoch.
    pub ours: u64,
}

/// What one sync did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// A new manifest was written (`false`: nothing had changed).
    pub written: bool,
    /// Segment and blob objects uploaded.
    pub objects: usize,
    /// Bytes of those objects.
    pub data_bytes: u64,
    /// Index objects written (segment lists sealed: [`super::index::seal`]).
    pub indexes: usize,
    /// Bytes of those index objects.
    pub index_bytes: u64,
    /// Bytes of the manifest written (0 when none was).
    pub manifest_bytes: u64,
}

/// The base of the next sync: the manifest last written or read, and its ETag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base {
    /// The manifest.
    pub manifest: Manifest,
    /// Its ETag in the bucket (`None`: there is no manifest yet).
    pub etag: Option<String>,
}

/// One file of the local directory, as found.
struct Local {
    name: String,
    len: u64,
    mtime_ns: i64,
    id: String,
}

/// The regular files of `dir` that are synced ([`kind_of`] not [`Kind::Skipped`]).
fn local_files(dir: &TaskDir) -> anyhow::Result<Vec<Local>> {
    let mut names = Vec::new();
    dir.walk(|rel, m| {
        if m.is_file() && kind_of(rel) != Kind::Skipped {
            names.push(rel.to_string());
        }
    })
    .with_context(|| format!("cannot list {}", dir.path().display()))?;
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let f = match dir.open_read(&name) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot open {}", dir.show(&name))),
        };
        let m = f.metadata()?;
        out.push(Local {
            id: file_id(&f)?,
            name,
            len: m.len(),
            mtime_ns: m
                .mtime()
                .saturating_mul(1_000_000_000)
                .saturating_add(m.mtime_nsec()),
        });
    }
    Ok(out)
}

/// Bytes `[start, end)` of `name` in `dir`.
fn read_range(dir: &TaskDir, name: &str, start: u64, end: u64) -> anyhow::Result<Vec<u8>> {
    let mut f = dir
        .open_read(name)
        .with_context(|| format!("cannot open {}", dir.show(name)))?;
    f.seek(SeekFrom::Start(start))?;
    let want = usize::try_from(end.saturating_sub(start))?;
    let mut buf = Vec::with_capacity(want);
    f.take(end - start)
        .read_to_end(&mut buf)
        .with_context(|| format!("cannot read {}", dir.show(name)))?;
    if buf.len() != want {
        anyhow::bail!(
            "{} shrank while it was read (wanted bytes {start}..{end})",
            dir.show(name)
        );
    }
    Ok(buf)
}

/// SHA-256 of the [`TAIL_BYTES`] of `name` before offset `size`.
fn tail_hash(dir: &TaskDir, name: &str, size: u64) -> anyhow::Result<String> {
    Ok(sha256_hex(&read_range(
        dir,
        name,
        size.saturating_sub(TAIL_BYTES),
        size,
    )?))
}

/// The synced files of `dir` that `m` does not describe as they are now: a file `m` does not
/// name, an append-only file of another size (or, for current.jsonl, another identity), a
/// file replaced as a whole whose size or content differs (hashed only when its modification
/// time is not the one `m` records). Sorted; empty when a sync would upload nothing.
pub fn changed_since(dir: &TaskDir, m: &Manifest) -> anyhow::Result<Vec<String>> {
    let mut changed = Vec::new();
    for l in local_files(dir)? {
        let same = match (kind_of(&l.name), m.files.get(&l.name)) {
            (Kind::Skipped, _) => true,
            (_, None) => false,
            (
                k @ (Kind::AppendOnly | Kind::Growing),
                Some(FileEntry::Appended { size, file_id, .. }),
            ) => {
                *size == l.len
                    && (k == Kind::AppendOnly || file_id.as_deref() == Some(l.id.as_str()))
            }
            (
                Kind::Whole,
                Some(FileEntry::Whole {
                    size,
                    sha256,
                    mtime_ns,
                }),
            ) => {
                *size == l.len
                    && (*mtime_ns == l.mtime_ns
                        || sha256_hex(&read_range(dir, &l.name, 0, l.len)?) == *sha256)
            }
            _ => false,
        };
        if !same {
            changed.push(l.name);
        }
    }
    Ok(changed)
}

/// Upload what changed in `dir` (task `uuid`) since `base`, then write the new manifest —
/// version + 1, same epoch and holder — on the condition that the bucket still holds `base`.
/// Returns the report and the new base. Errors: [`Fenced`] when a newer claim wrote the
/// manifest; an I/O or store error otherwise (nothing is half-committed: objects without a
/// manifest naming them are unused).
pub fn sync_up(
    store: &Store,
    uuid: &str,
    dir: &TaskDir,
    base: &Base,
    now: &str,
) -> anyhow::Result<(SyncReport, Base)> {
    let old = &base.manifest;
    let version = old.version + 1;
    let mut report = SyncReport::default();
    let mut files = BTreeMap::new();
    // Append-only files whose new entry continues the old one (nothing of theirs is dropped).
    let mut continued = std::collections::BTreeSet::new();
    for l in local_files(dir)? {
        let name = l.name.as_str();
        let entry = match kind_of(name) {
            Kind::Skipped => continue,
            k @ (Kind::AppendOnly | Kind::Growing) => {
                let id = (k == Kind::Growing).then(|| l.id.clone());
                let prior = match old.files.get(name) {
                    Some(FileEntry::Appended {
                        size,
                        tail_sha256,
                        indexes,
                        segments,
                        file_id,
                    }) if l.len >= *size
                        && (k == Kind::AppendOnly || *file_id == id)
                        && tail_hash(dir, name, *size)? == *tail_sha256 =>
                    {
                        Some((
                            *size,
                            indexes.clone(),
                            segments.clone(),
                            tail_sha256.clone(),
                        ))
                    }
                    _ => None,
                };
                if prior.is_some() {
                    continued.insert(name.to_string());
                }
                let (start, mut indexes, mut segments, old_tail) =
                    prior.unwrap_or((0, Vec::new(), Vec::new(), String::new()));
                let tail = if l.len > start {
                    let bytes = read_range(dir, name, start, l.len)?;
                    let key = segment_key(name, old.epoch, version, start);
                    let seg = Segment {
                        key: key.clone(),
                        start,
                        len: bytes.len() as u64,
                        sha256: sha256_hex(&bytes),
                    };
                    report.objects += 1;
                    report.data_bytes += seg.len;
                    store.put(uuid, &key, bytes)?;
                    segments.push(seg);
                    tail_hash(dir, name, l.len)?
                } else if start == 0 {
                    tail_hash(dir, name, 0)?
                } else {
                    old_tail
                };
                // The manifest stays small: full segment lists go into index objects (written
                // now, before the manifest that names them).
                let sealed = super::index::seal(store, uuid, name, &mut indexes, &mut segments)?;
                report.indexes += sealed.objects;
                report.index_bytes += sealed.bytes;
                FileEntry::Appended {
                    size: l.len,
                    tail_sha256: tail,
                    indexes,
                    segments,
                    file_id: id,
                }
            }
            Kind::Whole => match old.files.get(name) {
                Some(e @ FileEntry::Whole { size, mtime_ns, .. })
                    if *size == l.len && *mtime_ns == l.mtime_ns =>
                {
                    e.clone()
                }
                prior => {
                    let bytes = read_range(dir, name, 0, l.len)?;
                    let sha = sha256_hex(&bytes);
                    let known =
                        matches!(prior, Some(FileEntry::Whole { sha256, .. }) if *sha256 == sha);
                    if !known {
                        report.objects += 1;
                        report.data_bytes += bytes.len() as u64;
                        store.put(uuid, &blob_key(&sha), bytes)?;
                    }
                    FileEntry::Whole {
                        size: l.len,
                        sha256: sha,
                        mtime_ns: l.mtime_ns,
                    }
                }
            },
        };
        files.insert(l.name, entry);
    }
    if files == old.files && base.etag.is_some() {
        return Ok((report, base.clone()));
    }
    let mut manifest = Manifest {
        version,
        written_at: now.to_string(),
        files,
        ..old.clone()
    };
    manifest.set_format();
    let etag = write_manifest(store, uuid, &manifest, base.etag.as_deref(), old.epoch)?;
    report.written = true;
    report.manifest_bytes = manifest_bytes(&manifest)?.len() as u64;
    delete_superseded(store, uuid, old, &manifest, &continued);
    Ok((report, Base { manifest, etag }))
}

/// After `new` was committed over `old`: delete the objects only `old` named — the blobs of
/// replaced files, every part of an append-only file that went up again from its start
/// (current.jsonl after a compaction) or of a file that is gone. Appended files in
/// `continued` keep all they had (their sealed segments are listed by the new indexes). A
/// failure is logged, not returned: the objects are garbage `ctxhost fsck --repair` deletes.
fn delete_superseded(
    store: &Store,
    uuid: &str,
    old: &Manifest,
    new: &Manifest,
    continued: &std::collections::BTreeSet<String>,
) {
    let kept = new.objects();
    let mut gone = Vec::new();
    for (name, entry) in &old.files {
        if continued.contains(name) || new.files.get(name) == Some(entry) {
            continue;
        }
        let listed = super::index::walk_file(store, uuid, name, entry, &mut |p| {
            gone.push(match p {
                super::index::Part::Index(r) => super::manifest::index_key(name, &r.sha256),
                super::index::Part::Segment(s) => s.key.clone(),
            });
            Ok(())
        });
        if let Err(e) = listed {
            tracing::warn!(%uuid, "cannot list the old objects of {name} to delete them: {e:#}");
        }
        if let FileEntry::Whole { sha256, .. } = entry {
            gone.push(blob_key(sha256));
        }
    }
    for key in gone.iter().filter(|k| !kept.contains_key(*k)) {
        if let Err(e) = store.delete(uuid, key) {
            tracing::warn!(%uuid, "cannot delete the superseded object {key}: {e:#}");
            return;
        }
    }
}

/// The manifest as written: compact JSON (it is written at every step; `jq` shows it to a
/// person).
pub fn manifest_bytes(m: &Manifest) -> anyhow::Result<Vec<u8>> {
    Ok(serde_json::to_vec(m)?)
}

/// Write `manifest` on the condition that the bucket's is still `expected` (`None`: there is
/// none). A refusal is looked into: the bucket's manifest is this very one (a retried request
/// that had gone through) → success; a newer epoch → [`Fenced`]; otherwise an error (someone
/// wrote under this epoch: never done by ctxhost).
pub fn write_manifest(
    store: &Store,
    uuid: &str,
    manifest: &Manifest,
    expected: Option<&str>,
    my_epoch: u64,
) -> anyhow::Result<Option<String>> {
    let bytes = manifest_bytes(manifest)?;
    match store.put_manifest(uuid, bytes, expected)? {
        Written::Ok(etag) => Ok(etag),
        Written::Conflict => {
            let Some((now, etag)) = store.get(uuid, MANIFEST)? else {
                anyhow::bail!(
                    "task {uuid}: the manifest in {} disappeared while it was written",
                    store.url()
                );
            };
            let now = Manifest::parse(&now, uuid)?;
            if now == *manifest {
                return Ok(etag);
            }
            if now.epoch != my_epoch || now.holder != manifest.holder {
                return Err(Fenced {
                    uuid: uuid.to_string(),
                    holder: now.holder,
                    theirs: now.epoch,
                    ours: my_epoch,
                }
                .into());
            }
            anyhow::bail!(
                "task {uuid}: the manifest in {} changed under epoch {my_epoch} (version {} found, {} expected): written by something other than this process",
                store.url(),
                now.version,
                manifest.version.saturating_sub(1)
            )
        }
    }
}
