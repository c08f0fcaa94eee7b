//! Child processes that can be stopped whole: a child started in a process group of its own
//! ([`in_new_group`]), and [`terminate_group`]: SIGTERM to the whole group, then SIGKILL to
//! what is left after a short grace.
//!
//! A process group does not hold a descendant that calls `setsid` (or `setpgid`) itself. Those
//! are found by a mark instead: [`mark`] puts a token unique to the child in its environment
//! ([`MARK_ENV`]); descendants inherit it across `fork`, `exec` and `setsid`, and
//! [`terminate_marked`] signals every process of this user whose environment (read from
//! `/proc/PID/environ`) carries it, as well as the group. (A cgroup would hold them too, but an
//! unprivileged process cannot create one on most hosts; `PR_SET_CHILD_SUBREAPER` only reparents
//! orphans, it does not name them.) A descendant that clears its environment and calls `setsid`
//! escapes both: the limit of what an unprivileged host can do.
//!
//! Linux and other Unix; the mark needs `/proc` (without it only the group is signalled).

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The environment variable [`mark`] sets on a child: its value is the token
/// [`terminate_marked`] looks for.
pub const MARK_ENV: &str = "CTXHOST_PROCESS_GROUP";

/// How often [`terminate_group`] looks whether the processes have exited.
const POLL: Duration = Duration::from_millis(20);

/// How long [`terminate_group`] waits for SIGKILLed processes to be gone (they exit
/// asynchronously; a port they held is free only then).
const KILL_WAIT: Duration = Duration::from_secs(2);

/// Make `cmd` start in a new process group whose id is the child's pid (`setpgid(0, 0)` in
/// the child), so a terminal's Ctrl-C does not reach it and [`terminate_group`] reaches all
/// of it. Returns `cmd` for chaining. (A `tokio::process::Command`: pass `as_std_mut()`.)
pub fn in_new_group(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0)
}

/// Put a token unique in this process into `cmd`'s environment as [`MARK_ENV`], and return
/// it, for [`terminate_marked`].
pub fn mark(cmd: &mut Command) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let token = format!(
        "{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    cmd.env(MARK_ENV, &token);
    token
}

/// What [`terminate_group`] / [`terminate_marked`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Terminated {
    /// Processes that were running when it started (group members and marked ones).
    pub found: usize,
    /// Of those, the ones still running after the grace, which were sent SIGKILL.
    pub killed: usize,
    /// Processes still there after the SIGKILL wait (0 unless the kernel is slow or a process
    /// is stuck in the kernel).
    pub left: usize,
}

/// Stop process group `pgid`: SIGTERM to the group, wait up to `grace` for its processes to
/// exit, then SIGKILL the group and wait (up to 2 s) until they are gone. Never fails: a
/// group that is already gone is simply done. Blocks the calling thread.
pub fn terminate_group(pgid: u32, grace: Duration) -> Terminated {
    terminate_marked(pgid, None, grace)
}

/// SIGKILL to process group `pgid`, once, without looking for its members (no `/proc` scan):
/// for a group whose processes are known to be gone or going, e.g. a sandboxed command whose
/// PID namespace ended with its init (the kernel kills the rest). Group 0, this process and its
/// own group are never signalled. Returns whether a process received it.
pub fn kill_group(pgid: u32) -> bool {
    signal_group(pgid, libc::SIGKILL)
}

/// `signal` to process group `pgid`, once (the guards of [`kill_group`]). Returns whether a
/// process received it (false: no such group, or a group this function never signals).
pub fn signal_group(pgid: u32, signal: libc::c_int) -> bool {
    let Ok(pgid_t) = libc::pid_t::try_from(pgid) else {
        return false;
    };
    // SAFETY: getpgrp has no preconditions.
    let own_group = u32::try_from(unsafe { libc::getpgrp() }).ok();
    if pgid == 0 || pgid == std::process::id() || Some(pgid) == own_group {
        return false;
    }
    // SAFETY: killpg only sends a signal; a group that is gone is ESRCH.
    unsafe { libc::killpg(pgid_t, signal) == 0 }
}

/// [`terminate_group`] of `pgid`, plus every process whose environment carries `marker` (the
/// token of [`mark`]: descendants that left the group with `setsid`). The calling process is
/// never signalled.
pub fn terminate_marked(pgid: u32, marker: Option<&str>, grace: Duration) -> Terminated {
    terminate(pgid, marker, None, grace)
}

/// [`terminate_marked`], sparing the group's leader (the process `pgid` itself): what it
/// started is stopped, it goes on (e.g. a server whose request timed out).
pub fn terminate_descendants(pgid: u32, marker: Option<&str>, grace: Duration) -> Terminated {
    terminate(pgid, marker, Some(pgid), grace)
}

fn terminate(pgid: u32, marker: Option<&str>, spare: Option<u32>, grace: Duration) -> Terminated {
    let me = std::process::id();
    let Ok(pgid_t) = libc::pid_t::try_from(pgid) else {
        return Terminated::default();
    };
    // SAFETY: getpgrp has no preconditions.
    let own_group = u32::try_from(unsafe { libc::getpgrp() }).ok();
    if pgid == 0 || pgid == me || Some(pgid) == own_group {
        // Group 0 stands for the caller's own group: never signalled.
        return Terminated::default();
    }
    let alive = || {
        let mut members = live_members(pgid, marker, me);
        if let Some(spare) = spare {
            members.remove(&spare);
        }
        members
    };
    let first = alive();
    let mut outcome = Terminated {
        found: first.len(),
        ..Terminated::default()
    };
    let whole_group = spare.is_none();
    signal_all(whole_group.then_some(pgid_t), &first, libc::SIGTERM);
    let deadline = Instant::now() + grace;
    let mut left = alive();
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(POLL);
        left = alive();
    }
    if left.is_empty() {
        return outcome;
    }
    outcome.killed = left.len();
    signal_all(whole_group.then_some(pgid_t), &left, libc::SIGKILL);
    let deadline = Instant::now() + KILL_WAIT;
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(POLL);
        // Anything that appeared meanwhile (a fork racing the SIGTERM) gets the same.
        left = alive();
        signal_all(whole_group.then_some(pgid_t), &left, libc::SIGKILL);
    }
    outcome.left = left.len();
    if outcome.left > 0 {
        tracing::warn!(
            pgid,
            left = outcome.left,
            "processes of a stopped group still there after SIGKILL"
        );
    }
    outcome
}

/// `signal` to group `pgid` (when given) and to each of `pids`.
fn signal_all(pgid: Option<libc::pid_t>, pids: &BTreeSet<u32>, signal: libc::c_int) {
    // SAFETY: killpg and kill only send signals; a group or process that is gone is ESRCH.
    unsafe {
        if let Some(pgid) = pgid {
            libc::killpg(pgid, signal);
        }
        for &pid in pids {
            if let Ok(pid) = libc::pid_t::try_from(pid) {
                libc::kill(pid, signal);
            }
        }
    }
}

/// The running (not zombie) processes in group `pgid` or carrying `marker`, except `me`.
fn live_members(pgid: u32, marker: Option<&str>, me: u32) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        // No /proc: the group alone, asked with signal 0 (a zombie leader counts).
        // SAFETY: signal 0 only checks the group exists.
        if unsafe { libc::killpg(pgid as libc::pid_t, 0) } == 0 {
            out.insert(pgid);
        }
        return out;
    };
    let needle = marker.map(|m| format!("{MARK_ENV}={m}").into_bytes());
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Some((state, pgrp)) = stat_of(pid) else {
            continue;
        };
        if state == 'Z' || state == 'X' {
            continue;
        }
        let in_group = pgrp == pgid;
        let marked = !in_group
            && needle.as_ref().is_some_and(|n| {
                std::fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == n.as_slice()))
            });
        if in_group || marked {
            out.insert(pid);
        }
    }
    out
}

/// The state letter and process group of `pid`, from `/proc/PID/stat` (`pid (comm) S ppid
/// pgrp …`; `comm` may hold spaces and parentheses, so the fields are read after the last `)`).
fn stat_of(pid: u32) -> Option<(char, u32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    #[test]
    fn a_group_and_its_setsid_descendant_are_all_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("setsid.pid");
        // A shell that ignores SIGTERM (so SIGKILL is needed), a background sleep in its group,
        // and a `setsid` sleep in a session of its own.
        let script = format!(
            "trap '' TERM; sleep 300 & setsid sh -c 'echo $$ > {}; exec sleep 300' & wait",
            pidfile.display()
        );
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &script]).stdin(Stdio::null());
        in_new_group(&mut cmd);
        let token = mark(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        let pgid = child.id();
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(&pidfile).map_or(true, |s| s.trim().is_empty()) {
            assert!(Instant::now() < deadline, "the setsid child did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        let setsid_pid: u32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_ne!(stat_of(setsid_pid).unwrap().1, pgid, "it left the group");
        let before = live_members(pgid, Some(&token), std::process::id());
        assert!(
            before.contains(&pgid) && before.contains(&setsid_pid),
            "{before:?}"
        );
        assert!(before.len() >= 3, "{before:?}");

        let started = Instant::now();
        let outcome = terminate_marked(pgid, Some(&token), Duration::from_millis(300));
        child.wait().unwrap();
        assert!(outcome.found >= 3, "{outcome:?}");
        assert!(
            outcome.killed >= 1,
            "the shell ignored SIGTERM: {outcome:?}"
        );
        assert_eq!(outcome.left, 0, "{outcome:?}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        assert!(
            live_members(pgid, Some(&token), std::process::id()).is_empty(),
            "nothing of the group or the mark runs"
        );
        assert!(stat_of(setsid_pid).is_none_or(|(s, _)| s == 'Z'));
    }

    #[test]
    fn terminating_the_descendants_spares_the_leader() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 300 & sleep 300 & wait"])
            .stdin(Stdio::null());
        in_new_group(&mut cmd);
        let token = mark(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        let pgid = child.id();
        let deadline = Instant::now() + Duration::from_secs(10);
        while live_members(pgid, Some(&token), std::process::id()).len() < 3 {
            assert!(Instant::now() < deadline, "the sleeps did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        let outcome = terminate_descendants(pgid, Some(&token), Duration::from_secs(2));
        assert_eq!(outcome.found, 2, "{outcome:?}");
        assert_eq!(outcome.left, 0, "{outcome:?}");
        // The shell's `wait` returns once its children are gone: it exits on its own.
        let status = child.wait().unwrap();
        assert!(status.success() || status.code().is_some(), "{status}");
    }

    #[test]
    fn kill_group_ends_a_group_at_once_and_spares_its_caller() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "trap '' TERM; sleep 300 & wait"])
            .stdin(Stdio::null());
        in_new_group(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        let pgid = child.id();
        assert!(!signal_group(0, 0) && !signal_group(std::process::id(), 0));
        // SAFETY: getpgrp has no preconditions.
        let own = u32::try_from(unsafe { libc::getpgrp() }).unwrap();
        assert!(
            !kill_group(own),
            "the caller's own group is never signalled"
        );
        assert!(kill_group(pgid));
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
        let deadline = Instant::now() + Duration::from_secs(5);
        while !live_members(pgid, None, std::process::id()).is_empty() {
            assert!(
                Instant::now() < deadline,
                "the group's sleep is still there"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!kill_group(pgid), "a gone group");
    }

    #[test]
    fn a_gone_group_and_the_callers_own_are_left_alone() {
        assert_eq!(terminate_group(0, Duration::ZERO), Terminated::default());
        assert_eq!(
            terminate_group(std::process::id(), Duration::ZERO),
            Terminated::default()
        );
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(
            terminate_group(pid, Duration::from_millis(50)),
            Terminated::default()
        );
    }
}
