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
//!   its reasoning; reasoning of other providers (Anthropic thinking, `reasoning_content`) is
//!   not sent;
//! - tool: `{"type":"function_call_output","call_id","output"}` (a failed call's error text is
//!   its output: the API has no error flag). A result whose call is not in the input (the API
//!   refuses it: "No tool call found for function call output") is sent as user text instead.

use std::collections::HashSet;
use std::fmt;
use std::io::{self, BufRead, Write};

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::ChatMessage;
use crate::jsonl::{JsonlError, LineReader};

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
/// "description"?,"parameters"?,"strict"?}`; a definition without `function` (already in this
/// shape, or a built-in tool) is kept as is.
pub fn responses_tool(tool: &Value) -> Value {
    let Some(function) = tool.get("function").and_then(Value::as_object) else {
        return tool.clone();
    };
    let mut out = Map::new();
    out.insert("type".into(), json!("function"));
    for key in ["name", "description", "parameters", "strict"] {
        if let Some(v) = function.get(key).filter(|v| !v.is_null()) {
            out.insert(key.into(), v.clone());
        }
    }
    Value::Object(out)
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
pub fn write_request<R: BufRead, W: Write>(
    messages: R,
    file: &str,
    out: &mut W,
    settings: &RequestSettings<'_>,
) -> Result<Written, BodyError> {
    if let Some(t) = settings.temperature.filter(|t| !t.is_finite() || *t < 0.0) {
        return Err(BodyError::Setting(format!(
            "temperature {t} is not a finite number ≥ 0"
        )));
    }
    out.write_all(b"{\"model\":")?;
    json_to(out, &settings.model)?;
    out.write_all(b",\"input\":[")?;
    let mut lines = LineReader::new(messages, file);
    let mut instructions: Option<String> = None;
    let mut written = Written::default();
    let mut calls: HashSet<String> = HashSet::new();
    while let Some((_, m)) = lines.next_value::<ChatMessage>().map_err(BodyError::Read)? {
        written.messages += 1;
        if m.role == "system" && written.items == 0 {
            let text = m.content.unwrap_or_default();
            match &mut instructions {
                Some(i) => {
                    i.push_str("\n\n");
                    i.push_str(&text);
                }
                None => instructions = Some(text),
            }
            continue;
        }
        write_items(out, m, &mut written, &mut calls)?;
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

/// Writes the input items of one (non-leading-system) message, each preceded by `,` but the
/// first of the array.
fn write_items<W: Write>(
    out: &mut W,
    m: ChatMessage,
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
    let content = m.content.unwrap_or_default();
    match m.role.as_str() {
        "assistant" => {
            for r in &m.reasoning {
                if r.provider != super::PROVIDER || r.kind != super::REASONING {
                    continue;
                }
                let ok = serde_json::from_str::<ItemType>(&r.data)
                    .is_ok_and(|t| t.kind == super::REASONING && t.encrypted_content.is_some());
                if !ok {
                    written.repairs.bad_reasoning += 1;
                    continue;
                }
                item(out, written)?;
                out.write_all(r.data.as_bytes())?;
            }
            if !content.is_empty() {
                item(out, written)?;
                json_to(
                    out,
                    &json!({"type": "message", "role": "assistant", "content": content}),
                )?;
            }
            for c in m.tool_calls.unwrap_or_default() {
                item(out, written)?;
                json_to(
                    out,
                    &json!({"type": "function_call", "call_id": c.id,
                        "name": c.function.name, "arguments": c.function.arguments}),
                )?;
                calls.insert(c.id);
            }
        }
        "tool" => {
            let id = m.tool_call_id.unwrap_or_default();
            item(out, written)?;
            if calls.contains(&id) {
                json_to(
                    out,
                    &json!({"type": "function_call_output", "call_id": id, "output": content}),
                )?;
            } else {
                written.repairs.orphan_results += 1;
                let text = format!("Result of tool call {id}:\n{content}");
                json_to(
                    out,
                    &json!({"type": "message", "role": "user", "content": text}),
                )?;
            }
        }
        role => {
            // `user`, a later `system`; any other role is sent as the user's.
            let role = if role == "system" { "system" } else { "user" };
            item(out, written)?;
            json_to(
                out,
                &json!({"type": "message", "role": role, "content": content}),
            )?;
        }
    }
    Ok(())
}

fn json_to<W: Write>(out: &mut W, value: &impl serde::Serialize) -> io::Result<()> {
    serde_json::to_writer(out, value).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ReasoningItem, ToolCall};

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
        let w = write_request(text.as_bytes(), "current.jsonl", &mut out, settings).unwrap();
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
            json!([{"type":"function","name":"read","description":"d","parameters":{"type":"object"}}])
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
            text.as_bytes(),
            "c",
            &mut Vec::new(),
            &RequestSettings::default(),
        )
        .unwrap_err();
        assert!(matches!(e, BodyError::NoMessages), "{e}");
    }
}
