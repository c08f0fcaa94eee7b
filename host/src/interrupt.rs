//! Ctrl-C (SIGINT) and SIGTERM for the commands that run tasks in the foreground (`ask`,
//! `run`): once [`Interrupts::install`]ed, the signals no longer end the process; they are
//! counted, and the command asks its tasks to pause at the first and to stop at the second
//! (through the task store, as `ctxhost pause` and `stop` do: [`crate::ops::control`]). The
//! task processes run in process groups of their own (`process_group(0)`), so the terminal's
//! Ctrl-C reaches only the command, which decides.
//!
//! Inside a task process, [`InterruptProbe`] is how a long call (a component's hook, an MCP
//! tool call, an LLM call of a component) learns of such a request while it runs, so it can
//! give way at once instead of at the next safe point.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The count of SIGINT and SIGTERM received since [`Interrupts::install`].
#[derive(Debug, Clone, Default)]
pub struct Interrupts {
    count: Arc<AtomicUsize>,
}

impl Interrupts {
    /// Catch SIGINT and SIGTERM from now on, counting them (a thread waits for them).
    /// Errors: the handlers could not be installed.
    pub fn install() -> anyhow::Result<Interrupts> {
        Interrupts::install_with(None)
    }

    /// [`Interrupts::install`] for a command that ends on the first signal: the command
    /// notices the count and returns; if it is still running `grace` after the first signal
    /// (busy where nothing asks, e.g. compiling), the process exits with `code`.
    /// Errors: the handlers could not be installed.
    pub fn install_exiting(grace: std::time::Duration, code: u8) -> anyhow::Result<Interrupts> {
        Interrupts::install_with(Some((grace, code)))
    }

    fn install_with(exit: Option<(std::time::Duration, u8)>) -> anyhow::Result<Interrupts> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let interrupts = Interrupts::default();
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
        let count = interrupts.count.clone();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for _ in signals.forever() {
                    if count.fetch_add(1, Ordering::SeqCst) == 0
                        && let Some((grace, code)) = exit
                    {
                        // Best effort: without the thread the command still returns.
                        let _ = std::thread::Builder::new()
                            .name("signal-exit".into())
                            .spawn(move || {
                                std::thread::sleep(grace);
                                std::process::exit(i32::from(code));
                            });
                    }
                }
            })?;
        Ok(interrupts)
    }

    /// Signals received so far.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// A probe that answers [`Request::Stop`] once a signal was received, for a command
    /// that runs a component itself and ends on the first signal (`plugin try`).
    pub fn stop_probe(&self) -> InterruptProbe {
        let this = self.clone();
        InterruptProbe::new(move || match this.count() {
            0 => Request::None,
            _ => Request::Stop,
        })
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

/// Whether the running task was asked to pause or stop, for the calls that give way to it
/// while they run: the `llm` imports of its components ([`crate::agent::llm_import`]), the
/// epoch callback of a component call ([`crate::runtime`]), an MCP tool call
/// ([`crate::tools`]). In a task process it reads the task's row
/// (`TaskContext::interrupt_probe`); in `plugin try` it counts Ctrl-C ([`Interrupts::stop_probe`]).
/// It also remembers that a call gave way to such a request, so the agent loop can tell a
/// component that failed for that reason from one that failed. Clones share both.
#[derive(Clone)]
pub struct InterruptProbe {
    request: Arc<dyn Fn() -> Request + Send + Sync>,
    gave_way: Arc<AtomicBool>,
}

impl InterruptProbe {
    /// A probe asking `request` (which should be cheap enough to ask every 200 ms).
    pub fn new(request: impl Fn() -> Request + Send + Sync + 'static) -> InterruptProbe {
        InterruptProbe {
            request: Arc::new(request),
            gave_way: Arc::new(AtomicBool::new(false)),
        }
    }

    /// What was requested: [`Request::None`], a pause or a stop.
    pub fn request(&self) -> Request {
        (self.request)()
    }

    /// Whether a pause or stop was requested.
    pub fn requested(&self) -> bool {
        self.request() != Request::None
    }

    /// Whether a call gave way to a pause or stop since this was last asked (then cleared).
    pub fn take_gave_way(&self) -> bool {
        self.gave_way.swap(false, Ordering::SeqCst)
    }

    /// Remember that a call gave way to a pause or stop ([`InterruptProbe::take_gave_way`]).
    pub fn mark_gave_way(&self) {
        self.gave_way.store(true, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for InterruptProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterruptProbe").finish_non_exhaustive()
    }
}

impl Request {
    /// `pause` or `stop` (`none` without a request), for messages such as "interrupted by
    /// pause after 2 s".
    pub fn as_str(self) -> &'static str {
        match self {
            Request::None => "none",
            Request::Pause => "pause",
            Request::Stop => "stop",
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
