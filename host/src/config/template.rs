//! The commented `config.yaml` that `ctxhost init` writes.

use super::Config;

impl Config {
    /// The commented default config that `ctxhost init` writes. Parses to [`Config::default`].
    /// Its first line points editors at a schema beside it ([`super::schema::modeline`],
    /// [`super::schema::SCHEMA_FILE`]); `init` names where it writes the schema instead
    /// ([`crate::ops::init::schema_place`]).
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
            r#"{modeline}
# ctxhost configuration. Every key is optional; the values below are the defaults.
# Unknown keys are errors (`ctxhost config check` checks this file; config.schema.json, which the
# first line shows editors, is its JSON Schema). Paths are relative to the directory
# ctxhost runs in.

context_storage:
  enabled: true
  # The contexts/ tree: tasks.db, running/, paused/, completed/, .cache/ (overridden by --contexts).
  base_dir: ./contexts
  # Compress the context when its tokens exceed context_length x this fraction, in (0, 1].
  compression_threshold: {threshold}
  # Most recent messages kept verbatim by a compression.
  keep_recent_messages: {keep}
  # ... holding at most this many tokens (default: half the threshold in tokens); older tool-call
  # groups are summarised instead. The newest message's group is always kept.
  # keep_recent_tokens: 2867
  # Completed task directories older than this many days may be deleted (rows stay in tasks.db;
  # at least 1: `ctxhost cleanup --all` deletes every finished task's directory).
  cleanup_days: {cleanup}
  # Most MiB one task directory may hold; a component writing past it is stopped and the task fails.
  max_task_dir_mib: {max_dir}
  # Most files and folders one call of a component may create there; past it, creating is
  # refused and the call fails.
  max_files_per_call: {max_files}
  # Bounds of one compression: LLM calls through the compressor's llm import (further calls are
  # refused; each is counted in the task's llm_call_count), and wall time, LLM calls included.
  max_llm_calls_per_compression: {max_llm_calls}
  max_compression_secs: {max_compress_secs}
  # Once a compression summarised messages, offer the model history_search and history_read: the host
  # answers them from the task's full history (messages.jsonl, tool-results/, summaries.jsonl).
  recall: {recall}
  # Hosts without a shared filesystem: keep every task directory in an S3-compatible bucket too,
  # contexts/ being each host's working copy (docs/scale-out.md). Credentials come only from
  # AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN), never from this file.
  # remote:
  #   url: s3://my-bucket/ctxhost
  #   region: eu-west-1
  #   endpoint: https://s3.eu-west-1.amazonaws.com
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
  # Claude models: raise context_length (200000) and this (e.g. 8192) to use them fully.
  max_output_tokens: {max_out}
  # Sampling temperature, 0-2 (0-1 for anthropic) (null: provider default).
  temperature: null
  # The model's thinking: a budget in tokens (anthropic: at least 1024, below
  # max_output_tokens; no temperature with it) or adaptive (newer Claude models); for ollama
  # either sends think: true. Signed thinking is kept in the history and sent back.
  # A budget needs max_output_tokens above it, e.g. max_output_tokens: 8192 with thinking: 4096.
  # thinking: 4096
  timeout_secs: {timeout}
  connect_timeout_secs: {connect}
  # Retries on 429 / 5xx / connection errors / timeouts, with backoff honouring Retry-After.
  max_retries: {retries}
  max_backoff_secs: {backoff}
  # A pause or stop waits this long for a reply already in flight, then abandons the call
  # (it is sent again on resume); no retry or back-off starts after the request.
  interrupt_grace_secs: {grace}
  # Ask for streamed replies (openai-chat, anthropic-messages, ollama-chat; other formats get
  # the usual request); the raw stream is kept in reply.stream as it arrives. false for a
  # server that refuses "stream": true (one that ignores it and answers plain JSON works
  # either way). Compressor and strategy calls are never streamed.
  stream: {stream}
  # builtin:openai-chat: ask for a streamed reply's usage (stream_options.include_usage; unset:
  # on for provider openai only, since strict OpenAI-compatible servers refuse it).
  # stream_usage: true
  # For a streamed reply: the longest wait between two reads of it (instead of timeout_secs).
  idle_timeout_secs: {idle}
  # OpenAI reasoning effort (none, minimal, low, medium, high, xhigh; null: the model's
  # default): reasoning.effort with builtin:openai-responses, reasoning_effort with
  # builtin:openai-chat.
  # reasoning_effort: medium
  # builtin:openai-chat: send the reasoning_content kept on assistant messages back with them
  # (DeepSeek's thinking mode with tools requires it; strict OpenAI-compatible servers refuse it).
  # send_reasoning_content: false
  max_response_mib: {max_resp}
  # A larger request body fails the call without being sent.
  max_request_mib: {max_req}
  # Prices per model, US dollars per million tokens: the cost in show, stats, the dashboard and
  # ctxhost_llm_cost_usd_total (none: no cost is shown). Cache prices default to the input price.
  # pricing:
  #   gpt-4o-mini: {{input: 0.15, output: 0.60, cache_read: 0.075, cache_write: 0.15}}

plugins:
  # Each is builtin:NAME or a path to a .wasm component (relative: to this file's directory).
  message_store: {store}
  # builtin:llm-summarizer (LLM summary of older messages), builtin:observation-masking
  # (masks old tool results, no LLM), a path to a .wasm compressor, or none.
  compressor: {compressor}
  # Default from the provider: builtin:ollama-chat for ollama, builtin:anthropic-messages for
  # anthropic (with prompt caching), builtin:openai-chat otherwise.
  # builtin:openai-responses: OpenAI's Responses API (/v1/responses), with which OpenAI's
  # reasoning models keep their (encrypted) reasoning across tool calls.
  # builtin:prompted-tools describes the tools in the prompt, for models without native tool calls.
  # request_format: builtin:openai-chat
  # The agent strategy: builtin:react (call the model, make its tool calls, repeat until it
  # answers), builtin:plan-execute (a plan first, then its steps, reflection, verification), or
  # a path to a .wasm strategy component.
  strategy: {strategy}

runtime:
  # Per component instance.
  memory_limit_mib: {mem}
  call_timeout_secs: {call}

agent:
  # Most LLM calls per task; reaching it fails the task.
  max_steps: {steps}
  system_prompt: |-
{system}

# Settings of the strategy (builtin:plan-execute's keys; a third-party strategy gets all of them
# with options merged in, as JSON).
strategy:
  # Reflect on the plan after every N model replies that called tools (and after every tool
  # error); 0: only after a tool error. A reflection may revise the plan.
  reflect_every: {reflect}
  # Verifications of the result before finishing; a failed one sends the model back to work
  # while agent.max_steps leaves room.
  max_verifications: {verifications}
  options: {{}}

# A task submitted with the same task key (source, owner, repo, type, id) as an earlier completed
# task starts from that task's final answer, last summary and latest plan.
context_inheritance:
  enabled: {inherit}
  # Also at most a quarter of llm.context_length.
  max_inherited_tokens: {inherit_tokens}
  # Only from tasks completed at most this many days ago.
  context_expiry_days: {inherit_days}

worker:
  # Task processes run at once by `ctxhost run`.
  max_parallel_tasks: {par}
  poll_interval_ms: {poll}
  # A task whose process dies (crash, kill -9, power loss) is repaired and run again; after this
  # many deaths it is marked failed instead.
  max_crashes: {crashes}
  # A running task holds a lease of this many seconds, renewed by its process every third of it.
  # A task whose lease expired (its host died, or lost the database) is repaired and requeued by
  # any worker; a process that cannot renew its lease for 4/5 of it stops itself first.
  lease_secs: {lease}

# Where tasks' statuses and statistics are kept: sqlite (contexts/tasks.db, one host), or
# PostgreSQL shared by workers on several hosts, given as the environment variable that holds its
# URL (postgres://USER:PASSWORD@HOST:PORT/DBNAME; never written here). All workers must then share
# one contexts/ directory (a shared filesystem). `ctxhost migrate --to postgres` moves a tree's tasks.
task_store: sqlite
# task_store:
#   url_env: CTXHOST_DATABASE_URL

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
  # Built-in tools (read_file, list_files, search_files, write_file, edit_file, shell) for tasks
  # with a workspace (ask: the current directory; queued tasks: `workspace` below). shell runs in
  # a kernel sandbox (README, "Built-in coding tools"); `ctxhost doctor` says what it can do here.
  builtin: true
  sandbox: on            # off: unconfined (otherwise shell and the write tools refuse where the kernel cannot confine)
  network: false
  read_paths: []         # toolchains shell may read and run, besides /usr /lib /lib64 /bin /sbin /etc
#  limits: {{cpu_secs: 300, file_size_mib: 1024, memory_mib: 8192, processes: 256}}

# The directory the built-in tools of queued tasks work on (relative to this file).
# workspace: ./project

# Task sources: open issues and pull/merge requests carrying `label` become tasks (`ctxhost poll
# --once`, or `ctxhost run` every poll_interval_secs); the answer (or the error) is posted back as
# one comment and the labels move: label -> processing_label -> done_label / failed_label
# (paused_label while paused). Tokens come from the environment variable token_env, never from
# this file. See docs/forge-bot.md.
sources: {{}}
#  github:
#    api_url: https://api.github.com      # GitHub Enterprise: https://HOST/api/v3
#    token_env: GITHUB_TOKEN
#    repos: [owner/name]
#    label: coding agent
#    processing_label: coding agent processing
#    done_label: coding agent done
#    failed_label: coding agent failed
#    paused_label: coding agent paused
#    poll_interval_secs: 60
#  gitlab:
#    api_url: https://gitlab.com/api/v4
#    token_env: GITLAB_TOKEN
#    projects: [group/project]
#    # the same label keys and poll_interval_secs as github
"#,
            modeline = super::schema::modeline(super::schema::SCHEMA_FILE),
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
            grace = d.llm.interrupt_grace_secs,
            stream = d.llm.stream,
            idle = d.llm.idle_timeout_secs,
            max_resp = d.llm.max_response_mib,
            max_req = d.llm.max_request_mib,
            max_dir = d.context_storage.max_task_dir_mib,
            max_files = d.context_storage.max_files_per_call,
            max_llm_calls = d.context_storage.max_llm_calls_per_compression,
            max_compress_secs = d.context_storage.max_compression_secs,
            recall = d.context_storage.recall,
            store = d.plugins.message_store,
            compressor = d.plugins.compressor,
            strategy = d.plugins.strategy,
            reflect = d.strategy.reflect_every,
            verifications = d.strategy.max_verifications,
            inherit = d.context_inheritance.enabled,
            inherit_tokens = d.context_inheritance.max_inherited_tokens,
            inherit_days = d.context_inheritance.context_expiry_days,
            mem = d.runtime.memory_limit_mib,
            call = d.runtime.call_timeout_secs,
            steps = d.agent.max_steps,
            system = indent(&system),
            par = d.worker.max_parallel_tasks,
            poll = d.worker.poll_interval_ms,
            crashes = d.worker.max_crashes,
            lease = d.worker.lease_secs,
        )
    }
}
