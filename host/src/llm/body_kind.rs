//! What a 2xx response to a request for a streamed reply holds: a stream, or one whole JSON
//! body from a server that ignored `"stream": true`.

/// What a 2xx response to a request for a streamed reply holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// A stream (server-sent events, NDJSON): written as it arrives.
    Stream,
    /// One whole JSON body: the server ignored `"stream": true` (some OpenAI-compatible
    /// servers and proxies do).
    Whole,
    /// Not known from the headers: the first byte decides ([`BodyKind::of_first_byte`]).
    Unknown,
}

impl BodyKind {
    /// From the response's `Content-Type`: `text/event-stream` and the NDJSON / JSON-lines
    /// types are a stream; `application/json` (or any `+json` type) is a whole body; none or
    /// any other type is [`BodyKind::Unknown`].
    pub fn of(content_type: Option<&str>) -> BodyKind {
        let Some(ct) = content_type else {
            return BodyKind::Unknown;
        };
        let essence = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if essence == "text/event-stream"
            || essence.contains("ndjson")
            || essence.contains("jsonl")
            || essence.contains("json-seq")
        {
            BodyKind::Stream
        } else if essence == "application/json" || essence.ends_with("+json") {
            BodyKind::Whole
        } else {
            BodyKind::Unknown
        }
    }

    /// For a body whose type says nothing: one starting (after white space) with `{` is a
    /// whole JSON body, anything else a stream (an event stream starts with `data:`, `event:`
    /// or a `:` comment). An NDJSON stream sent without its type would be taken for a whole
    /// body: the format's reader then names it as not JSON.
    pub fn of_first_byte(first: Option<u8>) -> BodyKind {
        match first {
            Some(b'{') => BodyKind::Whole,
            _ => BodyKind::Stream,
        }
    }
}
