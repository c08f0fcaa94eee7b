//! The bound on span attribute values: every string value (and each string of an array value)
//! of a span's attributes, its events' and links' attributes, and its error description is
//! cut to at most [`value_length_limit`] characters before export, so one huge value (a
//! 2 MiB tool result with content capture on, a reply's finish reason) cannot make the
//! collector refuse the whole batch it is in.
//!
//! The limit is OTel's: `OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT`, else
//! `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT` (characters), else [`DEFAULT_VALUE_LENGTH_LIMIT`].

use std::borrow::Cow;

use opentelemetry::{Array, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::SpanData;

/// Characters an attribute value keeps when no variable says otherwise (OTel sets no limit by
/// default; a collector's request limit is a few MiB, shared by a whole batch).
pub const DEFAULT_VALUE_LENGTH_LIMIT: usize = 4096;

/// The limit the variables set (module doc); a value that is not a number is warned about and
/// the default kept.
pub fn value_length_limit() -> usize {
    for name in [
        "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT",
        "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    ] {
        let Ok(v) = std::env::var(name) else {
            continue;
        };
        match v.trim().parse::<usize>() {
            Ok(n) => return n,
            Err(_) => tracing::warn!(
                "{name}={v:?} is not a number of characters: attribute values are cut to {DEFAULT_VALUE_LENGTH_LIMIT}"
            ),
        }
    }
    DEFAULT_VALUE_LENGTH_LIMIT
}

/// `s` cut to at most `limit` characters, when longer.
fn cut(s: &str, limit: usize) -> Option<String> {
    let (at, _) = s.char_indices().nth(limit)?;
    Some(s[..at].to_string())
}

fn bound_value(v: &mut Value, limit: usize) {
    match v {
        Value::String(s) => {
            if let Some(c) = cut(s.as_str(), limit) {
                *s = StringValue::from(c);
            }
        }
        Value::Array(Array::String(items)) => {
            for s in items {
                if let Some(c) = cut(s.as_str(), limit) {
                    *s = StringValue::from(c);
                }
            }
        }
        _ => {}
    }
}

fn bound_all(attributes: &mut [KeyValue], limit: usize) {
    for kv in attributes {
        bound_value(&mut kv.value, limit);
    }
}

/// Cut every string value of `span` to `limit` characters (module doc).
pub fn bound_span(span: &mut SpanData, limit: usize) {
    bound_all(&mut span.attributes, limit);
    for e in &mut span.events.events {
        bound_all(&mut e.attributes, limit);
    }
    for l in &mut span.links.links {
        bound_all(&mut l.attributes, limit);
    }
    if let opentelemetry::trace::Status::Error { description } = &mut span.status
        && let Some(c) = cut(description, limit)
    {
        *description = Cow::Owned(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_cut_at_a_character_boundary_and_short_ones_kept() {
        assert_eq!(cut("héllo", 2).as_deref(), Some("hé"));
        assert_eq!(cut("héllo", 5), None);
        let mut v = Value::String("ab".repeat(3000).into());
        bound_value(&mut v, 4096);
        assert_eq!(v.as_str().chars().count(), 4096);
        let mut a = Value::Array(Array::String(vec!["xyz".into(), "x".into()]));
        bound_value(&mut a, 2);
        assert_eq!(
            a,
            Value::Array(Array::String(vec!["xy".into(), "x".into()]))
        );
        let mut n = Value::I64(123456);
        bound_value(&mut n, 2);
        assert_eq!(n, Value::I64(123456));
    }
}
