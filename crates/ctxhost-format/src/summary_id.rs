//! Summary ids (DESIGN.md §2): integers counting from 1 within a task, written as JSON numbers,
//! `id` in summaries.jsonl and `summary_id` in messages.jsonl (WIT `ctxhost:plugin@0.2.0`).
//!
//! ctxhost 0.1 (WIT 0.1.0) wrote them as strings `"sum-N"`. Readers accept both forms and
//! writers write numbers ("read both, write the spec's form"); `ctxhost fsck --repair` rewrites
//! old task directories. Used as `#[serde(deserialize_with = "summary_id::deserialize")]` on the
//! id fields of [`crate::SummaryLine`] and [`crate::HistoryLine`].

use std::fmt;
use std::io::{self, BufRead};

use serde::Deserialize;
use serde::de::{self, Deserializer, Unexpected, Visitor};
use serde_json::Value;

/// Prefix of the string ids ctxhost 0.1 wrote (`sum-3`).
pub const LEGACY_PREFIX: &str = "sum-";

/// The integer an old string id stands for: `"sum-N"` or `"N"` with N ≥ 1 (decimal digits only);
/// `None` for anything else.
pub fn parse_legacy(text: &str) -> Option<u64> {
    let digits = text.strip_prefix(LEGACY_PREFIX).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|&n| n >= 1)
}

/// An id as found on disk, for tools that must tell the forms apart (fsck): the spec's number,
/// an old string that maps to a number, or a string that does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnDisk {
    /// A JSON number (the spec's form).
    Number(u64),
    /// An old string id and the number it stands for (`"sum-3"` → 3).
    Legacy(String, u64),
    /// A string that is no id this crate can read (e.g. a 0.1.0 plugin's own scheme).
    Unreadable(String),
}

impl OnDisk {
    /// Classify a JSON value found where an id belongs; `None` when it is neither a
    /// non-negative integer nor a string.
    pub fn classify(value: &Value) -> Option<OnDisk> {
        match value {
            Value::Number(n) => n.as_u64().map(OnDisk::Number),
            Value::String(s) => Some(match parse_legacy(s) {
                Some(n) => OnDisk::Legacy(s.clone(), n),
                None => OnDisk::Unreadable(s.clone()),
            }),
            _ => None,
        }
    }
}

struct IdVisitor;

impl<'de> Visitor<'de> for IdVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a summary id: an integer from 1, or the old string form \"sum-N\"")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v).map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        parse_legacy(v).ok_or_else(|| E::invalid_value(Unexpected::Str(v), &self))
    }
}

/// serde `deserialize_with` for a required id: a JSON number, or an old string `"sum-N"`/`"N"`.
/// Errors name what was found, e.g. `invalid value: string "x", expected a summary id: ...`.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    deserializer.deserialize_any(IdVisitor)
}

/// serde `deserialize_with` for an optional id (use with `#[serde(default)]`): absent or `null`
/// is `None`, otherwise as [`deserialize`].
pub fn deserialize_opt<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    struct Id(#[serde(deserialize_with = "deserialize")] u64);
    Ok(Option::<Id>::deserialize(deserializer)?.map(|Id(n)| n))
}

/// The next free summary id of a task, from its summaries.jsonl: one more than the largest id
/// found (either form), and at least one more than the number of lines, so that a line whose id
/// cannot be read still holds a number. Lines whose `id` is the string `skip` are left out (a
/// WIT 0.1.0 compressor's own, just-appended line, whose id is being chosen). Blank lines and
/// lines that are not JSON objects are counted but otherwise ignored.
///
/// Errors: reading failed.
pub fn next_id<R: BufRead>(reader: R, skip: Option<&str>) -> io::Result<u64> {
    #[derive(Deserialize)]
    struct IdOnly {
        #[serde(default)]
        id: Option<Value>,
    }
    let (mut lines, mut largest) = (0u64, 0u64);
    for line in reader.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let id = serde_json::from_str::<IdOnly>(&line)
            .ok()
            .and_then(|l| l.id);
        if let (Some(skip), Some(Value::String(s))) = (skip, &id)
            && s == skip
        {
            continue;
        }
        lines += 1;
        if let Some(OnDisk::Number(n) | OnDisk::Legacy(_, n)) =
            id.as_ref().and_then(OnDisk::classify)
        {
            largest = largest.max(n);
        }
    }
    Ok(largest.max(lines) + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize, Debug, PartialEq)]
    struct Line {
        #[serde(deserialize_with = "deserialize")]
        id: u64,
        #[serde(default, deserialize_with = "deserialize_opt")]
        summary_id: Option<u64>,
    }

    fn parse(s: &str) -> Result<Line, String> {
        serde_json::from_str(s).map_err(|e| e.to_string())
    }

    #[test]
    fn both_forms_read_the_same() {
        assert_eq!(
            parse(r#"{"id":3}"#).unwrap(),
            Line {
                id: 3,
                summary_id: None
            }
        );
        assert_eq!(
            parse(r#"{"id":"sum-3","summary_id":"sum-2"}"#).unwrap(),
            Line {
                id: 3,
                summary_id: Some(2)
            }
        );
        assert_eq!(
            parse(r#"{"id":"7","summary_id":null}"#).unwrap(),
            Line {
                id: 7,
                summary_id: None
            }
        );
        assert_eq!(
            parse(r#"{"id":1,"summary_id":12}"#).unwrap().summary_id,
            Some(12)
        );
    }

    #[test]
    fn other_strings_are_errors_that_say_what_was_found() {
        for bad in [
            r#"{"id":"x"}"#,
            r#"{"id":"sum-"}"#,
            r#"{"id":"sum-0"}"#,
            r#"{"id":"sum--1"}"#,
            r#"{"id":-1}"#,
            r#"{"id":1.5}"#,
            r#"{"id":true}"#,
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("expected a summary id"), "{bad}: {e}");
        }
        assert!(parse(r#"{"id":"x"}"#).unwrap_err().contains("string \"x\""));
    }

    #[test]
    fn legacy_forms() {
        assert_eq!(parse_legacy("sum-1"), Some(1));
        assert_eq!(parse_legacy("sum-42"), Some(42));
        assert_eq!(parse_legacy("42"), Some(42));
        for bad in [
            "", "sum-", "sum-0", "0", "sum-+1", "sum-1a", "sum 1", "SUM-1", "s-1",
        ] {
            assert_eq!(parse_legacy(bad), None, "{bad}");
        }
        assert_eq!(OnDisk::classify(&Value::from(4)), Some(OnDisk::Number(4)));
        assert_eq!(
            OnDisk::classify(&Value::from("sum-4")),
            Some(OnDisk::Legacy("sum-4".into(), 4))
        );
        assert_eq!(
            OnDisk::classify(&Value::from("x")),
            Some(OnDisk::Unreadable("x".into()))
        );
        assert_eq!(OnDisk::classify(&Value::Null), None);
    }

    #[test]
    fn next_id_counts_lines_and_takes_the_largest() {
        let next = |text: &str, skip| next_id(text.as_bytes(), skip).unwrap();
        assert_eq!(next("", None), 1);
        assert_eq!(next("{\"id\":1}\n{\"id\":\"sum-2\"}\n\n", None), 3);
        assert_eq!(next("{\"id\":5}\n", None), 6);
        // An unreadable id still holds its place.
        assert_eq!(next("{\"id\":\"a\"}\n{\"id\":\"b\"}\n", None), 3);
        assert_eq!(next("{\"id\":1}\n{\"id\":\"mine\"}\n", Some("mine")), 2);
        assert_eq!(next("not json\n", None), 2);
    }
}
