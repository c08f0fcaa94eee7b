//! Managed workspaces as git worktrees of per-repository mirrors, and a workspace's change as
//! a patch against its base commit.
//!
//! ```text
//! contexts/.workspaces/cache/<host>/<owner>/<repo>.git   mirror (`git clone --mirror`, then `fetch --prune`)
//! contexts/.workspaces/cache/<host>/<owner>/<repo>.git.lock   flock: one fetch or worktree change at a time
//! contexts/.workspaces/<uuid>/                            the task's worktree (`git worktree add --detach`)
//! ```
//! The mirror's config holds the clone URL without credentials; the token is given to each
//! fetch alone ([`super::git::Auth`]). `changes.patch` ([`diff`]) is `git diff --binary` of the
//! working tree (untracked files included, ignored ones not) against the record's base commit,
//! taken through a temporary index so the workspace's own index is never touched.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use super::git::{Auth, Git};
use super::record::{WorkspaceRecord, without_credentials};
use crate::task_dir::TaskDir;

/// The patch file in a task directory: `git diff --binary BASE` of its workspace.
pub const PATCH_FILE: &str = ctxhost_format::files::CHANGES_PATCH;

/// The folder of mirrors under the workspaces folder.
pub const CACHE_DIR: &str = "cache";

/// Largest `changes.patch` read back (bytes).
pub const MAX_PATCH_BYTES: u64 = 256 * 1024 * 1024;

/// Where the mirror of `clone_url` lives under `workspaces` (`contexts/.workspaces`):
/// `cache/<host[_port]>/<path>.git`. Errors: the URL has credentials in it, or no host and
/// path, or a path part that is empty, `.` or `..`.
pub fn mirror_path(workspaces: &Path, clone_url: &str) -> anyhow::Result<PathBuf> {
    let clean = without_credentials(clone_url);
    if clean.as_deref() != Some(clone_url) {
        anyhow::bail!(
            "the clone URL {} holds credentials: refused (the token goes in a header only)",
            clean.unwrap_or_else(|| "(not shown)".into())
        );
    }
    let rest = clone_url
        .split_once("://")
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow::anyhow!("the clone URL {clone_url} has no scheme"))?;
    let (host, path) = rest
        .split_once('/')
        .ok_or_else(|| anyhow::anyhow!("the clone URL {clone_url} has no repository path"))?;
    let path = path.trim_end_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    let mut out = workspaces.join(CACHE_DIR).join(host.replace(':', "_"));
    let parts: Vec<&str> = path.split('/').collect();
    if host.is_empty()
        || parts
            .iter()
            .any(|p| p.is_empty() || *p == "." || *p == ".." || p.contains('\\'))
    {
        anyhow::bail!("the clone URL {clone_url} is not host/owner/repository");
    }
    for (i, p) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            out.push(format!("{p}.git"));
        } else {
            out.push(p);
        }
    }
    Ok(out)
}

/// An exclusive lock on the mirror `mirror` (a `flock` on `<mirror>.lock`), held until
/// dropped: two tasks never fetch into, or add worktrees to, one mirror at once.
pub struct MirrorLock {
    _file: File,
}

impl MirrorLock {
    /// Wait for the lock of `mirror` (its parent folders are created).
    pub fn acquire(mirror: &Path) -> anyhow::Result<MirrorLock> {
        use std::os::fd::AsRawFd;
        let mut name = mirror.as_os_str().to_owned();
        name.push(".lock");
        let path = PathBuf::from(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", parent.display()))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
        loop {
            // SAFETY: flock on a descriptor this function owns.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
            if rc == 0 {
                return Ok(MirrorLock { _file: file });
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                anyhow::bail!("cannot lock {}: {e}", path.display());
            }
        }
    }
}

/// Bring the mirror at `mirror` up to date with `clone_url`: `git clone --mirror` when it is
/// missing, else `git fetch --prune` (every ref, the pull/merge-request heads included). The
/// caller holds the [`MirrorLock`]. `auth` goes to the one command.
pub fn sync_mirror(mirror: &Path, clone_url: &str, auth: Option<Auth>) -> anyhow::Result<()> {
    if mirror.join("HEAD").exists() {
        Git::new(mirror)
            .with_auth(auth)
            .run(["fetch", "--prune", "--quiet", "origin"])?;
        return Ok(());
    }
    let parent = mirror
        .parent()
        .ok_or_else(|| anyhow::anyhow!("{} has no parent folder", mirror.display()))?;
    std::fs::create_dir_all(parent)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", parent.display()))?;
    // A clone a crash cut short is started again.
    if mirror.exists() {
        std::fs::remove_dir_all(mirror)
            .map_err(|e| anyhow::anyhow!("cannot remove {}: {e}", mirror.display()))?;
    }
    Git::new(parent).with_auth(auth).run([
        std::ffi::OsStr::new("clone"),
        "--mirror".as_ref(),
        "--quiet".as_ref(),
        clone_url.as_ref(),
        mirror.as_os_str(),
    ])?;
    Ok(())
}

/// The commit `rev` names in repository `git_dir` (a mirror), or an error naming both.
pub fn resolve(git_dir: &Path, rev: &str) -> anyhow::Result<String> {
    Git::new(git_dir)
        .read([
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ])
        .map_err(|_| anyhow::anyhow!("{rev} is not a commit of {}", git_dir.display()))
}

/// Whether commit `commit` is in repository `git_dir`.
pub fn has_commit(git_dir: &Path, commit: &str) -> bool {
    Git::new(git_dir)
        .run(["cat-file", "-e", &format!("{commit}^{{commit}}")])
        .is_ok()
}

/// Add a detached worktree of `mirror` at `path` checked out at `commit` (a stale entry of
/// an earlier worktree at that path is pruned first). The caller holds the [`MirrorLock`].
pub fn add_worktree(mirror: &Path, path: &Path, commit: &str) -> anyhow::Result<()> {
    let git = Git::new(mirror);
    git.run(["worktree", "prune"])?;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", parent.display()))?;
    }
    git.run([
        std::ffi::OsStr::new("worktree"),
        "add".as_ref(),
        "--quiet".as_ref(),
        "--detach".as_ref(),
        path.as_os_str(),
        commit.as_ref(),
    ])?;
    Ok(())
}

/// The repository a worktree at `path` belongs to (from its `.git` file:
/// `gitdir: <repo>/worktrees/<name>`), if it is one.
pub fn worktree_repository(path: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(path.join(".git")).ok()?;
    let gitdir = PathBuf::from(text.trim().strip_prefix("gitdir:")?.trim());
    let worktrees = gitdir.parent()?;
    (worktrees.file_name()? == "worktrees").then(|| worktrees.parent().map(Path::to_path_buf))?
}

/// Remove the managed worktree at `path`: `git worktree remove --force` and `worktree prune`
/// in its mirror (`mirror`, or the one its `.git` file names), or the folder alone when it is
/// no worktree any more. Nothing there: nothing done.
pub fn remove_worktree(path: &Path, mirror: Option<&Path>) -> anyhow::Result<()> {
    let repo = worktree_repository(path).or_else(|| mirror.map(Path::to_path_buf));
    if let Some(repo) = repo.filter(|r| r.join("HEAD").exists()) {
        let _lock = MirrorLock::acquire(&repo)?;
        let git = Git::new(&repo);
        if path.exists()
            && let Err(e) = git.run([
                std::ffi::OsStr::new("worktree"),
                "remove".as_ref(),
                "--force".as_ref(),
                path.as_os_str(),
            ])
        {
            tracing::debug!("git worktree remove: {e:#}; removing the folder");
        }
        if path.exists() {
            std::fs::remove_dir_all(path)
                .map_err(|e| anyhow::anyhow!("cannot remove {}: {e}", path.display()))?;
        }
        git.run(["worktree", "prune"])?;
        return Ok(());
    }
    if path.exists() {
        std::fs::remove_dir_all(path)
            .map_err(|e| anyhow::anyhow!("cannot remove {}: {e}", path.display()))?;
    }
    Ok(())
}

/// `git diff --binary BASE` of the working tree at `ws` against commit `base`: tracked
/// changes, deletions and untracked files (not ignored ones), limited to `ws` when it is a
/// folder inside a larger repository. Taken through a temporary index (a copy of the
/// workspace's own with its modification time, for its stat cache and git's racy-clean check;
/// `read-tree BASE` when it has none), so nothing of the
/// workspace's git state changes but new loose objects. `exclude`: paths inside `ws` left out
/// (ctxhost's own contexts/ and config file when they lie in a user's workspace).
pub fn diff(ws: &Path, base: &str, exclude: &[PathBuf]) -> anyhow::Result<Vec<u8>> {
    let git = Git::new(ws);
    let tmp = tempfile::tempdir().map_err(|e| anyhow::anyhow!("cannot make a temp dir: {e}"))?;
    let index = tmp.path().join("index");
    let own = git.read(["rev-parse", "--path-format=absolute", "--git-path", "index"])?;
    // The copy keeps the original's modification time: git's racy-clean check compares each
    // entry's time with the index file's, and a copy newer than an edit made in the same second
    // as the checkout (same size, `return a - b` → `return a + b`) would hide the edit.
    let copied = Path::new(&own).is_file()
        && std::fs::copy(&own, &index).is_ok()
        && std::fs::metadata(&own)
            .and_then(|m| m.modified())
            .and_then(|t| {
                std::fs::File::options()
                    .write(true)
                    .open(&index)?
                    .set_modified(t)
            })
            .is_ok();
    if !copied {
        // A partial copy (its time could not be kept) is not used: read the base instead.
        let _ = std::fs::remove_file(&index);
    }
    let tgit = git.with_env("GIT_INDEX_FILE", &index);
    if !copied {
        tgit.run(["read-tree", base])?;
    }
    let root = ws.canonicalize().unwrap_or_else(|_| ws.to_path_buf());
    let mut spec = vec![".".to_string()];
    for e in exclude {
        let e = e.canonicalize().unwrap_or_else(|_| e.clone());
        if let Ok(rel) = e.strip_prefix(&root)
            && !rel.as_os_str().is_empty()
        {
            spec.push(format!(":(exclude){}", rel.display()));
        }
    }
    let mut add = vec!["add".to_string(), "--all".into(), "--".into()];
    add.extend(spec.iter().cloned());
    tgit.run(&add)?;
    let mut d: Vec<String> = [
        "diff",
        "--cached",
        "--binary",
        "--no-color",
        "--no-ext-diff",
        base,
        "--",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    d.extend(spec);
    let out = tgit.run(&d)?;
    Ok(out.stdout)
}

/// Write `changes.patch` of the task in `dir` for its workspace `rec` when it differs from the
/// file there (atomically; an empty diff after a non-empty one empties it). Returns whether it
/// was written. `exclude`: as for [`diff`]. Errors name the workspace or the file.
pub fn write_patch(
    dir: &TaskDir,
    rec: &WorkspaceRecord,
    exclude: &[PathBuf],
) -> anyhow::Result<bool> {
    let patch = diff(Path::new(&rec.path), &rec.base_commit, exclude)
        .map_err(|e| anyhow::anyhow!("the diff of workspace {}: {e:#}", rec.path))?;
    let old = dir
        .read_bounded_if_exists(PATCH_FILE, MAX_PATCH_BYTES)
        .map_err(|e| anyhow::anyhow!("cannot read {PATCH_FILE}: {e}"))?;
    match old {
        Some(o) if o == patch => return Ok(false),
        None if patch.is_empty() => return Ok(false),
        _ => {}
    }
    dir.write_atomic(PATCH_FILE, &patch)
        .map_err(|e| anyhow::anyhow!("cannot write {PATCH_FILE}: {e}"))?;
    Ok(true)
}

/// `git apply --binary` `patch` in the worktree at `ws` (an empty patch: nothing).
pub fn apply_patch(ws: &Path, patch: &[u8]) -> anyhow::Result<()> {
    if patch.is_empty() {
        return Ok(());
    }
    Git::new(ws).run_with_input(
        ["apply", "--binary", "--whitespace=nowarn", "-"],
        Some(patch),
    )?;
    Ok(())
}

/// Whether `patch` applies to commit `base` of repository `git_dir` (`git apply --check
/// --cached` on a temporary index of `base`: no worktree needed). Errors say why not.
pub fn check_patch(git_dir: &Path, base: &str, patch: &[u8]) -> anyhow::Result<()> {
    if patch.is_empty() {
        return Ok(());
    }
    let tmp = tempfile::tempdir().map_err(|e| anyhow::anyhow!("cannot make a temp dir: {e}"))?;
    let git = Git::new(git_dir).with_env("GIT_INDEX_FILE", tmp.path().join("index"));
    git.run(["read-tree", base])?;
    git.run_with_input(
        ["apply", "--check", "--cached", "--binary", "-"],
        Some(patch),
    )?;
    Ok(())
}

/// The stat line of `patch`: `N files changed, I insertions(+), D deletions(-)` (binary files
/// count as changed), or `no change` for an empty one.
pub fn stat_line(patch: &[u8]) -> String {
    let text = String::from_utf8_lossy(patch);
    let (mut files, mut ins, mut del) = (0u64, 0u64, 0u64);
    let mut in_hunk = false;
    for line in text.lines() {
        if line.starts_with("diff --git ") {
            files += 1;
            in_hunk = false;
        } else if line.starts_with("@@") {
            in_hunk = true;
        } else if in_hunk && line.starts_with('+') {
            ins += 1;
        } else if in_hunk && line.starts_with('-') {
            del += 1;
        }
    }
    if files == 0 {
        return "no change".into();
    }
    let s = |n: u64| if n == 1 { "" } else { "s" };
    format!(
        "{files} file{} changed, {ins} insertion{}(+), {del} deletion{}(-)",
        s(files),
        s(ins),
        s(del)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(dir: &Path, args: &[&str]) -> String {
        Git::new(dir)
            .with_env("GIT_AUTHOR_NAME", "T")
            .with_env("GIT_AUTHOR_EMAIL", "t@example.com")
            .with_env("GIT_COMMITTER_NAME", "T")
            .with_env("GIT_COMMITTER_EMAIL", "t@example.com")
            .read(args)
            .unwrap()
    }

    /// A same-size edit whose modification time matches the index's cached stat is in the
    /// patch. (The case CI met — an edit in the checkout's very second, ctime included — cannot
    /// be made on purpose here: a test cannot set a ctime; this one checks the copy path stays
    /// right.)
    #[test]
    fn a_same_size_edit_in_the_checkouts_second_is_in_the_patch() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        sh(&ws, &["init", "-q", "-b", "main"]);
        let file = ws.join("calc.py");
        let at = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000);
        let set_time = |p: &Path| {
            std::fs::File::options()
                .write(true)
                .open(p)
                .unwrap()
                .set_modified(at)
                .unwrap()
        };
        std::fs::write(&file, "return a - b\n").unwrap();
        set_time(&file);
        sh(&ws, &["add", "-A"]);
        sh(&ws, &["commit", "-q", "-m", "base"]);
        let base = sh(&ws, &["rev-parse", "HEAD"]);
        // The index written in the same second as the file: its entry is racily clean.
        set_time(&ws.join(".git/index"));
        std::fs::write(&file, "return a + b\n").unwrap();
        set_time(&file);
        let patch = String::from_utf8(diff(&ws, &base, &[]).unwrap()).unwrap();
        assert!(patch.contains("+return a + b"), "{patch:?}");
    }

    #[test]
    fn mirror_paths_are_host_owner_repo_and_refuse_credentials() {
        let w = Path::new("/w");
        assert_eq!(
            mirror_path(w, "https://github.com/acme/app.git").unwrap(),
            Path::new("/w/cache/github.com/acme/app.git")
        );
        assert_eq!(
            mirror_path(w, "http://127.0.0.1:8080/g/sub/p.git").unwrap(),
            Path::new("/w/cache/127.0.0.1_8080/g/sub/p.git")
        );
        assert!(mirror_path(w, "https://x:tok@github.com/a/b.git").is_err());
        assert!(mirror_path(w, "https://github.com/../b.git").is_err());
        assert!(mirror_path(w, "https://github.com").is_err());
    }

    #[test]
    fn the_patch_holds_edits_deletions_and_new_files_and_leaves_the_index_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        sh(&ws, &["init", "-q", "-b", "main"]);
        std::fs::write(ws.join("a.txt"), "one\n").unwrap();
        std::fs::write(ws.join("gone.txt"), "x\n").unwrap();
        std::fs::write(ws.join(".gitignore"), "*.log\n").unwrap();
        sh(&ws, &["add", "-A"]);
        sh(&ws, &["commit", "-q", "-m", "base"]);
        let base = sh(&ws, &["rev-parse", "HEAD"]);
        assert!(diff(&ws, &base, &[]).unwrap().is_empty());

        std::fs::write(ws.join("a.txt"), "one\ntwo\n").unwrap();
        std::fs::remove_file(ws.join("gone.txt")).unwrap();
        std::fs::write(ws.join("new.bin"), [0u8, 1, 2, 255]).unwrap();
        std::fs::write(ws.join("noise.log"), "ignored\n").unwrap();
        let status_before = sh(&ws, &["status", "--porcelain"]);
        let patch = diff(&ws, &base, &[]).unwrap();
        let text = String::from_utf8_lossy(&patch);
        assert!(text.contains("+two"), "{text}");
        assert!(text.contains("deleted file mode"), "{text}");
        assert!(text.contains("GIT binary patch"), "{text}");
        assert!(!text.contains("noise.log"), "{text}");
        // An excluded folder (ctxhost's contexts/ inside a user's workspace) is left out.
        std::fs::create_dir(ws.join("contexts")).unwrap();
        std::fs::write(ws.join("contexts/tasks.db"), "db").unwrap();
        assert_eq!(diff(&ws, &base, &[ws.join("contexts")]).unwrap(), patch);
        std::fs::remove_dir_all(ws.join("contexts")).unwrap();
        // The workspace's own index is as it was: new.bin is still untracked.
        assert_eq!(sh(&ws, &["status", "--porcelain"]), status_before);
        assert!(status_before.contains("?? new.bin"), "{status_before}");
        assert_eq!(
            stat_line(&patch),
            "3 files changed, 1 insertion(+), 1 deletion(-)"
        );

        // The patch rebuilds the tree from the base, and checks against it.
        let git_dir = PathBuf::from(sh(&ws, &["rev-parse", "--absolute-git-dir"]));
        check_patch(&git_dir, &base, &patch).unwrap();
        let copy = tmp.path().join("copy");
        sh(
            &ws,
            &[
                "worktree",
                "add",
                "-q",
                "--detach",
                copy.to_str().unwrap(),
                &base,
            ],
        );
        apply_patch(&copy, &patch).unwrap();
        assert_eq!(
            std::fs::read(copy.join("new.bin")).unwrap(),
            [0u8, 1, 2, 255]
        );
        assert!(!copy.join("gone.txt").exists());
        assert_eq!(diff(&copy, &base, &[]).unwrap(), patch);
        assert_eq!(worktree_repository(&copy).unwrap(), git_dir);
        remove_worktree(&copy, None).unwrap();
        assert!(!copy.exists());
        assert!(!sh(&ws, &["worktree", "list"]).contains("copy"));

        // A patch that does not apply says so.
        let err = check_patch(
            &git_dir,
            &base,
            b"diff --git a/zz b/zz\n--- a/zz\n+++ b/zz\n@@ -1 +1 @@\n-q\n+r\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("apply"), "{err}");
    }
}
