//! Bounding tool output for the context.
//!
//! A result whose estimate exceeds the limit is cut on a character boundary (never inside a
//! UTF-8 sequence), using the same per-character weights as `ctxhost_format::estimate_tokens`,
//! so the kept part's estimate never exceeds the budget.

use ctxhost_format::estimate_tokens;

/// The smallest effective tool-output cap, tokens (however small the window; `config`
/// lowers `tools.max_tool_output_tokens` to fit a window, never below this).
pub const MIN_TOOL_OUTPUT_CAP: u64 = 256;

/// Tokens kept free for the note appended to a cut result.
pub const NOTE_RESERVE_TOKENS: u64 = 64;

/// Where a text was cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// Byte length of the kept prefix (a char boundary of the text).
    pub kept_bytes: usize,
    /// Characters kept and in total.
    pub kept_chars: u64,
    /// Characters of the whole text.
    pub total_chars: u64,
    /// Estimated tokens kept and in total.
    pub kept_tokens: u64,
    /// Estimated tokens of the whole text.
    pub total_tokens: u64,
}

/// `None` when `text`'s estimate is within `max_tokens`; otherwise where to cut it so the kept
/// prefix plus a note of [`NOTE_RESERVE_TOKENS`] fits in `max_tokens` (at least one token of
/// text is kept when `max_tokens` is tiny).
pub fn cut_point(text: &str, max_tokens: u64) -> Option<Cut> {
    let total_tokens = estimate_tokens(text);
    if total_tokens <= max_tokens {
        return None;
    }
    let budget_quarters = max_tokens.saturating_sub(NOTE_RESERVE_TOKENS).max(1) * 4;
    let mut quarters = 0u64;
    let mut kept_bytes = 0usize;
    let mut kept_chars = 0u64;
    for (i, c) in text.char_indices() {
        let w = char_quarters(c);
        if quarters + w > budget_quarters {
            break;
        }
        quarters += w;
        kept_bytes = i + c.len_utf8();
        kept_chars += 1;
    }
    Some(Cut {
        kept_bytes,
        kept_chars,
        total_chars: text.chars().count() as u64,
        kept_tokens: estimate_tokens(&text[..kept_bytes]),
        total_tokens,
    })
}

/// Weight of one character in quarter tokens, as `estimate_tokens` counts it: the estimate of
/// four copies of it is exactly its weight (1, 2 or 4 quarters).
fn char_quarters(c: char) -> u64 {
    let four: String = std::iter::repeat_n(c, 4).collect();
    estimate_tokens(&four)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_not_cut() {
        assert_eq!(cut_point("hello", 100), None);
        assert_eq!(cut_point(&"x".repeat(400), 100), None);
    }

    #[test]
    fn ascii_is_cut_to_the_budget() {
        let text = "y".repeat(10_000);
        let cut = cut_point(&text, 164).unwrap();
        // 100 tokens of text after the note reserve, 4 ASCII chars a token.
        assert_eq!(cut.kept_bytes, 400);
        assert_eq!(cut.kept_tokens, 100);
        assert_eq!(cut.total_chars, 10_000);
        assert_eq!(cut.total_tokens, 2500);
    }

    #[test]
    fn cut_never_splits_a_multibyte_character() {
        for prefix in 0..8 {
            let text = format!("{}{}", "a".repeat(prefix), "é上🎉".repeat(500));
            for max in [65, 66, 70, 77, 100, 333] {
                let cut = cut_point(&text, max).unwrap();
                assert!(
                    text.is_char_boundary(cut.kept_bytes),
                    "prefix {prefix} max {max}"
                );
                let kept = &text[..cut.kept_bytes];
                assert!(
                    estimate_tokens(kept) <= max - NOTE_RESERVE_TOKENS,
                    "prefix {prefix} max {max}"
                );
                assert_eq!(kept.chars().count() as u64, cut.kept_chars);
            }
        }
    }

    #[test]
    fn tiny_budget_still_keeps_something() {
        let cut = cut_point(&"z".repeat(1000), 1).unwrap();
        assert_eq!(cut.kept_bytes, 4);
    }
}
