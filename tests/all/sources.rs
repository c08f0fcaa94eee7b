//! Task sources (issue 13) against the fake GitHub and GitLab APIs of
//! `support::fake_forge` and the fake LLM: labelled items become tasks (`ctxhost poll
//! --once`, or `ctxhost run` on its own), results come back as exactly one comment with
//! the labels moved, whatever crashes in between; pagination, rate limits, retries, errors
//! that name the repository, tokens kept out of everything ctxhost writes.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use ctxhost::db::sources::CommentState;
use ctxhost::db::{Db, Status, TaskFilter, TaskRow};
use serde_json::Value;

use crate::support::dashboard::Dashboard;
use crate::support::fake_forge::{FakeForge, Fault, Kind};
use crate::support::fake_llm::{FakeLlm, Reply};
use crate::support::{TestEnv, config_yaml, wait_until};

const GH_TOKEN_ENV: &str = "CTXHOST_TEST_GITHUB_TOKEN";
const GL_TOKEN_ENV: &str = "CTXHOST_TEST_GITLAB_TOKEN";
const LABEL: &str = "coding agent";
const PROCESSING: &str = "coding agent processing";
const DONE: &str = "coding agent done";
const FAILED: &str = "coding agent failed";
const PAUSED: &str = "coding agent paused";

/// Where the task of `row` came from: (source, owner, repo, item type, item number), a field
/// not set as "".
fn origin(row: &TaskRow) -> (&str, &str, &str, &str, String) {
    (
        row.task_source.as_str(),
        row.owner.as_deref().unwrap_or_default(),
        row.repo.as_deref().unwrap_or_default(),
        row.task_type.as_deref().unwrap_or_default(),
        row.task_id.clone().unwrap_or_default(),
    )
}

/// A `sources.github` section for `gh` watching `repos`.
fn github_section(gh: &FakeForge, repos: &[&str]) -> String {
    format!(
        "  github:\n    api_url: \"{}\"\n    token_env: {GH_TOKEN_ENV}\n    repos: [{}]\n    poll_interval_secs: 1\n",
        gh.api_url(),
        repos.join(", ")
    )
}

/// A `sources.gitlab` section for `gl` watching `projects`.
fn gitlab_section(gl: &FakeForge, projects: &[&str]) -> String {
    format!(
        "  gitlab:\n    api_url: \"{}\"\n    token_env: {GL_TOKEN_ENV}\n    projects: [{}]\n    poll_interval_secs: 1\n",
        gl.api_url(),
        projects.join(", ")
    )
}

/// An initialised environment whose LLM is `llm` and whose sources are `sections`, with the
/// tokens of `gh` / `gl` in the environment.
fn bot_env(
    llm: &FakeLlm,
    gh: Option<&FakeForge>,
    gl: Option<&FakeForge>,
    sections: &str,
    extra: &str,
) -> TestEnv {
    let mut env = TestEnv::new();
    env.write_config(&config_yaml(
        &llm.base_url(),
        "openai",
        &format!("sources:\n{sections}{extra}"),
    ));
    if let Some(gh) = gh {
        env.set_env(GH_TOKEN_ENV, &gh.token());
    }
    if let Some(gl) = gl {
        env.set_env(GL_TOKEN_ENV, &gl.token());
    }
    env.ctxhost(&["init"]).ok();
    env
}

/// [`bot_env`] with one source: `gh` watching `acme/app`.
fn acme_env(llm: &FakeLlm, gh: &FakeForge) -> TestEnv {
    bot_env(llm, Some(gh), None, &github_section(gh, &["acme/app"]), "")
}

fn poll_once(env: &TestEnv) -> Value {
    env.ctxhost(&["poll", "--once", "--json"]).ok().json()
}

/// UUIDs queued by a `poll --once --json` report.
fn queued(report: &Value) -> Vec<String> {
    report["polls"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p[1]["queued"].as_array().unwrap().clone())
        .map(|q| q["uuid"].as_str().unwrap().to_string())
        .collect()
}

fn db(env: &TestEnv) -> Db {
    Db::open(&env.store_spec(), &env.contexts()).unwrap()
}

/// Every byte ctxhost wrote under contexts/ (task files, and tasks.db on SQLite).
fn all_written_bytes(env: &TestEnv) -> Vec<u8> {
    fn walk(dir: &std::path::Path, out: &mut Vec<u8>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if let Ok(b) = std::fs::read(&p) {
                out.extend(b);
            }
        }
    }
    let mut out = Vec::new();
    walk(&env.contexts(), &mut out);
    out
}

/// Seconds from now (the task store's clock) until the next publishing attempt of `uuid` may
/// be made: the wait every publisher obeys, kept in the store.
fn publish_wait_secs(env: &TestEnv, uuid: &str) -> f64 {
    let db = db(env);
    let p = db.publication(uuid).unwrap().unwrap();
    let next = p.next_attempt_ms.expect("no next attempt recorded");
    (next - db.now_ms().unwrap()) as f64 / 1000.0
}

/// Let the publishing wait of `uuid` pass (the store's not-before time moved to the past),
/// instead of sleeping through it.
fn let_publish_wait_pass(env: &TestEnv, uuid: &str) {
    db(env)
        .execute_raw(&format!(
            "UPDATE publications SET next_attempt_ms = 1 WHERE task_uuid = '{uuid}'"
        ))
        .unwrap();
}

/// `poll --once --json`, whatever its exit code: (code, report, stderr).
fn poll_once_any(env: &TestEnv) -> (Option<i32>, Value, String) {
    let out = env.ctxhost(&["poll", "--once", "--json"]);
    let report = serde_json::from_str(&out.stdout()).unwrap_or(Value::Null);
    (out.code(), report, out.stderr())
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn a_labelled_github_issue_becomes_a_task_and_gets_one_comment_with_the_answer() {
    let llm = FakeLlm::start(vec![Reply::text(
        "Fixed: the timeout is now 30 s.",
        Some((40, 8)),
    )]);
    let gh = FakeForge::github();
    let n = gh.add_item(
        "acme/app",
        Kind::Issue,
        "Login times out",
        "It hangs after 5 s.",
        &[LABEL],
    );
    gh.add_comment("acme/app", Kind::Issue, n, "bob", "Seen on staging too.");
    gh.add_comment(
        "acme/app",
        Kind::Issue,
        n,
        "carol",
        "Please raise the timeout to 30 s.",
    );
    let other = gh.add_item("acme/app", Kind::Issue, "Unrelated", "no label", &["bug"]);
    let env = acme_env(&llm, &gh);

    let report = poll_once(&env);
    let uuids = queued(&report);
    assert_eq!(uuids.len(), 1, "{report:#}");
    let uuid = &uuids[0];
    let row = db(&env).get(uuid).unwrap().unwrap();
    assert_eq!(row.status, Status::Queued);
    assert_eq!(
        origin(&row),
        ("github", "acme", "app", "issue", n.to_string())
    );
    assert_eq!(row.user.as_deref(), Some("carol"));
    assert!(
        row.prompt
            .starts_with(&format!("GitHub issue acme/app#{n}: Login times out")),
        "{}",
        row.prompt
    );
    assert!(row.prompt.contains("It hangs after 5 s."));
    assert!(row.prompt.contains("### @bob"));
    let current = row
        .prompt
        .find("## Current request: the newest comment, by @carol")
        .unwrap();
    assert!(row.prompt[current..].contains("Please raise the timeout to 30 s."));
    // label -> processing as soon as it is queued.
    assert_eq!(gh.labels("acme/app", Kind::Issue, n), [PROCESSING]);
    assert_eq!(gh.labels("acme/app", Kind::Issue, other), ["bug"]);

    env.ctxhost(&["run", "--once"]).ok();
    let row = db(&env).get(uuid).unwrap().unwrap();
    assert_eq!(row.status, Status::Completed);
    // The model got the issue as the task's user message.
    let first = &llm.requests()[0].messages()[1];
    assert!(
        first["content"]
            .as_str()
            .unwrap()
            .contains("Login times out")
    );

    let posts = gh.calls_to("POST", &format!("/issues/{n}/comments"));
    assert_eq!(posts.len(), 1);
    let comments = gh.comments("acme/app", Kind::Issue, n);
    assert_eq!(comments.len(), 3);
    let result = &comments[2].body;
    assert!(
        result.starts_with(&format!("<!-- ctxhost:result task={uuid} -->\n")),
        "{result}"
    );
    assert!(result.contains("Fixed: the timeout is now 30 s."));
    assert_eq!(gh.labels("acme/app", Kind::Issue, n), [DONE]);
    let p = db(&env).publication(uuid).unwrap().unwrap();
    assert_eq!(p.comment_state, CommentState::Posted);
    assert_eq!(p.comment_id, Some(comments[2].id.to_string()));
    assert_eq!(p.labels_state.as_deref(), Some("done"));
    assert_eq!(db(&env).source_item(uuid).unwrap(), None);
    let item_page = format!("{}/acme/app/issues/{n}", gh.api_url());
    assert_eq!(p.item_url.as_deref(), Some(item_page.as_str()));
    let posted_at = p.posted_at.clone().unwrap();
    let shown = env.ctxhost(&["show", uuid]).ok().stdout();
    assert!(
        shown.contains(&format!("item:          {item_page}\n")),
        "{shown}"
    );
    assert!(
        shown.contains(&format!(
            "published:     result posted {item_page}#issuecomment-{} at {posted_at}; labels done",
            comments[2].id
        )),
        "{shown}"
    );
    let shown = env.ctxhost(&["show", uuid, "--json"]).ok().json();
    assert_eq!(shown["publication"]["comment_state"], "posted");
    assert_eq!(shown["publication"]["item_url"], item_page.as_str());
    assert_eq!(shown["publication"]["posted_at"], posted_at.as_str());

    // The dashboard's task page links the item and the result comment.
    let d = Dashboard::start(&env, &[]);
    let page = d.get(&format!("/tasks/{uuid}")).expect(200).body;
    assert!(
        page.contains(&format!(
            "<a href=\"{item_page}\" rel=\"noopener noreferrer\" target=\"_blank\">acme/app#{n} (GitHub issue)</a>"
        )),
        "{page}"
    );
    assert!(
        page.contains(&format!(
            "result posted at {posted_at}; labels done (<a href=\"{item_page}#issuecomment-{}\"",
            comments[2].id
        )),
        "{page}"
    );
    drop(d);

    // Every request carried the token; nothing ctxhost wrote contains it.
    assert!(
        gh.calls()
            .iter()
            .all(|c| c.header("authorization") == Some(&format!("Bearer {}", gh.token())))
    );
    assert!(!contains(&all_written_bytes(&env), &gh.token()));

    // Polling again changes nothing.
    let again = poll_once(&env);
    assert!(queued(&again).is_empty(), "{again:#}");
    assert_eq!(gh.calls_to("POST", "/comments").len(), 1);
}

/// A forge whose `html_url`s are `javascript:` links: none reaches the prompt, tasks.db or the
/// poll report (README: URLs are checked before they reach tasks.db).
#[test]
fn an_item_url_that_is_not_http_is_dropped_everywhere() {
    let llm = FakeLlm::start(vec![Reply::text("Done.", None)]);
    let gh = FakeForge::github();
    gh.set_web_base("javascript:alert(document.cookie)//");
    gh.add_item("acme/app", Kind::Issue, "Hostile links", "Body.", &[LABEL]);
    let env = bot_env(
        &llm,
        Some(&gh),
        None,
        &github_section(&gh, &["acme/app"]),
        "",
    );
    let report = poll_once(&env);
    let uuids = queued(&report);
    assert_eq!(uuids.len(), 1, "{report:#}");
    assert!(!report.to_string().contains("javascript:"), "{report:#}");
    let row = db(&env).get(&uuids[0]).unwrap().unwrap();
    assert!(row.prompt.contains("Hostile links"), "{}", row.prompt);
    assert!(!row.prompt.contains("javascript:"), "{}", row.prompt);
    assert!(!row.prompt.contains("\nURL: "), "{}", row.prompt);
    env.ctxhost(&["run", "--once"]).ok();
    let show = env.ctxhost(&["show", "--json", &uuids[0]]).ok().json();
    assert_eq!(show["task"]["status"], "completed");
    assert_eq!(show["publication"]["item_url"], Value::Null, "{show:#}");
    assert_eq!(show["publication"]["comment_url"], Value::Null, "{show:#}");
    assert!(!contains(&all_written_bytes(&env), "javascript:"));
}

#[test]
fn a_labelled_gitlab_merge_request_becomes_a_task_and_gets_one_note() {
    let llm = FakeLlm::start(vec![Reply::text("Reviewed: looks good.", Some((30, 5)))]);
    let gl = FakeForge::gitlab();
    let project = "group/sub/proj";
    let iid = gl.add_item(
        project,
        Kind::Pull,
        "Add caching",
        "Adds an LRU cache.",
        &[LABEL, "backend"],
    );
    gl.add_comment(
        project,
        Kind::Pull,
        iid,
        "dave",
        "Please review the eviction policy.",
    );
    // An issue with the same iid, not labelled.
    gl.add_item(project, Kind::Issue, "Other", "", &[]);
    let env = bot_env(&llm, None, Some(&gl), &gitlab_section(&gl, &[project]), "");

    let report = poll_once(&env);
    let uuids = queued(&report);
    assert_eq!(uuids.len(), 1, "{report:#}");
    let row = db(&env).get(&uuids[0]).unwrap().unwrap();
    assert_eq!(
        origin(&row),
        (
            "gitlab",
            "group/sub",
            "proj",
            "pull_request",
            iid.to_string()
        )
    );
    assert!(row.prompt.starts_with(&format!(
        "GitLab merge request {project}!{iid}: Add caching"
    )));
    assert!(row.prompt.contains("Branches: feature-1 into main."));
    assert!(row.prompt.contains("Please review the eviction policy."));
    let mut labels = gl.labels(project, Kind::Pull, iid);
    labels.sort();
    assert_eq!(labels, ["backend", PROCESSING]);
    // Requests address the project by its encoded path and carry PRIVATE-TOKEN.
    let list = gl.calls_to("GET", "/merge_requests");
    assert_eq!(list[0].param("labels"), Some(LABEL));
    assert!(
        gl.calls()
            .iter()
            .all(|c| c.header("private-token") == Some(gl.token().as_str()))
    );

    env.ctxhost(&["run", "--once"]).ok();
    assert_eq!(
        db(&env).get(&uuids[0]).unwrap().unwrap().status,
        Status::Completed
    );
    assert_eq!(
        gl.calls_to("POST", &format!("/merge_requests/{iid}/notes"))
            .len(),
        1
    );
    let notes = gl.comments(project, Kind::Pull, iid);
    assert_eq!(notes.len(), 2, "system notes are not comments");
    assert!(notes[1].body.contains("Reviewed: looks good."));
    let mut labels = gl.labels(project, Kind::Pull, iid);
    labels.sort();
    assert_eq!(labels, ["backend", DONE]);
    assert!(!contains(&all_written_bytes(&env), &gl.token()));
    let p = db(&env).publication(&uuids[0]).unwrap().unwrap();
    assert_eq!(
        p.item_url,
        Some(format!(
            "{}/{project}/-/merge_requests/{iid}",
            gl.api_url().trim_end_matches("/api/v4")
        ))
    );
    assert!(p.comment_url.unwrap().ends_with(&format!(
        "/{project}/-/merge_requests/{iid}#note_{}",
        notes[1].id
    )));
}

#[test]
fn a_failed_task_posts_its_error_and_gets_the_failed_label() {
    let llm = FakeLlm::start(vec![Reply::status(
        400,
        r#"{"error":{"message":"model not found"}}"#,
        &[],
    )]);
    let gh = FakeForge::github();
    let n = gh.add_item(
        "acme/app",
        Kind::Pull,
        "Refactor",
        "Split the module.",
        &[LABEL],
    );
    let env = acme_env(&llm, &gh);
    let uuid = queued(&poll_once(&env)).remove(0);
    assert!(
        db(&env)
            .get(&uuid)
            .unwrap()
            .unwrap()
            .prompt
            .contains("Branches: feature-1 into main.")
    );
    let out = env.ctxhost(&["run", "--once"]);
    assert_eq!(out.code(), Some(1), "{}", out.stderr());
    assert_eq!(db(&env).get(&uuid).unwrap().unwrap().status, Status::Failed);
    let comments = gh.comments("acme/app", Kind::Pull, n);
    assert_eq!(comments.len(), 1);
    assert!(
        comments[0].body.contains("The task failed:"),
        "{}",
        comments[0].body
    );
    assert!(comments[0].body.contains("model not found"));
    assert_eq!(gh.labels("acme/app", Kind::Pull, n), [FAILED]);
}

#[test]
fn a_rate_limited_poll_waits_for_the_reset_and_succeeds() {
    let llm = FakeLlm::start(vec![]);
    let gh = FakeForge::github();
    gh.add_item("acme/app", Kind::Issue, "One", "x", &[LABEL]);
    gh.push_fault(
        "GET",
        "/repos/acme/app/issues",
        Fault::RateLimit { secs: 1 },
    );
    let gl = FakeForge::gitlab();
    gl.add_item("g/p", Kind::Issue, "Two", "y", &[LABEL]);
    gl.push_fault("GET", "/issues", Fault::RateLimit { secs: 1 });
    gl.push_fault("GET", "/merge_requests", Fault::Status(502));
    let env = bot_env(
        &llm,
        Some(&gh),
        Some(&gl),
        &format!(
            "{}{}",
            github_section(&gh, &["acme/app"]),
            gitlab_section(&gl, &["g/p"])
        ),
        "",
    );
    let report = poll_once(&env);
    assert_eq!(queued(&report).len(), 2, "{report:#}");
    for (forge, path, first_status) in [
        (&gh, "/repos/acme/app/issues", 403),
        (&gl, "/projects/g/p/issues", 429),
    ] {
        let lists: Vec<_> = forge
            .calls()
            .into_iter()
            .filter(|c| c.method == "GET" && c.path.ends_with(path))
            .collect();
        assert_eq!(lists.len(), 2, "{path}: rate limited, then served");
        assert_eq!((lists[0].status, lists[1].status), (first_status, 200));
        // It waited for the reset (the fake's reset is 1 s ahead; the client adds 1 s).
        assert!(
            lists[1].at - lists[0].at >= Duration::from_millis(900),
            "{path}: {:?}",
            lists[1].at - lists[0].at
        );
    }
    let mrs = gl.calls_to("GET", "/merge_requests");
    assert_eq!(mrs.iter().map(|c| c.status).collect::<Vec<_>>(), [502, 200]);
}

#[test]
fn a_poll_reads_every_page_of_250_labelled_items() {
    let llm = FakeLlm::start(vec![]);
    let gh = FakeForge::github();
    for i in 0..250 {
        gh.add_item("acme/big", Kind::Issue, &format!("Item {i}"), "x", &[LABEL]);
        if i % 50 == 0 {
            gh.add_item("acme/big", Kind::Issue, "unlabelled", "x", &[]);
        }
    }
    let env = bot_env(
        &llm,
        Some(&gh),
        None,
        &github_section(&gh, &["acme/big"]),
        "",
    );
    let report = poll_once(&env);
    assert_eq!(queued(&report).len(), 250);
    let pages: Vec<String> = gh
        .calls_to("GET", "/repos/acme/big/issues")
        .iter()
        .map(|c| {
            format!(
                "{}/{}",
                c.param("page").unwrap_or("1"),
                c.param("per_page").unwrap()
            )
        })
        .collect();
    assert_eq!(pages, ["1/100", "2/100", "3/100"]);
    let rows = db(&env).list(&TaskFilter::default()).unwrap();
    assert_eq!(rows.len(), 250);
    let mut ids: Vec<u64> = rows
        .iter()
        .map(|r| r.task_id.as_ref().unwrap().parse().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 250, "one task per item");
    // The listing said there are no comments: none were read.
    assert!(gh.calls_to("GET", "/comments").is_empty());
}

/// Run `ctxhost ARGS` with `failpoint` on; it must die by SIGKILL.
fn killed(env: &TestEnv, failpoint: &str, args: &[&str]) {
    let mut cmd = env.ctxhost_cmd(args);
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

#[test]
fn a_kill_between_posting_and_recording_the_comment_posts_exactly_one() {
    let llm = FakeLlm::start(vec![]);
    let gh = FakeForge::github();
    let n = gh.add_item("acme/app", Kind::Issue, "Crash me", "x", &[LABEL]);
    let env = acme_env(&llm, &gh);
    let uuid = queued(&poll_once(&env)).remove(0);
    // The worker runs the task, posts the comment, and dies before recording it.
    killed(&env, "publish:after-comment", &["run", "--once"]);
    assert_eq!(
        db(&env).get(&uuid).unwrap().unwrap().status,
        Status::Completed
    );
    assert_eq!(gh.comments("acme/app", Kind::Issue, n).len(), 1);
    let p = db(&env).publication(&uuid).unwrap().unwrap();
    assert_eq!(p.comment_state, CommentState::Posting);
    assert!(
        p.lease_owner.is_some(),
        "the dead process still holds the lease"
    );
    // Recovery: the next pass takes over the dead process's lease, finds the comment by its
    // marker and records it instead of posting again.
    let report = poll_once(&env);
    assert!(
        report["published"]["done"][0][2]["recovered"].is_string(),
        "{report:#}"
    );
    assert_eq!(gh.calls_to("POST", "/comments").len(), 1);
    let comments = gh.comments("acme/app", Kind::Issue, n);
    assert_eq!(comments.len(), 1);
    let p = db(&env).publication(&uuid).unwrap().unwrap();
    assert_eq!(p.comment_state, CommentState::Posted);
    assert_eq!(p.comment_id, Some(comments[0].id.to_string()));
    assert_eq!(gh.labels("acme/app", Kind::Issue, n), [DONE]);
    poll_once(&env);
    assert_eq!(gh.calls_to("POST", "/comments").len(), 1);
}

#[test]
fn a_kill_before_posting_loses_nothing_and_a_lost_answer_is_not_posted_twice() {
    let llm = FakeLlm::start(vec![]);
    let gh = FakeForge::github();
    let a = gh.add_item("acme/app", Kind::Issue, "A", "x", &[LABEL]);
    let env = acme_env(&llm, &gh);
    queued(&poll_once(&env));
    // Killed after recording the intent, before the request: no comment yet.
    killed(&env, "publish:before-comment", &["run", "--once"]);
    assert!(gh.comments("acme/app", Kind::Issue, a).is_empty());
    env.ctxhost(&["run", "--once"]).ok();
    assert_eq!(
        gh.comments("acme/app", Kind::Issue, a).len(),
        1,
        "posted after recovery"
    );
    assert_eq!(gh.labels("acme/app", Kind::Issue, a), [DONE]);

    // The forge makes the comment but the answer is lost: the client does not repeat the
    // POST; the next pass finds the comment.
    let b = gh.add_item("acme/app", Kind::Issue, "B", "x", &[LABEL]);
    let uuid = queued(&poll_once(&env)).remove(0);
    gh.push_fault("POST", &format!("/issues/{b}/comments"), Fault::DropAnswer);
    // The run ends with success and a warning: the comment probably exists, and the next
    // pass confirms it (or posts it).
    let out = env.ctxhost(&["run", "--once"]);
    assert_eq!(out.code(), Some(0), "{}", out.stderr());
    assert!(
        out.stderr().contains("warning: ")
            && out.stderr().contains("answer was lost")
            && out.stderr().contains(&uuid),
        "{}",
        out.stderr()
    );
    let p = db(&env).publication(&uuid).unwrap().unwrap();
    assert_eq!((p.comment_state, p.attempts), (CommentState::Posting, 1));
    assert!(
        p.last_error
            .unwrap()
            .contains(&format!("GitHub acme/app: comment on #{b}"))
    );
    // The next pass once the wait is over finds the comment.
    let_publish_wait_pass(&env, &uuid);
    poll_once(&env);
    let posts = gh.calls_to("POST", &format!("/issues/{b}/comments"));
    assert_eq!(posts.len(), 1);
    let searched = gh.calls_to("GET", &format!("/issues/{b}/comments"));
    assert!(
        searched.iter().any(|c| c.at > posts[0].at),
        "looked for the marker after the lost answer"
    );
    assert_eq!(gh.comments("acme/app", Kind::Issue, b).len(), 1);
    assert_eq!(
        db(&env).publication(&uuid).unwrap().unwrap().comment_state,
        CommentState::Posted
    );
}

#[test]
fn two_pollers_at_once_queue_each_item_once() {
    let llm = FakeLlm::start(vec![]);
    let gh = FakeForge::github();
    for i in 0..30 {
        gh.add_item("acme/app", Kind::Issue, &format!("Item {i}"), "x", &[LABEL]);
    }
    // Slow answers, so that the two pollers overlap item by item.
    gh.set_delay(Duration::from_millis(3));
    let env = acme_env(&llm, &gh);
    let a = env.ctxhost_cmd(&["poll", "--once", "--json"]).spawn();
    let b = env.ctxhost_cmd(&["poll", "--once", "--json"]).spawn();
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert!(
        a.status.success() && b.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&a.stderr),
        String::from_utf8_lossy(&b.stderr)
    );
    let count =
        |o: &std::process::Output| queued(&serde_json::from_slice(&o.stdout).unwrap()).len();
    assert_eq!(count(&a) + count(&b), 30);
    let rows = db(&env).list(&TaskFilter::default()).unwrap();
    assert_eq!(rows.len(), 30);
    let mut ids: Vec<&str> = rows.iter().map(|r| r.task_id.as_deref().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 30);
    for n in 1..=30 {
        assert_eq!(gh.labels("acme/app", Kind::Issue, n), [PROCESSING], "#{n}");
    }
}

#[test]
fn a_done_item_labelled_again_after_a_new_comment_starts_a_new_task_with_the_same_key() {
    let llm = FakeLlm::start(vec![
        Reply::text("First answer.", None),
        Reply::text("Second answer.", None),
    ]);
    let gh = FakeForge::github();
    let n = gh.add_item("acme/app", Kind::Issue, "Do X", "Please do X.", &[LABEL]);
    let env = acme_env(&llm, &gh);
    let first = queued(&poll_once(&env)).remove(0);
    env.ctxhost(&["run", "--once"]).ok();
    assert_eq!(gh.labels("acme/app", Kind::Issue, n), [DONE]);
    // Not labelled again: nothing happens.
    assert!(queued(&poll_once(&env)).is_empty());

    gh.add_comment("acme/app", Kind::Issue, n, "erin", "Now also do Y.");
    gh.set_labels("acme/app", Kind::Issue, n, &[DONE, LABEL]);
    let second = queued(&poll_once(&env)).remove(0);
    assert_ne!(first, second);
    let d = db(&env);
    let (r1, r2) = (
        d.get(&first).unwrap().unwrap(),
        d.get(&second).unwrap().unwrap(),
    );
    assert_eq!(
        (
            &r1.task_source,
            &r1.owner,
            &r1.repo,
            &r1.task_type,
            &r1.task_id
        ),
        (
            &r2.task_source,
            &r2.owner,
            &r2.repo,
            &r2.task_type,
            &r2.task_id
        ),
        "the same task key, so context inheritance applies"
    );
    let cur = r2
        .prompt
        .find("## Current request: the newest comment, by @erin")
        .unwrap();
    assert!(r2.prompt[cur..].contains("Now also do Y."));
    assert!(r2.prompt[..cur].contains("(an earlier ctxhost result)"));
    assert!(r2.prompt[..cur].contains("First answer."));
    assert_eq!(gh.labels("acme/app", Kind::Issue, n), [PROCESSING]);
    env.ctxhost(&["run", "--once"]).ok();
    let comments = gh.comments("acme/app", Kind::Issue, n);
    assert_eq!(comments.len(), 3);
    assert!(comments[2].body.contains("Second answer."));
    assert!(comments[2].body.contains(&second));
    assert_eq!(gh.labels("acme/app", Kind::Issue, n), [DONE]);
}

#[test]
fn ctxhost_run_polls_on_its_own_and_shows_a_pause_with_the_paused_label() {
    // The first reply is slow and calls a tool, so the task is paused at the safe point
    // before the tool call.
    let llm = FakeLlm::start(vec![
        Reply::delay(
            Duration::from_secs(3),
            Reply::tool_calls(
                vec![("call_1", "read_file", r#"{"path":"a.txt"}"#)],
                Some((9, 4)),
            ),
        ),
        Reply::text("Resumed and done.", None),
    ]);
    let gh = FakeForge::github();
    let n = gh.add_item("acme/app", Kind::Issue, "Long job", "x", &[LABEL]);
    let env = acme_env(&llm, &gh);
    let mut worker = env.ctxhost_cmd(&["run", "--poll-ms", "50"]).spawn();
    let running = || {
        db(&env)
            .list(&TaskFilter {
                status: Some(Status::Running),
                ..Default::default()
            })
            .unwrap()
    };
    assert!(
        wait_until(Duration::from_secs(30), || !running().is_empty()),
        "the worker polled and started the task"
    );
    let uuid = running()[0].uuid.clone();
    env.ctxhost(&["pause", &uuid, "--wait", "--timeout", "30"])
        .ok();
    assert!(
        wait_until(Duration::from_secs(15), || gh.labels(
            "acme/app",
            Kind::Issue,
            n
        ) == [PAUSED]),
        "labels: {:?}",
        gh.labels("acme/app", Kind::Issue, n)
    );
    env.ctxhost(&["resume", &uuid]).ok();
    assert!(
        wait_until(Duration::from_secs(30), || gh.labels(
            "acme/app",
            Kind::Issue,
            n
        ) == [DONE]),
        "labels: {:?}",
        gh.labels("acme/app", Kind::Issue, n)
    );
    let _ = worker.kill();
    let _ = worker.wait();
    let comments = gh.comments("acme/app", Kind::Issue, n);
    assert_eq!(comments.len(), 1);
    assert!(comments[0].body.contains("Resumed and done."));
    // One task for the item although the worker polled many times.
    assert_eq!(db(&env).list(&TaskFilter::default()).unwrap().len(), 1);
}

#[test]
fn configuration_and_access_errors_are_clear_and_name_the_repository() {
    let llm = FakeLlm::start(vec![]);
    let gh = FakeForge::github();
    gh.add_repo("acme/app");
    // No token in the environment: exit 2, before anything is touched.
    let mut env = TestEnv::new();
    env.write_config(&config_yaml(
        &llm.base_url(),
        "openai",
        &format!("sources:\n{}", github_section(&gh, &["acme/app"])),
    ));
    env.ctxhost(&["init"]).ok();
    for args in [&["poll", "--once"][..], &["run", "--once"][..]] {
        let out = env.ctxhost(args);
        assert_eq!(out.code(), Some(2), "{args:?}: {}", out.stderr());
        assert!(
            out.stderr().contains(&format!(
                "sources.github.token_env: environment variable {GH_TOKEN_ENV} is not set"
            )),
            "{}",
            out.stderr()
        );
    }
    assert!(gh.calls().is_empty());
    // A wrong token: 401, naming the variable (never the value).
    env.set_env(GH_TOKEN_ENV, "wrong-token-value");
    let out = env.ctxhost(&["poll", "--once"]);
    assert_eq!(out.code(), Some(1));
    assert!(out.stderr().contains(&format!("GitHub acme/app: list open issues and pull requests labelled \"coding agent\": GitHub rejected the token in {GH_TOKEN_ENV} (401")), "{}", out.stderr());
    assert!(!out.stderr().contains("wrong-token-value"));
    // The summary does not read like a success.
    assert_eq!(
        out.stdout().trim(),
        "github: FAILED with 1 error(s) (on stderr); before that: 0 task(s) queued, 0 labelled item(s) already have one"
    );
    // An unknown repository next to a good one: 404 naming it; the good one is polled.
    gh.add_item("acme/app", Kind::Issue, "ok", "x", &[LABEL]);
    let env = bot_env(
        &llm,
        Some(&gh),
        None,
        &github_section(&gh, &["acme/gone", "acme/app"]),
        "",
    );
    let out = env.ctxhost(&["poll", "--once"]);
    assert_eq!(out.code(), Some(1));
    assert!(out.stderr().contains("GitHub acme/gone: list open issues and pull requests labelled \"coding agent\": not found (404)"), "{}", out.stderr());
    assert!(
        out.stdout()
            .contains("github: FAILED with 1 error(s) (on stderr); before that: 1 task(s) queued"),
        "{}",
        out.stdout()
    );
    // No sources at all.
    let plain = TestEnv::new().with_llm(&llm.base_url());
    let out = plain.ctxhost(&["poll", "--once"]);
    assert_eq!(out.code(), Some(2));
    assert!(out.stderr().contains("no task sources configured"));
}

#[test]
fn a_rate_limited_comment_is_not_waited_for_under_the_lease_and_is_posted_once_later() {
    let llm = FakeLlm::start(vec![Reply::text("Answer.", None)]);
    let gh = FakeForge::github();
    let n = gh.add_item("acme/app", Kind::Issue, "Q", "x", &[LABEL]);
    let env = acme_env(&llm, &gh);
    let uuid = queued(&poll_once(&env)).remove(0);
    gh.push_fault("POST", "/comments", Fault::RateLimit { secs: 30 });
    // The refused POST is not waited for (30 s) under the lease: the run ends at once, the
    // result not published yet; the wait until the reset is kept in the store.
    let started = std::time::Instant::now();
    let out = env.ctxhost(&["run", "--once"]);
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.code(), Some(1), "{}", out.stderr());
    let wait = publish_wait_secs(&env, &uuid);
    assert!((29.0..=62.0).contains(&wait), "{wait}");
    let_publish_wait_pass(&env, &uuid);
    poll_once(&env);
    let posts = gh.calls_to("POST", &format!("/issues/{n}/comments"));
    assert_eq!(
        posts.iter().map(|c| c.status).collect::<Vec<_>>(),
        [403, 201]
    );
    assert_eq!(gh.comments("acme/app", Kind::Issue, n).len(), 1);
    let p = db(&env).publication(&uuid).unwrap().unwrap();
    assert_eq!(
        (p.comment_state, p.attempts, p.last_error),
        (CommentState::Posted, 0, None)
    );
    assert_eq!(gh.labels("acme/app", Kind::Issue, n), [DONE]);
}

/// GitHub's secondary rate limit as a comment POST meets it: a 403 that says so only in its
/// message, without `Retry-After`.
fn secondary_rate_limit() -> Fault {
    Fault::Answer {
        status: 403,
        message: "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.".into(),
        headers: Vec::new(),
    }
}

#[test]
fn a_secondary_rate_limit_on_the_comment_waits_a_minute_then_longer_and_cron_polls_obey_it() {
    let llm = FakeLlm::start(vec![Reply::text("Answer.", None)]);
    let gh = FakeForge::github();
    let n = gh.add_item("acme/app", Kind::Issue, "Q", "x", &[LABEL]);
    let env = acme_env(&llm, &gh);
    let uuid = queued(&poll_once(&env)).remove(0);
    let posts = || gh.calls_to("POST", &format!("/issues/{n}/comments"));
    gh.push_fault("POST", "/comments", secondary_rate_limit());
    gh.push_fault("POST", "/comments", secondary_rate_limit());
    // The run's passes (its loop and its last one) post once: the result is not published.
    let out = env.ctxhost(&["run", "--once"]);
    assert_eq!(out.code(), Some(1), "{}", out.stderr());
    assert!(
        out.stderr().contains("could not be published yet"),
        "{}",
        out.stderr()
    );
    assert_eq!(posts().len(), 1);
    // At least a minute, kept in the store for every publisher.
    let first = publish_wait_secs(&env, &uuid);
    assert!((58.0..=61.0).contains(&first), "first wait {first} s");
    // `poll --once` from cron, three times in a row: nothing is posted, the report says when.
    for _ in 0..3 {
        let report = poll_once(&env);
        let waiting = &report["published"]["waiting"][0];
        assert_eq!(waiting["uuid"], uuid.as_str(), "{report:#}");
        assert!(waiting["wait_secs"].as_u64().unwrap() >= 50, "{report:#}");
        assert!(
            waiting["last_error"]
                .as_str()
                .unwrap()
                .contains("secondary rate limit"),
            "{report:#}"
        );
    }
    let text = env.ctxhost(&["poll", "--once"]).ok().stdout();
    assert!(
        text.contains("result not published yet: next attempt after"),
        "{text}"
    );
    assert_eq!(posts().len(), 1);
    // The minute is over: refused again, and the wait grows.
    let_publish_wait_pass(&env, &uuid);
    let (code, _, stderr) = poll_once_any(&env);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(posts().len(), 2);
    let second = publish_wait_secs(&env, &uuid);
    assert!((118.0..=121.0).contains(&second), "second wait {second} s");
    let show = env.ctxhost(&["show", &uuid]).ok().stdout();
    assert!(
        show.contains("secondary rate limit") && show.contains("next attempt after"),
        "{show}"
    );
    // Over too: posted once.
    let_publish_wait_pass(&env, &uuid);
    poll_once(&env);
    assert_eq!(
        posts().iter().map(|c| c.status).collect::<Vec<_>>(),
        [403, 403, 201]
    );
    assert_eq!(gh.comments("acme/app", Kind::Issue, n).len(), 1);
    assert_eq!(gh.labels("acme/app", Kind::Issue, n), [DONE]);
}

/// An HTTP date (IMF-fixdate) `secs` from now.
fn http_date_in(secs: i64) -> String {
    (chrono::Utc::now() + chrono::Duration::seconds(secs))
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string()
}

#[test]
fn retry_after_on_any_publishing_request_is_obeyed_in_seconds_or_as_a_date() {
    let llm = FakeLlm::start(vec![Reply::text("Answer.", None)]);
    let gl = FakeForge::gitlab();
    let n = gl.add_item("g/p", Kind::Issue, "Q", "x", &[LABEL]);
    let env = bot_env(&llm, None, Some(&gl), &gitlab_section(&gl, &["g/p"]), "");
    let uuid = queued(&poll_once(&env)).remove(0);
    let notes = || gl.calls_to("POST", &format!("/issues/{n}/notes"));
    // The note: 429 with Retry-After: 90 (seconds).
    gl.push_fault("POST", "/notes", Fault::RetryAfter { secs: 90 });
    let out = env.ctxhost(&["run", "--once"]);
    assert_eq!(out.code(), Some(1), "{}", out.stderr());
    assert_eq!(notes().len(), 1);
    let wait = publish_wait_secs(&env, &uuid);
    assert!(
        (88.0..=91.0).contains(&wait),
        "Retry-After 90: waits {wait} s"
    );
    // A 503 with Retry-After as an HTTP date five minutes ahead: the answer to the POST is
    // unknown (the note may exist), and the next look is not before that date.
    let_publish_wait_pass(&env, &uuid);
    gl.push_fault(
        "POST",
        "/notes",
        Fault::Answer {
            status: 503,
            message: "maintenance".into(),
            headers: vec![("Retry-After".into(), http_date_in(300))],
        },
    );
    let (code, _, stderr) = poll_once_any(&env);
    assert_eq!(code, Some(0), "a lost answer is a warning: {stderr}");
    assert!(
        stderr.contains("warning: ") && stderr.contains("answer was lost"),
        "{stderr}"
    );
    assert_eq!(notes().len(), 2);
    let wait = publish_wait_secs(&env, &uuid);
    assert!(
        (290.0..=301.0).contains(&wait),
        "Retry-After date: waits {wait} s"
    );
    let report = poll_once(&env);
    assert_eq!(
        report["published"]["waiting"][0]["comment_may_exist"], true,
        "{report:#}"
    );
    assert_eq!(notes().len(), 2);
    // Done: no note with the marker exists, so it is posted (once).
    let_publish_wait_pass(&env, &uuid);
    poll_once(&env);
    assert_eq!(
        notes().iter().map(|c| c.status).collect::<Vec<_>>(),
        [429, 503, 201]
    );
    assert_eq!(gl.comments("g/p", Kind::Issue, n).len(), 1);
}

#[test]
fn retry_after_on_a_label_request_is_waited_for_before_the_retry() {
    let llm = FakeLlm::start(vec![]);
    let gh = FakeForge::github();
    let n = gh.add_item("acme/app", Kind::Issue, "Q", "x", &[LABEL]);
    let env = acme_env(&llm, &gh);
    // Labels are safe to send again: the client waits the Retry-After (an HTTP date 3 s
    // ahead: at least 2 s) instead of its 0.5–1 s first backoff.
    gh.push_fault(
        "POST",
        &format!("/issues/{n}/labels"),
        Fault::Answer {
            status: 503,
            message: "unavailable".into(),
            headers: vec![("Retry-After".into(), http_date_in(3))],
        },
    );
    poll_once(&env);
    let adds = gh.calls_to("POST", &format!("/issues/{n}/labels"));
    assert_eq!(
        adds.iter().map(|c| c.status).collect::<Vec<_>>()[..2],
        [503, 200]
    );
    let gap = adds[1].at - adds[0].at;
    assert!(gap >= Duration::from_millis(1900), "retried after {gap:?}");
    assert_eq!(gh.labels("acme/app", Kind::Issue, n), [PROCESSING]);
}

#[test]
fn a_permission_403_on_the_comment_is_final_the_item_gets_the_failed_label_and_show_says_why() {
    let llm = FakeLlm::start(vec![Reply::text("Answer.", None)]);
    let gh = FakeForge::github();
    let n = gh.add_item("acme/app", Kind::Pull, "Q", "x", &[LABEL]);
    let env = acme_env(&llm, &gh);
    let uuid = queued(&poll_once(&env)).remove(0);
    gh.push_fault(
        "POST",
        "/comments",
        Fault::Answer {
            status: 403,
            message: "Resource not accessible by integration".into(),
            headers: Vec::new(),
        },
    );
    let out = env.ctxhost(&["run", "--once"]);
    assert_eq!(out.code(), Some(1), "{}", out.stderr());
    assert!(
        out.stderr()
            .contains("Resource not accessible by integration")
            && out.stderr().contains("given up")
            && out
                .stderr()
                .contains("1 task result(s) will not be published"),
        "{}",
        out.stderr()
    );
    assert_eq!(gh.labels("acme/app", Kind::Pull, n), [FAILED]);
    let p = db(&env).publication(&uuid).unwrap().unwrap();
    assert!(p.given_up(), "{p:?}");
    assert!(
        p.last_error
            .as_deref()
            .unwrap()
            .contains("Resource not accessible by integration")
    );
    let show = env.ctxhost(&["show", &uuid]).ok().stdout();
    assert!(
        show.contains("result not posted: publishing given up; labels failed")
            && show.contains("Resource not accessible by integration")
            && show.contains("not tried again"),
        "{show}"
    );
    // Not tried again (the fault is used up: another POST would pass), and the item is let
    // go: labelled again, it queues a new task.
    for _ in 0..3 {
        let report = poll_once(&env);
        assert!(queued(&report).is_empty(), "{report:#}");
    }
    assert_eq!(gh.calls_to("POST", "/comments").len(), 1);
    assert_eq!(db(&env).source_item(&uuid).unwrap(), None);
    assert!(gh.comments("acme/app", Kind::Pull, n).is_empty());
}

crate::support::store::postgres_variants!(
    a_labelled_github_issue_becomes_a_task_and_gets_one_comment_with_the_answer,
    a_labelled_gitlab_merge_request_becomes_a_task_and_gets_one_note,
    a_failed_task_posts_its_error_and_gets_the_failed_label,
    a_kill_between_posting_and_recording_the_comment_posts_exactly_one,
    a_kill_before_posting_loses_nothing_and_a_lost_answer_is_not_posted_twice,
    two_pollers_at_once_queue_each_item_once,
    a_done_item_labelled_again_after_a_new_comment_starts_a_new_task_with_the_same_key,
    ctxhost_run_polls_on_its_own_and_shows_a_pause_with_the_paused_label,
    a_rate_limited_comment_is_not_waited_for_under_the_lease_and_is_posted_once_later,
    a_secondary_rate_limit_on_the_comment_waits_a_minute_then_longer_and_cron_polls_obey_it,
    a_permission_403_on_the_comment_is_final_the_item_gets_the_failed_label_and_show_says_why,
);
