//! Readers of a task directory's files that repair and `ctxhost fsck` share: which JSONL files
//! it has, and the seq its history ends at (its full counts: [`crate::history_stats`]).

use anyhow::Context;
use ctxhost_format::HistoryLine;
use ctxhost_format::files::{MESSAGES, PLANNING_DIR, is_temporary};

use crate::task_dir::TaskDir;

/// The JSONL files of a task directory that are not temporaries: `*.jsonl` at its top level
/// and in `planning/` (regular files only, never links; a `planning` that is not a folder, a
/// link for one, holds none), as names relative to the directory, sorted.
pub fn jsonl_files(dir: &TaskDir) -> anyhow::Result<Vec<String>> {
    let mut files = Vec::new();
    for sub in [None, Some(PLANNING_DIR)] {
        if sub.is_some_and(|s| !dir.is_dir(s)) {
            continue;
        }
        let entries = dir
            .entries(sub)
            .with_context(|| format!("cannot list {}", dir.show(sub.unwrap_or_default())))?;
        for (name, meta) in entries {
            if name.ends_with(".jsonl") && !is_temporary(&name) && meta.is_file() {
                files.push(match sub {
                    Some(s) => format!("{s}/{name}"),
                    None => name,
                });
            }
        }
    }
    files.sort();
    Ok(files)
}

/// The seq of the last line of the history file messages.jsonl of `dir` (0 when empty or
/// missing), read from its end: only the last line is read. Errors name the file and the byte
/// offset of a last line that is not a history line.
pub fn last_seq_in(dir: &TaskDir) -> anyhow::Result<u64> {
    let Some(mut lines) = crate::invariants::queries::open_backwards(dir, MESSAGES)? else {
        return Ok(0);
    };
    Ok(lines
        .prev_value::<HistoryLine>()
        .map_err(crate::invariants::queries::bounded)?
        .map_or(0, |(_, h)| h.seq))
}
