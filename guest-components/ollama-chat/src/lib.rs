//! `builtin:ollama-chat`: Ollama's native chat API (world `request-format-plugin`).
//!
//! - [`request`]: `write-request` streams the messages file into
//!   `{"model","messages":[...],"stream":false,"options"?:{"num_predict","temperature"},"tools"?}`
//!   for `POST /api/chat`.
//! - [`response`]: `read-response` parses `{"message":{...},"done":true,"done_reason",
//!   "prompt_eval_count","eval_count"}` or `{"error":"..."}` into a reply with OpenAI-shaped
//!   tool calls.

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

struct OllamaChat;

impl Guest for OllamaChat {
    fn write_request(config: RequestConfig) -> Result<RequestInfo, PluginError> {
        request::write_request(&config)
    }

    fn read_response(response_file: String) -> Result<Reply, PluginError> {
        response::read_response(&response_file)
    }
}

export!(OllamaChat);
