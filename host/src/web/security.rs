//! Who may use the dashboard and how each request is checked.
//!
//! - **Bind policy** ([`check_bind`]): a loopback address needs nothing; any other address
//!   needs an access token from the environment (`--token-env NAME`, at least
//!   [`MIN_TOKEN_LEN`] characters).
//! - **Access token** (when one is set, whatever the address): every request carries either
//!   `Authorization: Bearer TOKEN` or the session cookie that `POST /login` (a form) or
//!   `GET …?token=TOKEN` sets. The cookie holds an HMAC of the server's random key, never the
//!   token, and lives as long as the server process.
//! - **Host check** (loopback without a token): the `Host` header must name a loopback host
//!   (`localhost`, `127.0.0.1`, `[::1]`, any port), so a page on another site cannot reach the
//!   dashboard through DNS rebinding.
//! - **CSRF** (every POST): a signed double-submit token. Each browser gets a random
//!   `ctxhost_csrf` cookie (`HttpOnly`, `SameSite=Strict`); forms carry
//!   `HMAC(server key, cookie)`, which a page on another origin can neither read nor forge;
//!   a cross-origin `Origin` or `Sec-Fetch-Site` header is refused as well.
//! - **Headers**: a strict Content-Security-Policy (scripts and styles only from this server,
//!   no inline script), `X-Content-Type-Options: nosniff`, no framing, no referrer to other sites,
//!   no caching.
//! - **Redaction** ([`Redactor`]): the values of the secrets the server knows (the access token,
//!   the LLM API key named by `llm.api_key_env`) are replaced by `[redacted]` in everything
//!   shown, in case a provider echoed one into a file.

use std::net::SocketAddr;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::AppState;

/// Shortest access token accepted, in characters.
pub const MIN_TOKEN_LEN: usize = 16;
/// The session cookie (proof the token was given).
pub const SESSION_COOKIE: &str = "ctxhost_session";
/// The CSRF cookie (random per browser).
pub const CSRF_COOKIE: &str = "ctxhost_csrf";
/// The form field that carries the CSRF token.
pub const CSRF_FIELD: &str = "csrf";

/// Why `ctxhost serve` refuses to start (a usage error).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BindError {
    #[error(
        "--bind {addr} is not a loopback address: serving other hosts needs an access token; pass --token-env NAME with the token in the environment variable NAME (at least {MIN_TOKEN_LEN} characters)"
    )]
    NotLoopback { addr: SocketAddr },
    #[error("--token-env {name}: the environment variable {name} is not set or empty")]
    MissingToken { name: String },
    #[error("--token-env {name}: the token is {len} characters long; use at least {MIN_TOKEN_LEN}")]
    ShortToken { name: String, len: usize },
    #[error("--read-token-env {name}: the environment variable {name} is not set or empty")]
    MissingReadToken { name: String },
    #[error(
        "--read-token-env {name}: the token is {len} characters long; use at least {MIN_TOKEN_LEN}"
    )]
    ShortReadToken { name: String, len: usize },
}

/// The access token for serving `addr`: `token_env` names the environment variable that holds
/// it, `lookup` reads the environment. `Ok(None)`: no token (loopback only).
pub fn check_bind(
    addr: SocketAddr,
    token_env: Option<&str>,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Option<String>, BindError> {
    let token = match token_env {
        None => None,
        Some(name) => {
            let value =
                lookup(name)
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| BindError::MissingToken {
                        name: name.to_string(),
                    })?;
            let len = value.chars().count();
            if len < MIN_TOKEN_LEN {
                return Err(BindError::ShortToken {
                    name: name.to_string(),
                    len,
                });
            }
            Some(value)
        }
    };
    if token.is_none() && !addr.ip().is_loopback() {
        return Err(BindError::NotLoopback { addr });
    }
    Ok(token)
}

/// The API's read-only token, from the environment variable `read_token_env` names (`lookup`
/// reads the environment): the same checks as the access token's ([`check_bind`]), with the
/// flag `--read-token-env` in the message.
pub fn read_token(
    read_token_env: Option<&str>,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Option<String>, BindError> {
    let Some(name) = read_token_env else {
        return Ok(None);
    };
    // Any loopback address: only the token's checks apply.
    check_bind(SocketAddr::from(([127, 0, 0, 1], 0)), Some(name), lookup).map_err(|e| match e {
        BindError::MissingToken { name } => BindError::MissingReadToken { name },
        BindError::ShortToken { name, len } => BindError::ShortReadToken { name, len },
        e => e,
    })
}

/// The server's secrets for one run: a random HMAC key, and the access token if any.
pub struct Keys {
    key: [u8; 32],
    token: Option<String>,
}

type HmacSha256 = Hmac<Sha256>;

/// Lowercase hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

/// `n` random bytes from the operating system, as hex.
pub fn random_hex(n: usize) -> Result<String, getrandom::Error> {
    let mut buf = vec![0u8; n];
    getrandom::fill(&mut buf)?;
    Ok(hex(&buf))
}

impl Keys {
    /// Fresh keys (random from the OS) with the access token `token`.
    pub fn new(token: Option<String>) -> Result<Keys, getrandom::Error> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key)?;
        Ok(Keys { key, token })
    }

    fn mac(&self, label: &str, value: &[u8]) -> HmacSha256 {
        // A 32-byte key is always valid for HMAC.
        let mut m = <HmacSha256 as Mac>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        m.update(label.as_bytes());
        m.update(&[0]);
        m.update(value);
        m
    }

    /// Whether an access token is required.
    pub fn token_required(&self) -> bool {
        self.token.is_some()
    }

    /// Whether `given` is the access token (constant time).
    pub fn token_matches(&self, given: &str) -> bool {
        let Some(token) = &self.token else {
            return false;
        };
        let expected = self.mac("token", token.as_bytes()).finalize().into_bytes();
        self.mac("token", given.as_bytes())
            .verify_slice(&expected)
            .is_ok()
    }

    /// The session cookie's value.
    pub fn session_value(&self) -> String {
        hex(&self.mac("session", b"").finalize().into_bytes())
    }

    fn session_matches(&self, given: &str) -> bool {
        unhex(given).is_some_and(|g| self.mac("session", b"").verify_slice(&g).is_ok())
    }

    /// The CSRF token for forms shown to the browser whose CSRF cookie is `cookie`.
    pub fn csrf_token(&self, cookie: &str) -> String {
        hex(&self.mac("csrf", cookie.as_bytes()).finalize().into_bytes())
    }

    /// Whether `token` is the CSRF token of `cookie` (constant time).
    pub fn csrf_matches(&self, cookie: &str, token: &str) -> bool {
        !cookie.is_empty()
            && unhex(token)
                .is_some_and(|t| self.mac("csrf", cookie.as_bytes()).verify_slice(&t).is_ok())
    }
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim().to_string())
}

/// The browser's CSRF cookie value, as the guard saw or made it (a request extension).
#[derive(Debug, Clone)]
pub struct CsrfCookie(pub String);

/// Whether `host` (a `Host` header value) names a loopback host.
pub fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        // [::1]:port
        rest.split_once(']').map_or("", |(h, _)| h)
    } else {
        host.rsplit_once(':').map_or(host, |(h, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                h
            } else {
                host
            }
        })
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Whether an `Origin` header value names the same host as `host` (scheme ignored).
fn same_origin(origin: &str, host: &str) -> bool {
    origin
        .split_once("://")
        .is_some_and(|(_, rest)| rest.eq_ignore_ascii_case(host))
}

fn plain(status: StatusCode, text: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text.to_string(),
    )
        .into_response()
}

/// The middleware in front of every route: Host check, access token, cross-origin refusal for
/// non-GET requests, the CSRF cookie, and the security headers on every answer.
pub async fn guard(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let mut response = match check(&state, &mut req) {
        Err(refused) => refused,
        Ok(new_cookie) => {
            let mut response = next.run(req).await;
            if let Some(value) = new_cookie
                && let Ok(v) = HeaderValue::from_str(&format!(
                    "{CSRF_COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict"
                ))
            {
                response.headers_mut().append(header::SET_COOKIE, v);
            }
            response
        }
    };
    add_security_headers(response.headers_mut());
    response
}

/// `Err(answer)` refuses the request; `Ok(Some(value))` lets it through with a new CSRF cookie
/// to set on the answer, `Ok(None)` with the browser's own.
fn check(state: &AppState, req: &mut Request) -> Result<Option<String>, Response> {
    let keys = &state.keys;
    let headers = req.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_string();
    if !keys.token_required() && !is_loopback_host(&host) {
        return Err(plain(
            StatusCode::FORBIDDEN,
            "403 Forbidden: this dashboard answers only requests addressed to localhost / 127.0.0.1 / [::1] (the Host header names another host)",
        ));
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let origin_ok = headers
            .get(header::ORIGIN)
            .and_then(|o| o.to_str().ok())
            .is_none_or(|o| same_origin(o, &host));
        let site_ok = headers
            .get("sec-fetch-site")
            .and_then(|s| s.to_str().ok())
            .is_none_or(|s| s == "same-origin" || s == "none");
        if !origin_ok || !site_ok {
            return Err(plain(
                StatusCode::FORBIDDEN,
                "403 Forbidden: cross-origin request refused",
            ));
        }
    }
    if keys.token_required() && !authorised(state, req)? {
        let login = req.method() == Method::POST && req.uri().path() == "/login";
        if !login {
            let next = req.uri().path_and_query().map_or("/", |p| p.as_str());
            return Err(super::login::login_page(next, false));
        }
    }
    let (csrf, fresh) = match cookie(req.headers(), CSRF_COOKIE).filter(|c| is_hex_token(c)) {
        Some(c) => (c, None),
        None => {
            let fresh = random_hex(16).map_err(|e| {
                plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("500: no randomness from the OS: {e}"),
                )
            })?;
            (fresh.clone(), Some(fresh))
        }
    };
    req.extensions_mut().insert(CsrfCookie(csrf));
    Ok(fresh)
}

fn is_hex_token(s: &str) -> bool {
    (16..=128).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether the request proves it has the access token; a valid `?token=` on a GET answers
/// with a redirect that sets the session cookie (`Err`).
fn authorised(state: &AppState, req: &Request) -> Result<bool, Response> {
    let keys = &state.keys;
    let headers = req.headers();
    if let Some(bearer) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        && keys.token_matches(bearer.trim())
    {
        return Ok(true);
    }
    if cookie(headers, SESSION_COOKIE).is_some_and(|c| keys.session_matches(&c)) {
        return Ok(true);
    }
    if req.method() == Method::GET
        && let Some(query) = req.uri().query()
    {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query).unwrap_or_default();
        if pairs
            .iter()
            .any(|(k, v)| k == "token" && keys.token_matches(v))
        {
            let rest: Vec<&(String, String)> = pairs.iter().filter(|(k, _)| k != "token").collect();
            let mut target = req.uri().path().to_string();
            if !rest.is_empty() {
                target.push('?');
                target.push_str(&serde_urlencoded::to_string(rest).unwrap_or_default());
            }
            return Err(with_session(state, super::answer::see_other(&target)));
        }
    }
    Ok(false)
}

/// `response` with the session cookie set.
pub fn with_session(state: &AppState, mut response: Response) -> Response {
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{SESSION_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
        state.keys.session_value()
    )) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

/// Content-Security-Policy of every answer: nothing inline, nothing from elsewhere.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
    connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

fn add_security_headers(h: &mut HeaderMap) {
    let set = |h: &mut HeaderMap, k: &'static str, v: &'static str| {
        h.insert(k, HeaderValue::from_static(v));
    };
    set(h, "content-security-policy", CSP);
    set(h, "x-content-type-options", "nosniff");
    set(h, "x-frame-options", "DENY");
    // Not `no-referrer`: with it browsers send `Origin: null` on our own form posts.
    set(h, "referrer-policy", "same-origin");
    set(h, "cross-origin-opener-policy", "same-origin");
    set(h, "cross-origin-resource-policy", "same-origin");
    if !h.contains_key(header::CACHE_CONTROL) {
        set(h, "cache-control", "no-store");
    }
}

/// Replaces known secret values in text shown to the browser.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Vec<String>,
}

/// What a redacted secret is shown as.
pub const REDACTED: &str = "[redacted]";

impl Redactor {
    /// A redactor for `secrets` (values shorter than 8 bytes are ignored, as everywhere:
    /// [`crate::llm::redact::is_redactable`]).
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Redactor {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .filter(|s| crate::llm::redact::is_redactable(s))
            .collect();
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Redactor { secrets }
    }

    /// `bytes` (a file that is not text) with every secret's bytes replaced by [`REDACTED`].
    pub fn redact_bytes(&self, bytes: Vec<u8>) -> Vec<u8> {
        let mut out = bytes;
        for s in &self.secrets {
            let secret = s.as_bytes();
            if !out.windows(secret.len()).any(|w| w == secret) {
                continue;
            }
            let mut replaced = Vec::with_capacity(out.len());
            let mut i = 0;
            while i < out.len() {
                if out[i..].starts_with(secret) {
                    replaced.extend_from_slice(REDACTED.as_bytes());
                    i += secret.len();
                } else {
                    replaced.push(out[i]);
                    i += 1;
                }
            }
            out = replaced;
        }
        out
    }

    /// `text` with every secret replaced by [`REDACTED`].
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for s in &self.secrets {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), REDACTED);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn only_loopback_is_served_without_a_token() {
        let env = |name: &str| match name {
            "GOOD" => Some("0123456789abcdef-token".to_string()),
            "SHORT" => Some("abc".to_string()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };
        assert_eq!(check_bind(addr("127.0.0.1:7878"), None, env), Ok(None));
        assert_eq!(check_bind(addr("[::1]:7878"), None, env), Ok(None));
        assert_eq!(
            check_bind(addr("0.0.0.0:7878"), None, env),
            Err(BindError::NotLoopback {
                addr: addr("0.0.0.0:7878")
            })
        );
        assert!(matches!(
            check_bind(addr("192.168.1.5:80"), Some("GOOD"), env),
            Ok(Some(t)) if t.starts_with("0123")
        ));
        assert!(matches!(
            check_bind(addr("0.0.0.0:1"), Some("SHORT"), env),
            Err(BindError::ShortToken { len: 3, .. })
        ));
        for missing in ["EMPTY", "NOPE"] {
            assert!(matches!(
                check_bind(addr("127.0.0.1:1"), Some(missing), env),
                Err(BindError::MissingToken { .. })
            ));
        }
    }

    #[test]
    fn tokens_sessions_and_csrf_verify() {
        let keys = Keys::new(Some("0123456789abcdef".into())).unwrap();
        assert!(keys.token_matches("0123456789abcdef"));
        assert!(!keys.token_matches("0123456789abcdeX"));
        assert!(!keys.token_matches(""));
        assert!(keys.session_matches(&keys.session_value()));
        assert!(!keys.session_matches("00"));
        let other = Keys::new(None).unwrap();
        assert!(!other.session_matches(&keys.session_value()));
        assert!(!other.token_matches(""));
        let t = keys.csrf_token("cookie-1");
        assert!(keys.csrf_matches("cookie-1", &t));
        assert!(!keys.csrf_matches("cookie-2", &t));
        assert!(!keys.csrf_matches("", &keys.csrf_token("")));
        assert!(!keys.csrf_matches("cookie-1", "zz"));
        assert!(!other.csrf_matches("cookie-1", &t));
    }

    #[test]
    fn loopback_hosts() {
        for ok in [
            "localhost",
            "localhost:7878",
            "127.0.0.1:1",
            "127.0.0.1",
            "[::1]:7878",
            "LOCALHOST.:9",
            "app.localhost:3",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "evil.com",
            "evil.com:7878",
            "127.0.0.1.evil.com",
            "",
            "[::2]:1",
            "10.0.0.1:7878",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
        assert!(same_origin("http://127.0.0.1:7878", "127.0.0.1:7878"));
        assert!(!same_origin("http://evil.com", "127.0.0.1:7878"));
        assert!(!same_origin("null", "127.0.0.1:7878"));
    }

    #[test]
    fn cookies_are_found_by_name() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; ctxhost_csrf=abc"),
        );
        h.append(header::COOKIE, HeaderValue::from_static("b=2"));
        assert_eq!(cookie(&h, "ctxhost_csrf").as_deref(), Some("abc"));
        assert_eq!(cookie(&h, "b").as_deref(), Some("2"));
        assert_eq!(cookie(&h, "c"), None);
    }

    #[test]
    fn secrets_are_redacted() {
        let r = Redactor::new(["sk-secret-123456".to_string(), "short".to_string()]);
        assert_eq!(
            r.redact("key sk-secret-123456 and short"),
            "key [redacted] and short"
        );
        assert_eq!(
            r.redact_bytes(b"\x00\xffsk-secret-123456\x00sk-secret-123456".to_vec()),
            b"\x00\xff[redacted]\x00[redacted]".to_vec()
        );
        assert_eq!(
            r.redact_bytes(b"\x00 short".to_vec()),
            b"\x00 short".to_vec()
        );
    }
}
