//! The WIT versions of `ctxhost:plugin` this host loads, one module per version (Zed's
//! `extension_api` style): each holds the bindings `bindgen!` generates from that version's WIT
//! and the thin shim converting them to the host's own types ([`super::types`],
//! [`ctxhost_format::ChatMessage`]), so nothing outside `runtime/` ever sees a generated type.
//!
//! | module | WIT | file |
//! |---|---|---|
//! | [`v0_3_0`] | `ctxhost:plugin@0.3.0` (current) | `wit/plugin.wit` |
//! | [`v0_2_0`] | `ctxhost:plugin@0.2.0` (frozen) | `wit/v0.2.0/plugin.wit` |
//! | [`v0_1_0`] | `ctxhost:plugin@0.1.0` (frozen) | `wit/v0.1.0/plugin.wit` |
//!
//! A component's version is read from its export names (`ctxhost:plugin/compressor@0.1.0`,
//! [`super::world`]); [`WitVersion::for_export`] maps it to the module that runs it (semver:
//! same major, and for 0.x the same minor). The typed instances ([`super::MessageStore`], ...)
//! hold the bindings of either version and convert at each call.
//!
//! Adding a version: freeze the current `wit/plugin.wit` as `wit/vX.Y.Z/plugin.wit`, add a
//! module generating bindings from it with its shim, a [`WitVersion`] variant, and an arm in the
//! instances' dispatch; then change `wit/plugin.wit`.

pub(crate) mod v0_1_0;
pub(crate) mod v0_2_0;
pub(crate) mod v0_3_0;

use std::fmt;

/// A version of the WIT package `ctxhost:plugin` that this host loads components of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WitVersion {
    /// `ctxhost:plugin@0.1.0` (ctxhost 0.1): string summary ids, no prompt-cache usage.
    V0_1_0,
    /// `ctxhost:plugin@0.2.0`: integer summary ids from 1, `usage.cache-read-tokens` and
    /// `usage.cache-creation-tokens`, the strategy world.
    V0_2_0,
    /// `ctxhost:plugin@0.3.0`: `chat-message.is-error` and `reasoning`,
    /// `usage.reasoning-tokens`, `request-config.stream-reply` and `reasoning`, `read-response`'s
    /// `streamed`, `reply.model`, the `history` import of compressors and strategies.
    V0_3_0,
}

impl WitVersion {
    /// Every version this host loads, oldest first.
    pub const SUPPORTED: [WitVersion; 3] =
        [WitVersion::V0_1_0, WitVersion::V0_2_0, WitVersion::V0_3_0];
    /// The version of `wit/plugin.wit`, which the builtins and new components are built against.
    pub const CURRENT: WitVersion = WitVersion::V0_3_0;

    /// `0.1.0`, `0.2.0`, `0.3.0`.
    pub const fn as_str(self) -> &'static str {
        match self {
            WitVersion::V0_1_0 => "0.1.0",
            WitVersion::V0_2_0 => "0.2.0",
            WitVersion::V0_3_0 => "0.3.0",
        }
    }

    /// The supported version that runs a component whose export carries `version` (the text
    /// after `@`, e.g. `0.1.0`): same major and, for 0.x, same minor (semver; `0.1.3` runs as
    /// 0.1.0). `None` for any other version, an unversioned export or text that is no version.
    pub fn for_export(version: &str) -> Option<WitVersion> {
        let (major, minor) = major_minor(version)?;
        WitVersion::SUPPORTED.into_iter().find(|v| {
            major_minor(v.as_str()).is_some_and(|(our_major, our_minor)| {
                major == our_major && (our_major != 0 || minor == our_minor)
            })
        })
    }

    /// `0.1.0, 0.2.0, 0.3.0`: the supported versions, for messages.
    pub fn supported_list() -> String {
        WitVersion::SUPPORTED
            .iter()
            .map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for WitVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One value per supported WIT version: the bindings (or pre-linked component) of an
/// instance, whichever version the component was built against.
pub(crate) enum Versioned<A, B, C> {
    /// Built against `ctxhost:plugin@0.1.0`.
    V0_1_0(A),
    /// Built against `ctxhost:plugin@0.2.0`.
    V0_2_0(B),
    /// Built against `ctxhost:plugin@0.3.0`.
    V0_3_0(C),
}

impl<A: Clone, B: Clone, C: Clone> Clone for Versioned<A, B, C> {
    fn clone(&self) -> Self {
        match self {
            Versioned::V0_1_0(a) => Versioned::V0_1_0(a.clone()),
            Versioned::V0_2_0(b) => Versioned::V0_2_0(b.clone()),
            Versioned::V0_3_0(c) => Versioned::V0_3_0(c.clone()),
        }
    }
}

/// `dispatch!(versioned, b => body)`: `body` once per version, with `b` bound to that
/// version's value. The conversions in `body` (`.into()`, `From`) resolve to that version's
/// shim, so one text serves every version whose signature did not change.
macro_rules! dispatch {
    ($versioned:expr, $b:ident => $body:expr) => {
        match $versioned {
            $crate::runtime::wit::Versioned::V0_1_0($b) => $body,
            $crate::runtime::wit::Versioned::V0_2_0($b) => $body,
            $crate::runtime::wit::Versioned::V0_3_0($b) => $body,
        }
    };
}
pub(crate) use dispatch;

/// `(major, minor)` of a semver text (pre-release and build suffixes ignored).
fn major_minor(version: &str) -> Option<(u64, u64)> {
    let core = version.split(['-', '+']).next()?;
    let mut it = core.split('.');
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    let _patch: u64 = it.next()?.parse().ok()?;
    Some((major, minor))
}

/// `plugin-error` of the versions before 0.3.0 (five cases; 0.3.0 added `stream-cut`, converted
/// in [`v0_3_0`]). Those components have no `stream-cut`, and need none: they never read a
/// stream (the host asks them for an unstreamed reply, [`super::RequestFormat::reads_streams`]),
/// so no error text of theirs is read as a cut stream.
macro_rules! plugin_error_before_0_3_0 {
    () => {
        impl From<wit_types::PluginError> for $crate::runtime::PluginError {
            fn from(e: wit_types::PluginError) -> Self {
                use $crate::runtime::PluginError as E;
                match e {
                    wit_types::PluginError::Io(s) => E::Io(s),
                    wit_types::PluginError::InvalidInput(s) => E::InvalidInput(s),
                    wit_types::PluginError::Llm(s) => E::Llm(s),
                    wit_types::PluginError::Unsupported(s) => E::Unsupported(s),
                    wit_types::PluginError::Internal(s) => E::Internal(s),
                }
            }
        }
    };
}
pub(crate) use plugin_error_before_0_3_0;

/// A format's `reply` of the versions before 0.3.0: no `model` and no `content-file` (both new
/// in 0.3.0), so the text is always in the message.
macro_rules! reply_before_0_3_0 {
    () => {
        impl From<wit_format::Reply> for $crate::runtime::Reply {
            fn from(r: wit_format::Reply) -> Self {
                $crate::runtime::Reply {
                    message: r.message.into(),
                    usage: r.usage.map(Into::into),
                    finish_reason: r.finish_reason,
                    model: None,
                    content_file: None,
                }
            }
        }
    };
}
pub(crate) use reply_before_0_3_0;

/// The parts of the shim that are the same in every supported version, because the WIT
/// records and interfaces they convert did not change: store stats, added
/// messages, request info, completion, and the host side of the `types`, `log` and
/// `llm` imports. A version module brings its generated modules into scope as `wit_types`,
/// `wit_log`, `wit_llm`, `wit_store`, `wit_format` and `wit_compressor`, implements `From` for
/// `usage` in both directions and for `compress-config` (both changed in 0.2.0), for
/// `chat-message` in both directions and for `request-config` (changed in 0.3.0; versions
/// before it use [`chat_message_conversions`]), and invokes this macro.
///
/// When a later version changes one of these records, move its conversion out of the macro into
/// each version module.
macro_rules! unchanged_conversions {
    () => {
        impl From<$crate::runtime::Completion> for wit_llm::Completion {
            fn from(c: $crate::runtime::Completion) -> Self {
                wit_llm::Completion {
                    message: (&c.message).into(),
                    usage: c.usage.map(Into::into),
                }
            }
        }

        impl From<wit_store::StoreStats> for $crate::runtime::StoreStats {
            fn from(s: wit_store::StoreStats) -> Self {
                $crate::runtime::StoreStats {
                    history_count: s.history_count,
                    current_count: s.current_count,
                    current_tokens: s.current_tokens,
                }
            }
        }

        impl From<wit_store::AddedMessage> for $crate::runtime::AddedMessage {
            fn from(a: wit_store::AddedMessage) -> Self {
                $crate::runtime::AddedMessage {
                    seq: a.seq,
                    tokens: a.tokens,
                }
            }
        }

        impl From<wit_format::RequestInfo> for $crate::runtime::RequestInfo {
            fn from(i: wit_format::RequestInfo) -> Self {
                $crate::runtime::RequestInfo {
                    endpoint_path: i.endpoint_path,
                    bytes: i.bytes,
                    messages: i.messages,
                }
            }
        }

        impl wit_types::Host for $crate::runtime::sandbox::StoreState {}

        impl wit_log::Host for $crate::runtime::sandbox::StoreState {
            fn log(&mut self, level: wit_log::Level, message: String) {
                use $crate::runtime::host_imports::LogLevel as L;
                let level = match level {
                    wit_log::Level::Trace => L::Trace,
                    wit_log::Level::Debug => L::Debug,
                    wit_log::Level::Info => L::Info,
                    wit_log::Level::Warn => L::Warn,
                    wit_log::Level::Error => L::Error,
                };
                $crate::runtime::host_imports::log(self, level, &message)
            }
        }

        impl wit_llm::Host for $crate::runtime::sandbox::StoreState {
            fn complete(
                &mut self,
                messages_file: String,
                max_output_tokens: u32,
            ) -> Result<wit_llm::Completion, wit_types::PluginError> {
                $crate::runtime::host_imports::complete(self, &messages_file, max_output_tokens)
                    .map(Into::into)
                    .map_err(wit_types::PluginError::Llm)
            }

            fn estimate_tokens(&mut self, text: String) -> u64 {
                ::ctxhost_format::estimate_tokens(&text)
            }
        }
    };
}
pub(crate) use unchanged_conversions;

/// The chat-message conversions of the versions before 0.3.0, whose record has neither
/// `is-error` nor `reasoning`: both are left out on the way to the component and empty on the
/// way back. A version module brings `wit_types` into scope and invokes this macro.
macro_rules! chat_message_conversions {
    () => {
        impl From<&::ctxhost_format::ChatMessage> for wit_types::ChatMessage {
            fn from(m: &::ctxhost_format::ChatMessage) -> Self {
                wit_types::ChatMessage {
                    role: m.role.clone(),
                    content: m.content.clone(),
                    tool_calls: m
                        .calls()
                        .iter()
                        .map(|c| wit_types::ToolCall {
                            id: c.id.clone(),
                            name: c.function.name.clone(),
                            arguments: c.function.arguments.clone(),
                        })
                        .collect(),
                    tool_call_id: m.tool_call_id.clone(),
                    tool_name: m.tool_name.clone(),
                }
            }
        }

        /// WIT `tool-calls: list<tool-call>` → `Option<Vec<ToolCall>>` (an empty list is `None`,
        /// so a message without calls serializes without `tool_calls`); `type` is `function`.
        impl From<wit_types::ChatMessage> for ::ctxhost_format::ChatMessage {
            fn from(m: wit_types::ChatMessage) -> Self {
                let calls: Vec<::ctxhost_format::ToolCall> = m
                    .tool_calls
                    .into_iter()
                    .map(|c| ::ctxhost_format::ToolCall::new(c.id, c.name, c.arguments))
                    .collect();
                ::ctxhost_format::ChatMessage {
                    role: m.role,
                    content: m.content,
                    tool_calls: if calls.is_empty() { None } else { Some(calls) },
                    tool_call_id: m.tool_call_id,
                    tool_name: m.tool_name,
                    is_error: false,
                    reasoning: Vec::new(),
                }
            }
        }
    };
}
pub(crate) use chat_message_conversions;

/// The strategy world's conversions and host imports (`planning`, `strategy`), unchanged from
/// 0.2.0 to 0.3.0 (0.1.0 has no strategies). A version module brings `wit_planning`,
/// `wit_strategy` and the host's planning types into scope and invokes this macro; when a later
/// version changes one of these, move its conversion into each version module.
macro_rules! strategy_world_conversions {
    () => {
        impl From<wit_planning::StepStatus> for StepStatus {
            fn from(s: wit_planning::StepStatus) -> Self {
                match s {
                    wit_planning::StepStatus::Pending => StepStatus::Pending,
                    wit_planning::StepStatus::InProgress => StepStatus::InProgress,
                    wit_planning::StepStatus::Done => StepStatus::Done,
                    wit_planning::StepStatus::Skipped => StepStatus::Skipped,
                }
            }
        }

        impl From<StepStatus> for wit_planning::StepStatus {
            fn from(s: StepStatus) -> Self {
                match s {
                    StepStatus::Pending => wit_planning::StepStatus::Pending,
                    StepStatus::InProgress => wit_planning::StepStatus::InProgress,
                    StepStatus::Done => wit_planning::StepStatus::Done,
                    StepStatus::Skipped => wit_planning::StepStatus::Skipped,
                }
            }
        }

        impl From<wit_planning::Plan> for Plan {
            fn from(p: wit_planning::Plan) -> Self {
                Plan {
                    goal: p.goal,
                    steps: p
                        .steps
                        .into_iter()
                        .map(|s| PlanStep {
                            id: s.id,
                            description: s.description,
                            status: s.status.into(),
                        })
                        .collect(),
                }
            }
        }

        impl From<Plan> for wit_planning::Plan {
            fn from(p: Plan) -> Self {
                wit_planning::Plan {
                    goal: p.goal,
                    steps: p
                        .steps
                        .into_iter()
                        .map(|s| wit_planning::PlanStep {
                            id: s.id,
                            description: s.description,
                            status: s.status.into(),
                        })
                        .collect(),
                }
            }
        }

        impl From<wit_planning::Entry> for PlanningEntry {
            fn from(e: wit_planning::Entry) -> Self {
                match e {
                    wit_planning::Entry::Progress(p) => PlanningEntry::Progress {
                        step_id: p.step_id,
                        status: p.status.into(),
                        note: p.note,
                    },
                    wit_planning::Entry::Reflection(r) => PlanningEntry::Reflection {
                        trigger: r.trigger,
                        text: r.text,
                    },
                    wit_planning::Entry::Verification(v) => PlanningEntry::Verification {
                        verdict: match v.verdict {
                            wit_planning::Verdict::Passed => Verdict::Passed,
                            wit_planning::Verdict::Failed => Verdict::Failed,
                            wit_planning::Verdict::Unclear => Verdict::Unclear,
                        },
                        text: v.text,
                    },
                }
            }
        }

        impl From<&StrategyConfig> for wit_strategy::StrategyConfig {
            fn from(c: &StrategyConfig) -> Self {
                wit_strategy::StrategyConfig {
                    max_steps: c.max_steps,
                    context_length: c.context_length,
                    max_output_tokens: c.max_output_tokens,
                    settings: c.settings.clone(),
                }
            }
        }

        impl From<&TaskState> for wit_strategy::TaskState {
            fn from(s: &TaskState) -> Self {
                wit_strategy::TaskState {
                    prompt: s.prompt.clone(),
                    steps_done: s.steps_done,
                    seq: s.seq,
                    context_file: s.context_file.clone(),
                    context_tokens: s.context_tokens,
                    tools_file: s.tools_file.clone(),
                }
            }
        }

        impl From<&ToolOutcome> for wit_strategy::ToolOutcome {
            fn from(o: &ToolOutcome) -> Self {
                wit_strategy::ToolOutcome {
                    call_id: o.call_id.clone(),
                    name: o.name.clone(),
                    success: o.success,
                    error: o.error.clone(),
                }
            }
        }

        impl From<wit_strategy::Decision> for Decision {
            fn from(d: wit_strategy::Decision) -> Self {
                match d {
                    wit_strategy::Decision::Proceed(m) => Decision::Proceed(m),
                    wit_strategy::Decision::Finish => Decision::Finish,
                    wit_strategy::Decision::Fail(r) => Decision::Fail(r),
                }
            }
        }

        /// The host side of the `planning` import: the instance's [`crate::runtime::PlanningImport`]
        /// ([`crate::runtime::host_imports`]).
        impl wit_planning::Host for crate::runtime::sandbox::StoreState {
            fn save_plan(
                &mut self,
                plan: wit_planning::Plan,
                note: Option<String>,
            ) -> Result<(), wit_types::PluginError> {
                crate::runtime::host_imports::planning(self, |p| p.save_plan(plan.into(), note))
                    .map_err(wit_types::PluginError::InvalidInput)
            }

            fn has_plan(&mut self) -> bool {
                crate::runtime::host_imports::planning(self, |p| Ok(p.has_plan())).unwrap_or(false)
            }

            fn get_latest_plan(&mut self) -> Option<wit_planning::Plan> {
                crate::runtime::host_imports::planning(self, |p| Ok(p.latest_plan()))
                    .ok()
                    .flatten()
                    .map(Into::into)
            }

            fn append_entry(
                &mut self,
                entry: wit_planning::Entry,
            ) -> Result<(), wit_types::PluginError> {
                crate::runtime::host_imports::planning(self, |p| p.append_entry(entry.into()))
                    .map_err(wit_types::PluginError::InvalidInput)
            }

            fn entries(&mut self) -> Vec<String> {
                crate::runtime::host_imports::planning(self, |p| Ok(p.entries()))
                    .unwrap_or_default()
            }
        }
    };
}
pub(crate) use strategy_world_conversions;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_map_by_semver() {
        assert_eq!(WitVersion::for_export("0.1.0"), Some(WitVersion::V0_1_0));
        assert_eq!(WitVersion::for_export("0.1.3"), Some(WitVersion::V0_1_0));
        assert_eq!(WitVersion::for_export("0.2.0"), Some(WitVersion::V0_2_0));
        assert_eq!(WitVersion::for_export("0.3.0"), Some(WitVersion::V0_3_0));
        assert_eq!(
            WitVersion::for_export("0.2.1-rc.1"),
            Some(WitVersion::V0_2_0)
        );
        for other in ["0.4.0", "1.0.0", "0.0.9", "", "0.2", "x.y.z"] {
            assert_eq!(WitVersion::for_export(other), None, "{other}");
        }
        assert_eq!(WitVersion::supported_list(), "0.1.0, 0.2.0, 0.3.0");
        assert_eq!(WitVersion::CURRENT.to_string(), "0.3.0");
    }
}
