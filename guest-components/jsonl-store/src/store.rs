//! The store's state and operations on `messages.jsonl` / `current.jsonl` (paths relative to
//! the preopened task directory).
//!
//! Both files stay open for appending between calls (`ctxhost_plugin::wasi_output`: one WASI call per
//! line of up to 4 KiB instead of open, write, close through std), which relies on the store
//! being their only writer while it is open (DESIGN §5); they are reopened after `open` and
//! after `recreate-current-context` replaces current.jsonl.
//!
//! Checkpoint ([`STORE_CHECKPOINT`], `ctxhost_plugin::format::checkpoint`): the counts up to a byte
//! offset of each file, written at the end of `open`, after `recreate-current-context` and every
//! [`STORE_CHECKPOINT_EVERY`] bytes appended (messages and summaries alike). `open` checks it against the files' tails and then
//! streams only the bytes after it; a missing, stale or unreadable checkpoint means a full read.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Seek, SeekFrom, Write};
use std::sync::Mutex;

use ctxhost_plugin::format::checkpoint::{
    CHECKPOINT_VERSION, FileMark, STORE_CHECKPOINT_EVERY, StoreCheckpoint,
};
use ctxhost_plugin::format::content_file::{
    ContentError, TokenCount, copy_escaped, for_each_text_block,
};
use ctxhost_plugin::format::files::STORE_CHECKPOINT;
use ctxhost_plugin::format::jsonl::for_each_line;
use ctxhost_plugin::format::lines::encode_message_lines;
use ctxhost_plugin::format::{ChatMessage, HistoryLine, estimate_message_tokens};

use ctxhost_plugin::jsonl::io_error;
use ctxhost_plugin::jsonl::open_if_exists;
use ctxhost_plugin::log::{Level, log};
use ctxhost_plugin::message_store::{AddedMessage, StoreStats};
use ctxhost_plugin::types::PluginError;
use ctxhost_plugin::wasi_output::Appender;

/// The full history, append-only.
pub const MESSAGES: &str = ctxhost_plugin::format::files::MESSAGES;
/// The live context.
pub const CURRENT: &str = ctxhost_plugin::format::files::CURRENT;
/// Where `recreate-current-context` builds the new context before renaming it over [`CURRENT`].
pub const CURRENT_TMP: &str = ctxhost_plugin::format::files::CURRENT_TMP;

/// Roles a chat message may have.
const ROLES: [&str; 4] = ["system", "user", "assistant", "tool"];

/// Counts kept between calls (lines and estimated tokens).
pub struct Store {
    opened: bool,
    /// Lines of messages.jsonl = last seq.
    history_count: u64,
    /// Chat message lines of current.jsonl.
    current_count: u64,
    /// Estimated tokens of current.jsonl.
    current_tokens: u64,
    /// messages.jsonl, open for appending (opened by the first append after `open`).
    history_file: Appender,
    /// current.jsonl, open for appending (reopened after it is replaced).
    current_file: Appender,
    /// The lines being appended (buffers reused between calls).
    history_line: Vec<u8>,
    current_line: Vec<u8>,
    /// Bytes appended (both files) since the last checkpoint.
    since_checkpoint: u64,
}

static STORE: Mutex<Store> = Mutex::new(Store {
    opened: false,
    history_count: 0,
    current_count: 0,
    current_tokens: 0,
    history_file: Appender::new(MESSAGES),
    current_file: Appender::new(CURRENT),
    history_line: Vec::new(),
    current_line: Vec::new(),
    since_checkpoint: 0,
});

/// Runs `f` on the component's store.
pub fn with<T>(f: impl FnOnce(&mut Store) -> T) -> T {
    // A poisoned lock can only follow a panic, which aborts the instance (panic = "abort").
    let mut store = STORE.lock().unwrap_or_else(|p| p.into_inner());
    f(&mut store)
}

impl Store {
    /// Current counts (zeros before `open`).
    pub fn stats(&self) -> StoreStats {
        StoreStats {
            history_count: self.history_count,
            current_count: self.current_count,
            current_tokens: self.current_tokens,
        }
    }

    /// Counts both files: from the checkpoint on when it still holds (only the bytes appended
    /// after it are read), else streamed whole: the last seq of messages.jsonl (checking seq
    /// runs 1..n) and the lines and tokens of current.jsonl. Missing files count as empty;
    /// neither is created. Writes a new checkpoint when anything was read.
    pub fn open(&mut self) -> Result<StoreStats, PluginError> {
        let start = read_checkpoint().unwrap_or_default();
        let (history_count, history_read) = count_history(&start)?;
        let (current_count, current_tokens, current_read) = count_current(&start)?;
        self.history_file.close();
        self.current_file.close();
        self.opened = true;
        self.history_count = history_count;
        self.current_count = current_count;
        self.current_tokens = current_tokens;
        self.since_checkpoint = 0;
        if history_read || current_read {
            // Something was read: the next open starts from here.
            self.checkpoint();
        }
        Ok(self.stats())
    }

    /// Appends `message` to messages.jsonl (next seq) and to current.jsonl.
    pub fn add_message(
        &mut self,
        message: ChatMessage,
        timestamp: &str,
    ) -> Result<AddedMessage, PluginError> {
        self.require_open("add-message")?;
        check_role(&message.role, "add-message")?;
        let tokens = estimate_message_tokens(&message);
        let added = self.append_history(&message, timestamp, tokens, None)?;
        self.current_file.append(&self.current_line)?;
        self.current_count += 1;
        self.current_tokens += tokens;
        self.appended((self.history_line.len() + self.current_line.len()) as u64);
        Ok(added)
    }

    /// Appends `message` with the text of `content_file` as its content (WIT
    /// `add-message-file`): the lines `add-message` would write, the text copied into each
    /// through a fixed buffer, JSON-escaped as it goes (`ctxhost_format::content_file`), so
    /// memory does not grow with it. The file is read three times (checked and counted first,
    /// so a file that is not UTF-8 writes nothing; then once per line) and left in place.
    pub fn add_message_file(
        &mut self,
        mut message: ChatMessage,
        content_file: &str,
        timestamp: &str,
    ) -> Result<AddedMessage, PluginError> {
        self.require_open("add-message-file")?;
        check_role(&message.role, "add-message-file")?;
        let open_text =
            || File::open(content_file).map_err(|e| io_error(format!("opening {content_file}"), e));
        let content_error = |e: ContentError| match e {
            ContentError::Io(e) => io_error(format!("reading {content_file}"), e),
            e @ ContentError::NotUtf8 { .. } => {
                PluginError::InvalidInput(format!("add-message-file: {content_file}: {e}"))
            }
        };
        let mut count = TokenCount::default();
        let text = for_each_text_block(BufReader::new(open_text()?), |part| {
            count.add(part);
            Ok(())
        })
        .map_err(content_error)?;
        // The lines with an empty content, cut where the text goes.
        message.content = Some(String::new());
        let tokens = estimate_message_tokens(&message) + count.tokens();
        let seq = self.history_count + 1;
        encode_message_lines(
            &message,
            seq,
            timestamp,
            tokens,
            None,
            &mut self.history_line,
            &mut self.current_line,
        );
        let (Some(h), Some(c)) = (
            content_at(&self.history_line),
            content_at(&self.current_line),
        ) else {
            return Err(PluginError::Internal(
                "add-message-file: the encoded lines have no content".to_string(),
            ));
        };
        for (file, line, at) in [
            (&mut self.history_file, &self.history_line, h),
            (&mut self.current_file, &self.current_line, c),
        ] {
            file.append(&line[..at])?;
            let mut out = AppendWriter(file);
            copy_escaped(BufReader::new(open_text()?), &mut out).map_err(|e| match e {
                ContentError::Io(e) => {
                    io_error(format!("copying {content_file} into the lines"), e)
                }
                e => content_error(e),
            })?;
            file.append(&line[at..])?;
        }
        self.history_count = seq;
        self.current_count += 1;
        self.current_tokens += tokens;
        // The escaped text is at least as long as the text: enough for the checkpoint's rule.
        self.appended((self.history_line.len() + self.current_line.len()) as u64 + 2 * text.bytes);
        Ok(AddedMessage { seq, tokens })
    }

    /// Appends a summary to messages.jsonl only, with its `summary_id` (a JSON number from 1).
    pub fn record_summary(
        &mut self,
        summary: ChatMessage,
        summary_id: u64,
        timestamp: &str,
    ) -> Result<AddedMessage, PluginError> {
        self.require_open("record-summary")?;
        check_role(&summary.role, "record-summary")?;
        if summary_id == 0 {
            return Err(PluginError::InvalidInput(
                "record-summary: summary-id 0 (summary ids count from 1)".to_string(),
            ));
        }
        let tokens = estimate_message_tokens(&summary);
        let added = self.append_history(&summary, timestamp, tokens, Some(summary_id))?;
        self.appended(self.history_line.len() as u64);
        Ok(added)
    }

    /// Replaces current.jsonl with the chat message lines of `source` (streamed through
    /// [`CURRENT_TMP`], synced, renamed), deletes `source` and recounts. On error current.jsonl
    /// is unchanged and the temporary file removed.
    pub fn recreate_current_context(&mut self, source: &str) -> Result<StoreStats, PluginError> {
        self.require_open("recreate-current-context")?;
        if source.is_empty() || source == CURRENT || source == CURRENT_TMP || source == MESSAGES {
            return Err(PluginError::InvalidInput(format!(
                "recreate-current-context: source `{source}` cannot be used (it must be another file of the task directory)"
            )));
        }
        let reader = BufReader::new(
            File::open(source).map_err(|e| io_error(format!("opening {source}"), e))?,
        );
        // Whatever happens below, current.jsonl is reopened by name on the next append.
        self.current_file.close();
        // The checkpoint's counts of current.jsonl end with it: gone before it is replaced.
        remove_checkpoint();
        let (count, tokens) = match write_context(reader, source) {
            Ok(counts) => counts,
            Err(e) => {
                let _ = fs::remove_file(CURRENT_TMP);
                return Err(e);
            }
        };
        if let Err(e) = fs::rename(CURRENT_TMP, CURRENT) {
            let _ = fs::remove_file(CURRENT_TMP);
            return Err(io_error(format!("renaming {CURRENT_TMP} to {CURRENT}"), e));
        }
        self.current_count = count;
        self.current_tokens = tokens;
        self.checkpoint();
        if let Err(e) = fs::remove_file(source) {
            // current.jsonl is already replaced: report, don't fail.
            log(
                Level::Warn,
                &format!("recreate-current-context: could not delete {source}: {e}"),
            );
        }
        Ok(self.stats())
    }

    /// Counts `bytes` appended to the files (by `add-message` or `record-summary`) and writes
    /// the checkpoint once [`STORE_CHECKPOINT_EVERY`] bytes were appended since the last one:
    /// the same rule for every append, so a task that records many summaries refreshes it too.
    fn appended(&mut self, bytes: u64) {
        self.since_checkpoint += bytes;
        if self.since_checkpoint >= STORE_CHECKPOINT_EVERY {
            self.checkpoint();
        }
    }

    /// Writes the checkpoint of the counts as they are now (both files end with whole lines:
    /// the store wrote them). Failing to write it only costs the next `open` a full read, so a
    /// failure is logged, not returned.
    fn checkpoint(&mut self) {
        self.since_checkpoint = 0;
        let result = (|| -> Result<(), String> {
            let messages = mark_of(MESSAGES)?;
            let current = mark_of(CURRENT)?;
            let (Some(messages), Some(current)) = (messages, current) else {
                // A last line that is not whole (not written by this store): no checkpoint.
                remove_checkpoint();
                return Ok(());
            };
            let cp = StoreCheckpoint {
                version: CHECKPOINT_VERSION,
                messages,
                history_count: self.history_count,
                current,
                current_count: self.current_count,
                current_tokens: self.current_tokens,
            };
            let text = serde_json::to_vec(&cp).map_err(|e| e.to_string())?;
            let tmp = format!("{STORE_CHECKPOINT}.tmp");
            fs::write(&tmp, text)
                .and_then(|_| fs::rename(&tmp, STORE_CHECKPOINT))
                .map_err(|e| format!("writing {STORE_CHECKPOINT}: {e}"))
        })();
        if let Err(e) = result {
            log(Level::Warn, &format!("checkpoint not written: {e}"));
        }
    }

    fn require_open(&self, function: &str) -> Result<(), PluginError> {
        if self.opened {
            Ok(())
        } else {
            Err(PluginError::Internal(format!(
                "{function} called before open"
            )))
        }
    }

    /// Appends `message`'s messages.jsonl line (next seq) and leaves its current.jsonl line
    /// in `self.current_line` (both encoded at once: `encode_message_lines`).
    fn append_history(
        &mut self,
        message: &ChatMessage,
        timestamp: &str,
        tokens: u64,
        summary_id: Option<u64>,
    ) -> Result<AddedMessage, PluginError> {
        let seq = self.history_count + 1;
        encode_message_lines(
            message,
            seq,
            timestamp,
            tokens,
            summary_id,
            &mut self.history_line,
            &mut self.current_line,
        );
        self.history_file.append(&self.history_line)?;
        self.history_count = seq;
        Ok(AddedMessage { seq, tokens })
    }
}

/// Where the text goes in a line encoded with an empty content: just after the opening quote
/// of `"content":""` (the first such bytes: inside a JSON string a quote is escaped, so
/// none can match there).
fn content_at(line: &[u8]) -> Option<usize> {
    const KEY: &[u8] = b",\"content\":\"\"";
    line.windows(KEY.len())
        .position(|w| w == KEY)
        .map(|p| p + KEY.len() - 1)
}

/// An [`Appender`] as an `io::Write`, for the escaped text of `add-message-file`.
struct AppendWriter<'a>(&'a mut Appender);

impl Write for AppendWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .append(buf)
            .map_err(|e| io::Error::other(format!("{e:?}")))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn check_role(role: &str, function: &str) -> Result<(), PluginError> {
    if ROLES.contains(&role) {
        Ok(())
    } else {
        Err(PluginError::InvalidInput(format!(
            "{function}: role `{role}` is not one of system, user, assistant, tool"
        )))
    }
}

/// Streams the chat message lines of `reader` (the file `file`), checking each role and
/// calling `each` per message; returns (messages, estimated tokens).
fn count_context(
    reader: impl io::BufRead,
    file: &str,
    mut each: impl FnMut(&ChatMessage) -> Result<(), PluginError>,
) -> Result<(u64, u64), PluginError> {
    let mut tokens = 0u64;
    let count = for_each_line(reader, file, |line, m: ChatMessage| {
        if !ROLES.contains(&m.role.as_str()) {
            return Err(PluginError::InvalidInput(format!(
                "{file} line {line}: role `{}` is not one of system, user, assistant, tool",
                m.role
            )));
        }
        tokens += estimate_message_tokens(&m);
        each(&m)
    })?;
    Ok((count, tokens))
}

/// Writes the chat messages of `source` to [`CURRENT_TMP`] (one normalised line each) and
/// syncs it; returns (messages, estimated tokens).
fn write_context(reader: impl io::BufRead, source: &str) -> Result<(u64, u64), PluginError> {
    let tmp =
        File::create(CURRENT_TMP).map_err(|e| io_error(format!("creating {CURRENT_TMP}"), e))?;
    let mut out = BufWriter::new(tmp);
    let write_err = |e| io_error(format!("writing {CURRENT_TMP}"), e);
    let counts = count_context(reader, source, |m| {
        ctxhost_plugin::format::jsonl::write_value(&mut out, m).map_err(|e| write_err(e.into()))?;
        out.write_all(b"\n").map_err(write_err)
    })?;
    let file = out.into_inner().map_err(|e| write_err(e.into_error()))?;
    file.sync_all()
        .map_err(|e| io_error(format!("syncing {CURRENT_TMP}"), e))?;
    Ok(counts)
}

/// The checkpoint file, if present, readable and of this version.
fn read_checkpoint() -> Option<StoreCheckpoint> {
    let text = fs::read(STORE_CHECKPOINT).ok()?;
    let cp: StoreCheckpoint = serde_json::from_slice(&text).ok()?;
    (cp.version == CHECKPOINT_VERSION).then_some(cp)
}

fn remove_checkpoint() {
    match fs::remove_file(STORE_CHECKPOINT) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => log(
            Level::Warn,
            &format!("could not delete {STORE_CHECKPOINT}: {e}"),
        ),
        _ => {}
    }
}

/// The mark of `file` as it is now (`None` when its last line is not whole; an empty mark
/// when it is missing).
fn mark_of(file: &str) -> Result<Option<FileMark>, String> {
    match File::open(file) {
        Ok(mut f) => {
            let len = f
                .seek(SeekFrom::End(0))
                .map_err(|e| format!("{file}: {e}"))?;
            FileMark::of(f, len, file).map_err(|e| e.to_string())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Some(FileMark::default())),
        Err(e) => Err(format!("opening {file}: {e}")),
    }
}

/// A file opened for counting: positioned after the mark when it still holds.
struct Opened {
    reader: BufReader<File>,
    /// Where reading starts: the mark's offset, or 0 when it does not hold.
    from: u64,
    /// Whether the mark held (the counts up to `from` are the checkpoint's).
    resumed: bool,
    /// Whether there are bytes after `from`.
    more: bool,
}

/// `file` opened after `mark` when the mark still holds, else at its start; `None` when the
/// file does not exist.
fn open_after(file: &str, mark: &FileMark) -> Result<Option<Opened>, PluginError> {
    let Some(reader) = open_if_exists(file)? else {
        return Ok(None);
    };
    let mut f = reader.into_inner();
    let len = f
        .seek(SeekFrom::End(0))
        .map_err(|e| io_error(format!("reading {file}"), e))?;
    let resumed = mark.bytes > 0 && mark.holds(&mut f, len, file).unwrap_or(false);
    let from = if resumed { mark.bytes } else { 0 };
    f.seek(SeekFrom::Start(from))
        .map_err(|e| io_error(format!("reading {file}"), e))?;
    Ok(Some(Opened {
        reader: BufReader::new(f),
        from,
        resumed,
        more: len > from,
    }))
}

/// The name errors give a file read from byte `from` on (line numbers count from there).
fn shown(file: &str, from: u64) -> String {
    if from > 0 {
        format!("{file} (after byte {from})")
    } else {
        file.to_string()
    }
}

/// The last seq of messages.jsonl (checking seq runs 1..n), counted from the checkpoint when
/// it holds; and whether any bytes were read.
fn count_history(cp: &StoreCheckpoint) -> Result<(u64, bool), PluginError> {
    let Some(o) = open_after(MESSAGES, &cp.messages)? else {
        return Ok((0, false));
    };
    let mut count = if o.resumed { cp.history_count } else { 0 };
    let name = shown(MESSAGES, o.from);
    for_each_line(o.reader, &name, |line, h: HistoryLine| {
        if h.seq != count + 1 {
            return Err(PluginError::InvalidInput(format!(
                "{name} line {line}: seq {} where {} was expected (seq runs from 1 without gaps)",
                h.seq,
                count + 1
            )));
        }
        count = h.seq;
        Ok(())
    })?;
    Ok((count, o.more || !o.resumed))
}

/// The chat message lines and tokens of current.jsonl, counted from the checkpoint when it
/// holds; and whether any bytes were read.
fn count_current(cp: &StoreCheckpoint) -> Result<(u64, u64, bool), PluginError> {
    let Some(o) = open_after(CURRENT, &cp.current)? else {
        return Ok((0, 0, false));
    };
    let (count, tokens) = count_context(o.reader, &shown(CURRENT, o.from), |_| Ok(()))?;
    Ok(if o.resumed {
        (cp.current_count + count, cp.current_tokens + tokens, o.more)
    } else {
        (count, tokens, true)
    })
}
