//! `plugins`: which components implement the message store, compressor, request format and
//! agent strategy.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Config, Invalid};

/// `plugins`: which components implement the message store, compressor, request format and
/// agent strategy. Each is `builtin:NAME` or a path to a `.wasm` component file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PluginsConfig {
    /// The message store (`builtin:NAME` or a path).
    pub message_store: String,
    /// `none` disables compression.
    pub compressor: String,
    /// `None`: from the provider (ollama → `builtin:ollama-chat`, else `builtin:openai-chat`).
    pub request_format: Option<String>,
    /// The agent strategy: `builtin:react` (the default), `builtin:plan-execute` or a path.
    pub strategy: String,
}

/// The `plugins.compressor` value that disables compression.
pub const NO_COMPRESSOR: &str = "none";
/// The default `plugins.compressor`: an LLM summary of the older messages (DESIGN §6).
pub const DEFAULT_COMPRESSOR: &str = "builtin:llm-summarizer";
/// The default `plugins.strategy`: call the model, make its tool calls, repeat until it answers.
pub const DEFAULT_STRATEGY: &str = "builtin:react";

impl Default for PluginsConfig {
    fn default() -> Self {
        PluginsConfig {
            message_store: "builtin:jsonl-store".to_string(),
            compressor: DEFAULT_COMPRESSOR.to_string(),
            request_format: None,
            strategy: DEFAULT_STRATEGY.to_string(),
        }
    }
}

impl PluginsConfig {
    /// Check that every spec is `none` (compressor only), `builtin:NAME` or a path; the error
    /// names the key.
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if self.message_store.trim().is_empty() {
            return Invalid::err(
                "plugins.message_store",
                "must be `builtin:NAME` or a path to a .wasm file",
            );
        }
        if self.compressor.trim().is_empty() {
            return Invalid::err(
                "plugins.compressor",
                "must be `none`, `builtin:NAME` or a path to a .wasm file",
            );
        }
        if self.strategy.trim().is_empty() {
            return Invalid::err(
                "plugins.strategy",
                "must be `builtin:react`, `builtin:plan-execute` or a path to a .wasm file",
            );
        }
        // `none` is a path to nothing ("component none: file not found"): only the compressor
        // can be switched off.
        for (key, spec) in [
            ("plugins.message_store", Some(self.message_store.as_str())),
            ("plugins.request_format", self.request_format.as_deref()),
            ("plugins.strategy", Some(self.strategy.as_str())),
        ] {
            if spec.map(str::trim) == Some(NO_COMPRESSOR) {
                return Invalid::err(
                    key,
                    "cannot be `none` (only plugins.compressor can be switched off)",
                );
            }
        }
        if let Some(f) = &self.request_format
            && f.trim().is_empty()
        {
            return Invalid::err(
                "plugins.request_format",
                "must be `builtin:NAME` or a path to a .wasm file",
            );
        }
        for (key, spec) in [
            ("plugins.message_store", Some(self.message_store.as_str())),
            ("plugins.compressor", Some(self.compressor.as_str())),
            ("plugins.request_format", self.request_format.as_deref()),
            ("plugins.strategy", Some(self.strategy.as_str())),
        ] {
            if let Some(name) = spec.and_then(|s| s.strip_prefix("builtin:"))
                && (name.is_empty()
                    || !name
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
            {
                return Invalid::err(
                    key,
                    format!("builtin name must be lowercase letters, digits and -, got `{name}`"),
                );
            }
        }
        Ok(())
    }
}

impl PluginsConfig {
    /// Relative `.wasm` paths made relative to `dir` (the config file's directory), so a
    /// config names its plugins the same way whatever the current directory; `builtin:NAME`,
    /// `none` and absolute paths are left as they are.
    pub fn resolve_paths(&mut self, dir: &Path) {
        let resolve = |spec: &mut String| {
            let is_path = !spec.starts_with("builtin:") && spec.trim() != NO_COMPRESSOR;
            if is_path && Path::new(spec.as_str()).is_relative() {
                *spec = dir.join(spec.as_str()).display().to_string();
            }
        };
        resolve(&mut self.message_store);
        resolve(&mut self.compressor);
        if let Some(f) = self.request_format.as_mut() {
            resolve(f);
        }
    }
}

impl Config {
    /// This config, read from the file `path`, with its plugin paths resolved against the
    /// file's directory ([`PluginsConfig::resolve_paths`]).
    pub(super) fn relative_to(mut self, path: &Path) -> Config {
        self.loaded_from = Some(path.to_path_buf());
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            self.plugins.resolve_paths(dir);
            if let Some(w) = self.workspace.as_mut().filter(|w| w.is_relative()) {
                *w = dir.join(&*w);
            }
        }
        self
    }

    /// The request format plugin spec in effect (config or provider default).
    pub fn request_format(&self) -> &str {
        self.plugins
            .request_format
            .as_deref()
            .unwrap_or(self.llm.provider.default_request_format())
    }

    /// The compressor plugin spec, or `None` when compression is disabled (`none`).
    pub fn compressor(&self) -> Option<&str> {
        let c = self.plugins.compressor.trim();
        (c != NO_COMPRESSOR).then_some(c)
    }
}
