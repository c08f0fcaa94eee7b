//! How `ctxhost ask` and `ctxhost show --follow` print a task as it runs: the
//! [`crate::ops::follow::Event`]s as text for a person ([`Render::text`]: replies, tool calls
//! with a bounded view of their results, compressions, the answer and the counters; colours
//! only on a terminal and never with `NO_COLOR`; a "waiting" line on stderr while nothing
//! happens, rewritten in place on a terminal, a plain line every 30 s otherwise) or as one JSON
//! object per line ([`Render::json`]). Everything a task wrote is escaped before it reaches the
//! terminal ([`crate::untrusted::terminal`]).

use std::io::{IsTerminal, Write};
use std::time::Duration;

use crate::db::Status;
use crate::ops::follow::Event;
use crate::untrusted::terminal;

/// Lines of a tool result shown (the rest is counted).
const RESULT_LINES: usize = 6;
/// Characters of a tool call's arguments shown.
const ARGS_CHARS: usize = 200;
/// How often a plain progress line is printed when stderr is not a terminal.
const PLAIN_PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// Whether `stream` gets colours: a terminal, and `NO_COLOR` unset (<https://no-color.org>).
pub(crate) fn colours(stream_is_terminal: bool) -> bool {
    stream_is_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

pub(crate) use crate::ops::thousands;

/// `1 tool call` / `2 tool calls`.
fn count(n: i64, what: &str) -> String {
    format!("{} {what}{}", thousands(n), if n == 1 { "" } else { "s" })
}

/// What the task is doing while nothing new is seen (for the progress line).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    Model,
    Tool(String),
    /// Something else than the model (`object store unreachable: …, retrying (n/N)`).
    Waiting(String),
}

/// Prints events; see the module doc.
pub struct Render {
    json: bool,
    colour: bool,
    /// Print the task's prompt (show --follow; `ask` does not repeat what was typed).
    show_prompt: bool,
    /// A reply without tool calls, held until the next event says whether it is the answer.
    pending_final: Option<String>,
    /// Text of the reply being streamed was printed (no newline yet).
    streaming: bool,
    /// Reasoning of the reply being streamed was printed (no newline yet).
    streaming_reasoning: bool,
    /// The reply text printed as it streamed, until its message arrives: the message then
    /// prints only what was not seen.
    streamed: String,
    /// The reasoning text printed as it streamed, until its message arrives.
    streamed_reasoning: String,
    /// The final reply, when it was printed as it streamed (the end does not repeat it).
    answer_shown: Option<String>,
    /// The error of the last failed LLM call printed (the end does not repeat it).
    failure_shown: Option<String>,
    phase: Phase,
    /// A progress line is on stderr (to be cleared on a terminal).
    progress_shown: bool,
    progress_terminal: bool,
    last_plain: Duration,
    /// The seconds the progress line shows (it is rewritten when they change).
    shown_secs: Option<u64>,
}

impl Render {
    /// Text for a person on stdout (colours when stdout is a terminal and `NO_COLOR` is unset).
    pub fn text(show_prompt: bool) -> Render {
        Render::new(false, show_prompt)
    }

    /// One JSON object per event on stdout.
    pub fn json() -> Render {
        Render::new(true, false)
    }

    fn new(json: bool, show_prompt: bool) -> Render {
        Render {
            json,
            colour: colours(std::io::stdout().is_terminal()),
            show_prompt,
            pending_final: None,
            streaming: false,
            streaming_reasoning: false,
            streamed: String::new(),
            streamed_reasoning: String::new(),
            answer_shown: None,
            failure_shown: None,
            phase: Phase::Model,
            progress_shown: false,
            progress_terminal: std::io::stderr().is_terminal(),
            last_plain: Duration::ZERO,
            shown_secs: None,
        }
    }

    fn paint(&self, code: &str, s: &str) -> String {
        if self.colour {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }

    /// Print a status line on stderr (`compiling plugins…`), plain or dimmed.
    pub fn status(&mut self, text: &str) {
        self.clear_progress();
        let dim = colours(std::io::stderr().is_terminal());
        let mut err = std::io::stderr().lock();
        let _ = if dim {
            writeln!(err, "\x1b[2m{text}\x1b[0m")
        } else {
            writeln!(err, "{text}")
        };
    }

    fn clear_progress(&mut self) {
        if self.progress_shown && self.progress_terminal {
            let _ = write!(std::io::stderr().lock(), "\r\x1b[2K");
        }
        self.progress_shown = false;
        self.shown_secs = None;
    }

    /// While nothing happens: on a terminal a line on stderr rewritten in place ("waiting for
    /// the model… 12 s"); otherwise a plain line every 30 s. Nothing with `--json`.
    pub fn progress(&mut self, idle: Option<Duration>) {
        let Some(idle) = idle else {
            self.last_plain = Duration::ZERO;
            return;
        };
        if self.json || idle < Duration::from_secs(1) || self.streaming || self.streaming_reasoning
        {
            return;
        }
        let what = match &self.phase {
            Phase::Model => "waiting for the model".to_string(),
            Phase::Tool(t) => format!("running {}", terminal(t)),
            Phase::Waiting(w) => terminal(w).to_string(),
        };
        let mut err = std::io::stderr().lock();
        if self.progress_terminal {
            if self.shown_secs == Some(idle.as_secs()) {
                return;
            }
            self.shown_secs = Some(idle.as_secs());
            let line = format!("{what}… {} s", idle.as_secs());
            let line = if colours(true) {
                format!("\x1b[2m{line}\x1b[0m")
            } else {
                line
            };
            let _ = write!(err, "\r\x1b[2K{line}");
            let _ = err.flush();
            self.progress_shown = true;
        } else if idle >= self.last_plain + PLAIN_PROGRESS_EVERY {
            self.last_plain = idle;
            let _ = writeln!(err, "{what}… {} s", idle.as_secs());
        }
    }

    fn print_pending(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        if let Some(text) = self.pending_final.take() {
            writeln!(out, "{}", terminal(&text))?;
        }
        Ok(())
    }

    /// Print one event. Errors: stdout closed or failing.
    pub fn event(&mut self, event: &Event) -> anyhow::Result<()> {
        self.clear_progress();
        let mut out = std::io::stdout().lock();
        self.write_event(&mut out, event)
    }

    /// [`Render::event`] into `out`.
    fn write_event(&mut self, out: &mut impl Write, event: &Event) -> anyhow::Result<()> {
        if self.json {
            serde_json::to_writer(&mut *out, event)?;
            out.write_all(b"\n")?;
            out.flush()?;
            return Ok(());
        }
        if let Event::Waiting { on } = event {
            // Shown by the progress line.
            self.phase = on.clone().map_or(Phase::Model, Phase::Waiting);
            return Ok(());
        }
        // A message whose text (or reasoning) was printed as it streamed: only the rest.
        if let Event::Reply { text, is_final, .. } = event
            && !self.streamed.is_empty()
        {
            let streamed = std::mem::take(&mut self.streamed);
            if let Some(rest) = text.strip_prefix(streamed.as_str()) {
                if self.streaming || !rest.is_empty() {
                    writeln!(out, "{}", terminal(rest))?;
                }
                self.streaming = false;
                self.phase = Phase::Model;
                if *is_final {
                    self.answer_shown = Some(text.clone());
                }
                out.flush()?;
                return Ok(());
            }
        }
        if let Event::Reasoning {
            text: Some(text), ..
        } = event
            && !self.streamed_reasoning.is_empty()
        {
            let streamed = std::mem::take(&mut self.streamed_reasoning);
            if let Some(rest) = text.strip_prefix(streamed.as_str()) {
                if self.streaming_reasoning || !rest.is_empty() {
                    writeln!(out, "{}", self.paint("2", &terminal(rest)))?;
                }
                self.streaming_reasoning = false;
                out.flush()?;
                return Ok(());
            }
        }
        if self.streaming_reasoning && !matches!(event, Event::ReasoningDelta { .. }) {
            writeln!(out)?;
            self.streaming_reasoning = false;
        }
        if self.streaming && !matches!(event, Event::ReplyDelta { .. }) {
            writeln!(out)?;
            self.streaming = false;
        }
        if !matches!(event, Event::End { .. } | Event::LlmCall { .. }) {
            self.print_pending(out)?;
        }
        match event {
            Event::Task {
                uuid,
                status,
                model,
                provider,
            } => {
                let model = match (model, provider) {
                    (Some(m), Some(p)) => format!(" · {} ({})", terminal(m), terminal(p)),
                    (Some(m), None) => format!(" · {}", terminal(m)),
                    _ => String::new(),
                };
                let line = format!("task {uuid} · {status}{model}");
                writeln!(out, "{}", self.paint("2", &line))?;
            }
            Event::Prompt { text, .. } => {
                self.phase = Phase::Model;
                if self.show_prompt {
                    for l in terminal(text).lines() {
                        writeln!(out, "{} {l}", self.paint("1;36", ">"))?;
                    }
                }
            }
            Event::ReplyDelta { text } => {
                write!(out, "{}", terminal(text))?;
                self.streamed.push_str(text);
                self.streaming = true;
            }
            Event::StreamBroken { bytes, kept } => {
                // The line that streamed was ended above; what streams next starts afresh.
                let line = format!(
                    "[stream broken off after {} bytes: the text above is discarded; kept in {}]",
                    thousands(*bytes as i64),
                    terminal(kept)
                );
                writeln!(out, "{}", self.paint("33", &line))?;
                self.streamed.clear();
                self.streamed_reasoning.clear();
            }
            Event::ReasoningDelta { text } => {
                if !self.streaming_reasoning && self.streamed_reasoning.is_empty() {
                    write!(out, "{} ", self.paint("2;3", "thinking:"))?;
                }
                write!(out, "{}", self.paint("2", &terminal(text)))?;
                self.streamed_reasoning.push_str(text);
                self.streaming_reasoning = true;
            }
            Event::Reasoning { label, text, .. } => match text {
                Some(t) => {
                    writeln!(
                        out,
                        "{} {}",
                        self.paint("2;3", "thinking:"),
                        self.paint("2", &terminal(t))
                    )?;
                }
                None => {
                    writeln!(
                        out,
                        "{}",
                        self.paint("2;3", &format!("[reasoning: {}]", terminal(label)))
                    )?;
                }
            },
            Event::Reply { text, is_final, .. } => {
                self.phase = Phase::Model;
                if *is_final {
                    self.pending_final = Some(text.clone());
                } else {
                    writeln!(out, "{}", terminal(text))?;
                }
            }
            Event::ToolCall {
                name, arguments, ..
            } => {
                let args: String = arguments.split_whitespace().collect::<Vec<_>>().join(" ");
                let shown: String = args.chars().take(ARGS_CHARS).collect();
                let more = if args.chars().count() > ARGS_CHARS {
                    "…"
                } else {
                    ""
                };
                writeln!(
                    out,
                    "{} {} {}{more}",
                    self.paint("1;33", "tool call:"),
                    self.paint("1", &terminal(name)),
                    terminal(&shown)
                )?;
                self.phase = Phase::Tool(name.clone());
            }
            Event::ToolResult {
                text,
                bytes,
                status,
                duration_ms,
                ..
            } => {
                self.phase = Phase::Model;
                let failed = *status == Some(ctxhost_format::ToolStatus::Error);
                let mut head = if failed {
                    self.paint("31", "  error")
                } else {
                    self.paint("2", "  result")
                };
                let mut facts = vec![format!("{} bytes", thousands(*bytes as i64))];
                if let Some(ms) = duration_ms {
                    facts.push(format!("{:.1} s", *ms as f64 / 1000.0));
                }
                head.push_str(&self.paint("2", &format!(" ({})", facts.join(", "))));
                writeln!(out, "{head}")?;
                let safe = terminal(text);
                let lines: Vec<&str> = safe.lines().collect();
                for l in lines.iter().take(RESULT_LINES) {
                    let l: String = l.chars().take(160).collect();
                    writeln!(out, "  {} {l}", self.paint("2", "│"))?;
                }
                let hidden = lines.len().saturating_sub(RESULT_LINES);
                if hidden > 0 || *bytes > text.len() {
                    writeln!(out, "  {}", self.paint("2", "│ …"))?;
                }
            }
            Event::Compression {
                before_tokens,
                after_tokens,
                summary_id,
                ..
            } => {
                let summary = summary_id
                    .map(|id| format!(", summary {id}"))
                    .unwrap_or_default();
                writeln!(
                    out,
                    "{} context {} → {} tokens{summary}",
                    self.paint("1;35", "compression:"),
                    thousands(*before_tokens as i64),
                    thousands(*after_tokens as i64)
                )?;
            }
            Event::LlmCall {
                n,
                interrupted: true,
                ..
            } => {
                // Not a failure: the task was asked to pause or stop during the call.
                let line = format!(
                    "LLM call {n} ended by a pause or stop request (its partial reply is dropped; a resumed task sends it again)"
                );
                writeln!(out, "{}", self.paint("33", &line))?;
            }
            Event::LlmCall { n, ok, error, .. } => {
                if !ok {
                    let head = format!("LLM call {n} failed:");
                    let why = error.as_deref().unwrap_or("no reason recorded");
                    // The recorded error often says so itself: not twice.
                    let why = why.strip_prefix(head.as_str()).unwrap_or(why).trim_start();
                    writeln!(out, "{} {}", self.paint("31", &head), terminal(why))?;
                    self.failure_shown = error.clone();
                }
            }
            // Handled above (the progress line shows it).
            Event::Waiting { .. } => {}
            Event::Note { text } => {
                writeln!(
                    out,
                    "{}",
                    self.paint("2", &format!("note: {}", terminal(text)))
                )?;
            }
            Event::End {
                uuid,
                status,
                answer,
                error,
                llm_calls,
                tool_calls,
                tokens,
                compressions,
                seconds,
            } => {
                let pending = self.pending_final.take();
                if let Some(p) = pending
                    && answer.as_deref() != Some(p.as_str())
                {
                    writeln!(out, "{}", terminal(&p))?;
                }
                // An answer printed as it streamed is not printed again.
                let shown = self.answer_shown.take();
                if let Some(a) = answer.as_ref().filter(|a| shown.as_ref() != Some(*a)) {
                    writeln!(out, "{}", self.paint("1;32", "answer:"))?;
                    writeln!(out, "{}", terminal(a))?;
                }
                let took = seconds.map(|s| format!(" in {s:.1} s")).unwrap_or_default();
                let colour = match status {
                    Status::Completed => "1;32",
                    Status::Failed => "1;31",
                    _ => "1;33",
                };
                writeln!(
                    out,
                    "{}{took}: {}, {}, {} tokens, {}",
                    self.paint(colour, status.as_str()),
                    count(*llm_calls, "LLM call"),
                    count(*tool_calls, "tool call"),
                    thousands(*tokens),
                    count(*compressions, "compression"),
                )?;
                // The failed LLM call that ended the task was printed as it failed: only
                // what the task's error adds to it (hints) is printed.
                let seen = self.failure_shown.take();
                let rest = match (error, &seen) {
                    (Some(e), Some(f)) => e.strip_prefix(f.as_str()).map(str::trim_start),
                    _ => None,
                };
                match (error, rest) {
                    (Some(_), Some("")) => {}
                    (Some(_), Some(rest)) => {
                        writeln!(out, "{} {}", self.paint("31", "error:"), terminal(rest))?;
                    }
                    (Some(e), None) => {
                        writeln!(out, "{} {}", self.paint("31", "error:"), terminal(e))?;
                    }
                    (None, _) => {}
                }
                writeln!(out, "task {uuid}")?;
            }
        }
        out.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error of a failed first LLM call.
    const REFUSED: &str = "LLM call 1 failed: POST http://h/v1/chat/completions: refused";

    /// LLM call 1, failed with `why`.
    fn failed_call(why: &str) -> Event {
        Event::LlmCall {
            n: 1,
            duration_ms: 7,
            ok: false,
            interrupted: false,
            prompt_tokens: None,
            completion_tokens: None,
            error: Some(why.into()),
        }
    }

    #[test]
    fn a_failed_llm_call_is_said_once() {
        let mut r = Render::text(false);
        r.colour = false;
        let mut out = Vec::new();
        r.write_event(&mut out, &failed_call(REFUSED)).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "LLM call 1 failed: POST http://h/v1/chat/completions: refused\n"
        );
    }

    /// F15: a call given up for a pause is said as such, not as a failure.
    #[test]
    fn a_call_ended_by_a_pause_is_not_said_to_have_failed() {
        let mut r = Render::text(false);
        r.colour = false;
        let mut out = Vec::new();
        r.write_event(
            &mut out,
            &Event::LlmCall {
                n: 2,
                duration_ms: 700,
                ok: false,
                interrupted: true,
                prompt_tokens: None,
                completion_tokens: None,
                error: Some(
                    "LLM call 2 ended by a pause or stop request: POST http://h: given up".into(),
                ),
            },
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "LLM call 2 ended by a pause or stop request (its partial reply is dropped; a resumed task sends it again)\n"
        );
        assert!(!text.contains("failed"), "{text}");
    }

    /// F11: the text of a stream that broke off is followed by a marker, and the retry's text
    /// starts on a line of its own; its message then prints nothing again.
    #[test]
    fn a_broken_stream_is_marked_and_the_retry_starts_afresh() {
        let mut r = Render::text(false);
        r.colour = false;
        let mut out = Vec::new();
        for e in [
            Event::ReplyDelta {
                text: "partial ans".into(),
            },
            Event::StreamBroken {
                bytes: 1234,
                kept: "failed-streams/1.stream".into(),
            },
            Event::ReplyDelta {
                text: "Whole ".into(),
            },
            Event::ReplyDelta {
                text: "answer.".into(),
            },
            Event::Reply {
                seq: 3,
                text: "Whole answer.".into(),
                is_final: true,
            },
        ] {
            r.write_event(&mut out, &e).unwrap();
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            concat!(
                "partial ans\n",
                "[stream broken off after 1,234 bytes: the text above is discarded; kept in failed-streams/1.stream]\n",
                "Whole answer.\n"
            )
        );
        assert_eq!(r.answer_shown.as_deref(), Some("Whole answer."));
    }

    #[test]
    fn numbers_get_thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(7412), "7,412");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(-1000), "-1,000");
        assert_eq!(count(1, "tool call"), "1 tool call");
        assert_eq!(count(2, "tool call"), "2 tool calls");
    }

    /// Issue 38: a task that failed on its LLM call says the error once (the call's line), not
    /// again at its end.
    #[test]
    fn the_error_of_a_task_that_failed_on_its_llm_call_is_printed_once() {
        let mut r = Render::text(false);
        r.colour = false;
        let mut out = Vec::new();
        let why = REFUSED;
        for e in [
            failed_call(why),
            Event::End {
                uuid: "u".into(),
                status: Status::Failed,
                answer: None,
                error: Some(why.into()),
                llm_calls: 0,
                tool_calls: 0,
                tokens: 0,
                compressions: 0,
                seconds: Some(0.1),
            },
        ] {
            r.write_event(&mut out, &e).unwrap();
        }
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.matches("refused").count(), 1, "{text}");
        assert!(text.contains("failed in 0.1 s"), "{text}");
    }
}
