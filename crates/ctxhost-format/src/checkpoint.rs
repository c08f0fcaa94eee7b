//! Checkpoints of append-only JSONL files: what a reader learnt from a file's first `bytes`
//! bytes, kept next to it so the next reader streams only what was appended since.
//!
//! A [`FileMark`] names a prefix of a file by its length and a hash of its last line; it still
//! holds when the file has that length or more and the line ending at that length hashes the
//! same ([`FileMark::holds`], which reads only that line). A file rewritten in any way that
//! moves or changes its last line fails the check, and the reader then streams the whole file,
//! as it would without a checkpoint. Checkpoints are an optimisation: a missing, unreadable or
//! stale one only costs a full read.
//!
//! Three checkpoints use this (each written by the only writer of its file, atomically: a
//! temporary file renamed over it):
//! - [`StoreCheckpoint`] (`store_checkpoint.json`, [`crate::files::STORE_CHECKPOINT`]): the
//!   builtin message store's counts of messages.jsonl and current.jsonl, written when it opens,
//!   after it replaces current.jsonl, and every [`STORE_CHECKPOINT_EVERY`] bytes appended.
//! - the host's history counts and tool-call ids (`history_checkpoint.json`) and its invariant
//!   check of current.jsonl (`context_checkpoint.json`), written at step boundaries and at
//!   pause; the host also records each file's identity (device and inode), so a file replaced
//!   atomically is never taken for the one it counted.

use std::io::{Read, Seek, SeekFrom};

use serde::{Deserialize, Serialize};

use crate::tail::TailError;

/// Version of the checkpoint files' shape; a file with another version is ignored.
pub const CHECKPOINT_VERSION: u32 = 1;

/// Bytes the message store appends (both files together) between two checkpoints: a resumed
/// task re-reads at most about this much, whatever the size of its history.
pub const STORE_CHECKPOINT_EVERY: u64 = 1024 * 1024;

/// A prefix of a JSONL file: `{"bytes": N, "last_line": "<16 hex digits>"}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FileMark {
    /// Length of the prefix, bytes (0, or the prefix ends with `\n`).
    pub bytes: u64,
    /// FNV-1a 64-bit hash of the prefix's last non-blank line (without its terminator), as 16
    /// lowercase hex digits; empty when `bytes` is 0.
    pub last_line: String,
}

impl FileMark {
    /// The mark of the first `end` bytes of `reader` (the whole file: its size). Reads only
    /// the last line before `end`, in blocks of [`crate::tail::BLOCK`] bytes (a line of many
    /// MiB is hashed as it is read, never held). `end` must be 0 or follow a `\n`; otherwise
    /// `None` (a file whose last line is not whole gets no mark).
    pub fn of<R: Read + Seek>(
        mut reader: R,
        end: u64,
        file: &str,
    ) -> Result<Option<Self>, TailError> {
        if end == 0 {
            return Ok(Some(FileMark::default()));
        }
        let io = |e: std::io::Error| TailError::Io {
            file: file.to_string(),
            message: e.to_string(),
        };
        let mut block = vec![0u8; crate::tail::BLOCK];
        // Reads the bytes `[to - n, to)` into the block; returns n.
        let read_before = |reader: &mut R, to: u64, block: &mut Vec<u8>| {
            let n = to.min(block.len() as u64) as usize;
            reader.seek(SeekFrom::Start(to - n as u64)).map_err(io)?;
            reader.read_exact(&mut block[..n]).map_err(io)?;
            Ok::<usize, TailError>(n)
        };
        let n = read_before(&mut reader, end, &mut block)?;
        if block[n - 1] != b'\n' {
            return Ok(None);
        }
        // Backwards from the last `\n`: the last line that is not blank, `[start, line_end)`.
        let mut line_end = end - 1;
        let mut non_blank = false;
        let mut at = line_end;
        let start = 'found: loop {
            if at == 0 {
                break 'found non_blank.then_some(0);
            }
            let n = read_before(&mut reader, at, &mut block)?;
            for i in (0..n).rev() {
                let pos = at - n as u64 + i as u64;
                match block[i] {
                    b'\n' if non_blank => break 'found Some(pos + 1),
                    // A blank line: the line before it is the one.
                    b'\n' => line_end = pos,
                    b if !b.is_ascii_whitespace() => non_blank = true,
                    _ => {}
                }
            }
            at -= n as u64;
        };
        let Some(start) = start else {
            return Ok(Some(FileMark {
                bytes: end,
                last_line: String::new(),
            }));
        };
        // Forwards: the line without its `\r\n` / `\n`, hashed a block at a time.
        reader.seek(SeekFrom::Start(start)).map_err(io)?;
        let mut hash = FNV_OFFSET;
        let mut left = line_end - start;
        let mut last = None;
        while left > 0 {
            let n = left.min(block.len() as u64) as usize;
            reader.read_exact(&mut block[..n]).map_err(io)?;
            // The byte before the terminator is held back: a `\r` there is not hashed.
            if let Some(b) = last.take() {
                hash = fnv1a_step(hash, b);
            }
            for b in &block[..n - 1] {
                hash = fnv1a_step(hash, *b);
            }
            last = Some(block[n - 1]);
            left -= n as u64;
        }
        if let Some(b) = last.filter(|b| *b != b'\r') {
            hash = fnv1a_step(hash, b);
        }
        Ok(Some(FileMark {
            bytes: end,
            last_line: format!("{hash:016x}"),
        }))
    }

    /// Whether `reader` (the file, `len` bytes long) still starts with this prefix: it is at
    /// least `bytes` long and the line ending at `bytes` hashes to `last_line`.
    pub fn holds<R: Read + Seek>(
        &self,
        reader: R,
        len: u64,
        file: &str,
    ) -> Result<bool, TailError> {
        if self.bytes > len {
            return Ok(false);
        }
        Ok(Self::of(reader, self.bytes, file)?.as_ref() == Some(self))
    }
}

/// FNV-1a 64 of `line`, 16 hex digits.
pub fn line_hash(line: &[u8]) -> String {
    format!("{:016x}", fnv1a_64(line))
}

/// The 64-bit FNV-1a hash of `bytes` (the checkpoints' hash: of a line, of a tool-call id).
/// Fast and stable across builds and platforms; not collision-resistant, so only for uses
/// where a collision costs work, never a wrong result.
pub fn fnv1a_64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET, |h, b| fnv1a_step(h, *b))
}

/// FNV-1a 64's starting value.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// One byte of FNV-1a 64.
fn fnv1a_step(hash: u64, byte: u8) -> u64 {
    (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
}

/// `store_checkpoint.json`: the builtin message store's counts up to two file marks.
///
/// ```json
/// {"version":1,"messages":{"bytes":812,"last_line":"…"},"history_count":5,
///  "current":{"bytes":640,"last_line":"…"},"current_count":5,"current_tokens":130}
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StoreCheckpoint {
    /// [`CHECKPOINT_VERSION`].
    pub version: u32,
    /// The prefix of messages.jsonl counted.
    pub messages: FileMark,
    /// Lines in that prefix (= its last seq).
    pub history_count: u64,
    /// The prefix of current.jsonl counted.
    pub current: FileMark,
    /// Chat message lines in that prefix.
    pub current_count: u64,
    /// Their estimated tokens.
    pub current_tokens: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[test]
    fn the_hash_is_fnv1a_64() {
        // The published test vectors of FNV-1a 64 (draft-eastlake-fnv).
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(line_hash(b"a"), "af63dc4c8601ec8c");
    }

    fn mark(text: &str) -> Option<FileMark> {
        FileMark::of(Cursor::new(text.as_bytes()), text.len() as u64, "f").unwrap()
    }

    fn holds(m: &FileMark, text: &str) -> bool {
        m.holds(Cursor::new(text.as_bytes()), text.len() as u64, "f")
            .unwrap()
    }

    #[test]
    fn a_mark_holds_while_the_file_only_grows() {
        let m = mark("{\"a\":1}\n{\"a\":2}\n").unwrap();
        assert_eq!(m.bytes, 16);
        assert_eq!(m.last_line, line_hash(b"{\"a\":2}"));
        assert!(holds(&m, "{\"a\":1}\n{\"a\":2}\n"));
        assert!(holds(&m, "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n"));
        assert!(
            holds(&m, "{\"a\":1}\n{\"a\":2}\n{\"a\":"),
            "a torn line after the mark"
        );
        assert!(holds(&FileMark::default(), ""));
        assert!(holds(&FileMark::default(), "{}\n"));
    }

    /// The mark as it was made before it was hashed in blocks: the last non-blank line read
    /// whole ([`crate::tail::BackwardLines`]).
    fn whole_line_mark(text: &str) -> Option<FileMark> {
        let mut lines =
            crate::tail::BackwardLines::new(Cursor::new(text.as_bytes()), text.len() as u64, "f");
        if text.is_empty() || !lines.ends_with_newline().unwrap() {
            return None;
        }
        Some(FileMark {
            bytes: text.len() as u64,
            last_line: lines
                .prev_line()
                .unwrap()
                .map_or(String::new(), |(_, l)| line_hash(l)),
        })
    }

    #[test]
    fn a_mark_hashed_in_blocks_is_the_whole_lines_mark() {
        let long = "x".repeat(3 * crate::tail::BLOCK + 5);
        for text in [
            "{\"a\":1}\n".to_string(),
            "{\"a\":1}\r\n".to_string(),
            "{\"a\":1}\n\n  \n".to_string(),
            "\n\n".to_string(),
            "\r\n".to_string(),
            "a\nb\n".to_string(),
            format!("a\n{long}\n"),
            format!("{long}\r\n \n"),
            format!("{long}\n\n{}\n", "\n".repeat(crate::tail::BLOCK)),
            format!("a\n{}b\n", " ".repeat(crate::tail::BLOCK - 1)),
        ] {
            assert_eq!(
                mark(&text),
                whole_line_mark(&text),
                "{:?}",
                &text[..text.len().min(40)]
            );
        }
    }

    #[test]
    fn a_mark_fails_when_the_file_was_cut_or_rewritten() {
        let m = mark("{\"a\":1}\n{\"a\":2}\n").unwrap();
        assert!(!holds(&m, "{\"a\":1}\n"), "shorter");
        assert!(
            !holds(&m, "{\"a\":1}\n{\"a\":3}\n"),
            "same size, other last line"
        );
        assert!(!holds(&m, "{\"a\":9}\n{\"a\":1}\n{\"a\":2}\n"), "shifted");
        assert!(
            !holds(&m, "{\"a\":1}\n{\"a\":22}\n"),
            "no newline at the mark"
        );
        assert_eq!(
            mark("{\"a\":1}\n{\"a\""),
            None,
            "a file ending in a torn line"
        );
    }
}
