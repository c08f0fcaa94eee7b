//! `builtin:llm-summarizer`: the default compressor (world `compressor-plugin`, DESIGN.md §6).
//!
//! `should-compress`: current tokens > context-length × threshold.
//!
//! `compress`, streaming every file a line at a time:
//! 1. [`split::scan`] current.jsonl: the kind of each line (one byte each) and the range of an
//!    earlier summary at line 2; the cut ([`cut_point`]) keeps the `keep-recent-messages` most
//!    recent messages, moved earlier so a tool call and all its results stay together.
//! 2. [`split::split`]: lines `2..cut` → to_summarize.jsonl, the rest → unsummarized.jsonl.
//! 3. [`history::tail_seqs`]: the messages.jsonl seqs of the summarised messages.
//! 4. [`summarize`]: the summary, through `llm.complete`, every request within the window
//!    (chunks and merges when needed).
//! 5. compressed.jsonl = the system prompt line + one summary message (role `user`, `Summary of
//!    the conversation so far (messages S–E):\n…`) + unsummarized.jsonl; the summary is
//!    appended to summaries.jsonl and returned for messages.jsonl.
//!
//! Temporaries (to_summarize.jsonl, unsummarized.jsonl, summary_request.jsonl) are deleted on
//! success and failure; on failure compressed.jsonl is deleted too and current.jsonl, which is
//! only ever read, stays as it was. An earlier summary is summarised again with the rest and
//! its range start carries over.

wit_bindgen::generate!({ world: "compressor-plugin", path: "../../wit" });

#[path = "../../shared/cleanup.rs"]
mod cleanup;
mod files;
mod history;
#[path = "../../shared/jsonl_files.rs"]
mod jsonl_files;
#[path = "../../shared/plugin_error.rs"]
mod plugin_error;
mod split;
mod summarize;

use ctxhost_format::compress::{cut_point, over_threshold, summary_message};
use ctxhost_format::time::now_rfc3339_utc;
use ctxhost_format::{SummaryLine, estimate_message_tokens, estimate_tokens};

use cleanup::Cleanup;
use ctxhost::plugin::log::{Level, log};
use ctxhost::plugin::types::PluginError;
use exports::ctxhost::plugin::compressor::{CompressConfig, CompressResult, Guest, SummaryInfo};
use files::{COMPRESSED, CURRENT, SUMMARIES, SUMMARY_REQUEST, TO_SUMMARIZE, UNSUMMARIZED};
use jsonl_files::LineWriter;

struct LlmSummarizer;

impl Guest for LlmSummarizer {
    fn should_compress(current_tokens: u64, config: CompressConfig) -> bool {
        over_threshold(current_tokens, config.context_length, config.threshold)
    }

    fn compress(config: CompressConfig) -> Result<CompressResult, PluginError> {
        let mut cleanup = Cleanup::new(&[TO_SUMMARIZE, UNSUMMARIZED, SUMMARY_REQUEST], COMPRESSED);
        let result = compress(&config)?;
        cleanup.keep_output();
        Ok(result)
    }
}

fn compress(config: &CompressConfig) -> Result<CompressResult, PluginError> {
    let summarizer = summarize::Summarizer::new(config)?;
    let scan = split::scan()?;
    let keep = config.keep_recent_messages as usize;
    let cut = cut_point(&scan.kinds, keep);
    if cut <= 1 {
        return Err(PluginError::Internal(format!(
            "nothing to summarise: {CURRENT} holds the system prompt and {} messages, all of them kept \
             (keep-recent-messages {keep}, moved earlier to keep tool calls with their results); the kept \
             messages alone exceed the threshold — lower keep-recent-messages or raise context-length",
            scan.kinds.len() - 1
        )));
    }
    let parts = split::split(cut)?;

    // Seqs: the history lines of current.jsonl are the tail of messages.jsonl.
    let summarized = scan.history_lines(1, cut) as usize;
    let seqs = history::tail_seqs(scan.history_lines(1, scan.kinds.len()) as usize)?;
    let (start_seq, end_seq) = match (scan.previous, summarized) {
        (Some((start, end)), 0) => (start, end),
        (Some((start, _)), k) => (start, seqs[k - 1]),
        (None, k) => (seqs[0], seqs[k - 1]),
    };

    let summary = summarizer.summarize_file(TO_SUMMARIZE)?;
    let message = summary_message(start_seq, end_seq, &summary.text);
    let summary_tokens = estimate_tokens(&summary.text);
    let message_tokens = estimate_message_tokens(&message);
    if message_tokens >= parts.summarized_tokens {
        return Err(PluginError::Internal(format!(
            "the summary ({message_tokens} tokens) is not smaller than the {} messages it would replace ({} \
             tokens); the context was left as it was",
            cut - 1,
            parts.summarized_tokens
        )));
    }

    let mut out = LineWriter::create(COMPRESSED)?;
    out.line(&files::first_line(CURRENT)?)?;
    out.json(&message)?;
    files::copy_lines(UNSUMMARIZED, &mut out)?;
    out.finish()?;

    let id = files::next_summary_id()?;
    let original_tokens = parts.summarized_tokens;
    jsonl_files::append_json_line_synced(
        SUMMARIES,
        &SummaryLine {
            id,
            start_seq,
            end_seq,
            summary: summary.text.clone(),
            original_tokens,
            summary_tokens,
            ratio: if original_tokens == 0 {
                0.0
            } else {
                summary_tokens as f64 / original_tokens as f64
            },
            timestamp: now_rfc3339_utc(),
        },
    )?;
    log(
        Level::Info,
        &format!(
            "summary {id}: summarised messages {start_seq}–{end_seq} ({original_tokens} tokens, {} chunk(s), {} \
             request(s)) into {summary_tokens} tokens; context {} → {} tokens",
            summary.chunks,
            summary.requests,
            parts.system_tokens + parts.summarized_tokens + parts.kept_tokens,
            parts.system_tokens + message_tokens + parts.kept_tokens,
        ),
    );
    Ok(CompressResult {
        context_file: COMPRESSED.to_string(),
        summary: Some(SummaryInfo {
            id,
            start_seq,
            end_seq,
            summary: summary.text,
            original_tokens,
            summary_tokens,
        }),
    })
}

export!(LlmSummarizer);
