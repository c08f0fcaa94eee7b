//! The engine's epoch clock: one background thread per [`super::Runtime`] increments the
//! engine's epoch every [`TICK`], which is what makes epoch deadlines (call timeouts) fire.
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

/// Epoch ticks for a deadline of `d` from now: rounded up, plus one because the current tick
/// may be almost over (a deadline never fires early; it may fire up to one [`TICK`] late).
pub fn ticks_for(d: Duration) -> u64 {
    let ticks = d.as_nanos().div_ceil(TICK.as_nanos());
    u64::try_from(ticks).unwrap_or(u64::MAX / 2).max(1) + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_round_up() {
        assert_eq!(ticks_for(Duration::from_secs(30)), 3001);
        assert_eq!(ticks_for(Duration::from_millis(15)), 3);
        assert_eq!(ticks_for(Duration::ZERO), 2);
    }
}
