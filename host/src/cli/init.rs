//! `ctxhost init`: create the contexts/ tree and tasks.db; write a commented config.yaml if absent.

use super::out::outln;
use std::process::ExitCode;

use super::GlobalArgs;

/// Parse → [`crate::ops::init::init`] → print. `--config PATH` names the file to write when
/// absent (a missing path is not an error here).
pub(super) fn run(global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let done = crate::ops::init::init(&global.config_path(), global.contexts.as_deref())?;
    let how = if done.config_written {
        "written"
    } else {
        "kept"
    };
    outln!("config:   {} ({how})", done.config_path.display());
    outln!("contexts: {}", done.contexts.display());
    outln!("database: {}", done.database.display());
    Ok(ExitCode::SUCCESS)
}
