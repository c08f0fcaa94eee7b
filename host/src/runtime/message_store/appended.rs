//! The host's check of what a message store appended (issue 38 item 7): after each
//! `add-message` / `add-message-file`, what the host can check cheaply, from the byte lengths
//! of messages.jsonl and the current-context file measured before the call:
//!
//! - each file grew by exactly one whole line (no torn line, no second line, nothing cut);
//! - the new line of messages.jsonl parses, and its seq is the one after the last (no gap, no
//!   repeat) and the one the store answered;
//! - the message in both new lines is the one the host gave (role, text, tool calls and ids,
//!   tool name, error flag and reasoning items), the text of `add-message-file` compared with
//!   its file.
//!
//! A new line longer than [`MAX_CHECKED_LINE_BYTES`] (1 MiB: a long reply, whose text came in a
//! file) is not parsed: it is read in blocks and must be one line holding the right seq at its
//! start. So the check's memory is bounded whatever the reply's size (a 20 MB reply is appended
//! in flat memory, issue 26; parsing its two lines whole cost +77 MiB of peak RSS).

use std::io::Read;
use std::path::Path;

use ctxhost_format::files::MESSAGES;
use ctxhost_format::{ChatMessage, HistoryLine};

use crate::runtime::AddedMessage;
use crate::task_dir::TaskDir;

/// Longest new line parsed and compared whole, bytes (1 MiB).
pub(crate) const MAX_CHECKED_LINE_BYTES: u64 = 1024 * 1024;

/// The two files' lengths before an append, and the seq the new message must have.
pub(crate) struct Marks {
    dir: TaskDir,
    messages_len: u64,
    current: String,
    current_len: u64,
    expected_seq: Option<u64>,
}

impl Marks {
    /// The marks of the task directory at `task_dir`, whose current-context file is `current`
    /// (as the store named it: checked here); `last_seq` the seq of the last line of
    /// messages.jsonl if known. `None` when they cannot be measured.
    pub(crate) fn of(task_dir: &Path, current: String, last_seq: Option<u64>) -> Option<Marks> {
        let dir = TaskDir::open(task_dir).ok()?;
        let current = crate::untrusted::component_path(&dir, &current).ok()?;
        let len =
            |name: &str| -> Option<u64> { Some(dir.metadata(name).ok()?.map_or(0, |m| m.len())) };
        Some(Marks {
            messages_len: len(MESSAGES)?,
            current_len: len(&current)?,
            current,
            expected_seq: last_seq.map(|s| s + 1),
            dir,
        })
    }
}

/// What one file gained: its one new line, parsed as `T` when not longer than
/// [`MAX_CHECKED_LINE_BYTES`] (`None` then), and the line's first bytes. Errors: what is wrong.
fn new_line<T: serde::de::DeserializeOwned>(
    dir: &TaskDir,
    name: &str,
    before: u64,
) -> Result<(Option<T>, Vec<u8>), String> {
    let shown = dir.show(name);
    let mut file = dir
        .open_read_if_exists(name)
        .map_err(|e| format!("{shown}: {e}"))?
        .ok_or_else(|| format!("{shown} is gone after the append"))?;
    let after = file.metadata().map_err(|e| format!("{shown}: {e}"))?.len();
    if after < before {
        return Err(format!(
            "{shown} shrank from {before} to {after} bytes during the append"
        ));
    }
    if after == before {
        return Err(format!("{shown} got no line"));
    }
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(before))
        .map_err(|e| format!("{shown}: {e}"))?;
    let new = after - before;
    let mut reader = std::io::BufReader::with_capacity(256 * 1024, file.take(new));
    let mut head = Vec::new();
    let mut whole = Vec::new();
    let mut breaks = 0u64;
    let mut last = 0u8;
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = reader.read(&mut buf).map_err(|e| format!("{shown}: {e}"))?;
        if n == 0 {
            break;
        }
        let block = &buf[..n];
        breaks += block.iter().filter(|b| **b == b'\n').count() as u64;
        last = block[n - 1];
        if head.len() < 256 {
            head.extend_from_slice(&block[..n.min(256 - head.len())]);
        }
        if new <= MAX_CHECKED_LINE_BYTES {
            whole.extend_from_slice(block);
        }
    }
    if last != b'\n' {
        return Err(format!(
            "{shown} ends with a torn line ({new} bytes appended without a line break)"
        ));
    }
    if breaks != 1 {
        return Err(format!(
            "{shown} got {breaks} lines for one message ({new} bytes)"
        ));
    }
    if new > MAX_CHECKED_LINE_BYTES {
        return Ok((None, head));
    }
    let value = serde_json::from_slice(&whole)
        .map_err(|e| format!("{shown}: the appended line does not parse: {e}"))?;
    Ok((Some(value), head))
}

/// What differs between the message `given` and the one `got` (field names), empty when none.
fn differences(given: &ChatMessage, got: &ChatMessage) -> Vec<&'static str> {
    let mut out = Vec::new();
    if given.role != got.role {
        out.push("role");
    }
    if given.content != got.content {
        out.push("content");
    }
    if given.tool_calls != got.tool_calls {
        out.push("tool_calls");
    }
    if given.tool_call_id != got.tool_call_id {
        out.push("tool_call_id");
    }
    if given.tool_name != got.tool_name {
        out.push("tool_name");
    }
    if given.is_error != got.is_error {
        out.push("is_error");
    }
    if given.reasoning != got.reasoning {
        out.push("reasoning");
    }
    out
}

/// The message a history line holds.
fn message_of(line: &HistoryLine) -> ChatMessage {
    ChatMessage {
        role: line.role.clone(),
        content: line.content.clone(),
        tool_calls: line.tool_calls.clone(),
        tool_call_id: line.tool_call_id.clone(),
        tool_name: line.tool_name.clone(),
        is_error: line.is_error,
        reasoning: line.reasoning.clone(),
    }
}

/// The seq at the start of a history line (`{"seq":N,…`), if there.
fn seq_at_start(head: &[u8]) -> Option<u64> {
    let rest = head.strip_prefix(b"{\"seq\":")?;
    let digits: Vec<u8> = rest
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .copied()
        .collect();
    std::str::from_utf8(&digits).ok()?.parse().ok()
}

/// Check what the store appended for `message` (its text in `content_file` when given), which
/// it answered as `added` (module doc). Errors: what is wrong, naming the file.
pub(crate) fn check(
    marks: &Marks,
    message: &ChatMessage,
    content_file: Option<&str>,
    added: AddedMessage,
) -> Result<(), String> {
    let dir = &marks.dir;
    if let Some(seq) = marks.expected_seq.filter(|s| *s != added.seq) {
        return Err(format!(
            "it answered seq {} for the message after seq {} (seqs run from 1 without gaps or repeats)",
            added.seq,
            seq - 1
        ));
    }
    let mut given = message.clone();
    if let Some(file) = content_file {
        let len = dir
            .metadata(file)
            .map_err(|e| format!("{}: {e}", dir.show(file)))?
            .map_or(0, |m| m.len());
        given.content = if len <= MAX_CHECKED_LINE_BYTES {
            let bytes = dir
                .read_bounded(file, MAX_CHECKED_LINE_BYTES)
                .map_err(|e| format!("{}: {e}", dir.show(file)))?;
            Some(String::from_utf8_lossy(&bytes).into_owned())
        } else {
            None
        };
    }
    let given_full = content_file.is_none() || given.content.is_some();
    let (history, head) = new_line::<HistoryLine>(dir, MESSAGES, marks.messages_len)?;
    let seq = match &history {
        Some(line) => Some(line.seq),
        None => seq_at_start(&head),
    };
    if seq != Some(added.seq) {
        return Err(format!(
            "{}: the appended line has seq {} but the store answered seq {}",
            dir.show(MESSAGES),
            seq.map_or("none".to_string(), |s| s.to_string()),
            added.seq
        ));
    }
    let (current, _) = new_line::<ChatMessage>(dir, &marks.current, marks.current_len)?;
    if let Some(line) = &history {
        let got = message_of(line);
        let mut diff = differences(&given, &got);
        if !given_full {
            diff.retain(|f| *f != "content");
        }
        if !diff.is_empty() {
            return Err(format!(
                "{} seq {}: the appended message is not the one the host gave ({} differ)",
                dir.show(MESSAGES),
                line.seq,
                diff.join(", ")
            ));
        }
        if let Some(current) = &current {
            let diff = differences(&got, current);
            if !diff.is_empty() {
                return Err(format!(
                    "{} and {} got different messages for seq {} ({} differ)",
                    dir.show(MESSAGES),
                    dir.show(&marks.current),
                    line.seq,
                    diff.join(", ")
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(lines: &[&str]) -> (tempfile::TempDir, Marks) {
        let tmp = tempfile::tempdir().unwrap();
        let first = HistoryLine::of(1, &ChatMessage::text("user", "go"), "t");
        std::fs::write(
            tmp.path().join(MESSAGES),
            serde_json::to_string(&first).unwrap() + "\n",
        )
        .unwrap();
        std::fs::write(
            tmp.path().join("current.jsonl"),
            "{\"role\":\"user\",\"content\":\"go\"}\n",
        )
        .unwrap();
        let marks = Marks::of(tmp.path(), "current.jsonl".into(), Some(1)).unwrap();
        let append = |name: &str, text: &str| {
            use std::io::Write;
            std::fs::OpenOptions::new()
                .append(true)
                .open(tmp.path().join(name))
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
        };
        append(MESSAGES, lines[0]);
        append("current.jsonl", lines[1]);
        (tmp, marks)
    }

    fn line(seq: u64, text: &str) -> String {
        serde_json::to_string(&HistoryLine::of(
            seq,
            &ChatMessage::text("assistant", text),
            "t",
        ))
        .unwrap()
            + "\n"
    }

    /// Issue 38 item 7: made-up text, a torn line, a seq gap or repeat and different lines in
    /// the two files all ended `completed`; each is named now.
    #[test]
    fn what_a_store_appended_is_checked() {
        let reply = ChatMessage::text("assistant", "the answer");
        let added = AddedMessage { seq: 2, tokens: 3 };
        let current = "{\"role\":\"assistant\",\"content\":\"the answer\"}\n";
        let (_t, m) = setup(&[&line(2, "the answer"), current]);
        check(&m, &reply, None, added).unwrap();
        for (lines, answered, error) in [
            (
                [line(2, "made-up text"), current.to_string()],
                2,
                "seq 2: the appended message is not the one the host gave (content differ)",
            ),
            (
                [
                    line(2, "the answer").trim_end().to_string(),
                    current.to_string(),
                ],
                2,
                "ends with a torn line",
            ),
            (
                [line(3, "the answer"), current.to_string()],
                3,
                "it answered seq 3 for the message after seq 1",
            ),
            (
                [line(3, "the answer"), current.to_string()],
                2,
                "the appended line has seq 3 but the store answered seq 2",
            ),
            (
                [
                    line(2, "the answer") + &line(2, "the answer"),
                    current.to_string(),
                ],
                2,
                "got 2 lines for one message",
            ),
            (
                [
                    line(2, "the answer"),
                    "{\"role\":\"assistant\",\"content\":\"other\"}\n".to_string(),
                ],
                2,
                "current.jsonl got different messages for seq 2 (content differ)",
            ),
            (
                [line(2, "the answer"), String::new()],
                2,
                "current.jsonl got no line",
            ),
        ] {
            let (_t, m) = setup(&[&lines[0], &lines[1]]);
            let added = AddedMessage {
                seq: answered,
                tokens: 3,
            };
            let e = check(&m, &reply, None, added).unwrap_err();
            assert!(e.contains(error), "{e}\nwanted: {error}");
        }
        // The text of add-message-file is compared with its file.
        let (t, m) = setup(&[&line(2, "the answer"), current]);
        std::fs::write(t.path().join("reply.content"), "the answer").unwrap();
        let mut no_text = reply.clone();
        no_text.content = None;
        check(&m, &no_text, Some("reply.content"), added).unwrap();
        std::fs::write(t.path().join("reply.content"), "another answer").unwrap();
        let e = check(&m, &no_text, Some("reply.content"), added).unwrap_err();
        assert!(e.contains("content differ"), "{e}");
    }
}
