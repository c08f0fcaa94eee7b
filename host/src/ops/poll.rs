//! `poll`: the task sources once (publish what is pending, then queue labelled items), or
//! continuously.

use std::sync::atomic::AtomicBool;

use crate::config::Config;
use crate::error::usage;
use crate::layout::Layout;
use crate::sources::Sources;
use crate::sources::schedule::{self, PassReport};

/// The configured sources, tokens read from the environment. A config without `sources`, or
/// a missing token, is a usage error (exit 2).
pub fn connect(config: &Config) -> anyhow::Result<Sources> {
    if !config.sources.any() {
        return Err(usage(
            "no task sources configured: add sources.github or sources.gitlab to the config \
             (see docs/forge-bot.md)",
        ));
    }
    Sources::connect(&config.sources)
}

/// One pass over every configured source ([`schedule::poll_once`]).
pub fn poll_once(config: &Config, layout: &Layout) -> anyhow::Result<PassReport> {
    let sources = connect(config)?;
    schedule::poll_once(config, layout, &sources)
}

/// Poll and publish until the process is ended ([`schedule::run_loop`]).
pub fn poll_forever(config: &Config, layout: &Layout) -> anyhow::Result<()> {
    let sources = connect(config)?;
    layout.ensure()?;
    let never = AtomicBool::new(false);
    schedule::run_loop(config, layout, &sources, true, &never).map(|_| ())
}
