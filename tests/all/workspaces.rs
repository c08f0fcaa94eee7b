//! Workspaces (issue 40 items 1, 4, 5): a task of a source with `workspace: true` works in its
//! own git worktree of the item's repository, cloned over smart HTTP from a real git server
//! (`support::git_http`, Debian's git-http-backend, token required) whose address the fake
//! GitHub API gives as `clone_url`; its change travels with it as `changes.patch` (shown by
//! `ctxhost diff` and `show`), rebuilds the worktree on another host (PostgreSQL + S3), and is
//! checked by `fsck`; `cleanup` removes the worktree with the task. The token is only ever in
//! the `Authorization` header of git's requests: in no URL, no file under contexts/, not in the
//! tools' environment.

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;
use serde_json::{Value, json};

use crate::support::fake_forge::{FakeForge, Kind};
use crate::support::fake_llm::{FakeLlm, Reply};
use crate::support::git_http::GitHttp;
use crate::support::{TestEnv, config_yaml, find_task_dir, read_jsonl};

const GH_TOKEN_ENV: &str = "CTXHOST_TEST_GITHUB_TOKEN";
const LABEL: &str = "coding agent";
const CALC: &str = "def add(a, b):\n    return a - b\n";

/// A GitHub fake and a git server that takes its token, with `acme/app` holding `calc.py`
/// on `main` (the commit id returned) and the API giving the git server's URL as clone URL.
fn forge() -> (FakeForge, GitHttp, String) {
    let gh = FakeForge::github();
    let git = GitHttp::start("x-access-token", &gh.token());
    let base = git.add_repo("acme/app", &[("calc.py", CALC), ("README.md", "app\n")]);
    gh.set_repository("acme/app", &git.url("acme/app"), "main");
    (gh, git, base)
}

/// The `sources.github` section watching `acme/app` with `workspace: true`.
fn section(gh: &FakeForge) -> String {
    format!(
        "sources:\n  github:\n    api_url: \"{}\"\n    token_env: {GH_TOKEN_ENV}\n    repos: [acme/app]\n    \
         poll_interval_secs: 1\n    workspace: true\n    allow_http: true\ntools:\n  builtin: true\n",
        gh.api_url()
    )
}

/// An initialised environment with the GitHub source of `gh` and the fake LLM `llm`.
fn bot_env(llm: &FakeLlm, gh: &FakeForge) -> TestEnv {
    let mut env = TestEnv::new();
    env.write_config(&config_yaml(&llm.base_url(), "openai", &section(gh)));
    env.set_env(GH_TOKEN_ENV, &gh.token());
    env.ctxhost(&["init"]).ok();
    env
}

/// The one task `poll --once` queued.
fn poll_one(env: &TestEnv) -> String {
    let report = env.ctxhost(&["poll", "--once", "--json"]).ok().json();
    let queued: Vec<String> = report["polls"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p[1]["queued"].as_array().unwrap().clone())
        .map(|q| q["uuid"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(queued.len(), 1, "{report:#}");
    queued[0].clone()
}

fn call(id: &str, name: &str, args: Value) -> (String, String, String) {
    (id.to_string(), name.to_string(), args.to_string())
}

/// The model's fix of calc.py through `edit_file`.
fn the_edit() -> Reply {
    Reply::ToolCalls {
        calls: vec![call(
            "e",
            "edit_file",
            json!({"path": "calc.py", "old_string": "return a - b", "new_string": "return a + b"}),
        )],
        usage: Some((100, 10)),
    }
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Every file under `dir` (recursively, links not followed) whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, needle: &[u8], out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                walk(&p, needle, out);
            } else if ft.is_file()
                && let Ok(b) = std::fs::read(&p)
                && b.windows(needle.len()).any(|w| w == needle)
            {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, needle.as_bytes(), &mut out);
    out
}

/// The number of files under `dir`.
fn count_files(dir: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            n += count_files(&e.path());
        } else {
            n += 1;
        }
    }
    n
}

/// Where the token may and may not be: every request to the git server carried it as HTTP
/// basic auth (user `x-access-token`), none in its target; no file under contexts/ (the
/// mirror's config, the worktree's `.git` file, the task's files, tasks.db) holds it, raw or
/// as the base64 of the header.
fn assert_token_only_in_headers(env: &TestEnv, git: &GitHttp, token: &str) {
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"))
    );
    let reqs = git.requests();
    assert!(!reqs.is_empty());
    for r in &reqs {
        assert!(!r.target.contains(token), "token in a URL: {r:?}");
        assert_eq!(r.header("authorization"), Some(basic.as_str()), "{r:?}");
        assert_eq!(r.status, 200, "{r:?}");
    }
    let b64 = basic.trim_start_matches("Basic ");
    assert!(count_files(&env.contexts()) > 20, "the walk sees the tree");
    for needle in [token, b64] {
        let found = files_containing(&env.contexts(), needle);
        assert!(found.is_empty(), "the token is in {found:?}");
    }
}

/// Issue 40 items 1, 4, 5 on one GitHub issue: the worktree at `main`, the edit in it, the
/// patch exactly that edit (`diff`, `show`), the token nowhere but in the headers (nor in the
/// tools' environment), `fsck` naming a patch that no longer applies, `cleanup` removing the
/// worktree with the task.
#[test]
fn a_github_issue_task_edits_its_own_worktree_and_its_change_is_the_patch() {
    let (gh, git_srv, base) = forge();
    let n = gh.add_item(
        "acme/app",
        Kind::Issue,
        "add() subtracts",
        "Fix add().",
        &[LABEL],
    );
    let llm = FakeLlm::start(vec![
        the_edit(),
        Reply::ToolCalls {
            calls: vec![call(
                "s",
                "shell",
                json!({"command": "env; tr '\\0' '\\n' < /proc/$PPID/environ; true"}),
            )],
            usage: Some((120, 10)),
        },
        Reply::text("Fixed add().", Some((150, 5))),
    ]);
    let env = bot_env(&llm, &gh);
    let uuid = poll_one(&env);
    env.ctxhost(&["run", "--once"]).ok();
    let row = env.ctxhost(&["show", &uuid, "--json"]).ok().json();
    assert_eq!(row["task"]["status"], "completed", "{row:#}");

    // The worktree: contexts/.workspaces/<uuid>, detached at main's commit, with the edit.
    let ws = std::path::absolute(env.contexts().join(".workspaces").join(&uuid)).unwrap();
    assert_eq!(
        row["git_workspace"]["path"],
        ws.display().to_string(),
        "{row:#}"
    );
    assert_eq!(
        row["changes"], "1 file changed, 1 insertion(+), 1 deletion(-)",
        "{row:#}"
    );
    assert_eq!(git(&ws, &["rev-parse", "HEAD"]), base);
    assert_eq!(
        std::fs::read_to_string(ws.join("calc.py")).unwrap(),
        "def add(a, b):\n    return a + b\n"
    );
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    let rec: Value =
        serde_json::from_slice(&std::fs::read(dir.join("workspace.json")).unwrap()).unwrap();
    assert_eq!(
        rec,
        json!({"path": ws.display().to_string(), "base_commit": base,
               "repository": git_srv.url("acme/app"), "ref": "refs/heads/main", "managed": true})
    );
    let mirror = env
        .contexts()
        .join(".workspaces/cache")
        .join(
            git_srv
                .base_url()
                .trim_start_matches("http://")
                .replace(':', "_"),
        )
        .join("acme/app.git");
    assert_eq!(git(&mirror, &["rev-parse", "refs/heads/main"]), base);

    // changes.patch is exactly the edit: what git itself says of the worktree.
    let patch = std::fs::read(dir.join("changes.patch")).unwrap();
    assert_eq!(
        String::from_utf8(patch.clone()).unwrap(),
        git(&ws, &["diff", "--binary", &base]) + "\n"
    );
    let text = String::from_utf8_lossy(&patch);
    assert!(
        text.contains("-    return a - b\n+    return a + b\n"),
        "{text}"
    );
    assert_eq!(text.matches("diff --git").count(), 1, "{text}");
    // The tools' (and the task's) own index was not touched: the edit is unstaged.
    assert_eq!(git(&ws, &["status", "--porcelain"]), "M calc.py");

    // diff prints it byte for byte; show names the workspace and the stat.
    let out = env.ctxhost(&["diff", &uuid]).ok();
    assert_eq!(out.output.stdout, patch);
    assert_eq!(
        env.ctxhost(&["diff", &uuid, "--stat"]).ok().stdout().trim(),
        "1 file changed, 1 insertion(+), 1 deletion(-)"
    );
    let shown = env.ctxhost(&["show", &uuid]).ok().stdout();
    assert!(
        shown.contains(&format!("workspace:     {}", ws.display()))
            && shown.contains("changes:       1 file changed, 1 insertion(+), 1 deletion(-)"),
        "{shown}"
    );

    // The token: in the Authorization header of every git request, nowhere else; the shell
    // tool saw it neither in its environment nor in its parent's.
    let token = gh.token();
    assert_token_only_in_headers(&env, &git_srv, &token);
    let tools = read_jsonl(&dir.join("tools.jsonl"));
    let shell = tools
        .iter()
        .find(|l| l["tool"] == "shell")
        .expect("the shell call");
    let seen = shell.to_string();
    assert!(seen.contains("PATH="), "{seen}");
    assert!(
        !seen.contains(&token) && !seen.contains(GH_TOKEN_ENV),
        "{seen}"
    );
    assert_eq!(gh.comments("acme/app", Kind::Issue, n).len(), 1);

    // fsck: sound; then a patch that no longer applies is reported, naming the task's file.
    env.ctxhost(&["fsck"]).ok();
    std::fs::write(
        dir.join("changes.patch"),
        text.replace("-    return a - b", "-    return a * b"),
    )
    .unwrap();
    let out = env.ctxhost(&["fsck", "--json"]).fails().json();
    let problems = out["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{out:#}");
    assert_eq!(problems[0]["kind"], "workspace-patch");
    assert_eq!(problems[0]["uuid"], uuid.as_str());
    assert!(
        problems[0]["path"]
            .as_str()
            .unwrap()
            .ends_with(&format!("completed/{uuid}/changes.patch")),
        "{out:#}"
    );
    assert!(
        problems[0]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("does not apply to the base commit {base}")),
        "{out:#}"
    );
    std::fs::write(dir.join("changes.patch"), &patch).unwrap();

    // cleanup removes the worktree with the task, and the mirror forgets it.
    env.ctxhost(&["cleanup", "--all"]).ok();
    assert!(!ws.exists());
    assert!(!git(&mirror, &["worktree", "list"]).contains(&uuid));
    assert!(!mirror.join("worktrees").join(&uuid).exists());
}

/// A pull request's task gets a worktree at the pull request's head (`refs/pull/N/head`), not
/// at main; a task that changes nothing has no patch (`diff` says so).
/// The whole of issue 40 in one task: the host clones the issue's repository into the task's own
/// worktree, the model fixes the bug there with `edit_file`, and the task ends as one branch on
/// the git server holding exactly that edit, one pull request (head that branch, base `main`,
/// the answer, the UUID and "Closes #N" in its body) and one comment linking it; the token is
/// in no file under contexts/ and reached git only as a header.
#[test]
fn an_issue_ends_as_a_pull_request_from_the_hosts_own_worktree() {
    let (gh, git_srv, base) = forge();
    let n = gh.add_item(
        "acme/app",
        Kind::Issue,
        "add() subtracts",
        "Fix add().",
        &[LABEL],
    );
    let llm = FakeLlm::start(vec![
        the_edit(),
        // git works inside the sandbox on the worktree, whose git directory is in the mirror.
        Reply::ToolCalls {
            calls: vec![call("g", "shell", json!({"command": "git status --short"}))],
            usage: Some((120, 10)),
        },
        Reply::text("Fixed add().", Some((150, 5))),
    ]);
    let mut env = TestEnv::new();
    env.write_config(&config_yaml(
        &llm.base_url(),
        "openai",
        &section(&gh).replace(
            "    allow_http: true\n",
            "    allow_http: true\n    pull_requests: true\n",
        ),
    ));
    env.set_env(GH_TOKEN_ENV, &gh.token());
    env.ctxhost(&["init"]).ok();
    let uuid = poll_one(&env);
    env.ctxhost(&["run", "--once"]).ok();
    let row = env.ctxhost(&["show", &uuid, "--json"]).ok().json();
    assert_eq!(row["task"]["status"], "completed", "{row:#}");

    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    let status = read_jsonl(&dir.join("messages.jsonl"))
        .into_iter()
        .find(|m| m["tool_call_id"] == "g")
        .unwrap();
    let shown = status["content"].as_str().unwrap();
    assert!(shown.contains(" M calc.py"), "{shown}");
    let pulls = gh.pulls("acme/app");
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    let pr = &pulls[0];
    assert_eq!(pr.base, "main");
    assert!(
        pr.head.starts_with(&format!("ctxhost/issue-{n}-")),
        "{}",
        pr.head
    );
    assert!(
        pr.body.contains("Fixed add().") && pr.body.contains(&uuid),
        "{}",
        pr.body
    );
    assert!(pr.body.contains(&format!("Closes #{n}")), "{}", pr.body);
    let branch = pr.head.clone();
    assert_eq!(
        git_srv.file_at("acme/app", &branch, "calc.py").as_deref(),
        Some(CALC.replace("return a - b", "return a + b").as_str())
    );
    assert_eq!(
        git_srv
            .rev_parse("acme/app", &format!("{branch}~1"))
            .as_deref(),
        Some(base.as_str())
    );
    let comments = gh.comments("acme/app", Kind::Issue, n);
    assert_eq!(comments.len(), 1, "{comments:?}");
    assert!(
        comments[0].body.contains(&branch) || comments[0].body.contains("/pull/"),
        "{}",
        comments[0].body
    );
    // The change is served by the JSON API too (a CI job or an MCP client reads it there).
    let d = crate::api::serve_with_tokens(&env, &[]);
    let auth = format!("Bearer {}", crate::api::READ);
    let listed = d.send(
        "GET",
        &format!("/api/v1/tasks/{uuid}/files"),
        &[("authorization", &auth)],
        None,
    );
    assert!(
        listed.body.contains("changes.patch") && listed.body.contains("workspace.json"),
        "{}",
        listed.body
    );
    let patch = d.send(
        "GET",
        &format!("/api/v1/tasks/{uuid}/files/changes.patch"),
        &[("authorization", &auth)],
        None,
    );
    assert_eq!(patch.status, 200, "{}", patch.body);
    assert!(patch.body.contains("+    return a + b"), "{}", patch.body);
    assert_token_only_in_headers(&env, &git_srv, &gh.token());
}

#[test]
fn a_pull_request_task_gets_a_worktree_at_the_head_of_the_pull_request() {
    let (gh, git_srv, base) = forge();
    let n = gh.add_item(
        "acme/app",
        Kind::Pull,
        "Add feature",
        "Review it.",
        &[LABEL],
    );
    let head = git_srv.commit_on(
        "acme/app",
        "main",
        &format!("refs/pull/{n}/head"),
        &[("feature.txt", "the pull request's work\n")],
        "feature",
    );
    // main moves on after the pull request was opened.
    git_srv.commit("acme/app", "main", &[("later.txt", "later\n")], "later");
    let llm = FakeLlm::start(vec![Reply::text("Looks good.", Some((50, 5)))]);
    let env = bot_env(&llm, &gh);
    let uuid = poll_one(&env);
    env.ctxhost(&["run", "--once"]).ok();
    let ws = env.contexts().join(".workspaces").join(&uuid);
    assert_eq!(git(&ws, &["rev-parse", "HEAD"]), head);
    assert_ne!(head, base);
    assert!(ws.join("feature.txt").exists() && !ws.join("later.txt").exists());
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    let rec: Value =
        serde_json::from_slice(&std::fs::read(dir.join("workspace.json")).unwrap()).unwrap();
    assert_eq!(rec["ref"], format!("refs/pull/{n}/head"));
    assert_eq!(rec["base_commit"], head.as_str());
    assert!(!dir.join("changes.patch").exists());
    assert_eq!(
        env.ctxhost(&["diff", &uuid]).ok().stdout().trim(),
        "no change"
    );
    assert_token_only_in_headers(&env, &git_srv, &gh.token());
}

/// A GitLab merge request's task: the project's `http_url_to_repo`, the token as HTTP basic
/// auth with GitLab's user `oauth2`, the worktree at `refs/merge-requests/N/head`.
#[test]
fn a_gitlab_merge_request_task_gets_a_worktree_at_its_head() {
    let gl = FakeForge::gitlab();
    let git_srv = GitHttp::start("oauth2", &gl.token());
    git_srv.add_repo("grp/proj", &[("calc.py", CALC)]);
    gl.set_repository("grp/proj", &git_srv.url("grp/proj"), "main");
    let n = gl.add_item(
        "grp/proj",
        Kind::Pull,
        "Add feature",
        "Review it.",
        &[LABEL],
    );
    let head = git_srv.commit_on(
        "grp/proj",
        "main",
        &format!("refs/merge-requests/{n}/head"),
        &[("feature.txt", "merge request work\n")],
        "feature",
    );
    let llm = FakeLlm::start(vec![Reply::text("Looks good.", Some((50, 5)))]);
    let mut env = TestEnv::new();
    env.write_config(&config_yaml(
        &llm.base_url(),
        "openai",
        &format!(
            "sources:\n  gitlab:\n    api_url: \"{}\"\n    token_env: CTXHOST_TEST_GITLAB_TOKEN\n    \
             projects: [grp/proj]\n    workspace: true\n    allow_http: true\ntools:\n  builtin: true\n",
            gl.api_url()
        ),
    ));
    env.set_env("CTXHOST_TEST_GITLAB_TOKEN", &gl.token());
    env.ctxhost(&["init"]).ok();
    let uuid = poll_one(&env);
    env.ctxhost(&["run", "--once"]).ok();
    let ws = env.contexts().join(".workspaces").join(&uuid);
    assert_eq!(git(&ws, &["rev-parse", "HEAD"]), head);
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    let rec: Value =
        serde_json::from_slice(&std::fs::read(dir.join("workspace.json")).unwrap()).unwrap();
    assert_eq!(rec["ref"], format!("refs/merge-requests/{n}/head"));
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("oauth2:{}", gl.token()))
    );
    let reqs = git_srv.requests();
    assert!(!reqs.is_empty());
    assert!(
        reqs.iter()
            .all(|r| r.header("authorization") == Some(basic.as_str())
                && !r.target.contains(&gl.token()))
    );
    assert!(files_containing(&env.contexts(), &gl.token()).is_empty());
}

/// Without `allow_http`, a plain-http clone URL is refused before anything is fetched, naming
/// the key; a task without a git workspace says so in `diff`.
#[test]
fn a_plain_http_clone_url_needs_allow_http_and_a_plain_task_has_no_git_workspace() {
    let (gh, git_srv, _) = forge();
    gh.add_item("acme/app", Kind::Issue, "x", "y", &[LABEL]);
    let llm = FakeLlm::start(vec![Reply::text("done", Some((5, 1)))]);
    let mut env = TestEnv::new();
    env.write_config(&config_yaml(
        &llm.base_url(),
        "openai",
        &section(&gh).replace("    allow_http: true\n", ""),
    ));
    env.set_env(GH_TOKEN_ENV, &gh.token());
    env.ctxhost(&["init"]).ok();
    let uuid = poll_one(&env);
    env.ctxhost(&["run", "--once"]);
    let row = env.ctxhost(&["show", &uuid, "--json"]).ok().json();
    assert_eq!(row["task"]["status"], "failed", "{row:#}");
    let err = row["task"]["error_message"].as_str().unwrap();
    assert!(err.contains("sources.github.allow_http"), "{err}");
    assert!(git_srv.requests().is_empty());
    assert_eq!(llm.request_count(), 0);

    let plain = env.ctxhost(&["submit", "--json", "hello"]).ok().json()["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        env.ctxhost(&["diff", &plain]).ok().stdout().trim(),
        "no git workspace"
    );
    env.ctxhost(&["stop", &plain]).ok();

    // Only a task's own worktree may be a workspace inside contexts/: another task's is refused.
    let other = env
        .contexts()
        .join(".workspaces")
        .join(uuid::Uuid::new_v4().to_string());
    std::fs::create_dir_all(&other).unwrap();
    // Refused when submitted: no task is queued on it.
    let sneaky = env
        .ctxhost(&[
            "submit",
            "--json",
            "--workspace",
            other.to_str().unwrap(),
            "look around",
        ])
        .fails();
    assert_eq!(sneaky.code(), Some(2));
    assert!(
        sneaky.stderr().contains("inside ctxhost's own"),
        "{}",
        sneaky.stderr()
    );
}

/// A user's workspace inside a git repository: workspace.json records it unmanaged with the
/// base HEAD at the task's start, and the patch has the edit and a new file while the user's
/// own index stays as it was.
#[test]
fn a_users_git_workspace_gets_a_patch_without_its_index_being_touched() {
    let repo = tempfile::tempdir().unwrap();
    let r = repo.path();
    git(r, &["init", "-q", "-b", "main"]);
    std::fs::write(r.join("calc.py"), CALC).unwrap();
    git(r, &["add", "-A"]);
    git(
        r,
        &[
            "-c",
            "user.name=U",
            "-c",
            "user.email=u@example.com",
            "commit",
            "-q",
            "-m",
            "base",
        ],
    );
    let base = git(r, &["rev-parse", "HEAD"]);
    let index_before = std::fs::read(r.join(".git/index")).unwrap();
    let llm = FakeLlm::start(vec![
        the_edit(),
        Reply::ToolCalls {
            calls: vec![call(
                "w",
                "write_file",
                json!({"path": "notes.md", "content": "new file\n"}),
            )],
            usage: Some((120, 10)),
        },
        Reply::text("Done.", Some((150, 5))),
    ]);
    let env = TestEnv::new();
    env.write_config(&config_yaml(
        &llm.base_url(),
        "openai",
        &format!(
            "workspace: {:?}\ntools:\n  builtin: true\n",
            r.display().to_string()
        ),
    ));
    env.ctxhost(&["init"]).ok();
    let uuid = env.ctxhost(&["submit", "--json", "fix it"]).ok().json()["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    env.ctxhost(&["run", "--once"]).ok();
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    let rec: Value =
        serde_json::from_slice(&std::fs::read(dir.join("workspace.json")).unwrap()).unwrap();
    assert_eq!(rec["managed"], false);
    assert_eq!(rec["base_commit"], base.as_str());
    assert_eq!(rec["ref"], "refs/heads/main");
    let patch = String::from_utf8(std::fs::read(dir.join("changes.patch")).unwrap()).unwrap();
    assert!(patch.contains("+    return a + b"), "{patch}");
    assert!(
        patch.contains("new file mode") && patch.contains("+new file"),
        "{patch}"
    );
    assert_eq!(std::fs::read(r.join(".git/index")).unwrap(), index_before);
    assert_eq!(git(r, &["status", "--porcelain"]), "M calc.py\n?? notes.md");
}

/// A task that failed on host a after editing its worktree is retried on host b, which shares
/// only PostgreSQL and the bucket: host b rebuilds the worktree from its own mirror, the base
/// commit (main has moved on since) and changes.patch, and the task goes on there.
fn a_worktree_is_rebuilt_on_another_host_from_the_mirror_the_base_and_the_patch() {
    let (gh, git_srv, base) = forge();
    gh.add_item(
        "acme/app",
        Kind::Issue,
        "add() subtracts",
        "Fix add().",
        &[LABEL],
    );
    let llm = FakeLlm::start(vec![
        the_edit(),
        Reply::status(
            400,
            r#"{"error":{"message":"refused for the test","type":"invalid_request_error"}}"#,
            &[],
        ),
        Reply::text("Fixed add().", Some((150, 5))),
    ]);
    let endpoint = std::env::var("CTXHOST_TEST_S3_URL")
        .expect("CTXHOST_TEST_S3_URL: start the server with `scripts/test-s3.sh start`");
    let url = format!(
        "s3://ctxhost-test/ws-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let mut env = TestEnv::new();
    env.set_env("AWS_ACCESS_KEY_ID", "ctxhost-test");
    env.set_env("AWS_SECRET_ACCESS_KEY", "ctxhost-test-secret");
    env.set_env(GH_TOKEN_ENV, &gh.token());
    let yaml = config_yaml(
        &llm.base_url(),
        "openai",
        &format!("plugins:\n  compressor: none\n{}", section(&gh)),
    )
    .replace(
        "context_storage:\n  base_dir: ./contexts\n",
        &format!(
            "context_storage:\n  base_dir: ./contexts\n  remote:\n    url: {url}\n    endpoint: \"{endpoint}\"\n    region: us-east-1\n    allow_http: true\n"
        ),
    );
    env.write_config(&yaml);
    env.ctxhost(&["init"]).ok();
    let tree = |host: &str| env.root().join(format!("tree-{host}"));
    let on_host = |host: &str, args: &[&str]| {
        let t = tree(host);
        let mut all = vec!["--contexts", t.to_str().unwrap()];
        all.extend_from_slice(args);
        let mut cmd = env.ctxhost_cmd(&all);
        cmd.cmd
            .env(ctxhost::layout::HOSTNAME_ENV, host)
            .env(ctxhost::host::HOST_ID_ENV, format!("machine-{host}"));
        cmd.run()
    };
    on_host("host-a", &["init"]).ok();
    let report = on_host("host-a", &["poll", "--once", "--json"]).ok().json();
    let uuid = report["polls"][0][1]["queued"][0]["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let out = on_host("host-a", &["run", "--once", "--poll-ms", "20"]);
    assert_eq!(out.code(), Some(1), "{}", out.stderr());
    let ws_a = tree("host-a").join(".workspaces").join(&uuid);
    let patch_a = std::fs::read(
        tree("host-a")
            .join("completed")
            .join(&uuid)
            .join("changes.patch"),
    )
    .unwrap();
    let task_a = tree("host-a").join("completed").join(&uuid);
    assert!(
        String::from_utf8_lossy(&patch_a).contains("+    return a + b"),
        "patch {:?}; tools.jsonl {:?}; llm_calls.jsonl {:?}; run: {}",
        String::from_utf8_lossy(&patch_a),
        std::fs::read_to_string(task_a.join("tools.jsonl")),
        std::fs::read_to_string(task_a.join("llm_calls.jsonl")),
        out.stderr()
    );
    assert!(ws_a.exists());

    // main moves on; host b (no shared files) retries the task.
    git_srv.commit("acme/app", "main", &[("later.txt", "later\n")], "later");
    on_host("host-b", &["init"]).ok();
    on_host("host-b", &["retry", &uuid]).ok();
    on_host("host-b", &["run", "--once", "--poll-ms", "20"]).ok();
    let shown = on_host("host-b", &["show", &uuid, "--json"]).ok().json();
    assert_eq!(shown["task"]["status"], "completed", "{shown:#}");
    assert_eq!(shown["task"]["hostname"], "host-b", "{shown:#}");
    let ws_b = std::path::absolute(tree("host-b").join(".workspaces").join(&uuid)).unwrap();
    assert_eq!(git(&ws_b, &["rev-parse", "HEAD"]), base);
    assert!(!ws_b.join("later.txt").exists());
    assert_eq!(
        std::fs::read_to_string(ws_b.join("calc.py")).unwrap(),
        "def add(a, b):\n    return a + b\n"
    );
    let dir_b = tree("host-b").join("completed").join(&uuid);
    assert_eq!(std::fs::read(dir_b.join("changes.patch")).unwrap(), patch_a);
    let rec: Value =
        serde_json::from_slice(&std::fs::read(dir_b.join("workspace.json")).unwrap()).unwrap();
    assert_eq!(rec["path"], ws_b.display().to_string());
    assert_eq!(rec["base_commit"], base.as_str());
    // Host b asked the model only the step that had failed, with host a's edit in its history.
    assert_eq!(llm.request_count(), 3);
    let fsck = on_host("host-b", &["fsck", "--json"]).json();
    assert_eq!(fsck["problems"], Value::Array(vec![]), "{fsck:#}");
    for host in ["host-a", "host-b"] {
        let found = files_containing(&tree(host), &gh.token());
        assert!(found.is_empty(), "the token is in {found:?}");
    }
}

mod postgres {
    #[test]
    #[cfg_attr(
        not(all(ctxhost_pg_tests, ctxhost_s3_tests)),
        ignore = "needs PostgreSQL and SeaweedFS: CTXHOST_TEST_DATABASE_URL (scripts/test-postgres.sh start) and CTXHOST_TEST_S3_URL (scripts/test-s3.sh start)"
    )]
    fn a_worktree_is_rebuilt_on_another_host_from_the_mirror_the_base_and_the_patch() {
        crate::support::store::on_postgres(
            super::a_worktree_is_rebuilt_on_another_host_from_the_mirror_the_base_and_the_patch,
        )
    }
}
