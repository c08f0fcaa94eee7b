//! Operators' tools (issue 11, items 8–11), with the `ctxhost` binary:
//!
//! - `ctxhost tasks` (table and `--json`) and `stats` whose reader closes the pipe early exit
//!   quietly (0, no panic);
//! - `ctxhost fsck` finds a missing messages.jsonl and a tasks.db that `submit` rejects;
//!   `fsck --repair` removes a line of NUL bytes; `ctxhost retry` then requeues the task that
//!   damage failed, and it continues from its context; `ctxhost resume` (the same check) queues
//!   a paused task whose damage its process repairs when it starts and refuses one it would
//!   fail on, until `fsck --repair`;
//! - `cleanup --days 0` and `cleanup_days: 0` agree (both refused, pointing to `--all`), and
//!   `cleanup --all` deletes every finished task's directory;
//! - every JSONL line written (by the host and by the components) has U+2028/U+2029 escaped.

use std::fs;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::process::Stdio;

use ctxhost::db::Status;
use serde_json::Value;

use crate::support::fake_llm::{FakeLlm, Reply};
use crate::support::hosts::queue_into;
use crate::support::task::TaskBuilder;
use crate::support::{TestEnv, config_yaml, find_task_dir, read_jsonl};

fn env_for(llm: &FakeLlm) -> TestEnv {
    let env = TestEnv::new();
    env.write_config(&config_yaml(&llm.base_url(), "openai", ""));
    env.ctxhost(&["init"]).ok();
    env
}

fn row(env: &TestEnv, uuid: &str) -> Value {
    env.ctxhost(&["show", uuid, "--json"]).ok().json()["task"].clone()
}

/// `n` queued tasks, inserted through one connection.
fn many_tasks(env: &TestEnv, n: usize) {
    let db = TaskBuilder::new(&env.contexts()).db();
    queue_into(&db, n, Some("ops"), |i, _| {
        format!("task number {i}: explain the module and list its public items")
    });
}

#[test]
fn a_reader_that_closes_the_pipe_early_ends_the_command_quietly() {
    let llm = FakeLlm::start(vec![]);
    let env = env_for(&llm);
    // More output than a pipe holds (64 KiB), so the command is still writing when the reader
    // goes away, as with `ctxhost tasks | head -1`.
    many_tasks(&env, 1200);
    for args in [
        &["tasks", "--limit", "5000"][..],
        &["tasks", "--limit", "5000", "--json"],
    ] {
        let mut child = env.ctxhost_cmd(args).spawn();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert!(!first.is_empty(), "{args:?}");
        // The reader (and the pipe) is gone now.
        let status = child.wait().unwrap();
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert_eq!(status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(stderr.trim().is_empty(), "{args:?}: {stderr}");
    }
    // A reader that is gone before the first line (stats is short).
    for args in [
        &["stats"][..],
        &["stats", "--json"],
        &["tasks", "--limit", "1"],
        // clap_complete panics on a failed write of its own.
        &["completions", "bash"],
        &["completions", "fish"],
    ] {
        let mut cmd = env.ctxhost_cmd(args);
        cmd.cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.cmd.spawn().unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(stderr.trim().is_empty(), "{args:?}: {stderr}");
    }
}

#[test]
fn fsck_finds_a_missing_history() {
    let llm = FakeLlm::start(vec![]);
    let env = env_for(&llm);
    let tasks = TaskBuilder::new(&env.contexts());
    let uuid = tasks.finished(Status::Completed);
    fs::remove_file(tasks.dir_of(&uuid).join("messages.jsonl")).unwrap();
    let out = env.ctxhost(&["fsck", "--json"]);
    assert_eq!(out.code(), Some(1));
    let report = out.json();
    let problems = report["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0]["kind"], "missing-file");
    assert!(
        problems[0]["path"]
            .as_str()
            .unwrap()
            .ends_with("messages.jsonl")
    );
    assert!(
        problems[0]["message"]
            .as_str()
            .unwrap()
            .contains("current.jsonl exist(s)"),
        "{}",
        problems[0]
    );
}

#[test]
fn fsck_finds_a_database_that_submit_rejects() {
    let llm = FakeLlm::start(vec![]);
    let env = env_for(&llm);
    let tasks = TaskBuilder::new(&env.contexts());
    for _ in 0..3 {
        tasks.queued();
    }
    // Damage the root page of the status index: reads that do not use it still work, every
    // insert fails.
    let path = env.contexts().join("tasks.db");
    let (page_size, root): (i64, i64) = {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        let page_size = c.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
        let root = c
            .query_row(
                "SELECT rootpage FROM sqlite_master WHERE name = 'idx_tasks_status'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        (page_size, root)
    };
    let mut f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.seek(SeekFrom::Start(((root - 1) * page_size) as u64))
        .unwrap();
    f.write_all(&vec![0xA5; page_size as usize]).unwrap();
    drop(f);

    let submit = env.ctxhost(&["submit", "--prompt", "one more"]);
    assert_ne!(submit.code(), Some(0), "submit accepted a damaged database");
    let out = env.ctxhost(&["fsck", "--json"]);
    assert_eq!(out.code(), Some(1), "{}", out.stderr());
    let report = out.json();
    let damaged: Vec<&Value> = report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "database-damaged")
        .collect();
    assert!(!damaged.is_empty(), "{report:#}");
    let message = damaged[0]["message"].as_str().unwrap();
    assert!(message.contains("integrity check"), "{message}");
    assert!(damaged[0]["path"].as_str().unwrap().ends_with("tasks.db"));
    // The text report names it too.
    let text = env.ctxhost(&["fsck"]).stdout();
    assert!(text.contains("tasks.db"), "{text}");
}

#[test]
fn a_line_of_nul_bytes_fails_the_task_until_fsck_repair_and_retry_continue_it() {
    let llm = FakeLlm::start(vec![Reply::text("Hi again.", None)]);
    let env = env_for(&llm);
    let tasks = TaskBuilder::new(&env.contexts());
    let uuid = tasks.paused();
    let dir = tasks.dir_of(&uuid);
    // A lost write in the middle of messages.jsonl: a run of NUL bytes between two lines.
    let history = fs::read_to_string(dir.join("messages.jsonl")).unwrap();
    let (first, rest) = history.split_once('\n').unwrap();
    let mut damaged = format!("{first}\n").into_bytes();
    damaged.extend([0u8; 512]);
    damaged.push(b'\n');
    damaged.extend(rest.as_bytes());
    fs::write(dir.join("messages.jsonl"), &damaged).unwrap();

    // Queued with the damage (no `ctxhost resume`, which refuses it): the task fails on it.
    tasks.requeue(&uuid);
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    let failed = row(&env, &uuid);
    assert_eq!(failed["status"], "failed", "{failed}");
    assert!(
        failed["error_message"]
            .as_str()
            .unwrap()
            .contains("messages.jsonl"),
        "{failed}"
    );
    assert_eq!(llm.request_count(), 0);

    // retry refuses while fsck finds problems, naming them.
    let refused = env.ctxhost(&["retry", &uuid]);
    assert_eq!(refused.code(), Some(1));
    assert!(
        refused.stderr().contains("NUL byte") && refused.stderr().contains("ctxhost fsck --repair"),
        "{}",
        refused.stderr()
    );
    let fsck = env.ctxhost(&["fsck", "--json"]).json();
    let nul: Vec<&Value> = fsck["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "nul-bytes")
        .collect();
    assert_eq!(nul.len(), 1, "{fsck:#}");
    assert_eq!(nul[0]["line"], 2);
    assert_eq!(nul[0]["fixable"], true);

    let repaired = env.ctxhost(&["fsck", "--repair"]);
    assert_eq!(repaired.code(), Some(0), "{}", repaired.stdout());
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    assert_eq!(
        fs::read_to_string(dir.join("messages.jsonl")).unwrap(),
        history
    );

    env.ctxhost(&["retry", &uuid]).ok();
    let queued = row(&env, &uuid);
    assert_eq!(queued["status"], "queued");
    assert_eq!(queued["error_message"], Value::Null);
    assert!(env.contexts().join("paused").join(&uuid).is_dir());
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    assert_eq!(row(&env, &uuid)["status"], "completed");
    // It continued from its context: the system prompt and the prompt, not added again.
    let sent = llm.requests()[0].messages();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[1]["content"], "say hi");

    // Only a failed task can be retried.
    let again = env.ctxhost(&["retry", &uuid]);
    assert_eq!(again.code(), Some(1));
    assert!(
        again.stderr().contains("only a failed task can be retried"),
        "{}",
        again.stderr()
    );
}

/// `ctxhost resume` judges a paused task's files as `ctxhost fsck` does, through the check
/// `retry` uses. A torn last line (what a crash leaves) is something the task process repairs
/// when it starts: the task is queued with a warning naming file and line, the torn bytes are
/// kept in `messages.jsonl.torn`, and it completes. A line of NUL bytes is something it would
/// fail on: refused, naming the file and line, `ctxhost fsck --repair` and the command to run
/// again; the task stays paused, and after the repair it resumes and completes.
#[test]
fn resume_queues_what_the_task_repairs_and_refuses_what_it_would_fail_on() {
    let llm = FakeLlm::start(vec![
        Reply::text("Hi again.", None),
        Reply::text("Hi again.", None),
    ]);
    let env = env_for(&llm);
    let tasks = TaskBuilder::new(&env.contexts());

    // A torn last line: queued with a warning, cut by the task process.
    let torn = tasks.paused();
    let dir = tasks.dir_of(&torn);
    let history = fs::read_to_string(dir.join("messages.jsonl")).unwrap();
    let torn_line = history.lines().count() + 1;
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(dir.join("messages.jsonl"))
        .unwrap();
    f.write_all(br#"{"seq":3,"role":"assist"#).unwrap();
    drop(f);
    let resumed = env.ctxhost(&["resume", &torn]).ok();
    assert!(
        resumed
            .stderr()
            .contains(&format!("messages.jsonl:{torn_line}: torn last line"))
            && resumed.stderr().contains("the task cuts it when it starts"),
        "{}",
        resumed.stderr()
    );
    assert_eq!(row(&env, &torn)["status"], "queued");
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    assert_eq!(row(&env, &torn)["status"], "completed");
    let done = env.contexts().join("completed").join(&torn);
    assert!(
        fs::read_to_string(done.join("messages.jsonl.torn"))
            .unwrap()
            .starts_with(r#"{"seq":3,"role":"assist"#)
    );
    assert_eq!(llm.requests()[0].messages().len(), 2);

    // A line of NUL bytes: refused until fsck --repair.
    let nul = tasks.paused();
    let dir = tasks.dir_of(&nul);
    let history = fs::read_to_string(dir.join("messages.jsonl")).unwrap();
    let nul_line = history.lines().count() + 1;
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(dir.join("messages.jsonl"))
        .unwrap();
    f.write_all(&[0u8; 40]).unwrap();
    f.write_all(b"\n").unwrap();
    drop(f);
    let refused = env.ctxhost(&["resume", &nul]);
    assert_eq!(refused.code(), Some(1), "{}", refused.stderr());
    let err = refused.stderr();
    assert!(
        err.contains(&format!(
            "task {nul} cannot be resumed: its files have 1 problem(s) it would fail on"
        )) && err.contains(&format!("messages.jsonl:{nul_line}: "))
            && err.contains("run `ctxhost fsck --repair`")
            && err.contains(&format!("then `ctxhost resume {nul}` again")),
        "{err}"
    );
    assert_eq!(row(&env, &nul)["status"], "paused");
    assert!(env.contexts().join("paused").join(&nul).is_dir());
    // fsck reports the same problem, at the same line.
    let fsck = env.ctxhost(&["fsck", "--json"]).json();
    let found: Vec<&Value> = fsck["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "nul-bytes")
        .collect();
    assert_eq!(found.len(), 1, "{fsck:#}");
    assert_eq!(found[0]["line"], nul_line as u64);

    env.ctxhost(&["fsck", "--repair"]).ok();
    env.ctxhost(&["resume", &nul]).ok();
    assert_eq!(row(&env, &nul)["status"], "queued");
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    assert_eq!(row(&env, &nul)["status"], "completed");
}

/// A paused task whose directory (or whose history) was removed by hand cannot continue from
/// its context:
/// `ctxhost resume` refuses it (it used to queue it, and the task started over from its prompt
/// as if it had never run); so does `retry` for a failed task that ran.
#[test]
fn resume_and_retry_refuse_a_task_whose_directory_is_gone() {
    let llm = FakeLlm::start(vec![]);
    let env = env_for(&llm);
    let tasks = TaskBuilder::new(&env.contexts());
    let paused = tasks.paused();
    fs::remove_dir_all(tasks.dir_of(&paused)).unwrap();
    let refused = env.ctxhost(&["resume", &paused]);
    assert_eq!(refused.code(), Some(1), "{}", refused.stderr());
    assert!(
        refused.stderr().contains("its directory is missing")
            && refused.stderr().contains("submit a new task instead"),
        "{}",
        refused.stderr()
    );
    assert_eq!(row(&env, &paused)["status"], "paused");
    let failed = tasks.finished(Status::Failed);
    fs::remove_dir_all(tasks.dir_of(&failed)).unwrap();
    let refused = env.ctxhost(&["retry", &failed]);
    assert_eq!(refused.code(), Some(1), "{}", refused.stderr());
    assert!(
        refused.stderr().contains("its directory is missing"),
        "{}",
        refused.stderr()
    );
    assert_eq!(row(&env, &failed)["status"], "failed");
    // Its directory there but its history and context gone: refused too (fsck reports it).
    let emptied = tasks.paused();
    let dir = tasks.dir_of(&emptied);
    for f in ["messages.jsonl", "current.jsonl"] {
        fs::remove_file(dir.join(f)).unwrap();
    }
    let refused = env.ctxhost(&["resume", &emptied]);
    assert_eq!(refused.code(), Some(1), "{}", refused.stderr());
    assert!(
        refused.stderr().contains("messages.jsonl: missing")
            && refused.stderr().contains("no repair can fix"),
        "{}",
        refused.stderr()
    );
    assert_eq!(row(&env, &emptied)["status"], "paused");
    assert!(llm.requests().is_empty());
}

/// Issue 25 item 7: a line of messages.jsonl or current.jsonl that is not UTF-8 (the old fsck
/// read it lossily and found nothing; `resume` queued the task, which then failed at start) is
/// named by `ctxhost fsck` with its file and line, and `resume` refuses the task. A paused task
/// whose directory is in two state folders is refused by `resume` before its row changes (it
/// used to be queued, then the directory move failed).
#[test]
fn resume_refuses_a_history_that_is_not_utf8_or_a_task_with_two_directories() {
    let llm = FakeLlm::start(vec![]);
    let env = env_for(&llm);
    let tasks = TaskBuilder::new(&env.contexts());
    for file in ["messages.jsonl", "current.jsonl"] {
        let uuid = tasks.paused();
        let path = tasks.dir_of(&uuid).join(file);
        // An invalid byte sequence inside the second line's content: still JSON-shaped when
        // read lossily.
        let bytes = fs::read(&path).unwrap();
        let second = bytes.iter().position(|b| *b == b'\n').unwrap() + 1;
        let content = second
            + bytes[second..]
                .windows(11)
                .position(|w| w == b"\"content\":\"")
                .unwrap()
            + 11;
        let mut broken = bytes[..content].to_vec();
        broken.extend_from_slice(&[0xC3, 0x28, 0xFF]);
        broken.extend_from_slice(&bytes[content..]);
        fs::write(&path, &broken).unwrap();

        let fsck = env.ctxhost(&["fsck", "--json"]).json();
        let found: Vec<&Value> = fsck["problems"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["uuid"] == uuid.as_str())
            .collect();
        assert_eq!(found.len(), 1, "{file}: {fsck:#}");
        assert_eq!(found[0]["kind"], "bad-line", "{file}: {fsck:#}");
        assert_eq!(found[0]["line"], 2, "{file}: {fsck:#}");
        assert!(
            found[0]["path"].as_str().unwrap().ends_with(file)
                && found[0]["message"]
                    .as_str()
                    .unwrap()
                    .starts_with("not UTF-8"),
            "{file}: {fsck:#}"
        );

        let refused = env.ctxhost(&["resume", &uuid]);
        assert_eq!(refused.code(), Some(1), "{file}: {}", refused.stderr());
        assert!(
            refused.stderr().contains(&format!("{file}:2: not UTF-8")),
            "{file}: {}",
            refused.stderr()
        );
        assert_eq!(row(&env, &uuid)["status"], "paused", "{file}");
    }

    let twice = tasks.paused();
    let paused_dir = tasks.dir_of(&twice);
    let copy = env.contexts().join("completed").join(&twice);
    fs::create_dir_all(&copy).unwrap();
    fs::copy(
        paused_dir.join("messages.jsonl"),
        copy.join("messages.jsonl"),
    )
    .unwrap();
    let refused = env.ctxhost(&["resume", &twice]);
    assert_eq!(refused.code(), Some(1), "{}", refused.stderr());
    assert!(
        refused
            .stderr()
            .contains("has a directory in each of paused/, completed/"),
        "{}",
        refused.stderr()
    );
    assert_eq!(row(&env, &twice)["status"], "paused");
    assert!(paused_dir.is_dir() && copy.is_dir());
    assert!(llm.requests().is_empty());
}

#[test]
fn cleanup_days_zero_is_refused_alike_and_all_is_explicit() {
    let llm = FakeLlm::start(vec![]);
    let env = env_for(&llm);
    let tasks = TaskBuilder::new(&env.contexts());
    let uuid = tasks.finished(Status::Completed);

    let cli = env.ctxhost(&["cleanup", "--days", "0"]);
    assert_eq!(cli.code(), Some(2), "{}", cli.stderr());
    assert!(cli.stderr().contains("--all"), "{}", cli.stderr());
    let both = env.ctxhost(&["cleanup", "--all", "--days", "3"]);
    assert_eq!(both.code(), Some(2), "{}", both.stderr());

    let config = fs::read_to_string(env.config_path()).unwrap();
    env.write_config(&config.replace(
        "context_storage:\n  base_dir: ./contexts",
        "context_storage:\n  base_dir: ./contexts\n  cleanup_days: 0",
    ));
    let cfg = env.ctxhost(&["cleanup", "--dry-run"]);
    assert_eq!(cfg.code(), Some(2), "{}", cfg.stderr());
    assert!(
        cfg.stderr().contains("context_storage.cleanup_days")
            && cfg.stderr().contains("ctxhost cleanup --all"),
        "{}",
        cfg.stderr()
    );
    env.write_config(&config);

    // The default (30 days) keeps a task finished seconds ago; --all deletes it.
    let kept = env.ctxhost(&["cleanup", "--json"]).ok().json();
    assert_eq!(kept["deleted"].as_array().unwrap().len(), 0);
    let all = env.ctxhost(&["cleanup", "--all", "--json"]).ok().json();
    assert_eq!(all["deleted"][0]["uuid"], uuid.as_str());
    assert!(find_task_dir(&env.contexts(), &uuid).is_none());
}

/// Whether `text` splits into exactly its `\n` lines for a reader that breaks lines on U+2028
/// and U+2029 too (Python's `str.splitlines`).
fn splits_like_lines(text: &str) -> bool {
    !text.contains(['\u{2028}', '\u{2029}'])
        && text
            .split(['\n', '\u{2028}', '\u{2029}'])
            .filter(|l| !l.is_empty())
            .count()
            == text.lines().count()
}

#[test]
fn jsonl_lines_escape_unicode_line_separators() {
    let ls = '\u{2028}';
    let ps = '\u{2029}';
    let llm = FakeLlm::start(vec![]);
    let n = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    llm.set_handler(move |req| {
        let summary = req
            .messages()
            .first()
            .is_some_and(|m| m["content"].as_str().is_some_and(|c| c.starts_with("You write the summary")));
        if summary {
            return Some(Reply::text(format!("Notes were taken.{ls}Then more.{ps}"), None));
        }
        let i = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Some(if i < 4 {
            let args = serde_json::json!({ "text": format!("line one{ls}line two{ps}{}", "x".repeat(1200)) });
            Reply::tool_calls(vec![(&format!("c{i}"), &format!("note{ls}taker"), &args.to_string())], None)
        } else {
            Reply::text(format!("Done.{ps}Bye."), None)
        })
    });
    let env = TestEnv::new();
    env.write_config(&format!(
        "context_storage:\n  base_dir: ./contexts\n  keep_recent_messages: 2\n\
         llm:\n  provider: openai\n  base_url: \"{}\"\n  model: fake-model\n  api_key_env: \"\"\n  \
         context_length: 900\n  max_output_tokens: 100\n  timeout_secs: 20\n  max_retries: 1\n  max_backoff_secs: 1\n\
         agent:\n  system_prompt: \"Be brief.\"\n",
        llm.base_url()
    ));
    env.ctxhost(&["init"]).ok();
    let uuid = env
        .ctxhost(&["submit", "--prompt", &format!("Take notes{ls}now.")])
        .ok()
        .stdout()
        .trim()
        .to_string();
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    let r = row(&env, &uuid);
    assert_eq!(r["status"], "completed", "{r}");
    assert!(r["compression_count"].as_u64().unwrap() >= 1, "{r}");
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    // Host-written (tools.jsonl) and component-written (messages, current, summaries).
    for f in [
        "messages.jsonl",
        "current.jsonl",
        "tools.jsonl",
        "summaries.jsonl",
    ] {
        let text = fs::read_to_string(dir.join(f)).unwrap();
        assert!(splits_like_lines(&text), "{f} holds a raw U+2028/U+2029");
        assert!(text.contains("\\u2028"), "{f}: nothing was escaped");
        // The values are unchanged.
        let values = read_jsonl(&dir.join(f));
        assert!(
            values.iter().any(|v| v.to_string().contains(ls)),
            "{f}: the characters were lost"
        );
    }
}
