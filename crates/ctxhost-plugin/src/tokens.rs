//! The token estimate the host uses when a provider reports no usage (and for thresholds):
//! ASCII 1/4 token per character, CJK/kana/Hangul 1, anything else 1/2, plus 4 tokens per
//! message (and 3 per tool call). Use these so a plugin's counts agree with the host's
//! (`plugin check` compares them).

pub use crate::format::tokens::MESSAGE_OVERHEAD_TOKENS;
pub use crate::format::{estimate_message_tokens, estimate_tokens};
