//! How each request format shapes a chat message of current.jsonl inside its request's
//! `messages` array, in two implementations that must agree:
//!
//! - the fast path, [`MessageShape::write_raw`]: from a line validated without building a value
//!   ([`crate::raw::RawMessage`]), the JSON is assembled from the line's own bytes; only what
//!   the provider shapes differently is decoded and re-encoded (used by
//!   [`crate::stream::copy_chat_array`], i.e. by every builtin request format);
//! - the reference, [`MessageShape::reference`]: the line parsed into a [`ChatMessage`],
//!   converted, serialised by serde (used by [`crate::stream::write_chat_array`], kept so that
//!   tests compare the two over random histories).
//!
//! One module per request format: [`openai`] (`builtin:openai-chat`), [`ollama`]
//! (`builtin:ollama-chat`), [`prompted`] (`builtin:prompted-tools`).

pub mod ollama;
pub mod openai;
pub mod prompted;

use std::io::{self, Write};

use serde::Serialize;

use crate::ChatMessage;
use crate::raw::{RawMessage, RawStr};

/// A provider's shape of one element of `messages`.
pub trait MessageShape {
    /// The serde shape the reference conversion produces.
    type Reference: Serialize;

    /// Writes `message` as one JSON value (no separator) to `out`.
    fn write_raw<W: Write>(&mut self, message: &RawMessage<'_>, out: &mut W) -> io::Result<()>;

    /// The reference conversion of `message` (serialised by the caller).
    fn reference(&mut self, message: ChatMessage) -> Self::Reference;
}

/// Writes `,"key":` followed by `value`'s JSON text.
fn field<W: Write>(out: &mut W, key: &str, value: RawStr<'_>) -> io::Result<()> {
    out.write_all(b",\"")?;
    out.write_all(key.as_bytes())?;
    out.write_all(b"\":")?;
    out.write_all(value.json())
}

/// Writes `value` serialised by serde_json.
fn json<W: Write>(out: &mut W, value: &impl Serialize) -> io::Result<()> {
    serde_json::to_writer(out, value).map_err(io::Error::from)
}
