//! `ctxhost:plugin@0.1.0` (`wit/v0.1.0/plugin.wit`, frozen): the bindings of its three plugin
//! worlds, so components built for ctxhost 0.1 keep loading, and the shim from its types to the
//! host's (the same as 0.2.0's, see [`super::v0_2_0`], except for):
//!
//! - `usage` has no prompt-cache counts: they are 0 in the host's [`Usage`] (and dropped from
//!   the `llm.complete` answers a 0.1.0 compressor gets).
//! - Summary ids are strings. A compressor's `summary-info.id` `sum-N` (or `N`) becomes N;
//!   anything else becomes the next free id counted from the task's summaries.jsonl
//!   ([`compress_result`]). `record-summary` is given `sum-N` ([`summary_id_arg`]), the form
//!   0.1.0 stores were written for; the ids such a store or compressor writes to disk stay
//!   strings until `ctxhost fsck --repair` rewrites them.
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

use ctxhost_format::files::SUMMARIES;
use std::io::BufReader;
use std::path::Path;

use compressor::ctxhost::plugin::{llm as wit_llm, log as wit_log, types as wit_types};
use compressor::exports::ctxhost::plugin::compressor as wit_compressor;
use ctxhost_format::summary_id;
use message_store::exports::ctxhost::plugin::message_store as wit_store;
use request_format::exports::ctxhost::plugin::request_format as wit_format;

use crate::runtime::types::{CompressResult, SummaryInfo, Usage};

super::unchanged_conversions!();
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
/// (the one whose `id` is that string), which it appended before returning.
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
        // Two earlier summaries (one in each form) and the compressor's own line: 3.
        std::fs::write(
            dir.path().join("summaries.jsonl"),
            "{\"id\":\"sum-1\"}\n{\"id\":2}\n{\"id\":\"alpha\"}\n",
        )
        .unwrap();
        assert_eq!(
            id_of(compress_result(result("alpha"), dir.path()).unwrap()),
            3
        );
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
