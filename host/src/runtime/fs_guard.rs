//! The task directory as the host guards it against its components (DESIGN.md §8):
//!
//! - [`refuse_symlinks`]: WASI's `descriptor.symlink-at` is replaced by one that answers
//!   `not-permitted`, so a component can never leave a link in its task directory (a link
//!   named like a file the host writes, pointing out of the directory, is how a component
//!   could make the host write elsewhere). Everything else of `wasi:filesystem` is wasmtime's.
//! - [`DirBudget`]: the byte budget of the task directory (`context_storage.max_task_dir_mib`),
//!   measured while a call runs (from the epoch callback, every [`SCAN_INTERVAL`]) and when it
//!   returns, so a component writing hundreds of MiB is stopped within about one interval of
//!   writing past the budget.

use std::path::Path;
use std::time::{Duration, Instant};

use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::Descriptor;
use wasmtime_wasi::p2::bindings::sync::filesystem::types::ErrorCode;

use crate::task_dir::TaskDir;

/// The WASI filesystem interface the host's linker provides (semver-compatible imports, such
/// as `wasi:filesystem/types@0.2.6`, resolve to it).
const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// Shadow `descriptor.symlink-at` in `linker` (which already has WASI p2) with a function that
/// refuses every link with `error-code::not-permitted`.
pub(crate) fn refuse_symlinks<T: 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let result = (|| {
        let mut fs = linker.instance(FILESYSTEM_TYPES)?;
        fs.func_wrap(
            "[method]descriptor.symlink-at",
            |_store, (_dir, _target, _link): (Resource<Descriptor>, String, String)| {
                Ok((Err::<(), ErrorCode>(ErrorCode::NotPermitted),))
            },
        )
    })();
    linker.allow_shadowing(false);
    result
}

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
