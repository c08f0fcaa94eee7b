//! `ctxhost mcp` (stdio) and `/mcp` on `ctxhost serve` (streamable HTTP) driven by the official
//! Rust MCP client (rmcp): the tools are listed, `submit_task` queues a task, a worker runs it
//! against the fake LLM, and `wait_for_task` returns its answer after progress notifications;
//! a task file is read as a resource; over HTTP the bearer tokens apply.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientRequest, NumberOrString,
    ProgressNotificationParam, ProgressToken, ReadResourceRequestParams, Request,
    RequestMetaObject,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::support::fake_llm::{FakeLlm, Reply};
use crate::support::{TestEnv, ctxhost_bin};

/// A client that keeps the progress notifications it gets.
#[derive(Clone, Default)]
struct Client {
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
}

impl ClientHandler for Client {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn args(v: Value) -> serde_json::Map<String, Value> {
    v.as_object().unwrap().clone()
}

/// The JSON of a tool's answer (its text), panicking on a tool error.
fn ok_json(r: &CallToolResult) -> Value {
    let text = r.content[0].as_text().expect("text content").text.clone();
    assert_ne!(r.is_error, Some(true), "tool error: {text}");
    serde_json::from_str(&text).unwrap()
}

fn error_text(r: &CallToolResult) -> String {
    assert_eq!(r.is_error, Some(true), "expected a tool error: {r:?}");
    r.content[0].as_text().unwrap().text.clone()
}

/// submit_task, then wait_for_task (with a progress token) while a worker runs the task.
async fn submit_and_wait(client: &RunningService<RoleClient, Client>, env: &TestEnv) -> Value {
    let tools = client.list_all_tools().await.unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            "get_task",
            "list_tasks",
            "pause_task",
            "resume_task",
            "stop_task",
            "submit_task",
            "wait_for_task"
        ]
    );
    // submit_task takes what `POST /api/v1/tasks` takes: the same fields, nothing else.
    let submit = tools.iter().find(|t| t.name == "submit_task").unwrap();
    let schema = Value::Object(submit.input_schema.as_ref().clone());
    let mut mcp: Vec<String> = schema["properties"]
        .as_object()
        .expect("submit_task's properties")
        .keys()
        .cloned()
        .collect();
    mcp.sort();
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(crate::support::repo_root().join("docs/openapi.json")).unwrap(),
    )
    .unwrap();
    let api_schema = &doc["components"]["schemas"]["NewTaskRequest"];
    let mut api: Vec<String> = api_schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    api.sort();
    assert_eq!(
        mcp, api,
        "submit_task's arguments are not the API's NewTaskRequest"
    );
    assert_eq!(schema["required"], api_schema["required"], "{schema}");
    assert_eq!(schema["additionalProperties"], json!(false), "{schema}");
    let submitted = client
        .call_tool(
            CallToolRequestParams::new("submit_task")
                .with_arguments(args(json!({"prompt": "What is six times seven?"}))),
        )
        .await
        .unwrap();
    let row = ok_json(&submitted);
    assert_eq!(row["status"], "queued");
    let uuid = row["uuid"].as_str().unwrap().to_string();
    // The worker starts after the wait began: the task is queued, then runs, then ends.
    let mut worker = env.ctxhost_cmd(&["run", "--once", "--poll-ms", "20"]);
    let worker = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(700));
        worker.cmd.output().expect("run the worker")
    });
    let mut params = CallToolRequestParams::new("wait_for_task")
        .with_arguments(args(json!({"uuid": uuid, "timeout_secs": 120})));
    params.meta = Some(RequestMetaObject::with_progress_token(ProgressToken(
        NumberOrString::Number(7),
    )));
    let handle = client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(Request::new(params)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    let answer = match handle.await_response().await.unwrap() {
        rmcp::model::ServerResult::CallToolResult(r) => r,
        other => panic!("not a tool result: {other:?}"),
    };
    let out = worker.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = ok_json(&answer);
    assert_eq!(done["task"]["status"], "completed", "{done}");
    assert_eq!(done["result"], "Forty-two.");
    assert_eq!(done["waiting_timed_out"], false);
    done
}

#[test]
fn the_rmcp_client_submits_a_task_over_stdio_and_waits_for_its_answer_with_progress() {
    let llm = FakeLlm::start(vec![Reply::text("Forty-two.", Some((12, 3)))]);
    let env = TestEnv::for_llm(&llm, "");
    let rt = runtime();
    rt.block_on(async {
        let mut cmd = tokio::process::Command::new(ctxhost_bin());
        cmd.arg("mcp").current_dir(env.root()).env("NO_COLOR", "1");
        let transport = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
        let client_handler = Client::default();
        let progress = client_handler.progress.clone();
        let client = client_handler.serve(transport).await.unwrap();
        let done = submit_and_wait(&client, &env).await;
        let uuid = done["task"]["uuid"].as_str().unwrap().to_string();
        let seen = progress.lock().unwrap().clone();
        assert!(
            !seen.is_empty(),
            "progress notifications while the task was queued/running"
        );
        // One token for the whole wait (the client's request handle assigns it).
        assert!(
            seen.iter()
                .all(|p| p.progress_token == seen[0].progress_token),
            "{seen:?}"
        );
        assert!(
            seen.iter().any(|p| p
                .message
                .as_deref()
                .is_some_and(|m| m.contains("queued") || m.contains("running"))),
            "{seen:?}"
        );
        // The task's files are resources.
        let listed = client.list_all_resources().await.unwrap();
        let uri = format!("ctxhost://tasks/{uuid}/files/messages.jsonl");
        assert!(listed.iter().any(|r| r.uri == uri), "{listed:?}");
        let read = client
            .read_resource(ReadResourceRequestParams::new(uri.clone()))
            .await
            .unwrap();
        let text = format!("{:?}", read.contents);
        assert!(text.contains("Forty-two."), "{text}");
        // Steering: the task ended, stop_task says so as `ctxhost stop` does.
        let stop = client
            .call_tool(
                CallToolRequestParams::new("stop_task").with_arguments(args(json!({"uuid": uuid}))),
            )
            .await
            .unwrap();
        assert!(
            error_text(&stop).contains("is already completed"),
            "{stop:?}"
        );
        let listed = client
            .call_tool(
                CallToolRequestParams::new("list_tasks")
                    .with_arguments(args(json!({"status": "completed"}))),
            )
            .await
            .unwrap();
        assert_eq!(ok_json(&listed)["tasks"][0]["uuid"], uuid.as_str());
        client.cancel().await.unwrap();
    });
}

/// One JSON-RPC exchange with `/mcp` (streamable HTTP): the answer's JSON (from the SSE
/// `data:` line or the JSON body) and the session id the server gave.
fn mcp_post(
    d: &crate::support::dashboard::Dashboard,
    token: &str,
    session: Option<&str>,
    body: Value,
) -> (u16, Option<Value>, Option<String>) {
    let auth = format!("Bearer {token}");
    let mut headers = vec![
        ("authorization", auth.as_str()),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2025-06-18"),
    ];
    if let Some(s) = session {
        headers.push(("mcp-session-id", s));
    }
    let r = d.send("POST", "/mcp", &headers, Some(&body.to_string()));
    let json = r
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .find(|l| l.starts_with('{'))
        .or(Some(r.body.trim()).filter(|b| b.starts_with('{')))
        .map(|t| serde_json::from_str(t).unwrap_or_else(|e| panic!("{e}: {}", r.body)));
    assert!(
        json.is_some() || r.status == 202,
        "no JSON-RPC answer ({}): {:?} {}",
        r.status,
        r.headers,
        r.body
    );
    (
        r.status,
        json,
        r.header("mcp-session-id").map(str::to_string),
    )
}

#[test]
fn mcp_over_http_needs_the_bearer_token_and_writes_need_the_read_write_one() {
    let llm = FakeLlm::start(vec![]);
    let env = TestEnv::for_llm(&llm, "");
    let d = crate::api::serve_with_tokens(&env, &[]);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}});
    let r = d.send(
        "POST",
        "/mcp",
        &[("accept", "application/json, text/event-stream")],
        Some(&init.to_string()),
    );
    assert_eq!(r.status, 401, "no token: {}", r.body);
    let call = |token: &str, prompt: &str| -> Value {
        let (status, answer, session) = mcp_post(&d, token, None, init.clone());
        assert_eq!(status, 200, "{answer:?}");
        assert_eq!(answer.unwrap()["result"]["serverInfo"]["name"], "ctxhost");
        let session = session.as_deref();
        let (status, _, _) = mcp_post(
            &d,
            token,
            session,
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        );
        assert!(status == 202 || status == 200, "{status}");
        let (status, answer, _) = mcp_post(
            &d,
            token,
            session,
            json!({"jsonrpc": "2.0", "id": 2,
            "method": "tools/call", "params": {"name": "submit_task", "arguments": {"prompt": prompt}}}),
        );
        assert_eq!(status, 200);
        answer.unwrap()["result"].clone()
    };
    let refused = call(crate::api::READ, "x");
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(
        refused["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("read-only"),
        "{refused}"
    );
    let queued = call(crate::api::WRITE, "Queued over HTTP");
    assert_eq!(queued["isError"], false, "{queued}");
    let row: Value = serde_json::from_str(queued["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        env.row(row["uuid"].as_str().unwrap())["prompt"],
        "Queued over HTTP"
    );
}
