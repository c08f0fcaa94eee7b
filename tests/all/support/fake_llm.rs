//! A fake OpenAI-compatible (and Ollama-compatible) LLM server for tests: real HTTP/1.1 on
//! `127.0.0.1:<ephemeral port>`, hand-written on `std::net` (no extra dependencies).
//!
//! ```ignore
//! let llm = FakeLlm::start(vec![
//!     Reply::status(429, "slow down", &[("Retry-After", "1")]),
//!     Reply::tool_calls(vec![("call_1", "read_text_file", r#"{"path":"a.txt"}"#)], Some((50, 10))),
//!     Reply::text("All done.", Some((80, 5))),
//! ]);
//! // config: llm.base_url = llm.base_url()   (e.g. "http://127.0.0.1:41234", no /v1)
//! // ... run the code under test ...
//! let reqs = llm.requests();
//! assert_eq!(reqs[0].path, "/v1/chat/completions");
//! assert_eq!(reqs[0].body["messages"][0]["role"], "system");
//! ```
//!
//! Behaviour:
//! - Every request is answered with the next [`Reply`] of the script (one reply per request, in
//!   arrival order); when the script is exhausted, with the default reply
//!   ([`FakeLlm::set_default`], initially `Reply::text("Done.", Some((10, 2)))`). A handler set
//!   with [`FakeLlm::set_handler`] is asked first and may pick a reply from the request.
//! - Reply bodies take the shape of the request path: `/api/chat` gets Ollama's `/api/chat` shape
//!   (`{"model","created_at","message":{..},"done":true,"prompt_eval_count","eval_count"}`,
//!   tool arguments as JSON objects); `/v1/messages` gets Anthropic's Messages API shape, after
//!   the API's checks, with usage from a prompt-cache accounting
//!   ([`super::anthropic_api`]; a signed thinking block first when the request turns thinking
//!   on); every other path gets OpenAI's chat completion shape
//!   (`{"id","object":"chat.completion","model","choices":[{"message":{..},"finish_reason"}],"usage"}`,
//!   `model` a dated version of the one asked for: [`answering_model`]).
//! - `/v1/chat/completions` requests are checked as a strict OpenAI-compatible gateway checks
//!   them ([`super::openai_api::check_request`]: no field a message's role does not define,
//!   e.g. `name` on a tool message); a refused one gets a 400 and is counted in
//!   [`FakeLlm::openai_rejections`].
//! - A request with `"stream": true` gets its reply streamed: server-sent events for chat
//!   completions and the Messages API, newline-delimited JSON for Ollama's `/api/chat`
//!   ([`Reply::StreamCut`] and [`Reply::StreamStall`] cut or stall any of them).
//! - Every request is recorded ([`RecordedRequest`]: method, path, headers, JSON body, arrival
//!   time) before it is answered. A streamed reply the client closes before its end is recorded
//!   too ([`FakeLlm::abandoned_streams`]): between two events (with a stream delay) the fake
//!   watches the connection, so it sees the close at once.
//! - Connections are kept alive (HTTP/1.1) unless the client sends `Connection: close`; each
//!   connection has its own thread, so a delayed reply does not block other clients.
//! - Request bodies with `Content-Length` or `Transfer-Encoding: chunked` are accepted.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{self, BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::anthropic_api::{self, Accounting, CacheUsage, MESSAGES_PATH};
use super::http::{Server, read_request, write_head, write_response};
use super::openai_api::{self, CHAT_PATH};
use super::responses_api::{self, Issued, RESPONSES_PATH};

/// One scripted answer. Build with the constructor functions.
#[derive(Clone, Debug)]
pub enum Reply {
    /// 200, an assistant message with text content.
    Text {
        content: String,
        usage: Option<(u64, u64)>,
    },
    /// 200, an assistant message calling tools: `(id, name, arguments JSON text)`.
    ToolCalls {
        calls: Vec<(String, String, String)>,
        usage: Option<(u64, u64)>,
    },
    /// Any status with a literal body and extra headers (e.g. 429 + Retry-After, an HTML 502).
    Status {
        code: u16,
        body: String,
        headers: Vec<(String, String)>,
    },
    /// 200 with a literal body (`Content-Type: application/json`), e.g. invalid JSON.
    Raw { body: String },
    /// The inner reply's status and headers with its full Content-Length, but only the first
    /// half of its body, then the connection is closed.
    Truncated(Box<Reply>),
    /// Wait, then send the inner reply (a client whose timeout is shorter gives up first).
    Delay(Duration, Box<Reply>),
    /// Close the connection without answering.
    HangUp,
    /// For a streamed request: the inner reply's first `n` events only, then the connection
    /// closes (no `finish_reason`, no `[DONE]`: a stream cut off).
    StreamCut(Box<Reply>, usize),
    /// For a streamed request: the inner reply's first `n` events, then the first half of
    /// event `n` (no line end), then the connection closes (a stream cut inside a line).
    StreamTorn(Box<Reply>, usize),
    /// For a streamed request: the inner reply's first `n` events, then a pause of the
    /// duration, then the rest (a stream that stalls mid-way).
    StreamStall(Box<Reply>, usize, Duration),
    /// The inner reply as one whole body even to a streamed request (a server that ignores
    /// `"stream": true`), with this `Content-Type` (`None`: no Content-Type header).
    Whole(Box<Reply>, Option<String>),
    /// For a streamed request: the inner reply's events with each JSON `data:` line spread
    /// over several `data:` lines (the JSON pretty-printed, a line of it per `data:` line, the
    /// space after the colon left out on every other one), an `id:` field and a comment in
    /// each event: what the event-stream rules allow a server to send.
    MultiLineData(Box<Reply>),
    /// For a streamed request: the inner reply's first `n` events, then the provider's error
    /// event of the given `type` (Anthropic's `event: error` with `{"type":"error","error":
    /// {"type","message"}}`, chat completions' `data: {"error":{"message","type","code"}}`,
    /// the Responses API's `event: error` with `{"type":"error","code","message"}`), then the
    /// connection closes: an error sent inside a stream after HTTP 200.
    StreamError(Box<Reply>, usize, String),
    /// The inner reply (text or tool calls) with the model's reasoning `text`: chat
    /// completions' `reasoning_content` (streamed as `delta.reasoning_content`), a Responses
    /// API `reasoning` item with encrypted content ([`super::responses_api`]).
    Reasoning { text: String, inner: Box<Reply> },
}

impl Reply {
    /// 200 with an assistant text message. `usage` = `Some((prompt_tokens, completion_tokens))`
    /// adds a `usage` object (OpenAI) / `prompt_eval_count`+`eval_count` (Ollama); `None` omits it.
    pub fn text(content: impl Into<String>, usage: Option<(u64, u64)>) -> Reply {
        Reply::Text {
            content: content.into(),
            usage,
        }
    }

    /// 200 with an assistant message that calls tools; each call is `(id, name, args_json)`,
    /// `args_json` being the arguments as JSON text (sent verbatim as OpenAI's `arguments`
    /// string; parsed into an object for Ollama).
    pub fn tool_calls(calls: Vec<(&str, &str, &str)>, usage: Option<(u64, u64)>) -> Reply {
        Reply::ToolCalls {
            calls: calls
                .into_iter()
                .map(|(i, n, a)| (i.to_string(), n.to_string(), a.to_string()))
                .collect(),
            usage,
        }
    }

    /// The agent-loop reply of step `n` of a task that reads one file a step: a call of
    /// `read_text_file` (id `call_N`) with about 800 characters of arguments, so the context
    /// grows by ~200 tokens a step (usage 400 + 200).
    pub fn read_file_step(n: usize) -> Reply {
        let args =
            serde_json::json!({ "path": format!("src/file_{n}.rs"), "note": "x".repeat(800) })
                .to_string();
        Reply::tool_calls(
            vec![(&format!("call_{n}"), "read_text_file", &args)],
            Some((400, 200)),
        )
    }

    /// Status `code` with `body` (Content-Type text/html when it starts with `<`, else
    /// application/json) and extra `headers`, e.g. `&[("Retry-After", "1")]`.
    pub fn status(code: u16, body: impl Into<String>, headers: &[(&str, &str)]) -> Reply {
        Reply::Status {
            code,
            body: body.into(),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// 200 with exactly `body` (e.g. `"not json"`, `{"choices":[]}`).
    pub fn raw(body: impl Into<String>) -> Reply {
        Reply::Raw { body: body.into() }
    }

    /// 200 with a JSON value as body.
    pub fn json(body: Value) -> Reply {
        Reply::Raw {
            body: body.to_string(),
        }
    }

    /// `inner`'s headers with the full Content-Length but only half its body, then close.
    pub fn truncated(inner: Reply) -> Reply {
        Reply::Truncated(Box::new(inner))
    }

    /// A streamed `inner` cut off after `events` events ([`Reply::StreamCut`]).
    pub fn stream_cut(inner: Reply, events: usize) -> Reply {
        Reply::StreamCut(Box::new(inner), events)
    }

    /// A streamed `inner` cut off inside event `events` ([`Reply::StreamTorn`]).
    pub fn stream_torn(inner: Reply, events: usize) -> Reply {
        Reply::StreamTorn(Box::new(inner), events)
    }

    /// A streamed `inner` that pauses `stall` after `events` events ([`Reply::StreamStall`]).
    pub fn stream_stall(inner: Reply, events: usize, stall: Duration) -> Reply {
        Reply::StreamStall(Box::new(inner), events, stall)
    }

    /// `inner` as one whole body, even to a streamed request, with `content_type` (`None`: no
    /// Content-Type header) ([`Reply::Whole`]).
    pub fn whole(inner: Reply, content_type: Option<&str>) -> Reply {
        Reply::Whole(Box::new(inner), content_type.map(str::to_string))
    }

    /// A streamed `inner` whose events' JSON spans several `data:` lines
    /// ([`Reply::MultiLineData`]).
    pub fn multi_line_data(inner: Reply) -> Reply {
        Reply::MultiLineData(Box::new(inner))
    }

    /// A streamed `inner` ended after `events` events by the provider's error `kind`, e.g.
    /// `overloaded_error` or `invalid_request_error` ([`Reply::StreamError`]).
    pub fn stream_error(inner: Reply, events: usize, kind: &str) -> Reply {
        Reply::StreamError(Box::new(inner), events, kind.to_string())
    }

    /// Send `inner` after `delay`.
    pub fn delay(delay: Duration, inner: Reply) -> Reply {
        Reply::Delay(delay, Box::new(inner))
    }

    /// Close the connection without a response (the client sees a reset / EOF).
    pub fn hang_up() -> Reply {
        Reply::HangUp
    }

    /// `inner` with the model's reasoning `text` ([`Reply::Reasoning`]).
    pub fn reasoning(text: impl Into<String>, inner: Reply) -> Reply {
        Reply::Reasoning {
            text: text.into(),
            inner: Box::new(inner),
        }
    }
}

/// One request as the server received it.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// 0-based arrival index across all connections.
    pub index: usize,
    /// `POST`, `GET`, ...
    pub method: String,
    /// Request target, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Header (name, value) pairs in received order; names as sent.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON, `Value::Null` when empty or not JSON (see `raw_body`).
    pub body: Value,
    /// The body bytes.
    pub raw_body: Vec<u8>,
    /// When the request was fully received.
    pub at: Instant,
    /// Id of the TCP connection it came on (0-based, in accept order): shows keep-alive reuse.
    pub connection: u64,
}

impl RecordedRequest {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `messages` array of a chat request (empty when absent).
    pub fn messages(&self) -> Vec<Value> {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }
}

type Handler = Box<dyn Fn(&RecordedRequest) -> Option<Reply> + Send + Sync>;

struct State {
    script: VecDeque<Reply>,
    default: Reply,
    handler: Option<Handler>,
    requests: Vec<RecordedRequest>,
    anthropic: Accounting,
    /// Errors of the chat completions requests refused by [`openai_api::check_request`].
    openai_rejections: Vec<String>,
    /// Pause between two events of a streamed reply.
    stream_delay: Duration,
    /// The Responses API side: reasoning items sent, refused requests.
    responses: Issued,
    /// Check chat completions as DeepSeek's thinking mode ([`openai_api::check_request`]).
    deepseek_thinking: bool,
    /// Refuse `stream_options` in chat completions as strict OpenAI-compatible servers do
    /// ([`openai_api::check_arguments`]).
    refuse_stream_options: bool,
    /// Streamed replies the client closed before their end.
    abandoned: Vec<AbandonedStream>,
}

/// A streamed reply whose connection the client closed before the fake sent all of it.
#[derive(Clone, Debug)]
pub struct AbandonedStream {
    /// The request's index ([`RecordedRequest::index`]).
    pub request: usize,
    /// Events sent before the close was seen.
    pub events_sent: usize,
    /// Events the whole reply has.
    pub events: usize,
    /// When the fake saw the close.
    pub at: Instant,
}

/// A running fake server. Stops accepting when dropped (connections already open finish).
pub struct FakeLlm {
    server: Server,
    state: Arc<Mutex<State>>,
}

impl FakeLlm {
    /// Start on `127.0.0.1:0` with `script`. Panics if it cannot bind.
    pub fn start(script: Vec<Reply>) -> FakeLlm {
        FakeLlm::start_on("127.0.0.1:0", script).expect("bind fake LLM on 127.0.0.1:0")
    }

    /// Start on `addr` (e.g. `127.0.0.1:8089`) with `script`.
    pub fn start_on(addr: &str, script: Vec<Reply>) -> io::Result<FakeLlm> {
        let state = Arc::new(Mutex::new(State {
            script: script.into(),
            default: Reply::text("Done.", Some((10, 2))),
            handler: None,
            requests: Vec::new(),
            anthropic: Accounting::default(),
            openai_rejections: Vec::new(),
            stream_delay: Duration::ZERO,
            responses: Issued::default(),
            deepseek_thinking: false,
            refuse_stream_options: false,
            abandoned: Vec::new(),
        }));
        let st = state.clone();
        let listener = TcpListener::bind(addr)?;
        let server = Server::serve(listener, "fake-llm", move |stream, conn| {
            serve_connection(stream, conn, &st)
        })?;
        Ok(FakeLlm { server, state })
    }

    /// Pause `delay` between two events of every streamed reply (default none).
    pub fn set_stream_delay(&self, delay: Duration) {
        self.state.lock().unwrap().stream_delay = delay;
    }

    /// `http://127.0.0.1:PORT` — the value for `llm.base_url` (no trailing `/`, no `/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// Append replies to the script.
    pub fn push(&self, replies: impl IntoIterator<Item = Reply>) {
        self.lock().script.extend(replies);
    }

    /// The reply used once the script is exhausted.
    pub fn set_default(&self, reply: Reply) {
        self.lock().default = reply;
    }

    /// A function asked first for every request; `None` falls back to the script/default.
    /// E.g. answer summarisation requests (recognised by their prompt) with a fixed summary.
    pub fn set_handler(
        &self,
        f: impl Fn(&RecordedRequest) -> Option<Reply> + Send + Sync + 'static,
    ) {
        self.lock().handler = Some(Box::new(f));
    }

    /// All requests received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.lock().requests.clone()
    }

    /// Requests with index `>= start` (for polling without copying the whole log).
    pub fn requests_from(&self, start: usize) -> Vec<RecordedRequest> {
        self.lock().requests.iter().skip(start).cloned().collect()
    }

    /// Number of requests received so far.
    pub fn request_count(&self) -> usize {
        self.lock().requests.len()
    }

    /// The streamed replies the client closed before their end, in the order seen.
    pub fn abandoned_streams(&self) -> Vec<AbandonedStream> {
        self.lock().abandoned.clone()
    }

    /// Anthropic requests must carry `x-api-key: key` (else 401 `authentication_error`).
    pub fn expect_anthropic_key(&self, key: &str) {
        self.lock().anthropic.expected_key = Some(key.to_string());
    }

    /// The smallest prefix the fake prompt cache stores (tokens; default 1024).
    pub fn set_anthropic_min_cache_tokens(&self, tokens: u64) {
        self.lock().anthropic.cache.min_tokens = tokens;
    }

    /// The input usage of every Anthropic request answered with a message, in order.
    pub fn anthropic_usage(&self) -> Vec<CacheUsage> {
        self.lock().anthropic.usage.clone()
    }

    /// The errors of the Anthropic requests refused by the API's checks.
    pub fn anthropic_rejections(&self) -> Vec<String> {
        self.lock().anthropic.rejections.clone()
    }

    /// Check chat completions requests as DeepSeek's thinking mode does: `reasoning_content`
    /// required on assistant messages with tool calls.
    pub fn set_deepseek_thinking(&self, on: bool) {
        self.lock().deepseek_thinking = on;
    }

    /// Answer a chat completions request carrying `stream_options` with HTTP 400
    /// `Unrecognized request argument supplied: stream_options`, as strict OpenAI-compatible
    /// servers do ([`openai_api::check_arguments`]); counted in [`FakeLlm::openai_rejections`].
    pub fn set_refuse_stream_options(&self, on: bool) {
        self.lock().refuse_stream_options = on;
    }

    /// The errors of the Responses API requests refused by the strict checks
    /// ([`Issued::check_request`]).
    pub fn responses_rejections(&self) -> Vec<String> {
        self.lock().responses.rejections.clone()
    }

    /// The errors of the chat completions requests refused by the strict checks.
    pub fn openai_rejections(&self) -> Vec<String> {
        self.lock().openai_rejections.clone()
    }

    /// Scripted replies not yet used.
    pub fn remaining(&self) -> usize {
        self.lock().script.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn serve_connection(stream: TcpStream, conn: u64, state: &Mutex<State>) -> io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        let Some(req) = read_request(&mut reader)? else {
            return Ok(());
        };
        let close_requested = req.wants_close();
        let recorded;
        let mut usage = None;
        let mut rendered = None;
        let stream_delay;
        let reply = {
            let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
            stream_delay = s.stream_delay;
            recorded = RecordedRequest {
                index: s.requests.len(),
                method: req.method,
                path: req.target,
                headers: req.headers,
                body: serde_json::from_slice(&req.body).unwrap_or(Value::Null),
                raw_body: req.body,
                at: Instant::now(),
                connection: conn,
            };
            s.requests.push(recorded.clone());
            if recorded.path == CHAT_PATH
                && let Err((message, param)) =
                    openai_api::check_arguments(&recorded, s.refuse_stream_options).and_then(|()| {
                        openai_api::check_request(&recorded, s.deepseek_thinking)
                            .map_err(|m| (m, "messages"))
                    })
            {
                s.openai_rejections.push(message.clone());
                openai_api::error_reply_for(&message, param)
            } else if recorded.path == RESPONSES_PATH
                && let Err(message) = s.responses.check_request(&recorded)
            {
                s.responses.rejections.push(message.clone());
                responses_api::error_reply(&message)
            } else if recorded.path == RESPONSES_PATH {
                let from_handler = s.handler.as_ref().and_then(|h| h(&recorded));
                let reply = match from_handler {
                    Some(r) => r,
                    None => s.script.pop_front().unwrap_or_else(|| s.default.clone()),
                };
                rendered = s.responses.render(&reply, &recorded);
                reply
            } else {
                let checked = if recorded.path == MESSAGES_PATH {
                    anthropic_api::check_request(&recorded, s.anthropic.expected_key.as_deref())
                } else {
                    Ok(())
                };
                match checked {
                    Err((code, kind, message)) => {
                        s.anthropic.rejections.push(message.clone());
                        anthropic_api::error_reply(code, kind, &message)
                    }
                    Ok(()) => {
                        let from_handler = s.handler.as_ref().and_then(|h| h(&recorded));
                        let reply = match from_handler {
                            Some(r) => r,
                            None => s.script.pop_front().unwrap_or_else(|| s.default.clone()),
                        };
                        if recorded.path == MESSAGES_PATH
                            && anthropic_api::content_of(&reply).is_some()
                        {
                            let u = s.anthropic.cache.account(&recorded.body);
                            s.anthropic.usage.push(u);
                            usage = Some(u);
                        }
                        reply
                    }
                }
            }
        };
        let streamed_path = recorded.path == CHAT_PATH
            || recorded.path == MESSAGES_PATH
            || recorded.path == OLLAMA_CHAT_PATH;
        let streamed = recorded.body["stream"] == json!(true);
        let sent = if let Some(r) = rendered {
            if streamed {
                send_events(&mut writer, &reply, r.events, stream_delay)
            } else {
                let ct = vec![("Content-Type".to_string(), "application/json".to_string())];
                let body = r.body.to_string().into_bytes();
                if let Reply::Delay(d, _) = &reply {
                    thread::sleep(*d);
                }
                if matches!(reply, Reply::Truncated(_)) {
                    write_head(&mut writer, 200, &ct, body.len())?;
                    writer.write_all(&body[..body.len() / 2])?;
                    writer.flush()?;
                    Ok(false)
                } else {
                    write_response(&mut writer, 200, &ct, &body)?;
                    Ok(true)
                }
            }
        } else if streamed_path && streamed {
            send_stream(&mut writer, &reply, &recorded, stream_delay, usage)
        } else {
            send_reply(&mut writer, &reply, &recorded, usage)
        };
        let keep_open = match sent {
            Ok(keep_open) => keep_open,
            Err(e) => {
                if let Some(a) = e.get_ref().and_then(|r| r.downcast_ref::<Abandoned>()) {
                    let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
                    s.abandoned.push(AbandonedStream {
                        request: recorded.index,
                        events_sent: a.events_sent,
                        events: a.events,
                        at: Instant::now(),
                    });
                }
                return Err(e);
            }
        };
        if !keep_open || close_requested {
            let _ = writer.shutdown(Shutdown::Both);
            return Ok(());
        }
    }
}

/// Write `reply`; returns whether the connection may stay open.
fn send_reply(
    w: &mut TcpStream,
    reply: &Reply,
    req: &RecordedRequest,
    usage: Option<CacheUsage>,
) -> io::Result<bool> {
    match reply {
        Reply::Delay(d, inner) => {
            thread::sleep(*d);
            send_reply(w, inner, req, usage)
        }
        Reply::HangUp => Ok(false),
        Reply::Whole(inner, content_type) => {
            let (code, mut headers, body) = render(inner, req, usage);
            headers.retain(|(k, _)| !k.eq_ignore_ascii_case("content-type"));
            if let Some(ct) = content_type {
                headers.push(("Content-Type".to_string(), ct.clone()));
            }
            write_response(w, code, &headers, &body)?;
            Ok(true)
        }
        Reply::Truncated(inner) => {
            let (code, headers, body) = render(inner, req, usage);
            let half = &body[..body.len() / 2];
            write_head(w, code, &headers, body.len())?;
            w.write_all(half)?;
            w.flush()?;
            Ok(false)
        }
        other => {
            let (code, headers, body) = render(other, req, usage);
            write_response(w, code, &headers, &body)?;
            Ok(true)
        }
    }
}

/// Ollama's chat endpoint.
pub const OLLAMA_CHAT_PATH: &str = "/api/chat";

/// Write `reply` to a streamed request: server-sent events (chat completions, Anthropic's
/// Messages API) or newline-delimited JSON (Ollama), `delay` between two, the body delimited by
/// the connection's close (so never kept open). A reply without a message (status, raw body)
/// is sent as for an unstreamed request. `usage`: the input side of an Anthropic message's
/// usage.
fn send_stream(
    w: &mut TcpStream,
    reply: &Reply,
    req: &RecordedRequest,
    delay: Duration,
    usage: Option<CacheUsage>,
) -> io::Result<bool> {
    let shape = Shape::of(reply);
    let (inner, cut, stall) = match shape.inner {
        Reply::Delay(d, inner) => {
            thread::sleep(*d);
            return send_stream(w, inner, req, delay, usage);
        }
        Reply::StreamCut(inner, n) => (&**inner, Some((*n, false)), None),
        Reply::StreamTorn(inner, n) => (&**inner, Some((*n, true)), None),
        Reply::StreamStall(inner, n, d) => (&**inner, None, Some((*n, *d))),
        Reply::StreamError(inner, _, _) => (&**inner, None, None),
        other => (other, None, None),
    };
    let (events, content_type) = if req.path == MESSAGES_PATH {
        (anthropic_events(inner, req, usage), "text/event-stream")
    } else if req.path == OLLAMA_CHAT_PATH {
        (ollama_lines(inner, req), "application/x-ndjson")
    } else {
        let events = sse_events(inner, req)
            .map(|events| events.iter().map(|e| format!("data: {e}\n\n")).collect());
        (events, "text/event-stream")
    };
    let Some(events) = events else {
        return send_reply(w, inner, req, usage);
    };
    let events = shape.apply(events, &req.path);
    write_events(w, &events, content_type, cut, stall, delay)
}

/// How a streamed reply's events are changed on the way out ([`Reply::MultiLineData`],
/// [`Reply::StreamError`]); `inner` is the reply under those wrappers.
struct Shape<'a> {
    inner: &'a Reply,
    multi_line: bool,
    /// The error kind, and after how many events it comes.
    error: Option<(usize, &'a str)>,
}

impl<'a> Shape<'a> {
    fn of(reply: &'a Reply) -> Shape<'a> {
        match reply {
            Reply::MultiLineData(inner) => Shape {
                multi_line: true,
                ..Shape::of(inner)
            },
            Reply::StreamError(_, n, kind) => Shape {
                inner: reply,
                multi_line: false,
                error: Some((*n, kind)),
            },
            other => Shape {
                inner: other,
                multi_line: false,
                error: None,
            },
        }
    }

    /// `events` (whole events, blank line included) as this shape sends them to `path`.
    fn apply(&self, events: Vec<String>, path: &str) -> Vec<String> {
        let mut events: Vec<String> = if self.multi_line {
            events
                .iter()
                .enumerate()
                .map(|(i, e)| multi_line(e, i))
                .collect()
        } else {
            events
        };
        if let Some((n, kind)) = self.error {
            events.truncate(n);
            events.push(error_event(path, kind));
        }
        events
    }
}

/// `event` with its JSON `data:` line spread over several (pretty-printed), an `id:` field
/// and a comment added ([`Reply::MultiLineData`]).
fn multi_line(event: &str, i: usize) -> String {
    let mut out = format!(": event {i}\nid: {i}\n");
    for line in event.lines() {
        let json = line
            .strip_prefix("data: ")
            .and_then(|d| serde_json::from_str::<Value>(d).ok());
        match json {
            Some(v) => {
                for (k, part) in serde_json::to_string_pretty(&v)
                    .unwrap()
                    .lines()
                    .enumerate()
                {
                    let sep = if k % 2 == 0 { " " } else { "" };
                    out.push_str(&format!("data:{sep}{part}\n"));
                }
            }
            None if line.is_empty() => {}
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out.push('\n');
    out
}

/// The provider's error event of `kind` for a stream to `path` ([`Reply::StreamError`]).
fn error_event(path: &str, kind: &str) -> String {
    let message = format!("{kind} (fake)");
    if path == MESSAGES_PATH {
        let data = json!({"type": "error", "error": {"type": kind, "message": message}});
        format!("event: error\ndata: {data}\n\n")
    } else if path == RESPONSES_PATH {
        let code = if kind == "overloaded_error" {
            "server_error"
        } else {
            kind
        };
        let data = json!({"type": "error", "code": code, "message": message, "param": null});
        format!("event: error\ndata: {data}\n\n")
    } else {
        let kind = if kind == "overloaded_error" {
            "server_error"
        } else {
            kind
        };
        let data =
            json!({"error": {"message": message, "type": kind, "param": null, "code": null}});
        format!("data: {data}\n\n")
    }
}

/// Write the server-sent `events` (each a whole event, blank line included) of a Responses
/// API answer to `reply` (whose cut or stall applies, after its delay).
fn send_events(
    w: &mut TcpStream,
    reply: &Reply,
    events: Vec<String>,
    delay: Duration,
) -> io::Result<bool> {
    let shape = Shape::of(reply);
    let events = shape.apply(events, RESPONSES_PATH);
    let (cut, stall) = match shape.inner {
        Reply::Delay(d, inner) => {
            thread::sleep(*d);
            return send_events(w, inner, events, delay);
        }
        Reply::StreamCut(_, n) => (Some((*n, false)), None),
        Reply::StreamTorn(_, n) => (Some((*n, true)), None),
        Reply::StreamStall(_, n, d) => (None, Some((*n, *d))),
        _ => (None, None),
    };
    write_events(w, &events, "text/event-stream", cut, stall, delay)
}

/// Write a 200 event-stream head and `events` (stopping before event `cut.0`, after the first
/// half of it when `cut.1`, pausing before event `stall.0`, `delay` between two); the body
/// ends with the connection.
fn write_events(
    w: &mut TcpStream,
    events: &[String],
    content_type: &str,
    cut: Option<(usize, bool)>,
    stall: Option<(usize, Duration)>,
    delay: Duration,
) -> io::Result<bool> {
    w.write_all(
        format!("HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )?;
    w.flush()?;
    for (i, e) in events.iter().enumerate() {
        if let Some((n, torn)) = cut
            && n == i
        {
            if torn {
                let mut half = e.len() / 2;
                while !e.is_char_boundary(half) {
                    half -= 1;
                }
                w.write_all(&e.as_bytes()[..half])?;
                w.flush()?;
            }
            break;
        }
        if let Some((n, d)) = stall
            && n == i
        {
            thread::sleep(d);
        }
        if i > 0 && !delay.is_zero() && closed_within(w, delay) {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                Abandoned {
                    events_sent: i,
                    events: events.len(),
                },
            ));
        }
        if let Err(e) = w.write_all(e.as_bytes()).and_then(|()| w.flush()) {
            return Err(io::Error::new(
                e.kind(),
                Abandoned {
                    events_sent: i,
                    events: events.len(),
                },
            ));
        }
    }
    Ok(false)
}

/// Why a streamed reply stopped early: the client closed the connection.
#[derive(Debug)]
struct Abandoned {
    events_sent: usize,
    events: usize,
}

impl std::fmt::Display for Abandoned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the client closed the stream after {} of {} events",
            self.events_sent, self.events
        )
    }
}

impl std::error::Error for Abandoned {}

/// Wait `delay`, watching `w`: whether the client closed the connection (or reset it)
/// meanwhile. It sends nothing while a reply streams, so a readable end is its close.
fn closed_within(w: &TcpStream, delay: Duration) -> bool {
    let before = w.read_timeout().ok().flatten();
    let start = Instant::now();
    let mut byte = [0u8; 1];
    let closed = loop {
        let left = delay.saturating_sub(start.elapsed());
        if left.is_zero() || w.set_read_timeout(Some(left)).is_err() {
            break false;
        }
        match w.peek(&mut byte) {
            Ok(0) => break true,
            // A byte from the client (it should send none): wait the rest out.
            Ok(_) => {
                thread::sleep(delay.saturating_sub(start.elapsed()));
                break false;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                break false;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break true,
        }
    };
    let _ = w.set_read_timeout(before);
    closed
}

/// The events of a streamed Messages API reply of `reply` (thinking first when the request
/// turns it on), `None` for a reply without a message.
fn anthropic_events(
    reply: &Reply,
    req: &RecordedRequest,
    usage: Option<CacheUsage>,
) -> Option<Vec<String>> {
    let (content, stop, output) = anthropic_api::content_of(reply)?;
    let (content, thinking_tokens) = anthropic_api::with_thinking(req, content);
    let output = output.unwrap_or_else(|| {
        ctxhost_format::estimate_tokens(&Value::Array(content.clone()).to_string())
    }) + thinking_tokens;
    let model = req.body["model"].as_str().unwrap_or("fake-model");
    Some(anthropic_api::stream_events(
        req.index,
        model,
        &content,
        stop,
        usage.unwrap_or_default(),
        output,
    ))
}

/// The thinking text the fake Ollama streams for request `index` when it asks `think: true`.
pub fn ollama_thinking(index: usize) -> String {
    format!("Request {index}: think \"first\", then answer.")
}

/// The lines of a streamed Ollama `/api/chat` reply of `reply`: thinking in two pieces when the
/// request says `think: true`, the content 4 characters a piece or the tool calls in one, then
/// the `"done":true` line with the counts. `None` for a reply without a message.
fn ollama_lines(reply: &Reply, req: &RecordedRequest) -> Option<Vec<String>> {
    let model = req.body["model"].as_str().unwrap_or("fake-model");
    let piece = |message: Value| {
        json!({"model": model, "created_at": "2025-01-01T00:00:00Z", "message": message, "done": false})
            .to_string()
            + "\n"
    };
    let mut lines = Vec::new();
    if req.body["think"] == json!(true) {
        let text = ollama_thinking(req.index);
        let mid = text.len() / 2;
        for part in [&text[..mid], &text[mid..]] {
            lines.push(piece(
                json!({"role": "assistant", "content": "", "thinking": part}),
            ));
        }
    }
    let usage = match reply {
        Reply::Text { content, usage } => {
            let chars: Vec<char> = content.chars().collect();
            for p in chars.chunks(4) {
                let text: String = p.iter().collect();
                lines.push(piece(json!({"role": "assistant", "content": text})));
            }
            usage
        }
        Reply::ToolCalls { calls, usage } => {
            let calls: Vec<Value> = calls
                .iter()
                .map(|(_, name, args)| {
                    let args: Value =
                        serde_json::from_str(args).unwrap_or(Value::String(args.clone()));
                    json!({"function": {"name": name, "arguments": args}})
                })
                .collect();
            lines.push(piece(
                json!({"role": "assistant", "content": "", "tool_calls": calls}),
            ));
            usage
        }
        _ => return None,
    };
    let mut last = json!({"model": model, "created_at": "2025-01-01T00:00:00Z",
        "message": {"role": "assistant", "content": ""}, "done": true, "done_reason": "stop",
        "total_duration": 1000});
    if let Some((p, c)) = usage {
        last["prompt_eval_count"] = json!(p);
        last["eval_count"] = json!(c);
    }
    lines.push(last.to_string() + "\n");
    Some(lines)
}

/// The events (the text after `data: `) of a streamed chat completion of `reply`: the role,
/// the content a few characters at a time or each tool call in fragments, the finish reason,
/// the usage chunk when the request's `stream_options.include_usage`, `[DONE]`. `None` for a
/// reply without a message.
/// The model an OpenAI-shaped reply names: a dated version of the one asked for, as OpenAI
/// answers `gpt-4o` with `gpt-4o-2024-08-06`.
pub fn answering_model(requested: &str) -> String {
    format!("{requested}-2026-12-01")
}

fn sse_events(reply: &Reply, req: &RecordedRequest) -> Option<Vec<String>> {
    let (reasoning, reply) = match reply {
        Reply::Reasoning { text, inner } => (Some(text.as_str()), &**inner),
        other => (None, other),
    };
    let id = format!("chatcmpl-fake-{}", req.index);
    let model = answering_model(req.body["model"].as_str().unwrap_or("fake-model"));
    let chunk = |delta: Value, finish: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": 1_735_689_600u64,
            "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        .to_string()
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    if let Some(text) = reasoning {
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(5) {
            let text: String = piece.iter().collect();
            events.push(chunk(
                json!({"content": null, "reasoning_content": text}),
                Value::Null,
            ));
        }
    }
    let (finish, usage) = match reply {
        Reply::Text { content, usage } => {
            let chars: Vec<char> = content.chars().collect();
            for piece in chars.chunks(4) {
                let text: String = piece.iter().collect();
                events.push(chunk(json!({"content": text}), Value::Null));
            }
            ("stop", usage)
        }
        Reply::ToolCalls { calls, usage } => {
            for (i, (call_id, name, args)) in calls.iter().enumerate() {
                events.push(chunk(
                    json!({"tool_calls": [{"index": i, "id": call_id, "type": "function",
                        "function": {"name": name, "arguments": ""}}]}),
                    Value::Null,
                ));
                let mid = args
                    .char_indices()
                    .nth(args.chars().count() / 2)
                    .map_or(0, |(b, _)| b);
                for part in [&args[..mid], &args[mid..]] {
                    events.push(chunk(
                        json!({"tool_calls": [{"index": i, "function": {"arguments": part}}]}),
                        Value::Null,
                    ));
                }
            }
            ("tool_calls", usage)
        }
        _ => return None,
    };
    events.push(chunk(json!({}), json!(finish)));
    if req.body["stream_options"]["include_usage"] == json!(true) {
        let usage = usage.map(
            |(p, c)| json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}),
        );
        events.push(
            json!({"id": id, "object": "chat.completion.chunk", "choices": [], "usage": usage})
                .to_string(),
        );
    }
    events.push("[DONE]".to_string());
    Some(events)
}

/// (status, headers, body) of a non-delayed reply, shaped for the request's path. `usage`: the
/// input side of an Anthropic message's usage.
fn render(
    reply: &Reply,
    req: &RecordedRequest,
    usage: Option<CacheUsage>,
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let json_ct = vec![("Content-Type".to_string(), "application/json".to_string())];
    if req.path == MESSAGES_PATH
        && let Some((content, stop, output)) = anthropic_api::content_of(reply)
    {
        let model = req.body["model"].as_str().unwrap_or("fake-model");
        let (content, thinking_tokens) = anthropic_api::with_thinking(req, content);
        let output = output.unwrap_or_else(|| {
            ctxhost_format::estimate_tokens(&Value::Array(content.clone()).to_string())
        }) + thinking_tokens;
        let body = anthropic_api::message_body(
            req.index,
            model,
            content,
            stop,
            usage.unwrap_or_default(),
            output,
        );
        return (200, json_ct, body.to_string().into_bytes());
    }
    let ollama = req.path.starts_with("/api/");
    let model = req
        .body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("fake-model")
        .to_string();
    match reply {
        Reply::Text { content, usage } => {
            let msg = json!({"role": "assistant", "content": content});
            (
                200,
                json_ct,
                completion(ollama, &model, req.index, msg, "stop", *usage),
            )
        }
        Reply::ToolCalls { calls, usage } => {
            let msg = if ollama {
                let calls: Vec<Value> = calls
                    .iter()
                    .map(|(_, name, args)| {
                        let args: Value =
                            serde_json::from_str(args).unwrap_or(Value::String(args.clone()));
                        json!({"function": {"name": name, "arguments": args}})
                    })
                    .collect();
                json!({"role": "assistant", "content": "", "tool_calls": calls})
            } else {
                let calls: Vec<Value> = calls
                    .iter()
                    .map(|(id, name, args)| {
                        json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
                    })
                    .collect();
                json!({"role": "assistant", "content": null, "tool_calls": calls})
            };
            (
                200,
                json_ct,
                completion(ollama, &model, req.index, msg, "tool_calls", *usage),
            )
        }
        Reply::Status {
            code,
            body,
            headers,
        } => {
            let mut h = headers.clone();
            if !h
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
            {
                let ct = if body.trim_start().starts_with('<') {
                    "text/html"
                } else {
                    "application/json"
                };
                h.push(("Content-Type".into(), ct.into()));
            }
            (*code, h, body.clone().into_bytes())
        }
        Reply::Raw { body } => (200, json_ct, body.clone().into_bytes()),
        Reply::Truncated(inner)
        | Reply::Delay(_, inner)
        | Reply::StreamCut(inner, _)
        | Reply::StreamTorn(inner, _)
        | Reply::StreamStall(inner, _, _)
        | Reply::MultiLineData(inner)
        | Reply::StreamError(inner, _, _)
        | Reply::Whole(inner, _) => render(inner, req, usage),
        Reply::Reasoning { text, inner } => {
            let (code, headers, body) = render(inner, req, usage);
            // Chat completions: `message.reasoning_content`, as DeepSeek, vLLM, llama.cpp
            // and LM Studio send it.
            let mut v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            if let Some(m) = v["choices"][0]["message"].as_object_mut() {
                m.insert("reasoning_content".into(), json!(text));
                return (code, headers, v.to_string().into_bytes());
            }
            (code, headers, body)
        }
        Reply::HangUp => (200, json_ct, Vec::new()),
    }
}

fn completion(
    ollama: bool,
    model: &str,
    index: usize,
    message: Value,
    finish: &str,
    usage: Option<(u64, u64)>,
) -> Vec<u8> {
    let v = if ollama {
        let mut v = json!({
            "model": model,
            "created_at": "2025-01-01T00:00:00Z",
            "message": message,
            "done": true,
            "done_reason": if finish == "tool_calls" { "stop" } else { finish },
        });
        if let Some((p, c)) = usage {
            v["prompt_eval_count"] = json!(p);
            v["eval_count"] = json!(c);
        }
        v
    } else {
        let mut v = json!({
            "id": format!("chatcmpl-fake-{index}"),
            "object": "chat.completion",
            "created": 1_735_689_600u64,
            "model": answering_model(model),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        });
        if let Some((p, c)) = usage {
            v["usage"] = json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c});
        }
        v
    };
    v.to_string().into_bytes()
}
