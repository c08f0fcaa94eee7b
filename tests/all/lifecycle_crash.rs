//! Every lifecycle transition killed between its two halves (issue 9): the row is written, the
//! process dies by SIGKILL before the directory moves (failpoint `lifecycle:NAME`). Then:
//! `ctxhost fsck` names exactly that in-between state (fixable) or finds nothing; recovery
//! (`ctxhost recover`, or `ctxhost cleanup` for a cleanup) finishes it; `ctxhost fsck` finds
//! nothing and the row's status and the directory agree with the lifecycle table.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use ctxhost::db::Status;
use ctxhost::layout::{DirState, Layout};
use ctxhost::lifecycle::{self, dir_rule, find_dirs};
use serde_json::Value;

use crate::support::fake_llm::{FakeLlm, Reply};
use crate::support::task::TaskBuilder;
use crate::support::{CmdOutput, TestEnv, read_lines};

/// An environment whose LLM is `url` (no call is made unless a test says so).
fn env(url: &str) -> TestEnv {
    let env = TestEnv::new().with_llm(url);
    env.ctxhost(&["init"]).ok();
    env
}

/// Run `ctxhost ARGS` with failpoints `points` on; it must die by SIGKILL.
fn killed(env: &TestEnv, points: &str, args: &[&str]) -> CmdOutput {
    let mut cmd = env.ctxhost_cmd(args);
    cmd.cmd.env(ctxhost::failpoint::FAILPOINT_ENV, points);
    let out = cmd.run();
    assert_eq!(
        out.output.status.signal(),
        Some(libc::SIGKILL),
        "ctxhost {args:?} was not killed by the failpoint {points}: {}\n{}",
        out.output.status,
        out.stderr()
    );
    out
}

/// Set a request flag on a row directly (the CLI only asks a running task to pause or stop;
/// these tests want it honoured at the very first safe point).
fn request(contexts: &Path, uuid: &str, column: &str) {
    let db = rusqlite::Connection::open(contexts.join("tasks.db")).unwrap();
    db.execute(
        &format!("UPDATE tasks SET {column} = 1 WHERE uuid = ?1"),
        [uuid],
    )
    .unwrap();
}

/// The fsck report's problems as (kind, fixable).
fn problems(env: &TestEnv) -> Vec<(String, bool)> {
    let report: Value = env.ctxhost(&["fsck", "--json"]).json();
    report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["kind"].as_str().unwrap().to_string(),
                p["fixable"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// After the kill: the row has `status`, the directory is still in `left_in` (or nowhere),
/// fsck reports `kind` (fixable; `None`: nothing). After `recover` (the recovery command):
/// fsck finds nothing and status and directory agree.
fn check(
    env: &TestEnv,
    uuid: &str,
    status: Status,
    left_in: Option<DirState>,
    kind: Option<&str>,
    recover: &[&str],
) {
    let layout = Layout::new(env.contexts());
    let db = TaskBuilder::new(&env.contexts()).db();
    let row = db.get(uuid).unwrap().unwrap();
    assert_eq!(row.status, status, "the row half was written");
    assert_eq!(
        find_dirs(&layout, uuid),
        left_in.into_iter().collect::<Vec<_>>(),
        "the directory half was not done"
    );
    let found = problems(env);
    match kind {
        Some(kind) => assert_eq!(
            found,
            [(kind.to_string(), true)],
            "fsck names the in-between state"
        ),
        None => assert!(found.is_empty(), "{found:?}"),
    }
    env.ctxhost(recover).ok();
    assert!(problems(env).is_empty(), "fsck after recovery");
    let row = db.get(uuid).unwrap().unwrap();
    let dirs = find_dirs(&layout, uuid);
    let rule = dir_rule(row.status);
    if row.files_deleted_at.is_some() {
        assert!(dirs.is_empty());
    } else if !dirs.is_empty() || !rule.may_be_absent {
        assert_eq!(
            dirs,
            [rule.folder],
            "{} keeps its directory in {}/",
            row.status,
            rule.folder
        );
    }
}

#[test]
fn claim_killed_before_its_directory_moves() {
    let env = env("http://127.0.0.1:9");
    let uuid = TaskBuilder::new(&env.contexts()).paused();
    crate::support::task::TaskBuilder::new(&env.contexts());
    env.ctxhost(&["resume", &uuid]).ok();
    killed(&env, "lifecycle:claim", &["task-exec", &uuid]);
    // Running under a dead process, its directory still in paused/: recovery queues it again.
    check(
        &env,
        &uuid,
        Status::Running,
        Some(DirState::Paused),
        Some("dead-process"),
        &["recover"],
    );
    assert_eq!(
        TaskBuilder::new(&env.contexts())
            .db()
            .get(&uuid)
            .unwrap()
            .unwrap()
            .status,
        Status::Queued
    );
}

#[test]
fn pause_killed_before_its_directory_moves() {
    let env = env("http://127.0.0.1:9");
    let uuid = TaskBuilder::new(&env.contexts()).queued();
    request(&env.contexts(), &uuid, "pause_requested");
    killed(&env, "lifecycle:pause", &["task-exec", &uuid]);
    check(
        &env,
        &uuid,
        Status::Paused,
        Some(DirState::Running),
        Some("interrupted-transition"),
        &["recover"],
    );
    let dir = env.contexts().join("paused").join(&uuid);
    assert!(
        dir.join("task_state.json").is_file(),
        "written before the row"
    );
}

#[test]
fn finish_killed_before_its_directory_moves() {
    let llm = FakeLlm::start(vec![Reply::text("hi", Some((10, 2)))]);
    let env = env(&llm.base_url());
    let uuid = TaskBuilder::new(&env.contexts()).queued();
    killed(&env, "lifecycle:finish", &["task-exec", &uuid]);
    check(
        &env,
        &uuid,
        Status::Completed,
        Some(DirState::Running),
        Some("interrupted-transition"),
        &["recover"],
    );
    let history: Vec<ctxhost_format::HistoryLine> = read_lines(
        &env.contexts()
            .join("completed")
            .join(&uuid)
            .join("messages.jsonl"),
    );
    assert_eq!(
        history.last().and_then(|h| h.content.as_deref()),
        Some("hi")
    );
    // A stop honoured at a safe point is the same transition.
    let uuid = TaskBuilder::new(&env.contexts()).queued();
    request(&env.contexts(), &uuid, "stop_requested");
    killed(&env, "lifecycle:finish", &["task-exec", &uuid]);
    check(
        &env,
        &uuid,
        Status::Stopped,
        Some(DirState::Running),
        Some("interrupted-transition"),
        &["recover"],
    );
}

#[test]
fn recovery_killed_before_its_directory_moves() {
    let env = env("http://127.0.0.1:9");
    let uuid = TaskBuilder::new(&env.contexts()).running_dead();
    killed(&env, "lifecycle:recover", &["recover"]);
    check(
        &env,
        &uuid,
        Status::Queued,
        Some(DirState::Running),
        Some("interrupted-transition"),
        &["recover"],
    );
}

#[test]
fn resume_killed_after_its_row() {
    let env = env("http://127.0.0.1:9");
    let uuid = TaskBuilder::new(&env.contexts()).paused();
    killed(&env, "lifecycle:resume", &["resume", &uuid]);
    // A queued task keeps its directory in paused/: nothing is in between.
    check(
        &env,
        &uuid,
        Status::Queued,
        Some(DirState::Paused),
        None,
        &["recover"],
    );
}

#[test]
fn stop_killed_before_its_directory_moves() {
    let env = env("http://127.0.0.1:9");
    let uuid = TaskBuilder::new(&env.contexts()).paused();
    killed(&env, "lifecycle:stop", &["stop", &uuid]);
    check(
        &env,
        &uuid,
        Status::Stopped,
        Some(DirState::Paused),
        Some("interrupted-transition"),
        &["recover"],
    );
}

#[test]
fn start_failure_killed_before_its_directory_moves() {
    let env = env("http://127.0.0.1:9");
    // A resumed task (directory in paused/) whose process never starts.
    let uuid = TaskBuilder::new(&env.contexts()).paused();
    env.ctxhost(&["resume", &uuid]).ok();
    killed(
        &env,
        "task-exec:exit,lifecycle:fail-start",
        &["run", "--once", "--poll-ms", "20"],
    );
    check(
        &env,
        &uuid,
        Status::Failed,
        Some(DirState::Paused),
        Some("interrupted-transition"),
        &["recover"],
    );
}

#[test]
fn cleanup_killed_before_its_directory_is_deleted() {
    let env = env("http://127.0.0.1:9");
    let uuid = TaskBuilder::new(&env.contexts()).finished(Status::Completed);
    killed(&env, "lifecycle:delete-files", &["cleanup", "--all"]);
    check(
        &env,
        &uuid,
        Status::Completed,
        Some(DirState::Completed),
        Some("interrupted-cleanup"),
        &["cleanup", "--all"],
    );
    assert!(lifecycle::find_dirs(&Layout::new(env.contexts()), &uuid).is_empty());
}
