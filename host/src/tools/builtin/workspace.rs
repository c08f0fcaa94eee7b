//! The task's workspace as the file tools see it: a capability handle on the workspace and one
//! on the task's temp dir (cap-std: every open is resolved beneath the directory and never
//! follows a link out of it), and the paths inside them that belong to ctxhost (contexts/, the
//! config file), which no tool may read or write.

use std::fs::File;
use std::path::{Component, Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::Dir;

/// The directories the file tools may use.
pub struct Workspace {
    root: PathBuf,
    dir: Dir,
    temp_root: PathBuf,
    temp: Dir,
    hidden: Vec<PathBuf>,
}

/// A path the model gave, resolved to one of the two handles.
pub struct Resolved<'a> {
    /// The handle it lies beneath.
    pub dir: &'a Dir,
    /// Its path relative to that handle ("." for the directory itself).
    pub rel: PathBuf,
    /// How it is shown to the model (as given).
    pub shown: String,
}

impl Workspace {
    /// Open `root` and `temp_root` (both must be directories); `hidden` are paths that no tool
    /// may touch (canonicalised here; missing ones are ignored).
    ///
    /// Errors: either cannot be opened, or the workspace is (beneath) a hidden path (a
    /// workspace inside contexts/ would give the tools every task's files and the task store).
    pub fn open(root: &Path, temp_root: &Path, hidden: &[PathBuf]) -> std::io::Result<Workspace> {
        let root = root.canonicalize()?;
        let temp_root = temp_root.canonicalize()?;
        let hidden: Vec<PathBuf> = hidden
            .iter()
            .filter_map(|p| p.canonicalize().ok())
            .collect();
        if let Some(h) = hidden.iter().find(|h| root.starts_with(h)) {
            return Err(std::io::Error::other(format!(
                "the workspace {} is inside ctxhost's own {} (the task store or the config): \
                 the tools would reach every task's files",
                root.display(),
                h.display()
            )));
        }
        Ok(Workspace {
            dir: Dir::open_ambient_dir(&root, ambient_authority())?,
            temp: Dir::open_ambient_dir(&temp_root, ambient_authority())?,
            root,
            temp_root,
            hidden,
        })
    }

    /// The workspace directory (canonical).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The paths no tool may touch (canonical).
    pub fn hidden(&self) -> &[PathBuf] {
        &self.hidden
    }

    /// The temp dir (canonical).
    pub fn temp_root(&self) -> &Path {
        &self.temp_root
    }

    /// Resolve `path` (relative to the workspace, or absolute inside the workspace or the temp
    /// dir). Errors: an absolute path elsewhere, a `..` that climbs out.
    pub fn resolve<'a>(&'a self, path: &str) -> Result<Resolved<'a>, String> {
        let p = Path::new(path);
        let (dir, rel) = if p.is_absolute() {
            if let Ok(r) = p.strip_prefix(&self.root) {
                (&self.dir, r.to_path_buf())
            } else if let Ok(r) = p.strip_prefix(&self.temp_root) {
                (&self.temp, r.to_path_buf())
            } else {
                return Err(format!(
                    "{path} is outside the workspace ({}) and the task's temp dir ({}): tools may only use those",
                    self.root.display(),
                    self.temp_root.display()
                ));
            }
        } else {
            (&self.dir, p.to_path_buf())
        };
        // Refuse a `..` that climbs above the handle's directory before cap-std sees it (it
        // would refuse too, with a less telling message).
        let mut depth = 0i32;
        for c in rel.components() {
            match c {
                Component::ParentDir => depth -= 1,
                Component::Normal(_) => depth += 1,
                _ => {}
            }
            if depth < 0 {
                return Err(format!(
                    "{path} leads outside the workspace ({})",
                    self.root.display()
                ));
            }
        }
        let rel = if rel.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            rel
        };
        Ok(Resolved {
            dir,
            rel,
            shown: path.to_string(),
        })
    }

    /// Where the open file `f` really is (its descriptor's path), checked against the hidden
    /// paths. Errors: it is (beneath) contexts/ or the config file.
    pub fn check_open(&self, f: &File, shown: &str) -> Result<PathBuf, String> {
        use std::os::fd::AsRawFd;
        let real = std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd()))
            .map_err(|e| format!("{shown}: cannot tell where it is: {e}"))?;
        self.check_real(&real, shown)?;
        Ok(real)
    }

    /// Errors when the real path `real` is (beneath) one of the hidden paths.
    pub fn check_real(&self, real: &Path, shown: &str) -> Result<(), String> {
        if self.hidden.iter().any(|h| real.starts_with(h)) {
            return Err(format!(
                "{shown} is ctxhost's own (the task store or the config): tools may not use it"
            ));
        }
        Ok(())
    }

    /// Whether the real path `real` lies beneath the workspace or the temp dir.
    pub fn contains(&self, real: &Path) -> bool {
        real.starts_with(&self.root) || real.starts_with(&self.temp_root)
    }
}
