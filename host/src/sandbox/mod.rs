//! The kernel sandbox of the built-in `shell` tool (issue 39): `sh -c COMMAND` run in the task's
//! workspace, confined by Linux itself, never by file permissions (ctxhost often runs as root).
//!
//! What a sandboxed command gets ([`Policy`]):
//! - **Landlock** (the `landlock` crate, best effort up to the kernel's ABI): read, write and
//!   execute beneath the workspace and the task's temp dir; read and execute beneath the system
//!   paths ([`SYSTEM_READ_PATHS`]) and the operator's `tools.read_paths`; a few device files;
//!   nothing else (not contexts/, not the config, not ~/.ssh, not other workspaces). Landlock
//!   checks the resolved path of every open, so a symlink or `..` cannot lead out, and a hard
//!   link cannot carry a file into a place with more rights (ABI ≥ 2 refuses the `link`). With
//!   no network it also denies every TCP bind/connect (ABI ≥ 4), and it scopes signals and
//!   abstract unix sockets to the sandbox (ABI ≥ 6).
//! - **Namespaces**: a user namespace (the same uid inside), a PID namespace whose init is the
//!   command (when it ends, or is killed, the kernel kills everything left inside, `setsid`
//!   children included), a mount namespace (contexts/ and the config, when they lie inside the
//!   workspace, are covered by an empty read-only tmpfs or /dev/null), and unless
//!   `tools.network: true` a network namespace with only a down loopback.
//! - **Limits** ([`Limits`]): CPU seconds, file size, address space, processes (a pids cgroup
//!   when the host can make one, as root; RLIMIT_NPROC otherwise), no core files.
//! - **Environment**: only an allow-list ([`ALLOWED_ENV`], PATH fixed, HOME and TMPDIR the temp
//!   dir): no LLM key, forge token or AWS_* variable reaches the command.
//!
//! The command runs in a new process group; a timeout, pause or stop ends the whole group
//! (SIGTERM, [`GRACE`], SIGKILL: [`crate::process_group`]).

use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

mod cgroup;
mod landlock_rules;

pub use landlock_rules::landlock_abi;

/// System paths a command may read and execute (those that exist).
pub const SYSTEM_READ_PATHS: &[&str] = &["/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc"];

/// Secrets under the system paths, covered inside every command's mount namespace (those that
/// exist): password hashes and the host's SSH keys.
pub const SYSTEM_HIDDEN: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssh",
    "/etc/sudoers",
    "/etc/sudoers.d",
];

/// Environment variables passed from the host to a command when set (all others are dropped).
pub const ALLOWED_ENV: &[&str] = &["LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM"];

/// PATH of a sandboxed command.
pub const SANDBOX_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Time between SIGTERM and SIGKILL when a command is ended.
pub const GRACE: Duration = Duration::from_secs(2);

/// Bytes of output kept from the start and from the end of a command's output; what lies
/// between is counted and dropped (the output is never held whole: a command may print GBs).
pub const KEPT_OUTPUT_BYTES: usize = 256 * 1024;

/// Resource limits of a sandboxed command (`tools.limits` in config.yaml).
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// CPU time of each process, seconds (RLIMIT_CPU). Default 300.
    pub cpu_secs: u64,
    /// Largest file a process may write, MiB (RLIMIT_FSIZE). Default 1024.
    pub file_size_mib: u64,
    /// Address space of each process, MiB (RLIMIT_AS). Default 8192.
    pub memory_mib: u64,
    /// Processes and threads at once: pids.max of the command's own pids cgroup (as root,
    /// where the cgroup exists), else RLIMIT_NPROC (counts all of the user's processes, and does
    /// not bind root). Default 256.
    pub processes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            cpu_secs: 300,
            file_size_mib: 1024,
            memory_mib: 8192,
            processes: 256,
        }
    }
}

/// What a sandboxed command may touch.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The task's workspace (read, write, execute); the command's working directory.
    pub workspace: PathBuf,
    /// The task's temp dir (read, write, execute; HOME and TMPDIR).
    pub temp_dir: PathBuf,
    /// Further directories to read, write and execute (an MCP server's `write_paths`).
    pub write_paths: Vec<PathBuf>,
    /// Operator-listed paths to read and execute (toolchains), besides [`SYSTEM_READ_PATHS`].
    pub read_paths: Vec<PathBuf>,
    /// Paths inside the workspace the command must not see (the contexts/ directory, the
    /// config file): covered inside the command's mount namespace.
    pub hidden: Vec<PathBuf>,
    /// Whether the command may use the network (`tools.network`).
    pub network: bool,
    /// Resource limits.
    pub limits: Limits,
    /// False when the operator turned the sandbox off (`tools.sandbox: off`): only the process
    /// group, limits and environment remain.
    pub enforce: bool,
}

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this code (a signal `n` that killed it shows as 128 + n).
    Exited(i32),
    /// It ran past its timeout and was ended.
    TimedOut,
    /// A pause or stop of the task ended it.
    Interrupted,
}

/// A finished command.
#[derive(Debug, Clone)]
pub struct Finished {
    /// How it ended.
    pub ended: Ended,
    /// Its output (stdout and stderr interleaved): the first and last [`KEPT_OUTPUT_BYTES`].
    pub output: Vec<u8>,
    /// Bytes dropped between the two kept parts.
    pub dropped_bytes: u64,
    /// Wall time from start to end.
    pub elapsed: Duration,
}

/// Errors of the sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The kernel cannot give the confinement required (names what is missing).
    #[error(
        "the sandbox is not available on this machine: {0} (set `tools.sandbox: off` to run tools unconfined)"
    )]
    Unavailable(String),
    /// Preparing or starting the command failed.
    #[error("starting the sandboxed command failed: {0}")]
    Start(String),
}

/// Run `program args` under `policy` with this process's standard input, output and error
/// and environment (the caller scrubbed it), in its working directory; wait for it and return
/// its exit code (a signal `n` as 128 + n). Dying, this process takes the command with it
/// (PR_SET_PDEATHSIG). For `ctxhost sandbox-exec`, the launcher of sandboxed MCP servers,
/// whose standard input and output stay the MCP transport.
pub fn exec_confined(
    policy: &Policy,
    program: &std::ffi::OsStr,
    args: &[std::ffi::OsString],
) -> Result<i32, SandboxError> {
    let prepared = Prepared::new(policy)?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("HOME", &policy.temp_dir)
        .env("TMPDIR", &policy.temp_dir);
    let child_setup = prepared.child_setup();
    // SAFETY: prctl is async-signal-safe; `apply` as in `run`.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(os_err());
            }
            child_setup.apply()
        });
    }
    let status = cmd
        .status()
        .map_err(|e| SandboxError::Start(format!("{e} (while {})", prepared.steps())))?;
    drop(prepared);
    use std::os::unix::process::ExitStatusExt;
    Ok(status
        .code()
        .or(status.signal().map(|n| 128 + n))
        .unwrap_or(-1))
}

/// Run `sh -c command` under `policy`, ending it after `timeout` or as soon as `interrupted`
/// returns true (polled every 250 ms).
pub fn run(
    policy: &Policy,
    command: &str,
    timeout: Duration,
    interrupted: &dyn Fn() -> bool,
) -> Result<Finished, SandboxError> {
    let started = Instant::now();
    let prepared = Prepared::new(policy)?;
    let namespaced = prepared.setup.namespaces;
    let (reader, writer) =
        std::io::pipe().map_err(|e| SandboxError::Start(format!("pipe: {e}")))?;
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(&policy.workspace)
        .env_clear()
        .env("PATH", SANDBOX_PATH)
        .env("HOME", &policy.temp_dir)
        .env("TMPDIR", &policy.temp_dir)
        .stdin(Stdio::null())
        .stdout(
            writer
                .try_clone()
                .map_err(|e| SandboxError::Start(format!("pipe: {e}")))?,
        )
        .stderr(writer);
    for name in ALLOWED_ENV {
        if let Some(v) = std::env::var_os(name) {
            cmd.env(name, v);
        }
    }
    crate::process_group::in_new_group(&mut cmd);
    let child_setup = prepared.child_setup();
    // SAFETY: the closure only makes async-signal-safe system calls on data prepared before
    // the fork (no allocation, no locks): see ChildSetup::apply.
    unsafe {
        cmd.pre_exec(move || child_setup.apply());
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| SandboxError::Start(format!("{e} (while {})", prepared.steps())))?;
    drop(cmd);
    let pgid = child.id();
    let output = spawn_reader(reader);
    let exited = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    {
        let exited = exited.clone();
        std::thread::spawn(move || {
            let status = child.wait();
            exited.store(true, Ordering::SeqCst);
            let _ = tx.send(status);
        });
    }
    let deadline = started + timeout;
    let mut last_probe = Instant::now();
    let mut ended = None;
    let status = loop {
        let now = Instant::now();
        let wait = deadline
            .saturating_duration_since(now)
            .min(Duration::from_millis(250));
        match rx.recv_timeout(wait) {
            Ok(status) => break status,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(SandboxError::Start("lost the command's waiter".into()));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if ended.is_some() {
            continue;
        }
        if Instant::now() >= deadline {
            ended = Some(Ended::TimedOut);
        } else if last_probe.elapsed() >= Duration::from_millis(250) {
            last_probe = Instant::now();
            if interrupted() {
                ended = Some(Ended::Interrupted);
            }
        }
        if ended.is_some() {
            if namespaced {
                end_namespaced(pgid, &exited);
            } else {
                crate::process_group::terminate_group(pgid, GRACE);
            }
        }
    };
    // Whatever stayed in the group after the leader ended. In a PID namespace nothing can: the
    // leader waited for the namespace's init, whose end made the kernel kill every other
    // process inside, so one SIGKILL to the group (no /proc scan) only covers a race. Without
    // namespaces the group is looked for and ended member by member.
    if namespaced {
        crate::process_group::kill_group(pgid);
    } else {
        crate::process_group::terminate_group(pgid, Duration::ZERO);
    }
    let code = match status {
        Ok(s) => {
            use std::os::unix::process::ExitStatusExt;
            s.code().or(s.signal().map(|n| 128 + n)).unwrap_or(-1)
        }
        Err(e) => return Err(SandboxError::Start(format!("waiting for the command: {e}"))),
    };
    // The pipe closes when the last process holding it is gone: inside a PID namespace all of
    // them died with its init; unconfined, a process that left the group may keep it open.
    let (output, dropped_bytes) = match output.recv_timeout(GRACE) {
        Ok(o) => o,
        Err(_) => (
            b"[output cut: a process that left the command's process group still holds it]"
                .to_vec(),
            0,
        ),
    };
    drop(prepared);
    Ok(Finished {
        ended: ended.unwrap_or(Ended::Exited(code)),
        output,
        dropped_bytes,
        elapsed: started.elapsed(),
    })
}

/// End a command running in its own PID namespace (a timeout, pause or stop): SIGTERM to its
/// group, up to [`GRACE`] for the leader to exit (`exited`, set by its waiter: no `/proc` scan),
/// then SIGKILL to the group. The leader waits for the namespace's init, so its exit means
/// every process inside is gone.
fn end_namespaced(pgid: u32, exited: &AtomicBool) {
    crate::process_group::signal_group(pgid, libc::SIGTERM);
    let deadline = Instant::now() + GRACE;
    while !exited.load(Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    crate::process_group::kill_group(pgid);
}

/// Read `pipe` to its end in a thread, keeping the first and last [`KEPT_OUTPUT_BYTES`] and
/// counting what is dropped between them.
fn spawn_reader(mut pipe: std::io::PipeReader) -> mpsc::Receiver<(Vec<u8>, u64)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut head = Vec::new();
        let mut tail: std::collections::VecDeque<u8> = std::collections::VecDeque::new();
        let mut dropped = 0u64;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            let mut part = &buf[..n];
            if head.len() < KEPT_OUTPUT_BYTES {
                let take = (KEPT_OUTPUT_BYTES - head.len()).min(part.len());
                head.extend_from_slice(&part[..take]);
                part = &part[take..];
            }
            tail.extend(part);
            if tail.len() > KEPT_OUTPUT_BYTES {
                let extra = tail.len() - KEPT_OUTPUT_BYTES;
                tail.drain(..extra);
                dropped += extra as u64;
            }
        }
        if dropped > 0 {
            head.extend_from_slice(
                format!("\n[... {dropped} bytes of output dropped here ...]\n").as_bytes(),
            );
        }
        head.extend(tail);
        let _ = tx.send((head, dropped));
    });
    rx
}

/// What the sandbox can do on this machine (`ctxhost doctor`).
#[derive(Debug, Clone)]
pub struct Support {
    /// The kernel's Landlock ABI (0: no Landlock).
    pub landlock_abi: i32,
    /// Whether a command could be started in new user, PID, mount and network namespaces
    /// (`Err`: why not).
    pub namespaces: Result<(), String>,
    /// Whether a pids cgroup bounds the processes (else RLIMIT_NPROC).
    pub pids_cgroup: bool,
}

impl Support {
    /// What is missing for an enforced sandbox, or `None` when nothing is.
    pub fn missing(&self) -> Option<String> {
        let mut missing = Vec::new();
        if self.landlock_abi < 1 {
            missing.push("Landlock (kernel 5.13+ with the landlock LSM enabled)".to_string());
        }
        if let Err(e) = &self.namespaces {
            missing.push(format!("user/PID/mount/network namespaces ({e})"));
        }
        (!missing.is_empty()).then(|| missing.join(" and "))
    }

    /// One line per capability, for `ctxhost doctor`.
    pub fn report(&self) -> String {
        let landlock = match self.landlock_abi {
            n if n < 1 => "missing: shell and write tools refuse to run".to_string(),
            n => format!(
                "ABI {n} (files{}{})",
                if n >= 4 { ", TCP bind/connect" } else { "" },
                if n >= 6 {
                    ", signal and abstract-socket scoping"
                } else {
                    ""
                }
            ),
        };
        let ns = match &self.namespaces {
            Ok(()) => "user, PID, mount and network namespaces: available (no network unless tools.network: true)".to_string(),
            Err(e) => format!("namespaces: NOT available: {e}"),
        };
        let limits = Limits::default();
        format!(
            "sandbox: landlock {landlock}\nsandbox: {ns}\nsandbox: limits (defaults) cpu {} s, file size {} MiB, memory {} MiB, processes {} ({})\n",
            limits.cpu_secs,
            limits.file_size_mib,
            limits.memory_mib,
            limits.processes,
            if self.pids_cgroup {
                "pids cgroup"
            } else {
                "RLIMIT_NPROC only: does not bind root"
            }
        )
    }
}

/// Probe the kernel: its Landlock ABI, and a real start of `true` in the namespaces (a temp
/// workspace, removed again).
pub fn probe() -> Support {
    let landlock_abi = landlock_abi();
    let pids_cgroup = cgroup::PidsCgroup::create(16).is_some();
    let namespaces = (|| {
        let ws = std::env::temp_dir().join(format!("ctxhost-probe-{}", std::process::id()));
        std::fs::create_dir_all(&ws).map_err(|e| format!("{}: {e}", ws.display()))?;
        let policy = Policy {
            workspace: ws.clone(),
            temp_dir: ws.clone(),
            write_paths: Vec::new(),
            read_paths: Vec::new(),
            hidden: Vec::new(),
            network: false,
            limits: Limits::default(),
            enforce: true,
        };
        let r = if landlock_abi >= 1 {
            run(&policy, "true", Duration::from_secs(10), &|| false).map_err(|e| e.to_string())
        } else {
            // Without Landlock, test the namespaces alone.
            ChildSetup::namespaces_only_probe()
        };
        let _ = std::fs::remove_dir_all(&ws);
        match r?.ended {
            Ended::Exited(0) => Ok(()),
            other => Err(format!("`true` in the sandbox ended {other:?}")),
        }
    })();
    Support {
        landlock_abi,
        namespaces,
        pids_cgroup,
    }
}

/// Everything a command's setup needs, made before the fork.
struct Prepared {
    ruleset: Option<OwnedFd>,
    /// Held until the command is gone (dropping it removes the cgroup).
    _cgroup: Option<cgroup::PidsCgroup>,
    setup: ChildSetup,
}

/// The data the child uses between fork and exec: file descriptors and C strings only.
#[derive(Clone)]
struct ChildSetup {
    ruleset: Option<i32>,
    cgroup_procs: Option<i32>,
    rlimits: [(libc::__rlimit_resource_t, u64); 5],
    namespaces: bool,
    network: bool,
    uid_map: Arc<CString>,
    gid_map: Arc<CString>,
    hidden_dirs: Arc<Vec<CString>>,
    hidden_files: Arc<Vec<CString>>,
}

impl Prepared {
    fn new(policy: &Policy) -> Result<Prepared, SandboxError> {
        let ruleset = if policy.enforce {
            if landlock_abi() < 1 {
                return Err(SandboxError::Unavailable(
                    "Landlock is missing (kernel 5.13+ with the landlock LSM enabled)".into(),
                ));
            }
            Some(landlock_rules::ruleset(policy).map_err(SandboxError::Start)?)
        } else {
            None
        };
        let cgroup = cgroup::PidsCgroup::create(policy.limits.processes);
        let l = &policy.limits;
        let mib = |m: u64| m.saturating_mul(1024 * 1024);
        let (uid, gid) = (unsafe { libc::geteuid() }, unsafe { libc::getegid() });
        let cstr = |p: &Path| CString::new(p.as_os_str().as_bytes()).ok();
        let (mut hidden_dirs, mut hidden_files) = (Vec::new(), Vec::new());
        let system_hidden = SYSTEM_HIDDEN.iter().map(PathBuf::from);
        let hidden: Vec<PathBuf> = if policy.enforce {
            policy.hidden.iter().cloned().chain(system_hidden).collect()
        } else {
            Vec::new()
        };
        for p in &hidden {
            match std::fs::metadata(p) {
                Ok(m) if m.is_dir() => hidden_dirs.extend(cstr(p)),
                Ok(_) => hidden_files.extend(cstr(p)),
                Err(_) => {}
            }
        }
        let setup = ChildSetup {
            ruleset: ruleset.as_ref().map(AsRawFd::as_raw_fd),
            cgroup_procs: cgroup.as_ref().map(|c| c.procs.as_raw_fd()),
            rlimits: [
                (libc::RLIMIT_CPU, l.cpu_secs),
                (libc::RLIMIT_FSIZE, mib(l.file_size_mib)),
                (libc::RLIMIT_AS, mib(l.memory_mib)),
                (libc::RLIMIT_NPROC, l.processes),
                (libc::RLIMIT_CORE, 0),
            ],
            namespaces: policy.enforce,
            network: policy.network,
            uid_map: Arc::new(CString::new(format!("{uid} {uid} 1\n")).unwrap_or_default()),
            gid_map: Arc::new(CString::new(format!("{gid} {gid} 1\n")).unwrap_or_default()),
            hidden_dirs: Arc::new(hidden_dirs),
            hidden_files: Arc::new(hidden_files),
        };
        Ok(Prepared {
            ruleset,
            _cgroup: cgroup,
            setup,
        })
    }

    fn child_setup(&self) -> ChildSetup {
        self.setup.clone()
    }

    /// What the child does, for an error message.
    fn steps(&self) -> &'static str {
        if self.ruleset.is_some() {
            "entering the pids cgroup, setting limits, creating user/PID/mount/network namespaces and applying Landlock"
        } else {
            "setting limits"
        }
    }
}

/// `Err` with the calling thread's errno.
fn os_err() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Write `text` to the file `path` (both NUL-terminated) with open/write/close only.
fn write_file_raw(path: &[u8], text: &[u8]) -> std::io::Result<()> {
    // SAFETY: path is NUL-terminated (callers pass literals with \0 or CString bytes).
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(os_err());
    }
    // SAFETY: text is a valid buffer of its length.
    let n = unsafe { libc::write(fd, text.as_ptr().cast(), text.len()) };
    let err = (n < 0).then(os_err);
    // SAFETY: fd was opened above.
    unsafe { libc::close(fd) };
    err.map_or(Ok(()), Err)
}

impl ChildSetup {
    /// Runs in the child between fork and exec: async-signal-safe calls only.
    fn apply(&self) -> std::io::Result<()> {
        if let Some(fd) = self.cgroup_procs {
            // SAFETY: writing "0" (this thread, the only one of this forked child) to the
            // cgroup file opened before (`tasks` or `cgroup.procs`: cgroup.rs).
            if unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) } < 0 {
                return Err(os_err());
            }
        }
        for (resource, value) in self.rlimits {
            let lim = libc::rlimit {
                rlim_cur: value,
                rlim_max: value,
            };
            // SAFETY: a plain system call on a stack value.
            if unsafe { libc::setrlimit(resource, &lim) } != 0 {
                return Err(os_err());
            }
        }
        if !self.namespaces {
            return Ok(());
        }
        let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWNS;
        if !self.network {
            flags |= libc::CLONE_NEWNET;
        }
        // SAFETY: plain system calls.
        if unsafe { libc::unshare(flags) } != 0 {
            return Err(os_err());
        }
        write_file_raw(b"/proc/self/setgroups\0", b"deny")?;
        write_file_raw(b"/proc/self/uid_map\0", self.uid_map.as_bytes())?;
        write_file_raw(b"/proc/self/gid_map\0", self.gid_map.as_bytes())?;
        if !self.hidden_dirs.is_empty() || !self.hidden_files.is_empty() {
            // SAFETY: mount(2) with NUL-terminated strings prepared before the fork.
            unsafe {
                if libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0
                {
                    return Err(os_err());
                }
                for d in self.hidden_dirs.iter() {
                    if libc::mount(
                        c"tmpfs".as_ptr(),
                        d.as_ptr(),
                        c"tmpfs".as_ptr(),
                        libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                        c"size=4k,mode=0500".as_ptr().cast(),
                    ) != 0
                    {
                        return Err(os_err());
                    }
                }
                for f in self.hidden_files.iter() {
                    if libc::mount(
                        c"/dev/null".as_ptr(),
                        f.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND,
                        std::ptr::null(),
                    ) != 0
                    {
                        return Err(os_err());
                    }
                }
            }
        }
        // The next child is the PID namespace's init: it becomes the command. This process
        // stays outside, waits for it and exits with its status; killing this process kills
        // the init (PR_SET_PDEATHSIG), and the kernel then kills everything in the namespace.
        // SAFETY: fork in the single-threaded child of a fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(os_err());
        }
        if pid > 0 {
            // SAFETY: only async-signal-safe calls, then _exit: this never returns to std.
            unsafe {
                libc::signal(libc::SIGTERM, libc::SIG_IGN);
                libc::signal(libc::SIGINT, libc::SIG_IGN);
                libc::signal(libc::SIGHUP, libc::SIG_IGN);
                // Close everything (the pipe to the output reader, std's exec-error pipe), so
                // only the command holds them.
                libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32);
                let mut status = 0;
                loop {
                    let r = libc::waitpid(pid, &mut status, 0);
                    if r == pid {
                        break;
                    }
                    if r < 0 && *libc::__errno_location() != libc::EINTR {
                        libc::_exit(125);
                    }
                }
                let code = if libc::WIFEXITED(status) {
                    libc::WEXITSTATUS(status)
                } else if libc::WIFSIGNALED(status) {
                    128 + libc::WTERMSIG(status)
                } else {
                    125
                };
                libc::_exit(code);
            }
        }
        // SAFETY: plain system calls.
        unsafe {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(os_err());
            }
            if let Some(fd) = self.ruleset {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(os_err());
                }
                if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0 {
                    return Err(os_err());
                }
            }
        }
        Ok(())
    }

    /// Start `true` in the namespaces alone (a kernel without Landlock), for [`probe`].
    fn namespaces_only_probe() -> Result<Finished, String> {
        let setup = ChildSetup {
            ruleset: None,
            cgroup_procs: None,
            rlimits: [(libc::RLIMIT_CORE, 0); 5],
            namespaces: true,
            network: false,
            uid_map: Arc::new(
                CString::new(format!("{0} {0} 1\n", unsafe { libc::geteuid() }))
                    .unwrap_or_default(),
            ),
            gid_map: Arc::new(
                CString::new(format!("{0} {0} 1\n", unsafe { libc::getegid() }))
                    .unwrap_or_default(),
            ),
            hidden_dirs: Arc::new(Vec::new()),
            hidden_files: Arc::new(Vec::new()),
        };
        let started = Instant::now();
        let mut cmd = Command::new("/bin/true");
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: as in `run`.
        unsafe {
            cmd.pre_exec(move || setup.apply());
        }
        let status = cmd.status().map_err(|e| e.to_string())?;
        Ok(Finished {
            ended: Ended::Exited(status.code().unwrap_or(-1)),
            output: Vec::new(),
            dropped_bytes: 0,
            elapsed: started.elapsed(),
        })
    }
}
