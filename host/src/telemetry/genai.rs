//! The spans of a task's work, named and attributed per the OpenTelemetry GenAI semantic
//! conventions (<https://opentelemetry.io/docs/specs/semconv/gen-ai/>): `chat {model}` per
//! LLM call, `execute_tool {name}` per tool call, and ctxhost's own `compress` and
//! `strategy {hook}` spans (the compressor's and the strategy's LLM calls are their children).

use opentelemetry::KeyValue;
use opentelemetry::trace::SpanKind;

use super::Span;
use crate::runtime::Usage;

/// `gen_ai.operation.name`.
const OPERATION: &str = "gen_ai.operation.name";

/// The span of the task process's run: `invoke_agent ctxhost` for task `uuid`.
pub fn agent_attributes(uuid: &str, provider: &str, model: &str) -> Vec<KeyValue> {
    vec![
        KeyValue::new(OPERATION, "invoke_agent"),
        KeyValue::new("gen_ai.agent.name", "ctxhost"),
        KeyValue::new("gen_ai.conversation.id", uuid.to_string()),
        KeyValue::new("gen_ai.provider.name", provider.to_string()),
        KeyValue::new("gen_ai.request.model", model.to_string()),
        KeyValue::new("ctxhost.task.uuid", uuid.to_string()),
    ]
}

/// What a chat span is about: `purpose` is `agent`, `compressor` or `strategy`.
pub fn chat(provider: &str, model: &str, purpose: &str) -> Span {
    Span::start(
        format!("chat {model}"),
        SpanKind::Client,
        vec![
            KeyValue::new(OPERATION, "chat"),
            KeyValue::new("gen_ai.provider.name", provider.to_string()),
            KeyValue::new("gen_ai.request.model", model.to_string()),
            KeyValue::new("ctxhost.llm.purpose", purpose.to_string()),
        ],
    )
}

/// A chat span's answer: the model that answered (when the provider said), the usage and
/// why the model stopped.
pub fn chat_done(
    span: &mut Span,
    response_model: Option<&str>,
    usage: Option<Usage>,
    finish_reason: Option<&str>,
) {
    if let Some(m) = response_model {
        span.set(KeyValue::new("gen_ai.response.model", m.to_string()));
    }
    if let Some(u) = usage {
        span.set(KeyValue::new(
            "gen_ai.usage.input_tokens",
            i64::try_from(u.prompt_tokens).unwrap_or(i64::MAX),
        ));
        span.set(KeyValue::new(
            "gen_ai.usage.output_tokens",
            i64::try_from(u.completion_tokens).unwrap_or(i64::MAX),
        ));
        span.set(KeyValue::new(
            "gen_ai.usage.cache_read.input_tokens",
            i64::try_from(u.cache_read_tokens).unwrap_or(i64::MAX),
        ));
        span.set(KeyValue::new(
            "gen_ai.usage.cache_creation.input_tokens",
            i64::try_from(u.cache_creation_tokens).unwrap_or(i64::MAX),
        ));
    }
    if let Some(r) = finish_reason {
        span.set(KeyValue::new(
            "gen_ai.response.finish_reasons",
            opentelemetry::Value::Array(
                vec![opentelemetry::StringValue::from(r.to_string())].into(),
            ),
        ));
    }
}

/// `execute_tool {name}` for tool call `id`.
pub fn tool(name: &str, id: &str) -> Span {
    Span::start(
        format!("execute_tool {name}"),
        SpanKind::Internal,
        vec![
            KeyValue::new(OPERATION, "execute_tool"),
            KeyValue::new("gen_ai.tool.name", name.to_string()),
            KeyValue::new("gen_ai.tool.call.id", id.to_string()),
            KeyValue::new("gen_ai.tool.type", "function"),
        ],
    )
}

/// A compression of the context, current from the moment the compressor is asked to compress
/// until the new context is installed or rejected: the compressor's own LLM calls are its
/// children. Started only when a compression is due (the checks that find nothing to do leave
/// no span); ended when dropped.
#[derive(Debug)]
pub struct Compression {
    span: super::RunSpan,
}

impl Compression {
    /// `compress` by component `compressor` of a context of `tokens_before` estimated tokens
    /// in `messages_before` messages (`None`: not counted); `after_overflow`: the provider said
    /// the context was too long.
    pub fn start(
        compressor: &str,
        tokens_before: u64,
        messages_before: Option<u64>,
        after_overflow: bool,
    ) -> Compression {
        let mut attributes = vec![
            KeyValue::new("ctxhost.compression.component", compressor.to_string()),
            KeyValue::new(
                "ctxhost.compression.tokens_before",
                saturating(tokens_before),
            ),
            KeyValue::new("ctxhost.compression.after_overflow", after_overflow),
        ];
        if let Some(n) = messages_before {
            attributes.push(KeyValue::new(
                "ctxhost.compression.messages_before",
                saturating(n),
            ));
        }
        Compression {
            span: super::RunSpan::start(
                &opentelemetry::Context::current(),
                "compress".to_string(),
                attributes,
            ),
        }
    }

    /// The new context was installed: its tokens (estimate) and messages, the summary's id
    /// when one was made.
    pub fn installed(&self, tokens_after: u64, messages_after: u64, summary_id: Option<u64>) {
        self.span.set(KeyValue::new(
            "ctxhost.compression.tokens_after",
            saturating(tokens_after),
        ));
        self.span.set(KeyValue::new(
            "ctxhost.compression.messages_after",
            saturating(messages_after),
        ));
        if let Some(id) = summary_id {
            self.span.set(KeyValue::new(
                "ctxhost.compression.summary_id",
                saturating(id),
            ));
        }
    }

    /// The compression failed (`error_type`: a short class); the context was left as it was.
    pub fn fail(&self, error_type: &str) {
        self.span
            .set(KeyValue::new("error.type", error_type.to_string()));
        self.span.fail("the compression failed");
    }
}

/// A tool call's result: `ctxhost.tool.status` (`success`, `error`), an error status when it
/// failed.
pub fn tool_done(span: &mut Span, success: bool) {
    span.set(KeyValue::new(
        "ctxhost.tool.status",
        if success { "success" } else { "error" },
    ));
    if !success {
        span.fail("tool_error", "the tool call failed");
    }
}

/// A call of the strategy component's `hook`, current while it runs: the strategy's own LLM
/// calls are its children.
pub fn strategy(hook: &str, component: &str) -> super::RunSpan {
    super::RunSpan::start(
        &opentelemetry::Context::current(),
        format!("strategy {hook}"),
        vec![
            KeyValue::new("ctxhost.strategy.hook", hook.to_string()),
            KeyValue::new("ctxhost.strategy.component", component.to_string()),
        ],
    )
}

/// Message content `text` as attribute `key` (`gen_ai.output.messages`,
/// `gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`), only when
/// `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`, with `secret` (the API key)
/// redacted.
pub fn content(
    span: &mut Span,
    key: &'static str,
    text: impl FnOnce() -> String,
    secret: Option<&str>,
) {
    if super::capture_content() {
        span.set(KeyValue::new(
            key,
            crate::llm::redact::redact(&text(), secret),
        ));
    }
}

fn saturating(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
