//! Anthropic's Messages API (`POST /v1/messages`), the pure part of the
//! `builtin:anthropic-messages` request format: tested natively here, compiled into the
//! component.
//!
//! - [`blocks`]: chat messages (OpenAI shape, as in current.jsonl) → turns of content blocks:
//!   `tool_use` / `tool_result` blocks, consecutive same-role messages merged, every `tool_use`
//!   answered by exactly one `tool_result` in the next user turn.
//! - [`cache`]: where the prompt-cache breakpoints (`cache_control`) go.
//! - [`request`]: the request body, streamed from a messages file in two passes.
//! - [`response`]: a Messages API response → the OpenAI-shaped assistant message (thinking
//!   blocks as its reasoning items), usage with the cache counts, `stop_reason` as an OpenAI
//!   `finish_reason`; [`stream`]: the same from a streamed reply's events, a line at a time.
//!
//! Shapes follow Anthropic's API reference (Messages, tool use, prompt caching), version
//! `2023-06-01` ([`API_VERSION`], sent by the host's transport as `anthropic-version`).

pub mod blocks;
pub mod cache;
pub mod request;
pub mod response;
pub mod stream;

#[cfg(test)]
mod pairing_tests;

pub use blocks::{Block, BlockSink, Origin, Repairs, Role, TurnBuilder};
pub use cache::CachePlan;
pub use request::{
    BodyError, MIN_THINKING_BUDGET, RequestSettings, Thinking, Written, anthropic_tool,
    write_request,
};
pub use response::{
    AnthropicUsage, PROVIDER, ParsedReply, finish_reason, parse_response, reasoning_items,
};
pub use stream::AnthropicStream;

/// Where the request is posted, relative to the provider's base URL.
pub const ENDPOINT_PATH: &str = "/v1/messages";

/// The `anthropic-version` header value the request and response shapes follow.
pub const API_VERSION: &str = "2023-06-01";

/// `max_tokens` when the task's config sets no `llm.max_output_tokens` (the API requires the
/// field; 4096 is accepted by every current Claude model).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// Highest `temperature` the API accepts (its range is 0–1, OpenAI's is 0–2).
pub const MAX_TEMPERATURE: f32 = 1.0;
