//! Serde shapes of the JSONL lines of a task directory (DESIGN.md §2).
//!
//! Field names are the on-disk names; optional fields are omitted when absent, except a chat
//! message's `content`, which is written as `null` when absent (OpenAI's shape for an assistant
//! message that only calls tools).

use serde::{Deserialize, Serialize};

/// One line of `current.jsonl`: an OpenAI chat message.
///
/// `{"role","content","tool_calls"?,"tool_call_id"?,"tool_name"?}`; `tool_name` is ctxhost's
/// addition for `tool` messages (OpenAI's `name`), kept so a reader sees which tool answered.
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
/// `{seq, role, content, timestamp, tokens, tool_name?, tool_calls?, tool_call_id?, summary_id?}`;
/// `seq` runs from 1 without gaps; `timestamp` is RFC 3339 UTC; `tokens` is the estimate.
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
    /// Set on summaries appended by a compression (role `assistant`): the summary's id in
    /// summaries.jsonl, a JSON number from 1. Reads the old string form `"sum-N"` too.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::summary_id::deserialize_opt"
    )]
    pub summary_id: Option<u64>,
}

impl HistoryLine {
    /// The chat message part of this history line.
    pub fn to_chat(&self) -> ChatMessage {
        ChatMessage {
            role: self.role.clone(),
            content: self.content.clone(),
            tool_calls: self.tool_calls.clone(),
            tool_call_id: self.tool_call_id.clone(),
            tool_name: self.tool_name.clone(),
        }
    }
}

/// One line of `summaries.jsonl`:
/// `{id, start_seq, end_seq, summary, original_tokens, summary_tokens, ratio, timestamp}`.
///
/// `id` counts from 1 within the task (a JSON number; the old string form `"sum-N"` is read
/// too, see [`crate::summary_id`]); `start_seq..=end_seq` are the messages.jsonl seqs covered;
/// tokens are estimates; `ratio` is `summary_tokens / original_tokens` (0 when nothing was
/// summarised); `timestamp` is RFC 3339 UTC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryLine {
    /// The summary id: an integer from 1 (the old string form `"sum-N"` reads as N).
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
    fn text_message_omits_absent_fields() {
        let s = serde_json::to_string(&ChatMessage::text("user", "hi")).unwrap();
        assert_eq!(s, r#"{"role":"user","content":"hi"}"#);
    }
}
