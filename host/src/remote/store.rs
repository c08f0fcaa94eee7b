//! The bucket, as the rest of the host sees it: blocking get/put/list/delete of the objects of
//! one task under `PREFIX/tasks/{uuid}/`, and the conditional PUT of its manifest. Requests go
//! through the `object_store` crate (SigV4 signing) on a current-thread tokio runtime owned by
//! the [`Store`]; it must not be called from inside another tokio runtime.
//!
//! **Retries.** A request that fails for a reason that may pass (connection refused, a timeout,
//! a 5xx answer such as `503 SlowDown`: `object_store`'s `Generic` errors; the client itself
//! does not retry, so every wait is this module's) is tried again after a wait drawn at random
//! between 0 and 1, 2, 4, 8, then 15 s ("full jitter", so hosts throttled together do not
//! come back together), or after the store's `Retry-After` when its answer has one
//! ([`super::answers`]), for at most `context_storage.remote.retry_secs`
//! ([`RemoteConfig::retry_secs`], 120 by default): at most [`planned_attempts`] attempts. Each
//! retry is logged (`object store unreachable: ENDPOINT, retrying (n/N)`) and, in a task
//! process, written to the task's wait note (`contexts/.remote/wait/{uuid}`, which `ask` and
//! `show --follow` show instead of "waiting for the model"). A pause or stop of the task ends
//! the waiting at once ([`Store::with_interrupt`]). Giving up is an [`Unreachable`] error.
//!
//! **Clock skew.** A store that refuses a request as `RequestTimeTooSkewed` (this host's clock
//! too far from its own for SigV4) fails it with a [`ClockSkew`] error saying by how much, from
//! the answer's `Date`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures_util::StreamExt as _;
use object_store::aws::{AmazonS3, AmazonS3Builder, S3ConditionalPut};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload, UpdateVersion};

use super::answers::{Answers, Observing, Refusal};
use super::manifest::MANIFEST;
use crate::config::RemoteConfig;

/// A pause or stop of the task this store works for was asked ([`Store::with_interrupt`]).
pub type InterruptCheck = Arc<dyn Fn() -> bool + Send + Sync>;

/// A connection to the bucket of `context_storage.remote`.
pub struct Store {
    rt: tokio::runtime::Runtime,
    s3: AmazonS3,
    prefix: String,
    url: String,
    /// The endpoint as shown in messages (credentials never part of it).
    endpoint: String,
    /// `context_storage.remote.retry_secs`.
    retry: Duration,
    uploaded: AtomicU64,
    interrupt: Option<InterruptCheck>,
    wait_note: Option<PathBuf>,
    /// Where the result of the conditional-write probe is kept: the endpoint as configured
    /// (or AWS's own) and the bucket ([`super::fencing`]).
    fencing_key: String,
    /// `context_storage.remote.unsafe_unfenced`.
    unsafe_unfenced: bool,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// The client's own retries: none. Its backoff ignores `Retry-After` and drops the answer's
/// headers; every wait is [`Store`]'s, where it honours `Retry-After`, is jittered, logged
/// and interrupted.
fn client_retry_config() -> object_store::RetryConfig {
    object_store::RetryConfig {
        backoff: object_store::BackoffConfig::default(),
        max_retries: 0,
        retry_timeout: Duration::from_secs(5),
    }
}

/// Default of `context_storage.remote.retry_secs` (defined with the config).
pub use crate::config::remote::DEFAULT_RETRY_SECS;

/// Longest wait between two attempts.
const MAX_DELAY_SECS: u64 = 15;

/// How often a pause or stop is looked for while a request is answered or a retry waits.
const INTERRUPT_POLL: Duration = Duration::from_millis(500);

/// A first attempt is not interrupted before it has run this long: a pause asked while the
/// store answers normally waits for the answer (the final sync of a pause must go up).
const FIRST_ATTEMPT_GRACE: Duration = Duration::from_secs(2);

/// Times a download whose body broke off is started again.
const BODY_TRIES: u32 = 3;

/// The longest wait after failed attempt `n` (1-based): 1, 2, 4, 8 s, then 15 s.
pub fn retry_delay(n: u32) -> Duration {
    Duration::from_secs((1u64 << n.saturating_sub(1).min(6)).min(MAX_DELAY_SECS))
}

/// The wait after failed attempt `n`: drawn uniformly between 0 and [`retry_delay`]`(n)`
/// ("full jitter"), in milliseconds.
pub fn jittered_delay(n: u32) -> Duration {
    let cap = retry_delay(n).as_millis() as u64;
    let mut b = [0u8; 8];
    // No randomness (it does not fail on Linux): the longest wait, as before jitter.
    let r = match getrandom::fill(&mut b) {
        Ok(()) => u64::from_le_bytes(b),
        Err(_) => u64::MAX,
    };
    Duration::from_millis(r % (cap + 1))
}

/// Attempts a request gets within a retry budget of `budget` (the waits of [`retry_delay`]
/// between them add up to at most `budget`; at least 1): 12 for the default 120 s.
pub fn planned_attempts(budget: Duration) -> u32 {
    let mut waited = Duration::ZERO;
    let mut n = 1;
    loop {
        waited += retry_delay(n);
        if waited > budget {
            return n;
        }
        n += 1;
    }
}

/// The bucket could not be reached within `context_storage.remote.retry_secs`, or a pause or
/// stop of the task was asked while it was waited for. Nothing was written by the request.
#[derive(Debug, thiserror::Error)]
#[error(
    "object store unreachable: {endpoint}: {what} gave up after {attempts} attempt(s) in {secs:.1} s ({why}); last error: {last}"
)]
pub struct Unreachable {
    /// The endpoint (or the bucket URL when the endpoint is AWS's own).
    pub endpoint: String,
    /// The request (`GET tasks/U/manifest.json`).
    pub what: String,
    /// Attempts made.
    pub attempts: u32,
    /// Seconds spent.
    pub secs: f64,
    /// A pause or stop was asked (`false`: the retry budget ran out).
    pub interrupted: bool,
    /// Why it gave up, for people.
    pub why: String,
    /// The last error.
    pub last: String,
}

/// The store refused a request as `RequestTimeTooSkewed`: this host's clock and the store's
/// differ by more than SigV4 allows (15 min on AWS). It will not pass by retrying.
#[derive(Debug, thiserror::Error)]
#[error(
    "clock skew of {} against {endpoint} (server Date {}): {what} was refused as RequestTimeTooSkewed; set this host's clock (NTP)",
    .skew_secs.map_or("unknown".to_string(), |s| format!("{s} s")),
    .server_date.as_deref().unwrap_or("not sent")
)]
pub struct ClockSkew {
    /// The endpoint (or the bucket URL when the endpoint is AWS's own).
    pub endpoint: String,
    /// The request.
    pub what: String,
    /// The store's clock minus this host's, seconds (from the answer's `Date`), if it said.
    pub skew_secs: Option<i64>,
    /// The answer's `Date` header as sent.
    pub server_date: Option<String>,
}

/// Where a streamed download goes ([`Store::get_to`]).
pub trait Sink {
    /// Start again from nothing (the body broke off and is read again).
    fn restart(&mut self) -> std::io::Result<()>;
    /// Take the next bytes.
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()>;
}

/// One object as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Key relative to the task's prefix.
    pub rel: String,
    /// Bytes.
    pub size: u64,
    /// When it was last written (the store's clock).
    pub modified: chrono::DateTime<chrono::Utc>,
}

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
    pub fn open_with(cfg: &RemoteConfig, b: AmazonS3Builder) -> anyhow::Result<Store> {
        let loc = cfg
            .location()
            .map_err(|e| anyhow::anyhow!("context_storage.remote.url: {e}"))?;
        let mut b = b
            .with_retry(client_retry_config())
            .with_http_connector(Observing)
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
        let endpoint = match &cfg.endpoint {
            Some(ep) => crate::config::remote::redact(ep),
            None => format!("{} (AWS S3)", cfg.url),
        };
        Ok(Store {
            rt,
            s3,
            prefix: loc.prefix,
            url: cfg.url.clone(),
            endpoint,
            retry: Duration::from_secs(cfg.retry_secs),
            uploaded: AtomicU64::new(0),
            interrupt: None,
            wait_note: None,
            fencing_key: format!(
                "{} {}",
                cfg.endpoint.as_deref().unwrap_or("aws"),
                loc.bucket
            ),
            unsafe_unfenced: cfg.unsafe_unfenced,
        })
    }

    /// This store, giving up its retries as soon as `requested` says a pause or stop of the
    /// task was asked (and a first attempt once it has taken 2 s).
    pub fn with_interrupt(mut self, requested: InterruptCheck) -> Store {
        self.interrupt = Some(requested);
        self
    }

    /// This store, writing what it waits for (`object store unreachable: …, retrying (n/N)`,
    /// one line) to `path` while it retries, and deleting it when the request ends.
    pub fn with_wait_note(mut self, path: PathBuf) -> Store {
        self.wait_note = Some(path);
        self
    }

    /// `s3://bucket/prefix`, for messages.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The endpoint, for messages.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Bytes uploaded by this store so far (segments, blobs, index objects and manifests).
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

    fn interrupt_requested(&self) -> bool {
        self.interrupt.as_ref().is_some_and(|f| f())
    }

    fn note(&self, text: Option<&str>) {
        let Some(path) = &self.wait_note else {
            return;
        };
        let r = match text {
            Some(t) => crate::layout::atomic_write(path, format!("{t}\n").as_bytes()),
            None => match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
                _ => Ok(()),
            },
        };
        if let Err(e) = r {
            tracing::debug!(path = %path.display(), "cannot write the wait note: {e:#}");
        }
    }

    /// Drive `fut` to its end, or `None` when a pause or stop was asked meanwhile (looked for
    /// every [`INTERRUPT_POLL`], outside the runtime: the check may use a blocking database
    /// client). A first attempt (`retrying` false) is left [`FIRST_ATTEMPT_GRACE`] first.
    fn drive<T>(&self, fut: impl std::future::Future<Output = T>, retrying: bool) -> Option<T> {
        if self.interrupt.is_none() {
            return Some(self.rt.block_on(fut));
        }
        let started = Instant::now();
        let mut fut = std::pin::pin!(fut);
        loop {
            // The timer is made inside the runtime (it needs its time driver).
            let polled = self
                .rt
                .block_on(async { tokio::time::timeout(INTERRUPT_POLL, fut.as_mut()).await });
            if let Ok(v) = polled {
                return Some(v);
            }
            if (retrying || started.elapsed() >= FIRST_ATTEMPT_GRACE) && self.interrupt_requested()
            {
                return None;
            }
        }
    }

    /// Wait `d`; `false` when a pause or stop was asked meanwhile.
    fn wait(&self, d: Duration) -> bool {
        let until = Instant::now() + d;
        loop {
            let now = Instant::now();
            if now >= until {
                return true;
            }
            std::thread::sleep((until - now).min(INTERRUPT_POLL));
            if self.interrupt_requested() {
                return false;
            }
        }
    }

    /// Run the request `op` makes (`what`, for messages), retrying it while it fails for a
    /// reason that may pass (see the module's doc). `Ok(Err(e))`: it failed for a reason that
    /// will not pass (not found, precondition failed, access denied), for the caller to judge;
    /// `Err`: [`Unreachable`], or [`ClockSkew`].
    fn call<T, F, Fut>(
        &self,
        what: &dyn Fn() -> String,
        mut op: F,
    ) -> anyhow::Result<Result<T, object_store::Error>>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, object_store::Error>>,
    {
        let planned = planned_attempts(self.retry);
        let started = Instant::now();
        let mut attempt = 1u32;
        let mut last = String::from("no answer yet");
        let answers = Answers::default();
        let mut why = None;
        let gave_up = loop {
            answers.clear();
            let refusal = || answers.last().unwrap_or_default();
            let retry_after = match self.drive(answers.scope(op()), attempt > 1) {
                None => break true,
                Some(Err(e @ object_store::Error::Generic { .. })) => {
                    last = e.to_string();
                    refusal().retry_after
                }
                Some(Err(e)) if e.to_string().contains("RequestTimeTooSkewed") => {
                    self.note(None);
                    let Refusal {
                        date, skew_secs, ..
                    } = refusal();
                    return Err(ClockSkew {
                        endpoint: self.endpoint.clone(),
                        what: what(),
                        skew_secs,
                        server_date: date,
                    }
                    .into());
                }
                Some(done) => {
                    if attempt > 1 {
                        self.note(None);
                        tracing::info!(endpoint = %self.endpoint, attempt, "object store reachable again");
                    }
                    return Ok(done);
                }
            };
            if attempt >= planned || started.elapsed() >= self.retry {
                break false;
            }
            if self.interrupt_requested() {
                break true;
            }
            // The store's Retry-After (a 503 SlowDown) when it said, else a jittered wait.
            let delay = retry_after.unwrap_or_else(|| jittered_delay(attempt));
            if retry_after.is_some() && started.elapsed() + delay > self.retry {
                why = Some(format!(
                    "the store asked to wait {} s (Retry-After), past context_storage.remote.retry_secs ({})",
                    delay.as_secs(),
                    self.retry.as_secs()
                ));
                break false;
            }
            attempt += 1;
            let line = format!(
                "object store unreachable: {}, retrying ({attempt}/{planned})",
                self.endpoint
            );
            match retry_after {
                Some(d) => tracing::warn!(
                    "{line} in {:.1} s (the store's Retry-After): {}: {last}",
                    d.as_secs_f64(),
                    what()
                ),
                None => tracing::warn!("{line}: {}: {last}", what()),
            }
            self.note(Some(&line));
            if !self.wait(delay) {
                break true;
            }
        };
        if attempt > 1 {
            self.note(None);
        }
        let why = match why {
            Some(w) => w,
            None if gave_up => "the task was asked to pause or stop".to_string(),
            None => format!(
                "context_storage.remote.retry_secs is {}",
                self.retry.as_secs()
            ),
        };
        Err(Unreachable {
            endpoint: self.endpoint.clone(),
            what: what(),
            attempts: attempt,
            secs: started.elapsed().as_secs_f64(),
            interrupted: gave_up,
            why,
            last,
        }
        .into())
    }

    /// The object `rel` of task `uuid` with its ETag; `None` when it does not exist.
    pub fn get(&self, uuid: &str, rel: &str) -> anyhow::Result<Option<(Vec<u8>, Option<String>)>> {
        let path = self.path(uuid, rel);
        let what = || format!("GET {path}");
        let got = self.call(&what, || async {
            let r = self.s3.get(&path).await?;
            let etag = r.meta.e_tag.clone();
            Ok((r.bytes().await?, etag))
        })?;
        match got {
            Ok((bytes, etag)) => Ok(Some((bytes.to_vec(), etag))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(anyhow::Error::new(e))
                .with_context(|| format!("cannot read {path} from {}", self.url)),
        }
    }

    /// Stream the object `rel` of task `uuid` into `sink` (memory: one chunk); its size, or
    /// `None` when it does not exist. A body that breaks off is read again from its start.
    pub fn get_to(
        &self,
        uuid: &str,
        rel: &str,
        sink: &mut dyn Sink,
    ) -> anyhow::Result<Option<u64>> {
        let path = self.path(uuid, rel);
        let what = || format!("GET {path}");
        let mut tries = 0;
        loop {
            tries += 1;
            let r = match self.call(&what, || self.s3.get(&path))? {
                Ok(r) => r,
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => {
                    return Err(anyhow::Error::new(e))
                        .with_context(|| format!("cannot read {path} from {}", self.url));
                }
            };
            sink.restart()
                .with_context(|| format!("cannot store {path}"))?;
            let mut body = r.into_stream();
            let mut n = 0u64;
            let broke = loop {
                match self.rt.block_on(body.next()) {
                    None => break None,
                    Some(Ok(chunk)) => {
                        sink.write(&chunk)
                            .with_context(|| format!("cannot store {path}"))?;
                        n += chunk.len() as u64;
                    }
                    Some(Err(e)) => break Some(e),
                }
            };
            match broke {
                None => return Ok(Some(n)),
                Some(e) if tries < BODY_TRIES => {
                    tracing::warn!(%path, "reading the object broke off after {n} bytes, reading it again: {e}");
                }
                Some(e) => {
                    return Err(anyhow::Error::new(e)).with_context(|| {
                        format!("cannot read {path} from {} ({tries} tries)", self.url)
                    });
                }
            }
        }
    }

    /// Write the object `rel` of task `uuid` (an immutable segment, blob or index object).
    pub fn put(&self, uuid: &str, rel: &str, bytes: Vec<u8>) -> anyhow::Result<()> {
        let path = self.path(uuid, rel);
        let n = bytes.len() as u64;
        let payload = PutPayload::from(bytes);
        let what = || format!("PUT {path}");
        self.call(&what, || self.s3.put(&path, payload.clone()))?
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
        let payload = PutPayload::from(bytes);
        let what = || format!("PUT {path} (conditional)");
        let put = self.call(&what, || {
            let opts = PutOptions {
                mode: mode.clone(),
                ..PutOptions::default()
            };
            self.s3.put_opts(&path, payload.clone(), opts)
        })?;
        match put {
            Ok(r) => {
                self.uploaded.fetch_add(n, Ordering::Relaxed);
                let etag = match r.e_tag {
                    Some(e) => Some(e),
                    // A store that does not say: ask (the next write is conditional on it).
                    None => {
                        let what = || format!("HEAD {path}");
                        self.call(&what, || self.s3.head(&path))?
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

    /// The endpoint as configured (AWS's own: `aws`) and the bucket: what the result of the
    /// conditional-write probe is kept under ([`super::fencing`]).
    pub fn fencing_key(&self) -> &str {
        &self.fencing_key
    }

    /// `context_storage.remote.unsafe_unfenced`.
    pub fn unsafe_unfenced(&self) -> bool {
        self.unsafe_unfenced
    }

    /// `PREFIX/.ctxhost-probe/{name}`: a key outside every task's, for [`super::fencing`].
    fn probe_path(&self, name: &str) -> ObjectPath {
        if self.prefix.is_empty() {
            ObjectPath::from(format!(".ctxhost-probe/{name}"))
        } else {
            ObjectPath::from(format!("{}/.ctxhost-probe/{name}", self.prefix))
        }
    }

    /// PUT a small body at probe key `name` with `mode` ([`super::fencing`]): its ETag, or
    /// the store's refusal (`Ok(Err(_))`: 412 is `Precondition` or `AlreadyExists`).
    pub(super) fn probe_put(
        &self,
        name: &str,
        mode: PutMode,
    ) -> anyhow::Result<Result<Option<String>, object_store::Error>> {
        let path = self.probe_path(name);
        let what = || format!("PUT {path} (probe of conditional writes)");
        let payload = PutPayload::from_static(b"ctxhost probe of conditional writes\n");
        Ok(self
            .call(&what, || {
                let opts = PutOptions {
                    mode: mode.clone(),
                    ..PutOptions::default()
                };
                self.s3.put_opts(&path, payload.clone(), opts)
            })?
            .map(|r| r.e_tag))
    }

    /// Whether probe key `name` exists.
    pub(super) fn probe_exists(&self, name: &str) -> anyhow::Result<bool> {
        let path = self.probe_path(name);
        let what = || format!("HEAD {path}");
        match self.call(&what, || self.s3.head(&path))? {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(anyhow::Error::new(e))
                .with_context(|| format!("cannot read {path} in {}", self.url)),
        }
    }

    /// Delete probe key `name` (gone already: fine).
    pub(super) fn probe_delete(&self, name: &str) -> anyhow::Result<()> {
        let path = self.probe_path(name);
        let what = || format!("DELETE {path}");
        match self.call(&what, || self.s3.delete(&path))? {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(anyhow::Error::new(e))
                .with_context(|| format!("cannot delete {path} from {}", self.url)),
        }
    }

    /// Every object of task `uuid`: key relative to the task's prefix, and size.
    pub fn list(&self, uuid: &str) -> anyhow::Result<Vec<(String, u64)>> {
        Ok(self
            .list_objects(uuid)?
            .into_iter()
            .map(|l| (l.rel, l.size))
            .collect())
    }

    /// Every object of task `uuid`, sorted by key, with its size and time.
    pub fn list_objects(&self, uuid: &str) -> anyhow::Result<Vec<Listed>> {
        let base = self.path(uuid, "");
        let strip = format!("{base}/");
        let what = || format!("LIST {base}/");
        let mut out = self
            .call(&what, || async {
                let mut out = Vec::new();
                let mut s = self.s3.list(Some(&base));
                while let Some(m) = s.next().await {
                    let m = m?;
                    let key = m.location.to_string();
                    out.push(Listed {
                        rel: key.strip_prefix(&strip).unwrap_or(&key).to_string(),
                        size: m.size,
                        modified: m.last_modified,
                    });
                }
                Ok(out)
            })?
            .with_context(|| format!("cannot list {base} in {}", self.url))?;
        out.sort_by(|a, b| a.rel.cmp(&b.rel));
        Ok(out)
    }

    /// Delete the object `rel` of task `uuid` (gone already: fine).
    pub fn delete(&self, uuid: &str, rel: &str) -> anyhow::Result<()> {
        let path = self.path(uuid, rel);
        let what = || format!("DELETE {path}");
        match self.call(&what, || self.s3.delete(&path))? {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(anyhow::Error::new(e))
                .with_context(|| format!("cannot delete {path} from {}", self.url)),
        }
    }

    /// Delete every object of task `uuid`, the manifest first (so a reader never finds a
    /// manifest naming deleted objects). Returns how many were deleted.
    pub fn delete_task(&self, uuid: &str) -> anyhow::Result<usize> {
        let objects = self.list(uuid)?;
        let order = objects
            .iter()
            .filter(|(k, _)| k == MANIFEST)
            .chain(objects.iter().filter(|(k, _)| k != MANIFEST));
        let mut n = 0;
        for (rel, _) in order {
            self.delete(uuid, rel)?;
            n += 1;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod retry_tests {
    use super::*;

    #[test]
    fn the_retry_plan_fits_the_budget() {
        assert_eq!(planned_attempts(Duration::ZERO), 1);
        assert_eq!(planned_attempts(Duration::from_secs(3)), 3);
        assert_eq!(
            planned_attempts(Duration::from_secs(DEFAULT_RETRY_SECS)),
            12
        );
        assert_eq!(retry_delay(1), Duration::from_secs(1));
        assert_eq!(retry_delay(4), Duration::from_secs(8));
        assert_eq!(retry_delay(5), Duration::from_secs(15));
        assert_eq!(retry_delay(60), Duration::from_secs(15));
    }
}
