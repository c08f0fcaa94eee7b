//! [`MessageStore`]: a `message-store-plugin` instance (WIT interface
//! `ctxhost:plugin/message-store`, any supported version), the single writer of
//! `messages.jsonl` and `current.jsonl` of one task directory.

use std::path::PathBuf;

use ctxhost_format::ChatMessage;

mod appended;

use super::error::RuntimeError;
use super::sandbox::{Sandbox, StoreState};
use super::types::{AddedMessage, StoreStats};
use super::wit::{Versioned, dispatch, v0_1_0, v0_2_0, v0_3_0};

/// A pre-linked message store component of either WIT version.
pub(crate) type Pre = Versioned<
    v0_1_0::MessageStorePluginPre<StoreState>,
    v0_2_0::MessageStorePluginPre<StoreState>,
    v0_3_0::MessageStorePluginPre<StoreState>,
>;
type Bindings =
    Versioned<v0_1_0::MessageStorePlugin, v0_2_0::MessageStorePlugin, v0_3_0::MessageStorePlugin>;

/// One message store instance on one task directory. Calls are synchronous; an error that is
/// not the store's own `plugin-error` (deadline, memory limit, trap) leaves the instance
/// unusable (later calls return [`RuntimeError::Poisoned`]).
pub struct MessageStore {
    sandbox: Sandbox,
    bindings: Bindings,
    /// The task directory the component sees (the 0.1.0 shim numbers its summary lines there).
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
        let bindings = match pre {
            Versioned::V0_1_0(p) => {
                Versioned::V0_1_0(sandbox.call("instantiation", |s| p.instantiate(s))?)
            }
            Versioned::V0_2_0(p) => {
                Versioned::V0_2_0(sandbox.call("instantiation", |s| p.instantiate(s))?)
            }
            Versioned::V0_3_0(p) => {
                Versioned::V0_3_0(sandbox.call("instantiation", |s| p.instantiate(s))?)
            }
        };
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
        let stats: StoreStats = dispatch!(&self.bindings, b => {
            let r = sandbox.call("open", |s| b.ctxhost_plugin_message_store().call_open(s))?;
            sandbox.plugin_result("open", r)
        })?;
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
            let full = matches!(self.bindings, Versioned::V0_3_0(_));
            appended::check(&marks, message, content_file, added, full).map_err(|reason| {
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
        dispatch!(&self.bindings, b => {
            let m = message.into();
            let r = sandbox.call("add-message", |s| {
                b.ctxhost_plugin_message_store()
                    .call_add_message(s, &m, timestamp)
            })?;
            sandbox.plugin_result("add-message", r)
        })
    }

    /// `add-message-file` (WIT 0.3.0): append `message` with the text of `content_file` (a
    /// file of the task directory, UTF-8, not escaped) as its content; the store copies it
    /// through a fixed buffer. A store built against 0.2.0 or 0.1.0 has no such function: the
    /// host reads the file into the message and calls `add-message` (memory then grows with
    /// the text). The file is left in place either way.
    pub fn add_message_file(
        &mut self,
        message: &ChatMessage,
        content_file: &str,
        timestamp: &str,
    ) -> Result<AddedMessage, RuntimeError> {
        let marks = self.marks();
        let sandbox = &mut self.sandbox;
        match &self.bindings {
            Versioned::V0_3_0(b) => {
                let m = message.into();
                let r = sandbox.call("add-message-file", |s| {
                    b.ctxhost_plugin_message_store().call_add_message_file(
                        s,
                        &m,
                        content_file,
                        timestamp,
                    )
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
            _ => {
                let text =
                    std::fs::read_to_string(self.task_dir.join(content_file)).map_err(|e| {
                        RuntimeError::Host {
                            component: sandbox.name().to_string(),
                            function: "add-message".to_string(),
                            reason: format!("reading the reply's text from {content_file}: {e}"),
                        }
                    })?;
                let mut whole = message.clone();
                whole.content = Some(text);
                let added = self.add_message_unchecked(&whole, timestamp)?;
                self.check_appended("add-message", marks, &whole, None, added)
            }
        }
    }

    /// `record-summary`: append a summary (role assistant, `summary_id`) to messages.jsonl only.
    /// `summary_id` is the summary's integer id (from 1); a 0.1.0 store is given `sum-N`, and
    /// the line it writes is numbered afterwards ([`v0_1_0::number_history_line`]).
    pub fn record_summary(
        &mut self,
        summary: &ChatMessage,
        summary_id: u64,
        timestamp: &str,
    ) -> Result<AddedMessage, RuntimeError> {
        let added = self.record_summary_unchecked(summary, summary_id, timestamp)?;
        self.last_seq = Some(added.seq);
        Ok(added)
    }

    fn record_summary_unchecked(
        &mut self,
        summary: &ChatMessage,
        summary_id: u64,
        timestamp: &str,
    ) -> Result<AddedMessage, RuntimeError> {
        let sandbox = &mut self.sandbox;
        match &self.bindings {
            Versioned::V0_1_0(b) => {
                let m = summary.into();
                let id = v0_1_0::summary_id_arg(summary_id);
                let r = sandbox.call("record-summary", |s| {
                    b.ctxhost_plugin_message_store()
                        .call_record_summary(s, &m, &id, timestamp)
                })?;
                let added = sandbox.plugin_result("record-summary", r)?;
                v0_1_0::number_history_line(&self.task_dir, &id, summary_id).map_err(|e| {
                    RuntimeError::Host {
                        component: sandbox.name().to_string(),
                        function: "record-summary".to_string(),
                        reason: crate::untrusted::text(
                            &format!("numbering its summary id {id:?}: {e:#}"),
                            crate::untrusted::MAX_ERROR_BYTES,
                        )
                        .into_owned(),
                    }
                })?;
                Ok(added)
            }
            Versioned::V0_2_0(b) => {
                let m = summary.into();
                let r = sandbox.call("record-summary", |s| {
                    b.ctxhost_plugin_message_store()
                        .call_record_summary(s, &m, summary_id, timestamp)
                })?;
                sandbox.plugin_result("record-summary", r)
            }
            Versioned::V0_3_0(b) => {
                let m = summary.into();
                let r = sandbox.call("record-summary", |s| {
                    b.ctxhost_plugin_message_store()
                        .call_record_summary(s, &m, summary_id, timestamp)
                })?;
                sandbox.plugin_result("record-summary", r)
            }
        }
    }

    /// `current-token-count`: estimated tokens of current.jsonl.
    pub fn current_token_count(&mut self) -> Result<u64, RuntimeError> {
        let sandbox = &mut self.sandbox;
        dispatch!(&self.bindings, b => sandbox.call("current-token-count", |s| {
            b.ctxhost_plugin_message_store().call_current_token_count(s)
        }))
    }

    /// `count-messages`: lines in messages.jsonl.
    pub fn count_messages(&mut self) -> Result<u64, RuntimeError> {
        let sandbox = &mut self.sandbox;
        dispatch!(&self.bindings, b => sandbox.call("count-messages", |s| {
            b.ctxhost_plugin_message_store().call_count_messages(s)
        }))
    }

    /// `current-context-file`: the live context file, relative to the task directory.
    pub fn current_context_file(&mut self) -> Result<String, RuntimeError> {
        let sandbox = &mut self.sandbox;
        dispatch!(&self.bindings, b => sandbox.call("current-context-file", |s| {
            b.ctxhost_plugin_message_store().call_current_context_file(s)
        }))
    }

    /// `recreate-current-context`: replace current.jsonl atomically with the (host-validated)
    /// chat message lines of `source` (relative to the task directory), which is then deleted.
    pub fn recreate_current_context(&mut self, source: &str) -> Result<StoreStats, RuntimeError> {
        let sandbox = &mut self.sandbox;
        dispatch!(&self.bindings, b => {
            let r = sandbox.call("recreate-current-context", |s| {
                b.ctxhost_plugin_message_store()
                    .call_recreate_current_context(s, source)
            })?;
            sandbox.plugin_result("recreate-current-context", r)
        })
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
