//! [`PlanningStore`]: the slot for a task's planning history (`planning/`, DESIGN.md §9: `plan`,
//! `revision`, `reflection`, `verification` lines). Planning comes with the strategy plugins;
//! until a strategy turns it on, no task has one and [`crate::task::TaskContext::planning`] is
//! `None`.

use std::path::PathBuf;

use ctxhost_format::files::PLANNING_DIR;

use crate::task_dir::TaskDir;

/// The planning history of one task.
#[derive(Debug, Clone)]
pub struct PlanningStore {
    dir: TaskDir,
}

impl PlanningStore {
    /// The planning store of the task directory `dir`, if it has a `planning/` folder (a
    /// folder, not a link).
    pub fn existing(dir: &TaskDir) -> Option<PlanningStore> {
        dir.is_dir(PLANNING_DIR)
            .then(|| PlanningStore { dir: dir.clone() })
    }

    /// The `planning/` folder, for messages.
    pub fn dir(&self) -> PathBuf {
        self.dir.file_path(PLANNING_DIR)
    }
}
