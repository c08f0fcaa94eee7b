//! WIT versioning (issue 19, issue 12's compatibility rule): components built against the frozen
//! `ctxhost:plugin@0.1.0` (`wit/v0.1.0/plugin.wit`; fixtures in `guest-components/fixtures/
//! wit-0.1.0/`) still load, pass `plugin check` and run in a task through the host's 0.1.0 shim;
//! a component of a WIT version this host does not know is refused with a message naming the
//! versions it loads; string summary ids written by 0.1.0 components are reported by `fsck`
//! and rewritten as numbers by `fsck --repair`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::fake_llm::{FakeLlm, RecordedRequest, Reply};
use crate::support::{TestEnv, find_task_dir, read_jsonl};
use ctxhost::plugin_check::{CheckOptions, CheckReport, check};
use ctxhost::runtime::{
    PluginKind, PluginSource, Runtime, RuntimeError, RuntimeLimits, WitVersion,
};
use serde_json::Value;

const SUMMARIZER_0_1_0: &str = "v0_1_0_summarizer.wasm";
const REQUEST_FORMAT_0_1_0: &str = "v0_1_0_request_format.wasm";

fn guest(file: &str) -> PathBuf {
    Path::new(env!("CTXHOST_GUEST_DIR")).join(file)
}

fn runtime(dir: &Path) -> Runtime {
    Runtime::new(dir, RuntimeLimits::default()).unwrap()
}

fn run_check(source: &Path) -> CheckReport {
    let tmp = tempfile::tempdir().unwrap();
    check(
        &runtime(tmp.path()),
        source.to_str().unwrap(),
        &CheckOptions::default(),
    )
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
fn the_fixtures_really_are_0_1_0_components_and_load_as_such() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path());
    for (file, kind) in [
        (SUMMARIZER_0_1_0, PluginKind::Compressor),
        (REQUEST_FORMAT_0_1_0, PluginKind::RequestFormat),
    ] {
        let source = PluginSource::Path(guest(file));
        let plugin = rt.load(&source, kind).unwrap();
        assert_eq!(plugin.wit_version(), "0.1.0", "{file}");
        assert_eq!(plugin.wit(), WitVersion::V0_1_0, "{file}");
        assert!(
            plugin
                .exports()
                .contains(&format!("ctxhost:plugin/{}@0.1.0", kind.interface())),
            "{file}: {:?}",
            plugin.exports()
        );
    }
    // The builtins are built against the current WIT.
    let plugin = rt
        .load(
            &"builtin:llm-summarizer".parse().unwrap(),
            PluginKind::Compressor,
        )
        .unwrap();
    assert_eq!(plugin.wit(), WitVersion::V0_3_0);
}

/// WIT 0.3.0 added the `history` import to the compressor and strategy worlds: a 0.3.0
/// component using it loads, and components built before it (0.1.0 compressor, 0.2.0
/// strategy, neither importing `history`) keep loading; a 0.2.0 strategy runs a task.
#[test]
fn history_importers_of_0_3_0_and_older_components_without_it_all_load() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path());
    for (file, kind, wit) in [
        (
            "recall_summarizer.wasm",
            PluginKind::Compressor,
            WitVersion::V0_3_0,
        ),
        (SUMMARIZER_0_1_0, PluginKind::Compressor, WitVersion::V0_1_0),
        (
            "v0_2_0_strategy.wasm",
            PluginKind::Strategy,
            WitVersion::V0_2_0,
        ),
    ] {
        let plugin = rt
            .load(&PluginSource::Path(guest(file)), kind)
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(plugin.wit(), wit, "{file}");
    }
    // A 0.2.0 component importing `history` at its own version: 0.2.0 has no such interface.
    let (_, err) = load_error(
        tmp.path(),
        "history-0.2.0.wasm",
        &component_importing(
            "ctxhost:plugin/compressor@0.2.0",
            "ctxhost:plugin/history@0.2.0",
            &["search"],
        ),
    );
    assert!(
        err.contains(
            "imports ctxhost:plugin/history@0.2.0, an interface ctxhost:plugin@0.2.0 does not have"
        ),
        "{err}"
    );

    // The 0.2.0 strategy runs a task to its end through the 0.2.0 shim.
    let llm = FakeLlm::start(vec![Reply::text("Done.", Some((10, 2)))]);
    let env = TestEnv::new();
    env.write_config(&format!(
        "{}plugins:\n  strategy: \"{}\"\n",
        crate::support::config_yaml(&llm.base_url(), "openai", ""),
        guest("v0_2_0_strategy.wasm").display()
    ));
    env.ctxhost(&["init"]).ok();
    let uuid = env
        .ctxhost(&["submit", "--prompt", "Say done."])
        .ok()
        .stdout()
        .trim()
        .to_string();
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    let row = env.ctxhost(&["show", &uuid, "--json"]).ok().json()["task"].clone();
    assert_eq!(row["status"], "completed", "{row}");
    let sent = llm.requests();
    assert!(
        sent[0]
            .messages()
            .iter()
            .any(|m| m["content"] == "0.2.0 strategy: answer briefly."),
        "the strategy's note was sent"
    );
}

#[test]
fn a_0_1_0_compressor_passes_plugin_check() {
    let report = run_check(&guest(SUMMARIZER_0_1_0));
    assert!(report.passed(), "{}", report.to_text());
    assert_eq!(report.world.as_deref(), Some("compressor-plugin"));
    assert_eq!(report.version.as_deref(), Some("0.1.0"));
    let load = &report.checks[0];
    assert_eq!(load.name, "load");
    assert!(
        load.detail.starts_with(
            "exports ctxhost:plugin/compressor@0.1.0 (an older WIT version, run through the \
             host's 0.1.0 shim; the current one is 0.3.0)"
        ),
        "{}",
        load.detail
    );
    let compress = report
        .checks
        .iter()
        .find(|c| c.name.starts_with("compress"))
        .expect("a compress check");
    assert!(compress.passed, "{}", compress.detail);
}

#[test]
fn a_0_1_0_request_format_passes_plugin_check_with_zero_cache_tokens() {
    let report = run_check(&guest(REQUEST_FORMAT_0_1_0));
    assert!(
        report.passed(),
        "{}\n{:?}",
        report.to_text(),
        failures(&report)
    );
    assert_eq!(report.world.as_deref(), Some("request-format-plugin"));
    assert_eq!(report.version.as_deref(), Some("0.1.0"));
    let usage = report
        .checks
        .iter()
        .find(|c| c.name == "read-response: OpenAI text reply with usage")
        .expect("usage check");
    // The sample reports 8 cached tokens; 0.1.0 has no field for them.
    assert_eq!(usage.detail, "assistant text, usage 12/5/17 (cache read 0)");
    // The builtin (0.3.0) reports them.
    let builtin = {
        let tmp = tempfile::tempdir().unwrap();
        check(
            &runtime(tmp.path()),
            "builtin:openai-chat",
            &CheckOptions::default(),
        )
    };
    let usage = builtin
        .checks
        .iter()
        .find(|c| c.name == "read-response: OpenAI text reply with usage")
        .expect("usage check");
    assert_eq!(usage.detail, "assistant text, usage 12/5/17 (cache read 8)");
}

/// The 0.1.0 fixture with its package version rewritten in place (`@0.1.0` → `@{version}`,
/// same length, in every name and in the embedded WIT), i.e. a component of that version.
fn component_of_version(dir: &Path, version: &str) -> PathBuf {
    assert_eq!(version.len(), "0.1.0".len());
    let mut out = std::fs::read(guest(SUMMARIZER_0_1_0)).unwrap();
    let (from, to) = (b"@0.1.0".as_slice(), format!("@{version}"));
    let mut replaced = 0;
    let mut i = 0;
    while i + from.len() <= out.len() {
        if &out[i..i + from.len()] == from {
            out[i..i + from.len()].copy_from_slice(to.as_bytes());
            replaced += 1;
            i += from.len();
        } else {
            i += 1;
        }
    }
    assert!(replaced > 0, "no version string found in the fixture");
    let path = dir.join(format!("compressor-{version}.wasm"));
    std::fs::write(&path, out).unwrap();
    path
}

#[test]
fn an_unknown_wit_version_is_refused_naming_the_versions_this_host_loads() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(&tmp.path().join("cache"));
    for version in ["0.4.0", "1.0.0"] {
        let path = component_of_version(tmp.path(), version);
        let source = PluginSource::Path(path.clone());
        let err = rt.load(&source, PluginKind::Compressor).unwrap_err();
        assert!(
            matches!(err, RuntimeError::IncompatibleVersion { .. }),
            "{version}: {err}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "component {}: built against ctxhost:plugin@{version} (it exports \
                 ctxhost:plugin/compressor@{version}), a newer WIT version than this host loads: \
                 this host loads ctxhost:plugin@0.1.0, 0.2.0 and 0.3.0 (world compressor-plugin) \
                 and provides WASI 0.2.0 to 0.2.12; rebuild it against wit/plugin.wit (0.3.0)",
                path.display()
            )
        );
        // `plugin check` fails at load with the same message, no crash.
        let report = run_check(&path);
        assert!(!report.passed());
        assert_eq!(report.checks.len(), 1, "{}", report.to_text());
        assert_eq!(report.checks[0].name, "load");
        assert!(
            report.checks[0]
                .detail
                .contains("this host loads ctxhost:plugin@0.1.0, 0.2.0 and 0.3.0"),
            "{}",
            report.checks[0].detail
        );
    }
}

/// A component written in memory: it exports an empty instance named `export` (the host reads
/// the plugin kind and WIT version from the export's name before linking) and imports one
/// instance `import` holding the functions `functions` (each `func()`), as a component built
/// against another WIT would.
fn component_importing(export: &str, import: &str, functions: &[&str]) -> Vec<u8> {
    use wasm_encoder::{
        Component, ComponentExportKind, ComponentExportSection, ComponentImportSection,
        ComponentInstanceSection, ComponentTypeRef, ComponentTypeSection, ComponentValType,
        InstanceType,
    };
    let mut instance = InstanceType::new();
    instance
        .ty()
        .function()
        .params(std::iter::empty::<(&str, ComponentValType)>())
        .result(None);
    for f in functions {
        instance.export(*f, ComponentTypeRef::Func(0));
    }
    let mut types = ComponentTypeSection::new();
    types.instance(&instance);
    let mut imports = ComponentImportSection::new();
    imports.import(import, ComponentTypeRef::Instance(0));
    let mut instances = ComponentInstanceSection::new();
    instances.export_items(std::iter::empty::<(&str, ComponentExportKind, u32)>());
    let mut exports = ComponentExportSection::new();
    exports.export(export, ComponentExportKind::Instance, 1, None);
    let mut component = Component::new();
    component
        .section(&types)
        .section(&imports)
        .section(&instances)
        .section(&exports);
    component.finish()
}

/// Load the component `bytes` as a compressor; the error's text.
fn load_error(dir: &Path, file: &str, bytes: &[u8]) -> (String, String) {
    let path = dir.join(file);
    std::fs::write(&path, bytes).unwrap();
    let rt = runtime(&dir.join("cache"));
    let err = rt
        .load(&PluginSource::Path(path.clone()), PluginKind::Compressor)
        .unwrap_err();
    (path.display().to_string(), err.to_string())
}

#[test]
fn an_extra_function_in_an_imported_interface_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, err) = load_error(
        tmp.path(),
        "extra-function.wasm",
        &component_importing(
            "ctxhost:plugin/compressor@0.3.0",
            "ctxhost:plugin/llm@0.3.0",
            &["complete-stream"],
        ),
    );
    assert_eq!(
        err,
        format!(
            "component {path}: does not fit world compressor-plugin (ctxhost:plugin@0.3.0): this \
             component imports function `complete-stream` of ctxhost:plugin/llm@0.3.0, which \
             ctxhost:plugin@0.3.0 does not have: it was built against a newer or modified WIT; \
             this host loads ctxhost:plugin@0.1.0, 0.2.0 and 0.3.0 and provides WASI 0.2.0 to \
             0.2.12; rebuild it against wit/plugin.wit (0.3.0)"
        )
    );
}

#[test]
fn an_unknown_imported_interface_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, err) = load_error(
        tmp.path(),
        "extra-interface.wasm",
        &component_importing(
            "ctxhost:plugin/compressor@0.3.0",
            "ctxhost:plugin/cache@0.3.0",
            &["get"],
        ),
    );
    assert_eq!(
        err,
        format!(
            "component {path}: does not fit world compressor-plugin (ctxhost:plugin@0.3.0): this \
             component imports ctxhost:plugin/cache@0.3.0, an interface ctxhost:plugin@0.3.0 does \
             not have (it has types, log, llm, message-store, compressor, request-format, \
             planning, history, strategy): it was built against a newer or modified WIT; this host loads \
             ctxhost:plugin@0.1.0, 0.2.0 and 0.3.0 and provides WASI 0.2.0 to 0.2.12; rebuild it \
             against wit/plugin.wit (0.3.0)"
        )
    );
}

#[test]
fn an_import_of_a_newer_wit_is_named_with_its_version() {
    let tmp = tempfile::tempdir().unwrap();
    for version in ["0.4.0", "1.0.0"] {
        let (path, err) = load_error(
            tmp.path(),
            &format!("import-{version}.wasm"),
            &component_importing(
                "ctxhost:plugin/compressor@0.3.0",
                &format!("ctxhost:plugin/llm@{version}"),
                &["complete"],
            ),
        );
        assert_eq!(
            err,
            format!(
                "component {path}: does not fit world compressor-plugin (ctxhost:plugin@0.3.0): \
                 this component imports ctxhost:plugin/llm@{version}: it was built against \
                 ctxhost:plugin@{version}, a newer WIT version than this host loads; this host \
                 loads ctxhost:plugin@0.1.0, 0.2.0 and 0.3.0 and provides WASI 0.2.0 to 0.2.12; \
                 rebuild it against wit/plugin.wit (0.3.0)"
            )
        );
    }
}

#[test]
fn an_interface_outside_the_world_keeps_its_own_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("store-with-llm.wasm");
    std::fs::write(
        &path,
        component_importing(
            "ctxhost:plugin/message-store@0.3.0",
            "ctxhost:plugin/llm@0.3.0",
            &["complete"],
        ),
    )
    .unwrap();
    let err = runtime(&tmp.path().join("cache"))
        .load(&PluginSource::Path(path.clone()), PluginKind::MessageStore)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "component {}: does not fit world message-store-plugin (ctxhost:plugin@0.3.0): this \
             component imports ctxhost:plugin/llm@0.3.0, which ctxhost does not provide to a \
             message-store-plugin (only a compressor or a strategy (worlds compressor-plugin, \
             strategy-plugin) may import `llm`)",
            path.display()
        )
    );
}

/// Marker of the summary prompt, to tell summary requests from agent-loop requests.
const MARK: &str = "SUMMARISE-THIS";
const STEPS: usize = 10;

fn is_summary_request(req: &RecordedRequest) -> bool {
    req.messages()
        .iter()
        .any(|m| m["content"].as_str().is_some_and(|c| c.contains(MARK)))
}

/// Summary requests get a short summary; the loop gets STEPS tool calls with long arguments,
/// then a final answer whose usage reports cached prompt tokens.
fn scripted_llm() -> (FakeLlm, Arc<AtomicUsize>) {
    let llm = FakeLlm::start(vec![]);
    let summaries = Arc::new(AtomicUsize::new(0));
    let loop_calls = AtomicUsize::new(0);
    let s = summaries.clone();
    llm.set_handler(move |req| {
        if is_summary_request(req) {
            let n = s.fetch_add(1, Ordering::SeqCst) + 1;
            return Some(Reply::text(
                format!("summary {n}: the agent read files."),
                Some((300, 12)),
            ));
        }
        let n = loop_calls.fetch_add(1, Ordering::SeqCst) + 1;
        if n > STEPS {
            return Some(Reply::json(serde_json::json!({
                "choices": [{"message": {"role": "assistant", "content": "All done."}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 400, "completion_tokens": 3, "total_tokens": 403,
                          "prompt_tokens_details": {"cached_tokens": 256}}
            })));
        }
        Some(Reply::read_file_step(n))
    });
    (llm, summaries)
}

fn config(base_url: &str, compressor: &Path, request_format: &Path) -> String {
    format!(
        "context_storage:\n  base_dir: ./contexts\n  compression_threshold: 0.5\n  keep_recent_messages: 3\n  \
         summary_prompt: \"{MARK}\\n{{messages}}\"\n\
         llm:\n  provider: openai\n  base_url: \"{base_url}\"\n  model: fake-model\n  api_key_env: \"\"\n  \
         context_length: 1500\n  max_output_tokens: 200\n  timeout_secs: 20\n  max_retries: 1\n  max_backoff_secs: 1\n\
         plugins:\n  compressor: \"{}\"\n  request_format: \"{}\"\n",
        compressor.display(),
        request_format.display(),
    )
}

/// Submit one task and run it to its end; returns (row, task directory).
fn run_task(env: &TestEnv) -> (Value, PathBuf) {
    env.ctxhost(&["init"]).ok();
    let uuid = env
        .ctxhost(&["submit", "--prompt", "Read every file and report."])
        .ok()
        .stdout()
        .trim()
        .to_string();
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    let row = env.ctxhost(&["show", &uuid, "--json"]).ok().json()["task"].clone();
    let dir = find_task_dir(&env.contexts(), &uuid).expect("task directory");
    (row, dir)
}

#[test]
fn a_task_runs_on_0_1_0_components_and_their_summary_ids_are_written_as_numbers() {
    let (llm, summaries) = scripted_llm();
    let env = TestEnv::new();
    env.write_config(&config(
        &llm.base_url(),
        &guest(SUMMARIZER_0_1_0),
        &guest(REQUEST_FORMAT_0_1_0),
    ));
    let (row, dir) = run_task(&env);
    assert_eq!(row["status"], "completed", "{row}");
    let compressions = row["compression_count"].as_u64().unwrap();
    assert!(compressions >= 2, "{row}");
    assert_eq!(summaries.load(Ordering::SeqCst) as u64, compressions);
    // Every LLM call went through the 0.1.0 request format and was counted.
    assert_eq!(
        row["llm_call_count"].as_u64().unwrap(),
        STEPS as u64 + 1 + compressions
    );
    assert_eq!(
        row["total_tokens"].as_u64().unwrap(),
        STEPS as u64 * 600 + 403 + compressions * 312
    );

    ctxhost::invariants::check_context_file(
        &ctxhost::task_dir::TaskDir::open(&dir).unwrap(),
        "current.jsonl",
        false,
    )
    .expect("current.jsonl keeps the invariants");
    // The 0.1.0 compressor wrote its own (string) ids `sum-N`; the shim numbered its line as
    // soon as it returned, and the host recorded each summary in messages.jsonl with that
    // number: no file holds a string id, and fsck finds nothing.
    let sums = read_jsonl(&dir.join("summaries.jsonl"));
    assert_eq!(sums.len() as u64, compressions);
    for (i, s) in sums.iter().enumerate() {
        assert_eq!(s["id"], Value::from(i as u64 + 1), "{s}");
    }
    let history = read_jsonl(&dir.join("messages.jsonl"));
    let recorded: Vec<&Value> = history.iter().filter_map(|h| h.get("summary_id")).collect();
    let expected: Vec<Value> = (1..=compressions).map(Value::from).collect();
    assert_eq!(recorded, expected.iter().collect::<Vec<_>>());
    env.ctxhost(&["fsck"]).ok();
}

// The tests above that touch the task store, once more on PostgreSQL.
crate::support::store::postgres_variants!(
    a_task_runs_on_0_1_0_components_and_their_summary_ids_are_written_as_numbers,
);
