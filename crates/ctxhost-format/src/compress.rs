//! The pure rules of context compression (DESIGN.md §6), shared by the compressor components
//! (`llm-summarizer`, `observation-masking`) and the host's tests:
//!
//! - [`over_threshold`]: when a context should be compressed;
//! - [`cut_point`]: where the kept tail of a context starts (tool-call groups stay whole);
//!   [`plan_tail`]: the same tail bounded by tokens too, and which older tool results inside it
//!   are cut ([`shrunk_result`]) so that a compression makes room whenever the newest message
//!   alone fits;
//! - the summary message (`Summary of the conversation so far (messages S–E):\n…`) and the
//!   masked tool result placeholder (`[tool result masked: …]`), written and recognised;
//! - [`render_message`]: the plain-text form of a message inside a summary request;
//! - [`cut_to_tokens`], [`Chunker`], [`request_budget`]: keeping a summary request inside the
//!   model's window; [`plan_summary_input`]: keeping a summary's requests few.
//!
//! Token counts are [`crate::estimate_tokens`] estimates.

use std::borrow::Cow;

use crate::tokens::{MESSAGE_OVERHEAD_TOKENS, char_quarter_tokens};
use crate::{ChatMessage, estimate_tokens};

/// What a line of a context file is, for the cut rule: one byte per line, so a compressor can
/// hold the kinds of a context of any length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    /// `system` (the first line).
    System,
    /// `user`, other than a summary.
    User,
    /// `assistant` (with or without tool calls).
    Assistant,
    /// `tool` (a tool result).
    Tool,
    /// The summary message of an earlier compression (role `user`, right after the system
    /// prompt, content starting with [`SUMMARY_PREFIX`]).
    Summary,
    /// Any other role.
    Other,
}

impl LineKind {
    /// The kind of a line with `role` (never [`LineKind::Summary`]: see [`is_summary_line`]).
    pub fn from_role(role: &str) -> LineKind {
        match role {
            "system" => LineKind::System,
            "user" => LineKind::User,
            "assistant" => LineKind::Assistant,
            "tool" => LineKind::Tool,
            _ => LineKind::Other,
        }
    }
}

/// `should-compress` of the builtin compressors: whether a context of `current_tokens`
/// (estimated) exceeds `threshold` (a fraction, e.g. 0.7) of the model's `context_length`
/// (tokens). Strictly greater: a context exactly at the threshold is not compressed.
pub fn over_threshold(current_tokens: u64, context_length: u64, threshold: f64) -> bool {
    current_tokens as f64 > context_length as f64 * threshold
}

/// Index of the first kept message of a context whose lines have `kinds` (index 0 is the
/// system prompt): the `keep` most recent messages are kept, and the cut moves earlier while
/// the first kept message is a tool result, so an assistant message with tool calls and all of
/// its results (parallel calls included) stay on the same side. The messages in `1..cut` are
/// the ones to compress; `cut == 1` means there is nothing to compress; `cut == kinds.len()`
/// (with `keep == 0`) keeps nothing. Never returns 0 for a non-empty context.
pub fn cut_point(kinds: &[LineKind], keep: usize) -> usize {
    let n = kinds.len();
    if n <= 1 {
        return n;
    }
    let mut cut = n.saturating_sub(keep).max(1);
    while cut > 1 && cut < n && kinds[cut] == LineKind::Tool {
        cut -= 1;
    }
    cut
}

/// The smallest content, in estimated tokens, an older tool result inside the kept tail is cut
/// to by [`plan_tail`] (its head and tail, with a note).
pub const MIN_SHRUNK_RESULT_TOKENS: u64 = 200;

/// The kept tail of a compression ([`plan_tail`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailPlan {
    /// Index of the first kept message (messages `1..cut` are compressed), as [`cut_point`].
    pub cut: usize,
    /// Tool results inside the kept tail, other than the newest message, to cut so the tail
    /// fits: `(index, at most this many estimated tokens of content)`, oldest first.
    pub shrink: Vec<(usize, u64)>,
    /// Estimated tokens of the kept tail once the results in `shrink` are cut (an upper bound).
    pub tail_tokens: u64,
}

/// Index of the first message of the tool-call group holding message `i`: the assistant
/// message before a run of tool results (or `i` itself when it is not a tool result). Never
/// below 1.
pub fn group_start(kinds: &[LineKind], mut i: usize) -> usize {
    while i > 1 && i < kinds.len() && kinds[i] == LineKind::Tool {
        i -= 1;
    }
    i
}

/// The kept tail of a context whose lines have `kinds` and estimated `tokens` (index 0 is the
/// system prompt; both slices have the same length), bounded by count **and** by tokens:
///
/// 1. start from [`cut_point`]`(kinds, keep)`: the `keep` most recent messages, tool-call
///    groups whole;
/// 2. while the tail holds more than `max_tail_tokens` and its first group is not the newest
///    message's group, move the cut past that group (its messages are compressed instead);
/// 3. if the tail is still over `max_tail_tokens` (the newest group alone is larger: parallel
///    calls with long results), cut the tool results inside it other than the newest message,
///    oldest first, each to no less than [`MIN_SHRUNK_RESULT_TOKENS`], until it fits.
///
/// The newest message itself is never moved out of the tail nor cut, so a compression can
/// always make room when it alone fits the window. `max_tail_tokens == 0` means no token bound
/// ([`cut_point`] alone). With `keep == 0` nothing is kept.
pub fn plan_tail(
    kinds: &[LineKind],
    tokens: &[u64],
    keep: usize,
    max_tail_tokens: u64,
) -> TailPlan {
    debug_assert_eq!(kinds.len(), tokens.len());
    let n = kinds.len().min(tokens.len());
    let mut cut = cut_point(&kinds[..n], keep);
    let sum = |from: usize| tokens[from.min(n)..n].iter().sum::<u64>();
    if max_tail_tokens == 0 || cut >= n {
        return TailPlan {
            cut,
            shrink: Vec::new(),
            tail_tokens: sum(cut),
        };
    }
    let newest_group = group_start(&kinds[..n], n - 1);
    let mut tail = sum(cut);
    while tail > max_tail_tokens && cut < newest_group {
        let mut next = cut + 1;
        while next < n && kinds[next] == LineKind::Tool {
            next += 1;
        }
        tail -= tokens[cut..next].iter().sum::<u64>();
        cut = next;
    }
    let mut shrink = Vec::new();
    for i in cut..n.saturating_sub(1) {
        if tail <= max_tail_tokens {
            break;
        }
        if kinds[i] != LineKind::Tool || tokens[i] <= MIN_SHRUNK_RESULT_TOKENS + SHRINK_NOTE_TOKENS
        {
            continue;
        }
        let excess = tail - max_tail_tokens;
        // Content tokens left: what the message weighs minus what must go, within bounds.
        let budget = tokens[i]
            .saturating_sub(excess + SHRINK_NOTE_TOKENS)
            .max(MIN_SHRUNK_RESULT_TOKENS);
        let saved = tokens[i].saturating_sub(budget + SHRINK_NOTE_TOKENS);
        if saved == 0 {
            continue;
        }
        tail -= saved;
        shrink.push((i, budget));
    }
    TailPlan {
        cut,
        shrink,
        tail_tokens: tail,
    }
}

/// Tokens of the note [`shrunk_result`] appends (an upper bound).
const SHRINK_NOTE_TOKENS: u64 = 64;

/// Start of the note of a tool result cut by a compression ([`shrunk_result`]).
pub const SHRUNK_NOTE_PREFIX: &str = "[older tool result cut by a compression to make room: ";

/// The content of an older tool result cut to make room in the context: its head and tail
/// ([`cut_to_tokens`], at most `max_tokens` estimated tokens) followed by a note
/// `[older tool result cut by a compression to make room: N characters left out; full text in
/// tools.jsonl seq S]` (or, without a seq, naming `tool_call_id`). Unchanged when it already
/// fits `max_tokens`.
pub fn shrunk_result(
    content: &str,
    max_tokens: u64,
    tools_seq: Option<u64>,
    tool_call_id: &str,
) -> String {
    let kept = cut_to_tokens(content, max_tokens);
    if matches!(kept, Cow::Borrowed(k) if k.len() == content.len()) {
        return content.to_string();
    }
    let left_out = content.chars().count().saturating_sub(kept.chars().count());
    let place = match tools_seq {
        Some(seq) => format!("full text in tools.jsonl seq {seq}"),
        None => format!("full text in tools.jsonl (tool_call_id {tool_call_id})"),
    };
    format!(
        "{kept}\n{SHRUNK_NOTE_PREFIX}about {left_out} characters left out; {place}; call the tool again if you need them]"
    )
}

/// Start of a summary message's content; followed by `S–E):\n` and the summary.
pub const SUMMARY_PREFIX: &str = "Summary of the conversation so far (messages ";

/// The content of the summary message covering messages.jsonl seqs `start..=end`:
/// `Summary of the conversation so far (messages S–E):\n<summary>` (an en dash between S and E).
pub fn summary_content(start: u64, end: u64, summary: &str) -> String {
    format!("{SUMMARY_PREFIX}{start}\u{2013}{end}):\n{summary}")
}

/// The message that carries a summary in a context: role `user` (accepted by every provider
/// right after the system prompt) with [`summary_content`].
pub fn summary_message(start: u64, end: u64, summary: &str) -> ChatMessage {
    ChatMessage::text("user", summary_content(start, end, summary))
}

/// The seq range `(S, E)` of a summary message's content, or `None` when `content` is not one.
pub fn parse_summary_range(content: &str) -> Option<(u64, u64)> {
    let rest = content.strip_prefix(SUMMARY_PREFIX)?;
    let (range, _) = rest.split_once("):\n")?;
    let (start, end) = range.split_once('\u{2013}')?;
    Some((start.parse().ok()?, end.parse().ok()?))
}

/// Whether `message`, found at 0-based `index` of a context, is the summary of an earlier
/// compression (index 1, role `user`, content a [`summary_content`]).
pub fn is_summary_line(index: usize, message: &ChatMessage) -> bool {
    index == 1
        && message.role == "user"
        && message
            .content
            .as_deref()
            .and_then(parse_summary_range)
            .is_some()
}

/// Start of a masked tool result's content.
pub const MASK_PREFIX: &str = "[tool result masked: ";

/// The content that replaces a masked tool result: `[tool result masked: full text in
/// tools.jsonl seq N]`, or, when no tools.jsonl line was found for the call, `[tool result
/// masked: full text not found in tools.jsonl (tool_call_id ID)]`.
pub fn mask_placeholder(tools_seq: Option<u64>, tool_call_id: &str) -> String {
    match tools_seq {
        Some(seq) => format!("{MASK_PREFIX}full text in tools.jsonl seq {seq}]"),
        None => format!(
            "{MASK_PREFIX}full text not found in tools.jsonl (tool_call_id {tool_call_id})]"
        ),
    }
}

/// Whether a tool result's content is already a [`mask_placeholder`].
pub fn is_masked(content: &str) -> bool {
    content.starts_with(MASK_PREFIX) && content.ends_with(']')
}

/// Plain-text form of one message for a summary request:
/// - `role: content` (user, assistant, system);
/// - an assistant's tool calls, one per line: `assistant called NAME(ARGS)`;
/// - a tool result: `tool NAME (ID) result: CONTENT`.
pub fn render_message(message: &ChatMessage) -> String {
    let content = message.content.as_deref().unwrap_or("");
    if message.role == "tool" {
        let name = message.tool_name.as_deref().unwrap_or("?");
        let id = message.tool_call_id.as_deref().unwrap_or("?");
        return format!("tool {name} ({id}) result: {content}");
    }
    let mut out = String::new();
    if !content.is_empty() || message.calls().is_empty() {
        out.push_str(&message.role);
        out.push_str(": ");
        out.push_str(content);
    }
    for call in message.calls() {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&message.role);
        out.push_str(" called ");
        out.push_str(&call.function.name);
        out.push('(');
        out.push_str(&call.function.arguments);
        out.push(')');
    }
    out
}

/// Tokens of the marker [`cut_to_tokens`] puts where it cut (an upper bound: 47 ASCII
/// characters with a 20-digit count).
const CUT_MARKER_TOKENS: u64 = 12;

/// `text` cut to at most `max_tokens` estimated tokens: unchanged when it fits; otherwise its
/// head and its tail (about half the budget each) around a marker
/// `\n[... N characters cut ...]\n`, N counting characters (not bytes). Cuts fall on
/// character boundaries, never inside a UTF-8 sequence. With a budget too small for the marker,
/// just the longest fitting head.
pub fn cut_to_tokens(text: &str, max_tokens: u64) -> Cow<'_, str> {
    if estimate_tokens(text) <= max_tokens {
        return Cow::Borrowed(text);
    }
    if max_tokens <= CUT_MARKER_TOKENS + 2 {
        return Cow::Borrowed(&text[..head_end(text, max_tokens * 4)]);
    }
    let keep = (max_tokens - CUT_MARKER_TOKENS) * 4;
    let head = head_end(text, keep / 2);
    let tail = tail_start(text, keep - keep / 2).max(head);
    let omitted = text[head..tail].chars().count();
    Cow::Owned(format!(
        "{}{CUT_MARKER_OPEN}{omitted}{CUT_MARKER_CLOSE}{}",
        &text[..head],
        &text[tail..]
    ))
}

/// The marker [`cut_to_tokens`] puts where it cut: `CUT_MARKER_OPEN`, the count of characters
/// cut, `CUT_MARKER_CLOSE`.
const CUT_MARKER_OPEN: &str = "\n[... ";
/// See [`CUT_MARKER_OPEN`].
const CUT_MARKER_CLOSE: &str = " characters cut ...]\n";

/// Whether `reduced` is the tool result `original` masked or cut by a compression, with its
/// mark: a [`mask_placeholder`] ([`is_masked`]), or a [`shrunk_result`] of it — a head of
/// `original` and, around [`cut_to_tokens`]' marker, a tail of it, followed by the note that
/// starts [`SHRUNK_NOTE_PREFIX`]. Both leave the full text in tools.jsonl and say so.
///
/// This is the only change a compressor may make to a tool result it keeps (the host's kept-tail
/// check, DESIGN.md §6): any other change of a kept message's text is a rewrite. `false` when
/// `reduced == original` (that is verbatim, not reduced).
pub fn is_marked_reduction(original: &str, reduced: &str) -> bool {
    if reduced == original {
        return false;
    }
    if is_masked(reduced) {
        return true;
    }
    let note = format!("\n{SHRUNK_NOTE_PREFIX}");
    let Some(note_at) = reduced.rfind(&note) else {
        return false;
    };
    if !reduced.ends_with(']') {
        return false;
    }
    let kept = &reduced[..note_at];
    // A budget too small for the marker keeps a head only.
    if kept.len() < original.len() && original.starts_with(kept) {
        return true;
    }
    kept.match_indices(CUT_MARKER_OPEN).any(|(at, _)| {
        let head = &kept[..at];
        let rest = &kept[at + CUT_MARKER_OPEN.len()..];
        let Some(close) = rest.find(CUT_MARKER_CLOSE) else {
            return false;
        };
        let count = &rest[..close];
        let tail = &rest[close + CUT_MARKER_CLOSE.len()..];
        !count.is_empty()
            && count.bytes().all(|b| b.is_ascii_digit())
            && head.len() + tail.len() < original.len()
            && original.starts_with(head)
            && original.ends_with(tail)
    })
}

/// The largest char-boundary byte index `i` with `text[..i]` weighing at most `quarters`.
fn head_end(text: &str, quarters: u64) -> usize {
    let mut used = 0;
    for (i, c) in text.char_indices() {
        used += char_quarter_tokens(c);
        if used > quarters {
            return i;
        }
    }
    text.len()
}

/// The smallest char-boundary byte index `i` with `text[i..]` weighing at most `quarters`.
fn tail_start(text: &str, quarters: u64) -> usize {
    let mut used = 0;
    let mut start = text.len();
    for (i, c) in text.char_indices().rev() {
        used += char_quarter_tokens(c);
        if used > quarters {
            return start;
        }
        start = i;
    }
    0
}

/// Separator between the pieces of a chunk.
pub const PIECE_SEPARATOR: &str = "\n\n";

/// One chunk of a summary request: pieces joined by [`PIECE_SEPARATOR`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The text, at most the chunker's budget in estimated tokens.
    pub text: String,
    /// How many pieces it holds (at least 1).
    pub pieces: usize,
}

/// Packs pieces (rendered messages, partial summaries) in order into chunks of at most
/// `budget` estimated tokens each, one chunk in memory at a time. A piece larger than the
/// budget is cut with [`cut_to_tokens`] and forms a chunk of its own.
#[derive(Debug)]
pub struct Chunker {
    budget: u64,
    text: String,
    tokens: u64,
    pieces: usize,
}

impl Chunker {
    /// A chunker for chunks of at most `budget` tokens (at least 1).
    pub fn new(budget: u64) -> Chunker {
        Chunker {
            budget: budget.max(1),
            text: String::new(),
            tokens: 0,
            pieces: 0,
        }
    }

    /// Add the next piece; returns the chunk it closed, if it did not fit in the current one.
    pub fn push(&mut self, piece: &str) -> Option<Chunk> {
        let piece = cut_to_tokens(piece, self.budget);
        let tokens = estimate_tokens(&piece);
        let mut closed = None;
        if closes(self.budget, self.tokens, self.pieces, tokens) {
            closed = self.take();
        }
        if self.pieces > 0 {
            self.text.push_str(PIECE_SEPARATOR);
            self.tokens += SEPARATOR_TOKENS;
        }
        self.text.push_str(&piece);
        self.tokens += tokens;
        self.pieces += 1;
        closed
    }

    /// The last chunk, if any piece is left.
    pub fn finish(mut self) -> Option<Chunk> {
        self.take()
    }

    fn take(&mut self) -> Option<Chunk> {
        if self.pieces == 0 {
            return None;
        }
        let chunk = Chunk {
            text: std::mem::take(&mut self.text),
            pieces: self.pieces,
        };
        self.tokens = 0;
        self.pieces = 0;
        Some(chunk)
    }
}

/// Tokens of [`PIECE_SEPARATOR`].
const SEPARATOR_TOKENS: u64 = 1;

/// Whether a piece of `tokens` tokens closes a chunk of `budget` that holds `pieces` pieces
/// (`filled` tokens, separators included): the one packing rule of [`Chunker`] and
/// [`count_chunks`].
fn closes(budget: u64, filled: u64, pieces: usize, tokens: u64) -> bool {
    pieces > 0 && filled + SEPARATOR_TOKENS + tokens > budget
}

/// How many chunks a [`Chunker`] of `budget` makes of pieces of these estimated token counts:
/// exact when every piece is within the budget; an upper bound otherwise (a piece over the
/// budget counts as the budget, and [`Chunker::push`] cuts it to at most that).
pub fn count_chunks(piece_tokens: impl IntoIterator<Item = u64>, budget: u64) -> usize {
    let budget = budget.max(1);
    let (mut chunks, mut filled, mut pieces) = (0, 0u64, 0usize);
    for tokens in piece_tokens {
        let tokens = tokens.min(budget);
        if closes(budget, filled, pieces, tokens) {
            (filled, pieces) = (0, 0);
        }
        if pieces == 0 {
            chunks += 1;
        } else {
            filled += SEPARATOR_TOKENS;
        }
        filled += tokens;
        pieces += 1;
    }
    chunks
}

/// The smallest share of a chunk [`plan_summary_input`] cuts a message to before it leaves
/// messages out (tokens): about a line of text, enough to say who said what.
pub const MIN_PIECE_TOKENS: u64 = 16;

/// How the messages to summarise are fed to at most a given number of chunks (so that one
/// compression makes a bounded number of summary requests), from [`plan_summary_input`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SummaryInputPlan {
    /// Each message is cut to at most this many tokens ([`cut_to_tokens`]); `None`: none is
    /// cut (beyond the chunk budget, as always).
    pub cap: Option<u64>,
    /// The messages after the first that are left out, replaced by one
    /// [`omitted_messages_note`] piece: messages `1..=omit` (0: none). The first message (an
    /// earlier summary, when there is one) and the newest are kept.
    pub omit: usize,
}

/// The piece that stands for `count` messages left out of a summary request; its full text
/// stays in messages.jsonl.
pub fn omitted_messages_note(count: usize) -> String {
    format!("[{count} older messages left out here; their full text is in messages.jsonl]")
}

/// Plans the input of a summary so that it packs into at most `max_chunks` chunks of `budget`
/// tokens, given each rendered message's estimated tokens (`sizes`, oldest first).
///
/// - When the messages fit as they are, nothing changes (`cap: None, omit: 0`).
/// - Otherwise every message is cut to the largest cap (at most half the budget) at which
///   they fit, so long tool results lose their middles first and short messages stay whole;
/// - when even [`MIN_PIECE_TOKENS`] per message is too much, the oldest messages after the
///   first are left out too, the fewest that make the rest fit.
///
/// The result fits whatever the sizes, for `max_chunks` ≥ 2 and `budget` ≥
/// [`MIN_CHUNK_TOKENS`]: [`count_chunks`] of the planned pieces is at most `max_chunks`,
/// because with every piece at most half the budget each closed chunk is at least half full.
pub fn plan_summary_input(sizes: &[u64], budget: u64, max_chunks: usize) -> SummaryInputPlan {
    let max_chunks = max_chunks.max(1);
    let budget = budget.max(1);
    if count_chunks(sizes.iter().copied(), budget) <= max_chunks {
        return SummaryInputPlan { cap: None, omit: 0 };
    }
    // A piece of at most `half` closes a chunk only when the chunk holds at least
    // `budget - half` tokens, so pieces (separators included) of fewer than
    // `max_chunks × (budget - half)` tokens close at most `max_chunks - 1` chunks.
    let half = (budget.saturating_sub(1) / 2).max(1);
    let room = (max_chunks as u64 * (budget - half)).saturating_sub(1);
    let need = |pieces: &[u64], cap: u64, extra: u64| -> u64 {
        extra
            + pieces
                .iter()
                .map(|t| (*t).min(cap) + SEPARATOR_TOKENS)
                .sum::<u64>()
    };
    let min_cap = MIN_PIECE_TOKENS.min(half);
    // Leave out the fewest oldest messages (after the first) that make the rest fit at the
    // smallest cap.
    let mut omit = 0;
    if need(sizes, min_cap, 0) > room {
        let (first, rest) = sizes.split_first().map_or((0, &[][..]), |(f, r)| (*f, r));
        let fixed = first.min(min_cap) + SEPARATOR_TOKENS;
        let mut used = fixed;
        let mut kept = 0;
        for t in rest.iter().rev() {
            let piece = t.min(&min_cap) + SEPARATOR_TOKENS;
            let note = estimate_tokens(&omitted_messages_note(rest.len() - kept - 1)).min(half)
                + SEPARATOR_TOKENS;
            if used + piece + note > room {
                break;
            }
            used += piece;
            kept += 1;
        }
        omit = rest.len() - kept;
    }
    let note = if omit > 0 {
        estimate_tokens(&omitted_messages_note(omit)).min(half) + SEPARATOR_TOKENS
    } else {
        0
    };
    let pieces: Vec<u64> = sizes
        .iter()
        .take(1)
        .chain(sizes.iter().skip(1 + omit))
        .copied()
        .collect();
    // The largest cap in [min_cap, half] at which they fit (the need grows with the cap).
    let (mut lo, mut hi) = (min_cap, half);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if need(&pieces, mid, note) <= room {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    SummaryInputPlan {
        cap: Some(lo),
        omit,
    }
}

/// The smallest chunk budget [`request_budget`] accepts (tokens).
pub const MIN_CHUNK_TOKENS: u64 = 64;

/// Tokens of the text to summarise that one summary request may carry: the window
/// (`context_length`) minus the reply (`reserve_output_tokens`), minus the request's own text
/// (`prompt_tokens`: instruction and summary prompt without the messages) and two messages'
/// overhead, minus 10 % for the estimate's error.
///
/// Errors (a sentence naming the settings) when less than [`MIN_CHUNK_TOKENS`] remain.
pub fn request_budget(
    context_length: u64,
    reserve_output_tokens: u64,
    prompt_tokens: u64,
) -> Result<u64, String> {
    let fixed = reserve_output_tokens + prompt_tokens + 2 * MESSAGE_OVERHEAD_TOKENS;
    let available = context_length.saturating_sub(fixed);
    let budget = available - available / 10;
    if budget < MIN_CHUNK_TOKENS {
        return Err(format!(
            "a summary request cannot fit the window: context-length {context_length} minus \
             reserve-output-tokens {reserve_output_tokens} minus {prompt_tokens} tokens of prompt leaves \
             {budget} tokens for the messages (at least {MIN_CHUNK_TOKENS} needed)"
        ));
    }
    Ok(budget)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolCall;
    use LineKind::*;

    #[test]
    fn over_threshold_is_strictly_greater() {
        assert!(!over_threshold(700, 1000, 0.7));
        assert!(over_threshold(701, 1000, 0.7));
        assert!(!over_threshold(0, 0, 0.5));
        assert!(over_threshold(1, 0, 0.5));
        assert!(over_threshold(u64::MAX, 128_000, 1.0));
    }

    #[test]
    fn cut_keeps_the_most_recent_messages() {
        let kinds = [System, User, Assistant, User, Assistant, User, Assistant];
        assert_eq!(cut_point(&kinds, 2), 5);
        assert_eq!(cut_point(&kinds, 0), 7);
        assert_eq!(cut_point(&kinds, 6), 1);
        assert_eq!(cut_point(&kinds, 100), 1);
        assert_eq!(cut_point(&[System], 3), 1);
        assert_eq!(cut_point(&[], 3), 0);
    }

    #[test]
    fn cut_moves_before_a_tool_call_group() {
        // sys, user, assistant(calls x3), tool, tool, tool, assistant
        let kinds = [System, User, Assistant, Tool, Tool, Tool, Assistant];
        for keep in 1..=4 {
            assert_eq!(
                cut_point(&kinds, keep),
                if keep == 1 { 6 } else { 2 },
                "keep {keep}"
            );
        }
        assert_eq!(cut_point(&kinds, 5), 2);
        assert_eq!(cut_point(&kinds, 6), 1);
        // A group right after the system prompt: nothing can be compressed.
        assert_eq!(cut_point(&[System, Assistant, Tool, Tool], 1), 1);
        // A summary line is compressed like any other message.
        assert_eq!(cut_point(&[System, Summary, User, Assistant], 2), 2);
    }

    #[test]
    fn the_tail_is_bounded_by_tokens_without_splitting_groups() {
        // sys, user, [a, t], [a, t], [a, t]: the four-file case, three reads of 3300 tokens.
        let kinds = [
            System, User, Assistant, Tool, Assistant, Tool, Assistant, Tool,
        ];
        let tokens = [20, 12, 30, 3300, 30, 3300, 30, 3300];
        // No token bound: keep 5 → cut at 3, moved back to the group start 2.
        assert_eq!(plan_tail(&kinds, &tokens, 5, 0).cut, 2);
        // A bound: whole groups move out until only the newest group is left.
        let p = plan_tail(&kinds, &tokens, 5, 2867);
        assert_eq!(p.cut, 6);
        assert!(p.shrink.is_empty());
        assert_eq!(p.tail_tokens, 3330);
        // A bound the last two groups fit in.
        let p = plan_tail(&kinds, &tokens, 5, 7000);
        assert_eq!((p.cut, p.tail_tokens), (4, 6660));
        // The count bound still applies when the tokens are few.
        assert_eq!(plan_tail(&kinds, &[1; 8], 2, 1000).cut, 6);
        // Nothing kept with keep 0.
        assert_eq!(plan_tail(&kinds, &tokens, 0, 100).cut, 8);
    }

    #[test]
    fn older_results_of_the_newest_group_are_cut_but_never_the_newest() {
        // sys, user, a(3 parallel calls), t, t, t: one group of 12 000 tokens.
        let kinds = [System, User, Assistant, Tool, Tool, Tool];
        let tokens = [20, 12, 40, 4000, 4000, 4000];
        let p = plan_tail(&kinds, &tokens, 5, 3000);
        assert_eq!(p.cut, 2, "the group stays whole");
        assert_eq!(p.shrink.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [3, 4]);
        assert!(p.shrink.iter().all(|(_, b)| *b == MIN_SHRUNK_RESULT_TOKENS));
        assert!(p.tail_tokens < 4000 + 40 + 2 * 300, "{}", p.tail_tokens);
        // Only as much as needed: one result cut a little.
        let p = plan_tail(&kinds, &tokens, 5, 11_000);
        assert_eq!(p.shrink.len(), 1);
        assert!(p.tail_tokens <= 11_000, "{}", p.tail_tokens);
        // The newest message alone over the bound: kept, nothing else to do.
        let p = plan_tail(
            &[System, User, Assistant, Tool],
            &[20, 12, 40, 9000],
            3,
            100,
        );
        assert_eq!((p.cut, p.shrink.len()), (2, 0));
    }

    #[test]
    fn a_shrunk_result_keeps_head_and_tail_and_says_where_the_rest_is() {
        let content = format!("HEAD{}TAIL", "x".repeat(40_000));
        let s = shrunk_result(&content, 200, Some(7), "call_1");
        assert!(s.starts_with("HEAD") && s.contains("TAIL\n"), "{s}");
        assert!(s.contains("full text in tools.jsonl seq 7"), "{s}");
        assert!(
            estimate_tokens(&s) <= 200 + SHRINK_NOTE_TOKENS,
            "{}",
            estimate_tokens(&s)
        );
        let s = shrunk_result(&content, 200, None, "call_9");
        assert!(s.contains("tool_call_id call_9"), "{s}");
        assert_eq!(shrunk_result("short", 200, Some(1), "c"), "short");
    }

    #[test]
    fn masked_and_shrunk_results_are_marked_reductions_and_edits_are_not() {
        let content = format!("HEAD{}TAIL é😀", "x".repeat(40_000));
        // Cut to head and tail, to a head only (tiny budget), masked.
        for reduced in [
            shrunk_result(&content, 200, Some(7), "call_1"),
            shrunk_result(&content, 5, None, "call_1"),
            mask_placeholder(Some(3), "call_1"),
        ] {
            assert!(is_marked_reduction(&content, &reduced), "{reduced}");
        }
        // A result cut by one compression and cut again by the next.
        let once = shrunk_result(&content, 400, Some(7), "c");
        let twice = shrunk_result(&once, 200, Some(7), "c");
        assert!(is_marked_reduction(&once, &twice), "{twice}");
        assert!(!is_marked_reduction(&content, &content));
        // Text that is not the original's head and tail, or no note: rewritten.
        let shrunk = shrunk_result(&content, 200, Some(7), "call_1");
        for edited in [
            shrunk.replacen("HEAD", "HEAP", 1),
            shrunk.replacen("TAIL", "TALL", 1),
            shrunk.replacen("characters cut", "chars cut", 1),
            format!("{content} (edited)"),
            "HEAD".to_string(),
            format!("HEAD\n{SHRUNK_NOTE_PREFIX}made up"),
        ] {
            assert!(!is_marked_reduction(&content, &edited), "{edited}");
        }
    }

    #[test]
    fn summary_content_round_trips() {
        let c = summary_content(2, 41, "did things\nmore");
        assert_eq!(
            c,
            "Summary of the conversation so far (messages 2–41):\ndid things\nmore"
        );
        assert_eq!(parse_summary_range(&c), Some((2, 41)));
        assert_eq!(
            parse_summary_range("Summary of the conversation so far (messages 2-41):\nx"),
            None
        );
        assert_eq!(parse_summary_range("hello"), None);
        let m = summary_message(3, 4, "s");
        assert!(is_summary_line(1, &m));
        assert!(!is_summary_line(2, &m));
        assert!(!is_summary_line(1, &ChatMessage::text("assistant", c)));
    }

    #[test]
    fn placeholders_are_recognised() {
        let p = mask_placeholder(Some(7), "call_1");
        assert_eq!(p, "[tool result masked: full text in tools.jsonl seq 7]");
        assert!(is_masked(&p));
        let q = mask_placeholder(None, "call_9");
        assert!(q.contains("call_9") && is_masked(&q), "{q}");
        assert!(!is_masked("[tool result masked: but the text goes on"));
        assert!(!is_masked("file contents"));
    }

    #[test]
    fn rendering_is_plain_text() {
        assert_eq!(
            render_message(&ChatMessage::text("user", "fix it")),
            "user: fix it"
        );
        let call = ChatMessage {
            role: "assistant".into(),
            content: Some("reading".into()),
            tool_calls: Some(vec![
                ToolCall::new("c1", "read", r#"{"p":"a"}"#),
                ToolCall::new("c2", "ls", "{}"),
            ]),
            ..Default::default()
        };
        assert_eq!(
            render_message(&call),
            "assistant: reading\nassistant called read({\"p\":\"a\"})\nassistant called ls({})"
        );
        let only_calls = ChatMessage {
            content: None,
            ..call
        };
        assert!(render_message(&only_calls).starts_with("assistant called read("));
        let result = ChatMessage {
            role: "tool".into(),
            content: Some("42".into()),
            tool_call_id: Some("c1".into()),
            tool_name: Some("read".into()),
            ..Default::default()
        };
        assert_eq!(render_message(&result), "tool read (c1) result: 42");
    }

    #[test]
    fn cut_to_tokens_keeps_head_and_tail_on_char_boundaries() {
        assert_eq!(cut_to_tokens("short", 10), "short");
        let text = "上下文压缩".repeat(200); // 1000 tokens
        let cut = cut_to_tokens(&text, 100);
        assert!(estimate_tokens(&cut) <= 100, "{}", estimate_tokens(&cut));
        let (head, rest) = cut.split_once("\n[... ").unwrap();
        let (count, tail) = rest.split_once(" characters cut ...]\n").unwrap();
        assert!(text.starts_with(head) && text.ends_with(tail));
        assert_eq!(
            head.chars().count() + tail.chars().count() + count.parse::<usize>().unwrap(),
            1000
        );
        assert!(head.chars().count() >= 40 && tail.chars().count() >= 40);
        // Tiny budget: a head only.
        assert_eq!(
            cut_to_tokens("ééééééééééééééééééééééééééééééééééé", 3),
            "éééééé"
        );
    }

    #[test]
    fn cut_to_tokens_fits_for_every_budget_and_mix() {
        let text: String = "aé上b".repeat(300);
        for max in 0..400 {
            let cut = cut_to_tokens(&text, max);
            assert!(
                estimate_tokens(&cut) <= max,
                "max {max}: {}",
                estimate_tokens(&cut)
            );
        }
    }

    #[test]
    fn chunker_packs_in_order_within_budget() {
        let mut c = Chunker::new(10);
        let mut chunks = Vec::new();
        for piece in ["aaaaaaaa", "bbbbbbbb", "cccccccc", "dddddddd"] {
            // 2 tokens each + 1 per separator: 2+1+2+1+2 = 8, a 4th would make 11.
            chunks.extend(c.push(piece));
        }
        chunks.extend(c.finish());
        assert_eq!(chunks.len(), 2);
        assert_eq!(
            chunks[0],
            Chunk {
                text: "aaaaaaaa\n\nbbbbbbbb\n\ncccccccc".into(),
                pieces: 3
            }
        );
        assert_eq!(chunks[1].pieces, 1);
        // An oversized piece is cut and stands alone.
        let mut c = Chunker::new(64);
        let head = "x".repeat(40); // 10 tokens: 10 + 1 + the cut piece (60 tokens) > 64
        assert!(c.push(&head).is_none());
        let closed = c.push(&"y".repeat(10_000)).unwrap();
        assert_eq!(
            closed,
            Chunk {
                text: head,
                pieces: 1
            }
        );
        let last = c.finish().unwrap();
        assert!(estimate_tokens(&last.text) <= 64 && last.text.contains("characters cut"));
        assert!(Chunker::new(5).finish().is_none());
    }

    #[test]
    fn budget_reserves_reply_prompt_and_margin() {
        assert_eq!(request_budget(4096, 1024, 62), Ok(2702)); // 3002 available, minus 10 %
        assert_eq!(request_budget(4096, 1024, 62).unwrap(), 3002 - 300);
        let err = request_budget(1000, 990, 20).unwrap_err();
        assert!(err.contains("reserve-output-tokens 990"), "{err}");
    }

    /// Pieces planned by [`plan_summary_input`], as a summariser makes them.
    fn planned_pieces(texts: &[String], plan: SummaryInputPlan) -> Vec<String> {
        let cap = |t: &String| match plan.cap {
            Some(cap) => cut_to_tokens(t, cap).into_owned(),
            None => t.clone(),
        };
        let mut pieces: Vec<String> = texts.iter().take(1).map(cap).collect();
        if plan.omit > 0 {
            pieces.push(omitted_messages_note(plan.omit));
        }
        pieces.extend(texts.iter().skip(1 + plan.omit).map(cap));
        pieces
    }

    fn chunker_count(pieces: &[String], budget: u64) -> usize {
        let mut chunker = Chunker::new(budget);
        let closed = pieces.iter().filter_map(|p| chunker.push(p)).count();
        closed + usize::from(chunker.finish().is_some())
    }

    #[test]
    fn a_summary_far_over_its_chunks_is_cut_then_thinned() {
        // Fits: unchanged.
        assert_eq!(
            plan_summary_input(&[100, 100], 1000, 8),
            SummaryInputPlan { cap: None, omit: 0 }
        );
        // 20 results of 400 tokens in chunks of 200 (8 at most): cut, none left out.
        let plan = plan_summary_input(&[400; 20], 200, 8);
        assert_eq!(plan.omit, 0);
        let cap = plan.cap.unwrap();
        assert!((MIN_PIECE_TOKENS..=99).contains(&cap), "{plan:?}");
        assert!(count_chunks(std::iter::repeat_n(cap, 20), 200) <= 8);
        // 1000 messages: even 16 tokens each is too much; the oldest after the first go.
        let plan = plan_summary_input(&[400; 1000], 100, 8);
        assert!(plan.omit > 900 && plan.omit < 999, "{plan:?}");
        assert_eq!(plan.cap, Some(MIN_PIECE_TOKENS));
    }

    proptest::proptest! {
        #[test]
        fn count_chunks_agrees_with_the_chunker(
            pieces in proptest::collection::vec("[a-z é中]{0,300}", 0..40),
            budget in 1u64..200,
        ) {
            let tokens = pieces.iter().map(|p| estimate_tokens(p));
            let counted = count_chunks(tokens, budget);
            let made = chunker_count(&pieces, budget);
            if pieces.iter().all(|p| estimate_tokens(p) <= budget) {
                proptest::prop_assert_eq!(counted, made);
            } else {
                // A cut piece may estimate below the budget: an upper bound then.
                proptest::prop_assert!(counted >= made, "{counted} < {made}");
            }
        }

        #[test]
        fn a_planned_summary_input_fits_its_chunks(
            lens in proptest::collection::vec(0usize..6_000, 0..400),
            wide in proptest::collection::vec(proptest::bool::ANY, 400),
            budget in MIN_CHUNK_TOKENS..3_000,
            max_chunks in 2usize..=16,
        ) {
            let texts: Vec<String> = lens
                .iter()
                .zip(&wide)
                .map(|(n, w)| if *w { "中".repeat(*n / 4) } else { "x".repeat(*n) })
                .collect();
            let sizes: Vec<u64> = texts.iter().map(|t| estimate_tokens(t)).collect();
            let plan = plan_summary_input(&sizes, budget, max_chunks);
            let pieces = planned_pieces(&texts, plan);
            let chunks = chunker_count(&pieces, budget);
            proptest::prop_assert!(chunks <= max_chunks, "{chunks} chunks > {max_chunks}: {plan:?}");
            let fits = count_chunks(sizes.iter().copied(), budget) <= max_chunks;
            proptest::prop_assert_eq!(plan.cap.is_none(), fits);
            proptest::prop_assert!(plan.omit == 0 || plan.omit < texts.len());
            if let Some(cap) = plan.cap {
                proptest::prop_assert!(cap <= budget / 2, "cap {cap}");
            }
        }
    }
}
