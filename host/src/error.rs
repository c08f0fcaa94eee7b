//! Errors every layer may raise and the exit-code mapping of the `ctxhost` binary.
//!
//! Exit codes (stable): 0 success; [`EXIT_FAILED`] (1) a task or check failed, or an operation
//! failed at run time; [`EXIT_USAGE`] (2) usage or configuration error (bad flag, bad config
//! value, unknown or invalid UUID). Operations raise a [`UsageError`] for the latter; the CLI
//! maps any error to a code with [`exit_code_of`]. Living here (not in the CLI) lets the task
//! process and the operations raise it without depending on the CLI.

use crate::config::ConfigError;

/// Exit code: a task or check failed, or an operation failed.
pub const EXIT_FAILED: u8 = 1;
/// Exit code: usage or configuration error.
pub const EXIT_USAGE: u8 = 2;
/// Exit code: the command was interrupted (Ctrl-C or SIGTERM) and ended what it ran as asked
/// (`ask`: the task paused or stopped; `plugin try`: the call was interrupted), 128 + SIGINT
/// as shells do.
pub const EXIT_INTERRUPTED: u8 = 130;

/// An error caused by how ctxhost was called (exit code 2): a bad argument, an unknown or
/// invalid UUID, a missing contexts tree. The text is shown to the user as is.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Shorthand for a [`UsageError`] as `anyhow::Error`.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

/// The exit code for `e`: [`EXIT_USAGE`] for a [`UsageError`] or a [`ConfigError`] anywhere in
/// its chain of causes, else [`EXIT_FAILED`].
pub fn exit_code_of(e: &anyhow::Error) -> u8 {
    if e.downcast_ref::<UsageError>().is_some() || e.downcast_ref::<ConfigError>().is_some() {
        EXIT_USAGE
    } else {
        EXIT_FAILED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_and_config_errors_are_exit_2_everything_else_1() {
        assert_eq!(exit_code_of(&usage("bad uuid")), EXIT_USAGE);
        let config: anyhow::Error = ConfigError::Missing { file: "x".into() }.into();
        assert_eq!(exit_code_of(&config), EXIT_USAGE);
        assert_eq!(exit_code_of(&anyhow::anyhow!("disk full")), EXIT_FAILED);
    }
}
