//! A real git remote over smart HTTP for tests: Debian's `git-http-backend` run as a CGI
//! program behind a small HTTP/1.1 server on `127.0.0.1:<ephemeral port>` (the plumbing of
//! [`super::http`]), serving bare repositories it creates under a temporary directory.
//!
//! ```ignore
//! let git = GitHttp::start("x-access-token", "tok-secret");
//! git.add_repo("acme/app", &[("README.md", "hello\n")]); // one commit on `main`
//! let url = git.url("acme/app"); // http://127.0.0.1:PORT/acme/app.git
//! // ... clone/push with `Authorization: Basic base64(x-access-token:tok-secret)` ...
//! assert_eq!(git.file_at("acme/app", "main", "README.md").as_deref(), Some("hello\n"));
//! assert!(git.requests().iter().all(|r| !r.target.contains("tok-secret")));
//! ```
//!
//! What it does, as a forge's git endpoint does:
//! - every request must carry `Authorization: Basic base64(USER:TOKEN)` with the token given
//!   to [`GitHttp::start`]; otherwise 401 with `WWW-Authenticate: Basic realm="git"` (git then
//!   fails, since the tests' clients have no credential helper);
//! - the backend gets `GIT_PROJECT_ROOT`, `GIT_HTTP_EXPORT_ALL`, `PATH_INFO`, `QUERY_STRING`,
//!   `REQUEST_METHOD`, `CONTENT_TYPE`, `CONTENT_LENGTH`, `REMOTE_USER` and
//!   `HTTP_CONTENT_ENCODING` (a gzip'd body is passed as is: the backend inflates it), the
//!   request body on stdin; its `Status:` header becomes the response's status;
//! - pushes are allowed (`http.receivepack true` in every repository);
//! - every request is recorded ([`GitRequest`]: method, raw target, headers, status), so a test
//!   can assert where a token did and did not travel.
#![allow(dead_code)]

use std::io::{self, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;

use base64::Engine as _;

use super::http::{Request, Server, read_request, write_response};

/// Debian's smart-HTTP CGI program (package `git`).
pub const HTTP_BACKEND: &str = "/usr/lib/git-core/git-http-backend";

/// One request as received, with the status it was answered.
#[derive(Debug, Clone)]
pub struct GitRequest {
    /// `GET` or `POST`.
    pub method: String,
    /// The request target exactly as sent (path and query, not decoded).
    pub target: String,
    /// Header (name, value) pairs as received.
    pub headers: Vec<(String, String)>,
    /// The status answered.
    pub status: u16,
}

impl GitRequest {
    /// The header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

struct State {
    user: String,
    token: String,
    requests: Vec<GitRequest>,
}

/// A running git smart-HTTP server. Stops accepting when dropped; its repositories are removed
/// with it.
pub struct GitHttp {
    server: Server,
    root: tempfile::TempDir,
    state: Arc<Mutex<State>>,
}

impl GitHttp {
    /// Serve repositories to clients authenticating as `user` with `token` (HTTP basic).
    pub fn start(user: &str, token: &str) -> GitHttp {
        assert!(
            Path::new(HTTP_BACKEND).exists(),
            "{HTTP_BACKEND} is missing (Debian package git)"
        );
        let root = tempfile::tempdir().expect("git server root");
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind git server");
        let state = Arc::new(Mutex::new(State {
            user: user.to_string(),
            token: token.to_string(),
            requests: Vec::new(),
        }));
        let (st, dir) = (state.clone(), root.path().to_path_buf());
        let server = Server::serve(listener, "git-http", move |stream, _| {
            serve(stream, &st, &dir)
        })
        .expect("start git server");
        GitHttp {
            server,
            root,
            state,
        }
    }

    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// The clone URL of `name` (`owner/repo`): `http://127.0.0.1:PORT/owner/repo.git`.
    pub fn url(&self, name: &str) -> String {
        format!("{}/{name}.git", self.base_url())
    }

    /// The token the server accepts.
    pub fn token(&self) -> String {
        self.lock().token.clone()
    }

    /// The bare repository's directory on disk (`ROOT/owner/repo.git`).
    pub fn git_dir(&self, name: &str) -> PathBuf {
        self.root.path().join(format!("{name}.git"))
    }

    /// Create the bare repository `name` (`owner/repo`) with one commit on `main` holding
    /// `files` (path, content); returns the commit id. Pushes are enabled.
    pub fn add_repo(&self, name: &str, files: &[(&str, &str)]) -> String {
        let dir = self.git_dir(name);
        std::fs::create_dir_all(&dir).unwrap();
        git(&dir, &["init", "-q", "--bare", "-b", "main"]);
        git(&dir, &["config", "http.receivepack", "true"]);
        self.commit(name, "main", files, "initial commit")
    }

    /// Commit `files` (path, content; other files kept) on top of `rev`'s commit (or as a root
    /// commit when `rev` does not exist yet) and point ref `refname` at it (`main` means
    /// `refs/heads/main`; a full name such as `refs/pull/7/head` is taken as is). Returns the
    /// new commit id.
    pub fn commit_on(
        &self,
        name: &str,
        rev: &str,
        refname: &str,
        files: &[(&str, &str)],
        message: &str,
    ) -> String {
        let dir = self.git_dir(name);
        let work = tempfile::tempdir().unwrap();
        let index = work.path().join("index");
        let parent = self.rev_parse(name, rev);
        let env: &[(&str, &Path)] = &[("GIT_INDEX_FILE", &index)];
        if let Some(p) = &parent {
            git_env(&dir, &["read-tree", p], env);
        }
        for (path, content) in files {
            let blob = git_in(&dir, &["hash-object", "-w", "--stdin"], content.as_bytes());
            git_env(
                &dir,
                &[
                    "update-index",
                    "--add",
                    "--cacheinfo",
                    &format!("100644,{blob},{path}"),
                ],
                env,
            );
        }
        let tree = git_env(&dir, &["write-tree"], env);
        let mut args = vec!["commit-tree", tree.as_str(), "-m", message];
        if let Some(p) = &parent {
            args.extend(["-p", p.as_str()]);
        }
        let commit = git(&dir, &args);
        let full = if refname.starts_with("refs/") {
            refname.to_string()
        } else {
            format!("refs/heads/{refname}")
        };
        git(&dir, &["update-ref", &full, &commit]);
        commit
    }

    /// [`GitHttp::commit_on`] with `branch` as both the parent and the ref moved.
    pub fn commit(
        &self,
        name: &str,
        branch: &str,
        files: &[(&str, &str)],
        message: &str,
    ) -> String {
        self.commit_on(name, branch, branch, files, message)
    }

    /// The commit id `rev` names in `name`, or `None`.
    pub fn rev_parse(&self, name: &str, rev: &str) -> Option<String> {
        let out = Command::new("git")
            .arg("--git-dir")
            .arg(self.git_dir(name))
            .args([
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("{rev}^{{commit}}"),
            ])
            .output()
            .unwrap();
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Every ref of `name` as (full ref name, commit id), sorted by name.
    pub fn refs(&self, name: &str) -> Vec<(String, String)> {
        let out = git(
            &self.git_dir(name),
            &["for-each-ref", "--format=%(refname) %(objectname)"],
        );
        let mut refs: Vec<(String, String)> = out
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(r, c)| (r.to_string(), c.to_string()))
            .collect();
        refs.sort();
        refs
    }

    /// The branch names of `name` (without `refs/heads/`), sorted.
    pub fn branches(&self, name: &str) -> Vec<String> {
        self.refs(name)
            .into_iter()
            .filter_map(|(r, _)| r.strip_prefix("refs/heads/").map(str::to_string))
            .collect()
    }

    /// The content of `path` at `rev` in `name` (UTF-8, lossy), or `None` when either is missing.
    pub fn file_at(&self, name: &str, rev: &str, path: &str) -> Option<String> {
        let out = Command::new("git")
            .arg("--git-dir")
            .arg(self.git_dir(name))
            .args(["show", &format!("{rev}:{path}")])
            .output()
            .unwrap();
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The full message of commit `rev` in `name`.
    pub fn message(&self, name: &str, rev: &str) -> String {
        git(&self.git_dir(name), &["log", "-1", "--format=%B", rev])
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<GitRequest> {
        self.lock().requests.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `git ARGS` in (bare) repository `dir`; its trimmed stdout. Panics on failure.
fn git(dir: &Path, args: &[&str]) -> String {
    git_env(dir, args, &[])
}

fn git_env(dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> String {
    let mut cmd = Command::new("git");
    cmd.arg("--git-dir").arg(dir).args(args);
    cmd.env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn git_in(dir: &Path, args: &[&str], input: &[u8]) -> String {
    let mut child = Command::new("git")
        .arg("--git-dir")
        .arg(dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "git {args:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn serve(stream: TcpStream, state: &Mutex<State>, root: &Path) -> io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        let Some(req) = read_request(&mut reader)? else {
            return Ok(());
        };
        let (user, token) = {
            let s = state.lock().unwrap_or_else(|p| p.into_inner());
            (s.user.clone(), s.token.clone())
        };
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{token}"))
        );
        let (status, headers, body) = if req.header("authorization") == Some(expected.as_str()) {
            cgi(&req, root, &user)
        } else {
            (
                401,
                vec![
                    (
                        "WWW-Authenticate".to_string(),
                        "Basic realm=\"git\"".to_string(),
                    ),
                    ("Content-Type".to_string(), "text/plain".to_string()),
                ],
                b"authentication required\n".to_vec(),
            )
        };
        state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .requests
            .push(GitRequest {
                method: req.method.clone(),
                target: req.target.clone(),
                headers: req.headers.clone(),
                status,
            });
        write_response(&mut writer, status, &headers, &body)?;
        if req.wants_close() {
            return Ok(());
        }
    }
}

/// An answer: status, headers (no `Content-Length`), body.
type CgiAnswer = (u16, Vec<(String, String)>, Vec<u8>);

/// Run the backend for `req`; (status, headers, body) of its answer.
fn cgi(req: &Request, root: &Path, user: &str) -> CgiAnswer {
    let (path, query) = req.target.split_once('?').unwrap_or((&req.target, ""));
    let mut cmd = Command::new(HTTP_BACKEND);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("PATH_INFO", percent_decode(path))
        .env("QUERY_STRING", query)
        .env("REQUEST_METHOD", &req.method)
        .env("REMOTE_USER", user)
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("SERVER_PROTOCOL", "HTTP/1.1")
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("CONTENT_LENGTH", req.body.len().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(ct) = req.header("content-type") {
        cmd.env("CONTENT_TYPE", ct);
    }
    if let Some(ce) = req.header("content-encoding") {
        cmd.env("HTTP_CONTENT_ENCODING", ce);
    }
    if let Some(gp) = req.header("git-protocol") {
        cmd.env("GIT_PROTOCOL", gp);
    }
    let fail = |what: String| {
        (
            500,
            vec![("Content-Type".to_string(), "text/plain".to_string())],
            what.into_bytes(),
        )
    };
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return fail(format!("cannot run {HTTP_BACKEND}: {e}")),
    };
    let mut stdin = child.stdin.take().unwrap();
    let body = req.body.clone();
    let feeder = thread::spawn(move || {
        let _ = stdin.write_all(&body);
    });
    let out = match child.wait_with_output() {
        Ok(o) => o,
        Err(e) => return fail(format!("{HTTP_BACKEND}: {e}")),
    };
    let _ = feeder.join();
    parse_cgi(&out.stdout).unwrap_or_else(|| {
        fail(format!(
            "{HTTP_BACKEND} answered no CGI head ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    })
}

/// A CGI answer (`Header: value` lines, a blank line, the body) as (status, headers, body).
fn parse_cgi(out: &[u8]) -> Option<CgiAnswer> {
    let (head_end, sep) = [&b"\r\n\r\n"[..], &b"\n\n"[..]]
        .iter()
        .filter_map(|sep| {
            out.windows(sep.len())
                .position(|w| w == *sep)
                .map(|i| (i, sep.len()))
        })
        .min()?;
    let head = String::from_utf8_lossy(&out[..head_end]);
    let mut status = 200;
    let mut headers = Vec::new();
    for line in head.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        if k.eq_ignore_ascii_case("status") {
            status = v.split_whitespace().next()?.parse().ok()?;
        } else if !k.eq_ignore_ascii_case("content-length") {
            headers.push((k.to_string(), v.to_string()));
        }
    }
    let mut body = Vec::new();
    (&out[head_end + sep..]).read_to_end(&mut body).ok()?;
    Some((status, headers, body))
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(dir: &Path, auth: Option<(&str, &str)>, args: &[&str]) -> std::process::Output {
        let mut cmd = Command::new("git");
        cmd.arg("-C").arg(dir);
        cmd.args(["-c", "credential.helper=", "-c", "core.askPass="]);
        if let Some((u, t)) = auth {
            let b = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{t}"));
            cmd.env("GIT_CONFIG_COUNT", "1")
                .env("GIT_CONFIG_KEY_0", "http.extraHeader")
                .env("GIT_CONFIG_VALUE_0", format!("Authorization: Basic {b}"));
        }
        cmd.args(args)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_AUTHOR_NAME", "T")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "T")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    #[test]
    fn clones_with_the_token_only_refuses_without_it_and_takes_a_push() {
        let srv = GitHttp::start("x-access-token", "tok-git-SECRET");
        let base = srv.add_repo("acme/app", &[("README.md", "hello\n")]);
        srv.commit_on(
            "acme/app",
            "main",
            "refs/pull/7/head",
            &[("a.txt", "pr\n")],
            "pr",
        );
        let tmp = tempfile::tempdir().unwrap();

        // No header: 401 with a challenge, and git fails.
        let out = client(
            tmp.path(),
            None,
            &["clone", "-q", &srv.url("acme/app"), "anon"],
        );
        assert!(!out.status.success());
        let first = &srv.requests()[0];
        assert_eq!(first.status, 401);
        assert!(srv.requests().iter().all(|r| r.status == 401));

        // A wrong token: refused too.
        let out = client(
            tmp.path(),
            Some(("x-access-token", "wrong")),
            &["clone", "-q", &srv.url("acme/app"), "wrong"],
        );
        assert!(!out.status.success());

        // The token: a mirror clone sees main and the pull ref.
        let auth = Some(("x-access-token", "tok-git-SECRET"));
        let out = client(
            tmp.path(),
            auth,
            &["clone", "-q", "--mirror", &srv.url("acme/app"), "m.git"],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = client(
            &tmp.path().join("m.git"),
            None,
            &["rev-parse", "refs/pull/7/head", "main"],
        );
        let revs = String::from_utf8_lossy(&out.stdout);
        assert!(revs.contains(&base), "{revs}");

        // A push of a new branch, over 1 MiB of incompressible data: git sends it chunked.
        let out = client(
            tmp.path(),
            auth,
            &["clone", "-q", &srv.url("acme/app"), "w"],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let w = tmp.path().join("w");
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let big: String = (0..120_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                format!("{x:016x}\n")
            })
            .collect();
        std::fs::write(w.join("big.txt"), &big).unwrap();
        assert!(client(&w, None, &["add", "-A"]).status.success());
        assert!(
            client(&w, None, &["commit", "-q", "-m", "big"])
                .status
                .success()
        );
        // Many local commits: the next fetch's list of haves is over 1 KiB, which git gzips.
        for i in 0..60 {
            std::fs::write(w.join("n.txt"), format!("{i}\n")).unwrap();
            assert!(client(&w, None, &["add", "-A"]).status.success());
            assert!(
                client(&w, None, &["commit", "-q", "-m", "n"])
                    .status
                    .success()
            );
        }
        srv.commit("acme/app", "main", &[("m.txt", "new\n")], "upstream");
        let out = client(
            &w,
            auth,
            &["-c", "protocol.version=0", "fetch", "-q", "origin"],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            srv.requests()
                .iter()
                .any(|r| r.header("content-encoding") == Some("gzip") && r.status == 200)
        );
        let out = client(&w, auth, &["push", "-q", "origin", "HEAD:refs/heads/topic"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            srv.requests()
                .iter()
                .any(|r| r.target.ends_with("/git-receive-pack")
                    && r.header("transfer-encoding") == Some("chunked")
                    && r.status == 200)
        );
        assert_eq!(srv.branches("acme/app"), ["main", "topic"]);
        assert_eq!(srv.file_at("acme/app", "topic", "big.txt").unwrap(), big);
        assert_eq!(
            srv.file_at("acme/app", "main", "README.md").as_deref(),
            Some("hello\n")
        );
        assert_eq!(srv.message("acme/app", "topic"), "n");
        assert!(
            srv.refs("acme/app")
                .iter()
                .any(|(r, _)| r == "refs/pull/7/head")
        );

        // The token travelled in the Authorization header only.
        for r in srv.requests() {
            assert!(!r.target.contains("SECRET"), "{r:?}");
        }
        assert!(srv.requests().iter().any(|r| r.method == "POST"
            && r.target.ends_with("/git-receive-pack")
            && r.status == 200));
    }
}
