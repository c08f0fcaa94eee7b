//! Who may use the API (`/api/v1/…`) and the MCP endpoint (`/mcp`): bearer tokens only — no
//! cookie is read or set, so a page on another site can make no authenticated request (no CSRF
//! surface); the HTML dashboard keeps its own login ([`crate::web::security`]).
//!
//! - **Tokens**: the read-write token is the dashboard's (`--token-env NAME`); a read-only
//!   token may be added (`--read-token-env NAME`). Each at least
//!   [`crate::web::security::MIN_TOKEN_LEN`] characters.
//! - **With a token configured**, every request carries `Authorization: Bearer TOKEN`: the
//!   read-write token may do anything, the read-only one only `GET`/`HEAD` (else 403); no or
//!   a wrong token is 401 with `WWW-Authenticate: Bearer`.
//! - **With none** (a loopback bind: [`crate::web::security::check_bind`]), the API is
//!   read-only: `GET`/`HEAD` need nothing, anything else is 403; and, as for the dashboard,
//!   the `Host` header must name a loopback host (no DNS rebinding).

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::problem::Problem;
use crate::web::security::{Keys, is_loopback_host};

/// What a request may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read only (`GET`, `HEAD`).
    Read,
    /// Read and change (create, pause, resume, stop, retry).
    Write,
}

/// The API's tokens for one server run.
pub struct ApiAuth {
    write: Keys,
    read: Keys,
}

impl ApiAuth {
    /// The read-write token `write` and read-only token `read` (either may be absent).
    pub fn new(write: Option<String>, read: Option<String>) -> Result<ApiAuth, getrandom::Error> {
        Ok(ApiAuth {
            write: Keys::new(write)?,
            read: Keys::new(read)?,
        })
    }

    /// Whether any token is configured (then every request must carry one).
    pub fn token_required(&self) -> bool {
        self.write.token_required() || self.read.token_required()
    }

    /// What a request with `authorization` (the header's value, if any) and `host` may do:
    /// `Err` is the answer refusing it (401, or 403 for a foreign `Host` without tokens).
    pub fn access(&self, authorization: Option<&str>, host: &str) -> Result<Access, Problem> {
        if !self.token_required() {
            if !is_loopback_host(host) {
                return Err(Problem::new(
                    StatusCode::FORBIDDEN,
                    "this server answers only requests addressed to localhost / 127.0.0.1 / [::1] (the Host header names another host)",
                ));
            }
            return Ok(Access::Read);
        }
        // The scheme is case-insensitive (RFC 9110 §11.1): `bearer` and `BEARER` too.
        let bearer = authorization
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .unwrap_or("");
        if self.write.token_matches(bearer) {
            Ok(Access::Write)
        } else if self.read.token_matches(bearer) {
            Ok(Access::Read)
        } else if bearer.is_empty() {
            Err(Problem::new(
                StatusCode::UNAUTHORIZED,
                "this server needs an access token: send `Authorization: Bearer TOKEN` (the value of the variable named by `ctxhost serve --token-env`, or of --read-token-env for reading only)",
            ))
        } else {
            Err(Problem::new(
                StatusCode::UNAUTHORIZED,
                "the bearer token is not one of this server's access tokens",
            ))
        }
    }

    /// Why `access` may not change anything, or `None` when it may.
    pub fn refuse_write(&self, access: Access) -> Option<Problem> {
        match access {
            Access::Write => None,
            Access::Read if self.write.token_required() => Some(Problem::new(
                StatusCode::FORBIDDEN,
                "this token is read-only: changing tasks needs the read-write token (`ctxhost serve --token-env`)",
            )),
            Access::Read => Some(Problem::new(
                StatusCode::FORBIDDEN,
                "this server is read-only: it has no read-write token; start it with `--token-env NAME` (the token in the environment variable NAME) to create and steer tasks",
            )),
        }
    }
}

/// The middleware in front of `/api/v1` and `/mcp`: the [`Access`] of the request (put in its
/// extensions for the MCP tools), writes refused to read-only access (every method but
/// `GET`/`HEAD`, except `POST /mcp`, whose tools check it themselves), and headers that keep
/// answers out of caches and from being sniffed as another type.
pub async fn guard(
    State(auth): State<std::sync::Arc<ApiAuth>>,
    mut req: Request,
    next: Next,
) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_string();
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut response = match auth.access(authorization.as_deref(), &host) {
        Err(p) => {
            let mut r = p.into_response();
            if r.status() == StatusCode::UNAUTHORIZED {
                r.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            r
        }
        Ok(access) => {
            let reads = req.method() == Method::GET || req.method() == Method::HEAD;
            let mcp = req.uri().path().starts_with("/mcp");
            match auth.refuse_write(access) {
                Some(p) if !reads && !mcp => p.into_response(),
                _ => {
                    req.extensions_mut().insert(access);
                    next.run(req).await
                }
            }
        }
    };
    let h = response.headers_mut();
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_give_read_or_write_and_no_token_is_read_only_on_loopback() {
        let none = ApiAuth::new(None, None).unwrap();
        assert_eq!(none.access(None, "127.0.0.1:7878"), Ok(Access::Read));
        assert_eq!(none.access(None, "evil.com").unwrap_err().status, 403);
        assert!(
            none.refuse_write(Access::Read)
                .unwrap()
                .detail
                .contains("--token-env")
        );
        let both = ApiAuth::new(
            Some("write-token-0123456789".into()),
            Some("read-token-0123456789".into()),
        )
        .unwrap();
        assert_eq!(
            both.access(Some("Bearer write-token-0123456789"), "x"),
            Ok(Access::Write)
        );
        assert_eq!(
            both.access(Some("Bearer read-token-0123456789"), "x"),
            Ok(Access::Read)
        );
        assert_eq!(
            both.access(Some("bearer write-token-0123456789"), "x"),
            Ok(Access::Write)
        );
        assert!(
            both.access(Some("Basic write-token-0123456789"), "x")
                .is_err()
        );
        assert!(
            both.refuse_write(Access::Read)
                .unwrap()
                .detail
                .contains("read-only")
        );
        assert_eq!(both.access(None, "127.0.0.1").unwrap_err().status, 401);
        assert_eq!(
            both.access(Some("Bearer nope"), "127.0.0.1")
                .unwrap_err()
                .status,
            401
        );
        assert_eq!(
            both.access(Some("Basic abc"), "127.0.0.1")
                .unwrap_err()
                .status,
            401
        );
    }
}
