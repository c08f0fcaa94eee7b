//! The order of an assistant reply's provider blocks, kept so a request sends them back in it
//! (issue 37 item 7).
//!
//! A chat message keeps a reply in OpenAI's shape: one `content` text, the tool calls, and the
//! reasoning items. A model with interleaved thinking answers e.g. Anthropic
//! `[thinking A, tool_use t1, thinking B, tool_use t2, text]` (the Responses API likewise
//! `[reasoning, function_call, reasoning, function_call]`), and the API refuses the next request
//! when the latest assistant turn's thinking blocks come back anywhere else. So when a reply's
//! order is not the one a request rebuilds anyway (reasoning, then text, then the tool calls:
//! [`Order::is_default`]), the reply gets one more reasoning item of type [`ORDER`] (provider
//! that of the format) recording its parts in order:
//!
//! ```text
//! {"provider":"anthropic","type":"order","data":"[\"reasoning\",\"tool_call\",\"reasoning\",\"tool_call\",{\"text\":5}]"}
//! ```
//!
//! `"reasoning"` stands for the message's next reasoning item (the order item aside),
//! `"tool_call"` for its next tool call, `{"text":n}` for the next `n` bytes (UTF-8) of its
//! content. A request writer replays from it ([`Order::replay`]); a message without it (every
//! message stored before, and every reply in the default order) is sent as before. The item
//! crosses the WIT `chat-message` as any reasoning item does, so no interface changes.

use serde_json::Value;

use crate::ReasoningItem;

/// The `type` of the reasoning item that records a reply's block order.
pub const ORDER: &str = "order";

/// One part of a reply, in the order the provider sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// A reasoning item that was kept (the message's next one).
    Reasoning,
    /// A text block of this many bytes of the message's content.
    Text(usize),
    /// A tool call (the message's next one).
    ToolCall,
}

/// A reply's parts in order, as a fold or parser meets them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Order {
    parts: Vec<Part>,
}

impl Order {
    /// No part yet.
    pub fn new() -> Self {
        Order::default()
    }

    /// Appends `part`.
    pub fn push(&mut self, part: Part) {
        self.parts.push(part);
    }

    /// The parts, in order.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// Whether the parts are in the order a request rebuilds without this record: every
    /// reasoning item, then the text, then every tool call (empty texts aside; adjacent texts
    /// are one).
    pub fn is_default(&self) -> bool {
        // 0: reasoning, 1: text, 2: tool calls.
        let mut stage = 0;
        for part in &self.parts {
            let at = match part {
                Part::Reasoning => 0,
                Part::Text(0) => continue,
                Part::Text(_) => 1,
                Part::ToolCall => 2,
            };
            if at < stage {
                return false;
            }
            stage = at;
        }
        true
    }

    /// The reasoning item recording these parts for `provider`, or `None` when they are in the
    /// default order ([`Order::is_default`]) and need no record.
    pub fn item(&self, provider: &str) -> Option<ReasoningItem> {
        if self.is_default() {
            return None;
        }
        let parts: Vec<Value> = self
            .parts
            .iter()
            .map(|p| match p {
                Part::Reasoning => Value::from("reasoning"),
                Part::ToolCall => Value::from("tool_call"),
                Part::Text(n) => serde_json::json!({ "text": n }),
            })
            .collect();
        Some(ReasoningItem {
            provider: provider.to_string(),
            kind: ORDER.to_string(),
            data: Value::Array(parts).to_string(),
        })
    }

    /// The parts recorded in an [`ORDER`] item's `data`; `None` when it is not such a record.
    pub fn parse(data: &str) -> Option<Order> {
        let Ok(Value::Array(items)) = serde_json::from_str::<Value>(data) else {
            return None;
        };
        let parts = items
            .iter()
            .map(|v| match v {
                Value::String(s) if s == "reasoning" => Some(Part::Reasoning),
                Value::String(s) if s == "tool_call" => Some(Part::ToolCall),
                Value::Object(o) => o
                    .get("text")
                    .and_then(Value::as_u64)
                    .and_then(|n| usize::try_from(n).ok())
                    .map(Part::Text),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Order { parts })
    }

    /// The sequence to send a message in: the recorded parts when they fit the message
    /// (`reasoning` items besides the order item, `calls` tool calls, a content of
    /// `content_len` bytes), else `None` (the caller sends the default order). Text parts are
    /// [`Slot::Text`] with their byte range of the content when the recorded lengths add up to
    /// it; otherwise the whole content goes at the first text part (a content changed since,
    /// e.g. a redacted key) and the other text parts are left out.
    pub fn replay(&self, reasoning: usize, calls: usize, content_len: usize) -> Option<Vec<Slot>> {
        let count = |want: Part| self.parts.iter().filter(|p| **p == want).count();
        if count(Part::Reasoning) != reasoning || count(Part::ToolCall) != calls {
            return None;
        }
        let texts: usize = self
            .parts
            .iter()
            .map(|p| if let Part::Text(n) = p { *n } else { 0 })
            .sum();
        let split = texts == content_len;
        let (mut r, mut c, mut at) = (0, 0, 0);
        let mut whole_placed = false;
        let mut out = Vec::with_capacity(self.parts.len() + 1);
        for part in &self.parts {
            match part {
                Part::Reasoning => {
                    out.push(Slot::Reasoning(r));
                    r += 1;
                }
                Part::ToolCall => {
                    out.push(Slot::ToolCall(c));
                    c += 1;
                }
                Part::Text(n) if split => {
                    out.push(Slot::Text(at..at + n));
                    at += n;
                }
                Part::Text(_) => {
                    if !whole_placed {
                        out.push(Slot::Text(0..content_len));
                        whole_placed = true;
                    }
                }
            }
        }
        if !split && !whole_placed && content_len > 0 {
            // Text the record does not know of: after everything, where a reply's text ends.
            out.push(Slot::Text(0..content_len));
        }
        Some(out)
    }
}

/// One place of a replayed message ([`Order::replay`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slot {
    /// The message's reasoning item of this index (the order item not counted).
    Reasoning(usize),
    /// These bytes of the content.
    Text(std::ops::Range<usize>),
    /// The message's tool call of this index.
    ToolCall(usize),
}

/// Whether a reasoning item of type `kind` is an order record (not reasoning to show).
pub fn is_order(kind: &str) -> bool {
    kind == ORDER
}

/// The piece of `content` at `range` when it falls on character boundaries, else the whole
/// content (never panics).
pub fn piece(content: &str, range: std::ops::Range<usize>) -> &str {
    content.get(range).unwrap_or(content)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(parts: &[Part]) -> Order {
        let mut o = Order::new();
        for p in parts {
            o.push(*p);
        }
        o
    }

    #[test]
    fn the_default_order_needs_no_record() {
        use Part::*;
        for parts in [
            vec![],
            vec![Reasoning, Reasoning, Text(3), ToolCall, ToolCall],
            vec![Reasoning, Text(2), Text(4), ToolCall],
            vec![Text(0), Reasoning, ToolCall, Text(0)],
        ] {
            assert_eq!(order(&parts).item("anthropic"), None, "{parts:?}");
        }
        for parts in [
            vec![Reasoning, ToolCall, Reasoning, ToolCall, Text(5)],
            vec![Text(2), Reasoning, ToolCall],
            vec![Reasoning, ToolCall, Text(1)],
        ] {
            assert!(order(&parts).item("anthropic").is_some(), "{parts:?}");
        }
    }

    #[test]
    fn a_record_round_trips_and_replays_only_where_it_fits() {
        use Part::*;
        let o = order(&[Reasoning, Text(2), ToolCall, Reasoning, ToolCall, Text(3)]);
        let item = o.item("anthropic").unwrap();
        assert_eq!(
            (
                item.provider.as_str(),
                item.kind.as_str(),
                item.data.as_str()
            ),
            (
                "anthropic",
                "order",
                r#"["reasoning",{"text":2},"tool_call","reasoning","tool_call",{"text":3}]"#
            )
        );
        let back = Order::parse(&item.data).unwrap();
        assert_eq!(back, o);
        assert_eq!(
            back.replay(2, 2, 5).unwrap(),
            [
                Slot::Reasoning(0),
                Slot::Text(0..2),
                Slot::ToolCall(0),
                Slot::Reasoning(1),
                Slot::ToolCall(1),
                Slot::Text(2..5),
            ]
        );
        // Content changed since: whole at the first text place.
        assert_eq!(
            back.replay(2, 2, 9).unwrap(),
            [
                Slot::Reasoning(0),
                Slot::Text(0..9),
                Slot::ToolCall(0),
                Slot::Reasoning(1),
                Slot::ToolCall(1),
            ]
        );
        // Not this message's record.
        assert_eq!(back.replay(1, 2, 5), None);
        assert_eq!(back.replay(2, 3, 5), None);
        for bad in ["", "{}", "[\"x\"]", "[{\"text\":-1}]"] {
            assert_eq!(Order::parse(bad), None, "{bad}");
        }
        assert_eq!(piece("aé", 0..2), "aé");
        assert_eq!(piece("aé", 1..3), "é");
    }
}
