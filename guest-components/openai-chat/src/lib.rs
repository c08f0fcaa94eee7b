//! `builtin:openai-chat`: the OpenAI chat-completions request format (world
//! `request-format-plugin`), also spoken by LM Studio, llama.cpp's server and vLLM.
//!
//! - [`request`]: `write-request` streams the messages file into
//!   `{"model","messages":[...],"stream":false,"max_tokens"?,"temperature"?,"tools"?}` for
//!   `POST /v1/chat/completions`.
//! - [`response`]: `read-response` parses `{"choices":[{"message","finish_reason"}],"usage"?}`
//!   or an `{"error":{...}}` body into a reply.

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

struct OpenAiChat;

impl Guest for OpenAiChat {
    fn write_request(config: RequestConfig) -> Result<RequestInfo, PluginError> {
        request::write_request(&config)
    }

    fn read_response(response_file: String) -> Result<Reply, PluginError> {
        response::read_response(&response_file)
    }
}

export!(OpenAiChat);
