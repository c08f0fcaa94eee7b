//! One-line wrappers of the host's `log` import: the message goes to the host log, tagged
//! with the component's name (`ctxhost -v` shows `info`, `-vv` `debug`). Never fails.

use crate::log::{Level, log};

/// Logs `message` at `error`.
pub fn error(message: &str) {
    log(Level::Error, message)
}
/// Logs `message` at `warn`.
pub fn warn(message: &str) {
    log(Level::Warn, message)
}
/// Logs `message` at `info`.
pub fn info(message: &str) {
    log(Level::Info, message)
}
/// Logs `message` at `debug`.
pub fn debug(message: &str) {
    log(Level::Debug, message)
}
