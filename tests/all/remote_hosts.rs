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
use std::time::Duration;

use ctxhost::db::Status;
use serde_json::Value;

use crate::support::fake_llm::{FakeLlm, RecordedRequest};
use crate::support::hosts::{Worker, prompt_of, queue, rows, two_step_llm, wait_all_completed};
use crate::support::{TestEnv, config_yaml, read_jsonl, wait_until};

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

/// The local tree of host `host`.
fn tree(env: &TestEnv, host: &str) -> PathBuf {
    env.root().join(format!("tree-{host}"))
}

/// A worker acting as host `host` on its own local tree.
fn start(env: &TestEnv, host: &str, parallel: u32) -> Worker {
    Worker::start_on_tree(env, host, &tree(env, host), parallel)
}

/// The command `ctxhost --contexts TREE ARGS` on host `host` (not started).
fn host_cmd(env: &TestEnv, host: &str, args: &[&str]) -> crate::support::Cmd {
    let t = tree(env, host);
    let mut all = vec!["--contexts", t.to_str().unwrap()];
    all.extend_from_slice(args);
    let mut cmd = env.ctxhost_cmd(&all);
    cmd.cmd
        .env(ctxhost::layout::HOSTNAME_ENV, host)
        .env(ctxhost::host::HOST_ID_ENV, format!("machine-{host}"));
    cmd
}

/// `ctxhost --contexts TREE ARGS` on host `host`.
fn on_host(env: &TestEnv, host: &str, args: &[&str]) -> crate::support::CmdOutput {
    host_cmd(env, host, args).run()
}

/// The keys of every object under the bucket prefix `url` (`s3://ctxhost-test/…`), listed
/// with a plain (unsigned) S3 ListObjectsV2 request.
fn bucket_keys(url: &str) -> Vec<String> {
    let prefix = url.trim_start_matches("s3://ctxhost-test/");
    let out = std::process::Command::new("curl")
        .args([
            "-fsS",
            &format!(
                "{}/ctxhost-test?list-type=2&prefix={prefix}/",
                std::env::var("CTXHOST_TEST_S3_URL").unwrap()
            ),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listing = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        !listing.contains("<IsTruncated>true"),
        "more than one page of objects: {listing}"
    );
    listing
        .split("<Key>")
        .skip(1)
        .filter_map(|k| k.split_once("</Key>").map(|(k, _)| k.to_string()))
        .collect()
}

/// The task key both tasks of [`a_task_only_in_the_bucket_is_read_served_inherited_and_cleaned_up`]
/// share (so the second inherits from the first).
const KEY: [&str; 10] = [
    "--source", "github", "--owner", "acme", "--repo", "widgets", "--type", "issue", "--id", "7",
];

/// Issue 30 item 4: a task that ran on host a, whose directory host b never had, is shown by
/// `show` on host b, served by host b's dashboard (task page, a message, a file), inherited by
/// a task of the same key run on host b, and removed from the bucket by `cleanup` on host b
/// (manifest, segments, blobs: nothing is left under the task's prefix).
fn a_task_only_in_the_bucket_is_read_served_inherited_and_cleaned_up() {
    let llm = two_step_llm(Duration::ZERO);
    let url = bucket_url();
    let env = remote_env(&llm, &url, 10);
    let submit = |host: &str, prompt: &str| {
        let mut args = vec!["submit"];
        args.extend_from_slice(&KEY);
        args.extend_from_slice(&["--prompt", prompt]);
        on_host(&env, host, &args).ok().stdout().trim().to_string()
    };
    let first = submit("host-a", "first");
    on_host(&env, "host-a", &["run", "--once", "--poll-ms", "20"]).ok();
    let row = rows(&env).into_iter().find(|r| r.uuid == first).unwrap();
    assert_eq!(
        (row.status, row.hostname.as_deref()),
        (Status::Completed, Some("host-a"))
    );
    assert!(
        !tree(&env, "host-b").join("completed").join(&first).exists(),
        "host b has no copy of the task"
    );
    let task_keys = |uuid: &str| -> Vec<String> {
        bucket_keys(&url)
            .into_iter()
            .filter(|k| k.contains(&format!("/tasks/{uuid}/")))
            .collect()
    };
    let objects = task_keys(&first);
    assert!(
        objects.iter().any(|k| k.ends_with("/manifest.json"))
            && objects.iter().any(|k| k.contains("/seg/")),
        "{objects:?}"
    );

    // show on host b (a new host: `init` makes its empty local tree).
    on_host(&env, "host-b", &["init"]).ok();
    let shown = on_host(
        &env,
        "host-b",
        &["show", &first, "--json", "--messages", "10"],
    )
    .ok()
    .json();
    assert_eq!(shown["result"], "finished first", "{shown:#}");
    assert_eq!(shown["dir_state"], "bucket", "{shown:#}");
    let roles: Vec<&str> = shown["last_messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant"]);
    // Its copy is kept apart from the working copies, and reused while the bucket holds the
    // same version (not downloaded again).
    let copy = PathBuf::from(shown["dir"].as_str().unwrap());
    assert!(
        copy.starts_with(tree(&env, "host-b").join(".remote/view")),
        "{copy:?}"
    );
    let inode = |p: &std::path::Path| {
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p.join("messages.jsonl")).unwrap())
    };
    let before = inode(&copy);
    let again = on_host(&env, "host-b", &["show", &first, "--json"])
        .ok()
        .json();
    assert_eq!(again["dir"], shown["dir"]);
    assert_eq!(inode(&copy), before, "downloaded again");

    // The dashboard of host b: the task page with its messages, one message in full, a file.
    {
        let dash = crate::support::dashboard::Dashboard::start_cmd(host_cmd(
            &env,
            "host-b",
            &["serve", "--bind", "127.0.0.1:0"],
        ));
        let page = dash.get(&format!("/tasks/{first}")).expect(200).body;
        assert!(page.contains("finished first"), "{page}");
        assert!(!page.contains("directory is missing"), "{page}");
        let tools = dash
            .get(&format!("/tasks/{first}?view=tools"))
            .expect(200)
            .body;
        assert!(tools.contains("read_text_file"), "{tools}");
        let message = dash
            .get(&format!("/tasks/{first}/messages/0"))
            .expect(200)
            .body;
        assert!(message.contains("system"), "{message}");
        let meta = dash
            .get(&format!("/tasks/{first}/files/metadata.json"))
            .expect(200)
            .body;
        assert!(meta.contains(&first), "{meta}");
    }

    // A task of the same key on host b inherits the first one's final answer.
    let second = submit("host-b", "second");
    on_host(&env, "host-b", &["run", "--once", "--poll-ms", "20"]).ok();
    let shown = on_host(&env, "host-b", &["show", &second, "--json"])
        .ok()
        .json();
    assert_eq!(shown["task"]["status"], "completed", "{shown:#}");
    assert_eq!(shown["inherited_from"]["uuid"], first.as_str(), "{shown:#}");
    assert_eq!(
        shown["inheritance_skipped"],
        Value::Array(vec![]),
        "{shown:#}"
    );
    let system = llm
        .requests()
        .into_iter()
        .find(|r| prompt_of(r) == "second")
        .expect("a request of the second task")
        .messages()[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(system.contains("finished first"), "{system}");

    // Host a reads the second task (it ran on b) from a copy of its own.
    let shown = on_host(&env, "host-a", &["show", &second, "--json"])
        .ok()
        .json();
    assert_eq!(shown["dir_state"], "bucket", "{shown:#}");
    let a_copy = PathBuf::from(shown["dir"].as_str().unwrap());

    // cleanup on host b deletes both tasks' objects, the first one's too (never here).
    let out = on_host(&env, "host-b", &["cleanup", "--all", "--json"])
        .ok()
        .json();
    let mut deleted: Vec<&str> = out["deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["uuid"].as_str().unwrap())
        .collect();
    deleted.sort();
    let mut both = [first.as_str(), second.as_str()];
    both.sort();
    assert_eq!(deleted, both, "{out:#}");
    assert_eq!(bucket_keys(&url), Vec::<String>::new(), "objects left");
    // Host a's own copy goes with its own cleanup; then both trees and the bucket agree.
    // (with its record of the first one's last sync, and its copy of the second one).
    on_host(&env, "host-a", &["cleanup", "--all"]).ok();
    assert!(!tree(&env, "host-a").join("completed").join(&first).exists());
    assert!(!a_copy.exists(), "{a_copy:?}");
    let remote_dir = tree(&env, "host-a").join(".remote");
    assert!(!remote_dir.join(format!("{first}.json")).exists());
    assert!(!remote_dir.join("view").join(&second).exists());
    for host in ["host-a", "host-b"] {
        let fsck = on_host(&env, host, &["fsck", "--json"]).json();
        assert_eq!(fsck["problems"], Value::Array(vec![]), "{host}: {fsck:#}");
    }
}

fn a_killed_hosts_tasks_are_finished_elsewhere_from_the_last_synced_step() {
    const LEASE: u64 = 3;
    let llm = two_step_llm(Duration::from_millis(1200));
    let url = bucket_url();
    let env = remote_env(&llm, &url, LEASE);
    let uuids = queue(&env, 6);
    let mut b = start(&env, "host-b", 3);
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
    let a = start(&env, "host-a", 2);
    let c = start(&env, "host-c", 2);
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
    assert_eq!(
        bucket_keys(&url),
        Vec::<String>::new(),
        "objects left after cleanup"
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

/// A task that failed on host a (its second LLM call refused) is retried on host b, whose tree
/// never had it: `retry` checks the bucket's copy (it used to refuse: "its directory is
/// missing"), and host b's worker continues the task from the bucket, its first step not run
/// again.
fn a_task_that_failed_on_another_host_is_retried_here_from_the_bucket() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let llm = FakeLlm::start(vec![]);
    let refuse = Arc::new(AtomicBool::new(true));
    let r = refuse.clone();
    llm.set_handler(move |req| {
        let last_is_tool = req.messages().last().is_some_and(|m| m["role"] == "tool");
        Some(if last_is_tool && r.load(Ordering::SeqCst) {
            crate::support::fake_llm::Reply::status(
                400,
                r#"{"error":{"message":"refused for the test","type":"invalid_request_error"}}"#,
                &[],
            )
        } else {
            crate::support::hosts::two_step_reply(req)
        })
    });
    let env = remote_env(&llm, &bucket_url(), 10);
    let uuid = queue(&env, 1).remove(0);
    let out = on_host(&env, "host-a", &["run", "--once", "--poll-ms", "20"]);
    assert_eq!(out.output.status.code(), Some(1), "{}", out.stderr());
    let row = rows(&env).remove(0);
    assert_eq!(row.status, Status::Failed, "{row:?}");
    on_host(&env, "host-b", &["init"]).ok();
    refuse.store(false, Ordering::SeqCst);
    let seen = llm.request_count();
    let out = on_host(&env, "host-b", &["retry", &uuid]).ok();
    assert!(
        out.stdout().contains("continues it from its context"),
        "{}",
        out.stdout()
    );
    on_host(&env, "host-b", &["run", "--once", "--poll-ms", "20"]).ok();
    let row = rows(&env).remove(0);
    assert_eq!(
        (row.status, row.hostname.as_deref()),
        (Status::Completed, Some("host-b")),
        "{row:?}"
    );
    // Host b asked only the step that had failed: its request holds host a's tool result.
    let again = llm.requests_from(seen);
    assert_eq!(again.len(), 1);
    let roles: Vec<String> = again[0]
        .messages()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
    let dir = tree(&env, "host-b").join("completed").join(&uuid);
    let seqs: Vec<u64> = read_jsonl(&dir.join("messages.jsonl"))
        .iter()
        .map(|m| m["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    let fsck = on_host(&env, "host-b", &["fsck", "--json"]).json();
    assert_eq!(fsck["problems"], Value::Array(vec![]), "{fsck:#}");
}

/// A task of a GitHub issue that ran on host a (whose worker does not publish: a config
/// without `sources`) is published by host b's `poll --once`: the comment carries the answer
/// read from the bucket (it came without one: host b's tree never had the task).
fn a_result_is_published_with_its_answer_by_a_host_that_never_had_the_task() {
    use crate::support::fake_forge::{FakeForge, Kind};
    let llm = two_step_llm(Duration::ZERO);
    let gh = FakeForge::github();
    let n = gh.add_item("acme/app", Kind::Issue, "Crash me", "x", &["coding agent"]);
    let mut env = remote_env(&llm, &bucket_url(), 10);
    env.set_env("CTXHOST_TEST_GITHUB_TOKEN", &gh.token());
    let config = std::fs::read_to_string(env.root().join("config.yaml")).unwrap();
    std::fs::write(
        env.root().join("sources.yaml"),
        format!(
            "{config}\nsources:\n  github:\n    api_url: \"{}\"\n    token_env: CTXHOST_TEST_GITHUB_TOKEN\n    repos: [acme/app]\n    poll_interval_secs: 1\n",
            gh.api_url()
        ),
    )
    .unwrap();
    on_host(&env, "host-b", &["init"]).ok();
    let polled = on_host(
        &env,
        "host-b",
        &["--config", "sources.yaml", "poll", "--once", "--json"],
    )
    .ok()
    .json();
    let uuid = polled["polls"][0][1]["queued"][0]["uuid"]
        .as_str()
        .unwrap_or_else(|| panic!("nothing queued: {polled:#}"))
        .to_string();
    on_host(&env, "host-a", &["run", "--once", "--poll-ms", "20"]).ok();
    assert!(gh.comments("acme/app", Kind::Issue, n).is_empty());
    let answer = on_host(&env, "host-a", &["show", &uuid, "--json"])
        .ok()
        .json()["result"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(answer.starts_with("finished "), "{answer}");
    on_host(
        &env,
        "host-b",
        &["--config", "sources.yaml", "poll", "--once"],
    )
    .ok();
    let comments = gh.comments("acme/app", Kind::Issue, n);
    assert_eq!(comments.len(), 1);
    assert!(
        comments[0].body.contains(&answer),
        "the comment lacks the answer {answer:?}: {}",
        comments[0].body
    );
}

/// Tasks [`three_hosts_drain_the_queue_while_the_object_store_restarts_and_a_host_is_killed`]
/// queues: `CTXHOST_DRAIN_TASKS`, 30 by default (`scripts/drain-remote.sh N` sets it).
fn drain_size() -> usize {
    std::env::var("CTXHOST_DRAIN_TASKS")
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("CTXHOST_DRAIN_TASKS={v:?}: not a number"))
        })
        .unwrap_or(30)
}

/// Lines of `name` in a task directory (0 when it is missing).
fn line_count(dir: &std::path::Path, name: &str) -> usize {
    std::fs::read_to_string(dir.join(name))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// The issue's "done when": three hosts with local trees of their own drain the queue through
/// PostgreSQL and SeaweedFS while the object store restarts and one host is killed (kill -9 of
/// its worker and task processes) with tasks in flight. Each task is run once (the fake LLM's
/// log: two requests per task; a task of the killed host at most one more, the step it was
/// in), its history is one uninterrupted run's, its row's counters equal its files, the killed
/// host's tasks complete elsewhere, and `fsck` finds bucket, rows and trees in agreement (only the
/// killed host's uncommitted segments are left, as garbage no manifest names).
fn three_hosts_drain_the_queue_while_the_object_store_restarts_and_a_host_is_killed() {
    const LEASE: u64 = 4;
    let n = drain_size();
    let tmp = tempfile::tempdir().unwrap();
    let s3 = OwnS3 {
        dir: tmp.path().join("s3"),
    };
    let endpoint = s3.script("start");
    let llm = two_step_llm(Duration::from_millis(300));
    let env = remote_env_at(&llm, &bucket_url(), &endpoint, LEASE);
    let uuids = queue(&env, n);
    let t0 = std::time::Instant::now();
    let mut workers: Vec<Worker> = ["host-a", "host-b", "host-c"]
        .iter()
        .map(|h| start(&env, h, 2))
        .collect();
    let completed = || {
        rows(&env)
            .iter()
            .filter(|r| r.status == Status::Completed)
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(120), || completed() >= n / 5),
        "no progress:\n{}",
        workers[0].log()
    );
    // The object store goes away for a few seconds mid-run: syncs and claims wait and retry.
    s3.script("restart");
    // Then host c dies with as many tasks in flight as it runs at once (2), each in one of
    // its steps, synced or not.
    assert!(
        wait_until(Duration::from_secs(300), || {
            completed() >= n / 3
                && rows(&env)
                    .iter()
                    .filter(|r| {
                        r.status == Status::Running && r.hostname.as_deref() == Some("host-c")
                    })
                    .count()
                    == 2
        }),
        "host c never had two tasks in flight:\n{}",
        workers[2].log()
    );
    workers[2].kill_host();
    let c_tasks: Vec<String> = rows(&env)
        .iter()
        .filter(|r| r.status == Status::Running && r.hostname.as_deref() == Some("host-c"))
        .map(|r| r.uuid.clone())
        .collect();
    assert!(!c_tasks.is_empty());
    let all = wait_all_completed(
        &env,
        300 + 3 * n as u64,
        &workers.iter().collect::<Vec<_>>(),
    );
    let secs = t0.elapsed().as_secs_f64();
    assert_eq!(all.len(), n);

    // Per task: requests made, and the tokens their replies carry (25 for the first step's,
    // 35 for the final answer's).
    let mut requests: std::collections::BTreeMap<String, (usize, i64)> = Default::default();
    for r in llm.requests() {
        let last_is_tool = r.messages().last().is_some_and(|m| m["role"] == "tool");
        let e = requests.entry(prompt_of(&r)).or_default();
        e.0 += 1;
        e.1 += if last_is_tool { 35 } else { 25 };
    }
    assert_eq!(requests.len(), n, "every task asked the LLM");
    let mut per_host: std::collections::BTreeMap<String, usize> = Default::default();
    let (mut repeated_steps, mut lost_counted) = (0, 0);
    for r in &all {
        let host = r.hostname.clone().unwrap();
        let (asked, asked_tokens) = requests[&r.prompt];
        assert_eq!(r.error_message, None, "{r:?}");
        // The completing host's copy (the bucket's): one uninterrupted run's history.
        let dir = tree(&env, &host).join("completed").join(&r.uuid);
        let history = read_jsonl(&dir.join("messages.jsonl"));
        let roles: Vec<&str> = history
            .iter()
            .map(|m| m["role"].as_str().unwrap_or("?"))
            .collect();
        assert_eq!(
            roles,
            ["system", "user", "assistant", "tool", "assistant"],
            "{}",
            r.uuid
        );
        let files = (
            line_count(&dir, "llm_calls.jsonl") as i64,
            line_count(&dir, "tools.jsonl") as i64,
        );
        assert_eq!(files, (2, 1), "{}", r.uuid);
        if c_tasks.contains(&r.uuid) {
            // Taken over once, finished by another host from the last synced step: at most
            // the step in flight at the kill is asked again. The row counts every call whose
            // usage reached it, the lost step's included (it was made, and billed), never
            // more than were made: its files hold the history from the last synced step on.
            assert_ne!(host, "host-c", "{r:?}");
            assert_eq!(r.crash_count, 1, "{r:?}");
            assert!((2..=3).contains(&asked), "{}: {asked} requests", r.uuid);
            assert!(
                (2..=asked as i64).contains(&r.llm_call_count)
                    && (60..=asked_tokens).contains(&r.total_tokens)
                    && r.tool_call_count - 1 <= r.llm_call_count - 2,
                "{r:?}: {asked} requests, {asked_tokens} tokens"
            );
            repeated_steps += asked - 2;
            lost_counted += r.llm_call_count - files.0;
        } else {
            // Run once: its row, its files and the LLM's log agree exactly.
            assert_eq!(r.crash_count, 0, "{r:?}");
            assert_eq!(
                (asked, asked_tokens),
                (2, 60),
                "{} ran more than once",
                r.uuid
            );
            assert_eq!(
                (r.llm_call_count, r.tool_call_count, r.total_tokens),
                (2, 1, 60),
                "{r:?}"
            );
        }
        *per_host.entry(host).or_default() += 1;
    }
    assert_eq!(uuids.len(), n);
    assert_eq!(per_host.len(), 3, "every host ran tasks: {per_host:?}");
    eprintln!(
        "drain: {n} tasks on 3 hosts in {secs:.1} s ({:.2} tasks/s); completed per host {per_host:?}; \
         host-c killed with {} task(s) in flight, taken over elsewhere, {repeated_steps} step(s) asked again, \
         {lost_counted} call(s) of a lost step counted in their rows; {} LLM requests",
        n as f64 / secs,
        c_tasks.len(),
        llm.request_count()
    );
    for w in &workers[..2] {
        assert!(!w.log().contains(" ERROR "), "{}:\n{}", w.host, w.log());
    }
    drop(workers);
    // The only thing a kill -9 may leave: segments of host c's last sync that never committed
    // (no manifest names them; `fsck --repair` deletes them once 2 hours old). Nothing else.
    let fsck = on_host(&env, "host-b", &["fsck", "--json"]).json();
    let problems = fsck["problems"].as_array().unwrap();
    let unexpected: Vec<&Value> = problems
        .iter()
        .filter(|p| {
            !(p["kind"] == "remote-unreferenced"
                && c_tasks
                    .iter()
                    .any(|u| p["uuid"].as_str() == Some(u.as_str())))
        })
        .collect();
    assert!(unexpected.is_empty(), "{fsck:#}");
}

/// Fresh-user report F3: the last sync of a task completed on host a fails (failpoint
/// `remote:end-sync`, as if the bucket were down), so the bucket's copy lacks the answer. The
/// task end logs an error naming the fix; `fsck` on host a reports its copy ahead of the bucket
/// (`remote-behind`), `fsck --repair` uploads it (a fenced sync), and host b's `show` then has
/// the answer; `fsck` finds nothing more.
fn a_finished_tasks_failed_last_sync_is_reported_and_uploaded_by_fsck_repair() {
    let llm = two_step_llm(Duration::ZERO);
    let url = bucket_url();
    let env = remote_env(&llm, &url, 10);
    let uuid = on_host(&env, "host-a", &["submit", "--prompt", "first"])
        .ok()
        .stdout()
        .trim()
        .to_string();
    let mut cmd = host_cmd(&env, "host-a", &["run", "--once", "--poll-ms", "20"]);
    cmd.cmd
        .env(ctxhost::failpoint::FAILPOINT_ENV, "remote:end-sync");
    let run = cmd.run().ok();
    let log = format!("{}{}", run.stdout(), run.stderr());
    assert!(
        log.contains("ERROR") && log.contains("fsck --repair") && log.contains(&uuid),
        "{log}"
    );
    let row = rows(&env).into_iter().find(|r| r.uuid == uuid).unwrap();
    assert_eq!(row.status, Status::Completed);
    on_host(&env, "host-b", &["init"]).ok();
    let stale = on_host(&env, "host-b", &["show", &uuid, "--json"])
        .ok()
        .json();
    assert_ne!(stale["result"], "finished first", "{stale:#}");

    let fsck = on_host(&env, "host-a", &["fsck", "--json"]).json();
    let problems = fsck["problems"].as_array().unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p["kind"] == "remote-behind" && p["uuid"] == uuid.as_str()),
        "{fsck:#}"
    );
    // Host b has no copy of its own: nothing is behind there.
    let fsck_b = on_host(&env, "host-b", &["fsck", "--json"]).json();
    assert!(
        !fsck_b["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["kind"] == "remote-behind"),
        "{fsck_b:#}"
    );
    let repaired = on_host(&env, "host-a", &["fsck", "--repair", "--json"]).json();
    assert!(
        repaired["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["kind"] == "remote-behind" && p["repaired"].is_string()),
        "{repaired:#}"
    );
    assert_eq!(repaired["remaining"], Value::Array(vec![]), "{repaired:#}");
    let shown = on_host(&env, "host-b", &["show", &uuid, "--json"])
        .ok()
        .json();
    assert_eq!(shown["result"], "finished first", "{shown:#}");
    assert_eq!(shown["dir_state"], "bucket", "{shown:#}");
    let after = on_host(&env, "host-a", &["fsck", "--json"]).json();
    assert_eq!(after["problems"], Value::Array(vec![]), "{after:#}");

    // Again, and this time the next `run` on host a uploads it when it starts.
    let second = on_host(&env, "host-a", &["submit", "--prompt", "second"])
        .ok()
        .stdout()
        .trim()
        .to_string();
    let mut cmd = host_cmd(&env, "host-a", &["run", "--once", "--poll-ms", "20"]);
    cmd.cmd
        .env(ctxhost::failpoint::FAILPOINT_ENV, "remote:end-sync");
    cmd.run().ok();
    let stale = on_host(&env, "host-b", &["show", &second, "--json"])
        .ok()
        .json();
    assert_ne!(stale["result"], "finished second", "{stale:#}");
    on_host(&env, "host-a", &["run", "--once", "--poll-ms", "20"]).ok();
    let shown = on_host(&env, "host-b", &["show", &second, "--json"])
        .ok()
        .json();
    assert_eq!(shown["result"], "finished second", "{shown:#}");
    let after = on_host(&env, "host-a", &["fsck", "--json"]).json();
    assert_eq!(after["problems"], Value::Array(vec![]), "{after:#}");
}

/// Fresh-user report F4: `show` with a bucket that refuses connections prints the row (status,
/// counters) and says the bucket is unavailable, on stdout and as `bucket_error` in `--json`,
/// with a warning on stderr and exit 0, after a short wait (not `retry_secs`, 120 s here).
fn show_prints_the_row_when_the_bucket_is_unreachable() {
    let llm = two_step_llm(Duration::ZERO);
    let env = remote_env_at(&llm, &bucket_url(), "http://127.0.0.1:1", 10);
    let uuid = env
        .ctxhost(&["submit", "--prompt", "first"])
        .ok()
        .stdout()
        .trim()
        .to_string();
    let started = std::time::Instant::now();
    let out = env.ctxhost(&["show", &uuid]).ok();
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    let text = out.stdout();
    assert!(text.contains(&format!("uuid:          {uuid}")), "{text}");
    assert!(text.contains("status:        queued"), "{text}");
    assert!(text.contains("bucket:        unavailable ("), "{text}");
    assert!(
        out.stderr()
            .contains("warning: the task directory could not be read from the bucket")
    );
    let json = env.ctxhost(&["show", &uuid, "--json"]).ok().json();
    assert_eq!(json["task"]["status"], "queued", "{json:#}");
    assert!(
        json["bucket_error"]
            .as_str()
            .is_some_and(|e| e.contains("127.0.0.1:1")),
        "{json:#}"
    );
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
    fn a_task_only_in_the_bucket_is_read_served_inherited_and_cleaned_up() {
        crate::support::store::on_postgres(
            super::a_task_only_in_the_bucket_is_read_served_inherited_and_cleaned_up,
        )
    }

    #[test]
    #[cfg_attr(
        not(all(ctxhost_pg_tests, ctxhost_s3_tests)),
        ignore = "needs PostgreSQL and SeaweedFS: CTXHOST_TEST_DATABASE_URL (scripts/test-postgres.sh start) and CTXHOST_TEST_S3_URL (scripts/test-s3.sh start)"
    )]
    fn a_task_that_failed_on_another_host_is_retried_here_from_the_bucket() {
        crate::support::store::on_postgres(
            super::a_task_that_failed_on_another_host_is_retried_here_from_the_bucket,
        )
    }

    #[test]
    #[cfg_attr(
        not(all(ctxhost_pg_tests, ctxhost_s3_tests)),
        ignore = "needs PostgreSQL and SeaweedFS: CTXHOST_TEST_DATABASE_URL (scripts/test-postgres.sh start) and CTXHOST_TEST_S3_URL (scripts/test-s3.sh start)"
    )]
    fn a_result_is_published_with_its_answer_by_a_host_that_never_had_the_task() {
        crate::support::store::on_postgres(
            super::a_result_is_published_with_its_answer_by_a_host_that_never_had_the_task,
        )
    }

    #[test]
    #[cfg_attr(
        not(all(ctxhost_pg_tests, ctxhost_s3_tests)),
        ignore = "needs PostgreSQL and SeaweedFS: CTXHOST_TEST_DATABASE_URL (scripts/test-postgres.sh start) and CTXHOST_TEST_S3_URL (scripts/test-s3.sh start)"
    )]
    fn three_hosts_drain_the_queue_while_the_object_store_restarts_and_a_host_is_killed() {
        crate::support::store::on_postgres(
            super::three_hosts_drain_the_queue_while_the_object_store_restarts_and_a_host_is_killed,
        )
    }

    #[test]
    #[cfg_attr(
        not(all(ctxhost_pg_tests, ctxhost_s3_tests)),
        ignore = "needs PostgreSQL and SeaweedFS: CTXHOST_TEST_DATABASE_URL (scripts/test-postgres.sh start) and CTXHOST_TEST_S3_URL (scripts/test-s3.sh start)"
    )]
    fn a_finished_tasks_failed_last_sync_is_reported_and_uploaded_by_fsck_repair() {
        crate::support::store::on_postgres(
            super::a_finished_tasks_failed_last_sync_is_reported_and_uploaded_by_fsck_repair,
        )
    }

    #[test]
    #[cfg_attr(
        not(ctxhost_pg_tests),
        ignore = "needs PostgreSQL: CTXHOST_TEST_DATABASE_URL (scripts/test-postgres.sh start)"
    )]
    fn show_prints_the_row_when_the_bucket_is_unreachable() {
        crate::support::store::on_postgres(
            super::show_prints_the_row_when_the_bucket_is_unreachable,
        )
    }
}
