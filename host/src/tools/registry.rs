//! The task's tools: every configured MCP server, started once per task process.
//!
//! The host is synchronous; the registry owns a small tokio runtime (one worker thread, so
//! server pipes are drained and a crash is noticed even between calls) and blocks on it. Tools
//! are offered under the names of [`super::naming`]; a call is routed to its server by that name.
//! Servers are stopped by [`ToolRegistry::close`] or when the registry is dropped (task end,
//! failure, pause).

use crate::task_dir::TaskDir;
use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value, json};

use super::server::McpServer;
use super::{CallOutcome, McpServerConfig, ToolError, ToolsConfig, naming};

/// File (in the task directory) holding the OpenAI tool definitions, for the request format's
/// `tools-file`.
pub const TOOL_DEFINITIONS_FILE: &str = ctxhost_format::files::TOOL_DEFINITIONS;

/// One tool as offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInfo {
    /// Name the model calls it by (unique across servers, see [`super::naming`]).
    pub name: String,
    /// The server that provides it (key under `mcp_servers`).
    pub server: String,
    /// Its name on that server.
    pub mcp_name: String,
    /// Its description, if the server gave one.
    pub description: Option<String>,
    /// JSON Schema of its arguments (an object schema).
    pub input_schema: Value,
}

/// Running MCP servers and the tools they offer.
pub struct ToolRegistry {
    runtime: Option<tokio::runtime::Runtime>,
    servers: Vec<McpServer>,
    tools: Vec<ToolInfo>,
    by_name: HashMap<String, usize>,
    /// Command line of each server, by name, for errors after the servers are gone.
    commands: HashMap<String, String>,
    config: ToolsConfig,
    /// Asked during a call: a pause or stop of the task interrupts it
    /// ([`ToolRegistry::interruptible`]).
    interrupt: Option<crate::interrupt::InterruptProbe>,
}

impl ToolRegistry {
    /// A registry without servers (no tools are offered; every call is an unknown tool).
    pub fn empty(config: &ToolsConfig) -> ToolRegistry {
        ToolRegistry {
            runtime: None,
            servers: Vec::new(),
            tools: Vec::new(),
            by_name: HashMap::new(),
            commands: HashMap::new(),
            config: config.clone(),
            interrupt: None,
        }
    }

    /// Calls that give way to a pause or stop of the task at once: `probe` is asked every
    /// [`super::server::INTERRUPT_POLL`] while a call runs; on a request the call is cancelled
    /// and its server's processes stopped ([`McpServer::call`]).
    pub fn interruptible(&mut self, probe: crate::interrupt::InterruptProbe) {
        self.interrupt = Some(probe);
    }

    /// Start every server of `servers` (in name order), list their tools and name them.
    /// On any failure the servers already started are stopped and the error names the server
    /// and its command ([`ToolError::Start`], [`ToolError::Config`]).
    pub fn start(
        servers: &BTreeMap<String, McpServerConfig>,
        config: &ToolsConfig,
        confinement: &super::server::Confinement,
    ) -> Result<ToolRegistry, ToolError> {
        let mut registry = ToolRegistry::empty(config);
        registry.commands = servers
            .iter()
            .map(|(n, c)| (n.clone(), c.command_line()))
            .collect();
        if servers.is_empty() {
            return Ok(registry);
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("ctxhost-mcp")
            .enable_all()
            .build()
            .map_err(|e| ToolError::Runtime(e.to_string()))?;
        for (name, server_config) in servers {
            // On error, `registry` is dropped, which stops the servers started so far.
            let server = runtime.block_on(McpServer::start(
                name,
                server_config,
                config.start_timeout(),
                confinement,
            ));
            match server {
                Ok(server) => registry.servers.push(server),
                Err(e) => {
                    registry.runtime = Some(runtime);
                    return Err(e);
                }
            }
        }
        registry.runtime = Some(runtime);
        registry.name_tools();
        Ok(registry)
    }

    fn name_tools(&mut self) {
        let pairs: Vec<(String, String)> = self
            .servers
            .iter()
            .flat_map(|s| {
                s.tools()
                    .iter()
                    .map(|t| (s.name().to_string(), t.name.to_string()))
            })
            .collect();
        let names = naming::exposed_names(&pairs);
        let descriptions = self.servers.iter().flat_map(|s| {
            s.tools().iter().map(|t| {
                let mut schema = Value::Object((*t.input_schema).clone());
                if let Some(o) = schema.as_object_mut() {
                    o.remove("$schema");
                    o.entry("type").or_insert_with(|| json!("object"));
                }
                (
                    t.description
                        .as_ref()
                        .map(|d| d.to_string())
                        .or_else(|| t.title.clone()),
                    schema,
                )
            })
        });
        self.tools = pairs
            .into_iter()
            .zip(names)
            .zip(descriptions)
            .map(
                |(((server, mcp_name), name), (description, input_schema))| ToolInfo {
                    name,
                    server,
                    mcp_name,
                    description,
                    input_schema,
                },
            )
            .collect();
        self.by_name = self
            .tools
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
    }

    /// True when no tool is offered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The offered tools, in server-name order then each server's order.
    pub fn tools(&self) -> &[ToolInfo] {
        &self.tools
    }

    /// The tools as an OpenAI `tools` array:
    /// `[{"type":"function","function":{"name","description","parameters"}}]`.
    pub fn openai_tools(&self) -> Value {
        Value::Array(
            self.tools
                .iter()
                .map(|t| {
                    let mut description = t.description.clone().unwrap_or_default();
                    if t.name != naming::sanitize(&t.mcp_name) {
                        description = format!(
                            "[{} on MCP server `{}`] {description}",
                            t.mcp_name, t.server
                        );
                    }
                    json!({
                        "type": "function",
                        "function": {
                            "name": t.name,
                            "description": description.trim_end(),
                            "parameters": t.input_schema,
                        }
                    })
                })
                .collect(),
        )
    }

    /// Write [`ToolRegistry::openai_tools`] to tools.json of the task directory `task_dir`
    /// (replaced atomically) and return the file name relative to the task directory, for
    /// `request-config.tools-file`; `None` (and no file) when no tool is offered.
    pub fn write_tools_file(&self, task_dir: &TaskDir) -> Result<Option<String>, ToolError> {
        if self.is_empty() {
            return Ok(None);
        }
        let path = task_dir.file_path(TOOL_DEFINITIONS_FILE);
        let text =
            serde_json::to_vec_pretty(&self.openai_tools()).map_err(|e| ToolError::io(&path, e))?;
        task_dir
            .write_atomic(TOOL_DEFINITIONS_FILE, &text)
            .map_err(|e| ToolError::io(&path, e))?;
        Ok(Some(TOOL_DEFINITIONS_FILE.to_string()))
    }

    /// Call tool `name` (an offered name) with `arguments` (JSON text as the model wrote it;
    /// empty or `null` means no arguments).
    ///
    /// Unknown tools, arguments that are not a JSON object, `isError` results, JSON-RPC errors
    /// and timeouts are `Ok(CallOutcome::Error(..))`, to go back to the model. `Err` only when the
    /// tool's server is gone ([`ToolError::Died`]): the task cannot go on without it.
    pub fn call(&mut self, name: &str, arguments: &str) -> Result<CallOutcome, ToolError> {
        let Some(&index) = self.by_name.get(name) else {
            return Ok(CallOutcome::Error(self.unknown_tool(name)));
        };
        let arguments = match parse_arguments(arguments) {
            Ok(a) => a,
            Err(message) => {
                return Ok(CallOutcome::Error(format!(
                    "invalid arguments for tool `{name}`: {message}"
                )));
            }
        };
        let tool = &self.tools[index];
        let server = self.servers.iter().find(|s| s.name() == tool.server);
        match (server, self.runtime.as_ref()) {
            (Some(server), Some(runtime)) => runtime.block_on(server.call(
                &tool.mcp_name,
                arguments,
                self.config.call_timeout(),
                self.interrupt.as_ref(),
            )),
            _ => Err(ToolError::Died {
                server: tool.server.clone(),
                command: self.commands.get(&tool.server).cloned().unwrap_or_default(),
                during: format!(" before the call of `{name}`"),
                message: "the task's MCP servers were already shut down".to_string(),
            }),
        }
    }

    fn unknown_tool(&self, name: &str) -> String {
        if self.tools.is_empty() {
            format!("unknown tool `{name}`: no tools are available in this task")
        } else {
            let names: Vec<&str> = self.tools.iter().map(|t| t.name.as_str()).collect();
            format!(
                "unknown tool `{name}`; available tools: {}",
                names.join(", ")
            )
        }
    }

    /// Stop every server (see [`McpServer::close`]). Idempotent; also done on drop.
    pub fn close(&mut self) {
        let servers = std::mem::take(&mut self.servers);
        if let Some(runtime) = self.runtime.take() {
            runtime.block_on(async {
                for mut server in servers {
                    server.close().await;
                }
            });
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
        }
    }
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRegistry")
            .field(
                "servers",
                &self.servers.iter().map(|s| s.name()).collect::<Vec<_>>(),
            )
            .field(
                "tools",
                &self
                    .tools
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Drop for ToolRegistry {
    fn drop(&mut self) {
        self.close();
    }
}

/// The model's argument text as a JSON object: `""`/`null` → `{}`; anything else must be a
/// JSON object. Errors say what is wrong, for the model.
pub fn parse_arguments(arguments: &str) -> Result<Map<String, Value>, String> {
    if arguments.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(other) => Err(format!("expected a JSON object, got {}", kind(&other))),
        Err(e) => Err(format!("not valid JSON ({e})")),
    }
}

/// [`parse_arguments`] for a tool the host answers itself, described by `definition` (its
/// OpenAI definition, `{"type":"function","function":{"name","parameters":{"properties"}}}`):
/// an argument the definition does not name is refused, naming every such argument and the
/// ones the tool takes, so a model never believes an argument it made up was used (a
/// `task_id` of another task, a `path`). Errors say what is wrong, for the model.
pub fn parse_host_arguments(
    arguments: &str,
    definition: &Value,
) -> Result<Map<String, Value>, String> {
    let args = parse_arguments(arguments)?;
    let known = definition["function"]["parameters"]["properties"].as_object();
    let unknown: Vec<String> = args
        .keys()
        .filter(|k| !known.is_some_and(|p| p.contains_key(*k)))
        .map(|k| format!("`{}`", crate::untrusted::name(k)))
        .collect();
    if unknown.is_empty() {
        return Ok(args);
    }
    let takes: Vec<String> = known
        .into_iter()
        .flat_map(|p| p.keys())
        .map(|k| format!("`{k}`"))
        .collect();
    Err(format!(
        "unknown argument{} {} (this tool takes {}); nothing was done",
        if unknown.len() == 1 { "" } else { "s" },
        unknown.join(", "),
        if takes.is_empty() {
            "none".to_string()
        } else {
            takes.join(", ")
        }
    ))
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_must_be_an_object() {
        assert_eq!(parse_arguments("").unwrap().len(), 0);
        assert_eq!(parse_arguments("null").unwrap().len(), 0);
        assert_eq!(parse_arguments(r#"{"path":"a"}"#).unwrap()["path"], "a");
        assert!(parse_arguments("[1]").unwrap_err().contains("an array"));
        assert!(
            parse_arguments("{oops")
                .unwrap_err()
                .contains("not valid JSON")
        );
    }

    /// Issue 38 item 11: an argument a host tool does not take is refused, naming it.
    #[test]
    fn a_host_tool_refuses_arguments_it_does_not_take() {
        let def = serde_json::json!({"type": "function", "function": {"name": "t",
            "parameters": {"type": "object", "properties": {"a": {}, "b": {}}}}});
        assert_eq!(parse_host_arguments(r#"{"a":1}"#, &def).unwrap()["a"], 1);
        assert_eq!(parse_host_arguments("", &def).unwrap().len(), 0);
        assert_eq!(
            parse_host_arguments(r#"{"a":1,"task_id":"x","path":"/etc"}"#, &def).unwrap_err(),
            "unknown arguments `path`, `task_id` (this tool takes `a`, `b`); nothing was done"
        );
        let e = parse_host_arguments("{\"x\\u001b[2J\":1}", &def).unwrap_err();
        assert!(e.starts_with("unknown argument `x\\u{1b}[2J`"), "{e}");
        assert!(
            parse_host_arguments("[1]", &def)
                .unwrap_err()
                .contains("an array")
        );
    }

    #[test]
    fn empty_registry_answers_unknown_tool() {
        let mut r = ToolRegistry::empty(&ToolsConfig::default());
        assert!(r.is_empty());
        assert_eq!(r.openai_tools(), json!([]));
        match r.call("read_text_file", "{}").unwrap() {
            CallOutcome::Error(e) => assert!(
                e.contains("`read_text_file`") && e.contains("no tools"),
                "{e}"
            ),
            other => panic!("expected an error result, got {other:?}"),
        }
    }

    #[test]
    fn missing_command_is_a_start_error_naming_server_and_command() {
        let servers = BTreeMap::from([(
            "ghost".to_string(),
            McpServerConfig {
                command: "/nonexistent/ctxhost-no-such-server".into(),
                args: vec!["--flag".into()],
                env: BTreeMap::new(),
                cwd: None,
                ..Default::default()
            },
        )]);
        let err = ToolRegistry::start(&servers, &ToolsConfig::default(), &Default::default())
            .expect_err("start must fail");
        let msg = err.to_string();
        assert!(
            msg.contains("`ghost`") && msg.contains("/nonexistent/ctxhost-no-such-server --flag"),
            "{msg}"
        );
        assert!(msg.contains("failed to start"), "{msg}");
    }
}
