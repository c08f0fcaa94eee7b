//! Why folding a streamed reply at its end failed ([`FoldError`]): the stream was cut off
//! before its end event, or it came whole but cannot be made into a reply. The streamed
//! folds ([`crate::sse`], [`crate::ndjson`], [`crate::anthropic::stream`],
//! [`crate::responses::stream`]) return it from `finish`; a request format turns
//! [`FoldError::Cut`] into the WIT `plugin-error.stream-cut` (the host then sends the request
//! again whole) and [`FoldError::Invalid`] into `invalid-input` (the same reply would fail the
//! same way).

use std::fmt;

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
    /// The stream reached its end but its events do not make a reply (e.g. a tool call without
    /// a name): the text says what.
    Invalid(String),
}

impl FoldError {
    /// Whether the stream was cut off before its end ([`FoldError::Cut`]).
    pub fn is_cut(&self) -> bool {
        matches!(self, FoldError::Cut { .. })
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
            FoldError::Invalid(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for FoldError {}

impl From<String> for FoldError {
    fn from(what: String) -> Self {
        FoldError::Invalid(what)
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
}
