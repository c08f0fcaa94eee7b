//! The file pages of the dashboard: a task file in windows (JSON pretty-printed when small),
//! a download, a tool result's full text; every byte redacted ([`super::security::Redactor`]).

use askama::Template;
use axum::extract::{Path, RawQuery, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::answer::render;
use super::files::{self, TaskFile};
use super::pager;
use super::pages::{Named, Params, WebError, blocking, named_task};
use super::task_page;

/// Bytes per window of the file viewer.
pub const WINDOW: usize = 256 * 1024;
/// JSON files up to this size are shown pretty-printed, whole.
pub const PRETTY_MAX: u64 = 1 << 20;
/// The largest file the dashboard hands out as a download (read whole, to redact secrets).
pub const DOWNLOAD_MAX: u64 = 64 << 20;

#[derive(Template)]
#[template(path = "file.html")]
struct FilePage {
    uuid: String,
    name: String,
    text: String,
    position: String,
    prev_href: String,
    next_href: String,
    note: String,
    /// For a file that is not text: what it is ([`files::binary_kind`]); it is not shown.
    binary: String,
    download_href: String,
}

fn file_page(
    state: &AppState,
    uuid: &str,
    file: TaskFile,
    href: &str,
    raw: Option<String>,
) -> Result<Response, WebError> {
    let p = Params::parse(raw)?;
    let dir = state.task_dir(uuid)?.ok_or(WebError::NotFound)?;
    let mut f = dir.open(&file).ok_or(WebError::NotFound)?;
    let name = file.relative_path();
    let len = f.metadata()?.len();
    use std::io::Read;
    let mut head = Vec::with_capacity(files::SNIFF_BYTES);
    (&mut f)
        .take(files::SNIFF_BYTES as u64)
        .read_to_end(&mut head)?;
    let binary = files::binary_kind(&head);
    if p.get("download").is_some() {
        return download(state, &mut f, &name, len);
    }
    use std::io::{Seek, SeekFrom};
    f.seek(SeekFrom::Start(0))?;
    if let Some(kind) = binary {
        // Decoded as text it would be replacement characters: its size, kind and a download.
        return Ok(render(&FilePage {
            uuid: uuid.to_string(),
            name,
            text: String::new(),
            position: format!("{} ({len} bytes)", task_page::bytes(len)),
            prev_href: String::new(),
            next_href: String::new(),
            note: String::new(),
            binary: kind.to_string(),
            download_href: format!("{href}?download=1"),
        }));
    }
    let from = p.number("from")?;
    let is_json = name.ends_with(".json");
    if from.is_none() && is_json && len <= PRETTY_MAX {
        let mut text = String::new();
        f.read_to_string(&mut text)?;
        let pretty = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&v).ok());
        let note = if pretty.is_some() {
            ""
        } else {
            "not valid JSON; shown as it is"
        };
        return Ok(render(&FilePage {
            uuid: uuid.to_string(),
            name,
            text: state.redactor.redact(&pretty.unwrap_or(text)),
            position: format!("{} bytes", len),
            prev_href: String::new(),
            next_href: String::new(),
            note: note.into(),
            binary: String::new(),
            download_href: String::new(),
        }));
    }
    let w = pager::read_window(&mut f, from.unwrap_or(0), WINDOW)?;
    let at = |o: u64| format!("{href}?from={o}");
    Ok(render(&FilePage {
        uuid: uuid.to_string(),
        name,
        text: state.redactor.redact(&w.text),
        position: format!("bytes {}–{} of {}", w.start, w.end, w.file_len),
        prev_href: if w.start > 0 {
            at(w.start.saturating_sub(WINDOW as u64))
        } else {
            String::new()
        },
        next_href: if w.end < w.file_len {
            at(w.end)
        } else {
            String::new()
        },
        note: String::new(),
        binary: String::new(),
        download_href: String::new(),
    }))
}

/// The file `f` (`name`, `len` bytes) as a download (`Content-Disposition: attachment`), its
/// secrets redacted like every text the dashboard shows. Errors: larger than [`DOWNLOAD_MAX`].
fn download(
    state: &AppState,
    f: &mut std::fs::File,
    name: &str,
    len: u64,
) -> Result<Response, WebError> {
    use std::io::{Read, Seek, SeekFrom};
    if len > DOWNLOAD_MAX {
        return Err(WebError::BadRequest(format!(
            "{name} is {len} bytes, more than the dashboard hands out ({DOWNLOAD_MAX} bytes); \
             read it in the task directory"
        )));
    }
    f.seek(SeekFrom::Start(0))?;
    let mut bytes = Vec::with_capacity(len as usize);
    f.take(DOWNLOAD_MAX).read_to_end(&mut bytes)?;
    let bytes = state.redactor.redact_bytes(bytes);
    // The name is a plain one ([`TaskFile`]): no quote or control character to escape.
    let file_name = name.rsplit('/').next().unwrap_or(name);
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{file_name}\""),
            ),
        ],
        bytes,
    )
        .into_response())
}

/// `GET /tasks/{uuid}/files/{name}`: a task file, in windows.
pub async fn file(
    State(state): State<AppState>,
    Path((uuid, name)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Response {
    blocking(move || {
        let file = TaskFile::top_level(&name).ok_or(WebError::NotFound)?;
        let uuid = match named_task(&state, &uuid, &format!("/files/{name}"), raw.as_deref())? {
            Named::Task(uuid) => uuid,
            Named::Elsewhere(redirect) => return Ok(redirect),
        };
        let href = format!("/tasks/{uuid}/files/{name}");
        file_page(&state, &uuid, file, &href, raw)
    })
    .await
}

/// `GET /tasks/{uuid}/tool-results/{seq}`: the full output of a tool call that was cut.
pub async fn tool_result(
    State(state): State<AppState>,
    Path((uuid, seq)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Response {
    blocking(move || {
        let seq: u64 = seq.parse().map_err(|_| WebError::NotFound)?;
        let rest = format!("/tool-results/{seq}");
        let uuid = match named_task(&state, &uuid, &rest, raw.as_deref())? {
            Named::Task(uuid) => uuid,
            Named::Elsewhere(redirect) => return Ok(redirect),
        };
        let href = format!("/tasks/{uuid}{rest}");
        file_page(&state, &uuid, TaskFile::ToolResult(seq), &href, raw)
    })
    .await
}
