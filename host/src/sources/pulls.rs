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
//!
//! The calls themselves are [`super::github_pulls`] and [`super::gitlab_pulls`]; this module
//! holds what both return.

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
