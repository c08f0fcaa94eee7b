//! Why folding a streamed reply at its end failed ([`FoldError`]): the stream was cut off
//! before its end event, or it came whole but cannot be made into a reply. The streamed
//! folds ([`crate::sse`], [`crate::ndjson`], [`crate::anthropic::stream`],
//! [`crate::responses::stream`]) return it from `finish`; a request format turns
//! [`FoldError::Cut`] into the WIT `plugin-error.stream-cut` (the host then sends the request
//! again whole) and [`FoldError::Invalid`] into `invalid-input` (the same reply would fail the
//! same way).

use std::fmt;

/// A streamed fold fed a reply one line at a time, as a request format reads the stream file
/// ([`crate::anthropic::stream::AnthropicStream`], [`crate::ndjson::OllamaStream`]): each
/// whole line (without its `\n`), then the last line if the stream ended inside one, then
/// `finish`.
pub trait LineFold {
    /// What a whole stream folds into.
    type Folded;
    /// Folds one whole line.
    fn fold_line(&mut self, line: &str) -> Result<(), FoldError>;
    /// Folds a last line the stream ended inside (it had no `\n`).
    fn fold_last_line(&mut self, line: &str) -> Result<(), FoldError>;
    /// The folded reply, or why the stream cannot be one.
    fn finish_fold(self) -> Result<Self::Folded, FoldError>;
}

/// Why a streamed fold's `finish` failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FoldError {
    /// The stream ended before the event that ends it (an empty stream is one). `Display`:
    /// `the stream ended after {lines} lines without {end}: cut off`.
    Cut {
        /// Lines of the stream read.
        lines: u64,
        /// What ends a whole stream of this provider, e.g. `` `message_stop` ``.
        end: &'static str,
    },
    /// The provider ended the stream with an error event it documents as transient
    /// ([`crate::body::is_transient_error`]: overloaded, rate limited, a server error), the
    /// same conditions as a 529, 429 or 500 status: the request is sent again as for a cut
    /// (WIT `plugin-error.stream-cut`). The text says which error, and where.
    Transient(String),
    /// The stream reached its end but its events do not make a reply (e.g. a tool call without
    /// a name): the text says what.
    Invalid(String),
}

impl FoldError {
    /// Whether the stream was cut off before its end ([`FoldError::Cut`]).
    pub fn is_cut(&self) -> bool {
        matches!(self, FoldError::Cut { .. })
    }

    /// Whether the same request sent again may give a whole reply: a cut
    /// ([`FoldError::Cut`]) or a transient error of the provider ([`FoldError::Transient`]).
    /// A request format answers these with the WIT `plugin-error.stream-cut`.
    pub fn sends_again(&self) -> bool {
        matches!(self, FoldError::Cut { .. } | FoldError::Transient(_))
    }
}

impl fmt::Display for FoldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FoldError::Cut { lines, end } => {
                write!(
                    f,
                    "the stream ended after {lines} lines without {end}: cut off"
                )
            }
            FoldError::Invalid(what) | FoldError::Transient(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for FoldError {}

/// Folds a stream's last line when it has no `\n` (the stream ended inside it): `folded` is
/// the fold's answer to that line, `cut` the fold's [`FoldError::Cut`]. A line the fold
/// refuses gives `cut` (the rest of the line never came), unless its payload (the line, or what
/// follows `data:`) is whole JSON: then the fold's error stands as [`FoldError::Invalid`]
/// (e.g. the provider's error object, which would fail the same way again).
pub fn unterminated_line(
    line: &str,
    folded: Result<(), String>,
    cut: FoldError,
) -> Result<(), FoldError> {
    let Err(what) = folded else {
        return Ok(());
    };
    let line = line.strip_suffix('\r').unwrap_or(line);
    let payload = line.strip_prefix("data:").unwrap_or(line).trim();
    if serde_json::from_str::<serde::de::IgnoredAny>(payload).is_ok() {
        Err(FoldError::Invalid(what))
    } else {
        Err(cut)
    }
}

impl From<String> for FoldError {
    fn from(what: String) -> Self {
        FoldError::Invalid(what)
    }
}

impl From<&str> for FoldError {
    fn from(what: &str) -> Self {
        FoldError::Invalid(what.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_names_its_lines_and_the_missing_end() {
        let e = FoldError::Cut {
            lines: 3,
            end: "`message_stop`",
        };
        assert!(e.is_cut());
        assert_eq!(
            e.to_string(),
            "the stream ended after 3 lines without `message_stop`: cut off"
        );
        let e = FoldError::from("tool call 0 has no function name".to_string());
        assert!(!e.is_cut());
        assert_eq!(e.to_string(), "tool call 0 has no function name");
    }

    #[test]
    fn a_refused_unterminated_line_is_a_cut_unless_its_json_is_whole() {
        let cut = || FoldError::Cut { lines: 2, end: "x" };
        assert_eq!(unterminated_line("data: {}", Ok(()), cut()), Ok(()));
        assert!(
            unterminated_line(r#"data: {"id":"x","obj"#, Err("bad".into()), cut())
                .unwrap_err()
                .is_cut()
        );
        assert!(
            unterminated_line(r#"{"message":{"con"#, Err("bad".into()), cut())
                .unwrap_err()
                .is_cut()
        );
        assert_eq!(
            unterminated_line(r#"data: {"error":"quota"}"#, Err("error".into()), cut()),
            Err(FoldError::Invalid("error".into()))
        );
    }
}
