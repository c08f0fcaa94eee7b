//! The `ctxhost` command line without an LLM: init, submit, tasks, show, stats, exit codes and
//! error messages. Each test runs the real binary in its own temporary directory.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_ctxhost");

struct Sandbox {
    dir: tempfile::TempDir,
    /// The test's database when it runs on PostgreSQL: its config.yaml names it.
    pg: Option<crate::support::store::PgDb>,
}

impl Sandbox {
    fn new() -> Sandbox {
        let sb = Sandbox {
            dir: tempfile::tempdir().unwrap(),
            pg: crate::support::store::postgres().then(crate::support::store::PgDb::create),
        };
        if sb.pg.is_some() {
            sb.write(
                "config.yaml",
                &format!(
                    "task_store:\n  url_env: {}\n",
                    crate::support::store::URL_ENV
                ),
            );
        }
        sb
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn contexts(&self) -> PathBuf {
        self.path().join("contexts")
    }

    /// Run ctxhost in the sandbox (its cwd, so ./config.yaml and ./contexts are the sandbox's).
    fn run(&self, args: &[&str]) -> Output {
        self.run_with_stdin(args, None)
    }

    fn run_with_stdin(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut child = Command::new(BIN)
            .args(args)
            .current_dir(self.path())
            .env_remove("RUST_LOG")
            .env("USER", "tester")
            .envs(
                self.pg
                    .iter()
                    .map(|db| (crate::support::store::URL_ENV, db.url.as_str())),
            )
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if let Some(text) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
        }
        child.wait_with_output().unwrap()
    }

    /// Run and expect exit code 0; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "ctxhost {args:?} failed:\n{}",
            describe(&out)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let text = self.ok(args);
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("ctxhost {args:?}: not JSON ({e}):\n{text}"))
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.path().join(name), text).unwrap();
    }
}

fn describe(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn init_creates_the_tree_database_and_a_config_it_keeps() {
    let sb = Sandbox::new();
    let out = sb.ok(&["init"]);
    assert!(out.contains("written"), "{out}");
    for d in ["running", "paused", "completed", ".cache"] {
        assert!(sb.contexts().join(d).is_dir(), "{d} missing");
    }
    assert!(sb.contexts().join("tasks.db").is_file());
    let config = std::fs::read_to_string(sb.path().join("config.yaml")).unwrap();
    assert!(config.contains("compression_threshold: 0.7"), "{config}");
    assert!(config.contains("{messages}"));

    // A second init keeps the (edited) config.
    sb.write("config.yaml", "llm:\n  model: my-model\n");
    let out = sb.ok(&["init"]);
    assert!(out.contains("kept"), "{out}");
    assert_eq!(
        std::fs::read_to_string(sb.path().join("config.yaml")).unwrap(),
        "llm:\n  model: my-model\n"
    );
}

#[test]
fn submit_then_list_show_and_stats_as_json() {
    let sb = Sandbox::new();
    sb.ok(&["init"]);
    let uuid = sb
        .ok(&["submit", "--prompt", "Explain main.rs"])
        .trim()
        .to_string();
    assert_eq!(uuid.len(), 36, "{uuid}");
    let uuid2 = sb.json(&[
        "submit",
        "--prompt",
        "Fix it",
        "--source",
        "github",
        "--owner",
        "acme",
        "--repo",
        "app",
        "--type",
        "pull_request",
        "--id",
        "42",
        "--user",
        "bob",
        "--json",
    ])["uuid"]
        .as_str()
        .unwrap()
        .to_string();

    let tasks = sb.json(&["tasks", "--json"]);
    let tasks = tasks.as_array().unwrap();
    assert_eq!(tasks.len(), 2);
    // Newest first.
    assert_eq!(tasks[0]["uuid"], uuid2.as_str());
    assert_eq!(tasks[0]["task_source"], "github");
    assert_eq!(tasks[0]["owner"], "acme");
    assert_eq!(tasks[0]["repo"], "app");
    assert_eq!(tasks[0]["task_type"], "pull_request");
    assert_eq!(tasks[0]["task_id"], "42");
    assert_eq!(tasks[0]["user"], "bob");
    assert_eq!(tasks[1]["uuid"], uuid.as_str());
    assert_eq!(tasks[1]["status"], "queued");
    assert_eq!(tasks[1]["task_source"], "local");
    assert_eq!(tasks[1]["user"], "tester");
    assert_eq!(tasks[1]["prompt"], "Explain main.rs");
    assert_eq!(tasks[1]["model"], "gpt-4o-mini");
    assert_eq!(tasks[1]["llm_call_count"], 0);

    let bob = sb.json(&["tasks", "--json", "--user", "bob"]);
    assert_eq!(bob.as_array().unwrap().len(), 1);
    let limited = sb.json(&["tasks", "--json", "--limit", "1"]);
    assert_eq!(limited.as_array().unwrap().len(), 1);
    let none = sb.json(&["tasks", "--json", "--status", "completed"]);
    assert_eq!(none.as_array().unwrap().len(), 0);

    let table = sb.ok(&["tasks"]);
    assert!(
        table.contains(&uuid) && table.contains("queued") && table.contains("github acme/app"),
        "{table}"
    );

    let show = sb.json(&["show", &uuid, "--json"]);
    assert_eq!(show["task"]["uuid"], uuid.as_str());
    assert_eq!(show["task"]["status"], "queued");
    assert_eq!(show["dir"], Value::Null);
    assert_eq!(show["result"], Value::Null);
    // Upper-case input names the same task.
    let show_upper = sb.json(&["show", &uuid.to_uppercase(), "--json"]);
    assert_eq!(show_upper["task"]["uuid"], uuid.as_str());
    let text = sb.ok(&["show", &uuid]);
    assert!(text.contains("status:        queued"), "{text}");

    let stats = sb.json(&["stats", "--json"]);
    assert_eq!(stats["by_status"]["queued"], 2);
    assert_eq!(stats["by_status"]["completed"], 0);
    assert_eq!(stats["total"]["tasks"], 2);
    assert_eq!(stats["by_model"][0]["model"], "gpt-4o-mini");
    assert_eq!(stats["by_model"][0]["tasks"], 2);
    let text = sb.ok(&["stats"]);
    assert!(
        text.contains("tasks: 2") && text.contains("gpt-4o-mini"),
        "{text}"
    );
}

#[test]
fn submit_reads_a_prompt_file_and_stdin() {
    let sb = Sandbox::new();
    sb.write("task.md", "Line one\n\nLine two — ünïcödé 上下文\n");
    let uuid = sb
        .ok(&["submit", "--prompt-file", "task.md"])
        .trim()
        .to_string();
    let show = sb.json(&["show", &uuid, "--json"]);
    assert_eq!(
        show["task"]["prompt"],
        "Line one\n\nLine two — ünïcödé 上下文\n"
    );

    let out = sb.run_with_stdin(&["submit", "--prompt-file", "-"], Some("from stdin"));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let uuid = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert_eq!(
        sb.json(&["show", &uuid, "--json"])["task"]["prompt"],
        "from stdin"
    );

    let out = sb.run(&["submit", "--prompt-file", "missing.md"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(stderr(&out).contains("missing.md"), "{}", stderr(&out));
}

#[test]
fn submit_rejects_bad_input_with_usage_errors() {
    let sb = Sandbox::new();
    for (args, needle) in [
        (vec!["submit"], "--prompt"),
        (vec!["submit", "--prompt", "  "], "empty"),
        (
            vec!["submit", "--prompt", "x", "--source", "github"],
            "--owner and --repo",
        ),
        (vec!["submit", "--prompt", "x", "--source", "svn"], "svn"),
        (vec!["submit", "--prompt", "x", "--type", "bug"], "bug"),
        (
            vec!["submit", "--prompt", "a", "--prompt-file", "b"],
            "cannot be used with",
        ),
    ] {
        let out = sb.run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn bad_config_value_names_the_key_and_exits_2() {
    let sb = Sandbox::new();
    sb.write("config.yaml", "llm:\n  context_length: 12\n");
    let out = sb.run(&["submit", "--prompt", "x"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("config.yaml: llm.context_length: must be at least 256, got 12"),
        "{}",
        stderr(&out)
    );
    // Nothing was created.
    assert!(!sb.contexts().exists());

    sb.write(
        "config.yaml",
        "context_storage:\n  compression_threshold: 1.5\n",
    );
    let out = sb.run(&["init"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("context_storage.compression_threshold"),
        "{}",
        stderr(&out)
    );

    sb.write("config.yaml", "llm:\n  modle: gpt\n");
    let out = sb.run(&["tasks"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("modle"), "{}", stderr(&out));

    sb.write("other.yaml", "llm:\n  provider: gemini\n");
    let out = sb.run(&["--config", "other.yaml", "tasks"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("other.yaml") && err.contains("llm.provider") && err.contains("gemini"),
        "{err}"
    );

    sb.write("config.yaml", "llm: [1, 2\n");
    let out = sb.run(&["tasks"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("config.yaml"), "{}", stderr(&out));
}

#[test]
fn unknown_and_invalid_uuids_are_usage_errors() {
    let sb = Sandbox::new();
    sb.ok(&["init"]);
    let out = sb.run(&["show", "0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("no task with UUID 0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b"),
        "{}",
        stderr(&out)
    );

    // The start of a UUID is a prefix (tests/all/uuid_prefix.rs): here, of no task.
    let out = sb.run(&["show", "0193a4b2"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("no task with UUID prefix 0193a4b2"),
        "{}",
        stderr(&out)
    );

    for bad in [
        "../../etc/passwd",
        "running",
        "0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b/..",
    ] {
        let out = sb.run(&["show", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", describe(&out));
        assert!(
            stderr(&out).contains("is not a task UUID"),
            "{bad}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn contexts_flag_overrides_the_config_and_read_commands_need_the_tree() {
    let sb = Sandbox::new();
    let out = sb.run(&["tasks"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("ctxhost init"), "{}", stderr(&out));
    assert!(
        !sb.contexts().exists(),
        "a read-only command created the tree"
    );

    sb.write(
        "config.yaml",
        "context_storage:\n  base_dir: ./from-config\n",
    );
    sb.ok(&["submit", "--prompt", "a"]);
    assert!(sb.path().join("from-config/tasks.db").is_file());
    sb.ok(&["--contexts", "elsewhere", "submit", "--prompt", "b"]);
    assert!(sb.path().join("elsewhere/tasks.db").is_file());
    assert_eq!(sb.json(&["tasks", "--json"]).as_array().unwrap().len(), 1);
    assert_eq!(
        sb.json(&["--contexts", "elsewhere", "tasks", "--json"])[0]["prompt"],
        "b"
    );
}

#[test]
fn help_lists_examples_and_bad_flags_exit_2() {
    let sb = Sandbox::new();
    let help = sb.ok(&["--help"]);
    assert!(
        help.contains("Examples:") && help.contains("ctxhost submit"),
        "{help}"
    );
    assert!(help.contains("Exit codes"), "{help}");
    assert!(
        !help.contains("task-exec"),
        "the internal subcommand is hidden"
    );
    let out = sb.run(&["tasks", "--status", "done"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("unknown status"), "{}", stderr(&out));
    let out = sb.run(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn an_explicit_config_must_exist_but_init_writes_it() {
    let sb = Sandbox::new();
    // The default ./config.yaml may be missing; a --config PATH may not.
    let out = sb.run(&["--config", "nope.yaml", "tasks"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("nope.yaml") && err.contains("not found"),
        "{err}"
    );
    let out = sb.run(&["--config", "nope.yaml", "submit", "--prompt", "x"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(!sb.contexts().exists(), "nothing is created");

    // init writes the named file, and then it is used.
    let out = sb.ok(&["--config", "conf/my.yaml", "init"]);
    assert!(out.contains("conf/my.yaml (written)"), "{out}");
    assert!(sb.path().join("conf/my.yaml").is_file());
    sb.ok(&["--config", "conf/my.yaml", "submit", "--prompt", "x"]);
    assert_eq!(
        sb.json(&["--config", "conf/my.yaml", "tasks", "--json"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn a_base_url_with_the_endpoint_path_is_a_config_error() {
    let sb = Sandbox::new();
    sb.write(
        "config.yaml",
        "llm:\n  provider: lmstudio\n  base_url: http://127.0.0.1:1234/v1/chat/completions\n",
    );
    let out = sb.run(&["submit", "--prompt", "x"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("llm.base_url")
            && err.contains("base URL only")
            && err.contains("http://127.0.0.1:1234`"),
        "{err}"
    );
}

#[test]
fn tasks_limit_0_is_rejected() {
    let sb = Sandbox::new();
    sb.ok(&["init"]);
    let out = sb.run(&["tasks", "--limit", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("--limit must be at least 1"),
        "{}",
        stderr(&out)
    );
    let help = sb.ok(&["tasks", "--help"]);
    assert!(help.contains("at least 1"), "{help}");
    sb.ok(&["submit", "--prompt", "a"]);
    sb.ok(&["submit", "--prompt", "b"]);
    let rows = sb.json(&["tasks", "--limit", "1", "--json"]);
    assert_eq!(rows.as_array().unwrap().len(), 1);
}

#[test]
fn show_reports_a_line_of_invalid_utf8_as_unreadable() {
    let sb = Sandbox::new();
    sb.ok(&["init"]);
    let uuid = sb.ok(&["submit", "--prompt", "x"]).trim().to_string();
    let dir = sb.contexts().join("paused").join(&uuid);
    std::fs::create_dir_all(&dir).unwrap();
    let mut bytes =
        br#"{"seq":1,"timestamp":"2026-01-01T00:00:00Z","role":"user","content":"hi","tokens":1}"#
            .to_vec();
    bytes.extend_from_slice(b"\n{\"seq\":2,\"content\":\"\xff\xfe bad\"}\n");
    bytes.extend_from_slice(
        br#"{"seq":3,"timestamp":"2026-01-01T00:00:01Z","role":"assistant","content":"done","tokens":1}"#,
    );
    bytes.push(b'\n');
    std::fs::write(dir.join("messages.jsonl"), bytes).unwrap();

    let text = sb.ok(&["show", &uuid]);
    assert!(text.contains("line 2: unreadable: not UTF-8"), "{text}");
    assert!(text.contains("done"), "{text}");
    let json = sb.json(&["show", &uuid, "--json"]);
    let last = json["last_messages"].as_array().unwrap();
    assert_eq!(last.len(), 3, "{json}");
    assert_eq!(last[1]["line"], 2, "{json}");
    assert!(
        last[1]["error"].as_str().unwrap().contains("UTF-8"),
        "{json}"
    );
    assert_eq!(last[2]["content"], "done", "{json}");
}

/// A symbolic link in place of messages.jsonl (pointing out of the task directory) is not
/// followed, and `show` still shows the task: the link is reported where the messages would be.
#[test]
fn show_reports_a_linked_history_and_still_shows_the_task() {
    let sb = Sandbox::new();
    sb.ok(&["init"]);
    let uuid = sb.ok(&["submit", "--prompt", "x"]).trim().to_string();
    let dir = sb.contexts().join("paused").join(&uuid);
    std::fs::create_dir_all(&dir).unwrap();
    let outside = sb.path().join("outside.txt");
    std::fs::write(&outside, "OUTSIDE-SECRET\n").unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("messages.jsonl")).unwrap();

    let text = sb.ok(&["show", &uuid]);
    assert!(text.contains(&format!("uuid:          {uuid}")), "{text}");
    assert!(
        text.contains("last messages: unreadable: ") && text.contains("symbolic link"),
        "{text}"
    );
    assert!(!text.contains("OUTSIDE-SECRET"), "{text}");
    let json = sb.json(&["show", &uuid, "--json"]);
    assert_eq!(json["last_messages"].as_array().unwrap().len(), 0, "{json}");
    assert!(
        json["messages_error"]
            .as_str()
            .unwrap()
            .contains("messages.jsonl is a symbolic link"),
        "{json}"
    );

    // The task directory itself a link to a directory outside contexts/: not followed either.
    std::fs::remove_file(dir.join("messages.jsonl")).unwrap();
    let elsewhere = sb.path().join("elsewhere");
    std::fs::rename(&dir, &elsewhere).unwrap();
    std::fs::write(elsewhere.join("messages.jsonl"), "OUTSIDE-SECRET\n").unwrap();
    std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
    let text = sb.ok(&["show", &uuid]);
    assert!(
        text.contains("last messages: unreadable: cannot open ")
            && text.contains("is a symbolic link, not a task directory"),
        "{text}"
    );
    assert!(!text.contains("OUTSIDE-SECRET"), "{text}");
}

/// What the model, a tool or a forge wrote reaches the terminal with its escape sequences and
/// other control characters escaped (`show`'s messages and result, `tasks`' prompt column).
#[test]
fn show_and_tasks_escape_control_characters_of_untrusted_text() {
    let sb = Sandbox::new();
    sb.ok(&["init"]);
    let uuid = sb
        .ok(&["submit", "--prompt", "fix \u{1b}]0;owned\u{7} it"])
        .trim()
        .to_string();
    let dir = sb.contexts().join("paused").join(&uuid);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("messages.jsonl"),
        concat!(
            r#"{"seq":1,"timestamp":"2026-01-01T00:00:00Z","role":"user","content":"hi","tokens":1}"#,
            "\n",
            r#"{"seq":2,"timestamp":"2026-01-01T00:00:01Z","role":"assistant","content":"\u001b[2J\u001b[31mred\u0000 \u202e","tokens":1}"#,
            "\n"
        ),
    )
    .unwrap();
    for args in [vec!["show", uuid.as_str()], vec!["tasks"]] {
        let text = sb.ok(&args);
        assert!(
            !text.contains('\u{1b}') && !text.contains('\0') && !text.contains('\u{202e}'),
            "{args:?}: {text:?}"
        );
    }
    let show = sb.ok(&["show", &uuid]);
    assert!(
        show.contains("\\u{1b}[2J\\u{1b}[31mred\\u{0} \\u{202e}"),
        "{show}"
    );
    assert!(sb.ok(&["tasks"]).contains("fix \\u{1b}]0;owned\\u{7} it"));
}

/// A summary line of the history is shown as the summary it is, not as a reply of the model
/// (the demo's 0.5B model wrote a wrong port into its summary, which read as a second answer).
#[test]
fn show_marks_summary_lines_of_the_history() {
    let sb = Sandbox::new();
    sb.ok(&["init"]);
    let uuid = sb.ok(&["submit", "--prompt", "x"]).trim().to_string();
    let dir = sb.contexts().join("paused").join(&uuid);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("messages.jsonl"),
        concat!(
            r#"{"seq":1,"timestamp":"2026-01-01T00:00:00Z","role":"user","content":"hi","tokens":1}"#,
            "\n",
            r#"{"seq":2,"timestamp":"2026-01-01T00:00:01Z","role":"assistant","content":"They said hi.","tokens":3,"summary_id":1}"#,
            "\n",
            r#"{"seq":3,"timestamp":"2026-01-01T00:00:02Z","role":"assistant","content":"Hello.","tokens":2}"#,
            "\n"
        ),
    )
    .unwrap();
    let text = sb.ok(&["show", &uuid]);
    assert!(
        text.contains("  #2    summary   [summary 1] They said hi.\n"),
        "{text}"
    );
    assert!(text.contains("  #3    assistant Hello.\n"), "{text}");
}

#[test]
fn run_checks_plugins_and_the_api_key_before_touching_any_task() {
    let sb = Sandbox::new();
    sb.write(
        "config.yaml",
        "llm:\n  api_key_env: CTXHOST_TEST_SURELY_UNSET_KEY\n",
    );
    sb.ok(&["init"]);
    let uuid = sb.ok(&["submit", "--prompt", "x"]).trim().to_string();
    let out = sb.run(&["run", "--once", "--poll-ms", "20"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("llm.api_key_env") && err.contains("CTXHOST_TEST_SURELY_UNSET_KEY"),
        "{err}"
    );
    assert_eq!(
        sb.json(&["show", &uuid, "--json"])["task"]["status"],
        "queued"
    );

    sb.write(
        "config.yaml",
        "llm:\n  api_key_env: \"\"\nplugins:\n  message_store: ./missing-store.wasm\n",
    );
    let out = sb.run(&["run", "--once", "--poll-ms", "20"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("plugins.message_store") && err.contains("missing-store.wasm"),
        "{err}"
    );
    let row = &sb.json(&["show", &uuid, "--json"])["task"];
    assert_eq!(row["status"], "queued", "{row}");
    assert!(row["process_id"].is_null(), "{row}");
}

// The tests above that touch the task store, once more on PostgreSQL.
crate::support::store::postgres_variants!(
    submit_then_list_show_and_stats_as_json,
    submit_reads_a_prompt_file_and_stdin,
    unknown_and_invalid_uuids_are_usage_errors,
    show_reports_a_line_of_invalid_utf8_as_unreadable,
    run_checks_plugins_and_the_api_key_before_touching_any_task,
);

/// `run` and `init` check where the contexts directory goes before creating anything: a
/// `base_dir` whose parent is missing is a usage error naming the directory and the config
/// file (nothing is created, not even the parent), and `run` with an unset API key creates no
/// tree. A `base_dir` whose parent exists is created as before.
#[test]
fn run_and_init_create_no_tree_before_the_config_is_checked() {
    let sb = Sandbox::new();
    let missing = sb.path().join("missing");
    let base = missing.join("x");
    sb.write(
        "bad.yaml",
        &format!(
            "context_storage:\n  base_dir: {}\nllm:\n  api_key_env: \"\"\n",
            base.display()
        ),
    );
    for cmd in [&["run", "--once"][..], &["init"]] {
        let mut args = vec!["--config", "bad.yaml"];
        args.extend_from_slice(cmd);
        let out = sb.run(&args);
        assert_eq!(out.status.code(), Some(2), "{cmd:?}: {}", describe(&out));
        let e = stderr(&out);
        assert!(
            e.contains("context_storage.base_dir in bad.yaml")
                && e.contains(&format!(
                    "cannot create the contexts directory {}",
                    base.display()
                ))
                && e.contains(&format!(
                    "its parent directory {} does not exist",
                    missing.display()
                )),
            "{cmd:?}: {e}"
        );
        assert!(!missing.exists(), "{cmd:?} created {}", missing.display());
    }
    // The same through --contexts.
    let out = sb.run(&["run", "--once", "--contexts", base.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("--contexts: cannot create"),
        "{}",
        stderr(&out)
    );
    assert!(!missing.exists());

    // The parent exists, but the API key variable is unset: refused before the tree is made.
    let fresh = sb.path().join("fresh");
    sb.write(
        "nokey.yaml",
        &format!(
            "context_storage:\n  base_dir: {}\nllm:\n  api_key_env: CTXHOST_UNSET_KEY_FOR_TEST\n",
            fresh.display()
        ),
    );
    let out = sb.run(&["--config", "nokey.yaml", "run", "--once"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("CTXHOST_UNSET_KEY_FOR_TEST"),
        "{}",
        stderr(&out)
    );
    assert!(!fresh.exists(), "the tree was created before the preflight");

    // A base_dir whose parent exists is created by init (and by run).
    sb.write(
        "good.yaml",
        &format!("context_storage:\n  base_dir: {}\n", fresh.display()),
    );
    sb.ok(&["--config", "good.yaml", "init"]);
    assert!(fresh.join("tasks.db").is_file());
}

/// A plugin that does not load at `run` is reported with the config file it comes from, as the
/// file's other errors are, and before the contexts tree is created.
#[test]
fn a_plugin_load_error_names_the_config_file() {
    let sb = Sandbox::new();
    sb.write(
        "bad.yaml",
        "context_storage:\n  base_dir: ./ctx\nllm:\n  api_key_env: \"\"\nplugins:\n  message_store: ./nope.wasm\n",
    );
    let out = sb.run(&["--config", "bad.yaml", "run", "--once"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let e = stderr(&out);
    assert!(
        e.contains("error: bad.yaml: plugins.message_store (`./nope.wasm`) cannot be loaded"),
        "{e}"
    );
    assert!(!sb.path().join("ctx").exists());
}

/// A forge task's owner, repo and id become paths of the forge's API, called with its token:
/// `submit` refuses what is not a forge name (`../..`, a space, `a/b` for GitHub) or number.
#[test]
fn submit_refuses_forge_keys_that_are_not_names() {
    let env = crate::support::TestEnv::new();
    env.write_config(&crate::support::config_yaml(
        "http://127.0.0.1:9",
        "openai",
        "",
    ));
    env.ctxhost(&["init"]).ok();
    for (owner, repo, id) in [
        ("../..", "app", "7"),
        ("acme", "a b", "7"),
        ("acme/sub", "app", "7"),
        ("acme", "app", "7/../../x"),
    ] {
        let out = env
            .ctxhost(&[
                "submit", "x", "--source", "github", "--owner", owner, "--repo", repo, "--type",
                "issue", "--id", id,
            ])
            .fails();
        assert_eq!(out.code(), Some(2), "{owner} {repo} {id}");
        assert!(
            out.stderr().contains("is not a github name") || out.stderr().contains("number"),
            "{}",
            out.stderr()
        );
    }
    env.ctxhost(&[
        "submit",
        "x",
        "--source",
        "gitlab",
        "--owner",
        "group/sub",
        "--repo",
        "app",
        "--type",
        "issue",
        "--id",
        "7",
    ])
    .ok();
}
