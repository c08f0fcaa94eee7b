//! The JSON API of `ctxhost serve` (`/api/v1`) over HTTP, real binary on 127.0.0.1: bearer
//! tokens (read-write, read-only, none), RFC 9457 errors with the CLI's messages, the task list's
//! filters and keyset cursor while tasks are added, create / get / steer, history pages by seq,
//! files redacted, and the live event stream resumed with `Last-Event-ID`. The external
//! clients (schemathesis, the MCP Inspector) are in tests/all/api_clients.rs.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::TestEnv;
use crate::support::dashboard::{Dashboard, Resp, history, insert_task, write_task_dir};
use crate::support::fake_llm::{FakeLlm, Reply};
use ctxhost::db::Db;

/// The read-write token.
pub const WRITE: &str = "write-token-0123456789abcdef";
/// The read-only token.
pub const READ: &str = "read-token-0123456789abcdef";

const A: &str = "0193a4b2-1c3d-7e8f-9a0b-0000000000a1";

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// `ctxhost serve` with both tokens.
pub fn serve_with_tokens(env: &TestEnv, vars: &[(&str, &str)]) -> Dashboard {
    let mut all = vec![("CTXHOST_API_W", WRITE), ("CTXHOST_API_R", READ)];
    all.extend_from_slice(vars);
    Dashboard::start_with(
        env,
        &[
            "--token-env",
            "CTXHOST_API_W",
            "--read-token-env",
            "CTXHOST_API_R",
        ],
        &all,
    )
}

fn call(d: &Dashboard, method: &str, path: &str, token: Option<&str>, body: Option<Value>) -> Resp {
    let auth = token.map(bearer);
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("authorization", a)])
        .unwrap_or_default();
    let body = body.map(|b| b.to_string());
    d.send(method, path, &headers, body.as_deref())
}

fn json_of(r: &Resp) -> Value {
    serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", r.body))
}

/// Asserts `r` is a problem+json answer with `status` whose detail contains `text`.
#[track_caller]
fn assert_problem(r: &Resp, status: u16, text: &str) {
    assert_eq!(r.status, status, "{}", r.body);
    assert_eq!(
        r.header("content-type"),
        Some("application/problem+json"),
        "{}",
        r.body
    );
    let p = json_of(r);
    assert_eq!(p["status"], status, "{p}");
    assert_eq!(p["type"], "about:blank", "{p}");
    assert!(p["title"].is_string(), "{p}");
    let detail = p["detail"].as_str().unwrap_or_default();
    assert!(detail.contains(text), "detail {detail:?} lacks {text:?}");
}

fn env_with_tree(key_env: &str) -> (TestEnv, Db) {
    let env = TestEnv::new();
    env.write_config(&format!(
        "context_storage:\n  base_dir: ./contexts\nllm:\n  provider: openai\n  model: m\n  api_key_env: {key_env}\n"
    ));
    env.ctxhost(&["init"]).ok();
    let db = Db::open(&env.store_spec(), &env.contexts()).unwrap();
    (env, db)
}

#[test]
fn bearer_tokens_guard_the_api_and_errors_are_problems_with_the_cli_messages() {
    let (env, _db) = env_with_tree("CTXHOST_API_TEST_KEY");
    let d = serve_with_tokens(&env, &[]);
    // No token, a wrong one, a cookie: 401 with the challenge; no cookie is ever set.
    let r = call(&d, "GET", "/api/v1/tasks", None, None);
    assert_problem(&r, 401, "Authorization: Bearer");
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    assert_problem(
        &call(
            &d,
            "GET",
            "/api/v1/tasks",
            Some("nope-nope-nope-nope"),
            None,
        ),
        401,
        "not one of",
    );
    let login = d.get(&format!("/tasks?token={WRITE}"));
    let session = login
        .set_cookie("ctxhost_session")
        .expect("the dashboard's session");
    let r = d.send(
        "GET",
        "/api/v1/tasks",
        &[("cookie", &format!("ctxhost_session={session}"))],
        None,
    );
    assert_eq!(r.status, 401, "a dashboard cookie is no API credential");
    // Read-only token: reads, but writes are 403.
    let r = call(&d, "GET", "/api/v1/tasks", Some(READ), None).expect(200);
    assert!(
        r.headers
            .iter()
            .all(|(k, _)| !k.eq_ignore_ascii_case("set-cookie"))
    );
    assert_eq!(json_of(&r)["tasks"], json!([]));
    assert_problem(
        &call(
            &d,
            "POST",
            "/api/v1/tasks",
            Some(READ),
            Some(json!({"prompt": "hi"})),
        ),
        403,
        "read-only",
    );
    // Validation: the messages `ctxhost submit` gives.
    for (body, status, text) in [
        (json!({"prompt": "   "}), 400, "the prompt is empty"),
        (
            json!({"prompt": "a\u{0}b"}),
            400,
            "contains a NUL byte (at offset 1)",
        ),
        (
            json!({"prompt": "x".repeat(1024 * 1024 + 1)}),
            400,
            "over the limit of 1,048,576 bytes",
        ),
        (
            json!({"prompt": "x", "source": "github"}),
            400,
            "source github needs owner and repo",
        ),
        (
            json!({"prompt": "x", "source": "svn"}),
            400,
            "expected one of github, gitlab, local",
        ),
        (
            json!({"prompt": "x", "owner": " "}),
            400,
            "owner must not be empty",
        ),
        (
            json!({"prompt": "x", "colour": "red"}),
            400,
            "unknown field `colour`",
        ),
        (json!({"no_prompt": 1}), 400, "bad JSON body"),
    ] {
        assert_problem(
            &call(&d, "POST", "/api/v1/tasks", Some(WRITE), Some(body)),
            status,
            text,
        );
    }
    // The CLI's own message for the same prompt.
    let cli = env.ctxhost(&["submit", "--prompt", "   "]).fails();
    assert!(
        cli.stderr().contains("the prompt is empty"),
        "{}",
        cli.stderr()
    );
    // Create, get, steer.
    let r = call(
        &d,
        "POST",
        "/api/v1/tasks",
        Some(WRITE),
        Some(json!({"prompt": "Fix the bug", "source": "github", "owner": "acme", "repo": "app", "type": "issue", "id": "7", "model": "other-model"})),
    )
    .expect(201);
    let row = json_of(&r);
    let uuid = row["uuid"].as_str().unwrap().to_string();
    assert_eq!(
        r.header("location"),
        Some(format!("/api/v1/tasks/{uuid}").as_str())
    );
    assert_eq!(row["status"], "queued");
    assert_eq!(row["model"], "other-model");
    assert_eq!(row["owner"], "acme");
    let cli_row = env.row(&uuid);
    assert_eq!(cli_row["prompt"], "Fix the bug", "the task is in the store");
    let got = json_of(
        &call(
            &d,
            "GET",
            &format!("/api/v1/tasks/{uuid}"),
            Some(READ),
            None,
        )
        .expect(200),
    );
    assert_eq!(got["task"]["uuid"], uuid.as_str());
    assert_eq!(got["result"], Value::Null);
    assert_problem(
        &call(&d, "GET", &format!("/api/v1/tasks/{A}"), Some(READ), None),
        404,
        &format!("no task with UUID {A}"),
    );
    assert_problem(
        &call(&d, "GET", "/api/v1/tasks/not-a-uuid", Some(READ), None),
        404,
        "",
    );
    // pause a queued task: refused as `ctxhost pause` refuses it.
    let pause = call(
        &d,
        "POST",
        &format!("/api/v1/tasks/{uuid}/pause"),
        Some(WRITE),
        Some(json!({"reason": "later"})),
    );
    assert_problem(&pause, 409, &format!("task {uuid} is queued, not running"));
    let cli = env.ctxhost(&["pause", &uuid]).fails();
    let detail = json_of(&pause)["detail"].as_str().unwrap().to_string();
    assert!(
        cli.stderr().contains(&detail),
        "CLI: {} / API: {detail}",
        cli.stderr()
    );
    assert_problem(
        &call(
            &d,
            "POST",
            &format!("/api/v1/tasks/{uuid}/stop"),
            Some(READ),
            None,
        ),
        403,
        "read-only",
    );
    assert_problem(
        &call(
            &d,
            "POST",
            &format!("/api/v1/tasks/{uuid}/explode"),
            Some(WRITE),
            None,
        ),
        404,
        "no action",
    );
    let stop = json_of(
        &call(
            &d,
            "POST",
            &format!("/api/v1/tasks/{uuid}/stop"),
            Some(WRITE),
            None,
        )
        .expect(200),
    );
    assert_eq!(stop["outcome"], "stopped");
    assert_eq!(stop["task"]["status"], "stopped");
    assert_problem(
        &call(
            &d,
            "POST",
            &format!("/api/v1/tasks/{uuid}/stop"),
            Some(WRITE),
            None,
        ),
        409,
        &format!("task {uuid} is already stopped"),
    );
    assert_problem(
        &call(&d, "GET", "/api/v1/nothing-here", Some(READ), None),
        404,
        "no such API route",
    );
}

#[test]
fn without_tokens_the_api_is_read_only_and_answers_only_loopback_hosts() {
    let (env, db) = env_with_tree("CTXHOST_API_TEST_KEY");
    insert_task(&db, A, "Summarise", None, "m");
    let d = Dashboard::start(&env, &[]);
    let list = json_of(&call(&d, "GET", "/api/v1/tasks", None, None).expect(200));
    assert_eq!(list["tasks"][0]["uuid"], A);
    assert_problem(
        &call(
            &d,
            "POST",
            "/api/v1/tasks",
            None,
            Some(json!({"prompt": "hi"})),
        ),
        403,
        "--token-env",
    );
    assert_problem(
        &call(&d, "POST", &format!("/api/v1/tasks/{A}/stop"), None, None),
        403,
        "read-only",
    );
    assert_eq!(env.row(A)["status"], "queued", "nothing changed");
    let (status, raw) = d.raw(&format!(
        "GET /api/v1/tasks HTTP/1.1\r\nHost: evil.example:{}\r\nConnection: close\r\n\r\n",
        d.addr.rsplit(':').next().unwrap()
    ));
    assert_eq!(status, 403, "{raw}");
}

#[test]
fn the_task_list_filters_and_its_cursor_neither_repeats_nor_skips_while_tasks_are_added() {
    let (env, _db) = env_with_tree("CTXHOST_API_TEST_KEY");
    let d = serve_with_tokens(&env, &[]);
    let create = |body: Value| -> String {
        let r = call(&d, "POST", "/api/v1/tasks", Some(WRITE), Some(body)).expect(201);
        json_of(&r)["uuid"].as_str().unwrap().to_string()
    };
    let first: Vec<String> = (0..7)
        .map(|i| create(json!({"prompt": format!("task {i}")})))
        .collect();
    let gh = create(
        json!({"prompt": "issue", "source": "github", "owner": "acme", "repo": "app", "type": "issue", "id": "9"}),
    );
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut added = Vec::new();
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/v1/tasks?limit=3&cursor={}", urlencode(c)),
            None => "/api/v1/tasks?limit=3".to_string(),
        };
        let page = json_of(&call(&d, "GET", &path, Some(READ), None).expect(200));
        let tasks = page["tasks"].as_array().unwrap();
        assert!(tasks.len() <= 3);
        seen.extend(
            tasks
                .iter()
                .map(|t| t["uuid"].as_str().unwrap().to_string()),
        );
        // Tasks queued between pages come before the cursor: never on a later page.
        added.push(create(json!({"prompt": "added meanwhile"})));
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    let mut expected: Vec<String> = first.clone();
    expected.push(gh.clone());
    // Newest first, as the API orders: by created_at (milliseconds, so two tasks may share
    // one), then by UUID.
    let created = |uuid: &String| -> String {
        let r = call(
            &d,
            "GET",
            &format!("/api/v1/tasks/{uuid}"),
            Some(READ),
            None,
        )
        .expect(200);
        json_of(&r)["task"]["created_at"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let mut keyed: Vec<(String, String)> =
        expected.iter().map(|u| (created(u), u.clone())).collect();
    keyed.sort();
    keyed.reverse();
    let expected: Vec<String> = keyed.into_iter().map(|(_, u)| u).collect();
    assert_eq!(
        seen, expected,
        "every task before the first page, newest first, once each"
    );
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), seen.len());
    // Filters.
    let only = |q: &str| -> Vec<String> {
        let page =
            json_of(&call(&d, "GET", &format!("/api/v1/tasks?{q}"), Some(READ), None).expect(200));
        page["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["uuid"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(only("source=github"), vec![gh.clone()]);
    assert_eq!(
        only("owner=acme&repo=app&type=issue&id=9"),
        vec![gh.clone()]
    );
    assert_eq!(only("owner=acme&id=10"), Vec::<String>::new());
    assert_eq!(
        only("status=queued&limit=500").len(),
        first.len() + 1 + added.len()
    );
    assert_eq!(only("status=running"), Vec::<String>::new());
    assert_eq!(only("since=2999-01-01T00:00:00Z"), Vec::<String>::new());
    assert_eq!(
        only("since=2000-01-01T00:00:00%2B02:00&limit=500").len(),
        first.len() + 1 + added.len()
    );
    for (q, text) in [
        (
            "status=sleeping",
            "query parameter status=\"sleeping\": unknown variant",
        ),
        // An empty value is a value (schemathesis: an empty status violates the enum).
        ("status=", "query parameter status=\"\""),
        ("limit=-1", "query parameter limit=\"-1\""),
        ("since=yesterday", "not an RFC 3339 time"),
        ("limit=0", "limit 0: expected 1 to 500"),
        ("cursor=abc", "not one this server gave"),
    ] {
        assert_problem(
            &call(&d, "GET", &format!("/api/v1/tasks?{q}"), Some(READ), None),
            400,
            text,
        );
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn history_pages_by_seq_and_files_are_listed_and_redacted() {
    const SECRET: &str = "sk-api-test-secret-0123456789";
    let (env, db) = env_with_tree("CTXHOST_API_TEST_KEY");
    insert_task(&db, A, "Summarise", None, "m");
    write_task_dir(
        &env.contexts(),
        "running",
        A,
        &[
            (
                "messages.jsonl",
                history(25, |s| {
                    if s == 3 {
                        format!("key {SECRET} leaked")
                    } else {
                        format!("message {s}")
                    }
                }),
            ),
            ("response.json", format!("{{\"echo\": \"{SECRET}\"}}")),
        ],
    );
    let d = serve_with_tokens(&env, &[("CTXHOST_API_TEST_KEY", SECRET)]);
    let page = json_of(
        &call(
            &d,
            "GET",
            &format!("/api/v1/tasks/{A}/messages?limit=10"),
            Some(READ),
            None,
        )
        .expect(200),
    );
    let seqs: Vec<u64> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=10).collect::<Vec<_>>());
    assert_eq!(page["next_after_seq"], 10);
    assert!(!page.to_string().contains(SECRET));
    assert_eq!(page["messages"][2]["content"], "key [redacted] leaked");
    let page = json_of(
        &call(
            &d,
            "GET",
            &format!("/api/v1/tasks/{A}/messages?after_seq=20&limit=10"),
            Some(READ),
            None,
        )
        .expect(200),
    );
    let seqs: Vec<u64> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, vec![21, 22, 23, 24, 25]);
    assert_eq!(page["next_after_seq"], Value::Null);
    assert_problem(
        &call(
            &d,
            "GET",
            &format!("/api/v1/tasks/{A}/messages?limit=5000"),
            Some(READ),
            None,
        ),
        400,
        "limit 5000",
    );
    let files = json_of(
        &call(
            &d,
            "GET",
            &format!("/api/v1/tasks/{A}/files"),
            Some(READ),
            None,
        )
        .expect(200),
    );
    let names: Vec<&str> = files
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["messages.jsonl", "response.json"]);
    let r = call(
        &d,
        "GET",
        &format!("/api/v1/tasks/{A}/files/response.json"),
        Some(READ),
        None,
    )
    .expect(200);
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    assert_eq!(r.body, "{\"echo\": \"[redacted]\"}");
    for bad in ["..%2Fx", "secret.txt", "request.json"] {
        assert_problem(
            &call(
                &d,
                "GET",
                &format!("/api/v1/tasks/{A}/files/{bad}"),
                Some(READ),
                None,
            ),
            404,
            "",
        );
    }
    assert_eq!(
        json_of(
            &call(
                &d,
                "GET",
                &format!("/api/v1/tasks/{A}/compactions"),
                Some(READ),
                None
            )
            .expect(200)
        ),
        json!([])
    );
    let stats = json_of(&call(&d, "GET", "/api/v1/stats", Some(READ), None).expect(200));
    assert_eq!(stats["total"]["tasks"], 1, "{stats}");
    let doc = call(&d, "GET", "/api/v1/openapi.json", Some(READ), None).expect(200);
    let committed =
        std::fs::read_to_string(crate::support::repo_root().join("docs/openapi.json")).unwrap();
    assert_eq!(
        doc.body, committed,
        "the served document is docs/openapi.json (regenerate it from a debug build: `ctxhost serve \
         --bind 127.0.0.1:7991` in an initialised directory, then `curl -s \
         http://127.0.0.1:7991/api/v1/openapi.json > docs/openapi.json`)"
    );
}

/// One server-sent event: `(event, id, data)`.
type SseEvent = (String, String, Value);

/// Read events of `GET /api/v1/tasks/{uuid}/events` (after `last_id`) until `stop` says so or
/// the stream ends.
fn read_events(
    d: &Dashboard,
    uuid: &str,
    last_id: Option<&str>,
    mut stop: impl FnMut(&SseEvent) -> bool,
) -> Vec<SseEvent> {
    let agent = ureq::AgentBuilder::new()
        .timeout_read(Duration::from_secs(60))
        .build();
    let mut req = agent
        .get(&format!("{}/api/v1/tasks/{uuid}/events", d.base))
        .set("authorization", &bearer(READ))
        .set("accept", "text/event-stream");
    if let Some(id) = last_id {
        req = req.set("last-event-id", id);
    }
    let r = req.call().expect("the event stream");
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let mut reader = BufReader::new(r.into_reader());
    let mut out = Vec::new();
    let (mut event, mut id, mut data) = (String::new(), String::new(), String::new());
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).expect("read the stream") == 0 {
            return out;
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            if !data.is_empty() {
                let e = (
                    std::mem::take(&mut event),
                    std::mem::take(&mut id),
                    serde_json::from_str(&std::mem::take(&mut data)).expect("JSON data"),
                );
                let done = stop(&e);
                out.push(e);
                if done {
                    return out;
                }
            }
            continue;
        }
        if let Some(v) = line.strip_prefix("event:") {
            event = v.trim().to_string();
        } else if let Some(v) = line.strip_prefix("id:") {
            id = v.trim().to_string();
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.trim_start());
        }
    }
}

fn volatile(event: &str) -> bool {
    matches!(
        event,
        "reply_delta" | "reasoning_delta" | "stream_broken" | "waiting"
    )
}

#[test]
fn events_follow_a_task_from_queued_to_its_end_and_resume_after_last_event_id() {
    let llm = FakeLlm::start(vec![Reply::text(
        "First part of the work, done.",
        Some((20, 8)),
    )]);
    llm.set_stream_delay(Duration::from_millis(30));
    let env = TestEnv::for_llm(&llm, "");
    let d = serve_with_tokens(&env, &[]);
    let r = call(
        &d,
        "POST",
        "/api/v1/tasks",
        Some(WRITE),
        Some(json!({"prompt": "Say something long"})),
    )
    .expect(201);
    let uuid = json_of(&r)["uuid"].as_str().unwrap().to_string();
    // Connected while the task is queued: the `task` event says so.
    let worker = std::thread::spawn({
        let mut cmd = env.ctxhost_cmd(&["run", "--once", "--poll-ms", "20"]);
        move || {
            std::thread::sleep(Duration::from_millis(300));
            cmd.cmd.output().expect("run the worker")
        }
    });
    let first = read_events(&d, &uuid, None, |(event, _, _)| {
        event == "prompt" || event == "end"
    });
    assert_eq!(first[0].0, "task");
    assert_eq!(first[0].2["status"], "queued", "{:?}", first[0]);
    assert!(first.iter().any(|e| e.0 == "prompt"), "{first:?}");
    // Reconnect after the last event seen: the rest, to the end.
    let last = first.last().unwrap().1.clone();
    let rest = read_events(&d, &uuid, Some(&last), |_| false);
    let out = worker.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(rest.last().unwrap().0, "end", "{rest:?}");
    assert_eq!(rest.last().unwrap().2["status"], "completed");
    assert_eq!(
        rest.last().unwrap().2["answer"],
        "First part of the work, done."
    );
    let all: Vec<SseEvent> = first.into_iter().chain(rest).collect();
    // Ids increase strictly: nothing is repeated.
    let ids: Vec<(u64, u64)> = all
        .iter()
        .map(|(_, id, _)| {
            let (a, b) = id.split_once('.').expect("D.V ids");
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    // Nothing lost: the durable events are those `show --follow --json` prints now.
    let shown: Vec<Value> = env
        .ctxhost(&["show", &uuid, "--follow", "--json"])
        .ok()
        .stdout()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &Value| !volatile(v["event"].as_str().unwrap()))
        .skip(1)
        .collect();
    let streamed: Vec<Value> = all
        .iter()
        .filter(|(e, _, _)| !volatile(e))
        .skip(1)
        .map(|(e, _, v)| {
            assert_eq!(v["event"].as_str(), Some(e.as_str()));
            v.clone()
        })
        .collect();
    assert_eq!(streamed, shown);
    assert!(
        streamed.iter().any(|v| v["event"] == "reply"),
        "{streamed:?}"
    );
    // The reply's text arrived live, as deltas, before its `reply` event.
    let deltas: String = all
        .iter()
        .filter(|(e, _, _)| e == "reply_delta")
        .map(|(_, _, v)| v["text"].as_str().unwrap().to_string())
        .collect();
    // The reply's deltas, if the stream was caught in flight, are the whole reply once each
    // (a reconnect resends the deltas after the last one seen).
    assert!(
        deltas.is_empty() || deltas == "First part of the work, done.",
        "deltas {deltas:?}"
    );
    // A bad Last-Event-ID is a problem, not a stream from the start.
    let r = d.send(
        "GET",
        &format!("/api/v1/tasks/{uuid}/events"),
        &[("authorization", &bearer(READ)), ("last-event-id", "seven")],
        None,
    );
    assert_problem(&r, 400, "Last-Event-ID");
}

/// A request sent as raw bytes over its own connection (the body written on a thread of its
/// own while the answer is read, as a server may answer before it has read the whole body):
/// status, headers (lower-case names) and body of the answer.
fn send_raw(d: &Dashboard, head: &str, body: Vec<u8>) -> (u16, Vec<(String, String)>, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(&d.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).ok();
    let mut w = s.try_clone().unwrap();
    let head = head.to_string();
    let writer = std::thread::spawn(move || {
        let _ = w.write_all(head.as_bytes());
        let _ = w.write_all(&body);
    });
    let mut out = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    // Read until the answer is whole (or the server closes the connection).
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
        let text = String::from_utf8_lossy(&out);
        if let Some((h, b)) = text.split_once("\r\n\r\n") {
            let len = h
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                })
                .unwrap_or(0);
            if b.len() >= len {
                break;
            }
        }
    }
    let _ = s.shutdown(std::net::Shutdown::Both);
    let _ = writer.join();
    let text = String::from_utf8_lossy(&out).into_owned();
    let (h, b) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = h.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, b.to_string())
}

/// Every error of `/api/v1` is a problem+json answer, those axum makes itself too: a body over
/// the limit (413), a method a route does not take (405, with `Allow`), a route that does not
/// exist (404).
#[test]
fn every_api_error_is_a_problem_even_those_the_framework_makes() {
    let (env, _db) = env_with_tree("CTXHOST_API_TEST_KEY");
    let d = serve_with_tokens(&env, &[]);
    let big = format!("{{\"prompt\": \"{}\"}}", "x".repeat(3 * 1024 * 1024)).into_bytes();
    let head = format!(
        "POST /api/v1/tasks HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {WRITE}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        d.addr,
        big.len()
    );
    let (status, headers, body) = send_raw(&d, &head, big);
    assert_eq!(status, 413, "{headers:?} {body}");
    let ct = headers.iter().find(|(k, _)| k == "content-type");
    assert_eq!(
        ct.map(|(_, v)| v.as_str()),
        Some("application/problem+json"),
        "{headers:?} {body}"
    );
    let p: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(p["status"], 413, "{p}");
    assert_eq!(p["type"], "about:blank", "{p}");
    assert_eq!(p["title"], "Payload Too Large", "{p}");
    assert!(p["detail"].as_str().unwrap().contains("bytes"), "{p}");
    // Nothing was queued.
    assert_eq!(
        json_of(&call(&d, "GET", "/api/v1/tasks", Some(READ), None).expect(200))["tasks"],
        json!([])
    );
    // A method the route does not take: 405 naming the ones it does.
    let r = call(&d, "DELETE", "/api/v1/tasks", Some(WRITE), None);
    assert_problem(&r, 405, "DELETE");
    let allow = r.header("allow").unwrap_or_default().to_string();
    assert!(allow.contains("GET") && allow.contains("POST"), "{allow}");
    let detail = json_of(&r)["detail"].as_str().unwrap().to_string();
    assert!(
        detail.contains("DELETE is not allowed on /api/v1/tasks"),
        "{detail}"
    );
    let r = call(
        &d,
        "GET",
        &format!("/api/v1/tasks/{A}/pause"),
        Some(READ),
        None,
    );
    assert_problem(&r, 405, "GET is not allowed");
    assert_eq!(r.header("allow"), Some("POST"));
    // Routes that do not exist.
    for path in ["/api/v1/nothing-here", "/api/v1/tasks/a/b/c/d", "/api/v1/"] {
        assert_problem(
            &call(&d, "GET", path, Some(READ), None),
            404,
            "no such API route",
        );
    }
}

/// The API takes the token as `Authorization: Bearer` only (a `?token=` query, which the
/// dashboard accepts, is no credential there), and `serve --help` says so.
#[test]
fn the_api_takes_bearer_tokens_only_as_serve_help_says() {
    let (env, _db) = env_with_tree("CTXHOST_API_TEST_KEY");
    let d = serve_with_tokens(&env, &[]);
    let r = call(
        &d,
        "GET",
        &format!("/api/v1/tasks?token={WRITE}"),
        None,
        None,
    );
    assert_problem(&r, 401, "Authorization: Bearer");
    let help = env.ctxhost(&["serve", "--help"]).ok().stdout();
    let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(
            "the JSON API (`/api/v1`) and `/mcp` take it only as `Authorization: Bearer`"
        ),
        "{help}"
    );
}
