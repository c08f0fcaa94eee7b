//! `list_files` and `search_files`: walking a directory of the [`Workspace`] with ripgrep's
//! own libraries (`ignore`: .gitignore honoured, links not followed; `grep-searcher`,
//! `grep-regex`: the search).

use std::path::{Path, PathBuf};

use grep_regex::RegexMatcherBuilder;
use grep_searcher::{BinaryDetection, SearcherBuilder, sinks::UTF8};
use ignore::WalkBuilder;
use ignore::overrides::OverrideBuilder;

use super::workspace::Workspace;

/// Entries `list_files` shows at most.
pub const MAX_LIST: usize = 1000;
/// Matching lines `search_files` shows at most.
pub const MAX_MATCHES: usize = 200;
/// Characters of a matching line shown.
const MAX_MATCH_CHARS: usize = 300;

/// The directory to walk: `path` resolved and checked to lie in the workspace or temp dir.
fn start_dir(ws: &Workspace, path: &str) -> Result<PathBuf, String> {
    let r = ws.resolve(path)?;
    let d = r.dir.open_dir(&r.rel).map_err(|e| format!("{path}: {e}"))?;
    let f = d.open(".").map_err(|e| format!("{path}: {e}"))?.into_std();
    let real = ws.check_open(&f, path)?;
    if !ws.contains(&real) {
        return Err(format!("{path} leads outside the workspace"));
    }
    Ok(real)
}

/// A walker over `dir` honouring .gitignore (also outside a git repository), not following
/// links, skipping ctxhost's own paths, filtered by `glob` when given.
fn walker(ws: &Workspace, dir: &Path, glob: Option<&str>) -> Result<ignore::Walk, String> {
    let mut b = WalkBuilder::new(dir);
    b.follow_links(false).require_git(false).hidden(true);
    if let Some(g) = glob.filter(|g| !g.is_empty()) {
        let mut o = OverrideBuilder::new(dir);
        o.add(g).map_err(|e| format!("glob {g:?}: {e}"))?;
        b.overrides(o.build().map_err(|e| format!("glob {g:?}: {e}"))?);
    }
    let hidden = ws.hidden().to_vec();
    b.filter_entry(move |e| !hidden.iter().any(|h| e.path().starts_with(h)));
    Ok(b.build())
}

/// `list_files`: the files (and directories, with a `/`) beneath `path`, relative to it,
/// sorted; at most [`MAX_LIST`].
pub fn list(ws: &Workspace, path: &str, glob: Option<&str>) -> Result<String, String> {
    let dir = start_dir(ws, path)?;
    let mut names = Vec::new();
    let mut total = 0usize;
    for entry in walker(ws, &dir, glob)? {
        let Ok(entry) = entry else { continue };
        if entry.depth() == 0 || ws.check_real(entry.path(), "").is_err() {
            continue;
        }
        total += 1;
        if names.len() < MAX_LIST {
            let rel = entry.path().strip_prefix(&dir).unwrap_or(entry.path());
            let dir_mark = if entry.file_type().is_some_and(|t| t.is_dir()) {
                "/"
            } else {
                ""
            };
            names.push(format!("{}{dir_mark}", rel.display()));
        }
    }
    names.sort();
    let mut out = names.join("\n");
    if total == 0 {
        return Ok(format!("no files under {path}"));
    }
    if total > names.len() {
        out.push_str(&format!(
            "\n[{} of {total} entries shown: narrow it with path or glob]",
            names.len()
        ));
    }
    Ok(out)
}

/// `search_files`: lines matching `pattern` (a regex, or a literal string) in the files beneath
/// `path` (filtered by `glob`), as `file:line:text`; at most [`MAX_MATCHES`].
pub fn search(
    ws: &Workspace,
    pattern: &str,
    literal: bool,
    case_insensitive: bool,
    path: &str,
    glob: Option<&str>,
) -> Result<String, String> {
    let dir = start_dir(ws, path)?;
    let matcher = RegexMatcherBuilder::new()
        .fixed_strings(literal)
        .case_insensitive(case_insensitive)
        .size_limit(10 * 1024 * 1024)
        .build(pattern)
        .map_err(|e| format!("pattern {pattern:?}: {e}"))?;
    let mut searcher = SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(0))
        .line_number(true)
        .build();
    let mut out = String::new();
    let mut shown = 0usize;
    let mut total = 0usize;
    let mut files = 0usize;
    for entry in walker(ws, &dir, glob)? {
        let Ok(entry) = entry else { continue };
        if !entry.file_type().is_some_and(|t| t.is_file())
            || ws.check_real(entry.path(), "").is_err()
        {
            continue;
        }
        files += 1;
        let rel = entry
            .path()
            .strip_prefix(&dir)
            .unwrap_or(entry.path())
            .display()
            .to_string();
        let _ = searcher.search_path(
            &matcher,
            entry.path(),
            UTF8(|line_no, line| {
                total += 1;
                if shown < MAX_MATCHES {
                    shown += 1;
                    let line = line.trim_end_matches(['\n', '\r']);
                    let cut: String = line.chars().take(MAX_MATCH_CHARS).collect();
                    out.push_str(&format!("{rel}:{line_no}:{cut}\n"));
                }
                Ok(true)
            }),
        );
    }
    if total == 0 {
        return Ok(format!(
            "no match for {pattern:?} in {files} file(s) under {path}"
        ));
    }
    if total > shown {
        out.push_str(&format!(
            "[{shown} of {total} matching lines shown: narrow it with path or glob]\n"
        ));
    }
    Ok(out)
}
