//! Process groups of child processes: start a command as the leader of a new group and end the
//! whole group (SIGTERM, a grace period, then SIGKILL), so grandchildren that stayed in the group
//! end with it. Used by the built-in `shell` tool's sandbox ([`crate::sandbox`]).

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

/// Make `cmd` start as the leader of a new process group (its pgid is its pid).
pub fn in_new_group(cmd: &mut Command) -> &mut Command {
    cmd.process_group(0)
}

/// End the process group `pgid`: SIGTERM to every member, then, after at most `grace` (sooner
/// when `gone` says the leader has exited), SIGKILL to the group. `gone` is polled every 10 ms.
/// A group that no longer exists is not an error (ESRCH is ignored).
pub fn terminate_group(pgid: u32, grace: Duration, mut gone: impl FnMut() -> bool) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    // SAFETY: killpg only sends a signal; pgid > 1 never names this process's own callers'
    // "every process" (0 or -1) groups.
    unsafe { libc::killpg(pgid, libc::SIGTERM) };
    let end = Instant::now() + grace;
    while Instant::now() < end && !gone() {
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: as above.
    unsafe { libc::killpg(pgid, libc::SIGKILL) };
}
