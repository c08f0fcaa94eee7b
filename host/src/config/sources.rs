//! `sources`: the GitHub and GitLab repositories whose labelled issues and pull/merge requests
//! become tasks ([`crate::sources`]).
//!
//! ```yaml
//! sources:
//!   github:
//!     api_url: https://api.github.com      # GitHub Enterprise: https://HOST/api/v3
//!     token_env: GITHUB_TOKEN
//!     repos: [owner/name]
//!     label: coding agent
//!     processing_label: coding agent processing
//!     done_label: coding agent done
//!     failed_label: coding agent failed
//!     paused_label: coding agent paused
//!     poll_interval_secs: 60
//!     pull_requests: false   # true: a task that changed its workspace ends in a pull request
//!     author: {name: ctxhost, email: ctxhost@localhost}   # of the commits ctxhost makes
//!     workspace: true        # each task works in its own git worktree of the repository
//!     allow_http: false      # true: a plain-http:// clone URL is accepted (tests, a LAN forge)
//!   gitlab:
//!     api_url: https://gitlab.com/api/v4
//!     token_env: GITLAB_TOKEN
//!     projects: [group/project]
//!     # the same label keys and poll_interval_secs
//! ```
//! The token is never part of the config: `token_env` names the environment variable that
//! holds it, read when `ctxhost run` / `ctxhost poll` start ([`SourceConfig::token`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Invalid;

/// `sources`: each forge is optional; none configured means tasks come only from `submit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SourcesConfig {
    /// `sources.github`: GitHub (or GitHub Enterprise) repositories.
    pub github: Option<SourceConfig>,
    /// `sources.gitlab`: GitLab projects.
    pub gitlab: Option<SourceConfig>,
}

/// Which forge a source talks to (the `task_source` of its tasks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// GitHub REST API v3 (`api.github.com`, or GitHub Enterprise's `/api/v3`).
    Github,
    /// GitLab REST API v4.
    Gitlab,
}

impl SourceKind {
    /// Both kinds, in config order.
    pub const ALL: [SourceKind; 2] = [SourceKind::Github, SourceKind::Gitlab];

    /// `github` / `gitlab`: the config key and the tasks' `task_source`.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Github => "github",
            SourceKind::Gitlab => "gitlab",
        }
    }

    /// `GitHub` / `GitLab`, for messages.
    pub fn display_name(self) -> &'static str {
        match self {
            SourceKind::Github => "GitHub",
            SourceKind::Gitlab => "GitLab",
        }
    }

    /// The kind whose `task_source` is `s`.
    pub fn from_task_source(s: &str) -> Option<SourceKind> {
        SourceKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The default `api_url`.
    pub fn default_api_url(self) -> &'static str {
        match self {
            SourceKind::Github => "https://api.github.com",
            SourceKind::Gitlab => "https://gitlab.com/api/v4",
        }
    }

    /// The default `token_env`.
    pub fn default_token_env(self) -> &'static str {
        match self {
            SourceKind::Github => "GITHUB_TOKEN",
            SourceKind::Gitlab => "GITLAB_TOKEN",
        }
    }

    /// The HTTP basic-auth user git sends the token with: GitHub `x-access-token`, GitLab
    /// `oauth2`.
    pub fn git_user(self) -> &'static str {
        match self {
            SourceKind::Github => "x-access-token",
            SourceKind::Gitlab => "oauth2",
        }
    }

    /// The key listing the repositories: `repos` (GitHub) or `projects` (GitLab).
    pub fn repos_key(self) -> &'static str {
        match self {
            SourceKind::Github => "repos",
            SourceKind::Gitlab => "projects",
        }
    }
}

impl std::fmt::Display for SourceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.display_name())
    }
}

/// One forge's section (`sources.github` or `sources.gitlab`). GitHub lists `repos`, GitLab
/// `projects`; everything else is shared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SourceConfig {
    /// REST API root, without a trailing `/` (`None`: [`SourceKind::default_api_url`]).
    pub api_url: Option<String>,
    /// Environment variable holding the token (`None`: [`SourceKind::default_token_env`]).
    pub token_env: Option<String>,
    /// GitHub: `owner/name` of each repository.
    pub repos: Vec<String>,
    /// GitLab: `group[/subgroup...]/project` of each project.
    pub projects: Vec<String>,
    /// Open issues and pull/merge requests carrying this label become tasks.
    pub label: String,
    /// Replaces `label` while the task is queued or running.
    pub processing_label: String,
    /// Set when the task completed (its answer is posted as a comment).
    pub done_label: String,
    /// Set when the task failed or was stopped (the error is posted as a comment).
    pub failed_label: String,
    /// Set while the task is paused.
    pub paused_label: String,
    /// Seconds between two polls of this forge by `ctxhost run` / `ctxhost poll` (≥ 1).
    pub poll_interval_secs: u64,
    /// Whether a task that completed with its workspace (`workspace.json`) changed from its
    /// base commit ends as a change on the forge: a commit pushed to a branch
    /// `ctxhost/TYPE-NUMBER-SHORTUUID` and a pull (merge) request against the default branch,
    /// or, for a task on a pull request of the same repository, a commit pushed to its head
    /// branch (docs/forge-bot.md). `false` (default): a comment only.
    pub pull_requests: bool,
    /// Author and committer of the commits ctxhost makes (`pull_requests: true`).
    pub author: CommitAuthor,
    /// Give each task of this source its own git worktree of the item's repository (cloned
    /// from the API's clone URL into a per-repository mirror under
    /// `contexts/.workspaces/cache/`), at the default branch for an issue and at the head of
    /// a pull/merge request; the built-in tools work in it and its change travels with the
    /// task as `changes.patch`. The token reaches git only as an `Authorization` header.
    pub workspace: bool,
    /// Accept a plain `http://` clone URL from the API (a forge on a trusted network, tests).
    /// Off: such a URL is refused, naming this key (the token would cross the network in
    /// clear text).
    pub allow_http: bool,
}

/// `sources.*.author`: who the commits ctxhost makes are by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct CommitAuthor {
    /// Name (default `ctxhost`).
    pub name: String,
    /// E-mail address (default `ctxhost@localhost`).
    pub email: String,
}

impl Default for CommitAuthor {
    fn default() -> Self {
        CommitAuthor {
            name: "ctxhost".into(),
            email: "ctxhost@localhost".into(),
        }
    }
}

impl Default for SourceConfig {
    fn default() -> Self {
        SourceConfig {
            api_url: None,
            token_env: None,
            repos: Vec::new(),
            projects: Vec::new(),
            label: "coding agent".into(),
            processing_label: "coding agent processing".into(),
            done_label: "coding agent done".into(),
            failed_label: "coding agent failed".into(),
            paused_label: "coding agent paused".into(),
            poll_interval_secs: 60,
            pull_requests: false,
            author: CommitAuthor::default(),
            workspace: false,
            allow_http: false,
        }
    }
}

impl SourceConfig {
    /// The REST API root in effect, without a trailing `/`.
    pub fn api_url(&self, kind: SourceKind) -> String {
        self.api_url
            .as_deref()
            .unwrap_or(kind.default_api_url())
            .trim_end_matches('/')
            .to_string()
    }

    /// The token variable in effect.
    pub fn token_env(&self, kind: SourceKind) -> &str {
        self.token_env
            .as_deref()
            .unwrap_or(kind.default_token_env())
    }

    /// The repositories (GitHub `repos`, GitLab `projects`).
    pub fn repo_paths(&self, kind: SourceKind) -> &[String] {
        match kind {
            SourceKind::Github => &self.repos,
            SourceKind::Gitlab => &self.projects,
        }
    }

    /// The poll interval.
    pub fn poll_interval(&self) -> Duration {
        Duration::from_secs(self.poll_interval_secs)
    }

    /// Read the token from the environment now. Error (naming the key and the variable, never
    /// a value) when it is unset or empty.
    pub fn token(&self, kind: SourceKind) -> anyhow::Result<String> {
        let var = self.token_env(kind);
        match std::env::var(var) {
            Ok(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
            _ => anyhow::bail!(
                "sources.{}.token_env: environment variable {var} is not set (it must hold a {} token; \
                 see docs/forge-bot.md)",
                kind.as_str(),
                kind.display_name()
            ),
        }
    }

    /// Whether `clone_url` (from the API) may be cloned: `https://` always, `http://` with
    /// `allow_http: true`. The error names `sources.KIND.allow_http` or says what the URL is.
    pub fn check_clone_url(&self, kind: SourceKind, clone_url: &str) -> anyhow::Result<()> {
        let lower = clone_url.to_ascii_lowercase();
        if lower.starts_with("https://") {
            return Ok(());
        }
        if lower.starts_with("http://") {
            if self.allow_http {
                return Ok(());
            }
            anyhow::bail!(
                "the {} clone URL {clone_url} is plain http: the token would cross the network in \
                 clear text; set sources.{}.allow_http: true to accept it",
                kind.display_name(),
                kind.as_str()
            );
        }
        // Not shown whole: a URL of another form may hold credentials.
        anyhow::bail!(
            "the {} clone URL is not an http(s) URL (it starts {:?})",
            kind.display_name(),
            clone_url.split(':').next().unwrap_or_default()
        )
    }

    /// Check the section of `kind`; the error names the key.
    fn validate(&self, kind: SourceKind) -> Result<(), Invalid> {
        let key = |k: &str| format!("sources.{}.{k}", kind.as_str());
        let url = self.api_url(kind);
        if !(url.starts_with("http://") || url.starts_with("https://"))
            || url.len() <= "https://".len()
        {
            return Invalid::err(
                &key("api_url"),
                format!("must be an http:// or https:// URL, got {url:?}"),
            );
        }
        if let Some(t) = &self.token_env
            && (t.is_empty() || t.contains('='))
        {
            return Invalid::err(
                &key("token_env"),
                "must name an environment variable (the token itself never goes in the config)",
            );
        }
        let other = match kind {
            SourceKind::Github => ("projects", &self.projects),
            SourceKind::Gitlab => ("repos", &self.repos),
        };
        if !other.1.is_empty() {
            return Invalid::err(
                &key(other.0),
                format!(
                    "{} lists its repositories under `{}`",
                    kind.display_name(),
                    kind.repos_key()
                ),
            );
        }
        let repos = self.repo_paths(kind);
        if repos.is_empty() {
            return Invalid::err(&key(kind.repos_key()), "must list at least one repository");
        }
        for (i, r) in repos.iter().enumerate() {
            if let Err(msg) = check_repo_path(kind, r) {
                return Invalid::err(&key(kind.repos_key()), format!("{r:?}: {msg}"));
            }
            if repos[..i].contains(r) {
                return Invalid::err(&key(kind.repos_key()), format!("{r:?} is listed twice"));
            }
        }
        let labels = [
            ("label", &self.label),
            ("processing_label", &self.processing_label),
            ("done_label", &self.done_label),
            ("failed_label", &self.failed_label),
            ("paused_label", &self.paused_label),
        ];
        for (i, (name, value)) in labels.iter().enumerate() {
            if value.trim().is_empty() || value.trim() != value.as_str() {
                return Invalid::err(
                    &key(name),
                    "must be a label name without surrounding spaces",
                );
            }
            if value.contains(',') {
                return Invalid::err(
                    &key(name),
                    format!(
                        "{value:?}: a label used by ctxhost may not contain a comma (the APIs filter by comma-separated lists)"
                    ),
                );
            }
            if let Some((other, _)) = labels[..i].iter().find(|(_, v)| v == value) {
                return Invalid::err(
                    &key(name),
                    format!(
                        "{value:?} is also {}; each state needs its own label",
                        key(other)
                    ),
                );
            }
        }
        if self.poll_interval_secs < 1 {
            return Invalid::err(&key("poll_interval_secs"), "must be at least 1, got 0");
        }
        for (name, value) in [
            ("author.name", &self.author.name),
            ("author.email", &self.author.email),
        ] {
            if value.trim().is_empty() || value.chars().any(|c| c.is_control() || "<>".contains(c))
            {
                return Invalid::err(
                    &key(name),
                    format!("{value:?}: must be non-empty, without `<`, `>` or control characters"),
                );
            }
        }
        Ok(())
    }
}

/// Whether `path` is a repository path of `kind`: GitHub `owner/name`; GitLab
/// `group[/subgroup...]/project`. Segments use letters, digits, `.`, `-`, `_`.
fn check_repo_path(kind: SourceKind, path: &str) -> Result<(), String> {
    let segments: Vec<&str> = path.split('/').collect();
    let shape_ok = match kind {
        SourceKind::Github => segments.len() == 2,
        SourceKind::Gitlab => segments.len() >= 2,
    };
    if !shape_ok {
        return Err(match kind {
            SourceKind::Github => "must be `owner/name`".into(),
            SourceKind::Gitlab => "must be `group/project` (subgroups allowed)".into(),
        });
    }
    for s in segments {
        if s.is_empty()
            || s == "."
            || s == ".."
            || !s
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        {
            return Err(format!(
                "segment {s:?} may only use letters, digits, `.`, `-` and `_`"
            ));
        }
    }
    Ok(())
}

impl SourcesConfig {
    /// The configured forges with their sections, in [`SourceKind::ALL`] order.
    pub fn configured(&self) -> Vec<(SourceKind, &SourceConfig)> {
        SourceKind::ALL
            .into_iter()
            .filter_map(|k| self.get(k).map(|c| (k, c)))
            .collect()
    }

    /// The section of `kind`, if configured.
    pub fn get(&self, kind: SourceKind) -> Option<&SourceConfig> {
        match kind {
            SourceKind::Github => self.github.as_ref(),
            SourceKind::Gitlab => self.gitlab.as_ref(),
        }
    }

    /// Whether any forge is configured.
    pub fn any(&self) -> bool {
        self.github.is_some() || self.gitlab.is_some()
    }

    /// Check every configured section; the error names the key.
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        for (kind, c) in self.configured() {
            c.validate(kind)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn err(yaml: &str) -> String {
        Config::from_yaml(yaml, "config.yaml")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_github_section_takes_defaults_for_what_it_omits() {
        let c = Config::from_yaml("sources:\n  github:\n    repos: [acme/app]\n", "c").unwrap();
        let gh = c.sources.github.as_ref().unwrap();
        assert_eq!(
            gh.api_url(super::SourceKind::Github),
            "https://api.github.com"
        );
        assert_eq!(gh.token_env(super::SourceKind::Github), "GITHUB_TOKEN");
        assert_eq!(gh.label, "coding agent");
        assert_eq!(gh.poll_interval_secs, 60);
        assert!(c.sources.gitlab.is_none());
        let c = Config::from_yaml(
            "sources:\n  gitlab:\n    api_url: https://git.example.com/api/v4/\n    projects: [a/b/c]\n",
            "c",
        )
        .unwrap();
        let gl = c.sources.gitlab.as_ref().unwrap();
        assert_eq!(
            gl.api_url(super::SourceKind::Gitlab),
            "https://git.example.com/api/v4"
        );
        assert_eq!(gl.token_env(super::SourceKind::Gitlab), "GITLAB_TOKEN");
    }

    #[test]
    fn mistakes_name_the_key() {
        let e = err("sources:\n  github:\n    repos: []\n");
        assert!(
            e.contains("sources.github.repos: must list at least one"),
            "{e}"
        );
        let e = err("sources:\n  github:\n    repos: [acme]\n");
        assert!(
            e.contains("sources.github.repos: \"acme\": must be `owner/name`"),
            "{e}"
        );
        let e = err("sources:\n  github:\n    repos: [a/b/c]\n");
        assert!(e.contains("owner/name"), "{e}");
        let e = err("sources:\n  gitlab:\n    repos: [a/b]\n");
        assert!(
            e.contains("sources.gitlab.repos: GitLab lists its repositories under `projects`"),
            "{e}"
        );
        let e = err("sources:\n  github:\n    repos: [a/b, a/b]\n");
        assert!(e.contains("listed twice"), "{e}");
        let e = err("sources:\n  github:\n    repos: [a/b]\n    done_label: coding agent\n");
        assert!(
            e.contains("sources.github.done_label") && e.contains("sources.github.label"),
            "{e}"
        );
        let e = err("sources:\n  github:\n    repos: [a/b]\n    label: \"a,b\"\n");
        assert!(e.contains("comma"), "{e}");
        let e = err("sources:\n  github:\n    repos: [a/b]\n    api_url: ftp://x\n");
        assert!(e.contains("sources.github.api_url"), "{e}");
        let e = err("sources:\n  github:\n    repos: [a/b]\n    poll_interval_secs: 0\n");
        assert!(e.contains("sources.github.poll_interval_secs"), "{e}");
        let e = err("sources:\n  github:\n    repos: [a/b]\n    token: ghp_x\n");
        assert!(e.contains("token"), "{e}");
        let e = err("sources:\n  github:\n    repos: [\"a/b c\"]\n");
        assert!(e.contains("segment"), "{e}");
    }

    #[test]
    fn a_plain_http_clone_url_needs_allow_http() {
        let c = Config::from_yaml(
            "sources:\n  github:\n    repos: [a/b]\n    workspace: true\n",
            "c",
        )
        .unwrap();
        let gh = c.sources.github.as_ref().unwrap();
        assert!(gh.workspace && !gh.allow_http);
        let k = super::SourceKind::Github;
        gh.check_clone_url(k, "https://github.com/a/b.git").unwrap();
        let e = gh
            .check_clone_url(k, "http://127.0.0.1:9/a/b.git")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sources.github.allow_http"), "{e}");
        assert!(gh.check_clone_url(k, "file:///srv/a.git").is_err());
        let c = Config::from_yaml(
            "sources:\n  github:\n    repos: [a/b]\n    workspace: true\n    allow_http: true\n",
            "c",
        )
        .unwrap();
        let gh = c.sources.github.as_ref().unwrap();
        gh.check_clone_url(k, "http://127.0.0.1:9/a/b.git").unwrap();
    }

    #[test]
    fn a_missing_token_names_the_variable_not_a_value() {
        let c = Config::from_yaml(
            "sources:\n  github:\n    repos: [a/b]\n    token_env: CTXHOST_TEST_SURELY_UNSET_TOKEN\n",
            "c",
        )
        .unwrap();
        let e = c
            .sources
            .github
            .as_ref()
            .unwrap()
            .token(super::SourceKind::Github)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("sources.github.token_env: environment variable CTXHOST_TEST_SURELY_UNSET_TOKEN is not set"),
            "{e}"
        );
    }
}
