//! Prometheus metrics of one ctxhost process (a worker, `ctxhost run --metrics-addr`, or the
//! dashboard, `ctxhost serve`'s `/metrics`), in the OpenMetrics text format.
//!
//! One registry per process ([`global`]). Where each figure comes from:
//! - `ctxhost_tasks{status}`: the task store, read at scrape time ([`render`]).
//! - the counters of task runs (`ctxhost_tasks_started_total`, `ctxhost_tasks_finished_total`,
//!   LLM calls, tokens, tool calls, compressions, their durations): a task runs in a process
//!   of its own, so the worker accounts for each run when its process exits ([`run`]): the
//!   row's counters then minus the row's counters at the claim (which the task process prints
//!   for the worker), and the lines the run appended to llm_calls.jsonl and tools.jsonl for
//!   what the row does not hold (durations, input/output split, tool names). Counters therefore
//!   equal the sums of the task rows' counters over the runs this worker supervised, also
//!   after a crash (the row is updated in SQL as the task goes).
//! - recoveries, lease takeovers, publications: counted where they happen in this process.
//! - database retries, component call times, spans not exported: this process's own, plus
//!   what each task process reported when it ended ([`run::RunEnd`]).
//!
//! Names and units follow the Prometheus conventions (`_total` counters, `_seconds`
//! histograms, base units).

pub mod run;
pub mod server;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::db::{Db, DbError, Status};
use crate::runtime::call_times::{self, CallTable, CallTimes};

/// The content type of [`render`]'s text (OpenMetrics 1.0, which Prometheus reads).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Label set `{status}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabel {
    /// A task status (`queued`, `running`, ...).
    pub status: String,
}

/// Label set `{model}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelLabel {
    /// The model (`llm.model` of the task's run).
    pub model: String,
}

/// Label set `{model, type}` of token counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    /// The model.
    pub model: String,
    /// `input`, `output`, `cache_read`, `cache_write` or `total`.
    pub r#type: String,
}

/// The `tool` label of calls of tools the run did not offer (a name the model made up), and
/// of offered tools beyond [`MAX_TOOL_LABELS`] names.
pub const UNKNOWN_TOOL: &str = "unknown";

/// Most distinct tool names labelled by one process (the series of `ctxhost_tool_calls_total`
/// and `ctxhost_tool_call_duration_seconds` stay bounded whatever the servers offer).
pub const MAX_TOOL_LABELS: usize = 256;

/// Label set `{tool, status}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolLabels {
    /// The tool's name (as offered to the model).
    pub tool: String,
    /// `success` or `error`.
    pub status: String,
}

/// Label set `{tool}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolLabel {
    /// The tool's name.
    pub tool: String,
}

/// Label set `{cause}` of recoveries.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabel {
    /// `crash` (the process died), `lease_expired` (taken over) or `fenced` (the process
    /// stopped itself when it lost the database).
    pub cause: String,
}

/// Label set `{process}` of database retries.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProcessLabel {
    /// `worker` (the process scraped) or `task` (the task processes it ran).
    pub process: String,
}

impl ProcessLabel {
    /// The process scraped.
    pub fn worker() -> ProcessLabel {
        ProcessLabel {
            process: "worker".to_string(),
        }
    }

    /// The task processes it ran.
    pub fn task() -> ProcessLabel {
        ProcessLabel {
            process: "task".to_string(),
        }
    }
}

type Seconds = Family<ModelLabel, Histogram, fn() -> Histogram>;
type ToolSeconds = Family<ToolLabel, Histogram, fn() -> Histogram>;

/// Buckets of LLM request durations, seconds: 0.05 s to ~205 s.
fn llm_buckets() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.05, 2.0, 13,
    ))
}

/// Buckets of tool call durations, seconds: 1 ms to ~65 s.
fn tool_buckets() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.001, 2.0, 17,
    ))
}

/// What kind of metric a [`Def`] is (its OpenMetrics type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A value that goes up and down (`gauge`).
    Gauge,
    /// A count that only grows (`counter`; exposed with the `_total` suffix).
    Counter,
    /// A distribution of durations (`histogram`; `_bucket`, `_sum`, `_count` series).
    Histogram,
}

impl Kind {
    /// The OpenMetrics type name (`# TYPE` line).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
            Kind::Histogram => "histogram",
        }
    }
}

/// One metric as registered ([`Metrics`] registers every entry of [`DEFS`] from it) and as
/// documented (docs/reference/metrics.md is rendered from [`DEFS`]).
#[derive(Debug, Clone, Copy)]
pub struct Def {
    /// The name it is registered under, without the unit and `_total` suffixes.
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
    /// Measured in seconds (the name gets `_seconds`).
    pub seconds: bool,
    /// Its label names, in the order of its label set.
    pub labels: &'static [&'static str],
    /// The `# HELP` text.
    pub help: &'static str,
    /// What it counts, for the reference (Markdown).
    pub doc: &'static str,
}

impl Def {
    /// The name a scrape shows: `ctxhost_tasks_started_total`, `ctxhost_llm_request_duration_seconds`.
    pub fn exposed_name(&self) -> String {
        let unit = if self.seconds { "_seconds" } else { "" };
        let total = if self.kind == Kind::Counter {
            "_total"
        } else {
            ""
        };
        format!("{}{unit}{total}", self.name)
    }
}

/// `ctxhost_tasks`.
pub const TASKS: Def = Def {
    name: "ctxhost_tasks",
    kind: Kind::Gauge,
    seconds: false,
    labels: &["status"],
    help: "Tasks in the task store by status",
    doc: "tasks in the store by status, read at scrape time",
};
/// `ctxhost_tasks_started`.
pub const TASKS_STARTED: Def = Def {
    name: "ctxhost_tasks_started",
    kind: Kind::Counter,
    seconds: false,
    labels: &[],
    help: "Task runs started by this worker's task processes",
    doc: "task runs this worker's processes claimed",
};
/// `ctxhost_tasks_finished`.
pub const TASKS_FINISHED: Def = Def {
    name: "ctxhost_tasks_finished",
    kind: Kind::Counter,
    seconds: false,
    labels: &["status"],
    help: "Task runs ended, by the task's status after the run",
    doc: "runs ended, by the task's status after the run (`completed`, `failed`, `stopped`, `paused`, `queued` = queued again after a crash)",
};
/// `ctxhost_llm_calls`.
pub const LLM_CALLS: Def = Def {
    name: "ctxhost_llm_calls",
    kind: Kind::Counter,
    seconds: false,
    labels: &["model"],
    help: "LLM calls that got an answer",
    doc: "LLM calls that got an answer (agent loop, compressor, strategy)",
};
/// `ctxhost_llm_call_errors`.
pub const LLM_CALL_ERRORS: Def = Def {
    name: "ctxhost_llm_call_errors",
    kind: Kind::Counter,
    seconds: false,
    labels: &["model"],
    help: "LLM calls that failed",
    doc: "LLM calls that failed",
};
/// `ctxhost_llm_tokens`.
pub const LLM_TOKENS: Def = Def {
    name: "ctxhost_llm_tokens",
    kind: Kind::Counter,
    seconds: false,
    labels: &["model", "type"],
    help: "Tokens of LLM calls by type (input, output, cache_read, cache_write, total)",
    doc: "tokens: `input`, `output` (provider-reported), `cache_read`, `cache_write`, `total`",
};
/// `ctxhost_llm_request_duration`.
pub const LLM_REQUEST_DURATION: Def = Def {
    name: "ctxhost_llm_request_duration",
    kind: Kind::Histogram,
    seconds: true,
    labels: &["model"],
    help: "Wall time of LLM calls",
    doc: "wall time of each LLM call",
};
/// `ctxhost_llm_cost_usd`.
pub const LLM_COST_USD: Def = Def {
    name: "ctxhost_llm_cost_usd",
    kind: Kind::Counter,
    seconds: false,
    labels: &["model"],
    help: "Cost of LLM calls in US dollars (models with llm.pricing only)",
    doc: "cost in US dollars (models with `llm.pricing` only)",
};
/// `ctxhost_tool_calls`.
pub const TOOL_CALLS: Def = Def {
    name: "ctxhost_tool_calls",
    kind: Kind::Counter,
    seconds: false,
    labels: &["tool", "status"],
    help: "Tool calls",
    doc: "tool calls (`success`, `error`); `tool` is `unknown` for a name the run did not offer (made up by the model) and past 256 names",
};
/// `ctxhost_tool_call_duration`.
pub const TOOL_CALL_DURATION: Def = Def {
    name: "ctxhost_tool_call_duration",
    kind: Kind::Histogram,
    seconds: true,
    labels: &["tool"],
    help: "Wall time of tool calls",
    doc: "wall time of each tool call",
};
/// `ctxhost_compressions`.
pub const COMPRESSIONS: Def = Def {
    name: "ctxhost_compressions",
    kind: Kind::Counter,
    seconds: false,
    labels: &["model"],
    help: "Compressions of task contexts",
    doc: "compressions of the context",
};
/// `ctxhost_tasks_recovered`.
pub const TASKS_RECOVERED: Def = Def {
    name: "ctxhost_tasks_recovered",
    kind: Kind::Counter,
    seconds: false,
    labels: &["cause"],
    help: "Running tasks recovered after their process was lost (crash, lease expired, fenced)",
    doc: "running tasks recovered: `crash`, `fenced` (the process lost the database), `lease_expired` (taken over)",
};
/// `ctxhost_db_retries`.
pub const DB_RETRIES: Def = Def {
    name: "ctxhost_db_retries",
    kind: Kind::Counter,
    seconds: false,
    labels: &["process"],
    help: "Retries of database statements, of this process (worker) and of the task processes it ran (task)",
    doc: "retried database statements (busy SQLite, unreachable PostgreSQL): `worker` = the scraped process itself, `task` = the task processes it ran",
};
/// `ctxhost_component_call_duration`.
pub const COMPONENT_CALL_DURATION: Def = Def {
    name: "ctxhost_component_call_duration",
    kind: Kind::Histogram,
    seconds: true,
    labels: &["plugin", "function"],
    help: "Wall time of calls into components (plugins), by component and WIT function",
    doc: "wall time of each call into a component (its host calls, e.g. a compressor's LLM call, included), by component (`builtin:openai-chat`, a file's name) and WIT function (`write-request`, `compress`, `add-message`, `instantiation`, ...)",
};
/// `ctxhost_otel_spans_dropped`.
pub const OTEL_SPANS_DROPPED: Def = Def {
    name: "ctxhost_otel_spans_dropped",
    kind: Kind::Counter,
    seconds: false,
    labels: &[],
    help: "Spans of task processes never exported to the OpenTelemetry collector",
    doc: "spans of the task processes that never reached the OpenTelemetry collector (queue full, collector refusing, unreachable or too slow)",
};
/// `ctxhost_results_published`.
pub const RESULTS_PUBLISHED: Def = Def {
    name: "ctxhost_results_published",
    kind: Kind::Counter,
    seconds: false,
    labels: &[],
    help: "Task results posted to their GitHub/GitLab item",
    doc: "results posted to GitHub/GitLab items",
};
/// `ctxhost_publish_failures`.
pub const PUBLISH_FAILURES: Def = Def {
    name: "ctxhost_publish_failures",
    kind: Kind::Counter,
    seconds: false,
    labels: &[],
    help: "Failed attempts to publish a task's result",
    doc: "failed attempts to publish a result",
};
/// `ctxhost_scrape_errors`.
pub const SCRAPE_ERRORS: Def = Def {
    name: "ctxhost_scrape_errors",
    kind: Kind::Counter,
    seconds: false,
    labels: &[],
    help: "Scrapes whose read of the task store failed",
    doc: "scrapes whose read of the store failed",
};

/// Every metric, in the order a scrape lists them.
pub const DEFS: &[Def] = &[
    TASKS,
    TASKS_STARTED,
    TASKS_FINISHED,
    LLM_CALLS,
    LLM_CALL_ERRORS,
    LLM_TOKENS,
    LLM_REQUEST_DURATION,
    LLM_COST_USD,
    TOOL_CALLS,
    TOOL_CALL_DURATION,
    COMPRESSIONS,
    TASKS_RECOVERED,
    DB_RETRIES,
    COMPONENT_CALL_DURATION,
    OTEL_SPANS_DROPPED,
    RESULTS_PUBLISHED,
    PUBLISH_FAILURES,
    SCRAPE_ERRORS,
];

/// Every metric of a process (module docs).
pub struct Metrics {
    registry: Registry,
    /// `ctxhost_tasks{status}`: tasks in the store by status, at scrape time.
    pub tasks: Family<StatusLabel, Gauge>,
    /// `ctxhost_tasks_started_total`: task runs this worker's processes claimed.
    pub tasks_started: Counter,
    /// `ctxhost_tasks_finished_total{status}`: runs that ended, by the task's status after the
    /// run (`completed`, `failed`, `stopped`, `paused`, or `queued` when it was queued again).
    pub tasks_finished: Family<StatusLabel, Counter>,
    /// `ctxhost_llm_calls_total{model}`: LLM calls that got an answer (agent loop,
    /// compressor and strategy), the rows' `llm_call_count`.
    pub llm_calls: Family<ModelLabel, Counter>,
    /// `ctxhost_llm_call_errors_total{model}`: LLM calls that failed (llm_calls.jsonl).
    pub llm_errors: Family<ModelLabel, Counter>,
    /// `ctxhost_llm_tokens_total{model,type}`: `total`, `cache_read` and `cache_write` from
    /// the rows; `input` and `output` from the calls' provider-reported usage.
    pub llm_tokens: Family<TokenLabels, Counter>,
    /// `ctxhost_llm_request_duration_seconds{model}`: wall time of each LLM call.
    pub llm_duration: Seconds,
    /// `ctxhost_llm_cost_usd_total{model}`: cost of the calls with `llm.pricing` set for
    /// their model (nothing counted without prices).
    pub llm_cost: Family<ModelLabel, Counter<f64, AtomicU64>>,
    /// `ctxhost_tool_calls_total{tool,status}`: tool calls (tools.jsonl), `tool` from
    /// [`Metrics::tool_label`] (the names a model makes up are `unknown`).
    pub tool_calls: Family<ToolLabels, Counter>,
    /// `ctxhost_tool_call_duration_seconds{tool}`: wall time of each tool call.
    pub tool_duration: ToolSeconds,
    /// The tool names labelled so far (at most [`MAX_TOOL_LABELS`]).
    tool_names: Mutex<std::collections::HashSet<String>>,
    /// `ctxhost_compressions_total{model}`: compressions of the context (rows).
    pub compressions: Family<ModelLabel, Counter>,
    /// `ctxhost_tasks_recovered_total{cause}`: tasks this process recovered.
    pub recovered: Family<CauseLabel, Counter>,
    /// `ctxhost_db_retries_total{process}`: retries of database statements (busy SQLite,
    /// unreachable PostgreSQL): `process="worker"` this process's own (the worker's, or the
    /// dashboard's), `process="task"` those of the task processes it ran ([`run::RunEnd`]).
    pub db_retries: Family<ProcessLabel, Counter>,
    /// `ctxhost_component_call_duration_seconds{plugin,function}`: wall time of calls into
    /// components, of this process and of the task processes it ran.
    pub component_calls: ComponentCalls,
    /// `ctxhost_otel_spans_dropped_total`: spans of the task processes this worker ran that
    /// never reached the OpenTelemetry collector.
    pub spans_dropped: Counter,
    /// `ctxhost_results_published_total`: result comments posted to GitHub/GitLab items.
    pub published: Counter,
    /// `ctxhost_publish_failures_total`: failed attempts to publish a result.
    pub publish_failures: Counter,
    /// `ctxhost_scrape_errors_total`: scrapes whose store read failed.
    pub scrape_errors: Counter,
    /// This process's own retries already added to `db_retries`.
    db_retries_seen: AtomicU64,
}

impl Metrics {
    fn new() -> Metrics {
        let mut r = Registry::default();
        let tasks = Family::<StatusLabel, Gauge>::default();
        register(&mut r, &TASKS, tasks.clone());
        let tasks_started = Counter::default();
        register(&mut r, &TASKS_STARTED, tasks_started.clone());
        let tasks_finished = Family::<StatusLabel, Counter>::default();
        register(&mut r, &TASKS_FINISHED, tasks_finished.clone());
        let llm_calls = Family::<ModelLabel, Counter>::default();
        register(&mut r, &LLM_CALLS, llm_calls.clone());
        let llm_errors = Family::<ModelLabel, Counter>::default();
        register(&mut r, &LLM_CALL_ERRORS, llm_errors.clone());
        let llm_tokens = Family::<TokenLabels, Counter>::default();
        register(&mut r, &LLM_TOKENS, llm_tokens.clone());
        let llm_duration: Seconds = Family::new_with_constructor(llm_buckets);
        register(&mut r, &LLM_REQUEST_DURATION, llm_duration.clone());
        let llm_cost = Family::<ModelLabel, Counter<f64, AtomicU64>>::default();
        register(&mut r, &LLM_COST_USD, llm_cost.clone());
        let tool_calls = Family::<ToolLabels, Counter>::default();
        register(&mut r, &TOOL_CALLS, tool_calls.clone());
        let tool_duration: ToolSeconds = Family::new_with_constructor(tool_buckets);
        register(&mut r, &TOOL_CALL_DURATION, tool_duration.clone());
        let compressions = Family::<ModelLabel, Counter>::default();
        register(&mut r, &COMPRESSIONS, compressions.clone());
        let recovered = Family::<CauseLabel, Counter>::default();
        register(&mut r, &TASKS_RECOVERED, recovered.clone());
        let db_retries = Family::<ProcessLabel, Counter>::default();
        register(&mut r, &DB_RETRIES, db_retries.clone());
        let component_calls = ComponentCalls::default();
        register(&mut r, &COMPONENT_CALL_DURATION, component_calls.clone());
        let spans_dropped = Counter::default();
        register(&mut r, &OTEL_SPANS_DROPPED, spans_dropped.clone());
        let published = Counter::default();
        register(&mut r, &RESULTS_PUBLISHED, published.clone());
        let publish_failures = Counter::default();
        register(&mut r, &PUBLISH_FAILURES, publish_failures.clone());
        let scrape_errors = Counter::default();
        register(&mut r, &SCRAPE_ERRORS, scrape_errors.clone());
        Metrics {
            registry: r,
            tasks,
            tasks_started,
            tasks_finished,
            llm_calls,
            llm_errors,
            llm_tokens,
            llm_duration,
            llm_cost,
            tool_calls,
            tool_duration,
            tool_names: Mutex::default(),
            compressions,
            recovered,
            db_retries,
            db_retries_seen: AtomicU64::new(0),
            component_calls,
            spans_dropped,
            published,
            publish_failures,
            scrape_errors,
        }
    }

    /// The `tool` label of a call of `name`: the name itself when the run `offered` it (a
    /// configured MCP server's tool or a host tool) and fewer than [`MAX_TOOL_LABELS`] other
    /// names were labelled before, else [`UNKNOWN_TOOL`]. Names a model makes up (or a
    /// server offers by the thousand) so never add series.
    pub fn tool_label(&self, name: &str, offered: bool) -> String {
        if !offered {
            return UNKNOWN_TOOL.to_string();
        }
        let Ok(mut names) = self.tool_names.lock() else {
            return UNKNOWN_TOOL.to_string();
        };
        if names.contains(name) {
            return name.to_string();
        }
        if names.len() >= MAX_TOOL_LABELS {
            return UNKNOWN_TOOL.to_string();
        }
        names.insert(name.to_string());
        name.to_string()
    }

    /// Set `ctxhost_tasks{status}` from the store (every status, zeros included).
    pub fn refresh_store(&self, db: &Db) -> Result<(), DbError> {
        let counts: Vec<(String, i64)> = db
            .query("SELECT status, COUNT(*) FROM tasks GROUP BY status", &[])?
            .iter()
            .map(|r| Ok((r.text(0)?, r.int(1)?)))
            .collect::<Result<_, DbError>>()?;
        for s in Status::ALL {
            let n = counts
                .iter()
                .find(|(name, _)| name == s.as_str())
                .map_or(0, |(_, n)| *n);
            self.tasks
                .get_or_create(&StatusLabel {
                    status: s.as_str().to_string(),
                })
                .set(n);
        }
        Ok(())
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        // The store counts its retries itself (db sits below metrics); add those since the
        // last scrape.
        let retries = crate::db::retries();
        let seen = self.db_retries_seen.swap(retries, Ordering::Relaxed);
        self.db_retries
            .get_or_create(&ProcessLabel::worker())
            .inc_by(retries.saturating_sub(seen));
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Label set `{plugin, function}` of component call times.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ComponentLabels {
    /// The component's display name.
    pub plugin: String,
    /// The WIT function called (or `instantiation`).
    pub function: String,
}

/// `ctxhost_component_call_duration_seconds`: a histogram family whose figures are this
/// process's own calls ([`call_times::snapshot`], read at scrape time) plus those its task
/// processes reported ([`ComponentCalls::merge`]); buckets [`call_times::BOUNDS`].
#[derive(Clone, Debug, Default)]
pub struct ComponentCalls {
    reported: Arc<Mutex<CallTable>>,
}

impl ComponentCalls {
    /// Add a task process's calls.
    pub fn merge(&self, calls: &[CallTimes]) {
        let mut table = self.reported.lock().unwrap_or_else(|p| p.into_inner());
        for c in calls {
            table.merge(c);
        }
    }

    /// Every entry now: the reported calls and this process's own.
    pub fn table(&self) -> CallTable {
        let mut table = self
            .reported
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for c in call_times::snapshot() {
            table.merge(&c);
        }
        table
    }
}

impl prometheus_client::metrics::TypedMetric for ComponentCalls {
    const TYPE: prometheus_client::metrics::MetricType =
        prometheus_client::metrics::MetricType::Histogram;
}

impl prometheus_client::encoding::EncodeMetric for ComponentCalls {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        for c in self.table().entries() {
            let labels = ComponentLabels {
                plugin: c.plugin.clone(),
                function: c.function.clone(),
            };
            // Upper bounds with their (non-cumulative) counts; f64::MAX is encoded `+Inf`.
            let buckets: Vec<(f64, u64)> = call_times::BOUNDS
                .iter()
                .copied()
                .chain(std::iter::once(f64::MAX))
                .zip(c.buckets.iter().copied())
                .collect();
            encoder
                .encode_family(&labels)?
                .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                    c.sum_seconds,
                    c.count,
                    &buckets,
                    None,
                )?;
        }
        Ok(())
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Histogram
    }
}

/// Register `metric` under `def`'s name, help and unit.
fn register(r: &mut Registry, def: &Def, metric: impl prometheus_client::registry::Metric) {
    if def.seconds {
        r.register_with_unit(def.name, def.help, Unit::Seconds, metric);
    } else {
        r.register(def.name, def.help, metric);
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// This process's metrics.
pub fn global() -> &'static Metrics {
    &METRICS
}

/// The text of a scrape: the store's gauges refreshed from `db` (when given; a failed read is
/// logged and counted in `ctxhost_scrape_errors_total`, the other metrics are still served),
/// then every metric.
pub fn render(db: Option<&Db>) -> String {
    let m = global();
    if let Some(db) = db
        && let Err(e) = m.refresh_store(db)
    {
        tracing::warn!("metrics: cannot read task counts from the store: {e}");
        m.scrape_errors.inc();
    }
    m.encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`DEFS`] (from which docs/reference/metrics.md is rendered) is what a scrape shows: the
    /// same names, types and label names, in the same order.
    #[test]
    fn the_table_of_metrics_is_what_a_scrape_shows() {
        let m = Metrics::new();
        let s = |v: &str| v.to_string();
        m.tasks
            .get_or_create(&StatusLabel {
                status: s("queued"),
            })
            .set(1);
        m.tasks_finished
            .get_or_create(&StatusLabel {
                status: s("failed"),
            })
            .inc();
        let model = ModelLabel { model: s("m") };
        m.llm_calls.get_or_create(&model).inc();
        m.llm_errors.get_or_create(&model).inc();
        m.llm_tokens
            .get_or_create(&TokenLabels {
                model: s("m"),
                r#type: s("input"),
            })
            .inc();
        m.llm_duration.get_or_create(&model).observe(0.1);
        m.llm_cost.get_or_create(&model).inc_by(0.5);
        m.tool_calls
            .get_or_create(&ToolLabels {
                tool: s("t"),
                status: s("success"),
            })
            .inc();
        m.tool_duration
            .get_or_create(&ToolLabel { tool: s("t") })
            .observe(0.1);
        m.compressions.get_or_create(&model).inc();
        m.recovered
            .get_or_create(&CauseLabel { cause: s("crash") })
            .inc();
        let mut buckets = vec![0; call_times::BOUNDS.len() + 1];
        buckets[0] = 1;
        m.component_calls.merge(&[CallTimes {
            plugin: s("p"),
            function: s("f"),
            count: 1,
            sum_seconds: 0.001,
            buckets,
        }]);
        let text = m.encode();
        let types: Vec<(String, String)> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| {
                let (name, kind) = l.split_once(' ').unwrap();
                (name.to_string(), kind.to_string())
            })
            .collect();
        let wanted: Vec<(String, String)> = DEFS
            .iter()
            .map(|d| {
                // OpenMetrics names a counter family without its `_total`.
                let exposed = d.exposed_name();
                let family = exposed
                    .strip_suffix("_total")
                    .unwrap_or(&exposed)
                    .to_string();
                (family, d.kind.as_str().to_string())
            })
            .collect();
        assert_eq!(types, wanted, "{text}");
        for d in DEFS {
            let name = d.exposed_name();
            let sample = text
                .lines()
                .find(|l| {
                    l.strip_prefix(name.as_str()).is_some_and(|rest| {
                        ["{", " ", "_sum", "_count", "_bucket"]
                            .iter()
                            .any(|p| rest.starts_with(p))
                    })
                })
                .unwrap_or_else(|| panic!("no sample of {}:\n{text}", d.exposed_name()));
            let names: Vec<&str> = sample
                .split_once('{')
                .map(|(_, rest)| rest.split_once('}').map_or("", |(l, _)| l))
                .unwrap_or("")
                .split(',')
                .filter_map(|kv| kv.split_once('=').map(|(k, _)| k))
                .filter(|k| *k != "le")
                .collect();
            assert_eq!(names, d.labels, "{}: {sample}", d.exposed_name());
        }
    }
}
