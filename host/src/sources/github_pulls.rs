//! GitHub's pull requests ([`super::pulls`]): the head of one, the one with a head branch, a
//! new one.

use serde::Deserialize;
use serde_json::json;

use super::ItemRef;
use super::github::GitHub;
use super::http::{Action, FailureKind, ForgeError, Repeat, encode};
use super::pulls::{NewPull, PullHead, PullRef};

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
