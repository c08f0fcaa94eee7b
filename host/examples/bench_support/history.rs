//! Synthetic task history for the context benchmarks: a task directory's `messages.jsonl`
//! and `current.jsonl` (DESIGN §2 shapes, via `ctxhost_format`) of a chosen size.
//!
//! Content: the system prompt, then rounds of `user` → `assistant` calling `read_file` → `tool`
//! result (a ~6 KB source listing) → `assistant` text, ending with a `user` message so the
//! model has something to answer. Texts are slices of a deterministic pseudo-random corpus with
//! quotes, backslashes, newlines, tabs and non-ASCII characters, so JSON escaping is exercised.
//! messages.jsonl holds the same messages with `seq` 1..n, timestamps and token estimates.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use ctxhost_format::{ChatMessage, HistoryLine, ToolCall, estimate_message_tokens};

/// What [`generate`] wrote.
#[derive(Debug, Clone, Copy)]
pub struct Generated {
    /// Messages in each file.
    pub messages: u64,
    /// Bytes of current.jsonl.
    pub current_bytes: u64,
    /// Bytes of messages.jsonl.
    pub history_bytes: u64,
    /// Sum of the messages' token estimates.
    pub tokens: u64,
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const WORDS: &[&str] = &[
    "fn",
    "let",
    "mut",
    "self",
    "struct",
    "impl",
    "return",
    "match",
    "Some(x)",
    "None",
    "Ok(())",
    "the",
    "context",
    "file",
    "line",
    "message",
    "request",
    "token",
    "error",
    "value",
    "\"quoted\"",
    "path\\to\\file",
    "→",
    "naïve",
    "données",
    "✓",
    "{",
    "}",
    "[",
    "]",
    "=>",
    "&&",
    "//",
    "0x1f",
    "42",
    "3.14",
    "#[derive(Debug)]",
    "use",
    "std::io",
    "Vec<u8>",
    "String",
    "async",
    "await",
];

/// A corpus of about `len` bytes: words, spaces, newlines and tabs.
fn corpus(rng: &mut Rng, len: usize) -> String {
    let mut s = String::with_capacity(len + 32);
    while s.len() < len {
        s.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
        s.push(match rng.below(12) {
            0 => '\n',
            1 => '\t',
            _ => ' ',
        });
    }
    s
}

/// A slice of `corpus` of about `len` bytes starting at a random char boundary.
fn text<'a>(rng: &mut Rng, corpus: &'a str, len: usize) -> &'a str {
    let max_start = corpus.len().saturating_sub(len + 8);
    let mut start = rng.below(max_start.max(1) as u64) as usize;
    while !corpus.is_char_boundary(start) {
        start += 1;
    }
    let mut end = (start + len).min(corpus.len());
    while !corpus.is_char_boundary(end) {
        end += 1;
    }
    &corpus[start..end]
}

/// Writes `messages.jsonl` and `current.jsonl` into `dir` (created if missing, files
/// replaced), growing current.jsonl until it holds at least `target_bytes`.
pub fn generate(dir: &Path, target_bytes: u64, seed: u64) -> std::io::Result<Generated> {
    std::fs::create_dir_all(dir)?;
    let mut current = BufWriter::with_capacity(1 << 20, File::create(dir.join("current.jsonl"))?);
    let mut history = BufWriter::with_capacity(1 << 20, File::create(dir.join("messages.jsonl"))?);
    let mut rng = Rng(seed | 1);
    let corpus = corpus(&mut rng, 1 << 20);
    let mut out = Generated {
        messages: 0,
        current_bytes: 0,
        history_bytes: 0,
        tokens: 0,
    };
    let mut line = Vec::with_capacity(16 << 10);
    let mut add = |m: ChatMessage, out: &mut Generated| -> std::io::Result<()> {
        let tokens = estimate_message_tokens(&m);
        out.messages += 1;
        out.tokens += tokens;
        line.clear();
        serde_json::to_writer(&mut line, &m)?;
        line.push(b'\n');
        current.write_all(&line)?;
        out.current_bytes += line.len() as u64;
        let seq = out.messages;
        let h = HistoryLine {
            seq,
            role: m.role,
            content: m.content,
            timestamp: format!(
                "2026-01-01T{:02}:{:02}:{:02}Z",
                (seq / 3600) % 24,
                (seq / 60) % 60,
                seq % 60
            ),
            tokens,
            tool_name: m.tool_name,
            tool_calls: m.tool_calls,
            tool_call_id: m.tool_call_id,
            is_error: m.is_error,
            reasoning: m.reasoning,
            summary_id: None,
        };
        line.clear();
        serde_json::to_writer(&mut line, &h)?;
        line.push(b'\n');
        history.write_all(&line)?;
        out.history_bytes += line.len() as u64;
        Ok(())
    };
    add(
        ChatMessage::text(
            "system",
            "You are a careful coding agent. Use the tools to read files before changing them.",
        ),
        &mut out,
    )?;
    let mut round = 0u64;
    while out.current_bytes < target_bytes {
        round += 1;
        let len = 200 + rng.below(800) as usize;
        add(
            ChatMessage::text("user", text(&mut rng, &corpus, len)),
            &mut out,
        )?;
        let id = format!("call_{round}");
        let args = format!("{{\"path\":\"src/module_{}.rs\"}}", rng.below(500));
        add(
            ChatMessage {
                role: "assistant".into(),
                content: None,
                tool_calls: Some(vec![ToolCall::new(id.clone(), "read_file", args)]),
                ..Default::default()
            },
            &mut out,
        )?;
        let len = 2000 + rng.below(8000) as usize;
        add(
            ChatMessage {
                role: "tool".into(),
                content: Some(text(&mut rng, &corpus, len).to_string()),
                tool_call_id: Some(id),
                tool_name: Some("read_file".into()),
                ..Default::default()
            },
            &mut out,
        )?;
        let len = 300 + rng.below(2000) as usize;
        add(
            ChatMessage::text("assistant", text(&mut rng, &corpus, len)),
            &mut out,
        )?;
    }
    add(
        ChatMessage::text("user", "Summarise what you changed, in one sentence."),
        &mut out,
    )?;
    current
        .into_inner()
        .map_err(|e| e.into_error())?
        .sync_all()?;
    history
        .into_inner()
        .map_err(|e| e.into_error())?
        .sync_all()?;
    Ok(out)
}
