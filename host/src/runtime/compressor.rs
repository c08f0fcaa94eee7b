//! [`Compressor`]: a `compressor-plugin` instance (WIT interface `ctxhost:plugin/compressor`,
//! WIT 1.0.0), which may ask the host's LLM for summaries through the `llm` import
//! (the [`super::LlmImport`] given to [`super::Runtime::compressor`]).

use super::error::RuntimeError;
use super::sandbox::{Sandbox, StoreState};
use super::types::{CompressConfig, CompressResult};
use super::wit::v1_0_0;

/// A pre-linked compressor component.
pub(crate) type Pre = v1_0_0::CompressorPluginPre<StoreState>;
type Bindings = v1_0_0::CompressorPlugin;

/// One compressor instance on one task directory. A trap, deadline or memory-limit error
/// leaves the instance unusable ([`RuntimeError::Poisoned`] afterwards).
pub struct Compressor {
    sandbox: Sandbox,
    bindings: Bindings,
}

impl Compressor {
    /// Instantiate `pre` in `sandbox`, which sees `task_dir`.
    pub(crate) fn instantiate(mut sandbox: Sandbox, pre: &Pre) -> Result<Self, RuntimeError> {
        let bindings = sandbox.call("instantiation", |s| pre.instantiate(s))?;
        Ok(Compressor { sandbox, bindings })
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
        let sandbox = &mut self.sandbox;
        let b = &self.bindings;
        let c = config.into();
        sandbox.call("should-compress", |s| {
            b.ctxhost_plugin_compressor()
                .call_should_compress(s, current_tokens, &c)
        })
    }

    /// `compress`: write a smaller context to a new file (current.jsonl is only read).
    pub fn compress(&mut self, config: &CompressConfig) -> Result<CompressResult, RuntimeError> {
        let sandbox = &mut self.sandbox;
        let b = &self.bindings;
        let c = config.into();
        let r = sandbox.call("compress", |s| {
            b.ctxhost_plugin_compressor().call_compress(s, &c)
        })?;
        sandbox.plugin_result("compress", r)
    }
}
