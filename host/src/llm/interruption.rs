//! How a call gives way to a pause or stop of its task: what it asks ([`Interruption`]), how
//! often ([`INTERRUPT_POLL`]), and who decides the fate of an attempt in flight ([`Gate`]).

use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

/// How often an interruptible call asks [`Interruption::requested`] while it waits (for a reply
/// or during a back-off).
pub const INTERRUPT_POLL: Duration = Duration::from_millis(200);

/// How a call gives way to a pause or stop of its task ([`Transport::post_file_interruptible`]).
///
/// `requested` is asked before each attempt, every [`INTERRUPT_POLL`] of a back-off wait and
/// every [`INTERRUPT_POLL`] while an attempt waits for the provider. Once it says yes, no
/// attempt or wait starts any more; an attempt in flight is given `grace` to finish (a reply
/// about to arrive is kept, and the caller honours the request right after it), then it is
/// abandoned: the call returns [`TransportError::Interrupted`] and leaves no response file.
/// An abandoned attempt's connection ends with its own timeout in a background thread, which
/// writes nothing.
pub struct Interruption<'a> {
    /// Whether the task was asked to pause or stop (the agent loop reads the task's row).
    pub requested: &'a (dyn Fn() -> bool + 'a),
    /// How long an attempt in flight may still run after the request (`llm.interrupt_grace_secs`).
    pub grace: Duration,
}

/// Who decides the fate of an interruptible attempt's response: the attempt's thread renames
/// its response file into place only while `Open` (then sets `Written`); the caller abandons
/// it only while `Open` (then sets `Abandoned`). One lock, so never both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Gate {
    Open,
    Written,
    Abandoned,
}

pub(super) type SharedGate = Arc<Mutex<Gate>>;

pub(super) fn lock(gate: &SharedGate) -> MutexGuard<'_, Gate> {
    gate.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn abandoned(gate: Option<&SharedGate>) -> bool {
    gate.is_some_and(|g| *lock(g) == Gate::Abandoned)
}

/// Sleep `delay`, asking `interruption` every [`INTERRUPT_POLL`]. Returns whether a pause or
/// stop was requested (the wait then ends at once).
pub(super) fn wait_unless_requested(delay: Duration, interruption: &Interruption<'_>) -> bool {
    let end = Instant::now() + delay;
    loop {
        if (interruption.requested)() {
            return true;
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        thread::sleep(left.min(INTERRUPT_POLL));
    }
}
