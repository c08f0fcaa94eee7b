//! `read-response`: a Responses API response object, or its stream, → reply.
//!
//! Usage: `prompt-tokens` is `input_tokens`, `completion-tokens` `output_tokens` (reasoning
//! included), `cache-read-tokens` `input_tokens_details.cached_tokens`, `reasoning-tokens`
//! `output_tokens_details.reasoning_tokens`. A count that is not a whole number ≥ 0 counts as
//! 0, and a `usage` that is not an object is ignored, each with a warning in the host log: the
//! reply is used.

use std::io::{BufRead, BufReader, Read};

use ctxhost_plugin::format::ReasoningItem;
use ctxhost_plugin::format::reply::{
    ProviderFunction, ProviderToolCall, assistant_message, invalid_counts,
};
use ctxhost_plugin::format::responses::{
    Folded, PROVIDER, REASONING, ResponsesStream, ResponsesUsage, parse_response,
};
use ctxhost_plugin::jsonl::io_error;
use ctxhost_plugin::request::{self as common, bad_shape};
use ctxhost_plugin::request_format::Reply;
use ctxhost_plugin::types::{PluginError, Usage};
use serde_json::Value;

/// Parses the response in `file`. Errors (`invalid-input`): see
/// [`common::read_response_json`] (an `{"error":{...}}` body is the provider's error), a body
/// that is not a response, a failed or unfinished response.
pub fn read_response(file: &str) -> Result<Reply, PluginError> {
    let value = common::read_response_json(file)?;
    let text = value.to_string();
    let folded = parse_response(&text).map_err(|what| bad_shape(file, what, &value))?;
    Ok(reply(file, folded))
}

/// Parses the raw stream in `file` (`read-response` with `streamed`), folded a line at a time
/// by `ResponsesStream` (never read whole). Errors: `stream-cut` for a stream cut off before
/// `response.completed`; `invalid-input` naming the file and line for an event that is not
/// JSON, the provider's error event or failed response; `io`.
///
/// Memory: a line is read whole up to [`MAX_WHOLE_LINE_BYTES`]; a longer one (the
/// `output_item.done` of a message or the `response.completed` that repeat the whole text) is
/// parsed as it is read, its text skipped (`ResponsesStream::long_line`), unless the event
/// needs it whole (then it is read again, whole, as before). The text itself goes to
/// `reply.content` past 128 KiB (`common::content_sink`).
pub fn read_stream(file: &str) -> Result<Reply, PluginError> {
    use std::io::{Seek, SeekFrom};
    let f = std::fs::File::open(file).map_err(|e| io_error(format!("opening {file}"), e))?;
    let mut reader = BufReader::new(f);
    let mut fold = ResponsesStream::with_content_file(common::content_sink());
    let mut line = Vec::new();
    let bad = |e: String| PluginError::InvalidInput(format!("{file} (streamed reply): {e}"));
    let read_err = |e| io_error(format!("reading {file}"), e);
    let mut at = 0u64;
    loop {
        line.clear();
        let n = (&mut reader)
            .take(MAX_WHOLE_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(read_err)?;
        if n == 0 {
            break;
        }
        if line.len() > MAX_WHOLE_LINE_BYTES && line.last() != Some(&b'\n') {
            let mut rest = LineEnd(&mut reader);
            if fold.long_line(&line, &mut rest).map_err(bad)? {
                // What follows the event's JSON on its line (white space, the `\n`).
                std::io::copy(&mut rest, &mut std::io::sink()).map_err(read_err)?;
                at = reader.stream_position().map_err(read_err)?;
                continue;
            }
            // Needed whole after all: read the line again.
            reader.seek(SeekFrom::Start(at)).map_err(read_err)?;
            line.clear();
            reader.read_until(b'\n', &mut line).map_err(read_err)?;
        }
        at += line.len() as u64;
        let text = String::from_utf8_lossy(&line);
        match text.strip_suffix('\n') {
            Some(whole) => fold.line(whole).map_err(|e| common::fold_error(file, e))?,
            // The stream ended inside its last line.
            None => fold
                .last_line(&text)
                .map_err(|e| common::fold_error(file, e))?,
        }
    }
    Ok(reply(
        file,
        fold.finish().map_err(|e| common::fold_error(file, e))?,
    ))
}

/// Longest line of a streamed reply read whole, bytes: 1 MiB.
const MAX_WHOLE_LINE_BYTES: usize = 1024 * 1024;

/// A reader that ends after the first `\n` (consumed): the rest of one line, read a byte at
/// a time so nothing of the next line is taken.
struct LineEnd<'a, R>(&'a mut R);

impl<R: Read> Read for LineEnd<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut byte = [0u8; 1];
        if self.0.read(&mut byte)? == 0 || byte[0] == b'\n' {
            return Ok(0);
        }
        buf[0] = byte[0];
        Ok(1)
    }
}

/// The reply of a folded response: the assistant message with its reasoning items, the usage.
fn reply(file: &str, f: Folded) -> Reply {
    let calls = f
        .calls
        .into_iter()
        .map(|c| ProviderToolCall {
            id: Some(c.call_id),
            function: ProviderFunction {
                name: c.name,
                arguments: Some(Value::String(c.arguments)),
            },
        })
        .collect();
    let mut message = assistant_message(None, f.content, calls);
    message.reasoning = f
        .reasoning
        .into_iter()
        .map(|data| ReasoningItem {
            provider: PROVIDER.to_string(),
            kind: REASONING.to_string(),
            data,
        })
        .collect();
    // Interleaved reasoning: the items' order, to send them back in it.
    message.reasoning.extend(f.order.item(PROVIDER));
    Reply {
        message: common::to_wit(message),
        usage: f.usage.and_then(|u| usage_of(file, u)),
        finish_reason: Some(f.finish_reason),
        model: f.model,
        content_file: f.content_file,
    }
}

/// The usage of `value` (the response's `usage`), read leniently (module doc).
fn usage_of(file: &str, value: Value) -> Option<Usage> {
    let u: ResponsesUsage = match serde_json::from_value(value) {
        Ok(u) => u,
        Err(e) => {
            ctxhost_plugin::logging::warn(&format!(
                "{file}: usage ignored: not a usage object ({e}); the reply is used"
            ));
            return None;
        }
    };
    let (cached, reasoning) = (u.cached(), u.reasoning());
    if let Some(warning) = invalid_counts(&[
        ("usage.input_tokens", &u.input_tokens),
        ("usage.output_tokens", &u.output_tokens),
        ("usage.total_tokens", &u.total_tokens),
        ("usage.input_tokens_details.cached_tokens", &cached),
        ("usage.output_tokens_details.reasoning_tokens", &reasoning),
    ]) {
        ctxhost_plugin::logging::warn(&format!("{file}: {warning}"));
    }
    Some(Usage {
        cache_read_tokens: cached.value().unwrap_or(0),
        reasoning_tokens: reasoning.value().unwrap_or(0),
        ..common::usage(
            u.input_tokens.value(),
            u.output_tokens.value(),
            u.total_tokens.value(),
        )
    })
}
