//! The compressor suite: `should-compress` around its threshold; `compress` of five contexts
//! (fixtures) with a fake LLM returning a fixed summary — tool rounds, parallel tool calls
//! straddling the kept tail, CJK and emoji text, a history over the whole window, and one with
//! nothing to compress — each checked for what the host enforces (a new file, the system prompt
//! first, tool calls paired, the kept tail verbatim, fewer tokens), what an author should know
//! (the task's first user message neither kept nor summarised: a warning), the summary requests
//! (each within the window) and a clean task directory; and `compress` with a failing LLM.
//! Checks about the LLM are skipped for a compressor that never calls it.

use ctxhost_format::files::{CURRENT, MESSAGES, SUMMARIES, TOOLS};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ctxhost_format::compress::parse_summary_range;
use ctxhost_format::{ChatMessage, HistoryLine, ToolCall, estimate_message_tokens};
use serde_json::Value;

use super::harness::*;
use crate::invariants::check_context_file;
use crate::invariants::kept_tail::check_kept_tail;
use crate::runtime::{Completion, CompressConfig, LlmImport, LoadedPlugin, Runtime, Usage};

pub(super) const FIXED_SUMMARY: &str =
    "SUMMARY: the agent listed the repository and read four files; nothing is broken.";

/// One `llm.complete` call as the fake LLM saw it.
#[derive(Debug, Clone)]
pub(super) struct LlmCall {
    messages_file: String,
    /// Messages in the file, or why it could not be read.
    messages: Result<Vec<ChatMessage>, String>,
    max_output_tokens: u32,
}

/// An [`LlmImport`] answering every request with [`FIXED_SUMMARY`] (or failing), recording
/// what it was asked.
pub(super) struct FakeLlm {
    dir: PathBuf,
    fail: bool,
    calls: Arc<Mutex<Vec<LlmCall>>>,
}

impl LlmImport for FakeLlm {
    fn complete(
        &mut self,
        messages_file: &str,
        max_output_tokens: u32,
        _deadline: std::time::Instant,
    ) -> Result<Completion, String> {
        let messages = read_lines::<ChatMessage>(&self.dir.join(messages_file));
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(LlmCall {
                messages_file: messages_file.to_string(),
                messages,
                max_output_tokens,
            });
        if self.fail {
            return Err(
                "HTTP 500 from http://127.0.0.1:1/v1/chat/completions after 3 attempts (fake LLM)"
                    .to_string(),
            );
        }
        Ok(Completion {
            message: ChatMessage::text("assistant", FIXED_SUMMARY),
            usage: Some(Usage {
                prompt_tokens: 100,
                completion_tokens: 20,
                total_tokens: 120,
                ..Usage::default()
            }),
        })
    }
}

/// A context of `turns` rounds (question, tool call, tool result, answer) after a system
/// prompt, as current.jsonl and messages.jsonl.
pub(super) fn write_synthetic_task(dir: &Path, turns: usize) -> Result<Vec<ChatMessage>, String> {
    let context = rounds(turns);
    write_task(dir, &context)?;
    Ok(context)
}

const SYSTEM_PROMPT: &str = "You are a coding agent. Use the tools; answer briefly.";

/// `turns` rounds of question, tool call, tool result, answer after a system prompt.
fn rounds(turns: usize) -> Vec<ChatMessage> {
    let mut context = vec![ChatMessage::text("system", SYSTEM_PROMPT)];
    for t in 1..=turns {
        let id = format!("call_{t}");
        context.push(ChatMessage::text(
            "user",
            format!(
                "Step {t}: look at file_{t}.rs and explain it. {}",
                "Details. ".repeat(20)
            ),
        ));
        context.push(tool_call_message(
            &id,
            "read_text_file",
            &format!("{{\"path\":\"file_{t}.rs\"}}"),
        ));
        context.push(tool_result(
            &id,
            "read_text_file",
            &format!("// file {t}\n{}", "fn item() -> u32 { 42 }\n".repeat(12)),
        ));
        context.push(ChatMessage::text(
            "assistant",
            format!(
                "file_{t}.rs defines item() returning 42. {}",
                "Noted. ".repeat(10)
            ),
        ));
    }
    context
}

/// An assistant message calling every `(id, name, arguments)` of `calls` at once.
fn parallel_calls(calls: &[(&str, &str, &str)]) -> ChatMessage {
    ChatMessage {
        role: "assistant".into(),
        content: None,
        tool_calls: Some(
            calls
                .iter()
                .map(|(id, name, args)| ToolCall::new(*id, *name, *args))
                .collect(),
        ),
        ..Default::default()
    }
}

/// Rounds with two tool calls in parallel, ending with three parallel calls whose results
/// straddle the `keep-recent-messages` 5 boundary: the cut must move back to their call.
fn parallel_rounds() -> Vec<ChatMessage> {
    let mut context = vec![ChatMessage::text("system", SYSTEM_PROMPT)];
    context.push(ChatMessage::text(
        "user",
        format!("Compare the modules. {}", "Context. ".repeat(30)),
    ));
    for t in 1..=8 {
        let (a, b) = (format!("p{t}a"), format!("p{t}b"));
        context.push(parallel_calls(&[
            (&a, "read_text_file", &format!("{{\"path\":\"a_{t}.rs\"}}")),
            (&b, "read_text_file", &format!("{{\"path\":\"b_{t}.rs\"}}")),
        ]));
        context.push(tool_result(
            &a,
            "read_text_file",
            &"pub fn a() {}\n".repeat(20),
        ));
        context.push(tool_result(
            &b,
            "read_text_file",
            &"pub fn b() {}\n".repeat(20),
        ));
        context.push(ChatMessage::text(
            "assistant",
            format!("Round {t}: a and b agree. {}", "Ok. ".repeat(15)),
        ));
    }
    context.push(parallel_calls(&[
        ("last_a", "read_text_file", r#"{"path":"x.rs"}"#),
        ("last_b", "read_text_file", r#"{"path":"y.rs"}"#),
        ("last_c", "list_directory", r#"{"path":"."}"#),
    ]));
    context.push(tool_result("last_a", "read_text_file", "fn x() {}"));
    context.push(tool_result("last_b", "read_text_file", "fn y() {}"));
    context.push(tool_result("last_c", "list_directory", "x.rs\ny.rs"));
    context.push(ChatMessage::text("assistant", "x and y are trivial."));
    context.push(ChatMessage::text(
        "user",
        "Thanks. Now summarise what you found.",
    ));
    context
}

/// Rounds whose text is CJK, emoji and escapes (tokens: one per CJK character).
fn unicode_rounds() -> Vec<ChatMessage> {
    let mut context = vec![ChatMessage::text(
        "system",
        "你是一个编码助手。Answer in the user's language.",
    )];
    for t in 1..=10 {
        let id = format!("u{t}");
        context.push(ChatMessage::text(
            "user",
            format!(
                "第{t}步：请解释文件 ファイル_{t}.rs 😀 \"引号\" \\ {}",
                "上下文压缩。".repeat(12)
            ),
        ));
        context.push(tool_call_message(
            &id,
            "read_text_file",
            &format!("{{\"path\":\"ファイル_{t}.rs\"}}"),
        ));
        context.push(tool_result(
            &id,
            "read_text_file",
            &format!(
                "// 文件 {t} — ünïcödé\n{}",
                "let 值 = \"한국어\";\n".repeat(8)
            ),
        ));
        context.push(ChatMessage::text(
            "assistant",
            format!("文件{t}定义了一个值。{}", "好的。".repeat(10)),
        ));
    }
    context
}

/// One line of messages.jsonl for each message of `context` (seq from 1), and current.jsonl.
pub(super) fn write_task(dir: &Path, context: &[ChatMessage]) -> Result<(), String> {
    let history: Vec<HistoryLine> = context
        .iter()
        .enumerate()
        .map(|(i, m)| HistoryLine::of(i as u64 + 1, m, "2026-01-02T03:04:05Z"))
        .collect();
    write_lines(&dir.join(CURRENT), context)?;
    write_lines(&dir.join(MESSAGES), &history)?;
    Ok(())
}

pub(super) fn compress_config(context_tokens: u64) -> CompressConfig {
    // The context is at 90 % of the window: over a 0.7 threshold. No token bound on the kept
    // messages: the suite checks the count rule every version has.
    CompressConfig {
        context_length: context_tokens * 10 / 9,
        threshold: 0.7,
        keep_recent_messages: 5,
        keep_recent_tokens: 0,
        summary_prompt: "Summarize the conversation so far for the agent to continue:\n{messages}"
            .into(),
        reserve_output_tokens: 256,
    }
}

/// One context `compress` is run on.
struct Fixture {
    /// Name in the report and the task directory's name.
    name: &'static str,
    context: Vec<ChatMessage>,
    config: CompressConfig,
}

fn fixtures() -> Vec<Fixture> {
    let at = |context: Vec<ChatMessage>, percent: u64| {
        let tokens: u64 = context.iter().map(estimate_message_tokens).sum();
        let mut config = compress_config(tokens);
        config.context_length = tokens * 100 / percent;
        (context, config)
    };
    let mut out = Vec::new();
    for (name, (context, config)) in [
        ("tool rounds", at(rounds(12), 90)),
        ("parallel tool calls", at(parallel_rounds(), 90)),
        ("unicode", at(unicode_rounds(), 90)),
        ("history over the window", at(rounds(40), 150)),
    ] {
        out.push(Fixture {
            name,
            context,
            config,
        });
    }
    out
}

pub(super) fn compressor_suite(
    runtime: &Runtime,
    plugin: &LoadedPlugin,
    scratch: &Scratch,
    suite: &mut Suite,
) {
    should_compress_check(runtime, plugin, scratch, suite);
    for fixture in fixtures() {
        compress_fixture(runtime, plugin, scratch, suite, &fixture);
    }
    nothing_to_compress(runtime, plugin, scratch, suite);
    failing_llm(runtime, plugin, scratch, suite);
}

fn should_compress_check(
    runtime: &Runtime,
    plugin: &LoadedPlugin,
    scratch: &Scratch,
    suite: &mut Suite,
) {
    suite.record("should-compress around the threshold", (|| {
        let dir = scratch.task("should-compress")?;
        let llm = FakeLlm { dir: dir.clone(), fail: false, calls: Arc::default() };
        let mut compressor = runtime.compressor(plugin, &dir, Box::new(llm)).map_err(e)?;
        let config = CompressConfig {
            context_length: 1000,
            threshold: 0.5,
            keep_recent_messages: 5,
            keep_recent_tokens: 0,
            summary_prompt: "{messages}".into(),
            reserve_output_tokens: 100,
        };
        let mut seen = Vec::new();
        for (tokens, want) in [(0, false), (499, false), (500, false), (501, true), (5000, true)] {
            let got = compressor.should_compress(tokens, &config).map_err(e)?;
            ensure!(got == want, "should-compress({tokens}) with window 1000 × 0.5 returned {got}, expected {want}");
            seen.push(format!("{tokens}→{got}"));
        }
        Ok(seen.join(", "))
    })());
}

/// The task directory's name for a fixture: `compress-parallel-tool-calls`.
fn slug(name: &str) -> String {
    format!("compress-{}", name.replace(' ', "-"))
}

/// A short, readable description of a message for a failure: role and the start of its text.
fn describe(m: &ChatMessage) -> String {
    let text = m.content.as_deref().unwrap_or("");
    let short: String = text.chars().take(40).collect();
    let more = if text.chars().count() > 40 { "…" } else { "" };
    if m.calls().is_empty() {
        format!("a {} message {short:?}{more}", m.role)
    } else {
        format!("a {} message with {} tool call(s)", m.role, m.calls().len())
    }
}

fn compress_fixture(
    runtime: &Runtime,
    plugin: &LoadedPlugin,
    scratch: &Scratch,
    suite: &mut Suite,
    fixture: &Fixture,
) {
    let name = |check: &str| format!("[{}] {check}", fixture.name);
    let dir = match scratch
        .task(&slug(fixture.name))
        .and_then(|d| write_task(&d, &fixture.context).map(|_| d))
    {
        Ok(d) => d,
        Err(err) => return suite.record(&name("task directory"), Err(err)),
    };
    let context = &fixture.context;
    let config = &fixture.config;
    let calls = Arc::new(Mutex::new(Vec::new()));
    let llm = FakeLlm {
        dir: dir.clone(),
        fail: false,
        calls: calls.clone(),
    };
    let mut compressor = match runtime.compressor(plugin, &dir, Box::new(llm)) {
        Ok(c) => c,
        Err(err) => return suite.record(&name("instantiate"), Err(e(err))),
    };
    let original_tokens: u64 = context.iter().map(estimate_message_tokens).sum();
    let current_before = fs::read(dir.join(CURRENT)).unwrap_or_default();

    let result = match compressor.compress(config) {
        Ok(r) => {
            suite.record(
                &name("compress"),
                Ok(format!(
                    "{} messages / {original_tokens} tokens in a {}-token window → {}",
                    context.len(),
                    config.context_length,
                    r.context_file
                )),
            );
            r
        }
        Err(err) => return suite.record(&name("compress"), Err(e(err))),
    };
    drop(compressor);
    let file = result.context_file.trim_start_matches("./").to_string();
    let new_path = dir.join(&file);

    suite.record(
        &name("the new context is a separate file of chat messages"),
        (|| {
            ensure!(
                file != CURRENT,
                "compress wrote current.jsonl itself (it must write a new file and return its name)"
            );
            let task_dir = crate::task_dir::TaskDir::open(&dir).map_err(e)?;
            crate::untrusted::component_path(&task_dir, &result.context_file)
                .map_err(|err| format!("context file {err}"))?;
            let lines: Vec<ChatMessage> = read_lines(&new_path)?;
            Ok(format!("{file}: {} messages", lines.len()))
        })(),
    );
    let new_context: Vec<ChatMessage> = read_lines(&new_path).unwrap_or_default();

    suite.record(&name("system prompt first, tool calls paired"), (|| {
        match new_context.first() {
            None => return Err(format!("{file} is empty")),
            Some(first) if first.role != "system" => {
                return Err(format!("{file} starts with {}, not the system prompt: the system prompt must stay first", describe(first)));
            }
            Some(first) if normalized(first) != normalized(&context[0]) => {
                return Err(format!("the system prompt changed ({} → {}): it must be copied as it was", describe(&context[0]), describe(first)));
            }
            Some(_) => {}
        }
        let task_dir = crate::task_dir::TaskDir::open(&dir).map_err(e)?;
        let summary = check_context_file(&task_dir, &file, false).map_err(e)?;
        Ok(format!("{} messages pass the host's invariants", summary.messages))
    })());

    suite.record(&name("fewer tokens"), (|| {
        let tokens: u64 = new_context.iter().map(estimate_message_tokens).sum();
        ensure!(
            tokens < original_tokens,
            "{tokens} tokens, not fewer than the original {original_tokens}: the host rejects a compression that does not make the context smaller"
        );
        Ok(format!("{original_tokens} → {tokens} tokens"))
    })());

    suite.record(&name("kept tail verbatim"), (|| {
        let keep = config.keep_recent_messages as usize;
        // The kept tail is counted after the system prompt and the summary: without the system
        // prompt the count would be off by one and blame the tail for what the check above says.
        ensure!(
            new_context.first().is_none_or(|m| m.role == "system"),
            "not compared: {file} does not start with the system prompt (see the check above)"
        );
        let task_dir = crate::task_dir::TaskDir::open(&dir).map_err(e)?;
        let kept = check_kept_tail(&task_dir, CURRENT, &file, keep).map_err(e)?;
        ensure!(
            kept.compared == kept.expected,
            "the new context keeps {} of the {} most recent messages (keep-recent-messages {keep}, moved earlier so tool calls keep their results)",
            kept.compared,
            kept.expected
        );
        Ok(if kept.reduced == 0 {
            format!("the {} most recent messages are kept as they were", kept.expected)
        } else {
            format!(
                "the {} most recent messages are kept; {} of them, older tool result(s), masked or cut with the mark (allowed: the full text stays in tools.jsonl; with keep-recent-tokens 0, as here, the builtins keep them whole)",
                kept.expected, kept.reduced
            )
        })
    })());

    suite.record_note(&name("the task's first user message"), (|| {
        let Some(first_user) = context.iter().position(|m| m.role == "user") else {
            return Ok(Note::Skip("the fixture has no user message".into()));
        };
        let seq = first_user as u64 + 1;
        if new_context.iter().any(|m| normalized(m) == normalized(&context[first_user])) {
            return Ok(Note::Pass("kept verbatim".into()));
        }
        let covered = result.summary.as_ref().map(|s| (s.start_seq, s.end_seq)).or_else(|| {
            new_context.get(1).and_then(|m| m.content.as_deref()).and_then(parse_summary_range)
        });
        Ok(match covered {
            Some((start, end)) if start <= seq => Note::Pass(format!("summarised (the summary covers messages {start}–{end})")),
            _ => Note::Warn(format!(
                "the task's first user message (messages.jsonl seq {seq}) is neither kept nor covered by a summary: the model no longer sees what it was asked to do"
            )),
        })
    })());

    let calls = calls.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if calls.is_empty() {
        suite.record_note(
            &name("summary requests fit the window"),
            Ok(Note::Skip("the compressor does not call the LLM".into())),
        );
        suite.record_note(
            &name("summary recorded"),
            (|| {
                ensure!(
                    result.summary.is_none(),
                    "reported a summary without asking the LLM"
                );
                Ok(Note::Skip(
                    "no summary: the compressor does not call the LLM".into(),
                ))
            })(),
        );
    } else {
        suite.record(&name("summary requests fit the window"), (|| {
            for c in &calls {
                let msgs = c.messages.as_ref().map_err(|err| format!("llm.complete({:?}): {err}", c.messages_file))?;
                let tokens: u64 = msgs.iter().map(estimate_message_tokens).sum();
                ensure!(
                    tokens + c.max_output_tokens as u64 <= config.context_length,
                    "a summary request of {tokens} tokens + {} output tokens does not fit the {}-token window (bound it, or summarise in chunks)",
                    c.max_output_tokens,
                    config.context_length
                );
            }
            Ok(format!("{} llm.complete call(s), each within the window", calls.len()))
        })());
        suite.record(
            &name("summary recorded"),
            (|| {
                let text = serde_json::to_string(&new_context).map_err(e)?;
                ensure!(
                    text.contains("SUMMARY: the agent listed"),
                    "the new context does not contain the LLM's summary"
                );
                let Some(s) = &result.summary else {
                    return Ok(
                        "in the new context (no summary-info returned, so none in summaries.jsonl)"
                            .into(),
                    );
                };
                ensure!(
                    s.start_seq >= 1 && s.start_seq <= s.end_seq,
                    "the summary covers seq {}..{}",
                    s.start_seq,
                    s.end_seq
                );
                ensure!(
                    s.summary.contains("SUMMARY: the agent listed"),
                    "summary text {:?} is not the LLM's",
                    s.summary
                );
                // The spec's form is a JSON number.
                let lines: Vec<Value> = read_lines(&dir.join(SUMMARIES))?;
                let found = lines
                    .iter()
                    .any(|l| l.get("id").and_then(Value::as_u64) == Some(s.id));
                ensure!(
                    found,
                    "summaries.jsonl has no line with id {} (a JSON number)",
                    s.id
                );
                Ok(format!(
                    "summary {} (messages {}–{}) in the new context and summaries.jsonl",
                    s.id, s.start_seq, s.end_seq
                ))
            })(),
        );
    }

    suite.record(
        &name("current.jsonl untouched, temporaries removed"),
        clean_directory(&dir, &current_before, Some(&file)),
    );
}

/// current.jsonl is byte for byte `before` and the task directory holds only the task's files
/// (and `output`, the new context, when given).
fn clean_directory(dir: &Path, before: &[u8], output: Option<&str>) -> Outcome {
    ensure!(
        fs::read(dir.join(CURRENT)).map_err(e)? == before,
        "current.jsonl was modified (a compressor only reads it)"
    );
    let mut allowed: BTreeSet<&str> = [CURRENT, MESSAGES, SUMMARIES, TOOLS].into_iter().collect();
    allowed.extend(output);
    let mut extra = Vec::new();
    for entry in fs::read_dir(dir).map_err(e)? {
        let name = entry.map_err(e)?.file_name().to_string_lossy().to_string();
        if !allowed.contains(name.as_str()) {
            extra.push(name);
        }
    }
    ensure!(
        extra.is_empty(),
        "left behind {}: delete temporaries on success and on failure",
        extra.join(", ")
    );
    Ok("no stray files".to_string())
}

/// A context whose messages are all within `keep-recent-messages`: an error (the host keeps
/// the context) or a smaller valid context is fine; a larger one or a mess is not.
fn nothing_to_compress(
    runtime: &Runtime,
    plugin: &LoadedPlugin,
    scratch: &Scratch,
    suite: &mut Suite,
) {
    suite.record("[nothing to compress] declined or smaller", (|| {
        let dir = scratch.task("compress-nothing-to-compress")?;
        let context = vec![
            ChatMessage::text("system", SYSTEM_PROMPT),
            ChatMessage::text("user", format!("Read the file. {}", "Long question. ".repeat(40))),
            tool_call_message("only_1", "read_text_file", r#"{"path":"a.rs"}"#),
            tool_result("only_1", "read_text_file", &"fn a() {}\n".repeat(30)),
            ChatMessage::text("assistant", "It defines a()."),
        ];
        write_task(&dir, &context)?;
        let before = fs::read(dir.join(CURRENT)).map_err(e)?;
        let tokens: u64 = context.iter().map(estimate_message_tokens).sum();
        let llm = FakeLlm { dir: dir.clone(), fail: false, calls: Arc::default() };
        let mut compressor = runtime.compressor(plugin, &dir, Box::new(llm)).map_err(e)?;
        let outcome = compressor.compress(&compress_config(tokens));
        drop(compressor);
        match outcome {
            Err(err) => {
                ensure!(is_plugin_error(&err), "expected the component's error, got {err}");
                clean_directory(&dir, &before, None)?;
                Ok(format!("declined ({err}); the directory is as it was"))
            }
            Ok(r) => {
                let file = r.context_file.trim_start_matches("./").to_string();
                let path = dir.join(&file);
                let task_dir = crate::task_dir::TaskDir::open(&dir).map_err(e)?;
                check_context_file(&task_dir, &file, false).map_err(e)?;
                let new: Vec<ChatMessage> = read_lines(&path)?;
                let after: u64 = new.iter().map(estimate_message_tokens).sum();
                ensure!(after < tokens, "returned {after} tokens for {tokens}: the host rejects it; return an error when there is nothing to compress");
                clean_directory(&dir, &before, Some(&file))?;
                Ok(format!("{tokens} → {after} tokens"))
            }
        }
    })());
}

fn failing_llm(runtime: &Runtime, plugin: &LoadedPlugin, scratch: &Scratch, suite: &mut Suite) {
    suite.record_note(
        "compress with a failing LLM leaves the context as it was",
        (|| {
            let dir = scratch.task("compress-failing-llm")?;
            let context = write_synthetic_task(&dir, 12)?;
            let before = fs::read(dir.join(CURRENT)).map_err(e)?;
            let calls = Arc::new(Mutex::new(Vec::new()));
            let llm = FakeLlm {
                dir: dir.clone(),
                fail: true,
                calls: calls.clone(),
            };
            let mut compressor = runtime.compressor(plugin, &dir, Box::new(llm)).map_err(e)?;
            let tokens: u64 = context.iter().map(estimate_message_tokens).sum();
            let outcome = compressor.compress(&compress_config(tokens));
            drop(compressor);
            let called = !calls.lock().unwrap_or_else(|p| p.into_inner()).is_empty();
            match outcome {
                Err(err) => {
                    ensure!(
                        is_plugin_error(&err),
                        "expected the component's error, got {err}"
                    );
                    ensure!(called, "failed without calling the LLM: {err}");
                    clean_directory(&dir, &before, None)?;
                    Ok(Note::Pass(format!("{err}; the directory is as it was")))
                }
                Ok(r) if !called => Ok(Note::Skip(format!(
                    "the compressor does not call the LLM (it returned {})",
                    r.context_file
                ))),
                Ok(r) => Err(format!(
                    "reported success ({}) although the LLM failed",
                    r.context_file
                )),
            }
        })(),
    );
}
