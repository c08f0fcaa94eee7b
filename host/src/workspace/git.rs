//! Running the `git` binary for the host (never for a task's sandboxed tools): one command at a
//! time, with a forge token given to that command only.
//!
//! The token reaches git as an `Authorization` header through the `GIT_CONFIG_COUNT` /
//! `GIT_CONFIG_KEY_n` / `GIT_CONFIG_VALUE_n` environment of the child (git ≥ 2.31): never in
//! a URL, `.git/config`, the command line (`ps` shows it) or a log. Credential helpers and
//! prompts are off, so git neither asks nor stores.

use std::ffi::{OsStr, OsString};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use base64::Engine as _;

/// A token for one git command, as the forge wants it over HTTP basic auth.
#[derive(Clone)]
pub struct Auth {
    /// The basic-auth user name: `x-access-token` for GitHub, `oauth2` for GitLab.
    pub user: String,
    /// The token (from the environment; never logged).
    pub token: String,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("user", &self.user)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// `git` run in one directory. Errors name the command (without any secret) and git's
/// stderr, cut to 2 KiB.
#[derive(Debug, Clone)]
pub struct Git {
    dir: PathBuf,
    auth: Option<Auth>,
    /// Extra environment of every command (`GIT_INDEX_FILE` for a temporary index).
    env: Vec<(OsString, OsString)>,
}

impl Git {
    /// Git commands run in `dir` (`-C dir`).
    pub fn new(dir: impl Into<PathBuf>) -> Git {
        Git {
            dir: dir.into(),
            auth: None,
            env: Vec::new(),
        }
    }

    /// The same, with `key=value` in the environment of every command (never a secret: the
    /// token goes through [`Git::with_auth`]).
    pub fn with_env(&self, key: impl Into<OsString>, value: impl Into<OsString>) -> Git {
        let mut g = self.clone();
        g.env.push((key.into(), value.into()));
        g
    }

    /// The same, with `auth` sent as an `Authorization: Basic` header by every HTTP request
    /// of the commands run through the returned value.
    pub fn with_auth(&self, auth: Option<Auth>) -> Git {
        Git {
            dir: self.dir.clone(),
            auth,
            env: self.env.clone(),
        }
    }

    /// The directory commands run in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The command, ready to run: environment scrubbed of anything that would make git ask,
    /// store a credential or read the user's configuration for credentials.
    pub fn command<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new("git");
        cmd.arg("-C").arg(&self.dir);
        cmd.args(["-c", "credential.helper=", "-c", "core.askPass="]);
        cmd.args(args);
        cmd.env("GIT_TERMINAL_PROMPT", "0")
            .env_remove("GIT_ASKPASS")
            .env_remove("SSH_ASKPASS")
            // The host's own environment must not redirect the command to another repository.
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env_remove("GIT_INDEX_FILE")
            .stdin(Stdio::null());
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        match &self.auth {
            Some(a) => {
                let basic = base64::engine::general_purpose::STANDARD
                    .encode(format!("{}:{}", a.user, a.token));
                cmd.env("GIT_CONFIG_COUNT", "1")
                    .env("GIT_CONFIG_KEY_0", "http.extraHeader")
                    .env(
                        "GIT_CONFIG_VALUE_0",
                        format!("Authorization: Basic {basic}"),
                    );
            }
            None => {
                cmd.env_remove("GIT_CONFIG_COUNT");
            }
        }
        cmd
    }

    /// Run `git ARGS` to its end; `Ok(output)` when it exits 0. An error names `git ARGS`
    /// (the arguments never hold a token) with the exit status and stderr.
    pub fn run<I, S>(&self, args: I) -> anyhow::Result<Output>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.run_with_input(args, None)
    }

    /// [`Git::run`] with `input` written to the command's stdin (a patch for `git apply`).
    pub fn run_with_input<I, S>(&self, args: I, input: Option<&[u8]>) -> anyhow::Result<Output>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<S> = args.into_iter().collect();
        let shown = args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        let cannot = |e: std::io::Error| {
            anyhow::anyhow!("cannot run `git {shown}` in {}: {e}", self.dir.display())
        };
        let mut cmd = self.command(&args);
        let out = match input {
            None => cmd.output().map_err(cannot)?,
            Some(bytes) => {
                let mut child = cmd
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(cannot)?;
                let bytes = bytes.to_vec();
                let feeder = child
                    .stdin
                    .take()
                    .map(|mut stdin| std::thread::spawn(move || stdin.write_all(&bytes)));
                let out = child.wait_with_output().map_err(cannot)?;
                // A command that exits before reading all its input is judged by its status.
                if let Some(f) = feeder {
                    let _ = f.join();
                }
                out
            }
        };
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let err = err.trim();
            let err = &err[..err.floor_char_boundary(2048)];
            anyhow::bail!(
                "`git {shown}` in {} failed ({}): {err}",
                self.dir.display(),
                out.status
            );
        }
        Ok(out)
    }

    /// `git ARGS`'s standard output, trimmed (a commit id, a ref).
    pub fn read<I, S>(&self, args: I) -> anyhow::Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let out = self.run(args)?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_command_is_named_and_the_token_is_nowhere_in_the_error() {
        let tmp = tempfile::tempdir().unwrap();
        let git = Git::new(tmp.path()).with_auth(Some(Auth {
            user: "x-access-token".into(),
            token: "tok-SECRET".into(),
        }));
        let err = git.run(["rev-parse", "HEAD"]).unwrap_err().to_string();
        assert!(err.contains("git rev-parse HEAD"), "{err}");
        assert!(!err.contains("tok-SECRET"), "{err}");
        assert!(!format!("{git:?}").contains("tok-SECRET"));
        Git::new(tmp.path()).run(["init", "-q"]).unwrap();
        assert!(
            Git::new(tmp.path())
                .read(["rev-parse", "--git-dir"])
                .unwrap()
                .ends_with(".git")
        );
    }
}
