//! What a binary that links only the task process's code path costs in memory (issue 14, P1).
//!
//! `ctxhost task-exec UUID` runs inside the one `ctxhost` binary, which also holds the CLI,
//! the dashboard, the forges' clients and the plugin checker. Most of a task process's peak
//! RSS is that binary's code pages (file-backed; `scripts/rss-breakdown.py` shows the split),
//! so this example measures the alternative: the same task process (`task_process::run`, the
//! same config and contexts tree), linked on its own, where the linker drops everything the
//! task path does not reach.
//!
//! ```text
//! cargo build --profile bench -p ctxhost --example task_exec_only
//! scripts/rss-breakdown.py -- target/release/examples/task_exec_only CONFIG CONTEXTS UUID
//! ```
//!
//! Arguments: the config file (it must exist), the contexts directory, the task's UUID. Prints
//! the task's final status; exits 1 with the error on failure. A measuring tool, not a way to
//! run tasks: it sets no logging and takes no worker id.

use std::path::PathBuf;
use std::process::ExitCode;

use ctxhost::task_process::Target;

fn main() -> ExitCode {
    ctxhost::layout::use_owner_only_umask();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [config, contexts, uuid] = args.as_slice() else {
        eprintln!("usage: task_exec_only CONFIG CONTEXTS UUID");
        return ExitCode::from(2);
    };
    let run = || -> anyhow::Result<String> {
        let config = ctxhost::config::Config::load_existing(std::path::Path::new(config))?;
        let layout = ctxhost::layout::Layout::new(PathBuf::from(contexts));
        let uuid = ctxhost::layout::parse_uuid(uuid)?;
        let ran = ctxhost::task_process::run(&config, &layout, &Target::Task(uuid), None)?;
        Ok(match ran {
            Some((_, status)) => format!("{status:?}"),
            None => "not claimed".to_string(),
        })
    };
    match run() {
        Ok(status) => {
            println!("{status}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
