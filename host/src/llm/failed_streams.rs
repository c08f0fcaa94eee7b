//! Streamed replies that failed, kept in the task directory's `failed-streams/` for debugging.

use crate::task_dir::TaskDir;

/// Folder of the task directory keeping streamed replies that failed (`{n}.stream`, n from 1).
pub const FAILED_STREAMS_DIR: &str = ctxhost_format::files::FAILED_STREAMS_DIR;

/// Moves the stream file `stream_file` of `dir` to `failed-streams/{n}.stream` (n one more
/// than the highest there), for debugging; returns its new name. Failures are logged, not
/// returned: the call's own error matters more.
pub fn keep_failed_stream(dir: &TaskDir, stream_file: &str) -> Option<String> {
    let moved = dir.create_dir(FAILED_STREAMS_DIR).and_then(|()| {
        let n = dir
            .entries(Some(FAILED_STREAMS_DIR))?
            .iter()
            .filter_map(|(name, _)| {
                name.rsplit('/')
                    .next()?
                    .strip_suffix(".stream")?
                    .parse::<u64>()
                    .ok()
            })
            .max()
            .unwrap_or(0)
            + 1;
        let to = format!("{FAILED_STREAMS_DIR}/{n}.stream");
        dir.rename(stream_file, &to)?;
        Ok(to)
    });
    match moved {
        Ok(to) => {
            tracing::warn!(
                "the streamed reply failed; what arrived is kept in {}",
                dir.show(&to)
            );
            Some(to)
        }
        Err(e) => {
            tracing::warn!(
                "cannot keep the failed stream {}: {e}",
                dir.show(stream_file)
            );
            None
        }
    }
}
