//! Context benchmarks of issue 3 (file-based context), driven by `scripts/bench-rss.sh` and
//! `scripts/bench-request-build.sh`.
//!
//! ```text
//! bench_context gen DIR --mib N [--seed S]
//!     Write a synthetic DIR/messages.jsonl + DIR/current.jsonl with current.jsonl ≥ N MiB
//!     (see bench_support/history.rs for the content). Prints messages, bytes and tokens.
//! bench_context build DIR [--runs N] [--cache DIR] [--no-inmem]
//!     Request build throughput over DIR/current.jsonl, in this process:
//!     - builtin:openai-chat `write-request` (current.jsonl → request.json, streaming, through
//!       the wasmtime runtime exactly as a task process calls it; the component is loaded and
//!       instantiated once, before timing);
//!     - std::fs::copy of current.jsonl (the floor: what `cp` costs);
//!     - the in-memory baseline (bench_support/inmem.rs: parse all lines into Values, build the
//!       body, serialise, write), unless --no-inmem.
//!     One untimed warm-up of each, then N timed runs (default 5); prints the median seconds and
//!     MB/s (10^6 bytes of current.jsonl per second) of each and the ratios.
//! ```
//! Run with `cargo run -p ctxhost --example bench_context -- ...` (debug profile: the
//! dependencies, wasmtime included, are built at opt-level 1, the guests in release).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "bench_support/history.rs"]
mod history;
#[path = "bench_support/inmem.rs"]
mod inmem;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ctxhost::runtime::{PluginKind, PluginSource, RequestConfig, Runtime, RuntimeLimits};

const MIB: u64 = 1024 * 1024;

fn main() {
    if let Err(e) = run() {
        eprintln!("bench_context: error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("gen") => gen_cmd(&args[1..]),
        Some("build") => build_cmd(&args[1..]),
        Some("-h" | "--help") | None => {
            println!(
                "usage: bench_context gen DIR --mib N [--seed S]\n       \
                 bench_context build DIR [--runs N] [--cache DIR] [--no-inmem]"
            );
            Ok(())
        }
        Some(other) => Err(format!("unknown command {other:?} (try --help)")),
    }
}

/// `--name value` options and one positional DIR.
struct Opts {
    dir: PathBuf,
    values: Vec<(String, String)>,
    flags: Vec<String>,
}

impl Opts {
    fn parse(args: &[String], with_value: &[&str], flags: &[&str]) -> Result<Opts, String> {
        let mut dir = None;
        let mut values = Vec::new();
        let mut found_flags = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if with_value.contains(&a.as_str()) {
                let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
                values.push((a.clone(), v.clone()));
            } else if flags.contains(&a.as_str()) {
                found_flags.push(a.clone());
            } else if a.starts_with('-') {
                return Err(format!("unknown option {a:?} (try --help)"));
            } else if dir.replace(PathBuf::from(a)).is_some() {
                return Err(format!("unexpected argument {a:?}: one DIR only"));
            }
        }
        Ok(Opts {
            dir: dir.ok_or("missing DIR (try --help)")?,
            values,
            flags: found_flags,
        })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.values
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn num(&self, name: &str, default: u64) -> Result<u64, String> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|e| format!("{name} {v:?}: {e}")),
        }
    }
}

fn gen_cmd(args: &[String]) -> Result<(), String> {
    let o = Opts::parse(args, &["--mib", "--seed"], &[])?;
    let mib = o.num("--mib", 0)?;
    if mib == 0 {
        return Err("gen needs --mib N (N ≥ 1)".into());
    }
    let start = Instant::now();
    let g = history::generate(&o.dir, mib * MIB, o.num("--seed", 1)?)
        .map_err(|e| format!("writing the history into {}: {e}", o.dir.display()))?;
    println!(
        "generated {}: {} messages, current.jsonl {} bytes ({:.1} MiB), messages.jsonl {} bytes, ~{} tokens, in {:.1} s",
        o.dir.display(),
        g.messages,
        g.current_bytes,
        g.current_bytes as f64 / MIB as f64,
        g.history_bytes,
        g.tokens,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The median of `runs` timings of `f` after one untimed warm-up.
fn median_of(runs: u64, mut f: impl FnMut() -> Result<(), String>) -> Result<Duration, String> {
    f()?;
    let mut times = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed());
    }
    times.sort();
    Ok(times[times.len() / 2])
}

fn mb_per_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

fn build_cmd(args: &[String]) -> Result<(), String> {
    let o = Opts::parse(args, &["--runs", "--cache"], &["--no-inmem"])?;
    let runs = o.num("--runs", 5)?.max(1);
    let dir = o.dir.as_path();
    let current = dir.join("current.jsonl");
    let in_bytes = std::fs::metadata(&current)
        .map_err(|e| format!("{}: {e}", current.display()))?
        .len();
    let cache = o
        .get("--cache")
        .map(PathBuf::from)
        .unwrap_or_else(|| dir.join(".bench-cache"));

    let t = Instant::now();
    let runtime = Runtime::new(
        &cache,
        RuntimeLimits {
            call_timeout: Duration::from_secs(600),
            ..Default::default()
        },
    )
    .map_err(|e| format!("runtime: {e:#}"))?;
    let source: PluginSource = "builtin:openai-chat"
        .parse()
        .map_err(|e| format!("builtin:openai-chat: {e}"))?;
    let plugin = runtime
        .load(&source, PluginKind::RequestFormat)
        .map_err(|e| e.to_string())?;
    let mut format = runtime
        .request_format(&plugin, dir)
        .map_err(|e| e.to_string())?;
    let setup = t.elapsed();

    let config = RequestConfig {
        model: "bench-model".into(),
        messages_file: "current.jsonl".into(),
        request_file: "request.json".into(),
        tools_file: None,
        max_output_tokens: Some(1024),
        temperature: None,
    };
    let mut out_bytes = 0;
    let component = median_of(runs, || {
        let info = format.write_request(&config).map_err(|e| e.to_string())?;
        out_bytes = info.bytes;
        Ok(())
    })?;
    let peak_guest = format.memory_peak_bytes();

    let copy_to = dir.join("copy.jsonl");
    let copy = median_of(runs, || {
        std::fs::copy(&current, &copy_to)
            .map(|_| ())
            .map_err(|e| format!("copying {}: {e}", current.display()))
    })?;
    let _ = std::fs::remove_file(&copy_to);

    println!(
        "input: {} ({} bytes, {:.1} MiB); {runs} timed runs after 1 warm-up, medians",
        current.display(),
        in_bytes,
        in_bytes as f64 / MIB as f64
    );
    println!(
        "  runtime start + load + instantiate builtin:openai-chat: {:.3} s (once, not in the figures below)",
        setup.as_secs_f64()
    );
    println!(
        "  write-request (builtin:openai-chat): {:8.3} s  {:8.1} MB/s  -> request.json {} bytes, guest memory peak {:.1} MiB",
        component.as_secs_f64(),
        mb_per_s(in_bytes, component),
        out_bytes,
        peak_guest as f64 / MIB as f64
    );
    println!(
        "  std::fs::copy (cp):                  {:8.3} s  {:8.1} MB/s",
        copy.as_secs_f64(),
        mb_per_s(in_bytes, copy)
    );
    if !o.flags.iter().any(|f| f == "--no-inmem") {
        let request = dir.join("request.inmem.json");
        let mut built = None;
        let inmem = median_of(runs, || {
            built = Some(inmem::build_request(
                &current,
                &request,
                "bench-model",
                Some(1024),
            )?);
            Ok(())
        })?;
        let _ = std::fs::remove_file(&request);
        println!(
            "  in-memory baseline (Vec<Value>):     {:8.3} s  {:8.1} MB/s  -> {} messages, {} bytes",
            inmem.as_secs_f64(),
            mb_per_s(in_bytes, inmem),
            built.map_or(0, |b| b.messages),
            built.map_or(0, |b| b.bytes)
        );
        println!(
            "  write-request / in-memory time ratio: {:.2}x",
            component.as_secs_f64() / inmem.as_secs_f64()
        );
    }
    println!(
        "  write-request / cp time ratio: {:.1}x",
        component.as_secs_f64() / copy.as_secs_f64()
    );
    let _ = std::fs::remove_file(dir.join("request.json"));
    Ok(())
}
