//! Folding a streamed Ollama `/api/chat` reply (newline-delimited JSON, as the host keeps it in
//! `reply.stream`) into the parts of one reply, a line at a time: no whole-file read.
//!
//! With `"stream": true` Ollama sends one JSON object per line: `{"model","created_at",
//! "message":{"role","content","thinking"?,"tool_calls"?},"done":false}` for each piece, then a
//! last one with `"done":true`, `done_reason` and the counts (`prompt_eval_count`,
//! `eval_count`, durations). Content and thinking pieces are concatenated; tool calls come
//! whole (`{"function":{"name","arguments"}}`), each in the piece that has it, and are kept in
//! order. A line `{"error":"..."}` is the server's error. A stream without a `"done":true` line
//! was cut off ([`OllamaStream::finish`] refuses it).

use crate::content_file::{SunkText, TextSink};
use serde::Deserialize;
use serde_json::Value;

use crate::body::provider_error;
use crate::fold::FoldError;
use crate::reply::{ProviderToolCall, TokenCount};

/// What ends a whole stream of this provider (named by [`FoldError::Cut`]).
const END: &str = "a \"done\":true line";

/// The fold of an Ollama chat stream (module doc); feed it with [`OllamaStream::line`], then
/// take the reply with [`OllamaStream::finish`].
#[derive(Debug, Default)]
pub struct OllamaStream {
    reply: OllamaReply,
    /// `message.content`, concatenated (in memory, or in a file past its threshold).
    content: TextSink,
    done: bool,
    lines: u64,
}

/// The folded reply, as a whole (unstreamed) `/api/chat` response would give it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OllamaReply {
    /// `message.role` (normally `assistant`), `None` when no line had one.
    pub role: Option<String>,
    /// The concatenated `message.content`, `None` when no line had any or when it is in
    /// `content_file`.
    pub content: Option<String>,
    /// The file the concatenated `message.content` was written to when it passed the threshold
    /// of [`OllamaStream::with_content_file`] (`content` is then `None`).
    pub content_file: Option<String>,
    /// The concatenated `message.thinking` (with `"think": true`), `None` when none came.
    pub thinking: Option<String>,
    /// The tool calls, in the order they came.
    pub tool_calls: Vec<ProviderToolCall>,
    /// `done_reason` of the last line (`stop`, `length`, ...).
    pub done_reason: Option<String>,
    /// `prompt_eval_count` of the last line (prompt tokens).
    pub prompt_eval_count: TokenCount,
    /// `eval_count` of the last line (generated tokens).
    pub eval_count: TokenCount,
    /// `model` of the first line that has one: the model that answered.
    pub model: Option<String>,
}

#[derive(Deserialize)]
struct Piece {
    #[serde(default)]
    message: Option<PieceMessage>,
    #[serde(default)]
    done: Option<bool>,
    #[serde(default)]
    done_reason: Option<String>,
    #[serde(default)]
    prompt_eval_count: TokenCount,
    #[serde(default)]
    eval_count: TokenCount,
    #[serde(default)]
    model: Option<String>,
}

#[derive(Deserialize)]
struct PieceMessage {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ProviderToolCall>>,
}

impl OllamaStream {
    /// A fold that has seen nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fold whose text goes to a file once it passes a threshold
    /// ([`TextSink::spilling`]): the reply then names the file instead of holding the text.
    pub fn with_content_file(sink: TextSink) -> Self {
        OllamaStream {
            content: sink,
            ..Self::default()
        }
    }

    /// Folds one line (without its line end; blank lines and a trailing `\r` are ignored).
    /// Errors, each naming the line number: a line that is not JSON or not a chat piece, the
    /// server's `{"error":...}`, a line after the `"done":true` one.
    pub fn line(&mut self, line: &str) -> Result<(), String> {
        self.lines += 1;
        let n = self.lines;
        let line = line.trim();
        if line.is_empty() {
            return Ok(());
        }
        if self.done {
            return Err(format!("line {n}: a line after the one with \"done\":true"));
        }
        let value: Value =
            serde_json::from_str(line).map_err(|e| format!("line {n}: not JSON ({e})"))?;
        if let Some(e) = provider_error(&value) {
            return Err(format!("line {n}: the server sent an error: {e}"));
        }
        let piece = Piece::deserialize(&value)
            .map_err(|e| format!("line {n}: not an Ollama chat piece ({e})"))?;
        if self.reply.model.is_none() {
            self.reply.model = piece.model.filter(|m| !m.is_empty());
        }
        if let Some(m) = piece.message {
            let r = &mut self.reply;
            if let Some(role) = m.role.filter(|r| !r.is_empty()) {
                r.role = Some(role);
            }
            if let Some(c) = m.content.filter(|c| !c.is_empty()) {
                self.content
                    .push(&c)
                    .map_err(|e| format!("line {n}: writing the reply's text to its file: {e}"))?;
            }
            if let Some(t) = m.thinking.filter(|t| !t.is_empty()) {
                r.thinking.get_or_insert_with(String::new).push_str(&t);
            }
            r.tool_calls.extend(m.tool_calls.unwrap_or_default());
        }
        if piece.done == Some(true) {
            self.done = true;
            self.reply.done_reason = piece.done_reason;
            self.reply.prompt_eval_count = piece.prompt_eval_count;
            self.reply.eval_count = piece.eval_count;
        }
        Ok(())
    }

    /// Folds the stream's last line when it has no `\n` (the stream ended inside it): as
    /// [`Self::line`], except that a line it refuses whose JSON is not whole gives
    /// [`FoldError::Cut`] ([`crate::fold::unterminated_line`]).
    pub fn last_line(&mut self, line: &str) -> Result<(), FoldError> {
        let folded = self.line(line);
        let cut = FoldError::Cut {
            lines: self.lines,
            end: END,
        };
        crate::fold::unterminated_line(line, folded, cut)
    }

    /// The folded reply. Errors: a stream cut off before its `"done":true` line (an empty file
    /// is one).
    pub fn finish(self) -> Result<OllamaReply, FoldError> {
        if !self.done {
            return Err(FoldError::Cut {
                lines: self.lines,
                end: END,
            });
        }
        let mut reply = self.reply;
        match self
            .content
            .finish()
            .map_err(|e| format!("writing the reply's text to its file: {e}"))?
        {
            SunkText::File { name, .. } => reply.content_file = Some(name),
            SunkText::Text(t) => reply.content = Some(t),
            SunkText::None => {}
        }
        Ok(reply)
    }
}

impl crate::fold::LineFold for OllamaStream {
    type Folded = OllamaReply;
    fn fold_line(&mut self, line: &str) -> Result<(), FoldError> {
        self.line(line).map_err(FoldError::Invalid)
    }
    fn fold_last_line(&mut self, line: &str) -> Result<(), FoldError> {
        self.last_line(line)
    }
    fn finish_fold(self) -> Result<OllamaReply, FoldError> {
        self.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold(lines: &[&str]) -> Result<OllamaReply, String> {
        let mut s = OllamaStream::new();
        for l in lines {
            s.line(l)?;
        }
        s.finish().map_err(|e| e.to_string())
    }

    #[test]
    fn pieces_thinking_tool_calls_and_counts() {
        let r = fold(&[
            r#"{"model":"q","created_at":"t","message":{"role":"assistant","content":"","thinking":"Look "},"done":false}"#,
            r#"{"model":"q","created_at":"t","message":{"role":"assistant","content":"","thinking":"first."},"done":false}"#,
            r#"{"model":"q","created_at":"t","message":{"role":"assistant","content":"Hel"},"done":false}"#,
            "",
            "{\"model\":\"q\",\"created_at\":\"t\",\"message\":{\"role\":\"assistant\",\"content\":\"lo\"},\"done\":false}\r",
            r#"{"model":"q","created_at":"t","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"ls","arguments":{"path":"."}}}]},"done":false}"#,
            r#"{"model":"q","created_at":"t","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","total_duration":5,"prompt_eval_count":26,"eval_count":12}"#,
        ])
        .unwrap();
        assert_eq!(r.role.as_deref(), Some("assistant"));
        assert_eq!(r.content.as_deref(), Some("Hello"));
        assert_eq!(r.thinking.as_deref(), Some("Look first."));
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].function.name, "ls");
        assert_eq!(r.done_reason.as_deref(), Some("stop"));
        assert_eq!(
            (r.prompt_eval_count.value(), r.eval_count.value()),
            (Some(26), Some(12))
        );
    }

    #[test]
    fn cut_torn_and_error_lines_are_refused_naming_the_line() {
        let piece = r#"{"message":{"role":"assistant","content":"a"},"done":false}"#;
        let e = fold(&[piece]).unwrap_err();
        assert_eq!(
            e,
            "the stream ended after 1 lines without a \"done\":true line: cut off"
        );
        let mut s = OllamaStream::new();
        s.line(piece).unwrap();
        assert!(s.finish().unwrap_err().is_cut());
        let e = fold(&[piece, r#"{"message":{"role":"assist"#]).unwrap_err();
        assert!(e.starts_with("line 2: not JSON"), "{e}");
        let e = fold(&[piece, "", r#"{"error":"model 'x' not found"}"#]).unwrap_err();
        assert_eq!(e, "line 3: the server sent an error: model 'x' not found");
        let e = fold(&[r#"{"message":"text","done":false}"#]).unwrap_err();
        assert!(e.starts_with("line 1: not an Ollama chat piece"), "{e}");
        let e = fold(&[r#"{"done":true}"#, piece]).unwrap_err();
        assert_eq!(e, "line 2: a line after the one with \"done\":true");
    }

    #[test]
    fn a_stream_ending_inside_a_line_is_cut_not_invalid() {
        // The last line has no `\n` and its JSON stops short: the rest never came.
        let mut s = OllamaStream::new();
        s.line(r#"{"message":{"role":"assistant","content":"a"},"done":false}"#)
            .unwrap();
        assert!(s.line(r#"{"message":{"role":"assist"#).is_err());
        let mut s = OllamaStream::new();
        s.line(r#"{"message":{"role":"assistant","content":"a"},"done":false}"#)
            .unwrap();
        let e = s.last_line(r#"{"message":{"role":"assist"#).unwrap_err();
        assert!(e.is_cut(), "{e}");
        assert!(e.to_string().contains("after 2 lines"), "{e}");
        // A whole error object without its `\n` stays the provider's (final) error.
        let mut s = OllamaStream::new();
        s.line(r#"{"message":{"role":"assistant","content":"a"},"done":false}"#)
            .unwrap();
        let e = s
            .last_line(r#"{"error":"model 'x' not found"}"#)
            .unwrap_err();
        assert!(!e.is_cut(), "{e}");
    }
}
