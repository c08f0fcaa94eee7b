//! Chat messages (OpenAI shape, one per line of current.jsonl) → Anthropic turns of content
//! blocks, one message at a time.
//!
//! The mapping ([`TurnBuilder::push`]):
//! - `user` (and a `system` message after the first, which the API has no place for): a `text`
//!   block; the summary of an earlier compression is marked [`Origin::Summary`];
//! - `assistant`: with thinking on ([`TurnBuilder::replaying_reasoning`]), first its
//!   `thinking` / `redacted_thinking` reasoning items (provider `anthropic`), each written as
//!   the JSON text it was received as (an unsigned, cut or foreign item is left out:
//!   [`sendable_reasoning`]); then a `text` block for its content, then one `tool_use` block per
//!   tool call (`input` = the arguments parsed as a JSON object);
//!   a reply whose blocks came interleaved (thinking after a `tool_use` or text) is sent in
//!   its own order, from its order record ([`crate::block_order`]; the API refuses any change
//!   to the latest assistant turn's thinking blocks), texts split back into their blocks;
//! - `tool`: a `tool_result` block in a user turn, answering the `tool_use` of the same id;
//! - consecutive blocks of the same role form one turn (the sink merges them), so the turns
//!   alternate user / assistant as the API expects;
//! - text that is empty or only whitespace is left out (the API rejects such blocks).
//!
//! The API requires every `tool_use` to be answered by exactly one `tool_result` in the very next
//! user turn, before any text of that turn, and every `tool_result` to answer a `tool_use` of the
//! turn before. The host's invariants make a context keep this rule, but the request is built to
//! keep it whatever the file holds (each repair is counted in [`Repairs`]):
//! - a tool call still unanswered when a non-tool message (or the end) comes gets a
//!   `tool_result` with `is_error: true` and [`MISSING_RESULT`];
//! - a `tool` message that answers no waiting call (an orphan, or a second answer) is left out;
//! - tool-call ids are sent as the API accepts them (`[A-Za-z0-9_-]+`, unique in the request):
//!   other characters become `_`, a repeated id gets `_2`, `_3`, ... (the same way every time,
//!   so a cached prefix stays identical);
//! - a conversation whose first turn would be the assistant's starts with a user turn
//!   [`CONTINUED_TEXT`] (the API wants a user turn first).
//!
//! A tool message whose line says `"is_error": true` (the tool failed) becomes a `tool_result`
//! with `is_error: true`.
//!
//! Text and tool results are carried as the JSON text of the line ([`Str::Json`], from
//! [`crate::raw`]), so the request writer copies their bytes instead of decoding and
//! re-escaping them.
//!
//! Memory: the message being converted, the ids of the calls waiting for an answer, and 8 bytes
//! per tool call of the context (the hashes that keep ids unique).

use std::borrow::Cow;
use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::{self, Write};

use serde_json::{Map, Value};

use crate::block_order::{self, ORDER, Order, Slot};
use crate::compress::parse_summary_range;
use crate::raw::{RawMessage, RawReasoning, RawStr};

/// The role of a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `user`: the task's messages and tool results.
    User,
    /// `assistant`: the model's replies.
    Assistant,
}

impl Role {
    /// `user` or `assistant`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// A text of a block: the JSON string of a context line as written there, or a text the
/// builder made. Two are equal when their decoded texts are.
#[derive(Debug, Clone)]
pub enum Str<'a> {
    /// A JSON string value borrowed from the line (quotes and escapes included).
    Json(RawStr<'a>),
    /// A plain text.
    Text(Cow<'a, str>),
}

impl Str<'_> {
    /// The decoded text.
    pub fn text(&self) -> Cow<'_, str> {
        match self {
            Str::Json(raw) => raw.value(),
            Str::Text(t) => Cow::Borrowed(t),
        }
    }

    /// Whether the text is empty or only whitespace (`str::trim`), decided from the first
    /// bytes for almost every text.
    pub fn is_blank(&self) -> bool {
        match self {
            Str::Json(raw) => {
                let inner = &raw.json()[1..raw.json().len() - 1];
                // `\/\/...` decodes to `//...`: not blank. So a long string's placeholder
                // (`crate::long_line`) answers without being decoded.
                if inner.starts_with(crate::placeholder::MARKER) {
                    return false;
                }
                match inner
                    .iter()
                    .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
                {
                    None => true,
                    Some(b) if b.is_ascii() && *b != b'\\' => false,
                    Some(_) => raw.value().trim().is_empty(),
                }
            }
            Str::Text(t) => t.trim().is_empty(),
        }
    }

    /// Writes the text as a JSON string (the line's bytes for [`Str::Json`]).
    pub fn write_json(&self, out: &mut impl Write) -> io::Result<()> {
        match self {
            Str::Json(raw) => out.write_all(raw.json()),
            Str::Text(t) => serde_json::to_writer(out, t.as_ref()).map_err(io::Error::from),
        }
    }
}

impl Str<'_> {
    /// The same text, owning its bytes.
    pub fn into_static(&self) -> Str<'static> {
        match self {
            Str::Json(_) => Str::Text(Cow::Owned(self.text().into_owned())),
            Str::Text(t) => Str::Text(Cow::Owned(t.to_string())),
        }
    }
}

impl PartialEq for Str<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.text() == other.text()
    }
}

impl From<String> for Str<'_> {
    fn from(s: String) -> Self {
        Str::Text(Cow::Owned(s))
    }
}

impl<'a> From<&'a str> for Str<'a> {
    fn from(s: &'a str) -> Self {
        Str::Text(Cow::Borrowed(s))
    }
}

/// One content block of a turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Block<'a> {
    /// A `thinking` or `redacted_thinking` block: its JSON text exactly as the API sent it
    /// (signature included), written as it is.
    Reasoning(String),
    /// `{"type":"text","text"}`; never empty or only whitespace.
    Text(Str<'a>),
    /// `{"type":"tool_use","id","name","input"}`: a tool call; `input` is a JSON object.
    ToolUse {
        /// The call's id.
        id: String,
        /// The tool's name.
        name: Str<'a>,
        /// Its arguments, a JSON object.
        input: Value,
    },
    /// `{"type":"tool_result","tool_use_id","content"?,"is_error"?}`: a tool's result; `content`
    /// is left out of the JSON when it is empty or only whitespace.
    ToolResult {
        /// The id of the call it answers.
        tool_use_id: String,
        /// The result text.
        content: Str<'a>,
        /// The tool failed.
        is_error: bool,
    },
}

impl Block<'_> {
    /// The same block, owning its texts.
    pub fn into_static(&self) -> Block<'static> {
        match self {
            Block::Reasoning(json) => Block::Reasoning(json.clone()),
            Block::Text(t) => Block::Text(t.into_static()),
            Block::ToolUse { id, name, input } => Block::ToolUse {
                id: id.clone(),
                name: name.into_static(),
                input: input.clone(),
            },
            Block::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => Block::ToolResult {
                tool_use_id: tool_use_id.clone(),
                content: content.into_static(),
                is_error: *is_error,
            },
        }
    }
}

/// Where a block comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A message of the context.
    Message,
    /// The summary message of an earlier compression (the end of the stable prefix).
    Summary,
    /// Added by the builder to keep the API's rules (see the module doc).
    Repair,
}

/// Where a block was made, in terms that do not depend on what came before the message: the
/// caller's key of the message being pushed (e.g. its byte offset in the file; `None` for the
/// blocks [`TurnBuilder::finish`] adds), and the block's place among the blocks of that push
/// counted from the last (0 = the last). The blocks a message gives are the same whichever
/// line a run started at, as long as it started at a non-`tool` message (the repairs for
/// calls left waiting before, which only a longer run makes, come first), so a position found
/// reading only the end of a file names the same block in a run over the whole file
/// ([`super::cache`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// The key of the message (`None`: the end of the context).
    pub message: Option<u64>,
    /// Place among that message's blocks, from the last (0).
    pub from_end: u32,
}

/// Receives the blocks of a request in order; consecutive blocks of one role belong to one turn.
pub trait BlockSink {
    /// The next block, of a turn with `role`, made at `at`.
    fn block(
        &mut self,
        role: Role,
        block: &Block<'_>,
        origin: Origin,
        at: Position,
    ) -> io::Result<()>;
}

/// What the builder changed so that the request keeps the API's rules (all 0 for a context that
/// keeps the host's invariants).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Repairs {
    /// Tool calls without a result, answered with [`MISSING_RESULT`].
    pub missing_results: u64,
    /// `tool` messages that answer no waiting tool call, left out.
    pub dropped_results: u64,
    /// Tool-call ids sent differently (characters the API refuses, or used before).
    pub renamed_ids: u64,
    /// `system` messages after the first, sent as user text.
    pub late_system: u64,
    /// A [`CONTINUED_TEXT`] user turn put before a first assistant turn.
    pub leading_user_turn: u64,
    /// Reasoning items of assistant messages left out: not Anthropic's, unsigned or cut
    /// ([`sendable_reasoning`]).
    pub unsendable_reasoning: u64,
}

impl Repairs {
    /// Whether nothing was changed.
    pub fn is_empty(&self) -> bool {
        *self == Repairs::default()
    }

    /// The warning for a request built from `file` ([`crate::repairs::repairs_text`]):
    /// `<file>: changed in the request to keep the Anthropic API's rules: ...`.
    pub fn text(&self, file: &str) -> String {
        crate::repairs::repairs_text(
            file,
            "Anthropic API",
            &[
                (
                    self.missing_results,
                    "tool call(s) without a result answered as missing",
                ),
                (
                    self.dropped_results,
                    "tool result(s) answering no waiting call left out",
                ),
                (self.renamed_ids, "tool-call id(s) sent renamed"),
                (
                    self.late_system,
                    "later system message(s) sent as user text",
                ),
                (
                    self.leading_user_turn,
                    "user turn put before a first assistant turn",
                ),
                (
                    self.unsendable_reasoning,
                    "reasoning item(s) left out (not Anthropic's signed thinking)",
                ),
            ],
        )
    }
}

/// Content of the `tool_result` given to a tool call that has no result in the context.
pub const MISSING_RESULT: &str = "(no result was recorded for this tool call)";

/// Text of the user turn put before a conversation that would start with the assistant.
pub const CONTINUED_TEXT: &str = "(conversation continues)";

/// Turns chat messages into blocks, one message at a time (see the module doc).
#[derive(Debug, Default, Clone)]
pub struct TurnBuilder {
    /// Calls of the last assistant message(s) waiting for a result: (id in the context, id sent).
    pending: Vec<(String, String)>,
    /// Hashes of every `tool_use` id sent so far.
    used_ids: HashSet<u64>,
    /// Whether a block was sent yet.
    started: bool,
    /// Whether assistant messages' reasoning items are sent (thinking is on).
    reasoning: bool,
    repairs: Repairs,
}

/// The blocks of one push, in order.
type Made<'m> = Vec<(Role, Block<'m>, Origin)>;

/// The blocks of one message, made but not yet handed to a sink ([`TurnBuilder::made`]).
pub(crate) struct Pushed<'m>(Made<'m>);

impl Pushed<'_> {
    /// Hands the blocks to `sink`, keyed `key` ([`TurnBuilder::push`]).
    pub(crate) fn flush(self, key: u64, sink: &mut impl BlockSink) -> io::Result<()> {
        flush(self.0, Some(key), sink)
    }
}

impl TurnBuilder {
    /// A builder that has seen nothing.
    pub fn new() -> TurnBuilder {
        TurnBuilder::default()
    }

    /// A builder for a run that starts after messages it does not see (the blocks before are
    /// taken as sent: no [`CONTINUED_TEXT`] turn is put first).
    pub fn continuing() -> TurnBuilder {
        TurnBuilder {
            started: true,
            ..TurnBuilder::default()
        }
    }

    /// This builder, sending the reasoning items of assistant messages (`on`: the request has
    /// thinking on; the API wants the signed thinking of the last assistant turn back then, and
    /// ignores that of earlier turns) or leaving them out.
    pub fn replaying_reasoning(mut self, on: bool) -> TurnBuilder {
        self.reasoning = on;
        self
    }

    /// Converts `message`, found at 0-based `index` of the context (the top-level system prompt,
    /// taken by the caller, is index 0; `usize::MAX` when unknown), and hands its blocks to
    /// `sink` with positions keyed by `key` ([`Position`]).
    pub fn push(
        &mut self,
        index: usize,
        key: u64,
        message: &RawMessage<'_>,
        sink: &mut impl BlockSink,
    ) -> io::Result<()> {
        let mut made = Made::new();
        self.convert(index, message, &mut made);
        flush(made, Some(key), sink)
    }

    /// [`TurnBuilder::push`] without the sink: the blocks `message` makes, to hand on later
    /// ([`Pushed::flush`]) or drop (with a clone of the builder taken before, to undo).
    pub(crate) fn made<'m>(&mut self, index: usize, message: &RawMessage<'m>) -> Pushed<'m> {
        let mut made = Made::new();
        self.convert(index, message, &mut made);
        Pushed(made)
    }

    fn convert<'m>(&mut self, index: usize, message: &RawMessage<'m>, made: &mut Made<'m>) {
        if message.role.is("tool") {
            let id = message.tool_call_id.map(|i| i.value()).unwrap_or_default();
            let Some(i) = self.pending.iter().position(|(given, _)| *given == id) else {
                self.repairs.dropped_results += 1;
                return;
            };
            let (_, sent) = self.pending.remove(i);
            let block = Block::ToolResult {
                tool_use_id: sent,
                content: message.content.map(Str::Json).unwrap_or(Str::from("")),
                is_error: message.is_error,
            };
            self.emit(Role::User, block, Origin::Message, made);
            return;
        }
        self.answer_pending(made);
        if message.role.is("assistant") {
            self.convert_assistant(message, made);
            return;
        }
        if message.role.is("system") {
            self.repairs.late_system += 1;
        }
        let origin = if is_summary(index, message) {
            Origin::Summary
        } else {
            Origin::Message
        };
        if let Some(text) = non_blank(message.content) {
            self.emit(Role::User, Block::Text(text), origin, made);
        }
    }

    /// An assistant message's blocks: with thinking on, in the order its reply had them when
    /// the message records one ([`crate::block_order`]: interleaved thinking), else its
    /// reasoning items, its text, its tool calls.
    fn convert_assistant<'m>(&mut self, message: &RawMessage<'m>, made: &mut Made<'m>) {
        let items: Vec<&RawReasoning<'m>> = message
            .reasoning
            .iter()
            .filter(|r| !r.kind.is(ORDER))
            .collect();
        let slots = if self.reasoning {
            self.recorded_order(message, items.len())
        } else {
            None
        };
        let Some(slots) = slots else {
            if self.reasoning {
                for item in &items {
                    self.reasoning_block(item, made);
                }
            }
            if let Some(text) = non_blank(message.content) {
                self.emit(Role::Assistant, Block::Text(text), Origin::Message, made);
            }
            for call in &message.tool_calls {
                self.tool_use(call, made);
            }
            return;
        };
        let whole = message.content.map(|c| c.value());
        for slot in slots {
            match slot {
                Slot::Reasoning(i) => self.reasoning_block(items[i], made),
                Slot::ToolCall(i) => self.tool_use(&message.tool_calls[i], made),
                Slot::Text(range) => {
                    let Some(content) = message.content else {
                        continue;
                    };
                    let text = match &whole {
                        Some(w) if range.len() < w.len() => {
                            Str::from(block_order::piece(w, range).to_string())
                        }
                        _ => Str::Json(content),
                    };
                    if !text.is_blank() {
                        self.emit(Role::Assistant, Block::Text(text), Origin::Message, made);
                    }
                }
            }
        }
    }

    /// The places of `message`'s parts from its order record, when it has one that fits
    /// (`reasoning` items besides the record).
    fn recorded_order(&self, message: &RawMessage<'_>, reasoning: usize) -> Option<Vec<Slot>> {
        let record = message
            .reasoning
            .iter()
            .find(|r| r.kind.is(ORDER) && r.provider.is(super::PROVIDER))?;
        let order = Order::parse(&record.data.value())?;
        let content_len = message.content.map_or(0, |c| c.value().len());
        order.replay(reasoning, message.tool_calls.len(), content_len)
    }

    /// A reasoning item as a block, or counted as left out ([`sendable_reasoning`]).
    fn reasoning_block<'m>(&mut self, item: &RawReasoning<'m>, made: &mut Made<'m>) {
        match sendable_reasoning(item) {
            Some(json) => self.emit(
                Role::Assistant,
                Block::Reasoning(json),
                Origin::Message,
                made,
            ),
            None => self.repairs.unsendable_reasoning += 1,
        }
    }

    /// A tool call as a `tool_use` block (its id made valid and unique), waiting for its result.
    fn tool_use<'m>(&mut self, call: &crate::raw::RawToolCall<'m>, made: &mut Made<'m>) {
        let given = call.id.value().into_owned();
        let sent = self.unique_id(&given);
        let block = Block::ToolUse {
            id: sent.clone(),
            name: Str::Json(call.name),
            input: tool_input(&call.arguments.value()),
        };
        self.pending.push((given, sent));
        self.emit(Role::Assistant, block, Origin::Message, made);
    }

    /// Answers the calls still waiting (the context ended) and returns what was repaired.
    pub fn finish(mut self, sink: &mut impl BlockSink) -> io::Result<Repairs> {
        let mut made = Made::new();
        self.answer_pending(&mut made);
        flush(made, None, sink)?;
        Ok(self.repairs)
    }

    /// A [`MISSING_RESULT`] `tool_result` for every call still waiting.
    fn answer_pending(&mut self, made: &mut Made<'_>) {
        for (_, sent) in std::mem::take(&mut self.pending) {
            self.repairs.missing_results += 1;
            let block = Block::ToolResult {
                tool_use_id: sent,
                content: Str::from(MISSING_RESULT),
                is_error: true,
            };
            self.emit(Role::User, block, Origin::Repair, made);
        }
    }

    fn emit<'m>(&mut self, role: Role, block: Block<'m>, origin: Origin, made: &mut Made<'m>) {
        if !self.started && role == Role::Assistant {
            self.repairs.leading_user_turn += 1;
            made.push((
                Role::User,
                Block::Text(Str::from(CONTINUED_TEXT)),
                Origin::Repair,
            ));
        }
        self.started = true;
        made.push((role, block, origin));
    }

    /// The id to send for a call whose id in the context is `id`: [`valid_id`], then `_2`, `_3`,
    /// ... until it was not sent before in this request.
    fn unique_id(&mut self, id: &str) -> String {
        let base = valid_id(id);
        let mut sent = base.clone();
        let mut n = 1u64;
        while !self.used_ids.insert(hash(&sent)) {
            n += 1;
            sent = format!("{base}_{n}");
        }
        if sent != id {
            self.repairs.renamed_ids += 1;
        }
        sent
    }
}

/// Hands the blocks of one push to `sink`, with their positions.
fn flush(made: Made<'_>, message: Option<u64>, sink: &mut impl BlockSink) -> io::Result<()> {
    let n = made.len();
    for (i, (role, block, origin)) in made.into_iter().enumerate() {
        let at = Position {
            message,
            from_end: (n - 1 - i) as u32,
        };
        sink.block(role, &block, origin, at)?;
    }
    Ok(())
}

/// [`crate::compress::is_summary_line`] on a raw line: the user message at index 1 whose text
/// is a compression's summary.
fn is_summary(index: usize, message: &RawMessage<'_>) -> bool {
    index == 1
        && message.role.is("user")
        && message
            .content
            .is_some_and(|c| parse_summary_range(&c.value()).is_some())
}

/// The JSON text to send for a reasoning item, or `None` when it must not be sent: an item of
/// another provider or type than `anthropic` `thinking` / `redacted_thinking`, data that is not
/// a JSON object of that `type`, a `thinking` block without a `thinking` text or with no (or an
/// empty) `signature` (cut or never signed), a `redacted_thinking` block without its `data`.
/// The API checks the signature against the text, so the text is sent exactly as stored.
pub fn sendable_reasoning(item: &RawReasoning<'_>) -> Option<String> {
    if !item.provider.is("anthropic") {
        return None;
    }
    let kind = item.kind.value();
    let json = item.data.value().into_owned();
    let block: Value = serde_json::from_str(&json).ok()?;
    if block.get("type").and_then(Value::as_str) != Some(kind.as_ref()) {
        return None;
    }
    let non_empty = |field: &str| {
        block
            .get(field)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    };
    let ok = match kind.as_ref() {
        "thinking" => block.get("thinking").is_some_and(Value::is_string) && non_empty("signature"),
        "redacted_thinking" => non_empty("data"),
        _ => false,
    };
    ok.then_some(json)
}

/// `id` with every character outside `[A-Za-z0-9_-]` replaced by `_` (`call` for an empty id).
pub fn valid_id(id: &str) -> String {
    if id.is_empty() {
        return "call".to_string();
    }
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The `input` of a `tool_use`: the arguments text parsed as a JSON object; `{}` when empty; an
/// object `{"arguments": ...}` holding the value (or, when it is not JSON, the text) otherwise.
pub fn tool_input(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return Value::Object(Map::new());
    }
    let value = match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(map)) => return Value::Object(map),
        Ok(other) => other,
        Err(_) => Value::String(arguments.to_string()),
    };
    let mut map = Map::new();
    map.insert("arguments".to_string(), value);
    Value::Object(map)
}

/// `content` unless it is missing, empty or only whitespace.
fn non_blank(content: Option<RawStr<'_>>) -> Option<Str<'_>> {
    content.map(Str::Json).filter(|c| !c.is_blank())
}

fn hash(id: &str) -> u64 {
    let mut h = DefaultHasher::new();
    id.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compress::summary_message;
    use crate::{ChatMessage, ToolCall};
    use serde_json::json;

    #[test]
    fn the_repairs_warning_names_each_change_made() {
        let r = Repairs {
            missing_results: 1,
            renamed_ids: 2,
            unsendable_reasoning: 3,
            ..Repairs::default()
        };
        assert_eq!(
            r.text("current.jsonl"),
            "current.jsonl: changed in the request to keep the Anthropic API's rules: \
             1 tool call(s) without a result answered as missing, 2 tool-call id(s) sent renamed, \
             3 reasoning item(s) left out (not Anthropic's signed thinking)"
        );
    }

    /// Records (role, block, origin).
    #[derive(Default)]
    struct Record(Vec<(Role, Block<'static>, Origin)>);

    impl BlockSink for Record {
        fn block(
            &mut self,
            role: Role,
            block: &Block<'_>,
            origin: Origin,
            _at: Position,
        ) -> io::Result<()> {
            self.0.push((role, block.into_static(), origin));
            Ok(())
        }
    }

    fn build(messages: Vec<ChatMessage>) -> (Vec<(Role, Block<'static>, Origin)>, Repairs) {
        let mut sink = Record::default();
        let mut b = TurnBuilder::new();
        for (i, m) in messages.into_iter().enumerate() {
            let line = serde_json::to_string(&m).unwrap();
            let raw = crate::raw::parse_line(line.as_bytes()).unwrap();
            b.push(i + 1, i as u64, &raw, &mut sink).unwrap();
        }
        let repairs = b.finish(&mut sink).unwrap();
        (sink.0, repairs)
    }

    fn text(s: &str) -> Block<'static> {
        Block::Text(Str::from(s.to_string()))
    }

    fn result(id: &str, content: &str) -> Block<'static> {
        Block::ToolResult {
            tool_use_id: id.into(),
            content: Str::from(content.to_string()),
            is_error: false,
        }
    }

    #[test]
    fn parallel_calls_and_their_results() {
        let calls = vec![
            ToolCall::new("call_a", "read", r#"{"path":"a"}"#),
            ToolCall::new("call_b", "list", ""),
        ];
        let (blocks, repairs) = build(vec![
            ChatMessage::text("user", "go"),
            ChatMessage {
                content: Some("Reading.".into()),
                ..ChatMessage::assistant_calls(calls.clone())
            },
            ChatMessage::tool_result(&calls[1], "B"),
            ChatMessage::tool_result(&calls[0], "A"),
            ChatMessage::text("user", "thanks"),
        ]);
        assert!(repairs.is_empty(), "{repairs:?}");
        let roles: Vec<Role> = blocks.iter().map(|b| b.0).collect();
        use Role::*;
        assert_eq!(
            roles,
            [User, Assistant, Assistant, Assistant, User, User, User]
        );
        assert_eq!(blocks[1].1, text("Reading."));
        assert_eq!(
            blocks[2].1,
            Block::ToolUse {
                id: "call_a".into(),
                name: Str::from("read"),
                input: json!({"path": "a"})
            }
        );
        assert_eq!(
            blocks[3].1,
            Block::ToolUse {
                id: "call_b".into(),
                name: Str::from("list"),
                input: json!({})
            }
        );
        assert_eq!(blocks[4].1, result("call_b", "B"));
        assert_eq!(blocks[5].1, result("call_a", "A"));
        assert_eq!(blocks[6].1, text("thanks"));
    }

    #[test]
    fn broken_pairings_are_repaired_and_counted() {
        let a = ToolCall::new("call_A", "read", "{}");
        let x = ToolCall::new("call_X", "read", "{}");
        let (blocks, repairs) = build(vec![
            ChatMessage::text("user", "go"),
            ChatMessage::assistant_calls(vec![a.clone()]),
            ChatMessage::tool_result(&a, "first"),
            ChatMessage::tool_result(&a, "second answer"),
            ChatMessage::tool_result(&ToolCall::new("call_Z", "read", "{}"), "orphan"),
            ChatMessage::assistant_calls(vec![x.clone()]),
            ChatMessage::text("user", "never mind"),
            ChatMessage::assistant_calls(vec![ToolCall::new("call_Y", "read", "{}")]),
        ]);
        assert_eq!(
            repairs,
            Repairs {
                missing_results: 2,
                dropped_results: 2,
                ..Repairs::default()
            }
        );
        let missing = |id: &str| Block::ToolResult {
            tool_use_id: id.into(),
            content: Str::from(MISSING_RESULT),
            is_error: true,
        };
        let kinds: Vec<(Role, Block<'static>)> =
            blocks.into_iter().map(|(r, b, _)| (r, b)).collect();
        assert_eq!(kinds[2], (Role::User, result("call_A", "first")));
        assert_eq!(kinds[4], (Role::User, missing("call_X")));
        assert_eq!(kinds[5], (Role::User, text("never mind")));
        assert_eq!(kinds[7], (Role::User, missing("call_Y")));
        assert_eq!(kinds.len(), 8);
    }

    #[test]
    fn ids_are_made_valid_and_unique_the_same_way_every_time() {
        let c1 = ToolCall::new("call_1", "f", "{}");
        let odd = ToolCall::new("fc.9/x", "f", "{}");
        let messages = vec![
            ChatMessage::text("user", "go"),
            ChatMessage::assistant_calls(vec![c1.clone(), odd.clone()]),
            ChatMessage::tool_result(&odd, "o"),
            ChatMessage::tool_result(&c1, "1"),
            // A second step reusing `call_1` (as a context written with Ollama has).
            ChatMessage::assistant_calls(vec![c1.clone()]),
            ChatMessage::tool_result(&c1, "again"),
        ];
        let (blocks, repairs) = build(messages.clone());
        let ids: Vec<String> = blocks
            .iter()
            .filter_map(|(_, b, _)| match b {
                Block::ToolUse { id, .. } => Some(id.clone()),
                Block::ToolResult { tool_use_id, .. } => Some(tool_use_id.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            ids,
            [
                "call_1", "fc_9_x", "fc_9_x", "call_1", "call_1_2", "call_1_2"
            ]
        );
        assert_eq!(repairs.renamed_ids, 2);
        assert_eq!(build(messages).0, blocks);
    }

    #[test]
    fn summary_blank_text_late_system_and_leading_assistant() {
        let (blocks, repairs) = build(vec![
            summary_message(2, 9, "did things"),
            ChatMessage::text("assistant", "  \n"),
            ChatMessage::text("system", "be brief"),
            ChatMessage::text("user", ""),
        ]);
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].2, Origin::Summary);
        assert_eq!(blocks[1], (Role::User, text("be brief"), Origin::Message));
        assert_eq!(repairs.late_system, 1);

        let (blocks, repairs) = build(vec![ChatMessage::text("assistant", "hello")]);
        assert_eq!(repairs.leading_user_turn, 1);
        assert_eq!(
            blocks[0],
            (Role::User, text(CONTINUED_TEXT), Origin::Repair)
        );
        assert_eq!(blocks[1].0, Role::Assistant);
    }

    #[test]
    fn a_failed_tool_call_is_an_error_result() {
        let call = ToolCall::new("call_1", "read", "{}");
        let (blocks, _) = build(vec![
            ChatMessage::text("user", "go"),
            ChatMessage::assistant_calls(vec![call.clone()]),
            ChatMessage {
                is_error: true,
                ..ChatMessage::tool_result(&call, "Error: no such file")
            },
        ]);
        assert_eq!(
            blocks[2].1,
            Block::ToolResult {
                tool_use_id: "call_1".into(),
                content: Str::from("Error: no such file"),
                is_error: true,
            }
        );
    }

    #[test]
    fn blank_json_texts_are_found_from_their_first_bytes() {
        for (line, blank) in [
            (r#"{"role":"user","content":"  \n\t "}"#, true),
            (r#"{"role":"user","content":""}"#, true),
            (r#"{"role":"user","content":" \u00a0\u2003"}"#, true),
            (r#"{"role":"user","content":"\u3000\n"}"#, true),
            (r#"{"role":"user","content":"  x"}"#, false),
            (r#"{"role":"user","content":"\n\"q\""}"#, false),
            (r#"{"role":"user","content":" é"}"#, false),
        ] {
            let m = crate::raw::parse_line(line.as_bytes()).unwrap();
            assert_eq!(Str::Json(m.content.unwrap()).is_blank(), blank, "{line}");
        }
    }

    #[test]
    fn tool_input_is_always_an_object() {
        assert_eq!(tool_input(r#"{"a":1}"#), json!({"a": 1}));
        assert_eq!(tool_input("  "), json!({}));
        assert_eq!(tool_input("[1,2]"), json!({"arguments": [1, 2]}));
        assert_eq!(tool_input("{broken"), json!({"arguments": "{broken"}));
    }
}
