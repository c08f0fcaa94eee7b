//! [`Compressor`]: a `compressor-plugin` instance (WIT interface
//! `ctxhost:plugin/compressor@0.1.0`), which may ask the host's LLM for summaries through the
//! `llm` import (the [`super::LlmImport`] given to [`super::Runtime::compressor`]).

use super::bindings::compressor::CompressorPlugin;
use super::error::RuntimeError;
use super::sandbox::Sandbox;
use super::types::{CompressConfig, CompressResult};

/// One compressor instance on one task directory. A trap, deadline or memory-limit error
/// leaves the instance unusable ([`RuntimeError::Poisoned`] afterwards).
pub struct Compressor {
    sandbox: Sandbox,
    bindings: CompressorPlugin,
}

impl Compressor {
    pub(crate) fn new(sandbox: Sandbox, bindings: CompressorPlugin) -> Self {
        Compressor { sandbox, bindings }
    }

    /// The component's name (`builtin:NAME` or its path).
    pub fn component(&self) -> &str {
        self.sandbox.name()
    }

    /// The largest linear memory this instance has used so far (bytes).
    pub fn memory_peak_bytes(&self) -> usize {
        self.sandbox.memory_peak_bytes()
    }

    /// `should-compress`: whether `current_tokens` calls for a compression under `config`.
    pub fn should_compress(
        &mut self,
        current_tokens: u64,
        config: &CompressConfig,
    ) -> Result<bool, RuntimeError> {
        let b = &self.bindings;
        let c = config.into();
        self.sandbox.call("should-compress", |s| {
            b.ctxhost_plugin_compressor()
                .call_should_compress(s, current_tokens, &c)
        })
    }

    /// `compress`: write a smaller context to a new file (current.jsonl is only read).
    pub fn compress(&mut self, config: &CompressConfig) -> Result<CompressResult, RuntimeError> {
        let b = &self.bindings;
        let c = config.into();
        let r = self.sandbox.call("compress", |s| {
            b.ctxhost_plugin_compressor().call_compress(s, &c)
        })?;
        self.sandbox.plugin_result("compress", r)
    }
}
