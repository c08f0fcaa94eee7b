//! What the context window leaves for each part of a context, derived from the `llm`,
//! `context_storage` and `tools` sections: the tokens reserved for the model's reply, the
//! effective cap of one tool result, the token bound of the messages a compression keeps, and
//! the compressor's settings.
//!
//! The rule they keep: after a compression the context is the system prompt, a summary (at most
//! the reply reserve) and the kept messages; the newest message is always kept, and a tool
//! result is at most half of what the window leaves after the reply, so a compression can always
//! bring the context back under the threshold while a single result fits.

use super::Config;
use crate::runtime::CompressConfig;

/// Tokens reserved for the model's reply when `llm.max_output_tokens` is not set.
pub const DEFAULT_RESERVE_OUTPUT_TOKENS: u32 = 1024;

pub use crate::bound::MIN_TOOL_OUTPUT_CAP;

impl Config {
    /// Tokens reserved for the model's reply: `llm.max_output_tokens`, or
    /// [`DEFAULT_RESERVE_OUTPUT_TOKENS`] when it is not set.
    pub fn reserve_output_tokens(&self) -> u32 {
        self.llm
            .max_output_tokens
            .unwrap_or(DEFAULT_RESERVE_OUTPUT_TOKENS)
    }

    /// The most estimated tokens one tool result may put into the context:
    /// `tools.max_tool_output_tokens`, but no more than a window of `context_length` tokens
    /// leaves after the reply reserve and a summary as long as a reply (what a compression keeps
    /// beside the newest result: the summary request asks for at most the reserve), the reserve
    /// counted at most as half the window; at least [`MIN_TOOL_OUTPUT_CAP`]. A longer result is
    /// cut for the context and kept whole in `tool-results/{seq}.txt`. The agent loop passes
    /// the window minus the tool definitions sent with every request.
    ///
    /// E.g. 4000 with the defaults (window 8192, reserve 1024: 6144 left), 2048 for a 4096
    /// window.
    pub fn tool_output_cap_for(&self, context_length: u64) -> u64 {
        let reserve = u64::from(self.reserve_output_tokens()).min(context_length / 2);
        let share = context_length.saturating_sub(2 * reserve);
        self.tools
            .max_tool_output_tokens
            .min(share.max(MIN_TOOL_OUTPUT_CAP))
    }

    /// [`Config::tool_output_cap_for`] of `llm.context_length`.
    pub fn tool_output_cap(&self) -> u64 {
        self.tool_output_cap_for(self.llm.context_length)
    }

    /// The token bound of the messages a compression keeps, for a window of `context_length`
    /// tokens: `context_storage.keep_recent_tokens`, or half of the compression threshold in
    /// tokens (`context_length × compression_threshold / 2`, at least 1).
    pub fn keep_recent_tokens_for(&self, context_length: u64) -> u64 {
        let cs = &self.context_storage;
        cs.keep_recent_tokens.unwrap_or_else(|| {
            ((context_length as f64 * cs.compression_threshold / 2.0) as u64).max(1)
        })
    }

    /// The compressor's settings for a window of `context_length` tokens (normally
    /// `llm.context_length`; smaller after the provider said the context was too long).
    pub fn compress_config_for(&self, context_length: u64) -> CompressConfig {
        let cs = &self.context_storage;
        CompressConfig {
            context_length,
            threshold: cs.compression_threshold,
            keep_recent_messages: cs.keep_recent_messages,
            keep_recent_tokens: self.keep_recent_tokens_for(context_length),
            summary_prompt: cs.summary_prompt.clone(),
            reserve_output_tokens: self.reserve_output_tokens(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> Config {
        Config::from_yaml(yaml, "c").unwrap()
    }

    #[test]
    fn the_tool_output_cap_follows_the_window() {
        let d = Config::default();
        assert_eq!(d.tool_output_cap(), 4000, "the configured cap");
        assert_eq!(d.tool_output_cap_for(4096), 2048);
        assert_eq!(d.tool_output_cap_for(6192), 4000);
        assert_eq!(d.tool_output_cap_for(5000), 2952);
        assert_eq!(d.tool_output_cap_for(300), MIN_TOOL_OUTPUT_CAP);
        let big_reply = config("llm:\n  context_length: 8192\n  max_output_tokens: 3000\n");
        assert_eq!(big_reply.tool_output_cap(), 2192);
        // The reserve counts as at most half the window.
        let huge_reply = config("llm:\n  context_length: 4096\n  max_output_tokens: 4000\n");
        assert_eq!(huge_reply.tool_output_cap(), MIN_TOOL_OUTPUT_CAP);
        let small = config("tools:\n  max_tool_output_tokens: 500\n");
        assert_eq!(small.tool_output_cap(), 500);
    }

    #[test]
    fn the_kept_tail_bound_is_half_the_threshold_unless_set() {
        let d = Config::default();
        assert_eq!(d.keep_recent_tokens_for(8192), 2867);
        let c = d.compress_config_for(4096);
        assert_eq!((c.context_length, c.keep_recent_tokens), (4096, 1433));
        assert_eq!(c.reserve_output_tokens, 1024);
        let set = config("context_storage:\n  keep_recent_tokens: 1000\n");
        assert_eq!(set.keep_recent_tokens_for(8192), 1000);
        assert!(
            Config::from_yaml("context_storage:\n  keep_recent_tokens: 0\n", "c")
                .unwrap_err()
                .to_string()
                .contains("context_storage.keep_recent_tokens: must be at least 1")
        );
    }
}
