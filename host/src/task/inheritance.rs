//! Context inheritance: a task submitted with the same task key (source, owner, repo, type, id)
//! as an earlier completed task starts from that task's final state — its final answer, its
//! latest plan and its last summary — as a block after the system prompt
//! ([`Inheritance::text`]), so no compression can drop it.
//!
//! Rules:
//! - only when `context_inheritance.enabled`, the task was not submitted with `--no-inherit`,
//!   and its key names an item (`task_id` set: a key without an id names nothing in
//!   particular);
//! - the predecessor is the most recently completed task with the same key, completed within
//!   `context_expiry_days`; one whose directory was cleaned up, is damaged or holds nothing to
//!   inherit is skipped with a warning (and recorded in metadata.json `inheritance_skipped`),
//!   and the next older one is tried, up to [`MAX_CANDIDATES`]; none usable is never a failure;
//! - the block is at most [`crate::config::Config::inherited_token_budget`] tokens (estimate):
//!   the answer gets up to half of it, the plan up to a quarter, the summary the rest;
//! - only the predecessor's own final state is taken, never its system prompt (where its own
//!   inheritance is), so a chain of tasks on one key never grows: each link is bounded by the
//!   budget, and `generation` counts the links.

use anyhow::Context;
use ctxhost_format::files::MESSAGES;
use ctxhost_format::planning::Plan;
use ctxhost_format::{HistoryLine, estimate_tokens};

use super::metadata::{InheritedFrom, SkippedPredecessor, read_metadata};
use super::{PlanningStore, SummaryStore};
use crate::config::Config;
use crate::db::{Db, TaskKey, TaskRow};
use crate::invariants::queries::open_lines;
use crate::layout::Layout;
use crate::task_dir::TaskDir;

/// Earlier tasks of one key looked at, newest first.
pub const MAX_CANDIDATES: u32 = 5;

/// What a task inherits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inheritance {
    /// The block added after the system prompt, when something is inherited.
    pub text: Option<String>,
    /// metadata.json `inherited_from`.
    pub from: Option<InheritedFrom>,
    /// metadata.json `inheritance_skipped`.
    pub skipped: Vec<SkippedPredecessor>,
}

/// The final state of a completed task, read from its directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct FinalState {
    answer: Option<String>,
    plan: Option<Plan>,
    summary: Option<String>,
    generation: u32,
}

/// What task `row` inherits under `config` (module doc). Database errors are errors; a bad
/// predecessor is only skipped.
pub fn find(
    config: &Config,
    layout: &Layout,
    db: &Db,
    row: &TaskRow,
) -> anyhow::Result<Inheritance> {
    let ci = &config.context_inheritance;
    if !ci.enabled || row.no_inherit || row.task_id.is_none() {
        return Ok(Inheritance::default());
    }
    let key = TaskKey {
        task_source: row.task_source.clone(),
        owner: row.owner.clone(),
        repo: row.repo.clone(),
        task_type: row.task_type.clone(),
        task_id: row.task_id.clone(),
    };
    let since = chrono::Utc::now() - chrono::Duration::days(i64::from(ci.context_expiry_days));
    let since = since.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let candidates = db.completed_with_key(&key, &since, &row.uuid, MAX_CANDIDATES)?;
    let mut out = Inheritance::default();
    if candidates.is_empty() {
        return Ok(out);
    }
    let remote = crate::remote::open(config.context_storage.remote.as_ref())?;
    for c in candidates {
        match from_predecessor(config, layout, remote.as_deref(), &c) {
            Ok((text, from)) => {
                out.text = Some(text);
                out.from = Some(from);
                break;
            }
            Err(reason) => {
                tracing::warn!(uuid = %row.uuid, predecessor = %c.uuid, "context inheritance: skipping an earlier task of the same key: {reason}");
                out.skipped.push(SkippedPredecessor {
                    uuid: c.uuid.clone(),
                    reason,
                });
            }
        }
    }
    Ok(out)
}

/// Rebuild what task `row` inherited from `from` (a task whose context was lost before its
/// system prompt was written, after metadata.json recorded the predecessor). A predecessor
/// no longer usable gives nothing, with a warning.
pub fn rebuild(config: &Config, layout: &Layout, db: &Db, from: &InheritedFrom) -> Inheritance {
    let row = match db.get(&from.uuid) {
        Ok(Some(r)) => r,
        Ok(None) => {
            tracing::warn!(predecessor = %from.uuid, "context inheritance: the earlier task has no row any more");
            return Inheritance::default();
        }
        Err(e) => {
            tracing::warn!(predecessor = %from.uuid, "context inheritance: {e}");
            return Inheritance::default();
        }
    };
    let remote = match crate::remote::open(config.context_storage.remote.as_ref()) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(predecessor = %from.uuid, "context inheritance: {e:#}");
            return Inheritance::default();
        }
    };
    match from_predecessor(config, layout, remote.as_deref(), &row) {
        Ok((text, from)) => Inheritance {
            text: Some(text),
            from: Some(from),
            skipped: Vec::new(),
        },
        Err(reason) => {
            tracing::warn!(predecessor = %row.uuid, "context inheritance: {reason}");
            Inheritance::default()
        }
    }
}

/// The block and the `inherited_from` record of predecessor `c`, or why it is skipped. On a
/// working copy of the bucket `remote`, a predecessor that ran on another host is read from a
/// copy downloaded from the bucket ([`crate::remote::view::for_reading`]).
fn from_predecessor(
    config: &Config,
    layout: &Layout,
    remote: Option<&crate::remote::Store>,
    c: &TaskRow,
) -> Result<(String, InheritedFrom), String> {
    if c.files_deleted_at.is_some() {
        return Err("its directory was deleted by `ctxhost cleanup`".to_string());
    }
    let found = crate::remote::view::for_reading(remote, layout, &c.uuid)
        .map_err(|e| format!("cannot read it from the bucket: {e:#}"))?;
    let Some((_, path)) = found else {
        return Err("its directory is gone".to_string());
    };
    // Its own handle: a predecessor's directory is read like the task's own (no link
    // followed, no FIFO read, record files bounded).
    let dir = TaskDir::open(&path)
        .map_err(|e| format!("cannot open its directory {}: {e}", path.display()))?;
    let state = read_final_state(&dir, &c.uuid).map_err(|e| format!("damaged: {e:#}"))?;
    let budget = config.inherited_token_budget();
    let (text, parts) = render(c, &state, budget);
    if parts.is_empty() {
        return Err("it left no final answer, plan or summary".to_string());
    }
    let from = InheritedFrom {
        uuid: c.uuid.clone(),
        completed_at: c.completed_at.clone().unwrap_or_default(),
        generation: state.generation + 1,
        tokens: estimate_tokens(&text),
        parts,
    };
    Ok((text, from))
}

/// The final answer (last assistant text of messages.jsonl), latest plan and last summary of
/// the task `uuid` in the task directory `dir`. Errors name the file and line that does not
/// parse.
fn read_final_state(dir: &TaskDir, uuid: &str) -> anyhow::Result<FinalState> {
    let mut state = FinalState::default();
    let Some(mut lines) = open_lines(dir, MESSAGES)? else {
        anyhow::bail!("{} is missing", dir.show(MESSAGES));
    };
    while let Some((_, h)) = lines.next_value::<HistoryLine>()? {
        if h.role == "assistant"
            && h.summary_id.is_none()
            && h.tool_calls.as_ref().is_none_or(|c| c.is_empty())
            && let Some(c) = h.content.filter(|c| !c.trim().is_empty())
        {
            state.answer = Some(c);
        }
    }
    state.summary = SummaryStore::new(dir)
        .latest()
        .context("summaries.jsonl")?
        .map(|s| s.summary);
    state.plan = PlanningStore::read(dir, uuid)?
        .and_then(|h| h.latest)
        .filter(|p| !p.steps.is_empty());
    state.generation = read_metadata(dir)?
        .and_then(|m| m.inherited_from)
        .map(|f| f.generation)
        .unwrap_or(0);
    Ok(state)
}

/// The block for predecessor `c` within `budget` tokens, and the parts it holds.
fn render(c: &TaskRow, state: &FinalState, budget: u64) -> (String, Vec<String>) {
    let header = format!(
        "Context inherited from an earlier task on the same item ({}; task {}, completed {}). \
         Use it as background; the current task follows.",
        describe_key(c),
        c.uuid,
        c.completed_at.as_deref().unwrap_or("?")
    );
    let footer = "End of the inherited context.";
    let mut left = budget.saturating_sub(estimate_tokens(&header) + estimate_tokens(footer) + 8);
    let mut sections = Vec::new();
    let mut parts = Vec::new();
    let shares = [
        ("answer", "Its final answer:", state.answer.clone(), 2),
        (
            "plan",
            "Its latest plan:",
            state.plan.as_ref().map(Plan::render),
            4,
        ),
        (
            "summary",
            "Summary of its earlier work:",
            state.summary.clone(),
            1,
        ),
    ];
    let total = left;
    for (name, title, body, share) in shares {
        let Some(body) = body.filter(|b| !b.trim().is_empty()) else {
            continue;
        };
        let cap = (total / share).min(left);
        let body = fit_tokens(body.trim(), cap.saturating_sub(estimate_tokens(title) + 2));
        if body.is_empty() {
            continue;
        }
        left = left.saturating_sub(estimate_tokens(title) + estimate_tokens(&body) + 2);
        sections.push(format!("{title}\n{body}"));
        parts.push(name.to_string());
    }
    let text = format!("{header}\n\n{}\n\n{footer}", sections.join("\n\n"));
    (text, parts)
}

/// `text` cut (at a character boundary, with a note) to at most `max` tokens (estimate).
fn fit_tokens(text: &str, max: u64) -> String {
    if estimate_tokens(text) <= max {
        return text.to_string();
    }
    const NOTE: &str = " […cut]";
    let (mut lo, mut hi) = (0usize, text.len());
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        let mut end = mid;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        if estimate_tokens(&text[..end]) + estimate_tokens(NOTE) <= max {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let mut end = lo;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    if end == 0 {
        return String::new();
    }
    format!("{}{NOTE}", &text[..end])
}

/// `github owner/repo issue #7`, `local #42`.
fn describe_key(c: &TaskRow) -> String {
    let mut s = c.task_source.clone();
    if let (Some(o), Some(r)) = (&c.owner, &c.repo) {
        s.push_str(&format!(" {o}/{r}"));
    }
    if let Some(t) = &c.task_type {
        s.push_str(&format!(" {t}"));
    }
    if let Some(id) = &c.task_id {
        s.push_str(&format!(" #{id}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> TaskRow {
        let mut r = crate::db::testing::task_row("pred");
        r.task_source = "github".into();
        r.owner = Some("o".into());
        r.repo = Some("r".into());
        r.task_type = Some("issue".into());
        r.task_id = Some("7".into());
        r.completed_at = Some("2026-01-01T00:00:00.000Z".into());
        r
    }

    #[test]
    fn the_block_holds_every_part_within_the_budget() {
        let state = FinalState {
            answer: Some("Fixed the bug in parse().".into()),
            plan: ctxhost_format::planning::parse_plan("[\"read\",\"fix\"]").ok(),
            summary: Some("The agent read parse.rs and found an off-by-one.".into()),
            generation: 1,
        };
        let (text, parts) = render(&row(), &state, 8000);
        assert_eq!(parts, ["answer", "plan", "summary"]);
        assert!(text.contains("github o/r issue #7"), "{text}");
        assert!(
            text.contains("Fixed the bug") && text.contains("1. [ ] read"),
            "{text}"
        );
        // A long answer is cut to fit; the whole block stays within the budget.
        let long = FinalState {
            answer: Some("word ".repeat(20_000)),
            summary: Some("sum ".repeat(20_000)),
            ..state
        };
        for budget in [300u64, 1000, 8000] {
            let (text, parts) = render(&row(), &long, budget);
            assert!(
                estimate_tokens(&text) <= budget,
                "{} > {budget}",
                estimate_tokens(&text)
            );
            assert!(parts.contains(&"answer".to_string()), "{parts:?}");
            assert!(text.contains("[…cut]"));
        }
    }

    #[test]
    fn fit_tokens_cuts_at_char_boundaries() {
        let t = "上下文".repeat(500);
        let f = fit_tokens(&t, 50);
        assert!(estimate_tokens(&f) <= 50, "{}", estimate_tokens(&f));
        assert!(f.ends_with("[…cut]"));
        assert_eq!(fit_tokens("short", 50), "short");
        assert_eq!(fit_tokens("short text here", 0), "");
    }
}
