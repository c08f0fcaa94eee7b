//! The OTLP exporter's HTTP client: the host's ureq (blocking), behind
//! [`opentelemetry_http::HttpClient`]. The batch span processor exports from its own thread,
//! so a blocking POST there never holds up a task; short timeouts bound a collector that does
//! not answer.

use std::io::Read;
use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// Longest wait for the collector's TCP connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest wait for a whole export (connect, send, answer).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest collector answer read, bytes (an OTLP answer is a few bytes).
const MAX_ANSWER_BYTES: u64 = 64 * 1024;

/// A blocking OTLP/HTTP client on a ureq agent.
#[derive(Debug, Clone)]
pub struct UreqClient {
    agent: ureq::Agent,
}

impl UreqClient {
    /// A client with the timeouts above.
    pub fn new() -> UreqClient {
        UreqClient {
            agent: ureq::AgentBuilder::new()
                .timeout_connect(CONNECT_TIMEOUT)
                .timeout(EXPORT_TIMEOUT)
                .build(),
        }
    }
}

impl Default for UreqClient {
    fn default() -> Self {
        UreqClient::new()
    }
}

#[async_trait::async_trait]
impl HttpClient for UreqClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let mut req = self
            .agent
            .request(parts.method.as_str(), &parts.uri.to_string());
        for (name, value) in &parts.headers {
            if let Ok(value) = value.to_str() {
                req = req.set(name.as_str(), value);
            }
        }
        let answer = match req.send_bytes(&body) {
            Ok(r) => r,
            // A status the exporter judges itself (it reports non-2xx as a failed export).
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => return Err(Box::new(e)),
        };
        let status = answer.status();
        let mut bytes = Vec::new();
        answer
            .into_reader()
            .take(MAX_ANSWER_BYTES)
            .read_to_end(&mut bytes)?;
        Ok(Response::builder()
            .status(status)
            .body(Bytes::from(bytes))?)
    }
}
