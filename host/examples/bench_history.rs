//! Memory and time of the history tools (`history_search`, `history_read`, issue 27) over a
//! large history: peak RSS must stay flat whatever the size of messages.jsonl.
//!
//! ```text
//! cargo build -p ctxhost --example bench_history
//! target/debug/examples/bench_history build --mib 1024 --dir /tmp/h1g
//! /usr/bin/time -v target/debug/examples/bench_history query --dir /tmp/h1g
//! ```
//! `build` writes a task directory with a messages.jsonl of about MIB MiB (1 KiB messages:
//! user / assistant calls / tool results, every 500th result cut with its full text in
//! tool-results/), three summaries, and facts planted at seq 3 (a user constraint) and in the
//! first cut result (an error line). `query` runs, in one process: a word search and a
//! regular-expression search that must scan the whole history (their one match is at its
//! start), a search with many matches (limit 100), `history_read` at the start, the middle
//! and the end; it prints each one's time and what it found. Run `query` under GNU time for
//! the peak RSS (`scripts/bench-history.sh` does both sizes).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::Instant;

use ctxhost::history::{self, Query};
use ctxhost::task_dir::TaskDir;
use ctxhost_format::{ChatMessage, HistoryLine, ToolCall};

const ERROR_LINE: &str = "error[E0425]: cannot find value `retry_budget` in this scope";

fn build(dir: &std::path::Path, mib: u64) {
    std::fs::create_dir_all(dir.join("tool-results")).unwrap();
    let mut out = BufWriter::with_capacity(
        1 << 20,
        std::fs::File::create(dir.join("messages.jsonl")).unwrap(),
    );
    let target = mib * 1024 * 1024;
    let (mut written, mut seq, mut tool_seq) = (0u64, 0u64, 0u64);
    let filler = "lorem ipsum dolor sit amet ".repeat(36);
    let line = |m: &ChatMessage, seq: u64, out: &mut BufWriter<std::fs::File>| -> u64 {
        let text =
            serde_json::to_string(&HistoryLine::of(seq, m, "2026-12-01T00:00:00.000Z")).unwrap();
        out.write_all(text.as_bytes()).unwrap();
        out.write_all(b"\n").unwrap();
        text.len() as u64 + 1
    };
    seq += 1;
    written += line(
        &ChatMessage::text("system", "You are a coding agent."),
        seq,
        &mut out,
    );
    seq += 1;
    written += line(&ChatMessage::text("user", "Fix the build."), seq, &mut out);
    seq += 1;
    written += line(
        &ChatMessage::text(
            "user",
            "Constraint: do not change the public API of src/engine/cache.rs.",
        ),
        seq,
        &mut out,
    );
    while written < target {
        let call = ToolCall::new(
            format!("call_{seq}"),
            "read_file",
            format!(r#"{{"path":"src/file_{seq}.rs"}}"#),
        );
        seq += 1;
        written += line(
            &ChatMessage::assistant_calls(vec![call.clone()]),
            seq,
            &mut out,
        );
        tool_seq += 1;
        let content = if tool_seq % 500 == 1 {
            let full = format!(
                "{}\n{}\n --> src/net/retry_{tool_seq}.rs:41:9\n",
                filler.repeat(8),
                if tool_seq == 1 {
                    ERROR_LINE
                } else {
                    "warning: unused"
                }
            );
            std::fs::write(dir.join(format!("tool-results/{tool_seq}.txt")), &full).unwrap();
            format!(
                "{}\n\n[output cut: showing 100 of {} characters; the full output is in tool-results/{tool_seq}.txt]",
                &full[..100],
                full.len()
            )
        } else {
            format!("file {seq}: {filler}")
        };
        seq += 1;
        written += line(&ChatMessage::tool_result(&call, content), seq, &mut out);
    }
    out.flush().unwrap();
    let mut summaries = String::new();
    for (id, end) in [(1u64, seq / 4), (2, seq / 2), (3, 3 * seq / 4)] {
        summaries.push_str(
            &serde_json::json!({"id": id, "start_seq": 2, "end_seq": end, "summary": format!("summary {id}: the agent read files."),
                "original_tokens": 1000, "summary_tokens": 10, "ratio": 0.01, "timestamp": "2026-12-01T00:00:00.000Z"})
            .to_string(),
        );
        summaries.push('\n');
    }
    std::fs::write(dir.join("summaries.jsonl"), summaries).unwrap();
    println!(
        "built {} with {seq} messages, {} MiB",
        dir.display(),
        written >> 20
    );
}

fn query(dir: &std::path::Path) {
    let dir = TaskDir::open(dir).unwrap();
    let timed = |what: &str, f: &dyn Fn() -> String| {
        let t = Instant::now();
        let r = f();
        println!("{what}: {:.2} s — {r}", t.elapsed().as_secs_f64());
    };
    timed("search words 'retry_budget' (whole history)", &|| {
        let f = history::search(&dir, &Query::words("retry_budget").unwrap(), 20).unwrap();
        format!(
            "{} match(es) in {} messages, first at seq {}",
            f.total, f.messages, f.hits[0].seq
        )
    });
    timed("search regex 'public API of \\S+' (whole history)", &|| {
        let f = history::search(&dir, &Query::regex(r"public API of \S+").unwrap(), 20).unwrap();
        format!("{} match(es), seq {}", f.total, f.hits[0].seq)
    });
    timed(
        "search words 'src/file_' limit 100 (every call matches)",
        &|| {
            let f = history::search(&dir, &Query::words("src/file_").unwrap(), 100).unwrap();
            format!(
                "{} match(es), {} kept, newest seq {}",
                f.total,
                f.hits.len(),
                f.hits[0].seq
            )
        },
    );
    let last = {
        let r = history::read(
            &dir,
            history::Position::line(u64::MAX - 1),
            u64::MAX - 1,
            history::Budget::Tokens(100),
        )
        .unwrap();
        r.last_seq_seen
    };
    for (name, from) in [
        ("start", 1),
        ("middle", last / 2),
        ("end", last.saturating_sub(5)),
    ] {
        timed(
            &format!("read from seq {from} ({name}), 4,000-token budget"),
            &|| {
                let r = history::read(
                    &dir,
                    history::Position::line(from),
                    from + 1000,
                    history::Budget::Tokens(4000),
                )
                .unwrap();
                format!(
                    "seqs {:?}, {} bytes, continue from {:?}",
                    r.seqs,
                    r.text.len(),
                    r.next
                )
            },
        );
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let phase = args.next().unwrap_or_default();
    let (mut mib, mut dir) = (1024u64, None::<PathBuf>);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--mib" => {
                mib = args
                    .next()
                    .expect("--mib N")
                    .parse()
                    .expect("--mib: a number")
            }
            "--dir" => dir = Some(args.next().expect("--dir PATH").into()),
            other => panic!(
                "unknown argument {other:?}; usage: bench_history build|query [--mib N] --dir PATH"
            ),
        }
    }
    let dir = dir.expect("--dir PATH is required");
    match phase.as_str() {
        "build" => build(&dir, mib),
        "query" => query(&dir),
        _ => panic!("usage: bench_history build|query [--mib N] --dir PATH"),
    }
}
