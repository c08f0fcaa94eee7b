//! The result as a change (issue 40, `pull_requests: true`): a completed task whose workspace
//! (`workspace.json`, [`crate::workspace::record`]) differs from its base commit ends as a
//! commit, a branch on the forge and a pull (merge) request — each exactly once, whatever
//! crashes in between. Run by the publisher ([`super::publish`]) under the task's publishing
//! lease, before the result comment (which links the request).
//!
//! # Steps (`publications.change_state`, [`ChangeState`])
//! Every step records its intent before its effect, and a step found begun is first looked for
//! on the worktree or the forge before it is done again:
//!
//! | state | recorded before | after a crash, the next holder |
//! |---|---|---|
//! | `none` | — | decides: no workspace record or no difference from the base → `unchanged` (a comment only) |
//! | `committing` | `git add -A; git commit` | takes the worktree's HEAD if its `Ctxhost-Task:` trailer names the task; else commits |
//! | `committed` (`change_commit`) | — | chooses the branch (and the base of the request) |
//! | `pushing` (`change_branch`, `change_base`) | `git push URL COMMIT:refs/heads/BRANCH` | `git ls-remote URL refs/heads/BRANCH` at the commit: pushed; else pushes |
//! | `pushed` | — | opens the request (or, onto a pull request's own head, is done) |
//! | `opening` | `POST …/pulls` / `POST …/merge_requests` | a request with that head branch (`GET pulls?head=OWNER:BRANCH&state=all`, `merge_requests?source_branch=`) is the one opened; else opens |
//! | `opened` (`pr_number`, `pr_url`) | — | nothing: the comment links it |
//!
//! Which branch: for an issue `ctxhost/issue-N-SHORTUUID` (the task UUID's first 8 characters)
//! against the default branch (the `refs/heads/…` of `workspace.json`'s `ref`, else the
//! remote's `HEAD`). For a pull request from a branch of the same repository, the commit goes
//! onto that head branch (a fast-forward push); when the forge refuses that push (no
//! permission, a protected branch, the branch moved), onto `ctxhost/pr-N-SHORTUUID` with a
//! request against the head branch instead. For a pull request from a fork: onto
//! `ctxhost/pr-N-SHORTUUID` with a request against the pull request's base branch.
//!
//! The token reaches git as a header for one command ([`crate::workspace::git`]): never in a
//! URL, `.git/config`, a log or the task's files. A push the forge refuses over HTTP is a
//! [`ForgeError`] like an API call's: a 403 is final (the publication is given up with the
//! failed label), a 429 a rate limit, waited for in the task store.
//!
//! Failpoints (tests): `publish:after-commit`, `publish:after-push`, `publish:after-pr` kill
//! the process right after the commit, the push, the request, before each is recorded.

use anyhow::{Context, bail};

use super::http::{FailureKind, ForgeError};
use super::pulls::NewPull;
use super::{ItemKind, ItemRef, Source};
use crate::db::sources::{ChangeFields, ChangeState, Publication};
use crate::db::{Db, TaskRow};
use crate::layout::Layout;
use crate::task_dir::TaskDir;
use crate::workspace::git::Git;
use crate::workspace::record::{WorkspaceRecord, without_credentials};

/// The trailer naming the task in the commits ctxhost makes.
pub const TRAILER: &str = "Ctxhost-Task";

/// Longest final answer kept in a commit message, characters.
const MAX_MESSAGE_ANSWER_CHARS: usize = 4_000;

/// Longest final answer kept in a pull request's description, characters.
const MAX_PULL_BODY_CHARS: usize = 50_000;

/// What the change step needs of the publisher.
pub(super) struct Ctx<'a> {
    pub db: &'a Db,
    pub owner: &'a str,
    pub layout: &'a Layout,
    pub remote: Option<&'a crate::remote::Store>,
    pub lease: std::time::Duration,
}

/// The branch ctxhost pushes the change of task `uuid` on `item` to:
/// `ctxhost/issue-7-0193a4b2` / `ctxhost/pr-7-0193a4b2`.
pub fn branch_name(item: &ItemRef, uuid: &str) -> String {
    let kind = match item.kind {
        ItemKind::Issue => "issue",
        ItemKind::PullRequest => "pr",
    };
    let short: String = uuid.chars().filter(|c| *c != '-').take(8).collect();
    format!("ctxhost/{kind}-{}-{short}", item.number)
}

/// The item's title, from the first line of a polled task's prompt
/// (`GitHub issue acme/app#7: TITLE`, [`super::prompt`]).
pub fn item_title(row: &TaskRow, item: &ItemRef) -> String {
    let first = row.prompt.lines().next().unwrap_or_default();
    let prefix = format!("{} {}: ", item.describe_kind(), item.short());
    let title = first.strip_prefix(&prefix).unwrap_or(first).trim();
    if title.is_empty() {
        format!("ctxhost: {}", item.short())
    } else {
        title.to_string()
    }
}

fn cut(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        s.trim().to_string()
    } else {
        let kept: String = s.chars().take(max).collect();
        format!("{}\n\n[... {} more characters]", kept.trim_end(), n - max)
    }
}

/// The commit message: the item's title, the final answer (cut), a pointer to the item, and
/// the trailer `Ctxhost-Task: UUID` in its own last paragraph.
pub fn commit_message(title: &str, answer: Option<&str>, item: &ItemRef, uuid: &str) -> String {
    let mut m = format!("{}\n\n", title.lines().next().unwrap_or(title).trim());
    if let Some(a) = answer.filter(|a| !a.trim().is_empty()) {
        m.push_str(&cut(a, MAX_MESSAGE_ANSWER_CHARS));
        m.push_str("\n\n");
    }
    m.push_str(&format!(
        "Made by ctxhost for {}.\n\n{TRAILER}: {uuid}\n",
        item.short()
    ));
    m
}

/// The pull (merge) request's description: the final answer, the task, and `Closes #N` (for
/// an issue) or what it builds on (for a pull request).
pub fn pull_body(answer: Option<&str>, item: &ItemRef, uuid: &str) -> String {
    let answer = answer
        .filter(|a| !a.trim().is_empty())
        .map(|a| cut(a, MAX_PULL_BODY_CHARS))
        .unwrap_or_else(|| "(the task's final answer is no longer available)".into());
    let reference = match (item.forge, item.kind) {
        (_, ItemKind::Issue) => format!("Closes #{}", item.number),
        (crate::config::SourceKind::Gitlab, ItemKind::PullRequest) => {
            format!("Builds on !{}", item.number)
        }
        (_, ItemKind::PullRequest) => format!("Builds on #{}", item.number),
    };
    format!("{answer}\n\n---\nctxhost task `{uuid}`\n\n{reference}\n")
}

/// The line of the result comment that says where the change is, from a publication whose
/// change is `opened`; `None` otherwise.
pub fn comment_line(p: &Publication, item: &ItemRef) -> Option<String> {
    if p.change_state != ChangeState::Opened {
        return None;
    }
    let commit = p
        .change_commit
        .as_deref()
        .map(|c| &c[..c.len().min(12)])
        .unwrap_or("?");
    let branch = p.change_branch.as_deref().unwrap_or("?");
    Some(match &p.change_base {
        None => format!(
            "Pushed commit `{commit}` to this {}'s branch `{branch}`.",
            {
                match item.forge {
                    crate::config::SourceKind::Github => "pull request",
                    crate::config::SourceKind::Gitlab => "merge request",
                }
            }
        ),
        Some(base) => {
            let what = match item.forge {
                crate::config::SourceKind::Github => "Pull request",
                crate::config::SourceKind::Gitlab => "Merge request",
            };
            let sep = match item.forge {
                crate::config::SourceKind::Github => '#',
                crate::config::SourceKind::Gitlab => '!',
            };
            let number = p.pr_number.map(|n| format!("{sep}{n}")).unwrap_or_default();
            match p.pr_url.as_deref() {
                Some(url) => {
                    format!(
                        "{what} {number}: {url} (branch `{branch}` onto `{base}`, commit `{commit}`)"
                    )
                }
                None => {
                    format!("{what} {number} (branch `{branch}` onto `{base}`, commit `{commit}`)")
                }
            }
        }
    })
}

/// A git command against the forge failed: as a [`ForgeError`] when git says what HTTP status
/// the forge answered (so the publishing rules apply: 403 final, 429 waited for), else a
/// network error (retried later).
fn git_forge_error(source: &Source, repo: &str, action: &str, e: &anyhow::Error) -> ForgeError {
    let text = source.forge.redact(&format!("{e:#}"));
    let status = |code: &str| {
        text.contains(&format!("returned error: {code}"))
            || text.contains(&format!("HTTP {code}"))
            || text.contains(&format!("error: {code} "))
    };
    let kind = if status("401") {
        FailureKind::Unauthorized
    } else if status("403") {
        FailureKind::Forbidden(text.clone())
    } else if status("404") {
        FailureKind::NotFound
    } else if status("429") {
        FailureKind::RateLimited(text.clone())
    } else {
        FailureKind::Network(text.clone())
    };
    ForgeError {
        forge: source.kind,
        repo: repo.to_string(),
        action: action.to_string(),
        kind,
        token_env: source.config.token_env(source.kind).to_string(),
        retry_after: None,
    }
}

/// Whether a failed push was refused by the remote for the ref (not a fast-forward, a
/// protected branch, a hook) or for want of permission: the caller may push elsewhere.
fn push_refused(e: &ForgeError) -> bool {
    match &e.kind {
        FailureKind::Forbidden(_) => true,
        FailureKind::Network(text) => {
            text.contains("[rejected]")
                || text.contains("[remote rejected]")
                || text.contains("non-fast-forward")
                || text.contains("fetch first")
                || text.contains("Updates were rejected")
        }
        _ => false,
    }
}

/// The workspace of a task: its record and a runner in its directory.
struct Workspace {
    record: WorkspaceRecord,
    git: Git,
    url: String,
}

impl<'a> Ctx<'a> {
    /// The task's workspace record, if it has one naming a repository (`None`: a comment only).
    fn record(&self, uuid: &str) -> anyhow::Result<Option<WorkspaceRecord>> {
        let Some((_, dir)) = crate::remote::view::for_reading(self.remote, self.layout, uuid)?
        else {
            return Ok(None);
        };
        let dir = TaskDir::open(&dir)
            .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", dir.display()))?;
        // A workspace that names no repository (a user's checkout without a remote) has
        // nowhere to push: the task's result is a comment, as without a workspace.
        Ok(WorkspaceRecord::read(&dir)
            .with_context(|| format!("task {uuid}"))?
            .filter(|r| r.repository.as_deref().is_some_and(|u| !u.is_empty())))
    }

    fn workspace(&self, uuid: &str, record: WorkspaceRecord) -> anyhow::Result<Workspace> {
        let path = std::path::PathBuf::from(&record.path);
        if !path.is_dir() {
            bail!(
                "the workspace of task {uuid} ({}) is not on this host; its change cannot be \
                 committed here",
                record.path
            );
        }
        let url = record
            .repository
            .as_deref()
            .and_then(without_credentials)
            .filter(|u| !u.is_empty())
            .with_context(|| {
                format!(
                    "{} of task {uuid} names no repository to push to",
                    crate::workspace::record::FILE
                )
            })?;
        Ok(Workspace {
            git: Git::new(path),
            record,
            url,
        })
    }

    fn advance(
        &self,
        uuid: &str,
        from: ChangeState,
        to: ChangeState,
        fields: ChangeFields<'_>,
    ) -> anyhow::Result<()> {
        if !self.db.advance_change(uuid, self.owner, from, to, fields)? {
            bail!(
                "lost the publishing lease of task {uuid} while recording its change as {}",
                to.as_str()
            );
        }
        Ok(())
    }

    fn renew(&self, uuid: &str) -> anyhow::Result<()> {
        if !self.db.renew_publish_lease(uuid, self.owner, self.lease)? {
            bail!("lost the publishing lease of task {uuid}");
        }
        Ok(())
    }
}

/// Whether the worktree differs from `base`: uncommitted or untracked files, or commits whose
/// tree differs from the base's.
fn differs(git: &Git, base: &str) -> anyhow::Result<bool> {
    let status = git.read(["status", "--porcelain", "--untracked-files=all"])?;
    if !status.is_empty() {
        return Ok(true);
    }
    let head = git.read(["rev-parse", "HEAD"])?;
    if head == base {
        return Ok(false);
    }
    let out = git
        .command(["diff", "--quiet", base, "HEAD", "--"])
        .output()
        .context("cannot run git diff")?;
    match out.status.code() {
        Some(0) => Ok(false),
        Some(1) => Ok(true),
        _ => bail!(
            "`git diff --quiet {base} HEAD` in {} failed: {}",
            git.dir().display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    }
}

/// The worktree's HEAD if it is the commit of task `uuid` (its `Ctxhost-Task:` trailer).
fn head_of_task(git: &Git, uuid: &str) -> anyhow::Result<Option<String>> {
    let trailers = git.read([
        "log",
        "-1",
        &format!("--format=%(trailers:key={TRAILER},valueonly)"),
    ])?;
    if trailers.lines().any(|l| l.trim() == uuid) {
        return Ok(Some(git.read(["rev-parse", "HEAD"])?));
    }
    Ok(None)
}

/// Commit everything in the worktree as `author` with `message`; returns the commit id.
fn commit(
    git: &Git,
    author: &crate::config::CommitAuthor,
    message: &str,
) -> anyhow::Result<String> {
    git.run(["add", "-A"])?;
    let name = format!("user.name={}", author.name);
    let email = format!("user.email={}", author.email);
    git.run([
        "-c",
        &name,
        "-c",
        &email,
        "-c",
        "commit.gpgsign=false",
        "commit",
        "-q",
        "--no-verify",
        // The agent may have committed its work itself: the commit with the trailer is then
        // empty, on top of its commits (what marks the step as done).
        "--allow-empty",
        "-m",
        message,
    ])?;
    git.read(["rev-parse", "HEAD"])
}

/// The commit `refs/heads/BRANCH` is at on the remote `url`, if the branch exists.
fn remote_branch(git: &Git, url: &str, branch: &str) -> anyhow::Result<Option<String>> {
    let out = git.read(["ls-remote", url, &format!("refs/heads/{branch}")])?;
    Ok(out
        .lines()
        .find_map(|l| l.split_once('\t').map(|(id, _)| id.trim().to_string())))
}

/// The remote's default branch: the `refs/heads/…` of the record's ref, else the remote's
/// `HEAD`.
fn default_branch(ws: &Workspace, git: &Git) -> anyhow::Result<String> {
    if let Some(b) = ws
        .record
        .git_ref
        .as_deref()
        .and_then(|r| r.strip_prefix("refs/heads/"))
    {
        return Ok(b.to_string());
    }
    let out = git.read(["ls-remote", "--symref", &ws.url, "HEAD"])?;
    out.lines()
        .find_map(|l| {
            l.strip_prefix("ref: refs/heads/")
                .and_then(|r| r.split('\t').next())
                .map(str::to_string)
        })
        .with_context(|| format!("the remote {} does not name its default branch", ws.url))
}

/// Bring the change of finished task `row` to the forge, from the state `leased` had when the
/// lease was taken (module docs). Returns the publication's change as it is now (for the
/// comment line), or `None` when the source does not open pull requests or the task did not
/// complete.
pub(super) fn ensure_change(
    cx: &Ctx<'_>,
    source: &Source,
    item: &ItemRef,
    row: &TaskRow,
    leased: &Publication,
    answer: Option<&str>,
) -> anyhow::Result<Option<Publication>> {
    let uuid = row.uuid.as_str();
    let mut p = leased.clone();
    let auth = Some(source.forge.git_auth());
    if p.change_state == ChangeState::None {
        if !source.config.pull_requests || row.status != crate::db::Status::Completed {
            return Ok(None);
        }
        let changed = match cx.record(uuid)? {
            None => false,
            Some(record) => {
                let ws = cx.workspace(uuid, record)?;
                differs(&ws.git, &ws.record.base_commit)?
            }
        };
        if !changed {
            cx.advance(
                uuid,
                ChangeState::None,
                ChangeState::Unchanged,
                ChangeFields::default(),
            )?;
            tracing::info!(%uuid, item = %item.short(), "the workspace holds no change: a comment only");
            p.change_state = ChangeState::Unchanged;
            return Ok(Some(p));
        }
        cx.advance(
            uuid,
            ChangeState::None,
            ChangeState::Committing,
            ChangeFields::default(),
        )?;
        p.change_state = ChangeState::Committing;
    }
    if p.change_state == ChangeState::Unchanged || p.change_state == ChangeState::Opened {
        return Ok(Some(p));
    }
    let record = cx.record(uuid)?.with_context(|| {
        format!(
            "task {uuid} has no {} any more",
            crate::workspace::record::FILE
        )
    })?;
    let ws = cx.workspace(uuid, record)?;
    let git = ws.git.with_auth(auth.clone());
    if p.change_state == ChangeState::Committing {
        let id = match head_of_task(&ws.git, uuid)? {
            Some(id) => {
                tracing::info!(%uuid, commit = %id, "found the commit an earlier attempt made");
                id
            }
            None if !differs(&ws.git, &ws.record.base_commit)? => {
                // The change is gone from the worktree (reset by hand): nothing to propose.
                cx.advance(
                    uuid,
                    ChangeState::Committing,
                    ChangeState::Unchanged,
                    ChangeFields::default(),
                )?;
                tracing::warn!(%uuid, "the workspace no longer differs from its base: a comment only");
                p.change_state = ChangeState::Unchanged;
                return Ok(Some(p));
            }
            None => {
                let title = item_title(row, item);
                let message = source
                    .forge
                    .redact(&commit_message(&title, answer, item, uuid));
                commit(&ws.git, &source.config.author, &message)?
            }
        };
        crate::failpoint::kill_if_set("publish:after-commit");
        cx.advance(
            uuid,
            ChangeState::Committing,
            ChangeState::Committed,
            ChangeFields {
                commit: Some(&id),
                ..Default::default()
            },
        )?;
        p.change_state = ChangeState::Committed;
        p.change_commit = Some(id);
    }
    let commit_id = p
        .change_commit
        .clone()
        .with_context(|| format!("the change of task {uuid} has no commit recorded"))?;
    if p.change_state == ChangeState::Committed {
        let (branch, base) = match item.kind {
            ItemKind::Issue => (
                branch_name(item, uuid),
                Some(default_branch(&ws, &git).map_err(|e| {
                    git_forge_error(source, &item.repo, "read the default branch", &e)
                })?),
            ),
            ItemKind::PullRequest => {
                let head = source.forge.pull_head(item)?;
                if head.same_repo {
                    (head.branch, None)
                } else {
                    (branch_name(item, uuid), Some(head.base))
                }
            }
        };
        cx.advance(
            uuid,
            ChangeState::Committed,
            ChangeState::Pushing,
            ChangeFields {
                branch: Some(&branch),
                base: base.as_deref(),
                ..Default::default()
            },
        )?;
        p.change_state = ChangeState::Pushing;
        p.change_branch = Some(branch);
        p.change_base = base;
    }
    if p.change_state == ChangeState::Pushing {
        let branch = p.change_branch.clone().unwrap_or_default();
        let repo = item.repo.as_str();
        let at = remote_branch(&git, &ws.url, &branch)
            .map_err(|e| git_forge_error(source, repo, &format!("read branch {branch:?}"), &e))?;
        if at.as_deref() != Some(commit_id.as_str()) {
            cx.renew(uuid)?;
            let push = |branch: &str| {
                git.run([
                    "push",
                    "--porcelain",
                    "--no-verify",
                    &ws.url,
                    &format!("{commit_id}:refs/heads/{branch}"),
                ])
                .map(|_| ())
                .map_err(|e| git_forge_error(source, repo, &format!("push branch {branch:?}"), &e))
            };
            match push(&branch) {
                Ok(()) => {}
                // Onto a pull request's own head: refused, so onto a branch of ours with a
                // request against that head instead.
                Err(e) if p.change_base.is_none() && push_refused(&e) => {
                    tracing::warn!(%uuid, item = %item.short(), "cannot push onto the head branch {branch:?} ({e}); opening a pull request onto it instead");
                    let own = branch_name(item, uuid);
                    cx.advance(
                        uuid,
                        ChangeState::Pushing,
                        ChangeState::Pushing,
                        ChangeFields {
                            branch: Some(&own),
                            base: Some(&branch),
                            ..Default::default()
                        },
                    )?;
                    p.change_base = Some(branch.clone());
                    p.change_branch = Some(own.clone());
                    if remote_branch(&git, &ws.url, &own)
                        .map_err(|e| {
                            git_forge_error(source, repo, &format!("read branch {own:?}"), &e)
                        })?
                        .as_deref()
                        != Some(commit_id.as_str())
                    {
                        push(&own)?;
                    }
                }
                Err(e) => return Err(e.into()),
            }
        } else {
            tracing::info!(%uuid, %branch, "the branch is already at the commit: pushed by an earlier attempt");
        }
        crate::failpoint::kill_if_set("publish:after-push");
        cx.advance(
            uuid,
            ChangeState::Pushing,
            ChangeState::Pushed,
            ChangeFields::default(),
        )?;
        p.change_state = ChangeState::Pushed;
    }
    if p.change_state == ChangeState::Pushed {
        if p.change_base.is_none() {
            // Onto the pull request itself: it carries the change.
            let number = i64::try_from(item.number).unwrap_or(i64::MAX);
            cx.advance(
                uuid,
                ChangeState::Pushed,
                ChangeState::Opened,
                ChangeFields {
                    pr_number: Some(number),
                    pr_url: p.item_url.as_deref(),
                    ..Default::default()
                },
            )?;
            p.change_state = ChangeState::Opened;
            p.pr_number = Some(number);
            p.pr_url = p.item_url.clone();
            return Ok(Some(p));
        }
        cx.advance(
            uuid,
            ChangeState::Pushed,
            ChangeState::Opening,
            ChangeFields::default(),
        )?;
        p.change_state = ChangeState::Opening;
    }
    if p.change_state == ChangeState::Opening {
        let branch = p.change_branch.clone().unwrap_or_default();
        let base = p.change_base.clone().unwrap_or_default();
        let found = match source.forge.find_pull(&item.repo, &branch)? {
            Some(found) => {
                tracing::info!(%uuid, number = found.number, "found the pull request an earlier attempt opened");
                found
            }
            None => {
                let title = item_title(row, item);
                let body = source.forge.redact(&pull_body(answer, item, uuid));
                cx.renew(uuid)?;
                let opened = source.forge.open_pull(
                    &item.repo,
                    &NewPull {
                        title: &title,
                        head: &branch,
                        base: &base,
                        body: &body,
                    },
                );
                match opened {
                    Ok(o) => o,
                    // A duplicate head (422 / 409), or an answer lost: the forge may have it.
                    Err(e) => match source.forge.find_pull(&item.repo, &branch) {
                        Ok(Some(found)) => found,
                        _ => return Err(e.into()),
                    },
                }
            }
        };
        crate::failpoint::kill_if_set("publish:after-pr");
        let number = i64::try_from(found.number).unwrap_or(i64::MAX);
        cx.advance(
            uuid,
            ChangeState::Opening,
            ChangeState::Opened,
            ChangeFields {
                pr_number: Some(number),
                pr_url: found.url.as_deref(),
                ..Default::default()
            },
        )?;
        p.change_state = ChangeState::Opened;
        p.pr_number = Some(number);
        p.pr_url = found.url.filter(|u| crate::db::sources::is_web_url(u));
        tracing::info!(%uuid, item = %item.short(), number, "pull request opened");
    }
    Ok(Some(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SourceKind;

    fn issue(n: u64) -> ItemRef {
        ItemRef {
            forge: SourceKind::Github,
            repo: "acme/app".into(),
            kind: ItemKind::Issue,
            number: n,
        }
    }

    #[test]
    fn git_failures_are_forge_errors_by_the_status_git_reports() {
        let config = crate::config::SourcesConfig {
            github: Some(crate::config::SourceConfig {
                repos: vec!["acme/app".into()],
                token_env: Some("CTXHOST_UNIT_TOKEN_CHANGE".into()),
                ..Default::default()
            }),
            gitlab: None,
        };
        // SAFETY: a variable only this test reads.
        unsafe { std::env::set_var("CTXHOST_UNIT_TOKEN_CHANGE", "tok-unit-secret") };
        let sources = super::super::Sources::connect(&config).unwrap();
        let source = sources.iter().next().unwrap();
        let e = |text: &str| {
            git_forge_error(
                source,
                "acme/app",
                "push branch \"x\"",
                &anyhow::anyhow!("{text}"),
            )
        };
        let forbidden = e(
            "fatal: unable to access 'http://h/acme/app.git/': The requested URL returned error: 403 tok-unit-secret",
        );
        assert!(forbidden.is_final() && push_refused(&forbidden));
        assert!(
            !forbidden.to_string().contains("tok-unit-secret"),
            "{forbidden}"
        );
        assert!(e("The requested URL returned error: 429").is_rate_limit());
        assert_eq!(
            e("The requested URL returned error: 401").kind,
            FailureKind::Unauthorized
        );
        let behind = e(" ! [rejected]        abc -> feature-2 (non-fast-forward)");
        assert!(!behind.is_final() && push_refused(&behind));
        let down = e("fatal: unable to access: Failed to connect to 127.0.0.1 port 9");
        assert!(!down.is_final() && !push_refused(&down) && !down.is_rate_limit());
    }

    #[test]
    fn names_messages_and_bodies() {
        let uuid = "0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b";
        assert_eq!(branch_name(&issue(7), uuid), "ctxhost/issue-7-0193a4b2");
        let mut pr = issue(9);
        pr.kind = ItemKind::PullRequest;
        assert_eq!(branch_name(&pr, uuid), "ctxhost/pr-9-0193a4b2");
        let m = commit_message("Fix login", Some("Raised the timeout."), &issue(7), uuid);
        assert!(m.starts_with("Fix login\n\nRaised the timeout.\n\n"), "{m}");
        assert!(m.ends_with(&format!("\n\nCtxhost-Task: {uuid}\n")), "{m}");
        let b = pull_body(Some("Done."), &issue(7), uuid);
        assert!(
            b.starts_with("Done.\n") && b.contains(uuid) && b.ends_with("Closes #7\n"),
            "{b}"
        );
        let mut row = crate::db::testing::task_row(uuid);
        row.prompt = "GitHub issue acme/app#7: Login times out\n\nbody".into();
        assert_eq!(item_title(&row, &issue(7)), "Login times out");
    }
}
