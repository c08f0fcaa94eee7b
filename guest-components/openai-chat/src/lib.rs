//! `builtin:openai-chat`: the OpenAI chat-completions request format (world
//! `request-format-plugin`), also spoken by LM Studio, llama.cpp's server and vLLM.
//!
//! - [`request`]: `write-request` streams the messages file into
//!   `{"model","messages":[...],"stream":false,"max_tokens"?,"temperature"?,"tools"?}` for
//!   `POST /v1/chat/completions` (with `stream-reply`: `"stream":true`, and
//!   `"stream_options":{"include_usage":true}` with `stream-usage` too).
//! - `read-response` (`ctxhost_plugin::request::openai`, shared with `builtin:prompted-tools`) parses `{"choices":[{"message","finish_reason"}],"usage"?}`
//!   or an `{"error":{...}}` body into a reply; with `streamed`, the server-sent events of a
//!   streamed reply are folded a line at a time (`ctxhost_plugin::request::openai::read_stream`).

mod request;

use ctxhost_plugin::request_format::{Guest, Reply, RequestConfig, RequestInfo};
use ctxhost_plugin::types::PluginError;

struct OpenAiChat;

impl Guest for OpenAiChat {
    fn write_request(config: RequestConfig) -> Result<RequestInfo, PluginError> {
        request::write_request(&config)
    }

    fn read_response(response_file: String, streamed: bool) -> Result<Reply, PluginError> {
        if streamed {
            return ctxhost_plugin::request::openai::read_stream(&response_file);
        }
        ctxhost_plugin::request::openai::read_response(&response_file)
    }
}

ctxhost_plugin::export_request_format!(OpenAiChat);
