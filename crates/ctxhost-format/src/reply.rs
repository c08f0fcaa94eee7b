//! The assistant message of a provider's reply, shared by the request-format components
//! (`openai-chat`, `ollama-chat`, `prompted-tools`): tool calls as providers send them become
//! OpenAI-shaped [`ToolCall`]s with ids unique within the reply.
//!
//! Both OpenAI's chat completions and Ollama's `/api/chat` send a tool call as
//! `{"id"?, "function": {"name", "arguments"?}}` (Ollama without `id`; some servers repeat
//! ids or send `arguments` as an object), which [`ProviderToolCall`] reads.
//!
//! Token counts of a reply's `usage` are read leniently ([`TokenCount`]): a count that is not a
//! whole number ≥ 0 counts as 0 with a warning ([`invalid_counts`]) instead of failing a reply
//! whose message is fine.

use serde::Deserialize;
use serde_json::Value;

use crate::body::arguments_text;
use crate::{ChatMessage, ToolCall};

/// A tool call as a provider sends it: `{"id"?, "function": {"name", "arguments"?}}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ProviderToolCall {
    /// The provider's id, if it sent one (may be empty or repeated).
    #[serde(default)]
    pub id: Option<String>,
    /// The function called.
    pub function: ProviderFunction,
}

/// The `function` of a [`ProviderToolCall`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ProviderFunction {
    /// The function name.
    pub name: String,
    /// JSON text (OpenAI), an object (Ollama, some OpenAI-compatible servers), or missing.
    #[serde(default)]
    pub arguments: Option<Value>,
}

/// The reply's chat message: `role` (`assistant` when missing), `content` as given, and
/// `calls` as [`ToolCall`]s — ids from [`unique_call_ids`], arguments as JSON text
/// ([`arguments_text`]: `{}` when missing) — or no `tool_calls` at all when `calls` is empty.
pub fn assistant_message(
    role: Option<String>,
    content: Option<String>,
    calls: Vec<ProviderToolCall>,
) -> ChatMessage {
    let ids = unique_call_ids(calls.iter().map(|c| c.id.clone()));
    let tool_calls: Vec<ToolCall> = calls
        .into_iter()
        .zip(ids)
        .map(|(c, id)| {
            ToolCall::new(
                id,
                c.function.name,
                arguments_text(c.function.arguments.as_ref()),
            )
        })
        .collect();
    ChatMessage {
        role: role.unwrap_or_else(|| "assistant".to_string()),
        content,
        tool_calls: (!tool_calls.is_empty()).then_some(tool_calls),
        tool_call_id: None,
        tool_name: None,
        is_error: false,
        reasoning: Vec::new(),
    }
}

/// The `provider` of the reasoning item an OpenAI-compatible server's `reasoning_content`
/// is kept as ([`reasoning_content_item`]).
pub const CHAT_REASONING_PROVIDER: &str = "openai-chat";

/// The `type` of that item when the text came as `reasoning_content` (DeepSeek, vLLM,
/// llama.cpp, LM Studio).
pub const REASONING_CONTENT: &str = "reasoning_content";

/// The `type` of that item when the text came as a string `reasoning` (newer vLLM,
/// OpenRouter); sent back under that name.
pub const REASONING_FIELD: &str = "reasoning";

/// The reasoning item of an OpenAI-compatible server's reasoning text that came in the
/// message's (or delta's) field `field` ([`REASONING_CONTENT`] or [`REASONING_FIELD`]; the
/// item's type is the field's name, so it goes back under it): provider `openai-chat`, data the
/// text as a JSON string. `None` for an empty text.
pub fn reasoning_content_item(field: &str, text: &str) -> Option<crate::ReasoningItem> {
    let kind = if field == REASONING_FIELD {
        REASONING_FIELD
    } else {
        REASONING_CONTENT
    };
    (!text.is_empty()).then(|| crate::ReasoningItem {
        provider: CHAT_REASONING_PROVIDER.to_string(),
        kind: kind.to_string(),
        data: Value::String(text.to_string()).to_string(),
    })
}

/// The reasoning text of `items`: the texts of the [`REASONING_CONTENT`] and
/// [`REASONING_FIELD`] items of provider [`CHAT_REASONING_PROVIDER`], joined (an item whose
/// data is not a JSON string is skipped); `""` when there are none.
pub fn reasoning_content_text(items: &[crate::ReasoningItem]) -> String {
    items
        .iter()
        .filter(|r| r.provider == CHAT_REASONING_PROVIDER)
        .filter(|r| r.kind == REASONING_CONTENT || r.kind == REASONING_FIELD)
        .filter_map(|r| serde_json::from_str::<String>(&r.data).ok())
        .collect()
}

/// The field to send `items`' reasoning text back in: [`REASONING_FIELD`] when it came as
/// `reasoning`, else [`REASONING_CONTENT`] (also when there is none: DeepSeek's name).
pub fn reasoning_field(items: &[crate::ReasoningItem]) -> &'static str {
    if items
        .iter()
        .any(|r| r.provider == CHAT_REASONING_PROVIDER && r.kind == REASONING_FIELD)
    {
        REASONING_FIELD
    } else {
        REASONING_CONTENT
    }
}

/// Tool-call ids for a reply: each call keeps its provider id when it has a non-empty one not
/// used before in the reply; otherwise it gets `call_<n>` (the first n ≥ its 1-based position
/// that is unused), so ids are unique within the reply.
pub fn unique_call_ids(given: impl IntoIterator<Item = Option<String>>) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for (i, id) in given.into_iter().enumerate() {
        let id = match id.filter(|id| !id.is_empty() && !ids.contains(id)) {
            Some(id) => id,
            None => {
                let mut n = i + 1;
                while ids.contains(&format!("call_{n}")) {
                    n += 1;
                }
                format!("call_{n}")
            }
        };
        ids.push(id);
    }
    ids
}

/// One token count of a provider's `usage` (`prompt_tokens`, `eval_count`, ...), read
/// leniently: the counts are statistics, and a server that reports nonsense
/// (`"completion_tokens": -1`, `1.5`, `"12"`) must not fail a reply whose message is fine.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TokenCount {
    /// Missing or `null`.
    #[default]
    Absent,
    /// A whole number ≥ 0 (an integral float such as `12.0` included).
    Valid(u64),
    /// Anything else, as JSON text (at most 40 bytes): counted as 0.
    Invalid(String),
}

impl TokenCount {
    /// The count to use: `None` when absent, 0 when invalid.
    pub fn value(&self) -> Option<u64> {
        match self {
            TokenCount::Absent => None,
            TokenCount::Valid(n) => Some(*n),
            TokenCount::Invalid(_) => Some(0),
        }
    }

    /// Read `value` (see the type's doc).
    pub fn from_value(value: &Value) -> TokenCount {
        match value {
            Value::Null => TokenCount::Absent,
            Value::Number(n) => match (n.as_u64(), n.as_f64()) {
                (Some(n), _) => TokenCount::Valid(n),
                (None, Some(f)) if f >= 0.0 && f.fract() == 0.0 && f <= 9_007_199_254_740_992.0 => {
                    TokenCount::Valid(f as u64)
                }
                _ => TokenCount::Invalid(n.to_string()),
            },
            other => {
                let text = other.to_string();
                let cut = (0..=40.min(text.len()))
                    .rev()
                    .find(|i| text.is_char_boundary(*i))
                    .unwrap_or(0);
                TokenCount::Invalid(if cut < text.len() {
                    format!("{}…", &text[..cut])
                } else {
                    text
                })
            }
        }
    }
}

impl<'de> Deserialize<'de> for TokenCount {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<TokenCount, D::Error> {
        Value::deserialize(d).map(|v| TokenCount::from_value(&v))
    }
}

/// The warning for the invalid counts among `counts` (name as the provider sent it, count),
/// `None` when every count is valid or absent: e.g. `usage.completion_tokens is -1: not a
/// token count, counted as 0`.
pub fn invalid_counts(counts: &[(&str, &TokenCount)]) -> Option<String> {
    let bad: Vec<String> = counts
        .iter()
        .filter_map(|(name, c)| match c {
            TokenCount::Invalid(text) => Some(format!("{name} is {text}")),
            _ => None,
        })
        .collect();
    (!bad.is_empty()).then(|| {
        format!(
            "{}: not a token count, counted as 0 (the reply is used)",
            bad.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(value: Value) -> ProviderToolCall {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn ids_are_kept_generated_and_unique() {
        let given = [
            Some("a".to_string()),
            None,
            Some(String::new()),
            Some("a".to_string()),
            Some("call_2".to_string()),
        ];
        // call_2 is taken by the generated id of the second call, so the last one gets call_5.
        assert_eq!(
            unique_call_ids(given),
            ["a", "call_2", "call_3", "call_4", "call_5"]
        );
        assert_eq!(
            unique_call_ids([None, Some("call_1".to_string())]),
            ["call_1", "call_2"]
        );
        assert!(unique_call_ids(Vec::new()).is_empty());
    }

    #[test]
    fn message_with_calls_of_both_shapes() {
        let calls = vec![
            call(json!({"id": "c1", "function": {"name": "read", "arguments": "{\"p\":1}"}})),
            call(json!({"function": {"name": "list", "arguments": {"dir": "."}}})),
            call(json!({"id": "c1", "function": {"name": "stat"}})),
        ];
        let m = assistant_message(None, None, calls);
        assert_eq!(m.role, "assistant");
        assert_eq!(m.content, None);
        assert_eq!(
            m.calls(),
            [
                ToolCall::new("c1", "read", "{\"p\":1}"),
                ToolCall::new("call_2", "list", "{\"dir\":\".\"}"),
                ToolCall::new("call_3", "stat", "{}"),
            ]
        );
        assert_eq!((m.tool_call_id, m.tool_name), (None, None));
    }

    #[test]
    fn message_without_calls_has_no_tool_calls() {
        let m = assistant_message(Some("assistant".into()), Some("hi".into()), Vec::new());
        assert_eq!(m, ChatMessage::text("assistant", "hi"));
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"role":"assistant","content":"hi"}"#
        );
    }

    #[test]
    fn token_counts_are_read_leniently() {
        use serde_json::json;
        let read = |v: Value| TokenCount::from_value(&v);
        assert_eq!(read(json!(12)), TokenCount::Valid(12));
        assert_eq!(read(json!(12.0)), TokenCount::Valid(12));
        assert_eq!(read(Value::Null), TokenCount::Absent);
        for bad in [
            json!(-1),
            json!(1.5),
            json!("12"),
            json!({"n": 1}),
            json!(1e300),
        ] {
            let c = read(bad.clone());
            assert!(matches!(c, TokenCount::Invalid(_)), "{bad}");
            assert_eq!(c.value(), Some(0));
        }
        assert_eq!(read(Value::Null).value(), None);
        let long = read(json!("x".repeat(100)));
        assert!(
            matches!(&long, TokenCount::Invalid(t) if t.len() < 50),
            "{long:?}"
        );
        #[derive(Deserialize)]
        struct U {
            #[serde(default)]
            a: TokenCount,
            #[serde(default)]
            b: TokenCount,
        }
        let u: U = serde_json::from_value(json!({"a": -1})).unwrap();
        assert_eq!((u.a.value(), u.b.value()), (Some(0), None));
        assert_eq!(
            invalid_counts(&[("usage.a", &u.a), ("usage.b", &u.b)]).as_deref(),
            Some("usage.a is -1: not a token count, counted as 0 (the reply is used)")
        );
        assert_eq!(invalid_counts(&[("usage.b", &u.b)]), None);
    }
}
