//! Benchmark (not a test): compressing a synthetic 100k-token history with each builtin
//! compressor, the fake `llm` import of the compression tests answering at once. Prints figures;
//! run with `scripts/bench-compression.sh` (`cargo bench -p ctxhost --bench compression
//! --profile dev`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[allow(dead_code)]
#[path = "../../tests/all/compression/fixture.rs"]
mod fixture;

use std::fs;
use std::time::Instant;

use ctxhost::compaction::{CompactionOutcome, compact_if_needed};
use fixture::*;

/// `(rchar, wchar)` of this process (/proc/self/io): bytes read and written through syscalls.
fn process_io() -> (u64, u64) {
    let text = fs::read_to_string("/proc/self/io").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (field("rchar:"), field("wchar:"))
}

/// Peak resident set size of this process (VmHWM), in KiB.
fn peak_rss_kib() -> u64 {
    let text = fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// One compression of a synthetic ~100k-token history (rounds of question, tool call, 1.2 kB
/// tool result, answer) with each compressor, the fake LLM answering at once. Prints wall time
/// without the LLM, the guest's peak linear memory, the process's peak RSS and the bytes read
/// and written during the step.
fn main() {
    for (kind, window) in [
        (Kind::Summarizer, None),
        (Kind::Summarizer, Some(8_192)),
        (Kind::Masking, None),
    ] {
        let mut task = Task::new("You are a coding agent.");
        let mut round = 0;
        while task.tokens() < 100_000 {
            round += 1;
            let id = format!("call_{round}");
            task.add(&user(&format!(
                "step {round}: read src/module_{round}.rs and check it"
            )));
            task.add(&calls(&[&id], "read_text_file"));
            task.add(&result(
                &id,
                "read_text_file",
                &"pub fn item() -> Result<u32, Error> { Ok(42) }\n".repeat(25),
            ));
            task.add(&assistant(&format!(
                "module_{round} looks fine; moving on."
            )));
        }
        let tokens = task.tokens();
        let messages = task.context().len();
        let context_bytes = task.bytes("current.jsonl").len();
        let mut cfg = config(window.unwrap_or(tokens * 10 / 8), 5);
        cfg.reserve_output_tokens = 1024;
        let llm = FakeLlm::new(task.dir.path());
        let mut compressor = task.compressor(kind, &llm);
        let (read0, written0) = process_io();
        let started = Instant::now();
        let outcome = compact_if_needed(
            &mut task.store,
            &mut compressor,
            &ctxhost::task_dir::TaskDir::open(task.dir.path()).expect("task dir"),
            &cfg,
            &|| TS.to_string(),
        );
        let wall = started.elapsed();
        let (read1, written1) = process_io();
        let llm_time = llm.state.lock().unwrap().time;
        let requests = llm.calls().len();
        assert!(
            matches!(outcome, Ok(CompactionOutcome::Compressed { .. })),
            "{kind:?}: {outcome:?}"
        );
        println!(
            "{kind:?} (window {} tokens): {messages} messages, {tokens} tokens, {:.1} MB → {} tokens; \
             {:.1} ms without the LLM ({requests} request(s), {:.1} ms in the fake LLM); guest memory peak {:.1} MiB; \
             process peak RSS {:.1} MiB; read {:.1} MB, written {:.1} MB",
            cfg.context_length,
            context_bytes as f64 / 1e6,
            task.tokens(),
            (wall - llm_time).as_secs_f64() * 1e3,
            llm_time.as_secs_f64() * 1e3,
            compressor.memory_peak_bytes() as f64 / (1 << 20) as f64,
            peak_rss_kib() as f64 / 1024.0,
            (read1 - read0) as f64 / 1e6,
            (written1 - written0) as f64 / 1e6,
        );
    }
}
