//! One MCP server over stdio: start it as a child process, list its tools, call them, stop it.
//!
//! Built on the official SDK `rmcp` (client + child-process transport). All methods are async
//! and run on the registry's runtime (see [`super::registry`]). The server's stderr is read in
//! the background: each line goes to the log (target `ctxhost::tools`, level debug) and the last
//! lines are kept so start and crash errors can quote them.
//!
//! Each server runs in a process group of its own, marked ([`crate::process_group`]): closing
//! it (task end, failure, pause) and interrupting a call (a pause or stop of the task while the
//! call runs) stop the whole group and every marked descendant (`setsid` ones too), SIGTERM
//! then SIGKILL after [`GROUP_GRACE`], so nothing a tool started outlives the task's run.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, ResourceContents, Tool};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::TokioChildProcess;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::ChildStderr;
use tokio::task::JoinHandle;

use super::{CallOutcome, McpServerConfig, ToolError};
use crate::interrupt::{InterruptProbe, Request};

/// Environment variables passed from the host to every server (besides the configured ones and
/// [`crate::process_group::MARK_ENV`]).
pub const INHERITED_ENV: [&str; 2] = ["PATH", "HOME"];

/// Stderr lines kept for error messages, and the longest kept line (characters).
const STDERR_TAIL_LINES: usize = 12;
const STDERR_LINE_CHARS: usize = 300;

/// How long a server gets to exit after its stdin is closed (then SIGTERM, then kill; rmcp
/// waits up to 3 s for each step).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the processes of a server's group get between SIGTERM and SIGKILL.
pub const GROUP_GRACE: Duration = Duration::from_millis(500);

/// How often a running call asks whether the task was asked to pause or stop.
pub const INTERRUPT_POLL: Duration = Duration::from_millis(200);

/// A started MCP server.
pub struct McpServer {
    /// A sandboxed server's temp dir (HOME, TMPDIR), removed when the server is dropped.
    _temp: Option<tempfile::TempDir>,
    name: String,
    command_line: String,
    service: Option<RunningService<RoleClient, ()>>,
    tools: Vec<Tool>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    stderr_task: Option<JoinHandle<()>>,
    /// The server's process group (its pid), and the mark its descendants carry.
    group: Option<(u32, String)>,
}

/// What a sandboxed MCP server (`mcp_servers.NAME.sandbox: true`) may touch besides its own
/// `write_paths`: the task's workspace, and the paths it must not see.
#[derive(Debug, Clone, Default)]
pub struct Confinement {
    /// The task's workspace (writable; the server's working directory unless `cwd` is set);
    /// `None`: the server's temp dir stands in.
    pub workspace: Option<PathBuf>,
    /// Paths the server must not see (contexts/, the config file).
    pub hidden: Vec<PathBuf>,
    /// `tools`: sandbox on/off, network, read paths, limits.
    pub tools: super::ToolsConfig,
}

impl Confinement {
    /// The command that starts `config`'s server confined: `ctxhost sandbox-exec` (this
    /// executable) with the policy as flags, then the server's command; and the server's temp
    /// dir. Errors: this executable's path, creating the temp dir.
    fn launcher(
        &self,
        config: &McpServerConfig,
    ) -> std::io::Result<(tokio::process::Command, tempfile::TempDir)> {
        let temp = tempfile::Builder::new().prefix("ctxhost-mcp-").tempdir()?;
        let mut cmd = tokio::process::Command::new(std::env::current_exe()?);
        let workspace = self
            .workspace
            .clone()
            .unwrap_or_else(|| temp.path().to_path_buf());
        cmd.arg("sandbox-exec")
            .arg("--workspace")
            .arg(&workspace)
            .arg("--temp-dir")
            .arg(temp.path());
        for p in &config.write_paths {
            cmd.arg("--write").arg(absolute(p));
        }
        for p in &self.tools.read_paths {
            cmd.arg("--read").arg(p);
        }
        for p in &self.hidden {
            cmd.arg("--hide").arg(p);
        }
        if config.network.unwrap_or(self.tools.network) {
            cmd.arg("--network");
        }
        if self.tools.sandbox == super::SandboxMode::Off {
            cmd.arg("--unconfined");
        }
        let l = &self.tools.limits;
        cmd.arg(format!(
            "--limits={},{},{},{}",
            l.cpu_secs, l.file_size_mib, l.memory_mib, l.processes
        ));
        cmd.arg("--")
            .arg(program(&config.command))
            .args(&config.args);
        Ok((cmd, temp))
    }
}

impl McpServer {
    /// Start server `name`, complete the MCP handshake and list its tools, all within
    /// `start_timeout`. Errors: [`ToolError::Start`] naming the server and command, with the
    /// end of its stderr when it wrote any; [`ToolError::Config`] for a `cwd` that is not a
    /// directory.
    pub async fn start(
        name: &str,
        config: &McpServerConfig,
        start_timeout: Duration,
        confinement: &Confinement,
    ) -> Result<McpServer, ToolError> {
        let command_line = config.command_line();
        let start_error = |message: String| ToolError::Start {
            server: name.to_string(),
            command: command_line.clone(),
            message,
        };
        if config.command.trim().is_empty() {
            return Err(ToolError::Config {
                key: format!("mcp_servers.{name}.command"),
                message: "is empty".to_string(),
            });
        }
        let cwd = match &config.cwd {
            Some(dir) => {
                let dir = absolute(dir);
                if !dir.is_dir() {
                    return Err(ToolError::Config {
                        key: format!("mcp_servers.{name}.cwd"),
                        message: format!("{} is not a directory", dir.display()),
                    });
                }
                Some(dir)
            }
            None => None,
        };
        let mut temp = None;
        let mut cmd = if config.sandbox {
            let (c, t) = confinement
                .launcher(config)
                .map_err(|e| start_error(format!("preparing its sandbox: {e}")))?;
            temp = Some(t);
            c
        } else {
            let mut c = tokio::process::Command::new(program(&config.command));
            c.args(&config.args);
            c
        };
        cmd.env_clear();
        for key in INHERITED_ENV {
            if let Some(v) = std::env::var_os(key) {
                cmd.env(key, v);
            }
        }
        cmd.envs(&config.env);
        if let Some(dir) = cwd
            .as_ref()
            .or(confinement.workspace.as_ref().filter(|_| config.sandbox))
        {
            cmd.current_dir(dir);
        }
        // The server writes the user's files: it gets the umask ctxhost was started with, not
        // the owner-only one ctxhost uses for contexts/.
        if let Some(mask) = crate::layout::inherited_umask() {
            // SAFETY: the closure runs in the child between fork and exec and only calls
            // umask, which is async-signal-safe.
            unsafe {
                cmd.pre_exec(move || {
                    libc::umask(mask);
                    Ok(())
                });
            }
        }
        crate::process_group::in_new_group(cmd.as_std_mut());
        let marker = crate::process_group::mark(cmd.as_std_mut());
        let (transport, stderr) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| start_error(e.to_string()))?;
        let group = transport.id().map(|pid| (pid, marker));
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let stderr_task =
            stderr.map(|s| tokio::spawn(read_stderr(name.to_string(), s, stderr_tail.clone())));
        let mut server = McpServer {
            _temp: temp,
            name: name.to_string(),
            command_line: command_line.clone(),
            service: None,
            tools: Vec::new(),
            stderr_tail,
            stderr_task,
            group,
        };
        let started = tokio::time::timeout(start_timeout, async {
            let service = ().serve(transport).await.map_err(|e| e.to_string())?;
            let tools = service.list_all_tools().await;
            Ok::<_, String>((service, tools))
        })
        .await;
        match started {
            Ok(Ok((service, Ok(tools)))) => {
                server.service = Some(service);
                server.tools = tools;
                tracing::info!(
                    server = name,
                    tools = server.tools.len(),
                    "MCP server started"
                );
                Ok(server)
            }
            Ok(Ok((service, Err(e)))) => {
                server.service = Some(service);
                let message = server.with_stderr(format!("tools/list failed: {e}")).await;
                server.close().await;
                Err(start_error(message))
            }
            Ok(Err(e)) => {
                let message = server
                    .with_stderr(format!("MCP handshake failed: {e}"))
                    .await;
                server.close().await;
                Err(start_error(message))
            }
            Err(_) => {
                let message = server
                    .with_stderr(format!(
                        "no answer to initialize/tools/list within {} s (tools.start_timeout_secs)",
                        start_timeout.as_secs()
                    ))
                    .await;
                server.close().await;
                Err(start_error(message))
            }
        }
    }

    /// The server's name (its key under `mcp_servers`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tools the server listed at start.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// Call `tool` with `arguments`, cancelling it after `timeout`; with `interrupt`, asked
    /// every [`INTERRUPT_POLL`], a pause or stop of the task interrupts the call at once: the
    /// request is cancelled (`notifications/cancelled`), the server's whole process group is
    /// stopped ([`McpServer::stop_processes`]) and the result says "interrupted by pause after N s"
    /// (the server is gone afterwards: the task is ending its run anyway).
    ///
    /// At the deadline the call is cancelled and the processes the server started are stopped
    /// (the server goes on).
    ///
    /// The tool's own failures come back as `Ok(CallOutcome::Error)`: an `isError` result (its
    /// content), a JSON-RPC error (unknown tool, invalid arguments), the deadline. `Err` only when
    /// the server is gone ([`ToolError::Died`]).
    pub async fn call(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        timeout: Duration,
        interrupt: Option<&InterruptProbe>,
    ) -> Result<CallOutcome, ToolError> {
        let Some(service) = self.service.as_ref().filter(|s| !s.is_transport_closed()) else {
            return Err(self
                .died(tool, "the connection is closed (the server exited)".into())
                .await);
        };
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        let started = std::time::Instant::now();
        // Dropping the request future (timeout, interruption) makes rmcp send
        // notifications/cancelled.
        let call = tokio::time::timeout(timeout, service.call_tool(params));
        let result = match interrupt {
            None => call.await,
            Some(probe) => {
                let mut call = Box::pin(call);
                let request = loop {
                    if let Ok(result) = tokio::time::timeout(INTERRUPT_POLL, &mut call).await {
                        break Ok(result);
                    }
                    let request = probe.request();
                    if request != Request::None {
                        break Err(request);
                    }
                };
                match request {
                    Ok(result) => result,
                    Err(request) => {
                        drop(call);
                        // Let the cancellation go out before the server is stopped.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        self.stop_processes(true).await;
                        let secs = started.elapsed().as_secs();
                        tracing::info!(server = %self.name, tool, secs, "tool call interrupted by {}", request.as_str());
                        return Ok(CallOutcome::Error(format!(
                            "interrupted by {} after {secs} s: tool `{tool}` of MCP server `{}` and the processes it started were stopped",
                            request.as_str(),
                            self.name
                        )));
                    }
                }
            }
        };
        match result {
            Err(_) | Ok(Err(ServiceError::Timeout { .. })) => {
                // What the call started stops with it; the server goes on.
                tokio::time::sleep(Duration::from_millis(20)).await;
                self.stop_processes(false).await;
                Ok(CallOutcome::Error(format!(
                    "tool `{tool}` of MCP server `{}` did not answer within {} s (tools.call_timeout_secs); the call was cancelled and the processes the server started were stopped",
                    self.name,
                    timeout.as_secs()
                )))
            }
            Ok(Ok(result)) => {
                let text = result_text(&result);
                Ok(if result.is_error == Some(true) {
                    CallOutcome::Error(text)
                } else {
                    CallOutcome::Success(text)
                })
            }
            Ok(Err(ServiceError::McpError(e))) => Ok(CallOutcome::Error(format!(
                "MCP server `{}` rejected the call of `{tool}`: {} (code {})",
                self.name, e.message, e.code.0
            ))),
            Ok(Err(
                e @ (ServiceError::UnexpectedResponse
                | ServiceError::InputRequiredRoundsExceeded { .. }),
            )) => Ok(CallOutcome::Error(format!(
                "MCP server `{}` gave no usable result for `{tool}`: {e}",
                self.name
            ))),
            Ok(Err(e)) => Err(self.died(tool, e.to_string()).await),
        }
    }

    /// Stop the server's process group and every marked descendant now (`server`: the server
    /// too, else only what it started): SIGTERM, then SIGKILL after [`GROUP_GRACE`]
    /// ([`crate::process_group`]). Never fails.
    pub async fn stop_processes(&self, server: bool) {
        let Some((pgid, marker)) = self.group.clone() else {
            return;
        };
        let name = self.name.clone();
        let stopped = tokio::task::spawn_blocking(move || {
            if server {
                crate::process_group::terminate_marked(pgid, Some(&marker), GROUP_GRACE)
            } else {
                crate::process_group::terminate_descendants(pgid, Some(&marker), GROUP_GRACE)
            }
        })
        .await;
        match stopped {
            Ok(t) if t.found > 0 => {
                tracing::debug!(server = %name, pgid, found = t.found, killed = t.killed, "MCP server's processes stopped")
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(server = %name, "stopping the MCP server's processes failed: {e}")
            }
        }
    }

    /// Stop the server: close its stdin and wait for it to exit (then SIGTERM, then kill),
    /// then stop what is left of its process group ([`McpServer::stop_processes`]: a tool's
    /// background processes). Idempotent; never fails (problems are logged).
    pub async fn close(&mut self) {
        if let Some(service) = self.service.take() {
            match tokio::time::timeout(CLOSE_TIMEOUT, service.cancel()).await {
                Ok(Ok(reason)) => {
                    tracing::debug!(server = %self.name, ?reason, "MCP server stopped")
                }
                Ok(Err(e)) => {
                    tracing::warn!(server = %self.name, "MCP server shutdown failed: {e}")
                }
                Err(_) => {
                    tracing::warn!(server = %self.name, "MCP server did not stop within {CLOSE_TIMEOUT:?}")
                }
            }
        }
        self.stop_processes(true).await;
        self.group = None;
        if let Some(task) = self.stderr_task.take() {
            // The pipe closes when the process exits; don't wait for a grandchild holding it.
            if tokio::time::timeout(Duration::from_millis(500), task)
                .await
                .is_err()
            {
                tracing::debug!(server = %self.name, "stderr reader still open after shutdown");
            }
        }
    }

    async fn died(&self, tool: &str, message: String) -> ToolError {
        ToolError::Died {
            server: self.name.clone(),
            command: self.command_line.clone(),
            during: format!(" during the call of `{tool}`"),
            message: self.with_stderr(message).await,
        }
    }

    /// `message`, followed by the last lines the server wrote to stderr (if any). Gives the
    /// stderr reader a moment to catch up, since a failing server's last words arrive last.
    async fn with_stderr(&self, message: String) -> String {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let tail = self
            .stderr_tail
            .lock()
            .map(|t| t.iter().cloned().collect::<Vec<_>>())
            .unwrap_or_default();
        if tail.is_empty() {
            message
        } else {
            format!("{message}; its stderr ended with: {}", tail.join(" | "))
        }
    }
}

/// `command` as given when it is a bare name (looked up in `PATH`), else made absolute against
/// the current directory, so a relative path means the same with or without `cwd`.
fn program(command: &str) -> PathBuf {
    if command.contains('/') {
        absolute(Path::new(command))
    } else {
        PathBuf::from(command)
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

async fn read_stderr(server: String, stderr: ChildStderr, tail: Arc<Mutex<VecDeque<String>>>) {
    let mut reader = BufReader::new(stderr);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let line = String::from_utf8_lossy(&buf);
                let line = line.trim_end();
                if line.is_empty() {
                    continue;
                }
                tracing::debug!(target: "ctxhost::tools", server = %server, "stderr: {}", crate::untrusted::text(line, crate::untrusted::MAX_LOG_BYTES));
                if let Ok(mut t) = tail.lock() {
                    if t.len() == STDERR_TAIL_LINES {
                        t.pop_front();
                    }
                    t.push_back(line.chars().take(STDERR_LINE_CHARS).collect());
                }
            }
        }
    }
}

/// The text of a tool result: text blocks as they are, other blocks described in brackets,
/// joined by newlines; the structured content as JSON when there are no blocks.
pub fn result_text(result: &CallToolResult) -> String {
    let parts: Vec<String> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(t) => t.text.clone(),
            ContentBlock::Image(i) => {
                format!("[image {}, {} bytes base64]", i.mime_type, i.data.len())
            }
            ContentBlock::Audio(a) => {
                format!("[audio {}, {} bytes base64]", a.mime_type, a.data.len())
            }
            ContentBlock::Resource(r) => match &r.resource {
                ResourceContents::TextResourceContents { text, .. } => text.clone(),
                ResourceContents::BlobResourceContents { uri, blob, .. } => {
                    format!("[resource {uri}, {} bytes base64]", blob.len())
                }
                #[allow(unreachable_patterns)]
                _ => "[resource]".to_string(),
            },
            ContentBlock::ResourceLink(l) => format!("[resource link {} ({})]", l.uri, l.name),
            _ => "[content of an unsupported kind]".to_string(),
        })
        .collect();
    if parts.is_empty()
        && let Some(s) = &result.structured_content
    {
        return s.to_string();
    }
    parts.join("\n")
}
