//! The Responses API request body, streamed from a messages file one line at a time:
//!
//! `{"model","input":[...],"instructions"?,"store":false,"include"?:["reasoning.encrypted_content"],
//! "stream","max_output_tokens"?,"temperature"?,"reasoning"?:{"effort"},"tools"?}`
//!
//! `include` asks for the reasoning items' `encrypted_content`, without which a stateless
//! request cannot send them back; OpenAI refuses it for models without reasoning ("Encrypted
//! content is not supported with this model", e.g. gpt-4o), so it is sent only for a reasoning
//! model ([`wants_encrypted_reasoning`]: a reasoning effort is set, or the model's name is one
//! of OpenAI's reasoning families).
//!
//! Each chat message becomes input items:
//! - the system messages before the first other message: `instructions` (joined by a blank
//!   line); a later one (e.g. a compaction summary): `{"type":"message","role":"system",
//!   "content"}`;
//! - user: `{"type":"message","role":"user","content"}`;
//! - assistant: its reasoning items of this provider ([`super::PROVIDER`], type
//!   [`super::REASONING`]) that carry `encrypted_content` written byte for byte as received,
//!   then its text as
//!   `{"type":"message","role":"assistant","content"}` (when non-empty), then one
//!   `{"type":"function_call","call_id","name","arguments"}` per tool call — the order the
//!   model produced them in (reasoning first), which the API needs to link a function call to
//!   its reasoning; a reply whose items came interleaved (`[rs_a, fc_a, rs_b, fc_b]`) is sent
//!   in its own order, from its order record ([`crate::block_order`]); reasoning of other
//!   providers (Anthropic thinking, `reasoning_content`) is not sent;
//! - tool: `{"type":"function_call_output","call_id","output"}` (a failed call's error text is
//!   its output: the API has no error flag). A result whose call is not in the input (the API
//!   refuses it: "No tool call found for function call output") is sent as user text instead.

use std::collections::HashSet;
use std::fmt;
use std::io::{self, Read, Seek, Write};

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::block_order::{self, ORDER, Order, Slot};
use crate::jsonl::{self, BlockLineReader, JsonlError, NextLineAt};
use crate::long_line::{self, LIMITS, Limits, LongLine, SpliceError};
use crate::raw::{self, RawMessage, RawReasoning};

/// What the request carries besides the messages.
#[derive(Debug, Clone, Default)]
pub struct RequestSettings<'a> {
    /// `model`.
    pub model: &'a str,
    /// `stream`: ask for server-sent events.
    pub stream: bool,
    /// `max_output_tokens` (reasoning tokens count against it), if set.
    pub max_output_tokens: Option<u32>,
    /// `temperature`, if set (reasoning models refuse it; leave `llm.temperature` unset for
    /// them).
    pub temperature: Option<f32>,
    /// `reasoning.effort` (`minimal`, `low`, `medium`, `high`), if set.
    pub effort: Option<&'a str>,
    /// The tools file's definitions (OpenAI chat shape or already Responses shape).
    pub tools: &'a [Value],
}

/// What [`write_request`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    /// Chat messages read.
    pub messages: u64,
    /// Input items written.
    pub items: u64,
    /// Changes made to keep the API's rules ([`Repairs`]).
    pub repairs: Repairs,
}

/// Changes made to the conversation to keep the API's rules, counted for a warning.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Repairs {
    /// Tool results whose call is not in the input, sent as user text.
    pub orphan_results: u64,
    /// Reasoning items of this provider that are not a JSON object of type `reasoning` with
    /// `encrypted_content` (a stateless request cannot refer to one without), left out.
    pub bad_reasoning: u64,
}

impl Repairs {
    /// Whether nothing was changed.
    pub fn is_empty(&self) -> bool {
        *self == Repairs::default()
    }

    /// The warning for a request built from `file` ([`crate::repairs::repairs_text`]):
    /// `<file>: changed in the request to keep the Responses API's rules: ...`.
    pub fn text(&self, file: &str) -> String {
        crate::repairs::repairs_text(
            file,
            "Responses API",
            &[
                (
                    self.orphan_results,
                    "tool result(s) whose call is not in the input sent as user text",
                ),
                (
                    self.bad_reasoning,
                    "reasoning item(s) that are not a `reasoning` object left out",
                ),
            ],
        )
    }
}

/// Why [`write_request`] failed.
#[derive(Debug)]
pub enum BodyError {
    /// A line of the messages file could not be read or is not a chat message.
    Read(JsonlError),
    /// Writing the body failed.
    Write(io::Error),
    /// The file has no message other than system messages (the API needs input).
    NoMessages,
    /// A setting is invalid (the text names it).
    Setting(String),
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::Read(e) => write!(f, "{e}"),
            BodyError::Write(e) => write!(f, "{e}"),
            BodyError::NoMessages => f.write_str("holds no user, assistant or tool message"),
            BodyError::Setting(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for BodyError {}

impl From<io::Error> for BodyError {
    fn from(e: io::Error) -> Self {
        BodyError::Write(e)
    }
}

/// A tool definition in the Responses shape: OpenAI chat's `{"type":"function","function":
/// {"name","description"?,"parameters"?,"strict"?}}` becomes `{"type":"function","name",
/// "description"?,"parameters","strict"}` (both required by the API's `FunctionTool`); a
/// definition without `function` (already in this shape, or a built-in tool) is kept as is.
///
/// `strict` is `false` unless the definition says `true`: the Responses API treats a function
/// tool without it as strict (OpenAI's function-calling guide), which makes every optional
/// parameter required. A definition asking for strict gets a strict-compatible schema
/// ([`strict_schema`]). A missing `parameters` is an empty object schema.
pub fn responses_tool(tool: &Value) -> Value {
    let Some(function) = tool.get("function").and_then(Value::as_object) else {
        return tool.clone();
    };
    let mut out = Map::new();
    out.insert("type".into(), json!("function"));
    for key in ["name", "description"] {
        if let Some(v) = function.get(key).filter(|v| !v.is_null()) {
            out.insert(key.into(), v.clone());
        }
    }
    let strict = function.get("strict") == Some(&Value::Bool(true));
    let mut parameters = function
        .get("parameters")
        .filter(|p| p.is_object())
        .cloned()
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    if strict {
        strict_schema(&mut parameters);
    }
    out.insert("parameters".into(), parameters);
    out.insert("strict".into(), Value::Bool(strict));
    Value::Object(out)
}

/// Makes a JSON schema strict-compatible as OpenAI's structured outputs require: every object
/// lists all its properties in `required` and has `additionalProperties: false`, and a property
/// that was optional accepts `null` instead (its `type` gets `"null"`, or it becomes
/// `anyOf: [schema, {"type":"null"}]`); applied to nested properties, `items`, `anyOf`,
/// `$defs` / `definitions`.
pub fn strict_schema(schema: &mut Value) {
    let Some(map) = schema.as_object_mut() else {
        return;
    };
    let required: Vec<String> = match map.get("required") {
        Some(Value::Array(r)) => r
            .iter()
            .filter_map(|v| v.as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    };
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        let mut all = Vec::with_capacity(props.len());
        for (name, prop) in props.iter_mut() {
            strict_schema(prop);
            if !required.contains(name) {
                nullable(prop);
            }
            all.push(name.clone());
        }
        all.sort();
        let all = all.into_iter().map(Value::String).collect();
        map.insert("required".into(), Value::Array(all));
        map.insert("additionalProperties".into(), Value::Bool(false));
    } else if map.get("type") == Some(&json!("object")) {
        map.insert("additionalProperties".into(), Value::Bool(false));
    }
    if let Some(items) = map.get_mut("items") {
        strict_schema(items);
    }
    for key in ["anyOf", "$defs", "definitions"] {
        match map.get_mut(key) {
            Some(Value::Array(list)) => list.iter_mut().for_each(strict_schema),
            Some(Value::Object(defs)) => defs.values_mut().for_each(strict_schema),
            _ => {}
        }
    }
}

/// `schema` also accepting `null`.
fn nullable(schema: &mut Value) {
    let Some(map) = schema.as_object_mut() else {
        return;
    };
    match map.get_mut("type") {
        Some(Value::String(t)) if t != "null" => {
            let t = t.clone();
            map.insert("type".into(), json!([t, "null"]));
        }
        Some(Value::Array(types)) => {
            if !types.contains(&json!("null")) {
                types.push(json!("null"));
            }
        }
        Some(_) => {}
        None => {
            let inner = std::mem::take(map);
            map.insert(
                "anyOf".into(),
                json!([Value::Object(inner), {"type": "null"}]),
            );
        }
    }
}

/// The `type` of a reasoning item and whether it has `encrypted_content`, to check it before
/// it is sent.
#[derive(Deserialize)]
struct ItemType {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    encrypted_content: Option<serde::de::IgnoredAny>,
}

/// Whether to ask for `reasoning.encrypted_content`: a reasoning effort is set, or `model` is
/// one of OpenAI's reasoning families (`o1`, `o3`, `o4`…, `gpt-5`… except the `-chat` models,
/// `codex` models).
pub fn wants_encrypted_reasoning(model: &str, effort: Option<&str>) -> bool {
    if effort.is_some() {
        return true;
    }
    let m = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    let o_series = m.len() >= 2 && m.starts_with('o') && m.as_bytes()[1].is_ascii_digit();
    (o_series || m.starts_with("gpt-5") || m.contains("codex")) && !m.contains("-chat")
}

/// Writes the body (module doc) for the chat messages of `messages` (the file `file`) to
/// `out`. Errors: [`BodyError::Read`] naming file and line, [`BodyError::NoMessages`],
/// [`BodyError::Setting`] for a temperature that is not a finite number ≥ 0,
/// [`BodyError::Write`].
///
/// Memory: one block of the file and one line; a line longer than the block (a 20 MB reply)
/// is not held when its items can be made from its compact copy ([`crate::long_line`]: its
/// texts, arguments and ids are copied from the file in 64 KiB reads, `messages` is seeked
/// for them); it is read whole when a long text of it is decoded (a leading system message,
/// a reasoning item, an orphan result, a text split by an order record).
pub fn write_request<R: Read + Seek, W: Write>(
    messages: R,
    file: &str,
    out: &mut W,
    settings: &RequestSettings<'_>,
) -> Result<Written, BodyError> {
    write_request_limited(messages, file, out, settings, LIMITS)
}

/// [`write_request`] reading lines longer than `limits.line` as long lines
/// ([`crate::long_line`]; blocks of that size), for tests with small ones.
pub(crate) fn write_request_limited<R: Read + Seek, W: Write>(
    messages: R,
    file: &str,
    out: &mut W,
    settings: &RequestSettings<'_>,
    limits: Limits,
) -> Result<Written, BodyError> {
    if let Some(t) = settings.temperature.filter(|t| !t.is_finite() || *t < 0.0) {
        return Err(BodyError::Setting(format!(
            "temperature {t} is not a finite number ≥ 0"
        )));
    }
    out.write_all(b"{\"model\":")?;
    json_to(out, &settings.model)?;
    out.write_all(b",\"input\":[")?;
    let mut lines =
        BlockLineReader::new(messages, file).block_bytes(limits.line.min(jsonl::BLOCK_BYTES));
    let mut instructions: Option<String> = None;
    let mut written = Written::default();
    let mut calls: HashSet<String> = HashSet::new();
    loop {
        let whole: Vec<u8>;
        let (line, bytes) = match lines
            .next_bounded_at(limits.line)
            .map_err(BodyError::Read)?
        {
            None => break,
            Some(NextLineAt::Line((line, _, bytes))) => (line, bytes),
            Some(NextLineAt::Long { line, offset }) => {
                let long = long_line::scan_long(&mut lines, (line, offset), limits)
                    .map_err(BodyError::Read)?;
                let leading_system = written.items == 0;
                if long_items(
                    &long,
                    leading_system,
                    &mut lines,
                    out,
                    &mut written,
                    &mut calls,
                )? {
                    continue;
                }
                whole = long.read_whole(lines.reader_mut()).map_err(|e| {
                    BodyError::Read(JsonlError::Io {
                        file: file.to_string(),
                        line: Some(line),
                        message: e.to_string(),
                    })
                })?;
                if jsonl::is_blank(&whole) {
                    continue;
                }
                (line, &whole[..])
            }
        };
        let m = raw::parse_line(bytes).map_err(|message| {
            BodyError::Read(JsonlError::Invalid {
                file: file.to_string(),
                line,
                message,
            })
        })?;
        written.messages += 1;
        if m.role.is("system") && written.items == 0 {
            let text = m.content.map(|c| c.value()).unwrap_or_default();
            match &mut instructions {
                Some(i) => {
                    i.push_str("\n\n");
                    i.push_str(&text);
                }
                None => instructions = Some(text.into_owned()),
            }
            continue;
        }
        write_items(out, &m, &mut written, &mut calls)?;
    }
    if written.items == 0 {
        return Err(BodyError::NoMessages);
    }
    out.write_all(b"]")?;
    if let Some(i) = &instructions {
        out.write_all(b",\"instructions\":")?;
        json_to(out, i)?;
    }
    out.write_all(b",\"store\":false")?;
    if wants_encrypted_reasoning(settings.model, settings.effort) {
        out.write_all(b",\"include\":[\"reasoning.encrypted_content\"]")?;
    }
    out.write_all(if settings.stream {
        b",\"stream\":true"
    } else {
        b",\"stream\":false"
    })?;
    if let Some(n) = settings.max_output_tokens {
        write!(out, ",\"max_output_tokens\":{n}")?;
    }
    if let Some(t) = settings.temperature {
        out.write_all(b",\"temperature\":")?;
        json_to(out, &t)?;
    }
    if let Some(effort) = settings.effort {
        out.write_all(b",\"reasoning\":")?;
        json_to(out, &json!({ "effort": effort }))?;
    }
    if !settings.tools.is_empty() {
        let tools: Vec<Value> = settings.tools.iter().map(responses_tool).collect();
        out.write_all(b",\"tools\":")?;
        json_to(out, &tools)?;
    }
    out.write_all(b"}")?;
    Ok(written)
}

/// The items of the long line `long` made from its compact copy, each long string copied
/// from the file ([`LongLine::splice`]); `false`, nothing written or changed, when the line
/// must be read whole (`leading_system`: a system message there would be decoded into
/// `instructions`).
fn long_items<R: Read + Seek, W: Write>(
    long: &LongLine,
    leading_system: bool,
    lines: &mut BlockLineReader<R>,
    out: &mut W,
    written: &mut Written,
    calls: &mut HashSet<String>,
) -> Result<bool, BodyError> {
    let Some(compact) = long.compact() else {
        return Ok(false);
    };
    let Ok(m) = raw::parse_line(compact) else {
        return Ok(false);
    };
    if leading_system && m.role.is("system") {
        return Ok(false);
    }
    let saved = (written.clone(), calls.clone());
    long_line::clear_decoded();
    let mut piece = Vec::new();
    written.messages += 1;
    write_items(&mut piece, &m, written, calls)?;
    let done = !long_line::take_decoded()
        && long
            .splice(&piece, false, lines.reader_mut(), out)
            .map_err(|e| match e {
                SpliceError::Write(e) => BodyError::Write(e),
                SpliceError::Read(e) => BodyError::Read(JsonlError::Io {
                    file: lines.file().to_string(),
                    line: Some(long.line),
                    message: e.to_string(),
                }),
            })?;
    if !done {
        (*written, *calls) = saved;
    }
    Ok(done)
}

/// Writes the input items of one (non-leading-system) message, each preceded by `,` but the
/// first of the array. Texts, ids, names and arguments are copied as the JSON the line holds
/// ([`crate::raw`]); only a reasoning item's data, an orphan result and a text split back into
/// its blocks are decoded.
fn write_items<W: Write>(
    out: &mut W,
    m: &RawMessage<'_>,
    written: &mut Written,
    calls: &mut HashSet<String>,
) -> Result<(), BodyError> {
    let item = |out: &mut W, written: &mut Written| -> io::Result<()> {
        if written.items > 0 {
            out.write_all(b",")?;
        }
        written.items += 1;
        Ok(())
    };
    let content: &[u8] = m.content.map_or(b"\"\"", |c| c.json());
    if m.role.is("assistant") {
        let items: Vec<&RawReasoning<'_>> =
            m.reasoning.iter().filter(|r| !r.kind.is(ORDER)).collect();
        let recorded = m
            .reasoning
            .iter()
            .find(|r| r.kind.is(ORDER) && r.provider.is(super::PROVIDER))
            .and_then(|r| Order::parse(&r.data.value()));
        // The decoded text, only when a record may split it.
        let text = recorded.as_ref().map(|_| {
            m.content
                .map(|c| c.value().into_owned())
                .unwrap_or_default()
        });
        let text_len = text.as_ref().map_or(0, String::len);
        let slots = recorded
            .and_then(|o| o.replay(items.len(), m.tool_calls.len(), text_len))
            .unwrap_or_else(|| {
                // Reasoning first, then the text, then the calls.
                (0..items.len())
                    .map(Slot::Reasoning)
                    .chain(std::iter::once(Slot::Text(0..usize::MAX)))
                    .chain((0..m.tool_calls.len()).map(Slot::ToolCall))
                    .collect()
            });
        for slot in slots {
            match slot {
                Slot::Reasoning(i) => {
                    let r = items[i];
                    if !r.provider.is(super::PROVIDER) || !r.kind.is(super::REASONING) {
                        continue;
                    }
                    let data = r.data.value();
                    let ok = serde_json::from_str::<ItemType>(&data)
                        .is_ok_and(|t| t.kind == super::REASONING && t.encrypted_content.is_some());
                    if !ok {
                        written.repairs.bad_reasoning += 1;
                        continue;
                    }
                    item(out, written)?;
                    out.write_all(data.as_bytes())?;
                }
                Slot::Text(range) => match &text {
                    Some(whole) if range.len() < whole.len() => {
                        let piece = block_order::piece(whole, range);
                        if !piece.is_empty() {
                            item(out, written)?;
                            out.write_all(
                                b"{\"type\":\"message\",\"role\":\"assistant\",\"content\":",
                            )?;
                            json_to(out, &piece)?;
                            out.write_all(b"}")?;
                        }
                    }
                    _ => {
                        if content != b"\"\"" {
                            item(out, written)?;
                            out.write_all(
                                b"{\"type\":\"message\",\"role\":\"assistant\",\"content\":",
                            )?;
                            out.write_all(content)?;
                            out.write_all(b"}")?;
                        }
                    }
                },
                Slot::ToolCall(i) => {
                    let c = &m.tool_calls[i];
                    item(out, written)?;
                    out.write_all(b"{\"type\":\"function_call\",\"call_id\":")?;
                    out.write_all(c.id.json())?;
                    out.write_all(b",\"name\":")?;
                    out.write_all(c.name.json())?;
                    out.write_all(b",\"arguments\":")?;
                    out.write_all(c.arguments.json())?;
                    out.write_all(b"}")?;
                    calls.insert(c.id.value().into_owned());
                }
            }
        }
        return Ok(());
    }
    if m.role.is("tool") {
        let id = m.tool_call_id.map(|i| i.value()).unwrap_or_default();
        item(out, written)?;
        if calls.contains(id.as_ref()) {
            out.write_all(b"{\"type\":\"function_call_output\",\"call_id\":")?;
            json_to(out, &id)?;
            out.write_all(b",\"output\":")?;
            out.write_all(content)?;
            out.write_all(b"}")?;
        } else {
            written.repairs.orphan_results += 1;
            let content = m.content.map(|c| c.value()).unwrap_or_default();
            let text = format!("Result of tool call {id}:\n{content}");
            out.write_all(b"{\"type\":\"message\",\"role\":\"user\",\"content\":")?;
            json_to(out, &text)?;
            out.write_all(b"}")?;
        }
        return Ok(());
    }
    // `user`, a later `system`; any other role is sent as the user's.
    let role: &[u8] = if m.role.is("system") {
        b"system"
    } else {
        b"user"
    };
    item(out, written)?;
    out.write_all(b"{\"type\":\"message\",\"role\":\"")?;
    out.write_all(role)?;
    out.write_all(b"\",\"content\":")?;
    out.write_all(content)?;
    out.write_all(b"}")?;
    Ok(())
}

fn json_to<W: Write>(out: &mut W, value: &impl serde::Serialize) -> io::Result<()> {
    serde_json::to_writer(out, value).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ChatMessage, ReasoningItem, ToolCall};

    #[test]
    fn the_repairs_warning_names_each_change_made() {
        let r = Repairs {
            orphan_results: 0,
            bad_reasoning: 2,
        };
        assert_eq!(
            r.text("current.jsonl"),
            "current.jsonl: changed in the request to keep the Responses API's rules: \
             2 reasoning item(s) that are not a `reasoning` object left out"
        );
    }

    fn body(lines: &[ChatMessage], settings: &RequestSettings<'_>) -> (Value, String, Written) {
        let text: String = lines
            .iter()
            .map(|m| serde_json::to_string(m).unwrap() + "\n")
            .collect();
        let mut out = Vec::new();
        let w = write_request(io::Cursor::new(text), "current.jsonl", &mut out, settings).unwrap();
        let raw = String::from_utf8(out).unwrap();
        (serde_json::from_str(&raw).unwrap(), raw, w)
    }

    const ITEM: &str =
        r#"{"id":"rs_1","type":"reasoning","summary":[],"encrypted_content":"gAAA+/=="}"#;

    #[test]
    fn messages_calls_results_and_reasoning_become_input_items_in_order() {
        let mut assistant =
            ChatMessage::assistant_calls(vec![ToolCall::new("call_a", "read", r#"{"path":"a"}"#)]);
        assistant.content = Some("Let me look.".into());
        assistant.reasoning = vec![
            ReasoningItem {
                provider: "openai-responses".into(),
                kind: "reasoning".into(),
                data: ITEM.into(),
            },
            ReasoningItem {
                provider: "openai-chat".into(),
                kind: "reasoning_content".into(),
                data: "\"thoughts\"".into(),
            },
        ];
        let call = assistant.calls()[0].clone();
        let lines = [
            ChatMessage::text("system", "be brief"),
            ChatMessage::text("system", "use tools"),
            ChatMessage::text("user", "go"),
            assistant,
            ChatMessage::tool_result(&call, "A"),
            ChatMessage::text("system", "[summary]"),
        ];
        let tools = [
            json!({"type":"function","function":{"name":"read","description":"d",
            "parameters":{"type":"object"}}}),
        ];
        let settings = RequestSettings {
            model: "o4-mini",
            stream: true,
            max_output_tokens: Some(500),
            temperature: None,
            effort: Some("high"),
            tools: &tools,
        };
        let (v, raw, w) = body(&lines, &settings);
        assert_eq!(
            v["input"],
            json!([
                {"type":"message","role":"user","content":"go"},
                serde_json::from_str::<Value>(ITEM).unwrap(),
                {"type":"message","role":"assistant","content":"Let me look."},
                {"type":"function_call","call_id":"call_a","name":"read","arguments":"{\"path\":\"a\"}"},
                {"type":"function_call_output","call_id":"call_a","output":"A"},
                {"type":"message","role":"system","content":"[summary]"},
            ])
        );
        assert!(
            raw.contains(ITEM),
            "the reasoning item is copied byte for byte: {raw}"
        );
        assert_eq!(v["instructions"], "be brief\n\nuse tools");
        assert_eq!(v["store"], false);
        assert_eq!(v["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(v["stream"], true);
        assert_eq!(v["max_output_tokens"], 500);
        assert_eq!(v["reasoning"], json!({"effort":"high"}));
        assert_eq!(
            v["tools"],
            json!([{"type":"function","name":"read","description":"d","parameters":{"type":"object"},
                "strict":false}])
        );
        assert!(v.get("temperature").is_none());
        assert_eq!(w.messages, 6);
        assert_eq!(w.items, 6);
        assert!(w.repairs.is_empty());
    }

    #[test]
    fn an_orphan_result_is_user_text_and_a_bad_reasoning_item_is_left_out() {
        let mut assistant = ChatMessage::text("assistant", "hi");
        assistant.reasoning = vec![ReasoningItem {
            provider: "openai-responses".into(),
            kind: "reasoning".into(),
            data: "{\"type\":\"message\"}".into(),
        }];
        let orphan = ChatMessage::tool_result(&ToolCall::new("gone", "read", "{}"), "old");
        assistant.reasoning.push(ReasoningItem {
            provider: "openai-responses".into(),
            kind: "reasoning".into(),
            data: "{\"id\":\"rs_2\",\"type\":\"reasoning\",\"summary\":[]}".into(),
        });
        let (v, _, w) = body(
            &[ChatMessage::text("user", "u"), assistant, orphan],
            &RequestSettings {
                model: "m",
                ..Default::default()
            },
        );
        assert_eq!(
            v["input"],
            json!([
                {"type":"message","role":"user","content":"u"},
                {"type":"message","role":"assistant","content":"hi"},
                {"type":"message","role":"user","content":"Result of tool call gone:\nold"},
            ])
        );
        assert_eq!(v["stream"], false);
        assert!(v.get("instructions").is_none() && v.get("reasoning").is_none());
        assert!(v.get("include").is_none(), "model m has no reasoning: {v}");
        assert_eq!(
            w.repairs,
            Repairs {
                orphan_results: 1,
                bad_reasoning: 2
            }
        );
    }

    #[test]
    fn encrypted_reasoning_is_asked_for_reasoning_models_only() {
        for m in [
            "o3",
            "o4-mini",
            "gpt-5",
            "gpt-5.1-codex-mini",
            "openai/o1",
            "O3-pro",
        ] {
            assert!(wants_encrypted_reasoning(m, None), "{m}");
        }
        for m in [
            "gpt-4o",
            "gpt-4o-mini",
            "gpt-4.1",
            "gpt-5-chat-latest",
            "omni",
            "qwen3",
        ] {
            assert!(!wants_encrypted_reasoning(m, None), "{m}");
        }
        assert!(wants_encrypted_reasoning("my-deployment", Some("low")));
    }

    #[test]
    fn only_system_messages_is_no_input() {
        let text = "{\"role\":\"system\",\"content\":\"s\"}\n";
        let e = write_request(
            io::Cursor::new(text),
            "c",
            &mut Vec::new(),
            &RequestSettings::default(),
        )
        .unwrap_err();
        assert!(matches!(e, BodyError::NoMessages), "{e}");
    }
}

#[cfg(test)]
mod interleaved_tests {
    use super::*;
    use crate::reply::{ProviderFunction, ProviderToolCall, assistant_message};
    use crate::responses::{PROVIDER, ResponsesStream, parse_response};
    use crate::{ChatMessage, ReasoningItem};

    /// `[rs_a, fc_a, rs_b, fc_b, message]`: reasoning interleaved with function calls.
    fn output() -> Value {
        json!([
            {"id": "rs_a", "type": "reasoning", "summary": [], "encrypted_content": "A+/="},
            {"type": "function_call", "call_id": "fc_a", "name": "read", "arguments": "{\"p\":1}"},
            {"id": "rs_b", "type": "reasoning", "summary": [], "encrypted_content": "B+/="},
            {"type": "function_call", "call_id": "fc_b", "name": "read", "arguments": "{}"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]},
        ])
    }

    /// The message the format's guest makes of `f`.
    fn message(f: crate::responses::Folded) -> ChatMessage {
        let calls = f
            .calls
            .into_iter()
            .map(|c| ProviderToolCall {
                id: Some(c.call_id),
                function: ProviderFunction {
                    name: c.name,
                    arguments: Some(Value::String(c.arguments)),
                },
            })
            .collect();
        let mut m = assistant_message(None, f.content, calls);
        m.reasoning = f
            .reasoning
            .into_iter()
            .map(|data| ReasoningItem {
                provider: PROVIDER.into(),
                kind: super::super::REASONING.into(),
                data,
            })
            .collect();
        m.reasoning.extend(f.order.item(PROVIDER));
        m
    }

    /// The input items of the request after `reply` and its calls' results, without the user's
    /// first and the results.
    fn replayed(reply: ChatMessage) -> Value {
        let calls = reply.calls().to_vec();
        let mut lines = vec![ChatMessage::text("user", "go"), reply];
        lines.extend(calls.iter().map(|c| ChatMessage::tool_result(c, "x")));
        let text: String = lines
            .iter()
            .map(|m| serde_json::to_string(m).unwrap() + "\n")
            .collect();
        let mut out = Vec::new();
        let settings = RequestSettings {
            model: "o4-mini",
            ..RequestSettings::default()
        };
        write_request(io::Cursor::new(text), "current.jsonl", &mut out, &settings).unwrap();
        let body: Value = serde_json::from_slice(&out).unwrap();
        let input = body["input"].as_array().unwrap();
        Value::Array(input[1..input.len() - calls.len()].to_vec())
    }

    /// What an item is sent back as: reasoning verbatim, the others in the input shape.
    fn expected() -> Value {
        let o = output();
        json!([o[0], {"type": "function_call", "call_id": "fc_a", "name": "read", "arguments": "{\"p\":1}"},
            o[2], {"type": "function_call", "call_id": "fc_b", "name": "read", "arguments": "{}"},
            {"type": "message", "role": "assistant", "content": "Done."}])
    }

    #[test]
    fn interleaved_reasoning_items_are_sent_back_in_output_order_streamed_or_whole() {
        let body = json!({"status": "completed", "output": output()});
        let whole = parse_response(&body.to_string()).unwrap();
        assert_eq!(replayed(message(whole)), expected());

        let mut s = ResponsesStream::new();
        for (i, item) in output().as_array().unwrap().iter().enumerate() {
            for kind in ["response.output_item.added", "response.output_item.done"] {
                let e = json!({"type": kind, "output_index": i, "item": item});
                s.line(&format!("data: {e}")).unwrap();
                // The blank line that ends each server-sent event.
                s.line("").unwrap();
            }
        }
        let end = json!({"type": "response.completed", "response": {"status": "completed"}});
        s.line(&format!("data: {end}")).unwrap();
        s.line("").unwrap();
        assert_eq!(replayed(message(s.finish().unwrap())), expected());
    }
}

#[cfg(test)]
mod tool_tests {
    use super::*;

    #[test]
    fn function_tools_are_not_strict_unless_asked_and_then_strict_compatible() {
        let schema = json!({"type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"},
                "filter": {"type": "object", "properties": {"kind": {"enum": ["a", "b"]}}}},
            "required": ["query"]});
        let chat = json!({"type": "function", "function": {"name": "history_search",
            "description": "Search.", "parameters": schema}});
        assert_eq!(
            responses_tool(&chat),
            json!({"type": "function", "name": "history_search", "description": "Search.",
                "parameters": schema, "strict": false})
        );
        // No parameters: an empty object schema (the API requires the field).
        assert_eq!(
            responses_tool(&json!({"type": "function", "function": {"name": "now"}})),
            json!({"type": "function", "name": "now",
                "parameters": {"type": "object", "properties": {}}, "strict": false})
        );
        // Asked for strict: every property required, the optional ones nullable, no others.
        let mut strict = chat.clone();
        strict["function"]["strict"] = json!(true);
        assert_eq!(
            responses_tool(&strict)["parameters"],
            json!({"type": "object", "additionalProperties": false,
                "properties": {
                    "query": {"type": "string"},
                    "limit": {"type": ["integer", "null"]},
                    "filter": {"type": ["object", "null"], "additionalProperties": false,
                        "properties": {"kind": {"anyOf": [{"enum": ["a", "b"]}, {"type": "null"}]}},
                        "required": ["kind"]}},
                "required": ["filter", "limit", "query"]})
        );
        assert_eq!(responses_tool(&strict)["strict"], true);
    }
}
