//! Runtime benchmark (divan): what loading and calling a plugin component costs.
//!
//! - `cold_compile`: Cranelift compile of the builtin jsonl-store (`Component::new`), what the
//!   first run on a machine pays;
//! - `cached_load`: `Runtime::load` from the compiled-component cache (checksum, deserialize,
//!   world check, pre-link), what every later task process pays;
//! - `instantiate`: a new sandboxed instance (Store, WASI context, `InstancePre::instantiate`);
//! - `add_message`: one `add-message` through the component boundary, including the guest's
//!   appends to messages.jsonl and current.jsonl.
//!
//! Run: `cargo bench -p ctxhost --bench runtime` (figures are medians per iteration).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use ctxhost::runtime::{PluginKind, PluginSource, Runtime, RuntimeLimits};
use ctxhost_format::ChatMessage;
use divan::Bencher;

fn main() {
    divan::main();
}

fn store_wasm() -> Vec<u8> {
    std::fs::read(Path::new(env!("CTXHOST_GUEST_DIR")).join("jsonl_store.wasm"))
        .expect("jsonl_store.wasm")
}

fn source() -> PluginSource {
    "builtin:jsonl-store".parse().expect("builtin")
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn cold_compile(bencher: Bencher) {
    let mut config = wasmtime::Config::new();
    config.epoch_interruption(true);
    let engine = wasmtime::Engine::new(&config).expect("engine");
    let wasm = store_wasm();
    bencher.bench(|| wasmtime::component::Component::new(&engine, &wasm).expect("compile"));
}

#[divan::bench(sample_count = 50)]
fn cached_load(bencher: Bencher) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let rt = Runtime::new(tmp.path(), RuntimeLimits::default()).expect("runtime");
    rt.load(&source(), PluginKind::MessageStore)
        .expect("first load fills the cache");
    let src = source();
    bencher.bench(|| {
        rt.load(&src, PluginKind::MessageStore)
            .expect("cached load")
    });
}

#[divan::bench(sample_count = 100)]
fn instantiate(bencher: Bencher) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let rt = Runtime::new(&tmp.path().join("cache"), RuntimeLimits::default()).expect("runtime");
    let plugin = rt.load(&source(), PluginKind::MessageStore).expect("load");
    bencher.bench(|| rt.message_store(&plugin, tmp.path()).expect("instantiate"));
}

#[divan::bench(sample_count = 200, sample_size = 20)]
fn add_message(bencher: Bencher) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let rt = Runtime::new(
        &tmp.path().join("cache"),
        RuntimeLimits {
            call_timeout: Duration::from_secs(30),
            ..Default::default()
        },
    )
    .expect("runtime");
    let plugin = rt.load(&source(), PluginKind::MessageStore).expect("load");
    let mut store = rt.message_store(&plugin, tmp.path()).expect("instantiate");
    store.open().expect("open");
    let message = ChatMessage::text("user", "x".repeat(1000));
    bencher.bench_local(|| {
        store
            .add_message(&message, "2026-01-02T03:04:05Z")
            .expect("add-message")
    });
}
