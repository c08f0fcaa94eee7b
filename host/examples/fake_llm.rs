//! The tests' fake OpenAI/Ollama/Anthropic server as a standalone program, for benchmarks and
//! scripts.
//!
//! ```text
//! cargo run -p ctxhost --example fake_llm -- [--port 8090] [--reply "Done."] [--delay-ms 0]
//! ```
//! Answers every chat request with `--reply` as the assistant's text (usage 10 + 2 tokens),
//! after `--delay-ms`; prints `http://127.0.0.1:PORT` (the `llm.base_url` value) on stdout once
//! listening, then runs until killed. Per-request lines go to stderr.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/all/support/anthropic_api.rs"]
mod anthropic_api;
#[path = "../../tests/all/support/api_schema.rs"]
mod api_schema;
#[path = "../../tests/all/support/fake_llm.rs"]
mod fake_llm;
#[path = "../../tests/all/support/http.rs"]
mod http;
#[path = "../../tests/all/support/openai_api.rs"]
mod openai_api;
#[path = "../../tests/all/support/responses_api.rs"]
mod responses_api;

use std::time::Duration;

use fake_llm::{FakeLlm, Reply};

fn main() -> Result<(), String> {
    let mut port = 0u16;
    let mut reply = "Done.".to_string();
    let mut delay_ms = 0u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--port" => {
                port = value("--port")?
                    .parse()
                    .map_err(|e| format!("--port: {e}"))?
            }
            "--reply" => reply = value("--reply")?,
            "--delay-ms" => {
                delay_ms = value("--delay-ms")?
                    .parse()
                    .map_err(|e| format!("--delay-ms: {e}"))?
            }
            "-h" | "--help" => {
                println!("usage: fake_llm [--port N] [--reply TEXT] [--delay-ms N]");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    let llm = FakeLlm::start_on(&format!("127.0.0.1:{port}"), vec![])
        .map_err(|e| format!("cannot listen on 127.0.0.1:{port}: {e}"))?;
    let text = Reply::text(reply, Some((10, 2)));
    llm.set_default(if delay_ms > 0 {
        Reply::delay(Duration::from_millis(delay_ms), text)
    } else {
        text
    });
    println!("{}", llm.base_url());
    let mut seen = 0;
    loop {
        std::thread::sleep(Duration::from_millis(200));
        for r in llm.requests_from(seen) {
            eprintln!(
                "fake_llm: #{} {} {} ({} bytes)",
                r.index,
                r.method,
                r.path,
                r.raw_body.len()
            );
            seen += 1;
        }
    }
}
