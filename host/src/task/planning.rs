//! [`PlanningStore`]: the slot for a task's planning history (`planning/`, DESIGN.md §9: `plan`,
//! `revision`, `reflection`, `verification` lines). Planning comes with the strategy plugins;
//! until a strategy turns it on, no task has one and [`crate::task::TaskContext::planning`] is
//! `None`.

use std::path::{Path, PathBuf};

use ctxhost_format::files::PLANNING_DIR;

/// The planning history of one task.
#[derive(Debug, Clone)]
pub struct PlanningStore {
    dir: PathBuf,
}

impl PlanningStore {
    /// The planning store of `task_dir`, if the task has a `planning/` folder.
    pub fn existing(task_dir: &Path) -> Option<PlanningStore> {
        let dir = task_dir.join(PLANNING_DIR);
        dir.is_dir().then_some(PlanningStore { dir })
    }

    /// The `planning/` folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}
