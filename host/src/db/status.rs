//! A task's status, as stored in the `status` column.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A task's status. Text in the database: `queued`, `running`, `paused`, `completed`, `failed`,
/// `stopped`. Which directory each keeps and which changes are allowed:
/// [`crate::lifecycle::dir_rule`], [`crate::lifecycle::allowed`].
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    PartialOrd,
    Ord,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Waiting for a task process to claim it.
    Queued,
    /// A task process runs it.
    Running,
    /// Paused at a safe point; `ctxhost resume` queues it again.
    Paused,
    /// Ended with a final answer.
    Completed,
    /// Ended with an error (`error_message`).
    Failed,
    /// Ended by `ctxhost stop`.
    Stopped,
}

impl Status {
    /// All statuses, in lifecycle order.
    pub const ALL: [Status; 6] = [
        Status::Queued,
        Status::Running,
        Status::Paused,
        Status::Completed,
        Status::Failed,
        Status::Stopped,
    ];

    /// The database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Running => "running",
            Status::Paused => "paused",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Stopped => "stopped",
        }
    }

    /// `completed`, `failed` and `stopped`: the task is over and its directory is in `completed/`.
    pub fn is_final(self) -> bool {
        match self {
            Status::Completed | Status::Failed | Status::Stopped => true,
            Status::Queued | Status::Running | Status::Paused => false,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Status {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Status::ALL
            .into_iter()
            .find(|x| x.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown status `{s}` (known: {})",
                    Status::ALL
                        .iter()
                        .map(|x| x.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
    }
}
