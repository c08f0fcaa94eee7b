//! WIT versioning (issue 42 item 1): `ctxhost:plugin@1.0.0` is the one version this host loads.
//! A component built against any other version — the pre-1.0 0.2.0 (a real one:
//! `guest-components/fixtures/wit-0.2.0/store`, built against that version's message-store
//! world), a newer minor, a 2.0 — is refused before any model call, naming its version and
//! 1.0.0: when loaded, by `plugin check`, and when a task run starts. An import that does not
//! fit 1.0.0 is named for what it is.

use std::path::{Path, PathBuf};

use crate::support::fake_llm::{FakeLlm, Reply};
use crate::support::{TestEnv, config_yaml};
use ctxhost::plugin_check::{CheckOptions, CheckReport, check};
use ctxhost::runtime::{
    PluginKind, PluginSource, Runtime, RuntimeError, RuntimeLimits, WitVersion,
};

/// A message store built against `ctxhost:plugin@0.2.0` by wit-bindgen.
const STORE_0_2_0: &str = "v0_2_0_store.wasm";

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

/// The refusal of a component exporting `ctxhost:plugin/{interface}@{version}` at `path`.
fn refusal(path: &Path, interface: &str, version: &str, relation: &str) -> String {
    format!(
        "component {}: built against ctxhost:plugin@{version} (it exports \
         ctxhost:plugin/{interface}@{version}), {relation}: this host loads ctxhost:plugin@1.0.0 \
         (world {interface}-plugin) and provides WASI 0.2.0 to 0.2.12; rebuild it against \
         wit/plugin.wit (1.0.0)",
        path.display()
    )
}

const OLDER: &str = "an older WIT version than this host loads (before 1.0)";
const NEWER: &str = "a newer WIT version than this host loads";

#[test]
fn the_builtins_and_third_party_components_of_1_0_0_load_in_every_world() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path());
    for (source, kind) in [
        ("builtin:jsonl-store".to_string(), PluginKind::MessageStore),
        ("builtin:llm-summarizer".to_string(), PluginKind::Compressor),
        ("builtin:openai-chat".to_string(), PluginKind::RequestFormat),
        ("builtin:react".to_string(), PluginKind::Strategy),
        (
            guest("recall_summarizer.wasm").display().to_string(),
            PluginKind::Compressor,
        ),
        (
            guest("nudge_strategy.wasm").display().to_string(),
            PluginKind::Strategy,
        ),
    ] {
        let plugin = rt
            .load(&source.parse().unwrap(), kind)
            .unwrap_or_else(|e| panic!("{source}: {e}"));
        assert_eq!(plugin.wit(), WitVersion::V1_0_0, "{source}");
        assert_eq!(plugin.wit_version(), "1.0.0", "{source}");
        assert!(
            plugin
                .exports()
                .contains(&format!("ctxhost:plugin/{}@1.0.0", kind.interface())),
            "{source}: {:?}",
            plugin.exports()
        );
    }
}

#[test]
fn a_component_built_against_0_2_0_is_refused_naming_its_version_and_1_0_0() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(&tmp.path().join("cache"));
    let path = guest(STORE_0_2_0);
    let err = rt
        .load(&PluginSource::Path(path.clone()), PluginKind::MessageStore)
        .expect_err("a 0.2.0 store is refused");
    assert!(
        matches!(err, RuntimeError::IncompatibleVersion { .. }),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        refusal(&path, "message-store", "0.2.0", OLDER)
    );
    // Loaded as whatever it exports (`plugin check`'s way), the same.
    let err = rt
        .load_any(&PluginSource::Path(path.clone()))
        .expect_err("refused");
    assert_eq!(
        err.to_string(),
        refusal(&path, "message-store", "0.2.0", OLDER)
    );
}

#[test]
fn plugin_check_refuses_a_0_2_0_component_at_load() {
    let path = guest(STORE_0_2_0);
    let report = run_check(&path);
    assert!(!report.passed());
    assert_eq!(report.checks.len(), 1, "{}", report.to_text());
    assert_eq!(report.checks[0].name, "load");
    assert!(!report.checks[0].passed);
    assert!(
        report.checks[0]
            .detail
            .contains(&refusal(&path, "message-store", "0.2.0", OLDER)),
        "{}",
        report.checks[0].detail
    );
}

/// A task run with a 0.2.0 store configured stops before it touches a task: no request reaches
/// the model, the task stays queued, and the error names the setting, 0.2.0 and 1.0.0.
#[test]
fn a_run_with_a_0_2_0_component_is_refused_before_any_llm_call() {
    let llm = FakeLlm::start(vec![Reply::text("Done.", Some((10, 2)))]);
    let env = TestEnv::new();
    env.write_config(&format!(
        "{}plugins:\n  message_store: \"{}\"\n",
        config_yaml(&llm.base_url(), "openai", ""),
        guest(STORE_0_2_0).display()
    ));
    env.ctxhost(&["init"]).ok();
    let uuid = env
        .ctxhost(&["submit", "--prompt", "Say done."])
        .ok()
        .stdout()
        .trim()
        .to_string();
    let out = env.ctxhost(&["run", "--once", "--poll-ms", "20"]).fails();
    assert_eq!(out.code(), Some(2), "{}", out.stderr());
    let err = out.stderr();
    assert!(err.contains("plugins.message_store"), "{err}");
    assert!(
        err.contains("built against ctxhost:plugin@0.2.0")
            && err.contains("this host loads ctxhost:plugin@1.0.0"),
        "{err}"
    );
    assert!(llm.requests().is_empty(), "no request reached the model");
    let row = env.ctxhost(&["show", &uuid, "--json"]).ok().json()["task"].clone();
    assert_eq!(row["status"], "queued", "{row}");
}

/// The 0.2.0 fixture with its package version rewritten in place (`@0.2.0` → `@{version}`,
/// same length, in every name and in the embedded WIT), i.e. a component of that version.
fn component_of_version(dir: &Path, version: &str) -> PathBuf {
    assert_eq!(version.len(), "0.2.0".len());
    let mut out = std::fs::read(guest(STORE_0_2_0)).unwrap();
    let (from, to) = (b"@0.2.0".as_slice(), format!("@{version}"));
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
    let path = dir.join(format!("store-{version}.wasm"));
    std::fs::write(&path, out).unwrap();
    path
}

#[test]
fn every_other_version_is_refused_naming_its_version_and_1_0_0() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(&tmp.path().join("cache"));
    for (version, relation) in [
        ("0.1.0", OLDER),
        ("0.3.0", OLDER),
        ("1.1.0", NEWER),
        ("2.0.0", NEWER),
    ] {
        let path = component_of_version(tmp.path(), version);
        let err = rt
            .load(&PluginSource::Path(path.clone()), PluginKind::MessageStore)
            .expect_err("refused");
        assert!(
            matches!(err, RuntimeError::IncompatibleVersion { .. }),
            "{version}: {err}"
        );
        assert_eq!(
            err.to_string(),
            refusal(&path, "message-store", version, relation)
        );
        let report = run_check(&path);
        assert!(!report.passed());
        assert_eq!(report.checks.len(), 1, "{}", report.to_text());
        assert!(
            report.checks[0]
                .detail
                .contains(&refusal(&path, "message-store", version, relation)),
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
        .expect_err("refused");
    (path.display().to_string(), err.to_string())
}

#[test]
fn an_extra_function_in_an_imported_interface_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, err) = load_error(
        tmp.path(),
        "extra-function.wasm",
        &component_importing(
            "ctxhost:plugin/compressor@1.0.0",
            "ctxhost:plugin/llm@1.0.0",
            &["complete-stream"],
        ),
    );
    assert_eq!(
        err,
        format!(
            "component {path}: does not fit world compressor-plugin (ctxhost:plugin@1.0.0): this \
             component imports function `complete-stream` of ctxhost:plugin/llm@1.0.0, which \
             ctxhost:plugin@1.0.0 does not have: it was built against a newer or modified WIT; \
             this host loads ctxhost:plugin@1.0.0 and provides WASI 0.2.0 to 0.2.12; rebuild it \
             against wit/plugin.wit (1.0.0)"
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
            "ctxhost:plugin/compressor@1.0.0",
            "ctxhost:plugin/cache@1.0.0",
            &["get"],
        ),
    );
    assert_eq!(
        err,
        format!(
            "component {path}: does not fit world compressor-plugin (ctxhost:plugin@1.0.0): this \
             component imports ctxhost:plugin/cache@1.0.0, an interface ctxhost:plugin@1.0.0 does \
             not have (it has types, log, llm, message-store, compressor, request-format, \
             planning, history, strategy): it was built against a newer or modified WIT; this host loads \
             ctxhost:plugin@1.0.0 and provides WASI 0.2.0 to 0.2.12; rebuild it against \
             wit/plugin.wit (1.0.0)"
        )
    );
}

#[test]
fn an_import_of_another_wit_version_is_named_with_its_version() {
    let tmp = tempfile::tempdir().unwrap();
    for (version, relation) in [("0.3.0", OLDER), ("1.1.0", NEWER), ("2.0.0", NEWER)] {
        let (path, err) = load_error(
            tmp.path(),
            &format!("import-{version}.wasm"),
            &component_importing(
                "ctxhost:plugin/compressor@1.0.0",
                &format!("ctxhost:plugin/llm@{version}"),
                &["complete"],
            ),
        );
        assert_eq!(
            err,
            format!(
                "component {path}: does not fit world compressor-plugin (ctxhost:plugin@1.0.0): \
                 this component imports ctxhost:plugin/llm@{version}: it was built against \
                 ctxhost:plugin@{version}, {relation}; this host loads ctxhost:plugin@1.0.0 and \
                 provides WASI 0.2.0 to 0.2.12; rebuild it against wit/plugin.wit (1.0.0)"
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
            "ctxhost:plugin/message-store@1.0.0",
            "ctxhost:plugin/llm@1.0.0",
            &["complete"],
        ),
    )
    .unwrap();
    let err = runtime(&tmp.path().join("cache"))
        .load(&PluginSource::Path(path.clone()), PluginKind::MessageStore)
        .expect_err("refused");
    assert_eq!(
        err.to_string(),
        format!(
            "component {}: does not fit world message-store-plugin (ctxhost:plugin@1.0.0): this \
             component imports ctxhost:plugin/llm@1.0.0, which ctxhost does not provide to a \
             message-store-plugin (only a compressor or a strategy (worlds compressor-plugin, \
             strategy-plugin) may import `llm`)",
            path.display()
        )
    );
}
