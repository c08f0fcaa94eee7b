//! Whether the OTLP collector answers, so a process does not wait at its end for a collector
//! that is down: an empty export (an `ExportTraceServiceRequest` without spans: a body of 0
//! bytes, which a collector accepts) is sent from a thread of its own when traces are set up,
//! with the exporter's headers; any HTTP answer, whatever its status, means the collector is
//! there ([`Reach::Answers`]); a refused or failed connection, or no answer within
//! [`PROBE_TIMEOUT`], means it is not ([`Reach::Down`]). The exports' outcomes update it
//! afterwards ([`Collector::exported`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

/// Longest wait for the collector's answer to the probe.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(1000);

/// What is known of the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Not known yet (the probe is under way).
    Unknown,
    /// It answered (the probe, or the last export went through).
    Answers,
    /// It did not (the probe failed or timed out, or the last export failed).
    Down,
}

/// The collector's [`Reach`], shared by the probe, the exporter and the flush at the end.
#[derive(Debug, Default, Clone)]
pub struct Collector(Arc<AtomicU8>);

impl Collector {
    /// What is known now.
    pub fn reach(&self) -> Reach {
        match self.0.load(Ordering::Relaxed) {
            1 => Reach::Answers,
            2 => Reach::Down,
            _ => Reach::Unknown,
        }
    }

    /// An export went through (`ok`) or failed.
    pub fn exported(&self, ok: bool) {
        self.0.store(if ok { 1 } else { 2 }, Ordering::Relaxed);
    }

    /// The probe's outcome, unless an export already said.
    fn probed(&self, answered: bool) {
        let _ = self.0.compare_exchange(
            0,
            if answered { 1 } else { 2 },
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// Wait until the reach is known or `deadline` passes; what is known then.
    pub fn settle(&self, deadline: Instant) -> Reach {
        loop {
            let reach = self.reach();
            if reach != Reach::Unknown || Instant::now() >= deadline {
                return reach;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Probe the collector at `url` (the traces endpoint) with `headers` from a thread of its
    /// own.
    pub fn probe(&self, url: String, headers: Vec<(String, String)>) {
        let me = self.clone();
        let started = std::thread::Builder::new()
            .name("otlp-probe".to_string())
            .spawn(move || {
                let agent = ureq::AgentBuilder::new()
                    .timeout_connect(PROBE_TIMEOUT)
                    .timeout(PROBE_TIMEOUT)
                    .build();
                let mut req = agent
                    .post(&url)
                    .set("Content-Type", "application/x-protobuf");
                for (k, v) in &headers {
                    req = req.set(k, v);
                }
                let answered = match req.send_bytes(&[]) {
                    Ok(_) | Err(ureq::Error::Status(..)) => true,
                    Err(ureq::Error::Transport(_)) => false,
                };
                me.probed(answered);
            });
        if started.is_err() {
            // No thread: nothing known, the flush waits as it would without a probe.
            tracing::debug!("OpenTelemetry: the collector probe could not start");
        }
    }
}

/// The traces endpoint the exporter posts to: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as given,
/// else `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`.
pub fn traces_url() -> Option<String> {
    let var = |name: &str| {
        std::env::var(name)
            .ok()
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    if let Some(url) = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        return Some(url);
    }
    var("OTEL_EXPORTER_OTLP_ENDPOINT")
        .map(|base| format!("{}/v1/traces", base.trim_end_matches('/')))
}

/// `OTEL_EXPORTER_OTLP_TRACES_HEADERS` or `OTEL_EXPORTER_OTLP_HEADERS`: `key=value` pairs
/// separated by commas, values percent-decoded (as the exporter reads them).
pub fn headers() -> Vec<(String, String)> {
    let text = std::env::var("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_HEADERS"))
        .unwrap_or_default();
    text.split(',')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            let (k, v) = (k.trim(), percent_decode(v.trim()));
            (!k.is_empty() && !v.is_empty()).then(|| (k.to_string(), v))
        })
        .collect()
}

/// `%XX` sequences decoded (an invalid one kept as it is).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_decoded_and_a_probe_of_a_closed_port_says_down() {
        assert_eq!(percent_decode("a%20b%2Cc%zz%4"), "a b,c%zz%4");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let c = Collector::default();
        assert_eq!(c.reach(), Reach::Unknown);
        c.probe(format!("http://127.0.0.1:{port}/v1/traces"), vec![]);
        let reach = c.settle(Instant::now() + Duration::from_secs(5));
        assert_eq!(reach, Reach::Down);
        // An export's outcome wins over the probe's.
        c.exported(true);
        c.probed(false);
        assert_eq!(c.reach(), Reach::Answers);
    }
}
