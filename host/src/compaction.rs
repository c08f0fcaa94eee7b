//! One compaction step: ask the compressor, check what it returned, install it atomically.
//!
//! Lifecycle (DESIGN.md §5–§6), run before every LLM call ([`compact_if_needed`]), and when the
//! provider answered that the context is too long ([`compact`] with `force`):
//! 1. `should-compress(current tokens)`; if not, nothing happens (unless forced).
//! 2. `compress` writes a new context to a file of its own (never current.jsonl).
//! 3. The host checks that file whatever the component is: a plain relative path inside the
//!    task directory, not through a link ([`untrusted::component_path`]), every line a chat message, the same system prompt first, tool calls and results
//!    paired ([`crate::invariants`]), the most recent messages it kept copied verbatim
//!    ([`crate::invariants::kept_tail`]), fewer tokens than before, and a non-empty summary text.
//!    A file of the task's record ([`ctxhost_format::files::is_record`]: messages.jsonl,
//!    tools.jsonl, summaries.jsonl, planning/, ...) is refused as current.jsonl is.
//!    Anything else is rejected: the file deleted if the compressor created it (never one that
//!    was there before), a summary line the compressor appended to summaries.jsonl taken back,
//!    and current.jsonl left as it was.
//! 4. The summary (if any) is appended to messages.jsonl, then the message store installs the
//!    new context (temp file + rename) and recounts its tokens exactly.
//! 5. If the context is still over the threshold, the step reports it
//!    ([`CompactionError::StillOverThreshold`], the smaller context installed): what is kept —
//!    at least the newest message's tool-call group — is larger than the threshold. The agent
//!    loop goes on while the context fits the window and fails otherwise.

use std::collections::HashSet;
use std::io::BufReader;

use ctxhost_format::ChatMessage;
use ctxhost_format::files::{CONTEXT_CHECKPOINT, SUMMARIES, is_record};
use ctxhost_format::jsonl::{JsonlError, LineReader};

use crate::invariants::kept_tail::{KeptTailError, check_kept_tail};
use crate::invariants::{ContextFileError, check_context_file};
use crate::runtime::{CompressConfig, Compressor, MessageStore, RuntimeError};
use crate::task_dir::TaskDir;
use crate::untrusted;

/// What one compaction step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompactionOutcome {
    /// The context is under the threshold.
    NotNeeded,
    /// current.jsonl was replaced.
    Compressed {
        /// Tokens of current.jsonl before and after (estimates).
        before_tokens: u64,
        /// Tokens of current.jsonl after (estimate).
        after_tokens: u64,
        /// The summary's id (an integer from 1), when the strategy made one.
        summary_id: Option<u64>,
    },
}

/// Why a compaction step failed. In every case current.jsonl holds a valid context: the old
/// one, or (for [`CompactionError::StillOverThreshold`]) the smaller new one.
#[derive(Debug, thiserror::Error)]
pub enum CompactionError {
    /// The compressor (or the message store) failed; the context was left as it was.
    #[error("compression failed, the context was left as it was: {0}")]
    Plugin(#[from] RuntimeError),
    /// The compressor named a file outside the task directory, through a link, or
    /// current.jsonl itself.
    #[error(
        "compressor {component} returned context file {reason}: it must be a new file inside the task directory; rejected, the context was left as it was"
    )]
    BadPath {
        /// The component: `builtin:NAME` or its path.
        component: String,
        /// What is wrong with the path it returned (the path bounded and escaped).
        reason: String,
    },
    /// The new context breaks an invariant.
    #[error(
        "compressor {component} returned a context that breaks an invariant ({source}); rejected, the context was left as it was"
    )]
    Invalid {
        /// The component: `builtin:NAME` or its path.
        component: String,
        /// The I/O error.
        source: ContextFileError,
    },
    /// The new context does not start with the same system prompt.
    #[error(
        "compressor {component} changed or dropped the system prompt; rejected, the context was left as it was"
    )]
    SystemPromptChanged {
        /// The component: `builtin:NAME` or its path.
        component: String,
    },
    /// The new context changed a message it kept from the most recent ones.
    #[error(
        "compressor {component} rewrote a kept message ({source}); rejected, the context was left as it was"
    )]
    KeptTailRewritten {
        /// The component: `builtin:NAME` or its path.
        component: String,
        /// Which message and what changed.
        source: KeptTailError,
    },
    /// The new context is not smaller.
    #[error(
        "compressor {component} returned {after} tokens for a context of {before}: a compression must make the context smaller; rejected, the context was left as it was"
    )]
    NotSmaller {
        /// The component: `builtin:NAME` or its path.
        component: String,
        /// Tokens of the context before.
        before: u64,
        /// Tokens of the context returned.
        after: u64,
    },
    /// The summary text is empty.
    #[error(
        "compressor {component} returned an empty summary; rejected, the context was left as it was"
    )]
    EmptySummary {
        /// The component: `builtin:NAME` or its path.
        component: String,
    },
    /// Still over the threshold after compressing (the smaller context is installed).
    #[error(
        "the context is still {tokens} tokens after compression, over the threshold of {limit} ({threshold} × context_length {context_length}): what a compression keeps (the newest message's tool-call group at least) is larger than that"
    )]
    StillOverThreshold {
        /// Tokens of the context before compressing.
        before_tokens: u64,
        /// Tokens of the context after compressing.
        tokens: u64,
        /// The threshold in tokens.
        limit: u64,
        /// `context_storage.compression_threshold`.
        threshold: f64,
        /// `llm.context_length`, tokens.
        context_length: u64,
    },
    /// A line of current.jsonl or of the compressor's context file could not be read: longer
    /// than [`MAX_FIRST_LINE_BYTES`] or not UTF-8 (the error names the file and line).
    #[error("{0}; rejected, the context was left as it was")]
    BadLine(JsonlError),
    /// Reading current.jsonl's first line, or what summaries.jsonl is, failed.
    #[error("reading {file}: {source}")]
    Io {
        /// current.jsonl or summaries.jsonl, as shown to users.
        file: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl CompactionError {
    /// A short class of the error, for a span's `error.type`.
    pub fn class(&self) -> &'static str {
        match self {
            CompactionError::Plugin(_) => "component_error",
            CompactionError::BadPath { .. } => "bad_path",
            CompactionError::Invalid { .. } => "invalid_context",
            CompactionError::SystemPromptChanged { .. } => "system_prompt_changed",
            CompactionError::KeptTailRewritten { .. } => "kept_tail_rewritten",
            CompactionError::NotSmaller { .. } => "not_smaller",
            CompactionError::EmptySummary { .. } => "empty_summary",
            CompactionError::StillOverThreshold { .. } => "still_over_threshold",
            CompactionError::BadLine(_) => "bad_line",
            CompactionError::Io { .. } => "io",
        }
    }
}

/// Messages (lines) of context file `name` in `task_dir`, `None` when it cannot be read.
fn count_lines(task_dir: &TaskDir, name: &str) -> Option<u64> {
    use std::io::Read;
    let mut file = task_dir.open_read_if_exists(name).ok()??;
    let (mut lines, mut last) = (0u64, b'\n');
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        lines += buf[..n].iter().filter(|b| **b == b'\n').count() as u64;
        last = buf[n - 1];
    }
    // A last line without its newline is a message too.
    Some(lines + u64::from(last != b'\n'))
}

/// Run one compaction step for the task in `task_dir` (the directory both components see;
/// every file the host reads or deletes there goes through it), if the compressor says the
/// context should be compressed. `now` gives the RFC 3339 UTC timestamp of the summary's
/// history line, taken when the summary is recorded (after the compressor's LLM calls).
pub fn compact_if_needed(
    store: &mut MessageStore,
    compressor: &mut Compressor,
    task_dir: &TaskDir,
    config: &CompressConfig,
    now: &dyn Fn() -> String,
) -> Result<CompactionOutcome, CompactionError> {
    compact(store, compressor, task_dir, config, now, false)
}

/// [`compact_if_needed`]; with `force`, the context is compressed whatever `should-compress`
/// says (the provider answered that it is too long for the model).
pub fn compact(
    store: &mut MessageStore,
    compressor: &mut Compressor,
    task_dir: &TaskDir,
    config: &CompressConfig,
    now: &dyn Fn() -> String,
    force: bool,
) -> Result<CompactionOutcome, CompactionError> {
    compact_framed(store, compressor, task_dir, config, now, force, false)
}

/// [`compact`]; with `recall` (`context_storage.recall`), the summary message of the new
/// context also says how to read the messages it replaced
/// ([`crate::compaction_record::frame_summary`]). Either way the summary's line in
/// summaries.jsonl records what it replaced ([`crate::compaction_record::record_replaced`]).
pub fn compact_framed(
    store: &mut MessageStore,
    compressor: &mut Compressor,
    task_dir: &TaskDir,
    config: &CompressConfig,
    now: &dyn Fn() -> String,
    force: bool,
    recall: bool,
) -> Result<CompactionOutcome, CompactionError> {
    let before_tokens = store.current_token_count()?;
    if !force && !compressor.should_compress(before_tokens, config)? {
        return Ok(CompactionOutcome::NotNeeded);
    }
    let current_name = untrusted::component_path(task_dir, &store.current_context_file()?)
        .map_err(|e| CompactionError::BadPath {
            component: store.component().to_string(),
            reason: format!("(the message store's current-context-file) {e}"),
        })?;
    let span = crate::telemetry::genai::Compression::start(
        compressor.component(),
        before_tokens,
        count_lines(task_dir, &current_name),
        force,
    );
    let outcome = (|| {
        // summaries.jsonl as it was before the compressor ran: a compression that is not installed
        // leaves no summary line behind (nothing in messages.jsonl would refer to it).
        let summaries_before = SummariesMark::take(task_dir)?;
        let (file, summary) = compress_and_check(
            store,
            compressor,
            task_dir,
            config,
            now,
            &current_name,
            before_tokens,
        )
        .inspect_err(|_| summaries_before.restore(task_dir))?;
        let summary_id = summary.map(|(id, _)| id);
        // What the compression replaced and how to get it back: additions to what the compressor
        // wrote, so a failure is logged and the compression goes on.
        if let Some((id, seq)) = summary {
            let mark = summaries_before.0.unwrap_or(0);
            if let Err(e) = crate::compaction_record::record_replaced(task_dir, mark, id, seq) {
                tracing::warn!(
                    "{}: what summary {id} replaced not recorded: {e:#}",
                    task_dir.show(SUMMARIES)
                );
            }
        }
        if recall && let Err(e) = crate::compaction_record::frame_summary(task_dir, &file) {
            tracing::warn!(
                "{}: the summary's note on history_read not added: {e:#}",
                task_dir.show(&file)
            );
        }

        // The host's check of current.jsonl is of the file about to be replaced (DESIGN §2: its
        // checkpoint is deleted first; the next check reads the new file whole).
        if let Err(e) = task_dir.remove_file_if_exists(CONTEXT_CHECKPOINT) {
            tracing::warn!("{} not deleted: {e}", task_dir.show(CONTEXT_CHECKPOINT));
        }
        let stats = store.recreate_current_context(&file)?;
        span.installed(stats.current_tokens, stats.current_count, summary_id);

        let limit = (config.context_length as f64 * config.threshold) as u64;
        if stats.current_tokens > limit {
            return Err(CompactionError::StillOverThreshold {
                before_tokens,
                tokens: stats.current_tokens,
                limit,
                threshold: config.threshold,
                context_length: config.context_length,
            });
        }
        Ok(CompactionOutcome::Compressed {
            before_tokens,
            after_tokens: stats.current_tokens,
            summary_id,
        })
    })();
    if let Err(e) = &outcome
        && !matches!(e, CompactionError::StillOverThreshold { .. })
    {
        span.fail(e.class());
    }
    outcome
}

/// Steps 2–4 up to the summary's record: run `compress`, check the file it returned against
/// current.jsonl (`current_name`, `before_tokens`), and append the summary to messages.jsonl.
/// Returns the new context's file name and the summary's id and seq in messages.jsonl; on
/// any error the returned file is deleted (the caller takes back summaries.jsonl).
fn compress_and_check(
    store: &mut MessageStore,
    compressor: &mut Compressor,
    task_dir: &TaskDir,
    config: &CompressConfig,
    now: &dyn Fn() -> String,
    current_name: &str,
    before_tokens: u64,
) -> Result<(String, Option<(u64, u64)>), CompactionError> {
    let component = compressor.component().to_string();
    // What the directory held before the compressor ran: a rejected context file is deleted
    // only when the compressor created it.
    let before = entry_names(task_dir)?;
    let result = compressor.compress(config)?;
    let file = match untrusted::component_path(task_dir, &result.context_file) {
        Ok(f) if f == current_name => {
            return Err(CompactionError::BadPath {
                component,
                reason: format!("`{f}`, the current context itself"),
            });
        }
        Ok(f) if is_record(&f) => {
            return Err(CompactionError::BadPath {
                component,
                reason: format!(
                    "`{}`, a file of the task's record (the history, tool calls, summaries, planning history and checkpoints are the host's to keep)",
                    untrusted::name(&f)
                ),
            });
        }
        Ok(f) => f,
        Err(e) => {
            return Err(CompactionError::BadPath {
                component,
                reason: e.to_string(),
            });
        }
    };
    let checked = (|| {
        let checked = check_context_file(task_dir, &file, false).map_err(|source| {
            CompactionError::Invalid {
                component: component.clone(),
                source,
            }
        })?;
        let old_system = first_message(task_dir, current_name)?;
        let new_system = first_message(task_dir, &file)?;
        if old_system.is_none() || old_system != new_system {
            return Err(CompactionError::SystemPromptChanged {
                component: component.clone(),
            });
        }
        check_kept_tail(
            task_dir,
            current_name,
            &file,
            config.keep_recent_messages as usize,
        )
        .map_err(|source| CompactionError::KeptTailRewritten {
            component: component.clone(),
            source,
        })?;
        if checked.tokens >= before_tokens {
            return Err(CompactionError::NotSmaller {
                component: component.clone(),
                before: before_tokens,
                after: checked.tokens,
            });
        }
        if let Some(summary) = &result.summary {
            if summary.summary.trim().is_empty() {
                return Err(CompactionError::EmptySummary {
                    component: component.clone(),
                });
            }
            let message = ChatMessage::text("assistant", summary.summary.clone());
            let added = store.record_summary(&message, summary.id, &now())?;
            return Ok(Some((summary.id, added.seq)));
        }
        Ok(None)
    })();
    match checked {
        Ok(summary) => Ok((file, summary)),
        Err(e) => {
            // Only a file this step created: one that was there before (a file of the
            // component's own, or one it rewrote) stays.
            if !before.contains(&file) {
                let _ = task_dir.remove_file(&file);
            }
            Err(e)
        }
    }
}

/// The relative names of every entry below `dir` (links not followed).
fn entry_names(dir: &TaskDir) -> Result<HashSet<String>, CompactionError> {
    let mut names = HashSet::new();
    dir.walk(|rel, _| {
        names.insert(rel.to_string());
    })
    .map_err(|source| CompactionError::Io {
        file: dir.path().display().to_string(),
        source,
    })?;
    Ok(names)
}

/// The length in bytes of summaries.jsonl before a compression (`None`: no such file), to put
/// it back when the compression is not installed.
struct SummariesMark(Option<u64>);

impl SummariesMark {
    fn take(dir: &TaskDir) -> Result<SummariesMark, CompactionError> {
        let len = dir
            .metadata(SUMMARIES)
            .map_err(|source| CompactionError::Io {
                file: dir.show(SUMMARIES),
                source,
            })?
            .map(|m| m.len());
        Ok(SummariesMark(len))
    }

    /// Cut summaries.jsonl back to its length before the compression (remove it when it did
    /// not exist). Failures are logged: the line left behind is harmless to the task (the next
    /// summary id counts past it), only misleading to a reader.
    fn restore(&self, dir: &TaskDir) {
        let now = match dir.metadata(SUMMARIES) {
            Ok(m) => m.map(|m| m.len()),
            Err(e) => {
                tracing::warn!("{}: {e}", dir.show(SUMMARIES));
                return;
            }
        };
        let result = match (self.0, now) {
            (before, after) if before == after => return,
            (None, Some(_)) => dir.remove_file(SUMMARIES),
            (Some(len), Some(after)) if after > len => dir
                .open_read_write(SUMMARIES)
                .and_then(|f| f.set_len(len).and_then(|()| f.sync_all())),
            _ => return,
        };
        match result {
            Ok(()) => tracing::info!(
                "{}: the rejected compression's summary removed",
                dir.show(SUMMARIES)
            ),
            Err(e) => tracing::warn!(
                "{}: the rejected compression's summary not removed: {e}",
                dir.show(SUMMARIES)
            ),
        }
    }
}

/// Longest first line (the system prompt) [`first_message`] reads, bytes: 4 MiB, about a
/// million tokens, more than any model's context window holds (a system prompt longer than the
/// window could never be sent).
pub const MAX_FIRST_LINE_BYTES: usize = 4 << 20;

/// The first non-blank line of the JSONL file `name` of `dir`, parsed (`None` when it is not
/// a chat message); `None` when the file is empty or absent. The line is read through the
/// host's line reader capped at [`MAX_FIRST_LINE_BYTES`]: a longer one (a component or a
/// crash may have written it) is [`CompactionError::BadLine`], naming the file and line,
/// after reading no more than the cap of it.
fn first_message(dir: &TaskDir, name: &str) -> Result<Option<ChatMessage>, CompactionError> {
    let file = match dir.open_read_if_exists(name) {
        Ok(Some(f)) => f,
        Ok(None) => return Ok(None),
        Err(source) => {
            return Err(CompactionError::Io {
                file: dir.show(name),
                source,
            });
        }
    };
    let mut lines =
        LineReader::new(BufReader::new(file), dir.show(name)).max_line_bytes(MAX_FIRST_LINE_BYTES);
    Ok(lines
        .next_line()
        .map_err(CompactionError::BadLine)?
        .and_then(|(_, line)| serde_json::from_str(line).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_message_skips_blank_lines_and_tolerates_absence() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        let p = tmp.path().join("c.jsonl");
        assert_eq!(first_message(&dir, "c.jsonl").unwrap(), None);
        std::fs::write(&p, "\n{\"role\":\"system\",\"content\":\"s\"}\n").unwrap();
        assert_eq!(
            first_message(&dir, "c.jsonl").unwrap(),
            Some(ChatMessage::text("system", "s"))
        );
    }

    /// A first line longer than [`MAX_FIRST_LINE_BYTES`] is an error naming the file and the
    /// line; one of exactly the cap is read.
    #[test]
    fn an_oversize_first_line_is_an_error_naming_file_and_line() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        let p = tmp.path().join("c.jsonl");
        let prompt = |len: usize| {
            let empty = serde_json::to_string(&ChatMessage::text("system", "")).unwrap();
            let m = ChatMessage::text("system", "x".repeat(len - empty.len()));
            let line = serde_json::to_string(&m).unwrap();
            assert_eq!(line.len(), len);
            (m, line)
        };
        let (m, line) = prompt(MAX_FIRST_LINE_BYTES);
        std::fs::write(&p, format!("\n{line}\n")).unwrap();
        assert_eq!(first_message(&dir, "c.jsonl").unwrap(), Some(m));
        let (_, line) = prompt(MAX_FIRST_LINE_BYTES + 1);
        std::fs::write(&p, format!("\n{line}\n")).unwrap();
        let e = first_message(&dir, "c.jsonl").unwrap_err();
        assert!(matches!(e, CompactionError::BadLine(_)), "{e:?}");
        let text = e.to_string();
        assert!(
            text.starts_with(&format!(
                "{} line 2: longer than {MAX_FIRST_LINE_BYTES} bytes; not read",
                dir.show("c.jsonl")
            )),
            "{text}"
        );
    }

    /// A rejected compression's summary line is taken out of summaries.jsonl: the file is cut
    /// back to its length before the compressor ran, or removed when it did not exist; earlier
    /// summaries stay byte for byte.
    #[test]
    fn a_rejected_compressions_summary_is_taken_back() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        let p = tmp.path().join(SUMMARIES);

        let mark = SummariesMark::take(&dir).unwrap();
        std::fs::write(&p, "{\"id\":1}\n").unwrap();
        mark.restore(&dir);
        assert!(
            !p.exists(),
            "a summaries.jsonl the compressor created is removed"
        );

        let earlier = "{\"id\":1,\"summary\":\"kept\"}\n";
        std::fs::write(&p, earlier).unwrap();
        let mark = SummariesMark::take(&dir).unwrap();
        dir.append_line(SUMMARIES, "{\"id\":2,\"summary\":\"rejected\"}")
            .unwrap();
        mark.restore(&dir);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), earlier);
        // Nothing appended: nothing changes.
        mark.restore(&dir);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), earlier);
    }
}
