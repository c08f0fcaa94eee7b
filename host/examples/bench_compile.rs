//! How long Cranelift takes to compile one component (a JavaScript or Python plugin carries
//! ~10 MB of interpreter) with the host's engine settings (parallel compilation on, `opt_level`
//! speed), with parallel compilation off, and with `opt_level` none: the issue-44 figure in
//! bench/README.md.
//!
//! `cargo run -p ctxhost --example bench_compile -- path/to/component.wasm`
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Instant;

fn main() {
    let path = std::env::args_os()
        .nth(1)
        .expect("usage: bench_compile COMPONENT.wasm");
    let wasm = std::fs::read(&path).unwrap();
    let settings: [(&str, bool, wasmtime::OptLevel); 3] = [
        (
            "host default (parallel, speed)",
            true,
            wasmtime::OptLevel::Speed,
        ),
        ("parallel off", false, wasmtime::OptLevel::Speed),
        ("opt-level none (parallel)", true, wasmtime::OptLevel::None),
    ];
    for (what, parallel, opt) in settings {
        let mut config = wasmtime::Config::new();
        config
            .epoch_interruption(true)
            .parallel_compilation(parallel)
            .cranelift_opt_level(opt);
        let engine = wasmtime::Engine::new(&config).unwrap();
        let started = Instant::now();
        let component = wasmtime::component::Component::new(&engine, &wasm).unwrap();
        let took = started.elapsed();
        let size = component.serialize().unwrap().len();
        println!(
            "{what}: {:.1} s, {} MB wasm -> {} MB machine code",
            took.as_secs_f64(),
            wasm.len() >> 20,
            size >> 20
        );
    }
}
