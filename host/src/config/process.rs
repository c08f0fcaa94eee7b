//! `runtime`, `agent` and `worker`: limits of the component instances, of the agent loop, and
//! of the `ctxhost run` process.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Config, Invalid};

/// `runtime`: limits of every component instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    /// Linear memory limit per component instance, MiB (≥ 1).
    pub memory_limit_mib: u64,
    /// Wall-clock limit per component call, seconds (≥ 1).
    pub call_timeout_secs: u64,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            memory_limit_mib: 256,
            call_timeout_secs: 30,
        }
    }
}

/// `agent`: the agent loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// First message of every task's context.
    pub system_prompt: String,
    /// Most LLM calls one task may make (≥ 1); reaching it fails the task.
    pub max_steps: u32,
}

/// Default system prompt of a task.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a careful coding agent. You work on one task at a time: \
understand the request, inspect the relevant code with the tools you are given, make minimal and correct \
changes, and verify them. When you call a tool, wait for its result before continuing. If no tools are \
available, answer from your own knowledge. When the task is done, reply with a concise final answer that \
states what you did and the result, without calling a tool.";

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            system_prompt: DEFAULT_SYSTEM_PROMPT.to_string(),
            max_steps: 50,
        }
    }
}

/// `worker`: the `ctxhost run` process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerConfig {
    /// Task processes running at once (≥ 1).
    pub max_parallel_tasks: u32,
    /// How often the worker looks at the queue and its children, milliseconds (≥ 10).
    pub poll_interval_ms: u64,
    /// A task whose process dies this many times (crash, kill, power loss) is failed instead of
    /// being repaired and run again (≥ 1).
    pub max_crashes: u32,
    /// Length of a running task's lease, seconds (≥ 2): its process renews it every third of
    /// this; a task whose lease expired is taken over by any worker. A process that cannot
    /// renew its lease for 4/5 of it stops itself ([`crate::lease`]).
    pub lease_secs: u64,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            max_parallel_tasks: 2,
            poll_interval_ms: 500,
            max_crashes: 3,
            lease_secs: 30,
        }
    }
}

impl RuntimeConfig {
    /// Check value ranges; the error names the key.
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if self.memory_limit_mib < 1 {
            return Invalid::err("runtime.memory_limit_mib", "must be at least 1, got 0");
        }
        if self.memory_limit_mib > 4096 {
            return Invalid::err(
                "runtime.memory_limit_mib",
                format!(
                    "must be at most 4096 (a wasm32 memory), got {}",
                    self.memory_limit_mib
                ),
            );
        }
        if self.call_timeout_secs < 1 {
            return Invalid::err("runtime.call_timeout_secs", "must be at least 1, got 0");
        }
        Ok(())
    }
}

impl AgentConfig {
    /// Check value ranges; the error names the key.
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if self.system_prompt.trim().is_empty() {
            return Invalid::err("agent.system_prompt", "must not be empty");
        }
        if self.max_steps < 1 {
            return Invalid::err("agent.max_steps", "must be at least 1, got 0");
        }
        Ok(())
    }
}

impl WorkerConfig {
    /// Check value ranges; the error names the key.
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if self.max_parallel_tasks < 1 {
            return Invalid::err("worker.max_parallel_tasks", "must be at least 1, got 0");
        }
        if self.max_crashes < 1 {
            return Invalid::err("worker.max_crashes", "must be at least 1, got 0");
        }
        if self.lease_secs < 2 {
            return Invalid::err(
                "worker.lease_secs",
                format!("must be at least 2, got {}", self.lease_secs),
            );
        }
        if self.poll_interval_ms < 10 {
            return Invalid::err(
                "worker.poll_interval_ms",
                format!("must be at least 10, got {}", self.poll_interval_ms),
            );
        }
        Ok(())
    }
}

impl WorkerConfig {
    /// `lease_secs` as a duration.
    pub fn lease(&self) -> Duration {
        Duration::from_secs(self.lease_secs)
    }
}

impl Config {
    /// The limits of every component instance: memory and call timeout (`runtime`), the task
    /// directory's byte budget and the bounds of a compression (`context_storage`).
    pub fn runtime_limits(&self) -> crate::runtime::RuntimeLimits {
        let cs = &self.context_storage;
        crate::runtime::RuntimeLimits {
            memory_bytes: (self.runtime.memory_limit_mib as usize).saturating_mul(1024 * 1024),
            call_timeout: Duration::from_secs(self.runtime.call_timeout_secs),
            task_dir_bytes: Some(cs.max_task_dir_bytes()),
            files_per_call: Some(cs.max_files_per_call),
            llm_calls_per_call: cs.max_llm_calls_per_compression,
            wall_time_per_call: Duration::from_secs(cs.max_compression_secs),
        }
    }
}
