//! `builtin:observation-masking`: a compressor with no LLM (world `compressor-plugin`).
//!
//! `should-compress`: current tokens > context-length × threshold.
//!
//! `compress` keeps every message and every tool call/result pair, and replaces the content of
//! the tool results older than the kept tail (the summariser's: the `keep-recent-messages` most
//! recent messages, moved earlier so tool call groups stay whole, and at most
//! `keep-recent-tokens` tokens down to the newest message's group, whose older results are
//! masked too when it alone is over that bound) with a placeholder naming where the full text
//! is: `[tool result masked: full text in tools.jsonl seq N]` (or the tool_call_id when
//! tools.jsonl has no line for the call). Results already masked, or shorter than their
//! placeholder, stay as they are; when nothing gets smaller the compression fails with a
//! message saying so. No summary is made. The new context is compressed.jsonl (deleted on
//! failure); current.jsonl is only read. See [`mask`] for the passes.

mod files;
mod mask;

use ctxhost_plugin::format::compress::over_threshold;

use ctxhost_plugin::Cleanup;
use ctxhost_plugin::compressor::{CompressConfig, CompressResult, Guest};
use ctxhost_plugin::log::{Level, log};
use ctxhost_plugin::types::PluginError;
use files::COMPRESSED;

struct ObservationMasking;

impl Guest for ObservationMasking {
    fn should_compress(current_tokens: u64, config: CompressConfig) -> bool {
        over_threshold(current_tokens, config.context_length, config.threshold)
    }

    fn compress(config: CompressConfig) -> Result<CompressResult, PluginError> {
        let mut cleanup = Cleanup::new(&[], COMPRESSED);
        let done = mask::mask(
            config.keep_recent_messages as usize,
            config.keep_recent_tokens,
        )?;
        cleanup.keep_output();
        log(
            Level::Info,
            &format!(
                "masked {} tool result(s), about {} tokens saved{}",
                done.results,
                done.tokens_saved,
                if done.not_found > 0 {
                    format!(
                        " ({} without a tools.jsonl line, named by tool_call_id)",
                        done.not_found
                    )
                } else {
                    String::new()
                }
            ),
        );
        Ok(CompressResult {
            context_file: COMPRESSED.to_string(),
            summary: None,
        })
    }
}

ctxhost_plugin::export_compressor!(ObservationMasking);
