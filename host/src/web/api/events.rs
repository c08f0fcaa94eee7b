//! `GET /api/v1/tasks/{uuid}/events`: a task's events as server-sent events — the events of
//! `ctxhost show UUID --follow --json` ([`crate::ops::follow`]), one per SSE event named by its
//! `event` tag (`task`, `prompt`, `reply_delta`, `tool_call`, …, `end`), `data` the same JSON
//! line — from its start (or where a reconnecting client left off) until it ends. Works for a
//! task running on any host that shares the store: only its row and files are read.
//!
//! **Event ids and resumption.** Each event's `id:` is `D.V`: `D` counts the *durable* events
//! sent so far (read from the task's JSONL files, which only grow: the same events in the same
//! order at every reading), `V` the *volatile* ones since the last durable one (`reply_delta`,
//! `reasoning_delta`, `stream_broken`, `waiting`: seen only while they happen). A client that
//! reconnects with `Last-Event-ID: D.V` gets every event after it: the files are read again
//! from their start and the events up to `D.V` skipped — no durable event is lost or repeated;
//! a reply still being streamed is resent from the first delta it had not seen, and one whose
//! stream ended meanwhile is in its `reply` event.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::stream::Stream;

use super::Api;
use super::problem::Problem;
use crate::ops::follow::{Event, Following, POLL};

/// A position in a task's event stream: `(durable, volatile)` ([module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct EventId {
    /// Durable events up to and including this one.
    pub durable: u64,
    /// Volatile events since the last durable one, up to and including this one.
    pub volatile: u64,
}

impl EventId {
    /// The id of `event` coming after `self`.
    pub fn next(self, event: &Event) -> EventId {
        if is_volatile(event) {
            EventId {
                durable: self.durable,
                volatile: self.volatile + 1,
            }
        } else {
            EventId {
                durable: self.durable + 1,
                volatile: 0,
            }
        }
    }

    /// Parse `D.V` (as sent in `id:`); `None` for anything else.
    pub fn parse(s: &str) -> Option<EventId> {
        let (d, v) = s.trim().split_once('.')?;
        Some(EventId {
            durable: d.parse().ok()?,
            volatile: v.parse().ok()?,
        })
    }
}

impl std::fmt::Display for EventId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.durable, self.volatile)
    }
}

/// One server-sent event of the stream, as a client parses it (the document's schema of
/// `text/event-stream`).
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct ServerSentEvent {
    /// The event's tag: `task`, `prompt`, `reply_delta`, `tool_call`, …, `end` (or `error`).
    pub event: String,
    /// Its position `D.V`, for `Last-Event-ID`.
    pub id: Option<String>,
    /// The event as `show --follow --json` prints it (one JSON object).
    pub data: String,
}

/// Whether `event` is seen only while it happens (not read again from the files).
fn is_volatile(event: &Event) -> bool {
    matches!(
        event,
        Event::ReplyDelta { .. }
            | Event::ReasoningDelta { .. }
            | Event::StreamBroken { .. }
            | Event::Waiting { .. }
    )
}

/// The `event` tag of `event` (its `event` field in `show --follow --json`).
fn name_of(json: &serde_json::Value) -> String {
    json.get("event")
        .and_then(|e| e.as_str())
        .unwrap_or("message")
        .to_string()
}

/// What the stream does between looks.
struct Feed {
    api: Api,
    following: Option<Following>,
    /// The id of the last event produced (sent or skipped).
    at: EventId,
    /// Skip events up to this id (the client's `Last-Event-ID`).
    resume: EventId,
    queue: std::collections::VecDeque<SseEvent>,
    ended: bool,
    first: bool,
}

impl Feed {
    /// The next SSE event, looking at the task as often as [`POLL`]; `None` after `end`, at
    /// shutdown, or on an error (sent first as an `error` event).
    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(e) = self.queue.pop_front() {
                return Some(e);
            }
            if self.ended || *self.api.shutdown.borrow() {
                return None;
            }
            if !self.first {
                let mut shutdown = self.api.shutdown.clone();
                tokio::select! {
                    _ = tokio::time::sleep(POLL) => {}
                    _ = shutdown.changed() => return None,
                }
            }
            self.first = false;
            let mut following = self.following.take()?;
            let api = self.api.clone();
            let looked = tokio::task::spawn_blocking(move || {
                let db = api.store.get()?;
                let look = following.look(&db, &api.layout);
                look.map(|l| (following, l))
            })
            .await;
            let (following, look) = match looked {
                Ok(Ok(v)) => v,
                Ok(Err(e)) => return Some(error_event(&format!("{e:#}"))),
                Err(e) => return Some(error_event(&e.to_string())),
            };
            self.following = Some(following);
            for event in &look.events {
                self.at = self.at.next(event);
                if self.at <= self.resume {
                    continue;
                }
                let json = match serde_json::to_value(event) {
                    Ok(v) => v,
                    Err(e) => return Some(error_event(&e.to_string())),
                };
                let data = self.api.redactor.redact(&json.to_string());
                self.queue.push_back(
                    SseEvent::default()
                        .event(name_of(&json))
                        .id(self.at.to_string())
                        .data(data),
                );
            }
            self.ended = look.ended;
            if look.behind {
                self.first = true;
            }
        }
    }
}

fn error_event(message: &str) -> SseEvent {
    SseEvent::default()
        .event("error")
        .data(serde_json::json!({"event": "error", "text": message}).to_string())
}

/// `GET /api/v1/tasks/{uuid}/events`.
#[utoipa::path(
    get,
    path = "/api/v1/tasks/{uuid}/events",
    tag = "tasks",
    params(
        ("uuid" = String, Path, description = "The task's UUID"),
        ("Last-Event-ID" = Option<String>, Header, description = "The `id` of the last event received: the stream resumes after it"),
    ),
    responses(
        (status = 200, description = "The task's events, as `show --follow --json` prints them, one server-sent event each (`event:` the tag, `id:` its position, `data:` the JSON), until `end`", content_type = "text/event-stream", body = ServerSentEvent),
        (status = 400, description = "Last-Event-ID is not an id this server sent", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn task_events(
    State(api): State<Api>,
    Path(uuid): Path<String>,
    headers: HeaderMap,
) -> axum::response::Response {
    match open(api, &uuid, &headers).await {
        Ok(sse) => sse.into_response(),
        Err(p) => p.into_response(),
    }
}

async fn open(
    api: Api,
    uuid: &str,
    headers: &HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>> + use<>>, Problem> {
    let uuid = super::tasks::uuid_of(uuid)?;
    let resume = match headers.get("last-event-id").map(|v| v.to_str()) {
        None => EventId::default(),
        Some(Ok(s)) if s.trim().is_empty() => EventId::default(),
        Some(Ok(s)) => EventId::parse(s).ok_or_else(|| {
            Problem::bad_request(format!(
                "Last-Event-ID {s:?} is not an event id of this stream (expected D.V, as sent in `id:`)"
            ))
        })?,
        Some(Err(_)) => {
            return Err(Problem::bad_request("Last-Event-ID is not text"));
        }
    };
    let check = api.clone();
    let u = uuid.clone();
    tokio::task::spawn_blocking(move || {
        let db = check.store.get()?;
        check.row(&db, &u).map(|_| ())
    })
    .await
    .map_err(|e| Problem::from(anyhow::anyhow!("request handler failed: {e}")))??;
    let state = Feed {
        following: Some(Following::new(&uuid)),
        api,
        at: EventId::default(),
        resume,
        queue: Default::default(),
        ended: false,
        first: true,
    };
    let stream = futures_util::stream::unfold(state, |mut s| async move {
        let e = s.next().await?;
        Some((Ok(e), s))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_count_durable_events_and_the_volatile_ones_since() {
        let delta = Event::ReplyDelta { text: "a".into() };
        let note = Event::Note { text: "n".into() };
        let id = EventId::default().next(&note).next(&delta).next(&delta);
        assert_eq!(
            id,
            EventId {
                durable: 1,
                volatile: 2
            }
        );
        assert_eq!(
            id.next(&note),
            EventId {
                durable: 2,
                volatile: 0
            }
        );
        assert_eq!(EventId::parse(&id.to_string()), Some(id));
        assert!(
            EventId {
                durable: 1,
                volatile: 9
            } < EventId {
                durable: 2,
                volatile: 0
            }
        );
        for bad in ["", "1", "a.b", "1.2.3", "-1.0"] {
            assert_eq!(EventId::parse(bad), None, "{bad}");
        }
    }
}
