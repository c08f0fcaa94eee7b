//! Accounting for one task run in the worker's metrics: [`RunStart`], what the task process
//! prints after its claim (the row's counters then, and the time), and [`account`], which the
//! worker calls when the process has exited and its task is settled.
//!
//! The row's counters are updated in SQL by the task process as it goes, so the difference
//! between the row after the run and [`RunStart`] is exactly what the run added, whether it
//! ended, paused or crashed. What the row does not hold — each call's duration, input and
//! output tokens, each tool's name and status — comes from the lines the run appended to
//! llm_calls.jsonl and tools.jsonl (those whose timestamp is not before the claim); those files
//! are records a failed write may miss a line of, so the histograms may count less than the
//! row counters, never more.

use std::io::BufReader;

use ctxhost_format::files::{LLM_CALLS, TOOL_DEFINITIONS, TOOLS};
use ctxhost_format::jsonl::LineReader;
use ctxhost_format::{CallLogLine, CallStatus, CallUsage, ToolLine, ToolStatus};
use serde::{Deserialize, Serialize};

use super::{Metrics, ModelLabel, StatusLabel, TokenLabels, ToolLabel, ToolLabels};
use crate::config::pricing::Pricing;
use crate::db::TaskRow;
use crate::layout::Layout;
use crate::runtime::call_times::CallTimes;
use crate::task_dir::TaskDir;
use crate::tools::history::{HISTORY_READ, HISTORY_SEARCH};

/// The longest line read from llm_calls.jsonl or tools.jsonl (longer ones are skipped).
const MAX_LINE_BYTES: usize = 1 << 20;

/// Where a run began: printed by `task-exec --next` as one JSON line after the line with the
/// task's UUID, read by the worker.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunStart {
    /// When the task was claimed, RFC 3339 UTC with milliseconds.
    pub claimed_at: String,
    /// The row's `llm_call_count` at the claim.
    pub llm_calls: i64,
    /// The row's `tool_call_count`.
    pub tool_calls: i64,
    /// The row's `total_tokens`.
    pub tokens: i64,
    /// The row's `compression_count`.
    pub compressions: i64,
    /// The row's `cache_read_tokens`.
    pub cache_read_tokens: i64,
    /// The row's `cache_creation_tokens`.
    pub cache_creation_tokens: i64,
}

impl RunStart {
    /// The counters of `row` as claimed at `claimed_at`.
    pub fn of(row: &TaskRow, claimed_at: String) -> RunStart {
        RunStart {
            claimed_at,
            llm_calls: row.llm_call_count,
            tool_calls: row.tool_call_count,
            tokens: row.total_tokens,
            compressions: row.compression_count,
            cache_read_tokens: row.cache_read_tokens,
            cache_creation_tokens: row.cache_creation_tokens,
        }
    }

    /// The line printed (JSON, no newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parse a printed line; `None` for anything else.
    pub fn parse(line: &str) -> Option<RunStart> {
        serde_json::from_str(line.trim()).ok()
    }
}

/// What a task process says when it ends (after its spans were flushed): the figures only it
/// knows, printed by `task-exec --next` as its last line (`{"run_end":{...}}`), read by the
/// worker. A process that dies before it says leaves them uncounted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunEnd {
    /// Retries of the process's database statements ([`crate::db::retries`]).
    pub db_retries: u64,
    /// Spans the process ended and never exported ([`crate::telemetry::SpanTally`]).
    pub spans_dropped: u64,
    /// The process's calls into components ([`crate::runtime::call_times`]).
    pub component_calls: Vec<CallTimes>,
}

/// The line's wrapper, so it cannot be taken for another line.
#[derive(Serialize, Deserialize)]
struct RunEndLine {
    run_end: RunEnd,
}

impl RunEnd {
    /// This process's figures now, with `spans` (`None`: traces off).
    pub fn of_this_process(spans: Option<crate::telemetry::SpanTally>) -> RunEnd {
        RunEnd {
            db_retries: crate::db::retries(),
            spans_dropped: spans.map_or(0, |t| t.dropped()),
            component_calls: crate::runtime::call_times::snapshot(),
        }
    }

    /// The line printed (JSON, no newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(&RunEndLine {
            run_end: self.clone(),
        })
        .unwrap_or_default()
    }

    /// Parse a printed line; `None` for anything else.
    pub fn parse(line: &str) -> Option<RunEnd> {
        serde_json::from_str::<RunEndLine>(line.trim())
            .ok()
            .map(|l| l.run_end)
    }

    /// Add these figures to `m`.
    pub fn account(&self, m: &Metrics) {
        m.db_retries
            .get_or_create(&super::ProcessLabel::task())
            .inc_by(self.db_retries);
        m.spans_dropped.inc_by(self.spans_dropped);
        m.component_calls.merge(&self.component_calls);
    }
}

/// Add one run of task `row` (as it is after the run) to `m`: the run's start (`None`: the
/// process died before it said, then only its end is counted), prices per model for
/// `ctxhost_llm_cost_usd_total`.
pub fn account(
    m: &Metrics,
    layout: &Layout,
    start: Option<&RunStart>,
    row: &TaskRow,
    pricing: &Pricing,
) {
    m.tasks_finished
        .get_or_create(&StatusLabel {
            status: row.status.as_str().to_string(),
        })
        .inc();
    let Some(start) = start else { return };
    let model = row.model.clone().unwrap_or_default();
    let by_model = ModelLabel {
        model: model.clone(),
    };
    let delta = |after: i64, before: i64| u64::try_from(after - before).unwrap_or(0);
    m.llm_calls
        .get_or_create(&by_model)
        .inc_by(delta(row.llm_call_count, start.llm_calls));
    m.compressions
        .get_or_create(&by_model)
        .inc_by(delta(row.compression_count, start.compressions));
    let tokens = |kind: &str, n: u64| {
        m.llm_tokens
            .get_or_create(&TokenLabels {
                model: model.clone(),
                r#type: kind.to_string(),
            })
            .inc_by(n);
    };
    let cache_read = delta(row.cache_read_tokens, start.cache_read_tokens);
    let cache_write = delta(row.cache_creation_tokens, start.cache_creation_tokens);
    tokens("total", delta(row.total_tokens, start.tokens));
    tokens("cache_read", cache_read);
    tokens("cache_write", cache_write);

    let Some((_, path)) = layout.find_task_dir(&row.uuid) else {
        return;
    };
    let Ok(dir) = TaskDir::open(&path) else {
        return;
    };
    let since = chrono::DateTime::parse_from_rfc3339(&start.claimed_at).ok();
    let in_run = |timestamp: &str| match (since, chrono::DateTime::parse_from_rfc3339(timestamp)) {
        (Some(since), Ok(t)) => t >= since,
        _ => false,
    };
    let (mut input, mut output) = (0u64, 0u64);
    for_each_line(&dir, LLM_CALLS, |line: CallLogLine| {
        let (timestamp, duration_ms, status, usage): (_, _, _, CallUsage) = match &line {
            CallLogLine::Call(c) => (&c.timestamp, c.duration_ms, c.status, c.usage),
            CallLogLine::SummaryCall(c) => (&c.timestamp, c.duration_ms, c.status, c.usage),
            CallLogLine::Compression(_) => return,
        };
        if !in_run(timestamp) {
            return;
        }
        m.llm_duration
            .get_or_create(&by_model)
            .observe(duration_ms as f64 / 1000.0);
        if status == CallStatus::Error {
            m.llm_errors.get_or_create(&by_model).inc();
        } else {
            input += usage.prompt_tokens.unwrap_or(0);
            output += usage.completion_tokens.unwrap_or(0);
        }
    });
    tokens("input", input);
    tokens("output", output);
    if let Some(cost) = pricing.cost(&model, input, output, cache_read, cache_write) {
        m.llm_cost.get_or_create(&by_model).inc_by(cost);
    }
    let offered = offered_tools(&dir);
    for_each_line(&dir, TOOLS, |line: ToolLine| {
        if !in_run(&line.timestamp) {
            return;
        }
        let status = match line.status {
            ToolStatus::Success => "success",
            ToolStatus::Error => "error",
        };
        let tool = m.tool_label(&line.tool, offered.contains(line.tool.as_str()));
        m.tool_calls
            .get_or_create(&ToolLabels {
                tool: tool.clone(),
                status: status.to_string(),
            })
            .inc();
        m.tool_duration
            .get_or_create(&ToolLabel { tool })
            .observe(line.duration_ms as f64 / 1000.0);
    });
}

/// Largest tools.json read for the names of the offered tools.
const MAX_TOOLS_JSON_BYTES: u64 = 8 << 20;

/// The names of the tools the task offers: those in its tools.json (the configured MCP
/// servers' tools as named for the model, written by the host) and the host's own tools.
fn offered_tools(dir: &TaskDir) -> std::collections::HashSet<String> {
    let mut names: std::collections::HashSet<String> = [HISTORY_SEARCH, HISTORY_READ]
        .into_iter()
        .map(str::to_string)
        .collect();
    let defs = match dir.read_bounded(TOOL_DEFINITIONS, MAX_TOOLS_JSON_BYTES) {
        Ok(b) => serde_json::from_slice::<Vec<serde_json::Value>>(&b).unwrap_or_default(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            tracing::warn!("metrics: cannot read {}: {e}", dir.show(TOOL_DEFINITIONS));
            Vec::new()
        }
    };
    names.extend(
        defs.iter()
            .filter_map(|t| t["function"]["name"].as_str())
            .map(str::to_string),
    );
    names
}

/// Call `f` with each line of `name` in `dir` that parses as `T` (a torn or foreign line is
/// skipped; a file that cannot be read is logged).
pub(crate) fn for_each_line<T: serde::de::DeserializeOwned>(
    dir: &TaskDir,
    name: &str,
    mut f: impl FnMut(T),
) {
    let file = match dir.open_read_if_exists(name) {
        Ok(Some(f)) => f,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!("metrics: cannot read {}: {e}", dir.show(name));
            return;
        }
    };
    let mut lines = LineReader::new(BufReader::new(file), name).max_line_bytes(MAX_LINE_BYTES);
    loop {
        match lines.next_line() {
            Ok(Some((_, text))) => {
                if let Ok(v) = serde_json::from_str::<T>(text) {
                    f(v);
                }
            }
            Ok(None) => return,
            Err(e) => {
                tracing::warn!("metrics: {e}");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::DirState;
    use crate::metrics::{MAX_TOOL_LABELS, UNKNOWN_TOOL};

    const U: &str = "0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b";

    /// What task processes say at their end adds up: their database retries apart from the
    /// scraped process's, their lost spans, their component call times merged by component
    /// and function into one histogram each.
    #[test]
    fn the_ends_of_runs_add_up() {
        let line = RunEnd {
            db_retries: 2,
            spans_dropped: 5,
            component_calls: vec![CallTimes {
                // Not a component this test process runs (its own calls are merged too).
                plugin: "fixture:ends".into(),
                function: "write-request".into(),
                count: 3,
                sum_seconds: 0.5,
                buckets: vec![1, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0],
            }],
        }
        .to_line();
        assert!(line.starts_with(r#"{"run_end":"#), "{line}");
        assert_eq!(RunStart::parse(&line), None);
        let end = RunEnd::parse(&line).unwrap();
        assert_eq!(RunEnd::parse("0193a4b2"), None);
        let m = Metrics::new();
        end.account(&m);
        end.account(&m);
        let text = m.encode();
        let has = |line: &str| assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
        has(r#"ctxhost_db_retries_total{process="task"} 4"#);
        has(r#"ctxhost_otel_spans_dropped_total 10"#);
        has("# TYPE ctxhost_component_call_duration_seconds histogram");
        has("# UNIT ctxhost_component_call_duration_seconds seconds");
        let series = r#"plugin="fixture:ends",function="write-request""#;
        has(&format!(
            "ctxhost_component_call_duration_seconds_count{{{series}}} 6"
        ));
        has(&format!(
            "ctxhost_component_call_duration_seconds_sum{{{series}}} 1.0"
        ));
        has(&format!(
            "ctxhost_component_call_duration_seconds_bucket{{le=\"0.0001\",{series}}} 2"
        ));
        has(&format!(
            "ctxhost_component_call_duration_seconds_bucket{{le=\"0.4096\",{series}}} 6"
        ));
        has(&format!(
            "ctxhost_component_call_duration_seconds_bucket{{le=\"+Inf\",{series}}} 6"
        ));
    }

    /// A resumed run: the row's growth since the claim is counted, and only the file lines
    /// stamped at or after the claim (the earlier run's are not counted twice).
    #[test]
    fn a_run_counts_the_rows_growth_and_only_its_own_lines() {
        let tmp = tempfile::tempdir().unwrap();
        let layout = Layout::new(tmp.path());
        layout.ensure().unwrap();
        let dir = layout.task_dir(DirState::Completed, U);
        crate::layout::create_private_dir_all(&dir).unwrap();
        let call = |t: &str, p: u64, c: u64, ms: u64| {
            format!(
                r#"{{"type":"call","n":1,"timestamp":"{t}","context_tokens":10,"context_length":100,"request_bytes":1,"duration_ms":{ms},"status":"ok","prompt_tokens":{p},"completion_tokens":{c},"total_tokens":{}}}"#,
                p + c
            )
        };
        let summary = r#"{"type":"summary_call","timestamp":"2026-01-01T00:02:00.000Z","input_tokens":5,"request_bytes":1,"duration_ms":3000,"status":"error","error":"boom"}"#;
        std::fs::write(
            dir.join("llm_calls.jsonl"),
            [
                call("2026-01-01T00:00:00.000Z", 1000, 100, 100),
                call("2026-01-01T00:01:00.000Z", 300, 20, 500),
                summary.to_string(),
                "{\"type\":\"call\",\"torn".to_string(),
            ]
            .join("\n"),
        )
        .unwrap();
        let tool = |t: &str, name: &str, status: &str| {
            format!(
                r#"{{"seq":1,"tool":"{name}","args":{{}},"status":"{status}","duration_ms":20,"timestamp":"{t}"}}"#
            )
        };
        std::fs::write(
            dir.join("tools.jsonl"),
            [
                tool("2026-01-01T00:00:01.000Z", "old", "success"),
                tool("2026-01-01T00:01:01.000Z", "read", "success"),
                tool("2026-01-01T00:01:02.000Z", "read", "error"),
            ]
            .join("\n")
                + "\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("tools.json"),
            r#"[{"type":"function","function":{"name":"read","parameters":{}}}]"#,
        )
        .unwrap();
        let mut row = crate::db::testing::task_row(U);
        row.status = crate::db::Status::Completed;
        row.model = Some("m".into());
        row.llm_call_count = 3;
        row.total_tokens = 1420;
        row.compression_count = 2;
        row.tool_call_count = 3;
        let start = RunStart {
            claimed_at: "2026-01-01T00:00:30.000Z".into(),
            llm_calls: 1,
            tokens: 1100,
            compressions: 1,
            tool_calls: 1,
            ..RunStart::default()
        };
        assert_eq!(RunStart::parse(&start.to_line()), Some(start.clone()));
        let pricing: Pricing = serde_norway::from_str("m: {input: 1, output: 10}").unwrap();
        let m = Metrics::new();
        account(&m, &layout, Some(&start), &row, &pricing);
        let text = m.encode();
        let has = |line: &str| assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
        has(r#"ctxhost_tasks_finished_total{status="completed"} 1"#);
        has(r#"ctxhost_llm_calls_total{model="m"} 2"#);
        has(r#"ctxhost_compressions_total{model="m"} 1"#);
        has(r#"ctxhost_llm_tokens_total{model="m",type="total"} 320"#);
        has(r#"ctxhost_llm_tokens_total{model="m",type="input"} 300"#);
        has(r#"ctxhost_llm_tokens_total{model="m",type="output"} 20"#);
        has(r#"ctxhost_llm_call_errors_total{model="m"} 1"#);
        has(r#"ctxhost_llm_request_duration_seconds_count{model="m"} 2"#);
        has(r#"ctxhost_llm_request_duration_seconds_sum{model="m"} 3.5"#);
        has(r#"ctxhost_tool_calls_total{tool="read",status="success"} 1"#);
        has(r#"ctxhost_tool_calls_total{tool="read",status="error"} 1"#);
        has(r#"ctxhost_tool_call_duration_seconds_count{tool="read"} 2"#);
        assert!(!text.contains("tool=\"old\""), "{text}");
        // 300 input × $1/M + 20 output × $10/M.
        has(r#"ctxhost_llm_cost_usd_total{model="m"} 0.0005"#);
        // A process that died before it said where its run began: its end only.
        let m = Metrics::new();
        account(&m, &layout, None, &row, &pricing);
        let text = m.encode();
        assert!(text.contains(r#"ctxhost_tasks_finished_total{status="completed"} 1"#));
        assert!(!text.contains("ctxhost_llm_calls_total{"), "{text}");
    }

    /// Issue 38: the series of the tool metrics stay as many however many names the model
    /// makes up. 500 runs, each with a call of the offered tool `read`, of a host tool, and of
    /// three names made up anew: the names not offered are all `unknown`.
    #[test]
    fn made_up_tool_names_never_add_series() {
        let tmp = tempfile::tempdir().unwrap();
        let layout = Layout::new(tmp.path());
        layout.ensure().unwrap();
        let m = Metrics::new();
        let series = |text: &str| {
            text.lines()
                .filter(|l| {
                    l.starts_with("ctxhost_tool_calls_total{")
                        || l.starts_with("ctxhost_tool_call_duration_seconds_count{")
                })
                .count()
        };
        let mut counts = Vec::new();
        for run in 0..500u32 {
            let uuid = uuid::Uuid::new_v4().hyphenated().to_string();
            let dir = layout.task_dir(DirState::Completed, &uuid);
            crate::layout::create_private_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("tools.json"),
                r#"[{"type":"function","function":{"name":"read","parameters":{}}}]"#,
            )
            .unwrap();
            let made_up = || uuid::Uuid::new_v4().simple().to_string();
            let lines: Vec<String> = ["read".to_string(), HISTORY_SEARCH.to_string()]
                .into_iter()
                .chain([made_up(), made_up(), made_up()])
                .enumerate()
                .map(|(i, name)| {
                    format!(
                        r#"{{"seq":{},"tool":"{name}","args":{{}},"status":"error","duration_ms":1,"timestamp":"2026-01-01T00:01:00.000Z"}}"#,
                        i + 1
                    )
                })
                .collect();
            std::fs::write(dir.join("tools.jsonl"), lines.join("\n") + "\n").unwrap();
            let mut row = crate::db::testing::task_row(&uuid);
            row.status = crate::db::Status::Completed;
            let start = RunStart {
                claimed_at: "2026-01-01T00:00:30.000Z".into(),
                ..RunStart::default()
            };
            account(&m, &layout, Some(&start), &row, &Pricing::default());
            if run % 100 == 99 {
                counts.push(series(&m.encode()));
            }
        }
        let text = m.encode();
        // {read, history_search, unknown} × error, for both metrics.
        assert_eq!(counts, [6; 5], "{text}");
        assert!(
            text.lines()
                .any(|l| l == r#"ctxhost_tool_calls_total{tool="unknown",status="error"} 1500"#),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l == r#"ctxhost_tool_calls_total{tool="read",status="error"} 500"#),
            "{text}"
        );
    }

    /// An offered name is its own label until [`MAX_TOOL_LABELS`] names were; then `unknown`.
    #[test]
    fn offered_names_past_the_bound_are_unknown() {
        let m = Metrics::new();
        for i in 0..MAX_TOOL_LABELS {
            assert_eq!(m.tool_label(&format!("t{i}"), true), format!("t{i}"));
        }
        assert_eq!(m.tool_label("t0", true), "t0");
        assert_eq!(m.tool_label("one-more", true), UNKNOWN_TOOL);
        assert_eq!(m.tool_label("made-up", false), UNKNOWN_TOOL);
    }
}
