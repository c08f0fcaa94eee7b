//! The task's workspace as the file tools see it: a capability handle on the workspace and one
//! on the task's temp dir (cap-std: every open is resolved beneath the directory and never
//! follows a link out of it), and the paths inside them that belong to ctxhost (contexts/, the
//! config file), which no tool may read or write.

use std::fs::File;
use std::path::{Component, Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::Dir;

/// Directories that may not be a workspace, with everything beneath them: the system's own
/// trees (programs, libraries, configuration, kernel interfaces, devices, state). See
/// [`refusal`].
pub const SYSTEM_TREES: &[&str] = &[
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run",
    "/sbin", "/sys", "/usr", "/var",
];

/// Directories beneath a [`SYSTEM_TREES`] entry that may hold a workspace (temporary files
/// anyone may use), though not as themselves.
pub const SYSTEM_EXCEPTIONS: &[&str] = &["/var/tmp"];

/// Directories of a home that hold credentials and keys: never a workspace, nor beneath them.
pub const CREDENTIAL_DIRS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".kube",
    ".docker",
    ".config",
    ".netrc",
    ".password-store",
    ".local/share/keyrings",
];

/// Directories that may not be a workspace themselves (they hold other users' or other
/// programs' directories) but whose subdirectories may.
pub const SHARED_PARENTS: &[&str] = &[
    "/home", "/mnt", "/media", "/opt", "/srv", "/tmp", "/var/tmp",
];

/// Why the canonical directory `root` may not be a task's workspace, or `None` when it may.
/// The one rule of `submit --workspace`, the config's `workspace`, `ask`'s current directory
/// and the built-in tools at run time:
///
/// | directory | workspace? |
/// |---|---|
/// | `/` | no: the tools would get the whole machine |
/// | [`SYSTEM_TREES`] (`/etc`, `/usr`, `/bin`, `/sbin`, `/lib*`, `/boot`, `/proc`, `/sys`, `/dev`, `/run`, `/var`) and beneath | no, except beneath [`SYSTEM_EXCEPTIONS`] (`/var/tmp`) |
/// | `/root` and beneath | no, unless the user's home (`home`) is `/root`: then its subdirectories may |
/// | the user's home itself | no: it holds the user's keys and credentials (a project beneath it may) |
/// | [`CREDENTIAL_DIRS`] of any home (`~/.ssh`, `~/.gnupg`, `~/.aws`, `~/.config`, ...) and beneath | no |
/// | [`SHARED_PARENTS`] (`/home`, `/tmp`, `/srv`, `/opt`, `/mnt`, `/media`, `/var/tmp`) themselves | no; their subdirectories may |
/// | anything else | yes (ctxhost's own contexts/ and config file: see [`checked_root`]) |
///
/// `root` must be canonical (links resolved), else a link to `/etc` would pass; `home`
/// canonical too.
pub fn refusal(root: &Path, home: Option<&Path>) -> Option<String> {
    let shown = root.display();
    if root.parent().is_none() {
        return Some(format!(
            "the workspace {shown} is the root directory: the tools would get the whole machine; \
             use a project directory"
        ));
    }
    let under = |d: &str| root.starts_with(d);
    if let Some(tree) = SYSTEM_TREES.iter().find(|d| under(d))
        && !SYSTEM_EXCEPTIONS.iter().any(|e| root.starts_with(e))
    {
        return Some(format!(
            "the workspace {shown} is (inside) the system directory {tree}: the tools may not \
             change the system; use a project directory"
        ));
    }
    if SHARED_PARENTS.iter().any(|d| root == Path::new(d)) {
        return Some(format!(
            "the workspace {shown} holds other users' or programs' directories: use a project \
             directory beneath it"
        ));
    }
    if home == Some(root) {
        return Some(format!(
            "the workspace {shown} is your home directory (your keys and credentials): use a \
             project directory beneath it"
        ));
    }
    // `~/.ssh` and the like, of the user's home or of any other (`/home/*/…`, `/root/…`).
    let homes = home.into_iter().chain(
        root.ancestors()
            .filter(|a| a.parent() == Some(Path::new("/home")) || *a == Path::new("/root")),
    );
    for h in homes {
        if let Some(dir) = CREDENTIAL_DIRS.iter().find(|d| root.starts_with(h.join(d))) {
            return Some(format!(
                "the workspace {shown} is (inside) {}, which holds keys and credentials: use a \
                 project directory",
                h.join(dir).display()
            ));
        }
    }
    let root_home = Path::new("/root");
    if under("/root") && !(home == Some(root_home) && root != root_home) {
        return Some(format!(
            "the workspace {shown} is (inside) root's home /root, which is not your home: use a \
             project directory of your own"
        ));
    }
    None
}

/// `root` made canonical and checked: [`refusal`] (with the user's home from `$HOME`), and not
/// (beneath) one of the `hidden` paths (contexts/ and the config file: a workspace inside
/// contexts/ would give the tools every task's files and the task store). The rule used by
/// `submit --workspace` before the task is queued and by the tools when it runs.
///
/// Errors (a message naming the directory): it cannot be resolved, is not a directory, or is
/// refused.
pub fn checked_root(root: &Path, hidden: &[PathBuf]) -> Result<PathBuf, String> {
    let canonical = root
        .canonicalize()
        .map_err(|e| format!("the workspace {}: {e}", root.display()))?;
    if !canonical.is_dir() {
        return Err(format!(
            "the workspace {}: not a directory",
            canonical.display()
        ));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .and_then(|h| PathBuf::from(h).canonicalize().ok());
    if let Some(why) = refusal(&canonical, home.as_deref()) {
        return Err(why);
    }
    let hidden = hidden.iter().filter_map(|p| p.canonicalize().ok());
    if let Some(h) = hidden.into_iter().find(|h| canonical.starts_with(h)) {
        return Err(format!(
            "the workspace {} is inside ctxhost's own {} (the task store or the config): \
             the tools would reach every task's files",
            canonical.display(),
            h.display()
        ));
    }
    Ok(canonical)
}

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
    /// Errors: either cannot be opened, or the workspace is refused by [`checked_root`].
    pub fn open(root: &Path, temp_root: &Path, hidden: &[PathBuf]) -> std::io::Result<Workspace> {
        let root = checked_root(root, hidden).map_err(std::io::Error::other)?;
        let temp_root = temp_root.canonicalize()?;
        let hidden: Vec<PathBuf> = hidden
            .iter()
            .filter_map(|p| p.canonicalize().ok())
            .collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The policy table of [`refusal`], row by row.
    #[test]
    fn the_root_system_trees_homes_and_shared_parents_are_refused() {
        let user = Some(Path::new("/home/ann"));
        let root_user = Some(Path::new("/root"));
        let refused = |dir: &str, home: Option<&Path>| refusal(Path::new(dir), home);
        for dir in [
            "/",
            "/etc",
            "/etc/nginx",
            "/usr",
            "/usr/local/src/app",
            "/bin",
            "/sbin",
            "/lib",
            "/lib64",
            "/boot",
            "/proc/self",
            "/sys",
            "/dev",
            "/run/user",
            "/var",
            "/var/lib/app",
            "/var/tmp",
            "/root",
            "/root/proj",
            "/home",
            "/home/ann",
            "/tmp",
            "/srv",
            "/opt",
            "/mnt",
            "/media",
        ] {
            assert!(refused(dir, user).is_some(), "{dir} is a workspace");
        }
        for dir in [
            "/home/ann/proj",
            "/home/bob/proj",
            "/tmp/ctxhost-test-1/proj",
            "/tmp/x",
            "/var/tmp/build",
            "/srv/app",
            "/opt/app/src",
            "/work/repo",
            "/etcetera",
            "/usrx",
        ] {
            assert_eq!(refused(dir, user), None, "{dir}");
        }
        // Root's home: its subdirectories are root's projects, itself is not one.
        assert_eq!(refused("/root/proj", root_user), None);
        let why = refused("/root", root_user).unwrap();
        assert!(why.contains("your home directory"), "{why}");
        let why = refused("/root/proj", user).unwrap();
        assert!(why.contains("root's home /root"), "{why}");
        let why = refused("/", user).unwrap();
        assert!(why.contains("the whole machine"), "{why}");
        let why = refused("/usr/lib", user).unwrap();
        assert!(why.contains("system directory /usr"), "{why}");
    }

    /// Links are resolved before the rule: a link to `/` or `/etc` is refused, a link to a
    /// project is its target; contexts/ and what lies beneath it is refused.
    #[test]
    fn credential_directories_of_a_home_are_refused() {
        let home = Path::new("/home/ann");
        for dir in [
            "/home/ann/.ssh",
            "/home/ann/.aws/x",
            "/home/bob/.gnupg",
            "/root/.ssh",
        ] {
            let why = refusal(Path::new(dir), Some(home)).unwrap();
            assert!(why.contains("keys and credentials"), "{dir}: {why}");
        }
        let why = refusal(Path::new("/root/.ssh"), Some(Path::new("/root"))).unwrap();
        assert!(why.contains("/root/.ssh"), "{why}");
        assert_eq!(refusal(Path::new("/home/ann/project"), Some(home)), None);
        assert_eq!(
            refusal(Path::new("/root/project"), Some(Path::new("/root"))),
            None
        );
    }

    #[test]
    fn checked_root_resolves_links_first_and_refuses_ctxhosts_own_paths() {
        let tmp = tempfile::tempdir().unwrap();
        let link = |name: &str, to: &Path| {
            let p = tmp.path().join(name);
            std::os::unix::fs::symlink(to, &p).unwrap();
            p
        };
        let why = checked_root(&link("r", Path::new("/")), &[]).unwrap_err();
        assert!(why.contains("is the root directory"), "{why}");
        let why = checked_root(&link("e", Path::new("/etc")), &[]).unwrap_err();
        assert!(why.contains("system directory /etc"), "{why}");
        let proj = tmp.path().join("proj");
        std::fs::create_dir(&proj).unwrap();
        assert_eq!(
            checked_root(&link("p", &proj), &[]).unwrap(),
            proj.canonicalize().unwrap()
        );
        let contexts = tmp.path().join("contexts");
        std::fs::create_dir_all(contexts.join("running")).unwrap();
        for dir in [contexts.clone(), contexts.join("running")] {
            let why = checked_root(&dir, std::slice::from_ref(&contexts)).unwrap_err();
            assert!(why.contains("inside ctxhost's own"), "{why}");
        }
        let why = checked_root(&tmp.path().join("none"), &[]).unwrap_err();
        assert!(why.contains("none"), "{why}");
    }
}
