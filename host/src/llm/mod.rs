//! HTTP transport to the LLM provider.
//!
//! The host never holds a request or a response body in memory: [`Transport::post_file`] streams
//! the request file (written by a request-format plugin, e.g. `request.json` in the task
//! directory) to `base_url + endpoint_path` and streams the response body into a file, which the
//! plugin then parses. Transient failures (429, 408, 409, 500/502/503/504, Anthropic's 529
//! overloaded, refused or reset connections, timeouts, truncated bodies) are retried with
//! exponential backoff and jitter, honouring `Retry-After` and `x-should-retry`.
//!
//! - [`config`] — [`TransportConfig`] (URL, optional API key and how it is sent, timeouts, retry
//!   budget, size cap)
//! - [`retry`]: which failures are retried, backoff delays, `Retry-After` parsing
//! - [`overflow`]: a provider's "the context is too long" answer (never retried as it is)
//! - [`error`] — [`TransportError`] (names the URL and attempts, never the key)
//! - [`handshake`]: the TLS handshake bounded by the connect timeout
//! - [`redact`]: the API key out of every body, error and kept file; URL credentials hidden
//! - [`transport`]: [`Transport`], [`PostOutcome`], and [`Interruption`] (how a call gives way
//!   to a pause or stop of its task)

mod attempt;
pub mod body_kind;
pub mod config;
pub mod error;
pub mod failed_streams;
pub mod handshake;
pub mod interruption;
pub mod overflow;
pub mod redact;
pub mod retry;
pub mod transport;

pub use body_kind::BodyKind;
pub use config::{AuthScheme, TransportConfig};
pub use error::{TimeoutLimit, TransportError};
pub use failed_streams::{FAILED_STREAMS_DIR, keep_failed_stream};
pub use interruption::Interruption;
pub use transport::{PostOutcome, RetryWait, STREAM_FRAMING_FACTOR, Transport};
