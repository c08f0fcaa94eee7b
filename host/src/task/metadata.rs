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

/// The task a task inherited its starting context from (metadata.json `inherited_from`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InheritedFrom {
    /// The earlier task's UUID.
    pub uuid: String,
    /// When it completed (RFC 3339 UTC).
    pub completed_at: String,
    /// Its place in the chain of tasks on this key: 1 when the earlier task inherited nothing,
    /// else one more than its own.
    pub generation: u32,
    /// Estimated tokens of the inherited context (at most the budget,
    /// `context_inheritance.max_inherited_tokens` and a quarter of the window).
    pub tokens: u64,
    /// What was inherited, in order: `answer`, `plan`, `summary`.
    pub parts: Vec<String>,
}

/// An earlier task of the same key that could not be inherited from (metadata.json
/// `inheritance_skipped`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedPredecessor {
    /// Its UUID.
    pub uuid: String,
    /// Why (its directory was cleaned up, a file is damaged, ...).
    pub reason: String,
}

/// `metadata.json` of a task directory:
/// `{uuid, task_key{task_source, owner, repo, task_type, task_id}, created_at, process_id,
///   hostname, config{llm_provider, model, context_length, compression_threshold}, user,
///   inherited_from?, inheritance_skipped?}`.
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
    /// The earlier task of the same key whose final state this task started from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inherited_from: Option<InheritedFrom>,
    /// Earlier tasks of the same key that were skipped, with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inheritance_skipped: Vec<SkippedPredecessor>,
    /// The directory the built-in tools work on (absolute), when the task has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
}

/// Read `metadata.json` of the task directory `dir` (through the handle: a link of that name
/// or a file over [`crate::task_dir::MAX_RECORD_BYTES`] is refused): `None` when it does not
/// exist. Errors name the file.
pub fn read_metadata(dir: &TaskDir) -> anyhow::Result<Option<Metadata>> {
    match dir
        .read_if_exists(METADATA_FILE)
        .with_context(|| format!("cannot read {}", dir.show(METADATA_FILE)))?
    {
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .with_context(|| format!("{}: does not parse", dir.show(METADATA_FILE))),
        None => Ok(None),
    }
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
            inherited_from: None,
            inheritance_skipped: Vec::new(),
            workspace: None,
        };
        assert!(write_metadata_once(&dir, &meta).unwrap());
        let text = String::from_utf8(dir.read(METADATA_FILE).unwrap()).unwrap();
        assert!(
            !text.contains("inherited_from"),
            "omitted when absent: {text}"
        );
        meta.process_id = 2;
        assert!(!write_metadata_once(&dir, &meta).unwrap());
        let back: Metadata = serde_json::from_slice(&dir.read(METADATA_FILE).unwrap()).unwrap();
        assert_eq!(back.process_id, 1);
        assert_eq!(read_metadata(&dir).unwrap(), Some(back));
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(
            read_metadata(&TaskDir::open(empty.path()).unwrap()).unwrap(),
            None
        );
    }
}
