//! NUL bytes in a JSONL file: what a filesystem leaves where a write was lost (the file's size
//! was updated, its data never reached the disk), often in the middle of messages.jsonl after
//! a power loss, with whole lines after it. JSON text never holds a raw NUL byte, so removing
//! them loses nothing: a line of NUL bytes goes away, NUL bytes stuck to the front of the next
//! line are cut off it. `ctxhost fsck` reports them ([`find_nul_lines`]); `ctxhost fsck --repair`
//! removes them ([`remove_nul_bytes`], an atomic replace after deleting the checkpoints that
//! count the file, [`crate::checkpoint::remove_describing`]; the file is streamed).

use std::io::{self, BufRead, BufReader};

use anyhow::Context;

use crate::task_dir::TaskDir;

/// The 1-based lines of the file `name` of `dir` holding a NUL byte (streamed; empty for a
/// missing file).
pub fn find_nul_lines(dir: &TaskDir, name: &str) -> anyhow::Result<Vec<u64>> {
    let mut found = Vec::new();
    for_each_line(dir, name, |n, line| {
        if line.contains(&0) {
            found.push(n);
        }
        Ok(())
    })?;
    Ok(found)
}

/// What [`remove_nul_bytes`] did to a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NulFix {
    /// Lines (1-based, as they were) that held only NUL bytes (and whitespace): removed.
    pub removed_lines: Vec<u64>,
    /// Lines that held NUL bytes and text: the NUL bytes cut off.
    pub cleaned_lines: Vec<u64>,
    /// NUL bytes removed in all.
    pub bytes: u64,
}

impl std::fmt::Display for NulFix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "removed {} NUL byte(s)", self.bytes)?;
        if !self.removed_lines.is_empty() {
            write!(
                f,
                "; line(s) {:?} held nothing else and are gone",
                self.removed_lines
            )?;
        }
        if !self.cleaned_lines.is_empty() {
            write!(
                f,
                "; cut from the start of line(s) {:?}",
                self.cleaned_lines
            )?;
        }
        Ok(())
    }
}

/// Remove every NUL byte of the JSONL file `name` of `dir` (see the module docs); `None` when
/// it has none (the file is not rewritten) or does not exist.
pub fn remove_nul_bytes(dir: &TaskDir, name: &str) -> anyhow::Result<Option<NulFix>> {
    if find_nul_lines(dir, name)?.is_empty() {
        return Ok(None);
    }
    let mut fix = NulFix {
        removed_lines: Vec::new(),
        cleaned_lines: Vec::new(),
        bytes: 0,
    };
    crate::checkpoint::remove_describing(dir, name)?;
    dir.write_atomic_with(name, |out| {
        for_each_line(dir, name, |n, line| {
            let nuls = line.iter().filter(|b| **b == 0).count() as u64;
            if nuls == 0 {
                return out.write_all(line);
            }
            fix.bytes += nuls;
            let kept: Vec<u8> = line.iter().copied().filter(|b| *b != 0).collect();
            if kept.iter().all(u8::is_ascii_whitespace) {
                fix.removed_lines.push(n);
                Ok(())
            } else {
                fix.cleaned_lines.push(n);
                out.write_all(&kept)
            }
        })
        .map_err(io::Error::other)
    })
    .with_context(|| format!("cannot replace {}", dir.show(name)))?;
    Ok(Some(fix))
}

/// Calls `f(line number, bytes with their `\n`)` for every line of the file `name` of `dir`
/// (none when missing).
fn for_each_line(
    dir: &TaskDir,
    name: &str,
    mut f: impl FnMut(u64, &[u8]) -> io::Result<()>,
) -> anyhow::Result<()> {
    let shown = dir.show(name);
    let file = match dir.open_read_if_exists(name) {
        Ok(Some(file)) => file,
        Ok(None) => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("cannot open {shown}")),
    };
    let mut reader = BufReader::new(file);
    let mut buf = Vec::new();
    let mut n = 0u64;
    loop {
        buf.clear();
        let read = reader
            .read_until(b'\n', &mut buf)
            .with_context(|| format!("cannot read {shown}"))?;
        if read == 0 {
            return Ok(());
        }
        n += 1;
        f(n, &buf).with_context(|| format!("{shown} line {n}"))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_nul_bytes_go_and_stuck_ones_are_cut() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        let p = tmp.path().join("messages.jsonl");
        let mut bytes = b"{\"seq\":1}\n".to_vec();
        bytes.extend([0u8; 4096]);
        bytes.push(b'\n');
        bytes.extend([0u8; 10]);
        bytes.extend(b"{\"seq\":2}\n{\"seq\":3}\n");
        std::fs::write(&p, &bytes).unwrap();
        assert_eq!(find_nul_lines(&dir, "messages.jsonl").unwrap(), [2, 3]);
        let fix = remove_nul_bytes(&dir, "messages.jsonl").unwrap().unwrap();
        assert_eq!(
            fix,
            NulFix {
                removed_lines: vec![2],
                cleaned_lines: vec![3],
                bytes: 4106
            }
        );
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "{\"seq\":1}\n{\"seq\":2}\n{\"seq\":3}\n"
        );
        assert_eq!(remove_nul_bytes(&dir, "messages.jsonl").unwrap(), None);
        assert_eq!(remove_nul_bytes(&dir, "none").unwrap(), None);
    }
}
