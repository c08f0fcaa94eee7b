//! Plugin authors (issue 15): the SDK (`crates/ctxhost-plugin`) and `ctxhost plugin new`, the
//! conformance checks that catch what matters, and the host enforcing the same at run time.
//!
//! - the vendored WIT of the SDK is the repository's `wit/plugin.wit`;
//! - `plugin check` rejects each deliberately broken compressor of
//!   `guest-components/fixtures/bad-compressors` (built on the SDK) and names the broken check:
//!   a split tool pair, a dropped system prompt, a grown context, a rewritten kept message;
//! - the host rejects the rewritten kept message at run time (`compact_if_needed`) and leaves
//!   current.jsonl as it was;
//! - `ctxhost plugin new` generates a Rust compressor and a Rust strategy that build (cargo,
//!   wasm32-wasip2) and pass `plugin check` as generated, and a Python compressor that does with componentize-py
//!   (ignored, with the reason, when componentize-py is not installed);
//! - `plugin check --keep DIR` keeps the fixtures, the cache makes a second check load in
//!   milliseconds, a `--keep` directory that is not empty is refused;
//! - the SDK crates package for crates.io (issue 42): `cargo package` builds each `.crate`
//!   and verifies it, with metadata, a README and only versioned dependencies.

use std::path::{Path, PathBuf};
use std::process::Command;

use ctxhost::compaction::{CompactionError, compact_if_needed};
use ctxhost::plugin_check::{CheckOptions, CheckReport, Status, check};
use ctxhost::runtime::{
    Completion, CompressConfig, LlmImport, PluginKind, PluginSource, Runtime, RuntimeLimits,
};
use ctxhost_format::{ChatMessage, ToolCall};

use crate::support::ctxhost_bin;

fn guest(file: &str) -> PathBuf {
    Path::new(env!("CTXHOST_GUEST_DIR")).join(file)
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn run_check(source: &Path) -> CheckReport {
    let tmp = tempfile::tempdir().unwrap();
    let rt = Runtime::new(tmp.path(), RuntimeLimits::default()).unwrap();
    check(&rt, source.to_str().unwrap(), &CheckOptions::default())
}

fn failed(report: &CheckReport) -> Vec<String> {
    report
        .checks
        .iter()
        .filter(|c| c.status == Status::Fail)
        .map(|c| format!("{}: {}", c.name, c.detail))
        .collect()
}

#[test]
fn the_sdk_vendors_the_current_wit() {
    let repo_wit = std::fs::read_to_string(repo().join("wit/plugin.wit")).unwrap();
    let sdk_wit =
        std::fs::read_to_string(repo().join("crates/ctxhost-plugin/wit/plugin.wit")).unwrap();
    assert_eq!(
        sdk_wit, repo_wit,
        "crates/ctxhost-plugin/wit/plugin.wit must be a copy of wit/plugin.wit (cp wit/plugin.wit crates/ctxhost-plugin/wit/)"
    );
    let cargo = std::fs::read_to_string(repo().join("crates/ctxhost-plugin/Cargo.toml")).unwrap();
    let package = repo_wit
        .lines()
        .find_map(|l| l.strip_prefix("package ctxhost:plugin@"))
        .unwrap()
        .trim_end_matches(';');
    let (major_minor, _) = package.rsplit_once('.').unwrap();
    assert!(
        cargo.contains(&format!("version = \"{major_minor}.")),
        "ctxhost-plugin's version follows the WIT package {package}"
    );
}

#[test]
fn plugin_check_rejects_each_flawed_compressor() {
    for (wasm, broken_check, says) in [
        (
            "bad_compressor_split_tool_pair.wasm",
            "[parallel tool calls] system prompt first, tool calls paired",
            "tool",
        ),
        (
            "bad_compressor_drop_system_prompt.wasm",
            "[tool rounds] system prompt first, tool calls paired",
            "not the system prompt",
        ),
        (
            "bad_compressor_grow_context.wasm",
            "[tool rounds] fewer tokens",
            "not fewer than",
        ),
        (
            "bad_compressor_rewrite_kept.wasm",
            "[tool rounds] kept tail verbatim",
            "is not a verbatim copy",
        ),
    ] {
        let report = run_check(&guest(wasm));
        assert!(!report.passed(), "{wasm} passed:\n{}", report.to_text());
        let check = report
            .checks
            .iter()
            .find(|c| c.name == broken_check)
            .unwrap_or_else(|| panic!("{wasm}: no check {broken_check:?}:\n{}", report.to_text()));
        assert_eq!(check.status, Status::Fail, "{wasm}:\n{}", report.to_text());
        assert!(check.detail.contains(says), "{wasm}: {}", check.detail);
        // Actionable text: no Rust Debug dumps of messages, no paths of the (removed) task
        // directories (the load check names the compiled-component cache, which stays).
        for c in report.checks.iter().skip(1) {
            assert!(
                !c.detail.contains("ChatMessage {"),
                "{}: {}",
                c.name,
                c.detail
            );
            // The component's own path may be named (it stays); a checkout under /tmp must not
            // make that look like a scratch directory.
            let component = guest(wasm).display().to_string();
            let detail = c.detail.replace(&component, "<component>");
            assert!(!detail.contains("/tmp/"), "{}: {}", c.name, c.detail);
        }
        // None of them calls the LLM: the LLM checks are skipped, not passed.
        let skipped: Vec<_> = report
            .checks
            .iter()
            .filter(|c| c.status == Status::Skip)
            .map(|c| c.name.as_str())
            .collect();
        assert!(
            skipped
                .iter()
                .any(|n| n.contains("summary requests fit the window")),
            "{wasm}: {skipped:?}"
        );
        assert!(
            skipped.contains(&"compress with a failing LLM leaves the context as it was"),
            "{wasm}: {skipped:?}"
        );
        println!("{wasm}: {}", failed(&report).join("\n  "));
    }
    // A dropped system prompt is not blamed on the kept tail (whose count starts after it).
    let report = run_check(&guest("bad_compressor_drop_system_prompt.wasm"));
    let tail = report
        .checks
        .iter()
        .find(|c| c.name == "[tool rounds] kept tail verbatim")
        .unwrap();
    assert_eq!(tail.status, Status::Fail, "{}", report.to_text());
    assert!(
        tail.detail
            .contains("does not start with the system prompt"),
        "{}",
        tail.detail
    );
}

#[test]
fn plugin_check_warns_about_a_dropped_first_user_message_and_reports_a_masked_kept_result() {
    // Drops the old part without a summary: the first user message is gone without a word.
    let report = run_check(&guest("bad_compressor_drop_first_user.wasm"));
    let warned: Vec<_> = report
        .checks
        .iter()
        .filter(|c| c.name.ends_with("the task's first user message"))
        .collect();
    assert!(!warned.is_empty(), "{}", report.to_text());
    assert!(
        warned.iter().any(|c| c.status == Status::Warn
            && c.detail.contains("neither kept nor covered by a summary")),
        "{}",
        report.to_text()
    );
    assert!(
        report
            .checks
            .iter()
            .all(|c| c.status != Status::Warn || c.name.ends_with("the task's first user message")),
        "only the first-user-message check warns:\n{}",
        report.to_text()
    );
    println!("drop-first-user:\n{}", report.to_text());

    // Masks an older kept tool result with the mark: accepted, and the detail says so.
    let report = run_check(&guest("bad_compressor_mask_kept_result.wasm"));
    let reported: Vec<_> = report
        .checks
        .iter()
        .filter(|c| c.name.ends_with("kept tail verbatim") && c.detail.contains("masked or cut"))
        .collect();
    assert!(!reported.is_empty(), "{}", report.to_text());
    for c in &reported {
        assert_eq!(c.status, Status::Pass, "{}: {}", c.name, c.detail);
        assert!(c.detail.contains("tools.jsonl"), "{}", c.detail);
    }
    println!("mask-kept-result: {}", reported[0].detail);
}

#[test]
fn builtins_report_no_skips_but_the_masker_skips_the_llm_checks() {
    for (name, skips) in [
        ("builtin:llm-summarizer", false),
        ("builtin:observation-masking", true),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let rt = Runtime::new(tmp.path(), RuntimeLimits::default()).unwrap();
        let report = check(&rt, name, &CheckOptions::default());
        assert!(report.passed(), "{}", report.to_text());
        assert_eq!(
            report.count(Status::Skip) > 0,
            skips,
            "{}",
            report.to_text()
        );
        assert_eq!(report.count(Status::Warn), 0, "{}", report.to_text());
        for fixture in [
            "tool rounds",
            "parallel tool calls",
            "unicode",
            "history over the window",
        ] {
            let kept = report
                .checks
                .iter()
                .find(|c| c.name == format!("[{fixture}] kept tail verbatim"))
                .unwrap_or_else(|| panic!("{name}: no kept-tail check for {fixture}"));
            assert_eq!(kept.status, Status::Pass, "{name}: {}", kept.detail);
        }
    }
}

/// An `llm` import that is never expected to be called.
struct NoLlm;

impl LlmImport for NoLlm {
    fn complete(&mut self, _: &str, _: u32, _: std::time::Instant) -> Result<Completion, String> {
        Err("no LLM in this test".into())
    }
}

#[test]
fn the_host_rejects_a_rewritten_kept_message_at_run_time() {
    let cache = tempfile::tempdir().unwrap();
    let rt = Runtime::new(cache.path(), RuntimeLimits::default()).unwrap();
    let store_plugin = rt
        .load(
            &"builtin:jsonl-store".parse::<PluginSource>().unwrap(),
            PluginKind::MessageStore,
        )
        .unwrap();
    let bad = rt
        .load(
            &PluginSource::Path(guest("bad_compressor_rewrite_kept.wasm")),
            PluginKind::Compressor,
        )
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut store = rt.message_store(&store_plugin, dir.path()).unwrap();
    store.open().unwrap();
    let ts = "2026-01-02T03:04:05Z";
    store
        .add_message(&ChatMessage::text("system", "sys"), ts)
        .unwrap();
    for t in 0..10 {
        store
            .add_message(
                &ChatMessage::text("user", format!("question {t} {}", "words ".repeat(30))),
                ts,
            )
            .unwrap();
        let call = ChatMessage {
            role: "assistant".into(),
            tool_calls: Some(vec![ToolCall::new(format!("c{t}"), "read", "{}")]),
            ..Default::default()
        };
        store.add_message(&call, ts).unwrap();
        let result = ChatMessage {
            role: "tool".into(),
            content: Some("result ".repeat(40)),
            tool_call_id: Some(format!("c{t}")),
            tool_name: Some("read".into()),
            ..Default::default()
        };
        store.add_message(&result, ts).unwrap();
        store
            .add_message(&ChatMessage::text("assistant", format!("answer {t}")), ts)
            .unwrap();
    }
    let before = std::fs::read(dir.path().join("current.jsonl")).unwrap();
    let tokens = store.current_token_count().unwrap();
    let config = CompressConfig {
        context_length: tokens * 10 / 9,
        threshold: 0.7,
        keep_recent_messages: 5,
        // A token bound as the host sets one: a compressor may keep fewer messages, not
        // rewrite those it keeps.
        keep_recent_tokens: tokens / 4,
        summary_prompt: "{messages}".into(),
        reserve_output_tokens: 256,
    };
    let mut compressor = rt.compressor(&bad, dir.path(), Box::new(NoLlm)).unwrap();
    let err = compact_if_needed(
        &mut store,
        &mut compressor,
        &ctxhost::task_dir::TaskDir::open(dir.path()).unwrap(),
        &config,
        &|| ts.to_string(),
    )
    .unwrap_err();
    assert!(
        matches!(err, CompactionError::KeptTailRewritten { .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("rewrote a kept message") && text.contains("content changed"),
        "{text}"
    );
    assert_eq!(
        std::fs::read(dir.path().join("current.jsonl")).unwrap(),
        before,
        "current.jsonl changed"
    );
    assert!(
        !dir.path().join("compressed.jsonl").exists(),
        "the rejected file was left behind"
    );
}

#[test]
fn plugin_check_keeps_fixtures_uses_the_cache_and_explains_a_wasi_http_import() {
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let keep = work.path().join("kept");
    let wasm = guest("bad_compressor_grow_context.wasm");
    let run = |args: &[&str]| {
        Command::new(ctxhost_bin())
            .args(args)
            .env("CTXHOST_CACHE_DIR", &cache)
            .current_dir(work.path())
            .output()
            .unwrap()
    };
    let first = run(&[
        "plugin",
        "check",
        wasm.to_str().unwrap(),
        "--keep",
        keep.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&first.stdout).to_string();
    assert_eq!(first.status.code(), Some(1), "{text}");
    assert!(
        text.contains("compiled in") && text.contains("cached in"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "fixtures and outputs kept in {}",
            keep.canonicalize().unwrap().display()
        )),
        "{text}"
    );
    for kept in [
        "compress-tool-rounds/current.jsonl",
        "compress-tool-rounds/compressed.jsonl",
        "compress-unicode/messages.jsonl",
    ] {
        assert!(keep.join(kept).is_file(), "{kept} not kept:\n{text}");
    }
    // A second run loads the compiled component from the cache.
    let second = run(&["plugin", "check", wasm.to_str().unwrap(), "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&second.stdout).unwrap();
    let load = &json["checks"][0];
    assert!(
        load["detail"]
            .as_str()
            .unwrap()
            .contains("loaded from the compiled-component cache"),
        "{load}"
    );
    assert_eq!(json["passed"], false);
    assert!(
        json["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["status"] == "skip")
    );
    // --keep refuses a directory with something in it.
    let again = run(&[
        "plugin",
        "check",
        wasm.to_str().unwrap(),
        "--keep",
        keep.to_str().unwrap(),
    ]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"));
}

/// `ctxhost ARGS` in `dir` with the compiled-component cache in `cache`.
fn ctxhost(dir: &Path, cache: &Path, args: &[&str]) -> std::process::Output {
    Command::new(ctxhost_bin())
        .args(args)
        .env("CTXHOST_CACHE_DIR", cache)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `cargo` in `dir` with the target dir `target_dir`, without the variables this test runs
/// under.
fn cargo(dir: &Path, target_dir: &Path) -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target_dir)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET");
    command
}

/// `cargo build --release --offline` in `project` (the registry crates are those the guest
/// components were built with).
fn cargo_build(project: &Path, target_dir: &Path) -> std::process::Output {
    cargo(project, target_dir)
        .args(["build", "--release", "--offline"])
        .output()
        .unwrap()
}

/// `ctxhost plugin new --kind KIND NAME` in a new directory, `cargo build --release` of the
/// project, `ctxhost plugin check --json` of its component: the check's report, after asserting
/// the project names the SDK by path, it built, the check passed, and its world is `world`.
fn scaffold_build_and_check(kind: &str, name: &str, world: &str) -> (serde_json::Value, PathBuf) {
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let crate_name = name.replace('-', "_");
    let started = std::time::Instant::now();
    let new = ctxhost(
        work.path(),
        &cache,
        &["plugin", "new", "--kind", kind, name],
    );
    assert!(new.status.success(), "{}", text(&new));
    let printed = text(&new);
    assert!(
        printed.contains("cargo build --release")
            && printed.contains(&format!("{crate_name}.wasm")),
        "{printed}"
    );
    let project = work.path().join(name);
    let manifest = std::fs::read_to_string(project.join("Cargo.toml")).unwrap();
    assert!(
        manifest.contains(&format!("name = \"{crate_name}\"")),
        "{manifest}"
    );
    // The SDK is vendored into the project (built here in a temporary directory outside the
    // repository, offline): no checkout of ctxhost is needed.
    assert!(
        manifest.contains("path = \"vendor/ctxhost-plugin\", version = \"1.0.0\""),
        "{manifest}"
    );
    assert!(project.join("vendor/ctxhost-plugin/src/lib.rs").is_file());
    assert!(project.join("vendor/ctxhost-format/src/lib.rs").is_file());

    // The guest components' target dir (host/build.rs): the same release profile and the same
    // registry crates, already compiled there, so only the plugin itself is built.
    let target = Path::new(env!("CTXHOST_GUEST_DIR")).join("../..");
    let build = cargo_build(&project, &target);
    assert!(
        build.status.success(),
        "cargo build failed:\n{}",
        text(&build)
    );
    let built = started.elapsed();
    let wasm = target.join(format!("wasm32-wasip2/release/{crate_name}.wasm"));
    let check = ctxhost(
        &project,
        &cache,
        &["plugin", "check", wasm.to_str().unwrap(), "--json"],
    );
    let report: serde_json::Value =
        serde_json::from_slice(&check.stdout).unwrap_or_else(|_| panic!("{}", text(&check)));
    assert_eq!(check.status.code(), Some(0), "{report:#}");
    assert_eq!(report["world"], world);
    println!(
        "{kind}: scaffold → built in {:.1} s → plugin check passed at {:.1} s ({} checks, {} bytes)",
        built.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        report["checks"].as_array().map_or(0, Vec::len),
        std::fs::metadata(&wasm).map_or(0, |m| m.len())
    );
    (report, wasm)
}

fn statuses(report: &serde_json::Value) -> Vec<(String, String)> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn plugin_new_makes_a_rust_compressor_that_builds_and_passes_plugin_check() {
    let (report, wasm) =
        scaffold_build_and_check("compressor", "my-compressor", "compressor-plugin");
    let statuses = statuses(&report);
    assert!(
        statuses.iter().all(|(_, s)| s == "pass"),
        "every check applies to it and passes: {report:#}"
    );
    assert!(statuses.len() >= 30, "{} checks", statuses.len());
    let cache = tempfile::tempdir().unwrap();
    compact_over_the_token_bound(&wasm, cache.path());
}

/// An LLM that answers every summary request with the same text.
struct FixedSummary;

impl LlmImport for FixedSummary {
    fn complete(&mut self, _: &str, _: u32, _: std::time::Instant) -> Result<Completion, String> {
        Ok(Completion {
            message: ChatMessage::text("assistant", "The user asked about the files; answered."),
            usage: None,
        })
    }
}

/// The compressor `wasm` run by the host (`compact_if_needed`, compiled components cached in
/// `cache`) on a task whose newest message is the second of two parallel tool results, each
/// larger than half the token bound `keep-recent-tokens`: the older rounds are summarised and
/// the newest group is kept, with c1's result cut to head and tail with the note (the builtins'
/// rule, `plan_tail`) and c2's result, the newest message, unchanged; the host's kept-tail
/// check accepts it.
fn compact_over_the_token_bound(wasm: &Path, cache: &Path) {
    use ctxhost::compaction::CompactionOutcome;
    use ctxhost_format::compress::{SHRUNK_NOTE_PREFIX, SUMMARY_PREFIX};
    let rt = Runtime::new(cache, RuntimeLimits::default()).unwrap();
    let store_plugin = rt
        .load(
            &"builtin:jsonl-store".parse::<PluginSource>().unwrap(),
            PluginKind::MessageStore,
        )
        .unwrap();
    let plugin = rt
        .load(
            &PluginSource::Path(wasm.to_path_buf()),
            PluginKind::Compressor,
        )
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut store = rt.message_store(&store_plugin, dir.path()).unwrap();
    store.open().unwrap();
    let ts = "2026-01-02T03:04:05Z";
    let mut add = |m: ChatMessage| {
        store.add_message(&m, ts).unwrap();
        m
    };
    add(ChatMessage::text("system", "sys"));
    add(ChatMessage::text("user", "Compare a.rs and b.rs"));
    for t in 0..3 {
        add(ChatMessage::text(
            "user",
            format!("question {t} {}", "words ".repeat(30)),
        ));
        add(ChatMessage::text("assistant", format!("answer {t}")));
    }
    add(ChatMessage {
        role: "assistant".into(),
        tool_calls: Some(vec![
            ToolCall::new("c1", "read", r#"{"path":"a.rs"}"#),
            ToolCall::new("c2", "read", r#"{"path":"b.rs"}"#),
        ]),
        ..Default::default()
    });
    let result = |id: &str, fill: &str| ChatMessage {
        role: "tool".into(),
        content: Some(format!("{id} head {} {id} tail", fill.repeat(8000))),
        tool_call_id: Some(id.into()),
        tool_name: Some("read".into()),
        ..Default::default()
    };
    let c1 = add(result("c1", "x"));
    let c2 = add(result("c2", "y"));
    let tokens = store.current_token_count().unwrap();
    let config = CompressConfig {
        context_length: tokens * 10 / 9,
        threshold: 0.7,
        keep_recent_messages: 5,
        keep_recent_tokens: 2500,
        summary_prompt: "Summarize:\n{messages}".into(),
        reserve_output_tokens: 256,
    };
    let mut compressor = rt
        .compressor(&plugin, dir.path(), Box::new(FixedSummary))
        .unwrap();
    let outcome = compact_if_needed(
        &mut store,
        &mut compressor,
        &ctxhost::task_dir::TaskDir::open(dir.path()).unwrap(),
        &config,
        &|| ts.to_string(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        matches!(
            outcome,
            CompactionOutcome::Compressed {
                summary_id: Some(1),
                ..
            }
        ),
        "{outcome:?}"
    );
    let context: Vec<ChatMessage> = std::fs::read_to_string(dir.path().join("current.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let roles: Vec<&str> = context.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "tool"]);
    assert!(
        context[1]
            .content
            .as_deref()
            .unwrap()
            .starts_with(SUMMARY_PREFIX)
    );
    let cut = context[3].content.as_deref().unwrap();
    assert!(
        cut.starts_with("c1 head") && cut.contains(SHRUNK_NOTE_PREFIX) && cut.len() < 4000,
        "{cut}"
    );
    assert_eq!(context[3].tool_call_id, c1.tool_call_id);
    assert_eq!(context[4], c2, "the newest message is kept as it was");
}

#[test]
fn plugin_new_makes_a_rust_strategy_that_builds_and_passes_plugin_check() {
    let (report, _) = scaffold_build_and_check("strategy", "my-strategy", "strategy-plugin");
    let statuses = statuses(&report);
    assert!(
        statuses.iter().all(|(_, s)| s == "pass"),
        "every check applies to it and passes: {report:#}"
    );
    // The hooks, a new instance continuing from the files, the planning history.
    for name in [
        "start",
        "after-tools",
        "after-reply",
        "planning history reads back",
    ] {
        assert!(
            statuses.iter().any(|(n, _)| n.starts_with(name)),
            "no {name} check: {report:#}"
        );
    }
}

#[test]
fn plugin_new_makes_a_rust_request_format_that_builds_and_passes_plugin_check() {
    let (report, _) =
        scaffold_build_and_check("request-format", "my-format", "request-format-plugin");
    let statuses = statuses(&report);
    assert!(
        statuses.iter().all(|(_, s)| s == "pass"),
        "every check applies to it and passes: {report:#}"
    );
    // The body (streamed messages, unicode intact, the tool offered), a malformed messages
    // line refused, and the OpenAI replies: text with usage, a tool call, errors refused.
    for name in [
        "write-request",
        "tools offered",
        "write-request rejects a malformed line",
        "read-response: OpenAI text reply with usage",
        "read-response: OpenAI tool call reply",
        "read-response: provider error object",
        "read-response: HTML error page",
    ] {
        assert!(
            statuses.iter().any(|(n, _)| n.starts_with(name)),
            "no {name} check: {report:#}"
        );
    }
}

#[test]
fn plugin_new_makes_a_rust_message_store_that_builds_and_passes_plugin_check() {
    let (report, _) = scaffold_build_and_check("message-store", "my-store", "message-store-plugin");
    let statuses = statuses(&report);
    assert!(
        statuses.iter().all(|(_, s)| s == "pass"),
        "every check applies to it and passes: {report:#}"
    );
    // Appends with gap-free seqs, both files' lines, the running token count against a
    // recount, and current.jsonl replaced (and left alone when the source is malformed).
    for name in [
        "open on an empty task directory",
        "add-message",
        "messages.jsonl lines",
        "current.jsonl lines",
        "current-token-count",
        "recreate-current-context from a shorter context",
        "recreate-current-context rejects a malformed source",
    ] {
        assert!(
            statuses.iter().any(|(n, _)| n.starts_with(name)),
            "no {name} check: {report:#}"
        );
    }
}

#[test]
fn plugin_new_refuses_bad_names_existing_directories_and_kinds_without_a_template() {
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    for (args, says) in [
        (
            vec!["plugin", "new", "--kind", "compressor", "My_Plugin"],
            "use lowercase letters",
        ),
        (
            vec![
                "plugin",
                "new",
                "--kind",
                "message-store",
                "--lang",
                "js",
                "js-store",
            ],
            "no js template for --kind message-store",
        ),
        (
            vec![
                "plugin",
                "new",
                "--kind",
                "request-format",
                "--lang",
                "python",
                "py-format",
            ],
            "no python template for --kind request-format",
        ),
        (
            vec![
                "plugin",
                "new",
                "--kind",
                "message-store",
                "--lang",
                "python",
                "py-store",
            ],
            "no python template for --kind message-store",
        ),
    ] {
        let out = ctxhost(work.path(), &cache, &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(says), "{args:?}: {}", text(&out));
    }
    std::fs::create_dir(work.path().join("taken")).unwrap();
    std::fs::write(work.path().join("taken/file"), "x").unwrap();
    let out = ctxhost(
        work.path(),
        &cache,
        &["plugin", "new", "--kind", "compressor", "taken"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("already exists and is not empty"),
        "{}",
        text(&out)
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("taken/file")).unwrap(),
        "x"
    );
}

/// The project is the user's source tree: its files get the umask ctxhost was started with
/// (0644, 0755 for build.sh and folders under 022), not the owner-only one of task data.
#[cfg(unix)]
#[test]
fn plugin_new_writes_files_with_the_users_umask() {
    use std::os::unix::fs::PermissionsExt;
    let work = tempfile::tempdir().unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg("umask 022 && exec \"$0\" plugin new --kind compressor --lang python nested/py-plugin")
        .arg(ctxhost_bin())
        .current_dir(work.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let mode = |p: &str| {
        std::fs::metadata(work.path().join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    for (path, expected) in [
        ("nested", 0o755),
        ("nested/py-plugin", 0o755),
        ("nested/py-plugin/wit", 0o755),
        ("nested/py-plugin/app.py", 0o644),
        ("nested/py-plugin/wit/plugin.wit", 0o644),
        ("nested/py-plugin/build.sh", 0o755),
    ] {
        assert_eq!(mode(path), expected, "{path}: {:o}", mode(path));
    }
}

#[test]
fn the_python_example_is_what_plugin_new_generates() {
    let work = tempfile::tempdir().unwrap();
    let out = ctxhost(
        work.path(),
        &work.path().join("cache"),
        &[
            "plugin",
            "new",
            "--kind",
            "compressor",
            "--lang",
            "python",
            "python-compressor",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let example = repo().join("examples/plugins/python-compressor");
    for file in [
        "app.py",
        "build.sh",
        "wit/plugin.wit",
        "README.md",
        ".gitignore",
    ] {
        let generated =
            std::fs::read_to_string(work.path().join("python-compressor").join(file)).unwrap();
        let kept = std::fs::read_to_string(example.join(file))
            .unwrap_or_else(|e| panic!("examples/plugins/python-compressor/{file}: {e}"));
        assert_eq!(
            kept, generated,
            "examples/plugins/python-compressor/{file} differs from what `ctxhost plugin new --kind compressor --lang python python-compressor` writes: regenerate it"
        );
    }
}

#[test]
#[cfg_attr(
    not(ctxhost_componentize_py),
    ignore = "needs componentize-py 0.25.1 (pip install componentize-py==0.25.1, then touch host/build.rs) — .ci/run installs it"
)]
fn the_python_example_compressor_builds_with_componentize_py_and_passes_plugin_check() {
    let work = tempfile::tempdir().unwrap();
    let project = work.path().join("python-compressor");
    let example = repo().join("examples/plugins/python-compressor");
    for file in ["app.py", "build.sh", "wit/plugin.wit"] {
        std::fs::create_dir_all(project.join(file).parent().unwrap()).unwrap();
        std::fs::copy(example.join(file), project.join(file)).unwrap();
    }
    let componentize =
        std::env::var_os("CTXHOST_COMPONENTIZE_PY").unwrap_or_else(|| "componentize-py".into());
    let started = std::time::Instant::now();
    let build = Command::new("bash")
        .arg(project.join("build.sh"))
        .env("COMPONENTIZE_PY", &componentize)
        .output()
        .unwrap();
    assert!(build.status.success(), "build.sh failed:\n{}", text(&build));
    let built = started.elapsed();
    let wasm = project.join("python_compressor.wasm");
    // A cache that outlives the test: compiling 18 MB of CPython takes a while once.
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-check-cache");
    let check = ctxhost(
        &project,
        &cache,
        &["plugin", "check", wasm.to_str().unwrap()],
    );
    let report = text(&check);
    assert_eq!(check.status.code(), Some(0), "{report}");
    assert!(
        !report.contains("WARN") && !report.contains("SKIP"),
        "{report}"
    );
    println!(
        "componentize-py build {:.1} s, {} bytes; plugin check {:.1} s\n{report}",
        built.as_secs_f64(),
        std::fs::metadata(&wasm).map_or(0, |m| m.len()),
        (started.elapsed() - built).as_secs_f64()
    );
    // The token bound, as the host sets one: older groups summarised, the newest group's
    // older result cut with its note, the newest message kept.
    compact_over_the_token_bound(&wasm, &cache);
}

/// `cargo package` of `ctxhost-format` (in the workspace) and of `ctxhost-plugin` (outside it,
/// wasm32-wasip2), each verified by building the unpacked `.crate` offline; then each `.crate`,
/// unpacked outside the repository, holds its README and library and no tests, and its
/// manifest has the crates.io metadata and no dependency without a version (cargo drops `path`
/// on packaging, so a dependency that had only a path would be left with none).
///
/// `ctxhost-format` is not on crates.io yet, so `ctxhost-plugin`'s verification resolves it
/// through `[patch.crates-io]` (given with `--config`, not written in any manifest) to the
/// `ctxhost-format` package just made: what crates.io would serve once it is published. Its
/// lock file is left out (`--exclude-lockfile`): it would record that local patch, and
/// a library's lock file is not used by the crates that depend on it.
#[test]
fn the_sdk_crates_package_for_crates_io() {
    // Persistent, so a second run only rebuilds the two crates.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sdk-package");
    let unpacked = tempfile::tempdir().unwrap();
    let version = |manifest: &Path, name: &str| -> String {
        let out = cargo(&repo(), &target)
            .args([
                "metadata",
                "--offline",
                "--no-deps",
                "--format-version",
                "1",
            ])
            .arg("--manifest-path")
            .arg(manifest)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let package = metadata["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {}", manifest.display()));
        package["version"].as_str().unwrap().to_string()
    };
    let package = |dir: &Path, name: &str, args: &[&str]| -> PathBuf {
        let out = cargo(dir, &target)
            .args(["package", "--offline", "--allow-dirty"])
            .args(args)
            .output()
            .unwrap();
        let report = text(&out);
        assert!(
            out.status.success(),
            "cargo package of {name} failed:\n{report}"
        );
        assert!(
            !report.contains("warning:"),
            "cargo package of {name} warned:\n{report}"
        );
        let manifest = dir.join("Cargo.toml");
        let name_version = format!("{name}-{}", version(&manifest, name));
        let out = Command::new("tar")
            .arg("-xzf")
            .arg(target.join("package").join(format!("{name_version}.crate")))
            .arg("-C")
            .arg(unpacked.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        unpacked.path().join(name_version)
    };

    let format = package(&repo(), "ctxhost-format", &["-p", "ctxhost-format"]);
    let patch = format!(
        "patch.crates-io.ctxhost-format.path={:?}",
        format.to_str().unwrap()
    );
    let plugin = package(
        &repo().join("crates/ctxhost-plugin"),
        "ctxhost-plugin",
        &[
            "--exclude-lockfile",
            "--target",
            "wasm32-wasip2",
            "--config",
            &patch,
        ],
    );

    for (dir, name) in [(&format, "ctxhost-format"), (&plugin, "ctxhost-plugin")] {
        assert!(dir.join("README.md").is_file(), "{name}: no README.md");
        assert!(dir.join("src/lib.rs").is_file(), "{name}: no src/lib.rs");
        for left_out in ["proptest-regressions", "target"] {
            assert!(!dir.join(left_out).exists(), "{name} packages {left_out}/");
        }
        let out = cargo(dir, &target)
            .args([
                "metadata",
                "--offline",
                "--no-deps",
                "--format-version",
                "1",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {}", text(&out));
        let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let package = &metadata["packages"][0];
        assert_eq!(package["license"], "Apache-2.0", "{name}");
        for field in ["description", "documentation", "readme"] {
            assert!(
                package[field].as_str().is_some_and(|v| !v.is_empty()),
                "{name}: no {field}"
            );
        }
        for field in ["keywords", "categories"] {
            assert!(
                package[field].as_array().is_some_and(|v| !v.is_empty()),
                "{name}: no {field}"
            );
        }
        for dependency in package["dependencies"].as_array().unwrap() {
            let dep = &dependency["name"];
            assert!(dependency["path"].is_null(), "{name}: {dep} by path");
            assert_ne!(
                dependency["req"], "*",
                "{name}: {dep} has no version (a path-only dependency)"
            );
        }
    }
}
