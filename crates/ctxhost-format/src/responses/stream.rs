//! Folding a streamed Responses API reply (server-sent events, as the host keeps them in
//! `reply.stream`) into the parts of one reply ([`super::Folded`]), a line at a time.
//!
//! Each event is an `event: <type>` line (skipped: the type is repeated in the data) and a
//! `data: {"type",...}` line. Read here:
//! - `response.output_item.added` `{"output_index","item"}`: an output item starts (a
//!   `function_call` with its `call_id` and `name`);
//! - `response.output_text.delta` / `response.refusal.delta` `{"output_index","delta"}`: text
//!   of a `message` item;
//! - `response.function_call_arguments.delta` `{"output_index","delta"}`: arguments text;
//! - `response.output_item.done` `{"output_index","item"}`: the item whole — a `reasoning`
//!   item is kept from here, its JSON text exactly as received (with `encrypted_content`); a
//!   `function_call`'s fields and a `message`'s text (when no delta came) are taken from it;
//! - `response.completed` / `response.incomplete` `{"response"}`: the end, with `status`,
//!   `incomplete_details` and `usage` (when no item event came, the response's `output` is read
//!   as a whole response's);
//! - `response.failed` `{"response":{"error"}}` and `error` `{"code","message"}`: the
//!   provider's error.
//!
//! llama.cpp's stream has no `output_index`: its events are then placed by the item's `id`
//! (`item.id`, or the event's `item_id`), and a new item by the order of `output_item.added`.
//!
//! Other events (`response.created`, `response.content_part.*`, reasoning summary deltas, ...)
//! carry nothing the reply needs. A stream without `response.completed` or
//! `response.incomplete` was cut off ([`ResponsesStream::finish`] refuses it).

use crate::content_file::{SunkText, TextSink};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::response::{Incomplete, ItemIn, call, parse_response};
use super::{Folded, REASONING, error_text, finish_reason};
use crate::block_order::Part;
use crate::body::is_transient_error;
use crate::event_stream::EventStream;
use crate::fold::FoldError;

/// What ends a whole stream of this provider (named by [`FoldError::Cut`]).
const END: &str = "response.completed";

/// One output item being assembled.
#[derive(Debug, Default)]
struct Slot {
    index: u64,
    /// The item's `id` (`item.id` or an event's `item_id`), when one was seen.
    id: String,
    kind: String,
    /// Text of this `message` item came (it went to the fold's sink).
    had_text: bool,
    /// Bytes of that text, for the reply's item order ([`crate::block_order`]).
    text_bytes: usize,
    call_id: String,
    name: String,
    arguments: String,
    /// A `reasoning` item's JSON text, from its `output_item.done`.
    reasoning: Option<String>,
}

/// How the stream ended.
#[derive(Debug)]
struct End {
    status: Option<String>,
    incomplete_reason: Option<String>,
    usage: Option<Value>,
    model: Option<String>,
    /// The whole response's reply, when the stream had no item events.
    whole: Option<Folded>,
}

/// The fold of a Responses API stream (module doc); feed it with [`ResponsesStream::line`],
/// then take the reply with [`ResponsesStream::finish`].
#[derive(Debug, Default)]
pub struct ResponsesStream {
    slots: Vec<Slot>,
    /// The `message` items' text, joined in output order as it comes (in memory, or in a file
    /// past its threshold: [`ResponsesStream::with_content_file`]).
    text: TextSink,
    end: Option<End>,
    lines: u64,
    events: EventStream,
    /// The event being read was folded from its long line ([`ResponsesStream::long_line`]):
    /// no more data until its blank line.
    taken: bool,
}

#[derive(Deserialize)]
struct EventIn<'a> {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    output_index: Option<u64>,
    #[serde(default)]
    item_id: Option<String>,
    #[serde(default)]
    delta: Option<String>,
    #[serde(borrow, default)]
    item: Option<&'a RawValue>,
    #[serde(borrow, default)]
    response: Option<&'a RawValue>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    code: Option<Value>,
}

/// The parts of an event kept when its line is too long to hold ([`ResponsesStream::long_line`]):
/// an item's `content` and a response's `output` are skipped as they are read.
#[derive(Deserialize)]
struct LongEventIn {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    output_index: Option<u64>,
    #[serde(default)]
    item_id: Option<String>,
    #[serde(default)]
    item: Option<LongItemIn>,
    #[serde(default)]
    response: Option<EndIn>,
}

/// An output item's type and id (the rest skipped).
#[derive(Deserialize)]
struct LongItemIn {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    id: Option<String>,
}

/// An item's `id`, read to place events that lack `output_index`.
#[derive(Deserialize)]
struct IdIn {
    #[serde(default)]
    id: Option<String>,
}

/// The end-of-stream fields of `response` (its `output` is skipped, not built).
#[derive(Deserialize)]
struct EndIn {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    incomplete_details: Option<Incomplete>,
    #[serde(default)]
    usage: Option<Value>,
    #[serde(default)]
    model: Option<String>,
}

impl ResponsesStream {
    /// A fold that has seen nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fold whose text goes to a file once it passes a threshold
    /// ([`TextSink::spilling`]): the reply then names the file instead of holding the text.
    pub fn with_content_file(sink: TextSink) -> Self {
        ResponsesStream {
            text: sink,
            ..Self::default()
        }
    }

    /// Adds `piece` of the `message` item at `index` to the joined text
    /// ([`TextSink::push_part`]).
    fn push_text(&mut self, index: u64, piece: &str) -> Result<(), String> {
        let slot = self.slot(index);
        slot.had_text = true;
        slot.text_bytes += piece.len();
        self.text.push_part(index, piece, "output item")
    }

    /// Folds a `data:` line too long to hold in memory (more than `cap` bytes, of which
    /// `start` was read; the rest comes from `rest` up to the line's end, `\n` included): it
    /// is parsed as it is read, keeping only the event's type, place and end fields, so a
    /// message item's or a response's whole text is skipped. That is enough for the
    /// `response.output_item.done` of a `message` item whose text came in deltas, and for
    /// `response.completed` / `response.incomplete` after item events (the text of both is
    /// already folded). Returns `Ok(false)`, having read the line (the caller must read it
    /// again, whole), for any other event. Errors: the line is not an event, or is one the fold
    /// refuses (the provider's error, an event after the end).
    pub fn long_line(
        &mut self,
        start: &[u8],
        rest: &mut impl std::io::Read,
    ) -> Result<bool, String> {
        self.lines += 1;
        let n = self.lines;
        let Some(data_at) = start.strip_prefix(b"data:") else {
            return self.reread(n);
        };
        if self.events.inside_event() || self.taken {
            // The line continues an event begun before it: the event is read whole.
            return self.reread(n);
        }
        let data = data_at
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .unwrap_or(0);
        let mut de =
            serde_json::Deserializer::from_reader(std::io::Read::chain(&data_at[data..], rest));
        let e = match LongEventIn::deserialize(&mut de) {
            Ok(e) => e,
            Err(e) => {
                return Err(format!(
                    "line {n}: a data line that is not a JSON event ({e})"
                ));
            }
        };
        if self.end.is_some() {
            return Err(format!(
                "line {n}: event `{}` after the response's end",
                e.kind
            ));
        }
        match e.kind.as_str() {
            "response.output_item.done" => {
                let Some(item) = e.item.filter(|i| i.kind == "message") else {
                    return self.reread(n);
                };
                let slot = self.place(e.output_index, item.id.or(e.item_id), false);
                if !slot.had_text {
                    // Its text is only in this event, which is too long to hold.
                    return self.reread(n);
                }
                slot.kind = item.kind;
            }
            "response.completed" | "response.incomplete" if !self.slots.is_empty() => {
                let end = e
                    .response
                    .ok_or(format!("line {n}: an end event without response"))?;
                if let Some(error) = error_text(end.error.as_ref()) {
                    return Err(format!("line {n}: the provider sent an error: {error}"));
                }
                self.end = Some(End {
                    status: end.status,
                    incomplete_reason: end.incomplete_details.and_then(|d| d.reason),
                    usage: end.usage.filter(|u| !u.is_null()),
                    model: end.model,
                    whole: None,
                });
            }
            _ => return self.reread(n),
        }
        // The event's data is folded; the line is counted, and until the event's blank line
        // no more data may come ([`Self::line`]).
        self.events.skip_line();
        self.taken = true;
        Ok(true)
    }

    /// A long line this fold must read whole after all: it is not counted yet.
    fn reread(&mut self, _line: u64) -> Result<bool, String> {
        self.lines -= 1;
        Ok(false)
    }

    /// Folds one line of the stream (without its `\n`), read as server-sent events by
    /// [`EventStream`] (WHATWG rules: an event's `data:` lines joined with `\n`, dispatched at
    /// its blank line). Errors, each naming the line the event began on: an event whose data is
    /// not a JSON event, an event missing what it needs, data after the end, the provider's
    /// error (`error`, `response.failed`: [`FoldError::Transient`] when its code is one the
    /// provider documents as transient, [`crate::body::is_transient_error`]).
    pub fn line(&mut self, line: &str) -> Result<(), FoldError> {
        self.lines += 1;
        let event = self.events.line(line);
        if self.taken {
            // After an event folded from its long line ([`Self::long_line`]): data lines that
            // add nothing but white space, up to the blank line that ends it.
            let blank = line.strip_suffix('\r').unwrap_or(line).is_empty();
            if let Some(e) = event.filter(|e| !e.data.trim().is_empty()) {
                return Err(format!(
                    "line {}: more data after the whole JSON of the event before it",
                    e.line
                )
                .into());
            }
            self.taken &= !blank;
            return Ok(());
        }
        let Some(event) = event else {
            return Ok(());
        };
        let data = event.data.trim();
        if data.is_empty() || data == "[DONE]" {
            return Ok(());
        }
        let n = event.line;
        self.event(data).map_err(|e| match e {
            FoldError::Transient(what) => FoldError::Transient(format!("line {n}: {what}")),
            other => FoldError::Invalid(format!("line {n}: {other}")),
        })
    }

    fn event(&mut self, data: &str) -> Result<(), FoldError> {
        let e: EventIn<'_> = serde_json::from_str(data)
            .map_err(|e| format!("an event whose data is not a JSON event ({e})"))?;
        if self.end.is_some() {
            return Err(format!("event `{}` after the response's end", e.kind).into());
        }
        match e.kind.as_str() {
            "response.output_item.added" | "response.output_item.done" => {
                let raw = e.item.ok_or("an item event without item")?;
                let item: ItemIn = serde_json::from_str(raw.get())
                    .map_err(|e| format!("an item that is not an output item ({e})"))?;
                let id = serde_json::from_str::<IdIn>(raw.get())
                    .ok()
                    .and_then(|i| i.id)
                    .or(e.item_id);
                let done = e.kind.ends_with("done");
                let slot = self.place(e.output_index, id, !done);
                slot.kind = item.kind.clone();
                if slot.kind == REASONING && done {
                    slot.reasoning = Some(raw.get().to_string());
                }
                let index = slot.index;
                if slot.kind == "message" && done && !slot.had_text {
                    for part in &item.content {
                        if let Some(t) = part.text() {
                            self.push_text(index, t)?;
                        }
                    }
                }
                let slot = self.slot(index);
                if slot.kind == "function_call" {
                    if let Some(id) = item.call_id.filter(|s| !s.is_empty()) {
                        slot.call_id = id;
                    }
                    if let Some(name) = item.name.filter(|s| !s.is_empty()) {
                        slot.name = name;
                    }
                    if let Some(args) = item.arguments.filter(|_| done) {
                        slot.arguments = args;
                    }
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let slot = self.place(e.output_index, e.item_id, false);
                if slot.kind.is_empty() {
                    slot.kind = "message".to_string();
                }
                let index = slot.index;
                self.push_text(index, e.delta.as_deref().unwrap_or(""))?;
            }
            "response.function_call_arguments.delta" => {
                let slot = self.place(e.output_index, e.item_id, false);
                if slot.kind.is_empty() {
                    slot.kind = "function_call".to_string();
                }
                slot.arguments.push_str(e.delta.as_deref().unwrap_or(""));
            }
            "response.completed" | "response.incomplete" => {
                let raw = e.response.ok_or("an end event without response")?;
                let end: EndIn = serde_json::from_str(raw.get())
                    .map_err(|e| format!("an end event whose response is not one ({e})"))?;
                if let Some(error) = error_text(end.error.as_ref()) {
                    return Err(format!("the provider sent an error: {error}").into());
                }
                let whole = if self.slots.is_empty() {
                    Some(parse_response(raw.get())?)
                } else {
                    None
                };
                self.end = Some(End {
                    status: end.status,
                    incomplete_reason: end.incomplete_details.and_then(|d| d.reason),
                    usage: end.usage.filter(|u| !u.is_null()),
                    model: end.model,
                    whole,
                });
            }
            "response.failed" => {
                let error = e
                    .response
                    .and_then(|r| serde_json::from_str::<EndIn>(r.get()).ok())
                    .and_then(|r| r.error);
                let transient = error.as_ref().is_some_and(is_transient_error);
                let error =
                    error_text(error.as_ref()).unwrap_or_else(|| "no error given".to_string());
                let what = format!("the response failed: {error}");
                return Err(if transient {
                    FoldError::Transient(what)
                } else {
                    FoldError::Invalid(what)
                });
            }
            "error" => {
                let message = e.message.clone().unwrap_or_else(|| data.to_string());
                let code = e.code.filter(|c| !c.is_null());
                // The event itself is the error object (`{"type":"error","code","message"}`).
                let transient = code
                    .as_ref()
                    .is_some_and(|c| is_transient_error(&serde_json::json!({ "code": c })));
                let what = match code {
                    Some(Value::String(c)) => {
                        format!("the provider sent an error: {message} (code: {c})")
                    }
                    Some(c) => format!("the provider sent an error: {message} (code: {c})"),
                    None => format!("the provider sent an error: {message}"),
                };
                return Err(if transient {
                    FoldError::Transient(what)
                } else {
                    FoldError::Invalid(what)
                });
            }
            _ => {}
        }
        Ok(())
    }

    /// The slot an event belongs to: by its `output_index` when given; otherwise (llama.cpp's
    /// stream has none) by the item's `id`; otherwise, for `output_item.added`, a new slot
    /// after the last (the items' order), and for other events the last slot opened.
    fn place(&mut self, index: Option<u64>, id: Option<String>, added: bool) -> &mut Slot {
        let id = id.filter(|s| !s.is_empty());
        let index = match index {
            Some(i) => i,
            None => {
                let known = id
                    .as_deref()
                    .and_then(|id| self.slots.iter().find(|s| s.id == id))
                    .map(|s| s.index);
                let last = self.slots.last().map(|s| s.index);
                match (known, last) {
                    (Some(i), _) => i,
                    (None, Some(l)) if !added && id.is_none() => l,
                    (None, Some(l)) => l + 1,
                    (None, None) => 0,
                }
            }
        };
        let slot = self.slot(index);
        if let Some(id) = id {
            slot.id = id;
        }
        slot
    }

    fn slot(&mut self, index: u64) -> &mut Slot {
        let p = match self.slots.binary_search_by_key(&index, |s| s.index) {
            Ok(p) => p,
            Err(p) => {
                self.slots.insert(
                    p,
                    Slot {
                        index,
                        ..Slot::default()
                    },
                );
                p
            }
        };
        &mut self.slots[p]
    }

    /// Whether the stream reached its end (`response.completed` or `response.incomplete`).
    pub fn complete(&self) -> bool {
        self.end.is_some()
    }

    /// Folds the stream's last line when it has no `\n` (the stream ended inside it): by the
    /// event-stream rules the end of the stream dispatches nothing, so an event not ended by
    /// its blank line is discarded and [`Self::finish`] judges the stream without it.
    pub fn last_line(&mut self, line: &str) -> Result<(), FoldError> {
        match line.rfind('\r') {
            // Bare CRs end lines of their own: fold those.
            Some(end) if !self.taken => self.line(&line[..=end]),
            _ => {
                self.lines += 1;
                self.events.last_line(line);
                Ok(())
            }
        }
    }

    /// The folded reply. Errors: a stream cut off before its end (an empty file is one), a
    /// function call without `call_id` or `name`, a final status that is not completed or
    /// incomplete.
    pub fn finish(self) -> Result<Folded, FoldError> {
        let Some(end) = self.end else {
            return Err(FoldError::Cut {
                lines: self.lines,
                end: END,
            });
        };
        if let Some(mut whole) = end.whole {
            whole.usage = whole.usage.or(end.usage);
            whole.model = whole.model.or(end.model);
            return Ok(whole);
        }
        let mut folded = Folded::default();
        let has_message = self.slots.iter().any(|s| s.kind == "message");
        match self
            .text
            .finish()
            .map_err(|e| format!("writing the reply's text to its file: {e}"))?
        {
            SunkText::File { name, .. } => folded.content_file = Some(name),
            SunkText::Text(t) => folded.content = Some(t),
            SunkText::None => folded.content = has_message.then(String::new),
        }
        for slot in self.slots {
            match slot.kind.as_str() {
                REASONING => {
                    if let Some(item) = slot.reasoning {
                        folded.reasoning.push(item);
                        folded.order.push(Part::Reasoning);
                    }
                }
                "message" => folded.order.push(Part::Text(slot.text_bytes)),
                "function_call" => {
                    folded.order.push(Part::ToolCall);
                    let item = ItemIn {
                        kind: slot.kind,
                        call_id: Some(slot.call_id),
                        name: Some(slot.name),
                        arguments: Some(slot.arguments),
                        ..ItemIn::default()
                    };
                    folded.calls.push(call(item, slot.index as usize)?);
                }
                _ => {}
            }
        }
        folded.finish_reason = finish_reason(
            end.status.as_deref(),
            end.incomplete_reason.as_deref(),
            None,
            !folded.calls.is_empty(),
        )?;
        folded.usage = end.usage;
        folded.model = end.model;
        Ok(folded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::responses::FunctionCallItem;

    /// Folds `lines`, each `data:` line an event of its own (its blank line added, as the API
    /// sends them).
    fn fold(lines: &[&str]) -> Result<Folded, String> {
        let mut s = ResponsesStream::new();
        for l in lines {
            s.line(l).map_err(|e| e.to_string())?;
            if l.starts_with("data:") {
                s.line("").map_err(|e| e.to_string())?;
            }
        }
        s.finish().map_err(|e| e.to_string())
    }

    #[test]
    fn long_lines_repeating_the_text_are_folded_without_it_and_others_read_whole() {
        let mut s = ResponsesStream::new();
        s.line(r#"data: {"type":"response.output_item.added","output_index":0,"item":{"id":"msg_1","type":"message","content":[]}}"#).unwrap();
        s.line("").unwrap();
        s.line(r#"data: {"type":"response.output_text.delta","output_index":0,"delta":"Hello"}"#)
            .unwrap();
        s.line("").unwrap();
        let long = |line: &str, s: &mut ResponsesStream| {
            let (start, rest) = line.as_bytes().split_at(20);
            let mut rest = rest;
            s.long_line(start, &mut rest)
        };
        // The done event and the end repeat the text: skipped, the delta's text kept.
        let done = r#"data: {"type":"response.output_item.done","output_index":0,"item":{"id":"msg_1","type":"message","content":[{"type":"output_text","text":"Hello"}]}}"#;
        assert_eq!(long(done, &mut s), Ok(true));
        // A data line of white space before the event's blank line adds nothing.
        s.line("data:  ").unwrap();
        s.line("").unwrap();
        // A function call's done event is needed whole: the caller reads it again.
        let call = r#"data: {"type":"response.output_item.done","output_index":1,"item":{"type":"function_call","call_id":"c","name":"ls","arguments":"{}"}}"#;
        assert_eq!(long(call, &mut s), Ok(false));
        s.line(call).unwrap();
        s.line("").unwrap();
        let end = r#"data: {"type":"response.completed","response":{"status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"Hello"}]}],"usage":{"input_tokens":3}}}"#;
        assert_eq!(long(end, &mut s), Ok(true));
        // More data would join the event's JSON: refused at its blank line.
        s.line("data: more").unwrap();
        let e = s.line("").unwrap_err().to_string();
        assert!(e.contains("more data after the whole JSON"), "{e}");
        let f = s.finish().unwrap();
        assert_eq!(f.content.as_deref(), Some("Hello"));
        assert_eq!(f.calls.len(), 1);
        assert_eq!(f.usage, Some(serde_json::json!({"input_tokens":3})));
        // A message whose text is only in its long done event: read whole.
        let mut s = ResponsesStream::new();
        assert_eq!(long(done, &mut s), Ok(false));
    }

    const RS: &str =
        r#"{"id":"rs_1","type":"reasoning","summary":[],"encrypted_content":"gAAA/x+=="}"#;

    fn done_line() -> String {
        format!(
            r#"data: {{"type":"response.output_item.done","output_index":0,"item":{RS},"sequence_number":3}}"#
        )
    }

    #[test]
    fn reasoning_text_and_call_fold_with_usage() {
        let done = done_line();
        let f = fold(&[
            "event: response.created",
            r#"data: {"type":"response.created","response":{"id":"resp_1","status":"in_progress","output":[]}}"#,
            "",
            r#"data: {"type":"response.output_item.added","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}"#,
            &done,
            r#"data: {"type":"response.output_item.added","output_index":1,"item":{"id":"msg_1","type":"message","role":"assistant","content":[]}}"#,
            r#"data: {"type":"response.output_text.delta","item_id":"msg_1","output_index":1,"content_index":0,"delta":"Rea"}"#,
            "data: {\"type\":\"response.output_text.delta\",\"output_index\":1,\"delta\":\"ding.\"}\r",
            r#"data: {"type":"response.output_item.done","output_index":1,"item":{"id":"msg_1","type":"message","content":[{"type":"output_text","text":"Reading."}]}}"#,
            r#"data: {"type":"response.output_item.added","output_index":2,"item":{"id":"fc_1","type":"function_call","call_id":"call_1","name":"read","arguments":""}}"#,
            r#"data: {"type":"response.function_call_arguments.delta","output_index":2,"delta":"{\"pa"}"#,
            r#"data: {"type":"response.function_call_arguments.delta","output_index":2,"delta":"th\":1}"}"#,
            r#"data: {"type":"response.output_item.done","output_index":2,"item":{"id":"fc_1","type":"function_call","call_id":"call_1","name":"read","arguments":"{\"path\":1}"}}"#,
            r#"data: {"type":"response.completed","response":{"status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"Reading."}]}],"usage":{"input_tokens":9,"output_tokens":5,"output_tokens_details":{"reasoning_tokens":3},"total_tokens":14}}}"#,
        ])
        .unwrap();
        assert_eq!(f.reasoning, vec![RS.to_string()]);
        assert_eq!(
            f.content.as_deref(),
            Some("Reading."),
            "deltas, not repeated by done"
        );
        assert_eq!(
            f.calls,
            vec![FunctionCallItem {
                call_id: "call_1".into(),
                name: "read".into(),
                arguments: "{\"path\":1}".into()
            }]
        );
        assert_eq!(f.finish_reason, "tool_calls");
        assert_eq!(
            f.usage.unwrap()["output_tokens_details"]["reasoning_tokens"],
            3
        );
    }

    #[test]
    fn a_stream_without_output_index_is_placed_by_item_id_and_order() {
        // As llama.cpp's /v1/responses streams: `item_id`, no `output_index`.
        let f = fold(&[
            r#"data: {"type":"response.created","response":{"id":"resp_1","status":"in_progress","output":[]}}"#,
            r#"data: {"type":"response.output_item.added","item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}}"#,
            r#"data: {"type":"response.content_part.added","item_id":"msg_1","part":{"type":"output_text","text":""}}"#,
            r#"data: {"type":"response.output_text.delta","item_id":"msg_1","delta":"I did "}"#,
            r#"data: {"type":"response.output_item.added","item":{"id":"fc_1","type":"function_call","call_id":"call_1","name":"read","arguments":""}}"#,
            r#"data: {"type":"response.function_call_arguments.delta","item_id":"fc_1","delta":"{\"pa"}"#,
            r#"data: {"type":"response.output_text.delta","item_id":"msg_1","delta":"it."}"#,
            r#"data: {"type":"response.function_call_arguments.delta","item_id":"fc_1","delta":"th\":1}"}"#,
            r#"data: {"type":"response.output_item.done","item":{"id":"msg_1","type":"message","content":[{"type":"output_text","text":"I did it."}]}}"#,
            r#"data: {"type":"response.output_item.done","item":{"id":"fc_1","type":"function_call","call_id":"call_1","name":"read","arguments":"{\"path\":1}"}}"#,
            r#"data: {"type":"response.completed","response":{"id":"resp_1","model":"gpt-5-2025-08-07","status":"completed","output":[]}}"#,
        ])
        .unwrap();
        assert_eq!(f.content.as_deref(), Some("I did it."));
        assert_eq!(f.model.as_deref(), Some("gpt-5-2025-08-07"));
        assert_eq!(
            f.calls,
            vec![FunctionCallItem {
                call_id: "call_1".into(),
                name: "read".into(),
                arguments: "{\"path\":1}".into()
            }]
        );
        assert_eq!(f.finish_reason, "tool_calls");
    }

    #[test]
    fn a_cut_stream_and_errors_are_refused() {
        let done = done_line();
        let e = fold(&[&done]).unwrap_err();
        assert!(e.contains("cut off"), "{e}");
        assert!(fold(&[]).unwrap_err().contains("cut off"));
        let mut s = ResponsesStream::new();
        s.line(&done).unwrap();
        assert!(s.finish().unwrap_err().is_cut());
        let e = fold(&[r#"data: {"type":"response.output_text.delta","output_ind"#]).unwrap_err();
        assert!(
            e.contains("line 1") && e.contains("not a JSON event"),
            "{e}"
        );
        let e = fold(&[
            r#"data: {"type":"error","code":"rate_limit_exceeded","message":"slow down","param":null}"#,
        ])
        .unwrap_err();
        assert_eq!(
            e,
            "line 1: the provider sent an error: slow down (code: rate_limit_exceeded)"
        );
        let e = fold(&[
            r#"data: {"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"boom"}}}"#,
        ])
        .unwrap_err();
        assert!(e.contains("boom"), "{e}");
    }

    #[test]
    fn an_incomplete_end_is_length_and_a_bare_completed_is_read_whole() {
        let f = fold(&[
            r#"data: {"type":"response.output_text.delta","output_index":0,"delta":"Hal"}"#,
            r#"data: {"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"}}}"#,
        ])
        .unwrap();
        assert_eq!(
            (f.content.as_deref(), &*f.finish_reason),
            (Some("Hal"), "length")
        );
        let f = fold(&[
            r#"data: {"type":"response.completed","response":{"status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"Hi"}]}],"usage":{"input_tokens":1}}}"#,
        ])
        .unwrap();
        assert_eq!(f.content.as_deref(), Some("Hi"));
        assert_eq!(f.usage.unwrap()["input_tokens"], 1);
    }

    #[test]
    fn a_stream_ending_inside_an_event_is_cut() {
        // The last line has no `\n`: the end of the stream dispatches nothing, whatever it is.
        for last in [
            r#"data: {"type":"response.output_text.delta","output_ind"#,
            r#"data: {"type":"error","message":"quota"}"#,
        ] {
            let mut s = ResponsesStream::new();
            s.line(r#"data: {"type":"response.created","response":{"id":"r"}}"#)
                .unwrap();
            s.line("").unwrap();
            s.last_line(last).unwrap();
            let e = s.finish().unwrap_err();
            assert!(e.is_cut(), "{e}");
            assert!(e.to_string().contains("after 3 lines"), "{e}");
        }
    }

    #[test]
    fn a_transient_error_event_or_failed_response_is_sent_again() {
        let e = fold(&[r#"data: {"type":"error","code":"server_error","message":"try again"}"#])
            .unwrap_err();
        assert!(e.contains("try again"), "{e}");
        let mut s = ResponsesStream::new();
        s.line(r#"data: {"type":"error","code":"server_error","message":"x"}"#)
            .unwrap();
        assert!(s.line("").unwrap_err().sends_again());
        let mut s = ResponsesStream::new();
        s.line(r#"data: {"type":"response.failed","response":{"error":{"code":"rate_limit_exceeded","message":"slow"}}}"#)
            .unwrap();
        assert!(s.line("").unwrap_err().sends_again());
        let mut s = ResponsesStream::new();
        s.line(r#"data: {"type":"error","code":"invalid_prompt","message":"no"}"#)
            .unwrap();
        assert!(!s.line("").unwrap_err().sends_again());
    }

    #[test]
    fn an_event_whose_json_spans_several_data_lines_is_one_event() {
        let mut s = ResponsesStream::new();
        for l in [
            "event: response.output_text.delta",
            r#"data: {"type":"response.output_text.delta","#,
            r#"data: "output_index":0,"delta":"Hi"}"#,
            "",
            "event: response.completed",
            r#"data: {"type":"response.completed","response":{"status":"completed","#,
            r#"data: "usage":{"input_tokens":1}}}"#,
            "",
        ] {
            s.line(l).unwrap_or_else(|e| panic!("{l}: {e}"));
        }
        let f = s.finish().unwrap();
        assert_eq!(f.content.as_deref(), Some("Hi"));
    }
}
