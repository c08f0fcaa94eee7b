//! Summary ids (DESIGN.md §2): integers counting from 1 within a task, written as JSON numbers,
//! `id` in summaries.jsonl and `summary_id` in messages.jsonl (WIT `ctxhost:plugin`
//! `summary-info.id`). Used as `#[serde(deserialize_with = "summary_id::deserialize")]` on the
//! id fields of [`crate::SummaryLine`] and [`crate::HistoryLine`]: a string id is an error
//! naming it.

use std::fmt;
use std::io::{self, BufRead};

use serde::Deserialize;
use serde::de::{self, Deserializer, Unexpected, Visitor};
use serde_json::Value;

struct IdVisitor;

impl<'de> Visitor<'de> for IdVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a summary id: an integer from 1")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v).map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
    }
}

/// serde `deserialize_with` for a required id: a JSON number (an integer ≥ 0). Errors name
/// what was found, e.g. `invalid type: string "sum-3", expected a summary id: ...`.
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
/// found, and at least one more than the number of lines, so that a line whose id cannot be read
/// still holds a number. Blank lines are skipped; lines that are not JSON objects are counted
/// but otherwise ignored.
///
/// Errors: reading failed.
pub fn next_id<R: BufRead>(reader: R) -> io::Result<u64> {
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
        lines += 1;
        if let Some(n) = id.as_ref().and_then(Value::as_u64) {
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
    fn ids_are_numbers() {
        assert_eq!(
            parse(r#"{"id":3}"#).unwrap(),
            Line {
                id: 3,
                summary_id: None
            }
        );
        assert_eq!(
            parse(r#"{"id":1,"summary_id":12}"#).unwrap().summary_id,
            Some(12)
        );
        assert_eq!(
            parse(r#"{"id":7,"summary_id":null}"#).unwrap().summary_id,
            None
        );
    }

    #[test]
    fn anything_else_is_an_error_that_says_what_was_found() {
        for bad in [
            r#"{"id":"x"}"#,
            r#"{"id":"sum-3"}"#,
            r#"{"id":"3"}"#,
            r#"{"id":1,"summary_id":"sum-2"}"#,
            r#"{"id":-1}"#,
            r#"{"id":1.5}"#,
            r#"{"id":true}"#,
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("expected a summary id"), "{bad}: {e}");
        }
        assert!(
            parse(r#"{"id":"sum-3"}"#)
                .unwrap_err()
                .contains("string \"sum-3\"")
        );
    }

    #[test]
    fn next_id_counts_lines_and_takes_the_largest() {
        let next = |text: &str| next_id(text.as_bytes()).unwrap();
        assert_eq!(next(""), 1);
        assert_eq!(next("{\"id\":1}\n{\"id\":2}\n\n"), 3);
        assert_eq!(next("{\"id\":5}\n"), 6);
        // An unreadable id still holds its place.
        assert_eq!(next("{\"id\":\"a\"}\n{\"id\":\"b\"}\n"), 3);
        assert_eq!(next("not json\n"), 2);
    }
}
