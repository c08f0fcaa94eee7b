//! Benchmark (not a test): the task store under 1, 2 and 3 workers, on SQLite and on
//! PostgreSQL (issue 18). Prints two tables; run with `scripts/bench-store.sh`
//! (`cargo bench -p ctxhost --bench task_store --profile dev`).
//!
//! - **Claim latency**: `CLAIMS` queued tasks, claimed by 1, 2 or 3 claimers at once (each a
//!   thread with its own connection, as workers on different hosts have) with the one claim
//!   statement of a task process (`lifecycle::row::claim_next`); the time of each claim, its
//!   median and 95th percentile, and claims per second over the whole run.
//! - **Tasks per second**: `TASKS` queued tasks run to the end by 1, 2 or 3 real `ctxhost
//!   run` workers (distinct host names, `--max-parallel 2` each: one task process per task,
//!   components from the compiled cache) against a local fake OpenAI server answering at
//!   once; wall time from starting the workers to the last task completed.
//!
//! PostgreSQL is measured when `CTXHOST_BENCH_DATABASE_URL` (or `CTXHOST_TEST_DATABASE_URL`)
//! names a server and a role that may create databases (`scripts/test-postgres.sh start`).
//! `BENCH_RUNS` (default 3) runs per figure; the table shows medians.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ctxhost::db::{Db, NewTask, PgUrl, Status, StoreSpec, TaskFilter, TaskKey};
use ctxhost::lifecycle::{Claim, row};

const CLAIMS: usize = 600;
const TASKS: usize = 60;

fn main() {
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let admin = std::env::var("CTXHOST_BENCH_DATABASE_URL")
        .or_else(|_| std::env::var("CTXHOST_TEST_DATABASE_URL"))
        .ok();
    if admin.is_none() {
        eprintln!("note: no PostgreSQL server (CTXHOST_BENCH_DATABASE_URL): measuring SQLite only");
    }
    let llm = FakeOpenAi::start();
    let mut claim_rows = Vec::new();
    let mut task_rows = Vec::new();
    for store in ["sqlite", "postgres"] {
        if store == "postgres" && admin.is_none() {
            continue;
        }
        for workers in 1..=3 {
            let mut lat = Vec::new();
            let mut rates = Vec::new();
            let mut tps = Vec::new();
            for _ in 0..runs {
                let (l, rate) = claims(store, admin.as_deref(), workers);
                lat.push(l);
                rates.push(rate);
                tps.push(tasks_per_second(store, admin.as_deref(), workers, &llm));
            }
            let p50 = median(lat.iter().map(|l| l.0).collect());
            let p95 = median(lat.iter().map(|l| l.1).collect());
            claim_rows.push(format!(
                "| {store} | {workers} | {:.2} ms | {:.2} ms | {:.0} |",
                p50 * 1e3,
                p95 * 1e3,
                median(rates)
            ));
            task_rows.push(format!("| {store} | {workers} | {:.2} |", median(tps)));
            eprintln!("done: {store}, {workers} worker(s)");
        }
    }
    println!(
        "\nClaim latency ({CLAIMS} queued tasks, one claim statement per claim; medians of {runs} runs)\n"
    );
    println!("| store | claimers | claim p50 | claim p95 | claims/s |");
    println!("|---|---|---|---|---|");
    for r in &claim_rows {
        println!("{r}");
    }
    println!(
        "\nTasks per second ({TASKS} one-call tasks, real workers with --max-parallel 2 each, fake LLM answering at once; medians of {runs} runs)\n"
    );
    println!("| store | workers | tasks/s |");
    println!("|---|---|---|");
    for r in &task_rows {
        println!("{r}");
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A fresh store: a temporary contexts tree, and for PostgreSQL a new database (dropped by
/// the returned guard).
struct Fresh {
    dir: tempfile::TempDir,
    spec: StoreSpec,
    url: Option<String>,
    admin: Option<String>,
    name: String,
}

impl Fresh {
    fn new(store: &str, admin: Option<&str>) -> Fresh {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("contexts")).unwrap();
        let name = format!("ctxhost_bench_{}", uuid::Uuid::new_v4().simple());
        if store == "sqlite" {
            return Fresh {
                dir,
                spec: StoreSpec::Sqlite,
                url: None,
                admin: None,
                name,
            };
        }
        let admin = admin.unwrap().to_string();
        let mut c = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
        c.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        let (base, _) = admin.rsplit_once('/').unwrap();
        let url = format!("{base}/{name}");
        Fresh {
            dir,
            spec: StoreSpec::Postgres(PgUrl::parse(&url, "bench").unwrap()),
            url: Some(url),
            admin: Some(admin),
            name,
        }
    }

    fn contexts(&self) -> PathBuf {
        self.dir.path().join("contexts")
    }

    fn open(&self) -> Db {
        Db::open(&self.spec, &self.contexts()).unwrap()
    }

    fn queue(&self, n: usize) {
        let db = self.open();
        for i in 0..n {
            db.insert_queued(&NewTask {
                uuid: uuid::Uuid::new_v4().hyphenated().to_string(),
                key: TaskKey {
                    task_source: "local".into(),
                    ..TaskKey::default()
                },
                prompt: format!("task {i}"),
                user: None,
                llm_provider: "openai".into(),
                model: "bench".into(),
                context_length: 8192,
                no_inherit: false,
                workspace: None,
            })
            .unwrap();
        }
    }
}

impl Drop for Fresh {
    fn drop(&mut self) {
        if let Some(admin) = &self.admin
            && let Ok(mut c) = postgres::Client::connect(admin, postgres::NoTls)
        {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// `(p50, p95)` seconds per claim and claims per second with `claimers` claiming at once.
fn claims(store: &str, admin: Option<&str>, claimers: usize) -> ((f64, f64), f64) {
    let fresh = Fresh::new(store, admin);
    fresh.queue(CLAIMS);
    let start = Instant::now();
    let threads: Vec<_> = (0..claimers)
        .map(|w| {
            let spec = fresh.spec.clone();
            let contexts = fresh.contexts();
            std::thread::spawn(move || {
                let db = Db::open(&spec, &contexts).unwrap();
                let claim = Claim {
                    pid: 1000 + w as u32,
                    hostname: format!("bench-{w}"),
                    host_id: format!("bench-{w}"),
                    worker_id: format!("bench-{w}:1:0"),
                    lease: Duration::from_secs(30),
                    llm_provider: "openai".into(),
                    model: "bench".into(),
                    context_length: 8192,
                };
                let mut times = Vec::new();
                loop {
                    let t = Instant::now();
                    let got = row::claim_next(&db, &claim).unwrap();
                    if got.is_none() {
                        return times;
                    }
                    times.push(t.elapsed().as_secs_f64());
                }
            })
        })
        .collect();
    let mut all: Vec<f64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let wall = start.elapsed().as_secs_f64();
    assert_eq!(all.len(), CLAIMS, "every task claimed exactly once");
    all.sort_by(f64::total_cmp);
    let p = |q: f64| all[((all.len() - 1) as f64 * q) as usize];
    ((p(0.5), p(0.95)), CLAIMS as f64 / wall)
}

/// Tasks per second with `workers` real workers.
fn tasks_per_second(store: &str, admin: Option<&str>, workers: usize, llm: &FakeOpenAi) -> f64 {
    let fresh = Fresh::new(store, admin);
    let root = fresh.dir.path();
    let mut config = format!(
        "context_storage:\n  base_dir: ./contexts\nllm:\n  provider: openai\n  base_url: \"{}\"\n  model: bench\n  \
         api_key_env: \"\"\n  context_length: 8192\nplugins:\n  compressor: none\n",
        llm.base_url
    );
    if fresh.url.is_some() {
        config.push_str("task_store:\n  url_env: CTXHOST_DATABASE_URL\n");
    }
    std::fs::write(root.join("config.yaml"), config).unwrap();
    run(root, &fresh, &["init"]);
    fresh.queue(TASKS);
    let start = Instant::now();
    let mut children: Vec<Child> = (0..workers)
        .map(|w| {
            ctxhost(root, &fresh)
                .args(["run", "--poll-ms", "20", "--max-parallel", "2"])
                .env(ctxhost::layout::HOSTNAME_ENV, format!("bench-host-{w}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let db = fresh.open();
    loop {
        let rows = db.list(&TaskFilter::default()).unwrap();
        if rows.iter().all(|r| r.status.is_final()) {
            assert!(
                rows.iter().all(|r| r.status == Status::Completed),
                "a task did not complete"
            );
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(600), "timed out");
        std::thread::sleep(Duration::from_millis(20));
    }
    let secs = start.elapsed().as_secs_f64();
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
    TASKS as f64 / secs
}

fn ctxhost(root: &Path, fresh: &Fresh) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ctxhost"));
    c.current_dir(root).env(
        "CTXHOST_CACHE_DIR",
        concat!(env!("CARGO_TARGET_TMPDIR"), "/component-cache"),
    );
    if let Some(url) = &fresh.url {
        c.env("CTXHOST_DATABASE_URL", url);
    }
    c
}

fn run(root: &Path, fresh: &Fresh, args: &[&str]) {
    let out = ctxhost(root, fresh).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ctxhost {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fake OpenAI chat server on 127.0.0.1 answering every request at once with "Done." (a
/// thread per connection, keep-alive).
struct FakeOpenAi {
    base_url: String,
}

impl FakeOpenAi {
    fn start() -> FakeOpenAi {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut stream = stream;
                    loop {
                        let mut length = 0usize;
                        let mut line = String::new();
                        let mut first = true;
                        loop {
                            line.clear();
                            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                                return;
                            }
                            if first {
                                first = false;
                                continue;
                            }
                            let l = line.trim_end();
                            if l.is_empty() {
                                break;
                            }
                            if let Some((k, v)) = l.split_once(':')
                                && k.eq_ignore_ascii_case("content-length")
                            {
                                length = v.trim().parse().unwrap_or(0);
                            }
                        }
                        let mut body = vec![0; length];
                        if reader.read_exact(&mut body).is_err() {
                            return;
                        }
                        let reply = r#"{"id":"b","object":"chat.completion","model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}"#;
                        let head = format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                            reply.len()
                        );
                        if stream.write_all(head.as_bytes()).is_err()
                            || stream.write_all(reply.as_bytes()).is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        FakeOpenAi { base_url }
    }
}
