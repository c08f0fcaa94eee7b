//! The spans of a task's work, named and attributed per the OpenTelemetry GenAI semantic
//! conventions (<https://opentelemetry.io/docs/specs/semconv/gen-ai/>): `chat {model}` per
//! LLM call, `execute_tool {name}` per tool call, and ctxhost's own `compress` and
//! `strategy {hook}` spans (the compressor's and the strategy's LLM calls are their children).

use opentelemetry::KeyValue;
use opentelemetry::trace::SpanKind;

use super::Span;
use crate::runtime::Usage;

/// One kind of span as documented (docs/reference/spans.md is rendered from [`SPANS`]).
#[derive(Debug, Clone, Copy)]
pub struct SpanDef {
    /// Its name; `{model}`, `{name}`, `{hook}` stand for the part that varies.
    pub name: &'static str,
    /// The span it is a child of (Markdown).
    pub parent: &'static str,
    /// The attributes it may carry (keys of [`ATTRIBUTES`]).
    pub attributes: &'static [&'static str],
    /// What it covers (Markdown).
    pub doc: &'static str,
}

/// One span attribute as documented.
#[derive(Debug, Clone, Copy)]
pub struct AttributeDef {
    /// Its key.
    pub key: &'static str,
    /// What it holds (Markdown).
    pub doc: &'static str,
}

/// Every span ctxhost exports. The telemetry tests check that every span a task run exports
/// matches one of these names and carries only attributes listed here.
pub const SPANS: &[SpanDef] = &[
    SpanDef {
        name: "task run",
        parent: "— (the worker; one trace per task run)",
        attributes: &["ctxhost.task.uuid", "ctxhost.worker.id"],
        doc: "the worker's span for one task process; error status when the process exits badly",
    },
    SpanDef {
        name: "invoke_agent ctxhost",
        parent: "`task run` (passed to the task process in `TRACEPARENT`, W3C trace context)",
        attributes: &[
            OPERATION,
            "gen_ai.agent.name",
            "gen_ai.conversation.id",
            "gen_ai.provider.name",
            "gen_ai.request.model",
            "ctxhost.task.uuid",
            "ctxhost.task.status",
        ],
        doc: "the task process's run (`gen_ai.operation.name=invoke_agent`)",
    },
    SpanDef {
        name: "chat {model}",
        parent: "`invoke_agent`; a compressor's under its `compress`, a strategy's under its `strategy {hook}`",
        attributes: &[
            OPERATION,
            "gen_ai.provider.name",
            "gen_ai.request.model",
            "gen_ai.response.model",
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.output_tokens",
            "gen_ai.usage.cache_read.input_tokens",
            "gen_ai.usage.cache_creation.input_tokens",
            "gen_ai.response.finish_reasons",
            "gen_ai.output.messages",
            "error.type",
            "ctxhost.llm.purpose",
        ],
        doc: "one LLM call (span kind client, `gen_ai.operation.name=chat`)",
    },
    SpanDef {
        name: "execute_tool {name}",
        parent: "`invoke_agent`",
        attributes: &[
            OPERATION,
            "gen_ai.tool.name",
            "gen_ai.tool.call.id",
            "gen_ai.tool.type",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
            "ctxhost.tool.status",
            "error.type",
        ],
        doc: "one tool call (`gen_ai.operation.name=execute_tool`; `error.type=tool_error` when it failed)",
    },
    SpanDef {
        name: "compress",
        parent: "`invoke_agent` (current while the compressor runs: its LLM call is a child `chat` span, `ctxhost.llm.purpose=compressor`)",
        attributes: &[
            "ctxhost.compression.component",
            "ctxhost.compression.tokens_before",
            "ctxhost.compression.tokens_after",
            "ctxhost.compression.messages_before",
            "ctxhost.compression.messages_after",
            "ctxhost.compression.summary_id",
            "ctxhost.compression.after_overflow",
            "error.type",
        ],
        doc: "one compression of the context; an error status when it failed",
    },
    SpanDef {
        name: "strategy {hook}",
        parent: "`invoke_agent`",
        attributes: &["ctxhost.strategy.hook", "ctxhost.strategy.component"],
        doc: "one call of the strategy's hook (`start`, `after-reply`, `after-tools`); the strategy's own LLM calls are its child `chat` spans (`ctxhost.llm.purpose=strategy`)",
    },
];

/// Every span attribute ctxhost sets, named per the OpenTelemetry GenAI semantic conventions
/// where they have one.
pub const ATTRIBUTES: &[AttributeDef] = &[
    AttributeDef {
        key: OPERATION,
        doc: "`invoke_agent`, `chat` or `execute_tool`",
    },
    AttributeDef {
        key: "gen_ai.agent.name",
        doc: "`ctxhost`",
    },
    AttributeDef {
        key: "gen_ai.conversation.id",
        doc: "the task's UUID",
    },
    AttributeDef {
        key: "gen_ai.provider.name",
        doc: "`llm.provider` (`openai`, `anthropic`, `ollama`, ...)",
    },
    AttributeDef {
        key: "gen_ai.request.model",
        doc: "`llm.model`",
    },
    AttributeDef {
        key: "gen_ai.response.model",
        doc: "the model as the reply names it",
    },
    AttributeDef {
        key: "gen_ai.usage.input_tokens",
        doc: "prompt tokens the provider reported",
    },
    AttributeDef {
        key: "gen_ai.usage.output_tokens",
        doc: "completion tokens the provider reported",
    },
    AttributeDef {
        key: "gen_ai.usage.cache_read.input_tokens",
        doc: "prompt tokens read from the provider's cache",
    },
    AttributeDef {
        key: "gen_ai.usage.cache_creation.input_tokens",
        doc: "prompt tokens written to the provider's cache",
    },
    AttributeDef {
        key: "gen_ai.response.finish_reasons",
        doc: "why the model stopped (an array of one)",
    },
    AttributeDef {
        key: "gen_ai.output.messages",
        doc: "the model's reply (agent loop only), only with `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`, the API key redacted",
    },
    AttributeDef {
        key: "gen_ai.tool.name",
        doc: "the tool's name as offered to the model",
    },
    AttributeDef {
        key: "gen_ai.tool.call.id",
        doc: "the tool call's id",
    },
    AttributeDef {
        key: "gen_ai.tool.type",
        doc: "`function`",
    },
    AttributeDef {
        key: "gen_ai.tool.call.arguments",
        doc: "the call's arguments, only with `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`, the API key redacted",
    },
    AttributeDef {
        key: "gen_ai.tool.call.result",
        doc: "the call's result, only with `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`, the API key redacted",
    },
    AttributeDef {
        key: "error.type",
        doc: "on failure: the provider's HTTP status code (e.g. `429`), or `timeout`, `connection_error`, `malformed_reply`, `context_overflow`, ...; `tool_error` for a tool call",
    },
    AttributeDef {
        key: "ctxhost.task.uuid",
        doc: "the task's UUID",
    },
    AttributeDef {
        key: "ctxhost.task.status",
        doc: "the task's status when the run ended",
    },
    AttributeDef {
        key: "ctxhost.worker.id",
        doc: "the worker that started the task process (`host:pid:nonce`)",
    },
    AttributeDef {
        key: "ctxhost.llm.purpose",
        doc: "`agent`, `compressor` or `strategy`",
    },
    AttributeDef {
        key: "ctxhost.tool.status",
        doc: "`success` or `error`",
    },
    AttributeDef {
        key: "ctxhost.compression.component",
        doc: "the compressor (`builtin:llm-summarizer`, a file's name)",
    },
    AttributeDef {
        key: "ctxhost.compression.tokens_before",
        doc: "the context's estimated tokens before",
    },
    AttributeDef {
        key: "ctxhost.compression.tokens_after",
        doc: "... and after",
    },
    AttributeDef {
        key: "ctxhost.compression.messages_before",
        doc: "the context's messages before",
    },
    AttributeDef {
        key: "ctxhost.compression.messages_after",
        doc: "... and after",
    },
    AttributeDef {
        key: "ctxhost.compression.summary_id",
        doc: "the summary's id in summaries.jsonl, when one was made",
    },
    AttributeDef {
        key: "ctxhost.compression.after_overflow",
        doc: "the provider said the context was too long",
    },
    AttributeDef {
        key: "ctxhost.strategy.hook",
        doc: "`start`, `after-reply` or `after-tools`",
    },
    AttributeDef {
        key: "ctxhost.strategy.component",
        doc: "the strategy (`builtin:react`, `builtin:plan-execute`, a file's name)",
    },
];

/// `gen_ai.operation.name`.
pub const OPERATION: &str = "gen_ai.operation.name";

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_span_attribute_is_documented_once_and_used() {
        let keys: Vec<&str> = ATTRIBUTES.iter().map(|a| a.key).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), keys.len(), "an attribute listed twice");
        for span in SPANS {
            for a in span.attributes {
                assert!(keys.contains(a), "{}: {a} is not in ATTRIBUTES", span.name);
            }
        }
        for k in keys {
            assert!(
                SPANS.iter().any(|s| s.attributes.contains(&k)),
                "{k} is on no span"
            );
        }
    }
}
