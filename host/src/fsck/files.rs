//! The files of one task directory: metadata.json and task_state.json parse; every line of
//! every JSONL file parses as its format, seq runs 1..n, current.jsonl keeps the context
//! invariants and is not behind messages.jsonl; no step temporary is left.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::path::Path;

use ctxhost_format::files::{
    CURRENT, DEBUG_FILES, LLM_CALLS, MESSAGES, PLANNING_DIR, SUMMARIES, TOOLS, is_temporary,
};
use ctxhost_format::planning::{PlanningHistory, PlanningLine};
use ctxhost_format::{CallLogLine, ChatMessage, HistoryLine, SummaryLine, ToolLine};

use super::{Problem, ProblemKind, problem};
use crate::invariants::{ContextChecker, Violation};
use crate::repair::{jsonl_files, reconcile_current};
use crate::summary_ids::{OldId, split_old_id};
use crate::task::metadata::Metadata;

/// The format a JSONL file's lines must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineFormat {
    History,
    Context,
    Summary,
    Tool,
    CallLog,
    Planning,
    Object,
}

fn format_of(path: &Path) -> LineFormat {
    let in_planning = path
        .parent()
        .and_then(|p| p.file_name())
        .is_some_and(|n| n == PLANNING_DIR);
    if in_planning {
        return LineFormat::Planning;
    }
    match path.file_name().and_then(|n| n.to_str()) {
        Some(MESSAGES) => LineFormat::History,
        Some(CURRENT) => LineFormat::Context,
        Some(SUMMARIES) => LineFormat::Summary,
        Some(TOOLS) => LineFormat::Tool,
        Some(LLM_CALLS) => LineFormat::CallLog,
        _ => LineFormat::Object,
    }
}

/// Check the files of one task directory. `live`: a process is using it (read-only, the last
/// line is not judged); `allow_pending`: unanswered tool calls may end current.jsonl;
/// `keep_debug`: request/response bodies are not temporaries (a failed task).
pub(crate) fn check_dir(
    dir: &Path,
    uuid: Option<&str>,
    live: bool,
    allow_pending: bool,
    keep_debug: bool,
    problems: &mut Vec<Problem>,
) {
    for (name, parse) in [
        (
            crate::task::metadata::METADATA_FILE,
            (|b: &[u8]| serde_json::from_slice::<Metadata>(b).map(|_| ()))
                as fn(&[u8]) -> serde_json::Result<()>,
        ),
        (crate::task::state::TASK_STATE_FILE, |b: &[u8]| {
            serde_json::from_slice::<crate::task::state::TaskState>(b).map(|_| ())
        }),
    ] {
        let path = dir.join(name);
        if let Ok(bytes) = fs::read(&path)
            && let Err(e) = parse(&bytes)
            && !live
        {
            problems.push(problem(
                ProblemKind::BadFile,
                uuid,
                Some(&path),
                None,
                format!("does not parse: {e}"),
                false,
            ));
        }
    }
    if !live && let Ok(entries) = fs::read_dir(dir) {
        let mut names: Vec<String> = entries
            .flatten()
            .filter(|e| e.path().is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| is_temporary(n) && !(keep_debug && DEBUG_FILES.contains(&n.as_str())))
            .collect();
        names.sort();
        for n in names {
            problems.push(problem(
                ProblemKind::TemporaryFile,
                uuid,
                Some(&dir.join(&n)),
                None,
                "a step's temporary file left behind",
                true,
            ));
        }
    }
    let files = match jsonl_files(dir) {
        Ok(f) => f,
        Err(e) => {
            problems.push(problem(
                ProblemKind::Unreadable,
                uuid,
                Some(dir),
                None,
                format!("{e:#}"),
                false,
            ));
            return;
        }
    };
    let mut clean = BTreeSet::new();
    for file in &files {
        if check_jsonl(file, uuid, live, allow_pending, problems) {
            clean.insert(
                file.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
    // Only two sound files can be matched up.
    if !live && clean.contains(MESSAGES) && clean.contains(CURRENT) {
        match reconcile_current(dir, false) {
            Ok(missing) if !missing.is_empty() => problems.push(problem(
                ProblemKind::CurrentBehind,
                uuid,
                Some(&dir.join(CURRENT)),
                None,
                format!("lacks the last line(s) of {MESSAGES}: seq {missing:?}"),
                true,
            )),
            Ok(_) => {}
            Err(e) => problems.push(problem(
                ProblemKind::Unreconcilable,
                uuid,
                Some(&dir.join(CURRENT)),
                None,
                format!("{e:#}"),
                false,
            )),
        }
    }
}

/// Check every line of one JSONL file; returns whether it has no line problem.
fn check_jsonl(
    path: &Path,
    uuid: Option<&str>,
    live: bool,
    allow_pending: bool,
    problems: &mut Vec<Problem>,
) -> bool {
    let before = problems.len();
    let format = format_of(path);
    let mut reader = match File::open(path) {
        Ok(f) => BufReader::new(f),
        Err(e) => {
            problems.push(problem(
                ProblemKind::Unreadable,
                uuid,
                Some(path),
                None,
                format!("cannot open: {e}"),
                false,
            ));
            return false;
        }
    };
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    let mut offset = 0u64;
    let mut expected_seq = 1u64;
    let mut checker = (format == LineFormat::Context).then(ContextChecker::new);
    let mut planning = (format == LineFormat::Planning).then(PlanningHistory::default);
    let mut messages = 0u64;
    loop {
        buf.clear();
        let n = match reader.read_until(b'\n', &mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                problems.push(problem(
                    ProblemKind::Unreadable,
                    uuid,
                    Some(path),
                    Some(line_no + 1),
                    format!("cannot read: {e}"),
                    false,
                ));
                return false;
            }
        };
        line_no += 1;
        let start = offset;
        offset += n as u64;
        let terminated = buf.last() == Some(&b'\n');
        let is_last = reader.fill_buf().map(|b| b.is_empty()).unwrap_or(true);
        let text = String::from_utf8_lossy(&buf);
        let text = text.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            if !terminated && !live {
                problems.push(problem(
                    ProblemKind::TornLine,
                    uuid,
                    Some(path),
                    Some(line_no),
                    format!("torn last line ({n} bytes at byte offset {start}, no newline)"),
                    true,
                ));
            }
            continue;
        }
        let parsed = parse_line(format, text);
        match parsed {
            Err(e) if is_last && live && !terminated => {
                // Being written by the task's process.
                let _ = e;
                break;
            }
            Err(e) if is_last => {
                problems.push(problem(
                    ProblemKind::TornLine,
                    uuid,
                    Some(path),
                    Some(line_no),
                    format!("torn last line ({n} bytes at byte offset {start}): {e}"),
                    true,
                ));
                break;
            }
            Err(e) => {
                problems.push(problem(
                    ProblemKind::BadLine,
                    uuid,
                    Some(path),
                    Some(line_no),
                    format!("not a valid line: {e}"),
                    false,
                ));
                // Later seq / invariant findings would only repeat this one.
                checker = None;
                expected_seq = 0;
                continue;
            }
            Ok(parsed) => {
                if !terminated && !live {
                    problems.push(problem(
                        ProblemKind::TornLine,
                        uuid,
                        Some(path),
                        Some(line_no),
                        "the last line lacks its newline".to_string(),
                        true,
                    ));
                }
                let old_id = match &parsed {
                    Parsed::History(_, old) => old.as_ref().map(|o| o.describe("summary_id")),
                    Parsed::Summary(old) => old.as_ref().map(|o| o.describe("id")),
                    _ => None,
                };
                if let Some(message) = old_id {
                    problems.push(problem(
                        ProblemKind::OldSummaryId,
                        uuid,
                        Some(path),
                        Some(line_no),
                        message,
                        !live,
                    ));
                }
                match parsed {
                    Parsed::History(seq, _) if expected_seq != 0 => {
                        if seq != expected_seq {
                            let what = if seq < expected_seq {
                                "repeated or out of order"
                            } else {
                                "a gap"
                            };
                            problems.push(problem(
                                ProblemKind::SeqGap,
                                uuid,
                                Some(path),
                                Some(line_no),
                                format!("seq {seq} where {expected_seq} was expected ({what}; seq runs 1..n)"),
                                false,
                            ));
                        }
                        expected_seq = seq + 1;
                    }
                    Parsed::Planning(line) => {
                        if let Some(h) = planning.as_mut()
                            && let Err(e) = h.push(*line)
                        {
                            problems.push(problem(
                                ProblemKind::PlanningRule,
                                uuid,
                                Some(path),
                                Some(line_no),
                                format!("breaks the planning history's rules: {e}"),
                                false,
                            ));
                            planning = None;
                        }
                    }
                    Parsed::Message(m) => {
                        messages += 1;
                        if let Some(c) = checker.as_mut()
                            && let Err(v) = c.push(&m)
                        {
                            problems.push(problem(
                                ProblemKind::ContextInvariant,
                                uuid,
                                Some(path),
                                Some(line_no),
                                v.to_string(),
                                false,
                            ));
                            checker = None;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    if let Some(h) = planning
        && h.uncommitted > 0
        && !live
    {
        problems.push(problem(
            ProblemKind::UncommittedPlanning,
            uuid,
            Some(path),
            Some(line_no + 1 - h.uncommitted),
            format!(
                "{} line(s) after the last decision: entries of a strategy hook that never returned",
                h.uncommitted
            ),
            true,
        ));
    }
    if let Some(c) = checker
        && messages > 0
    {
        match c.finish(allow_pending || live) {
            Ok(_) | Err(Violation::Empty) => {}
            Err(v) => problems.push(problem(
                ProblemKind::ContextInvariant,
                uuid,
                Some(path),
                None,
                format!("at the end: {v}"),
                false,
            )),
        }
    }
    problems.len() == before
}

enum Parsed {
    /// A history line: its seq, and its `summary_id` if written in an old string form.
    History(u64, Option<OldId>),
    Message(ChatMessage),
    /// A planning-history line.
    Planning(Box<PlanningLine>),
    /// A summaries.jsonl line, with its `id` if written in an old string form.
    Summary(Option<OldId>),
    Other,
}

fn parse_line(format: LineFormat, text: &str) -> Result<Parsed, String> {
    let e = |e: serde_json::Error| e.to_string();
    Ok(match format {
        // Only summary lines carry a `summary_id`: the others take the direct path.
        LineFormat::History if text.contains("\"summary_id\"") => {
            let (value, old) = split_old_id(text, "summary_id").map_err(e)?;
            let line: HistoryLine = serde_json::from_value(value).map_err(e)?;
            Parsed::History(line.seq, old)
        }
        LineFormat::History => Parsed::History(
            serde_json::from_str::<HistoryLine>(text).map_err(e)?.seq,
            None,
        ),
        LineFormat::Context => {
            Parsed::Message(serde_json::from_str::<ChatMessage>(text).map_err(e)?)
        }
        LineFormat::Summary => {
            let (value, old) = split_old_id(text, "id").map_err(e)?;
            serde_json::from_value::<SummaryLine>(value).map_err(e)?;
            Parsed::Summary(old)
        }
        LineFormat::Tool => {
            serde_json::from_str::<ToolLine>(text).map_err(e)?;
            Parsed::Other
        }
        LineFormat::CallLog => {
            serde_json::from_str::<CallLogLine>(text).map_err(e)?;
            Parsed::Other
        }
        LineFormat::Planning => Parsed::Planning(Box::new(
            serde_json::from_str::<PlanningLine>(text).map_err(e)?,
        )),
        LineFormat::Object => {
            let v: serde_json::Value = serde_json::from_str(text).map_err(e)?;
            if !v.is_object() {
                return Err(format!(
                    "a JSON {} where an object was expected",
                    kind_of(&v)
                ));
            }
            Parsed::Other
        }
    })
}

fn kind_of(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}
