//! The task page's directory part: its files (and those a failed call kept), metadata.json and
//! task_state.json, the latest plan of its planning history, where its context was inherited
//! from, and the context chart.

use serde_json::Value;

use super::{bytes, cut_chars, task_href};
use crate::db::TaskRow;
use crate::web::call_series::ChartCache;
use crate::web::charts::{self, ContextChart};
use crate::web::files::{TaskDir, TaskFile};
use crate::web::security::Redactor;

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
