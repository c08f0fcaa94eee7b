//! {{name}}: a ctxhost message store (world `message-store-plugin`) keeping the two JSONL
//! files of the task directory, as `builtin:jsonl-store` does:
//!
//! - messages.jsonl, the full history: one line per message or summary
//!   (`{seq, role, content, timestamp, tokens, tool_name?, tool_calls?, tool_call_id?,
//!   summary_id?}`), `seq` from 1 without gaps; only ever appended to;
//! - current.jsonl, the live context: one chat message per line, appended to by
//!   `add-message` and replaced as a whole by `recreate-current-context` (after a compression).
//!
//! Counts and the token estimate are kept in memory between calls (the host creates one
//! instance per task) and recounted from the files by `open` and `recreate-current-context`.
//! Files are read a line at a time, never whole. Every append is one whole line written with
//! one WASI call (`ctxhost_plugin::wasi_output::Appender`, the file kept open between calls),
//! so a crash leaves at most a torn last line, which the host repairs before `open`; the host
//! syncs both files at each step boundary. The contract is in docs/PLUGINS.md of ctxhost.

use std::fs;
use std::sync::Mutex;

use ctxhost_plugin::format::files::{CURRENT, CURRENT_TMP, MESSAGES};
use ctxhost_plugin::format::jsonl::to_line;
use ctxhost_plugin::format::{ChatMessage, HistoryLine};
use ctxhost_plugin::jsonl::{self, LineWriter, io_error};
use ctxhost_plugin::message_store::{AddedMessage, Guest, StoreStats};
use ctxhost_plugin::tokens::estimate_message_tokens;
use ctxhost_plugin::types::{self, PluginError};
use ctxhost_plugin::wasi_output::Appender;

/// What the store knows about its files, and the two files open for appending.
struct State {
    stats: StoreStats,
    messages: Appender,
    current: Appender,
}

static STATE: Mutex<State> = Mutex::new(State {
    stats: StoreStats {
        history_count: 0,
        current_count: 0,
        current_tokens: 0,
    },
    messages: Appender::new(MESSAGES),
    current: Appender::new(CURRENT),
});

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

struct Store;

impl Guest for Store {
    fn open() -> Result<StoreStats, PluginError> {
        // The history: its last seq (seq runs 1..n, so it is also the line count).
        let mut history_count = 0;
        if let Some(mut lines) = jsonl::open_lines(MESSAGES)? {
            while let Some((line, h)) = lines.next_value::<HistoryLine>()? {
                if h.seq != history_count + 1 {
                    return Err(PluginError::InvalidInput(format!(
                        "{MESSAGES} line {line}: seq {} follows {history_count}",
                        h.seq
                    )));
                }
                history_count = h.seq;
            }
        }
        let (current_count, current_tokens) = count_current()?;
        let opened = StoreStats {
            history_count,
            current_count,
            current_tokens,
        };
        let mut s = state();
        s.stats = opened;
        // Appends reopen the files by name (they may have been replaced since).
        s.messages.close();
        s.current.close();
        Ok(opened)
    }

    fn add_message(
        message: types::ChatMessage,
        timestamp: String,
    ) -> Result<AddedMessage, PluginError> {
        let message = ChatMessage::from(message);
        let mut s = state();
        let added = append_history(&mut s, &message, None, timestamp)?;
        s.current.append(json_line(CURRENT, &message)?.as_bytes())?;
        s.stats.current_count += 1;
        s.stats.current_tokens += added.tokens;
        Ok(added)
    }

    /// The text of `content_file` (a reply too large to pass whole) read into `add-message`:
    /// simple, but memory grows with the text; the builtin store copies it through a fixed
    /// buffer instead (`ctxhost_plugin::format::content_file::copy_escaped`).
    fn add_message_file(
        mut message: types::ChatMessage,
        content_file: String,
        timestamp: String,
    ) -> Result<AddedMessage, PluginError> {
        let text = std::fs::read_to_string(&content_file)
            .map_err(|e| PluginError::Io(format!("reading {content_file}: {e}")))?;
        message.content = Some(text);
        Self::add_message(message, timestamp)
    }

    fn record_summary(
        summary: types::ChatMessage,
        summary_id: u64,
        timestamp: String,
    ) -> Result<AddedMessage, PluginError> {
        if summary_id == 0 {
            return Err(PluginError::InvalidInput(
                "summary id 0: ids start at 1".to_string(),
            ));
        }
        append_history(
            &mut state(),
            &ChatMessage::from(summary),
            Some(summary_id),
            timestamp,
        )
    }

    fn current_token_count() -> u64 {
        state().stats.current_tokens
    }

    fn count_messages() -> u64 {
        state().stats.history_count
    }

    fn current_context_file() -> String {
        CURRENT.to_string()
    }

    fn recreate_current_context(source: String) -> Result<StoreStats, PluginError> {
        // Every line of `source` is checked as a chat message and written to a temporary
        // file, which then replaces current.jsonl in one rename: on any error current.jsonl
        // is as it was.
        let mut s = state();
        let written = (|| {
            let mut out = LineWriter::create(CURRENT_TMP)?;
            for message in jsonl::read_messages(&source)? {
                let (_, message) = message?;
                out.json(&message)?;
            }
            out.finish()
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(CURRENT_TMP);
            return Err(e);
        }
        // The open append stream is of the file being replaced: the next append reopens it.
        s.current.close();
        fs::rename(CURRENT_TMP, CURRENT)
            .map_err(|e| io_error(format!("renaming {CURRENT_TMP} to {CURRENT}"), e))?;
        fs::remove_file(&source).map_err(|e| io_error(format!("deleting {source}"), e))?;
        let (current_count, current_tokens) = count_current()?;
        s.stats.current_count = current_count;
        s.stats.current_tokens = current_tokens;
        Ok(s.stats)
    }
}

/// Appends `message` to messages.jsonl as the next seq (a summary when `summary_id` is set).
fn append_history(
    s: &mut State,
    message: &ChatMessage,
    summary_id: Option<u64>,
    timestamp: String,
) -> Result<AddedMessage, PluginError> {
    let tokens = estimate_message_tokens(message);
    let seq = s.stats.history_count + 1;
    let line = HistoryLine {
        seq,
        role: message.role.clone(),
        content: message.content.clone(),
        timestamp,
        tokens,
        tool_name: message.tool_name.clone(),
        tool_calls: message.tool_calls.clone(),
        tool_call_id: message.tool_call_id.clone(),
        is_error: message.is_error,
        reasoning: message.reasoning.clone(),
        summary_id,
    };
    s.messages.append(json_line(MESSAGES, &line)?.as_bytes())?;
    s.stats.history_count = seq;
    Ok(AddedMessage { seq, tokens })
}

/// `value` as one JSON line of `file`, `\n` included (U+2028 / U+2029 escaped, as the host
/// writes them).
fn json_line(file: &str, value: &impl serde::Serialize) -> Result<String, PluginError> {
    let mut line = to_line(value)
        .map_err(|e| PluginError::Internal(format!("serialising a line of {file}: {e}")))?;
    line.push('\n');
    Ok(line)
}

/// The messages of current.jsonl and their estimated tokens (0, 0 when it does not exist).
fn count_current() -> Result<(u64, u64), PluginError> {
    if !fs::exists(CURRENT).map_err(|e| io_error(format!("opening {CURRENT}"), e))? {
        return Ok((0, 0));
    }
    let (mut count, mut tokens) = (0, 0);
    for message in jsonl::read_messages(CURRENT)? {
        let (_, message) = message?;
        count += 1;
        tokens += estimate_message_tokens(&message);
    }
    Ok((count, tokens))
}

// The export exists only in the component (its symbol names do not link natively).
#[cfg(target_arch = "wasm32")]
ctxhost_plugin::export_message_store!(Store);
