//! `init`: create the contexts/ tree and tasks.db; write a commented config.yaml if absent.

use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::layout::Layout;

/// What [`init`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Initialized {
    /// The config file.
    pub config_path: PathBuf,
    /// Whether it was written now (`false`: it existed and was kept).
    pub config_written: bool,
    /// The contexts/ directory.
    pub contexts: PathBuf,
    /// The task store: the SQLite file, or `postgres://user@host:port/dbname` (no password).
    pub database: String,
}

/// Create what is missing, keep what exists. A config.yaml written now gets its JSON Schema
/// in contexts/ ([`schema_place`]), named on its first line. An existing `config_path` is loaded (and so
/// validated) to find `context_storage.base_dir`; it is never overwritten (`llm` flags are
/// then a usage error: they would be silently ignored). `contexts` overrides that directory.
/// The contexts directory is created, never missing folders above it: a usage error naming it
/// and where it was set otherwise. The `llm` settings `llm` gives are written into the new
/// config ([`with_llm`]).
pub fn init(
    config_path: &Path,
    contexts: Option<&Path>,
    llm: &crate::config::llm_flags::LlmFlags,
) -> anyhow::Result<Initialized> {
    let existing = config_path.exists();
    if existing && llm.any() {
        return Err(crate::error::usage(format!(
            "{} exists and is kept as it is, so the --provider/--model/--base-url/--context-length/--api-key-env flags would be ignored: edit its `llm` section, or pass --config NEW.yaml",
            config_path.display()
        )));
    }
    let yaml = with_llm(&Config::default_yaml(), llm)?;
    let config = if existing {
        Config::load(config_path)?
    } else {
        Config::from_yaml(&yaml, &config_path.display().to_string())?
    };
    let root = contexts
        .map(Path::to_path_buf)
        .unwrap_or_else(|| config.context_storage.base_dir.clone());
    let layout = Layout::new(root);
    // Checked before anything is written.
    if let Some(why) = layout.creation_blocker() {
        return Err(crate::error::usage(format!(
            "{}: cannot create the contexts directory {}: {why}",
            crate::config::contexts_from(contexts.is_some(), config_path),
            layout.root().display()
        )));
    }
    layout.ensure()?;
    if !existing {
        if let Some(dir) = config_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        // The schema the config's first line names (editors read it offline), in contexts/.
        let (schema, named) = schema_place(config_path, layout.root())?;
        let yaml = yaml.replacen(
            &crate::config::schema::modeline(crate::config::schema::SCHEMA_FILE),
            &crate::config::schema::modeline(&named),
            1,
        );
        crate::layout::atomic_write(config_path, yaml.as_bytes())?;
        crate::layout::atomic_write(&schema, crate::config::schema::schema_text().as_bytes())?;
    }
    let db = super::open_store(&config, &layout)?;
    Ok(Initialized {
        config_path: config_path.to_path_buf(),
        config_written: !existing,
        contexts: layout.root().to_path_buf(),
        database: db.location().to_string(),
    })
}

/// Where `init` writes the JSON Schema of the config it writes at `config_path`, and how the
/// config's first line names it: `contexts/`[`SCHEMA_FILE`](crate::config::schema::SCHEMA_FILE)
/// (the contexts directory `contexts`, which exists), never beside a config.yaml in a project,
/// where the built-in tools' `list_files` and `search_files` would find it (they never see
/// contexts/). Named relative to the config's directory when contexts/ lies beneath it (the
/// default layout: `contexts/config.schema.json`), else by its absolute path; both are what
/// yaml-language-server's modeline takes. Errors: a directory that cannot be resolved.
pub fn schema_place(config_path: &Path, contexts: &Path) -> std::io::Result<(PathBuf, String)> {
    let file = contexts
        .canonicalize()?
        .join(crate::config::schema::SCHEMA_FILE);
    let dir = config_path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .canonicalize()?;
    let named = match file.strip_prefix(&dir) {
        Ok(rel) => rel.display().to_string(),
        Err(_) => file.display().to_string(),
    };
    Ok((file, named))
}

/// The commented default config `yaml` with the `llm` keys `flags` gives set in its `llm`
/// section (the commented lines of `base_url` and `api_key_env` uncommented; `--provider`
/// without `--model` writes that provider's default model); checked by
/// parsing it. Errors (usage): a value out of range, named by its key.
pub fn with_llm(yaml: &str, flags: &crate::config::llm_flags::LlmFlags) -> anyhow::Result<String> {
    if !flags.any() {
        return Ok(yaml.to_string());
    }
    // Strings are written as YAML (JSON) strings: quoted, escaped.
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
    let mut sets: Vec<(&str, String)> = Vec::new();
    if let Some(p) = flags.provider {
        sets.push(("provider", p.to_string()));
    }
    match (&flags.model, flags.provider) {
        (Some(m), _) => sets.push(("model", quote(m))),
        (None, Some(p)) => sets.push(("model", quote(p.default_model()))),
        (None, None) => {}
    }
    if let Some(u) = &flags.base_url {
        sets.push(("base_url", quote(u)));
    }
    if let Some(c) = flags.context_length {
        sets.push(("context_length", c.to_string()));
    }
    if let Some(v) = &flags.api_key_env {
        sets.push(("api_key_env", quote(v)));
    }
    let mut out = String::with_capacity(yaml.len() + 64);
    let mut in_llm = false;
    for line in yaml.lines() {
        if !line.starts_with(' ') && !line.is_empty() && !line.starts_with('#') {
            in_llm = line == "llm:";
        }
        let key = line
            .trim_start_matches("  # ")
            .trim_start_matches("  ")
            .split(':')
            .next()
            .unwrap_or("");
        let is_key_line = line.starts_with("  ") && !line.starts_with("   ") && line.contains(": ");
        match sets.iter().position(|(k, _)| *k == key) {
            Some(i) if in_llm && is_key_line => {
                let (k, v) = sets.remove(i);
                out.push_str(&format!("  {k}: {v}\n"));
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    if let Some((k, _)) = sets.first() {
        anyhow::bail!("the config template has no llm.{k} line to set");
    }
    Config::from_yaml(&out, crate::config::llm_flags::FLAGS)
        .map_err(|e| crate::error::usage(e.to_string()))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Provider;
    use crate::config::llm_flags::LlmFlags;

    #[test]
    fn a_provider_brings_its_default_model_and_the_thinking_example_is_valid() {
        for provider in Provider::ALL {
            let flags = LlmFlags {
                provider: Some(provider),
                ..LlmFlags::default()
            };
            let yaml = with_llm(&Config::default_yaml(), &flags).unwrap();
            let config = Config::from_yaml(&yaml, "c").unwrap();
            assert_eq!(config.llm.model, provider.default_model(), "{provider}");
            assert_ne!(
                provider != Provider::Openai,
                config.llm.model == "gpt-4o-mini",
                "{provider}"
            );
        }
        let flags = LlmFlags {
            provider: Some(Provider::Anthropic),
            ..LlmFlags::default()
        };
        let yaml = with_llm(&Config::default_yaml(), &flags).unwrap();
        assert!(
            yaml.contains("\n  model: \"claude-sonnet-4-5\"\n"),
            "{yaml}"
        );
        // The template's thinking example, uncommented as its comment says, is valid.
        let hint = "  # A budget needs max_output_tokens above it, e.g. max_output_tokens: 8192 with thinking: 4096.";
        assert!(yaml.contains(hint), "{yaml}");
        let edited = yaml
            .replace("  max_output_tokens: 1024\n", "  max_output_tokens: 8192\n")
            .replace("  context_length: 8192\n", "  context_length: 200000\n")
            .replace("  # thinking: 4096\n", "  thinking: 4096\n");
        let config = Config::from_yaml(&edited, "c").unwrap();
        assert_eq!(
            config.llm.thinking,
            Some(crate::config::Thinking::Budget(4096))
        );
        // --model wins over the provider's default.
        let flags = LlmFlags {
            provider: Some(Provider::Anthropic),
            model: Some("claude-opus-4-1".into()),
            ..LlmFlags::default()
        };
        let config =
            Config::from_yaml(&with_llm(&Config::default_yaml(), &flags).unwrap(), "c").unwrap();
        assert_eq!(config.llm.model, "claude-opus-4-1");
    }

    #[test]
    fn a_provider_flag_replaces_only_the_old_providers_default_model() {
        let mut c = Config::default();
        let flags = LlmFlags {
            provider: Some(Provider::Llamacpp),
            ..LlmFlags::default()
        };
        flags.apply(&mut c).unwrap();
        assert_eq!(c.llm.model, "local-model");
        let mut c = Config::default();
        c.llm.model = "qwen2.5-0.5b".into();
        flags.apply(&mut c).unwrap();
        assert_eq!(
            c.llm.model, "qwen2.5-0.5b",
            "a model the user chose is kept"
        );
    }
}
