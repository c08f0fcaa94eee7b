//! Benchmark of the web dashboard (issue 17): page times and server memory for a task with a
//! large history next to a small one, in one run.
//!
//! ```text
//! bench_web [--mib N] [--small-kib K] [--runs R] [--dir DIR] [--bin PATH]
//! ```
//! 1. Writes a contexts/ tree in DIR (default: a temporary folder): two completed tasks whose
//!    messages.jsonl/current.jsonl are synthetic histories (`bench_support/history.rs`) of
//!    N MiB (default 256) and K KiB (default 256), each with an `llm_calls.jsonl` of one call per
//!    assistant tool call and a compression every 50 calls, and a tools.jsonl; rows in tasks.db.
//! 2. Starts two real servers (`ctxhost serve --bind 127.0.0.1:0`, the binary next to this
//!    example: build it first with `cargo build --workspace --all-targets`): one is asked only
//!    about the small task, the other only about the large one, so each one's memory says what
//!    its history costs.
//! 3. Times the first view of each task page (it reads the task's whole llm_calls.jsonl once),
//!    then requests each page R times (default 20) after one untimed warm-up, alternating between the
//!    two, and prints the median and the slowest time per page and task, then each server's
//!    resident memory (VmRSS) idle and after, and its peak (VmHWM), from /proc.
//!
//! Timings are figures to read, never pass/fail: the machine is shared.

#[path = "bench_support/history.rs"]
mod history;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ctxhost::db::{Db, NewTask, Status, StoreSpec, TaskKey, UsageDelta};
use ctxhost::lifecycle::{Claim, row};

const MIB: u64 = 1024 * 1024;
const BIG: &str = "0193a4b2-1c3d-7e8f-9a0b-0000000b1600";
const SMALL: &str = "0193a4b2-1c3d-7e8f-9a0b-000000005a11";

fn main() {
    if let Err(e) = run() {
        eprintln!("bench_web: error: {e}");
        std::process::exit(1);
    }
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn num(args: &[String], name: &str, default: u64) -> Result<u64, String> {
    arg(args, name).map_or(Ok(default), |v| {
        v.parse().map_err(|e| format!("{name} {v:?}: {e}"))
    })
}

/// llm_calls.jsonl and tools.jsonl for a generated history: one call per assistant message that
/// calls a tool, context tokens growing, a compression every 50 calls.
fn call_log(dir: &Path) -> Result<u64, String> {
    let messages = std::fs::File::open(dir.join("messages.jsonl")).map_err(|e| e.to_string())?;
    let mut calls = std::io::BufWriter::new(
        std::fs::File::create(dir.join("llm_calls.jsonl")).map_err(|e| e.to_string())?,
    );
    let mut tools = std::io::BufWriter::new(
        std::fs::File::create(dir.join("tools.jsonl")).map_err(|e| e.to_string())?,
    );
    let (mut n, mut context) = (0u64, 1000u64);
    for line in BufReader::new(messages).lines() {
        let line = line.map_err(|e| e.to_string())?;
        // The generator writes `"tool_calls"` only on assistant messages that call a tool.
        if !line.contains("\"tool_calls\"") {
            continue;
        }
        n += 1;
        context += 2000;
        writeln!(
            calls,
            "{{\"type\":\"call\",\"n\":{n},\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"context_tokens\":{context},\"context_length\":128000,\"threshold_tokens\":89600,\"request_bytes\":{},\"duration_ms\":900,\"status\":\"ok\"}}",
            context * 4
        )
        .map_err(|e| e.to_string())?;
        writeln!(
            tools,
            "{{\"seq\":{n},\"tool\":\"read_file\",\"args\":{{\"path\":\"src/module_{n}.rs\"}},\"result\":\"fn main() {{}}\",\"status\":\"success\",\"duration_ms\":12,\"timestamp\":\"2026-01-01T00:00:00.000Z\"}}"
        )
        .map_err(|e| e.to_string())?;
        if n % 50 == 0 {
            writeln!(
                calls,
                "{{\"type\":\"compression\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"before_tokens\":{context},\"after_tokens\":1000}}"
            )
            .map_err(|e| e.to_string())?;
            context = 1000;
        }
    }
    calls.flush().map_err(|e| e.to_string())?;
    tools.flush().map_err(|e| e.to_string())?;
    Ok(n)
}

fn make_task(db: &Db, contexts: &Path, uuid: &str, bytes: u64) -> Result<(u64, u64), String> {
    let dir = contexts.join("completed").join(uuid);
    let g = history::generate(&dir, bytes, 7).map_err(|e| e.to_string())?;
    let calls = call_log(&dir)?;
    db.insert_queued(&NewTask {
        uuid: uuid.into(),
        key: TaskKey {
            task_source: "local".into(),
            ..Default::default()
        },
        prompt: format!("benchmark task of {bytes} bytes"),
        user: None,
        llm_provider: "openai".into(),
        model: "bench-model".into(),
        context_length: 128_000,
        no_inherit: false,
        workspace: None,
    })
    .map_err(|e| e.to_string())?;
    // Rows only (the directory was written above, in completed/).
    let claim = Claim {
        pid: 1,
        hostname: "bench".into(),
        host_id: "bench".into(),
        worker_id: "bench:1:bench".into(),
        lease: Duration::from_secs(3600),
        llm_provider: "openai".into(),
        model: "bench-model".into(),
        context_length: 128_000,
    };
    row::claim(db, uuid, &claim).map_err(|e| e.to_string())?;
    let usage = UsageDelta {
        llm_calls: calls,
        tool_calls: calls,
        tokens: g.tokens,
        compressions: calls / 50,
        ..UsageDelta::default()
    };
    db.add_usage(uuid, &usage).map_err(|e| e.to_string())?;
    row::finish(db, uuid, claim.owner(), Status::Completed, None).map_err(|e| e.to_string())?;
    Ok((g.history_bytes, g.messages))
}

/// `(VmRSS, VmHWM)` of `pid` in KiB.
fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("usage: bench_web [--mib N] [--small-kib K] [--runs R] [--dir DIR] [--bin PATH]");
        return Ok(());
    }
    let mib = num(&args, "--mib", 256)?;
    let small_kib = num(&args, "--small-kib", 256)?;
    let runs = num(&args, "--runs", 20)?.max(1);
    let tmp;
    let root = match arg(&args, "--dir") {
        Some(d) => PathBuf::from(d),
        None => {
            tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
            tmp.path().to_path_buf()
        }
    };
    let bin = match arg(&args, "--bin") {
        Some(b) => PathBuf::from(b),
        None => std::env::current_exe()
            .map_err(|e| e.to_string())?
            .parent()
            .and_then(Path::parent)
            .map(|d| d.join("ctxhost"))
            .ok_or("cannot find the ctxhost binary")?,
    };
    if !bin.exists() {
        return Err(format!(
            "{} is missing: run `cargo build --workspace --all-targets` first (or pass --bin)",
            bin.display()
        ));
    }
    let contexts = root.join("contexts");
    let layout = ctxhost::layout::Layout::new(&contexts);
    layout.ensure().map_err(|e| e.to_string())?;
    let db = Db::open(&StoreSpec::Sqlite, &contexts).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let tasks = [
        (
            "small",
            SMALL,
            make_task(&db, &contexts, SMALL, small_kib * 1024)?,
        ),
        ("large", BIG, make_task(&db, &contexts, BIG, mib * MIB)?),
    ];
    println!(
        "generated in {:.1} s: {}",
        t.elapsed().as_secs_f64(),
        tasks
            .iter()
            .map(|(name, _, (bytes, msgs))| format!(
                "{name}: messages.jsonl {:.1} MiB, {msgs} messages",
                *bytes as f64 / MIB as f64
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );

    let start = |bin: &Path| -> Result<(Server, String), String> {
        let mut child = Command::new(bin)
            .args(["serve", "--bind", "127.0.0.1:0", "--contexts"])
            .arg(&contexts)
            .current_dir(&root)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let mut banner = String::new();
        BufReader::new(child.stdout.take().ok_or("no stdout")?)
            .read_line(&mut banner)
            .map_err(|e| e.to_string())?;
        let base = banner
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .ok_or_else(|| format!("no URL in {banner:?}"))?
            .trim_end_matches('/')
            .to_string();
        Ok((Server(child), base))
    };
    let (small_server, small_base) = start(&bin)?;
    let (large_server, large_base) = start(&bin)?;
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(120))
        .build();
    let get = |base: &str, path: &str| -> Result<usize, String> {
        let r = agent
            .get(&format!("{base}{path}"))
            .call()
            .map_err(|e| format!("GET {path}: {e}"))?;
        Ok(r.into_string().map_err(|e| e.to_string())?.len())
    };
    let (small_pid, large_pid) = (small_server.0.id(), large_server.0.id());
    let idle = (memory(small_pid), memory(large_pid));

    let pages = |uuid: &str, messages: u64, bytes: u64| -> Vec<(&'static str, String)> {
        vec![
            (
                "task page (latest messages, chart)",
                format!("/tasks/{uuid}"),
            ),
            (
                "first messages (from=0)",
                format!("/tasks/{uuid}?view=messages&from=0"),
            ),
            (
                "messages at the middle (seq=N/2)",
                format!("/tasks/{uuid}?view=messages&seq={}", messages / 2),
            ),
            (
                "messages from the middle byte (from=size/2)",
                format!("/tasks/{uuid}?view=messages&from={}", bytes / 2),
            ),
            (
                "current context (latest)",
                format!("/tasks/{uuid}?view=context"),
            ),
            ("tool calls (latest)", format!("/tasks/{uuid}?view=tools")),
            ("LLM calls (latest)", format!("/tasks/{uuid}?view=calls")),
            (
                "messages.jsonl window (middle)",
                format!("/tasks/{uuid}/files/messages.jsonl?from={}", bytes / 2),
            ),
            ("task list", "/tasks".to_string()),
            ("stats", "/stats".to_string()),
        ]
    };
    // The first view of a task reads its whole llm_calls.jsonl once (later views read only what
    // was appended): timed separately.
    let (_, su0, _) = &tasks[0];
    let (_, bu0, _) = &tasks[1];
    let t = Instant::now();
    get(&small_base, &format!("/tasks/{su0}"))?;
    let first_small = t.elapsed();
    let t = Instant::now();
    get(&large_base, &format!("/tasks/{bu0}"))?;
    let first_large = t.elapsed();
    println!(
        "\nfirst view of the task page (reads llm_calls.jsonl): small {:.1} ms, large {:.1} ms",
        first_small.as_secs_f64() * 1000.0,
        first_large.as_secs_f64() * 1000.0
    );
    println!(
        "\n| page | small: median | small: max | large: median | large: max | large / small | HTML (large) |\n|---|---|---|---|---|---|---|"
    );
    let (_, su, (sb, sm)) = &tasks[0];
    let (_, bu, (bb, bm)) = &tasks[1];
    for ((name, small_path), (_, big_path)) in
        pages(su, *sm, *sb).into_iter().zip(pages(bu, *bm, *bb))
    {
        get(&small_base, &small_path)?;
        let html = get(&large_base, &big_path)?;
        let (mut ts, mut tb) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let t = Instant::now();
            get(&small_base, &small_path)?;
            ts.push(t.elapsed());
            let t = Instant::now();
            get(&large_base, &big_path)?;
            tb.push(t.elapsed());
        }
        ts.sort();
        tb.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let (ms_s, ms_b) = (ms(ts[ts.len() / 2]), ms(tb[tb.len() / 2]));
        println!(
            "| {name} | {ms_s:.1} ms | {:.1} ms | {ms_b:.1} ms | {:.1} ms | {:.2}× | {:.0} KiB |",
            ms(ts[ts.len() - 1]),
            ms(tb[tb.len() - 1]),
            ms_b / ms_s,
            html as f64 / 1024.0
        );
    }
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "\n| server | history | VmRSS idle | VmRSS after | peak VmHWM |\n|---|---|---|---|---|"
    );
    for (name, pid, idle, bytes) in [
        ("small", small_pid, idle.0, *sb),
        ("large", large_pid, idle.1, *bb),
    ] {
        let after = memory(pid);
        println!(
            "| {name} (pid {pid}) | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.1} MiB |",
            bytes as f64 / MIB as f64,
            mib(idle.0),
            mib(after.0),
            mib(after.1)
        );
    }
    drop(small_server);
    drop(large_server);
    Ok(())
}
