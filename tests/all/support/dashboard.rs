//! Helpers for the web dashboard's tests: start `ctxhost serve` on a free port, talk HTTP to it
//! (ureq, or raw bytes on a socket when the exact request line matters), and build task
//! directories and rows by hand.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use ctxhost::db::{Db, NewTask, TaskKey};

use super::TestEnv;

/// A running `ctxhost serve`; killed when dropped.
pub struct Dashboard {
    child: Child,
    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub base: String,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    agent: ureq::Agent,
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Resp {
    /// The first header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The value of cookie `name` set by this answer.
    pub fn set_cookie(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("set-cookie"))
            .filter_map(|(_, v)| v.split(';').next())
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    }

    /// The value of the first `<input … name="NAME" value="…">` in the body (unescaped quotes
    /// are not expected in the values the tests look for).
    pub fn input_value(&self, name: &str) -> Option<String> {
        let key = format!("name=\"{name}\" value=\"");
        let i = self.body.find(&key)? + key.len();
        let end = self.body[i..].find('"')?;
        Some(self.body[i..i + end].to_string())
    }

    /// Panic with the body unless the status is `status`.
    #[track_caller]
    pub fn expect(self, status: u16) -> Resp {
        assert_eq!(self.status, status, "body:\n{}", self.body);
        self
    }
}

fn to_resp(r: ureq::Response) -> Resp {
    let status = r.status();
    let headers = r
        .headers_names()
        .into_iter()
        .flat_map(|n| {
            r.all(&n)
                .into_iter()
                .map(|v| (n.clone(), v.to_string()))
                .collect::<Vec<_>>()
        })
        .collect();
    let body = r.into_string().unwrap_or_default();
    Resp {
        status,
        headers,
        body,
    }
}

impl Dashboard {
    /// Start `ctxhost serve --bind 127.0.0.1:0 ARGS` in `env` and wait for its address.
    pub fn start(env: &TestEnv, args: &[&str]) -> Dashboard {
        Self::start_with(env, args, &[])
    }

    /// Like [`Dashboard::start`] with extra environment variables.
    pub fn start_with(env: &TestEnv, args: &[&str], vars: &[(&str, &str)]) -> Dashboard {
        let mut all = vec!["serve", "--bind", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let mut cmd = env.ctxhost_cmd(&all);
        for (k, v) in vars {
            cmd.cmd.env(k, v);
        }
        Self::start_cmd(cmd)
    }

    /// Start `cmd`, a `ctxhost [GLOBAL FLAGS] serve --bind 127.0.0.1:0 …` command (e.g. on a
    /// contexts/ tree of its own), and wait for its address.
    pub fn start_cmd(mut cmd: super::Cmd) -> Dashboard {
        cmd.cmd.stderr(Stdio::inherit());
        let mut child = cmd
            .cmd
            .stdout(Stdio::piped())
            .spawn()
            .expect("start ctxhost serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the serve banner");
        let base = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in the serve banner: {line:?}"))
            .trim_end_matches('/')
            .to_string();
        let addr = base.trim_start_matches("http://").to_string();
        Dashboard {
            child,
            base,
            addr,
            agent: ureq::AgentBuilder::new()
                .redirects(0)
                .timeout(Duration::from_secs(30))
                .build(),
        }
    }

    /// `GET path` with optional `Cookie` header value.
    pub fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Resp {
        let mut req = self.agent.get(&format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.set(k, v);
        }
        match req.call() {
            Ok(r) | Err(ureq::Error::Status(_, r)) => to_resp(r),
            Err(e) => panic!("GET {path}: {e}"),
        }
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> Resp {
        self.get_with(path, &[])
    }

    /// `GET path`, the body as bytes (a download): status, headers, body.
    pub fn get_bytes(&self, path: &str) -> (u16, Vec<(String, String)>, Vec<u8>) {
        let r = match self.agent.get(&format!("{}{path}", self.base)).call() {
            Ok(r) | Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("GET {path}: {e}"),
        };
        let status = r.status();
        let headers = r
            .headers_names()
            .into_iter()
            .filter_map(|n| r.header(&n).map(|v| (n.clone(), v.to_string())))
            .collect();
        let mut body = Vec::new();
        std::io::Read::read_to_end(&mut r.into_reader(), &mut body).expect("read the body");
        (status, headers, body)
    }

    /// `POST path` with a form body and headers.
    pub fn post_form(&self, path: &str, headers: &[(&str, &str)], form: &[(&str, &str)]) -> Resp {
        let mut req = self.agent.post(&format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.set(k, v);
        }
        match req.send_form(form) {
            Ok(r) | Err(ureq::Error::Status(_, r)) => to_resp(r),
            Err(e) => panic!("POST {path}: {e}"),
        }
    }

    /// `METHOD path` with headers and an optional body (sent as JSON when given).
    pub fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> Resp {
        let mut req = self.agent.request(method, &format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.set(k, v);
        }
        let sent = match body {
            Some(b) => req.set("content-type", "application/json").send_string(b),
            None => req.call(),
        };
        match sent {
            Ok(r) | Err(ureq::Error::Status(_, r)) => to_resp(r),
            Err(e) => panic!("{method} {path}: {e}"),
        }
    }

    /// Send `request` (a whole HTTP/1.1 request, sent as it is) and return the status and the
    /// raw answer. For request targets a client library would normalise (`..`, `%2F`).
    pub fn raw(&self, request: &str) -> (u16, String) {
        let mut s = TcpStream::connect(&self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30))).ok();
        s.write_all(request.as_bytes()).expect("send");
        let mut out = Vec::new();
        s.read_to_end(&mut out).ok();
        let text = String::from_utf8_lossy(&out).into_owned();
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        (status, text)
    }

    /// `GET target` sent raw, with `Host: 127.0.0.1`.
    pub fn raw_get(&self, target: &str) -> (u16, String) {
        self.raw(&format!(
            "GET {target} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        ))
    }

    /// A CSRF cookie and the matching form token, as a browser gets them from `page`.
    pub fn csrf(&self, page: &str) -> (String, String) {
        let r = self.get(page).expect(200);
        let cookie = r.set_cookie("ctxhost_csrf").expect("a CSRF cookie");
        let token = r.input_value("csrf").expect("a csrf field in the page");
        (cookie, token)
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A queued task row with `prompt` (source `local` unless `owner` is given: then a GitHub
/// issue `owner/app#7`), model `model`.
pub fn insert_task(db: &Db, uuid: &str, prompt: &str, owner: Option<&str>, model: &str) {
    db.insert_queued(&NewTask {
        uuid: uuid.to_string(),
        key: TaskKey {
            task_source: if owner.is_some() { "github" } else { "local" }.into(),
            owner: owner.map(str::to_string),
            repo: owner.map(|_| "app".to_string()),
            task_type: owner.map(|_| "issue".to_string()),
            task_id: owner.map(|_| "7".to_string()),
        },
        prompt: prompt.into(),
        user: Some("tester".into()),
        llm_provider: "openai".into(),
        model: model.into(),
        context_length: 1000,
        no_inherit: false,
        workspace: None,
    })
    .expect("insert task");
}

/// Create `contexts/{state}/{uuid}/` with `files` (relative path, content; folders made).
pub fn write_task_dir(
    contexts: &Path,
    state: &str,
    uuid: &str,
    files: &[(&str, String)],
) -> PathBuf {
    let dir = contexts.join(state).join(uuid);
    std::fs::create_dir_all(&dir).expect("task dir");
    for (name, content) in files {
        let p = dir.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("folder");
        }
        std::fs::write(&p, content).expect("write task file");
        // Owner-only, as ctxhost writes its files (fsck, and so `retry`, report anything looser).
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    dir
}

/// A messages.jsonl of `n` messages (seq 1..=n) whose content is `content(seq)`.
pub fn history(n: u64, content: impl Fn(u64) -> String) -> String {
    let roles = ["user", "assistant", "tool", "assistant"];
    let mut s = String::new();
    for seq in 1..=n {
        let role = if seq == 1 {
            "system"
        } else {
            roles[(seq % 4) as usize]
        };
        let line = serde_json::json!({
            "seq": seq,
            "role": role,
            "content": content(seq),
            "timestamp": format!("2026-01-01T00:{:02}:{:02}.000Z", (seq / 60) % 60, seq % 60),
            "tokens": 10 + seq % 7,
        });
        s.push_str(&line.to_string());
        s.push('\n');
    }
    s
}
