//! Edge cases of `builtin:jsonl-store` that the `plugin check` conformance suite does not
//! cover: damaged files at `open` (named by file and line), gaps in `seq`, blank and CRLF
//! lines, calls before `open`, bad roles, and `recreate-current-context` failures that must
//! leave current.jsonl untouched and no temporary file behind.

use std::fs;
use std::path::Path;

use ctxhost::runtime::{MessageStore, PluginError, RuntimeError, StoreStats};
use ctxhost_format::{ChatMessage, HistoryLine, ToolCall, estimate_message_tokens};

use crate::support::components::message_store;

const TS: &str = "2024-11-29T10:00:00Z";

fn store(task: &Path) -> MessageStore {
    message_store("builtin:jsonl-store", task)
}

fn plugin_error<T: std::fmt::Debug>(r: Result<T, RuntimeError>) -> PluginError {
    match r {
        Err(RuntimeError::Plugin { error, .. }) => error,
        other => panic!("expected a plugin error, got {other:?}"),
    }
}

fn history(seq: u64, content: &str) -> String {
    let line = HistoryLine {
        seq,
        role: "user".into(),
        content: Some(content.into()),
        timestamp: TS.into(),
        tokens: 1,
        tool_name: None,
        tool_calls: None,
        tool_call_id: None,
        is_error: false,
        reasoning: Vec::new(),
        summary_id: None,
    };
    serde_json::to_string(&line).unwrap()
}

#[test]
fn open_names_file_and_line_of_a_damaged_line() {
    let task = tempfile::tempdir().unwrap();
    let dir = task.path();
    fs::write(
        dir.join("messages.jsonl"),
        format!("{}\n{}\n", history(1, "a"), history(2, "b")),
    )
    .unwrap();
    fs::write(
        dir.join("current.jsonl"),
        "{\"role\":\"user\",\"content\":\"a\"}\n\n{\"role\":\"user\",\"cont",
    )
    .unwrap();
    let err = plugin_error(store(dir).open());
    let PluginError::InvalidInput(text) = &err else {
        panic!("{err:?}")
    };
    assert!(
        text.starts_with("current.jsonl line 3: not valid:"),
        "{text}"
    );

    fs::write(
        dir.join("current.jsonl"),
        "{\"role\":\"robot\",\"content\":\"a\"}\n",
    )
    .unwrap();
    let err = plugin_error(store(dir).open());
    assert_eq!(
        err,
        PluginError::InvalidInput(
            "current.jsonl line 1: role `robot` is not one of system, user, assistant, tool".into()
        )
    );

    fs::write(dir.join("current.jsonl"), "").unwrap();
    fs::write(
        dir.join("messages.jsonl"),
        format!("{}\n{}\n", history(1, "a"), history(3, "c")),
    )
    .unwrap();
    let err = plugin_error(store(dir).open());
    assert_eq!(
        err,
        PluginError::InvalidInput(
            "messages.jsonl line 2: seq 3 where 2 was expected (seq runs from 1 without gaps)"
                .into()
        )
    );
}

#[test]
fn open_skips_blank_lines_and_reads_crlf_and_an_unterminated_last_line() {
    let task = tempfile::tempdir().unwrap();
    let dir = task.path();
    let a = ChatMessage::text("system", "sys");
    let b = ChatMessage::text("user", "上下文 and \"quotes\"");
    let current = format!(
        "{}\r\n\n   \n{}",
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
    fs::write(dir.join("current.jsonl"), current).unwrap();
    fs::write(
        dir.join("messages.jsonl"),
        format!("{}\n\n{}\r\n", history(1, "x"), history(2, "y")),
    )
    .unwrap();
    let stats = store(dir).open().unwrap();
    let tokens = estimate_message_tokens(&a) + estimate_message_tokens(&b);
    assert_eq!(
        stats,
        StoreStats {
            history_count: 2,
            current_count: 2,
            current_tokens: tokens
        }
    );
}

#[test]
fn calls_before_open_and_bad_arguments_are_refused() {
    let task = tempfile::tempdir().unwrap();
    let mut s = store(task.path());
    let err = plugin_error(s.add_message(&ChatMessage::text("user", "hi"), TS));
    assert_eq!(
        err,
        PluginError::Internal("add-message called before open".into())
    );
    s.open().unwrap();
    let err = plugin_error(s.add_message(&ChatMessage::text("robot", "hi"), TS));
    assert_eq!(
        err,
        PluginError::InvalidInput(
            "add-message: role `robot` is not one of system, user, assistant, tool".into()
        )
    );
    let err = plugin_error(s.record_summary(&ChatMessage::text("assistant", "sum"), 0, TS));
    assert_eq!(
        err,
        PluginError::InvalidInput("record-summary: summary-id 0 (summary ids count from 1)".into())
    );
    for source in ["current.jsonl", "messages.jsonl", "current.jsonl.tmp", ""] {
        let err = plugin_error(s.recreate_current_context(source));
        assert!(
            matches!(&err, PluginError::InvalidInput(t) if t.contains("cannot be used")),
            "{source}: {err:?}"
        );
    }
    assert!(
        !task.path().join("messages.jsonl").exists(),
        "a refused call wrote the history"
    );
    assert_eq!(s.count_messages().unwrap(), 0);
}

#[test]
fn a_failed_recreate_leaves_current_unchanged_and_no_temporary() {
    let task = tempfile::tempdir().unwrap();
    let dir = task.path();
    let mut s = store(dir);
    s.open().unwrap();
    let call = ChatMessage {
        role: "assistant".into(),
        content: None,
        tool_calls: Some(vec![ToolCall::new(
            "call_1",
            "read_text_file",
            "{\"path\":\"a\"}",
        )]),
        ..Default::default()
    };
    for m in [
        ChatMessage::text("system", "sys"),
        ChatMessage::text("user", "go"),
        call,
    ] {
        s.add_message(&m, TS).unwrap();
    }
    let before = fs::read(dir.join("current.jsonl")).unwrap();
    let tokens = s.current_token_count().unwrap();

    fs::write(
        dir.join("new.jsonl"),
        "{\"role\":\"system\",\"content\":\"s\"}\n{\"oops\":1}\n",
    )
    .unwrap();
    let err = plugin_error(s.recreate_current_context("new.jsonl"));
    assert!(
        matches!(&err, PluginError::InvalidInput(t) if t.starts_with("new.jsonl line 2: not valid:")),
        "{err:?}"
    );
    let err = plugin_error(s.recreate_current_context("missing.jsonl"));
    assert!(
        matches!(&err, PluginError::Io(t) if t.starts_with("opening missing.jsonl:")),
        "{err:?}"
    );

    assert_eq!(
        fs::read(dir.join("current.jsonl")).unwrap(),
        before,
        "current.jsonl changed"
    );
    assert!(
        !dir.join("current.jsonl.tmp").exists(),
        "temporary file left behind"
    );
    assert!(
        dir.join("new.jsonl").exists(),
        "the source of a failed recreate must be kept"
    );
    assert_eq!(s.current_token_count().unwrap(), tokens);

    // The store still works, seq carries on, and blank source lines are dropped.
    fs::write(
        dir.join("new.jsonl"),
        "\n{\"role\":\"system\",\"content\":\"s\"}\n\n",
    )
    .unwrap();
    let stats = s.recreate_current_context("new.jsonl").unwrap();
    assert_eq!((stats.history_count, stats.current_count), (3, 1));
    assert_eq!(
        fs::read_to_string(dir.join("current.jsonl")).unwrap(),
        "{\"role\":\"system\",\"content\":\"s\"}\n"
    );
    assert_eq!(
        s.add_message(&ChatMessage::text("user", "next"), TS)
            .unwrap()
            .seq,
        4
    );
}
