//! `read_file`, `write_file` and `edit_file` over the [`Workspace`] handles.

use std::io::{BufRead, Read, Seek, Write};

use cap_std::fs::OpenOptions;

use super::workspace::Workspace;

/// Lines `read_file` returns when the model gives no limit.
pub const DEFAULT_READ_LINES: u64 = 2000;
/// Characters of one line `read_file` shows (the rest is cut with a note).
pub const MAX_LINE_CHARS: usize = 2000;
/// Bytes looked at to tell a binary file (a NUL byte among them).
const SNIFF_BYTES: usize = 8192;

/// `read_file`: lines `offset..offset+limit` (1-based) of `path`, numbered like `cat -n`; a
/// binary file is named with its size, not shown.
pub fn read(ws: &Workspace, path: &str, offset: u64, limit: u64) -> Result<String, String> {
    let r = ws.resolve(path)?;
    let mut f = r
        .dir
        .open(&r.rel)
        .map_err(|e| format!("{path}: {e}"))?
        .into_std();
    ws.check_open(&f, path)?;
    let meta = f.metadata().map_err(|e| format!("{path}: {e}"))?;
    if meta.is_dir() {
        return Err(format!("{path} is a directory: use list_files"));
    }
    let mut sniff = vec![0u8; SNIFF_BYTES];
    let n = read_up_to(&mut f, &mut sniff).map_err(|e| format!("{path}: {e}"))?;
    if sniff[..n].contains(&0) {
        return Ok(format!(
            "{path} is a binary file ({} bytes): not shown",
            meta.len()
        ));
    }
    f.rewind().map_err(|e| format!("{path}: {e}"))?;
    let start = offset.max(1);
    let mut out = String::new();
    let mut shown = 0u64;
    let mut total = 0u64;
    for (i, line) in std::io::BufReader::new(f).split(b'\n').enumerate() {
        let line = line.map_err(|e| format!("{path}: {e}"))?;
        let no = i as u64 + 1;
        total = no;
        if no < start || shown >= limit {
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.strip_suffix('\r').unwrap_or(&text);
        let cut: String = text.chars().take(MAX_LINE_CHARS).collect();
        out.push_str(&format!("{no:>6}\t{cut}"));
        if cut.len() < text.len() {
            out.push_str(&format!(" [line cut at {MAX_LINE_CHARS} characters]"));
        }
        out.push('\n');
        shown += 1;
    }
    if total == 0 {
        return Ok(format!("{path} is empty"));
    }
    if shown == 0 {
        return Ok(format!("{path} has {total} lines: none from line {start}"));
    }
    let last = start + shown - 1;
    if start > 1 || last < total {
        out.push_str(&format!(
            "[lines {start}-{last} of {total}; read more with offset={}]\n",
            last + 1
        ));
    }
    Ok(out)
}

fn read_up_to(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// `write_file`: replace (or create, with its parent directories) `path` with `content`.
pub fn write(ws: &Workspace, path: &str, content: &str) -> Result<String, String> {
    let r = ws.resolve(path)?;
    if let Some(parent) = r.rel.parent().filter(|p| !p.as_os_str().is_empty()) {
        r.dir
            .create_dir_all(parent)
            .map_err(|e| format!("{path}: creating its directory: {e}"))?;
    }
    let mut opts = OpenOptions::new();
    opts.write(true).create(true);
    let mut f = r
        .dir
        .open_with(&r.rel, &opts)
        .map_err(|e| format!("{path}: {e}"))?
        .into_std();
    ws.check_open(&f, path)?;
    f.set_len(0).map_err(|e| format!("{path}: {e}"))?;
    f.write_all(content.as_bytes())
        .map_err(|e| format!("{path}: {e}"))?;
    Ok(format!(
        "wrote {} bytes ({} lines) to {path}",
        content.len(),
        content.lines().count()
    ))
}

/// `edit_file`: replace `old` by `new` in `path`: exactly one occurrence, or every one with
/// `replace_all`. Errors: no occurrence, or several without `replace_all` (with their lines).
pub fn edit(
    ws: &Workspace,
    path: &str,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<String, String> {
    if old.is_empty() {
        return Err("`old_string` must not be empty".into());
    }
    if old == new {
        return Err("`old_string` and `new_string` are the same: nothing to change".into());
    }
    let r = ws.resolve(path)?;
    let mut opts = OpenOptions::new();
    opts.read(true).write(true);
    let mut f = r
        .dir
        .open_with(&r.rel, &opts)
        .map_err(|e| format!("{path}: {e}"))?
        .into_std();
    ws.check_open(&f, path)?;
    let mut text = String::new();
    f.read_to_string(&mut text)
        .map_err(|e| format!("{path}: {e} (edit_file works on UTF-8 text)"))?;
    let starts: Vec<usize> = text.match_indices(old).map(|(i, _)| i).collect();
    match starts.len() {
        0 => return Err(format!("`old_string` was not found in {path}")),
        n if n > 1 && !replace_all => {
            let lines: Vec<String> = starts
                .iter()
                .take(10)
                .map(|&i| (text[..i].matches('\n').count() + 1).to_string())
                .collect();
            return Err(format!(
                "`old_string` occurs {n} times in {path} (lines {}): add surrounding lines to make it unique, or set replace_all: true",
                lines.join(", ")
            ));
        }
        _ => {}
    }
    let edited = text.replace(old, new);
    f.rewind().map_err(|e| format!("{path}: {e}"))?;
    f.set_len(0).map_err(|e| format!("{path}: {e}"))?;
    f.write_all(edited.as_bytes())
        .map_err(|e| format!("{path}: {e}"))?;
    Ok(format!("replaced {} occurrence(s) in {path}", starts.len()))
}
