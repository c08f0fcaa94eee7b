//! The API's one error shape: RFC 9457 problem details (`application/problem+json`), whose
//! `detail` is the message the CLI gives for the same mistake ([`crate::error::UsageError`],
//! [`crate::ops::control::Refused`]).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// The media type of a [`Problem`].
pub const PROBLEM_JSON: &str = "application/problem+json";

/// An error answer (RFC 9457): `{"type","title","status","detail"}`. `type` is always
/// `about:blank` (the status says what kind of problem it is), `title` the status's reason
/// phrase, `detail` what went wrong and what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// `about:blank`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The HTTP status's reason phrase (`Not Found`, `Conflict`, …).
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What went wrong, as the CLI says it.
    pub detail: String,
}

impl Problem {
    /// A problem with `status` and `detail`.
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Problem {
        Problem {
            kind: "about:blank".into(),
            title: status.canonical_reason().unwrap_or("Error").into(),
            status: status.as_u16(),
            detail: detail.into(),
        }
    }

    /// 400: the request is wrong (a usage error on the command line).
    pub fn bad_request(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::BAD_REQUEST, detail)
    }

    /// 404: no task (or file) by that name.
    pub fn not_found(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::NOT_FOUND, detail)
    }

    /// The status as a [`StatusCode`] (500 if it is not a valid one).
    pub fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status, self.title, self.detail)
    }
}

impl From<anyhow::Error> for Problem {
    /// A usage error is 400, a refusal by the task's state 409, anything else 500 (logged).
    fn from(e: anyhow::Error) -> Problem {
        if let Some(u) = e.downcast_ref::<crate::error::UsageError>() {
            return Problem::bad_request(u.0.clone());
        }
        if let Some(r) = e.downcast_ref::<crate::ops::control::Refused>() {
            return Problem::new(StatusCode::CONFLICT, r.0.clone());
        }
        tracing::warn!("API error: {e:#}");
        Problem::new(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}"))
    }
}

impl From<crate::db::DbError> for Problem {
    fn from(e: crate::db::DbError) -> Problem {
        anyhow::Error::from(e).into()
    }
}

impl From<std::io::Error> for Problem {
    fn from(e: std::io::Error) -> Problem {
        anyhow::Error::from(e).into()
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = self.status_code();
        let mut r = (status, axum::Json(self)).into_response();
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        r
    }
}
