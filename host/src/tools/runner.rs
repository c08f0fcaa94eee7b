//! [`McpTools`]: the agent loop's [`ToolRunner`] for a task with `mcp_servers` configured.

use std::collections::BTreeMap;
use std::path::Path;

use ctxhost_format::{ChatMessage, ToolCall};

use super::{McpServerConfig, ToolError, ToolJournal, ToolRegistry, ToolsConfig};
use crate::agent::ToolRunner;

/// The task's MCP servers and its tools.jsonl. Dropping it stops the servers (task end,
/// failure, pause).
pub struct McpTools {
    registry: ToolRegistry,
    journal: ToolJournal,
    tools_file: Option<String>,
}

impl McpTools {
    /// Start `servers`, write their tool definitions to `task_dir/tools.json` and open
    /// `task_dir/tools.jsonl`. Errors: a server that does not start ([`ToolError::Start`],
    /// naming it and its command), files of the task directory ([`ToolError::Io`]).
    pub fn start(
        servers: &BTreeMap<String, McpServerConfig>,
        config: &ToolsConfig,
        task_dir: &Path,
    ) -> Result<McpTools, ToolError> {
        let registry = ToolRegistry::start(servers, config)?;
        let tools_file = registry.write_tools_file(task_dir)?;
        let journal = ToolJournal::open(task_dir, config.max_tool_output_tokens)?;
        tracing::info!(
            servers = servers.len(),
            tools = registry.tools().len(),
            "MCP tools ready"
        );
        Ok(McpTools {
            registry,
            journal,
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

    fn run(&mut self, call: &ToolCall) -> anyhow::Result<ChatMessage> {
        let recorded = self.journal.run(&mut self.registry, call)?;
        Ok(recorded.to_message(call))
    }

    fn sync(&mut self) -> anyhow::Result<()> {
        Ok(self.journal.sync()?)
    }
}
