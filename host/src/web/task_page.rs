//! What the task page shows, read from the task's row and its directory: the row and
//! metadata, the task it inherited its context from and the latest plan of its planning history,
//! the context chart (from `llm_calls.jsonl`), the files kept by a failed call, and one paged view — messages, current context, summaries, tool calls, LLM calls or planning.
//! Every text from a file goes through the [`Redactor`]; the templates escape it.

use std::fs::File;

use ctxhost_format::{
    CallLogLine, CallStatus, CallUsage, ChatMessage, HistoryLine, SummaryLine, ToolLine,
};
use serde_json::Value;

use super::call_series::ChartCache;
use super::charts::{self, ContextChart};
use super::files::{TaskDir, TaskFile};
use super::pager::{self, Anchor, Limits, Page, PagedLine};
use super::security::Redactor;
use crate::db::sources::{Publication, is_web_url};
use crate::db::{Status, TaskRow};
use crate::sources::ItemRef;
use crate::sources::publish::{error_sentence, status_sentence};

/// Characters of a message's content shown in a list (the message's own page shows it all).
pub const LIST_CONTENT_CHARS: usize = 20_000;
/// Characters of a tool result shown in the tool-call list.
pub const LIST_RESULT_CHARS: usize = 4_000;

/// The views of the task page (`view=` in URLs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Messages,
    Context,
    Summaries,
    Tools,
    Calls,
    Planning,
}

impl View {
    /// Every view with its URL name and tab label.
    pub const ALL: [(View, &'static str, &'static str); 6] = [
        (View::Messages, "messages", "Messages"),
        (View::Context, "context", "Current context"),
        (View::Summaries, "summaries", "Summaries"),
        (View::Tools, "tools", "Tool calls"),
        (View::Calls, "calls", "LLM calls"),
        (View::Planning, "planning", "Planning"),
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

    fn file(self) -> Option<TaskFile> {
        match self {
            View::Messages => Some(TaskFile::Messages),
            View::Context => Some(TaskFile::Current),
            View::Summaries => Some(TaskFile::Summaries),
            View::Tools => Some(TaskFile::Tools),
            View::Calls => Some(TaskFile::CallLog),
            View::Planning => None,
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

/// A tool call of an assistant message.
#[derive(Debug, Clone)]
pub struct ToolCallView {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// A message (of messages.jsonl or current.jsonl), ready to show.
#[derive(Debug, Clone)]
pub struct MessageView {
    /// `m{offset}`: the element id.
    pub anchor: String,
    /// Its seq (`""` for current.jsonl lines).
    pub seq: String,
    pub role: String,
    pub timestamp: String,
    pub tokens: String,
    pub content: String,
    /// Characters not shown (0: all shown).
    pub hidden_chars: usize,
    /// The message's own page.
    pub full_href: String,
    pub tool_calls: Vec<ToolCallView>,
    pub tool_call_id: String,
    pub tool_name: String,
    pub summary_id: String,
    /// Why the line could not be shown as a message (unreadable, too long, being written).
    pub problem: String,
}

/// A summaries.jsonl line.
#[derive(Debug, Clone)]
pub struct SummaryView {
    pub id: String,
    pub range: String,
    pub range_href: String,
    pub original_tokens: u64,
    pub summary_tokens: u64,
    /// `ratio` as written (summary / original) and how many times smaller.
    pub ratio: String,
    pub timestamp: String,
    pub summary: String,
    pub problem: String,
}

/// A tools.jsonl line.
#[derive(Debug, Clone)]
pub struct ToolView {
    pub seq: String,
    pub tool: String,
    pub call_id: String,
    pub args: String,
    pub status: String,
    pub duration: String,
    pub timestamp: String,
    pub result: String,
    pub hidden_chars: usize,
    pub error: String,
    /// Link to the full output in tool-results/, when the result was cut.
    pub spilled_href: String,
    pub problem: String,
}

/// An llm_calls.jsonl line.
#[derive(Debug, Clone)]
pub struct CallView {
    /// `call` or `compression`.
    pub kind: String,
    pub n: String,
    pub timestamp: String,
    pub context: String,
    pub usage: String,
    pub duration: String,
    pub status: String,
    pub detail: String,
    pub problem: String,
}

/// A planning line: its `type` and its other fields.
#[derive(Debug, Clone)]
pub struct PlanView {
    pub kind: String,
    pub fields: Vec<(String, String)>,
    pub problem: String,
}

/// A page of a view, with links to its neighbours.
#[derive(Debug, Clone)]
pub struct Listing<T> {
    pub items: Vec<T>,
    pub first_href: String,
    pub prev_href: String,
    pub next_href: String,
    pub last_href: String,
    /// "bytes a–b of n".
    pub position: String,
}

/// The body of the selected view.
#[derive(Debug, Clone)]
pub enum ViewBody {
    Messages(Listing<MessageView>),
    Context(Listing<MessageView>),
    Summaries(Listing<SummaryView>),
    Tools(Listing<ToolView>),
    Calls(Listing<CallView>),
    Planning {
        files: Vec<(String, String, bool)>,
        listing: Option<Listing<PlanView>>,
    },
    /// The view's file does not exist (the text says so).
    Empty(String),
}

/// A tab of the task page.
#[derive(Debug, Clone)]
pub struct Tab {
    pub label: String,
    pub href: String,
    pub active: bool,
}

/// A file link in the files section.
#[derive(Debug, Clone)]
pub struct FileLink {
    pub name: String,
    pub href: String,
    pub size: String,
}

/// Everything about the task's directory the page shows.
pub struct DirInfo {
    pub state: String,
    pub path: String,
    pub metadata: Vec<(String, String)>,
    pub task_state: Vec<(String, String)>,
    pub files: Vec<FileLink>,
    /// request.json or response.json was kept by a failed call.
    pub failed_call_files: Vec<FileLink>,
    pub chart: Option<ContextChart>,
    pub chart_note: String,
    /// The latest plan of `planning/{uuid}.jsonl`, when the task has a planning history.
    pub plan: Option<LatestPlan>,
    /// metadata.json `inherited_from` / `inheritance_skipped`, when there is either.
    pub inherited: Option<Inherited>,
}

/// The latest plan of a task's planning history (the fold of
/// [`ctxhost_format::planning::PlanningHistory`]), for the task page.
#[derive(Debug, Clone, Default)]
pub struct LatestPlan {
    pub goal: String,
    /// Each step: id, description, status (`pending`, `in_progress`, `done`, `skipped`).
    pub steps: Vec<(u32, String, &'static str)>,
    /// "2 revisions · 1 reflection · 1 verification (last: passed)".
    pub counts: String,
    /// Why there is no plan, or what is wrong with the file (line number and error).
    pub note: String,
}

/// Where the task's context was inherited from (metadata.json), for the task page.
#[derive(Debug, Clone, Default)]
pub struct Inherited {
    /// The earlier task's UUID and its page, when one was inherited from.
    pub from: Option<(String, String)>,
    /// "generation 2 · 412 tokens · answer, plan · completed …".
    pub detail: String,
    /// Earlier tasks of the key that were skipped: UUID, page, reason.
    pub skipped: Vec<(String, String, String)>,
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

fn task_href(uuid: &str) -> String {
    format!("/tasks/{uuid}")
}

fn view_href(uuid: &str, view: View, extra: &[(&str, String)]) -> String {
    let mut pairs: Vec<(&str, String)> = vec![("view", view.name().to_string())];
    pairs.extend(extra.iter().cloned());
    format!(
        "{}?{}",
        task_href(uuid),
        serde_urlencoded::to_string(&pairs).unwrap_or_default()
    )
}

/// The GitHub / GitLab item a task answers (a task whose key names one) and what was
/// published to it: the task page's "Source item" block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceItem {
    /// `acme/app#42 (GitHub issue)`.
    pub item: String,
    /// The item's web page (polled tasks; `http(s)://` only).
    pub item_href: Option<String>,
    /// `result posted at TIME; labels done`, empty when nothing was published.
    pub published: String,
    /// The result comment's web page, once posted.
    pub comment_href: Option<String>,
    /// Why the last publishing attempt failed, empty if it did not.
    pub error: String,
}

/// The source item block of `row`, `None` unless its key names a GitHub / GitLab item.
/// Links are kept only when they are `http(s)://` URLs ([`crate::db::sources::is_web_url`]).
pub fn source_item(row: &TaskRow, publication: Option<&Publication>) -> Option<SourceItem> {
    let item = ItemRef::from_task(row)?;
    let link = |u: &Option<String>| u.clone().filter(|u| is_web_url(u));
    let (item_href, published, comment_href, error) = match publication {
        None => (None, String::new(), None, String::new()),
        Some(p) => (
            link(&p.item_url),
            status_sentence(p, None),
            link(&p.comment_url),
            error_sentence(p, None).unwrap_or_default(),
        ),
    };
    Some(SourceItem {
        item: format!("{} ({})", item.short(), item.describe_kind()),
        item_href,
        published,
        comment_href,
        error,
    })
}

/// The row's fields as label/value pairs.
pub fn row_fields(row: &TaskRow) -> Vec<(String, String)> {
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "—".into());
    let mut f = vec![
        ("UUID", row.uuid.clone()),
        ("Status", row.status.to_string()),
        ("Source", row.task_source.clone()),
        (
            "Owner / repo",
            match (&row.owner, &row.repo) {
                (None, None) => "—".into(),
                (o, r) => format!("{}/{}", opt(o), opt(r)),
            },
        ),
        (
            "Type / id",
            match (&row.task_type, &row.task_id) {
                (None, None) => "—".into(),
                (t, i) => format!("{} #{}", opt(t), opt(i)),
            },
        ),
        ("User", opt(&row.user)),
        ("Created", row.created_at.clone()),
        ("Started", opt(&row.started_at)),
        ("Completed", opt(&row.completed_at)),
        ("Updated", row.updated_at.clone()),
        (
            "LLM",
            format!(
                "{} {} (context {})",
                opt(&row.llm_provider),
                opt(&row.model),
                row.context_length.map_or("—".into(), |c| c.to_string())
            ),
        ),
        ("LLM calls", row.llm_call_count.to_string()),
        ("Tool calls", row.tool_call_count.to_string()),
        ("Tokens", row.total_tokens.to_string()),
        (
            "Prompt cache",
            format!(
                "{} read, {} written",
                row.cache_read_tokens, row.cache_creation_tokens
            ),
        ),
        ("Compressions", row.compression_count.to_string()),
        (
            "Process",
            match (row.process_id, &row.hostname) {
                (Some(p), Some(h)) => format!("{p} on {h}"),
                (Some(p), None) => p.to_string(),
                _ => "—".into(),
            },
        ),
        ("Resumed", format!("{} time(s)", row.resume_count)),
        ("Crashes", row.crash_count.to_string()),
    ];
    if let Some(d) = &row.files_deleted_at {
        f.push(("Files deleted", d.clone()));
    }
    f.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// Read the whole (small) JSON file `file` as label/value pairs of its top-level fields
/// (nested values as compact JSON); empty when missing or unreadable.
fn json_fields(dir: &TaskDir, file: &TaskFile, redactor: &Redactor) -> Vec<(String, String)> {
    let Some(f) = dir.open(file) else {
        return Vec::new();
    };
    let mut text = String::new();
    use std::io::Read;
    if f.take(1 << 20).read_to_string(&mut text).is_err() {
        return vec![("(unreadable)".into(), file.relative_path())];
    }
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(map)) => map
            .into_iter()
            .map(|(k, v)| {
                let shown = match v {
                    Value::String(s) => s,
                    Value::Null => "—".into(),
                    other => other.to_string(),
                };
                (k, redactor.redact(&shown))
            })
            .collect(),
        _ => vec![(
            "(not a JSON object)".into(),
            redactor.redact(&cut_chars(&text, 2000).0),
        )],
    }
}

/// The directory part of the page.
pub fn dir_info(
    uuid: &str,
    dir: &TaskDir,
    row: &TaskRow,
    redactor: &Redactor,
    charts: &ChartCache,
) -> DirInfo {
    let file_link = |f: TaskFile| -> Option<FileLink> {
        let size = dir.open(&f)?.metadata().ok()?.len();
        let name = f.relative_path();
        Some(FileLink {
            href: format!("/tasks/{uuid}/files/{name}"),
            name,
            size: bytes(size),
        })
    };
    let files = [
        TaskFile::Metadata,
        TaskFile::Messages,
        TaskFile::Current,
        TaskFile::Summaries,
        TaskFile::Tools,
        TaskFile::ToolDefinitions,
        TaskFile::TaskState,
        TaskFile::CallLog,
    ]
    .into_iter()
    .filter_map(file_link)
    .collect();
    // While the task runs, these are the bodies of the call in flight, not kept ones.
    let failed_call_files = if row.status == crate::db::Status::Running {
        Vec::new()
    } else {
        [TaskFile::Request, TaskFile::Response]
            .into_iter()
            .filter_map(file_link)
            .collect()
    };
    let (chart, chart_note) = context_chart(uuid, dir, row, charts);
    let mut plan_files = dir.planning_files();
    plan_files.sort_by_key(|n| *n != format!("{uuid}.jsonl"));
    DirInfo {
        plan: plan_files
            .first()
            .and_then(|name| latest_plan(dir, name, redactor)),
        inherited: inherited(dir, redactor),
        state: dir.state.to_string(),
        path: dir.path.display().to_string(),
        metadata: json_fields(dir, &TaskFile::Metadata, redactor),
        task_state: json_fields(dir, &TaskFile::TaskState, redactor),
        files,
        failed_call_files,
        chart,
        chart_note,
    }
}

/// Most bytes of a planning history the task page folds (the Planning view pages through any
/// size); a longer file shows the plan as of this point, with a note.
pub const PLAN_READ_BYTES: u64 = 8 << 20;

/// Fold `planning/{name}` into its latest plan. `None` when the file cannot be opened.
fn latest_plan(dir: &TaskDir, name: &str, redactor: &Redactor) -> Option<LatestPlan> {
    use ctxhost_format::planning::{PlanningHistory, PlanningLine, Verdict};
    use std::io::{BufRead, BufReader, Read};
    let file = dir.open(&TaskFile::Planning(name.to_string()))?;
    let mut reader = BufReader::new(file.take(PLAN_READ_BYTES));
    let (mut history, mut buf, mut line_no) = (PlanningHistory::default(), Vec::new(), 0u64);
    let mut note = String::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                note = format!("planning/{name}: cannot read: {e}");
                break;
            }
        }
        line_no += 1;
        if buf.trim_ascii().is_empty() {
            continue;
        }
        if !buf.ends_with(b"\n") {
            // The end of the read: a line being appended, or the cap.
            if reader.get_ref().limit() == 0 {
                note = format!(
                    "planning/{name} is longer than {}: the plan as of line {}",
                    bytes(PLAN_READ_BYTES),
                    line_no - 1
                );
            }
            break;
        }
        let pushed = serde_json::from_slice::<PlanningLine>(&buf)
            .map_err(|e| e.to_string())
            .and_then(|line| history.push(line));
        if let Err(e) = pushed {
            note = format!("planning/{name} line {line_no}: {e}");
            break;
        }
    }
    let mut counts = Vec::new();
    let plural = |n: u32, one: &str| {
        if n == 1 {
            format!("1 {one}")
        } else {
            format!("{n} {one}s")
        }
    };
    if history.revisions > 0 {
        counts.push(plural(history.revisions, "revision"));
    }
    if history.reflections > 0 {
        counts.push(plural(history.reflections, "reflection"));
    }
    if history.verifications > 0 {
        let last = match history.last_verdict {
            Some(Verdict::Passed) => " (last: passed)",
            Some(Verdict::Failed) => " (last: failed)",
            Some(Verdict::Unclear) => " (last: unclear)",
            None => "",
        };
        counts.push(format!(
            "{}{last}",
            plural(history.verifications, "verification")
        ));
    }
    if history.uncommitted > 0 {
        counts.push(format!(
            "{} lines of a hook in progress",
            history.uncommitted
        ));
    }
    let plan = history.latest.clone().unwrap_or_default();
    if note.is_empty() {
        note = match (&history.latest, &history.no_plan_reason) {
            (None, _) => "No plan yet.".into(),
            (Some(_), Some(reason)) => format!("No usable plan: {reason}"),
            _ => String::new(),
        };
    }
    Some(LatestPlan {
        goal: redactor.redact(&cut_chars(&plan.goal, 2_000).0),
        steps: plan
            .steps
            .iter()
            .map(|s| {
                (
                    s.id,
                    redactor.redact(&cut_chars(&s.description, 2_000).0),
                    s.status.as_str(),
                )
            })
            .collect(),
        counts: counts.join(" · "),
        note: redactor.redact(&note),
    })
}

/// metadata.json's `inherited_from` and `inheritance_skipped`; `None` when it has neither
/// (or cannot be read: the metadata section says so).
fn inherited(dir: &TaskDir, redactor: &Redactor) -> Option<Inherited> {
    use std::io::Read;
    let mut text = String::new();
    dir.open(&TaskFile::Metadata)?
        .take(1 << 20)
        .read_to_string(&mut text)
        .ok()?;
    let meta: Value = serde_json::from_str(&text).ok()?;
    let page = |uuid: &str| -> Option<(String, String)> {
        let uuid = crate::layout::parse_uuid(uuid).ok()?;
        Some((uuid.clone(), task_href(&uuid)))
    };
    let from = meta.get("inherited_from").filter(|v| v.is_object());
    let skipped: Vec<(String, String, String)> = meta
        .get("inheritance_skipped")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| {
            let (uuid, href) = page(s.get("uuid")?.as_str()?)?;
            let reason = s.get("reason").and_then(Value::as_str).unwrap_or("");
            Some((uuid, href, redactor.redact(&cut_chars(reason, 500).0)))
        })
        .collect();
    if from.is_none() && skipped.is_empty() {
        return None;
    }
    let detail = from
        .map(|f| {
            let mut d = Vec::new();
            if let Some(g) = f.get("generation").and_then(Value::as_u64) {
                d.push(format!("generation {g}"));
            }
            if let Some(t) = f.get("tokens").and_then(Value::as_u64) {
                d.push(format!("{t} tokens"));
            }
            let parts: Vec<&str> = f
                .get("parts")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            if !parts.is_empty() {
                d.push(parts.join(", "));
            }
            if let Some(c) = f.get("completed_at").and_then(Value::as_str) {
                d.push(format!("completed {c}"));
            }
            redactor.redact(&d.join(" · "))
        })
        .unwrap_or_default();
    Some(Inherited {
        from: from.and_then(|f| page(f.get("uuid")?.as_str()?)),
        detail,
        skipped,
    })
}

/// The context chart from llm_calls.jsonl (through `cache`: only new lines are read).
fn context_chart(
    uuid: &str,
    dir: &TaskDir,
    row: &TaskRow,
    cache: &ChartCache,
) -> (Option<ContextChart>, String) {
    let Some(mut f) = dir.open(&TaskFile::CallLog) else {
        return (
            None,
            if row.llm_call_count > 0 {
                "No per-call record for this task: llm_calls.jsonl is written by ctxhost versions that have the dashboard.".into()
            } else {
                "No LLM call yet.".into()
            },
        );
    };
    let mut series = match cache.series(uuid, &mut f) {
        Ok(s) => s,
        Err(e) => return (None, format!("llm_calls.jsonl could not be read: {e}")),
    };
    if series.window.is_none() {
        series.window = row.context_length.and_then(|c| u64::try_from(c).ok());
    }
    let mut note = format!(
        "{} LLM call(s) of the agent loop, {} compression(s)",
        series.calls, series.compressions_total
    );
    if !series.exact() {
        note.push_str(&format!(
            "; each point of the line is the largest context of {} consecutive calls",
            series.group_size
        ));
    }
    if !series.markers_complete() {
        note.push_str("; too many compressions to mark each (the LLM calls view lists them)");
    }
    if series.summary_calls > 0 {
        note.push_str(&format!(
            "; the compressor's {} summary request(s) are not drawn (they do not send the context)",
            series.summary_calls
        ));
    }
    if series.unreadable > 0 {
        note.push_str(&format!(
            "; {} unreadable line(s) skipped",
            series.unreadable
        ));
    }
    if series.calls == 0 && series.compressions_total == 0 {
        return (None, "No LLM call recorded yet.".into());
    }
    (Some(charts::context_chart(&series)), note)
}

fn listing<T>(
    uuid: &str,
    view: View,
    page: &Page,
    items: Vec<T>,
    extra: &[(&str, String)],
) -> Listing<T> {
    let with = |k: &'static str, v: String| {
        let mut e: Vec<(&str, String)> = extra.to_vec();
        e.push((k, v));
        view_href(uuid, view, &e)
    };
    Listing {
        items,
        first_href: with("from", "0".into()),
        prev_href: if page.has_before() {
            with("before", page.start.to_string())
        } else {
            String::new()
        },
        next_href: if page.has_after() {
            with("from", page.end.to_string())
        } else {
            String::new()
        },
        last_href: view_href(uuid, view, extra),
        position: format!("bytes {}–{} of {}", page.start, page.end, page.file_len),
    }
}

fn problem_of(line: &PagedLine) -> Option<String> {
    if !line.complete {
        return Some(format!(
            "last line without its newline ({} bytes): being written, or torn by a crash",
            line.len
        ));
    }
    None
}

/// A message line of messages.jsonl (`history: true`) or current.jsonl.
fn message_view(
    uuid: &str,
    line: &PagedLine,
    history: bool,
    redactor: &Redactor,
    max_chars: usize,
) -> MessageView {
    let mut v = MessageView {
        anchor: format!("m{}", line.offset),
        seq: String::new(),
        role: String::new(),
        timestamp: String::new(),
        tokens: String::new(),
        content: String::new(),
        hidden_chars: 0,
        full_href: if history {
            format!("/tasks/{uuid}/messages/{}", line.offset)
        } else {
            format!(
                "/tasks/{uuid}/files/{}?from={}",
                ctxhost_format::files::CURRENT,
                line.offset
            )
        },
        tool_calls: Vec::new(),
        tool_call_id: String::new(),
        tool_name: String::new(),
        summary_id: String::new(),
        problem: String::new(),
    };
    if line.cut {
        v.seq = pager::seq_of(&line.bytes).map_or(String::new(), |s| s.to_string());
        v.problem = format!("a long line ({}): open it on its own page", bytes(line.len));
        return v;
    }
    let parsed: Result<ChatMessage, String> = if history {
        serde_json::from_slice::<HistoryLine>(&line.bytes)
            .map(|h| {
                v.seq = h.seq.to_string();
                v.timestamp = h.timestamp.clone();
                v.tokens = h.tokens.to_string();
                v.summary_id = h.summary_id.map(|s| s.to_string()).unwrap_or_default();
                h.to_chat()
            })
            .map_err(|e| e.to_string())
    } else {
        serde_json::from_slice::<ChatMessage>(&line.bytes).map_err(|e| e.to_string())
    };
    match parsed {
        Ok(m) => {
            v.role = m.role.clone();
            let (content, hidden) = cut_chars(
                &redactor.redact(m.content.as_deref().unwrap_or("")),
                max_chars,
            );
            v.content = content;
            v.hidden_chars = hidden;
            v.tool_calls = m
                .calls()
                .iter()
                .map(|c| ToolCallView {
                    id: c.id.clone(),
                    name: c.function.name.clone(),
                    arguments: redactor.redact(&pretty_json_text(&c.function.arguments)),
                })
                .collect();
            v.tool_call_id = m.tool_call_id.unwrap_or_default();
            v.tool_name = m.tool_name.unwrap_or_default();
        }
        Err(e) => {
            v.problem = problem_of(line).unwrap_or_else(|| format!("unreadable line: {e}"));
            v.content = redactor.redact(&cut_chars(&String::from_utf8_lossy(&line.bytes), 2000).0);
        }
    }
    v
}

/// JSON text pretty-printed when it parses, else as it is.
fn pretty_json_text(text: &str) -> String {
    serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| text.to_string())
}

fn summary_view(uuid: &str, line: &PagedLine, redactor: &Redactor) -> SummaryView {
    match serde_json::from_slice::<SummaryLine>(&line.bytes) {
        Ok(s) => SummaryView {
            range: format!("#{}–#{}", s.start_seq, s.end_seq),
            range_href: view_href(uuid, View::Messages, &[("seq", s.start_seq.to_string())]),
            original_tokens: s.original_tokens,
            summary_tokens: s.summary_tokens,
            ratio: if s.ratio > 0.0 {
                format!("{:.3} ({:.1}× smaller)", s.ratio, 1.0 / s.ratio)
            } else {
                format!("{:.3}", s.ratio)
            },
            timestamp: s.timestamp,
            summary: redactor.redact(&s.summary),
            id: s.id.to_string(),
            problem: String::new(),
        },
        Err(e) => SummaryView {
            id: String::new(),
            range: String::new(),
            range_href: String::new(),
            original_tokens: 0,
            summary_tokens: 0,
            ratio: String::new(),
            timestamp: String::new(),
            summary: redactor.redact(&cut_chars(&String::from_utf8_lossy(&line.bytes), 2000).0),
            problem: problem_of(line).unwrap_or_else(|| {
                if line.cut {
                    format!("a long line ({})", bytes(line.len))
                } else {
                    format!("unreadable line: {e}")
                }
            }),
        },
    }
}

fn tool_view(uuid: &str, dir: &TaskDir, line: &PagedLine, redactor: &Redactor) -> ToolView {
    match serde_json::from_slice::<ToolLine>(&line.bytes) {
        Ok(t) => {
            let (result, hidden) = cut_chars(
                &redactor.redact(t.result.as_deref().unwrap_or("")),
                LIST_RESULT_CHARS,
            );
            let spilled = dir.has(&TaskFile::ToolResult(t.seq));
            ToolView {
                seq: t.seq.to_string(),
                tool: t.tool,
                call_id: t.tool_call_id.unwrap_or_default(),
                args: redactor.redact(&serde_json::to_string_pretty(&t.args).unwrap_or_default()),
                status: match t.status {
                    ctxhost_format::ToolStatus::Success => "success".into(),
                    ctxhost_format::ToolStatus::Error => "error".into(),
                },
                duration: millis(t.duration_ms),
                timestamp: t.timestamp,
                result,
                hidden_chars: hidden,
                error: redactor.redact(t.error.as_deref().unwrap_or("")),
                spilled_href: if spilled {
                    format!("/tasks/{uuid}/tool-results/{}", t.seq)
                } else {
                    String::new()
                },
                problem: String::new(),
            }
        }
        Err(e) => ToolView {
            seq: pager::seq_of(&line.bytes).map_or(String::new(), |s| s.to_string()),
            tool: String::new(),
            call_id: String::new(),
            args: String::new(),
            status: String::new(),
            duration: String::new(),
            timestamp: String::new(),
            result: redactor.redact(&cut_chars(&String::from_utf8_lossy(&line.bytes), 2000).0),
            hidden_chars: 0,
            error: String::new(),
            spilled_href: String::new(),
            problem: problem_of(line).unwrap_or_else(|| {
                if line.cut {
                    format!("a long line ({})", bytes(line.len))
                } else {
                    format!("unreadable line: {e}")
                }
            }),
        },
    }
}

/// A call line's token counts for the table: `P in + C out = T`, the total alone, or "not
/// reported".
fn usage_text(u: &CallUsage) -> String {
    match (u.prompt_tokens, u.completion_tokens, u.total_tokens) {
        (Some(p), Some(o), Some(t)) => format!("{p} in + {o} out = {t}"),
        (_, _, Some(t)) => t.to_string(),
        _ => "not reported".into(),
    }
}

fn status_text(status: CallStatus) -> String {
    match status {
        CallStatus::Ok => "ok".into(),
        CallStatus::Error => "error".into(),
    }
}

fn call_view(line: &PagedLine, redactor: &Redactor) -> CallView {
    let mut v = CallView {
        kind: String::new(),
        n: String::new(),
        timestamp: String::new(),
        context: String::new(),
        usage: String::new(),
        duration: String::new(),
        status: String::new(),
        detail: String::new(),
        problem: String::new(),
    };
    match serde_json::from_slice::<CallLogLine>(&line.bytes) {
        Ok(CallLogLine::Call(c)) => {
            v.kind = "call".into();
            v.n = c.n.to_string();
            v.timestamp = c.timestamp;
            v.context = format!(
                "{} of {}{}",
                c.context_tokens,
                c.context_length,
                c.threshold_tokens
                    .map(|t| format!(" (threshold {t})"))
                    .unwrap_or_default()
            );
            v.usage = usage_text(&c.usage);
            if let Some(cached) = c.cache_read_tokens {
                v.usage.push_str(&format!(" ({cached} cached)"));
            }
            v.duration = millis(c.duration_ms);
            v.status = status_text(c.status);
            v.detail = redactor.redact(c.error.as_deref().unwrap_or(""));
            if c.request_bytes > 0 {
                v.detail = format!("request {}. {}", bytes(c.request_bytes), v.detail)
                    .trim_end()
                    .to_string();
            }
        }
        Ok(CallLogLine::SummaryCall(c)) => {
            v.kind = "summary request".into();
            v.timestamp = c.timestamp;
            v.context = format!("{} sent", c.input_tokens);
            v.usage = usage_text(&c.usage);
            v.duration = millis(c.duration_ms);
            v.status = status_text(c.status);
            v.detail = redactor.redact(c.error.as_deref().unwrap_or(""));
        }
        Ok(CallLogLine::Compression(c)) => {
            v.kind = "compression".into();
            v.timestamp = c.timestamp;
            v.context = format!("{} → {}", c.before_tokens, c.after_tokens);
            v.detail = c
                .summary_id
                .map(|s| format!("summary {s}"))
                .unwrap_or_default();
        }
        Err(e) => {
            v.problem = problem_of(line).unwrap_or_else(|| format!("unreadable line: {e}"));
        }
    }
    v
}

fn plan_view(line: &PagedLine, redactor: &Redactor) -> PlanView {
    match serde_json::from_slice::<Value>(&line.bytes) {
        Ok(Value::Object(map)) => {
            let kind = map
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("(no type)")
                .to_string();
            let fields = map
                .into_iter()
                .filter(|(k, _)| k != "type")
                .map(|(k, v)| {
                    let shown = match v {
                        Value::String(s) => s,
                        other => serde_json::to_string_pretty(&other).unwrap_or_default(),
                    };
                    (k, redactor.redact(&cut_chars(&shown, LIST_CONTENT_CHARS).0))
                })
                .collect();
            PlanView {
                kind,
                fields,
                problem: String::new(),
            }
        }
        other => PlanView {
            kind: String::new(),
            fields: vec![(
                "line".into(),
                redactor.redact(&cut_chars(&String::from_utf8_lossy(&line.bytes), 2000).0),
            )],
            problem: problem_of(line).unwrap_or_else(|| match other {
                Ok(_) => "not a JSON object".into(),
                Err(_) if line.cut => format!("a long line ({})", bytes(line.len)),
                Err(e) => format!("unreadable line: {e}"),
            }),
        },
    }
}

fn read(file: &mut File, position: &Position, limits: Limits) -> std::io::Result<Page> {
    let anchor = match position.seq {
        Some(seq) => Anchor::From(pager::find_seq(file, seq)?),
        None => position.anchor,
    };
    pager::read_page(file, anchor, limits)
}

/// The selected view's body.
pub fn view_body(
    uuid: &str,
    dir: &TaskDir,
    view: View,
    position: &Position,
    planning_file: Option<&str>,
    redactor: &Redactor,
) -> std::io::Result<ViewBody> {
    let limits = Limits::default();
    if view == View::Planning {
        let names = dir.planning_files();
        let selected = planning_file
            .filter(|n| names.iter().any(|x| x == n))
            .or(names.first().map(String::as_str))
            .map(str::to_string);
        let files = names
            .iter()
            .map(|n| {
                (
                    n.clone(),
                    view_href(uuid, View::Planning, &[("file", n.clone())]),
                    Some(n) == selected.as_ref(),
                )
            })
            .collect();
        let listing = match selected.as_deref().and_then(TaskFile::planning) {
            Some(f) => match dir.open(&f) {
                Some(mut file) => {
                    let page = read(&mut file, position, limits)?;
                    let items = page.lines.iter().map(|l| plan_view(l, redactor)).collect();
                    let name = selected.clone().unwrap_or_default();
                    Some(listing(uuid, view, &page, items, &[("file", name)]))
                }
                None => None,
            },
            None => None,
        };
        if names.is_empty() {
            return Ok(ViewBody::Empty(
                "No planning history (planning/ holds none for this task).".into(),
            ));
        }
        return Ok(ViewBody::Planning { files, listing });
    }
    let Some(file) = view.file() else {
        return Ok(ViewBody::Empty(String::new()));
    };
    let Some(mut f) = dir.open(&file) else {
        return Ok(ViewBody::Empty(dir.unreadable_reason(&file)));
    };
    let page = read(&mut f, position, limits)?;
    Ok(match view {
        View::Messages => ViewBody::Messages(listing(
            uuid,
            view,
            &page,
            page.lines
                .iter()
                .map(|l| message_view(uuid, l, true, redactor, LIST_CONTENT_CHARS))
                .collect(),
            &[],
        )),
        View::Context => ViewBody::Context(listing(
            uuid,
            view,
            &page,
            page.lines
                .iter()
                .map(|l| message_view(uuid, l, false, redactor, LIST_CONTENT_CHARS))
                .collect(),
            &[],
        )),
        View::Summaries => ViewBody::Summaries(listing(
            uuid,
            view,
            &page,
            page.lines
                .iter()
                .map(|l| summary_view(uuid, l, redactor))
                .collect(),
            &[],
        )),
        View::Tools => ViewBody::Tools(listing(
            uuid,
            view,
            &page,
            page.lines
                .iter()
                .map(|l| tool_view(uuid, dir, l, redactor))
                .collect(),
            &[],
        )),
        View::Calls => ViewBody::Calls(listing(
            uuid,
            view,
            &page,
            page.lines.iter().map(|l| call_view(l, redactor)).collect(),
            &[],
        )),
        View::Planning => ViewBody::Empty(String::new()),
    })
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

/// One message of messages.jsonl at `offset` (a line start), in full (lines up to 64 MiB).
/// `None` when `offset` is not the start of a line.
pub fn full_message(
    uuid: &str,
    file: &mut File,
    offset: u64,
    redactor: &Redactor,
) -> std::io::Result<Option<MessageView>> {
    let limits = Limits {
        max_lines: 1,
        max_line_bytes: 64 << 20,
        max_page_bytes: 64 << 20,
    };
    let page = pager::read_page(file, Anchor::From(offset), limits)?;
    let Some(line) = page.lines.first().filter(|l| l.offset == offset) else {
        return Ok(None);
    };
    Ok(Some(message_view(uuid, line, true, redactor, usize::MAX)))
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

    #[test]
    fn the_source_item_block_links_only_web_urls() {
        let mut row = crate::db::testing::task_row("u");
        assert_eq!(source_item(&row, None), None, "a local task has none");
        row.task_source = "gitlab".into();
        row.owner = Some("group".into());
        row.repo = Some("proj".into());
        row.task_type = Some("pull_request".into());
        row.task_id = Some("7".into());
        let bare = source_item(&row, None).unwrap();
        assert_eq!(bare.item, "group/proj!7 (GitLab merge request)");
        assert_eq!((bare.item_href, bare.published), (None, String::new()));
        let p = Publication {
            task_uuid: "u".into(),
            labels_state: Some("failed".into()),
            comment_state: crate::db::sources::CommentState::Posted,
            comment_id: Some("9".into()),
            comment_url: Some("javascript:alert(1)".into()),
            posted_at: Some("2026-11-30T17:00:00Z".into()),
            lease_owner: None,
            lease_until_ms: None,
            attempts: 2,
            last_error: Some("HTTP 502".into()),
            next_attempt_ms: None,
            item_url: Some("https://gitlab.example/group/proj/-/merge_requests/7".into()),
        };
        let s = source_item(&row, Some(&p)).unwrap();
        assert_eq!(
            s.item_href.as_deref(),
            Some("https://gitlab.example/group/proj/-/merge_requests/7")
        );
        assert_eq!(s.comment_href, None, "not a web URL: no link");
        assert_eq!(
            s.published,
            "result posted at 2026-11-30T17:00:00Z; labels failed"
        );
        assert_eq!(s.error, "HTTP 502 (2 failed attempt(s))");
    }
}
