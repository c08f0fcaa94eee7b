//! In-memory baseline for the context benchmarks (`scripts/bench-rss.sh`): builds one
//! OpenAI chat request the way an agent that keeps its conversation in memory does, so its
//! peak RSS can be set next to a ctxhost task process building the same request from files.
//!
//! ```text
//! cargo run -p ctxhost --example inmem_request -- MESSAGES_JSONL REQUEST_JSON [--model M] [--max-tokens N]
//! ```
//! Reads every line of MESSAGES_JSONL (one chat message per line, ctxhost's current.jsonl
//! shape) into a `Vec<serde_json::Value>`, builds the request body as a `Value`, serialises it
//! and writes it to REQUEST_JSON. Prints `messages=N bytes=B seconds=S` on stdout. Measure
//! its memory with `/usr/bin/time -v` (Maximum resident set size).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "bench_support/inmem.rs"]
mod inmem;

use std::path::PathBuf;
use std::time::Instant;

fn main() -> Result<(), String> {
    let mut positional = Vec::new();
    let mut model = "bench-model".to_string();
    let mut max_tokens = Some(1024u32);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--model" => model = args.next().ok_or("--model needs a value")?,
            "--max-tokens" => {
                let v = args.next().ok_or("--max-tokens needs a value")?;
                max_tokens = Some(v.parse().map_err(|e| format!("--max-tokens {v:?}: {e}"))?);
            }
            "-h" | "--help" => {
                println!(
                    "usage: inmem_request MESSAGES_JSONL REQUEST_JSON [--model M] [--max-tokens N]"
                );
                return Ok(());
            }
            other if other.starts_with('-') => {
                return Err(format!("unknown option {other:?} (try --help)"));
            }
            _ => positional.push(PathBuf::from(a)),
        }
    }
    let [messages, request] = positional.as_slice() else {
        return Err("expected MESSAGES_JSONL REQUEST_JSON (try --help)".into());
    };
    let start = Instant::now();
    let built = inmem::build_request(messages, request, &model, max_tokens)?;
    println!(
        "messages={} bytes={} seconds={:.3}",
        built.messages,
        built.bytes,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
