//! Writing files of the task directory with direct WASI 0.2 calls (the `wasip2` crate), where
//! Rust's std goes a slow way: std's `write` is `check-write` + `output-stream.write` +
//! `blocking-flush`, and wasmtime runs `output-stream.write` on a worker thread (a thread
//! hand-off per write), whereas `blocking-write-and-flush` and `descriptor.write` run on the
//! calling thread (with `allow_blocking_current_thread`, as the host sets it).
//!
//! - [`Appender`]: whole lines appended to a JSONL file kept open between calls (the message
//!   store's `add-message`: one call per line up to 4 KiB);
//! - [`FileWriter`]: a new file written from a large buffer with `descriptor.write` at
//!   explicit offsets (one call per buffer; the request body).
//!
//! Paths are relative to the task directory (the preopen `.`). The builtin message store
//! appends with [`Appender`]; [`crate::request::write_request`] writes with [`FileWriter`].

use std::io;

use wasip2::filesystem::preopens::get_directories;
use wasip2::filesystem::types::{Descriptor, DescriptorFlags, ErrorCode, OpenFlags, PathFlags};
use wasip2::io::streams::{OutputStream, StreamError};

use crate::jsonl::io_error;
use crate::types::PluginError;

/// Most bytes one `blocking-write-and-flush` takes (WASI 0.2).
const MAX_BLOCKING_WRITE: usize = 4096;

/// Opens `path` in the task directory for writing (`flags`: create, truncate, ...).
fn open(path: &str, flags: OpenFlags) -> Result<Descriptor, io::Error> {
    let dir = get_directories()
        .into_iter()
        .find_map(|(dir, name)| (name == ".").then_some(dir))
        .ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "no task directory (preopen `.`)")
        })?;
    dir.open_at(PathFlags::empty(), path, flags, DescriptorFlags::WRITE)
        .map_err(fs_error)
}

fn fs_error(code: ErrorCode) -> io::Error {
    let kind = match code {
        ErrorCode::NoEntry => io::ErrorKind::NotFound,
        ErrorCode::Access | ErrorCode::NotPermitted => io::ErrorKind::PermissionDenied,
        ErrorCode::InsufficientSpace => io::ErrorKind::StorageFull,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, format!("{code:?}"))
}

fn stream_error(e: StreamError) -> io::Error {
    match e {
        StreamError::Closed => io::Error::new(io::ErrorKind::BrokenPipe, "stream closed"),
        StreamError::LastOperationFailed(e) => io::Error::other(e.to_debug_string()),
    }
}

/// A JSONL file of the task directory kept open for appending whole lines.
pub struct Appender {
    name: &'static str,
    /// The append stream and its file (the stream is dropped first: it is a child of the
    /// descriptor).
    open: Option<(OutputStream, Descriptor)>,
}

impl Appender {
    /// An appender of `name` (opened on first use).
    pub const fn new(name: &'static str) -> Self {
        Appender { name, open: None }
    }

    /// Appends `line` (whole lines, `\n` included), opening the file (created if missing) on
    /// first use: one `blocking-write-and-flush` per 4 KiB. After a failed write the file is
    /// closed, so the next append reopens it.
    ///
    /// Errors: `io`, naming the file.
    pub fn append(&mut self, line: &[u8]) -> Result<(), PluginError> {
        let name = self.name;
        if self.open.is_none() {
            let file = open(name, OpenFlags::CREATE)
                .map_err(|e| io_error(format!("opening {name}"), e))?;
            let stream = file
                .append_via_stream()
                .map_err(|e| io_error(format!("opening {name}"), fs_error(e)))?;
            self.open = Some((stream, file));
        }
        let (stream, _) = self.open.as_ref().expect("opened above");
        for chunk in line.chunks(MAX_BLOCKING_WRITE) {
            if let Err(e) = stream.blocking_write_and_flush(chunk) {
                self.open = None;
                return Err(io_error(format!("appending to {name}"), stream_error(e)));
            }
        }
        Ok(())
    }

    /// Closes the file (the next append reopens it by name, e.g. after it was replaced).
    pub fn close(&mut self) {
        self.open = None;
    }
}

/// A new file of the task directory written through one large buffer: each full buffer is one
/// `descriptor.write` at the next offset. `flush` writes what is buffered.
pub struct FileWriter {
    file: Descriptor,
    buf: Vec<u8>,
    offset: u64,
}

impl FileWriter {
    /// Creates (or truncates) `path`, buffering `capacity` bytes.
    pub fn create(path: &str, capacity: usize) -> io::Result<FileWriter> {
        Ok(FileWriter {
            file: open(path, OpenFlags::CREATE | OpenFlags::TRUNCATE)?,
            buf: Vec::with_capacity(capacity),
            offset: 0,
        })
    }

    fn write_buffer(&mut self) -> io::Result<()> {
        let mut done = 0;
        while done < self.buf.len() {
            let n = self
                .file
                .write(&self.buf[done..], self.offset)
                .map_err(fs_error)?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            done += n as usize;
            self.offset += n;
        }
        self.buf.clear();
        Ok(())
    }
}

impl io::Write for FileWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len() + data.len() > self.buf.capacity() {
            self.write_buffer()?;
        }
        if data.len() >= self.buf.capacity() {
            self.buf.extend_from_slice(data);
            self.write_buffer()?;
        } else {
            self.buf.extend_from_slice(data);
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.write_buffer()
    }
}
