//! `metadata.json` of a task directory (DESIGN.md §2): who the task is and the settings it first
//! ran with. Written once, atomically, when the task first runs; a resumed task keeps it.

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::task_dir::TaskDir;

/// File name of the metadata file in a task directory.
pub const METADATA_FILE: &str = ctxhost_format::files::METADATA;

/// The task key in metadata.json (DESIGN §2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataTaskKey {
    /// `github`, `gitlab` or `local`.
    pub task_source: String,
    /// Repository owner.
    pub owner: Option<String>,
    /// Repository name.
    pub repo: Option<String>,
    /// `issue` or `pull_request`.
    pub task_type: Option<String>,
    /// Issue or pull request id.
    pub task_id: Option<String>,
}

/// The settings in metadata.json (DESIGN §2). Never holds the API key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetadataConfig {
    /// `llm.provider`.
    pub llm_provider: String,
    /// `llm.model`.
    pub model: String,
    /// `llm.context_length`, tokens.
    pub context_length: u64,
    /// `context_storage.compression_threshold`.
    pub compression_threshold: f64,
}

/// `metadata.json` of a task directory:
/// `{uuid, task_key{task_source, owner, repo, task_type, task_id}, created_at, process_id,
///   hostname, config{llm_provider, model, context_length, compression_threshold}, user}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    /// The task's UUID.
    pub uuid: String,
    /// Where the task comes from.
    pub task_key: MetadataTaskKey,
    /// RFC 3339 UTC, the task's submit time.
    pub created_at: String,
    /// The process that first ran the task.
    pub process_id: u32,
    /// The host of that process.
    pub hostname: String,
    /// The settings it first ran with.
    pub config: MetadataConfig,
    /// Who submitted it.
    pub user: Option<String>,
}

/// Write metadata.json of the task directory `dir` atomically unless it exists as a file (it
/// is written once; a resumed task keeps the original; a link of that name is replaced).
/// Returns whether it was written.
pub fn write_metadata_once(dir: &TaskDir, meta: &Metadata) -> anyhow::Result<bool> {
    if dir.is_file(METADATA_FILE) {
        return Ok(false);
    }
    let mut json = serde_json::to_vec_pretty(meta).context("serialize metadata.json")?;
    json.push(b'\n');
    dir.write_atomic(METADATA_FILE, &json)
        .with_context(|| format!("cannot write {}", dir.show(METADATA_FILE)))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_written_once() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        let mut meta = Metadata {
            uuid: "u".into(),
            task_key: MetadataTaskKey {
                task_source: "local".into(),
                owner: None,
                repo: None,
                task_type: None,
                task_id: None,
            },
            created_at: "2025-01-01T00:00:00.000Z".into(),
            process_id: 1,
            hostname: "h".into(),
            config: MetadataConfig {
                llm_provider: "openai".into(),
                model: "m".into(),
                context_length: 4096,
                compression_threshold: 0.7,
            },
            user: None,
        };
        assert!(write_metadata_once(&dir, &meta).unwrap());
        meta.process_id = 2;
        assert!(!write_metadata_once(&dir, &meta).unwrap());
        let back: Metadata = serde_json::from_slice(&dir.read(METADATA_FILE).unwrap()).unwrap();
        assert_eq!(back.process_id, 1);
    }
}
