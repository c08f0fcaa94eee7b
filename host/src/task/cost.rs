//! A task's cost: the provider-reported tokens of its LLM calls (the `call` and `summary_call`
//! lines of its llm_calls.jsonl that got an answer; cache writes from its row) priced by
//! `llm.pricing` ([`crate::config::pricing`]). `None` when its model has no price or its
//! directory is gone (`ctxhost cleanup`): nothing is guessed.

use ctxhost_format::CallLogLine;
use ctxhost_format::CallStatus;
use ctxhost_format::files::LLM_CALLS;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::config::pricing::Pricing;
use crate::db::{Db, DbError, TaskFilter, TaskRow};
use crate::layout::Layout;
use crate::task_dir::TaskDir;

/// Provider-reported tokens of a task's answered LLM calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallTokens {
    /// Prompt tokens (cache reads and writes included).
    pub input: u64,
    /// Completion tokens.
    pub output: u64,
    /// Prompt tokens read from the provider's cache (agent-loop calls).
    pub cache_read: u64,
}

/// Sum the answered calls of `dir`'s llm_calls.jsonl whose timestamp `keep` accepts.
pub fn call_tokens(dir: &TaskDir, mut keep: impl FnMut(&str) -> bool) -> CallTokens {
    let mut t = CallTokens::default();
    crate::metrics::run::for_each_line(dir, LLM_CALLS, |line: CallLogLine| {
        let (timestamp, status, usage, cache_read) = match &line {
            CallLogLine::Call(c) => (&c.timestamp, c.status, c.usage, c.cache_read_tokens),
            CallLogLine::SummaryCall(c) => (&c.timestamp, c.status, c.usage, None),
            CallLogLine::Compression(_) => return,
        };
        if status != CallStatus::Ok || !keep(timestamp) {
            return;
        }
        t.input += usage.prompt_tokens.unwrap_or(0);
        t.output += usage.completion_tokens.unwrap_or(0);
        t.cache_read += cache_read.unwrap_or(0);
    });
    t
}

/// The cost of task `row` in US dollars (module docs).
pub fn task_cost(layout: &Layout, row: &TaskRow, pricing: &Pricing) -> Option<f64> {
    let model = row.model.as_deref()?;
    if !pricing.0.contains_key(model) {
        return None;
    }
    let (_, path) = layout.find_task_dir(&row.uuid)?;
    dir_cost(&TaskDir::open(&path).ok()?, row, pricing)
}

/// [`task_cost`] of task `row` whose directory is `dir` (a copy downloaded from the bucket,
/// say).
pub fn dir_cost(dir: &TaskDir, row: &TaskRow, pricing: &Pricing) -> Option<f64> {
    let model = row.model.as_deref()?;
    if !pricing.0.contains_key(model) {
        return None;
    }
    let t = call_tokens(dir, |_| true);
    pricing.cost(
        model,
        t.input,
        t.output,
        t.cache_read,
        u64::try_from(row.cache_creation_tokens).unwrap_or(0),
    )
}

/// The cost of every task with a price (`ctxhost stats`), US dollars.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Costs {
    /// All priced tasks together (`None`: no task has a price).
    pub total: Option<f64>,
    /// By model (priced models only).
    pub by_model: BTreeMap<String, f64>,
    /// By day the task was created (`YYYY-MM-DD`, UTC) and model.
    #[serde(serialize_with = "day_model_pairs")]
    pub by_day: BTreeMap<(String, String), f64>,
}

fn day_model_pairs<S: serde::Serializer>(
    m: &BTreeMap<(String, String), f64>,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = s.serialize_seq(Some(m.len()))?;
    for ((day, model), usd) in m {
        seq.serialize_element(&serde_json::json!({"day": day, "model": model, "cost_usd": usd}))?;
    }
    seq.end()
}

/// The costs of the tasks of `db` whose model has a price (each read from its directory's
/// llm_calls.jsonl: one file per priced task; none is read without prices).
pub fn costs(db: &Db, layout: &Layout, pricing: &Pricing) -> Result<Costs, DbError> {
    let mut out = Costs::default();
    if pricing.is_empty() {
        return Ok(out);
    }
    for row in db.list(&TaskFilter::default())? {
        let Some(usd) = task_cost(layout, &row, pricing) else {
            continue;
        };
        let model = row.model.clone().unwrap_or_default();
        *out.total.get_or_insert(0.0) += usd;
        *out.by_model.entry(model.clone()).or_default() += usd;
        let day = row
            .created_at
            .get(..10)
            .unwrap_or(&row.created_at)
            .to_string();
        *out.by_day.entry((day, model)).or_default() += usd;
    }
    Ok(out)
}
