//! Helpers for reading an LLM provider's response body, shared by the request-format
//! components: size cap, JSON parsing with a readable error (the body may be an HTML error
//! page or a truncated stream), provider error objects and tool-call arguments.

use std::io::{self, Read};

use serde_json::Value;

/// Largest response body a request format reads (bytes): 64 MiB.
pub const MAX_RESPONSE_BYTES: u64 = 64 * 1024 * 1024;

/// Characters of a body quoted in errors.
pub const SNIPPET_CHARS: usize = 200;

/// Reads all of `reader`, refusing more than `cap` bytes.
///
/// Errors: the read's own error, or [`io::ErrorKind::FileTooLarge`] when there are more than
/// `cap` bytes.
pub fn read_capped(reader: impl Read, cap: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    reader.take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("larger than {} bytes ({} MiB)", cap, cap / (1024 * 1024)),
        ));
    }
    Ok(bytes)
}

/// Parses `bytes` (the tools file `file`) as a JSON array of tool definitions (objects, e.g.
/// OpenAI's `{"type":"function","function":{"name","description","parameters"}}`).
///
/// Errors (text naming `file`): not JSON, not an array, an element that is not an object.
pub fn parse_tools(bytes: &[u8], file: &str) -> Result<Vec<Value>, String> {
    let tools = match parse_json(bytes, file)? {
        Value::Array(tools) => tools,
        other => {
            return Err(format!(
                "{file} must hold a JSON array of tool definitions, not {}",
                kind(&other)
            ));
        }
    };
    if let Some(i) = tools.iter().position(|t| !t.is_object()) {
        return Err(format!(
            "{file}: tool definition {i} is {}, not an object",
            kind(&tools[i])
        ));
    }
    Ok(tools)
}

/// "an object", "a string", ... for error messages.
pub fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Parses `bytes` (the content of `file`) as one JSON value.
///
/// Errors say what is wrong and quote the start of the body, e.g.
/// `response.json is not JSON (line 1, column 1: expected value); it starts with: <html>...`,
/// `response.json is empty`.
pub fn parse_json(bytes: &[u8], file: &str) -> Result<Value, String> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(format!("{file} is empty"));
    }
    serde_json::from_slice(bytes).map_err(|e| {
        format!(
            "{file} is not JSON (line {}, column {}: {}); it starts with: {}",
            e.line(),
            e.column(),
            error_reason(&e),
            snippet(bytes, SNIPPET_CHARS)
        )
    })
}

/// serde_json's message without its trailing " at line L column C".
fn error_reason(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// The first `max_chars` characters of `bytes` (lossy UTF-8) on one line: runs of whitespace
/// become one space; `...` is appended when cut.
pub fn snippet(bytes: &[u8], max_chars: usize) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(max_chars * 4)]);
    let mut out = String::new();
    let mut chars = 0;
    let mut words = text.split_whitespace();
    for word in words.by_ref() {
        if chars > 0 {
            out.push(' ');
            chars += 1;
        }
        for c in word.chars() {
            if chars == max_chars {
                out.push_str("...");
                return out;
            }
            out.push(c);
            chars += 1;
        }
    }
    if bytes.len() > max_chars * 4 {
        out.push_str("...");
    }
    out
}

/// The provider's error in a response body, if it is an error object.
///
/// Understands OpenAI's `{"error":{"message","type","code"}}` (→ `message (type: t, code: c)`)
/// and Ollama's / llama.cpp's `{"error":"text"}`; `None` when there is no non-null `error`.
pub fn provider_error(body: &Value) -> Option<String> {
    let error = body.get("error").filter(|e| !e.is_null())?;
    Some(match error {
        Value::String(s) => s.clone(),
        Value::Object(map) => {
            let mut text = match map.get("message") {
                Some(Value::String(m)) => m.clone(),
                _ => error.to_string(),
            };
            let details: Vec<String> = ["type", "code"]
                .into_iter()
                .filter_map(|k| match map.get(k) {
                    Some(Value::String(v)) => Some(format!("{k}: {v}")),
                    Some(v @ Value::Number(_)) => Some(format!("{k}: {v}")),
                    _ => None,
                })
                .collect();
            if !details.is_empty() {
                text.push_str(&format!(" ({})", details.join(", ")));
            }
            text
        }
        other => other.to_string(),
    })
}

/// Whether `error` (the `error` object of an error event sent inside a stream after HTTP 200,
/// or a failed response's `error`) is one the provider documents as transient: the condition
/// of a 429, 500, 503 or 529 status, which sending the same request again may clear. By its
/// `type` or `code`: Anthropic's `overloaded_error`, `api_error`, `rate_limit_error`,
/// `timeout_error`; OpenAI's `server_error`, `rate_limit_exceeded`, `rate_limit_error`,
/// `service_unavailable`, `internal_error`, `timeout`; or a numeric `code` / `status` among the
/// retried HTTP statuses (408, 409, 429, 500, 502, 503, 504, 529; OpenRouter sends its errors
/// so). Anything else (`invalid_request_error`, `authentication_error`, `insufficient_quota`,
/// an unknown kind) is final.
pub fn is_transient_error(error: &Value) -> bool {
    const KINDS: [&str; 10] = [
        "overloaded_error",
        "api_error",
        "rate_limit_error",
        "timeout_error",
        "server_error",
        "rate_limit_exceeded",
        "service_unavailable",
        "internal_error",
        "timeout",
        "overloaded",
    ];
    const STATUSES: [u64; 8] = [408, 409, 429, 500, 502, 503, 504, 529];
    let Value::Object(map) = error else {
        return false;
    };
    ["type", "code", "status"]
        .into_iter()
        .any(|k| match map.get(k) {
            Some(Value::String(v)) => {
                KINDS.contains(&v.as_str()) || v.parse().is_ok_and(|n| STATUSES.contains(&n))
            }
            Some(Value::Number(n)) => n.as_u64().is_some_and(|n| STATUSES.contains(&n)),
            _ => false,
        })
}

/// Tool-call arguments as JSON text: a string is kept as is, a missing/`null` value becomes
/// `{}`, anything else (some servers send an object) is serialised.
pub fn arguments_text(arguments: Option<&Value>) -> String {
    match arguments {
        None | Some(Value::Null) => "{}".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn html_page_is_reported_with_its_start() {
        let page = b"<!DOCTYPE html>\n<html>\n  <head><title>502 Bad Gateway</title></head></html>";
        let err = parse_json(page, "response.json").unwrap_err();
        assert!(
            err.starts_with("response.json is not JSON (line 1, column 1: expected value)"),
            "{err}"
        );
        assert!(err.ends_with("it starts with: <!DOCTYPE html> <html> <head><title>502 Bad Gateway</title></head></html>"), "{err}");
    }

    #[test]
    fn empty_body_is_named() {
        assert_eq!(
            parse_json(b"  \n", "r.json").unwrap_err(),
            "r.json is empty"
        );
    }

    #[test]
    fn snippet_cuts_long_bodies() {
        let long = "x".repeat(500);
        let s = snippet(long.as_bytes(), 200);
        assert_eq!(s.len(), 203);
        assert!(s.ends_with("..."));
        assert_eq!(snippet("上下文".as_bytes(), 2), "上下...");
    }

    #[test]
    fn read_capped_refuses_big_bodies() {
        assert_eq!(read_capped(&b"abc"[..], 3).unwrap(), b"abc");
        assert_eq!(
            read_capped(&b"abcd"[..], 3).unwrap_err().kind(),
            io::ErrorKind::FileTooLarge
        );
    }

    #[test]
    fn tools_must_be_an_array_of_objects() {
        assert_eq!(
            parse_tools(br#"[{"type":"function"}]"#, "tools.json")
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            parse_tools(br#"{"type":"function"}"#, "tools.json").unwrap_err(),
            "tools.json must hold a JSON array of tool definitions, not an object"
        );
        assert_eq!(
            parse_tools(b"[{}, 3]", "t").unwrap_err(),
            "t: tool definition 1 is a number, not an object"
        );
    }

    #[test]
    fn provider_errors_of_both_shapes() {
        let openai = json!({"error": {"message": "model not found", "type": "invalid_request_error", "code": "model_not_found"}});
        assert_eq!(
            provider_error(&openai).unwrap(),
            "model not found (type: invalid_request_error, code: model_not_found)"
        );
        assert_eq!(provider_error(&json!({"error": "boom"})).unwrap(), "boom");
        assert_eq!(provider_error(&json!({"error": null, "choices": []})), None);
    }

    #[test]
    fn transient_errors_are_the_retried_statuses_conditions() {
        for e in [
            json!({"type": "overloaded_error", "message": "Overloaded"}),
            json!({"type": "api_error", "message": "Internal server error"}),
            json!({"type": "rate_limit_error", "message": "slow down"}),
            json!({"message": "The server had an error", "type": "server_error", "code": null}),
            json!({"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}),
            json!({"code": 502, "message": "Provider returned error"}),
            json!({"code": "503", "message": "busy"}),
        ] {
            assert!(is_transient_error(&e), "{e}");
        }
        for e in [
            json!({"type": "invalid_request_error", "message": "prompt is too long"}),
            json!({"type": "authentication_error", "message": "invalid x-api-key"}),
            json!({"type": "insufficient_quota", "code": "insufficient_quota"}),
            json!({"code": 400, "message": "bad"}),
            json!("overloaded_error"),
            json!({}),
        ] {
            assert!(!is_transient_error(&e), "{e}");
        }
    }

    #[test]
    fn arguments_as_text() {
        assert_eq!(arguments_text(Some(&json!("{\"a\":1}"))), "{\"a\":1}");
        assert_eq!(arguments_text(Some(&json!({"a": 1}))), "{\"a\":1}");
        assert_eq!(arguments_text(None), "{}");
    }
}
