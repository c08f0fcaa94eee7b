//! [`HistoryCounts`]: what the host learns from messages.jsonl in one read — its counts
//! ([`HistoryStats`]: lines, last seq, agent steps, whether it ends with a summary) and the id
//! of every tool call of the conversation (kept unique, [`crate::invariants::ids`]) — kept up
//! to a byte offset in `history_checkpoint.json` ([`ctxhost_format::files::HISTORY_CHECKPOINT`])
//! so a resumed task reads only the lines appended since, not its whole history again.
//!
//! The checkpoint (`{"version":1,"file_id":"dev:ino","messages":{"bytes":N,"last_line":"…"},
//! "stats":{…},"call_id_hashes":["…"]}`, schema `docs/schemas/history_checkpoint.schema.json`) is written when the
//! counts were read from the file (opening), when the task pauses, and at step boundaries once
//! messages.jsonl grew by [`CHECKPOINT_EVERY`] bytes since the last one, atomically through the
//! task's [`TaskDir`]. It is used only while it names the same file ([`file_id`]: a file
//! replaced atomically, as `ctxhost fsck --repair` does, is another) and its [`FileMark`] holds
//! (the file still starts with the counted bytes: at least that long, the line ending there
//! hashes the same); a missing,
//! unreadable, oversized, other-version or stale checkpoint is ignored and the whole file is
//! read, as without one. A crash at any point costs at most a full read, never a wrong count.
//!
//! Trust: the checkpoint lies in the task directory, which the task's components can write; it
//! gives them no power they lack, since it only summarises messages.jsonl, which the message
//! store writes anyway (a checkpoint whose mark holds is believed, as the file would be).

use std::io::{self, BufReader, Read, Seek, SeekFrom};

use anyhow::Context;
use ctxhost_format::HistoryLine;
use ctxhost_format::checkpoint::{CHECKPOINT_VERSION, FileMark};
use ctxhost_format::files::{HISTORY_CHECKPOINT, MESSAGES};
use serde::{Deserialize, Serialize};

use crate::checkpoint;
use crate::history_stats::HistoryStats;
use crate::invariants::ids::CallIds;
use crate::invariants::queries::bounded;
use crate::task_dir::{TaskDir, file_id};

pub use ctxhost_format::long_line::{MAX_WHOLE_LINE_BYTES, read_line_capped};

/// The fields of a history line the counts need, read from a line too long to hold whole:
/// `content` and `reasoning` are skipped as they are read (their type is not checked).
#[derive(Deserialize)]
struct LineHead {
    seq: u64,
    role: String,
    #[serde(default)]
    #[allow(dead_code)]
    content: Option<serde::de::IgnoredAny>,
    #[allow(dead_code)]
    timestamp: serde::de::IgnoredAny,
    #[allow(dead_code)]
    tokens: u64,
    #[serde(default)]
    tool_calls: Option<Vec<ctxhost_format::ToolCall>>,
    #[serde(
        default,
        deserialize_with = "ctxhost_format::summary_id::deserialize_opt"
    )]
    summary_id: Option<u64>,
}

/// Parses the line that starts with `start` (its first bytes, already read) and goes on in
/// `reader`, holding only the fields [`LineHead`] keeps; returns them and the bytes read from
/// `reader` (the rest of the line, its `\n` included). `None`: the line has no `\n` yet (being
/// written, or torn). Errors: the line is not a history line.
fn long_line_head(
    start: &[u8],
    reader: &mut impl io::BufRead,
) -> anyhow::Result<Option<(LineHead, u64)>> {
    struct Counted<'a, R> {
        inner: &'a mut R,
        bytes: u64,
    }
    impl<R: Read> Read for Counted<'_, R> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.inner.read(buf)?;
            self.bytes += n as u64;
            Ok(n)
        }
    }
    let mut rest = Counted {
        inner: reader,
        bytes: 0,
    };
    let head = {
        // serde_json reads a reader a byte at a time and stops at the object's `}`.
        let mut de = serde_json::Deserializer::from_reader(start.chain(&mut rest));
        match <LineHead as Deserialize>::deserialize(&mut de) {
            Ok(h) => h,
            Err(e) if e.is_eof() => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    };
    // After the object's `}`: white space up to the line's end.
    // A byte at a time: nothing of the next line may be taken.
    let mut byte = [0u8; 1];
    loop {
        if rest.read(&mut byte)? == 0 {
            return Ok(None);
        }
        match byte[0] {
            b'\n' => return Ok(Some((head, rest.bytes))),
            b if b.is_ascii_whitespace() => {}
            _ => anyhow::bail!("text after the JSON object"),
        }
    }
}

/// Growth of messages.jsonl, bytes, after which a step boundary writes a new checkpoint.
pub const CHECKPOINT_EVERY: u64 = 1024 * 1024;

/// Largest checkpoint file read, bytes (its call ids grow with the conversation's tool calls);
/// a larger one is ignored (a full read).
pub const MAX_CHECKPOINT_BYTES: u64 = 64 * 1024 * 1024;

/// `history_checkpoint.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Checkpoint {
    version: u32,
    /// messages.jsonl's identity ([`file_id`]).
    file_id: String,
    messages: FileMark,
    stats: HistoryStats,
    /// The ids of the tool calls in the prefix, as hashes ([`CallIds`]: sorted, so the file
    /// is the same for the same history). A checkpoint of any other shape is not read (a full
    /// read instead).
    call_id_hashes: CallIds,
    /// The running hash of the prefix ([`HistoryHash`]), so `ctxhost fsck` sees a history
    /// rewritten under a mark that still holds; absent in checkpoints of older hosts (and
    /// after a resume from one of them: the chain cannot go on without its start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    history_hash: Option<String>,
}

/// The running hash of a history: from 32 zero bytes, for each line of the file (its bytes
/// and its `\n`, blank lines included), `h = SHA-256(h ‖ line)`; written as 64 lowercase hex
/// digits. Resumable from its value (the checkpoint's), and fed in blocks (a line of many MiB
/// is never held).
#[derive(Clone, Default)]
pub struct HistoryHash {
    /// The hash of the whole lines fed.
    value: [u8; 32],
    /// The line being fed (started with `value`), if any.
    line: Option<sha2::Sha256>,
}

impl std::fmt::Debug for HistoryHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.hex())
    }
}

impl HistoryHash {
    /// The hash whose value is `hex` (64 hex digits), to go on from; `None` when it is not.
    pub fn from_hex(hex: &str) -> Option<HistoryHash> {
        if hex.len() != 64 {
            return None;
        }
        let mut value = [0u8; 32];
        for (i, b) in value.iter_mut().enumerate() {
            *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(HistoryHash { value, line: None })
    }

    /// The value, as 64 lowercase hex digits (of the whole lines fed).
    pub fn hex(&self) -> String {
        self.value.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Feed the file's next `bytes` (any cut: a line may go on in the next call).
    pub fn feed(&mut self, mut bytes: &[u8]) {
        use sha2::Digest as _;
        while !bytes.is_empty() {
            let line = self.line.get_or_insert_with(|| {
                let mut h = sha2::Sha256::new();
                h.update(self.value);
                h
            });
            match bytes.iter().position(|b| *b == b'\n') {
                Some(at) => {
                    line.update(&bytes[..=at]);
                    if let Some(done) = self.line.take() {
                        self.value = done.finalize().into();
                    }
                    bytes = &bytes[at + 1..];
                }
                None => {
                    line.update(bytes);
                    bytes = &[];
                }
            }
        }
    }

    /// The hash of the first `end` bytes of `file` (a prefix of whole lines), read in blocks.
    pub fn of_prefix(file: &mut std::fs::File, end: u64) -> io::Result<HistoryHash> {
        let mut h = HistoryHash::default();
        h.feed_from(file, 0, end)?;
        Ok(h)
    }

    /// Feed bytes `from..end` of `file`, read in blocks.
    fn feed_from(&mut self, file: &mut std::fs::File, from: u64, end: u64) -> io::Result<()> {
        file.seek(SeekFrom::Start(from))?;
        let mut reader = (&mut *file).take(end - from);
        let mut block = vec![0u8; 256 * 1024];
        loop {
            let n = reader.read(&mut block)?;
            if n == 0 {
                return Ok(());
            }
            self.feed(&block[..n]);
        }
    }
}

impl checkpoint::Versioned for Checkpoint {
    fn version(&self) -> u32 {
        self.version
    }
}

/// The counts of a task directory's messages.jsonl and the prefix they cover.
#[derive(Debug, Clone)]
pub struct HistoryCounts {
    dir: TaskDir,
    stats: HistoryStats,
    /// Ids of the tool calls in the prefix (plus ids the agent loop reserved for a reply it is
    /// about to append, [`HistoryCounts::call_ids_mut`]).
    call_ids: CallIds,
    /// The prefix of messages.jsonl `stats` counts.
    mark: FileMark,
    /// The identity of the messages.jsonl counted ([`file_id`]; empty: none yet).
    file_id: String,
    /// The mark of the checkpoint file as last written or read.
    saved: Option<FileMark>,
    /// Bytes of messages.jsonl read by this value so far (for tests and benchmarks: a resume
    /// from a checkpoint that holds reads only what follows it).
    bytes_read: u64,
    /// The running hash of the prefix (`None`: unknown, resumed from a checkpoint without one).
    hash: Option<HistoryHash>,
}

impl HistoryCounts {
    /// The counts of `dir`'s messages.jsonl: from its checkpoint on when it holds, else the
    /// whole file; writes a new checkpoint when lines were read (a failure to write it is
    /// logged). Errors name the file and line of a line that does not parse.
    pub fn open(dir: &TaskDir) -> anyhow::Result<HistoryCounts> {
        let mut counts = HistoryCounts {
            dir: dir.clone(),
            stats: HistoryStats::default(),
            call_ids: CallIds::default(),
            mark: FileMark::default(),
            file_id: String::new(),
            saved: None,
            bytes_read: 0,
            hash: Some(HistoryHash::default()),
        };
        if let Some(cp) = read_checkpoint(dir) {
            counts.stats = cp.stats;
            counts.call_ids = cp.call_id_hashes;
            counts.mark = cp.messages.clone();
            counts.file_id = cp.file_id;
            counts.saved = Some(cp.messages);
            counts.hash = cp.history_hash.as_deref().and_then(HistoryHash::from_hex);
        }
        if counts.catch_up(false)? {
            counts.save_logged();
        }
        Ok(counts)
    }

    /// The counts.
    pub fn stats(&self) -> HistoryStats {
        self.stats
    }

    /// The id of every tool call in messages.jsonl as counted.
    pub fn call_ids(&self) -> &CallIds {
        &self.call_ids
    }

    /// The ids, for [`crate::invariants::ids::make_call_ids_unique`] to add the ids of a reply
    /// about to be appended (a superset of the file's ids only until that reply is: harmless,
    /// an id is then renamed that needed not be).
    pub fn call_ids_mut(&mut self) -> &mut CallIds {
        &mut self.call_ids
    }

    /// Bytes of messages.jsonl this value has read (the counted prefix's last line is read
    /// again to check the mark, and is not included).
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// At a step boundary: count the lines appended since, and write the checkpoint when the
    /// file grew by [`CHECKPOINT_EVERY`] bytes since the last one (`force`: whenever it grew; a
    /// failure to write it is logged: it only costs the next resume a full read).
    ///
    /// Errors: messages.jsonl no longer starts with the lines counted — it was replaced (another
    /// file, [`file_id`]), cut, rewritten or deleted while the task ran: a
    /// [`HistoryChanged`] naming the file. The history is append-only; the task must not go
    /// on (or complete) on a history it did not write.
    pub fn advance(&mut self, force: bool) -> anyhow::Result<()> {
        self.catch_up(true)?;
        let saved = self.saved.as_ref().map_or(0, |m| m.bytes);
        if self.mark.bytes != saved && (force || self.mark.bytes >= saved + CHECKPOINT_EVERY) {
            self.save_logged();
        }
        Ok(())
    }

    /// Count the lines after the mark up to the last whole line; returns whether anything was
    /// read. When the mark no longer holds, `strict` makes that an error ([`HistoryChanged`]);
    /// otherwise (opening, where the checkpoint is a cache) the whole file is counted again.
    fn catch_up(&mut self, strict: bool) -> anyhow::Result<bool> {
        let shown = self.dir.show(MESSAGES);
        let Some(mut file) = self
            .dir
            .open_read_if_exists(MESSAGES)
            .with_context(|| format!("cannot open {shown}"))?
        else {
            let was = self.mark.bytes > 0;
            if strict && was {
                return Err(self.changed("it is gone".to_string()).into());
            }
            self.reset();
            return Ok(was);
        };
        let len = file
            .seek(SeekFrom::End(0))
            .with_context(|| format!("cannot read {shown}"))?;
        let id = file_id(&file).with_context(|| format!("cannot read {shown}"))?;
        let holds =
            self.file_id == id && self.mark.holds(&mut file, len, &shown).map_err(bounded)?;
        if holds && len == self.mark.bytes {
            return Ok(false);
        }
        if !holds {
            if strict && self.mark.bytes > 0 {
                let how = if self.file_id != id {
                    format!(
                        "it is another file (device:inode {id}, counted {}): replaced",
                        self.file_id
                    )
                } else {
                    format!(
                        "it is {len} bytes, and does not end the counted prefix with the line counted there: cut or rewritten"
                    )
                };
                return Err(self.changed(how).into());
            }
            self.reset();
            self.file_id = id;
        }
        let from = self.mark.bytes;
        file.seek(SeekFrom::Start(from))
            .with_context(|| format!("cannot read {shown}"))?;
        // Whole lines only: a last line without `\n` is being written (or torn) and is left
        // for the next count.
        let mut end = from;
        let mut stats = self.stats;
        let mut reader = BufReader::with_capacity(256 * 1024, (&mut file).take(len - from));
        let mut buf = Vec::new();
        let mut line_no = 0u64;
        let not_a_line = |line_no: u64, e: &dyn std::fmt::Display| {
            let at = if from > 0 {
                format!(" (after byte {from})")
            } else {
                String::new()
            };
            anyhow::anyhow!(
                "{shown}{at} line {line_no}: not a history line: {}",
                crate::untrusted::text(&e.to_string(), crate::untrusted::MAX_ERROR_BYTES)
            )
        };
        loop {
            buf.clear();
            let n = read_line_capped(&mut reader, &mut buf, MAX_WHOLE_LINE_BYTES)
                .with_context(|| format!("cannot read {shown}"))?;
            self.bytes_read += n as u64;
            if n == 0 {
                break;
            }
            if buf.last() != Some(&b'\n') && buf.len() <= MAX_WHOLE_LINE_BYTES {
                // A last line without `\n`: being written, or torn.
                break;
            }
            if buf.last() != Some(&b'\n') {
                // A line longer than the cap (a reply's text of many MiB): parsed as it is read,
                // its text skipped, never held.
                let Some((head, rest)) =
                    long_line_head(&buf, &mut reader).map_err(|e| not_a_line(line_no + 1, &e))?
                else {
                    break;
                };
                self.bytes_read += rest;
                line_no += 1;
                end += n as u64 + rest;
                stats.add_parts(head.seq, &head.role, head.summary_id);
                for call in head.tool_calls.iter().flatten() {
                    self.call_ids.insert(&call.id);
                }
                continue;
            }
            line_no += 1;
            end += n as u64;
            if buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let h: HistoryLine =
                serde_json::from_slice(&buf).map_err(|e| not_a_line(line_no, &e))?;
            stats.add(&h);
            for call in h.tool_calls.iter().flatten() {
                self.call_ids.insert(&call.id);
            }
        }
        if let Some(hash) = self.hash.as_mut() {
            // The lines counted, read again in blocks (they were parsed, not kept).
            hash.feed_from(&mut file, from, end)
                .with_context(|| format!("cannot read {shown}"))?;
        }
        let mark = FileMark::of(&mut file, end, &shown)
            .map_err(bounded)?
            .unwrap_or_default();
        let read = end != from || self.mark != mark;
        self.stats = stats;
        self.mark = mark;
        Ok(read)
    }

    /// The error for a history that no longer starts with the counted prefix (`how`: what it is
    /// now).
    fn changed(&self, how: String) -> HistoryChanged {
        HistoryChanged {
            file: self.dir.show(MESSAGES),
            bytes: self.mark.bytes,
            lines: self.stats.lines,
            how,
        }
    }

    /// Forget the counts (the file is gone, or no longer starts with the counted prefix).
    fn reset(&mut self) {
        self.hash = Some(HistoryHash::default());
        self.file_id.clear();
        self.stats = HistoryStats::default();
        self.call_ids.clear();
        self.mark = FileMark::default();
    }

    /// Write the checkpoint (atomically).
    fn save(&mut self) -> anyhow::Result<()> {
        // The set moves into the checkpoint and back (no copy of it).
        let cp = Checkpoint {
            version: CHECKPOINT_VERSION,
            file_id: self.file_id.clone(),
            messages: self.mark.clone(),
            stats: self.stats,
            call_id_hashes: std::mem::take(&mut self.call_ids),
            history_hash: self.hash.as_ref().map(HistoryHash::hex),
        };
        let bytes = serde_json::to_vec(&cp);
        self.call_ids = cp.call_id_hashes;
        self.dir
            .write_atomic(HISTORY_CHECKPOINT, &bytes?)
            .with_context(|| format!("cannot write {}", self.dir.show(HISTORY_CHECKPOINT)))?;
        self.saved = Some(self.mark.clone());
        Ok(())
    }

    /// [`HistoryCounts::save`], a failure logged: it only costs the next resume a full read.
    fn save_logged(&mut self) {
        if let Err(e) = self.save() {
            tracing::warn!("history checkpoint not written: {e:#}");
        }
    }
}

/// messages.jsonl no longer starts with the lines the host counted while the task ran
/// ([`HistoryCounts::advance`]).
#[derive(Debug, thiserror::Error)]
#[error(
    "{file} no longer starts with the {lines} line(s) ({bytes} bytes) of history the host recorded: {how}. \
     The history is append-only and only the message store appends to it; a component changed it, \
     so the task stops here (restore the file from a backup to continue it)"
)]
pub struct HistoryChanged {
    /// messages.jsonl, as shown to users.
    pub file: String,
    /// Bytes of it the host had counted.
    pub bytes: u64,
    /// Lines of it the host had counted.
    pub lines: u64,
    /// What the file is now.
    pub how: String,
}

/// The checkpoint of `dir`, if present and believable ([`believable_checkpoint`]); anything
/// else is ignored (logged at debug level, as [`checkpoint::load`] does).
fn read_checkpoint(dir: &TaskDir) -> Option<Checkpoint> {
    believable_checkpoint(dir).unwrap_or_else(|e| {
        let file = dir.show(HISTORY_CHECKPOINT);
        tracing::debug!("{file} ignored (the history is read whole): {e:#}");
        None
    })
}

/// The checkpoint of `dir` as [`checkpoint::read`] reads it, bounded by
/// [`max_checkpoint_bytes`] and [`ensure_plausible`]: what both the task ([`read_checkpoint`])
/// and fsck ([`verify_checkpoint`]) judge it by.
fn believable_checkpoint(dir: &TaskDir) -> anyhow::Result<Option<Checkpoint>> {
    let cp = checkpoint::read::<Checkpoint>(dir, HISTORY_CHECKPOINT, max_checkpoint_bytes(dir))?;
    cp.map(|cp| ensure_plausible(&cp).map(|()| cp)).transpose()
}

/// Fewest bytes one tool call takes in messages.jsonl, with a margin: the smallest,
/// `{"id":"","type":"function","function":{"name":"","arguments":""}}`, is 66.
const MIN_CALL_BYTES: u64 = 32;

/// The largest history checkpoint `dir`'s messages.jsonl can have: its hashes (at most one per
/// [`MIN_CALL_BYTES`] of the file, 20 bytes each as written) and 64 KiB for the rest, at most
/// [`MAX_CHECKPOINT_BYTES`]. A larger file is not parsed at all, so a forged one costs a task
/// no more than reading its history would.
fn max_checkpoint_bytes(dir: &TaskDir) -> u64 {
    let history = dir.metadata(MESSAGES).ok().flatten().map_or(0, |m| m.len());
    (history / MIN_CALL_BYTES * 20 + 64 * 1024).min(MAX_CHECKPOINT_BYTES)
}

/// That `cp` holds no more call-id hashes than the prefix it counts can hold tool calls (one
/// per [`MIN_CALL_BYTES`]): a checkpoint forged with millions of hashes over a short history
/// is ignored (and reported by fsck) instead of filling the task process's memory.
fn ensure_plausible(cp: &Checkpoint) -> anyhow::Result<()> {
    let most = cp.messages.bytes / MIN_CALL_BYTES;
    let held = cp.call_id_hashes.len() as u64;
    anyhow::ensure!(
        held <= most,
        "{held} call-id hashes, more than the {} bytes of messages.jsonl it counts can hold \
         (at most {most})",
        cp.messages.bytes
    );
    Ok(())
}

/// For `ctxhost fsck` (its checkpoint check): why [`HistoryCounts::open`] would not use
/// `dir`'s checkpoint (unreadable, not of its shape or version, more call-id hashes than its
/// prefix can hold, another messages.jsonl, a mark that no longer holds); `Ok` when there is
/// none or it would be used.
pub fn verify_checkpoint(dir: &TaskDir) -> anyhow::Result<()> {
    let Some(cp) = believable_checkpoint(dir)? else {
        return Ok(());
    };
    // As `catch_up`: no file holds only an empty mark; a file must be the one counted.
    let id = (cp.messages.bytes > 0 || !cp.file_id.is_empty()).then_some(cp.file_id.as_str());
    checkpoint::ensure_holds(dir, MESSAGES, id, &cp.messages)?;
    // A history rewritten under a mark that still holds (same length, same last line).
    if let Some(recorded) = &cp.history_hash
        && let Some(mut file) = dir.open_read_if_exists(MESSAGES)?
    {
        let now = HistoryHash::of_prefix(&mut file, cp.messages.bytes)?.hex();
        anyhow::ensure!(
            &now == recorded,
            "{} is not the history the host recorded: its first {} bytes ({} lines) have the running hash {now}, the checkpoint recorded {recorded} (lines before the last were rewritten)",
            dir.show(MESSAGES),
            cp.messages.bytes,
            cp.stats.lines
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::queries::call_ids_in;
    use crate::repair::history_stats;
    use crate::repair::testing::{call, result, sys, write_task};
    use ctxhost_format::ChatMessage;
    use std::fs;
    use std::path::Path;

    fn history() -> Vec<ChatMessage> {
        let mut h = vec![sys(), ChatMessage::text("user", "go")];
        for i in 0..20 {
            h.push(call(&[&format!("c{i}")]));
            h.push(result(&format!("c{i}")));
        }
        h.push(ChatMessage::text("assistant", "done"));
        h
    }

    fn task(d: &Path) -> TaskDir {
        TaskDir::open(d).unwrap()
    }

    /// The counts and ids of a full read.
    fn full(d: &Path) -> (HistoryStats, CallIds) {
        (
            history_stats(&task(d), MESSAGES).unwrap(),
            call_ids_in(&task(d), MESSAGES).unwrap(),
        )
    }

    fn of(c: &HistoryCounts) -> (HistoryStats, CallIds) {
        (c.stats(), c.call_ids().clone())
    }

    #[test]
    fn counts_equal_a_full_count_and_later_opens_read_only_what_was_appended() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let h = history();
        write_task(d, &h[..30], &[]);
        let counts = HistoryCounts::open(&task(d)).unwrap();
        assert_eq!(of(&counts), full(d));
        assert_eq!(
            counts.bytes_read(),
            fs::metadata(d.join(MESSAGES)).unwrap().len()
        );
        assert!(d.join(HISTORY_CHECKPOINT).is_file());
        let before = fs::metadata(d.join(MESSAGES)).unwrap().len();
        // More lines, then a line before the checkpoint damaged (same length): an open from
        // the checkpoint never reads it.
        write_task(d, &h, &[]);
        let text = fs::read_to_string(d.join(MESSAGES)).unwrap();
        fs::write(
            d.join(MESSAGES),
            text.replacen("\"seq\":2,", "\"seq\":X,", 1),
        )
        .unwrap();
        let counts = HistoryCounts::open(&task(d)).unwrap();
        assert_eq!(counts.bytes_read(), text.len() as u64 - before);
        fs::write(d.join(MESSAGES), &text).unwrap();
        assert_eq!(of(&counts), full(d));
        assert_eq!(counts.stats().agent_steps, 21);
        assert_eq!(counts.call_ids().len(), 20);
        // Nothing appended: nothing read but the mark's line.
        let again = HistoryCounts::open(&task(d)).unwrap();
        assert_eq!(again.bytes_read(), 0);
        assert_eq!(of(&again), full(d));
    }

    /// A line longer than [`MAX_WHOLE_LINE_BYTES`] (a reply of many MiB) is counted as it is
    /// read: the same counts and ids as a full read; a torn one waits like any other.
    #[test]
    fn a_line_too_long_to_hold_is_counted_as_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let mut h = history();
        let long = "x\"\\y\n".repeat(MAX_WHOLE_LINE_BYTES / 3);
        let mut big_call = call(&["big"]);
        big_call.content = Some(long.clone());
        h.insert(5, ChatMessage::text("assistant", long.clone()));
        h.insert(6, ChatMessage::text("user", "more"));
        h.insert(7, big_call);
        h.insert(8, result("big"));
        write_task(d, &h, &[]);
        let mut counts = HistoryCounts::open(&task(d)).unwrap();
        assert_eq!(of(&counts), full(d));
        assert!(counts.call_ids().len() == 21);
        // Appended while the task runs: a long line whole, then one torn.
        let text = fs::read_to_string(d.join(MESSAGES)).unwrap();
        let line = |seq: usize| {
            let m = ChatMessage::text("assistant", long.clone());
            ctxhost_format::jsonl::to_line(&ctxhost_format::HistoryLine::of(seq as u64, &m, "t"))
                .unwrap()
        };
        let next = h.len() + 1;
        fs::write(d.join(MESSAGES), format!("{text}{}  \n", line(next))).unwrap();
        counts.advance(true).unwrap();
        assert_eq!(of(&counts), full(d));
        let whole = fs::read_to_string(d.join(MESSAGES)).unwrap();
        let torn = line(next + 1);
        fs::write(
            d.join(MESSAGES),
            format!("{whole}{}", &torn[..torn.len() - 1]),
        )
        .unwrap();
        let before = counts.stats();
        counts.advance(true).unwrap();
        assert_eq!(counts.stats(), before, "a torn long line is not counted");
        fs::write(d.join(MESSAGES), format!("{whole}{torn}\n")).unwrap();
        counts.advance(true).unwrap();
        assert_eq!(of(&counts), full(d));
        // A long line with text after its object is an error naming the line.
        fs::write(d.join(MESSAGES), format!("{whole}{} x\n", line(next + 1))).unwrap();
        let e = HistoryCounts::open(&task(d)).unwrap_err();
        assert!(format!("{e:#}").contains("not a history line"), "{e:#}");
    }

    #[test]
    fn a_cut_or_rewritten_history_is_counted_again_and_a_torn_last_line_waits() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let h = history();
        write_task(d, &h, &[]);
        HistoryCounts::open(&task(d)).unwrap();
        write_task(d, &h[..10], &[]);
        assert_eq!(of(&HistoryCounts::open(&task(d)).unwrap()), full(d), "cut");
        let mut other = h.clone();
        other[9] = ChatMessage::text("user", "something else entirely");
        write_task(d, &other[..10], &[]);
        assert_eq!(
            of(&HistoryCounts::open(&task(d)).unwrap()),
            full(d),
            "rewritten"
        );
        // A last line being written is not counted until it is whole.
        let mut counts = HistoryCounts::open(&task(d)).unwrap();
        let before = counts.stats();
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(d.join(MESSAGES))
            .unwrap();
        io::Write::write_all(&mut f, b"{\"seq\":11,\"ro").unwrap();
        counts.advance(true).unwrap();
        assert_eq!(counts.stats(), before);
    }

    /// While the task runs, a history that no longer starts with the lines counted — replaced
    /// by another file (even one of the same bytes), rewritten in place, cut or deleted —
    /// is an error naming messages.jsonl; opening (a checkpoint is a cache) reads it afresh.
    #[test]
    fn a_history_changed_while_the_task_runs_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let h = history();
        let path = d.join(MESSAGES);
        let expect_changed = |counts: &mut HistoryCounts, what: &str| {
            let e = counts.advance(false).unwrap_err();
            let changed = e.downcast_ref::<HistoryChanged>().expect(what);
            assert_eq!(changed.file, path.display().to_string(), "{what}");
            let text = e.to_string();
            assert!(
                text.contains(&format!("{} no longer starts with the", path.display())),
                "{what}: {text}"
            );
            text
        };
        // Replaced by a copy of the same bytes (rename over it).
        write_task(d, &h, &[]);
        let mut counts = HistoryCounts::open(&task(d)).unwrap();
        counts.advance(false).unwrap();
        fs::copy(&path, d.join("copy")).unwrap();
        fs::rename(d.join("copy"), &path).unwrap();
        let text = expect_changed(&mut counts, "replaced");
        assert!(text.contains("replaced"), "{text}");
        // Rewritten in place, same length, another last line.
        write_task(d, &h, &[]);
        let mut counts = HistoryCounts::open(&task(d)).unwrap();
        let mut bytes = fs::read(&path).unwrap();
        let at = bytes.len() - 10;
        bytes[at] = if bytes[at] == b'x' { b'y' } else { b'x' };
        fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|mut f| io::Write::write_all(&mut f, &bytes))
            .unwrap();
        expect_changed(&mut counts, "rewritten");
        // Cut.
        write_task(d, &h, &[]);
        let mut counts = HistoryCounts::open(&task(d)).unwrap();
        let len = fs::metadata(&path).unwrap().len();
        fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(len / 2))
            .unwrap();
        expect_changed(&mut counts, "cut");
        // Deleted.
        write_task(d, &h, &[]);
        let mut counts = HistoryCounts::open(&task(d)).unwrap();
        fs::remove_file(&path).unwrap();
        let text = expect_changed(&mut counts, "deleted");
        assert!(text.contains("it is gone"), "{text}");
        // Opening again reads what is there.
        assert_eq!(
            HistoryCounts::open(&task(d)).unwrap().stats(),
            HistoryStats::default()
        );
    }

    /// Issue 38 item 7: fsck called a history rewritten under a mark that still holds (same
    /// length, same last line) clean; the checkpoint's running hash shows it.
    #[test]
    fn fsck_sees_a_history_rewritten_under_a_mark_that_holds() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let h = history();
        write_task(d, &h[..30], &[]);
        HistoryCounts::open(&task(d)).unwrap();
        // Appended, then counted from the checkpoint on: the chain goes on from its value.
        write_task(d, &h, &[]);
        HistoryCounts::open(&task(d)).unwrap();
        let cp: serde_json::Value =
            serde_json::from_slice(&fs::read(d.join(HISTORY_CHECKPOINT)).unwrap()).unwrap();
        let len = fs::metadata(d.join(MESSAGES)).unwrap().len();
        assert_eq!(cp["messages"]["bytes"], len);
        let mut file = fs::File::open(d.join(MESSAGES)).unwrap();
        let whole = HistoryHash::of_prefix(&mut file, len).unwrap().hex();
        assert_eq!(cp["history_hash"], whole.as_str());
        let mut fed = HistoryHash::default();
        for b in fs::read(d.join(MESSAGES)).unwrap().chunks(7) {
            fed.feed(b);
        }
        assert_eq!(fed.hex(), whole, "fed in any blocks, the same");
        verify_checkpoint(&task(d)).unwrap();
        // An earlier line rewritten, same length: the mark holds, the hash does not.
        let text = fs::read_to_string(d.join(MESSAGES)).unwrap();
        fs::write(d.join(MESSAGES), text.replacen("\"go\"", "\"no\"", 1)).unwrap();
        let e = format!("{:#}", verify_checkpoint(&task(d)).unwrap_err());
        assert!(
            e.contains("is not the history the host recorded") && e.contains("rewritten"),
            "{e}"
        );
        // A checkpoint of an older host (no hash) is still used.
        fs::write(d.join(MESSAGES), &text).unwrap();
        let mut old = cp.clone();
        old.as_object_mut().unwrap().remove("history_hash");
        fs::write(d.join(HISTORY_CHECKPOINT), old.to_string()).unwrap();
        verify_checkpoint(&task(d)).unwrap();
        assert_eq!(HistoryCounts::open(&task(d)).unwrap().bytes_read(), 0);
    }

    #[test]
    fn a_forged_torn_or_foreign_checkpoint_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let h = history();
        write_task(d, &h, &[]);
        HistoryCounts::open(&task(d)).unwrap();
        let good = fs::read_to_string(d.join(HISTORY_CHECKPOINT)).unwrap();
        let cp: serde_json::Value = serde_json::from_str(&good).unwrap();
        let len = fs::metadata(d.join(MESSAGES)).unwrap().len();
        let mut forged_mark = cp.clone();
        forged_mark["messages"]["last_line"] = "0123456789abcdef".into();
        let mut too_long = cp.clone();
        too_long["messages"]["bytes"] = (len + 10).into();
        let mut mid_line = cp.clone();
        mid_line["messages"]["bytes"] = (len - 3).into();
        let mut other_version = cp.clone();
        other_version["version"] = 99.into();
        let mut unknown_field = cp.clone();
        unknown_field["extra"] = 1.into();
        // More hashes than the counted bytes can hold calls: a forged set that would fill the
        // process's memory is not believed.
        let mut too_many = cp.clone();
        too_many["call_id_hashes"] = (0..=len / MIN_CALL_BYTES)
            .map(|n| serde_json::Value::from(format!("{n:016x}")))
            .collect();
        fs::write(d.join(HISTORY_CHECKPOINT), too_many.to_string()).unwrap();
        let e = verify_checkpoint(&task(d)).unwrap_err();
        assert!(format!("{e:#}").contains("call-id hashes"), "{e:#}");
        for (what, text) in [
            ("too many hashes", too_many.to_string()),
            ("forged mark", forged_mark.to_string()),
            ("longer than the file", too_long.to_string()),
            ("inside a line", mid_line.to_string()),
            ("other version", other_version.to_string()),
            ("unknown field", unknown_field.to_string()),
            ("torn", good[..good.len() / 2].to_string()),
            ("empty", String::new()),
        ] {
            // The stats are wrong on purpose: they must not be believed.
            let text = text.replace("\"agent_steps\":21", "\"agent_steps\":1");
            fs::write(d.join(HISTORY_CHECKPOINT), &text).unwrap();
            let counts = HistoryCounts::open(&task(d)).unwrap();
            assert_eq!(of(&counts), full(d), "{what}");
            assert_eq!(counts.bytes_read(), len, "{what}: a full read");
        }
        // A link in its place is not followed.
        fs::remove_file(d.join(HISTORY_CHECKPOINT)).unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        fs::write(elsewhere.path().join("cp.json"), &good).unwrap();
        std::os::unix::fs::symlink(elsewhere.path().join("cp.json"), d.join(HISTORY_CHECKPOINT))
            .unwrap();
        let counts = HistoryCounts::open(&task(d)).unwrap();
        assert_eq!(counts.bytes_read(), len, "link: a full read");
    }

    #[test]
    fn hashes_out_of_order_are_sorted_and_a_repeat_or_an_oversized_file_is_not_believed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write_task(d, &history(), &[]);
        let first = HistoryCounts::open(&task(d)).unwrap();
        let good: serde_json::Value =
            serde_json::from_slice(&fs::read(d.join(HISTORY_CHECKPOINT)).unwrap()).unwrap();
        let mut hashes = good["call_id_hashes"].as_array().unwrap().clone();
        hashes.reverse();
        let mut reversed = good.clone();
        reversed["call_id_hashes"] = hashes.clone().into();
        fs::write(d.join(HISTORY_CHECKPOINT), reversed.to_string()).unwrap();
        verify_checkpoint(&task(d)).unwrap();
        let again = HistoryCounts::open(&task(d)).unwrap();
        assert_eq!(again.bytes_read(), 0, "the checkpoint was used");
        assert_eq!(again.call_ids(), first.call_ids());
        assert_eq!(again.call_ids().len(), 20);

        let len = fs::metadata(d.join(MESSAGES)).unwrap().len();
        let mut repeated = good.clone();
        hashes.push(hashes[0].clone());
        repeated["call_id_hashes"] = hashes.into();
        // Padded past what this history's checkpoint can be: not parsed at all.
        let padded = format!(
            "{good}{}",
            " ".repeat((max_checkpoint_bytes(&task(d)) + 1) as usize)
        );
        for (what, text) in [("a repeat", repeated.to_string()), ("oversized", padded)] {
            fs::write(d.join(HISTORY_CHECKPOINT), &text).unwrap();
            assert!(verify_checkpoint(&task(d)).is_err(), "{what}");
            let counts = HistoryCounts::open(&task(d)).unwrap();
            assert_eq!(counts.bytes_read(), len, "{what}: a full read");
            assert_eq!(counts.call_ids(), first.call_ids(), "{what}");
        }
    }

    #[test]
    fn a_checkpoint_is_written_at_step_boundaries_every_mib_and_at_pause() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write_task(d, &history()[..2], &[]);
        let mut counts = HistoryCounts::open(&task(d)).unwrap();
        let written = || -> u64 {
            let cp: serde_json::Value =
                serde_json::from_slice(&fs::read(d.join(HISTORY_CHECKPOINT)).unwrap()).unwrap();
            cp["messages"]["bytes"].as_u64().unwrap()
        };
        let first = written();
        let t = task(d);
        let big = "x".repeat(64 * 1024);
        let mut seq = 2;
        let mut append = |n: usize| {
            for _ in 0..n {
                seq += 1;
                let line = HistoryLine {
                    seq,
                    role: "user".into(),
                    content: Some(big.clone()),
                    timestamp: "2025-01-01T00:00:00.000Z".into(),
                    tokens: 1,
                    tool_name: None,
                    tool_calls: None,
                    tool_call_id: None,
                    is_error: false,
                    reasoning: Vec::new(),
                    summary_id: None,
                };
                t.append_line(MESSAGES, &serde_json::to_string(&line).unwrap())
                    .unwrap();
            }
        };
        append(4);
        counts.advance(false).unwrap();
        assert_eq!(written(), first, "less than CHECKPOINT_EVERY: not yet");
        append(16);
        counts.advance(false).unwrap();
        let len = fs::metadata(d.join(MESSAGES)).unwrap().len();
        assert_eq!(written(), len, "past CHECKPOINT_EVERY: written");
        append(1);
        counts.advance(true).unwrap();
        let len = fs::metadata(d.join(MESSAGES)).unwrap().len();
        assert_eq!(written(), len, "forced (pause)");
        assert_eq!(of(&counts), full(d));
    }
}
