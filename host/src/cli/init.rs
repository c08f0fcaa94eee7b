//! `ctxhost init`: create the contexts/ tree and tasks.db; write a commented config.yaml if absent.

use super::out::outln;
use std::process::ExitCode;

use clap::Args;

use super::GlobalArgs;
use super::llm_flags::LlmFlags;

/// `ctxhost init` arguments.
#[derive(Debug, Clone, Args)]
pub struct InitArgs {
    /// The `llm` settings written into the new config.yaml.
    #[command(flatten)]
    pub llm: LlmFlags,
}

/// Parse → [`crate::ops::init::init`] → print. `--config PATH` names the file to write when
/// absent (a missing path is not an error here).
pub(super) fn run(global: &GlobalArgs, args: &InitArgs) -> anyhow::Result<ExitCode> {
    let done =
        crate::ops::init::init(&global.config_path(), global.contexts.as_deref(), &args.llm)?;
    let how = if done.config_written {
        "written"
    } else {
        "kept"
    };
    outln!("config:   {} ({how})", done.config_path.display());
    outln!("contexts: {}", done.contexts.display());
    outln!("database: {}", done.database);
    Ok(ExitCode::SUCCESS)
}
