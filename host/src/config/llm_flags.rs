//! `--provider`, `--model`, `--base-url`, `--context-length`, `--api-key-env`: the `llm`
//! settings of the config file (or of the defaults, with no file) replaced for one command
//! (`ask`, `submit`, `run`, and `init`, which writes them into the config it creates). The API
//! key itself still comes only from the environment: `--api-key-env` names the variable.

use clap::Args;
use clap::builder::TypedValueParser as _;

use crate::config::{Config, Provider};
use crate::error::usage;

/// The `llm` flags; see the module doc.
#[derive(Debug, Clone, Default, Args)]
pub struct LlmFlags {
    /// The LLM provider for this run (overrides llm.provider; a different provider also
    /// brings its own default base URL and API-key variable, unless those are given too).
    #[arg(long, value_name = "NAME", value_parser = provider_parser())]
    pub provider: Option<Provider>,
    /// The model (overrides llm.model).
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// The provider's base URL without the endpoint path, e.g. http://127.0.0.1:8089
    /// (overrides llm.base_url).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// The model's context window, tokens (overrides llm.context_length).
    #[arg(long, value_name = "TOKENS")]
    pub context_length: Option<u64>,
    /// The environment variable holding the API key ("" sends none; overrides
    /// llm.api_key_env). The key itself is never a flag.
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
}

/// The providers' names, for `--provider` (and shell completion).
fn provider_parser() -> impl clap::builder::TypedValueParser<Value = Provider> {
    clap::builder::PossibleValuesParser::new(Provider::ALL.map(Provider::as_str))
        .try_map(|s| s.parse::<Provider>())
}

/// Where a value set by these flags is named in errors.
pub const FLAGS: &str = "command-line flags";

impl LlmFlags {
    /// Whether any flag is given.
    pub fn any(&self) -> bool {
        self.provider.is_some()
            || self.model.is_some()
            || self.base_url.is_some()
            || self.context_length.is_some()
            || self.api_key_env.is_some()
    }

    /// Set the given values in `config.llm` and validate the result. A `--provider` other than
    /// the config's drops the config's base URL and API-key variable (the new provider's
    /// defaults apply) unless they are given too, and replaces the old provider's default model
    /// ([`Provider::default_model`]) with the new one's unless `--model` is given. Errors (usage): a value out of range, named
    /// by its config key (`command-line flags: llm.context_length: ...`).
    pub fn apply(&self, config: &mut Config) -> anyhow::Result<()> {
        if !self.any() {
            return Ok(());
        }
        let llm = &mut config.llm;
        if let Some(p) = self.provider
            && p != llm.provider
        {
            // The old provider's default model means nothing to the new one.
            if llm.model == llm.provider.default_model() {
                llm.model = p.default_model().to_string();
            }
            llm.provider = p;
            llm.base_url = None;
            llm.api_key_env = None;
        }
        if let Some(m) = &self.model {
            llm.model = m.clone();
        }
        if let Some(u) = &self.base_url {
            llm.base_url = Some(u.clone());
        }
        if let Some(c) = self.context_length {
            llm.context_length = c;
        }
        if let Some(v) = &self.api_key_env {
            llm.api_key_env = Some(v.clone());
        }
        config.validate(FLAGS).map_err(|e| {
            usage(format!(
                "{e} (check the --provider/--model/--base-url/--context-length/--api-key-env flags)"
            ))
        })
    }

    /// The flags as arguments again (for the task processes a command starts).
    pub fn to_args(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(p) = self.provider {
            out.extend(["--provider".to_string(), p.to_string()]);
        }
        if let Some(m) = &self.model {
            out.extend(["--model".to_string(), m.clone()]);
        }
        if let Some(u) = &self.base_url {
            out.extend(["--base-url".to_string(), u.clone()]);
        }
        if let Some(c) = self.context_length {
            out.extend(["--context-length".to_string(), c.to_string()]);
        }
        if let Some(v) = &self.api_key_env {
            out.push(format!("--api-key-env={v}"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_replace_the_config_and_a_new_provider_brings_its_defaults() {
        let mut c = Config::default();
        c.llm.base_url = Some("https://example.com".into());
        let flags = LlmFlags {
            provider: Some(Provider::Llamacpp),
            model: Some("qwen".into()),
            context_length: Some(4096),
            ..LlmFlags::default()
        };
        flags.apply(&mut c).unwrap();
        assert_eq!(c.llm.provider, Provider::Llamacpp);
        assert_eq!(c.llm.base_url, None);
        assert_eq!((c.llm.model.as_str(), c.llm.context_length), ("qwen", 4096));
        assert_eq!(
            flags.to_args(),
            [
                "--provider",
                "llamacpp",
                "--model",
                "qwen",
                "--context-length",
                "4096"
            ]
        );
        let bad = LlmFlags {
            context_length: Some(3),
            ..LlmFlags::default()
        };
        let e = bad.apply(&mut c).unwrap_err().to_string();
        assert!(e.contains("llm.context_length"), "{e}");
    }
}
