//! Conformance of task directories with the published JSON Schemas (`docs/schemas/`, validated
//! with `ctxhost::schemas`, i.e. the `jsonschema` crate): every file of every task directory under
//! a `contexts/` tree that a schema describes, every line of the JSONL ones.
//!
//! [`crate::support::TestEnv`] runs [`check_tree`] on its `contexts/` when it is dropped, so every
//! test checks what it produced; the totals of the test process are kept in
//! `$CARGO_TARGET_TMPDIR/conformance-totals.txt` (rewritten after each check, for reports).
//!
//! Not judged: an unterminated last line (torn by a crash, or being written: crash repair's and
//! fsck's business; counted in [`Report::torn`]), temporaries, `.torn` files, `tool-results/`,
//! and anything that is not a regular file: the files are read through
//! [`ctxhost::task_dir::TaskDir`], as the host reads them, so a symbolic link a hostile component
//! planted is never followed (fsck reports it).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::Mutex;

use ctxhost::schemas::{self, Schema};
use ctxhost::task_dir::TaskDir;
use serde_json::Value;

/// What a check found.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// Task directories checked.
    pub dirs: u64,
    /// Files validated.
    pub files: u64,
    /// JSONL lines validated.
    pub lines: u64,
    /// Unterminated last lines left alone.
    pub torn: u64,
    /// Files and lines validated per schema and line kind (`messages.jsonl: tool result`).
    pub kinds: BTreeMap<String, u64>,
    /// `file:line: what is wrong`, one per file or line that does not match.
    pub mismatches: Vec<String>,
}

impl Report {
    fn add(&mut self, other: &Report) {
        self.dirs += other.dirs;
        self.files += other.files;
        self.lines += other.lines;
        self.torn += other.torn;
        for (k, n) in &other.kinds {
            *self.kinds.entry(k.clone()).or_default() += n;
        }
        self.mismatches.extend(other.mismatches.iter().cloned());
    }

    /// How many files or lines of `schema` with line kind `kind` (`""` for files without kinds).
    pub fn seen(&self, schema: Schema, kind: &str) -> u64 {
        self.kinds
            .get(&key(schema, kind))
            .copied()
            .unwrap_or_default()
    }

    /// One line: `N task directories, N files, N lines (N torn last lines skipped)`.
    pub fn summary(&self) -> String {
        format!(
            "{} task directories, {} files, {} lines validated ({} torn last lines skipped), {} mismatches",
            self.dirs,
            self.files,
            self.lines,
            self.torn,
            self.mismatches.len()
        )
    }
}

fn key(schema: Schema, kind: &str) -> String {
    if kind.is_empty() {
        schema.task_file().to_string()
    } else {
        format!("{}: {kind}", schema.task_file())
    }
}

/// The line kind of a value that matched `schema`, by the fields the schemas dispatch on.
fn kind_of(schema: Schema, v: &Value) -> String {
    let has = |k: &str| v.get(k).is_some();
    match schema {
        Schema::Messages | Schema::Current => if v["role"] == "tool" {
            "tool result"
        } else if has("summary_id") {
            "summary"
        } else if has("tool_calls") {
            "tool call"
        } else {
            "plain message"
        }
        .to_string(),
        Schema::LlmCalls | Schema::Planning => v["type"].as_str().unwrap_or("?").to_string(),
        Schema::Tools => v["status"].as_str().unwrap_or("?").to_string(),
        _ => String::new(),
    }
}

/// Check every task directory of the tree at `contexts` (`running/`, `paused/`, `completed/`).
pub fn check_tree(contexts: &Path) -> Report {
    let mut report = Report::default();
    for state in ["running", "paused", "completed"] {
        let Ok(entries) = fs::read_dir(contexts.join(state)) else {
            continue;
        };
        let mut dirs: Vec<_> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        dirs.sort();
        for dir in dirs {
            check_dir(&dir, &mut report);
        }
    }
    report
}

/// Check the files of one task directory into `report`.
pub fn check_dir(dir: &Path, report: &mut Report) {
    report.dirs += 1;
    let task_dir = match TaskDir::open(dir) {
        Ok(d) => d,
        Err(e) => {
            report
                .mismatches
                .push(format!("{}: cannot be opened ({e})", dir.display()));
            return;
        }
    };
    let mut names: Vec<String> = Vec::new();
    for sub in [None, Some(ctxhost_format::files::PLANNING_DIR)] {
        let Ok(entries) = task_dir.entries(sub) else {
            continue;
        };
        for (name, meta) in entries {
            if meta.is_file() {
                names.push(match sub {
                    None => name,
                    Some(sub) => format!("{sub}/{name}"),
                });
            }
        }
    }
    names.sort();
    for name in names {
        let Some(schema) = Schema::for_task_file(&name) else {
            continue;
        };
        let path = dir.join(&name);
        let read = if schema.is_line() {
            task_dir.open_read(&name).and_then(|mut f| {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut f, &mut bytes).map(|_| bytes)
            })
        } else {
            task_dir.read(&name)
        };
        let bytes = match read {
            Ok(b) => b,
            Err(e) => {
                report
                    .mismatches
                    .push(format!("{}: cannot be read ({e})", path.display()));
                continue;
            }
        };
        report.files += 1;
        if schema.is_line() {
            check_lines(schema, &path, &bytes, report);
        } else {
            match serde_json::from_slice::<Value>(&bytes) {
                Ok(v) => judge(schema, &v, &path.display().to_string(), report),
                Err(e) => report
                    .mismatches
                    .push(format!("{}: not JSON ({e})", path.display())),
            }
        }
    }
}

fn check_lines(schema: Schema, path: &Path, bytes: &[u8], report: &mut Report) {
    let terminated = bytes.last() == Some(&b'\n');
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.split_terminator('\n').collect();
    for (i, line) in lines.iter().enumerate() {
        let at = format!("{}:{}", path.display(), i + 1);
        if i + 1 == lines.len() && !terminated {
            report.torn += 1;
            continue;
        }
        if line.trim().is_empty() {
            report.mismatches.push(format!("{at}: a blank line"));
            continue;
        }
        report.lines += 1;
        match serde_json::from_str::<Value>(line) {
            Ok(v) => judge(schema, &v, &at, report),
            Err(e) => report.mismatches.push(format!("{at}: not JSON ({e})")),
        }
    }
}

fn judge(schema: Schema, value: &Value, at: &str, report: &mut Report) {
    match schema.validate(value) {
        Ok(m) if m.is_empty() => {
            *report
                .kinds
                .entry(key(schema, &kind_of(schema, value)))
                .or_default() += 1;
        }
        Ok(m) => report.mismatches.push(format!(
            "{at}: does not match docs/schemas/{schema} {}",
            schemas::describe(&m, 5)
        )),
        Err(e) => report.mismatches.push(format!("{at}: {e}")),
    }
}

/// Add `report` to the totals of this test process and rewrite
/// `$CARGO_TARGET_TMPDIR/conformance-totals.txt` with them.
pub fn record_totals(report: &Report) {
    static TOTALS: Mutex<Option<(u64, Report)>> = Mutex::new(None);
    let mut guard = TOTALS.lock().unwrap_or_else(|p| p.into_inner());
    let (envs, totals) = guard.get_or_insert_with(Default::default);
    *envs += 1;
    totals.add(report);
    let mut text = format!("test environments checked: {envs}\n{}\n", totals.summary());
    for (k, n) in &totals.kinds {
        text.push_str(&format!("  {k}: {n}\n"));
    }
    let _ = fs::write(
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("conformance-totals.txt"),
        text,
    );
}
