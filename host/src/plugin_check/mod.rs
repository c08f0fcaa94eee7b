//! `ctxhost plugin check PATH|builtin:NAME [--json]`: the conformance suite a plugin component
//! must pass before an operator points config at it.
//!
//! The component's world and WIT version are read from its exports; then the suite of that
//! kind runs against real instances in a scratch task directory under the system temp dir
//! (removed afterwards):
//! - message store: open on an empty directory, appends (CJK text, a tool call and its result),
//!   counts, the exact line formats of messages.jsonl / current.jsonl (`ctxhost_format`),
//!   token counts, `recreate-current-context` (identity, shorter, malformed source),
//!   `record-summary`, reopening in a new instance, and a large history (20,000 messages,
//!   ~20 MB per file) with the instance's linear memory staying under 16 MiB, which catches a
//!   store that reads whole files;
//! - request format: a golden current.jsonl (unicode, escapes, blank lines, a tool call) and a
//!   model name with a quote → request.json that is JSON with the model and every message;
//!   malformed input; sample responses for the format's endpoint (`/v1/chat/completions`:
//!   OpenAI bodies, `/api/chat`: Ollama bodies, `/v1/messages`: Anthropic bodies), an HTML error
//!   page, a provider error object; a request in Anthropic's shape (top-level `system`, content
//!   blocks) is read as the equivalent list of messages;
//! - compressor: `should-compress` around its threshold; `compress` of an over-threshold
//!   context with a fake LLM returning a fixed summary (system prompt first, tool pairs intact,
//!   fewer tokens, recent messages kept, current.jsonl untouched, temporaries removed), and with
//!   a failing LLM (error, context untouched);
//! - strategy: each hook on a scratch task through the agent loop's own driver (decisions the
//!   host accepts, planning entries committed with them), a new instance continuing from the
//!   files, the planning history reading back, and `start` with a failing LLM ([`strategy`]).
//!
//! One module per WIT interface ([`message_store`], [`request_format`], [`compressor`],
//! [`strategy`]), the
//! shared [`harness`], and the [`report`]. Report: the world, the WIT version, and each check
//! with pass/fail and the reason. `--json`
//! prints `{"component","world","version","passed","checks":[{"name","passed","detail"}]}`.

/// `Err(format!(..))` unless `cond`.
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

pub mod compressor;
pub mod harness;
pub mod message_store;
pub mod report;
pub mod request_format;
pub mod strategy;

use crate::runtime::{PluginKind, Runtime, RuntimeLimits, WitVersion};
use harness::{Scratch, Suite};
pub use report::{Check, CheckReport};

/// Tunables of the suites.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Messages appended in the message store's large-history check (default 20,000).
    pub large_messages: u64,
    /// Bytes of content per message in that check (default 1,000).
    pub large_message_bytes: usize,
    /// Largest linear memory a message store may use in that check (default 16 MiB).
    pub memory_budget_bytes: usize,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            large_messages: 20_000,
            large_message_bytes: 1_000,
            memory_budget_bytes: 16 * 1024 * 1024,
        }
    }
}

/// `ctxhost plugin check`: check `path_or_builtin` (a `.wasm` path or `builtin:NAME`) with
/// default limits and options, print the report to stdout (JSON with `json`), and return
/// whether it passed (the caller exits 0 / 1).
///
/// Errors only when the check cannot run at all (no temp directory, engine setup failed); a
/// component that cannot be loaded is a failed report, not an error.
pub fn run(path_or_builtin: &str, json: bool) -> anyhow::Result<bool> {
    let scratch = Scratch::new("check-cache")?;
    let runtime = Runtime::new(scratch.path(), RuntimeLimits::default())?;
    let report = check(&runtime, path_or_builtin, &CheckOptions::default());
    if json {
        crate::cli::out::line(format_args!(
            "{}",
            serde_json::to_string_pretty(&report.to_json())?
        ))?;
    } else {
        use std::io::Write;
        std::io::stdout()
            .lock()
            .write_all(report.to_text().as_bytes())?;
    }
    Ok(report.passed())
}

/// Run the conformance suite of whatever kind `source` is on `runtime`.
pub fn check(runtime: &Runtime, source: &str, options: &CheckOptions) -> CheckReport {
    let mut report = CheckReport {
        component: source.to_string(),
        world: None,
        version: None,
        checks: Vec::new(),
    };
    // The same load step as the task's plugins (crate::plugins), with the kind detected.
    let plugin = match crate::plugins::load_plugin(runtime, "component", source, None) {
        Ok(p) => p,
        Err(e) => {
            report.checks.push(Check {
                name: "load".into(),
                passed: false,
                detail: format!("{e:#}"),
            });
            return report;
        }
    };
    report.world = Some(plugin.kind().world().to_string());
    report.version = Some(plugin.wit_version().to_string());
    let mut suite = Suite { checks: Vec::new() };
    suite.record(
        "load",
        Ok(format!(
            "exports {}{}; compiled for this host ({:?})",
            plugin.kind().export_name_at(plugin.wit()),
            if plugin.wit() == WitVersion::CURRENT {
                String::new()
            } else {
                format!(
                    " (an older WIT version, run through the host's {} shim; the current one is {})",
                    plugin.wit(),
                    WitVersion::CURRENT
                )
            },
            plugin.cache_outcome()
        )),
    );
    match Scratch::new("check") {
        Ok(scratch) => match plugin.kind() {
            PluginKind::MessageStore => {
                message_store::message_store_suite(runtime, &plugin, &scratch, options, &mut suite)
            }
            PluginKind::RequestFormat => {
                request_format::request_format_suite(runtime, &plugin, &scratch, &mut suite)
            }
            PluginKind::Compressor => {
                compressor::compressor_suite(runtime, &plugin, &scratch, &mut suite)
            }
            PluginKind::Strategy => {
                strategy::strategy_suite(runtime, &plugin, &scratch, &mut suite)
            }
        },
        Err(e) => suite.record(
            "scratch directory",
            Err(format!("cannot create a temporary task directory: {e}")),
        ),
    }
    report.checks = suite.checks;
    report
}

#[cfg(test)]
mod tests {
    use super::compressor::{compress_config, write_synthetic_task};
    use super::*;
    use crate::invariants::check_context_file;
    use ctxhost_format::estimate_message_tokens;

    #[test]
    fn report_json_has_the_agreed_shape() {
        let r = CheckReport {
            component: "builtin:x".into(),
            world: Some("message-store-plugin".into()),
            version: Some("0.1.0".into()),
            checks: vec![
                Check {
                    name: "a".into(),
                    passed: true,
                    detail: "ok".into(),
                },
                Check {
                    name: "b".into(),
                    passed: false,
                    detail: "bad".into(),
                },
            ],
        };
        let v = r.to_json();
        assert_eq!(v["passed"], false);
        assert_eq!(v["checks"][1]["detail"], "bad");
        assert!(r.to_text().contains("FAIL  b: bad"));
        assert!(r.to_text().contains("1 of 2 checks passed"));
    }

    #[test]
    fn synthetic_context_is_valid_and_over_threshold() {
        let s = Scratch::new("unit").unwrap();
        let dir = s.task("t").unwrap();
        let context = write_synthetic_task(&dir, 12).unwrap();
        check_context_file(
            &crate::task_dir::TaskDir::open(&dir).unwrap(),
            "current.jsonl",
            false,
        )
        .unwrap();
        let tokens: u64 = context.iter().map(estimate_message_tokens).sum();
        let c = compress_config(tokens);
        assert!(tokens as f64 > c.context_length as f64 * c.threshold);
    }
}
