//! A chat message line of current.jsonl validated without building a value: each field is
//! the raw JSON text of its value, borrowed from the line, so a request format can copy the
//! bytes instead of decoding and re-escaping them (issue 14: request build near copy speed).
//!
//! A line accepted by [`parse_line`] is exactly a line [`ChatMessage`]'s `Deserialize`
//! accepts (UTF-8, JSON grammar, required fields and types, duplicate fields refused, unknown
//! fields ignored), and every string it hands out is a complete JSON string serde_json would
//! decode, so whatever is assembled from these slices is valid JSON. Two checkers:
//!
//! - [`scan`]: one pass over the line's bytes for the shape the message store writes (an
//!   object whose keys are among `role`, `content`, `tool_call_id`, `tool_name` with string or
//!   `null` values, and `tool_calls: null`), validating strings, escapes and UTF-8 8 bytes at a
//!   time. It only ever accepts; anything else, valid or not, goes to the second checker;
//! - serde_json (`RawValue`, feature `raw_value`) for every other line: tool calls, unknown
//!   fields, other whitespace or escapes in keys, and every invalid line.
//!
//! When a line is refused, the error text is the one the reference parse
//! (`serde_json::from_str::<ChatMessage>`) gives, so both write paths report the same thing.

mod scan;

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::ChatMessage;

/// A JSON string value as written in the line: quotes and escapes included, UTF-8.
///
/// Only [`parse_line`] makes one, after checking it is a string serde_json would decode
/// (UTF-8, escapes well formed, UTF-16 surrogates paired), so [`RawStr::value`] cannot fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawStr<'a>(&'a [u8]);

impl<'a> RawStr<'a> {
    /// The JSON text, e.g. `"say \"hi\"\n"` (valid JSON on its own).
    pub fn json(self) -> &'a [u8] {
        self.0
    }

    /// The decoded text (borrowed when the string has no escapes).
    pub fn value(self) -> Cow<'a, str> {
        let inner = &self.0[1..self.0.len() - 1];
        crate::placeholder::note_decoded(inner);
        // Neither can fail on a string parse_line accepted; the lossy forms only keep this
        // total.
        if inner.contains(&b'\\') {
            Cow::Owned(serde_json::from_slice(self.0).unwrap_or_else(|_| lossy(inner)))
        } else {
            match std::str::from_utf8(inner) {
                Ok(text) => Cow::Borrowed(text),
                Err(_) => Cow::Owned(lossy(inner)),
            }
        }
    }

    /// Whether the decoded text equals `text`.
    pub fn is(self, text: &str) -> bool {
        self.value() == text
    }
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// One of an assistant message's `tool_calls`: OpenAI's
/// `{"id","type"?,"function":{"name","arguments"}}`, each value raw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawToolCall<'a> {
    /// The call's id.
    pub id: RawStr<'a>,
    /// `type`; `None` when absent (the reference shape then writes `"function"`).
    pub kind: Option<RawStr<'a>>,
    /// The function called.
    pub name: RawStr<'a>,
    /// The arguments as a JSON string (whose text is the JSON the model wrote).
    pub arguments: RawStr<'a>,
}

/// One of an assistant message's `reasoning` items (`{"provider","type","data"}`,
/// [`crate::ReasoningItem`]), each value raw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawReasoning<'a> {
    /// Whose format `data` is (`anthropic`, ...).
    pub provider: RawStr<'a>,
    /// The item's type as the provider names it (`thinking`, ...).
    pub kind: RawStr<'a>,
    /// The provider's JSON text of the item, as a JSON string.
    pub data: RawStr<'a>,
}

impl RawReasoning<'_> {
    /// The item decoded ([`crate::ReasoningItem`]: each JSON string's value).
    pub fn to_item(&self) -> crate::ReasoningItem {
        crate::ReasoningItem {
            provider: self.provider.value().into_owned(),
            kind: self.kind.value().into_owned(),
            data: self.data.value().into_owned(),
        }
    }
}

/// A chat message line (`{"role","content"?,"tool_calls"?,"tool_call_id"?,"tool_name"?,
/// "is_error"?,"reasoning"?}`,
/// [`ChatMessage`]'s fields) with every value raw. Absent and `null` fields are `None`, an
/// absent, `null` or empty `tool_calls` is an empty list, like [`ChatMessage::calls`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawMessage<'a> {
    /// `system`, `user`, `assistant` or `tool` (not checked here: any string).
    pub role: RawStr<'a>,
    /// The text; `None` when absent or `null`.
    pub content: Option<RawStr<'a>>,
    /// The tool calls (empty when absent, `null` or `[]`).
    pub tool_calls: Vec<RawToolCall<'a>>,
    /// For a `tool` message: the call it answers.
    pub tool_call_id: Option<RawStr<'a>>,
    /// For a `tool` message: the tool that answered.
    pub tool_name: Option<RawStr<'a>>,
    /// For a `tool` message: the tool failed (`"is_error": true`; absent is `false`).
    pub is_error: bool,
    /// For an assistant message: its reasoning items (empty when absent).
    pub reasoning: Vec<RawReasoning<'a>>,
}

/// Checks `line` (one line of a JSONL file of chat messages, without its terminator) and
/// borrows its fields.
///
/// Errors: `not valid UTF-8`, or the reference parse's text, e.g. `not valid: missing field
/// `role` at line 1 column 17` or `not valid: invalid type: integer `1`, expected a string at
/// line 1 column 10`.
pub fn parse_line(line: &[u8]) -> Result<RawMessage<'_>, String> {
    if let Some(message) = scan::message(line) {
        return Ok(message);
    }
    let Ok(text) = std::str::from_utf8(line) else {
        return Err("not valid UTF-8".to_string());
    };
    checked(text).ok_or_else(|| match serde_json::from_str::<ChatMessage>(text) {
        Err(e) => format!("not valid: {e}"),
        // Not expected (both parses accept the same lines); say what was checked.
        Ok(_) => "not valid: a field is not a valid JSON string".to_string(),
    })
}

/// The general check (serde_json), for lines [`scan`] leaves: `None` when not a chat message.
fn checked(line: &str) -> Option<RawMessage<'_>> {
    let fields: LineFields = serde_json::from_str(line).ok()?;
    let tool_calls = match fields.tool_calls {
        Some(calls) => calls
            .into_iter()
            .map(|c| {
                Some(RawToolCall {
                    id: string(c.id)?,
                    kind: match c.kind.0 {
                        Some(kind) => Some(string(kind)?),
                        None => None,
                    },
                    name: string(c.function.name)?,
                    arguments: string(c.function.arguments)?,
                })
            })
            .collect::<Option<Vec<_>>>()?,
        None => Vec::new(),
    };
    let reasoning = fields
        .reasoning
        .into_iter()
        .map(|r| {
            Some(RawReasoning {
                provider: string(r.provider)?,
                kind: string(r.kind)?,
                data: string(r.data)?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(RawMessage {
        role: string(fields.role)?,
        content: optional_string(fields.content)?,
        tool_calls,
        tool_call_id: optional_string(fields.tool_call_id)?,
        tool_name: optional_string(fields.tool_name)?,
        is_error: fields.is_error,
        reasoning,
    })
}

/// The fields of a line, as serde_json found them; `Option`s are `None` when absent or null
/// (as for [`ChatMessage`]'s `Option`s).
#[derive(Deserialize)]
struct LineFields<'a> {
    #[serde(borrow)]
    role: &'a RawValue,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<CallFields<'a>>>,
    #[serde(borrow, default)]
    tool_call_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_name: Option<&'a RawValue>,
    #[serde(default)]
    is_error: bool,
    /// Checked as [`ChatMessage`] checks it (a list; absent is empty, `null` is refused).
    #[serde(borrow, default)]
    reasoning: Vec<ReasoningFields<'a>>,
}

/// [`crate::ReasoningItem`]'s fields, raw (all three required strings).
#[derive(Deserialize)]
struct ReasoningFields<'a> {
    #[serde(borrow)]
    provider: &'a RawValue,
    #[serde(borrow, rename = "type")]
    kind: &'a RawValue,
    #[serde(borrow)]
    data: &'a RawValue,
}

#[derive(Deserialize)]
struct CallFields<'a> {
    #[serde(borrow)]
    id: &'a RawValue,
    /// [`crate::ToolCall::kind`] is a `String` with a default: absent is fine, null is not.
    #[serde(borrow, rename = "type", default)]
    kind: Present<'a>,
    #[serde(borrow)]
    function: FunctionFields<'a>,
}

#[derive(Deserialize)]
struct FunctionFields<'a> {
    #[serde(borrow)]
    name: &'a RawValue,
    #[serde(borrow)]
    arguments: &'a RawValue,
}

/// A field's raw value, `null` included; `None` only when the field is absent.
#[derive(Default)]
struct Present<'a>(Option<&'a RawValue>);

impl<'de: 'a, 'a> Deserialize<'de> for Present<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <&'a RawValue>::deserialize(d).map(|raw| Present(Some(raw)))
    }
}

fn optional_string(raw: Option<&RawValue>) -> Option<Option<RawStr<'_>>> {
    match raw {
        Some(raw) => string(raw).map(Some),
        None => Some(None),
    }
}

/// `raw` as a string serde_json would decode into a `String`, or `None`.
///
/// serde_json's grammar check (done while reading the line) accepts any `\uXXXX`; decoding
/// into a `String` also refuses UTF-16 surrogates that are not a leading one followed by a
/// trailing one, so those are checked here.
fn string(raw: &RawValue) -> Option<RawStr<'_>> {
    let text = raw.get();
    (text.starts_with('"') && surrogates_paired(text)).then_some(RawStr(text.as_bytes()))
}

/// Whether every `\u` escape of the JSON string `text` (grammar already checked) that encodes
/// a UTF-16 surrogate is a leading surrogate immediately followed by an escaped trailing one.
fn surrogates_paired(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(at) = text[from..].find('\\') {
        let escape = from + at;
        if bytes[escape + 1] != b'u' {
            from = escape + 2;
            continue;
        }
        let unit = hex4(&bytes[escape + 2..escape + 6]);
        from = escape + 6;
        match unit {
            0xDC00..=0xDFFF => return false,
            0xD800..=0xDBFF => {
                let next = &bytes[from..];
                if next.len() < 6 || !next.starts_with(b"\\u") {
                    return false;
                }
                if !(0xDC00..=0xDFFF).contains(&hex4(&next[2..6])) {
                    return false;
                }
                from += 6;
            }
            _ => {}
        }
    }
    true
}

/// The value of 4 hex digits (checked by serde_json's grammar).
fn hex4(digits: &[u8]) -> u32 {
    digits
        .iter()
        .fold(0, |n, d| n * 16 + (*d as char).to_digit(16).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_borrowed_raw() {
        let line = r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{\"p\":\"a\\nb\"}"}}],"x":[1,{"y":2}]}"#;
        let m = parse_line(line.as_bytes()).unwrap();
        assert_eq!(m.role.json(), b"\"assistant\"");
        assert!(m.role.is("assistant"));
        assert_eq!(m.content, None);
        assert_eq!(m.tool_calls.len(), 1);
        assert_eq!(m.tool_calls[0].arguments.json(), br#""{\"p\":\"a\\nb\"}""#);
        assert_eq!(m.tool_calls[0].arguments.value(), "{\"p\":\"a\\nb\"}");
        assert_eq!(m.tool_calls[0].kind.unwrap().json(), b"\"function\"");
    }

    #[test]
    fn escaped_role_is_decoded_for_comparison() {
        let m = parse_line(br#"{"role":"us\u0065r","content":"\u00e9\ud83d\ude00"}"#).unwrap();
        assert!(m.role.is("user"));
        assert_eq!(m.content.unwrap().value(), "é😀");
    }

    #[test]
    fn refuses_what_the_reference_refuses_with_its_text() {
        for line in [
            r#"{"content":"a"}"#,
            r#"{"role":1}"#,
            r#"{"role":null}"#,
            r#"{"role":"user","content":7}"#,
            r#"{"role":"user","role":"user"}"#,
            r#"{"role":"user"} x"#,
            r#"{"role":"user","content":"\ud800"}"#,
            r#"{"role":"user","content":"\udc00\ud800"}"#,
            r#"{"role":"user","content":"\ud800\u0041"}"#,
            r#"{"role":"assistant","tool_calls":[{"id":"a","type":null,"function":{"name":"n","arguments":"{}"}}]}"#,
            r#"{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"n"}}]}"#,
            "{\"role\":\"user\",\"content\":\"tab\there\"}",
            r#"{"role":"user","content":"a"#,
            r#"[1,2]"#,
            r#"{"role":"assistant","reasoning":null}"#,
            r#"{"role":"assistant","reasoning":[{"provider":"anthropic","type":"thinking"}]}"#,
            r#"{"role":"assistant","reasoning":[{"provider":"a","type":"t","data":{"x":1}}]}"#,
            r#"{"role":"assistant","reasoning":[{"provider":"a","type":"t","data":"\udc00"}]}"#,
        ] {
            let reference = serde_json::from_str::<ChatMessage>(line).unwrap_err();
            assert_eq!(
                parse_line(line.as_bytes()).unwrap_err(),
                format!("not valid: {reference}"),
                "{line}"
            );
        }
    }

    #[test]
    fn accepts_what_the_reference_accepts() {
        for line in [
            r#"{"role":"user"}"#,
            r#"{"role":"user","content":null,"tool_calls":null,"extra":"\ud800"}"#,
            r#"{"role":"user","content":"\\ud800 is text, not an escape"}"#,
            r#" { "role" : "tool" , "content" : "r" , "tool_call_id" : "c" , "tool_name" : "t" } "#,
            r#"{"role":"assistant","tool_calls":[]}"#,
            r#"{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"n","arguments":"{}"},"extra":1}]}"#,
            r#"{"role":"assistant","reasoning":[]}"#,
        ] {
            serde_json::from_str::<ChatMessage>(line).unwrap();
            parse_line(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"));
        }
    }

    #[test]
    fn reasoning_items_are_borrowed_raw() {
        let line = r#"{"role":"assistant","content":"x","reasoning":[{"provider":"anthropic","type":"thinking","data":"{\"type\":\"thinking\",\"signature\":\"s\"}","extra":1}]}"#;
        let m = parse_line(line.as_bytes()).unwrap();
        assert_eq!(m.reasoning.len(), 1);
        let r = m.reasoning[0];
        assert!(r.provider.is("anthropic") && r.kind.is("thinking"));
        assert_eq!(r.data.value(), r#"{"type":"thinking","signature":"s"}"#);
    }
}
