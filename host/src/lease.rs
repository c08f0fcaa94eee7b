//! Leases on the process side: who a worker is ([`WorkerId`]), and the [`Heartbeat`] of a task
//! process, which renews its task's lease and stops the process when it cannot.
//!
//! A running task's row holds a lease (worker id, task process, expiry: [`crate::db::lease`]).
//! Its task process renews it every third of `worker.lease_secs` from a thread of its own. When the database cannot be reached the task keeps running (its other database
//! writes wait and retry), until the last renewal is [`FENCE_FRACTION`] of a lease old: then
//! the process stops itself ([`EXIT_LEASE_LOST`]), before any other worker may take the task
//! over, and leaves its files as a kill would (complete lines, recovered by whoever takes the
//! task). It also stops when a renewal finds the task taken over by someone else. Durations
//! are measured on this host's monotonic clock and expiries on the database server's, so
//! neither depends on the hosts' clocks agreeing; what the margin cannot cover is a process
//! frozen longer than a lease (SIGSTOP, a suspended VM), which may write once after waking.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::db::{SharedDb, Status};

/// Exit status of a task process that stopped itself because it lost its lease
/// (`EX_TEMPFAIL`): the fencing exit. Its worker recovers the task without counting a crash
/// (it never uses up `worker.max_crashes`: a database outage is not the task's fault), and
/// it runs again.
pub const EXIT_LEASE_LOST: i32 = 75;

/// Part of a lease after the last successful renewal at which a task process stops itself.
pub const FENCE_FRACTION: f64 = 0.8;

/// A worker's identity in the `worker_id` column: `hostname:pid:nonce` (the nonce keeps ids
/// unique when a pid is reused, or two hosts share a name and a pid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerId(String);

impl WorkerId {
    /// A new id for this process on `hostname`.
    pub fn new(hostname: &str) -> WorkerId {
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        WorkerId(format!("{hostname}:{}:{}", std::process::id(), &nonce[..8]))
    }

    /// An id given by the worker that started this process (`task-exec --worker-id`).
    pub fn given(id: &str) -> WorkerId {
        WorkerId(id.to_string())
    }

    /// The text stored in the row.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for WorkerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How often a lease of length `lease` is renewed: a third of it.
pub fn renew_interval(lease: Duration) -> Duration {
    lease / 3
}

/// How long after its last renewal a task process stops itself.
pub fn fence_after(lease: Duration) -> Duration {
    lease.mul_f64(FENCE_FRACTION)
}

/// The running heartbeat of one task process; stopped by [`Heartbeat::stop`] or when dropped.
pub struct Heartbeat {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// What the renewing thread shares with the watchdog.
struct Shared {
    /// When the last successful renewal was sent.
    renewed: Mutex<Instant>,
    /// The task ended (the row is no longer running under this process): nothing to fence.
    done: AtomicBool,
}

impl Heartbeat {
    /// Start renewing the lease of task `uuid`, held by `worker_id` and this process, every
    /// [`renew_interval`] on the task process's connection `db` (a renewal waits its turn with
    /// the task's own statements), and the watchdog that stops this process [`fence_after`]
    /// the last renewal that got through, or as soon as a renewal finds the task taken over.
    /// `renewed` is when the claim (the first lease) was made.
    pub fn start(
        db: SharedDb,
        uuid: String,
        worker_id: String,
        lease: Duration,
        renewed: Instant,
    ) -> anyhow::Result<Heartbeat> {
        let interval = renew_interval(lease);
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared {
            renewed: Mutex::new(renewed),
            done: AtomicBool::new(false),
        });
        let pid = std::process::id();

        let renewer = {
            let (stop, shared, uuid) = (stop.clone(), shared.clone(), uuid.clone());
            std::thread::Builder::new()
                .name("lease-renew".into())
                .spawn(move || renew_loop(&db, &uuid, &worker_id, pid, lease, &stop, &shared))?
        };
        let watchdog = {
            let (stop, shared) = (stop.clone(), shared.clone());
            let limit = fence_after(lease);
            std::thread::Builder::new()
                .name("lease-watchdog".into())
                .spawn(move || {
                    let tick = (interval / 4).clamp(Duration::from_millis(20), Duration::from_millis(250));
                    while !stop.load(Ordering::SeqCst) && !shared.done.load(Ordering::SeqCst) {
                        let since = shared
                            .renewed
                            .lock()
                            .map(|t| t.elapsed())
                            .unwrap_or_default();
                        if since >= limit {
                            fence(
                                &uuid,
                                &format!(
                                    "its lease could not be renewed for {:.1} s (worker.lease_secs = {}; the database is unreachable)",
                                    since.as_secs_f64(),
                                    lease.as_secs_f64()
                                ),
                            );
                        }
                        std::thread::park_timeout(tick);
                    }
                })?
        };
        Ok(Heartbeat {
            stop,
            threads: vec![renewer, watchdog],
        })
    }

    /// Stop renewing (the task's status changed through this process).
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.halt();
    }
}

fn renew_loop(
    db: &SharedDb,
    uuid: &str,
    worker_id: &str,
    pid: u32,
    lease: Duration,
    stop: &AtomicBool,
    shared: &Shared,
) {
    let interval = renew_interval(lease);
    loop {
        std::thread::park_timeout(interval);
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let sent = Instant::now();
        if crate::failpoint::is_set("lease:unreachable") {
            tracing::warn!(%uuid, "cannot renew the task's lease: failpoint lease:unreachable");
            continue;
        }
        match db.with(|db| db.renew_lease(uuid, worker_id, pid, lease)) {
            Ok(true) => {
                if let Ok(mut t) = shared.renewed.lock() {
                    *t = sent;
                }
            }
            Ok(false) => {
                // Our own end (the row left `running` under this process), or a takeover.
                match db.with(|db| db.get(uuid)) {
                    Ok(Some(row))
                        if row.status != Status::Running
                            && row.process_id == Some(i64::from(pid))
                            && row.worker_id.as_deref() == Some(worker_id) =>
                    {
                        shared.done.store(true, Ordering::SeqCst);
                        return;
                    }
                    Ok(row) => {
                        if stop.load(Ordering::SeqCst) {
                            return;
                        }
                        let who = row
                            .and_then(|r| r.worker_id)
                            .unwrap_or_else(|| "nobody".into());
                        fence(
                            uuid,
                            &format!("the task was taken over by {who} (its lease had expired)"),
                        );
                    }
                    Err(e) => tracing::warn!(%uuid, "cannot read the task's row: {e}"),
                }
            }
            Err(e) => tracing::warn!(%uuid, "cannot renew the task's lease: {e}"),
        }
    }
}

/// Stop this task process at once: another worker may take (or has taken) the task over.
fn fence(uuid: &str, why: &str) -> ! {
    tracing::error!(
        %uuid,
        "stopping this task process: {why}; the task is recovered and continued by a worker that can reach the database"
    );
    std::process::exit(EXIT_LEASE_LOST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_ids_name_the_host_and_process_and_differ() {
        let a = WorkerId::new("host-a");
        let b = WorkerId::new("host-a");
        assert!(
            a.as_str()
                .starts_with(&format!("host-a:{}:", std::process::id()))
        );
        assert_ne!(a, b);
        assert_eq!(WorkerId::given("x:1:y").as_str(), "x:1:y");
    }

    #[test]
    fn renewals_and_the_fence_fit_in_the_lease() {
        let lease = Duration::from_secs(30);
        assert_eq!(renew_interval(lease), Duration::from_secs(10));
        assert_eq!(fence_after(lease), Duration::from_secs(24));
        assert!(renew_interval(lease) * 2 < fence_after(lease));
    }
}
