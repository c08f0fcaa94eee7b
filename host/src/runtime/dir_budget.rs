//! The byte budget of a task directory (`context_storage.max_task_dir_mib`), as one component
//! instance watches it: measured while a call runs (from the epoch callback, every
//! [`SCAN_INTERVAL`]) and every time it returns (whenever the last scan was), so a component
//! writing hundreds of MiB is stopped within about one interval of writing past the budget.
//! Every byte counts, however deep ([`TaskDir::walk`]).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::task_dir::TaskDir;

/// Least time between two measurements of the task directory during a call (and after one).
pub const SCAN_INTERVAL: Duration = Duration::from_millis(10);

/// The byte budget of one task directory, as one component instance watches it.
pub(crate) struct DirBudget {
    dir: TaskDir,
    limit: u64,
    last_scan: Option<Instant>,
}

impl DirBudget {
    /// The budget of `limit` bytes of the directory at `path`.
    pub(crate) fn new(path: &Path, limit: u64) -> std::io::Result<DirBudget> {
        Ok(DirBudget {
            dir: TaskDir::open(path)?,
            limit,
            last_scan: None,
        })
    }

    /// The budget, bytes.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// The bytes the directory holds if that is over the budget. Measures at most once per
    /// [`SCAN_INTERVAL`] unless `now_anyway`. A directory that cannot be measured counts as
    /// within the budget (the host's own step check reports it).
    pub(crate) fn over(&mut self, now_anyway: bool) -> Option<u64> {
        let now = Instant::now();
        if !now_anyway && self.last_scan.is_some_and(|t| now - t < SCAN_INTERVAL) {
            return None;
        }
        self.last_scan = Some(now);
        match self.dir.disk_usage() {
            Ok(used) if used > self.limit => Some(used),
            Ok(_) => None,
            Err(e) => {
                tracing::debug!(dir = %self.dir.path().display(), "cannot measure the task directory: {e}");
                None
            }
        }
    }
}
