//! `builtin:prompted-tools`: the OpenAI chat-completions request format for models that do not
//! emit native tool calls (world `request-format-plugin`), e.g. a small local model behind
//! llama.cpp's server.
//!
//! - [`request`]: `write-request` sends `POST /v1/chat/completions` without `tools`; the tool
//!   descriptions and the reply protocol are appended to the system prompt, and earlier tool
//!   calls and results in the history are turned into text the model understands
//!   (`ctxhost_format::prompted`).
//! - [`response`]: `read-response` parses the chat completion like `builtin:openai-chat` (same
//!   code), then parses the reply text for a JSON tool call and returns it as OpenAI
//!   `tool_calls` with ids `call_<n>`, so current.jsonl looks the same as with native tools.

wit_bindgen::generate!({ world: "request-format-plugin", path: "../../wit" });

#[path = "../../shared/request_common.rs"]
mod common;
#[path = "../../shared/plugin_error.rs"]
mod plugin_error;
mod request;
mod response;
#[path = "../../shared/wasi_output.rs"]
mod wasi_output;

use ctxhost::plugin::types::PluginError;
use exports::ctxhost::plugin::request_format::{Guest, Reply, RequestConfig, RequestInfo};

struct PromptedTools;

impl Guest for PromptedTools {
    fn write_request(config: RequestConfig) -> Result<RequestInfo, PluginError> {
        request::write_request(&config)
    }

    fn read_response(response_file: String) -> Result<Reply, PluginError> {
        response::read_response(&response_file)
    }
}

export!(PromptedTools);
