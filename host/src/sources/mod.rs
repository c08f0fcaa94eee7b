//! Task sources: GitHub and GitLab issues and pull/merge requests become tasks, and their
//! results go back to them.
//!
//! - [`poll`]: open items carrying the configured label become queued tasks (prompt from
//!   [`prompt`], the task key filled in), one per item ([`crate::db::sources`]).
//! - [`publish`]: what a task's status means on its item — labels ([`labels`], one table)
//!   and, once it ends, one comment with the answer or the error — published exactly once.
//! - [`schedule`]: `ctxhost poll --once` (one pass) and the background loop of `ctxhost run`
//!   and `ctxhost poll` (publish continuously, poll every `poll_interval_secs`).
//! - the forges behind one trait, [`Forge`]: [`github::GitHub`], [`gitlab::GitLab`], typed
//!   clients on a shared REST layer ([`http::RestClient`]: token header, rate limits,
//!   retries, pagination).
//!
//! Tokens come from the environment (`token_env`), are read once when the sources are made
//! ([`Sources::connect`]), and are only ever sent in a request header: never written to
//! `contexts/`, the task store or a log; task processes do not inherit them.

pub mod change;
pub mod github;
mod github_pulls;
pub mod gitlab;
mod gitlab_pulls;
pub mod http;
pub mod labels;
pub mod poll;
pub mod prompt;
pub mod publish;
pub mod pulls;
pub mod schedule;
pub mod workspace;

use serde::Serialize;

use crate::config::{SourceConfig, SourceKind, SourcesConfig};
use crate::db::{TaskKey, TaskRow};
use crate::error::usage;
pub use http::{ForgeError, RetryPolicy};

/// An issue or a pull (GitHub) / merge (GitLab) request: the task key's `task_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    /// `issue`.
    Issue,
    /// `pull_request` (a GitLab merge request too).
    PullRequest,
}

impl ItemKind {
    /// `issue` / `pull_request`.
    pub fn as_str(self) -> &'static str {
        match self {
            ItemKind::Issue => "issue",
            ItemKind::PullRequest => "pull_request",
        }
    }
}

/// Where an item is: forge, repository, kind and number (GitLab: `iid`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ItemRef {
    /// The forge.
    pub forge: SourceKind,
    /// `owner/name` (GitLab: `group[/subgroup]/project`).
    pub repo: String,
    /// Issue or pull/merge request.
    pub kind: ItemKind,
    /// Its number in the repository.
    pub number: u64,
}

impl ItemRef {
    /// The task key: `task_source` github|gitlab, `owner` (everything before the last `/`),
    /// `repo` (the last segment), `task_type` issue|pull_request, `task_id` the number.
    pub fn task_key(&self) -> TaskKey {
        let (owner, repo) = self.repo.rsplit_once('/').unwrap_or(("", &self.repo));
        TaskKey {
            task_source: self.forge.as_str().to_string(),
            owner: Some(owner.to_string()),
            repo: Some(repo.to_string()),
            task_type: Some(self.kind.as_str().to_string()),
            task_id: Some(self.number.to_string()),
        }
    }

    /// The item a task row's key names, if it is a GitHub / GitLab key.
    pub fn from_task(row: &TaskRow) -> Option<ItemRef> {
        let forge = SourceKind::from_task_source(&row.task_source)?;
        let kind = match row.task_type.as_deref()? {
            "issue" => ItemKind::Issue,
            "pull_request" => ItemKind::PullRequest,
            _ => return None,
        };
        Some(ItemRef {
            forge,
            repo: format!("{}/{}", row.owner.as_deref()?, row.repo.as_deref()?),
            kind,
            number: row.task_id.as_deref()?.parse().ok()?,
        })
    }

    /// `acme/app#42` (GitLab merge requests: `group/project!7`).
    pub fn short(&self) -> String {
        let sep = match (self.forge, self.kind) {
            (SourceKind::Gitlab, ItemKind::PullRequest) => '!',
            _ => '#',
        };
        format!("{}{sep}{}", self.repo, self.number)
    }

    /// `GitHub issue`, `GitHub pull request`, `GitLab issue`, `GitLab merge request`.
    pub fn describe_kind(&self) -> String {
        let kind = match (self.forge, self.kind) {
            (_, ItemKind::Issue) => "issue",
            (SourceKind::Github, ItemKind::PullRequest) => "pull request",
            (SourceKind::Gitlab, ItemKind::PullRequest) => "merge request",
        };
        format!("{} {kind}", self.forge.display_name())
    }
}

/// An open item as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// Where it is.
    pub r: ItemRef,
    /// Title.
    pub title: String,
    /// Description (may be empty).
    pub body: String,
    /// Web page.
    pub url: Option<String>,
    /// Who opened it (login).
    pub author: String,
    /// Its labels now.
    pub labels: Vec<String>,
    /// Comments (GitLab: user notes), when the listing says; 0 spares reading them.
    pub comment_count: Option<u64>,
    /// A pull/merge request's (head, base) branches.
    pub branches: Option<(String, String)>,
    /// When it was opened (as the forge writes it).
    pub created_at: String,
}

/// A comment (GitLab: a note that is not a system note).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    /// The forge's id.
    pub id: String,
    /// Who wrote it (login).
    pub author: String,
    /// Markdown text.
    pub body: String,
    /// When (as the forge writes it).
    pub created_at: String,
    /// Web URL.
    pub url: Option<String>,
}

/// What a task's workspace is cloned from: the repository's clone URL and default branch, as
/// the forge's API gives them (GitHub `GET /repos/{o}/{r}`: `clone_url`, `default_branch`;
/// GitLab `GET /projects/:id`: `http_url_to_repo`, `default_branch`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoInfo {
    /// The HTTP(S) clone URL (`https://github.com/o/r.git`).
    pub clone_url: String,
    /// The default branch's name (`main`).
    pub default_branch: String,
}

/// A comment just posted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posted {
    /// The forge's id.
    pub id: String,
    /// Web URL.
    pub url: Option<String>,
}

/// The calls a source makes to a forge. Errors name the repository ([`ForgeError`]).
pub trait Forge: Send + Sync {
    /// Which forge.
    fn kind(&self) -> SourceKind;
    /// Open issues and pull/merge requests of `repo` carrying `label`, every page, oldest first.
    fn labelled_items(&self, repo: &str, label: &str) -> Result<Vec<Item>, ForgeError>;
    /// Fill in what the listing lacks (a GitHub pull request's branches).
    fn complete_item(&self, item: &mut Item) -> Result<(), ForgeError>;
    /// The item's comments, every page, oldest first.
    fn comments(&self, item: &ItemRef) -> Result<Vec<Comment>, ForgeError>;
    /// The item's labels now.
    fn labels(&self, item: &ItemRef) -> Result<Vec<String>, ForgeError>;
    /// Post a comment. Not repeated after a failure that may have reached the forge
    /// ([`http::FailureKind::Unknown`]).
    fn post_comment(&self, item: &ItemRef, body: &str) -> Result<Posted, ForgeError>;
    /// Make sure `add` is on the item and none of `remove` is; `current`: its labels, when
    /// known. Safe to repeat.
    fn move_labels(
        &self,
        item: &ItemRef,
        current: Option<&[String]>,
        add: &str,
        remove: &[&str],
    ) -> Result<(), ForgeError>;
    /// `text` with the token replaced by `[redacted]`.
    fn redact(&self, text: &str) -> String;
    /// The head branch of pull (merge) request `item` ([`pulls`]).
    fn pull_head(&self, item: &ItemRef) -> Result<pulls::PullHead, ForgeError>;
    /// The pull (merge) request of `repo` whose head is `branch` of `repo` (any state), if any.
    fn find_pull(&self, repo: &str, branch: &str) -> Result<Option<pulls::PullRef>, ForgeError>;
    /// Open a pull (merge) request in `repo`. Not repeated after a failure that may have
    /// reached the forge.
    fn open_pull(
        &self,
        repo: &str,
        pull: &pulls::NewPull<'_>,
    ) -> Result<pulls::PullRef, ForgeError>;
    /// The token as `git` sends it over HTTP ([`crate::workspace::git::Auth`]: user
    /// `x-access-token` on GitHub, `oauth2` on GitLab), for one git command at a time.
    fn git_auth(&self) -> crate::workspace::git::Auth;
    /// The repository's clone URL and default branch ([`RepoInfo`]).
    fn repository(&self, repo: &str) -> Result<RepoInfo, ForgeError>;
}

/// One configured forge: its section and its client.
pub struct Source {
    /// Which forge.
    pub kind: SourceKind,
    /// Its `sources.*` section.
    pub config: SourceConfig,
    /// The client.
    pub forge: Box<dyn Forge>,
}

/// Every configured source.
#[derive(Default)]
pub struct Sources {
    list: Vec<Source>,
    token_envs: Vec<String>,
}

impl Sources {
    /// Clients for every forge of `config`, with tokens read from the environment now. A
    /// missing token is a usage error (exit 2) naming `sources.KIND.token_env` and the
    /// variable.
    pub fn connect(config: &SourcesConfig) -> anyhow::Result<Sources> {
        Sources::connect_with(config, RetryPolicy::default())
    }

    /// [`Sources::connect`] with another retry policy.
    pub fn connect_with(config: &SourcesConfig, policy: RetryPolicy) -> anyhow::Result<Sources> {
        Sources::connect_given(config, policy, |kind, c| c.token(kind))
    }

    /// [`Sources::connect_with`] with each token given by `token_of` (a task process's tokens,
    /// which it gets from its worker on stdin, never from its environment:
    /// [`workspace::ForgeTokens`]).
    pub fn connect_given(
        config: &SourcesConfig,
        policy: RetryPolicy,
        token_of: impl Fn(SourceKind, &SourceConfig) -> anyhow::Result<String>,
    ) -> anyhow::Result<Sources> {
        let mut sources = Sources::default();
        for (kind, c) in config.configured() {
            let token = token_of(kind, c).map_err(|e| usage(format!("{e:#}")))?;
            let env = c.token_env(kind).to_string();
            let forge = forge_client(kind, c, token, policy.clone());
            sources.token_envs.push(env);
            sources.list.push(Source {
                kind,
                config: c.clone(),
                forge,
            });
        }
        Ok(sources)
    }

    /// Whether no source is configured.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The sources.
    pub fn iter(&self) -> impl Iterator<Item = &Source> {
        self.list.iter()
    }

    /// The source of `kind` that lists `repo`, if any.
    pub fn find(&self, kind: SourceKind, repo: &str) -> Option<&Source> {
        self.list
            .iter()
            .find(|s| s.kind == kind && s.config.repo_paths(kind).iter().any(|r| r == repo))
    }

    /// The environment variables holding the tokens (task processes are started without them).
    pub fn token_envs(&self) -> &[String] {
        &self.token_envs
    }
}

/// The client of forge `kind` for section `c` with `token`.
pub fn forge_client(
    kind: SourceKind,
    c: &SourceConfig,
    token: String,
    policy: RetryPolicy,
) -> Box<dyn Forge> {
    let env = c.token_env(kind).to_string();
    let api = c.api_url(kind);
    let client = http::RestClient::new(kind, &api, token, &env, policy);
    match kind {
        SourceKind::Github => Box::new(github::GitHub::new(client)),
        SourceKind::Gitlab => Box::new(gitlab::GitLab::new(client, &api)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_map_to_task_keys_and_back() {
        let r = ItemRef {
            forge: SourceKind::Gitlab,
            repo: "group/sub/proj".into(),
            kind: ItemKind::PullRequest,
            number: 7,
        };
        let key = r.task_key();
        assert_eq!(key.task_source, "gitlab");
        assert_eq!(key.owner.as_deref(), Some("group/sub"));
        assert_eq!(key.repo.as_deref(), Some("proj"));
        assert_eq!(key.task_type.as_deref(), Some("pull_request"));
        assert_eq!(key.task_id.as_deref(), Some("7"));
        assert_eq!(r.short(), "group/sub/proj!7");
        assert_eq!(r.describe_kind(), "GitLab merge request");
        let mut row = crate::db::testing::task_row("u");
        row.task_source = key.task_source;
        row.owner = key.owner;
        row.repo = key.repo;
        row.task_type = key.task_type;
        row.task_id = key.task_id;
        assert_eq!(ItemRef::from_task(&row), Some(r));
        row.task_source = "local".into();
        assert_eq!(ItemRef::from_task(&row), None);
    }
}
