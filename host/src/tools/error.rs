//! Errors of the tools layer that end a task (a tool's own failure is not one of them: it goes
//! back to the model as an error result, see [`super::CallOutcome`]).

use std::path::PathBuf;

/// A failure of the tools layer itself. `Display` names the server and its command line, or the
/// file, so the task's `error_message` says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// A configured server could not be started or did not complete the MCP handshake and
    /// `tools/list` (bad command, crash on start, timeout).
    #[error("MCP server `{server}` (command `{command}`) failed to start: {message}")]
    Start {
        /// The server (its key under `mcp_servers`).
        server: String,
        /// Its command line.
        command: String,
        /// What happened.
        message: String,
    },
    /// A running server exited or broke the connection; its tools are gone.
    #[error("MCP server `{server}` (command `{command}`) stopped working{during}: {message}")]
    Died {
        /// The server (its key under `mcp_servers`).
        server: String,
        /// Its command line.
        command: String,
        /// What it was doing, e.g. ` during a call of read_file`.
        during: String,
        /// What happened.
        message: String,
    },
    /// The configuration cannot be used (names the config key).
    #[error("config key `{key}`: {message}")]
    Config {
        /// The config key.
        key: String,
        /// What happened.
        message: String,
    },
    /// Reading or writing a file of the task directory failed.
    #[error("{}: {message}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What happened.
        message: String,
    },
    /// The async runtime that drives the servers could not be created.
    #[error("cannot start the runtime for MCP servers: {0}")]
    Runtime(String),
}

impl ToolError {
    /// An [`ToolError::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, err: impl std::fmt::Display) -> ToolError {
        ToolError::Io {
            path: path.into(),
            message: err.to_string(),
        }
    }
}
