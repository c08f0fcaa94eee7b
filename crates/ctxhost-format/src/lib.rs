//! On-disk line formats of a ctxhost task directory (DESIGN.md §2) and the token estimate.
//!
//! Shared by the native host and the `wasm32-wasip2` components, so both sides read and write
//! exactly the same shapes. Pure code: no I/O beyond what callers hand in.

pub mod lines;
pub mod tokens;

pub use lines::{ChatMessage, FunctionCall, HistoryLine, SummaryLine, ToolCall, ToolLine, ToolStatus};
pub use tokens::{estimate_message_tokens, estimate_tokens};
