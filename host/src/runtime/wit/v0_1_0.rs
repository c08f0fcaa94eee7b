//! `ctxhost:plugin@0.1.0` (`wit/v0.1.0/plugin.wit`, frozen): the bindings of its three plugin
//! worlds, so components built for ctxhost 0.1 keep loading, and the shim from its types to the
//! host's (the same as 0.2.0's, see [`super::v0_2_0`], except for):
//!
//! - `usage` has no prompt-cache counts: they are 0 in the host's [`Usage`] (and dropped from
//!   the `llm.complete` answers a 0.1.0 compressor gets).
//! - Summary ids are strings. A compressor's `summary-info.id` `sum-N` (or `N`) becomes N;
//!   anything else becomes the next free id counted from the task's summaries.jsonl
//!   ([`compress_result`]). `record-summary` is given `sum-N` ([`summary_id_arg`]), the form
//!   0.1.0 stores were written for. What such a compressor or store writes to disk with that
//!   string id (its summaries.jsonl line, its summary line in messages.jsonl) is numbered as
//!   soon as the call returns ([`number_summary_line`], [`number_history_line`]): files hold
//!   the spec's numbers only, and no other reader sees a string id.
//! - `compress-config` has no `keep-recent-tokens`: a 0.1.0 compressor bounds its kept tail by
//!   count only (the host's value is dropped).

/// World `compressor-plugin` at 0.1.0: imports `log` and `llm`, exports `compressor`.
pub mod compressor {
    wasmtime::component::bindgen!({
        world: "compressor-plugin",
        path: "../wit/v0.1.0",
    });
}

/// World `message-store-plugin` at 0.1.0: imports `log`, exports `message-store`.
pub mod message_store {
    wasmtime::component::bindgen!({
        world: "message-store-plugin",
        path: "../wit/v0.1.0",
        with: {
            "ctxhost:plugin/types": crate::runtime::wit::v0_1_0::compressor::ctxhost::plugin::types,
            "ctxhost:plugin/log": crate::runtime::wit::v0_1_0::compressor::ctxhost::plugin::log,
        },
    });
}

/// World `request-format-plugin` at 0.1.0: imports `log`, exports `request-format`.
pub mod request_format {
    wasmtime::component::bindgen!({
        world: "request-format-plugin",
        path: "../wit/v0.1.0",
        with: {
            "ctxhost:plugin/types": crate::runtime::wit::v0_1_0::compressor::ctxhost::plugin::types,
            "ctxhost:plugin/log": crate::runtime::wit::v0_1_0::compressor::ctxhost::plugin::log,
        },
    });
}

pub use compressor::{CompressorPlugin, CompressorPluginPre};
pub use message_store::{MessageStorePlugin, MessageStorePluginPre};
pub use request_format::{RequestFormatPlugin, RequestFormatPluginPre};

use ctxhost_format::files::{MESSAGES, SUMMARIES};
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::{Context as _, bail};
use serde_json::Value;

use compressor::ctxhost::plugin::{llm as wit_llm, log as wit_log, types as wit_types};
use compressor::exports::ctxhost::plugin::compressor as wit_compressor;
use ctxhost_format::summary_id;
use message_store::exports::ctxhost::plugin::message_store as wit_store;
use request_format::exports::ctxhost::plugin::request_format as wit_format;

use crate::runtime::types::{CompressResult, SummaryInfo, Usage};
use crate::task_dir::TaskDir;

super::unchanged_conversions!();
super::plugin_error_before_0_3_0!();
super::reply_before_0_3_0!();
super::chat_message_conversions!();

impl From<&crate::runtime::RequestConfig> for wit_format::RequestConfig {
    fn from(c: &crate::runtime::RequestConfig) -> Self {
        wit_format::RequestConfig {
            model: c.model.clone(),
            messages_file: c.messages_file.clone(),
            request_file: c.request_file.clone(),
            tools_file: c.tools_file.clone(),
            max_output_tokens: c.max_output_tokens,
            temperature: c.temperature,
        }
    }
}

/// 0.1.0 has no prompt-cache counts: 0.
impl From<wit_types::Usage> for Usage {
    fn from(u: wit_types::Usage) -> Self {
        Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.total_tokens,
            cache_read_tokens: 0,
            cache_creation_tokens: 0,
            reasoning_tokens: 0,
        }
    }
}

/// The prompt-cache counts are dropped (0.1.0 has no field for them).
/// Without `keep-recent-tokens` (new in 0.2.0): the kept tail of a 0.1.0 compressor is bounded
/// by `keep-recent-messages` only.
impl From<&crate::runtime::CompressConfig> for wit_compressor::CompressConfig {
    fn from(c: &crate::runtime::CompressConfig) -> Self {
        wit_compressor::CompressConfig {
            context_length: c.context_length,
            threshold: c.threshold,
            keep_recent_messages: c.keep_recent_messages,
            summary_prompt: c.summary_prompt.clone(),
            reserve_output_tokens: c.reserve_output_tokens,
        }
    }
}

impl From<Usage> for wit_types::Usage {
    fn from(u: Usage) -> Self {
        wit_types::Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.total_tokens,
        }
    }
}

/// The `summary-id` argument of a 0.1.0 `record-summary` for the host's integer id: `sum-N`.
pub fn summary_id_arg(id: u64) -> String {
    format!("{}{id}", summary_id::LEGACY_PREFIX)
}

/// A 0.1.0 compressor's result in host types. Its string summary id `sum-N` (or `N`) becomes N;
/// any other string becomes the next free id of the task: one more than the largest id in
/// `task_dir/summaries.jsonl` and than its line count, leaving out the compressor's own line
/// (the one whose `id` is that string), which it appended before returning. That line's id is
/// then rewritten as the number ([`number_summary_line`]).
///
/// summaries.jsonl is opened without following a symlink (a component may plant one pointing
/// out of the task directory). Errors (text for [`crate::runtime::RuntimeError::Host`]):
/// summaries.jsonl is needed and cannot be read.
pub fn compress_result(
    r: wit_compressor::CompressResult,
    task_dir: &Path,
) -> Result<CompressResult, String> {
    let summary = match r.summary {
        None => None,
        Some(s) => {
            let id = match summary_id::parse_legacy(&s.id) {
                Some(n) => n,
                None => next_free_id(task_dir, &s.id)?,
            };
            number_summary_line(task_dir, &s.id, id)?;
            Some(SummaryInfo {
                id,
                start_seq: s.start_seq,
                end_seq: s.end_seq,
                summary: s.summary,
                original_tokens: s.original_tokens,
                summary_tokens: s.summary_tokens,
            })
        }
    };
    Ok(CompressResult {
        context_file: r.context_file,
        summary,
    })
}

fn next_free_id(task_dir: &Path, own: &str) -> Result<u64, String> {
    let path = task_dir.join(SUMMARIES);
    let fail = |e: std::io::Error| {
        format!(
            "choosing an integer id for the 0.1.0 summary id {own:?}: reading {}: {e}",
            path.display()
        )
    };
    // Through the task directory's handle: a link named summaries.jsonl is refused.
    let file = match crate::task_dir::TaskDir::open(task_dir)
        .and_then(|d| d.open_read_if_exists(SUMMARIES))
    {
        Ok(Some(f)) => f,
        Ok(None) => return Ok(1),
        Err(e) => return Err(fail(e)),
    };
    summary_id::next_id(BufReader::new(file), Some(own)).map_err(fail)
}

/// Rewrite the `id` of the summaries.jsonl line(s) of `task_dir` whose id is the 0.1.0
/// compressor's string `own` as the number `id` (byte for byte otherwise, atomic replace).
/// Errors (text for [`crate::runtime::RuntimeError::Host`]): the file cannot be read or replaced.
pub fn number_summary_line(task_dir: &Path, own: &str, id: u64) -> Result<(), String> {
    let dir = TaskDir::open(task_dir).map_err(|e| format!("{}: {e}", task_dir.display()))?;
    if !dir.is_file(SUMMARIES) {
        return Ok(());
    }
    number_string_ids(&dir, SUMMARIES, "id", own, id)
        .map(drop)
        .map_err(|e| format!("numbering the 0.1.0 summary id {own:?}: {e:#}"))
}

/// After a 0.1.0 store's `record-summary` (given `given`, [`summary_id_arg`]): when the last
/// line of messages.jsonl carries `summary_id` as that string, rewrite it as the number `id`.
/// The history is replaced atomically (the checkpoints that count it are deleted first,
/// [`crate::checkpoint::remove_describing`]); a store that wrote the number costs one read
/// of the last line. Errors: the file cannot be read or replaced.
pub fn number_history_line(task_dir: &Path, given: &str, id: u64) -> anyhow::Result<()> {
    let dir = TaskDir::open(task_dir)?;
    let Some(mut lines) = crate::invariants::queries::open_backwards(&dir, MESSAGES)? else {
        return Ok(());
    };
    let last = lines
        .prev_value::<Value>()
        .map_err(crate::invariants::queries::bounded)?;
    if last.is_none_or(|(_, v)| v.get("summary_id").and_then(Value::as_str) != Some(given)) {
        return Ok(());
    }
    drop(lines);
    crate::checkpoint::remove_describing(&dir, MESSAGES)?;
    number_string_ids(&dir, MESSAGES, "summary_id", given, id)?;
    Ok(())
}

/// Stream file `name` of `dir` and rewrite each line whose top-level `key` is the string
/// `text` with the number `number` instead, every other byte unchanged; the file is replaced
/// atomically ([`TaskDir::write_atomic_if`]) when a line changed. Returns the lines changed.
/// Errors (the file is left as it was): it cannot be read or replaced.
fn number_string_ids(
    dir: &TaskDir,
    name: &str,
    key: &str,
    text: &str,
    number: u64,
) -> anyhow::Result<usize> {
    let input = dir
        .open_read(name)
        .with_context(|| format!("cannot open {}", dir.show(name)))?;
    let needle = serde_json::to_string(text)?;
    let mut changed = 0usize;
    let mut failed: Option<anyhow::Error> = None;
    let result = dir.write_atomic_if(name, |out| {
        let mut reader = BufReader::new(input);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            if reader.read_until(b'\n', &mut buf)? == 0 {
                break;
            }
            let edited = std::str::from_utf8(&buf)
                .ok()
                .filter(|line| line.contains(&needle))
                .and_then(|line| {
                    let body = line.trim_end_matches(['\n', '\r']);
                    let value: Value = serde_json::from_str(body).ok()?;
                    (value.get(key).and_then(Value::as_str) == Some(text)).then(|| {
                        replace_string_value(body, &value, key, number)
                            .map(|new| format!("{new}{}", &line[body.len()..]))
                    })
                });
            match edited {
                Some(Ok(new)) => {
                    out.write_all(new.as_bytes())?;
                    changed += 1;
                }
                Some(Err(e)) => {
                    failed = Some(e);
                    return Err(std::io::Error::other("the edit failed"));
                }
                None => out.write_all(&buf)?,
            }
        }
        Ok(changed > 0)
    });
    if let Some(e) = failed {
        return Err(e.context(format!("in {}", dir.show(name))));
    }
    result.with_context(|| format!("cannot replace {}", dir.show(name)))?;
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

    fn result(id: &str) -> wit_compressor::CompressResult {
        wit_compressor::CompressResult {
            context_file: "compressed.jsonl".into(),
            summary: Some(wit_compressor::SummaryInfo {
                id: id.into(),
                start_seq: 2,
                end_seq: 9,
                summary: "s".into(),
                original_tokens: 100,
                summary_tokens: 10,
            }),
        }
    }

    fn id_of(r: CompressResult) -> u64 {
        r.summary.expect("a summary").id
    }

    #[test]
    fn sum_n_ids_become_n() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            id_of(compress_result(result("sum-3"), dir.path()).unwrap()),
            3
        );
        assert_eq!(
            id_of(compress_result(result("12"), dir.path()).unwrap()),
            12
        );
        assert_eq!(summary_id_arg(3), "sum-3");
    }

    #[test]
    fn other_ids_take_the_next_free_id_from_summaries_jsonl() {
        let dir = tempfile::tempdir().unwrap();
        // No summaries.jsonl yet: 1.
        assert_eq!(
            id_of(compress_result(result("alpha"), dir.path()).unwrap()),
            1
        );
        // Two earlier summaries and the compressor's own line: 3, written into that line.
        let summaries = dir.path().join("summaries.jsonl");
        std::fs::write(
            &summaries,
            "{\"id\":1}\n{\"id\":2}\n{\"id\": \"alpha\", \"summary\":\"s\"}\n",
        )
        .unwrap();
        assert_eq!(
            id_of(compress_result(result("alpha"), dir.path()).unwrap()),
            3
        );
        assert_eq!(
            std::fs::read_to_string(&summaries).unwrap(),
            "{\"id\":1}\n{\"id\":2}\n{\"id\": 3, \"summary\":\"s\"}\n"
        );
    }

    #[test]
    fn a_sum_n_line_of_the_compressor_is_numbered() {
        let dir = tempfile::tempdir().unwrap();
        let summaries = dir.path().join("summaries.jsonl");
        std::fs::write(
            &summaries,
            "{\"id\":1}\n{\"id\":\"sum-2\",\"x\":\"sum-2\"}\n",
        )
        .unwrap();
        assert_eq!(
            id_of(compress_result(result("sum-2"), dir.path()).unwrap()),
            2
        );
        assert_eq!(
            std::fs::read_to_string(&summaries).unwrap(),
            "{\"id\":1}\n{\"id\":2,\"x\":\"sum-2\"}\n"
        );
    }

    #[test]
    fn a_0_1_0_stores_summary_line_is_numbered_and_the_history_checkpoints_go() {
        let dir = tempfile::tempdir().unwrap();
        let messages = dir.path().join("messages.jsonl");
        let first = "{\"seq\":1,\"role\":\"system\",\"content\":\"s\"}\n";
        // The last line is not the store's summary line: nothing changes.
        std::fs::write(&messages, first).unwrap();
        number_history_line(dir.path(), "sum-1", 1).unwrap();
        assert_eq!(std::fs::read_to_string(&messages).unwrap(), first);
        let summary =
            "{\"seq\":2,\"role\":\"assistant\",\"content\":\"sum\",\"summary_id\":\"sum-1\"}\n";
        std::fs::write(&messages, format!("{first}{summary}")).unwrap();
        std::fs::write(dir.path().join("history_checkpoint.json"), "{}").unwrap();
        number_history_line(dir.path(), "sum-1", 1).unwrap();
        assert_eq!(
            std::fs::read_to_string(&messages).unwrap(),
            format!("{first}{}", summary.replace("\"sum-1\"", "1"))
        );
        assert!(!dir.path().join("history_checkpoint.json").exists());
        // Written by the 0.1.0 store with the id it was given: now the spec's number.
        let last: Value = serde_json::from_str(
            std::fs::read_to_string(&messages)
                .unwrap()
                .lines()
                .last()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(last["summary_id"], Value::from(1));
    }

    #[test]
    fn a_symlinked_summaries_file_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::NamedTempFile::new().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("summaries.jsonl")).unwrap();
        let e = compress_result(result("alpha"), dir.path()).unwrap_err();
        assert!(
            e.contains("summaries.jsonl") && e.contains("\"alpha\""),
            "{e}"
        );
    }

    #[test]
    fn usage_gets_zero_cache_counts_and_drops_them_on_the_way_in() {
        let u = Usage::from(wit_types::Usage {
            prompt_tokens: 10,
            completion_tokens: 2,
            total_tokens: 12,
        });
        assert_eq!((u.cache_read_tokens, u.cache_creation_tokens), (0, 0));
        let back = wit_types::Usage::from(Usage {
            cache_read_tokens: 5,
            ..u
        });
        assert_eq!(back.prompt_tokens, 10);
    }

    #[test]
    fn no_summary_is_no_summary() {
        let dir = tempfile::tempdir().unwrap();
        let r = wit_compressor::CompressResult {
            context_file: "c.jsonl".into(),
            summary: None,
        };
        assert_eq!(compress_result(r, dir.path()).unwrap().summary, None);
    }
}
