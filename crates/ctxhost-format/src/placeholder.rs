//! The placeholder a long string of a chat message line stands in for while the line is parsed
//! in a small copy ([`crate::long_line`]), and the note that one was decoded
//! ([`crate::raw::RawStr::value`] makes it), so the line falls back to being read whole.

use std::cell::Cell;

/// The start of a placeholder's inner text (`\/\/ctxhost-long-`, then its index and `\/\/`).
pub(crate) const MARKER: &[u8] = b"\\/\\/ctxhost-long-";

/// The end of a placeholder's inner text.
pub(crate) const MARKER_END: &[u8] = b"\\/\\/";

thread_local! {
    /// Whether a placeholder was decoded since it was last cleared.
    static DECODED: Cell<bool> = const { Cell::new(false) };
}

/// Notes that a JSON string whose inner text (without quotes) is `inner` is being decoded:
/// a placeholder's decoded text is not the original's, so the line falls back.
pub(crate) fn note_decoded(inner: &[u8]) {
    if inner.starts_with(MARKER) {
        DECODED.with(|d| d.set(true));
    }
}

/// Whether a placeholder was decoded since the last call or [`crate::long_line::clear_decoded`]
/// (the output made from the compact line is then not the whole line's: read it whole); clears
/// the note.
pub(crate) fn take_decoded() -> bool {
    DECODED.with(|d| d.replace(false))
}
