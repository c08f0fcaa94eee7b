//! The HTTP/1.1 plumbing the fake servers ([`super::fake_llm`], [`super::fake_forge`]) share,
//! hand-written on `std::net`: a listener on `127.0.0.1` with a thread per connection
//! ([`Server`]), reading one request ([`read_request`]: `Content-Length` or
//! `Transfer-Encoding: chunked` bodies) and writing one response ([`write_head`],
//! [`write_response`]). What a request means and what it is answered is each fake's own.
#![allow(dead_code)]

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

/// One request as read from a connection: head and body.
pub struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The request target as sent (path and query, not decoded), e.g. `/v1/chat/completions`.
    pub target: String,
    /// Header (name, value) pairs in received order; names as sent, values trimmed.
    pub headers: Vec<(String, String)>,
    /// The body bytes (de-chunked; empty when the request has none).
    pub body: Vec<u8>,
}

impl Request {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether the client asked to close the connection after this request (`Connection: close`).
    pub fn wants_close(&self) -> bool {
        self.header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }
}

/// A listener on a local address, serving every connection on a thread of its own with a
/// handler given the stream and the connection's id (0-based, in accept order). Stops accepting
/// when dropped (connections already open finish).
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept_thread: Option<thread::JoinHandle<()>>,
}

impl Server {
    /// Serve each connection `listener` accepts with `handle`; `name` names the threads
    /// (`NAME-accept`, `NAME-conn-ID`). The handler's I/O errors end its connection.
    pub fn serve(
        listener: TcpListener,
        name: &str,
        handle: impl Fn(TcpStream, u64) -> io::Result<()> + Send + Sync + 'static,
    ) -> io::Result<Server> {
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let handle = Arc::new(handle);
        let (sp, name_) = (stop.clone(), name.to_string());
        let accept_thread = thread::Builder::new()
            .name(format!("{name}-accept"))
            .spawn(move || {
                let conn_ids = AtomicU64::new(0);
                for stream in listener.incoming() {
                    if sp.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let id = conn_ids.fetch_add(1, Ordering::SeqCst);
                    let h = handle.clone();
                    let _ = thread::Builder::new()
                        .name(format!("{name_}-conn-{id}"))
                        .spawn(move || {
                            let _ = h(stream, id);
                        });
                }
            })?;
        Ok(Server {
            addr,
            stop,
            accept_thread: Some(accept_thread),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept().
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(t) = self.accept_thread.take() {
            let _ = t.join();
        }
    }
}

/// Read one request; `Ok(None)` on a clean EOF before a request line. Errors: a request line
/// without a method and target, EOF inside the head, a bad `Content-Length` or chunk size
/// (`InvalidData` / `UnexpectedEof`).
pub fn read_request(r: &mut BufReader<TcpStream>) -> io::Result<Option<Request>> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad request line {line:?}"),
        ));
    };
    let (method, target) = (method.to_string(), target.to_string());
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let h = h.trim_end_matches(['\r', '\n']);
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let mut req = Request {
        method,
        target,
        headers,
        body: Vec::new(),
    };
    if req
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    {
        req.body = read_chunked(r)?;
    } else if let Some(len) = req.header("content-length") {
        let len: usize = len
            .parse()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad Content-Length"))?;
        req.body = vec![0u8; len];
        r.read_exact(&mut req.body)?;
    }
    Ok(Some(req))
}

fn read_chunked(r: &mut BufReader<TcpStream>) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size_line = String::new();
        r.read_line(&mut size_line)?;
        let size_hex = size_line.trim().split(';').next().unwrap_or("");
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad chunk size"))?;
        if size == 0 {
            // Trailers until an empty line.
            loop {
                let mut t = String::new();
                if r.read_line(&mut t)? == 0 || t.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        let start = body.len();
        body.resize(start + size, 0);
        r.read_exact(&mut body[start..])?;
        let mut crlf = [0u8; 2];
        r.read_exact(&mut crlf)?;
    }
}

/// Write a response head: status line, `Content-Length: len` (bytes), then `headers`.
pub fn write_head(
    w: &mut impl Write,
    code: u16,
    headers: &[(String, String)],
    len: usize,
) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {code} {}\r\nContent-Length: {len}\r\n",
        reason(code)
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    w.write_all(head.as_bytes())
}

/// Write a whole response (head and `body`) and flush it.
pub fn write_response(
    w: &mut impl Write,
    code: u16,
    headers: &[(String, String)],
    body: &[u8],
) -> io::Result<()> {
    write_head(w, code, headers, body.len())?;
    w.write_all(body)?;
    w.flush()
}

/// The reason phrase of a status code (`Status` for one not listed).
fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Overloaded",
        _ => "Status",
    }
}
