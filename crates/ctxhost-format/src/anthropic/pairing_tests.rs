//! Properties of the request body over random histories: whatever the context file holds
//! (parallel calls answered in any order, blank lines, unanswered calls, orphan and duplicate
//! results, odd ids, consecutive same-role messages), every `tool_use` has exactly one
//! `tool_result` in the next user turn, and the body keeps the API's other rules. A history that
//! keeps the host's invariants is sent without any repair.

use proptest::prelude::*;
use serde_json::Value;

use super::request::{RequestSettings, write_request};
use crate::compress::summary_message;
use crate::{ChatMessage, ToolCall};

/// Ids drawn for tool calls and results: repeated ones, ones the API refuses, an empty one.
const IDS: &[&str] = &[
    "call_1", "call_2", "toolu_x", "a.b", "a_b", "", "fc 7", "call_1_2",
];
const TEXTS: &[&str] = &["", "  \n", "go on", "上下文压缩 🚀", "say \"hi\"\n\tplease"];
const ARGS: &[&str] = &[r#"{"path":"a"}"#, "", "{broken", "[1,2]", r#"{"n":1}"#];

fn text() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        prop::sample::select(TEXTS).prop_map(|t| Some(t.to_string())),
    ]
}

fn call() -> impl Strategy<Value = ToolCall> {
    (
        prop::sample::select(IDS),
        prop::sample::select(&["read", "list"][..]),
        prop::sample::select(ARGS),
    )
        .prop_map(|(id, name, args)| ToolCall::new(id, name, args))
}

/// One message of any shape (a broken history mixes these freely).
fn any_message() -> impl Strategy<Value = ChatMessage> {
    prop_oneof![
        text().prop_map(|c| ChatMessage {
            role: "user".into(),
            content: c,
            ..Default::default()
        }),
        (text(), prop::collection::vec(call(), 0..4)).prop_map(|(c, calls)| ChatMessage {
            role: "assistant".into(),
            content: c,
            tool_calls: Some(calls),
            ..Default::default()
        }),
        (prop::sample::select(IDS), text()).prop_map(|(id, c)| ChatMessage {
            role: "tool".into(),
            content: c,
            tool_call_id: Some(id.to_string()),
            tool_name: Some("read".into()),
            ..Default::default()
        }),
        text().prop_map(|c| ChatMessage {
            role: "system".into(),
            content: c,
            ..Default::default()
        }),
    ]
}

/// A step as the agent loop writes it: an assistant message with 1–4 calls (unique ids) and
/// their results in a shuffled order, or a text message.
fn valid_step(step: usize) -> impl Strategy<Value = Vec<ChatMessage>> {
    prop_oneof![
        (1usize..5, text(), any::<u64>()).prop_map(move |(n, content, seed)| {
            let calls: Vec<ToolCall> = (0..n)
                .map(|i| ToolCall::new(format!("call_{step}_{i}"), "read", ARGS[i % ARGS.len()]))
                .collect();
            let mut results: Vec<ChatMessage> = calls
                .iter()
                .map(|c| ChatMessage::tool_result(c, format!("result of {}", c.id)))
                .collect();
            // A deterministic shuffle from the seed.
            for i in (1..results.len()).rev() {
                results.swap(i, (seed as usize >> (i % 8)) % (i + 1));
            }
            let mut step = vec![ChatMessage {
                content,
                ..ChatMessage::assistant_calls(calls)
            }];
            step.extend(results);
            step
        }),
        prop::sample::select(&["user", "assistant"][..])
            .prop_map(|role| vec![ChatMessage::text(role, "some words")]),
    ]
}

/// A context file: optional system prompt and summary, then the messages, with blank lines.
fn file(system: bool, summary: bool, messages: &[ChatMessage], blanks: &[bool]) -> String {
    let mut all = Vec::new();
    if system {
        all.push(ChatMessage::text("system", "You are a coding agent."));
    }
    if summary {
        all.push(summary_message(2, 30, "the agent read three files"));
    }
    all.extend_from_slice(messages);
    let mut out = String::new();
    for (i, m) in all.iter().enumerate() {
        if blanks.get(i).copied().unwrap_or(false) {
            out.push_str("\n  \n");
        }
        out.push_str(&serde_json::to_string(m).unwrap());
        out.push('\n');
    }
    out
}

fn build(text: &str) -> Option<(Value, super::Written)> {
    let settings = RequestSettings {
        model: "m",
        max_tokens: 100,
        temperature: None,
        tools: &[],
        thinking: None,
        stream: false,
    };
    let mut out = Vec::new();
    match write_request(
        || Ok(std::io::Cursor::new(text.as_bytes())),
        "current.jsonl",
        &mut out,
        &settings,
    ) {
        Ok(w) => Some((serde_json::from_slice(&out).expect("the body is JSON"), w)),
        Err(super::BodyError::NoMessages) => None,
        Err(e) => panic!("{e}"),
    }
}

/// The body written with the plan from the end of the file, and with the plan from a run over
/// the whole file (`None` when there is nothing to send).
fn both_plans(text: &str) -> Option<(Vec<u8>, Vec<u8>)> {
    let settings = RequestSettings {
        model: "m",
        max_tokens: 100,
        temperature: None,
        tools: &[],
        thinking: None,
        stream: false,
    };
    let open = || Ok(std::io::Cursor::new(text.as_bytes()));
    let (mut tail, mut whole) = (Vec::new(), Vec::new());
    let a = write_request(open, "current.jsonl", &mut tail, &settings);
    let b =
        super::request::write_request_planned_whole(open, "current.jsonl", &mut whole, &settings);
    match (a, b) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a, b);
            Some((tail, whole))
        }
        (Err(super::BodyError::NoMessages), Err(super::BodyError::NoMessages)) => None,
        (a, b) => panic!("{a:?} / {b:?}"),
    }
}

fn kind(block: &Value) -> &str {
    block["type"].as_str().unwrap()
}

/// The API's rules on the `messages` of `body` (panics naming the broken one).
fn check_rules(body: &Value) {
    let turns = body["messages"].as_array().unwrap();
    assert!(!turns.is_empty());
    assert_eq!(turns[0]["role"], "user", "the first turn is the user's");
    let mut ids = std::collections::HashSet::new();
    let mut breakpoints = body["system"]
        .as_array()
        .map(|s| {
            s.iter()
                .filter(|b| b.get("cache_control").is_some())
                .count()
        })
        .unwrap_or(0);
    for (i, turn) in turns.iter().enumerate() {
        if i > 0 {
            assert_ne!(
                turn["role"],
                turns[i - 1]["role"],
                "turn {i}: roles alternate"
            );
        }
        let blocks = turn["content"].as_array().unwrap();
        assert!(!blocks.is_empty(), "turn {i} has blocks");
        breakpoints += blocks
            .iter()
            .filter(|b| b.get("cache_control").is_some())
            .count();
        for b in blocks {
            if kind(b) == "text" {
                assert!(
                    !b["text"].as_str().unwrap().trim().is_empty(),
                    "turn {i}: blank text"
                );
            }
        }
        let uses: Vec<&str> = blocks
            .iter()
            .filter(|b| kind(b) == "tool_use")
            .map(|b| b["id"].as_str().unwrap())
            .collect();
        for b in blocks.iter().filter(|b| kind(b) == "tool_use") {
            assert!(b["input"].is_object(), "turn {i}: input is an object");
        }
        for id in &uses {
            assert!(
                !id.is_empty()
                    && id
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
                "turn {i}: id {id:?} has characters the API refuses"
            );
            assert!(ids.insert(id.to_string()), "turn {i}: id {id} used twice");
        }
        if turn["role"] == "user" {
            // Results first, then text; each answers a tool_use of the turn before.
            let first_text = blocks
                .iter()
                .position(|b| kind(b) == "text")
                .unwrap_or(blocks.len());
            assert!(
                blocks[first_text..].iter().all(|b| kind(b) == "text"),
                "turn {i}: a tool_result after text"
            );
        } else {
            assert!(
                uses.is_empty() || i + 1 < turns.len(),
                "turn {i}: tool_use with no next turn"
            );
        }
        // Every tool_use has exactly one tool_result in the next user turn, and every
        // tool_result answers a tool_use of the turn before.
        let results: Vec<&str> = turns
            .get(i + 1)
            .map(|next| {
                next["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|b| kind(b) == "tool_result")
                    .map(|b| b["tool_use_id"].as_str().unwrap())
                    .collect()
            })
            .unwrap_or_default();
        if turn["role"] == "assistant" {
            let mut a = uses;
            let mut b = results;
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(
                a,
                b,
                "turn {i}: tool_use ids vs tool_result ids of turn {}",
                i + 1
            );
        }
    }
    if let Some(first) = turns.first() {
        let results = first["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| kind(b) == "tool_result")
            .count();
        assert_eq!(results, 0, "the first turn answers nothing");
    }
    assert!(
        breakpoints <= super::cache::MAX_BREAKPOINTS,
        "{breakpoints} breakpoints"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_tool_use_has_one_result_in_the_next_user_turn(
        system in any::<bool>(),
        summary in any::<bool>(),
        messages in prop::collection::vec(any_message(), 0..24),
        blanks in prop::collection::vec(any::<bool>(), 0..30),
    ) {
        if let Some((body, _)) = build(&file(system, summary, &messages, &blanks)) {
            check_rules(&body);
        }
    }

    /// The breakpoints found reading only the end of the file are those a run over the whole
    /// file finds, whatever the history (broken or valid, long runs of tool results).
    #[test]
    fn the_plan_from_the_end_is_the_plan_of_the_whole_file(
        system in any::<bool>(),
        summary in any::<bool>(),
        messages in prop::collection::vec(any_message(), 0..40),
        steps in (0usize..10).prop_flat_map(|n| {
            (0..n).map(valid_step).collect::<Vec<_>>()
        }),
        blanks in prop::collection::vec(any::<bool>(), 0..60),
    ) {
        let mut all = messages;
        all.extend(steps.into_iter().flatten());
        if let Some((tail, whole)) = both_plans(&file(system, summary, &all, &blanks)) {
            prop_assert_eq!(String::from_utf8(tail).unwrap(), String::from_utf8(whole).unwrap());
        }
    }

    #[test]
    fn a_valid_history_is_sent_whole_and_unrepaired(
        summary in any::<bool>(),
        steps in (0usize..12).prop_flat_map(|n| {
            (0..n).map(valid_step).collect::<Vec<_>>()
        }),
        blanks in prop::collection::vec(any::<bool>(), 0..40),
    ) {
        let mut messages = vec![ChatMessage::text("user", "Fix the bug.")];
        messages.extend(steps.into_iter().flatten());
        let (body, written) = build(&file(true, summary, &messages, &blanks)).unwrap();
        check_rules(&body);
        prop_assert!(written.repairs.is_empty(), "{:?}", written.repairs);
        prop_assert_eq!(written.messages as usize, messages.len() + 1 + summary as usize);
        let count = |t: &str| body["messages"].as_array().unwrap().iter()
            .flat_map(|m| m["content"].as_array().unwrap())
            .filter(|b| kind(b) == t)
            .count();
        let calls: usize = messages.iter().map(|m| m.calls().len()).sum();
        prop_assert_eq!(count("tool_use"), calls);
        prop_assert_eq!(count("tool_result"), calls);
    }
}
