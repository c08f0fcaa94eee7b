//! ctxhost: runs coding-agent tasks with file-based context and sandboxed WASI plugins.
pub mod agent;
pub mod cli;
pub mod compaction;
pub mod config;
pub mod db;
pub mod invariants;
pub mod layout;
pub mod llm;
pub mod plugin_check;
pub mod runtime;
pub mod task_process;
pub mod tools;
pub mod worker;
