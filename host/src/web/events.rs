//! Live updates: one watcher per server notices every change to the task store
//! ([`Queries::change_version`]: SQLite's `PRAGMA data_version`, or a fingerprint of the
//! `tasks` table on PostgreSQL; polled every [`POLL`] on a connection of its own) and
//! `GET /events` streams them to browsers as server-sent events (`event: change`,
//! `data: <version>`). The page's script then reloads the parts of the page marked live; it
//! also does so on each `hello` (each connection), since a change made between the page's
//! render and its subscription sends no `change` of its own.
//! Costs one cheap query per interval, whatever the number of browsers.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream, StreamExt};

use super::AppState;
use super::queries::Queries;
use super::store::StorePool;

/// How often the watcher looks at the database.
pub const POLL: Duration = Duration::from_millis(500);

/// Start the watcher thread for the task store of `pool`; the receiver sees its
/// [`Queries::change_version`]. A store that stops answering is reported once (a warning) and
/// watched again when it is back.
pub fn watch(pool: &StorePool) -> anyhow::Result<tokio::sync::watch::Receiver<i64>> {
    let db = pool.open()?;
    let first = Queries::new(&db).change_version()?;
    let (tx, rx) = tokio::sync::watch::channel(first);
    std::thread::Builder::new()
        .name("ctxhost-serve-watch".into())
        .spawn(move || {
            let mut last = first;
            let mut warned = false;
            loop {
                std::thread::sleep(POLL);
                match Queries::new(&db).change_version() {
                    Ok(v) => {
                        warned = false;
                        if v != last {
                            last = v;
                            if tx.send(v).is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) if !warned => {
                        warned = true;
                        tracing::warn!("cannot watch the task store for changes: {e}");
                    }
                    Err(_) => {}
                }
            }
        })?;
    Ok(rx)
}

/// `GET /events`: a `hello` event at once, then a `change` event after every commit, until
/// the server shuts down; a comment every 15 s keeps the connection open.
pub async fn stream(
    State(state): State<AppState>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let mut changes = state.changes.clone();
    let version = *changes.borrow_and_update();
    let hello = Event::default()
        .event("hello")
        .data(version.to_string())
        .retry(Duration::from_secs(2));
    let updates = stream::unfold(
        (changes, state.shutdown.clone()),
        |(mut changes, mut shutdown)| async move {
            if *shutdown.borrow() {
                return None;
            }
            tokio::select! {
                r = changes.changed() => {
                    r.ok()?;
                    let v = *changes.borrow_and_update();
                    Some((Ok(Event::default().event("change").data(v.to_string())), (changes, shutdown)))
                }
                _ = shutdown.changed() => None,
            }
        },
    );
    Sse::new(stream::once(async move { Ok(hello) }).chain(updates))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
