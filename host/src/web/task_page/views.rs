//! The task page's paged views — messages, current context, summaries, tool calls, LLM calls,
//! planning — read a page at a time by byte offset ([`crate::web::pager`]), and one message of
//! the history in full.

use std::fs::File;

use ctxhost_format::{
    CallLogLine, CallStatus, CallUsage, ChatMessage, HistoryLine, SummaryLine, ToolLine,
};
use serde_json::Value;

use super::{Position, View, bytes, cut_chars, millis, view_href};
use crate::web::files::{TaskDir, TaskFile};
use crate::web::pager::{self, Anchor, Limits, Page, PagedLine};
use crate::web::security::Redactor;

/// Characters of a message's content shown in a list (the message's own page shows it all).
pub const LIST_CONTENT_CHARS: usize = 20_000;
/// Characters of a tool result shown in the tool-call list.
pub const LIST_RESULT_CHARS: usize = 4_000;

/// A tool call of an assistant message.
#[derive(Debug, Clone)]
pub struct ToolCallView {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// A reasoning item of an assistant message: its readable text (cut like the content), or
/// only its label when it has none to show (redacted, encrypted:
/// [`crate::ops::reasoning::shown`]).
#[derive(Debug, Clone)]
pub struct ReasoningView {
    pub label: String,
    pub text: String,
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
    /// The reasoning that came with an assistant reply.
    pub reasoning: Vec<ReasoningView>,
    /// A tool result that is the error of a failed call (`is_error`).
    pub is_error: bool,
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
    /// The change to the task's git workspace: what the workspace is, the stat line, the
    /// patch (redacted, cut to [`MAX_DIFF_CHARS`]; `cut`: characters left out).
    Diff {
        workspace: String,
        stat: String,
        patch: String,
        cut: usize,
    },
    /// The view's file does not exist (the text says so).
    Empty(String),
}

/// The most characters of `changes.patch` the Diff view shows (the rest: `ctxhost diff`).
pub const MAX_DIFF_CHARS: usize = 200_000;

/// The Diff view: workspace.json and changes.patch of the task.
fn diff_view(dir: &TaskDir, redactor: &Redactor) -> ViewBody {
    use crate::workspace::checkout::{MAX_PATCH_BYTES, PATCH_FILE, stat_line};
    use crate::workspace::record::WorkspaceRecord;
    let rec = match WorkspaceRecord::read(dir.handle()) {
        Ok(Some(r)) => r,
        Ok(None) => {
            return ViewBody::Empty(
                "No git workspace: this task's workspace is not a git checkout (no workspace.json)."
                    .into(),
            );
        }
        Err(e) => return ViewBody::Empty(redactor.redact(&format!("{e:#}"))),
    };
    let patch = match dir
        .handle()
        .read_bounded_if_exists(PATCH_FILE, MAX_PATCH_BYTES)
    {
        Ok(p) => p.unwrap_or_default(),
        Err(e) => return ViewBody::Empty(format!("{PATCH_FILE} cannot be read: {e}")),
    };
    let text = redactor.redact(&String::from_utf8_lossy(&patch));
    let (patch_text, cut) = super::cut_chars(&text, MAX_DIFF_CHARS);
    let base = &rec.base_commit[..rec.base_commit.len().min(12)];
    let workspace = if rec.managed {
        format!(
            "{} — worktree of {} at {}, base {base}",
            rec.path,
            rec.repository.as_deref().unwrap_or("?"),
            rec.git_ref.as_deref().unwrap_or("?")
        )
    } else {
        format!("{} — git checkout, base {base}", rec.path)
    };
    ViewBody::Diff {
        workspace: redactor.redact(&workspace),
        stat: stat_line(&patch),
        patch: patch_text,
        cut,
    }
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
        reasoning: Vec::new(),
        is_error: false,
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
            v.reasoning = m
                .reasoning
                .iter()
                .map(|item| {
                    let shown = crate::ops::reasoning::shown(item);
                    ReasoningView {
                        label: redactor.redact(&shown.label),
                        text: cut_chars(
                            &redactor.redact(shown.text.as_deref().unwrap_or("")),
                            max_chars,
                        )
                        .0,
                    }
                })
                .collect();
            v.is_error = m.is_error;
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
        CallStatus::Interrupted => "interrupted (pause or stop)".into(),
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
    if view == View::Diff {
        return Ok(diff_view(dir, redactor));
    }
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
        View::Planning | View::Diff => ViewBody::Empty(String::new()),
    })
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
