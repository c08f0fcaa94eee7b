//! The integration and end-to-end tests of ctxhost: one test binary (as wasmtime's
//! `tests/all`), so the host and wasmtime are linked once instead of once per file.
//!
//! `cargo test -p ctxhost --test all` runs them; `cargo test -p ctxhost --test all -- lifecycle::`
//! runs one module. The real-LLM test is `#[ignore]`d unless asked for
//! (`-- --include-ignored`, as `.ci/run` does, with `CTXHOST_TEST_LLM_URL` set).
//!
//! - [`support`]: the fake LLM server, `TestEnv` (runs the binary), a task builder and JSONL readers.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

mod anthropic;
mod api;
mod api_clients;
mod ask;
mod big_reply;
mod builtin_tools;
mod cli;
mod compression;
mod conformance;
mod context_validity;
mod context_window;
mod crash_torture;
mod docs;
mod e2e_compression;
mod e2e_fake_llm;
mod e2e_real_llm;
mod inheritance;
mod jsonl_store;
mod layering;
mod lifecycle;
mod lifecycle_crash;
mod mcp_server;
mod mcp_tools;
mod metrics;
mod multi_host;
mod operators;
mod plugin_check;
mod plugin_interrupts;
mod plugin_scaffolds;
mod plugin_sdk;
mod plugin_select;
mod plugin_try;
mod provider_streams;
mod pull_requests;
mod reasoning;
mod recall;
mod remote_fencing;
mod remote_hosts;
mod remote_manifest;
mod request_snapshots;
mod request_write_path;
mod resume_checkpoints;
mod runtime_sandbox;
mod scripts;
mod security;
mod sources;
mod strategies;
mod stream_usage;
mod streaming;
mod telemetry;
mod tool_stops;
mod transport_faults;
mod uuid_prefix;
mod web;
mod web_browser;
mod wit_compat;
mod workspaces;
