//! The dashboard's static files, embedded in the binary (`include_str!`): a stylesheet, one
//! small script (live updates, confirmations; no framework, no build step) and an icon.

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// `(name, content type, content)` of every asset.
pub const ASSETS: &[(&str, &str, &str)] = &[
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("assets/style.css"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/app.js"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_str!("assets/favicon.svg"),
    ),
];

/// `GET /static/{name}`: an embedded asset, or 404.
pub async fn serve(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, content_type, body)) => (
            [
                (header::CONTENT_TYPE, *content_type),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            *body,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "404 Not Found").into_response(),
    }
}
