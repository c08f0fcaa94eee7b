//! Agent strategies (issue 12) end to end with the fake LLM: `builtin:plan-execute` (plan →
//! steps → verification; a malformed plan; a revision after a tool error; a failed verification
//! that sends the model back; pause and resume mid-plan; kill -9 during the planning call and
//! right after a recorded decision), a third-party strategy fixture swapped in by config, and
//! the planning history as `show` and `fsck` see it.
//!
//! The fake LLM answers by what a request is: the strategy's side calls are told apart by
//! their system message (planner, reviewer, verifier), everything else is the agent loop.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::fake_llm::{FakeLlm, RecordedRequest, Reply};
use crate::support::{TestEnv, config_yaml, find_task_dir, read_jsonl, wait_until};
use serde_json::Value;

/// What a request to the fake LLM is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// plan-execute's planning call.
    Plan,
    /// plan-execute's reflection call.
    Reflect,
    /// plan-execute's verification call.
    Verify,
    /// A compressor's summary request (its prompt holds [`SUMMARY_MARK`]).
    Summary,
    /// The agent loop's own call.
    Loop,
}

/// Marker of the summary prompt in configs that compress ([`COMPRESSING`]).
pub(crate) const SUMMARY_MARK: &str = "SUMMARISE-THIS";

pub(crate) fn kind(req: &RecordedRequest) -> Kind {
    if req.messages().iter().any(|m| {
        m["content"]
            .as_str()
            .is_some_and(|c| c.contains(SUMMARY_MARK))
    }) {
        return Kind::Summary;
    }
    let system = req
        .messages()
        .first()
        .and_then(|m| m["content"].as_str().map(str::to_string))
        .unwrap_or_default();
    if system.contains("planner of a coding agent") {
        Kind::Plan
    } else if system.contains("review the progress of a coding agent") {
        Kind::Reflect
    } else if system.contains("check the result of a coding agent") {
        Kind::Verify
    } else {
        Kind::Loop
    }
}

/// Scripted replies per kind of request; an empty queue answers with the kind's default.
#[derive(Default)]
pub(crate) struct Script {
    queues: std::collections::HashMap<Kind, VecDeque<Reply>>,
    seen: Vec<Kind>,
}

#[derive(Clone, Default)]
pub(crate) struct Scripted(Arc<Mutex<Script>>);

impl Scripted {
    pub(crate) fn push(&self, k: Kind, replies: impl IntoIterator<Item = Reply>) -> &Self {
        self.0
            .lock()
            .unwrap()
            .queues
            .entry(k)
            .or_default()
            .extend(replies);
        self
    }

    /// How many requests of kind `k` arrived.
    pub(crate) fn count(&self, k: Kind) -> usize {
        self.0
            .lock()
            .unwrap()
            .seen
            .iter()
            .filter(|s| **s == k)
            .count()
    }

    /// A fake LLM answering from this script.
    pub(crate) fn start(&self) -> FakeLlm {
        let llm = FakeLlm::start(vec![]);
        let script = self.clone();
        llm.set_handler(move |req| {
            let k = kind(req);
            let mut s = script.0.lock().unwrap();
            s.seen.push(k);
            let next = s.queues.get_mut(&k).and_then(VecDeque::pop_front);
            Some(next.unwrap_or_else(|| match k {
                Kind::Plan => plan_reply(&["Answer the question"]),
                Kind::Reflect => Reply::text(
                    r#"{"assessment": "On track.", "revise": false}"#,
                    Some((50, 10)),
                ),
                Kind::Verify => Reply::text(r#"{"passed": true, "problems": ""}"#, Some((50, 5))),
                Kind::Summary => Reply::text(
                    "summary: the agent looked at several files.",
                    Some((300, 10)),
                ),
                Kind::Loop => Reply::text("Done.", Some((20, 2))),
            }))
        });
        llm
    }
}

/// A planning reply with these steps, fenced and with prose around it.
pub(crate) fn plan_reply(steps: &[&str]) -> Reply {
    let steps: Vec<Value> = steps
        .iter()
        .enumerate()
        .map(|(i, d)| serde_json::json!({"id": i + 1, "description": d}))
        .collect();
    let plan = serde_json::json!({"goal": "Answer what src/main.rs prints", "steps": steps});
    Reply::text(
        format!("Here is my plan:\n```json\n{plan:#}\n```\nI will follow it."),
        Some((60, 40)),
    )
}

fn text(t: &str) -> Reply {
    Reply::text(t, Some((30, 5)))
}

const PLAN_EXECUTE: &str = "plugins:\n  strategy: builtin:plan-execute\n";

/// Run task `uuid`'s process (`ctxhost task-exec`) with `failpoint` on; it must die by SIGKILL.
fn exec_killed_at(env: &TestEnv, uuid: &str, failpoint: &str) {
    let mut cmd = env.ctxhost_cmd(&["task-exec", uuid]).cmd;
    cmd.env(ctxhost::failpoint::FAILPOINT_ENV, failpoint)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let status = cmd.status().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL),
        "not killed at {failpoint}"
    );
}

fn run_once(env: &TestEnv) {
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
}

fn show(env: &TestEnv, uuid: &str) -> Value {
    env.ctxhost(&["show", uuid, "--json"]).ok().json()
}

fn dir_of(env: &TestEnv, uuid: &str) -> PathBuf {
    find_task_dir(&env.contexts(), uuid).expect("task directory")
}

/// The planning history of a task: its lines.
pub(crate) fn planning(dir: &Path, uuid: &str) -> Vec<Value> {
    read_jsonl(&dir.join("planning").join(format!("{uuid}.jsonl")))
}

fn types(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .map(|l| l["type"].as_str().unwrap().to_string())
        .collect()
}

fn contents(history: &[Value]) -> Vec<(String, String)> {
    history
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn plan_execute_plans_works_through_the_steps_and_verifies() {
    let script = Scripted::default();
    script
        .push(
            Kind::Plan,
            [plan_reply(&["Read src/main.rs", "Say what it prints"])],
        )
        .push(
            Kind::Loop,
            [
                text("Step 1: main.rs calls println!(\"hello\")."),
                text("It prints hello."),
            ],
        );
    let llm = script.start();
    let env = TestEnv::for_llm(&llm, PLAN_EXECUTE);
    let uuid = env.submit("What does src/main.rs print?");
    run_once(&env);

    let report = show(&env, &uuid);
    let row = &report["task"];
    assert_eq!(row["status"], "completed", "{row}");
    assert_eq!(report["result"], "It prints hello.");
    // Two loop calls, the planning call and the verification call.
    assert_eq!(row["llm_call_count"], 4, "{row}");
    assert_eq!(
        (
            script.count(Kind::Plan),
            script.count(Kind::Verify),
            script.count(Kind::Reflect)
        ),
        (1, 1, 0)
    );
    let dir = dir_of(&env, &uuid);

    // The planning history: the plan with step 1 in progress (start), step 1 done and step 2
    // in progress (the first reply), step 2 done and a passed verification (the second).
    let lines = planning(&dir, &uuid);
    assert_eq!(
        types(&lines),
        [
            "plan",
            "progress",
            "decision",
            "progress",
            "progress",
            "decision",
            "progress",
            "verification",
            "decision"
        ]
    );
    let plan = &lines[0];
    assert_eq!(plan["goal"], "Answer what src/main.rs prints");
    assert_eq!(plan["steps"].as_array().unwrap().len(), 2);
    assert_eq!(plan["steps"][0]["status"], "pending");
    assert_eq!(
        (plan["hook"].as_str(), plan["seq"].as_u64()),
        (Some("start"), Some(2))
    );
    assert!(plan["timestamp"].as_str().unwrap().ends_with('Z'));
    assert_eq!(lines[2]["action"], "proceed");
    assert_eq!(lines[2]["llm_calls"], 1);
    assert_eq!(lines[7]["verdict"], "passed");
    assert_eq!(
        (lines[8]["action"].as_str(), lines[8]["hook"].as_str()),
        (Some("finish"), Some("after-reply"))
    );

    // The context: the plan message before the first loop call, the next step after step 1.
    let history = read_jsonl(&dir.join("messages.jsonl"));
    let c = contents(&history);
    let roles: Vec<&str> = c.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(
        roles,
        ["system", "user", "user", "assistant", "user", "assistant"]
    );
    assert!(c[2].1.starts_with("Plan for this task:\nGoal: Answer what src/main.rs prints\n1. [in progress] Read src/main.rs\n2. [ ] Say what it prints"), "{}", c[2].1);
    assert!(
        c[4].1
            .starts_with("Step 1 is done. Next, step 2 of 2: Say what it prints"),
        "{}",
        c[4].1
    );
    let loop_requests: Vec<RecordedRequest> = llm
        .requests()
        .into_iter()
        .filter(|r| kind(r) == Kind::Loop)
        .collect();
    assert_eq!(loop_requests[0].messages().len(), 3, "system, prompt, plan");
    assert_eq!(loop_requests[1].messages().len(), 5);

    // show: the latest plan with every step done, in JSON and as text.
    let latest = &report["planning"]["latest"];
    assert_eq!(latest["steps"][0]["status"], "done");
    assert_eq!(latest["steps"][1]["status"], "done");
    assert_eq!(report["planning"]["verifications"], 1);
    assert_eq!(report["planning"]["last_verdict"], "passed");
    let shown = env.ctxhost(&["show", &uuid]).ok().stdout();
    assert!(
        shown.contains("plan:          2 of 2 step(s) done; 0 revision(s), 0 reflection(s), 1 verification(s), last passed"),
        "{shown}"
    );
    assert!(shown.contains("  1. [done] Read src/main.rs"), "{shown}");

    // fsck is content; a planted half-written hook (a line after the last decision) is found
    // and cut by --repair.
    env.ctxhost(&["fsck"]).ok();
    let file = dir.join("planning").join(format!("{uuid}.jsonl"));
    let mut orphan = lines[3].clone();
    orphan["seq"] = 99.into();
    std::fs::write(
        &file,
        format!("{}{orphan}\n", std::fs::read_to_string(&file).unwrap()),
    )
    .unwrap();
    let out = env.ctxhost(&["fsck", "--json"]);
    assert_eq!(out.code(), Some(1), "{}", out.stdout());
    let found = out.json();
    let p = &found["problems"][0];
    assert_eq!(p["kind"], "uncommitted-planning", "{found:#}");
    assert_eq!(p["line"], 10);
    env.ctxhost(&["fsck", "--repair"]).ok();
    assert_eq!(planning(&dir, &uuid).len(), 9);
    env.ctxhost(&["fsck"]).ok();
}

#[test]
fn a_malformed_plan_gets_one_repair_prompt_then_the_task_goes_on_without_a_plan() {
    let script = Scripted::default();
    script
        .push(
            Kind::Plan,
            [
                text("I would first look at the code, then answer."),
                text("{\"goal\": \"x\", \"steps\": []}"),
            ],
        )
        .push(Kind::Loop, [text("It prints hello.")]);
    let llm = script.start();
    let env = TestEnv::for_llm(&llm, PLAN_EXECUTE);
    let uuid = env.submit("What does src/main.rs print?");
    run_once(&env);
    let report = show(&env, &uuid);
    assert_eq!(report["task"]["status"], "completed", "{report:#}");
    assert_eq!(report["result"], "It prints hello.");
    assert_eq!(script.count(Kind::Plan), 2, "one repair prompt, no more");
    assert_eq!(script.count(Kind::Verify), 0, "nothing to verify against");
    // The repair prompt shows the model its reply and says what was wrong.
    let repair = llm
        .requests()
        .into_iter()
        .filter(|r| kind(r) == Kind::Plan)
        .nth(1)
        .unwrap();
    let m = repair.messages();
    assert_eq!(m.len(), 4);
    assert_eq!(m[2]["role"], "assistant");
    assert_eq!(
        m[2]["content"],
        "I would first look at the code, then answer."
    );
    assert!(
        m[3]["content"]
            .as_str()
            .unwrap()
            .contains("cannot be used as a plan (the reply has no JSON object)"),
        "{}",
        m[3]["content"]
    );
    // Not cut at the token limit: the repair prompt does not say it was.
    assert!(
        !m[3]["content"].as_str().unwrap().contains("cut off"),
        "{}",
        m[3]["content"]
    );
    // The history has both unusable replies, then says the task went on without a plan.
    let dir = dir_of(&env, &uuid);
    let lines = planning(&dir, &uuid);
    assert_eq!(
        types(&lines),
        ["reflection", "reflection", "plan", "decision"]
    );
    assert_eq!(lines[0]["trigger"], "unusable-plan");
    assert!(
        lines[0]["text"].as_str().unwrap().contains(
            "planning reply 1 holds no usable plan (the reply has no JSON object). The reply:\nI would first look at the code, then answer."
        ),
        "{}",
        lines[0]["text"]
    );
    assert!(
        lines[1]["text"]
            .as_str()
            .unwrap()
            .starts_with("planning reply 2 holds no usable plan"),
        "{}",
        lines[1]["text"]
    );
    assert!(
        lines[1]["text"]
            .as_str()
            .unwrap()
            .ends_with("{\"goal\": \"x\", \"steps\": []}"),
        "{}",
        lines[1]["text"]
    );
    let lines = &lines[2..];
    assert_eq!(lines[0]["steps"], serde_json::json!([]));
    assert!(
        lines[0]["note"]
            .as_str()
            .unwrap()
            .starts_with("no usable plan after one repair prompt"),
        "{}",
        lines[0]["note"]
    );
    assert_eq!(lines[1]["llm_calls"], 2);
    let report = show(&env, &uuid);
    assert_eq!(
        (
            &report["planning"]["unusable_plans"],
            &report["planning"]["reflections"]
        ),
        (&serde_json::json!(2), &serde_json::json!(0))
    );
    let history = read_jsonl(&dir.join("messages.jsonl"));
    assert_eq!(history.len(), 3, "no plan message: system, prompt, answer");
    let shown = env.ctxhost(&["show", &uuid]).ok().stdout();
    assert!(
        shown.contains("plan:          none (no usable plan after one repair prompt"),
        "{shown}"
    );

    // A plan that only comes after the repair prompt is adopted, and the note says so.
    let script = Scripted::default();
    script
        .push(Kind::Plan, [text("Sure."), plan_reply(&["Look", "Answer"])])
        .push(Kind::Loop, [text("Looked."), text("Answered.")]);
    let llm = script.start();
    let env = TestEnv::for_llm(&llm, PLAN_EXECUTE);
    let uuid = env.submit("What does src/main.rs print?");
    run_once(&env);
    assert_eq!(show(&env, &uuid)["task"]["status"], "completed");
    let lines = planning(&dir_of(&env, &uuid), &uuid);
    assert_eq!(lines[0]["trigger"], "unusable-plan");
    assert!(
        lines[0]["text"]
            .as_str()
            .unwrap()
            .ends_with("The reply:\nSure.")
    );
    assert_eq!(lines[1]["type"], "plan");
    assert_eq!(lines[1]["steps"].as_array().unwrap().len(), 2);
    assert!(
        lines[1]["note"]
            .as_str()
            .unwrap()
            .contains("after one repair prompt")
    );
}

/// A planning reply cut off at the token limit: the provider's `finish_reason` `length`, and
/// its usage says every allowed output token was used.
fn cut_plan_reply(text: &str) -> Reply {
    Reply::json(serde_json::json!({
        "id": "chatcmpl-cut",
        "object": "chat.completion",
        "created": 1_735_689_600u64,
        "model": "fake-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 60, "completion_tokens": 1024, "total_tokens": 1084},
    }))
}

#[test]
fn a_planning_reply_cut_at_the_token_limit_is_recorded_and_the_re_ask_says_it_was_cut() {
    let cut =
        "{\"goal\": \"Answer\", \"steps\": [{\"id\": 1, \"description\": \"Read every file of the";
    let script = Scripted::default();
    script
        .push(
            Kind::Plan,
            [
                cut_plan_reply(cut),
                plan_reply(&["Read src/main.rs", "Answer"]),
            ],
        )
        .push(Kind::Loop, [text("Read it."), text("It prints hello.")]);
    let llm = script.start();
    let env = TestEnv::for_llm(&llm, PLAN_EXECUTE);
    let uuid = env.submit("What does src/main.rs print?");
    run_once(&env);
    assert_eq!(show(&env, &uuid)["task"]["status"], "completed");
    let repair = llm
        .requests()
        .into_iter()
        .filter(|r| kind(r) == Kind::Plan)
        .nth(1)
        .unwrap();
    let asked = repair.messages()[3]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        asked.contains("It was cut off at the limit of") && asked.contains("write a shorter plan"),
        "{asked}"
    );
    let lines = planning(&dir_of(&env, &uuid), &uuid);
    assert_eq!(types(&lines)[..2], ["reflection", "plan"]);
    let recorded = lines[0]["text"].as_str().unwrap();
    assert!(
        recorded.starts_with("planning reply 1 holds no usable plan (")
            && recorded.contains("; it was cut off at the token limit of ")
            && recorded.ends_with(&format!("The reply:\n{cut}")),
        "{recorded}"
    );
    assert!(
        lines[1]["note"]
            .as_str()
            .unwrap()
            .contains("after one repair prompt")
    );
}

#[test]
fn no_reflection_is_asked_once_agent_max_steps_is_used_up() {
    let script = Scripted::default();
    script
        .push(Kind::Plan, [plan_reply(&["Read src/main.rs", "Answer"])])
        .push(
            Kind::Loop,
            [Reply::tool_calls(
                vec![("call_1", "read_text_file", r#"{"path":"src/main.rs"}"#)],
                Some((40, 10)),
            )],
        );
    let llm = script.start();
    let env = TestEnv::for_llm(&llm, &format!("{PLAN_EXECUTE}agent:\n  max_steps: 1\n"));
    let uuid = env.submit("What does src/main.rs print?");
    let out = env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    assert_eq!(out.code(), Some(1), "{}", out.stderr());
    let report = show(&env, &uuid);
    assert_eq!(report["task"]["status"], "failed", "{report:#}");
    assert!(
        report["task"]["error_message"]
            .as_str()
            .unwrap()
            .contains("agent.max_steps"),
        "{report:#}"
    );
    // The failed tool call came with the last step: nothing could act on a reflection.
    assert_eq!(script.count(Kind::Reflect), 0);
    let lines = planning(&dir_of(&env, &uuid), &uuid);
    assert!(
        !types(&lines).contains(&"reflection".to_string()),
        "{lines:#?}"
    );
}

#[test]
fn a_revision_identical_to_the_current_plan_is_not_written_again() {
    let script = Scripted::default();
    script
        .push(Kind::Plan, [plan_reply(&["Read src/main.rs", "Answer"])])
        .push(
            Kind::Reflect,
            [Reply::text(
                r#"{"assessment": "The plan still fits.", "revise": true,
                   "steps": [{"id": 1, "description": "Read src/main.rs", "status": "pending"},
                             {"id": 2, "description": "Answer", "status": "pending"}]}"#,
                Some((80, 40)),
            )],
        )
        .push(
            Kind::Loop,
            [
                Reply::tool_calls(
                    vec![("call_1", "read_text_file", r#"{"path":"src/main.rs"}"#)],
                    Some((40, 10)),
                ),
                text("Read it."),
                text("It prints hello."),
            ],
        );
    let llm = script.start();
    let env = TestEnv::for_llm(&llm, PLAN_EXECUTE);
    let uuid = env.submit("What does src/main.rs print?");
    run_once(&env);
    let report = show(&env, &uuid);
    assert_eq!(report["task"]["status"], "completed", "{report:#}");
    assert_eq!(script.count(Kind::Reflect), 1);
    let dir = dir_of(&env, &uuid);
    let lines = planning(&dir, &uuid);
    let t = types(&lines);
    assert!(t.contains(&"reflection".to_string()), "{t:?}");
    assert!(!t.contains(&"revision".to_string()), "{t:?}");
    assert_eq!(report["planning"]["revisions"], 0);
    // The context gets the reflection, without a "revised" plan that is the same one.
    let history = read_jsonl(&dir.join("messages.jsonl"));
    let reflection = contents(&history)
        .into_iter()
        .find(|(r, t)| r == "user" && t.starts_with("Reflection on the progress:"))
        .expect("the reflection is in the context");
    assert!(!reflection.1.contains("Revised plan"), "{}", reflection.1);
    assert!(
        reflection
            .1
            .ends_with("Continue with step 1: Read src/main.rs"),
        "{}",
        reflection.1
    );
}

#[test]
fn a_tool_error_leads_to_a_reflection_that_revises_the_plan() {
    let script = Scripted::default();
    script
        .push(Kind::Plan, [plan_reply(&["Read src/main.rs", "Answer"])])
        .push(
            Kind::Reflect,
            [Reply::text(
                r#"{"assessment": "main.rs cannot be read here; answer from the README.", "revise": true,
                   "steps": [{"id": 1, "description": "Read the README", "status": "pending"},
                             {"id": 2, "description": "Answer", "status": "pending"}]}"#,
                Some((80, 40)),
            )],
        )
        .push(
            Kind::Loop,
            [
                Reply::tool_calls(
                    vec![("call_1", "read_text_file", r#"{"path":"src/main.rs"}"#)],
                    Some((40, 10)),
                ),
                text("The README says it prints hello."),
                text("It prints hello."),
            ],
        );
    let llm = script.start();
    let env = TestEnv::for_llm(&llm, PLAN_EXECUTE);
    let uuid = env.submit("What does src/main.rs print?");
    run_once(&env);
    let report = show(&env, &uuid);
    assert_eq!(report["task"]["status"], "completed", "{report:#}");
    assert_eq!(script.count(Kind::Reflect), 1);

    // The reflection request saw the failed call.
    let reflect = llm
        .requests()
        .into_iter()
        .find(|r| kind(r) == Kind::Reflect)
        .unwrap();
    let asked = reflect.messages()[1]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(asked.contains("A tool call just failed."), "{asked}");
    assert!(
        asked.contains("- read_text_file: error: error: no such tool"),
        "{asked}"
    );

    let dir = dir_of(&env, &uuid);
    let lines = planning(&dir, &uuid);
    let t = types(&lines);
    let at = t.iter().position(|x| x == "reflection").unwrap();
    assert_eq!(&t[at..at + 3], ["reflection", "revision", "decision"]);
    assert_eq!(lines[at]["trigger"], "tool-error");
    assert_eq!(lines[at]["hook"], "after-tools");
    let revision = &lines[at + 1];
    assert_eq!(revision["steps"][0]["description"], "Read the README");
    assert_eq!(revision["steps"][0]["status"], "in_progress");
    assert!(
        revision["note"]
            .as_str()
            .unwrap()
            .starts_with("revised after a reflection (tool-error)")
    );
    // The revised plan went into the context, and was worked through to the end.
    let history = read_jsonl(&dir.join("messages.jsonl"));
    let c = contents(&history);
    let reflection = c
        .iter()
        .find(|(r, t)| r == "user" && t.starts_with("Reflection on the progress:"))
        .expect("the reflection is in the context");
    assert!(
        reflection.1.contains(
            "Revised plan:\nGoal: Answer what src/main.rs prints\n1. [in progress] Read the README"
        ),
        "{}",
        reflection.1
    );
    assert!(
        reflection
            .1
            .ends_with("Continue with step 1: Read the README"),
        "{}",
        reflection.1
    );
    assert_eq!(report["planning"]["revisions"], 1);
    assert_eq!(report["planning"]["reflections"], 1);
    let latest = &report["planning"]["latest"]["steps"];
    assert_eq!(latest[0]["description"], "Read the README");
    assert_eq!(
        (latest[0]["status"].as_str(), latest[1]["status"].as_str()),
        (Some("done"), Some("done"))
    );
}

#[test]
fn a_failed_verification_sends_the_model_back_while_budget_remains() {
    let script = Scripted::default();
    script
        .push(Kind::Plan, [plan_reply(&["Answer"])])
        .push(
            Kind::Verify,
            [
                text(r#"{"passed": false, "problems": "The answer does not say which file."}"#),
                text(r#"{"passed": true}"#),
            ],
        )
        .push(
            Kind::Loop,
            [text("It prints hello."), text("src/main.rs prints hello.")],
        );
    let llm = script.start();
    let env = TestEnv::for_llm(&llm, PLAN_EXECUTE);
    let uuid = env.submit("What does src/main.rs print?");
    run_once(&env);
    let report = show(&env, &uuid);
    assert_eq!(report["task"]["status"], "completed", "{report:#}");
    assert_eq!(report["result"], "src/main.rs prints hello.");
    assert_eq!(script.count(Kind::Verify), 2);
    let dir = dir_of(&env, &uuid);
    let verdicts: Vec<String> = planning(&dir, &uuid)
        .iter()
        .filter(|l| l["type"] == "verification")
        .map(|l| l["verdict"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(verdicts, ["failed", "passed"]);
    let history = read_jsonl(&dir.join("messages.jsonl"));
    let back = contents(&history)
        .into_iter()
        .find(|(_, t)| t.starts_with("A check of your result against the plan found problems:"))
        .expect("the problems went back to the model");
    assert!(
        back.1.contains("The answer does not say which file."),
        "{}",
        back.1
    );
    assert_eq!(report["planning"]["failed_verifications"], 1);

    // No budget left (agent.max_steps 1): a failed verification ends the task with its answer,
    // and the history says the check failed.
    let script = Scripted::default();
    script
        .push(Kind::Plan, [plan_reply(&["Answer"])])
        .push(Kind::Verify, [text("FAIL: says nothing about the file")])
        .push(Kind::Loop, [text("It prints hello.")]);
    let llm = script.start();
    let env = TestEnv::for_llm(&llm, &format!("{PLAN_EXECUTE}agent:\n  max_steps: 1\n"));
    let uuid = env.submit("What does src/main.rs print?");
    run_once(&env);
    let report = show(&env, &uuid);
    assert_eq!(report["task"]["status"], "completed", "{report:#}");
    assert_eq!(report["planning"]["last_verdict"], "failed");
    assert_eq!(script.count(Kind::Verify), 1);
    assert_eq!(script.count(Kind::Loop), 1);
    let shown = env.ctxhost(&["show", &uuid]).ok().stdout();
    assert!(shown.contains("1 verification(s), last failed"), "{shown}");
}

/// A worker in the background, its log in a file (a pipe nobody reads would block it).
fn worker(env: &TestEnv, name: &str) -> std::process::Child {
    let mut cmd = env.ctxhost_cmd(&["run", "--once", "--poll-ms", "20"]).cmd;
    cmd.stdout(Stdio::null())
        .stderr(std::fs::File::create(env.root().join(name)).unwrap());
    cmd.spawn().unwrap()
}

#[test]
fn pause_and_resume_mid_plan_continue_at_the_same_step() {
    let script = Scripted::default();
    script
        .push(Kind::Plan, [plan_reply(&["Look", "Think", "Answer"])])
        .push(
            Kind::Loop,
            [
                text("Looked."),
                // In flight while the pause is requested.
                Reply::delay(Duration::from_millis(1500), text("Thought.")),
                text("The answer is hello."),
            ],
        );
    let llm = script.start();
    // Unstreamed: the grace of the call in flight lets its reply land before the pause.
    let env = TestEnv::for_llm_unstreamed(&llm, PLAN_EXECUTE);
    let uuid = env.submit("What does src/main.rs print?");
    let mut w = worker(&env, "worker-1.log");
    assert!(wait_until(Duration::from_secs(60), || script
        .count(Kind::Loop)
        >= 2));
    env.ctxhost(&["pause", &uuid, "--reason", "lunch"]).ok();
    assert!(w.wait().unwrap().success());
    let report = show(&env, &uuid);
    assert_eq!(report["task"]["status"], "paused", "{report:#}");
    // Paused at the safe point after step 2's reply was taken in: step 3 is in progress.
    let steps = &report["planning"]["latest"]["steps"];
    let status: Vec<&str> = (0..3)
        .map(|i| steps[i]["status"].as_str().unwrap())
        .collect();
    assert_eq!(status, ["done", "done", "in_progress"]);
    let shown = env.ctxhost(&["show", &uuid]).ok().stdout();
    assert!(shown.contains("  3. [in progress] Answer"), "{shown}");

    env.ctxhost(&["resume", &uuid]).ok();
    run_once(&env);
    let report = show(&env, &uuid);
    assert_eq!(report["task"]["status"], "completed", "{report:#}");
    assert_eq!(report["task"]["resume_count"], 1);
    assert_eq!(report["result"], "The answer is hello.");
    assert_eq!(script.count(Kind::Plan), 1, "the plan was made once");
    assert_eq!(script.count(Kind::Loop), 3, "every step's call made once");
    // The first call after the resume continued with step 3.
    let third = llm
        .requests()
        .into_iter()
        .filter(|r| kind(r) == Kind::Loop)
        .nth(2)
        .unwrap();
    let last = third.messages().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        last.starts_with("Step 2 is done. Next, step 3 of 3: Answer"),
        "{last}"
    );
    let dir = dir_of(&env, &uuid);
    let lines = planning(&dir, &uuid);
    assert_eq!(types(&lines).iter().filter(|t| *t == "plan").count(), 1);
    let history = read_jsonl(&dir.join("messages.jsonl"));
    assert_eq!(
        contents(&history)
            .iter()
            .filter(|(_, t)| t.starts_with("Plan for this task:"))
            .count(),
        1
    );
}

fn kill_and_recover(env: &TestEnv, child: &mut std::process::Child) {
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let rec = env.ctxhost(&["recover", "--json"]).ok().json();
    assert_eq!(rec[0]["status"], "queued", "{rec:#}");
}

#[test]
fn kill_minus_nine_during_the_planning_call_plans_once() {
    let script = Scripted::default();
    // The first planning call never gets its answer: the process is killed while it waits.
    script
        .push(
            Kind::Plan,
            [Reply::delay(
                Duration::from_secs(30),
                plan_reply(&["Never used"]),
            )],
        )
        .push(Kind::Plan, [plan_reply(&["Look", "Answer"])])
        .push(Kind::Loop, [text("Looked."), text("It prints hello.")]);
    let llm = script.start();
    let env = TestEnv::for_llm(&llm, PLAN_EXECUTE);
    let uuid = env.submit("What does src/main.rs print?");
    let mut cmd = env.ctxhost_cmd(&["task-exec", &uuid]).cmd;
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    assert!(wait_until(Duration::from_secs(60), || script
        .count(Kind::Plan)
        >= 1));
    kill_and_recover(&env, &mut child);
    // Nothing of the unanswered planning call was kept.
    let dir = dir_of(&env, &uuid);
    assert!(!dir.join("planning").join(format!("{uuid}.jsonl")).exists());
    env.ctxhost(&["fsck"]).ok();

    env.ctxhost(&["task-exec", &uuid]).ok();
    let report = show(&env, &uuid);
    assert_eq!(report["task"]["status"], "completed", "{report:#}");
    assert_eq!(
        script.count(Kind::Plan),
        2,
        "asked again: the first never answered"
    );
    let dir = dir_of(&env, &uuid);
    let lines = planning(&dir, &uuid);
    assert_eq!(types(&lines).iter().filter(|t| *t == "plan").count(), 1);
    assert_eq!(lines[0]["steps"][0]["description"], "Look");
    let history = read_jsonl(&dir.join("messages.jsonl"));
    assert_eq!(
        contents(&history)
            .iter()
            .filter(|(_, t)| t.starts_with("Plan for this task:"))
            .count(),
        1
    );
    assert!(!dir.join("strategy_request.jsonl").exists());
}

#[test]
fn kill_minus_nine_after_a_recorded_decision_applies_it_without_asking_again() {
    let script = Scripted::default();
    script
        .push(Kind::Plan, [plan_reply(&["Look", "Answer"])])
        .push(Kind::Loop, [text("Looked."), text("It prints hello.")]);
    let llm = script.start();
    let env = TestEnv::for_llm(&llm, PLAN_EXECUTE);
    let uuid = env.submit("What does src/main.rs print?");
    // Killed right after the start hook's plan and decision are on disk, before the plan
    // message is in the context.
    exec_killed_at(&env, &uuid, "strategy:recorded");
    let dir = dir_of(&env, &uuid);
    assert_eq!(
        types(&planning(&dir, &uuid)),
        ["plan", "progress", "decision"]
    );
    assert_eq!(
        read_jsonl(&dir.join("messages.jsonl")).len(),
        2,
        "the plan message is not in yet"
    );
    let rec = env.ctxhost(&["recover", "--json"]).ok().json();
    assert_eq!(rec[0]["status"], "queued", "{rec:#}");

    env.ctxhost(&["task-exec", &uuid]).ok();
    let report = show(&env, &uuid);
    assert_eq!(report["task"]["status"], "completed", "{report:#}");
    assert_eq!(
        script.count(Kind::Plan),
        1,
        "the recorded decision was applied, not asked again"
    );
    let dir = dir_of(&env, &uuid);
    let history = read_jsonl(&dir.join("messages.jsonl"));
    let c = contents(&history);
    assert!(c[2].1.starts_with("Plan for this task:"), "{c:?}");
    assert_eq!(
        c.iter()
            .filter(|(_, t)| t.starts_with("Plan for this task:"))
            .count(),
        1
    );
    assert_eq!(
        types(&planning(&dir, &uuid))
            .iter()
            .filter(|t| *t == "plan")
            .count(),
        1
    );
}

fn nudge_fixture() -> String {
    Path::new(env!("CTXHOST_GUEST_DIR"))
        .join("nudge_strategy.wasm")
        .display()
        .to_string()
}

#[test]
fn a_third_party_strategy_is_swapped_in_by_config() {
    let fixture = nudge_fixture();
    let out = crate::support::TestEnv::new()
        .ctxhost(&["plugin", "check", &fixture])
        .ok();
    assert!(
        out.stdout().contains("world strategy-plugin"),
        "{}",
        out.stdout()
    );

    let extra = format!(
        "plugins:\n  strategy: \"{fixture}\"\nstrategy:\n  options:\n    marker: XYZZY\n    max_nudges: 2\n"
    );
    let llm = FakeLlm::start(vec![
        text("I think it prints hello."),
        text("DONE: it prints hello."),
        // The second task never says DONE.
        text("maybe"),
        text("perhaps"),
        text("who knows"),
    ]);
    let env = TestEnv::for_llm(&llm, &extra);
    let done = env.submit("What does src/main.rs print?");
    run_once(&env);
    let report = show(&env, &done);
    assert_eq!(report["task"]["status"], "completed", "{report:#}");
    assert_eq!(report["result"], "DONE: it prints hello.");
    let dir = dir_of(&env, &done);
    let c = contents(&read_jsonl(&dir.join("messages.jsonl")));
    assert_eq!(
        c[2].1,
        "XYZZY Finish by replying with a line that starts with DONE."
    );
    assert_eq!(
        c[4].1,
        "XYZZY Not finished: reply with DONE and your result."
    );
    let lines = planning(&dir, &done);
    assert_eq!(types(&lines), ["reflection", "decision"]);
    assert_eq!(lines[0]["trigger"], "nudge");

    let stuck = env.submit("Say DONE.");
    let out = env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    assert_eq!(out.code(), Some(1), "{}", out.stderr());
    let row = &show(&env, &stuck)["task"];
    assert_eq!(row["status"], "failed");
    assert_eq!(
        row["error_message"],
        format!("strategy {fixture} failed the task: no DONE after 2 nudges")
    );
    assert_eq!(row["llm_call_count"], 3);
}

#[test]
fn a_component_that_is_no_strategy_is_refused_when_the_plugins_load() {
    let llm = FakeLlm::start(vec![]);
    let env = TestEnv::for_llm(&llm, "plugins:\n  strategy: builtin:openai-chat\n");
    env.submit("hi");
    let out = env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    assert!(!out.output.status.success());
    assert!(
        out.stderr().contains(
            "error: config.yaml: plugins.strategy (`builtin:openai-chat`) cannot be loaded as a strategy"
        ) && out
            .stderr()
            .contains("expected ctxhost:plugin/strategy@1.0.0 (world strategy-plugin)"),
        "{}",
        out.stderr()
    );
    assert_eq!(llm.request_count(), 0);
}

/// A config that compresses after a few long replies.
const COMPRESSING: &str = "plugins:\n  strategy: builtin:plan-execute\n\
context_storage:\n  base_dir: ./contexts\n  compression_threshold: 0.5\n  keep_recent_messages: 3\n  \
summary_prompt: \"SUMMARISE-THIS\\n{messages}\"\n";

fn compressing_env(llm: &FakeLlm) -> TestEnv {
    let env = TestEnv::new();
    let mut yaml = config_yaml(&llm.base_url(), "openai", COMPRESSING);
    // config_yaml writes its own context_storage and a window of 8192: take ours instead.
    yaml = yaml.replacen("context_storage:\n  base_dir: ./contexts\n", "", 1);
    yaml = yaml.replace("context_length: 8192", "context_length: 1500");
    env.write_config(&yaml);
    env.ctxhost(&["init"]).ok();
    env
}

fn long(step: u32) -> Reply {
    text(&format!(
        "Step {step} done. {}",
        "Some findings about the code. ".repeat(40)
    ))
}

#[test]
fn the_latest_plan_is_stated_again_after_every_compression() {
    let script = Scripted::default();
    script
        .push(Kind::Plan, [plan_reply(&["One", "Two", "Three", "Four"])])
        .push(
            Kind::Loop,
            [long(1), long(2), long(3), text("All four done.")],
        );
    let llm = script.start();
    let env = compressing_env(&llm);
    let uuid = env.submit("Do the four things.");
    run_once(&env);
    let report = show(&env, &uuid);
    assert_eq!(report["task"]["status"], "completed", "{report:#}");
    let compressions = report["task"]["compression_count"].as_u64().unwrap();
    assert!(compressions >= 1, "{report:#}");
    let dir = dir_of(&env, &uuid);
    let history = read_jsonl(&dir.join("messages.jsonl"));
    let mut restated = 0;
    for (i, h) in history.iter().enumerate() {
        if h.get("summary_id").is_some_and(|v| !v.is_null()) {
            let next = &history[i + 1];
            assert_eq!(next["role"], "user", "{next}");
            let t = next["content"].as_str().unwrap();
            assert!(
                t.starts_with("The context was compressed. The plan so far:\nGoal: "),
                "{t}"
            );
            assert!(t.contains("1. [done] One"), "{t}");
            assert!(t.contains("\n\nContinue with step "), "{t}");
            restated += 1;
        }
    }
    assert_eq!(
        restated as u64, compressions,
        "once after every compression"
    );
    // Every model call after a compression had the plan in its context.
    for r in llm.requests().into_iter().filter(|r| kind(r) == Kind::Loop) {
        let m = r.messages();
        assert!(
            m.iter().any(|x| x["content"]
                .as_str()
                .is_some_and(|c| c.contains("[done] One") || c.starts_with("Plan for this task:"))),
            "a model call without the plan: {m:#?}"
        );
    }
}

#[test]
fn a_plan_lost_between_a_compression_and_its_restatement_is_restated_on_resume() {
    let script = Scripted::default();
    script
        .push(Kind::Plan, [plan_reply(&["One", "Two", "Three", "Four"])])
        .push(
            Kind::Loop,
            [long(1), long(2), long(3), text("All four done.")],
        );
    let llm = script.start();
    let env = compressing_env(&llm);
    let uuid = env.submit("Do the four things.");
    exec_killed_at(&env, &uuid, "agent:compressed");
    let dir = dir_of(&env, &uuid);
    let history = read_jsonl(&dir.join("messages.jsonl"));
    assert!(
        history.last().unwrap()["summary_id"].is_number(),
        "killed right after the compression"
    );
    env.ctxhost(&["recover", "--json"]).ok();
    env.ctxhost(&["task-exec", &uuid]).ok();
    assert_eq!(show(&env, &uuid)["task"]["status"], "completed");
    let dir = dir_of(&env, &uuid);
    let history = read_jsonl(&dir.join("messages.jsonl"));
    let i = history
        .iter()
        .position(|h| h["summary_id"].is_number())
        .unwrap();
    assert!(
        history[i + 1]["content"]
            .as_str()
            .unwrap()
            .starts_with("The context was compressed. The plan so far:"),
        "{}",
        history[i + 1]
    );
}

crate::support::store::postgres_variants!(
    plan_execute_plans_works_through_the_steps_and_verifies,
    pause_and_resume_mid_plan_continue_at_the_same_step,
    kill_minus_nine_after_a_recorded_decision_applies_it_without_asking_again,
);
