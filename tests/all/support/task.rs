//! [`TaskBuilder`]: a task in a contexts tree, put in the state a test needs through the real
//! database and lifecycle (no `ctxhost` process): queued, paused, running under a dead process,
//! finished; with a small valid context (system prompt + user message) in its directory.

use std::path::{Path, PathBuf};

use ctxhost::db::{Db, NewTask, Status, StoreSpec, TaskKey};
use ctxhost::layout::{Layout, hostname};
use ctxhost::lifecycle::{self, Claim, Owner, Transition};
use ctxhost_format::files::{CURRENT, MESSAGES};
use ctxhost_format::{ChatMessage, HistoryLine, estimate_message_tokens};

/// A pid no process has (above the kernel's pid_max).
pub const DEAD_PID: u32 = 4_999_999;

/// The worker id of the tasks it makes.
pub const WORKER_ID: &str = "test-builder:1:00000000";

/// Builds one task in the contexts tree `contexts`.
pub struct TaskBuilder {
    layout: Layout,
    spec: StoreSpec,
    prompt: String,
}

impl TaskBuilder {
    /// A task of the tree at `contexts` (created if missing), in the store its
    /// [`super::TestEnv`] uses.
    pub fn new(contexts: &Path) -> TaskBuilder {
        let layout = Layout::new(contexts);
        layout.ensure().unwrap();
        TaskBuilder {
            layout,
            spec: super::store::spec_for(contexts),
            prompt: "say hi".to_string(),
        }
    }

    /// The database of the tree.
    pub fn db(&self) -> Db {
        Db::open(&self.spec, self.layout.root()).unwrap()
    }

    /// A queued task that never ran (no directory). Returns its UUID.
    pub fn queued(&self) -> String {
        self.queued_as(&uuid::Uuid::new_v4().hyphenated().to_string())
    }

    /// A queued task that never ran (no directory), with UUID `uuid` (canonical). Returns it.
    pub fn queued_as(&self, uuid: &str) -> String {
        let uuid = uuid.to_string();
        self.db()
            .insert_queued(&NewTask {
                uuid: uuid.clone(),
                key: TaskKey {
                    task_source: "local".into(),
                    ..TaskKey::default()
                },
                prompt: self.prompt.clone(),
                user: None,
                llm_provider: "openai".into(),
                model: "fake-model".into(),
                context_length: 8192,
                no_inherit: false,
                workspace: None,
            })
            .unwrap();
        uuid
    }

    /// A task running under [`DEAD_PID`] on this host (its process is gone), with a context in
    /// `running/`.
    pub fn running_dead(&self) -> String {
        let uuid = self.queued();
        let claim = Claim {
            pid: DEAD_PID,
            hostname: hostname(),
            host_id: ctxhost::host::host_id(),
            worker_id: WORKER_ID.into(),
            lease: std::time::Duration::from_secs(30),
            llm_provider: "openai".into(),
            model: "fake-model".into(),
            context_length: 8192,
        };
        let db = self.db();
        lifecycle::apply(&db, &self.layout, &uuid, &Transition::Claim(&claim)).unwrap();
        write_context(&self.dir_of(&uuid), &self.prompt);
        uuid
    }

    /// A task paused (by its process, now gone) with its context in `paused/`.
    pub fn paused(&self) -> String {
        let uuid = self.running_dead();
        let db = self.db();
        db.request_pause(&uuid, Some("test")).unwrap();
        lifecycle::apply(
            &db,
            &self.layout,
            &uuid,
            &Transition::Pause { owner: OWNER },
        )
        .unwrap();
        uuid
    }

    /// A task that ended with `status` (final) with its context in `completed/`.
    pub fn finished(&self, status: Status) -> String {
        let uuid = self.running_dead();
        let t = Transition::Finish {
            owner: OWNER,
            status,
            error: None,
        };
        lifecycle::apply(&self.db(), &self.layout, &uuid, &t).unwrap();
        uuid
    }

    /// Queue paused task `uuid` again as `ctxhost resume` does, but without its fsck gate
    /// (`ctxhost::ops::control::require_sound_files`): for tests of what the task process
    /// itself does, when it starts, with files `ctxhost resume` refuses (a line of NUL bytes,
    /// a context no repair can fix), as after a crash, when a task is requeued without it.
    pub fn requeue(&self, uuid: &str) {
        let was = lifecycle::apply(&self.db(), &self.layout, uuid, &Transition::Resume).unwrap();
        assert_eq!(was, Some(Status::Paused), "task {uuid} was not paused");
    }

    /// The task's directory, wherever it is.
    pub fn dir_of(&self, uuid: &str) -> PathBuf {
        self.layout.find_task_dir(uuid).unwrap().1
    }
}

/// The owner of the tasks it runs.
const OWNER: Owner<'static> = Owner {
    pid: DEAD_PID,
    worker_id: WORKER_ID,
};

/// Write messages.jsonl and current.jsonl of `dir` (0600): the system prompt, then `prompt`.
pub fn write_context(dir: &Path, prompt: &str) {
    let messages = [
        ChatMessage::text("system", "You are a coding agent."),
        ChatMessage::text("user", prompt),
    ];
    let mut history = String::new();
    let mut current = String::new();
    for (i, m) in messages.iter().enumerate() {
        let line = HistoryLine {
            seq: i as u64 + 1,
            role: m.role.clone(),
            content: m.content.clone(),
            timestamp: "2025-01-01T00:00:00.000Z".into(),
            tokens: estimate_message_tokens(m),
            tool_name: None,
            tool_calls: None,
            tool_call_id: None,
            is_error: false,
            reasoning: Vec::new(),
            summary_id: None,
        };
        history.push_str(&serde_json::to_string(&line).unwrap());
        history.push('\n');
        current.push_str(&serde_json::to_string(m).unwrap());
        current.push('\n');
    }
    // Owner-only, as ctxhost writes them.
    for (name, text) in [(MESSAGES, history), (CURRENT, current)] {
        std::fs::write(dir.join(name), text).unwrap();
        std::fs::set_permissions(
            dir.join(name),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
    }
}
