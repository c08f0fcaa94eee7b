//! The repository's shell scripts, run as a user runs them (with stand-ins for what they would
//! download or start).

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::repo_root;

/// The value of `NAME="..."` in `script`.
fn script_var(script: &str, name: &str) -> String {
    let prefix = format!("{name}=\"");
    let line = script
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {name} in the script"));
    line[prefix.len()..].trim_end_matches('"').to_string()
}

/// A stand-in for the xllamacpp package: its `Server` listens on the port but never answers and
/// ignores SIGTERM (as llama-server does while it loads a model); its pid is written on import.
const FAKE_XLLAMACPP: &str = r#"
import os, signal, socket, time
with open(os.environ["FAKE_SERVER_PID"], "w") as f:
    f.write(str(os.getpid()))
__version__ = "fake"
class _Fields:
    pass
class CommonParams:
    def __init__(self):
        self.model = _Fields()
        self.cpuparams = _Fields()
        self.cpuparams_batch = _Fields()
class Server:
    def __init__(self, params):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((params.hostnames[0], params.port))
        s.listen(16)
        while True:
            time.sleep(1)
"#;

/// A cache that `local-llm.sh` takes as fetched: the markers it checks, a one-byte model, and
/// the stand-in package.
fn fake_cache(cache: &Path, script: &str) {
    let model = script_var(script, "MODEL_FILE");
    std::fs::write(cache.join(&model), "x").unwrap();
    std::fs::write(
        cache.join(".fetched"),
        format!("{} 1", script_var(script, "MODEL_SHA256")),
    )
    .unwrap();
    let package = cache.join("server/xllamacpp");
    std::fs::create_dir_all(&package).unwrap();
    std::fs::write(package.join("__init__.py"), FAKE_XLLAMACPP).unwrap();
    std::fs::write(package.join("xllamacpp_fake.so"), "").unwrap();
    std::fs::write(
        cache.join("server/.fetched"),
        script_var(script, "SERVER_WHEEL_SHA256"),
    )
    .unwrap();
}

/// Whether process `pid` is gone (or a zombie no one reaped yet: it runs nothing).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Err(_) => true,
        Ok(status) => status
            .lines()
            .any(|l| l.starts_with("State:") && l.contains('Z')),
    }
}

#[test]
fn local_llm_start_stops_a_server_that_does_not_become_ready_in_the_time_given() {
    let path = repo_root().join("scripts/local-llm.sh");
    let script = std::fs::read_to_string(&path).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    std::fs::create_dir(&cache).unwrap();
    fake_cache(&cache, &script);
    let pid_file = tmp.path().join("fake.pid");
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();

    let started = Instant::now();
    let out = Command::new("bash")
        .arg(&path)
        .args(["start", &port.to_string()])
        .env("CTXHOST_LLM_CACHE", &cache)
        .env("CTXHOST_LLM_READY_SECS", "5")
        .env("FAKE_SERVER_PID", &pid_file)
        .output()
        .unwrap();
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "start fails: {stderr}");
    assert!(out.stdout.is_empty(), "no URL is printed");
    assert!(
        stderr.contains("did not answer /health within 5 s (CTXHOST_LLM_READY_SECS)"),
        "{stderr}"
    );
    // 5 s of waiting, 5 s of SIGTERM's grace, then SIGKILL: well below the default 60 s.
    assert!(took < Duration::from_secs(30), "took {took:?}");
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .expect("the stand-in server started within 5 s")
        .trim()
        .parse()
        .unwrap();
    assert!(gone(pid), "the server (pid {pid}) was stopped: {stderr}");
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "nothing listens on port {port} any more"
    );
    assert!(!cache.join("server.pid").exists());

    // A value that is not a number of seconds is refused before anything starts.
    let out = Command::new("bash")
        .arg(&path)
        .args(["start", &port.to_string()])
        .env("CTXHOST_LLM_CACHE", &cache)
        .env("CTXHOST_LLM_READY_SECS", "soon")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("CTXHOST_LLM_READY_SECS must be"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
