//! The web dashboard over HTTP (`ctxhost serve`, real binary on 127.0.0.1): every page and
//! action (retry included), escaping of hostile content, traversal and symlinks, the bind and token policy, CSRF,
//! live events, and the chart of a real task run against the fake LLM.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::support::dashboard::{Dashboard, history, insert_task, write_task_dir};
use crate::support::fake_llm::{FakeLlm, Reply};
use crate::support::{TestEnv, find_task_dir};
use ctxhost::db::{Db, Status, UsageDelta};
use ctxhost::lifecycle::{self, Claim, Owner, Transition};

const A: &str = "0193a4b2-1c3d-7e8f-9a0b-00000000000a";
const B: &str = "0193a4b2-1c3d-7e8f-9a0b-00000000000b";
const C: &str = "0193a4b2-1c3d-7e8f-9a0b-00000000000c";
const D: &str = "0193a4b2-1c3d-7e8f-9a0b-00000000000d";

/// The hostile strings of the issue: each must come out as text.
const SCRIPT: &str = "<script>alert('xss')</script>";
const ONERROR: &str = "<img src=x onerror=alert(1)>";
const JS_LINK: &str = "<a href=\"javascript:alert(2)\">click</a>";

fn hostile() -> String {
    format!("{SCRIPT} {ONERROR} {JS_LINK} & \"quoted\"")
}

/// Asserts none of the hostile strings is in `body` as markup, and that their escaped text is.
#[track_caller]
fn assert_escaped(body: &str, what: &str) {
    assert!(
        !body.contains("<script>alert"),
        "{what}: raw <script> in\n{body}"
    );
    assert!(!body.contains("<img"), "{what}: raw <img> in\n{body}");
    assert!(
        !body.contains("href=\"javascript:"),
        "{what}: javascript: link in\n{body}"
    );
    assert_eq!(
        body.matches("<script").count(),
        1,
        "{what}: only the page's own script tag"
    );
    assert!(
        body.contains("&#60;script&#62;alert(&#39;xss&#39;)&#60;/script&#62;")
            || body.contains("&lt;script&gt;alert(&#39;xss&#39;)&lt;/script&gt;"),
        "{what}: the escaped <script> text is shown\n{body}"
    );
}

/// The worker id of the claims of [`claim`].
const WORKER: &str = "test-host:1:web";

/// A claim by `pid` on a host that is not this one, with a lease of an hour (so no recovery
/// touches it).
fn claim(pid: u32) -> Claim {
    Claim {
        pid,
        hostname: "test-host".into(),
        host_id: "test-host-id".into(),
        worker_id: WORKER.into(),
        lease: Duration::from_secs(3600),
        llm_provider: "openai".into(),
        model: "model-x".into(),
        context_length: 1000,
    }
}

/// Apply a lifecycle transition (row and directory) and check it took place.
#[track_caller]
fn apply(env: &TestEnv, db: &Db, uuid: &str, t: &Transition<'_>) {
    let layout = ctxhost::layout::Layout::new(env.contexts());
    assert!(
        lifecycle::apply(db, &layout, uuid, t).unwrap().is_some(),
        "{} of {uuid}",
        t.name()
    );
}

fn env_with_tree() -> (TestEnv, Db) {
    let env = TestEnv::new();
    env.write_config(
        "context_storage:\n  base_dir: ./contexts\nllm:\n  provider: openai\n  model: m\n  api_key_env: CTXHOST_WEB_TEST_KEY\n",
    );
    env.ctxhost(&["init"]).ok();
    let db = Db::open(&env.store_spec(), &env.contexts()).unwrap();
    (env, db)
}

/// Four tasks: A completed (with a full directory), B running, C failed (request/response
/// kept), D queued.
fn fixture() -> (TestEnv, Db) {
    let (env, db) = env_with_tree();
    insert_task(
        &db,
        A,
        &format!("Summarise the repo {}", hostile()),
        None,
        "model-a",
    );
    insert_task(&db, B, "Refactor the parser", Some("acme"), "model-b");
    insert_task(&db, C, "Fix the flaky test", None, "model-a");
    insert_task(&db, D, "Write the changelog", None, "model-b");
    for (u, pid) in [(A, 101), (B, 102), (C, 103)] {
        apply(&env, &db, u, &Transition::Claim(&claim(pid)));
    }
    let usage = |llm_calls, tool_calls, tokens, compressions| UsageDelta {
        llm_calls,
        tool_calls,
        tokens,
        compressions,
        ..UsageDelta::default()
    };
    db.add_usage(A, &usage(3, 1, 900, 1)).unwrap();
    db.add_usage(B, &usage(1, 0, 300, 0)).unwrap();
    db.add_usage(C, &usage(2, 0, 5000, 0)).unwrap();
    let finish = |pid, status, error| Transition::Finish {
        owner: Owner {
            pid,
            worker_id: WORKER,
        },
        status,
        error,
    };
    apply(&env, &db, A, &finish(101, Status::Completed, None));
    let error = format!("LLM call 2 failed: {}", hostile());
    apply(&env, &db, C, &finish(103, Status::Failed, Some(&error)));

    let calls = [
        r#"{"type":"call","n":1,"timestamp":"2026-01-01T00:00:01.000Z","context_tokens":400,"context_length":1000,"threshold_tokens":700,"request_bytes":1600,"duration_ms":120,"status":"ok","prompt_tokens":400,"completion_tokens":30,"total_tokens":430}"#,
        r#"{"type":"call","n":2,"timestamp":"2026-01-01T00:00:02.000Z","context_tokens":760,"context_length":1000,"threshold_tokens":700,"request_bytes":3000,"duration_ms":150,"status":"ok"}"#,
        r#"{"type":"compression","timestamp":"2026-01-01T00:00:03.000Z","before_tokens":790,"after_tokens":200,"summary_id":1}"#,
        r#"{"type":"call","n":3,"timestamp":"2026-01-01T00:00:04.000Z","context_tokens":260,"context_length":1000,"threshold_tokens":700,"request_bytes":1000,"duration_ms":90,"status":"ok"}"#,
    ]
    .join("\n")
        + "\n";
    let tool = serde_json::json!({"seq":1,"tool":"read_text_file","tool_call_id":"call_1",
        "args":{"path":"src/<b>main</b>.rs"},"result":format!("fn main() {{}} {}", hostile()),
        "status":"success","duration_ms":37,"timestamp":"2026-01-01T00:00:02.500Z"});
    let summary = serde_json::json!({"id":1,"start_seq":2,"end_seq":4,"summary":format!("The agent read main.rs. {}", hostile()),
        "original_tokens":600,"summary_tokens":50,"ratio":0.0833,"timestamp":"2026-01-01T00:00:03.000Z"});
    let mut messages = history(5, |seq| match seq {
        1 => "You are a careful agent.".into(),
        3 => format!("tool output {}", hostile()),
        _ => format!("message {seq}"),
    });
    messages.push_str(
        &serde_json::json!({"seq":6,"role":"assistant","content":"The agent read main.rs.","timestamp":"2026-01-01T00:00:03.000Z","tokens":12,"summary_id":1})
            .to_string(),
    );
    messages.push('\n');
    messages.push_str(
        &serde_json::json!({"seq":7,"role":"assistant","content":format!("Done. {}", hostile()),"timestamp":"2026-01-01T00:00:05.000Z","tokens":20})
            .to_string(),
    );
    messages.push('\n');
    write_task_dir(
        &env.contexts(),
        "completed",
        A,
        &[
            ("messages.jsonl", messages),
            (
                "current.jsonl",
                "{\"role\":\"system\",\"content\":\"You are a careful agent.\"}\n{\"role\":\"assistant\",\"content\":\"The agent read main.rs.\"}\n".into(),
            ),
            ("summaries.jsonl", format!("{summary}\n")),
            ("tools.jsonl", format!("{tool}\n")),
            ("tool-results/1.txt", format!("the full output {}", hostile())),
            ("llm_calls.jsonl", calls),
            (
                "planning/plan.jsonl",
                format!(
                    "{}\n{}\n",
                    serde_json::json!({"type":"plan","timestamp":"2026-01-01T00:00:01.500Z","seq":1,"step":0,
                        "hook":"start","goal":"Summarise the repo",
                        "steps":[{"id":1,"description":"read"},{"id":2,"description":hostile()}]}),
                    serde_json::json!({"type":"reflection","timestamp":"2026-01-01T00:00:04.500Z","seq":5,"step":2,
                        "hook":"after-tools","trigger":"interval","text":"went well"})
                ),
            ),
            (
                "metadata.json",
                serde_json::json!({"uuid":A,"task_key":{"task_source":"local","owner":null,"repo":null,"task_type":null,"task_id":null},
                    "created_at":"2026-01-01T00:00:00.000Z","process_id":101,"hostname":"test-host",
                    "config":{"llm_provider":"openai","model":"model-x","context_length":1000,"compression_threshold":0.7},"user":"tester"})
                    .to_string(),
            ),
        ],
    );
    write_task_dir(
        &env.contexts(),
        "running",
        B,
        &[(
            "messages.jsonl",
            history(3, |s| format!("running message {s}")),
        )],
    );
    write_task_dir(
        &env.contexts(),
        "completed",
        C,
        &[
            ("messages.jsonl", history(2, |s| format!("m{s}"))),
            ("request.json", format!("{{\"model\":\"m\",\"messages\":[{{\"role\":\"user\",\"content\":{}}}]}}", serde_json::to_string(&hostile()).unwrap())),
            ("response.json", "{\"error\":{\"message\":\"upstream said sk-live-SECRET-0123456789 is invalid <script>alert('xss')</script>\"}}".into()),
        ],
    );
    (env, db)
}

fn start(env: &TestEnv) -> Dashboard {
    Dashboard::start_with(
        env,
        &[],
        &[("CTXHOST_WEB_TEST_KEY", "sk-live-SECRET-0123456789")],
    )
}

#[test]
fn task_list_counts_filters_searches_sorts_and_pages() {
    let (env, _db) = fixture();
    let d = start(&env);
    let r = d.get("/").expect(303);
    assert_eq!(r.header("location"), Some("/tasks"));

    let r = d.get("/tasks").expect(200);
    for u in [A, B, C, D] {
        assert!(r.body.contains(&format!("data-uuid=\"{u}\"")), "{u} listed");
    }
    for (status, n) in [
        ("all", 4),
        ("queued", 1),
        ("running", 1),
        ("completed", 1),
        ("failed", 1),
        ("paused", 0),
    ] {
        assert!(
            r.body.contains(&format!(
                "data-status=\"{status}\">{status} <span class=\"count\">{n}</span>"
            )),
            "count of {status} is {n}\n{}",
            r.body
        );
    }
    assert_escaped(&r.body, "task list");
    assert!(
        r.body.contains("github acme/app issue #7"),
        "task key shown"
    );

    let rows = |path: &str| -> Vec<String> {
        let r = d.get(path).expect(200);
        r.body
            .match_indices("data-uuid=\"")
            .map(|(i, m)| r.body[i + m.len()..i + m.len() + 36].to_string())
            .collect()
    };
    assert_eq!(rows("/tasks?status=failed"), [C]);
    assert_eq!(rows("/tasks?status=running"), [B]);
    assert_eq!(rows("/tasks?q=acme%2Fapp"), [B]);
    assert_eq!(rows("/tasks?q=CHANGELOG"), [D]);
    assert_eq!(rows("/tasks?q=0000000000c"), [C]);
    assert_eq!(rows("/tasks?q=%25"), Vec::<String>::new(), "% is literal");
    assert_eq!(rows("/tasks?sort=tokens&dir=desc"), [C, A, B, D]);
    assert_eq!(rows("/tasks?sort=created&dir=asc"), [A, B, C, D]);
    assert_eq!(rows("/tasks?sort=created&dir=asc&per_page=3&page=2"), [D]);
    let r = d.get("/tasks?sort=created&dir=asc&per_page=3").expect(200);
    assert!(r.body.contains("page 1 of 2"));
    assert!(
        r.body.contains(
            "rel=\"next\" href=\"/tasks?sort=created&#38;dir=asc&#38;per_page=3&#38;page=2\""
        ),
        "{}",
        r.body
    );

    d.get("/tasks?status=bogus").expect(400);
    d.get("/tasks?sort=uuid;DROP").expect(400);
    d.get("/tasks?page=-1").expect(400);
}

#[test]
fn task_page_shows_row_chart_history_and_every_view() {
    let (env, _db) = fixture();
    let d = start(&env);
    let r = d.get(&format!("/tasks/{A}")).expect(200);
    assert_escaped(&r.body, "task page");
    assert!(r.body.contains("data-status=\"completed\""));
    assert!(
        r.body.contains("<dt>Hostname</dt>") || r.body.contains("<dt>hostname</dt>"),
        "metadata.json"
    );
    // The chart: three calls, the threshold, one compression between calls 2 and 3.
    assert!(r.body.contains("id=\"context-chart\""));
    assert!(
        r.body.contains("data-calls=\"3\" data-compressions=\"1\""),
        "{}",
        r.body
    );
    assert_eq!(r.body.matches("<circle class=\"call ok\"").count(), 3);
    assert!(r.body.contains("class=\"threshold\""));
    assert!(r.body.contains("threshold 700"));
    assert!(
        r.body
            .contains("compression after LLM call 2: 790 → 200 tokens (summary 1)")
    );
    // The history's latest page: all 7 messages, the summary line marked.
    assert_eq!(r.body.matches("class=\"message role-").count(), 7);
    assert!(r.body.contains("summary 1"));
    assert!(
        !r.body.contains("id=\"pause\""),
        "no pause for a finished task"
    );

    let view = |v: &str| d.get(&format!("/tasks/{A}?view={v}")).expect(200).body;
    let context = view("context");
    assert_eq!(context.matches("class=\"message role-").count(), 2);
    let summaries = view("summaries");
    assert!(summaries.contains("0.083 (12.0× smaller)"), "{summaries}");
    assert!(summaries.contains("600 → 50 tokens"));
    assert!(summaries.contains(&format!("/tasks/{A}?view=messages&#38;seq=2")));
    assert_escaped(&summaries, "summaries");
    let tools = view("tools");
    assert!(
        tools.contains("read_text_file") && tools.contains("37 ms") && tools.contains("success")
    );
    assert!(tools.contains(&format!("/tasks/{A}/tool-results/1")));
    assert!(
        tools.contains("src/&#60;b&#62;main&#60;/b&#62;.rs"),
        "arguments escaped\n{tools}"
    );
    assert_escaped(&tools, "tool calls");
    let calls = view("calls");
    assert!(calls.contains("400 in + 30 out = 430") && calls.contains("790 → 200"));
    let planning = view("planning");
    assert!(
        planning.contains("plan.jsonl")
            && planning.contains(">plan<")
            && planning.contains(">reflection<")
    );
    assert_escaped(&planning, "planning");

    let spilled = d.get(&format!("/tasks/{A}/tool-results/1")).expect(200);
    assert!(spilled.body.contains("the full output"));
    assert_escaped(&spilled.body, "spilled output");

    // Files of the directory, and the failed task's kept request/response.
    let meta = d
        .get(&format!("/tasks/{A}/files/metadata.json"))
        .expect(200);
    assert!(
        meta.body.contains("&#34;compression_threshold&#34;: 0.7"),
        "{}",
        meta.body
    );
    let failed = d.get(&format!("/tasks/{C}")).expect(200);
    assert!(failed.body.contains("id=\"failed-call\""));
    assert!(
        failed
            .body
            .contains(&format!("/tasks/{C}/files/request.json"))
    );
    assert!(
        failed
            .body
            .contains(&format!("/tasks/{C}/files/response.json"))
    );
    assert_escaped(&failed.body, "failed task (error message)");
    let req = d.get(&format!("/tasks/{C}/files/request.json")).expect(200);
    assert_escaped(&req.body, "request.json");
    let resp = d
        .get(&format!("/tasks/{C}/files/response.json"))
        .expect(200);
    assert!(
        !resp.body.contains("sk-live-SECRET"),
        "the API key is never shown"
    );
    assert!(resp.body.contains("upstream said [redacted] is invalid"));

    // Running and queued tasks.
    let running = d.get(&format!("/tasks/{B}")).expect(200);
    assert!(running.body.contains("id=\"pause\"") && running.body.contains("id=\"stop\""));
    assert!(running.body.contains("<body class=\"live\">"));
    assert!(
        running.body.contains("data-live=\"task-view\""),
        "the latest messages of a running task follow it"
    );
    let older = d
        .get(&format!("/tasks/{B}?view=messages&from=0"))
        .expect(200);
    assert!(
        !older.body.contains("data-live=\"task-view\""),
        "a page of older lines stays put"
    );
    assert!(
        !r.body.contains("<body class=\"live\">"),
        "a finished task is not live"
    );
    assert!(
        running.body.contains("No LLM call recorded yet")
            || running.body.contains("No per-call record")
    );
    let queued = d.get(&format!("/tasks/{D}")).expect(200);
    assert!(queued.body.contains("id=\"no-dir\""));
    assert!(queued.body.contains("id=\"stop\"") && !queued.body.contains("id=\"pause\""));

    d.get(&format!("/tasks/{A}?view=nope")).expect(400);
    d.get(&format!("/tasks/{A}?from=abc")).expect(400);
    d.get("/tasks/0193a4b2-1c3d-7e8f-9a0b-0000000000ff")
        .expect(404);
    d.get("/tasks/not-a-uuid").expect(404);
}

#[test]
fn task_page_shows_the_latest_plan_and_the_inherited_context() {
    let (mut env, _db) = fixture();
    env.expect_nonconforming(
        "the planning history is damaged on purpose to see the page name the line",
    );
    let dir = find_task_dir(&env.contexts(), B).unwrap();
    let stamp = |seq: u64, step: u32, hook: &str| serde_json::json!({"timestamp":"2026-01-01T00:00:01.000Z","seq":seq,"step":step,"hook":hook});
    let line = |kind: &str, at: serde_json::Value, body: serde_json::Value| {
        let mut v = serde_json::json!({"type": kind});
        v.as_object_mut()
            .unwrap()
            .extend(at.as_object().unwrap().clone());
        v.as_object_mut()
            .unwrap()
            .extend(body.as_object().unwrap().clone());
        v.to_string()
    };
    let steps = |s1: &str| {
        serde_json::json!([{"id":1,"description":"read the parser","status":s1},
            {"id":2,"description":format!("rewrite it {}", hostile()),"status":"pending"}])
    };
    let decision = |seq, step, hook: &str| {
        line(
            "decision",
            stamp(seq, step, hook),
            serde_json::json!({"action":"proceed","llm_calls":1,"duration_ms":2}),
        )
    };
    let history = [
        line(
            "plan",
            stamp(2, 0, "start"),
            serde_json::json!({"goal":"Refactor the parser","steps":steps("pending")}),
        ),
        line(
            "progress",
            stamp(2, 0, "start"),
            serde_json::json!({"step_id":1,"status":"in_progress"}),
        ),
        decision(2, 0, "start"),
        line(
            "progress",
            stamp(3, 1, "after-reply"),
            serde_json::json!({"step_id":1,"status":"done"}),
        ),
        line(
            "verification",
            stamp(3, 1, "after-reply"),
            serde_json::json!({"verdict":"failed","text":"not yet"}),
        ),
        decision(3, 1, "after-reply"),
        // A hook that has not returned yet: not part of the plan shown.
        line(
            "progress",
            stamp(4, 2, "after-reply"),
            serde_json::json!({"step_id":2,"status":"done"}),
        ),
    ]
    .join("\n")
        + "\n";
    std::fs::create_dir_all(dir.join("planning")).unwrap();
    std::fs::write(dir.join(format!("planning/{B}.jsonl")), history).unwrap();
    let meta = serde_json::json!({"uuid":B,"task_key":{"task_source":"local","owner":"acme","repo":null,"task_type":null,"task_id":"7"},
        "created_at":"2026-01-01T00:00:00.000Z","process_id":102,"hostname":"test-host",
        "config":{"llm_provider":"openai","model":"model-b","context_length":1000,"compression_threshold":0.7},"user":"tester",
        "inherited_from":{"uuid":A,"completed_at":"2026-01-01T00:00:06.000Z","generation":2,"tokens":412,"parts":["answer","plan"]},
        "inheritance_skipped":[{"uuid":C,"reason":format!("messages.jsonl is damaged {}", hostile())}]});
    std::fs::write(dir.join("metadata.json"), meta.to_string()).unwrap();

    let d = start(&env);
    let page = d.get(&format!("/tasks/{B}")).expect(200).body;
    assert_escaped(&page, "plan and inheritance");
    assert!(page.contains("data-live=\"task-plan\""), "{page}");
    assert!(page.contains("Goal: Refactor the parser"));
    assert!(page.contains("<li class=\"step-done\" value=\"1\" data-status=\"done\">"));
    assert!(
        page.contains("<li class=\"step-pending\" value=\"2\" data-status=\"pending\">"),
        "the uncommitted progress line is not applied"
    );
    assert!(page.contains("1 verification (last: failed)"));
    assert!(page.contains("1 lines of a hook in progress"));
    assert!(page.contains(&format!("id=\"inherited-from\" href=\"/tasks/{A}\"")));
    assert!(page.contains("generation 2 · 412 tokens · answer, plan"));
    assert!(page.contains(&format!("skipped <a href=\"/tasks/{C}\">")));

    // A task without a planning history or inheritance has neither section; a damaged
    // history is named by line.
    let plain = d.get(&format!("/tasks/{C}")).expect(200).body;
    assert!(!plain.contains("id=\"task-plan\"") && !plain.contains("id=\"inherited\""));
    std::fs::write(
        dir.join(format!("planning/{B}.jsonl")),
        "{\"type\":\"plan\"}\n",
    )
    .unwrap();
    let damaged = d.get(&format!("/tasks/{B}")).expect(200).body;
    assert!(
        damaged.contains(&format!("planning/{B}.jsonl line 1:")),
        "{damaged}"
    );
}

#[test]
fn message_history_pages_by_byte_offset_and_jumps_by_seq() {
    let (env, db) = env_with_tree();
    insert_task(&db, A, "long history", None, "m");
    let long = "é".repeat(30_000);
    let text = history(500, |seq| {
        if seq == 250 {
            long.clone()
        } else {
            format!("message number {seq}")
        }
    });
    let dir = write_task_dir(
        &env.contexts(),
        "completed",
        A,
        &[("messages.jsonl", text.clone())],
    );
    // A torn last line (no newline): shown as such, not as a message.
    std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("messages.jsonl"))
        .unwrap()
        .write_all(b"{\"seq\":501,\"role\":\"assis")
        .unwrap();
    let d = start(&env);
    let seqs = |body: &str| -> Vec<u64> {
        body.match_indices("data-seq=\"")
            .map(|(i, m)| {
                let rest = &body[i + m.len()..];
                rest[..rest.find('"').unwrap()].parse().unwrap()
            })
            .collect()
    };
    let latest = d.get(&format!("/tasks/{A}")).expect(200);
    let s = seqs(&latest.body);
    assert_eq!(
        s.first(),
        Some(&452),
        "the latest 50 lines: 452..=500 and the torn one"
    );
    assert_eq!(s.last(), Some(&500));
    assert!(latest.body.contains("being written, or torn by a crash"));
    // Earlier page via the link, then the next one comes back.
    let prev = latest
        .body
        .split("rel=\"prev\" href=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap()
        .replace("&#38;", "&");
    let earlier = d.get(&prev).expect(200);
    assert_eq!(seqs(&earlier.body), (402..=451).collect::<Vec<_>>());
    let first = d
        .get(&format!("/tasks/{A}?view=messages&from=0"))
        .expect(200);
    assert_eq!(seqs(&first.body), (1..=50).collect::<Vec<_>>());
    // Jump by seq: binary search over the file.
    let jump = d
        .get(&format!("/tasks/{A}?view=messages&seq=321"))
        .expect(200);
    assert_eq!(seqs(&jump.body).first(), Some(&321));
    // The long message is cut in the list and whole on its own page.
    let at250 = d
        .get(&format!("/tasks/{A}?view=messages&seq=250"))
        .expect(200);
    assert!(
        at250.body.contains("10000 more characters"),
        "20,000 of 30,000 shown"
    );
    let offset: usize = text.split_inclusive('\n').take(249).map(str::len).sum();
    assert!(text[offset..].contains("\"seq\":250"));
    let full = d.get(&format!("/tasks/{A}/messages/{offset}")).expect(200);
    assert!(full.body.contains(&long));
    // An offset inside a line is no message.
    d.get(&format!("/tasks/{A}/messages/{}", offset + 3))
        .expect(404);
    d.get(&format!("/tasks/{A}/messages/99999999999"))
        .expect(404);
    // Past the end or mid-line offsets snap to lines.
    let mid = d
        .get(&format!("/tasks/{A}?view=messages&from={}", offset + 5))
        .expect(200);
    assert_eq!(seqs(&mid.body).first(), Some(&251));
}

#[test]
fn traversal_encoded_slashes_and_symlinks_are_404() {
    let (env, _db) = fixture();
    let secret = env.root().join("secret.txt");
    std::fs::write(&secret, "TOP-SECRET").unwrap();
    let a = env.contexts().join("completed").join(A);
    std::os::unix::fs::symlink(&secret, a.join("task_state.json")).unwrap();
    std::os::unix::fs::symlink(&secret, a.join("tool-results/2.txt")).unwrap();
    std::os::unix::fs::symlink(&secret, a.join("planning/leak.jsonl")).unwrap();
    // A task directory that is a symlink to somewhere else.
    let elsewhere = env.root().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(
        elsewhere.join("messages.jsonl"),
        history(1, |_| "TOP-SECRET".into()),
    )
    .unwrap();
    std::os::unix::fs::symlink(&elsewhere, env.contexts().join("completed").join(D)).unwrap();
    let d = start(&env);
    for target in [
        format!("/tasks/{A}/files/..%2F..%2Ftasks.db"),
        format!("/tasks/{A}/files/%2e%2e%2f%2e%2e%2ftasks.db"),
        format!("/tasks/{A}/files/../../tasks.db"),
        format!("/tasks/{A}/files/..%5C..%5Ctasks.db"),
        format!("/tasks/{A}/files/task_state.json"),
        format!("/tasks/{A}/files/secret.txt"),
        format!("/tasks/{A}/files/tool-results%2F1.txt"),
        format!("/tasks/{A}/tool-results/2"),
        format!("/tasks/{A}/tool-results/..%2F..%2F..%2Fsecret"),
        format!("/tasks/{A}/tool-results/1.txt"),
        "/tasks/..%2F..%2Fsecret.txt".to_string(),
        "/tasks/../../secret.txt".to_string(),
        format!("/tasks/{D}/files/messages.jsonl"),
        format!("/tasks/{D}/messages/0"),
        "/static/..%2F..%2Fsecret.txt".to_string(),
        "/static/../../secret.txt".to_string(),
        "/secret.txt".to_string(),
        "/%2e%2e/secret.txt".to_string(),
    ] {
        let (status, text) = d.raw_get(&target);
        assert_eq!(status, 404, "{target}:\n{text}");
        assert!(!text.contains("TOP-SECRET"), "{target} leaked");
    }
    // The symlinked planning file is neither listed nor shown; the symlinked task directory's
    // files are not shown on its page.
    let planning = d
        .get(&format!("/tasks/{A}?view=planning&file=leak.jsonl"))
        .expect(200);
    assert!(!planning.body.contains("leak.jsonl") && !planning.body.contains("TOP-SECRET"));
    let page = d
        .get(&format!(
            "/tasks/{A}?view=planning&file=..%2F..%2F..%2Fsecret.txt"
        ))
        .expect(200);
    assert!(!page.body.contains("TOP-SECRET"));
    let dpage = d.get(&format!("/tasks/{D}")).expect(200);
    assert!(
        !dpage.body.contains("TOP-SECRET"),
        "a symlinked task directory is not read"
    );
    assert!(dpage.body.contains("id=\"no-dir\""));

    // A history that is a symbolic link is said to be one (not "missing"), and not followed.
    let _ = std::fs::remove_file(a.join("messages.jsonl"));
    std::os::unix::fs::symlink(&secret, a.join("messages.jsonl")).unwrap();
    let page = d.get(&format!("/tasks/{A}?view=messages")).expect(200);
    assert!(
        page.body
            .contains("messages.jsonl is a symbolic link; it is not followed."),
        "{}",
        page.body
    );
    assert!(!page.body.contains("TOP-SECRET"));
    // A missing one is said to be missing.
    std::fs::remove_file(a.join("messages.jsonl")).unwrap();
    let page = d.get(&format!("/tasks/{A}?view=messages")).expect(200);
    assert!(
        page.body.contains("No messages.jsonl in this task"),
        "{}",
        page.body
    );
}

#[test]
fn actions_pause_resume_stop_with_csrf() {
    let (env, db) = fixture();
    let d = start(&env);
    let page = format!("/tasks/{B}");
    let (cookie, token) = d.csrf(&page);
    let cookie_header = format!("ctxhost_csrf={cookie}");
    let h = [("Cookie", cookie_header.as_str())];

    // No token, a wrong token, a token for another cookie, a cross-origin POST: 403, nothing done.
    d.post_form(&format!("{page}/pause"), &h, &[]).expect(403);
    d.post_form(&format!("{page}/pause"), &h, &[("csrf", "00ff")])
        .expect(403);
    d.post_form(
        &format!("{page}/pause"),
        &[("Cookie", "ctxhost_csrf=0123456789abcdef0123")],
        &[("csrf", &token)],
    )
    .expect(403);
    d.post_form(&format!("{page}/pause"), &[], &[("csrf", &token)])
        .expect(403);
    let cross = [
        ("Cookie", cookie_header.as_str()),
        ("Origin", "http://evil.example"),
    ];
    d.post_form(&format!("{page}/pause"), &cross, &[("csrf", &token)])
        .expect(403);
    let fetch_site = [
        ("Cookie", cookie_header.as_str()),
        ("Sec-Fetch-Site", "cross-site"),
    ];
    d.post_form(&format!("{page}/pause"), &fetch_site, &[("csrf", &token)])
        .expect(403);
    assert!(
        !db.get(B).unwrap().unwrap().pause_requested,
        "nothing happened"
    );
    d.get(&format!("{page}/pause")).expect(405);

    // Pause a running task: asked, like `ctxhost pause`.
    let r = d
        .post_form(
            &format!("{page}/pause"),
            &h,
            &[("csrf", &token), ("reason", "lunch <b>break</b>")],
        )
        .expect(303);
    assert_eq!(
        r.header("location"),
        Some(format!("/tasks/{B}?notice=pause-requested").as_str())
    );
    let row = db.get(B).unwrap().unwrap();
    assert!(row.pause_requested);
    assert_eq!(row.pause_reason.as_deref(), Some("lunch <b>break</b>"));
    let shown = d
        .get_with(&format!("/tasks/{B}?notice=pause-requested"), &h)
        .expect(200);
    assert!(
        shown
            .body
            .contains("Pause requested: the task pauses at its next safe point")
    );
    assert!(
        shown
            .body
            .contains("pause requested: lunch &#60;b&#62;break&#60;/b&#62;")
    );
    // A second pause: 409 with the CLI's reason text... once the process honoured it, resume.
    apply(
        &env,
        &db,
        B,
        &Transition::Pause {
            owner: Owner {
                pid: 102,
                worker_id: WORKER,
            },
        },
    );
    let again = d
        .post_form(&format!("{page}/pause"), &h, &[("csrf", &token)])
        .expect(409);
    assert!(again.body.contains("already paused"));
    let r = d
        .post_form(&format!("{page}/resume"), &h, &[("csrf", &token)])
        .expect(303);
    assert!(r.header("location").unwrap().ends_with("notice=resumed"));
    assert_eq!(db.get(B).unwrap().unwrap().status, Status::Queued);
    let r = d
        .post_form(&format!("{page}/resume"), &h, &[("csrf", &token)])
        .expect(409);
    assert!(r.body.contains("already queued"));

    // Stop: a queued task at once (its directory to completed/), a running one at its next safe point.
    let r = d
        .post_form(&format!("{page}/stop"), &h, &[("csrf", &token)])
        .expect(303);
    assert!(r.header("location").unwrap().ends_with("notice=stopped"));
    assert_eq!(db.get(B).unwrap().unwrap().status, Status::Stopped);
    assert_eq!(
        find_task_dir(&env.contexts(), B),
        Some(env.contexts().join("completed").join(B))
    );
    d.post_form(&format!("{page}/stop"), &h, &[("csrf", &token)])
        .expect(409);
    apply(&env, &db, D, &Transition::Claim(&claim(104)));
    let r = d
        .post_form(&format!("/tasks/{D}/stop"), &h, &[("csrf", &token)])
        .expect(303);
    assert!(
        r.header("location")
            .unwrap()
            .ends_with("notice=stop-requested")
    );
    assert!(db.get(D).unwrap().unwrap().stop_requested);

    d.post_form(
        "/tasks/0193a4b2-1c3d-7e8f-9a0b-0000000000ff/stop",
        &h,
        &[("csrf", &token)],
    )
    .expect(404);
    d.post_form("/tasks/nope/stop", &h, &[("csrf", &token)])
        .expect(404);
}

#[test]
fn retry_a_failed_task_with_csrf_once_its_files_pass_fsck() {
    let (env, db) = fixture();
    let d = start(&env);
    let page = format!("/tasks/{C}");
    let form = format!("action=\"/tasks/{C}/retry\"");
    assert!(d.get(&page).expect(200).body.contains(&form));
    for other in [A, B, D] {
        let body = d.get(&format!("/tasks/{other}")).expect(200).body;
        assert!(
            !body.contains("/retry\""),
            "{other} is not failed: no Retry"
        );
    }
    let (cookie, token) = d.csrf(&page);
    let cookie_header = format!("ctxhost_csrf={cookie}");
    let h = [("Cookie", cookie_header.as_str())];

    // No token or a wrong one: 403, nothing done.
    d.post_form(&format!("{page}/retry"), &h, &[]).expect(403);
    d.post_form(&format!("{page}/retry"), &h, &[("csrf", "00ff")])
        .expect(403);
    d.get(&format!("{page}/retry")).expect(405);
    assert_eq!(db.get(C).unwrap().unwrap().status, Status::Failed);

    // Files that pass fsck: the system prompt and the task's message, in both files.
    let messages = [
        serde_json::json!({"seq":1,"role":"system","content":"You are a careful agent.","timestamp":"2026-01-01T00:00:01.000Z","tokens":8}),
        serde_json::json!({"seq":2,"role":"user","content":"Fix the flaky test","timestamp":"2026-01-01T00:00:02.000Z","tokens":7}),
    ];
    let current = [
        serde_json::json!({"role":"system","content":"You are a careful agent."}),
        serde_json::json!({"role":"user","content":"Fix the flaky test"}),
    ];
    let lines = |v: &[serde_json::Value]| v.iter().map(|l| format!("{l}\n")).collect::<String>();

    // C's history has a line of NUL bytes in the middle (a lost write): 409 with `ctxhost
    // retry`'s text naming the file and the fix, the task still failed where it was.
    let damaged = format!("{}\n{}\n{}\n", messages[0], "\0".repeat(40), messages[1]);
    write_task_dir(
        &env.contexts(),
        "completed",
        C,
        &[
            ("messages.jsonl", damaged),
            ("current.jsonl", lines(&current)),
        ],
    );
    let r = d
        .post_form(&format!("{page}/retry"), &h, &[("csrf", &token)])
        .expect(409);
    assert!(r.body.contains("cannot be retried"), "{}", r.body);
    assert!(r.body.contains("fsck --repair"), "{}", r.body);
    assert!(r.body.contains("messages.jsonl"), "{}", r.body);
    assert!(r.body.contains("NUL"), "{}", r.body);
    assert_eq!(db.get(C).unwrap().unwrap().status, Status::Failed);
    assert_eq!(
        find_task_dir(&env.contexts(), C),
        Some(env.contexts().join("completed").join(C))
    );

    // Repaired files: queued again, the directory in paused/ to continue from.
    write_task_dir(
        &env.contexts(),
        "completed",
        C,
        &[
            ("messages.jsonl", lines(&messages)),
            ("current.jsonl", lines(&current)),
        ],
    );
    let r = d
        .post_form(&format!("{page}/retry"), &h, &[("csrf", &token)])
        .expect(303);
    assert_eq!(
        r.header("location"),
        Some(format!("/tasks/{C}?notice=retried").as_str())
    );
    assert_eq!(db.get(C).unwrap().unwrap().status, Status::Queued);
    assert_eq!(
        find_task_dir(&env.contexts(), C),
        Some(env.contexts().join("paused").join(C))
    );
    let shown = d
        .get_with(&format!("/tasks/{C}?notice=retried"), &h)
        .expect(200);
    assert!(shown.body.contains("The failed task is queued again"));
    assert!(!shown.body.contains(&form), "a queued task offers no Retry");

    // Only a failed task: a second retry and a completed task are 409, an unknown one 404.
    let again = d
        .post_form(&format!("{page}/retry"), &h, &[("csrf", &token)])
        .expect(409);
    assert!(
        again.body.contains("only a failed task can be retried"),
        "{}",
        again.body
    );
    d.post_form(&format!("/tasks/{A}/retry"), &h, &[("csrf", &token)])
        .expect(409);
    assert_eq!(db.get(A).unwrap().unwrap().status, Status::Completed);
    d.post_form(
        "/tasks/0193a4b2-1c3d-7e8f-9a0b-0000000000ff/retry",
        &h,
        &[("csrf", &token)],
    )
    .expect(404);
}

#[test]
fn stats_page_has_the_figures_and_the_charts() {
    let (env, _db) = fixture();
    let d = start(&env);
    let r = d.get("/stats").expect(200);
    assert!(r.body.contains("4 task(s)"));
    assert!(r.body.contains("id=\"stats-table\""));
    for model in ["model-x", "model-b"] {
        assert!(
            r.body.contains(&format!("<td>{model}</td>")),
            "{model} row\n{}",
            r.body
        );
    }
    assert!(r.body.contains(
        "<td>(all)</td><td class=\"num\">4</td><td class=\"num\">1</td><td class=\"num\">1</td>"
    ));
    for chart in ["per-day-chart", "tokens-chart", "duration-chart"] {
        assert!(r.body.contains(&format!("id=\"{chart}\"")), "{chart}");
    }
    // Today's column has a segment per status present; two finished tasks in the histogram.
    assert!(r.body.contains("class=\"segment st-completed\""));
    assert!(r.body.contains("class=\"segment st-failed\""));
    assert!(r.body.contains("2 task(s) with a start and an end time"));
    assert!(r.body.contains("model-x: 6200"), "tokens by model");
    d.get("/stats?days=7").expect(200);
    d.get("/stats?days=x").expect(400);
}

#[test]
fn events_stream_a_change_when_the_database_changes() {
    let (env, db) = fixture();
    let d = start(&env);
    let mut s = TcpStream::connect(&d.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET /events HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n\r\n",
        d.addr
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let mut seen = String::new();
    let mut line = String::new();
    while !seen.contains("event: hello") {
        line.clear();
        assert!(r.read_line(&mut line).unwrap() > 0, "stream ended: {seen}");
        seen.push_str(&line);
    }
    assert!(seen.contains("content-type: text/event-stream"), "{seen}");
    insert_task(
        &db,
        "0193a4b2-1c3d-7e8f-9a0b-0000000000ee",
        "new",
        None,
        "m",
    );
    while !seen.contains("event: change") {
        line.clear();
        assert!(r.read_line(&mut line).unwrap() > 0, "stream ended: {seen}");
        seen.push_str(&line);
    }
}

#[test]
fn a_binary_file_is_shown_as_its_size_and_kind_with_a_download_link() {
    let (env, _db) = fixture();
    // 256 KiB of pseudo-random bytes (an xorshift generator), with the API key inside, as a
    // tool's spilled output; before, it was decoded as text into replacement characters.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut bytes: Vec<u8> = (0..256 * 1024)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect();
    let key = b"sk-live-SECRET-0123456789";
    bytes[1000..1000 + key.len()].copy_from_slice(key);
    let dir = find_task_dir(&env.contexts(), A).unwrap();
    std::fs::write(dir.join("tool-results/2.txt"), &bytes).unwrap();
    let d = start(&env);

    let page = d.get(&format!("/tasks/{A}/tool-results/2")).expect(200);
    assert!(page.body.contains("id=\"file-binary\""), "{}", page.body);
    assert!(!page.body.contains("id=\"file-text\""));
    assert!(!page.body.contains('\u{fffd}'), "no replacement characters");
    assert!(page.body.contains("binary data"), "{}", page.body);
    assert!(
        page.body.contains("256.0 KiB (262144 bytes)"),
        "{}",
        page.body
    );
    let link = format!("/tasks/{A}/tool-results/2?download=1");
    assert!(page.body.contains(&link), "{}", page.body);

    let (status, headers, body) = d.get_bytes(&link);
    assert_eq!(status, 200);
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(header("content-type"), Some("application/octet-stream"));
    assert_eq!(
        header("content-disposition"),
        Some("attachment; filename=\"2.txt\"")
    );
    // The same bytes, the API key redacted as everywhere in the dashboard.
    let mut expected = bytes[..1000].to_vec();
    expected.extend_from_slice(b"[redacted]");
    expected.extend_from_slice(&bytes[1000 + key.len()..]);
    assert_eq!(body.len(), expected.len());
    assert!(body == expected, "the download is the file, redacted");

    // A known format is named; a text file is still shown as text.
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend_from_slice(&bytes[..4096]);
    std::fs::write(dir.join("tool-results/3.txt"), &png).unwrap();
    let page = d.get(&format!("/tasks/{A}/tool-results/3")).expect(200);
    assert!(page.body.contains("PNG image"), "{}", page.body);
    let text = d.get(&format!("/tasks/{A}/tool-results/1")).expect(200);
    assert!(text.body.contains("id=\"file-text\"") && !text.body.contains("file-binary"));
}

#[test]
fn a_bad_summary_line_is_named_and_the_other_compactions_are_shown() {
    let (mut env, _db) = fixture();
    env.expect_nonconforming("summaries.jsonl line 2 is torn on purpose");
    let dir = env.contexts().join("completed").join(A);
    let good = |id: u64, start: u64, end: u64, text: &str| {
        serde_json::json!({"id":id,"start_seq":start,"end_seq":end,"summary":text,
            "original_tokens":600,"summary_tokens":50,"ratio":0.08,"timestamp":"2026-01-01T00:00:03.000Z"})
            .to_string()
    };
    std::fs::write(
        dir.join("summaries.jsonl"),
        format!(
            "{}\n{{\"id\": 2, torn\n{}\n",
            good(1, 2, 4, "first summary kept"),
            good(3, 2, 5, "third summary kept")
        ),
    )
    .unwrap();
    let d = start(&env);
    let page = d.get(&format!("/tasks/{A}/compactions")).expect(200).body;
    assert!(page.contains("compression 1</strong>"), "{page}");
    assert!(page.contains("first summary kept"), "{page}");
    assert!(page.contains("compression 3</strong>"), "{page}");
    assert!(page.contains("third summary kept"), "{page}");
    assert!(page.contains("id=\"unreadable\""), "{page}");
    assert!(
        page.contains("summaries.jsonl line 2: not a summary line"),
        "{page}"
    );
    // The CLI says the same: the good ones, then the bad line named.
    let shown = env.ctxhost(&["show", A, "--compactions"]).ok().stdout();
    assert!(
        shown.contains("compression 1: messages 2\u{2013}4"),
        "{shown}"
    );
    assert!(
        shown.contains("compression 3: messages 2\u{2013}5"),
        "{shown}"
    );
    assert!(
        shown.contains("unreadable: ")
            && shown.contains("summaries.jsonl line 2: not a summary line"),
        "{shown}"
    );
    let json = env.ctxhost(&["show", A, "--compactions", "--json"]).ok();
    assert_eq!(json.json().as_array().unwrap().len(), 2);
    assert!(
        json.stderr().contains("summaries.jsonl line 2"),
        "{}",
        json.stderr()
    );
}

#[test]
fn a_uuid_prefix_in_a_task_url_works_as_in_the_cli() {
    let (env, db) = fixture();
    const E: &str = "0194ffee-1c3d-7e8f-9a0b-00000000000e";
    insert_task(&db, E, "One more", None, "model-a");
    let d = start(&env);
    // A prefix only one task has: a redirect to the same page under the whole UUID, the
    // query kept; any case, with or without the hyphens.
    for (given, rest) in [
        ("0194ffee", ""),
        ("0194FFEE-1c3d", "?view=summaries"),
        ("0194ffee1c3d7e8f", "/files/metadata.json"),
        ("0194ffee", "/tool-results/1"),
        ("0194ffee", "/messages/0"),
        ("0194ffee", "/compactions"),
    ] {
        let r = d.get(&format!("/tasks/{given}{rest}")).expect(303);
        assert_eq!(
            r.header("location"),
            Some(format!("/tasks/{E}{rest}").as_str()),
            "{given}{rest}"
        );
    }
    // Followed, the task page shows that task.
    let page = d.get(&format!("/tasks/{E}")).expect(200);
    assert!(page.body.contains("One more"));
    // A prefix of several tasks names them; none, too short or not hex: 404.
    let r = d.get("/tasks/0193a4b2").expect(400);
    for u in [A, B, C, D] {
        assert!(r.body.contains(u), "{u} listed: {}", r.body);
    }
    assert!(r.body.contains("ambiguous"), "{}", r.body);
    d.get("/tasks/0193a4b2/compactions").expect(400);
    d.get("/tasks/abcd1234").expect(404);
    d.get("/tasks/abcd1234/compactions").expect(404);
    d.get("/tasks/019").expect(404);
    d.get("/tasks/0194ffgg").expect(404);
    // The whole UUID is served as before.
    d.get(&format!("/tasks/{A}")).expect(200);
}

#[test]
fn on_a_phone_tables_scroll_in_their_box_and_charts_keep_legible_labels() {
    let (env, _db) = fixture();
    let d = start(&env);
    let css = d.get("/static/style.css").expect(200).body;
    let phone = css
        .split("@media (max-width: 700px)")
        .nth(1)
        .expect("a rule for narrow screens (a 390 px phone)");
    let rule = |selector: &str| -> String {
        let at = phone
            .find(&format!("{selector} {{"))
            .unwrap_or_else(|| panic!("no {selector} rule for narrow screens:\n{phone}"));
        let body = &phone[at..];
        body[..body.find('}').unwrap()].to_string()
    };
    // A wide table scrolls sideways inside its own box instead of widening the page.
    let table = rule("table");
    assert!(
        table.contains("display: block") && table.contains("overflow-x: auto"),
        "{table}"
    );
    // The charts' viewBox is 760 wide; kept at >= 640 px the 11-unit labels are >= 9 px.
    let chart = rule("svg.chart");
    let min: f64 = chart
        .split("min-width:")
        .nth(1)
        .and_then(|v| v.split("px").next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no min-width in {chart}"));
    assert!(
        min / 760.0 * 11.0 >= 9.0,
        "labels at {:.1} px",
        min / 760.0 * 11.0
    );
    assert!(rule(".chart-box, .chart-scroll").contains("overflow-x: auto"));
    let stats = d.get("/stats").expect(200).body;
    assert!(
        stats.contains("<div class=\"chart-scroll\">\n<svg id=\"per-day-chart\""),
        "the stats charts scroll in their box"
    );
}

#[test]
fn static_assets_and_security_headers() {
    let (env, _db) = fixture();
    let d = start(&env);
    for (name, ty) in [
        ("style.css", "text/css"),
        ("app.js", "text/javascript"),
        ("favicon.svg", "image/svg+xml"),
    ] {
        let r = d.get(&format!("/static/{name}")).expect(200);
        assert!(r.header("content-type").unwrap().starts_with(ty));
    }
    d.get("/static/nope.js").expect(404);
    let r = d.get("/tasks").expect(200);
    let csp = r.header("content-security-policy").unwrap();
    assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    let cookie = r
        .headers
        .iter()
        .find(|(k, v)| k.eq_ignore_ascii_case("set-cookie") && v.starts_with("ctxhost_csrf="))
        .unwrap();
    assert!(cookie.1.contains("HttpOnly") && cookie.1.contains("SameSite=Strict"));
    let nf = d.get("/nothing/here").expect(404);
    assert!(nf.header("content-security-policy").is_some());
}

#[test]
fn dns_rebinding_is_refused_on_loopback() {
    let (env, _db) = fixture();
    let d = start(&env);
    for host in [
        "evil.example",
        "evil.example:7878",
        "127.0.0.1.evil.example",
    ] {
        let (status, _) = d.raw(&format!(
            "GET /tasks HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        ));
        assert_eq!(status, 403, "{host}");
    }
    for host in ["localhost:1234", "127.0.0.1", "[::1]:9"] {
        let (status, _) = d.raw(&format!(
            "GET /tasks HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        ));
        assert_eq!(status, 200, "{host}");
    }
}

#[test]
fn bind_policy_needs_a_token_off_loopback() {
    let (env, _db) = fixture();
    let out = env.ctxhost(&["serve", "--bind", "0.0.0.0:0"]).fails();
    assert_eq!(out.code(), Some(2));
    assert!(
        out.stderr().contains("not a loopback address"),
        "{}",
        out.stderr()
    );
    let mut cmd = env.ctxhost_cmd(&["serve", "--bind", "0.0.0.0:0", "--token-env", "WEB_TOKEN"]);
    cmd.cmd.env("WEB_TOKEN", "short");
    let out = cmd.run().fails();
    assert_eq!(out.code(), Some(2));
    assert!(out.stderr().contains("at least 16"), "{}", out.stderr());
    let out = env
        .ctxhost(&["serve", "--token-env", "WEB_TOKEN_UNSET"])
        .fails();
    assert_eq!(out.code(), Some(2));
    assert!(out.stderr().contains("not set"), "{}", out.stderr());
    let out = env.ctxhost(&["serve", "--bind", "nonsense"]).fails();
    assert_eq!(out.code(), Some(2));
    let empty = TestEnv::new();
    let out = empty.ctxhost(&["serve"]).fails();
    assert_eq!(out.code(), Some(2));
    assert!(out.stderr().contains("ctxhost init"), "{}", out.stderr());
}

#[test]
fn a_token_is_required_when_one_is_set() {
    let (env, _db) = fixture();
    let token = "a-long-enough-test-token-1234";
    let d = Dashboard::start_with(&env, &["--token-env", "WEB_TOKEN"], &[("WEB_TOKEN", token)]);
    let r = d.get("/tasks").expect(401);
    assert!(r.body.contains("Access token required"));
    assert!(!r.body.contains(A));
    d.get(&format!("/tasks/{A}/files/metadata.json"))
        .expect(401);
    d.get("/events").expect(401);
    d.get_with(
        "/tasks",
        &[("Authorization", "Bearer wrong-token-wrong-token")],
    )
    .expect(401);
    d.get_with("/tasks", &[("Authorization", &format!("Bearer {token}"))])
        .expect(200);
    // ?token= sets the session cookie and redirects to the same URL without it.
    let r = d
        .get(&format!("/tasks?status=failed&token={token}"))
        .expect(303);
    assert_eq!(r.header("location"), Some("/tasks?status=failed"));
    let session = r.set_cookie("ctxhost_session").expect("session cookie");
    assert!(!session.contains(token), "the cookie is not the token");
    let with = format!("ctxhost_session={session}");
    let list = d
        .get_with("/tasks?status=failed", &[("Cookie", &with)])
        .expect(200);
    assert!(list.body.contains(C));
    d.get_with("/tasks", &[("Cookie", "ctxhost_session=00ff00ff")])
        .expect(401);
    // The login form.
    let bad = d
        .post_form("/login", &[], &[("token", "nope"), ("next", "/stats")])
        .expect(401);
    assert!(bad.body.contains("That is not the token"));
    let ok = d
        .post_form(
            "/login",
            &[],
            &[("token", token), ("next", "//evil.example/")],
        )
        .expect(303);
    assert_eq!(ok.header("location"), Some("/tasks"), "only local paths");
    assert!(ok.set_cookie("ctxhost_session").is_some());
    // A page never shows the token.
    let page = d
        .get_with(&format!("/tasks/{A}"), &[("Cookie", &with)])
        .expect(200);
    assert!(!page.body.contains(token));
}

/// A real task (fake LLM) that crosses the compression threshold: llm_calls.jsonl records every
/// call and compression, and the page's chart shows them.
#[test]
fn a_real_task_records_its_calls_and_the_chart_shows_them() {
    let llm = FakeLlm::start(vec![]);
    let n = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = n.clone();
    llm.set_handler(move |req| {
        let is_summary = req.messages().iter().any(|m| {
            m["content"]
                .as_str()
                .is_some_and(|c| c.contains("SUMMARISE-THIS"))
        });
        if is_summary {
            return Some(Reply::text("summary: files were read.", Some((300, 10))));
        }
        let i = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        if i > 6 {
            return Some(Reply::text("All done.", Some((400, 3))));
        }
        Some(Reply::read_file_step(i))
    });
    let env = TestEnv::new();
    env.write_config(&format!(
        "context_storage:\n  base_dir: ./contexts\n  compression_threshold: 0.5\n  keep_recent_messages: 3\n  \
         summary_prompt: \"SUMMARISE-THIS\\n{{messages}}\"\n\
         llm:\n  provider: openai\n  base_url: \"{}\"\n  model: fake-model\n  api_key_env: \"\"\n  \
         context_length: 1500\n  max_output_tokens: 200\n  timeout_secs: 20\n  max_retries: 1\n  max_backoff_secs: 1\n",
        llm.base_url()
    ));
    env.ctxhost(&["init"]).ok();
    let uuid = env
        .ctxhost(&["submit", "Read every file."])
        .ok()
        .stdout()
        .trim()
        .to_string();
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    let row = env.ctxhost(&["show", &uuid, "--json"]).ok().json()["task"].clone();
    assert_eq!(row["status"], "completed");
    let compressions = row["compression_count"].as_u64().unwrap();
    assert!(compressions >= 1, "{row}");
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    let lines = crate::support::read_jsonl(&dir.join("llm_calls.jsonl"));
    let calls: Vec<_> = lines.iter().filter(|l| l["type"] == "call").collect();
    let comps: Vec<_> = lines
        .iter()
        .filter(|l| l["type"] == "compression")
        .collect();
    let summary_calls = lines.iter().filter(|l| l["type"] == "summary_call").count() as u64;
    assert_eq!(calls.len() as u64, 7, "6 tool-call steps and the answer");
    assert_eq!(
        calls.len() as u64 + summary_calls,
        row["llm_call_count"].as_u64().unwrap(),
        "every LLM call of the task is recorded"
    );
    assert!(summary_calls >= compressions);
    assert_eq!(comps.len() as u64, compressions);
    assert_eq!(
        calls
            .iter()
            .map(|c| c["n"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        (1..=7).collect::<Vec<_>>()
    );
    assert!(
        calls
            .iter()
            .all(|c| c["threshold_tokens"] == 750 && c["context_length"] == 1500)
    );
    for c in &comps {
        assert!(
            c["before_tokens"].as_u64().unwrap() > 750,
            "compressed above the threshold: {c}"
        );
        assert!(c["after_tokens"].as_u64().unwrap() < c["before_tokens"].as_u64().unwrap());
    }

    let d = Dashboard::start(&env, &[]);
    let page = d.get(&format!("/tasks/{uuid}")).expect(200);
    assert!(
        page.body.contains(&format!(
            "data-calls=\"7\" data-compressions=\"{compressions}\""
        )),
        "{}",
        page.body
    );
    assert_eq!(
        page.body.matches("<g class=\"compression\">").count() as u64,
        compressions
    );
    assert!(page.body.contains("threshold 750"));
}

/// A task with thousands of calls: the chart groups them (each vertex the peak of its group),
/// marks no compression when there are too many, and stays small.
#[test]
fn a_long_call_log_is_grouped_and_bounded() {
    let (env, db) = env_with_tree();
    insert_task(&db, A, "many calls", None, "m");
    let mut log = String::new();
    for n in 1..=5000u64 {
        log.push_str(&format!(
            "{{\"type\":\"call\",\"n\":{n},\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"context_tokens\":{},\"context_length\":100000,\"threshold_tokens\":70000,\"duration_ms\":1,\"status\":\"ok\"}}\n",
            1000 + (n % 16) * 4000
        ));
        if n % 16 == 0 {
            log.push_str("{\"type\":\"compression\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"before_tokens\":72000,\"after_tokens\":1000}\n");
        }
    }
    write_task_dir(&env.contexts(), "completed", A, &[("llm_calls.jsonl", log)]);
    let d = start(&env);
    let r = d.get(&format!("/tasks/{A}")).expect(200);
    assert!(
        r.body
            .contains("data-calls=\"5000\" data-compressions=\"312\""),
        "{}",
        r.body
    );
    assert_eq!(r.body.matches("<circle class=\"call").count(), 0);
    assert_eq!(r.body.matches("<g class=\"compression\">").count(), 0);
    assert!(r.body.contains("too many compressions to mark each"));
    assert!(
        r.body
            .contains("the largest context of 4 consecutive calls")
    );
    let points = r.body.split("class=\"series\" points=\"").nth(1).unwrap();
    let points = &points[..points.find('"').unwrap()];
    assert!(
        points.split(' ').count() <= 1500,
        "{}",
        points.split(' ').count()
    );
    assert!(r.body.len() < 200_000, "page of {} bytes", r.body.len());
    // The peaks survive grouping: the line's highest vertex is 61k (1000 + 15 × 4000), on an
    // axis of 0..80k drawn from y = 248 (0) to y = 16 (80k).
    assert!(r.body.contains("threshold 70k"));
    let top = points
        .split(' ')
        .map(|p| p.split(',').nth(1).unwrap().parse::<f64>().unwrap())
        .fold(f64::MAX, f64::min);
    let expected = 248.0 - 61_000.0 / 80_000.0 * 232.0;
    assert!(
        (top - expected).abs() < 0.2,
        "highest vertex at y={top}, expected {expected}"
    );
}

crate::support::store::postgres_variants!(
    task_list_counts_filters_searches_sorts_and_pages,
    task_page_shows_row_chart_history_and_every_view,
    task_page_shows_the_latest_plan_and_the_inherited_context,
    message_history_pages_by_byte_offset_and_jumps_by_seq,
    actions_pause_resume_stop_with_csrf,
    retry_a_failed_task_with_csrf_once_its_files_pass_fsck,
    stats_page_has_the_figures_and_the_charts,
    events_stream_a_change_when_the_database_changes,
    a_real_task_records_its_calls_and_the_chart_shows_them,
);

/// F11: when a stream breaks off and the request is sent again, the task page's growing reply
/// starts again from the retry's text and says it restarted (the broken stream's size and
/// where it is kept); nothing of the broken text stays on the page.
#[test]
fn the_growing_reply_restarts_when_a_stream_breaks_off() {
    let llm = FakeLlm::start(vec![
        Reply::stream_cut(Reply::text("Broken text that never ends", Some((5, 5))), 4),
        Reply::stream_stall(
            Reply::text("The retry is growing here.", Some((20, 9))),
            6,
            Duration::from_secs(6),
        ),
    ]);
    let env = TestEnv::for_llm(&llm, "");
    let uuid = env.submit("Answer slowly");
    let mut run = env
        .ctxhost_cmd(&["run", "--once", "--poll-ms", "20"])
        .spawn();
    let dir = env.contexts().join("running").join(&uuid);
    assert!(
        crate::support::wait_until(Duration::from_secs(30), || {
            dir.join("failed-streams/1.stream").exists()
                && std::fs::read_to_string(dir.join("reply.stream"))
                    .is_ok_and(|s| s.contains("wing"))
        }),
        "the retry never began"
    );
    let d = Dashboard::start(&env, &[]);
    let page = d.get(&format!("/tasks/{uuid}")).expect(200);
    assert!(
        page.body
            .contains("<pre class=\"content\" id=\"streaming-text\">The retry is growing</pre>"),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("id=\"streaming-restarted\">Restarted: the previous stream broke off after")
            && page.body.contains("(kept in failed-streams/1.stream)"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("Broken text"), "{}", page.body);
    assert!(run.wait().unwrap().success());
    assert_eq!(env.row(&uuid)["status"], "completed");
}

/// The task page of a running task shows the reply as far as it has streamed (issue 26), and
/// the reasoning of an assistant message (readable text shown, a redacted item only named).
#[test]
fn the_task_page_shows_a_reply_while_it_streams_and_the_reasoning_of_messages() {
    // Four characters per event: the role, then "The ", "repl", "y is", " gro", "wing"; then
    // the stream stalls 6 s before the rest.
    let llm = FakeLlm::start(vec![Reply::stream_stall(
        Reply::text("The reply is growing <b>here</b>.", Some((20, 9))),
        6,
        Duration::from_secs(6),
    )]);
    let env = TestEnv::for_llm(&llm, "");
    let uuid = env.submit("Answer slowly");
    let mut run = env
        .ctxhost_cmd(&["run", "--once", "--poll-ms", "20"])
        .spawn();
    let stream = env
        .contexts()
        .join("running")
        .join(&uuid)
        .join("reply.stream");
    assert!(
        crate::support::wait_until(Duration::from_secs(30), || std::fs::read_to_string(&stream)
            .is_ok_and(|s| s.contains("wing"))),
        "the stream never began"
    );
    let d = Dashboard::start(&env, &[]);
    let page = d.get(&format!("/tasks/{uuid}")).expect(200);
    assert!(
        page.body
            .contains("id=\"streaming-reply\" data-streaming=\"1\""),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("<pre class=\"content\" id=\"streaming-text\">The reply is growing</pre>"),
        "{}",
        page.body
    );
    assert!(run.wait().unwrap().success());
    assert_eq!(env.row(&uuid)["status"], "completed");
    // Done: the reply is a message, no longer a reply arriving.
    let page = d.get(&format!("/tasks/{uuid}")).expect(200);
    assert!(!page.body.contains("streaming-reply"), "{}", page.body);
    assert!(
        page.body
            .contains("The reply is growing &#60;b&#62;here&#60;/b&#62;."),
        "{}",
        page.body
    );

    // An assistant message with reasoning: the thinking text is shown, its signature and the
    // redacted item's data are not.
    let dir = env.contexts().join("completed").join(&uuid);
    let line = serde_json::json!({"seq": 4, "role": "assistant", "content": "Second thoughts.",
        "timestamp": "2026-01-02T03:04:05.000Z", "tokens": 5, "reasoning": [
            {"provider": "anthropic", "type": "thinking",
             "data": r#"{"type":"thinking","thinking":"Check <i>a.txt</i> first.","signature":"SIG-c2ln"}"#},
            {"provider": "anthropic", "type": "redacted_thinking",
             "data": r#"{"type":"redacted_thinking","data":"OPAQUE-xyz"}"#}]});
    let mut text = std::fs::read_to_string(dir.join("messages.jsonl")).unwrap();
    text.push_str(&format!("{line}\n"));
    std::fs::write(dir.join("messages.jsonl"), text).unwrap();
    let page = d.get(&format!("/tasks/{uuid}")).expect(200);
    assert!(
        page.body.contains(
            "<pre class=\"reasoning-text\">Check &#60;i&#62;a.txt&#60;/i&#62; first.</pre>"
        ),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("[reasoning: anthropic redacted_thinking (redacted, 10 bytes not shown)]")
    );
    assert!(!page.body.contains("SIG-c2ln") && !page.body.contains("OPAQUE-xyz"));
}
