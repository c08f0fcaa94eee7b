//! A streamed reply too large to pass whole (issue 26, WIT `reply.content-file`): the
//! request format folds its text into `reply.content`, the message store appends it with
//! `add-message-file`, and the lines are byte for byte those `add-message` writes; a process
//! killed around the append is repaired (the file is a step temporary: the call is made again,
//! or the appended reply stands).

use std::process::Stdio;

use ctxhost_format::content_file::CONTENT_FILE_THRESHOLD;
use ctxhost_format::files::REPLY_CONTENT;
use ctxhost_format::{ChatMessage, HistoryLine};

use crate::support::fake_llm::{FakeLlm, Reply};
use crate::support::{TestEnv, config_yaml, find_task_dir, read_jsonl};

/// A text a little over the threshold with every kind of character JSON escapes or a line
/// reader could trip on: quotes, backslashes, control characters, line breaks, U+2028, and
/// multi-byte characters (CJK, emoji) at every offset.
fn big_text() -> String {
    let unit = "He said \"ok\" \\ then\n\ttab\u{1}\u{2028}é漢字😀 ";
    unit.repeat(CONTENT_FILE_THRESHOLD / unit.len() + 200)
}

/// An environment streaming from `llm` (`llm.stream` on by default), initialised.
fn env_for(llm: &FakeLlm) -> TestEnv {
    env_of(llm, "openai", "")
}

/// [`env_for`] with the provider `provider` and the config's top-level `extra`.
fn env_of(llm: &FakeLlm, provider: &str, extra: &str) -> TestEnv {
    let env = TestEnv::new();
    env.write_config(&config_yaml(&llm.base_url(), provider, extra));
    env.ctxhost(&["init"]).ok();
    env
}

/// Runs the task process of `uuid` with `failpoint` on; it must die by SIGKILL.
fn exec_killed_at(env: &TestEnv, uuid: &str, failpoint: &str) {
    let mut cmd = env.ctxhost_cmd(&["task-exec", uuid]).cmd;
    cmd.env(ctxhost::failpoint::FAILPOINT_ENV, failpoint)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let status = cmd.status().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL),
        "not killed at {failpoint}"
    );
}

/// The raw last line of `file` (without its `\n`).
fn last_line(file: &std::path::Path) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    text.lines().last().unwrap().to_string()
}

/// The task of `uuid` completed with `text` as its one reply: messages.jsonl and current.jsonl
/// end with exactly the lines `add-message` of that reply writes, and `reply.content` is gone.
fn assert_appended_once(env: &TestEnv, uuid: &str, text: &str) {
    let row = env.row(uuid);
    assert_eq!(row["status"], "completed", "{row}");
    let dir = env.contexts().join("completed").join(uuid);
    assert!(
        !dir.join(REPLY_CONTENT).exists(),
        "reply.content is deleted"
    );
    let replies: Vec<_> = read_jsonl(&dir.join("messages.jsonl"))
        .into_iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    assert_eq!(replies.len(), 1, "one reply in the history");
    assert_eq!(replies[0]["content"].as_str(), Some(text));
    let current = read_jsonl(&dir.join("current.jsonl"));
    assert_eq!(current.last().unwrap()["content"].as_str(), Some(text));
    // Byte for byte what add-message writes for the same message.
    let message = ChatMessage::text("assistant", text);
    let line = last_line(&dir.join("messages.jsonl"));
    let written: HistoryLine = serde_json::from_str(&line).unwrap();
    let expected = HistoryLine::of(written.seq, &message, &written.timestamp);
    assert_eq!(
        written.tokens,
        ctxhost_format::estimate_message_tokens(&message)
    );
    assert!(
        line == ctxhost_format::jsonl::to_line(&expected).unwrap(),
        "messages.jsonl's line differs from add-message's"
    );
    assert!(
        last_line(&dir.join("current.jsonl")) == ctxhost_format::jsonl::to_line(&message).unwrap(),
        "current.jsonl's line differs from add-message's"
    );
}

#[test]
fn a_streamed_reply_over_the_threshold_lands_byte_identical_through_its_file() {
    let text = big_text();
    assert!(text.len() > CONTENT_FILE_THRESHOLD);
    let llm = FakeLlm::start(vec![Reply::text(text.clone(), Some((10, 5)))]);
    let env = env_for(&llm);
    let uuid = env.submit("Write a lot");
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    assert_eq!(llm.requests()[0].body["stream"], true);
    assert_appended_once(&env, &uuid, &text);
    // The task's report shows the answer (its start at least).
    let shown = env.ctxhost(&["show", &uuid, "--json"]).ok().json();
    let result = shown.to_string();
    assert!(
        result.contains("He said"),
        "{}",
        &result[..result.len().min(400)]
    );
}

#[test]
fn a_process_killed_before_the_reply_file_is_appended_makes_the_call_again() {
    let text = big_text();
    let llm = FakeLlm::start(vec![
        Reply::text(text.clone(), Some((10, 5))),
        Reply::text(text.clone(), Some((10, 5))),
    ]);
    let env = env_for(&llm);
    let uuid = env.submit("Write a lot");
    exec_killed_at(&env, &uuid, "agent:reply-read");
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    assert_eq!(
        std::fs::metadata(dir.join(REPLY_CONTENT)).unwrap().len(),
        text.len() as u64,
        "the fold wrote the text to its file"
    );
    assert!(
        read_jsonl(&dir.join("messages.jsonl"))
            .iter()
            .all(|m| m["role"] != "assistant"),
        "nothing appended yet"
    );
    env.ctxhost(&["recover", "--json"]).ok();
    env.ctxhost(&["task-exec", &uuid]).ok();
    assert_eq!(llm.request_count(), 2, "the call is made again");
    assert_appended_once(&env, &uuid, &text);
}

#[test]
fn a_process_killed_after_the_reply_file_is_appended_keeps_the_reply_once() {
    let text = big_text();
    let llm = FakeLlm::start(vec![Reply::text(text.clone(), Some((10, 5)))]);
    let env = env_for(&llm);
    let uuid = env.submit("Write a lot");
    exec_killed_at(&env, &uuid, "agent:reply-appended");
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    assert!(dir.join(REPLY_CONTENT).exists(), "killed before the delete");
    env.ctxhost(&["recover", "--json"]).ok();
    env.ctxhost(&["task-exec", &uuid]).ok();
    assert_eq!(llm.request_count(), 1, "the appended reply stands");
    assert_appended_once(&env, &uuid, &text);
}

/// The big reply through `provider`'s streamed reply and builtin format: the fold writes it to
/// reply.content (seen by a process killed before the append), and the task run again appends
/// it byte-identical.
fn lands_byte_identical_with(provider: &str, extra: &str) {
    let text = big_text();
    let llm = FakeLlm::start(vec![
        Reply::text(text.clone(), Some((10, 5))),
        Reply::text(text.clone(), Some((10, 5))),
    ]);
    let env = env_of(&llm, provider, extra);
    let uuid = env.submit("Write a lot");
    exec_killed_at(&env, &uuid, "agent:reply-read");
    assert_eq!(llm.requests()[0].body["stream"], true);
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join(REPLY_CONTENT)).unwrap(),
        text,
        "{provider}: the fold wrote the text to its file"
    );
    env.ctxhost(&["recover", "--json"]).ok();
    env.ctxhost(&["task-exec", &uuid]).ok();
    assert_appended_once(&env, &uuid, &text);
}

#[test]
fn a_streamed_ollama_reply_over_the_threshold_lands_byte_identical() {
    lands_byte_identical_with("ollama", "");
}

#[test]
fn a_streamed_anthropic_reply_over_the_threshold_lands_byte_identical() {
    lands_byte_identical_with("anthropic", "");
}

#[test]
fn a_streamed_responses_reply_over_the_threshold_lands_byte_identical() {
    lands_byte_identical_with(
        "openai",
        "plugins:\n  request_format: builtin:openai-responses\n",
    );
}
