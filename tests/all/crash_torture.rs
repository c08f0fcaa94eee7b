//! Crash torture: `kill -9` a task process at random moments of a scripted run (fake LLM with
//! small random delays, a tool call every step, a context window small enough that the
//! llm-summarizer compresses every few steps), recover with `ctxhost recover`, check the files,
//! run again — until the task completes; more tasks until at least [`MIN_KILLS`] kills landed
//! on a running task.
//!
//! After every kill + recovery: every line of every JSONL file parses and ends with a newline,
//! messages.jsonl seq is 1..n, current.jsonl keeps the context invariants, status `queued` and
//! the directory in `paused/` agree, `ctxhost fsck` finds nothing, and the history lines that
//! were complete at the kill are still there, byte for byte (no acknowledged message lost).
//!
//! The random seed is printed; `CTXHOST_TORTURE_SEED=N` replays a run.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::fake_llm::{FakeLlm, RecordedRequest, Reply};
use crate::support::{TestEnv, find_task_dir, read_jsonl};
use serde_json::Value;

/// Kills that must land on a running task.
const MIN_KILLS: usize = 50;
/// Agent steps (tool calls) before the scripted final answer.
const STEPS: u64 = 24;
/// Marker of the summary prompt.
const MARK: &str = "SUMMARISE-THIS";

/// xorshift64*: small, seedable, good enough for picking moments.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Kinds of repair counted in the summary line, by a phrase of their description.
const REPAIR_KINDS: [(&str, &str); 5] = [
    ("torn line cut", "cut a torn last line"),
    ("newline added", "missing newline"),
    ("temporaries deleted", "deleted leftover temporaries"),
    ("current.jsonl caught up", "appended to current.jsonl"),
    ("interrupted tool results", "interrupted result"),
];

fn is_summary_request(req: &RecordedRequest) -> bool {
    req.messages()
        .iter()
        .any(|m| m["content"].as_str().is_some_and(|c| c.contains(MARK)))
}

/// The next step: one more than the highest `call_K` the context shows (the last assistant
/// message is always among the kept ones).
fn next_step(req: &RecordedRequest) -> u64 {
    req.messages()
        .iter()
        .filter_map(|m| m["tool_calls"].as_array())
        .flatten()
        .filter_map(|c| c["id"].as_str()?.strip_prefix("call_")?.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
        + 1
}

fn scripted_llm(seed: u64) -> FakeLlm {
    let llm = FakeLlm::start(vec![]);
    let rng = Arc::new(Mutex::new(Rng(seed ^ 0x9E37_79B9_7F4A_7C15)));
    llm.set_handler(move |req| {
        let delay = Duration::from_millis(rng.lock().unwrap().below(25));
        let reply = if is_summary_request(req) {
            Reply::text("summary: the agent read several files.", Some((300, 10)))
        } else {
            let k = next_step(req);
            if k > STEPS {
                Reply::text("All done.", Some((400, 3)))
            } else {
                let args =
                    serde_json::json!({"path": format!("src/f{k}.rs"), "pad": "x".repeat(300)})
                        .to_string();
                Reply::tool_calls(
                    vec![(&format!("call_{k}"), "read_file", &args)],
                    Some((400, 100)),
                )
            }
        };
        Some(Reply::delay(delay, reply))
    });
    llm
}

fn config(base_url: &str) -> String {
    format!(
        "context_storage:\n  base_dir: ./contexts\n  compression_threshold: 0.5\n  keep_recent_messages: 3\n  \
         summary_prompt: \"{MARK}\\n{{messages}}\"\n\
         llm:\n  provider: openai\n  base_url: \"{base_url}\"\n  model: fake-model\n  api_key_env: \"\"\n  \
         context_length: 1500\n  max_output_tokens: 200\n  timeout_secs: 20\n  max_retries: 1\n  max_backoff_secs: 1\n\
         agent:\n  system_prompt: \"You are a test agent.\"\n  max_steps: 1000\n\
         worker:\n  max_crashes: 100000\n"
    )
}

fn row(env: &TestEnv, uuid: &str) -> Value {
    env.ctxhost(&["show", uuid, "--json"]).ok().json()["task"].clone()
}

/// The complete (newline-terminated) lines of a file, as bytes.
fn complete_prefix(path: &Path) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap_or_default();
    match bytes.iter().rposition(|b| *b == b'\n') {
        Some(i) => bytes[..=i].to_vec(),
        None => Vec::new(),
    }
}

/// Every check a recovered (or finished) task directory passes; returns its history lines.
fn check_dir(dir: &Path, allow_pending: bool) -> Vec<Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    for f in &files {
        read_jsonl(f); // every line parses, the last one ends with a newline
    }
    for tmp in [
        "request.json",
        "response.json",
        "compressed.jsonl",
        "to_summarize.jsonl",
        "current.jsonl.tmp",
    ] {
        assert!(!dir.join(tmp).exists(), "{tmp} left in {}", dir.display());
    }
    // Killed before the first message was written: no history yet.
    let messages = dir.join("messages.jsonl");
    let history = if messages.exists() {
        read_jsonl(&messages)
    } else {
        Vec::new()
    };
    let seqs: Vec<u64> = history.iter().map(|m| m["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=history.len() as u64).collect::<Vec<_>>(),
        "seq of {}",
        dir.display()
    );
    if dir.join("current.jsonl").exists() {
        ctxhost::invariants::check_context_file(
            &ctxhost::task_dir::TaskDir::open(dir).unwrap(),
            "current.jsonl",
            allow_pending,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    history
}

#[test]
fn kill_minus_nine_at_random_moments_loses_nothing() {
    let seed = std::env::var("CTXHOST_TORTURE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    println!("crash torture seed: {seed} (CTXHOST_TORTURE_SEED={seed} replays it)");
    let mut rng = Rng(seed);
    let llm = scripted_llm(seed);
    let env = TestEnv::new();
    env.write_config(&config(&llm.base_url()));
    env.ctxhost(&["init"]).ok();

    let started = Instant::now();
    let (mut kills, mut recovered, mut early_kills, mut tasks) = (0usize, 0usize, 0usize, 0usize);
    let mut compressions = 0i64;
    let mut repairs: std::collections::BTreeMap<&str, usize> = Default::default();
    let mut max_ms = 900u64;
    while kills < MIN_KILLS {
        tasks += 1;
        let uuid = env
            .ctxhost(&["submit", "--prompt", &format!("torture task {tasks}")])
            .ok()
            .stdout()
            .trim()
            .to_string();
        loop {
            let mut cmd = env.ctxhost_cmd(&["task-exec", &uuid]).cmd;
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
            let mut child = cmd.spawn().unwrap();
            // A random moment: anywhere from process start-up to well into the run.
            let at = Instant::now() + Duration::from_millis(rng.below(max_ms));
            let mut exited = None;
            while Instant::now() < at {
                if let Some(s) = child.try_wait().unwrap() {
                    exited = Some(s);
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            if let Some(status) = exited {
                assert!(
                    status.success(),
                    "task process failed: {status}; {}",
                    row(&env, &uuid)
                );
                break;
            }
            // What is acknowledged now must survive the kill.
            let dir_before = find_task_dir(&env.contexts(), &uuid);
            let acked = dir_before
                .as_ref()
                .map(|d| complete_prefix(&d.join("messages.jsonl")))
                .unwrap_or_default();
            child.kill().unwrap(); // SIGKILL
            child.wait().unwrap();

            let r = row(&env, &uuid);
            match r["status"].as_str().unwrap() {
                "completed" => {
                    // Killed after the row said completed: the directory may not have moved
                    // yet (the transition is row first, then directory); recovery finishes it.
                    let rec = env.ctxhost(&["recover", "--json"]).ok().json();
                    assert_eq!(rec.as_array().map(Vec::len), Some(0), "{rec}");
                    break;
                }
                "queued" => {
                    // Killed before it claimed the task: nothing to recover.
                    early_kills += 1;
                    continue;
                }
                "running" => {}
                other => panic!("unexpected status {other} after a kill: {r}"),
            }
            kills += 1;
            assert_eq!(r["process_id"].as_i64(), Some(child.id() as i64));
            let rec = env.ctxhost(&["recover", "--json"]).ok().json();
            let rec = rec.as_array().unwrap();
            assert_eq!(rec.len(), 1, "one task to recover: {rec:?}");
            assert_eq!(rec[0]["status"], "queued", "{}", rec[0]);
            recovered += 1;
            for repair in rec[0]["repairs"].as_array().unwrap() {
                let text = repair.as_str().unwrap();
                for (key, needle) in REPAIR_KINDS {
                    if text.contains(needle) {
                        *repairs.entry(key).or_insert(0usize) += 1;
                    }
                }
            }

            // Status and directory agree; files sound; nothing acknowledged lost.
            assert_eq!(row(&env, &uuid)["status"], "queued");
            let dir = find_task_dir(&env.contexts(), &uuid);
            match &dir {
                Some(d) => {
                    assert_eq!(
                        d,
                        &env.contexts().join("paused").join(&uuid),
                        "queued task's directory"
                    );
                    check_dir(d, false);
                    let now = std::fs::read(d.join("messages.jsonl")).unwrap_or_default();
                    assert!(
                        now.starts_with(&acked),
                        "history lines complete at the kill were lost or changed ({} bytes then, {} now)",
                        acked.len(),
                        now.len()
                    );
                }
                None => assert!(acked.is_empty(), "the task directory vanished"),
            }
            let fsck = env.ctxhost(&["fsck", "--json"]);
            assert_eq!(
                fsck.code(),
                Some(0),
                "fsck after recovery:\n{}",
                fsck.stdout()
            );
        }
        let r = row(&env, &uuid);
        assert_eq!(r["status"], "completed", "{r}");
        compressions += r["compression_count"].as_i64().unwrap();
        let dir = env.contexts().join("completed").join(&uuid);
        let history = check_dir(&dir, false);
        // Every step's call was made and answered (some answers may say "interrupted"),
        // and the last message is the final answer.
        let answered: std::collections::BTreeSet<&str> = history
            .iter()
            .filter_map(|m| m["tool_call_id"].as_str())
            .collect();
        for k in 1..=STEPS {
            assert!(
                answered.contains(format!("call_{k}").as_str()),
                "call_{k} never answered"
            );
        }
        assert_eq!(history.last().unwrap()["content"], "All done.");
        assert_eq!(history.iter().filter(|m| m["role"] == "system").count(), 1);
        assert_eq!(
            history
                .iter()
                .filter(|m| m["role"] == "user"
                    && m["content"]
                        .as_str()
                        .is_some_and(|c| c.starts_with("torture task")))
                .count(),
            1
        );
        // Later tasks: kill earlier on average, so many kills land mid-step.
        max_ms = 300 + rng.below(600);
    }
    env.ctxhost(&["fsck"]).ok();
    println!(
        "crash torture: {recovered}/{kills} recovered ({tasks} tasks, {early_kills} more kills before a claim, {compressions} compressions, {:.1?})",
        started.elapsed()
    );
    println!("crash torture: repairs made by recovery: {repairs:?}");
    assert_eq!(recovered, kills);
    assert!(kills >= MIN_KILLS);
    assert!(compressions > 0, "the run never compressed");
}

// The tests above that touch the task store, once more on PostgreSQL.
crate::support::store::postgres_variants!(kill_minus_nine_at_random_moments_loses_nothing,);
