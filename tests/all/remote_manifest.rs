//! The bucket of `context_storage.remote` as the tasks' store of record (issue 30), against the
//! SeaweedFS test server (`scripts/test-s3.sh`, `CTXHOST_TEST_S3_URL`): `fsck --deep` finds an
//! object whose bytes changed without its size changing, and `fsck` names objects no manifest
//! names; a bucket that cannot be reached pauses the task after its retry budget (or at once
//! on SIGTERM), says so instead of "waiting for the model", and the task resumes from the
//! bucket once it is back; `init` on a second host sharing the database and the bucket.
//!
//! Built `#[ignore]`d without the S3 server (and PostgreSQL, for the multi-host test).

use std::io::BufRead as _;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::fake_llm::{FakeLlm, Reply};
use crate::support::{TestEnv, config_yaml, find_task_dir, read_json, unused_port};
use ctxhost::db::Status;

fn s3_url() -> String {
    std::env::var("CTXHOST_TEST_S3_URL")
        .expect("CTXHOST_TEST_S3_URL: start the server with `scripts/test-s3.sh start`")
}

/// A bucket prefix of this test's own.
fn bucket_url() -> String {
    format!(
        "s3://ctxhost-test/manifest-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// The config of `env` with its task directories kept under `url` at `endpoint`.
fn remote_config(llm: &FakeLlm, url: &str, endpoint: &str, retry_secs: u64) -> String {
    let yaml = config_yaml(&llm.base_url(), "openai", "plugins:\n  compressor: none\n").replace(
        "context_storage:\n  base_dir: ./contexts\n",
        &format!(
            "context_storage:\n  base_dir: ./contexts\n  remote:\n    url: {url}\n    endpoint: \"{endpoint}\"\n    region: us-east-1\n    allow_http: true\n    retry_secs: {retry_secs}\n"
        ),
    );
    assert!(yaml.contains("retry_secs"), "{yaml}");
    yaml
}

fn remote_env(llm: &FakeLlm, url: &str, endpoint: &str, retry_secs: u64) -> TestEnv {
    let mut env = TestEnv::new();
    // Any key: the test server takes every signature; the variables are the standard ones.
    env.set_env("AWS_ACCESS_KEY_ID", "ctxhost-test");
    env.set_env("AWS_SECRET_ACCESS_KEY", "ctxhost-test-secret");
    env.write_config(&remote_config(llm, url, endpoint, retry_secs));
    env.ctxhost(&["init"]).ok();
    env
}

/// The bucket under `url`, as the test sees it.
fn store(url: &str) -> ctxhost::remote::Store {
    let cfg = ctxhost::remote::RemoteConfig {
        url: url.to_string(),
        endpoint: Some(s3_url()),
        region: Some("us-east-1".into()),
        allow_http: true,
        retry_secs: 5,
        unsafe_unfenced: false,
    };
    let b = object_store::aws::AmazonS3Builder::new()
        .with_access_key_id("ctxhost-test")
        .with_secret_access_key("ctxhost-test-secret");
    ctxhost::remote::Store::open_with(&cfg, b).unwrap()
}

fn events(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The row of task `uuid`, read from the store (`show` would ask the bucket first).
fn row(env: &TestEnv, uuid: &str) -> ctxhost::db::TaskRow {
    ctxhost::db::Db::open(&env.store_spec(), &env.contexts())
        .unwrap()
        .get(uuid)
        .unwrap()
        .unwrap()
}

fn problems(fsck: &Value, kind: &str) -> Vec<Value> {
    fsck["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == kind)
        .cloned()
        .collect()
}

#[test]
#[cfg_attr(
    not(ctxhost_s3_tests),
    ignore = "needs CTXHOST_TEST_S3_URL (scripts/test-s3.sh start)"
)]
fn fsck_deep_finds_an_object_whose_bytes_changed_and_fsck_names_unreferenced_objects() {
    let llm = FakeLlm::start(vec![Reply::text("I did not call a tool.", Some((10, 5)))]);
    let url = bucket_url();
    let mut env = remote_env(&llm, &url, &s3_url(), 10);
    env.expect_nonconforming("the bucket's copy is damaged, the local one is not");
    let out = env.ctxhost(&["ask", "--json", "hi"]).ok();
    let end = events(&out.stdout()).pop().unwrap();
    assert_eq!(end["status"], "completed", "{end:#}");
    let uuid = end["uuid"].as_str().unwrap().to_string();
    let fsck = env.ctxhost(&["fsck", "--deep", "--json"]).json();
    assert_eq!(fsck["problems"], Value::Array(vec![]), "{fsck:#}");

    // A segment of messages.jsonl replaced with other bytes of the same size.
    let bucket = store(&url);
    let m = ctxhost::remote::read_manifest(&bucket, &uuid)
        .unwrap()
        .unwrap()
        .manifest;
    let segments = match &m.files["messages.jsonl"] {
        ctxhost::remote::manifest::FileEntry::Appended { segments, .. } => segments.clone(),
        e => panic!("{e:?}"),
    };
    let (key, mut bytes, at) = segments
        .iter()
        .find_map(|s| {
            let (bytes, _) = bucket.get(&uuid, &s.key).unwrap().unwrap();
            let at = bytes
                .windows(b"I did not".len())
                .position(|w| w == b"I did not")?;
            Some((s.key.clone(), bytes, at))
        })
        .expect("the reply in a segment");
    bytes[at..at + 9].copy_from_slice(b"HACKED!!!");
    bucket.put(&uuid, &key, bytes).unwrap();
    // A stray object no manifest names (as a sync that never committed leaves).
    bucket
        .put(&uuid, "idx/messages.jsonl/0123abcd", b"{}".to_vec())
        .unwrap();

    // Without --deep only presence and sizes are compared: the change is not seen.
    let fsck = env.ctxhost(&["fsck", "--json"]).json();
    assert_eq!(
        problems(&fsck, "remote-object"),
        Vec::<Value>::new(),
        "{fsck:#}"
    );
    let stray = problems(&fsck, "remote-unreferenced");
    assert_eq!(stray.len(), 1, "{fsck:#}");
    assert!(
        stray[0]["path"]
            .as_str()
            .unwrap()
            .ends_with(&format!("tasks/{uuid}/idx/messages.jsonl/0123abcd")),
        "{fsck:#}"
    );
    // Young: a sync may still be committing it, so --repair leaves it.
    assert_eq!(stray[0]["fixable"], false, "{fsck:#}");

    let fsck = env.ctxhost(&["fsck", "--deep", "--json"]).json();
    let bad = problems(&fsck, "remote-object");
    assert_eq!(bad.len(), 1, "{fsck:#}");
    assert!(bad[0]["path"].as_str().unwrap().ends_with(&key), "{fsck:#}");
    let msg = bad[0]["message"].as_str().unwrap();
    assert!(msg.contains("SHA-256") && msg.contains("changed"), "{msg}");
    assert_eq!(bad[0]["uuid"], uuid.as_str());
}

/// `ask --json PROMPT` started in the background; its stdout lines arrive on the channel.
fn ask_in_background(
    env: &TestEnv,
    prompt: &str,
) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    let mut child = env.ctxhost_cmd(&["ask", "--json", prompt]).spawn();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stdout).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

#[test]
#[cfg_attr(
    not(ctxhost_s3_tests),
    ignore = "needs CTXHOST_TEST_S3_URL (scripts/test-s3.sh start)"
)]
fn an_unreachable_bucket_pauses_the_task_after_its_retry_budget_and_it_resumes_once_back() {
    let llm = FakeLlm::start(vec![Reply::text("ok", Some((10, 1)))]);
    let url = bucket_url();
    // Nothing listens there: every connection is refused.
    let down = format!("http://127.0.0.1:{}", unused_port());
    let env = remote_env(&llm, &url, &down, 3);
    let started = Instant::now();
    let out = env.ctxhost(&["ask", "--json", "Say ok"]).ok();
    let took = started.elapsed();
    let evs = events(&out.stdout());
    // retry_secs 3: attempts after 1 s and 2 s more, then it gives up (3 attempts).
    let waiting: Vec<&Value> = evs.iter().filter(|e| e["event"] == "waiting").collect();
    assert!(
        waiting.iter().any(
            |e| e["on"] == format!("object store unreachable: {down}, retrying (2/3)").as_str()
        ),
        "{evs:#?}"
    );
    let end = evs.last().unwrap();
    assert_eq!(end["event"], "end");
    assert_eq!(end["status"], "paused", "{evs:#?}\n{}", out.stderr());
    assert!(
        out.stderr()
            .contains(&format!("object store unreachable: {down}, retrying (3/3)")),
        "{}",
        out.stderr()
    );
    assert!(took < Duration::from_secs(60), "took {took:?}");
    assert_eq!(llm.request_count(), 0);
    let uuid = end["uuid"].as_str().unwrap().to_string();
    let r = row(&env, &uuid);
    assert_eq!(
        (r.status, r.error_message.as_deref()),
        (Status::Paused, None)
    );
    // The pause says why (the first request of the claim is the probe of conditional
    // writes, issue 38, for a store not probed yet).
    let state = read_json(
        &find_task_dir(&env.contexts(), &uuid)
            .unwrap()
            .join("task_state.json"),
    );
    assert!(
        state["reason"]
            .as_str()
            .unwrap()
            .starts_with(&format!("object store unreachable: {down}: PUT ")),
        "{state:#}"
    );

    // The store is back (here: the config names the running one): resumed, the task runs.
    env.write_config(&remote_config(&llm, &url, &s3_url(), 10));
    env.ctxhost(&["resume", &uuid]).ok();
    env.ctxhost(&["run", "--once"]).ok();
    assert_eq!(row(&env, &uuid).status, Status::Completed);
    assert_eq!(llm.request_count(), 1);
    assert!(
        ctxhost::remote::read_manifest(&store(&url), &uuid)
            .unwrap()
            .is_some()
    );
}

#[test]
#[cfg_attr(
    not(ctxhost_s3_tests),
    ignore = "needs CTXHOST_TEST_S3_URL (scripts/test-s3.sh start)"
)]
fn sigterm_while_the_bucket_is_retried_pauses_the_task_at_once() {
    let llm = FakeLlm::start(vec![Reply::text("ok", Some((10, 1)))]);
    let down = format!("http://127.0.0.1:{}", unused_port());
    // An hour of retries, unless interrupted.
    let env = remote_env(&llm, &bucket_url(), &down, 3600);
    let (mut child, lines) = ask_in_background(&env, "Say ok");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    let uuid = loop {
        let l = lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("no waiting event within 60 s: {seen:#?}"));
        let v: Value = serde_json::from_str(&l).unwrap();
        seen.push(v.clone());
        if v["event"] == "waiting" && v["on"].is_string() {
            assert!(
                v["on"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("object store unreachable: {down}, retrying (")),
                "{v}"
            );
            break seen[0]["uuid"].as_str().unwrap().to_string();
        }
    };
    // SAFETY: kill has no memory effects; the child is this test's own.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let signalled = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(20),
            "ask did not end within 20 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // 130: SIGTERM paused the task (the shell convention for an interrupted command).
    assert_eq!(status.code(), Some(130), "{status:?}");
    let rest: Vec<Value> = lines
        .try_iter()
        .map(|l| serde_json::from_str(&l).unwrap())
        .collect();
    let end = rest.last().unwrap();
    assert_eq!(
        (&end["event"], &end["status"]),
        (&"end".into(), &"paused".into()),
        "{rest:#?}"
    );
    let r = row(&env, &uuid);
    assert_eq!(
        (r.status, r.error_message.as_deref()),
        (Status::Paused, None)
    );
    assert_eq!(llm.request_count(), 0);
    // The wait note is gone with the waiting.
    assert!(!env.contexts().join(".remote/wait").join(&uuid).exists());
}

/// `ctxhost init` on a second host whose config shares the PostgreSQL database and the bucket
/// with a first one: its tree is a working copy of the one tree the store is bound to. The
/// same second tree without the bucket is refused (workers without a bucket must share one
/// tree).
fn init_on_a_second_host_sharing_the_database_and_the_bucket() {
    let llm = FakeLlm::start(vec![Reply::text("done", Some((10, 1)))]);
    let url = bucket_url();
    let env = remote_env(&llm, &url, &s3_url(), 10);
    let a = env.root().join("tree-a");
    let b = env.root().join("tree-b");
    for t in [&a, &b] {
        let out = env
            .ctxhost(&["--contexts", t.to_str().unwrap(), "init"])
            .ok();
        assert!(t.join("store.json").is_file(), "{}", out.stderr());
    }
    let id = |t: &std::path::Path| {
        let v: Value =
            serde_json::from_slice(&std::fs::read(t.join("store.json")).unwrap()).unwrap();
        v["contexts_id"].clone()
    };
    assert_eq!(id(&a), id(&b));
    // A task queued on one host is run from the other.
    let queued = env
        .ctxhost(&[
            "--contexts",
            a.to_str().unwrap(),
            "submit",
            "--prompt",
            "hi",
        ])
        .ok()
        .stdout();
    let uuid = queued.trim().to_string();
    env.ctxhost(&["--contexts", b.to_str().unwrap(), "run", "--once"])
        .ok();
    assert_eq!(row(&env, &uuid).status, Status::Completed);

    // Without the bucket, a third tree may not share the store.
    env.write_config(&config_yaml(&llm.base_url(), "openai", ""));
    let c = env.root().join("tree-c");
    let out = env
        .ctxhost(&["--contexts", c.to_str().unwrap(), "init"])
        .fails();
    assert!(
        out.stderr()
            .contains("is already used with another contexts tree"),
        "{}",
        out.stderr()
    );
}

mod postgres {
    #[test]
    #[cfg_attr(
        not(all(ctxhost_pg_tests, ctxhost_s3_tests)),
        ignore = "needs PostgreSQL and SeaweedFS: CTXHOST_TEST_DATABASE_URL (scripts/test-postgres.sh start) and CTXHOST_TEST_S3_URL (scripts/test-s3.sh start)"
    )]
    fn init_on_a_second_host_sharing_the_database_and_the_bucket() {
        crate::support::store::on_postgres(
            super::init_on_a_second_host_sharing_the_database_and_the_bucket,
        )
    }
}
