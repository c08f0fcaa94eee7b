//! How long this process's calls into components took, by component and function: the
//! figures behind `ctxhost_component_call_duration_seconds{plugin,function}`
//! ([`crate::metrics`]). A task process sends its table to its worker when it ends.
//!
//! Each call's wall time is counted, the host's work for the call included (a compressor's
//! `compress` includes its LLM calls).

use std::collections::BTreeMap;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Upper bounds of the histogram's buckets, seconds (×4 from 0.1 ms to ~105 s; a last,
/// unbounded bucket follows).
pub const BOUNDS: [f64; 11] = [
    0.0001, 0.0004, 0.0016, 0.0064, 0.0256, 0.1024, 0.4096, 1.6384, 6.5536, 26.2144, 104.8576,
];

/// The calls of one function of one component.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallTimes {
    /// The component's display name (`builtin:openai-chat`, a file's name, ...).
    pub plugin: String,
    /// The WIT function (`add-message`, `compress`, `read-response`, ...), or `instantiation`.
    pub function: String,
    /// Calls made.
    pub count: u64,
    /// Their wall time, seconds.
    pub sum_seconds: f64,
    /// Calls per bucket, not cumulative: one count per bound of [`BOUNDS`] (the calls that
    /// took at most it and more than the one before), then the calls longer than the last.
    pub buckets: Vec<u64>,
}

impl CallTimes {
    fn new(plugin: &str, function: &str) -> CallTimes {
        CallTimes {
            plugin: plugin.to_string(),
            function: function.to_string(),
            count: 0,
            sum_seconds: 0.0,
            buckets: vec![0; BOUNDS.len() + 1],
        }
    }

    fn observe(&mut self, seconds: f64) {
        let i = BOUNDS
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(BOUNDS.len());
        self.count += 1;
        self.sum_seconds += seconds;
        if let Some(b) = self.buckets.get_mut(i) {
            *b += 1;
        }
    }

    /// Add `other`'s calls (same component and function) to these. Bucket lists of another
    /// length (another version's bounds) add their count and sum only, into the last bucket.
    pub fn merge(&mut self, other: &CallTimes) {
        self.count += other.count;
        self.sum_seconds += other.sum_seconds;
        if other.buckets.len() == self.buckets.len() {
            for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
                *a += b;
            }
        } else if let Some(last) = self.buckets.last_mut() {
            *last += other.count;
        }
    }
}

/// A table of call times keyed by (component, function).
#[derive(Debug, Default, Clone)]
pub struct CallTable(BTreeMap<(String, String), CallTimes>);

impl CallTable {
    /// Add `times` to the entry of its component and function.
    pub fn merge(&mut self, times: &CallTimes) {
        self.0
            .entry((times.plugin.clone(), times.function.clone()))
            .or_insert_with(|| CallTimes::new(&times.plugin, &times.function))
            .merge(times);
    }

    /// Every entry, by component then function.
    pub fn entries(&self) -> impl Iterator<Item = &CallTimes> {
        self.0.values()
    }
}

static TABLE: LazyLock<Mutex<BTreeMap<(String, String), CallTimes>>> =
    LazyLock::new(|| Mutex::new(BTreeMap::new()));

/// Count one call of `function` of component `plugin` that took `took`.
pub fn record(plugin: &str, function: &str, took: Duration) {
    let mut table = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    table
        .entry((plugin.to_string(), function.to_string()))
        .or_insert_with(|| CallTimes::new(plugin, function))
        .observe(took.as_secs_f64());
}

/// This process's calls so far, by component then function.
pub fn snapshot() -> Vec<CallTimes> {
    let table = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    table.values().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_fall_in_their_buckets_and_tables_merge() {
        let mut t = CallTimes::new("c", "f");
        t.observe(0.0001);
        t.observe(0.002);
        t.observe(500.0);
        assert_eq!(t.count, 3);
        assert_eq!(t.buckets[0], 1, "a bound is inclusive");
        assert_eq!(t.buckets[3], 1, "2 ms is in (1.6 ms, 6.4 ms]");
        assert_eq!(t.buckets[BOUNDS.len()], 1, "past the last bound");
        let mut table = CallTable::default();
        table.merge(&t);
        table.merge(&t);
        let merged: Vec<&CallTimes> = table.entries().collect();
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].count, 6);
        assert_eq!(merged[0].buckets[3], 2);
        assert!((merged[0].sum_seconds - 2.0 * 500.0021).abs() < 1e-9);
    }
}
