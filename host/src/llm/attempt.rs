//! Why one attempt of a call failed, whether it is retried, and the [`TransportError`] it
//! becomes when no retry is left (internal to [`super::transport`]).

use std::io;
use std::time::Duration;

use super::config::TransportConfig;
use super::error::{TimeoutLimit, TransportError};
use crate::task_dir::TaskDir;

/// Why one attempt failed (internal; turned into a [`TransportError`] when no retry is left).
pub(super) enum AttemptError {
    Status {
        status: u16,
        status_text: String,
        body: String,
        /// The provider's error message, from a JSON error body.
        provider_error: Option<String>,
        /// The provider's id of the request (`request-id`, `x-request-id`).
        request_id: Option<String>,
        retry_after: Option<Duration>,
        /// From the status and the `x-should-retry` header.
        retryable: bool,
    },
    Timeout {
        which: TimeoutLimit,
        limit: Duration,
        detail: String,
    },
    Connection(String),
    /// Past the limit of this many bytes (a stream's limit when `true`).
    TooLarge(u64, bool),
    RequestTooLarge(u64),
    InvalidUrl(String),
    RequestFile(io::Error),
    ResponseFile(io::Error),
    /// Abandoned for a pause or stop request ([`Interruption`]).
    Interrupted,
}

impl AttemptError {
    pub(super) fn retryable(&self) -> bool {
        match self {
            AttemptError::Status { retryable, .. } => *retryable,
            AttemptError::Timeout { .. } | AttemptError::Connection(_) => true,
            AttemptError::TooLarge(..)
            | AttemptError::RequestTooLarge(_)
            | AttemptError::InvalidUrl(_)
            | AttemptError::RequestFile(_)
            | AttemptError::ResponseFile(_)
            | AttemptError::Interrupted => false,
        }
    }

    /// Replace `secret` (a URL's credentials) wherever an error text could quote it.
    pub(super) fn scrub(self, secret: Option<&str>) -> AttemptError {
        let Some(secret) = secret.filter(|s| !s.is_empty()) else {
            return self;
        };
        let clean = |s: String| s.replace(secret, "***");
        match self {
            AttemptError::Timeout {
                which,
                limit,
                detail,
            } => AttemptError::Timeout {
                which,
                limit,
                detail: clean(detail),
            },
            AttemptError::Connection(d) => AttemptError::Connection(clean(d)),
            AttemptError::InvalidUrl(d) => AttemptError::InvalidUrl(clean(d)),
            other => other,
        }
    }

    pub(super) fn retry_after(&self) -> Option<Duration> {
        match self {
            AttemptError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// What failed, in a few words, for the wait note: `stream stalled 120 s`, `HTTP 529`,
    /// `connection failed`.
    pub(super) fn reason(&self) -> String {
        match self {
            AttemptError::Status { status, .. } => format!("HTTP {status}"),
            AttemptError::Timeout {
                which: TimeoutLimit::Idle,
                limit,
                ..
            } => format!("stream stalled {} s", limit.as_secs()),
            AttemptError::Timeout { limit, .. } => {
                format!("no answer in {} s", limit.as_secs())
            }
            AttemptError::Connection(_) => "connection failed".into(),
            other => other.summary(),
        }
    }

    /// Short text for the per-attempt log line.
    pub(super) fn summary(&self) -> String {
        match self {
            AttemptError::Status {
                status,
                status_text,
                provider_error,
                ..
            } => match provider_error {
                Some(e) => format!("HTTP {status} {status_text}: {e}"),
                None => format!("HTTP {status} {status_text}"),
            },
            AttemptError::Timeout { detail, .. } => format!("timeout: {detail}"),
            AttemptError::Connection(d) => d.clone(),
            AttemptError::TooLarge(..) => "response too large".into(),
            AttemptError::RequestTooLarge(n) => format!("request body of {n} bytes too large"),
            AttemptError::InvalidUrl(d) => format!("invalid URL: {d}"),
            AttemptError::RequestFile(e) => format!("request file: {e}"),
            AttemptError::ResponseFile(e) => format!("response file: {e}"),
            AttemptError::Interrupted => "abandoned: the task was asked to pause or stop".into(),
        }
    }

    pub(super) fn into_error(
        self,
        url: &str,
        attempts: u32,
        cfg: &TransportConfig,
        dir: &TaskDir,
        (request_file, response_file): (&str, &str),
    ) -> TransportError {
        let url = url.to_string();
        match self {
            AttemptError::Status {
                status,
                status_text,
                body,
                provider_error,
                request_id,
                ..
            } => TransportError::Http {
                url,
                status,
                status_text,
                attempts,
                provider_error,
                request_id,
                body,
            },
            AttemptError::Timeout {
                which,
                limit,
                detail,
            } => TransportError::Timeout {
                url,
                attempts,
                limit: which,
                timeout: limit,
                detail,
            },
            AttemptError::Connection(detail) => TransportError::Connection {
                url,
                attempts,
                detail,
            },
            AttemptError::TooLarge(limit, streamed) => TransportError::TooLarge {
                url,
                limit,
                streamed,
            },
            AttemptError::RequestTooLarge(bytes) => TransportError::RequestTooLarge {
                path: dir.file_path(request_file),
                bytes,
                limit: cfg.max_request_bytes,
            },
            AttemptError::InvalidUrl(detail) => TransportError::InvalidUrl { url, detail },
            AttemptError::RequestFile(source) => TransportError::RequestFile {
                path: dir.file_path(request_file),
                source,
            },
            AttemptError::ResponseFile(source) => TransportError::ResponseFile {
                path: dir.file_path(response_file),
                source,
            },
            AttemptError::Interrupted => TransportError::Interrupted { url, attempts },
        }
    }
}
