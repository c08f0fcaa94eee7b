//! The result as a change (issue 40 items 2 and 3): a task of a source with
//! `pull_requests: true` whose workspace differs from its base commit ends as one commit (with
//! the task's trailer), one branch on a real git remote over smart HTTP
//! (`support::git_http`), one pull (merge) request on the fake forge (`support::fake_forge`)
//! and one comment linking it — also when the publisher is killed right after the commit, the
//! push or the pull request. A task on a pull request pushes onto its head branch; a task that
//! changed nothing gets a comment only. The token is in no file ctxhost or git wrote.
//!
//! The tests make each task's workspace themselves (a clone through the host's git runner, the
//! token given as a header, and `workspace.json` in the task directory), as the clone of item 1
//! of the issue will.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};

use ctxhost::db::Db;
use ctxhost::db::sources::{ChangeState, CommentState};
use ctxhost::workspace::git::{Auth, Git};
use ctxhost::workspace::record::WorkspaceRecord;
use serde_json::{Value, json};

use crate::support::fake_forge::{FakeForge, Fault, Kind};
use crate::support::fake_llm::{FakeLlm, Reply};
use crate::support::git_http::GitHttp;
use crate::support::{TestEnv, config_yaml};

const TOKEN_ENV: &str = "CTXHOST_TEST_FORGE_TOKEN";
const LABEL: &str = "coding agent";
const REPO: &str = "acme/app";
const FILE: &str = "src/config.rs";
const BEFORE: &str = "pub const TIMEOUT_SECS: u64 = 5;\n";
const AFTER: &str = "pub const TIMEOUT_SECS: u64 = 30;\n";
const ANSWER: &str = "Raised the login timeout to 30 s.";

/// Which forge a test runs against.
#[derive(Clone, Copy, PartialEq)]
enum On {
    Github,
    Gitlab,
}

/// A forge (API + git remote), a scripted model and a ctxhost environment watching `acme/app`
/// with `pull_requests: true`, the built-in tools on and the workspace at `ws`.
struct Setup {
    on: On,
    forge: FakeForge,
    git: GitHttp,
    _llm: FakeLlm,
    env: TestEnv,
    _dir: tempfile::TempDir,
    ws: PathBuf,
    base: String,
}

/// The model's replies: edit the file with `edit_file`, then answer; or only answer.
fn script(edit: bool) -> Vec<Reply> {
    let mut replies = Vec::new();
    if edit {
        replies.push(Reply::tool_calls(
            vec![(
                "e1",
                "edit_file",
                &json!({"path": FILE, "old_string": "= 5;", "new_string": "= 30;"}).to_string(),
            )],
            Some((100, 10)),
        ));
    }
    replies.push(Reply::text(ANSWER, Some((120, 8))));
    replies
}

impl Setup {
    fn new(on: On, edit: bool) -> Setup {
        let forge = match on {
            On::Github => FakeForge::github(),
            On::Gitlab => FakeForge::gitlab(),
        };
        let user = match on {
            On::Github => "x-access-token",
            On::Gitlab => "oauth2",
        };
        let git = GitHttp::start(user, &forge.token());
        let base = git.add_repo(REPO, &[(FILE, BEFORE), ("README.md", "app\n")]);
        forge.add_repo(REPO);
        // The forge refuses a request whose head or base is not a branch of the remote.
        let root = git
            .git_dir(REPO)
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .to_path_buf();
        forge.check_branches(move |repo, branch| {
            std::process::Command::new("git")
                .arg("--git-dir")
                .arg(root.join(format!("{repo}.git")))
                .args(["rev-parse", "--verify", "--quiet"])
                .arg(format!("refs/heads/{branch}"))
                .output()
                .is_ok_and(|o| o.status.success())
        });
        let llm = FakeLlm::start(script(edit));
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let (key, list) = match on {
            On::Github => ("github", "repos"),
            On::Gitlab => ("gitlab", "projects"),
        };
        let mut env = TestEnv::new();
        env.write_config(&config_yaml(
            &llm.base_url(),
            "openai",
            &format!(
                "workspace: {:?}\ntools:\n  builtin: true\nsources:\n  {key}:\n    api_url: \"{}\"\n    \
                 token_env: {TOKEN_ENV}\n    {list}: [{REPO}]\n    poll_interval_secs: 1\n    \
                 pull_requests: true\n    author: {{name: Fixer Bot, email: bot@example.com}}\n",
                ws.display().to_string(),
                forge.api_url(),
            ),
        ));
        env.set_env(TOKEN_ENV, &forge.token());
        env.ctxhost(&["init"]).ok();
        Setup {
            on,
            forge,
            git,
            _llm: llm,
            env,
            _dir: dir,
            ws,
            base,
        }
    }

    fn auth(&self) -> Auth {
        Auth {
            user: match self.on {
                On::Github => "x-access-token".into(),
                On::Gitlab => "oauth2".into(),
            },
            token: self.forge.token(),
        }
    }

    /// Poll: the one labelled item becomes a task; its workspace is cloned at `branch` and
    /// recorded in `workspace.json` (as item 1's clone does). Returns the task's UUID.
    fn queue_with_workspace(&self, branch: &str) -> String {
        let report = self.env.ctxhost(&["poll", "--once", "--json"]).ok().json();
        let uuids: Vec<String> = report["polls"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p[1]["queued"].as_array().unwrap().clone())
            .map(|q| q["uuid"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(uuids.len(), 1, "{report:#}");
        let uuid = uuids[0].clone();
        let url = self.git.url(REPO);
        Git::new(self.ws.parent().unwrap())
            .with_auth(Some(self.auth()))
            .run([
                "clone",
                "-q",
                "--branch",
                branch,
                url.as_str(),
                self.ws.to_str().unwrap(),
            ])
            .unwrap();
        let base = Git::new(&self.ws).read(["rev-parse", "HEAD"]).unwrap();
        let dir = self.env.contexts().join("running").join(&uuid);
        std::fs::create_dir_all(&dir).unwrap();
        let task_dir = ctxhost::task_dir::TaskDir::open(&dir).unwrap();
        WorkspaceRecord {
            path: self.ws.display().to_string(),
            base_commit: base,
            repository: Some(url),
            git_ref: Some(format!("refs/heads/{branch}")),
            // Made by the test, not by the host's clone (tests/all/workspaces.rs covers that,
            // and its first test ends in a pull request too).
            managed: false,
        }
        .write(&task_dir)
        .unwrap();
        uuid
    }

    fn db(&self) -> Db {
        Db::open(&self.env.store_spec(), &self.env.contexts()).unwrap()
    }

    /// Branches of the remote whose name starts with `ctxhost/`.
    fn ctxhost_branches(&self) -> Vec<String> {
        self.git
            .branches(REPO)
            .into_iter()
            .filter(|b| b.starts_with("ctxhost/"))
            .collect()
    }

    /// Pushes the remote received (`POST …/git-receive-pack`).
    fn pushes(&self) -> usize {
        self.git
            .requests()
            .iter()
            .filter(|r| r.method == "POST" && r.target.contains("git-receive-pack"))
            .count()
    }

    /// POSTs that open a pull (merge) request.
    fn pull_posts(&self) -> usize {
        let suffix = match self.on {
            On::Github => "/pulls",
            On::Gitlab => "/merge_requests",
        };
        self.forge.calls_to("POST", suffix).len()
    }

    /// Run `ctxhost ARGS` with `failpoint` on; it must die by SIGKILL.
    fn killed(&self, failpoint: &str, args: &[&str]) {
        let mut cmd = self.env.ctxhost_cmd(args);
        cmd.cmd.env(ctxhost::failpoint::FAILPOINT_ENV, failpoint);
        let out = cmd.run();
        assert_eq!(
            out.output.status.signal(),
            Some(libc::SIGKILL),
            "not killed by {failpoint}: {}\n{}",
            out.output.status,
            out.stderr()
        );
    }

    /// Every file under `dir` (recursively, `.git` included) that holds `needle`.
    fn files_holding(dir: &Path, needle: &str) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                let ft = e.file_type().unwrap();
                if ft.is_dir() {
                    stack.push(p);
                } else if ft.is_file()
                    && let Ok(b) = std::fs::read(&p)
                    && b.windows(needle.len()).any(|w| w == needle.as_bytes())
                {
                    found.push(p);
                }
            }
        }
        found
    }

    /// One branch with the edit at one commit on the base carrying the trailer, one request
    /// from it onto `main` with the answer, the task and `Closes #N`, one comment linking it.
    fn assert_one_change(&self, uuid: &str, n: u64) {
        let short: String = uuid.chars().take(8).collect();
        let branch = format!("ctxhost/issue-{n}-{short}");
        assert_eq!(self.ctxhost_branches(), std::slice::from_ref(&branch));
        assert_eq!(
            self.git.file_at(REPO, &branch, FILE).as_deref(),
            Some(AFTER)
        );
        assert_eq!(
            self.git.file_at(REPO, "main", FILE).as_deref(),
            Some(BEFORE)
        );
        let tip = self.git.rev_parse(REPO, &branch).unwrap();
        assert_eq!(
            self.git.rev_parse(REPO, &format!("{branch}~1")).as_deref(),
            Some(self.base.as_str()),
            "one commit on the base"
        );
        let message = self.git.message(REPO, &branch);
        assert!(
            message.starts_with("Login times out\n\n")
                && message.contains(ANSWER)
                && message
                    .trim_end()
                    .ends_with(&format!("Ctxhost-Task: {uuid}")),
            "{message}"
        );
        let author = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(self.git.git_dir(REPO))
            .args(["log", "-1", "--format=%an <%ae>|%cn <%ce>", &branch])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&author.stdout).trim(),
            "Fixer Bot <bot@example.com>|Fixer Bot <bot@example.com>"
        );
        let pulls = self.forge.pulls(REPO);
        assert_eq!(pulls.len(), 1, "{pulls:?}");
        let pr = &pulls[0];
        assert_eq!(
            (pr.head.as_str(), pr.base.as_str()),
            (branch.as_str(), "main")
        );
        assert_eq!(pr.title, "Login times out");
        assert!(
            pr.body.starts_with(ANSWER)
                && pr.body.contains(uuid)
                && pr.body.contains(&format!("Closes #{n}")),
            "{}",
            pr.body
        );
        let comments = self.forge.comments(REPO, Kind::Issue, n);
        assert_eq!(comments.len(), 1);
        let p = self.db().publication(uuid).unwrap().unwrap();
        assert_eq!(p.change_state, ChangeState::Opened);
        assert_eq!(p.comment_state, CommentState::Posted);
        assert_eq!(p.change_commit.as_deref(), Some(tip.as_str()));
        assert_eq!(p.pr_number, Some(pr.number as i64));
        let url = p.pr_url.clone().unwrap();
        assert!(url.ends_with(&format!("/{}", pr.number)), "{url}");
        assert!(
            comments[0].body.contains(&url) && comments[0].body.contains(ANSWER),
            "{}",
            comments[0].body
        );
    }

    /// The token is in no file under contexts/ (task files, tasks.db) nor in the workspace
    /// (`.git` included), and in no URL git requested.
    fn assert_token_nowhere(&self) {
        let token = self.forge.token();
        assert_eq!(
            Setup::files_holding(&self.env.contexts(), &token),
            Vec::<PathBuf>::new()
        );
        assert_eq!(
            Setup::files_holding(&self.ws, &token),
            Vec::<PathBuf>::new()
        );
        assert!(
            self.git
                .requests()
                .iter()
                .all(|r| !r.target.contains(&token))
        );
        // It did travel, as a header.
        assert!(
            self.git
                .requests()
                .iter()
                .any(|r| r.method == "POST" && r.header("authorization").is_some())
        );
    }
}

#[test]
fn an_issue_whose_workspace_changed_ends_in_one_branch_one_pull_request_and_a_comment_linking_it() {
    let s = Setup::new(On::Github, true);
    let n = s.forge.add_item(
        REPO,
        Kind::Issue,
        "Login times out",
        "It hangs after 5 s.",
        &[LABEL],
    );
    let uuid = s.queue_with_workspace("main");
    let out = s.env.ctxhost(&["run", "--once"]);
    assert_eq!(out.code(), Some(0), "{}", out.stderr());
    s.assert_one_change(&uuid, n);
    assert_eq!((s.pushes(), s.pull_posts()), (1, 1));
    s.assert_token_nowhere();
    // The workspace is at the commit, clean.
    let ws = Git::new(&s.ws);
    assert_eq!(
        ws.read(["rev-parse", "HEAD"]).unwrap(),
        s.db()
            .publication(&uuid)
            .unwrap()
            .unwrap()
            .change_commit
            .unwrap()
    );
    assert_eq!(ws.read(["status", "--porcelain"]).unwrap(), "");
    // Later passes do nothing more.
    s.env.ctxhost(&["poll", "--once"]).ok();
    assert_eq!((s.pushes(), s.pull_posts()), (1, 1));
    assert_eq!(s.forge.comments(REPO, Kind::Issue, n).len(), 1);
    let shown = s.env.ctxhost(&["show", &uuid, "--json"]).ok().json();
    assert_eq!(shown["publication"]["change_state"], "opened", "{shown:#}");
}

#[test]
fn a_gitlab_issue_ends_in_one_merge_request() {
    let s = Setup::new(On::Gitlab, true);
    let n = s.forge.add_item(
        REPO,
        Kind::Issue,
        "Login times out",
        "It hangs after 5 s.",
        &[LABEL],
    );
    let uuid = s.queue_with_workspace("main");
    let out = s.env.ctxhost(&["run", "--once"]);
    assert_eq!(out.code(), Some(0), "{}", out.stderr());
    s.assert_one_change(&uuid, n);
    let post = &s.forge.calls_to("POST", "/merge_requests")[0];
    assert_eq!(post.body["target_branch"], "main");
    assert_eq!(
        post.body["source_branch"],
        Value::String(s.ctxhost_branches()[0].clone())
    );
    assert!(
        post.body["description"]
            .as_str()
            .unwrap()
            .contains(&format!("Closes #{n}"))
    );
    s.assert_token_nowhere();
}

#[test]
fn a_task_on_a_pull_request_of_the_same_repository_pushes_a_commit_onto_its_head_branch() {
    let s = Setup::new(On::Github, true);
    let n = s.forge.add_item(
        REPO,
        Kind::Pull,
        "Login times out",
        "Make it configurable.",
        &[LABEL],
    );
    let head = format!("feature-{n}");
    let head_before = s
        .git
        .commit_on(REPO, "main", &head, &[("NOTES.md", "wip\n")], "wip");
    let uuid = s.queue_with_workspace(&head);
    let out = s.env.ctxhost(&["run", "--once"]);
    assert_eq!(out.code(), Some(0), "{}", out.stderr());
    // One commit on the head branch, no new branch, no new pull request.
    assert_eq!(s.ctxhost_branches(), Vec::<String>::new());
    assert_eq!(s.git.file_at(REPO, &head, FILE).as_deref(), Some(AFTER));
    assert_eq!(
        s.git.rev_parse(REPO, &format!("{head}~1")),
        Some(head_before)
    );
    assert!(
        s.git
            .message(REPO, &head)
            .contains(&format!("Ctxhost-Task: {uuid}"))
    );
    assert_eq!(s.forge.pulls(REPO).len(), 0);
    assert_eq!(s.pull_posts(), 0);
    let comments = s.forge.comments(REPO, Kind::Pull, n);
    assert_eq!(comments.len(), 1);
    let tip = s.git.rev_parse(REPO, &head).unwrap();
    assert!(
        comments[0].body.contains(&format!("`{}`", &tip[..12])) && comments[0].body.contains(&head),
        "{}",
        comments[0].body
    );
    let p = s.db().publication(&uuid).unwrap().unwrap();
    assert_eq!(p.change_state, ChangeState::Opened);
    assert_eq!((p.change_base, p.pr_number), (None, Some(n as i64)));
    s.assert_token_nowhere();
}

#[test]
fn a_task_that_changed_nothing_gets_a_comment_only() {
    let s = Setup::new(On::Github, false);
    let n = s.forge.add_item(
        REPO,
        Kind::Issue,
        "Why 5 s?",
        "Explain the timeout.",
        &[LABEL],
    );
    let uuid = s.queue_with_workspace("main");
    let out = s.env.ctxhost(&["run", "--once"]);
    assert_eq!(out.code(), Some(0), "{}", out.stderr());
    assert_eq!(s.git.branches(REPO), ["main"]);
    assert_eq!((s.pushes(), s.pull_posts()), (0, 0));
    let comments = s.forge.comments(REPO, Kind::Issue, n);
    assert_eq!(comments.len(), 1);
    assert!(comments[0].body.contains(ANSWER));
    assert!(
        !comments[0].body.contains("Pull request"),
        "{}",
        comments[0].body
    );
    let p = s.db().publication(&uuid).unwrap().unwrap();
    assert_eq!(p.change_state, ChangeState::Unchanged);
    assert_eq!(
        Git::new(&s.ws).read(["rev-parse", "HEAD"]).unwrap(),
        s.base,
        "no commit made"
    );
}

/// kill -9 right after `failpoint`'s step (before it is recorded), then a pass of `poll
/// --once` takes over the dead publisher's lease: one branch, one pull request, one comment.
fn killed_after(failpoint: &str, pushes: usize) {
    let s = Setup::new(On::Github, true);
    let n = s.forge.add_item(
        REPO,
        Kind::Issue,
        "Login times out",
        "It hangs after 5 s.",
        &[LABEL],
    );
    let uuid = s.queue_with_workspace("main");
    s.killed(failpoint, &["run", "--once"]);
    assert_eq!(s.forge.comments(REPO, Kind::Issue, n).len(), 0);
    let p = s.db().publication(&uuid).unwrap().unwrap();
    let expected = match failpoint {
        "publish:after-commit" => ChangeState::Committing,
        "publish:after-push" => ChangeState::Pushing,
        _ => ChangeState::Opening,
    };
    assert_eq!(p.change_state, expected);
    assert_eq!(s.pushes(), pushes);
    s.env.ctxhost(&["poll", "--once"]).ok();
    s.assert_one_change(&uuid, n);
    // Pushed once and asked for the pull request once, whatever step died.
    assert_eq!((s.pushes(), s.pull_posts()), (1, 1));
    s.env.ctxhost(&["poll", "--once"]).ok();
    assert_eq!((s.pushes(), s.pull_posts()), (1, 1));
    assert_eq!(s.forge.comments(REPO, Kind::Issue, n).len(), 1);
    s.assert_token_nowhere();
}

#[test]
fn a_kill_after_the_commit_makes_no_second_commit() {
    killed_after("publish:after-commit", 0);
}

#[test]
fn a_kill_after_the_push_does_not_push_again() {
    killed_after("publish:after-push", 1);
}

#[test]
fn a_kill_after_the_pull_request_finds_it_instead_of_opening_another() {
    killed_after("publish:after-pr", 1);
}

#[test]
fn a_pull_request_whose_head_moved_gets_a_pull_request_onto_its_head_instead() {
    let s = Setup::new(On::Github, true);
    let n = s.forge.add_item(
        REPO,
        Kind::Pull,
        "Login times out",
        "Make it configurable.",
        &[LABEL],
    );
    let head = format!("feature-{n}");
    s.git
        .commit_on(REPO, "main", &head, &[("NOTES.md", "wip\n")], "wip");
    let uuid = s.queue_with_workspace(&head);
    // Someone pushes to the head branch while the task runs: ctxhost's push is not a
    // fast-forward, and it does not force it.
    let moved = s.git.commit(REPO, &head, &[("NOTES.md", "more\n")], "more");
    let out = s.env.ctxhost(&["run", "--once"]);
    assert_eq!(out.code(), Some(0), "{}", out.stderr());
    assert_eq!(
        s.git.rev_parse(REPO, &head),
        Some(moved),
        "the head branch is untouched"
    );
    let short: String = uuid.chars().take(8).collect();
    let branch = format!("ctxhost/pr-{n}-{short}");
    assert_eq!(s.ctxhost_branches(), std::slice::from_ref(&branch));
    assert_eq!(s.git.file_at(REPO, &branch, FILE).as_deref(), Some(AFTER));
    let pulls = s.forge.pulls(REPO);
    assert_eq!(pulls.len(), 1);
    assert_eq!(
        (pulls[0].head.as_str(), pulls[0].base.as_str()),
        (branch.as_str(), head.as_str())
    );
    assert!(
        pulls[0].body.contains(&format!("Builds on #{n}")),
        "{}",
        pulls[0].body
    );
    let comments = s.forge.comments(REPO, Kind::Pull, n);
    assert_eq!(comments.len(), 1);
    assert!(
        comments[0]
            .body
            .contains(&format!("/pull/{}", pulls[0].number)),
        "{}",
        comments[0].body
    );
    let p = s.db().publication(&uuid).unwrap().unwrap();
    assert_eq!(p.change_base.as_deref(), Some(head.as_str()));
}

#[test]
fn a_permission_403_on_the_pull_request_is_final_and_the_item_gets_the_failed_label() {
    let s = Setup::new(On::Github, true);
    let n = s.forge.add_item(
        REPO,
        Kind::Issue,
        "Login times out",
        "It hangs after 5 s.",
        &[LABEL],
    );
    let uuid = s.queue_with_workspace("main");
    s.forge.push_fault(
        "POST",
        "/pulls",
        Fault::Answer {
            status: 403,
            message: "Resource not accessible by integration".into(),
            headers: Vec::new(),
        },
    );
    let out = s.env.ctxhost(&["run", "--once"]);
    assert_eq!(out.code(), Some(1), "{}", out.stderr());
    assert!(
        out.stderr()
            .contains("Resource not accessible by integration")
            && out.stderr().contains("given up"),
        "{}",
        out.stderr()
    );
    assert_eq!(
        s.forge.labels(REPO, Kind::Issue, n),
        ["coding agent failed"]
    );
    let p = s.db().publication(&uuid).unwrap().unwrap();
    assert!(p.given_up(), "{p:?}");
    assert_eq!(p.change_state, ChangeState::Opening);
    // Not tried again.
    s.env.ctxhost(&["poll", "--once"]).ok();
    assert_eq!((s.pushes(), s.pull_posts()), (1, 1));
    assert!(s.forge.pulls(REPO).is_empty());
    assert!(s.forge.comments(REPO, Kind::Issue, n).is_empty());
}

#[test]
fn a_rate_limited_pull_request_waits_in_the_task_store_then_is_opened_once() {
    let s = Setup::new(On::Github, true);
    let n = s.forge.add_item(
        REPO,
        Kind::Issue,
        "Login times out",
        "It hangs after 5 s.",
        &[LABEL],
    );
    let uuid = s.queue_with_workspace("main");
    s.forge
        .push_fault("POST", "/pulls", Fault::RetryAfter { secs: 120 });
    s.env.ctxhost(&["run", "--once"]);
    let db = s.db();
    let p = db.publication(&uuid).unwrap().unwrap();
    assert_eq!((p.change_state, p.attempts), (ChangeState::Opening, 1));
    let wait = (p.next_attempt_ms.unwrap() - db.now_ms().unwrap()) / 1000;
    assert!((100..=120).contains(&wait), "waits {wait} s");
    // A pass before the wait is over does nothing.
    s.env.ctxhost(&["poll", "--once"]);
    assert_eq!(s.pull_posts(), 1);
    db.execute_raw(&format!(
        "UPDATE publications SET next_attempt_ms = 1 WHERE task_uuid = '{uuid}'"
    ))
    .unwrap();
    s.env.ctxhost(&["poll", "--once"]).ok();
    s.assert_one_change(&uuid, n);
    assert_eq!((s.pushes(), s.pull_posts()), (1, 2));
}

crate::support::store::postgres_variants!(
    an_issue_whose_workspace_changed_ends_in_one_branch_one_pull_request_and_a_comment_linking_it,
    a_kill_after_the_commit_makes_no_second_commit,
    a_kill_after_the_push_does_not_push_again,
    a_kill_after_the_pull_request_finds_it_instead_of_opening_another,
);
