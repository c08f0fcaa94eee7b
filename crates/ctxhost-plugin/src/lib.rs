//! # ctxhost-plugin: write ctxhost plugin components in Rust
//!
//! A ctxhost plugin is a WebAssembly component (`wasm32-wasip2`) implementing one world of the
//! WIT package `ctxhost:plugin@1.0.0` (vendored in this crate as `wit/plugin.wit`). This crate
//! gives a plugin crate everything it needs:
//!
//! - the bindings of every world, one module each, with an export macro:
//!   [`compressor`] (world `compressor-plugin`, [`export_compressor!`]),
//!   [`message_store`] (world `message-store-plugin`, [`export_message_store!`]),
//!   [`request_format`] (world `request-format-plugin`, [`export_request_format!`]),
//!   [`strategy`] (world `strategy-plugin`, [`export_strategy!`]);
//! - the shared WIT types ([`types`]: `ChatMessage`, `PluginError`, `Usage`, ...) and the host
//!   imports: [`log`], [`llm`] (for compressors and strategies only), [`history`] (search and
//!   read the task's whole history, as the agent's `history_search`/`history_read` tools do;
//!   compressors and strategies only) and [`planning`] (the task's planning history, for
//!   strategies only). A component that calls an import its world does not have does not
//!   load: the host names the import;
//! - helpers: JSONL reading and writing ([`jsonl`]), the token estimate ([`tokens`]), the
//!   compression rules of the builtins (threshold, the tool-group-aware cut, the summary
//!   message format, summary ids: [`compress`]), a guard that removes temporaries
//!   ([`Cleanup`]), the provider-independent part of a request format (streaming the messages
//!   file into the request body, reading the response, usage: [`request`]) and fast WASI
//!   writes ([`wasi_output`]). The builtin components are built on this crate and run exactly
//!   this code (with `ctxhost-format`, the host's own formats, re-exported as [`format`]).
//!
//! Natively (`cargo test` on the host), [`llm`], [`log`] and [`planning`] are served by
//! [`testing`]: a mock LLM with canned replies that records requests, an in-memory planning
//! history and a temporary task directory, so a plugin's logic is unit-tested without a wasm
//! build.
//!
//! Every path is relative to the task directory, which the host preopens as `.`; see
//! docs/PLUGINS.md of the ctxhost repository for every function, the files it reads and
//! writes, the limits and the errors.
//!
//! ```ignore
//! use ctxhost_plugin::compressor::{CompressConfig, CompressResult, Guest};
//! use ctxhost_plugin::types::PluginError;
//!
//! struct Mine;
//! impl Guest for Mine {
//!     fn should_compress(tokens: u64, c: CompressConfig) -> bool {
//!         ctxhost_plugin::compress::over_threshold(tokens, c.context_length, c.threshold)
//!     }
//!     fn compress(c: CompressConfig) -> Result<CompressResult, PluginError> { todo!() }
//! }
//! ctxhost_plugin::export_compressor!(Mine);
//! ```

pub use ctxhost_format as format;

/// The WIT version this crate's bindings implement (`ctxhost:plugin@WIT_VERSION`).
pub const WIT_VERSION: &str = "1.0.0";

/// The vendored contract, `wit/plugin.wit` (for tools that write it out, e.g. for
/// componentize-py).
pub const WIT: &str = include_str!("../wit/plugin.wit");

#[allow(missing_docs, clippy::all)]
mod imports_bindings {
    wit_bindgen::generate!({
        path: "wit",
        inline: "package ctxhost:plugin-sdk;
                 world imports {
                     import ctxhost:plugin/types@1.0.0;
                     import ctxhost:plugin/log@1.0.0;
                     import ctxhost:plugin/llm@1.0.0;
                     import ctxhost:plugin/planning@1.0.0;
                     import ctxhost:plugin/history@1.0.0;
                 }",
        world: "ctxhost:plugin-sdk/imports",
        generate_all,
        type_section_suffix: "ctxhost-plugin-sdk-imports",
    });
}

/// The host's `history` import: search and read the task's history. Natively
/// (`cargo test`) it has no mock yet: a call panics.
pub use imports_bindings::ctxhost::plugin::history;
pub use imports_bindings::ctxhost::plugin::types;
#[cfg(target_arch = "wasm32")]
pub use imports_bindings::ctxhost::plugin::{llm, log, planning};

/// The host's `llm` import; natively (`cargo test`), the mock of [`testing`].
#[cfg(not(target_arch = "wasm32"))]
pub mod llm {
    pub use crate::imports_bindings::ctxhost::plugin::llm::*;

    /// `llm.complete`: natively, the next reply of the [`crate::testing::MockLlm`] of the
    /// [`crate::testing::TaskDir::run`] in progress (a panic outside one).
    pub fn complete(
        messages_file: &str,
        max_output_tokens: u32,
    ) -> Result<Completion, crate::types::PluginError> {
        crate::testing::llm_complete(messages_file, max_output_tokens)
    }

    /// `llm.estimate-tokens`: the host's estimate ([`crate::tokens::estimate_tokens`]).
    pub fn estimate_tokens(text: &str) -> u64 {
        crate::tokens::estimate_tokens(text)
    }
}

/// The host's `log` import; natively (`cargo test`), stderr and the [`testing::MockLlm`]'s
/// `logs`.
#[cfg(not(target_arch = "wasm32"))]
pub mod log {
    pub use crate::imports_bindings::ctxhost::plugin::log::*;

    /// `log.log`: natively, printed to stderr and recorded by the mock of the run in progress.
    pub fn log(level: Level, message: &str) {
        crate::testing::log(level, message)
    }
}

/// The host's `planning` import; natively (`cargo test`), an in-memory planning history kept
/// by the [`testing::MockLlm`] of the run in progress.
#[cfg(not(target_arch = "wasm32"))]
pub mod planning {
    pub use crate::imports_bindings::ctxhost::plugin::planning::*;
    pub use crate::testing::planning::{
        append_entry, entries, get_latest_plan, has_plan, save_plan,
    };
}

/// The world `compressor-plugin`: implement [`compressor::Guest`] and call
/// [`export_compressor!`].
#[allow(missing_docs, clippy::all)]
pub mod compressor {
    wit_bindgen::generate!({
        path: "wit",
        world: "compressor-plugin",
        with: {
            "ctxhost:plugin/types@1.0.0": crate::types,
            "ctxhost:plugin/log@1.0.0": crate::log,
            "ctxhost:plugin/llm@1.0.0": crate::llm,
            "ctxhost:plugin/history@1.0.0": crate::history,
        },
        pub_export_macro: true,
        export_macro_name: "_export_compressor",
        default_bindings_module: "$crate::compressor",
        type_section_suffix: "ctxhost-plugin-sdk-compressor",
    });
    pub use self::exports::ctxhost::plugin::compressor::*;
}

/// The world `message-store-plugin`: implement [`message_store::Guest`] and call
/// [`export_message_store!`].
#[allow(missing_docs, clippy::all)]
pub mod message_store {
    wit_bindgen::generate!({
        path: "wit",
        world: "message-store-plugin",
        with: {
            "ctxhost:plugin/types@1.0.0": crate::types,
            "ctxhost:plugin/log@1.0.0": crate::log,
        },
        pub_export_macro: true,
        export_macro_name: "_export_message_store",
        default_bindings_module: "$crate::message_store",
        type_section_suffix: "ctxhost-plugin-sdk-message-store",
    });
    pub use self::exports::ctxhost::plugin::message_store::*;
}

/// The world `request-format-plugin`: implement [`request_format::Guest`] and call
/// [`export_request_format!`].
#[allow(missing_docs, clippy::all)]
pub mod request_format {
    wit_bindgen::generate!({
        path: "wit",
        world: "request-format-plugin",
        with: {
            "ctxhost:plugin/types@1.0.0": crate::types,
            "ctxhost:plugin/log@1.0.0": crate::log,
        },
        pub_export_macro: true,
        export_macro_name: "_export_request_format",
        default_bindings_module: "$crate::request_format",
        type_section_suffix: "ctxhost-plugin-sdk-request-format",
    });
    pub use self::exports::ctxhost::plugin::request_format::*;
}

/// The world `strategy-plugin` (an agent strategy): implement [`strategy::Guest`] and call
/// [`export_strategy!`]. Its hooks may call [`llm`] (at most 4 side calls per hook),
/// [`planning`] and [`history`]; a strategy's state is its task directory (a hook may be asked again after a
/// pause or crash), see docs/PLUGINS.md.
#[allow(missing_docs, clippy::all)]
pub mod strategy {
    wit_bindgen::generate!({
        path: "wit",
        world: "strategy-plugin",
        with: {
            "ctxhost:plugin/types@1.0.0": crate::types,
            "ctxhost:plugin/log@1.0.0": crate::log,
            "ctxhost:plugin/llm@1.0.0": crate::llm,
            "ctxhost:plugin/planning@1.0.0": crate::planning,
            "ctxhost:plugin/history@1.0.0": crate::history,
        },
        pub_export_macro: true,
        export_macro_name: "_export_strategy",
        default_bindings_module: "$crate::strategy",
        type_section_suffix: "ctxhost-plugin-sdk-strategy",
    });
    pub use self::exports::ctxhost::plugin::strategy::*;
}

/// Export `$ty` (which implements [`compressor::Guest`]) as this component's
/// `ctxhost:plugin/compressor@1.0.0`. Use once per crate.
#[macro_export]
macro_rules! export_compressor {
    ($ty:ident) => {
        $crate::compressor::_export_compressor!($ty with_types_in $crate::compressor);
    };
}

/// Export `$ty` (which implements [`message_store::Guest`]) as this component's
/// `ctxhost:plugin/message-store@1.0.0`. Use once per crate.
#[macro_export]
macro_rules! export_message_store {
    ($ty:ident) => {
        $crate::message_store::_export_message_store!($ty with_types_in $crate::message_store);
    };
}

/// Export `$ty` (which implements [`request_format::Guest`]) as this component's
/// `ctxhost:plugin/request-format@1.0.0`. Use once per crate.
#[macro_export]
macro_rules! export_request_format {
    ($ty:ident) => {
        $crate::request_format::_export_request_format!($ty with_types_in $crate::request_format);
    };
}

/// Export `$ty` (which implements [`strategy::Guest`]) as this component's
/// `ctxhost:plugin/strategy@1.0.0`. Use once per crate.
#[macro_export]
macro_rules! export_strategy {
    ($ty:ident) => {
        $crate::strategy::_export_strategy!($ty with_types_in $crate::strategy);
    };
}

mod cleanup;
pub mod compress;
pub mod jsonl;
pub mod logging;
pub mod request;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;
pub mod tokens;
pub mod wasi_output;

pub use cleanup::Cleanup;
pub use format::{ChatMessage, FunctionCall, SummaryLine, ToolCall};
