//! A fake S3 on 127.0.0.1 (path-style, unsigned requests taken, one bucket of objects in
//! memory), enough for `object_store`'s client: PUT (with `If-None-Match: *` / `If-Match`),
//! GET, HEAD, DELETE and ListObjectsV2. What it honours and how it misbehaves is set by
//! [`Modes`] (changeable while it runs, [`FakeS3::set_modes`]): each conditional header may be
//! ignored, a PUT with `If-Match` on a missing key may create it, the next requests may be
//! throttled (`503 SlowDown` with `Retry-After`), every request may be refused as
//! `RequestTimeTooSkewed` with a `Date` off by some seconds. Every request is recorded
//! ([`FakeS3::requests`]).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufReader, Write as _};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::http::{Server, read_request, write_head, write_response};

/// How the fake behaves.
#[derive(Debug, Clone)]
pub struct Modes {
    /// A PUT with `If-None-Match: *` of an existing key is refused (412).
    pub if_none_match: bool,
    /// A PUT with `If-Match` naming another ETag is refused (412).
    pub if_match: bool,
    /// A PUT with `If-Match` of a missing key is refused (404, as S3) instead of creating it.
    pub if_match_missing: bool,
    /// The next this-many requests are answered `503 SlowDown`.
    pub slow_down: u32,
    /// With [`Modes::slow_down`]: the `Retry-After` sent, seconds (`None`: none sent).
    pub retry_after: Option<u64>,
    /// Every request is refused `403 RequestTimeTooSkewed`, with a `Date` this many seconds
    /// off this host's clock.
    pub skew_secs: Option<i64>,
}

impl Modes {
    /// A store that honours every condition and misbehaves in no way.
    pub fn honest() -> Modes {
        Modes {
            if_none_match: true,
            if_match: true,
            if_match_missing: true,
            slow_down: 0,
            retry_after: None,
            skew_secs: None,
        }
    }
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Seen {
    /// When it arrived.
    pub at: Instant,
    /// `PUT`, `GET`, ...
    pub method: String,
    /// The request target (path and query).
    pub target: String,
    /// The status answered.
    pub status: u16,
}

struct State {
    modes: Modes,
    /// Key (with the bucket) → (bytes, ETag).
    objects: BTreeMap<String, (Vec<u8>, String)>,
    next_etag: u64,
    seen: Vec<Seen>,
}

/// A running fake S3; stops when dropped.
pub struct FakeS3 {
    server: Server,
    state: Arc<Mutex<State>>,
}

impl FakeS3 {
    /// Start one with `modes`.
    pub fn start(modes: Modes) -> FakeS3 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let state = Arc::new(Mutex::new(State {
            modes,
            objects: BTreeMap::new(),
            next_etag: 1,
            seen: Vec::new(),
        }));
        let st = state.clone();
        let server = Server::serve(listener, "fake-s3", move |stream, _| {
            let mut r = BufReader::new(stream.try_clone()?);
            let mut w = stream;
            while let Some(req) = read_request(&mut r)? {
                let at = Instant::now();
                let (code, headers, body) = answer(&st, &req);
                st.lock().unwrap().seen.push(Seen {
                    at,
                    method: req.method.clone(),
                    target: req.target.clone(),
                    status: code,
                });
                if req.method == "HEAD" {
                    write_head(&mut w, code, &headers, body.len())?;
                    w.flush()?;
                } else {
                    write_response(&mut w, code, &headers, &body)?;
                }
            }
            Ok(())
        })
        .expect("serve");
        FakeS3 { server, state }
    }

    /// `http://127.0.0.1:PORT`, the endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// Change how it behaves from the next request on.
    pub fn set_modes(&self, modes: Modes) {
        self.state.lock().unwrap().modes = modes;
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    /// The keys held (with the bucket: `bucket/key`).
    pub fn keys(&self) -> Vec<String> {
        self.state.lock().unwrap().objects.keys().cloned().collect()
    }
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Some(v) = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn error(
    code: u16,
    s3_code: &str,
    extra: &[(String, String)],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut headers = vec![("Content-Type".to_string(), "application/xml".to_string())];
    headers.extend_from_slice(extra);
    (
        code,
        headers,
        format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{s3_code}</Code><Message>{s3_code}</Message></Error>").into_bytes(),
    )
}

fn http_date(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

fn answer(
    state: &Mutex<State>,
    req: &super::http::Request,
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut st = state.lock().unwrap();
    let now = chrono::Utc::now();
    if let Some(skew) = st.modes.skew_secs {
        let date = http_date(now + chrono::Duration::seconds(skew));
        return error(403, "RequestTimeTooSkewed", &[("Date".into(), date)]);
    }
    if st.modes.slow_down > 0 {
        st.modes.slow_down -= 1;
        let extra: Vec<(String, String)> = st
            .modes
            .retry_after
            .map(|s| ("Retry-After".to_string(), s.to_string()))
            .into_iter()
            .collect();
        return error(503, "SlowDown", &extra);
    }
    let (path, query) = req.target.split_once('?').unwrap_or((&req.target, ""));
    let key = decode(path.trim_start_matches('/'));
    let modified = ("Last-Modified".to_string(), http_date(now));
    match req.method.as_str() {
        "GET" if !key.contains('/') => {
            // ListObjectsV2 of bucket `key`.
            let prefix = query
                .split('&')
                .find_map(|p| p.strip_prefix("prefix="))
                .map(decode)
                .unwrap_or_default();
            let full = format!("{key}/{prefix}");
            let mut xml = String::from(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult><IsTruncated>false</IsTruncated>",
            );
            for (k, (bytes, etag)) in st.objects.range(full.clone()..) {
                if !k.starts_with(&full) {
                    break;
                }
                let rel = &k[key.len() + 1..];
                xml.push_str(&format!(
                    "<Contents><Key>{rel}</Key><LastModified>{}</LastModified><ETag>{}</ETag><Size>{}</Size></Contents>",
                    now.format("%Y-%m-%dT%H:%M:%S%.3fZ"),
                    etag.replace('"', "&quot;"),
                    bytes.len()
                ));
            }
            xml.push_str("</ListBucketResult>");
            (
                200,
                vec![("Content-Type".into(), "application/xml".into())],
                xml.into_bytes(),
            )
        }
        "GET" | "HEAD" => match st.objects.get(&key) {
            Some((bytes, etag)) => (
                200,
                vec![("ETag".into(), etag.clone()), modified],
                bytes.clone(),
            ),
            None => error(404, "NoSuchKey", &[]),
        },
        "DELETE" => {
            st.objects.remove(&key);
            (204, Vec::new(), Vec::new())
        }
        "PUT" => {
            let existing = st.objects.get(&key).map(|(_, e)| e.clone());
            if req.header("if-none-match") == Some("*")
                && existing.is_some()
                && st.modes.if_none_match
            {
                return error(412, "PreconditionFailed", &[]);
            }
            if let Some(want) = req.header("if-match") {
                match &existing {
                    None if st.modes.if_match_missing => return error(404, "NoSuchKey", &[]),
                    Some(e) if e != want && st.modes.if_match => {
                        return error(412, "PreconditionFailed", &[]);
                    }
                    _ => {}
                }
            }
            let etag = format!("\"etag-{}\"", st.next_etag);
            st.next_etag += 1;
            st.objects.insert(key, (req.body.clone(), etag.clone()));
            (200, vec![("ETag".into(), etag)], Vec::new())
        }
        _ => error(405, "MethodNotAllowed", &[]),
    }
}
