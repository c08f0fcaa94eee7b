//! Hosts with separate local `contexts/` trees sharing one PostgreSQL queue and one
//! S3-compatible bucket (issue 30, `context_storage.remote`), against the fake LLM and the
//! SeaweedFS test server (`scripts/test-s3.sh`, `CTXHOST_TEST_S3_URL`): a host killed with
//! kill -9 mid-task has its tasks finished by the others from the bucket, resumed from the last
//! synced step; three hosts drain a queue while the object store restarts, each task run once;
//! `show` on a host without the directory downloads it; `fsck` finds the bucket, the rows and
//! the trees in agreement; `cleanup` deletes the tasks' objects.
//!
//! Built `#[ignore]`d unless both test servers are configured (or in CI).

use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ctxhost::db::{Db, NewTask, Status, TaskFilter, TaskKey, TaskRow};
use serde_json::Value;

use crate::support::fake_llm::{FakeLlm, RecordedRequest, Reply};
use crate::support::{TestEnv, config_yaml, read_jsonl, wait_until};

fn prompt_of(req: &RecordedRequest) -> String {
    req.messages()
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_string()
}

/// Every task: one tool call (answered with an error: no tool server), then a final answer,
/// each reply after `delay`.
fn two_step_llm(delay: Duration) -> FakeLlm {
    let llm = FakeLlm::start(vec![]);
    llm.set_handler(move |req| {
        let last_is_tool = req.messages().last().is_some_and(|m| m["role"] == "tool");
        let reply = if last_is_tool {
            Reply::text(format!("finished {}", prompt_of(req)), Some((30, 5)))
        } else {
            Reply::tool_calls(
                vec![("call_x", "read_text_file", r#"{"path":"a"}"#)],
                Some((20, 5)),
            )
        };
        Some(Reply::delay(delay, reply))
    });
    llm
}

/// The bucket prefix of one test run.
fn bucket_url() -> String {
    format!(
        "s3://ctxhost-test/e2e-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// A PostgreSQL database, and a config whose task directories are kept under `url`.
fn remote_env(llm: &FakeLlm, url: &str, lease_secs: u64) -> TestEnv {
    let endpoint = std::env::var("CTXHOST_TEST_S3_URL")
        .expect("CTXHOST_TEST_S3_URL: start the server with `scripts/test-s3.sh start`");
    remote_env_at(llm, url, &endpoint, lease_secs)
}

/// [`remote_env`] with the S3 server at `endpoint`.
fn remote_env_at(llm: &FakeLlm, url: &str, endpoint: &str, lease_secs: u64) -> TestEnv {
    let mut env = TestEnv::new();
    // Any key: the test server takes every signature; the variables are the standard ones.
    env.set_env("AWS_ACCESS_KEY_ID", "ctxhost-test");
    env.set_env("AWS_SECRET_ACCESS_KEY", "ctxhost-test-secret");
    let yaml = config_yaml(
        &llm.base_url(),
        "openai",
        &format!(
            "plugins:\n  compressor: none\nworker:\n  lease_secs: {lease_secs}\n  max_crashes: 3\n"
        ),
    )
    .replace(
        "context_storage:\n  base_dir: ./contexts\n",
        &format!(
            "context_storage:\n  base_dir: ./contexts\n  remote:\n    url: {url}\n    endpoint: \"{endpoint}\"\n    region: us-east-1\n    allow_http: true\n"
        ),
    );
    assert!(yaml.contains("remote:"), "{yaml}");
    env.write_config(&yaml);
    env.ctxhost(&["init"]).ok();
    env
}

fn queue(env: &TestEnv, n: usize) -> Vec<String> {
    let db = Db::open(&env.store_spec(), &env.contexts()).unwrap();
    (0..n)
        .map(|i| {
            let uuid = uuid::Uuid::new_v4().hyphenated().to_string();
            db.insert_queued(&NewTask {
                uuid: uuid.clone(),
                key: TaskKey {
                    task_source: "local".into(),
                    ..TaskKey::default()
                },
                prompt: format!("task-{i}"),
                user: None,
                llm_provider: "openai".into(),
                model: "fake-model".into(),
                context_length: 8192,
                no_inherit: false,
            })
            .unwrap();
            uuid
        })
        .collect()
}

fn rows(env: &TestEnv) -> Vec<TaskRow> {
    Db::open(&env.store_spec(), &env.contexts())
        .unwrap()
        .list(&TaskFilter::default())
        .unwrap()
}

/// The local tree of host `host`.
fn tree(env: &TestEnv, host: &str) -> PathBuf {
    env.root().join(format!("tree-{host}"))
}

/// A worker acting as host `host` on its own local tree.
struct Worker {
    host: String,
    child: Child,
    log: PathBuf,
}

impl Worker {
    fn start(env: &TestEnv, host: &str, parallel: u32) -> Worker {
        static N: AtomicUsize = AtomicUsize::new(0);
        let log = env.root().join(format!(
            "worker-{host}-{}.log",
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let contexts = tree(env, host);
        let (c, p) = (contexts.to_str().unwrap(), parallel.to_string());
        let mut cmd = env
            .ctxhost_cmd(&[
                "-v",
                "--contexts",
                c,
                "run",
                "--poll-ms",
                "20",
                "--max-parallel",
                &p,
            ])
            .cmd;
        cmd.env(ctxhost::layout::HOSTNAME_ENV, host)
            .env(ctxhost::host::HOST_ID_ENV, format!("machine-{host}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        Worker {
            host: host.to_string(),
            child: cmd.spawn().expect("start a worker"),
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// kill -9 of the worker and its task processes.
    fn kill_host(&mut self) {
        let victims = children_of(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
        for p in victims {
            // SAFETY: kill has no memory effects; these are the test's own grandchildren.
            unsafe { libc::kill(p as libc::pid_t, libc::SIGKILL) };
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill_host();
    }
}

fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|s| s.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(p);
        }
    }
    out
}

fn wait_all_completed(env: &TestEnv, secs: u64, workers: &[&Worker]) -> Vec<TaskRow> {
    let done = wait_until(Duration::from_secs(secs), || {
        rows(env).iter().all(|r| r.status == Status::Completed)
    });
    let all = rows(env);
    if !done {
        let logs: Vec<String> = workers
            .iter()
            .map(|w| format!("--- {} ---\n{}", w.host, w.log()))
            .collect();
        let st: Vec<String> = all
            .iter()
            .map(|r| format!("{} {}", r.uuid, r.status))
            .collect();
        panic!(
            "not all tasks completed after {secs} s: {st:?}\n{}",
            logs.join("\n")
        );
    }
    all
}

/// `ctxhost --contexts TREE ARGS` on host `host`.
fn on_host(env: &TestEnv, host: &str, args: &[&str]) -> crate::support::CmdOutput {
    let t = tree(env, host);
    let mut all = vec!["--contexts", t.to_str().unwrap()];
    all.extend_from_slice(args);
    let mut cmd = env.ctxhost_cmd(&all);
    cmd.cmd
        .env(ctxhost::layout::HOSTNAME_ENV, host)
        .env(ctxhost::host::HOST_ID_ENV, format!("machine-{host}"));
    cmd.run()
}

fn a_killed_hosts_tasks_are_finished_elsewhere_from_the_last_synced_step() {
    const LEASE: u64 = 3;
    let llm = two_step_llm(Duration::from_millis(1200));
    let url = bucket_url();
    let env = remote_env(&llm, &url, LEASE);
    let uuids = queue(&env, 6);
    let mut b = Worker::start(&env, "host-b", 3);
    // Host b runs three tasks alone until each is in its second LLM call (its first step,
    // a tool call, synced to the bucket).
    assert!(
        wait_until(Duration::from_secs(90), || {
            let mut n = 0;
            for r in llm.requests() {
                if r.messages().last().is_some_and(|m| m["role"] == "tool") {
                    n += 1;
                }
            }
            n >= 3
        }),
        "host-b did not reach its tasks' second step:\n{}",
        b.log()
    );
    let b_tasks: Vec<String> = rows(&env)
        .iter()
        .filter(|r| r.status == Status::Running && r.hostname.as_deref() == Some("host-b"))
        .map(|r| r.uuid.clone())
        .collect();
    assert_eq!(b_tasks.len(), 3, "{}", b.log());
    b.kill_host();
    let seen = llm.request_count();
    let a = Worker::start(&env, "host-a", 2);
    let c = Worker::start(&env, "host-c", 2);
    let all = wait_all_completed(&env, 240, &[&a, &c]);
    assert_eq!(all.len(), 6);

    for r in &all {
        assert_ne!(r.hostname.as_deref(), Some("host-b"), "{r:?}");
        assert_eq!(r.crash_count, i64::from(b_tasks.contains(&r.uuid)), "{r:?}");
        assert_eq!(r.error_message, None, "{r:?}");
    }
    // b's tasks resumed from the bucket: the first request another host made for each already
    // holds the tool result b recorded (the first step was not run again).
    for uuid in &b_tasks {
        let prompt = &all.iter().find(|r| &r.uuid == uuid).unwrap().prompt;
        let again: Vec<RecordedRequest> = llm
            .requests_from(seen)
            .into_iter()
            .filter(|r| &prompt_of(r) == prompt)
            .collect();
        assert_eq!(again.len(), 1, "{uuid}: one request after the takeover");
        let roles: Vec<String> = again[0]
            .messages()
            .iter()
            .map(|m| m["role"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool"], "{uuid}");
    }
    // Every task's history, read on a host that may not have it (show downloads it), is one
    // uninterrupted run's.
    for uuid in &uuids {
        let r = all.iter().find(|r| &r.uuid == uuid).unwrap();
        let other = if r.hostname.as_deref() == Some("host-a") {
            "host-c"
        } else {
            "host-a"
        };
        let shown = on_host(&env, other, &["show", uuid, "--json", "--messages", "10"])
            .ok()
            .json();
        let roles: Vec<&str> = shown["last_messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap_or("?"))
            .collect();
        assert_eq!(
            roles,
            ["system", "user", "assistant", "tool", "assistant"],
            "{uuid}: {shown:#}"
        );
        assert_eq!(
            shown["result"],
            format!("finished {}", r.prompt),
            "{shown:#}"
        );
        let local = tree(&env, r.hostname.as_deref().unwrap())
            .join("completed")
            .join(uuid);
        let seqs: Vec<u64> = read_jsonl(&local.join("messages.jsonl"))
            .iter()
            .map(|m| m["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(seqs, [1, 2, 3, 4, 5], "{uuid}");
    }
    // The bucket, the rows and host a's tree agree.
    let fsck = on_host(&env, "host-a", &["fsck", "--json"]).json();
    assert_eq!(fsck["problems"], Value::Array(vec![]), "{fsck:#}");
    for w in [&a, &c] {
        assert!(!w.log().contains(" ERROR "), "{}:\n{}", w.host, w.log());
    }
    drop((a, c));
    // cleanup --all on one host deletes every task's objects, those of tasks it never ran too.
    let out = on_host(&env, "host-a", &["cleanup", "--all", "--json"])
        .ok()
        .json();
    assert_eq!(out["deleted"].as_array().unwrap().len(), 6, "{out:#}");
    // Host c's own copies of those tasks are left for its own cleanup, which removes them.
    on_host(&env, "host-c", &["cleanup", "--all"]).ok();
    let fsck = on_host(&env, "host-c", &["fsck", "--json"]).json();
    assert_eq!(fsck["problems"], Value::Array(vec![]), "{fsck:#}");
    let s3 = std::process::Command::new("curl")
        .args([
            "-fsS",
            &format!(
                "{}/ctxhost-test?list-type=2&prefix={}/",
                std::env::var("CTXHOST_TEST_S3_URL").unwrap(),
                url.trim_start_matches("s3://ctxhost-test/")
            ),
        ])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&s3.stdout);
    assert!(
        !listing.contains("<Key>"),
        "objects left after cleanup: {listing}"
    );
}

/// A SeaweedFS server of this test's own (scripts/test-s3.sh with a directory of its own), so
/// that restarting it disturbs no other test; destroyed when dropped.
struct OwnS3 {
    dir: PathBuf,
}

impl OwnS3 {
    fn script(&self, cmd: &str) -> String {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/test-s3.sh");
        let out = std::process::Command::new(script)
            .args([cmd, self.dir.to_str().unwrap()])
            .output()
            .expect("run scripts/test-s3.sh");
        assert!(
            out.status.success(),
            "test-s3.sh {cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for OwnS3 {
    fn drop(&mut self) {
        let _ = self.script("destroy");
    }
}

fn three_hosts_drain_the_queue_while_the_object_store_restarts() {
    let tmp = tempfile::tempdir().unwrap();
    let s3 = OwnS3 {
        dir: tmp.path().join("s3"),
    };
    let endpoint = s3.script("start");
    let llm = two_step_llm(Duration::from_millis(300));
    let env = remote_env_at(&llm, &bucket_url(), &endpoint, 10);
    queue(&env, 30);
    let workers: Vec<Worker> = ["host-a", "host-b", "host-c"]
        .iter()
        .map(|h| Worker::start(&env, h, 2))
        .collect();
    assert!(
        wait_until(Duration::from_secs(120), || {
            rows(&env)
                .iter()
                .filter(|r| r.status == Status::Completed)
                .count()
                >= 6
        }),
        "no progress:\n{}",
        workers[0].log()
    );
    // The object store goes away for a few seconds mid-run: syncs and claims wait and retry.
    s3.script("restart");
    let all = wait_all_completed(&env, 300, &workers.iter().collect::<Vec<_>>());
    let mut requests: std::collections::BTreeMap<String, usize> = Default::default();
    for r in llm.requests() {
        *requests.entry(prompt_of(&r)).or_default() += 1;
    }
    assert_eq!(requests.len(), 30);
    assert!(
        requests.values().all(|n| *n == 2),
        "each task ran exactly once: {requests:?}"
    );
    let mut hosts = std::collections::BTreeSet::new();
    for r in &all {
        assert_eq!(
            (r.llm_call_count, r.tool_call_count, r.total_tokens),
            (2, 1, 60),
            "{r:?}"
        );
        assert_eq!(
            (r.crash_count, r.error_message.as_deref()),
            (0, None),
            "{r:?}"
        );
        hosts.insert(r.hostname.clone().unwrap());
    }
    assert_eq!(hosts.len(), 3, "every host ran tasks: {hosts:?}");
    drop(workers);
    let fsck = on_host(&env, "host-b", &["fsck", "--json"]).json();
    assert_eq!(fsck["problems"], Value::Array(vec![]), "{fsck:#}");
}

mod postgres {
    #[test]
    #[cfg_attr(
        not(all(ctxhost_pg_tests, ctxhost_s3_tests)),
        ignore = "needs PostgreSQL and the S3 test server: CTXHOST_TEST_DATABASE_URL (scripts/test-postgres.sh start) and CTXHOST_TEST_S3_URL (scripts/test-s3.sh start)"
    )]
    fn a_killed_hosts_tasks_are_finished_elsewhere_from_the_last_synced_step() {
        crate::support::store::on_postgres(
            super::a_killed_hosts_tasks_are_finished_elsewhere_from_the_last_synced_step,
        )
    }

    #[test]
    #[cfg_attr(
        not(all(ctxhost_pg_tests, ctxhost_s3_tests)),
        ignore = "needs PostgreSQL and SeaweedFS: CTXHOST_TEST_DATABASE_URL (scripts/test-postgres.sh start) and CTXHOST_TEST_S3_URL (scripts/test-s3.sh start)"
    )]
    fn three_hosts_drain_the_queue_while_the_object_store_restarts() {
        crate::support::store::on_postgres(
            super::three_hosts_drain_the_queue_while_the_object_store_restarts,
        )
    }
}
