//! A pids cgroup per sandboxed command: the only process limit that binds root (RLIMIT_NPROC
//! does not). Made under cgroup v1's `pids` hierarchy or cgroup v2's root when it delegates
//! `pids`; `None` when neither can be written (not root, no controller).
//!
//! The child joins by writing "0" (itself) to a file opened before the fork. Under cgroup v1
//! that file is `tasks`, which moves the calling thread only: the child of a fork has one
//! thread, so it moves the whole process, and the kernel skips the global threadgroup lock
//! whose write side waits for an RCU grace period (`cgroup.procs` took 5–17 ms per command
//! under load, `tasks` 0.03 ms: bench/README.md "Issue 39"). Under v2, `cgroup.procs` (v2's
//! `cgroup.threads` needs a threaded cgroup).

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Counter making names unique within this process.
static SEQ: AtomicU64 = AtomicU64::new(0);

/// One cgroup, removed when dropped (after its processes are gone).
pub struct PidsCgroup {
    dir: PathBuf,
    /// `tasks` (v1) or `cgroup.procs` (v2), open for writing: the child writes "0" to join.
    pub procs: File,
}

impl PidsCgroup {
    /// Make a cgroup allowing at most `max` processes and threads.
    pub fn create(max: u64) -> Option<PidsCgroup> {
        let v1 = PathBuf::from("/sys/fs/cgroup/pids");
        let v2 = PathBuf::from("/sys/fs/cgroup");
        let (base, join_file) = if v1.join("cgroup.procs").exists() {
            (v1, "tasks")
        } else if std::fs::read_to_string(v2.join("cgroup.subtree_control"))
            .is_ok_and(|s| s.split_whitespace().any(|c| c == "pids"))
        {
            (v2, "cgroup.procs")
        } else {
            return None;
        };
        let dir = base.join(format!(
            "ctxhost-sandbox-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir).ok()?;
        let made = (|| {
            std::fs::write(dir.join("pids.max"), max.to_string()).ok()?;
            std::fs::OpenOptions::new()
                .write(true)
                .open(dir.join(join_file))
                .ok()
        })();
        match made {
            Some(procs) => Some(PidsCgroup { dir, procs }),
            None => {
                let _ = std::fs::remove_dir(&dir);
                None
            }
        }
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        // Processes killed a moment ago may still be exiting: retry for up to a second.
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        tracing::warn!(dir = %self.dir.display(), "a sandbox's pids cgroup could not be removed");
    }
}
