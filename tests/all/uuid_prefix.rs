//! Task UUIDs shortened to a unique prefix, as git and docker take short ids, with the
//! `ctxhost` binary: every command that takes a task UUID (`show`, `pause`, `resume`, `retry`,
//! `stop`) takes a prefix of at least 4 hexadecimal digits that only one task's UUID starts
//! with (any case, with or without the UUID's hyphens); an ambiguous prefix lists the
//! matching tasks (at most 10); no match names the prefix; a prefix too short or with a
//! character that is not a hexadecimal digit (a `LIKE` wildcard, say) is refused before the
//! store is asked. All usage errors (exit 2). Resolved by one query of the task store, on
//! SQLite and on PostgreSQL (the `postgres` variants).

use crate::support::TestEnv;
use crate::support::fake_llm::FakeLlm;
use crate::support::task::TaskBuilder;

/// The commands that take a task UUID.
const COMMANDS: [&str; 5] = ["show", "pause", "resume", "retry", "stop"];

/// `abcd0000-0000-4000-8000-0000000000NN`: twelve tasks that share the prefix `abcd`.
fn abcd(n: u32) -> String {
    format!("abcd0000-0000-4000-8000-{n:012}")
}

fn env() -> (FakeLlm, TestEnv) {
    let llm = FakeLlm::start(vec![]);
    let env = TestEnv::for_llm(&llm, "");
    (llm, env)
}

#[test]
fn a_unique_prefix_names_the_task_for_show_and_the_control_commands() {
    let (_llm, env) = env();
    let tasks = TaskBuilder::new(&env.contexts());
    tasks.queued_as(&abcd(1));
    tasks.queued_as(&abcd(2));
    let one = tasks.queued_as("abce1111-2222-4333-8444-555566667777");

    // show: the shortest prefix, in capitals, with the UUID's hyphens or without them.
    for given in ["abce", "ABCE", "abce1111-22", "abce111122", &one] {
        let shown = env.ctxhost(&["show", given, "--json"]).ok().json();
        assert_eq!(shown["task"]["uuid"], one.as_str(), "{given}");
    }
    let text = env.ctxhost(&["show", "abce"]).ok().stdout();
    assert!(text.contains(&format!("uuid:          {one}")), "{text}");

    // A control command acts on the task the prefix names, and says its whole UUID.
    let paused = tasks.paused();
    let out = env.ctxhost(&["resume", &paused[..13]]).ok().stdout();
    assert!(
        out.contains(&format!("task {paused} queued again")),
        "{out}"
    );
    assert_eq!(env.row(&paused)["status"], "queued");
    let out = env.ctxhost(&["stop", "abce1"]).ok().stdout();
    assert_eq!(out.trim(), format!("task {one} stopped (it was queued)"));
    assert_eq!(env.row(&one)["status"], "stopped");
    // The prefix resolves before the state is judged: refused for what the task is (exit 1).
    let e = env.ctxhost(&["pause", "abce"]).fails();
    assert_eq!(e.code(), Some(1), "{}", e.stderr());
    assert!(
        e.stderr().contains(&format!("task {one} is stopped")),
        "{}",
        e.stderr()
    );
    // The others were not touched.
    for n in [1, 2] {
        assert_eq!(env.row(&abcd(n))["status"], "queued");
    }
}

#[test]
fn ambiguous_unknown_short_and_invalid_prefixes_are_usage_errors() {
    let (_llm, env) = env();
    let tasks = TaskBuilder::new(&env.contexts());
    for n in 1..=12 {
        tasks.queued_as(&abcd(n));
    }
    let a = tasks.queued_as("abef0000-0000-4000-8000-000000000001");
    let b = tasks.queued_as("abef0000-0000-4000-8000-000000000002");

    for cmd in COMMANDS {
        // Two matches: both listed, with their status.
        let e = env.ctxhost(&[cmd, "abef"]).fails();
        assert_eq!(e.code(), Some(2), "{cmd}: {}", e.stderr());
        let err = e.stderr();
        assert!(
            err.contains("UUID prefix abef is ambiguous: it matches 2 tasks in ")
                && err.contains("give more of the UUID")
                && err.contains(&format!("  {a}  queued"))
                && err.contains(&format!("  {b}  queued")),
            "{cmd}: {err}"
        );

        // Twelve matches: the first ten (by UUID) listed, and said to be more.
        let e = env.ctxhost(&[cmd, "ABCD0000"]).fails();
        assert_eq!(e.code(), Some(2), "{cmd}: {}", e.stderr());
        let err = e.stderr();
        assert!(
            err.contains(
                "UUID prefix abcd0000 is ambiguous: it matches more than 10 tasks (the first 10 listed)"
            ),
            "{cmd}: {err}"
        );
        for n in 1..=10 {
            assert!(err.contains(&abcd(n)), "{cmd}: {n} not listed: {err}");
        }
        for n in [11, 12] {
            assert!(!err.contains(&abcd(n)), "{cmd}: {n} listed: {err}");
        }

        // No match: the prefix named.
        let e = env.ctxhost(&[cmd, "ffff0"]).fails();
        assert_eq!(e.code(), Some(2), "{cmd}: {}", e.stderr());
        assert!(
            e.stderr().contains("no task with UUID prefix ffff0 in "),
            "{cmd}: {}",
            e.stderr()
        );

        // Too short.
        for short in ["abc", "a", ""] {
            let e = env.ctxhost(&[cmd, short]).fails();
            assert_eq!(e.code(), Some(2), "{cmd} {short:?}: {}", e.stderr());
            assert!(
                e.stderr().contains(&format!(
                    "`{short}` is too short for a task UUID prefix: give at least 4 hexadecimal digits"
                )),
                "{cmd} {short:?}: {}",
                e.stderr()
            );
        }

        // Not hexadecimal: `LIKE` wildcards and quotes never reach the store.
        for (bad, why) in [
            ("abc%", "'%' at character 4 is not a hexadecimal digit"),
            ("ab_d", "'_' at character 3 is not a hexadecimal digit"),
            ("%%%%", "'%' at character 1 is not a hexadecimal digit"),
            (
                "abcd' OR '1'='1",
                "'\\'' at character 5 is not a hexadecimal digit",
            ),
            ("abcdefgh", "'g' at character 7 is not a hexadecimal digit"),
            ("abcd-0000", "a hyphen at character 5"),
        ] {
            let e = env.ctxhost(&[cmd, bad]).fails();
            assert_eq!(e.code(), Some(2), "{cmd} {bad}: {}", e.stderr());
            assert!(
                e.stderr()
                    .contains(&format!("`{bad}` is not a task UUID or UUID prefix: {why}")),
                "{cmd} {bad}: {}",
                e.stderr()
            );
        }
    }
    // Nothing was done to any task.
    let db = tasks.db();
    for uuid in (1..=12).map(abcd).chain([a, b]) {
        let row = db.get(&uuid).unwrap().unwrap();
        assert_eq!(row.status, ctxhost::db::Status::Queued, "{uuid}");
        assert!(!row.stop_requested && !row.pause_requested, "{uuid}");
    }
}

crate::support::store::postgres_variants!(
    a_unique_prefix_names_the_task_for_show_and_the_control_commands,
    ambiguous_unknown_short_and_invalid_prefixes_are_usage_errors,
);
