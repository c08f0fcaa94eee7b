//! Issue 14's one-pass resume: `builtin:jsonl-store` counts a long history from its checkpoint
//! (store_checkpoint.json) and reads only what was appended after it, and gives the counts a
//! full read gives whatever happened to the files in between (appends by the host's repair, a
//! cut, a rewrite of the same size, a damaged checkpoint, a replaced current.jsonl).

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;

use ctxhost::runtime::{MessageStore, StoreStats};
use ctxhost_format::ChatMessage;
use ctxhost_format::checkpoint::{STORE_CHECKPOINT_EVERY, StoreCheckpoint};
use ctxhost_format::files::{CURRENT, MESSAGES, STORE_CHECKPOINT};
use tempfile::TempDir;

use crate::support::components::message_store;

const TS: &str = "2024-11-29T10:00:00Z";

fn store(task: &Path) -> MessageStore {
    message_store("builtin:jsonl-store", task)
}

/// What a full read of the files gives (no checkpoint).
fn full_read(task: &Path) -> StoreStats {
    let saved = fs::read(task.join(STORE_CHECKPOINT)).ok();
    let _ = fs::remove_file(task.join(STORE_CHECKPOINT));
    let stats = store(task).open().unwrap();
    match saved {
        Some(b) => fs::write(task.join(STORE_CHECKPOINT), b).unwrap(),
        None => {
            let _ = fs::remove_file(task.join(STORE_CHECKPOINT));
        }
    }
    stats
}

fn checkpoint(task: &Path) -> StoreCheckpoint {
    serde_json::from_slice(&fs::read(task.join(STORE_CHECKPOINT)).unwrap()).unwrap()
}

/// A task directory with `n` messages of about `size` bytes, written through the store.
fn task_with(n: usize, size: usize) -> TempDir {
    let task = tempfile::tempdir().unwrap();
    let mut s = store(task.path());
    s.open().unwrap();
    for i in 0..n {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        let text = format!("message {i} \"é\" {}", "x".repeat(size));
        s.add_message(&ChatMessage::text(role, text), TS).unwrap();
    }
    task
}

fn append(path: &Path, text: &str) {
    let mut f = OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

#[test]
fn appends_write_a_checkpoint_every_so_often_and_open_reads_only_what_follows_it() {
    let task = task_with(40, (STORE_CHECKPOINT_EVERY / 16) as usize);
    let dir = task.path();
    let cp = checkpoint(dir);
    let messages_len = fs::metadata(dir.join(MESSAGES)).unwrap().len();
    assert!(
        cp.messages.bytes > 0 && cp.messages.bytes <= messages_len,
        "{cp:?}"
    );
    assert!(cp.history_count > 1 && cp.history_count <= 40, "{cp:?}");
    // Damage a line well before the checkpoint: a full read refuses it, the checkpointed
    // open never reads it.
    let text = fs::read_to_string(dir.join(MESSAGES)).unwrap();
    let damaged = text.replacen("\"seq\":2,", "\"seq\":X,", 1);
    assert_eq!(damaged.len(), text.len());
    fs::write(dir.join(MESSAGES), &damaged).unwrap();
    let stats = store(dir).open().unwrap();
    assert_eq!(
        (stats.history_count, stats.current_count),
        (40, 40),
        "{stats:?}"
    );
    fs::write(dir.join(MESSAGES), &text).unwrap();
    assert_eq!(stats, full_read(dir));
    // The open left a checkpoint at the files' ends.
    let cp = checkpoint(dir);
    assert_eq!(cp.messages.bytes, messages_len);
    assert_eq!(
        cp.current.bytes,
        fs::metadata(dir.join(CURRENT)).unwrap().len()
    );
}

/// `record-summary` appends to messages.jsonl like `add-message` does, and the same rule
/// refreshes the checkpoint: a task that compacts often does not leave it behind.
#[test]
fn recorded_summaries_refresh_the_checkpoint_like_appended_messages() {
    let task = task_with(4, 100);
    let dir = task.path();
    let mut s = store(dir);
    // Reads the files whole (no checkpoint yet) and writes one at their ends.
    s.open().unwrap();
    let before = checkpoint(dir);
    assert_eq!(before.history_count, 4, "{before:?}");
    let size = (STORE_CHECKPOINT_EVERY / 8) as usize;
    for id in 1..=10u64 {
        let text = format!("summary {id} {}", "s".repeat(size));
        s.record_summary(&ChatMessage::text("assistant", text), id, TS)
            .unwrap();
    }
    let after = checkpoint(dir);
    // Past the threshold after the 8th summary: the checkpoint counts it.
    assert_eq!(after.history_count, 12, "{after:?}");
    assert!(after.messages.bytes > before.messages.bytes + STORE_CHECKPOINT_EVERY);
    // Summaries go to messages.jsonl only: current.jsonl's counts are as they were.
    assert_eq!(
        (after.current_count, after.current_tokens, &after.current),
        (before.current_count, before.current_tokens, &before.current)
    );
    drop(s);
    let stats = store(dir).open().unwrap();
    assert_eq!(stats.history_count, 14);
    assert_eq!(stats, full_read(dir));
}

#[test]
fn counts_equal_a_full_read_whatever_happened_to_the_files() {
    let line = |m: &ChatMessage| serde_json::to_string(m).unwrap() + "\n";
    type Change = fn(&Path, &dyn Fn(&ChatMessage) -> String);
    let changes: Vec<(&str, Change)> = vec![
        ("nothing", |_, _| {}),
        ("the host appended lines (crash repair)", |d, line| {
            append(
                &d.join(CURRENT),
                &line(&ChatMessage::text("user", "repaired")),
            );
        }),
        ("current.jsonl cut short", |d, _| {
            let t = fs::read(d.join(CURRENT)).unwrap();
            let cut = t[..t.len() - 1].iter().rposition(|b| *b == b'\n').unwrap() + 1;
            fs::write(d.join(CURRENT), &t[..cut]).unwrap();
        }),
        (
            "current.jsonl rewritten, same size, other last line",
            |d, _| {
                let t = fs::read_to_string(d.join(CURRENT)).unwrap();
                fs::write(d.join(CURRENT), t.replace("message 1 ", "mess 1 ZZ ")).unwrap();
                let t = fs::read_to_string(d.join(CURRENT)).unwrap();
                let last = t.trim_end().rsplit('\n').next().unwrap().to_string();
                let other = last.replace("message", "massage");
                fs::write(d.join(CURRENT), t.replace(&last, &other)).unwrap();
            },
        ),
        ("a damaged checkpoint", |d, _| {
            fs::write(d.join(STORE_CHECKPOINT), "{\"version\":1,\"messages\":").unwrap();
        }),
        ("a checkpoint of another version", |d, _| {
            let t = fs::read_to_string(d.join(STORE_CHECKPOINT)).unwrap();
            fs::write(
                d.join(STORE_CHECKPOINT),
                t.replace("\"version\":1", "\"version\":99"),
            )
            .unwrap();
        }),
        ("current.jsonl emptied", |d, _| {
            fs::write(d.join(CURRENT), "").unwrap();
        }),
    ];
    for (what, change) in changes {
        let task = task_with(12, 100);
        let dir = task.path();
        store(dir).open().unwrap();
        assert!(dir.join(STORE_CHECKPOINT).is_file(), "{what}");
        change(dir, &line);
        let stats = store(dir).open().unwrap();
        assert_eq!(stats, full_read(dir), "{what}");
    }
}

#[test]
fn a_replaced_context_is_counted_from_a_new_checkpoint() {
    let task = task_with(10, 50);
    let dir = task.path();
    let mut s = store(dir);
    s.open().unwrap();
    let kept: String = fs::read_to_string(dir.join(CURRENT))
        .unwrap()
        .lines()
        .skip(6)
        .map(|l| format!("{l}\n"))
        .collect();
    fs::write(dir.join("compressed.jsonl"), kept).unwrap();
    let after = s.recreate_current_context("compressed.jsonl").unwrap();
    assert_eq!(after.current_count, 4);
    assert_eq!(checkpoint(dir).current_count, 4);
    drop(s);
    assert_eq!(store(dir).open().unwrap(), after);
    assert_eq!(full_read(dir), after);
}
