//! The anthropic-messages and openai-responses request bodies with long lines read through
//! [`crate::long_line`] (the compact copy, long strings copied from the file) are byte for
//! byte the bodies written with every line held, over random histories: every role, texts
//! long and short (escapes, non-ASCII, blank ones of white space only), tool calls with
//! JSON or broken arguments, reasoning items of both providers (some unsendable), block-order
//! records, a summary, a system prompt, blank lines. Small limits make most lines long and
//! most strings long ones; the reference holds every line (`line: usize::MAX`).

use std::io::Cursor;

use proptest::prelude::*;
use serde_json::json;

use crate::anthropic::request::{RequestSettings as AnthropicSettings, Thinking};
use crate::compress::summary_message;
use crate::long_line::{LIMITS, Limits};
use crate::responses::request::RequestSettings as ResponsesSettings;
use crate::{ChatMessage, ReasoningItem, ToolCall};

/// Lines over 48 bytes are long; strings over 16 bytes are long ones (field names stay
/// short, as they are at the real limits).
const SMALL: Limits = Limits {
    line: 48,
    string: 16,
    compact: 4096,
};

/// Every line held.
const WHOLE: Limits = Limits {
    line: usize::MAX,
    ..LIMITS
};

const TEXTS: &[&str] = &[
    "",
    "ok",
    "   \n\t   \u{a0}  \n         ",
    "say \"hi\"\n\tplease, and read path\\to\\file first",
    "上下文压缩 🚀 données naïve → ✓ and more words after it",
    "//ctxhost-long-0// is not a placeholder",
    "short",
];

const ARGS: &[&str] = &[
    r#"{"path":"src/a very long path/with spaces/file.rs"}"#,
    "",
    "{broken",
    r#"{"n":1}"#,
];

fn text() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        prop::sample::select(TEXTS).prop_map(|t| Some(t.to_string())),
        (1usize..4, prop::sample::select(TEXTS)).prop_map(|(n, t)| Some(t.repeat(n))),
    ]
}

fn reasoning() -> impl Strategy<Value = ReasoningItem> {
    let item = |provider: &str, kind: &str, data: String| ReasoningItem {
        provider: provider.into(),
        kind: kind.into(),
        data,
    };
    prop_oneof![
        prop::sample::select(TEXTS).prop_map(move |t| item(
            "anthropic",
            "thinking",
            json!({"type": "thinking", "thinking": t, "signature": "c2lnbmF0dXJl"}).to_string()
        )),
        Just(item(
            "anthropic",
            "thinking",
            r#"{"type":"thinking","thinking":"cut","signature":""}"#.into()
        )),
        prop::sample::select(TEXTS).prop_map(move |t| item(
            "openai-responses",
            "reasoning",
            json!({"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": t}],
                "encrypted_content": "gAAAAB+/="})
            .to_string()
        )),
        Just(item(
            "openai-responses",
            "reasoning",
            r#"{"type":"message"}"#.into()
        )),
    ]
}

fn assistant() -> impl Strategy<Value = ChatMessage> {
    (
        text(),
        prop::collection::vec((0usize..3, prop::sample::select(ARGS)), 0..3),
        prop::collection::vec(reasoning(), 0..3),
        any::<bool>(),
    )
        .prop_map(|(content, calls, reasoning, record)| {
            let calls: Vec<ToolCall> = calls
                .iter()
                .enumerate()
                .map(|(i, (id, args))| ToolCall::new(format!("call_{id}_{i}"), "read", *args))
                .collect();
            let mut m = ChatMessage::assistant_calls(calls.clone());
            m.content = content;
            m.reasoning = reasoning;
            if record {
                // The calls first, then reasoning, then the text split in two: an order the
                // request rebuilds from the record only.
                let len = m.content.as_deref().map_or(0, str::len);
                let half = m.content.as_deref().map_or(0, |c| {
                    (0..=len / 2)
                        .rev()
                        .find(|i| c.is_char_boundary(*i))
                        .unwrap_or(0)
                });
                let mut parts: Vec<serde_json::Value> =
                    calls.iter().map(|_| json!("tool_call")).collect();
                parts.push(json!({"text": half}));
                parts.extend(m.reasoning.iter().map(|_| json!("reasoning")));
                parts.push(json!({"text": len - half}));
                for provider in ["anthropic", "openai-responses"] {
                    m.reasoning.push(ReasoningItem {
                        provider: provider.into(),
                        kind: crate::block_order::ORDER.into(),
                        data: serde_json::Value::Array(parts.clone()).to_string(),
                    });
                }
            }
            m
        })
}

fn message() -> impl Strategy<Value = ChatMessage> {
    prop_oneof![
        text().prop_map(|c| ChatMessage {
            role: "user".into(),
            content: c,
            ..Default::default()
        }),
        assistant(),
        (0usize..3, 0usize..3, text(), any::<bool>()).prop_map(|(id, i, c, is_error)| {
            ChatMessage {
                role: "tool".into(),
                content: c,
                tool_call_id: Some(format!("call_{id}_{i}")),
                tool_name: Some("read".into()),
                is_error,
                ..Default::default()
            }
        }),
        text().prop_map(|c| ChatMessage {
            role: "system".into(),
            content: c,
            ..Default::default()
        }),
    ]
}

/// A context file: a system prompt (`system`), a summary (`summary`), the messages, blank
/// lines where `blanks` says (one of white space only, long enough to be a long line).
fn file(system: bool, summary: bool, messages: &[ChatMessage], blanks: &[bool]) -> String {
    let mut all = Vec::new();
    if system {
        all.push(ChatMessage::text(
            "system",
            "You are a coding agent; read before you write.",
        ));
    }
    if summary {
        all.push(summary_message(2, 30, "the agent read three files"));
    }
    all.extend_from_slice(messages);
    let mut out = String::new();
    for (i, m) in all.iter().enumerate() {
        if blanks.get(i).copied().unwrap_or(false) {
            out.push_str(&" ".repeat(60));
            out.push_str("\r\n");
        }
        out.push_str(&serde_json::to_string(m).unwrap());
        out.push('\n');
    }
    out
}

fn anthropic(text: &str, thinking: bool, limits: Limits) -> Result<Vec<u8>, String> {
    let settings = AnthropicSettings {
        model: "claude-x",
        max_tokens: 4096,
        temperature: None,
        tools: &[],
        thinking: thinking.then_some(Thinking::Budget(1024)),
        stream: false,
    };
    let mut out = Vec::new();
    crate::anthropic::request::write_request_limited(
        || Ok(Cursor::new(text.as_bytes())),
        "current.jsonl",
        &mut out,
        &settings,
        limits,
    )
    .map(|w| {
        out.extend_from_slice(format!("{w:?}").as_bytes());
        out
    })
    .map_err(|e| e.to_string())
}

fn responses(text: &str, limits: Limits) -> Result<Vec<u8>, String> {
    let settings = ResponsesSettings {
        model: "o4-mini",
        ..Default::default()
    };
    let mut out = Vec::new();
    crate::responses::request::write_request_limited(
        Cursor::new(text.as_bytes()),
        "current.jsonl",
        &mut out,
        &settings,
        limits,
    )
    .map(|w| {
        out.extend_from_slice(format!("{w:?}").as_bytes());
        out
    })
    .map_err(|e| e.to_string())
}

fn lossy(r: Result<Vec<u8>, String>) -> Result<String, String> {
    r.map(|b| String::from_utf8_lossy(&b).into_owned())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn long_lines_give_the_bodies_of_whole_lines(
        system in any::<bool>(),
        summary in any::<bool>(),
        messages in prop::collection::vec(message(), 0..14),
        blanks in prop::collection::vec(any::<bool>(), 0..16),
        thinking in any::<bool>(),
    ) {
        let text = file(system, summary, &messages, &blanks);
        prop_assert_eq!(
            lossy(anthropic(&text, thinking, SMALL)),
            lossy(anthropic(&text, thinking, WHOLE))
        );
        prop_assert_eq!(lossy(responses(&text, SMALL)), lossy(responses(&text, WHOLE)));
    }
}

/// A broken line among long ones is reported as the whole-line path reports it.
#[test]
fn a_bad_long_line_gives_the_whole_line_error() {
    for bad in [
        r#"{"role":"user","content":"a long enough text \ud800 here","x":1}"#,
        r#"{"role":"user","content":"a long enough text","extra":"tab	in it here"}"#,
        r#"{"role":"user","content":"a long enough text here","content":"again, twice"}"#,
    ] {
        let text = format!(
            "{}\n{bad}\n",
            serde_json::to_string(&ChatMessage::text("user", "first words of the task")).unwrap()
        );
        let whole = anthropic(&text, false, WHOLE).unwrap_err();
        assert!(
            whole.starts_with("current.jsonl line 2: not valid"),
            "{whole}"
        );
        assert_eq!(anthropic(&text, false, SMALL).unwrap_err(), whole);
        let whole = responses(&text, WHOLE).unwrap_err();
        assert_eq!(responses(&text, SMALL).unwrap_err(), whole);
    }
}

/// Long lines of the usual kinds (a long reply with a call, its long result, a long user
/// text) are spliced, not read whole, by both formats, and give the whole-line bodies. (The
/// first user message is not one: Anthropic's request decodes it, to see whether it is a
/// compression's summary.)
#[test]
fn usual_long_lines_are_spliced() {
    let long = TEXTS[3].repeat(3);
    let call = ToolCall::new("call_0_0", "read", r#"{"n":1}"#);
    let mut reply = ChatMessage::assistant_calls(vec![call.clone()]);
    reply.content = Some(long.clone());
    let messages = [
        ChatMessage::text("user", "go"),
        ChatMessage::text("user", &long),
        reply,
        ChatMessage::tool_result(&call, &long),
        ChatMessage::text("user", "ok"),
    ];
    let text = file(true, false, &messages, &[]);
    let spliced = || crate::long_line::SPLICED.with(std::cell::Cell::get);
    for thinking in [false, true] {
        let before = spliced();
        let body = anthropic(&text, thinking, SMALL);
        assert_eq!(spliced() - before, 3);
        assert_eq!(lossy(body), lossy(anthropic(&text, thinking, WHOLE)));
    }
    let before = spliced();
    let body = responses(&text, SMALL);
    assert_eq!(spliced() - before, 3);
    assert_eq!(lossy(body), lossy(responses(&text, WHOLE)));
}
