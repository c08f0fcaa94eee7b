//! [`RestClient`]: the HTTP side both forges share — the token header, JSON bodies, retries,
//! rate limits and pagination — on ureq (blocking, the host's HTTP library).
//!
//! - **Authentication**: GitHub `Authorization: Bearer TOKEN` (+ `Accept:
//!   application/vnd.github+json`, `X-GitHub-Api-Version: 2022-11-28`); GitLab `PRIVATE-TOKEN`.
//!   The token is only ever put in that header: never in a URL, a log line or an error
//!   (every error text passes through [`redact`]). GitHub redirects (renamed repositories)
//!   are followed on the same host only (ureq drops `Authorization` elsewhere); GitLab
//!   redirects are not followed at all (ureq would resend `PRIVATE-TOKEN` to any host).
//! - **Rate limits**: a 403 or 429 with `Retry-After` waits that long; one with
//!   `x-ratelimit-remaining: 0` (GitHub) or a 429 with `RateLimit-Reset` (GitLab) waits until
//!   the reset time (epoch seconds); a 429 with neither waits a minute (GitHub's advice). A
//!   bare 403 whose message says "rate limit" (GitHub's secondary limits) waits a minute. A
//!   rate-limited request was not processed, so it is sent again, up to
//!   [`RetryPolicy::max_rate_limit_waits`] times, each wait capped at
//!   [`RetryPolicy::max_rate_limit_wait`] — except a [`Repeat::Once`] request, which fails at
//!   once with [`FailureKind::RateLimited`] (its caller holds a lease a long wait could
//!   outlive, and retries it later). A 403 without those headers is a permission error.
//! - **Transient failures**: 500/502/503/504, connection failures and timeouts are retried
//!   with exponential backoff and jitter ([`crate::llm::retry::backoff_delay`]), or after the
//!   response's `Retry-After` when that is longer, for requests that may be repeated
//!   ([`Repeat::Safe`]). A request that must not be repeated blindly ([`Repeat::Once`]:
//!   posting a comment) is retried only when it surely never reached the server (connection
//!   refused, DNS); otherwise the failure is returned as [`FailureKind::Unknown`] and the
//!   caller finds out what happened (its comment marker).
//! - **The forge's wait** ([`ForgeError::retry_after`]): every error that ends a call carries
//!   the wait the forge asked for (`Retry-After` as seconds or an HTTP date, a rate limit's
//!   reset, a minute for a secondary limit), so a caller that tries again later — the
//!   publisher, whose next attempt time is kept in the task store — does not come back
//!   sooner.
//! - **Pagination**: [`RestClient::get_all`] follows `Link: <…>; rel="next"` (both forges) or
//!   GitLab's `X-Next-Page`, only to URLs on the API's own origin, at most [`MAX_PAGES`] pages.
//! - **Errors** ([`ForgeError`]) always name the forge, the repository and the action: 401
//!   "rejected the token in GITHUB_TOKEN", 404 "not found, or the token cannot see it".

use std::io::Read;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::de::DeserializeOwned;

use crate::config::SourceKind;
use crate::llm::error::{body_snippet, redact};
use crate::llm::retry::{backoff_delay, parse_retry_after};
use crate::untrusted;

/// Most pages [`RestClient::get_all`] reads (100 items each: 10,000 items).
pub const MAX_PAGES: usize = 100;

/// Most bytes of a response body read (a page of 100 issues with long bodies fits easily).
const MAX_BODY_BYTES: u64 = 32 * 1024 * 1024;

/// Retry and wait limits of a [`RestClient`].
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Retries after a transient failure (5xx, connection, timeout).
    pub max_retries: u32,
    /// First backoff delay; doubles per retry, with jitter.
    pub initial_backoff: Duration,
    /// Longest backoff delay.
    pub max_backoff: Duration,
    /// Rate-limit waits per request before giving up.
    pub max_rate_limit_waits: u32,
    /// Longest single rate-limit wait (a reset further away is waited for this long, then the
    /// request is tried again).
    pub max_rate_limit_wait: Duration,
    /// Per-request timeout (connect + send + receive).
    pub timeout: Duration,
}

impl Default for RetryPolicy {
    /// 4 retries from 1 s (max 30 s), 5 rate-limit waits of at most an hour, 30 s timeout.
    fn default() -> Self {
        RetryPolicy {
            max_retries: 4,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            max_rate_limit_waits: 5,
            max_rate_limit_wait: Duration::from_secs(3600),
            timeout: Duration::from_secs(30),
        }
    }
}

/// Whether a request may be sent again after a failure whose outcome is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeat {
    /// Reads, and writes that converge (adding or removing a label, setting labels).
    Safe,
    /// A write that would happen twice (posting a comment).
    Once,
}

/// What went wrong, without the context [`ForgeError`] adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureKind {
    /// 401: the token was rejected.
    Unauthorized,
    /// 404: the repository (or item) does not exist, or the token cannot see it.
    NotFound,
    /// 403 that is not a rate limit: the token lacks a permission.
    Forbidden(String),
    /// Rate limited after the allowed waits (or at once, for a [`Repeat::Once`] request).
    RateLimited(String),
    /// Another HTTP error status (after retries, when retryable).
    Http {
        /// The status.
        status: u16,
        /// The forge's message (`message` / `error` of a JSON body) or a body snippet.
        message: String,
    },
    /// The server could not be reached (after retries).
    Network(String),
    /// A [`Repeat::Once`] request failed after it may have reached the server: it may or may
    /// not have taken effect.
    Unknown(String),
    /// A 2xx response whose body is not what the API documents.
    BadResponse(String),
}

/// A failed call to a forge. Its text names the forge, the repository and the action, e.g.
/// `GitHub acme/app: list open issues labelled "coding agent": not found (404): ...`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{forge} {repo}: {action}: {}", describe(.kind, .forge, .token_env))]
pub struct ForgeError {
    /// Which forge.
    pub forge: SourceKind,
    /// The repository (`owner/name`, GitLab `group/project`).
    pub repo: String,
    /// What was being done.
    pub action: String,
    /// What went wrong.
    pub kind: FailureKind,
    /// The token's variable, for the 401 / 403 / 404 advice.
    pub token_env: String,
    /// How long the forge asked the client to wait before trying again (`Retry-After`, a rate
    /// limit's reset, a minute for a secondary limit), when it said; not part of the text.
    pub retry_after: Option<Duration>,
}

impl ForgeError {
    /// Whether trying again cannot help without a change on the forge's side (a permission
    /// 403 such as "Resource not accessible by integration", a 404: the item is gone or the
    /// token cannot see it). A 401 (a wrong or expired token) is not final: every request
    /// fails alike until the token is replaced, then they all pass.
    pub fn is_final(&self) -> bool {
        matches!(self.kind, FailureKind::Forbidden(_) | FailureKind::NotFound)
    }

    /// Whether the forge refused the request for its rate limit.
    pub fn is_rate_limit(&self) -> bool {
        matches!(self.kind, FailureKind::RateLimited(_))
    }

    /// Whether the request may have taken effect although it failed
    /// ([`FailureKind::Unknown`]).
    pub fn may_have_taken_effect(&self) -> bool {
        matches!(self.kind, FailureKind::Unknown(_))
    }

    fn with_retry_after(mut self, wait: Option<Duration>) -> ForgeError {
        self.retry_after = wait;
        self
    }
}

fn describe(kind: &FailureKind, forge: &SourceKind, token_env: &str) -> String {
    match kind {
        FailureKind::Unauthorized => format!(
            "{forge} rejected the token in {token_env} (401 Unauthorized): it is wrong, expired or revoked"
        ),
        FailureKind::NotFound => format!(
            "not found (404): the repository does not exist, or the token in {token_env} cannot see it"
        ),
        FailureKind::Forbidden(m) => {
            format!("forbidden (403): the token in {token_env} lacks a permission for this ({m})")
        }
        FailureKind::RateLimited(m) => format!("rate limited: {m}"),
        FailureKind::Http { status, message } => format!("HTTP {status}: {message}"),
        FailureKind::Network(m) => format!("cannot reach the API: {m}"),
        FailureKind::Unknown(m) => {
            format!("no answer, the request may or may not have taken effect: {m}")
        }
        FailureKind::BadResponse(m) => format!("unexpected response: {m}"),
    }
}

/// What the caller is doing, for [`ForgeError`]s: the repository and the action.
#[derive(Debug, Clone)]
pub struct Action<'a> {
    /// The repository.
    pub repo: &'a str,
    /// E.g. `list open issues labelled "coding agent"`.
    pub what: String,
}

/// A blocking REST client for one forge and one token.
pub struct RestClient {
    kind: SourceKind,
    base: String,
    origin: String,
    token: String,
    token_env: String,
    agent: ureq::Agent,
    policy: RetryPolicy,
}

impl std::fmt::Debug for RestClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestClient")
            .field("kind", &self.kind)
            .field("base", &self.base)
            .field("token", &"[redacted]")
            .finish()
    }
}

/// One attempt's failure, before the retry decision.
enum Attempt {
    /// An HTTP error status.
    Status {
        status: u16,
        message: String,
        /// The wait a rate limit asks for (`None`: not a rate limit).
        rate_limit: Option<Duration>,
        /// The response's `Retry-After` (any status).
        retry_after: Option<Duration>,
    },
    /// A transport failure; `unsent`: the request surely never reached the server.
    Transport { detail: String, unsent: bool },
}

/// A successful response: status, the `next` page URL, the body.
struct Reply {
    status: u16,
    next: Option<String>,
    body: String,
}

impl RestClient {
    /// A client for `kind` at `base` (the API root, no trailing `/`) sending `token` (read from
    /// `token_env`, named in messages).
    pub fn new(
        kind: SourceKind,
        base: &str,
        token: String,
        token_env: &str,
        policy: RetryPolicy,
    ) -> RestClient {
        let mut builder = ureq::AgentBuilder::new()
            .timeout(policy.timeout)
            .user_agent(concat!("ctxhost/", env!("CARGO_PKG_VERSION")));
        builder = match kind {
            SourceKind::Github => {
                builder.redirect_auth_headers(ureq::RedirectAuthHeaders::SameHost)
            }
            SourceKind::Gitlab => builder.redirects(0),
        };
        let base = base.trim_end_matches('/').to_string();
        RestClient {
            kind,
            origin: origin_of(&base),
            base,
            token,
            token_env: token_env.to_string(),
            agent: builder.build(),
            policy,
        }
    }

    /// The forge.
    pub fn kind(&self) -> SourceKind {
        self.kind
    }

    /// The token for `git` over HTTP with basic-auth user `user` (given to one command only,
    /// [`crate::workspace::git::Git::with_auth`]).
    pub fn git_auth(&self, user: &str) -> crate::workspace::git::Auth {
        crate::workspace::git::Auth {
            user: user.to_string(),
            token: self.token.clone(),
        }
    }

    /// Replace `self`'s token by `[redacted]` in `text`.
    pub fn redact(&self, text: &str) -> String {
        redact(text, Some(&self.token))
    }

    /// GET `path` (below the API root, with its query) as `T`.
    pub fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        action: &Action<'_>,
    ) -> Result<T, ForgeError> {
        let url = format!("{}{path}", self.base);
        let reply = self.call("GET", &url, None, Repeat::Safe, action)?;
        self.parse(&reply.body, action)
    }

    /// GET every page of the list at `path` (which should ask for `per_page=100`), following
    /// the `next` links, as one list.
    pub fn get_all<T: DeserializeOwned>(
        &self,
        path: &str,
        action: &Action<'_>,
    ) -> Result<Vec<T>, ForgeError> {
        let mut url = format!("{}{path}", self.base);
        let mut all = Vec::new();
        for _ in 0..MAX_PAGES {
            let reply = self.call("GET", &url, None, Repeat::Safe, action)?;
            let page: Vec<T> = self.parse(&reply.body, action)?;
            all.extend(page);
            match reply.next {
                Some(next) => url = next,
                None => return Ok(all),
            }
        }
        tracing::warn!(forge = %self.kind, repo = action.repo, "{}: stopped after {MAX_PAGES} pages", action.what);
        Ok(all)
    }

    /// Send `method` to `path` with the JSON `body`, returning the parsed answer (`None` for a
    /// 204 or empty body).
    pub fn send<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: &serde_json::Value,
        repeat: Repeat,
        action: &Action<'_>,
    ) -> Result<Option<T>, ForgeError> {
        let url = format!("{}{path}", self.base);
        let text = body.to_string();
        let reply = self.call(method, &url, Some(&text), repeat, action)?;
        if reply.status == 204 || reply.body.trim().is_empty() {
            return Ok(None);
        }
        self.parse(&reply.body, action).map(Some)
    }

    /// DELETE `path`; a 404 counts as done (already gone). Returns whether it existed.
    pub fn delete(&self, path: &str, action: &Action<'_>) -> Result<bool, ForgeError> {
        let url = format!("{}{path}", self.base);
        match self.call("DELETE", &url, None, Repeat::Safe, action) {
            Ok(_) => Ok(true),
            Err(e) if e.kind == FailureKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn parse<T: DeserializeOwned>(&self, body: &str, action: &Action<'_>) -> Result<T, ForgeError> {
        serde_json::from_str(body).map_err(|e| {
            self.error(
                action,
                FailureKind::BadResponse(format!(
                    "{e}; body starts: {}",
                    body_snippet(body.as_bytes(), 200, Some(&self.token))
                )),
            )
        })
    }

    /// A [`ForgeError`] of this client for `action` (messages redacted).
    pub(super) fn error(&self, action: &Action<'_>, kind: FailureKind) -> ForgeError {
        let kind = match kind {
            FailureKind::Forbidden(m) => FailureKind::Forbidden(self.redact(&m)),
            FailureKind::RateLimited(m) => FailureKind::RateLimited(self.redact(&m)),
            FailureKind::Http { status, message } => FailureKind::Http {
                status,
                message: self.redact(&message),
            },
            FailureKind::Network(m) => FailureKind::Network(self.redact(&m)),
            FailureKind::Unknown(m) => FailureKind::Unknown(self.redact(&m)),
            FailureKind::BadResponse(m) => FailureKind::BadResponse(self.redact(&m)),
            k => k,
        };
        ForgeError {
            forge: self.kind,
            repo: action.repo.to_string(),
            action: action.what.clone(),
            kind,
            token_env: self.token_env.clone(),
            retry_after: None,
        }
    }

    /// One request with the retry policy (module docs).
    fn call(
        &self,
        method: &str,
        url: &str,
        body: Option<&str>,
        repeat: Repeat,
        action: &Action<'_>,
    ) -> Result<Reply, ForgeError> {
        let mut retries = 0u32;
        let mut rate_waits = 0u32;
        loop {
            let failure = match self.attempt(method, url, body) {
                Ok(reply) => return Ok(reply),
                Err(f) => f,
            };
            match failure {
                Attempt::Status {
                    status,
                    message,
                    rate_limit: Some(wait),
                    ..
                } => {
                    // A request that must not be repeated blindly is not held up here: its
                    // caller holds a lease that a long wait could outlive. The request was
                    // refused, not processed, so this failure is clean; the caller retries.
                    if rate_waits >= self.policy.max_rate_limit_waits || repeat == Repeat::Once {
                        let detail = if repeat == Repeat::Once {
                            "not waited for while posting; tried again later".to_string()
                        } else {
                            format!("after {rate_waits} wait(s)")
                        };
                        return Err(self
                            .error(
                                action,
                                FailureKind::RateLimited(format!(
                                    "HTTP {status} {message} ({detail})"
                                )),
                            )
                            .with_retry_after(Some(wait)));
                    }
                    rate_waits += 1;
                    let wait = wait.min(self.policy.max_rate_limit_wait);
                    tracing::warn!(
                        forge = %self.kind,
                        repo = action.repo,
                        status,
                        wait_secs = wait.as_secs_f64(),
                        "rate limited ({}); waiting before trying again",
                        action.what
                    );
                    thread::sleep(wait);
                }
                Attempt::Status {
                    status,
                    message,
                    retry_after,
                    ..
                } => {
                    let kind = match status {
                        401 => FailureKind::Unauthorized,
                        404 => FailureKind::NotFound,
                        403 => FailureKind::Forbidden(message),
                        _ => FailureKind::Http { status, message },
                    };
                    let transient = matches!(status, 500 | 502 | 503 | 504);
                    // A wait longer than the client may sleep is left to the caller.
                    let too_long = retry_after.is_some_and(|d| d > self.policy.max_rate_limit_wait);
                    if !transient || retries >= self.policy.max_retries || too_long {
                        return Err(self.error(action, kind).with_retry_after(retry_after));
                    }
                    if repeat == Repeat::Once {
                        // A 5xx may come after the server did the work.
                        let FailureKind::Http { status, message } = kind else {
                            return Err(self.error(action, kind).with_retry_after(retry_after));
                        };
                        return Err(self
                            .error(
                                action,
                                FailureKind::Unknown(format!("HTTP {status}: {message}")),
                            )
                            .with_retry_after(retry_after));
                    }
                    retries += 1;
                    self.back_off(retries, retry_after, action, &format!("HTTP {status}"));
                }
                Attempt::Transport { detail, unsent } => {
                    if repeat == Repeat::Once && !unsent {
                        return Err(self.error(action, FailureKind::Unknown(detail)));
                    }
                    if retries >= self.policy.max_retries {
                        return Err(self.error(action, FailureKind::Network(detail)));
                    }
                    retries += 1;
                    self.back_off(retries, None, action, &detail);
                }
            }
        }
    }

    /// Sleep before retry number `retry`: the exponential backoff, or the response's
    /// `retry_after` when that is longer.
    fn back_off(&self, retry: u32, retry_after: Option<Duration>, action: &Action<'_>, why: &str) {
        let d = backoff_delay(retry, self.policy.initial_backoff, self.policy.max_backoff)
            .max(retry_after.unwrap_or_default());
        tracing::info!(
            forge = %self.kind,
            repo = action.repo,
            retry,
            wait_ms = d.as_millis() as u64,
            "{}: {}; retrying",
            action.what,
            self.redact(why)
        );
        thread::sleep(d);
    }

    /// Send once; classify the outcome.
    fn attempt(&self, method: &str, url: &str, body: Option<&str>) -> Result<Reply, Attempt> {
        let mut req = self.agent.request(method, url);
        req = match self.kind {
            SourceKind::Github => req
                .set("Authorization", &format!("Bearer {}", self.token))
                .set("Accept", "application/vnd.github+json")
                .set("X-GitHub-Api-Version", "2022-11-28"),
            SourceKind::Gitlab => req
                .set("PRIVATE-TOKEN", &self.token)
                .set("Accept", "application/json"),
        };
        let result = match body {
            Some(b) => req.set("Content-Type", "application/json").send_string(b),
            None => req.call(),
        };
        match result {
            Ok(resp) => {
                let status = resp.status();
                let next = self.next_link(&resp);
                let body = read_body(resp).map_err(|e| Attempt::Transport {
                    detail: format!("{method} {url}: reading the response: {e}"),
                    unsent: false,
                })?;
                Ok(Reply { status, next, body })
            }
            Err(ureq::Error::Status(status, resp)) => {
                let now = SystemTime::now();
                let rate_limit = rate_limit_wait(status, &resp, now);
                let retry_after = resp
                    .header("retry-after")
                    .and_then(|v| parse_retry_after(v, now));
                let body = read_body(resp).unwrap_or_default();
                let message = error_message(&body, &self.token);
                // GitHub's secondary limits may come as a bare 403 that only says so in its
                // message; GitHub asks clients to wait at least a minute then.
                let rate_limit = rate_limit.or_else(|| {
                    (status == 403 && message.to_ascii_lowercase().contains("rate limit"))
                        .then_some(Duration::from_secs(60))
                });
                Err(Attempt::Status {
                    status,
                    message,
                    rate_limit,
                    retry_after,
                })
            }
            Err(ureq::Error::Transport(t)) => {
                let unsent = matches!(
                    t.kind(),
                    ureq::ErrorKind::Dns
                        | ureq::ErrorKind::ConnectionFailed
                        | ureq::ErrorKind::InvalidUrl
                        | ureq::ErrorKind::UnknownScheme
                );
                Err(Attempt::Transport {
                    detail: t.to_string(),
                    unsent,
                })
            }
        }
    }

    /// The next page's URL: `Link: <URL>; rel="next"`, else GitLab's `X-Next-Page` on the same
    /// URL. Only URLs on the API's own origin are followed (the token goes with them).
    fn next_link(&self, resp: &ureq::Response) -> Option<String> {
        let from_link = resp.all("link").into_iter().find_map(next_from_link);
        let next = from_link.or_else(|| {
            let page = resp.header("x-next-page")?.trim();
            if page.is_empty() || !page.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Some(with_query_param(resp.get_url(), "page", page))
        })?;
        if next.starts_with(&format!("{}/", self.origin)) {
            Some(next)
        } else {
            tracing::warn!(forge = %self.kind, next = %next, "not following a next-page link to another origin");
            None
        }
    }
}

/// The body as text, at most [`MAX_BODY_BYTES`].
fn read_body(resp: ureq::Response) -> std::io::Result<String> {
    let mut bytes = Vec::new();
    resp.into_reader()
        .take(MAX_BODY_BYTES)
        .read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Longest forge error message kept in an error, bytes: it reaches logs and the database.
const MAX_MESSAGE_BYTES: usize = 1024;

/// The forge's error message in a JSON error body (`message`, `error`, GitLab's
/// `{"message": {"field": [..]}}`), else a snippet of the body; the token redacted, then
/// bounded to [`MAX_MESSAGE_BYTES`] with its control characters escaped
/// ([`untrusted::text`]: the forge's text is untrusted).
fn error_message(body: &str, token: &str) -> String {
    let safe = |s: &str| untrusted::text(&redact(s, Some(token)), MAX_MESSAGE_BYTES).into_owned();
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(body) {
        for key in ["message", "error_description", "error"] {
            match v.get(key) {
                Some(serde_json::Value::String(s)) => return safe(s),
                Some(other @ (serde_json::Value::Object(_) | serde_json::Value::Array(_))) => {
                    return safe(&other.to_string());
                }
                _ => {}
            }
        }
    }
    body_snippet(body.as_bytes(), 300, Some(token))
}

/// How long a rate-limited response asks to wait, or `None` when it is not a rate limit:
/// 403/429 with `Retry-After`; 403/429 with `x-ratelimit-remaining: 0` (GitHub) or 429 with
/// `RateLimit-Reset` (GitLab) until the reset epoch second (at least 1 s); a bare 429: 60 s.
fn rate_limit_wait(status: u16, resp: &ureq::Response, now: SystemTime) -> Option<Duration> {
    rate_limit_wait_from(status, |name| resp.header(name).map(str::to_string), now)
}

/// [`rate_limit_wait`] over a header lookup (for tests).
fn rate_limit_wait_from(
    status: u16,
    header: impl Fn(&str) -> Option<String>,
    now: SystemTime,
) -> Option<Duration> {
    if status != 403 && status != 429 {
        return None;
    }
    if let Some(d) = header("retry-after").and_then(|v| parse_retry_after(&v, now)) {
        return Some(d.max(Duration::from_secs(1)));
    }
    let exhausted = header("x-ratelimit-remaining").is_some_and(|v| v.trim() == "0")
        || header("ratelimit-remaining").is_some_and(|v| v.trim() == "0");
    if exhausted || status == 429 {
        let reset = header("x-ratelimit-reset").or_else(|| header("ratelimit-reset"));
        if let Some(epoch) = reset.and_then(|v| v.trim().parse::<u64>().ok()) {
            let now_secs = now
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64();
            let wait = (epoch as f64 - now_secs).max(0.0) + 1.0;
            return Some(Duration::from_secs_f64(wait));
        }
        return Some(Duration::from_secs(60));
    }
    None
}

/// The URL of `rel="next"` in one `Link` header value (`<url>; rel="next", <url>; rel="last"`).
fn next_from_link(value: &str) -> Option<String> {
    value.split(',').find_map(|part| {
        let (url, params) = part.trim().split_once(';')?;
        let url = url.trim().strip_prefix('<')?.strip_suffix('>')?;
        params
            .split(';')
            .any(|p| {
                let p = p.trim();
                p == "rel=\"next\"" || p == "rel=next"
            })
            .then(|| url.to_string())
    })
}

/// `url` with query parameter `key` set to `value` (replaced when present).
fn with_query_param(url: &str, key: &str, value: &str) -> String {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let mut params: Vec<String> = query
        .split('&')
        .filter(|p| !p.is_empty() && p.split('=').next() != Some(key))
        .map(str::to_string)
        .collect();
    params.push(format!("{key}={value}"));
    format!("{path}?{}", params.join("&"))
}

/// `scheme://host[:port]` of `url`.
fn origin_of(url: &str) -> String {
    let after_scheme = url.find("://").map(|i| i + 3).unwrap_or(0);
    match url[after_scheme..].find('/') {
        Some(i) => url[..after_scheme + i].to_string(),
        None => url.to_string(),
    }
}

/// `s` percent-encoded for a URL path segment or query value (RFC 3986 unreserved kept).
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_links_are_found_in_link_headers() {
        assert_eq!(
            next_from_link(
                "<https://api.github.com/repos/a/b/issues?page=2>; rel=\"next\", <https://api.github.com/repos/a/b/issues?page=5>; rel=\"last\""
            )
            .as_deref(),
            Some("https://api.github.com/repos/a/b/issues?page=2")
        );
        assert_eq!(
            next_from_link("<https://x/?page=1>; rel=\"prev\", <https://x/?page=3>; rel=\"next\"")
                .as_deref(),
            Some("https://x/?page=3")
        );
        assert_eq!(next_from_link("<https://x/?page=1>; rel=\"first\""), None);
        assert_eq!(
            with_query_param("http://h/api/v4/x?per_page=100&page=1", "page", "2"),
            "http://h/api/v4/x?per_page=100&page=2"
        );
        assert_eq!(origin_of("https://h:8080/api/v4"), "https://h:8080");
        assert_eq!(origin_of("http://127.0.0.1:5"), "http://127.0.0.1:5");
    }

    #[test]
    fn next_pages_are_followed_only_on_the_api_s_origin() {
        let client = RestClient::new(
            SourceKind::Github,
            "https://api.github.com",
            "t".into(),
            "GITHUB_TOKEN",
            RetryPolicy::default(),
        );
        let resp = |link: &str| -> ureq::Response {
            format!("HTTP/1.1 200 OK\r\nLink: {link}\r\n\r\n[]")
                .parse()
                .unwrap()
        };
        assert_eq!(
            client
                .next_link(&resp("<https://api.github.com/x?page=2>; rel=\"next\""))
                .as_deref(),
            Some("https://api.github.com/x?page=2")
        );
        // Elsewhere, the token would go with it: not followed.
        for other in [
            "<https://evil.example/x?page=2>; rel=\"next\"",
            "<http://api.github.com/x?page=2>; rel=\"next\"",
            "<https://api.github.com.evil.example/x?page=2>; rel=\"next\"",
        ] {
            assert_eq!(client.next_link(&resp(other)), None, "{other}");
        }
        assert!(format!("{client:?}").contains("[redacted]"));
    }

    #[test]
    fn rate_limits_are_read_from_either_forge_s_headers() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        let h = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.to_string())
            }
        };
        // GitHub primary limit: wait until the reset (+1 s).
        assert_eq!(
            rate_limit_wait_from(
                403,
                h(&[
                    ("x-ratelimit-remaining", "0"),
                    ("x-ratelimit-reset", "1010")
                ]),
                now
            ),
            Some(Duration::from_secs(11))
        );
        // GitHub secondary limit: Retry-After.
        assert_eq!(
            rate_limit_wait_from(403, h(&[("retry-after", "7")]), now),
            Some(Duration::from_secs(7))
        );
        // GitLab: 429 with RateLimit-Reset.
        assert_eq!(
            rate_limit_wait_from(429, h(&[("RateLimit-Reset", "1003")]), now),
            Some(Duration::from_secs(4))
        );
        // A bare 429: a minute.
        assert_eq!(
            rate_limit_wait_from(429, h(&[]), now),
            Some(Duration::from_secs(60))
        );
        // A 403 with quota left is a permission error.
        assert_eq!(
            rate_limit_wait_from(403, h(&[("x-ratelimit-remaining", "4999")]), now),
            None
        );
        assert_eq!(
            rate_limit_wait_from(500, h(&[("retry-after", "1")]), now),
            None
        );
    }

    #[test]
    fn error_messages_come_from_the_body_without_the_token() {
        assert_eq!(
            error_message(
                r#"{"message":"Bad credentials","documentation_url":"x"}"#,
                "tok"
            ),
            "Bad credentials"
        );
        assert_eq!(
            error_message(r#"{"message":{"labels":["is invalid"]}}"#, "tok"),
            r#"{"labels":["is invalid"]}"#
        );
        assert_eq!(
            error_message("echo tok-1234 back", "tok-1234"),
            "echo [redacted] back"
        );
        let hostile = format!(
            r#"{{"message":"tok-1234 line1\nERROR forged line\u001b[2J{}"}}"#,
            "x".repeat(5000)
        );
        let m = error_message(&hostile, "tok-1234");
        assert!(
            m.starts_with("[redacted] line1\\nERROR forged line\\u{1b}[2J"),
            "{m}"
        );
        assert!(!m.contains('\n') && !m.contains('\u{1b}'));
        assert!(
            m.len() < MAX_MESSAGE_BYTES + 64 && m.contains("[cut: "),
            "{m}"
        );
        assert_eq!(encode("coding agent"), "coding%20agent");
        assert_eq!(encode("group/sub/proj"), "group%2Fsub%2Fproj");
    }
}
