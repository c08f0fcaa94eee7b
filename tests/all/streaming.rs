//! Streamed replies (`llm.stream`, issue 26) against the fake OpenAI-compatible server's
//! server-sent events: the request asks for a stream, the raw stream lands in `reply.stream`,
//! the request format folds it into the reply; a stream cut off or stalled is sent again and
//! kept in `failed-streams/`.

use std::time::Duration;

use crate::support::fake_llm::{FakeLlm, Reply};
use crate::support::{TestEnv, config_yaml, read_jsonl};

/// An environment for `llm` with `llm.stream` left to its default (on) and the `llm` keys
/// `extra` (each line `  key: value\n`), initialised.
fn streaming_env(llm: &FakeLlm, extra: &str) -> TestEnv {
    let env = TestEnv::new();
    let base = config_yaml(&llm.base_url(), "openai", "");
    assert!(!base.contains("stream:"), "{base}");
    let yaml = base.replace(
        "max_backoff_secs: 2",
        &format!("max_backoff_secs: 1\n{extra}"),
    );
    env.write_config(&yaml);
    env.ctxhost(&["init"]).ok();
    env
}

fn run_once(env: &TestEnv) {
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
}

#[test]
fn a_streamed_reply_is_folded_into_messages_tool_calls_and_usage() {
    let llm = FakeLlm::start(vec![
        Reply::tool_calls(
            vec![
                ("a1", "list_directory", r#"{"path":"."}"#),
                ("a2", "grep", r#"{"pattern":"fn main","path":"."}"#),
            ],
            Some((40, 8)),
        ),
        Reply::text("All done: nothing to change here.", Some((70, 4))),
    ]);
    let env = streaming_env(&llm, "");
    let uuid = env.submit("Look around");
    run_once(&env);
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["tool_call_count"], 2);
    // Usage from the usage chunks (stream_options.include_usage).
    assert_eq!(r["total_tokens"], 48 + 74);
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    for q in &reqs {
        assert_eq!(q.body["stream"], true, "{}", q.body);
        assert_eq!(q.body["stream_options"]["include_usage"], true);
    }
    let dir = env.contexts().join("completed").join(&uuid);
    let messages = read_jsonl(&dir.join("messages.jsonl"));
    let assistant: Vec<_> = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    assert_eq!(assistant.len(), 2);
    let calls = assistant[0]["tool_calls"].as_array().unwrap();
    let got: Vec<(&str, &str, &str)> = calls
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap(),
                c["function"]["name"].as_str().unwrap(),
                c["function"]["arguments"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("a1", "list_directory", r#"{"path":"."}"#),
            ("a2", "grep", r#"{"pattern":"fn main","path":"."}"#)
        ]
    );
    assert_eq!(assistant[1]["content"], "All done: nothing to change here.");
    // The raw stream of the last call stays; no response.json, no failed stream.
    let stream = std::fs::read_to_string(dir.join("reply.stream")).unwrap();
    assert!(stream.contains("data: [DONE]"), "{stream}");
    assert!(stream.contains(r#"{"content":"All "}"#), "{stream}");
    assert!(!dir.join("response.json").exists());
    assert!(!dir.join("failed-streams").exists());
}

#[test]
fn a_stream_cut_off_is_sent_again_and_kept_in_failed_streams() {
    let llm = FakeLlm::start(vec![
        Reply::stream_cut(
            Reply::text("A partial answer that breaks off", Some((5, 5))),
            4,
        ),
        Reply::text("Whole.", Some((10, 2))),
    ]);
    let env = streaming_env(&llm, "");
    let uuid = env.submit("Answer");
    run_once(&env);
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(llm.request_count(), 2);
    assert_eq!(r["total_tokens"], 12, "only the whole reply's usage counts");
    let dir = env.contexts().join("completed").join(&uuid);
    let messages = read_jsonl(&dir.join("messages.jsonl"));
    let replies: Vec<_> = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(replies, ["Whole."], "the partial is never appended");
    let failed = std::fs::read_to_string(dir.join("failed-streams/1.stream")).unwrap();
    assert!(failed.contains("A pa"), "{failed}");
    assert!(!failed.contains("[DONE]"), "{failed}");
    assert!(!dir.join("failed-streams/2.stream").exists());
}

#[test]
fn a_stream_cut_inside_a_line_is_sent_again() {
    // The connection closes inside event 2 (its JSON half sent, no `\n`): a cut, not a whole
    // stream with a bad line, so the request is sent again and the partial kept.
    let llm = FakeLlm::start(vec![
        Reply::stream_torn(
            Reply::text("A partial answer that breaks off", Some((5, 5))),
            2,
        ),
        Reply::text("Whole.", Some((10, 2))),
    ]);
    let env = streaming_env(&llm, "");
    let uuid = env.submit("Answer");
    run_once(&env);
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(llm.request_count(), 2);
    let dir = env.contexts().join("completed").join(&uuid);
    let failed = std::fs::read_to_string(dir.join("failed-streams/1.stream")).unwrap();
    assert!(!failed.ends_with('\n'), "cut inside a line: {failed}");
    let last = read_jsonl(&dir.join("messages.jsonl"));
    assert_eq!(last.last().unwrap()["content"], "Whole.");
}

#[test]
fn a_stream_cut_each_time_is_sent_at_most_max_retries_times_again() {
    // `llm.max_retries: 2` (the test config): 3 requests in all for the call, not 3 per
    // re-ask of the agent loop.
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::stream_cut(
        Reply::text("A partial answer that breaks off", Some((5, 5))),
        4,
    ));
    let env = streaming_env(&llm, "");
    let uuid = env.submit("Answer");
    run_once(&env);
    let r = env.row(&uuid);
    assert_eq!(r["status"], "failed", "{r}");
    assert_eq!(llm.request_count(), 3, "1 + max_retries requests");
    let kept: usize = std::fs::read_dir(env.contexts())
        .unwrap()
        .map(|state| state.unwrap().path().join(&uuid).join("failed-streams"))
        .filter_map(|d| std::fs::read_dir(d).ok())
        .map(|d| d.count())
        .sum();
    assert_eq!(kept, 3, "every cut stream is kept");
    let error = r["error_message"].as_str().unwrap();
    assert!(error.contains("cut off"), "{error}");
}

#[test]
fn a_whole_stream_that_cannot_be_folded_fails_the_call_once() {
    // The stream reaches its end (`[DONE]`), but one event is not JSON: the same request
    // would get the same failure, so it is neither sent again nor asked for again.
    let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n\
                data: {not an event}\n\n\
                data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
                data: [DONE]\n\n";
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::status(
        200,
        body,
        &[("Content-Type", "text/event-stream")],
    ));
    let env = streaming_env(&llm, "");
    let uuid = env.submit("Answer");
    run_once(&env);
    let r = env.row(&uuid);
    assert_eq!(r["status"], "failed", "{r}");
    assert_eq!(llm.request_count(), 1, "a whole stream is not sent again");
    let error = r["error_message"].as_str().unwrap();
    assert!(
        error.contains("line 3") && error.contains("not sent again"),
        "{error}"
    );
    assert!(error.contains("failed-streams/1.stream"), "{error}");
}

#[test]
fn idle_timeout_bounds_the_wait_between_bytes_not_the_whole_stream() {
    let llm = FakeLlm::start(vec![
        // Stalls 4 s after its third event: longer than llm.idle_timeout_secs.
        Reply::stream_stall(
            Reply::text("Stalled reply", Some((5, 5))),
            3,
            Duration::from_secs(4),
        ),
        // 0.3 s between events, ~2.4 s in all: longer than llm.timeout_secs, fine for a stream.
        Reply::text("A slow but steady stream of text.", Some((10, 2))),
    ]);
    llm.set_stream_delay(Duration::from_millis(300));
    let env = TestEnv::new();
    let yaml = config_yaml(&llm.base_url(), "openai", "")
        .replace("timeout_secs: 20", "timeout_secs: 1")
        .replace(
            "max_backoff_secs: 2",
            "max_backoff_secs: 1\n  stream: true\n  idle_timeout_secs: 1",
        );
    env.write_config(&yaml);
    env.ctxhost(&["init"]).ok();
    let uuid = env.submit("Answer");
    run_once(&env);
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(llm.request_count(), 2);
    let dir = env.contexts().join("completed").join(&uuid);
    let messages = read_jsonl(&dir.join("messages.jsonl"));
    let replies: Vec<_> = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(replies, ["A slow but steady stream of text."]);
    let failed = std::fs::read_to_string(dir.join("failed-streams/1.stream")).unwrap();
    assert!(failed.contains("Stal"), "{failed}");
}

/// A server that ignores `"stream": true` and answers one whole JSON body (typed
/// `application/json`, or untyped and starting with `{`) is read as an unstreamed reply: no
/// retry, nothing kept as a failed stream.
#[test]
fn a_server_that_ignores_stream_true_is_read_as_one_json_body() {
    let llm = FakeLlm::start(vec![
        Reply::whole(
            Reply::tool_calls(
                vec![("w1", "list_directory", r#"{"path":"."}"#)],
                Some((30, 6)),
            ),
            Some("application/json; charset=utf-8"),
        ),
        Reply::whole(Reply::text("Plain JSON answer.", Some((50, 4))), None),
    ]);
    let env = streaming_env(&llm, "");
    let uuid = env.submit("Look around");
    run_once(&env);
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["tool_call_count"], 1);
    assert_eq!(r["total_tokens"], 36 + 54);
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2, "no call sent again");
    for q in &reqs {
        assert_eq!(q.body["stream"], true, "{}", q.body);
    }
    let dir = env.contexts().join("completed").join(&uuid);
    let messages = read_jsonl(&dir.join("messages.jsonl"));
    let assistant: Vec<_> = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    assert_eq!(assistant.len(), 2);
    assert_eq!(assistant[0]["tool_calls"][0]["id"], "w1");
    assert_eq!(assistant[1]["content"], "Plain JSON answer.");
    assert!(!dir.join("failed-streams").exists(), "not a cut stream");
    for f in ["reply.stream", "reply.stream.partial", "response.json"] {
        assert!(!dir.join(f).exists(), "{f} left behind");
    }
}

/// `llm.stream: false` (a server without streaming) asks for one whole body.
#[test]
fn stream_false_asks_for_one_whole_body() {
    let llm = FakeLlm::start(vec![Reply::text("Whole.", Some((10, 2)))]);
    let env = streaming_env(&llm, "  stream: false\n");
    let uuid = env.submit("Answer");
    run_once(&env);
    assert_eq!(env.row(&uuid)["status"], "completed");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].body["stream"], false, "{}", reqs[0].body);
    assert!(reqs[0].body.get("stream_options").is_none());
    let dir = env.contexts().join("completed").join(&uuid);
    assert!(!dir.join("reply.stream").exists());
}

#[test]
fn a_format_that_writes_an_unstreamed_request_is_read_unstreamed_without_a_note() {
    // builtin:prompted-tools always writes `"stream": false`: with `llm.stream` on (the
    // default) its request is sent and read as the unstreamed one it is, and the log does not
    // blame the server for answering one JSON body.
    let llm = FakeLlm::start(vec![Reply::text("Plain answer.", Some((10, 3)))]);
    let env = TestEnv::new();
    let base = config_yaml(&llm.base_url(), "openai", "");
    assert!(
        !base.contains("stream:") && !base.contains("plugins:"),
        "{base}"
    );
    env.write_config(&format!(
        "{base}\nplugins:\n  request_format: builtin:prompted-tools\n"
    ));
    env.ctxhost(&["init"]).ok();
    let uuid = env.submit("Answer");
    let out = env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].body["stream"], false, "{}", reqs[0].body);
    let log = format!("{}{}", out.stdout(), out.stderr());
    assert!(!log.contains("answered one JSON body"), "{log}");
    let dir = env.contexts().join("completed").join(&uuid);
    assert!(!dir.join("reply.stream").exists(), "not read as a stream");
}

/// The retry of a cut stream is decided by the request format's typed answer (WIT
/// `plugin-error.stream-cut`), not by the words of an error: the hostile-format fixture
/// declares a whole stream cut, with a text that never says "cut off", and the host sends the
/// request again whole and keeps the stream it refused in `failed-streams/`.
#[test]
fn a_format_answering_stream_cut_gets_the_request_sent_again_and_the_partial_kept() {
    let llm = FakeLlm::start(vec![
        Reply::text("Refused by the format.", Some((5, 5))),
        Reply::text("Whole.", Some((10, 2))),
    ]);
    let env = TestEnv::new();
    let format = std::path::Path::new(env!("CTXHOST_GUEST_DIR")).join("hostile_format.wasm");
    env.write_config(&format!(
        "{}\nplugins:\n  request_format: \"{}\"\n",
        config_yaml(&llm.base_url(), "openai", ""),
        format.display()
    ));
    env.ctxhost(&["init"]).ok();
    let uuid = env.submit("HOSTILE stream-cut=1\nAnswer");
    run_once(&env);
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(llm.request_count(), 2, "sent again once");
    assert_eq!(r["total_tokens"], 12, "only the kept reply's usage counts");
    let dir = env.contexts().join("completed").join(&uuid);
    let replies: Vec<_> = read_jsonl(&dir.join("messages.jsonl"))
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(replies, ["Whole."]);
    let failed = std::fs::read_to_string(dir.join("failed-streams/1.stream")).unwrap();
    assert!(failed.contains("Refu"), "{failed}");
    assert!(!dir.join("failed-streams/2.stream").exists());
}

/// F11: `show --follow` of a task whose stream breaks off prints the text that came, then a
/// marker saying it is discarded, then the retry's text — read from its output while the fake
/// is still sending the retry (which stalls midway), and the reply shown once.
#[test]
fn show_follow_marks_a_stream_that_broke_off_before_the_retry_streams() {
    use std::io::BufRead;
    let llm = FakeLlm::start(vec![
        Reply::stream_cut(
            Reply::text("Broken text that never ends here", Some((5, 5))),
            6,
        ),
        Reply::stream_stall(
            Reply::text("The retry arrives whole.", Some((10, 2))),
            4,
            Duration::from_secs(4),
        ),
    ]);
    llm.set_stream_delay(Duration::from_millis(200));
    let env = streaming_env(&llm, "");
    let uuid = env.submit("Answer");
    // Following from before the task starts: every delta of the first stream is seen.
    let mut follow = env.ctxhost_cmd(&["show", &uuid, "--follow"]).spawn();
    let stdout = follow.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let mut worker = env
        .ctxhost_cmd(&["run", "--once", "--poll-ms", "20"])
        .spawn();
    let mut lines = Vec::new();
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("no marker ({e}); printed so far: {lines:#?}"));
        let marker = line.starts_with("[stream broken off after");
        lines.push(line);
        if marker {
            break;
        }
    }
    // Printed while the retry is still arriving (sent after its back-off, issue 38 item 10).
    assert_eq!(env.row(&uuid)["status"], "running", "{lines:#?}");
    assert!(crate::support::wait_until(Duration::from_secs(5), || llm
        .request_count()
        == 2));
    assert!(worker.wait().unwrap().success());
    assert_eq!(follow.wait().unwrap().code(), Some(0));
    lines.extend(rx.iter());
    reader.join().unwrap();
    let at = lines
        .iter()
        .position(|l| l.starts_with("[stream broken off after"))
        .unwrap();
    assert!(lines[at - 1].starts_with("Brok"), "{lines:#?}");
    assert!(
        lines[at].ends_with("the text above is discarded; kept in failed-streams/1.stream]"),
        "{lines:#?}"
    );
    let after = lines[at + 1..].join("\n");
    assert!(
        after.starts_with("The retry arrives whole.\n"),
        "{lines:#?}"
    );
    assert_eq!(
        after.matches("The retry arrives whole.").count(),
        1,
        "{after}"
    );
    assert!(!after.contains("Brok"), "{after}");
    assert!(after.contains("completed"), "{after}");
}

/// Issue 37 item 3 and issue 38 item 10: one budget per call. A connection reset (retried by
/// the transport) alternating with a clean end of stream without its end marker (sent again
/// by the exchange) makes `1 + max_retries` requests in all (3 with the test config's 2), not
/// `(1 + max_retries)²`; and a cut stream is sent again after the same back-off as a
/// transport retry (500 ms doubling, with jitter: at least half of it), not at once.
#[test]
fn resets_and_cut_streams_share_one_budget_and_the_back_off() {
    let cut = || {
        Reply::stream_cut(
            Reply::text("A partial answer that breaks off", Some((5, 5))),
            4,
        )
    };
    let llm = FakeLlm::start(vec![
        cut(),
        Reply::hang_up(),
        cut(),
        Reply::hang_up(),
        cut(),
        Reply::hang_up(),
        cut(),
        Reply::hang_up(),
    ]);
    llm.set_default(Reply::text("Whole.", Some((10, 2))));
    let env = streaming_env(&llm, "");
    let uuid = env.submit("Answer");
    run_once(&env);
    let r = env.row(&uuid);
    assert_eq!(r["status"], "failed", "{r}");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 3, "1 + max_retries requests for the call");
    for (k, pair) in reqs.windows(2).enumerate() {
        let waited = pair[1].at - pair[0].at;
        let least = Duration::from_millis(250 << k);
        assert!(
            waited >= least,
            "retry {}: sent again after {waited:?}, less than {least:?}",
            k + 1
        );
    }
}

/// Issue 37 item 6: while a stalled stream is retried, `show` (and its `--json`) says what
/// the task waits for — `waiting for the model: stream stalled 1 s, retry 1 of 2` — as `ask`
/// and `show --follow` do (their `waiting` event), and says nothing once the call is over.
#[test]
fn show_says_the_model_is_waited_for_while_a_stalled_stream_is_retried() {
    let llm = FakeLlm::start(vec![
        Reply::stream_stall(
            Reply::text("Stalled reply", Some((5, 5))),
            3,
            Duration::from_secs(10),
        ),
        // 0.3 s between events: the retry streams for a few seconds.
        Reply::text(
            "A slow but steady stream of text, the whole answer.",
            Some((10, 2)),
        ),
    ]);
    llm.set_stream_delay(Duration::from_millis(300));
    let env = streaming_env(&llm, "  idle_timeout_secs: 1\n");
    let uuid = env.submit("Answer");
    let mut worker = env
        .ctxhost_cmd(&["run", "--once", "--poll-ms", "20"])
        .spawn();
    let expected = "waiting for the model: stream stalled 1 s, retry 1 of 2";
    let mut seen = String::new();
    let shown = crate::support::wait_until(Duration::from_secs(30), || {
        seen = env.ctxhost(&["show", &uuid]).stdout();
        seen.contains(&format!("waiting:       {expected}"))
    });
    assert!(shown, "{seen}");
    let json = env.ctxhost(&["show", &uuid, "--json"]).json();
    assert_eq!(json["waiting"], expected, "{json}");
    assert!(worker.wait().unwrap().success());
    assert_eq!(env.row(&uuid)["status"], "completed");
    assert!(!env.ctxhost(&["show", &uuid]).stdout().contains("waiting:"));
}
