//! Token estimate used when the provider reports no usage.
//!
//! The seed estimates about 4 characters per token. That badly under-counts CJK text, where a
//! tokenizer spends about one token per character, so characters are weighted by script:
//! ASCII 1/4 token, CJK ideographs, kana and Hangul 1 token, anything else 1/2 token.

/// Fixed per-message overhead (role, separators), in tokens, as in OpenAI's counting guide.
pub const MESSAGE_OVERHEAD_TOKENS: u64 = 4;

/// Estimated tokens of `text` (never less than the exact count divided by ~1.5 for the
/// scripts above; 0 for the empty string).
pub fn estimate_tokens(text: &str) -> u64 {
    // Work in quarter tokens to stay in integers.
    let quarters: u64 = text.chars().map(char_quarter_tokens).sum();
    quarters.div_ceil(4)
}

/// The weight of one character in [`estimate_tokens`], in quarter tokens: 1 for ASCII, 4 for
/// CJK/kana/Hangul, 2 otherwise. `estimate_tokens(s)` is the sum over `s.chars()`, divided by
/// 4 and rounded up (so cutting text to a token budget can work character by character).
pub fn char_quarter_tokens(c: char) -> u64 {
    if c.is_ascii() {
        1
    } else if is_wide_script(c) {
        4
    } else {
        2
    }
}

/// Estimated tokens of one chat message: content, tool-call names and arguments, plus
/// [`MESSAGE_OVERHEAD_TOKENS`].
pub fn estimate_message_tokens(message: &crate::ChatMessage) -> u64 {
    estimate_message_tokens_by(message, |_, text| estimate_tokens(text))
}

/// [`estimate_message_tokens`] with each text's tokens given by `tokens(field, text)`, field
/// being [`MessageText`] (for a message some of whose texts were counted apart, e.g. as a
/// line too long to hold was read).
pub fn estimate_message_tokens_by(
    message: &crate::ChatMessage,
    mut tokens: impl FnMut(MessageText, &str) -> u64,
) -> u64 {
    let mut n = MESSAGE_OVERHEAD_TOKENS;
    if let Some(c) = &message.content {
        n += tokens(MessageText::Content, c);
    }
    for (i, call) in message.tool_calls.iter().flatten().enumerate() {
        n += tokens(MessageText::CallName(i), &call.function.name)
            + tokens(MessageText::CallArguments(i), &call.function.arguments)
            + 3;
    }
    n
}

/// Which text of a message [`estimate_message_tokens_by`] asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageText {
    /// `content`.
    Content,
    /// The name of tool call N (from 0).
    CallName(usize),
    /// The arguments of tool call N (from 0).
    CallArguments(usize),
}

/// CJK ideographs, kana, Hangul, CJK punctuation and full-width forms.
fn is_wide_script(c: char) -> bool {
    matches!(c as u32,
        0x1100..=0x11FF      // Hangul Jamo
        | 0x2E80..=0x303F    // CJK radicals, punctuation
        | 0x3040..=0x30FF    // Hiragana, Katakana
        | 0x3100..=0x31FF    // Bopomofo, Hangul compat, Katakana ext
        | 0x3400..=0x4DBF    // CJK ext A
        | 0x4E00..=0x9FFF    // CJK unified
        | 0xA960..=0xA97F
        | 0xAC00..=0xD7FF    // Hangul syllables
        | 0xF900..=0xFAFF    // CJK compatibility
        | 0xFF00..=0xFFEF    // full-width forms
        | 0x20000..=0x3FFFF) // CJK ext B..
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_is_about_four_chars_per_token() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
        assert_eq!(estimate_tokens(&"x".repeat(400)), 100);
    }

    #[test]
    fn cjk_counts_one_token_per_character() {
        // 10 ideographs: a character-count/4 estimate would say 3 (or 8 counting bytes/4).
        assert_eq!(estimate_tokens("上下文压缩是一个功能"), 10);
        assert_eq!(estimate_tokens("こんにちは"), 5);
        assert_eq!(estimate_tokens("안녕하세요"), 5);
    }

    #[test]
    fn other_scripts_count_half_a_token() {
        assert_eq!(estimate_tokens("привет"), 3);
    }
}
