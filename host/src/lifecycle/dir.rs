//! The directory half of a transition: moving a task directory between the state folders
//! (one `rename`, then fsync of both folders), creating it, or deleting it. Each step is
//! idempotent, so a roll-forward racing the process that wrote the row is harmless: whoever
//! renames first wins and the other finds the work done.

use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use anyhow::{Context, bail};

use crate::layout::{DELETING_PREFIX, DirState, Layout, sync_dir};

/// The lock serialising directory moves and crash recovery of one contexts tree: an exclusive
/// `flock` on `contexts/running/`, released when dropped (or when the process dies).
pub struct TreeLock {
    _dir: File,
}

/// Take the tree lock of `layout` (waits for another holder).
pub fn lock_tree(layout: &Layout) -> anyhow::Result<TreeLock> {
    let path = layout.state_dir(DirState::Running);
    let dir = File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
    loop {
        // SAFETY: a valid open file descriptor; flock has no memory effects.
        let rc = unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX) };
        if rc == 0 {
            return Ok(TreeLock { _dir: dir });
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e).with_context(|| format!("cannot lock {}", path.display()));
        }
    }
}

/// Move the directory of `uuid` from `from/` to `to/` with one rename (atomic on one
/// filesystem), then fsync both folders. Done already (source gone, destination there) is
/// fine; a missing source or an existing destination otherwise is an error.
pub(super) fn move_dir(
    layout: &Layout,
    uuid: &str,
    from: DirState,
    to: DirState,
) -> anyhow::Result<PathBuf> {
    let src = layout.task_dir(from, uuid);
    let dst = layout.task_dir(to, uuid);
    if !src.is_dir() {
        if dst.is_dir() {
            return Ok(dst);
        }
        bail!(
            "cannot move task directory {}: it does not exist",
            src.display()
        );
    }
    if dst.exists() {
        bail!(
            "cannot move task directory {} to {}: the destination exists",
            src.display(),
            dst.display()
        );
    }
    match fs::rename(&src, &dst) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound && dst.is_dir() => return Ok(dst),
        Err(e) => {
            return Err(e).with_context(|| {
                format!(
                    "cannot move task directory {} to {}",
                    src.display(),
                    dst.display()
                )
            });
        }
    }
    sync_dir(&layout.state_dir(from))?;
    sync_dir(&layout.state_dir(to))?;
    Ok(dst)
}

/// Create the (empty) directory of `uuid` in `state/`, owner-only, then fsync the folder.
pub(super) fn create_dir(layout: &Layout, uuid: &str, state: DirState) -> anyhow::Result<PathBuf> {
    let dir = layout.task_dir(state, uuid);
    crate::layout::create_private_dir_all(&dir)
        .with_context(|| format!("cannot create the task directory {}", dir.display()))?;
    sync_dir(&layout.state_dir(state))?;
    Ok(dir)
}

/// Delete the directory of `uuid` in `state/`: rename it to `completed/.deleting-{uuid}`
/// (atomic), then delete that tree. An interrupted deletion leaves the `.deleting-` tree,
/// which [`remove_deleting`] finishes.
pub(super) fn delete_dir(layout: &Layout, uuid: &str, state: DirState) -> anyhow::Result<()> {
    let dir = layout.task_dir(state, uuid);
    let doomed = layout
        .state_dir(DirState::Completed)
        .join(format!("{DELETING_PREFIX}{uuid}"));
    if dir.is_dir() {
        fs::rename(&dir, &doomed)
            .with_context(|| format!("cannot move {} to {}", dir.display(), doomed.display()))?;
    }
    remove_deleting(layout, uuid)
}

/// Delete `completed/.deleting-{uuid}` if it exists, then fsync `completed/`.
pub(super) fn remove_deleting(layout: &Layout, uuid: &str) -> anyhow::Result<()> {
    let completed = layout.state_dir(DirState::Completed);
    let doomed = completed.join(format!("{DELETING_PREFIX}{uuid}"));
    match fs::remove_dir_all(&doomed) {
        Ok(()) => sync_dir(&completed),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot delete {}", doomed.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: &str = "0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b";

    #[test]
    fn moves_are_idempotent_and_refuse_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().join("contexts"));
        layout.ensure().unwrap();
        fs::create_dir(layout.task_dir(DirState::Running, U)).unwrap();
        fs::write(layout.task_dir(DirState::Running, U).join("x"), "1").unwrap();
        let dst = move_dir(&layout, U, DirState::Running, DirState::Completed).unwrap();
        assert_eq!(fs::read_to_string(dst.join("x")).unwrap(), "1");
        assert_eq!(layout.find_task_dir(U).unwrap().0, DirState::Completed);
        // Done already: fine.
        move_dir(&layout, U, DirState::Running, DirState::Completed).unwrap();
        // Nowhere: an error.
        assert!(move_dir(&layout, U, DirState::Paused, DirState::Running).is_err());
        // Never over an existing directory.
        create_dir(&layout, U, DirState::Paused).unwrap();
        assert!(move_dir(&layout, U, DirState::Paused, DirState::Completed).is_err());
        delete_dir(&layout, U, DirState::Completed).unwrap();
        assert!(!layout.task_dir(DirState::Completed, U).exists());
        assert_eq!(
            fs::read_dir(layout.state_dir(DirState::Completed))
                .unwrap()
                .count(),
            0
        );
    }
}
