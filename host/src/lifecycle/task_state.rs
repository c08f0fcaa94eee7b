//! `task_state.json` in a task directory: the pause/resume state (DESIGN §2), the record a
//! pause writes before its row changes (also `crate::task::state`).
//!
//! `{"paused_at": RFC 3339, "resume_count": N, "reason": text|null, "resumed_at": RFC 3339|null}`.
//! Written (atomically) by the lifecycle when the task pauses, with `resumed_at: null`; the task
//! context of the process that resumes it sets `resumed_at` and adds 1 to `resume_count` — so a
//! file with `resumed_at` null means "paused, not resumed yet", whoever looks (a crash in between is counted once).

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::task_dir::TaskDir;

/// File name in the task directory.
pub const TASK_STATE_FILE: &str = ctxhost_format::files::TASK_STATE;

/// The content of `task_state.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskState {
    /// When the task last paused (RFC 3339 UTC).
    pub paused_at: String,
    /// Times the task was resumed so far (before this pause's resume).
    pub resume_count: u64,
    /// The `--reason` of `ctxhost pause`, if one was given.
    pub reason: Option<String>,
    /// When a task process resumed the task after this pause; `None` while it is paused.
    #[serde(default)]
    pub resumed_at: Option<String>,
}

/// Read task_state.json of the task directory `dir`; `None` when it does not exist. Errors
/// name the file.
pub fn read(dir: &TaskDir) -> anyhow::Result<Option<TaskState>> {
    let path = dir.show(TASK_STATE_FILE);
    match dir.read_if_exists(TASK_STATE_FILE) {
        Ok(Some(bytes)) => serde_json::from_slice(&bytes)
            .map(Some)
            .with_context(|| format!("{path}: not a task state")),
        Ok(None) => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {path}")),
    }
}

/// Replace task_state.json of `dir` with `state` (temp file, fsync, rename).
pub fn write(dir: &TaskDir, state: &TaskState) -> anyhow::Result<()> {
    let mut json = serde_json::to_vec_pretty(state).context("serialize task_state.json")?;
    json.push(b'\n');
    dir.write_atomic(TASK_STATE_FILE, &json)
        .with_context(|| format!("cannot write {}", dir.show(TASK_STATE_FILE)))
}

/// Record a pause in `dir` at `paused_at`: `resume_count` is the number of resumes so far.
pub fn write_paused(
    dir: &TaskDir,
    paused_at: &str,
    resume_count: u64,
    reason: Option<&str>,
) -> anyhow::Result<()> {
    write(
        dir,
        &TaskState {
            paused_at: paused_at.to_string(),
            resume_count,
            reason: reason.map(str::to_string),
            resumed_at: None,
        },
    )
}

/// If `dir` holds a pause not resumed yet, mark it resumed at `now` (resume_count + 1) and
/// return the new count; `None` when the task was not paused (first run, crash recovery).
pub fn mark_resumed(dir: &TaskDir, now: &str) -> anyhow::Result<Option<u64>> {
    let Some(mut state) = read(dir)? else {
        return Ok(None);
    };
    if state.resumed_at.is_some() {
        return Ok(None);
    }
    state.resume_count += 1;
    state.resumed_at = Some(now.to_string());
    write(dir, &state)?;
    Ok(Some(state.resume_count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_is_resumed_once() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        assert_eq!(read(&dir).unwrap(), None);
        assert_eq!(mark_resumed(&dir, "t1").unwrap(), None);
        write_paused(&dir, "2025-01-01T00:00:00.000Z", 0, Some("lunch")).unwrap();
        let s = read(&dir).unwrap().unwrap();
        assert_eq!(s.reason.as_deref(), Some("lunch"));
        assert_eq!(s.resumed_at, None);
        assert_eq!(mark_resumed(&dir, "t1").unwrap(), Some(1));
        assert_eq!(mark_resumed(&dir, "t2").unwrap(), None, "counted once");
        write_paused(&dir, "t3", 1, None).unwrap();
        assert_eq!(mark_resumed(&dir, "t4").unwrap(), Some(2));
        let s = read(&dir).unwrap().unwrap();
        assert_eq!((s.resume_count, s.resumed_at.as_deref()), (2, Some("t4")));
    }

    #[test]
    fn a_bad_file_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        std::fs::write(tmp.path().join(TASK_STATE_FILE), "{").unwrap();
        let e = format!("{:#}", read(&dir).unwrap_err());
        assert!(e.contains("task_state.json"), "{e}");
    }
}
