//! `builtin:ollama-chat`: Ollama's native chat API (world `request-format-plugin`).
//!
//! - [`request`]: `write-request` streams the messages file into
//!   `{"model","messages":[...],"stream":false,"think"?,"options"?:{"num_predict","temperature"},
//!   "tools"?}` for `POST /api/chat` (`"stream":true` with `stream-reply`).
//! - [`response`]: `read-response` parses `{"message":{...},"done":true,"done_reason",
//!   "prompt_eval_count","eval_count"}` or `{"error":"..."}` into a reply with OpenAI-shaped
//!   tool calls and the model's thinking as a reasoning item; with `streamed`, the
//!   newline-delimited JSON of a streamed reply is folded a line at a time.

mod request;
mod response;

use ctxhost_plugin::request_format::{Guest, Reply, RequestConfig, RequestInfo};
use ctxhost_plugin::types::PluginError;

struct OllamaChat;

impl Guest for OllamaChat {
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

ctxhost_plugin::export_request_format!(OllamaChat);
