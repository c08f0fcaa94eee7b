//! [`TransportError`]: why a POST to the provider failed.

use std::path::PathBuf;
use std::time::Duration;

pub use super::redact::redact;

/// How many bytes of an error response body are kept in [`TransportError::Http`].
pub const BODY_SNIPPET_BYTES: usize = 500;

/// Why [`crate::llm::Transport::post_file`] failed. Every variant that involved the network
/// names the URL (its credentials, if any, hidden) and the number of attempts made; none ever
/// contains the API key (the body snippet has any occurrence of the key replaced by
/// `[redacted]`).
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The provider answered with a non-2xx status (after retries, when retryable).
    /// `body` is the first [`BODY_SNIPPET_BYTES`] bytes of the response body (lossy UTF-8);
    /// `provider_error` the error message of a JSON error body (e.g. `Overloaded (type:
    /// overloaded_error)`), `request_id` the provider's id of the request, for its support.
    #[error("POST {url}: HTTP {status}{reason} after {attempts} attempt(s){detail}; response body: {body}",
        reason = if status_text.is_empty() { String::new() } else { format!(" {status_text}") },
        detail = http_detail(provider_error.as_deref(), request_id.as_deref()))]
    Http {
        /// The request URL.
        url: String,
        /// HTTP status code.
        status: u16,
        /// HTTP reason phrase.
        status_text: String,
        /// Attempts made (the first one and the retries).
        attempts: u32,
        /// The provider's own error message, when the body has one.
        provider_error: Option<String>,
        /// The provider's request id, when it sent one.
        request_id: Option<String>,
        /// The start of the response body.
        body: String,
    },
    /// The last attempt ran out of time: connecting or the TLS handshake took longer than
    /// `connect_timeout`, the request longer than `request_timeout`, or the caller's deadline
    /// came first ([`TimeoutLimit`] says which).
    #[error(
        "POST {url}: timed out after {attempts} attempt(s) ({limit} of {timeout:?} per attempt): {detail}"
    )]
    Timeout {
        /// The request URL.
        url: String,
        /// Attempts made (the first one and the retries).
        attempts: u32,
        /// Which limit the last attempt ran into.
        limit: TimeoutLimit,
        /// That limit's length.
        timeout: Duration,
        /// What went wrong.
        detail: String,
    },
    /// Connecting failed or the connection broke (refused, reset, DNS, closed mid-response,
    /// body shorter than its Content-Length), on every attempt.
    #[error("POST {url}: {detail} (after {attempts} attempt(s))")]
    Connection {
        /// The request URL.
        url: String,
        /// Attempts made (the first one and the retries).
        attempts: u32,
        /// What went wrong.
        detail: String,
    },
    /// The reply exceeded `max_response_bytes`: an unstreamed body, or the reply folded from a
    /// stream as JSON; or a stream's raw bytes exceeded that times
    /// [`crate::llm::STREAM_FRAMING_FACTOR`] (`streamed`). Not retried.
    #[error(
        "POST {url}: {} larger than the limit of {limit} bytes (llm.max_response_mib{})",
        if *streamed { "streamed reply" } else { "reply" },
        if *streamed { format!(" × {} for a stream's raw bytes", crate::llm::STREAM_FRAMING_FACTOR) } else { String::new() }
    )]
    TooLarge {
        /// The request URL.
        url: String,
        /// A stream's raw bytes (the limit is then the stream's).
        streamed: bool,
        /// The limit applied, bytes: `llm.max_response_mib` (a stream's raw bytes: times
        /// [`crate::llm::STREAM_FRAMING_FACTOR`]).
        limit: u64,
    },
    /// The request body is larger than `llm.max_request_mib`; nothing was sent.
    #[error(
        "request file {}: {bytes} bytes, over the limit of {limit} bytes (llm.max_request_mib); not sent",
        path.display()
    )]
    RequestTooLarge {
        /// The body file.
        path: PathBuf,
        /// Its size, bytes.
        bytes: u64,
        /// `llm.max_request_mib` in bytes.
        limit: u64,
    },
    /// The URL is malformed or uses an unsupported scheme; not retried.
    #[error("POST {url}: invalid URL: {detail}")]
    InvalidUrl {
        /// The request URL.
        url: String,
        /// What went wrong.
        detail: String,
    },
    /// The request file could not be opened or read.
    #[error("request file {}: {source}", path.display())]
    RequestFile {
        /// The body file.
        path: PathBuf,
        #[source]
        /// The I/O error.
        source: std::io::Error,
    },
    /// The response file could not be created, written or renamed into place.
    #[error("response file {}: {source}", path.display())]
    ResponseFile {
        /// The body file.
        path: PathBuf,
        #[source]
        /// The I/O error.
        source: std::io::Error,
    },
    /// The task was asked to pause or stop while the call was under way
    /// ([`crate::llm::interruption::Interruption`]): no further attempt or wait was started, and
    /// an attempt in flight was abandoned after the grace period. No response file is left.
    #[error(
        "POST {url}: given up after {attempts} attempt(s) because the task was asked to pause or stop (a paused task sends the request again when it resumes)"
    )]
    Interrupted {
        /// The request URL.
        url: String,
        /// Attempts started (0 when the request came before the first one).
        attempts: u32,
    },
}

/// Which time limit a [`TransportError::Timeout`] ran into; its `Display` names it and the
/// setting it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutLimit {
    /// Opening the TCP connection and the TLS handshake (`llm.connect_timeout_secs`).
    Connect,
    /// The whole request: sending it and reading the reply (`llm.timeout_secs`).
    Request,
    /// The time between two reads of a streamed reply (`llm.idle_timeout_secs`).
    Idle,
    /// The time left before the caller's deadline (e.g. a compression's wall-time limit),
    /// shorter than the other limits.
    Deadline,
}

impl std::fmt::Display for TimeoutLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TimeoutLimit::Connect => "connect and TLS handshake limit (llm.connect_timeout_secs)",
            TimeoutLimit::Request => "request limit (llm.timeout_secs)",
            TimeoutLimit::Idle => {
                "limit between the bytes of a streamed reply (llm.idle_timeout_secs)"
            }
            TimeoutLimit::Deadline => "time left before the caller's deadline",
        })
    }
}

impl TransportError {
    /// Attempts made (0 for errors before any network activity, e.g. an unreadable request file).
    pub fn attempts(&self) -> u32 {
        match self {
            TransportError::Http { attempts, .. }
            | TransportError::Timeout { attempts, .. }
            | TransportError::Connection { attempts, .. }
            | TransportError::Interrupted { attempts, .. } => *attempts,
            TransportError::TooLarge { .. } => 1,
            _ => 0,
        }
    }

    /// Whether the call was given up for a pause or stop request ([`TransportError::Interrupted`]).
    pub fn is_interrupted(&self) -> bool {
        matches!(self, TransportError::Interrupted { .. })
    }

    /// Whether the provider answered that the request's context is longer than the model's
    /// window ([`super::overflow::is_context_overflow`] of its error message or body): a
    /// compressed context may pass.
    pub fn is_context_overflow(&self) -> bool {
        match self {
            TransportError::Http {
                provider_error,
                body,
                ..
            } => {
                provider_error
                    .as_deref()
                    .is_some_and(super::overflow::is_context_overflow)
                    || super::overflow::is_context_overflow(body)
            }
            _ => false,
        }
    }

    /// The HTTP status, for [`TransportError::Http`].
    pub fn status(&self) -> Option<u16> {
        match self {
            TransportError::Http { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// `: <provider error>` and ` (request id <id>)`, each when known.
fn http_detail(provider_error: Option<&str>, request_id: Option<&str>) -> String {
    let mut s = String::new();
    if let Some(e) = provider_error {
        s.push_str(": ");
        s.push_str(e);
    }
    if let Some(id) = request_id {
        s.push_str(&format!(" (request id {id})"));
    }
    s
}

/// The first `max` bytes of `bytes` as text (lossy UTF-8, cut at a char boundary, `…` appended
/// when cut), with `secret` replaced by `[redacted]` and every run of whitespace or control
/// characters shown as one space, so the snippet fits on one log line.
pub fn body_snippet(bytes: &[u8], max: usize, secret: Option<&str>) -> String {
    let mut text = redact(&String::from_utf8_lossy(bytes), secret);
    let trimmed_len = text.trim_end().len();
    text.truncate(trimmed_len);
    let mut cut = false;
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        cut = true;
    }
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_whitespace() || c.is_control() {
            if !out.is_empty() && !out.ends_with(' ') {
                out.push(' ');
            }
        } else {
            out.push(c);
        }
    }
    let trimmed_len = out.trim_end().len();
    out.truncate(trimmed_len);
    if cut {
        out.push('…');
    }
    if out.is_empty() {
        out.push_str("(empty)");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippet_cuts_and_redacts() {
        let s = body_snippet(b"error: bad key sk-12345 given", 500, Some("sk-12345"));
        assert_eq!(s, "error: bad key [redacted] given");
        let s = body_snippet("ééé".as_bytes(), 3, None);
        assert_eq!(s, "é…");
        assert_eq!(body_snippet(b"", 10, None), "(empty)");
        assert_eq!(body_snippet(b"  a\r\n\tb\x00 ", 10, None), "a b");
    }

    #[test]
    fn display_names_url_status_attempts() {
        let e = TransportError::Http {
            url: "http://h/v1/chat/completions".into(),
            status: 502,
            status_text: "Bad Gateway".into(),
            attempts: 4,
            provider_error: None,
            request_id: None,
            body: "<html>bad gateway</html>".into(),
        };
        let s = e.to_string();
        assert!(s.contains("http://h/v1/chat/completions"), "{s}");
        assert!(s.contains("HTTP 502 Bad Gateway"), "{s}");
        assert!(s.contains("4 attempt"), "{s}");
        assert!(s.contains("<html>bad gateway</html>"), "{s}");
        assert_eq!(e.attempts(), 4);
        assert_eq!(e.status(), Some(502));
        let e = TransportError::Http {
            url: "https://api.anthropic.com/v1/messages".into(),
            status: 529,
            status_text: String::new(),
            attempts: 4,
            provider_error: Some("Overloaded (type: overloaded_error)".into()),
            request_id: Some("req_011".into()),
            body: "{}".into(),
        };
        assert_eq!(
            e.to_string(),
            "POST https://api.anthropic.com/v1/messages: HTTP 529 after 4 attempt(s): Overloaded \
             (type: overloaded_error) (request id req_011); response body: {}"
        );
    }
}
