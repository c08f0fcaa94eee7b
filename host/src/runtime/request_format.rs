//! [`RequestFormat`]: a `request-format-plugin` instance (WIT interface
//! `ctxhost:plugin/request-format@0.1.0`) turning `current.jsonl` into a provider request body
//! and a provider response body into an assistant message.

use super::bindings::request_format::RequestFormatPlugin;
use super::error::RuntimeError;
use super::sandbox::Sandbox;
use super::types::{Reply, RequestConfig, RequestInfo};

/// One request format instance on one task directory. A trap, deadline or memory-limit error
/// leaves the instance unusable ([`RuntimeError::Poisoned`] afterwards).
pub struct RequestFormat {
    sandbox: Sandbox,
    bindings: RequestFormatPlugin,
}

impl RequestFormat {
    pub(crate) fn new(sandbox: Sandbox, bindings: RequestFormatPlugin) -> Self {
        RequestFormat { sandbox, bindings }
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
        let b = &self.bindings;
        let c = config.into();
        let r = self.sandbox.call("write-request", |s| {
            b.ctxhost_plugin_request_format().call_write_request(s, &c)
        })?;
        self.sandbox.plugin_result("write-request", r)
    }

    /// `read-response`: parse the provider's response body in `response_file`.
    pub fn read_response(&mut self, response_file: &str) -> Result<Reply, RuntimeError> {
        let b = &self.bindings;
        let r = self.sandbox.call("read-response", |s| {
            b.ctxhost_plugin_request_format()
                .call_read_response(s, response_file)
        })?;
        self.sandbox.plugin_result("read-response", r)
    }
}
