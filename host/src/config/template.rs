//! The commented `config.yaml` that `ctxhost init` writes.

use super::Config;

impl Config {
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
  # Most MiB one task directory may hold; a component writing past it is stopped and the task fails.
  max_task_dir_mib: {max_dir}
  # Bounds of one compression: LLM calls through the compressor's llm import (further calls are
  # refused; each is counted in the task's llm_call_count), and wall time, LLM calls included.
  max_llm_calls_per_compression: {max_llm_calls}
  max_compression_secs: {max_compress_secs}
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
  # A larger request body fails the call without being sent.
  max_request_mib: {max_req}

plugins:
  # Each is builtin:NAME or a path to a .wasm component (relative: to this file's directory).
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
            max_req = d.llm.max_request_mib,
            max_dir = d.context_storage.max_task_dir_mib,
            max_llm_calls = d.context_storage.max_llm_calls_per_compression,
            max_compress_secs = d.context_storage.max_compression_secs,
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
