//! The one parser of server-sent events ([`EventStream`]) every streamed fold reads its
//! stream with ([`crate::sse`], [`crate::anthropic::stream`], [`crate::responses::stream`];
//! the live view of `show --follow` and the dashboard too).
//!
//! The rules are WHATWG HTML's "Interpreting an event stream" (§9.2.6, server-sent events):
//! - lines end with CRLF, LF or CR; a byte-order mark at the start of the stream is skipped;
//! - a blank line dispatches the event gathered since the last one; at the end of the stream an
//!   event not yet dispatched is discarded (the end of the stream is not a blank line);
//! - a line starting with `:` is a comment;
//! - otherwise the field name is what comes before the first `:` (the whole line when it has
//!   none: a field with an empty value), the value what follows it, one leading space removed;
//! - `data`: the value and a `\n` are added to the event's data (several `data:` lines of one
//!   event are so joined with `\n`; the last `\n` is removed at dispatch); `event`: the event's
//!   type (`message` when none); `id`: the last event id (not when the value holds a NUL);
//!   `retry`: the reconnection time in milliseconds (digits only); any other field is ignored;
//! - an event whose data is empty (no `data` field) is not dispatched.
//!
//! The parser is fed a line at a time ([`EventStream::line`]): callers read their stream in
//! lines split at `\n` (a `\r` before it, and bare `\r` inside, are handled here). Memory: the
//! data of one event.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The `event` field's value; `message` when the event had none.
    pub kind: String,
    /// The `data` lines' values joined with `\n`.
    pub data: String,
    /// The last event id seen when it was dispatched (empty when none).
    pub id: String,
    /// The number of the stream's line on which the event began (from 1, counted as the
    /// caller's lines: one per [`EventStream::line`] call).
    pub line: u64,
}

/// The event-stream parser (module doc): feed it every line of the stream, in order.
#[derive(Debug, Default)]
pub struct EventStream {
    data: String,
    kind: String,
    last_id: String,
    retry: Option<u64>,
    /// Lines fed so far.
    lines: u64,
    /// The line the event being gathered began on (0: none begun).
    started: u64,
}

impl EventStream {
    /// A parser that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one line of the stream, without its `\n` (a `\r` before it is the CR of a CRLF;
    /// a `\r` inside ends a line of its own). Returns the event a blank line dispatches, if
    /// any (a line holding bare `\r`s can dispatch more than one: the last is returned; no
    /// provider sends that).
    pub fn line(&mut self, line: &str) -> Option<Event> {
        self.lines += 1;
        let mut line = line.strip_suffix('\r').unwrap_or(line);
        if self.lines == 1 {
            line = line.strip_prefix('\u{feff}').unwrap_or(line);
        }
        let mut dispatched = None;
        for part in line.split('\r') {
            if let Some(e) = self.part(part) {
                dispatched = Some(e);
            }
        }
        dispatched
    }

    /// Feeds the stream's last line when it has no `\n` (the stream ended inside it): only the
    /// parts of it ended by a bare `\r` are lines; the rest is discarded with the event it
    /// was part of (the end of the stream dispatches nothing). Returns what a blank line among
    /// those parts dispatched, as [`Self::line`].
    pub fn last_line(&mut self, line: &str) -> Option<Event> {
        match line.rfind('\r') {
            Some(end) => self.line(&line[..=end]),
            None => {
                self.lines += 1;
                None
            }
        }
    }

    /// Counts a line the caller read itself (a `data:` line too long to hold, folded as it
    /// was read): it begins an event when none is begun.
    pub fn skip_line(&mut self) {
        self.lines += 1;
        if self.started == 0 {
            self.started = self.lines;
        }
    }

    /// One line as the rules see it.
    fn part(&mut self, line: &str) -> Option<Event> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        if self.started == 0 {
            self.started = self.lines;
        }
        match field {
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
            }
            "event" => {
                self.kind.clear();
                self.kind.push_str(value);
            }
            "id" if !value.contains('\0') => {
                self.last_id.clear();
                self.last_id.push_str(value);
            }
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                self.retry = value.parse().ok();
            }
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<Event> {
        let line = std::mem::take(&mut self.started);
        if self.data.is_empty() {
            self.kind.clear();
            return None;
        }
        let mut data = std::mem::take(&mut self.data);
        data.pop();
        let kind = match std::mem::take(&mut self.kind) {
            k if k.is_empty() => "message".to_string(),
            k => k,
        };
        Some(Event {
            kind,
            data,
            id: self.last_id.clone(),
            line,
        })
    }

    /// Whether an event was begun (a field line came) and not yet dispatched: the stream is
    /// inside an event.
    pub fn inside_event(&self) -> bool {
        self.started != 0
    }

    /// Lines fed so far.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// The last `retry` field's value, milliseconds (the server's reconnection time).
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The events of `stream` (split into lines at `\n`, as the folds read it; a stream that
    /// ends with `\n` has no last partial line).
    fn events(stream: &str) -> Vec<Event> {
        let mut p = EventStream::new();
        let body = stream.strip_suffix('\n').unwrap_or(stream);
        body.split('\n').filter_map(|l| p.line(l)).collect()
    }

    fn data(stream: &str) -> Vec<String> {
        events(stream).into_iter().map(|e| e.data).collect()
    }

    // The examples of WHATWG HTML §9.2.5 / §9.2.6, each with what the text says it fires.

    #[test]
    fn spec_stock_example_joins_data_lines_with_newlines() {
        // "YHOO", "+2" and "10" in one event: "YHOO\n+2\n10".
        assert_eq!(data("data: YHOO\ndata: +2\ndata: 10\n\n"), ["YHOO\n+2\n10"]);
    }

    #[test]
    fn spec_example_with_a_comment_ids_and_a_last_block_without_its_blank_line() {
        let stream = ": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n";
        let e = events(stream);
        assert_eq!(
            e.len(),
            2,
            "the last block is not followed by a blank line: {e:?}"
        );
        assert_eq!((e[0].data.as_str(), e[0].id.as_str()), ("first event", "1"));
        // `id` without a colon: an empty value, which resets the last event id.
        assert_eq!((e[1].data.as_str(), e[1].id.as_str()), ("second event", ""));
        // Followed by a blank line, the last block fires " third event" (one space kept).
        assert_eq!(data(&format!("{stream}\n"))[2], " third event");
    }

    #[test]
    fn spec_example_of_empty_data_fields() {
        // "The first block fires events with the data set to the empty string, as would the
        // last block if it was followed by a blank line. The middle block fires an event with
        // the data set to a single newline character."
        assert_eq!(data("data\n\ndata\ndata\n\ndata:"), ["", "\n"]);
        assert_eq!(data("data\n\ndata\ndata\n\ndata:\n\n"), ["", "\n", ""]);
    }

    #[test]
    fn spec_example_the_space_after_the_colon_is_optional() {
        assert_eq!(data("data:test\n\ndata: test\n\n"), ["test", "test"]);
    }

    #[test]
    fn spec_example_of_event_types() {
        let e = events(
            "event: add\ndata: 73857293\n\nevent: remove\ndata: 2153\n\nevent: add\ndata: 113411\n\n",
        );
        let got: Vec<(&str, &str)> = e
            .iter()
            .map(|e| (e.kind.as_str(), e.data.as_str()))
            .collect();
        assert_eq!(
            got,
            [("add", "73857293"), ("remove", "2153"), ("add", "113411")]
        );
        assert_eq!(events("data: x\n\n")[0].kind, "message");
    }

    #[test]
    fn spec_example_of_messages_split_over_lines() {
        let stream = "data: This is the first message.\n\ndata: This is the second message, it\ndata: has two lines.\n\ndata: This is the third message.\n\n";
        assert_eq!(
            data(stream),
            [
                "This is the first message.",
                "This is the second message, it\nhas two lines.",
                "This is the third message."
            ]
        );
    }

    #[test]
    fn line_ends_crlf_cr_and_lf_and_a_leading_bom() {
        assert_eq!(
            data("\u{feff}data: a\r\n\r\ndata: b\rdata: c\r\r\n"),
            ["a", "b\nc"]
        );
    }

    #[test]
    fn retry_and_unknown_fields_are_no_data_and_an_event_without_data_is_not_fired() {
        let mut p = EventStream::new();
        for l in ["retry: 3000", "id: 7", "event: ping", "foo: bar", ""] {
            assert_eq!(p.line(l), None, "{l}");
        }
        assert_eq!(p.retry(), Some(3000));
        assert_eq!(p.line("retry: soon"), None);
        assert_eq!(p.retry(), Some(3000), "not digits: ignored");
        p.line("");
        // The type of the event without data was dropped with it.
        p.line("data: {}");
        let e = p.line("").unwrap();
        assert_eq!(
            (e.kind.as_str(), e.id.as_str(), e.line),
            ("message", "7", 8)
        );
    }

    #[test]
    fn the_last_line_without_its_end_dispatches_only_what_bare_crs_ended() {
        let mut p = EventStream::new();
        p.line("data: a");
        assert_eq!(p.last_line("data: b"), None);
        let mut p = EventStream::new();
        p.line("data: a");
        assert_eq!(p.last_line("data: b\r\rdata: c").unwrap().data, "a\nb");
        assert_eq!(p.lines(), 2);
    }

    #[test]
    fn a_multi_line_json_event_is_whole_json() {
        let e = events(
            "event: message_delta\ndata: {\"type\":\"message_delta\",\ndata:  \"delta\":{\"stop_reason\":\"end_turn\"}}\n\n",
        );
        let v: serde_json::Value = serde_json::from_str(&e[0].data).unwrap();
        assert_eq!(v["delta"]["stop_reason"], "end_turn");
        assert_eq!(e[0].line, 1);
    }
}
