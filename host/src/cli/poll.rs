//! `ctxhost poll`: parse, call [`crate::ops::poll`], print.
//!
//! Exit codes: 0 every repository polled and every result that was due published (a result
//! whose wait after a failed attempt is not over is listed with its next attempt; a comment
//! whose answer was lost is a warning: the next pass confirms it); 1 a repository or a
//! publication failed (the message names it; the rest was done); 2 no `sources` in the
//! config, or a token variable is not set.

use std::process::ExitCode;

use clap::Args;

use super::out::outln;
use super::{EXIT_FAILED, Env};
use crate::sources::publish::Synced;

/// `ctxhost poll` arguments.
#[derive(Debug, Clone, Args)]
pub struct PollArgs {
    /// Poll every source once and exit (without it: poll every poll_interval_secs until
    /// stopped, and publish results as tasks end).
    #[arg(long)]
    pub once: bool,
    /// With --once: print the report as JSON ({published: {done, errors, unconfirmed, waiting,
    /// given_up}, polls: [[source, {queued, already_held, errors}]]}).
    #[arg(long, requires = "once")]
    pub json: bool,
}

/// `ITEM  task UUID: result not published yet: next attempt after TIME (in N s); last error:
/// E` for a publication that waits after a failed attempt.
pub(super) fn waiting_line(w: &crate::sources::publish::Waiting) -> String {
    let why = w
        .last_error
        .as_deref()
        .map(|e| format!("; last error: {e}"))
        .unwrap_or_default();
    let what = if w.comment_may_exist {
        "result comment not confirmed yet (its answer was lost)"
    } else {
        "result not published yet"
    };
    format!(
        "{}  task {}: {what}: next attempt after {} (in {} s){why}",
        w.item, w.uuid, w.next_attempt, w.wait_secs
    )
}

/// The warning for an attempt after which the result comment of task `uuid` may exist.
pub(super) fn unconfirmed_line(uuid: &str, e: &str) -> String {
    format!(
        "task {uuid}: the result comment may have been posted, but the forge's answer was lost \
         ({e}); the next `ctxhost poll` or `ctxhost run` looks for the comment and records it, or \
         posts it if it is not there"
    )
}

pub(super) fn poll(env: &Env, args: &PollArgs) -> anyhow::Result<ExitCode> {
    if !args.once {
        crate::ops::poll::poll_forever(&env.config, &env.layout)?;
        return Ok(ExitCode::SUCCESS);
    }
    let report = crate::ops::poll::poll_once(&env.config, &env.layout)?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for (uuid, item, what) in &report.published.done {
            let text = match what {
                Synced::Published(at) => format!("result posted: {at}"),
                Synced::Recovered(at) => format!("result found already posted: {at}"),
                Synced::Labels(state) => format!("labels moved to {state}"),
                Synced::Skipped(why) => format!("skipped: {why}"),
                Synced::UpToDate => continue,
            };
            outln!("{item}  task {uuid}: {text}");
        }
        for (source, r) in &report.polls {
            for q in &r.queued {
                outln!("{}  queued task {}", q.item, q.uuid);
            }
            let counts = format!(
                "{} task(s) queued, {} labelled item(s) already have one",
                r.queued.len(),
                r.already_held
            );
            if r.errors.is_empty() {
                outln!("{source}: {counts}");
            } else {
                // Not a success line: the poll of this source did not finish.
                outln!(
                    "{source}: FAILED with {} error(s) (on stderr); before that: {counts}",
                    r.errors.len()
                );
            }
        }
    }
    for (uuid, e) in report
        .published
        .errors
        .iter()
        .chain(&report.published.given_up)
    {
        eprintln!("error: publishing task {uuid}: {e}");
    }
    if !args.json {
        for w in &report.published.waiting {
            outln!("{}", waiting_line(w));
        }
    }
    for (uuid, e) in &report.published.unconfirmed {
        eprintln!("warning: {}", unconfirmed_line(uuid, e));
    }
    for (_, r) in &report.polls {
        for e in &r.errors {
            eprintln!("error: {e}");
        }
    }
    Ok(if report.error_count() > 0 {
        ExitCode::from(EXIT_FAILED)
    } else {
        ExitCode::SUCCESS
    })
}
