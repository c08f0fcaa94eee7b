//! `ctxhost submit`: queue a task and print its UUID (or its row as JSON).

use super::out::outln;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use super::{Env, usage};
use crate::db::TaskKey;
use crate::ops::submit::Submission;

pub use crate::ops::submit::MAX_PROMPT_BYTES;
use crate::ops::submit::too_large;

/// Where a task comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Source {
    Github,
    Gitlab,
    Local,
}

/// What kind of item a github/gitlab task is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TaskType {
    Issue,
    #[value(name = "pull_request")]
    PullRequest,
}

/// `ctxhost submit` arguments.
#[derive(Debug, Clone, Args)]
#[command(group = clap::ArgGroup::new("prompt_input").required(true).args(["text", "prompt", "prompt_file"]))]
pub struct SubmitArgs {
    /// The task as text (`-` reads standard input); same as --prompt.
    #[arg(value_name = "PROMPT")]
    pub text: Option<String>,
    /// The task, as text.
    #[arg(long, value_name = "TEXT")]
    pub prompt: Option<String>,
    /// Read the task from a file (`-` reads standard input).
    #[arg(long, value_name = "PATH")]
    pub prompt_file: Option<PathBuf>,
    /// Where the task comes from.
    #[arg(long, value_enum, default_value = "local")]
    pub source: Source,
    /// Repository owner (required for github/gitlab).
    #[arg(long)]
    pub owner: Option<String>,
    /// Repository name (required for github/gitlab).
    #[arg(long)]
    pub repo: Option<String>,
    /// Issue or pull request.
    #[arg(long = "type", value_enum, value_name = "TYPE")]
    pub task_type: Option<TaskType>,
    /// Issue or pull request number / id.
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
    /// Who submits the task (default: $USER).
    #[arg(long)]
    pub user: Option<String>,
    /// Start from scratch: do not inherit the final state of an earlier completed task with
    /// the same task key (source, owner, repo, type, id).
    #[arg(long)]
    pub no_inherit: bool,
    /// The directory the task's built-in tools work on (made absolute; it must exist).
    /// Default: the config's `workspace` key when the task runs.
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Print the new task's row as JSON instead of the bare UUID.
    #[arg(long)]
    pub json: bool,
    /// The `llm` settings recorded for the task.
    #[command(flatten)]
    pub llm: super::llm_flags::LlmFlags,
}

/// The prompt from `text` (`-`: standard input) or `prompt` (literal), else `file` (`-`:
/// standard input). Errors (usage): unreadable, larger than [`MAX_PROMPT_BYTES`] (its size and
/// the limit), not UTF-8 or holding a NUL byte (naming the file), empty.
pub(super) fn read_prompt(
    text: Option<&str>,
    prompt: Option<&str>,
    file: Option<&std::path::Path>,
) -> anyhow::Result<String> {
    let stdin_path = PathBuf::from("-");
    // The text, and the file (or `-`) it was read from.
    let (text, read_from) = if let Some(p) = prompt.or(text.filter(|t| *t != "-")) {
        (p.to_string(), None)
    } else {
        let path = file.unwrap_or(&stdin_path);
        let mut buf = Vec::new();
        if path.as_os_str() == "-" {
            std::io::stdin()
                .take(MAX_PROMPT_BYTES as u64 + 1)
                .read_to_end(&mut buf)
                .map_err(|e| usage(format!("cannot read the prompt from standard input: {e}")))?;
        } else {
            let f = std::fs::File::open(path)
                .map_err(|e| usage(format!("--prompt-file {}: {e}", path.display())))?;
            if let Ok(m) = f.metadata()
                && m.len() > MAX_PROMPT_BYTES as u64
            {
                return Err(too_large(
                    usize::try_from(m.len()).unwrap_or(usize::MAX),
                    false,
                ));
            }
            f.take(MAX_PROMPT_BYTES as u64 + 1)
                .read_to_end(&mut buf)
                .map_err(|e| usage(format!("--prompt-file {}: {e}", path.display())))?;
        }
        if buf.len() > MAX_PROMPT_BYTES {
            return Err(too_large(buf.len(), true));
        }
        let text = String::from_utf8(buf).map_err(|e| {
            usage(format!(
                "the prompt{} is not UTF-8 text (invalid byte at offset {})",
                from(path),
                e.utf8_error().valid_up_to()
            ))
        })?;
        (text, Some(path))
    };
    crate::ops::submit::check_prompt(&text, &read_from.map(from).unwrap_or_default())?;
    Ok(text)
}

/// ` (from PATH)` / ` (from standard input)`, for errors about a prompt read from `path`.
fn from(path: &std::path::Path) -> String {
    if path.as_os_str() == "-" {
        " (from standard input)".to_string()
    } else {
        format!(" (from --prompt-file {})", path.display())
    }
}

/// `--workspace DIR` made canonical (against the current directory, links resolved) and
/// checked by the rule the built-in tools apply again when the task runs
/// ([`crate::tools::builtin::workspace::checked_root`]): not `/`, a system directory, another
/// user's home or your home itself, nor (inside) ctxhost's own `hidden` paths (contexts/, the
/// config file). Errors (usage): DIR does not exist, is not a directory, or is refused.
pub(super) fn workspace_dir(dir: &std::path::Path, hidden: &[PathBuf]) -> anyhow::Result<PathBuf> {
    let abs = std::path::absolute(dir)
        .map_err(|e| usage(format!("--workspace {}: {e}", dir.display())))?;
    match std::fs::metadata(&abs) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(usage(format!(
                "--workspace {}: not a directory",
                abs.display()
            )));
        }
        Err(e) => return Err(usage(format!("--workspace {}: {e}", abs.display()))),
    }
    crate::tools::builtin::workspace::checked_root(&abs, hidden)
        .map_err(|why| usage(format!("--workspace {}: {why}", dir.display())))
}

/// ctxhost's own paths, which no workspace may lie in: contexts/ and the config file.
pub(super) fn own_paths(env: &Env) -> Vec<PathBuf> {
    std::iter::once(env.layout.root().to_path_buf())
        .chain(env.config.loaded_from.clone())
        .collect()
}

fn task_key(args: &SubmitArgs) -> anyhow::Result<TaskKey> {
    let parts = crate::ops::submit::KeyParts {
        source: Some(match args.source {
            Source::Github => "github",
            Source::Gitlab => "gitlab",
            Source::Local => "local",
        }),
        owner: args.owner.as_deref(),
        repo: args.repo.as_deref(),
        task_type: args.task_type.map(|t| match t {
            TaskType::Issue => "issue",
            TaskType::PullRequest => "pull_request",
        }),
        id: args.id.as_deref(),
    };
    crate::ops::submit::task_key(&parts, |part| format!("--{part}"))
}

pub(super) fn run(env: &Env, args: &SubmitArgs) -> anyhow::Result<ExitCode> {
    let prompt = read_prompt(
        args.text.as_deref(),
        args.prompt.as_deref(),
        args.prompt_file.as_deref(),
    )?;
    let key = task_key(args)?;
    let user = match &args.user {
        Some(u) if u.trim().is_empty() => return Err(usage("--user must not be empty")),
        Some(u) => Some(u.trim().to_string()),
        None => std::env::var("USER").ok().filter(|u| !u.is_empty()),
    };
    let workspace = args
        .workspace
        .as_deref()
        .map(|d| workspace_dir(d, &own_paths(env)))
        .transpose()?;
    let submission = Submission {
        prompt,
        key,
        user,
        no_inherit: args.no_inherit,
        workspace,
    };
    let row = crate::ops::submit::submit(&env.config, &env.layout, submission)?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&row)?);
    } else {
        outln!("{}", row.uuid);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_file_that_is_not_text_is_refused_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        let nul = tmp.path().join("nul.txt");
        std::fs::write(&nul, "hi\0there").unwrap();
        let e = read_prompt(None, None, Some(&nul)).unwrap_err().to_string();
        assert!(
            e.contains(&format!("(from --prompt-file {})", nul.display()))
                && e.contains("NUL byte (at offset 2)"),
            "{e}"
        );
        let bin = tmp.path().join("bin.dat");
        std::fs::write(&bin, b"ab\xff\xfe").unwrap();
        let e = read_prompt(None, None, Some(&bin)).unwrap_err().to_string();
        assert!(
            e.contains(&format!("(from --prompt-file {})", bin.display()))
                && e.contains("not UTF-8 text (invalid byte at offset 2)"),
            "{e}"
        );
        assert_eq!(read_prompt(Some("ok"), None, None).unwrap(), "ok");
    }
}
