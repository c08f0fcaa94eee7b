//! [`InterruptProbe`]: whether a task was asked to pause or stop, as the `llm` imports of its
//! components ask it during a call ([`crate::agent::llm_import`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether the task was asked to pause or stop, for the `llm` imports of its components
/// ([`super::TaskContext::interrupt_probe`] reads the task's row); it also remembers
/// that a call gave way to such a request, so the agent loop can tell a component that failed
/// for that reason from one that failed. Clones share both.
#[derive(Clone)]
pub struct InterruptProbe {
    requested: Arc<dyn Fn() -> bool + Send + Sync>,
    gave_way: Arc<AtomicBool>,
}

impl InterruptProbe {
    /// A probe asking `requested`.
    pub fn new(requested: impl Fn() -> bool + Send + Sync + 'static) -> InterruptProbe {
        InterruptProbe {
            requested: Arc::new(requested),
            gave_way: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Whether a pause or stop was requested.
    pub fn requested(&self) -> bool {
        (self.requested)()
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
