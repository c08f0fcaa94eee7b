//! Plugin authors' issue 44: a pause, stop or Ctrl-C reaches a component that is running
//! (epoch interruption: it is not left to run to its deadline), `plugin try` and `plugin
//! check` take their limits from `--config` as a task does, and what a component prints is
//! shown, each line marked with the component and the hook.
//!
//! The looping component is the `hostile-compressor` fixture with `HOSTILE spin-once=FILE`:
//! it prints a line to stdout and one to stderr, then spins (no I/O) unless FILE is in its
//! task directory, which it creates first, so a resumed task goes on.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::fake_llm::{FakeLlm, Reply};
use crate::support::{TestEnv, config_yaml, find_task_dir, wait_until};

fn guest(file: &str) -> String {
    Path::new(env!("CTXHOST_GUEST_DIR"))
        .join(file)
        .display()
        .to_string()
}

const SPIN_FILE: &str = "spun.txt";

/// A context whose prompt makes the hostile compressor spin.
fn spinning_context(path: &Path) {
    let lines = [
        serde_json::json!({"role": "system", "content": "You are a coding agent."}),
        serde_json::json!({"role": "user", "content": format!("HOSTILE spin-once={SPIN_FILE}\ngo")}),
        serde_json::json!({"role": "assistant", "content": "ok"}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path, text).unwrap();
}

#[test]
fn a_task_paused_during_a_looping_component_call_is_paused_at_once_and_resumes() {
    let llm = FakeLlm::start(vec![Reply::text("Done after the pause.", Some((20, 5)))]);
    let env = TestEnv::for_llm(
        &llm,
        &format!(
            "plugins:\n  compressor: {}\nruntime:\n  call_timeout_secs: 120\n",
            guest("hostile_compressor.wasm")
        ),
    );
    let uuid = env.submit(&format!("HOSTILE spin-once={SPIN_FILE}\ngo"));
    let mut worker = env
        .ctxhost_cmd(&["run", "--once", "--poll-ms", "20"])
        .spawn();
    // The compressor's should-compress spins once it created its file.
    assert!(
        wait_until(Duration::from_secs(60), || {
            find_task_dir(&env.contexts(), &uuid).is_some_and(|d| d.join(SPIN_FILE).is_file())
        }),
        "the compressor never started spinning"
    );
    std::thread::sleep(Duration::from_millis(300));
    let asked = Instant::now();
    env.ctxhost(&["pause", &uuid]).ok();
    assert!(
        wait_until(Duration::from_secs(60), || env.row(&uuid)["status"]
            == "paused"),
        "{}",
        env.row(&uuid)
    );
    let took = asked.elapsed();
    println!("paused {took:?} after `ctxhost pause`");
    assert!(
        took < Duration::from_secs(2),
        "the pause took {took:?} (the call's deadline is 120 s)"
    );
    let status = worker.wait().unwrap();
    let mut log = String::new();
    use std::io::Read;
    worker
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(status.success(), "{status}: {log}");
    assert_eq!(llm.request_count(), 0, "paused before the model call");
    assert!(log.contains("interrupted by pause after"), "{log}");
    // The component's stdout and stderr, at info level, with component and hook.
    for text in [
        "hostile-compressor: spinning",
        "hostile-compressor: spun.txt",
    ] {
        let line = log
            .lines()
            .find(|l| l.contains(text))
            .unwrap_or_else(|| panic!("no {text:?} in the task log:\n{log}"));
        assert!(line.contains("INFO"), "{line}");
        assert!(line.contains("hostile_compressor.wasm"), "{line}");
        assert!(line.contains("should-compress"), "{line}");
    }

    env.ctxhost(&["resume", &uuid]).ok();
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    let row = env.row(&uuid);
    assert_eq!(row["status"], "completed", "{row}");
    assert_eq!(llm.request_count(), 1);
}

/// `plugin try` of the spinning compressor, with `extra` arguments before `plugin`.
fn plugin_try_spinning(env: &TestEnv, global: &[&str]) -> crate::support::Cmd {
    spinning_context(&env.root().join("current.jsonl"));
    let wasm = guest("hostile_compressor.wasm");
    let mut args: Vec<&str> = global.to_vec();
    args.extend(["plugin", "try", &wasm, "--context", "current.jsonl"]);
    env.ctxhost_cmd(&args)
}

#[test]
fn ctrl_c_stops_plugin_try_of_a_looping_component_at_once_with_130() {
    let env = TestEnv::new();
    let mut child = plugin_try_spinning(&env, &[]).spawn();
    // Read its stderr as it comes: the component's first line says it spins.
    let stderr = child.stderr.take().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let seen = seen.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let mut s = seen.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        })
    };
    assert!(
        wait_until(Duration::from_secs(120), || seen
            .lock()
            .unwrap()
            .contains("hostile-compressor: spun.txt")),
        "plugin try did not start spinning: {}",
        seen.lock().unwrap()
    );
    std::thread::sleep(Duration::from_millis(300));
    let asked = Instant::now();
    // SAFETY: kill(2) with a valid signal number has no memory-safety preconditions.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) },
        0
    );
    let status = child.wait().unwrap();
    let took = asked.elapsed();
    reader.join().unwrap();
    let stderr = seen.lock().unwrap().clone();
    println!("plugin try ended {took:?} after Ctrl-C");
    assert_eq!(status.code(), Some(130), "{status}: {stderr}");
    assert!(took < Duration::from_secs(1), "took {took:?}: {stderr}");
    assert!(stderr.contains("compress interrupted by stop"), "{stderr}");
}

#[test]
fn plugin_try_and_check_take_the_limits_of_config_and_refuse_a_missing_one() {
    let env = TestEnv::new();
    // A `--config` that does not exist is refused as by every other command.
    for command in [
        vec![
            "--config",
            "nope.yaml",
            "plugin",
            "check",
            "builtin:jsonl-store",
        ],
        vec![
            "--config",
            "nope.yaml",
            "plugin",
            "try",
            "builtin:jsonl-store",
            "--context",
            "current.jsonl",
        ],
    ] {
        let out = env.ctxhost(&command);
        assert_eq!(out.code(), Some(2), "{command:?}: {}", out.stderr());
        assert!(out.stderr().contains("nope.yaml"), "{}", out.stderr());
    }
    // runtime.call_timeout_secs of the config bounds the call (30 s by default).
    std::fs::write(
        env.root().join("limits.yaml"),
        config_yaml(
            "http://127.0.0.1:9",
            "openai",
            "runtime:\n  call_timeout_secs: 1\n",
        ),
    )
    .unwrap();
    let started = Instant::now();
    let out = plugin_try_spinning(&env, &["--config", "limits.yaml"]).run();
    let took = started.elapsed();
    assert_eq!(out.code(), Some(1), "{}", out.stderr());
    assert!(
        out.stderr().contains("exceeded its 1 s deadline"),
        "{}",
        out.stderr()
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
    // What the component printed, marked with component and hook, in `plugin try`.
    let stderr = out.stderr();
    let line = stderr
        .lines()
        .find(|l| l.contains("hostile-compressor: spinning"))
        .unwrap_or_else(|| panic!("stdout of the component not shown:\n{stderr}"));
    assert!(
        line.contains("hostile_compressor.wasm") && line.contains("compress"),
        "{line}"
    );
}
