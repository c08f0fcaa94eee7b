//! Following a task as it runs: its files (messages.jsonl, tools.jsonl, llm_calls.jsonl,
//! summaries.jsonl, and the raw stream of a reply in flight, reply.stream) read from where the
//! last look stopped, turned into [`Event`]s, until its row says it ended. Used by `ctxhost
//! ask` (a task this process started) and `ctxhost show --follow` (a task running anywhere:
//! under a worker, on another host sharing the store). The directory may move between
//! `running/`, `paused/` and `completed/` while it is followed: it is looked up at every look,
//! and byte offsets stay valid across a rename.
//!
//! Only whole lines are read (a line being written is read at the next look); a line that
//! does not parse is reported as a [`Event::Note`] and skipped, never fatal. A stream whose
//! text was shown and that then broke off (moved to `failed-streams/`, the request sent again)
//! is followed by [`Event::StreamBroken`], so the retry's text is not read as its continuation.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ctxhost_format::files::{
    FAILED_STREAMS_DIR, LLM_CALLS, MESSAGES, REPLY_STREAM, SUMMARIES, TOOLS,
};
use ctxhost_format::{CallLogLine, HistoryLine, SummaryLine, ToolLine, ToolStatus};
use serde::Serialize;

use super::reply_stream::{StreamLines, broken_streams, reply_in_flight};
use super::tail::Tail;
use crate::db::{Db, Status, TaskRow};
use crate::layout::Layout;
use crate::task_dir::TaskDir;

/// Longest tool result an [`Event::ToolResult`] carries, bytes (cut at a character boundary;
/// `bytes` gives the full size).
pub const MAX_RESULT_BYTES: usize = 600;

/// One thing that happened in a task, in the order the follower saw it. `--json` prints each as
/// one line, tagged by `event`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The task being followed: `{"event":"task","uuid","status","model","provider"}`.
    Task {
        /// Its UUID.
        uuid: String,
        /// Its status when following started.
        status: Status,
        /// Its model, when recorded.
        model: Option<String>,
        /// Its provider, when recorded.
        provider: Option<String>,
    },
    /// A user message (the task's prompt): `{"event":"prompt","seq","text"}`.
    Prompt {
        /// Its seq in messages.jsonl.
        seq: u64,
        /// Its text.
        text: String,
    },
    /// Text of the reply being streamed, as it arrives: `{"event":"reply_delta","text"}`.
    ReplyDelta {
        /// The new text.
        text: String,
    },
    /// The stream whose text was shown since the last reply broke off (cut, stalled, or
    /// unreadable) and was moved to `kept`: that text is discarded, and what streams next is
    /// the request sent again (or the call's failure):
    /// `{"event":"stream_broken","bytes","kept"}`.
    StreamBroken {
        /// Bytes of the broken stream.
        bytes: u64,
        /// Where it is kept, relative to the task directory: `failed-streams/{n}.stream`.
        kept: String,
    },
    /// Reasoning text of the reply being streamed (`reasoning_content`, Anthropic's
    /// `thinking`), as it arrives: `{"event":"reasoning_delta","text"}`.
    ReasoningDelta {
        /// The new text.
        text: String,
    },
    /// One reasoning item of an assistant message, before its text and tool calls:
    /// `{"event":"reasoning","seq","label","text"}`; `text` is the readable reasoning, `null`
    /// for an item that has none to show (redacted or encrypted: only `label` says what it is;
    /// [`crate::ops::reasoning::shown`]).
    Reasoning {
        /// The seq of the assistant message in messages.jsonl.
        seq: u64,
        /// `provider type`, and what is not shown.
        label: String,
        /// The readable text.
        text: Option<String>,
    },
    /// An assistant message's text: `{"event":"reply","seq","text","final"}`. `final`: it has
    /// no tool calls (the answer, when the task then completes).
    Reply {
        /// Its seq in messages.jsonl.
        seq: u64,
        /// Its text.
        text: String,
        /// Whether the message makes no tool calls.
        #[serde(rename = "final")]
        is_final: bool,
    },
    /// A tool call of an assistant message: `{"event":"tool_call","seq","id","name","arguments"}`.
    ToolCall {
        /// The seq of the assistant message in messages.jsonl.
        seq: u64,
        /// The call's id.
        id: String,
        /// The tool.
        name: String,
        /// Its arguments, JSON text as the model wrote them.
        arguments: String,
    },
    /// The result of a tool call: `{"event":"tool_result","seq","id","tool","status","text",
    /// "bytes","duration_ms"}`; `text` is at most [`MAX_RESULT_BYTES`] bytes of it, `bytes`
    /// its whole size; `status` (`success`/`error`) and `duration_ms` come from tools.jsonl.
    ToolResult {
        /// Its seq in messages.jsonl.
        seq: u64,
        /// The call it answers.
        id: Option<String>,
        /// The tool.
        tool: Option<String>,
        /// `success` or `error` (tools.jsonl), when recorded.
        status: Option<ToolStatus>,
        /// The start of the result.
        text: String,
        /// Size of the whole result, bytes.
        bytes: usize,
        /// Wall time of the call, milliseconds (tools.jsonl), when recorded.
        duration_ms: Option<u64>,
    },
    /// A compression of the context (llm_calls.jsonl):
    /// `{"event":"compression","before_tokens","after_tokens","summary_id","summarized_seqs"}`;
    /// `summarized_seqs` is `[start, end]` of the messages the summary covers (summaries.jsonl).
    Compression {
        /// Estimated tokens of the context before.
        before_tokens: u64,
        /// Estimated tokens after.
        after_tokens: u64,
        /// The summary's id in summaries.jsonl, when one was made.
        summary_id: Option<u64>,
        /// The messages.jsonl seqs the summary covers, when known.
        summarized_seqs: Option<[u64; 2]>,
    },
    /// One LLM call of the agent loop ended (llm_calls.jsonl):
    /// `{"event":"llm_call","n","duration_ms","ok","interrupted","prompt_tokens",
    /// "completion_tokens","error"}`.
    LlmCall {
        /// The task's step number.
        n: u64,
        /// Wall time, milliseconds.
        duration_ms: u64,
        /// Whether it got an answer.
        ok: bool,
        /// It was given up for a pause or stop request of the task (not a failure; `ok` is
        /// false, `error` says what it gave way to).
        interrupted: bool,
        /// Provider-reported prompt tokens.
        prompt_tokens: Option<u64>,
        /// Provider-reported completion tokens.
        completion_tokens: Option<u64>,
        /// Why it failed.
        error: Option<String>,
    },
    /// A note: a context-repair line of messages.jsonl, or a line the follower could not read:
    /// `{"event":"note","text"}`.
    Note {
        /// What it says.
        text: String,
    },
    /// What the task's process waits for besides the model, each time it changes (seen on the
    /// host that runs it): `{"event":"waiting","on"}`, `on` such as `object store unreachable:
    /// ENDPOINT, retrying (2/12)`, `null` once it waits no more
    /// ([`crate::remote::read_wait_note`]).
    Waiting {
        /// What it waits for; `None`: nothing any more.
        on: Option<String>,
    },
    /// The task stopped running: `{"event":"end","uuid","status","answer","error",
    /// "llm_calls","tool_calls","tokens","compressions","seconds"}`; `answer` for a completed
    /// task, `error` for a failed one; counters from its row; `seconds` since it started.
    End {
        /// Its UUID.
        uuid: String,
        /// `completed`, `failed`, `stopped` or `paused`.
        status: Status,
        /// The final answer (completed tasks).
        answer: Option<String>,
        /// The error (failed tasks).
        error: Option<String>,
        /// LLM calls.
        llm_calls: i64,
        /// Tool calls.
        tool_calls: i64,
        /// Tokens.
        tokens: i64,
        /// Compressions.
        compressions: i64,
        /// Seconds from its start to its end, when both are recorded.
        seconds: Option<f64>,
    },
}

/// What the follower knows of a task's files between looks.
#[derive(Debug, Default)]
pub struct Follower {
    uuid: String,
    messages: Tail,
    tools: Tail,
    calls: Tail,
    summaries: Tail,
    stream: Tail,
    /// The events of reply.stream read so far (reset with `stream`).
    stream_lines: StreamLines,
    /// The highest `failed-streams/{n}.stream` seen (`None` before the first look): a higher
    /// one is a stream that broke off since.
    broken_seen: Option<u64>,
    /// Text of a stream in flight was shown since the last assistant message was recorded.
    stream_shown: bool,
    /// tools.jsonl's status and duration by tool-call id.
    tool_lines: HashMap<String, (ToolStatus, u64)>,
    /// summaries.jsonl's covered seqs by summary id.
    summary_spans: HashMap<u64, [u64; 2]>,
}

impl Follower {
    /// A follower of task `uuid`, nothing read yet.
    pub fn new(uuid: &str) -> Follower {
        Follower {
            uuid: uuid.to_string(),
            ..Follower::default()
        }
    }

    /// Whether the last [`Follower::look`] left lines unread (it reads at most a few MiB of a
    /// file at a time): look again at once.
    pub fn behind(&self) -> bool {
        [
            &self.messages,
            &self.tools,
            &self.calls,
            &self.summaries,
            &self.stream,
        ]
        .iter()
        .any(|t| t.behind)
    }

    /// What was appended to the task's files since the last look, in order (the directory is
    /// looked up in `layout`; none yet: nothing). Errors: a file that cannot be opened or read
    /// (a link in its place, an I/O error).
    pub fn look(&mut self, layout: &Layout) -> anyhow::Result<Vec<Event>> {
        let Some((_, path)) = layout.find_task_dir(&self.uuid) else {
            return Ok(Vec::new());
        };
        let dir = match TaskDir::open(&path) {
            Ok(d) => d,
            // Moved between the lookup and the open: the next look finds it.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(anyhow::anyhow!("cannot open {}: {e}", path.display())),
        };
        let read = |tail: &mut Tail, name: &str| {
            tail.read(&dir, name, name != REPLY_STREAM)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", dir.show(name)))
        };
        let mut events = Vec::new();
        // A stream that broke off since the last look: what was shown of it is discarded, and
        // the next stream (the request sent again) is read from its start. Streams broken
        // before the first look were never shown.
        let broken = broken_streams(&dir)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", dir.show(FAILED_STREAMS_DIR)))?;
        let newest = broken.last().map_or(0, |b| b.n);
        if let Some(seen) = self.broken_seen
            && newest > seen
        {
            if self.stream_shown
                && let Some(b) = broken.iter().find(|b| b.n > seen)
            {
                events.push(Event::StreamBroken {
                    bytes: b.bytes,
                    kept: b.kept(),
                });
            }
            self.stream_shown = false;
            self.stream = Tail::default();
            self.stream_lines = StreamLines::default();
        }
        self.broken_seen = Some(newest);
        // Side files first, so a message that refers to their lines finds them.
        for (_, l) in read(&mut self.tools, TOOLS)? {
            if let Ok(t) = serde_json::from_slice::<ToolLine>(&l)
                && let Some(id) = t.tool_call_id
            {
                self.tool_lines.insert(id, (t.status, t.duration_ms));
            }
        }
        for (_, l) in read(&mut self.summaries, SUMMARIES)? {
            if let Ok(s) = serde_json::from_slice::<SummaryLine>(&l) {
                self.summary_spans.insert(s.id, [s.start_seq, s.end_seq]);
            }
        }
        let mut timed: Vec<(String, Event)> = Vec::new();
        for (n, l) in read(&mut self.calls, LLM_CALLS)? {
            match serde_json::from_slice::<CallLogLine>(&l) {
                Ok(CallLogLine::Compression(c)) => timed.push((
                    c.timestamp,
                    Event::Compression {
                        before_tokens: c.before_tokens,
                        after_tokens: c.after_tokens,
                        summary_id: c.summary_id,
                        summarized_seqs: c
                            .summary_id
                            .and_then(|id| self.summary_spans.get(&id).copied()),
                    },
                )),
                Ok(CallLogLine::Call(c)) => timed.push((
                    c.timestamp,
                    Event::LlmCall {
                        n: c.n,
                        duration_ms: c.duration_ms,
                        ok: c.status == ctxhost_format::CallStatus::Ok,
                        interrupted: c.status == ctxhost_format::CallStatus::Interrupted,
                        prompt_tokens: c.usage.prompt_tokens,
                        completion_tokens: c.usage.completion_tokens,
                        error: c.error,
                    },
                )),
                Ok(CallLogLine::SummaryCall(_)) => {}
                Err(e) => events.push(unreadable(LLM_CALLS, n, &e)),
            }
        }
        for (n, l) in read(&mut self.messages, MESSAGES)? {
            match serde_json::from_slice::<HistoryLine>(&l) {
                Ok(h) => {
                    let ts = h.timestamp.clone();
                    for e in self.message_events(h) {
                        timed.push((ts.clone(), e));
                    }
                }
                Err(e) => events.push(unreadable(MESSAGES, n, &e)),
            }
        }
        // RFC 3339 UTC with milliseconds sorts as text; the sort is stable, so lines of one
        // file keep their order.
        timed.sort_by(|a, b| a.0.cmp(&b.0));
        // The reply being streamed, while it is in flight (the next call's stream is read from
        // its start). A stream followed until its reply was recorded is read to its end first:
        // its last lines, written after the previous look, come before the reply's events, so
        // the deltas join into the whole reply.
        let in_flight = reply_in_flight(&dir);
        let drain = !in_flight && self.stream.offset > 0;
        if !drain {
            events.extend(timed.drain(..).map(|(_, e)| e));
        }
        if in_flight || drain {
            let lines = self
                .stream
                .read_lines(&dir, REPLY_STREAM, false, true)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", dir.show(REPLY_STREAM)))?;
            if lines.first().is_some_and(|(n, _)| *n == 1) {
                // Read from its start (a new stream): no event of the last one is open.
                self.stream_lines = StreamLines::default();
            }
            for (_, l) in lines {
                let d = self.stream_lines.line(&String::from_utf8_lossy(&l));
                if let Some(text) = d.reasoning {
                    events.push(Event::ReasoningDelta { text });
                    self.stream_shown |= in_flight;
                }
                if let Some(text) = d.text {
                    events.push(Event::ReplyDelta { text });
                    self.stream_shown |= in_flight;
                }
            }
        }
        if !in_flight {
            self.stream = Tail::default();
            self.stream_lines = StreamLines::default();
        }
        events.extend(timed.into_iter().map(|(_, e)| e));
        Ok(events)
    }

    /// The events of one history line.
    fn message_events(&mut self, h: HistoryLine) -> Vec<Event> {
        let text = h.content.clone().unwrap_or_default();
        if h.summary_id.is_some() {
            // Shown with its compression (llm_calls.jsonl).
            return Vec::new();
        }
        if h.is_note() {
            return vec![Event::Note { text }];
        }
        match h.role.as_str() {
            "user" => vec![Event::Prompt { seq: h.seq, text }],
            "assistant" => {
                // The reply recorded: its stream, if any, is done.
                self.stream_shown = false;
                let calls = h.tool_calls.unwrap_or_default();
                let mut out: Vec<Event> = h
                    .reasoning
                    .iter()
                    .map(|item| {
                        let shown = crate::ops::reasoning::shown(item);
                        Event::Reasoning {
                            seq: h.seq,
                            label: shown.label,
                            text: shown.text,
                        }
                    })
                    .collect();
                if !text.trim().is_empty() {
                    out.push(Event::Reply {
                        seq: h.seq,
                        text,
                        is_final: calls.is_empty(),
                    });
                }
                for c in calls {
                    out.push(Event::ToolCall {
                        seq: h.seq,
                        id: c.id,
                        name: c.function.name,
                        arguments: c.function.arguments,
                    });
                }
                out
            }
            "tool" => {
                let recorded = h
                    .tool_call_id
                    .as_ref()
                    .and_then(|id| self.tool_lines.get(id).copied());
                vec![Event::ToolResult {
                    seq: h.seq,
                    id: h.tool_call_id,
                    tool: h.tool_name,
                    status: recorded.map(|r| r.0),
                    bytes: text.len(),
                    text: cut(&text, MAX_RESULT_BYTES).to_string(),
                    duration_ms: recorded.map(|r| r.1),
                }]
            }
            // The system prompt.
            _ => Vec::new(),
        }
    }
}

/// `s` cut to at most `max` bytes at a character boundary.
pub fn cut(s: &str, max: usize) -> &str {
    &s[..s.floor_char_boundary(max)]
}

fn unreadable(file: &str, line: u64, e: &serde_json::Error) -> Event {
    Event::Note {
        text: format!("{file}: line {line} cannot be read: {e}"),
    }
}

/// The [`Event::End`] of task `row` (which is no longer running): counters from the row, the
/// answer from its history when it completed.
pub fn end_event(layout: &Layout, row: &TaskRow) -> anyhow::Result<Event> {
    let answer = if row.status == Status::Completed {
        super::show::final_answer(layout, &row.uuid)?
    } else {
        None
    };
    let seconds = match (&row.started_at, &row.completed_at) {
        (Some(s), Some(e)) => seconds_between(s, e),
        _ => None,
    };
    Ok(Event::End {
        uuid: row.uuid.clone(),
        status: row.status,
        answer,
        error: row.error_message.clone(),
        llm_calls: row.llm_call_count,
        tool_calls: row.tool_call_count,
        tokens: row.total_tokens,
        compressions: row.compression_count,
        seconds,
    })
}

fn seconds_between(start: &str, end: &str) -> Option<f64> {
    let s = chrono::DateTime::parse_from_rfc3339(start).ok()?;
    let e = chrono::DateTime::parse_from_rfc3339(end).ok()?;
    Some((e - s).num_milliseconds() as f64 / 1000.0)
}

/// What the caller of [`follow`] does between looks.
pub trait Watch {
    /// Show one event.
    fn event(&mut self, event: &Event) -> anyhow::Result<()>;
    /// Called after every look; `idle` is how long nothing new has been seen while the task
    /// runs (`None`: not running, or something was just seen). The place for a progress line
    /// and for handling Ctrl-C. Returning `false` stops following.
    fn tick(&mut self, _idle: Option<Duration>) -> anyhow::Result<bool> {
        Ok(true)
    }
}

/// How often [`follow`] looks at the files and the row.
pub const POLL: Duration = Duration::from_millis(100);

/// A task being followed, one look at a time ([`Following::look`]): what [`follow`] does in a
/// loop, for callers that wait between looks their own way (the API's event stream waits on
/// its async runtime, not on a thread).
#[derive(Debug)]
pub struct Following {
    uuid: String,
    follower: Follower,
    /// [`Event::Task`] was handed out.
    started: bool,
    last_seen: Instant,
    waiting: Option<String>,
}

/// What one [`Following::look`] saw.
#[derive(Debug)]
pub struct Look {
    /// The events, in order: [`Event::Task`] first at the first look, [`Event::End`] last at
    /// the look that saw the task end.
    pub events: Vec<Event>,
    /// The task's row at this look.
    pub row: TaskRow,
    /// The task is no longer queued or running: there is nothing more to look at.
    pub ended: bool,
    /// How long nothing new has been seen while the task runs (`None`: not running, or
    /// something was just seen).
    pub idle: Option<Duration>,
    /// Lines were left unread (a file grew by more than one read): look again at once.
    pub behind: bool,
}

impl Following {
    /// Follow task `uuid` from the start of its files.
    pub fn new(uuid: &str) -> Following {
        Following {
            uuid: uuid.to_string(),
            follower: Follower::new(uuid),
            started: false,
            last_seen: Instant::now(),
            waiting: None,
        }
    }

    /// Look at the task's row and files once. Errors: the row is gone, a file cannot be read.
    pub fn look(&mut self, db: &Db, layout: &Layout) -> anyhow::Result<Look> {
        let uuid = self.uuid.as_str();
        // The row first: what the files hold after it says "ended" is all there will be.
        let row = db
            .get(uuid)?
            .ok_or_else(|| anyhow::anyhow!("task {uuid} disappeared from the database"))?;
        let mut events = Vec::new();
        if !self.started {
            self.started = true;
            events.push(Event::Task {
                uuid: row.uuid.clone(),
                status: row.status,
                model: row.model.clone(),
                provider: row.llm_provider.clone(),
            });
        }
        let seen = self.follower.look(layout)?;
        let saw_files = !seen.is_empty();
        if saw_files {
            self.last_seen = Instant::now();
        }
        events.extend(seen);
        let live = matches!(row.status, Status::Queued | Status::Running);
        let note = if live {
            crate::remote::read_wait_note(layout, uuid)
        } else {
            None
        };
        if note != self.waiting {
            events.push(Event::Waiting { on: note.clone() });
            self.waiting = note;
            self.last_seen = Instant::now();
        }
        if !live {
            // Drain what the last process wrote before its status changed.
            loop {
                events.extend(self.follower.look(layout)?);
                if !self.follower.behind() {
                    break;
                }
            }
            events.push(end_event(layout, &row)?);
            return Ok(Look {
                events,
                row,
                ended: true,
                idle: None,
                behind: false,
            });
        }
        let idle = (row.status == Status::Running && !saw_files).then(|| self.last_seen.elapsed());
        Ok(Look {
            events,
            row,
            ended: false,
            idle,
            behind: self.follower.behind(),
        })
    }
}

/// Follow task `uuid` from the start of its files until it is no longer queued or running
/// (or `watch.tick` says stop), handing every event to `watch`: first [`Event::Task`], last
/// [`Event::End`] (when it ended). A task that is paused, completed, failed or stopped when
/// following starts is shown and ended at once. Returns the row it ended with.
pub fn follow(
    db: &Db,
    layout: &Layout,
    uuid: &str,
    watch: &mut dyn Watch,
) -> anyhow::Result<TaskRow> {
    let mut following = Following::new(uuid);
    loop {
        let look = following.look(db, layout)?;
        for e in &look.events {
            watch.event(e)?;
        }
        if look.ended || !watch.tick(look.idle)? {
            return Ok(look.row);
        }
        if !look.behind {
            std::thread::sleep(POLL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::reply_stream::{partial_reply, reply_in_flight, stream_text};
    use crate::ops::tail::MAX_READ_BYTES;

    /// A running task's directory in a new contexts tree (removed with it) and a follower of
    /// the task that has read nothing yet.
    struct Running {
        _tmp: tempfile::TempDir,
        layout: Layout,
        uuid: &'static str,
        dir: std::path::PathBuf,
        follower: Follower,
    }

    impl Running {
        fn new() -> Running {
            let tmp = tempfile::tempdir().unwrap();
            let layout = Layout::new(tmp.path());
            layout.ensure().unwrap();
            let uuid = "0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b";
            let dir = layout.task_dir(crate::layout::DirState::Running, uuid);
            std::fs::create_dir_all(&dir).unwrap();
            Running {
                _tmp: tmp,
                layout,
                uuid,
                dir,
                follower: Follower::new(uuid),
            }
        }

        /// The events the follower sees now.
        fn look(&mut self) -> Vec<Event> {
            self.follower.look(&self.layout).unwrap()
        }
    }

    #[test]
    fn stream_lines_of_each_provider_give_their_text() {
        assert_eq!(
            stream_text(&[r#"data: {"choices":[{"delta":{"content":"Hel"}}]}"#, ""]),
            "Hel"
        );
        assert_eq!(
            stream_text(&[
                "event: content_block_delta",
                r#"data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"lo"}}"#,
                ""
            ]),
            "lo"
        );
        assert_eq!(
            stream_text(&[r#"{"message":{"role":"assistant","content":"!"},"done":false}"#]),
            "!"
        );
        assert_eq!(stream_text(&["data: [DONE]", "", "event: ping", ""]), "");
        // An event shows once its blank line came; its JSON may span `data:` lines.
        assert_eq!(
            stream_text(&[
                r#"data: {"choices":[{"delta":"#,
                r#"data: {"content":"Hi"}}]}"#
            ]),
            ""
        );
        assert_eq!(
            stream_text(&[
                r#"data: {"choices":[{"delta":"#,
                r#"data: {"content":"Hi"}}]}"#,
                "",
                r#"data: {"choices":[{"delta":{"content":"!"}}]}"#,
                "",
            ]),
            "Hi!"
        );
    }

    #[test]
    fn the_last_lines_of_a_stream_whose_reply_was_recorded_are_read_before_the_reply() {
        let mut t = Running::new();
        let first = "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n";
        std::fs::write(t.dir.join(REPLY_STREAM), first).unwrap();
        assert_eq!(t.look(), [Event::ReplyDelta { text: "Hel".into() }]);
        // Between two looks: the stream's last line, then the reply recorded.
        std::fs::write(
            t.dir.join(REPLY_STREAM),
            format!("{first}data: {{\"choices\":[{{\"delta\":{{\"content\":\"lo.\"}}}}]}}\n\n"),
        )
        .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(
            t.dir.join(MESSAGES),
            concat!(
                r#"{"seq":3,"role":"assistant","content":"Hello.","timestamp":"2026-01-01T00:00:01.000Z","tokens":1}"#,
                "\n"
            ),
        )
        .unwrap();
        assert!(!reply_in_flight(&TaskDir::open(&t.dir).unwrap()));
        assert_eq!(
            t.look(),
            [
                Event::ReplyDelta { text: "lo.".into() },
                Event::Reply {
                    seq: 3,
                    text: "Hello.".into(),
                    is_final: true
                }
            ]
        );
        assert_eq!(t.look(), []);
    }

    #[test]
    fn a_reply_being_streamed_is_shown_as_deltas_from_reply_stream() {
        let mut t = Running::new();
        std::fs::write(
            t.dir.join(REPLY_STREAM),
            concat!(
                "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n",
                "\n",
                "data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\n\n",
                "data: {\"choices\":[{\"delta\":{\"content\":\"!!\"" // not whole yet
            ),
        )
        .unwrap();
        assert_eq!(
            t.look(),
            [
                Event::ReplyDelta { text: "Hel".into() },
                Event::ReplyDelta { text: "lo".into() }
            ]
        );
        // The next call's stream replaces the file: it is read from its start.
        std::fs::write(
            t.dir.join(REPLY_STREAM),
            "data: {\"choices\":[{\"delta\":{\"content\":\"A\"}}]}\n\n",
        )
        .unwrap();
        assert_eq!(t.look(), [Event::ReplyDelta { text: "A".into() }]);
        // Reasoning deltas come as such.
        std::fs::write(
            t.dir.join(REPLY_STREAM),
            concat!(
                "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"Think\"}}]}\n\n",
                "data: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"ing\"}}\n\n",
            ),
        )
        .unwrap();
        assert_eq!(
            t.look(),
            [
                Event::ReasoningDelta {
                    text: "Think".into()
                },
                Event::ReasoningDelta { text: "ing".into() }
            ]
        );
        // Once its reply is recorded (messages.jsonl is the newer file) the stream is done:
        // not read again, and the message carries its reasoning.
        std::fs::write(
            t.dir.join(MESSAGES),
            concat!(
                r#"{"seq":3,"role":"assistant","content":"A","timestamp":"2026-01-01T00:00:01.000Z","tokens":1,"#,
                r#""reasoning":[{"provider":"openai-chat","type":"reasoning_content","data":"\"Thinking\""},"#,
                r#"{"provider":"anthropic","type":"redacted_thinking","data":"{\"type\":\"redacted_thinking\",\"data\":\"xyz\"}"}]}"#,
                "\n"
            ),
        )
        .unwrap();
        assert!(!reply_in_flight(&TaskDir::open(&t.dir).unwrap()));
        assert_eq!(
            t.look(),
            [
                Event::Reasoning {
                    seq: 3,
                    label: "openai-chat reasoning_content".into(),
                    text: Some("Thinking".into())
                },
                Event::Reasoning {
                    seq: 3,
                    label: "anthropic redacted_thinking (redacted, 3 bytes not shown)".into(),
                    text: None
                },
                Event::Reply {
                    seq: 3,
                    text: "A".into(),
                    is_final: true
                }
            ]
        );
    }

    /// F11: a stream whose text was shown and that then broke off (moved to
    /// failed-streams/ by the host, the request sent again) is marked, and the new stream is
    /// read from its start even when it begins with the same bytes.
    #[test]
    fn a_stream_that_broke_off_is_marked_and_the_retry_read_from_its_start() {
        let mut t = Running::new();
        let first = "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n";
        std::fs::write(t.dir.join(REPLY_STREAM), first).unwrap();
        assert_eq!(t.look(), [Event::ReplyDelta { text: "Hel".into() }]);
        // The stream breaks off and is kept; the retry begins with the same first line.
        std::fs::create_dir(t.dir.join(FAILED_STREAMS_DIR)).unwrap();
        std::fs::rename(
            t.dir.join(REPLY_STREAM),
            t.dir.join(FAILED_STREAMS_DIR).join("1.stream"),
        )
        .unwrap();
        std::fs::write(
            t.dir.join(REPLY_STREAM),
            format!("{first}data: {{\"choices\":[{{\"delta\":{{\"content\":\"lo.\"}}}}]}}\n\n"),
        )
        .unwrap();
        assert_eq!(
            t.look(),
            [
                Event::StreamBroken {
                    bytes: first.len() as u64,
                    kept: "failed-streams/1.stream".into()
                },
                Event::ReplyDelta { text: "Hel".into() },
                Event::ReplyDelta { text: "lo.".into() }
            ]
        );
        assert_eq!(t.look(), []);
        // A follower that starts after a stream broke never showed it: no marker.
        let mut late = Follower::new(t.uuid);
        assert!(
            !late
                .look(&t.layout)
                .unwrap()
                .iter()
                .any(|e| matches!(e, Event::StreamBroken { .. }))
        );
        // The dashboard's partial reply says which stream it restarts.
        let p = partial_reply(&TaskDir::open(&t.dir).unwrap(), 100)
            .unwrap()
            .unwrap();
        assert_eq!(p.text, "Hello.");
        assert_eq!(
            p.restarts.map(|b| (b.n, b.bytes)),
            Some((1, first.len() as u64))
        );
    }

    #[test]
    fn the_partial_reply_is_the_text_of_the_stream_in_flight_cut_to_its_end() {
        let t = Running::new();
        let dir = TaskDir::open(&t.dir).unwrap();
        assert_eq!(partial_reply(&dir, 5).unwrap(), None);
        std::fs::write(
            t.dir.join(REPLY_STREAM),
            concat!(
                "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"Hmm.\"}}]}\n\n",
                "data: {\"choices\":[{\"delta\":{\"content\":\"Hello, \"}}]}\n\n",
                "data: {\"choices\":[{\"delta\":{\"content\":\"world\"}}]}\n\n",
                "data: {\"choices\":[{\"delta\":{\"content\":\"!!" // not whole yet
            ),
        )
        .unwrap();
        let p = partial_reply(&dir, 8).unwrap().unwrap();
        assert_eq!((p.text.as_str(), p.text_cut), ("o, world", 4));
        assert_eq!((p.reasoning.as_str(), p.reasoning_cut), ("Hmm.", 0));
        let p = partial_reply(&dir, 100).unwrap().unwrap();
        assert_eq!(p.text, "Hello, world");
    }

    #[test]
    fn a_line_longer_than_one_read_is_read_whole() {
        let mut t = Running::new();
        let long = "A".repeat(MAX_READ_BYTES as usize + 10);
        let line = serde_json::json!({"seq": 3, "role": "assistant", "content": long,
            "timestamp": "2026-01-01T00:00:01.000Z", "tokens": 1});
        std::fs::write(t.dir.join(MESSAGES), format!("{line}\n")).unwrap();
        let events = t.look();
        assert!(
            matches!(&events[..], [Event::Reply { text, .. }] if text.len() == long.len()),
            "{} events",
            events.len()
        );
        assert!(!t.follower.behind());
        assert!(t.look().is_empty());
    }

    #[test]
    fn results_are_cut_at_a_character_boundary() {
        assert_eq!(cut("héllo", 2), "h");
        assert_eq!(cut("héllo", 3), "hé");
        assert_eq!(cut("abc", 10), "abc");
    }

    #[test]
    fn a_follower_reads_whole_lines_only_and_orders_files_by_time() {
        let mut t = Running::new();
        std::fs::write(
            t.dir.join(MESSAGES),
            concat!(
                r#"{"seq":1,"role":"system","content":"s","timestamp":"2026-01-01T00:00:00.000Z","tokens":1}"#,
                "\n",
                r#"{"seq":2,"role":"user","content":"hi","timestamp":"2026-01-01T00:00:00.001Z","tokens":1}"#,
                "\n",
                r#"{"seq":3,"role":"assistant","content":"partial"#
            ),
        )
        .unwrap();
        std::fs::write(
            t.dir.join(LLM_CALLS),
            concat!(
                r#"{"type":"compression","timestamp":"2026-01-01T00:00:00.000Z","before_tokens":7412,"after_tokens":1230,"summary_id":3}"#,
                "\n"
            ),
        )
        .unwrap();
        let events = t.look();
        assert!(
            matches!(
                events[0],
                Event::Compression {
                    before_tokens: 7412,
                    after_tokens: 1230,
                    summary_id: Some(3),
                    ..
                }
            ),
            "{events:?}"
        );
        assert_eq!(
            events[1],
            Event::Prompt {
                seq: 2,
                text: "hi".into()
            }
        );
        assert_eq!(events.len(), 2);
        // The rest of the torn line arrives.
        let mut m = std::fs::OpenOptions::new()
            .append(true)
            .open(t.dir.join(MESSAGES))
            .unwrap();
        std::io::Write::write_all(
            &mut m,
            b"\",\"timestamp\":\"2026-01-01T00:00:01.000Z\",\"tokens\":1}\n",
        )
        .unwrap();
        assert_eq!(
            t.look(),
            [Event::Reply {
                seq: 3,
                text: "partial".into(),
                is_final: true
            }]
        );
        assert!(t.look().is_empty());
    }

    /// Issue 38: messages.jsonl cut back (a torn last line repaired, a copy put back) is not
    /// shown again from its start: the follower goes on from the records it showed, by count.
    #[test]
    fn a_truncated_file_is_not_shown_again() {
        let mut t = Running::new();
        let line = |seq: u64, role: &str, text: &str| {
            format!(
                r#"{{"seq":{seq},"role":"{role}","content":"{text}","timestamp":"2026-01-01T00:00:0{seq}.000Z","tokens":1}}"#
            ) + "\n"
        };
        let three =
            line(1, "user", "first") + &line(2, "assistant", "one") + &line(3, "user", "second");
        std::fs::write(t.dir.join(MESSAGES), &three).unwrap();
        assert_eq!(t.look().len(), 3);
        // Cut back to its first two records, then the third and a fourth appended again.
        std::fs::write(
            t.dir.join(MESSAGES),
            line(1, "user", "first") + &line(2, "assistant", "one"),
        )
        .unwrap();
        assert_eq!(t.look(), []);
        let mut m = std::fs::OpenOptions::new()
            .append(true)
            .open(t.dir.join(MESSAGES))
            .unwrap();
        std::io::Write::write_all(
            &mut m,
            (line(3, "user", "second") + &line(4, "assistant", "two")).as_bytes(),
        )
        .unwrap();
        assert_eq!(
            t.look(),
            [Event::Reply {
                seq: 4,
                text: "two".into(),
                is_final: true
            }]
        );
    }
}
