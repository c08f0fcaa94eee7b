//! `write-request`: the OpenAI chat-completions request body.

use std::io::{self, Write};

use ctxhost_plugin::format::shape::openai::OpenAiShape;
use serde::Serialize;
use serde_json::Value;

use ctxhost_plugin::request as common;
use ctxhost_plugin::request_format::{RequestConfig, RequestInfo};
use ctxhost_plugin::types::PluginError;

/// Where the request is posted, relative to the provider's base URL.
pub const ENDPOINT_PATH: &str = "/v1/chat/completions";

/// Writes `{"model","messages":[...],"stream":false,"max_tokens"?,"temperature"?,
/// "reasoning_effort"?,"tools"?}`
/// (`"stream":true,"stream_options":{"include_usage":true}` when `config.stream_reply`)
/// (messages in OpenAI's shape, `ctxhost_plugin::format::shape::openai`; an empty tools array is left
/// out: OpenAI rejects `"tools":[]`).
pub fn write_request(config: &RequestConfig) -> Result<RequestInfo, PluginError> {
    let (max_tokens, temperature) = (config.max_output_tokens, config.temperature);
    let stream = config.stream_reply;
    let effort = config.reasoning.as_ref().and_then(|r| r.effort.clone());
    common::write_request(config, ENDPOINT_PATH, OpenAiShape, |out, tools| {
        if stream {
            out.write_all(b",\"stream\":true,\"stream_options\":{\"include_usage\":true}")?;
        } else {
            out.write_all(b",\"stream\":false")?;
        }
        if let Some(n) = max_tokens {
            write!(out, ",\"max_tokens\":{n}")?;
        }
        if let Some(t) = temperature {
            out.write_all(b",\"temperature\":")?;
            write_json(out, &t)?;
        }
        if let Some(effort) = &effort {
            out.write_all(b",\"reasoning_effort\":")?;
            write_json(out, effort)?;
        }
        if let Some(tools) = tools.filter(|t| !t.is_empty()) {
            out.write_all(b",\"tools\":")?;
            write_json(out, &Value::Array(tools))?;
        }
        Ok(())
    })
}

fn write_json(out: &mut dyn Write, value: &impl Serialize) -> io::Result<()> {
    serde_json::to_writer(out, value).map_err(io::Error::from)
}
