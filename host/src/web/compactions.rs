//! The compaction record page (`GET /tasks/{uuid}/compactions`): each compression of the task
//! that made a summary — the messages it summarised, what it kept verbatim, the tool results it
//! elided, the paths mentioned — with the summary next to the messages it replaced (the first
//! [`MESSAGES_SHOWN`] of them, each cut to [`MESSAGE_CHARS`] characters; the full ones are a
//! link away). Read through [`crate::ops::compactions`]; every text goes through the
//! [`super::security::Redactor`] and the template escapes it.

use askama::Template;
use axum::extract::{Path, State};
use axum::response::Response;

use super::AppState;
use super::answer::render;
use super::pages::{Named, WebError, blocking, named_task};
use crate::ops::compactions::{self, Compaction};

/// Summarised messages shown next to a summary.
pub const MESSAGES_SHOWN: usize = 40;
/// Characters of each summarised message shown.
pub const MESSAGE_CHARS: usize = 600;

/// One summarised message, as shown.
pub struct ShownMessage {
    pub seq: u64,
    pub role: String,
    pub tool: String,
    pub content: String,
}

/// One compression, as shown.
pub struct CompactionView {
    pub id: u64,
    pub range: String,
    pub range_href: String,
    pub new_range: String,
    pub kept: String,
    pub when: String,
    pub tokens: String,
    pub summary: String,
    pub tool_results: Vec<String>,
    pub paths: Vec<String>,
    pub messages: Vec<ShownMessage>,
    /// "first N of M" when not all summarised messages are shown.
    pub more: String,
}

#[derive(Template)]
#[template(path = "compactions.html")]
struct CompactionsPage {
    uuid: String,
    items: Vec<CompactionView>,
    /// Lines of summaries.jsonl that do not read, each naming file and line (redacted).
    unreadable: Vec<String>,
}

fn view(
    state: &AppState,
    uuid: &str,
    dir: &crate::task_dir::TaskDir,
    c: &Compaction,
) -> Result<CompactionView, WebError> {
    let r = &state.redactor;
    let s = &c.summary;
    let from = c.new_start_seq();
    let messages = compactions::messages(dir, from, s.end_seq, MESSAGES_SHOWN, MESSAGE_CHARS)?;
    let total = s.end_seq.saturating_sub(from) + 1;
    Ok(CompactionView {
        id: s.id,
        range: format!("#{}–#{}", s.start_seq, s.end_seq),
        range_href: format!("/tasks/{uuid}?view=messages&seq={from}"),
        new_range: if from > s.start_seq {
            format!("#{from}–#{} (before them, the previous summary)", s.end_seq)
        } else {
            String::new()
        },
        kept: match c.kept {
            Some((a, b)) if a <= b => format!("#{a}–#{b}"),
            Some(_) => "none".into(),
            None => "not recorded".into(),
        },
        when: s.timestamp.clone(),
        tokens: format!("{} → {} tokens", s.original_tokens, s.summary_tokens),
        summary: r.redact(&s.summary),
        tool_results: c
            .replaced
            .iter()
            .flat_map(|x| &x.elided_tool_results)
            .map(|t| {
                r.redact(&format!(
                    "#{} {} — {} bytes{}",
                    t.seq,
                    t.tool.as_deref().unwrap_or("?"),
                    t.bytes,
                    t.full_text
                        .as_deref()
                        .map(|f| format!(" (full text: {f})"))
                        .unwrap_or_default()
                ))
            })
            .collect(),
        paths: c
            .replaced
            .iter()
            .flat_map(|x| &x.paths)
            .map(|p| r.redact(p))
            .collect(),
        more: if (messages.len() as u64) < total {
            format!("the first {} of {total} messages", messages.len())
        } else {
            String::new()
        },
        messages: messages
            .into_iter()
            .map(|m| ShownMessage {
                seq: m.seq,
                role: m.role.clone(),
                tool: m
                    .tool_name
                    .clone()
                    .or_else(|| {
                        m.tool_calls.as_ref().map(|c| {
                            c.iter()
                                .map(|c| c.function.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        })
                    })
                    .unwrap_or_default(),
                content: r.redact(m.content.as_deref().unwrap_or("")),
            })
            .collect(),
    })
}

/// `GET /tasks/{uuid}/compactions`.
pub async fn page(State(state): State<AppState>, Path(uuid): Path<String>) -> Response {
    blocking(move || {
        let uuid = match named_task(&state, &uuid, "/compactions", None)? {
            Named::Task(uuid) => uuid,
            Named::Elsewhere(redirect) => return Ok(redirect),
        };
        let dir = state.task_dir(&uuid)?.ok_or(WebError::NotFound)?;
        let record = compactions::compactions(dir.handle())?;
        let items = record
            .compactions
            .iter()
            .map(|c| view(&state, &uuid, dir.handle(), c))
            .collect::<Result<Vec<_>, _>>()?;
        let unreadable = record
            .unreadable
            .iter()
            .map(|b| state.redactor.redact(b))
            .collect();
        Ok(render(&CompactionsPage {
            uuid,
            items,
            unreadable,
        }))
    })
    .await
}
