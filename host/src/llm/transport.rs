//! [`Transport`]: POST a request file, stream the response into a file, retry transient failures.

use std::io::{self, BufReader, Read, Write};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use super::attempt::AttemptError;
use super::body_kind::BodyKind;
use super::config::{AuthScheme, TransportConfig};
use super::error::{BODY_SNIPPET_BYTES, TimeoutLimit, TransportError, body_snippet, redact};
use super::failed_streams::keep_failed_stream;
use super::handshake::HandshakeLimit;
use super::interruption::{
    Gate, INTERRUPT_POLL, Interruption, SharedGate, abandoned, lock, wait_unless_requested,
};
use super::redact::{Redactor, url_credentials, url_without_credentials};
use super::retry::{INITIAL_BACKOFF, next_delay, parse_retry_after, should_retry};
use crate::task_dir::TaskDir;

/// The log target of the line saying a POST was given up (`llm POST failed; giving up`): the
/// call's failure is recorded in llm_calls.jsonl, and `ask` prints it from there, so its task
/// process turns this target off.
pub const GAVE_UP_LOG: &str = "ctxhost::llm_gave_up";

/// How many times `max_response_bytes` a streamed reply's raw bytes may be: event framing
/// around small deltas (a chat-completions chunk carries ~150 bytes of JSON around a few
/// characters), and the Responses API repeats the whole text in its closing events. The reply
/// folded from the stream is held to `max_response_bytes` itself, as an unstreamed body is
/// (the one rule of `llm.max_response_mib`).
pub const STREAM_FRAMING_FACTOR: u64 = 64;

/// Most bytes of an error response read to find the provider's error message in it.
const ERROR_BODY_BYTES: u64 = 64 * 1024;

/// The result of a successful [`Transport::post_file`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostOutcome {
    /// The 2xx HTTP status of the final attempt.
    pub status: u16,
    /// Bytes of the response body written to the response file.
    pub bytes: u64,
    /// Attempts made, including the successful one (1 = no retry).
    pub attempts: u32,
    /// Wall time of the whole call, including backoff sleeps.
    pub elapsed: Duration,
    /// For [`Transport::post_file_streamed`]: whether the body was a stream. `false` when the
    /// server ignored the request for one and answered one whole JSON body
    /// ([`BodyKind::of`]); that body was then read like an unstreamed one (kept whole or not
    /// at all, never as a failed stream). Always `false` for the other calls.
    pub streamed: bool,
    /// The final response's `Retry-After` (HTTP 200 included), capped at `max_backoff`: the
    /// wait a caller honours before sending the request again after an error the provider
    /// sent inside the stream ([`Transport::wait_before_retry`]).
    pub retry_after: Option<Duration>,
}

/// How [`Transport::wait_before_retry`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryWait {
    /// The wait is over: send the request again.
    Waited,
    /// No attempt is left in the call's budget, or the wait would end past the deadline.
    GiveUp,
    /// A pause or stop was requested during the wait.
    Interrupted,
}

/// What one successful attempt got: status, body bytes, whether it was a stream, its
/// `Retry-After`.
type Answer = (u16, u64, bool, Option<Duration>);

/// A blocking HTTP client for one provider. Keeps a connection pool; `Send + Sync`, so one
/// instance can serve a task's agent loop and its compressor's `llm` import. Clones share the
/// pool.
#[derive(Clone)]
pub struct Transport {
    cfg: TransportConfig,
    agent: ureq::Agent,
    /// For streamed replies: no whole-request limit, `idle_timeout` per read instead.
    stream_agent: ureq::Agent,
    initial_backoff: Duration,
    /// Where to say what a call waits for between its attempts ([`Transport::with_wait_note`]).
    wait_note: Option<Arc<std::path::PathBuf>>,
}

impl Transport {
    /// A transport for `cfg`. Does no I/O; connections are opened on first use. Redirects are
    /// not followed (a 3xx is reported as an error naming its `Location`), so a request body
    /// and an API key are never sent to a host other than `base_url`'s. Opening the TCP
    /// connection and the TLS handshake each wait at most `connect_timeout`
    /// ([`HandshakeLimit`]).
    pub fn new(cfg: TransportConfig) -> Transport {
        let builder = || {
            let b = ureq::AgentBuilder::new()
                .timeout_connect(cfg.connect_timeout)
                .redirects(0)
                .user_agent(concat!("ctxhost/", env!("CARGO_PKG_VERSION")));
            match HandshakeLimit::new(cfg.connect_timeout) {
                Some(tls) => b.tls_connector(tls),
                None => b,
            }
        };
        let agent = builder().timeout(cfg.request_timeout).build();
        let stream_agent = builder()
            .timeout_read(cfg.idle_timeout)
            .timeout_write(cfg.idle_timeout)
            .build();
        Transport {
            cfg,
            agent,
            stream_agent,
            initial_backoff: INITIAL_BACKOFF,
            wait_note: None,
        }
    }

    /// Say in the file `path` (one line) what a call waits for between its attempts — `waiting
    /// for the model: stream stalled 120 s, retry 1 of 3` — from the start of the back-off
    /// until the attempt it waits for ends; the file is removed then. `ask`, `show` and the
    /// dashboard read it ([`crate::remote::read_wait_note`]).
    pub fn with_wait_note(mut self, path: std::path::PathBuf) -> Transport {
        self.wait_note = Some(Arc::new(path));
        self
    }

    /// Writes (`Some`) or removes (`None`) the wait note, if one is set; failures are logged.
    fn note_wait(&self, text: Option<&str>) {
        let Some(path) = &self.wait_note else {
            return;
        };
        let r = match text {
            Some(t) => crate::layout::atomic_write(path, format!("{t}\n").as_bytes()),
            None => match std::fs::remove_file(&**path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e.into()),
                _ => Ok(()),
            },
        };
        if let Err(e) = r {
            tracing::debug!(path = %path.display(), "cannot write the model wait note: {e:#}");
        }
    }

    /// The wait note's text for retry `retry` after `why` (`stream stalled 120 s`).
    fn wait_text(&self, why: &str, retry: u32) -> String {
        format!(
            "waiting for the model: {why}, retry {retry} of {}",
            self.cfg.max_retries
        )
    }

    /// Replace the first backoff delay (default [`INITIAL_BACKOFF`], 500 ms; doubles per retry).
    /// `Retry-After` from the server still takes precedence. Mainly for tests.
    pub fn with_initial_backoff(mut self, initial: Duration) -> Transport {
        self.initial_backoff = initial;
        self
    }

    /// The configuration this transport was built with.
    pub fn config(&self) -> &TransportConfig {
        &self.cfg
    }

    /// POST the file `request_file` of the task directory `dir` (streamed from disk with its
    /// size as Content-Length, `Content-Type: application/json`, the API key as
    /// [`TransportConfig::auth`] says) to [`TransportConfig::url_for`]`(endpoint_path)`, and
    /// write the response body to `response_file` in `dir` (via `<response_file>.partial`,
    /// renamed into place only once the whole body was read), with every occurrence of the API
    /// key replaced by `[redacted]`. Both files are opened through `dir`, never following a
    /// link. A request file larger than `max_request_bytes` is not sent
    /// ([`TransportError::RequestTooLarge`]). Retries up to `max_retries` times on 408, 409,
    /// 429, 500, 502, 503, 504, 529, connection failures, timeouts and truncated bodies (a
    /// server's `x-should-retry: true|false` decides instead of the status), waiting
    /// `Retry-After` (capped at `max_backoff`) or an exponential backoff with jitter.
    ///
    /// Ok only for a 2xx whose body was fully read. The request file is never modified. On
    /// error no response file is left behind (an existing one is left as it was).
    pub fn post_file(
        &self,
        endpoint_path: &str,
        dir: &TaskDir,
        request_file: &str,
        response_file: &str,
    ) -> Result<PostOutcome, TransportError> {
        self.post(
            endpoint_path,
            dir,
            (request_file, response_file),
            None,
            None,
            false,
            0,
        )
    }

    /// [`Transport::post_file`] that gives way to a pause or stop of the task: see
    /// [`Interruption`] for when `interruption.requested` is asked and what happens then
    /// ([`TransportError::Interrupted`]). For the agent loop's calls.
    pub fn post_file_interruptible(
        &self,
        endpoint_path: &str,
        dir: &TaskDir,
        request_file: &str,
        response_file: &str,
        interruption: &Interruption<'_>,
    ) -> Result<PostOutcome, TransportError> {
        self.post(
            endpoint_path,
            dir,
            (request_file, response_file),
            None,
            Some(interruption),
            false,
            0,
        )
    }

    /// [`Transport::post_file`], all attempts and waits included, finished by `deadline`: each
    /// attempt's timeout is cut to the time left, and no retry starts that could not end in
    /// time (the last error is returned). For the compressor's `llm` import, whose calls share
    /// the compression's wall-time limit.
    pub fn post_file_before(
        &self,
        endpoint_path: &str,
        dir: &TaskDir,
        request_file: &str,
        response_file: &str,
        deadline: Instant,
    ) -> Result<PostOutcome, TransportError> {
        self.post(
            endpoint_path,
            dir,
            (request_file, response_file),
            Some(deadline),
            None,
            false,
            0,
        )
    }

    /// [`Transport::post_file`] with both limits, each optional: finished by `deadline`
    /// ([`Transport::post_file_before`]) and giving way to a pause or stop of the task
    /// ([`Transport::post_file_interruptible`]). For the compressor's and the strategy's `llm`
    /// imports, which share a wall-time limit and must not hold up a stop.
    pub fn post_file_with(
        &self,
        endpoint_path: &str,
        dir: &TaskDir,
        request_file: &str,
        response_file: &str,
        deadline: Option<Instant>,
        interruption: Option<&Interruption<'_>>,
    ) -> Result<PostOutcome, TransportError> {
        self.post(
            endpoint_path,
            dir,
            (request_file, response_file),
            deadline,
            interruption,
            false,
            0,
        )
    }

    /// [`Transport::post_file_with`] for a request that asks for a streamed reply: the body is
    /// written to `stream_file` in `dir` as it arrives (truncated at the start of each attempt,
    /// flushed after each read, the API key redacted; it stays after the call, for
    /// `show --follow` and debugging), each read waiting at most
    /// [`TransportConfig::idle_timeout`] instead of a whole-request limit (the caller's
    /// `deadline` still bounds the call). An attempt that fails after the body began (broken
    /// off, idle timeout, too large) leaves what it received as `failed-streams/{n}.stream`
    /// (n from 1) before the retry. A pause or stop abandons a stream in flight at once (no
    /// grace: a partial reply is of no use), within [`INTERRUPT_POLL`].
    ///
    /// A server that ignores the request for a stream and answers one whole JSON body
    /// (`Content-Type: application/json`, or no type and a body starting with `{`:
    /// [`BodyKind`]) is read as [`Transport::post_file_with`] reads a body: to
    /// `<stream_file>.partial`, renamed to `stream_file` once whole, a body cut off retried
    /// and never kept in `failed-streams/`; [`PostOutcome::streamed`] is then `false`.
    ///
    /// `made`: requests this call already made (a stream the format found cut, sent again by
    /// the caller): they count against the one budget of the call, `1 + max_retries` requests
    /// whatever failed ([`PostOutcome::attempts`] and the error's attempts include them); the
    /// caller asks [`Transport::wait_before_retry`] first, which says when none is left.
    #[allow(clippy::too_many_arguments)]
    pub fn post_file_streamed(
        &self,
        endpoint_path: &str,
        dir: &TaskDir,
        request_file: &str,
        stream_file: &str,
        deadline: Option<Instant>,
        interruption: Option<&Interruption<'_>>,
        made: u32,
    ) -> Result<PostOutcome, TransportError> {
        self.post(
            endpoint_path,
            dir,
            (request_file, stream_file),
            deadline,
            interruption,
            true,
            made,
        )
    }

    /// The wait before sending a request again after attempt `made` of the call failed in a
    /// way only the caller saw (a stream cut off, an error the provider sent inside it): the
    /// same wait as between the transport's own attempts (the provider's `retry_after`, capped
    /// at `max_backoff`, else exponential backoff with jitter from the first delay), and the
    /// same budget. Returns [`RetryWait::GiveUp`] at once when `made` already is
    /// `1 + max_retries` or the wait would end past `deadline`; asks `interruption` every
    /// [`INTERRUPT_POLL`] while it waits.
    /// `why` says what failed for the wait note ([`Transport::with_wait_note`]), e.g.
    /// `stream cut off`; the note stays until the next attempt ends.
    pub fn wait_before_retry(
        &self,
        made: u32,
        why: &str,
        retry_after: Option<Duration>,
        deadline: Option<Instant>,
        interruption: Option<&Interruption<'_>>,
    ) -> RetryWait {
        if made >= self.cfg.max_retries.saturating_add(1) {
            return RetryWait::GiveUp;
        }
        let delay = next_delay(
            made,
            retry_after,
            self.initial_backoff,
            self.cfg.max_backoff,
        );
        if deadline.is_some_and(|d| Instant::now() + delay >= d) {
            return RetryWait::GiveUp;
        }
        self.note_wait(Some(&self.wait_text(why, made)));
        match interruption {
            Some(i) if wait_unless_requested(delay, i) => RetryWait::Interrupted,
            Some(_) => RetryWait::Waited,
            None => {
                thread::sleep(delay);
                RetryWait::Waited
            }
        }
    }

    /// The POST of every `post_file*` call, which already made `made` requests (one budget:
    /// [`Transport::post_file_streamed`]).
    #[allow(clippy::too_many_arguments)]
    fn post(
        &self,
        endpoint_path: &str,
        dir: &TaskDir,
        files: (&str, &str),
        deadline: Option<Instant>,
        interruption: Option<&Interruption<'_>>,
        streamed: bool,
        made: u32,
    ) -> Result<PostOutcome, TransportError> {
        let url = self.cfg.url_for(endpoint_path);
        // The URL as every log line and error shows it.
        let shown = url_without_credentials(&url).into_owned();
        let started = Instant::now();
        let max_attempts = self.cfg.max_retries.saturating_add(1);
        let mut attempt = made.min(max_attempts - 1);
        // The wait note of a back-off stays while the attempt it waited for runs.
        let _note = NoteGuard(self);
        loop {
            if interruption.is_some_and(|i| (i.requested)()) {
                tracing::info!(url = %shown, attempts = attempt, "llm POST given up before the next attempt: pause or stop requested");
                return Err(TransportError::Interrupted {
                    url: shown,
                    attempts: attempt,
                });
            }
            attempt += 1;
            let t0 = Instant::now();
            let left = deadline.map(|d| d.saturating_duration_since(t0));
            let result = match (left, interruption) {
                (Some(d), _) if d.is_zero() => Err(AttemptError::Timeout {
                    which: TimeoutLimit::Deadline,
                    limit: Duration::ZERO,
                    detail: "no time left before the caller's deadline".to_string(),
                }),
                (_, Some(i)) => {
                    self.attempt_interruptible(&url, &shown, dir, files, left, i, streamed)
                }
                (_, None) => self.attempt(&url, &shown, dir, files, left, None, streamed),
            }
            .map_err(|e| e.scrub(url_credentials(&url)));
            match result {
                Ok((status, bytes, body_streamed, retry_after)) => {
                    tracing::info!(
                        url = %shown, attempt, status, bytes, streamed = body_streamed,
                        elapsed_ms = t0.elapsed().as_millis() as u64,
                        "llm POST ok"
                    );
                    return Ok(PostOutcome {
                        status,
                        bytes,
                        attempts: attempt,
                        elapsed: started.elapsed(),
                        streamed: body_streamed,
                        retry_after: retry_after.map(|d| d.min(self.cfg.max_backoff)),
                    });
                }
                Err(e) => {
                    let elapsed_ms = t0.elapsed().as_millis() as u64;
                    let delay = next_delay(
                        attempt,
                        e.retry_after(),
                        self.initial_backoff,
                        self.cfg.max_backoff,
                    );
                    let out_of_time = deadline.is_some_and(|d| Instant::now() + delay >= d);
                    if !e.retryable() || attempt >= max_attempts || out_of_time {
                        tracing::warn!(
                            target: GAVE_UP_LOG,
                            url = %shown, attempt, max_attempts, elapsed_ms,
                            error = %e.summary(), retryable = e.retryable(), out_of_time,
                            "llm POST failed; giving up"
                        );
                        return Err(e.into_error(&shown, attempt, &self.cfg, dir, files));
                    }
                    tracing::warn!(
                        url = %shown, attempt, max_attempts, elapsed_ms,
                        error = %e.summary(),
                        retry_after_ms = e.retry_after().map(|d| d.as_millis() as u64),
                        retry_in_ms = delay.as_millis() as u64,
                        "llm POST failed; retrying"
                    );
                    self.note_wait(Some(&self.wait_text(&e.reason(), attempt)));
                    if let Some(i) = interruption {
                        if wait_unless_requested(delay, i) {
                            tracing::info!(url = %shown, attempts = attempt, "llm POST given up during the back-off: pause or stop requested");
                            return Err(TransportError::Interrupted {
                                url: shown,
                                attempts: attempt,
                            });
                        }
                    } else {
                        thread::sleep(delay);
                    }
                }
            }
        }
    }

    /// [`Transport::attempt`] in a thread of its own, while this one asks `interruption`
    /// every [`INTERRUPT_POLL`]; after a request and its grace the attempt is abandoned
    /// ([`Gate`]) and [`AttemptError::Interrupted`] returned at once.
    #[allow(clippy::too_many_arguments)]
    fn attempt_interruptible(
        &self,
        url: &str,
        shown: &str,
        dir: &TaskDir,
        (request_file, response_file): (&str, &str),
        left: Option<Duration>,
        interruption: &Interruption<'_>,
        streamed: bool,
    ) -> Result<Answer, AttemptError> {
        // A streamed reply is abandoned at once: what arrived so far cannot be used.
        let grace = if streamed {
            Duration::ZERO
        } else {
            interruption.grace
        };
        let gate: SharedGate = Arc::new(Mutex::new(Gate::Open));
        let (tx, rx) = mpsc::channel();
        let spawned = {
            let (t, dir, gate) = (self.clone(), dir.clone(), gate.clone());
            let (url, shown) = (url.to_string(), shown.to_string());
            let files = (request_file.to_string(), response_file.to_string());
            thread::Builder::new()
                .name("llm-attempt".into())
                .spawn(move || {
                    let files = (files.0.as_str(), files.1.as_str());
                    let r = t.attempt(&url, &shown, &dir, files, left, Some(&gate), streamed);
                    let _ = tx.send(r);
                })
        };
        if let Err(e) = spawned {
            tracing::warn!(
                "cannot start a thread for the LLM call ({e}); making it uninterruptible"
            );
            let files = (request_file, response_file);
            return self.attempt(url, shown, dir, files, left, None, streamed);
        }
        let mut requested_at: Option<Instant> = None;
        loop {
            match rx.recv_timeout(INTERRUPT_POLL) {
                Ok(result) => return result,
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(AttemptError::Connection(
                        "the thread of the attempt ended without a result".into(),
                    ));
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            let since = match requested_at {
                Some(t) => t,
                None if (interruption.requested)() => {
                    tracing::info!(url = %shown, grace_ms = grace.as_millis() as u64,
                        "pause or stop requested: waiting for the reply in flight at most the grace period");
                    *requested_at.insert(Instant::now())
                }
                None => continue,
            };
            if since.elapsed() >= grace {
                let mut g = lock(&gate);
                if *g == Gate::Written {
                    // The reply is in its file: keep it.
                    drop(g);
                    return rx.recv().unwrap_or(Err(AttemptError::Interrupted));
                }
                *g = Gate::Abandoned;
                tracing::info!(url = %shown, "LLM call in flight abandoned: pause or stop requested");
                return Err(AttemptError::Interrupted);
            }
        }
    }

    /// One attempt: send, then stream a 2xx body to the response file. Returns (status, bytes).
    /// `left`: time before the caller's deadline, which cuts the attempt's timeout. `gate`:
    /// set for an attempt run by [`Transport::attempt_interruptible`].
    #[allow(clippy::too_many_arguments)]
    fn attempt(
        &self,
        url: &str,
        shown: &str,
        dir: &TaskDir,
        (request_file, response_file): (&str, &str),
        left: Option<Duration>,
        gate: Option<&SharedGate>,
        streamed: bool,
    ) -> Result<Answer, AttemptError> {
        let file = dir
            .open_read(request_file)
            .map_err(AttemptError::RequestFile)?;
        let len = file.metadata().map_err(AttemptError::RequestFile)?.len();
        if len > self.cfg.max_request_bytes {
            return Err(AttemptError::RequestTooLarge(len));
        }
        tracing::debug!(url = %shown, request_bytes = len, has_key = self.cfg.api_key.is_some(), "llm POST sending");
        let (agent, accept) = if streamed {
            (
                &self.stream_agent,
                "text/event-stream, application/x-ndjson, application/json",
            )
        } else {
            (&self.agent, "application/json")
        };
        let mut req = agent
            .post(url)
            .set("Content-Type", "application/json")
            .set("Accept", accept)
            .set("Content-Length", &len.to_string());
        if let Some(left) = left {
            req = req.timeout(if streamed {
                left
            } else {
                left.min(self.cfg.request_timeout)
            });
        }
        match (self.cfg.auth, &self.cfg.api_key) {
            (AuthScheme::Bearer, Some(key)) => {
                req = req.set("Authorization", &format!("Bearer {key}"));
            }
            (AuthScheme::Bearer, None) => {}
            (AuthScheme::Anthropic, key) => {
                req = req.set("anthropic-version", ctxhost_format::anthropic::API_VERSION);
                if let Some(key) = key {
                    req = req.set("x-api-key", key);
                }
            }
        }
        // `take(len)`: never send more than announced, even if the file grew meanwhile.
        let body = BufReader::with_capacity(64 * 1024, file).take(len);
        let resp = match req.send(body) {
            Ok(resp) => resp,
            Err(ureq::Error::Status(status, resp)) => return Err(self.status_error(status, resp)),
            Err(ureq::Error::Transport(t)) => {
                return Err(self.classify_transport(&t, left, streamed));
            }
        };
        let status = resp.status();
        if !(200..300).contains(&status) {
            // 1xx/3xx (redirects are not followed): report, don't retry.
            return Err(self.status_error(status, resp));
        }
        let retry_after = resp
            .header("Retry-After")
            .and_then(|v| parse_retry_after(v, SystemTime::now()));
        if !streamed {
            let bytes = self.stream_body(Body::of(resp), dir, response_file, gate)?;
            return Ok((status, bytes, false, retry_after));
        }
        let kind = BodyKind::of(resp.header("Content-Type"));
        let mut body = Body::of(resp);
        let kind = match kind {
            BodyKind::Unknown => BodyKind::of_first_byte(body.first_byte(self.cfg.idle_timeout)?),
            known => known,
        };
        if kind == BodyKind::Whole {
            tracing::info!(url = %shown, "a streamed reply was asked for, the server answered one JSON body: read as such");
            let bytes = self.stream_body(body, dir, response_file, gate)?;
            return Ok((status, bytes, false, retry_after));
        }
        let bytes = self.stream_live(body, dir, response_file, gate)?;
        Ok((status, bytes, true, retry_after))
    }

    /// Build the error for a non-2xx response: snippet of its body, the provider's error
    /// message when the body is a JSON error object (OpenAI's `{"error":{"message","type"}}`,
    /// Anthropic's `{"type":"error","error":{"type","message"}}`, `{"error":"text"}`), the
    /// request id, `Retry-After`, `x-should-retry`, and for a redirect the `Location` it
    /// pointed to. The key is redacted from all of it.
    fn status_error(&self, status: u16, resp: ureq::Response) -> AttemptError {
        let status_text = resp.status_text().to_string();
        let retry_after = resp
            .header("Retry-After")
            .and_then(|v| parse_retry_after(v, SystemTime::now()));
        let retryable = should_retry(status, resp.header("x-should-retry"));
        let request_id = resp
            .header("request-id")
            .or_else(|| resp.header("x-request-id"))
            .map(|id| body_snippet(id.as_bytes(), 100, self.cfg.api_key.as_deref()));
        let location = resp.header("Location").map(str::to_string);
        let mut buf = Vec::with_capacity(BODY_SNIPPET_BYTES + 4);
        // A body that breaks off is fine here: we only want its beginning.
        let _ = resp
            .into_reader()
            .take(ERROR_BODY_BYTES)
            .read_to_end(&mut buf);
        let key = self.cfg.api_key.as_deref();
        let provider_error = serde_json::from_slice::<serde_json::Value>(&buf)
            .ok()
            .and_then(|v| ctxhost_format::body::provider_error(&v))
            .map(|e| body_snippet(redact(&e, key).as_bytes(), BODY_SNIPPET_BYTES, None));
        let mut body = body_snippet(&buf, BODY_SNIPPET_BYTES, key);
        // "The context is too long" (llama.cpp used to send it with a 500): sending the same
        // request again cannot help.
        let retryable = retryable
            && !provider_error
                .as_deref()
                .is_some_and(super::overflow::is_context_overflow)
            && !super::overflow::is_context_overflow(&body);
        if let Some(loc) = location {
            body = format!("(redirect to {loc}; set llm.base_url to the final URL) {body}");
        }
        AttemptError::Status {
            status,
            status_text,
            body,
            provider_error,
            request_id,
            retry_after,
            retryable,
        }
    }

    /// The error for a failed send; `left` is the time the attempt had before the caller's
    /// deadline, so a timeout names the limit that actually applied.
    fn classify_transport(
        &self,
        t: &ureq::Transport,
        left: Option<Duration>,
        streamed: bool,
    ) -> AttemptError {
        use ureq::ErrorKind as K;
        let io_kind = std::error::Error::source(t)
            .and_then(|s| s.downcast_ref::<io::Error>())
            .map(io::Error::kind);
        // kind, message and source often repeat each other ("Network Error: Network Error: …").
        let mut detail = t.kind().to_string();
        let parts = [
            t.message().map(str::to_string),
            std::error::Error::source(t).map(|s| s.to_string()),
        ];
        for part in parts.into_iter().flatten() {
            if part.starts_with(&detail) {
                detail = part;
            } else if !detail.contains(&part) {
                detail.push_str(": ");
                detail.push_str(&part);
            }
        }
        match t.kind() {
            K::InvalidUrl | K::UnknownScheme | K::InsecureRequestHttpsOnly | K::InvalidProxyUrl => {
                AttemptError::InvalidUrl(detail)
            }
            _ if matches!(
                io_kind,
                Some(io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock)
            ) =>
            {
                // ureq reports a TCP connect and a TLS handshake that ran out of time as
                // `ConnectionFailed`; both are bounded by `connect_timeout` (unless the
                // caller's deadline was nearer).
                let (which, limit) = if t.kind() == K::ConnectionFailed {
                    (TimeoutLimit::Connect, self.cfg.connect_timeout)
                } else if streamed {
                    (TimeoutLimit::Idle, self.cfg.idle_timeout)
                } else {
                    (TimeoutLimit::Request, self.cfg.request_timeout)
                };
                match left {
                    Some(left) if left < limit => AttemptError::Timeout {
                        which: TimeoutLimit::Deadline,
                        limit: left,
                        detail,
                    },
                    _ => AttemptError::Timeout {
                        which,
                        limit,
                        detail,
                    },
                }
            }
            _ => AttemptError::Connection(detail),
        }
    }

    /// Copy the body to `<response_file>.partial` in `dir`, the API key redacted, then rename
    /// it to `response_file` (unless `gate` says the attempt was abandoned).
    fn stream_body(
        &self,
        resp: Body,
        dir: &TaskDir,
        response_file: &str,
        gate: Option<&SharedGate>,
    ) -> Result<u64, AttemptError> {
        let partial = format!("{response_file}.partial");
        let result = self.copy_capped(resp, dir, &partial, gate, false);
        let mut held = gate.map(lock);
        if held.as_deref() == Some(&Gate::Abandoned) {
            let _ = dir.remove_file(&partial);
            return Err(AttemptError::Interrupted);
        }
        match result {
            Ok(n) => match dir.rename(&partial, response_file) {
                Ok(()) => {
                    if let Some(g) = held.as_deref_mut() {
                        *g = Gate::Written;
                    }
                    Ok(n)
                }
                Err(e) => {
                    let _ = dir.remove_file(&partial);
                    Err(AttemptError::ResponseFile(e))
                }
            },
            Err(e) => {
                let _ = dir.remove_file(&partial);
                Err(e)
            }
        }
    }

    /// Write a streamed body straight to `stream_file` as it arrives ([`Transport::copy_capped`]
    /// live); a body that fails after it began is kept as `failed-streams/{n}.stream`
    /// ([`keep_failed_stream`]); an abandoned one is left as it is.
    fn stream_live(
        &self,
        resp: Body,
        dir: &TaskDir,
        stream_file: &str,
        gate: Option<&SharedGate>,
    ) -> Result<u64, AttemptError> {
        let result = self.copy_capped(resp, dir, stream_file, gate, true);
        let mut held = gate.map(lock);
        match result {
            Ok(n) if held.as_deref() != Some(&Gate::Abandoned) => {
                if let Some(g) = held.as_deref_mut() {
                    *g = Gate::Written;
                }
                Ok(n)
            }
            Ok(_) | Err(AttemptError::Interrupted) => Err(AttemptError::Interrupted),
            Err(e) => {
                drop(held);
                keep_failed_stream(dir, stream_file);
                Err(e)
            }
        }
    }

    /// Stream the body into the new file `dest` of `dir` (bytes received are counted against
    /// `max_response_bytes`; what is written has the key redacted). Returns the bytes received.
    /// With `live` (a streamed reply) each read is flushed at once and its time limit is
    /// [`TransportConfig::idle_timeout`].
    fn copy_capped(
        &self,
        resp: Body,
        dir: &TaskDir,
        dest: &str,
        gate: Option<&SharedGate>,
        live: bool,
    ) -> Result<u64, AttemptError> {
        if abandoned(gate) {
            return Err(AttemptError::Interrupted);
        }
        let file = dir.create(dest).map_err(AttemptError::ResponseFile)?;
        let mut out = Redactor::new(
            io::BufWriter::with_capacity(64 * 1024, file),
            self.cfg.api_key.as_deref(),
        );
        let mut reader = resp;
        let copied = self.copy_into(&mut reader, &mut out, gate, live);
        if matches!(copied, Err(AttemptError::Interrupted)) {
            // Abandoned: a newer call may own the file by now; write nothing more.
            return copied;
        }
        // Every ending writes what the redactor held back (the last bytes of a stream that
        // broke off or stalled are kept with the rest).
        let flushed = out
            .finish()
            .and_then(|mut w| w.flush())
            .map_err(AttemptError::ResponseFile);
        match (copied, flushed) {
            (Err(e), _) => Err(e),
            (Ok(_), Err(e)) => Err(e),
            (Ok(n), Ok(())) => Ok(n),
        }
    }

    /// The copy loop of [`Transport::copy_capped`]: reads `reader` into `out` until its end,
    /// an error, the size limit or an abandon. Returns the bytes received.
    fn copy_into<W: Write>(
        &self,
        reader: &mut Body,
        out: &mut Redactor<W>,
        gate: Option<&SharedGate>,
        live: bool,
    ) -> Result<u64, AttemptError> {
        let limit = if live {
            self.cfg
                .max_response_bytes
                .saturating_mul(STREAM_FRAMING_FACTOR)
        } else {
            self.cfg.max_response_bytes
        };
        let mut buf = vec![0u8; 64 * 1024];
        let mut total: u64 = 0;
        loop {
            if abandoned(gate) {
                return Err(AttemptError::Interrupted);
            }
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
                    ) =>
                {
                    let (which, limit) = if live {
                        (TimeoutLimit::Idle, self.cfg.idle_timeout)
                    } else {
                        (TimeoutLimit::Request, self.cfg.request_timeout)
                    };
                    return Err(AttemptError::Timeout {
                        which,
                        limit,
                        detail: format!("reading the response body after {total} bytes: {e}"),
                    });
                }
                Err(e) => {
                    return Err(AttemptError::Connection(format!(
                        "response body broken off after {total} bytes: {e}"
                    )));
                }
            };
            total += n as u64;
            if total > limit {
                return Err(AttemptError::TooLarge(limit, live));
            }
            if live && abandoned(gate) {
                // A newer call may own the file by now.
                return Err(AttemptError::Interrupted);
            }
            out.write_all(&buf[..n])
                .map_err(AttemptError::ResponseFile)?;
            if live {
                out.flush().map_err(AttemptError::ResponseFile)?;
            }
        }
        Ok(total)
    }
}

/// Removes the transport's wait note when the call (or the attempt a back-off waited for)
/// ends.
struct NoteGuard<'a>(&'a Transport);

impl Drop for NoteGuard<'_> {
    fn drop(&mut self) {
        self.0.note_wait(None);
    }
}

/// A response body to read, with the bytes already read to find its first one
/// ([`Body::first_byte`]) given back first.
struct Body {
    seen: Vec<u8>,
    at: usize,
    rest: Box<dyn Read + Send + Sync + 'static>,
}

/// Most white space read before a body's first byte is looked for no further (a stream of
/// keep-alive blank lines is a stream).
const FIRST_BYTE_SCAN: usize = 64 * 1024;

impl Body {
    fn of(resp: ureq::Response) -> Body {
        Body {
            seen: Vec::new(),
            at: 0,
            rest: resp.into_reader(),
        }
    }

    /// The body's first byte other than white space (`None`: the body ended first, or began
    /// with [`FIRST_BYTE_SCAN`] bytes of white space). Each read waits at most `idle`.
    fn first_byte(&mut self, idle: Duration) -> Result<Option<u8>, AttemptError> {
        let mut buf = [0u8; 4096];
        loop {
            if let Some(b) = self.seen.iter().find(|b| !b.is_ascii_whitespace()) {
                return Ok(Some(*b));
            }
            if self.seen.len() >= FIRST_BYTE_SCAN {
                return Ok(None);
            }
            match self.rest.read(&mut buf) {
                Ok(0) => return Ok(None),
                Ok(n) => self.seen.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
                    ) =>
                {
                    return Err(AttemptError::Timeout {
                        which: TimeoutLimit::Idle,
                        limit: idle,
                        detail: format!("waiting for the first byte of the response body: {e}"),
                    });
                }
                Err(e) => {
                    return Err(AttemptError::Connection(format!(
                        "response body broken off before its first byte: {e}"
                    )));
                }
            }
        }
    }
}

impl Read for Body {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.at < self.seen.len() {
            let n = out.len().min(self.seen.len() - self.at);
            out[..n].copy_from_slice(&self.seen[self.at..self.at + n]);
            self.at += n;
            return Ok(n);
        }
        self.rest.read(out)
    }
}
