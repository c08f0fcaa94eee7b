//! A stop stops everything a tool started (issue 38, items 1–2): an MCP server whose tool runs
//! `sleep 300 & python3 -m http.server PORT & wait` and a `setsid` child
//! (support/fixtures/mcp_spawner.py) is interrupted by a pause, a stop, SIGTERM and Ctrl-C of
//! `ask`: the task gives way at once (not at the tool's timeout), the call is recorded as
//! "interrupted by pause/stop after N s", the server got `notifications/cancelled`, and
//! afterwards nothing of the server's process group runs (`pgrep -g`), the `setsid` child is
//! gone and the port is free.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::fake_llm::{FakeLlm, Reply};
use crate::support::{TestEnv, find_task_dir, wait_until};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/all/support/fixtures/mcp_spawner.py")
}

/// A port nothing listens on (bound and released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn port_is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// The spawner server's state directory, the fake LLM (a `spawn` call, then an answer) and the
/// environment with the server configured (tool calls time out after 120 s).
struct Setup {
    state: tempfile::TempDir,
    port: u16,
    llm: FakeLlm,
    env: TestEnv,
}

fn setup() -> Setup {
    let state = tempfile::tempdir().unwrap();
    let port = free_port();
    let args = json!({ "port": port }).to_string();
    let llm = FakeLlm::start(vec![
        Reply::tool_calls(vec![("call_1", "spawn", &args)], Some((50, 10))),
        Reply::text("Done after the interruption.", Some((80, 5))),
    ]);
    let extra = format!(
        "mcp_servers:\n  spawner:\n    command: python3\n    args: [{:?}]\n    env:\n      SPAWNER_STATE: {:?}\ntools:\n  call_timeout_secs: 120\n",
        fixture().display().to_string(),
        state.path().display().to_string()
    );
    let env = TestEnv::for_llm(&llm, &extra);
    Setup {
        state,
        port,
        llm,
        env,
    }
}

impl Setup {
    /// Wait until the tool's processes run (the setsid child wrote its pid, the port is taken);
    /// the server's process group and the setsid child's pid.
    fn wait_for_the_tool(&self) -> (u32, u32) {
        let setsid = self.state.path().join("setsid.pid");
        assert!(
            wait_until(Duration::from_secs(30), || setsid.is_file()
                && !port_is_free(self.port)),
            "the tool's processes did not start (LLM requests: {})",
            self.llm.request_count()
        );
        let server: Value = serde_json::from_str(
            &std::fs::read_to_string(self.state.path().join("server.json")).unwrap(),
        )
        .unwrap();
        let pgid = server["pgid"].as_u64().unwrap() as u32;
        assert_eq!(
            server["pid"], server["pgid"],
            "the server leads a process group of its own"
        );
        assert_ne!(
            pgid,
            // SAFETY: getpgrp has no preconditions.
            unsafe { libc::getpgrp() } as u32,
            "not the test's group"
        );
        let setsid_pid: u32 = std::fs::read_to_string(&setsid)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(!group_members(pgid).is_empty(), "the group runs");
        (pgid, setsid_pid)
    }

    /// Nothing of the group runs, the setsid child is gone, the port is free; the server got
    /// notifications/cancelled.
    fn assert_all_stopped(&self, pgid: u32, setsid_pid: u32) {
        assert!(
            wait_until(Duration::from_secs(5), || group_members(pgid).is_empty()),
            "pgrep -g {pgid}: {:?}",
            group_members(pgid)
        );
        assert!(
            wait_until(Duration::from_secs(5), || !running(setsid_pid)),
            "the setsid child {setsid_pid} still runs"
        );
        assert!(
            wait_until(Duration::from_secs(5), || port_is_free(self.port)),
            "port {} still taken",
            self.port
        );
        let notes = std::fs::read_to_string(self.state.path().join("notifications.jsonl")).unwrap();
        assert!(
            notes.contains("notifications/cancelled"),
            "no notifications/cancelled: {notes}"
        );
    }

    /// The text of the recorded tool call (tools.jsonl of the task).
    fn recorded_call(&self, uuid: &str) -> String {
        let dir = find_task_dir(&self.env.contexts(), uuid).unwrap();
        std::fs::read_to_string(dir.join("tools.jsonl")).unwrap()
    }
}

/// `pgrep -g PGID`: the pids of the group's processes.
fn group_members(pgid: u32) -> Vec<String> {
    let out = std::process::Command::new("pgrep")
        .args(["-g", &pgid.to_string()])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Whether `pid` runs (exists and is not a zombie).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        let state = s[s.rfind(')').unwrap() + 1..].split_whitespace().next();
        state != Some("Z")
    })
}

fn wait_for_status(env: &TestEnv, uuid: &str, status: &str) -> Duration {
    let started = Instant::now();
    assert!(
        wait_until(Duration::from_secs(30), || env.row(uuid)["status"]
            == status),
        "task {uuid} is not {status}: {}",
        env.row(uuid)
    );
    started.elapsed()
}

#[test]
fn a_pause_interrupts_a_running_tool_call_at_once_and_stops_all_its_processes() {
    let s = setup();
    let uuid = s.env.submit("Start the servers");
    let mut worker = s
        .env
        .ctxhost_cmd(&["run", "--once", "--poll-ms", "20"])
        .spawn();
    let (pgid, setsid_pid) = s.wait_for_the_tool();
    let asked = Instant::now();
    s.env.ctxhost(&["pause", &uuid]).ok();
    let paused = wait_for_status(&s.env, &uuid, "paused");
    let took = asked.elapsed();
    println!("paused {took:?} after `ctxhost pause` ({paused:?} after it returned)");
    assert!(
        took < Duration::from_secs(3),
        "the pause took {took:?} (the tool call's timeout is 120 s)"
    );
    assert!(worker.wait().unwrap().success());
    s.assert_all_stopped(pgid, setsid_pid);
    let recorded = s.recorded_call(&uuid);
    assert!(
        recorded.contains("interrupted by pause after"),
        "{recorded}"
    );
    assert!(!recorded.contains("cancelled"), "{recorded}");

    // The task resumes and completes.
    s.env.ctxhost(&["resume", &uuid]).ok();
    s.env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    assert_eq!(s.env.row(&uuid)["status"], "completed");
    assert_eq!(s.llm.request_count(), 2);
}

#[test]
fn a_stop_interrupts_a_running_tool_call_and_stops_all_its_processes() {
    let s = setup();
    let uuid = s.env.submit("Start the servers");
    let mut worker = s
        .env
        .ctxhost_cmd(&["run", "--once", "--poll-ms", "20"])
        .spawn();
    let (pgid, setsid_pid) = s.wait_for_the_tool();
    let asked = Instant::now();
    s.env.ctxhost(&["stop", &uuid]).ok();
    wait_for_status(&s.env, &uuid, "stopped");
    let took = asked.elapsed();
    assert!(took < Duration::from_secs(3), "the stop took {took:?}");
    assert!(worker.wait().unwrap().success());
    s.assert_all_stopped(pgid, setsid_pid);
    assert!(
        s.recorded_call(&uuid).contains("interrupted by stop after"),
        "{}",
        s.recorded_call(&uuid)
    );
}

/// `ask` gets `signal` while its task's tool call runs: the task pauses, `ask` exits 130, the
/// tool's processes are gone.
fn ask_interrupted_by(signal: libc::c_int) {
    let s = setup();
    let mut ask = s
        .env
        .ctxhost_cmd(&["ask", "--json", "Start the servers"])
        .spawn();
    let (pgid, setsid_pid) = s.wait_for_the_tool();
    let asked = Instant::now();
    // SAFETY: kill(2) with a valid signal number has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(ask.id() as libc::pid_t, signal) }, 0);
    let status = ask.wait().unwrap();
    let took = asked.elapsed();
    let mut stdout = String::new();
    use std::io::Read;
    ask.stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{status}: {stdout}");
    assert!(took < Duration::from_secs(4), "ask took {took:?} to end");
    let end: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(end["status"], "paused", "{stdout}");
    s.assert_all_stopped(pgid, setsid_pid);
    let uuid = end["uuid"].as_str().unwrap();
    assert!(
        s.recorded_call(uuid).contains("interrupted by pause after"),
        "{}",
        s.recorded_call(uuid)
    );
}

#[test]
fn ctrl_c_of_ask_during_a_tool_call_pauses_at_once_stops_the_tools_processes_and_exits_130() {
    ask_interrupted_by(libc::SIGINT);
}

#[test]
fn sigterm_of_ask_during_a_tool_call_pauses_at_once_and_stops_the_tools_processes() {
    ask_interrupted_by(libc::SIGTERM);
}

/// At a tool call's timeout what the call started is stopped (the background `sleep`, the HTTP
/// server, the `setsid` child), and the server itself goes on answering.
#[test]
fn a_timed_out_call_stops_what_it_started_and_the_server_goes_on() {
    use ctxhost::tools::{CallOutcome, McpServerConfig, ToolRegistry, ToolsConfig};
    use std::collections::BTreeMap;

    let state = tempfile::tempdir().unwrap();
    let port = free_port();
    let servers = BTreeMap::from([(
        "spawner".to_string(),
        McpServerConfig {
            command: "python3".into(),
            args: vec![fixture().display().to_string()],
            env: BTreeMap::from([(
                "SPAWNER_STATE".to_string(),
                state.path().display().to_string(),
            )]),
            cwd: None,
            ..Default::default()
        },
    )]);
    let config = ToolsConfig {
        max_tool_output_tokens: 4000,
        call_timeout_secs: 3,
        start_timeout_secs: 30,
        ..Default::default()
    };
    let mut registry = ToolRegistry::start(&servers, &config, &Default::default()).unwrap();
    let args = json!({ "port": port }).to_string();
    let outcome = registry.call("spawn", &args).unwrap();
    let CallOutcome::Error(text) = outcome else {
        panic!("{outcome:?}")
    };
    assert!(
        text.contains("did not answer within 3 s")
            && text.contains("the processes the server started were stopped"),
        "{text}"
    );
    let server: Value =
        serde_json::from_str(&std::fs::read_to_string(state.path().join("server.json")).unwrap())
            .unwrap();
    let pgid = server["pgid"].as_u64().unwrap() as u32;
    let setsid_pid: u32 = std::fs::read_to_string(state.path().join("setsid.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || !running(setsid_pid)
            && port_is_free(port)),
        "setsid child running: {}, port free: {}",
        running(setsid_pid),
        port_is_free(port)
    );
    // (The server reaps the shell it ran once that shell's children are gone.)
    assert!(
        wait_until(Duration::from_secs(5), || group_members(pgid)
            == vec![pgid.to_string()]),
        "only the server is left in its group: {:?}",
        group_members(pgid)
    );
    // The server goes on: a second call times out the same way (an error result, where a dead
    // server would be an `Err`).
    let again = registry.call("spawn", r#"{"port": 1}"#).unwrap();
    assert!(again.is_error(), "{again:?}");
    registry.close();
    assert!(
        wait_until(Duration::from_secs(5), || group_members(pgid).is_empty()),
        "{:?}",
        group_members(pgid)
    );
}
