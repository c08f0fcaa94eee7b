//! The built-in coding tools (issue 39), answered by the host like `history_search`:
//! `read_file`, `list_files`, `search_files`, `write_file`, `edit_file` and `shell`, working on
//! the task's workspace.
//!
//! - File tools run in the host through capability handles ([`workspace`]): only the workspace
//!   and the task's temp dir, never a link out, never ctxhost's own contexts/ or config.
//! - `shell` runs `sh -c` in the kernel sandbox ([`crate::sandbox`]); a pause or stop of the
//!   task ends it at once (its whole process group, its PID namespace).
//! - With `tools.sandbox: on` (the default) `shell`, `write_file` and `edit_file` refuse to run
//!   where the kernel cannot confine them, naming what is missing.
//!
//! [`BuiltinTools`] wraps the task's other [`ToolRunner`] (MCP or none): tools.json gets the
//! wrapped runner's definitions plus these (an MCP tool of the same name keeps it); the agent
//! loop records each call in tools.jsonl and bounds its result ([`crate::task::ToolStore`]).

pub mod files;
pub mod find;
pub mod workspace;

use std::path::{Path, PathBuf};
use std::time::Duration;

use ctxhost_format::ToolCall;
use ctxhost_format::files::TOOL_DEFINITIONS as TOOLS_JSON;
use serde_json::{Map, Value, json};

use super::registry::parse_host_arguments;
use super::{CallOutcome, ToolError, ToolRunner, ToolsConfig};
use crate::sandbox::{self, Ended, Policy};
use crate::task_dir::TaskDir;
use workspace::Workspace;

/// The tools' names, as prompts and clients rely on them.
pub const NAMES: [&str; 6] = [
    "read_file",
    "list_files",
    "search_files",
    "write_file",
    "edit_file",
    "shell",
];

/// The tools' OpenAI definitions.
pub fn definitions() -> Vec<Value> {
    let f = |name: &str, description: &str, properties: Value, required: &[&str]| {
        json!({"type": "function", "function": {
            "name": name, "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required}
        }})
    };
    vec![
        f(
            "read_file",
            "Read a text file of the workspace, lines numbered (binary files are named, not shown).",
            json!({
                "path": {"type": "string", "description": "relative to the workspace"},
                "offset": {"type": "integer", "description": "first line, from 1"},
                "limit": {"type": "integer", "description": "lines to read (default 2000)"}
            }),
            &["path"],
        ),
        f(
            "list_files",
            "List files under a directory of the workspace (honours .gitignore).",
            json!({
                "path": {"type": "string", "description": "directory (default the workspace)"},
                "glob": {"type": "string", "description": "e.g. **/*.py"}
            }),
            &[],
        ),
        f(
            "search_files",
            "Search file contents under a directory of the workspace; prints file:line:text.",
            json!({
                "pattern": {"type": "string", "description": "a regex, or a literal with literal=true"},
                "literal": {"type": "boolean"},
                "case_insensitive": {"type": "boolean"},
                "path": {"type": "string", "description": "directory (default the workspace)"},
                "glob": {"type": "string", "description": "only files matching, e.g. *.rs"}
            }),
            &["pattern"],
        ),
        f(
            "write_file",
            "Create or overwrite a file of the workspace with the given content.",
            json!({
                "path": {"type": "string"},
                "content": {"type": "string"}
            }),
            &["path", "content"],
        ),
        f(
            "edit_file",
            "Replace old_string by new_string in a file; old_string must occur exactly once unless replace_all.",
            json!({
                "path": {"type": "string"},
                "old_string": {"type": "string"},
                "new_string": {"type": "string"},
                "replace_all": {"type": "boolean"}
            }),
            &["path", "old_string", "new_string"],
        ),
        f(
            "shell",
            "Run a command with sh -c in the workspace (sandboxed; no network by default).",
            json!({
                "command": {"type": "string"},
                "timeout_secs": {"type": "integer", "description": "default 60"}
            }),
            &["command"],
        ),
    ]
}

/// Estimated tokens of [`definitions`] as tools.json holds them.
pub fn definition_tokens() -> u64 {
    ctxhost_format::estimate_tokens(
        &serde_json::to_string_pretty(&definitions()).unwrap_or_default(),
    )
}

/// Where the built-in tools of a task work and how they are confined.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The task's workspace.
    pub workspace: PathBuf,
    /// Paths no tool may touch even inside the workspace: the contexts/ directory and the
    /// config file.
    pub hidden: Vec<PathBuf>,
    /// The `tools` config section.
    pub config: ToolsConfig,
    /// Redacted from every result (the LLM API key).
    pub secret: Option<String>,
    /// Directories outside the workspace `shell` may also read (and execute) and write: a
    /// managed worktree's own administrative directory in its mirror (`git rev-parse
    /// --git-dir`), so git works in it. Empty for any other workspace.
    pub git_write: Vec<PathBuf>,
    /// Directories outside the workspace `shell` may read: a managed worktree's mirror (`git
    /// rev-parse --git-common-dir`: objects, refs, its config; never its hooks' writes).
    pub git_read: Vec<PathBuf>,
}

/// Whether the task was asked to pause or stop (read from the task's row; polled while a
/// `shell` command runs).
pub type Interrupted = Box<dyn Fn() -> bool + Send + Sync>;

/// The task's tool runner with the built-in tools added.
pub struct BuiltinTools {
    inner: Box<dyn ToolRunner>,
    ws: Workspace,
    /// The task's temp dir, removed when the tools are dropped.
    _temp: tempfile::TempDir,
    policy: Policy,
    config: ToolsConfig,
    secret: Option<String>,
    /// Names offered (those no MCP tool already has).
    offered: Vec<&'static str>,
    /// Why the confining tools refuse (the sandbox is on and the kernel lacks something).
    refused: Option<String>,
    interrupted: Option<Interrupted>,
    tools_file: Option<String>,
}

impl BuiltinTools {
    /// Wrap `inner` for the task in `dir`, working on `setup.workspace` (which must be a
    /// directory), with a new temp dir. Probes the sandbox once (when on). Errors: the
    /// workspace cannot be opened, tools.json cannot be written ([`ToolError::Io`]).
    pub fn new(
        inner: Box<dyn ToolRunner>,
        dir: &TaskDir,
        setup: Setup,
        interrupted: Option<Interrupted>,
    ) -> Result<BuiltinTools, ToolError> {
        let temp = tempfile::Builder::new()
            .prefix("ctxhost-task-")
            .tempdir()
            .map_err(|e| ToolError::io(std::env::temp_dir(), e))?;
        let ws = Workspace::open(&setup.workspace, temp.path(), &setup.hidden)
            .map_err(|e| ToolError::io(&setup.workspace, e))?;
        let enforce = setup.config.sandbox == super::config::SandboxMode::On;
        let policy = Policy {
            workspace: ws.root().to_path_buf(),
            temp_dir: ws.temp_root().to_path_buf(),
            write_paths: setup.git_write.clone(),
            read_paths: setup
                .config
                .read_paths
                .iter()
                .chain(&setup.git_read)
                .cloned()
                .collect(),
            hidden: ws
                .hidden()
                .iter()
                .filter(|h| ws.contains(h))
                .cloned()
                .collect(),
            network: setup.config.network,
            limits: setup.config.limits.clone(),
            enforce,
        };
        let refused = if enforce {
            sandbox::probe().missing()
        } else {
            tracing::warn!("tools.sandbox is off: shell commands run unconfined");
            None
        };
        if let Some(why) = &refused {
            tracing::warn!("shell, write_file and edit_file will refuse: {why}");
        }
        let mut tools = BuiltinTools {
            inner,
            ws,
            _temp: temp,
            policy,
            config: setup.config,
            secret: setup.secret,
            offered: Vec::new(),
            refused,
            interrupted,
            tools_file: None,
        };
        tools.write_definitions(dir)?;
        Ok(tools)
    }

    /// The workspace (canonical).
    pub fn workspace(&self) -> &Path {
        self.ws.root()
    }

    /// tools.json: the wrapped runner's definitions plus the built-in ones no MCP tool has.
    fn write_definitions(&mut self, dir: &TaskDir) -> Result<(), ToolError> {
        let mut tools: Vec<Value> = match self.inner.tools_file() {
            Some(f) => {
                let path = dir.file_path(&f);
                let bytes = dir
                    .read_bounded(&f, 64 * 1024 * 1024)
                    .map_err(|e| ToolError::io(&path, e))?;
                serde_json::from_slice(&bytes).map_err(|e| ToolError::io(&path, e))?
            }
            None => Vec::new(),
        };
        let taken: Vec<String> = tools
            .iter()
            .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
            .collect();
        for def in definitions() {
            let name = def["function"]["name"].as_str().unwrap_or_default();
            match NAMES.iter().find(|n| **n == name) {
                Some(n) if !taken.iter().any(|t| t == n) => {
                    self.offered.push(n);
                    tools.push(def);
                }
                _ => tracing::warn!(
                    "an MCP tool is named `{name}`: the built-in tool of that name is not offered"
                ),
            }
        }
        let path = dir.file_path(TOOLS_JSON);
        let text = serde_json::to_vec_pretty(&tools).map_err(|e| ToolError::io(&path, e))?;
        dir.write_atomic(TOOLS_JSON, &text)
            .map_err(|e| ToolError::io(&path, e))?;
        self.tools_file = Some(TOOLS_JSON.to_string());
        tracing::info!(workspace = %self.ws.root().display(), tools = ?self.offered, "built-in tools offered");
        Ok(())
    }

    fn answer(&self, name: &str, a: &Map<String, Value>) -> Result<String, String> {
        if matches!(name, "write_file" | "edit_file" | "shell")
            && let Some(why) = &self.refused
        {
            return Err(format!("refused: {why}"));
        }
        match name {
            "read_file" => files::read(
                &self.ws,
                req_str(a, "path")?,
                opt_u64(a, "offset")?.unwrap_or(1),
                opt_u64(a, "limit")?.unwrap_or(files::DEFAULT_READ_LINES),
            ),
            "list_files" => find::list(
                &self.ws,
                opt_str(a, "path")?.unwrap_or("."),
                opt_str(a, "glob")?,
            ),
            "search_files" => find::search(
                &self.ws,
                req_str(a, "pattern")?,
                opt_bool(a, "literal")?.unwrap_or(false),
                opt_bool(a, "case_insensitive")?.unwrap_or(false),
                opt_str(a, "path")?.unwrap_or("."),
                opt_str(a, "glob")?,
            ),
            "write_file" => files::write(&self.ws, req_str(a, "path")?, req_str(a, "content")?),
            "edit_file" => files::edit(
                &self.ws,
                req_str(a, "path")?,
                req_str(a, "old_string")?,
                req_str(a, "new_string")?,
                opt_bool(a, "replace_all")?.unwrap_or(false),
            ),
            _ => self.shell(req_str(a, "command")?, opt_u64(a, "timeout_secs")?),
        }
    }

    /// `shell`: the command's output, then how it ended. A non-zero exit, a timeout or an
    /// interruption is an error result.
    fn shell(&self, command: &str, timeout_secs: Option<u64>) -> Result<String, String> {
        let secs = timeout_secs
            .unwrap_or(self.config.call_timeout_secs)
            .clamp(1, self.config.shell_max_timeout_secs);
        let interrupted = || self.interrupted.as_ref().is_some_and(|asked| asked());
        let done = sandbox::run(
            &self.policy,
            command,
            Duration::from_secs(secs),
            &interrupted,
        )
        .map_err(|e| e.to_string())?;
        let mut out = String::from_utf8_lossy(&done.output).into_owned();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        let secs_taken = done.elapsed.as_secs_f64();
        match done.ended {
            Ended::Exited(0) => {
                out.push_str(&format!("[exit code 0, {secs_taken:.1} s]"));
                Ok(out)
            }
            Ended::Exited(code) => {
                let why = match code {
                    137 => " (killed: SIGKILL, e.g. a limit)",
                    152 => " (CPU time limit)",
                    153 => " (file size limit)",
                    _ => "",
                };
                out.push_str(&format!("[exit code {code}{why}, {secs_taken:.1} s]"));
                Err(out)
            }
            Ended::TimedOut => {
                out.push_str(&format!(
                    "[timed out after {secs} s: the command and everything it started were killed]"
                ));
                Err(out)
            }
            Ended::Interrupted => {
                out.push_str(&format!(
                    "[interrupted by pause/stop after {secs_taken:.1} s: the command and everything it started were killed]"
                ));
                Err(out)
            }
        }
    }
}

fn req_str<'a>(a: &'a Map<String, Value>, key: &str) -> Result<&'a str, String> {
    opt_str(a, key)?.ok_or_else(|| format!("`{key}` (a string) is required"))
}

fn opt_str<'a>(a: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, String> {
    match a.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(format!("`{key}` must be a string, got {v}")),
    }
}

fn opt_u64(a: &Map<String, Value>, key: &str) -> Result<Option<u64>, String> {
    match a.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{key}` must be a non-negative integer, got {v}")),
    }
}

fn opt_bool(a: &Map<String, Value>, key: &str) -> Result<Option<bool>, String> {
    match a.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(format!("`{key}` must be true or false, got {v}")),
    }
}

impl ToolRunner for BuiltinTools {
    fn tools_file(&self) -> Option<String> {
        self.tools_file.clone()
    }

    fn tool_names(&self) -> Vec<String> {
        let mut names = self.inner.tool_names();
        names.extend(self.offered.iter().map(|n| n.to_string()));
        names
    }

    fn call(&mut self, call: &ToolCall) -> Result<CallOutcome, ToolError> {
        let name = call.function.name.as_str();
        if !self.offered.contains(&name) {
            if let Some(unknown) =
                super::runner::unknown_to_both(self.inner.as_ref(), name, || self.tool_names())
            {
                return Ok(unknown);
            }
            return self.inner.call(call);
        }
        let definition = definitions()
            .into_iter()
            .find(|d| d["function"]["name"] == name)
            .unwrap_or_default();
        let result = parse_host_arguments(&call.function.arguments, &definition)
            .map_err(|m| format!("invalid arguments for tool `{name}`: {m}"))
            .and_then(|a| self.answer(name, &a));
        let redact = |t: &str| crate::llm::redact::redact(t, self.secret.as_deref());
        Ok(match result {
            Ok(t) => CallOutcome::Success(redact(&t)),
            Err(t) => CallOutcome::Error(redact(&format!("{name}: {t}"))),
        })
    }

    fn set_max_output_tokens(&mut self, max_output_tokens: u64) {
        self.inner.set_max_output_tokens(max_output_tokens);
    }

    fn host_definition_tokens(&self) -> u64 {
        definition_tokens() + self.inner.host_definition_tokens()
    }

    fn context_compressed(&mut self) -> Result<(), ToolError> {
        self.inner.context_compressed()
    }
}
