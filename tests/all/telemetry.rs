//! OpenTelemetry traces (issue 32): a task run by a worker against the fake LLM, exported over
//! OTLP/HTTP to a receiver in the test that decodes the official protobuf messages
//! (`opentelemetry-proto`); and a collector that is down, which the task does not notice.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;
use serde_json::Value;

use crate::metrics::{config, scripted_llm};
use crate::support::dashboard::Dashboard;
use crate::support::{TestEnv, find_task_dir, read_jsonl, unused_port};

/// A header sent with every export (`OTEL_EXPORTER_OTLP_HEADERS`); must never be logged.
const SECRET: &str = "otlp-secret-4711";

/// What the receiver got: the spans, and the headers of each export.
#[derive(Default)]
struct Received {
    spans: Vec<(String, Span)>,
    headers: Vec<HashMap<String, String>>,
    paths: Vec<String>,
    /// Exports refused as too large (413), with their sizes.
    refused: Vec<usize>,
}

/// An OTLP/HTTP receiver on `127.0.0.1:PORT`: decodes each `POST /v1/traces` body as an
/// `ExportTraceServiceRequest` and answers 200.
fn receiver() -> (String, Arc<Mutex<Received>>) {
    receiver_limited(usize::MAX)
}

/// [`receiver`], refusing a body over `max_body` bytes with 413 (as a collector does with a
/// request over its limit: the whole batch is lost).
fn receiver_limited(max_body: usize) -> (String, Arc<Mutex<Received>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = format!("http://{}", listener.local_addr().unwrap());
    let got = Arc::new(Mutex::new(Received::default()));
    let g = got.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let g = g.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(stream.try_clone().unwrap());
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                    let mut headers = HashMap::new();
                    loop {
                        let mut h = String::new();
                        r.read_line(&mut h).unwrap();
                        let h = h.trim_end();
                        if h.is_empty() {
                            break;
                        }
                        let (k, v) = h.split_once(':').unwrap();
                        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
                    }
                    let len: usize = headers["content-length"].parse().unwrap();
                    let mut body = vec![0; len];
                    r.read_exact(&mut body).unwrap();
                    if len > max_body {
                        g.lock().unwrap().refused.push(len);
                        let mut w = stream.try_clone().unwrap();
                        let _ = w.write_all(
                            b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n\r\n",
                        );
                        continue;
                    }
                    let req = ExportTraceServiceRequest::decode(&body[..]).expect("protobuf");
                    {
                        let mut g = g.lock().unwrap();
                        for rs in req.resource_spans {
                            let service = rs
                                .resource
                                .iter()
                                .flat_map(|r| &r.attributes)
                                .find(|a| a.key == "service.name")
                                .and_then(|a| match a.value.as_ref()?.value.as_ref()? {
                                    Any::StringValue(s) => Some(s.clone()),
                                    _ => None,
                                })
                                .unwrap_or_default();
                            for ss in rs.scope_spans {
                                for s in ss.spans {
                                    g.spans.push((service.clone(), s));
                                }
                            }
                        }
                        g.headers.push(headers);
                        g.paths.push(path);
                    }
                    let mut w = stream.try_clone().unwrap();
                    let _ = w.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n",
                    );
                }
            });
        }
    });
    (addr, got)
}

fn attr<'a>(s: &'a Span, key: &str) -> Option<&'a Any> {
    s.attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref()?.value.as_ref())
}

fn str_attr<'a>(s: &'a Span, key: &str) -> &'a str {
    match attr(s, key) {
        Some(Any::StringValue(v)) => v,
        other => panic!("span {}: {key} is {other:?}", s.name),
    }
}

fn int_attr(s: &Span, key: &str) -> i64 {
    match attr(s, key) {
        Some(Any::IntValue(v)) => *v,
        other => panic!("span {}: {key} is {other:?}", s.name),
    }
}

fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every span exported is one of `ctxhost::telemetry::genai::SPANS` (docs/reference/spans.md is
/// rendered from it), carrying only the attributes listed there: the reference cannot miss what
/// a run exports.
fn documented(spans: &[&Span]) {
    use ctxhost::telemetry::genai::SPANS;
    for s in spans {
        let def = SPANS
            .iter()
            .find(|d| match d.name.split_once('{') {
                Some((prefix, _)) => s.name.starts_with(prefix),
                None => s.name == d.name,
            })
            .unwrap_or_else(|| panic!("span `{}` is not in telemetry::genai::SPANS", s.name));
        for a in &s.attributes {
            assert!(
                def.attributes.contains(&a.key.as_str()),
                "span `{}`: attribute {} is not listed for `{}` in telemetry::genai::SPANS",
                s.name,
                a.key,
                def.name
            );
        }
    }
}

/// Issue 32: one trace for the run: the worker's `task run` span is the root, the task
/// process's `invoke_agent` span its child, and every LLM call (`chat fake-model`, GenAI
/// attributes and token counts equal to llm_calls.jsonl), tool call (`execute_tool`) and
/// compression (`compress`) of the run a child of that; the trace id is in the task's
/// `trace_ids`; the OTLP headers are sent and never logged.
#[test]
fn a_task_run_is_one_trace_with_genai_spans() {
    let (endpoint, got) = receiver();
    let llm = scripted_llm();
    let mut env = TestEnv::new();
    env.write_config(&config(&llm.base_url()));
    env.ctxhost(&["init"]).ok();
    env.set_env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint);
    env.set_env(
        "OTEL_EXPORTER_OTLP_HEADERS",
        &format!("x-otlp-key={SECRET}"),
    );
    env.set_env("OTEL_SERVICE_NAME", "ctxhost-test");
    env.set_env("OTEL_BSP_SCHEDULE_DELAY", "100");
    env.set_env("RUST_LOG", "debug");
    let uuid = env.submit("Read every file and report.");
    let out = env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    assert_eq!(env.row(&uuid)["status"], "completed");
    let logged = format!("{}{}", out.stdout(), out.stderr());
    assert!(
        !logged.contains(SECRET),
        "the OTLP header was logged: {}",
        logged
            .lines()
            .filter(|l| l.contains(SECRET))
            .collect::<Vec<_>>()
            .join("\n")
    );

    let got = got.lock().unwrap();
    assert!(
        got.paths.iter().all(|p| p == "/v1/traces"),
        "{:?}",
        got.paths
    );
    assert!(
        got.headers
            .iter()
            .all(|h| h.get("x-otlp-key").map(String::as_str) == Some(SECRET)),
        "every export carries OTEL_EXPORTER_OTLP_HEADERS"
    );
    assert!(got.spans.iter().all(|(svc, _)| svc == "ctxhost-test"));
    let spans: Vec<&Span> = got.spans.iter().map(|(_, s)| s).collect();
    documented(&spans);
    let agent: Vec<&&Span> = spans
        .iter()
        .filter(|s| s.name == "invoke_agent ctxhost")
        .collect();
    assert_eq!(agent.len(), 1, "one run, one task span");
    let agent = agent[0];
    assert_eq!(str_attr(agent, "ctxhost.task.uuid"), uuid);
    assert_eq!(str_attr(agent, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(str_attr(agent, "ctxhost.task.status"), "completed");
    let trace = agent.trace_id.clone();
    let run: Vec<&Span> = spans
        .iter()
        .copied()
        .filter(|s| s.trace_id == trace)
        .collect();
    // The worker's span is the trace's root and the task span's parent.
    let root = run
        .iter()
        .find(|s| s.name == "task run")
        .expect("the worker's span");
    assert!(root.parent_span_id.is_empty());
    assert_eq!(str_attr(root, "ctxhost.task.uuid"), uuid);
    assert_eq!(agent.parent_span_id, root.span_id);

    // LLM calls: one span each, children of the task span, tokens as in llm_calls.jsonl.
    let dir = find_task_dir(&env.contexts(), &uuid).expect("task dir");
    let lines: Vec<Value> = read_jsonl(&dir.join("llm_calls.jsonl"));
    let calls: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] != "compression")
        .collect();
    let chats: Vec<&&Span> = run.iter().filter(|s| s.name == "chat fake-model").collect();
    assert_eq!(chats.len(), calls.len(), "a span per LLM call");
    let hook_ids: Vec<&Vec<u8>> = run
        .iter()
        .filter(|s| s.name.starts_with("strategy "))
        .map(|s| &s.span_id)
        .collect();
    for c in &chats {
        // The strategy's own calls are children of its hook's span, the compressor's of its
        // compression's (below); the agent loop's of the task's.
        match str_attr(c, "ctxhost.llm.purpose") {
            "strategy" => assert!(hook_ids.contains(&&c.parent_span_id)),
            "compressor" => {}
            _ => assert_eq!(c.parent_span_id, agent.span_id, "{}", c.name),
        }
        assert_eq!(c.kind, SpanKind::Client as i32);
        assert_eq!(str_attr(c, "gen_ai.operation.name"), "chat");
        assert_eq!(str_attr(c, "gen_ai.provider.name"), "openai");
        assert_eq!(str_attr(c, "gen_ai.request.model"), "fake-model");
        // The model that answered, as the reply names it.
        assert_eq!(
            str_attr(c, "gen_ai.response.model"),
            crate::support::fake_llm::answering_model("fake-model")
        );
        match attr(c, "gen_ai.response.finish_reasons") {
            Some(Any::ArrayValue(a)) => assert_eq!(a.values.len(), 1),
            other => panic!("finish reasons: {other:?}"),
        }
        // Cached tokens are reported (0 from this server), and no error on an answered call.
        assert_eq!(int_attr(c, "gen_ai.usage.cache_read.input_tokens"), 0);
        assert!(attr(c, "error.type").is_none(), "{}", c.name);
    }
    let tokens = |key: &str| -> i64 { chats.iter().map(|c| int_attr(c, key)).sum() };
    let logged_tokens =
        |key: &str| -> i64 { calls.iter().map(|l| l[key].as_i64().unwrap_or(0)).sum() };
    assert_eq!(
        tokens("gen_ai.usage.input_tokens"),
        logged_tokens("prompt_tokens")
    );
    assert_eq!(
        tokens("gen_ai.usage.output_tokens"),
        logged_tokens("completion_tokens")
    );
    assert!(tokens("gen_ai.usage.input_tokens") > 0);
    let purposes: Vec<&str> = chats
        .iter()
        .map(|c| str_attr(c, "ctxhost.llm.purpose"))
        .collect();
    assert!(purposes.contains(&"agent") && purposes.contains(&"compressor"));

    // Tool calls: read_text_file, which no server offers (each fails).
    let row = env.row(&uuid);
    let tools: Vec<&&Span> = run
        .iter()
        .filter(|s| s.name == "execute_tool read_text_file")
        .collect();
    assert_eq!(
        tools.len() as i64,
        row["tool_call_count"].as_i64().unwrap(),
        "a span per tool call"
    );
    for t in &tools {
        assert_eq!(t.parent_span_id, agent.span_id);
        assert_eq!(str_attr(t, "gen_ai.operation.name"), "execute_tool");
        assert_eq!(str_attr(t, "gen_ai.tool.name"), "read_text_file");
        assert!(!str_attr(t, "gen_ai.tool.call.id").is_empty());
        assert_eq!(str_attr(t, "ctxhost.tool.status"), "error");
        assert_eq!(str_attr(t, "error.type"), "tool_error");
    }

    // Compressions: one span each, tokens before and after and the summary id as
    // llm_calls.jsonl says, messages before and after; the compressor's LLM call is a child
    // of its compression's span.
    let compressions: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "compression")
        .collect();
    let mut compress: Vec<&&Span> = run.iter().filter(|s| s.name == "compress").collect();
    compress.sort_by_key(|s| s.start_time_unix_nano);
    assert!(!compressions.is_empty());
    assert_eq!(compress.len(), compressions.len());
    for (s, l) in compress.iter().zip(&compressions) {
        assert_eq!(s.parent_span_id, agent.span_id);
        assert_eq!(
            str_attr(s, "ctxhost.compression.component"),
            "builtin:llm-summarizer"
        );
        assert_eq!(
            int_attr(s, "ctxhost.compression.tokens_before"),
            l["before_tokens"].as_i64().unwrap()
        );
        assert_eq!(
            int_attr(s, "ctxhost.compression.tokens_after"),
            l["after_tokens"].as_i64().unwrap()
        );
        assert_eq!(
            int_attr(s, "ctxhost.compression.summary_id"),
            l["summary_id"].as_i64().expect("a summary was made")
        );
        let (before, after) = (
            int_attr(s, "ctxhost.compression.messages_before"),
            int_attr(s, "ctxhost.compression.messages_after"),
        );
        assert!(0 < after && after < before, "{before} -> {after}");
        let children: Vec<&&Span> = chats
            .iter()
            .copied()
            .filter(|c| c.parent_span_id == s.span_id)
            .collect();
        assert_eq!(
            children.len(),
            1,
            "the summary's LLM call is under its compression"
        );
        assert_eq!(str_attr(children[0], "ctxhost.llm.purpose"), "compressor");
        assert!(s.start_time_unix_nano <= children[0].start_time_unix_nano);
        assert!(children[0].end_time_unix_nano <= s.end_time_unix_nano);
    }

    // Strategy hooks: children of the task span too.
    let hooks: Vec<&&Span> = run
        .iter()
        .filter(|s| s.name.starts_with("strategy "))
        .collect();
    assert!(!hooks.is_empty(), "the strategy's hooks have spans");
    for h in &hooks {
        assert_eq!(h.parent_span_id, agent.span_id);
    }

    // The task page's record of the trace, shown on the dashboard.
    let ids = std::fs::read_to_string(dir.join("trace_ids")).expect("trace_ids");
    assert_eq!(ids.trim(), hex(&trace));
    let page = Dashboard::start(&env, &[]).get(&format!("/tasks/{uuid}"));
    assert_eq!(page.status, 200);
    assert!(
        page.body
            .contains(&format!("<dt>Trace id</dt><dd>{}</dd>", hex(&trace))),
        "the task page shows the trace id"
    );
}

/// Issue 32: with the collector down (a closed port) the task completes as usual.
#[test]
fn a_collector_that_is_down_does_not_fail_the_task() {
    let llm = scripted_llm();
    let mut env = TestEnv::new();
    env.write_config(&config(&llm.base_url()));
    env.ctxhost(&["init"]).ok();
    env.set_env(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        &format!("http://127.0.0.1:{}", unused_port()),
    );
    let uuid = env.submit("Read every file and report.");
    let out = env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    let row = env.row(&uuid);
    assert_eq!(row["status"], "completed", "{row}");
    assert!(row["tool_call_count"].as_i64().unwrap() > 0);
    // The task process says at its end how many of its spans were lost.
    let log = out.stderr();
    assert!(
        log.lines()
            .any(|l| l.contains("spans were not exported") && l.contains("spans_dropped=")),
        "{log}"
    );
}

/// Issue 32: a collector that accepts connections and never answers neither fails nor holds
/// up a task: the spans it never took are counted in the worker's
/// `ctxhost_otel_spans_dropped_total`, at least one per LLM call, tool call and compression of
/// the run, plus the task's own span.
#[test]
fn a_collector_that_never_answers_costs_spans_that_are_counted() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let held = Arc::new(Mutex::new(Vec::new()));
    let h = held.clone();
    std::thread::spawn(move || {
        // Accept (so a connection is made) and never read or answer.
        for stream in listener.incoming().flatten() {
            h.lock().unwrap().push(stream);
        }
    });
    let llm = scripted_llm();
    let mut env = TestEnv::new();
    env.write_config(&config(&llm.base_url()));
    env.ctxhost(&["init"]).ok();
    env.set_env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint);
    // Export early, so batches are in flight to the silent collector while the task runs.
    env.set_env("OTEL_BSP_SCHEDULE_DELAY", "50");
    env.set_env("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2");
    let worker = crate::metrics::start_worker(&env);
    let uuid = env.submit("Read every file and report.");
    let mut m = String::new();
    assert!(
        crate::support::wait_until(std::time::Duration::from_secs(90), || {
            m = crate::metrics::scrape(&worker.addr);
            crate::metrics::sample(&m, "ctxhost_tasks_finished_total{status=\"completed\"}") >= 1.0
        }),
        "the task did not complete: {m}"
    );
    let row = env.row(&uuid);
    assert_eq!(row["status"], "completed", "{row}");
    assert!(!held.lock().unwrap().is_empty(), "the exporter connected");
    let at_least = row["llm_call_count"].as_f64().unwrap()
        + row["tool_call_count"].as_f64().unwrap()
        + row["compression_count"].as_f64().unwrap()
        + 1.0;
    let dropped = crate::metrics::sample(&m, "ctxhost_otel_spans_dropped_total");
    assert!(dropped >= at_least, "{dropped} < {at_least}: {m}");
}

/// Issue 32: a strategy's side calls (plan-execute's planning and verification) are `chat`
/// spans with `ctxhost.llm.purpose=strategy`, children of the hook's `strategy` span, which
/// is a child of the task span.
#[test]
fn a_strategy_side_call_is_a_chat_span_under_its_hook() {
    use crate::strategies::{Kind, Scripted};
    let (endpoint, got) = receiver();
    let script = Scripted::default();
    let llm = script.start();
    let mut env = TestEnv::for_llm(&llm, "plugins:\n  strategy: builtin:plan-execute\n");
    env.set_env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint);
    let uuid = env.submit("What does src/main.rs print?");
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    assert_eq!(env.row(&uuid)["status"], "completed");
    let side_calls = script.count(Kind::Plan) + script.count(Kind::Verify);
    assert!(side_calls >= 2, "planning and verification calls");

    let got = got.lock().unwrap();
    let spans: Vec<&Span> = got.spans.iter().map(|(_, s)| s).collect();
    documented(&spans);
    let agent = spans
        .iter()
        .find(|s| s.name == "invoke_agent ctxhost")
        .expect("the task span");
    let hooks: HashMap<&Vec<u8>, &str> = spans
        .iter()
        .filter(|s| s.name.starts_with("strategy "))
        .map(|s| {
            assert_eq!(s.parent_span_id, agent.span_id);
            assert_eq!(
                str_attr(s, "ctxhost.strategy.component"),
                "builtin:plan-execute"
            );
            (&s.span_id, str_attr(s, "ctxhost.strategy.hook"))
        })
        .collect();
    let strategy_chats: Vec<&&Span> = spans
        .iter()
        .filter(|s| s.name.starts_with("chat ") && str_attr(s, "ctxhost.llm.purpose") == "strategy")
        .collect();
    assert_eq!(strategy_chats.len(), side_calls, "a span per side call");
    for c in &strategy_chats {
        let hook = hooks
            .get(&c.parent_span_id)
            .expect("a side call's parent is a hook's span");
        assert!(["start", "after-reply", "after-tools"].contains(hook));
        assert_eq!(str_attr(c, "gen_ai.operation.name"), "chat");
        assert!(int_attr(c, "gen_ai.usage.input_tokens") > 0);
    }
    // The planning call is made by the `start` hook.
    assert!(
        strategy_chats
            .iter()
            .any(|c| hooks[&c.parent_span_id] == "start")
    );
}

/// Issue 32: an LLM call that fails is a `chat` span with `error.type` (here the reply could
/// not be read: `malformed_reply`) and an error status, without tokens or a response model;
/// the call asked again is a span of its own that succeeded.
#[test]
fn a_failed_llm_call_is_a_chat_span_with_its_error_type() {
    use crate::support::fake_llm::{FakeLlm, Reply};
    let (endpoint, got) = receiver();
    let llm = FakeLlm::start(vec![
        Reply::raw(r#"{"choices":[]}"#),
        Reply::text("Done.", Some((10, 2))),
    ]);
    let mut env = TestEnv::for_llm_unstreamed(&llm, "");
    env.set_env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint);
    let uuid = env.submit("Say done.");
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    assert_eq!(env.row(&uuid)["status"], "completed");
    let got = got.lock().unwrap();
    let mut chats: Vec<&Span> = got
        .spans
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.name.starts_with("chat "))
        .collect();
    chats.sort_by_key(|s| s.start_time_unix_nano);
    assert_eq!(chats.len(), 2, "the failed call and the one asked again");
    let (failed, answered) = (chats[0], chats[1]);
    assert_eq!(str_attr(failed, "error.type"), "malformed_reply");
    let status = failed.status.as_ref().expect("a status");
    assert_eq!(status.code, 2, "STATUS_CODE_ERROR");
    assert!(attr(failed, "gen_ai.usage.input_tokens").is_none());
    assert!(attr(failed, "gen_ai.response.model").is_none());
    assert!(attr(answered, "error.type").is_none());
    assert_eq!(int_attr(answered, "gen_ai.usage.input_tokens"), 10);
    assert_eq!(int_attr(answered, "gen_ai.usage.output_tokens"), 2);
    assert_eq!(
        str_attr(answered, "gen_ai.response.model"),
        crate::support::fake_llm::answering_model("fake-model")
    );
}

/// Issue 32: a provider's error status is the failed `chat` span's `error.type` (the HTTP
/// status code, as the semantic conventions say for HTTP errors); the task fails.
#[test]
fn an_http_error_of_the_provider_is_the_chat_spans_error_type() {
    use crate::support::fake_llm::{FakeLlm, Reply};
    let (endpoint, got) = receiver();
    let llm = FakeLlm::start(vec![Reply::status(
        400,
        r#"{"error":{"message":"bad request","type":"invalid_request_error"}}"#,
        &[],
    )]);
    let mut env = TestEnv::for_llm(&llm, "");
    env.set_env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint);
    let uuid = env.submit("Say done.");
    // The worker says that a task failed (exit status 1).
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).fails();
    assert_eq!(env.row(&uuid)["status"], "failed");
    let got = got.lock().unwrap();
    let chats: Vec<&Span> = got
        .spans
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.name.starts_with("chat "))
        .collect();
    assert_eq!(chats.len(), 1, "one call, not retried (400)");
    assert_eq!(str_attr(chats[0], "error.type"), "400");
    assert_eq!(chats[0].status.as_ref().map(|s| s.code), Some(2));
}

/// Issue 38: a span attribute of 2 MiB (a reply, with content capture on) is cut to the
/// attribute value limit, so the collector (refusing requests over 1 MiB here, as real ones
/// refuse theirs) takes every batch: 4096 characters by default, `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`
/// when set.
#[test]
fn a_huge_attribute_is_cut_so_the_collector_takes_its_batch() {
    use crate::support::fake_llm::{FakeLlm, Reply};
    let (endpoint, got) = receiver_limited(1 << 20);
    let big = "x".repeat(2 << 20);
    let llm = FakeLlm::start(vec![
        Reply::text(big.clone(), Some((10, 2))),
        Reply::text(big, Some((10, 2))),
    ]);
    let mut env = TestEnv::for_llm_unstreamed(&llm, "");
    env.set_env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint);
    env.set_env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true");
    let mut lengths = Vec::new();
    for limit in [None, Some("1000")] {
        if let Some(l) = limit {
            env.set_env("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", l);
        }
        let uuid = env.submit("Say a lot.");
        env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
        assert_eq!(env.row(&uuid)["status"], "completed");
        let g = got.lock().unwrap();
        assert_eq!(
            g.refused,
            Vec::<usize>::new(),
            "the collector refused batches"
        );
        let mut chats: Vec<&Span> = g
            .spans
            .iter()
            .map(|(_, s)| s)
            .filter(|s| s.name.starts_with("chat "))
            .collect();
        chats.sort_by_key(|s| s.start_time_unix_nano);
        let last = chats.last().expect("a chat span");
        lengths.push(str_attr(last, "gen_ai.output.messages").chars().count());
        assert!(
            g.spans
                .iter()
                .any(|(_, s)| s.name == "invoke_agent ctxhost"),
            "the task's span was lost"
        );
    }
    assert_eq!(lengths, [4096, 1000]);
}
