//! Message store harness (issue 14, P5): append N messages of ~1 KB through a message store
//! component, then compress once with a fake LLM; prints the time per append, the process's
//! peak RSS and the compression time, so the same workload can be run against other store and
//! compressor implementations.
//!
//! ```text
//! bench_store [--n 500,2000,8000] [--bytes 1024] [--store builtin:jsonl-store|PATH.wasm]
//!             [--compressor builtin:llm-summarizer|PATH.wasm] [--cache DIR]
//! ```
//!
//! Workload, for each N (each in a fresh child process, so peak RSS is that N's alone, and a
//! fresh temporary task directory):
//! 1. `open`, then `add-message` of a system prompt and N messages alternating `user` /
//!    `assistant`, each with `--bytes` bytes of text content (deterministic, with quotes,
//!    backslashes, newlines and non-ASCII characters, so JSON escaping is exercised), each
//!    call timed alone (the call through the component boundary, both appends included);
//! 2. one compaction through the host's own step (`ctxhost::compaction::compact_if_needed`):
//!    the compressor's `should-compress` and `compress` (window = the context's tokens × 1.25,
//!    threshold 0.7, keep the 5 most recent messages, 1024 tokens reserved for the reply), the
//!    host's checks of the new context, the summary appended by the store and current.jsonl
//!    replaced. The fake LLM answers every summary request at once with a fixed 60-word
//!    summary; its time (reading the request) is reported apart.
//!
//! Printed per N: median, 99th percentile and mean append time (µs), total append time,
//! process peak RSS (VmHWM, MiB) after the whole run, compression wall time with and without
//! the fake LLM, LLM requests, context tokens before and after. The components are loaded from
//! the compiled-component cache (`--cache`, default a temporary directory filled by a first
//! load that is not timed).
//!
//! Run: `cargo run --profile bench -p ctxhost --example bench_store` (figures to quote), or
//! `scripts/bench-all.sh`, which runs it with the other benchmarks of issue 14.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ctxhost::compaction::{CompactionOutcome, compact_if_needed};
use ctxhost::runtime::{
    Completion, CompressConfig, LlmImport, PluginKind, PluginSource, Runtime, RuntimeLimits,
};
use ctxhost::task_dir::TaskDir;
use ctxhost_format::ChatMessage;

const TIMESTAMP: &str = "2026-01-02T03:04:05.678Z";

fn main() {
    if let Err(e) = run() {
        eprintln!("bench_store: error: {e}");
        std::process::exit(1);
    }
}

struct Opts {
    counts: Vec<u64>,
    bytes: usize,
    store: String,
    compressor: String,
    cache: Option<PathBuf>,
    /// Internal: run one N in this process and print its result line.
    one: Option<u64>,
}

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        counts: vec![500, 2000, 8000],
        bytes: 1024,
        store: "builtin:jsonl-store".into(),
        compressor: "builtin:llm-summarizer".into(),
        cache: None,
        one: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--n" => {
                o.counts = value()?
                    .split(',')
                    .map(|n| n.trim().parse().map_err(|e| format!("--n {n:?}: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--bytes" => o.bytes = value()?.parse().map_err(|e| format!("--bytes: {e}"))?,
            "--store" => o.store = value()?,
            "--compressor" => o.compressor = value()?,
            "--cache" => o.cache = Some(PathBuf::from(value()?)),
            "--one" => o.one = Some(value()?.parse().map_err(|e| format!("--one: {e}"))?),
            "-h" | "--help" => {
                println!(
                    "usage: bench_store [--n 500,2000,8000] [--bytes 1024] [--store SOURCE] [--compressor SOURCE] [--cache DIR]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    if o.counts.is_empty() || o.counts.contains(&0) || o.bytes == 0 {
        return Err("--n needs counts ≥ 1 and --bytes ≥ 1".into());
    }
    Ok(o)
}

fn run() -> Result<(), String> {
    let o = parse_args()?;
    let tmp = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
    let cache = o.cache.clone().unwrap_or_else(|| tmp.path().join("cache"));
    if let Some(n) = o.one {
        return one(&o, n, &cache, &tmp.path().join("task"));
    }
    // Fill the compiled-component cache once (not timed), so every child loads from it.
    let rt = runtime(&cache)?;
    load(&rt, &o.store, PluginKind::MessageStore)?;
    load(&rt, &o.compressor, PluginKind::Compressor)?;
    drop(rt);

    println!(
        "message store {}, compressor {}, {} B messages; one process per N",
        o.store, o.compressor, o.bytes
    );
    println!(
        "{:>6} {:>11} {:>9} {:>9} {:>9} {:>10} {:>13} {:>14} {:>8} {:>17}",
        "N",
        "append p50",
        "p99",
        "mean",
        "total",
        "peak RSS",
        "compress",
        "compress -LLM",
        "LLM reqs",
        "tokens before→after"
    );
    let exe = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    for &n in &o.counts {
        let out = Command::new(&exe)
            .args(["--one", &n.to_string(), "--bytes", &o.bytes.to_string()])
            .args(["--store", &o.store, "--compressor", &o.compressor])
            .arg("--cache")
            .arg(&cache)
            .output()
            .map_err(|e| format!("running {}: {e}", exe.display()))?;
        if !out.status.success() {
            return Err(format!(
                "N={n} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        print!("{}", String::from_utf8_lossy(&out.stdout));
    }
    Ok(())
}

fn runtime(cache: &Path) -> Result<Runtime, String> {
    Runtime::new(
        cache,
        RuntimeLimits {
            call_timeout: Duration::from_secs(600),
            ..Default::default()
        },
    )
    .map_err(|e| format!("runtime: {e:#}"))
}

fn load(
    rt: &Runtime,
    source: &str,
    kind: PluginKind,
) -> Result<ctxhost::runtime::LoadedPlugin, String> {
    let source: PluginSource = source.parse().map_err(|e| format!("{source}: {e}"))?;
    rt.load(&source, kind).map_err(|e| e.to_string())
}

/// One N: append, compress, print one result row.
fn one(o: &Opts, n: u64, cache: &Path, task: &Path) -> Result<(), String> {
    std::fs::create_dir_all(task).map_err(|e| format!("{}: {e}", task.display()))?;
    let rt = runtime(cache)?;
    let store_plugin = load(&rt, &o.store, PluginKind::MessageStore)?;
    let compressor_plugin = load(&rt, &o.compressor, PluginKind::Compressor)?;
    let mut store = rt
        .message_store(&store_plugin, task)
        .map_err(|e| e.to_string())?;
    store.open().map_err(|e| e.to_string())?;
    store
        .add_message(
            &ChatMessage::text("system", "You are a coding agent."),
            TIMESTAMP,
        )
        .map_err(|e| e.to_string())?;

    let mut times = Vec::with_capacity(n as usize);
    for i in 0..n {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        let message = ChatMessage::text(role, text(i, o.bytes));
        let started = Instant::now();
        store
            .add_message(&message, TIMESTAMP)
            .map_err(|e| format!("add-message {i}: {e}"))?;
        times.push(started.elapsed());
    }
    let total: Duration = times.iter().sum();
    times.sort();
    let percentile = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];

    let before = store.current_token_count().map_err(|e| e.to_string())?;
    let llm = FakeLlm {
        task: task.to_path_buf(),
        time: Default::default(),
        requests: Default::default(),
    };
    let llm_time = llm.time.clone();
    let requests = llm.requests.clone();
    let mut compressor = rt
        .compressor(&compressor_plugin, task, Box::new(llm))
        .map_err(|e| e.to_string())?;
    let config = CompressConfig {
        context_length: before * 5 / 4,
        threshold: 0.7,
        keep_recent_messages: 5,
        // The host's default: half the threshold in tokens (`Config::keep_recent_tokens_for`).
        keep_recent_tokens: before * 5 / 4 * 7 / 20,
        summary_prompt: "Summarise the conversation so far:\n{messages}".into(),
        reserve_output_tokens: 1024,
    };
    let started = Instant::now();
    let dir = TaskDir::open(task).map_err(|e| format!("{}: {e}", task.display()))?;
    let outcome = compact_if_needed(&mut store, &mut compressor, &dir, &config, &|| {
        TIMESTAMP.to_string()
    })
    .map_err(|e| e.to_string())?;
    let compress = started.elapsed();
    let CompactionOutcome::Compressed { after_tokens, .. } = outcome else {
        return Err(format!(
            "N={n}: the context ({before} tokens) was not compressed"
        ));
    };
    let llm_time = *llm_time.lock().expect("fake LLM timer");
    let requests = *requests.lock().expect("fake LLM counter");

    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "{:>6} {:>8.1} µs {:>6.1} µs {:>6.1} µs {:>7.3} s {:>6.1} MiB {:>10.1} ms {:>11.1} ms {:>8} {:>8}→{}",
        n,
        us(percentile(0.5)),
        us(percentile(0.99)),
        us(total) / n as f64,
        total.as_secs_f64(),
        peak_rss_kib() as f64 / 1024.0,
        compress.as_secs_f64() * 1e3,
        (compress - llm_time).as_secs_f64() * 1e3,
        requests,
        before,
        after_tokens
    );
    Ok(())
}

/// `bytes` bytes of deterministic text for message `i`: words, quotes, a backslash, newlines,
/// non-ASCII letters.
fn text(i: u64, bytes: usize) -> String {
    const WORDS: &[&str] = &[
        "the",
        "file",
        "context",
        "line",
        "\"quoted\"",
        "path\\to",
        "naïve",
        "café",
        "fn",
        "let",
        "message",
        "tool",
        "上下文",
        "result",
        "\n",
        "\t",
        "ok",
    ];
    let mut s = format!("message {i}:");
    let mut k = i as usize;
    while s.len() < bytes {
        k = k.wrapping_mul(31).wrapping_add(7);
        s.push(' ');
        s.push_str(WORDS[k % WORDS.len()]);
    }
    let mut cut = bytes;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
    s
}

/// Answers every summary request at once with a fixed summary, after reading the request's
/// messages file (as a client sending it would); counts requests and its own time.
struct FakeLlm {
    task: PathBuf,
    time: std::sync::Arc<std::sync::Mutex<Duration>>,
    requests: std::sync::Arc<std::sync::Mutex<u64>>,
}

impl LlmImport for FakeLlm {
    fn complete(
        &mut self,
        messages_file: &str,
        _max: u32,
        _deadline: Instant,
    ) -> Result<Completion, String> {
        let started = Instant::now();
        if messages_file.contains("..") || messages_file.starts_with('/') {
            return Err(format!("{messages_file:?} is not a plain relative path"));
        }
        std::fs::read(self.task.join(messages_file))
            .map_err(|e| format!("reading {messages_file}: {e}"))?;
        *self.requests.lock().map_err(|e| e.to_string())? += 1;
        let summary = "The user asked the agent to read and review a series of files; the \
            agent read each one, quoted the relevant lines, found no errors and moved on to the \
            next file, keeping notes of paths, function names and open questions for later.";
        *self.time.lock().map_err(|e| e.to_string())? += started.elapsed();
        Ok(Completion {
            message: ChatMessage::text("assistant", summary),
            usage: None,
        })
    }
}

/// Peak resident set size of this process (VmHWM, KiB; 0 where /proc is missing).
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
