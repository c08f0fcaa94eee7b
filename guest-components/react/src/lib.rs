//! `builtin:react`: the default agent strategy (world `strategy-plugin`), ReAct's loop as the
//! host always ran it: call the model, make its tool calls, repeat until it answers without a
//! tool call; that answer is the task's result.
//!
//! Every hook only looks at its arguments: nothing is added to the context, no side call is
//! made and nothing is written, so the host never records a decision for it and asking a hook
//! again after a pause or crash gives the same answer.

use ctxhost_plugin::strategy::{Decision, Guest, StrategyConfig, TaskState, ToolOutcome};
use ctxhost_plugin::types::{ChatMessage, PluginError};

struct React;

impl Guest for React {
    /// Nothing to add before the first model call.
    fn start(_config: StrategyConfig, _state: TaskState) -> Result<Decision, PluginError> {
        Ok(Decision::Proceed(None))
    }

    /// A reply without tool calls is the final answer.
    fn after_reply(
        _config: StrategyConfig,
        _state: TaskState,
        _reply: ChatMessage,
    ) -> Result<Decision, PluginError> {
        Ok(Decision::Finish)
    }

    /// The model sees the tool results and goes on.
    fn after_tools(
        _config: StrategyConfig,
        _state: TaskState,
        _reply: ChatMessage,
        _outcomes: Vec<ToolOutcome>,
    ) -> Result<Decision, PluginError> {
        Ok(Decision::Proceed(None))
    }
}

ctxhost_plugin::export_strategy!(React);
