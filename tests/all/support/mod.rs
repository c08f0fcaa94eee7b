//! Shared fixtures of the integration tests (`tests/all/`, one test binary).
//!
//! - [`fake_llm`]: a fake OpenAI/Ollama/Anthropic server on 127.0.0.1 with scripted replies;
//!   [`anthropic_api`]: its Anthropic side (the API's checks, prompt-cache accounting);
//!   [`api_schema`]: the APIs' official request schemas every request is validated against.
//! - [`fake_forge`]: a fake GitHub and a fake GitLab REST API on 127.0.0.1 (issues, pull/merge
//!   requests, comments, labels, pagination, rate limits), recording every call.
//! - [`fake_s3`]: a fake S3 (PUT/GET/HEAD/DELETE/list) that honours or ignores each
//!   conditional write, and can throttle (`503 SlowDown`) or refuse for clock skew.
//! - [`git_http`]: a real git remote over smart HTTP (Debian's `git-http-backend` as CGI) that
//!   requires a token in `Authorization: Basic` and records every request.
//! - [`hosts`]: the multi-host harness (workers as separate hosts, the two-step fake LLM, a
//!   queue filled through the library).
//! - [`http`]: the HTTP/1.1 plumbing both fakes share (accepting connections, reading a request,
//!   writing a response).
//! - [`TestEnv`]: a temporary working directory with a `config.yaml` and a `contexts/` dir, and
//!   [`TestEnv::ctxhost`] to run the `ctxhost` binary in it and capture its output.
//! - [`task::TaskBuilder`]: a task put in a given state through the library (no process).
//! - [`store`]: the task store a test runs on (SQLite, or PostgreSQL for the variants
//!   [`store::postgres_variants!`] adds).
//! - [`components`]: builtin components instantiated in process on one shared runtime, and the
//!   golden inputs.
//! - [`read_jsonl`], [`read_lines`], [`find_task_dir`], [`wait_until`]: inspecting what ctxhost
//!   wrote.
//!
//! ```ignore
//! use crate::support::{TestEnv, fake_llm::{FakeLlm, Reply}};
//!
//! let llm = FakeLlm::start(vec![Reply::text("hi", Some((12, 3)))]);
//! let env = TestEnv::new().with_llm(&llm.base_url());
//! env.ctxhost(&["init"]).ok();
//! let uuid = env.ctxhost(&["submit", "--json", "say hi"]).ok().json()["uuid"].as_str().unwrap().to_string();
//! env.ctxhost(&["run", "--once"]).ok();
//! let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
//! let lines = read_jsonl(&dir.join("messages.jsonl"));
//! ```

pub mod anthropic_api;
pub mod api_schema;
pub mod components;
pub mod conformance;
pub mod dashboard;
pub mod fake_forge;
pub mod fake_llm;
pub mod fake_s3;
pub mod git_http;
pub mod hosts;
pub mod http;
pub mod openai_api;
pub mod responses_api;
pub mod store;
pub mod task;

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Path of the `ctxhost` binary built for these tests.
pub fn ctxhost_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ctxhost"))
}

/// A temporary directory that ctxhost runs in: `config.yaml` at its root, `contexts/` below it.
///
/// When dropped (and the test has not already failed), every task directory under `contexts/`
/// is validated against the published JSON Schemas ([`conformance`]): a file or line that does
/// not match fails the test, naming file, line and field, and the directory is kept for a look.
/// A test that damages files on purpose says so with [`TestEnv::expect_nonconforming`].
///
/// Removed when dropped, unless the env var `CTXHOST_KEEP_TEST_DIRS` is set (then its path is
/// printed, for debugging a failed test).
///
/// In a test run on PostgreSQL ([`store::on_postgres`]) it gets a database of its own: its URL
/// is in `CTXHOST_DATABASE_URL` for every run, and every config written by
/// [`TestEnv::write_config`] names it (`task_store: {url_env: CTXHOST_DATABASE_URL}`).
pub struct TestEnv {
    dir: Option<tempfile::TempDir>,
    root: PathBuf,
    /// Extra environment variables for every [`TestEnv::ctxhost`] run.
    pub env: Vec<(String, String)>,
    /// The test's PostgreSQL database, when it runs on PostgreSQL.
    pub pg: Option<store::PgDb>,
    /// The URL of its PostgreSQL database (the test's own, or one given to
    /// [`TestEnv::use_postgres_url`]).
    pg_url: Option<String>,
    /// Why this test's task directories may not match the schemas (damage it planted).
    nonconforming: Option<&'static str>,
}

impl TestEnv {
    /// A fresh empty directory (no config.yaml yet: ctxhost's defaults apply until one is written).
    pub fn new() -> TestEnv {
        let dir = tempfile::Builder::new()
            .prefix("ctxhost-test-")
            .tempdir()
            .expect("create temp dir");
        let root = dir.path().to_path_buf();
        // Compiled components are shared by every test run (a fresh contexts/.cache per
        // test would recompile each component in every test).
        let mut env = vec![(
            "CTXHOST_CACHE_DIR".to_string(),
            concat!(env!("CARGO_TARGET_TMPDIR"), "/component-cache").to_string(),
        )];
        let pg = store::postgres().then(store::PgDb::create);
        if let Some(db) = &pg {
            env.push((store::URL_ENV.to_string(), db.url.clone()));
            store::register(&root.join("contexts"), db.spec());
        }
        TestEnv {
            dir: Some(dir),
            root,
            env,
            pg_url: pg.as_ref().map(|db| db.url.clone()),
            pg,
            nonconforming: None,
        }
    }

    /// This test plants files or lines that do not match the schemas on purpose (`why`): the
    /// check on drop reports them instead of failing the test.
    pub fn expect_nonconforming(&mut self, why: &'static str) {
        self.nonconforming = Some(why);
    }

    /// The task store of this environment's `contexts/`.
    pub fn store_spec(&self) -> ctxhost::db::StoreSpec {
        match &self.pg_url {
            Some(url) => ctxhost::db::StoreSpec::Postgres(
                ctxhost::db::PgUrl::parse(url, store::URL_ENV).expect("a test URL"),
            ),
            None => ctxhost::db::StoreSpec::Sqlite,
        }
    }

    /// Use the PostgreSQL database at `url` (another server's) instead of this test's own.
    pub fn use_postgres_url(&mut self, url: &str) {
        self.pg = None;
        self.pg_url = Some(url.to_string());
        self.env.retain(|(k, _)| k != store::URL_ENV);
        self.env.push((store::URL_ENV.to_string(), url.to_string()));
        store::register(&self.contexts(), self.store_spec());
    }

    /// Write a config.yaml for an OpenAI-compatible server at `base_url` (see [`config_yaml`]).
    pub fn with_llm(self, base_url: &str) -> TestEnv {
        self.write_config(&config_yaml(base_url, "openai", ""));
        self
    }

    /// A fresh directory whose config.yaml points at the fake OpenAI-compatible server `llm`,
    /// plus the YAML `extra` ([`config_yaml`]), initialised (`ctxhost init`).
    pub fn for_llm(llm: &fake_llm::FakeLlm, extra: &str) -> TestEnv {
        let env = TestEnv::new();
        env.write_config(&config_yaml(&llm.base_url(), "openai", extra));
        env.ctxhost(&["init"]).ok();
        env
    }

    /// [`TestEnv::for_llm`] with `llm.stream: false`, for tests of the grace an unstreamed
    /// call in flight gets from a pause or stop (`llm.interrupt_grace_secs`): a streamed call
    /// gives way at once.
    pub fn for_llm_unstreamed(llm: &fake_llm::FakeLlm, extra: &str) -> TestEnv {
        let env = TestEnv::new();
        let (from, to) = UNSTREAMED;
        env.write_config(&config_yaml(&llm.base_url(), "openai", extra).replace(from, to));
        env.ctxhost(&["init"]).ok();
        env
    }

    /// Submit a task with `prompt` (`ctxhost submit --prompt`); its UUID.
    pub fn submit(&self, prompt: &str) -> String {
        self.ctxhost(&["submit", "--prompt", prompt])
            .ok()
            .stdout()
            .trim()
            .to_string()
    }

    /// The task row of `uuid` as `ctxhost show --json` prints it (its `task` object).
    pub fn row(&self, uuid: &str) -> Value {
        self.ctxhost(&["show", uuid, "--json"]).ok().json()["task"].clone()
    }

    /// The working directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/contexts` (the `context_storage.base_dir` the configs written here use).
    pub fn contexts(&self) -> PathBuf {
        self.root.join("contexts")
    }

    /// `<root>/config.yaml`.
    pub fn config_path(&self) -> PathBuf {
        self.root.join("config.yaml")
    }

    /// Replace config.yaml with `yaml` (plus, on PostgreSQL, its `task_store` when `yaml` has
    /// none).
    pub fn write_config(&self, yaml: &str) {
        let mut yaml = yaml.to_string();
        if self.pg_url.is_some() && !yaml.contains("task_store") {
            if !yaml.is_empty() && !yaml.ends_with('\n') {
                yaml.push('\n');
            }
            yaml.push_str(&format!("task_store:\n  url_env: {}\n", store::URL_ENV));
        }
        fs::write(self.config_path(), yaml).expect("write config.yaml");
    }

    /// Add an environment variable for later runs.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.push((key.to_string(), value.to_string()));
    }

    /// Run `ctxhost ARGS` in the working directory, wait, and capture its output.
    /// `RUST_LOG` is passed through; `NO_COLOR=1` is set.
    pub fn ctxhost(&self, args: &[&str]) -> CmdOutput {
        self.ctxhost_cmd(args).run()
    }

    /// The `Command` for `ctxhost ARGS` (cwd and env set) for callers that need to spawn it
    /// themselves (e.g. a worker in the background, to pause it).
    pub fn ctxhost_cmd(&self, args: &[&str]) -> Cmd {
        let mut c = Command::new(ctxhost_bin());
        c.args(args)
            .current_dir(&self.root)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        for (k, v) in &self.env {
            c.env(k, v);
        }
        Cmd {
            cmd: c,
            describe: format!("ctxhost {}", args.join(" ")),
        }
    }
}

impl Default for TestEnv {
    fn default() -> Self {
        TestEnv::new()
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        let mut keep = std::env::var_os("CTXHOST_KEEP_TEST_DIRS").is_some();
        let mut failure = None;
        if !std::thread::panicking() && self.contexts().is_dir() {
            let report = conformance::check_tree(&self.contexts());
            conformance::record_totals(&report);
            if !report.mismatches.is_empty() {
                let list = report.mismatches.join("\n  ");
                match self.nonconforming {
                    Some(why) => eprintln!(
                        "schema conformance: {} (expected: {why}):\n  {list}",
                        report.summary()
                    ),
                    None => {
                        keep = true;
                        failure = Some(format!(
                            "task directories of this test do not match docs/schemas/ ({}):\n  {list}",
                            report.summary()
                        ));
                    }
                }
            }
        }
        if keep && let Some(d) = self.dir.take() {
            eprintln!("keeping test dir {}", d.keep().display());
        }
        if let Some(f) = failure {
            panic!("{f}");
        }
    }
}

/// The replacement in a [`config_yaml`] text that turns streamed replies off (`llm.stream:
/// false`; on by default).
pub const UNSTREAMED: (&str, &str) = (
    "max_backoff_secs: 2",
    "max_backoff_secs: 2\n  stream: false",
);

/// A config.yaml for tests: provider `provider` at `base_url`, contexts in `./contexts`, short
/// timeouts and few retries so failures are quick, then `extra` appended verbatim (YAML top-level
/// sections, e.g. `"agent:\n  max_steps: 3\n"` — a section given in `extra` must not also be
/// one written here: `llm`, `context_storage`).
pub fn config_yaml(base_url: &str, provider: &str, extra: &str) -> String {
    let mut y = String::new();
    writeln!(y, "context_storage:\n  base_dir: ./contexts").unwrap();
    writeln!(
        y,
        "llm:\n  provider: {provider}\n  base_url: \"{base_url}\"\n  model: fake-model\n  \
         api_key_env: \"\"\n  context_length: 8192\n  timeout_secs: 20\n  max_retries: 2\n  max_backoff_secs: 2"
    )
    .unwrap();
    y.push_str(extra);
    y
}

/// A command to run, with a description for error messages.
pub struct Cmd {
    /// The command (change args/env freely before running).
    pub cmd: Command,
    describe: String,
}

impl Cmd {
    /// Run to completion, capturing stdout and stderr.
    pub fn run(mut self) -> CmdOutput {
        let out = self
            .cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.describe));
        CmdOutput {
            describe: self.describe,
            output: out,
        }
    }

    /// Spawn in the background (stdout/stderr piped).
    pub fn spawn(mut self) -> std::process::Child {
        self.cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.describe))
    }
}

/// The captured result of a ctxhost run.
pub struct CmdOutput {
    describe: String,
    /// Raw process output.
    pub output: Output,
}

impl CmdOutput {
    /// stdout as text (lossy).
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    /// stderr as text (lossy).
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    /// Exit code (`None` when killed by a signal).
    pub fn code(&self) -> Option<i32> {
        self.output.status.code()
    }

    /// Assert exit status 0 (the panic message shows both streams); returns self.
    #[track_caller]
    pub fn ok(self) -> CmdOutput {
        assert!(
            self.output.status.success(),
            "{} failed with {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.describe,
            self.output.status,
            self.stdout(),
            self.stderr()
        );
        self
    }

    /// Assert a non-zero exit status; returns self.
    #[track_caller]
    pub fn fails(self) -> CmdOutput {
        assert!(
            !self.output.status.success(),
            "{} unexpectedly succeeded\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.describe,
            self.stdout(),
            self.stderr()
        );
        self
    }

    /// stdout parsed as one JSON value (panics with the text when it is not JSON).
    #[track_caller]
    pub fn json(&self) -> Value {
        let s = self.stdout();
        serde_json::from_str(s.trim()).unwrap_or_else(|e| {
            panic!(
                "{}: stdout is not JSON ({e}):\n{s}\n--- stderr ---\n{}",
                self.describe,
                self.stderr()
            )
        })
    }
}

/// Every line of a JSONL file parsed as JSON. Panics (naming file and line) when the file is
/// missing, a line is not JSON, or the last line lacks its `\n` (a torn line).
#[track_caller]
pub fn read_jsonl(path: &Path) -> Vec<Value> {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    if !text.is_empty() {
        assert!(
            text.ends_with('\n'),
            "{}: last line is not newline-terminated",
            path.display()
        );
    }
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| {
                panic!("{} line {}: not JSON ({e}): {l}", path.display(), i + 1)
            })
        })
        .collect()
}

/// Every line of a JSONL file parsed as `T` (panics naming file and line, like [`read_jsonl`]).
#[track_caller]
pub fn read_lines<T: serde::de::DeserializeOwned>(path: &Path) -> Vec<T> {
    read_jsonl(path)
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            serde_json::from_value(v).unwrap_or_else(|e| {
                panic!(
                    "{} line {}: not the expected shape ({e})",
                    path.display(),
                    i + 1
                )
            })
        })
        .collect()
}

/// A JSON file parsed (panics naming the file).
#[track_caller]
pub fn read_json(path: &Path) -> Value {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not JSON ({e})", path.display()))
}

/// The task directory of `uuid` under `contexts` (`running/`, `paused/` or `completed/`), if any.
pub fn find_task_dir(contexts: &Path, uuid: &str) -> Option<PathBuf> {
    ["running", "paused", "completed"]
        .iter()
        .map(|s| contexts.join(s).join(uuid))
        .find(|p| p.is_dir())
}

/// Poll `cond` every 20 ms until it returns true or `timeout` passes; returns whether it did.
/// For waiting on background processes; not a timing assertion.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `127.0.0.1` port with nothing listening (bound, then released), for connection-refused tests.
pub fn unused_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// The repository root (the folder holding `host/`, `tests/`, `node_modules/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_path_buf()
}

/// The MCP filesystem server's launcher, installed by `npm ci` (package.json); panics with that
/// fix when it is missing.
pub fn filesystem_server_bin() -> PathBuf {
    let bin = repo_root().join("node_modules/.bin/mcp-server-filesystem");
    assert!(
        bin.exists(),
        "{} is missing: run `npm ci` in {} (installs the MCP servers of package.json)",
        bin.display(),
        repo_root().display()
    );
    bin
}

/// Pids of MCP filesystem server processes whose command line mentions `marker` (read from
/// /proc; Linux only).
pub fn filesystem_server_pids(marker: &Path) -> Vec<u32> {
    let marker = marker.display().to_string();
    let mut pids = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&marker) && cmdline.contains("mcp-server-filesystem") {
            pids.push(pid);
        }
    }
    pids
}
