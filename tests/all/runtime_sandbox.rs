//! The sandbox holds against a hostile component (`guest-components/fixtures/hostile`, a
//! message store that misbehaves on purpose):
//! - `open` loops forever → a deadline error naming the component and the function;
//! - `current-token-count` allocates until it fails → a memory-limit error;
//! - `count-messages` panics → a trap error;
//! - `add-message` opens the path given as the message content and reports the OS error →
//!   `../x`, a symlink out of the task directory and `/etc/passwd` never reach the real files.
//!
//! After each failure the instance refuses further calls, the process carries on, and a fresh
//! instance works (`current-context-file`).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ctxhost::runtime::{
    LoadedPlugin, MessageStore, PluginKind, PluginSource, Runtime, RuntimeError, RuntimeLimits,
};
use ctxhost_format::ChatMessage;

const SECRET: &str = "top secret outside the sandbox";

struct Env {
    _tmp: tempfile::TempDir,
    task: PathBuf,
    outside: PathBuf,
    rt: Runtime,
    plugin: LoadedPlugin,
    name: String,
}

fn env(limits: RuntimeLimits) -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let task = tmp.path().join("task");
    let outside = tmp.path().join("outside");
    fs::create_dir(&task).unwrap();
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("secret.txt"), SECRET).unwrap();
    let rt = Runtime::new(&tmp.path().join("cache"), limits).unwrap();
    let wasm = Path::new(env!("CTXHOST_GUEST_DIR")).join("hostile.wasm");
    let plugin = rt
        .load(&PluginSource::Path(wasm.clone()), PluginKind::MessageStore)
        .unwrap();
    Env {
        _tmp: tmp,
        task,
        outside,
        rt,
        plugin,
        name: wasm.display().to_string(),
    }
}

fn limits(memory_mib: usize, timeout_ms: u64) -> RuntimeLimits {
    RuntimeLimits {
        memory_bytes: memory_mib * 1024 * 1024,
        call_timeout: Duration::from_millis(timeout_ms),
        ..RuntimeLimits::default()
    }
}

impl Env {
    fn instance(&self) -> MessageStore {
        self.rt.message_store(&self.plugin, &self.task).unwrap()
    }

    /// The poisoned instance refuses the next call, and a fresh one works.
    fn assert_recovers(&self, mut poisoned: MessageStore, failed_function: &str) {
        let err = poisoned.current_context_file().unwrap_err();
        assert!(matches!(err, RuntimeError::Poisoned { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "component {}: cannot call current-context-file",
                self.name
            )),
            "{text}"
        );
        assert!(
            text.contains(failed_function),
            "the refusal should say what failed before: {text}"
        );
        assert_eq!(
            self.instance().current_context_file().unwrap(),
            "current.jsonl"
        );
    }
}

#[test]
fn an_infinite_loop_hits_the_deadline() {
    let env = env(limits(64, 500));
    let mut store = env.instance();
    let started = Instant::now();
    let err = store.open().unwrap_err();
    let elapsed = started.elapsed();
    match &err {
        RuntimeError::Deadline {
            component,
            function,
            timeout,
        } => {
            assert_eq!(component, &env.name);
            assert_eq!(function, "open");
            assert_eq!(*timeout, Duration::from_millis(500));
        }
        other => panic!("expected a deadline error, got {other}"),
    }
    assert_eq!(
        err.to_string(),
        format!("component {}: open exceeded its 500 ms deadline", env.name)
    );
    assert!(
        elapsed >= Duration::from_millis(500),
        "stopped early, after {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_secs(20),
        "the deadline did not stop the loop in time ({elapsed:?})"
    );
    env.assert_recovers(store, "open exceeded");
}

#[test]
fn allocating_without_bound_hits_the_memory_limit() {
    let env = env(limits(32, 10_000));
    let mut store = env.instance();
    let err = store.current_token_count().unwrap_err();
    assert!(
        matches!(err, RuntimeError::MemoryLimit { limit_bytes, .. } if limit_bytes == 32 * 1024 * 1024),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "component {}: memory limit of 32 MiB reached in current-token-count",
            env.name
        )
    );
    env.assert_recovers(store, "memory limit");
}

#[test]
fn a_panic_is_a_trap_error() {
    let env = env(limits(64, 10_000));
    let mut store = env.instance();
    let err = store.count_messages().unwrap_err();
    match &err {
        RuntimeError::Trap {
            component,
            function,
            trap,
            ..
        } => {
            assert_eq!(component, &env.name);
            assert_eq!(function, "count-messages");
            assert!(trap.contains("unreachable"), "{trap}");
        }
        other => panic!("expected a trap, got {other}"),
    }
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("component {}: count-messages trapped: ", env.name)),
        "{text}"
    );
    // The component's stderr (its panic message) is captured and quoted, and the innermost
    // frame of its own code is named.
    assert!(text.contains("hostile panic"), "{text}");
    assert!(text.contains("count_messages"), "{text}");
    println!("{text}");
    env.assert_recovers(store, "count-messages trapped");
}

/// `add-message` with `path` as content: the hostile store opens `path` and answers
/// `Ok(seq 0, tokens = bytes read)` or `Err(io("<path>: <OS error>"))`.
fn try_open(env: &Env, path: &str) -> Result<u64, String> {
    let mut store = env.instance();
    // The probe appends nothing: the store's own answer, without the host's append check.
    let outcome = store
        .unchecked_probe()
        .add_message(&ChatMessage::text("user", path), "2026-01-02T03:04:05Z");
    // The process and the instance carry on either way.
    assert_eq!(store.current_context_file().unwrap(), "current.jsonl");
    match outcome {
        Ok(added) => Ok(added.tokens),
        Err(err) => {
            assert!(
                matches!(err, RuntimeError::Plugin { .. }),
                "{path}: expected the component's own error, got {err}"
            );
            let text = err.to_string();
            assert!(
                text.contains(&format!("add-message failed: io: {path}: ")),
                "{path}: {text}"
            );
            Err(text)
        }
    }
}

#[test]
fn files_inside_the_task_directory_can_be_opened() {
    // The control for the refusals below: the method does read files it may read.
    let env = env(limits(64, 10_000));
    fs::write(env.task.join("inside.txt"), "12345").unwrap();
    assert_eq!(try_open(&env, "inside.txt"), Ok(5));
    fs::create_dir(env.task.join("sub")).unwrap();
    assert_eq!(try_open(&env, "sub/../inside.txt"), Ok(5));
}

#[test]
fn parent_directory_paths_are_refused() {
    let env = env(limits(64, 10_000));
    fs::create_dir(env.task.join("sub")).unwrap();
    for path in [
        "../outside/secret.txt",
        "sub/../../outside/secret.txt",
        "..",
    ] {
        let err = try_open(&env, path).expect_err(path);
        println!("{path}: {err}");
    }
}

#[cfg(unix)]
#[test]
fn symlinks_out_of_the_task_directory_are_refused() {
    let env = env(limits(64, 10_000));
    std::os::unix::fs::symlink(env.outside.join("secret.txt"), env.task.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(&env.outside, env.task.join("linkdir")).unwrap();
    for path in ["link.txt", "linkdir/secret.txt"] {
        let err = try_open(&env, path).expect_err(path);
        println!("{path}: {err}");
    }
}

#[test]
fn absolute_paths_resolve_inside_the_task_directory() {
    let env = env(limits(64, 10_000));
    // For the component, /etc/passwd is <task>/etc/passwd, which does not exist.
    let err = try_open(&env, "/etc/passwd").expect_err("/etc/passwd");
    println!("/etc/passwd: {err}");
    let abs = env.outside.join("secret.txt");
    let err = try_open(&env, abs.to_str().unwrap()).expect_err("absolute path outside");
    println!("{}: {err}", abs.display());
    // And it is the task directory's own etc/passwd that it gets.
    fs::create_dir(env.task.join("etc")).unwrap();
    fs::write(env.task.join("etc").join("passwd"), "fake").unwrap();
    assert_eq!(try_open(&env, "/etc/passwd"), Ok(4));
}

/// An `LlmImport` that takes its time, like a real model.
struct SlowLlm(Duration);

impl ctxhost::runtime::LlmImport for SlowLlm {
    fn complete(
        &mut self,
        _messages_file: &str,
        _max: u32,
        _deadline: std::time::Instant,
    ) -> Result<ctxhost::runtime::Completion, String> {
        std::thread::sleep(self.0);
        Ok(ctxhost::runtime::Completion {
            message: ChatMessage::text("assistant", "short summary"),
            usage: None,
        })
    }
}

#[test]
fn time_in_the_llm_import_does_not_count_against_the_deadline() {
    let tmp = tempfile::tempdir().unwrap();
    let task = tmp.path().join("task");
    fs::create_dir(&task).unwrap();
    let mut lines = vec![serde_json::to_string(&ChatMessage::text("system", "sys")).unwrap()];
    for i in 0..12 {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        lines.push(
            serde_json::to_string(&ChatMessage::text(
                role,
                format!("message {i} {}", "words ".repeat(50)),
            ))
            .unwrap(),
        );
    }
    fs::write(task.join("current.jsonl"), lines.join("\n") + "\n").unwrap();

    let rt = Runtime::new(&tmp.path().join("cache"), limits(64, 300)).unwrap();
    let wasm = Path::new(env!("CTXHOST_GUEST_DIR")).join("tiny_summarizer.wasm");
    let plugin = rt
        .load(&PluginSource::Path(wasm), PluginKind::Compressor)
        .unwrap();
    let mut compressor = rt
        .compressor(
            &plugin,
            &task,
            Box::new(SlowLlm(Duration::from_millis(900))),
        )
        .unwrap();
    let config = ctxhost::runtime::CompressConfig {
        context_length: 4000,
        threshold: 0.5,
        keep_recent_messages: 2,
        keep_recent_tokens: 0,
        summary_prompt: "Summarize:\n{messages}".into(),
        reserve_output_tokens: 200,
    };
    let started = Instant::now();
    let result = compressor
        .compress(&config)
        .expect("the 900 ms LLM call is not the component's time");
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert_eq!(result.context_file, "compressed.jsonl");
    assert!(
        fs::read_to_string(task.join("compressed.jsonl"))
            .unwrap()
            .contains("short summary")
    );
}
