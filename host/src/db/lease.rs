//! The lease of a running task: who holds it (`worker_id`: the worker that started the task
//! process, with the process's `process_id` and `hostname`) and until when
//! (`lease_expires_at`, milliseconds since the Unix epoch on the database server's clock).
//!
//! A pid means nothing on another host, so liveness across hosts is the lease: the task
//! process renews it while it runs ([`Db::renew_lease`]); a task whose lease expired is taken
//! over by whoever recovers it ([`Db::take_over`], one conditional `UPDATE`: exactly one
//! recoverer wins), repaired, and settled by [`crate::lifecycle`]. Expiries are computed and
//! compared on the server's clock ([`super::Dialect::now_ms`]), so the hosts' clocks never
//! meet. How a process renews and fences itself: [`crate::lease`].

use std::time::Duration;

use super::{Db, DbError, args, now_rfc3339};

/// Who holds a running task, as its row says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Holder {
    /// The worker (`hostname:pid:nonce`), or the process recovering the task.
    pub worker_id: Option<String>,
    /// The task process (`None` while a recovery holds the task).
    pub process_id: Option<i64>,
    /// Its host.
    pub hostname: Option<String>,
    /// Its host's identity ([`crate::host::host_id`]; `None` in rows older than schema 7).
    pub host_id: Option<String>,
}

impl Holder {
    /// The holder `row` records.
    pub fn of(row: &super::TaskRow) -> Holder {
        Holder {
            worker_id: row.worker_id.clone(),
            process_id: row.process_id,
            hostname: row.hostname.clone(),
            host_id: row.host_id.clone(),
        }
    }
}

/// A running task, for recovery: who holds it and whether the lease is still good.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningTask {
    /// The task.
    pub uuid: String,
    /// Who holds it.
    pub holder: Holder,
    /// Its lease expired (or it has none).
    pub expired: bool,
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Db {
    /// The database server's clock: milliseconds since the Unix epoch (what lease expiries
    /// are compared with).
    pub fn now_ms(&self) -> Result<i64, DbError> {
        let now = self.dialect().now_ms();
        match self.query_opt(&format!("SELECT {now}"), &[])? {
            Some(r) => r.int(0),
            None => Err(DbError::Decode("SELECT of the clock gave no row".into())),
        }
    }

    /// Renew the lease of running task `uuid` held by `worker_id` and process `pid` until
    /// `ttl` from now (the server's clock). Returns whether the row is still running under
    /// that holder (`false`: the task ended, or someone took it over).
    pub fn renew_lease(
        &self,
        uuid: &str,
        worker_id: &str,
        pid: u32,
        ttl: Duration,
    ) -> Result<bool, DbError> {
        let now = self.dialect().now_ms();
        let n = self.execute(
            &format!(
                "UPDATE tasks SET lease_expires_at = {now} + ?4 \
                 WHERE uuid = ?1 AND status = 'running' AND worker_id = ?2 AND process_id = ?3"
            ),
            args![uuid, worker_id, i64::from(pid), millis(ttl)],
        )?;
        Ok(n == 1)
    }

    /// Running tasks recovery looks at: those recorded under host name `hostname` (their
    /// process can be checked here if the host identity matches too, [`crate::host`]) and
    /// those, anywhere, whose lease expired or that hold none.
    pub fn running_to_check(&self, hostname: &str) -> Result<Vec<RunningTask>, DbError> {
        let now = self.dialect().now_ms();
        let order = self.dialect().insert_order();
        self.query(
            &format!(
                "SELECT uuid, worker_id, process_id, hostname, host_id, \
                 CASE WHEN lease_expires_at IS NULL OR lease_expires_at < {now} THEN 1 ELSE 0 END \
                 FROM tasks WHERE status = 'running' \
                 AND (hostname = ?1 OR lease_expires_at IS NULL OR lease_expires_at < {now}) \
                 ORDER BY started_at, {order}"
            ),
            &args![hostname],
        )?
        .iter()
        .map(|r| {
            Ok(RunningTask {
                uuid: r.text(0)?,
                holder: Holder {
                    worker_id: r.opt_text(1)?,
                    process_id: r.opt_int(2)?,
                    hostname: r.opt_text(3)?,
                    host_id: r.opt_text(4)?,
                },
                expired: r.int(5)? != 0,
            })
        })
        .collect()
    }

    /// Take over running task `uuid` from `seen` (its holder as read before): it becomes
    /// held by `me` on `my_host` (host name and identity) with no process, for `ttl`, while
    /// `me` repairs and settles it. With `only_if_expired`, only when its lease has expired (on the server's clock).
    /// One conditional `UPDATE`: of several recoverers, one wins. Returns whether this one
    /// did.
    pub fn take_over(
        &self,
        uuid: &str,
        seen: &Holder,
        me: &str,
        my_host: &crate::host::ThisHost,
        ttl: Duration,
        only_if_expired: bool,
    ) -> Result<bool, DbError> {
        let now = self.dialect().now_ms();
        let expired = if only_if_expired {
            format!(" AND (lease_expires_at IS NULL OR lease_expires_at < {now})")
        } else {
            String::new()
        };
        let n = self.execute(
            &format!(
                "UPDATE tasks SET worker_id = ?4, process_id = NULL, hostname = ?5, \
                 lease_expires_at = {now} + ?6, updated_at = ?7, host_id = ?8 \
                 WHERE uuid = ?1 AND status = 'running' AND worker_id IS NOT DISTINCT FROM ?2 \
                 AND process_id IS NOT DISTINCT FROM ?3{expired}"
            ),
            args![
                uuid,
                seen.worker_id.as_deref(),
                seen.process_id,
                me,
                my_host.name.as_str(),
                millis(ttl),
                now_rfc3339(),
                my_host.id.as_str()
            ],
        )?;
        Ok(n == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::{new_task, store_tests};
    use crate::lifecycle::{Claim, row};

    store_tests! {
        fn a_lease_is_renewed_by_its_holder_and_taken_over_once_expired(store: &TestStore) {
            let db = store.open();
            db.insert_queued(&new_task("t")).unwrap();
            let mut claim = Claim::test(7);
            claim.lease = Duration::from_millis(300);
            claim.hostname = "host-a".into();
            assert!(row::claim(&db, "t", &claim).unwrap());
            let r = db.get("t").unwrap().unwrap();
            assert_eq!(r.worker_id.as_deref(), Some("h:1:test"));
            assert!(r.lease_expires_at.is_some());
            assert!(db.renew_lease("t", "h:1:test", 7, Duration::from_millis(300)).unwrap());
            assert!(!db.renew_lease("t", "other", 7, Duration::from_millis(300)).unwrap());
            assert!(!db.renew_lease("t", "h:1:test", 8, Duration::from_millis(300)).unwrap());

            let seen = Holder {
                worker_id: Some("h:1:test".into()),
                process_id: Some(7),
                hostname: Some("host-a".into()),
                host_id: Some("h-id".into()),
            };
            let host = |name: &str| crate::host::ThisHost { name: name.into(), id: format!("{name}-id") };
            // From another host: nothing to check until the lease expires.
            assert!(db.running_to_check("host-b").unwrap().is_empty());
            assert!(!db.take_over("t", &seen, "b:2:x", &host("host-b"), Duration::from_secs(5), true).unwrap());
            std::thread::sleep(Duration::from_millis(400));
            let found = db.running_to_check("host-b").unwrap();
            assert_eq!(found.len(), 1);
            assert!(found[0].expired);
            assert_eq!(found[0].holder, seen);
            // Two recoverers: one wins.
            assert!(db.take_over("t", &seen, "b:2:x", &host("host-b"), Duration::from_secs(5), true).unwrap());
            assert!(!db.take_over("t", &seen, "c:3:y", &host("host-c"), Duration::from_secs(5), true).unwrap());
            let r = db.get("t").unwrap().unwrap();
            assert_eq!((r.worker_id.as_deref(), r.process_id), (Some("b:2:x"), None));
            // The old holder cannot renew any more.
            assert!(!db.renew_lease("t", "h:1:test", 7, Duration::from_secs(5)).unwrap());
            // The new holder's lease is good: from host-a nothing is expired, and the task
            // is no longer recorded there.
            assert!(db.running_to_check("host-a").unwrap().is_empty());
        }
    }
}
