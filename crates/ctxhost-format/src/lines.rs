//! Serde shapes of the JSONL lines of a task directory (DESIGN.md §2).
//!
//! Field names are the on-disk names; optional fields are omitted when absent, except a chat
//! message's `content`, which is written as `null` when absent (OpenAI's shape for an assistant
//! message that only calls tools).

use serde::{Deserialize, Serialize};

/// One line of `current.jsonl`: an OpenAI chat message.
///
/// `{"role","content","tool_calls"?,"tool_call_id"?,"tool_name"?,"is_error"?}`; `tool_name` is
/// ctxhost's addition for `tool` messages (OpenAI's `name`), kept so a reader sees which tool
/// answered, and `is_error: true` marks the result of a tool call that failed (written only
/// when true; formats whose API has the notion send it, e.g. Anthropic's `tool_result`
/// `is_error`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// Text content; `None` (JSON `null`) for an assistant message that only calls tools.
    #[serde(default)]
    pub content: Option<String>,
    /// Tool calls of an assistant message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// For `tool` messages: the id of the tool call this answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For `tool` messages: the tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// For `tool` messages: the tool call failed (the content is the error text).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// For assistant messages: the reasoning that came with the reply (WIT
    /// `reasoning-item`s), kept opaque; left out when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning: Vec<ReasoningItem>,
}

/// One item of a model's reasoning, stored opaque: `{"provider","type","data"}` where `data` is
/// the provider's JSON text of the item exactly as received (a JSON string holding it, so its
/// bytes, signatures and encrypted content included, never change).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ReasoningItem {
    /// Whose format `data` is: `anthropic`, `openai-responses`, `openai-chat`, `ollama`.
    pub provider: String,
    /// The item's type as the provider names it (`thinking`, `redacted_thinking`,
    /// `reasoning`, `reasoning_content`).
    #[serde(rename = "type")]
    pub kind: String,
    /// The item's JSON text as received.
    pub data: String,
}

impl ChatMessage {
    /// A message with `role` and text `content` and nothing else.
    pub fn text(role: &str, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.to_string(),
            content: Some(content.into()),
            ..Default::default()
        }
    }

    /// An assistant message that only calls tools (`content: null`).
    pub fn assistant_calls(calls: Vec<ToolCall>) -> Self {
        ChatMessage {
            role: "assistant".to_string(),
            content: None,
            tool_calls: Some(calls),
            ..Default::default()
        }
    }

    /// The `tool` message answering `call` with `content` (`tool_call_id` and `tool_name` from
    /// the call).
    pub fn tool_result(call: &ToolCall, content: impl Into<String>) -> Self {
        ChatMessage {
            role: "tool".to_string(),
            content: Some(content.into()),
            tool_calls: None,
            tool_call_id: Some(call.id.clone()),
            tool_name: Some(call.function.name.clone()),
            is_error: false,
            reasoning: Vec::new(),
        }
    }

    /// The tool calls of this message (empty when it has none).
    pub fn calls(&self) -> &[ToolCall] {
        self.tool_calls.as_deref().unwrap_or(&[])
    }
}

/// OpenAI `tool_calls[i]`: `{"id","type":"function","function":{"name","arguments"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider-assigned id.
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    /// The function called.
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".to_string()
}

impl ToolCall {
    /// A `function` tool call.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        ToolCall {
            id: id.into(),
            kind: function_type(),
            function: FunctionCall {
                name: name.into(),
                arguments: arguments.into(),
            },
        }
    }
}

/// OpenAI `function` of a tool call. `arguments` is JSON text, as the model wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The function name.
    pub name: String,
    /// Its arguments: a JSON text.
    pub arguments: String,
}

/// One line of `messages.jsonl`, the append-only full history.
///
/// `{seq, role, content, timestamp, tokens, tool_name?, tool_calls?, tool_call_id?, is_error?,
/// summary_id?}`;
/// `seq` runs from 1 without gaps; `timestamp` is RFC 3339 UTC; `tokens` is the estimate.
/// Besides messages it holds summaries (`summary_id`) and notes (a `system` line after the
/// first: [`HistoryLine::is_note`]); [`HistoryLine::is_message`] tells them apart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryLine {
    /// Position in the file, from 1, gap-free.
    pub seq: u64,
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    #[serde(default)]
    /// The text (`None` for an assistant message with only tool calls).
    pub content: Option<String>,
    /// RFC 3339 UTC with milliseconds.
    pub timestamp: String,
    /// Estimated tokens of the message.
    pub tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// For a `tool` message: the tool that produced it.
    pub tool_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// For an assistant message: the tool calls it makes.
    pub tool_calls: Option<Vec<ToolCall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// For a `tool` message: the call it answers.
    pub tool_call_id: Option<String>,
    /// For a `tool` message: the tool call failed (written only when true).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// For an assistant message: its reasoning items (left out when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning: Vec<ReasoningItem>,
    /// Set on summaries appended by a compression (role `assistant`): the summary's id in
    /// summaries.jsonl, a JSON number from 1.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::summary_id::deserialize_opt"
    )]
    pub summary_id: Option<u64>,
}

impl HistoryLine {
    /// The history line of `message` at `seq`, written at `timestamp` (RFC 3339 UTC), with its
    /// estimated tokens ([`crate::estimate_message_tokens`]); not a summary.
    pub fn of(seq: u64, message: &crate::ChatMessage, timestamp: &str) -> HistoryLine {
        HistoryLine {
            seq,
            role: message.role.clone(),
            content: message.content.clone(),
            timestamp: timestamp.to_string(),
            tokens: crate::estimate_message_tokens(message),
            tool_name: message.tool_name.clone(),
            tool_calls: message.tool_calls.clone(),
            tool_call_id: message.tool_call_id.clone(),
            is_error: message.is_error,
            reasoning: message.reasoning.clone(),
            summary_id: None,
        }
    }

    /// Whether this line is a note about the context rather than a message of it: a `system`
    /// line after the first (the host's context-repair notes, `[context repair] …`). A context
    /// holds one system message, its first; notes are never copied into current.jsonl.
    pub fn is_note(&self) -> bool {
        self.role == "system" && self.seq > 1
    }

    /// Whether this line is a message of the conversation, one the context may hold: neither a
    /// summary (`summary_id`) nor a note ([`HistoryLine::is_note`]).
    pub fn is_message(&self) -> bool {
        self.summary_id.is_none() && !self.is_note()
    }

    /// The chat message part of this history line.
    pub fn to_chat(&self) -> ChatMessage {
        ChatMessage {
            role: self.role.clone(),
            content: self.content.clone(),
            tool_calls: self.tool_calls.clone(),
            tool_call_id: self.tool_call_id.clone(),
            tool_name: self.tool_name.clone(),
            is_error: self.is_error,
            reasoning: self.reasoning.clone(),
        }
    }
}

/// Encodes the lines one message adds to a task directory, each value serialised once:
/// `history` gets its messages.jsonl line (a [`HistoryLine`] with `seq`, `timestamp`,
/// `tokens` and `summary_id`), `current` its current.jsonl line (the [`ChatMessage`]), both
/// ending in `\n` and byte for byte what [`crate::jsonl::to_line`] of those types gives
/// (`serde_json::to_string`'s text with U+2028 / U+2029 escaped). Both buffers are cleared
/// first (callers reuse them between messages).
///
/// The message store builds both lines of an `add-message` with this, escaping the content
/// once instead of serialising two structs (and cloning the message into the first).
pub fn encode_message_lines(
    message: &ChatMessage,
    seq: u64,
    timestamp: &str,
    tokens: u64,
    summary_id: Option<u64>,
    history: &mut Vec<u8>,
    current: &mut Vec<u8>,
) {
    /// Appends `,"key":value` and returns where the value's JSON is in `out`.
    fn put(out: &mut Vec<u8>, key: &str, value: &impl Serialize) -> std::ops::Range<usize> {
        out.extend_from_slice(b",\"");
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":");
        let start = out.len();
        // Strings, numbers and derived structs serialise into a Vec without error; `null`
        // keeps the line JSON should that ever change.
        if crate::jsonl::write_value(&mut *out, value).is_err() {
            out.truncate(start);
            out.extend_from_slice(b"null");
        }
        start..out.len()
    }
    history.clear();
    history.extend_from_slice(b"{\"seq\":");
    history.extend_from_slice(seq.to_string().as_bytes());
    let role = put(history, "role", &message.role);
    let content = put(history, "content", &message.content);
    put(history, "timestamp", &timestamp);
    put(history, "tokens", &tokens);
    let tool_name = message
        .tool_name
        .as_ref()
        .map(|v| put(history, "tool_name", v));
    let tool_calls = message
        .tool_calls
        .as_ref()
        .map(|v| put(history, "tool_calls", v));
    let tool_call_id = message
        .tool_call_id
        .as_ref()
        .map(|v| put(history, "tool_call_id", v));
    if message.is_error {
        history.extend_from_slice(b",\"is_error\":true");
    }
    let reasoning =
        (!message.reasoning.is_empty()).then(|| put(history, "reasoning", &message.reasoning));
    if let Some(id) = summary_id {
        put(history, "summary_id", &id);
    }
    history.extend_from_slice(b"}\n");

    current.clear();
    current.extend_from_slice(b"{\"role\":");
    current.extend_from_slice(&history[role]);
    current.extend_from_slice(b",\"content\":");
    current.extend_from_slice(&history[content]);
    for (key, range) in [
        ("tool_calls", tool_calls),
        ("tool_call_id", tool_call_id),
        ("tool_name", tool_name),
    ] {
        if let Some(range) = range {
            current.extend_from_slice(b",\"");
            current.extend_from_slice(key.as_bytes());
            current.extend_from_slice(b"\":");
            current.extend_from_slice(&history[range]);
        }
    }
    if message.is_error {
        current.extend_from_slice(b",\"is_error\":true");
    }
    if let Some(range) = reasoning {
        current.extend_from_slice(b",\"reasoning\":");
        current.extend_from_slice(&history[range]);
    }
    current.extend_from_slice(b"}\n");
}

/// One line of `summaries.jsonl`:
/// `{id, start_seq, end_seq, summary, original_tokens, summary_tokens, ratio, timestamp}`.
///
/// `id` counts from 1 within the task (a JSON number, see [`crate::summary_id`]); `start_seq..=end_seq` are the messages.jsonl seqs covered;
/// tokens are estimates; `ratio` is `summary_tokens / original_tokens` (0 when nothing was
/// summarised); `timestamp` is RFC 3339 UTC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryLine {
    /// The summary id: an integer from 1.
    #[serde(deserialize_with = "crate::summary_id::deserialize")]
    pub id: u64,
    /// Seq of the first message summarised (messages.jsonl).
    pub start_seq: u64,
    /// Seq of the last message summarised.
    pub end_seq: u64,
    /// The summary text.
    pub summary: String,
    /// Estimated tokens of the messages summarised.
    pub original_tokens: u64,
    /// Estimated tokens of the summary.
    pub summary_tokens: u64,
    /// `summary_tokens / original_tokens`.
    pub ratio: f64,
    /// RFC 3339 UTC with milliseconds.
    pub timestamp: String,
}

/// Outcome of a tool call in `tools.jsonl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolStatus {
    /// The tool returned a result.
    Success,
    /// The call failed (the model got the error text).
    Error,
}

/// One line of `tools.jsonl`:
/// `{seq, tool, tool_call_id?, args, result?, status, error?, duration_ms, timestamp}`.
///
/// `seq` runs from 1 per task; `tool_call_id` is the id of the model's tool call this line
/// answers (so a masked tool result in the context can name its line); `args` is the parsed
/// arguments (or the raw text as a JSON string when it did not parse); `duration_ms` in
/// milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolLine {
    /// Position in the file, from 1, gap-free.
    pub seq: u64,
    /// The tool called (the name offered to the model).
    pub tool: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// For a `tool` message: the call it answers.
    pub tool_call_id: Option<String>,
    /// Its arguments (a JSON value; the raw text when it was not JSON).
    pub args: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// What the model was given, on success.
    pub result: Option<String>,
    /// `success` or `error`.
    pub status: ToolStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// What the model was given, on error.
    pub error: Option<String>,
    /// Wall time of the call, milliseconds.
    pub duration_ms: u64,
    /// RFC 3339 UTC with milliseconds.
    pub timestamp: String,
}

/// One line of `llm_calls.jsonl`: the record of a task's LLM calls and of the compressions
/// between them, written by the host (append-only, whole lines), read by the web dashboard
/// (its context chart draws the `call` lines and the `compression` markers). Tagged by `type`:
///
/// - `{"type":"call", n, timestamp, context_tokens, context_length, threshold_tokens?,
///   request_bytes, duration_ms, status: ok|error, prompt_tokens?, completion_tokens?,
///   total_tokens?, cache_read_tokens?, error?}` — a call of the agent loop
/// - `{"type":"summary_call", timestamp, input_tokens, request_bytes, duration_ms, status,
///   prompt_tokens?, completion_tokens?, total_tokens?, error?}` — a compressor's request
///   through the host's `llm` import (it sends the part being summarised, not the context)
/// - `{"type":"compression", timestamp, before_tokens, after_tokens, summary_id?}`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CallLogLine {
    /// One LLM call of the agent loop.
    Call(LlmCallLine),
    /// One request of a compressor (a summary).
    SummaryCall(SummaryCallLine),
    /// One compression of the context (before the call that follows it).
    Compression(CompressionLine),
}

/// A compressor's LLM request (`type: summary_call` in `llm_calls.jsonl`): `input_tokens` is the
/// estimate of the messages it sent; the rest as in [`LlmCallLine`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryCallLine {
    /// When the request ended, RFC 3339 UTC.
    pub timestamp: String,
    /// Estimated tokens of the messages the compressor sent.
    pub input_tokens: u64,
    /// Size of its request body (llm_request.json), bytes.
    #[serde(default)]
    pub request_bytes: u64,
    /// Wall time of the exchange, milliseconds.
    pub duration_ms: u64,
    /// Whether it got an answer.
    pub status: CallStatus,
    /// Provider-reported token counts (`prompt_tokens`, `completion_tokens`, `total_tokens`).
    #[serde(flatten)]
    pub usage: CallUsage,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The token counts a provider reported for one LLM call, as the fields `prompt_tokens`,
/// `completion_tokens` and `total_tokens` of a `call` or `summary_call` line of
/// `llm_calls.jsonl` (flattened into both; each absent when not reported).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallUsage {
    /// Prompt tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    /// Completion tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
    /// Total tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
}

/// Outcome of an LLM call in `llm_calls.jsonl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallStatus {
    /// The provider answered and the reply was read.
    Ok,
    /// The call failed (transport error, unreadable reply, empty answer); request.json and
    /// response.json are kept in the task directory.
    Error,
    /// The call was given up for a pause or stop request of the task (not a failure, not
    /// counted: nothing of its reply is kept, and a resumed task sends the request again).
    Interrupted,
}

/// An LLM call of the agent loop (`type: call` in `llm_calls.jsonl`).
///
/// `n` is the task's step number (1 for the first call, continuing after a resume);
/// `context_tokens` is the estimate of current.jsonl sent with the call (what the compression
/// threshold is checked against); `threshold_tokens` is `context_length ×
/// compression_threshold` when a compressor is configured; usage fields are the provider's,
/// when it reported them (`cache_read_tokens`: prompt tokens served from the provider's prompt
/// cache, when not 0); `duration_ms` is the wall time of the exchange (request build, POST
/// with retries, reply parse), milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlmCallLine {
    /// The task's step number.
    pub n: u64,
    /// When the call ended, RFC 3339 UTC.
    pub timestamp: String,
    /// Estimated tokens of the context (current.jsonl) sent.
    pub context_tokens: u64,
    /// `llm.context_length`, tokens.
    pub context_length: u64,
    /// `context_length × compression_threshold`, tokens, when a compressor is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold_tokens: Option<u64>,
    /// Size of request.json, bytes.
    #[serde(default)]
    pub request_bytes: u64,
    /// Wall time of the exchange, milliseconds.
    pub duration_ms: u64,
    /// Whether it got a usable answer.
    pub status: CallStatus,
    /// Provider-reported token counts (`prompt_tokens`, `completion_tokens`, `total_tokens`).
    #[serde(flatten)]
    pub usage: CallUsage,
    /// Prompt tokens served from the provider's prompt cache (absent when 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    /// Completion tokens spent on reasoning, part of `completion_tokens` (OpenAI
    /// `reasoning_tokens`; absent when 0 or not reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A compression (`type: compression` in `llm_calls.jsonl`): the context's token estimate
/// before and after; `summary_id` names the summaries.jsonl line when the strategy made one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompressionLine {
    /// When the new context was installed, RFC 3339 UTC.
    pub timestamp: String,
    /// Estimated tokens of the context before.
    pub before_tokens: u64,
    /// Estimated tokens of the context after.
    pub after_tokens: u64,
    /// The summary's id in summaries.jsonl, when the strategy made one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_id: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_message_round_trips_in_openai_shape() {
        let m = ChatMessage {
            role: "assistant".into(),
            content: None,
            tool_calls: Some(vec![ToolCall::new(
                "call_1",
                "read_text_file",
                r#"{"path":"a"}"#,
            )]),
            ..Default::default()
        };
        let s = serde_json::to_string(&m).unwrap();
        assert_eq!(
            s,
            r#"{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"read_text_file","arguments":"{\"path\":\"a\"}"}}]}"#
        );
        assert_eq!(serde_json::from_str::<ChatMessage>(&s).unwrap(), m);
    }

    #[test]
    fn call_log_lines_are_tagged_by_type() {
        let c = CallLogLine::Compression(CompressionLine {
            timestamp: "t".into(),
            before_tokens: 900,
            after_tokens: 300,
            summary_id: None,
        });
        let s = serde_json::to_string(&c).unwrap();
        assert_eq!(
            s,
            r#"{"type":"compression","timestamp":"t","before_tokens":900,"after_tokens":300}"#
        );
        assert_eq!(serde_json::from_str::<CallLogLine>(&s).unwrap(), c);
        let call: CallLogLine = serde_json::from_str(
            r#"{"type":"call","n":2,"timestamp":"t","context_tokens":10,"context_length":100,"duration_ms":5,"status":"error","error":"boom"}"#,
        )
        .unwrap();
        let CallLogLine::Call(call) = call else {
            panic!("not a call")
        };
        assert_eq!((call.n, call.status), (2, CallStatus::Error));
        assert_eq!(call.threshold_tokens, None);
    }

    #[test]
    fn encoded_lines_are_what_serde_writes() {
        let call = ToolCall::new("call_1", "read \"x\"", r#"{"path":"a\nb"}"#);
        let messages = [
            ChatMessage::text("user", "héllo \"q\" \\ \u{1b}[0m\n上下文 😀"),
            ChatMessage::text("user", "line\u{2028}separator\u{2029}paragraph"),
            ChatMessage::assistant_calls(vec![call.clone(), call.clone()]),
            ChatMessage::tool_result(&call, ""),
            ChatMessage {
                is_error: true,
                ..ChatMessage::tool_result(&call, "Error: no such file")
            },
            ChatMessage {
                reasoning: vec![ReasoningItem {
                    provider: "anthropic".into(),
                    kind: "thinking".into(),
                    data: r#"{"type":"thinking","thinking":"hm\n","signature":"c2ln"}"#.into(),
                }],
                ..ChatMessage::text("assistant", "done")
            },
            ChatMessage {
                role: "assistant".into(),
                content: Some("both".into()),
                tool_calls: Some(vec![]),
                ..Default::default()
            },
        ];
        let (mut history, mut current) = (Vec::new(), Vec::new());
        for (i, m) in messages.iter().enumerate() {
            for summary_id in [None, Some(3)] {
                let seq = 7 + i as u64 * 1000;
                encode_message_lines(
                    m,
                    seq,
                    "2026-01-02T03:04:05.678Z",
                    42,
                    summary_id,
                    &mut history,
                    &mut current,
                );
                let line = HistoryLine {
                    seq,
                    role: m.role.clone(),
                    content: m.content.clone(),
                    timestamp: "2026-01-02T03:04:05.678Z".into(),
                    tokens: 42,
                    tool_name: m.tool_name.clone(),
                    tool_calls: m.tool_calls.clone(),
                    tool_call_id: m.tool_call_id.clone(),
                    is_error: m.is_error,
                    reasoning: m.reasoning.clone(),
                    summary_id,
                };
                assert_eq!(
                    String::from_utf8(history.clone()).unwrap(),
                    crate::jsonl::to_line(&line).unwrap() + "\n"
                );
                assert_eq!(
                    String::from_utf8(current.clone()).unwrap(),
                    crate::jsonl::to_line(m).unwrap() + "\n"
                );
                assert!(!history.windows(3).any(|w| w == "\u{2028}".as_bytes()));
            }
        }
    }

    #[test]
    fn text_message_omits_absent_fields() {
        let s = serde_json::to_string(&ChatMessage::text("user", "hi")).unwrap();
        assert_eq!(s, r#"{"role":"user","content":"hi"}"#);
    }
}
