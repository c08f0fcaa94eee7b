//! The Messages API request body, streamed from a JSONL file of chat messages:
//!
//! ```text
//! {"model","max_tokens","stream"?,"thinking"?,"temperature"?,
//!  "system"?:[{"type":"text","text","cache_control"}],
//!  "tools"?:[{"name","description"?,"input_schema"}],
//!  "messages":[{"role":"user"|"assistant","content":[block,...]},...]}
//! ```
//!
//! The first message, when it is a system message, becomes the top-level `system`; the others
//! become turns of content blocks ([`super::blocks`]). The file is read once from its start,
//! one line at a time, to write the body; before that only its end is read (backwards) to place
//! the cache breakpoints ([`super::cache`]). Each line is checked without building a value and
//! its texts are copied as the JSON the line holds ([`crate::raw`]), as the OpenAI format does
//! (issue 25 item 11: the build cost 5.7 times openai-chat's CPU when every line was parsed
//! twice and re-serialised). Memory stays that of one message (see [`super::blocks`] for the
//! little more).

use std::fmt;
use std::io::{self, Read, Seek, SeekFrom, Write};

use serde_json::{Map, Value, json};

use super::MAX_TEMPERATURE;
use super::blocks::{Block, BlockSink, Origin, Position, Pushed, Repairs, Role, TurnBuilder};
use super::cache::{CachePlan, Planner};
use crate::jsonl::{self, BlockLineReader, JsonlError, NextLineAt};
use crate::long_line::{self, LIMITS, Limits, LongLine, SpliceError};
use crate::raw::{self, RawMessage};
use crate::tail::{BackLine, BackwardLines};

/// The settings of one request.
#[derive(Debug, Clone, Copy)]
pub struct RequestSettings<'a> {
    /// Model name, written as given (escaped).
    pub model: &'a str,
    /// `max_tokens`, required by the API.
    pub max_tokens: u32,
    /// `temperature` in [0, [`MAX_TEMPERATURE`]], if set.
    pub temperature: Option<f32>,
    /// Tool definitions, OpenAI's `{"type":"function","function":{...}}` or Anthropic's shape
    /// ([`anthropic_tool`]); `tools` is left out when none remains.
    pub tools: &'a [Value],
    /// Extended thinking (`"thinking"`), if on: then `temperature` is left out (the API refuses
    /// it with thinking) and the assistant messages' signed thinking blocks are sent back.
    pub thinking: Option<Thinking>,
    /// Ask for a streamed reply (`"stream":true`; left out otherwise, the API's default being
    /// a whole body).
    pub stream: bool,
}

/// Extended thinking as the request asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Thinking {
    /// `{"type":"enabled","budget_tokens":n}`: at most `n` tokens of thinking
    /// ([`MIN_THINKING_BUDGET`] or more, below `max_tokens`).
    Budget(u32),
    /// `{"type":"adaptive"}`: the model decides how much to think (newer models).
    Adaptive,
}

/// The smallest `budget_tokens` the API accepts.
pub const MIN_THINKING_BUDGET: u32 = 1024;

/// What [`write_request`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Chat messages read from the file (the system prompt included).
    pub messages: u64,
    /// Blocks marked with `cache_control` (system prompt or last tool included).
    pub breakpoints: u32,
    /// What was changed so the request keeps the API's rules.
    pub repairs: Repairs,
}

/// Why [`write_request`] failed.
#[derive(Debug)]
pub enum BodyError {
    /// The messages file could not be opened.
    Open(io::Error),
    /// A line could not be read or is not a chat message (names file and line).
    Read(JsonlError),
    /// Writing the body failed.
    Write(io::Error),
    /// The file holds no message to send besides the system prompt (the API needs one).
    NoMessages,
    /// A setting the API does not accept (e.g. `temperature 1.5`).
    Setting(String),
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::Open(e) | BodyError::Write(e) => write!(f, "{e}"),
            BodyError::Read(e) => write!(f, "{e}"),
            BodyError::NoMessages => {
                f.write_str("holds no user or assistant message to send (the API needs one)")
            }
            BodyError::Setting(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for BodyError {}

impl From<JsonlError> for BodyError {
    fn from(e: JsonlError) -> Self {
        BodyError::Read(e)
    }
}

/// Writes the request body for the chat messages of `file` to `out`. `open` opens the file from
/// its start; it is called more than once (see the module doc), and must give the same content
/// every time.
///
/// Errors: [`BodyError::Setting`] before anything is read, [`BodyError::Open`],
/// [`BodyError::Read`] naming file and line, [`BodyError::NoMessages`], [`BodyError::Write`].
pub fn write_request<R: Read + Seek, W: Write>(
    open: impl FnMut() -> io::Result<R>,
    file: &str,
    out: &mut W,
    settings: &RequestSettings<'_>,
) -> Result<Written, BodyError> {
    write_request_limited(open, file, out, settings, LIMITS)
}

/// [`write_request`] reading lines longer than `limits.line` as long lines
/// ([`crate::long_line`]; blocks of that size), for tests with small ones.
pub(crate) fn write_request_limited<R: Read + Seek, W: Write>(
    mut open: impl FnMut() -> io::Result<R>,
    file: &str,
    out: &mut W,
    settings: &RequestSettings<'_>,
    limits: Limits,
) -> Result<Written, BodyError> {
    check_settings(settings)?;
    let plan = plan_from_end(&mut open, file, limits)?;
    write_body(open, file, out, settings, &plan, limits)
}

/// [`write_request`] with the plan from a run over the whole file (the reference the plan from
/// the end is compared with).
#[cfg(test)]
pub(crate) fn write_request_planned_whole<R: Read + Seek, W: Write>(
    mut open: impl FnMut() -> io::Result<R>,
    file: &str,
    out: &mut W,
    settings: &RequestSettings<'_>,
) -> Result<Written, BodyError> {
    check_settings(settings)?;
    let plan = plan_run(&mut open, file, LIMITS)?;
    write_body(open, file, out, settings, &plan, LIMITS)
}

/// Errors: [`BodyError::Setting`] for a temperature or thinking budget the API refuses.
fn check_settings(settings: &RequestSettings<'_>) -> Result<(), BodyError> {
    if let Some(Thinking::Budget(n)) = settings.thinking {
        if n < MIN_THINKING_BUDGET {
            return Err(BodyError::Setting(format!(
                "thinking budget {n} is below {MIN_THINKING_BUDGET} tokens, the least Anthropic accepts"
            )));
        }
        if n >= settings.max_tokens {
            return Err(BodyError::Setting(format!(
                "thinking budget {n} must be below max_tokens ({}): thinking counts as output",
                settings.max_tokens
            )));
        }
    }
    match settings
        .temperature
        .filter(|t| !t.is_finite() || *t < 0.0 || *t > MAX_TEMPERATURE)
    {
        Some(t) => Err(BodyError::Setting(format!(
            "temperature {t} is outside 0–{MAX_TEMPERATURE}, the range Anthropic accepts"
        ))),
        None => Ok(()),
    }
}

/// The cache plan from a run over the end of the file: read backwards, a run is tried from
/// the earliest non-`tool` message read but the earliest, over 4, 8, 16, ... messages, until it closes two user
/// turns ([`Planner::complete`]) or starts at the file's first message. A line the backward
/// read cannot take (not a chat message, a blank line only `str::trim` sees as blank) ends
/// the shortcut: the plan then comes from a run over the whole file, which reports a bad line
/// with its number. Errors: [`BodyError::NoMessages`] when the file has no block to send.
fn plan_from_end<R: Read + Seek>(
    open: &mut impl FnMut() -> io::Result<R>,
    file: &str,
    limits: Limits,
) -> Result<CachePlan, BodyError> {
    let mut back = BackwardLines::from_end(open().map_err(BodyError::Open)?, file)
        .map_err(|e| BodyError::Open(io::Error::other(e.to_string())))?;
    // (offset, is a tool message) of the lines read, last first.
    let mut lines: Vec<(u64, bool)> = Vec::new();
    let mut want = 4usize;
    loop {
        let mut at_start = false;
        while lines.len() < want {
            match back.prev_line_bounded(limits.line) {
                Ok(Some(BackLine::Line(offset, bytes))) => match raw::parse_line(bytes) {
                    Ok(m) => lines.push((offset, m.role.is("tool"))),
                    Err(_) => return plan_run(open, file, limits),
                },
                // A line too long to hold (a 20 MB reply) is not read here: it is never where
                // a run starts (taken as a `tool` message), the run reads it.
                Ok(Some(BackLine::Long { offset, .. })) => lines.push((offset, true)),
                Ok(None) => {
                    at_start = true;
                    break;
                }
                Err(_) => return plan_run(open, file, limits),
            }
        }
        if at_start {
            return plan_run(open, file, limits);
        }
        // Never the earliest line read: it may be the file's first (a system prompt, or the
        // start of the conversation), which only a run from the start sees as such.
        let after_first = &lines[..lines.len() - 1];
        if let Some((offset, _)) = after_first.iter().rev().find(|(_, tool)| !tool) {
            let mut reader = open().map_err(BodyError::Open)?;
            reader
                .seek(SeekFrom::Start(*offset))
                .map_err(BodyError::Open)?;
            if let Some(plan) = plan_tail(reader, file, *offset, limits)? {
                return Ok(plan);
            }
        }
        want *= 2;
    }
}

/// The plan of a run from byte `offset` (a non-`tool` message after the first) to the end,
/// when it closes two user turns; `None` when it does not or a line does not parse.
fn plan_tail<R: Read + Seek>(
    reader: R,
    file: &str,
    offset: u64,
    limits: Limits,
) -> Result<Option<CachePlan>, BodyError> {
    let mut planner = Planner::new();
    let run = Run {
        lines: BlockLineReader::at_offset(reader, file, offset)
            .block_bytes(limits.line.min(jsonl::BLOCK_BYTES)),
        builder: TurnBuilder::continuing(),
        tail: true,
        limits,
    };
    let Some((_, builder)) = run.messages(&mut planner, |_, _| Ok(()))? else {
        return Ok(None);
    };
    builder.finish(&mut planner).map_err(BodyError::Write)?;
    Ok(planner.complete().then(|| planner.finish()))
}

/// The plan of a run over the whole file (from its first message, `first` true), as the
/// writing run sees it. Errors: a bad line (file:line), [`BodyError::NoMessages`].
fn plan_run<R: Read + Seek>(
    open: &mut impl FnMut() -> io::Result<R>,
    file: &str,
    limits: Limits,
) -> Result<CachePlan, BodyError> {
    let mut planner = Planner::new();
    stream(
        open().map_err(BodyError::Open)?,
        file,
        (false, limits),
        &mut planner,
        |_, _| Ok(()),
    )?;
    if planner.blocks() == 0 {
        return Err(BodyError::NoMessages);
    }
    Ok(planner.finish())
}

/// The body, with the breakpoints of `plan` and the summary's.
fn write_body<R: Read + Seek, W: Write>(
    mut open: impl FnMut() -> io::Result<R>,
    file: &str,
    out: &mut W,
    settings: &RequestSettings<'_>,
    plan: &CachePlan,
    limits: Limits,
) -> Result<Written, BodyError> {
    let tools: Vec<Value> = settings.tools.iter().filter_map(anthropic_tool).collect();

    let write = |e: io::Error| BodyError::Write(e);
    out.write_all(b"{\"model\":").map_err(write)?;
    write_json(out, settings.model).map_err(write)?;
    write!(out, ",\"max_tokens\":{}", settings.max_tokens).map_err(write)?;
    if settings.stream {
        out.write_all(b",\"stream\":true").map_err(write)?;
    }
    match settings.thinking {
        Some(Thinking::Budget(n)) => write!(
            out,
            ",\"thinking\":{{\"type\":\"enabled\",\"budget_tokens\":{n}}}"
        )
        .map_err(write)?,
        Some(Thinking::Adaptive) => out
            .write_all(b",\"thinking\":{\"type\":\"adaptive\"}")
            .map_err(write)?,
        None => {}
    }
    if let Some(t) = settings.temperature.filter(|_| settings.thinking.is_none()) {
        out.write_all(b",\"temperature\":").map_err(write)?;
        write_json(out, &t).map_err(write)?;
    }
    let mut sink = TurnWriter {
        out,
        plan,
        role: None,
        marked: 0,
        piece: None,
    };
    let (messages, repairs) = stream(
        open().map_err(BodyError::Open)?,
        file,
        (settings.thinking.is_some(), limits),
        &mut sink,
        |system, sink| sink.head(system, &tools),
    )?;
    if sink.role.is_some() {
        sink.out.write_all(b"]}").map_err(write)?;
    }
    sink.out.write_all(b"]}").map_err(write)?;
    Ok(Written {
        messages,
        breakpoints: sink.marked,
        repairs,
    })
}

/// Reads the messages of `reader` into `sink`: `head(system prompt, sink)` is called once,
/// before the first block, with the first message's content when that message is a system
/// message (`None` otherwise, or when the prompt is blank); `reasoning`: assistant messages'
/// reasoning is sent ([`TurnBuilder::replaying_reasoning`]; the cache plan, which marks only
/// user turns, is the same either way); `limits`: of long lines ([`Run`]). Returns (messages
/// read, repairs).
fn stream<R: Read + Seek, S: LongSink>(
    reader: R,
    file: &str,
    (reasoning, limits): (bool, Limits),
    sink: &mut S,
    head: impl FnMut(Option<&str>, &mut S) -> io::Result<()>,
) -> Result<(u64, Repairs), BodyError> {
    let run = Run {
        lines: BlockLineReader::new(reader, file).block_bytes(limits.line.min(jsonl::BLOCK_BYTES)),
        builder: TurnBuilder::new().replaying_reasoning(reasoning),
        tail: false,
        limits,
    };
    let Some((index, builder)) = run.messages(sink, head)? else {
        // Not reached: only a tail run gives up.
        return Err(BodyError::NoMessages);
    };
    let repairs = builder.finish(sink).map_err(BodyError::Write)?;
    Ok((index as u64, repairs))
}

/// A run over the lines of a messages file, from its start or (`tail`) from a non-`tool`
/// message after the first (the plan from the end: indexes unknown, no system prompt taken).
/// A line longer than `limits.line` (the reader's block) is a long line.
struct Run<R> {
    lines: BlockLineReader<R>,
    builder: TurnBuilder,
    tail: bool,
    limits: Limits,
}

/// What is known of the run so far.
struct State {
    index: usize,
    head_done: bool,
}

impl<R: Read + Seek> Run<R> {
    /// Hands every message's blocks to `sink` (see [`stream`] for `head`); returns the
    /// messages read and the builder (to finish). A line longer than a block is not held when
    /// its message can be made from its compact copy ([`crate::long_line`]): the blocks are
    /// made from it and written with each long string copied from the file
    /// ([`LongSink::long_blocks`]); else (a long text that is decoded: a system prompt, tool
    /// arguments, a thinking block, a text split by an order record) it is read whole.
    ///
    /// Errors: a line that is not a chat message (file:line) — for a tail run, `None`
    /// instead —, a failed read or write.
    fn messages<S: LongSink>(
        mut self,
        sink: &mut S,
        mut head: impl FnMut(Option<&str>, &mut S) -> io::Result<()>,
    ) -> Result<Option<(usize, TurnBuilder)>, BodyError> {
        let file = self.lines.file().to_string();
        let invalid = |line: u64, message: String| {
            BodyError::Read(JsonlError::Invalid {
                file: file.clone(),
                line,
                message,
            })
        };
        let mut state = State {
            index: if self.tail { usize::MAX } else { 0 },
            head_done: self.tail,
        };
        loop {
            let long = match self.lines.next_bounded_at(self.limits.line)? {
                None => break,
                Some(NextLineAt::Line((line, key, bytes))) => {
                    let message = match raw::parse_line(bytes) {
                        Ok(m) => m,
                        Err(_) if self.tail => return Ok(None),
                        Err(e) => return Err(invalid(line, e)),
                    };
                    step(
                        &mut state,
                        key,
                        &message,
                        &mut self.builder,
                        sink,
                        &mut head,
                    )?;
                    continue;
                }
                Some(NextLineAt::Long { line, offset }) => {
                    long_line::scan_long(&mut self.lines, (line, offset), self.limits)?
                }
            };
            if self.compact_step(&long, &mut state, sink, &mut head)? {
                continue;
            }
            let io_err = |e: io::Error| {
                BodyError::Read(JsonlError::Io {
                    file: file.clone(),
                    line: Some(long.line),
                    message: e.to_string(),
                })
            };
            let bytes = long.read_whole(self.lines.reader_mut()).map_err(io_err)?;
            if jsonl::is_blank(&bytes) {
                continue;
            }
            let message = match raw::parse_line(&bytes) {
                Ok(m) => m,
                Err(_) if self.tail => return Ok(None),
                Err(e) => return Err(invalid(long.line, e)),
            };
            step(
                &mut state,
                long.offset,
                &message,
                &mut self.builder,
                sink,
                &mut head,
            )?;
        }
        if !state.head_done {
            head(None, sink).map_err(BodyError::Write)?;
        }
        Ok(Some((state.index, self.builder)))
    }

    /// The long line `long` from its compact copy; `false` (nothing changed) when it must be
    /// read whole.
    fn compact_step<S: LongSink>(
        &mut self,
        long: &LongLine,
        state: &mut State,
        sink: &mut S,
        head: &mut impl FnMut(Option<&str>, &mut S) -> io::Result<()>,
    ) -> Result<bool, BodyError> {
        let Some(compact) = long.compact().filter(|_| long.long_strings_non_blank()) else {
            return Ok(false);
        };
        let Ok(message) = raw::parse_line(compact) else {
            return Ok(false);
        };
        // The system prompt is decoded.
        if state.index == 0 && message.role.is("system") {
            return Ok(false);
        }
        if !state.head_done {
            head(None, sink).map_err(BodyError::Write)?;
            state.head_done = true;
        }
        let saved = self.builder.clone();
        long_line::clear_decoded();
        let made = self.builder.made(state.index, &message);
        let done = !long_line::take_decoded()
            && sink
                .long_blocks(made, long, self.lines.reader_mut())
                .map_err(|e| match e {
                    SpliceError::Write(e) => BodyError::Write(e),
                    SpliceError::Read(e) => BodyError::Read(JsonlError::Io {
                        file: self.lines.file().to_string(),
                        line: Some(long.line),
                        message: e.to_string(),
                    }),
                })?;
        if done {
            state.index = state.index.saturating_add(1);
        } else {
            self.builder = saved;
        }
        Ok(done)
    }
}

/// One message of a run: the system prompt (the first message, when a system message) to
/// `head`, any other to the builder.
fn step<S: BlockSink>(
    state: &mut State,
    key: u64,
    message: &RawMessage<'_>,
    builder: &mut TurnBuilder,
    sink: &mut S,
    head: &mut impl FnMut(Option<&str>, &mut S) -> io::Result<()>,
) -> Result<(), BodyError> {
    if state.index == 0 && message.role.is("system") {
        let system = message.content.map(|c| c.value());
        let system = system.as_deref().filter(|s| !s.trim().is_empty());
        head(system, sink).map_err(BodyError::Write)?;
        state.head_done = true;
    } else {
        if !state.head_done {
            head(None, sink).map_err(BodyError::Write)?;
            state.head_done = true;
        }
        builder
            .push(state.index, key, message, sink)
            .map_err(BodyError::Write)?;
    }
    state.index = state.index.saturating_add(1);
    Ok(())
}

/// A [`BlockSink`] that also takes the blocks of a long line made from its compact copy.
trait LongSink: BlockSink {
    /// Hands on `made`, the blocks of `long`'s compact message; a sink that writes copies
    /// each long string from `reader` in place of its placeholder ([`LongLine::splice`]).
    /// `false`, nothing written and nothing changed, when the output would not be the whole
    /// line's (the line is then read whole).
    fn long_blocks<R: Read + Seek>(
        &mut self,
        made: Pushed<'_>,
        long: &LongLine,
        reader: &mut R,
    ) -> Result<bool, SpliceError>;
}

impl LongSink for Planner {
    fn long_blocks<R: Read + Seek>(
        &mut self,
        made: Pushed<'_>,
        long: &LongLine,
        _reader: &mut R,
    ) -> Result<bool, SpliceError> {
        made.flush(long.offset, self).map_err(SpliceError::Write)?;
        Ok(true)
    }
}

/// An Anthropic tool definition `{"name","description"?,"input_schema"}` from OpenAI's
/// `{"type":"function","function":{"name","description"?,"parameters"?}}` (a missing
/// `parameters` becomes an empty object schema). A definition that already has `input_schema`
/// is kept as it is; one without a name is left out (`None`).
pub fn anthropic_tool(tool: &Value) -> Option<Value> {
    if tool.get("input_schema").is_some() {
        return Some(tool.clone());
    }
    let f = tool.get("function").unwrap_or(tool);
    let name = f.get("name").and_then(Value::as_str)?;
    let mut out = Map::new();
    out.insert("name".into(), Value::from(name));
    if let Some(d) = f.get("description").filter(|d| d.is_string()) {
        out.insert("description".into(), d.clone());
    }
    let schema = f
        .get("parameters")
        .filter(|p| p.is_object())
        .cloned()
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    out.insert("input_schema".into(), schema);
    Some(Value::Object(out))
}

const CACHE_CONTROL: &[u8] = b",\"cache_control\":{\"type\":\"ephemeral\"}";

/// The writing run's sink: writes `system`, `tools`, then the turns.
struct TurnWriter<'a, W> {
    out: &'a mut W,
    plan: &'a CachePlan,
    /// Role of the open turn (`None` before the first block).
    role: Option<Role>,
    marked: u32,
    /// Where blocks are written instead of `out` while a long line's are made.
    piece: Option<Vec<u8>>,
}

impl<W: Write> TurnWriter<'_, W> {
    /// `,"system":[...]`, `,"tools":[...]`, `,"messages":[`: the system prompt carries a
    /// breakpoint, or else the last tool does.
    fn head(&mut self, system: Option<&str>, tools: &[Value]) -> io::Result<()> {
        if let Some(system) = system {
            self.out
                .write_all(b",\"system\":[{\"type\":\"text\",\"text\":")?;
            write_json(self.out, system)?;
            self.out.write_all(CACHE_CONTROL)?;
            self.out.write_all(b"}]")?;
            self.marked += 1;
        }
        if !tools.is_empty() {
            self.out.write_all(b",\"tools\":[")?;
            for (i, tool) in tools.iter().enumerate() {
                if i > 0 {
                    self.out.write_all(b",")?;
                }
                if system.is_none() && i == tools.len() - 1 {
                    let mut marked = tool.clone();
                    if let Some(map) = marked.as_object_mut() {
                        map.insert("cache_control".into(), json!({"type": "ephemeral"}));
                        self.marked += 1;
                    }
                    write_json(self.out, &marked)?;
                } else {
                    write_json(self.out, tool)?;
                }
            }
            self.out.write_all(b"]")?;
        }
        self.out.write_all(b",\"messages\":[")
    }
}

impl<W: Write> BlockSink for TurnWriter<'_, W> {
    fn block(
        &mut self,
        role: Role,
        block: &Block<'_>,
        origin: Origin,
        at: Position,
    ) -> io::Result<()> {
        let opening = self.role != Some(role);
        let closing = opening && self.role.is_some();
        self.role = Some(role);
        let cache = origin == Origin::Summary || self.plan.marks(at);
        if cache {
            self.marked += 1;
        }
        match self.piece.as_mut() {
            Some(piece) => write_turn_block(piece, role, opening, closing, block, cache),
            None => write_turn_block(self.out, role, opening, closing, block, cache),
        }
    }
}

impl<W: Write> LongSink for TurnWriter<'_, W> {
    fn long_blocks<R: Read + Seek>(
        &mut self,
        made: Pushed<'_>,
        long: &LongLine,
        reader: &mut R,
    ) -> Result<bool, SpliceError> {
        let saved = (self.role, self.marked);
        self.piece = Some(Vec::new());
        let flushed = made.flush(long.offset, self);
        let piece = self.piece.take().unwrap_or_default();
        flushed.map_err(SpliceError::Write)?;
        let done = long.splice(&piece, false, reader, self.out)?;
        if !done {
            (self.role, self.marked) = saved;
        }
        Ok(done)
    }
}

/// A block of a turn: `,` before it in the open turn, else the turn's opening (after the
/// previous turn's closing `]}`, when `closing`).
fn write_turn_block(
    out: &mut impl Write,
    role: Role,
    opening: bool,
    closing: bool,
    block: &Block<'_>,
    cache: bool,
) -> io::Result<()> {
    if !opening {
        out.write_all(b",")?;
    } else {
        if closing {
            out.write_all(b"]},")?;
        }
        write!(out, "{{\"role\":\"{}\",\"content\":[", role.as_str())?;
    }
    write_block(out, block, cache)
}

/// One block as JSON, with `cache_control` when `cache`.
fn write_block(out: &mut impl Write, block: &Block<'_>, cache: bool) -> io::Result<()> {
    match block {
        // As received; the planner marks only user turns, so no breakpoint lands here.
        Block::Reasoning(json) => return out.write_all(json.as_bytes()),
        Block::Text(text) => {
            out.write_all(b"{\"type\":\"text\",\"text\":")?;
            text.write_json(out)?;
        }
        Block::ToolUse { id, name, input } => {
            out.write_all(b"{\"type\":\"tool_use\",\"id\":")?;
            write_json(out, id)?;
            out.write_all(b",\"name\":")?;
            name.write_json(out)?;
            out.write_all(b",\"input\":")?;
            write_json(out, input)?;
        }
        Block::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => {
            out.write_all(b"{\"type\":\"tool_result\",\"tool_use_id\":")?;
            write_json(out, tool_use_id)?;
            if !content.is_blank() {
                out.write_all(b",\"content\":")?;
                content.write_json(out)?;
            }
            if *is_error {
                out.write_all(b",\"is_error\":true")?;
            }
        }
    }
    if cache {
        out.write_all(CACHE_CONTROL)?;
    }
    out.write_all(b"}")
}

fn write_json(out: &mut impl Write, value: &(impl serde::Serialize + ?Sized)) -> io::Result<()> {
    serde_json::to_writer(out, value).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compress::summary_message;
    use crate::{ChatMessage, ToolCall};

    fn lines(messages: &[ChatMessage]) -> String {
        messages
            .iter()
            .map(|m| serde_json::to_string(m).unwrap() + "\n")
            .collect()
    }

    fn body(text: &str, settings: &RequestSettings<'_>) -> (Value, Written) {
        let mut out = Vec::new();
        let written = write_request(
            || Ok(io::Cursor::new(text.as_bytes())),
            "current.jsonl",
            &mut out,
            settings,
        )
        .unwrap();
        let value = serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out)));
        (value, written)
    }

    fn settings(tools: &[Value]) -> RequestSettings<'_> {
        RequestSettings {
            model: "claude-x",
            max_tokens: 1000,
            temperature: None,
            tools,
            thinking: None,
            stream: false,
        }
    }

    fn cache() -> Value {
        json!({"type": "ephemeral"})
    }

    #[test]
    fn system_tools_and_turns() {
        let call = ToolCall::new("call_1", "read", r#"{"path":"a"}"#);
        let text = lines(&[
            ChatMessage::text("system", "Be careful."),
            ChatMessage::text("user", "go"),
            ChatMessage::assistant_calls(vec![call.clone()]),
            ChatMessage::tool_result(&call, "A"),
        ]) + "\n\n";
        let tools = [
            json!({"type": "function", "function": {"name": "read", "description": "Read.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}),
        ];
        let (b, w) = body(&text, &settings(&tools));
        assert_eq!(w.messages, 4);
        assert_eq!(b["model"], "claude-x");
        assert_eq!(b["max_tokens"], 1000);
        assert!(b.get("temperature").is_none());
        assert_eq!(
            b["system"],
            json!([{"type": "text", "text": "Be careful.", "cache_control": cache()}])
        );
        assert_eq!(
            b["tools"],
            json!([{"name": "read", "description": "Read.",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}])
        );
        assert_eq!(
            b["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "go", "cache_control": cache()}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "read", "input": {"path": "a"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "A", "cache_control": cache()}]},
            ])
        );
        assert_eq!(w.breakpoints, 3);
    }

    #[test]
    fn summary_is_a_breakpoint_and_single_turns_get_no_tail() {
        let text = lines(&[
            ChatMessage::text("system", "S"),
            summary_message(2, 5, "earlier work"),
            ChatMessage::text("user", "continue"),
        ]);
        let (b, w) = body(&text, &settings(&[]));
        let content = &b["messages"][0]["content"];
        assert_eq!(content[0]["cache_control"], cache());
        assert!(content[1].get("cache_control").is_none());
        assert_eq!(w.breakpoints, 2);
        assert!(b.get("tools").is_none());
    }

    #[test]
    fn without_system_the_last_tool_is_a_breakpoint() {
        let text = lines(&[ChatMessage::text("user", "hi")]);
        let tools = [
            json!({"type": "function", "function": {"name": "a"}}),
            json!({"name": "b", "input_schema": {"type": "object"}}),
            json!({"type": "function", "function": {"description": "nameless"}}),
        ];
        let (b, w) = body(&text, &settings(&tools));
        assert!(b.get("system").is_none());
        assert_eq!(
            b["tools"],
            json!([
                {"name": "a", "input_schema": {"type": "object", "properties": {}}},
                {"name": "b", "input_schema": {"type": "object"}, "cache_control": cache()},
            ])
        );
        assert_eq!(w.breakpoints, 1);
    }

    #[test]
    fn settings_and_empty_contexts_are_checked() {
        let text = lines(&[ChatMessage::text("user", "hi")]);
        let mut s = settings(&[]);
        s.temperature = Some(0.25);
        let (b, _) = body(&text, &s);
        assert_eq!(b["temperature"].to_string(), "0.25");
        s.temperature = Some(1.5);
        let e = write_request(
            || Ok(io::Cursor::new(text.as_bytes())),
            "c",
            &mut Vec::new(),
            &s,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "temperature 1.5 is outside 0–1, the range Anthropic accepts"
        );
        let only_system = lines(&[ChatMessage::text("system", "S")]);
        let e = write_request(
            || Ok(io::Cursor::new(only_system.as_bytes())),
            "c",
            &mut Vec::new(),
            &settings(&[]),
        )
        .unwrap_err();
        assert!(matches!(e, BodyError::NoMessages), "{e}");
        let torn = "{\"role\":\"user\",\"content\":\"a\"}\n{\"role\":";
        let e = write_request(
            || Ok(io::Cursor::new(torn.as_bytes())),
            "current.jsonl",
            &mut Vec::new(),
            &settings(&[]),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("current.jsonl line 2: not valid:"),
            "{e}"
        );
    }

    #[test]
    fn signed_thinking_is_sent_back_as_received_before_tool_use_only_with_thinking_on() {
        use crate::ReasoningItem;
        let signed =
            r#"{"type":"thinking","thinking":"Read \"a\" first. 上下文","signature":"c2ln"}"#;
        let redacted = r#"{"type":"redacted_thinking","data":"EmwK"}"#;
        let item = |provider: &str, kind: &str, data: &str| ReasoningItem {
            provider: provider.into(),
            kind: kind.into(),
            data: data.into(),
        };
        let call = ToolCall::new("call_1", "read", r#"{"path":"a"}"#);
        let mut reply = ChatMessage::assistant_calls(vec![call.clone()]);
        reply.content = Some("Reading.".into());
        reply.reasoning = vec![
            item("anthropic", "thinking", signed),
            item(
                "anthropic",
                "thinking",
                r#"{"type":"thinking","thinking":"cut","signature":""}"#,
            ),
            item(
                "anthropic",
                "thinking",
                r#"{"type":"thinking","thinking":"x"}"#,
            ),
            item("anthropic", "thinking", "{not json"),
            item("openai-chat", "reasoning_content", "\"elsewhere\""),
            item("anthropic", "redacted_thinking", redacted),
        ];
        let text = lines(&[
            ChatMessage::text("user", "go"),
            reply,
            ChatMessage::tool_result(&call, "A"),
        ]);
        let mut s = settings(&[]);
        s.max_tokens = 2000;
        s.thinking = Some(Thinking::Budget(1024));
        s.temperature = Some(0.5);
        s.stream = true;
        let mut out = Vec::new();
        let w = write_request(
            || Ok(io::Cursor::new(text.as_bytes())),
            "current.jsonl",
            &mut out,
            &s,
        )
        .unwrap();
        let raw = String::from_utf8(out).unwrap();
        // The stored bytes, as they are, first in the assistant turn.
        let turn = format!(
            r#"{{"role":"assistant","content":[{signed},{redacted},{{"type":"text","text":"Reading."}},{{"type":"tool_use""#
        );
        assert!(raw.contains(&turn), "{raw}");
        assert_eq!(w.repairs.unsendable_reasoning, 4);
        let b: Value = serde_json::from_str(&raw).unwrap();
        assert_eq!(
            b["thinking"],
            json!({"type": "enabled", "budget_tokens": 1024})
        );
        assert_eq!(b["stream"], json!(true));
        assert!(
            b.get("temperature").is_none(),
            "no temperature with thinking"
        );
        // Adaptive thinking.
        s.thinking = Some(Thinking::Adaptive);
        let (b, _) = body(&text, &s);
        assert_eq!(b["thinking"], json!({"type": "adaptive"}));
        // Thinking off: no reasoning sent, nothing counted as left out.
        let (b, w) = body(&text, &settings(&[]));
        assert_eq!(b["messages"][1]["content"][0]["type"], "text");
        assert!(b.get("thinking").is_none() && b.get("stream").is_none());
        assert_eq!(w.repairs.unsendable_reasoning, 0);
    }

    #[test]
    fn a_thinking_budget_the_api_refuses_is_an_error() {
        let text = lines(&[ChatMessage::text("user", "hi")]);
        let mut s = settings(&[]);
        for (budget, said) in [
            (
                1000,
                "thinking budget 1000 is below 1024 tokens, the least Anthropic accepts",
            ),
            (
                1000 + 24,
                "thinking budget 1024 must be below max_tokens (1000): thinking counts as output",
            ),
        ] {
            s.thinking = Some(Thinking::Budget(budget));
            let e = write_request(
                || Ok(io::Cursor::new(text.as_bytes())),
                "c",
                &mut Vec::new(),
                &s,
            )
            .unwrap_err();
            assert_eq!(e.to_string(), said);
        }
    }
}

#[cfg(test)]
mod interleaved_tests {
    use super::*;
    use crate::ChatMessage;
    use crate::anthropic::{AnthropicStream, PROVIDER, parse_response, reasoning_items};

    /// A reply with interleaved thinking, as current Claude models send it: thinking, a tool
    /// call, more thinking (here signed with an empty text), a second call, then text.
    fn reply_blocks() -> Value {
        json!([
            {"type": "thinking", "thinking": "First \"a\".", "signature": "sig-A"},
            {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a"}},
            {"type": "thinking", "thinking": "", "signature": "sig-B"},
            {"type": "tool_use", "id": "t2", "name": "read", "input": {"path": "b"}},
            {"type": "text", "text": "Both read."},
        ])
    }

    /// The SSE lines of `content` (a block per start / delta / stop).
    fn events(content: &Value) -> Vec<String> {
        let mut out = vec![
            r#"data: {"type":"message_start","message":{"role":"assistant","content":[],"usage":{"input_tokens":1,"output_tokens":1}}}"#.to_string(),
        ];
        for (i, b) in content.as_array().unwrap().iter().enumerate() {
            let start = match b["type"].as_str().unwrap() {
                "thinking" => json!({"type": "thinking", "thinking": "", "signature": ""}),
                "text" => json!({"type": "text", "text": ""}),
                _ => json!({"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}),
            };
            out.push(format!(
                "data: {}",
                json!({"type": "content_block_start", "index": i, "content_block": start})
            ));
            let delta = match b["type"].as_str().unwrap() {
                "thinking" => vec![
                    json!({"type": "thinking_delta", "thinking": b["thinking"]}),
                    json!({"type": "signature_delta", "signature": b["signature"]}),
                ],
                "text" => vec![json!({"type": "text_delta", "text": b["text"]})],
                _ => vec![
                    json!({"type": "input_json_delta", "partial_json": b["input"].to_string()}),
                ],
            };
            for d in delta {
                out.push(format!(
                    "data: {}",
                    json!({"type": "content_block_delta", "index": i, "delta": d})
                ));
            }
            out.push(format!(
                "data: {}",
                json!({"type": "content_block_stop", "index": i})
            ));
        }
        out.push(r#"data: {"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}"#.into());
        out.push(r#"data: {"type":"message_stop"}"#.into());
        out
    }

    /// The assistant turn of the request built with thinking on after `reply`.
    fn replayed(reply: ChatMessage) -> Value {
        let calls = reply.calls().to_vec();
        let mut messages = vec![ChatMessage::text("user", "go"), reply];
        messages.extend(calls.iter().map(|c| ChatMessage::tool_result(c, "x")));
        let text: String = messages
            .iter()
            .map(|m| serde_json::to_string(m).unwrap() + "\n")
            .collect();
        let settings = RequestSettings {
            model: "claude-x",
            max_tokens: 4000,
            temperature: None,
            tools: &[],
            thinking: Some(Thinking::Budget(1024)),
            stream: false,
        };
        let mut out = Vec::new();
        let w = write_request(
            || Ok(io::Cursor::new(text.as_bytes())),
            "current.jsonl",
            &mut out,
            &settings,
        )
        .unwrap();
        assert!(w.repairs.is_empty(), "{:?}", w.repairs);
        let body: Value = serde_json::from_slice(&out).unwrap();
        body["messages"][1]["content"].clone()
    }

    #[test]
    fn interleaved_thinking_is_sent_back_in_the_order_it_came_streamed_or_whole() {
        let content = reply_blocks();
        // Streamed.
        let mut fold = AnthropicStream::new();
        for line in events(&content) {
            fold.line(&line).unwrap();
            // The blank line that ends each server-sent event.
            fold.line("").unwrap();
        }
        let streamed = fold.finish().unwrap().message;
        assert_eq!(replayed(streamed), content);
        // Whole.
        let body = json!({"type": "message", "role": "assistant", "content": content,
            "stop_reason": "tool_use"});
        let mut parsed = parse_response(&body).unwrap();
        parsed.message.reasoning = reasoning_items(body.to_string().as_bytes());
        parsed.message.reasoning.extend(parsed.order.item(PROVIDER));
        assert_eq!(replayed(parsed.message), content);
    }

    #[test]
    fn text_blocks_around_a_call_are_split_back_and_the_default_order_adds_no_record() {
        let content = json!([
            {"type": "text", "text": "Reading é."},
            {"type": "thinking", "thinking": "then b", "signature": "s1"},
            {"type": "tool_use", "id": "t1", "name": "read", "input": {}},
            {"type": "text", "text": "Done."},
        ]);
        let body = json!({"type": "message", "role": "assistant", "content": content});
        let mut parsed = parse_response(&body).unwrap();
        parsed.message.reasoning = reasoning_items(body.to_string().as_bytes());
        parsed.message.reasoning.extend(parsed.order.item(PROVIDER));
        assert_eq!(parsed.message.content.as_deref(), Some("Reading é.Done."));
        assert_eq!(replayed(parsed.message), content);

        // Thinking, text, calls: as every reply was sent before, no record.
        let plain = json!({"type": "message", "role": "assistant", "content": [
            {"type": "thinking", "thinking": "t", "signature": "s"},
            {"type": "text", "text": "x"},
            {"type": "tool_use", "id": "t1", "name": "read", "input": {}}]});
        let parsed = parse_response(&plain).unwrap();
        assert_eq!(parsed.order.item(PROVIDER), None);
    }
}
