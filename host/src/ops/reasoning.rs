//! How a model's reasoning is shown to a person (`show`, `show --follow`, `ask`, the dashboard):
//! the readable text of a reasoning item (an OpenAI-compatible server's `reasoning_content`,
//! Anthropic's `thinking`, the summary of a Responses API `reasoning` item), or a label for an
//! item that has none to show (`redacted_thinking`, encrypted content), never its opaque bytes.

use ctxhost_format::ReasoningItem;
use serde_json::Value;

/// One reasoning item as shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShownReasoning {
    /// The readable text, when the item has one.
    pub text: Option<String>,
    /// `provider type`, and what is not shown: `anthropic thinking`, `anthropic
    /// redacted_thinking (redacted, 1,234 bytes not shown)`,
    /// `openai-responses reasoning (encrypted, 2,048 bytes not shown)`.
    pub label: String,
}

/// The readable text and label of `item` (see the module doc). `data` that is not JSON is
/// labelled as such (fsck reports it).
pub fn shown(item: &ReasoningItem) -> ShownReasoning {
    let base = format!("{} {}", item.provider, item.kind);
    if ctxhost_format::block_order::is_order(&item.kind) {
        // Not reasoning: where the reply's blocks were (interleaved thinking).
        return ShownReasoning {
            text: None,
            label: format!("{base} (the reply's block order, nothing to read)"),
        };
    }
    let value: Value = match serde_json::from_str(&item.data) {
        Ok(v) => v,
        Err(_) => {
            return ShownReasoning {
                text: None,
                label: format!("{base} (not JSON, {} bytes)", item.data.len()),
            };
        }
    };
    let mut texts: Vec<String> = Vec::new();
    let mut hidden: Option<(&str, usize)> = None;
    match &value {
        Value::String(s) => texts.push(s.clone()),
        Value::Object(o) => {
            for key in ["thinking", "reasoning_content", "reasoning", "text"] {
                if let Some(Value::String(s)) = o.get(key) {
                    texts.push(s.clone());
                }
            }
            // Responses API: `summary` and `content` are arrays of `{type, text}`.
            for key in ["summary", "content"] {
                if let Some(Value::Array(parts)) = o.get(key) {
                    texts.extend(
                        parts
                            .iter()
                            .filter_map(|p| p.get("text").and_then(Value::as_str))
                            .map(str::to_string),
                    );
                }
            }
            if let Some(Value::String(s)) = o.get("encrypted_content") {
                hidden = Some(("encrypted", s.len()));
            } else if item.kind == "redacted_thinking"
                && let Some(Value::String(s)) = o.get("data")
            {
                hidden = Some(("redacted", s.len()));
            }
        }
        _ => {}
    }
    let text = texts.join("\n");
    let label = match hidden {
        Some((how, n)) => format!("{base} ({how}, {n} bytes not shown)"),
        None if text.is_empty() => format!("{base} (nothing readable)"),
        None => base,
    };
    ShownReasoning {
        text: (!text.is_empty()).then_some(text),
        label,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(provider: &str, kind: &str, data: &str) -> ReasoningItem {
        ReasoningItem {
            provider: provider.into(),
            kind: kind.into(),
            data: data.into(),
        }
    }

    #[test]
    fn readable_reasoning_is_text_opaque_reasoning_a_label() {
        let s = shown(&item(
            "openai-chat",
            "reasoning_content",
            r#""Let me think.""#,
        ));
        assert_eq!(s.text.as_deref(), Some("Let me think."));
        assert_eq!(s.label, "openai-chat reasoning_content");

        let s = shown(&item(
            "anthropic",
            "thinking",
            r#"{"type":"thinking","thinking":"Check a.txt first.","signature":"c2ln"}"#,
        ));
        assert_eq!(s.text.as_deref(), Some("Check a.txt first."));
        assert!(!s.label.contains("c2ln"));

        let s = shown(&item(
            "anthropic",
            "redacted_thinking",
            r#"{"type":"redacted_thinking","data":"EmwKAhgBEgy3va"}"#,
        ));
        assert_eq!(s.text, None);
        assert_eq!(
            s.label,
            "anthropic redacted_thinking (redacted, 14 bytes not shown)"
        );

        let s = shown(&item(
            "openai-responses",
            "reasoning",
            r#"{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"Plan: read."}],"encrypted_content":"gAAAAB"}"#,
        ));
        assert_eq!(s.text.as_deref(), Some("Plan: read."));
        assert_eq!(
            s.label,
            "openai-responses reasoning (encrypted, 6 bytes not shown)"
        );
        assert!(shown(&item("x", "y", "{cut")).label.contains("not JSON"));
    }
}
