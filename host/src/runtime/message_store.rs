//! [`MessageStore`]: a `message-store-plugin` instance (WIT interface
//! `ctxhost:plugin/message-store@0.1.0`), the single writer of `messages.jsonl` and
//! `current.jsonl` of one task directory.

use ctxhost_format::ChatMessage;

use super::bindings::message_store::MessageStorePlugin;
use super::error::RuntimeError;
use super::sandbox::Sandbox;
use super::types::{AddedMessage, StoreStats};

/// One message store instance on one task directory. Calls are synchronous; an error that is
/// not the store's own `plugin-error` (deadline, memory limit, trap) leaves the instance
/// unusable (later calls return [`RuntimeError::Poisoned`]).
pub struct MessageStore {
    sandbox: Sandbox,
    bindings: MessageStorePlugin,
}

impl MessageStore {
    pub(crate) fn new(sandbox: Sandbox, bindings: MessageStorePlugin) -> Self {
        MessageStore { sandbox, bindings }
    }

    /// The component's name (`builtin:NAME` or its path).
    pub fn component(&self) -> &str {
        self.sandbox.name()
    }

    /// The largest linear memory this instance has used so far (bytes).
    pub fn memory_peak_bytes(&self) -> usize {
        self.sandbox.memory_peak_bytes()
    }

    /// `open`: read messages.jsonl and current.jsonl (if present) once. Call first.
    pub fn open(&mut self) -> Result<StoreStats, RuntimeError> {
        let b = &self.bindings;
        let r = self
            .sandbox
            .call("open", |s| b.ctxhost_plugin_message_store().call_open(s))?;
        self.sandbox.plugin_result("open", r)
    }

    /// `add-message`: append `message` to messages.jsonl and current.jsonl; `timestamp` is
    /// RFC 3339 UTC.
    pub fn add_message(
        &mut self,
        message: &ChatMessage,
        timestamp: &str,
    ) -> Result<AddedMessage, RuntimeError> {
        let b = &self.bindings;
        let m = message.into();
        let r = self.sandbox.call("add-message", |s| {
            b.ctxhost_plugin_message_store()
                .call_add_message(s, &m, timestamp)
        })?;
        self.sandbox.plugin_result("add-message", r)
    }

    /// `record-summary`: append a summary (role assistant, `summary_id`) to messages.jsonl only.
    pub fn record_summary(
        &mut self,
        summary: &ChatMessage,
        summary_id: &str,
        timestamp: &str,
    ) -> Result<AddedMessage, RuntimeError> {
        let b = &self.bindings;
        let m = summary.into();
        let r = self.sandbox.call("record-summary", |s| {
            b.ctxhost_plugin_message_store()
                .call_record_summary(s, &m, summary_id, timestamp)
        })?;
        self.sandbox.plugin_result("record-summary", r)
    }

    /// `current-token-count`: estimated tokens of current.jsonl.
    pub fn current_token_count(&mut self) -> Result<u64, RuntimeError> {
        let b = &self.bindings;
        self.sandbox.call("current-token-count", |s| {
            b.ctxhost_plugin_message_store().call_current_token_count(s)
        })
    }

    /// `count-messages`: lines in messages.jsonl.
    pub fn count_messages(&mut self) -> Result<u64, RuntimeError> {
        let b = &self.bindings;
        self.sandbox.call("count-messages", |s| {
            b.ctxhost_plugin_message_store().call_count_messages(s)
        })
    }

    /// `current-context-file`: the live context file, relative to the task directory.
    pub fn current_context_file(&mut self) -> Result<String, RuntimeError> {
        let b = &self.bindings;
        self.sandbox.call("current-context-file", |s| {
            b.ctxhost_plugin_message_store()
                .call_current_context_file(s)
        })
    }

    /// `recreate-current-context`: replace current.jsonl atomically with the (host-validated)
    /// chat message lines of `source` (relative to the task directory), which is then deleted.
    pub fn recreate_current_context(&mut self, source: &str) -> Result<StoreStats, RuntimeError> {
        let b = &self.bindings;
        let r = self.sandbox.call("recreate-current-context", |s| {
            b.ctxhost_plugin_message_store()
                .call_recreate_current_context(s, source)
        })?;
        self.sandbox.plugin_result("recreate-current-context", r)
    }
}
