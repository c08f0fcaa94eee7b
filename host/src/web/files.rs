//! The only way the dashboard opens a task's files: a closed list of names inside
//! `contexts/{running,paused,completed}/{uuid}/`, read through the host's one handle on a task
//! directory ([`crate::task_dir::TaskDir`], DESIGN.md §8), so no URL reaches a file outside it.
//!
//! - the UUID is canonical ([`crate::layout::parse_uuid`]), the file a [`TaskFile`] (fixed
//!   names, `tool-results/{seq}.txt` with a number, `planning/{name}.jsonl` with a plain
//!   name): `..`, `/`, encoded slashes and any other name never match;
//! - a symlink anywhere below the state folder (the task directory, `tool-results/`,
//!   `planning/`, the file) is refused, whatever it points to, as is anything that is not a
//!   regular file (a FIFO is opened non-blocking and refused);
//! - refused and missing files look the same to the caller (`None`): the web answer is 404.

use std::fs::File;
use std::path::PathBuf;

use ctxhost_format::files;

use crate::layout::{DirState, Layout};
use crate::remote::view::Source;
use crate::task_dir;

/// A file of a task directory the dashboard may show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskFile {
    /// `metadata.json`
    Metadata,
    /// `messages.jsonl`
    Messages,
    /// `current.jsonl`
    Current,
    /// `summaries.jsonl`
    Summaries,
    /// `tools.jsonl`
    Tools,
    /// `tools.json` (the tool definitions offered to the model)
    ToolDefinitions,
    /// `task_state.json`
    TaskState,
    /// `request.json` (kept by a failed LLM call)
    Request,
    /// `response.json` (kept by a failed LLM call)
    Response,
    /// `llm_calls.jsonl`
    CallLog,
    /// `workspace.json` (what a git workspace was made from)
    Workspace,
    /// `changes.patch` (the workspace's change against its base commit)
    ChangesPatch,
    /// `tool-results/{seq}.txt`: the full output of a tool call that was cut for the context.
    ToolResult(u64),
    /// `planning/{name}`: a planning history file (`*.jsonl`, plain name).
    Planning(String),
}

/// Names of the top-level files, as they appear in URLs (`/tasks/{uuid}/files/{name}`).
const TOP_LEVEL: &[(&str, TaskFile)] = &[
    (files::METADATA, TaskFile::Metadata),
    (files::MESSAGES, TaskFile::Messages),
    (files::CURRENT, TaskFile::Current),
    (files::SUMMARIES, TaskFile::Summaries),
    (files::TOOLS, TaskFile::Tools),
    (files::TOOL_DEFINITIONS, TaskFile::ToolDefinitions),
    (files::TASK_STATE, TaskFile::TaskState),
    (files::REQUEST, TaskFile::Request),
    (files::RESPONSE, TaskFile::Response),
    (files::LLM_CALLS, TaskFile::CallLog),
    (files::WORKSPACE, TaskFile::Workspace),
    (files::CHANGES_PATCH, TaskFile::ChangesPatch),
];

/// Folder of spilled tool outputs.
pub const TOOL_RESULTS_DIR: &str = files::TOOL_RESULTS_DIR;
/// Folder of the planning history.
pub const PLANNING_DIR: &str = files::PLANNING_DIR;

/// The names of the top-level files the dashboard and the API show, in the order they are
/// listed.
pub fn top_level_names() -> impl Iterator<Item = &'static str> {
    TOP_LEVEL.iter().map(|(n, _)| *n)
}

impl TaskFile {
    /// The top-level file called `name`, if it is one the dashboard shows.
    pub fn top_level(name: &str) -> Option<TaskFile> {
        TOP_LEVEL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| f.clone())
    }

    /// `planning/{name}` when `name` is a plain `*.jsonl` file name: ASCII letters, digits,
    /// `-`, `_` and `.`, not starting with `.`, at most 128 bytes.
    pub fn planning(name: &str) -> Option<TaskFile> {
        is_plain_name(name)
            .then(|| name.ends_with(".jsonl"))
            .filter(|ok| *ok)
            .map(|_| TaskFile::Planning(name.to_string()))
    }

    /// `(folder, file name)` inside the task directory.
    fn parts(&self) -> (Option<&'static str>, String) {
        match self {
            TaskFile::ToolResult(seq) => (Some(TOOL_RESULTS_DIR), format!("{seq}.txt")),
            TaskFile::Planning(name) => (Some(PLANNING_DIR), name.clone()),
            other => (
                None,
                TOP_LEVEL
                    .iter()
                    .find(|(_, f)| f == other)
                    .map(|(n, _)| n.to_string())
                    .unwrap_or_default(),
            ),
        }
    }

    /// The path relative to the task directory, for display.
    pub fn relative_path(&self) -> String {
        match self.parts() {
            (Some(dir), name) => format!("{dir}/{name}"),
            (None, name) => name,
        }
    }
}

/// Bytes of a file's start that [`binary_kind`] looks at (as git and grep do).
pub const SNIFF_BYTES: usize = 8 * 1024;

/// Formats told apart by their first bytes ("magic numbers"), for the page's "type".
const MAGIC: &[(&[u8], &str)] = &[
    (b"\x89PNG\r\n\x1a\n", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF87a", "GIF image"),
    (b"GIF89a", "GIF image"),
    (b"%PDF-", "PDF document"),
    (b"PK\x03\x04", "ZIP archive"),
    (b"\x1f\x8b", "gzip data"),
    (b"BZh", "bzip2 data"),
    (b"\xfd7zXZ\x00", "xz data"),
    (b"\x28\xb5\x2f\xfd", "zstd data"),
    (b"\x7fELF", "ELF executable"),
    (b"\x00asm", "WebAssembly module"),
    (b"SQLite format 3\x00", "SQLite database"),
];

/// Whether a file whose first bytes are `head` (up to [`SNIFF_BYTES`]; fewer only when the file
/// is shorter) is binary, and then what kind: a known format's name, else "binary data". A
/// file is binary when its start has a NUL byte or is not UTF-8 (a character cut by the end of
/// `head` does not count); `None`: text, to be shown as such.
pub fn binary_kind(head: &[u8]) -> Option<&'static str> {
    if let Some((_, kind)) = MAGIC.iter().find(|(magic, _)| head.starts_with(magic)) {
        return Some(kind);
    }
    let text = match std::str::from_utf8(head) {
        Ok(_) => true,
        // Only an incomplete character at the very end (the sample cut it) is allowed.
        Err(e) => e.error_len().is_none(),
    };
    (!text || head.contains(&0)).then_some("binary data")
}

/// A plain file name: `[A-Za-z0-9._-]{1,128}`, not starting with `.`.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// An opened task directory (held as a file descriptor, so later opens cannot be redirected).
#[derive(Debug)]
pub struct TaskDir {
    dir: task_dir::TaskDir,
    /// Where it is: a state folder of this host, or a copy downloaded from the bucket.
    pub state: Source,
    /// Its path, for display.
    pub path: PathBuf,
}

/// Open the directory of `uuid` (canonical) in whichever state folder holds it. `None` when
/// there is none, or it is a symlink or not a directory.
pub fn open_task_dir(layout: &Layout, uuid: &str) -> Option<TaskDir> {
    debug_assert!(crate::layout::parse_uuid(uuid).is_ok_and(|u| u == uuid));
    // The state folders are the operator's (they may be symlinks); everything below is not.
    DirState::ALL.into_iter().find_map(|state| {
        let path = layout.task_dir(state, uuid);
        task_dir::TaskDir::open(&path).ok().map(|dir| TaskDir {
            dir,
            state: Source::Local(state),
            path,
        })
    })
}

/// [`open_task_dir`] on a host whose tree is a working copy of the bucket `remote`: this host's
/// directory while it is the bucket's latest, else a read-only copy of the bucket's, downloaded
/// on demand ([`crate::remote::view::for_reading`]). Errors: the bucket cannot be read.
pub fn open_for_reading(
    layout: &Layout,
    remote: Option<&crate::remote::Store>,
    uuid: &str,
) -> anyhow::Result<Option<TaskDir>> {
    if remote.is_none() {
        return Ok(open_task_dir(layout, uuid));
    }
    Ok(
        match crate::remote::view::for_reading(remote, layout, uuid)? {
            Some((Source::Bucket, path)) => {
                task_dir::TaskDir::open(&path).ok().map(|dir| TaskDir {
                    dir,
                    state: Source::Bucket,
                    path,
                })
            }
            Some((Source::Local(_), _)) | None => open_task_dir(layout, uuid),
        },
    )
}

impl TaskDir {
    /// The host's handle on the directory (for readers of the task's history, such as the
    /// compaction record).
    pub fn handle(&self) -> &task_dir::TaskDir {
        &self.dir
    }

    /// Open `file` for reading. `None` when it is missing, a symlink (at any level), or not a
    /// regular file.
    pub fn open(&self, file: &TaskFile) -> Option<File> {
        let (folder, name) = file.parts();
        if name.is_empty() {
            return None;
        }
        // The handle refuses a folder link that leads out; one that stays inside is refused too.
        if let Some(folder) = folder
            && !self.dir.is_dir(folder)
        {
            return None;
        }
        self.dir.open_read(&file.relative_path()).ok()
    }

    /// Why [`TaskDir::open`] gave nothing for `file`, as a sentence for the page: it is missing,
    /// a symbolic link (never followed), or not a regular file.
    pub fn unreadable_reason(&self, file: &TaskFile) -> String {
        let rel = file.relative_path();
        match self.dir.metadata(&rel) {
            Ok(None) => format!("No {rel} in this task's directory."),
            Ok(Some(m)) if m.file_type().is_symlink() => {
                format!("{rel} is a symbolic link; it is not followed.")
            }
            Ok(Some(m)) if !m.is_file() => {
                format!("{rel} is not a regular file; it is not read.")
            }
            Ok(Some(_)) => format!("{rel} cannot be read."),
            Err(e) => format!("{rel} cannot be read: {e}"),
        }
    }

    /// Whether `file` exists as a regular file (same rules as [`TaskDir::open`]).
    pub fn has(&self, file: &TaskFile) -> bool {
        self.open(file).is_some()
    }

    /// The planning history files (`planning/*.jsonl`, regular files with plain names), sorted.
    pub fn planning_files(&self) -> Vec<String> {
        // `entries` never opens `planning/` through a link.
        let Ok(entries) = self.dir.entries(Some(PLANNING_DIR)) else {
            return Vec::new();
        };
        entries
            .into_iter()
            .filter(|(_, meta)| meta.is_file())
            .map(|(name, _)| name)
            .filter(|n| TaskFile::planning(n).is_some())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    const UUID: &str = "0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b";

    fn tree() -> (tempfile::TempDir, Layout, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().join("contexts"));
        layout.ensure().unwrap();
        let task = layout.task_dir(DirState::Completed, UUID);
        std::fs::create_dir(&task).unwrap();
        (dir, layout, task)
    }

    #[test]
    fn names_outside_the_list_are_not_files() {
        for bad in [
            "..",
            "../tasks.db",
            "a/b",
            ".hidden",
            "x.txt",
            "messages.jsonl/",
            "",
        ] {
            assert_eq!(TaskFile::top_level(bad), None, "{bad}");
        }
        for bad in [
            "..",
            "../x.jsonl",
            ".x.jsonl",
            "a/b.jsonl",
            "plan.json",
            "é.jsonl",
        ] {
            assert_eq!(TaskFile::planning(bad), None, "{bad}");
        }
        assert_eq!(
            TaskFile::planning("plan-1.jsonl"),
            Some(TaskFile::Planning("plan-1.jsonl".into()))
        );
        assert_eq!(TaskFile::top_level("request.json"), Some(TaskFile::Request));
        assert_eq!(
            TaskFile::ToolResult(7).relative_path(),
            "tool-results/7.txt"
        );
    }

    #[test]
    fn regular_files_open_and_symlinks_do_not() {
        let (tmp, layout, task) = tree();
        std::fs::write(task.join("messages.jsonl"), "{}\n").unwrap();
        let outside = tmp.path().join("secret.txt");
        std::fs::write(&outside, "secret").unwrap();
        symlink(&outside, task.join("request.json")).unwrap();
        symlink("messages.jsonl", task.join("current.jsonl")).unwrap();
        std::fs::create_dir(task.join("tool-results")).unwrap();
        std::fs::write(task.join("tool-results/1.txt"), "full").unwrap();
        symlink(&outside, task.join("tool-results/2.txt")).unwrap();
        symlink(tmp.path(), task.join("planning")).unwrap();

        let dir = open_task_dir(&layout, UUID).unwrap();
        assert_eq!(dir.state, Source::Local(DirState::Completed));
        assert!(dir.open(&TaskFile::Messages).is_some());
        assert!(dir.open(&TaskFile::Request).is_none(), "symlink out");
        assert!(dir.open(&TaskFile::Current).is_none(), "symlink in");
        assert!(dir.open(&TaskFile::ToolResult(1)).is_some());
        assert!(dir.open(&TaskFile::ToolResult(2)).is_none());
        assert!(dir.open(&TaskFile::ToolResult(3)).is_none());
        assert!(dir.planning_files().is_empty(), "planning/ is a symlink");
        assert!(dir.open(&TaskFile::Planning("secret.txt".into())).is_none());
    }

    #[test]
    fn a_symlinked_task_directory_and_fifos_are_refused() {
        let (tmp, layout, task) = tree();
        std::fs::remove_dir(&task).unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("messages.jsonl"), "{}\n").unwrap();
        symlink(&elsewhere, &task).unwrap();
        assert!(open_task_dir(&layout, UUID).is_none());

        std::fs::remove_file(&task).unwrap();
        std::fs::create_dir(&task).unwrap();
        let fifo = std::ffi::CString::new(task.join("messages.jsonl").to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let dir = open_task_dir(&layout, UUID).unwrap();
        assert!(
            dir.open(&TaskFile::Messages).is_none(),
            "a FIFO is not a file"
        );
    }

    #[test]
    fn a_folder_link_that_stays_inside_is_refused_too() {
        let (_tmp, layout, task) = tree();
        std::fs::create_dir(task.join("real")).unwrap();
        std::fs::write(task.join("real/4.txt"), "inside").unwrap();
        std::fs::write(task.join("real/p.jsonl"), "{}\n").unwrap();
        symlink("real", task.join("tool-results")).unwrap();
        symlink("real", task.join("planning")).unwrap();
        let dir = open_task_dir(&layout, UUID).unwrap();
        assert!(dir.open(&TaskFile::ToolResult(4)).is_none());
        assert!(dir.open(&TaskFile::Planning("p.jsonl".into())).is_none());
        assert!(dir.planning_files().is_empty());
    }

    #[test]
    fn binary_starts_are_told_from_text() {
        assert_eq!(binary_kind(b"plain text\n"), None);
        assert_eq!(binary_kind("caf\u{e9} \u{1f600}".as_bytes()), None);
        assert_eq!(binary_kind(b""), None);
        // A character cut by the end of the sample is still text.
        let cut = &"\u{1f600}".as_bytes()[..2];
        assert_eq!(binary_kind(&[b"ok ".as_slice(), cut].concat()), None);
        assert_eq!(binary_kind(b"a\x00b"), Some("binary data"));
        assert_eq!(binary_kind(b"\xff\xfe junk"), Some("binary data"));
        assert_eq!(binary_kind(b"\x89PNG\r\n\x1a\n...."), Some("PNG image"));
        assert_eq!(binary_kind(b"\x1f\x8b\x08\x00"), Some("gzip data"));
    }

    #[test]
    fn planning_files_are_listed_by_plain_name() {
        let (_tmp, layout, task) = tree();
        std::fs::create_dir(task.join("planning")).unwrap();
        for n in ["b.jsonl", "a.jsonl", ".x.jsonl", "notes.txt"] {
            std::fs::write(task.join("planning").join(n), "{}\n").unwrap();
        }
        std::fs::create_dir(task.join("planning/dir.jsonl")).unwrap();
        let dir = open_task_dir(&layout, UUID).unwrap();
        assert_eq!(dir.planning_files(), ["a.jsonl", "b.jsonl"]);
    }
}
