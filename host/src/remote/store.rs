//! The bucket, as the rest of the host sees it: blocking get/put/list/delete of the objects of
//! one task under `PREFIX/tasks/{uuid}/`, and the conditional PUT of its manifest. Requests go
//! through the `object_store` crate (SigV4 signing, retries with backoff on errors and
//! timeouts) on a current-thread tokio runtime owned by the [`Store`]; it must not be called
//! from inside another tokio runtime.

use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context as _;
use futures_util::StreamExt as _;
use object_store::aws::{AmazonS3, AmazonS3Builder, S3ConditionalPut};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload, UpdateVersion};

use super::manifest::MANIFEST;
use crate::config::RemoteConfig;

/// A connection to the bucket of `context_storage.remote`.
pub struct Store {
    rt: tokio::runtime::Runtime,
    s3: AmazonS3,
    prefix: String,
    url: String,
    uploaded: AtomicU64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// How long a request is retried (connection refused, timeouts, 5xx answers) before it fails:
/// [`RETRY_SECS`], waiting 0.1 s doubling to 5 s between attempts. Long enough for a store that
/// restarts or fails over; the default (10 attempts) gives up after a few seconds of refused
/// connections. Kept under 5 minutes: a retried request is not signed again.
fn retry_config() -> object_store::RetryConfig {
    object_store::RetryConfig {
        backoff: object_store::BackoffConfig {
            init_backoff: std::time::Duration::from_millis(100),
            max_backoff: std::time::Duration::from_secs(5),
            base: 2.0,
        },
        max_retries: usize::MAX,
        retry_timeout: std::time::Duration::from_secs(RETRY_SECS),
    }
}

/// Seconds a request to the bucket is retried before it fails ([`retry_config`]).
pub const RETRY_SECS: u64 = 240;

/// What a conditional write of a manifest came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// Written; its new ETag.
    Ok(Option<String>),
    /// Refused: the manifest is not the one expected (412, or it exists for a create).
    Conflict,
}

impl Store {
    /// Connect to the bucket `cfg` names. Credentials come from the environment only (the
    /// `AWS_*` variables the AWS SDKs read); nothing is sent until the first request.
    pub fn open(cfg: &RemoteConfig) -> anyhow::Result<Store> {
        Store::open_with(cfg, AmazonS3Builder::from_env())
    }

    /// [`Store::open`] with `b` holding the credentials (tests: a dummy key for a local
    /// server that takes any).
    pub(crate) fn open_with(cfg: &RemoteConfig, b: AmazonS3Builder) -> anyhow::Result<Store> {
        let loc = cfg
            .location()
            .map_err(|e| anyhow::anyhow!("context_storage.remote.url: {e}"))?;
        let mut b = b
            .with_retry(retry_config())
            .with_bucket_name(&loc.bucket)
            .with_conditional_put(S3ConditionalPut::ETagMatch)
            .with_allow_http(cfg.allow_http);
        if let Some(ep) = &cfg.endpoint {
            b = b.with_endpoint(ep);
        }
        if let Some(r) = &cfg.region {
            b = b.with_region(r);
        }
        let s3 = b
            .build()
            .with_context(|| format!("cannot set up the bucket {}", cfg.url))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the object store's runtime")?;
        Ok(Store {
            rt,
            s3,
            prefix: loc.prefix,
            url: cfg.url.clone(),
            uploaded: AtomicU64::new(0),
        })
    }

    /// `s3://bucket/prefix`, for messages.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Bytes uploaded by this store so far (segments, blobs and manifests).
    pub fn uploaded_bytes(&self) -> u64 {
        self.uploaded.load(Ordering::Relaxed)
    }

    /// The key of `rel` (relative to the task's prefix) of task `uuid`.
    fn path(&self, uuid: &str, rel: &str) -> ObjectPath {
        let task = if self.prefix.is_empty() {
            format!("tasks/{uuid}")
        } else {
            format!("{}/tasks/{uuid}", self.prefix)
        };
        if rel.is_empty() {
            ObjectPath::from(task)
        } else {
            ObjectPath::from(format!("{task}/{rel}"))
        }
    }

    /// The object `rel` of task `uuid` with its ETag; `None` when it does not exist.
    pub fn get(&self, uuid: &str, rel: &str) -> anyhow::Result<Option<(Vec<u8>, Option<String>)>> {
        let path = self.path(uuid, rel);
        self.rt.block_on(async {
            match self.s3.get(&path).await {
                Ok(r) => {
                    let etag = r.meta.e_tag.clone();
                    let bytes = r
                        .bytes()
                        .await
                        .with_context(|| format!("cannot read {path} from {}", self.url))?;
                    Ok(Some((bytes.to_vec(), etag)))
                }
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(anyhow::Error::new(e))
                    .with_context(|| format!("cannot read {path} from {}", self.url)),
            }
        })
    }

    /// Write the object `rel` of task `uuid` (an immutable segment or blob).
    pub fn put(&self, uuid: &str, rel: &str, bytes: Vec<u8>) -> anyhow::Result<()> {
        let path = self.path(uuid, rel);
        let n = bytes.len() as u64;
        self.rt
            .block_on(self.s3.put(&path, PutPayload::from(bytes)))
            .with_context(|| format!("cannot write {path} to {}", self.url))?;
        self.uploaded.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }

    /// Write the manifest of task `uuid` if it is still the one with ETag `expected`
    /// (`None`: only if there is none yet).
    pub fn put_manifest(
        &self,
        uuid: &str,
        bytes: Vec<u8>,
        expected: Option<&str>,
    ) -> anyhow::Result<Written> {
        let path = self.path(uuid, MANIFEST);
        let n = bytes.len() as u64;
        let mode = match expected {
            None => PutMode::Create,
            Some(e) => PutMode::Update(UpdateVersion {
                e_tag: Some(e.to_string()),
                version: None,
            }),
        };
        let opts = PutOptions {
            mode,
            ..PutOptions::default()
        };
        match self
            .rt
            .block_on(self.s3.put_opts(&path, PutPayload::from(bytes), opts))
        {
            Ok(r) => {
                self.uploaded.fetch_add(n, Ordering::Relaxed);
                let etag = match r.e_tag {
                    Some(e) => Some(e),
                    // A store that does not say: ask (the next write is conditional on it).
                    None => {
                        self.rt
                            .block_on(self.s3.head(&path))
                            .with_context(|| {
                                format!("cannot read the ETag of {path} in {}", self.url)
                            })?
                            .e_tag
                    }
                };
                Ok(Written::Ok(etag))
            }
            Err(object_store::Error::Precondition { .. })
            | Err(object_store::Error::AlreadyExists { .. }) => Ok(Written::Conflict),
            Err(e) => Err(anyhow::Error::new(e))
                .with_context(|| format!("cannot write {path} to {}", self.url)),
        }
    }

    /// Every object of task `uuid`: key relative to the task's prefix, and size.
    pub fn list(&self, uuid: &str) -> anyhow::Result<Vec<(String, u64)>> {
        let base = self.path(uuid, "");
        let strip = format!("{base}/");
        self.rt.block_on(async {
            let mut out = Vec::new();
            let mut s = self.s3.list(Some(&base));
            while let Some(m) = s.next().await {
                let m = m.with_context(|| format!("cannot list {base} in {}", self.url))?;
                let key = m.location.to_string();
                let rel = key.strip_prefix(&strip).unwrap_or(&key).to_string();
                out.push((rel, m.size));
            }
            out.sort();
            Ok(out)
        })
    }

    /// Delete every object of task `uuid`, the manifest first (so a reader never finds a
    /// manifest naming deleted objects). Returns how many were deleted.
    pub fn delete_task(&self, uuid: &str) -> anyhow::Result<usize> {
        let objects = self.list(uuid)?;
        let mut n = 0;
        let order = objects
            .iter()
            .filter(|(k, _)| k == MANIFEST)
            .chain(objects.iter().filter(|(k, _)| k != MANIFEST));
        for (rel, _) in order {
            let path = self.path(uuid, rel);
            match self.rt.block_on(self.s3.delete(&path)) {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => n += 1,
                Err(e) => {
                    return Err(anyhow::Error::new(e))
                        .with_context(|| format!("cannot delete {path} from {}", self.url));
                }
            }
        }
        Ok(n)
    }
}
