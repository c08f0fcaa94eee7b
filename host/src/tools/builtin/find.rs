//! `list_files` and `search_files`: walking a directory of the [`Workspace`] with ripgrep's
//! own libraries (`ignore`: .gitignore honoured, links not followed; `grep-searcher`,
//! `grep-regex`: the search).
//!
//! `search_files` walks and searches on as many threads as ripgrep does (`ignore`'s parallel
//! walker, one searcher per thread) and shows the matches in a fixed order whatever the threads
//! did: sorted by file, then line, the first [`MAX_MATCHES`] kept as the walk goes (never all).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

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
    Ok(walk_builder(ws, dir, glob)?.build())
}

/// The builder of [`walker`] (for a sequential or a parallel walk).
fn walk_builder(ws: &Workspace, dir: &Path, glob: Option<&str>) -> Result<WalkBuilder, String> {
    let mut b = WalkBuilder::new(dir);
    b.follow_links(false).require_git(false).hidden(true);
    if let Some(g) = glob.filter(|g| !g.is_empty()) {
        let mut o = OverrideBuilder::new(dir);
        o.add(g).map_err(|e| format!("glob {g:?}: {e}"))?;
        b.overrides(o.build().map_err(|e| format!("glob {g:?}: {e}"))?);
    }
    let hidden = ws.hidden().to_vec();
    b.filter_entry(move |e| !hidden.iter().any(|h| e.path().starts_with(h)));
    Ok(b)
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

/// The matching lines kept while a search runs: the first [`MAX_MATCHES`] in (file, line) order
/// of those seen so far, and how many there were in all.
#[derive(Default)]
struct Kept {
    lines: BTreeMap<(String, u64), String>,
    total: usize,
}

impl Kept {
    /// Whether a line of file `rel` could still be shown: fewer than [`MAX_MATCHES`] kept, or
    /// `rel` sorts before the file of the last one kept. When not, the file's matches are only
    /// counted (no line copied: a pattern matching every line stays a count).
    fn may_take(&self, rel: &str) -> bool {
        self.lines.len() < MAX_MATCHES
            || self
                .lines
                .last_key_value()
                .is_some_and(|((last, _), _)| rel <= last.as_str())
    }

    /// Add one file's matches (its first [`MAX_MATCHES`], in line order) and its `count`.
    fn add(&mut self, rel: &str, lines: Vec<(u64, String)>, count: usize) {
        self.total += count;
        for (line_no, text) in lines {
            let key = (rel.to_string(), line_no);
            if self.lines.len() >= MAX_MATCHES {
                // Full: a line goes in only before the last kept one, which then leaves.
                match self.lines.last_key_value() {
                    Some((last, _)) if key < *last => {
                        self.lines.pop_last();
                    }
                    _ => break,
                }
            }
            self.lines.insert(key, text);
        }
    }
}

/// `search_files`: lines matching `pattern` (a regex, or a literal string) in the files beneath
/// `path` (filtered by `glob`), as `file:line:text` sorted by file and line; at most
/// [`MAX_MATCHES`].
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
    let kept = Mutex::new(Kept::default());
    let files = AtomicUsize::new(0);
    walk_builder(ws, &dir, glob)?.build_parallel().run(|| {
        // One searcher and matcher per thread.
        let matcher = matcher.clone();
        let mut searcher = SearcherBuilder::new()
            .binary_detection(BinaryDetection::quit(0))
            .line_number(true)
            .build();
        let (dir, kept, files) = (&dir, &kept, &files);
        Box::new(move |entry| {
            let Ok(entry) = entry else {
                return ignore::WalkState::Continue;
            };
            if !entry.file_type().is_some_and(|t| t.is_file())
                || ws.check_real(entry.path(), "").is_err()
            {
                return ignore::WalkState::Continue;
            }
            files.fetch_add(1, Ordering::Relaxed);
            let rel = entry
                .path()
                .strip_prefix(dir)
                .unwrap_or(entry.path())
                .display()
                .to_string();
            let take = kept.lock().map_or(true, |k| k.may_take(&rel));
            let mut lines = Vec::new();
            let mut count = 0usize;
            let _ = searcher.search_path(
                &matcher,
                entry.path(),
                UTF8(|line_no, line| {
                    count += 1;
                    if take && lines.len() < MAX_MATCHES {
                        let line = line.trim_end_matches(['\n', '\r']);
                        lines.push((line_no, line.chars().take(MAX_MATCH_CHARS).collect()));
                    }
                    Ok(true)
                }),
            );
            if count > 0
                && let Ok(mut k) = kept.lock()
            {
                k.add(&rel, lines, count);
            }
            ignore::WalkState::Continue
        })
    });
    let kept = kept.into_inner().unwrap_or_else(|e| e.into_inner());
    let files = files.into_inner();
    if kept.total == 0 {
        return Ok(format!(
            "no match for {pattern:?} in {files} file(s) under {path}"
        ));
    }
    let mut out = String::new();
    for ((rel, line_no), text) in &kept.lines {
        out.push_str(&format!("{rel}:{line_no}:{text}\n"));
    }
    if kept.total > kept.lines.len() {
        out.push_str(&format!(
            "[{} of {} matching lines shown: narrow it with path or glob]\n",
            kept.lines.len(),
            kept.total
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Many files with matches, found by several threads in any order: the lines shown are
    /// always the first [`MAX_MATCHES`] by file and line, and the count is exact.
    #[test]
    fn search_shows_the_first_matches_by_file_and_line_whatever_the_threads_did() {
        let ws_dir = tempfile::tempdir().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        for d in 0..10 {
            let sub = ws_dir.path().join(format!("d{d}"));
            std::fs::create_dir(&sub).unwrap();
            for f in 0..30 {
                let text: String = (0..3)
                    .map(|i| format!("x {i} needle {d} {f}\nhay\n"))
                    .collect();
                std::fs::write(sub.join(format!("f{f:02}.txt")), text).unwrap();
            }
        }
        let ws = Workspace::open(ws_dir.path(), tmp.path(), &[]).unwrap();
        let mut want = Vec::new();
        for d in 0..10 {
            for f in 0..30 {
                for i in 0..3 {
                    want.push(format!(
                        "d{d}/f{f:02}.txt:{}:x {i} needle {d} {f}",
                        2 * i + 1
                    ));
                }
            }
        }
        want.truncate(MAX_MATCHES);
        for _ in 0..5 {
            let out = search(&ws, "needle", true, false, ".", None).unwrap();
            let lines: Vec<&str> = out.lines().collect();
            assert_eq!(lines[..MAX_MATCHES], want[..], "{out}");
            assert_eq!(
                lines[MAX_MATCHES],
                format!("[{MAX_MATCHES} of 900 matching lines shown: narrow it with path or glob]")
            );
        }
        let one = search(&ws, "2 needle 7 12$", false, false, "d7", None).unwrap();
        assert_eq!(one, "f12.txt:5:x 2 needle 7 12\n");
    }
}
