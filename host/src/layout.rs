//! The `contexts/` tree (DESIGN §2) and the file operations that keep it consistent.
//!
//! ```text
//! contexts/tasks.db  running/{uuid}/  paused/{uuid}/  completed/{uuid}/  .cache/
//! ```
//! Task directories are named only by canonical UUIDs ([`parse_uuid`]), so no user input can
//! reach a path outside the tree. Every folder of the tree is created owner-only
//! ([`crate::task_dir::DIR_MODE`]). Files outside task directories are replaced atomically
//! ([`atomic_write`]: temp file in the same directory, fsync, rename, fsync the directory); the
//! files of a task directory are reached only through its [`crate::task_dir::TaskDir`]. Task
//! directories move between the state folders only through [`crate::lifecycle`] (one `rename`
//! on the same filesystem).

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// File name of the SQLite task database in the contexts/ directory ([`Layout::db_path`]).
pub const DB_FILE: &str = "tasks.db";

/// Prefix of a directory `ctxhost cleanup` is deleting, in `completed/` (`.deleting-{uuid}`).
pub const DELETING_PREFIX: &str = ".deleting-";

/// Where a task directory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DirState {
    /// `running/`
    Running,
    /// `paused/`
    Paused,
    /// `completed/` (completed, failed and stopped tasks)
    Completed,
}

impl DirState {
    /// All states, in the order they are searched.
    pub const ALL: [DirState; 3] = [DirState::Running, DirState::Paused, DirState::Completed];

    /// Folder name under `contexts/`.
    pub fn dir_name(self) -> &'static str {
        match self {
            DirState::Running => "running",
            DirState::Paused => "paused",
            DirState::Completed => "completed",
        }
    }
}

impl fmt::Display for DirState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.dir_name())
    }
}

/// Parse a task UUID given by a user or read from the database, returning its canonical form
/// (hyphenated, lowercase). Anything that is not a UUID is rejected, so the result is always
/// safe as one path component.
pub fn parse_uuid(s: &str) -> anyhow::Result<String> {
    let t = s.trim();
    match uuid::Uuid::parse_str(t) {
        Ok(u) if t.len() == 36 => Ok(u.hyphenated().to_string()),
        _ => bail!(
            "`{s}` is not a task UUID (expected the form 01234567-89ab-cdef-0123-456789abcdef)"
        ),
    }
}

/// The `contexts/` directory.
#[derive(Debug, Clone)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    /// A layout rooted at `root` (nothing is created).
    pub fn new(root: impl Into<PathBuf>) -> Layout {
        Layout { root: root.into() }
    }

    /// The `contexts/` directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `contexts/tasks.db`.
    pub fn db_path(&self) -> PathBuf {
        self.root.join(DB_FILE)
    }

    /// `contexts/.workspaces/`: the worktrees ctxhost makes for tasks (`<uuid>/`) and the
    /// mirrors they are made from (`cache/`); see [`crate::workspace::checkout`].
    pub fn workspaces_dir(&self) -> PathBuf {
        self.root.join(".workspaces")
    }

    /// The managed worktree of task `uuid`: `contexts/.workspaces/<uuid>`.
    pub fn task_workspace(&self, uuid: &str) -> PathBuf {
        self.workspaces_dir().join(uuid)
    }

    /// `contexts/.cache/`: compiled components.
    pub fn cache_dir(&self) -> PathBuf {
        self.root.join(".cache")
    }

    /// `contexts/{running,paused,completed}/`.
    pub fn state_dir(&self, state: DirState) -> PathBuf {
        self.root.join(state.dir_name())
    }

    /// `contexts/{state}/{uuid}/`. `uuid` must be canonical (see [`parse_uuid`]).
    pub fn task_dir(&self, state: DirState, uuid: &str) -> PathBuf {
        debug_assert!(
            parse_uuid(uuid).is_ok_and(|u| u == uuid),
            "non-canonical uuid {uuid}"
        );
        self.state_dir(state).join(uuid)
    }

    /// Whether the tree exists (the root and its three state folders).
    pub fn exists(&self) -> bool {
        self.root.is_dir() && DirState::ALL.iter().all(|s| self.state_dir(*s).is_dir())
    }

    /// Why the tree cannot be created here (checked without creating anything), `None` when it
    /// can: the root exists and is not a directory, or it is missing and so is its parent. The
    /// host creates the root itself, never missing folders above it (a mistyped `base_dir`
    /// must not grow a tree under `/`).
    pub fn creation_blocker(&self) -> Option<String> {
        let root = &self.root;
        if root.is_dir() {
            return None;
        }
        if fs::symlink_metadata(root).is_ok() {
            return Some(format!("{} exists and is not a directory", root.display()));
        }
        let parent = root
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        (!parent.is_dir()).then(|| {
            format!(
                "its parent directory {} does not exist (ctxhost creates the contexts directory, never the folders above it)",
                parent.display()
            )
        })
    }

    /// Create the tree if missing (root, state folders, `.cache/`), owner-only. Idempotent
    /// (existing folders keep their mode; `ctxhost fsck` reports looser ones). Error, creating
    /// nothing, when the root's parent does not exist ([`Layout::creation_blocker`]).
    pub fn ensure(&self) -> anyhow::Result<()> {
        if let Some(why) = self.creation_blocker() {
            bail!(
                "cannot create the contexts directory {}: {why}",
                self.root.display()
            );
        }
        for dir in [
            self.root.clone(),
            self.state_dir(DirState::Running),
            self.state_dir(DirState::Paused),
            self.state_dir(DirState::Completed),
            self.cache_dir(),
        ] {
            create_private_dir_all(&dir)
                .with_context(|| format!("cannot create directory {}", dir.display()))?;
        }
        Ok(())
    }

    /// Where the directory of `uuid` is now, if anywhere.
    pub fn find_task_dir(&self, uuid: &str) -> Option<(DirState, PathBuf)> {
        DirState::ALL
            .into_iter()
            .map(|s| (s, self.task_dir(s, uuid)))
            .find(|(_, p)| p.is_dir())
    }
}

/// The umask the process was started with, saved by [`use_owner_only_umask`].
static INHERITED_UMASK: std::sync::OnceLock<libc::mode_t> = std::sync::OnceLock::new();

/// Make every file and folder this process creates owner-only (umask 077), whoever creates it:
/// the host, SQLite (tasks.db and its WAL files), and the components writing their task
/// directories through WASI. Called once at the start of the `ctxhost` binary, before any
/// thread exists. Child processes that are not ctxhost's (MCP servers, which write the user's
/// project) get the inherited umask back ([`inherited_umask`]).
pub fn use_owner_only_umask() {
    // SAFETY: umask only swaps the process's file mode mask; it cannot fail.
    let old = unsafe { libc::umask(0o077) };
    let _ = INHERITED_UMASK.set(old);
}

/// The umask the process had before [`use_owner_only_umask`], if it was called.
pub fn inherited_umask() -> Option<libc::mode_t> {
    INHERITED_UMASK.get().copied()
}

/// Create `dir` and its missing parents with mode 0700 ([`crate::task_dir::DIR_MODE`]).
pub fn create_private_dir_all(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(crate::task_dir::DIR_MODE)
        .create(dir)
}

/// Replace `path` with `bytes` atomically (the new file owner-only, 0600): write a temporary file in the same directory,
/// fsync it, rename it over `path`, fsync the directory. Readers see the old or the new
/// content, never a mix; after a crash, one of the two. The temporary, `.NAME.tmp-PID-N`, is
/// unique per call ([`crate::task_dir::temp_name`], shared with [`crate::task_dir::TaskDir`]),
/// so threads of one process may replace the same file at once (the last rename wins).
///
/// Only for files outside task directories, reached by a path the host built itself
/// (`config.yaml` at `ctxhost init`, the database binding next to tasks.db): a file inside a
/// task directory is replaced with [`crate::task_dir::TaskDir::write_atomic`], whose cap-std
/// handle never follows a link out of the directory that a component could have planted there.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    atomic_write_with(path, |w| w.write_all(bytes))
}

/// [`atomic_write`] with the content streamed by `write` into the temporary file (buffered), so
/// a file of any size is replaced with a bounded amount of memory. On error the temporary file
/// is deleted and `path` is unchanged.
pub fn atomic_write_with(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .with_context(|| format!("{} has no file name", path.display()))?;
    let tmp = dir.join(crate::task_dir::temp_name(&name.to_string_lossy()));
    let result = (|| -> io::Result<()> {
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(crate::task_dir::FILE_MODE)
            .open(&tmp)?;
        let mut out = io::BufWriter::with_capacity(64 * 1024, f);
        write(&mut out)?;
        let f = out.into_inner().map_err(io::IntoInnerError::into_error)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    sync_dir(dir)
}

/// fsync a directory, so a rename or create in it is durable.
pub fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("cannot fsync directory {}", dir.display()))
}

/// The environment variable that overrides [`hostname`].
pub const HOSTNAME_ENV: &str = "CTXHOST_HOSTNAME";

/// This machine's host name as ctxhost records it (rows, metadata.json, worker ids):
/// `CTXHOST_HOSTNAME` when set (hosts whose names are not unique, such as containers; tests
/// that play several hosts on one machine), else the kernel's, else `localhost`. A pid is
/// only checked on the host that recorded it, so workers on different machines must have
/// different names.
pub fn hostname() -> String {
    if let Ok(name) = std::env::var(HOSTNAME_ENV)
        && !name.trim().is_empty()
    {
        return name.trim().to_string();
    }
    let mut buf = [0u8; 256];
    // SAFETY: buf is valid for buf.len() bytes; gethostname writes at most that many.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc == 0 {
        let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        let name = String::from_utf8_lossy(&buf[..end]).trim().to_string();
        if !name.is_empty() {
            return name;
        }
    }
    "localhost".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_uuid_accepts_only_uuids_and_canonicalises() {
        let u = "0193A4B2-1C3D-7E8F-9A0B-1C2D3E4F5A6B";
        assert_eq!(parse_uuid(u).unwrap(), u.to_lowercase());
        for bad in [
            "",
            "..",
            "../etc",
            "x",
            "0193a4b21c3d7e8f9a0b1c2d3e4f5a6b",
            "{0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b}",
            "0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b/..",
        ] {
            assert!(parse_uuid(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tree_is_created_and_directories_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().join("contexts"));
        assert!(!layout.exists());
        layout.ensure().unwrap();
        assert!(layout.exists());
        for state in DirState::ALL {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(layout.state_dir(state))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700, "{state}");
        }
        let uuid = parse_uuid("0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b").unwrap();
        assert_eq!(layout.find_task_dir(&uuid), None);
        fs::create_dir(layout.task_dir(DirState::Paused, &uuid)).unwrap();
        assert_eq!(layout.find_task_dir(&uuid).unwrap().0, DirState::Paused);
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.json");
        atomic_write(&p, b"one").unwrap();
        atomic_write(&p, b"two").unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "two");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
