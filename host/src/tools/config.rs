//! Configuration of the tools layer: the `mcp_servers` and `tools` sections of config.yaml.
//!
//! `mcp_servers` has the shape operators know from other MCP clients:
//! ```yaml
//! mcp_servers:
//!   fs:
//!     command: node_modules/.bin/mcp-server-filesystem
//!     args: ["./sample"]
//!     env: { LOG_LEVEL: info }     # optional
//!     cwd: /srv/project            # optional
//! tools:
//!   max_tool_output_tokens: 4000
//!   call_timeout_secs: 60
//!   start_timeout_secs: 30
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One MCP server, started over stdio (`mcp_servers.NAME` in config.yaml).
///
/// The server sees only the environment in `env` plus the host's `PATH` and `HOME`: nothing
/// else of the host's environment (in particular not the LLM API key) is passed on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// Program to run: a path, or a name looked up in `PATH`.
    pub command: String,
    /// Arguments, passed as given (no shell).
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment variables for the server (values taken literally).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory of the server; the task process's own when absent (the task's
    /// workspace when `sandbox` is on).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Start the server inside the built-in tools' kernel sandbox ([`crate::sandbox`]): it
    /// may write only the task's workspace, a temp dir of its own and `write_paths`, read
    /// those and the system paths and `tools.read_paths`, with `tools.limits`. Default false.
    #[serde(default)]
    pub sandbox: bool,
    /// Directories a sandboxed server may also write (they must exist).
    #[serde(default)]
    pub write_paths: Vec<PathBuf>,
    /// Whether a sandboxed server may use the network; default `tools.network`.
    #[serde(default)]
    pub network: Option<bool>,
}

impl McpServerConfig {
    /// `command arg1 arg2 ...`, for error messages (arguments with spaces are quoted).
    pub fn command_line(&self) -> String {
        let mut s = quote(&self.command);
        for a in &self.args {
            s.push(' ');
            s.push_str(&quote(a));
        }
        s
    }
}

fn quote(s: &str) -> String {
    if !s.is_empty() && !s.contains([' ', '\t', '"', '\'']) {
        s.to_string()
    } else {
        format!("{s:?}")
    }
}

/// The `tools` section of config.yaml. Every key has a default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ToolsConfig {
    /// A tool result longer than this (estimated tokens, see `ctxhost_format::estimate_tokens`)
    /// is cut for the context; the full text is kept in `tool-results/{seq}.txt`. Default 4000.
    pub max_tool_output_tokens: u64,
    /// Deadline of one tool call, in seconds; a call that exceeds it is cancelled and answered
    /// with an error result. Default 60.
    pub call_timeout_secs: u64,
    /// Deadline for a server to start and answer `initialize` and `tools/list`, in seconds.
    /// Default 30.
    pub start_timeout_secs: u64,
    /// Offer the built-in tools (`read_file`, `list_files`, `search_files`, `write_file`,
    /// `edit_file`, `shell`) to tasks with a workspace. Default true.
    pub builtin: bool,
    /// `on` (default): `shell` runs in the kernel sandbox ([`crate::sandbox`]) and `shell` and
    /// the write tools refuse to run where the kernel cannot give it; `off`: unconfined.
    pub sandbox: SandboxMode,
    /// Whether `shell` commands may use the network. Default false (a network namespace with
    /// only a down loopback, and Landlock denying TCP).
    pub network: bool,
    /// Paths `shell` commands may read and execute besides /usr, /lib, /lib64, /bin, /sbin,
    /// /etc (toolchains such as ~/.cargo or ~/.pyenv). Default none.
    pub read_paths: Vec<PathBuf>,
    /// Resource limits of each `shell` command.
    pub limits: crate::sandbox::Limits,
    /// Largest `timeout_secs` a `shell` call may ask for, seconds (its default is
    /// `call_timeout_secs`). Default 1800.
    pub shell_max_timeout_secs: u64,
}

/// `tools.sandbox`: whether the built-in tools are confined by the kernel.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// Confined; refuse to run `shell` and the write tools where the kernel cannot confine.
    #[default]
    On,
    /// Not confined (the operator's explicit choice).
    Off,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig {
            max_tool_output_tokens: 4000,
            call_timeout_secs: 60,
            start_timeout_secs: 30,
            builtin: true,
            sandbox: SandboxMode::On,
            network: false,
            read_paths: Vec::new(),
            limits: crate::sandbox::Limits::default(),
            shell_max_timeout_secs: 1800,
        }
    }
}

impl ToolsConfig {
    /// [`ToolsConfig::call_timeout_secs`] as a duration.
    pub fn call_timeout(&self) -> Duration {
        Duration::from_secs(self.call_timeout_secs)
    }

    /// [`ToolsConfig::start_timeout_secs`] as a duration.
    pub fn start_timeout(&self) -> Duration {
        Duration::from_secs(self.start_timeout_secs)
    }
}

/// Check `mcp_servers` and `tools` (called by `Config::validate`). `Err((key, message))`
/// names the config key, e.g. `("mcp_servers.fs.command", "must not be empty")`.
pub fn validate(
    servers: &BTreeMap<String, McpServerConfig>,
    tools: &ToolsConfig,
) -> Result<(), (String, String)> {
    for (name, server) in servers {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err((
                format!("mcp_servers.{name}"),
                "server names must be letters, digits, _ and - (they may prefix tool names)".into(),
            ));
        }
        if server.command.trim().is_empty() {
            return Err((
                format!("mcp_servers.{name}.command"),
                "must not be empty".into(),
            ));
        }
    }
    for (key, v) in [
        ("tools.max_tool_output_tokens", tools.max_tool_output_tokens),
        ("tools.call_timeout_secs", tools.call_timeout_secs),
        ("tools.start_timeout_secs", tools.start_timeout_secs),
        ("tools.shell_max_timeout_secs", tools.shell_max_timeout_secs),
        ("tools.limits.cpu_secs", tools.limits.cpu_secs),
        ("tools.limits.file_size_mib", tools.limits.file_size_mib),
        ("tools.limits.memory_mib", tools.limits.memory_mib),
        ("tools.limits.processes", tools.limits.processes),
    ] {
        if v < 1 {
            return Err((key.to_string(), "must be at least 1, got 0".into()));
        }
    }
    if tools.max_tool_output_tokens < 2 * crate::bound::NOTE_RESERVE_TOKENS {
        return Err((
            "tools.max_tool_output_tokens".into(),
            format!(
                "must be at least {} (room for the cut note), got {}",
                2 * crate::bound::NOTE_RESERVE_TOKENS,
                tools.max_tool_output_tokens
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_usual_mcp_client_shape() {
        let yaml = "fs:\n  command: npx\n  args: [\"-y\", \"server\", \"/tmp/my dir\"]\n  env:\n    A: b\n";
        let servers: BTreeMap<String, McpServerConfig> = serde_norway::from_str(yaml).unwrap();
        let fs = &servers["fs"];
        assert_eq!(fs.command, "npx");
        assert_eq!(fs.env["A"], "b");
        assert_eq!(fs.cwd, None);
        assert_eq!(fs.command_line(), "npx -y server \"/tmp/my dir\"");
    }

    #[test]
    fn rejects_unknown_keys() {
        let err = serde_norway::from_str::<McpServerConfig>("command: x\nargz: []\n").unwrap_err();
        assert!(err.to_string().contains("argz"), "{err}");
        let err = serde_norway::from_str::<ToolsConfig>("max_output: 3\n").unwrap_err();
        assert!(err.to_string().contains("max_output"), "{err}");
    }

    #[test]
    fn validate_names_the_key() {
        let ok = ToolsConfig::default();
        assert_eq!(validate(&BTreeMap::new(), &ok), Ok(()));
        let server = |command: &str| McpServerConfig {
            command: command.into(),
            args: vec![],
            env: BTreeMap::new(),
            cwd: None,
            ..Default::default()
        };
        let servers = BTreeMap::from([("fs".to_string(), server(" "))]);
        assert_eq!(
            validate(&servers, &ok).unwrap_err().0,
            "mcp_servers.fs.command"
        );
        let servers = BTreeMap::from([("my server".to_string(), server("x"))]);
        assert_eq!(
            validate(&servers, &ok).unwrap_err().0,
            "mcp_servers.my server"
        );
        let zero = ToolsConfig {
            call_timeout_secs: 0,
            ..ok.clone()
        };
        assert_eq!(
            validate(&BTreeMap::new(), &zero).unwrap_err().0,
            "tools.call_timeout_secs"
        );
        let tiny = ToolsConfig {
            max_tool_output_tokens: 10,
            ..ok
        };
        assert_eq!(
            validate(&BTreeMap::new(), &tiny).unwrap_err().0,
            "tools.max_tool_output_tokens"
        );
    }

    #[test]
    fn sandbox_on_and_off_parse_as_words() {
        let t: ToolsConfig = serde_norway::from_str("sandbox: off\nnetwork: true\n").unwrap();
        assert_eq!(t.sandbox, SandboxMode::Off);
        assert!(t.network);
        let t: ToolsConfig = serde_norway::from_str("sandbox: on\n").unwrap();
        assert_eq!(t.sandbox, SandboxMode::On);
        assert_eq!(ToolsConfig::default().sandbox, SandboxMode::On);
        let err = serde_norway::from_str::<ToolsConfig>("limits: {cpu: 3}\n").unwrap_err();
        assert!(err.to_string().contains("cpu"), "{err}");
    }

    #[test]
    fn tools_defaults_fill_missing_keys() {
        let t: ToolsConfig = serde_norway::from_str("call_timeout_secs: 5\n").unwrap();
        assert_eq!(t.call_timeout(), Duration::from_secs(5));
        assert_eq!(t.max_tool_output_tokens, 4000);
    }
}
