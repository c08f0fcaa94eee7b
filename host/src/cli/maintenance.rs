//! `ctxhost cleanup`, `ctxhost fsck` and `ctxhost migrate`: keeping the contexts/ tree small
//! and sound, and moving its tasks between task stores.

use super::out::outln;
use std::process::ExitCode;

use clap::Args;

use super::{EXIT_FAILED, Env};

/// `ctxhost cleanup` arguments.
#[derive(Debug, Clone, Args)]
pub struct CleanupArgs {
    /// Delete directories of tasks finished more than this many days ago (at least 1;
    /// default: context_storage.cleanup_days).
    #[arg(long, value_name = "N", value_parser = parse_days, conflicts_with = "all")]
    pub days: Option<u32>,
    /// Delete the directories of every finished task, however recent.
    #[arg(long)]
    pub all: bool,
    /// Only list what would be deleted; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON: {days, cutoff, dry_run, deleted: [{uuid, status, completed_at, dir, bytes}],
    /// bytes, leftovers}.
    #[arg(long)]
    pub json: bool,
}

/// The task store `ctxhost migrate` moves the tasks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreKind {
    /// The PostgreSQL database whose URL the environment holds.
    Postgres,
    /// The tree's own SQLite `tasks.db`.
    Sqlite,
}

/// `ctxhost migrate` arguments.
#[derive(Debug, Clone, Args)]
pub struct MigrateArgs {
    /// Where the tasks go.
    #[arg(long, value_enum)]
    pub to: StoreKind,
    /// The environment variable holding the PostgreSQL URL (default: task_store.url_env of the
    /// config, else CTXHOST_DATABASE_URL).
    #[arg(long, value_name = "VAR")]
    pub url_env: Option<String>,
    /// Print JSON: {from, to, copied, tally: {tasks, by_status, items_held, no_inherit,
    /// publications}, source_kept}.
    #[arg(long)]
    pub json: bool,
}

/// `ctxhost fsck` arguments.
#[derive(Debug, Clone, Args)]
pub struct FsckArgs {
    /// Fix what can be fixed without losing data, then check again.
    #[arg(long)]
    pub repair: bool,
    /// With context_storage.remote: download every object of the bucket and compare its
    /// SHA-256 with the manifest's (without it, only presence and sizes are compared).
    #[arg(long)]
    pub deep: bool,
    /// Print JSON: {tasks, dirs, problems: [{kind, uuid, path, line, message, fixable,
    /// repaired}], remaining: [...]}.
    #[arg(long)]
    pub json: bool,
}

/// `--days N`: a whole number ≥ 1, as `context_storage.cleanup_days` (0 would delete tasks that
/// finished seconds ago: that is `--all`, said explicitly).
fn parse_days(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) => Err(
            "must be at least 1 (to delete the directory of every finished task, use --all)".into(),
        ),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("must be a whole number ≥ 1: {e}")),
    }
}

pub(super) fn cleanup(env: &Env, args: &CleanupArgs) -> anyhow::Result<ExitCode> {
    env.require_tree()?;
    let db = env.open_db()?;
    let days = if args.all {
        0
    } else {
        args.days.unwrap_or(env.config.context_storage.cleanup_days)
    };
    let remote = crate::remote::open(env.config.context_storage.remote.as_ref())?;
    let report =
        crate::cleanup::cleanup_with(&db, &env.layout, days, args.dry_run, remote.as_deref())?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if args.dry_run {
        "would delete"
    } else {
        "deleted"
    };
    for l in &report.leftovers {
        outln!("{verb} {l} (left by an interrupted cleanup)");
    }
    for item in &report.deleted {
        outln!(
            "{verb} {} ({}, completed {}, {})",
            item.dir,
            item.status,
            item.completed_at.as_deref().unwrap_or("?"),
            human_bytes(item.bytes)
        );
    }
    outln!(
        "{} task director{} {}, {} (tasks finished before {}; rows kept in tasks.db)",
        report.deleted.len(),
        if report.deleted.len() == 1 {
            "y"
        } else {
            "ies"
        },
        if args.dry_run {
            "would be deleted"
        } else {
            "deleted"
        },
        human_bytes(report.bytes),
        report.cutoff
    );
    Ok(ExitCode::SUCCESS)
}

pub(super) fn migrate(env: &Env, args: &MigrateArgs) -> anyhow::Result<ExitCode> {
    use crate::config::TaskStoreConfig;
    use crate::ops::migrate::Direction;
    let var = args
        .url_env
        .clone()
        .unwrap_or_else(|| match &env.config.task_store {
            TaskStoreConfig::Postgres { url_env } => url_env.clone(),
            TaskStoreConfig::Sqlite => crate::db::DEFAULT_URL_ENV.to_string(),
        });
    let url = crate::db::PgUrl::from_env(&var).map_err(|e| super::usage(e.to_string()))?;
    let direction = match args.to {
        StoreKind::Postgres => Direction::ToPostgres(url),
        StoreKind::Sqlite => Direction::ToSqlite(url),
    };
    let done = crate::ops::migrate::migrate(&env.layout, &direction)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&done)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "migrated {} task(s) from {} to {}",
        done.copied, done.from, done.to
    );
    for (status, v) in &done.tally.by_status {
        println!(
            "  {status:<9} {:>7} tasks  {:>9} LLM calls  {:>9} tool calls  {:>12} tokens",
            v[0], v[1], v[2], v[3]
        );
    }
    let publications: i64 = done.tally.publications.iter().map(|(_, v)| v[0]).sum();
    println!(
        "  {} task(s) holding a GitHub/GitLab item, {publications} publication record(s), {} --no-inherit task(s)",
        done.tally.items_held, done.tally.no_inherit
    );
    println!("both stores agree on these counts; {}", done.source_kept);
    match args.to {
        StoreKind::Postgres => println!(
            "now set `task_store: {{url_env: {var}}}` in the config of every worker (they must share {})",
            env.layout.root().display()
        ),
        StoreKind::Sqlite => println!("now set `task_store: sqlite` in the config"),
    }
    Ok(ExitCode::SUCCESS)
}

/// `1234567` → `1.2 MiB`.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

pub(super) fn fsck(env: &Env, args: &FsckArgs) -> anyhow::Result<ExitCode> {
    env.require_tree()?;
    let db = env.open_db()?;
    let mut report = crate::fsck::fsck(
        &db,
        &env.layout,
        args.repair,
        env.config.worker.max_crashes,
        env.config.worker.lease(),
    )?;
    if let Some(store) = crate::remote::open(env.config.context_storage.remote.as_ref())? {
        crate::fsck::remote::check(
            &mut report,
            &db,
            &env.layout,
            &store,
            args.repair,
            args.deep,
        )?;
    }
    let code = if report.remaining.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FAILED)
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(code);
    }
    // One task's problems are repaired together: what was done is shown once, after the last
    // of them, not under each.
    for (i, p) in report.problems.iter().enumerate() {
        let tag = match (&p.repaired, p.fixable) {
            (Some(_), _) => "repaired",
            (None, true) => "fixable",
            (None, false) => "problem",
        };
        outln!("{tag:9} {:<20} {p}", format!("{:?}", p.kind));
        let next_same = report
            .problems
            .get(i + 1)
            .is_some_and(|n| n.uuid == p.uuid && n.repaired == p.repaired);
        if let Some(what) = &p.repaired
            && !next_same
        {
            outln!("          → {what}");
        }
    }
    let fixable = report.remaining.iter().filter(|p| p.fixable).count();
    outln!(
        "{} task(s), {} director{} checked: {} problem(s) found, {} repaired, {} remaining{}",
        report.tasks,
        report.dirs,
        if report.dirs == 1 { "y" } else { "ies" },
        report.problems.len(),
        report
            .problems
            .iter()
            .filter(|p| p.repaired.is_some())
            .count(),
        report.remaining.len(),
        if fixable > 0 && !args.repair {
            format!(" ({fixable} fixable with --repair)")
        } else {
            String::new()
        }
    );
    if args.repair {
        for p in &report.remaining {
            outln!("remaining {p}");
        }
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::human_bytes;

    #[test]
    fn sizes_are_readable() {
        assert_eq!(human_bytes(5), "5 B");
        assert_eq!(human_bytes(2048), "2.0 KiB");
        assert_eq!(human_bytes(3 * 1024 * 1024 + 1), "3.0 MiB");
    }
}
