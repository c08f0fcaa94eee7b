//! [`GitHub`]: the GitHub REST API (v3, `2022-11-28`) calls a source makes, typed.
//!
//! | call | endpoint |
//! |---|---|
//! | labelled open issues and pull requests | `GET /repos/{owner}/{repo}/issues?state=open&labels=L&per_page=100` (pull requests carry a `pull_request` field) |
//! | a pull request's branches | `GET /repos/{owner}/{repo}/pulls/{n}` |
//! | the discussion | `GET /repos/{owner}/{repo}/issues/{n}/comments?per_page=100` |
//! | post the result | `POST /repos/{owner}/{repo}/issues/{n}/comments` `{"body"}` |
//! | current labels | `GET /repos/{owner}/{repo}/issues/{n}` |
//! | the workspace's clone URL and default branch (`workspace: true`) | `GET /repos/{owner}/{repo}` (`clone_url`, `default_branch`) |
//! | add / remove a label | `POST …/issues/{n}/labels` `{"labels": [..]}` / `DELETE …/issues/{n}/labels/{name}` |
//!
//! Token scopes: a fine-grained token with *Issues: read and write* and *Pull requests: read
//! and write* on the repositories (a classic token: `repo`, or `public_repo` for public ones).

use serde::Deserialize;
use serde_json::json;

use super::http::{Action, FailureKind, ForgeError, Repeat, RestClient, encode};
use super::{Comment, Forge, Item, ItemKind, ItemRef, Posted};
use crate::config::SourceKind;

/// A GitHub (or GitHub Enterprise) client for one token.
#[derive(Debug)]
pub struct GitHub {
    pub(super) client: RestClient,
}

#[derive(Deserialize)]
struct User {
    login: String,
}

#[derive(Deserialize)]
struct Label {
    name: String,
}

#[derive(Deserialize)]
struct Issue {
    number: u64,
    title: String,
    body: Option<String>,
    html_url: Option<String>,
    user: Option<User>,
    #[serde(default)]
    labels: Vec<Label>,
    comments: Option<u64>,
    pull_request: Option<serde_json::Value>,
    #[serde(default)]
    created_at: String,
}

#[derive(Deserialize)]
struct BranchRef {
    #[serde(rename = "ref")]
    name: String,
}

#[derive(Deserialize)]
struct Pull {
    head: BranchRef,
    base: BranchRef,
}

#[derive(Deserialize)]
struct Repository {
    clone_url: String,
    default_branch: String,
}

#[derive(Deserialize)]
struct IssueComment {
    id: u64,
    user: Option<User>,
    body: Option<String>,
    #[serde(default)]
    created_at: String,
    html_url: Option<String>,
}

impl GitHub {
    /// A client over `client` (made for [`SourceKind::Github`]).
    pub fn new(client: RestClient) -> GitHub {
        GitHub { client }
    }

    fn action<'a>(&self, repo: &'a str, what: String) -> Action<'a> {
        Action { repo, what }
    }
}

fn login(u: Option<User>) -> String {
    u.map(|u| u.login).unwrap_or_else(|| "ghost".into())
}

impl Forge for GitHub {
    fn kind(&self) -> SourceKind {
        SourceKind::Github
    }

    fn repository(&self, repo: &str) -> Result<super::RepoInfo, ForgeError> {
        let action = self.action(repo, "read the repository".into());
        let r: Repository = self.client.get(&format!("/repos/{repo}"), &action)?;
        Ok(super::RepoInfo {
            clone_url: r.clone_url,
            default_branch: r.default_branch,
        })
    }

    fn labelled_items(&self, repo: &str, label: &str) -> Result<Vec<Item>, ForgeError> {
        let action = self.action(
            repo,
            format!("list open issues and pull requests labelled {label:?}"),
        );
        let issues: Vec<Issue> = self.client.get_all(
            &format!(
                "/repos/{repo}/issues?state=open&labels={}&sort=created&direction=asc&per_page=100",
                encode(label)
            ),
            &action,
        )?;
        Ok(issues
            .into_iter()
            .map(|i| Item {
                r: ItemRef {
                    forge: SourceKind::Github,
                    repo: repo.to_string(),
                    kind: if i.pull_request.is_some() {
                        ItemKind::PullRequest
                    } else {
                        ItemKind::Issue
                    },
                    number: i.number,
                },
                title: i.title,
                body: i.body.unwrap_or_default(),
                url: i.html_url,
                author: login(i.user),
                labels: i.labels.into_iter().map(|l| l.name).collect(),
                comment_count: i.comments,
                branches: None,
                created_at: i.created_at,
            })
            .collect())
    }

    fn complete_item(&self, item: &mut Item) -> Result<(), ForgeError> {
        if item.r.kind != ItemKind::PullRequest {
            return Ok(());
        }
        let action = self.action(
            &item.r.repo,
            format!("read pull request #{}", item.r.number),
        );
        let pull: Pull = self.client.get(
            &format!("/repos/{}/pulls/{}", item.r.repo, item.r.number),
            &action,
        )?;
        item.branches = Some((pull.head.name, pull.base.name));
        Ok(())
    }

    fn comments(&self, item: &ItemRef) -> Result<Vec<Comment>, ForgeError> {
        let action = self.action(&item.repo, format!("read the comments of #{}", item.number));
        let comments: Vec<IssueComment> = self.client.get_all(
            &format!(
                "/repos/{}/issues/{}/comments?per_page=100",
                item.repo, item.number
            ),
            &action,
        )?;
        Ok(comments
            .into_iter()
            .map(|c| Comment {
                id: c.id.to_string(),
                author: login(c.user),
                body: c.body.unwrap_or_default(),
                created_at: c.created_at,
                url: c.html_url,
            })
            .collect())
    }

    fn labels(&self, item: &ItemRef) -> Result<Vec<String>, ForgeError> {
        let action = self.action(&item.repo, format!("read the labels of #{}", item.number));
        let issue: Issue = self.client.get(
            &format!("/repos/{}/issues/{}", item.repo, item.number),
            &action,
        )?;
        Ok(issue.labels.into_iter().map(|l| l.name).collect())
    }

    fn post_comment(&self, item: &ItemRef, body: &str) -> Result<Posted, ForgeError> {
        let action = self.action(&item.repo, format!("comment on #{}", item.number));
        let posted: Option<IssueComment> = self.client.send(
            "POST",
            &format!("/repos/{}/issues/{}/comments", item.repo, item.number),
            &json!({ "body": body }),
            Repeat::Once,
            &action,
        )?;
        let posted = posted.ok_or_else(|| {
            self.client.error(
                &action,
                FailureKind::BadResponse("empty answer to a new comment".into()),
            )
        })?;
        Ok(Posted {
            id: posted.id.to_string(),
            url: posted.html_url,
        })
    }

    fn move_labels(
        &self,
        item: &ItemRef,
        current: Option<&[String]>,
        add: &str,
        remove: &[&str],
    ) -> Result<(), ForgeError> {
        let current = match current {
            Some(c) => c.to_vec(),
            None => self.labels(item)?,
        };
        let has = |l: &str| current.iter().any(|c| c == l);
        if !has(add) {
            let action = self.action(&item.repo, format!("add label {add:?} to #{}", item.number));
            let _: Option<serde_json::Value> = self.client.send(
                "POST",
                &format!("/repos/{}/issues/{}/labels", item.repo, item.number),
                &json!({ "labels": [add] }),
                Repeat::Safe,
                &action,
            )?;
        }
        for r in remove.iter().filter(|r| has(r)) {
            let action = self.action(
                &item.repo,
                format!("remove label {r:?} from #{}", item.number),
            );
            self.client.delete(
                &format!(
                    "/repos/{}/issues/{}/labels/{}",
                    item.repo,
                    item.number,
                    encode(r)
                ),
                &action,
            )?;
        }
        Ok(())
    }

    fn redact(&self, text: &str) -> String {
        self.client.redact(text)
    }

    fn pull_head(&self, item: &ItemRef) -> Result<super::pulls::PullHead, ForgeError> {
        self.pull_head_of(item)
    }

    fn find_pull(
        &self,
        repo: &str,
        branch: &str,
    ) -> Result<Option<super::pulls::PullRef>, ForgeError> {
        self.find_pull_of(repo, branch)
    }

    fn open_pull(
        &self,
        repo: &str,
        pull: &super::pulls::NewPull<'_>,
    ) -> Result<super::pulls::PullRef, ForgeError> {
        self.open_pull_of(repo, pull)
    }

    fn git_auth(&self) -> crate::workspace::git::Auth {
        self.client.git_auth(SourceKind::Github.git_user())
    }
}
