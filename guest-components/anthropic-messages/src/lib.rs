//! `builtin:anthropic-messages`: Anthropic's Messages API (world `request-format-plugin`),
//! chosen automatically for `llm.provider: anthropic`.
//!
//! - [`request`]: `write-request` streams the messages file (once, one line at a time, after
//!   reading its end backwards to place the cache breakpoints) into
//!   `{"model","max_tokens","stream"?,"thinking"?,"temperature"?,"system"?,"tools"?,
//!   "messages":[...]}` for `POST /v1/messages`, with prompt-cache breakpoints on the system
//!   prompt, the latest summary and the last two user turns (`ctxhost_plugin::format::anthropic`);
//!   `"stream":true` with `stream-reply`, `thinking` from the request config's `reasoning`
//!   (then the signed thinking blocks of assistant messages are sent back before their
//!   `tool_use`, and no `temperature`).
//! - [`response`]: `read-response` parses `{"type":"message","content":[...],"stop_reason",
//!   "usage"}` or an `{"type":"error","error":{...}}` body into a reply with OpenAI-shaped tool
//!   calls, finish reason and the thinking blocks as reasoning items; with `streamed`, the
//!   server-sent events of a streamed reply are folded a line at a time.
//!
//! The API key never reaches the component: the host's transport sends it (`x-api-key`, with
//! `anthropic-version`).

mod request;
mod response;

use ctxhost_plugin::request_format::{Guest, Reply, RequestConfig, RequestInfo};
use ctxhost_plugin::types::PluginError;

struct AnthropicMessages;

impl Guest for AnthropicMessages {
    fn write_request(config: RequestConfig) -> Result<RequestInfo, PluginError> {
        request::write_request(&config)
    }

    fn read_response(response_file: String, streamed: bool) -> Result<Reply, PluginError> {
        if streamed {
            return response::read_stream(&response_file);
        }
        response::read_response(&response_file)
    }
}

ctxhost_plugin::export_request_format!(AnthropicMessages);
