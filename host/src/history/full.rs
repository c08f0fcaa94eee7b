//! [`read_full`]: the full text of a tool result that was cut in messages.jsonl (its
//! `tool-results/N.txt`, named by the tool store's note), a window at a time from a byte
//! offset, within a budget: a cut output can be paged to its end (issue 38 item 12).

use std::io::{Read, Seek, SeekFrom};

use super::HistoryError;
use super::read::{Budget, for_each_line};
use super::search::spilled_file;
use crate::task_dir::TaskDir;

/// A window of a cut tool result's full text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FullPage {
    /// The tool result's file, relative to the task directory (`tool-results/N.txt`).
    pub file: String,
    /// The tool that produced it, if the message names it.
    pub tool_name: Option<String>,
    /// The text given (UTF-8; bytes that are not are shown as U+FFFD).
    pub text: String,
    /// First byte of the file given.
    pub start: u64,
    /// The byte after the last one given.
    pub end: u64,
    /// Bytes of the whole file.
    pub len: u64,
}

/// The full text of the tool result at seq `seq` of messages.jsonl of `dir`, from byte
/// `offset` of its file (moved back to a character's start when inside one), as much as
/// `budget` holds (at least one character unless at the end). Errors: no message `seq`, a
/// message that is not a cut tool result (naming what it is), its file gone, an unreadable file
/// (naming it).
pub fn read_full(
    dir: &TaskDir,
    seq: u64,
    offset: u64,
    budget: Budget,
) -> Result<FullPage, HistoryError> {
    if seq == 0 {
        return Err(HistoryError::Argument(
            "`from_seq` must be at least 1".into(),
        ));
    }
    let mut found = None;
    for_each_line(dir, seq, seq, |line| {
        found = Some(line);
        false
    })?;
    let line = found
        .ok_or_else(|| HistoryError::Argument(format!("there is no message with seq {seq}")))?;
    let file = (line.role == "tool")
        .then(|| spilled_file(line.content.as_deref().unwrap_or("")))
        .flatten()
        .ok_or_else(|| {
            HistoryError::Argument(format!(
                "message {seq} ({}) is not a tool output that was cut: `full` reads only those (read the message itself without `full`)",
                line.role
            ))
        })?;
    let mut f = dir
        .open_read_if_exists(&file)
        .map_err(|e| HistoryError::io(dir, &file, e))?
        .ok_or_else(|| HistoryError::Io {
            file: dir.show(&file),
            message: "no longer exists".into(),
        })?;
    let io = |e: std::io::Error| HistoryError::io(dir, &file, e);
    let len = f.metadata().map_err(io)?.len();
    let mut start = offset.min(len);
    // Back to the start of the character `start` is inside (at most 3 bytes back).
    if start > 0 && start < len {
        let back = start.saturating_sub(3);
        let mut head = vec![0u8; (start - back + 1) as usize];
        f.seek(SeekFrom::Start(back)).map_err(io)?;
        f.read_exact(&mut head).map_err(io)?;
        let mut at = head.len() - 1;
        while at > 0 && head[at] & 0xC0 == 0x80 {
            at -= 1;
        }
        start = back + at as u64;
    }
    f.seek(SeekFrom::Start(start)).map_err(io)?;
    let mut bytes = Vec::new();
    f.take(budget.max_bytes())
        .read_to_end(&mut bytes)
        .map_err(io)?;
    // A character cut at the end of what was read is left for the next window.
    let whole = match std::str::from_utf8(&bytes) {
        Ok(_) => bytes.len(),
        Err(e) if e.error_len().is_none() && e.valid_up_to() > 0 => e.valid_up_to(),
        Err(_) => bytes.len(),
    };
    bytes.truncate(whole);
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let fits = budget.cost(&text) <= budget.limit();
    let keep = if fits {
        text.len()
    } else {
        budget.window(&text)
    };
    let kept_bytes = file_bytes_of(&bytes, keep);
    let mut text = text;
    text.truncate(keep);
    Ok(FullPage {
        file,
        tool_name: line.tool_name,
        text,
        start,
        end: start + kept_bytes as u64,
        len,
    })
}

/// How many bytes of `bytes` make the first `text_len` bytes of their lossy text (each
/// invalid sequence is one U+FFFD, 3 bytes of text).
fn file_bytes_of(bytes: &[u8], text_len: usize) -> usize {
    let (mut text, mut file) = (0usize, 0usize);
    for chunk in bytes.utf8_chunks() {
        let valid = chunk.valid().len();
        if text + valid >= text_len {
            return file + (text_len - text);
        }
        text += valid;
        file += valid;
        if !chunk.invalid().is_empty() {
            if text + 3 > text_len {
                return file;
            }
            text += 3;
            file += chunk.invalid().len();
        }
    }
    file
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxhost_format::{ChatMessage, HistoryLine, ToolCall};

    /// Issue 38 item 12: a cut output's full text can be paged to its end, byte for byte.
    #[test]
    fn a_cut_outputs_full_text_is_paged_to_its_end() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        std::fs::create_dir(tmp.path().join("tool-results")).unwrap();
        let full = format!("BEGIN {} END", "line é→x\n".repeat(20_000));
        std::fs::write(tmp.path().join("tool-results/1.txt"), &full).unwrap();
        let call = ToolCall::new("c1", "run", "{}");
        let lines: String = [
            ChatMessage::text("user", "go"),
            ChatMessage::assistant_calls(vec![call.clone()]),
            ChatMessage::tool_result(
                &call,
                "BEGIN line\n\n[output cut: showing 10 of 200000 characters; the full output is in tool-results/1.txt]",
            ),
        ]
        .iter()
        .enumerate()
        .map(|(i, m)| serde_json::to_string(&HistoryLine::of(i as u64 + 1, m, "t")).unwrap() + "\n")
        .collect();
        std::fs::write(tmp.path().join("messages.jsonl"), lines).unwrap();
        for budget in [Budget::Bytes(7001), Budget::Tokens(1500)] {
            let mut got = String::new();
            let mut offset = 0;
            let mut pages = 0;
            loop {
                let p = read_full(&dir, 3, offset, budget).unwrap();
                assert_eq!(p.file, "tool-results/1.txt");
                assert_eq!(p.tool_name.as_deref(), Some("run"));
                assert_eq!((p.start, p.len), (offset, full.len() as u64));
                assert!(p.end > p.start);
                got.push_str(&p.text);
                pages += 1;
                if p.end == p.len {
                    break;
                }
                offset = p.end;
            }
            assert_eq!(got, full, "{budget:?}");
            assert!(pages > 10, "{pages}");
        }
        // Inside a character: moved back to its start.
        let at = full.find('é').unwrap() as u64 + 1;
        let p = read_full(&dir, 3, at, Budget::Bytes(100)).unwrap();
        assert_eq!(p.start, at - 1);
        assert!(p.text.starts_with('é'));
        // Not a cut tool output, or no such message: named.
        let e = read_full(&dir, 1, 0, Budget::Bytes(100))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("message 1 (user) is not a tool output that was cut"),
            "{e}"
        );
        let e = read_full(&dir, 9, 0, Budget::Bytes(100))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no message with seq 9"), "{e}");
    }
}
