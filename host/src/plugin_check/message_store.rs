//! The message-store suite: open on an empty directory, appends (CJK text, a tool call and its
//! result), counts, the exact line formats of messages.jsonl / current.jsonl, token counts,
//! `recreate-current-context`, `record-summary`, reopening, `add-message-file`, and a
//! large history with bounded linear memory.

use ctxhost_format::files::{CURRENT, MESSAGES};
use std::fs;
use std::time::Instant;

use ctxhost_format::{ChatMessage, HistoryLine, estimate_message_tokens};
use serde_json::Value;

use super::harness::*;
use crate::runtime::{LoadedPlugin, PluginError, Runtime};

use super::CheckOptions;

pub(super) fn message_store_suite(
    runtime: &Runtime,
    plugin: &LoadedPlugin,
    scratch: &Scratch,
    options: &CheckOptions,
    suite: &mut Suite,
) {
    let dir = match scratch.task("store") {
        Ok(d) => d,
        Err(err) => return suite.record("task directory", Err(err)),
    };
    let mut store = match runtime.message_store(plugin, &dir) {
        Ok(s) => s,
        Err(err) => return suite.record("instantiate", Err(e(err))),
    };
    let messages = sample_messages();
    let mut added = Vec::new();

    suite.record(
        "open on an empty task directory",
        (|| {
            let stats = store.open().map_err(e)?;
            ensure!(
                stats.history_count == 0 && stats.current_count == 0 && stats.current_tokens == 0,
                "expected all-zero stats, got {stats:?}"
            );
            ensure!(
                !dir.join(MESSAGES).exists(),
                "open created messages.jsonl (it must create no file)"
            );
            ensure!(
                !dir.join(CURRENT).exists(),
                "open created current.jsonl (it must create no file)"
            );
            Ok("history 0, current 0, tokens 0; no file created".to_string())
        })(),
    );

    suite.record(
        "add-message ×3 (CJK text, a tool call with reasoning, its failed result)",
        (|| {
            for (m, ts) in messages.iter().zip(TIMESTAMPS) {
                added.push(store.add_message(m, ts).map_err(e)?);
            }
            let seqs: Vec<u64> = added.iter().map(|a| a.seq).collect();
            ensure!(seqs == [1, 2, 3], "seqs {seqs:?}, expected [1, 2, 3]");
            ensure!(
                added.iter().all(|a| a.tokens > 0),
                "a message was counted as 0 tokens: {added:?}"
            );
            Ok(format!(
                "seqs 1, 2, 3; tokens {:?}",
                added.iter().map(|a| a.tokens).collect::<Vec<_>>()
            ))
        })(),
    );

    suite.record(
        "count-messages",
        (|| {
            let n = store.count_messages().map_err(e)?;
            ensure!(n == 3, "count-messages returned {n} after 3 appends");
            Ok("3".to_string())
        })(),
    );

    suite.record(
        "messages.jsonl lines",
        (|| {
            let lines: Vec<HistoryLine> = read_lines(&dir.join(MESSAGES))?;
            ensure!(lines.len() == 3, "{} lines, expected 3", lines.len());
            for (i, (line, m)) in lines.iter().zip(&messages).enumerate() {
                let n = i as u64 + 1;
                ensure!(
                    line.seq == n,
                    "line {n}: seq {} (seq must run 1..n without gaps)",
                    line.seq
                );
                ensure!(
                    normalized(&line.to_chat()) == normalized(m),
                    "line {n}: {:?} differs from the message added {:?}",
                    line.to_chat(),
                    m
                );
                ensure!(
                    line.timestamp == TIMESTAMPS[i],
                    "line {n}: timestamp {:?}, expected {:?}",
                    line.timestamp,
                    TIMESTAMPS[i]
                );
                if let Some(a) = added.get(i) {
                    ensure!(
                        line.tokens == a.tokens,
                        "line {n}: tokens {} but add-message returned {}",
                        line.tokens,
                        a.tokens
                    );
                }
                ensure!(line.summary_id.is_none(), "line {n}: unexpected summary_id");
            }
            let raw = fs::read(dir.join(MESSAGES)).map_err(e)?;
            ensure!(
                raw.ends_with(b"\n"),
                "the last line is not newline-terminated"
            );
            Ok("3 HistoryLine lines, seq 1..3, content and timestamps as added".to_string())
        })(),
    );

    suite.record(
        "current.jsonl lines",
        (|| {
            let lines: Vec<ChatMessage> = read_lines(&dir.join(CURRENT))?;
            ensure!(lines.len() == 3, "{} lines, expected 3", lines.len());
            for (i, (line, m)) in lines.iter().zip(&messages).enumerate() {
                ensure!(
                    normalized(line) == normalized(m),
                    "line {}: {line:?} differs from the message added {m:?}",
                    i + 1
                );
            }
            let raw = fs::read_to_string(dir.join(CURRENT)).map_err(e)?;
            ensure!(
                raw.contains("\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\""),
                "tool calls are not in OpenAI shape: {raw}"
            );
            Ok("3 OpenAI chat message lines equal to the messages added".to_string())
        })(),
    );

    suite.record(
        "current-context-file",
        (|| {
            let f = store.current_context_file().map_err(e)?;
            ensure!(
                f.trim_start_matches("./") == CURRENT,
                "returned {f:?}, expected \"current.jsonl\""
            );
            Ok(f)
        })(),
    );

    let mut tokens_before = 0;
    suite.record(
        "current-token-count",
        (|| {
            let t = store.current_token_count().map_err(e)?;
            let sum: u64 = added.iter().map(|a| a.tokens).sum();
            ensure!(t > 0, "0 tokens for 3 messages");
            ensure!(
                t == sum,
                "{t} tokens, but the appended messages were {sum} tokens"
            );
            tokens_before = t;
            Ok(format!("{t} tokens (= the sum of the appended messages)"))
        })(),
    );

    suite.record(
        "recreate-current-context from a copy of current.jsonl",
        (|| {
            fs::copy(dir.join(CURRENT), dir.join("recreate_src.jsonl")).map_err(e)?;
            let stats = store
                .recreate_current_context("recreate_src.jsonl")
                .map_err(e)?;
            ensure!(
                stats.current_count == 3,
                "current-count {} after recreating from 3 lines",
                stats.current_count
            );
            ensure!(
                stats.history_count == 3,
                "history-count {} (the history must not change)",
                stats.history_count
            );
            ensure!(
                stats.current_tokens == tokens_before,
                "recounted {} tokens, the running count was {tokens_before}",
                stats.current_tokens
            );
            let t = store.current_token_count().map_err(e)?;
            ensure!(
                t == stats.current_tokens,
                "current-token-count {t} differs from the recount {}",
                stats.current_tokens
            );
            ensure!(
                !dir.join("recreate_src.jsonl").exists(),
                "the source file was not deleted"
            );
            let lines: Vec<ChatMessage> = read_lines(&dir.join(CURRENT))?;
            ensure!(
                lines
                    .iter()
                    .map(normalized)
                    .eq(messages.iter().map(normalized)),
                "current.jsonl changed content"
            );
            Ok(format!("3 messages, {t} tokens, source deleted"))
        })(),
    );

    let short = vec![
        ChatMessage::text("system", "You are a coding agent."),
        ChatMessage::text(
            "user",
            "Summary of the work so far: read src/main.rs; 上下文。",
        ),
    ];
    let mut short_tokens = 0;
    suite.record(
        "recreate-current-context from a shorter context",
        (|| {
            write_lines(&dir.join("recreate_short.jsonl"), &short)?;
            let stats = store
                .recreate_current_context("recreate_short.jsonl")
                .map_err(e)?;
            ensure!(
                stats.current_count == 2,
                "current-count {}, expected 2",
                stats.current_count
            );
            ensure!(
                stats.history_count == 3,
                "history-count {}, expected 3",
                stats.history_count
            );
            let t = store.current_token_count().map_err(e)?;
            ensure!(
                t > 0 && t == stats.current_tokens,
                "current-token-count {t}, recount {}",
                stats.current_tokens
            );
            let host: u64 = short.iter().map(estimate_message_tokens).sum();
            ensure!(
                t < tokens_before,
                "{t} tokens for 2 short messages, not fewer than the {tokens_before} before"
            );
            let lines: Vec<ChatMessage> = read_lines(&dir.join(CURRENT))?;
            ensure!(
                lines
                    .iter()
                    .map(normalized)
                    .eq(short.iter().map(normalized)),
                "current.jsonl is not the source's messages"
            );
            let history: Vec<HistoryLine> = read_lines(&dir.join(MESSAGES))?;
            ensure!(
                history.len() == 3,
                "messages.jsonl changed to {} lines",
                history.len()
            );
            short_tokens = t;
            Ok(format!(
                "2 messages, {t} tokens (host estimate {host}); history still 3"
            ))
        })(),
    );

    suite.record("recreate-current-context rejects a malformed source", (|| {
        let before = fs::read(dir.join(CURRENT)).map_err(e)?;
        let text = format!("{}\n{{\"role\": \"user\", \"content\n", serde_json::to_string(&short[0]).map_err(e)?);
        fs::write(dir.join("recreate_bad.jsonl"), text).map_err(e)?;
        match store.recreate_current_context("recreate_bad.jsonl") {
            Ok(stats) => return Err(format!("accepted a source whose line 2 is not JSON ({stats:?})")),
            Err(err) => {
                ensure!(is_plugin_error(&err), "expected an invalid-input error, got {err}");
                ensure!(
                    matches!(err.plugin_error(), Some(PluginError::InvalidInput(m)) if names_line(m, 2)),
                    "expected invalid-input naming line 2, got {err}"
                );
            }
        }
        ensure!(fs::read(dir.join(CURRENT)).map_err(e)? == before, "current.jsonl changed");
        let t = store.current_token_count().map_err(e)?;
        ensure!(t == short_tokens, "current-token-count {t} changed (was {short_tokens})");
        Ok("invalid-input naming line 2; current.jsonl and counts unchanged".to_string())
    })());

    suite.record(
        "record-summary",
        (|| {
            let before = fs::read(dir.join(CURRENT)).map_err(e)?;
            let summary = ChatMessage::text("assistant", "Summary: the agent read src/main.rs.");
            let a = store
                .record_summary(&summary, 1, "2026-01-02T03:05:00Z")
                .map_err(e)?;
            ensure!(a.seq == 4, "seq {}, expected 4", a.seq);
            let lines: Vec<HistoryLine> = read_lines(&dir.join(MESSAGES))?;
            ensure!(
                lines.len() == 4,
                "messages.jsonl has {} lines, expected 4",
                lines.len()
            );
            let last = &lines[3];
            ensure!(
                last.seq == 4 && last.role == "assistant",
                "last line {last:?}"
            );
            ensure!(
                last.summary_id == Some(1),
                "summary_id {:?}, expected 1",
                last.summary_id
            );
            // The spec's form is a JSON number.
            let raw: Vec<Value> = read_lines(&dir.join(MESSAGES))?;
            ensure!(
                raw[3].get("summary_id").and_then(Value::as_u64) == Some(1),
                "summary_id written as {}, expected the JSON number 1",
                raw[3]["summary_id"]
            );
            ensure!(
                last.content == summary.content,
                "content {:?}",
                last.content
            );
            ensure!(
                fs::read(dir.join(CURRENT)).map_err(e)? == before,
                "current.jsonl changed (summaries go to messages.jsonl only)"
            );
            Ok("seq 4 with summary_id in messages.jsonl; current.jsonl unchanged".to_string())
        })(),
    );
    drop(store);

    suite.record(
        "a new instance sees the same state",
        (|| {
            let mut again = runtime.message_store(plugin, &dir).map_err(e)?;
            let stats = again.open().map_err(e)?;
            ensure!(
                stats.history_count == 4,
                "history-count {}, expected 4",
                stats.history_count
            );
            ensure!(
                stats.current_count == 2,
                "current-count {}, expected 2",
                stats.current_count
            );
            ensure!(
                stats.current_tokens == short_tokens,
                "current-tokens {}, expected {short_tokens}",
                stats.current_tokens
            );
            let a = again
                .add_message(&ChatMessage::text("user", "next"), "2026-01-02T03:06:00Z")
                .map_err(e)?;
            ensure!(a.seq == 5, "the next append got seq {}, expected 5", a.seq);
            Ok(format!(
                "history 4, current 2, {short_tokens} tokens; next seq 5"
            ))
        })(),
    );

    suite.record(
        "add-message-file (a reply's text in a file: the lines add-message would write)",
        add_message_file(runtime, plugin, &dir),
    );

    suite.record(
        &format!(
            "large history ({} messages) in bounded memory",
            options.large_messages
        ),
        large_history(runtime, plugin, scratch, options),
    );
}

/// `add-message-file` after the suite's 5 messages: a text of 300 KiB with every
/// character JSON escapes in `reply.content` lands as seq 6 with that content and the tokens
/// `add-message` would count, in both files; the file is left in place.
fn add_message_file(runtime: &Runtime, plugin: &LoadedPlugin, dir: &std::path::Path) -> Outcome {
    let unit = "said \"ok\" \\ \n\t\u{1}\u{2028}上下文😀 ";
    let text = unit.repeat(300 * 1024 / unit.len());
    let file = ctxhost_format::files::REPLY_CONTENT;
    fs::write(dir.join(file), &text).map_err(e)?;
    let mut store = runtime.message_store(plugin, dir).map_err(e)?;
    store.open().map_err(e)?;
    let head = ChatMessage {
        role: "assistant".to_string(),
        ..ChatMessage::default()
    };
    let a = store
        .add_message_file(&head, file, "2026-01-02T03:07:00Z")
        .map_err(e)?;
    let whole = ChatMessage::text("assistant", text.clone());
    ensure!(a.seq == 6, "seq {}, expected 6", a.seq);
    ensure!(
        a.tokens == estimate_message_tokens(&whole),
        "tokens {}, expected {} (add-message's count of the same message)",
        a.tokens,
        estimate_message_tokens(&whole)
    );
    let lines: Vec<HistoryLine> = read_lines(&dir.join(MESSAGES))?;
    let last = lines.last().ok_or("messages.jsonl is empty")?;
    ensure!(
        last.seq == 6 && last.content.as_deref() == Some(text.as_str()),
        "messages.jsonl's last line is not seq 6 with the file's text"
    );
    let current: Vec<ChatMessage> = read_lines(&dir.join(CURRENT))?;
    ensure!(
        current.last().and_then(|m| m.content.as_deref()) == Some(text.as_str()),
        "current.jsonl's last line does not hold the file's text"
    );
    ensure!(
        fs::read_to_string(dir.join(file)).map_err(e)? == text,
        "{file} was changed or deleted (the host deletes it)"
    );
    Ok(format!(
        "seq 6, {} tokens, {} bytes of text in both lines; peak linear memory {:.1} MiB",
        a.tokens,
        text.len(),
        store.memory_peak_bytes() as f64 / (1024.0 * 1024.0)
    ))
}

pub(super) fn large_history(
    runtime: &Runtime,
    plugin: &LoadedPlugin,
    scratch: &Scratch,
    options: &CheckOptions,
) -> Outcome {
    let dir = scratch.task("store-large")?;
    let budget = options.memory_budget_bytes;
    let mut store = runtime.message_store(plugin, &dir).map_err(e)?;
    store.open().map_err(e)?;
    let filler = "x".repeat(options.large_message_bytes.saturating_sub(40));
    let started = Instant::now();
    let mut tokens = 0;
    for i in 1..=options.large_messages {
        let role = if i % 2 == 1 { "user" } else { "assistant" };
        let m = ChatMessage::text(role, format!("message {i} 上下文 {filler}"));
        let a = store.add_message(&m, "2026-01-02T03:04:05Z").map_err(e)?;
        ensure!(a.seq == i, "append {i} got seq {}", a.seq);
        tokens += a.tokens;
    }
    let elapsed = started.elapsed();
    ensure!(
        store.current_token_count().map_err(e)? == tokens,
        "current-token-count differs from the sum of appends"
    );
    let append_peak = store.memory_peak_bytes();
    drop(store);
    let mut again = runtime.message_store(plugin, &dir).map_err(e)?;
    let stats = again.open().map_err(e)?;
    ensure!(
        stats.history_count == options.large_messages
            && stats.current_count == options.large_messages,
        "reopened: {stats:?}, expected {} messages",
        options.large_messages
    );
    ensure!(
        stats.current_tokens == tokens,
        "reopened: {} tokens, expected {tokens}",
        stats.current_tokens
    );
    let open_peak = again.memory_peak_bytes();
    let size = fs::metadata(dir.join(MESSAGES))
        .map(|m| m.len())
        .unwrap_or(0);
    let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
    ensure!(
        append_peak <= budget && open_peak <= budget,
        "linear memory reached {:.1} MiB while appending and {:.1} MiB while opening a {:.1} MiB history; the \
         budget is {:.0} MiB (the store must stream files, not load them)",
        mib(append_peak),
        mib(open_peak),
        size as f64 / (1024.0 * 1024.0),
        mib(budget)
    );
    Ok(format!(
        "{} appends in {:.1} s ({:.0} µs each), messages.jsonl {:.1} MiB; peak linear memory {:.1} MiB appending, \
         {:.1} MiB reopening (budget {:.0} MiB)",
        options.large_messages,
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / options.large_messages.max(1) as f64,
        size as f64 / (1024.0 * 1024.0),
        mib(append_peak),
        mib(open_peak),
        mib(budget)
    ))
}

// ---------------------------------------------------------------------------------------------
// Request format
