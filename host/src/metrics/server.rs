//! The worker's metrics endpoint (`ctxhost run --metrics-addr HOST:PORT`): `GET /metrics` on a
//! thread of its own, one request at a time, HTTP/1.1 with `Connection: close`; anything else
//! is a 404 (a 405 for another method on `/metrics`). The task counts by status are read from
//! the store at each scrape, on a connection of the thread's own.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use crate::db::{Db, Patience, StoreSpec};

/// How long a client may take to send its request or read the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest request head read (request line and headers), bytes.
const MAX_HEAD_BYTES: u64 = 16 * 1024;

/// A metrics endpoint listening; it serves until the process exits.
pub struct MetricsServer {
    addr: SocketAddr,
}

impl MetricsServer {
    /// Listen on `addr` (port 0: any free port) and serve on a new thread, reading the task
    /// counts from `store` (the `contexts` tree's). Errors when the address cannot be bound.
    pub fn start(addr: SocketAddr, store: StoreSpec, contexts: PathBuf) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(addr)
            .with_context(|| format!("--metrics-addr: cannot listen on {addr}"))?;
        let addr = listener
            .local_addr()
            .context("cannot read the metrics address")?;
        std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || serve(listener, &store, &contexts))
            .context("cannot start the metrics thread")?;
        tracing::info!(%addr, "metrics at http://{addr}/metrics");
        Ok(MetricsServer { addr })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

fn serve(listener: TcpListener, store: &StoreSpec, contexts: &std::path::Path) {
    let mut db: Option<Db> = None;
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        if db.is_none() {
            match Db::open(store, contexts) {
                Ok(d) => {
                    // A scrape never waits long for the database: it answers without the counts.
                    d.set_patience(Patience::Bounded(Duration::from_secs(2)));
                    db = Some(d);
                }
                Err(e) => tracing::warn!("metrics: cannot open the task store: {e}"),
            }
        }
        if let Err(e) = answer(stream, db.as_ref()) {
            tracing::debug!("metrics: request failed: {e}");
        }
    }
}

fn answer(stream: TcpStream, db: Option<&Db>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut reader = BufReader::new(std::io::Read::take(stream.try_clone()?, MAX_HEAD_BYTES));
    let mut request = String::new();
    reader.read_line(&mut request)?;
    // The rest of the head, up to the blank line.
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
    }
    let mut parts = request.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => ("200 OK", super::CONTENT_TYPE, super::render(db)),
        (_, "/metrics") => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET\n".to_string(),
        ),
        _ => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "metrics are at /metrics\n".to_string(),
        ),
    };
    let mut out = stream;
    write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    out.flush()
}
