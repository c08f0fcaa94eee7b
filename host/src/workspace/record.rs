//! `workspace.json`: what a task's workspace was made from, so its change can be shown as a
//! patch against a known commit and the workspace rebuilt on another host.
//!
//! Written once, when the task's workspace is first known to be a git checkout (a worktree
//! ctxhost made for a forge item, or a directory the user named that is inside a git
//! repository); rewritten only when a managed worktree is rebuilt at another path (the task
//! resumed on another host). Schema: docs/schemas/workspace.schema.json. Shape (JSON object, UTF-8, one line or pretty):
//!
//! | field | type | meaning |
//! |---|---|---|
//! | `path` | string | the workspace directory, absolute |
//! | `base_commit` | string | the 40-hex (or 64-hex, SHA-256 repositories) commit id `changes.patch` is taken against |
//! | `repository` | string or null | the remote's URL without credentials (`https://host/o/r.git`), when known |
//! | `ref` | string or null | the ref the base was taken from (`refs/heads/main`, `refs/pull/7/head`) |
//! | `managed` | bool | true when ctxhost made the worktree (it may delete and rebuild it); false for a user's directory |

use serde::{Deserialize, Serialize};

use crate::task_dir::TaskDir;

/// The file name of the record in the task directory.
pub const FILE: &str = ctxhost_format::files::WORKSPACE;

/// Largest `workspace.json` read back (bytes): the record is a few hundred bytes.
const MAX_BYTES: u64 = 64 * 1024;

/// What a task's workspace was made from (see the module docs for the JSON shape).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceRecord {
    /// The workspace directory, absolute.
    pub path: String,
    /// The commit `changes.patch` is taken against (hex).
    pub base_commit: String,
    /// The remote's URL without credentials, when known.
    #[serde(default)]
    pub repository: Option<String>,
    /// The ref the base was taken from, when known.
    #[serde(default, rename = "ref")]
    pub git_ref: Option<String>,
    /// Whether ctxhost made the worktree (and may delete and rebuild it).
    #[serde(default)]
    pub managed: bool,
}

impl WorkspaceRecord {
    /// Read the record of task directory `dir`: `Ok(None)` when it has none. Errors name the
    /// file: unreadable, over 64 KiB, or not the shape above.
    pub fn read(dir: &TaskDir) -> anyhow::Result<Option<WorkspaceRecord>> {
        let Some(bytes) = dir
            .read_bounded_if_exists(FILE, MAX_BYTES)
            .map_err(|e| anyhow::anyhow!("cannot read {FILE}: {e}"))?
        else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("{FILE} is not a workspace record: {e}"))
    }

    /// Write the record into task directory `dir`, atomically (DESIGN §7).
    pub fn write(&self, dir: &TaskDir) -> anyhow::Result<()> {
        let mut bytes = serde_json::to_vec_pretty(self)?;
        bytes.push(b'\n');
        dir.write_atomic(FILE, &bytes)
            .map_err(|e| anyhow::anyhow!("cannot write {FILE}: {e}"))
    }
}

/// `url` without its user information (`https://user:token@host/x` → `https://host/x`), for
/// recording a remote where it may be read; a URL that does not parse is returned unchanged
/// only when it has no `@` before its path, else `None` (it might hold a secret).
pub fn without_credentials(url: &str) -> Option<String> {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = match rest.find('/') {
                Some(i) => rest.split_at(i),
                None => (rest, ""),
            };
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            Some(format!("{scheme}://{host}{path}"))
        }
        None if url.contains('@') => None,
        None => Some(url.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_taken_out_of_a_url() {
        assert_eq!(
            without_credentials("https://x-access-token:ghs_abc@github.com/o/r.git").as_deref(),
            Some("https://github.com/o/r.git")
        );
        assert_eq!(
            without_credentials("http://127.0.0.1:8080/o/r.git").as_deref(),
            Some("http://127.0.0.1:8080/o/r.git")
        );
        assert_eq!(without_credentials("git@github.com:o/r.git"), None);
        assert_eq!(
            without_credentials("/srv/git/r.git").as_deref(),
            Some("/srv/git/r.git")
        );
    }

    #[test]
    fn a_record_round_trips_and_an_unknown_field_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        assert_eq!(WorkspaceRecord::read(&dir).unwrap(), None);
        let rec = WorkspaceRecord {
            path: "/w".into(),
            base_commit: "a".repeat(40),
            repository: Some("https://h/o/r.git".into()),
            git_ref: Some("refs/heads/main".into()),
            managed: true,
        };
        rec.write(&dir).unwrap();
        assert_eq!(WorkspaceRecord::read(&dir).unwrap(), Some(rec));
        std::fs::write(
            tmp.path().join(FILE),
            br#"{"path":"/w","base_commit":"a","x":1}"#,
        )
        .unwrap();
        let err = WorkspaceRecord::read(&dir).unwrap_err().to_string();
        assert!(err.contains(FILE), "{err}");
    }
}
