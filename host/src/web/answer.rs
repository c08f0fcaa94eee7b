//! HTML answers every page shares: a rendered template, a redirect.

use askama::Template;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

/// Render `t` as an HTML answer (a template error becomes a plain 500).
pub fn render<T: Template>(t: &T) -> Response {
    match t.render() {
        Ok(html) => Html(html).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("500: template error: {e}"),
        )
            .into_response(),
    }
}

/// `303 See Other` to `location` (a path on this server).
pub fn see_other(location: &str) -> Response {
    (
        StatusCode::SEE_OTHER,
        [(header::LOCATION, location.to_string())],
    )
        .into_response()
}
