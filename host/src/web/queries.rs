//! The dashboard's own read-only queries on `tasks.db`: the task list's search, sort and
//! paging, counts by status, tasks per day and task durations. Rows themselves come from
//! [`crate::db::Db::get`] and the `stats` figures from [`crate::db::Db::stats`]; this module only
//! adds what they do not answer, on a connection opened `SQLITE_OPEN_READ_ONLY`, so nothing
//! here can change the database.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, params_from_iter, types::Value};

use crate::db::Status;

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

    /// The SQL expression (a fixed string: never built from input).
    fn sql(self) -> &'static str {
        match self {
            SortKey::Created => "created_at",
            SortKey::Started => "started_at",
            SortKey::Completed => "completed_at",
            SortKey::Updated => "updated_at",
            SortKey::Status => "status",
            SortKey::Tokens => "total_tokens",
            SortKey::Calls => "llm_call_count",
            SortKey::Duration => {
                "(julianday(COALESCE(completed_at, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))) - julianday(started_at))"
            }
            SortKey::Model => "model",
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

/// A read-only connection to `contexts/tasks.db`.
pub struct ReadOnlyDb {
    conn: Connection,
}

/// `%`, `_` and `\` escaped for `LIKE … ESCAPE '\'`, wrapped in `%…%`.
fn like_pattern(text: &str) -> String {
    let mut p = String::with_capacity(text.len() + 2);
    p.push('%');
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            p.push('\\');
        }
        p.push(c);
    }
    p.push('%');
    p
}

const SEARCH: &str = "(?1 IS NULL OR uuid LIKE ?1 ESCAPE '\\' OR prompt LIKE ?1 ESCAPE '\\' \
    OR (task_source || ' ' || COALESCE(owner, '') || '/' || COALESCE(repo, '') || ' ' || \
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

impl ReadOnlyDb {
    /// Open `contexts_dir/tasks.db` read-only (it must exist), 5 s busy timeout.
    pub fn open(contexts_dir: &Path) -> rusqlite::Result<ReadOnlyDb> {
        let conn = Connection::open_with_flags(
            contexts_dir.join("tasks.db"),
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(Duration::from_secs(5))?;
        Ok(ReadOnlyDb { conn })
    }

    /// SQLite's `PRAGMA data_version`: changes whenever another connection commits, so a
    /// watcher polling it learns of every change to the tasks (cheaply: no table is read).
    pub fn data_version(&self) -> rusqlite::Result<i64> {
        self.conn.query_row("PRAGMA data_version", [], |r| r.get(0))
    }

    /// The page of the task list described by `q`.
    pub fn list(&self, q: &ListQuery) -> rusqlite::Result<ListPage> {
        let search = q
            .search
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(like_pattern);
        let status = q.status.map(|s| s.as_str().to_string());
        let order = if q.descending { "DESC" } else { "ASC" };
        let sql = format!(
            "SELECT uuid FROM tasks WHERE {SEARCH} AND (?2 IS NULL OR status = ?2) \
             ORDER BY {} {order} NULLS LAST, created_at {order}, rowid {order} LIMIT ?3 OFFSET ?4",
            q.sort.sql()
        );
        let per_page = q.per_page.clamp(1, 500);
        let args = [
            search.clone().map_or(Value::Null, Value::Text),
            status.clone().map_or(Value::Null, Value::Text),
            Value::Integer(per_page as i64),
            Value::Integer(q.page.saturating_mul(per_page).min(i64::MAX as u64) as i64),
        ];
        let mut st = self.conn.prepare_cached(&sql)?;
        let uuids = st
            .query_map(params_from_iter(args), |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let mut st = self.conn.prepare_cached(&format!(
            "SELECT status, COUNT(*) FROM tasks WHERE {SEARCH} GROUP BY status"
        ))?;
        let rows = st
            .query_map([search.map_or(Value::Null, Value::Text)], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
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
    pub fn per_day(&self, days: u32) -> rusqlite::Result<Vec<DayCounts>> {
        let days = days.clamp(1, 3660);
        let today = chrono::Utc::now().date_naive();
        let first = today - chrono::Days::new(u64::from(days - 1));
        let mut st = self.conn.prepare_cached(
            "SELECT substr(created_at, 1, 10) AS day, status, COUNT(*) FROM tasks \
             WHERE created_at >= ?1 GROUP BY day, status",
        )?;
        let rows = st
            .query_map([first.format("%Y-%m-%d").to_string()], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)? as u64,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
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
    /// [`DURATION_BUCKETS`], by `completed_at - started_at`. Streams the rows (memory is
    /// constant).
    pub fn duration_histogram(&self) -> rusqlite::Result<Vec<u64>> {
        let mut counts = vec![0u64; DURATION_BUCKETS.len()];
        let mut st = self.conn.prepare_cached(
            "SELECT (julianday(completed_at) - julianday(started_at)) * 86400.0 FROM tasks \
             WHERE completed_at IS NOT NULL AND started_at IS NOT NULL",
        )?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            let Some(secs) = r.get::<_, Option<f64>>(0)? else {
                continue;
            };
            let i = DURATION_BUCKETS
                .iter()
                .position(|(upper, _)| secs < *upper)
                .unwrap_or(DURATION_BUCKETS.len() - 1);
            counts[i] += 1;
        }
        Ok(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{Db, NewTask, TaskKey, UsageDelta};
    use crate::lifecycle::{Claim, row};

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
        }
    }

    #[test]
    fn search_filter_sort_and_pages() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        db.insert_queued(&task("a", "fix the 100% bug", None))
            .unwrap();
        db.insert_queued(&task("b", "write docs", Some("acme")))
            .unwrap();
        db.insert_queued(&task("c", "fix_it", None)).unwrap();
        row::claim(&db, "c", &Claim::test(1)).unwrap();
        db.add_usage("c", &UsageDelta::llm_call(500)).unwrap();
        let ro = ReadOnlyDb::open(dir.path()).unwrap();

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

    #[test]
    fn per_day_and_durations() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        db.insert_queued(&task("a", "x", None)).unwrap();
        db.insert_queued(&task("b", "y", None)).unwrap();
        row::claim(&db, "a", &Claim::test(1)).unwrap();
        row::finish(&db, "a", 1, Status::Completed, None).unwrap();
        let ro = ReadOnlyDb::open(dir.path()).unwrap();
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

    #[test]
    fn the_connection_cannot_write() {
        let dir = tempfile::tempdir().unwrap();
        Db::open(dir.path()).unwrap();
        let ro = ReadOnlyDb::open(dir.path()).unwrap();
        assert!(ro.conn.execute("DELETE FROM tasks", []).is_err());
        let v = ro.data_version().unwrap();
        Db::open(dir.path())
            .unwrap()
            .insert_queued(&task("z", "p", None))
            .unwrap();
        assert_ne!(ro.data_version().unwrap(), v, "a commit elsewhere is seen");
    }
}
