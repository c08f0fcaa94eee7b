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

/// Refuse a write under a hidden path (contexts/, the config) before anything is created: the
/// real path of `rel`'s nearest existing ancestor in `dir`, with the rest of `rel` joined, is
/// checked (a link inside the workspace that leads into contexts/ is followed as the write would).
fn check_nearest_ancestor(
    ws: &Workspace,
    dir: &cap_std::fs::Dir,
    rel: &std::path::Path,
    shown: &str,
) -> Result<(), String> {
    use std::os::fd::{AsFd, AsRawFd};
    let mut ancestor = rel.parent();
    loop {
        let a = match ancestor {
            Some(a) if !a.as_os_str().is_empty() => a,
            _ => std::path::Path::new("."),
        };
        if let Ok(d) = dir.open_dir(a) {
            let real = std::fs::read_link(format!("/proc/self/fd/{}", d.as_fd().as_raw_fd()))
                .map_err(|e| format!("{shown}: cannot tell where it is: {e}"))?;
            return ws.check_real(&real.join(rel.strip_prefix(a).unwrap_or(rel)), shown);
        }
        if a == std::path::Path::new(".") {
            return Ok(());
        }
        ancestor = a.parent();
    }
}

/// `write_file`: replace (or create, with its parent directories) `path` with `content`.
pub fn write(ws: &Workspace, path: &str, content: &str) -> Result<String, String> {
    let r = ws.resolve(path)?;
    check_nearest_ancestor(ws, r.dir, &r.rel, path)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_write_under_contexts_creates_nothing() {
        let ws_dir = tempfile::tempdir().unwrap();
        let temp = tempfile::tempdir().unwrap();
        let contexts = ws_dir.path().join("contexts");
        std::fs::create_dir_all(contexts.join("running")).unwrap();
        std::os::unix::fs::symlink("contexts/running", ws_dir.path().join("link")).unwrap();
        let ws =
            Workspace::open(ws_dir.path(), temp.path(), std::slice::from_ref(&contexts)).unwrap();
        for path in [
            "contexts/newdir/sub/x.txt",
            "contexts/running/u/metadata.json",
            "link/new/x",
        ] {
            let err = write(&ws, path, "x").unwrap_err();
            assert!(err.contains("is ctxhost's own"), "{path}: {err}");
        }
        assert!(!contexts.join("newdir").exists());
        assert!(!contexts.join("running/u").exists());
        assert!(!contexts.join("running/new").exists());
        // A write elsewhere in the workspace still creates its directories.
        write(&ws, "src/new/x.txt", "x").unwrap();
        assert_eq!(
            std::fs::read_to_string(ws_dir.path().join("src/new/x.txt")).unwrap(),
            "x"
        );
    }

    #[test]
    fn a_workspace_inside_contexts_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let temp = tempfile::tempdir().unwrap();
        let contexts = root.path().join("contexts");
        std::fs::create_dir_all(contexts.join("completed")).unwrap();
        for ws in [contexts.clone(), contexts.join("completed")] {
            let Err(err) = Workspace::open(&ws, temp.path(), std::slice::from_ref(&contexts))
            else {
                panic!("{} was accepted as a workspace", ws.display())
            };
            assert!(err.to_string().contains("inside ctxhost's own"), "{err}");
        }
        // The project that holds contexts/ (as `ask` in a repository) is a workspace.
        assert!(Workspace::open(root.path(), temp.path(), std::slice::from_ref(&contexts)).is_ok());
    }
}
