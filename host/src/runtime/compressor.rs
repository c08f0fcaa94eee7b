//! [`Compressor`]: a `compressor-plugin` instance (WIT interface `ctxhost:plugin/compressor`,
//! any supported version), which may ask the host's LLM for summaries through the `llm` import
//! (the [`super::LlmImport`] given to [`super::Runtime::compressor`]).

use std::path::PathBuf;

use super::error::RuntimeError;
use super::sandbox::{Sandbox, StoreState};
use super::types::{CompressConfig, CompressResult};
use super::wit::{Versioned, dispatch, v0_1_0, v0_2_0, v0_3_0};

/// A pre-linked compressor component of either WIT version.
pub(crate) type Pre = Versioned<
    v0_1_0::CompressorPluginPre<StoreState>,
    v0_2_0::CompressorPluginPre<StoreState>,
    v0_3_0::CompressorPluginPre<StoreState>,
>;
type Bindings =
    Versioned<v0_1_0::CompressorPlugin, v0_2_0::CompressorPlugin, v0_3_0::CompressorPlugin>;

/// One compressor instance on one task directory. A trap, deadline or memory-limit error
/// leaves the instance unusable ([`RuntimeError::Poisoned`] afterwards).
pub struct Compressor {
    sandbox: Sandbox,
    bindings: Bindings,
    /// The task directory the component sees (the 0.1.0 shim reads summaries.jsonl there).
    task_dir: PathBuf,
}

impl Compressor {
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
        Ok(Compressor {
            sandbox,
            bindings,
            task_dir,
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

    /// `should-compress`: whether `current_tokens` calls for a compression under `config`.
    pub fn should_compress(
        &mut self,
        current_tokens: u64,
        config: &CompressConfig,
    ) -> Result<bool, RuntimeError> {
        let sandbox = &mut self.sandbox;
        dispatch!(&self.bindings, b => {
            let c = config.into();
            sandbox.call("should-compress", |s| {
                b.ctxhost_plugin_compressor()
                    .call_should_compress(s, current_tokens, &c)
            })
        })
    }

    /// `compress`: write a smaller context to a new file (current.jsonl is only read). A 0.1.0
    /// component's string summary id becomes an integer ([`v0_1_0::compress_result`]).
    pub fn compress(&mut self, config: &CompressConfig) -> Result<CompressResult, RuntimeError> {
        let sandbox = &mut self.sandbox;
        match &self.bindings {
            Versioned::V0_1_0(b) => {
                let c = config.into();
                let r = sandbox.call("compress", |s| {
                    b.ctxhost_plugin_compressor().call_compress(s, &c)
                })?;
                let r: v0_1_0::compressor::exports::ctxhost::plugin::compressor::CompressResult =
                    sandbox.plugin_result("compress", r)?;
                v0_1_0::compress_result(r, &self.task_dir).map_err(|reason| RuntimeError::Host {
                    component: sandbox.name().to_string(),
                    function: "compress".to_string(),
                    // It quotes the component's own summary id.
                    reason: crate::untrusted::text(&reason, crate::untrusted::MAX_ERROR_BYTES)
                        .into_owned(),
                })
            }
            Versioned::V0_2_0(b) => {
                let c = config.into();
                let r = sandbox.call("compress", |s| {
                    b.ctxhost_plugin_compressor().call_compress(s, &c)
                })?;
                sandbox.plugin_result("compress", r)
            }
            Versioned::V0_3_0(b) => {
                let c = config.into();
                let r = sandbox.call("compress", |s| {
                    b.ctxhost_plugin_compressor().call_compress(s, &c)
                })?;
                sandbox.plugin_result("compress", r)
            }
        }
    }
}
