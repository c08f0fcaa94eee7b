//! Compiled-component cache under `contexts/.cache/` (DESIGN.md §2).
//!
//! A compiled component is wasmtime's precompiled artefact (`Component::serialize`). Files are
//! named `<sha256 of the .wasm bytes>-<engine key>.cwasm`, where the engine key is a sha256 of
//! [`wasmtime::Engine::precompile_compatibility_hash`] (target, compiler flags, tunables,
//! features, wasmtime version), so an artefact is only ever offered to an engine that can run it.
//!
//! Deserializing is `unsafe` in wasmtime (the bytes are trusted to be wasmtime's own output),
//! so the cache only loads files it wrote itself: each file starts with a header
//! (`ctxhost-cwasm 1\n` + the sha256 of the artefact) that is checked before wasmtime sees the
//! bytes. A missing header, a checksum mismatch (torn write, disk corruption, tampering) or an
//! artefact wasmtime refuses makes the cache recompile and overwrite the file; it is never an
//! error. Files are written atomically (temporary file in the same directory, fsync, rename).
//! A cache directory that cannot be written only costs a recompile next time (logged).

use std::fs;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// First bytes of every cache file.
const MAGIC: &[u8] = b"ctxhost-cwasm 1\n";
/// Length of the sha256 that follows the magic.
const DIGEST_LEN: usize = 32;

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
        let bytes = fs::read(path).map_err(|e| e.to_string())?;
        let artefact = verify(&bytes)?;
        // SAFETY: `artefact` is byte-for-byte what `Component::serialize` produced in `write`
        // (checked against the sha256 stored beside it), for an engine with the same
        // compatibility hash (part of the file name); wasmtime re-checks the engine settings.
        let component =
            unsafe { Component::deserialize(engine, artefact) }.map_err(|e| format!("{e:#}"))?;
        Ok(Some(component))
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
            f.write_all(MAGIC)?;
            f.write_all(&Sha256::digest(&artefact))?;
            f.write_all(&artefact)
        })
        .map_err(|e| format!("{e:#}"))
    }
}

/// The artefact inside a cache file, if header and checksum are right.
fn verify(bytes: &[u8]) -> Result<&[u8], String> {
    let rest = bytes
        .strip_prefix(MAGIC)
        .ok_or("not written by this cache (bad header)")?;
    if rest.len() < DIGEST_LEN {
        return Err("truncated".to_string());
    }
    let (digest, artefact) = rest.split_at(DIGEST_LEN);
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
        let mut file = MAGIC.to_vec();
        file.extend_from_slice(&Sha256::digest(&artefact));
        file.extend_from_slice(&artefact);
        assert_eq!(verify(&file).unwrap(), artefact.as_slice());

        let mut flipped = file.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(verify(&flipped).unwrap_err().contains("checksum"));
        assert!(
            verify(&file[..MAGIC.len() + 4])
                .unwrap_err()
                .contains("truncated")
        );
        assert!(verify(b"\0asm\x0d\0\x01\0").unwrap_err().contains("header"));
    }
}
