//! [`HandshakeLimit`]: ureq's rustls connector with the TLS handshake bounded by the connect
//! timeout.
//!
//! ureq 2 bounds only the TCP connect by `timeout_connect`; the TLS handshake that follows reads
//! with the socket's whole-request timeout, so an `https://` URL pointed at a port that speaks
//! plain HTTP (which waits for the end of a request line that never comes) held each attempt
//! for the full `llm.timeout_secs`. Here every read and write of the handshake waits at most
//! the connect timeout (or less, when the request's own deadline is nearer); the socket's
//! timeouts are put back once the handshake is done.

use std::io;
use std::net::TcpStream;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// rustls with ring and the webpki roots, TLS 1.2 and 1.3: the configuration ureq's own default
/// connector uses. Built once per process. `None` if rustls refuses the protocol versions
/// (not expected with ring).
fn client_config() -> Option<Arc<rustls::ClientConfig>> {
    static CONFIG: OnceLock<Option<Arc<rustls::ClientConfig>>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            match rustls::ClientConfig::builder_with_provider(provider)
                .with_protocol_versions(&[&rustls::version::TLS12, &rustls::version::TLS13])
            {
                Ok(b) => Some(Arc::new(
                    b.with_root_certificates(roots).with_no_client_auth(),
                )),
                Err(e) => {
                    tracing::warn!(
                        "TLS configuration refused ({e}); the TLS handshake is bounded by the request timeout only"
                    );
                    None
                }
            }
        })
        .clone()
}

/// A [`ureq::TlsConnector`] whose handshake waits at most `limit` per read or write.
pub struct HandshakeLimit {
    inner: Arc<rustls::ClientConfig>,
    limit: Duration,
}

impl HandshakeLimit {
    /// The connector for an agent whose connect timeout is `limit`; `None` when no TLS
    /// configuration could be built (ureq's default connector is then kept).
    pub fn new(limit: Duration) -> Option<Arc<HandshakeLimit>> {
        let inner = client_config()?;
        Some(Arc::new(HandshakeLimit { inner, limit }))
    }
}

/// The socket's (read, write) timeouts, to put back after the handshake.
type Timeouts = (Option<Duration>, Option<Duration>);

/// Cut the socket's timeouts to `limit` (a timeout already shorter, from the request's
/// deadline, stays). Returns the timeouts it had.
fn cut(socket: &TcpStream, limit: Duration) -> io::Result<Timeouts> {
    let before = (socket.read_timeout()?, socket.write_timeout()?);
    let shorter = |t: Option<Duration>| Some(t.map_or(limit, |t| t.min(limit)));
    if !limit.is_zero() {
        socket.set_read_timeout(shorter(before.0))?;
        socket.set_write_timeout(shorter(before.1))?;
    }
    Ok(before)
}

impl ureq::TlsConnector for HandshakeLimit {
    fn connect(
        &self,
        dns_name: &str,
        io: Box<dyn ureq::ReadWrite>,
    ) -> Result<Box<dyn ureq::ReadWrite>, ureq::Error> {
        let before = match ureq::ReadWrite::socket(io.as_ref()) {
            Some(s) => Some(cut(s, self.limit)?),
            None => None,
        };
        let stream = ureq::TlsConnector::connect(&self.inner, dns_name, io)?;
        if let (Some((read, write)), Some(s)) = (before, ureq::ReadWrite::socket(stream.as_ref())) {
            s.set_read_timeout(read)?;
            s.set_write_timeout(write)?;
        }
        Ok(stream)
    }
}
