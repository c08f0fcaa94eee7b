//! [`MessageStore`]: a `message-store-plugin` instance (WIT interface
//! `ctxhost:plugin/message-store`, WIT 1.0.0), the single writer of
//! `messages.jsonl` and `current.jsonl` of one task directory.

use std::path::PathBuf;

use ctxhost_format::ChatMessage;

mod appended;

use super::error::RuntimeError;
use super::sandbox::{Sandbox, StoreState};
use super::types::{AddedMessage, StoreStats};
use super::wit::v1_0_0;

/// A pre-linked message store component.
pub(crate) type Pre = v1_0_0::MessageStorePluginPre<StoreState>;
type Bindings = v1_0_0::MessageStorePlugin;

/// One message store instance on one task directory. Calls are synchronous; an error that is
/// not the store's own `plugin-error` (deadline, memory limit, trap) leaves the instance
/// unusable (later calls return [`RuntimeError::Poisoned`]).
pub struct MessageStore {
    sandbox: Sandbox,
    bindings: Bindings,
    /// The task directory the component sees (where the host checks what the store appended).
    task_dir: PathBuf,
    /// The seq of the last line of messages.jsonl, as the store said (`open`, then each
    /// append): the next message must be the one after it.
    last_seq: Option<u64>,
}

impl MessageStore {
    /// Instantiate `pre` in `sandbox`, which sees `task_dir`.
    pub(crate) fn instantiate(
        mut sandbox: Sandbox,
        pre: &Pre,
        task_dir: PathBuf,
    ) -> Result<Self, RuntimeError> {
        let bindings = sandbox.call("instantiation", |s| pre.instantiate(s))?;
        Ok(MessageStore {
            sandbox,
            bindings,
            task_dir,
            last_seq: None,
        })
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
        let sandbox = &mut self.sandbox;
        let b = &self.bindings;
        let r = sandbox.call("open", |s| b.ctxhost_plugin_message_store().call_open(s))?;
        let stats: StoreStats = sandbox.plugin_result("open", r)?;
        self.last_seq = Some(stats.history_count);
        Ok(stats)
    }

    /// What the task's two files hold before an append ([`appended`]): `None` when they
    /// cannot be measured (the check is then skipped; the host's step check reports the
    /// directory).
    fn marks(&mut self) -> Option<appended::Marks> {
        let current = self.current_context_file().ok()?;
        appended::Marks::of(&self.task_dir, current, self.last_seq)
    }

    /// The check after an append of `message` (text in `content_file` when given) that the
    /// store said is `added`: [`appended::check`], failing the call naming the store.
    fn check_appended(
        &mut self,
        function: &str,
        marks: Option<appended::Marks>,
        message: &ChatMessage,
        content_file: Option<&str>,
        added: AddedMessage,
    ) -> Result<AddedMessage, RuntimeError> {
        if let Some(marks) = marks {
            appended::check(&marks, message, content_file, added).map_err(|reason| {
                RuntimeError::Host {
                    component: self.sandbox.name().to_string(),
                    function: function.to_string(),
                    reason: format!(
                        "{reason}; the step fails (the store must write what the host gives it)"
                    ),
                }
            })?;
        }
        self.last_seq = Some(added.seq);
        Ok(added)
    }

    /// `add-message`: append `message` to messages.jsonl and current.jsonl; `timestamp` is
    /// RFC 3339 UTC.
    pub fn add_message(
        &mut self,
        message: &ChatMessage,
        timestamp: &str,
    ) -> Result<AddedMessage, RuntimeError> {
        let marks = self.marks();
        let added = self.add_message_unchecked(message, timestamp)?;
        self.check_appended("add-message", marks, message, None, added)
    }

    /// The store's own answers, without the host's check of what it appended: for tests that
    /// probe what a hostile store can reach (tests/all/runtime_sandbox.rs: its probe opens a
    /// path and appends nothing, which the check rightly refuses). Not part of the API; a task
    /// never uses it ([`MessageStore::add_message`] checks every append).
    #[doc(hidden)]
    pub fn unchecked_probe(&mut self) -> UncheckedProbe<'_> {
        UncheckedProbe(self)
    }

    /// `add-message` without the host's check of what the store appended (the callers check).
    fn add_message_unchecked(
        &mut self,
        message: &ChatMessage,
        timestamp: &str,
    ) -> Result<AddedMessage, RuntimeError> {
        let sandbox = &mut self.sandbox;
        let b = &self.bindings;
        let m = message.into();
        let r = sandbox.call("add-message", |s| {
            b.ctxhost_plugin_message_store()
                .call_add_message(s, &m, timestamp)
        })?;
        sandbox.plugin_result("add-message", r)
    }

    /// `add-message-file`: append `message` with the text of `content_file` (a file of the task
    /// directory, UTF-8, not escaped) as its content; the store copies it through a fixed
    /// buffer. The file is left in place.
    pub fn add_message_file(
        &mut self,
        message: &ChatMessage,
        content_file: &str,
        timestamp: &str,
    ) -> Result<AddedMessage, RuntimeError> {
        let marks = self.marks();
        let sandbox = &mut self.sandbox;
        let b = &self.bindings;
        let m = message.into();
        let r = sandbox.call("add-message-file", |s| {
            b.ctxhost_plugin_message_store()
                .call_add_message_file(s, &m, content_file, timestamp)
        })?;
        let added = sandbox.plugin_result("add-message-file", r)?;
        self.check_appended(
            "add-message-file",
            marks,
            message,
            Some(content_file),
            added,
        )
    }

    /// `record-summary`: append a summary (role assistant, `summary_id`) to messages.jsonl only.
    /// `summary_id` is the summary's integer id (from 1).
    pub fn record_summary(
        &mut self,
        summary: &ChatMessage,
        summary_id: u64,
        timestamp: &str,
    ) -> Result<AddedMessage, RuntimeError> {
        let sandbox = &mut self.sandbox;
        let b = &self.bindings;
        let m = summary.into();
        let r = sandbox.call("record-summary", |s| {
            b.ctxhost_plugin_message_store()
                .call_record_summary(s, &m, summary_id, timestamp)
        })?;
        let added: AddedMessage = sandbox.plugin_result("record-summary", r)?;
        self.last_seq = Some(added.seq);
        Ok(added)
    }

    /// `current-token-count`: estimated tokens of current.jsonl.
    pub fn current_token_count(&mut self) -> Result<u64, RuntimeError> {
        let sandbox = &mut self.sandbox;
        let b = &self.bindings;
        sandbox.call("current-token-count", |s| {
            b.ctxhost_plugin_message_store().call_current_token_count(s)
        })
    }

    /// `count-messages`: lines in messages.jsonl.
    pub fn count_messages(&mut self) -> Result<u64, RuntimeError> {
        let sandbox = &mut self.sandbox;
        let b = &self.bindings;
        sandbox.call("count-messages", |s| {
            b.ctxhost_plugin_message_store().call_count_messages(s)
        })
    }

    /// `current-context-file`: the live context file, relative to the task directory.
    pub fn current_context_file(&mut self) -> Result<String, RuntimeError> {
        let sandbox = &mut self.sandbox;
        let b = &self.bindings;
        sandbox.call("current-context-file", |s| {
            b.ctxhost_plugin_message_store()
                .call_current_context_file(s)
        })
    }

    /// `recreate-current-context`: replace current.jsonl atomically with the (host-validated)
    /// chat message lines of `source` (relative to the task directory), which is then deleted.
    pub fn recreate_current_context(&mut self, source: &str) -> Result<StoreStats, RuntimeError> {
        let sandbox = &mut self.sandbox;
        let b = &self.bindings;
        let r = sandbox.call("recreate-current-context", |s| {
            b.ctxhost_plugin_message_store()
                .call_recreate_current_context(s, source)
        })?;
        sandbox.plugin_result("recreate-current-context", r)
    }
}
/// [`MessageStore::unchecked_probe`]: a message store's calls answered as the store answers
/// them, unchecked. Test-only; hidden.
#[doc(hidden)]
pub struct UncheckedProbe<'a>(&'a mut MessageStore);

impl UncheckedProbe<'_> {
    /// `add-message`: the store's own answer, whatever it appended.
    pub fn add_message(
        &mut self,
        message: &ChatMessage,
        timestamp: &str,
    ) -> Result<AddedMessage, RuntimeError> {
        self.0.add_message_unchecked(message, timestamp)
    }
}
