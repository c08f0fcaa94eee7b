//! Benchmark of task directories kept in a bucket (issue 30, `context_storage.remote`), against
//! an S3-compatible server (`scripts/test-s3.sh start` prints its endpoint):
//!
//! 1. bytes uploaded per step over a task of `--steps` steps (each appends a reply, a tool call
//!    and its result, an LLM-call record and the context lines, as the agent loop does), next
//!    to the bytes the step appended, the index objects it sealed and the manifest's size (at
//!    steps 1, 100, 1000 and its largest);
//! 2. the time to resume a task with a `--mib` MiB history on a new host (the claim
//!    downloads it from the bucket), next to the time to upload it.
//!
//! ```text
//! export CTXHOST_TEST_S3_URL=$(scripts/test-s3.sh start)
//! AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=x target/debug/examples/bench_remote --steps 1000 --mib 256
//! ```
//! Credentials come from the standard variables (the test server takes any key).

// A benchmark reports failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use ctxhost::layout::{DirState, Layout};
use ctxhost::remote::{RemoteConfig, Store, TaskSync};
use ctxhost::task_dir::TaskDir;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a number"))
        .unwrap_or(default)
}

fn append(dir: &Path, name: &str, bytes: &[u8]) -> u64 {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(name))
        .unwrap();
    f.write_all(bytes).unwrap();
    bytes.len() as u64
}

fn host(root: &Path, name: &str) -> Layout {
    let l = Layout::new(root.join(name));
    l.ensure().unwrap();
    l
}

fn main() {
    let steps = arg("--steps", 1000);
    let mib = arg("--mib", 256);
    let endpoint = std::env::var("CTXHOST_TEST_S3_URL")
        .expect("CTXHOST_TEST_S3_URL (scripts/test-s3.sh start)");
    let cfg = RemoteConfig {
        url: format!(
            "s3://ctxhost-test/bench-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        ),
        endpoint: Some(endpoint),
        region: Some("us-east-1".into()),
        allow_http: true,
        retry_secs: 30,
        unsafe_unfenced: false,
    };
    let store = Arc::new(Store::open(&cfg).unwrap());
    let tmp = tempfile::tempdir().unwrap();

    // 1. Bytes per step.
    let a = host(tmp.path(), "a");
    let uuid = uuid::Uuid::new_v4().hyphenated().to_string();
    let dir = a.task_dir(DirState::Running, &uuid);
    std::fs::create_dir_all(&dir).unwrap();
    append(&dir, "metadata.json", br#"{"uuid":"bench"}"#);
    let mut sync = TaskSync::claim(store.clone(), &a, &uuid, "bench/1", &dir).unwrap();
    sync.sync(&TaskDir::open(&dir).unwrap()).unwrap();
    let (mut appended_total, mut uploaded_total, mut manifest_total, mut mismatched) =
        (0u64, 0u64, 0u64, 0u64);
    let (mut index_total, mut manifest_last, mut manifest_max) = (0u64, 0u64, 0u64);
    let mut at_steps = Vec::new();
    let t0 = Instant::now();
    for step in 0..steps {
        let reply = format!(
            "{{\"seq\":{},\"role\":\"assistant\",\"content\":\"{}\",\"tool_calls\":[{{\"id\":\"c{step}\"}}]}}\n",
            2 * step + 3,
            "r".repeat(200 + (step as usize * 37) % 900)
        );
        let result = format!(
            "{{\"seq\":{},\"role\":\"tool\",\"tool_call_id\":\"c{step}\",\"content\":\"{}\"}}\n",
            2 * step + 4,
            "o".repeat(300 + (step as usize * 53) % 2000)
        );
        let before = store.uploaded_bytes();
        let mut appended = 0;
        for line in [&reply, &result] {
            appended += append(&dir, "messages.jsonl", line.as_bytes());
            appended += append(&dir, "current.jsonl", line.as_bytes());
        }
        appended += append(
            &dir,
            "tools.jsonl",
            format!("{{\"seq\":{step},\"tool\":\"read_text_file\",\"status\":\"success\"}}\n")
                .as_bytes(),
        );
        appended += append(
            &dir,
            "llm_calls.jsonl",
            format!("{{\"call\":{step},\"prompt_tokens\":1000}}\n").as_bytes(),
        );
        let r = sync.sync(&TaskDir::open(&dir).unwrap()).unwrap();
        let uploaded = store.uploaded_bytes() - before;
        if uploaded != appended + r.index_bytes + r.manifest_bytes {
            mismatched += 1;
        }
        appended_total += appended;
        uploaded_total += uploaded;
        manifest_total += r.manifest_bytes;
        index_total += r.index_bytes;
        manifest_last = r.manifest_bytes;
        manifest_max = manifest_max.max(r.manifest_bytes);
        if [1, 10, 100, 1000, 10000].contains(&(step + 1)) {
            at_steps.push(format!("step {}: {} B", step + 1, r.manifest_bytes));
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "steps {steps}: appended {appended_total} B, uploaded {uploaded_total} B = appended + index objects {index_total} B + manifests {manifest_total} B; steps where uploaded != appended + index objects + manifest: {mismatched}"
    );
    println!(
        "  per step: appended {:.0} B, index objects {:.0} B, manifest {:.0} B on average ({manifest_last} B at the last step, {manifest_max} B at most); uploaded / appended {:.2}; sync {:.1} ms on average",
        appended_total as f64 / steps as f64,
        index_total as f64 / steps as f64,
        manifest_total as f64 / steps as f64,
        uploaded_total as f64 / appended_total as f64,
        secs * 1000.0 / steps as f64
    );
    println!("  manifest size at {}", at_steps.join(", "));
    ctxhost::remote::delete_task(&store, &a, &uuid).unwrap();

    // 2. Resume of a large history on a new host.
    let uuid = uuid::Uuid::new_v4().hyphenated().to_string();
    let dir = a.task_dir(DirState::Running, &uuid);
    std::fs::create_dir_all(&dir).unwrap();
    let mut sync = TaskSync::claim(store.clone(), &a, &uuid, "bench/2", &dir).unwrap();
    let chunk = {
        let line = format!(
            "{{\"role\":\"tool\",\"content\":\"{}\"}}\n",
            "x".repeat(1000)
        );
        line.repeat((1 << 20) / line.len() + 1)[..1 << 20].to_string()
    };
    let t0 = Instant::now();
    for _ in 0..mib {
        append(&dir, "messages.jsonl", chunk.as_bytes());
        sync.sync(&TaskDir::open(&dir).unwrap()).unwrap();
    }
    let up = t0.elapsed().as_secs_f64();
    let b = host(tmp.path(), "b");
    let dir_b = b.task_dir(DirState::Running, &uuid);
    std::fs::create_dir_all(&dir_b).unwrap();
    let t0 = Instant::now();
    let resumed = TaskSync::claim(store.clone(), &b, &uuid, "bench/3", &dir_b).unwrap();
    let down = t0.elapsed().as_secs_f64();
    assert_eq!(resumed.downloaded(), mib << 20);
    println!(
        "history {mib} MiB in {mib} segments: uploaded in {up:.1} s (one 1 MiB step at a time); resumed on a new host in {down:.2} s ({:.0} MiB/s)",
        mib as f64 / down
    );
    ctxhost::remote::delete_task(&store, &b, &uuid).unwrap();
}
