//! `builtin:anthropic-messages`: Anthropic's Messages API (world `request-format-plugin`),
//! chosen automatically for `llm.provider: anthropic`.
//!
//! - [`request`]: `write-request` streams the messages file (twice, one line at a time) into
//!   `{"model","max_tokens","temperature"?,"system"?,"tools"?,"messages":[...]}` for
//!   `POST /v1/messages`, with prompt-cache breakpoints on the system prompt, the latest summary
//!   and the last two user turns (`ctxhost_format::anthropic`).
//! - [`response`]: `read-response` parses `{"type":"message","content":[...],"stop_reason",
//!   "usage"}` or an `{"type":"error","error":{...}}` body into a reply with OpenAI-shaped tool
//!   calls and finish reason.
//!
//! The API key never reaches the component: the host's transport sends it (`x-api-key`, with
//! `anthropic-version`).

wit_bindgen::generate!({ world: "request-format-plugin", path: "../../wit" });

// Only the reading helpers are used: the body is written by `ctxhost_format::anthropic`.
#[allow(dead_code)]
#[path = "../../shared/request_common.rs"]
mod common;
#[path = "../../shared/plugin_error.rs"]
mod plugin_error;
// Used by shared/request_common.rs's body writer (unused here).
#[path = "../../shared/wasi_output.rs"]
mod wasi_output;
mod request;
mod response;

use ctxhost::plugin::types::PluginError;
use exports::ctxhost::plugin::request_format::{Guest, Reply, RequestConfig, RequestInfo};

struct AnthropicMessages;

impl Guest for AnthropicMessages {
    fn write_request(config: RequestConfig) -> Result<RequestInfo, PluginError> {
        request::write_request(&config)
    }

    fn read_response(response_file: String) -> Result<Reply, PluginError> {
        response::read_response(&response_file)
    }
}

export!(AnthropicMessages);
