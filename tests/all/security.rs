//! A plugin must never make the host act outside its task directory, and secrets are never
//! kept (issue 10): one test (or more) per kind of attack, with hostile fixture components
//! (`guest-components/fixtures/hostile-{store,compressor,format}`, attacks chosen by
//! `HOSTILE key=value` lines of the task's prompt) or hostile fake-provider replies.
//!
//! 1. links: a component cannot create one; the host never follows one for any file it reads or
//!    writes in a task directory; a resumed directory loses the links it has;
//! 2. paths a component returns (current-context-file, compressor context-file, llm
//!    messages-file) must be plain relative paths inside the task directory;
//! 3. a compressor's `llm` import: calls and wall time bounded per compression, calls counted;
//! 4. component strings (errors, logs, endpoint paths) bounded and escaped;
//! 5. the task directory's byte budget;
//! 6. the API key redacted from every body, error, kept file and log, whatever the status;
//! 7. URL credentials never printed;
//! 8. owner-only modes, and fsck reporting / tightening looser ones;
//! 9. `llm.max_request_mib`.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ctxhost::task_dir::TaskDir;
use ctxhost_format::ChatMessage;
use serde_json::Value;

use crate::support::fake_llm::{FakeLlm, Reply};
use crate::support::task::TaskBuilder;
use crate::support::{TestEnv, config_yaml, find_task_dir, read_jsonl};

/// What the victim file outside every task directory holds; it must never change.
const VICTIM: &str = "the victim's own content\n";
/// An API key the fake provider echoes back.
const KEY: &str = "sk-test-0123456789-SECRET-abcdef";

fn guest(file: &str) -> String {
    Path::new(env!("CTXHOST_GUEST_DIR"))
        .join(file)
        .display()
        .to_string()
}

/// A test env whose config uses the fake LLM, `plugins` (YAML lines of the `plugins` section)
/// and `extra` sections; `victim` is created in its root.
fn env(llm: &FakeLlm, plugins: &str, extra: &str) -> TestEnv {
    let env = TestEnv::new();
    let extra = format!("plugins:\n{plugins}{extra}");
    env.write_config(&config_yaml(&llm.base_url(), "openai", &extra));
    env.ctxhost(&["init"]).ok();
    fs::write(env.root().join("victim"), VICTIM).unwrap();
    env
}

fn submit(env: &TestEnv, prompt: &str) -> String {
    let file = env.root().join("prompt.txt");
    fs::write(&file, prompt).unwrap();
    env.ctxhost(&["submit", "--prompt-file", file.to_str().unwrap()])
        .ok()
        .stdout()
        .trim()
        .to_string()
}

/// `run --once`; returns its stderr (the worker's and the task processes' logs).
fn run(env: &TestEnv) -> String {
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).stderr()
}

fn row(env: &TestEnv, uuid: &str) -> Value {
    env.ctxhost(&["show", uuid, "--json"]).ok().json()["task"].clone()
}

fn assert_victim_intact(env: &TestEnv) {
    assert_eq!(
        fs::read_to_string(env.root().join("victim")).unwrap(),
        VICTIM,
        "the file outside the task directory changed"
    );
}

/// Every symbolic link below `dir`.
fn links_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap().flatten() {
        let t = e.file_type().unwrap();
        if t.is_symlink() {
            out.push(e.path());
        } else if t.is_dir() {
            out.extend(links_below(&e.path()));
        }
    }
    out
}

/// No log line a component forged: each starts with a timestamp only when ctxhost wrote it.
fn assert_no_forged_line(log: &str) {
    for line in log.lines() {
        assert!(
            !line.starts_with("2030-01-01T00:00:00.000000Z"),
            "a component forged a log line: {line}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Links

#[test]
fn a_component_cannot_create_a_link_and_the_task_runs() {
    let llm = FakeLlm::start(vec![
        Reply::tool_calls(vec![("call_1", "read_text_file", "{}")], None),
        Reply::text("done", None),
    ]);
    let env = env(
        &llm,
        &format!("  message_store: {}\n", guest("hostile_store.wasm")),
        "",
    );
    let uuid = submit(&env, "HOSTILE symlinks=../../../victim\nplease work");
    run(&env);
    assert_eq!(row(&env, &uuid)["status"], "completed");
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    let report = fs::read_to_string(dir.join("hostile-report.txt")).unwrap();
    let lines: Vec<&str> = report.lines().collect();
    assert!(lines.len() >= 20, "{report}");
    for l in &lines {
        assert!(l.contains(": refused:"), "a link was created: {l}");
    }
    assert!(report.contains("tools.jsonl: refused"), "{report}");
    assert!(
        report.contains("response.json.partial: refused"),
        "{report}"
    );
    assert!(links_below(&dir).is_empty());
    // The host's own writes went into its own files.
    assert_eq!(read_jsonl(&dir.join("tools.jsonl")).len(), 1);
    assert!(
        fs::symlink_metadata(dir.join("metadata.json"))
            .unwrap()
            .is_file()
    );
    assert_victim_intact(&env);
}

/// A host operation on a task directory; `Err` is a refusal.
type HostOp = Box<dyn Fn(&TaskDir) -> Result<(), String>>;

/// One host operation on a task directory where a link of the name it uses points out.
struct LinkCase {
    /// The name the host reads or writes.
    name: &'static str,
    /// Runs the host's operation on the task directory.
    op: HostOp,
}

fn case(name: &'static str, op: impl Fn(&TaskDir) -> Result<(), String> + 'static) -> LinkCase {
    LinkCase {
        name,
        op: Box::new(op),
    }
}

#[test]
fn the_host_never_follows_a_link_for_any_file_it_reads_or_writes() {
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::text("hello", None));
    let base_url = llm.base_url();
    let transport = move || {
        let mut cfg = ctxhost::llm::TransportConfig::new(base_url.clone());
        cfg.max_retries = 0;
        ctxhost::llm::Transport::new(cfg)
    };
    // Writes the request file first unless it is the linked name.
    let post = move |d: &TaskDir, req: &str, resp: &str| -> Result<(), String> {
        if d.metadata(req).unwrap().is_none() {
            d.write_atomic(req, b"{}").map_err(|e| e.to_string())?;
        }
        transport()
            .post_file("/v1/chat/completions", d, req, resp)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let record_call = |d: &TaskDir, text: String| {
        let mut store = ctxhost::task::ToolStore::open(d, 10).map_err(|e| e.to_string())?;
        let call = ctxhost_format::ToolCall::new("c1", "t", "{}");
        store
            .record(
                &call,
                &ctxhost::tools::CallOutcome::Success(text),
                Duration::ZERO,
            )
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let post2 = post.clone();
    let post3 = post.clone();
    let post4 = post.clone();
    let cases = vec![
        case("metadata.json", |d| {
            let meta = ctxhost::task::Metadata {
                uuid: "u".into(),
                task_key: ctxhost::task::MetadataTaskKey {
                    task_source: "local".into(),
                    owner: None,
                    repo: None,
                    task_type: None,
                    task_id: None,
                },
                created_at: "t".into(),
                process_id: 1,
                hostname: "h".into(),
                config: ctxhost::task::MetadataConfig {
                    llm_provider: "openai".into(),
                    model: "m".into(),
                    context_length: 1,
                    compression_threshold: 0.5,
                },
                user: None,
                inherited_from: None,
                inheritance_skipped: Vec::new(),
                workspace: None,
            };
            ctxhost::task::write_metadata_once(d, &meta)
                .map(|_| ())
                .map_err(|e| format!("{e:#}"))
        }),
        // Context inheritance reads a predecessor's metadata.json and planning history.
        case("metadata.json", |d| {
            ctxhost::task::read_metadata(d)
                .map(|_| ())
                .map_err(|e| format!("{e:#}"))
        }),
        case("planning", |d| {
            ctxhost::task::PlanningStore::read(d, "u")
                .map(|_| ())
                .map_err(|e| format!("{e:#}"))
        }),
        case("task_state.json", |d| {
            ctxhost::task::state::read(d).map_err(|e| format!("{e:#}"))?;
            Ok(())
        }),
        case("task_state.json", |d| {
            ctxhost::task::state::write_paused(d, "t", 0, None).map_err(|e| format!("{e:#}"))
        }),
        case("tools.jsonl", move |d| record_call(d, "short".into())),
        case("tool-results", move |d| record_call(d, "long ".repeat(500))),
        case("tools.json", |d| {
            d.write_atomic("tools.json", b"[]")
                .map_err(|e| e.to_string())
        }),
        case("request.json", move |d| {
            post(d, "request.json", "response.json")
        }),
        case("response.json", move |d| {
            post2(d, "request.json", "response.json")
        }),
        case("response.json.partial", move |d| {
            post3(d, "request.json", "response.json")
        }),
        case("llm_response.json.partial", move |d| {
            post4(d, "llm_request.json", "llm_response.json")
        }),
        case("summaries.jsonl", |d| {
            ctxhost::task::SummaryStore::new(d)
                .latest()
                .map(|_| ())
                .map_err(|e| format!("{e:#}"))
        }),
        case("messages.jsonl", |d| {
            ctxhost::repair::history_stats(d, "messages.jsonl")
                .map(|_| ())
                .map_err(|e| format!("{e:#}"))
        }),
        case("current.jsonl", |d| {
            ctxhost::invariants::queries::final_answer_in(d, "current.jsonl")
                .map(|_| ())
                .map_err(|e| format!("{e:#}"))
        }),
        case("current.jsonl", |d| {
            ctxhost::repair::close_pending_calls(d, "t")
                .map(|_| ())
                .map_err(|e| format!("{e:#}"))
        }),
        case("messages.jsonl.torn", |d| {
            d.write_atomic("messages.jsonl", b"{\"seq\":1,\"ro")
                .map_err(|e| e.to_string())?;
            ctxhost::repair::fix_torn_tail(d, "messages.jsonl", true)
                .map(|_| ())
                .map_err(|e| format!("{e:#}"))
        }),
        case("compressed.jsonl", |d| {
            ctxhost::invariants::check_context_file(d, "compressed.jsonl", false)
                .map(|_| ())
                .map_err(|e| e.to_string())
        }),
        case("planning", |d| {
            // Open the history (reads planning/u.jsonl), then commit a hook's plan (creates
            // the folder if needed and appends).
            let mut store =
                ctxhost::task::PlanningStore::open(d, "u").map_err(|e| format!("{e:#}"))?;
            let stamp = ctxhost_format::planning::Stamp {
                timestamp: "2026-01-02T03:04:05.000Z".into(),
                seq: 2,
                step: 0,
                hook: ctxhost_format::planning::Hook::Start,
            };
            store.begin(stamp.clone());
            let plan =
                ctxhost_format::planning::parse_plan("[\"read\"]").map_err(|e| e.to_string())?;
            ctxhost::runtime::PlanningImport::save_plan(&mut store, plan, None)?;
            store
                .commit(ctxhost_format::planning::DecisionBody {
                    at: stamp,
                    action: ctxhost_format::planning::Action::Proceed,
                    message: None,
                    reason: None,
                    llm_calls: 0,
                    duration_ms: 0,
                })
                .map(|_| ())
                .map_err(|e| format!("{e:#}"))
        }),
    ];
    for c in &cases {
        for relative in [true, false] {
            let tmp = tempfile::tempdir().unwrap();
            let outside = tmp.path().join("outside");
            fs::create_dir(&outside).unwrap();
            let victim = outside.join("victim");
            fs::write(&victim, VICTIM).unwrap();
            let task = tmp.path().join("contexts/running/task");
            fs::create_dir_all(&task).unwrap();
            // A link to the victim file, or to the outside folder for folder names.
            let folder = matches!(c.name, "tool-results" | "planning");
            let target: PathBuf = match (folder, relative) {
                (true, true) => "../../../outside".into(),
                (true, false) => outside.clone(),
                (false, true) => "../../../outside/victim".into(),
                (false, false) => victim.clone(),
            };
            symlink(&target, task.join(c.name)).unwrap();
            let dir = TaskDir::open(&task).unwrap();
            let result = (c.op)(&dir);
            let what = format!("{} -> {}", c.name, target.display());
            assert_eq!(
                fs::read_to_string(&victim).unwrap(),
                VICTIM,
                "{what}: the host wrote through the link ({result:?})"
            );
            let names: Vec<String> = fs::read_dir(&outside)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(names, ["victim"], "{what}: the host created a file outside");
            // Either refused (the link may be deleted), or the link itself was replaced by the
            // host's own file.
            let now = fs::symlink_metadata(task.join(c.name)).ok();
            match result {
                Err(e) => assert!(
                    e.contains("symbolic link"),
                    "{what}: refused without saying why: {e}"
                ),
                Ok(()) => assert!(
                    now.is_some_and(|m| !m.file_type().is_symlink()),
                    "{what}: accepted, and the link is still there"
                ),
            }
        }
    }
}

#[test]
fn links_left_in_a_task_directory_are_removed_before_it_resumes() {
    let llm = FakeLlm::start(vec![Reply::text("done", None)]);
    let env = env(&llm, "  message_store: builtin:jsonl-store\n", "");
    let tasks = TaskBuilder::new(&env.contexts());
    let uuid = tasks.paused();
    let dir = tasks.dir_of(&uuid);
    for name in [
        "tools.jsonl",
        "summaries.jsonl",
        "response.json",
        "planning",
    ] {
        symlink("../../../victim", dir.join(name)).unwrap();
    }
    // `ctxhost resume` queues it, warning about the links fsck reports; the task process
    // removes them before it reads anything.
    let resumed = env.ctxhost(&["resume", &uuid]).ok();
    assert!(
        resumed.stderr().contains("symbolic link"),
        "{}",
        resumed.stderr()
    );
    let log = run(&env);
    assert_eq!(row(&env, &uuid)["status"], "completed", "{log}");
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    assert!(links_below(&dir).is_empty());
    assert!(log.contains("deleted link(s) or special file(s)"), "{log}");
    assert_victim_intact(&env);
}

// ---------------------------------------------------------------------------------------------
// 2. Paths a component returns

#[test]
fn a_current_context_file_outside_the_task_directory_fails_the_task() {
    let llm = FakeLlm::start(vec![]);
    let env = env(
        &llm,
        &format!("  message_store: {}\n", guest("hostile_store.wasm")),
        "",
    );
    // An outside context that ends with a final answer: read, it would complete the task.
    let outside = env.root().join("outside.jsonl");
    let lines: String = [
        ChatMessage::text("system", "s"),
        ChatMessage::text("assistant", "stolen answer"),
    ]
    .iter()
    .map(|m| serde_json::to_string(m).unwrap() + "\n")
    .collect();
    fs::write(&outside, &lines).unwrap();
    for path in [
        "../../../outside.jsonl".to_string(),
        outside.display().to_string(),
        "sub/../../../../outside.jsonl".to_string(),
    ] {
        let uuid = submit(&env, &format!("HOSTILE context-file={path}\ngo"));
        run(&env);
        let row = row(&env, &uuid);
        assert_eq!(row["status"], "failed", "{path}");
        let error = row["error_message"].as_str().unwrap();
        assert!(
            error.contains("current-context-file returned a path the host refuses")
                && error.contains("is not a plain relative path inside the task directory"),
            "{path}: {error}"
        );
        assert_eq!(row["llm_call_count"], 0, "{path}");
    }
    assert_eq!(llm.request_count(), 0);
    assert_eq!(fs::read_to_string(&outside).unwrap(), lines);
}

#[test]
fn a_compressor_path_outside_the_task_directory_is_refused() {
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::text("done", None));
    let env = env(
        &llm,
        &format!("  compressor: {}\n", guest("hostile_compressor.wasm")),
        "",
    );
    fs::write(env.root().join("outside.jsonl"), VICTIM).unwrap();
    // The new context it returns.
    let uuid = submit(&env, "HOSTILE context-file=../../../outside.jsonl\ngo");
    let log = run(&env);
    assert_eq!(row(&env, &uuid)["status"], "completed", "{log}");
    assert!(
        log.contains("returned context file `../../../outside.jsonl` is not a plain relative path"),
        "{log}"
    );
    // Rejected without deleting it (the old host deleted a rejected file).
    assert_eq!(
        fs::read_to_string(env.root().join("outside.jsonl")).unwrap(),
        VICTIM
    );
    // The messages file of an llm call.
    let before = llm.request_count();
    let uuid = submit(&env, "HOSTILE messages-file=../../../outside.jsonl\ngo");
    let log = run(&env);
    assert_eq!(row(&env, &uuid)["status"], "completed", "{log}");
    assert!(
        log.contains("llm.complete refused ../../../outside.jsonl")
            && log.contains("messages-file: `../../../outside.jsonl` is not a plain relative path"),
        "{log}"
    );
    assert_eq!(llm.request_count() - before, 1, "only the agent's own call");
}

/// The first line of messages.jsonl of task `uuid`, parsed.
fn first_history_line(env: &TestEnv, uuid: &str) -> Value {
    let dir = find_task_dir(&env.contexts(), uuid).unwrap();
    read_jsonl(&dir.join("messages.jsonl"))[0].clone()
}

/// Issue 25 item 1: a compressor that returns a file of the task's record (messages.jsonl,
/// tools.jsonl, summaries.jsonl, a planning history) as its new context is refused as
/// current.jsonl is, and the file is left alone (the clean-up after a rejection used to delete
/// messages.jsonl, and the task completed with its history gone).
#[test]
fn a_compressor_returning_a_file_of_the_record_is_refused_and_it_is_kept() {
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::text("done", None));
    let env = env(
        &llm,
        &format!("  compressor: {}\n", guest("hostile_compressor.wasm")),
        "",
    );
    for name in [
        "messages.jsonl",
        "summaries.jsonl",
        "tools.jsonl",
        "planning/plan.jsonl",
        "history_checkpoint.json",
    ] {
        let uuid = submit(&env, &format!("HOSTILE context-file={name}\ngo"));
        let log = run(&env);
        assert_eq!(row(&env, &uuid)["status"], "completed", "{name}: {log}");
        assert!(
            log.contains(&format!(
                "returned context file `{name}`, a file of the task's record"
            )),
            "{name}: {log}"
        );
        // The whole history is there: the system prompt, the prompt, the answer.
        let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
        let history = read_jsonl(&dir.join("messages.jsonl"));
        let roles: Vec<&str> = history
            .iter()
            .map(|l| l["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["system", "user", "assistant"], "{name}");
        assert_eq!(first_history_line(&env, &uuid)["seq"], 1, "{name}");
    }
    // A file of the compressor's own that was there before `compress` ran is rejected as a
    // context but not deleted: the clean-up deletes only what the step created.
    let uuid = submit(
        &env,
        "HOSTILE touch=own-notes.txt\nHOSTILE context-file=own-notes.txt\ngo",
    );
    let log = run(&env);
    assert_eq!(row(&env, &uuid)["status"], "completed", "{log}");
    assert!(
        log.contains("compressor") && log.contains("rejected"),
        "{log}"
    );
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    assert_eq!(
        fs::read_to_string(dir.join("own-notes.txt")).unwrap(),
        "not a context\n"
    );
}

/// Issue 25 item 2: a component that replaces messages.jsonl during a task — a forged file
/// renamed over it, or the file deleted and a hard link to a forgery put in its place (a
/// link is refused: the history is then gone) — fails the task, naming the file; the task no
/// longer completes on a history the host did not record.
#[test]
fn a_component_replacing_the_history_fails_the_task_naming_it() {
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::text("done", None));
    let env = env(
        &llm,
        &format!("  compressor: {}\n", guest("hostile_compressor.wasm")),
        "",
    );
    for (how, what) in [("rename", "it is another file"), ("link", "it is gone")] {
        let uuid = submit(&env, &format!("HOSTILE replace-history={how}\ngo"));
        let log = run(&env);
        let r = row(&env, &uuid);
        assert_eq!(r["status"], "failed", "{how}: {log}");
        let error = r["error_message"].as_str().unwrap();
        // The file as the task process saw it, in running/.
        let file = env
            .contexts()
            .join("running")
            .join(&uuid)
            .join("messages.jsonl");
        assert!(
            error.contains(&format!(
                "{} no longer starts with the 2 line(s)",
                file.display()
            )) && error.contains(what),
            "{how}: {error}"
        );
        if how == "link" {
            assert!(
                log.contains("history not replaced (link)"),
                "the hard link was refused: {log}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 3. The compressor's llm import

/// Whether a request is one of the hostile compressor's summary requests.
fn is_summary_request(r: &crate::support::fake_llm::RecordedRequest) -> bool {
    r.messages()
        .first()
        .is_some_and(|m| m["content"] == "Summarise.")
}

#[test]
fn a_compression_makes_at_most_max_llm_calls_and_they_are_counted() {
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::text("done", Some((10, 2))));
    let env = env(
        &llm,
        &format!("  compressor: {}\n", guest("hostile_compressor.wasm")),
        "",
    );
    let cfg = fs::read_to_string(env.config_path()).unwrap();
    env.write_config(&cfg.replace(
        "  base_dir: ./contexts\n",
        "  base_dir: ./contexts\n  max_llm_calls_per_compression: 4\n",
    ));
    let uuid = submit(&env, "HOSTILE llm-calls=300\ngo");
    let log = run(&env);
    let row = row(&env, &uuid);
    assert_eq!(row["status"], "completed", "{log}");
    let summaries = llm
        .requests()
        .iter()
        .filter(|r| is_summary_request(r))
        .count();
    assert_eq!(summaries, 4, "summary requests that reached the provider");
    // The 4 summary calls and the agent's call, all in the task's stats.
    assert_eq!(row["llm_call_count"], 5);
    assert!(log.contains("made 4 call(s), 296 refused"), "{log}");
    assert!(
        log.contains("context_storage.max_llm_calls_per_compression"),
        "{log}"
    );
}

#[test]
fn a_compression_is_bounded_in_wall_time_llm_calls_included() {
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::text("done", None));
    llm.set_handler(|r| {
        is_summary_request(r)
            .then(|| Reply::delay(Duration::from_millis(800), Reply::text("s", None)))
    });
    let env = env(
        &llm,
        &format!("  compressor: {}\n", guest("hostile_compressor.wasm")),
        "runtime:\n  call_timeout_secs: 1\n",
    );
    let cfg = fs::read_to_string(env.config_path()).unwrap();
    env.write_config(&cfg.replace(
        "  base_dir: ./contexts\n",
        "  base_dir: ./contexts\n  max_llm_calls_per_compression: 100\n  max_compression_secs: 2\n",
    ));
    let uuid = submit(&env, "HOSTILE llm-calls=100\ngo");
    let log = run(&env);
    assert_eq!(row(&env, &uuid)["status"], "completed", "{log}");
    // 800 ms per call: a 2 s compression has room for 2 whole calls and part of a third; the
    // calls are not the compressor's own time (its own limit is 1 s), so only the wall time
    // stops them.
    let summaries = llm
        .requests()
        .iter()
        .filter(|r| is_summary_request(r))
        .count();
    assert!(
        (2..=3).contains(&summaries),
        "{summaries} summary requests\n{log}"
    );
    // Refused once the time is up (or stopped, if the compressor is still running then).
    assert!(
        log.contains("wall time of 2 s (context_storage.max_compression_secs)")
            || log.contains("wall-time limit of 2 s"),
        "{log}"
    );
}

// ---------------------------------------------------------------------------------------------
// 4. Component strings

#[test]
fn a_huge_component_error_is_bounded_escaped_and_forges_no_log_line() {
    let llm = FakeLlm::start(vec![]);
    let env = env(
        &llm,
        &format!("  message_store: {}\n", guest("hostile_store.wasm")),
        "",
    );
    let uuid = submit(
        &env,
        "HOSTILE log=hi\\n2030-01-01T00:00:00.000000Z ERROR forged by log\nHOSTILE error-mib=50\ngo",
    );
    let log = run(&env);
    let row = row(&env, &uuid);
    assert_eq!(row["status"], "failed");
    let error = row["error_message"].as_str().unwrap();
    assert!(error.len() <= 16 * 1024 + 64, "{} bytes", error.len());
    assert!(
        error.contains("hostile error\\n2030-01-01"),
        "{}",
        &error[..300]
    );
    assert!(!error.contains('\n'));
    assert!(
        error.contains(" bytes shown]"),
        "{}",
        &error[error.len() - 200..]
    );
    let db_bytes: u64 = ["tasks.db", "tasks.db-wal"]
        .iter()
        .filter_map(|f| fs::metadata(env.contexts().join(f)).ok())
        .map(|m| m.len())
        .sum();
    assert!(
        db_bytes < 4 * 1024 * 1024,
        "tasks.db + WAL: {db_bytes} bytes"
    );
    assert!(log.len() < 1024 * 1024, "log: {} bytes", log.len());
    assert!(log.contains("hi\\n2030-01-01"), "{log}");
    assert_no_forged_line(&log);
}

#[test]
fn a_request_format_cannot_forge_log_lines_or_send_to_another_path() {
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::text("done", None));
    let env = env(
        &llm,
        &format!("  request_format: {}\n", guest("hostile_format.wasm")),
        "",
    );
    let uuid = submit(
        &env,
        "HOSTILE endpoint=/v1/chat/completions\\n2030-01-01T00:00:00.000000Z ERROR forged\ngo",
    );
    let log = run(&env);
    let r = row(&env, &uuid);
    assert_eq!(r["status"], "failed");
    let error = r["error_message"].as_str().unwrap();
    assert!(
        error.contains("endpoint path `/v1/chat/completions\\n2030-01-01")
            && error.contains("is not a URL path"),
        "{error}"
    );
    assert_eq!(llm.request_count(), 0, "nothing sent");
    assert_no_forged_line(&log);

    let uuid = submit(&env, "HOSTILE format-error-mib=20\ngo");
    let log = run(&env);
    let r = row(&env, &uuid);
    assert_eq!(r["status"], "failed");
    assert!(r["error_message"].as_str().unwrap().len() <= 16 * 1024 + 64);
    assert!(log.len() < 1024 * 1024, "log: {} bytes", log.len());
    assert_no_forged_line(&log);
}

/// A format may hand a reply's text over in a file (WIT `content-file`), but only in
/// `reply.content`: naming a task file made the store append messages.jsonl into itself (to
/// 638 MB, fresh-user F1) or the host take metadata.json as the answer and delete it.
#[test]
fn a_request_format_cannot_name_a_task_file_as_its_replys_text() {
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::text("done", None));
    let env = env(
        &llm,
        &format!("  request_format: {}\n", guest("hostile_format.wasm")),
        "",
    );
    for name in ["messages.jsonl", "metadata.json", "current.jsonl"] {
        let uuid = submit(&env, &format!("HOSTILE content-file={name}\ngo"));
        run(&env);
        let r = row(&env, &uuid);
        assert_eq!(r["status"], "failed", "{name}");
        let error = r["error_message"].as_str().unwrap();
        assert!(
            error.contains(&format!("content-file `{name}` refused"))
                && error.contains("must be `reply.content`"),
            "{name}: {error}"
        );
        let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
        assert!(
            dir.join("metadata.json").is_file(),
            "{name}: metadata.json kept"
        );
        let history = fs::read_to_string(dir.join("messages.jsonl")).unwrap();
        assert!(
            history.len() < 64 * 1024 && !history.contains(r#""role":"assistant""#),
            "{name}: no reply appended: {} bytes",
            history.len()
        );
    }
}

/// Issue 38 item 6: a format that renames messages.jsonl to `reply.content` passed the name
/// check, and the host deleted the history after the append. A text file whose inode was a
/// task file's is refused, and the file is put back.
#[test]
fn a_task_file_renamed_to_the_replys_text_is_refused_and_put_back() {
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::text("done", None));
    let env = env(
        &llm,
        &format!("  request_format: {}\n", guest("hostile_format.wasm")),
        "",
    );
    let uuid = submit(&env, "HOSTILE rename-to-content=messages.jsonl\ngo");
    run(&env);
    let r = row(&env, &uuid);
    assert_eq!(r["status"], "failed", "{r}");
    let error = r["error_message"].as_str().unwrap();
    assert!(
        error.contains("hostile_format.wasm")
            && error.contains("is the task file messages.jsonl renamed (the same inode)")
            && error.contains("moved back to"),
        "{error}"
    );
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    // The history is whole again under its name: from seq 1, the prompt in it, no reply.
    let history = read_jsonl(&dir.join("messages.jsonl"));
    assert_eq!(history[0]["seq"], 1);
    assert!(
        history
            .iter()
            .any(|l| l["role"] == "user"
                && l["content"].as_str().unwrap().contains("rename-to-content")),
        "{history:?}"
    );
    assert!(
        history.iter().all(|l| l["role"] != "assistant"),
        "{history:?}"
    );
    assert!(!dir.join("reply.content").exists());
}

// ---------------------------------------------------------------------------------------------
// 5. The task directory's byte budget

/// Issue 38 item 5: the end-of-call check was skipped when the last scan was less than 10 ms
/// earlier, so a format that made `reply.content` 100 MiB (a seek and one byte) just before
/// returning went unmeasured about half the time, and the store's next call was blamed.
/// Four tasks: each must name the format's `read-response`.
#[test]
fn a_format_writing_past_the_budget_just_before_it_returns_is_blamed() {
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::text("done", None));
    let env = env(
        &llm,
        &format!("  request_format: {}\n", guest("hostile_format.wasm")),
        "",
    );
    let cfg = fs::read_to_string(env.config_path()).unwrap();
    env.write_config(&cfg.replace(
        "  base_dir: ./contexts\n",
        "  base_dir: ./contexts\n  max_task_dir_mib: 16\n",
    ));
    for attempt in 1..=4 {
        let uuid = submit(&env, "HOSTILE sparse-content-mib=100\ngo");
        run(&env);
        let r = row(&env, &uuid);
        assert_eq!(r["status"], "failed", "{attempt}: {r}");
        let error = r["error_message"].as_str().unwrap();
        assert!(
            error.contains("hostile_format.wasm: read-response filled the task directory to")
                && error.contains("over its budget of 16777216 bytes"),
            "attempt {attempt}: {error}"
        );
        let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
        assert!(!dir.join("reply.content").exists(), "{attempt}");
        let history = fs::read_to_string(dir.join("messages.jsonl")).unwrap();
        assert!(!history.contains(r#""role":"assistant""#), "{attempt}");
    }
}

#[test]
fn a_component_writing_hundreds_of_mib_is_stopped_near_the_budget() {
    let llm = FakeLlm::start(vec![]);
    let env = env(
        &llm,
        &format!("  message_store: {}\n", guest("hostile_store.wasm")),
        "",
    );
    let cfg = fs::read_to_string(env.config_path()).unwrap();
    env.write_config(&cfg.replace(
        "  base_dir: ./contexts\n",
        "  base_dir: ./contexts\n  max_task_dir_mib: 16\n",
    ));
    let uuid = submit(&env, "HOSTILE fill-mib=400\ngo");
    run(&env);
    let r = row(&env, &uuid);
    assert_eq!(r["status"], "failed");
    let error = r["error_message"].as_str().unwrap();
    assert!(
        error.contains("add-message filled the task directory to")
            && error.contains(
                "over its budget of 16777216 bytes (context_storage.max_task_dir_mib); stopped"
            ),
        "{error}"
    );
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    let written = fs::metadata(dir.join("filler.bin")).unwrap().len();
    println!("filler.bin: {written} bytes written for a budget of 16 MiB");
    assert!(
        written < 64 * 1024 * 1024,
        "stopped after {written} bytes, far past the budget"
    );
    assert_eq!(llm.request_count(), 0);
}

/// Issue 25 item 8: bytes deep in the task directory count (the old walk stopped at 16
/// levels: 200 MiB at depth 20 passed a 64 MiB budget).
#[test]
fn bytes_written_deep_in_the_task_directory_count_against_the_budget() {
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::text("done", None));
    let env = env(
        &llm,
        &format!("  message_store: {}\n", guest("hostile_store.wasm")),
        "",
    );
    let cfg = fs::read_to_string(env.config_path()).unwrap();
    env.write_config(&cfg.replace(
        "  base_dir: ./contexts\n",
        "  base_dir: ./contexts\n  max_task_dir_mib: 16\n",
    ));
    let uuid = submit(&env, "HOSTILE deep=24\nHOSTILE fill-mib=64\ngo");
    run(&env);
    let r = row(&env, &uuid);
    assert_eq!(r["status"], "failed", "{r}");
    let error = r["error_message"].as_str().unwrap();
    assert!(
        error.contains("add-message filled the task directory to")
            && error.contains("over its budget of 16777216 bytes"),
        "{error}"
    );
    assert_eq!(llm.request_count(), 0);
}

/// Issue 25 item 8: one call of a component may create at most
/// `context_storage.max_files_per_call` files and folders (default 1000; 29,000 went through
/// before): the creations past it are refused (WASI `quota`) and the call fails, naming the
/// limit.
#[test]
fn a_component_creating_too_many_files_in_one_call_is_stopped() {
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::text("done", None));
    let env = env(
        &llm,
        &format!("  message_store: {}\n", guest("hostile_store.wasm")),
        "",
    );
    let uuid = submit(&env, "HOSTILE many-files=1500\ngo");
    run(&env);
    let r = row(&env, &uuid);
    assert_eq!(r["status"], "failed", "{r}");
    let error = r["error_message"].as_str().unwrap();
    assert!(
        error.contains(
            "add-message tried to create more than 1000 files and folders in the task directory in one call"
        ) && error.contains("context_storage.max_files_per_call"),
        "{error}"
    );
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    // The folder `many` and 999 files in it: 1000 creations.
    let made = fs::read_dir(dir.join("many")).unwrap().count();
    assert_eq!(made, 999);

    // Under the limit, as configured, the task runs.
    let cfg = fs::read_to_string(env.config_path()).unwrap();
    env.write_config(&cfg.replace(
        "  base_dir: ./contexts\n",
        "  base_dir: ./contexts\n  max_files_per_call: 2000\n",
    ));
    let uuid = submit(&env, "HOSTILE many-files=1500\ngo");
    run(&env);
    assert_eq!(row(&env, &uuid)["status"], "completed");
}

// ---------------------------------------------------------------------------------------------
// 6. The API key

/// Every file under `dir` (tasks.db and its WAL included) that contains `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_containing(&p, needle));
        } else if let Ok(bytes) = fs::read(&p)
            && bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
        {
            out.push(p);
        }
    }
    out
}

#[test]
fn the_api_key_a_provider_echoes_is_redacted_whatever_the_status() {
    // HTTP 200 with an error body quoting the key: a reply that cannot be read, so it is asked
    // for again (1 + MAX_MALFORMED_REPLY_RETRIES times) before the task fails.
    let echo = || {
        Reply::json(serde_json::json!({"error": {
            "message": format!("Incorrect API key provided: {KEY}. Find yours at ..."),
            "type": "invalid_request_error"}}))
    };
    let mut replies: Vec<Reply> = (0..=ctxhost::agent::MAX_MALFORMED_REPLY_RETRIES)
        .map(|_| echo())
        .collect();
    replies.extend([
        // HTTP 200 with an answer quoting it.
        Reply::text(format!("Your key is {KEY}, isn't it?"), None),
        // HTTP 401 quoting it.
        Reply::status(
            401,
            format!(r#"{{"error":{{"message":"bad key {KEY}"}}}}"#),
            &[],
        ),
    ]);
    let llm = FakeLlm::start(replies);
    let mut env = env(&llm, "  message_store: builtin:jsonl-store\n", "");
    let cfg = fs::read_to_string(env.config_path()).unwrap();
    env.write_config(&cfg.replace("api_key_env: \"\"", "api_key_env: CTXHOST_TEST_KEY"));
    env.set_env("CTXHOST_TEST_KEY", KEY);
    let failed = submit(&env, "first");
    let mut log = run(&env);
    let answered = submit(&env, "second");
    log.push_str(&run(&env));
    let refused = submit(&env, "third");
    log.push_str(&run(&env));
    assert_eq!(
        llm.requests()[0].header("authorization"),
        Some(&*format!("Bearer {KEY}"))
    );

    let r = row(&env, &failed);
    assert_eq!(r["status"], "failed");
    let error = r["error_message"].as_str().unwrap();
    assert!(error.contains("[redacted]"), "{error}");
    let dir = find_task_dir(&env.contexts(), &failed).unwrap();
    let kept = fs::read_to_string(dir.join("response.json")).unwrap();
    assert!(
        kept.contains("Incorrect API key provided: [redacted]"),
        "{kept}"
    );

    assert_eq!(row(&env, &answered)["status"], "completed");
    let dir = find_task_dir(&env.contexts(), &answered).unwrap();
    let history = fs::read_to_string(dir.join("messages.jsonl")).unwrap();
    assert!(
        history.contains("Your key is [redacted], isn't it?"),
        "{history}"
    );

    let r = row(&env, &refused);
    assert_eq!(r["status"], "failed");
    assert!(r["error_message"].as_str().unwrap().contains("[redacted]"));

    assert_eq!(
        files_containing(&env.contexts(), KEY),
        Vec::<PathBuf>::new()
    );
    assert!(!log.contains(KEY), "the key is in the log");
}

// ---------------------------------------------------------------------------------------------
// 7. URL credentials

#[test]
fn url_credentials_are_never_printed() {
    let env = TestEnv::new();
    for url in [
        "https://user:s3cret-pw@api.example.com",
        "ftp://user:s3cret-pw@api.example.com",
        "https://user:s3cret-pw@api.example.com:99999",
    ] {
        env.write_config(&config_yaml(url, "openai", ""));
        let out = env.ctxhost(&["submit", "--prompt", "hi"]);
        assert_eq!(out.code(), Some(2), "{url}");
        let text = format!("{}{}", out.stdout(), out.stderr());
        assert!(!text.contains("s3cret-pw"), "{url}: {text}");
        assert!(text.contains("***@api.example.com"), "{url}: {text}");
    }
    // A transport built by a program, not from the config: its errors hide them too.
    let port = crate::support::unused_port();
    let mut cfg =
        ctxhost::llm::TransportConfig::new(format!("http://user:s3cret-pw@127.0.0.1:{port}"));
    cfg.max_retries = 0;
    assert!(!format!("{cfg:?}").contains("s3cret-pw"));
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("request.json"), "{}").unwrap();
    let dir = TaskDir::open(tmp.path()).unwrap();
    let err = ctxhost::llm::Transport::new(cfg)
        .post_file(
            "/v1/chat/completions",
            &dir,
            "request.json",
            "response.json",
        )
        .unwrap_err()
        .to_string();
    assert!(
        !err.contains("s3cret-pw") && err.contains("http://***@127.0.0.1"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// 8. Modes

/// Every entry under `dir` whose mode lets the group or others in, with its mode.
fn loose_entries(dir: &Path) -> Vec<(PathBuf, u32)> {
    let mut out = Vec::new();
    let mode = fs::symlink_metadata(dir).unwrap().permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        out.push((dir.to_path_buf(), mode));
    }
    for e in fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let m = fs::symlink_metadata(&p).unwrap();
        if m.is_dir() {
            out.extend(loose_entries(&p));
        } else if m.permissions().mode() & 0o077 != 0 {
            out.push((p, m.permissions().mode() & 0o777));
        }
    }
    out
}

fn fsck_kinds(env: &TestEnv, args: &[&str]) -> Vec<(String, String)> {
    let mut a = vec!["fsck", "--json"];
    a.extend_from_slice(args);
    let report = env.ctxhost(&a).json();
    let key = if args.contains(&"--repair") {
        "remaining"
    } else {
        "problems"
    };
    report[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["kind"].as_str().unwrap().to_string(),
                p["path"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn contexts_are_owner_only_and_fsck_tightens_what_is_not() {
    let llm = FakeLlm::start(vec![
        Reply::tool_calls(vec![("call_1", "t", "{}")], None),
        Reply::text("done", None),
    ]);
    let env = env(&llm, "  message_store: builtin:jsonl-store\n", "");
    let uuid = submit(&env, "go");
    run(&env);
    assert_eq!(row(&env, &uuid)["status"], "completed");
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    // Files of the host (metadata.json, tools.jsonl), of the components (messages.jsonl,
    // current.jsonl) and of SQLite (tasks.db, its WAL).
    for f in [
        "metadata.json",
        "tools.jsonl",
        "messages.jsonl",
        "current.jsonl",
    ] {
        assert!(dir.join(f).exists(), "{f}");
    }
    assert!(env.contexts().join("tasks.db").exists());
    assert_eq!(loose_entries(&env.contexts()), Vec::<(PathBuf, u32)>::new());
    assert_eq!(fsck_kinds(&env, &[]), Vec::<(String, String)>::new());

    // Loosened by hand, and a link planted: fsck names each, --repair fixes them.
    fs::set_permissions(
        dir.join("messages.jsonl"),
        fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(
        env.contexts().join("tasks.db"),
        fs::Permissions::from_mode(0o664),
    )
    .unwrap();
    symlink("../../../victim", dir.join("notes.txt")).unwrap();
    let found = fsck_kinds(&env, &[]);
    let loose: Vec<&str> = found
        .iter()
        .filter(|(k, _)| k == "loose-mode")
        .map(|(_, p)| p.as_str())
        .collect();
    for end in ["messages.jsonl", &uuid, "tasks.db"] {
        assert!(loose.iter().any(|p| p.ends_with(end)), "{end}: {found:?}");
    }
    // SQLite gives a WAL file it makes now the database file's (loosened) mode.
    assert!(
        loose.iter().all(|p| p.ends_with("messages.jsonl")
            || p.ends_with(uuid.as_str())
            || p.contains("tasks.db")),
        "{found:?}"
    );
    let links: Vec<&(String, String)> = found.iter().filter(|(k, _)| k == "symlink").collect();
    assert_eq!(links.len(), 1, "{found:?}");
    assert!(links[0].1.ends_with("notes.txt"));
    assert_eq!(
        fsck_kinds(&env, &["--repair"]),
        Vec::<(String, String)>::new()
    );
    assert_eq!(loose_entries(&env.contexts()), Vec::<(PathBuf, u32)>::new());
    assert!(links_below(&dir).is_empty());
    assert_victim_intact(&env);
}

// ---------------------------------------------------------------------------------------------
// 9. llm.max_request_mib

#[test]
fn a_request_over_max_request_mib_fails_clearly_and_is_not_sent() {
    let llm = FakeLlm::start(vec![]);
    let env = env(
        &llm,
        "  message_store: builtin:jsonl-store\n  compressor: none\n",
        "",
    );
    let cfg = fs::read_to_string(env.config_path()).unwrap();
    env.write_config(&cfg.replace(
        "  context_length: 8192\n",
        "  context_length: 8192000\n  max_request_mib: 1\n",
    ));
    // Under the 1 MiB prompt limit, twice that as JSON (every `"` escaped).
    let uuid = submit(&env, &"\"".repeat(1_000_000));
    run(&env);
    let r = row(&env, &uuid);
    assert_eq!(r["status"], "failed");
    let error = r["error_message"].as_str().unwrap();
    assert!(
        error.contains("request.json")
            && error.contains("over the limit of 1048576 bytes (llm.max_request_mib); not sent"),
        "{error}"
    );
    assert_eq!(llm.request_count(), 0);
    assert_eq!(r["llm_call_count"], 0);
}

/// A key shorter than 8 bytes (`x`, a local server's dummy) is a placeholder: `run` warns once
/// that it is too short to be protected, and text that happens to contain it is not mangled
/// (`max_retries` used to become `ma[redacted]_retries`, telling every reader the key).
#[test]
fn a_very_short_api_key_is_warned_about_and_does_not_mangle_text() {
    let answer = "Set llm.max_retries to 3 and exit.";
    let llm = FakeLlm::start(vec![Reply::text(answer, None)]);
    let mut env = env(&llm, "  message_store: builtin:jsonl-store\n", "");
    let cfg = fs::read_to_string(env.config_path()).unwrap();
    env.write_config(&cfg.replace("api_key_env: \"\"", "api_key_env: CTXHOST_TEST_KEY"));
    env.set_env("CTXHOST_TEST_KEY", "x");
    let uuid = submit(&env, "explain max_retries");
    let log = run(&env);
    assert_eq!(
        log.matches("too short to be protected").count(),
        1,
        "warned once at start:\n{log}"
    );
    assert!(log.contains("CTXHOST_TEST_KEY"), "{log}");
    assert_eq!(
        llm.requests()[0].header("authorization"),
        Some("Bearer x"),
        "the key is still sent"
    );
    let r = row(&env, &uuid);
    assert_eq!(r["status"], "completed", "{r}");
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    let history = fs::read_to_string(dir.join("messages.jsonl")).unwrap();
    assert!(history.contains(answer), "{history}");
    assert!(!history.contains("[redacted]"), "{history}");
    let shown = env.ctxhost(&["show", &uuid]).ok().stdout();
    assert!(shown.contains("max_retries"), "{shown}");

    // A key of 8 bytes is redacted as before, without the warning.
    let llm = FakeLlm::start(vec![Reply::text("your key: sk-12345", None)]);
    let mut env = crate::security::env(&llm, "  message_store: builtin:jsonl-store\n", "");
    let cfg = fs::read_to_string(env.config_path()).unwrap();
    env.write_config(&cfg.replace("api_key_env: \"\"", "api_key_env: CTXHOST_TEST_KEY"));
    env.set_env("CTXHOST_TEST_KEY", "sk-12345");
    let uuid = submit(&env, "echo the key");
    let log = run(&env);
    assert!(!log.contains("too short"), "{log}");
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    let history = fs::read_to_string(dir.join("messages.jsonl")).unwrap();
    assert!(history.contains("your key: [redacted]"), "{history}");
}

// ---------------------------------------------------------------------------------------------
// 10. What a message store appends, and what a format returns (issue 38 items 7 and 9)

/// Issue 38 item 7: made-up text instead of the reply, a torn line, a seq repeat and different
/// messages in messages.jsonl and current.jsonl all ended `completed`. Each fails the step now,
/// naming the store.
#[test]
fn a_store_appending_other_than_what_the_host_gave_fails_naming_it() {
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::text("the real answer", None));
    let env = env(
        &llm,
        &format!("  message_store: {}\n", guest("hostile_store.wasm")),
        "",
    );
    for (how, what) in [
        (
            "forge",
            "the appended message is not the one the host gave (content differ)",
        ),
        ("torn", "ends with a torn line"),
        ("repeat", "got 2 lines for one message"),
        ("split", "got different messages for seq 3 (content differ)"),
    ] {
        let uuid = submit(&env, &format!("HOSTILE tamper={how}\ngo"));
        run(&env);
        let r = row(&env, &uuid);
        assert_eq!(r["status"], "failed", "{how}: {r}");
        let error = r["error_message"].as_str().unwrap();
        assert!(
            error.contains("hostile_store.wasm: add-message") && error.contains(what),
            "{how}: {error}"
        );
    }
}

/// Issue 38 item 9: reasoning items with escape codes in `provider`, `kind` and `data` were
/// stored (and printed raw by the dashboard); 100 MB of them were accepted. Both are refused,
/// naming the format, and nothing of the reply is stored.
#[test]
fn a_formats_bad_or_oversized_reasoning_items_are_refused() {
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::text("done", None));
    let env = env(
        &llm,
        &format!("  request_format: {}\n", guest("hostile_format.wasm")),
        "",
    );
    for (how, what) in [
        (
            "bad",
            "reasoning item 0: `provider` `openai\\u{1b}[2J\\r\\nforged` is not a name",
        ),
        (
            "huge-mib:20",
            "its reasoning items hold more than 16777216 bytes",
        ),
    ] {
        let uuid = submit(&env, &format!("HOSTILE reasoning={how}\ngo"));
        run(&env);
        let r = row(&env, &uuid);
        assert_eq!(r["status"], "failed", "{how}: {r}");
        let error = r["error_message"].as_str().unwrap();
        assert!(
            error.contains("hostile_format.wasm") && error.contains(what),
            "{how}: {error}"
        );
        let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
        let history = fs::read_to_string(dir.join("messages.jsonl")).unwrap();
        assert!(!history.contains(r#""reasoning":"#), "{how}");
    }
}
