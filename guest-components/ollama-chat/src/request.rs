//! `write-request`: the Ollama `/api/chat` request body.

use std::io::{self, Write};

use ctxhost_plugin::format::shape::ollama::OllamaShape;
use serde::Serialize;

use ctxhost_plugin::request as common;
use ctxhost_plugin::request_format::{RequestConfig, RequestInfo};
use ctxhost_plugin::types::PluginError;

/// Where the request is posted, relative to the provider's base URL.
pub const ENDPOINT_PATH: &str = "/api/chat";

/// Writes `{"model","messages":[...],"stream":false,"think"?,"options"?,"tools"?}` (messages
/// in Ollama's shape, `ctxhost_plugin::format::shape::ollama`); `"stream":true` with
/// `stream-reply` (the reply then comes as newline-delimited JSON); `"think":true` when the
/// config's reasoning asks for thinking (a budget or adaptive: Ollama has no budget, the model
/// thinks or not); `options` holds `num_predict` (max output tokens) and `temperature` when
/// set; an empty tools array is left out.
pub fn write_request(config: &RequestConfig) -> Result<RequestInfo, PluginError> {
    let (max_tokens, temperature) = (config.max_output_tokens, config.temperature);
    let stream = config.stream_reply;
    let think = config
        .reasoning
        .as_ref()
        .is_some_and(|r| r.thinking_adaptive || r.thinking_budget_tokens.is_some());
    common::write_request(config, ENDPOINT_PATH, OllamaShape, |out, tools| {
        if stream {
            out.write_all(b",\"stream\":true")?;
        } else {
            out.write_all(b",\"stream\":false")?;
        }
        if think {
            out.write_all(b",\"think\":true")?;
        }
        // Written by hand, not through a `Value`: that would widen the f32 temperature to f64
        // (0.2 → 0.20000000298023224).
        match (max_tokens, temperature) {
            (None, None) => {}
            (Some(n), None) => write!(out, ",\"options\":{{\"num_predict\":{n}}}")?,
            (max, Some(t)) => {
                out.write_all(b",\"options\":{")?;
                if let Some(n) = max {
                    write!(out, "\"num_predict\":{n},")?;
                }
                out.write_all(b"\"temperature\":")?;
                write_json(out, &t)?;
                out.write_all(b"}")?;
            }
        }
        if let Some(tools) = tools.filter(|t| !t.is_empty()) {
            out.write_all(b",\"tools\":")?;
            write_json(out, &tools)?;
        }
        Ok(())
    })
}

fn write_json(out: &mut dyn Write, value: &impl Serialize) -> io::Result<()> {
    serde_json::to_writer(out, value).map_err(io::Error::from)
}
