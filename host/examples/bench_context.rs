//! Context benchmarks of issue 3 (file-based context), driven by `scripts/bench-rss.sh` and
//! `scripts/bench-request-build.sh`.
//!
//! ```text
//! bench_context gen DIR --mib N [--seed S] [--checkpoint] [--cache DIR]
//!     Write a synthetic DIR/messages.jsonl + DIR/current.jsonl with current.jsonl ≥ N MiB
//!     (see bench_support/history.rs for the content). Prints messages, bytes and tokens.
//!     With --checkpoint, then open the history once as a task process that ran on it did
//!     (builtin:jsonl-store's `open`, the host's history counts), which leaves the checkpoints
//!     a paused task has (store_checkpoint.json, history_checkpoint.json,
//!     context_checkpoint.json); timed apart.
//! bench_context build DIR [--runs N] [--cache DIR] [--format SOURCE]... [--no-inmem]
//!     Request build throughput over DIR/current.jsonl, in this process:
//!     - `write-request` of each request format (`--format`, repeatable: `builtin:NAME` or a
//!       .wasm path, e.g. an older build to compare with; default: builtin:openai-chat,
//!       builtin:ollama-chat, builtin:prompted-tools), current.jsonl → request.json, streaming,
//!       through the wasmtime runtime exactly as a task process calls it (each component loaded
//!       and instantiated once, before timing);
//!     - std::fs::copy of current.jsonl (the floor: what `cp` costs);
//!     - the same validation and copy as builtin:openai-chat's, run natively in this process
//!       (`ctxhost_format::stream::copy_chat_array`): what the component boundary costs;
//!     - the in-memory baseline (bench_support/inmem.rs: parse all lines into Values, build the
//!       body, serialise, write), unless --no-inmem.
//!     One untimed warm-up of each, then N rounds timing each once (interleaved, so load on a
//!     shared machine hits all alike; default 5); prints the median wall time, MB/s (10^6
//!     bytes of current.jsonl per second), throughput as a percentage of std::fs::copy's, and
//!     the same for the process's CPU time (all threads, user + system), which leaves out the
//!     time spent waiting for a CPU on a busy machine.
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
                "usage: bench_context gen DIR --mib N [--seed S] [--checkpoint] [--cache DIR]\n       \
                 bench_context build DIR [--runs N] [--cache DIR] [--format SOURCE]... [--no-inmem]"
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
    let o = Opts::parse(args, &["--mib", "--seed", "--cache"], &["--checkpoint"])?;
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
    if o.flags.iter().any(|f| f == "--checkpoint") {
        let cache = o
            .get("--cache")
            .map(PathBuf::from)
            .unwrap_or_else(|| o.dir.join(".bench-cache"));
        let start = Instant::now();
        let runtime = Runtime::new(
            &cache,
            RuntimeLimits {
                call_timeout: Duration::from_secs(600),
                // A generated history of 1 GiB is two 1 GiB files: over the default budget.
                task_dir_bytes: None,
                ..Default::default()
            },
        )
        .map_err(|e| format!("runtime: {e:#}"))?;
        let plugin = runtime
            .load(
                &"builtin:jsonl-store".parse().map_err(|e| format!("{e}"))?,
                PluginKind::MessageStore,
            )
            .map_err(|e| e.to_string())?;
        let mut store = runtime
            .message_store(&plugin, &o.dir)
            .map_err(|e| e.to_string())?;
        let stats = store
            .open()
            .map_err(|e| format!("message store open: {e:#}"))?;
        drop(store);
        let task_dir = ctxhost::task_dir::TaskDir::open(&o.dir)
            .map_err(|e| format!("{}: {e}", o.dir.display()))?;
        let counts = ctxhost::task::HistoryCounts::open(&task_dir)
            .map_err(|e| format!("history counts: {e:#}"))?;
        // The context check a paused task saved (context_checkpoint.json).
        let mut check = ctxhost::invariants::context_check::ContextCheck::default();
        check
            .check(&task_dir, "current.jsonl", true)
            .map_err(|e| format!("context check: {e}"))?;
        check
            .save(&task_dir)
            .map_err(|e| format!("context checkpoint: {e}"))?;
        println!(
            "checkpointed: {} history lines, {} context messages, ~{} tokens, {} agent steps, in {:.1} s",
            stats.history_count,
            stats.current_count,
            stats.current_tokens,
            counts.stats().agent_steps,
            start.elapsed().as_secs_f64()
        );
        if let Some(dir) = o
            .get("--cache")
            .is_none()
            .then(|| o.dir.join(".bench-cache"))
        {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    Ok(())
}

/// One timed item of `build`.
struct Item<'a> {
    name: String,
    run: Box<dyn FnMut() -> Result<String, String> + 'a>,
    /// Wall-clock time of each run.
    times: Vec<Duration>,
    /// CPU time of the whole process (every thread, user + system) during each run: on a
    /// machine shared with other work, the time waiting for a CPU is left out.
    cpu: Vec<Duration>,
    /// What the last run reported (output size, ...).
    note: String,
}

impl<'a> Item<'a> {
    fn new(name: String, run: Box<dyn FnMut() -> Result<String, String> + 'a>) -> Self {
        Item {
            name,
            run,
            times: Vec::new(),
            cpu: Vec::new(),
            note: String::new(),
        }
    }
}

/// CPU time used by this process so far (all threads, user + system).
fn process_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_PROCESS_CPUTIME_ID is always present on
    // Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Times every item `runs` times after one untimed warm-up each, interleaved (round after
/// round, so a slow phase of a busy machine hits every item alike); sorts each item's times.
fn time_interleaved(items: &mut [Item], runs: u64) -> Result<(), String> {
    for item in items.iter_mut() {
        item.note = (item.run)()?;
    }
    for _ in 0..runs {
        for item in items.iter_mut() {
            let (t, cpu) = (Instant::now(), process_cpu_time());
            item.note = (item.run)()?;
            item.times.push(t.elapsed());
            item.cpu.push(process_cpu_time() - cpu);
        }
    }
    for item in items.iter_mut() {
        item.times.sort();
        item.cpu.sort();
    }
    Ok(())
}

fn median(times: &[Duration]) -> Duration {
    times[times.len() / 2]
}

fn mb_per_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

/// The request formats timed by default: every builtin one.
const DEFAULT_FORMATS: [&str; 3] = [
    "builtin:openai-chat",
    "builtin:ollama-chat",
    "builtin:prompted-tools",
];

fn build_cmd(args: &[String]) -> Result<(), String> {
    let o = Opts::parse(args, &["--runs", "--cache", "--format"], &["--no-inmem"])?;
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
    let mut formats: Vec<String> = o
        .values
        .iter()
        .filter(|(k, _)| k == "--format")
        .map(|(_, v)| v.clone())
        .collect();
    if formats.is_empty() {
        formats = DEFAULT_FORMATS.iter().map(|f| f.to_string()).collect();
    }

    let t = Instant::now();
    let runtime = Runtime::new(
        &cache,
        RuntimeLimits {
            call_timeout: Duration::from_secs(600),
            // The directory holds current.jsonl, messages.jsonl, request.json, the copy and
            // the in-memory build's output, each about the history's size: the default 1 GiB
            // budget stops a 256 MiB run. The check still runs (its cost is part of a build).
            task_dir_bytes: Some(8 * in_bytes + (1 << 30)),
            ..Default::default()
        },
    )
    .map_err(|e| format!("runtime: {e:#}"))?;
    let mut instances = Vec::new();
    for name in &formats {
        let source: PluginSource = name.parse().map_err(|e| format!("{name}: {e}"))?;
        let plugin = runtime
            .load(&source, PluginKind::RequestFormat)
            .map_err(|e| e.to_string())?;
        let format = runtime
            .request_format(&plugin, dir)
            .map_err(|e| e.to_string())?;
        instances.push((name.clone(), format));
    }
    let setup = t.elapsed();

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
    let config = &config;
    let copy_to = dir.join("copy.jsonl");
    let native_to = dir.join("request.native.json");
    let request = dir.join("request.inmem.json");
    let mut items: Vec<Item> = Vec::new();
    for (name, format) in instances.iter_mut() {
        items.push(Item::new(
            format!("write-request ({name})"),
            Box::new(move || {
                let info = format.write_request(config).map_err(|e| e.to_string())?;
                Ok(format!(
                    "-> request.json {} bytes, guest memory peak {:.1} MiB",
                    info.bytes,
                    format.memory_peak_bytes() as f64 / MIB as f64
                ))
            }),
        ));
    }
    let (current_ref, copy_ref) = (&current, &copy_to);
    items.push(Item::new(
        "std::fs::copy (cp)".into(),
        Box::new(move || {
            std::fs::copy(current_ref, copy_ref)
                .map(|_| String::new())
                .map_err(|e| format!("copying {}: {e}", current_ref.display()))
        }),
    ));
    // What the request build costs without the component boundary: the same validation and
    // copy (`copy_chat_array`, OpenAI's shape, the code builtin:openai-chat runs) compiled
    // natively, reading and writing with std's buffered I/O in this process.
    let native_ref = &native_to;
    items.push(Item::new(
        "native copy_chat_array (OpenAI shape, no component)".into(),
        Box::new(move || {
            use std::io::Write;
            let open = |e: std::io::Error| format!("{}: {e}", current_ref.display());
            let input = std::fs::File::open(current_ref).map_err(open)?;
            let output = std::fs::File::create(native_ref)
                .map_err(|e| format!("{}: {e}", native_ref.display()))?;
            let mut out = std::io::BufWriter::with_capacity(256 * 1024, output);
            let n = ctxhost_format::stream::copy_chat_array(
                input,
                "current.jsonl",
                &mut out,
                &mut ctxhost_format::shape::openai::OpenAiShape,
            )
            .map_err(|e| e.to_string())?;
            out.flush().map_err(|e| e.to_string())?;
            Ok(format!("-> {n} messages"))
        }),
    ));
    let inmem = !o.flags.iter().any(|f| f == "--no-inmem");
    if inmem {
        let request_ref = &request;
        items.push(Item::new(
            "in-memory baseline (Vec<Value>)".into(),
            Box::new(move || {
                let built =
                    inmem::build_request(current_ref, request_ref, "bench-model", Some(1024))?;
                Ok(format!(
                    "-> {} messages, {} bytes",
                    built.messages, built.bytes
                ))
            }),
        ));
    }
    time_interleaved(&mut items, runs)?;
    let _ = std::fs::remove_file(&copy_to);
    let _ = std::fs::remove_file(&native_to);
    let _ = std::fs::remove_file(&request);
    let _ = std::fs::remove_file(dir.join("request.json"));

    println!(
        "input: {} ({} bytes, {:.1} MiB); {runs} timed runs after 1 warm-up, interleaved, medians",
        current.display(),
        in_bytes,
        in_bytes as f64 / MIB as f64
    );
    println!(
        "  runtime start + load + instantiate {} format(s): {:.3} s (once, not in the figures below)",
        formats.len(),
        setup.as_secs_f64()
    );
    let copy = median(&items[formats.len()].times);
    let copy_cpu = median(&items[formats.len()].cpu);
    let width = items.iter().map(|i| i.name.len()).max().unwrap_or(0);
    println!(
        "  {:<width$}  {:>10} {:>10} {:>10}  {:>10} {:>10}",
        "",
        "wall",
        "MB/s",
        "% of cp",
        "CPU",
        "% of cp",
        width = width + 1
    );
    for item in &items {
        let (m, c) = (median(&item.times), median(&item.cpu));
        println!(
            "  {:<width$}  {:8.3} s {:10.1} {:9.1} %  {:8.3} s {:9.1} %  {}",
            format!("{}:", item.name),
            m.as_secs_f64(),
            mb_per_s(in_bytes, m),
            100.0 * copy.as_secs_f64() / m.as_secs_f64(),
            c.as_secs_f64(),
            100.0 * copy_cpu.as_secs_f64() / c.as_secs_f64(),
            item.note,
            width = width + 1
        );
    }
    Ok(())
}
