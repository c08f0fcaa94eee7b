//! Folding a streamed OpenAI chat-completions reply (server-sent events, as the host keeps
//! them in `reply.stream`) into the parts of one reply, a line at a time: no whole-file read.
//!
//! A stream is server-sent events (read by [`crate::event_stream`], the WHATWG rules: an
//! event's `data:` lines joined with `\n`; comments and other fields carry nothing here), each
//! event's data a chunk `{"choices":[{"index":0,"delta":{"role"?,"content"?,"tool_calls"?:
//! [{"index","id"?,"function":{"name"?,"arguments"?}}]},"finish_reason"?}],"usage"?}`, ending
//! with `data: [DONE]`. Content fragments are concatenated; a tool call's fragments are joined
//! by their `index` (id and name from the first fragment that has them, `arguments` text
//! concatenated); the last non-null `finish_reason` and `usage` are kept (the usage chunk of
//! `stream_options.include_usage` has empty `choices`). The reasoning text of servers that
//! stream it (`delta.reasoning_content`: DeepSeek, vLLM, llama.cpp, LM Studio; or a string
//! `delta.reasoning`: newer vLLM, OpenRouter) is concatenated apart. A chunk `{"error":...}` is the
//! provider's error. A stream with neither `[DONE]` nor a `finish_reason` was cut off
//! ([`OpenAiStream::finish`] refuses it).

use serde_json::Value;

use crate::body::{is_transient_error, provider_error};
use crate::content_file::{SunkText, TextSink};
use crate::event_stream::EventStream;
use crate::fold::FoldError;
use crate::reply::{ProviderFunction, ProviderToolCall};

/// What ends a whole stream of this provider (named by [`FoldError::Cut`]).
const END: &str = "`data: [DONE]` or a finish_reason";

/// One tool call being assembled from its fragments.
#[derive(Debug, Default, Clone, PartialEq)]
struct PartialCall {
    index: u64,
    id: Option<String>,
    name: String,
    arguments: String,
}

/// The fold of an OpenAI chat-completions stream (module doc); feed it with
/// [`OpenAiStream::line`], then take the reply with [`OpenAiStream::finish`].
#[derive(Debug, Default)]
pub struct OpenAiStream {
    role: Option<String>,
    /// `delta.content`, concatenated (in memory, or in a file past its threshold).
    content: TextSink,
    /// Whether a chunk had `delta.content` (an empty one included).
    has_content: bool,
    reasoning: Option<String>,
    reasoning_field: &'static str,
    calls: Vec<PartialCall>,
    finish_reason: Option<String>,
    usage: Option<Value>,
    model: Option<String>,
    done: bool,
    lines: u64,
    events: EventStream,
}

/// The folded reply: the assistant's role, text and tool calls (as a provider would send them
/// in a whole body), the finish reason and the raw `usage` object, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamedReply {
    /// `delta.role` (normally `assistant`), `None` when no chunk had one.
    pub role: Option<String>,
    /// The concatenated `delta.content`, `None` when no chunk had content or when it is in
    /// `content_file`.
    pub content: Option<String>,
    /// The file the concatenated `delta.content` was written to when it passed the threshold
    /// of [`OpenAiStream::with_content_file`] (`content` is then `None`).
    pub content_file: Option<String>,
    /// The concatenated `delta.reasoning_content` (or string `delta.reasoning`), `None` when
    /// no chunk had any.
    pub reasoning: Option<String>,
    /// The field it came in: `reasoning_content`, or `reasoning` ([`reasoning_text`]).
    pub reasoning_field: &'static str,
    /// The tool calls, in `index` order.
    pub tool_calls: Vec<ProviderToolCall>,
    /// The last non-null `finish_reason`.
    pub finish_reason: Option<String>,
    /// The last non-null `usage` (read by the caller as a whole body's `usage`).
    pub usage: Option<Value>,
    /// The chunks' `model` (the first one given): the model that answered.
    pub model: Option<String>,
}

impl OpenAiStream {
    /// A fold that has seen nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fold whose text goes to a file once it passes a threshold
    /// ([`TextSink::spilling`]): the reply then names the file instead of holding the text.
    pub fn with_content_file(sink: TextSink) -> Self {
        OpenAiStream {
            content: sink,
            ..Self::default()
        }
    }

    /// Folds one line of the stream (without its `\n`), read as server-sent events by
    /// [`EventStream`] (WHATWG rules: an event's `data:` lines joined with `\n`, dispatched at
    /// its blank line; comments and other fields carry nothing here). Errors, each naming the
    /// line the event began on: an event whose data is not JSON or not a chunk, data after
    /// `[DONE]`, an `error` chunk ([`FoldError::Transient`] when the provider documents it as
    /// transient, [`crate::body::is_transient_error`]; else [`FoldError::Invalid`]).
    pub fn line(&mut self, line: &str) -> Result<(), FoldError> {
        self.lines += 1;
        match self.events.line(line) {
            Some(event) => self.event(&event.data, event.line),
            None => Ok(()),
        }
    }

    /// Folds the data of one event that began on line `n`.
    fn event(&mut self, data: &str, n: u64) -> Result<(), FoldError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(());
        }
        if self.done {
            return Err(format!("line {n}: data after `data: [DONE]`").into());
        }
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| format!("line {n}: an event whose data is not JSON ({e})"))?;
        if let Some(e) = provider_error(&chunk) {
            let what = format!("line {n}: the provider sent an error: {e}");
            return Err(match chunk.get("error") {
                Some(error) if is_transient_error(error) => FoldError::Transient(what),
                _ => FoldError::Invalid(what),
            });
        }
        if !chunk.is_object() {
            return Err(format!("line {n}: a chunk that is not a JSON object").into());
        }
        if let Some(u) = chunk.get("usage").filter(|u| !u.is_null()) {
            self.usage = Some(u.clone());
        }
        if self.model.is_none()
            && let Some(m) = chunk.get("model").and_then(Value::as_str)
        {
            self.model = Some(m.to_string());
        }
        let choice = match chunk.get("choices") {
            None | Some(Value::Null) => return Ok(()),
            Some(Value::Array(c)) => match c.first() {
                Some(c) => c,
                None => return Ok(()),
            },
            Some(_) => return Err(format!("line {n}: `choices` is not an array").into()),
        };
        if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(r.to_string());
        }
        let Some(delta) = choice.get("delta").filter(|d| !d.is_null()) else {
            return Ok(());
        };
        if let Some(r) = delta.get("role").and_then(Value::as_str) {
            self.role = Some(r.to_string());
        }
        if let Some(c) = delta.get("content").and_then(Value::as_str) {
            self.has_content = true;
            self.content
                .push(c)
                .map_err(|e| format!("line {n}: writing the reply's text to its file: {e}"))?;
        }
        if let Some((field, r)) = reasoning_text(delta) {
            self.reasoning.get_or_insert_with(String::new).push_str(r);
            self.reasoning_field = field;
        }
        match delta.get("tool_calls") {
            None | Some(Value::Null) => {}
            Some(Value::Array(calls)) => {
                for (i, call) in calls.iter().enumerate() {
                    self.call_fragment(call, i as u64)
                        .map_err(|e| format!("line {n}: tool call fragment {i}: {e}"))?;
                }
            }
            Some(_) => return Err(format!("line {n}: `delta.tool_calls` is not an array").into()),
        }
        Ok(())
    }

    /// Adds one `delta.tool_calls` element (`position` is its place in the array, the index
    /// when it has none).
    fn call_fragment(&mut self, call: &Value, position: u64) -> Result<(), String> {
        let index = match call.get("index") {
            None | Some(Value::Null) => position,
            Some(i) => i.as_u64().ok_or("`index` is not a whole number ≥ 0")?,
        };
        let slot = match self.calls.iter().position(|c| c.index == index) {
            Some(p) => &mut self.calls[p],
            None => {
                self.calls.push(PartialCall {
                    index,
                    ..PartialCall::default()
                });
                self.calls.sort_by_key(|c| c.index);
                let p = self
                    .calls
                    .iter()
                    .position(|c| c.index == index)
                    .unwrap_or(0);
                &mut self.calls[p]
            }
        };
        if let Some(id) = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            slot.id.get_or_insert_with(|| id.to_string());
        }
        let Some(function) = call.get("function").filter(|f| !f.is_null()) else {
            return Ok(());
        };
        if let Some(name) = function.get("name").and_then(Value::as_str)
            && slot.name.is_empty()
        {
            slot.name = name.to_string();
        }
        match function.get("arguments") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => slot.arguments.push_str(s),
            // Some servers send the arguments whole, as an object.
            Some(other) => slot.arguments.push_str(&other.to_string()),
        }
        Ok(())
    }

    /// Whether the stream reached its end (`[DONE]` or a `finish_reason`).
    pub fn complete(&self) -> bool {
        self.done || self.finish_reason.is_some()
    }

    /// Folds the stream's last line when it has no `\n` (the stream ended inside it): by the
    /// event-stream rules the end of the stream dispatches nothing, so an event not ended by
    /// its blank line is discarded and [`Self::finish`] judges the stream without it (cut, when
    /// it had not reached its end).
    pub fn last_line(&mut self, line: &str) -> Result<(), FoldError> {
        self.lines += 1;
        match self.events.last_line(line) {
            Some(event) => self.event(&event.data, event.line),
            None => Ok(()),
        }
    }

    /// The folded reply. Errors: a stream cut off before its end (neither `[DONE]` nor a
    /// `finish_reason`; an empty file is one), a tool call without a name.
    pub fn finish(self) -> Result<StreamedReply, FoldError> {
        if !self.complete() {
            return Err(FoldError::Cut {
                lines: self.lines,
                end: END,
            });
        }
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for c in self.calls {
            if c.name.is_empty() {
                return Err(format!("tool call {} has no function name", c.index).into());
            }
            tool_calls.push(ProviderToolCall {
                id: c.id,
                function: ProviderFunction {
                    name: c.name,
                    arguments: (!c.arguments.is_empty()).then_some(Value::String(c.arguments)),
                },
            });
        }
        let (content, content_file) = match self
            .content
            .finish()
            .map_err(|e| format!("writing the reply's text to its file: {e}"))?
        {
            SunkText::File { name, .. } => (None, Some(name)),
            SunkText::Text(t) => (Some(t), None),
            SunkText::None => (self.has_content.then(String::new), None),
        };
        Ok(StreamedReply {
            role: self.role,
            content,
            content_file,
            reasoning: self.reasoning,
            reasoning_field: self.reasoning_field,
            tool_calls,
            finish_reason: self.finish_reason,
            usage: self.usage,
            model: self.model,
        })
    }
}

/// The reasoning text of a message or delta and the field it is in: `reasoning_content`
/// (DeepSeek, vLLM, llama.cpp, LM Studio), else a string `reasoning` (newer vLLM, OpenRouter).
pub fn reasoning_text(message: &Value) -> Option<(&'static str, &str)> {
    use crate::reply::{REASONING_CONTENT, REASONING_FIELD};
    let field = |name: &'static str| {
        message
            .get(name)
            .and_then(Value::as_str)
            .map(|text| (name, text))
    };
    field(REASONING_CONTENT).or_else(|| field(REASONING_FIELD))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Folds `lines`, each `data:` line an event of its own (its blank line added, as
    /// providers send them).
    fn fold(lines: &[&str]) -> Result<StreamedReply, String> {
        let mut s = OpenAiStream::new();
        for l in lines {
            s.line(l).map_err(|e| e.to_string())?;
            if l.starts_with("data:") {
                s.line("").map_err(|e| e.to_string())?;
            }
        }
        s.finish().map_err(|e| e.to_string())
    }

    /// `lines` as events of their own (a blank line after each).
    fn events(s: &mut OpenAiStream, lines: &[&str]) -> Result<(), FoldError> {
        for l in lines {
            s.line(l)?;
            s.line("")?;
        }
        Ok(())
    }

    #[test]
    fn text_deltas_finish_reason_and_usage_chunk() {
        let r = fold(&[
            ": keep-alive",
            r#"data: {"model":"gpt-4o-2024-08-06","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            "",
            r#"data: {"model":"other","choices":[{"index":0,"delta":{"content":"Hel"}}]}"#,
            "",
            "data:{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"}}]}\r",
            r#"data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            r#"data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}"#,
            "data: [DONE]",
        ])
        .unwrap();
        assert_eq!(r.role.as_deref(), Some("assistant"));
        assert_eq!(r.content.as_deref(), Some("Hello"));
        assert!(r.tool_calls.is_empty());
        assert_eq!(r.finish_reason.as_deref(), Some("stop"));
        assert_eq!(
            r.model.as_deref(),
            Some("gpt-4o-2024-08-06"),
            "the first given"
        );
        assert_eq!(
            r.usage,
            Some(json!({"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}))
        );
    }

    #[test]
    fn tool_call_fragments_join_by_index() {
        let r = fold(&[
            r#"data: {"choices":[{"delta":{"role":"assistant","content":null,"tool_calls":[{"index":1,"id":"b","type":"function","function":{"name":"read","arguments":""}}]}}]}"#,
            r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"ls","arguments":"{\"pa"}}]}}]}"#,
            r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\":1}"}}]}}]}"#,
            r#"data: {"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
            "data: [DONE]",
        ])
        .unwrap();
        assert_eq!(r.content, None);
        let calls: Vec<_> = r
            .tool_calls
            .iter()
            .map(|c| {
                (
                    c.id.clone(),
                    c.function.name.clone(),
                    c.function.arguments.clone(),
                )
            })
            .collect();
        assert_eq!(
            calls,
            vec![
                (Some("a".into()), "ls".into(), Some(json!("{\"path\":1}"))),
                (Some("b".into()), "read".into(), None),
            ]
        );
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn reasoning_content_deltas_are_kept_apart_from_the_content() {
        let r = fold(&[
            r#"data: {"choices":[{"delta":{"role":"assistant","content":null,"reasoning_content":"Let me "}}]}"#,
            r#"data: {"choices":[{"delta":{"content":null,"reasoning_content":"think."}}]}"#,
            r#"data: {"choices":[{"delta":{"content":"42","reasoning_content":null}}]}"#,
            r#"data: {"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
            "data: [DONE]",
        ])
        .unwrap();
        assert_eq!(r.reasoning.as_deref(), Some("Let me think."));
        assert_eq!(r.reasoning_field, "reasoning_content");
        assert_eq!(r.content.as_deref(), Some("42"));
        let r = fold(&[
            r#"data: {"choices":[{"delta":{"reasoning":"vLLM's field"},"finish_reason":"stop"}]}"#,
        ])
        .unwrap();
        assert_eq!(r.reasoning.as_deref(), Some("vLLM's field"));
        assert_eq!(r.reasoning_field, "reasoning");
        assert_eq!(r.content, None);
    }

    #[test]
    fn a_cut_stream_is_refused() {
        let e = fold(&[
            r#"data: {"choices":[{"delta":{"content":"Hel"}}]}"#,
            r#"data: {"choices":[{"delta":{"con"#,
        ])
        .unwrap_err();
        assert!(e.contains("line 3") && e.contains("not JSON"), "{e}");
        let e = fold(&[r#"data: {"choices":[{"delta":{"content":"Hel"}}]}"#]).unwrap_err();
        assert!(e.contains("cut off"), "{e}");
        assert!(fold(&[]).unwrap_err().contains("cut off"));
        // Typed: a cut is told apart from a whole stream that cannot be folded.
        let mut s = OpenAiStream::new();
        events(
            &mut s,
            &[r#"data: {"choices":[{"delta":{"content":"Hel"}}]}"#],
        )
        .unwrap();
        assert!(s.finish().unwrap_err().is_cut());
        let mut s = OpenAiStream::new();
        events(
            &mut s,
            &[
                r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}"#,
                "data: [DONE]",
            ],
        )
        .unwrap();
        let e = s.finish().unwrap_err();
        assert!(!e.is_cut(), "{e}");
        assert!(e.to_string().contains("no function name"), "{e}");
    }

    #[test]
    fn an_error_chunk_is_the_providers_error_retried_when_transient() {
        let mut s = OpenAiStream::new();
        let e = events(
            &mut s,
            &[r#"data: {"error":{"message":"overloaded","type":"server_error"}}"#],
        )
        .unwrap_err();
        assert!(e.to_string().contains("overloaded"), "{e}");
        assert!(e.sends_again() && !e.is_cut(), "{e:?}");
        let mut s = OpenAiStream::new();
        let e = events(
            &mut s,
            &[r#"data: {"error":{"message":"bad","type":"invalid_request_error"}}"#],
        )
        .unwrap_err();
        assert!(!e.sends_again(), "{e:?}");
    }

    #[test]
    fn a_stream_ending_inside_an_event_is_cut() {
        // The last line has no `\n`: the end of the stream dispatches nothing.
        let mut s = OpenAiStream::new();
        events(
            &mut s,
            &[r#"data: {"choices":[{"delta":{"content":"Hel"}}]}"#],
        )
        .unwrap();
        s.last_line(r#"data: {"id":"x","object":"chat.com"#)
            .unwrap();
        let e = s.finish().unwrap_err();
        assert!(e.is_cut(), "{e}");
        assert!(e.to_string().contains("after 3 lines"), "{e}");
        // Even a whole error object: an event is dispatched by its blank line only.
        let mut s = OpenAiStream::new();
        events(
            &mut s,
            &[r#"data: {"choices":[{"delta":{"content":"Hel"}}]}"#],
        )
        .unwrap();
        s.last_line(r#"data: {"error":{"message":"quota"}}"#)
            .unwrap();
        assert!(s.finish().unwrap_err().is_cut());
        // And a whole event without the blank line after it.
        let mut s = OpenAiStream::new();
        s.line(r#"data: {"choices":[{"delta":{"content":"Hel"}}]}"#)
            .unwrap();
        s.line(r#"data: {"choices":[{"delta":{},"finish_reason":"stop"}]}"#)
            .unwrap();
        assert!(s.finish().unwrap_err().is_cut());
    }

    #[test]
    fn an_event_whose_json_spans_several_data_lines_is_one_chunk() {
        let mut s = OpenAiStream::new();
        for l in [
            ": a comment",
            "id: 1",
            "retry: 1000",
            r#"data: {"choices":[{"index":0,"#,
            r#"data:  "delta":{"role":"assistant","content":"Hel"}}]}"#,
            "",
            "event: message",
            "data: {\"choices\":[{\"delta\":{\"content\":\"lo\"},\r",
            "data: \"finish_reason\":\"stop\"}]}\r",
            "\r",
            "data",
            "",
            "data: [DONE]",
            "",
        ] {
            s.line(l).unwrap_or_else(|e| panic!("{l}: {e}"));
        }
        let r = s.finish().unwrap();
        assert_eq!(r.content.as_deref(), Some("Hello"));
        assert_eq!(r.finish_reason.as_deref(), Some("stop"));
    }
}
