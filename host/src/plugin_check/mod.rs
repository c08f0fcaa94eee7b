//! `ctxhost plugin check PATH|builtin:NAME [--json] [--keep DIR]`: the conformance suite a
//! plugin component must pass before an operator points config at it.
//!
//! The component is loaded as a task's plugins are (compiled once into the cache of
//! [`check_cache_dir`], so checking an unchanged file again loads it in milliseconds); its
//! world and WIT version are read from its exports; a component importing what ctxhost does
//! not provide (e.g. `wasi:http`) is told so in those words. Then the suite of that kind runs
//! against real instances in scratch task directories (under the system temp dir and removed
//! afterwards, or kept under `--keep DIR`; failure details name files relative to it):
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
//! - compressor ([`compressor`]): `should-compress` around its threshold; `compress` of five
//!   fixtures (tool rounds, parallel tool calls across the kept tail, unicode, a history over
//!   the window, nothing to compress) with a fake LLM returning a fixed summary: a new file,
//!   system prompt first, tool calls paired, the kept tail verbatim, fewer tokens, the task's
//!   first user message kept or summarised (else a warning), summary requests within the
//!   window, the summary recorded, current.jsonl untouched and temporaries removed; and with a
//!   failing LLM (error, context untouched). LLM checks are SKIPped for a compressor that
//!   never calls the LLM;
//! - strategy: each hook on a scratch task through the agent loop's own driver (decisions the
//!   host accepts, planning entries committed with them), a new instance continuing from the
//!   files, the planning history reading back, and `start` with a failing LLM ([`strategy`]).
//!
//! One module per WIT interface ([`message_store`], [`request_format`], [`compressor`],
//! [`strategy`]), the shared [`harness`], and the [`report`]: the world, the WIT version, and
//! each check as PASS, FAIL, WARN or SKIP with the reason; only a FAIL fails the check.
//! `--json` prints
//! `{"component","world","version","passed","kept","checks":[{"name","passed","status","detail"}]}`.

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
pub mod try_call;

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::runtime::{CacheOutcome, PluginKind, Runtime, RuntimeError, RuntimeLimits};
use harness::{Scratch, Suite};
pub use report::{Check, CheckReport, Status};

/// Tunables of the suites.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Messages appended in the message store's large-history check (default 20,000).
    pub large_messages: u64,
    /// Bytes of content per message in that check (default 1,000).
    pub large_message_bytes: usize,
    /// Largest linear memory a message store may use in that check (default 16 MiB).
    pub memory_budget_bytes: usize,
    /// Keep the checks' task directories (fixtures and what the component wrote) in this
    /// directory (created; must be empty) instead of a temporary one removed at the end.
    pub keep: Option<PathBuf>,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            large_messages: 20_000,
            large_message_bytes: 1_000,
            memory_budget_bytes: 16 * 1024 * 1024,
            keep: None,
        }
    }
}

/// The compiled-component cache `ctxhost plugin check` uses: `$CTXHOST_CACHE_DIR` if set, else
/// `$XDG_CACHE_HOME/ctxhost/components`, else `~/.cache/ctxhost/components`; `None` when none
/// can be named (no HOME). Keyed by the component's digest and the engine, like a task's
/// `contexts/.cache/`, so a rebuilt component is compiled again and an unchanged one is not.
pub fn check_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(crate::plugins::CACHE_DIR_ENV) {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("ctxhost").join("components"))
}

/// `ctxhost plugin check`: check `path_or_builtin` (a `.wasm` path or `builtin:NAME`) with
/// `limits` (a task's, from the config: [`crate::config::Config::runtime_limits`]), the cache of [`check_cache_dir`], and `keep` as [`CheckOptions::keep`];
/// print the report to stdout (JSON with `json`), and return whether it passed (the caller
/// exits 0 / 1).
///
/// Errors only when the check cannot run at all (no temp directory, engine setup failed, a
/// `--keep` directory that is not empty); a component that cannot be loaded is a failed
/// report, not an error.
pub fn run(
    path_or_builtin: &str,
    json: bool,
    keep: Option<&Path>,
    limits: RuntimeLimits,
) -> anyhow::Result<bool> {
    // Without a cache directory, a temporary one: compiled every run.
    let fallback;
    let cache = match check_cache_dir() {
        Some(dir) => dir,
        None => {
            fallback = Scratch::new("check-cache")?;
            fallback.path().to_path_buf()
        }
    };
    let runtime = Runtime::new(&cache, limits)?;
    let options = CheckOptions {
        keep: keep.map(Path::to_path_buf),
        ..CheckOptions::default()
    };
    if let Some(dir) = keep {
        // Fail before loading anything when the directory cannot be used.
        Scratch::kept(dir).map_err(crate::error::usage)?;
    }
    let report = check(&runtime, path_or_builtin, &options);
    let text = if json {
        format!("{}\n", serde_json::to_string_pretty(&report.to_json())?)
    } else {
        report.to_text()
    };
    // A closed pipe is an error here as for every command's output (the CLI exits quietly).
    std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes())?;
    Ok(report.passed())
}

/// Run the conformance suite of whatever kind `source` is on `runtime`.
pub fn check(runtime: &Runtime, source: &str, options: &CheckOptions) -> CheckReport {
    let mut report = CheckReport {
        component: source.to_string(),
        world: None,
        version: None,
        checks: Vec::new(),
        kept: None,
    };
    // The same load step as the task's plugins (crate::plugins), with the kind detected.
    let started = Instant::now();
    let plugin = match crate::plugins::load_plugin(runtime, "component", source, None) {
        Ok(p) => p,
        Err(e) => {
            let mut suite = Suite::new(None);
            suite.record("load", Err(load_error_text(&e)));
            report.checks = suite.checks;
            return report;
        }
    };
    let load_time = started.elapsed();
    report.world = Some(plugin.kind().world().to_string());
    report.version = Some(plugin.wit_version().to_string());
    let scratch = match &options.keep {
        Some(dir) => Scratch::kept(dir).map_err(std::io::Error::other),
        None => Scratch::new("check"),
    };
    let mut suite = Suite::new(scratch.as_ref().ok().map(|s| s.path()));
    let cache = match plugin.cache_outcome() {
        CacheOutcome::Hit => format!(
            "loaded from the compiled-component cache {} in {} ms",
            runtime.cache_dir().display(),
            load_time.as_millis()
        ),
        CacheOutcome::Compiled | CacheOutcome::Replaced => format!(
            "compiled in {:.1} s and cached in {} (the next check of the same file loads in milliseconds)",
            load_time.as_secs_f64(),
            runtime.cache_dir().display()
        ),
    };
    suite.record(
        "load",
        Ok(format!(
            "exports {}; {cache}",
            plugin.kind().export_name_at(plugin.wit()),
        )),
    );
    match scratch {
        Ok(scratch) => {
            if options.keep.is_some() {
                report.kept = Some(scratch.path().display().to_string());
            }
            match plugin.kind() {
                PluginKind::MessageStore => message_store::message_store_suite(
                    runtime, &plugin, &scratch, options, &mut suite,
                ),
                PluginKind::RequestFormat => {
                    request_format::request_format_suite(runtime, &plugin, &scratch, &mut suite)
                }
                PluginKind::Compressor => {
                    compressor::compressor_suite(runtime, &plugin, &scratch, &mut suite)
                }
                PluginKind::Strategy => {
                    strategy::strategy_suite(runtime, &plugin, &scratch, &mut suite)
                }
            }
        }
        Err(e) => suite.record(
            "scratch directory",
            Err(format!(
                "cannot create a directory for the checks' task directories: {e}"
            )),
        ),
    }
    report.checks = suite.checks;
    report
}

/// A load failure as a person can act on it: the runtime's message (which names the
/// component), without wasmtime's internal chain when the runtime already explained it.
fn load_error_text(e: &anyhow::Error) -> String {
    match e.downcast_ref::<RuntimeError>() {
        Some(err) => err.to_string(),
        None => format!("{e:#}"),
    }
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
            kept: None,
            component: "builtin:x".into(),
            world: Some("message-store-plugin".into()),
            version: Some("1.0.0".into()),
            checks: vec![
                Check {
                    name: "a".into(),
                    passed: true,
                    status: report::Status::Pass,
                    detail: "ok".into(),
                },
                Check {
                    name: "b".into(),
                    passed: false,
                    status: report::Status::Fail,
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
