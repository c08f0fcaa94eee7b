//! A component's stdout and stderr: split into lines and forwarded to `tracing` at info level
//! (so `plugin try` and a task's log show them), each tagged with the component's name, the
//! function (hook) being called and the stream (target `ctxhost::plugin`, fields `component`,
//! `hook`, `stream`). At most [`MAX_LINES_PER_CALL`] lines of each stream are logged per call;
//! the rest are counted and reported in one line when the call ends.
//!
//! The last few stderr lines are also kept, so a trap's error message can quote what the
//! component printed before it died (a Rust guest prints its panic message to stderr, then
//! traps on `unreachable`). Memory per stream is bounded: a line longer than
//! [`MAX_LINE_BYTES`] is cut there, and [`TAIL_LINES`] lines are kept. Control characters in a
//! line are escaped ([`crate::untrusted::text`]), so a component cannot forge log lines.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Longest line forwarded as one log event (bytes); longer output is split.
pub const MAX_LINE_BYTES: usize = 8 * 1024;
/// Stderr lines kept for error messages.
pub const TAIL_LINES: usize = 4;
/// Lines of one stream logged per call; the rest are counted ([`GuestOutput::end_call`]).
pub const MAX_LINES_PER_CALL: usize = 200;
/// Bytes a guest may write per `check-write` permit.
const WRITE_PERMIT: usize = 64 * 1024;

/// Which standard stream a [`GuestOutput`] stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// The component wrote to stdout.
    Stdout,
    /// The component wrote to stderr.
    Stderr,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// One guest output stream. Cheap to clone; clones share the line buffer.
#[derive(Clone)]
pub struct GuestOutput {
    inner: Arc<Mutex<State>>,
}

struct State {
    component: Arc<str>,
    stream: Stream,
    partial: Vec<u8>,
    tail: VecDeque<String>,
    /// The function being called (`compress`, `start`, `instantiation`).
    hook: Arc<str>,
    /// Lines logged in the current call, and those left out past [`MAX_LINES_PER_CALL`].
    logged: usize,
    dropped: usize,
}

impl GuestOutput {
    /// A stream of `component` (its display name).
    pub fn new(component: Arc<str>, stream: Stream) -> Self {
        GuestOutput {
            inner: Arc::new(Mutex::new(State {
                component,
                stream,
                partial: Vec::new(),
                tail: VecDeque::new(),
                hook: Arc::from("-"),
                logged: 0,
                dropped: 0,
            })),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while logging cannot leave the buffer inconsistent: keep going.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take `bytes` written by the guest: every complete line is logged.
    pub fn write_bytes(&self, bytes: &[u8]) {
        let mut st = self.state();
        for &b in bytes {
            if b == b'\n' {
                st.emit();
            } else {
                st.partial.push(b);
                if st.partial.len() >= MAX_LINE_BYTES {
                    st.emit();
                }
            }
        }
    }

    /// The last lines written (oldest first), joined with ` | `; `None` when nothing was
    /// written since the last [`GuestOutput::clear_tail`].
    pub fn tail(&self) -> Option<String> {
        let st = self.state();
        if st.tail.is_empty() {
            None
        } else {
            Some(st.tail.iter().cloned().collect::<Vec<_>>().join(" | "))
        }
    }

    /// A call of `hook` begins: its lines are tagged with it, the per-call line count and the
    /// kept stderr lines start afresh.
    pub fn begin_call(&self, hook: &str) {
        let mut st = self.state();
        st.hook = Arc::from(hook);
        st.tail.clear();
        st.logged = 0;
        st.dropped = 0;
    }

    /// The call ended: log an unterminated last line, and how many lines were left out.
    pub fn end_call(&self) {
        let mut st = self.state();
        if !st.partial.is_empty() {
            st.emit();
        }
        if st.dropped > 0 {
            let (component, hook, stream) = (&*st.component, &*st.hook, st.stream.name());
            tracing::info!(target: "ctxhost::plugin", component, hook, stream,
                "{} more line(s) not logged (at most {MAX_LINES_PER_CALL} per call)", st.dropped);
            st.dropped = 0;
        }
    }
}

impl State {
    fn emit(&mut self) {
        let raw = std::mem::take(&mut self.partial);
        let line = String::from_utf8_lossy(&raw);
        // Control characters (a `\r`, an ANSI escape) must not rewrite the log: escaped.
        let line = crate::untrusted::text(line.trim_end_matches('\r'), MAX_LINE_BYTES);
        let line: &str = &line;
        let component = &*self.component;
        let hook = &*self.hook;
        let stream = self.stream.name();
        if self.logged < MAX_LINES_PER_CALL {
            self.logged += 1;
            tracing::info!(target: "ctxhost::plugin", component, hook, stream, "{line}");
        } else {
            self.dropped += 1;
        }
        // Rust's panic hint adds nothing to an error message.
        let noise = line.starts_with("note: run with `RUST_BACKTRACE=1`");
        if self.stream == Stream::Stderr && !line.trim().is_empty() && !noise {
            if self.tail.len() == TAIL_LINES {
                self.tail.pop_front();
            }
            self.tail.push_back(line.to_string());
        }
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.write_bytes(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_PERMIT)
    }
}

impl tokio::io::AsyncWrite for GuestOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.write_bytes(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn keeps_the_last_stderr_lines_and_cuts_long_ones() {
        let out = GuestOutput::new("test".into(), Stream::Stderr);
        out.write_bytes(b"one\ntwo\nthr");
        assert_eq!(out.tail().as_deref(), Some("one | two"));
        out.write_bytes(b"ee\n\nfour\nfive\n");
        assert_eq!(out.tail().as_deref(), Some("two | three | four | five"));
        out.begin_call("next");
        assert_eq!(out.tail(), None);
        out.write_bytes(&vec![b'x'; MAX_LINE_BYTES + 10]);
        out.end_call();
        let tail = out.tail().unwrap();
        assert_eq!(tail.len(), MAX_LINE_BYTES + " | ".len() + 10);
    }

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn stdout_lines_are_logged_at_info_with_component_and_hook_and_bounded_per_call() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let out = GuestOutput::new("my.wasm".into(), Stream::Stdout);
            out.begin_call("compress");
            out.write_bytes(b"hello from console.log\nno newline");
            out.end_call();
            out.begin_call("start");
            for i in 0..MAX_LINES_PER_CALL + 5 {
                out.write_bytes(format!("line {i}\n").as_bytes());
            }
            out.end_call();
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let hello = text
            .lines()
            .find(|l| l.contains("hello from console.log"))
            .expect(&text);
        assert!(hello.contains("INFO"), "{hello}");
        assert!(
            hello.contains("component=\"my.wasm\"") || hello.contains("component=my.wasm"),
            "{hello}"
        );
        assert!(
            hello.contains("hook=\"compress\"") || hello.contains("hook=compress"),
            "{hello}"
        );
        assert!(
            hello.contains("stream=\"stdout\"") || hello.contains("stream=stdout"),
            "{hello}"
        );
        assert!(
            text.lines()
                .any(|l| l.contains("no newline") && l.contains("compress"))
        );
        let start_lines = text.lines().filter(|l| l.contains(" line ")).count();
        assert_eq!(start_lines, MAX_LINES_PER_CALL, "{text}");
        assert!(
            text.lines()
                .any(|l| l.contains("5 more line(s) not logged") && l.contains("start")),
            "{text}"
        );
    }
}
