//! The raw stream of a reply in flight (`reply.stream`, the server-sent events as the transport
//! writes them) read as text: each line's delta, the streams that broke off and were kept in
//! `failed-streams/`, the partial reply shown while a call streams.

use std::time::SystemTime;

use ctxhost_format::files::{FAILED_STREAMS_DIR, MESSAGES, REPLY_STREAM};

use crate::task_dir::TaskDir;

/// What one line of a streamed reply adds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamDelta {
    /// Reasoning text: `choices[0].delta.reasoning_content` (or `.reasoning`) of an
    /// OpenAI-compatible stream, Anthropic's `delta.thinking`, Ollama's `message.thinking`.
    pub reasoning: Option<String>,
    /// Reply text: `choices[0].delta.content`, Anthropic's `delta.text`, Ollama's
    /// `message.content`.
    pub text: Option<String>,
}

/// What the data of one event of a streamed reply (an OpenAI-compatible or Anthropic
/// server-sent event, or an Ollama JSON line) adds: its reasoning and its text (signatures,
/// redacted and encrypted reasoning add nothing shown).
pub fn event_parts(data: &str) -> StreamDelta {
    let data = data.trim();
    if !data.starts_with('{') {
        return StreamDelta::default();
    }
    let Ok(v) = serde_json::from_str::<serde_json::Value>(data) else {
        return StreamDelta::default();
    };
    let pick = |paths: &[&str]| {
        paths
            .iter()
            .find_map(|p| v.pointer(p).and_then(|t| t.as_str()))
            .filter(|t| !t.is_empty())
            .map(str::to_string)
    };
    StreamDelta {
        reasoning: pick(&[
            "/choices/0/delta/reasoning_content",
            "/choices/0/delta/reasoning",
            "/delta/thinking",
            "/message/thinking",
        ]),
        text: pick(&[
            "/choices/0/delta/content",
            "/delta/text",
            "/message/content",
        ]),
    }
}

/// Reads reply.stream a line at a time, as the request formats do: server-sent events by
/// the one event-stream parser ([`ctxhost_format::event_stream`]: an event's `data:` lines
/// joined, dispatched at its blank line), Ollama's JSON lines (a line starting with `{` outside
/// an event) each on its own.
#[derive(Debug, Default)]
pub struct StreamLines {
    events: ctxhost_format::event_stream::EventStream,
}

impl StreamLines {
    /// What one whole line of the stream (without its `\n`) adds ([`event_parts`]).
    pub fn line(&mut self, line: &str) -> StreamDelta {
        if !self.events.inside_event() && line.trim_start().starts_with('{') {
            return event_parts(line);
        }
        match self.events.line(line) {
            Some(event) => event_parts(&event.data),
            None => StreamDelta::default(),
        }
    }
}

/// The reply text of `lines` of a streamed reply ([`StreamLines`]), joined.
pub fn stream_text(lines: &[&str]) -> String {
    let mut reader = StreamLines::default();
    lines.iter().filter_map(|l| reader.line(l).text).collect()
}

/// Whether `reply.stream` of `dir` holds a reply still in flight: it exists and was written
/// after messages.jsonl (once the reply is folded, its message is appended to messages.jsonl,
/// which is then the newer; the stream stays until the next call, for debugging).
pub fn reply_in_flight(dir: &TaskDir) -> bool {
    let modified = |name: &str| {
        dir.open_read_if_exists(name)
            .ok()
            .flatten()
            .and_then(|f| f.metadata().ok())
            .and_then(|m| m.modified().ok())
    };
    match (modified(REPLY_STREAM), modified(MESSAGES)) {
        (Some(stream), Some(messages)) => stream > messages,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// A stream of the task that broke off (or came whole but could not be read), kept as
/// `failed-streams/{n}.stream` ([`crate::llm::keep_failed_stream`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokenStream {
    /// Its number, from 1 (the order the task's streams broke in).
    pub n: u64,
    /// Its size, bytes.
    pub bytes: u64,
    /// When it was last written (when it broke off), if the file system says.
    pub modified: Option<SystemTime>,
}

impl BrokenStream {
    /// Its path relative to the task directory: `failed-streams/{n}.stream`.
    pub fn kept(&self) -> String {
        format!("{FAILED_STREAMS_DIR}/{}.stream", self.n)
    }
}

/// The broken streams kept in `dir`'s `failed-streams/`, by number (none when the folder is
/// missing; other names are left out). Errors: the folder cannot be read.
pub fn broken_streams(dir: &TaskDir) -> std::io::Result<Vec<BrokenStream>> {
    let mut out: Vec<BrokenStream> = dir
        .entries(Some(FAILED_STREAMS_DIR))?
        .into_iter()
        .filter(|(_, m)| m.is_file())
        .filter_map(|(name, m)| {
            Some(BrokenStream {
                n: name.strip_suffix(".stream")?.parse().ok()?,
                bytes: m.len(),
                modified: m.modified().ok().map(|t| t.into_std()),
            })
        })
        .collect();
    out.sort_by_key(|b| b.n);
    Ok(out)
}

/// The reply being streamed in `dir`, as far as it arrived (see [`partial_reply`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartialReply {
    /// The reply text so far, its last `max_chars` characters.
    pub text: String,
    /// Characters of the text before `text` (not kept).
    pub text_cut: usize,
    /// The reasoning text so far, its last `max_chars` characters.
    pub reasoning: String,
    /// Characters of the reasoning before `reasoning` (not kept).
    pub reasoning_cut: usize,
    /// Size of reply.stream, bytes.
    pub bytes: u64,
    /// The stream this one restarts: the last that broke off after the last recorded message
    /// (so during this call), if any.
    pub restarts: Option<BrokenStream>,
}

/// The reply in flight in `dir` ([`reply_in_flight`]), read line by line from reply.stream
/// (memory: one line and `max_chars` characters of each part); `None` when no reply is in
/// flight. Errors: reply.stream cannot be opened or read (a link in its place, an I/O error).
pub fn partial_reply(dir: &TaskDir, max_chars: usize) -> std::io::Result<Option<PartialReply>> {
    use std::io::BufRead;
    if !reply_in_flight(dir) {
        return Ok(None);
    }
    let Some(f) = dir.open_read_if_exists(REPLY_STREAM)? else {
        return Ok(None);
    };
    let messages_written = dir
        .metadata(MESSAGES)?
        .and_then(|m| m.modified().ok())
        .map_or(SystemTime::UNIX_EPOCH, |t| t.into_std());
    let mut out = PartialReply {
        bytes: f.metadata()?.len(),
        restarts: broken_streams(dir)?
            .into_iter()
            .rfind(|b| b.modified.is_some_and(|t| t >= messages_written)),
        ..PartialReply::default()
    };
    let keep = |into: &mut String, cut: &mut usize, add: &str| {
        into.push_str(add);
        let n = into.chars().count();
        if n > max_chars * 2 {
            let drop = n - max_chars;
            let at = into.char_indices().nth(drop).map_or(into.len(), |(i, _)| i);
            into.drain(..at);
            *cut += drop;
        }
    };
    let mut reader = std::io::BufReader::new(f);
    let mut line = Vec::new();
    let mut lines = StreamLines::default();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        // A line still being written (no line end yet) is read at the next look.
        if !line.ends_with(b"\n") {
            break;
        }
        let l = String::from_utf8_lossy(&line[..line.len() - 1]);
        let d = lines.line(&l);
        if let Some(r) = d.reasoning {
            keep(&mut out.reasoning, &mut out.reasoning_cut, &r);
        }
        if let Some(t) = d.text {
            keep(&mut out.text, &mut out.text_cut, &t);
        }
    }
    for (text, cut) in [
        (&mut out.text, &mut out.text_cut),
        (&mut out.reasoning, &mut out.reasoning_cut),
    ] {
        let n = text.chars().count();
        if n > max_chars {
            let drop = n - max_chars;
            let at = text.char_indices().nth(drop).map_or(text.len(), |(i, _)| i);
            text.drain(..at);
            *cut += drop;
        }
    }
    Ok(Some(out))
}
