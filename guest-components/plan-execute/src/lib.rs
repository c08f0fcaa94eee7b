//! `builtin:plan-execute`: plan first, then work through the plan's steps, reflect on the way,
//! verify before finishing (world `strategy-plugin`).
//!
//! - `start`: a planning side call asks the model for `{"goal", "steps": [{"id",
//!   "description"}]}`, read leniently (a fenced block, prose around it). Every reply without a
//!   usable plan is recorded in the planning history with its raw text (a `reflection` line
//!   with trigger [`UNUSABLE_PLAN_TRIGGER`]: why, whether the reply was cut at the token
//!   limit, the reply) and gets one repair prompt — which, when the reply was cut at the token
//!   limit, says so and asks for a shorter plan; if that fails too, the first plan is saved
//!   without steps with a note saying why, and the task goes on without a plan (as
//!   `builtin:react`). Otherwise the plan is saved, step 1 marked in progress, and the plan
//!   goes into the context as a message.
//! - `after-tools`: after a failed tool call, or every `reflect_every` model replies since the
//!   last reflection (settings; 0 = only after errors), a reflection side call judges the plan
//!   — unless `agent.max_steps` is used up (no model reply follows that could act on it); it
//!   may revise it (a `revision`, not written when it is the current plan as it stands). The
//!   reflection goes into the planning history and, as a message, into the context.
//! - `after-reply`: a reply without tool calls ends the current step (`progress` done) and
//!   the next step is sent; after the last step, a verification side call checks the result
//!   against the plan. Passed (or unreadable): finish. Failed: the problems go back to the
//!   model while `agent.max_steps` leaves at least two replies and fewer than
//!   `max_verifications` checks were made; otherwise the task finishes with its last answer
//!   (the history says the check failed).
//!
//! All state is in the host's planning history (`get-latest-plan`, `entries`): the component
//! keeps nothing in memory between hooks, so a resumed task continues at the same step.

mod prompts;

use std::fs;

use ctxhost_plugin::format::ChatMessage as Line;
use ctxhost_plugin::format::files::STRATEGY_REQUEST;
use ctxhost_plugin::format::planning::{
    self as fmt, MAX_TEXT_BYTES, PlanningHistory, PlanningLine, StepStatus as FmtStatus,
    UNUSABLE_PLAN_TRIGGER, bounded, find_json, parse_plan, parse_verdict,
};

use ctxhost_plugin::jsonl::LineWriter;
use ctxhost_plugin::llm;
use ctxhost_plugin::log::{Level, log};
use ctxhost_plugin::planning::{
    self as planning, Entry, Plan, PlanStep, Progress, Reflection, StepStatus, Verdict,
    Verification,
};
use ctxhost_plugin::strategy::{Decision, Guest, StrategyConfig, TaskState, ToolOutcome};
use ctxhost_plugin::types::{ChatMessage, PluginError};

/// Most tokens a side call may answer with.
const SIDE_CALL_TOKENS: u32 = 1024;
/// Bytes of recent context a reflection sees.
const RECENT_BYTES: usize = 3_000;
/// Bytes of the agent's system prompt the planner sees.
const INSTRUCTIONS_BYTES: usize = 6_000;
/// Bytes of an unusable planning reply kept in the planning history.
const RAW_REPLY_BYTES: usize = 6_000;

/// `reflect_every` and `max_verifications` from the settings JSON (defaults 5 and 2).
struct Settings {
    reflect_every: u32,
    max_verifications: u32,
}

fn settings(config: &StrategyConfig) -> Settings {
    let v: serde_json::Value = serde_json::from_str(&config.settings).unwrap_or_default();
    let get = |k: &str, d: u32| {
        v.get(k)
            .and_then(serde_json::Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(d)
    };
    Settings {
        reflect_every: get("reflect_every", 5),
        max_verifications: get("max_verifications", 2).max(1),
    }
}

// ---- conversions between the WIT records and ctxhost_format's plan ---------------------------

fn status_to_fmt(s: StepStatus) -> FmtStatus {
    match s {
        StepStatus::Pending => FmtStatus::Pending,
        StepStatus::InProgress => FmtStatus::InProgress,
        StepStatus::Done => FmtStatus::Done,
        StepStatus::Skipped => FmtStatus::Skipped,
    }
}

fn status_from_fmt(s: FmtStatus) -> StepStatus {
    match s {
        FmtStatus::Pending => StepStatus::Pending,
        FmtStatus::InProgress => StepStatus::InProgress,
        FmtStatus::Done => StepStatus::Done,
        FmtStatus::Skipped => StepStatus::Skipped,
    }
}

fn plan_to_fmt(p: Plan) -> fmt::Plan {
    fmt::Plan {
        goal: p.goal,
        steps: p
            .steps
            .into_iter()
            .map(|s| fmt::PlanStep {
                id: s.id,
                description: s.description,
                status: status_to_fmt(s.status),
            })
            .collect(),
    }
}

fn plan_from_fmt(p: &fmt::Plan) -> Plan {
    Plan {
        goal: p.goal.clone(),
        steps: p
            .steps
            .iter()
            .map(|s| PlanStep {
                id: s.id,
                description: s.description.clone(),
                status: status_from_fmt(s.status),
            })
            .collect(),
    }
}

/// The latest plan with its steps' status, if it has steps.
fn latest_plan() -> Option<fmt::Plan> {
    planning::get_latest_plan()
        .map(plan_to_fmt)
        .filter(|p| !p.steps.is_empty())
}

/// The planning history so far (committed lines and this hook's), folded.
fn history() -> PlanningHistory {
    let mut h = PlanningHistory::default();
    for line in planning::entries() {
        if let Ok(l) = serde_json::from_str::<PlanningLine>(&line) {
            let _ = h.apply(l);
        }
    }
    h
}

fn progress(step_id: u32, status: FmtStatus, note: Option<String>) -> Result<(), PluginError> {
    planning::append_entry(&Entry::Progress(Progress {
        step_id,
        status: status_from_fmt(status),
        note,
    }))
}

// ---- side calls -------------------------------------------------------------------------------

/// A side call's answer.
struct SideReply {
    /// The reply's text (empty when it has none).
    text: String,
    /// The output-token limit the call asked for, when the reply used all of it (the
    /// provider's usage says so: its `finish_reason` was `length`, the reply is cut off).
    cut_at: Option<u32>,
}

/// One side call: `messages` written to the work file, completed by the host's `llm`, the file
/// removed. Returns the reply's text (empty when it has none).
fn side_call(messages: &[Line], config: &StrategyConfig) -> Result<String, PluginError> {
    side_call_full(messages, config).map(|r| r.text)
}

/// [`side_call`] with whether the reply was cut at the token limit.
fn side_call_full(messages: &[Line], config: &StrategyConfig) -> Result<SideReply, PluginError> {
    // The SDK's line writer: buffered, U+2028/U+2029 escaped as every JSONL writer does.
    let write = || -> Result<(), PluginError> {
        let mut w = LineWriter::create(STRATEGY_REQUEST)?;
        for m in messages {
            w.json(m)?;
        }
        w.finish_unsynced()
    };
    if let Err(e) = write() {
        let _ = fs::remove_file(STRATEGY_REQUEST);
        return Err(e);
    }
    let limit = config
        .max_output_tokens
        .unwrap_or(SIDE_CALL_TOKENS)
        .min(SIDE_CALL_TOKENS)
        .min(u32::try_from(config.context_length / 4).unwrap_or(u32::MAX))
        .max(64);
    let reply = llm::complete(STRATEGY_REQUEST, limit);
    let _ = fs::remove_file(STRATEGY_REQUEST);
    let reply = reply?;
    let cut_at = reply
        .usage
        .filter(|u| u.completion_tokens >= u64::from(limit))
        .map(|_| limit);
    Ok(SideReply {
        text: reply.message.content.unwrap_or_default(),
        cut_at,
    })
}

/// Tool names from the tools file (a JSON array of OpenAI tool definitions).
fn tool_names(state: &TaskState) -> Vec<String> {
    let Some(file) = &state.tools_file else {
        return Vec::new();
    };
    let Ok(text) = fs::read_to_string(file) else {
        return Vec::new();
    };
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                .take(40)
                .collect()
        })
        .unwrap_or_default()
}

/// The system prompt of the context (its first line), at most [`INSTRUCTIONS_BYTES`].
fn instructions(state: &TaskState) -> String {
    use std::io::BufRead;
    let Ok(f) = fs::File::open(&state.context_file) else {
        return String::new();
    };
    let mut first = String::new();
    if std::io::BufReader::new(f).read_line(&mut first).is_err() {
        return String::new();
    }
    serde_json::from_str::<Line>(&first)
        .ok()
        .filter(|m| m.role == "system")
        .and_then(|m| m.content)
        .map(|c| bounded(&c, INSTRUCTIONS_BYTES))
        .unwrap_or_default()
}

/// The last lines of the context file, rendered, at most [`RECENT_BYTES`] (the file is
/// streamed; only a window of recent lines is kept).
fn recent_context(state: &TaskState) -> String {
    use std::io::BufRead;
    let Ok(f) = fs::File::open(&state.context_file) else {
        return String::new();
    };
    let mut window: std::collections::VecDeque<String> = Default::default();
    for line in std::io::BufReader::new(f).lines().map_while(Result::ok) {
        let Ok(m) = serde_json::from_str::<Line>(&line) else {
            continue;
        };
        let mut text = format!("{}: {}", m.role, m.content.as_deref().unwrap_or(""));
        for c in m.calls() {
            text.push_str(&format!(
                " [calls {}({})]",
                c.function.name, c.function.arguments
            ));
        }
        window.push_back(bounded(&text, 600));
        if window.len() > 8 {
            window.pop_front();
        }
    }
    let joined = window.into_iter().collect::<Vec<_>>().join("\n");
    // Keep the end: the most recent part.
    if joined.len() <= RECENT_BYTES {
        return joined;
    }
    let mut start = joined.len() - RECENT_BYTES;
    while !joined.is_char_boundary(start) {
        start += 1;
    }
    joined[start..].to_string()
}

// ---- hooks ------------------------------------------------------------------------------------

/// A new plan: goal filled in from the prompt when missing, step statuses reset, the first step
/// in progress; saved; returns its message.
fn adopt_plan(
    mut plan: fmt::Plan,
    prompt: &str,
    note: Option<String>,
) -> Result<String, PluginError> {
    if plan.goal.trim().is_empty() {
        plan.goal = bounded(prompt.lines().next().unwrap_or("").trim(), 300);
    }
    for s in &mut plan.steps {
        s.status = FmtStatus::Pending;
    }
    let first = plan.steps[0].id;
    planning::save_plan(&plan_from_fmt(&plan), note.as_deref())?;
    progress(first, FmtStatus::InProgress, None)?;
    plan.steps[0].status = FmtStatus::InProgress;
    Ok(prompts::plan_message(&plan))
}

/// Record planning reply number `n` that held no usable plan (`why`), with whether it was cut
/// at the token limit and its raw text (module doc).
fn record_unusable_plan(n: u32, why: &str, reply: &SideReply) -> Result<(), PluginError> {
    let cut = reply
        .cut_at
        .map(|t| format!("; it was cut off at the token limit of {t} tokens"))
        .unwrap_or_default();
    let raw = bounded(&reply.text, RAW_REPLY_BYTES);
    planning::append_entry(&Entry::Reflection(Reflection {
        trigger: UNUSABLE_PLAN_TRIGGER.to_string(),
        text: bounded(
            &format!("planning reply {n} holds no usable plan ({why}{cut}). The reply:\n{raw}"),
            MAX_TEXT_BYTES,
        ),
    }))
}

fn start(config: StrategyConfig, state: TaskState) -> Result<Decision, PluginError> {
    if planning::has_plan() {
        // The plan is already made (this hook ran before and its decision was not kept):
        // never plan twice.
        return Ok(Decision::Proceed(
            latest_plan().map(|p| prompts::plan_message(&p)),
        ));
    }
    let mut messages = vec![
        Line::text("system", prompts::PLANNER),
        Line::text(
            "user",
            prompts::plan_request(&instructions(&state), &state.prompt, &tool_names(&state)),
        ),
    ];
    let first = side_call_full(&messages, &config)?;
    let why = match parse_plan(&first.text) {
        Ok(plan) => {
            return adopt_plan(plan, &state.prompt, None).map(|m| Decision::Proceed(Some(m)));
        }
        Err(why) => why,
    };
    log(
        Level::Info,
        &format!("the planning reply holds no usable plan ({why}); asking once more"),
    );
    record_unusable_plan(1, &why, &first)?;
    let repair = prompts::plan_repair(&why, first.cut_at);
    messages.push(Line::text("assistant", first.text));
    messages.push(Line::text("user", repair));
    let second = side_call_full(&messages, &config)?;
    match parse_plan(&second.text) {
        Ok(plan) => adopt_plan(
            plan,
            &state.prompt,
            Some(format!(
                "the first planning reply was not usable ({why}); made after one repair prompt"
            )),
        )
        .map(|m| Decision::Proceed(Some(m))),
        Err(why2) => {
            record_unusable_plan(2, &why2, &second)?;
            let note = format!(
                "no usable plan after one repair prompt ({why2}); the task goes on without a plan"
            );
            log(Level::Warn, &note);
            planning::save_plan(
                &Plan {
                    goal: bounded(state.prompt.lines().next().unwrap_or("").trim(), 300),
                    steps: Vec::new(),
                },
                Some(&note),
            )?;
            Ok(Decision::Proceed(None))
        }
    }
}

fn after_tools(
    config: StrategyConfig,
    state: TaskState,
    outcomes: Vec<ToolOutcome>,
) -> Result<Decision, PluginError> {
    let Some(plan) = latest_plan() else {
        return Ok(Decision::Proceed(None));
    };
    if plan.is_finished() {
        return Ok(Decision::Proceed(None));
    }
    if state.steps_done >= config.max_steps {
        // agent.max_steps is used up: no model reply follows that could act on a reflection.
        return Ok(Decision::Proceed(None));
    }
    let s = settings(&config);
    let h = history();
    let failed = outcomes.iter().any(|o| !o.success);
    let since = state
        .steps_done
        .saturating_sub(h.last_reflection_step.unwrap_or(0));
    let trigger = if failed {
        "tool-error"
    } else if s.reflect_every > 0 && since >= s.reflect_every {
        "interval"
    } else {
        return Ok(Decision::Proceed(None));
    };
    let listed = outcomes
        .iter()
        .map(|o| match (&o.success, &o.error) {
            (true, _) => format!("- {}: ok", o.name),
            (false, e) => format!(
                "- {}: error: {}",
                o.name,
                bounded(e.as_deref().unwrap_or(""), 500)
            ),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let messages = [
        Line::text("system", prompts::REFLECTOR),
        Line::text(
            "user",
            prompts::reflection_request(
                &state.prompt,
                &plan,
                trigger,
                &listed,
                &recent_context(&state),
            ),
        ),
    ];
    let reply = match side_call(&messages, &config) {
        Ok(r) => r,
        Err(e) => {
            // A reflection is advice: without it the work goes on.
            let text = format!("the reflection call failed: {}", error_text(&e));
            log(Level::Warn, &text);
            planning::append_entry(&Entry::Reflection(Reflection {
                trigger: trigger.to_string(),
                text,
            }))?;
            return Ok(Decision::Proceed(None));
        }
    };
    let parsed = find_json(&reply, |v| {
        let o = v.as_object()?;
        let assessment = ["assessment", "reflection", "summary"]
            .iter()
            .find_map(|k| o.get(*k).and_then(serde_json::Value::as_str))?
            .to_string();
        let revise = o
            .get("revise")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false);
        Some((assessment, revise, v))
    });
    let (assessment, revised) = match parsed {
        Some((assessment, true, v)) => {
            let revised = parse_plan(&v.to_string()).ok();
            (assessment, revised)
        }
        Some((assessment, false, _)) => (assessment, None),
        None => (reply.trim().to_string(), None),
    };
    if assessment.trim().is_empty() {
        return Ok(Decision::Proceed(None));
    }
    let assessment = bounded(assessment.trim(), MAX_TEXT_BYTES);
    planning::append_entry(&Entry::Reflection(Reflection {
        trigger: trigger.to_string(),
        text: assessment.clone(),
    }))?;
    let current = latest_plan();
    let mut revised = revised;
    if let Some(plan) = revised.as_mut() {
        if plan.goal.trim().is_empty() {
            plan.goal = current.as_ref().map(|p| p.goal.clone()).unwrap_or_default();
        }
        if plan.current_step().is_none() {
            // Every step done by the reviewer's account: keep working on the last one.
            if let Some(last) = plan.steps.last_mut() {
                last.status = FmtStatus::InProgress;
            }
        } else if !plan.steps.iter().any(|s| s.status == FmtStatus::InProgress)
            && let Some(first) = plan
                .steps
                .iter_mut()
                .find(|s| s.status == FmtStatus::Pending)
        {
            first.status = FmtStatus::InProgress;
        }
    }
    if revised.is_some() && revised == current {
        // The "revision" is the plan as it stands: nothing to write or restate.
        log(
            Level::Info,
            "the reflection's revised plan is the current plan; not saved again",
        );
        revised = None;
    }
    if let Some(plan) = &revised {
        planning::save_plan(
            &plan_from_fmt(plan),
            Some(&format!(
                "revised after a reflection ({trigger}): {}",
                bounded(&assessment, 500)
            )),
        )?;
    }
    let current = revised.as_ref().cloned().or(current);
    let next = current
        .as_ref()
        .and_then(|p| p.current_step().map(|s| (s.id, s.description.clone())));
    Ok(Decision::Proceed(Some(prompts::reflection_message(
        &assessment,
        revised.as_ref(),
        next.as_ref().map(|(i, d)| (*i, d.as_str())),
    ))))
}

fn after_reply(
    config: StrategyConfig,
    state: TaskState,
    reply: ChatMessage,
) -> Result<Decision, PluginError> {
    let Some(mut plan) = latest_plan() else {
        // No plan (none asked for, or none usable): the answer ends the task.
        return Ok(Decision::Finish);
    };
    let s = settings(&config);
    let answer = reply.content.unwrap_or_default();
    let steps_left = config.max_steps.saturating_sub(state.steps_done);
    if !plan.is_finished() {
        if let Some(current) = plan.current_step().map(|s| s.id) {
            progress(current, FmtStatus::Done, Some(bounded(answer.trim(), 300)))?;
            if let Some(step) = plan.steps.iter_mut().find(|s| s.id == current) {
                step.status = FmtStatus::Done;
            }
        }
        if let Some(next) = plan.current_step().cloned() {
            if steps_left >= 2 {
                progress(next.id, FmtStatus::InProgress, None)?;
                let done = plan
                    .steps
                    .iter()
                    .rev()
                    .find(|s| s.status == FmtStatus::Done)
                    .map(|s| s.id)
                    .unwrap_or(0);
                return Ok(Decision::Proceed(Some(prompts::next_step_message(
                    done,
                    next.id,
                    plan.steps.len(),
                    &next.description,
                ))));
            }
            // No room for another step: the rest is skipped, this answer is the result.
            for step in plan.steps.iter().filter(|s| !s.status.is_closed()) {
                progress(
                    step.id,
                    FmtStatus::Skipped,
                    Some("skipped: agent.max_steps leaves no room for it".to_string()),
                )?;
            }
            return Ok(Decision::Finish);
        }
    }
    verify(&config, &state, &plan, &answer, &s, steps_left)
}

/// The check before finishing (module doc).
fn verify(
    config: &StrategyConfig,
    state: &TaskState,
    plan: &fmt::Plan,
    answer: &str,
    s: &Settings,
    steps_left: u32,
) -> Result<Decision, PluginError> {
    let h = history();
    if h.verifications >= s.max_verifications {
        return Ok(Decision::Finish);
    }
    let messages = [
        Line::text("system", prompts::VERIFIER),
        Line::text(
            "user",
            prompts::verification_request(&state.prompt, plan, &bounded(answer, MAX_TEXT_BYTES)),
        ),
    ];
    let (verdict, text) = match side_call(&messages, config) {
        Ok(reply) => parse_verdict(&reply),
        Err(e) => (
            fmt::Verdict::Unclear,
            format!("the verification call failed: {}", error_text(&e)),
        ),
    };
    planning::append_entry(&Entry::Verification(Verification {
        verdict: match verdict {
            fmt::Verdict::Passed => Verdict::Passed,
            fmt::Verdict::Failed => Verdict::Failed,
            fmt::Verdict::Unclear => Verdict::Unclear,
        },
        text: text.clone(),
    }))?;
    if verdict != fmt::Verdict::Failed {
        return Ok(Decision::Finish);
    }
    if steps_left >= 2 && h.verifications + 1 < s.max_verifications {
        return Ok(Decision::Proceed(Some(
            prompts::verification_failed_message(&text),
        )));
    }
    log(
        Level::Warn,
        "the result failed verification and no check or step is left: finishing with it",
    );
    Ok(Decision::Finish)
}

fn error_text(e: &PluginError) -> String {
    match e {
        PluginError::Io(s)
        | PluginError::InvalidInput(s)
        | PluginError::Llm(s)
        | PluginError::Unsupported(s)
        | PluginError::Internal(s)
        | PluginError::StreamCut(s) => s.clone(),
    }
}

struct PlanExecute;

impl Guest for PlanExecute {
    fn start(config: StrategyConfig, state: TaskState) -> Result<Decision, PluginError> {
        start(config, state)
    }

    fn after_reply(
        config: StrategyConfig,
        state: TaskState,
        reply: ChatMessage,
    ) -> Result<Decision, PluginError> {
        after_reply(config, state, reply)
    }

    fn after_tools(
        config: StrategyConfig,
        state: TaskState,
        _reply: ChatMessage,
        outcomes: Vec<ToolOutcome>,
    ) -> Result<Decision, PluginError> {
        after_tools(config, state, outcomes)
    }
}

ctxhost_plugin::export_strategy!(PlanExecute);
