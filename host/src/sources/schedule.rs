//! When the sources run: [`poll_once`] (`ctxhost poll --once`: publish what is pending, then
//! poll every source once) and [`run_loop`] (`ctxhost poll`, and the background thread of
//! `ctxhost run`, [`Background`]: publish every [`PUBLISH_INTERVAL`], poll each source every
//! `poll_interval_secs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use super::Sources;
use super::poll::{PollReport, poll_source};
use super::publish::{Publisher, SweepReport};
use crate::config::Config;
use crate::layout::Layout;

/// How often the loop publishes (a status change shows on the item within about this long;
/// a pass with nothing to do is one query of the task store).
pub const PUBLISH_INTERVAL: Duration = Duration::from_secs(1);

/// What one pass did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PassReport {
    /// Publishing of results and labels.
    pub published: SweepReport,
    /// One poll per source (`github`, `gitlab`).
    pub polls: Vec<(String, PollReport)>,
}

impl PassReport {
    /// Errors of the pass (publishing and polling).
    pub fn error_count(&self) -> usize {
        self.published.errors.len()
            + self.published.given_up.len()
            + self
                .polls
                .iter()
                .map(|(_, p)| p.errors.len())
                .sum::<usize>()
    }
}

/// Publish what is due (a failed attempt's wait is obeyed, and reported in
/// [`SweepReport::waiting`]), then poll every source once.
pub fn poll_once(
    config: &Config,
    layout: &Layout,
    sources: &Sources,
) -> anyhow::Result<PassReport> {
    layout.ensure()?;
    let db = crate::ops::open_store(config, layout)?;
    let publisher = Publisher::new(sources, &db, layout)
        .with_remote(crate::remote::open(config.context_storage.remote.as_ref())?);
    let mut report = PassReport {
        published: publisher.sweep(true)?,
        polls: Vec::new(),
    };
    for source in sources.iter() {
        let r = poll_source(source, &db, config, &publisher);
        report.polls.push((source.kind.as_str().to_string(), r));
    }
    Ok(report)
}

/// Publish every [`PUBLISH_INTERVAL`] and (with `poll`) poll each source every
/// `poll_interval_secs`, until `stop` is set; then publish once more what is due and return
/// that last pass, with what still waits after a failed attempt and every publication given
/// up during the loop. Errors are logged and retried, never fatal, except
/// an unusable task store.
pub fn run_loop(
    config: &Config,
    layout: &Layout,
    sources: &Sources,
    poll: bool,
    stop: &AtomicBool,
) -> anyhow::Result<SweepReport> {
    let db = crate::ops::open_store(config, layout)?;
    let publisher = Publisher::new(sources, &db, layout)
        .with_remote(crate::remote::open(config.context_storage.remote.as_ref())?);
    let mut next_poll: Vec<Instant> = sources.iter().map(|_| Instant::now()).collect();
    // Given up during the loop: reported with the last pass (no later pass lists them).
    let mut given_up = Vec::new();
    loop {
        if stop.load(Ordering::SeqCst) {
            let mut last = publisher.sweep(true)?;
            given_up.append(&mut last.given_up);
            last.given_up = given_up;
            return Ok(last);
        }
        match publisher.sweep(false) {
            Ok(mut r) => {
                for (uuid, item, what) in &r.done {
                    tracing::debug!(%uuid, %item, ?what, "published");
                }
                given_up.append(&mut r.given_up);
            }
            Err(e) => tracing::error!("publishing pass failed: {e:#}"),
        }
        if poll {
            for (i, source) in sources.iter().enumerate() {
                if Instant::now() < next_poll[i] || stop.load(Ordering::SeqCst) {
                    continue;
                }
                let r = poll_source(source, &db, config, &publisher);
                if !r.queued.is_empty() {
                    tracing::info!(forge = %source.kind, queued = r.queued.len(), "poll queued tasks");
                }
                next_poll[i] = Instant::now() + source.config.poll_interval();
            }
        }
        let until = Instant::now() + PUBLISH_INTERVAL;
        while Instant::now() < until && !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The sources' loop on its own thread (`ctxhost run`), so that rate-limit waits never hold
/// up the worker.
pub struct Background {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<anyhow::Result<SweepReport>>,
}

impl Background {
    /// Start [`run_loop`] on a thread.
    pub fn spawn(
        config: Config,
        layout: Layout,
        sources: Sources,
        poll: bool,
    ) -> anyhow::Result<Background> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("sources".into())
            .spawn(move || {
                let r = run_loop(&config, &layout, &sources, poll, &flag);
                if let Err(e) = &r {
                    tracing::error!("the task sources stopped: {e:#}");
                }
                r
            })
            .context("cannot start the task sources' thread")?;
        Ok(Background { stop, handle })
    }

    /// Stop the loop after its current step, wait for it, and return its last publishing pass.
    pub fn finish(self) -> anyhow::Result<SweepReport> {
        self.stop.store(true, Ordering::SeqCst);
        match self.handle.join() {
            Ok(r) => r,
            Err(_) => anyhow::bail!("the task sources' thread panicked"),
        }
    }
}
