//! Context inheritance (issue 12): a task submitted with the same task key as an earlier
//! completed task starts from that task's final answer, latest plan and last summary, recorded
//! in metadata.json `inherited_from` and printed by `show`; a chain of three tasks stays
//! bounded; `submit --no-inherit` and `context_inheritance.enabled: false` turn it off; a
//! predecessor whose directory is gone or damaged is skipped with a warning.

use serde_json::Value;

use crate::strategies::{Kind, Scripted, plan_reply};
use crate::support::fake_llm::Reply;
use crate::support::{TestEnv, find_task_dir, read_json, read_jsonl};

const KEY: [&str; 9] = [
    "--source", "github", "--owner", "acme", "--repo", "widgets", "--type", "issue", "--id",
];

fn submit_on(env: &TestEnv, id: &str, prompt: &str, extra: &[&str]) -> String {
    let mut args = vec!["submit"];
    args.extend_from_slice(&KEY);
    args.push(id);
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--prompt", prompt]);
    env.ctxhost(&args).ok().stdout().trim().to_string()
}

fn run_once(env: &TestEnv) {
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
}

fn system_prompt(env: &TestEnv, uuid: &str) -> String {
    let dir = find_task_dir(&env.contexts(), uuid).unwrap();
    read_jsonl(&dir.join("messages.jsonl"))[0]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

fn metadata(env: &TestEnv, uuid: &str) -> Value {
    read_json(
        &find_task_dir(&env.contexts(), uuid)
            .unwrap()
            .join("metadata.json"),
    )
}

fn show(env: &TestEnv, uuid: &str) -> Value {
    env.ctxhost(&["show", uuid, "--json"]).ok().json()
}

const PLAN: &str = "plugins:\n  strategy: builtin:plan-execute\n";
const BASE_PROMPT: &str = "You are a careful coding agent.";

#[test]
fn a_chain_of_three_tasks_inherits_and_stays_bounded() {
    let script = Scripted::default();
    script
        .push(
            Kind::Plan,
            [
                plan_reply(&["Find the crash"]),
                plan_reply(&["Fix the crash"]),
                plan_reply(&["Test the fix"]),
            ],
        )
        .push(
            Kind::Loop,
            [
                Reply::text("FIRST-ANSWER: the crash is in parse().", Some((30, 5))),
                Reply::text("SECOND-ANSWER: fixed parse().", Some((30, 5))),
                Reply::text("THIRD-ANSWER: the fix is tested.", Some((30, 5))),
            ],
        );
    let llm = script.start();
    let env = TestEnv::for_llm(
        &llm,
        &format!(
            "{PLAN}agent:\n  system_prompt: \"{BASE_PROMPT}\"\ncontext_inheritance:\n  max_inherited_tokens: 400\n"
        ),
    );
    let first = submit_on(&env, "7", "Find why widgets crash.", &[]);
    run_once(&env);
    assert_eq!(show(&env, &first)["task"]["status"], "completed");
    assert_eq!(
        system_prompt(&env, &first),
        BASE_PROMPT,
        "nothing to inherit yet"
    );
    assert!(metadata(&env, &first).get("inherited_from").is_none());

    let second = submit_on(&env, "7", "Fix the crash.", &[]);
    run_once(&env);
    let sys2 = system_prompt(&env, &second);
    assert!(sys2.starts_with(&format!("{BASE_PROMPT}\n\nContext inherited from an earlier task on the same item (github acme/widgets issue #7; task {first}")), "{sys2}");
    assert!(
        sys2.contains("Its final answer:\nFIRST-ANSWER: the crash is in parse()."),
        "{sys2}"
    );
    assert!(
        sys2.contains(
            "Its latest plan:\nGoal: Answer what src/main.rs prints\n1. [done] Find the crash"
        ),
        "{sys2}"
    );
    let from = &metadata(&env, &second)["inherited_from"];
    assert_eq!(from["uuid"], first.as_str());
    assert_eq!(from["generation"], 1);
    assert_eq!(from["parts"], serde_json::json!(["answer", "plan"]));
    assert!(from["tokens"].as_u64().unwrap() <= 400, "{from}");
    // The planner saw the inherited context too (it is part of the task's system prompt).
    let plans: Vec<_> = llm
        .requests()
        .into_iter()
        .filter(|r| crate::strategies::kind(r) == Kind::Plan)
        .collect();
    let asked = plans[1].messages()[1]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        asked.contains("FIRST-ANSWER") && asked.contains("Task:\nFix the crash."),
        "{asked}"
    );
    let report = show(&env, &second);
    assert_eq!(report["inherited_from"]["uuid"], first.as_str());
    let shown = env.ctxhost(&["show", &second]).ok().stdout();
    assert!(
        shown.contains(&format!("inherited:     from task {first} (completed ")),
        "{shown}"
    );
    assert!(shown.contains("link 1 of its chain"), "{shown}");

    let third = submit_on(&env, "7", "Test the fix.", &[]);
    run_once(&env);
    let sys3 = system_prompt(&env, &third);
    let from = &metadata(&env, &third)["inherited_from"];
    assert_eq!(
        from["uuid"],
        second.as_str(),
        "the most recent task of the key"
    );
    assert_eq!(from["generation"], 2);
    assert!(sys3.contains("SECOND-ANSWER"), "{sys3}");
    // Bounded: the third task carries the second's own final state, not the first's again.
    assert!(!sys3.contains("FIRST-ANSWER"), "{sys3}");
    assert_eq!(sys3.matches("Context inherited from").count(), 1, "{sys3}");
    let inherited = ctxhost_format::estimate_tokens(&sys3[BASE_PROMPT.len()..]);
    assert!(inherited <= 400, "{inherited} tokens inherited");
    let sizes = [sys2.len(), sys3.len()];
    assert!(
        sizes[1] < sizes[0] + 200,
        "the chain does not grow: {sizes:?}"
    );

    // --no-inherit, another key, and inheritance turned off start from scratch.
    let fresh = submit_on(&env, "7", "Start over.", &["--no-inherit"]);
    let other = submit_on(&env, "8", "Another issue.", &[]);
    run_once(&env);
    for uuid in [&fresh, &other] {
        assert_eq!(system_prompt(&env, uuid), BASE_PROMPT, "{uuid}");
        assert!(metadata(&env, uuid).get("inherited_from").is_none());
    }
    assert_eq!(show(&env, &fresh)["task"]["no_inherit"], true);
    env.write_config(&crate::support::config_yaml(
        &llm.base_url(),
        "openai",
        &format!(
            "agent:\n  system_prompt: \"{BASE_PROMPT}\"\ncontext_inheritance:\n  enabled: false\n"
        ),
    ));
    let off = submit_on(&env, "7", "No inheritance.", &[]);
    run_once(&env);
    assert_eq!(system_prompt(&env, &off), BASE_PROMPT);
}

#[test]
fn a_cleaned_up_or_damaged_predecessor_is_skipped_with_a_warning() {
    let llm = crate::support::fake_llm::FakeLlm::start(vec![
        Reply::text("OLDEST-ANSWER", Some((10, 2))),
        Reply::text("MIDDLE-ANSWER", Some((10, 2))),
        Reply::text("NEWEST-ANSWER", Some((10, 2))),
    ]);
    let mut env = TestEnv::for_llm(
        &llm,
        &format!("agent:\n  system_prompt: \"{BASE_PROMPT}\"\n"),
    );
    env.expect_nonconforming("a predecessor's messages.jsonl is damaged on purpose");
    let oldest = submit_on(&env, "9", "one", &[]);
    run_once(&env);
    let middle = submit_on(&env, "9", "two", &["--no-inherit"]);
    run_once(&env);
    let newest = submit_on(&env, "9", "three", &["--no-inherit"]);
    run_once(&env);
    // The newest predecessor's directory is gone; the middle one's history is damaged.
    std::fs::remove_dir_all(find_task_dir(&env.contexts(), &newest).unwrap()).unwrap();
    let damaged = find_task_dir(&env.contexts(), &middle)
        .unwrap()
        .join("messages.jsonl");
    let text = std::fs::read_to_string(&damaged).unwrap();
    std::fs::write(&damaged, format!("not json\n{text}")).unwrap();

    let next = submit_on(&env, "9", "four", &[]);
    let out = env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    assert_eq!(show(&env, &next)["task"]["status"], "completed");
    let meta = metadata(&env, &next);
    assert_eq!(meta["inherited_from"]["uuid"], oldest.as_str(), "{meta:#}");
    let skipped = meta["inheritance_skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 2, "{meta:#}");
    assert_eq!(skipped[0]["uuid"], newest.as_str());
    assert_eq!(skipped[0]["reason"], "its directory is gone");
    assert_eq!(skipped[1]["uuid"], middle.as_str());
    let reason = skipped[1]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("damaged: ") && reason.contains("messages.jsonl line 1"),
        "{reason}"
    );
    assert!(system_prompt(&env, &next).contains("OLDEST-ANSWER"));
    assert!(
        out.stderr()
            .contains("context inheritance: skipping an earlier task of the same key"),
        "{}",
        out.stderr()
    );
    let shown = env.ctxhost(&["show", &next]).ok().stdout();
    assert!(
        shown.contains(&format!(
            "not inherited: task {newest}: its directory is gone"
        )),
        "{shown}"
    );
}
