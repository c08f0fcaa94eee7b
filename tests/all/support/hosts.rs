//! The multi-host harness shared by `multi_host.rs` (one shared contexts/ tree) and
//! `remote_hosts.rs` (one local tree per host and a bucket): workers started as separate
//! "hosts" (`CTXHOST_HOSTNAME`, and optionally a host identity and a tree of their own), the
//! two-step fake LLM every such test drives, a queue filled through the library, and waiting
//! for the queue to drain.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ctxhost::db::{Db, NewTask, Status, TaskFilter, TaskKey, TaskRow};

use super::fake_llm::{FakeLlm, RecordedRequest, Reply};
use super::{TestEnv, wait_until};

/// The first user message of a request (the task's prompt).
pub fn prompt_of(req: &RecordedRequest) -> String {
    req.messages()
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_string()
}

/// Every task: one tool call (answered with an error: no tool server), then the final answer
/// `finished {prompt}`. 2 LLM calls, 1 tool call, 25 + 35 tokens. `delay` before each reply.
pub fn two_step_llm(delay: Duration) -> FakeLlm {
    let llm = FakeLlm::start(vec![]);
    llm.set_handler(move |req| {
        let reply = two_step_reply(req);
        Some(if delay.is_zero() {
            reply
        } else {
            Reply::delay(delay, reply)
        })
    });
    llm
}

/// The reply of [`two_step_llm`] to `req`: a tool call, or after a tool result the final
/// answer `finished {prompt}`.
pub fn two_step_reply(req: &RecordedRequest) -> Reply {
    let last_is_tool = req.messages().last().is_some_and(|m| m["role"] == "tool");
    if last_is_tool {
        Reply::text(format!("finished {}", prompt_of(req)), Some((30, 5)))
    } else {
        Reply::tool_calls(
            vec![("call_x", "read_text_file", r#"{"path":"a"}"#)],
            Some((20, 5)),
        )
    }
}

/// Insert `n` queued tasks `task-{i}` (through the library: hundreds of `ctxhost submit` runs
/// would only slow a test down). Returns their UUIDs in order.
pub fn queue(env: &TestEnv, n: usize) -> Vec<String> {
    let db = Db::open(&env.store_spec(), &env.contexts()).unwrap();
    queue_into(&db, n, None, |i, _| format!("task-{i}"))
}

/// Insert `n` queued local tasks into `db`, submitted by `user`, the prompt of the `i`-th made
/// by `prompt(i, uuid)`. Returns their UUIDs in order.
pub fn queue_into(
    db: &Db,
    n: usize,
    user: Option<&str>,
    prompt: impl Fn(usize, &str) -> String,
) -> Vec<String> {
    (0..n)
        .map(|i| {
            let uuid = uuid::Uuid::new_v4().hyphenated().to_string();
            db.insert_queued(&NewTask {
                uuid: uuid.clone(),
                key: TaskKey {
                    task_source: "local".into(),
                    ..TaskKey::default()
                },
                prompt: prompt(i, &uuid),
                user: user.map(str::to_string),
                llm_provider: "openai".into(),
                model: "fake-model".into(),
                context_length: 8192,
                no_inherit: false,
                workspace: None,
            })
            .unwrap();
            uuid
        })
        .collect()
}

/// Every task row of `env`'s store.
pub fn rows(env: &TestEnv) -> Vec<TaskRow> {
    Db::open(&env.store_spec(), &env.contexts())
        .unwrap()
        .list(&TaskFilter::default())
        .unwrap()
}

/// A worker (not `--once`: it keeps serving the queue) acting as host `host`; its log (and its
/// task processes') goes to a file. Dropping it kills the host (worker and task processes).
pub struct Worker {
    /// The host name it runs as.
    pub host: String,
    /// The worker process.
    pub child: Child,
    log: PathBuf,
}

impl Worker {
    /// A worker of host `host` on `env`'s own contexts/ tree, with this machine's identity.
    pub fn start(env: &TestEnv, host: &str, parallel: u32) -> Worker {
        Worker::spawn(env, host, None, None, parallel)
    }

    /// A worker acting as host `host` with host identity `id` (`CTXHOST_HOST_ID`; `None`: this
    /// machine's), on `env`'s contexts/ tree.
    pub fn start_as(env: &TestEnv, host: &str, id: Option<&str>, parallel: u32) -> Worker {
        Worker::spawn(env, host, id, None, parallel)
    }

    /// A worker of host `host` (identity `machine-{host}`) on a local tree of its own.
    pub fn start_on_tree(env: &TestEnv, host: &str, tree: &Path, parallel: u32) -> Worker {
        Worker::spawn(
            env,
            host,
            Some(&format!("machine-{host}")),
            Some(tree),
            parallel,
        )
    }

    fn spawn(
        env: &TestEnv,
        host: &str,
        id: Option<&str>,
        tree: Option<&Path>,
        parallel: u32,
    ) -> Worker {
        static N: AtomicUsize = AtomicUsize::new(0);
        let log = env.root().join(format!(
            "worker-{host}-{}.log",
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let p = parallel.to_string();
        let mut args = vec!["-v"];
        if let Some(t) = tree {
            args.extend_from_slice(&["--contexts", t.to_str().unwrap()]);
        }
        args.extend_from_slice(&["run", "--poll-ms", "20", "--max-parallel", &p]);
        let mut cmd = env.ctxhost_cmd(&args).cmd;
        if let Some(id) = id {
            cmd.env(ctxhost::host::HOST_ID_ENV, id);
        }
        cmd.env(ctxhost::layout::HOSTNAME_ENV, host)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        Worker {
            host: host.to_string(),
            child: cmd.spawn().expect("start a worker"),
            log,
        }
    }

    /// What the worker and its task processes logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// kill -9 of the worker and its task processes.
    pub fn kill_host(&mut self) {
        let victims = children_of(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
        for p in victims {
            // SAFETY: kill has no memory effects; these are the test's own grandchildren.
            unsafe { libc::kill(p as libc::pid_t, libc::SIGKILL) };
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill_host();
    }
}

/// The process ids of `pid`'s children (from /proc).
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: the comm may hold spaces, so split after its ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|s| s.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(p);
        }
    }
    out
}

/// Wait (up to `secs`) until every task is completed; panics with the count by status, the
/// tasks not completed and the workers' logs otherwise.
pub fn wait_all_completed(env: &TestEnv, secs: u64, workers: &[&Worker]) -> Vec<TaskRow> {
    let done = wait_until(Duration::from_secs(secs), || {
        rows(env).iter().all(|r| r.status == Status::Completed)
    });
    let all = rows(env);
    if !done {
        let mut by: BTreeMap<String, usize> = BTreeMap::new();
        for r in &all {
            *by.entry(r.status.to_string()).or_default() += 1;
        }
        let left: Vec<String> = all
            .iter()
            .filter(|r| r.status != Status::Completed)
            .map(|r| format!("{} {}", r.uuid, r.status))
            .collect();
        let logs: Vec<String> = workers
            .iter()
            .map(|w| format!("--- {} ---\n{}", w.host, w.log()))
            .collect();
        panic!(
            "not all tasks completed after {secs} s: {by:?} {left:?}\n{}",
            logs.join("\n")
        );
    }
    all
}
