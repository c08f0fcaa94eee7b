//! The login page of the HTML dashboard (the API takes bearer tokens only), and where it
//! returns to.

use askama::Template;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::answer::render;

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    next: String,
    failed: bool,
}

/// A path on this server to return to after logging in (`/tasks` unless `next` is a plain
/// local path).
pub fn local_path(next: &str) -> String {
    if next.starts_with('/')
        && !next.starts_with("//")
        && !next.contains('\\')
        && !next.contains("://")
    {
        next.to_string()
    } else {
        "/tasks".into()
    }
}

/// The 401 page asking for the access token, returning to `next` after.
pub fn login_page(next: &str, failed: bool) -> Response {
    let page = LoginPage {
        next: local_path(next),
        failed,
    };
    (StatusCode::UNAUTHORIZED, render(&page)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_are_returned_to() {
        assert_eq!(local_path("/tasks/x?view=tools"), "/tasks/x?view=tools");
        for bad in [
            "//evil.com",
            "https://evil.com",
            "/\\evil.com",
            "javascript:alert(1)",
            "",
        ] {
            assert_eq!(local_path(bad), "/tasks", "{bad}");
        }
    }
}
