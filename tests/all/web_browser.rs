//! The dashboard in a real browser (headless Chromium from the distribution, driven by
//! playwright-core from npm: `tests/browser/dashboard.mjs`).
//!
//! Runs when Chromium is installed (`/usr/bin/chromium`, or `CTXHOST_CHROMIUM`) and always in CI
//! (`CI` set: `.ci/run` installs it, and a missing browser fails the test); elsewhere it is
//! ignored, never passed. `host/build.rs` decides (cfg `ctxhost_browser_test`).
//!
//! Screenshots go to `target/browser-artifacts/` (`CTXHOST_BROWSER_SHOTS` to choose);
//! `CTXHOST_README_SHOT=PATH` also writes the README's picture.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::dashboard::Dashboard;
use crate::support::fake_llm::{FakeLlm, Reply};
use crate::support::{TestEnv, repo_root, wait_until};

const HOSTILE: &str = "<img src=x onerror=alert(1)> <script>alert('xss')</script>";

fn config(base_url: &str) -> String {
    format!(
        "context_storage:\n  base_dir: ./contexts\n  compression_threshold: 0.5\n  keep_recent_messages: 3\n  \
         summary_prompt: \"SUMMARISE-THIS\\n{{messages}}\"\n\
         llm:\n  provider: openai\n  base_url: \"{base_url}\"\n  model: fake-model\n  api_key_env: \"\"\n  \
         context_length: 1500\n  max_output_tokens: 200\n  timeout_secs: 30\n  max_retries: 1\n  max_backoff_secs: 1\n"
    )
}

fn chromium() -> PathBuf {
    std::env::var_os("CTXHOST_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"))
}

#[test]
#[cfg_attr(
    not(ctxhost_browser_test),
    ignore = "needs Chromium (apt-get install chromium) — .ci/run installs it"
)]
fn dashboard_in_chromium_shows_the_chart_and_messages_and_pauses_a_task() {
    let browser = chromium();
    assert!(
        browser.exists(),
        "{} is missing: install Debian's chromium (`apt-get install -y chromium`, as .ci/run does) or set CTXHOST_CHROMIUM",
        browser.display()
    );
    let driver = repo_root().join("node_modules/playwright-core/package.json");
    assert!(
        driver.exists(),
        "{} is missing: run `npm ci` in {} (installs playwright-core, package.json)",
        driver.display(),
        repo_root().display()
    );

    // A fake LLM: summaries for the compressor; for the loop, tool calls then a final answer
    // with hostile text (finished task); later, slow tool calls forever (running task).
    let llm = FakeLlm::start(vec![]);
    let steps = Arc::new(AtomicUsize::new(0));
    let slow = Arc::new(AtomicUsize::new(0));
    let (s, w) = (steps.clone(), slow.clone());
    llm.set_handler(move |req| {
        let summary = req.messages().iter().any(|m| {
            m["content"]
                .as_str()
                .is_some_and(|c| c.contains("SUMMARISE-THIS"))
        });
        if summary {
            return Some(Reply::text(
                "summary: the agent read files.",
                Some((300, 10)),
            ));
        }
        let i = s.fetch_add(1, Ordering::SeqCst) + 1;
        let call = Reply::read_file_step(i);
        if w.load(Ordering::SeqCst) > 0 {
            return Some(Reply::delay(Duration::from_millis(700), call));
        }
        if i > 5 {
            return Some(Reply::text(format!("All done. {HOSTILE}"), Some((400, 3))));
        }
        Some(call)
    });
    let env = TestEnv::new();
    env.write_config(&config(&llm.base_url()));
    env.ctxhost(&["init"]).ok();

    // The finished task, with compressions.
    let finished = env
        .ctxhost(&["submit", "Read every file."])
        .ok()
        .stdout()
        .trim()
        .to_string();
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    let row = env.ctxhost(&["show", &finished, "--json"]).ok().json()["task"].clone();
    assert_eq!(row["status"], "completed", "{row}");
    let compressions = row["compression_count"].as_u64().unwrap();
    // The chart draws the agent loop's calls (the compressor's summary requests are listed, not drawn).
    let log = crate::support::read_jsonl(
        &crate::support::find_task_dir(&env.contexts(), &finished)
            .unwrap()
            .join("llm_calls.jsonl"),
    );
    let calls = log.iter().filter(|l| l["type"] == "call").count() as u64;
    assert_eq!(calls, 6, "5 tool-call steps and the answer");
    assert!(compressions >= 1, "{row}");

    // The running task: a worker in the background, slow replies.
    slow.store(1, Ordering::SeqCst);
    let running = env
        .ctxhost(&["submit", "Keep reading files."])
        .ok()
        .stdout()
        .trim()
        .to_string();
    let mut worker = env
        .ctxhost_cmd(&["run", "--once", "--poll-ms", "20"])
        .spawn();
    let db = ctxhost::db::Db::open(&env.store_spec(), &env.contexts()).unwrap();
    assert!(
        wait_until(Duration::from_secs(60), || {
            db.get(&running)
                .unwrap()
                .is_some_and(|r| r.status == ctxhost::db::Status::Running && r.llm_call_count >= 1)
        }),
        "the second task did not start running"
    );

    let dash = Dashboard::start(&env, &[]);
    let shots = std::env::var_os("CTXHOST_BROWSER_SHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/browser-artifacts"));
    let opts = serde_json::json!({
        "base": dash.base,
        "finished": finished,
        "calls": calls,
        "compressions": compressions,
        "running": running,
        "shots": shots,
        "readme_shot": std::env::var("CTXHOST_README_SHOT").ok(),
    });
    let out = Command::new("node")
        .arg(repo_root().join("tests/browser/dashboard.mjs"))
        .arg(opts.to_string())
        .current_dir(repo_root())
        .env("CTXHOST_CHROMIUM", &browser)
        .output()
        .expect("run node (Node.js 18+ is needed for the browser test)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let status = worker.wait_timeout_or_kill(Duration::from_secs(60));
    assert!(
        out.status.success(),
        "browser checks failed\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}\n(screenshots in {})",
        shots.display()
    );
    let findings: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or("{}")).unwrap();
    assert_eq!(findings["ok"], true, "{findings}");
    assert_eq!(findings["chart_points"].as_u64(), Some(calls));
    assert_eq!(findings["chart_compressions"].as_u64(), Some(compressions));
    // What the browser saw is what happened: the task paused, with the reason typed in the page.
    let r = db.get(&running).unwrap().unwrap();
    assert_eq!(r.status, ctxhost::db::Status::Paused, "{r:?}");
    assert_eq!(
        r.pause_reason.as_deref(),
        Some("paused from the browser test")
    );
    let paused_dir = env.contexts().join("paused").join(&running);
    assert!(paused_dir.is_dir());
    let names: Vec<String> = std::fs::read_dir(&paused_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names.iter().any(|n| n == "request.json"),
        "paused at a safe point, no request in flight: {names:?}"
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "the worker ended cleanly after the pause"
    );
    for shot in ["tasks.png", "task-finished.png", "task-paused.png"] {
        let p = shots.join(shot);
        assert!(
            std::fs::metadata(&p).is_ok_and(|m| m.len() > 1000),
            "{} saved",
            p.display()
        );
    }
}

/// Waiting on a child with a deadline.
trait WaitTimeout {
    /// Wait up to `timeout`; kill it after that. The exit status, if it exited by itself.
    fn wait_timeout_or_kill(&mut self, timeout: Duration) -> Option<std::process::ExitStatus>;
}

impl WaitTimeout for std::process::Child {
    fn wait_timeout_or_kill(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let end = std::time::Instant::now() + timeout;
        loop {
            if let Ok(Some(s)) = self.try_wait() {
                return Some(s);
            }
            if std::time::Instant::now() >= end {
                let _ = self.kill();
                let _ = self.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
