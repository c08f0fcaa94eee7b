//! The engine's epoch clock: one background thread per [`super::Runtime`] increments the
//! engine's epoch every [`TICK`], which is what runs the epoch callback of a running call
//! (deadlines, the byte budget: see [`super::sandbox`]).
//!
//! The thread stops when the last holder of the [`EpochTicker`] (the runtime and every live
//! plugin instance) is dropped.

use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::Duration;

use wasmtime::Engine;

/// Epoch period.
pub const TICK: Duration = Duration::from_millis(10);

/// Keeps the ticker thread alive; dropping the last clone stops it.
pub struct EpochTicker {
    _stop: mpsc::Sender<()>,
}

impl EpochTicker {
    /// Start ticking `engine`'s epoch.
    pub fn start(engine: &Engine) -> std::io::Result<Arc<EpochTicker>> {
        let (stop, stopped) = mpsc::channel::<()>();
        let engine = engine.clone();
        thread::Builder::new()
            .name("ctxhost-epoch".to_string())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(TICK) {
                    engine.increment_epoch();
                }
            })?;
        Ok(Arc::new(EpochTicker { _stop: stop }))
    }
}
