//! {{name}}: a ctxhost request format (world `request-format-plugin`): the OpenAI
//! chat-completions API, which LM Studio, llama.cpp's server, vLLM and many gateways speak.
//!
//! - `write-request` streams the messages file into
//!   `{"model","messages":[...],"stream":false,"max_tokens"?,"temperature"?,"tools"?}` for
//!   `POST /v1/chat/completions`. The SDK copies each line of the messages file into the body
//!   from its bytes (`ctxhost_plugin::request::write_request`): no message is held in memory,
//!   and no line is parsed into a message and written again. This file writes the fields after
//!   `messages`.
//! - `read-response` parses `{"choices":[{"message","finish_reason"}],"usage"?}` into a reply
//!   (`usage.prompt_tokens_details.cached_tokens`, if sent, is the prompt-cache read count).
//!   The SDK refuses a provider's `{"error":...}` body and a body that is not JSON, such as an
//!   HTML error page (`ctxhost_plugin::request::read_response_json`).
//!
//! The host sends the request and the API key; a request format only reads and writes files
//! of the task directory. The contract is in docs/PLUGINS.md of ctxhost.

use std::io::{self, Write};

use ctxhost_plugin::format::reply::{ProviderToolCall, assistant_message};
use ctxhost_plugin::format::shape::openai::OpenAiShape;
use ctxhost_plugin::request::{self, bad_shape};
use ctxhost_plugin::request_format::{Guest, Reply, RequestConfig, RequestInfo};
use ctxhost_plugin::types::{PluginError, Usage};
use serde::Deserialize;

/// Where the request is posted, relative to the provider's base URL.
const ENDPOINT_PATH: &str = "/v1/chat/completions";

struct Format;

impl Guest for Format {
    fn write_request(config: RequestConfig) -> Result<RequestInfo, PluginError> {
        let (max_tokens, temperature) = (config.max_output_tokens, config.temperature);
        // `OpenAiShape` writes each messages line as an OpenAI message; another provider's
        // shape implements `ctxhost_plugin::format::shape::MessageShape`.
        request::write_request(&config, ENDPOINT_PATH, OpenAiShape, |out, tools| {
            out.write_all(b",\"stream\":false")?;
            if let Some(n) = max_tokens {
                write!(out, ",\"max_tokens\":{n}")?;
            }
            if let Some(t) = temperature {
                out.write_all(b",\"temperature\":")?;
                serde_json::to_writer(&mut *out, &t).map_err(io::Error::from)?;
            }
            // OpenAI rejects `"tools":[]`: leave an empty list out.
            if let Some(tools) = tools.filter(|t| !t.is_empty()) {
                out.write_all(b",\"tools\":")?;
                serde_json::to_writer(&mut *out, &tools).map_err(io::Error::from)?;
            }
            Ok(())
        })
    }

    fn read_response(response_file: String, streamed: bool) -> Result<Reply, PluginError> {
        ctxhost_plugin::request::whole_body_only(streamed)?;
        let file = response_file.as_str();
        let value = request::read_response_json(file)?;
        let response: Response = serde_json::from_value(value.clone())
            .map_err(|e| bad_shape(file, format_args!("not a chat completion ({e})"), &value))?;
        let Some(choice) = response.choices.into_iter().next() else {
            return Err(bad_shape(file, "the response has no choices", &value));
        };
        // `assistant_message` gives every tool call an id (unique in the reply) and turns
        // object arguments into JSON text.
        let message = assistant_message(
            choice.message.role,
            choice.message.content,
            choice.message.tool_calls.unwrap_or_default(),
        );
        Ok(Reply {
            message: message.into(),
            usage: response.usage.map(|u| Usage {
                // Prompt tokens served from OpenAI's prompt cache.
                cache_read_tokens: u
                    .prompt_tokens_details
                    .and_then(|d| d.cached_tokens)
                    .unwrap_or(0),
                ..request::usage(u.prompt_tokens, u.completion_tokens, u.total_tokens)
            }),
            finish_reason: choice.finish_reason,
            // The model that answered, as the provider names it.
            model: response.model,
            // The text in `content` (a format may write a large one to a file instead).
            content_file: None,
        })
    }
}

#[derive(Deserialize)]
struct Response {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<UsageIn>,
    #[serde(default)]
    model: Option<String>,
}

#[derive(Deserialize)]
struct Choice {
    message: MessageIn,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct MessageIn {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ProviderToolCall>>,
}

#[derive(Deserialize)]
struct UsageIn {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    total_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptTokensDetails>,
}

#[derive(Deserialize)]
struct PromptTokensDetails {
    cached_tokens: Option<u64>,
}

// The export exists only in the component (its symbol names do not link natively).
#[cfg(target_arch = "wasm32")]
ctxhost_plugin::export_request_format!(Format);
