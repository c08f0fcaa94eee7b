//! Ctrl-C (SIGINT) and SIGTERM for the commands that run tasks in the foreground (`ask`,
//! `run`): once [`Interrupts::install`]ed, the signals no longer end the process; they are
//! counted, and the command asks its tasks to pause at the first and to stop at the second
//! (through the task store, as `ctxhost pause` and `stop` do: [`crate::ops::control`]). The
//! task processes run in process groups of their own (`process_group(0)`), so the terminal's
//! Ctrl-C reaches only the command, which decides.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The count of SIGINT and SIGTERM received since [`Interrupts::install`].
#[derive(Debug, Clone, Default)]
pub struct Interrupts {
    count: Arc<AtomicUsize>,
}

impl Interrupts {
    /// Catch SIGINT and SIGTERM from now on, counting them (a thread waits for them).
    /// Errors: the handlers could not be installed.
    pub fn install() -> anyhow::Result<Interrupts> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let interrupts = Interrupts::default();
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
        let count = interrupts.count.clone();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for _ in signals.forever() {
                    count.fetch_add(1, Ordering::SeqCst);
                }
            })?;
        Ok(interrupts)
    }

    /// Signals received so far.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }
}

/// What a command does about the signals it has seen: pause at the first, stop at the second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Request {
    /// No signal yet.
    None,
    /// Pause the running tasks at their next safe point.
    Pause,
    /// Stop them.
    Stop,
}

impl Request {
    /// The request for `count` signals.
    pub fn of(count: usize) -> Request {
        match count {
            0 => Request::None,
            1 => Request::Pause,
            _ => Request::Stop,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_signal_pauses_and_later_ones_stop() {
        assert_eq!(Request::of(0), Request::None);
        assert_eq!(Request::of(1), Request::Pause);
        assert_eq!(Request::of(2), Request::Stop);
        assert_eq!(Request::of(7), Request::Stop);
        assert!(Request::None < Request::Pause && Request::Pause < Request::Stop);
    }
}
