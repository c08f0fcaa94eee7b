//! Whether the bucket's store honours the conditional writes the fence stands on: a claim
//! writes the manifest with `If-Match` on the ETag it read (or `If-None-Match: *` for a new
//! task), so a paused former holder's late write is refused with 412. A store that ignores
//! these headers lets that late write land on top of the new holder's manifest (epoch 2 → 1),
//! naming objects already deleted: the task's files are lost from the bucket.
//!
//! [`probe`] checks it with objects of its own under `PREFIX/.ctxhost-probe/`: a PUT with
//! `If-None-Match: *` twice (the second must be refused), a PUT with `If-Match` and a wrong ETag
//! (refused), and one with `If-Match` on a missing key (refused, and the object not created);
//! then deletes them. [`ensure`] runs it once per store (endpoint and bucket) and keeps the
//! result in `contexts/.remote/fencing/{hash}.json`; a store that fails is refused
//! ([`Unfenced`]) unless `context_storage.remote.unsafe_unfenced` is true, which is warned
//! about at every start.

use std::path::PathBuf;

use object_store::{PutMode, UpdateVersion};
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use super::store::Store;
use crate::layout::Layout;

/// The ETag the probe's `If-Match` writes name: no store gives it to an object.
const WRONG_ETAG: &str = "\"ctxhost-probe-wrong-etag\"";

/// The store does not honour the conditional writes the fence needs (see the module doc).
#[derive(Debug, thiserror::Error)]
#[error(
    "the object store at {endpoint} does not honour conditional writes: {}. Its fence (the manifest's ETag) would not hold: a paused former holder's late write could replace the current manifest and lose the task's files, so context_storage.remote is refused (`unsafe_unfenced: true` in context_storage.remote runs anyway, unsafely)",
    .missing.join("; ")
)]
pub struct Unfenced {
    /// The endpoint (or the bucket URL when the endpoint is AWS's own).
    pub endpoint: String,
    /// What it does not support, one phrase each.
    pub missing: Vec<String>,
}

/// The probe's result as kept for a store.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Checked {
    /// The endpoint as configured and the bucket.
    store: String,
    /// When it was probed, RFC 3339 UTC.
    checked_at: String,
    /// What it does not support (empty: it honours them all).
    missing: Vec<String>,
}

/// What `store` does not honour of the conditional writes (empty: all), from a probe with
/// objects of its own (deleted after). Errors: the store could not be reached, or refused the
/// probe's requests (no right to write, say).
pub fn probe(store: &Store) -> anyhow::Result<Vec<String>> {
    let first = uuid::Uuid::new_v4().simple().to_string();
    let missing_key = uuid::Uuid::new_v4().simple().to_string();
    let result = probe_keys(store, &first, &missing_key);
    for k in [&first, &missing_key] {
        if let Err(e) = store.probe_delete(k) {
            tracing::warn!(endpoint = %store.endpoint(), "cannot delete the probe object {k}: {e:#}");
        }
    }
    result
}

fn probe_keys(store: &Store, first: &str, missing_key: &str) -> anyhow::Result<Vec<String>> {
    let wrong = || {
        PutMode::Update(UpdateVersion {
            e_tag: Some(WRONG_ETAG.to_string()),
            version: None,
        })
    };
    let refused = |e: &object_store::Error| {
        matches!(
            e,
            object_store::Error::Precondition { .. } | object_store::Error::AlreadyExists { .. }
        )
    };
    let mut missing = Vec::new();
    match store.probe_put(first, PutMode::Create)? {
        Ok(_) => {}
        Err(e) if refused(&e) => {
            missing.push("If-None-Match: * on a new key was refused (412)".to_string())
        }
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!(
                "cannot write the probe of conditional writes to {}",
                store.url()
            )));
        }
    }
    match store.probe_put(first, PutMode::Create)? {
        Err(e) if refused(&e) => {}
        Ok(_) => missing.push(
            "If-None-Match: * (a PUT of an existing key with it was not refused with 412)"
                .to_string(),
        ),
        Err(e) => missing.push(format!("If-None-Match: * (answered: {e})")),
    }
    match store.probe_put(first, wrong())? {
        Err(e) if refused(&e) => {}
        Ok(_) => {
            missing.push("If-Match (a PUT with a wrong ETag was not refused with 412)".to_string())
        }
        Err(e) => missing.push(format!("If-Match with a wrong ETag (answered: {e})")),
    }
    let created = match store.probe_put(missing_key, wrong())? {
        Err(e) if refused(&e) => false,
        Ok(_) => true,
        Err(e) => {
            missing.push(format!("If-Match on a missing key (answered: {e})"));
            false
        }
    };
    if created || store.probe_exists(missing_key)? {
        missing.push("If-Match on a missing key (the PUT created the object)".to_string());
    }
    Ok(missing)
}

/// Where the probe's result for `store` is kept.
fn checked_path(layout: &Layout, store: &Store) -> anyhow::Result<PathBuf> {
    let dir = super::download::work_dir(layout)?.join("fencing");
    crate::layout::create_private_dir_all(&dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    let hash = sha2::Sha256::digest(store.fencing_key().as_bytes());
    let name: String = hash[..8].iter().map(|b| format!("{b:02x}")).collect();
    Ok(dir.join(format!("{name}.json")))
}

/// Refuse `store` unless it honours conditional writes ([`probe`], once per store: the result
/// is kept under `contexts/.remote/fencing/`; a failed probe is made again at the next start).
/// With `context_storage.remote.unsafe_unfenced` it is never refused, and a warning says so at
/// every call. Errors: [`Unfenced`]; the store could not be probed.
pub fn ensure(store: &Store, layout: &Layout) -> anyhow::Result<()> {
    let path = checked_path(layout, store)?;
    let kept = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Checked>(&b).ok())
        .filter(|c| c.store == store.fencing_key());
    let missing = match kept {
        Some(c) if c.missing.is_empty() || store.unsafe_unfenced() => c.missing,
        _ => {
            let missing = probe(store)?;
            let checked = Checked {
                store: store.fencing_key().to_string(),
                checked_at: crate::db::now_rfc3339(),
                missing: missing.clone(),
            };
            crate::layout::atomic_write(&path, &serde_json::to_vec(&checked)?)?;
            if missing.is_empty() {
                tracing::info!(endpoint = %store.endpoint(), "the object store honours conditional writes (If-Match, If-None-Match)");
            }
            missing
        }
    };
    if store.unsafe_unfenced() {
        let what = if missing.is_empty() {
            "it passed the probe of conditional writes, so the setting can go".to_string()
        } else {
            format!("it does not honour: {}", missing.join("; "))
        };
        tracing::warn!(
            "context_storage.remote.unsafe_unfenced is true: remote storage at {} runs UNFENCED ({what}); a paused former holder's late write may replace the current manifest and lose the task's files",
            store.endpoint()
        );
        return Ok(());
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Unfenced {
            endpoint: store.endpoint().to_string(),
            missing,
        }
        .into())
    }
}
