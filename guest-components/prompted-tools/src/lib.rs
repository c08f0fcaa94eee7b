//! `builtin:prompted-tools`: the OpenAI chat-completions request format for models that do not
//! emit native tool calls (world `request-format-plugin`), e.g. a small local model behind
//! llama.cpp's server.
//!
//! - [`request`]: `write-request` sends `POST /v1/chat/completions` without `tools`; the tool
//!   descriptions and the reply protocol are appended to the system prompt, and earlier tool
//!   calls and results in the history are turned into text the model understands
//!   (`ctxhost_plugin::format::prompted`).
//! - [`response`]: `read-response` parses the chat completion like `builtin:openai-chat` (same
//!   code), then parses the reply text for a JSON tool call and returns it as OpenAI
//!   `tool_calls` with ids `call_<n>`, so current.jsonl looks the same as with native tools.

mod request;
mod response;

use ctxhost_plugin::request_format::{Guest, Reply, RequestConfig, RequestInfo};
use ctxhost_plugin::types::PluginError;

struct PromptedTools;

impl Guest for PromptedTools {
    fn write_request(config: RequestConfig) -> Result<RequestInfo, PluginError> {
        request::write_request(&config)
    }

    fn read_response(response_file: String, streamed: bool) -> Result<Reply, PluginError> {
        ctxhost_plugin::request::whole_body_only(streamed)?;
        response::read_response(&response_file)
    }
}

ctxhost_plugin::export_request_format!(PromptedTools);
