//! Request build benchmark (divan), issue 3: building request.json from current.jsonl through
//! the format component, next to copying the file and to an in-memory build.
//!
//! Over one synthetic current.jsonl of `CTXHOST_BENCH_MIB` MiB (default 16; content from
//! host/examples/bench_support/history.rs):
//! - `write_request`: builtin:openai-chat `write-request` (current.jsonl → request.json,
//!   streaming, in the wasmtime sandbox), instance created once, as a task process does;
//! - `fs_copy`: `std::fs::copy` of the same file (the floor);
//! - `in_memory`: every line parsed into a `Vec<serde_json::Value>`, body built, serialised,
//!   written (host/examples/bench_support/inmem.rs).
//!
//! Divan prints the median time per build and the throughput (bytes of current.jsonl).
//!
//! Run: `cargo bench -p ctxhost --bench context` (release-based bench profile), or
//! `cargo bench -p ctxhost --profile dev --bench context` (quick to build; the unoptimised
//! host glue then dominates write_request). `CTXHOST_BENCH_MIB=64 cargo bench ...` for a
//! larger file. scripts/bench-request-build.sh measures the same at 256 MiB.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
#[path = "../examples/bench_support/history.rs"]
mod history;
#[allow(dead_code)]
#[path = "../examples/bench_support/inmem.rs"]
mod inmem;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use ctxhost::runtime::{PluginKind, PluginSource, RequestConfig, Runtime, RuntimeLimits};
use divan::Bencher;
use divan::counter::BytesCount;

fn main() {
    divan::main();
    if let Some((dir, _)) = TASK.get() {
        let _ = std::fs::remove_dir_all(dir.parent().expect("task dir has a parent"));
    }
}

/// The task directory with the synthetic history and its current.jsonl size.
static TASK: OnceLock<(PathBuf, u64)> = OnceLock::new();

/// [`TASK`], generated on first use under the system temp dir (removed at the end of `main`).
fn task() -> &'static (PathBuf, u64) {
    TASK.get_or_init(|| {
        let mib: u64 = std::env::var("CTXHOST_BENCH_MIB")
            .ok()
            .map(|v| v.parse().expect("CTXHOST_BENCH_MIB: whole MiB"))
            .unwrap_or(16);
        let root =
            std::env::temp_dir().join(format!("ctxhost-bench-context.{}", std::process::id()));
        let dir = root.join("task");
        let g = history::generate(&dir, mib * 1024 * 1024, 1).expect("synthetic history");
        (dir, g.current_bytes)
    })
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn write_request(bencher: Bencher) {
    let (dir, bytes) = task();
    let cache = dir.join("../cache");
    let rt = Runtime::new(
        &cache,
        RuntimeLimits {
            call_timeout: Duration::from_secs(600),
            ..Default::default()
        },
    )
    .expect("runtime");
    let source: PluginSource = "builtin:openai-chat".parse().expect("builtin");
    let plugin = rt.load(&source, PluginKind::RequestFormat).expect("load");
    let mut format = rt.request_format(&plugin, dir).expect("instantiate");
    let config = RequestConfig {
        model: "bench-model".into(),
        messages_file: "current.jsonl".into(),
        request_file: "request.json".into(),
        tools_file: None,
        max_output_tokens: Some(1024),
        temperature: None,
        stream: false,
        stream_usage: false,
        reasoning: None,
    };
    bencher
        .counter(BytesCount::new(*bytes))
        .bench_local(|| format.write_request(&config).expect("write-request"));
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn fs_copy(bencher: Bencher) {
    let (dir, bytes) = task();
    let (from, to) = (dir.join("current.jsonl"), dir.join("copy.jsonl"));
    bencher
        .counter(BytesCount::new(*bytes))
        .bench(|| std::fs::copy(&from, &to).expect("copy"));
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn in_memory(bencher: Bencher) {
    let (dir, bytes) = task();
    let (from, to) = (dir.join("current.jsonl"), dir.join("request.inmem.json"));
    bencher.counter(BytesCount::new(*bytes)).bench(|| {
        inmem::build_request(&from, &to, "bench-model", Some(1024)).expect("in-memory build")
    });
}
