//! The dashboard's actions (POST): pause, resume, stop and retry a task — the same operations
//! as `ctxhost pause|resume|stop|retry` ([`crate::ops::control`]) — and logging in with the access
//! token. Every action form carries the CSRF token ([`super::security`]); a missing or wrong
//! one is 403 and nothing happens. A done action answers `303` back to the task page with a
//! fixed notice; an action the task's state does not allow answers 409 with the reason.

use std::collections::HashMap;

use axum::Extension;
use axum::extract::{Path, RawForm, State};
use axum::response::Response;

use super::AppState;
use super::answer::see_other;
use super::login::login_page;
use super::pages::{WebError, blocking, task_uuid};
use super::security::{CSRF_FIELD, CsrfCookie, with_session};
use crate::ops::control::{self, Refused, Stopped};

/// What an action does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Pause,
    Resume,
    Stop,
    Retry,
}

fn form_fields(body: &[u8]) -> Result<HashMap<String, String>, WebError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(body)
        .map_err(|e| WebError::BadRequest(format!("bad form: {e}")))?;
    Ok(pairs.into_iter().collect())
}

async fn act(
    state: AppState,
    uuid: String,
    csrf: CsrfCookie,
    body: Vec<u8>,
    action: Action,
) -> Response {
    blocking(move || {
        let uuid = task_uuid(&uuid)?;
        let form = form_fields(&body)?;
        let token = form.get(CSRF_FIELD).map(String::as_str).unwrap_or("");
        if !state.keys.csrf_matches(&csrf.0, token) {
            return Err(WebError::Forbidden(
                "The form's CSRF token is missing or wrong (reload the task page and try again); nothing was done.".into(),
            ));
        }
        let db = state.store.get()?;
        if db.get(&uuid)?.is_none() {
            return Err(WebError::NotFound);
        }
        let reason = form
            .get("reason")
            .map(|r| r.trim())
            .filter(|r| !r.is_empty());
        let result = match action {
            Action::Pause => control::pause(&db, &uuid, reason).map(|()| "pause-requested"),
            Action::Resume => control::resume_with(&db, &state.layout, state.remote.as_deref(), &uuid).map(|()| "resumed"),
            Action::Stop => control::stop(&db, &state.layout, &uuid).map(|o| match o {
                Stopped::Requested => "stop-requested",
                Stopped::Now { .. } => "stopped",
            }),
            Action::Retry => control::retry_with(&db, &state.layout, state.remote.as_deref(), &uuid).map(|()| "retried"),
        };
        match result {
            Ok(notice) => {
                tracing::info!(uuid, ?action, "dashboard action");
                Ok(see_other(&format!("/tasks/{uuid}?notice={notice}")))
            }
            Err(e) => match e.downcast::<Refused>() {
                Ok(Refused(m)) => Err(WebError::Conflict(m)),
                Err(e) => Err(e.into()),
            },
        }
    })
    .await
}

/// `POST /tasks/{uuid}/pause` (form: `csrf`, optional `reason`).
pub async fn pause(
    State(state): State<AppState>,
    Path(uuid): Path<String>,
    Extension(csrf): Extension<CsrfCookie>,
    RawForm(body): RawForm,
) -> Response {
    act(state, uuid, csrf, body.to_vec(), Action::Pause).await
}

/// `POST /tasks/{uuid}/resume` (form: `csrf`).
pub async fn resume(
    State(state): State<AppState>,
    Path(uuid): Path<String>,
    Extension(csrf): Extension<CsrfCookie>,
    RawForm(body): RawForm,
) -> Response {
    act(state, uuid, csrf, body.to_vec(), Action::Resume).await
}

/// `POST /tasks/{uuid}/stop` (form: `csrf`).
pub async fn stop(
    State(state): State<AppState>,
    Path(uuid): Path<String>,
    Extension(csrf): Extension<CsrfCookie>,
    RawForm(body): RawForm,
) -> Response {
    act(state, uuid, csrf, body.to_vec(), Action::Stop).await
}

/// `POST /tasks/{uuid}/retry` (form: `csrf`): a failed task back to the queue, from its
/// context, like `ctxhost retry`; 409 naming the problems while fsck finds some the task would fail on.
pub async fn retry(
    State(state): State<AppState>,
    Path(uuid): Path<String>,
    Extension(csrf): Extension<CsrfCookie>,
    RawForm(body): RawForm,
) -> Response {
    act(state, uuid, csrf, body.to_vec(), Action::Retry).await
}

/// `POST /login` (form: `token`, `next`): with the right token, set the session cookie and go
/// to `next`; else the login page again (401).
pub async fn login(State(state): State<AppState>, RawForm(body): RawForm) -> Response {
    let form = match form_fields(&body) {
        Ok(f) => f,
        Err(e) => return axum::response::IntoResponse::into_response(e),
    };
    let next = super::login::local_path(form.get("next").map(String::as_str).unwrap_or("/tasks"));
    let token = form.get("token").map(String::as_str).unwrap_or("");
    if state.keys.token_required() && state.keys.token_matches(token) {
        with_session(&state, see_other(&next))
    } else if !state.keys.token_required() {
        see_other(&next)
    } else {
        login_page(&next, true)
    }
}
