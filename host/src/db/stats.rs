//! The counters of a task (LLM calls, tool calls, tokens, compressions), added in SQL
//! (`col = col + ?`, never read-modify-write), and the statistics `ctxhost stats` reports.

use serde::Serialize;

use super::{Db, DbError, SqlRow, Status, args, now_rfc3339};

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
    /// Add `delta` to the counters of task `uuid` in SQL (`col = col + ?`), exactly once.
    pub fn add_usage(&self, uuid: &str, delta: &UsageDelta) -> Result<(), DbError> {
        self.execute(
            "UPDATE tasks SET llm_call_count = llm_call_count + ?2, tool_call_count = tool_call_count + ?3, \
             total_tokens = total_tokens + ?4, compression_count = compression_count + ?5, \
             cache_read_tokens = cache_read_tokens + ?6, \
             cache_creation_tokens = cache_creation_tokens + ?7, updated_at = ?8 \
             WHERE uuid = ?1",
            args![
                uuid,
                delta.llm_calls,
                delta.tool_calls,
                delta.tokens,
                delta.compressions,
                delta.cache_read_tokens,
                delta.cache_creation_tokens,
                now_rfc3339()
            ],
        )?;
        Ok(())
    }

    /// Counts by status, and totals overall and per model.
    pub fn stats(&self) -> Result<Stats, DbError> {
        let counts: Vec<(String, i64)> = self
            .query("SELECT status, COUNT(*) FROM tasks GROUP BY status", &[])?
            .iter()
            .map(|r| Ok((r.text(0)?, r.int(1)?)))
            .collect::<Result<_, DbError>>()?;
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
        let duration = self.dialect().seconds_between("started_at", "completed_at");
        let agg = format!(
            "COUNT(*), \
             CAST(COALESCE(SUM(CASE WHEN status = 'completed' THEN 1 ELSE 0 END), 0) AS BIGINT), \
             CAST(COALESCE(SUM(CASE WHEN status = 'failed' THEN 1 ELSE 0 END), 0) AS BIGINT), \
             AVG(CASE WHEN completed_at IS NOT NULL AND started_at IS NOT NULL THEN {duration} END), \
             CAST(COALESCE(SUM(total_tokens), 0) AS BIGINT), CAST(COALESCE(SUM(llm_call_count), 0) AS BIGINT), \
             CAST(COALESCE(SUM(tool_call_count), 0) AS BIGINT), CAST(COALESCE(SUM(compression_count), 0) AS BIGINT), \
             CAST(COALESCE(SUM(cache_read_tokens), 0) AS BIGINT), \
             CAST(COALESCE(SUM(cache_creation_tokens), 0) AS BIGINT)"
        );
        fn model_stats(
            r: &SqlRow,
            first: usize,
            model: Option<String>,
        ) -> Result<ModelStats, DbError> {
            Ok(ModelStats {
                model,
                tasks: r.int(first)?,
                completed: r.int(first + 1)?,
                failed: r.int(first + 2)?,
                avg_duration_secs: r.opt_real(first + 3)?,
                total_tokens: r.int(first + 4)?,
                llm_calls: r.int(first + 5)?,
                tool_calls: r.int(first + 6)?,
                compressions: r.int(first + 7)?,
                cache_read_tokens: r.int(first + 8)?,
                cache_creation_tokens: r.int(first + 9)?,
            })
        }
        let total = match self.query_opt(&format!("SELECT {agg} FROM tasks"), &[])? {
            Some(r) => model_stats(&r, 0, None)?,
            None => return Err(DbError::Decode("an aggregate without a row".into())),
        };
        let by_model = self
            .query(
                &format!("SELECT model, {agg} FROM tasks GROUP BY model ORDER BY model"),
                &[],
            )?
            .iter()
            .map(|r| model_stats(r, 1, r.opt_text(0)?))
            .collect::<Result<_, _>>()?;
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
    use crate::db::testing::{new_task, store_tests};
    use crate::lifecycle::{Claim, Owner, row};

    store_tests! {
        fn counters_add_up_and_finish_sets_completed_at(store: &TestStore) {
            let db = store.open();
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
            row::finish(&db, "t", Owner::test(1), Status::Completed, None).unwrap();
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

        fn concurrent_counter_updates_from_many_connections_are_exact(store: &TestStore) {
            let db = store.open();
            db.insert_queued(&new_task("t")).unwrap();
            let threads: Vec<_> = (0..8)
                .map(|_| {
                    let p = store.contexts().to_path_buf();
                    let spec = store.spec.clone();
                    std::thread::spawn(move || {
                        let db = Db::open(&spec, &p).unwrap();
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
}
