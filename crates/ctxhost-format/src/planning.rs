//! The planning history of a task, `planning/{uuid}.jsonl` (DESIGN.md §11, the spec's
//! PlanningHistoryStore): line shapes, the rules a plan must follow, the fold that turns the
//! lines into the latest plan, and the text a plan is shown as. Shared by the host (its one
//! writer, `ctxhost show`, `ctxhost fsck`) and the strategy components that read it.
//!
//! One JSON object per line, `type` first:
//! ```text
//! {"type":"plan","timestamp":"…Z","seq":2,"step":0,"hook":"start","goal":"…","steps":[{"id":1,"description":"…","status":"pending"}],"note":null}
//! {"type":"progress","timestamp":"…Z","seq":2,"step":0,"hook":"start","step_id":1,"status":"in_progress","note":null}
//! {"type":"decision","timestamp":"…Z","seq":2,"step":0,"hook":"start","action":"proceed","message":"…","reason":null,"llm_calls":1,"duration_ms":3}
//! {"type":"reflection", … ,"trigger":"tool-error","text":"…"}
//! {"type":"revision", … ,"goal":"…","steps":[…],"note":"why"}
//! {"type":"verification", … ,"verdict":"failed","text":"…"}
//! ```
//! Every line carries `timestamp` (RFC 3339 UTC), `seq` (the last messages.jsonl seq when the
//! hook ran: the context position), `step` (agent steps done) and `hook` (`start`,
//! `after-reply`, `after-tools`). The entries one hook made are written in one append that ends
//! with that hook's `decision` line: a run of lines after the last `decision` is a hook that
//! never returned (its process died mid-append) and is not part of the history
//! ([`PlanningHistory::uncommitted`]).

use serde::{Deserialize, Serialize};

/// Most steps a plan may have.
pub const MAX_STEPS: usize = 50;
/// Longest step description and goal, bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 2_000;
/// Longest note (progress, plan) kept, bytes.
pub const MAX_NOTE_BYTES: usize = 2_000;
/// Longest reflection or verification text kept, bytes.
pub const MAX_TEXT_BYTES: usize = 8_000;

/// The `trigger` of a `reflection` line that records a planning reply without a usable plan
/// (its text says why and quotes the reply). Such lines are counted in
/// [`PlanningHistory::unusable_plans`], not as reflections.
pub const UNUSABLE_PLAN_TRIGGER: &str = "unusable-plan";

/// The file of the planning history of task `uuid`, relative to its task directory.
pub fn history_file(uuid: &str) -> String {
    format!("{}/{uuid}.jsonl", crate::files::PLANNING_DIR)
}

/// Where a plan step stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Not started.
    #[default]
    Pending,
    /// Being worked on.
    InProgress,
    /// Finished.
    Done,
    /// Given up or no longer needed.
    Skipped,
}

impl StepStatus {
    /// `pending`, `in_progress`, `done`, `skipped` (the JSON names).
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Pending => "pending",
            StepStatus::InProgress => "in_progress",
            StepStatus::Done => "done",
            StepStatus::Skipped => "skipped",
        }
    }

    /// Finished one way or the other (done or skipped).
    pub fn is_closed(self) -> bool {
        matches!(self, StepStatus::Done | StepStatus::Skipped)
    }
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanStep {
    /// Unique in the plan, from 1.
    pub id: u32,
    /// What to do.
    pub description: String,
    /// Where it stands.
    #[serde(default)]
    pub status: StepStatus,
}

/// A plan: a goal and its steps, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Plan {
    /// What the task is to achieve.
    pub goal: String,
    /// The steps.
    pub steps: Vec<PlanStep>,
}

impl Plan {
    /// The step being worked on: the first `in_progress` step, else the first `pending` one.
    pub fn current_step(&self) -> Option<&PlanStep> {
        self.steps
            .iter()
            .find(|s| s.status == StepStatus::InProgress)
            .or_else(|| self.steps.iter().find(|s| s.status == StepStatus::Pending))
    }

    /// Every step done or skipped (a plan without steps is not finished: it is no plan).
    pub fn is_finished(&self) -> bool {
        !self.steps.is_empty() && self.steps.iter().all(|s| s.status.is_closed())
    }

    /// The step `id`.
    pub fn step(&self, id: u32) -> Option<&PlanStep> {
        self.steps.iter().find(|s| s.id == id)
    }

    /// The plan as the model and `ctxhost show` see it:
    /// ```text
    /// Goal: …
    /// 1. [done] …
    /// 2. [in progress] …
    /// 3. [ ] …
    /// ```
    pub fn render(&self) -> String {
        let mut out = format!("Goal: {}", self.goal.trim());
        for s in &self.steps {
            let mark = match s.status {
                StepStatus::Pending => "[ ]",
                StepStatus::InProgress => "[in progress]",
                StepStatus::Done => "[done]",
                StepStatus::Skipped => "[skipped]",
            };
            out.push_str(&format!("\n{}. {mark} {}", s.id, s.description.trim()));
        }
        out
    }

    /// Check the plan's shape: at most [`MAX_STEPS`] steps, ids from 1 and unique, non-empty
    /// descriptions and a goal of at most [`MAX_DESCRIPTION_BYTES`]. A plan without steps is
    /// allowed only when `allow_empty` (a first plan recording that the model gave none).
    /// The error names the field, e.g. `steps[2].id: 3 is used twice`.
    pub fn validate(&self, allow_empty: bool) -> Result<(), String> {
        if self.goal.len() > MAX_DESCRIPTION_BYTES {
            return Err(format!(
                "goal: {} bytes, at most {MAX_DESCRIPTION_BYTES}",
                self.goal.len()
            ));
        }
        if self.steps.is_empty() && !allow_empty {
            return Err("steps: a plan needs at least one step".to_string());
        }
        if self.steps.len() > MAX_STEPS {
            return Err(format!(
                "steps: {} steps, at most {MAX_STEPS}",
                self.steps.len()
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for (i, s) in self.steps.iter().enumerate() {
            if s.id == 0 {
                return Err(format!("steps[{i}].id: ids count from 1"));
            }
            if !seen.insert(s.id) {
                return Err(format!("steps[{i}].id: {} is used twice", s.id));
            }
            if s.description.trim().is_empty() {
                return Err(format!("steps[{i}].description: empty"));
            }
            if s.description.len() > MAX_DESCRIPTION_BYTES {
                return Err(format!(
                    "steps[{i}].description: {} bytes, at most {MAX_DESCRIPTION_BYTES}",
                    s.description.len()
                ));
            }
        }
        Ok(())
    }
}

/// The verdict of a verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The result does what the plan and the task ask.
    Passed,
    /// It does not.
    Failed,
    /// The verifier's answer could not be read.
    Unclear,
}

/// The strategy hook a line was written by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Hook {
    /// Before the first model call.
    Start,
    /// After a reply without tool calls.
    AfterReply,
    /// After the tool calls of a reply.
    AfterTools,
}

impl Hook {
    /// `start`, `after-reply`, `after-tools`.
    pub fn as_str(self) -> &'static str {
        match self {
            Hook::Start => "start",
            Hook::AfterReply => "after-reply",
            Hook::AfterTools => "after-tools",
        }
    }
}

impl std::fmt::Display for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a hook decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Go on (after adding `message`, if any).
    Proceed,
    /// The last reply is the final answer.
    Finish,
    /// Fail the task (`reason`).
    Fail,
}

/// When, where and by which hook a line was written (the fields every line has).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// RFC 3339 UTC.
    pub timestamp: String,
    /// The last messages.jsonl seq when the hook ran (the context position).
    pub seq: u64,
    /// Agent steps (model replies) done when the hook ran.
    pub step: u32,
    /// The hook.
    pub hook: Hook,
}

/// A `plan` or `revision` line's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanBody {
    /// Time, position, hook.
    #[serde(flatten)]
    pub at: Stamp,
    /// The plan's goal.
    pub goal: String,
    /// Its steps with their status.
    pub steps: Vec<PlanStep>,
    /// Why (a revision), or why there are no steps (a first plan without one).
    #[serde(default)]
    pub note: Option<String>,
}

impl PlanBody {
    /// The plan of this line.
    pub fn plan(&self) -> Plan {
        Plan {
            goal: self.goal.clone(),
            steps: self.steps.clone(),
        }
    }
}

/// A `decision` line: what a hook decided, closing the entries it wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionBody {
    /// Time, position, hook.
    #[serde(flatten)]
    pub at: Stamp,
    /// What the host does next.
    pub action: Action,
    /// With `proceed`: the `user` message added to the context first.
    #[serde(default)]
    pub message: Option<String>,
    /// With `fail`: why.
    #[serde(default)]
    pub reason: Option<String>,
    /// Side calls the hook made through the `llm` import.
    #[serde(default)]
    pub llm_calls: u32,
    /// Wall time of the hook in the component, side calls excluded, milliseconds.
    #[serde(default)]
    pub duration_ms: u64,
}

/// One line of `planning/{uuid}.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PlanningLine {
    /// The task's first plan (possibly without steps, `note` saying why).
    Plan(PlanBody),
    /// A later plan replacing the latest one.
    Revision(PlanBody),
    /// A step's status changed.
    Progress {
        /// Time, position, hook.
        #[serde(flatten)]
        at: Stamp,
        /// The step.
        step_id: u32,
        /// Its new status.
        status: StepStatus,
        /// What happened.
        #[serde(default)]
        note: Option<String>,
    },
    /// A reflection on the work so far.
    Reflection {
        /// Time, position, hook.
        #[serde(flatten)]
        at: Stamp,
        /// `tool-error`, `interval`, ...
        trigger: String,
        /// What it said.
        text: String,
    },
    /// A check of the result before finishing.
    Verification {
        /// Time, position, hook.
        #[serde(flatten)]
        at: Stamp,
        /// What the verifier found.
        verdict: Verdict,
        /// Its reasons.
        text: String,
    },
    /// A hook's decision; closes the lines that hook wrote.
    Decision(DecisionBody),
}

impl PlanningLine {
    /// Time, position and hook of the line.
    pub fn stamp(&self) -> &Stamp {
        match self {
            PlanningLine::Plan(b) | PlanningLine::Revision(b) => &b.at,
            PlanningLine::Progress { at, .. }
            | PlanningLine::Reflection { at, .. }
            | PlanningLine::Verification { at, .. } => at,
            PlanningLine::Decision(d) => &d.at,
        }
    }

    /// `plan`, `revision`, `progress`, `reflection`, `verification` or `decision`.
    pub fn kind(&self) -> &'static str {
        match self {
            PlanningLine::Plan(_) => "plan",
            PlanningLine::Revision(_) => "revision",
            PlanningLine::Progress { .. } => "progress",
            PlanningLine::Reflection { .. } => "reflection",
            PlanningLine::Verification { .. } => "verification",
            PlanningLine::Decision(_) => "decision",
        }
    }
}

/// What a planning history says, folded line by line ([`PlanningHistory::push`]): the latest
/// plan with its steps' status, counts, and the last decision. Lines after the last decision
/// are [`PlanningHistory::uncommitted`] and change nothing else.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct PlanningHistory {
    /// The latest plan (the first plan, or the last revision) with the status the later
    /// `progress` lines gave its steps.
    pub latest: Option<Plan>,
    /// Why the first plan has no steps, when it has none.
    pub no_plan_reason: Option<String>,
    /// `revision` lines.
    pub revisions: u32,
    /// `reflection` lines (those with trigger [`UNUSABLE_PLAN_TRIGGER`] excepted).
    pub reflections: u32,
    /// `reflection` lines with trigger [`UNUSABLE_PLAN_TRIGGER`]: planning replies that held
    /// no usable plan.
    pub unusable_plans: u32,
    /// Agent step of the last reflection.
    pub last_reflection_step: Option<u32>,
    /// `verification` lines.
    pub verifications: u32,
    /// `verification` lines with verdict `failed`.
    pub failed_verifications: u32,
    /// The verdict of the last verification.
    pub last_verdict: Option<Verdict>,
    /// The last `decision` line.
    pub last_decision: Option<DecisionBody>,
    /// Committed lines (up to and including the last decision).
    pub lines: u64,
    /// Lines after the last decision (a hook that never returned).
    pub uncommitted: u64,
    /// Side calls and component time over all decisions (calls, milliseconds).
    pub llm_calls: u64,
    /// Milliseconds spent in the strategy's hooks that wrote a decision.
    pub duration_ms: u64,
    #[serde(skip)]
    pending: Vec<PlanningLine>,
}

impl PlanningHistory {
    /// Fold in the next line. Lines are held back until the `decision` that commits them.
    /// Errors (a `progress` for a step the latest plan lacks, a second first plan, a plan that
    /// breaks [`Plan::validate`]) say what is wrong; the line is then not applied.
    pub fn push(&mut self, line: PlanningLine) -> Result<(), String> {
        let commit = matches!(line, PlanningLine::Decision(_));
        self.pending.push(line);
        self.uncommitted += 1;
        if !commit {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.pending);
        self.uncommitted = 0;
        let mut result = Ok(());
        for line in batch {
            self.lines += 1;
            if let Err(e) = self.apply(line)
                && result.is_ok()
            {
                result = Err(e);
            }
        }
        result
    }

    /// Fold in a line as if committed (the host's view of a running hook's own entries).
    pub fn apply(&mut self, line: PlanningLine) -> Result<(), String> {
        match line {
            PlanningLine::Plan(b) => {
                if self.latest.is_some() {
                    return Err(
                        "a second first plan (`plan` line); later plans are `revision` lines"
                            .into(),
                    );
                }
                let plan = b.plan();
                plan.validate(true)?;
                if plan.steps.is_empty() {
                    self.no_plan_reason = Some(b.note.unwrap_or_default());
                }
                self.latest = Some(plan);
            }
            PlanningLine::Revision(b) => {
                if self.latest.is_none() {
                    return Err("a revision before the first plan".into());
                }
                let plan = b.plan();
                plan.validate(false)?;
                self.no_plan_reason = None;
                self.revisions += 1;
                self.latest = Some(plan);
            }
            PlanningLine::Progress {
                step_id, status, ..
            } => {
                let Some(plan) = self.latest.as_mut() else {
                    return Err(format!("progress of step {step_id} before any plan"));
                };
                let Some(step) = plan.steps.iter_mut().find(|s| s.id == step_id) else {
                    return Err(format!(
                        "progress of step {step_id}, which the latest plan does not have"
                    ));
                };
                step.status = status;
            }
            PlanningLine::Reflection { trigger, .. } if trigger == UNUSABLE_PLAN_TRIGGER => {
                self.unusable_plans += 1;
            }
            PlanningLine::Reflection { at, .. } => {
                self.reflections += 1;
                self.last_reflection_step = Some(at.step);
            }
            PlanningLine::Verification { verdict, .. } => {
                self.verifications += 1;
                if verdict == Verdict::Failed {
                    self.failed_verifications += 1;
                }
                self.last_verdict = Some(verdict);
            }
            PlanningLine::Decision(d) => {
                self.llm_calls += u64::from(d.llm_calls);
                self.duration_ms += d.duration_ms;
                self.last_decision = Some(d);
            }
        }
        Ok(())
    }

    /// Whether the task has a first plan (possibly without steps).
    pub fn has_plan(&self) -> bool {
        self.latest.is_some()
    }
}

/// `text` cut to at most `max` bytes at a character boundary, with `…` when cut.
pub fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The first JSON object or array in a model's `text` that `accept` takes: fenced
/// (```` ```json ````), with prose around it, or bare. Tries every `{` / `[` in order and
/// parses from there (a JSON value followed by anything is accepted).
pub fn find_json<T>(
    text: &str,
    mut accept: impl FnMut(serde_json::Value) -> Option<T>,
) -> Option<T> {
    for (i, c) in text.char_indices() {
        if c != '{' && c != '[' {
            continue;
        }
        let mut stream =
            serde_json::Deserializer::from_str(&text[i..]).into_iter::<serde_json::Value>();
        if let Some(Ok(v)) = stream.next()
            && let Some(t) = accept(v)
        {
            return Some(t);
        }
    }
    None
}

/// A plan read leniently from a model's reply: the first JSON object with a `steps` array (or
/// a bare array of steps) anywhere in `text` — inside a code fence or with prose around it.
/// Steps may be strings or objects with `description` (or `step`, `task`, `title`, `text`)
/// and an optional `id` (a number or a numeric string; missing or repeated ids are numbered
/// 1..n); an optional `status` (`done`, `in_progress`, ...) is kept, anything else is
/// `pending`. Descriptions are trimmed and cut to [`MAX_DESCRIPTION_BYTES`], the goal too;
/// steps past [`MAX_STEPS`] are dropped. Errors say why nothing usable was found.
pub fn parse_plan(text: &str) -> Result<Plan, String> {
    if text.trim().is_empty() {
        return Err("the reply is empty".to_string());
    }
    let mut saw_json = false;
    let plan = find_json(text, |v| {
        saw_json = true;
        plan_from_value(&v)
    });
    match plan {
        Some(p) => Ok(p),
        None if saw_json => Err(
            "the reply has JSON, but no object with a non-empty `steps` list of step descriptions"
                .to_string(),
        ),
        None => Err("the reply has no JSON object".to_string()),
    }
}

fn plan_from_value(v: &serde_json::Value) -> Option<Plan> {
    use serde_json::Value;
    let (goal, steps) = match v {
        Value::Object(o) => {
            let steps = o.get("steps").or_else(|| o.get("plan"))?.as_array()?;
            let goal = ["goal", "objective", "task"]
                .iter()
                .find_map(|k| o.get(*k).and_then(Value::as_str))
                .unwrap_or("")
                .trim()
                .to_string();
            (goal, steps)
        }
        Value::Array(a) => (String::new(), a),
        _ => return None,
    };
    let mut out: Vec<PlanStep> = Vec::new();
    for s in steps.iter().take(MAX_STEPS) {
        let (id, description, status) = match s {
            Value::String(d) => (None, d.clone(), StepStatus::Pending),
            Value::Object(o) => {
                let d = ["description", "step", "task", "title", "text", "action"]
                    .iter()
                    .find_map(|k| o.get(*k).and_then(Value::as_str))
                    .unwrap_or("")
                    .to_string();
                let id = o.get("id").and_then(|v| match v {
                    Value::Number(n) => n.as_u64(),
                    Value::String(s) => s.trim().parse().ok(),
                    _ => None,
                });
                let status = o
                    .get("status")
                    .and_then(Value::as_str)
                    .map(parse_status)
                    .unwrap_or_default();
                (id, d, status)
            }
            _ => continue,
        };
        let description = description.trim();
        if description.is_empty() {
            continue;
        }
        out.push(PlanStep {
            id: id
                .and_then(|i| u32::try_from(i).ok())
                .filter(|i| *i > 0)
                .unwrap_or(0),
            description: bounded(description, MAX_DESCRIPTION_BYTES),
            status,
        });
    }
    if out.is_empty() {
        return None;
    }
    // Ids must be unique and from 1: renumber unless they already are.
    let mut seen = std::collections::HashSet::new();
    if out.iter().any(|s| s.id == 0 || !seen.insert(s.id)) {
        for (i, s) in out.iter_mut().enumerate() {
            s.id = i as u32 + 1;
        }
    }
    Some(Plan {
        goal: bounded(&goal, MAX_DESCRIPTION_BYTES),
        steps: out,
    })
}

/// A step status from a model's word: `done`/`completed`/`complete` → done, `in_progress`/
/// `in-progress`/`active`/`current` → in progress, `skipped`/`cancelled` → skipped, anything
/// else pending.
pub fn parse_status(s: &str) -> StepStatus {
    match s.trim().to_ascii_lowercase().replace('-', "_").as_str() {
        "done" | "completed" | "complete" | "finished" => StepStatus::Done,
        "in_progress" | "active" | "current" | "doing" => StepStatus::InProgress,
        "skipped" | "cancelled" | "canceled" | "dropped" => StepStatus::Skipped,
        _ => StepStatus::Pending,
    }
}

/// A verifier's reply read leniently: a JSON object with `passed` (a boolean, or `"yes"` /
/// `"no"`) or `verdict` (`passed`/`pass`/`ok` or `failed`/`fail`), and an optional reason
/// (`problems`, `reason`, `feedback`, `explanation`); without JSON, a reply starting with
/// `PASS` or `FAIL`. Anything else is [`Verdict::Unclear`]. Returns the verdict and the reason
/// (or the reply itself when it gives none), cut to [`MAX_TEXT_BYTES`].
pub fn parse_verdict(text: &str) -> (Verdict, String) {
    use serde_json::Value;
    let from_json = find_json(text, |v| {
        let o = v.as_object()?;
        let verdict = match (
            o.get("passed"),
            o.get("verdict").or_else(|| o.get("result")),
        ) {
            (Some(Value::Bool(b)), _) => Some(if *b { Verdict::Passed } else { Verdict::Failed }),
            (Some(Value::String(s)), _) | (None, Some(Value::String(s))) => {
                match s.trim().to_ascii_lowercase().as_str() {
                    "yes" | "true" | "pass" | "passed" | "ok" | "success" => Some(Verdict::Passed),
                    "no" | "false" | "fail" | "failed" | "failure" => Some(Verdict::Failed),
                    _ => None,
                }
            }
            _ => None,
        }?;
        let reason = ["problems", "reason", "feedback", "explanation", "issues"]
            .iter()
            .find_map(|k| match o.get(*k) {
                Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_string()),
                Some(Value::Array(a)) if !a.is_empty() => Some(
                    a.iter()
                        .map(|x| {
                            x.as_str()
                                .map(str::to_string)
                                .unwrap_or_else(|| x.to_string())
                        })
                        .collect::<Vec<_>>()
                        .join("; "),
                ),
                _ => None,
            });
        Some((verdict, reason))
    });
    let (verdict, reason) = match from_json {
        Some(v) => v,
        None => {
            let head = text.trim_start().to_ascii_uppercase();
            let v = if head.starts_with("PASS") {
                Verdict::Passed
            } else if head.starts_with("FAIL") {
                Verdict::Failed
            } else {
                Verdict::Unclear
            };
            (v, None)
        }
    };
    let reason = reason.unwrap_or_else(|| text.trim().to_string());
    (verdict, bounded(&reason, MAX_TEXT_BYTES))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(seq: u64, hook: Hook) -> Stamp {
        Stamp {
            timestamp: "2026-01-02T03:04:05.000Z".into(),
            seq,
            step: 0,
            hook,
        }
    }

    fn plan_line(steps: &[&str]) -> PlanningLine {
        PlanningLine::Plan(PlanBody {
            at: stamp(2, Hook::Start),
            goal: "g".into(),
            steps: steps
                .iter()
                .enumerate()
                .map(|(i, d)| PlanStep {
                    id: i as u32 + 1,
                    description: d.to_string(),
                    status: StepStatus::Pending,
                })
                .collect(),
            note: None,
        })
    }

    fn decision(seq: u64) -> PlanningLine {
        PlanningLine::Decision(DecisionBody {
            at: stamp(seq, Hook::Start),
            action: Action::Proceed,
            message: Some("m".into()),
            reason: None,
            llm_calls: 1,
            duration_ms: 2,
        })
    }

    #[test]
    fn lines_round_trip_with_the_type_first() {
        let lines = [
            plan_line(&["a", "b"]),
            PlanningLine::Progress {
                at: stamp(2, Hook::Start),
                step_id: 1,
                status: StepStatus::InProgress,
                note: None,
            },
            PlanningLine::Verification {
                at: stamp(9, Hook::AfterReply),
                verdict: Verdict::Failed,
                text: "x".into(),
            },
            decision(2),
        ];
        for l in lines {
            let text = serde_json::to_string(&l).unwrap();
            assert!(
                text.starts_with(&format!("{{\"type\":\"{}\"", l.kind())),
                "{text}"
            );
            assert!(
                text.contains("\"seq\":") && text.contains("\"hook\":"),
                "{text}"
            );
            let back: PlanningLine = serde_json::from_str(&text).unwrap();
            assert_eq!(back, l);
        }
        let text = serde_json::to_string(&plan_line(&["a"])).unwrap();
        assert!(text.contains(r#""status":"pending""#), "{text}");
        assert!(text.contains(r#""hook":"start""#), "{text}");
    }

    #[test]
    fn the_fold_keeps_uncommitted_lines_apart_and_applies_progress() {
        let mut h = PlanningHistory::default();
        h.push(plan_line(&["a", "b"])).unwrap();
        assert!(!h.has_plan(), "not committed yet");
        assert_eq!(h.uncommitted, 1);
        h.push(PlanningLine::Progress {
            at: stamp(2, Hook::Start),
            step_id: 1,
            status: StepStatus::Done,
            note: None,
        })
        .unwrap();
        h.push(decision(2)).unwrap();
        assert_eq!(h.uncommitted, 0);
        assert_eq!(h.lines, 3);
        let p = h.latest.clone().unwrap();
        assert_eq!(p.steps[0].status, StepStatus::Done);
        assert_eq!(p.current_step().unwrap().id, 2);
        assert_eq!(h.llm_calls, 1);
        // A second first plan is refused.
        h.push(plan_line(&["c"])).unwrap();
        assert!(
            h.push(decision(3))
                .unwrap_err()
                .contains("second first plan")
        );
        // Progress of an unknown step is refused.
        let mut h2 = PlanningHistory::default();
        h2.push(plan_line(&["a"])).unwrap();
        h2.push(PlanningLine::Progress {
            at: stamp(2, Hook::Start),
            step_id: 7,
            status: StepStatus::Done,
            note: None,
        })
        .unwrap();
        assert!(h2.push(decision(2)).unwrap_err().contains("step 7"));
    }

    #[test]
    fn plans_are_read_leniently() {
        let fenced = "Sure! Here is the plan:\n```json\n{\"goal\": \"Fix it\", \"steps\": [{\"id\": 1, \"description\": \"Read\"}, {\"id\": 2, \"description\": \"Fix\"}]}\n```\nGood luck.";
        let p = parse_plan(fenced).unwrap();
        assert_eq!(p.goal, "Fix it");
        assert_eq!(p.steps.len(), 2);
        assert_eq!(p.steps[1].id, 2);
        // Prose with braces before the plan, string steps, string ids, odd keys.
        let odd = "I think {this} matters. {\"objective\":\"x\",\"steps\":[\"one\",{\"step\":\"two\",\"id\":\"9\"}]}";
        let p = parse_plan(odd).unwrap();
        assert_eq!(p.goal, "x");
        assert_eq!(
            p.steps.iter().map(|s| s.id).collect::<Vec<_>>(),
            [1, 2],
            "a missing id renumbers"
        );
        // A bare array.
        let p = parse_plan("[\"a\", \"b\", \"c\"]").unwrap();
        assert_eq!(p.steps.len(), 3);
        assert!(p.validate(false).is_ok());
        // Nothing usable.
        assert_eq!(
            parse_plan("I can't plan this.").unwrap_err(),
            "the reply has no JSON object"
        );
        assert!(
            parse_plan("{\"goal\":\"x\",\"steps\":[]}")
                .unwrap_err()
                .contains("steps")
        );
        assert!(parse_plan("").is_err());
        // Too many steps are cut; long descriptions bounded.
        let many: Vec<String> = (0..80).map(|i| format!("\"s{i}\"")).collect();
        let p = parse_plan(&format!("[{}]", many.join(","))).unwrap();
        assert_eq!(p.steps.len(), MAX_STEPS);
        let long = "x".repeat(5000);
        let p = parse_plan(&format!("[\"{long}\"]")).unwrap();
        assert!(p.steps[0].description.len() <= MAX_DESCRIPTION_BYTES);
    }

    #[test]
    fn validation_names_the_field() {
        let mut p = parse_plan("[\"a\",\"b\"]").unwrap();
        p.steps[1].id = 1;
        assert_eq!(
            p.validate(false).unwrap_err(),
            "steps[1].id: 1 is used twice"
        );
        p.steps[1].id = 0;
        assert!(p.validate(false).unwrap_err().starts_with("steps[1].id"));
        let empty = Plan::default();
        assert!(empty.validate(true).is_ok());
        assert!(empty.validate(false).is_err());
    }

    #[test]
    fn verdicts_are_read_leniently() {
        assert_eq!(
            parse_verdict("```json\n{\"passed\": false, \"problems\": \"no test\"}\n```"),
            (Verdict::Failed, "no test".to_string())
        );
        assert_eq!(parse_verdict("{\"verdict\": \"PASS\"}").0, Verdict::Passed);
        assert_eq!(parse_verdict("PASS: all good").0, Verdict::Passed);
        assert_eq!(parse_verdict("FAIL - missing step 2").0, Verdict::Failed);
        assert_eq!(parse_verdict("hmm, maybe").0, Verdict::Unclear);
        assert_eq!(
            parse_verdict("{\"passed\": \"no\", \"issues\": [\"a\", \"b\"]}").1,
            "a; b"
        );
    }

    #[test]
    fn render_shows_status() {
        let mut p = parse_plan("{\"goal\":\"G\",\"steps\":[\"a\",\"b\",\"c\"]}").unwrap();
        p.steps[0].status = StepStatus::Done;
        p.steps[1].status = StepStatus::InProgress;
        assert_eq!(
            p.render(),
            "Goal: G\n1. [done] a\n2. [in progress] b\n3. [ ] c"
        );
        assert!(!p.is_finished());
    }

    #[test]
    fn bounded_cuts_at_a_char_boundary() {
        assert_eq!(bounded("abc", 5), "abc");
        let b = bounded("上下文上下文", 7);
        assert!(b.len() <= 7 && b.ends_with('…'), "{b}");
    }
}
