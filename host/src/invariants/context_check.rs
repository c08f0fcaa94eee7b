//! [`ContextCheck`]: the invariant check of a context file ([`super::ContextChecker`]) kept up to
//! a byte offset, so checking current.jsonl again — on resume, and before every request
//! ([`crate::task::TaskContext::ensure_sendable`]) — reads only the lines appended since the
//! last check, not the whole context.
//!
//! The state after a checked prefix (its [`FileMark`], its line count, the checker's counts and
//! the ids of the last assistant message's calls) is held by the task process and saved in
//! `context_checkpoint.json` ([`ctxhost_format::files::CONTEXT_CHECKPOINT`], schema
//! `docs/schemas/context_checkpoint.schema.json`) at step boundaries every
//! [`CHECKPOINT_EVERY`] bytes of growth and at pause, atomically through the task's
//! [`TaskDir`]. It is used only while its mark holds (the file is at least that long and the
//! line ending there hashes the same, [`FileMark::holds`]); a missing, unreadable, oversized,
//! other-version, other-file or stale checkpoint is ignored and the whole file is checked, as
//! without one (a compression or a repair replaces current.jsonl: the next check is whole). A
//! crash at any point costs at most a full check, never a wrong verdict on the files.
//!
//! A line longer than [`MAX_WHOLE_LINE_BYTES`] (256 KiB: a reply of many MiB) is not held: it
//! is scanned as it is read ([`ctxhost_format::long_line::Compactor`]), its long texts checked
//! as JSON strings, counted for the token estimate and left out, and the rest parsed as a
//! message. The verdict, the error texts and the tokens are those of the whole line; a line
//! whose long text the checker must read (a tool call's arguments, an id) or that is not valid
//! is read whole after all, to give the same verdict ([`ContextCheck::long_lines_held`]).
//!
//! Trust: like the history checkpoint ([`crate::task::history_counts`]), it lies in the task
//! directory and summarises a file the message store writes; it gives a component no power it
//! lacks over what is sent.

use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};

use ctxhost_format::checkpoint::{CHECKPOINT_VERSION, FileMark};
use ctxhost_format::files::{CONTEXT_CHECKPOINT, CURRENT};
use ctxhost_format::long_line::{Compactor, LIMITS};
use ctxhost_format::tokens::{MessageText, estimate_message_tokens_by};
use ctxhost_format::{ChatMessage, estimate_message_tokens, raw};
use serde::{Deserialize, Serialize};

use super::{ContextChecker, ContextFileError, ContextSummary};
use crate::checkpoint;
use crate::task_dir::{TaskDir, file_id};
use ctxhost_format::long_line::{MAX_WHOLE_LINE_BYTES, read_line_capped};

/// Growth of the context file, bytes, after which a step boundary saves the checkpoint.
pub const CHECKPOINT_EVERY: u64 = 1024 * 1024;

/// Largest checkpoint file read, bytes (it holds one message's call ids); a larger one is
/// ignored.
pub const MAX_CHECKPOINT_BYTES: u64 = 1024 * 1024;

/// The longest line a context file may have (bytes, its `\n` not counted): 64 MiB, about 16
/// million tokens, more than any model's window holds, so no line of a context that can be
/// sent is refused. A longer line, which only a hostile or broken component writes, is an
/// error naming file and line after reading at most this much of it, never a whole-line
/// allocation.
pub const MAX_CONTEXT_LINE_BYTES: usize = 64 * 1024 * 1024;

/// The check of a context file up to a prefix of it. `Default`: nothing checked (the next
/// [`ContextCheck::check`] reads the whole file).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextCheck {
    /// The file checked, relative to the task directory.
    file: String,
    /// The file's identity ([`file_id`]): a replaced file (a compression, a repair) is
    /// another file, whatever its length and last line.
    file_id: String,
    /// The prefix checked (ends with `\n`).
    mark: FileMark,
    /// Lines in that prefix, blank ones included (errors after it name line numbers).
    lines: u64,
    /// The checker's state after that prefix.
    checker: ContextChecker,
    /// Bytes read by this value's checks (not saved).
    #[serde(skip)]
    bytes_read: u64,
    /// Lines longer than [`MAX_WHOLE_LINE_BYTES`] this value's checks had to hold whole after
    /// all (not saved).
    #[serde(skip)]
    long_lines_held: u64,
}

/// `context_checkpoint.json`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Checkpoint {
    version: u32,
    #[serde(flatten)]
    check: ContextCheck,
}

impl checkpoint::Versioned for Checkpoint {
    fn version(&self) -> u32 {
        self.version
    }
}

/// For `ctxhost fsck` (its checkpoint check): why `dir`'s checkpoint would not be used by
/// the check of current.jsonl (unreadable, not of its shape or version, of another file, a
/// mark that no longer holds); `Ok` when there is none or it would be used.
pub fn verify_checkpoint(dir: &TaskDir) -> anyhow::Result<()> {
    let Some(cp) = checkpoint::read::<Checkpoint>(dir, CONTEXT_CHECKPOINT, MAX_CHECKPOINT_BYTES)?
    else {
        return Ok(());
    };
    let check = cp.check;
    if check.mark.bytes == 0 && check.file_id.is_empty() {
        // Nothing checked: the next check reads the whole file, as it would anyway.
        return Ok(());
    }
    anyhow::ensure!(
        check.file == CURRENT,
        "checks {:?}, not {CURRENT}",
        check.file
    );
    checkpoint::ensure_holds(dir, CURRENT, Some(&check.file_id), &check.mark)
}

impl ContextCheck {
    /// The saved check of `dir` (`context_checkpoint.json`), or nothing checked when it is
    /// missing or cannot be used (logged at debug level).
    pub fn load(dir: &TaskDir) -> ContextCheck {
        checkpoint::load::<Checkpoint>(
            dir,
            CONTEXT_CHECKPOINT,
            MAX_CHECKPOINT_BYTES,
            "the context is checked whole",
        )
        .map(|cp| cp.check)
        .unwrap_or_default()
    }

    /// Save this check as `dir`'s `context_checkpoint.json` (atomically). A check of a file
    /// that has since been replaced (a compression installed a new current.jsonl) would be
    /// stale at once: the checkpoint is deleted instead.
    pub fn save(&self, dir: &TaskDir) -> io::Result<()> {
        if !self.file.is_empty()
            && let Some(f) = dir.open_read_if_exists(&self.file)?
            && file_id(&f)? != self.file_id
        {
            return dir.remove_file_if_exists(CONTEXT_CHECKPOINT).map(drop);
        }
        let cp = Checkpoint {
            version: CHECKPOINT_VERSION,
            check: self.clone(),
        };
        dir.write_atomic(CONTEXT_CHECKPOINT, &serde_json::to_vec(&cp)?)
    }

    /// Bytes of the prefix checked.
    pub fn checked_bytes(&self) -> u64 {
        self.mark.bytes
    }

    /// Bytes read by this value's checks so far (the line before the mark, read again to check
    /// it, is not counted).
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// Lines longer than [`MAX_WHOLE_LINE_BYTES`] that this value's checks read whole after all
    /// (see [`ctxhost_format::long_line`] for when); the others were checked as they were read,
    /// their long texts never held.
    pub fn long_lines_held(&self) -> u64 {
        self.long_lines_held
    }

    /// Check the context file `name` of `dir` like [`super::check_context_file`], reading only
    /// what follows the checked prefix when its mark still holds (else the whole file); the
    /// checked prefix then extends to the file's last whole line. A last line without `\n` is
    /// checked but not kept (it may still be being written). On error the prefix stays as it
    /// was (or nothing, when the mark no longer held).
    pub fn check(
        &mut self,
        dir: &TaskDir,
        name: &str,
        allow_pending_tail: bool,
    ) -> Result<ContextSummary, ContextFileError> {
        let file = dir.show(name);
        let io = |source| ContextFileError::Io {
            file: file.clone(),
            source,
        };
        let mut f = dir.open_read(name).map_err(io)?;
        let len = f.seek(SeekFrom::End(0)).map_err(io)?;
        let id = file_id(&f).map_err(io)?;
        let holds = self.file == name
            && self.file_id == id
            && self
                .mark
                .holds(&mut f, len, &file)
                .map_err(|e| io(io::Error::other(e.to_string())))?;
        if !holds {
            *self = ContextCheck {
                file: name.to_string(),
                file_id: id,
                bytes_read: self.bytes_read,
                long_lines_held: self.long_lines_held,
                ..ContextCheck::default()
            };
        }
        let from = self.mark.bytes;
        f.seek(SeekFrom::Start(from)).map_err(io)?;
        let mut reader = BufReader::with_capacity(256 * 1024, (&mut f).take(len - from));
        let mut checker = self.checker.clone();
        let mut line_no = self.lines;
        let mut end = from;
        // Where the last whole line ends, and the checker's state there when a last line
        // without `\n` followed it.
        let (mut whole_lines, mut whole_end, mut before_unterminated) = (self.lines, from, None);
        let mut buf = Vec::new();
        let cap = MAX_CONTEXT_LINE_BYTES as u64 + 1;
        loop {
            buf.clear();
            let n = read_line_capped(&mut reader, &mut buf, MAX_WHOLE_LINE_BYTES).map_err(io)?;
            if n == 0 {
                break;
            }
            let start = end;
            let mut long = None;
            let mut n = n as u64;
            if buf.len() > MAX_WHOLE_LINE_BYTES && buf.last() != Some(&b'\n') {
                // A line longer than the cap (a reply's text of many MiB): scanned as it is
                // read, its long strings counted and left out (`Compactor`), never held.
                let mut compactor = Compactor::new(start, LIMITS);
                compactor.push(&buf);
                let (rest, ended) = scan_rest(&mut reader, &mut compactor, cap - n).map_err(io)?;
                n += rest;
                buf.clear();
                long = Some((compactor, ended));
            }
            self.bytes_read += n;
            line_no += 1;
            let terminated = match &long {
                Some((_, ended)) => *ended,
                None => buf.last() == Some(&b'\n'),
            };
            if n == cap && !terminated {
                return Err(ContextFileError::LineTooLong {
                    file: file.clone(),
                    line: line_no,
                    max: MAX_CONTEXT_LINE_BYTES,
                });
            }
            end += n;
            if terminated {
                whole_lines = line_no;
                whole_end = end;
            } else {
                before_unterminated = Some(checker.clone());
            }
            let counted = match long.as_ref().and_then(|(c, _)| long_message(c)) {
                Some(counted) => Some(counted),
                None => {
                    if long.is_some() {
                        // Not one the scan can check without its text: read whole after all.
                        self.long_lines_held += 1;
                        let inner = reader.get_mut().get_mut();
                        let resume = inner.stream_position().map_err(io)?;
                        inner.seek(SeekFrom::Start(start)).map_err(io)?;
                        buf.resize(n as usize, 0);
                        inner.read_exact(&mut buf).map_err(io)?;
                        inner.seek(SeekFrom::Start(resume)).map_err(io)?;
                    }
                    // As `BufRead::lines`: without its `\n` or `\r\n`, UTF-8 or an I/O error.
                    let mut bytes = &buf[..];
                    if let Some(b) = bytes.strip_suffix(b"\n") {
                        bytes = b.strip_suffix(b"\r").unwrap_or(b);
                    }
                    let line = std::str::from_utf8(bytes).map_err(|_| {
                        io(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "stream did not contain valid UTF-8",
                        ))
                    })?;
                    if line.trim().is_empty() {
                        None
                    } else {
                        let message: ChatMessage =
                            serde_json::from_str(line).map_err(|e| ContextFileError::Parse {
                                file: file.clone(),
                                line: line_no,
                                // serde quotes the value it did not expect, which a component
                                // wrote.
                                reason: crate::untrusted::text(
                                    &e.to_string(),
                                    crate::untrusted::MAX_ERROR_BYTES,
                                )
                                .into_owned(),
                            })?;
                        let tokens = estimate_message_tokens(&message);
                        Some((message, tokens))
                    }
                }
            };
            if let Some((message, tokens)) = counted {
                checker
                    .push_counted(&message, tokens)
                    .map_err(|violation| ContextFileError::Violation {
                        file: file.clone(),
                        line: line_no,
                        violation,
                    })?;
            }
        }
        drop(reader);
        if whole_end != self.mark.bytes
            && let Ok(Some(mark)) = FileMark::of(&mut f, whole_end, &file)
        {
            self.mark = mark;
            self.lines = whole_lines;
            self.checker = before_unterminated.unwrap_or_else(|| checker.clone());
        }
        checker
            .finish(allow_pending_tail)
            .map_err(|violation| ContextFileError::AtEnd { file, violation })
    }
}

/// Reads the rest of a long line from `reader` into `compactor`, up to and including its
/// `\n` (not handed on) and at most `room` bytes: returns the bytes read and whether the
/// `\n` was among them.
fn scan_rest(
    reader: &mut impl BufRead,
    compactor: &mut Compactor,
    room: u64,
) -> io::Result<(u64, bool)> {
    let mut read = 0u64;
    while read < room {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            break;
        }
        let window = &available[..available.len().min((room - read) as usize)];
        if let Some(at) = window.iter().position(|b| *b == b'\n') {
            compactor.push(&window[..at]);
            reader.consume(at + 1);
            return Ok((read + at as u64 + 1, true));
        }
        let used = window.len();
        compactor.push(window);
        reader.consume(used);
        read += used as u64;
    }
    Ok((read, false))
}

/// The message of a long line scanned by `compactor` and its estimated tokens, its long texts
/// counted as they were read; `None` when the line must be read whole to be checked: the scan
/// could not compact it, the compact line is not a chat message (the whole line's parse then
/// gives the error), or a text the checker reads (role, tool call id, a call's id or
/// arguments) is one left out.
fn long_message(compactor: &Compactor) -> Option<(ChatMessage, u64)> {
    let compact = compactor.finish()?;
    let message: ChatMessage = serde_json::from_slice(compact).ok()?;
    let fields = raw::parse_line(compact).ok()?;
    let left_out = |s: Option<raw::RawStr<'_>>| s.and_then(|s| compactor.placeholder(s.json()));
    if left_out(Some(fields.role)).is_some()
        || left_out(fields.tool_call_id).is_some()
        || fields
            .tool_calls
            .iter()
            .any(|c| left_out(Some(c.id)).is_some() || left_out(Some(c.arguments)).is_some())
    {
        return None;
    }
    let tokens = estimate_message_tokens_by(&message, |field, text| {
        let raw = match field {
            MessageText::Content => fields.content,
            MessageText::CallName(i) => fields.tool_calls.get(i).map(|c| c.name),
            MessageText::CallArguments(i) => fields.tool_calls.get(i).map(|c| c.arguments),
        };
        match left_out(raw) {
            Some(index) => compactor.tokens(index),
            None => ctxhost_format::estimate_tokens(text),
        }
    });
    Some((message, tokens))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::check_context_file;
    use crate::repair::testing::{call, result, sys};
    use std::fs;

    fn line(m: &ChatMessage) -> String {
        serde_json::to_string(m).unwrap() + "\n"
    }

    fn context(n: usize) -> String {
        let mut text = line(&sys()) + &line(&ChatMessage::text("user", "go"));
        for i in 0..n {
            let id = format!("c{i}");
            text += &line(&call(&[&id]));
            text += &line(&result(&id));
        }
        text
    }

    /// What the whole-line path gives for `messages`: each parsed and pushed.
    fn reference(messages: &[ChatMessage]) -> Result<ContextSummary, String> {
        let mut checker = ContextChecker::default();
        for (i, m) in messages.iter().enumerate() {
            checker
                .push(m)
                .map_err(|v| format!("current.jsonl:{}: {v}", i + 1))?;
        }
        checker.finish(false).map_err(|v| v.to_string())
    }

    /// Text of more than 256 KiB (a line too long to hold) with escapes, CJK, emoji and
    /// controls.
    fn long_text(seed: &str) -> String {
        format!("{seed} \"q\" \\ /\n\t\u{1}\u{e9}\u{4e2d}\u{1F600}\r").repeat(300 * 1024 / 20)
    }

    #[test]
    fn long_lines_are_checked_as_read_with_the_whole_line_verdict_and_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let task = TaskDir::open(dir.path()).unwrap();
        let mut calls = call(&["a", "b"]);
        calls.content = Some(long_text("reply"));
        if let Some(c) = calls.tool_calls.as_mut() {
            c[1].function.name = long_text("name");
        }
        let mut answer = ChatMessage::text("assistant", long_text("end"));
        answer.reasoning = vec![ctxhost_format::ReasoningItem {
            provider: "anthropic".into(),
            kind: "thinking".into(),
            data: long_text("thinking"),
        }];
        let mut long_result = result("b");
        long_result.content = Some(long_text("result"));
        let good = vec![
            sys(),
            ChatMessage::text("user", long_text("ask")),
            calls.clone(),
            result("a"),
            long_result.clone(),
            answer,
        ];
        let mut bad_arguments = calls.clone();
        if let Some(c) = bad_arguments.tool_calls.as_mut() {
            c[0].function.arguments = format!("{{\"x\": {}", long_text("args").len());
            c[1].function.arguments = format!("[{}]", serde_json::json!(long_text("args")));
        }
        let orphan = vec![sys(), ChatMessage::text("user", "go"), long_result.clone()];
        for (what, messages) in [
            ("good", good.clone()),
            (
                "arguments",
                vec![sys(), ChatMessage::text("user", "go"), bad_arguments],
            ),
            ("orphan", orphan),
        ] {
            let text: String = messages.iter().map(line).collect();
            assert!(
                text.lines()
                    .filter(|l| l.len() > MAX_WHOLE_LINE_BYTES)
                    .count()
                    >= 1
            );
            fs::write(dir.path().join("current.jsonl"), &text).unwrap();
            let mut check = ContextCheck::default();
            let got = check
                .check(&task, "current.jsonl", false)
                .map_err(|e| e.to_string());
            let expected = reference(&messages);
            match (&got, &expected) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{what}"),
                (Err(a), Err(b)) => assert!(a.ends_with(b.as_str()), "{what}: {a} vs {b}"),
                _ => panic!("{what}: {got:?} vs {expected:?}"),
            }
            assert_eq!(check.bytes_read(), text.len() as u64, "{what}");
            // Only a line whose long text is a call's arguments is held whole.
            let held = if what == "arguments" { 1 } else { 0 };
            assert_eq!(check.long_lines_held(), held, "{what}");
        }
        // Invalid long lines give the whole line's parse error (serde's text and column).
        let good_text: String = good[..2].iter().map(line).collect();
        for bad in [
            format!(
                "{{\"role\":\"user\",\"content\":\"{}\\ud800\"}}",
                "x".repeat(300_000)
            ),
            format!(
                "{{\"role\":\"user\",\"content\":\"{}\tz\"}}",
                "x".repeat(300_000)
            ),
            format!(
                "{{\"role\":\"user\",\"content\":\"{}\"}} x",
                "x".repeat(300_000)
            ),
            format!("{{\"role\":7,\"content\":\"{}\"}}", "x".repeat(300_000)),
        ] {
            fs::write(
                dir.path().join("current.jsonl"),
                good_text.clone() + &bad + "\n",
            )
            .unwrap();
            let e = ContextCheck::default()
                .check(&task, "current.jsonl", false)
                .unwrap_err();
            let reason = serde_json::from_str::<ChatMessage>(&bad).unwrap_err();
            assert!(
                matches!(&e, ContextFileError::Parse { line: 3, reason: r, .. } if *r == reason.to_string()),
                "{e}"
            );
        }
        // A long last line without its `\n` is checked, and the checked prefix stops before it.
        let text: String = good[..5].iter().map(line).collect();
        let last = line(&good[5]);
        fs::write(
            dir.path().join("current.jsonl"),
            text.clone() + last.trim_end(),
        )
        .unwrap();
        let mut check = ContextCheck::default();
        assert_eq!(
            check.check(&task, "current.jsonl", false).unwrap(),
            reference(&good).unwrap()
        );
        assert_eq!(check.checked_bytes(), text.len() as u64);
    }

    #[test]
    fn a_line_over_the_cap_is_an_error_naming_file_and_line_after_reading_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let task = TaskDir::open(dir.path()).unwrap();
        let head = context(1);
        let long = format!(
            "{{\"role\":\"user\",\"content\":\"{}\"}}",
            "x".repeat(MAX_CONTEXT_LINE_BYTES)
        );
        fs::write(
            dir.path().join("current.jsonl"),
            head.clone() + &long + "\n",
        )
        .unwrap();
        let mut check = ContextCheck::default();
        let e = check.check(&task, "current.jsonl", false).unwrap_err();
        assert!(
            matches!(e, ContextFileError::LineTooLong { line: 5, .. }),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("current.jsonl:5: longer than 67108864 bytes"),
            "{e}"
        );
        assert!(check.bytes_read() <= (head.len() + MAX_CONTEXT_LINE_BYTES + 1) as u64);
        // A line of exactly the cap is read.
        let exact = "x".repeat(MAX_CONTEXT_LINE_BYTES - r#"{"role":"user","content":""}"#.len());
        let exact = format!(r#"{{"role":"user","content":"{exact}"}}"#);
        assert_eq!(exact.len(), MAX_CONTEXT_LINE_BYTES);
        fs::write(dir.path().join("current.jsonl"), head + &exact + "\n").unwrap();
        ContextCheck::default()
            .check(&task, "current.jsonl", false)
            .unwrap();
    }

    #[test]
    fn a_check_from_the_checkpoint_reads_only_what_was_appended_and_agrees_with_a_full_one() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let task = TaskDir::open(d).unwrap();
        let p = d.join("current.jsonl");
        let first = context(20);
        fs::write(&p, &first).unwrap();
        let mut check = ContextCheck::default();
        let s = check.check(&task, "current.jsonl", false).unwrap();
        assert_eq!(
            s,
            check_context_file(&task, "current.jsonl", false).unwrap()
        );
        assert_eq!(check.bytes_read(), first.len() as u64);
        check.save(&task).unwrap();
        // Appended: a new check (from the saved file) reads only the new lines. A line before
        // the mark damaged in place is not read.
        let more = line(&call(&["z"])) + &line(&result("z"));
        fs::write(&p, first.replacen("go", "GO", 1) + &more).unwrap();
        let mut again = ContextCheck::load(&task);
        let s = again.check(&task, "current.jsonl", false).unwrap();
        assert_eq!(again.bytes_read(), more.len() as u64);
        fs::write(&p, first.clone() + &more).unwrap();
        assert_eq!(
            s,
            check_context_file(&task, "current.jsonl", false).unwrap()
        );
        // A violation after the mark is named by its line in the whole file.
        fs::write(&p, first.clone() + &line(&result("nobody"))).unwrap();
        let e = ContextCheck::load(&task)
            .check(&task, "current.jsonl", false)
            .unwrap_err();
        let full = check_context_file(&task, "current.jsonl", false).unwrap_err();
        assert_eq!(e.to_string(), full.to_string());
        assert!(e.to_string().contains(":43:"), "{e}");
        // Calls pending at the mark are still known after it.
        fs::write(&p, first.clone() + &line(&call(&["p", "q"]))).unwrap();
        let mut c = ContextCheck::load(&task);
        c.check(&task, "current.jsonl", true).unwrap();
        c.save(&task).unwrap();
        fs::write(
            &p,
            first.clone() + &line(&call(&["p", "q"])) + &line(&result("q")),
        )
        .unwrap();
        let mut c = ContextCheck::load(&task);
        let e = c.check(&task, "current.jsonl", false).unwrap_err();
        assert_eq!(
            e.to_string(),
            check_context_file(&task, "current.jsonl", false)
                .unwrap_err()
                .to_string()
        );
        assert!(c.check(&task, "current.jsonl", true).is_ok());
    }

    #[test]
    fn a_stale_forged_torn_or_foreign_checkpoint_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let task = TaskDir::open(d).unwrap();
        let p = d.join("current.jsonl");
        let text = context(10);
        fs::write(&p, &text).unwrap();
        let mut check = ContextCheck::default();
        check.check(&task, "current.jsonl", false).unwrap();
        check.save(&task).unwrap();
        let good = fs::read_to_string(d.join(CONTEXT_CHECKPOINT)).unwrap();
        let cp: serde_json::Value = serde_json::from_str(&good).unwrap();
        let mut forged = cp.clone();
        forged["mark"]["last_line"] = "0123456789abcdef".into();
        let mut other_file = cp.clone();
        other_file["file"] = "compressed.jsonl".into();
        let mut other_version = cp.clone();
        other_version["version"] = 2.into();
        for (what, cp) in [
            ("forged mark", forged.to_string()),
            ("other file", other_file.to_string()),
            ("other version", other_version.to_string()),
            ("torn", good[..good.len() / 2].to_string()),
        ] {
            fs::write(d.join(CONTEXT_CHECKPOINT), cp).unwrap();
            let mut c = ContextCheck::load(&task);
            c.check(&task, "current.jsonl", false).unwrap();
            assert_eq!(c.bytes_read(), text.len() as u64, "{what}: a full check");
        }
        // The context replaced (as a compression or a repair does: atomically) by one with a
        // violation, of the same length and last line: the checkpoint of the old one does not
        // hide it.
        fs::write(d.join(CONTEXT_CHECKPOINT), &good).unwrap();
        let broken = context(10).replacen("\"c3\"", "\"c4\"", 1);
        assert_eq!(broken.len(), text.len(), "same length, same last line");
        task.write_atomic("current.jsonl", broken.as_bytes())
            .unwrap();
        let e = ContextCheck::load(&task).check(&task, "current.jsonl", false);
        assert!(e.is_err(), "the replaced context is checked whole");
        // A context cut short (same start): the mark is past its end.
        fs::write(&p, &text[..text.len() / 2]).unwrap();
        fs::write(d.join(CONTEXT_CHECKPOINT), &good).unwrap();
        let mut c = ContextCheck::load(&task);
        let _ = c.check(&task, "current.jsonl", true);
        assert_eq!(c.bytes_read(), (text.len() / 2) as u64);
    }
}
