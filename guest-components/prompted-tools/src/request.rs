//! `write-request`: an OpenAI chat-completions body without `tools`, the tools described in
//! the system prompt.
//!
//! Messages are converted one by one while streaming the messages file
//! (`ctxhost_plugin::format::shape::prompted`): the tools prompt goes into the first message, tool
//! calls and results become text, tool fields are dropped; other messages are copied.

use std::io;

use ctxhost_plugin::format::shape::prompted::PromptedShape;
use ctxhost_plugin::format::{body, prompted};

use ctxhost_plugin::request as common;
use ctxhost_plugin::request_format::{RequestConfig, RequestInfo};
use ctxhost_plugin::types::PluginError;

/// Where the request is posted, relative to the provider's base URL.
pub const ENDPOINT_PATH: &str = "/v1/chat/completions";

/// Writes `{"model","messages":[...],"stream":false,"max_tokens"?,"temperature"?}`.
/// Errors: those of `common::write_request`, plus a tools file that is not a JSON array of
/// objects (`invalid-input`).
pub fn write_request(config: &RequestConfig) -> Result<RequestInfo, PluginError> {
    let tools = match &config.tools_file {
        Some(file) => {
            body::parse_tools(&common::read_file(file)?, file).map_err(PluginError::InvalidInput)?
        }
        None => Vec::new(),
    };
    let shape = PromptedShape::new(prompted::tools_prompt(&tools));
    // The tools go into the prompt, never into a `tools` field.
    let config = RequestConfig {
        tools_file: None,
        ..config.clone()
    };
    let (max_tokens, temperature) = (config.max_output_tokens, config.temperature);
    common::write_request(&config, ENDPOINT_PATH, shape, |out, _| {
        out.write_all(b",\"stream\":false")?;
        if let Some(n) = max_tokens {
            write!(out, ",\"max_tokens\":{n}")?;
        }
        if let Some(t) = temperature {
            out.write_all(b",\"temperature\":")?;
            serde_json::to_writer(&mut *out, &t).map_err(io::Error::from)?;
        }
        Ok(())
    })
}
