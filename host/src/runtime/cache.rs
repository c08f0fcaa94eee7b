//! Compiled-component cache under `contexts/.cache/` (DESIGN.md §2).
//!
//! A compiled component is wasmtime's precompiled artefact (`Component::serialize`, an ELF
//! image). Files are named `<sha256 of the .wasm bytes>-<engine key>.cwasm`, where the engine key
//! is a sha256 of [`wasmtime::Engine::precompile_compatibility_hash`] (target, compiler flags,
//! tunables, features, wasmtime version), so an artefact is only ever offered to an engine that
//! can run it.
//!
//! Deserializing is `unsafe` in wasmtime (the bytes are trusted to be wasmtime's own output),
//! so the cache only loads files it wrote itself: each file is the artefact followed by a
//! trailer ([`TRAILER`], `ctxhost-cwasm 2\n`, then the sha256 of the artefact), checked before
//! wasmtime sees the file. A missing trailer, a checksum mismatch (torn write, disk corruption,
//! tampering) or an artefact wasmtime refuses makes the cache recompile and overwrite the file;
//! it is never an error. Files are written atomically (temporary file in the same directory,
//! fsync, rename).  A cache directory that cannot be written only costs a recompile next time
//! (logged).
//!
//! A hit is **mapped**, not read (`Component::deserialize_file` on the descriptor whose bytes
//! were checked): the compiled code and the data segments' initial images are pages of the file
//! in the page cache, shared by every task process that loads the same component, instead of a
//! private copy in each (issue 42 item 3: 64 concurrent tasks held 64 copies). The trailer sits
//! after the ELF image's last byte, where wasmtime does not look. Because a mapped file must not
//! change under a running process, a cache file is only ever replaced by a rename, never
//! rewritten in place (delete a file to drop it; never edit or truncate one).

use std::fs;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// What follows the artefact in every cache file, before the artefact's sha256 (the file's last
/// [`DIGEST_LEN`] bytes).
pub const TRAILER: &[u8] = b"ctxhost-cwasm 2\n";
/// Length of the sha256 that ends the file.
const DIGEST_LEN: usize = 32;
/// Bytes read at a time while the checksum of a cache file is computed.
const HASH_BLOCK: usize = 64 * 1024;

/// How a component was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from a valid cache file.
    Hit,
    /// No cache file: compiled (and written to the cache).
    Compiled,
    /// A cache file existed but was corrupt or incompatible: recompiled and overwritten.
    Replaced,
}

/// The cache directory and the key of the engine using it.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: PathBuf,
    engine_key: String,
}

impl ComponentCache {
    /// A cache in `dir` (created on first write) for components of `engine`.
    pub fn new(dir: &Path, engine: &Engine) -> ComponentCache {
        let mut hasher = ShaHasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = hex(&hasher.0.finalize())[..16].to_string();
        ComponentCache {
            dir: dir.to_path_buf(),
            engine_key,
        }
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cache file for `wasm` (whether or not it exists).
    pub fn path_for(&self, wasm: &[u8]) -> PathBuf {
        self.dir.join(format!(
            "{}-{}.cwasm",
            hex(&Sha256::digest(wasm)),
            self.engine_key
        ))
    }

    /// The compiled form of `wasm`: from the cache when a valid file exists, else compiled with
    /// `compile` and stored. Errors are `compile`'s only.
    pub fn load_or_compile<E>(
        &self,
        engine: &Engine,
        wasm: &[u8],
        compile: impl FnOnce() -> Result<Component, E>,
    ) -> Result<(Component, CacheOutcome), E> {
        let path = self.path_for(wasm);
        let existed = match self.read(engine, &path) {
            Ok(Some(component)) => return Ok((component, CacheOutcome::Hit)),
            Ok(None) => false,
            Err(reason) => {
                tracing::warn!(cache_file = %path.display(), "ignoring compiled-component cache file: {reason}; recompiling");
                true
            }
        };
        let component = compile()?;
        self.write(&path, &component);
        Ok((
            component,
            if existed {
                CacheOutcome::Replaced
            } else {
                CacheOutcome::Compiled
            },
        ))
    }

    /// `Ok(None)` when there is no file; `Err(reason)` when there is one we cannot use.
    fn read(&self, engine: &Engine, path: &Path) -> Result<Option<Component>, String> {
        let meta = match fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        if !meta.file_type().is_file() {
            return Err("not a regular file".to_string());
        }
        let file = fs::File::open(path).map_err(|e| e.to_string())?;
        verify(&file)?;
        // Map the very file whose bytes were checked (its descriptor, not the name again, so a
        // rename in between cannot swap them).
        let fd_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&file));
        let mapped = if Path::new(&fd_path).exists() {
            // SAFETY: the file's artefact is byte-for-byte what `Component::serialize` produced
            // in `write` (checked against the sha256 stored after it), for an engine with the
            // same compatibility hash (part of the file name); wasmtime re-checks the engine
            // settings. Cache files are replaced by rename only, never modified in place, so
            // the mapping keeps the checked bytes.
            unsafe { Component::deserialize_file(engine, &fd_path) }
        } else {
            // No /proc: read the bytes (a private copy) and check them again as read.
            let bytes = fs::read(path).map_err(|e| e.to_string())?;
            let artefact = verify_bytes(&bytes)?;
            // SAFETY: as above, on bytes checked after reading them.
            unsafe { Component::deserialize(engine, artefact) }
        };
        mapped.map(Some).map_err(|e| format!("{e:#}"))
    }

    fn write(&self, path: &Path, component: &Component) {
        if let Err(e) = self.try_write(path, component) {
            tracing::warn!(cache_dir = %self.dir.display(), "cannot write the compiled-component cache: {e}");
        }
    }

    fn try_write(&self, path: &Path, component: &Component) -> Result<(), String> {
        let artefact = component
            .serialize()
            .map_err(|e| format!("serializing: {e:#}"))?;
        fs::create_dir_all(&self.dir)
            .map_err(|e| format!("creating {}: {e}", self.dir.display()))?;
        crate::layout::atomic_write_with(path, |f| {
            f.write_all(&artefact)?;
            f.write_all(TRAILER)?;
            f.write_all(&Sha256::digest(&artefact))
        })
        .map_err(|e| format!("{e:#}"))
    }
}

/// Checks that `file` ends with [`TRAILER`] and the sha256 of everything before it, reading it
/// [`HASH_BLOCK`] bytes at a time (through the page cache: nothing of it is kept).
fn verify(file: &fs::File) -> Result<(), String> {
    use std::io::{Read, Seek, SeekFrom};
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    let tail = (TRAILER.len() + DIGEST_LEN) as u64;
    if len < tail {
        return Err("truncated (shorter than the trailer)".to_string());
    }
    let artefact_len = len - tail;
    let mut f = file;
    f.seek(SeekFrom::Start(artefact_len))
        .map_err(|e| e.to_string())?;
    let mut trailer = vec![0u8; tail as usize];
    f.read_exact(&mut trailer).map_err(|e| e.to_string())?;
    let (magic, digest) = trailer.split_at(TRAILER.len());
    if magic != TRAILER {
        return Err("not written by this cache (bad trailer)".to_string());
    }
    f.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    let mut hasher = Sha256::new();
    let mut block = vec![0u8; HASH_BLOCK];
    let mut left = artefact_len;
    while left > 0 {
        let want = usize::try_from(left.min(HASH_BLOCK as u64)).unwrap_or(HASH_BLOCK);
        f.read_exact(&mut block[..want])
            .map_err(|e| format!("reading: {e}"))?;
        hasher.update(&block[..want]);
        left -= want as u64;
    }
    if hasher.finalize().as_slice() != digest {
        return Err("checksum mismatch (corrupt or modified)".to_string());
    }
    Ok(())
}

/// The artefact inside the bytes of a cache file, if trailer and checksum are right.
fn verify_bytes(bytes: &[u8]) -> Result<&[u8], String> {
    let tail = TRAILER.len() + DIGEST_LEN;
    if bytes.len() < tail {
        return Err("truncated (shorter than the trailer)".to_string());
    }
    let (artefact, trailer) = bytes.split_at(bytes.len() - tail);
    let (magic, digest) = trailer.split_at(TRAILER.len());
    if magic != TRAILER {
        return Err("not written by this cache (bad trailer)".to_string());
    }
    if Sha256::digest(artefact).as_slice() != digest {
        return Err("checksum mismatch (corrupt or modified)".to_string());
    }
    Ok(artefact)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Feeds `Hash` input into sha256, so the engine key is stable across runs and Rust versions.
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        let d = self.0.clone().finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&d[..8]);
        u64::from_le_bytes(first)
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_accepts_only_intact_files() {
        let artefact = b"compiled code".to_vec();
        let mut file = artefact.clone();
        file.extend_from_slice(TRAILER);
        file.extend_from_slice(&Sha256::digest(&artefact));
        assert_eq!(verify_bytes(&file).unwrap(), artefact.as_slice());
        let dir = tempfile::tempdir().unwrap();
        let on_disk = |bytes: &[u8]| {
            let p = dir.path().join("f.cwasm");
            fs::write(&p, bytes).unwrap();
            verify(&fs::File::open(&p).unwrap())
        };
        on_disk(&file).unwrap();

        let mut flipped = file.clone();
        flipped[0] ^= 1;
        assert!(verify_bytes(&flipped).unwrap_err().contains("checksum"));
        assert!(on_disk(&flipped).unwrap_err().contains("checksum"));
        assert!(verify_bytes(&file[..4]).unwrap_err().contains("truncated"));
        assert!(on_disk(&file[..4]).unwrap_err().contains("truncated"));
        // The old format (header first) and a bare .wasm are not this cache's.
        let mut old = b"ctxhost-cwasm 1\n".to_vec();
        old.extend_from_slice(&Sha256::digest(&artefact));
        old.extend_from_slice(&artefact);
        assert!(on_disk(&old).unwrap_err().contains("trailer"));
        assert!(
            on_disk(b"\0asm\x0d\0\x01\0 and more bytes than a trailer's 48 ...........")
                .unwrap_err()
                .contains("trailer")
        );
    }
}
