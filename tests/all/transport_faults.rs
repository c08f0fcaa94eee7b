//! Fault handling of the LLM HTTP transport (`ctxhost::llm::Transport`) against the fake server:
//! retries on 429/5xx/connection errors/timeouts/truncated bodies, `Retry-After`, no retry on
//! other 4xx, error messages (URL, attempts, status, body snippet, never the key), and the
//! request/response files.

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use crate::support::fake_llm::{FakeLlm, Reply};
use ctxhost::llm::{Transport, TransportConfig, TransportError};
use ctxhost::task_dir::TaskDir;
use serde_json::{Value, json};

const ENDPOINT: &str = "/v1/chat/completions";
const REQUEST: &str = "request.json";
const RESPONSE: &str = "response.json";

/// A temp dir with a request.json; `response.json` is the response path.
struct Files {
    _dir: tempfile::TempDir,
    task: TaskDir,
    request: PathBuf,
    response: PathBuf,
    request_bytes: Vec<u8>,
}

fn files() -> Files {
    let dir = tempfile::tempdir().unwrap();
    let request = dir.path().join("request.json");
    let body = json!({
        "model": "fake-model",
        "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi ünïcode"}],
    });
    let request_bytes = serde_json::to_vec(&body).unwrap();
    fs::write(&request, &request_bytes).unwrap();
    let response = dir.path().join("response.json");
    Files {
        task: TaskDir::open(dir.path()).unwrap(),
        _dir: dir,
        request,
        response,
        request_bytes,
    }
}

/// Quick settings: short timeouts, 2 retries, tiny initial backoff.
fn transport(base_url: &str, tweak: impl FnOnce(&mut TransportConfig)) -> Transport {
    let mut cfg = TransportConfig::new(base_url);
    cfg.connect_timeout = Duration::from_secs(2);
    cfg.request_timeout = Duration::from_secs(5);
    cfg.max_retries = 2;
    cfg.max_backoff = Duration::from_secs(5);
    tweak(&mut cfg);
    Transport::new(cfg).with_initial_backoff(Duration::from_millis(10))
}

fn response_json(f: &Files) -> Value {
    serde_json::from_slice(&fs::read(&f.response).unwrap()).unwrap()
}

/// The request file is never modified, and no `.partial` file is left behind.
fn assert_files_clean(f: &Files) {
    assert_eq!(
        fs::read(&f.request).unwrap(),
        f.request_bytes,
        "request file changed"
    );
    let partial = f.response.with_file_name("response.json.partial");
    assert!(!partial.exists(), "{} left behind", partial.display());
}

#[test]
fn success_streams_request_and_writes_response() {
    let llm = FakeLlm::start(vec![Reply::text("hello", Some((12, 3)))]);
    let f = files();
    let out = transport(&llm.base_url(), |_| {})
        .post_file(ENDPOINT, &f.task, REQUEST, RESPONSE)
        .unwrap();
    assert_eq!(out.status, 200);
    assert_eq!(out.attempts, 1);
    assert_eq!(out.bytes, fs::metadata(&f.response).unwrap().len());
    let resp = response_json(&f);
    assert_eq!(resp["choices"][0]["message"]["content"], "hello");
    assert_eq!(resp["usage"]["total_tokens"], 15);

    let reqs = llm.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, ENDPOINT);
    assert_eq!(r.raw_body, f.request_bytes, "body sent byte for byte");
    assert_eq!(
        r.header("content-length"),
        Some(f.request_bytes.len().to_string().as_str())
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        r.header("authorization"),
        None,
        "no key configured: no Authorization header"
    );
    assert_files_clean(&f);
}

#[test]
fn base_url_with_v1_is_not_doubled() {
    let llm = FakeLlm::start(vec![Reply::text("ok", None)]);
    let f = files();
    let base = format!("{}/v1/", llm.base_url());
    transport(&base, |_| {})
        .post_file(ENDPOINT, &f.task, REQUEST, RESPONSE)
        .unwrap();
    assert_eq!(llm.requests()[0].path, "/v1/chat/completions");
}

#[test]
fn retry_after_429_is_honoured() {
    let llm = FakeLlm::start(vec![
        Reply::status(
            429,
            r#"{"error":{"message":"rate limited"}}"#,
            &[("Retry-After", "1")],
        ),
        Reply::text("after the wait", Some((5, 5))),
    ]);
    let f = files();
    let out = transport(&llm.base_url(), |_| {})
        .post_file(ENDPOINT, &f.task, REQUEST, RESPONSE)
        .unwrap();
    assert_eq!(out.attempts, 2);
    assert_eq!(
        response_json(&f)["choices"][0]["message"]["content"],
        "after the wait"
    );
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    // Behaviour check: the retry waited for Retry-After (1 s), not the 10 ms backoff.
    let gap = reqs[1].at.duration_since(reqs[0].at);
    assert!(
        gap >= Duration::from_millis(950),
        "retry came after {gap:?}, Retry-After was 1 s"
    );
    assert_eq!(
        reqs[1].raw_body, f.request_bytes,
        "the retry sends the same body"
    );
    assert_files_clean(&f);
}

#[test]
fn retry_after_is_capped_at_max_backoff() {
    let llm = FakeLlm::start(vec![
        Reply::status(503, "busy", &[("Retry-After", "3600")]),
        Reply::text("ok", None),
    ]);
    let f = files();
    let t = transport(&llm.base_url(), |c| {
        c.max_backoff = Duration::from_millis(100)
    });
    let out = t.post_file(ENDPOINT, &f.task, REQUEST, RESPONSE).unwrap();
    assert_eq!(out.attempts, 2);
    // Generous bound: the point is that it did not wait an hour.
    assert!(out.elapsed < Duration::from_secs(30), "{:?}", out.elapsed);
}

#[test]
fn server_errors_are_retried_until_success() {
    let llm = FakeLlm::start(vec![
        Reply::status(500, r#"{"error":"boom"}"#, &[]),
        Reply::status(500, r#"{"error":"boom again"}"#, &[]),
        Reply::text("third time", None),
    ]);
    let f = files();
    let out = transport(&llm.base_url(), |_| {})
        .post_file(ENDPOINT, &f.task, REQUEST, RESPONSE)
        .unwrap();
    assert_eq!(out.attempts, 3);
    assert_eq!(llm.request_count(), 3);
    assert_eq!(
        response_json(&f)["choices"][0]["message"]["content"],
        "third time"
    );
    assert_files_clean(&f);
}

#[test]
fn retries_are_bounded_by_max_retries() {
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::status(503, "overloaded", &[]));
    let f = files();
    let err = transport(&llm.base_url(), |c| c.max_retries = 3)
        .post_file(ENDPOINT, &f.task, REQUEST, RESPONSE)
        .unwrap_err();
    assert_eq!(err.attempts(), 4);
    assert_eq!(err.status(), Some(503));
    assert_eq!(llm.request_count(), 4);
    assert!(!f.response.exists(), "no response file on failure");
    assert_files_clean(&f);
}

#[test]
fn connection_refused_fails_after_retries_naming_the_url() {
    let port = crate::support::unused_port();
    let base = format!("http://127.0.0.1:{port}");
    let f = files();
    let err = transport(&base, |_| {})
        .post_file(ENDPOINT, &f.task, REQUEST, RESPONSE)
        .unwrap_err();
    assert!(matches!(err, TransportError::Connection { .. }), "{err:?}");
    assert_eq!(err.attempts(), 3);
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("{base}/v1/chat/completions")),
        "{msg}"
    );
    assert!(msg.contains("3 attempt"), "{msg}");
    assert!(msg.to_lowercase().contains("refused"), "{msg}");
    assert!(!f.response.exists());
    assert_files_clean(&f);
}

#[test]
fn timeout_is_retried_then_reported() {
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::delay(
        Duration::from_secs(3),
        Reply::text("too late", None),
    ));
    let f = files();
    let t = transport(&llm.base_url(), |c| {
        c.request_timeout = Duration::from_millis(300);
        c.max_retries = 1;
    });
    let err = t
        .post_file(ENDPOINT, &f.task, REQUEST, RESPONSE)
        .unwrap_err();
    assert!(matches!(err, TransportError::Timeout { .. }), "{err:?}");
    assert_eq!(err.attempts(), 2);
    assert_eq!(
        llm.request_count(),
        2,
        "the timed-out request was sent again"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("timed out") && msg.contains(&llm.base_url()),
        "{msg}"
    );
    assert!(!f.response.exists());
    assert_files_clean(&f);
}

/// A TCP port that accepts connections and never says a word (a plain-HTTP server waiting
/// for the end of a request line that a TLS hello never sends). Connections are held until
/// the returned guard is dropped.
struct SilentPort {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<usize>>,
}

impl SilentPort {
    fn start() -> SilentPort {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !flag.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) => held.push(conn),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
            held.len()
        });
        SilentPort {
            port,
            stop,
            thread: Some(thread),
        }
    }

    /// Stop accepting; the connections it accepted.
    fn finish(mut self) -> usize {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}

#[test]
fn an_https_url_on_a_port_that_never_answers_the_tls_hello_obeys_the_connect_timeout() {
    let silent = SilentPort::start();
    let f = files();
    let t = transport(&format!("https://127.0.0.1:{}", silent.port), |c| {
        c.connect_timeout = Duration::from_secs(1);
        c.request_timeout = Duration::from_secs(60);
        c.max_retries = 1;
    });
    let started = std::time::Instant::now();
    let err = t
        .post_file(ENDPOINT, &f.task, REQUEST, RESPONSE)
        .unwrap_err();
    let took = started.elapsed();
    // Two attempts of about 1 s each (the handshake's limit), not of the 60 s request limit.
    assert!(took < Duration::from_secs(10), "took {took:?}: {err}");
    match &err {
        TransportError::Timeout {
            limit,
            timeout,
            attempts,
            ..
        } => {
            assert_eq!(*limit, ctxhost::llm::TimeoutLimit::Connect, "{err}");
            assert_eq!(*timeout, Duration::from_secs(1), "{err}");
            assert_eq!(*attempts, 2, "{err}");
        }
        other => panic!("not a timeout: {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains(
            "connect and TLS handshake limit (llm.connect_timeout_secs) of 1s per attempt"
        ),
        "{msg}"
    );
    assert_eq!(silent.finish(), 2, "one connection per attempt");
    assert!(!f.response.exists());
    assert_files_clean(&f);
}

#[test]
fn a_request_timeout_names_the_request_limit() {
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::delay(
        Duration::from_secs(3),
        Reply::text("too late", None),
    ));
    let f = files();
    let t = transport(&llm.base_url(), |c| {
        c.request_timeout = Duration::from_millis(300);
        c.max_retries = 0;
    });
    let err = t
        .post_file(ENDPOINT, &f.task, REQUEST, RESPONSE)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("(request limit (llm.timeout_secs) of 300ms per attempt)"),
        "{err}"
    );
}

#[test]
fn timeout_then_success() {
    let llm = FakeLlm::start(vec![
        Reply::delay(Duration::from_secs(3), Reply::text("too late", None)),
        Reply::text("in time", None),
    ]);
    let f = files();
    let t = transport(&llm.base_url(), |c| {
        c.request_timeout = Duration::from_millis(300)
    });
    let out = t.post_file(ENDPOINT, &f.task, REQUEST, RESPONSE).unwrap();
    assert_eq!(out.attempts, 2);
    assert_eq!(
        response_json(&f)["choices"][0]["message"]["content"],
        "in time"
    );
}

#[test]
fn truncated_body_is_retried() {
    let llm = FakeLlm::start(vec![
        Reply::truncated(Reply::text(
            "this body is cut in half by the server",
            Some((1, 1)),
        )),
        Reply::text("complete", Some((1, 1))),
    ]);
    let f = files();
    let out = transport(&llm.base_url(), |_| {})
        .post_file(ENDPOINT, &f.task, REQUEST, RESPONSE)
        .unwrap();
    assert_eq!(out.attempts, 2);
    assert_eq!(
        response_json(&f)["choices"][0]["message"]["content"],
        "complete"
    );
    assert_files_clean(&f);
}

#[test]
fn truncated_body_every_time_is_an_error_and_leaves_no_response() {
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::truncated(Reply::text("cut cut cut cut cut", None)));
    let f = files();
    let err = transport(&llm.base_url(), |c| c.max_retries = 1)
        .post_file(ENDPOINT, &f.task, REQUEST, RESPONSE)
        .unwrap_err();
    assert!(matches!(err, TransportError::Connection { .. }), "{err:?}");
    assert_eq!(err.attempts(), 2);
    assert!(
        !f.response.exists(),
        "a partial body must not become the response file"
    );
    assert_files_clean(&f);
}

#[test]
fn hang_up_is_retried() {
    let llm = FakeLlm::start(vec![Reply::hang_up(), Reply::text("back", None)]);
    let f = files();
    let out = transport(&llm.base_url(), |_| {})
        .post_file(ENDPOINT, &f.task, REQUEST, RESPONSE)
        .unwrap();
    assert_eq!(out.attempts, 2);
    assert_eq!(
        response_json(&f)["choices"][0]["message"]["content"],
        "back"
    );
}

#[test]
fn html_502_page_gives_an_error_with_a_snippet() {
    let page = format!(
        "<html><head><title>502 Bad Gateway</title></head><body><h1>upstream unavailable</h1>{}</body></html>",
        "x".repeat(2000)
    );
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::status(502, page, &[]));
    let f = files();
    let err = transport(&llm.base_url(), |c| c.max_retries = 1)
        .post_file(ENDPOINT, &f.task, REQUEST, RESPONSE)
        .unwrap_err();
    assert_eq!(err.status(), Some(502));
    assert_eq!(err.attempts(), 2);
    let msg = err.to_string();
    assert!(msg.contains("HTTP 502"), "{msg}");
    assert!(msg.contains("<h1>upstream unavailable</h1>"), "{msg}");
    assert!(msg.contains(&llm.base_url()), "{msg}");
    assert!(
        msg.len() < 1000,
        "snippet is bounded, got {} chars",
        msg.len()
    );
    assert_files_clean(&f);
}

#[test]
fn client_errors_are_not_retried() {
    for code in [400u16, 401, 404, 422] {
        let llm = FakeLlm::start(vec![Reply::status(
            code,
            r#"{"error":{"message":"bad request"}}"#,
            &[],
        )]);
        let f = files();
        let err = transport(&llm.base_url(), |_| {})
            .post_file(ENDPOINT, &f.task, REQUEST, RESPONSE)
            .unwrap_err();
        assert_eq!(err.status(), Some(code));
        assert_eq!(err.attempts(), 1, "HTTP {code} must not be retried");
        assert_eq!(llm.request_count(), 1);
        assert!(err.to_string().contains("bad request"), "{err}");
        assert_files_clean(&f);
    }
}

#[test]
fn retryable_client_errors_408_409() {
    for code in [408u16, 409] {
        let llm = FakeLlm::start(vec![
            Reply::status(code, "try again", &[]),
            Reply::text("ok", None),
        ]);
        let f = files();
        let out = transport(&llm.base_url(), |_| {})
            .post_file(ENDPOINT, &f.task, REQUEST, RESPONSE)
            .unwrap();
        assert_eq!(out.attempts, 2, "HTTP {code} is retried");
    }
}

#[test]
fn redirect_is_not_followed() {
    let llm = FakeLlm::start(vec![Reply::status(
        301,
        "",
        &[("Location", "https://elsewhere.example/v1")],
    )]);
    let f = files();
    let err = transport(&llm.base_url(), |_| {})
        .post_file(ENDPOINT, &f.task, REQUEST, RESPONSE)
        .unwrap_err();
    assert_eq!(err.status(), Some(301));
    assert_eq!(err.attempts(), 1);
    assert!(
        err.to_string().contains("https://elsewhere.example/v1"),
        "{err}"
    );
    assert_eq!(llm.request_count(), 1);
}

#[test]
fn api_key_is_sent_but_never_shown() {
    let key = "sk-test-SECRET-0123456789";
    let llm = FakeLlm::start(vec![
        Reply::text("authorised", None),
        // A server that echoes the key back in its error body.
        Reply::status(401, format!(r#"{{"error":"invalid api key {key}"}}"#), &[]),
    ]);
    let f = files();
    let t = transport(&llm.base_url(), |c| c.api_key = Some(key.to_string()));
    t.post_file(ENDPOINT, &f.task, REQUEST, RESPONSE).unwrap();
    let err = t
        .post_file(ENDPOINT, &f.task, REQUEST, RESPONSE)
        .unwrap_err();

    let reqs = llm.requests();
    let expected = format!("Bearer {key}");
    assert_eq!(reqs[0].header("authorization"), Some(expected.as_str()));
    assert_eq!(reqs[1].header("authorization"), Some(expected.as_str()));
    let msg = err.to_string();
    let dbg = format!("{err:?} {:?}", t.config());
    assert!(
        !msg.contains(key) && !dbg.contains(key),
        "key leaked: {msg} / {dbg}"
    );
    assert!(msg.contains("[redacted]"), "{msg}");
    assert!(
        !fs::read_to_string(&f.request).unwrap().contains(key),
        "key in request file"
    );
}

#[test]
fn oversized_response_is_rejected_without_retry() {
    let llm = FakeLlm::start(vec![Reply::text("y".repeat(10_000), None)]);
    let f = files();
    let err = transport(&llm.base_url(), |c| c.max_response_bytes = 1000)
        .post_file(ENDPOINT, &f.task, REQUEST, RESPONSE)
        .unwrap_err();
    assert!(
        matches!(err, TransportError::TooLarge { limit: 1000, .. }),
        "{err:?}"
    );
    assert_eq!(llm.request_count(), 1);
    assert!(!f.response.exists());
    assert_files_clean(&f);
}

#[test]
fn missing_request_file_is_a_clear_error_without_network() {
    let llm = FakeLlm::start(vec![]);
    let f = files();
    let err = transport(&llm.base_url(), |_| {})
        .post_file(ENDPOINT, &f.task, "nope.json", RESPONSE)
        .unwrap_err();
    assert!(matches!(err, TransportError::RequestFile { .. }), "{err:?}");
    assert!(err.to_string().contains("nope.json"), "{err}");
    assert_eq!(llm.request_count(), 0);
}

#[test]
fn keep_alive_reuses_the_connection() {
    let llm = FakeLlm::start(vec![Reply::text("1", None), Reply::text("2", None)]);
    let f = files();
    let t = transport(&llm.base_url(), |_| {});
    t.post_file(ENDPOINT, &f.task, REQUEST, RESPONSE).unwrap();
    t.post_file(ENDPOINT, &f.task, REQUEST, RESPONSE).unwrap();
    let reqs = llm.requests();
    assert_eq!(
        reqs[0].connection, reqs[1].connection,
        "second call on the pooled connection"
    );
    assert_eq!(response_json(&f)["choices"][0]["message"]["content"], "2");
}

#[test]
fn ollama_path_gets_ollama_shape() {
    let llm = FakeLlm::start(vec![Reply::tool_calls(
        vec![("c1", "list_directory", r#"{"path":"."}"#)],
        Some((7, 3)),
    )]);
    let f = files();
    transport(&llm.base_url(), |_| {})
        .post_file("/api/chat", &f.task, REQUEST, RESPONSE)
        .unwrap();
    let v = response_json(&f);
    assert_eq!(v["done"], true);
    assert_eq!(
        v["message"]["tool_calls"][0]["function"]["name"],
        "list_directory"
    );
    assert_eq!(
        v["message"]["tool_calls"][0]["function"]["arguments"]["path"],
        "."
    );
    assert_eq!(v["prompt_eval_count"], 7);
}

/// An interruptible call ([`Interruption`]): a reply that arrives within the grace period after
/// a pause/stop request is kept; a slower one is abandoned after the grace (no response file,
/// no retry), and a request seen before the first attempt sends nothing.
#[test]
fn an_interruptible_call_keeps_a_reply_in_grace_and_abandons_a_slow_one() {
    use ctxhost::llm::Interruption;
    use std::time::Instant;

    let llm = FakeLlm::start(vec![]);
    let t = transport(&llm.base_url(), |c| c.max_retries = 3);
    let post = |f: &Files, requested: &dyn Fn() -> bool, grace: Duration| {
        t.post_file_interruptible(
            ENDPOINT,
            &f.task,
            REQUEST,
            RESPONSE,
            &Interruption { requested, grace },
        )
    };

    // The request comes once the attempt is in flight; the reply comes within the grace.
    llm.set_default(Reply::delay(
        Duration::from_millis(1500),
        Reply::text("late but kept", None),
    ));
    let f = files();
    let before = llm.request_count();
    let out = post(
        &f,
        &|| llm.request_count() > before,
        Duration::from_secs(30),
    )
    .unwrap();
    assert_eq!(out.attempts, 1);
    assert_eq!(
        response_json(&f)["choices"][0]["message"]["content"],
        "late but kept"
    );
    assert_files_clean(&f);

    // A reply slower than the grace: abandoned, nothing written, not retried.
    llm.set_default(Reply::delay(
        Duration::from_secs(4),
        Reply::text("never read", None),
    ));
    let f = files();
    let before = llm.request_count();
    let t0 = Instant::now();
    let e = post(
        &f,
        &|| llm.request_count() > before,
        Duration::from_millis(300),
    )
    .unwrap_err();
    let took = t0.elapsed();
    assert!(
        matches!(e, TransportError::Interrupted { attempts: 1, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("asked to pause or stop"), "{e}");
    assert!(took < Duration::from_secs(3), "abandoned after {took:?}");
    assert_eq!(llm.request_count(), before + 1, "no retry");
    assert!(!f.response.exists());
    assert_files_clean(&f);

    // Requested before the first attempt: nothing is sent.
    let before = llm.request_count();
    let e = post(&f, &|| true, Duration::ZERO).unwrap_err();
    assert!(
        matches!(e, TransportError::Interrupted { attempts: 0, .. }),
        "{e}"
    );
    assert_eq!(llm.request_count(), before);
}

/// Issue 37 item 5: with an API key configured, the redactor holds back only the start of a
/// key between reads, and every ending writes what it held: a stream that stalls shows its
/// last event in reply.stream while it stalls (the live view), and one that breaks off on its
/// idle timeout keeps every byte it received in `failed-streams/`.
#[test]
fn a_stalled_or_broken_stream_keeps_its_last_bytes_with_a_key_configured() {
    // The fake's chunks end with `"object":"chat.completion.chunk"}`: bytes a key starting
    // with `c` shares its first byte with.
    let key = "ck-live-0123456789";
    let llm = FakeLlm::start(vec![
        Reply::stream_stall(Reply::text("Hello there.", None), 3, Duration::from_secs(2)),
        Reply::stream_stall(Reply::text("Hello there.", None), 3, Duration::from_secs(3)),
    ]);
    let f = files();
    let mut body: Value = serde_json::from_slice(&f.request_bytes).unwrap();
    body["stream"] = json!(true);
    fs::write(&f.request, serde_json::to_vec(&body).unwrap()).unwrap();
    let stream = f.task.file_path("reply.stream");
    // Stalls 2 s, idle timeout 3 s: read while it stalls.
    let t = transport(&llm.base_url(), |c| {
        c.api_key = Some(key.to_string());
        c.idle_timeout = Duration::from_secs(3);
        c.max_retries = 0;
    });
    let (t2, task) = (t.clone(), f.task.clone());
    let call = std::thread::spawn(move || {
        t2.post_file_streamed(ENDPOINT, &task, REQUEST, "reply.stream", None, None, 0)
    });
    std::thread::sleep(Duration::from_millis(1000));
    let during = fs::read_to_string(&stream).unwrap();
    assert_eq!(during.matches("data: ").count(), 3, "{during}");
    assert!(
        during.ends_with("chunk\"}\n\n"),
        "the last event whole: {during:?}"
    );
    call.join().unwrap().unwrap();
    // Stalls 3 s, idle timeout 1 s: broken off, kept whole.
    let t = transport(&llm.base_url(), |c| {
        c.api_key = Some(key.to_string());
        c.idle_timeout = Duration::from_secs(1);
        c.max_retries = 0;
    });
    let err = t
        .post_file_streamed(ENDPOINT, &f.task, REQUEST, "reply.stream", None, None, 0)
        .unwrap_err();
    assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
    let kept = fs::read_to_string(f.task.file_path("failed-streams/1.stream")).unwrap();
    assert_eq!(kept.matches("data: ").count(), 3, "{kept}");
    assert!(
        kept.ends_with("chunk\"}\n\n"),
        "every byte received: {kept:?}"
    );
}
