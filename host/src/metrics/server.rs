//! The worker's metrics endpoint (`ctxhost run --metrics-addr HOST:PORT`): `GET /metrics`,
//! HTTP/1.1 with `Connection: close`; anything else is a 404 (a 405 for another method on
//! `/metrics`). Each connection is answered on a thread of its own (at most
//! [`MAX_CONNECTIONS`] at once; past that a connection gets a 503 at once), so idle or slow
//! clients never hold a scrape up. The task counts by status are read from the store at each
//! scrape, on one connection of the endpoint's own, locked only while the answer is rendered.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;

use crate::db::{Db, Patience, StoreSpec};

/// How long a client may take to send its request or read the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(3);

/// Connections answered at once; more get a 503 without waiting.
pub const MAX_CONNECTIONS: usize = 64;

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
        if !addr.ip().is_loopback() {
            // The metrics hold no secrets (counts, models, tool names), but they say what this
            // worker does; the endpoint has no authentication of its own.
            tracing::warn!(
                %addr,
                "--metrics-addr is not a loopback address: anyone who can reach it can read the \
                 metrics (no authentication); put it behind a firewall or a proxy"
            );
        }
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

/// The store connection the scrapes share, opened at the first scrape (`None` while it cannot
/// be opened: the answer then goes without the counts).
type SharedStore = Arc<Mutex<Option<Db>>>;

fn serve(listener: TcpListener, store: &StoreSpec, contexts: &std::path::Path) {
    let db: SharedStore = Arc::new(Mutex::new(None));
    let open = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        if open.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            open.fetch_sub(1, Ordering::SeqCst);
            let _ = busy(stream);
            continue;
        }
        let (db, open_now, store, contexts) = (
            Arc::clone(&db),
            Arc::clone(&open),
            store.clone(),
            contexts.to_path_buf(),
        );
        let spawned = std::thread::Builder::new()
            .name("metrics-conn".into())
            .spawn(move || {
                if let Err(e) = answer(stream, &db, &store, &contexts) {
                    tracing::debug!("metrics: request failed: {e}");
                }
                open_now.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            open.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!("metrics: cannot start a thread for a connection: {e}");
        }
    }
}

/// A 503 for a connection past [`MAX_CONNECTIONS`].
fn busy(mut stream: TcpStream) -> std::io::Result<()> {
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let body = "too many connections; try again\n";
    write!(
        stream,
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

/// The metrics text, with the store's counts when the store opens (held only while rendering).
fn render(db: &SharedStore, store: &StoreSpec, contexts: &std::path::Path) -> String {
    let mut guard = match db.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    };
    if guard.is_none() {
        match Db::open(store, contexts) {
            Ok(d) => {
                // A scrape never waits long for the database: it answers without the counts.
                d.set_patience(Patience::Bounded(Duration::from_secs(2)));
                *guard = Some(d);
            }
            Err(e) => tracing::warn!("metrics: cannot open the task store: {e}"),
        }
    }
    super::render(guard.as_ref())
}

fn answer(
    stream: TcpStream,
    db: &SharedStore,
    store: &StoreSpec,
    contexts: &std::path::Path,
) -> std::io::Result<()> {
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
        ("GET", "/metrics") => ("200 OK", super::CONTENT_TYPE, render(db, store, contexts)),
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
