//! `show`: one task's row, where its directory is, its result and last messages, its latest
//! plan (planning history) and the task it inherited its context from.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};

use ctxhost_format::HistoryLine;
use ctxhost_format::files::MESSAGES;
use ctxhost_format::planning::PlanningHistory;
use serde::Serialize;

use crate::db::{Db, Status, TaskRow};
use crate::error::usage;
use crate::layout::Layout;
use crate::task_dir::TaskDir;

/// A message of messages.jsonl as `show` reports it (or the error for a line that does not parse).
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum ShownLine {
    /// A history line.
    Message(HistoryLine),
    /// A line that does not parse.
    Unreadable {
        /// 1-based line number.
        line: u64,
        /// Why it does not parse.
        error: String,
    },
}

/// What `show --json` prints.
#[derive(Debug, Serialize)]
pub struct ShowReport {
    /// The task's row.
    pub task: TaskRow,
    /// The task directory, if it exists.
    pub dir: Option<String>,
    /// `running`, `paused` or `completed`.
    pub dir_state: Option<String>,
    /// Why the task directory could not be read from the bucket (`context_storage.remote`),
    /// when it could not: `dir` is then this host's copy (possibly older than the bucket's) or
    /// `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bucket_error: Option<String>,
    /// The final assistant answer of a completed task.
    pub result: Option<String>,
    /// The last lines of messages.jsonl.
    pub last_messages: Vec<ShownLine>,
    /// Why messages.jsonl, or the task directory itself, could not be read (a symbolic link in
    /// its place, an I/O error), when it could not; `last_messages` is then empty.
    pub messages_error: Option<String>,
    /// What was published to the task's GitHub / GitLab item (polled tasks only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub publication: Option<crate::db::sources::Publication>,
    /// The planning history folded (`latest` plan with each step's status, counts of
    /// revisions, reflections and verifications, the last decision), when the task has one.
    pub planning: Option<PlanningHistory>,
    /// Why the planning history could not be read (file and line), when it could not.
    pub planning_error: Option<String>,
    /// metadata.json `inherited_from`: the earlier task of the same key this one started from.
    pub inherited_from: Option<crate::task::InheritedFrom>,
    /// metadata.json `inheritance_skipped`: earlier tasks of the key that were skipped, and why.
    pub inheritance_skipped: Vec<crate::task::SkippedPredecessor>,
    /// The directory the built-in tools work on: metadata.json `workspace` once the task ran,
    /// before that the row's (`submit --workspace`); absent when the config's applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
}

/// The last `n` lines of `messages.jsonl` of `dir`, streamed (memory bounded by `n` lines),
/// and the last assistant text message without tool calls (the task's answer). Read through
/// the directory's handle: a link named messages.jsonl is refused, never followed.
fn tail_messages(dir: &TaskDir, n: usize) -> anyhow::Result<(Vec<ShownLine>, Option<String>)> {
    let path = dir.file_path(MESSAGES);
    let f = match dir.open_read_if_exists(MESSAGES) {
        Ok(Some(f)) => f,
        Ok(None) => return Ok((Vec::new(), None)),
        Err(e) => return Err(anyhow::anyhow!("cannot open {}: {e}", path.display())),
    };
    let mut last: VecDeque<ShownLine> = VecDeque::with_capacity(n + 1);
    let mut answer = None;
    let mut reader = BufReader::new(f);
    let mut buf = Vec::new();
    for i in 0.. {
        buf.clear();
        let read = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| anyhow::anyhow!("{}: line {}: {e}", path.display(), i + 1))?;
        if read == 0 {
            break;
        }
        if buf.trim_ascii().is_empty() {
            continue;
        }
        // A line that is not UTF-8 (garbage, a torn write) is shown like any unparsable line.
        let parsed = std::str::from_utf8(&buf)
            .map_err(|e| format!("not UTF-8: {e}"))
            .and_then(|line| serde_json::from_str::<HistoryLine>(line).map_err(|e| e.to_string()));
        let shown = match parsed {
            Ok(h) => {
                if h.role == "assistant"
                    && h.summary_id.is_none()
                    && h.tool_calls.as_ref().is_none_or(|c| c.is_empty())
                {
                    answer = h.content.clone();
                } else if h.role != "assistant" {
                    answer = None;
                }
                ShownLine::Message(h)
            }
            Err(error) => ShownLine::Unreadable {
                line: i as u64 + 1,
                error,
            },
        };
        if n > 0 {
            if last.len() == n {
                last.pop_front();
            }
            last.push_back(shown);
        }
    }
    Ok((last.into(), answer))
}

/// The final answer of task `uuid` (the last assistant text message of its history, as
/// [`ShowReport::result`] gives it for a completed task), without the rest of the report;
/// `None` when its directory or history is gone.
pub(crate) fn final_answer(layout: &Layout, uuid: &str) -> anyhow::Result<Option<String>> {
    final_answer_with(layout, None, uuid)
}

/// [`final_answer`] on a host whose tree is a working copy of the bucket `remote`: read from
/// the bucket's latest copy when this host's is missing or older
/// ([`crate::remote::view::for_reading`]).
pub(crate) fn final_answer_with(
    layout: &Layout,
    remote: Option<&crate::remote::Store>,
    uuid: &str,
) -> anyhow::Result<Option<String>> {
    let Some((_, dir)) = crate::remote::view::for_reading(remote, layout, uuid)? else {
        return Ok(None);
    };
    let dir =
        TaskDir::open(&dir).map_err(|e| anyhow::anyhow!("cannot open {}: {e}", dir.display()))?;
    Ok(tail_messages(&dir, 0)?.1)
}

/// The report of task `uuid` (canonical) with its last `n` history lines. A UUID with no row is
/// a usage error.
pub fn show(db: &Db, layout: &Layout, uuid: &str, n: usize) -> anyhow::Result<ShowReport> {
    show_with(db, layout, uuid, n, None)
}

/// [`show`] on a host whose `contexts/` is a working copy of a bucket
/// (`context_storage.remote`): a task directory that is not here, or whose copy here is older
/// than the bucket's, is downloaded from the bucket for reading
/// ([`crate::remote::view::for_reading`]); its `dir_state` is then `bucket`.
pub fn show_with(
    db: &Db,
    layout: &Layout,
    uuid: &str,
    n: usize,
    remote: Option<&crate::remote::Store>,
) -> anyhow::Result<ShowReport> {
    let task = db
        .get(uuid)?
        .ok_or_else(|| usage(format!("no task with UUID {uuid} in {}", db.location())))?;
    // This host's copy is read only while no other host has synced the task since (a task
    // running here is always current); a cleaned-up task is not looked for in the bucket.
    let remote = remote.filter(|_| task.files_deleted_at.is_none());
    // A bucket that cannot be read (unreachable, an object that does not match its manifest)
    // leaves the row and this host's copy, if any, to show, with the error.
    let (found, bucket_error) = match crate::remote::view::for_reading(remote, layout, uuid) {
        Ok(f) => (f.map(|(s, d)| (s.to_string(), d)), None),
        Err(e) => (
            layout.find_task_dir(uuid).map(|(s, d)| (s.to_string(), d)),
            Some(format!("{e:#}")),
        ),
    };
    // A directory or history that cannot be opened (a link in its place, say) is reported, not
    // fatal: the row and the other files are still worth showing.
    let (mut last_messages, mut answer, mut messages_error) = (Vec::new(), None, None);
    let task_dir = match &found {
        Some((_, dir)) => match TaskDir::open(dir) {
            Ok(d) => Some(d),
            Err(e) => {
                messages_error = Some(format!("cannot open {}: {e}", dir.display()));
                None
            }
        },
        None => None,
    };
    if let Some(dir) = &task_dir {
        match tail_messages(dir, n) {
            Ok((lines, a)) => (last_messages, answer) = (lines, a),
            Err(e) => messages_error = Some(format!("{e:#}")),
        }
    }
    let result = if task.status == Status::Completed {
        answer
    } else {
        None
    };
    let publication = db.publication(uuid)?;
    let (mut planning, mut planning_error, mut meta) = (None, None, None);
    if let Some(dir) = &task_dir {
        match crate::task::PlanningStore::read(dir, uuid) {
            Ok(p) => planning = p,
            Err(e) => planning_error = Some(format!("{e:#}")),
        }
        // A damaged metadata.json is fsck's to report; show shows what it can.
        meta = crate::task::read_metadata(dir).ok().flatten();
    }
    let (inherited_from, inheritance_skipped, workspace) = meta
        .map(|m| (m.inherited_from, m.inheritance_skipped, m.workspace))
        .unwrap_or_default();
    // Before the task first runs (no metadata.json yet), the row's (`submit --workspace`).
    let workspace = workspace.or_else(|| task.workspace.clone());
    Ok(ShowReport {
        publication,
        bucket_error,
        dir: found.as_ref().map(|(_, d)| d.display().to_string()),
        dir_state: found.as_ref().map(|(s, _)| s.clone()),
        task,
        result,
        last_messages,
        messages_error,
        planning,
        planning_error,
        inherited_from,
        inheritance_skipped,
        workspace,
    })
}
