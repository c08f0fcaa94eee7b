//! [`TransportConfig`]: where to send requests and how patiently.

use std::fmt;
use std::time::Duration;

/// How the transport sends the API key, and the headers a provider requires with it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AuthScheme {
    /// `Authorization: Bearer <key>` (OpenAI and OpenAI-compatible servers, Ollama).
    #[default]
    Bearer,
    /// `x-api-key: <key>` and `anthropic-version: 2023-06-01` (Anthropic's Messages API; the
    /// version header is sent even when no key is configured).
    Anthropic,
}

/// Settings of a [`crate::llm::Transport`]. Built by the caller from `config.yaml`'s `llm`
/// section; the API key is read by the caller from the environment variable named by
/// `llm.api_key_env` and is never written anywhere.
#[derive(Clone)]
pub struct TransportConfig {
    /// Provider base URL, e.g. `http://127.0.0.1:8080` or `https://api.openai.com`. A trailing
    /// `/` is ignored; a trailing `/v1` is tolerated when the endpoint path starts with `/v1/`
    /// (see [`TransportConfig::url_for`]).
    pub base_url: String,
    /// Sent as [`TransportConfig::auth`] says when `Some`. Never logged or shown in errors.
    pub api_key: Option<String>,
    /// How the key is sent (from `llm.provider`).
    pub auth: AuthScheme,
    /// Time allowed to establish the TCP (and TLS) connection, per attempt.
    pub connect_timeout: Duration,
    /// Time allowed for one whole attempt: sending the request and reading the full response.
    pub request_timeout: Duration,
    /// For a streamed reply ([`crate::llm::Transport::post_file_streamed`]): the time allowed
    /// between two reads of the body (and for the first byte), instead of `request_timeout`.
    pub idle_timeout: Duration,
    /// Retries after the first attempt (so at most `max_retries + 1` attempts).
    pub max_retries: u32,
    /// Upper bound of one backoff delay, including a server's `Retry-After`.
    pub max_backoff: Duration,
    /// Largest response body accepted (bytes); a bigger body fails the call without retry.
    pub max_response_bytes: u64,
    /// Largest request body sent (bytes); a bigger request file fails the call before anything
    /// is sent ([`crate::llm::TransportError::RequestTooLarge`]).
    pub max_request_bytes: u64,
}

impl TransportConfig {
    /// Defaults for `base_url`: connect 10 s, request 300 s (a small local model on a CPU is
    /// slow), 120 s between the bytes of a streamed reply, 3 retries, backoff ≤ 60 s, responses ≤ 64 MiB, requests ≤ 32 MiB, no API key,
    /// [`AuthScheme::Bearer`].
    pub fn new(base_url: impl Into<String>) -> TransportConfig {
        TransportConfig {
            base_url: base_url.into(),
            api_key: None,
            auth: AuthScheme::Bearer,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(300),
            idle_timeout: Duration::from_secs(120),
            max_retries: 3,
            max_backoff: Duration::from_secs(60),
            max_response_bytes: 64 * 1024 * 1024,
            max_request_bytes: 32 * 1024 * 1024,
        }
    }

    /// The full URL for `endpoint_path` (e.g. `/v1/chat/completions`, `/api/chat`):
    /// `base_url` without trailing `/`, then the path (a missing leading `/` is added). When
    /// `base_url` already ends with `/v1` and the path starts with `/v1/`, the duplicate `/v1`
    /// is dropped, so both `https://api.openai.com` and `https://api.openai.com/v1` work.
    pub fn url_for(&self, endpoint_path: &str) -> String {
        let base = self.base_url.trim_end_matches('/');
        let path = if endpoint_path.starts_with('/') {
            endpoint_path.to_string()
        } else {
            format!("/{endpoint_path}")
        };
        match (base.strip_suffix("/v1"), path.strip_prefix("/v1/")) {
            (Some(_), Some(_)) => format!("{base}{}", &path[3..]),
            _ => format!("{base}{path}"),
        }
    }
}

impl Default for TransportConfig {
    /// [`TransportConfig::new`] with an empty `base_url` (set it before use).
    fn default() -> Self {
        TransportConfig::new("")
    }
}

impl fmt::Debug for TransportConfig {
    /// Like a derived `Debug`, but the API key is shown as `Some("<redacted>")` and the
    /// credentials of `base_url`, if any, as `***`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransportConfig")
            .field(
                "base_url",
                &super::redact::url_without_credentials(&self.base_url),
            )
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("auth", &self.auth)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("max_retries", &self.max_retries)
            .field("max_backoff", &self.max_backoff)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("max_request_bytes", &self.max_request_bytes)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_joining() {
        let c = |b: &str| TransportConfig::new(b);
        assert_eq!(
            c("http://h:1").url_for("/v1/chat/completions"),
            "http://h:1/v1/chat/completions"
        );
        assert_eq!(
            c("http://h:1/").url_for("/v1/chat/completions"),
            "http://h:1/v1/chat/completions"
        );
        assert_eq!(
            c("https://api.openai.com/v1").url_for("/v1/chat/completions"),
            "https://api.openai.com/v1/chat/completions"
        );
        assert_eq!(
            c("https://api.openai.com/v1/").url_for("v1/chat/completions"),
            "https://api.openai.com/v1/chat/completions"
        );
        assert_eq!(
            c("http://h:11434").url_for("/api/chat"),
            "http://h:11434/api/chat"
        );
        assert_eq!(
            c("http://h/proxy").url_for("/api/chat"),
            "http://h/proxy/api/chat"
        );
    }

    #[test]
    fn debug_hides_the_key() {
        let mut c = TransportConfig::new("http://h");
        c.api_key = Some("sk-secret-123".into());
        let s = format!("{c:?}");
        assert!(!s.contains("sk-secret-123"), "{s}");
        assert!(s.contains("<redacted>"), "{s}");
    }
}
