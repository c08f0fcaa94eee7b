//! The parts of a request format (world `request-format-plugin`) that do not depend on the
//! provider: streaming the messages file into the request body ([`write_request`]: no line
//! is parsed into a message, each is copied from its bytes), reading the tools and response
//! files, token usage, WIT conversions; and [`openai`], the OpenAI chat-completions reply,
//! which many servers speak.

use std::fs::{self, File};
use std::io::{self, Write};

use ctxhost_format::ChatMessage;
use ctxhost_format::body::{self, MAX_RESPONSE_BYTES};
use ctxhost_format::shape::MessageShape;
use ctxhost_format::stream::{ArrayError, CountingWriter, copy_chat_array};
use serde_json::Value;

use crate::jsonl::io_error;
use crate::request_format::{RequestConfig, RequestInfo};
use crate::types::{ChatMessage as WitMessage, PluginError, Usage};
use crate::wasi_output::FileWriter;

pub mod openai;

/// Bytes written to the request file per WASI call (`descriptor.write`, run on the calling
/// thread; [`crate::wasi_output`]): the buffer of every builtin request build.
pub const WRITE_BUFFER_BYTES: usize = 256 * 1024;

/// Writes the request body for `config` to `config.request_file`:
/// `{"model":<model>,"messages":[<m>,...]<tail>}`, each `m` a messages line in `shape`
/// (copied from the line's bytes: `ctxhost_format::stream::copy_chat_array`), where `tail`
/// writes the provider's remaining fields (each starting with `,`) given the validated tools,
/// if any. Returns the request info with `endpoint_path`.
///
/// Errors: `invalid-input` for a messages line that is not a chat message (file:line), a
/// messages file without messages, a bad tools file or temperature; `io`. On error the
/// request file is removed.
pub fn write_request(
    config: &RequestConfig,
    endpoint_path: &str,
    mut shape: impl MessageShape + Clone,
    tail: impl FnOnce(&mut dyn Write, Option<Vec<Value>>) -> io::Result<()>,
) -> Result<RequestInfo, PluginError> {
    if let Some(t) = config.temperature.filter(|t| !t.is_finite() || *t < 0.0) {
        return Err(PluginError::InvalidInput(format!(
            "temperature {t} is not a finite number ≥ 0"
        )));
    }
    let tools = config.tools_file.as_deref().map(read_tools).transpose()?;
    let messages_file = &config.messages_file;
    let messages =
        File::open(messages_file).map_err(|e| io_error(format!("opening {messages_file}"), e))?;
    let request_file = &config.request_file;
    let out = FileWriter::create(request_file, WRITE_BUFFER_BYTES)
        .map_err(|e| io_error(format!("creating {request_file}"), e))?;
    let mut out = CountingWriter::new(out);
    let written = write_body(&mut out, config, messages, &mut shape, tail, tools);
    let written = written.and_then(|n| {
        out.flush()
            .map_err(|e| io_error(format!("writing {request_file}"), e))?;
        Ok(n)
    });
    match written {
        Ok(messages) => Ok(RequestInfo {
            endpoint_path: endpoint_path.to_string(),
            bytes: out.bytes(),
            messages,
        }),
        Err(e) => {
            drop(out);
            let _ = fs::remove_file(request_file);
            Err(e)
        }
    }
}

fn write_body(
    out: &mut impl Write,
    config: &RequestConfig,
    messages: File,
    shape: &mut (impl MessageShape + Clone),
    tail: impl FnOnce(&mut dyn Write, Option<Vec<Value>>) -> io::Result<()>,
    tools: Option<Vec<Value>>,
) -> Result<u64, PluginError> {
    let write_err = |e| io_error(format!("writing {}", config.request_file), e);
    out.write_all(b"{\"model\":").map_err(write_err)?;
    serde_json::to_writer(&mut *out, &config.model).map_err(|e| write_err(e.into()))?;
    out.write_all(b",\"messages\":").map_err(write_err)?;
    let count =
        copy_chat_array(messages, &config.messages_file, out, shape).map_err(|e| match e {
            ArrayError::Write(e) => write_err(e),
            ArrayError::Read(e) => e.into(),
        })?;
    if count == 0 {
        return Err(PluginError::InvalidInput(format!(
            "{} holds no chat messages",
            config.messages_file
        )));
    }
    tail(out, tools).map_err(write_err)?;
    out.write_all(b"}").map_err(write_err)?;
    Ok(count)
}

/// The tool definitions of `file` (a JSON array of objects; at most [`MAX_RESPONSE_BYTES`]).
fn read_tools(file: &str) -> Result<Vec<Value>, PluginError> {
    body::parse_tools(&read_file(file)?, file).map_err(PluginError::InvalidInput)
}

/// The whole of `file` (at most [`MAX_RESPONSE_BYTES`]). Errors: `io`, or `invalid-input`
/// for a bigger file.
pub fn read_file(file: &str) -> Result<Vec<u8>, PluginError> {
    let f = File::open(file).map_err(|e| io_error(format!("opening {file}"), e))?;
    body::read_capped(f, MAX_RESPONSE_BYTES).map_err(|e| match e.kind() {
        io::ErrorKind::FileTooLarge => {
            PluginError::InvalidInput(format!("{file} is {e}; refusing to parse it"))
        }
        _ => io_error(format!("reading {file}"), e),
    })
}

/// Parses the response file `file` as JSON and checks it is not a provider error object.
/// Errors (`invalid-input`): empty, not JSON (quoting its start, e.g. an HTML page), not an
/// object, `{"error":...}`.
pub fn read_response_json(file: &str) -> Result<Value, PluginError> {
    read_response_bytes(file).map(|(_, value)| value)
}

/// [`read_response_json`], with the file's bytes (for a format that keeps parts of the body
/// exactly as received).
pub fn read_response_bytes(file: &str) -> Result<(Vec<u8>, Value), PluginError> {
    let bytes = read_file(file)?;
    let value = body::parse_json(&bytes, file).map_err(PluginError::InvalidInput)?;
    if let Some(error) = body::provider_error(&value) {
        return Err(PluginError::InvalidInput(format!(
            "{file}: the provider answered with an error: {error}"
        )));
    }
    if !value.is_object() {
        return Err(PluginError::InvalidInput(format!(
            "{file} is {}, not a response object; it starts with: {}",
            body::kind(&value),
            body::snippet(&bytes, body::SNIPPET_CHARS)
        )));
    }
    Ok((bytes, value))
}

/// Hands each line of the streamed reply `file` (without its `\n`; invalid UTF-8 replaced) to
/// `fold`, one line in memory at a time, with whether the line had its `\n` (`false` only for
/// a last line the stream ended inside: the fold's `last_line`). Errors: `io`, or the fold's
/// error as [`fold_error`] makes it (`stream-cut` or `invalid-input`
/// `<file> (streamed reply): <fold's error>`; the fold names the line).
pub fn fold_stream_lines(
    file: &str,
    mut fold: impl FnMut(&str, bool) -> Result<(), ctxhost_format::fold::FoldError>,
) -> Result<(), PluginError> {
    use std::io::BufRead;
    let f = File::open(file).map_err(|e| io_error(format!("opening {file}"), e))?;
    let mut reader = io::BufReader::new(f);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| io_error(format!("reading {file}"), e))?;
        if n == 0 {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&line);
        let whole = text.strip_suffix('\n');
        fold(whole.unwrap_or(&text), whole.is_some()).map_err(|e| fold_error(file, e))?;
    }
}

/// Folds the streamed reply `file` with `fold` ([`fold_stream_lines`], then the fold's
/// `finish`). Errors: those of [`fold_stream_lines`], and the fold's final error as
/// [`fold_error`] makes it.
pub fn fold_stream<F: ctxhost_format::fold::LineFold>(
    file: &str,
    mut fold: F,
) -> Result<F::Folded, PluginError> {
    fold_stream_lines(file, |line, whole| {
        if whole {
            fold.fold_line(line)
        } else {
            fold.fold_last_line(line)
        }
    })?;
    fold.finish_fold().map_err(|e| fold_error(file, e))
}

/// The sink a fold gathers the reply's text in: in memory up to
/// [`ctxhost_format::content_file::CONTENT_FILE_THRESHOLD`] bytes, past it in
/// [`ctxhost_format::files::REPLY_CONTENT`] (created or truncated, written through a 16 KiB
/// buffer), which the reply then names as its `content-file`.
pub fn content_sink() -> ctxhost_format::content_file::TextSink {
    use ctxhost_format::files::REPLY_CONTENT;
    ctxhost_format::content_file::TextSink::spilling(
        REPLY_CONTENT,
        ctxhost_format::content_file::CONTENT_FILE_THRESHOLD,
        Box::new(|| {
            let f = File::create(REPLY_CONTENT)?;
            Ok(Box::new(io::BufWriter::with_capacity(16 * 1024, f)))
        }),
    )
}

/// `invalid-input` `<file> (streamed reply): <what>`.
pub fn stream_error(file: &str, what: impl std::fmt::Display) -> PluginError {
    PluginError::InvalidInput(format!("{file} (streamed reply): {what}"))
}

/// The error of a streamed fold for the reply `file`: `stream-cut`
/// `<file> (streamed reply): <what>` for a stream cut off before its end or ended by an error
/// the provider documents as transient (`FoldError::sends_again`: the host sends the request
/// again whole, as for a 529 or 500), `invalid-input` with the same text for any other
/// (final).
pub fn fold_error(file: &str, e: ctxhost_format::fold::FoldError) -> PluginError {
    if e.sends_again() {
        PluginError::StreamCut(format!("{file} (streamed reply): {e}"))
    } else {
        stream_error(file, e)
    }
}

/// `invalid-input` for a response whose shape is wrong: `<file>: <what>; it starts with: ...`.
pub fn bad_shape(file: &str, what: impl std::fmt::Display, body: &Value) -> PluginError {
    let text = body.to_string();
    PluginError::InvalidInput(format!(
        "{file}: {what}; it starts with: {}",
        body::snippet(text.as_bytes(), body::SNIPPET_CHARS)
    ))
}

/// The WIT record of a chat message (moved, not copied).
pub fn to_wit(m: ChatMessage) -> WitMessage {
    m.into()
}

/// Token usage from a provider's counts: a missing count is 0, a missing `total` is the sum
/// of the other two. The prompt-cache and reasoning counts are 0; a format whose provider reports them sets
/// them on the result.
pub fn usage(prompt: Option<u64>, completion: Option<u64>, total: Option<u64>) -> Usage {
    let (prompt, completion) = (prompt.unwrap_or(0), completion.unwrap_or(0));
    Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: total.unwrap_or(prompt + completion),
        cache_read_tokens: 0,
        cache_creation_tokens: 0,
        reasoning_tokens: 0,
    }
}

/// For a format that reads whole response bodies only: `Err(unsupported)` when the host hands
/// it a streamed reply (`read-response`'s `streamed`; the host asks for a stream only when the
/// config's `llm.stream` is on).
pub fn whole_body_only(streamed: bool) -> Result<(), PluginError> {
    if streamed {
        return Err(PluginError::Unsupported(
            "this request format reads whole response bodies, not streamed replies: set llm.stream: false"
                .to_string(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxhost_format::fold::FoldError;

    #[test]
    fn a_cut_fold_is_stream_cut_and_any_other_fold_error_invalid_input() {
        let cut = fold_error(
            "reply.stream",
            FoldError::Cut {
                lines: 2,
                end: "`message_stop`",
            },
        );
        assert!(
            matches!(&cut, PluginError::StreamCut(m) if m == "reply.stream (streamed reply): the stream ended after 2 lines without `message_stop`: cut off"),
            "{cut:?}"
        );
        let bad = fold_error(
            "reply.stream",
            FoldError::Invalid("tool call 0 has no function name".into()),
        );
        assert!(
            matches!(&bad, PluginError::InvalidInput(m) if m == "reply.stream (streamed reply): tool call 0 has no function name"),
            "{bad:?}"
        );
    }
}
