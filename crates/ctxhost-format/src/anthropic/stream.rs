//! Folding a streamed Messages API reply (server-sent events, as the host keeps them in
//! `reply.stream`) into the reply, a line at a time: no whole-file read.
//!
//! The stream (Anthropic's "Streaming Messages"): lines `event: <name>` and `data: <json>`, an
//! event ending at a blank line; the JSON's `type` names the event, so the `event:` lines are
//! not needed:
//! - `message_start` `{"message":{"role","model","usage":{...}}}`: the role, the model that
//!   answers and the first usage (input and cache counts);
//! - `content_block_start` `{"index","content_block":{...}}`: a block begins: `text`,
//!   `tool_use` `{"id","name","input":{}}`, `thinking` `{"thinking":"","signature":""}`,
//!   `redacted_thinking` `{"data"}` (whole);
//! - `content_block_delta` `{"index","delta":{...}}`: `text_delta` `{"text"}`,
//!   `input_json_delta` `{"partial_json"}`, `thinking_delta` `{"thinking"}`,
//!   `signature_delta` `{"signature"}` (others, e.g. `citations_delta`, carry nothing kept);
//! - `content_block_stop` `{"index"}`: the block is complete;
//! - `message_delta` `{"delta":{"stop_reason"},"usage":{...}}`: the stop reason and the usage
//!   so far (its counts replace those of `message_start`, the others stay);
//! - `message_stop`: the end; `ping`: nothing; `error` `{"error":{"type","message"}}`: the
//!   provider's error (e.g. `overloaded_error` in the middle of a stream).
//!
//! Unknown event types are skipped (the API says new ones may come). A stream without
//! `message_stop` was cut off ([`AnthropicStream::finish`] refuses it). A thinking block is
//! kept as a reasoning item only when it was closed and signed (`signature_delta`); its data is
//! `{"type":"thinking","thinking":<text>,"signature":<signature>}`, the block as the whole
//! (unstreamed) reply has it; a `redacted_thinking` block is kept as
//! `{"type":"redacted_thinking","data":<data>}`.

use crate::content_file::{SunkText, TextSink};
use serde_json::{Map, Value};

use super::response::{PROVIDER, ParsedReply, finish_reason, read_usage};
use crate::ReasoningItem;
use crate::block_order::{Order, Part};
use crate::body::{is_transient_error, provider_error};
use crate::event_stream::EventStream;
use crate::fold::FoldError;
use crate::reply::{ProviderFunction, ProviderToolCall, assistant_message};

/// What ends a whole stream of this provider (named by [`FoldError::Cut`]).
const END: &str = "`message_stop`";

/// A content block being assembled from its events.
#[derive(Debug)]
struct Partial {
    index: u64,
    kind: PartialKind,
    closed: bool,
}

#[derive(Debug)]
enum PartialKind {
    /// A text block: its text goes to the fold's sink ([`AnthropicStream::text`]).
    Text,
    ToolUse {
        id: Option<String>,
        name: String,
        /// The `input` of `content_block_start` (normally `{}`), used when no
        /// `input_json_delta` came.
        start_input: Option<Value>,
        json: String,
    },
    Thinking {
        thinking: String,
        signature: String,
    },
    /// A `redacted_thinking` block's `data`.
    Redacted(String),
    /// A block ctxhost keeps nothing of (server tools, ...).
    Other,
}

/// The fold of a Messages API stream (module doc); feed it with [`AnthropicStream::line`],
/// then take the reply with [`AnthropicStream::finish`].
#[derive(Debug, Default)]
pub struct AnthropicStream {
    role: Option<String>,
    /// The text blocks' text, joined in block order as it comes (in memory, or in a file past
    /// its threshold: [`AnthropicStream::with_content_file`]).
    text: TextSink,
    /// Whether a text block started.
    has_text: bool,
    /// Bytes of text per text block index, for the reply's block order
    /// ([`crate::block_order`]).
    text_bytes: std::collections::HashMap<u64, usize>,
    blocks: Vec<Partial>,
    usage: Map<String, Value>,
    usage_seen: bool,
    usage_bad: Option<String>,
    stop_reason: Option<String>,
    model: Option<String>,
    stopped: bool,
    lines: u64,
    events: EventStream,
}

impl AnthropicStream {
    /// A fold that has seen nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fold whose text goes to a file once it passes a threshold
    /// ([`TextSink::spilling`]): the reply then names the file instead of holding the text.
    pub fn with_content_file(sink: TextSink) -> Self {
        AnthropicStream {
            text: sink,
            ..Self::default()
        }
    }

    /// Adds `piece` of text block `index` to the joined text ([`TextSink::push_part`]).
    fn push_text(&mut self, index: u64, piece: &str) -> Result<(), String> {
        *self.text_bytes.entry(index).or_default() += piece.len();
        self.text.push_part(index, piece, "block")
    }

    /// Folds one line of the stream (without its `\n`), read as server-sent events by
    /// [`EventStream`] (WHATWG rules: an event's `data:` lines joined with `\n`, dispatched at
    /// its blank line). Errors, each naming the line the event began on: an event whose data
    /// is not a JSON object, an `error` event (the provider's message;
    /// [`FoldError::Transient`] for `overloaded_error`, `api_error`, `rate_limit_error` and the
    /// like, [`crate::body::is_transient_error`]), a delta or stop for a block that was not
    /// started, a delta of the wrong kind for its block, data after `message_stop`.
    pub fn line(&mut self, line: &str) -> Result<(), FoldError> {
        self.lines += 1;
        match self.events.line(line) {
            Some(event) => self.data(&event.data, event.line),
            None => Ok(()),
        }
    }

    /// Folds the data of one event that began on line `n`.
    fn data(&mut self, data: &str, n: u64) -> Result<(), FoldError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(());
        }
        let event: Value = serde_json::from_str(data)
            .map_err(|e| format!("line {n}: an event whose data is not JSON ({e})"))?;
        if !event.is_object() {
            return Err(format!("line {n}: an event that is not a JSON object").into());
        }
        let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
        if kind == "error" || provider_error(&event).is_some() {
            let e = provider_error(&event).unwrap_or_else(|| event.to_string());
            let what = format!("line {n}: the provider sent an error: {e}");
            return Err(match event.get("error") {
                Some(error) if is_transient_error(error) => FoldError::Transient(what),
                _ => FoldError::Invalid(what),
            });
        }
        if self.stopped && kind != "ping" {
            return Err(format!("line {n}: a `{kind}` event after `message_stop`").into());
        }
        Ok(self
            .event(kind, &event)
            .map_err(|e| format!("line {n}: {e}"))?)
    }

    fn event(&mut self, kind: &str, event: &Value) -> Result<(), String> {
        match kind {
            "message_start" => {
                let message = event.get("message").unwrap_or(&Value::Null);
                if let Some(m) = message.get("model").and_then(Value::as_str) {
                    self.model = Some(m.to_string());
                }
                if let Some(r) = message.get("role").and_then(Value::as_str) {
                    self.role = Some(r.to_string());
                }
                self.merge_usage(message.get("usage"));
            }
            "content_block_start" => {
                let index = index_of(event)?;
                if self.blocks.iter().any(|b| b.index == index) {
                    return Err(format!("block {index} started twice"));
                }
                let block = event.get("content_block").unwrap_or(&Value::Null);
                let text = |field: &str| {
                    block
                        .get(field)
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                };
                let kind = match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        self.has_text = true;
                        self.push_text(index, &text("text"))?;
                        PartialKind::Text
                    }
                    Some("tool_use") => PartialKind::ToolUse {
                        id: block.get("id").and_then(Value::as_str).map(str::to_string),
                        name: text("name"),
                        start_input: block.get("input").cloned(),
                        json: String::new(),
                    },
                    Some("thinking") => PartialKind::Thinking {
                        thinking: text("thinking"),
                        signature: text("signature"),
                    },
                    Some("redacted_thinking") => PartialKind::Redacted(text("data")),
                    _ => PartialKind::Other,
                };
                self.blocks.push(Partial {
                    index,
                    kind,
                    closed: false,
                });
            }
            "content_block_delta" => {
                let index = index_of(event)?;
                let delta = event.get("delta").unwrap_or(&Value::Null);
                let delta_kind = delta.get("type").and_then(Value::as_str).unwrap_or("");
                let piece = |field: &str| delta.get(field).and_then(Value::as_str);
                let block = self.open_block(index)?;
                match (&mut block.kind, delta_kind) {
                    (PartialKind::Text, "text_delta") => {
                        let piece = piece("text").unwrap_or("");
                        self.push_text(index, piece)?;
                    }
                    (PartialKind::ToolUse { json, .. }, "input_json_delta") => {
                        json.push_str(piece("partial_json").unwrap_or(""))
                    }
                    (PartialKind::Thinking { thinking, .. }, "thinking_delta") => {
                        thinking.push_str(piece("thinking").unwrap_or(""))
                    }
                    (PartialKind::Thinking { signature, .. }, "signature_delta") => {
                        signature.push_str(piece("signature").unwrap_or(""))
                    }
                    (
                        _,
                        "text_delta" | "input_json_delta" | "thinking_delta" | "signature_delta",
                    ) => {
                        return Err(format!(
                            "a `{delta_kind}` for block {index}, which is not of that kind"
                        ));
                    }
                    // citations_delta and kinds to come: nothing ctxhost keeps.
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = index_of(event)?;
                self.open_block(index)?.closed = true;
            }
            "message_delta" => {
                if let Some(r) = event
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    self.stop_reason = Some(r.to_string());
                }
                self.merge_usage(event.get("usage"));
            }
            "message_stop" => self.stopped = true,
            // ping, and event types to come.
            _ => {}
        }
        Ok(())
    }

    /// The started, not yet stopped block `index`.
    fn open_block(&mut self, index: u64) -> Result<&mut Partial, String> {
        match self.blocks.iter_mut().find(|b| b.index == index) {
            Some(b) if b.closed => Err(format!("an event for block {index} after its stop")),
            Some(b) => Ok(b),
            None => Err(format!("an event for block {index}, which was not started")),
        }
    }

    /// Lays the counts of `usage` over those seen so far (each event's counts are totals).
    fn merge_usage(&mut self, usage: Option<&Value>) {
        match usage {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                self.usage_seen = true;
                for (k, v) in map {
                    if !v.is_null() {
                        self.usage.insert(k.clone(), v.clone());
                    }
                }
            }
            Some(other) => {
                self.usage_bad = Some(format!(
                    "usage ignored: not a usage object ({other}); the reply is used"
                ))
            }
        }
    }

    /// Whether `message_stop` came.
    pub fn complete(&self) -> bool {
        self.stopped
    }

    /// Folds the stream's last line when it has no `\n` (the stream ended inside it): by the
    /// event-stream rules the end of the stream dispatches nothing, so an event not ended by
    /// its blank line is discarded and [`Self::finish`] judges the stream without it.
    pub fn last_line(&mut self, line: &str) -> Result<(), FoldError> {
        self.lines += 1;
        match self.events.last_line(line) {
            Some(event) => self.data(&event.data, event.line),
            None => Ok(()),
        }
    }

    /// The folded reply: text blocks joined, `tool_use` blocks as tool calls (`input` from the
    /// joined `input_json_delta`s), closed and signed thinking blocks and redacted ones as
    /// reasoning items, in block order. Errors: a stream cut off before `message_stop` (an
    /// empty file is one), a tool call without a name or whose input is not JSON.
    pub fn finish(mut self) -> Result<ParsedReply, FoldError> {
        if !self.stopped {
            return Err(FoldError::Cut {
                lines: self.lines,
                end: END,
            });
        }
        self.blocks.sort_by_key(|b| b.index);
        let (text, content_file) = match self
            .text
            .finish()
            .map_err(|e| format!("writing the reply's text to its file: {e}"))?
        {
            SunkText::File { name, .. } => (None, Some(name)),
            SunkText::Text(t) => (Some(t), None),
            SunkText::None => (self.has_text.then(String::new), None),
        };
        let mut calls = Vec::new();
        let mut reasoning = Vec::new();
        let mut order = Order::new();
        let mut dropped = 0u64;
        for b in self.blocks {
            match b.kind {
                PartialKind::Text => order.push(Part::Text(
                    self.text_bytes.get(&b.index).copied().unwrap_or(0),
                )),
                PartialKind::ToolUse {
                    id,
                    name,
                    start_input,
                    json,
                } => {
                    if name.is_empty() {
                        return Err(format!("tool_use block {} has no name", b.index).into());
                    }
                    let input = if json.trim().is_empty() {
                        start_input
                    } else {
                        Some(serde_json::from_str::<Value>(&json).map_err(|e| {
                            FoldError::from(format!(
                                "tool_use block {}: its input is not JSON ({e})",
                                b.index
                            ))
                        })?)
                    };
                    calls.push(ProviderToolCall {
                        id,
                        function: ProviderFunction {
                            name,
                            arguments: input,
                        },
                    });
                    order.push(Part::ToolCall);
                }
                PartialKind::Thinking {
                    thinking,
                    signature,
                } => {
                    if !b.closed || signature.is_empty() {
                        dropped += 1;
                        continue;
                    }
                    order.push(Part::Reasoning);
                    reasoning.push(ReasoningItem {
                        provider: PROVIDER.to_string(),
                        kind: "thinking".to_string(),
                        data: format!(
                            "{{\"type\":\"thinking\",\"thinking\":{},\"signature\":{}}}",
                            Value::from(thinking),
                            Value::from(signature)
                        ),
                    });
                }
                PartialKind::Redacted(data) => {
                    if !b.closed || data.is_empty() {
                        dropped += 1;
                        continue;
                    }
                    order.push(Part::Reasoning);
                    reasoning.push(ReasoningItem {
                        provider: PROVIDER.to_string(),
                        kind: "redacted_thinking".to_string(),
                        data: format!(
                            "{{\"type\":\"redacted_thinking\",\"data\":{}}}",
                            Value::from(data)
                        ),
                    });
                }
                PartialKind::Other => {}
            }
        }
        let (usage, usage_warning) = if self.usage_seen {
            read_usage(&Value::Object(self.usage))
        } else {
            (None, self.usage_bad)
        };
        let mut message = assistant_message(self.role, text, calls);
        reasoning.extend(order.item(PROVIDER));
        message.reasoning = reasoning;
        Ok(ParsedReply {
            order,
            message,
            usage,
            finish_reason: self.stop_reason.as_deref().map(finish_reason),
            model: self.model,
            usage_warning,
            dropped_reasoning: dropped,
            content_file,
        })
    }
}

/// The event's `index` (a whole number ≥ 0).
fn index_of(event: &Value) -> Result<u64, String> {
    event
        .get("index")
        .and_then(Value::as_u64)
        .ok_or_else(|| "an event without a block `index`".to_string())
}

impl crate::fold::LineFold for AnthropicStream {
    type Folded = ParsedReply;
    fn fold_line(&mut self, line: &str) -> Result<(), FoldError> {
        self.line(line)
    }
    fn fold_last_line(&mut self, line: &str) -> Result<(), FoldError> {
        self.last_line(line)
    }
    fn finish_fold(self) -> Result<ParsedReply, FoldError> {
        self.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolCall;
    use crate::anthropic::AnthropicUsage;

    /// Folds `lines`, each `data:` line an event of its own (its blank line added, as the API
    /// sends them).
    fn fold(lines: &[&str]) -> Result<ParsedReply, String> {
        let mut s = AnthropicStream::new();
        feed(&mut s, lines).map_err(|e| e.to_string())?;
        s.finish().map_err(|e| e.to_string())
    }

    /// Feeds `lines` to `s`, a blank line after each `data:` line.
    fn feed(s: &mut AnthropicStream, lines: &[&str]) -> Result<(), FoldError> {
        for l in lines {
            s.line(l)?;
            if l.starts_with("data:") {
                s.line("")?;
            }
        }
        Ok(())
    }

    /// The events of a reply with thinking, text and a tool call, as the API streams them.
    const THINKING_TOOL: &[&str] = &[
        "event: message_start",
        r#"data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-x","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"output_tokens":1}}}"#,
        "",
        "event: content_block_start",
        r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
        "",
        "event: ping",
        r#"data: {"type": "ping"}"#,
        "",
        r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me \"read\" "}}"#,
        r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"the file. 上下文"}}"#,
        r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA"}}"#,
        r#"data: {"type":"content_block_stop","index":0}"#,
        r#"data: {"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3p"}}"#,
        r#"data: {"type":"content_block_stop","index":1}"#,
        r#"data: {"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}"#,
        r#"data: {"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"Reading "}}"#,
        r#"data: {"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"it."}}"#,
        r#"data: {"type":"content_block_stop","index":2}"#,
        r#"data: {"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_01","name":"read","input":{}}}"#,
        r#"data: {"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":""}}"#,
        r#"data: {"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"path\": \"a"}}"#,
        r#"data: {"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":".txt\"}"}}"#,
        r#"data: {"type":"content_block_stop","index":3}"#,
        "",
        "event: message_delta",
        r#"data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}"#,
        "",
        "event: message_stop\r",
        "data: {\"type\":\"message_stop\"}\r",
        "",
    ];

    #[test]
    fn thinking_text_and_a_tool_call_fold_into_the_reply() {
        let r = fold(THINKING_TOOL).unwrap();
        assert_eq!(r.message.role, "assistant");
        assert_eq!(r.message.content.as_deref(), Some("Reading it."));
        assert_eq!(
            r.message.calls(),
            [ToolCall::new("toolu_01", "read", r#"{"path":"a.txt"}"#)]
        );
        let items: Vec<_> = r
            .message
            .reasoning
            .iter()
            .map(|i| (i.provider.as_str(), i.kind.as_str(), i.data.as_str()))
            .collect();
        assert_eq!(
            items,
            [
                (
                    "anthropic",
                    "thinking",
                    r#"{"type":"thinking","thinking":"Let me \"read\" the file. 上下文","signature":"EqQBCgIYAhIM1gbcDa9GJwZA"}"#
                ),
                (
                    "anthropic",
                    "redacted_thinking",
                    r#"{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3p"}"#
                ),
            ]
        );
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(
            r.model.as_deref(),
            Some("claude-x"),
            "message_start's model"
        );
        assert_eq!(
            r.usage,
            Some(AnthropicUsage {
                input_tokens: 25,
                output_tokens: 89,
                cache_creation_input_tokens: 100,
                cache_read_input_tokens: 2000,
            })
        );
        assert_eq!((r.usage_warning, r.dropped_reasoning), (None, 0));
    }

    #[test]
    fn a_stream_cut_before_message_stop_is_refused() {
        let cut = &THINKING_TOOL[..THINKING_TOOL.len() - 3];
        let e = fold(cut).unwrap_err();
        assert!(e.contains("without `message_stop`: cut off"), "{e}");
        assert!(fold(&[]).unwrap_err().contains("after 0 lines"));
        let mut s = AnthropicStream::new();
        feed(&mut s, cut).unwrap();
        assert!(s.finish().unwrap_err().is_cut());
    }

    #[test]
    fn a_torn_or_bad_line_names_its_number() {
        let e = fold(&[
            "event: message_start",
            r#"data: {"type":"message_start","message":{"role":"assistant"}}"#,
            r#"data: {"type":"content_block_start","index":0,"content_bl"#,
        ])
        .unwrap_err();
        // Each data line is followed by its blank line: the torn event is on line 4.
        assert!(
            e.starts_with("line 4: an event whose data is not JSON"),
            "{e}"
        );
        let e = fold(&[
            r#"data: {"type":"message_start","message":{"role":"assistant"}}"#,
            r#"data: {"type":"content_block_delta","index":4,"delta":{"type":"text_delta","text":"x"}}"#,
        ])
        .unwrap_err();
        assert_eq!(e, "line 3: an event for block 4, which was not started");
        let e = fold(&[
            r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"x"}}"#,
        ])
        .unwrap_err();
        assert_eq!(
            e,
            "line 3: a `thinking_delta` for block 0, which is not of that kind"
        );
        let e = fold(&[
            r#"data: {"type":"message_stop"}"#,
            r#"data: {"type":"message_start","message":{}}"#,
        ])
        .unwrap_err();
        assert_eq!(e, "line 3: a `message_start` event after `message_stop`");
        let e = fold(&["data: [1]"]).unwrap_err();
        assert_eq!(e, "line 1: an event that is not a JSON object");
    }

    #[test]
    fn an_error_event_is_the_providers_error() {
        let e = fold(&[
            r#"data: {"type":"message_start","message":{"role":"assistant"}}"#,
            "event: error",
            r#"data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ])
        .unwrap_err();
        assert_eq!(
            e,
            "line 3: the provider sent an error: Overloaded (type: overloaded_error)"
        );
    }

    #[test]
    fn unsigned_or_cut_thinking_is_never_kept() {
        let r = fold(&[
            r#"data: {"type":"message_start","message":{"role":"assistant","usage":{"input_tokens":3,"output_tokens":0}}}"#,
            r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
            r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"no signature"}}"#,
            r#"data: {"type":"content_block_stop","index":0}"#,
            r#"data: {"type":"content_block_start","index":1,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
            r#"data: {"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"cut"}}"#,
            r#"data: {"type":"content_block_delta","index":1,"delta":{"type":"signature_delta","signature":"sig"}}"#,
            r#"data: {"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":"x"}}"#,
            r#"data: {"type":"message_stop"}"#,
        ])
        .unwrap();
        assert!(r.message.reasoning.is_empty());
        assert_eq!(r.dropped_reasoning, 2);
        assert_eq!(r.message.content, None);
        assert_eq!(r.finish_reason.as_deref(), Some("length"));
        assert_eq!(
            r.usage.map(|u| (u.input_tokens, u.output_tokens)),
            Some((3, 0))
        );
        assert!(r.usage_warning.unwrap().contains("usage.output_tokens"));
    }

    #[test]
    fn a_tool_input_that_is_not_json_is_an_error() {
        let e = fold(&[
            r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"ls","input":{}}}"#,
            r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#,
            r#"data: {"type":"content_block_stop","index":0}"#,
            r#"data: {"type":"message_stop"}"#,
        ])
        .unwrap_err();
        assert!(
            e.starts_with("tool_use block 0: its input is not JSON"),
            "{e}"
        );
        // No delta: the start's input.
        let r = fold(&[
            r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"ls","input":{}}}"#,
            r#"data: {"type":"content_block_stop","index":0}"#,
            r#"data: {"type":"message_stop"}"#,
        ])
        .unwrap();
        assert_eq!(r.message.calls(), [ToolCall::new("t", "ls", "{}")]);
    }

    #[test]
    fn a_stream_ending_inside_an_event_is_cut() {
        // The last line has no `\n`: the end of the stream dispatches nothing.
        let start = r#"data: {"type":"message_start","message":{"role":"assistant","usage":{"input_tokens":3,"output_tokens":0}}}"#;
        let mut s = AnthropicStream::new();
        feed(&mut s, &[start]).unwrap();
        s.last_line(r#"data: {"type":"content_block_delta","ind"#)
            .unwrap();
        let e = s.finish().unwrap_err();
        assert!(e.is_cut(), "{e}");
        assert!(e.to_string().contains("after 3 lines"), "{e}");
        // message_stop without the blank line that dispatches it: cut.
        let mut s = AnthropicStream::new();
        feed(&mut s, &[start]).unwrap();
        s.line("event: message_stop").unwrap();
        s.line(r#"data: {"type":"message_stop"}"#).unwrap();
        assert!(s.finish().unwrap_err().is_cut());
    }

    #[test]
    fn an_error_event_is_sent_again_when_transient_and_final_otherwise() {
        for (kind, again) in [
            ("overloaded_error", true),
            ("api_error", true),
            ("rate_limit_error", true),
            ("invalid_request_error", false),
            ("authentication_error", false),
        ] {
            let mut s = AnthropicStream::new();
            let e = feed(
                &mut s,
                &[
                    r#"data: {"type":"message_start","message":{"role":"assistant"}}"#,
                    "event: error",
                    &format!(
                        r#"data: {{"type":"error","error":{{"type":"{kind}","message":"busy"}}}}"#
                    ),
                ],
            )
            .unwrap_err();
            assert_eq!(e.sends_again(), again, "{kind}: {e:?}");
            assert!(!e.is_cut());
            assert!(
                e.to_string()
                    .starts_with("line 3: the provider sent an error: busy"),
                "{e}"
            );
        }
    }

    #[test]
    fn an_event_whose_json_spans_several_data_lines_is_one_event() {
        let mut s = AnthropicStream::new();
        for l in [
            "event: message_start",
            r#"data: {"type":"message_start","#,
            r#"data: "message":{"role":"assistant","model":"claude-x"}}"#,
            "",
            "event: content_block_start",
            r#"data: {"type":"content_block_start","index":0,"#,
            r#"data: "content_block":{"type":"text","text":""}}"#,
            "",
            "event: content_block_delta",
            r#"data: {"type":"content_block_delta","index":0,"delta":"#,
            r#"data: {"type":"text_delta","text":"Hi"}}"#,
            "",
            r#"data: {"type":"content_block_stop","index":0}"#,
            "",
            "data: {\"type\":\"message_stop\"",
            "data: }",
            "",
        ] {
            s.line(l).unwrap_or_else(|e| panic!("{l}: {e}"));
        }
        let r = s.finish().unwrap();
        assert_eq!(r.message.content.as_deref(), Some("Hi"));
        assert_eq!(r.model.as_deref(), Some("claude-x"));
    }
}
