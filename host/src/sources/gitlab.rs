//! [`GitLab`]: the GitLab REST API (v4) calls a source makes, typed. A project is addressed by
//! its URL-encoded path (`group%2Fproject`); items by their `iid`.
//!
//! | call | endpoint |
//! |---|---|
//! | labelled open issues | `GET /projects/{id}/issues?state=opened&labels=L&per_page=100` |
//! | labelled open merge requests | `GET /projects/{id}/merge_requests?state=opened&labels=L&per_page=100` |
//! | the discussion | `GET /projects/{id}/{issues,merge_requests}/{iid}/notes?sort=asc&order_by=created_at&per_page=100` (system notes skipped) |
//! | post the result | `POST /projects/{id}/{issues,merge_requests}/{iid}/notes` `{"body"}` |
//! | current labels | `GET /projects/{id}/{issues,merge_requests}/{iid}` |
//! | the workspace's clone URL and default branch (`workspace: true`) | `GET /projects/{id}` (`http_url_to_repo`, `default_branch`) |
//! | move labels | `PUT /projects/{id}/{issues,merge_requests}/{iid}` `{"add_labels", "remove_labels"}` (one call) |
//!
//! Token: a project (or personal) access token with the `api` scope and at least the Reporter
//! role (Developer to label merge requests).

use serde::Deserialize;
use serde_json::json;

use super::http::{Action, FailureKind, ForgeError, Repeat, RestClient, encode};
use super::{Comment, Forge, Item, ItemKind, ItemRef, Posted};
use crate::config::SourceKind;

/// A GitLab client for one token.
#[derive(Debug)]
pub struct GitLab {
    pub(super) client: RestClient,
    /// The web root (`https://gitlab.com`), for note URLs.
    web_base: String,
}

#[derive(Deserialize)]
struct Author {
    username: String,
}

#[derive(Deserialize)]
struct GlItem {
    iid: u64,
    title: String,
    description: Option<String>,
    web_url: Option<String>,
    author: Option<Author>,
    #[serde(default)]
    labels: Vec<String>,
    user_notes_count: Option<u64>,
    source_branch: Option<String>,
    target_branch: Option<String>,
    #[serde(default)]
    created_at: String,
}

#[derive(Deserialize)]
struct Project {
    http_url_to_repo: String,
    default_branch: Option<String>,
}

#[derive(Deserialize)]
struct Note {
    id: u64,
    body: Option<String>,
    author: Option<Author>,
    #[serde(default)]
    created_at: String,
    #[serde(default)]
    system: bool,
}

fn username(a: Option<Author>) -> String {
    a.map(|a| a.username).unwrap_or_else(|| "ghost".into())
}

/// `issues` / `merge_requests`.
fn collection(kind: ItemKind) -> &'static str {
    match kind {
        ItemKind::Issue => "issues",
        ItemKind::PullRequest => "merge_requests",
    }
}

impl GitLab {
    /// A client over `client` (made for [`SourceKind::Gitlab`]) whose API root is `api_url`.
    pub fn new(client: RestClient, api_url: &str) -> GitLab {
        let web_base = api_url
            .trim_end_matches('/')
            .trim_end_matches("/api/v4")
            .to_string();
        GitLab { client, web_base }
    }

    fn item_path(&self, item: &ItemRef) -> String {
        format!(
            "/projects/{}/{}/{}",
            encode(&item.repo),
            collection(item.kind),
            item.number
        )
    }

    fn list(&self, repo: &str, kind: ItemKind, label: &str) -> Result<Vec<Item>, ForgeError> {
        let action = Action {
            repo,
            what: format!(
                "list open {} labelled {label:?}",
                match kind {
                    ItemKind::Issue => "issues",
                    ItemKind::PullRequest => "merge requests",
                }
            ),
        };
        let items: Vec<GlItem> = self.client.get_all(
            &format!(
                "/projects/{}/{}?state=opened&labels={}&order_by=created_at&sort=asc&per_page=100",
                encode(repo),
                collection(kind),
                encode(label)
            ),
            &action,
        )?;
        Ok(items
            .into_iter()
            .map(|i| Item {
                r: ItemRef {
                    forge: SourceKind::Gitlab,
                    repo: repo.to_string(),
                    kind,
                    number: i.iid,
                },
                title: i.title,
                body: i.description.unwrap_or_default(),
                url: i.web_url,
                author: username(i.author),
                labels: i.labels,
                comment_count: i.user_notes_count,
                branches: i.source_branch.zip(i.target_branch),
                created_at: i.created_at,
            })
            .collect())
    }
}

impl Forge for GitLab {
    fn kind(&self) -> SourceKind {
        SourceKind::Gitlab
    }

    fn repository(&self, repo: &str) -> Result<super::RepoInfo, ForgeError> {
        let action = Action {
            repo,
            what: "read the project".into(),
        };
        let p: Project = self
            .client
            .get(&format!("/projects/{}", encode(repo)), &action)?;
        Ok(super::RepoInfo {
            clone_url: p.http_url_to_repo,
            // An empty project has no default branch yet; GitLab's own default is main.
            default_branch: p.default_branch.unwrap_or_else(|| "main".into()),
        })
    }

    fn labelled_items(&self, repo: &str, label: &str) -> Result<Vec<Item>, ForgeError> {
        let mut items = self.list(repo, ItemKind::Issue, label)?;
        items.extend(self.list(repo, ItemKind::PullRequest, label)?);
        Ok(items)
    }

    fn complete_item(&self, _item: &mut Item) -> Result<(), ForgeError> {
        // The listing already has the merge request's branches.
        Ok(())
    }

    fn comments(&self, item: &ItemRef) -> Result<Vec<Comment>, ForgeError> {
        let action = Action {
            repo: &item.repo,
            what: format!("read the notes of {}", item.short()),
        };
        let notes: Vec<Note> = self.client.get_all(
            &format!(
                "{}/notes?sort=asc&order_by=created_at&per_page=100",
                self.item_path(item)
            ),
            &action,
        )?;
        let page_url = self.web_url(item);
        Ok(notes
            .into_iter()
            .filter(|n| !n.system)
            .map(|n| Comment {
                id: n.id.to_string(),
                author: username(n.author),
                body: n.body.unwrap_or_default(),
                created_at: n.created_at,
                url: Some(format!("{page_url}#note_{}", n.id)),
            })
            .collect())
    }

    fn labels(&self, item: &ItemRef) -> Result<Vec<String>, ForgeError> {
        let action = Action {
            repo: &item.repo,
            what: format!("read the labels of {}", item.short()),
        };
        let it: GlItem = self.client.get(&self.item_path(item), &action)?;
        Ok(it.labels)
    }

    fn post_comment(&self, item: &ItemRef, body: &str) -> Result<Posted, ForgeError> {
        let action = Action {
            repo: &item.repo,
            what: format!("comment on {}", item.short()),
        };
        let note: Option<Note> = self.client.send(
            "POST",
            &format!("{}/notes", self.item_path(item)),
            &json!({ "body": body }),
            Repeat::Once,
            &action,
        )?;
        let note = note.ok_or_else(|| {
            self.client.error(
                &action,
                FailureKind::BadResponse("empty answer to a new note".into()),
            )
        })?;
        Ok(Posted {
            id: note.id.to_string(),
            url: Some(format!("{}#note_{}", self.web_url(item), note.id)),
        })
    }

    fn move_labels(
        &self,
        item: &ItemRef,
        _current: Option<&[String]>,
        add: &str,
        remove: &[&str],
    ) -> Result<(), ForgeError> {
        let action = Action {
            repo: &item.repo,
            what: format!("move the labels of {} to {add:?}", item.short()),
        };
        let _: Option<serde_json::Value> = self.client.send(
            "PUT",
            &self.item_path(item),
            &json!({ "add_labels": add, "remove_labels": remove.join(",") }),
            Repeat::Safe,
            &action,
        )?;
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
        self.client.git_auth(SourceKind::Gitlab.git_user())
    }
}

impl GitLab {
    /// The item's web page.
    fn web_url(&self, item: &ItemRef) -> String {
        format!(
            "{}/{}/-/{}/{}",
            self.web_base,
            item.repo,
            collection(item.kind),
            item.number
        )
    }
}
