//! [`TaskDir`]: the capability handle on one task directory, the only way the host reads or
//! writes a file there (DESIGN.md §8, "Host file access in task directories").
//!
//! A component can create any file it likes in its task directory. So every host access goes
//! through one open handle on the directory ([`cap_std::fs::Dir`]): a name is resolved inside
//! it, `..`, absolute names and links that lead out of it are refused, and the last component
//! of a name is never followed when it is a symbolic link (opens use `O_NOFOLLOW`; a link there
//! is an error naming the file). Files the host creates are owner-only ([`FILE_MODE`], folders
//! [`DIR_MODE`]).
//!
//! Names are relative to the directory (`tools.jsonl`, `tool-results/3.txt`), the names of
//! [`ctxhost_format::files`]. [`TaskDir::show`] gives the full path for messages; nothing
//! opens that path.
//!
//! Also here, because they walk the directory through the same handle: its size in bytes
//! ([`TaskDir::disk_usage`], for the byte budget), the symbolic links in it
//! ([`TaskDir::remove_foreign_entries`]) and the modes of its entries ([`TaskDir::walk`], for fsck).

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt};
use std::os::unix::fs::PermissionsExt as _;

use cap_std::fs::{Dir, DirBuilder, DirBuilderExt, Metadata, OpenOptions, OpenOptionsExt};

/// Mode of every file the host creates under `contexts/` (owner read/write).
pub const FILE_MODE: u32 = 0o600;
/// Mode of every folder the host creates under `contexts/` (owner only).
pub const DIR_MODE: u32 = 0o700;
/// Largest file [`TaskDir::read`] reads whole (bytes): the host's record files are far smaller.
pub const MAX_RECORD_BYTES: u64 = 1024 * 1024;

/// An open task directory (`contexts/{state}/{uuid}/`). Cheap to clone: clones share the handle.
#[derive(Clone)]
pub struct TaskDir {
    path: Arc<Path>,
    dir: Arc<Dir>,
}

impl std::fmt::Debug for TaskDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TaskDir").field(&self.path).finish()
    }
}

/// The error for a name whose last component is a symbolic link.
fn link_refused(name: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("{name} is a symbolic link; the host never follows links in a task directory"),
    )
}

/// Turn the errors of a no-follow open into a clear one (`ELOOP` means the last component is
/// a link; cap-std reports a path that leads out as `PermissionDenied`).
fn explain(name: &str, e: io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(libc::ELOOP) => link_refused(name),
        _ if e.kind() == io::ErrorKind::PermissionDenied
            && e.to_string().contains("outside of the filesystem") =>
        {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{name} leads outside the task directory (a symbolic link or `..`); refused"
                ),
            )
        }
        _ => e,
    }
}

/// Options that never follow a link in the last component and create owner-only files.
fn options() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.follow(FollowSymlinks::No).mode(FILE_MODE);
    o
}

/// The name of a temporary file next to `file` for an atomic replace: `.FILE.tmp-PID-N`, with
/// N counting the temporaries of this process, so two threads replacing the same file never
/// share one (shared by [`TaskDir::write_atomic_if`], [`crate::layout::atomic_write_with`] and
/// the database binding's create-if-absent).
pub(crate) fn temp_name(file: &str) -> String {
    static TEMPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    format!(
        ".{file}.tmp-{}-{}",
        std::process::id(),
        TEMPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// `(parent, file name)` of a relative name (`a/b.txt` → `(Some("a"), "b.txt")`).
fn split(name: &str) -> (Option<&str>, &str) {
    match name.rsplit_once('/') {
        Some((parent, file)) => (Some(parent), file),
        None => (None, name),
    }
}

impl TaskDir {
    /// Open the task directory at `path` (the host's own path, `contexts/{state}/{uuid}`). The
    /// directory itself must not be a symbolic link.
    pub fn open(path: &Path) -> io::Result<TaskDir> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| {
                let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_symlink());
                if is_link {
                    io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        format!(
                            "{} is a symbolic link, not a task directory",
                            path.display()
                        ),
                    )
                } else {
                    e
                }
            })?;
        Ok(TaskDir {
            path: Arc::from(path),
            dir: Arc::new(Dir::from_std_file(file)),
        })
    }

    /// The directory's path, for messages and for the WASI preopen of its components.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The full path of `name` in the directory, for messages only (never opened).
    pub fn file_path(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// [`TaskDir::file_path`] as text.
    pub fn show(&self, name: &str) -> String {
        self.file_path(name).display().to_string()
    }

    /// Open `name` for reading: a regular file only, never through a link ([`TaskDir::open_with`]).
    pub fn open_read(&self, name: &str) -> io::Result<File> {
        self.open_with(name, options().read(true))
    }

    /// Open `name` for reading; `None` when it does not exist.
    pub fn open_read_if_exists(&self, name: &str) -> io::Result<Option<File>> {
        match self.open_read(name) {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Open `name` for appending, creating it (owner-only) if missing.
    pub fn open_append(&self, name: &str) -> io::Result<File> {
        self.open_with(name, options().append(true).create(true))
    }

    /// Open an existing `name` for reading and appending (not created).
    pub fn open_read_append(&self, name: &str) -> io::Result<File> {
        self.open_with(name, options().read(true).append(true))
    }

    /// Open an existing `name` for reading and writing in place (not created, not truncated).
    pub fn open_read_write(&self, name: &str) -> io::Result<File> {
        self.open_with(name, options().read(true).write(true))
    }

    /// Create `name` (owner-only), or truncate it, for writing.
    pub fn create(&self, name: &str) -> io::Result<File> {
        self.open_with(name, options().write(true).create(true).truncate(true))
    }

    /// Create `name` (owner-only); an existing entry of that name is an error.
    pub fn create_new(&self, name: &str) -> io::Result<File> {
        self.open_with(name, options().write(true).create_new(true))
    }

    /// Every open of a file of the directory: never through a link ([`options`]), and only a
    /// regular file. The open is non-blocking, so a FIFO or a device of that name (which
    /// someone with access to the machine made; a component cannot) neither blocks the caller
    /// nor is read or written: `InvalidInput` naming it. (`O_NONBLOCK` does nothing to a
    /// regular file.)
    fn open_with(&self, name: &str, options: &OpenOptions) -> io::Result<File> {
        let mut options = options.clone();
        options.custom_flags(libc::O_NONBLOCK);
        let f = self
            .dir
            .open_with(name, &options)
            .map(cap_std::fs::File::into_std)
            .map_err(|e| explain(name, e))?;
        if !f.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name} is not a regular file (a FIFO, socket or device); not opened"),
            ));
        }
        Ok(f)
    }

    /// The whole content of `name`, a small record file (metadata.json, task_state.json): at
    /// most [`MAX_RECORD_BYTES`], a larger file is an error (a component may have grown it).
    pub fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        self.read_bounded(name, MAX_RECORD_BYTES)
    }

    /// The whole content of `name`; `None` when it does not exist.
    pub fn read_if_exists(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        self.read_bounded_if_exists(name, MAX_RECORD_BYTES)
    }

    /// The whole content of the regular file `name` ([`TaskDir::open_read`]), at most
    /// `max_bytes` bytes: a larger file is an error (`InvalidData`, naming it), and no more than
    /// `max_bytes + 1` bytes of it are read.
    pub fn read_bounded(&self, name: &str, max_bytes: u64) -> io::Result<Vec<u8>> {
        let f = self.open_read(name)?;
        let mut bytes = Vec::new();
        io::Read::read_to_end(&mut io::Read::take(f, max_bytes + 1), &mut bytes)?;
        if bytes.len() as u64 > max_bytes {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{name} is larger than {max_bytes} bytes; not read"),
            ));
        }
        Ok(bytes)
    }

    /// [`TaskDir::read_bounded`]; `None` when `name` does not exist.
    pub fn read_bounded_if_exists(
        &self,
        name: &str,
        max_bytes: u64,
    ) -> io::Result<Option<Vec<u8>>> {
        match self.read_bounded(name, max_bytes) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Replace `name` with `bytes` atomically (DESIGN §7): a temporary `.NAME.tmp-PID-N` next to
    /// it ([`temp_name`]), fsync, rename over `name` (which replaces a link of that name, never what it points
    /// to), fsync the folder. Readers see the old or the new content, never a mix.
    pub fn write_atomic(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.write_atomic_with(name, |w| w.write_all(bytes))
    }

    /// [`TaskDir::write_atomic`] with the content streamed by `write` into the temporary file
    /// (buffered, 64 KiB), so a file of any size is replaced with a bounded amount of memory. On
    /// error the temporary file is deleted and `name` is unchanged.
    pub fn write_atomic_with(
        &self,
        name: &str,
        write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        self.write_atomic_if(name, |w| write(w).map(|()| true))
            .map(|_| ())
    }

    /// [`TaskDir::write_atomic_with`] where `write` decides, once it has written, whether to
    /// replace: `Ok(true)` replaces `name` with what it wrote, `Ok(false)` leaves `name` as it
    /// is (an edit that changed nothing; the temporary file is deleted, the folder not synced).
    /// Returns whether `name` was replaced. On error the temporary file is deleted and `name`
    /// is unchanged.
    pub fn write_atomic_if(
        &self,
        name: &str,
        write: impl FnOnce(&mut dyn Write) -> io::Result<bool>,
    ) -> io::Result<bool> {
        let (parent, file) = split(name);
        let tmp_file = temp_name(file);
        let tmp = match parent {
            Some(p) => format!("{p}/{tmp_file}"),
            None => tmp_file,
        };
        let result = (|| -> io::Result<bool> {
            // A temporary left by a dead process of the same pid (and count) would make
            // create_new fail; names are unique within this process.
            let _ = self.dir.remove_file(&tmp);
            let mut f = io::BufWriter::with_capacity(64 * 1024, self.create_new(&tmp)?);
            if !write(&mut f)? {
                return Ok(false);
            }
            let f = f.into_inner().map_err(|e| e.into_error())?;
            f.sync_all()?;
            drop(f);
            self.dir.rename(&tmp, &self.dir, name)?;
            Ok(true)
        })();
        match result {
            Ok(true) => self.sync_folder(parent).map(|()| true),
            Ok(false) => {
                let _ = self.dir.remove_file(&tmp);
                Ok(false)
            }
            Err(e) => {
                let _ = self.dir.remove_file(&tmp);
                Err(explain(name, e))
            }
        }
    }

    /// Append one line (`line` without its `\n`) to the JSONL file `name` with a single write,
    /// creating it if needed; U+2028 / U+2029 in it are written escaped
    /// ([`ctxhost_format::jsonl::escape_line_separators`]). Whole lines only: a reader never sees
    /// half of one unless the process dies mid-write.
    pub fn append_line(&self, name: &str, line: &str) -> io::Result<()> {
        debug_assert!(
            !line.contains('\n'),
            "a JSONL line must not contain a newline"
        );
        let line = ctxhost_format::jsonl::escape_line_separators(line);
        let mut buf = String::with_capacity(line.len() + 1);
        buf.push_str(&line);
        buf.push('\n');
        self.open_append(name)?.write_all(buf.as_bytes())
    }

    /// Delete the file (or link) `name`; a link is removed, never what it points to.
    pub fn remove_file(&self, name: &str) -> io::Result<()> {
        self.dir
            .remove_file_or_symlink(name)
            .map_err(|e| explain(name, e))
    }

    /// Delete `name` if it exists; whether it did.
    pub fn remove_file_if_exists(&self, name: &str) -> io::Result<bool> {
        match self.remove_file(name) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Rename `from` to `to` inside the directory (atomic; replaces `to`).
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.dir
            .rename(from, &self.dir, to)
            .map_err(|e| explain(from, e))
    }

    /// Create the folder `name` (owner-only) unless it exists as a folder.
    pub fn create_dir(&self, name: &str) -> io::Result<()> {
        let mut b = DirBuilder::new();
        b.mode(DIR_MODE);
        match self.dir.create_dir_with(name, &b) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => match self.metadata(name)? {
                Some(m) if m.is_dir() => Ok(()),
                Some(m) if m.is_symlink() => Err(link_refused(name)),
                _ => Err(e),
            },
            Err(e) => Err(explain(name, e)),
        }
    }

    /// What `name` is (not following a link); `None` when it does not exist.
    pub fn metadata(&self, name: &str) -> io::Result<Option<Metadata>> {
        match self.dir.symlink_metadata(name) {
            Ok(m) => Ok(Some(m)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(explain(name, e)),
        }
    }

    /// Whether `name` exists as a regular file (a link is not one).
    pub fn is_file(&self, name: &str) -> bool {
        matches!(self.metadata(name), Ok(Some(m)) if m.is_file())
    }

    /// Whether `name` exists as a folder (a link is not one).
    pub fn is_dir(&self, name: &str) -> bool {
        matches!(self.metadata(name), Ok(Some(m)) if m.is_dir())
    }

    /// The names of the entries of the folder `sub` (`None`: the directory itself), sorted,
    /// with what each is (links not followed). A missing folder has none.
    pub fn entries(&self, sub: Option<&str>) -> io::Result<Vec<(String, Metadata)>> {
        let dir;
        let folder: &Dir = match sub {
            None => &self.dir,
            Some(s) => match self.open_subdir(s) {
                Ok(d) => {
                    dir = d;
                    &dir
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(explain(s, e)),
            },
        };
        let mut out = Vec::new();
        for entry in folder.entries()? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let meta = entry.metadata()?;
            out.push((name, meta));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// fsync `name` if it exists (step boundaries). A missing file is fine.
    pub fn sync_file(&self, name: &str) -> io::Result<()> {
        match self.open_read(name) {
            Ok(f) => f.sync_all(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// fsync the directory itself, so a create, rename or delete in it is durable.
    pub fn sync(&self) -> io::Result<()> {
        self.sync_folder(None)
    }

    /// fsync the folder `name` of the directory (not a link), so a file created in it is
    /// durable (`planning/` after its first file).
    pub fn sync_dir(&self, name: &str) -> io::Result<()> {
        self.sync_folder(Some(name))
    }

    fn sync_folder(&self, sub: Option<&str>) -> io::Result<()> {
        let dir = match sub {
            None => self.dir.try_clone()?,
            Some(s) => self.open_subdir(s)?,
        };
        dir.into_std_file().sync_all()
    }

    /// Open the folder `name` (not a link) as a readable directory (cap-std's own directory
    /// opens may use `O_PATH`, which can be neither listed nor fsynced).
    fn open_subdir(&self, name: &str) -> io::Result<Dir> {
        open_subdir(&self.dir, name)
    }

    /// Visit every entry below the directory, depth first, however deep: `f(relative name,
    /// metadata)`. Links are visited, never followed, so a link loop is one entry. A folder is
    /// listed once and its handle held only while the walk is below it: the walk holds one
    /// open folder per level of the current path (a tree of depth D costs D descriptors, not
    /// one per folder waiting to be walked). An entry deleted meanwhile (a component is
    /// writing) is skipped.
    pub fn walk(&self, mut f: impl FnMut(&str, &Metadata)) -> io::Result<()> {
        /// One folder on the current path: its relative name, its handle and its subfolders
        /// not walked yet.
        struct Level {
            prefix: String,
            dir: Dir,
            pending: Vec<std::ffi::OsString>,
        }
        let list = |prefix: String, dir: Dir, f: &mut dyn FnMut(&str, &Metadata)| {
            let mut pending = Vec::new();
            for entry in dir.entries()? {
                let entry = entry?;
                let name = entry.file_name();
                let meta = match entry.metadata() {
                    Ok(m) => m,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                };
                f(&join(&prefix, &name), &meta);
                if meta.is_dir() {
                    pending.push(name);
                }
            }
            Ok::<_, io::Error>(Level {
                prefix,
                dir,
                pending,
            })
        };
        let mut path = vec![list(String::new(), self.dir.try_clone()?, &mut f)?];
        while let Some(level) = path.last_mut() {
            let Some(name) = level.pending.pop() else {
                path.pop();
                continue;
            };
            let sub = match open_subdir(&level.dir, &name) {
                Ok(sub) => sub,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let prefix = join(&level.prefix, &name);
            path.push(list(prefix, sub, &mut f)?);
        }
        Ok(())
    }

    /// Bytes the directory holds: the sizes of every file, folder and link below it (apparent
    /// sizes, so a sparse file counts in full).
    pub fn disk_usage(&self) -> io::Result<u64> {
        let mut total = 0u64;
        self.walk(|_, m| total = total.saturating_add(m.len()))?;
        Ok(total)
    }

    /// The entries below the directory that are neither regular files nor folders (relative
    /// names): symbolic links, FIFOs, sockets, devices. The host writes none of them.
    pub fn foreign_entries(&self) -> io::Result<Vec<String>> {
        let mut found = Vec::new();
        self.walk(|rel, m| {
            if !m.is_file() && !m.is_dir() {
                found.push(rel.to_string());
            }
        })?;
        found.sort();
        Ok(found)
    }

    /// Delete every [`TaskDir::foreign_entries`] entry: links (a component may have left them),
    /// FIFOs, sockets and devices (someone with access to the machine made them; none holds
    /// data). Returns the names removed.
    pub fn remove_foreign_entries(&self) -> io::Result<Vec<String>> {
        let found = self.foreign_entries()?;
        for l in &found {
            self.remove_file(l)?;
        }
        Ok(found)
    }

    /// Set the mode of `name` (opened without following a link, then `fchmod`): `0o600` for
    /// a file, `0o700` for a folder.
    pub fn set_owner_only(&self, name: &str, is_dir: bool) -> io::Result<()> {
        let (file, mode) = if is_dir {
            (self.open_subdir(name)?.into_std_file(), DIR_MODE)
        } else {
            (self.open_read(name)?, FILE_MODE)
        };
        file.set_permissions(std::fs::Permissions::from_mode(mode))
    }
}

/// The identity of an open file, `"<device>:<inode>"`: a file replaced atomically (a temporary
/// renamed over it) has another identity, whatever its content; appending keeps it. Checkpoints
/// use it to tell a file they counted from its replacement.
pub fn file_id(file: &File) -> io::Result<String> {
    use std::os::unix::fs::MetadataExt as _;
    let m = file.metadata()?;
    Ok(format!("{}:{}", m.dev(), m.ino()))
}

/// Open the folder `name` of `dir` (not through a link) for listing and fsync.
fn open_subdir(dir: &Dir, name: impl AsRef<Path>) -> io::Result<Dir> {
    let mut o = options();
    o.read(true).custom_flags(libc::O_DIRECTORY);
    dir.open_with(name.as_ref(), &o)
        .map(|f| Dir::from_std_file(f.into_std()))
        .map_err(|e| explain(&name.as_ref().to_string_lossy(), e))
}

fn join(prefix: &str, name: &OsStr) -> String {
    let name = name.to_string_lossy();
    if prefix.is_empty() {
        name.into_owned()
    } else {
        format!("{prefix}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A task directory `task/` next to a file `outside.txt` holding "secret".
    fn setup() -> (tempfile::TempDir, TaskDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let task = tmp.path().join("task");
        std::fs::create_dir(&task).unwrap();
        let outside = tmp.path().join("outside.txt");
        std::fs::write(&outside, "secret").unwrap();
        let dir = TaskDir::open(&task).unwrap();
        (tmp, dir, outside)
    }

    /// The names at the top of `dir`, sorted.
    fn top_names(dir: &TaskDir) -> Vec<String> {
        dir.entries(None)
            .unwrap()
            .into_iter()
            .map(|e| e.0)
            .collect()
    }

    #[test]
    fn files_are_created_owner_only_and_written_atomically() {
        let (_t, dir, _) = setup();
        dir.append_line("a.jsonl", "{}").unwrap();
        dir.write_atomic("m.json", b"one").unwrap();
        dir.write_atomic("m.json", b"two").unwrap();
        dir.create_dir("sub").unwrap();
        dir.create_dir("sub").unwrap();
        dir.write_atomic("sub/x.txt", b"x").unwrap();
        assert_eq!(dir.read("m.json").unwrap(), b"two");
        assert_eq!(dir.read("a.jsonl").unwrap(), b"{}\n");
        for (name, mode) in [
            ("a.jsonl", FILE_MODE),
            ("m.json", FILE_MODE),
            ("sub", DIR_MODE),
            ("sub/x.txt", FILE_MODE),
        ] {
            let m = std::fs::metadata(dir.file_path(name)).unwrap();
            assert_eq!(m.permissions().mode() & 0o777, mode, "{name}");
        }
        assert_eq!(
            top_names(&dir),
            ["a.jsonl", "m.json", "sub"],
            "no temporary left"
        );
        let sub = std::fs::metadata(dir.file_path("sub")).unwrap().len();
        assert_eq!(dir.disk_usage().unwrap(), 3 + 3 + 1 + sub);
    }

    #[test]
    fn a_conditional_replace_keeps_the_file_when_told_or_on_error() {
        use std::os::unix::fs::MetadataExt;
        let (_t, dir, _) = setup();
        dir.write_atomic("m.json", b"one").unwrap();
        let inode = || std::fs::metadata(dir.file_path("m.json")).unwrap().ino();
        let before = inode();
        let kept = dir
            .write_atomic_if("m.json", |w| w.write_all(b"two").map(|()| false))
            .unwrap();
        assert!(!kept);
        assert_eq!(dir.read("m.json").unwrap(), b"one");
        assert_eq!(inode(), before, "the file itself is untouched");
        let failed = dir.write_atomic_if("m.json", |w| {
            w.write_all(b"three")?;
            Err(io::Error::other("cut short"))
        });
        assert_eq!(failed.unwrap_err().to_string(), "cut short");
        assert_eq!(dir.read("m.json").unwrap(), b"one");
        assert!(
            dir.write_atomic_if("m.json", |w| w.write_all(b"four").map(|()| true))
                .unwrap()
        );
        assert_eq!(dir.read("m.json").unwrap(), b"four");
        assert_eq!(top_names(&dir), ["m.json"], "no temporary left");
    }

    #[test]
    fn links_are_never_followed_out() {
        let (_t, dir, outside) = setup();
        symlink(&outside, dir.file_path("abs.jsonl")).unwrap();
        symlink("../outside.txt", dir.file_path("rel.jsonl")).unwrap();
        symlink("..", dir.file_path("up")).unwrap();
        for name in ["abs.jsonl", "rel.jsonl"] {
            let e = dir.open_read(name).unwrap_err();
            assert!(e.to_string().contains("symbolic link"), "{name}: {e}");
            assert!(dir.append_line(name, "x").is_err(), "{name}");
            assert!(dir.create(name).is_err(), "{name}");
            assert!(dir.open_read_write(name).is_err(), "{name}");
        }
        let e = dir.read("up/outside.txt").unwrap_err().to_string();
        assert!(e.contains("leads outside the task directory"), "{e}");
        assert!(dir.append_line("up/outside.txt", "x").is_err());
        assert!(dir.read("../outside.txt").is_err());
        assert!(dir.read(outside.to_str().unwrap()).is_err());
        // An atomic write replaces the link itself.
        dir.write_atomic("rel.jsonl", b"mine").unwrap();
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret");
        assert!(dir.is_file("rel.jsonl"));
        assert_eq!(dir.foreign_entries().unwrap(), ["abs.jsonl", "up"]);
        assert_eq!(dir.remove_foreign_entries().unwrap(), ["abs.jsonl", "up"]);
        assert!(dir.foreign_entries().unwrap().is_empty());
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret");
    }

    /// Every byte counts, however deep the file (the old walk stopped at 16 levels), and a
    /// link loop is one entry, never followed.
    #[test]
    fn the_size_counts_every_level_and_follows_no_link() {
        let (_t, dir, _) = setup();
        let mut deep = dir.path().to_path_buf();
        for i in 0..40 {
            deep.push(format!("d{i}"));
        }
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("bottom.bin"), vec![7u8; 100_000]).unwrap();
        symlink(".", deep.join("loop")).unwrap();
        symlink("..", dir.file_path("up")).unwrap();
        let mut names = Vec::new();
        dir.walk(|rel, _| names.push(rel.to_string())).unwrap();
        let bottom = (0..40)
            .map(|i| format!("d{i}"))
            .collect::<Vec<_>>()
            .join("/");
        assert!(names.contains(&format!("{bottom}/bottom.bin")), "{names:?}");
        assert_eq!(names.len(), 40 + 1 + 1 + 1, "{names:?}");
        let folders: u64 = (0..40)
            .map(|i| {
                let p: PathBuf = (0..=i).map(|j| format!("d{j}")).collect();
                std::fs::metadata(dir.file_path(p.to_str().unwrap()))
                    .unwrap()
                    .len()
            })
            .sum();
        let links: u64 = [format!("{bottom}/loop"), "up".to_string()]
            .iter()
            .map(|l| std::fs::symlink_metadata(dir.file_path(l)).unwrap().len())
            .sum();
        assert_eq!(dir.disk_usage().unwrap(), 100_000 + folders + links);
    }

    #[test]
    fn the_directory_itself_must_not_be_a_link() {
        let (t, dir, _) = setup();
        let link = t.path().join("link");
        symlink(dir.path(), &link).unwrap();
        let e = TaskDir::open(&link).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
    }

    /// A FIFO in a task directory (someone with access to the machine made it): every open
    /// fails at once naming it, none blocks, and it is a foreign entry that repair deletes.
    #[test]
    fn a_fifo_is_never_opened_and_never_blocks() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        let fifo =
            std::ffi::CString::new(tmp.path().join("tools.jsonl").to_str().unwrap().as_bytes())
                .unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let e = dir.open_read("tools.jsonl").unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        assert!(dir.read("tools.jsonl").is_err());
        assert!(dir.append_line("tools.jsonl", "{}").is_err());
        assert!(dir.open_read_write("tools.jsonl").is_err());
        assert_eq!(dir.foreign_entries().unwrap(), ["tools.jsonl"]);
        assert_eq!(dir.remove_foreign_entries().unwrap(), ["tools.jsonl"]);
        assert!(!tmp.path().join("tools.jsonl").exists());
    }
}
