//! GitLab's merge requests ([`super::pulls`]): the source branch of one, the one with a source
//! branch, a new one.

use serde::Deserialize;
use serde_json::json;

use super::ItemRef;
use super::gitlab::GitLab;
use super::http::{Action, FailureKind, ForgeError, Repeat, encode};
use super::pulls::{NewPull, PullHead, PullRef};

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
