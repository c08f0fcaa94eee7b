//! A growing file read from where the last look stopped, whole lines only, with a file that was
//! replaced or cut back noticed ([`Tail`]); used by [`super::follow`].
use std::io::{Read, Seek, SeekFrom};

use crate::task_dir::TaskDir;

/// Most bytes read from one file in one look (a long history is read over several looks).
pub(super) const MAX_READ_BYTES: u64 = 4 << 20;

/// One file read from a byte offset, whole lines only.
#[derive(Debug, Default)]
pub(super) struct Tail {
    pub(super) offset: u64,
    line: u64,
    /// The last read stopped at [`MAX_READ_BYTES`]: more is there to read now.
    pub(super) behind: bool,
    /// The file's first bytes (up to [`HEAD_BYTES`]) when it was first read: a file that no
    /// longer starts with them was replaced (reply.stream of the next call, which may be
    /// longer than the last one by the next look) and is read from its start.
    head: Vec<u8>,
    /// The highest line number returned. A record file (messages.jsonl, tools.jsonl, ...) that
    /// is cut back or replaced is read again from its start, but only its lines past this one
    /// are returned: what was shown is not shown again.
    shown: u64,
}

/// Bytes of a followed file's start remembered to notice it was replaced ([`Tail::head`]).
const HEAD_BYTES: usize = 256;

impl Tail {
    /// The whole lines appended to `name` in `dir` since the last call, with their line
    /// numbers. `records`: a record file, whose lines are returned once even when it is cut
    /// back ([`Tail::shown`]); else (reply.stream) a replaced file is a new one, read whole.
    pub(super) fn read(
        &mut self,
        dir: &TaskDir,
        name: &str,
        records: bool,
    ) -> std::io::Result<Vec<(u64, Vec<u8>)>> {
        self.read_lines(dir, name, records, false)
    }

    /// [`Tail::read`], blank lines kept (and counted) when `blank` (an event stream, whose
    /// blank lines end events).
    pub(super) fn read_lines(
        &mut self,
        dir: &TaskDir,
        name: &str,
        records: bool,
        blank: bool,
    ) -> std::io::Result<Vec<(u64, Vec<u8>)>> {
        let Some(mut f) = dir.open_read_if_exists(name)? else {
            return Ok(Vec::new());
        };
        let len = f.metadata()?.len();
        let replaced = len < self.offset || {
            let mut head = vec![0u8; self.head.len()];
            self.offset > 0 && (f.read_exact(&mut head).is_err() || head != self.head)
        };
        if replaced {
            // Replaced (reply.stream of the next call): start again.
            self.offset = 0;
            self.line = 0;
            self.head.clear();
            if !records {
                self.shown = 0;
            }
        }
        if len == self.offset {
            return Ok(Vec::new());
        }
        f.seek(SeekFrom::Start(self.offset))?;
        let mut buf = Vec::new();
        (&mut f).take(MAX_READ_BYTES).read_to_end(&mut buf)?;
        // One line longer than a read (a reply of several MiB): read on to its end, or the
        // follower would read the same bytes again and again without ever moving on.
        while (buf.len() as u64).is_multiple_of(MAX_READ_BYTES)
            && !buf.is_empty()
            && !buf.contains(&b'\n')
        {
            let before = buf.len();
            (&mut f).take(MAX_READ_BYTES).read_to_end(&mut buf)?;
            if buf.len() == before {
                break;
            }
        }
        self.behind =
            buf.len() as u64 >= MAX_READ_BYTES && (buf.len() as u64).is_multiple_of(MAX_READ_BYTES);
        let Some(end) = buf.iter().rposition(|b| *b == b'\n') else {
            return Ok(Vec::new());
        };
        buf.truncate(end + 1);
        if self.offset == 0 {
            self.head = buf[..buf.len().min(HEAD_BYTES)].to_vec();
        }
        self.offset += buf.len() as u64;
        let mut out = Vec::new();
        buf.pop();
        for l in buf.split(|b| *b == b'\n') {
            if l.is_empty() && !blank {
                continue;
            }
            self.line += 1;
            if self.line > self.shown {
                self.shown = self.line;
                out.push((self.line, l.to_vec()));
            }
        }
        Ok(out)
    }
}
