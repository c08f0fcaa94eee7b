//! Failpoints for crash tests: the environment variable [`FAILPOINT_ENV`] names points,
//! comma-separated; code asks [`is_set`] at a point and misbehaves on purpose there. Off (one
//! `getenv`) unless the variable is set. Points:
//! - `lifecycle:NAME` (NAME a transition name, or `*`): the process kills itself with SIGKILL
//!   between the row and the directory of that transition ([`kill_if_set`]);
//! - `task-exec:exit`: a task process exits with status 3 before claiming its task (a child
//!   that cannot start);
//! - `task-exec:late`: a task process sleeps 2 s before claiming its task (one slow to
//!   start, so that another process claims the task first);
//! - `strategy:recorded`: SIGKILL right after a strategy hook's decision is written to the
//!   planning history, before it is applied;
//! - `agent:compressed`: SIGKILL right after a compression installed the new context, before
//!   the latest plan is stated again;
//! - `agent:reply-read`: SIGKILL after a model reply was read (its text possibly in
//!   `reply.content`), before it is appended; `agent:reply-appended`: right after it was
//!   appended, before `reply.content` is deleted;
//! - `remote:end-sync`: the last sync of a task to the bucket (`context_storage.remote`),
//!   before it completes or fails, fails as if the bucket could not be reached;
//! - `publish:before-comment`, `publish:after-comment` (the result comment), and
//!   `publish:after-commit`, `publish:after-push`, `publish:after-pr` (the change of
//!   `pull_requests: true`): SIGKILL right after that step of the publisher, before it is
//!   recorded ([`crate::sources::publish`], [`crate::sources::change`]);
//! - `lease:unreachable`: a task process's lease renewals fail as if the database could not
//!   be reached, so it fences itself out ([`crate::lease`]) once its lease is 80 % used.
//!
//! Hand-written rather than the `fail` crate: its actions cannot kill the process, and it needs
//! a cargo feature, i.e. a second build of the host for the tests.

/// Environment variable naming the failpoints that are on.
pub const FAILPOINT_ENV: &str = "CTXHOST_FAILPOINT";

/// Whether failpoint `name` is on (`group:*` turns on every point of `group`).
pub fn is_set(name: &str) -> bool {
    let Some(points) = std::env::var_os(FAILPOINT_ENV) else {
        return false;
    };
    let points = points.to_string_lossy();
    let group = name.split(':').next().unwrap_or(name);
    points
        .split(',')
        .map(str::trim)
        .any(|p| p == name || p.strip_suffix(":*") == Some(group))
}

/// Kill this process with SIGKILL if failpoint `name` is on.
pub fn kill_if_set(name: &str) {
    if !is_set(name) {
        return;
    }
    eprintln!("failpoint {name}: killing process {}", std::process::id());
    // SAFETY: kill with our own pid and a valid signal number; no memory is involved.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    // SIGKILL cannot be caught; this is never reached.
    loop {
        std::thread::park();
    }
}
