//! `write-request`: the Messages API request body (`ctxhost_plugin::format::anthropic::write_request`),
//! written to the request file; repairs made to keep the API's rules are logged as a warning.

use std::fs::{self, File};
use std::io::Write;

use ctxhost_plugin::format::anthropic::{
    self, BodyError, DEFAULT_MAX_TOKENS, ENDPOINT_PATH, RequestSettings, Thinking,
};
use ctxhost_plugin::format::body;
use ctxhost_plugin::format::stream::CountingWriter;

use ctxhost_plugin::jsonl::io_error;
use ctxhost_plugin::log::{Level, log};
use ctxhost_plugin::request as common;
use ctxhost_plugin::request_format::{RequestConfig, RequestInfo};
use ctxhost_plugin::types::PluginError;
use ctxhost_plugin::wasi_output::FileWriter;

/// Writes the body for `config` (`max_tokens` is `max-output-tokens`, or
/// [`DEFAULT_MAX_TOKENS`]). Errors: `invalid-input` for a messages line that is not a chat
/// message (file:line), a file with no user or assistant message, a bad tools file, a
/// temperature outside 0–1, a thinking budget below 1024 or not below `max_tokens`; `io`. On error the request file is removed.
pub fn write_request(config: &RequestConfig) -> Result<RequestInfo, PluginError> {
    let tools = match &config.tools_file {
        Some(file) => {
            body::parse_tools(&common::read_file(file)?, file).map_err(PluginError::InvalidInput)?
        }
        None => Vec::new(),
    };
    let thinking = config.reasoning.as_ref().and_then(|r| {
        if r.thinking_adaptive {
            Some(Thinking::Adaptive)
        } else {
            r.thinking_budget_tokens.map(Thinking::Budget)
        }
    });
    if thinking.is_some() && config.temperature.is_some() {
        log(
            Level::Warn,
            "temperature left out of the request: Anthropic refuses it with thinking on",
        );
    }
    let settings = RequestSettings {
        model: &config.model,
        max_tokens: config.max_output_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        temperature: config.temperature,
        tools: &tools,
        thinking,
        stream: config.stream_reply,
    };
    let (messages_file, request_file) = (&config.messages_file, &config.request_file);
    // Written through one large buffer with `descriptor.write` on the calling thread, as
    // openai-chat's body is: std's `File` takes a worker-thread hand-off per 8 KiB write.
    let out = FileWriter::create(request_file, common::WRITE_BUFFER_BYTES)
        .map_err(|e| io_error(format!("creating {request_file}"), e))?;
    let mut out = CountingWriter::new(out);
    let written = anthropic::write_request(
        || File::open(messages_file),
        messages_file,
        &mut out,
        &settings,
    )
    .and_then(|w| out.flush().map(|()| w).map_err(BodyError::Write));
    match written {
        Ok(w) => {
            if !w.repairs.is_empty() {
                log(Level::Warn, &w.repairs.text(messages_file));
            }
            Ok(RequestInfo {
                endpoint_path: ENDPOINT_PATH.to_string(),
                bytes: out.bytes(),
                messages: w.messages,
            })
        }
        Err(e) => {
            drop(out);
            let _ = fs::remove_file(request_file);
            Err(match e {
                BodyError::Open(e) => io_error(format!("opening {messages_file}"), e),
                BodyError::Read(e) => e.into(),
                BodyError::Write(e) => io_error(format!("writing {request_file}"), e),
                e @ BodyError::NoMessages => {
                    PluginError::InvalidInput(format!("{messages_file} {e}"))
                }
                BodyError::Setting(s) => PluginError::InvalidInput(s),
            })
        }
    }
}
