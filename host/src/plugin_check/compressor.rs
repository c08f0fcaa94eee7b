//! The compressor suite: `should-compress` around its threshold; `compress` of an over-threshold
//! context with a fake LLM returning a fixed summary, and with a failing LLM.

use ctxhost_format::files::{CURRENT, MESSAGES, SUMMARIES, TOOLS};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ctxhost_format::summary_id::OnDisk;
use ctxhost_format::{ChatMessage, HistoryLine, estimate_message_tokens};
use serde_json::Value;

use super::harness::*;
use crate::invariants::check_context_file;
use crate::runtime::{
    Completion, CompressConfig, LlmImport, LoadedPlugin, Runtime, Usage, WitVersion,
};

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
    let mut context = vec![ChatMessage::text(
        "system",
        "You are a coding agent. Use the tools; answer briefly.",
    )];
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
    let history: Vec<HistoryLine> = context
        .iter()
        .enumerate()
        .map(|(i, m)| HistoryLine {
            seq: i as u64 + 1,
            role: m.role.clone(),
            content: m.content.clone(),
            timestamp: "2026-01-02T03:04:05Z".into(),
            tokens: estimate_message_tokens(m),
            tool_name: m.tool_name.clone(),
            tool_calls: m.tool_calls.clone(),
            tool_call_id: m.tool_call_id.clone(),
            summary_id: None,
        })
        .collect();
    write_lines(&dir.join(CURRENT), &context)?;
    write_lines(&dir.join(MESSAGES), &history)?;
    Ok(context)
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

pub(super) fn compressor_suite(
    runtime: &Runtime,
    plugin: &LoadedPlugin,
    scratch: &Scratch,
    suite: &mut Suite,
) {
    let dir = match scratch.task("compress") {
        Ok(d) => d,
        Err(err) => return suite.record("task directory", Err(err)),
    };
    let calls = Arc::new(Mutex::new(Vec::new()));
    let llm = FakeLlm {
        dir: dir.clone(),
        fail: false,
        calls: calls.clone(),
    };
    let mut compressor = match runtime.compressor(plugin, &dir, Box::new(llm)) {
        Ok(c) => c,
        Err(err) => return suite.record("instantiate", Err(e(err))),
    };

    suite.record("should-compress around the threshold", (|| {
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

    let context = match write_synthetic_task(&dir, 12) {
        Ok(c) => c,
        Err(err) => return suite.record("synthetic context", Err(err)),
    };
    let original_tokens: u64 = context.iter().map(estimate_message_tokens).sum();
    let config = compress_config(original_tokens);
    let current_before = fs::read(dir.join(CURRENT)).unwrap_or_default();

    let result = compressor.compress(&config);
    let result = match result {
        Ok(r) => {
            suite.record(
                "compress an over-threshold context",
                Ok(format!(
                    "{} messages / {original_tokens} tokens in a {}-token window → {}",
                    context.len(),
                    config.context_length,
                    r.context_file
                )),
            );
            r
        }
        Err(err) => return suite.record("compress an over-threshold context", Err(e(err))),
    };
    let task_dir = crate::task_dir::TaskDir::open(&dir);
    let new_path = dir.join(&result.context_file);

    suite.record(
        "the new context is a separate file of chat messages",
        (|| {
            let name = result.context_file.trim_start_matches("./");
            ensure!(
                name != CURRENT,
                "compress wrote current.jsonl itself (it must write a new file)"
            );
            let task_dir = task_dir.as_ref().map_err(|e| e.to_string())?;
            crate::untrusted::component_path(task_dir, &result.context_file)
                .map_err(|e| format!("context file {e}"))?;
            let lines: Vec<ChatMessage> = read_lines(&new_path)?;
            Ok(format!("{name}: {} messages", lines.len()))
        })(),
    );

    let new_context: Vec<ChatMessage> = read_lines(&new_path).unwrap_or_default();

    suite.record(
        "system prompt first, tool calls paired",
        (|| {
            ensure!(
                new_context.first() == Some(&context[0]),
                "the first message is {:?}, not the system prompt",
                new_context.first()
            );
            let task_dir = task_dir.as_ref().map_err(|e| e.to_string())?;
            let summary = check_context_file(task_dir, &result.context_file, false).map_err(e)?;
            Ok(format!(
                "{} messages pass the host's invariants",
                summary.messages
            ))
        })(),
    );

    suite.record(
        "fewer tokens, recent messages kept",
        (|| {
            let tokens: u64 = new_context.iter().map(estimate_message_tokens).sum();
            ensure!(
                tokens < original_tokens,
                "{tokens} tokens, not fewer than the original {original_tokens}"
            );
            ensure!(
                new_context.last() == context.last(),
                "the last message was not kept verbatim"
            );
            Ok(format!(
                "{original_tokens} → {tokens} tokens; last message kept"
            ))
        })(),
    );

    suite.record("summary from the llm import", (|| {
        let calls = calls.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if calls.is_empty() {
            ensure!(result.summary.is_none(), "reported a summary without asking the LLM");
            return Ok("the strategy does not call the LLM".to_string());
        }
        for c in &calls {
            let msgs = c.messages.as_ref().map_err(|err| format!("llm.complete({:?}): {err}", c.messages_file))?;
            let tokens: u64 = msgs.iter().map(estimate_message_tokens).sum();
            ensure!(
                tokens + c.max_output_tokens as u64 <= config.context_length,
                "a summary request of {tokens} tokens + {} output does not fit the {}-token window",
                c.max_output_tokens,
                config.context_length
            );
        }
        let text = serde_json::to_string(&new_context).map_err(e)?;
        ensure!(text.contains("SUMMARY: the agent listed"), "the new context does not contain the LLM's summary");
        if let Some(s) = &result.summary {
            ensure!(s.start_seq >= 1 && s.start_seq <= s.end_seq, "summary covers seq {}..{}", s.start_seq, s.end_seq);
            ensure!(s.summary.contains("SUMMARY: the agent listed"), "summary text {:?}", s.summary);
            // The spec's form is a JSON number; a 0.1.0 compressor writes strings (`sum-N`, or its
            // own scheme, which the host's shim numbered).
            let lines: Vec<Value> = read_lines(&dir.join(SUMMARIES))?;
            let legacy = plugin.wit() == WitVersion::V0_1_0;
            let found = lines.iter().filter_map(|l| l.get("id").and_then(OnDisk::classify)).any(|id| match id {
                OnDisk::Number(n) => n == s.id,
                OnDisk::Legacy(_, n) => legacy && n == s.id,
                OnDisk::Unreadable(_) => legacy,
            });
            ensure!(found, "summaries.jsonl has no line with id {} (a JSON number)", s.id);
        }
        Ok(format!("{} llm.complete call(s), each fits the window; summary in the new context", calls.len()))
    })());

    suite.record(
        "current.jsonl untouched, temporaries removed",
        (|| {
            ensure!(
                fs::read(dir.join(CURRENT)).map_err(e)? == current_before,
                "current.jsonl was modified"
            );
            let allowed: BTreeSet<&str> = [
                CURRENT,
                MESSAGES,
                SUMMARIES,
                TOOLS,
                result.context_file.trim_start_matches("./"),
            ]
            .into_iter()
            .collect();
            let mut extra = Vec::new();
            for entry in fs::read_dir(&dir).map_err(e)? {
                let name = entry.map_err(e)?.file_name().to_string_lossy().to_string();
                if !allowed.contains(name.as_str()) {
                    extra.push(name);
                }
            }
            ensure!(extra.is_empty(), "left behind {extra:?}");
            Ok("no stray files".to_string())
        })(),
    );
    drop(compressor);

    suite.record(
        "compress with a failing LLM leaves the context as it was",
        (|| {
            let dir = scratch.task("compress-fail")?;
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
            let called = !calls.lock().unwrap_or_else(|p| p.into_inner()).is_empty();
            ensure!(
                fs::read(dir.join(CURRENT)).map_err(e)? == before,
                "current.jsonl was modified"
            );
            match outcome {
                Err(err) => {
                    ensure!(
                        is_plugin_error(&err),
                        "expected the component's error, got {err}"
                    );
                    ensure!(called, "failed without calling the LLM: {err}");
                    Ok(e(err))
                }
                Ok(r) if !called => Ok(format!(
                    "the strategy does not call the LLM ({})",
                    r.context_file
                )),
                Ok(r) => Err(format!(
                    "reported success ({}) although the LLM failed",
                    r.context_file
                )),
            }
        })(),
    );
}
