//! Pull requests (GitHub) and merge requests (GitLab): the calls that turn a task's change into
//! a reviewable request ([`super::publish`], `pull_requests: true`).
//!
//! | call | GitHub | GitLab |
//! |---|---|---|
//! | a pull request's head | `GET /repos/{o}/{r}/pulls/{n}` (`head.ref`, `head.repo.full_name`, `base.repo.full_name`) | `GET /projects/{id}/merge_requests/{iid}` (`source_branch`, `source_project_id`, `target_project_id`) |
//! | the request with a head branch | `GET /repos/{o}/{r}/pulls?head={o}:{branch}&state=all` | `GET /projects/{id}/merge_requests?source_branch={branch}&state=all` |
//! | open one | `POST /repos/{o}/{r}/pulls` `{"title","head","base","body"}` | `POST /projects/{id}/merge_requests` `{"source_branch","target_branch","title","description"}` |
//!
//! Opening is a write that would happen twice ([`Repeat::Once`]): after a failure whose outcome
//! is unknown the publisher looks for the request by its head branch before opening again.
//! Token scopes: GitHub *Contents: read and write* and *Pull requests: read and write*; GitLab
//! `api` and `write_repository` with the Developer role.

use serde::Deserialize;
use serde_json::json;

use super::ItemRef;
use super::github::GitHub;
use super::gitlab::GitLab;
use super::http::{Action, FailureKind, ForgeError, Repeat, encode};

/// Where a pull (merge) request's commits come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullHead {
    /// Its head (source) branch, without `refs/heads/`.
    pub branch: String,
    /// Whether that branch is in the item's own repository (not a fork): only then can the
    /// token push to it.
    pub same_repo: bool,
    /// Its base (target) branch.
    pub base: String,
}

/// A pull (merge) request as the forge lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRef {
    /// Its number (GitLab: `iid`).
    pub number: u64,
    /// Its web page.
    pub url: Option<String>,
    /// Whether it is open (not closed or merged).
    pub open: bool,
}

/// A pull (merge) request to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPull<'a> {
    /// Title.
    pub title: &'a str,
    /// Head (source) branch, in the same repository.
    pub head: &'a str,
    /// Base (target) branch.
    pub base: &'a str,
    /// Markdown description.
    pub body: &'a str,
}

#[derive(Deserialize)]
struct GhRepo {
    full_name: String,
}

#[derive(Deserialize)]
struct GhBranch {
    #[serde(rename = "ref")]
    name: String,
    repo: Option<GhRepo>,
}

#[derive(Deserialize)]
struct GhPull {
    number: u64,
    html_url: Option<String>,
    #[serde(default)]
    state: String,
    head: GhBranch,
    base: GhBranch,
}

impl GitHub {
    /// `GET /repos/{repo}/pulls/{n}`: the head branch of pull request `item`.
    pub(super) fn pull_head_of(&self, item: &ItemRef) -> Result<PullHead, ForgeError> {
        let action = Action {
            repo: &item.repo,
            what: format!("read pull request #{}", item.number),
        };
        let pull: GhPull = self.client.get(
            &format!("/repos/{}/pulls/{}", item.repo, item.number),
            &action,
        )?;
        let same_repo = match (&pull.head.repo, &pull.base.repo) {
            (Some(h), Some(b)) => h.full_name.eq_ignore_ascii_case(&b.full_name),
            _ => false,
        };
        Ok(PullHead {
            branch: pull.head.name,
            same_repo,
            base: pull.base.name,
        })
    }

    /// `GET /repos/{repo}/pulls?head={owner}:{branch}&state=all`: the pull request (open,
    /// closed or merged) whose head is `branch` of `repo`, if any (the newest when several).
    pub(super) fn find_pull_of(
        &self,
        repo: &str,
        branch: &str,
    ) -> Result<Option<PullRef>, ForgeError> {
        let owner = repo.split('/').next().unwrap_or(repo);
        let action = Action {
            repo,
            what: format!("look for a pull request from branch {branch:?}"),
        };
        let pulls: Vec<GhPull> = self.client.get_all(
            &format!(
                "/repos/{repo}/pulls?head={}&state=all&per_page=100",
                encode(&format!("{owner}:{branch}"))
            ),
            &action,
        )?;
        Ok(pulls
            .into_iter()
            .filter(|p| p.head.name == branch)
            .max_by_key(|p| p.number)
            .map(|p| PullRef {
                number: p.number,
                url: p.html_url,
                open: p.state == "open",
            }))
    }

    /// `POST /repos/{repo}/pulls`.
    pub(super) fn open_pull_of(
        &self,
        repo: &str,
        pull: &NewPull<'_>,
    ) -> Result<PullRef, ForgeError> {
        let action = Action {
            repo,
            what: format!(
                "open a pull request from {:?} onto {:?}",
                pull.head, pull.base
            ),
        };
        let made: Option<GhPull> = self.client.send(
            "POST",
            &format!("/repos/{repo}/pulls"),
            &json!({"title": pull.title, "head": pull.head, "base": pull.base, "body": pull.body}),
            Repeat::Once,
            &action,
        )?;
        let made = made.ok_or_else(|| {
            self.client.error(
                &action,
                FailureKind::BadResponse("empty answer to a new pull request".into()),
            )
        })?;
        Ok(PullRef {
            number: made.number,
            url: made.html_url,
            open: true,
        })
    }
}

#[derive(Deserialize)]
struct GlMr {
    iid: u64,
    web_url: Option<String>,
    #[serde(default)]
    state: String,
    source_branch: String,
    #[serde(default)]
    target_branch: String,
    source_project_id: Option<u64>,
    target_project_id: Option<u64>,
}

impl GitLab {
    /// `GET /projects/{id}/merge_requests/{iid}`: the source branch of merge request `item`.
    pub(super) fn pull_head_of(&self, item: &ItemRef) -> Result<PullHead, ForgeError> {
        let action = Action {
            repo: &item.repo,
            what: format!("read merge request {}", item.short()),
        };
        let mr: GlMr = self.client.get(
            &format!(
                "/projects/{}/merge_requests/{}",
                encode(&item.repo),
                item.number
            ),
            &action,
        )?;
        Ok(PullHead {
            branch: mr.source_branch,
            same_repo: mr.source_project_id.is_some()
                && mr.source_project_id == mr.target_project_id,
            base: mr.target_branch,
        })
    }

    /// `GET /projects/{id}/merge_requests?source_branch={branch}&state=all`.
    pub(super) fn find_pull_of(
        &self,
        repo: &str,
        branch: &str,
    ) -> Result<Option<PullRef>, ForgeError> {
        let action = Action {
            repo,
            what: format!("look for a merge request from branch {branch:?}"),
        };
        let mrs: Vec<GlMr> = self.client.get_all(
            &format!(
                "/projects/{}/merge_requests?source_branch={}&state=all&per_page=100",
                encode(repo),
                encode(branch)
            ),
            &action,
        )?;
        Ok(mrs
            .into_iter()
            .filter(|m| m.source_branch == branch)
            .max_by_key(|m| m.iid)
            .map(|m| PullRef {
                number: m.iid,
                url: m.web_url,
                open: m.state == "opened",
            }))
    }

    /// `POST /projects/{id}/merge_requests`.
    pub(super) fn open_pull_of(
        &self,
        repo: &str,
        pull: &NewPull<'_>,
    ) -> Result<PullRef, ForgeError> {
        let action = Action {
            repo,
            what: format!(
                "open a merge request from {:?} onto {:?}",
                pull.head, pull.base
            ),
        };
        let made: Option<GlMr> = self.client.send(
            "POST",
            &format!("/projects/{}/merge_requests", encode(repo)),
            &json!({"source_branch": pull.head, "target_branch": pull.base,
                    "title": pull.title, "description": pull.body}),
            Repeat::Once,
            &action,
        )?;
        let made = made.ok_or_else(|| {
            self.client.error(
                &action,
                FailureKind::BadResponse("empty answer to a new merge request".into()),
            )
        })?;
        Ok(PullRef {
            number: made.iid,
            url: made.web_url,
            open: true,
        })
    }
}
