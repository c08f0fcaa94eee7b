//! What the task page shows, read from the task's row and its directory: the row and
//! metadata, the task it inherited its context from and the latest plan of its planning history,
//! the context chart (from `llm_calls.jsonl`), the files kept by a failed call, and one paged view — messages, current context, summaries, tool calls, LLM calls or planning — or the Diff view (the git workspace and its `changes.patch`).
//! Every text from a file goes through the [`Redactor`](super::security::Redactor); the templates escape it.
//!
//! Parts: `row` (the row's fields and the source item), `dir` (the directory: files,
//! metadata, latest plan, inheritance, context chart), `views` (the paged views and one message
//! in full); here, the views' names, the tabs, the actions and the formatting they share.

mod dir;
mod row;
mod views;

use super::files::TaskFile;
use super::pager::Anchor;
use crate::db::{Status, TaskRow};

pub use dir::{DirInfo, dir_info};
pub use row::{SourceItem, row_fields, source_item};
pub use views::{MessageView, ViewBody, full_message, view_body};

/// The views of the task page (`view=` in URLs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Messages,
    Context,
    Summaries,
    Tools,
    Calls,
    Planning,
    /// The change to the task's git workspace (`changes.patch`, issue 40).
    Diff,
}

impl View {
    /// Every view with its URL name and tab label.
    pub const ALL: [(View, &'static str, &'static str); 7] = [
        (View::Messages, "messages", "Messages"),
        (View::Context, "context", "Current context"),
        (View::Summaries, "summaries", "Summaries"),
        (View::Tools, "tools", "Tool calls"),
        (View::Calls, "calls", "LLM calls"),
        (View::Planning, "planning", "Planning"),
        (View::Diff, "diff", "Diff"),
    ];

    /// The view called `name`.
    pub fn parse(name: &str) -> Option<View> {
        View::ALL
            .iter()
            .find(|(_, n, _)| *n == name)
            .map(|(v, _, _)| *v)
    }

    /// Its URL name.
    pub fn name(self) -> &'static str {
        View::ALL
            .iter()
            .find(|(v, _, _)| *v == self)
            .map_or("messages", |(_, n, _)| *n)
    }

    /// The file the view pages through (`None`: the planning view, which has several).
    pub(super) fn file(self) -> Option<TaskFile> {
        match self {
            View::Messages => Some(TaskFile::Messages),
            View::Context => Some(TaskFile::Current),
            View::Summaries => Some(TaskFile::Summaries),
            View::Tools => Some(TaskFile::Tools),
            View::Calls => Some(TaskFile::CallLog),
            View::Planning | View::Diff => None,
        }
    }
}

/// Where in a view's file the page is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    pub anchor: Anchor,
    /// `seq=` asked for (messages and tool calls): the page starts at that line.
    pub seq: Option<u64>,
}

/// A tab of the task page.
#[derive(Debug, Clone)]
pub struct Tab {
    pub label: String,
    pub href: String,
    pub active: bool,
}

/// `n` bytes in human units.
pub fn bytes(n: u64) -> String {
    const K: f64 = 1024.0;
    let f = n as f64;
    if f >= K * K * K {
        format!("{:.1} GiB", f / (K * K * K))
    } else if f >= K * K {
        format!("{:.1} MiB", f / (K * K))
    } else if f >= K {
        format!("{:.1} KiB", f / K)
    } else {
        format!("{n} B")
    }
}

/// `ms` as `850 ms`, `12.3 s`, `4 min 05 s`.
pub fn millis(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{} min {:02} s", ms / 60_000, (ms / 1000) % 60)
    }
}

/// `text` cut to `max` characters; returns the kept text and how many characters were cut.
pub fn cut_chars(text: &str, max: usize) -> (String, usize) {
    match text.char_indices().nth(max) {
        None => (text.to_string(), 0),
        Some((i, _)) => (text[..i].to_string(), text[i..].chars().count()),
    }
}

/// The task page of `uuid`.
pub(super) fn task_href(uuid: &str) -> String {
    format!("/tasks/{uuid}")
}

/// `view` of the task page of `uuid`, with the query pairs `extra`.
pub(super) fn view_href(uuid: &str, view: View, extra: &[(&str, String)]) -> String {
    let mut pairs: Vec<(&str, String)> = vec![("view", view.name().to_string())];
    pairs.extend(extra.iter().cloned());
    format!(
        "{}?{}",
        task_href(uuid),
        serde_urlencoded::to_string(&pairs).unwrap_or_default()
    )
}

/// The tabs, `view` active.
pub fn tabs(uuid: &str, view: View) -> Vec<Tab> {
    View::ALL
        .iter()
        .map(|(v, _, label)| Tab {
            label: label.to_string(),
            href: view_href(uuid, *v, &[]),
            active: *v == view,
        })
        .collect()
}

/// Which actions the task's status allows.
#[derive(Debug, Clone)]
pub struct Actions {
    pub csrf: String,
    pub can_pause: bool,
    pub can_resume: bool,
    pub can_stop: bool,
    /// A failed task whose files are still there (`ctxhost retry`; the operation itself
    /// refuses while fsck finds problems in them the task would fail on).
    pub can_retry: bool,
}

impl Actions {
    /// The buttons for `row`, with the form token `csrf`.
    pub fn of(row: &TaskRow, csrf: String) -> Actions {
        Actions {
            csrf,
            can_pause: row.status == Status::Running && !row.pause_requested && !row.stop_requested,
            can_resume: row.status == Status::Paused,
            can_stop: !row.status.is_final() && !row.stop_requested,
            can_retry: row.status == Status::Failed && row.files_deleted_at.is_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatting_helpers() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(256 << 20), "256.0 MiB");
        assert_eq!(millis(850), "850 ms");
        assert_eq!(millis(12_300), "12.3 s");
        assert_eq!(millis(245_000), "4 min 05 s");
        assert_eq!(cut_chars("héllo", 2), ("hé".to_string(), 3));
        assert_eq!(cut_chars("hi", 5), ("hi".to_string(), 0));
    }

    #[test]
    fn views_round_trip_their_names() {
        for (v, name, _) in View::ALL {
            assert_eq!(View::parse(name), Some(v));
            assert_eq!(v.name(), name);
        }
        assert_eq!(View::parse("../x"), None);
    }
}
