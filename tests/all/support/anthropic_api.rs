//! What the fake LLM server ([`super::fake_llm`]) knows of Anthropic's Messages API, used for
//! requests to `POST /v1/messages`:
//!
//! - [`check_request`]: the API's rules on headers and body (`anthropic-version`, the key,
//!   `max_tokens`, alternating turns starting with the user, no blank text, `tool_use` ids of the
//!   accepted form and unique, every `tool_use` answered by exactly one `tool_result` at the start
//!   of the next user turn, at most 4 `cache_control` blocks, temperature 0–1; with `thinking`
//!   on: a budget of 1024 or more below `max_tokens`, no temperature but 1, the last assistant
//!   turn with `tool_use` starting with its thinking block, and every thinking block's signature
//!   the one the fake gave its text ([`signature`], or [`signature_at`] for a block of an
//!   interleaved reply, which binds it to its place: the latest assistant turn's thinking
//!   blocks must come back where the reply had them, as the API refuses any change to them)).
//!   A body that breaks the official request schema ([`super::api_schema`]) or a broken request
//!   gets the API's 400 (or 401) error body instead of the scripted reply, and is counted in
//!   [`Accounting::rejections`].
//! - [`PromptCache`]: the prompt cache as the API documents it, to account the tokens of each
//!   request: the prefix (tools, then system, then messages, block by block) up to each
//!   `cache_control` block is written to the cache when it has at least
//!   [`PromptCache::min_tokens`] tokens; a request reads the longest cached prefix ending at one
//!   of its breakpoints or up to 20 blocks before one. `input_tokens` is what follows the read
//!   prefix and the last written breakpoint, `cache_creation_input_tokens` what was written,
//!   `cache_read_input_tokens` what was read. Tokens are `ctxhost_format::estimate_tokens` of
//!   each block's JSON (without its `cache_control`). Entries never expire (the API's 5-minute
//!   lifetime is far longer than a test).
//! - [`message_body`], [`error_reply`]: response bodies of the API's shape; with thinking on,
//!   a signed thinking block first ([`with_thinking`]) unless the reply brings its own (a
//!   [`Reply::json`] Messages API body: [`content_of`]); [`stream_events`]: the same reply as
//!   server-sent events, for a request with `"stream": true`.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::{Value, json};

use super::fake_llm::{RecordedRequest, Reply};

/// The path of the Messages API.
pub const MESSAGES_PATH: &str = "/v1/messages";

/// How far before a breakpoint the API looks for an earlier cached prefix (blocks).
pub const LOOKBACK_BLOCKS: usize = 20;

/// Price of cache writes and reads relative to plain input tokens (5-minute cache).
pub const CACHE_WRITE_PRICE: f64 = 1.25;
pub const CACHE_READ_PRICE: f64 = 0.1;

/// The input side of one request's `usage` (tokens).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheUsage {
    pub input_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
}

impl CacheUsage {
    /// All input tokens of the request.
    pub fn total(&self) -> u64 {
        self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens
    }

    /// What the input costs, in plain-input-token equivalents: input × 1 + writes × 1.25 +
    /// reads × 0.1.
    pub fn billed(&self) -> f64 {
        self.input_tokens as f64
            + self.cache_creation_input_tokens as f64 * CACHE_WRITE_PRICE
            + self.cache_read_input_tokens as f64 * CACHE_READ_PRICE
    }
}

/// The prompt cache of the fake server.
#[derive(Debug)]
pub struct PromptCache {
    /// Smallest prefix that is cached (tokens; the API's minimum is 1024 for most models).
    pub min_tokens: u64,
    /// Prefix hash → prefix tokens.
    entries: HashMap<u64, u64>,
}

impl Default for PromptCache {
    fn default() -> Self {
        PromptCache {
            min_tokens: 1024,
            entries: HashMap::new(),
        }
    }
}

impl PromptCache {
    /// Accounts a (valid) request body and updates the cache.
    pub fn account(&mut self, body: &Value) -> CacheUsage {
        let blocks = cache_blocks(body);
        let mut hasher = DefaultHasher::new();
        body["model"].to_string().hash(&mut hasher);
        let mut cumulative = Vec::with_capacity(blocks.len());
        let mut hashes = Vec::with_capacity(blocks.len());
        let mut tokens = 0u64;
        for (text, _) in &blocks {
            text.hash(&mut hasher);
            hashes.push(hasher.finish());
            tokens += ctxhost_format::estimate_tokens(text);
            cumulative.push(tokens);
        }
        let breakpoints: Vec<usize> = (0..blocks.len()).filter(|&i| blocks[i].1).collect();
        let mut read = 0u64;
        for &b in &breakpoints {
            for hash in &hashes[b.saturating_sub(LOOKBACK_BLOCKS)..=b] {
                if let Some(&t) = self.entries.get(hash) {
                    read = read.max(t);
                }
            }
        }
        let mut written_to = read;
        for &b in &breakpoints {
            if cumulative[b] >= self.min_tokens {
                self.entries.insert(hashes[b], cumulative[b]);
                written_to = written_to.max(cumulative[b]);
            }
        }
        CacheUsage {
            input_tokens: tokens - written_to,
            cache_creation_input_tokens: written_to - read,
            cache_read_input_tokens: read,
        }
    }
}

/// The blocks of a request in cache order (tools, system, messages), each as (JSON text without
/// `cache_control`, whether it has `cache_control`).
fn cache_blocks(body: &Value) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut push = |b: &Value| {
        let mut b = b.clone();
        let marked = b
            .as_object_mut()
            .is_some_and(|o| o.remove("cache_control").is_some());
        out.push((b.to_string(), marked));
    };
    for t in body["tools"].as_array().into_iter().flatten() {
        push(t);
    }
    match &body["system"] {
        Value::String(s) => push(&json!({"type": "text", "text": s})),
        Value::Array(blocks) => blocks.iter().for_each(&mut push),
        _ => {}
    }
    for m in body["messages"].as_array().into_iter().flatten() {
        match &m["content"] {
            Value::String(s) => push(&json!({"type": "text", "text": s})),
            Value::Array(blocks) => blocks.iter().for_each(&mut push),
            _ => {}
        }
    }
    out
}

/// What the server saw of Anthropic requests.
#[derive(Debug, Default)]
pub struct Accounting {
    pub cache: PromptCache,
    /// The key `x-api-key` must carry (`None`: any, or none).
    pub expected_key: Option<String>,
    /// Usage of every request answered with a message, in order.
    pub usage: Vec<CacheUsage>,
    /// Every request refused by [`check_request`]: its error message.
    pub rejections: Vec<String>,
}

/// An error the API would answer: (status, error type, message).
pub type ApiError = (u16, &'static str, String);

/// The API's checks on a request (see the module doc). `Err` holds the error it answers with.
pub fn check_request(req: &RecordedRequest, expected_key: Option<&str>) -> Result<(), ApiError> {
    let bad = |m: String| Err((400, "invalid_request_error", m));
    match (req.header("x-api-key"), expected_key) {
        (None, Some(_)) => {
            return Err((
                401,
                "authentication_error",
                "x-api-key header is required".into(),
            ));
        }
        (Some(k), Some(e)) if k != e => {
            return Err((401, "authentication_error", "invalid x-api-key".into()));
        }
        _ => {}
    }
    if req.header("anthropic-version").is_none() {
        return bad("anthropic-version: header is required".into());
    }
    let body = &req.body;
    if !body.is_object() {
        return bad("the request body is not a JSON object".into());
    }
    super::api_schema::check(super::api_schema::Api::Messages, body).or_else(bad)?;
    if !body["model"].is_string() {
        return bad("model: Field required".into());
    }
    if body["max_tokens"].as_u64().unwrap_or(0) == 0 {
        return bad("max_tokens: Field required".into());
    }
    if let Some(t) = body.get("temperature")
        && !t.as_f64().is_some_and(|t| (0.0..=1.0).contains(&t))
    {
        return bad(format!(
            "temperature: Input should be less than or equal to 1, got {t}"
        ));
    }
    for (i, t) in body["tools"].as_array().into_iter().flatten().enumerate() {
        if !t["name"].is_string() || !t["input_schema"].is_object() {
            return bad(format!("tools.{i}: name and input_schema are required"));
        }
    }
    let breakpoints = cache_blocks(body).iter().filter(|b| b.1).count();
    if let Some(s) = body.get("system")
        && !s.is_string()
        && !s
            .as_array()
            .is_some_and(|a| a.iter().all(|b| b["type"] == "text"))
    {
        return bad("system: must be a string or a list of text blocks".into());
    }
    let Some(turns) = body["messages"].as_array().filter(|m| !m.is_empty()) else {
        return bad("messages: at least one message is required".into());
    };
    let thinking = thinking_on(body);
    if thinking {
        if let Some(n) = body["thinking"]["budget_tokens"].as_u64() {
            if n < 1024 {
                return bad(
                    "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
                        .into(),
                );
            }
            if body["max_tokens"].as_u64().unwrap_or(0) <= n {
                return bad("`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size".into());
            }
        }
        if body
            .get("temperature")
            .is_some_and(|t| t.as_f64() != Some(1.0))
        {
            return bad("`temperature` may only be set to 1 when thinking is enabled. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#feature-compatibility".into());
        }
        // The last assistant turn, when the conversation ends in its tool results, must start
        // with its (signed) thinking.
        if let Some(i) = turns.iter().rposition(|t| t["role"] == "assistant")
            && turns[i]["content"]
                .as_array()
                .is_some_and(|b| b.iter().any(|b| b["type"] == "tool_use"))
        {
            let first = &turns[i]["content"][0]["type"];
            if first != "thinking" && first != "redacted_thinking" {
                return bad(format!(
                    "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{}`. \
                     When `thinking` is enabled, a final `assistant` message must start with a thinking block \
                     (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you \
                     include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. \
                     Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking",
                    first.as_str().unwrap_or("")
                ));
            }
        }
    }
    if breakpoints > 4 {
        return bad(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {breakpoints}."
        ));
    }
    let latest_assistant = turns.iter().rposition(|t| t["role"] == "assistant");
    let mut ids = HashSet::new();
    let mut open_uses: Vec<String> = Vec::new();
    for (i, turn) in turns.iter().enumerate() {
        let role = turn["role"].as_str().unwrap_or("");
        if role != "user" && role != "assistant" {
            return bad(format!("messages.{i}.role: must be user or assistant"));
        }
        if i == 0 && role != "user" {
            return bad("messages: first message must use the \"user\" role".into());
        }
        if i > 0 && turns[i - 1]["role"] == turn["role"] {
            // The API merges these; ctxhost must not send them.
            return bad(format!("messages.{i}: consecutive {role} turns"));
        }
        let blocks: Vec<Value> = match &turn["content"] {
            Value::String(s) => vec![json!({"type": "text", "text": s})],
            Value::Array(b) => b.clone(),
            _ => return bad(format!("messages.{i}.content: Field required")),
        };
        if blocks.is_empty() {
            return bad(format!(
                "messages.{i}: all messages must have non-empty content"
            ));
        }
        let mut answered: Vec<String> = Vec::new();
        let mut seen_text = false;
        for (j, b) in blocks.iter().enumerate() {
            match b["type"].as_str().unwrap_or("") {
                "thinking" if role == "assistant" => {
                    let text = b["thinking"].as_str().unwrap_or("");
                    let sig = b["signature"].as_str().unwrap_or("");
                    let placed = (0..MAX_PLACE).find(|k| sig == signature_at(text, *k));
                    if sig != signature(text) && placed.is_none() {
                        return bad(format!(
                            "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                        ));
                    }
                    if Some(i) == latest_assistant && placed.is_some_and(|k| k != j) {
                        return bad(format!(
                            "messages.{i}.content.{j}: `thinking` or `redacted_thinking` blocks in the latest assistant message cannot be modified. These blocks must remain as they were in the original response."
                        ));
                    }
                }
                "redacted_thinking" if role == "assistant" => {
                    if !b["data"].is_string() {
                        return bad(format!("messages.{i}.content.{j}.data: Field required"));
                    }
                }
                "text" => {
                    if b["text"].as_str().is_none_or(|t| t.trim().is_empty()) {
                        return bad(format!(
                            "messages.{i}.content.{j}: text content blocks must contain non-whitespace text"
                        ));
                    }
                    seen_text = true;
                }
                "tool_use" if role == "assistant" => {
                    let id = b["id"].as_str().unwrap_or("");
                    if id.is_empty()
                        || !id
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                    {
                        return bad(format!(
                            "messages.{i}.content.{j}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
                        ));
                    }
                    if !ids.insert(id.to_string()) {
                        return bad(format!(
                            "messages.{i}.content.{j}: `tool_use` ids must be unique"
                        ));
                    }
                    if !b["input"].is_object() {
                        return bad(format!(
                            "messages.{i}.content.{j}.tool_use.input: Input should be a valid dictionary"
                        ));
                    }
                }
                "tool_result" if role == "user" => {
                    let id = b["tool_use_id"].as_str().unwrap_or("").to_string();
                    if seen_text {
                        return bad(format!(
                            "messages.{i}.content.{j}: tool_result blocks must come before any other content"
                        ));
                    }
                    if !open_uses.contains(&id) || answered.contains(&id) {
                        return bad(format!(
                            "messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. \
                             Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                        ));
                    }
                    answered.push(id);
                }
                other => {
                    return bad(format!(
                        "messages.{i}.content.{j}: block type `{other}` is not allowed in a {role} turn"
                    ));
                }
            }
        }
        if role == "user" {
            if let Some(missing) = open_uses.iter().find(|id| !answered.contains(id)) {
                return bad(format!(
                    "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {missing}"
                ));
            }
            open_uses.clear();
        } else {
            if !open_uses.is_empty() {
                return bad(format!(
                    "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {}",
                    open_uses[0]
                ));
            }
            open_uses = blocks
                .iter()
                .filter(|b| b["type"] == "tool_use")
                .map(|b| b["id"].as_str().unwrap_or("").to_string())
                .collect();
        }
    }
    Ok(())
}

/// Whether the request turns extended thinking on (`{"type":"enabled"}` or `adaptive`).
pub fn thinking_on(body: &Value) -> bool {
    matches!(
        body["thinking"]["type"].as_str(),
        Some("enabled" | "adaptive")
    )
}

/// The fake's signature of a thinking text (the API's is a cryptographic one it checks against
/// the text: a changed text or signature is refused).
pub fn signature(thinking: &str) -> String {
    let mut h = DefaultHasher::new();
    ("fake-anthropic-signing-key", thinking).hash(&mut h);
    format!("EqQBCkYIBxgCKkD{:016x}", h.finish())
}

/// The places [`signature_at`] is checked for.
const MAX_PLACE: usize = 64;

/// The fake's signature of a thinking block at place `index` of its reply's content: bound to
/// the text and the place, so a latest assistant turn that moves it is refused
/// ([`check_request`]).
pub fn signature_at(thinking: &str, index: usize) -> String {
    let mut h = DefaultHasher::new();
    ("fake-anthropic-signing-key", thinking, index).hash(&mut h);
    format!("EqQBCkYIBxgCKkE{:016x}", h.finish())
}

/// The thinking block the fake puts first in its reply to request `index` when thinking is on
/// (a text with quotes, a line break and non-ASCII, so a changed byte shows).
pub fn thinking_block(index: usize) -> Value {
    let text =
        format!("Request {index}: the \"next\" step follows from the last result →\nread on.");
    json!({"type": "thinking", "thinking": text, "signature": signature(&text)})
}

/// `content` with the thinking block of request `req` first when its thinking is on; the second
/// value is the thinking's tokens (they count as output).
pub fn with_thinking(req: &RecordedRequest, mut content: Vec<Value>) -> (Vec<Value>, u64) {
    if !thinking_on(&req.body) || content.iter().any(|b| b["type"] == "thinking") {
        return (content, 0);
    }
    let block = thinking_block(req.index);
    let tokens = ctxhost_format::estimate_tokens(block["thinking"].as_str().unwrap_or(""));
    content.insert(0, block);
    (content, tokens)
}

/// The server-sent events (each `event: <type>\ndata: <json>\n\n`) of a streamed reply with
/// `content` blocks: `message_start` with the input usage, per block its start, its pieces
/// (`text_delta` 5 characters at a time, `thinking_delta` in two then `signature_delta`,
/// `input_json_delta` in two), its stop, a `ping` after the first block, `message_delta` with
/// the stop reason and `output_tokens`, `message_stop`.
pub fn stream_events(
    index: usize,
    model: &str,
    content: &[Value],
    stop_reason: &str,
    usage: CacheUsage,
    output_tokens: u64,
) -> Vec<String> {
    let event = |v: Value| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap_or(""));
    let halves = |s: &str| {
        let mid = s
            .char_indices()
            .nth(s.chars().count() / 2)
            .map_or(0, |(b, _)| b);
        [s[..mid].to_string(), s[mid..].to_string()]
    };
    let mut out = vec![event(json!({"type": "message_start", "message": {
        "id": format!("msg_fake_{index}"), "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": usage.input_tokens,
            "cache_creation_input_tokens": usage.cache_creation_input_tokens,
            "cache_read_input_tokens": usage.cache_read_input_tokens, "output_tokens": 1}}}))];
    for (i, b) in content.iter().enumerate() {
        let delta =
            |d: Value| event(json!({"type": "content_block_delta", "index": i, "delta": d}));
        match b["type"].as_str().unwrap_or("") {
            "thinking" => {
                out.push(event(json!({"type": "content_block_start", "index": i,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""}})));
                for part in halves(b["thinking"].as_str().unwrap_or("")) {
                    out.push(delta(json!({"type": "thinking_delta", "thinking": part})));
                }
                out.push(delta(
                    json!({"type": "signature_delta", "signature": b["signature"]}),
                ));
            }
            "text" => {
                out.push(event(json!({"type": "content_block_start", "index": i,
                    "content_block": {"type": "text", "text": ""}})));
                let chars: Vec<char> = b["text"].as_str().unwrap_or("").chars().collect();
                for piece in chars.chunks(5) {
                    let text: String = piece.iter().collect();
                    out.push(delta(json!({"type": "text_delta", "text": text})));
                }
            }
            "tool_use" => {
                out.push(event(json!({"type": "content_block_start", "index": i,
                    "content_block": {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}})));
                for part in halves(&b["input"].to_string()) {
                    out.push(delta(
                        json!({"type": "input_json_delta", "partial_json": part}),
                    ));
                }
            }
            _ => out.push(event(
                json!({"type": "content_block_start", "index": i, "content_block": b}),
            )),
        }
        out.push(event(json!({"type": "content_block_stop", "index": i})));
        if i == 0 {
            out.push(event(json!({"type": "ping"})));
        }
    }
    out.push(event(json!({"type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": null},
        "usage": {"output_tokens": output_tokens}})));
    out.push(event(json!({"type": "message_stop"})));
    out
}

/// A 200 Messages API body for `content` blocks, with `usage` (input side from the cache
/// accounting, `output_tokens` given).
pub fn message_body(
    index: usize,
    model: &str,
    content: Vec<Value>,
    stop_reason: &str,
    usage: CacheUsage,
    output_tokens: u64,
) -> Value {
    json!({
        "id": format!("msg_fake_{index}"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": {
            "input_tokens": usage.input_tokens,
            "cache_creation_input_tokens": usage.cache_creation_input_tokens,
            "cache_read_input_tokens": usage.cache_read_input_tokens,
            "output_tokens": output_tokens,
        }
    })
}

/// The `content` blocks and `stop_reason` for a scripted text or tool-call reply (tool calls
/// become `tool_use` blocks whose `input` is the arguments parsed as JSON).
pub fn content_of(reply: &Reply) -> Option<(Vec<Value>, &'static str, Option<u64>)> {
    match reply {
        Reply::Text { content, usage } => Some((
            vec![json!({"type": "text", "text": content})],
            "end_turn",
            usage.map(|u| u.1),
        )),
        Reply::ToolCalls { calls, usage } => Some((
            calls
                .iter()
                .map(|(id, name, args)| {
                    let input: Value = serde_json::from_str(args).unwrap_or_else(|_| json!({}));
                    json!({"type": "tool_use", "id": id, "name": name, "input": input})
                })
                .collect(),
            "tool_use",
            usage.map(|u| u.1),
        )),
        // A Messages API body: its blocks as they are (e.g. interleaved thinking).
        Reply::Raw { body } => {
            let v: Value = serde_json::from_str(body).ok()?;
            let blocks = v["content"].as_array().filter(|_| v["type"] == "message")?;
            // A body whose usage holds something other than counts is sent as scripted: it tests
            // how the host reads bad counts, which the fake's own usage would replace.
            if v["usage"].as_object().is_some_and(|u| {
                u.values()
                    .any(|c| !(c.is_u64() || c.is_null() || c.is_object()))
            }) {
                return None;
            }
            let stop = if blocks.iter().any(|b| b["type"] == "tool_use") {
                "tool_use"
            } else {
                "end_turn"
            };
            Some((blocks.clone(), stop, v["usage"]["output_tokens"].as_u64()))
        }
        Reply::Delay(_, inner)
        | Reply::Truncated(inner)
        | Reply::StreamCut(inner, _)
        | Reply::StreamTorn(inner, _)
        | Reply::StreamStall(inner, _, _)
        | Reply::MultiLineData(inner)
        | Reply::StreamError(inner, _, _) => content_of(inner),
        _ => None,
    }
}

/// An error reply of the API's shape: `{"type":"error","error":{"type","message"},"request_id"}`
/// with a `request-id` header (e.g. `error_reply(529, "overloaded_error", "Overloaded")`).
pub fn error_reply(status: u16, kind: &str, message: &str) -> Reply {
    Reply::status(
        status,
        json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_fake"})
            .to_string(),
        &[("request-id", "req_fake")],
    )
}
