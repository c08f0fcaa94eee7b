//! `config.yaml`: every setting of ctxhost, with a default for every key.
//!
//! Shape (all sections and keys optional; unknown keys are errors):
//! ```yaml
//! context_storage: {enabled, base_dir, compression_threshold, keep_recent_messages, keep_recent_tokens,
//!                   cleanup_days, summary_prompt, max_task_dir_mib, max_files_per_call,
//!                   max_llm_calls_per_compression, max_compression_secs}
//! llm:     {provider, base_url, model, api_key_env, context_length, max_output_tokens, temperature,
//!           thinking, timeout_secs, connect_timeout_secs, max_retries, max_backoff_secs, max_response_mib,
//!           max_request_mib, interrupt_grace_secs, stream, idle_timeout_secs}
//! plugins: {message_store, compressor, request_format, strategy}
//! runtime: {memory_limit_mib, call_timeout_secs}
//! agent:   {system_prompt, max_steps}
//! strategy: {reflect_every, max_verifications, options}
//! context_inheritance: {enabled, max_inherited_tokens, context_expiry_days}
//! worker:  {max_parallel_tasks, poll_interval_ms, max_crashes, lease_secs}
//! task_store: sqlite | {url_env}                     # see task_store
//! mcp_servers: {NAME: {command, args, env, cwd}}    # see crate::tools::config
//! tools:   {max_tool_output_tokens, call_timeout_secs, start_timeout_secs}
//! sources: {github: {...}, gitlab: {...}}          # see sources (the task sources)
//! ```
//! [`schema`] is the JSON Schema of this file, derived from these types (`ctxhost config schema`).
//! One module per section, each with its own validation: `context_storage`, `llm`, `plugins`,
//! `process` (`runtime`, `agent`, `worker`), `task_store`, `sources`, `strategy` (`strategy`,
//! `context_inheritance`); `mcp_servers` and `tools` in
//! [`crate::tools::config`]. [`Config::default_yaml`] is the commented file `ctxhost init` writes. Errors name the file and
//! the key, e.g. `config.yaml: llm.context_length: must be at least 256, got 12`.
//!
//! The API key is never part of the config: `llm.api_key_env` names the environment variable
//! that holds it, read at run time by [`Config::api_key`].

mod context_storage;
mod llm;
pub mod llm_flags;
mod plugins;
pub mod pricing;
mod process;
pub(crate) mod remote;
pub mod schema;
mod sources;
mod strategy;
mod task_store;
mod template;
mod window;

use std::path::Path;

use serde::{Deserialize, Serialize};

/// Why a config could not be loaded. The message names the file and, where known, the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but could not be read.
    #[error("{file}: cannot read: {source}")]
    Read {
        /// The file, as shown in messages.
        file: String,
        #[source]
        /// The I/O error.
        source: std::io::Error,
    },
    /// A config file given explicitly (`--config PATH`) does not exist.
    #[error(
        "{file}: config file not found (--config must name an existing file; `ctxhost init --config {file}` writes one)"
    )]
    Missing {
        /// The file, as shown in messages.
        file: String,
    },
    /// YAML syntax error, unknown key or wrong type (serde's message carries the key path and line).
    #[error("{file}: {message}")]
    Parse {
        /// The file, as shown in messages.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// A value parsed but is out of range or otherwise invalid.
    #[error("{file}: {key}: {message}")]
    Invalid {
        /// The file, as shown in messages.
        file: String,
        /// The config key.
        key: String,
        /// What is wrong.
        message: String,
    },
}

pub use context_storage::{ContextStorage, DEFAULT_MAX_FILES_PER_CALL, DEFAULT_SUMMARY_PROMPT};
pub use llm::{LlmConfig, MIN_THINKING_BUDGET, Provider, Thinking};
pub use plugins::{DEFAULT_COMPRESSOR, DEFAULT_STRATEGY, NO_COMPRESSOR, PluginsConfig};
pub use process::{AgentConfig, DEFAULT_SYSTEM_PROMPT, RuntimeConfig, WorkerConfig};
pub use remote::{RemoteConfig, RemoteLocation};
pub use sources::{CommitAuthor, SourceConfig, SourceKind, SourcesConfig};
pub use strategy::{ContextInheritance, StrategySection};
pub use task_store::TaskStoreConfig;
pub use window::{DEFAULT_RESERVE_OUTPUT_TOKENS, MIN_TOOL_OUTPUT_CAP};

/// A value out of range: the key and what is wrong (the file is added by [`Config::validate`]).
#[derive(Debug)]
pub(crate) struct Invalid {
    key: String,
    message: String,
}

impl Invalid {
    /// `Err` naming `key`.
    pub(crate) fn err(key: &str, message: impl Into<String>) -> Result<(), Invalid> {
        Err(Invalid {
            key: key.to_string(),
            message: message.into(),
        })
    }
}

/// The whole config file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// `context_storage`: where contexts live, compression.
    pub context_storage: ContextStorage,
    /// `llm`: the provider and how to reach it.
    pub llm: LlmConfig,
    /// `plugins`: the components.
    pub plugins: PluginsConfig,
    /// `runtime`: limits of every component instance.
    pub runtime: RuntimeConfig,
    /// `agent`: the agent loop.
    pub agent: AgentConfig,
    /// `strategy`: settings of the agent strategy.
    pub strategy: StrategySection,
    /// `context_inheritance`: starting from an earlier task with the same key.
    pub context_inheritance: ContextInheritance,
    /// `worker`: the `ctxhost run` process.
    pub worker: WorkerConfig,
    /// MCP servers started for every task (stdio); their tools are offered to the model.
    pub mcp_servers: std::collections::BTreeMap<String, crate::tools::McpServerConfig>,
    /// Tool call limits: output size, deadlines; the built-in tools and their sandbox.
    pub tools: crate::tools::ToolsConfig,
    /// The directory the built-in tools work on for tasks that name none (`submit`, `run`);
    /// `ctxhost ask` uses the current directory unless this is set. Relative to the config
    /// file. `None`: such tasks get no built-in tools.
    pub workspace: Option<std::path::PathBuf>,
    /// The file this config was loaded from (not a key: set by [`Config::load`]); the built-in
    /// tools may not touch it.
    #[serde(skip)]
    pub loaded_from: Option<std::path::PathBuf>,
    /// `task_store`: SQLite (contexts/tasks.db) or PostgreSQL.
    pub task_store: TaskStoreConfig,
    /// `sources`: GitHub / GitLab repositories whose labelled items become tasks.
    pub sources: SourcesConfig,
}

impl Config {
    /// Load `path`. A missing file gives the defaults (validated like any other config).
    /// Errors: unreadable file, YAML syntax, unknown key, wrong type, invalid value — each
    /// naming `path` and the key.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        match std::fs::read_to_string(path) {
            Ok(text) => Config::from_yaml(&text, &file).map(|c| c.relative_to(path)),
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
            Ok(text) => Config::from_yaml(&text, &file).map(|c| c.relative_to(path)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(ConfigError::Missing { file })
            }
            Err(source) => Err(ConfigError::Read { file, source }),
        }
    }

    /// Parse and validate YAML `text`; `file` names it in errors. An empty document gives the defaults.
    pub fn from_yaml(text: &str, file: &str) -> Result<Config, ConfigError> {
        let parse_error = |e: serde_norway::Error| ConfigError::Parse {
            file: file.to_string(),
            message: suggest_known_key(&explain_integer_range(&e.to_string())),
        };
        let typed = || serde_norway::from_str::<Config>(text).map_err(parse_error);
        let mut max_output_tokens_given = false;
        let mut cfg: Config = if text.trim().is_empty() {
            Config::default()
        } else {
            // An all-comments document parses as null: treat like empty.
            match serde_norway::from_str::<serde_norway::Value>(text) {
                Ok(value) if value.is_null() => Config::default(),
                Ok(value) => {
                    max_output_tokens_given = value
                        .get("llm")
                        .and_then(|llm| llm.get("max_output_tokens"))
                        .is_some();
                    typed()?
                }
                // The typed parse names what the key expects (an integer too large for any
                // YAML value is `expected u64` there); its error is the more useful one.
                Err(e) => {
                    typed()?;
                    return Err(parse_error(e));
                }
            }
        };
        // Responses API: reasoning tokens count against `max_output_tokens`, so a reasoning
        // model gets the provider's default (the field left out) unless the key is set.
        if !max_output_tokens_given && cfg.request_format() == "builtin:openai-responses" {
            cfg.llm.max_output_tokens = None;
        }
        cfg.validate(file)?;
        Ok(cfg)
    }

    /// Check value ranges and formats, section by section. Errors name `file` and the key.
    pub fn validate(&self, file: &str) -> Result<(), ConfigError> {
        let checks = [
            self.context_storage.validate(),
            self.llm.validate(),
            self.plugins.validate(),
            self.llm.validate_for_format(self.request_format()),
            self.runtime.validate(),
            self.agent.validate(),
            self.strategy.validate(),
            self.context_inheritance.validate(),
            self.worker.validate(),
            self.task_store.validate(),
            self.sources.validate(),
            crate::tools::config::validate(&self.mcp_servers, &self.tools)
                .map_err(|(key, message)| Invalid { key, message }),
        ];
        match checks.into_iter().find_map(Result::err) {
            None => Ok(()),
            Some(Invalid { key, message }) => Err(ConfigError::Invalid {
                file: file.to_string(),
                key,
                message,
            }),
        }
    }
}

/// serde's message for an unknown key (`unknown field `modle`, expected one of `provider`,
/// `model`, …`) with the closest known key suggested after it (`; did you mean `model`?`),
/// when one is close enough (Jaro-Winkler similarity ≥ 0.8, as cargo and clap suggest).
/// Other messages are returned as they are.
fn suggest_known_key(message: &str) -> String {
    let Some(start) = message.find("unknown field `") else {
        return message.to_string();
    };
    let rest = &message[start + "unknown field `".len()..];
    let Some(end) = rest.find('`') else {
        return message.to_string();
    };
    let unknown = &rest[..end];
    let Some(list_at) = rest
        .find("expected one of ")
        .or_else(|| rest.find("expected "))
    else {
        return message.to_string();
    };
    let list = &rest[list_at..];
    let list = list.split(" at line ").next().unwrap_or(list);
    let best = list
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|known| (strsim::jaro_winkler(unknown, known), known))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match best {
        Some((_, known)) => match message.find(" at line ") {
            Some(at) if at > start => format!(
                "{}; did you mean `{known}`?{}",
                &message[..at],
                &message[at..]
            ),
            _ => format!("{message}; did you mean `{known}`?"),
        },
        None => message.to_string(),
    }
}

/// serde's message for an integer that does not fit its key (`invalid value: integer
/// `5000000000`, expected u32`, `invalid type: integer `99999999999999999999999` as u128,
/// expected u64`, `invalid type: integer `-5`, expected u64`) in words: `5000000000 is out of
/// range: a whole number from 0 to 4294967295 is expected`. Other messages are returned as
/// they are; the key path before and the position after are kept.
fn explain_integer_range(message: &str) -> String {
    for prefix in ["invalid type: integer `", "invalid value: integer `"] {
        let Some(start) = message.find(prefix) else {
            continue;
        };
        let rest = &message[start + prefix.len()..];
        let Some(end) = rest.find('`') else {
            continue;
        };
        let number = &rest[..end];
        let mut after = &rest[end + 1..];
        for wide in [" as u128", " as i128"] {
            after = after.strip_prefix(wide).unwrap_or(after);
        }
        let Some(after) = after.strip_prefix(", expected ") else {
            continue;
        };
        let type_end = after
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(after.len());
        let (min, max): (i128, i128) = match &after[..type_end] {
            "u8" => (0, u8::MAX.into()),
            "u16" => (0, u16::MAX.into()),
            "u32" => (0, u32::MAX.into()),
            "u64" | "usize" => (0, u64::MAX.into()),
            "i32" => (i32::MIN.into(), i32::MAX.into()),
            "i64" | "isize" => (i64::MIN.into(), i64::MAX.into()),
            _ => continue,
        };
        return format!(
            "{}{number} is out of range: a whole number from {min} to {max} is expected{}",
            &message[..start],
            &after[type_end..]
        );
    }
    message.to_string()
}

/// Where the contexts directory in effect was named, for errors: `--contexts`, or
/// `context_storage.base_dir` of `config_path` (its default when the file is missing).
pub fn contexts_from(flag: bool, config_path: &Path) -> String {
    if flag {
        "--contexts".to_string()
    } else if config_path.exists() {
        format!("context_storage.base_dir in {}", config_path.display())
    } else {
        format!(
            "context_storage.base_dir (the default: {} does not exist)",
            config_path.display()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_key_suggests_the_closest_known_one() {
        let e = Config::from_yaml("llm:\n  modle: x\n", "c.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `modle`"), "{e}");
        assert!(e.contains("did you mean `model`?"), "{e}");
        let e = Config::from_yaml("llm:\n  zzzzzz: x\n", "c.yaml")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("did you mean"), "{e}");
    }

    #[test]
    fn an_integer_out_of_range_names_the_key_and_the_range() {
        assert_eq!(
            err("llm:\n  context_length: 99999999999999999999999\n"),
            "config.yaml: llm.context_length: 99999999999999999999999 is out of range: \
             a whole number from 0 to 18446744073709551615 is expected at line 2 column 19"
        );
        assert_eq!(
            err("llm:\n  max_retries: 5000000000\n"),
            "config.yaml: llm.max_retries: 5000000000 is out of range: \
             a whole number from 0 to 4294967295 is expected at line 2 column 16"
        );
        assert_eq!(
            err("llm:\n  context_length: -5\n"),
            "config.yaml: llm.context_length: -5 is out of range: \
             a whole number from 0 to 18446744073709551615 is expected at line 2 column 19"
        );
        // Other type errors are left as serde words them.
        assert!(err("llm:\n  context_length: lots\n").contains("expected u64"));
    }

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
        for key in [
            "max_task_dir_mib",
            "max_files_per_call",
            "max_llm_calls_per_compression",
            "max_compression_secs",
        ] {
            let e = err(&format!("context_storage:\n  {key}: 0\n"));
            assert!(
                e.contains(&format!("context_storage.{key}: must be at least 1")),
                "{e}"
            );
        }
        assert!(err("llm:\n  max_request_mib: 0\n").contains("llm.max_request_mib"));
        // Issue 37 item 14: a reply is one line of the context files (at most 64 MiB).
        let e = err("llm:\n  max_response_mib: 100\n");
        assert!(
            e.contains("llm.max_response_mib: must be at most 64, got 100"),
            "{e}"
        );
        assert_eq!(
            crate::config::llm::MAX_RESPONSE_MIB << 20,
            crate::invariants::context_check::MAX_CONTEXT_LINE_BYTES as u64
        );
        Config::from_yaml("llm:\n  max_response_mib: 64\n", "c").unwrap();
        // u64::MAX seconds used to pass and then fail every request ("deadline overflowed").
        for key in [
            "timeout_secs",
            "connect_timeout_secs",
            "max_backoff_secs",
            "interrupt_grace_secs",
        ] {
            assert_eq!(
                err(&format!("llm:\n  {key}: 18446744073709551615\n")),
                format!(
                    "config.yaml: llm.{key}: must be at most 86400 (a day), got 18446744073709551615"
                )
            );
            assert!(Config::from_yaml(&format!("llm:\n  {key}: 86400\n"), "c").is_ok());
        }
        let e = err("llm:\n  base_url: \"https://me:pa55word@h.example\"\n");
        assert!(
            e.contains("https://***@h.example") && !e.contains("pa55word"),
            "{e}"
        );
    }

    #[test]
    fn llm_thinking_is_a_budget_or_adaptive_within_the_providers_rules() {
        let a =
            |rest: &str| format!("llm:\n  provider: anthropic\n  max_output_tokens: 4096\n{rest}");
        let cfg = Config::from_yaml(&a("  thinking: 2048\n"), "c").unwrap();
        assert_eq!(cfg.llm.thinking, Some(Thinking::Budget(2048)));
        let cfg = Config::from_yaml(&a("  thinking: adaptive\n"), "c").unwrap();
        assert_eq!(cfg.llm.thinking, Some(Thinking::Adaptive));
        assert_eq!(Config::default().llm.thinking, None);
        let e = err(&a("  thinking: lots\n"));
        assert!(
            e.contains("llm.thinking")
                && e.contains("a thinking budget in tokens (e.g. 4096) or `adaptive`"),
            "{e}"
        );
        assert_eq!(
            err(&a("  thinking: 512\n")),
            "config.yaml: llm.thinking: must be at least 1024 tokens for anthropic, got 512"
        );
        assert_eq!(
            err(&a("  thinking: 4096\n")),
            "config.yaml: llm.thinking: must be below llm.max_output_tokens (4096): thinking counts as output, got 4096"
        );
        let more = "llm:\n  provider: anthropic\n  max_output_tokens: 8000\n  thinking: 4096\n";
        assert!(Config::from_yaml(more, "c").is_ok());
        assert_eq!(
            err(&a("  thinking: 2048\n  temperature: 0.5\n")),
            "config.yaml: llm.temperature: must not be set with llm.thinking: Anthropic refuses a temperature with extended thinking"
        );
        assert!(Config::from_yaml("llm:\n  provider: ollama\n  thinking: 10\n", "c").is_ok());
        let e = err("llm:\n  provider: openai\n  thinking: 2048\n");
        assert!(e.contains("llm.thinking: is for provider anthropic"), "{e}");
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
    fn relative_plugin_paths_resolve_against_the_config_files_directory() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("conf");
        std::fs::create_dir(&conf).unwrap();
        let path = conf.join("config.yaml");
        std::fs::write(
            &path,
            "plugins:\n  compressor: plugins/mine.wasm\n  request_format: /opt/f.wasm\n  message_store: builtin:jsonl-store\n",
        )
        .unwrap();
        let cfg = Config::load_existing(&path).unwrap();
        assert_eq!(
            cfg.compressor(),
            Some(conf.join("plugins/mine.wasm").to_str().unwrap())
        );
        assert_eq!(cfg.request_format(), "/opt/f.wasm");
        assert_eq!(cfg.plugins.message_store, "builtin:jsonl-store");
        std::fs::write(&path, "plugins:\n  compressor: none\n").unwrap();
        assert_eq!(Config::load(&path).unwrap().compressor(), None);
        // A config in the current directory keeps its relative paths as they are.
        let here = Config::from_yaml("plugins:\n  compressor: x.wasm\n", "config.yaml").unwrap();
        assert_eq!(
            here.relative_to(Path::new("config.yaml")).compressor(),
            Some("x.wasm")
        );
    }

    #[test]
    fn compressor_none_disables_compression() {
        assert_eq!(
            Config::default().compressor(),
            Some("builtin:llm-summarizer")
        );
        let c = Config::from_yaml("plugins:\n  compressor: none\n", "c").unwrap();
        assert_eq!(c.compressor(), None);
        for key in ["message_store", "request_format", "strategy"] {
            assert_eq!(
                err(&format!("plugins:\n  {key}: none\n")),
                format!(
                    "config.yaml: plugins.{key}: cannot be `none` (only plugins.compressor can be switched off)"
                )
            );
        }
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
    fn strategy_and_inheritance_settings() {
        let d = Config::default();
        assert_eq!(d.plugins.strategy, "builtin:react");
        assert!(d.context_inheritance.enabled);
        assert_eq!(d.context_inheritance.max_inherited_tokens, 8000);
        assert_eq!(d.context_inheritance.context_expiry_days, 90);
        assert_eq!(
            d.inherited_token_budget(),
            8000.min(d.llm.context_length / 4)
        );
        let c = Config::from_yaml(
            "plugins:\n  strategy: builtin:plan-execute\nstrategy:\n  reflect_every: 3\n  options:\n    style: terse\n    depth: 2\n",
            "c",
        )
        .unwrap();
        assert_eq!(c.plugins.strategy, "builtin:plan-execute");
        let v: serde_json::Value = serde_json::from_str(&c.strategy.settings_json()).unwrap();
        assert_eq!(v["reflect_every"], 3);
        assert_eq!(v["max_verifications"], 2);
        assert_eq!(v["style"], "terse");
        assert_eq!(v["depth"], 2);
        assert!(err("strategy:\n  max_verifications: 0\n").contains("strategy.max_verifications"));
        assert!(
            err("strategy:\n  options:\n    reflect_every: 1\n")
                .contains("strategy.options.reflect_every: set strategy.reflect_every instead")
        );
        assert!(
            err("context_inheritance:\n  max_inherited_tokens: 5\n")
                .contains("context_inheritance.max_inherited_tokens")
        );
        assert!(
            err("context_inheritance:\n  context_expiry_days: 0\n")
                .contains("context_inheritance.context_expiry_days")
        );
        assert!(err("plugins:\n  strategy: \"\"\n").contains("plugins.strategy"));
        assert!(err("plugins:\n  strategy: builtin:Plan\n").contains("plugins.strategy"));
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
    fn a_base_url_the_transport_cannot_parse_is_refused_and_a_query_is_not_echoed() {
        for url in ["http://[::1", "http://[::1]:99999", "http://[nothex]"] {
            let e = err(&format!("llm:\n  base_url: \"{url}\"\n"));
            assert!(e.contains("llm.base_url"), "{url}: {e}");
        }
        let e = err("llm:\n  base_url: \"http://h:8/?key=s3cret\"\n");
        assert!(e.contains("query or fragment: `http://h:8/?…`"), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
        for url in [
            "http://[::1]:8089",
            "https://h.example/v1",
            "http://10.0.0.1",
        ] {
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

    #[test]
    fn keys_a_request_format_ignores_are_refused_naming_the_key() {
        let e = err("llm:\n  provider: anthropic\n  reasoning_effort: high\n");
        assert!(
            e.starts_with("config.yaml: llm.reasoning_effort: is sent only by builtin:openai-chat")
                && e.contains("builtin:anthropic-messages (provider anthropic)")
                && e.contains("use llm.thinking"),
            "{e}"
        );
        let e = err("llm:\n  provider: ollama\n  reasoning_effort: low\n");
        assert!(
            e.contains("llm.reasoning_effort") && e.contains("builtin:ollama-chat"),
            "{e}"
        );
        let e = err("llm:\n  provider: anthropic\n  send_reasoning_content: true\n");
        assert!(
            e.starts_with(
                "config.yaml: llm.send_reasoning_content: is sent only by builtin:openai-chat"
            ),
            "{e}"
        );
        let responses = "plugins:\n  request_format: builtin:openai-responses\n";
        let e = err(&format!(
            "llm:\n  send_reasoning_content: true\n{responses}"
        ));
        assert!(
            e.contains("llm.send_reasoning_content") && e.contains("builtin:openai-responses"),
            "{e}"
        );
        for provider in ["anthropic", "ollama"] {
            let e = err(&format!("llm:\n  provider: {provider}\n{responses}"));
            assert!(
                e.starts_with("config.yaml: plugins.request_format: builtin:openai-responses posts to /v1/responses")
                    && e.contains(&format!("provider {provider} does not serve")),
                "{e}"
            );
        }
        // Where they are sent, and with a .wasm format (which may read them), they stay.
        for ok in [
            format!("llm:\n  provider: llamacpp\n  reasoning_effort: high\n{responses}"),
            "llm:\n  reasoning_effort: high\n  send_reasoning_content: true\n".to_string(),
            "llm:\n  provider: anthropic\n  reasoning_effort: high\nplugins:\n  request_format: /opt/f.wasm\n".to_string(),
        ] {
            assert!(Config::from_yaml(&ok, "c").is_ok(), "{ok}");
        }
    }

    #[test]
    fn prices_past_the_bound_are_refused_naming_the_key() {
        let e = err("llm:\n  pricing:\n    qwen: {input: 1e300, output: 1}\n");
        assert_eq!(
            e,
            "config.yaml: llm.pricing.qwen.input: must be a price from 0 to 1000000 (US dollars per million tokens), got 1e300"
        );
        let e = err("llm:\n  pricing:\n    qwen: {input: 1, output: 2, cache_write: 1000001}\n");
        assert!(e.contains("llm.pricing.qwen.cache_write"), "{e}");
        assert!(
            Config::from_yaml(
                "llm:\n  pricing:\n    qwen: {input: 1000000, output: 0}\n",
                "c"
            )
            .is_ok()
        );
    }
}

#[cfg(test)]
mod responses_max_output_tests {
    use super::Config;

    fn max_output(yaml: &str) -> Option<u32> {
        Config::from_yaml(yaml, "config.yaml")
            .unwrap()
            .llm
            .max_output_tokens
    }

    #[test]
    fn the_responses_format_leaves_max_output_tokens_to_the_provider_unless_set() {
        let responses = "plugins:\n  request_format: builtin:openai-responses\n";
        assert_eq!(max_output(responses), None);
        assert_eq!(
            max_output(&format!("llm:\n  max_output_tokens: 2000\n{responses}")),
            Some(2000)
        );
        assert_eq!(
            max_output(&format!("llm:\n  max_output_tokens: null\n{responses}")),
            None
        );
        // The chat format keeps its default.
        assert_eq!(max_output("llm:\n  model: m\n"), Some(1024));
    }
}
