//! Context compression on the host side (DESIGN.md §5–§6, issue 4): the builtin compressors
//! `builtin:llm-summarizer` and `builtin:observation-masking`, driven through
//! `ctxhost::compaction::compact_if_needed` on contexts built with `builtin:jsonl-store`, with
//! a scripted fake `LlmImport` (no HTTP) that records every summary request it receives.
//!
//! - a property test over random histories (text, CJK, emoji, tool calls, parallel tool calls,
//!   repeated call ids, very long tool results, phases ending with large tool results as the
//!   newest messages), several compressions per history with either compressor, the kept tail
//!   bounded by count only or by tokens too (`plan_tail`): the invariants hold, the system
//!   prompt is unchanged, the kept tail is exactly
//!   the last messages of the old context (older results of the newest group cut as planned), summary ranges match messages.jsonl, masked results
//!   name the tools.jsonl line that holds their text, every summary request fits the window,
//!   messages.jsonl only grows, and a failure leaves every file as it was;
//! - targeted tests: LLM failure and empty reply, a summary that is not smaller, threshold and
//!   keep_recent, tool call groups at the cut, no compression loop, a giant message cut on a
//!   character boundary, chunked summaries merged, a second summary carrying the first's range,
//!   masking details.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ctxhost::compaction::{CompactionError, CompactionOutcome};
use ctxhost::config::DEFAULT_SUMMARY_PROMPT;
use ctxhost::invariants::check_context_file;
use ctxhost::runtime::{CompressConfig, RuntimeError};
use ctxhost_format::compress::{
    SHRUNK_NOTE_PREFIX, is_masked, is_summary_line, parse_summary_range, plan_tail, render_message,
    summary_content,
};
use ctxhost_format::{
    ChatMessage, HistoryLine, SummaryLine, ToolCall, ToolLine, estimate_message_tokens,
    estimate_tokens,
};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};

mod fixture;
use fixture::*;

// ---------------------------------------------------------------------------------------------
// The model check of one compaction step

/// Files and context before a compaction step.
struct Before {
    context: Vec<ChatMessage>,
    origins: Vec<Origin>,
    current: Vec<u8>,
    messages: Vec<u8>,
    summaries: Vec<u8>,
    tokens: u64,
}

fn snapshot(task: &mut Task) -> Before {
    Before {
        context: task.context(),
        origins: task.origins.clone(),
        current: task.bytes("current.jsonl"),
        messages: task.bytes("messages.jsonl"),
        summaries: task.bytes("summaries.jsonl"),
        tokens: task.tokens(),
    }
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

/// Checks what one compaction step did against the model; updates the task's origins.
/// Returns a label of the outcome (for the case statistics).
fn check_step(
    task: &mut Task,
    kind: Kind,
    config: &CompressConfig,
    before: &Before,
    outcome: &Result<CompactionOutcome, CompactionError>,
    calls: &[LlmCall],
) -> Result<&'static str, String> {
    let limit = (config.context_length as f64 * config.threshold) as u64;
    ensure!(
        task.leftovers().is_empty(),
        "temporaries left behind: {:?}",
        task.leftovers()
    );
    requests_fit(calls, config)?;
    ensure!(
        calls.len() <= 15,
        "{} summary requests: more than 8 chunks and their 7 merges",
        calls.len()
    );
    let unchanged = |task: &Task| -> Result<(), String> {
        ensure!(
            task.bytes("current.jsonl") == before.current,
            "current.jsonl changed"
        );
        ensure!(
            task.bytes("messages.jsonl") == before.messages,
            "messages.jsonl changed"
        );
        ensure!(
            task.bytes("summaries.jsonl") == before.summaries,
            "summaries.jsonl changed"
        );
        Ok(())
    };
    let kinds = kinds(&before.context);
    let weights: Vec<u64> = before.context.iter().map(estimate_message_tokens).collect();
    let plan = plan_tail(
        &kinds,
        &weights,
        config.keep_recent_messages as usize,
        config.keep_recent_tokens,
    );
    let cut = plan.cut;
    let shrunk = |i: usize| plan.shrink.iter().any(|(j, _)| *j == i);

    let replaced = match outcome {
        Ok(CompactionOutcome::NotNeeded) => {
            ensure!(
                before.tokens <= limit,
                "not compressed at {} tokens over the limit {limit}",
                before.tokens
            );
            ensure!(
                calls.is_empty(),
                "the LLM was asked although nothing was compressed"
            );
            unchanged(task)?;
            return Ok("not needed");
        }
        Ok(CompactionOutcome::Compressed {
            before_tokens,
            after_tokens,
            ..
        }) => {
            ensure!(
                *before_tokens == before.tokens && *after_tokens <= limit,
                "token counts {before_tokens} → {after_tokens}"
            );
            "compressed"
        }
        Err(CompactionError::StillOverThreshold { tokens, .. }) => {
            ensure!(*tokens > limit, "StillOverThreshold at {tokens} ≤ {limit}");
            "still over threshold"
        }
        Err(CompactionError::Plugin(RuntimeError::Plugin { error, .. })) => {
            unchanged(task)?;
            let text = error.to_string();
            ensure!(before.tokens > limit, "compressed below the threshold");
            let documented = match kind {
                Kind::Summarizer if text.contains("nothing to summarise") => {
                    ensure!(
                        cut <= 1 && plan.shrink.is_empty(),
                        "\"nothing to summarise\" although the cut is at {cut} and {} result(s) can be cut: {text}",
                        plan.shrink.len()
                    );
                    "nothing to summarise"
                }
                Kind::Summarizer if text.contains("is not smaller than") => {
                    ensure!(cut > 1, "summarised with the cut at {cut}");
                    ensure!(
                        plan.shrink.is_empty(),
                        "gave up although older results of the kept part can be cut"
                    );
                    "summary not smaller"
                }
                Kind::Masking if text.contains("masking makes nothing smaller") => {
                    for (i, m) in before.context.iter().enumerate().skip(1) {
                        if i >= cut && !shrunk(i) {
                            continue;
                        }
                        let c = m.content.as_deref().unwrap_or("");
                        ensure!(
                            m.role != "tool" || is_masked(c) || estimate_tokens(c) <= 40,
                            "\"nothing smaller\" but message {i} is a long unmasked tool result"
                        );
                    }
                    "nothing to mask"
                }
                _ => return Err(format!("undocumented compressor error: {text}")),
            };
            return Ok(documented);
        }
        Err(other) => {
            return Err(format!(
                "compaction rejected the compressor's result: {other}"
            ));
        }
    };

    // current.jsonl was replaced: check it against the model.
    let after = task.context();
    check_context_file(&task.dir_handle(), "current.jsonl", false).map_err(|e| e.to_string())?;
    let first_line = |b: &[u8]| b.split(|c| *c == b'\n').next().map(<[u8]>::to_vec);
    ensure!(
        first_line(&task.bytes("current.jsonl")) == first_line(&before.current),
        "the system prompt line changed"
    );
    ensure!(
        tokens_of(&after) < before.tokens,
        "not smaller: {} → {}",
        before.tokens,
        tokens_of(&after)
    );
    ensure!(
        tokens_of(&after) == task.tokens(),
        "the store's token count disagrees with current.jsonl"
    );
    let messages_now = task.bytes("messages.jsonl");
    ensure!(
        messages_now.starts_with(&before.messages),
        "messages.jsonl was rewritten, not appended to"
    );

    // The kept part: the old context's tail, except the older results the plan cuts.
    let check_kept = |after_kept: &[ChatMessage], from: usize| -> Result<(), String> {
        ensure!(
            after_kept.len() == before.context.len() - from,
            "{} kept messages, expected {}",
            after_kept.len(),
            before.context.len() - from
        );
        for (j, new) in after_kept.iter().enumerate() {
            let i = from + j;
            let old = &before.context[i];
            if shrunk(i) {
                ensure!(
                    i >= cut && i + 1 < before.context.len(),
                    "cut message {i} is not in the kept part or is the newest"
                );
                let c = new.content.as_deref().unwrap_or("");
                ensure!(
                    c.contains(SHRUNK_NOTE_PREFIX)
                        && estimate_tokens(c)
                            < estimate_tokens(old.content.as_deref().unwrap_or("")),
                    "message {i} is not cut: {c:.80}"
                );
                ensure!(
                    ChatMessage {
                        content: old.content.clone(),
                        ..new.clone()
                    } == *old,
                    "message {i}: more than its content changed"
                );
            } else {
                ensure!(new == old, "kept message {i} changed");
            }
        }
        Ok(())
    };
    let summarised = task.bytes("summaries.jsonl") != before.summaries;
    if kind == Kind::Summarizer && !summarised {
        // Only the older results of the kept part were cut: nothing else changes.
        ensure!(
            !plan.shrink.is_empty(),
            "replaced without a summary and nothing to cut"
        );
        ensure!(
            messages_now == before.messages,
            "messages.jsonl changed without a summary"
        );
        ensure!(
            after.len() == before.context.len(),
            "messages were dropped without a summary"
        );
        check_kept(&after[1..], 1)?;
        return Ok("cut older results only");
    }

    match kind {
        Kind::Summarizer => {
            ensure!(cut > 1, "compressed with nothing before the cut");
            ensure!(
                after.len() == 2 + before.context.len() - cut,
                "{} messages after, cut at {cut} of {}",
                after.len(),
                before.context.len()
            );
            check_kept(&after[2..], cut)?;
            let start = match before.origins[1] {
                Origin::Seq(s) | Origin::Summary(s, _) => s,
            };
            let end = match before.origins[cut - 1] {
                Origin::Seq(s) | Origin::Summary(_, s) => s,
            };
            let content = after[1].content.clone().unwrap_or_default();
            ensure!(
                after[1].role == "user",
                "the summary message has role {}",
                after[1].role
            );
            ensure!(
                parse_summary_range(&content) == Some((start, end)),
                "summary header {content:?}, expected {start}–{end}"
            );
            let text = content
                .split_once("):\n")
                .map(|(_, t)| t.to_string())
                .unwrap_or_default();
            ensure!(
                calls.last().and_then(|c| c.messages.last()).is_some(),
                "no LLM call for a summary"
            );
            // summaries.jsonl: one new line with this summary and range.
            ensure!(
                task.bytes("summaries.jsonl").starts_with(&before.summaries),
                "summaries.jsonl was rewritten"
            );
            let sums: Vec<SummaryLine> = read_jsonl(&task.path("summaries.jsonl"));
            let old_count = before.summaries.iter().filter(|b| **b == b'\n').count();
            ensure!(
                sums.len() == old_count + 1,
                "summaries.jsonl has {} lines, expected {}",
                sums.len(),
                old_count + 1
            );
            let s = sums.last().unwrap();
            ensure!(s.id == old_count as u64 + 1, "summary id {}", s.id);
            ensure!(
                (s.start_seq, s.end_seq) == (start, end) && s.summary == text,
                "summaries.jsonl line {s:?}"
            );
            ensure!(
                s.original_tokens == tokens_of(&before.context[1..cut]),
                "original_tokens {}",
                s.original_tokens
            );
            ensure!(
                s.summary_tokens == estimate_tokens(&text),
                "summary_tokens {}",
                s.summary_tokens
            );
            // messages.jsonl: exactly one more line, the summary.
            let history: Vec<HistoryLine> = read_jsonl(&task.path("messages.jsonl"));
            let old_lines = before.messages.iter().filter(|b| **b == b'\n').count();
            ensure!(
                history.len() == old_lines + 1,
                "messages.jsonl grew by {} lines",
                history.len() - old_lines
            );
            let h = history.last().unwrap();
            ensure!(
                h.summary_id == Some(s.id) && h.content.as_deref() == Some(text.as_str()),
                "history line {h:?}"
            );
            ensure!(h.seq == old_lines as u64 + 1, "summary seq {}", h.seq);
            let mut origins = vec![before.origins[0], Origin::Summary(start, end)];
            origins.extend_from_slice(&before.origins[cut..]);
            task.origins = origins;
        }
        Kind::Masking => {
            ensure!(
                messages_now == before.messages,
                "masking changed messages.jsonl"
            );
            ensure!(
                task.bytes("summaries.jsonl") == before.summaries,
                "masking changed summaries.jsonl"
            );
            ensure!(
                after.len() == before.context.len(),
                "masking changed the number of messages"
            );
            let tools: Vec<ToolLine> = if task.path("tools.jsonl").exists() {
                read_jsonl(&task.path("tools.jsonl"))
            } else {
                Vec::new()
            };
            let mut masked = 0;
            for (i, (old, new)) in before.context.iter().zip(&after).enumerate() {
                if old == new {
                    continue;
                }
                ensure!(
                    (i < cut || shrunk(i)) && old.role == "tool",
                    "message {i} ({}) changed although it is not an old tool result",
                    old.role
                );
                let old_content = old.content.as_deref().unwrap_or("");
                ensure!(!is_masked(old_content), "message {i} was masked twice");
                let same_otherwise = ChatMessage {
                    content: old.content.clone(),
                    ..new.clone()
                } == *old;
                ensure!(same_otherwise, "message {i}: more than the content changed");
                let placeholder = new.content.as_deref().unwrap_or("");
                ensure!(
                    is_masked(placeholder),
                    "message {i}: {placeholder:?} is not a placeholder"
                );
                ensure!(
                    estimate_tokens(placeholder) < estimate_tokens(old_content),
                    "message {i} grew"
                );
                let id = old.tool_call_id.as_deref().unwrap_or("");
                match placeholder.strip_prefix("[tool result masked: full text in tools.jsonl seq ")
                {
                    Some(rest) => {
                        let seq: u64 = rest
                            .trim_end_matches(']')
                            .parse()
                            .map_err(|e| format!("{placeholder}: {e}"))?;
                        let line = tools
                            .iter()
                            .find(|t| t.seq == seq)
                            .ok_or(format!("no tools.jsonl seq {seq}"))?;
                        ensure!(
                            line.tool_call_id.as_deref() == Some(id),
                            "seq {seq} answers {:?}, not {id}",
                            line.tool_call_id
                        );
                        ensure!(
                            line.result.as_deref() == Some(old_content)
                                || line
                                    .result
                                    .as_deref()
                                    .is_some_and(|full| cut_from(old_content, full)),
                            "tools.jsonl seq {seq} holds another result than message {i}"
                        );
                    }
                    None => {
                        ensure!(
                            placeholder.contains(id),
                            "placeholder {placeholder:?} names neither a seq nor {id}"
                        );
                        ensure!(
                            !tools.iter().any(|t| t.tool_call_id.as_deref() == Some(id)),
                            "{id} is in tools.jsonl"
                        );
                    }
                }
                masked += 1;
            }
            ensure!(
                masked > 0,
                "masking replaced the context without masking anything"
            );
        }
    }
    Ok(replaced)
}

/// Whether `content` is `full` cut by an earlier compression (its head kept, then a note).
fn cut_from(content: &str, full: &str) -> bool {
    content.contains(SHRUNK_NOTE_PREFIX)
        && content
            .split_once("\n[... ")
            .is_some_and(|(head, _)| full.starts_with(head))
}

// ---------------------------------------------------------------------------------------------
// Random histories

#[derive(Debug, Clone)]
enum Turn {
    User(String),
    Assistant(String),
    /// An assistant message with 1–3 (parallel) tool calls, then their results in a rotated
    /// order: (tool name, result).
    Tools {
        text: Option<String>,
        calls: Vec<(String, String)>,
        rotate: usize,
    },
}

fn arb_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-zA-Z0-9 .,:;!?(){}\"'/\\\\\n-]{1,160}",
        2 => "[\u{4e00}-\u{9fa5}\u{3040}-\u{30ff}。、 ]{1,80}",
        1 => "[a-zé中😀 ]{1,80}",
    ]
}

/// Long text of about `chars` characters; `flavour` picks ASCII, CJK, or a 1–4-byte mix.
fn long_text(chars: usize, flavour: u8) -> String {
    let unit = match flavour % 3 {
        0 => "line of build output: cargo test -- 0123456789\n",
        1 => "上下文压缩测试，工具结果很长。",
        _ => "résumé 😀 日本語 ok; ",
    };
    unit.chars().cycle().take(chars).collect()
}

fn arb_result() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => arb_text(),
        1 => (200usize..20_000, any::<u8>()).prop_map(|(n, f)| long_text(n, f)),
    ]
}

fn arb_turn() -> impl Strategy<Value = Turn> {
    prop_oneof![
        3 => arb_text().prop_map(Turn::User),
        2 => arb_text().prop_map(Turn::Assistant),
        3 => (
            proptest::option::of(arb_text()),
            proptest::collection::vec(("[a-z_]{3,12}", arb_result()), 1..=3),
            any::<usize>()
        )
            .prop_map(|(text, calls, rotate)| Turn::Tools { text, calls, rotate }),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    system: String,
    /// Each phase: turns added, then one compaction step with that compressor.
    phases: Vec<(Vec<Turn>, Kind)>,
    keep: u32,
    /// Bound the kept tail by tokens as the host does (half the threshold), or by count only
    /// (`keep_recent_tokens` 0: the count bound only).
    keep_tokens: bool,
    /// context_length = first phase's tokens × 100 / pct (at least 700, so a 1024-token
    /// reserve is sometimes more than half the window).
    pct: u64,
    reserve: u32,
    repeat_ids: bool,
    log_tools: bool,
}

/// A tool-call turn whose 1–3 results are all long: what a phase may end with, so the newest
/// messages of a history are large tool results (the kept tail's token bound at work).
fn arb_big_results() -> impl Strategy<Value = Turn> {
    (
        proptest::collection::vec(
            (
                "[a-z_]{3,12}",
                (1_000usize..16_000, any::<u8>()).prop_map(|(n, f)| long_text(n, f)),
            ),
            1..=3,
        ),
        any::<usize>(),
    )
        .prop_map(|(calls, rotate)| Turn::Tools {
            text: None,
            calls,
            rotate,
        })
}

fn arb_case() -> impl Strategy<Value = Case> {
    let kind = prop_oneof![Just(Kind::Summarizer), Just(Kind::Masking)];
    let phase = (
        proptest::collection::vec(arb_turn(), 1..12),
        proptest::option::weighted(0.4, arb_big_results()),
        kind,
    )
        .prop_map(|(mut turns, big, kind)| {
            turns.extend(big);
            (turns, kind)
        });
    (
        arb_text(),
        proptest::collection::vec(phase, 1..=3),
        0u32..8,
        proptest::bool::weighted(0.7),
        50u64..150,
        prop_oneof![Just(64u32), Just(256), Just(1024)],
        any::<bool>(),
        proptest::bool::weighted(0.85),
    )
        .prop_map(
            |(system, phases, keep, keep_tokens, pct, reserve, repeat_ids, log_tools)| Case {
                system,
                phases,
                keep,
                keep_tokens,
                pct,
                reserve,
                repeat_ids,
                log_tools,
            },
        )
}

fn add_turn(task: &mut Task, turn: &Turn, repeat_ids: bool) {
    match turn {
        Turn::User(t) => task.add(&user(t)),
        Turn::Assistant(t) => task.add(&assistant(t)),
        Turn::Tools {
            text,
            calls: cs,
            rotate,
        } => {
            let ids: Vec<String> = (0..cs.len()).map(|i| task.call_id(i, repeat_ids)).collect();
            let message = ChatMessage {
                role: "assistant".into(),
                content: text.clone(),
                tool_calls: Some(
                    ids.iter()
                        .zip(cs)
                        .map(|(id, (name, _))| {
                            ToolCall::new(id.as_str(), name.as_str(), r#"{"a":1}"#)
                        })
                        .collect(),
                ),
                ..Default::default()
            };
            task.add(&message);
            let mut results: Vec<ChatMessage> = ids
                .iter()
                .zip(cs)
                .map(|(id, (name, content))| result(id, name, content))
                .collect();
            let n = results.len();
            results.rotate_left(rotate % n);
            task.add_all(&results);
        }
    }
}

fn run_case(case: &Case, stats: &mut HashMap<&'static str, u32>) -> Result<(), String> {
    let mut task = Task::new(&case.system);
    task.log_tools = case.log_tools;
    let mut config: Option<CompressConfig> = None;
    for (turns, kind) in &case.phases {
        for turn in turns {
            add_turn(&mut task, turn, case.repeat_ids);
        }
        let tokens = task.tokens();
        let config = config.get_or_insert_with(|| {
            let context_length = (tokens * 100 / case.pct).max(700);
            CompressConfig {
                context_length,
                threshold: 0.7,
                keep_recent_messages: case.keep,
                // The host's default: half the threshold in tokens.
                keep_recent_tokens: if case.keep_tokens {
                    (context_length as f64 * 0.7 / 2.0) as u64
                } else {
                    0
                },
                summary_prompt: DEFAULT_SUMMARY_PROMPT.to_string(),
                reserve_output_tokens: case.reserve,
            }
        });
        let before = snapshot(&mut task);
        let llm = FakeLlm::new(task.dir.path());
        let outcome = task.compact(*kind, config, &llm);
        let label = check_step(&mut task, *kind, config, &before, &outcome, &llm.calls())
            .map_err(|e| format!("{kind:?} phase: {e} (outcome {outcome:?})"))?;
        *stats.entry(label).or_default() += 1;
        if llm.calls().len() > 1 {
            *stats.entry("summaries in several requests").or_default() += 1;
        }
        if label != "not needed"
            && case.keep_tokens
            && before
                .context
                .last()
                .is_some_and(|m| m.role == "tool" && estimate_message_tokens(m) > 1_000)
        {
            *stats
                .entry("steps with a large newest tool result")
                .or_default() += 1;
        }
        if label != "not needed" {
            *stats
                .entry(if *kind == Kind::Summarizer {
                    "steps: summarizer"
                } else {
                    "steps: masking"
                })
                .or_default() += 1;
        }
    }
    Ok(())
}

/// Outcomes the generator must reach, or the property says little. "cut older results only"
/// is the rarest: about 1 history in 300.
const REQUIRED_OUTCOMES: [&str; 7] = [
    "compressed",
    "not needed",
    "steps: summarizer",
    "steps: masking",
    "still over threshold",
    "steps with a large newest tool result",
    "cut older results only",
];

/// Thousands of random compaction steps: the invariants and the model hold whatever the
/// history and the compressor. Cases: `COMPRESSION_CASES` (default 1000 histories, up to 3
/// steps each; about 30 s here). Histories are random (a new seed each run); when an outcome
/// of [`REQUIRED_OUTCOMES`] was not reached, batches of 500 more are run (at most 8), so a rare
/// outcome missing from one sample does not fail the test, and the test still fails when the
/// generator can no longer reach it.
#[test]
fn random_histories_compress_safely_with_either_compressor() {
    let cases: u32 = std::env::var("COMPRESSION_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let stats = Arc::new(Mutex::new(HashMap::new()));
    let started = Instant::now();
    let missing = |stats: &HashMap<&'static str, u32>| -> Vec<&'static str> {
        REQUIRED_OUTCOMES
            .into_iter()
            .filter(|label| stats.get(label).copied().unwrap_or(0) == 0)
            .collect()
    };
    let mut run = 0u32;
    let mut batch = cases;
    loop {
        let mut runner = TestRunner::new(ProptestConfig {
            cases: batch,
            failure_persistence: None,
            ..ProptestConfig::default()
        });
        let result = runner.run(&arb_case(), |case| {
            let mut s = stats.lock().unwrap();
            run_case(&case, &mut s).map_err(TestCaseError::fail)
        });
        run += batch;
        // A counterexample fails the test at once, whatever the coverage.
        result.unwrap();
        let stats = stats.lock().unwrap();
        if missing(&stats).is_empty() || run >= cases + 8 * 500 {
            break;
        }
        batch = 500;
    }
    let stats = stats.lock().unwrap();
    let mut lines: Vec<String> = stats.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    lines.sort();
    println!(
        "{run} cases in {:.1?}; outcomes: {}",
        started.elapsed(),
        lines.join(", ")
    );
    let missing = missing(&stats);
    assert!(
        missing.is_empty(),
        "no case of {run} reached {missing:?}: {lines:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Targeted tests

/// A task of `turns` rounds (question, tool call, long result, answer) after a system prompt.
fn long_task(turns: usize) -> Task {
    let mut task = Task::new("You are a coding agent.");
    for t in 1..=turns {
        let id = format!("call_{t}");
        task.add(&user(&format!("step {t}: read file_{t}.rs")));
        task.add(&calls(&[&id], "read_text_file"));
        task.add(&result(
            &id,
            "read_text_file",
            &format!("// file {t}\n{}", "fn item() -> u32 { 42 }\n".repeat(20)),
        ));
        task.add(&assistant(&format!("file_{t}.rs returns 42 from item().")));
    }
    task
}

/// A window in which `task` is over the 0.7 threshold (its tokens are 80 % of it).
fn window_for(task: &mut Task) -> u64 {
    task.tokens() * 10 / 8
}

#[test]
fn summariser_failure_or_empty_reply_keeps_the_context() {
    for reply in [
        Err("HTTP 503 from http://127.0.0.1:9/v1/chat/completions after 3 attempts".to_string()),
        Ok("  \n\t ".into()),
    ] {
        let mut task = long_task(8);
        let cfg = config(window_for(&mut task), 3);
        let before = snapshot(&mut task);
        let llm = FakeLlm::new(task.dir.path()).script([reply.clone()]);
        let err = task.compact(Kind::Summarizer, &cfg, &llm).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, CompactionError::Plugin(_)), "{text}");
        assert!(
            text.contains("builtin:llm-summarizer") && text.contains("llm: summary request 1:"),
            "{text}"
        );
        match &reply {
            Err(e) => assert!(text.contains(e.as_str()), "{text}"),
            Ok(_) => assert!(text.contains("empty summary"), "{text}"),
        }
        assert_eq!(llm.calls().len(), 1);
        assert_eq!(
            task.bytes("current.jsonl"),
            before.current,
            "current.jsonl must stay byte-identical"
        );
        assert_eq!(task.bytes("messages.jsonl"), before.messages);
        assert!(
            !task.path("summaries.jsonl").exists(),
            "no summary may be recorded"
        );
        assert!(
            task.leftovers().is_empty(),
            "left behind {:?}",
            task.leftovers()
        );
        // The next attempt (the LLM is back) compresses normally.
        let llm = FakeLlm::new(task.dir.path());
        assert!(matches!(
            task.compact(Kind::Summarizer, &cfg, &llm),
            Ok(CompactionOutcome::Compressed { .. })
        ));
    }
}

#[test]
fn a_summary_that_is_not_smaller_is_rejected() {
    let mut task = long_task(6);
    let cfg = config(window_for(&mut task), 3);
    let before = snapshot(&mut task);
    // Every request (chunks and merge) gets the huge answer.
    let huge = "the same words again and again ".repeat(2_000);
    let llm = FakeLlm::new(task.dir.path()).script(std::iter::repeat_n(Ok(huge), 20));
    let err = task.compact(Kind::Summarizer, &cfg, &llm).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("is not smaller than") && text.contains("left as it was"),
        "{text}"
    );
    assert_eq!(task.bytes("current.jsonl"), before.current);
    assert_eq!(task.bytes("messages.jsonl"), before.messages);
    assert!(!task.path("summaries.jsonl").exists());
    assert!(
        task.leftovers().is_empty(),
        "left behind {:?}",
        task.leftovers()
    );
}

#[test]
fn threshold_and_keep_recent_are_honoured() {
    let mut task = Task::new("sys");
    for i in 0..10 {
        task.add(&user(&format!("question {i}: {}", "why ".repeat(30))));
        task.add(&assistant(&format!(
            "answer {i}: {}",
            "because ".repeat(30)
        )));
    }
    let tokens = task.tokens();
    let llm = FakeLlm::new(task.dir.path());
    // At the threshold exactly: nothing happens (compress only when over it).
    let mut at = config(tokens * 2, 4);
    at.threshold = 0.5;
    assert_eq!(
        task.compact(Kind::Summarizer, &at, &llm).unwrap(),
        CompactionOutcome::NotNeeded
    );
    assert!(llm.calls().is_empty());
    // One token over: compressed, the 4 most recent messages kept verbatim.
    let before = task.context();
    let mut over = at.clone();
    over.context_length = tokens * 2 - 2;
    let outcome = task.compact(Kind::Summarizer, &over, &llm).unwrap();
    assert!(
        matches!(
            outcome,
            CompactionOutcome::Compressed {
                summary_id: Some(1),
                ..
            }
        ),
        "{outcome:?}"
    );
    let after = task.context();
    assert_eq!(after.len(), 2 + 4);
    assert_eq!(after[0], before[0]);
    assert_eq!(after[2..], before[before.len() - 4..]);
    assert_eq!(
        after[1].content.as_deref().map(parse_summary_range),
        Some(Some((2, 17)))
    );
    // No loop: the next check finds the context under the threshold.
    assert_eq!(
        task.compact(Kind::Summarizer, &over, &llm).unwrap(),
        CompactionOutcome::NotNeeded
    );
    assert_eq!(llm.calls().len(), 1);
}

#[test]
fn the_cut_never_splits_a_tool_call_group() {
    // sys, user, assistant(3 parallel calls), 3 results (answered out of order), assistant
    let mut task = Task::new("sys");
    task.add(&user(&"please look at three files ".repeat(20)));
    task.add(&calls(&["a", "b", "c"], "read_text_file"));
    for id in ["c", "a", "b"] {
        task.add(&result(id, "read_text_file", &"contents ".repeat(300)));
    }
    task.add(&assistant("all three files are fine"));
    task.add(&user("thanks"));
    let before = task.context();
    for keep in 2..=5 {
        // keep 2 → cut after the group; keep 3..=5 land inside it → moved before the call.
        let mut t = Task::new("sys");
        t.add_all(&before[1..]);
        let cfg = config(window_for(&mut t), keep);
        let outcome = t.compact(Kind::Summarizer, &cfg, &FakeLlm::new(t.dir.path()));
        let after = t.context();
        if keep == 2 {
            assert!(
                matches!(outcome, Ok(CompactionOutcome::Compressed { .. })),
                "{outcome:?}"
            );
            assert_eq!(after[2..], before[before.len() - 2..]);
        } else {
            // The kept group (call + 3 long results) alone is over the threshold.
            assert!(
                matches!(outcome, Err(CompactionError::StillOverThreshold { .. })),
                "keep {keep}: {outcome:?}"
            );
            assert_eq!(
                after[2..],
                before[2..],
                "keep {keep}: the whole group must be kept"
            );
            check_context_file(&t.dir_handle(), "current.jsonl", false).unwrap();
        }
    }
}

#[test]
fn nothing_to_summarise_is_a_clear_error() {
    let mut task = Task::new("sys");
    task.add(&user(&"a long question ".repeat(100)));
    task.add(&assistant(&"a long answer ".repeat(100)));
    let cfg = config(window_for(&mut task), 5);
    let before = snapshot(&mut task);
    let err = task
        .compact(Kind::Summarizer, &cfg, &FakeLlm::new(task.dir.path()))
        .unwrap_err()
        .to_string();
    // Count bound only (`keep_recent_tokens` 0): lowering it is what helps.
    assert!(
        err.contains("nothing to summarise") && err.contains("lower keep-recent-messages"),
        "{err}"
    );
    assert_eq!(task.bytes("current.jsonl"), before.current);
    assert!(task.leftovers().is_empty());
    // With the token bound the question is summarised: the newest message alone is kept.
    let tokens_cfg = CompressConfig {
        keep_recent_tokens: 100,
        ..cfg.clone()
    };
    let llm = FakeLlm::new(task.dir.path());
    assert!(matches!(
        task.compact(Kind::Summarizer, &tokens_cfg, &llm),
        Ok(CompactionOutcome::Compressed { .. })
    ));
    // Only the newest message's group after the system prompt: nothing older to summarise,
    // and the error says the newest message alone is too big.
    let mut task = Task::new("sys");
    task.add(&calls(&["c1"], "read_text_file"));
    task.add(&result("c1", "read_text_file", &"x".repeat(8000)));
    let cfg = CompressConfig {
        keep_recent_tokens: 100,
        ..config(window_for(&mut task), 5)
    };
    let err = task
        .compact(Kind::Summarizer, &cfg, &FakeLlm::new(task.dir.path()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("nothing to summarise") && err.contains("newest message"),
        "{err}"
    );
}

#[test]
fn a_second_summary_covers_the_first_one_and_carries_its_range() {
    let mut task = long_task(6); // seqs 1..=25
    // A roomy window (same limit) so that each summary takes one request.
    let mut cfg = config(window_for(&mut task) * 4, 4);
    cfg.threshold /= 4.0;
    let llm = FakeLlm::new(task.dir.path())
        .script([Ok("first summary".into()), Ok("second summary".into())]);
    task.compact(Kind::Summarizer, &cfg, &llm).unwrap();
    assert_eq!(
        task.context()[1].content.as_deref(),
        Some(summary_content(2, 21, "first summary").as_str())
    );
    // messages.jsonl: 25 messages + the summary (seq 26).
    for t in 7..=12 {
        let id = format!("call_{t}");
        task.add(&user(&format!("step {t}")));
        task.add(&calls(&[&id], "read_text_file"));
        task.add(&result(
            &id,
            "read_text_file",
            &"fn item() -> u32 { 42 }\n".repeat(20),
        ));
        task.add(&assistant("ok"));
    } // seqs 27..=50
    let calls_before = llm.calls().len();
    assert_eq!(calls_before, 1);
    task.compact(Kind::Summarizer, &cfg, &llm).unwrap();
    assert_eq!(llm.calls().len(), 2);
    let context = task.context();
    assert_eq!(
        context[1].content.as_deref(),
        Some(summary_content(2, 46, "second summary").as_str())
    );
    // The first summary was part of what the LLM summarised.
    let request = &llm.calls()[calls_before].messages[1];
    assert!(
        request
            .content
            .as_deref()
            .unwrap()
            .contains("first summary")
    );
    let sums: Vec<SummaryLine> = read_jsonl(&task.path("summaries.jsonl"));
    assert_eq!(
        sums.iter()
            .map(|s| (s.id, s.start_seq, s.end_seq))
            .collect::<Vec<_>>(),
        [(1, 2, 21), (2, 2, 46)]
    );
    // The component's wall clock (WASI) stamps the line: RFC 3339 UTC with milliseconds.
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    for s in &sums {
        assert!(
            s.timestamp.len() == 24 && s.timestamp.ends_with('Z'),
            "{}",
            s.timestamp
        );
        assert!(
            s.timestamp.as_str() > "2025" && s.timestamp <= now,
            "{} vs now {now}",
            s.timestamp
        );
        assert!(s.ratio > 0.0 && s.ratio < 1.0, "ratio {}", s.ratio);
    }
    let history: Vec<HistoryLine> = read_jsonl(&task.path("messages.jsonl"));
    let summary_lines: Vec<_> = history
        .iter()
        .filter(|h| h.summary_id.is_some())
        .map(|h| h.seq)
        .collect();
    assert_eq!(summary_lines, [26, 51]);
}

#[test]
fn a_giant_message_is_cut_on_a_character_boundary_in_the_request() {
    let mut task = Task::new("sys");
    // 1-, 2-, 3- and 4-byte characters, so any cut point risks splitting a sequence.
    let giant = format!("GIANT-START {} GIANT-END", long_text(120_000, 2));
    task.add(&user("read the log"));
    task.add(&calls(&["g"], "read_log"));
    task.add(&result("g", "read_log", &giant));
    task.add(&assistant("the log is long"));
    task.add(&user("ok, go on"));
    let mut cfg = config(3000, 2);
    cfg.reserve_output_tokens = 500;
    let llm = FakeLlm::new(task.dir.path());
    let outcome = task.compact(Kind::Summarizer, &cfg, &llm);
    assert!(
        matches!(outcome, Ok(CompactionOutcome::Compressed { .. })),
        "{outcome:?}"
    );
    let calls = llm.calls();
    requests_fit(&calls, &cfg).unwrap();
    let rendered = render_message(&result("g", "read_log", &giant));
    let request = calls
        .iter()
        .map(|c| c.messages[1].content.clone().unwrap())
        .find(|t| t.contains("GIANT-START"))
        .expect("a request carries the giant message");
    let from = request
        .find("tool read_log (g) result: GIANT-START")
        .unwrap();
    let (head, rest) = request[from..].split_once("\n[... ").expect("a cut marker");
    let (count, rest) = rest.split_once(" characters cut ...]\n").unwrap();
    let tail = &rest[..rest.find("GIANT-END").expect("the tail is kept") + "GIANT-END".len()];
    assert!(rendered.starts_with(head) && rendered.ends_with(tail));
    assert!(head.chars().count() > 100 && tail.chars().count() > 100);
    assert_eq!(
        head.chars().count() + count.parse::<usize>().unwrap() + tail.chars().count(),
        rendered.chars().count()
    );
    assert!(task.leftovers().is_empty());
}

#[test]
fn a_long_history_is_summarised_in_chunks_then_merged() {
    let mut task = Task::new("sys");
    for i in 0..60 {
        task.add(&user(&format!(
            "msg-{i:02}: {}",
            "please refactor the parser module ".repeat(12)
        )));
    }
    task.add(&assistant("done"));
    let mut cfg = config(1500, 2);
    cfg.reserve_output_tokens = 200;
    // Distinct partial summaries, so the merge requests can be traced.
    let llm = FakeLlm::new(task.dir.path()).script((1..=40).map(|n| Ok(format!("partial-{n}"))));
    let outcome = task.compact(Kind::Summarizer, &cfg, &llm).unwrap();
    assert!(
        matches!(outcome, CompactionOutcome::Compressed { .. }),
        "{outcome:?}"
    );
    let calls = llm.calls();
    requests_fit(&calls, &cfg).unwrap();
    let texts: Vec<String> = calls
        .iter()
        .map(|c| c.messages[1].content.clone().unwrap())
        .collect();
    let chunk_calls: Vec<&String> = texts.iter().filter(|t| t.contains("msg-")).collect();
    let merge_calls: Vec<&String> = texts
        .iter()
        .filter(|t| t.contains("Partial summaries"))
        .collect();
    assert!(
        chunk_calls.len() >= 3,
        "{} chunk requests",
        chunk_calls.len()
    );
    assert_eq!(chunk_calls.len() + merge_calls.len(), calls.len());
    assert!(!merge_calls.is_empty());
    // Every summarised message went to exactly one chunk, in order (the last 2 are kept).
    let mut seen = Vec::new();
    for t in &chunk_calls {
        seen.extend(
            t.match_indices("msg-")
                .map(|(at, _)| t[at + 4..at + 6].parse::<u32>().unwrap()),
        );
    }
    assert_eq!(seen, (0..59).collect::<Vec<_>>());
    // Every partial summary reached a merge request; the context holds the final merge.
    for n in 1..=chunk_calls.len() {
        assert!(
            merge_calls
                .iter()
                .any(|t| t.contains(&format!("partial-{n}\n"))
                    || t.ends_with(&format!("partial-{n}"))),
            "partial-{n} was never merged"
        );
    }
    let last_reply = format!("partial-{}", calls.len());
    assert_eq!(
        task.context()[1].content.as_deref(),
        Some(summary_content(2, 60, &last_reply).as_str())
    );
    assert!(task.leftovers().is_empty());
}

/// A context far over a small window (a smaller model configured on resume, or a pile of
/// tool results): the summariser stays within the host's budget of LLM calls per compression
/// by cutting every message to a share of a request and leaving out the oldest after the
/// first, instead of being refused at request 17 (found by the property test above).
#[test]
fn a_history_far_over_a_small_window_is_summarised_within_the_call_budget() {
    let mut task = Task::new("sys");
    for i in 0..200 {
        // The id at the end: a message cut to a few tokens keeps its head and its tail.
        task.add(&user(&format!(
            "{}@{i:03}",
            "the build printed another warning ".repeat(60)
        )));
    }
    task.add(&assistant("done"));
    let mut cfg = config(1000, 2);
    cfg.reserve_output_tokens = 256;
    let llm = FakeLlm::new(task.dir.path());
    let outcome = task.compact(Kind::Summarizer, &cfg, &llm);
    assert!(
        matches!(outcome, Ok(CompactionOutcome::Compressed { .. })),
        "{outcome:?}"
    );
    let calls = llm.calls();
    requests_fit(&calls, &cfg).unwrap();
    assert!(
        calls.len() <= 15,
        "{} requests, more than 8 chunks and 7 merges",
        calls.len()
    );
    let chunks: Vec<String> = calls
        .iter()
        .map(|c| c.messages[1].content.clone().unwrap())
        .filter(|t| t.contains("ing @"))
        .collect();
    let sent: Vec<u32> = chunks
        .iter()
        .flat_map(|t| {
            t.match_indices('@')
                .map(|(at, _)| t[at + 1..at + 4].parse::<u32>().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    // The first and the newest summarised messages are sent, cut; the oldest after the
    // first are left out, with a note saying so, in order.
    assert_eq!(sent.first(), Some(&0), "{:?}", &calls[0].messages[1]);
    assert_eq!(sent.last(), Some(&198));
    assert!(sent.windows(2).all(|w| w[0] < w[1]), "{sent:?}");
    assert!(!sent.contains(&1) && sent.len() < 199, "{sent:?}");
    let note = chunks
        .iter()
        .find(|t| t.contains("older messages left out here"))
        .expect("a note for the messages left out");
    let omitted = 199 - sent.len();
    assert!(
        note.contains(&format!("[{omitted} older messages left out")),
        "{note}"
    );
    assert!(
        chunks.iter().all(|t| t.contains("characters cut")),
        "every message is cut to its share"
    );
    assert_eq!(
        task.context()[1]
            .content
            .as_deref()
            .and_then(parse_summary_range),
        Some((2, 200))
    );
    assert!(task.leftovers().is_empty());
}

#[test]
fn masking_names_the_tools_jsonl_line_and_keeps_pairs() {
    let mut task = Task::new("sys");
    let long = |n: u32| format!("result {n}: {}", "lorem ipsum ".repeat(50));
    // Providers numbering calls per reply: `call_0` appears three times.
    for n in 0..3 {
        task.add(&user(&format!("turn {n}")));
        task.add(&calls(&["call_0", "call_1"], "read"));
        task.add(&result("call_1", "read", &long(n * 10 + 1)));
        task.add(&result("call_0", "read", &long(n * 10)));
        task.add(&assistant("ok"));
    }
    // A result with no tools.jsonl line, and one already masked.
    task.log_tools = false;
    task.add(&calls(&["lost"], "read"));
    task.add(&result("lost", "read", &long(99)));
    task.add(&calls(&["old"], "read"));
    task.add(&result(
        "old",
        "read",
        "[tool result masked: full text in tools.jsonl seq 1]",
    ));
    task.add(&user("next"));
    task.add(&assistant("fine"));
    let cfg = config(window_for(&mut task), 2);
    let before = snapshot(&mut task);
    let llm = FakeLlm::new(task.dir.path());
    let outcome = task.compact(Kind::Masking, &cfg, &llm);
    assert!(llm.calls().is_empty(), "masking must not call the LLM");
    check_step(&mut task, Kind::Masking, &cfg, &before, &outcome, &[]).unwrap();
    assert!(
        matches!(
            outcome,
            Ok(CompactionOutcome::Compressed {
                summary_id: None,
                ..
            })
        ),
        "{outcome:?}"
    );
    let after = task.context();
    let contents: Vec<&str> = after
        .iter()
        .filter(|m| m.role == "tool")
        .map(|m| m.content.as_deref().unwrap())
        .collect();
    assert_eq!(
        contents,
        [
            "[tool result masked: full text in tools.jsonl seq 1]",
            "[tool result masked: full text in tools.jsonl seq 2]",
            "[tool result masked: full text in tools.jsonl seq 3]",
            "[tool result masked: full text in tools.jsonl seq 4]",
            "[tool result masked: full text in tools.jsonl seq 5]",
            "[tool result masked: full text in tools.jsonl seq 6]",
            "[tool result masked: full text not found in tools.jsonl (tool_call_id lost)]",
            "[tool result masked: full text in tools.jsonl seq 1]",
        ]
    );
    // Masking again finds nothing more to do and says so.
    let before = snapshot(&mut task);
    let err = task
        .compact(Kind::Masking, &config(10, 2), &llm)
        .unwrap_err()
        .to_string();
    assert!(err.contains("masking makes nothing smaller"), "{err}");
    assert_eq!(task.bytes("current.jsonl"), before.current);
    assert!(task.leftovers().is_empty());
}

#[test]
fn switching_compressor_is_only_a_config_change() {
    // The same task directory, compressed by masking, then by summarising, then masked again.
    let mut task = long_task(6);
    let cfg = config(window_for(&mut task), 4);
    let llm = FakeLlm::new(task.dir.path());
    for kind in [Kind::Masking, Kind::Summarizer] {
        let before = snapshot(&mut task);
        let mut tight = cfg.clone();
        tight.context_length = before.tokens * 10 / 8;
        let outcome = task.compact(kind, &tight, &llm);
        check_step(&mut task, kind, &tight, &before, &outcome, &llm.calls()).unwrap();
        assert!(
            matches!(outcome, Ok(CompactionOutcome::Compressed { .. })),
            "{kind:?}: {outcome:?}"
        );
    }
    let context = task.context();
    assert!(is_summary_line(1, &context[1]));
    assert_eq!(context.len(), 2 + 4);
}

// ---------------------------------------------------------------------------------------------
// Snapshots of a context before and after a compaction (issue 11: the kept tail bounded by
// tokens)

/// One line per message: index, role, estimated tokens, id, and the start of the content.
fn outline(context: &[ChatMessage]) -> String {
    let mut out = String::new();
    for (i, m) in context.iter().enumerate() {
        let text = m.content.as_deref().unwrap_or("");
        let mut preview: String = text.chars().take(60).collect();
        if text.chars().count() > 60 {
            preview.push('…');
        }
        let id = m
            .tool_call_id
            .clone()
            .or_else(|| m.calls().first().map(|c| format!("calls {}", c.id)))
            .unwrap_or_default();
        out.push_str(&format!(
            "{i:>2} {:<9} {:>5} {:<14} {}\n",
            m.role,
            estimate_message_tokens(m),
            id,
            preview.replace('\n', "⏎")
        ));
        if let Some((_, note)) = text.rsplit_once(SHRUNK_NOTE_PREFIX) {
            out.push_str(&format!("   … {SHRUNK_NOTE_PREFIX}{note}\n"));
        }
    }
    out
}

/// A 13 KB source file, as the four-file task reads.
fn source(n: usize) -> String {
    let mut s = format!("// module_{n}.rs\n");
    let mut i = 0;
    while s.len() < 13_000 {
        i += 1;
        s.push_str(&format!(
            "pub fn field_{n}_{i}(x: &str) -> Option<u64> {{ x.trim().parse().ok() }}\n"
        ));
    }
    s
}

/// The host's settings for the default window: 8192 tokens, threshold 0.7, keep 5, the kept
/// tail at most half the threshold.
fn host_defaults() -> CompressConfig {
    CompressConfig {
        keep_recent_tokens: 2867,
        reserve_output_tokens: 1024,
        ..config(8192, 5)
    }
}

#[test]
fn snapshot_three_file_reads_before_and_after_a_compaction() {
    let mut task = Task::new("You are a coding agent.");
    task.add(&user("Read module_1.rs to module_4.rs and report."));
    for n in 1..=2 {
        let id = format!("call_{n}");
        task.add(&calls(&[&id], "read_text_file"));
        task.add(&result(&id, "read_text_file", &source(n)));
    }
    let before = task.context();
    let llm = FakeLlm::new(task.dir.path()).script([Ok(
        "The agent read module_1.rs: 200 field parsers returning Option<u64>.".to_string(),
    )]);
    let outcome = task
        .compact(Kind::Summarizer, &host_defaults(), &llm)
        .unwrap();
    assert!(
        matches!(outcome, CompactionOutcome::Compressed { .. }),
        "{outcome:?}"
    );
    let after = task.context();
    insta::assert_snapshot!(
        "compaction_two_reads",
        format!("before:\n{}\nafter:\n{}", outline(&before), outline(&after))
    );
}

#[test]
fn snapshot_parallel_reads_whose_older_results_are_cut() {
    let mut task = Task::new("You are a coding agent.");
    task.add(&user("Read three files at once."));
    let ids = ["call_a", "call_b", "call_c"];
    task.add(&calls(&ids, "read_text_file"));
    for (n, id) in ids.iter().enumerate() {
        task.add(&result(id, "read_text_file", &source(n + 1)));
    }
    let before = task.context();
    let llm = FakeLlm::new(task.dir.path());
    let outcome = task
        .compact(Kind::Summarizer, &host_defaults(), &llm)
        .unwrap();
    // The newest group is kept whole, its two older results cut. The short user message before
    // it would not get smaller as a summary: it is kept too, and no summary is made.
    assert!(
        matches!(
            outcome,
            CompactionOutcome::Compressed {
                summary_id: None,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert_eq!(
        llm.calls().len(),
        1,
        "a summary of the user message was tried"
    );
    let after = task.context();
    insta::assert_snapshot!(
        "compaction_parallel_reads",
        format!("before:\n{}\nafter:\n{}", outline(&before), outline(&after))
    );
}

/// `message` with one reasoning item of each OpenAI kind, whose data carries `tag`.
fn with_reasoning(mut message: ChatMessage, tag: &str) -> ChatMessage {
    message.reasoning = vec![
        ctxhost_format::ReasoningItem {
            provider: "openai-responses".into(),
            kind: "reasoning".into(),
            data: format!(
                r#"{{"id":"rs_{tag}","type":"reasoning","summary":[],"encrypted_content":"ENC-{tag}+/="}}"#
            ),
        },
        ctxhost_format::ReasoningItem {
            provider: "openai-chat".into(),
            kind: "reasoning_content".into(),
            data: format!("\"THOUGHT-{tag}\""),
        },
    ];
    message
}

#[test]
fn compression_drops_the_reasoning_it_summarises_and_keeps_the_tails_verbatim() {
    let mut task = Task::new("You are a coding agent.");
    for t in 1..=6 {
        let id = format!("call_{t}");
        task.add(&user(&format!("step {t}: read file_{t}.rs")));
        task.add(&with_reasoning(
            calls(&[&id], "read_text_file"),
            &format!("c{t}"),
        ));
        task.add(&result(&id, "read_text_file", &"fn item() {}\n".repeat(30)));
        task.add(&with_reasoning(
            assistant(&format!("file_{t}.rs is fine.")),
            &format!("a{t}"),
        ));
    }
    let before = task.context();
    let cfg = config(window_for(&mut task), 4);
    let llm = FakeLlm::new(task.dir.path());
    let outcome = task.compact(Kind::Summarizer, &cfg, &llm).unwrap();
    assert!(
        matches!(outcome, CompactionOutcome::Compressed { .. }),
        "{outcome:?}"
    );
    // The summariser never sees reasoning, encrypted or not.
    let sent: String = llm
        .calls()
        .iter()
        .flat_map(|c| c.messages.iter())
        .filter_map(|m| m.content.clone())
        .collect();
    assert!(!sent.is_empty());
    for marker in ["ENC-", "THOUGHT-", "\"rs_"] {
        assert!(!sent.contains(marker), "{marker} sent to the summariser");
    }
    // The summarised messages' reasoning is gone; the kept tail's is there, verbatim.
    let after = task.context();
    assert_eq!(after[2..], before[before.len() - 4..]);
    assert!(
        after[1].reasoning.is_empty(),
        "the summary has no reasoning"
    );
    let current = String::from_utf8(task.bytes("current.jsonl")).unwrap();
    let kept_tags: Vec<String> = after[2..]
        .iter()
        .flat_map(|m| m.reasoning.iter())
        .map(|r| r.data.clone())
        .collect();
    assert_eq!(
        kept_tags,
        [
            r#"{"id":"rs_c6","type":"reasoning","summary":[],"encrypted_content":"ENC-c6+/="}"#,
            "\"THOUGHT-c6\"",
            r#"{"id":"rs_a6","type":"reasoning","summary":[],"encrypted_content":"ENC-a6+/="}"#,
            "\"THOUGHT-a6\"",
        ]
    );
    for t in 1..=5 {
        assert!(!current.contains(&format!("ENC-c{t}")), "{current}");
        assert!(!current.contains(&format!("THOUGHT-a{t}")), "{current}");
    }
    // messages.jsonl keeps every message's reasoning.
    let history = String::from_utf8(task.bytes("messages.jsonl")).unwrap();
    for t in 1..=6 {
        assert!(history.contains(&format!("ENC-c{t}")));
        assert!(history.contains(&format!("THOUGHT-a{t}")));
    }

    // Observation masking masks old tool results only: every reasoning item stays.
    let mut task = Task::new("sys");
    for t in 1..=6 {
        let id = format!("m{t}");
        task.add(&user(&format!("step {t}")));
        task.add(&with_reasoning(
            calls(&[&id], "read_text_file"),
            &format!("m{t}"),
        ));
        task.add(&result(&id, "read_text_file", &"contents ".repeat(200)));
    }
    let before: Vec<_> = task.context().into_iter().map(|m| m.reasoning).collect();
    let cfg = config(window_for(&mut task), 3);
    let llm = FakeLlm::new(task.dir.path());
    let outcome = task.compact(Kind::Masking, &cfg, &llm).unwrap();
    assert!(
        matches!(outcome, CompactionOutcome::Compressed { .. }),
        "{outcome:?}"
    );
    let after: Vec<_> = task.context().into_iter().map(|m| m.reasoning).collect();
    assert_eq!(after, before);
}
