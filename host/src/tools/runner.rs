//! [`McpTools`]: the agent loop's [`ToolRunner`] for a task with `mcp_servers` configured.

use std::collections::BTreeMap;
use std::path::Path;

use ctxhost_format::ToolCall;

use super::{CallOutcome, McpServerConfig, ToolError, ToolRegistry, ToolsConfig};
use crate::agent::ToolRunner;

/// The task's MCP servers. Dropping it stops the servers (task end, failure, pause).
pub struct McpTools {
    registry: ToolRegistry,
    tools_file: Option<String>,
}

impl McpTools {
    /// Start `servers` and write their tool definitions to `task_dir/tools.json`. Errors: a
    /// server that does not start ([`ToolError::Start`], naming it and its command), files of
    /// the task directory ([`ToolError::Io`]).
    pub fn start(
        servers: &BTreeMap<String, McpServerConfig>,
        config: &ToolsConfig,
        task_dir: &Path,
    ) -> Result<McpTools, ToolError> {
        let registry = ToolRegistry::start(servers, config)?;
        let tools_file = registry.write_tools_file(task_dir)?;
        tracing::info!(
            servers = servers.len(),
            tools = registry.tools().len(),
            "MCP tools ready"
        );
        Ok(McpTools {
            registry,
            tools_file,
        })
    }

    /// The registry (tool list, direct calls).
    pub fn registry(&self) -> &ToolRegistry {
        &self.registry
    }
}

impl ToolRunner for McpTools {
    fn tools_file(&self) -> Option<String> {
        self.tools_file.clone()
    }

    fn call(&mut self, call: &ToolCall) -> Result<CallOutcome, ToolError> {
        self.registry
            .call(&call.function.name, &call.function.arguments)
    }
}
