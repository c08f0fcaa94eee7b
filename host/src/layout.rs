//! The `contexts/` tree (DESIGN §2) and the file operations that keep it consistent.
//!
//! ```text
//! contexts/tasks.db  running/{uuid}/  paused/{uuid}/  completed/{uuid}/  .cache/
//! ```
//! Task directories are named only by canonical UUIDs ([`parse_uuid`]), so no user input can
//! reach a path outside the tree. Files are replaced atomically ([`atomic_write`]: temp file in
//! the same directory, fsync, rename, fsync the directory) and task directories move between
//! states by one `rename` on the same filesystem ([`Layout::move_task_dir`]).

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

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
        self.root.join("tasks.db")
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

    /// Create the tree if missing (root, state folders, `.cache/`). Idempotent.
    pub fn ensure(&self) -> anyhow::Result<()> {
        for dir in [
            self.root.clone(),
            self.state_dir(DirState::Running),
            self.state_dir(DirState::Paused),
            self.state_dir(DirState::Completed),
            self.cache_dir(),
        ] {
            fs::create_dir_all(&dir)
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

    /// Move the directory of `uuid` from `from/` to `to/` with one rename (atomic on one
    /// filesystem), then fsync both parent folders. Errors if the source is missing or the
    /// destination already exists.
    pub fn move_task_dir(
        &self,
        uuid: &str,
        from: DirState,
        to: DirState,
    ) -> anyhow::Result<PathBuf> {
        let src = self.task_dir(from, uuid);
        let dst = self.task_dir(to, uuid);
        if !src.is_dir() {
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
        fs::rename(&src, &dst).with_context(|| {
            format!(
                "cannot move task directory {} to {}",
                src.display(),
                dst.display()
            )
        })?;
        sync_dir(&self.state_dir(from))?;
        sync_dir(&self.state_dir(to))?;
        Ok(dst)
    }
}

/// Replace `path` with `bytes` atomically: write a temporary file in the same directory,
/// fsync it, rename it over `path`, fsync the directory. Readers see the old or the new
/// content, never a mix; after a crash, one of the two.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .with_context(|| format!("{} has no file name", path.display()))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| -> io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
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

/// fsync `path` if it exists (step boundaries: before each LLM call). A missing file is fine.
pub fn sync_file(path: &Path) -> anyhow::Result<()> {
    match File::open(path) {
        Ok(f) => f
            .sync_all()
            .with_context(|| format!("cannot fsync {}", path.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot open {} to fsync it", path.display())),
    }
}

/// fsync a directory, so a rename or create in it is durable.
pub fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("cannot fsync directory {}", dir.display()))
}

/// Append one line (`line` without its `\n`) to a JSONL file with a single write, creating it
/// if needed. Whole lines only: a reader never sees half of one unless the process dies mid-write.
pub fn append_line(path: &Path, line: &str) -> anyhow::Result<()> {
    debug_assert!(
        !line.contains('\n'),
        "a JSONL line must not contain a newline"
    );
    let mut buf = String::with_capacity(line.len() + 1);
    buf.push_str(line);
    buf.push('\n');
    let mut f = OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .with_context(|| format!("cannot open {} for appending", path.display()))?;
    f.write_all(buf.as_bytes())
        .with_context(|| format!("cannot append to {}", path.display()))
}

/// The task key in metadata.json (DESIGN §2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataTaskKey {
    pub task_source: String,
    pub owner: Option<String>,
    pub repo: Option<String>,
    pub task_type: Option<String>,
    pub task_id: Option<String>,
}

/// The settings in metadata.json (DESIGN §2). Never holds the API key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetadataConfig {
    pub llm_provider: String,
    pub model: String,
    pub context_length: u64,
    pub compression_threshold: f64,
}

/// `metadata.json` of a task directory:
/// `{uuid, task_key{task_source, owner, repo, task_type, task_id}, created_at, process_id,
///   hostname, config{llm_provider, model, context_length, compression_threshold}, user}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    pub uuid: String,
    pub task_key: MetadataTaskKey,
    /// RFC 3339 UTC, the task's submit time.
    pub created_at: String,
    /// The process that first ran the task.
    pub process_id: u32,
    pub hostname: String,
    pub config: MetadataConfig,
    pub user: Option<String>,
}

/// File name of the metadata file in a task directory.
pub const METADATA_FILE: &str = "metadata.json";

/// Write `task_dir/metadata.json` atomically unless it exists (it is written once; a resumed
/// task keeps the original). Returns whether it was written.
pub fn write_metadata_once(task_dir: &Path, meta: &Metadata) -> anyhow::Result<bool> {
    let path = task_dir.join(METADATA_FILE);
    if path.exists() {
        return Ok(false);
    }
    let mut json = serde_json::to_vec_pretty(meta).context("serialize metadata.json")?;
    json.push(b'\n');
    atomic_write(&path, &json)?;
    Ok(true)
}

/// This machine's host name (from the kernel), or `localhost` if it cannot be read.
pub fn hostname() -> String {
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
    fn tree_and_moves() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().join("contexts"));
        assert!(!layout.exists());
        layout.ensure().unwrap();
        assert!(layout.exists());
        let uuid = parse_uuid("0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b").unwrap();
        fs::create_dir(layout.task_dir(DirState::Running, &uuid)).unwrap();
        fs::write(layout.task_dir(DirState::Running, &uuid).join("x"), "1").unwrap();
        let dst = layout
            .move_task_dir(&uuid, DirState::Running, DirState::Completed)
            .unwrap();
        assert_eq!(fs::read_to_string(dst.join("x")).unwrap(), "1");
        assert_eq!(layout.find_task_dir(&uuid).unwrap().0, DirState::Completed);
        assert!(
            layout
                .move_task_dir(&uuid, DirState::Running, DirState::Completed)
                .is_err()
        );
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

    #[test]
    fn metadata_is_written_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut meta = Metadata {
            uuid: "u".into(),
            task_key: MetadataTaskKey {
                task_source: "local".into(),
                owner: None,
                repo: None,
                task_type: None,
                task_id: None,
            },
            created_at: "2025-01-01T00:00:00.000Z".into(),
            process_id: 1,
            hostname: "h".into(),
            config: MetadataConfig {
                llm_provider: "openai".into(),
                model: "m".into(),
                context_length: 4096,
                compression_threshold: 0.7,
            },
            user: None,
        };
        assert!(write_metadata_once(dir.path(), &meta).unwrap());
        meta.process_id = 2;
        assert!(!write_metadata_once(dir.path(), &meta).unwrap());
        let back: Metadata =
            serde_json::from_str(&fs::read_to_string(dir.path().join(METADATA_FILE)).unwrap())
                .unwrap();
        assert_eq!(back.process_id, 1);
    }

    #[test]
    fn append_line_appends_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        append_line(&p, "{\"a\":1}").unwrap();
        append_line(&p, "{\"a\":2}").unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\"a\":1}\n{\"a\":2}\n");
    }
}
