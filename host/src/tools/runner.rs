//! [`ToolRunner`]: the agent loop's seam for tools (it makes one tool call; the task's
//! [`crate::task::ToolStore`] records it). [`McpTools`] runs the calls of a task with
//! `mcp_servers` configured; a task without gets [`NoTools`]: every call is answered with an
//! error result (`error: no such tool "X" (no tools are configured)`), recorded in tools.jsonl
//! with status `error`, so the model learns the tool does not exist and the task goes on.

use crate::task_dir::TaskDir;
use std::collections::BTreeMap;

use ctxhost_format::ToolCall;

use super::{CallOutcome, McpServerConfig, ToolError, ToolRegistry, ToolsConfig};

/// Makes the model's tool calls for the agent loop.
pub trait ToolRunner {
    /// Path (relative to the task directory) of a JSON array of OpenAI tool definitions to
    /// offer in every request, or `None` when no tools are offered.
    fn tools_file(&self) -> Option<String>;

    /// Make `call` and return what it produced. A failing tool is not an error: its
    /// [`CallOutcome::Error`] says what failed. `Err` only when the task cannot go on (e.g. the
    /// tool's server is gone).
    fn call(&mut self, call: &ToolCall) -> Result<CallOutcome, ToolError>;

    /// The names of the tools this runner answers (the wrapped runners' too), in the order
    /// offered: what a call of an unknown tool is told exists. Default: none.
    fn tool_names(&self) -> Vec<String> {
        Vec::new()
    }

    /// The cap of one result in the context (estimated tokens), set by the agent loop when it
    /// knows the window: a runner that bounds its own output to it may use it. Default: ignored.
    fn set_max_output_tokens(&mut self, _max_output_tokens: u64) {}

    /// Estimated tokens of the definitions (in [`ToolRunner::tools_file`]) of tools the host
    /// answers itself: they take their share of the window, not of one tool result's cap, so
    /// results keep their size when such tools are added mid-task. Default: 0.
    fn host_definition_tokens(&self) -> u64 {
        0
    }

    /// The task's context was just compressed (a new context installed). Default: nothing.
    /// Errors: the runner's files ([`ToolError::Io`]).
    fn context_compressed(&mut self) -> Result<(), ToolError> {
        Ok(())
    }
}

/// The tool runner of a task without tools: every call gets a "no such tool" error result.
#[derive(Debug, Default)]
pub struct NoTools;

/// The result text given to the model for a call of the unknown tool `name` when the task's
/// tools are `names` (all of them: MCP, built-in, history): `error: no such tool "X"; the
/// tools of this task are: a, b`, or `error: no such tool "X" (no tools are configured)`.
pub fn no_such_tool_text(name: &str, names: &[String]) -> String {
    if names.is_empty() {
        format!("error: no such tool {name:?} (no tools are configured)")
    } else {
        format!(
            "error: no such tool {name:?}; the tools of this task are: {}",
            names.join(", ")
        )
    }
}

/// For a runner that wraps `inner`, called with a tool `name` it does not answer itself: when
/// `inner` has no such tool either, the answer naming every tool of the task (`all`: the
/// wrapper's [`ToolRunner::tool_names`]); `None`: `inner` has it, call it.
pub fn unknown_to_both(
    inner: &dyn ToolRunner,
    name: &str,
    all: impl FnOnce() -> Vec<String>,
) -> Option<CallOutcome> {
    if inner.tool_names().iter().any(|n| n == name) {
        return None;
    }
    Some(CallOutcome::Error(no_such_tool_text(name, &all())))
}

impl ToolRunner for NoTools {
    fn tools_file(&self) -> Option<String> {
        None
    }

    fn call(&mut self, call: &ToolCall) -> Result<CallOutcome, ToolError> {
        Ok(CallOutcome::Error(no_such_tool_text(
            &call.function.name,
            &[],
        )))
    }
}

/// The task's MCP servers. Dropping it stops the servers (task end, failure, pause).
pub struct McpTools {
    registry: ToolRegistry,
    tools_file: Option<String>,
}

impl McpTools {
    /// Start `servers` and write their tool definitions to tools.json of the task directory
    /// `task_dir`. Errors: a server that does not start ([`ToolError::Start`], naming it and its
    /// command), files of the task directory ([`ToolError::Io`]).
    pub fn start(
        servers: &BTreeMap<String, McpServerConfig>,
        config: &ToolsConfig,
        task_dir: &TaskDir,
        confinement: &super::server::Confinement,
    ) -> Result<McpTools, ToolError> {
        let registry = ToolRegistry::start(servers, config, confinement)?;
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

    /// Calls that give way to a pause or stop of the task at once
    /// ([`ToolRegistry::interruptible`]).
    pub fn interruptible(mut self, probe: crate::interrupt::InterruptProbe) -> McpTools {
        self.registry.interruptible(probe);
        self
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

    fn tool_names(&self) -> Vec<String> {
        self.registry
            .tools()
            .iter()
            .map(|t| t.name.clone())
            .collect()
    }

    fn call(&mut self, call: &ToolCall) -> Result<CallOutcome, ToolError> {
        self.registry
            .call(&call.function.name, &call.function.arguments)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::ToolStore;
    use ctxhost_format::files::TOOLS;
    use ctxhost_format::{ToolLine, ToolStatus};

    #[test]
    fn no_tools_answers_and_each_call_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let mut store =
            ToolStore::open(&crate::task_dir::TaskDir::open(dir.path()).unwrap(), 1000).unwrap();
        let mut tools = NoTools;
        let call = ToolCall::new("call_1", "read_file", r#"{"path":"a"}"#);
        let m = store
            .run(&call, |c| tools.call(c))
            .unwrap()
            .to_message(&call);
        assert_eq!(m.role, "tool");
        assert_eq!(m.tool_call_id.as_deref(), Some("call_1"));
        assert_eq!(
            m.content.as_deref(),
            Some(r#"error: no such tool "read_file" (no tools are configured)"#)
        );
        let call = ToolCall::new("call_2", "x", "not json");
        store.run(&call, |c| tools.call(c)).unwrap();
        drop(store);
        let mut again =
            ToolStore::open(&crate::task_dir::TaskDir::open(dir.path()).unwrap(), 1000).unwrap();
        let call = ToolCall::new("call_3", "y", "{}");
        again.run(&call, |c| tools.call(c)).unwrap();
        let text = std::fs::read_to_string(dir.path().join(TOOLS)).unwrap();
        let lines: Vec<ToolLine> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.iter().map(|l| l.seq).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(lines[0].args, serde_json::json!({"path": "a"}));
        assert_eq!(lines[1].args, serde_json::Value::String("not json".into()));
        assert!(lines.iter().all(|l| l.status == ToolStatus::Error));
    }
}
