//! Tools over MCP (DESIGN §4 step 3): the task's MCP servers, the tool definitions offered to the
//! model, and calling a tool (recording it in tools.jsonl is the task's
//! [`crate::task::ToolStore`]).
//!
//! - [`config`]: `mcp_servers` / `tools` config sections.
//! - [`server`]: one MCP server over stdio (rmcp client).
//! - [`registry`]: all servers of a task, tool naming and routing, `tools.json` for the request.
//! - [`naming`]: unique OpenAI names for tools of several servers.
//! - [`bound`] (re-exported from [`crate::bound`], below [`crate::history`] too): cutting long output on a character boundary.
//! - [`runner`]: [`ToolRunner`], the agent loop's seam for tools: [`McpTools`] over all of the
//!   above, or [`NoTools`].
//! - [`history`]: [`HistoryTools`], the host's own `history_search` / `history_read` over the
//!   task's history, wrapped around either once the context was compressed.
//!
//! The task process creates one [`McpTools`] when `mcp_servers` is configured: it starts the
//! servers, writes `tools.json` for the request format, runs each call, and stops the servers
//! when dropped.

pub use crate::bound;
pub mod builtin;
pub mod config;
pub mod error;
pub mod history;
pub mod naming;
pub mod registry;
pub mod runner;
pub mod server;

pub use builtin::BuiltinTools;
pub use config::{McpServerConfig, SandboxMode, ToolsConfig};
pub use error::ToolError;
pub use history::HistoryTools;
pub use registry::{TOOL_DEFINITIONS_FILE, ToolInfo, ToolRegistry};
pub use runner::{McpTools, NoTools, ToolRunner, no_such_tool_text};
pub use server::Confinement;

/// What a tool call produced, before it is bounded and recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallOutcome {
    /// The tool's result text.
    Success(String),
    /// Why the call failed, for the model: the tool's own `isError` content, or the host's
    /// message (unknown tool, invalid arguments, timeout, server-side rejection).
    Error(String),
}

impl CallOutcome {
    /// The result or error text.
    pub fn text(&self) -> &str {
        match self {
            CallOutcome::Success(t) | CallOutcome::Error(t) => t,
        }
    }

    /// True for [`CallOutcome::Error`].
    pub fn is_error(&self) -> bool {
        matches!(self, CallOutcome::Error(_))
    }
}
