//! `ctxhost plugin check`: every builtin conforms; a deliberately broken message store
//! (`fixtures/broken-store`, whose count-messages is off by one) fails with a report that
//! names the broken check; a compressor fixture (`fixtures/tiny-summarizer`) passes the
//! compressor suite; a component that cannot be loaded is a failed report, not a crash.

use std::path::{Path, PathBuf};

use ctxhost::plugin_check::{CheckOptions, CheckReport, check};
use ctxhost::runtime::{Runtime, RuntimeLimits, builtin_names};

fn guest(file: &str) -> PathBuf {
    Path::new(env!("CTXHOST_GUEST_DIR")).join(file)
}

fn run_check(source: &str) -> CheckReport {
    let tmp = tempfile::tempdir().unwrap();
    let rt = Runtime::new(tmp.path(), RuntimeLimits::default()).unwrap();
    check(&rt, source, &CheckOptions::default())
}

fn failures(report: &CheckReport) -> Vec<String> {
    report
        .checks
        .iter()
        .filter(|c| !c.passed)
        .map(|c| format!("{}: {}", c.name, c.detail))
        .collect()
}

#[test]
fn every_builtin_passes() {
    assert_eq!(
        builtin_names(),
        [
            "builtin:jsonl-store",
            "builtin:openai-chat",
            "builtin:openai-responses",
            "builtin:ollama-chat",
            "builtin:llm-summarizer",
            "builtin:observation-masking",
            "builtin:prompted-tools",
            "builtin:anthropic-messages",
            "builtin:react",
            "builtin:plan-execute",
        ],
        "the ten builtins (the issue's six, anthropic-messages, openai-responses, and the two strategies of issue 12), in their stable order"
    );
    for name in builtin_names() {
        let report = run_check(&name);
        assert!(report.passed(), "{name} failed:\n{}", report.to_text());
        assert_eq!(report.version.as_deref(), Some("1.0.0"));
        assert!(
            report.checks.len() >= 8,
            "{name}: only {} checks ran:\n{}",
            report.checks.len(),
            report.to_text()
        );
        println!("{}", report.to_text());
    }
}

#[test]
fn the_builtin_store_is_checked_as_a_message_store_with_bounded_memory() {
    let report = run_check("builtin:jsonl-store");
    assert_eq!(report.world.as_deref(), Some("message-store-plugin"));
    let large = report
        .checks
        .iter()
        .find(|c| c.name.starts_with("large history"))
        .expect("large-history check");
    assert!(large.passed, "{}", large.detail);
    assert!(
        large.detail.contains("peak linear memory"),
        "{}",
        large.detail
    );
}

#[test]
fn request_formats_are_checked_against_their_endpoint() {
    for (name, sample) in [
        (
            "builtin:openai-chat",
            "read-response: OpenAI text reply with usage",
        ),
        (
            "builtin:ollama-chat",
            "read-response: Ollama text reply with usage",
        ),
    ] {
        let report = run_check(name);
        assert_eq!(report.world.as_deref(), Some("request-format-plugin"));
        let c = report
            .checks
            .iter()
            .find(|c| c.name == sample)
            .unwrap_or_else(|| panic!("{name}: no {sample:?} check"));
        assert!(c.passed, "{name}: {}", c.detail);
    }
}

#[test]
fn a_store_that_miscounts_fails_and_the_report_says_where() {
    let path = guest("broken_store.wasm");
    let report = run_check(path.to_str().unwrap());
    assert!(
        !report.passed(),
        "the broken store passed:\n{}",
        report.to_text()
    );
    assert_eq!(report.world.as_deref(), Some("message-store-plugin"));
    let count = report
        .checks
        .iter()
        .find(|c| c.name == "count-messages")
        .expect("count-messages check");
    assert!(!count.passed);
    assert_eq!(count.detail, "count-messages returned 4 after 3 appends");
    // Only the count is wrong, and only the count check fails: the report points at the defect.
    assert_eq!(
        failures(&report),
        ["count-messages: count-messages returned 4 after 3 appends"],
        "{}",
        report.to_text()
    );

    let json = report.to_json();
    assert_eq!(json["passed"], false);
    assert_eq!(json["component"], path.to_str().unwrap());
    assert_eq!(json["world"], "message-store-plugin");
    assert_eq!(json["version"], "1.0.0");
    let checks = json["checks"].as_array().unwrap();
    assert!(
        checks
            .iter()
            .any(|c| c["name"] == "count-messages" && c["passed"] == false)
    );
    assert!(
        checks
            .iter()
            .all(|c| c["name"].is_string() && c["passed"].is_boolean() && c["detail"].is_string())
    );
    assert!(
        report
            .to_text()
            .contains("FAIL  count-messages: count-messages returned 4 after 3 appends")
    );
}

#[test]
fn a_summarising_compressor_passes_the_compressor_suite() {
    let report = run_check(guest("tiny_summarizer.wasm").to_str().unwrap());
    assert_eq!(report.world.as_deref(), Some("compressor-plugin"));
    assert!(report.passed(), "{}", report.to_text());
    let names: Vec<&str> = report.checks.iter().map(|c| c.name.as_str()).collect();
    for expected in [
        "should-compress around the threshold",
        "[tool rounds] system prompt first, tool calls paired",
        "[tool rounds] fewer tokens",
        "[parallel tool calls] kept tail verbatim",
        "[unicode] the task's first user message",
        "[history over the window] summary requests fit the window",
        "[history over the window] summary recorded",
        "[nothing to compress] declined or smaller",
        "compress with a failing LLM leaves the context as it was",
    ] {
        assert!(
            names.contains(&expected),
            "missing check {expected:?} in {names:?}"
        );
    }
}

#[test]
fn a_file_that_cannot_be_loaded_is_a_failed_report() {
    let tmp = tempfile::tempdir().unwrap();
    let bogus = tmp.path().join("bogus.wasm");
    std::fs::write(&bogus, b"not wasm at all").unwrap();
    let report = run_check(bogus.to_str().unwrap());
    assert!(!report.passed());
    assert_eq!(report.world, None);
    assert_eq!(report.checks.len(), 1);
    assert_eq!(report.checks[0].name, "load");
    assert!(
        report.checks[0]
            .detail
            .contains("not a WebAssembly component"),
        "{}",
        report.checks[0].detail
    );
    assert_eq!(report.to_json()["world"], serde_json::Value::Null);

    let report = run_check("builtin:no-such-thing");
    assert!(!report.passed());
    assert!(
        report.checks[0]
            .detail
            .contains("available: builtin:jsonl-store"),
        "{}",
        report.checks[0].detail
    );
}

#[test]
fn the_cli_prints_json_and_sets_the_exit_code() {
    let ok = std::process::Command::new(env!("CARGO_BIN_EXE_ctxhost"))
        .args(["plugin", "check", "builtin:openai-chat", "--json"])
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "exit {:?}: {}",
        ok.status,
        String::from_utf8_lossy(&ok.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_slice(&ok.stdout).expect("stdout is one JSON document");
    assert_eq!(v["component"], "builtin:openai-chat");
    assert_eq!(v["world"], "request-format-plugin");
    assert_eq!(v["version"], "1.0.0");
    assert_eq!(v["passed"], true);
    assert!(v["checks"].as_array().unwrap().len() >= 8);

    let broken = guest("broken_store.wasm");
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_ctxhost"))
        .args(["plugin", "check", broken.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        bad.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let text = String::from_utf8_lossy(&bad.stdout);
    assert!(
        text.contains("world message-store-plugin, WIT version 1.0.0"),
        "{text}"
    );
    assert!(
        text.contains("FAIL  count-messages: count-messages returned 4 after 3 appends"),
        "{text}"
    );
    assert!(text.contains("does NOT conform"), "{text}");
}
