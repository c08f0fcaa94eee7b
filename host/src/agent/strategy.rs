//! The host side of the strategy hooks: [`StrategyDriver`] asks the task's strategy component
//! what to do at each of the loop's decision points, holds it to the host's rules, and records
//! its decision with the planning entries it made before the loop applies it.
//!
//! One hook call ([`StrategyDriver::hook`]):
//! 1. If the planning history's last decision is this hook's at this context position (the
//!    hook returned, then the process died or paused before its decision was applied), that
//!    decision is used again: the hook is not asked twice, so nothing it did (a plan, a
//!    reflection, a side call) is done twice.
//! 2. Else the planning store opens a batch ([`crate::task::PlanningStore::begin`]), the
//!    component is called, its decision checked ([`check_decision`]), and the batch committed
//!    with the decision (written only if the hook wrote entries or made side calls).
//!    A failed call or a refused decision drops the batch and fails the task.
//!
//! Rules ([`check_decision`]), whatever the component returns: `finish` only after a reply
//! without tool calls; after such a reply `proceed` must carry a message (the model is never
//! called with its own answer last); a message is at most [`MAX_MESSAGE_BYTES`]; a `fail`
//! reason is cut to [`MAX_REASON_BYTES`].

use std::time::Duration;

use anyhow::{Context, anyhow};
use ctxhost_format::planning::{Action, DecisionBody, Hook, Stamp, bounded};

use crate::runtime::{Decision, HookCall, RuntimeError, Strategy, StrategyConfig, TaskState};
use crate::task::SharedPlanning;

/// Longest message a strategy may add to the context, bytes.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// Longest `fail` reason kept, bytes.
pub const MAX_REASON_BYTES: usize = 2_000;

/// Counts of one task process's hook calls, for the log at the end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HookStats {
    /// Hooks the component answered.
    pub calls: u32,
    /// Decisions taken from the planning history instead of asking again.
    pub replayed: u32,
    /// Side calls the hooks made.
    pub llm_calls: u32,
    /// Wall time in the component, side calls excluded.
    pub component_time: Duration,
}

/// The task's strategy instance, its planning history and its settings.
pub struct StrategyDriver {
    strategy: Strategy,
    planning: SharedPlanning,
    config: StrategyConfig,
    stats: HookStats,
}

impl StrategyDriver {
    /// Drive `strategy` (whose `planning` import is `planning`) with `config`.
    pub fn new(strategy: Strategy, planning: SharedPlanning, config: StrategyConfig) -> Self {
        StrategyDriver {
            strategy,
            planning,
            config,
            stats: HookStats::default(),
        }
    }

    /// The component's name (`builtin:NAME` or its path).
    pub fn component(&self) -> &str {
        self.strategy.component()
    }

    /// The planning history.
    pub fn planning(&self) -> &SharedPlanning {
        &self.planning
    }

    /// What the hooks cost so far.
    pub fn stats(&self) -> HookStats {
        self.stats
    }

    /// Ask `hook` (called through `call`) what to do at context position `state.seq`, or take
    /// the decision it already recorded there; see the module doc. `timestamp` stamps the
    /// entries. Errors name the component and the hook.
    pub fn hook(
        &mut self,
        hook: Hook,
        state: &TaskState,
        timestamp: String,
        call: impl FnOnce(&mut Strategy, &StrategyConfig, &TaskState) -> Result<HookCall, RuntimeError>,
    ) -> anyhow::Result<Decision> {
        let component = self.strategy.component().to_string();
        let recorded = self
            .planning
            .lock()
            .recorded_decision(hook, state.seq)
            .cloned();
        if let Some(d) = recorded {
            self.stats.replayed += 1;
            tracing::info!(component, %hook, seq = state.seq, action = ?d.action,
                "applying the decision the strategy recorded before the task stopped");
            return check_decision(hook, decision_of(&d))
                .map_err(|e| anyhow!("strategy {component}: {hook} (recorded): {e}"));
        }
        self.planning.lock().begin(Stamp {
            timestamp,
            seq: state.seq,
            step: state.steps_done,
            hook,
        });
        let result = call(&mut self.strategy, &self.config, state)
            .map_err(|e| anyhow!(e))
            .and_then(|c| {
                let d = check_decision(hook, c.decision.clone())
                    .map_err(|e| anyhow!("strategy {component}: {hook}: {e}"))?;
                Ok((c, d))
            });
        let (call, decision) = match result {
            Ok(r) => r,
            Err(e) => {
                self.planning.lock().abort();
                return Err(e);
            }
        };
        self.stats.calls += 1;
        self.stats.llm_calls += call.llm_calls;
        self.stats.component_time += call.component_time;
        let body = decision_body(&decision, &call);
        let wrote =
            self.planning.lock().commit(body).with_context(|| {
                format!("recording the decision of strategy {component} ({hook})")
            })?;
        tracing::debug!(component, %hook, seq = state.seq, ?decision, llm_calls = call.llm_calls,
            ms = call.component_time.as_secs_f64() * 1000.0, recorded = wrote, "strategy hook");
        if wrote {
            crate::failpoint::kill_if_set("strategy:recorded");
        }
        Ok(decision)
    }
}

/// The decision a `decision` line records.
fn decision_of(d: &DecisionBody) -> Decision {
    match d.action {
        Action::Proceed => Decision::Proceed(d.message.clone()),
        Action::Finish => Decision::Finish,
        Action::Fail => Decision::Fail(d.reason.clone().unwrap_or_default()),
    }
}

/// The `decision` line of `decision` (its stamp is set by the planning store).
fn decision_body(decision: &Decision, call: &HookCall) -> DecisionBody {
    let (action, message, reason) = match decision {
        Decision::Proceed(m) => (Action::Proceed, m.clone(), None),
        Decision::Finish => (Action::Finish, None, None),
        Decision::Fail(r) => (Action::Fail, None, Some(r.clone())),
    };
    DecisionBody {
        at: Stamp {
            timestamp: String::new(),
            seq: 0,
            step: 0,
            hook: Hook::Start,
        },
        action,
        message,
        reason,
        llm_calls: call.llm_calls,
        duration_ms: call.component_time.as_millis().min(u128::from(u64::MAX)) as u64,
    }
}

/// Hold `decision` of `hook` to the host's rules (module doc): an empty message is no message;
/// the error says what is wrong.
pub fn check_decision(hook: Hook, decision: Decision) -> Result<Decision, String> {
    match decision {
        Decision::Proceed(m) => {
            let m = m.filter(|m| !m.trim().is_empty());
            if let Some(text) = &m
                && text.len() > MAX_MESSAGE_BYTES
            {
                return Err(format!(
                    "a message of {} bytes; at most {MAX_MESSAGE_BYTES}",
                    text.len()
                ));
            }
            if hook == Hook::AfterReply && m.is_none() {
                return Err(
                    "`proceed` without a message after a reply without tool calls: the model would be called with its own answer last (`finish` ends the task)"
                        .to_string(),
                );
            }
            Ok(Decision::Proceed(m))
        }
        Decision::Finish if hook != Hook::AfterReply => Err(format!(
            "`finish` at {hook}: only a reply without tool calls can end the task"
        )),
        Decision::Finish => Ok(Decision::Finish),
        Decision::Fail(reason) => {
            let reason = reason.trim();
            let reason = if reason.is_empty() {
                "no reason given".to_string()
            } else {
                bounded(&reason.replace(char::is_control, " "), MAX_REASON_BYTES)
            };
            Ok(Decision::Fail(reason))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_are_held_to_the_rules() {
        assert_eq!(
            check_decision(Hook::Start, Decision::Proceed(Some("  ".into()))),
            Ok(Decision::Proceed(None))
        );
        assert!(
            check_decision(Hook::AfterReply, Decision::Proceed(None))
                .unwrap_err()
                .contains("own answer last")
        );
        for hook in [Hook::Start, Hook::AfterTools] {
            assert!(check_decision(hook, Decision::Finish).is_err(), "{hook}");
        }
        assert_eq!(
            check_decision(Hook::AfterReply, Decision::Finish),
            Ok(Decision::Finish)
        );
        let big = "x".repeat(MAX_MESSAGE_BYTES + 1);
        assert!(
            check_decision(Hook::AfterTools, Decision::Proceed(Some(big)))
                .unwrap_err()
                .contains("at most")
        );
        assert_eq!(
            check_decision(Hook::Start, Decision::Fail("a\nb".into())),
            Ok(Decision::Fail("a b".into()))
        );
        assert_eq!(
            check_decision(Hook::Start, Decision::Fail(" ".into())),
            Ok(Decision::Fail("no reason given".into()))
        );
    }
}
