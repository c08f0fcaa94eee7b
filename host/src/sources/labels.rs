//! Which label an item shows for its task's status: one table ([`state_for`]), and the label
//! moves that get an item there ([`moves`]).
//!
//! ```text
//! task status            label state   on the item (the others of ctxhost's five removed)
//! queued, running        processing    processing_label
//! paused                 paused        paused_label
//! completed              done          done_label
//! failed, stopped        failed        failed_label
//! ```
//! The trigger `label` is removed by every move, so an item carrying it again was labelled by
//! a person (and queues a new task once the earlier one is published).

use crate::config::SourceConfig;
use crate::db::Status;

/// The label state of an item (`publications.labels_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelState {
    /// The task is queued or running.
    Processing,
    /// The task is paused.
    Paused,
    /// The task completed.
    Done,
    /// The task failed or was stopped.
    Failed,
}

impl LabelState {
    /// `processing`, `paused`, `done`, `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            LabelState::Processing => "processing",
            LabelState::Paused => "paused",
            LabelState::Done => "done",
            LabelState::Failed => "failed",
        }
    }

    /// Its label in `cfg`.
    pub fn label(self, cfg: &SourceConfig) -> &str {
        match self {
            LabelState::Processing => &cfg.processing_label,
            LabelState::Paused => &cfg.paused_label,
            LabelState::Done => &cfg.done_label,
            LabelState::Failed => &cfg.failed_label,
        }
    }
}

/// The label state for a task in `status` (the table in the module docs).
pub const fn state_for(status: Status) -> LabelState {
    match status {
        Status::Queued | Status::Running => LabelState::Processing,
        Status::Paused => LabelState::Paused,
        Status::Completed => LabelState::Done,
        Status::Failed | Status::Stopped => LabelState::Failed,
    }
}

/// The label to add for `state` and the labels to remove: the trigger label and the other
/// state labels of `cfg`.
pub fn moves(cfg: &SourceConfig, state: LabelState) -> (&str, Vec<&str>) {
    let add = state.label(cfg);
    let remove = [
        cfg.label.as_str(),
        cfg.processing_label.as_str(),
        cfg.paused_label.as_str(),
        cfg.done_label.as_str(),
        cfg.failed_label.as_str(),
    ]
    .into_iter()
    .filter(|l| *l != add)
    .collect();
    (add, remove)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_one_label_and_moves_remove_the_rest() {
        let cfg = SourceConfig::default();
        for s in Status::ALL {
            let (add, remove) = moves(&cfg, state_for(s));
            assert_eq!(remove.len(), 4, "{s}");
            assert!(!remove.contains(&add));
            assert!(remove.contains(&"coding agent"));
        }
        assert_eq!(
            moves(&cfg, state_for(Status::Completed)).0,
            "coding agent done"
        );
        assert_eq!(
            moves(&cfg, state_for(Status::Stopped)).0,
            "coding agent failed"
        );
        assert_eq!(
            moves(&cfg, state_for(Status::Queued)).0,
            "coding agent processing"
        );
    }
}
