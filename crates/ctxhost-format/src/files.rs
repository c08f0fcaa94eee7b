//! The names of the files in a task directory (DESIGN.md §2), which component owns each, and
//! which are temporaries of one step. The one place these names are spelled: the host, the
//! builtin components, `ctxhost fsck` and crash repair all use these constants.
//!
//! ```text
//! contexts/{running,paused,completed}/{uuid}/
//!   metadata.json      host (task context)      written once when the task first runs
//!   task_state.json    host (lifecycle)         pause/resume state
//!   messages.jsonl     message store            full history, append-only
//!   current.jsonl      message store            the live context (replaced atomically)
//!   store_checkpoint.json  message store        counts up to a byte offset (builtin store)
//!   history_checkpoint.json  host (task context)  history counts, call ids up to a byte offset
//!   context_checkpoint.json  host (task context)  invariant check of current.jsonl up to an offset
//!   summaries.jsonl    compressor               one line per summary
//!   tools.jsonl        host (tool store)        one line per tool call
//!   tool-results/      host (tool store)        full outputs cut for the context
//!   tools.json         host (tool registry)     tool definitions offered in requests
//!   planning/          host (planning store)    planning history: {uuid}.jsonl, written for
//!                                               the strategy (planning::history_file)
//!   temporaries        see TEMPORARY_FILES      deleted after their step or by repair
//! ```
//!
//! Every name is a plain relative path inside the task directory (no `/` except under a
//! folder given here), so a component, which sees the task directory as `.`, opens the same
//! name the host joins onto the directory's path.

/// Who writes a task-directory file (everyone else only reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Owner {
    /// The host's task context (metadata.json, llm_calls.jsonl) and lifecycle (task_state.json).
    Host,
    /// The host's tool store: tools.jsonl and tool-results/ (and the tool registry's tools.json).
    ToolStore,
    /// The message-store component (messages.jsonl, current.jsonl).
    MessageStore,
    /// The compressor component (summaries.jsonl, its work files, its new context).
    Compressor,
    /// The request-format component (request bodies) together with the host's transport
    /// (response bodies).
    RequestFormat,
    /// The strategy component (its side-call work files; its plans go through the host's
    /// planning store).
    Strategy,
}

/// One file (or folder) of a task directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskFile {
    /// Its name, relative to the task directory.
    pub name: &'static str,
    /// Who writes it.
    pub owner: Owner,
    /// Lives only during one step (deleted after it; stale after a crash).
    pub temporary: bool,
}

/// `metadata.json`: `{uuid, task_key, created_at, process_id, hostname, config, user}`, written
/// once (atomically) by the task context.
pub const METADATA: &str = "metadata.json";
/// `task_state.json`: `{paused_at, resume_count, reason, resumed_at}`, written by the lifecycle
/// when the task pauses and by the task context when it resumes.
pub const TASK_STATE: &str = "task_state.json";
/// `messages.jsonl`: the full history ([`crate::HistoryLine`] per line), message store.
pub const MESSAGES: &str = "messages.jsonl";
/// `current.jsonl`: the live context ([`crate::ChatMessage`] per line), message store.
pub const CURRENT: &str = "current.jsonl";
/// Where the message store builds a new `current.jsonl` before renaming it over the old one.
pub const CURRENT_TMP: &str = "current.jsonl.tmp";
/// `store_checkpoint.json`: the builtin message store's counts of messages.jsonl and
/// current.jsonl up to a byte offset of each ([`crate::checkpoint::StoreCheckpoint`]), so
/// opening a long history reads only what was appended since.
pub const STORE_CHECKPOINT: &str = "store_checkpoint.json";
/// `history_checkpoint.json`: the host's counts of messages.jsonl (lines, last seq, agent
/// steps) and the ids of its tool calls up to a byte offset, written at step boundaries, so a
/// resumed task does not read its whole history again.
pub const HISTORY_CHECKPOINT: &str = "history_checkpoint.json";
/// `context_checkpoint.json`: the host's invariant check of current.jsonl up to a byte offset
/// (the checker's state there), written at step boundaries, so the check before each request
/// reads only what was appended.
pub const CONTEXT_CHECKPOINT: &str = "context_checkpoint.json";
/// `summaries.jsonl`: one [`crate::SummaryLine`] per compression, compressor.
pub const SUMMARIES: &str = "summaries.jsonl";
/// `tools.jsonl`: one [`crate::ToolLine`] per tool call, host tool store.
pub const TOOLS: &str = "tools.jsonl";
/// `tool-results/`: `{seq}.txt`, the full output of a tool call cut for the context.
pub const TOOL_RESULTS_DIR: &str = "tool-results";
/// `tools.json`: a JSON array of OpenAI tool definitions offered in every request.
pub const TOOL_DEFINITIONS: &str = "tools.json";
/// `planning/`: the planning history (DESIGN.md §11).
pub const PLANNING_DIR: &str = "planning";
/// `llm_calls.jsonl`: one line per LLM call and per compression
/// ([`crate::CallLogLine`]), appended by the host's task context (the dashboard's chart reads it).
pub const LLM_CALLS: &str = "llm_calls.jsonl";
/// `trace_ids`: the OpenTelemetry trace id of each run of the task (32 hex digits a line,
/// appended when a run starts with traces on; the dashboard's task page shows the last).
pub const TRACE_IDS: &str = "trace_ids";
/// `workspace.json`: the task's workspace as a git checkout — path, base commit, repository,
/// ref, whether ctxhost manages the worktree (issue 40; written by the host once, when the
/// task's process first starts).
pub const WORKSPACE: &str = "workspace.json";
/// `changes.patch`: `git diff --binary` of the task's git workspace against workspace.json's
/// base commit, replaced atomically by the host at every step boundary when it changed.
pub const CHANGES_PATCH: &str = "changes.patch";
/// `request.json`: the body of the agent loop's current LLM request (request format).
pub const REQUEST: &str = "request.json";
/// `response.json`: the body of the provider's answer to [`REQUEST`] (host transport).
pub const RESPONSE: &str = "response.json";
/// `llm_request.json`: the body of a compressor's completion request (host `llm` import).
pub const LLM_REQUEST: &str = "llm_request.json";
/// `llm_response.json`: the provider's answer to [`LLM_REQUEST`].
pub const LLM_RESPONSE: &str = "llm_response.json";
/// `reply.stream`: the raw body of a streamed reply to [`REQUEST`] as it arrives (host
/// transport; server-sent events or NDJSON), kept after the call until the next one.
pub const REPLY_STREAM: &str = "reply.stream";
/// `reply.content`: the text of a reply too large to pass whole (WIT
/// `reply.content-file`), written by the request format's fold, appended by the message store
/// (`add-message-file`), then deleted by the host. Left after a crash, it is stale: the step
/// is redone or was already appended.
pub const REPLY_CONTENT: &str = "reply.content";
/// `failed-streams/`: `{n}.stream`, a streamed reply that broke off or could not be read
/// (kept for debugging, never appended as a reply).
pub const FAILED_STREAMS_DIR: &str = "failed-streams";
/// Compressor work file: the messages being summarised.
pub const TO_SUMMARIZE: &str = "to_summarize.jsonl";
/// Compressor work file: the messages kept verbatim.
pub const UNSUMMARIZED: &str = "unsummarized.jsonl";
/// Compressor work file: one summary request (instruction + messages) for `llm.complete`.
pub const SUMMARY_REQUEST: &str = "summary_request.jsonl";
/// The new context a compressor hands to the host (validated, then installed as current.jsonl).
pub const COMPRESSED: &str = "compressed.jsonl";
/// Strategy work file: the messages of one side call (planning, reflection, verification) for
/// `llm.complete`.
pub const STRATEGY_REQUEST: &str = "strategy_request.jsonl";
/// Suffix of the file that keeps the bytes crash repair cut from a torn line
/// (`messages.jsonl.torn`).
pub const TORN_SUFFIX: &str = ".torn";

/// Every named file and folder of a task directory, with its owner.
pub const TASK_FILES: &[TaskFile] = &[
    file(METADATA, Owner::Host, false),
    file(TASK_STATE, Owner::Host, false),
    file(MESSAGES, Owner::MessageStore, false),
    file(CURRENT, Owner::MessageStore, false),
    file(CURRENT_TMP, Owner::MessageStore, true),
    file(STORE_CHECKPOINT, Owner::MessageStore, false),
    file(HISTORY_CHECKPOINT, Owner::Host, false),
    file(CONTEXT_CHECKPOINT, Owner::Host, false),
    file(SUMMARIES, Owner::Compressor, false),
    file(TOOLS, Owner::ToolStore, false),
    file(TOOL_RESULTS_DIR, Owner::ToolStore, false),
    file(TOOL_DEFINITIONS, Owner::ToolStore, false),
    file(PLANNING_DIR, Owner::Host, false),
    file(LLM_CALLS, Owner::Host, false),
    file(TRACE_IDS, Owner::Host, false),
    file(WORKSPACE, Owner::Host, false),
    file(CHANGES_PATCH, Owner::Host, false),
    file(REQUEST, Owner::RequestFormat, true),
    file(RESPONSE, Owner::RequestFormat, true),
    file(LLM_REQUEST, Owner::RequestFormat, true),
    file(LLM_RESPONSE, Owner::RequestFormat, true),
    file(REPLY_STREAM, Owner::Host, false),
    file(REPLY_CONTENT, Owner::RequestFormat, true),
    file(FAILED_STREAMS_DIR, Owner::Host, false),
    file(TO_SUMMARIZE, Owner::Compressor, true),
    file(UNSUMMARIZED, Owner::Compressor, true),
    file(SUMMARY_REQUEST, Owner::Compressor, true),
    file(COMPRESSED, Owner::Compressor, true),
    file(STRATEGY_REQUEST, Owner::Strategy, true),
];

const fn file(name: &'static str, owner: Owner, temporary: bool) -> TaskFile {
    TaskFile {
        name,
        owner,
        temporary,
    }
}

/// Files that only exist during one step (request/response bodies, compression work files, the
/// message store's replacement file). After a crash they are stale: the step is redone from
/// current.jsonl.
pub const TEMPORARY_FILES: &[&str] = &[
    REQUEST,
    RESPONSE,
    LLM_REQUEST,
    LLM_RESPONSE,
    REPLY_CONTENT,
    CURRENT_TMP,
    TO_SUMMARIZE,
    UNSUMMARIZED,
    SUMMARY_REQUEST,
    COMPRESSED,
    STRATEGY_REQUEST,
];

/// Request/response bodies a failed task keeps for debugging (not temporaries once it failed).
pub const DEBUG_FILES: &[&str] = &[REQUEST, RESPONSE, LLM_REQUEST, LLM_RESPONSE];

/// Whether `name` is a temporary of a step: one of [`TEMPORARY_FILES`], or a temporary of an
/// atomic replace (`*.tmp`, `.NAME.tmp-PID`).
pub fn is_temporary(name: &str) -> bool {
    TEMPORARY_FILES.contains(&name)
        || name.ends_with(".tmp")
        || (name.starts_with('.') && name.contains(".tmp-"))
}

/// The owner of the task-directory file `name` (a top-level name, or the first component of a
/// path under a folder such as `tool-results/3.txt`); `None` for a name this table does not
/// know (a component's own file).
pub fn owner_of(name: &str) -> Option<Owner> {
    let top = name.split('/').next().unwrap_or(name);
    TASK_FILES.iter().find(|f| f.name == top).map(|f| f.owner)
}

/// Whether `name` (relative to the task directory) is part of the task's record: a file or
/// folder of [`TASK_FILES`] that is not a step temporary — messages.jsonl, current.jsonl,
/// summaries.jsonl, tools.jsonl, tool-results/, planning/, metadata.json, the checkpoints, ... —
/// or what crash repair kept of a torn line (`*.torn`). The host never deletes or replaces such
/// a file because a component named it (a compressor's new context must be a file of its own).
pub fn is_record(name: &str) -> bool {
    let top = name.split('/').next().unwrap_or(name);
    top.ends_with(TORN_SUFFIX) || TASK_FILES.iter().any(|f| f.name == top && !f.temporary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporaries_are_recognised() {
        for t in [
            REQUEST,
            CURRENT_TMP,
            "x.tmp",
            ".metadata.json.tmp-42",
            TO_SUMMARIZE,
        ] {
            assert!(is_temporary(t), "{t}");
        }
        for f in [MESSAGES, METADATA, TASK_STATE, TOOLS, "messages.jsonl.torn"] {
            assert!(!is_temporary(f), "{f}");
        }
    }

    #[test]
    fn the_table_agrees_with_the_temporaries_and_has_one_entry_per_name() {
        for f in TASK_FILES {
            assert_eq!(f.temporary, TEMPORARY_FILES.contains(&f.name), "{}", f.name);
            assert_eq!(
                TASK_FILES.iter().filter(|g| g.name == f.name).count(),
                1,
                "{}",
                f.name
            );
        }
        assert_eq!(owner_of("tool-results/3.txt"), Some(Owner::ToolStore));
        assert_eq!(owner_of(CURRENT), Some(Owner::MessageStore));
        assert_eq!(owner_of("notes.md"), None);
    }

    #[test]
    fn the_record_is_every_kept_file_and_no_temporary() {
        for f in [
            MESSAGES,
            CURRENT,
            SUMMARIES,
            TOOLS,
            "tool-results/3.txt",
            "planning/x.jsonl",
            PLANNING_DIR,
            METADATA,
            HISTORY_CHECKPOINT,
            "messages.jsonl.torn",
        ] {
            assert!(is_record(f), "{f}");
        }
        for f in [
            COMPRESSED,
            TO_SUMMARIZE,
            REQUEST,
            "mine.jsonl",
            "sub/new.jsonl",
        ] {
            assert!(!is_record(f), "{f}");
        }
    }
}
