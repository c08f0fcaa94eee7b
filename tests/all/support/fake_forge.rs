//! A fake GitHub REST API and a fake GitLab REST API (v4) for tests: real HTTP/1.1 on
//! `127.0.0.1:<ephemeral port>`, hand-written on `std::net`, over an in-memory model of
//! repositories, issues, pull/merge requests, comments and labels. Every call is recorded
//! ([`Call`]).
//!
//! ```ignore
//! let gh = FakeForge::github();
//! let n = gh.add_item("acme/app", Kind::Issue, "Fix it", "Details", &["coding agent"]);
//! // config: sources.github.api_url = gh.api_url(), token in the env var the test sets to gh.token()
//! // ... run ctxhost poll --once, run --once ...
//! assert_eq!(gh.comments("acme/app", n).len(), 1);
//! assert_eq!(gh.labels("acme/app", n), ["coding agent done"]);
//! ```
//!
//! What it checks and serves, as the real APIs do:
//! - the token (GitHub `Authorization: Bearer`, GitLab `PRIVATE-TOKEN`): 401 otherwise;
//!   an unknown repository or item: 404;
//! - GitHub: `GET /repos/{o}/{r}/issues` (open, `labels` filter, pull requests included with a
//!   `pull_request` field), `GET …/issues/{n}`, `GET …/pulls/{n}`, `GET/POST …/issues/{n}/comments`,
//!   `POST …/issues/{n}/labels`, `DELETE …/issues/{n}/labels/{name}` (404 when absent);
//! - GitLab: `GET /api/v4/projects/{id}/{issues,merge_requests}` (`state=opened`, `labels`),
//!   `GET/PUT …/{iid}` (`add_labels` / `remove_labels`, which also add a system note, as GitLab
//!   does), `GET/POST …/{iid}/notes`;
//! - the repository itself (workspaces, issue 40): GitHub `GET /repos/{o}/{r}` (`clone_url`,
//!   `default_branch`), GitLab `GET /projects/{id}` (`http_url_to_repo`, `default_branch`), as
//!   set by [`FakeForge::set_repository`] (e.g. a [`super::git_http::GitHttp`] URL);
//! - pagination: `per_page` (at most 100) and `page`, with `Link: <…>; rel="next"` (and
//!   GitLab's `X-Next-Page`, `X-Total`);
//! - pull requests and merge requests ([`FakeForge::pulls`], in their own functions below):
//!   GitHub `GET /repos/{o}/{r}/pulls` (`head=owner:branch`, `state=open|closed|all`),
//!   `POST …/pulls` (422 when `title`, `head` or `base` is missing, when `head` is not a branch
//!   of the linked git remote, or "A pull request already exists for owner:branch." when an
//!   open one has that head), `GET …/pulls/{n}` (with `head.repo` / `base.repo`); GitLab
//!   `GET /projects/{id}/merge_requests?source_branch=`, `POST …/merge_requests` (400 without
//!   `source_branch`, `target_branch` or `title`, 409 for a second open one from a source
//!   branch), `GET …/merge_requests/{iid}` with `source_project_id` / `target_project_id`;
//! - faults queued with [`FakeForge::push_fault`]: a rate limit (GitHub 403 with
//!   `x-ratelimit-remaining: 0` + `x-ratelimit-reset`; GitLab 429 with `RateLimit-Reset`), a
//!   `Retry-After`, or any status, for the next request matching a method and path fragment.
#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};
use std::io::{self, BufReader};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::http::{Request, Server, read_request, write_response};

/// Which API the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// GitHub REST v3.
    Github,
    /// GitLab REST v4.
    Gitlab,
}

/// An issue or a pull/merge request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Issue,
    Pull,
}

/// A comment (GitLab: note) in the model.
#[derive(Debug, Clone)]
pub struct FComment {
    pub id: u64,
    pub author: String,
    pub body: String,
    pub system: bool,
    pub created_at: String,
}

#[derive(Debug, Clone)]
struct FItem {
    number: u64,
    kind: Kind,
    title: String,
    body: String,
    open: bool,
    author: String,
    labels: Vec<String>,
    comments: Vec<FComment>,
    created_at: String,
}

/// One request as received, with the status it got.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    /// Path without the query, percent-decoded.
    pub path: String,
    /// Query parameters, decoded.
    pub query: Vec<(String, String)>,
    pub headers: Vec<(String, String)>,
    pub body: Value,
    pub status: u16,
    pub at: Instant,
}

impl Call {
    /// The query parameter `k`.
    pub fn param(&self, k: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(a, _)| a == k)
            .map(|(_, v)| v.as_str())
    }

    /// The header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A fault served instead of the real answer.
#[derive(Debug, Clone)]
pub enum Fault {
    /// The forge's rate-limit answer, resetting `secs` seconds from now.
    RateLimit { secs: u64 },
    /// 429 with `Retry-After: secs`.
    RetryAfter { secs: u64 },
    /// Any status with a JSON `{"message"}` body.
    Status(u16),
    /// `status` with the JSON body `{"message": message}` and these headers (e.g. GitHub's
    /// secondary rate limit, a 403 that says so only in its message; a permission 403; a
    /// `Retry-After` as an HTTP date).
    Answer {
        status: u16,
        message: String,
        headers: Vec<(String, String)>,
    },
    /// Do the real work, then close the connection without answering (the client cannot
    /// know whether it happened).
    DropAnswer,
}

struct PendingFault {
    method: String,
    path_contains: String,
    fault: Fault,
}

struct State {
    flavor: Flavor,
    token: String,
    repos: BTreeMap<String, BTreeMap<u64, FItem>>,
    calls: Vec<Call>,
    faults: VecDeque<PendingFault>,
    next_comment_id: u64,
    delay: Duration,
    base: String,
    /// What GitHub's `html_url`s start with, when not `base` (a hostile forge's `javascript:`).
    web_base: Option<String>,
    /// Pull (merge) requests opened through the API, and the heads of the items that are ones.
    pulls: PullState,
    /// Each repository's (clone URL, default branch), served by [`repository_route`].
    repo_info: BTreeMap<String, (String, String)>,
}

/// A running fake forge. Stops accepting when dropped.
pub struct FakeForge {
    flavor: Flavor,
    server: Server,
    state: Arc<Mutex<State>>,
}

impl FakeForge {
    /// A fake GitHub API.
    pub fn github() -> FakeForge {
        FakeForge::start(Flavor::Github)
    }

    /// A fake GitLab API.
    pub fn gitlab() -> FakeForge {
        FakeForge::start(Flavor::Gitlab)
    }

    fn start(flavor: Flavor) -> FakeForge {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind fake forge");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State {
            flavor,
            token: format!("tok-{}-secret", addr.port()),
            repos: BTreeMap::new(),
            calls: Vec::new(),
            faults: VecDeque::new(),
            next_comment_id: 1000,
            delay: Duration::ZERO,
            base: format!("http://{addr}"),
            web_base: None,
            pulls: PullState::default(),
            repo_info: BTreeMap::new(),
        }));
        let st = state.clone();
        let server = Server::serve(listener, "fake-forge", move |stream, _| serve(stream, &st))
            .expect("start fake forge");
        FakeForge {
            flavor,
            server,
            state,
        }
    }

    /// The `api_url` for config.yaml: `http://127.0.0.1:PORT` (GitHub) or
    /// `http://127.0.0.1:PORT/api/v4` (GitLab).
    pub fn api_url(&self) -> String {
        match self.flavor {
            Flavor::Github => format!("http://{}", self.server.addr()),
            Flavor::Gitlab => format!("http://{}/api/v4", self.server.addr()),
        }
    }

    /// The token the API accepts.
    pub fn token(&self) -> String {
        self.lock().token.clone()
    }

    /// Make GitHub's `html_url`s start with `web_base` instead of the API's address (a hostile
    /// forge sending `javascript:` links).
    pub fn set_web_base(&self, web_base: &str) {
        self.lock().web_base = Some(web_base.to_string());
    }

    /// Serve `clone_url` and `default_branch` as `repo`'s (GitHub `GET /repos/{o}/{r}`,
    /// GitLab `GET /projects/:id`); creates `repo` if missing.
    pub fn set_repository(&self, repo: &str, clone_url: &str, default_branch: &str) {
        let mut s = self.lock();
        s.repos.entry(repo.to_string()).or_default();
        s.repo_info.insert(
            repo.to_string(),
            (clone_url.to_string(), default_branch.to_string()),
        );
    }

    /// Create `repo` (empty).
    pub fn add_repo(&self, repo: &str) {
        self.lock().repos.entry(repo.to_string()).or_default();
    }

    /// Add an open item to `repo` (created if missing); returns its number. GitHub numbers
    /// issues and pull requests in one sequence, GitLab each kind in its own.
    pub fn add_item(
        &self,
        repo: &str,
        kind: Kind,
        title: &str,
        body: &str,
        labels: &[&str],
    ) -> u64 {
        let mut s = self.lock();
        let flavor = s.flavor;
        let items = s.repos.entry(repo.to_string()).or_default();
        let number = items
            .values()
            .filter(|i| flavor == Flavor::Github || i.kind == kind)
            .map(|i| i.number)
            .max()
            .unwrap_or(0)
            + 1;
        let key = match (flavor, kind) {
            (Flavor::Gitlab, Kind::Pull) => number + 1_000_000,
            _ => number,
        };
        items.insert(
            key,
            FItem {
                number,
                kind,
                title: title.to_string(),
                body: body.to_string(),
                open: true,
                author: "alice".into(),
                labels: labels.iter().map(|l| l.to_string()).collect(),
                comments: Vec::new(),
                created_at: "2025-01-01T00:00:00Z".into(),
            },
        );
        number
    }

    /// Add a comment by `author`.
    pub fn add_comment(&self, repo: &str, kind: Kind, number: u64, author: &str, body: &str) {
        let mut s = self.lock();
        let id = s.next_comment_id;
        s.next_comment_id += 1;
        let it = item_mut(&mut s, repo, kind, number).expect("no such item");
        it.comments.push(FComment {
            id,
            author: author.into(),
            body: body.into(),
            system: false,
            created_at: format!("2025-01-02T00:00:{:02}Z", id % 60),
        });
    }

    /// The item's labels.
    pub fn labels(&self, repo: &str, kind: Kind, number: u64) -> Vec<String> {
        let mut s = self.lock();
        item_mut(&mut s, repo, kind, number)
            .expect("no such item")
            .labels
            .clone()
    }

    /// Replace the item's labels (a person relabelling it).
    pub fn set_labels(&self, repo: &str, kind: Kind, number: u64, labels: &[&str]) {
        let mut s = self.lock();
        item_mut(&mut s, repo, kind, number)
            .expect("no such item")
            .labels = labels.iter().map(|l| l.to_string()).collect();
    }

    /// The item's comments that are not system notes.
    pub fn comments(&self, repo: &str, kind: Kind, number: u64) -> Vec<FComment> {
        let mut s = self.lock();
        item_mut(&mut s, repo, kind, number)
            .expect("no such item")
            .comments
            .iter()
            .filter(|c| !c.system)
            .cloned()
            .collect()
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// Calls with `method` whose path ends with `suffix`.
    pub fn calls_to(&self, method: &str, suffix: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == method && c.path.ends_with(suffix))
            .collect()
    }

    /// Serve `fault` to the next request with `method` whose path contains `path_contains`.
    pub fn push_fault(&self, method: &str, path_contains: &str, fault: Fault) {
        self.lock().faults.push_back(PendingFault {
            method: method.into(),
            path_contains: path_contains.into(),
            fault,
        });
    }

    /// Wait this long before answering each request.
    pub fn set_delay(&self, d: Duration) {
        self.lock().delay = d;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn item_mut<'a>(s: &'a mut State, repo: &str, kind: Kind, number: u64) -> Option<&'a mut FItem> {
    let flavor = s.flavor;
    let key = match (flavor, kind) {
        (Flavor::Gitlab, Kind::Pull) => number + 1_000_000,
        _ => number,
    };
    s.repos
        .get_mut(repo)?
        .get_mut(&key)
        .filter(|i| i.kind == kind || flavor == Flavor::Github)
}

/// An answer: status, extra headers, JSON body (`None`: no answer at all).
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Value,
    drop: bool,
}

fn answer(status: u16, body: Value) -> Answer {
    Answer {
        status,
        headers: Vec::new(),
        body,
        drop: false,
    }
}

fn message(status: u16, text: &str) -> Answer {
    answer(status, json!({ "message": text }))
}

fn serve(stream: TcpStream, state: &Mutex<State>) -> io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        let Some(Request {
            method,
            target,
            headers,
            body,
        }) = read_request(&mut reader)?
        else {
            return Ok(());
        };
        let delay = state.lock().unwrap_or_else(|p| p.into_inner()).delay;
        if !delay.is_zero() {
            thread::sleep(delay);
        }
        let (path, query) = split_target(&target);
        let body_json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let ans = {
            let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
            let fault_at = s
                .faults
                .iter()
                .position(|f| f.method == method && path.contains(&f.path_contains));
            let fault = fault_at.and_then(|i| s.faults.remove(i)).map(|f| f.fault);
            let mut ans = match &fault {
                Some(Fault::DropAnswer) | None => {
                    route(&mut s, &method, &path, &query, &headers, &body_json)
                }
                Some(f) => fault_answer(s.flavor, f),
            };
            if matches!(fault, Some(Fault::DropAnswer)) {
                ans.drop = true;
            }
            s.calls.push(Call {
                method: method.clone(),
                path: path.clone(),
                query: query.clone(),
                headers: headers.clone(),
                body: body_json,
                status: ans.status,
                at: Instant::now(),
            });
            ans
        };
        if ans.drop {
            let _ = writer.shutdown(std::net::Shutdown::Both);
            return Ok(());
        }
        let text = if ans.status == 204 {
            String::new()
        } else {
            ans.body.to_string()
        };
        let mut headers = vec![("Content-Type".to_string(), "application/json".to_string())];
        headers.extend(ans.headers);
        write_response(&mut writer, ans.status, &headers, text.as_bytes())?;
    }
}

fn fault_answer(flavor: Flavor, f: &Fault) -> Answer {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    match (flavor, f) {
        (Flavor::Github, Fault::RateLimit { secs }) => Answer {
            status: 403,
            headers: vec![
                ("x-ratelimit-limit".into(), "5000".into()),
                ("x-ratelimit-remaining".into(), "0".into()),
                ("x-ratelimit-reset".into(), (now + secs).to_string()),
            ],
            body: json!({"message": "API rate limit exceeded for user ID 1."}),
            drop: false,
        },
        (Flavor::Gitlab, Fault::RateLimit { secs }) => Answer {
            status: 429,
            headers: vec![
                ("RateLimit-Limit".into(), "600".into()),
                ("RateLimit-Remaining".into(), "0".into()),
                ("RateLimit-Reset".into(), (now + secs).to_string()),
            ],
            body: json!({"message": "Retry later"}),
            drop: false,
        },
        (_, Fault::RetryAfter { secs }) => Answer {
            status: 429,
            headers: vec![("Retry-After".into(), secs.to_string())],
            body: json!({"message": "You have exceeded a secondary rate limit."}),
            drop: false,
        },
        (_, Fault::Status(code)) => message(*code, "injected fault"),
        (
            _,
            Fault::Answer {
                status,
                message: text,
                headers,
            },
        ) => {
            let mut a = message(*status, text);
            a.headers = headers.clone();
            a
        }
        (_, Fault::DropAnswer) => unreachable!(),
    }
}

fn route(
    s: &mut State,
    method: &str,
    path: &str,
    query: &[(String, String)],
    headers: &[(String, String)],
    body: &Value,
) -> Answer {
    let header = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.as_str())
    };
    match s.flavor {
        Flavor::Github => {
            if header("authorization") != Some(&format!("Bearer {}", s.token)) {
                return message(401, "Bad credentials");
            }
            if let Some(a) = repository_route(s, method, path) {
                return a;
            }
            if let Some(a) = github_pulls(s, method, path, query, body) {
                return a;
            }
            github(s, method, path, query, body)
        }
        Flavor::Gitlab => {
            if header("private-token") != Some(s.token.as_str()) {
                return message(401, "401 Unauthorized");
            }
            if let Some(a) = repository_route(s, method, path) {
                return a;
            }
            if let Some(a) = gitlab_pulls(s, method, path, query, body) {
                return a;
            }
            gitlab(s, method, path, query, body)
        }
    }
}

/// The repository itself (issue 40's workspaces): GitHub `GET /repos/{o}/{r}` →
/// `{full_name, clone_url, default_branch, …}`; GitLab `GET /api/v4/projects/{id}` →
/// `{path_with_namespace, http_url_to_repo, default_branch, …}`. The clone URL and default
/// branch are those given to [`FakeForge::set_repository`] (a repository without them: the
/// fake's own address and `main`). `None`: another route.
fn repository_route(s: &State, method: &str, path: &str) -> Option<Answer> {
    if method != "GET" {
        return None;
    }
    let repo = match s.flavor {
        Flavor::Github => {
            let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
            match parts[..] {
                ["repos", o, r] => format!("{o}/{r}"),
                _ => return None,
            }
        }
        // The project id is the decoded path: it has no collection after it.
        Flavor::Gitlab => {
            let rest = path.strip_prefix("/api/v4/projects/")?;
            if ["/issues", "/merge_requests"]
                .iter()
                .any(|c| rest.contains(c))
            {
                return None;
            }
            rest.to_string()
        }
    };
    if !s.repos.contains_key(&repo) {
        return Some(message(404, "Not Found"));
    }
    let (clone_url, branch) = s
        .repo_info
        .get(&repo)
        .cloned()
        .unwrap_or_else(|| (format!("{}/{repo}.git", s.base), "main".into()));
    Some(answer(
        200,
        match s.flavor {
            Flavor::Github => json!({
                "full_name": repo,
                "private": true,
                "html_url": format!("{}/{repo}", s.base),
                "clone_url": clone_url,
                "default_branch": branch,
            }),
            Flavor::Gitlab => json!({
                "id": 77,
                "path_with_namespace": repo,
                "web_url": format!("{}/{repo}", s.base),
                "http_url_to_repo": clone_url,
                "default_branch": branch,
            }),
        },
    ))
}

fn param<'a>(q: &'a [(String, String)], k: &str) -> Option<&'a str> {
    q.iter().find(|(a, _)| a == k).map(|(_, v)| v.as_str())
}

/// One page of `all` and the pagination headers, for request `path` + `query`.
fn paginate(
    base: &str,
    path: &str,
    query: &[(String, String)],
    all: Vec<Value>,
    gitlab: bool,
) -> Answer {
    let per_page = param(query, "per_page")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(if gitlab { 20 } else { 30 })
        .clamp(1, 100);
    let page = param(query, "page")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    let pages = all.len().div_ceil(per_page).max(1);
    let items: Vec<Value> = all
        .iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .cloned()
        .collect();
    let link_to = |p: usize| {
        let mut q: Vec<String> = query
            .iter()
            .filter(|(k, _)| k != "page")
            .map(|(k, v)| format!("{k}={}", encode(v)))
            .collect();
        q.push(format!("page={p}"));
        let enc_path = if gitlab {
            reencode_project(path)
        } else {
            path.to_string()
        };
        format!("{base}{enc_path}?{}", q.join("&"))
    };
    let mut links = Vec::new();
    if page < pages {
        links.push(format!("<{}>; rel=\"next\"", link_to(page + 1)));
    }
    links.push(format!("<{}>; rel=\"first\"", link_to(1)));
    links.push(format!("<{}>; rel=\"last\"", link_to(pages)));
    let mut headers = vec![("Link".to_string(), links.join(", "))];
    if gitlab {
        headers.push(("X-Page".into(), page.to_string()));
        headers.push(("X-Per-Page".into(), per_page.to_string()));
        headers.push(("X-Total".into(), all.len().to_string()));
        headers.push((
            "X-Next-Page".into(),
            if page < pages {
                (page + 1).to_string()
            } else {
                String::new()
            },
        ));
    }
    Answer {
        status: 200,
        headers,
        body: Value::Array(items),
        drop: false,
    }
}

/// `/api/v4/projects/a/b/issues` -> `/api/v4/projects/a%2Fb/issues` (the project id encoded
/// back, as GitLab's links have it). Only used for the fake's own next links.
fn reencode_project(path: &str) -> String {
    let Some(rest) = path.strip_prefix("/api/v4/projects/") else {
        return path.to_string();
    };
    for coll in ["/issues", "/merge_requests"] {
        if let Some(i) = rest.find(coll) {
            return format!("/api/v4/projects/{}{}", encode(&rest[..i]), &rest[i..]);
        }
    }
    path.to_string()
}

fn gh_issue(base: &str, repo: &str, i: &FItem) -> Value {
    let mut v = json!({
        "number": i.number,
        "title": i.title,
        "body": if i.body.is_empty() { Value::Null } else { Value::String(i.body.clone()) },
        "state": if i.open { "open" } else { "closed" },
        "html_url": format!("{base}/{repo}/{}/{}", if i.kind == Kind::Pull { "pull" } else { "issues" }, i.number),
        "user": {"login": i.author},
        "labels": i.labels.iter().map(|l| json!({"name": l, "color": "ededed"})).collect::<Vec<_>>(),
        "comments": i.comments.len(),
        "created_at": i.created_at,
    });
    if i.kind == Kind::Pull {
        v["pull_request"] = json!({"url": format!("{base}/repos/{repo}/pulls/{}", i.number)});
    }
    v
}

fn gh_comment(base: &str, repo: &str, n: u64, c: &FComment) -> Value {
    json!({
        "id": c.id,
        "user": {"login": c.author},
        "body": c.body,
        "created_at": c.created_at,
        "html_url": format!("{base}/{repo}/issues/{n}#issuecomment-{}", c.id),
    })
}

fn github(
    s: &mut State,
    method: &str,
    path: &str,
    query: &[(String, String)],
    body: &Value,
) -> Answer {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    if parts.len() < 4 || parts[0] != "repos" {
        return message(404, "Not Found");
    }
    let repo = format!("{}/{}", parts[1], parts[2]);
    let base = s.base.clone();
    let web = s.web_base.clone().unwrap_or_else(|| base.clone());
    if !s.repos.contains_key(&repo) {
        return message(404, "Not Found");
    }
    let rest = &parts[3..];
    let next_id = s.next_comment_id;
    let items = s.repos.get_mut(&repo).unwrap();
    match (method, rest) {
        ("GET", ["issues"]) => {
            let wanted: Vec<&str> = param(query, "labels")
                .map(|l| l.split(',').collect())
                .unwrap_or_default();
            let state = param(query, "state").unwrap_or("open");
            let all: Vec<Value> = items
                .values()
                .filter(|i| state == "all" || (state == "open") == i.open)
                .filter(|i| wanted.iter().all(|w| i.labels.iter().any(|l| l == w)))
                .map(|i| gh_issue(&web, &repo, i))
                .collect();
            paginate(&base, path, query, all, false)
        }
        (_, [kind, n, tail @ ..]) if *kind == "issues" || *kind == "pulls" => {
            let Ok(n) = n.parse::<u64>() else {
                return message(404, "Not Found");
            };
            let Some(it) = items.get_mut(&n) else {
                return message(404, "Not Found");
            };
            match (method, *kind, tail) {
                ("GET", "issues", []) => answer(200, gh_issue(&web, &repo, it)),
                ("GET", "pulls", []) if it.kind == Kind::Pull => answer(
                    200,
                    json!({"number": n, "head": {"ref": format!("feature-{n}")}, "base": {"ref": "main"}}),
                ),
                ("GET", "issues", ["comments"]) => {
                    let all = it
                        .comments
                        .iter()
                        .map(|c| gh_comment(&web, &repo, n, c))
                        .collect();
                    paginate(&base, path, query, all, false)
                }
                ("POST", "issues", ["comments"]) => {
                    let Some(text) = body["body"].as_str() else {
                        return message(422, "body is missing");
                    };
                    let c = FComment {
                        id: next_id,
                        author: "ctxhost-bot".into(),
                        body: text.into(),
                        system: false,
                        created_at: "2025-01-03T00:00:00Z".into(),
                    };
                    it.comments.push(c.clone());
                    s.next_comment_id += 1;
                    answer(201, gh_comment(&web, &repo, n, &c))
                }
                ("POST", "issues", ["labels"]) => {
                    let Some(add) = body["labels"].as_array() else {
                        return message(422, "labels is missing");
                    };
                    for l in add.iter().filter_map(Value::as_str) {
                        if !it.labels.iter().any(|x| x == l) {
                            it.labels.push(l.to_string());
                        }
                    }
                    answer(
                        200,
                        json!(
                            it.labels
                                .iter()
                                .map(|l| json!({"name": l}))
                                .collect::<Vec<_>>()
                        ),
                    )
                }
                ("DELETE", "issues", ["labels", name]) => {
                    let before = it.labels.len();
                    it.labels.retain(|l| l != name);
                    if it.labels.len() == before {
                        message(404, "Label does not exist")
                    } else {
                        answer(
                            200,
                            json!(
                                it.labels
                                    .iter()
                                    .map(|l| json!({"name": l}))
                                    .collect::<Vec<_>>()
                            ),
                        )
                    }
                }
                _ => message(404, "Not Found"),
            }
        }
        _ => message(404, "Not Found"),
    }
}

fn gl_item(base: &str, repo: &str, i: &FItem) -> Value {
    let coll = if i.kind == Kind::Pull {
        "merge_requests"
    } else {
        "issues"
    };
    let mut v = json!({
        "iid": i.number,
        "id": i.number + 5000,
        "title": i.title,
        "description": if i.body.is_empty() { Value::Null } else { Value::String(i.body.clone()) },
        "state": if i.open { "opened" } else { "closed" },
        "web_url": format!("{base}/{repo}/-/{coll}/{}", i.number),
        "author": {"username": i.author},
        "labels": i.labels,
        "user_notes_count": i.comments.iter().filter(|c| !c.system).count(),
        "created_at": i.created_at,
    });
    if i.kind == Kind::Pull {
        v["source_branch"] = json!(format!("feature-{}", i.number));
        v["target_branch"] = json!("main");
    }
    v
}

fn gitlab(
    s: &mut State,
    method: &str,
    path: &str,
    query: &[(String, String)],
    body: &Value,
) -> Answer {
    let Some(rest) = path.strip_prefix("/api/v4/projects/") else {
        return message(404, "404 Not Found");
    };
    // The project id is a decoded path: split at the collection.
    let (project, tail) = match ["/issues", "/merge_requests"]
        .iter()
        .filter_map(|c| rest.find(c).map(|i| (&rest[..i], &rest[i + 1..])))
        .next()
    {
        Some(x) => x,
        None => return message(404, "404 Not Found"),
    };
    let base = s.base.clone();
    if !s.repos.contains_key(project) {
        return message(404, "404 Project Not Found");
    }
    let next_id = s.next_comment_id;
    let parts: Vec<&str> = tail.split('/').collect();
    let kind = if parts[0] == "merge_requests" {
        Kind::Pull
    } else {
        Kind::Issue
    };
    let items = s.repos.get_mut(project).unwrap();
    match (method, &parts[1..]) {
        ("GET", []) => {
            let wanted: Vec<&str> = param(query, "labels")
                .map(|l| l.split(',').collect())
                .unwrap_or_default();
            let state = param(query, "state").unwrap_or("all");
            let all: Vec<Value> = items
                .values()
                .filter(|i| i.kind == kind)
                .filter(|i| state == "all" || (state == "opened") == i.open)
                .filter(|i| wanted.iter().all(|w| i.labels.iter().any(|l| l == w)))
                .map(|i| gl_item(&base, project, i))
                .collect();
            paginate(&base, path, query, all, true)
        }
        (_, [iid, tail @ ..]) => {
            let Ok(n) = iid.parse::<u64>() else {
                return message(404, "404 Not Found");
            };
            let key = if kind == Kind::Pull { n + 1_000_000 } else { n };
            let Some(it) = items.get_mut(&key) else {
                return message(404, "404 Not Found");
            };
            match (method, tail) {
                ("GET", []) => answer(200, gl_item(&base, project, it)),
                ("PUT", []) => {
                    let list = |k: &str| -> Vec<String> {
                        body[k]
                            .as_str()
                            .unwrap_or("")
                            .split(',')
                            .map(str::trim)
                            .filter(|l| !l.is_empty())
                            .map(str::to_string)
                            .collect()
                    };
                    let (add, remove) = (list("add_labels"), list("remove_labels"));
                    let mut changed = Vec::new();
                    for l in &add {
                        if !it.labels.contains(l) {
                            it.labels.push(l.clone());
                            changed.push(format!("added ~\"{l}\""));
                        }
                    }
                    let before = it.labels.clone();
                    it.labels.retain(|l| !remove.contains(l));
                    for l in before.iter().filter(|l| !it.labels.contains(l)) {
                        changed.push(format!("removed ~\"{l}\""));
                    }
                    if !changed.is_empty() {
                        it.comments.push(FComment {
                            id: next_id,
                            author: "ctxhost-bot".into(),
                            body: changed.join(" "),
                            system: true,
                            created_at: "2025-01-03T00:00:00Z".into(),
                        });
                        s.next_comment_id += 1;
                    }
                    let items = s.repos.get_mut(project).unwrap();
                    answer(200, gl_item(&base, project, items.get(&key).unwrap()))
                }
                ("GET", ["notes"]) => {
                    let all = it
                        .comments
                        .iter()
                        .map(|c| {
                            json!({"id": c.id, "body": c.body, "author": {"username": c.author},
                                   "created_at": c.created_at, "system": c.system})
                        })
                        .collect();
                    paginate(&base, path, query, all, true)
                }
                ("POST", ["notes"]) => {
                    let Some(text) = body["body"].as_str() else {
                        return message(400, "body is missing");
                    };
                    let c = FComment {
                        id: next_id,
                        author: "ctxhost-bot".into(),
                        body: text.into(),
                        system: false,
                        created_at: "2025-01-03T00:00:00Z".into(),
                    };
                    it.comments.push(c.clone());
                    s.next_comment_id += 1;
                    answer(
                        201,
                        json!({"id": c.id, "body": c.body, "author": {"username": c.author},
                               "created_at": c.created_at, "system": false}),
                    )
                }
                _ => message(404, "404 Not Found"),
            }
        }
        _ => message(404, "404 Not Found"),
    }
}

/// (decoded path, decoded query pairs) of a request target.
fn split_target(target: &str) -> (String, Vec<(String, String)>) {
    let (p, q) = target.split_once('?').unwrap_or((target, ""));
    let query = q
        .split('&')
        .filter(|x| !x.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (decode(k), decode(v))
        })
        .collect();
    (decode(p), query)
}

fn decode(s: &str) -> String {
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
        } else if b[i] == b'+' {
            out.push(b' ');
            i += 1;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A pull (merge) request opened through the API.
#[derive(Debug, Clone)]
pub struct FPull {
    pub repo: String,
    pub number: u64,
    pub title: String,
    pub head: String,
    pub base: String,
    pub body: String,
    pub open: bool,
}

/// Whether branch (2nd) exists in repository (1st) of the git remote linked to the fake.
type BranchCheck = Arc<dyn Fn(&str, &str) -> bool + Send + Sync>;

#[derive(Default)]
struct PullState {
    opened: Vec<FPull>,
    /// (repo, item number) → (head branch, from a fork) of the items that are pull requests.
    heads: BTreeMap<(String, u64), (String, bool)>,
    branch_check: Option<BranchCheck>,
}

impl FakeForge {
    /// The pull (merge) requests opened through the API in `repo`, in order.
    pub fn pulls(&self, repo: &str) -> Vec<FPull> {
        self.lock()
            .pulls
            .opened
            .iter()
            .filter(|p| p.repo == repo)
            .cloned()
            .collect()
    }

    /// Make pull request item `number` of `repo` come from `branch` (default `feature-N`), of
    /// a fork when `fork`.
    pub fn set_pull_head(&self, repo: &str, number: u64, branch: &str, fork: bool) {
        self.lock()
            .pulls
            .heads
            .insert((repo.to_string(), number), (branch.to_string(), fork));
    }

    /// Refuse a new pull (merge) request whose head is not a branch `exists(repo, branch)` says
    /// is there (the real forges refuse a head that is not on the remote).
    pub fn check_branches(&self, exists: impl Fn(&str, &str) -> bool + Send + Sync + 'static) {
        self.lock().pulls.branch_check = Some(Arc::new(exists));
    }
}

/// The head of pull request item `n` of `repo`: (branch, from a fork).
fn item_head(s: &State, repo: &str, n: u64) -> (String, bool) {
    s.pulls
        .heads
        .get(&(repo.to_string(), n))
        .cloned()
        .unwrap_or_else(|| (format!("feature-{n}"), false))
}

fn gh_pull(base: &str, p: &FPull) -> Value {
    json!({
        "number": p.number,
        "html_url": format!("{base}/{}/pull/{}", p.repo, p.number),
        "state": if p.open { "open" } else { "closed" },
        "title": p.title,
        "body": p.body,
        "head": {"ref": p.head, "label": format!("{}:{}", p.repo.split('/').next().unwrap_or(""), p.head),
                 "repo": {"full_name": p.repo}},
        "base": {"ref": p.base, "repo": {"full_name": p.repo}},
    })
}

/// GitHub's pulls routes (`None`: not one of them).
fn github_pulls(
    s: &mut State,
    method: &str,
    path: &str,
    query: &[(String, String)],
    body: &Value,
) -> Option<Answer> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    if parts.len() < 4 || parts[0] != "repos" || parts[3] != "pulls" {
        return None;
    }
    let repo = format!("{}/{}", parts[1], parts[2]);
    let owner = parts[1].to_string();
    if !s.repos.contains_key(&repo) {
        return Some(message(404, "Not Found"));
    }
    let web = s.web_base.clone().unwrap_or_else(|| s.base.clone());
    Some(match (method, &parts[4..]) {
        ("GET", []) => {
            let state = param(query, "state").unwrap_or("open");
            let head = param(query, "head");
            let all: Vec<Value> = s
                .pulls
                .opened
                .iter()
                .filter(|p| p.repo == repo)
                .filter(|p| state == "all" || (state == "open") == p.open)
                .filter(|p| head.is_none_or(|h| h == format!("{owner}:{}", p.head)))
                .map(|p| gh_pull(&web, p))
                .collect();
            paginate(&s.base.clone(), path, query, all, false)
        }
        ("POST", []) => {
            for field in ["title", "head", "base"] {
                if body[field].as_str().is_none_or(|v| v.trim().is_empty()) {
                    return Some(answer(
                        422,
                        json!({"message": "Validation Failed", "errors": [
                            {"resource": "PullRequest", "field": field, "code": "missing_field"}]}),
                    ));
                }
            }
            let head = body["head"].as_str().unwrap().to_string();
            let head = head
                .strip_prefix(&format!("{owner}:"))
                .unwrap_or(&head)
                .to_string();
            let base = body["base"].as_str().unwrap().to_string();
            if let Some(check) = &s.pulls.branch_check {
                for (field, branch) in [("head", &head), ("base", &base)] {
                    if !check(&repo, branch) {
                        return Some(answer(
                            422,
                            json!({"message": "Validation Failed", "errors": [
                                {"resource": "PullRequest", "field": field, "code": "invalid"}]}),
                        ));
                    }
                }
            }
            if s.pulls
                .opened
                .iter()
                .any(|p| p.repo == repo && p.open && p.head == head)
            {
                return Some(answer(
                    422,
                    json!({"message": "Validation Failed", "errors": [{"resource": "PullRequest",
                        "code": "custom", "message": format!("A pull request already exists for {owner}:{head}.")}]}),
                ));
            }
            // Issues and pull requests share one sequence.
            let number = s.repos[&repo]
                .keys()
                .copied()
                .chain(
                    s.pulls
                        .opened
                        .iter()
                        .filter(|p| p.repo == repo)
                        .map(|p| p.number),
                )
                .max()
                .unwrap_or(0)
                + 1;
            let p = FPull {
                repo: repo.clone(),
                number,
                title: body["title"].as_str().unwrap().to_string(),
                head,
                base,
                body: body["body"].as_str().unwrap_or_default().to_string(),
                open: true,
            };
            s.pulls.opened.push(p.clone());
            answer(201, gh_pull(&web, &p))
        }
        ("GET", [n]) => {
            let Ok(n) = n.parse::<u64>() else {
                return Some(message(404, "Not Found"));
            };
            if let Some(p) = s
                .pulls
                .opened
                .iter()
                .find(|p| p.repo == repo && p.number == n)
            {
                return Some(answer(200, gh_pull(&web, p)));
            }
            match s.repos[&repo].get(&n) {
                Some(it) if it.kind == Kind::Pull => {
                    let (head, fork) = item_head(s, &repo, n);
                    let head_repo = if fork {
                        format!("someone/{}", parts[2])
                    } else {
                        repo.clone()
                    };
                    answer(
                        200,
                        json!({"number": n, "html_url": format!("{web}/{repo}/pull/{n}"), "state": "open",
                               "head": {"ref": head, "repo": {"full_name": head_repo}},
                               "base": {"ref": "main", "repo": {"full_name": repo}}}),
                    )
                }
                _ => message(404, "Not Found"),
            }
        }
        _ => message(404, "Not Found"),
    })
}

fn gl_mr(base: &str, project_id: u64, p: &FPull) -> Value {
    json!({
        "iid": p.number,
        "id": p.number + 9000,
        "title": p.title,
        "description": p.body,
        "state": if p.open { "opened" } else { "closed" },
        "web_url": format!("{base}/{}/-/merge_requests/{}", p.repo, p.number),
        "source_branch": p.head,
        "target_branch": p.base,
        "source_project_id": project_id,
        "target_project_id": project_id,
    })
}

/// GitLab's merge-request routes that open and find requests (`None`: not one of them).
fn gitlab_pulls(
    s: &mut State,
    method: &str,
    path: &str,
    query: &[(String, String)],
    body: &Value,
) -> Option<Answer> {
    let rest = path.strip_prefix("/api/v4/projects/")?;
    let i = rest.find("/merge_requests")?;
    let project = rest[..i].to_string();
    let tail: Vec<&str> = rest[i + 1..].split('/').collect();
    if !s.repos.contains_key(&project) {
        return Some(message(404, "404 Project Not Found"));
    }
    // A stable id per project.
    let project_id = 100 + s.repos.keys().position(|k| *k == project).unwrap_or(0) as u64;
    let base = s.base.clone();
    match (method, &tail[1..]) {
        ("GET", []) if param(query, "source_branch").is_some() => {
            let branch = param(query, "source_branch").unwrap();
            let state = param(query, "state").unwrap_or("all");
            let all: Vec<Value> = s
                .pulls
                .opened
                .iter()
                .filter(|p| p.repo == project && p.head == branch)
                .filter(|p| state == "all" || (state == "opened") == p.open)
                .map(|p| gl_mr(&base, project_id, p))
                .collect();
            Some(paginate(&base, path, query, all, true))
        }
        ("POST", []) => {
            for field in ["source_branch", "target_branch", "title"] {
                if body[field].as_str().is_none_or(|v| v.trim().is_empty()) {
                    return Some(answer(400, json!({"error": format!("{field} is missing")})));
                }
            }
            let head = body["source_branch"].as_str().unwrap().to_string();
            let target = body["target_branch"].as_str().unwrap().to_string();
            if let Some(check) = &s.pulls.branch_check {
                for branch in [&head, &target] {
                    if !check(&project, branch) {
                        return Some(answer(
                            400,
                            json!({"message": [format!("Branch {branch} does not exist")]}),
                        ));
                    }
                }
            }
            if let Some(p) = s
                .pulls
                .opened
                .iter()
                .find(|p| p.repo == project && p.open && p.head == head)
            {
                return Some(answer(
                    409,
                    json!({"message": [format!("Another open merge request already exists for this source branch: !{}", p.number)]}),
                ));
            }
            let number = s.repos[&project]
                .values()
                .filter(|i| i.kind == Kind::Pull)
                .map(|i| i.number)
                .chain(
                    s.pulls
                        .opened
                        .iter()
                        .filter(|p| p.repo == project)
                        .map(|p| p.number),
                )
                .max()
                .unwrap_or(0)
                + 1;
            let p = FPull {
                repo: project.clone(),
                number,
                title: body["title"].as_str().unwrap().to_string(),
                head,
                base: target,
                body: body["description"].as_str().unwrap_or_default().to_string(),
                open: true,
            };
            s.pulls.opened.push(p.clone());
            Some(answer(201, gl_mr(&base, project_id, &p)))
        }
        ("GET", [iid]) => {
            let n = iid.parse::<u64>().ok()?;
            if let Some(p) = s
                .pulls
                .opened
                .iter()
                .find(|p| p.repo == project && p.number == n)
            {
                return Some(answer(200, gl_mr(&base, project_id, p)));
            }
            let it = s.repos[&project].get(&(n + 1_000_000))?.clone();
            let (head, fork) = item_head(s, &project, n);
            let mut v = gl_item(&base, &project, &it);
            v["source_branch"] = json!(head);
            v["source_project_id"] = json!(if fork {
                project_id + 50_000
            } else {
                project_id
            });
            v["target_project_id"] = json!(project_id);
            Some(answer(200, v))
        }
        _ => None,
    }
}
