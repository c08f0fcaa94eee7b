//! `builtin:openai-responses`: OpenAI's Responses API (world `request-format-plugin`), the API
//! in which OpenAI's reasoning models keep their reasoning across tool calls.
//!
//! - [`request`]: `write-request` streams the messages file into
//!   `{"model","input":[...],"instructions"?,"store":false,
//!   "include":["reasoning.encrypted_content"],"stream","max_output_tokens"?,"temperature"?,
//!   "reasoning"?:{"effort"},"tools"?}` for `POST /v1/responses`
//!   (`ctxhost_plugin::format::responses::request`): each assistant message's reasoning items
//!   are sent back byte for byte before its function calls.
//! - [`response`]: `read-response` parses a response object, or with `streamed` folds its
//!   server-sent events a line at a time, into a reply whose assistant message keeps the
//!   `reasoning` items (provider `openai-responses`, type `reasoning`, data the item's JSON text
//!   with `encrypted_content`); usage with `cached_tokens` and `reasoning_tokens`.
//!
//! Nothing is stored at OpenAI (`store: false`): the encrypted reasoning items carry the
//! model's reasoning from one call to the next.

mod request;
mod response;

use ctxhost_plugin::request_format::{Guest, Reply, RequestConfig, RequestInfo};
use ctxhost_plugin::types::PluginError;

struct OpenAiResponses;

impl Guest for OpenAiResponses {
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

ctxhost_plugin::export_request_format!(OpenAiResponses);
