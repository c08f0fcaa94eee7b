//! Task lifecycle end to end (real binary, fake LLM): pause / resume mid-run, stop, recovery of
//! a killed task process, 100 tasks on 8 parallel processes, cleanup, and fsck finding (and
//! repairing) planted faults.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::fake_llm::{FakeLlm, RecordedRequest, Reply};
use crate::support::{TestEnv, config_yaml, find_task_dir, read_json, read_jsonl, wait_until};
use serde_json::Value;

/// A worker (`run --once`) in the background. Its log (and its children's) goes to a file in
/// the test directory: a pipe nobody reads would fill up and block the processes.
struct Worker {
    child: std::process::Child,
    log: PathBuf,
}

fn worker(env: &TestEnv, extra: &[&str]) -> Worker {
    static N: AtomicUsize = AtomicUsize::new(0);
    let mut args = vec!["run", "--once", "--poll-ms", "20"];
    args.extend_from_slice(extra);
    let log = env
        .root()
        .join(format!("worker-{}.log", N.fetch_add(1, Ordering::SeqCst)));
    let mut cmd = env.ctxhost_cmd(&args).cmd;
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    Worker {
        child: cmd.spawn().expect("start the worker"),
        log,
    }
}

fn wait_ok(mut w: Worker) {
    let out = w.child.wait().unwrap();
    let log = std::fs::read_to_string(&w.log).unwrap_or_default();
    assert!(out.success(), "worker failed ({out}):\n{log}");
}

/// `ctxhost COMMAND UUID --wait` (pause or stop) while worker `w` runs the task; returns how
/// long the command took, after `w` ended successfully and the row says `status` with no
/// error.
fn interrupt_and_time(
    env: &TestEnv,
    command: &str,
    uuid: &str,
    w: Worker,
    status: &str,
) -> Duration {
    let asked = Instant::now();
    env.ctxhost(&[command, uuid, "--wait", "--timeout", "120"])
        .ok();
    let took = asked.elapsed();
    wait_ok(w);
    let r = env.row(uuid);
    assert_eq!(r["status"], status, "{r}");
    assert_eq!(r["error_message"], Value::Null);
    took
}

/// The first user message of a request (the task's prompt).
fn prompt_of(req: &RecordedRequest) -> String {
    req.messages()
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_string()
}

/// Messages of `role` in a list of JSON messages.
fn count_role(lines: &[Value], role: &str) -> usize {
    lines.iter().filter(|m| m["role"] == role).count()
}

/// messages.jsonl seq is exactly 1..n.
fn assert_seq(history: &[Value]) {
    let seqs: Vec<u64> = history.iter().map(|m| m["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=history.len() as u64).collect::<Vec<_>>(),
        "seq not 1..n"
    );
}

fn tool_calls(ids: &[&str]) -> Reply {
    Reply::tool_calls(
        ids.iter()
            .map(|id| (*id, "read_file", r#"{"path":"a.txt"}"#))
            .collect(),
        Some((20, 5)),
    )
}

/// Pause lands while an LLM call is in flight (twice: once with tool calls left to make, once
/// at an LLM boundary), resume continues from current.jsonl; two workers race for the resumed
/// task and exactly one process runs it.
#[test]
fn pause_and_resume_mid_run_continue_the_context_exactly_once() {
    let llm = FakeLlm::start(vec![]);
    let loop_requests = Arc::new(AtomicUsize::new(0));
    let n = loop_requests.clone();
    llm.set_handler(move |_req| {
        let i = n.fetch_add(1, Ordering::SeqCst) + 1;
        Some(match i {
            // Slow replies: the pause request lands while they are in flight.
            1 => Reply::delay(
                Duration::from_millis(1500),
                tool_calls(&["call_1", "call_2"]),
            ),
            2 => Reply::delay(Duration::from_millis(1500), tool_calls(&["call_3"])),
            _ => Reply::text("All done.", Some((30, 3))),
        })
    });
    // The grace of an unstreamed call lets the reply in flight land.
    let env = TestEnv::for_llm_unstreamed(&llm, "");
    let uuid = env.submit("read a.txt twice");

    // Run 1: paused after the first reply, before its two tool calls.
    let w = worker(&env, &[]);
    assert!(wait_until(Duration::from_secs(60), || llm.request_count() >= 1));
    let out = env
        .ctxhost(&["pause", &uuid, "--reason", "operator break"])
        .ok();
    assert!(out.stdout().contains("pause requested"), "{}", out.stdout());
    wait_ok(w);
    let r = env.row(&uuid);
    assert_eq!(r["status"], "paused", "{r}");
    assert_eq!(r["pause_requested"], false);
    let paused = env.contexts().join("paused").join(&uuid);
    assert_eq!(find_task_dir(&env.contexts(), &uuid), Some(paused.clone()));
    let state = read_json(&paused.join("task_state.json"));
    assert_eq!(state["reason"], "operator break");
    assert_eq!(state["resume_count"], 0);
    assert_eq!(state["resumed_at"], Value::Null);
    assert!(state["paused_at"].as_str().unwrap().ends_with('Z'));
    let current = read_jsonl(&paused.join("current.jsonl"));
    assert_eq!(
        current.last().unwrap()["tool_calls"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "paused with both calls unanswered"
    );
    assert!(
        !paused.join("tools.jsonl").exists(),
        "no tool ran before the pause"
    );
    // The pause saved the host's checkpoints (issue 14): a resume reads nothing of the history
    // and only the context lines appended after the last check before a request.
    assert_checkpoints_hold(&paused);

    // Wrong states get clear errors (exit 1).
    let e = env.ctxhost(&["pause", &uuid]).fails();
    assert_eq!(e.code(), Some(1));
    assert!(e.stderr().contains("already paused"), "{}", e.stderr());
    env.ctxhost(&["resume", &uuid]).ok();
    assert_eq!(env.row(&uuid)["status"], "queued");
    let e = env.ctxhost(&["resume", &uuid]).fails();
    assert_eq!(e.code(), Some(1));
    assert!(e.stderr().contains("already queued"), "{}", e.stderr());
    let e = env.ctxhost(&["pause", &uuid]).fails();
    assert_eq!(e.code(), Some(1));
    assert!(
        e.stderr().contains("is queued, not running"),
        "{}",
        e.stderr()
    );

    // Run 2: the two calls are made, then paused again while the second LLM call is in flight.
    let w = worker(&env, &[]);
    assert!(wait_until(Duration::from_secs(60), || llm.request_count() >= 2));
    env.ctxhost(&["pause", &uuid, "--wait", "--timeout", "60"])
        .ok();
    wait_ok(w);
    let r = env.row(&uuid);
    assert_eq!(
        (r["status"].as_str(), r["resume_count"].as_i64()),
        (Some("paused"), Some(1)),
        "{r}"
    );
    let state = read_json(&paused.join("task_state.json"));
    assert_eq!(
        (state["resume_count"].as_i64(), state["reason"].clone()),
        (Some(1), Value::Null)
    );
    assert_checkpoints_hold(&paused);
    // A forged history checkpoint (wrong counts, a mark that does not match) and a torn context
    // checkpoint are ignored: run 3 still counts the 2 earlier steps and ends exactly.
    let mut forged = read_json(&paused.join("history_checkpoint.json"));
    forged["stats"]["agent_steps"] = 40.into();
    forged["messages"]["last_line"] = "0123456789abcdef".into();
    std::fs::write(paused.join("history_checkpoint.json"), forged.to_string()).unwrap();
    let context = std::fs::read(paused.join("context_checkpoint.json")).unwrap();
    std::fs::write(
        paused.join("context_checkpoint.json"),
        &context[..context.len() / 2],
    )
    .unwrap();
    let task = ctxhost::task_dir::TaskDir::open(&paused).unwrap();
    let counts = ctxhost::task::HistoryCounts::open(&task).unwrap();
    assert_eq!(
        counts.stats().agent_steps,
        2,
        "the forged counts are not believed"
    );
    assert_eq!(
        counts.bytes_read(),
        std::fs::metadata(paused.join("messages.jsonl"))
            .unwrap()
            .len()
    );
    std::fs::write(
        paused.join("context_checkpoint.json"),
        &context[..context.len() / 2],
    )
    .unwrap();
    std::fs::write(paused.join("history_checkpoint.json"), forged.to_string()).unwrap();

    // `ctxhost resume` queues it (a checkpoint that no longer matches is ignored), warning
    // about each checkpoint fsck reports.
    let resumed = env.ctxhost(&["resume", &uuid]).ok();
    assert!(
        resumed.stderr().contains("context_checkpoint.json")
            && resumed.stderr().contains("history_checkpoint.json")
            && resumed
                .stderr()
                .contains("--repair deletes it (harmless to the task)"),
        "{}",
        resumed.stderr()
    );

    // Run 3: two workers race for the resumed task; one process runs it to the end.
    let (a, b) = (worker(&env, &[]), worker(&env, &[]));
    wait_ok(a);
    wait_ok(b);
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["resume_count"], 2);
    assert_eq!(r["llm_call_count"], 3);
    assert_eq!(r["tool_call_count"], 3);
    assert_eq!(llm.request_count(), 3, "every LLM call made once");
    let dir = env.contexts().join("completed").join(&uuid);
    let state = read_json(&dir.join("task_state.json"));
    assert_eq!(state["resume_count"], 2);
    assert!(state["resumed_at"].is_string());

    let history = read_jsonl(&dir.join("messages.jsonl"));
    let current = read_jsonl(&dir.join("current.jsonl"));
    assert_seq(&history);
    for lines in [&history, &current] {
        assert_eq!(count_role(lines, "system"), 1, "one system prompt");
        assert_eq!(count_role(lines, "user"), 1, "one task message");
        assert_eq!(count_role(lines, "assistant"), 3);
        assert_eq!(count_role(lines, "tool"), 3);
    }
    let answered: Vec<&str> = history
        .iter()
        .filter_map(|m| m["tool_call_id"].as_str())
        .collect();
    assert_eq!(
        answered,
        ["call_1", "call_2", "call_3"],
        "each call answered once, in order"
    );
    ctxhost::invariants::check_context_file(
        &ctxhost::task_dir::TaskDir::open(&dir).unwrap(),
        "current.jsonl",
        false,
    )
    .unwrap();
    // Each request continued the previous context (no restart from the system prompt).
    let reqs = llm.requests();
    let lens: Vec<usize> = reqs.iter().map(|r| r.messages().len()).collect();
    assert_eq!(lens, [2, 5, 7]);
    for r in &reqs {
        assert_eq!(count_role(&r.messages(), "system"), 1);
        assert_eq!(count_role(&r.messages(), "user"), 1);
    }
    env.ctxhost(&["fsck"]).ok();
}

/// `stop` on a queued task (at once), a running one (at its next safe point) and a paused one.
#[test]
fn stop_ends_queued_running_and_paused_tasks() {
    let llm = FakeLlm::start(vec![]);
    llm.set_handler(|req| {
        Some(if prompt_of(req).starts_with("slow") {
            Reply::delay(Duration::from_millis(1200), tool_calls(&["call_1"]))
        } else {
            Reply::text("ok", Some((1, 1)))
        })
    });
    // The grace of an unstreamed call lets the reply in flight land.
    let env = TestEnv::for_llm_unstreamed(&llm, "");

    let queued = env.submit("never runs");
    let out = env.ctxhost(&["stop", &queued]).ok();
    assert!(
        out.stdout().contains("stopped (it was queued)"),
        "{}",
        out.stdout()
    );
    let r = env.row(&queued);
    assert_eq!(r["status"], "stopped");
    assert!(r["completed_at"].is_string());
    let e = env.ctxhost(&["stop", &queued]).fails();
    assert_eq!(e.code(), Some(1));
    assert!(e.stderr().contains("already stopped"), "{}", e.stderr());

    // Running: the stop lands during the slow call and is honoured before the tool call.
    let running = env.submit("slow one");
    let w = worker(&env, &[]);
    assert!(wait_until(Duration::from_secs(60), || llm.request_count() >= 1));
    env.ctxhost(&["stop", &running, "--wait", "--timeout", "60"])
        .ok();
    wait_ok(w);
    let r = env.row(&running);
    assert_eq!(r["status"], "stopped", "{r}");
    assert_eq!(r["error_message"], Value::Null);
    assert_eq!(r["tool_call_count"], 0, "stopped before the tool call");
    let dir = env.contexts().join("completed").join(&running);
    assert_eq!(find_task_dir(&env.contexts(), &running), Some(dir.clone()));
    let current = read_jsonl(&dir.join("current.jsonl"));
    assert_eq!(current.len(), 3, "system, user, the reply");

    // Paused: pause it first, then stop → stopped at once, directory to completed/.
    let paused = env.submit("slow two");
    let w = worker(&env, &[]);
    assert!(wait_until(Duration::from_secs(60), || llm.request_count() >= 2));
    env.ctxhost(&["pause", &paused, "--wait"]).ok();
    wait_ok(w);
    assert!(env.contexts().join("paused").join(&paused).is_dir());
    let out = env.ctxhost(&["stop", &paused]).ok();
    assert!(out.stdout().contains("it was paused"), "{}", out.stdout());
    assert_eq!(env.row(&paused)["status"], "stopped");
    assert_eq!(
        find_task_dir(&env.contexts(), &paused),
        Some(env.contexts().join("completed").join(&paused))
    );
    // Resuming a stopped task is refused.
    let e = env.ctxhost(&["resume", &paused]).fails();
    assert_eq!(e.code(), Some(1));
    assert!(e.stderr().contains("is stopped"), "{}", e.stderr());
    env.ctxhost(&["fsck"]).ok();
}

/// A config whose every LLM attempt may take 20 s, with 2 retries (the retry total is over a
/// minute), `llm` settings replaced as given.
fn env_with_llm(llm: &FakeLlm, replace: &[(&str, &str)]) -> TestEnv {
    let env = TestEnv::new();
    let mut yaml = config_yaml(&llm.base_url(), "openai", "");
    for (from, to) in replace {
        assert!(yaml.contains(from), "{from} not in the test config");
        yaml = yaml.replace(from, to);
    }
    env.write_config(&yaml);
    env.ctxhost(&["init"]).ok();
    env
}

/// The lines of llm_calls.jsonl that record agent-loop calls.
fn call_lines(dir: &Path) -> Vec<Value> {
    read_jsonl(&dir.join("llm_calls.jsonl"))
        .into_iter()
        .filter(|l| l["type"] == "call")
        .collect()
}

/// `stop` while an LLM call is in flight: the call is abandoned after
/// `llm.interrupt_grace_secs` (1 s here) instead of waiting out its timeout and both retries
/// (3 × 20 s), and the task ends `stopped`, not `failed`.
#[test]
fn stop_during_a_slow_llm_call_abandons_it_instead_of_retrying() {
    let llm = FakeLlm::start(vec![]);
    // Slower than the 20 s timeout: each attempt would time out.
    llm.set_default(Reply::delay(
        Duration::from_secs(40),
        Reply::text("too late", None),
    ));
    let env = env_with_llm(
        &llm,
        &[(
            "max_retries: 2",
            "max_retries: 2\n  interrupt_grace_secs: 1",
        )],
    );
    let uuid = env.submit("never answered");
    let w = worker(&env, &[]);
    assert!(wait_until(Duration::from_secs(60), || llm.request_count() >= 1));
    let took = interrupt_and_time(&env, "stop", &uuid, w, "stopped");
    // Far below one attempt's timeout, let alone the retry total (60 s and more).
    assert!(took < Duration::from_secs(15), "stop took {took:?}");
    let r = env.row(&uuid);
    assert_eq!(r["llm_call_count"], 0, "the provider never answered");
    assert_eq!(llm.request_count(), 1, "no retry after the stop request");
    let dir = env.contexts().join("completed").join(&uuid);
    assert_eq!(find_task_dir(&env.contexts(), &uuid), Some(dir.clone()));
    assert_eq!(
        read_jsonl(&dir.join("current.jsonl")).len(),
        2,
        "system, user"
    );
    let calls = call_lines(&dir);
    assert_eq!(calls.len(), 1, "{calls:?}");
    let error = calls[0]["error"].as_str().unwrap();
    assert!(error.contains("asked to pause or stop"), "{error}");
    assert!(!dir.join("response.json").exists());
    assert!(!dir.join("response.json.partial").exists());
    env.ctxhost(&["fsck"]).ok();
}

/// `pause` during the back-off before a retry (a 503 with `Retry-After: 30`): the wait ends at
/// once, the task is `paused` with nothing lost, and on resume the request is sent again and
/// the task completes.
#[test]
fn pause_during_a_retry_back_off_is_honoured_at_once_and_resumes() {
    let llm = FakeLlm::start(vec![]);
    let requests = Arc::new(AtomicUsize::new(0));
    let n = requests.clone();
    llm.set_handler(move |_req| {
        Some(match n.fetch_add(1, Ordering::SeqCst) {
            0 => Reply::status(503, "busy", &[("Retry-After", "30")]),
            _ => Reply::text("Done after the pause.", Some((10, 2))),
        })
    });
    let env = env_with_llm(&llm, &[("max_backoff_secs: 2", "max_backoff_secs: 60")]);
    let uuid = env.submit("answer after a 503");
    let w = worker(&env, &[]);
    assert!(wait_until(Duration::from_secs(60), || llm.request_count() >= 1));
    let took = interrupt_and_time(&env, "pause", &uuid, w, "paused");
    assert!(took < Duration::from_secs(15), "pause took {took:?}");
    assert_eq!(llm.request_count(), 1, "the retry was not made");
    let paused = env.contexts().join("paused").join(&uuid);
    assert_eq!(read_jsonl(&paused.join("current.jsonl")).len(), 2);

    env.ctxhost(&["resume", &uuid]).ok();
    wait_ok(worker(&env, &[]));
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["llm_call_count"], 1);
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2, "the request was sent again on resume");
    assert_eq!(reqs[0].messages(), reqs[1].messages(), "the same request");
    let dir = env.contexts().join("completed").join(&uuid);
    let current = read_jsonl(&dir.join("current.jsonl"));
    assert_eq!(count_role(&current, "assistant"), 1);
    assert_eq!(current.last().unwrap()["content"], "Done after the pause.");
    let calls = call_lines(&dir);
    let errors: Vec<bool> = calls.iter().map(|c| c["error"].is_string()).collect();
    assert_eq!(
        errors,
        [true, false],
        "the given-up call, then the answered one"
    );
    env.ctxhost(&["fsck"]).ok();
}

/// A pause while the compressor waits for its summary: the compressor's LLM call gives way
/// like the agent loop's (after `llm.interrupt_grace_secs`, 1 s here, not the reply's 40 s and
/// its retries), the task is `paused`, not `failed`, with the context as it was and no summary;
/// on resume the compression is made again and the task completes.
#[test]
fn pause_during_a_slow_summary_request_gives_way_and_the_task_resumes() {
    const MARK: &str = "SUMMARISE-THIS";
    let llm = FakeLlm::start(vec![]);
    let (loop_calls, summary_calls) =
        (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (l, sc) = (loop_calls.clone(), summary_calls.clone());
    llm.set_handler(move |req| {
        let summary = req
            .messages()
            .iter()
            .any(|m| m["content"].as_str().is_some_and(|c| c.contains(MARK)));
        if summary {
            let answer = Reply::text("summary: the agent read files.", Some((300, 12)));
            return Some(match sc.fetch_add(1, Ordering::SeqCst) {
                // Slower than the 20 s timeout: it would time out, then be retried twice.
                0 => Reply::delay(Duration::from_secs(40), answer),
                _ => answer,
            });
        }
        let n = l.fetch_add(1, Ordering::SeqCst) + 1;
        if n > 8 {
            return Some(Reply::text("All done.", Some((400, 3))));
        }
        Some(Reply::read_file_step(n))
    });
    let env = env_with_llm(
        &llm,
        &[
            (
                "base_dir: ./contexts",
                &format!(
                    "base_dir: ./contexts\n  compression_threshold: 0.5\n  keep_recent_messages: 3\n  \
                     summary_prompt: \"{MARK}\\n{{messages}}\""
                ),
            ),
            (
                "context_length: 8192",
                "context_length: 1500\n  max_output_tokens: 200",
            ),
            (
                "max_retries: 2",
                "max_retries: 2\n  interrupt_grace_secs: 1",
            ),
        ],
    );
    let uuid = env.submit("Read every file and report.");
    let w = worker(&env, &[]);
    assert!(wait_until(Duration::from_secs(120), || summary_calls
        .load(Ordering::SeqCst)
        >= 1));
    let paused = env.contexts().join("running").join(&uuid);
    let before = std::fs::read(paused.join("current.jsonl")).unwrap();
    let took = interrupt_and_time(&env, "pause", &uuid, w, "paused");
    assert!(took < Duration::from_secs(15), "pause took {took:?}");
    let r = env.row(&uuid);
    assert_eq!(r["compression_count"], 0, "{r}");
    assert_eq!(
        summary_calls.load(Ordering::SeqCst),
        1,
        "no retry after the pause"
    );
    let paused = env.contexts().join("paused").join(&uuid);
    assert_eq!(
        std::fs::read(paused.join("current.jsonl")).unwrap(),
        before,
        "the context is as it was"
    );
    let summaries = std::fs::read_to_string(paused.join("summaries.jsonl")).unwrap_or_default();
    assert!(summaries.trim().is_empty(), "{summaries}");
    let loop_before = loop_calls.load(Ordering::SeqCst);

    env.ctxhost(&["resume", &uuid]).ok();
    wait_ok(worker(&env, &[]));
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    assert!(r["compression_count"].as_u64().unwrap() >= 1, "{r}");
    assert!(summary_calls.load(Ordering::SeqCst) >= 2);
    assert!(loop_calls.load(Ordering::SeqCst) > loop_before);
    let dir = env.contexts().join("completed").join(&uuid);
    let given_up: Vec<Value> = read_jsonl(&dir.join("llm_calls.jsonl"))
        .into_iter()
        .filter(|l| l["type"] == "summary_call" && l["error"].is_string())
        .collect();
    assert_eq!(given_up.len(), 1, "{given_up:?}");
    let error = given_up[0]["error"].as_str().unwrap();
    // Its request was deleted (written again on resume), and its size is still known.
    assert!(
        error.contains("asked to pause or stop") && !error.contains("kept in the task directory"),
        "{error}"
    );
    assert!(
        given_up[0]["request_bytes"].as_u64().unwrap() > 0,
        "{given_up:?}"
    );
    env.ctxhost(&["fsck"]).ok();
}

/// Bad UUIDs are usage errors (exit 2) for every lifecycle command; so are unknown ones.
#[test]
fn lifecycle_commands_validate_uuids() {
    let llm = FakeLlm::start(vec![]);
    let env = TestEnv::for_llm(&llm, "");
    for cmd in ["pause", "resume", "stop"] {
        for bad in ["../../etc", "0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b/.."] {
            let e = env.ctxhost(&[cmd, bad]).fails();
            assert_eq!(e.code(), Some(2), "{cmd} {bad}: {}", e.stderr());
            assert!(e.stderr().contains("is not a task UUID"), "{}", e.stderr());
        }
        // The start of a UUID is a prefix (tests/all/uuid_prefix.rs): here, of no task.
        let e = env.ctxhost(&[cmd, "0193a4b2"]).fails();
        assert_eq!(e.code(), Some(2));
        assert!(
            e.stderr().contains("no task with UUID prefix 0193a4b2"),
            "{}",
            e.stderr()
        );
        let e = env
            .ctxhost(&[cmd, "0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b"])
            .fails();
        assert_eq!(e.code(), Some(2));
        assert!(e.stderr().contains("no task with UUID"), "{}", e.stderr());
    }
    // A finished task can be neither paused nor resumed.
    let done = env.submit("quick");
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    assert_eq!(env.row(&done)["status"], "completed");
    for cmd in ["pause", "resume"] {
        let e = env.ctxhost(&[cmd, &done]).fails();
        assert_eq!(e.code(), Some(1));
        assert!(e.stderr().contains("is completed"), "{}", e.stderr());
    }
}

/// A task process killed mid-call is repaired and run again by the worker, which completes it;
/// `ctxhost recover` does the same for a task whose process died with no worker around.
#[test]
fn a_killed_task_is_recovered_and_completed() {
    let llm = FakeLlm::start(vec![]);
    let calls = Arc::new(AtomicUsize::new(0));
    let n = calls.clone();
    llm.set_handler(move |req| {
        let last_tool = req.messages().last().is_some_and(|m| m["role"] == "tool");
        let i = n.fetch_add(1, Ordering::SeqCst) + 1;
        Some(match (i, last_tool) {
            (1, _) => Reply::delay(Duration::from_secs(30), Reply::text("too late", None)),
            (_, false) => tool_calls(&["call_1"]),
            (_, true) => Reply::text("finished after a crash", Some((5, 5))),
        })
    });
    let env = TestEnv::for_llm(&llm, "");
    let uuid = env.submit("crash me");
    let w = worker(&env, &[]);
    let mut pid = 0;
    assert!(wait_until(Duration::from_secs(60), || {
        let r = env.row(&uuid);
        pid = r["process_id"].as_i64().unwrap_or(0);
        r["status"] == "running" && llm.request_count() >= 1
    }));
    assert!(
        std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    wait_ok(w);
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["crash_count"], 1);
    assert_ne!(r["process_id"].as_i64(), Some(pid));
    let dir = env.contexts().join("completed").join(&uuid);
    let history = read_jsonl(&dir.join("messages.jsonl"));
    assert_seq(&history);
    assert_eq!(count_role(&history, "system"), 1);
    assert_eq!(count_role(&history, "user"), 1);
    assert!(!history.iter().any(|m| m["content"] == "too late"));
    assert_eq!(history.last().unwrap()["content"], "finished after a crash");

    // No worker: kill a task process started by hand, then `recover`.
    let llm2 = FakeLlm::start(vec![]);
    llm2.set_handler(|req| {
        Some(if req.messages().len() == 2 {
            Reply::delay(Duration::from_secs(30), Reply::text("too late", None))
        } else {
            Reply::text("x", None)
        })
    });
    let env2 = TestEnv::for_llm(&llm2, "");
    let uuid2 = env2.submit("orphaned");
    let mut cmd = env2.ctxhost_cmd(&["task-exec", &uuid2]).cmd;
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    assert!(wait_until(Duration::from_secs(60), || llm2.request_count() >= 1));
    assert_eq!(
        env2.row(&uuid2)["process_id"].as_i64(),
        Some(child.id() as i64)
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let e = env2.ctxhost(&["fsck", "--json"]).fails();
    assert_eq!(e.json()["problems"][0]["kind"], "dead-process");
    let rec = env2.ctxhost(&["recover", "--json"]).ok().json();
    assert_eq!(rec.as_array().unwrap().len(), 1, "{rec}");
    assert_eq!(rec[0]["status"], "queued");
    assert_eq!(rec[0]["crash_count"], 1);
    assert!(env2.contexts().join("paused").join(&uuid2).is_dir());
    assert_eq!(env2.row(&uuid2)["status"], "queued");
    env2.ctxhost(&["fsck"]).ok();
    let again = env2.ctxhost(&["recover", "--json"]).ok().json();
    assert_eq!(again.as_array().unwrap().len(), 0);
}

/// Issue 25 item 4: a task process that stops itself because it cannot reach the database
/// (the fencing exit; the failpoint `lease:unreachable` makes every lease renewal fail) is
/// not a crash. With `worker.max_crashes: 2`, the task's process fences out three times (its
/// first three LLM replies come after the fence), and the fourth run completes with no crash
/// counted.
#[test]
fn a_task_that_fences_out_more_than_max_crashes_times_still_completes() {
    const FENCES: usize = 3;
    let llm = FakeLlm::start(vec![]);
    let calls = Arc::new(AtomicUsize::new(0));
    let n = calls.clone();
    llm.set_handler(move |_| {
        let i = n.fetch_add(1, Ordering::SeqCst) + 1;
        Some(if i <= FENCES {
            Reply::delay(Duration::from_secs(10), Reply::text("too late", None))
        } else {
            Reply::text("finished after the outages", Some((5, 5)))
        })
    });
    // Lease 3 s: a process whose renewals fail stops itself 2.4 s after its claim.
    let env = TestEnv::for_llm(
        &llm,
        "plugins:\n  compressor: none\nworker:\n  lease_secs: 3\n  max_crashes: 2\n",
    );
    let uuid = env.submit("outages");
    let log = env.root().join("fencing-worker.log");
    let mut cmd = env.ctxhost_cmd(&["run", "--once", "--poll-ms", "20"]).cmd;
    cmd.env(ctxhost::failpoint::FAILPOINT_ENV, "lease:unreachable")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let w = Worker {
        child: cmd.spawn().expect("start the worker"),
        log,
    };
    wait_ok(w);
    let log = std::fs::read_to_string(env.root().join("fencing-worker.log")).unwrap();
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}\n{log}");
    assert_eq!(r["crash_count"], 0, "{r}");
    assert_eq!(r["error_message"], Value::Null);
    assert_eq!(llm.request_count(), FENCES + 1);
    assert_eq!(
        log.matches(
            "stopped itself: it could not renew the task's lease (not counted as a crash); repaired and queued again"
        )
        .count(),
        FENCES,
        "{log}"
    );
    let dir = env.contexts().join("completed").join(&uuid);
    let history = read_jsonl(&dir.join("messages.jsonl"));
    assert_seq(&history);
    assert!(!history.iter().any(|m| m["content"] == "too late"));
    assert_eq!(
        history.last().unwrap()["content"],
        "finished after the outages"
    );
    env.ctxhost(&["fsck"]).ok();
}

/// Issue 25 item 5: pause, resume, claim and finish, in whatever interleaving, keep every
/// task's status and directory in agreement. Three workers (two processes each) run ten tasks
/// of eight slow steps while a thread pauses and resumes them at random through the
/// operations the CLI runs (`ops::control`), for 20 s. Every half second, holding the tree
/// lock (which every transition holds from its row to its directory), each task's directory
/// must be where its status keeps it; at the end every task is completed, with no crash and
/// its directory in completed/.
#[test]
fn pause_resume_and_claims_keep_status_and_directory_in_agreement() {
    use ctxhost::db::{Db, Status, TaskFilter};
    use ctxhost::lifecycle::{self, DirFix};
    const TASKS: usize = 10;
    const STEPS: usize = 8;
    const CHAOS: Duration = Duration::from_secs(20);
    let llm = FakeLlm::start(vec![]);
    llm.set_handler(|req| {
        let done = req
            .messages()
            .iter()
            .filter(|m| m["role"] == "tool")
            .count();
        Some(Reply::delay(
            Duration::from_millis(60),
            if done < STEPS {
                tool_calls(&[&format!("call_{done}")])
            } else {
                Reply::text("done", Some((5, 5)))
            },
        ))
    });
    let env = TestEnv::for_llm(&llm, "plugins:\n  compressor: none\n");
    let uuids: Vec<String> = (0..TASKS)
        .map(|i| env.submit(&format!("task {i}")))
        .collect();
    let mut workers: Vec<std::process::Child> = (0..3)
        .map(|i| {
            let log = env.root().join(format!("race-worker-{i}.log"));
            let mut cmd = env
                .ctxhost_cmd(&["run", "--poll-ms", "20", "--max-parallel", "2"])
                .cmd;
            cmd.stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(log).unwrap());
            cmd.spawn().expect("start a worker")
        })
        .collect();
    let layout = ctxhost::layout::Layout::new(env.contexts());
    let spec = env.store_spec();

    // Pauses and resumes at random until the deadline, then resumes whatever is paused.
    let chaos = {
        let (spec, contexts, uuids) = (spec.clone(), env.contexts(), uuids.clone());
        std::thread::spawn(move || {
            let db = Db::open(&spec, &contexts).unwrap();
            let layout = ctxhost::layout::Layout::new(&contexts);
            let mut seed = std::process::id() as u64 ^ 0x9e37_79b9_7f4a_7c15;
            let mut rand = move |n: u64| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed % n
            };
            let (mut paused, mut resumed) = (0u32, 0u32);
            let end = Instant::now() + CHAOS;
            // Whether the operation was done (a refusal: the task changed state meanwhile).
            let done = |r: anyhow::Result<()>| match r {
                Ok(()) => true,
                Err(e) if e.downcast_ref::<ctxhost::ops::control::Refused>().is_some() => false,
                Err(e) => panic!("pause/resume failed: {e:#}"),
            };
            while Instant::now() < end {
                let uuid = &uuids[rand(uuids.len() as u64) as usize];
                match db.get(uuid).unwrap().unwrap().status {
                    Status::Running => {
                        paused +=
                            u32::from(done(ctxhost::ops::control::pause(&db, uuid, Some("chaos"))));
                    }
                    Status::Paused => {
                        resumed +=
                            u32::from(done(ctxhost::ops::control::resume(&db, &layout, uuid)));
                    }
                    _ => {}
                }
                std::thread::sleep(Duration::from_millis(rand(40)));
            }
            // Let the last pause requests land, then queue everything again.
            let settle_end = Instant::now() + Duration::from_secs(30);
            while Instant::now() < settle_end {
                let rows = db.list(&TaskFilter::default()).unwrap();
                if rows.iter().all(|r| r.status == Status::Completed) {
                    break;
                }
                for r in rows.iter().filter(|r| r.status == Status::Paused) {
                    if done(ctxhost::ops::control::resume(&db, &layout, &r.uuid)) {
                        resumed += 1;
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            (paused, resumed)
        })
    };

    // Sample, under the tree lock, until the chaos thread is done.
    let db = Db::open(&spec, &env.contexts()).unwrap();
    let mut samples = 0;
    let mut disagreements = Vec::new();
    while !chaos.is_finished() {
        {
            let _lock = lifecycle::lock_tree(&layout).unwrap();
            for r in db.list(&TaskFilter::default()).unwrap() {
                let found = lifecycle::find_dirs(&layout, &r.uuid);
                let fix = lifecycle::dir_fix(r.status, r.files_deleted_at.is_some(), &found);
                if fix != DirFix::InPlace {
                    disagreements.push(format!(
                        "{} is {} with its directory in {found:?}",
                        r.uuid, r.status
                    ));
                }
            }
        }
        samples += 1;
        std::thread::sleep(Duration::from_millis(500));
    }
    let (paused, resumed) = chaos.join().unwrap();
    let logs: String = (0..3)
        .map(|i| {
            std::fs::read_to_string(env.root().join(format!("race-worker-{i}.log")))
                .unwrap_or_default()
        })
        .collect();
    for w in &mut workers {
        let _ = w.kill();
        let _ = w.wait();
    }
    eprintln!("{samples} samples; {paused} pauses and {resumed} resumes done");
    assert!(disagreements.is_empty(), "{disagreements:#?}\n{logs}");
    assert!(samples >= 20, "{samples} samples");
    // Not vacuous: tasks were paused and resumed many times.
    assert!(
        paused >= 10 && resumed >= 10,
        "paused {paused}, resumed {resumed}"
    );
    for r in db.list(&TaskFilter::default()).unwrap() {
        assert_eq!(r.status, Status::Completed, "{r:?}\n{logs}");
        assert_eq!(
            (r.crash_count, r.error_message.as_deref()),
            (0, None),
            "{r:?}"
        );
        assert_eq!(
            lifecycle::find_dirs(&layout, &r.uuid),
            [ctxhost::layout::DirState::Completed],
            "{r:?}"
        );
        let history = read_jsonl(
            &env.contexts()
                .join("completed")
                .join(&r.uuid)
                .join("messages.jsonl"),
        );
        assert_seq(&history);
        assert_eq!(history.last().unwrap()["content"], "done");
    }
    assert_eq!(uuids.len(), TASKS);
    env.ctxhost(&["fsck"]).ok();
}

/// 100 short tasks (a tool call, then an answer) on 8 parallel processes: all complete, no
/// "database is locked", every counter exact.
#[test]
fn a_hundred_tasks_on_eight_processes_keep_exact_counters() {
    const TASKS: usize = 100;
    let llm = FakeLlm::start(vec![]);
    llm.set_handler(|req| {
        let last_tool = req.messages().last().is_some_and(|m| m["role"] == "tool");
        Some(if last_tool {
            Reply::text("done", Some((7, 3)))
        } else {
            tool_calls(&["call_1"])
        })
    });
    let env = TestEnv::for_llm(&llm, "");
    let started = Instant::now();
    let uuids: Vec<String> = (0..TASKS)
        .map(|i| env.submit(&format!("task {i}")))
        .collect();
    let submitted = started.elapsed();
    let w = worker(&env, &["--max-parallel", "8"]);
    wait_ok(w);
    let ran = started.elapsed() - submitted;
    println!("{TASKS} tasks: submitted in {submitted:.1?}, run on 8 processes in {ran:.1?}");

    let rows = env
        .ctxhost(&["tasks", "--json", "--limit", "1000"])
        .ok()
        .json();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), TASKS);
    for r in rows {
        assert!(
            !r["error_message"].as_str().unwrap_or("").contains("locked"),
            "{r}"
        );
        assert_eq!(r["status"], "completed", "{r}");
        assert_eq!(
            (
                r["llm_call_count"].as_i64(),
                r["tool_call_count"].as_i64(),
                r["total_tokens"].as_i64()
            ),
            (Some(2), Some(1), Some(25 + 10)),
            "{r}"
        );
        assert_eq!(r["crash_count"], 0);
    }
    let stats = env.ctxhost(&["stats", "--json"]).ok().json();
    assert_eq!(stats["by_status"]["completed"], TASKS);
    assert_eq!(stats["total"]["llm_calls"], 2 * TASKS);
    assert_eq!(stats["total"]["tool_calls"], TASKS);
    assert_eq!(stats["total"]["total_tokens"], 35 * TASKS);
    assert_eq!(llm.request_count(), 2 * TASKS);
    for u in &uuids {
        assert!(env.contexts().join("completed").join(u).is_dir());
    }
    env.ctxhost(&["fsck"]).ok();
}

/// `cleanup --dry-run` changes nothing; `cleanup` deletes finished directories and keeps rows.
#[test]
fn cleanup_deletes_old_directories_and_keeps_rows() {
    let llm = FakeLlm::start(vec![]);
    let env = TestEnv::for_llm(&llm, "");
    let a = env.submit("one");
    let b = env.submit("two");
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    let waiting = env.submit("still queued");
    let snapshot = || -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = ["running", "paused", "completed"]
            .iter()
            .flat_map(|s| std::fs::read_dir(env.contexts().join(s)).unwrap())
            .map(|e| e.unwrap().path())
            .collect();
        v.sort();
        v
    };
    let before = snapshot();
    assert_eq!(before.len(), 2);

    // Too young for the default (30 days) and for --days 1.
    let r = env.ctxhost(&["cleanup", "--json"]).ok().json();
    assert_eq!(r["days"], 30);
    assert_eq!(r["deleted"].as_array().unwrap().len(), 0);
    env.ctxhost(&["cleanup", "--days", "1"]).ok();
    assert_eq!(snapshot(), before);

    let r = env
        .ctxhost(&["cleanup", "--all", "--dry-run", "--json"])
        .ok()
        .json();
    assert_eq!(r["dry_run"], true);
    let listed: Vec<&str> = r["deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["uuid"].as_str().unwrap())
        .collect();
    assert_eq!(listed.len(), 2);
    assert!(listed.contains(&a.as_str()) && listed.contains(&b.as_str()));
    assert!(r["bytes"].as_u64().unwrap() > 0);
    assert_eq!(snapshot(), before, "--dry-run changed nothing");
    assert_eq!(env.row(&a)["files_deleted_at"], Value::Null);
    let out = env.ctxhost(&["cleanup", "--all", "--dry-run"]).ok();
    assert!(
        out.stdout()
            .contains("2 task directories would be deleted, "),
        "{}",
        out.stdout()
    );
    assert_eq!(snapshot(), before, "--dry-run changed nothing");

    let out = env.ctxhost(&["cleanup", "--all"]).ok();
    assert!(
        out.stdout().contains("2 task directories deleted"),
        "{}",
        out.stdout()
    );
    assert!(snapshot().is_empty());
    let tasks = env.ctxhost(&["tasks", "--json"]).ok().json();
    assert_eq!(tasks.as_array().unwrap().len(), 3, "rows stay");
    for u in [&a, &b] {
        let r = env.row(u);
        assert_eq!(r["status"], "completed");
        assert!(r["files_deleted_at"].is_string());
        let show = env.ctxhost(&["show", u]).ok().stdout();
        assert!(show.contains("deleted by `ctxhost cleanup`"), "{show}");
    }
    assert!(
        env.ctxhost(&["tasks"])
            .ok()
            .stdout()
            .contains("completed (files deleted)")
    );
    assert_eq!(env.row(&waiting)["status"], "queued");
    let stats = env.ctxhost(&["stats", "--json"]).ok().json();
    assert_eq!(stats["by_status"]["completed"], 2);
    env.ctxhost(&["fsck"]).ok();
}

/// Replace line `n` (1-based) of a file with `f(line)` (`None` deletes it).
fn edit_line(path: &Path, n: usize, f: impl FnOnce(&str) -> Option<String>) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    match f(&lines[n - 1]) {
        Some(l) => lines[n - 1] = l,
        None => {
            lines.remove(n - 1);
        }
    }
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

/// fsck finds each planted fault, naming file and line, and `--repair` fixes the fixable ones.
#[test]
fn fsck_finds_planted_faults_and_repairs_the_fixable_ones() {
    let llm = FakeLlm::start(vec![]);
    llm.set_handler(|req| {
        let last_tool = req.messages().last().is_some_and(|m| m["role"] == "tool");
        Some(if last_tool {
            Reply::text("done", Some((7, 3)))
        } else {
            tool_calls(&["call_1"])
        })
    });
    let env = TestEnv::for_llm(&llm, "");
    let ids: Vec<String> = (0..4).map(|i| env.submit(&format!("task {i}"))).collect();
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    env.ctxhost(&["fsck"]).ok();
    let dir = |u: &str| env.contexts().join("completed").join(u);
    let (torn, gap, orphan, moved) = (&ids[0], &ids[1], &ids[2], &ids[3]);

    // 1. torn last line of messages.jsonl (history: sys, user, call, result, answer → line 6)
    let m = dir(torn).join("messages.jsonl");
    let mut text = std::fs::read_to_string(&m).unwrap();
    text.push_str("{\"seq\":6,\"role\":\"assi");
    std::fs::write(&m, text).unwrap();
    // 2. seq gap: line 3 of messages.jsonl removed
    edit_line(&dir(gap).join("messages.jsonl"), 3, |_| None);
    // 3. orphan tool message: current.jsonl line 4 (the tool result) answers an unknown id
    edit_line(&dir(orphan).join("current.jsonl"), 4, |l| {
        Some(l.replace("call_1", "call_nobody"))
    });
    // 4. a finish interrupted between its row and its directory: a completed task's directory
    //    still in running/
    std::fs::rename(dir(moved), env.contexts().join("running").join(moved)).unwrap();

    let e = env.ctxhost(&["fsck", "--json"]).fails();
    assert_eq!(e.code(), Some(1));
    let report = e.json();
    let problems = report["problems"].as_array().unwrap();
    let find = |kind: &str, uuid: &str| -> Value {
        problems
            .iter()
            .find(|p| p["kind"] == kind && p["uuid"] == uuid)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} for {uuid} in {report:#}"))
    };
    let p = find("torn-line", torn);
    assert!(p["path"].as_str().unwrap().ends_with("messages.jsonl"));
    assert_eq!(
        (p["line"].as_u64(), p["fixable"].as_bool()),
        (Some(6), Some(true))
    );
    let p = find("seq-gap", gap);
    assert!(p["path"].as_str().unwrap().ends_with("messages.jsonl"));
    assert_eq!(
        (p["line"].as_u64(), p["fixable"].as_bool()),
        (Some(3), Some(false))
    );
    assert!(
        p["message"]
            .as_str()
            .unwrap()
            .contains("seq 4 where 3 was expected"),
        "{p}"
    );
    let p = find("context-invariant", orphan);
    assert!(p["path"].as_str().unwrap().ends_with("current.jsonl"));
    assert_eq!(p["line"].as_u64(), Some(4));
    assert!(
        p["message"].as_str().unwrap().contains("call_nobody"),
        "{p}"
    );
    let p = find("interrupted-transition", moved);
    assert!(p["message"].as_str().unwrap().contains("running/"), "{p}");
    assert_eq!(problems.len(), 4, "{report:#}");
    // The text report names file and line too.
    let text = env.ctxhost(&["fsck"]).fails().stdout();
    assert!(
        text.contains(&format!("{torn}/messages.jsonl:6: torn last line")),
        "{text}"
    );

    let e = env.ctxhost(&["fsck", "--repair", "--json"]).fails();
    let report = e.json();
    let repaired: Vec<&str> = report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["repaired"].is_string())
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    // The orphan tool result is repaired too (dropped from current.jsonl, recorded in
    // messages.jsonl): issue 11's pairing repair.
    assert_eq!(repaired.len(), 3, "{report:#}");
    assert!(
        repaired.contains(&"torn-line")
            && repaired.contains(&"interrupted-transition")
            && repaired.contains(&"context-invariant")
    );
    let mut left: Vec<&str> = report["remaining"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["seq-gap"], "{report:#}");
    // The torn bytes are kept; the history is whole again; the directory is back.
    assert_eq!(read_jsonl(&m).len(), 5);
    assert!(
        std::fs::read_to_string(dir(torn).join("messages.jsonl.torn"))
            .unwrap()
            .contains("\"assi")
    );
    assert!(dir(moved).is_dir());
}

/// Checkpoints are derived caches: fsck reports one of another version, one that breaks its
/// schema and one that no longer matches its file as fixable (`bad-checkpoint`), `--repair`
/// deletes them, and the paused task then resumes from full reads with exact counts.
#[test]
fn fsck_repair_deletes_bad_checkpoints_and_the_task_resumes_with_exact_counts() {
    let llm = FakeLlm::start(vec![]);
    let n = Arc::new(AtomicUsize::new(0));
    let calls = n.clone();
    llm.set_handler(move |_req| {
        Some(match calls.fetch_add(1, Ordering::SeqCst) {
            // Slow: the pause request lands while it is in flight.
            0 => Reply::delay(Duration::from_millis(1500), tool_calls(&["call_1"])),
            _ => Reply::text("All done.", Some((30, 3))),
        })
    });
    // The grace of an unstreamed call lets the reply in flight land.
    let env = TestEnv::for_llm_unstreamed(&llm, "");
    let uuid = env.submit("read a.txt");
    let w = worker(&env, &[]);
    assert!(wait_until(Duration::from_secs(60), || llm.request_count() >= 1));
    env.ctxhost(&["pause", &uuid]).ok();
    wait_ok(w);
    assert_eq!(env.row(&uuid)["status"], "paused");
    let paused = env.contexts().join("paused").join(&uuid);
    env.ctxhost(&["fsck"]).ok();

    // Another version (the store of a later ctxhost); a field the schema does not have; a
    // mark that no longer holds.
    let store = paused.join("store_checkpoint.json");
    let empty = serde_json::json!({"bytes": 0, "last_line": ""});
    let cp = serde_json::json!({"version": 2, "messages": empty, "history_count": 0,
        "current": empty, "current_count": 0, "current_tokens": 0});
    std::fs::write(&store, cp.to_string()).unwrap();
    std::fs::set_permissions(&store, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let history = paused.join("history_checkpoint.json");
    let mut cp = read_json(&history);
    cp["extra"] = true.into();
    std::fs::write(&history, cp.to_string()).unwrap();
    let context = paused.join("context_checkpoint.json");
    let mut cp = read_json(&context);
    cp["mark"]["last_line"] = "0123456789abcdef".into();
    std::fs::write(&context, cp.to_string()).unwrap();

    let e = env.ctxhost(&["fsck", "--json"]).fails();
    assert_eq!(e.code(), Some(1));
    let report = e.json();
    let problems = report["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 3, "{report:#}");
    for (file, says) in [
        ("store_checkpoint.json", "version 2"),
        ("history_checkpoint.json", "unknown field `extra`"),
        (
            "context_checkpoint.json",
            "current.jsonl no longer starts with the",
        ),
    ] {
        let p = problems
            .iter()
            .find(|p| p["path"].as_str().unwrap().ends_with(file))
            .unwrap_or_else(|| panic!("{file} not reported: {report:#}"));
        assert_eq!(
            (
                p["kind"].as_str(),
                p["uuid"].as_str(),
                p["fixable"].as_bool()
            ),
            (Some("bad-checkpoint"), Some(uuid.as_str()), Some(true)),
            "{p}"
        );
        let message = p["message"].as_str().unwrap();
        assert!(
            message.contains(says) && message.contains("--repair deletes it"),
            "{p}"
        );
    }

    let report = env.ctxhost(&["fsck", "--repair", "--json"]).ok().json();
    assert_eq!(
        report["remaining"].as_array().unwrap().len(),
        0,
        "{report:#}"
    );
    let repaired: Vec<&Value> = report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["repaired"].is_string())
        .collect();
    assert_eq!(repaired.len(), 3, "{report:#}");
    for file in [&store, &history, &context] {
        assert!(!file.exists(), "{} deleted", file.display());
    }
    env.ctxhost(&["fsck"]).ok();

    // The resumed task counts its history and checks its context by full reads: the pending
    // call is made once, one more LLM call ends it, and every count is exact.
    env.ctxhost(&["resume", &uuid]).ok();
    wait_ok(worker(&env, &[]));
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(
        (
            r["llm_call_count"].as_i64(),
            r["tool_call_count"].as_i64(),
            r["resume_count"].as_i64()
        ),
        (Some(2), Some(1), Some(1)),
        "{r}"
    );
    assert_eq!(llm.request_count(), 2, "every LLM call made once");
    let dir = env.contexts().join("completed").join(&uuid);
    let history = read_jsonl(&dir.join("messages.jsonl"));
    assert_seq(&history);
    assert_eq!(history.len(), 5, "system, user, call, result, answer");
    assert_eq!(count_role(&history, "tool"), 1);
    let show = env.ctxhost(&["show", &uuid]).ok().stdout();
    assert!(show.contains("completed"), "{show}");
    // The opens wrote new checkpoints, and they hold.
    assert!(dir.join("history_checkpoint.json").is_file());
    env.ctxhost(&["fsck"]).ok();
}

/// A task with a real MCP server pauses before its tool call: the server is shut down with the
/// pause, and the call is made (by a new server) when the task is resumed.
#[test]
fn pausing_shuts_the_tool_servers_down_and_resuming_makes_the_pending_call() {
    let server = crate::support::filesystem_server_bin();
    let sample = tempfile::tempdir().unwrap();
    let sample_path = sample.path().canonicalize().unwrap();
    std::fs::write(sample_path.join("hello.txt"), "hello from the sample\n").unwrap();
    let args = serde_json::json!({ "path": sample_path.join("hello.txt") }).to_string();

    let llm = FakeLlm::start(vec![]);
    let first = Arc::new(AtomicUsize::new(0));
    let n = first.clone();
    llm.set_handler(move |req| {
        let last_tool = req.messages().last().is_some_and(|m| m["role"] == "tool");
        Some(if last_tool {
            Reply::text("The file says hello.", Some((9, 4)))
        } else if n.fetch_add(1, Ordering::SeqCst) == 0 {
            Reply::delay(
                Duration::from_millis(1500),
                Reply::tool_calls(vec![("call_1", "read_text_file", &args)], Some((9, 4))),
            )
        } else {
            panic!("the call was asked for twice")
        })
    });
    let env = TestEnv::new();
    let yaml = format!(
        "mcp_servers:\n  fs:\n    command: {:?}\n    args: [{:?}]\n",
        server.display().to_string(),
        sample_path.display().to_string()
    );
    // Unstreamed: the grace of the call in flight lets its reply land before the pause.
    let (from, to) = crate::support::UNSTREAMED;
    env.write_config(&config_yaml(&llm.base_url(), "openai", &yaml).replace(from, to));
    env.ctxhost(&["init"]).ok();
    let uuid = env.submit("read hello.txt");

    let w = worker(&env, &[]);
    assert!(wait_until(Duration::from_secs(60), || llm.request_count() >= 1));
    assert!(
        !crate::support::filesystem_server_pids(&sample_path).is_empty(),
        "the task's MCP server runs"
    );
    env.ctxhost(&["pause", &uuid, "--wait"]).ok();
    assert!(
        wait_until(Duration::from_secs(10), || {
            crate::support::filesystem_server_pids(&sample_path).is_empty()
        }),
        "the MCP server outlived the pause"
    );
    wait_ok(w);
    assert_eq!(env.row(&uuid)["status"], "paused");
    let paused = env.contexts().join("paused").join(&uuid);
    assert!(
        !paused.join("tools.jsonl").exists() || read_jsonl(&paused.join("tools.jsonl")).is_empty()
    );

    env.ctxhost(&["resume", &uuid]).ok();
    wait_ok(worker(&env, &[]));
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(
        (r["tool_call_count"].as_i64(), r["resume_count"].as_i64()),
        (Some(1), Some(1))
    );
    let dir = env.contexts().join("completed").join(&uuid);
    let history = read_jsonl(&dir.join("messages.jsonl"));
    let result = history.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(result["tool_call_id"], "call_1");
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("hello from the sample"),
        "{result}"
    );
    assert_eq!(read_jsonl(&dir.join("tools.jsonl")).len(), 1);
    assert!(crate::support::filesystem_server_pids(&sample_path).is_empty());
}

/// The checkpoints a pause saves (history_checkpoint.json, context_checkpoint.json) match the
/// files of the paused task `dir`: the history counts read nothing, the context check reads
/// only what follows its mark, and both agree with a full read.
fn assert_checkpoints_hold(dir: &Path) {
    use ctxhost::invariants::context_check::ContextCheck;
    let task = ctxhost::task_dir::TaskDir::open(dir).unwrap();
    let counts = ctxhost::task::HistoryCounts::open(&task).unwrap();
    assert_eq!(counts.bytes_read(), 0, "the history is not read again");
    assert_eq!(
        counts.stats(),
        ctxhost::repair::history_stats(&task, "messages.jsonl").unwrap()
    );
    assert_eq!(
        counts.call_ids(),
        &ctxhost::invariants::queries::call_ids_in(&task, "messages.jsonl").unwrap()
    );
    let mut check = ContextCheck::load(&task);
    let saved = check.checked_bytes();
    assert!(saved > 0, "a context check was saved at pause");
    let full = ctxhost::invariants::check_context_file(&task, "current.jsonl", true).unwrap();
    assert_eq!(check.check(&task, "current.jsonl", true).unwrap(), full);
    let len = std::fs::metadata(dir.join("current.jsonl")).unwrap().len();
    assert_eq!(
        check.bytes_read(),
        len - saved,
        "only what follows the mark"
    );
}
// The tests above that touch the task store, once more on PostgreSQL.
crate::support::store::postgres_variants!(
    pause_and_resume_mid_run_continue_the_context_exactly_once,
    stop_ends_queued_running_and_paused_tasks,
    lifecycle_commands_validate_uuids,
    a_killed_task_is_recovered_and_completed,
    a_task_that_fences_out_more_than_max_crashes_times_still_completes,
    pause_resume_and_claims_keep_status_and_directory_in_agreement,
    a_hundred_tasks_on_eight_processes_keep_exact_counters,
    cleanup_deletes_old_directories_and_keeps_rows,
    fsck_finds_planted_faults_and_repairs_the_fixable_ones,
    pausing_shuts_the_tool_servers_down_and_resuming_makes_the_pending_call,
);

/// `pause` while a streamed reply arrives (`llm.stream`, 0.5 s between events, ~20 s in all):
/// the stream is abandoned at once — not after `llm.interrupt_grace_secs` (10 s by default):
/// a partial reply is of no use — the task is `paused` with nothing of the partial appended,
/// and on resume the request is sent again and the whole reply kept.
#[test]
fn pause_during_a_slow_stream_ends_the_call_at_once() {
    let llm = FakeLlm::start(vec![]);
    let requests = Arc::new(AtomicUsize::new(0));
    let n = requests.clone();
    let long = "word ".repeat(32);
    llm.set_handler(move |_req| {
        Some(match n.fetch_add(1, Ordering::SeqCst) {
            0 => Reply::text(long.clone(), Some((10, 40))),
            _ => Reply::text("Done after the pause.", Some((10, 2))),
        })
    });
    llm.set_stream_delay(Duration::from_millis(500));
    let env = env_with_llm(
        &llm,
        &[("max_retries: 2", "max_retries: 2\n  stream: true")],
    );
    let uuid = env.submit("answer slowly");
    let w = worker(&env, &[]);
    // The stream has begun: some events are in reply.stream.
    assert!(wait_until(Duration::from_secs(60), || {
        find_task_dir(&env.contexts(), &uuid)
            .and_then(|d| std::fs::read_to_string(d.join("reply.stream")).ok())
            .is_some_and(|s| s.matches("data: ").count() >= 3)
    }));
    let asked = Instant::now();
    let took = interrupt_and_time(&env, "pause", &uuid, w, "paused");
    assert!(took < Duration::from_secs(4), "pause took {took:?}");
    // The fake saw the client close the stream midway, soon after the pause was asked for
    // (it watches the connection between events; issue 26: "within a second", bounded here
    // generously for a loaded machine).
    let abandoned = llm.abandoned_streams();
    assert_eq!(abandoned.len(), 1, "{abandoned:?}");
    let a = &abandoned[0];
    assert_eq!(a.request, 0, "{a:?}");
    assert!(a.events_sent < a.events, "{a:?}");
    let closed_after = a.at.saturating_duration_since(asked);
    eprintln!("the stream was closed {closed_after:?} after the pause was asked for");
    assert!(
        closed_after < Duration::from_secs(3),
        "the stream was closed {closed_after:?} after the pause was asked for"
    );
    llm.set_stream_delay(Duration::ZERO);
    let paused = env.contexts().join("paused").join(&uuid);
    // F15: the call is recorded and shown as given up for the pause, not as a failure.
    let calls = read_jsonl(&paused.join("llm_calls.jsonl"));
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["status"], "interrupted", "{calls:?}");
    let shown = env.ctxhost(&["show", &uuid, "--follow"]).ok().stdout();
    assert!(
        shown.contains("LLM call 1 ended by a pause or stop request"),
        "{shown}"
    );
    assert!(!shown.contains("failed"), "{shown}");
    let events = env
        .ctxhost(&["show", &uuid, "--follow", "--json"])
        .ok()
        .stdout();
    assert!(
        events.contains(r#""event":"llm_call","n":1,"#)
            && events.contains(r#""ok":false,"interrupted":true"#),
        "{events}"
    );
    // The abandoned stream is no reply in flight: nothing of it is replayed for the paused
    // task (F15, fixed in 516564e without a test until now).
    assert!(!paused.join("reply.stream").exists());
    assert!(!events.contains("reply_delta"), "{events}");
    assert!(!shown.contains("word word"), "{shown}");
    assert_eq!(
        read_jsonl(&paused.join("current.jsonl")).len(),
        2,
        "system, user: the partial is not appended"
    );
    assert_eq!(
        count_role(&read_jsonl(&paused.join("messages.jsonl")), "assistant"),
        0
    );

    env.ctxhost(&["resume", &uuid]).ok();
    wait_ok(worker(&env, &[]));
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["llm_call_count"], 1);
    assert_eq!(
        llm.request_count(),
        2,
        "the request was sent again on resume"
    );
    let dir = env.contexts().join("completed").join(&uuid);
    let current = read_jsonl(&dir.join("current.jsonl"));
    assert_eq!(count_role(&current, "assistant"), 1);
    assert_eq!(current.last().unwrap()["content"], "Done after the pause.");
    env.ctxhost(&["fsck"]).ok();
}
