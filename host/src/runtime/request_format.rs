//! [`RequestFormat`]: a `request-format-plugin` instance (WIT interface
//! `ctxhost:plugin/request-format`, any supported version) turning `current.jsonl` into a
//! provider request body and a provider response body into an assistant message.

use super::error::RuntimeError;
use super::sandbox::{Sandbox, StoreState};
use super::types::{Reply, RequestConfig, RequestInfo};
use super::wit::{Versioned, dispatch, v0_1_0, v0_2_0, v0_3_0};

/// A pre-linked request format component of either WIT version.
pub(crate) type Pre = Versioned<
    v0_1_0::RequestFormatPluginPre<StoreState>,
    v0_2_0::RequestFormatPluginPre<StoreState>,
    v0_3_0::RequestFormatPluginPre<StoreState>,
>;
type Bindings = Versioned<
    v0_1_0::RequestFormatPlugin,
    v0_2_0::RequestFormatPlugin,
    v0_3_0::RequestFormatPlugin,
>;

/// One request format instance on one task directory. A trap, deadline or memory-limit error
/// leaves the instance unusable ([`RuntimeError::Poisoned`] afterwards).
pub struct RequestFormat {
    sandbox: Sandbox,
    bindings: Bindings,
}

impl RequestFormat {
    /// Instantiate `pre` in `sandbox`.
    pub(crate) fn instantiate(mut sandbox: Sandbox, pre: &Pre) -> Result<Self, RuntimeError> {
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
        Ok(RequestFormat { sandbox, bindings })
    }

    /// The component's name (`builtin:NAME` or its path).
    pub fn component(&self) -> &str {
        self.sandbox.name()
    }

    /// The largest linear memory this instance has used so far (bytes).
    pub fn memory_peak_bytes(&self) -> usize {
        self.sandbox.memory_peak_bytes()
    }

    /// `write-request`: stream `config.messages_file` into `config.request_file`.
    pub fn write_request(&mut self, config: &RequestConfig) -> Result<RequestInfo, RuntimeError> {
        let sandbox = &mut self.sandbox;
        dispatch!(&self.bindings, b => {
            let c = config.into();
            let r = sandbox.call("write-request", |s| {
                b.ctxhost_plugin_request_format().call_write_request(s, &c)
            })?;
            sandbox.plugin_result("write-request", r)
        })
    }

    /// Whether the component can read a streamed reply (WIT 0.3.0 on) and writes the request
    /// for one when asked (not `builtin:prompted-tools`, which always writes `"stream": false`:
    /// [`super::builtin::writes_whole_body_requests`]): the host asks for a stream only then.
    pub fn reads_streams(&self) -> bool {
        matches!(self.bindings, Versioned::V0_3_0(_))
            && !super::builtin::writes_whole_body_requests(self.component())
    }

    /// `read-response`: parse the provider's response in `response_file`; `streamed` when the
    /// request asked for a stream (the file is the raw stream). A 0.1.0 component's usage has
    /// 0 prompt-cache tokens; components before 0.3.0 have no reasoning tokens and cannot read
    /// a stream (`streamed` is refused for them: [`RequestFormat::reads_streams`]).
    pub fn read_response(
        &mut self,
        response_file: &str,
        streamed: bool,
    ) -> Result<Reply, RuntimeError> {
        if streamed && !self.reads_streams() {
            return Err(RuntimeError::Host {
                component: self.sandbox.name().to_string(),
                function: "read-response".to_string(),
                reason: "a streamed reply needs a request format built against WIT 0.3.0"
                    .to_string(),
            });
        }
        let sandbox = &mut self.sandbox;
        let reply: Reply = match &self.bindings {
            Versioned::V0_1_0(b) => {
                let r = sandbox.call("read-response", |s| {
                    b.ctxhost_plugin_request_format()
                        .call_read_response(s, response_file)
                })?;
                sandbox.plugin_result("read-response", r)
            }
            Versioned::V0_2_0(b) => {
                let r = sandbox.call("read-response", |s| {
                    b.ctxhost_plugin_request_format()
                        .call_read_response(s, response_file)
                })?;
                sandbox.plugin_result("read-response", r)
            }
            Versioned::V0_3_0(b) => {
                let r = sandbox.call("read-response", |s| {
                    b.ctxhost_plugin_request_format()
                        .call_read_response(s, response_file, streamed)
                })?;
                sandbox.plugin_result("read-response", r)
            }
        }?;
        let mut reply = bounded_usage(reply, self.sandbox.name());
        // The provider's text: a name, escaped and bounded; an empty one is none.
        reply.model = reply
            .model
            .filter(|m| !m.trim().is_empty())
            .map(|m| crate::untrusted::name(&m).into_owned());
        Ok(reply)
    }
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
        let u = bounded_usage(reply, "test").usage.unwrap();
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
}
