//! Torn last lines: a JSONL file whose last line was cut by a crash (no `\n`, or not JSON)
//! loses that line, its bytes kept in `<file>.torn`; a last line that is complete JSON but lacks
//! its `\n` only gets the `\n`. The file is read backwards, so its size does not matter.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

use anyhow::Context;
use ctxhost_format::files::TORN_SUFFIX;
use ctxhost_format::long_line::{Compactor, Judged, LIMITS};

use crate::task_dir::TaskDir;

/// Chunk size for reading a file backwards to its last line.
const BACK_CHUNK: u64 = 64 * 1024;

/// Longest last line read whole to judge it, bytes (256 KiB, as the history counts'
/// [`crate::task::history_counts::MAX_WHOLE_LINE_BYTES`]); a longer one is judged as it is read.
const WHOLE_LINE_BYTES: u64 = 256 * 1024;

/// What [`fix_torn_tail`] did to a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TailAction {
    /// The last line was cut at `offset`: `bytes` bytes, saved to `saved_to` when asked.
    Cut {
        /// Bytes cut.
        bytes: u64,
        /// Where they were kept, when asked.
        saved_to: Option<PathBuf>,
    },
    /// The last line was complete JSON without its `\n`: the `\n` was added.
    Terminated,
}

/// A repaired last line: the file, the byte offset where the last line starts, and what was done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailFix {
    /// The file, as shown in messages.
    pub file: PathBuf,
    /// Byte offset where the last line starts.
    pub offset: u64,
    /// What was done.
    pub action: TailAction,
}

impl std::fmt::Display for TailFix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.action {
            TailAction::Cut { bytes, saved_to } => {
                write!(
                    f,
                    "{}: cut a torn last line of {bytes} bytes at byte offset {}",
                    self.file.display(),
                    self.offset
                )?;
                if let Some(p) = saved_to {
                    write!(f, " (kept in {})", p.display())?;
                }
                Ok(())
            }
            TailAction::Terminated => write!(
                f,
                "{}: added the missing newline to the last line (byte offset {})",
                self.file.display(),
                self.offset
            ),
        }
    }
}

/// The state of a file's last line, as [`inspect_tail`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tail {
    /// Empty file, or the last line ends with `\n` and is a JSON object.
    Sound,
    /// The last line (starting at `offset`, `len` bytes without any `\n`) is not a JSON object.
    Torn {
        /// Byte offset where the last line starts.
        offset: u64,
        /// Its length, bytes, without a newline.
        len: u64,
    },
    /// The last line is a JSON object but has no `\n` (starts at `offset`).
    Unterminated {
        /// Byte offset where the last line starts.
        offset: u64,
    },
}

/// Look at the last line of the file `name` of `dir` (read backwards, so the size of the file
/// does not matter).
pub fn inspect_tail(dir: &TaskDir, name: &str) -> io::Result<Tail> {
    let mut f = dir.open_read(name)?;
    let len = f.metadata()?.len();
    if len == 0 {
        return Ok(Tail::Sound);
    }
    let mut last = [0u8; 1];
    f.seek(SeekFrom::Start(len - 1))?;
    f.read_exact(&mut last)?;
    let terminated = last[0] == b'\n';
    let end = if terminated { len - 1 } else { len };
    let start = last_line_start(&mut f, end)?;
    let (is_object, blank) = judge_line(&mut f, start, end)?;
    Ok(if is_object && terminated {
        Tail::Sound
    } else if is_object {
        Tail::Unterminated { offset: start }
    } else if blank && terminated {
        // A blank last line is skipped by every reader.
        Tail::Sound
    } else {
        Tail::Torn {
            offset: start,
            len: len - start,
        }
    })
}

/// Whether the bytes `start..end` of `f` (a line without its `\n`) are a JSON object, and
/// whether they are blank (ASCII white space only). A line longer than [`WHOLE_LINE_BYTES`] is
/// judged as it is read, [`BACK_CHUNK`] bytes at a time, by its compact copy
/// ([`ctxhost_format::long_line::Compactor`]: its long strings checked and left out), so a
/// reply of many MiB is never held; only a line whose compact copy is too large (many short
/// values) is read whole.
fn judge_line(f: &mut File, start: u64, end: u64) -> io::Result<(bool, bool)> {
    let judge = |line: &[u8]| {
        let is_object =
            serde_json::from_slice::<serde_json::Value>(line).is_ok_and(|v| v.is_object());
        (is_object, line.iter().all(u8::is_ascii_whitespace))
    };
    f.seek(SeekFrom::Start(start))?;
    let len = end - start;
    if len > WHOLE_LINE_BYTES {
        let mut compactor = Compactor::new(start, LIMITS);
        let mut buf = vec![0u8; BACK_CHUNK as usize];
        let mut left = len;
        while left > 0 {
            let n = left.min(BACK_CHUNK) as usize;
            f.read_exact(&mut buf[..n])?;
            compactor.push(&buf[..n]);
            left -= n as u64;
        }
        match compactor.judge() {
            Judged::Compact(line) => return Ok(judge(line)),
            // It holds a string (not valid): neither an object nor blank.
            Judged::Invalid => return Ok((false, false)),
            Judged::Unknown => f.seek(SeekFrom::Start(start)).map(drop)?,
        }
    }
    let mut line = vec![0u8; len as usize];
    f.read_exact(&mut line)?;
    Ok(judge(&line))
}

/// Offset of the first byte after the last `\n` before `end` (0 when there is none).
fn last_line_start(f: &mut File, end: u64) -> io::Result<u64> {
    let mut pos = end;
    let mut buf = vec![0u8; BACK_CHUNK as usize];
    while pos > 0 {
        let n = pos.min(BACK_CHUNK);
        let from = pos - n;
        f.seek(SeekFrom::Start(from))?;
        f.read_exact(&mut buf[..n as usize])?;
        if let Some(i) = buf[..n as usize].iter().rposition(|b| *b == b'\n') {
            return Ok(from + i as u64 + 1);
        }
        pos = from;
    }
    Ok(0)
}

/// Repair the last line of the JSONL file `name` of `dir` if a crash tore it (see [`Tail`]): a
/// torn line is cut (its bytes appended to `<name>.torn` when `save_torn`; the checkpoints
/// that count the file deleted first, [`crate::checkpoint::remove_describing`]), an
/// unterminated complete line gets its `\n`. A missing file is fine. Returns what was done, `None` when
/// nothing was needed.
pub fn fix_torn_tail(
    dir: &TaskDir,
    name: &str,
    save_torn: bool,
) -> anyhow::Result<Option<TailFix>> {
    let path = dir.file_path(name);
    let tail = match inspect_tail(dir, name) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let ctx = || format!("cannot repair {}", path.display());
    match tail {
        Tail::Sound => Ok(None),
        Tail::Unterminated { offset } => {
            let mut f = dir.open_read_append(name).with_context(ctx)?;
            f.write_all(b"\n").with_context(ctx)?;
            f.sync_all().with_context(ctx)?;
            Ok(Some(TailFix {
                file: path,
                offset,
                action: TailAction::Terminated,
            }))
        }
        Tail::Torn { offset, len } => {
            let saved_to = cut_from(dir, name, offset, save_torn)?;
            Ok(Some(TailFix {
                file: path,
                offset,
                action: TailAction::Cut {
                    bytes: len,
                    saved_to,
                },
            }))
        }
    }
}

/// Cut the file `name` of `dir` at byte `offset` (the start of a line): with `save_torn`, the
/// bytes from there to the end are first appended to `<name>.torn` ([`torn_name`]), copied in
/// [`BACK_CHUNK`]-byte chunks (never held in memory whole) and ending with a `\n` (added when
/// they lack one); then the checkpoints that count the file are deleted
/// ([`crate::checkpoint::remove_describing`]) and it is truncated to `offset` and synced.
/// Returns where the bytes were kept, when they were. Errors name the file read or written;
/// nothing is cut unless the bytes were kept first.
pub fn cut_from(
    dir: &TaskDir,
    name: &str,
    offset: u64,
    save_torn: bool,
) -> anyhow::Result<Option<PathBuf>> {
    let ctx = || format!("cannot cut {} at byte offset {offset}", dir.show(name));
    let mut f = dir.open_read_write(name).with_context(ctx)?;
    let mut saved_to = None;
    if save_torn {
        let torn = torn_name(name);
        let shown = dir.file_path(&torn);
        let write_ctx = || format!("cannot write {}", shown.display());
        let mut out = dir.open_append(&torn).with_context(write_ctx)?;
        f.seek(SeekFrom::Start(offset)).with_context(ctx)?;
        let mut buf = vec![0u8; BACK_CHUNK as usize];
        let mut last = b'\n';
        loop {
            let n = match f.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).with_context(ctx),
            };
            out.write_all(&buf[..n]).with_context(write_ctx)?;
            last = buf[n - 1];
        }
        if last != b'\n' {
            out.write_all(b"\n").with_context(write_ctx)?;
        }
        out.sync_all().with_context(write_ctx)?;
        saved_to = Some(shown);
    }
    crate::checkpoint::remove_describing(dir, name)?;
    f.set_len(offset).with_context(ctx)?;
    f.sync_all().with_context(ctx)?;
    Ok(saved_to)
}

/// `<name>.torn`: where the bytes of a cut line of `name` are kept.
pub fn torn_name(name: &str) -> String {
    format!("{name}{TORN_SUFFIX}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A last line longer than [`WHOLE_LINE_BYTES`] gets the verdict the whole line gets:
    /// valid objects with long strings (escapes, non-ASCII, surrogate pairs), the same cut at
    /// many places, and lines that are not objects or not JSON.
    #[test]
    fn a_long_last_line_is_judged_as_the_whole_line_is() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("x.jsonl");
        let text = "d\u{e9}j\u{e0} \"vu\" \\ /\n\t\u{1}\u{4e2d}\u{1F600}".repeat(30_000);
        let object = serde_json::json!({"role": "assistant", "content": text.clone(),
            "tool_calls": [{"id": "c", "function": {"name": "n", "arguments": text.clone()}}],
            "n": [1.5e300, -0, true, null]})
        .to_string();
        let escaped = object
            .replace("\u{e9}", "\\u00e9")
            .replace("\u{1F600}", "\\ud83d\\ude00");
        let pad = "x".repeat(300_000);
        let mut lines = vec![
            object.clone(),
            escaped.clone(),
            format!("  {object}  \r"),
            serde_json::json!([text.clone()]).to_string(),
            format!("{object} x"),
            format!("{{\"a\":\"{pad}\\ud800\"}}"),
            format!("{{\"a\":\"{pad}\\udc00\"}}"),
            format!("{{\"a\":\"{pad}\tb\"}}"),
            format!("{{\"a\":\"{pad}\",\"b\":1e400}}"),
            format!("{{\"a\":\"{pad}\",\"a\":2}}"),
            " ".repeat(300_000),
            format!("{{\"a\":[{}1]}}", "1,".repeat(200_000)),
        ];
        for at in [1, 100, object.len() / 2, object.len() - 2, object.len() - 1] {
            let mut cut = at;
            while !object.is_char_boundary(cut) {
                cut -= 1;
            }
            lines.push(object[..cut].to_string());
            lines.push(escaped[..cut.min(escaped.len())].to_string());
        }
        let mut bad_utf8 = object.clone().into_bytes();
        bad_utf8[200_000] = 0xff;
        for line in lines.iter().map(|l| l.as_bytes()).chain([&bad_utf8[..]]) {
            fs::write(&p, line).unwrap();
            let mut f = File::open(&p).unwrap();
            let whole = (
                serde_json::from_slice::<serde_json::Value>(line).is_ok_and(|v| v.is_object()),
                line.iter().all(u8::is_ascii_whitespace),
            );
            assert_eq!(
                judge_line(&mut f, 0, line.len() as u64).unwrap(),
                whole,
                "{}",
                String::from_utf8_lossy(&line[..80.min(line.len())])
            );
        }
    }

    #[test]
    fn a_torn_last_line_is_cut_and_kept_aside() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        let p = tmp.path().join("x.jsonl");
        fs::write(&p, "{\"a\":1}\n{\"a\":2}\n{\"a\":").unwrap();
        let fix = fix_torn_tail(&dir, "x.jsonl", true).unwrap().unwrap();
        assert_eq!(fix.offset, 16);
        assert_eq!(
            fix.action,
            TailAction::Cut {
                bytes: 5,
                saved_to: Some(tmp.path().join("x.jsonl.torn"))
            }
        );
        assert!(fix.to_string().contains("byte offset 16"), "{fix}");
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\"a\":1}\n{\"a\":2}\n");
        assert_eq!(
            fs::read_to_string(tmp.path().join("x.jsonl.torn")).unwrap(),
            "{\"a\":\n"
        );
        // Sound now: nothing more to do.
        assert_eq!(fix_torn_tail(&dir, "x.jsonl", true).unwrap(), None);
    }

    #[test]
    fn a_complete_line_without_newline_is_terminated_not_cut() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        let p = tmp.path().join("x.jsonl");
        fs::write(&p, "{\"a\":1}\n{\"a\":2}").unwrap();
        let fix = fix_torn_tail(&dir, "x.jsonl", false).unwrap().unwrap();
        assert_eq!(fix.action, TailAction::Terminated);
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\"a\":1}\n{\"a\":2}\n");
    }

    #[test]
    fn a_terminated_garbage_last_line_is_cut_and_a_single_torn_line_empties_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        let p = tmp.path().join("x.jsonl");
        fs::write(&p, "{\"a\":1}\n{\"a\":{\"a\":1}\n").unwrap();
        let fix = fix_torn_tail(&dir, "x.jsonl", false).unwrap().unwrap();
        assert_eq!(fix.offset, 8);
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\"a\":1}\n");
        fs::write(&p, "{\"se").unwrap();
        fix_torn_tail(&dir, "x.jsonl", false).unwrap().unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"");
        assert_eq!(fix_torn_tail(&dir, "none.jsonl", true).unwrap(), None);
    }

    #[test]
    fn a_cut_keeps_lines_larger_than_a_chunk_whole_with_one_newline() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        let p = tmp.path().join("x.jsonl");
        let long = format!("{{\"a\":\"{}\"}}\n", "x".repeat(3 * BACK_CHUNK as usize));
        fs::write(&p, format!("{{\"a\":1}}\n{long}{long}")).unwrap();
        let saved = cut_from(&dir, "x.jsonl", 8, true).unwrap();
        assert_eq!(saved, Some(tmp.path().join("x.jsonl.torn")));
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\"a\":1}\n");
        // Already ends with a newline: none added.
        assert_eq!(
            fs::read_to_string(tmp.path().join("x.jsonl.torn")).unwrap(),
            format!("{long}{long}")
        );
    }

    #[test]
    fn a_long_last_line_is_found_across_read_chunks() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        let p = tmp.path().join("x.jsonl");
        let long = format!("{{\"a\":\"{}\"}}", "x".repeat(200_000));
        fs::write(&p, format!("{long}\n{}", &long[..150_000])).unwrap();
        let fix = fix_torn_tail(&dir, "x.jsonl", false).unwrap().unwrap();
        assert_eq!(fix.offset, long.len() as u64 + 1);
        assert_eq!(fs::read_to_string(&p).unwrap(), format!("{long}\n"));
    }
}
