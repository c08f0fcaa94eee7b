//! [`RequestFormat`]: a `request-format-plugin` instance (WIT interface
//! `ctxhost:plugin/request-format`, WIT 1.0.0) turning `current.jsonl` into a
//! provider request body and a provider response body into an assistant message.

use super::error::RuntimeError;
use super::sandbox::{Sandbox, StoreState};
use super::types::{Reply, RequestConfig, RequestInfo};
use super::wit::v1_0_0;

/// A pre-linked request format component.
pub(crate) type Pre = v1_0_0::RequestFormatPluginPre<StoreState>;
type Bindings = v1_0_0::RequestFormatPlugin;

/// One request format instance on one task directory. A trap, deadline or memory-limit error
/// leaves the instance unusable ([`RuntimeError::Poisoned`] afterwards).
pub struct RequestFormat {
    sandbox: Sandbox,
    bindings: Bindings,
    /// Most bytes of reasoning items one reply may carry ([`RequestFormat::set_max_reply_bytes`]).
    max_reply_bytes: u64,
}

/// Most bytes of reasoning items one reply may carry unless the caller says otherwise: the
/// default `llm.max_response_mib`.
pub const DEFAULT_MAX_REPLY_BYTES: u64 = 16 * 1024 * 1024;

/// Longest `provider` or `kind` of a reasoning item, bytes.
pub const MAX_REASONING_NAME_BYTES: usize = 64;

impl RequestFormat {
    /// Instantiate `pre` in `sandbox`.
    pub(crate) fn instantiate(mut sandbox: Sandbox, pre: &Pre) -> Result<Self, RuntimeError> {
        let bindings = sandbox.call("instantiation", |s| pre.instantiate(s))?;
        Ok(RequestFormat {
            sandbox,
            bindings,
            max_reply_bytes: DEFAULT_MAX_REPLY_BYTES,
        })
    }

    /// The component's name (`builtin:NAME` or its path).
    pub fn component(&self) -> &str {
        self.sandbox.name()
    }

    /// The task directory's byte budget the component is held to (`None`: none): a file it
    /// wrote larger than that is refused before anyone reads it.
    pub fn task_dir_bytes(&self) -> Option<u64> {
        self.sandbox.task_dir_bytes()
    }

    /// Bound the reasoning items of a reply read from now on to `bytes` in all (the
    /// provider's response bound, `llm.max_response_mib`: what the reply came from).
    pub fn set_max_reply_bytes(&mut self, bytes: u64) {
        self.max_reply_bytes = bytes;
    }

    /// The largest linear memory this instance has used so far (bytes).
    pub fn memory_peak_bytes(&self) -> usize {
        self.sandbox.memory_peak_bytes()
    }

    /// `write-request`: stream `config.messages_file` into `config.request_file`.
    pub fn write_request(&mut self, config: &RequestConfig) -> Result<RequestInfo, RuntimeError> {
        let sandbox = &mut self.sandbox;
        let b = &self.bindings;
        let c = config.into();
        let r = sandbox.call("write-request", |s| {
            b.ctxhost_plugin_request_format().call_write_request(s, &c)
        })?;
        sandbox.plugin_result("write-request", r)
    }

    /// Whether the component writes the request for a streamed reply when asked (not
    /// `builtin:prompted-tools`, which always writes `"stream": false`:
    /// [`super::builtin::writes_whole_body_requests`]): the host asks for a stream only then.
    pub fn reads_streams(&self) -> bool {
        !super::builtin::writes_whole_body_requests(self.component())
    }

    /// `read-response`: parse the provider's response in `response_file`; `streamed` when the
    /// request asked for a stream (the file is the raw stream).
    pub fn read_response(
        &mut self,
        response_file: &str,
        streamed: bool,
    ) -> Result<Reply, RuntimeError> {
        let sandbox = &mut self.sandbox;
        let b = &self.bindings;
        let r = sandbox.call("read-response", |s| {
            b.ctxhost_plugin_request_format()
                .call_read_response(s, response_file, streamed)
        })?;
        let reply: Reply = sandbox.plugin_result("read-response", r)?;
        checked_reply(reply, self.sandbox.name(), self.max_reply_bytes).map_err(|reason| {
            RuntimeError::Host {
                component: self.sandbox.name().to_string(),
                function: "read-response".to_string(),
                reason,
            }
        })
    }
}

/// The one place the strings of a reply a request format returns are made safe (the text
/// itself is the model's answer, stored as given): `model` and `finish_reason` are names,
/// escaped and bounded ([`crate::untrusted::name`]; an empty one is none); the usage is
/// bounded ([`bounded_usage`]); every reasoning item's `provider` and `kind` must be a name
/// (ASCII letters, digits, `_`, `-`, `.`; 1 to [`MAX_REASONING_NAME_BYTES`] bytes) and its
/// `data` JSON text without control characters, and all of them at most `max_bytes` bytes.
/// Errors: what is wrong, for the format's error.
fn checked_reply(reply: Reply, component: &str, max_bytes: u64) -> Result<Reply, String> {
    let mut reply = bounded_usage(reply, component);
    let name = |s: Option<String>| {
        s.filter(|m| !m.trim().is_empty())
            .map(|m| crate::untrusted::name(&m).into_owned())
    };
    reply.model = name(reply.model);
    reply.finish_reason = name(reply.finish_reason);
    let mut total = 0u64;
    for (i, item) in reply.message.reasoning.iter().enumerate() {
        total =
            total.saturating_add((item.provider.len() + item.kind.len() + item.data.len()) as u64);
        if total > max_bytes {
            return Err(format!(
                "its reasoning items hold more than {max_bytes} bytes (the bound of a reply, llm.max_response_mib); refused"
            ));
        }
        for (field, value) in [("provider", &item.provider), ("kind", &item.kind)] {
            let plain = !value.is_empty()
                && value.len() <= MAX_REASONING_NAME_BYTES
                && value
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
            if !plain {
                return Err(format!(
                    "reasoning item {i}: `{field}` `{}` is not a name (ASCII letters, digits, `_`, `-`, `.`; at most {MAX_REASONING_NAME_BYTES} bytes); refused",
                    crate::untrusted::name(value)
                ));
            }
        }
        if let Some(c) = item.data.chars().find(|c| c.is_control()) {
            return Err(format!(
                "reasoning item {i}: `data` holds the control character {:?}; refused (it must be the provider's JSON text)",
                c
            ));
        }
        if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(&item.data) {
            return Err(format!(
                "reasoning item {i}: `data` is not JSON text ({e}); refused"
            ));
        }
    }
    Ok(reply)
}

/// `reply` with its usage bounded ([`super::Usage::bounded`]); a cut count is logged, naming
/// the request format `component`.
fn bounded_usage(mut reply: Reply, component: &str) -> Reply {
    if let Some(u) = reply.usage {
        let (bounded, cut) = u.bounded();
        if !cut.is_empty() {
            tracing::warn!(
                component,
                ?u,
                "the provider's usage reports more than {} tokens in {} for one call; counted as {} (a provider's or request format's error)",
                super::MAX_USAGE_TOKENS,
                cut.join(", "),
                super::MAX_USAGE_TOKENS
            );
        }
        reply.usage = Some(bounded);
    }
    reply
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{MAX_USAGE_TOKENS, Usage};
    use ctxhost_format::ChatMessage;

    #[test]
    fn a_usage_past_the_bound_is_cut_to_it() {
        let huge = Usage {
            prompt_tokens: u64::MAX,
            completion_tokens: 7,
            total_tokens: u64::MAX,
            cache_read_tokens: 0,
            cache_creation_tokens: MAX_USAGE_TOKENS + 1,
            reasoning_tokens: 3,
        };
        let reply = Reply {
            message: ChatMessage::text("assistant", "hi"),
            usage: Some(huge),
            finish_reason: None,
            model: None,
            content_file: None,
        };
        let u = bounded_usage(reply.clone(), "test").usage.unwrap();
        assert_eq!(
            u,
            Usage {
                prompt_tokens: MAX_USAGE_TOKENS,
                completion_tokens: 7,
                total_tokens: MAX_USAGE_TOKENS,
                cache_read_tokens: 0,
                cache_creation_tokens: MAX_USAGE_TOKENS,
                reasoning_tokens: 3,
            }
        );
        assert_eq!(
            huge.bounded().1,
            ["prompt_tokens", "total_tokens", "cache_creation_tokens"]
        );
    }

    fn reply_with(finish: &str, reasoning: Vec<ctxhost_format::ReasoningItem>) -> Reply {
        let mut message = ChatMessage::text("assistant", "hi");
        message.reasoning = reasoning;
        Reply {
            message,
            usage: None,
            finish_reason: Some(finish.to_string()),
            model: Some("m\u{1b}[2J".into()),
            content_file: None,
        }
    }

    fn item(provider: &str, kind: &str, data: &str) -> ctxhost_format::ReasoningItem {
        ctxhost_format::ReasoningItem {
            provider: provider.into(),
            kind: kind.into(),
            data: data.into(),
        }
    }

    /// Issue 38 item 9: `finish-reason` reached OTLP spans raw (1 MB, escape codes, CR/LF,
    /// BEL); reasoning items with escape bytes were stored; 100 MB of them were accepted.
    #[test]
    fn a_replys_strings_are_bounded_escaped_and_its_reasoning_checked() {
        let raw = "\u{1b}[31mstop\r\n\u{7}".repeat(100_000);
        let r = checked_reply(reply_with(&raw, vec![]), "test", 1 << 20).unwrap();
        let finish = r.finish_reason.unwrap();
        assert!(finish.len() < 400, "{}", finish.len());
        assert!(!finish.chars().any(char::is_control), "{finish:?}");
        assert!(
            finish.starts_with("\\u{1b}[31mstop\\r\\n\\u{7}"),
            "{finish}"
        );
        assert_eq!(r.model.as_deref(), Some("m\\u{1b}[2J"));
        assert_eq!(
            checked_reply(reply_with(" ", vec![]), "test", 1)
                .unwrap()
                .finish_reason,
            None
        );
        let good = item(
            "anthropic",
            "thinking",
            r#"{"type":"thinking","thinking":"a\nb"}"#,
        );
        let ok = checked_reply(reply_with("stop", vec![good.clone()]), "test", 1 << 20).unwrap();
        assert_eq!(ok.message.reasoning, vec![good.clone()]);
        for (bad, why) in [
            (item("openai\u{1b}[2J", "summary", "{}"), "`provider`"),
            (item("openai", "", "{}"), "`kind`"),
            (item("openai", "summary\u{7}", "{}"), "`kind`"),
            (
                item("openai", "summary", "{\"a\":1}\u{1b}[31m"),
                "control character",
            ),
            (item("openai", "summary", "not json"), "not JSON text"),
        ] {
            let e = checked_reply(reply_with("stop", vec![good.clone(), bad]), "test", 1 << 20)
                .unwrap_err();
            assert!(
                e.starts_with("reasoning item 1: ") && e.contains(why),
                "{e}"
            );
            assert!(!e.contains('\u{1b}') && !e.contains('\u{7}'), "{e:?}");
        }
        let big = item("openai", "summary", &format!("\"{}\"", "x".repeat(4096)));
        let e =
            checked_reply(reply_with("stop", vec![big.clone(), big]), "test", 8000).unwrap_err();
        assert!(e.contains("more than 8000 bytes"), "{e}");
    }
}
