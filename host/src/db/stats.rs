//! The counters of a task (LLM calls, tool calls, tokens, compressions), added in SQL
//! (`col = col + ?`, never read-modify-write), and the statistics `ctxhost stats` reports.

use rusqlite::{Row, params};
use serde::Serialize;

use super::{Db, DbError, Status, now_rfc3339};

/// What to add to a task's counters: one LLM call and its tokens, one tool call, one
/// compression, or any mix. All zero by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UsageDelta {
    /// LLM calls (agent loop and compressor) that got an answer.
    pub llm_calls: u64,
    /// Tool calls made.
    pub tool_calls: u64,
    /// Tokens of those LLM calls (provider usage when given, estimate otherwise).
    pub tokens: u64,
    /// Compressions of the context.
    pub compressions: u64,
    /// Prompt tokens of those calls the provider served from its prompt cache (already in
    /// `tokens`).
    pub cache_read_tokens: u64,
    /// Prompt tokens of those calls the provider wrote to its prompt cache (already in
    /// `tokens`).
    pub cache_creation_tokens: u64,
}

impl UsageDelta {
    /// One LLM call of `tokens` tokens (0 when the usage is unknown).
    pub fn llm_call(tokens: u64) -> UsageDelta {
        UsageDelta {
            llm_calls: 1,
            tokens,
            ..UsageDelta::default()
        }
    }

    /// One tool call.
    pub fn tool_call() -> UsageDelta {
        UsageDelta {
            tool_calls: 1,
            ..UsageDelta::default()
        }
    }

    /// One compression.
    pub fn compression() -> UsageDelta {
        UsageDelta {
            compressions: 1,
            ..UsageDelta::default()
        }
    }
}

/// Statistics of one model (or of all tasks when `model` is `None`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelStats {
    /// The model (`None`: all tasks together).
    pub model: Option<String>,
    /// Tasks.
    pub tasks: i64,
    /// Of which completed.
    pub completed: i64,
    /// Of which failed.
    pub failed: i64,
    /// Mean of `completed_at - started_at` over finished tasks, seconds.
    pub avg_duration_secs: Option<f64>,
    /// Sum of their tokens.
    pub total_tokens: i64,
    /// Sum of their LLM calls.
    pub llm_calls: i64,
    /// Sum of their tool calls.
    pub tool_calls: i64,
    /// Sum of their compressions.
    pub compressions: i64,
    /// Prompt tokens read from the provider's prompt cache (part of `total_tokens`).
    pub cache_read_tokens: i64,
    /// Prompt tokens written to the provider's prompt cache (part of `total_tokens`).
    pub cache_creation_tokens: i64,
}

/// What `ctxhost stats` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stats {
    /// Count per status, every status listed (zeros included), in lifecycle order.
    pub by_status: Vec<(Status, i64)>,
    /// All tasks together.
    pub total: ModelStats,
    /// One entry per model, by model name.
    pub by_model: Vec<ModelStats>,
}

impl Db {
    /// Add `delta` to the counters of task `uuid` in SQL (`col = col + ?`).
    pub fn add_usage(&self, uuid: &str, delta: &UsageDelta) -> Result<(), DbError> {
        let now = now_rfc3339();
        self.retry(|c| {
            c.execute(
                "UPDATE tasks SET llm_call_count = llm_call_count + ?2, tool_call_count = tool_call_count + ?3, \
                 total_tokens = total_tokens + ?4, compression_count = compression_count + ?5, \
                 cache_read_tokens = cache_read_tokens + ?6, \
                 cache_creation_tokens = cache_creation_tokens + ?7, updated_at = ?8 \
                 WHERE uuid = ?1",
                params![
                    uuid,
                    delta.llm_calls as i64,
                    delta.tool_calls as i64,
                    delta.tokens as i64,
                    delta.compressions as i64,
                    delta.cache_read_tokens as i64,
                    delta.cache_creation_tokens as i64,
                    now
                ],
            )
        })?;
        Ok(())
    }

    /// Counts by status, and totals overall and per model.
    pub fn stats(&self) -> Result<Stats, DbError> {
        let counts: Vec<(String, i64)> = self.retry(|c| {
            let mut st = c.prepare_cached("SELECT status, COUNT(*) FROM tasks GROUP BY status")?;
            let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect()
        })?;
        let by_status = Status::ALL
            .iter()
            .map(|s| {
                (
                    *s,
                    counts
                        .iter()
                        .find(|(n, _)| n == s.as_str())
                        .map(|(_, c)| *c)
                        .unwrap_or(0),
                )
            })
            .collect();
        const AGG: &str = "COUNT(*), \
            COALESCE(SUM(status = 'completed'), 0), COALESCE(SUM(status = 'failed'), 0), \
            AVG(CASE WHEN completed_at IS NOT NULL AND started_at IS NOT NULL \
                THEN (julianday(completed_at) - julianday(started_at)) * 86400.0 END), \
            COALESCE(SUM(total_tokens), 0), COALESCE(SUM(llm_call_count), 0), \
            COALESCE(SUM(tool_call_count), 0), COALESCE(SUM(compression_count), 0), \
            COALESCE(SUM(cache_read_tokens), 0), COALESCE(SUM(cache_creation_tokens), 0)";
        fn agg(r: &Row<'_>, first: usize, model: Option<String>) -> rusqlite::Result<ModelStats> {
            Ok(ModelStats {
                model,
                tasks: r.get(first)?,
                completed: r.get(first + 1)?,
                failed: r.get(first + 2)?,
                avg_duration_secs: r.get(first + 3)?,
                total_tokens: r.get(first + 4)?,
                llm_calls: r.get(first + 5)?,
                tool_calls: r.get(first + 6)?,
                compressions: r.get(first + 7)?,
                cache_read_tokens: r.get(first + 8)?,
                cache_creation_tokens: r.get(first + 9)?,
            })
        }
        let total = self
            .retry(|c| c.query_row(&format!("SELECT {AGG} FROM tasks"), [], |r| agg(r, 0, None)))?;
        let by_model = self.retry(|c| {
            let mut st = c.prepare_cached(&format!(
                "SELECT model, {AGG} FROM tasks GROUP BY model ORDER BY model"
            ))?;
            let rows = st.query_map([], |r| agg(r, 1, r.get(0)?))?;
            rows.collect()
        })?;
        Ok(Stats {
            by_status,
            total,
            by_model,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::new_task;
    use crate::lifecycle::{Claim, row};

    #[test]
    fn counters_add_up_and_finish_sets_completed_at() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        db.insert_queued(&new_task("t")).unwrap();
        row::claim(&db, "t", &Claim::test(1)).unwrap();
        let one = UsageDelta {
            llm_calls: 1,
            tool_calls: 2,
            tokens: 30,
            cache_read_tokens: 20,
            cache_creation_tokens: 5,
            ..UsageDelta::default()
        };
        db.add_usage("t", &one).unwrap();
        db.add_usage(
            "t",
            &UsageDelta {
                tokens: 12,
                compressions: 1,
                cache_read_tokens: 7,
                ..UsageDelta::llm_call(0)
            },
        )
        .unwrap();
        row::finish(&db, "t", 1, Status::Completed, None).unwrap();
        let r = db.get("t").unwrap().unwrap();
        assert_eq!(
            (
                r.llm_call_count,
                r.tool_call_count,
                r.total_tokens,
                r.compression_count
            ),
            (2, 2, 42, 1)
        );
        assert_eq!((r.cache_read_tokens, r.cache_creation_tokens), (27, 5));
        assert_eq!(r.status, Status::Completed);
        assert!(r.completed_at.is_some());
        let stats = db.stats().unwrap();
        assert_eq!(stats.total.tasks, 1);
        assert_eq!(stats.total.total_tokens, 42);
        assert_eq!(
            (
                stats.by_model[0].cache_read_tokens,
                stats.by_model[0].cache_creation_tokens
            ),
            (27, 5)
        );
        assert!(stats.total.avg_duration_secs.unwrap() >= 0.0);
        assert_eq!(
            stats
                .by_status
                .iter()
                .find(|(s, _)| *s == Status::Completed)
                .unwrap()
                .1,
            1
        );
    }

    #[test]
    fn concurrent_counter_updates_from_many_connections_are_exact() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        db.insert_queued(&new_task("t")).unwrap();
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let p = dir.path().to_path_buf();
                std::thread::spawn(move || {
                    let db = Db::open(&p).unwrap();
                    for _ in 0..50 {
                        db.add_usage(
                            "t",
                            &UsageDelta {
                                llm_calls: 1,
                                tool_calls: 2,
                                tokens: 3,
                                ..UsageDelta::default()
                            },
                        )
                        .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let r = db.get("t").unwrap().unwrap();
        assert_eq!(
            (r.llm_call_count, r.tool_call_count, r.total_tokens),
            (400, 800, 1200)
        );
    }
}
