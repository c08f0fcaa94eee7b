//! `llm.pricing`: prices per model, US dollars per million tokens, which turn a task's token
//! counters into money ([`Pricing::cost`]). Optional: a model without a price has no cost
//! (shown as "—"), nothing is guessed.
//!
//! ```yaml
//! llm:
//!   pricing:
//!     gpt-4o-mini: {input: 0.15, output: 0.60, cache_read: 0.075}
//!     claude-sonnet-4-5: {input: 3, output: 15, cache_read: 0.30, cache_write: 3.75}
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Invalid;

/// The price of one model, US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Input (prompt) tokens not read from or written to the prompt cache.
    pub input: f64,
    /// Output (completion) tokens, reasoning included.
    pub output: f64,
    /// Prompt tokens read from the provider's prompt cache (`None`: the input price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<f64>,
    /// Prompt tokens written to the provider's prompt cache (`None`: the input price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
}

/// The highest price `llm.pricing` accepts, US dollars per million tokens: far above any
/// model's, low enough that a cost stays a readable number.
pub const MAX_PRICE: f64 = 1_000_000.0;

/// `llm.pricing`: model name → [`ModelPrice`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct Pricing(pub BTreeMap<String, ModelPrice>);

impl Pricing {
    /// Whether no price is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The cost in US dollars of `input` prompt tokens (cache reads and writes included, as
    /// providers report them), `output` completion tokens, `cache_read` and `cache_write`
    /// prompt tokens of `model`; `None` when the model has no price.
    pub fn cost(
        &self,
        model: &str,
        input: u64,
        output: u64,
        cache_read: u64,
        cache_write: u64,
    ) -> Option<f64> {
        let p = self.0.get(model)?;
        let plain = input.saturating_sub(cache_read).saturating_sub(cache_write);
        let per = |n: u64, usd: f64| n as f64 * usd / 1e6;
        Some(
            per(plain, p.input)
                + per(output, p.output)
                + per(cache_read, p.cache_read.unwrap_or(p.input))
                + per(cache_write, p.cache_write.unwrap_or(p.input)),
        )
    }

    /// Check every price is a finite number in [0, [`MAX_PRICE`]]; the error names the key.
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        for (model, p) in &self.0 {
            for (what, v) in [
                ("input", Some(p.input)),
                ("output", Some(p.output)),
                ("cache_read", p.cache_read),
                ("cache_write", p.cache_write),
            ] {
                if let Some(v) = v
                    && !(v.is_finite() && (0.0..=MAX_PRICE).contains(&v))
                {
                    return Invalid::err(
                        &format!("llm.pricing.{model}.{what}"),
                        format!(
                            "must be a price from 0 to {MAX_PRICE} (US dollars per million tokens), got {}",
                            // 1e300, not its 301 digits.
                            if v.abs() >= 1e15 {
                                format!("{v:e}")
                            } else {
                                v.to_string()
                            }
                        ),
                    );
                }
            }
        }
        Ok(())
    }
}

/// A cost for people: `$0.0123` (4 decimals under a dollar, 2 above), `—` without one.
pub fn show_cost(usd: Option<f64>) -> String {
    match usd {
        None => "—".to_string(),
        Some(v) if v < 1.0 => format!("${v:.4}"),
        Some(v) => format!("${v:.2}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pricing() -> Pricing {
        serde_norway::from_str(
            "m: {input: 3, output: 15, cache_read: 0.3, cache_write: 3.75}\nplain: {input: 1, output: 2}",
        )
        .unwrap()
    }

    #[test]
    fn cost_splits_cached_prompt_tokens_out_of_the_input_price() {
        let p = pricing();
        // 1M prompt tokens of which 400k cache reads and 100k cache writes, 200k output.
        let c = p.cost("m", 1_000_000, 200_000, 400_000, 100_000).unwrap();
        let want = 0.5 * 3.0 + 0.2 * 15.0 + 0.4 * 0.3 + 0.1 * 3.75;
        assert!((c - want).abs() < 1e-9, "{c} != {want}");
        // Without cache prices the input price applies.
        let c = p.cost("plain", 1_000_000, 1_000_000, 500_000, 0).unwrap();
        assert!((c - 3.0).abs() < 1e-9, "{c}");
        assert_eq!(p.cost("unpriced", 10, 10, 0, 0), None);
        assert_eq!(show_cost(None), "—");
        assert_eq!(show_cost(Some(0.01234)), "$0.0123");
        assert_eq!(show_cost(Some(12.345)), "$12.35");
    }

    #[test]
    fn negative_or_unknown_fields_are_refused() {
        let bad: Pricing = serde_norway::from_str("m: {input: -1, output: 2}").unwrap();
        let e = bad.validate().unwrap_err();
        assert_eq!(e.key, "llm.pricing.m.input");
        assert!(serde_norway::from_str::<Pricing>("m: {input: 1, output: 2, cached: 1}").is_err());
    }
}
