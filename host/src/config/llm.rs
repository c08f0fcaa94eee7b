//! `llm`: the provider ([`Provider`]) and how to reach it ([`LlmConfig`]).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Config, Invalid};
use crate::llm::TransportConfig;

/// The LLM provider. Decides the default base URL, request format and API-key variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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

    /// The model `ctxhost init --provider P` writes, and that `--provider P` brings when the
    /// config still names another provider's default: OpenAI `gpt-4o-mini`, Anthropic
    /// `claude-sonnet-4-5` (the alias of Claude Sonnet 4.5), Ollama `llama3.2`; the
    /// OpenAI-compatible local servers serve what they loaded (llama-server ignores the name,
    /// LM Studio and vLLM need their model id), so `local-model` stands for it.
    pub fn default_model(self) -> &'static str {
        match self {
            Provider::Openai => "gpt-4o-mini",
            Provider::Anthropic => "claude-sonnet-4-5",
            Provider::Ollama => "llama3.2",
            Provider::Lmstudio | Provider::Llamacpp | Provider::Vllm => "local-model",
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

/// `llm`: the provider and how to reach it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LlmConfig {
    /// The provider (decides the defaults of the other keys).
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
    /// The model's thinking ([`Thinking`]; `None`: off): Anthropic extended thinking (a budget
    /// in tokens, or adaptive), Ollama's `think`. Anthropic refuses a temperature with it.
    pub thinking: Option<Thinking>,
    /// Whole-request timeout, seconds (1 to [`MAX_LLM_SECS`]).
    pub timeout_secs: u64,
    /// Connect timeout, seconds (1 to [`MAX_LLM_SECS`]).
    pub connect_timeout_secs: u64,
    /// Retries after the first attempt on 429/5xx/connection errors/timeouts.
    pub max_retries: u32,
    /// Longest wait between retries, seconds (1 to [`MAX_LLM_SECS`]); Retry-After is honoured
    /// up to this.
    pub max_backoff_secs: u64,
    /// Largest reply accepted, MiB (1 to [`MAX_RESPONSE_MIB`]), the same rule for every request
    /// format: an unstreamed response body, or the reply folded from a stream as messages.jsonl
    /// stores it (its text, tool-call arguments and reasoning as JSON); a stream's raw bytes may
    /// be [`crate::llm::STREAM_FRAMING_FACTOR`] times that (event framing).
    pub max_response_mib: u64,
    /// Largest request body sent, MiB (≥ 1); a bigger request fails the call without sending it.
    pub max_request_mib: u64,
    /// How long a pause or stop request waits for an agent-loop LLM call already in flight
    /// before abandoning it, seconds (0 to [`MAX_LLM_SECS`]; 0: at once). A reply that arrives
    /// in time is kept; an abandoned call is sent again when a paused task resumes. Retries and
    /// back-off waits never start or go on after the request.
    pub interrupt_grace_secs: u64,
    /// Ask for streamed replies (the agent loop's calls, with a request format that reads
    /// streams: `builtin:openai-chat`, `builtin:anthropic-messages`, `builtin:ollama-chat`); the
    /// raw stream is kept in `reply.stream` as it arrives. On by default; `false` for a server
    /// that refuses `"stream": true` (one that ignores it and answers one JSON body needs
    /// nothing: the body is read as such). The `llm` calls of compressors and strategies
    /// (summaries, plans) are never streamed: they are short, bounded by their step's
    /// wall-time limit, and nobody watches them arrive.
    pub stream: bool,
    /// `builtin:openai-chat`, with `stream`: ask for the usage of a streamed reply
    /// (`stream_options: {"include_usage": true}`). `None` (the default): on for `provider:
    /// openai`, off for the other providers (strict OpenAI-compatible servers answer HTTP 400
    /// "Unrecognized request argument"); the reply's usage is then unknown. A server that
    /// answers 400 naming `stream_options` gets the call once more without it (within
    /// `max_retries`), and the task's later calls leave it out.
    pub stream_usage: Option<bool>,
    /// For a streamed reply: the longest wait between two reads of its body, seconds (1 to
    /// [`MAX_LLM_SECS`]), instead of `timeout_secs` for the whole call.
    pub idle_timeout_secs: u64,
    /// Prices per model, US dollars per million tokens ([`super::pricing`]); empty: no cost
    /// is shown.
    #[serde(skip_serializing_if = "super::pricing::Pricing::is_empty")]
    pub pricing: super::pricing::Pricing,
    /// OpenAI reasoning effort, one of [`REASONING_EFFORTS`]: sent as `reasoning.effort` by
    /// `builtin:openai-responses` and as `reasoning_effort` by `builtin:openai-chat`
    /// (`None`: not sent, the model's default).
    pub reasoning_effort: Option<String>,
    /// `builtin:openai-chat`: send each assistant message's kept `reasoning_content` back
    /// with it (DeepSeek's thinking mode with tools requires it; off by default: the
    /// chat-completions API defines no such field and strict servers refuse it).
    pub send_reasoning_content: bool,
}

/// `llm.thinking`: how much the model may think before it answers. In YAML a number of tokens
/// (`thinking: 4096`) or `adaptive`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Thinking {
    /// At most this many tokens of thinking (Anthropic `budget_tokens`: at least
    /// [`MIN_THINKING_BUDGET`], below `max_output_tokens`; Ollama: `think: true`).
    Budget(u32),
    /// The model decides (Anthropic `{"type":"adaptive"}`, newer models; Ollama: `think: true`).
    Adaptive,
}

/// The smallest thinking budget Anthropic accepts, tokens.
pub const MIN_THINKING_BUDGET: u32 = 1024;

impl Serialize for Thinking {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Thinking::Budget(n) => s.serialize_u32(*n),
            Thinking::Adaptive => s.serialize_str("adaptive"),
        }
    }
}

impl<'de> Deserialize<'de> for Thinking {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Thinking;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a thinking budget in tokens (e.g. 4096) or `adaptive`")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Thinking, E> {
                u32::try_from(n)
                    .map(Thinking::Budget)
                    .map_err(|_| E::custom(format!("thinking budget {n} is too large")))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Thinking, E> {
                match u64::try_from(n) {
                    Ok(n) => self.visit_u64(n),
                    Err(_) => Err(E::invalid_value(serde::de::Unexpected::Signed(n), &self)),
                }
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Thinking, E> {
                match v {
                    "adaptive" => Ok(Thinking::Adaptive),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// In the schema of config.yaml: a whole number of tokens, or the string `adaptive`.
impl schemars::JsonSchema for Thinking {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Thinking".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "oneOf": [
                {"type": "integer", "minimum": 0, "maximum": u32::MAX, "description": "a thinking budget in tokens"},
                {"const": "adaptive", "description": "the model decides"}
            ]
        })
    }
}

/// The values `llm.reasoning_effort` accepts (OpenAI's reasoning efforts; which ones a model
/// takes depends on the model).
pub const REASONING_EFFORTS: [&str; 6] = ["none", "minimal", "low", "medium", "high", "xhigh"];

/// Upper bound of `llm.timeout_secs`, `connect_timeout_secs`, `max_backoff_secs` and
/// `interrupt_grace_secs`: 86,400 s.
pub const MAX_LLM_SECS: u64 = 86_400;

/// The most `llm.max_response_mib` may be: the longest line of a context file, MiB
/// (`crate::invariants::context_check::MAX_CONTEXT_LINE_BYTES`), since a reply is one line of
/// messages.jsonl and current.jsonl.
pub const MAX_RESPONSE_MIB: u64 = 64;

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig {
            provider: Provider::Openai,
            base_url: None,
            model: Provider::Openai.default_model().to_string(),
            api_key_env: None,
            context_length: 8192,
            max_output_tokens: Some(1024),
            temperature: None,
            thinking: None,
            timeout_secs: 300,
            connect_timeout_secs: 10,
            max_retries: 3,
            max_backoff_secs: 30,
            max_response_mib: 16,
            max_request_mib: 32,
            interrupt_grace_secs: 10,
            stream: true,
            stream_usage: None,
            idle_timeout_secs: 120,
            pricing: super::pricing::Pricing::default(),
            reasoning_effort: None,
            send_reasoning_content: false,
        }
    }
}

impl LlmConfig {
    /// Whether a streamed request asks for the reply's usage (`llm.stream_usage`, by default
    /// on for `provider: openai` only).
    pub fn stream_usage(&self) -> bool {
        self.stream_usage
            .unwrap_or(self.provider == Provider::Openai)
    }

    /// Check value ranges and formats; the error names the key.
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        self.pricing.validate()?;
        if let Some(url) = &self.base_url
            && let Err(msg) = check_base_url(url)
        {
            return Invalid::err("llm.base_url", msg);
        }
        if self.model.trim().is_empty() {
            return Invalid::err("llm.model", "must not be empty");
        }
        if let Some(var) = &self.api_key_env
            && !var.is_empty()
            && !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Invalid::err(
                "llm.api_key_env",
                format!("must be an environment variable name (letters, digits, _), got `{var}`"),
            );
        }
        if self.context_length < 256 {
            return Invalid::err(
                "llm.context_length",
                format!("must be at least 256, got {}", self.context_length),
            );
        }
        if let Some(n) = self.max_output_tokens {
            if n == 0 {
                return Invalid::err("llm.max_output_tokens", "must be at least 1, got 0");
            }
            if u64::from(n) >= self.context_length {
                return Invalid::err(
                    "llm.max_output_tokens",
                    format!(
                        "must be less than llm.context_length ({}), got {n}",
                        self.context_length
                    ),
                );
            }
        }
        let max_temperature = self.provider.max_temperature();
        if let Some(t) = self.temperature
            && !(0.0..=max_temperature).contains(&t)
        {
            return Invalid::err(
                "llm.temperature",
                format!(
                    "must be in [0, {max_temperature}] for provider {}, got {t}",
                    self.provider
                ),
            );
        }
        self.validate_thinking()?;
        for (key, v) in [
            ("llm.timeout_secs", self.timeout_secs),
            ("llm.connect_timeout_secs", self.connect_timeout_secs),
            ("llm.max_backoff_secs", self.max_backoff_secs),
            ("llm.idle_timeout_secs", self.idle_timeout_secs),
            ("llm.max_response_mib", self.max_response_mib),
            ("llm.max_request_mib", self.max_request_mib),
        ] {
            if v < 1 {
                return Invalid::err(key, "must be at least 1, got 0");
            }
        }
        if self.max_response_mib > MAX_RESPONSE_MIB {
            return Invalid::err(
                "llm.max_response_mib",
                format!(
                    "must be at most {MAX_RESPONSE_MIB}, got {}: a reply is one line of messages.jsonl and \
                     current.jsonl, whose lines are at most {MAX_RESPONSE_MIB} MiB (the same for every request format)",
                    self.max_response_mib
                ),
            );
        }
        // A deadline past what the clock can represent fails every request ("Request deadline
        // overflowed"); a day is longer than any call or wait should take.
        for (key, v) in [
            ("llm.timeout_secs", self.timeout_secs),
            ("llm.connect_timeout_secs", self.connect_timeout_secs),
            ("llm.max_backoff_secs", self.max_backoff_secs),
            ("llm.interrupt_grace_secs", self.interrupt_grace_secs),
            ("llm.idle_timeout_secs", self.idle_timeout_secs),
        ] {
            if v > MAX_LLM_SECS {
                return Invalid::err(
                    key,
                    format!("must be at most {MAX_LLM_SECS} (a day), got {v}"),
                );
            }
        }
        if let Some(effort) = &self.reasoning_effort
            && !REASONING_EFFORTS.contains(&effort.as_str())
        {
            return Invalid::err(
                "llm.reasoning_effort",
                format!(
                    "must be one of {}, got `{effort}`",
                    REASONING_EFFORTS.join(", ")
                ),
            );
        }
        if self.max_retries > 20 {
            return Invalid::err(
                "llm.max_retries",
                format!("must be at most 20, got {}", self.max_retries),
            );
        }
        Ok(())
    }
}

impl LlmConfig {
    /// The keys only some request formats send, against `format` (the request format in
    /// effect, [`Config::request_format`]): `reasoning_effort` is sent only by
    /// `builtin:openai-chat` and `builtin:openai-responses`, `send_reasoning_content` only by
    /// `builtin:openai-chat` (a `.wasm` format may read either); and `builtin:openai-responses`
    /// (`/v1/responses`) only with an OpenAI-compatible provider, not anthropic or ollama.
    pub(super) fn validate_for_format(&self, format: &str) -> Result<(), Invalid> {
        let builtin = format.strip_prefix("builtin:");
        let provider = self.provider;
        if builtin == Some("openai-responses")
            && matches!(provider, Provider::Anthropic | Provider::Ollama)
        {
            return Invalid::err(
                "plugins.request_format",
                format!(
                    "builtin:openai-responses posts to /v1/responses, which provider {provider} does not \
                     serve: use its default ({}) or an OpenAI-compatible provider (openai, llamacpp, vllm, lmstudio)",
                    provider.default_request_format()
                ),
            );
        }
        if self.reasoning_effort.is_some()
            && let Some(name) = builtin
            && !matches!(name, "openai-chat" | "openai-responses")
        {
            return Invalid::err(
                "llm.reasoning_effort",
                format!(
                    "is sent only by builtin:openai-chat and builtin:openai-responses; the request \
                     format builtin:{name} (provider {provider}) ignores it{}",
                    match provider {
                        Provider::Anthropic | Provider::Ollama => ": use llm.thinking",
                        _ => "",
                    }
                ),
            );
        }
        if self.send_reasoning_content
            && let Some(name) = builtin
            && name != "openai-chat"
        {
            return Invalid::err(
                "llm.send_reasoning_content",
                format!(
                    "is sent only by builtin:openai-chat; the request format builtin:{name} \
                     (provider {provider}) ignores it"
                ),
            );
        }
        Ok(())
    }
}

impl LlmConfig {
    /// `llm.thinking` against the provider's rules: Anthropic and Ollama only; for Anthropic a
    /// budget of at least [`MIN_THINKING_BUDGET`] below `max_output_tokens` (4096 when unset:
    /// thinking counts as output), and no `temperature`.
    fn validate_thinking(&self) -> Result<(), Invalid> {
        let Some(thinking) = self.thinking else {
            return Ok(());
        };
        match self.provider {
            Provider::Anthropic => {}
            Provider::Ollama => return Ok(()),
            other => {
                return Invalid::err(
                    "llm.thinking",
                    format!(
                        "is for provider anthropic (extended thinking) or ollama (think); \
                         provider {other} has no such setting"
                    ),
                );
            }
        }
        if let Thinking::Budget(n) = thinking {
            let max = self.max_output_tokens.unwrap_or(4096);
            if n < MIN_THINKING_BUDGET {
                return Invalid::err(
                    "llm.thinking",
                    format!("must be at least {MIN_THINKING_BUDGET} tokens for anthropic, got {n}"),
                );
            }
            if n >= max {
                return Invalid::err(
                    "llm.thinking",
                    format!(
                        "must be below llm.max_output_tokens ({max}): thinking counts as output, got {n}"
                    ),
                );
            }
        }
        if self.temperature.is_some() {
            return Invalid::err(
                "llm.temperature",
                "must not be set with llm.thinking: Anthropic refuses a temperature with extended thinking",
            );
        }
        Ok(())
    }

    /// The reasoning settings sent with the agent loop's requests (`llm.thinking`,
    /// `llm.reasoning_effort`, `llm.send_reasoning_content`), `None` when none is set.
    pub fn reasoning(&self) -> Option<crate::runtime::ReasoningConfig> {
        if self.reasoning_effort.is_none()
            && !self.send_reasoning_content
            && self.thinking.is_none()
        {
            return None;
        }
        let (thinking_budget_tokens, thinking_adaptive) = match self.thinking {
            Some(Thinking::Budget(n)) => (Some(n), false),
            Some(Thinking::Adaptive) => (None, true),
            None => (None, false),
        };
        Some(crate::runtime::ReasoningConfig {
            effort: self.reasoning_effort.clone(),
            send_reasoning_content: self.send_reasoning_content,
            thinking_budget_tokens,
            thinking_adaptive,
        })
    }
}

impl Config {
    /// The provider base URL in effect (config or provider default), without a trailing `/`.
    pub fn base_url(&self) -> String {
        let url = self
            .llm
            .base_url
            .as_deref()
            .unwrap_or(self.llm.provider.default_base_url());
        url.trim_end_matches('/').to_string()
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

    /// The transport settings of the `llm` section, with the API key read from the
    /// environment now (error naming `llm.api_key_env` if it is configured but unset).
    pub fn transport_config(&self) -> anyhow::Result<TransportConfig> {
        let llm = &self.llm;
        Ok(TransportConfig {
            base_url: self.base_url(),
            api_key: self.api_key()?,
            auth: llm.provider.auth_scheme(),
            connect_timeout: Duration::from_secs(llm.connect_timeout_secs),
            request_timeout: Duration::from_secs(llm.timeout_secs),
            idle_timeout: Duration::from_secs(llm.idle_timeout_secs),
            max_retries: llm.max_retries,
            max_backoff: Duration::from_secs(llm.max_backoff_secs),
            max_response_bytes: llm.max_response_mib.saturating_mul(1024 * 1024),
            max_request_bytes: llm.max_request_mib.saturating_mul(1024 * 1024),
        })
    }
}

/// Check that `url` is an absolute http(s) URL with a host, no credentials and no query or
/// fragment. Messages quote the URL with its credentials hidden
/// ([`crate::llm::redact::url_without_credentials`]).
fn check_base_url(url: &str) -> Result<(), String> {
    let shown = crate::llm::redact::url_without_credentials(url);
    if crate::llm::redact::url_credentials(url).is_some() {
        return Err(format!(
            "must not contain credentials (use llm.api_key_env): `{shown}`"
        ));
    }
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("must start with http:// or https://, got `{shown}`"))?;
    let host_port = rest.split('/').next().unwrap_or("");
    if host_port.is_empty() {
        return Err(format!("has no host: `{shown}`"));
    }
    if url.contains(char::is_whitespace) {
        return Err(format!("must not contain spaces: `{shown}`"));
    }
    if let Some(cut) = shown.find(['?', '#']) {
        // Not echoed: a query is where some providers take a key (`?key=...`).
        return Err(format!(
            "must not have a query or fragment: `{}…`",
            &shown[..=cut]
        ));
    }
    if host_port.contains('@') {
        return Err(format!(
            "must not contain credentials (use llm.api_key_env): `{shown}`"
        ));
    }
    let host = match host_port.rsplit_once(':') {
        Some((host, port)) if !host_port.ends_with(']') => {
            if port.parse::<u16>().is_err() {
                return Err(format!("has an invalid port: `{shown}`"));
            }
            host
        }
        _ => host_port,
    };
    if host.is_empty() {
        return Err(format!("has no host: `{shown}`"));
    }
    // What the transport will parse (`http://[::1` passes the checks above).
    if let Err(e) = url::Url::parse(url) {
        return Err(format!("is not a valid URL ({e}): `{shown}`"));
    }
    // The request format appends the endpoint path (`/v1/chat/completions`, `/api/chat`,
    // `/v1/messages`).
    let trimmed = url.trim_end_matches('/');
    for endpoint in ["/chat/completions", "/api/chat", "/v1/messages"] {
        if let Some(base) = trimmed.strip_suffix(endpoint) {
            let base = base.strip_suffix("/v1").unwrap_or(base);
            return Err(format!(
                "must be the server's base URL only, without the endpoint path (the request format \
                 adds it): got `{shown}`, give `{base}`"
            ));
        }
    }
    Ok(())
}
