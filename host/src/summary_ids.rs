//! Old string summary ids in a task directory: finding them (`ctxhost fsck`) and rewriting them
//! to the spec's JSON numbers (`ctxhost fsck --repair`).
//!
//! Summary ids are integers from 1: `id` in summaries.jsonl, `summary_id` in messages.jsonl
//! ([`ctxhost_format::summary_id`]). ctxhost 0.1 and WIT 0.1.0 components wrote strings:
//! `"sum-N"` (which stands for N), or a 0.1.0 compressor's own scheme (which the host's shim
//! numbered as the next free id when the summary was made). Readers accept `"sum-N"`; this
//! module turns every string id into its number so that any reader of the spec's formats can
//! rely on the type.
//!
//! A rewrite changes only the id's value, byte for byte everything else stays (each rewritten
//! line is re-parsed and compared with the original), and replaces the file atomically: the new
//! content is streamed to `.NAME.tmp-PID-N` in the same directory, fsynced, renamed over the file,
//! and the directory fsynced (DESIGN.md §7). A file with nothing to rewrite is not touched.

use ctxhost_format::files::{MESSAGES, SUMMARIES};
use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader};

use anyhow::{Context, bail};
use ctxhost_format::summary_id::{self, OnDisk};
use serde_json::Value;

use crate::task_dir::TaskDir;

/// The summaries file of a task directory.
pub const SUMMARIES_FILE: &str = SUMMARIES;
/// The history file of a task directory.
const MESSAGES_FILE: &str = MESSAGES;

/// A summary id found in a string form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OldId {
    /// The string as written, e.g. `sum-3`.
    pub text: String,
    /// The number it stands for (`sum-3` → 3); `None` for a string of another scheme, which
    /// only `--repair` can number (from summaries.jsonl).
    pub number: Option<u64>,
}

impl OldId {
    /// What fsck says about it.
    pub fn describe(&self, field: &str) -> String {
        match self.number {
            Some(n) => format!(
                "{field} {:?} is the old string form (ctxhost 0.1); the spec's form is the number {n} \
                 (`ctxhost fsck --repair` rewrites it)",
                self.text
            ),
            None => format!(
                "{field} {:?} is a string, not a number (written by a WIT 0.1.0 component); \
                 `ctxhost fsck --repair` numbers it",
                self.text
            ),
        }
    }
}

/// Parse one line's JSON for a typed check: the value with `key` (`id` or `summary_id`) set
/// to a number when it holds a string (the placeholder 1 for a string that stands for no
/// number), and the old id found there, if any.
///
/// Errors: the line is not JSON.
pub fn split_old_id(text: &str, key: &str) -> serde_json::Result<(Value, Option<OldId>)> {
    let mut value: Value = serde_json::from_str(text)?;
    let old = match value.get(key).and_then(OnDisk::classify) {
        Some(OnDisk::Legacy(text, n)) => Some(OldId {
            text,
            number: Some(n),
        }),
        Some(OnDisk::Unreadable(text)) => Some(OldId { text, number: None }),
        _ => None,
    };
    if let Some(old) = &old {
        value[key] = Value::from(old.number.unwrap_or(1));
    }
    Ok((value, old))
}

/// What [`rewrite`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rewrite {
    /// Lines of summaries.jsonl whose `id` became a number.
    pub summaries: usize,
    /// Lines of messages.jsonl whose `summary_id` became a number.
    pub messages: usize,
    /// `summary_id` strings of messages.jsonl that stand for no number and match no summary
    /// (left as they were).
    pub unresolved: Vec<String>,
}

impl std::fmt::Display for Rewrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rewrote {} summary id(s) in {SUMMARIES_FILE} and {} in {MESSAGES_FILE} as numbers",
            self.summaries, self.messages
        )?;
        if !self.unresolved.is_empty() {
            write!(
                f,
                "; left {:?} in {MESSAGES_FILE} (no summary has that id)",
                self.unresolved
            )?;
        }
        Ok(())
    }
}

/// Rewrite every string summary id of the task directory `dir` as a number: first
/// summaries.jsonl (`"sum-N"` → N; another string → the next free id: one more than the largest
/// id before it and than the number of lines before it, skipping ids used elsewhere in the file,
/// as the WIT 0.1.0 shim chose it), then messages.jsonl (`summary_id` strings through the same
/// mapping, else `"sum-N"` → N). Lines that are not JSON are copied unchanged (fsck reports them).
///
/// Errors: a file cannot be read or replaced (it is left as it was).
pub fn rewrite(dir: &TaskDir) -> anyhow::Result<Rewrite> {
    let mut done = Rewrite::default();
    let summaries = SUMMARIES_FILE;
    let mut mapping: HashMap<String, u64> = HashMap::new();
    if dir.is_file(summaries) {
        let used = numeric_ids(dir, summaries)?;
        let mut largest = 0u64;
        let mut lines_before = 0u64;
        let mut taken = used.clone();
        done.summaries = replace_lines(dir, summaries, |line| {
            let Ok(value) = serde_json::from_str::<Value>(line) else {
                lines_before += 1;
                return Ok(None);
            };
            lines_before += 1;
            let number = match value.get("id").and_then(OnDisk::classify) {
                Some(OnDisk::Number(n)) => {
                    largest = largest.max(n);
                    return Ok(None);
                }
                Some(OnDisk::Legacy(text, n)) => {
                    mapping.insert(text, n);
                    n
                }
                Some(OnDisk::Unreadable(text)) => {
                    let mut n = largest.max(lines_before - 1) + 1;
                    while taken.contains(&n) {
                        n += 1;
                    }
                    taken.insert(n);
                    mapping.insert(text, n);
                    n
                }
                None => return Ok(None),
            };
            largest = largest.max(number);
            replace_string_value(line, &value, "id", number).map(Some)
        })?;
    }
    let messages = MESSAGES_FILE;
    if dir.is_file(messages) {
        let mut unresolved = BTreeSet::new();
        done.messages = replace_lines(dir, messages, |line| {
            if !line.contains("\"summary_id\"") {
                return Ok(None);
            }
            let Ok(value) = serde_json::from_str::<Value>(line) else {
                return Ok(None);
            };
            let Some(Value::String(text)) = value.get("summary_id") else {
                return Ok(None);
            };
            let number = mapping
                .get(text)
                .copied()
                .or_else(|| summary_id::parse_legacy(text));
            match number {
                Some(n) => replace_string_value(line, &value, "summary_id", n).map(Some),
                None => {
                    unresolved.insert(text.clone());
                    Ok(None)
                }
            }
        })?;
        done.unresolved = unresolved.into_iter().collect();
    }
    Ok(done)
}

/// The numeric ids (numbers and `"sum-N"`) of summaries.jsonl (`name` in `dir`).
fn numeric_ids(dir: &TaskDir, name: &str) -> anyhow::Result<BTreeSet<u64>> {
    let path = dir.file_path(name);
    let file = dir
        .open_read(name)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let mut ids = BTreeSet::new();
    for line in BufReader::new(file).lines() {
        let line = line.with_context(|| format!("cannot read {}", path.display()))?;
        if let Some(OnDisk::Number(n) | OnDisk::Legacy(_, n)) = serde_json::from_str::<Value>(&line)
            .ok()
            .and_then(|v| v.get("id").and_then(OnDisk::classify))
        {
            ids.insert(n);
        }
    }
    Ok(ids)
}

/// Stream the file `name` of `dir` through `edit` (called with each non-blank line, without its
/// newline; `Some` replaces the line) into a temporary file and, when a line changed, replace
/// the file with it atomically ([`TaskDir::write_atomic_if`]). Returns the number of lines
/// changed. Errors (the file is left as it was): the file cannot be read or replaced, or `edit`
/// fails (named with the file and line).
fn replace_lines(
    dir: &TaskDir,
    name: &str,
    mut edit: impl FnMut(&str) -> anyhow::Result<Option<String>>,
) -> anyhow::Result<usize> {
    let path = dir.file_path(name);
    let input = dir
        .open_read(name)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let mut changed = 0usize;
    // An error of `edit`, kept whole (the writer's error type is io::Error).
    let mut failed: Option<anyhow::Error> = None;
    let result = dir.write_atomic_if(name, |out| {
        let mut reader = BufReader::new(input);
        let mut buf = Vec::new();
        let mut line_no = 0u64;
        loop {
            buf.clear();
            if reader.read_until(b'\n', &mut buf)? == 0 {
                break;
            }
            line_no += 1;
            let replaced = match std::str::from_utf8(&buf) {
                Ok(text) => {
                    let body = text.trim_end_matches(['\n', '\r']);
                    if body.trim().is_empty() {
                        None
                    } else {
                        match edit(body) {
                            Ok(new) => new.map(|new| format!("{new}{}", &text[body.len()..])),
                            Err(e) => {
                                let e = e.context(format!("{} line {line_no}", path.display()));
                                failed = Some(e);
                                return Err(std::io::Error::other("the edit failed"));
                            }
                        }
                    }
                }
                Err(_) => None,
            };
            match replaced {
                Some(new) => {
                    out.write_all(ctxhost_format::jsonl::escape_line_separators(&new).as_bytes())?;
                    changed += 1;
                }
                None => out.write_all(&buf)?,
            }
        }
        Ok(changed > 0)
    });
    if let Some(e) = failed {
        return Err(e);
    }
    result.with_context(|| format!("cannot replace {}", path.display()))?;
    Ok(changed)
}

/// `line` with the string value of its top-level `key` replaced by `number`, every other byte
/// unchanged. `value` is the line parsed; the result is parsed again and must equal it with
/// only `key` changed.
fn replace_string_value(
    line: &str,
    value: &Value,
    key: &str,
    number: u64,
) -> anyhow::Result<String> {
    let pattern = format!("\"{key}\"");
    let mut from = 0;
    while let Some(found) = line[from..].find(&pattern) {
        let after_key = from + found + pattern.len();
        from = after_key;
        let Some(rest) = line[after_key..].trim_start().strip_prefix(':') else {
            continue;
        };
        let start = line.len() - rest.trim_start().len();
        let mut strings = serde_json::Deserializer::from_str(&line[start..]).into_iter::<String>();
        if !matches!(strings.next(), Some(Ok(_))) {
            continue;
        }
        let end = start + strings.byte_offset();
        let new = format!("{}{number}{}", &line[..start], &line[end..]);
        let mut expected = value.clone();
        expected[key] = Value::from(number);
        if serde_json::from_str::<Value>(&new).ok().as_ref() == Some(&expected) {
            return Ok(new);
        }
    }
    bail!("cannot find the string value of `{key}` to rewrite it")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn rewrite_line(line: &str, key: &str, n: u64) -> String {
        let v: Value = serde_json::from_str(line).unwrap();
        replace_string_value(line, &v, key, n).unwrap()
    }

    #[test]
    fn only_the_value_changes() {
        assert_eq!(
            rewrite_line(
                r#"{"id":"sum-3","summary":"a \"id\": \"x\"","x":1}"#,
                "id",
                3
            ),
            r#"{"id":3,"summary":"a \"id\": \"x\"","x":1}"#
        );
        // The key appears inside a string first; spacing as a third party wrote it.
        assert_eq!(
            rewrite_line(
                r#"{"summary": "\"id\": \"q\"", "id" :  "s\u0031", "n": 2}"#,
                "id",
                7
            ),
            r#"{"summary": "\"id\": \"q\"", "id" :  7, "n": 2}"#
        );
        assert_eq!(
            rewrite_line(
                r#"{"seq":4,"role":"assistant","content":"x","summary_id":"sum-1"}"#,
                "summary_id",
                1
            ),
            r#"{"seq":4,"role":"assistant","content":"x","summary_id":1}"#
        );
    }

    #[test]
    fn split_old_id_reports_the_old_form() {
        let (v, old) = split_old_id(r#"{"id":"sum-2"}"#, "id").unwrap();
        assert_eq!(v["id"], 2);
        assert_eq!(
            old,
            Some(OldId {
                text: "sum-2".into(),
                number: Some(2)
            })
        );
        let (v, old) = split_old_id(r#"{"id":"zeta"}"#, "id").unwrap();
        assert_eq!(v["id"], 1);
        assert_eq!(old.unwrap().number, None);
        assert_eq!(split_old_id(r#"{"id":5}"#, "id").unwrap().1, None);
        assert!(split_old_id("{", "id").is_err());
    }

    #[test]
    fn a_directory_is_rewritten_and_then_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let summaries = concat!(
            "{\"id\":\"sum-1\",\"start_seq\":2,\"end_seq\":5,\"summary\":\"one\"}\n",
            "{\"id\":\"zeta\",\"start_seq\":2,\"end_seq\":9,\"summary\":\"two\"}\n",
            "{\"id\":3,\"start_seq\":2,\"end_seq\":12,\"summary\":\"three\"}\n",
        );
        let messages = concat!(
            "{\"seq\":1,\"role\":\"system\",\"content\":\"s\"}\n",
            "{\"seq\":6,\"role\":\"assistant\",\"content\":\"one\",\"summary_id\":\"sum-1\"}\r\n",
            "{\"seq\":10,\"role\":\"assistant\",\"content\":\"two\",\"summary_id\":\"zeta\"}\n",
            "{\"seq\":11,\"role\":\"assistant\",\"content\":\"?\",\"summary_id\":\"nowhere\"}\n",
            "{\"seq\":13,\"role\":\"assistant\",\"content\":\"three\",\"summary_id\":3}\n",
            "{\"seq\":14,\"role\":\"assistant\",\"content\":\"torn",
        );
        fs::write(dir.path().join(SUMMARIES_FILE), summaries).unwrap();
        fs::write(dir.path().join(MESSAGES_FILE), messages).unwrap();
        let done = rewrite(&TaskDir::open(dir.path()).unwrap()).unwrap();
        assert_eq!(
            done,
            Rewrite {
                summaries: 2,
                messages: 2,
                unresolved: vec!["nowhere".into()]
            }
        );
        assert_eq!(
            fs::read_to_string(dir.path().join(SUMMARIES_FILE)).unwrap(),
            summaries.replace("\"sum-1\"", "1").replace("\"zeta\"", "2")
        );
        assert_eq!(
            fs::read_to_string(dir.path().join(MESSAGES_FILE)).unwrap(),
            messages
                .replace("\"summary_id\":\"sum-1\"", "\"summary_id\":1")
                .replace("\"summary_id\":\"zeta\"", "\"summary_id\":2")
        );
        // No temporary left; a second run changes nothing.
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        let again = rewrite(&TaskDir::open(dir.path()).unwrap()).unwrap();
        assert_eq!((again.summaries, again.messages), (0, 0));
    }

    #[test]
    fn a_task_without_summaries_is_untouched() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            rewrite(&TaskDir::open(dir.path()).unwrap()).unwrap(),
            Rewrite::default()
        );
        fs::write(dir.path().join(MESSAGES_FILE), "{\"seq\":1}\n").unwrap();
        assert_eq!(
            rewrite(&TaskDir::open(dir.path()).unwrap()).unwrap(),
            Rewrite::default()
        );
    }
}
