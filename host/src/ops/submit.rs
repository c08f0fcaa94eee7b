//! `submit`: validate and queue a task. The checks are shared by every way a task is submitted
//! (`ctxhost submit`, `POST /api/v1/tasks`, the MCP tool `submit_task`), so each gives the same
//! messages.

use crate::config::Config;
use crate::db::{NewTask, TaskKey, TaskRow};
use crate::error::usage;
use crate::layout::Layout;

/// Largest prompt accepted, bytes (1 MiB; README, "Using it").
pub const MAX_PROMPT_BYTES: usize = 1024 * 1024;

/// A task to queue, validated by the caller.
#[derive(Debug, Clone)]
pub struct Submission {
    /// The user message that starts the task (non-empty).
    pub prompt: String,
    /// Where it comes from.
    pub key: TaskKey,
    /// Who submits it.
    pub user: Option<String>,
    /// Do not start from an earlier task with the same key (`--no-inherit`).
    pub no_inherit: bool,
    /// The directory the built-in tools work on (absolute, existing: checked by the caller);
    /// `None`: the config's `workspace` when the task runs.
    pub workspace: Option<std::path::PathBuf>,
}

/// The usage error for a prompt of more than [`MAX_PROMPT_BYTES`]: its size (`at_least`: only
/// the first bytes were read), the limit, and what to do.
pub fn too_large(size: usize, at_least: bool) -> anyhow::Error {
    let size = if at_least {
        format!("more than {}", super::thousands(MAX_PROMPT_BYTES as i64))
    } else {
        super::thousands(i64::try_from(size).unwrap_or(i64::MAX))
    };
    usage(format!(
        "the prompt is {size} bytes, over the limit of {} bytes (1 MiB): put the large material in a file the task's tools can read (an MCP server's directory) and refer to it in a short prompt",
        super::thousands(MAX_PROMPT_BYTES as i64)
    ))
}

/// Check a prompt's text: no NUL byte (PostgreSQL's text type cannot even store one), at most
/// [`MAX_PROMPT_BYTES`], not blank. `from` is appended to the subject of the NUL message
/// (` (from --prompt-file PATH)`, or empty). Errors are usage errors.
pub fn check_prompt(text: &str, from: &str) -> anyhow::Result<()> {
    if let Some(at) = text.find('\0') {
        return Err(usage(format!(
            "the prompt{from} contains a NUL byte (at offset {at}): it is not text (a binary file?)"
        )));
    }
    if text.len() > MAX_PROMPT_BYTES {
        return Err(too_large(text.len(), false));
    }
    if text.trim().is_empty() {
        return Err(usage("the prompt is empty"));
    }
    Ok(())
}

/// The parts of a task key as given (`ctxhost submit`'s flags, the API's fields).
#[derive(Debug, Clone, Default)]
pub struct KeyParts<'a> {
    /// `github`, `gitlab` or `local` (`None`: `local`).
    pub source: Option<&'a str>,
    /// Repository owner.
    pub owner: Option<&'a str>,
    /// Repository name.
    pub repo: Option<&'a str>,
    /// `issue` or `pull_request`.
    pub task_type: Option<&'a str>,
    /// Issue or pull request number / id.
    pub id: Option<&'a str>,
}

/// The task key of `parts`, each part trimmed. `name` gives how a part is named in messages
/// (`--owner` on the command line, `owner` in the API). Errors (usage): an unknown source or
/// type, an empty part or one with control characters, a github/gitlab key without owner
/// and repo, or whose owner or repo is not a forge name ([`forge_name`]: they become API paths
/// called with the forge's token) or whose id is not a number.
pub fn task_key(parts: &KeyParts, name: impl Fn(&str) -> String) -> anyhow::Result<TaskKey> {
    let source = parts.source.unwrap_or("local");
    if !matches!(source, "github" | "gitlab" | "local") {
        return Err(usage(format!(
            "{} {source:?}: expected one of github, gitlab, local",
            name("source")
        )));
    }
    if let Some(t) = parts.task_type
        && !matches!(t, "issue" | "pull_request")
    {
        return Err(usage(format!(
            "{} {t:?}: expected issue or pull_request",
            name("type")
        )));
    }
    let clean = |part: &str, v: Option<&str>| -> anyhow::Result<Option<String>> {
        match v.map(str::trim) {
            None => Ok(None),
            Some("") => Err(usage(format!("{} must not be empty", name(part)))),
            Some(s) if s.chars().any(char::is_control) => Err(usage(format!(
                "{} must not contain control characters",
                name(part)
            ))),
            Some(s) => Ok(Some(s.to_string())),
        }
    };
    let key = TaskKey {
        task_source: source.to_string(),
        owner: clean("owner", parts.owner)?,
        repo: clean("repo", parts.repo)?,
        task_type: parts.task_type.map(str::to_string),
        task_id: clean("id", parts.id)?,
    };
    if source != "local" && (key.owner.is_none() || key.repo.is_none()) {
        return Err(usage(format!(
            "{} {source} needs {} and {}",
            name("source"),
            name("owner"),
            name("repo")
        )));
    }
    if source != "local" {
        // They become paths of the forge's API, called with its token: only what a forge
        // allows in a name (GitLab's owner may be a group path `group/subgroup`).
        let checks = [
            ("owner", key.owner.as_deref(), source == "gitlab"),
            ("repo", key.repo.as_deref(), false),
        ];
        for (part, value, groups) in checks {
            if let Some(v) = value
                && !forge_name(v, groups)
            {
                return Err(usage(format!(
                    "{} {v:?} is not a {source} name: letters, digits, `.`, `-` and `_`{}, \
                     not `.` or `..`",
                    name(part),
                    if groups {
                        " (groups separated by `/`)"
                    } else {
                        ""
                    }
                )));
            }
        }
        if let Some(id) = &key.task_id
            && !(id.bytes().all(|b| b.is_ascii_digit()) && id.parse::<u64>().is_ok_and(|n| n > 0))
        {
            return Err(usage(format!(
                "{} {id:?}: a {source} issue or pull request number (1, 2, ...)",
                name("id")
            )));
        }
    }
    Ok(key)
}

/// Whether `name` is a forge's owner or repository name: segments of ASCII letters, digits,
/// `.`, `-` and `_`, none `.` or `..`; several segments (`a/b`) only when `groups`.
fn forge_name(name: &str, groups: bool) -> bool {
    let segments: Vec<&str> = name.split('/').collect();
    (groups || segments.len() == 1)
        && segments.iter().all(|s| {
            !s.is_empty()
                && *s != "."
                && *s != ".."
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        })
}

/// Queue `task` in the tree of `layout` (created if missing) with a new UUID and `config`'s
/// provider, model and context length; returns its row.
pub fn submit(config: &Config, layout: &Layout, task: Submission) -> anyhow::Result<TaskRow> {
    layout.ensure()?;
    let db = super::open_store(config, layout)?;
    let uuid = uuid::Uuid::new_v4().hyphenated().to_string();
    db.insert_queued(&NewTask {
        uuid: uuid.clone(),
        key: task.key,
        prompt: task.prompt,
        user: task.user,
        llm_provider: config.llm.provider.to_string(),
        model: config.llm.model.clone(),
        context_length: config.llm.context_length,
        no_inherit: task.no_inherit,
        workspace: task.workspace.map(|w| w.display().to_string()),
    })?;
    tracing::debug!(%uuid, "task queued");
    db.get(&uuid)?
        .ok_or_else(|| anyhow::anyhow!("task {uuid} vanished after insert"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn forge_names_are_what_a_forge_allows_and_never_a_path_out() {
        for ok in ["acme", "app.js", ".github", "a-b_c"] {
            assert!(super::forge_name(ok, false), "{ok}");
        }
        assert!(super::forge_name("group/sub", true));
        for bad in ["..", ".", "a/b", "../..", "a b", "a%2f", "", "a?b", "ü"] {
            assert!(!super::forge_name(bad, false), "{bad}");
        }
        assert!(!super::forge_name("group/../x", true));
    }
}
