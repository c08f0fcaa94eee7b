//! Download: make a local task directory from a manifest. The files are written into a fresh
//! folder under `contexts/.remote/` (each object's hash checked), which then replaces the
//! directory with two renames, so a task process never opens a half-downloaded directory.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use sha2::Digest as _;

use super::index::{Part, walk_file};
use super::manifest::{FileEntry, Manifest, blob_key, check_name};
use super::store::{Sink, Store};
use crate::layout::Layout;

/// Folder of the remote working state in the contexts/ tree (the last manifest synced per
/// task, downloads in progress, directories downloaded for reading).
pub const REMOTE_DIR: &str = ".remote";

/// Where a downloaded object goes: appended to the file being made, hashed on the way.
struct FileSink<'a> {
    f: &'a mut fs::File,
    /// The file's length before this object.
    at: u64,
    hasher: sha2::Sha256,
    n: u64,
}

impl Sink for FileSink<'_> {
    fn restart(&mut self) -> std::io::Result<()> {
        use std::io::Seek as _;
        self.f.set_len(self.at)?;
        self.f.seek(std::io::SeekFrom::Start(self.at))?;
        self.hasher = sha2::Sha256::new();
        self.n = 0;
        Ok(())
    }

    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.hasher.update(bytes);
        self.n += bytes.len() as u64;
        self.f.write_all(bytes)
    }
}

/// Append object `key` (of file `name`) to `f`, which holds `at` bytes, checking it against
/// `len` and `sha` (memory: one chunk).
#[allow(clippy::too_many_arguments)]
fn fetch_into(
    store: &Store,
    uuid: &str,
    name: &str,
    key: &str,
    len: u64,
    sha: &str,
    f: &mut fs::File,
    at: u64,
) -> anyhow::Result<()> {
    let mut sink = FileSink {
        f,
        at,
        hasher: sha2::Sha256::new(),
        n: 0,
    };
    if store.get_to(uuid, key, &mut sink)?.is_none() {
        anyhow::bail!(
            "task {uuid}: the object {key} of {name} named by the manifest is missing from {}",
            store.url()
        );
    }
    let got = hex(&sink.hasher.finalize());
    if sink.n != len || got != sha {
        anyhow::bail!(
            "task {uuid}: the object {key} of {name} in {} does not match the manifest (size or SHA-256)",
            store.url()
        );
    }
    Ok(())
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Write every file of `m` (task `uuid`) into the new folder `into` (which must not exist);
/// returns the bytes written. Each object is checked against its size and hash; the index
/// objects are read as they come ([`super::index::walk_file`]).
pub fn download_into(store: &Store, uuid: &str, m: &Manifest, into: &Path) -> anyhow::Result<u64> {
    crate::layout::create_private_dir_all(into)
        .with_context(|| format!("cannot create {}", into.display()))?;
    let mut total = 0u64;
    for (name, entry) in &m.files {
        check_name(name)?;
        let path = into.join(name);
        if let Some(parent) = path.parent() {
            crate::layout::create_private_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(crate::task_dir::FILE_MODE)
            .open(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let mut at = 0u64;
        match entry {
            FileEntry::Appended { .. } => {
                walk_file(store, uuid, name, entry, &mut |p| {
                    if let Part::Segment(s) = p {
                        fetch_into(store, uuid, name, &s.key, s.len, &s.sha256, &mut f, at)?;
                        at += s.len;
                    }
                    Ok(())
                })?;
            }
            FileEntry::Whole { size, sha256, .. } => {
                fetch_into(
                    store,
                    uuid,
                    name,
                    &blob_key(sha256),
                    *size,
                    sha256,
                    &mut f,
                    0,
                )?;
                at = *size;
            }
        }
        if at != entry.size() {
            anyhow::bail!(
                "task {uuid}: the objects of {name} in {} hold {at} bytes, the manifest says {}",
                store.url(),
                entry.size()
            );
        }
        total += at;
        f.sync_all()?;
    }
    Ok(total)
}

/// Replace the local directory `dir` of task `uuid` (in one of the state folders of `layout`)
/// with the files of `m`: downloaded beside it first, then swapped in. Returns the bytes
/// downloaded.
pub fn replace_dir(
    store: &Store,
    layout: &Layout,
    uuid: &str,
    m: &Manifest,
    dir: &Path,
) -> anyhow::Result<u64> {
    let work = work_dir(layout)?;
    let nonce = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let fresh = work.join(format!("download-{uuid}-{nonce}"));
    let bytes = match download_into(store, uuid, m, &fresh) {
        Ok(b) => b,
        Err(e) => {
            let _ = fs::remove_dir_all(&fresh);
            return Err(e);
        }
    };
    swap_in(layout, uuid, &fresh, dir)?;
    Ok(bytes)
}

/// Put the complete directory `fresh` (under `contexts/.remote/`) in the place of task
/// `uuid`'s directory `dir`: the old one is moved aside, `fresh` renamed in, the old one
/// deleted.
pub fn swap_in(layout: &Layout, uuid: &str, fresh: &Path, dir: &Path) -> anyhow::Result<()> {
    let work = work_dir(layout)?;
    let nonce = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let old = work.join(format!("replaced-{uuid}-{nonce}"));
    if dir.exists() {
        fs::rename(dir, &old).with_context(|| format!("cannot move {} aside", dir.display()))?;
    }
    fs::rename(fresh, dir)
        .with_context(|| format!("cannot move the downloaded directory to {}", dir.display()))?;
    if let Some(parent) = dir.parent() {
        crate::layout::sync_dir(parent)?;
    }
    if old.exists() {
        fs::remove_dir_all(&old).with_context(|| format!("cannot delete {}", old.display()))?;
    }
    Ok(())
}

/// `contexts/.remote/`, created owner-only if missing.
pub fn work_dir(layout: &Layout) -> anyhow::Result<PathBuf> {
    let d = layout.root().join(REMOTE_DIR);
    crate::layout::create_private_dir_all(&d)
        .with_context(|| format!("cannot create {}", d.display()))?;
    Ok(d)
}
