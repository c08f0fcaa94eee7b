//! The files of one task directory, read through its [`TaskDir`] handle: no symbolic link in
//! it and nothing looser than owner-only; metadata.json, task_state.json and workspace.json parse; messages.jsonl
//! exists once the task has a context; its checkpoints are usable ([`super::checkpoints`]);
//! every line of every JSONL file parses as its format and
//! holds no NUL byte, seq runs 1..n, current.jsonl keeps the context invariants and is not
//! behind messages.jsonl; no step temporary is left.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use ctxhost_format::files::{
    CURRENT, DEBUG_FILES, LLM_CALLS, MESSAGES, PLANNING_DIR, SUMMARIES, TOOL_DEFINITIONS, TOOLS,
    is_temporary,
};
use ctxhost_format::planning::{PlanningHistory, PlanningLine};
use ctxhost_format::{CallLogLine, ChatMessage, HistoryLine, SummaryLine, ToolLine};

use super::schema_check::schema_mismatch;
use super::{Problem, ProblemKind, problem};
use crate::invariants::{ContextChecker, Violation};
use crate::repair::{jsonl_files, reconcile_current};
use crate::schemas::Schema;
use crate::task::metadata::Metadata;
use crate::task_dir::{DIR_MODE, FILE_MODE, TaskDir};
use crate::untrusted;

/// The mode bits ctxhost's files must not have: any access for the group or others.
pub(crate) const LOOSE_BITS: u32 = 0o077;

/// A [`ProblemKind::LooseMode`] problem for `path` with `mode`, if its mode gives the group or
/// others any access.
pub(crate) fn loose_mode(
    path: &Path,
    uuid: Option<&str>,
    mode: u32,
    is_dir: bool,
) -> Option<Problem> {
    let mode = mode & 0o7777;
    (mode & LOOSE_BITS != 0).then(|| {
        problem(
            ProblemKind::LooseMode,
            uuid,
            Some(path),
            None,
            format!(
                "mode {mode:04o} lets other users read it; contexts/ holds conversations, code and tool output, so it should be {:04o}",
                if is_dir { DIR_MODE } else { FILE_MODE }
            ),
            true,
        )
    })
}

/// A [`ProblemKind::Unreadable`] problem (for a human: nothing to repair): `path` (at `line`)
/// could not be opened, listed or read; `message` says which and why.
fn unreadable(uuid: Option<&str>, path: &Path, line: Option<u64>, message: String) -> Problem {
    problem(
        ProblemKind::Unreadable,
        uuid,
        Some(path),
        line,
        message,
        false,
    )
}

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

/// The format of the JSONL file `name` (relative to the task directory): `planning/*.jsonl` are
/// planning histories, top-level files by their name.
fn format_of(name: &str) -> LineFormat {
    if name
        .strip_prefix(PLANNING_DIR)
        .is_some_and(|rest| rest.starts_with('/'))
    {
        return LineFormat::Planning;
    }
    match name {
        MESSAGES => LineFormat::History,
        CURRENT => LineFormat::Context,
        SUMMARIES => LineFormat::Summary,
        TOOLS => LineFormat::Tool,
        LLM_CALLS => LineFormat::CallLog,
        _ => LineFormat::Object,
    }
}

/// Check the files of the task directory at `path`. `live`: a process is using it (read-only,
/// the last line is not judged); `rules`: what its status allows ([`super::FileRules`]).
pub(crate) fn check_dir(
    path: &Path,
    uuid: Option<&str>,
    live: bool,
    rules: &super::FileRules,
    problems: &mut Vec<Problem>,
) {
    let (allow_pending, keep_debug) = (rules.allow_pending, rules.keep_debug);
    let dir = match TaskDir::open(path) {
        Ok(d) => d,
        Err(e) => {
            problems.push(unreadable(uuid, path, None, format!("cannot open: {e}")));
            return;
        }
    };
    check_entries(&dir, uuid, live, problems);
    super::checkpoints::check_checkpoints(&dir, uuid, live, problems);
    for (name, parse) in [
        (
            crate::task::metadata::METADATA_FILE,
            (|v: serde_json::Value| serde_json::from_value::<Metadata>(v).map(|_| ()))
                as fn(serde_json::Value) -> serde_json::Result<()>,
        ),
        (crate::task::state::TASK_STATE_FILE, |v| {
            serde_json::from_value::<crate::task::state::TaskState>(v).map(|_| ())
        }),
        // Read by the request format only: its schema is all there is to check.
        (TOOL_DEFINITIONS, |_| Ok(())),
        (crate::workspace::record::FILE, |v| {
            serde_json::from_value::<crate::workspace::record::WorkspaceRecord>(v).map(|_| ())
        }),
    ] {
        let Ok(Some(bytes)) = dir.read_if_exists(name) else {
            continue;
        };
        if live {
            continue;
        }
        let path = dir.file_path(name);
        let bad_file = |e: &dyn std::fmt::Display| {
            problem(
                ProblemKind::BadFile,
                uuid,
                Some(&path),
                None,
                format!(
                    "does not parse: {}",
                    untrusted::text(&e.to_string(), untrusted::MAX_ERROR_BYTES)
                ),
                false,
            )
        };
        let value: serde_json::Value = match serde_json::from_slice(&bytes) {
            Ok(v) => v,
            Err(e) => {
                problems.push(bad_file(&e));
                continue;
            }
        };
        let mismatch =
            Schema::for_task_file(name).and_then(|schema| schema_mismatch(schema, &value));
        let matched = mismatch.is_none();
        if let Some(message) = mismatch {
            problems.push(problem(
                ProblemKind::SchemaMismatch,
                uuid,
                Some(&path),
                None,
                message,
                false,
            ));
        }
        if let Err(e) = parse(value)
            && matched
        {
            problems.push(bad_file(&e));
        }
    }
    if !live && let Ok(entries) = dir.entries(None) {
        for (n, _) in entries.iter().filter(|(n, m)| {
            m.is_file() && is_temporary(n) && !(keep_debug && DEBUG_FILES.contains(&n.as_str()))
        }) {
            problems.push(problem(
                ProblemKind::TemporaryFile,
                uuid,
                Some(&dir.file_path(n)),
                None,
                "a step's temporary file left behind",
                true,
            ));
        }
    }
    if !live {
        check_workspace(&dir, path, uuid, problems);
    }
    // A context without its history: the task cannot be resumed, nor its context rebuilt.
    let messages = dir.file_path(MESSAGES);
    if !live && !dir.is_file(MESSAGES) {
        let written: Vec<&str> = [CURRENT, SUMMARIES, TOOLS]
            .into_iter()
            .filter(|f| dir.is_file(f))
            .collect();
        if !written.is_empty() || rules.needs_history {
            problems.push(problem(
                ProblemKind::MissingFile,
                uuid,
                Some(&messages),
                None,
                if written.is_empty() {
                    "missing: a paused or completed task always has its history (restore it from a backup; \
                     the task cannot continue without it)"
                        .to_string()
                } else {
                    format!(
                        "missing, but {} exist(s): the history of the task is lost (restore it from a backup; \
                         the task cannot be resumed without it)",
                        written.join(", ")
                    )
                },
                false,
            ));
        }
    }
    let files = match jsonl_files(&dir) {
        Ok(f) => f,
        Err(e) => {
            problems.push(unreadable(uuid, path, None, format!("{e:#}")));
            return;
        }
    };
    let mut clean = BTreeSet::new();
    for file in &files {
        if check_jsonl(&dir, file, uuid, live, allow_pending, problems) {
            clean.insert(file.as_str());
        }
    }
    // Only two sound files can be matched up.
    if !live && clean.contains(MESSAGES) && clean.contains(CURRENT) {
        match reconcile_current(&dir, false) {
            Ok(missing) if !missing.is_empty() => problems.push(problem(
                ProblemKind::CurrentBehind,
                uuid,
                Some(&dir.file_path(CURRENT)),
                None,
                format!("lacks the last line(s) of {MESSAGES}: seq {missing:?}"),
                true,
            )),
            Ok(_) => {}
            Err(e) => problems.push(problem(
                ProblemKind::Unreconcilable,
                uuid,
                Some(&dir.file_path(CURRENT)),
                None,
                format!("{e:#}"),
                false,
            )),
        }
    }
}

/// The task's git workspace (issue 40): workspace.json parses; its base commit is in the
/// repository the workspace is rebuilt from (a managed worktree's mirror under
/// `contexts/.workspaces/cache/`, when this host has it; a user's repository); and
/// `changes.patch` applies to that commit (`git apply --check`).
fn check_workspace(dir: &TaskDir, path: &Path, uuid: Option<&str>, problems: &mut Vec<Problem>) {
    use crate::workspace::checkout::{self, MAX_PATCH_BYTES, PATCH_FILE};
    use crate::workspace::record::{FILE, WorkspaceRecord};
    // A record that does not parse or match its schema is reported with the other JSON files.
    let Ok(Some(rec)) = WorkspaceRecord::read(dir) else {
        return;
    };
    let git_dir = if rec.managed {
        // contexts/<state>/<uuid> → contexts/.workspaces
        let Some(contexts) = path.parent().and_then(Path::parent) else {
            return;
        };
        match rec
            .repository
            .as_deref()
            .and_then(|u| checkout::mirror_path(&contexts.join(".workspaces"), u).ok())
        {
            // No mirror on this host (the task ran elsewhere): a resume fetches one.
            Some(m) if m.join("HEAD").exists() => m,
            _ => return,
        }
    } else {
        match crate::workspace::git::Git::new(&rec.path).read([
            "rev-parse",
            "--path-format=absolute",
            "--git-common-dir",
        ]) {
            Ok(d) => std::path::PathBuf::from(d),
            Err(_) => {
                problems.push(problem(
                    ProblemKind::WorkspaceBase,
                    uuid,
                    Some(&dir.file_path(FILE)),
                    None,
                    format!("the workspace {} is no git checkout any more", rec.path),
                    false,
                ));
                return;
            }
        }
    };
    if !checkout::has_commit(&git_dir, &rec.base_commit) {
        problems.push(problem(
            ProblemKind::WorkspaceBase,
            uuid,
            Some(&dir.file_path(FILE)),
            None,
            format!(
                "the base commit {} is not in {}: the workspace cannot be rebuilt from it",
                rec.base_commit,
                git_dir.display()
            ),
            false,
        ));
        return;
    }
    let patch = match dir.read_bounded_if_exists(PATCH_FILE, MAX_PATCH_BYTES) {
        Ok(p) => p.unwrap_or_default(),
        Err(e) => {
            problems.push(unreadable(
                uuid,
                &dir.file_path(PATCH_FILE),
                None,
                e.to_string(),
            ));
            return;
        }
    };
    if let Err(e) = checkout::check_patch(&git_dir, &rec.base_commit, &patch) {
        problems.push(problem(
            ProblemKind::WorkspacePatch,
            uuid,
            Some(&dir.file_path(PATCH_FILE)),
            None,
            format!(
                "does not apply to the base commit {}: {}",
                rec.base_commit,
                untrusted::text(&format!("{e:#}"), untrusted::MAX_ERROR_BYTES)
            ),
            false,
        ));
    }
}

/// The entries of the task directory: symbolic links (the host never writes one; a component
/// of an older ctxhost could), FIFOs, sockets and devices, and modes looser than owner-only
/// (the directory itself too).
fn check_entries(dir: &TaskDir, uuid: Option<&str>, live: bool, problems: &mut Vec<Problem>) {
    if let Ok(m) = std::fs::symlink_metadata(dir.path())
        && let Some(p) = loose_mode(dir.path(), uuid, m.permissions().mode(), true)
    {
        problems.push(p);
    }
    let mut found = Vec::new();
    let walked = dir.walk(|rel, m| {
        if m.is_symlink() {
            found.push(problem(
                ProblemKind::Symlink,
                uuid,
                Some(&dir.file_path(rel)),
                None,
                "a symbolic link in a task directory (the host never follows one; --repair deletes it)",
                !live,
            ));
        } else if !m.is_file() && !m.is_dir() {
            found.push(problem(
                ProblemKind::SpecialFile,
                uuid,
                Some(&dir.file_path(rel)),
                None,
                "a FIFO, socket or device in a task directory (the host never opens one; --repair deletes it)",
                !live,
            ));
        } else if let Some(p) = loose_mode(
            &dir.file_path(rel),
            uuid,
            cap_std::fs::PermissionsExt::mode(&m.permissions()),
            m.is_dir(),
        ) {
            found.push(p);
        }
    });
    if let Err(e) = walked {
        found.push(unreadable(
            uuid,
            dir.path(),
            None,
            format!("cannot list: {e}"),
        ));
    }
    problems.extend(found);
}

/// Check every line of the JSONL file `name` of `dir`; returns whether it has no line problem.
fn check_jsonl(
    dir: &TaskDir,
    name: &str,
    uuid: Option<&str>,
    live: bool,
    allow_pending: bool,
    problems: &mut Vec<Problem>,
) -> bool {
    let before = problems.len();
    let path_buf = dir.file_path(name);
    let path = path_buf.as_path();
    let format = format_of(name);
    // A problem at a line of this file.
    let at_line = |kind, line, message: String, fixable| {
        problem(kind, uuid, Some(path), Some(line), message, fixable)
    };
    let mut reader = match dir.open_read(name) {
        Ok(f) => BufReader::new(f),
        Err(e) => {
            problems.push(unreadable(uuid, path, None, format!("cannot open: {e}")));
            return false;
        }
    };
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    let mut offset = 0u64;
    let mut expected_seq = 1u64;
    let mut checker = (format == LineFormat::Context).then(ContextChecker::new);
    let schema = schema_of(path);
    let mut planning = (format == LineFormat::Planning).then(PlanningHistory::default);
    let mut messages = 0u64;
    loop {
        buf.clear();
        let n = match reader.read_until(b'\n', &mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                problems.push(unreadable(
                    uuid,
                    path,
                    Some(line_no + 1),
                    format!("cannot read: {e}"),
                ));
                return false;
            }
        };
        line_no += 1;
        let start = offset;
        offset += n as u64;
        let terminated = buf.last() == Some(&b'\n');
        let is_last = reader.fill_buf().map(|b| b.is_empty()).unwrap_or(true);
        if buf.contains(&0) && !live {
            // A lost write: the bytes are read as what they would be without the NULs.
            let nuls = buf.iter().filter(|b| **b == 0).count();
            buf.retain(|b| *b != 0);
            let only = buf.iter().all(u8::is_ascii_whitespace);
            problems.push(at_line(
                ProblemKind::NulBytes,
                line_no,
                if only {
                    format!("a line of {nuls} NUL byte(s) (a lost write)")
                } else {
                    format!("{nuls} NUL byte(s) before the line's text (a lost write)")
                },
                true,
            ));
        }
        // Every reader of the task's files reads UTF-8 only: a line that is not is one the
        // task would fail on (not when it is an unterminated last line: torn, or being
        // written, as judged below).
        if let Err(e) = std::str::from_utf8(&buf)
            && (terminated || !is_last)
        {
            problems.push(at_line(
                ProblemKind::BadLine,
                line_no,
                format!(
                    "not UTF-8: an invalid byte sequence at byte {} of the line (byte offset {} of the file); \
                     no reader of the task's files takes it",
                    e.valid_up_to(),
                    start + e.valid_up_to() as u64
                ),
                false,
            ));
            checker = None;
            expected_seq = 0;
            continue;
        }
        let text = String::from_utf8_lossy(&buf);
        let text = text.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            if !terminated && !live {
                problems.push(at_line(
                    ProblemKind::TornLine,
                    line_no,
                    format!("torn last line ({n} bytes at byte offset {start}, no newline)"),
                    true,
                ));
            }
            continue;
        }
        // A complete line that is JSON is checked against its schema (an unterminated last
        // line is torn, or being written: not a question of format).
        let schema_mismatch = match schema {
            Some(schema) if terminated || !is_last => line_mismatch(schema, text),
            _ => None,
        };
        let mismatched = schema_mismatch.is_some();
        if let Some(message) = schema_mismatch {
            problems.push(at_line(
                ProblemKind::SchemaMismatch,
                line_no,
                message,
                false,
            ));
        }
        let parsed = parse_line(format, text);
        match parsed {
            Err(e) if is_last && live && !terminated => {
                // Being written by the task's process.
                let _ = e;
                break;
            }
            Err(_) if mismatched => {
                // Reported above; later seq / invariant findings would only repeat it.
                checker = None;
                expected_seq = 0;
                continue;
            }
            Err(e) if is_last => {
                problems.push(at_line(
                    ProblemKind::TornLine,
                    line_no,
                    format!("torn last line ({n} bytes at byte offset {start}): {e}"),
                    true,
                ));
                break;
            }
            Err(e) => {
                problems.push(at_line(
                    ProblemKind::BadLine,
                    line_no,
                    format!(
                        "not a valid line: {}",
                        untrusted::text(&e, untrusted::MAX_ERROR_BYTES)
                    ),
                    false,
                ));
                // Later seq / invariant findings would only repeat this one.
                checker = None;
                expected_seq = 0;
                continue;
            }
            Ok(parsed) => {
                if !terminated && !live {
                    problems.push(at_line(
                        ProblemKind::TornLine,
                        line_no,
                        "the last line lacks its newline".to_string(),
                        true,
                    ));
                }
                match parsed {
                    Parsed::History(seq) if expected_seq != 0 => {
                        if seq != expected_seq {
                            let what = if seq < expected_seq {
                                "repeated or out of order"
                            } else {
                                "a gap"
                            };
                            problems.push(at_line(ProblemKind::SeqGap, line_no, format!("seq {seq} where {expected_seq} was expected ({what}; seq runs 1..n)"), false));
                        }
                        expected_seq = seq + 1;
                    }
                    Parsed::Planning(line) => {
                        if let Some(h) = planning.as_mut()
                            && let Err(e) = h.push(*line)
                        {
                            problems.push(at_line(
                                ProblemKind::PlanningRule,
                                line_no,
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
                            problems.push(at_line(
                                ProblemKind::ContextInvariant,
                                line_no,
                                describe_violation(&v),
                                v.is_repairable() && !live,
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
        problems.push(at_line(ProblemKind::UncommittedPlanning, line_no + 1 - h.uncommitted, format!(
                "{} line(s) after the last decision: entries of a strategy hook that never returned",
                h.uncommitted
            ), true));
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
                format!("at the end: {}", describe_violation(&v)),
                v.is_repairable() && !live,
            )),
        }
    }
    problems.len() == before
}

/// The schema of the JSONL file at `path`: by its name, or `planning/*.jsonl`.
fn schema_of(path: &Path) -> Option<Schema> {
    let name = path.file_name()?.to_str()?;
    let in_planning = path
        .parent()
        .and_then(|p| p.file_name())
        .is_some_and(|n| n == PLANNING_DIR);
    if in_planning {
        Schema::for_task_file(&format!("{PLANNING_DIR}/{name}"))
    } else {
        Schema::for_task_file(name)
    }
}

/// What is wrong with JSONL line `text` against `schema`; `None` when it matches, or is not
/// JSON (the line's parse reports that).
fn line_mismatch(schema: Schema, text: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    schema_mismatch(schema, &value).or_else(|| reasoning_mismatch(schema, &value))
}

/// What is wrong with the reasoning items of a message line that matches its schema
/// (messages.jsonl, current.jsonl): each item's `data` must be the JSON text of the item as the
/// provider sent it, and an item object's own `type` must be the item's `type`. A cut or
/// edited item would be sent back to a provider that refuses it.
fn reasoning_mismatch(schema: Schema, value: &serde_json::Value) -> Option<String> {
    if !matches!(schema, Schema::Messages | Schema::Current) {
        return None;
    }
    let items = value.get("reasoning")?.as_array()?;
    for (i, item) in items.iter().enumerate() {
        let data = item.get("data").and_then(serde_json::Value::as_str)?;
        let kind = item.get("type").and_then(serde_json::Value::as_str)?;
        let what = match serde_json::from_str::<serde_json::Value>(data) {
            Err(e) => format!("not JSON text ({e})"),
            Ok(d) => match d.get("type").and_then(serde_json::Value::as_str) {
                Some(t) if t != kind => {
                    format!("an item of type {t:?}, but the reasoning item's type is {kind:?}")
                }
                _ => continue,
            },
        };
        return Some(format!(
            "does not match docs/schemas/{schema}: /reasoning/{i}/data: {what}"
        ));
    }
    None
}

/// A violation, and what `--repair` does about it when it can.
fn describe_violation(v: &Violation) -> String {
    if v.is_repairable() {
        format!(
            "{v} (--repair drops a duplicate or orphan result, answers a call left without one, \
             replaces invalid arguments by {{}}, and records it in {MESSAGES})"
        )
    } else {
        v.to_string()
    }
}

enum Parsed {
    /// A history line: its seq.
    History(u64),
    Message(ChatMessage),
    /// A planning-history line.
    Planning(Box<PlanningLine>),
    /// A summaries.jsonl line.
    Summary,
    Other,
}

fn parse_line(format: LineFormat, text: &str) -> Result<Parsed, String> {
    let e = |e: serde_json::Error| e.to_string();
    Ok(match format {
        LineFormat::History => {
            Parsed::History(serde_json::from_str::<HistoryLine>(text).map_err(e)?.seq)
        }
        LineFormat::Context => {
            Parsed::Message(serde_json::from_str::<ChatMessage>(text).map_err(e)?)
        }
        LineFormat::Summary => {
            serde_json::from_str::<SummaryLine>(text).map_err(e)?;
            Parsed::Summary
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
