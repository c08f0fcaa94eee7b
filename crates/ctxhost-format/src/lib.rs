//! On-disk line formats of a ctxhost task directory (DESIGN.md §2) and the token estimate.
//!
//! Shared by the native host and the `wasm32-wasip2` components, so both sides read and write
//! exactly the same shapes. Pure code: no I/O beyond the readers and writers callers hand in.
//!
//! - [`files`]: the names of the task directory's files, their owners and the temporaries.
//! - [`lines`]: serde shapes of the JSONL lines; [`tokens`]: the token estimate.
//! - [`jsonl`]: streaming, line-numbered JSONL reading; [`tail`]: reading one backwards from
//!   its end (the last lines only); [`checkpoint`]: what a reader already knows of a file.
//! - [`stream`]: streaming a JSONL file of chat messages into a JSON array (request bodies);
//!   [`raw`]: a chat message line validated without building a value; [`shape`]: each request
//!   format's shape of a message in that array.
//! - [`body`]: reading a provider's response body (size cap, readable parse errors);
//!   [`reply`]: the assistant message of a reply (provider tool calls, unique ids).
//! - [`event_stream`]: the one parser of server-sent events (WHATWG rules), which every
//!   streamed fold reads its stream with.
//! - [`sse`]: folding a streamed OpenAI chat-completions reply, a line at a time; [`ndjson`]:
//!   the same for Ollama's streamed `/api/chat` reply; [`fold`]: why a fold's end failed (cut
//!   off, or unreadable); [`content_file`]: a reply's text kept in a file past a threshold (the
//!   folds' sink, escaping and counting it in blocks).
//! - [`compress`]: the pure rules of context compression (cut point, summary and mask markers,
//!   summary request chunking); [`time`]: RFC 3339 timestamps from a wall clock.
//! - [`prompted`]: tool calls for models without native tool calling (prompt text, reply parser).
//! - [`repairs`]: the warning of a request changed to keep its API's rules.
//! - [`planning`]: the planning history (`planning/{uuid}.jsonl`): line shapes, plan rules, the
//!   fold to the latest plan, lenient reading of plans and verdicts from a model's reply.
//! - [`summary_id`]: summary ids (numbers from 1).
//! - [`anthropic`]: Anthropic's Messages API (request body with prompt-cache breakpoints,
//!   response), for the `anthropic-messages` request format.
//! - [`block_order`]: the order of a reply's provider blocks (interleaved thinking), kept as a
//!   reasoning item so requests send them back in it.
//! - [`responses`]: OpenAI's Responses API (request body with reasoning items replayed, whole
//!   and streamed responses), for the `openai-responses` request format.

pub mod anthropic;
pub mod block_order;
pub mod body;
pub mod checkpoint;
pub mod compress;
pub mod content_file;
pub mod event_stream;
pub mod files;
pub mod fold;
pub mod jsonl;
pub mod lines;
pub mod long_line;
#[cfg(test)]
mod long_request_tests;
pub mod ndjson;
mod placeholder;
pub mod planning;
pub mod prompted;
pub mod raw;
pub mod repairs;
pub mod reply;
pub mod responses;
pub mod shape;
pub mod sse;
pub mod stream;
pub mod summary_id;
pub mod tail;
pub mod time;
pub mod tokens;

pub use lines::{
    CallLogLine, CallStatus, CallUsage, ChatMessage, CompressionLine, FunctionCall, HistoryLine,
    LlmCallLine, ReasoningItem, SummaryCallLine, SummaryLine, ToolCall, ToolLine, ToolStatus,
};
pub use tokens::{estimate_message_tokens, estimate_tokens};
