//! A task's workspace as a git checkout (issue 40): made, rebuilt or recorded when its task
//! process starts ([`prepare`]), before the tools open it.
//!
//! - A task of a source with `workspace: true` and no `workspace.json` yet: the repository's
//!   clone URL and default branch come from the API ([`super::Forge::repository`]; a plain
//!   `http://` URL only with `allow_http: true`); its mirror under
//!   `contexts/.workspaces/cache/` is cloned or fetched (under the mirror's lock); the task's
//!   worktree `contexts/.workspaces/<uuid>` is added, detached, at the default branch (an
//!   issue) or at `refs/pull/N/head` (GitHub) / `refs/merge-requests/N/head` (GitLab); and
//!   `workspace.json` is written with `managed: true`.
//! - A managed record whose worktree is missing (the task resumed on another host, which
//!   shares only the task store and the bucket): the mirror is fetched, the worktree added at
//!   the record's base commit and `changes.patch` applied (`git apply --binary`), so the
//!   workspace is what the task left. A record naming another path is rewritten with this
//!   host's.
//! - Any other task whose workspace is inside a git repository (a user's directory): the record
//!   is written once with `managed: false` and the base `HEAD` at that moment.
//!
//! The token: the task process gets its worker's tokens on stdin ([`ForgeTokens`]), never in
//! its environment (a sandboxed command could read `/proc/<pid>/environ`), and gives it to
//! one git command at a time as an `Authorization: Basic` header (GitHub's user
//! `x-access-token`, GitLab's `oauth2`).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::{ItemKind, ItemRef, RetryPolicy};
use crate::config::{Config, SourceKind, SourcesConfig};
use crate::db::TaskRow;
use crate::layout::Layout;
use crate::task_dir::TaskDir;
use crate::workspace::checkout::{self, MirrorLock, PATCH_FILE};
use crate::workspace::git::{Auth, Git};
use crate::workspace::record::{WorkspaceRecord, without_credentials};

/// The `task-exec` flag saying the worker writes the tokens on the process's stdin.
pub const TOKENS_ON_STDIN: &str = "--forge-tokens-on-stdin";

/// Largest token line read from stdin (bytes).
const MAX_TOKEN_LINE: u64 = 64 * 1024;

/// The forge tokens a task process may give git: one per source with `workspace: true`.
/// Shown as `<redacted>`; sent by the worker as one JSON line on the child's stdin.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ForgeTokens(BTreeMap<String, String>);

impl std::fmt::Debug for ForgeTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set()
            .entries(self.0.keys().map(|k| format!("{k}: <redacted>")))
            .finish()
    }
}

static PROCESS_TOKENS: OnceLock<ForgeTokens> = OnceLock::new();

impl ForgeTokens {
    /// The tokens of the sources with `workspace: true`, read from their `token_env` now;
    /// `Ok(None)` when no source has a workspace. Errors name the variable.
    pub fn from_env(config: &SourcesConfig) -> anyhow::Result<Option<ForgeTokens>> {
        let mut map = BTreeMap::new();
        for (kind, c) in config.configured() {
            if c.workspace {
                map.insert(kind.as_str().to_string(), c.token(kind)?);
            }
        }
        Ok((!map.is_empty()).then_some(ForgeTokens(map)))
    }

    /// One JSON line (`{"github": "…"}` + `\n`), for the child's stdin.
    pub fn to_line(&self) -> Vec<u8> {
        // A map of strings always serializes; an empty object would only mean "no tokens".
        let mut line = serde_json::to_vec(&self.0).unwrap_or_else(|_| b"{}".to_vec());
        line.push(b'\n');
        line
    }

    /// Read the line [`ForgeTokens::to_line`] wrote (at most 64 KiB) from `r`.
    pub fn read_from(r: impl Read) -> anyhow::Result<ForgeTokens> {
        let mut line = String::new();
        r.take(MAX_TOKEN_LINE)
            .read_to_string(&mut line)
            .map_err(|e| anyhow::anyhow!("cannot read the forge tokens on stdin: {e}"))?;
        let map: BTreeMap<String, String> = serde_json::from_str(line.trim()).map_err(|_| {
            anyhow::anyhow!("the forge tokens on stdin are not a JSON object of strings")
        })?;
        Ok(ForgeTokens(map))
    }

    /// Make these the tokens of this process (once; later calls are ignored).
    pub fn install(self) {
        let _ = PROCESS_TOKENS.set(self);
    }

    /// This process's token of `kind`, if it was given one.
    pub fn of_process(kind: SourceKind) -> Option<String> {
        PROCESS_TOKENS.get()?.0.get(kind.as_str()).cloned()
    }
}

/// The auth for git of `kind`, when this process has its token.
pub fn auth_of(kind: SourceKind) -> Option<Auth> {
    ForgeTokens::of_process(kind).map(|token| Auth {
        user: kind.git_user().to_string(),
        token,
    })
}

/// The ref an item's workspace starts from: the default branch for an issue, the head of a
/// pull (`refs/pull/N/head`) or merge (`refs/merge-requests/N/head`) request.
pub fn item_ref(item: &ItemRef, default_branch: &str) -> String {
    match (item.kind, item.forge) {
        (ItemKind::Issue, _) => format!("refs/heads/{default_branch}"),
        (ItemKind::PullRequest, SourceKind::Github) => format!("refs/pull/{}/head", item.number),
        (ItemKind::PullRequest, SourceKind::Gitlab) => {
            format!("refs/merge-requests/{}/head", item.number)
        }
    }
}

/// The workspace of task `row` (directory `dir`) as a git checkout, made or rebuilt as the
/// module docs say; `workspace`: the task's workspace otherwise (metadata.json's, or the
/// config's). Returns the record when the workspace is a git checkout (a managed one's path is
/// where the tools must work). Errors (the task fails with them) name what could not be done:
/// the API call, the clone URL, the git command, the patch.
pub fn prepare(
    config: &Config,
    layout: &Layout,
    dir: &TaskDir,
    row: &TaskRow,
    workspace: Option<&Path>,
) -> anyhow::Result<Option<WorkspaceRecord>> {
    let item = ItemRef::from_task(row);
    if let Some(mut rec) = WorkspaceRecord::read(dir)? {
        if !rec.managed {
            return Ok(Some(rec));
        }
        let here = layout.task_workspace(&row.uuid);
        if !is_worktree(&here) {
            rebuild(layout, dir, &rec, item.as_ref(), &here)?;
        }
        let here_s = here.display().to_string();
        if rec.path != here_s {
            rec.path = here_s;
            rec.write(dir)?;
        }
        return Ok(Some(rec));
    }
    if let Some(item) = &item
        && let Some(source) = config.sources.get(item.forge).filter(|c| c.workspace)
    {
        let token = ForgeTokens::of_process(item.forge).ok_or_else(|| {
            anyhow::anyhow!(
                "sources.{}.workspace: this task process was given no {} token (tasks with a \
                 workspace run under `ctxhost run`, which hands the token over)",
                item.forge.as_str(),
                item.forge.display_name()
            )
        })?;
        let forge = super::forge_client(item.forge, source, token, RetryPolicy::default());
        let info = forge
            .repository(&item.repo)
            .map_err(|e| anyhow::anyhow!("{}", forge.redact(&format!("{e:#}"))))?;
        source.check_clone_url(item.forge, &info.clone_url)?;
        let mirror = checkout::mirror_path(&layout.workspaces_dir(), &info.clone_url)?;
        let path = layout.task_workspace(&row.uuid);
        let git_ref = item_ref(item, &info.default_branch);
        let base = {
            let _lock = MirrorLock::acquire(&mirror)?;
            checkout::sync_mirror(&mirror, &info.clone_url, auth_of(item.forge))?;
            let base = checkout::resolve(&mirror, &git_ref).map_err(|_| {
                anyhow::anyhow!(
                    "{} has no {git_ref} (the {} of {})",
                    without_credentials(&info.clone_url).unwrap_or_default(),
                    match item.kind {
                        ItemKind::Issue => "default branch",
                        ItemKind::PullRequest => "head",
                    },
                    item.short()
                )
            })?;
            if path.exists() {
                // A folder an earlier process left half made.
                checkout::remove_worktree(&path, Some(&mirror))?;
            }
            checkout::add_worktree(&mirror, &path, &base)?;
            base
        };
        let rec = WorkspaceRecord {
            path: path.display().to_string(),
            base_commit: base,
            repository: without_credentials(&info.clone_url),
            git_ref: Some(git_ref),
            managed: true,
        };
        rec.write(dir)?;
        tracing::info!(uuid = %row.uuid, workspace = %rec.path, base = %rec.base_commit,
            "worktree of {} made for {}", rec.repository.as_deref().unwrap_or("?"), item.short());
        return Ok(Some(rec));
    }
    let Some(ws) = workspace.filter(|w| w.is_dir()) else {
        return Ok(None);
    };
    let git = Git::new(ws);
    let Ok(base) = git.read(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"]) else {
        // Not a git checkout, or one without a commit yet.
        return Ok(None);
    };
    let path = ws.canonicalize().unwrap_or_else(|_| ws.to_path_buf());
    let rec = WorkspaceRecord {
        path: path.display().to_string(),
        base_commit: base,
        repository: None,
        git_ref: git
            .read(["symbolic-ref", "--quiet", "HEAD"])
            .ok()
            .filter(|r| !r.is_empty()),
        managed: false,
    };
    rec.write(dir)?;
    Ok(Some(rec))
}

/// Whether `path` is a worktree whose repository is there.
fn is_worktree(path: &Path) -> bool {
    checkout::worktree_repository(path).is_some_and(|r| r.join("HEAD").exists())
}

/// Make the managed worktree of `rec` again at `here`: fetch its mirror, add the worktree at
/// the base commit, apply `changes.patch`.
fn rebuild(
    layout: &Layout,
    dir: &TaskDir,
    rec: &WorkspaceRecord,
    item: Option<&ItemRef>,
    here: &Path,
) -> anyhow::Result<()> {
    let url = rec.repository.as_deref().ok_or_else(|| {
        anyhow::anyhow!("workspace.json names no repository: the worktree cannot be rebuilt")
    })?;
    let mirror = checkout::mirror_path(&layout.workspaces_dir(), url)?;
    let patch = dir
        .read_bounded_if_exists(PATCH_FILE, checkout::MAX_PATCH_BYTES)
        .map_err(|e| anyhow::anyhow!("cannot read {PATCH_FILE}: {e}"))?
        .unwrap_or_default();
    let _lock = MirrorLock::acquire(&mirror)?;
    if !checkout::has_commit(&mirror, &rec.base_commit) {
        checkout::sync_mirror(&mirror, url, item.and_then(|i| auth_of(i.forge)))?;
    }
    if !checkout::has_commit(&mirror, &rec.base_commit) {
        anyhow::bail!(
            "the base commit {} of workspace.json is not in {url} any more: the worktree cannot be rebuilt",
            rec.base_commit
        );
    }
    if here.exists() {
        checkout::remove_worktree(here, Some(&mirror))?;
    }
    checkout::add_worktree(&mirror, here, &rec.base_commit)?;
    checkout::apply_patch(here, &patch).map_err(|e| {
        anyhow::anyhow!("{PATCH_FILE} does not apply to {}: {e:#}", rec.base_commit)
    })?;
    tracing::info!(workspace = %here.display(), base = %rec.base_commit, patch_bytes = patch.len(),
        "worktree rebuilt from the mirror, the base commit and {PATCH_FILE}");
    Ok(())
}

/// The mirror a managed record's worktree comes from, under `layout`'s workspaces folder.
pub fn mirror_of(layout: &Layout, rec: &WorkspaceRecord) -> Option<PathBuf> {
    checkout::mirror_path(&layout.workspaces_dir(), rec.repository.as_deref()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_travel_as_one_line_and_never_show() {
        let t = ForgeTokens(BTreeMap::from([(
            "github".to_string(),
            "ghs_SECRET".to_string(),
        )]));
        assert!(!format!("{t:?}").contains("SECRET"));
        let back = ForgeTokens::read_from(&t.to_line()[..]).unwrap();
        assert_eq!(back, t);
        assert!(ForgeTokens::read_from(&b"not json"[..]).is_err());
    }

    #[test]
    fn an_item_starts_at_the_default_branch_or_its_head() {
        let mut i = ItemRef {
            forge: SourceKind::Github,
            repo: "a/b".into(),
            kind: ItemKind::Issue,
            number: 7,
        };
        assert_eq!(item_ref(&i, "trunk"), "refs/heads/trunk");
        i.kind = ItemKind::PullRequest;
        assert_eq!(item_ref(&i, "trunk"), "refs/pull/7/head");
        i.forge = SourceKind::Gitlab;
        assert_eq!(item_ref(&i, "trunk"), "refs/merge-requests/7/head");
    }
}
