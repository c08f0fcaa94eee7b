//! `builtin:jsonl-store`: the message store component (world `message-store-plugin`).
//!
//! The single writer of the task directory's `messages.jsonl` (full history, `HistoryLine`s
//! with `seq` from 1, gap-free) and `current.jsonl` (the live context, one chat message per
//! line), formats of DESIGN.md §2 (`ctxhost_plugin::format::lines`). Files are streamed a line at a
//! time and kept open for appending between calls, so guest memory stays flat whatever their size;
//! message/line counts and the token estimate are kept in a static between calls.
//! The logic lives in [`store`]; this file only binds it to the WIT exports.

mod store;

use ctxhost_plugin::message_store::{AddedMessage, Guest, StoreStats};
use ctxhost_plugin::types::{ChatMessage, PluginError};

struct JsonlStore;

impl Guest for JsonlStore {
    fn open() -> Result<StoreStats, PluginError> {
        store::with(|s| s.open())
    }

    fn add_message(message: ChatMessage, timestamp: String) -> Result<AddedMessage, PluginError> {
        store::with(|s| s.add_message(message.into(), &timestamp))
    }

    fn add_message_file(
        message: ChatMessage,
        content_file: String,
        timestamp: String,
    ) -> Result<AddedMessage, PluginError> {
        store::with(|s| s.add_message_file(message.into(), &content_file, &timestamp))
    }

    fn record_summary(
        summary: ChatMessage,
        summary_id: u64,
        timestamp: String,
    ) -> Result<AddedMessage, PluginError> {
        store::with(|s| s.record_summary(summary.into(), summary_id, &timestamp))
    }

    fn current_token_count() -> u64 {
        store::with(|s| s.stats().current_tokens)
    }

    fn count_messages() -> u64 {
        store::with(|s| s.stats().history_count)
    }

    fn current_context_file() -> String {
        store::CURRENT.to_string()
    }

    fn recreate_current_context(source: String) -> Result<StoreStats, PluginError> {
        store::with(|s| s.recreate_current_context(&source))
    }
}

ctxhost_plugin::export_message_store!(JsonlStore);
