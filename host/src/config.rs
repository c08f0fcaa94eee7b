//! `config.yaml`: every setting of ctxhost, with a default for every key.
//!
//! Shape (all sections and keys optional; unknown keys are errors):
//! ```yaml
//! context_storage: {enabled, base_dir, compression_threshold, keep_recent_messages, cleanup_days, summary_prompt}
//! llm:     {provider, base_url, model, api_key_env, context_length, max_output_tokens, temperature,
//!           timeout_secs, connect_timeout_secs, max_retries, max_backoff_secs, max_response_mib}
//! plugins: {message_store, compressor, request_format}
//! runtime: {memory_limit_mib, call_timeout_secs}
//! agent:   {system_prompt, max_steps}
//! worker:  {max_parallel_tasks, poll_interval_ms, max_crashes}
//! mcp_servers: {NAME: {command, args, env, cwd}}    # see crate::tools::config
//! tools:   {max_tool_output_tokens, call_timeout_secs, start_timeout_secs}
//! ```
//! [`Config::default_yaml`] is the commented file `ctxhost init` writes. Errors name the file and
//! the key, e.g. `config.yaml: llm.context_length: must be at least 256, got 12`.
//!
//! The API key is never part of the config: `llm.api_key_env` names the environment variable
//! that holds it, read at run time by [`Config::api_key`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Why a config could not be loaded. The message names the file and, where known, the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but could not be read.
    #[error("{file}: cannot read: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// A config file given explicitly (`--config PATH`) does not exist.
    #[error(
        "{file}: config file not found (--config must name an existing file; `ctxhost init --config {file}` writes one)"
    )]
    Missing { file: String },
    /// YAML syntax error, unknown key or wrong type (serde's message carries the key path and line).
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    /// A value parsed but is out of range or otherwise invalid.
    #[error("{file}: {key}: {message}")]
    Invalid {
        file: String,
        key: String,
        message: String,
    },
}

/// The LLM provider. Decides the default base URL, request format and API-key variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// api.openai.com (`/v1/chat/completions`, key from `OPENAI_API_KEY`).
    Openai,
    /// Ollama (`/api/chat`), default `http://127.0.0.1:11434`.
    Ollama,
    /// LM Studio (OpenAI-compatible), default `http://127.0.0.1:1234`.
    Lmstudio,
    /// llama.cpp `llama-server` (OpenAI-compatible), default `http://127.0.0.1:8080`.
    Llamacpp,
    /// vLLM (OpenAI-compatible), default `http://127.0.0.1:8000`.
    Vllm,
    /// Anthropic's Messages API (`/v1/messages`, key from `ANTHROPIC_API_KEY` sent as
    /// `x-api-key`), default `https://api.anthropic.com`.
    Anthropic,
}

impl Provider {
    /// All providers, in the order shown in messages.
    pub const ALL: [Provider; 6] = [
        Provider::Openai,
        Provider::Ollama,
        Provider::Lmstudio,
        Provider::Llamacpp,
        Provider::Vllm,
        Provider::Anthropic,
    ];

    /// The config spelling (`openai`, `ollama`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Openai => "openai",
            Provider::Ollama => "ollama",
            Provider::Lmstudio => "lmstudio",
            Provider::Llamacpp => "llamacpp",
            Provider::Vllm => "vllm",
            Provider::Anthropic => "anthropic",
        }
    }

    /// Base URL used when `llm.base_url` is not set (no trailing slash, no `/v1`).
    pub fn default_base_url(self) -> &'static str {
        match self {
            Provider::Openai => "https://api.openai.com",
            Provider::Ollama => "http://127.0.0.1:11434",
            Provider::Lmstudio => "http://127.0.0.1:1234",
            Provider::Llamacpp => "http://127.0.0.1:8080",
            Provider::Vllm => "http://127.0.0.1:8000",
            Provider::Anthropic => "https://api.anthropic.com",
        }
    }

    /// Request format plugin used when `plugins.request_format` is not set.
    pub fn default_request_format(self) -> &'static str {
        match self {
            Provider::Ollama => "builtin:ollama-chat",
            Provider::Anthropic => "builtin:anthropic-messages",
            _ => "builtin:openai-chat",
        }
    }

    /// API-key variable used when `llm.api_key_env` is not set (`None`: no key sent).
    pub fn default_api_key_env(self) -> Option<&'static str> {
        match self {
            Provider::Openai => Some("OPENAI_API_KEY"),
            Provider::Anthropic => Some("ANTHROPIC_API_KEY"),
            _ => None,
        }
    }

    /// How the transport sends the API key: `x-api-key` + `anthropic-version` for Anthropic,
    /// `Authorization: Bearer` for the OpenAI-compatible servers and Ollama.
    pub fn auth_scheme(self) -> crate::llm::AuthScheme {
        match self {
            Provider::Anthropic => crate::llm::AuthScheme::Anthropic,
            _ => crate::llm::AuthScheme::Bearer,
        }
    }

    /// Highest `llm.temperature` the provider accepts (Anthropic 1, others 2).
    pub fn max_temperature(self) -> f32 {
        match self {
            Provider::Anthropic => 1.0,
            _ => 2.0,
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Provider {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Provider::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                let known: Vec<_> = Provider::ALL.iter().map(|p| p.as_str()).collect();
                format!("unknown provider `{s}` (known: {})", known.join(", "))
            })
    }
}

/// The whole config file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub context_storage: ContextStorage,
    pub llm: LlmConfig,
    pub plugins: PluginsConfig,
    pub runtime: RuntimeConfig,
    pub agent: AgentConfig,
    pub worker: WorkerConfig,
    /// MCP servers started for every task (stdio); their tools are offered to the model.
    pub mcp_servers: std::collections::BTreeMap<String, crate::tools::McpServerConfig>,
    /// Tool call limits: output size, deadlines.
    pub tools: crate::tools::ToolsConfig,
}

/// `context_storage`: where task contexts live and when they are compressed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContextStorage {
    /// Keep file-based contexts (always true for now; `false` is rejected).
    pub enabled: bool,
    /// The `contexts/` directory (relative paths are relative to the current directory).
    pub base_dir: PathBuf,
    /// Compress when current tokens > context_length × threshold; in (0, 1].
    pub compression_threshold: f64,
    /// Most recent messages kept verbatim by a compression (≥ 1).
    pub keep_recent_messages: u32,
    /// Completed task directories older than this many days may be deleted (≥ 1).
    pub cleanup_days: u32,
    /// Prompt for summaries; must contain `{messages}`.
    pub summary_prompt: String,
}

/// Default summary prompt (contains the `{messages}` placeholder).
pub const DEFAULT_SUMMARY_PROMPT: &str = "Summarize the following conversation between a coding agent and its tools. \
Keep every fact needed to continue the task: the goal, decisions made, files and commands involved, \
results of tool calls, errors seen and what remains to be done. Be concise.\n\n{messages}";

impl Default for ContextStorage {
    fn default() -> Self {
        ContextStorage {
            enabled: true,
            base_dir: PathBuf::from("./contexts"),
            compression_threshold: 0.7,
            keep_recent_messages: 5,
            cleanup_days: 30,
            summary_prompt: DEFAULT_SUMMARY_PROMPT.to_string(),
        }
    }
}

/// `llm`: the provider and how to reach it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LlmConfig {
    pub provider: Provider,
    /// Provider base URL without the endpoint path (`None`: the provider's default).
    pub base_url: Option<String>,
    /// Model name sent in every request.
    pub model: String,
    /// Name of the environment variable holding the API key (`None`: the provider's default;
    /// empty string: send no key).
    pub api_key_env: Option<String>,
    /// The model's context window, tokens (≥ 256).
    pub context_length: u64,
    /// Upper bound on output tokens per call (`None`: provider default; Anthropic, which
    /// requires a bound, gets 4096).
    pub max_output_tokens: Option<u32>,
    /// Sampling temperature in [0, 2] ([0, 1] for Anthropic) (`None`: provider default).
    pub temperature: Option<f32>,
    /// Whole-request timeout, seconds (≥ 1).
    pub timeout_secs: u64,
    /// Connect timeout, seconds (≥ 1).
    pub connect_timeout_secs: u64,
    /// Retries after the first attempt on 429/5xx/connection errors/timeouts.
    pub max_retries: u32,
    /// Longest wait between retries, seconds (≥ 1); Retry-After is honoured up to this.
    pub max_backoff_secs: u64,
    /// Largest response body accepted, MiB (≥ 1).
    pub max_response_mib: u64,
}

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig {
            provider: Provider::Openai,
            base_url: None,
            model: "gpt-4o-mini".to_string(),
            api_key_env: None,
            context_length: 8192,
            max_output_tokens: Some(1024),
            temperature: None,
            timeout_secs: 300,
            connect_timeout_secs: 10,
            max_retries: 3,
            max_backoff_secs: 30,
            max_response_mib: 16,
        }
    }
}

/// `plugins`: which components implement the message store, compressor and request format.
/// Each is `builtin:NAME` or a path to a `.wasm` component file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PluginsConfig {
    pub message_store: String,
    /// `none` disables compression.
    pub compressor: String,
    /// `None`: from the provider (ollama → `builtin:ollama-chat`, else `builtin:openai-chat`).
    pub request_format: Option<String>,
}

/// The `plugins.compressor` value that disables compression.
pub const NO_COMPRESSOR: &str = "none";
/// The default `plugins.compressor`: an LLM summary of the older messages (DESIGN §6).
pub const DEFAULT_COMPRESSOR: &str = "builtin:llm-summarizer";

impl Default for PluginsConfig {
    fn default() -> Self {
        PluginsConfig {
            message_store: "builtin:jsonl-store".to_string(),
            compressor: DEFAULT_COMPRESSOR.to_string(),
            request_format: None,
        }
    }
}

/// `runtime`: limits of every component instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    /// Linear memory limit per component instance, MiB (≥ 1).
    pub memory_limit_mib: u64,
    /// Wall-clock limit per component call, seconds (≥ 1).
    pub call_timeout_secs: u64,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            memory_limit_mib: 256,
            call_timeout_secs: 30,
        }
    }
}

/// `agent`: the agent loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// First message of every task's context.
    pub system_prompt: String,
    /// Most LLM calls one task may make (≥ 1); reaching it fails the task.
    pub max_steps: u32,
}

/// Default system prompt of a task.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a careful coding agent. You work on one task at a time: \
understand the request, inspect the relevant code with the tools you are given, make minimal and correct \
changes, and verify them. When you call a tool, wait for its result before continuing. If no tools are \
available, answer from your own knowledge. When the task is done, reply with a concise final answer that \
states what you did and the result, without calling a tool.";

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            system_prompt: DEFAULT_SYSTEM_PROMPT.to_string(),
            max_steps: 50,
        }
    }
}

/// `worker`: the `ctxhost run` process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerConfig {
    /// Task processes running at once (≥ 1).
    pub max_parallel_tasks: u32,
    /// How often the worker looks at the queue and its children, milliseconds (≥ 10).
    pub poll_interval_ms: u64,
    /// A task whose process dies this many times (crash, kill, power loss) is failed instead of
    /// being repaired and run again (≥ 1).
    pub max_crashes: u32,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            max_parallel_tasks: 2,
            poll_interval_ms: 500,
            max_crashes: 3,
        }
    }
}

impl Config {
    /// Load `path`. A missing file gives the defaults (validated like any other config).
    /// Errors: unreadable file, YAML syntax, unknown key, wrong type, invalid value — each
    /// naming `path` and the key.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        match std::fs::read_to_string(path) {
            Ok(text) => Config::from_yaml(&text, &file),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let cfg = Config::default();
                cfg.validate(&file)?;
                Ok(cfg)
            }
            Err(source) => Err(ConfigError::Read { file, source }),
        }
    }

    /// Load `path`, which must exist (a config named explicitly): like [`Config::load`], but a
    /// missing file is [`ConfigError::Missing`] naming `path`.
    pub fn load_existing(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        match std::fs::read_to_string(path) {
            Ok(text) => Config::from_yaml(&text, &file),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(ConfigError::Missing { file })
            }
            Err(source) => Err(ConfigError::Read { file, source }),
        }
    }

    /// Parse and validate YAML `text`; `file` names it in errors. An empty document gives the defaults.
    pub fn from_yaml(text: &str, file: &str) -> Result<Config, ConfigError> {
        let cfg: Config = if text.trim().is_empty() {
            Config::default()
        } else {
            // An all-comments document parses as null: treat like empty.
            let value: serde_norway::Value =
                serde_norway::from_str(text).map_err(|e| ConfigError::Parse {
                    file: file.to_string(),
                    message: e.to_string(),
                })?;
            if value.is_null() {
                Config::default()
            } else {
                serde_norway::from_str(text).map_err(|e| ConfigError::Parse {
                    file: file.to_string(),
                    message: e.to_string(),
                })?
            }
        };
        cfg.validate(file)?;
        Ok(cfg)
    }

    /// Check value ranges and formats. Errors name `file` and the key.
    pub fn validate(&self, file: &str) -> Result<(), ConfigError> {
        let bad = |key: &str, message: String| {
            Err(ConfigError::Invalid {
                file: file.to_string(),
                key: key.to_string(),
                message,
            })
        };
        let cs = &self.context_storage;
        if !cs.enabled {
            return bad(
                "context_storage.enabled",
                "must be true: ctxhost always keeps file-based contexts".into(),
            );
        }
        if cs.base_dir.as_os_str().is_empty() {
            return bad("context_storage.base_dir", "must not be empty".into());
        }
        let t = cs.compression_threshold;
        if !(t > 0.0 && t <= 1.0) {
            return bad(
                "context_storage.compression_threshold",
                format!("must be in (0, 1], got {t}"),
            );
        }
        if cs.keep_recent_messages < 1 {
            return bad(
                "context_storage.keep_recent_messages",
                "must be at least 1, got 0".into(),
            );
        }
        if cs.cleanup_days < 1 {
            return bad(
                "context_storage.cleanup_days",
                "must be at least 1, got 0".into(),
            );
        }
        if !cs.summary_prompt.contains("{messages}") {
            return bad(
                "context_storage.summary_prompt",
                "must contain the `{messages}` placeholder".into(),
            );
        }

        let llm = &self.llm;
        if let Some(url) = &llm.base_url
            && let Err(msg) = check_base_url(url)
        {
            return bad("llm.base_url", msg);
        }
        if llm.model.trim().is_empty() {
            return bad("llm.model", "must not be empty".into());
        }
        if let Some(var) = &llm.api_key_env
            && !var.is_empty()
            && !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return bad(
                "llm.api_key_env",
                format!("must be an environment variable name (letters, digits, _), got `{var}`"),
            );
        }
        if llm.context_length < 256 {
            return bad(
                "llm.context_length",
                format!("must be at least 256, got {}", llm.context_length),
            );
        }
        if let Some(n) = llm.max_output_tokens {
            if n == 0 {
                return bad("llm.max_output_tokens", "must be at least 1, got 0".into());
            }
            if u64::from(n) >= llm.context_length {
                return bad(
                    "llm.max_output_tokens",
                    format!(
                        "must be less than llm.context_length ({}), got {n}",
                        llm.context_length
                    ),
                );
            }
        }
        let max_temperature = llm.provider.max_temperature();
        if let Some(t) = llm.temperature
            && !(0.0..=max_temperature).contains(&t)
        {
            return bad(
                "llm.temperature",
                format!(
                    "must be in [0, {max_temperature}] for provider {}, got {t}",
                    llm.provider
                ),
            );
        }
        for (key, v) in [
            ("llm.timeout_secs", llm.timeout_secs),
            ("llm.connect_timeout_secs", llm.connect_timeout_secs),
            ("llm.max_backoff_secs", llm.max_backoff_secs),
            ("llm.max_response_mib", llm.max_response_mib),
        ] {
            if v < 1 {
                return bad(key, "must be at least 1, got 0".into());
            }
        }
        if llm.max_retries > 20 {
            return bad(
                "llm.max_retries",
                format!("must be at most 20, got {}", llm.max_retries),
            );
        }

        let p = &self.plugins;
        if p.message_store.trim().is_empty() {
            return bad(
                "plugins.message_store",
                "must be `builtin:NAME` or a path to a .wasm file".into(),
            );
        }
        if p.compressor.trim().is_empty() {
            return bad(
                "plugins.compressor",
                "must be `none`, `builtin:NAME` or a path to a .wasm file".into(),
            );
        }
        if let Some(f) = &p.request_format
            && f.trim().is_empty()
        {
            return bad(
                "plugins.request_format",
                "must be `builtin:NAME` or a path to a .wasm file".into(),
            );
        }
        for (key, spec) in [
            ("plugins.message_store", Some(p.message_store.as_str())),
            ("plugins.compressor", Some(p.compressor.as_str())),
            ("plugins.request_format", p.request_format.as_deref()),
        ] {
            if let Some(name) = spec.and_then(|s| s.strip_prefix("builtin:"))
                && (name.is_empty()
                    || !name
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
            {
                return bad(
                    key,
                    format!("builtin name must be lowercase letters, digits and -, got `{name}`"),
                );
            }
        }

        if self.runtime.memory_limit_mib < 1 {
            return bad(
                "runtime.memory_limit_mib",
                "must be at least 1, got 0".into(),
            );
        }
        if self.runtime.memory_limit_mib > 4096 {
            return bad(
                "runtime.memory_limit_mib",
                format!(
                    "must be at most 4096 (a wasm32 memory), got {}",
                    self.runtime.memory_limit_mib
                ),
            );
        }
        if self.runtime.call_timeout_secs < 1 {
            return bad(
                "runtime.call_timeout_secs",
                "must be at least 1, got 0".into(),
            );
        }
        if self.agent.system_prompt.trim().is_empty() {
            return bad("agent.system_prompt", "must not be empty".into());
        }
        if self.agent.max_steps < 1 {
            return bad("agent.max_steps", "must be at least 1, got 0".into());
        }
        if self.worker.max_parallel_tasks < 1 {
            return bad(
                "worker.max_parallel_tasks",
                "must be at least 1, got 0".into(),
            );
        }
        if self.worker.max_crashes < 1 {
            return bad("worker.max_crashes", "must be at least 1, got 0".into());
        }
        if self.worker.poll_interval_ms < 10 {
            return bad(
                "worker.poll_interval_ms",
                format!("must be at least 10, got {}", self.worker.poll_interval_ms),
            );
        }
        if let Err((key, message)) = crate::tools::config::validate(&self.mcp_servers, &self.tools)
        {
            return bad(&key, message);
        }
        Ok(())
    }

    /// The provider base URL in effect (config or provider default), without a trailing `/`.
    pub fn base_url(&self) -> String {
        let url = self
            .llm
            .base_url
            .as_deref()
            .unwrap_or(self.llm.provider.default_base_url());
        url.trim_end_matches('/').to_string()
    }

    /// The request format plugin spec in effect (config or provider default).
    pub fn request_format(&self) -> &str {
        self.plugins
            .request_format
            .as_deref()
            .unwrap_or(self.llm.provider.default_request_format())
    }

    /// The compressor plugin spec, or `None` when compression is disabled (`none`).
    pub fn compressor(&self) -> Option<&str> {
        let c = self.plugins.compressor.trim();
        (c != NO_COMPRESSOR).then_some(c)
    }

    /// The API-key environment variable in effect (`None`: send no key).
    pub fn api_key_env(&self) -> Option<&str> {
        match self.llm.api_key_env.as_deref() {
            Some("") => None,
            Some(v) => Some(v),
            None => self.llm.provider.default_api_key_env(),
        }
    }

    /// Read the API key from the environment at run time. `Ok(None)` when no variable is
    /// configured. Error (naming the key and the variable, never a value) when the variable
    /// is configured but unset or empty.
    pub fn api_key(&self) -> anyhow::Result<Option<String>> {
        let Some(var) = self.api_key_env() else {
            return Ok(None);
        };
        match std::env::var(var) {
            Ok(v) if !v.trim().is_empty() => Ok(Some(v.trim().to_string())),
            _ => anyhow::bail!(
                "llm.api_key_env: environment variable {var} is not set (set it, or set llm.api_key_env: \"\" \
                 for a server that needs no key)"
            ),
        }
    }

    /// Per-call component limits as (memory bytes, call timeout).
    pub fn runtime_limits(&self) -> (usize, Duration) {
        let bytes = (self.runtime.memory_limit_mib as usize).saturating_mul(1024 * 1024);
        (bytes, Duration::from_secs(self.runtime.call_timeout_secs))
    }

    /// The commented default config that `ctxhost init` writes. Parses to [`Config::default`].
    pub fn default_yaml() -> String {
        let d = Config::default();
        let indent = |s: &str| {
            s.lines()
                .map(|l| {
                    if l.is_empty() {
                        String::new()
                    } else {
                        format!("    {l}")
                    }
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        let summary = d.context_storage.summary_prompt.clone();
        let system = d.agent.system_prompt.clone();
        format!(
            r#"# ctxhost configuration. Every key is optional; the values below are the defaults.
# Unknown keys are errors. Paths are relative to the directory ctxhost runs in.

context_storage:
  enabled: true
  # The contexts/ tree: tasks.db, running/, paused/, completed/, .cache/ (overridden by --contexts).
  base_dir: ./contexts
  # Compress the context when its tokens exceed context_length x this fraction, in (0, 1].
  compression_threshold: {threshold}
  # Most recent messages kept verbatim by a compression.
  keep_recent_messages: {keep}
  # Completed task directories older than this many days may be deleted (rows stay in tasks.db).
  cleanup_days: {cleanup}
  # Prompt used for summaries; {{messages}} is replaced by the messages to summarise.
  summary_prompt: |-
{summary}

llm:
  # openai | ollama | lmstudio | llamacpp | vllm | anthropic
  provider: openai
  # Without the endpoint path. Default per provider: openai https://api.openai.com,
  # ollama http://127.0.0.1:11434, lmstudio http://127.0.0.1:1234, llamacpp http://127.0.0.1:8080,
  # vllm http://127.0.0.1:8000, anthropic https://api.anthropic.com.
  # base_url: https://api.openai.com
  model: {model}
  # Name of the environment variable that holds the API key (read at run time, never stored).
  # Default: OPENAI_API_KEY for openai, ANTHROPIC_API_KEY for anthropic, none otherwise;
  # "" sends no key. Sent as Authorization: Bearer, or x-api-key for anthropic.
  # api_key_env: OPENAI_API_KEY
  # The model's context window, tokens.
  context_length: {ctx}
  # Upper bound on output tokens per call (null: provider default; 4096 for anthropic).
  max_output_tokens: {max_out}
  # Sampling temperature, 0-2 (0-1 for anthropic) (null: provider default).
  temperature: null
  timeout_secs: {timeout}
  connect_timeout_secs: {connect}
  # Retries on 429 / 5xx / connection errors / timeouts, with backoff honouring Retry-After.
  max_retries: {retries}
  max_backoff_secs: {backoff}
  max_response_mib: {max_resp}

plugins:
  # Each is builtin:NAME or a path to a .wasm component.
  message_store: {store}
  # builtin:llm-summarizer (LLM summary of older messages), builtin:observation-masking
  # (masks old tool results, no LLM), a path to a .wasm compressor, or none.
  compressor: {compressor}
  # Default from the provider: builtin:ollama-chat for ollama, builtin:anthropic-messages for
  # anthropic (with prompt caching), builtin:openai-chat otherwise.
  # builtin:prompted-tools describes the tools in the prompt, for models without native tool calls.
  # request_format: builtin:openai-chat

runtime:
  # Per component instance.
  memory_limit_mib: {mem}
  call_timeout_secs: {call}

agent:
  # Most LLM calls per task; reaching it fails the task.
  max_steps: {steps}
  system_prompt: |-
{system}

worker:
  # Task processes run at once by `ctxhost run`.
  max_parallel_tasks: {par}
  poll_interval_ms: {poll}
  # A task whose process dies (crash, kill -9, power loss) is repaired and run again; after this
  # many deaths it is marked failed instead.
  max_crashes: {crashes}

# MCP servers started (over stdio) for every task; their tools are offered to the model. A server
# gets only PATH, HOME and its own env. Tool names clashing between servers become SERVER__TOOL.
mcp_servers: {{}}
#  fs:
#    command: node_modules/.bin/mcp-server-filesystem
#    args: ["./sample"]
#    env: {{}}
#    cwd: null

tools:
  # A longer tool result is cut for the context; the full text is kept in tool-results/SEQ.txt.
  max_tool_output_tokens: {tool_max}
  call_timeout_secs: {tool_call}
  start_timeout_secs: {tool_start}
"#,
            tool_max = d.tools.max_tool_output_tokens,
            tool_call = d.tools.call_timeout_secs,
            tool_start = d.tools.start_timeout_secs,
            threshold = d.context_storage.compression_threshold,
            keep = d.context_storage.keep_recent_messages,
            cleanup = d.context_storage.cleanup_days,
            summary = indent(&summary),
            model = d.llm.model,
            ctx = d.llm.context_length,
            max_out = d
                .llm
                .max_output_tokens
                .map(|n| n.to_string())
                .unwrap_or_else(|| "null".into()),
            timeout = d.llm.timeout_secs,
            connect = d.llm.connect_timeout_secs,
            retries = d.llm.max_retries,
            backoff = d.llm.max_backoff_secs,
            max_resp = d.llm.max_response_mib,
            store = d.plugins.message_store,
            compressor = d.plugins.compressor,
            mem = d.runtime.memory_limit_mib,
            call = d.runtime.call_timeout_secs,
            steps = d.agent.max_steps,
            system = indent(&system),
            par = d.worker.max_parallel_tasks,
            poll = d.worker.poll_interval_ms,
            crashes = d.worker.max_crashes,
        )
    }
}

/// Check that `url` is an absolute http(s) URL with a host and no query or fragment.
fn check_base_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("must start with http:// or https://, got `{url}`"))?;
    let host_port = rest.split('/').next().unwrap_or("");
    if host_port.is_empty() {
        return Err(format!("has no host: `{url}`"));
    }
    if url.contains(char::is_whitespace) {
        return Err(format!("must not contain spaces: `{url}`"));
    }
    if url.contains('?') || url.contains('#') {
        return Err(format!("must not have a query or fragment: `{url}`"));
    }
    let host = match host_port.rsplit_once(':') {
        Some((host, port)) if !host_port.ends_with(']') => {
            if port.parse::<u16>().is_err() {
                return Err(format!("has an invalid port `{port}`: `{url}`"));
            }
            host
        }
        _ => host_port,
    };
    if host.is_empty() {
        return Err(format!("has no host: `{url}`"));
    }
    if host_port.contains('@') {
        return Err(format!(
            "must not contain credentials (use llm.api_key_env): `{url}`"
        ));
    }
    // The request format appends the endpoint path (`/v1/chat/completions`, `/api/chat`,
    // `/v1/messages`).
    let trimmed = url.trim_end_matches('/');
    for endpoint in ["/chat/completions", "/api/chat", "/v1/messages"] {
        if let Some(base) = trimmed.strip_suffix(endpoint) {
            let base = base.strip_suffix("/v1").unwrap_or(base);
            return Err(format!(
                "must be the server's base URL only, without the endpoint path (the request format \
                 adds it): got `{url}`, give `{base}`"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(yaml: &str) -> String {
        Config::from_yaml(yaml, "config.yaml")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn empty_and_comment_only_documents_give_defaults() {
        assert_eq!(Config::from_yaml("", "c").unwrap(), Config::default());
        assert_eq!(
            Config::from_yaml("# nothing\n", "c").unwrap(),
            Config::default()
        );
    }

    #[test]
    fn default_yaml_parses_to_the_defaults() {
        let yaml = Config::default_yaml();
        let parsed = Config::from_yaml(&yaml, "default").unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        assert_eq!(parsed, Config::default());
    }

    #[test]
    fn values_override_defaults() {
        let c = Config::from_yaml(
            "llm:\n  provider: ollama\n  model: qwen\n  context_length: 4096\nworker:\n  max_parallel_tasks: 3\n",
            "c",
        )
        .unwrap();
        assert_eq!(c.llm.provider, Provider::Ollama);
        assert_eq!(c.request_format(), "builtin:ollama-chat");
        assert_eq!(c.base_url(), "http://127.0.0.1:11434");
        assert_eq!(c.api_key_env(), None);
        assert_eq!(c.llm.context_length, 4096);
        assert_eq!(c.worker.max_parallel_tasks, 3);
        assert_eq!(c.context_storage.keep_recent_messages, 5);
    }

    #[test]
    fn errors_name_the_key() {
        assert_eq!(
            err("llm:\n  context_length: 12\n"),
            "config.yaml: llm.context_length: must be at least 256, got 12"
        );
        assert!(
            err("context_storage:\n  compression_threshold: 1.5\n").starts_with(
                "config.yaml: context_storage.compression_threshold: must be in (0, 1]"
            )
        );
        assert!(
            err("context_storage:\n  compression_threshold: 0\n").contains("compression_threshold")
        );
        assert!(
            err("context_storage:\n  keep_recent_messages: 0\n").contains("keep_recent_messages")
        );
        assert!(err("llm:\n  base_url: ftp://x\n").contains("llm.base_url: must start with http"));
        assert!(err("llm:\n  base_url: http://:80\n").contains("llm.base_url"));
        assert!(err("context_storage:\n  summary_prompt: hi\n").contains("{messages}"));
        assert!(err("agent:\n  max_steps: 0\n").contains("agent.max_steps"));
    }

    #[test]
    fn unknown_keys_and_bad_types_name_the_key() {
        let e = err("llm:\n  modle: x\n");
        assert!(e.contains("llm") && e.contains("modle"), "{e}");
        let e = err("bogus: 1\n");
        assert!(e.contains("bogus"), "{e}");
        let e = err("llm:\n  context_length: lots\n");
        assert!(e.contains("llm.context_length"), "{e}");
        let e = err("llm:\n  provider: gemini\n");
        assert!(e.contains("llm.provider") && e.contains("gemini"), "{e}");
    }

    #[test]
    fn compressor_none_disables_compression() {
        assert_eq!(
            Config::default().compressor(),
            Some("builtin:llm-summarizer")
        );
        let c = Config::from_yaml("plugins:\n  compressor: none\n", "c").unwrap();
        assert_eq!(c.compressor(), None);
    }

    #[test]
    fn anthropic_provider_defaults() {
        let c = Config::from_yaml("llm:\n  provider: anthropic\n  model: claude-x\n", "c").unwrap();
        assert_eq!(c.request_format(), "builtin:anthropic-messages");
        assert_eq!(c.base_url(), "https://api.anthropic.com");
        assert_eq!(c.api_key_env(), Some("ANTHROPIC_API_KEY"));
        assert_eq!(
            c.llm.provider.auth_scheme(),
            crate::llm::AuthScheme::Anthropic
        );
        assert_eq!(
            Provider::Openai.auth_scheme(),
            crate::llm::AuthScheme::Bearer
        );
        let e = err("llm:\n  provider: anthropic\n  temperature: 1.5\n");
        assert!(
            e.contains("llm.temperature: must be in [0, 1] for provider anthropic, got 1.5"),
            "{e}"
        );
        assert!(Config::from_yaml("llm:\n  temperature: 1.5\n", "c").is_ok());
        let e =
            err("llm:\n  provider: anthropic\n  base_url: https://api.anthropic.com/v1/messages\n");
        assert!(e.contains("give `https://api.anthropic.com`"), "{e}");
    }

    #[test]
    fn api_key_env_empty_string_means_no_key() {
        let c = Config::from_yaml("llm:\n  api_key_env: \"\"\n", "c").unwrap();
        assert_eq!(c.api_key_env(), None);
        assert_eq!(c.api_key().unwrap(), None);
        assert_eq!(Config::default().api_key_env(), Some("OPENAI_API_KEY"));
    }

    #[test]
    fn base_url_with_the_endpoint_path_is_rejected() {
        for (url, base) in [
            (
                "http://127.0.0.1:1234/v1/chat/completions",
                "http://127.0.0.1:1234",
            ),
            (
                "https://api.openai.com/v1/chat/completions/",
                "https://api.openai.com",
            ),
            ("http://h:8080/chat/completions", "http://h:8080"),
            ("http://127.0.0.1:11434/api/chat", "http://127.0.0.1:11434"),
            ("http://proxy/ollama/api/chat", "http://proxy/ollama"),
        ] {
            let e = err(&format!("llm:\n  base_url: \"{url}\"\n"));
            assert!(
                e.contains("llm.base_url")
                    && e.contains("base URL only")
                    && e.contains(&format!("give `{base}`")),
                "{url}: {e}"
            );
        }
        // A base URL with a path prefix (a proxy) or with /v1 is still fine.
        for url in ["http://h:1234/v1", "http://proxy/openai", "http://h/v1/"] {
            Config::from_yaml(&format!("llm:\n  base_url: \"{url}\"\n"), "c").unwrap();
        }
    }

    #[test]
    fn explicit_missing_file_is_an_error_naming_it() {
        let e = Config::load_existing(Path::new("/nonexistent/dir/my.yaml")).unwrap_err();
        assert!(matches!(e, ConfigError::Missing { .. }));
        assert!(e.to_string().contains("/nonexistent/dir/my.yaml"), "{e}");
    }

    #[test]
    fn missing_file_gives_defaults() {
        let c = Config::load(Path::new("/nonexistent/dir/config.yaml")).unwrap();
        assert_eq!(c, Config::default());
    }
}
