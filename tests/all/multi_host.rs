//! Workers on several hosts sharing one PostgreSQL task store and one contexts/ tree (issue
//! 18). Each "host" is a worker with a host name of its own (`CTXHOST_HOSTNAME`), so a pid is
//! only checked by the worker of its own host and liveness across hosts is the lease. Against
//! the fake LLM: 200 tasks on three hosts each run exactly once with exact counters; a host
//! killed with kill -9 has its tasks taken over once their leases expire; the database
//! stopped and started mid-run loses no task; `ctxhost migrate` to PostgreSQL and back keeps
//! every row; a tree of another store is refused; the URL's password never shows.
//!
//! Every test here needs the PostgreSQL test server (see [`crate::support::store`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ctxhost::db::{Db, Status, StoreSpec, TaskFilter};
use serde_json::Value;

use crate::support::fake_llm::FakeLlm;
use crate::support::hosts::{
    Worker, prompt_of, queue, queue_into, rows, two_step_llm, wait_all_completed,
};
use crate::support::store;
use crate::support::{TestEnv, config_yaml, find_task_dir, read_jsonl, wait_until};

/// A shared tree on PostgreSQL with the fake LLM, leases of `lease_secs`.
fn shared_env(llm: &FakeLlm, lease_secs: u64) -> TestEnv {
    assert!(store::postgres(), "multi-host tests run on PostgreSQL");
    let env = TestEnv::new();
    env.write_config(&config_yaml(
        &llm.base_url(),
        "openai",
        &format!(
            "plugins:\n  compressor: none\nworker:\n  lease_secs: {lease_secs}\n  max_crashes: 3\n"
        ),
    ));
    env.ctxhost(&["init"]).ok();
    env
}

/// Task directories are in completed/, with messages.jsonl seq 1..n: one system prompt, one
/// user message, and the same turns as one uninterrupted run (two LLM replies and one tool
/// result), in that order.
fn check_dir(env: &TestEnv, uuid: &str) {
    let dir = find_task_dir(&env.contexts(), uuid).expect("task directory");
    assert_eq!(dir, env.contexts().join("completed").join(uuid));
    let history = read_jsonl(&dir.join("messages.jsonl"));
    let roles: Vec<&str> = history
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool", "assistant"],
        "{uuid}"
    );
    let seqs: Vec<u64> = history.iter().map(|m| m["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
}

/// `ctxhost fsck` finds nothing.
fn fsck_clean(env: &TestEnv) {
    let report = env.ctxhost(&["fsck", "--json"]).json();
    assert_eq!(report["problems"], Value::Array(vec![]), "{report:#}");
}

fn two_hundred_tasks_on_three_hosts_run_exactly_once_with_exact_counters() {
    let llm = two_step_llm(Duration::ZERO);
    let env = shared_env(&llm, 10);
    let uuids = queue(&env, 200);
    let t0 = Instant::now();
    let workers: Vec<Worker> = ["host-a", "host-b", "host-c"]
        .iter()
        .map(|h| Worker::start(&env, h, 3))
        .collect();
    let all = wait_all_completed(&env, 600, &workers.iter().collect::<Vec<_>>());
    let secs = t0.elapsed().as_secs_f64();
    eprintln!(
        "200 tasks on 3 hosts: {secs:.1} s ({:.1} tasks/s)",
        200.0 / secs
    );

    // Each task run exactly once: two LLM requests with its prompt, one process, no crash.
    let mut requests: BTreeMap<String, usize> = BTreeMap::new();
    for r in llm.requests() {
        *requests.entry(prompt_of(&r)).or_default() += 1;
    }
    assert_eq!(requests.len(), 200);
    assert!(requests.values().all(|n| *n == 2), "{requests:?}");
    assert_eq!(llm.request_count(), 400);

    let mut per_host: BTreeMap<String, usize> = BTreeMap::new();
    let mut processes = BTreeSet::new();
    for r in &all {
        assert_eq!(
            (r.llm_call_count, r.tool_call_count, r.total_tokens),
            (2, 1, 60),
            "{r:?}"
        );
        assert_eq!((r.crash_count, r.resume_count), (0, 0), "{r:?}");
        assert_eq!(r.error_message, None);
        let host = r.hostname.clone().unwrap();
        assert!(
            r.worker_id
                .as_deref()
                .unwrap()
                .starts_with(&format!("{host}:")),
            "{r:?}"
        );
        processes.insert((host.clone(), r.process_id.unwrap()));
        *per_host.entry(host).or_default() += 1;
    }
    assert_eq!(processes.len(), 200, "one process per task");
    assert_eq!(
        per_host.keys().collect::<Vec<_>>(),
        ["host-a", "host-b", "host-c"],
        "every host ran tasks: {per_host:?}"
    );
    for uuid in &uuids {
        check_dir(&env, uuid);
    }
    let stats = env.ctxhost(&["stats", "--json"]).ok().json();
    assert_eq!(stats["total"]["llm_calls"], 400);
    assert_eq!(stats["total"]["tool_calls"], 200);
    assert_eq!(stats["total"]["total_tokens"], 12_000);
    for w in &workers {
        let log = w.log();
        assert!(!log.contains(" ERROR "), "{}:\n{log}", w.host);
    }
    fsck_clean(&env);
}

fn a_killed_hosts_tasks_are_taken_over_after_the_lease_and_complete() {
    const LEASE: u64 = 3;
    let llm = two_step_llm(Duration::from_millis(1500));
    let env = shared_env(&llm, LEASE);
    let uuids = queue(&env, 12);
    let mut b = Worker::start(&env, "host-b", 3);
    // Host b takes three tasks first, alone.
    assert!(
        wait_until(Duration::from_secs(60), || {
            rows(&env)
                .iter()
                .filter(|r| r.status == Status::Running && r.hostname.as_deref() == Some("host-b"))
                .count()
                == 3
        }),
        "host-b did not start its tasks:\n{}",
        b.log()
    );
    let a = Worker::start(&env, "host-a", 2);
    let c = Worker::start(&env, "host-c", 2);
    // Let b's tasks get into their LLM calls, then kill host b: worker and task processes.
    std::thread::sleep(Duration::from_millis(500));
    b.kill_host();
    let killed_at = Instant::now();
    let b_tasks: Vec<String> = rows(&env)
        .iter()
        .filter(|r| r.status == Status::Running && r.hostname.as_deref() == Some("host-b"))
        .map(|r| r.uuid.clone())
        .collect();
    assert_eq!(
        b_tasks.len(),
        3,
        "host b's tasks are still running when it dies"
    );
    let seen_before = llm.request_count();

    let all = wait_all_completed(&env, 300, &[&a, &c]);
    assert_eq!(all.len(), 12);
    for r in &all {
        assert_ne!(r.hostname.as_deref(), Some("host-b"), "{r:?}");
        let crashed = b_tasks.contains(&r.uuid);
        assert_eq!(r.crash_count, i64::from(crashed), "{r:?}");
        assert_eq!(
            (r.llm_call_count >= 2, r.tool_call_count >= 1),
            (true, true)
        );
        check_dir(&env, &r.uuid);
    }
    // Not before the lease could have expired: b renewed it at most LEASE/3 s before dying.
    let first_retry = llm
        .requests_from(seen_before)
        .into_iter()
        .filter(|r| {
            let p = prompt_of(r);
            all.iter()
                .any(|t| b_tasks.contains(&t.uuid) && t.prompt == p)
        })
        .map(|r| r.at)
        .min()
        .expect("b's tasks were run again");
    let waited = first_retry.duration_since(killed_at);
    assert!(
        waited >= Duration::from_secs(LEASE) * 2 / 3 - Duration::from_millis(100),
        "taken over after {waited:?}, before the lease expired"
    );
    let logs = format!("{}\n{}", a.log(), c.log());
    for uuid in &b_tasks {
        assert!(
            logs.lines()
                .any(|l| l.contains(uuid.as_str()) && l.contains("the lease of worker host-b:")),
            "no lease takeover of {uuid} in the logs:\n{logs}"
        );
    }
    assert_eq!(uuids.len(), 12);
    fsck_clean(&env);
}

/// Issue 25 item 3: two live hosts with the same host name (`twin`) but different host
/// identities share the queue. Neither takes over the other's tasks (a pid of the other one is
/// not checked here: its lease is), so every task runs exactly once with no crash; and the
/// workers warn that the name is not unique.
fn two_live_hosts_with_one_name_leave_each_others_tasks_alone() {
    let llm = two_step_llm(Duration::from_millis(800));
    let env = shared_env(&llm, 10);
    queue(&env, 12);
    let workers = [
        Worker::start_as(&env, "twin", Some("machine-one"), 3),
        Worker::start_as(&env, "twin", Some("machine-two"), 3),
    ];
    let all = wait_all_completed(&env, 300, &workers.iter().collect::<Vec<_>>());
    let mut ids = BTreeSet::new();
    for r in &all {
        assert_eq!(
            (r.crash_count, r.error_message.as_deref()),
            (0, None),
            "{r:?}"
        );
        assert_eq!(
            (r.llm_call_count, r.tool_call_count, r.total_tokens),
            (2, 1, 60),
            "{r:?}"
        );
        assert_eq!(r.hostname.as_deref(), Some("twin"));
        ids.insert(r.host_id.clone().unwrap());
        check_dir(&env, &r.uuid);
    }
    assert_eq!(llm.request_count(), 24, "each task ran exactly once");
    assert_eq!(
        ids.into_iter().collect::<Vec<_>>(),
        ["machine-one", "machine-two"],
        "both hosts ran tasks"
    );
    let logs = format!("{}\n{}", workers[0].log(), workers[1].log());
    assert!(
        logs.contains("another worker runs tasks under this host name (twin)"),
        "{logs}"
    );
    assert!(!logs.contains("is gone"), "{logs}");
    fsck_clean(&env);
}

/// A PostgreSQL cluster of the test's own (restarting the shared one would disturb the other
/// tests), destroyed with it.
struct PrivateCluster {
    dir: PathBuf,
    admin: String,
}

impl PrivateCluster {
    fn start() -> PrivateCluster {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("pg-restart-{}", uuid::Uuid::new_v4().simple()));
        let port = crate::support::unused_port().to_string();
        let out = Self::script(&["start", dir.to_str().unwrap(), &port]);
        PrivateCluster {
            dir,
            admin: out.trim().to_string(),
        }
    }

    fn script(args: &[&str]) -> String {
        let out = std::process::Command::new(
            crate::support::repo_root().join("scripts/test-postgres.sh"),
        )
        .args(args)
        .output()
        .unwrap();
        assert!(
            out.status.success(),
            "test-postgres.sh {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn stop(&self) {
        Self::script(&["stop", self.dir.to_str().unwrap()]);
    }

    fn start_again(&self) {
        Self::script(&["start", self.dir.to_str().unwrap()]);
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new(
            crate::support::repo_root().join("scripts/test-postgres.sh"),
        )
        .args(["destroy", self.dir.to_str().unwrap()])
        .output();
    }
}

fn a_database_stopped_and_started_mid_run_loses_no_task() {
    let cluster = PrivateCluster::start();
    let url = {
        let mut c = ::postgres::Client::connect(&cluster.admin, ::postgres::NoTls).unwrap();
        c.batch_execute("CREATE DATABASE restart_test").unwrap();
        store::database_url(&cluster.admin, "restart_test")
    };
    let llm = two_step_llm(Duration::from_millis(700));
    let mut env = TestEnv::new();
    env.use_postgres_url(&url);
    env.write_config(&config_yaml(
        &llm.base_url(),
        "openai",
        "plugins:\n  compressor: none\nworker:\n  lease_secs: 20\n",
    ));
    env.ctxhost(&["init"]).ok();
    let spec = env.store_spec();
    queue(&env, 24);
    let workers = [
        Worker::start(&env, "host-a", 3),
        Worker::start(&env, "host-b", 3),
    ];
    let completed = |n: usize| {
        let (spec, contexts) = (spec.clone(), env.contexts());
        move || {
            Db::open(&spec, &contexts)
                .and_then(|db| db.list(&TaskFilter::default()))
                .is_ok_and(|rows| {
                    rows.iter()
                        .filter(|r| r.status == Status::Completed)
                        .count()
                        >= n
                })
        }
    };
    assert!(wait_until(Duration::from_secs(120), completed(6)));
    // Down for 3 s, while tasks are in their LLM calls: their usage, their ends, the workers'
    // queue lookups all meet the outage.
    cluster.stop();
    std::thread::sleep(Duration::from_secs(3));
    cluster.start_again();
    assert!(
        wait_until(Duration::from_secs(300), completed(24)),
        "not every task completed after the restart:\n{}\n{}",
        workers[0].log(),
        workers[1].log()
    );
    let db = Db::open(&spec, &env.contexts()).unwrap();
    for r in db.list(&TaskFilter::default()).unwrap() {
        assert_eq!(r.status, Status::Completed, "{r:?}");
        // Exact: a write cut off by the restart is applied once (or, for a task whose process
        // lost its lease and ran again, its calls are counted per call made).
        assert!(r.llm_call_count >= 2 && r.tool_call_count >= 1, "{r:?}");
        if r.crash_count == 0 {
            assert_eq!(
                (r.llm_call_count, r.tool_call_count, r.total_tokens),
                (2, 1, 60),
                "{r:?}"
            );
        }
        check_dir(&env, &r.uuid);
    }
    let logs = format!("{}\n{}", workers[0].log(), workers[1].log());
    assert!(logs.contains("database unreachable"), "{logs}");
    assert!(logs.contains("database reachable again"), "{logs}");
    let password = ctxhost::db::PgUrl::parse(&url, "x")
        .unwrap()
        .password()
        .unwrap();
    assert!(!logs.contains(&password), "the password reached a log");
    drop(workers);
    fsck_clean(&env);
}

fn migrate_to_postgres_and_back_keeps_every_row() {
    // A SQLite tree with tasks in every state, two of them run to the end.
    let llm = two_step_llm(Duration::ZERO);
    let env = TestEnv::new();
    let pg = env.pg.as_ref().unwrap();
    let url = pg.url.clone();
    let password = pg.password();
    let sqlite_yaml = config_yaml(&llm.base_url(), "openai", "task_store: sqlite\n");
    env.write_config(&sqlite_yaml);
    env.ctxhost(&["init"]).ok();
    assert!(env.contexts().join("tasks.db").is_file());
    let queued = queue_on(&env, &StoreSpec::Sqlite, 3);
    env.ctxhost(&["run", "--once"]).ok();
    let more = queue_on(&env, &StoreSpec::Sqlite, 2);
    env.ctxhost(&["stop", &more[0]]).ok();
    let before = env.ctxhost(&["tasks", "--json"]).ok().json();
    let stats_before = env.ctxhost(&["stats", "--json"]).ok().json();
    assert_eq!(before.as_array().unwrap().len(), 5);
    assert_eq!(stats_before["by_status"]["completed"], 3, "{stats_before}");

    // Into an empty PostgreSQL database.
    let out = env.ctxhost(&["migrate", "--to", "postgres"]).ok();
    let text = format!("{}{}", out.stdout(), out.stderr());
    assert!(text.contains("migrated 5 task(s)"), "{text}");
    assert!(
        text.contains("task_store: {url_env: CTXHOST_DATABASE_URL}"),
        "{text}"
    );
    assert!(!text.contains(&password), "{text}");
    assert!(!env.contexts().join("tasks.db").exists());
    let binding: Value =
        serde_json::from_str(&std::fs::read_to_string(env.contexts().join("store.json")).unwrap())
            .unwrap();
    assert_eq!(binding["store"], "postgres");
    assert!(!binding.to_string().contains(&password));

    // The SQLite config no longer opens the tree, whatever the command.
    for args in [&["tasks"][..], &["run", "--once"][..], &["submit", "x"][..]] {
        let e = env.ctxhost(args).fails();
        assert_eq!(e.code(), Some(2), "{args:?}: {}", e.stderr());
        assert!(
            e.stderr().contains("belongs to the postgres task store")
                && e.stderr().contains("task_store: {url_env: VARIABLE}"),
            "{args:?}: {}",
            e.stderr()
        );
    }
    // On PostgreSQL: the same rows, and the queue goes on.
    env.write_config(&config_yaml(
        &llm.base_url(),
        "openai",
        &format!("task_store:\n  url_env: {}\n", store::URL_ENV),
    ));
    assert_eq!(env.ctxhost(&["tasks", "--json"]).ok().json(), before);
    same_stats(
        &env.ctxhost(&["stats", "--json"]).ok().json(),
        &stats_before,
    );
    env.ctxhost(&["run", "--once"]).ok();
    let after_run = env.ctxhost(&["tasks", "--json"]).ok().json();
    let completed = after_run
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["status"] == "completed")
        .count();
    assert_eq!(completed, 4);

    // A running task refuses a migration (stop the workers first).
    let pg_db = Db::open(&env.store_spec(), &env.contexts()).unwrap();
    let running = queue_on(&env, &env.store_spec(), 1).remove(0);
    pg_db
        .execute_raw(&format!(
            "UPDATE tasks SET status = 'running' WHERE uuid = '{running}'"
        ))
        .unwrap();
    let e = env.ctxhost(&["migrate", "--to", "sqlite"]).fails();
    assert_eq!(e.code(), Some(2));
    assert!(
        e.stderr().contains("1 task(s) are running"),
        "{}",
        e.stderr()
    );
    pg_db
        .execute_raw(&format!("DELETE FROM tasks WHERE uuid = '{running}'"))
        .unwrap();

    // And back into a new tasks.db, every row as it is in PostgreSQL.
    let pg_rows = pg_db.list(&TaskFilter::default()).unwrap();
    drop(pg_db);
    let out = env
        .ctxhost(&["migrate", "--to", "sqlite", "--json"])
        .ok()
        .json();
    assert_eq!(out["copied"], 5, "{out}");
    env.write_config(&sqlite_yaml);
    let back = Db::open(&StoreSpec::Sqlite, &env.contexts())
        .unwrap()
        .list(&TaskFilter::default())
        .unwrap();
    assert_eq!(back, pg_rows);
    assert_eq!(env.ctxhost(&["tasks", "--json"]).ok().json(), after_run);
    // The PostgreSQL database kept its rows but is no longer this tree's: migrating into it
    // again is refused (it is not empty).
    let e = env.ctxhost(&["migrate", "--to", "postgres"]).fails();
    assert_eq!(e.code(), Some(2));
    assert!(
        e.stderr().contains("already holds 5 task(s)"),
        "{}",
        e.stderr()
    );
    assert!(!e.stderr().contains(&password));
    assert_eq!(url, env.pg.as_ref().unwrap().url);
    assert_eq!(queued.len(), 3);
    fsck_clean(&env);
}

fn a_second_tree_and_a_bad_password_are_refused_without_showing_the_password() {
    let llm = two_step_llm(Duration::ZERO);
    let env = shared_env(&llm, 10);
    let pg = env.pg.as_ref().unwrap();
    let password = pg.password();
    queue(&env, 1);
    let out = env.ctxhost(&["-vv", "run", "--once"]).ok();
    assert!(!out.stderr().contains(&password), "{}", out.stderr());
    // Nothing under contexts/ holds the password.
    let mut stack = vec![env.contexts()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p) {
                let text = String::from_utf8_lossy(&bytes);
                assert!(
                    !text.contains(&password),
                    "{} holds the password",
                    p.display()
                );
            }
        }
    }

    // A second tree (a host where the shared tree is not mounted) on the same database.
    let other = TestEnv::new();
    let mut cmd = other.ctxhost_cmd(&["--contexts", "elsewhere", "run", "--once"]);
    cmd.cmd.env(store::URL_ENV, &pg.url).current_dir(env.root());
    let e = cmd.run().fails();
    assert_eq!(e.code(), Some(2), "{}", e.stderr());
    assert!(
        e.stderr()
            .contains("is already used with another contexts tree")
            && e.stderr().contains("share one contexts/ directory"),
        "{}",
        e.stderr()
    );
    assert!(!e.stderr().contains(&password));

    // A wrong password: the error names the user and the database, not the password.
    let wrong = pg.url.replace(&password, "not-the-password-42");
    let mut cmd = env.ctxhost_cmd(&["tasks"]);
    cmd.cmd.env(store::URL_ENV, &wrong);
    let e = cmd.run().fails();
    assert!(
        e.stderr().contains("password authentication failed")
            && e.stderr().contains("postgres://ctxhost@"),
        "{}",
        e.stderr()
    );
    assert!(
        !e.stderr().contains("not-the-password-42"),
        "{}",
        e.stderr()
    );
    // An unset variable is named.
    let mut cmd = env.ctxhost_cmd(&["tasks"]);
    cmd.cmd.env_remove(store::URL_ENV);
    let e = cmd.run().fails();
    assert_eq!(e.code(), Some(2));
    assert!(
        e.stderr().contains("CTXHOST_DATABASE_URL is not set"),
        "{}",
        e.stderr()
    );
}

/// `ctxhost stats --json` of two stores agree: every count and sum, and mean durations to a
/// microsecond (the two databases compute them in their own floating point).
fn same_stats(a: &Value, b: &Value) {
    fn split(v: &Value) -> (Value, Vec<f64>) {
        let mut v = v.clone();
        let mut durations = Vec::new();
        let mut take = |m: &mut Value| {
            durations.push(m["avg_duration_secs"].as_f64().unwrap_or(-1.0));
            m["avg_duration_secs"] = Value::Null;
        };
        take(&mut v["total"]);
        for m in v["by_model"].as_array_mut().unwrap() {
            take(m);
        }
        (v, durations)
    }
    let ((va, da), (vb, db)) = (split(a), split(b));
    assert_eq!(va, vb);
    assert_eq!(da.len(), db.len());
    for (x, y) in da.iter().zip(&db) {
        assert!((x - y).abs() < 1e-6, "mean durations {x} and {y}");
    }
}

/// Insert `n` queued tasks into the store `spec` of `env`'s tree.
fn queue_on(env: &TestEnv, spec: &StoreSpec, n: usize) -> Vec<String> {
    let db = Db::open(spec, &env.contexts()).unwrap();
    queue_into(&db, n, Some("ann"), |i, uuid| {
        format!("migrated-{i}-{uuid}")
    })
}

// Every test of this module needs PostgreSQL (they are not run on SQLite).
store::postgres_variants!(
    two_hundred_tasks_on_three_hosts_run_exactly_once_with_exact_counters,
    a_killed_hosts_tasks_are_taken_over_after_the_lease_and_complete,
    two_live_hosts_with_one_name_leave_each_others_tasks_alone,
    a_database_stopped_and_started_mid_run_loses_no_task,
    migrate_to_postgres_and_back_keeps_every_row,
    a_second_tree_and_a_bad_password_are_refused_without_showing_the_password,
);
