//! What a long first compile says while it runs: a JavaScript or Python component carries its
//! interpreter (~10 MB of wasm), which Cranelift compiles for a minute or two before the
//! first call; the result is cached, so it happens once per component and engine.
//!
//! [`CompileProgress::start`] logs (info, target `ctxhost::runtime`) "compiling NAME (first
//! run only; cached in DIR)…" for a component of at least [`ANNOUNCED_BYTES`], then "still
//! compiling NAME (N s)" every [`PROGRESS_EVERY`], and "compiling NAME took N s" when dropped.
//! Smaller components (Rust ones, the builtins) compile in well under a second and say
//! nothing.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Components at least this large (bytes of wasm) announce their compile.
pub const ANNOUNCED_BYTES: usize = 1 << 20;

/// How often a running compile says it is still running.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// A compile in progress; dropping it ends the progress lines.
pub struct CompileProgress {
    name: String,
    started: Instant,
    stop: Option<mpsc::Sender<()>>,
}

impl CompileProgress {
    /// A compile of `name` (`bytes` of wasm) into the cache `cache_dir` begins. `None` (and
    /// nothing logged) for a small component.
    pub fn start(name: &str, bytes: usize, cache_dir: &std::path::Path) -> Option<CompileProgress> {
        if bytes < ANNOUNCED_BYTES {
            return None;
        }
        let started = Instant::now();
        tracing::info!(target: "ctxhost::runtime", component = name, mib = bytes >> 20,
            "compiling {name} (first run only; cached in {})…", cache_dir.display());
        let (stop, stopped) = mpsc::channel::<()>();
        let owned = name.to_string();
        // Best effort: without the thread there are no "still compiling" lines.
        let _ = std::thread::Builder::new()
            .name("compile-progress".into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(PROGRESS_EVERY) {
                    tracing::info!(target: "ctxhost::runtime", component = %owned,
                        "still compiling {owned} ({} s)", started.elapsed().as_secs());
                }
            });
        Some(CompileProgress {
            name: name.to_string(),
            started,
            stop: Some(stop),
        })
    }
}

impl Drop for CompileProgress {
    fn drop(&mut self) {
        self.stop.take();
        tracing::info!(target: "ctxhost::runtime", component = %self.name,
            "compiling {} took {:.1} s", self.name, self.started.elapsed().as_secs_f64());
    }
}
