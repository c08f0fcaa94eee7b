//! `write-request`: the Responses API request body
//! (`ctxhost_plugin::format::responses::write_request`), written to the request file; repairs
//! made to keep the API's rules are logged as a warning.

use std::fs::{self, File};
use std::io::{BufWriter, Write};

use ctxhost_plugin::format::body;
use ctxhost_plugin::format::responses::{self, BodyError, ENDPOINT_PATH, RequestSettings};
use ctxhost_plugin::format::stream::CountingWriter;

use ctxhost_plugin::jsonl::io_error;
use ctxhost_plugin::log::{Level, log};
use ctxhost_plugin::request as common;
use ctxhost_plugin::request_format::{RequestConfig, RequestInfo};
use ctxhost_plugin::types::PluginError;

/// Writes the body for `config` (`reasoning.effort` from `config.reasoning`). Errors:
/// `invalid-input` for a messages line that is not a chat message (file:line), a file with
/// only system messages, a bad tools file or temperature; `io`. On error the request file is
/// removed.
pub fn write_request(config: &RequestConfig) -> Result<RequestInfo, PluginError> {
    let tools = match &config.tools_file {
        Some(file) => {
            body::parse_tools(&common::read_file(file)?, file).map_err(PluginError::InvalidInput)?
        }
        None => Vec::new(),
    };
    let settings = RequestSettings {
        model: &config.model,
        stream: config.stream_reply,
        max_output_tokens: config.max_output_tokens,
        temperature: config.temperature,
        effort: config.reasoning.as_ref().and_then(|r| r.effort.as_deref()),
        tools: &tools,
    };
    let (messages_file, request_file) = (&config.messages_file, &config.request_file);
    let messages =
        File::open(messages_file).map_err(|e| io_error(format!("opening {messages_file}"), e))?;
    let out =
        File::create(request_file).map_err(|e| io_error(format!("creating {request_file}"), e))?;
    let mut out = CountingWriter::new(BufWriter::new(out));
    let written = responses::write_request(messages, messages_file, &mut out, &settings)
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
