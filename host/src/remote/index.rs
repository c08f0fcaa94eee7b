//! Index objects: the segment lists of append-only files sealed into immutable objects so the
//! manifest stays small (format 2, see [`super::manifest`]), and read back for a download or a
//! check. Every [`SEAL`] open segments of a file become a level-1 index; every [`SEAL`] indexes
//! of one level, an index of the next. An index object is written before the manifest that
//! names it, so a manifest never names a missing one; one written by a sync that did not commit
//! (a crash, a fenced host) is named by no manifest: garbage that `ctxhost fsck` reports.

use std::collections::BTreeMap;

use super::manifest::{FileEntry, Index, IndexRef, Manifest, SEAL, Segment, index_key, sha256_hex};
use super::store::Store;

/// What [`seal`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sealed {
    /// Index objects written.
    pub objects: usize,
    /// Their bytes.
    pub bytes: u64,
}

/// One part of a file met by [`walk_file`].
#[derive(Debug, Clone, Copy)]
pub enum Part<'a> {
    /// An index object (met before what it lists).
    Index(&'a IndexRef),
    /// A segment.
    Segment(&'a Segment),
}

/// Write `index` (of file `name`, task `uuid`) as an object; returns the reference to it.
fn put_index(store: &Store, uuid: &str, name: &str, index: &Index) -> anyhow::Result<IndexRef> {
    let bytes = serde_json::to_vec(index)?;
    let sha256 = sha256_hex(&bytes);
    let r = IndexRef {
        level: index.level,
        start: index.start,
        len: index.len,
        bytes: bytes.len() as u64,
        sha256,
    };
    store.put(uuid, &index_key(name, &r.sha256), bytes)?;
    Ok(r)
}

/// Seal the parts of file `name` (task `uuid`): while `segments` holds [`SEAL`] or more, the
/// first [`SEAL`] go into a level-1 index appended to `indexes`; while a level of `indexes`
/// holds [`SEAL`] or more, its first [`SEAL`] go into one index of the level above, in their
/// place. Each index object is in the bucket when this returns. Afterwards every level holds
/// fewer than [`SEAL`] entries.
pub fn seal(
    store: &Store,
    uuid: &str,
    name: &str,
    indexes: &mut Vec<IndexRef>,
    segments: &mut Vec<Segment>,
) -> anyhow::Result<Sealed> {
    let mut out = Sealed::default();
    let mut wrote = |r: &IndexRef| {
        out.objects += 1;
        out.bytes += r.bytes;
    };
    while segments.len() >= SEAL {
        let group: Vec<Segment> = segments.drain(..SEAL).collect();
        let index = Index {
            file: name.to_string(),
            level: 1,
            start: group[0].start,
            len: group.iter().map(|s| s.len).sum(),
            segments: group,
            indexes: Vec::new(),
        };
        let r = put_index(store, uuid, name, &index)?;
        wrote(&r);
        indexes.push(r);
    }
    // The levels never go up along the list, so the entries of one level are contiguous.
    while let Some((at, level)) = full_level(indexes) {
        let group: Vec<IndexRef> = indexes.drain(at..at + SEAL).collect();
        let index = Index {
            file: name.to_string(),
            level: level + 1,
            start: group[0].start,
            len: group.iter().map(|r| r.len).sum(),
            segments: Vec::new(),
            indexes: group,
        };
        let r = put_index(store, uuid, name, &index)?;
        wrote(&r);
        indexes.insert(at, r);
    }
    Ok(out)
}

/// Where the first level of `indexes` with [`SEAL`] or more entries starts, and the level.
fn full_level(indexes: &[IndexRef]) -> Option<(usize, u32)> {
    let mut i = 0;
    while i < indexes.len() {
        let level = indexes[i].level;
        let n = indexes[i..].iter().take_while(|r| r.level == level).count();
        if n >= SEAL {
            return Some((i, level));
        }
        i += n;
    }
    None
}

/// Read index `r` of file `name` and hand its parts to `f`, depth first, in file order.
fn walk_index(
    store: &Store,
    uuid: &str,
    name: &str,
    r: &IndexRef,
    f: &mut dyn FnMut(Part<'_>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let key = index_key(name, &r.sha256);
    let Some((bytes, _)) = store.get(uuid, &key)? else {
        anyhow::bail!(
            "task {uuid}: the index object {key} of {name} named by the manifest is missing from {}",
            store.url()
        );
    };
    let index = Index::parse(&bytes, uuid, name, r)?;
    for c in &index.indexes {
        f(Part::Index(c))?;
        walk_index(store, uuid, name, c, f)?;
    }
    for s in &index.segments {
        f(Part::Segment(s))?;
    }
    Ok(())
}

/// Hand every part of file `name` of a manifest to `f` in file order: each index (read from
/// the bucket, its hash checked) before what it lists, then the open segments. Memory: one
/// index object per level.
pub fn walk_file(
    store: &Store,
    uuid: &str,
    name: &str,
    entry: &FileEntry,
    f: &mut dyn FnMut(Part<'_>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    if let FileEntry::Appended {
        indexes, segments, ..
    } = entry
    {
        for r in indexes {
            f(Part::Index(r))?;
            walk_index(store, uuid, name, r, f)?;
        }
        for s in segments {
            f(Part::Segment(s))?;
        }
    }
    Ok(())
}

/// An object a manifest names, directly or through its indexes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    /// Bytes.
    pub size: u64,
    /// SHA-256 (hex) of its content.
    pub sha256: String,
}

/// Every object manifest `m` of task `uuid` names, with the indexes read: key → size and hash.
/// Errors: an index object missing or not the one named (the message names it).
pub fn objects(store: &Store, uuid: &str, m: &Manifest) -> anyhow::Result<BTreeMap<String, Named>> {
    let mut out = BTreeMap::new();
    for (name, entry) in &m.files {
        match entry {
            FileEntry::Whole { size, sha256, .. } => {
                out.insert(
                    super::manifest::blob_key(sha256),
                    Named {
                        size: *size,
                        sha256: sha256.clone(),
                    },
                );
            }
            FileEntry::Appended { .. } => walk_file(store, uuid, name, entry, &mut |p| {
                let (key, named) = match p {
                    Part::Index(r) => (
                        index_key(name, &r.sha256),
                        Named {
                            size: r.bytes,
                            sha256: r.sha256.clone(),
                        },
                    ),
                    Part::Segment(s) => (
                        s.key.clone(),
                        Named {
                            size: s.len,
                            sha256: s.sha256.clone(),
                        },
                    ),
                };
                out.insert(key, named);
                Ok(())
            })?,
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(level: u32) -> IndexRef {
        IndexRef {
            level,
            start: 0,
            len: 0,
            bytes: 0,
            sha256: String::new(),
        }
    }

    #[test]
    fn the_first_full_level_is_found() {
        let mut v: Vec<IndexRef> = (0..3).map(|_| r(2)).collect();
        assert_eq!(full_level(&v), None);
        v.extend((0..SEAL).map(|_| r(1)));
        assert_eq!(full_level(&v), Some((3, 1)));
        let v: Vec<IndexRef> = (0..SEAL + 1).map(|_| r(3)).collect();
        assert_eq!(full_level(&v), Some((0, 3)));
    }
}
