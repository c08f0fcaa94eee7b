//! Host-side mirrors of the WIT records of `wit/plugin.wit` (`ctxhost:plugin@1.0.0`); components
//! of every supported WIT version are converted to these ([`super::wit`]).
//!
//! Messages are [`ctxhost_format::ChatMessage`] (the OpenAI line shape of `current.jsonl`), so
//! the rest of the host never sees a generated binding type. Every path is relative to the task
//! directory, the only directory a component sees. Token counts are estimates
//! ([`ctxhost_format::estimate_tokens`]) unless a provider reported them.

use ctxhost_format::ChatMessage;

/// Token usage of one LLM call as reported by the provider (WIT `usage`), in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Prompt (input) tokens, those served from the prompt cache included.
    pub prompt_tokens: u64,
    /// Generated (output) tokens.
    pub completion_tokens: u64,
    /// Prompt + completion, as the provider reports it.
    pub total_tokens: u64,
    /// Prompt tokens served from the provider's prompt cache (OpenAI
    /// `usage.prompt_tokens_details.cached_tokens`, Anthropic `cache_read_input_tokens`); 0 when
    /// not reported.
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider's prompt cache (Anthropic
    /// `cache_creation_input_tokens`); 0 when not reported.
    pub cache_creation_tokens: u64,
    /// Completion tokens spent on reasoning, included in `completion_tokens` (OpenAI
    /// `completion_tokens_details.reasoning_tokens`, Responses
    /// `output_tokens_details.reasoning_tokens`); 0 when not reported.
    pub reasoning_tokens: u64,
}

/// Largest token count one LLM call's usage may report (2^32, about 4.3 billion): far above
/// any model's context window and output together, and small enough that a task's counters
/// (64-bit integers in the task store) never overflow however many calls it makes. A larger
/// count is a provider's (or a request format's) error: [`Usage::bounded`] cuts it here.
pub const MAX_USAGE_TOKENS: u64 = 1 << 32;

impl Usage {
    /// The usage with every count at most [`MAX_USAGE_TOKENS`], and the names of the counts
    /// that were larger (empty when none was).
    pub fn bounded(self) -> (Usage, Vec<&'static str>) {
        let mut cut = Vec::new();
        let mut b = |v: u64, name: &'static str| {
            if v > MAX_USAGE_TOKENS {
                cut.push(name);
            }
            v.min(MAX_USAGE_TOKENS)
        };
        let u = Usage {
            prompt_tokens: b(self.prompt_tokens, "prompt_tokens"),
            completion_tokens: b(self.completion_tokens, "completion_tokens"),
            total_tokens: b(self.total_tokens, "total_tokens"),
            cache_read_tokens: b(self.cache_read_tokens, "cache_read_tokens"),
            cache_creation_tokens: b(self.cache_creation_tokens, "cache_creation_tokens"),
            reasoning_tokens: b(self.reasoning_tokens, "reasoning_tokens"),
        };
        (u, cut)
    }
}

/// The answer to a compressor's `llm.complete` request (WIT `llm.completion`).
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The assistant message (content may be empty; the compressor decides what that means).
    pub message: ChatMessage,
    /// Provider-reported usage, if any.
    pub usage: Option<Usage>,
}

/// What the host's `llm` import does for a compressor: send the chat messages of
/// `messages_file` (JSONL chat message lines, relative to the task directory) to the task's
/// model with the task's request format and transport, asking for at most `max_output_tokens`.
///
/// An `Err(text)` reaches the component as `plugin-error::llm(text)`; say what failed and
/// where (URL, status), never an API key. Time spent here does not count against the
/// component's call deadline, but it does against the call's wall time: finish by `deadline`.
/// `messages_file` comes from the component: check it like every path a component returns
/// ([`crate::untrusted::component_path`]).
pub trait LlmImport: Send {
    /// Complete the chat of `messages_file` with at most `max_output_tokens` tokens, by
    /// `deadline`.
    fn complete(
        &mut self,
        messages_file: &str,
        max_output_tokens: u32,
        deadline: std::time::Instant,
    ) -> Result<Completion, String>;

    /// What a running call of the component asks (every [`super::sandbox::INTERRUPT_POLL`],
    /// from the epoch callback) to give way to a pause or stop of the task at once: `None`
    /// (the default) for calls that run to their deadline.
    fn interrupt_probe(&self) -> Option<crate::interrupt::InterruptProbe> {
        None
    }
}

/// An [`LlmImport`] for components that must not reach a model: every call fails with
/// `llm: no LLM is available to this component`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoLlm;

impl LlmImport for NoLlm {
    fn complete(
        &mut self,
        _messages_file: &str,
        _max_output_tokens: u32,
        _deadline: std::time::Instant,
    ) -> Result<Completion, String> {
        Err("no LLM is available to this component".to_string())
    }
}

/// What a message store knows after `open` or a change (WIT `store-stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreStats {
    /// Lines in messages.jsonl (= the last seq).
    pub history_count: u64,
    /// Chat message lines in current.jsonl.
    pub current_count: u64,
    /// Estimated tokens of current.jsonl's messages.
    pub current_tokens: u64,
}

/// One message as appended to messages.jsonl (WIT `added-message`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AddedMessage {
    /// Its seq in messages.jsonl (from 1, gap-free).
    pub seq: u64,
    /// Its estimated tokens.
    pub tokens: u64,
}

/// Settings for one provider request (WIT `request-config`). Paths are relative to the task
/// directory.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RequestConfig {
    /// Model name, written as given (the format escapes it).
    pub model: String,
    /// Chat message lines to send (usually `current.jsonl`).
    pub messages_file: String,
    /// Where to write the request body (usually `request.json`).
    pub request_file: String,
    /// A JSON array of OpenAI tool definitions, if tools are offered.
    pub tools_file: Option<String>,
    /// Upper bound on output tokens.
    pub max_output_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Ask for a streamed reply (`stream-reply`).
    pub stream: bool,
    /// With `stream`: ask for the reply's usage inside the stream (`stream-usage`,
    /// `llm.stream_usage`).
    pub stream_usage: bool,
    /// The model's reasoning settings, if any.
    pub reasoning: Option<ReasoningConfig>,
}

/// Reasoning settings of a request (WIT `reasoning-config`); each format sends what its
/// API has.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReasoningConfig {
    /// Anthropic `thinking: {"type":"enabled","budget_tokens"}` (tokens).
    pub thinking_budget_tokens: Option<u32>,
    /// Anthropic `thinking: {"type":"adaptive"}`.
    pub thinking_adaptive: bool,
    /// OpenAI `reasoning.effort` / `reasoning_effort`: `minimal`, `low`, `medium`, `high`.
    pub effort: Option<String>,
    /// Chat completions: send the kept `reasoning_content` back on assistant messages
    /// (`llm.send_reasoning_content`).
    pub send_reasoning_content: bool,
}

/// Where and how to send a written request (WIT `request-info`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestInfo {
    /// Path appended to the provider's base URL, e.g. `/v1/chat/completions`.
    pub endpoint_path: String,
    /// Bytes written to the request file.
    pub bytes: u64,
    /// Messages written.
    pub messages: u64,
}

/// What the model answered (WIT `reply`).
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The assistant message, tool calls in OpenAI shape.
    pub message: ChatMessage,
    /// Provider-reported usage, if any.
    pub usage: Option<Usage>,
    /// Why the model stopped (`stop`, `tool_calls`, `length`, ...), if given.
    pub finish_reason: Option<String>,
    /// The model that answered, as the reply names it, if it does.
    pub model: Option<String>,
    /// The assistant text in this file of the task directory instead of `message.content`
    /// (WIT `content-file`): UTF-8, not escaped, written
    /// by the request format for a text too large to pass whole. The host checks the path
    /// ([`crate::untrusted::component_path`]), appends it with
    /// [`crate::runtime::MessageStore::add_message_file`] and deletes it.
    pub content_file: Option<String>,
}

/// Compression settings from the task's config (WIT `compress-config`).
#[derive(Debug, Clone, PartialEq)]
pub struct CompressConfig {
    /// The model's context window (tokens).
    pub context_length: u64,
    /// Compress when current tokens > context_length × threshold (0 < threshold ≤ 1).
    pub threshold: f64,
    /// Most recent messages kept verbatim.
    pub keep_recent_messages: u32,
    /// The kept tail holds at most this many estimated tokens (0: no token bound; WIT
    /// `keep-recent-tokens`).
    pub keep_recent_tokens: u64,
    /// Summary prompt; `{messages}` is replaced by the messages to summarise.
    pub summary_prompt: String,
    /// Tokens reserved for the model's reply in a summary request.
    pub reserve_output_tokens: u32,
}

/// A summary produced by a compression (WIT `summary-info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryInfo {
    /// The summary's id, an integer counting from 1 within the task: `id` in summaries.jsonl and
    /// `summary_id` in messages.jsonl (JSON numbers).
    pub id: u64,
    /// First and last messages.jsonl seq covered.
    pub start_seq: u64,
    /// Seq of the last message summarised.
    pub end_seq: u64,
    /// The summary text.
    pub summary: String,
    /// Tokens of the summarised messages and of the summary.
    pub original_tokens: u64,
    /// Estimated tokens of the summary.
    pub summary_tokens: u64,
}

/// What a compression produced (WIT `compress-result`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompressResult {
    /// The new context: a JSONL file of chat message lines (not current.jsonl), for the host to
    /// validate and install atomically.
    pub context_file: String,
    /// The summary, if the strategy made one.
    pub summary: Option<SummaryInfo>,
}

// ---------------------------------------------------------------------------------------------
// Strategies (WIT `strategy` and `planning`)

pub use ctxhost_format::planning::{Plan, PlanStep, StepStatus, Verdict};

/// A planning-history entry other than a plan (WIT `planning.entry`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanningEntry {
    /// A step's status changed.
    Progress {
        /// The step (must be in the latest plan).
        step_id: u32,
        /// Its new status.
        status: StepStatus,
        /// What happened.
        note: Option<String>,
    },
    /// A reflection on the work so far.
    Reflection {
        /// `tool-error`, `interval`, or the strategy's own word.
        trigger: String,
        /// What it said.
        text: String,
    },
    /// A check of the result before finishing.
    Verification {
        /// What the verifier found.
        verdict: Verdict,
        /// Its reasons.
        text: String,
    },
}

/// What the host's `planning` import does for a strategy (WIT `planning`): the task's planning
/// history, of which the host is the one writer. `Err(text)` reaches the component as
/// `plugin-error::invalid-input(text)`; say which field is wrong.
pub trait PlanningImport: Send {
    /// Save a plan: the first is the task's `plan`, later ones are `revision`s.
    fn save_plan(&mut self, plan: Plan, note: Option<String>) -> Result<(), String>;
    /// Whether the task has a first plan.
    fn has_plan(&mut self) -> bool;
    /// The latest plan with its steps' status.
    fn latest_plan(&mut self) -> Option<Plan>;
    /// Append a progress, reflection or verification entry.
    fn append_entry(&mut self, entry: PlanningEntry) -> Result<(), String>;
    /// Every line of the history so far (JSON text), the current hook's included.
    fn entries(&mut self) -> Vec<String>;
}

/// Settings from the task's config given to every hook (WIT `strategy-config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StrategyConfig {
    /// `agent.max_steps`.
    pub max_steps: u32,
    /// `llm.context_length`, tokens.
    pub context_length: u64,
    /// `llm.max_output_tokens`.
    pub max_output_tokens: Option<u32>,
    /// The config's `strategy` section as a JSON object (with `strategy.options` merged in).
    pub settings: String,
}

/// Where the task is when a hook is called (WIT `task-state`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskState {
    /// The task's prompt.
    pub prompt: String,
    /// Agent steps (model replies) so far.
    pub steps_done: u32,
    /// The last messages.jsonl seq (the context position).
    pub seq: u64,
    /// The live context file (relative to the task directory).
    pub context_file: String,
    /// Estimated tokens of the live context.
    pub context_tokens: u64,
    /// The tool definitions file, if tools are offered.
    pub tools_file: Option<String>,
}

/// The outcome of one tool call of a reply (WIT `tool-outcome`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutcome {
    /// The call's id.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The tool reported success.
    pub success: bool,
    /// The error text given to the model, when it failed.
    pub error: Option<String>,
}

/// What a strategy hook decided (WIT `decision`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Go on with the next model call, after adding this `user` message, if any.
    Proceed(Option<String>),
    /// The last reply is the final answer.
    Finish,
    /// Fail the task with this reason.
    Fail(String),
}
