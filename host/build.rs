//! Builds the guest components (`guest-components/`, its own cargo workspace) for
//! `wasm32-wasip2` so that `cargo build` is the one command that builds host and components.
//!
//! The guests go to `<target>/<profile>/wasm-guests/` (not the host's target dir itself: a
//! nested cargo on the same directory deadlocks on its lock). `CTXHOST_GUEST_DIR` is set for
//! the host crate to the folder holding the `.wasm` files, which are embedded as `builtin:`
//! plugins.

// A build script reports a failure by panicking with the message: unwrap/expect are its way.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir
        .parent()
        .expect("host/ has a parent")
        .to_path_buf();
    let guests = root.join("guest-components");
    for watched in [
        "guest-components",
        "wit",
        "crates/ctxhost-format",
        "crates/ctxhost-plugin",
    ] {
        let p = root.join(watched);
        println!("cargo:rerun-if-changed={}", p.display());
    }
    browser_test_cfg();
    prometheus_test_cfg();
    componentize_py_cfg();
    componentize_js_cfg(&root);
    schemathesis_cfg(&root);
    mcp_inspector_cfg(&root);

    // The PostgreSQL variants of the store tests run when a test server is available
    // (CTXHOST_TEST_DATABASE_URL) and in CI (CI=true), where a missing server must fail them;
    // elsewhere they are built `#[ignore]`d, so they show as ignored, never as passed.
    println!("cargo::rustc-check-cfg=cfg(ctxhost_pg_tests)");
    println!("cargo:rerun-if-env-changed=CTXHOST_TEST_DATABASE_URL");
    println!("cargo:rerun-if-env-changed=CI");
    let pg_url = std::env::var_os("CTXHOST_TEST_DATABASE_URL").is_some_and(|v| !v.is_empty());
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    if pg_url || ci {
        println!("cargo:rustc-cfg=ctxhost_pg_tests");
    }

    // The object-store tests (task directories in a bucket, host/src/remote) run against the
    // S3 test server (CTXHOST_TEST_S3_URL, printed by scripts/test-s3.sh) and in CI; elsewhere
    // they are built `#[ignore]`d.
    println!("cargo::rustc-check-cfg=cfg(ctxhost_s3_tests)");
    println!("cargo:rerun-if-env-changed=CTXHOST_TEST_S3_URL");
    let s3_url = std::env::var_os("CTXHOST_TEST_S3_URL").is_some_and(|v| !v.is_empty());
    if s3_url || ci {
        println!("cargo:rustc-cfg=ctxhost_s3_tests");
    }

    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    vendored_sdk(&root, &out_dir);
    // OUT_DIR = <target>/<profile>/build/ctxhost-<hash>/out
    let profile_dir = out_dir
        .ancestors()
        .nth(3)
        .expect("OUT_DIR has the usual depth")
        .to_path_buf();
    let guest_target = profile_dir.join("wasm-guests");

    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .current_dir(&guests)
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--target-dir",
        ])
        .arg(&guest_target)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .output()
        .expect("run cargo for guest-components");
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let hint =
            if stderr.contains("wasm32-wasip2") && stderr.contains("target may not be installed") {
                "\nhint: run `rustup target add wasm32-wasip2`"
            } else {
                ""
            };
        panic!("building guest-components for wasm32-wasip2 failed:\n{stderr}{hint}");
    }
    let wasm_dir = guest_target.join("wasm32-wasip2").join("release");
    println!("cargo:rustc-env=CTXHOST_GUEST_DIR={}", wasm_dir.display());
}

/// `cfg(ctxhost_browser_test)` for the dashboard's browser test (tests/web_browser.rs): set when
/// Chromium is installed (`/usr/bin/chromium`, or the file `CTXHOST_CHROMIUM` names) or when
/// running in CI (`CI` set, not `false`/`0`: there a missing browser must fail the test, not skip
/// it). Without it the test is `#[ignore]`d. `/usr/bin` is watched (not the absent file, which
/// would rerun this script on every build), so installing Chromium flips it.
fn browser_test_cfg() {
    println!("cargo:rustc-check-cfg=cfg(ctxhost_browser_test)");
    println!("cargo:rerun-if-env-changed=CI");
    println!("cargo:rerun-if-env-changed=CTXHOST_CHROMIUM");
    println!("cargo:rerun-if-changed=/usr/bin");
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    let browser = std::env::var_os("CTXHOST_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if ci || browser.is_file() {
        println!("cargo:rustc-cfg=ctxhost_browser_test");
    }
}

/// `cfg(ctxhost_prometheus_test)` for the test with a real Prometheus (tests/all/metrics.rs):
/// set when Debian's `/usr/bin/prometheus` is installed or when running in CI (where a missing
/// one must fail the test). Without it the test is `#[ignore]`d. `/usr/bin` is watched, as for
/// Chromium.
fn prometheus_test_cfg() {
    println!("cargo:rustc-check-cfg=cfg(ctxhost_prometheus_test)");
    println!("cargo:rerun-if-env-changed=CI");
    println!("cargo:rerun-if-changed=/usr/bin");
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    if ci || std::path::Path::new("/usr/bin/prometheus").is_file() {
        println!("cargo:rustc-cfg=ctxhost_prometheus_test");
    }
}

/// `cfg(ctxhost_componentize_py)` for the Python plugin test (tests/all/plugin_sdk.rs): set when
/// componentize-py is found (the file `CTXHOST_COMPONENTIZE_PY` names, or `componentize-py` on
/// PATH) or when running in CI (where a missing componentize-py must fail the test). Without
/// it the test is `#[ignore]`d with the reason. Installing componentize-py after a build needs
/// `touch host/build.rs` (PATH itself is not watched: it changes too often).
fn componentize_py_cfg() {
    println!("cargo:rustc-check-cfg=cfg(ctxhost_componentize_py)");
    println!("cargo:rerun-if-env-changed=CTXHOST_COMPONENTIZE_PY");
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    let named =
        std::env::var_os("CTXHOST_COMPONENTIZE_PY").is_some_and(|p| PathBuf::from(p).is_file());
    let on_path = std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| dir.join("componentize-py").is_file())
    });
    if ci || named || on_path {
        println!("cargo:rustc-cfg=ctxhost_componentize_py");
    }
}

/// `cfg(ctxhost_componentize_js)` for the JavaScript plugin tests (tests/all/plugin_sdk.rs): set
/// when componentize-js is installed in the repository's node_modules (`npm ci`, package.json
/// pins it) or the file `CTXHOST_COMPONENTIZE_JS` names exists, or in CI (where a missing
/// componentize-js must fail the tests). Without it the tests are `#[ignore]`d with the reason.
/// Installing it after a build needs `touch host/build.rs` (node_modules is not watched: a
/// watched path that is missing would rerun this script on every build).
fn componentize_js_cfg(root: &std::path::Path) {
    println!("cargo:rustc-check-cfg=cfg(ctxhost_componentize_js)");
    println!("cargo:rerun-if-env-changed=CTXHOST_COMPONENTIZE_JS");
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    let named =
        std::env::var_os("CTXHOST_COMPONENTIZE_JS").is_some_and(|p| PathBuf::from(p).is_file());
    let installed = root.join("node_modules/.bin/componentize-js").exists();
    if ci || named || installed {
        println!("cargo:rustc-cfg=ctxhost_componentize_js");
    }
}

/// `cfg(ctxhost_schemathesis)` for the schemathesis run against the JSON API
/// (tests/all/api_clients.rs): set when schemathesis is installed where `.ci/run` puts it
/// (`.cache/schemathesis/bin/schemathesis`) or the file `CTXHOST_SCHEMATHESIS` names exists, or in
/// CI (where a missing one must fail the test). Without it the test is `#[ignore]`d with the
/// reason. Installing it after a build needs `touch host/build.rs`.
fn schemathesis_cfg(root: &std::path::Path) {
    println!("cargo:rustc-check-cfg=cfg(ctxhost_schemathesis)");
    println!("cargo:rerun-if-env-changed=CTXHOST_SCHEMATHESIS");
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    let named =
        std::env::var_os("CTXHOST_SCHEMATHESIS").is_some_and(|p| PathBuf::from(p).is_file());
    let installed = root.join(".cache/schemathesis/bin/schemathesis").is_file();
    if ci || named || installed {
        println!("cargo:rustc-cfg=ctxhost_schemathesis");
    }
}

/// `cfg(ctxhost_mcp_inspector)` for the MCP Inspector test (tests/all/api_clients.rs): set when
/// `npm ci` installed `@modelcontextprotocol/inspector` (package.json pins it) or in CI (where a
/// missing one must fail the test). Without it the test is `#[ignore]`d with the reason.
fn mcp_inspector_cfg(root: &std::path::Path) {
    println!("cargo:rustc-check-cfg=cfg(ctxhost_mcp_inspector)");
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    if ci || root.join("node_modules/.bin/mcp-inspector").exists() {
        println!("cargo:rustc-cfg=ctxhost_mcp_inspector");
    }
}

/// `$OUT_DIR/vendored_sdk.rs`: the SDK crate `crates/ctxhost-plugin` and its dependency
/// `crates/ctxhost-format` (Cargo.toml, `src/**`, `wit/**`) as one `&[(&str, &str)]` of
/// (path in a plugin project, text), each text an `include_str!` of the file, so `ctxhost plugin
/// new` writes them into a project as `vendor/…` (host/src/ops/plugin_new/mod.rs).
fn vendored_sdk(root: &std::path::Path, out_dir: &std::path::Path) {
    fn walk(dir: &std::path::Path, files: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, files);
            } else {
                files.push(path);
            }
        }
    }
    let mut text = String::from("&[\n");
    for (krate, folders) in [
        ("ctxhost-plugin", &["src", "wit"][..]),
        ("ctxhost-format", &["src"][..]),
    ] {
        let base = root.join("crates").join(krate);
        let mut files = vec![base.join("Cargo.toml")];
        for folder in folders {
            walk(&base.join(folder), &mut files);
        }
        for file in files {
            let relative = file.strip_prefix(&base).unwrap().to_str().unwrap();
            text.push_str(&format!(
                "    ({:?}, include_str!({:?})),\n",
                format!("vendor/{krate}/{relative}"),
                file.to_str().unwrap()
            ));
        }
    }
    text.push_str("]\n");
    std::fs::write(out_dir.join("vendored_sdk.rs"), text).unwrap();
}
