//! The built-in coding tools and their kernel sandbox (issue 39), end to end: the ctxhost binary
//! runs a task whose scripted model (the fake LLM) calls `read_file`, `write_file`,
//! `edit_file`, `list_files`, `search_files` and `shell` on a workspace. Enforcement is the
//! real kernel's (Landlock, namespaces, a pids cgroup, rlimits): the tests run as root, so file
//! permissions stop nothing and every refusal below is the sandbox's.

use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

use crate::support::fake_llm::{FakeLlm, Reply};
use crate::support::{TestEnv, config_yaml, read_jsonl};

/// Submit `prompt`, run it with `run --once`, return its uuid and row.
fn run_task(env: &TestEnv, prompt: &str) -> (String, Value) {
    let uuid = env.submit(prompt);
    let run = env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    let row = env.ctxhost(&["show", &uuid, "--json"]).ok().json()["task"].clone();
    let expected = if row["status"] == "failed" { 1 } else { 0 };
    assert_eq!(run.code(), Some(expected), "{row}\n{}", run.stderr());
    (uuid, row)
}

/// An environment whose config names `workspace` and adds `tools` keys.
fn env_with_workspace(llm: &FakeLlm, workspace: &Path, tools: &str) -> TestEnv {
    let env = TestEnv::new();
    env.write_config(&config_yaml(
        &llm.base_url(),
        "openai",
        &format!(
            "workspace: {:?}\ntools:\n{tools}",
            workspace.display().to_string()
        ),
    ));
    env.ctxhost(&["init"]).ok();
    env
}

/// A tools.jsonl line's text: its `result`, or its `error` for a failed call.
fn text_of(l: &Value) -> String {
    l["result"]
        .as_str()
        .or(l["error"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// Processes whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                found.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
            }
        }
    }
    found
}

#[test]
fn hostile_calls_are_refused_or_bounded_and_the_task_goes_on() {
    // The workspace is the test's root: config.yaml and contexts/ lie inside it, and must stay
    // out of reach all the same.
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "TOPSECRET-4711\n").unwrap();
    let o = outside.path().display().to_string();

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicUsize::new(0));
    let accept = {
        let (connections, stop) = (connections.clone(), stop.clone());
        std::thread::spawn(move || {
            while stop.load(Ordering::SeqCst) == 0 {
                if listener.accept().is_ok() {
                    connections.fetch_add(1, Ordering::SeqCst);
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        })
    };

    let call =
        |id: &str, name: &str, args: Value| (id.to_string(), name.to_string(), args.to_string());
    let calls = vec![
        call(
            "w_abs",
            "write_file",
            json!({"path": format!("{o}/pwned.txt"), "content": "x"}),
        ),
        call(
            "w_up",
            "write_file",
            json!({"path": "../pwned.txt", "content": "x"}),
        ),
        call(
            "links",
            "shell",
            json!({"command": format!(
            "ln -s {o}/secret.txt link; ln {o}/secret.txt hard; cat link; cat {o}/secret.txt; \
             echo pwned > {o}/w.txt; echo pwned > link; echo pwned > ../up.txt; cat config.yaml; ls contexts; cat link")}),
        ),
        call("r_link", "read_file", json!({"path": "link"})),
        call(
            "w_link",
            "write_file",
            json!({"path": "link", "content": "pwned"}),
        ),
        call(
            "r_abs",
            "read_file",
            json!({"path": format!("{o}/secret.txt")}),
        ),
        call(
            "r_up",
            "read_file",
            json!({"path": format!("../{}/secret.txt", outside.path().file_name().unwrap().to_string_lossy())}),
        ),
        call("r_db", "read_file", json!({"path": "contexts/tasks.db"})),
        call("r_cfg", "read_file", json!({"path": "config.yaml"})),
        call(
            "net",
            "shell",
            json!({"command": format!(
            "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=2)'")}),
        ),
        call(
            "bomb",
            "shell",
            json!({"command": "b() { b | b & }; b; sleep 3; echo bombed", "timeout_secs": 20}),
        ),
        call(
            "big",
            "shell",
            json!({"command": "head -c 2147483648 /dev/zero > big.bin"}),
        ),
        call(
            "term",
            "shell",
            json!({"command": "trap '' TERM; sleep 29991", "timeout_secs": 2}),
        ),
        call(
            "setsid",
            "shell",
            json!({"command": "setsid sleep 29992 & (setsid sh -c 'sleep 29993' &); echo started"}),
        ),
        call(
            "flood",
            "shell",
            json!({"command": "yes 0123456789abcdef | head -c 1000000000; echo end"}),
        ),
        call(
            "ok",
            "shell",
            json!({"command": "echo still-working > alive.txt && cat alive.txt"}),
        ),
    ];
    let n = calls.len();
    let llm = FakeLlm::start(vec![
        Reply::ToolCalls {
            calls,
            usage: Some((100, 20)),
        },
        Reply::text("I tried.", Some((200, 5))),
    ]);
    let env = TestEnv::new();
    env.write_config(&config_yaml(
        &llm.base_url(),
        "openai",
        &format!(
            "workspace: {:?}\ntools:\n  limits:\n    file_size_mib: 64\n    processes: 64\n",
            env.root().display().to_string()
        ),
    ));
    env.ctxhost(&["init"]).ok();
    let (uuid, row) = run_task(&env, "Try to break out.");
    stop.store(1, Ordering::SeqCst);
    accept.join().unwrap();

    assert_eq!(row["status"], "completed", "{row}");
    let dir = env.contexts().join("completed").join(&uuid);
    let tools = read_jsonl(&dir.join("tools.jsonl"));
    assert_eq!(tools.len(), n);
    let by_id = |id: &str| -> (String, String) {
        let l = tools
            .iter()
            .find(|l| l["tool_call_id"] == id)
            .unwrap_or_else(|| panic!("no call {id}"));
        (l["status"].as_str().unwrap().to_string(), text_of(l))
    };
    let all_results: String = tools.iter().map(text_of).collect();
    assert!(!all_results.contains("TOPSECRET"), "{all_results}");
    // Nothing was written outside the workspace.
    let outside_names: Vec<String> = std::fs::read_dir(outside.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(outside_names, ["secret.txt"]);
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        "TOPSECRET-4711\n"
    );
    assert!(!env.root().parent().unwrap().join("pwned.txt").exists());
    assert!(!env.root().parent().unwrap().join("up.txt").exists());

    for id in [
        "w_abs", "w_up", "r_link", "w_link", "r_abs", "r_up", "r_db", "r_cfg",
    ] {
        let (status, text) = by_id(id);
        assert_eq!(status, "error", "{id}: {text}");
    }
    assert!(
        by_id("w_abs").1.contains("outside the workspace"),
        "{:?}",
        by_id("w_abs")
    );
    assert!(
        by_id("r_db").1.contains("ctxhost's own"),
        "{:?}",
        by_id("r_db")
    );
    assert!(
        by_id("r_cfg").1.contains("ctxhost's own"),
        "{:?}",
        by_id("r_cfg")
    );
    let (status, text) = by_id("links");
    assert_eq!(status, "error", "{text}");
    assert!(text.contains("Permission denied"), "{text}");
    assert!(
        text.contains("Invalid cross-device link"),
        "hard link refused: {text}"
    );
    assert!(!text.contains("llm:"), "the config is hidden: {text}");
    // The listener saw nothing.
    let (status, text) = by_id("net");
    assert_eq!(status, "error", "{text}");
    assert_eq!(connections.load(Ordering::SeqCst), 0);
    // The fork bomb hit the process limit and ended; so did the 2 GiB file (64 MiB limit).
    let (_, text) = by_id("bomb");
    assert!(text.contains("fork") || text.contains("Resource"), "{text}");
    let big = env.root().join("big.bin");
    assert!(
        std::fs::metadata(&big).map_or(0, |m| m.len()) <= 64 * 1024 * 1024,
        "file size limit"
    );
    let (status, text) = by_id("big");
    assert_eq!(status, "error", "{text}");
    let (status, text) = by_id("term");
    assert_eq!(status, "error");
    assert!(text.contains("timed out after 2 s"), "{text}");
    let (status, text) = by_id("setsid");
    assert_eq!(status, "success", "{text}");
    // 1 GB of output: bounded in the context and on disk.
    let (_, text) = by_id("flood");
    assert!(text.len() < 100_000, "{}", text.len());
    let full: u64 = std::fs::read_dir(dir.join("tool-results"))
        .map(|d| d.flatten().map(|e| e.metadata().unwrap().len()).sum())
        .unwrap_or(0);
    assert!(full < 4 * 1024 * 1024, "tool-results/ holds {full} bytes");
    let (status, text) = by_id("ok");
    assert_eq!(status, "success", "the task goes on: {text}");
    assert!(text.contains("still-working"));
    // Nothing is left running.
    for needle in [
        "sleep 29991",
        "sleep 29992",
        "sleep 29993",
        "yes 0123456789abcdef",
    ] {
        assert_eq!(processes_with(needle), Vec::<String>::new(), "{needle}");
    }
}

#[test]
fn coding_round_trip_fixes_a_python_bug_and_the_diff_is_exactly_the_edit() {
    let ws = tempfile::tempdir().unwrap();
    let calc = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n";
    let test = "import unittest\nfrom calc import add, mul\n\n\nclass T(unittest.TestCase):\n    \
                def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n    \
                def test_mul(self):\n        self.assertEqual(mul(2, 3), 6)\n";
    std::fs::write(ws.path().join("calc.py"), calc).unwrap();
    std::fs::write(ws.path().join("test_calc.py"), test).unwrap();
    let before: Vec<(String, String)> = snapshot(ws.path());

    let c =
        |id: &str, name: &str, args: Value| (id.to_string(), name.to_string(), args.to_string());
    let llm = FakeLlm::start(vec![
        Reply::ToolCalls {
            calls: vec![
                c("l", "list_files", json!({"glob": "*.py"})),
                c(
                    "s",
                    "search_files",
                    json!({"pattern": "return a - b", "literal": true}),
                ),
                c("r", "read_file", json!({"path": "calc.py"})),
            ],
            usage: Some((100, 10)),
        },
        Reply::ToolCalls {
            calls: vec![c(
                "e",
                "edit_file",
                json!({"path": "calc.py", "old_string": "return a - b", "new_string": "return a + b"}),
            )],
            usage: Some((150, 10)),
        },
        Reply::ToolCalls {
            calls: vec![c(
                "t",
                "shell",
                json!({"command": "python3 -B -m unittest 2>&1"}),
            )],
            usage: Some((200, 10)),
        },
        Reply::text("Fixed add(): it subtracted.", Some((250, 5))),
    ]);
    let env = env_with_workspace(&llm, ws.path(), "  builtin: true\n");
    let (uuid, row) = run_task(&env, "Fix the failing test.");
    assert_eq!(row["status"], "completed", "{row}");
    let tools = read_jsonl(
        &env.contexts()
            .join("completed")
            .join(&uuid)
            .join("tools.jsonl"),
    );
    let result = |i: usize| tools[i]["result"].as_str().unwrap().to_string();
    assert!(tools.iter().all(|l| l["status"] == "success"), "{tools:?}");
    assert_eq!(result(0), "calc.py\ntest_calc.py");
    assert_eq!(result(1), "calc.py:2:    return a - b\n");
    assert!(
        result(2).starts_with("     1\tdef add(a, b):\n     2\t    return a - b\n"),
        "{}",
        result(2)
    );
    assert_eq!(result(3), "replaced 1 occurrence(s) in calc.py");
    assert!(
        result(4).contains("Ran 2 tests") && result(4).contains("\nOK\n"),
        "{}",
        result(4)
    );
    // The offered tools carry the issue's names.
    let offered: Vec<String> = llm.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    for name in [
        "read_file",
        "list_files",
        "search_files",
        "write_file",
        "edit_file",
        "shell",
    ] {
        assert!(offered.iter().any(|o| o == name), "{offered:?}");
    }
    // metadata.json records the workspace (valid against its schema: fsck), `show` prints it.
    let fsck = env.ctxhost(&["fsck", "--json"]);
    assert_eq!(fsck.code(), Some(0), "{}", fsck.stdout());
    let shown = env.ctxhost(&["show", &uuid]).ok().stdout();
    let canonical = ws.path().display().to_string();
    assert!(
        shown.contains(&format!("workspace:     {canonical}")),
        "{shown}"
    );
    // The diff is exactly the edit.
    let after = snapshot(ws.path());
    let expected: Vec<(String, String)> = before
        .into_iter()
        .map(|(n, t)| {
            let t = if n == "calc.py" {
                t.replace("return a - b", "return a + b")
            } else {
                t
            };
            (n, t)
        })
        .collect();
    assert_eq!(after, expected);
}

/// Every file of `dir` (names sorted) with its text.
fn snapshot(dir: &Path) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read_to_string(e.path()).unwrap_or_default(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn edit_file_names_zero_and_several_matches_and_unknown_arguments() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "x = 1\ny = 1\nx = 1\n").unwrap();
    let c = |id: &str, args: Value| (id.to_string(), "edit_file".to_string(), args.to_string());
    let llm = FakeLlm::start(vec![
        Reply::ToolCalls {
            calls: vec![
                c(
                    "none",
                    json!({"path": "a.txt", "old_string": "z = 1", "new_string": "z = 2"}),
                ),
                c(
                    "two",
                    json!({"path": "a.txt", "old_string": "x = 1", "new_string": "x = 2"}),
                ),
                c(
                    "all",
                    json!({"path": "a.txt", "old_string": "x = 1", "new_string": "x = 2", "replace_all": true}),
                ),
                c(
                    "extra",
                    json!({"path": "a.txt", "old_string": "y = 1", "new_string": "y = 9", "task_id": "other"}),
                ),
            ],
            usage: Some((100, 10)),
        },
        Reply::text("ok", Some((100, 1))),
    ]);
    let env = env_with_workspace(&llm, ws.path(), "  builtin: true\n");
    let (uuid, _) = run_task(&env, "edit");
    let tools = read_jsonl(
        &env.contexts()
            .join("completed")
            .join(&uuid)
            .join("tools.jsonl"),
    );
    assert_eq!(tools[0]["status"], "error");
    assert_eq!(
        text_of(&tools[0]),
        "Error: edit_file: `old_string` was not found in a.txt"
    );
    assert_eq!(tools[1]["status"], "error");
    assert_eq!(
        text_of(&tools[1]),
        "Error: edit_file: `old_string` occurs 2 times in a.txt (lines 1, 3): add surrounding lines to make it unique, or set replace_all: true"
    );
    assert_eq!(tools[2]["result"], "replaced 2 occurrence(s) in a.txt");
    // An argument the tool does not take is refused naming it, and nothing is done (issue 38 item 11).
    assert_eq!(tools[3]["status"], "error");
    assert!(
        text_of(&tools[3]).contains("unknown argument `task_id`"),
        "{}",
        text_of(&tools[3])
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "x = 2\ny = 1\nx = 2\n"
    );
}

#[test]
fn a_pause_ends_a_running_shell_at_once_with_everything_it_started() {
    let ws = tempfile::tempdir().unwrap();
    let llm = FakeLlm::start(vec![
        Reply::ToolCalls {
            calls: vec![(
                "slow".into(),
                "shell".into(),
                json!({"command": "setsid sleep 29997 & sleep 29998", "timeout_secs": 600})
                    .to_string(),
            )],
            usage: Some((100, 10)),
        },
        Reply::text("unused", Some((100, 1))),
    ]);
    let env = env_with_workspace(&llm, ws.path(), "  builtin: true\n");
    let uuid = env.submit("sleep");
    let mut run = env
        .ctxhost_cmd(&["run", "--once", "--poll-ms", "20"])
        .spawn();
    let started = std::time::Instant::now();
    while processes_with("sleep 29998").is_empty() {
        assert!(started.elapsed().as_secs() < 60, "the shell never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let asked = std::time::Instant::now();
    env.ctxhost(&["pause", &uuid]).ok();
    let status = run.wait().unwrap();
    let took = asked.elapsed();
    assert!(status.success(), "{status:?}");
    // At once: the quarter-second poll plus the 2 s grace, not the 600 s timeout.
    assert!(took.as_secs() < 15, "{took:?}");
    let row = env.ctxhost(&["show", &uuid, "--json"]).ok().json()["task"].clone();
    assert_eq!(row["status"], "paused", "{row}");
    let tools = read_jsonl(
        &env.contexts()
            .join("paused")
            .join(&uuid)
            .join("tools.jsonl"),
    );
    assert_eq!(tools[0]["status"], "error");
    let text = text_of(&tools[0]);
    assert!(text.contains("interrupted by pause/stop after"), "{text}");
    assert_eq!(processes_with("sleep 2999"), Vec::<String>::new());
}

#[test]
fn submit_workspace_is_stored_with_the_queued_task_and_its_tools_work_there() {
    let c =
        |id: &str, name: &str, args: Value| (id.to_string(), name.to_string(), args.to_string());
    let llm = FakeLlm::start(vec![
        Reply::ToolCalls {
            calls: vec![c("r", "read_file", json!({"path": "notes.txt"}))],
            usage: Some((100, 10)),
        },
        Reply::text("The notes say WS-NOTE-5521.", Some((150, 5))),
    ]);
    // The config names no workspace: the task's own is the only one.
    let env = TestEnv::new();
    env.write_config(&config_yaml(
        &llm.base_url(),
        "openai",
        "tools:\n  builtin: true\n",
    ));
    env.ctxhost(&["init"]).ok();
    let ws = env.root().join("proj");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("notes.txt"), "WS-NOTE-5521\n").unwrap();

    // A directory that is not there is refused before anything is queued (usage: exit 2).
    let missing = env.ctxhost(&["submit", "--prompt", "x", "--workspace", "nowhere"]);
    assert_eq!(missing.code(), Some(2), "{}", missing.stderr());
    let expected = format!("--workspace {}", env.root().join("nowhere").display());
    assert!(missing.stderr().contains(&expected), "{}", missing.stderr());
    let file = env.ctxhost(&["submit", "--prompt", "x", "--workspace", "proj/notes.txt"]);
    assert_eq!(file.code(), Some(2), "{}", file.stderr());
    assert!(
        file.stderr().contains("not a directory"),
        "{}",
        file.stderr()
    );
    let tasks = env.ctxhost(&["tasks", "--json"]).ok().stdout();
    assert!(!tasks.contains("\"x\""), "{tasks}");

    // Relative to the current directory, made absolute at submit.
    let submitted = env.ctxhost(&[
        "submit",
        "--prompt",
        "What do the notes say?",
        "--workspace",
        "proj",
        "--json",
    ]);
    let row = submitted.ok().json();
    let abs = ws.display().to_string();
    assert_eq!(row["workspace"], abs.as_str(), "{row}");
    let uuid = row["uuid"].as_str().unwrap().to_string();
    let run = env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    assert_eq!(env.row(&uuid)["status"], "completed");
    let tools = read_jsonl(
        &env.contexts()
            .join("completed")
            .join(&uuid)
            .join("tools.jsonl"),
    );
    assert_eq!(tools.len(), 1, "{tools:?}");
    assert_eq!(tools[0]["status"], "success", "{tools:?}");
    assert!(text_of(&tools[0]).contains("WS-NOTE-5521"), "{tools:?}");
    // The model was given the file's text with the tool result.
    let second = llm.requests()[1].body.to_string();
    assert!(second.contains("WS-NOTE-5521"), "{second}");
    let shown = env.ctxhost(&["show", &uuid]).ok().stdout();
    assert!(shown.contains(&format!("workspace:     {abs}")), "{shown}");
    assert!(shown.contains("WS-NOTE-5521"), "{shown}");
}

#[test]
fn a_sandboxed_mcp_server_writes_only_the_workspace_and_its_own_paths() {
    let ws = tempfile::tempdir().unwrap();
    let own = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "TOPSECRET-9931\n").unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/all/support/fixtures");
    let fixtures = fixtures.canonicalize().unwrap();
    let (w, o, x) = (
        ws.path().display(),
        own.path().display(),
        outside.path().display(),
    );
    let c = |id: &str, args: Value| (id.to_string(), "fs_probe".to_string(), args.to_string());
    let env = TestEnv::new();
    let tasks_db = env.contexts().join("tasks.db");
    let llm = FakeLlm::start(vec![
        Reply::ToolCalls {
            calls: vec![
                c(
                    "w_out",
                    json!({"op": "write", "path": format!("{x}/pwned.txt"), "text": "x"}),
                ),
                c(
                    "r_out",
                    json!({"op": "read", "path": format!("{x}/secret.txt")}),
                ),
                c(
                    "w_ws",
                    json!({"op": "write", "path": format!("{w}/made.txt"), "text": "inside"}),
                ),
                c(
                    "w_own",
                    json!({"op": "write", "path": format!("{o}/own.txt"), "text": "mine"}),
                ),
                c(
                    "r_ws",
                    json!({"op": "read", "path": format!("{w}/made.txt")}),
                ),
                c(
                    "r_ctx",
                    json!({"op": "read", "path": tasks_db.display().to_string()}),
                ),
            ],
            usage: Some((100, 10)),
        },
        Reply::text("Probed.", Some((150, 5))),
    ]);
    env.write_config(&config_yaml(
        &llm.base_url(),
        "openai",
        &format!(
            "workspace: {w:?}\ntools:\n  read_paths: [{:?}]\nmcp_servers:\n  probe:\n    command: python3\n    \
             args: [{:?}]\n    sandbox: true\n    write_paths: [{o:?}]\n",
            fixtures.display().to_string(),
            fixtures.join("mcp_fs_probe.py").display().to_string(),
            w = w.to_string(),
            o = o.to_string(),
        ),
    ));
    env.ctxhost(&["init"]).ok();
    let uuid = env.submit("Probe the file system.");
    let run = env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let tools = read_jsonl(
        &env.contexts()
            .join("completed")
            .join(&uuid)
            .join("tools.jsonl"),
    );
    let results: Vec<String> = tools.iter().map(text_of).collect();
    assert_eq!(results.len(), 6, "{results:?}");
    assert!(results[0].starts_with("refused:"), "{results:?}");
    assert!(
        results[1].starts_with("refused:") && !results[1].contains("TOPSECRET"),
        "{results:?}"
    );
    assert!(results[2].starts_with("ok: wrote"), "{results:?}");
    assert!(results[3].starts_with("ok: wrote"), "{results:?}");
    assert_eq!(results[4], "ok: inside", "{results:?}");
    // Nor contexts/ (the task's own tree, the database).
    assert!(results[5].starts_with("refused:"), "{results:?}");
    assert!(!outside.path().join("pwned.txt").exists());
    assert_eq!(
        std::fs::read_to_string(ws.path().join("made.txt")).unwrap(),
        "inside"
    );
    assert_eq!(
        std::fs::read_to_string(own.path().join("own.txt")).unwrap(),
        "mine"
    );
}

/// `submit --workspace` resolves links before it checks, then refuses `/`, the system's own
/// directories, homes that are not a project, and ctxhost's own contexts/ (usage: exit 2,
/// nothing queued); a project reached through a link is stored resolved.
#[test]
fn submit_workspace_resolves_links_then_refuses_the_root_and_system_directories() {
    let env = TestEnv::new();
    env.write_config(&config_yaml(
        "http://127.0.0.1:9",
        "openai",
        "tools:\n  builtin: true\n",
    ));
    env.ctxhost(&["init"]).ok();
    std::os::unix::fs::symlink("/", env.root().join("to-root")).unwrap();
    std::os::unix::fs::symlink("/etc", env.root().join("to-etc")).unwrap();
    for (dir, says) in [
        ("to-root", "is the root directory"),
        ("to-etc", "system directory /etc"),
        ("/etc", "system directory /etc"),
        ("/usr/lib", "system directory /usr"),
        ("/var", "system directory /var"),
        ("/root", "home"),
        ("/tmp", "use a project directory beneath it"),
        ("contexts", "inside ctxhost's own"),
    ] {
        let out = env.ctxhost(&["submit", "--prompt", "x", "--workspace", dir]);
        assert_eq!(out.code(), Some(2), "{dir}: {}", out.stderr());
        assert!(
            out.stderr().contains(&format!("--workspace {dir}: ")) && out.stderr().contains(says),
            "{dir}: {}",
            out.stderr()
        );
    }
    let tasks = env.ctxhost(&["tasks", "--json"]).ok().stdout();
    assert!(!tasks.contains("\"x\""), "{tasks}");
    // A project directory through a link: allowed, stored as the directory it leads to.
    let proj = env.root().join("proj");
    std::fs::create_dir(&proj).unwrap();
    std::os::unix::fs::symlink(&proj, env.root().join("to-proj")).unwrap();
    let row = env
        .ctxhost(&[
            "submit",
            "--prompt",
            "y",
            "--workspace",
            "to-proj",
            "--json",
        ])
        .ok()
        .json();
    let canonical = proj.canonicalize().unwrap().display().to_string();
    assert_eq!(row["workspace"], canonical.as_str(), "{row}");
}

/// The same rule when the task runs: a config `workspace:` that is a link to /etc fails the
/// task before any tool is offered, naming the rule.
#[test]
fn a_configured_workspace_linking_to_a_system_directory_fails_the_task_when_it_runs() {
    let llm = FakeLlm::start(vec![Reply::text("done", Some((10, 1)))]);
    let links = tempfile::tempdir().unwrap();
    let link = links.path().join("ws");
    std::os::unix::fs::symlink("/etc", &link).unwrap();
    let env = env_with_workspace(&llm, &link, "  builtin: true\n");
    let (_, row) = run_task(&env, "hi");
    assert_eq!(row["status"], "failed", "{row}");
    let error = row["error_message"].as_str().unwrap_or_default();
    assert!(error.contains("system directory /etc"), "{row}");
}

/// `show` of a queued task prints the workspace `submit --workspace` stored with it (there is
/// no metadata.json yet), as text and JSON.
#[test]
fn show_prints_the_workspace_of_a_queued_task() {
    let env = TestEnv::new();
    env.write_config(&config_yaml(
        "http://127.0.0.1:9",
        "openai",
        "tools:\n  builtin: true\n",
    ));
    env.ctxhost(&["init"]).ok();
    let proj = env.root().join("proj");
    std::fs::create_dir(&proj).unwrap();
    let row = env
        .ctxhost(&["submit", "--prompt", "y", "--workspace", "proj", "--json"])
        .ok()
        .json();
    let uuid = row["uuid"].as_str().unwrap();
    let ws = row["workspace"].as_str().unwrap().to_string();
    let shown = env.ctxhost(&["show", uuid]).ok().stdout();
    assert!(shown.contains(&format!("workspace:     {ws}\n")), "{shown}");
    let json = env.ctxhost(&["show", uuid, "--json"]).ok().json();
    assert_eq!(json["workspace"], ws.as_str(), "{json}");
}

/// A model that calls a tool that does not exist, in a task with only the built-in tools, is
/// told which tools there are (not that none are configured).
#[test]
fn an_unknown_tool_is_answered_with_the_tools_there_are() {
    let ws = tempfile::tempdir().unwrap();
    let llm = FakeLlm::start(vec![
        Reply::ToolCalls {
            calls: vec![(
                "u".to_string(),
                "read_text_file".to_string(),
                json!({"path": "a"}).to_string(),
            )],
            usage: Some((100, 10)),
        },
        Reply::text("ok", Some((150, 5))),
    ]);
    let env = env_with_workspace(&llm, ws.path(), "  builtin: true\n");
    let (uuid, row) = run_task(&env, "read a");
    assert_eq!(row["status"], "completed", "{row}");
    let tools = read_jsonl(
        &env.contexts()
            .join("completed")
            .join(&uuid)
            .join("tools.jsonl"),
    );
    let text = text_of(&tools[0]);
    assert!(text.contains("read_text_file"), "{text}");
    assert!(!text.contains("no tools are configured"), "{text}");
    for name in [
        "read_file",
        "list_files",
        "search_files",
        "write_file",
        "edit_file",
        "shell",
    ] {
        assert!(text.contains(name), "{name} missing from {text}");
    }
}

/// `ask` works on the current directory: one the workspace rule refuses (here /tmp itself) is
/// refused before anything is queued (exit 2), saying why.
#[test]
fn ask_in_a_refused_directory_is_refused_before_anything_is_queued() {
    let env = TestEnv::new();
    env.write_config(&config_yaml(
        "http://127.0.0.1:9",
        "openai",
        "tools:\n  builtin: true\n",
    ));
    env.ctxhost(&["init"]).ok();
    let config = env.root().join("config.yaml").display().to_string();
    let contexts = env.contexts().display().to_string();
    let mut c = env.ctxhost_cmd(&["--config", &config, "--contexts", &contexts, "ask", "hi"]);
    c.cmd.current_dir("/tmp");
    let out = c.cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the workspace /tmp holds other users'")
            && stderr.contains("ask works on the current directory"),
        "{stderr}"
    );
    let tasks = env.ctxhost(&["tasks", "--json"]).ok().stdout();
    assert!(!tasks.contains("\"hi\""), "{tasks}");
}
