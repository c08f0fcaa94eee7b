//! A whole Responses API response object → the parts of a reply ([`super::Folded`]).
//!
//! `{"id","object":"response","status","error","incomplete_details"?:{"reason"},
//! "output":[...],"usage"}` where an output item is `{"type":"reasoning","id","summary",
//! "encrypted_content"}` (kept as received, byte for byte), `{"type":"message","role":
//! "assistant","content":[{"type":"output_text","text"},{"type":"refusal","refusal"}]}`, or
//! `{"type":"function_call","call_id","name","arguments"}`; other item types (built-in tools)
//! are skipped.

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::{Folded, FunctionCallItem, REASONING, error_text, finish_reason};
use crate::block_order::Part;

#[derive(Deserialize)]
struct ResponseIn<'a> {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    incomplete_details: Option<Incomplete>,
    #[serde(borrow, default)]
    output: Option<Vec<&'a RawValue>>,
    #[serde(default)]
    usage: Option<Value>,
    #[serde(default)]
    model: Option<String>,
}

/// `incomplete_details`.
#[derive(Deserialize)]
pub(crate) struct Incomplete {
    #[serde(default)]
    pub(crate) reason: Option<String>,
}

/// The fields of an output item this format reads (the rest stays in its raw text).
#[derive(Deserialize, Default)]
pub(crate) struct ItemIn {
    #[serde(rename = "type", default)]
    pub(crate) kind: String,
    #[serde(default)]
    pub(crate) content: Vec<PartIn>,
    #[serde(default)]
    pub(crate) call_id: Option<String>,
    #[serde(default)]
    pub(crate) name: Option<String>,
    #[serde(default)]
    pub(crate) arguments: Option<String>,
}

/// A content part of a `message` item.
#[derive(Deserialize, Default)]
pub(crate) struct PartIn {
    #[serde(rename = "type", default)]
    pub(crate) kind: String,
    #[serde(default)]
    pub(crate) text: Option<String>,
    #[serde(default)]
    pub(crate) refusal: Option<String>,
}

impl PartIn {
    /// The text of an `output_text` or `refusal` part.
    pub(crate) fn text(&self) -> Option<&str> {
        match self.kind.as_str() {
            "output_text" => self.text.as_deref(),
            "refusal" => self.refusal.as_deref(),
            _ => None,
        }
    }
}

/// Parses a response body. Errors: not a response object (the text says what is wrong), a
/// failed or unfinished response, an output item that is not an object, a `function_call`
/// without `call_id` or `name`.
pub fn parse_response(body: &str) -> Result<Folded, String> {
    let r: ResponseIn<'_> =
        serde_json::from_str(body).map_err(|e| format!("not a response object ({e})"))?;
    let mut folded = Folded::default();
    for (i, raw) in r.output.unwrap_or_default().into_iter().enumerate() {
        let item: ItemIn = serde_json::from_str(raw.get())
            .map_err(|e| format!("output[{i}] is not an output item ({e})"))?;
        match item.kind.as_str() {
            REASONING => {
                folded.reasoning.push(raw.get().to_string());
                folded.order.push(Part::Reasoning);
            }
            "message" => {
                let mut bytes = 0;
                for part in &item.content {
                    if let Some(t) = part.text() {
                        folded.content.get_or_insert_with(String::new).push_str(t);
                        bytes += t.len();
                    }
                }
                folded.order.push(Part::Text(bytes));
            }
            "function_call" => {
                folded.calls.push(call(item, i)?);
                folded.order.push(Part::ToolCall);
            }
            _ => {}
        }
    }
    folded.finish_reason = finish_reason(
        r.status.as_deref(),
        r.incomplete_details
            .as_ref()
            .and_then(|d| d.reason.as_deref()),
        error_text(r.error.as_ref()),
        !folded.calls.is_empty(),
    )?;
    folded.usage = r.usage.filter(|u| !u.is_null());
    folded.model = r.model;
    Ok(folded)
}

/// A `function_call` item's call. Errors: no `call_id` or `name` (`index`: its output index).
pub(crate) fn call(item: ItemIn, index: usize) -> Result<FunctionCallItem, String> {
    let call_id = item.call_id.filter(|s| !s.is_empty());
    let name = item.name.filter(|s| !s.is_empty());
    match (call_id, name) {
        (Some(call_id), Some(name)) => Ok(FunctionCallItem {
            call_id,
            name,
            arguments: item.arguments.unwrap_or_default(),
        }),
        _ => Err(format!(
            "output[{index}]: a function_call without call_id or name"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const RS: &str = r#"{"id":"rs_9","type":"reasoning","summary":[{"type":"summary_text","text":"plan"}],"encrypted_content":"gAAAAB=="}"#;

    #[test]
    fn reasoning_message_and_calls_with_usage() {
        let body = format!(
            r#"{{"id":"resp_1","object":"response","status":"completed","error":null,"output":[{RS},
            {{"id":"msg_1","type":"message","role":"assistant","status":"completed","content":[{{"type":"output_text","text":"Reading.","annotations":[]}}]}},
            {{"id":"fc_1","type":"function_call","call_id":"call_1","name":"read","arguments":"{{\"path\":\"a\"}}","status":"completed"}}],
            "usage":{{"input_tokens":100,"input_tokens_details":{{"cached_tokens":60}},"output_tokens":40,"output_tokens_details":{{"reasoning_tokens":25}},"total_tokens":140}}}}"#
        );
        let f = parse_response(&body).unwrap();
        assert_eq!(f.reasoning, vec![RS.to_string()], "kept byte for byte");
        assert_eq!(f.content.as_deref(), Some("Reading."));
        assert_eq!(
            f.calls,
            vec![FunctionCallItem {
                call_id: "call_1".into(),
                name: "read".into(),
                arguments: r#"{"path":"a"}"#.into()
            }]
        );
        assert_eq!(f.finish_reason, "tool_calls");
        let u: super::super::ResponsesUsage = serde_json::from_value(f.usage.unwrap()).unwrap();
        assert_eq!(u.input_tokens.value(), Some(100));
        assert_eq!(u.cached().value(), Some(60));
        assert_eq!(u.reasoning().value(), Some(25));
    }

    #[test]
    fn incomplete_failed_and_error_bodies() {
        let f = parse_response(
            r#"{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[{"type":"message","content":[{"type":"output_text","text":"Hal"}]}]}"#,
        )
        .unwrap();
        assert_eq!(
            (f.content.as_deref(), &*f.finish_reason),
            (Some("Hal"), "length")
        );
        let e = parse_response(
            r#"{"status":"failed","error":{"code":"server_error","message":"boom"},"output":[]}"#,
        )
        .unwrap_err();
        assert_eq!(e, "the response failed: boom (code: server_error)");
        let e = parse_response(r#"{"status":"in_progress","output":[]}"#).unwrap_err();
        assert!(e.contains("in_progress"), "{e}");
        let e = parse_response(
            r#"{"status":"completed","output":[{"type":"function_call","name":"x"}]}"#,
        )
        .unwrap_err();
        assert!(e.contains("output[0]") && e.contains("call_id"), "{e}");
        assert!(
            parse_response("[1]")
                .unwrap_err()
                .contains("not a response")
        );
        let refusal = parse_response(
            &json!({"status":"completed","output":[{"type":"message","content":[{"type":"refusal","refusal":"No."}]}]})
                .to_string(),
        )
        .unwrap();
        assert_eq!(refusal.content.as_deref(), Some("No."));
    }
}
