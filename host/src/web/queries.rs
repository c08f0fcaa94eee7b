//! The dashboard's own read-only queries on the task store: the task list's search, sort and
//! paging, counts by status, tasks per day, task durations, and a cheap "has anything
//! changed" figure for live updates. Rows themselves come from [`crate::db::Db::get`] and the
//! `stats` figures from [`crate::db::Db::stats`]; this module only adds what they do not
//! answer. It runs on either store (SQLite or PostgreSQL) through [`Db`], in the SQL both
//! accept ([`crate::db::sql`]), and issues only `SELECT`s and SQLite's `PRAGMA data_version`:
//! nothing here changes the database.

use std::hash::{Hash, Hasher};

use crate::db::{Db, DbError, Dialect, Status, Value, args, now_rfc3339};

/// Columns the task list sorts by (`sort=` in URLs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    Created,
    Started,
    Completed,
    Updated,
    Status,
    Tokens,
    Calls,
    Duration,
    Model,
}

impl SortKey {
    /// Every key with its URL name, in the order the list's header shows them.
    pub const ALL: [(SortKey, &'static str); 9] = [
        (SortKey::Created, "created"),
        (SortKey::Started, "started"),
        (SortKey::Completed, "completed"),
        (SortKey::Updated, "updated"),
        (SortKey::Status, "status"),
        (SortKey::Tokens, "tokens"),
        (SortKey::Calls, "calls"),
        (SortKey::Duration, "duration"),
        (SortKey::Model, "model"),
    ];

    /// The key called `name` in URLs.
    pub fn parse(name: &str) -> Option<SortKey> {
        SortKey::ALL
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(k, _)| *k)
    }

    /// The URL name.
    pub fn name(self) -> &'static str {
        SortKey::ALL
            .iter()
            .find(|(k, _)| *k == self)
            .map(|(_, n)| *n)
            .unwrap_or("created")
    }

    /// The SQL expression (fixed text: never built from input). `?5` is the current time
    /// (RFC 3339), the end of a task still running (bound only for [`SortKey::Duration`]).
    fn sql(self, dialect: Dialect) -> String {
        match self {
            SortKey::Created => "created_at".into(),
            SortKey::Started => "started_at".into(),
            SortKey::Completed => "completed_at".into(),
            SortKey::Updated => "updated_at".into(),
            SortKey::Status => "status".into(),
            SortKey::Tokens => "total_tokens".into(),
            SortKey::Calls => "llm_call_count".into(),
            SortKey::Duration => {
                dialect.seconds_between("started_at", "COALESCE(completed_at, CAST(?5 AS TEXT))")
            }
            SortKey::Model => "model".into(),
        }
    }
}

/// What the task list shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    pub status: Option<Status>,
    /// Text searched (case-insensitively for ASCII) in the UUID, the task key
    /// (`source owner/repo type #id`) and the prompt.
    pub search: Option<String>,
    pub sort: SortKey,
    pub descending: bool,
    /// 0-based page number.
    pub page: u64,
    /// Rows per page (1..=500).
    pub per_page: u64,
}

impl Default for ListQuery {
    fn default() -> Self {
        ListQuery {
            status: None,
            search: None,
            sort: SortKey::Created,
            descending: true,
            page: 0,
            per_page: 50,
        }
    }
}

/// One page of the list: UUIDs in order, how many match, and counts by status of the tasks
/// matching the search (whatever the status filter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPage {
    pub uuids: Vec<String>,
    pub total: u64,
    /// Every status (zeros included), lifecycle order.
    pub counts: Vec<(Status, u64)>,
}

/// What one page of the API's task list asks for ([`Queries::task_page`]); `None`: any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskPageQuery {
    /// Only this status.
    pub status: Option<Status>,
    /// Only this `task_source` (`github`, `gitlab`, `local`).
    pub source: Option<String>,
    /// Only this repository owner.
    pub owner: Option<String>,
    /// Only this repository name.
    pub repo: Option<String>,
    /// Only this `task_type` (`issue`, `pull_request`).
    pub task_type: Option<String>,
    /// Only this issue or pull request id.
    pub task_id: Option<String>,
    /// Only tasks created at or after this time (RFC 3339 UTC with milliseconds, as stored).
    pub since: Option<String>,
    /// Only tasks after this position of the order: `(created_at, uuid)` of the last row of
    /// the page before.
    pub after: Option<(String, String)>,
    /// Rows per page (1..=500).
    pub limit: u32,
}

/// Tasks created on one day (UTC), by status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DayCounts {
    /// `YYYY-MM-DD`.
    pub day: String,
    /// Every status (zeros included), lifecycle order.
    pub counts: Vec<(Status, u64)>,
}

/// Upper bounds (seconds, exclusive) of the duration histogram's buckets; the last bucket is
/// everything longer.
pub const DURATION_BUCKETS: [(f64, &str); 8] = [
    (10.0, "< 10 s"),
    (30.0, "10–30 s"),
    (60.0, "30 s–1 min"),
    (300.0, "1–5 min"),
    (900.0, "5–15 min"),
    (3600.0, "15–60 min"),
    (14400.0, "1–4 h"),
    (f64::INFINITY, "≥ 4 h"),
];

/// The dashboard's queries, on a connection to the task store.
pub struct Queries<'a> {
    db: &'a Db,
}

/// `%`, `_` and `\` escaped for `LIKE … ESCAPE '\'`, wrapped in `%…%`, lower-cased (the
/// search compares lower-cased text).
fn like_pattern(text: &str) -> String {
    let mut p = String::with_capacity(text.len() + 2);
    p.push('%');
    for c in text.to_lowercase().chars() {
        if matches!(c, '%' | '_' | '\\') {
            p.push('\\');
        }
        p.push(c);
    }
    p.push('%');
    p
}

/// Matches the rows whose UUID, prompt or task key contains `?1` (a [`like_pattern`]), or
/// every row when `?1` is NULL. SQLite's `LIKE` ignores ASCII case and PostgreSQL's does
/// not: both sides are lower-cased.
const SEARCH: &str = "(CAST(?1 AS TEXT) IS NULL OR LOWER(uuid) LIKE ?1 ESCAPE '\\' \
    OR LOWER(prompt) LIKE ?1 ESCAPE '\\' \
    OR LOWER(task_source || ' ' || COALESCE(owner, '') || '/' || COALESCE(repo, '') || ' ' || \
        COALESCE(task_type, '') || ' #' || COALESCE(task_id, '')) LIKE ?1 ESCAPE '\\')";

fn counts_of(rows: Vec<(String, u64)>) -> Vec<(Status, u64)> {
    Status::ALL
        .iter()
        .map(|s| {
            let n = rows
                .iter()
                .find(|(name, _)| name == s.as_str())
                .map_or(0, |(_, n)| *n);
            (*s, n)
        })
        .collect()
}

impl<'a> Queries<'a> {
    /// The queries on `db`.
    pub fn new(db: &'a Db) -> Queries<'a> {
        Queries { db }
    }

    /// A figure that changes whenever a task's row changes (a watcher polls it to learn of
    /// every change, cheaply). SQLite: `PRAGMA data_version`, which changes whenever another
    /// connection commits (no table is read). PostgreSQL has no such counter: a hash of the
    /// row count, the newest `updated_at` (every write sets it) and a sum over the statuses,
    /// counters and requests (one scan of `tasks`; lease renewals are left out, so they do
    /// not count as changes).
    pub fn change_version(&self) -> Result<i64, DbError> {
        match self.db.dialect() {
            Dialect::Sqlite => self
                .db
                .query_opt("PRAGMA data_version", &[])?
                .map_or(Ok(0), |r| r.int(0)),
            Dialect::Postgres => {
                // Each status its own weight: any one status change moves the sum.
                let mut weight = String::from("CASE status");
                for (i, st) in Status::ALL.iter().enumerate() {
                    weight.push_str(&format!(" WHEN '{}' THEN {}", st.as_str(), i + 1));
                }
                weight.push_str(" ELSE 0 END");
                let row = self.db.query_opt(
                    &format!(
                        "SELECT COUNT(*), COALESCE(MAX(updated_at), ''), CAST(COALESCE(SUM(llm_call_count \
                         + tool_call_count + total_tokens + compression_count + resume_count + crash_count \
                         + pause_requested + stop_requested + {weight}), 0) AS BIGINT) FROM tasks"
                    ),
                    &[],
                )?;
                let mut h = std::collections::hash_map::DefaultHasher::new();
                if let Some(r) = row {
                    (r.int(0)?, r.text(1)?, r.int(2)?).hash(&mut h);
                }
                Ok(h.finish() as i64)
            }
        }
    }

    /// The page of the task list described by `q`.
    pub fn list(&self, q: &ListQuery) -> Result<ListPage, DbError> {
        let search = q
            .search
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(like_pattern);
        let status = q.status.map(|s| s.as_str().to_string());
        let order = if q.descending { "DESC" } else { "ASC" };
        let dialect = self.db.dialect();
        let sql = format!(
            "SELECT uuid FROM tasks WHERE {SEARCH} AND (CAST(?2 AS TEXT) IS NULL OR status = ?2) \
             ORDER BY {} {order} NULLS LAST, created_at {order}, {} {order} LIMIT ?3 OFFSET ?4",
            q.sort.sql(dialect),
            dialect.insert_order()
        );
        let per_page = q.per_page.clamp(1, 500);
        let mut list_args = vec![
            search.clone().map_or(Value::Null, Value::Text),
            status.map_or(Value::Null, Value::Text),
            Value::Int(per_page as i64),
            Value::Int(q.page.saturating_mul(per_page).min(i64::MAX as u64) as i64),
        ];
        if q.sort == SortKey::Duration {
            list_args.push(Value::Text(now_rfc3339()));
        }
        let uuids = self
            .db
            .query(&sql, &list_args)?
            .iter()
            .map(|r| r.text(0))
            .collect::<Result<Vec<_>, _>>()?;
        let rows = self
            .db
            .query(
                &format!("SELECT status, COUNT(*) FROM tasks WHERE {SEARCH} GROUP BY status"),
                &[search.map_or(Value::Null, Value::Text)],
            )?
            .iter()
            .map(|r| Ok((r.text(0)?, r.int(1)? as u64)))
            .collect::<Result<Vec<_>, DbError>>()?;
        let counts = counts_of(rows);
        let total = match &q.status {
            Some(s) => counts.iter().find(|(c, _)| c == s).map_or(0, |(_, n)| *n),
            None => counts.iter().map(|(_, n)| n).sum(),
        };
        Ok(ListPage {
            uuids,
            total,
            counts,
        })
    }

    /// Tasks created per day (UTC) over the `days` days up to today, by status; days without
    /// tasks are included with zeros, oldest first.
    pub fn per_day(&self, days: u32) -> Result<Vec<DayCounts>, DbError> {
        let days = days.clamp(1, 3660);
        let today = chrono::Utc::now().date_naive();
        let first = today - chrono::Days::new(u64::from(days - 1));
        let rows = self
            .db
            .query(
                "SELECT substr(created_at, 1, 10), status, COUNT(*) FROM tasks \
                 WHERE created_at >= ?1 GROUP BY substr(created_at, 1, 10), status",
                &args![first.format("%Y-%m-%d").to_string()],
            )?
            .iter()
            .map(|r| Ok((r.text(0)?, r.text(1)?, r.int(2)? as u64)))
            .collect::<Result<Vec<_>, DbError>>()?;
        Ok(first
            .iter_days()
            .take(days as usize)
            .map(|d| {
                let day = d.format("%Y-%m-%d").to_string();
                let of_day = rows
                    .iter()
                    .filter(|(rd, _, _)| *rd == day)
                    .map(|(_, s, n)| (s.clone(), *n))
                    .collect();
                DayCounts {
                    day,
                    counts: counts_of(of_day),
                }
            })
            .collect())
    }

    /// How many finished tasks (with a start and an end time) fall into each of
    /// [`DURATION_BUCKETS`], by `completed_at - started_at`. Counted in SQL (one row per
    /// bucket comes back, whatever the number of tasks).
    pub fn duration_histogram(&self) -> Result<Vec<u64>, DbError> {
        let secs = self
            .db
            .dialect()
            .seconds_between("started_at", "completed_at");
        let mut bucket = format!("CASE WHEN {secs} IS NULL THEN -1");
        for (i, (upper, _)) in DURATION_BUCKETS.iter().enumerate() {
            if upper.is_finite() {
                bucket.push_str(&format!(" WHEN {secs} < {upper:.1} THEN {i}"));
            }
        }
        bucket.push_str(&format!(" ELSE {} END", DURATION_BUCKETS.len() - 1));
        let mut counts = vec![0u64; DURATION_BUCKETS.len()];
        let rows = self.db.query(
            &format!(
                "SELECT {bucket}, COUNT(*) FROM tasks \
                 WHERE completed_at IS NOT NULL AND started_at IS NOT NULL GROUP BY 1"
            ),
            &[],
        )?;
        for r in rows {
            // -1: a time neither database could read.
            if let Ok(i) = usize::try_from(r.int(0)?)
                && let Some(c) = counts.get_mut(i)
            {
                *c += r.int(1)? as u64;
            }
        }
        Ok(counts)
    }

    /// One page of the API's task list ([`TaskPageQuery`]): rows newest first — by
    /// `created_at`, then UUID, a total order — matching every filter given, after the
    /// position `after` when given. A keyset page: tasks added meanwhile are newer than any
    /// position already handed out, so following pages neither repeat nor skip a row.
    pub fn task_page(&self, q: &TaskPageQuery) -> Result<Vec<crate::db::TaskRow>, DbError> {
        let (sql, args) = task_page_sql(q);
        self.db
            .query(&sql, &args)?
            .iter()
            .map(|r| self.db.task_row(r))
            .collect()
    }
}

/// The statement of [`Queries::task_page`] and its arguments.
fn task_page_sql(q: &TaskPageQuery) -> (String, Vec<Value>) {
    {
        // Only the filters given become conditions, each a plain comparison, so the planner
        // can seek an index (tasks(created_at), tasks(status, created_at)) instead of testing
        // `?N IS NULL OR …` on every row: a cursor 1,000 pages deep into 100,000 tasks took
        // 60 ms as one scan (bench/README.md "Issue 41").
        let mut conds: Vec<String> = Vec::new();
        let mut args: Vec<Value> = Vec::new();
        let mut cond = |sql: &str, v: Option<&str>| {
            if let Some(v) = v {
                args.push(v.into());
                conds.push(sql.replace('?', &format!("?{}", args.len())));
            }
        };
        cond("status = ?", q.status.map(|s| s.as_str()));
        cond("task_source = ?", q.source.as_deref());
        cond("owner = ?", q.owner.as_deref());
        cond("repo = ?", q.repo.as_deref());
        cond("task_type = ?", q.task_type.as_deref());
        cond("task_id = ?", q.task_id.as_deref());
        cond("created_at >= ?", q.since.as_deref());
        if let Some((created, uuid)) = &q.after {
            // The bound `created_at <= c` is what an index range uses; the rest orders ties.
            args.push(created.as_str().into());
            let c = args.len();
            args.push(uuid.as_str().into());
            let u = args.len();
            conds.push(format!(
                "created_at <= ?{c} AND (created_at < ?{c} OR uuid < ?{u})"
            ));
        }
        args.push(i64::from(q.limit.clamp(1, 500)).into());
        let where_clause = if conds.is_empty() {
            String::new()
        } else {
            format!("WHERE {} ", conds.join(" AND "))
        };
        let sql = format!(
            "SELECT {} FROM tasks {where_clause}ORDER BY created_at DESC, uuid DESC LIMIT ?{}",
            crate::db::COLUMNS,
            args.len()
        );
        (sql, args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::store_tests;
    use crate::db::{NewTask, TaskKey, UsageDelta};
    use crate::lifecycle::{Claim, Owner, row};

    fn task(uuid: &str, prompt: &str, owner: Option<&str>) -> NewTask {
        NewTask {
            uuid: uuid.to_string(),
            key: TaskKey {
                task_source: if owner.is_some() { "github" } else { "local" }.into(),
                owner: owner.map(str::to_string),
                repo: owner.map(|_| "app".to_string()),
                task_type: owner.map(|_| "issue".to_string()),
                task_id: owner.map(|_| "42".to_string()),
            },
            prompt: prompt.into(),
            user: None,
            llm_provider: "openai".into(),
            model: "m".into(),
            context_length: 1000,
            no_inherit: false,
            workspace: None,
        }
    }

    /// Issue 41: a page of the API's list, deep in the cursor chain or filtered, is an index
    /// seek, not a scan of every task.
    #[test]
    fn task_pages_seek_an_index() {
        let store = crate::db::testing::TestStore::sqlite();
        let db = store.open();
        let plan = |q: &TaskPageQuery| {
            let (sql, args) = task_page_sql(q);
            db.query(&format!("EXPLAIN QUERY PLAN {sql}"), &args)
                .unwrap()
                .iter()
                .map(|r| r.text(3).unwrap())
                .collect::<Vec<_>>()
                .join("; ")
        };
        let deep = TaskPageQuery {
            after: Some(("2026-01-01T00:00:00.000Z".into(), "u".into())),
            limit: 51,
            ..Default::default()
        };
        let p = plan(&deep);
        assert!(
            p.contains("SEARCH tasks USING INDEX") && p.contains("created_at<"),
            "{p}"
        );
        let queued = TaskPageQuery {
            status: Some(Status::Queued),
            source: Some("local".into()),
            limit: 51,
            ..Default::default()
        };
        let p = plan(&queued);
        assert!(p.contains("SEARCH tasks USING INDEX"), "{p}");
    }

    store_tests! {
    fn api_pages_walk_every_task_once_in_order(store: &TestStore) {
        let db = store.open();
        for (i, owner) in [None, Some("acme"), None, None, Some("acme")].into_iter().enumerate() {
            db.insert_queued(&task(&format!("u{i}"), "p", owner)).unwrap();
        }
        let ro = Queries::new(&db);
        let walk = |base: TaskPageQuery| {
            let mut seen = Vec::new();
            let mut after = None;
            loop {
                let page = ro
                    .task_page(&TaskPageQuery {
                        after: after.clone(),
                        limit: 2,
                        ..base.clone()
                    })
                    .unwrap();
                if page.is_empty() {
                    return seen;
                }
                let last = page.last().unwrap();
                after = Some((last.created_at.clone(), last.uuid.clone()));
                seen.extend(page.into_iter().map(|r| r.uuid));
            }
        };
        let all = ro
            .task_page(&TaskPageQuery {
                limit: 100,
                ..Default::default()
            })
            .unwrap();
        let want: Vec<String> = all.iter().map(|r| r.uuid.clone()).collect();
        assert_eq!(want.len(), 5);
        assert_eq!(walk(TaskPageQuery::default()), want);
        let acme = walk(TaskPageQuery {
            source: Some("github".into()),
            owner: Some("acme".into()),
            ..Default::default()
        });
        let mut sorted = acme.clone();
        sorted.sort();
        assert_eq!(sorted, ["u1", "u4"]);
    }

    fn search_filter_sort_and_pages(store: &TestStore) {
        let db = store.open();
        db.insert_queued(&task("a", "fix the 100% bug", None))
            .unwrap();
        db.insert_queued(&task("b", "write docs", Some("acme")))
            .unwrap();
        db.insert_queued(&task("c", "fix_it", None)).unwrap();
        row::claim(&db, "c", &Claim::test(1)).unwrap();
        db.add_usage("c", &UsageDelta::llm_call(500)).unwrap();
        let ro = Queries::new(&db);

        let all = ro.list(&ListQuery::default()).unwrap();
        assert_eq!(all.uuids, ["c", "b", "a"]);
        assert_eq!(all.total, 3);
        assert_eq!(all.counts[0], (Status::Queued, 2));
        assert_eq!(all.counts[1], (Status::Running, 1));

        let q = |search: &str| ListQuery {
            search: Some(search.into()),
            ..Default::default()
        };
        assert_eq!(ro.list(&q("FIX")).unwrap().uuids, ["c", "a"]);
        // LIKE wildcards in the search are literal.
        assert_eq!(ro.list(&q("100%")).unwrap().uuids, ["a"]);
        assert_eq!(ro.list(&q("x_i")).unwrap().uuids, ["c"]);
        assert_eq!(ro.list(&q("acme/app")).unwrap().uuids, ["b"]);
        assert_eq!(ro.list(&q("#42")).unwrap().uuids, ["b"]);
        assert_eq!(ro.list(&q("' OR 1=1 --")).unwrap().total, 0);

        let running = ro
            .list(&ListQuery {
                status: Some(Status::Running),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(
            (running.uuids.as_slice(), running.total),
            (&["c".to_string()][..], 1)
        );

        let by_tokens = ro
            .list(&ListQuery {
                sort: SortKey::Tokens,
                descending: true,
                per_page: 1,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(by_tokens.uuids, ["c"]);
        let page2 = ro
            .list(&ListQuery {
                sort: SortKey::Created,
                descending: false,
                per_page: 2,
                page: 1,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(page2.uuids, ["c"]);
        for (key, _) in SortKey::ALL {
            for descending in [true, false] {
                let p = ro
                    .list(&ListQuery {
                        sort: key,
                        descending,
                        ..Default::default()
                    })
                    .unwrap();
                assert_eq!(p.uuids.len(), 3, "{key:?}");
            }
        }
    }

    fn per_day_and_durations(store: &TestStore) {
        let db = store.open();
        db.insert_queued(&task("a", "x", None)).unwrap();
        db.insert_queued(&task("b", "y", None)).unwrap();
        row::claim(&db, "a", &Claim::test(1)).unwrap();
        row::finish(&db, "a", Owner::test(1), Status::Completed, None).unwrap();
        let ro = Queries::new(&db);
        let days = ro.per_day(7).unwrap();
        assert_eq!(days.len(), 7);
        let today = days.last().unwrap();
        assert_eq!(today.day, chrono::Utc::now().format("%Y-%m-%d").to_string());
        assert_eq!(today.counts[0], (Status::Queued, 1));
        assert_eq!(today.counts[3], (Status::Completed, 1));
        assert!(
            days[..6]
                .iter()
                .all(|d| d.counts.iter().all(|(_, n)| *n == 0))
        );
        let h = ro.duration_histogram().unwrap();
        assert_eq!(h.iter().sum::<u64>(), 1);
        assert_eq!(h[0], 1, "finished within 10 s");
    }

    fn every_change_moves_the_version(store: &TestStore) {
        let watcher = store.open();
        let ro = Queries::new(&watcher);
        let v0 = ro.change_version().unwrap();
        assert_eq!(ro.change_version().unwrap(), v0, "nothing changed");
        let other = store.open();
        other.insert_queued(&task("z", "p", None)).unwrap();
        let v1 = ro.change_version().unwrap();
        assert_ne!(v1, v0, "a commit elsewhere is seen");
        row::claim(&other, "z", &Claim::test(1)).unwrap();
        let v2 = ro.change_version().unwrap();
        assert_ne!(v2, v1, "a status change is seen");
        other.add_usage("z", &UsageDelta::llm_call(5)).unwrap();
        assert_ne!(ro.change_version().unwrap(), v2, "a counter change is seen");
    }
    }
}
