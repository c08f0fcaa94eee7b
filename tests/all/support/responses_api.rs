//! What the fake LLM server ([`super::fake_llm`]) knows of OpenAI's Responses API
//! (`POST /v1/responses`), strict where the real API is:
//!
//! - [`Issued::check_request`] refuses, with OpenAI's error texts, a `function_call_output`
//!   whose `call_id` has no `function_call` before it in `input` ("No tool call found for
//!   function call output with call_id ..."), a `function_call` that came with a reasoning
//!   item sent without that item before it ("... was provided without its required 'reasoning'
//!   item ..."), a reasoning item not followed by the function call that followed it in the
//!   output ("Item ... of type 'reasoning' was provided without its required following item."),
//!   and a reasoning item sent back changed by a byte ("The encrypted content for
//!   item ... could not be verified."), a reasoning item without `encrypted_content` ("Item
//!   with id ... not found. Items are not persisted when `store` is set to false..."), a
//!   request without `store: false`, and a body that breaks the official `CreateResponse`
//!   schema ([`super::api_schema`]);
//! - [`Issued::render`] answers a scripted [`Reply`] as a response object
//!   (`output`: a `reasoning` item when the reply is [`Reply::Reasoning`], with
//!   `encrypted_content` when the request's `include` asks for it; a `message` with
//!   `output_text`, `function_call` items; `usage` with `input_tokens_details.cached_tokens` =
//!   half the input tokens and `output_tokens_details.reasoning_tokens` = half the output tokens
//!   when there is reasoning), or as its server-sent events for `"stream": true`; a
//!   [`Reply::json`] response object (e.g. reasoning interleaved with function calls) is
//!   answered as it is, its items recorded the same way.
#![allow(dead_code)]

use std::collections::HashMap;

use serde_json::{Value, json};

use super::fake_llm::{RecordedRequest, Reply};

/// The start of the `encrypted_content` of a reasoning item made under a key the fake no
/// longer has (another organisation, a rotated key): sent back, it is refused with
/// `invalid_encrypted_content`, as OpenAI does.
pub const STALE_KEY: &str = "stale-key:";

/// The path of the Responses API.
pub const RESPONSES_PATH: &str = "/v1/responses";

/// The reasoning items the fake has sent, to check what comes back.
#[derive(Default)]
pub struct Issued {
    /// Reasoning item id → its JSON text as sent.
    items: HashMap<String, String>,
    /// `call_id` of a function call → the id of the reasoning item sent with it.
    reasoning_of_call: HashMap<String, String>,
    /// Reasoning item id → the `call_id` of the function call that followed it in the output.
    followed_by: HashMap<String, String>,
    /// The error texts of the refused requests.
    pub rejections: Vec<String>,
}

/// A rendered answer: the response object, and its events for a streamed request.
pub struct Rendered {
    /// The response object (the body of an unstreamed answer).
    pub body: Value,
    /// The server-sent events (`event: T\ndata: {..}\n\n` each) of a streamed answer.
    pub events: Vec<String>,
}

impl Issued {
    /// Checks `req` (module doc). `Err(message)` with the API's error text.
    pub fn check_request(&self, req: &RecordedRequest) -> Result<(), String> {
        let body = &req.body;
        super::api_schema::check(super::api_schema::Api::Responses, body)?;
        if body["store"] != json!(false) {
            return Err("this fake serves stateless requests only: store must be false".into());
        }
        let Some(input) = body["input"].as_array() else {
            return Err("Missing required parameter: 'input'.".into());
        };
        let raw = String::from_utf8_lossy(&req.raw_body);
        let mut calls: Vec<&str> = Vec::new();
        let mut reasoning_seen: Vec<&str> = Vec::new();
        for (i, item) in input.iter().enumerate() {
            match item["type"].as_str() {
                Some("reasoning") => {
                    let id = item["id"].as_str().unwrap_or("");
                    if item.get("encrypted_content").is_none() {
                        return Err(format!(
                            "Item with id '{id}' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input."
                        ));
                    }
                    let Some(sent) = self.items.get(id) else {
                        return Err(format!("Item with id '{id}' not found."));
                    };
                    let sent_value: Value = serde_json::from_str(sent).unwrap_or(Value::Null);
                    let stale = item["encrypted_content"]
                        .as_str()
                        .is_some_and(|c| c.starts_with(STALE_KEY));
                    if *item != sent_value || !raw.contains(sent.as_str()) || stale {
                        return Err(format!(
                            "The encrypted content for item {id} could not be verified."
                        ));
                    }
                    if let Some(call_id) = self.followed_by.get(id)
                        && input.get(i + 1).is_none_or(|next| {
                            next["type"] != "function_call" || next["call_id"] != json!(call_id)
                        })
                    {
                        return Err(format!(
                            "Item '{id}' of type 'reasoning' was provided without its required following item."
                        ));
                    }
                    reasoning_seen.push(id);
                }
                Some("function_call") => {
                    let call_id = item["call_id"].as_str().unwrap_or("");
                    if let Some(rs) = self.reasoning_of_call.get(call_id)
                        && !reasoning_seen.contains(&rs.as_str())
                    {
                        return Err(format!(
                            "Item 'input[{i}]' of type 'function_call' (call_id {call_id}) was provided without its required 'reasoning' item: '{rs}'."
                        ));
                    }
                    calls.push(call_id);
                }
                Some("function_call_output") => {
                    let call_id = item["call_id"].as_str().unwrap_or("");
                    if !calls.contains(&call_id) {
                        return Err(format!(
                            "No tool call found for function call output with call_id {call_id}."
                        ));
                    }
                }
                Some("message") => {
                    if !matches!(
                        item["role"].as_str(),
                        Some("user" | "assistant" | "system" | "developer")
                    ) {
                        return Err(format!("Invalid value for 'input[{i}].role'."));
                    }
                }
                other => return Err(format!("Invalid value for 'input[{i}].type': {other:?}.")),
            }
        }
        Ok(())
    }

    /// The answer to `req` for `reply` (module doc), recording its reasoning item; `None` for a
    /// reply without a message (status, raw body, hang-up).
    pub fn render(&mut self, reply: &Reply, req: &RecordedRequest) -> Option<Rendered> {
        let (reasoning, inner) = match reply {
            Reply::Reasoning { text, inner } => (Some(text.as_str()), &**inner),
            Reply::Raw { body } => return self.render_object(body),
            Reply::Delay(_, inner)
            | Reply::StreamCut(inner, _)
            | Reply::StreamTorn(inner, _)
            | Reply::StreamStall(inner, _, _)
            | Reply::MultiLineData(inner)
            | Reply::StreamError(inner, _, _)
            | Reply::Truncated(inner) => return self.render(inner, req),
            other => (None, other),
        };
        let n = req.index;
        let mut output = Vec::new();
        let mut rs_id = None;
        if let Some(text) = reasoning {
            let id = format!("rs_fake_{n}");
            let encrypted: String = format!("gAAAA{n}:{text}")
                .bytes()
                .map(|b| format!("{:02x}", b ^ 0x5a))
                .collect();
            let mut item = json!({"id": id, "type": "reasoning", "summary": []});
            // Only asked for, it comes with its encrypted content.
            if req.body["include"]
                .as_array()
                .is_some_and(|i| i.contains(&json!("reasoning.encrypted_content")))
            {
                item["encrypted_content"] = json!(format!("{encrypted}+/="));
                // Without it nothing links a later function call to this item.
                rs_id = Some(id.clone());
            }
            self.items.insert(id, item.to_string());
            output.push(item);
        }
        let usage = match inner {
            Reply::Text { content, usage } => {
                output.push(json!({"id": format!("msg_fake_{n}"), "type": "message",
                    "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": content, "annotations": []}]}));
                usage
            }
            Reply::ToolCalls { calls, usage } => {
                for (i, (call_id, name, args)) in calls.iter().enumerate() {
                    output.push(json!({"id": format!("fc_fake_{n}_{i}"), "type": "function_call",
                        "call_id": call_id, "name": name, "arguments": args, "status": "completed"}));
                    if let Some(rs) = &rs_id {
                        self.reasoning_of_call.insert(call_id.clone(), rs.clone());
                    }
                }
                usage
            }
            _ => return None,
        };
        let usage = usage.map(|(p, c)| {
            let reasoning_tokens = if reasoning.is_some() { c / 2 } else { 0 };
            json!({"input_tokens": p, "input_tokens_details": {"cached_tokens": p / 2},
                "output_tokens": c, "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
                "total_tokens": p + c})
        });
        let model = req.body["model"].as_str().unwrap_or("fake-model");
        let body = json!({"id": format!("resp_fake_{n}"), "object": "response",
            "created_at": 1_735_689_600u64, "status": "completed", "error": null,
            "incomplete_details": null, "model": model, "output": output, "usage": usage});
        let events = events(&body);
        Some(Rendered { body, events })
    }
}

impl Issued {
    /// A literal response object (`{"object":"response","output":[...]}`) as the answer, its
    /// reasoning items recorded with the function calls they came with (the one that follows
    /// each); `None` for a body that is not one.
    fn render_object(&mut self, body: &str) -> Option<Rendered> {
        let body: Value = serde_json::from_str(body).ok()?;
        let output = body["output"]
            .as_array()
            .filter(|_| body["object"] == "response")?;
        let mut last_reasoning: Option<String> = None;
        for (i, item) in output.iter().enumerate() {
            match item["type"].as_str() {
                Some("reasoning") => {
                    let id = item["id"].as_str().unwrap_or("").to_string();
                    self.items.insert(id.clone(), item.to_string());
                    let stale = item["encrypted_content"]
                        .as_str()
                        .is_some_and(|c| c.starts_with(STALE_KEY));
                    if !stale
                        && let Some(Value::String(call_id)) = output
                            .get(i + 1)
                            .filter(|n| n["type"] == "function_call")
                            .map(|n| &n["call_id"])
                    {
                        self.followed_by.insert(id.clone(), call_id.clone());
                    }
                    last_reasoning = Some(id);
                }
                Some("function_call") => {
                    // A stale item links nothing: the request without it is the recovery.
                    let linked = last_reasoning
                        .as_ref()
                        .filter(|rs| !self.items[rs.as_str()].contains(STALE_KEY));
                    if let (Some(rs), Some(call_id)) = (linked, item["call_id"].as_str()) {
                        self.reasoning_of_call
                            .insert(call_id.to_string(), rs.clone());
                    }
                }
                _ => {}
            }
        }
        let events = events(&body);
        Some(Rendered { body, events })
    }
}

/// The server-sent events of the response `body`, as OpenAI sends them: created, each item
/// added, its deltas (text a few characters at a time, arguments in two halves), its done, and
/// completed.
fn events(body: &Value) -> Vec<String> {
    let mut seq = 0u64;
    let mut out = Vec::new();
    let mut push = |mut data: Value| {
        data["sequence_number"] = json!(seq);
        seq += 1;
        let kind = data["type"].as_str().unwrap_or("").to_string();
        out.push(format!("event: {kind}\ndata: {data}\n\n"));
    };
    let mut created = body.clone();
    created["status"] = json!("in_progress");
    created["output"] = json!([]);
    created["usage"] = Value::Null;
    push(json!({"type": "response.created", "response": created}));
    for (i, item) in body["output"].as_array().into_iter().flatten().enumerate() {
        let mut added = item.clone();
        match item["type"].as_str() {
            Some("message") => added["content"] = json!([]),
            Some("function_call") => added["arguments"] = json!(""),
            Some("reasoning") => {
                if let Some(o) = added.as_object_mut() {
                    o.remove("encrypted_content");
                }
            }
            _ => {}
        }
        push(json!({"type": "response.output_item.added", "output_index": i, "item": added}));
        let id = item["id"].clone();
        match item["type"].as_str() {
            Some("message") => {
                let text = item["content"][0]["text"].as_str().unwrap_or("");
                let chars: Vec<char> = text.chars().collect();
                for piece in chars.chunks(4) {
                    let delta: String = piece.iter().collect();
                    push(json!({"type": "response.output_text.delta", "item_id": id,
                        "output_index": i, "content_index": 0, "delta": delta}));
                }
            }
            Some("function_call") => {
                let args = item["arguments"].as_str().unwrap_or("");
                let mid = args
                    .char_indices()
                    .nth(args.chars().count() / 2)
                    .map_or(0, |(b, _)| b);
                for part in [&args[..mid], &args[mid..]] {
                    push(json!({"type": "response.function_call_arguments.delta",
                        "item_id": id, "output_index": i, "delta": part}));
                }
            }
            _ => {}
        }
        push(json!({"type": "response.output_item.done", "output_index": i, "item": item}));
    }
    push(json!({"type": "response.completed", "response": body}));
    out
}

/// The 400 reply for a refused request: `{"error":{"message","type":"invalid_request_error",
/// "param":"input","code"}}`, `code` `invalid_encrypted_content` for a reasoning item that
/// could not be verified (as OpenAI answers), `null` otherwise.
pub fn error_reply(message: &str) -> Reply {
    let code = if message.contains("could not be verified") {
        json!("invalid_encrypted_content")
    } else {
        Value::Null
    };
    Reply::status(
        400,
        json!({"error": {"message": message, "type": "invalid_request_error",
            "param": "input", "code": code}})
        .to_string(),
        &[],
    )
}
