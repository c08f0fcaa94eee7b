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
        r.register(
            "ctxhost_tasks",
            "Tasks in the task store by status",
            tasks.clone(),
        );
        let tasks_started = Counter::default();
        r.register(
            "ctxhost_tasks_started",
            "Task runs started by this worker's task processes",
            tasks_started.clone(),
        );
        let tasks_finished = Family::<StatusLabel, Counter>::default();
        r.register(
            "ctxhost_tasks_finished",
            "Task runs ended, by the task's status after the run",
            tasks_finished.clone(),
        );
        let llm_calls = Family::<ModelLabel, Counter>::default();
        r.register(
            "ctxhost_llm_calls",
            "LLM calls that got an answer",
            llm_calls.clone(),
        );
        let llm_errors = Family::<ModelLabel, Counter>::default();
        r.register(
            "ctxhost_llm_call_errors",
            "LLM calls that failed",
            llm_errors.clone(),
        );
        let llm_tokens = Family::<TokenLabels, Counter>::default();
        r.register(
            "ctxhost_llm_tokens",
            "Tokens of LLM calls by type (input, output, cache_read, cache_write, total)",
            llm_tokens.clone(),
        );
        let llm_duration: Seconds = Family::new_with_constructor(llm_buckets);
        r.register_with_unit(
            "ctxhost_llm_request_duration",
            "Wall time of LLM calls",
            Unit::Seconds,
            llm_duration.clone(),
        );
        let llm_cost = Family::<ModelLabel, Counter<f64, AtomicU64>>::default();
        r.register(
            "ctxhost_llm_cost_usd",
            "Cost of LLM calls in US dollars (models with llm.pricing only)",
            llm_cost.clone(),
        );
        let tool_calls = Family::<ToolLabels, Counter>::default();
        r.register("ctxhost_tool_calls", "Tool calls", tool_calls.clone());
        let tool_duration: ToolSeconds = Family::new_with_constructor(tool_buckets);
        r.register_with_unit(
            "ctxhost_tool_call_duration",
            "Wall time of tool calls",
            Unit::Seconds,
            tool_duration.clone(),
        );
        let compressions = Family::<ModelLabel, Counter>::default();
        r.register(
            "ctxhost_compressions",
            "Compressions of task contexts",
            compressions.clone(),
        );
        let recovered = Family::<CauseLabel, Counter>::default();
        r.register(
            "ctxhost_tasks_recovered",
            "Running tasks recovered after their process was lost (crash, lease expired, fenced)",
            recovered.clone(),
        );
        let db_retries = Family::<ProcessLabel, Counter>::default();
        r.register(
            "ctxhost_db_retries",
            "Retries of database statements, of this process (worker) and of the task processes it ran (task)",
            db_retries.clone(),
        );
        let component_calls = ComponentCalls::default();
        r.register_with_unit(
            "ctxhost_component_call_duration",
            "Wall time of calls into components (plugins), by component and WIT function",
            Unit::Seconds,
            component_calls.clone(),
        );
        let spans_dropped = Counter::default();
        r.register(
            "ctxhost_otel_spans_dropped",
            "Spans of task processes never exported to the OpenTelemetry collector",
            spans_dropped.clone(),
        );
        let published = Counter::default();
        r.register(
            "ctxhost_results_published",
            "Task results posted to their GitHub/GitLab item",
            published.clone(),
        );
        let publish_failures = Counter::default();
        r.register(
            "ctxhost_publish_failures",
            "Failed attempts to publish a task's result",
            publish_failures.clone(),
        );
        let scrape_errors = Counter::default();
        r.register(
            "ctxhost_scrape_errors",
            "Scrapes whose read of the task store failed",
            scrape_errors.clone(),
        );
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
