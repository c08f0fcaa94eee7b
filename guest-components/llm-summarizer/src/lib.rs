//! `builtin:llm-summarizer`: the default compressor (world `compressor-plugin`, DESIGN.md §6).
//!
//! `should-compress`: current tokens > context-length × threshold.
//!
//! `compress`, streaming every file a line at a time:
//! 1. [`split::scan`] current.jsonl: the kind and estimated tokens of each line and the range
//!    of an earlier summary at line 2; the kept tail ([`plan_tail`]) is the
//!    `keep-recent-messages` most recent messages, moved earlier so a tool call and all its
//!    results stay together, and at most `keep-recent-tokens` tokens: older groups are
//!    summarised too, down to the newest message's group, whose older tool results are cut
//!    (head and tail kept, the rest named in tools.jsonl) when it alone is over the bound.
//! 2. [`split::split`]: lines `2..cut` → to_summarize.jsonl, the rest → unsummarized.jsonl
//!    (the planned results cut). With nothing before the cut, or a summary that would not be
//!    smaller, the new context only has those results cut, and no summary is made.
//! 3. [`ctxhost_plugin::compress::tail_seqs`]: the messages.jsonl seqs of the summarised messages.
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

mod files;
mod split;
mod summarize;

use ctxhost_plugin::format::compress::{over_threshold, plan_tail, summary_message};
use ctxhost_plugin::format::time::now_rfc3339_utc;
use ctxhost_plugin::format::{SummaryLine, estimate_message_tokens, estimate_tokens};

use ctxhost_plugin::Cleanup;
use ctxhost_plugin::compressor::{CompressConfig, CompressResult, Guest, SummaryInfo};
use ctxhost_plugin::jsonl::LineWriter;
use ctxhost_plugin::log::{Level, log};
use ctxhost_plugin::types::PluginError;
use files::{COMPRESSED, CURRENT, SUMMARIES, SUMMARY_REQUEST, TO_SUMMARIZE, UNSUMMARIZED};

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
    let scan = split::scan()?;
    let keep = config.keep_recent_messages as usize;
    let plan = plan_tail(&scan.kinds, &scan.tokens, keep, config.keep_recent_tokens);
    let cut = plan.cut;
    if cut <= 1 && plan.shrink.is_empty() {
        return Err(PluginError::Internal(nothing_to_summarise(&scan, config)));
    }
    let parts = split::split(cut, &plan.shrink)?;
    if cut <= 1 {
        // Nothing older than the newest group: only its older tool results are cut.
        return cut_only(&parts);
    }
    let summarizer = summarize::Summarizer::new(config)?;

    // Seqs: the history lines of current.jsonl are the tail of messages.jsonl.
    let summarized = scan.history_lines(1, cut) as usize;
    let seqs =
        ctxhost_plugin::compress::tail_seqs(scan.history_lines(1, scan.kinds.len()) as usize)?;
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
        if parts.shrunk > 0 {
            log(
                Level::Info,
                &format!(
                    "the summary ({message_tokens} tokens) is not smaller than the {} messages it would replace; \
                     keeping them and only cutting older tool results",
                    cut - 1
                ),
            );
            return cut_only_keeping(cut, &parts);
        }
        return Err(PluginError::Internal(format!(
            "the summary ({message_tokens} tokens) is not smaller than the {} messages it would replace ({} \
             tokens); the context was left as it was",
            cut - 1,
            parts.summarized_tokens
        )));
    }

    let mut out = LineWriter::create(COMPRESSED)?;
    out.line(&ctxhost_plugin::jsonl::first_line(CURRENT)?)?;
    out.json(&message)?;
    files::copy_lines(UNSUMMARIZED, &mut out)?;
    out.finish_unsynced()?;

    let id = ctxhost_plugin::compress::next_summary_id()?;
    let original_tokens = parts.summarized_tokens;
    ctxhost_plugin::jsonl::append_json_line(
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
             request(s)) into {summary_tokens} tokens; {} older tool result(s) of the kept part cut; context {} → {} \
             tokens",
            summary.chunks,
            summary.requests,
            parts.shrunk,
            scan.tokens.iter().sum::<u64>(),
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

/// The new context when nothing is summarised: the system prompt and the kept part (its older
/// tool results cut). No summary.
fn cut_only(parts: &split::Split) -> Result<CompressResult, PluginError> {
    let mut out = LineWriter::create(COMPRESSED)?;
    out.line(&ctxhost_plugin::jsonl::first_line(CURRENT)?)?;
    files::copy_lines(UNSUMMARIZED, &mut out)?;
    out.finish_unsynced()?;
    log(
        Level::Info,
        &format!(
            "no older message to summarise; cut {} older tool result(s) of the newest tool-call group",
            parts.shrunk
        ),
    );
    Ok(CompressResult {
        context_file: COMPRESSED.to_string(),
        summary: None,
    })
}

/// [`cut_only`] when the messages before `cut` are kept as they are (their summary would not
/// be smaller): system prompt, those messages, then the kept part with its results cut.
fn cut_only_keeping(cut: usize, parts: &split::Split) -> Result<CompressResult, PluginError> {
    let mut out = LineWriter::create(COMPRESSED)?;
    out.line(&ctxhost_plugin::jsonl::first_line(CURRENT)?)?;
    files::copy_lines(TO_SUMMARIZE, &mut out)?;
    files::copy_lines(UNSUMMARIZED, &mut out)?;
    out.finish_unsynced()?;
    log(
        Level::Info,
        &format!(
            "kept messages 1–{} as they are; cut {} older tool result(s) of the newest tool-call group",
            cut - 1,
            parts.shrunk
        ),
    );
    Ok(CompressResult {
        context_file: COMPRESSED.to_string(),
        summary: None,
    })
}

/// Why there is nothing to compress, and what would help.
fn nothing_to_summarise(scan: &split::Scan, config: &CompressConfig) -> String {
    let n = scan.kinds.len();
    let kept = scan.kinds.len().saturating_sub(1);
    let newest = scan.tokens.last().copied().unwrap_or(0);
    if config.keep_recent_tokens == 0 {
        return format!(
            "nothing to summarise: {CURRENT} holds the system prompt and {kept} messages, all of them kept \
             (keep-recent-messages {}, moved earlier to keep tool calls with their results, and no token bound): \
             lower keep-recent-messages",
            config.keep_recent_messages
        );
    }
    format!(
        "nothing to summarise: after the system prompt, {CURRENT} holds only the newest message's tool-call group \
         ({} tokens; the newest message alone {newest} tokens), which a compression always keeps whole, and no older \
         tool result in it to cut: it alone is over the threshold of the window (context-length {}); a larger window \
         or shorter tool results are needed",
        scan.tokens[1..n].iter().sum::<u64>(),
        config.context_length
    )
}

ctxhost_plugin::export_compressor!(LlmSummarizer);
