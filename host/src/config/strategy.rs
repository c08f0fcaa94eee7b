//! `strategy` and `context_inheritance`: the settings of the agent strategy
//! (`plugins.strategy`) and of starting a task from an earlier one with the same task key.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Config, Invalid};

/// `strategy`: settings of the agent strategy. The typed keys are `builtin:plan-execute`'s;
/// every strategy gets all of them, with `options` merged in, as one JSON object (WIT
/// `strategy-config.settings`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct StrategySection {
    /// Reflect on the plan after every this many model replies that called tools (and after
    /// every tool error); 0: only after a tool error.
    pub reflect_every: u32,
    /// Verifications before finishing: a failed one sends the model back to work while
    /// `agent.max_steps` leaves room; after this many the task finishes with its last answer
    /// (≥ 1).
    pub max_verifications: u32,
    /// Further keys for a third-party strategy (any YAML), passed on as JSON.
    pub options: BTreeMap<String, serde_json::Value>,
}

impl Default for StrategySection {
    fn default() -> Self {
        StrategySection {
            reflect_every: 5,
            max_verifications: 2,
            options: BTreeMap::new(),
        }
    }
}

impl StrategySection {
    /// Check value ranges; the error names the key.
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if self.max_verifications < 1 {
            return Invalid::err("strategy.max_verifications", "must be at least 1, got 0");
        }
        if self.reflect_every > 1000 {
            return Invalid::err(
                "strategy.reflect_every",
                format!("must be at most 1000, got {}", self.reflect_every),
            );
        }
        for key in self.options.keys() {
            if matches!(key.as_str(), "reflect_every" | "max_verifications") {
                return Invalid::err(
                    &format!("strategy.options.{key}"),
                    format!("set strategy.{key} instead"),
                );
            }
        }
        Ok(())
    }

    /// The settings as the JSON object a strategy gets: the typed keys, then `options`.
    pub fn settings_json(&self) -> String {
        let mut map = serde_json::Map::new();
        map.insert("reflect_every".into(), self.reflect_every.into());
        map.insert("max_verifications".into(), self.max_verifications.into());
        for (k, v) in &self.options {
            map.insert(k.clone(), v.clone());
        }
        serde_json::Value::Object(map).to_string()
    }
}

/// `context_inheritance`: a task submitted with the same task key as an earlier completed task
/// starts from that task's final state (final answer, last summary, latest plan).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ContextInheritance {
    /// Inherit at all (`submit --no-inherit` turns it off for one task).
    pub enabled: bool,
    /// Most tokens of inherited context (estimate); also at most a quarter of
    /// `llm.context_length` (≥ 100).
    pub max_inherited_tokens: u64,
    /// Only from tasks completed at most this many days ago (≥ 1).
    pub context_expiry_days: u32,
}

impl Default for ContextInheritance {
    fn default() -> Self {
        ContextInheritance {
            enabled: true,
            max_inherited_tokens: 8000,
            context_expiry_days: 90,
        }
    }
}

impl ContextInheritance {
    /// Check value ranges; the error names the key.
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if self.max_inherited_tokens < 100 {
            return Invalid::err(
                "context_inheritance.max_inherited_tokens",
                format!(
                    "must be at least 100, got {} (to turn inheritance off, set context_inheritance.enabled: false)",
                    self.max_inherited_tokens
                ),
            );
        }
        if self.context_expiry_days < 1 {
            return Invalid::err(
                "context_inheritance.context_expiry_days",
                "must be at least 1, got 0",
            );
        }
        Ok(())
    }
}

impl Config {
    /// Tokens a task may inherit: `context_inheritance.max_inherited_tokens`, at most a quarter
    /// of `llm.context_length` (the inherited context stays in the system prompt, which no
    /// compression removes).
    pub fn inherited_token_budget(&self) -> u64 {
        self.context_inheritance
            .max_inherited_tokens
            .min(self.llm.context_length / 4)
    }
}
