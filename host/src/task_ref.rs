//! How a user names a task on the command line: its whole UUID
//! (`0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b`) or a prefix of it that only one task has (`0193a4b2`,
//! as git and docker take short ids).
//!
//! [`TaskRef::parse`] validates the text before anything is looked up: a prefix is at least
//! [`MIN_PREFIX_DIGITS`] hexadecimal digits, with hyphens (if any) where a UUID has them, so
//! only `0-9a-f` and `-` ever reach a query (never a `LIKE` wildcard). [`TaskRef::resolve`]
//! finds the one task it names in the task store ([`Db::tasks_with_uuid_prefix`], one query
//! on both backends). Every error is a usage error (exit 2) naming what was given.

use std::fmt;

use crate::db::{Db, TaskRow};
use crate::error::usage;
use crate::layout::parse_uuid;

/// The fewest hexadecimal digits a UUID prefix may have.
pub const MIN_PREFIX_DIGITS: usize = 4;

/// At most this many matching tasks are listed when a prefix is ambiguous.
pub const MAX_LISTED: usize = 10;

/// Hexadecimal digits in a UUID (its simple form, without hyphens).
const UUID_DIGITS: usize = 32;

/// Where the hyphens of a UUID's canonical form are (character offsets).
const HYPHENS: [usize; 4] = [8, 13, 18, 23];

/// What the user gave to name a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskRef {
    /// A whole UUID, canonical (hyphenated, lowercase): looked up exactly.
    Uuid(String),
    /// The start of a UUID (fewer than 32 digits).
    Prefix(UuidPrefix),
}

/// The start of a task UUID in canonical form: lowercase hexadecimal digits, with hyphens where
/// the canonical form has them (`0193a4b2-1c` for `0193a4b21c` or `0193A4B2-1C`), at least
/// [`MIN_PREFIX_DIGITS`] digits and fewer than a whole UUID's. Only [`TaskRef::parse`] makes
/// one, so its text is always safe in a `LIKE` pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UuidPrefix(String);

impl UuidPrefix {
    /// The prefix, in canonical form.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The SQL `LIKE` pattern matching the UUIDs that start with it (`0193a4b2%`), to pass as a
    /// parameter.
    pub fn like_pattern(&self) -> String {
        format!("{}%", self.0)
    }
}

impl fmt::Display for UuidPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TaskRef {
    /// Parse what the user gave (surrounding whitespace ignored): a whole UUID (canonical form,
    /// any case; or its 32 digits without hyphens), or a prefix of one with at least
    /// [`MIN_PREFIX_DIGITS`] hexadecimal digits, written with its hyphens in place
    /// (`0193a4b2-1c3d`) or without any (`0193a4b21c3d`).
    ///
    /// Errors (usage, exit 2): `` `TEXT` is not a task UUID or UUID prefix: WHY `` for a
    /// character that is neither a hexadecimal digit nor a hyphen where a UUID has one, or
    /// text longer than a UUID; `` `TEXT` is too short for a task UUID prefix `` for fewer
    /// than [`MIN_PREFIX_DIGITS`] digits.
    pub fn parse(given: &str) -> anyhow::Result<TaskRef> {
        let text = given.trim();
        // Quoted in errors: escaped (no terminal control, no forged line) and bounded.
        let shown = crate::untrusted::name(text);
        let given = shown.as_ref();
        if let Ok(uuid) = parse_uuid(text) {
            return Ok(TaskRef::Uuid(uuid));
        }
        let not_one = |why: String| {
            usage(format!(
                "`{given}` is not a task UUID or UUID prefix: {why} (expected at least \
                 {MIN_PREFIX_DIGITS} hexadecimal digits of one, as in 0193a4b2, or a whole UUID, \
                 as in 01234567-89ab-cdef-0123-456789abcdef)"
            ))
        };
        let hyphenated = text.contains('-');
        let mut canonical = String::with_capacity(36);
        let mut digits = 0;
        for (i, c) in text.chars().enumerate() {
            if c == '-' {
                if !HYPHENS.contains(&i) {
                    return Err(not_one(format!(
                        "a hyphen at character {} (a UUID has them after 8, 12, 16 and 20 digits)",
                        i + 1
                    )));
                }
                canonical.push('-');
                continue;
            }
            if !c.is_ascii_hexdigit() {
                return Err(not_one(format!(
                    "{c:?} at character {} is not a hexadecimal digit",
                    i + 1
                )));
            }
            if hyphenated && HYPHENS.contains(&i) {
                return Err(not_one(format!(
                    "{c:?} at character {} where a UUID has a hyphen",
                    i + 1
                )));
            }
            if digits == UUID_DIGITS {
                return Err(not_one(format!("more than {UUID_DIGITS} digits")));
            }
            if !hyphenated && [8, 12, 16, 20].contains(&digits) {
                canonical.push('-');
            }
            canonical.push(c.to_ascii_lowercase());
            digits += 1;
        }
        if digits < MIN_PREFIX_DIGITS {
            return Err(usage(format!(
                "`{given}` is too short for a task UUID prefix: give at least {MIN_PREFIX_DIGITS} \
                 hexadecimal digits (it has {digits})"
            )));
        }
        if digits == UUID_DIGITS {
            // The 32 digits without hyphens (a hyphenated whole UUID was parsed above).
            return Ok(TaskRef::Uuid(parse_uuid(&canonical)?));
        }
        Ok(TaskRef::Prefix(UuidPrefix(canonical)))
    }

    /// The one task this names in `db`: the row of the whole UUID, or of the only task whose
    /// UUID starts with the prefix.
    ///
    /// Errors (usage, exit 2): `no task with UUID U in STORE`; `no task with UUID prefix P in
    /// STORE`; `UUID prefix P is ambiguous: ...` listing the matching tasks (UUID and status,
    /// at most [`MAX_LISTED`], by UUID). Errors of the store itself are passed on.
    pub fn resolve(&self, db: &Db) -> anyhow::Result<TaskRow> {
        let prefix = match self {
            TaskRef::Uuid(uuid) => {
                return db.get(uuid)?.ok_or_else(|| {
                    usage(format!("no task with UUID {uuid} in {}", db.location()))
                });
            }
            TaskRef::Prefix(p) => p,
        };
        let limit = u32::try_from(MAX_LISTED + 1).unwrap_or(u32::MAX);
        let mut rows = db.tasks_with_uuid_prefix(prefix, limit)?;
        match rows.len() {
            0 => Err(usage(format!(
                "no task with UUID prefix {prefix} in {}",
                db.location()
            ))),
            1 => Ok(rows.remove(0)),
            n => {
                let how_many = if n > MAX_LISTED {
                    format!("more than {MAX_LISTED} tasks (the first {MAX_LISTED} listed)")
                } else {
                    format!("{n} tasks")
                };
                let list: Vec<String> = rows
                    .iter()
                    .take(MAX_LISTED)
                    .map(|r| format!("  {}  {}", r.uuid, r.status))
                    .collect();
                Err(usage(format!(
                    "UUID prefix {prefix} is ambiguous: it matches {how_many} in {}; give more of \
                     the UUID:\n{}",
                    db.location(),
                    list.join("\n")
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(s: &str) -> String {
        match TaskRef::parse(s).unwrap() {
            TaskRef::Prefix(p) => p.as_str().to_string(),
            other => panic!("{s}: {other:?}"),
        }
    }

    fn error(s: &str) -> String {
        let e = TaskRef::parse(s).unwrap_err();
        assert!(
            e.downcast_ref::<crate::error::UsageError>().is_some(),
            "{e}"
        );
        e.to_string()
    }

    #[test]
    fn whole_uuids_are_looked_up_exactly_in_canonical_form() {
        let u = "0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b";
        for given in [
            u,
            " 0193A4B2-1C3D-7E8F-9A0B-1C2D3E4F5A6B\n",
            "0193a4b21c3d7e8f9a0b1c2d3e4f5a6b",
        ] {
            assert_eq!(
                TaskRef::parse(given).unwrap(),
                TaskRef::Uuid(u.to_string()),
                "{given}"
            );
        }
    }

    #[test]
    fn prefixes_are_canonical_with_or_without_hyphens() {
        assert_eq!(prefix("0193"), "0193");
        assert_eq!(prefix("0193A4B2"), "0193a4b2");
        assert_eq!(prefix("0193a4b2-"), "0193a4b2-");
        assert_eq!(prefix("0193a4b2-1c"), "0193a4b2-1c");
        assert_eq!(prefix("0193a4b21c"), "0193a4b2-1c");
        assert_eq!(prefix("0193a4b21c3d7e8f9"), "0193a4b2-1c3d-7e8f-9");
        assert_eq!(
            prefix("0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6"),
            "0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6"
        );
        let p = UuidPrefix("0193a4b2".into());
        assert_eq!(p.like_pattern(), "0193a4b2%");
    }

    #[test]
    fn short_and_invalid_prefixes_are_refused_saying_why() {
        for short in ["", "   ", "019", "0a1"] {
            let e = error(short);
            assert!(
                e.contains("is too short for a task UUID prefix"),
                "{short}: {e}"
            );
            assert!(e.contains("at least 4 hexadecimal digits"), "{e}");
        }
        for (bad, why) in [
            ("0193%", "'%' at character 5 is not a hexadecimal digit"),
            ("01_3a", "'_' at character 3 is not a hexadecimal digit"),
            ("zz12", "'z' at character 1 is not a hexadecimal digit"),
            (
                "0193a4b2'--",
                "'\\'' at character 9 is not a hexadecimal digit",
            ),
            ("../../etc/passwd", "'.' at character 1"),
            ("0193-a4b2", "a hyphen at character 5"),
            (
                "0193a4b2-1c3d7",
                "'7' at character 14 where a UUID has a hyphen",
            ),
            (
                "0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b/..",
                "'/' at character 37",
            ),
            ("0193a4b21c3d7e8f9a0b1c2d3e4f5a6b0", "more than 32 digits"),
        ] {
            let e = error(bad);
            assert!(
                e.contains("is not a task UUID or UUID prefix"),
                "{bad}: {e}"
            );
            assert!(e.contains(why), "{bad}: {e}");
            assert!(e.contains(&format!("`{bad}`")), "{bad}: {e}");
        }
        // What the user typed is quoted escaped and bounded: no terminal control sequence, no
        // line that could pass for another error, no 100 KB message.
        for hostile in [
            "\u{1b}[31m0193".to_string(),
            "0193\nerror: forged".to_string(),
            "a".repeat(100_000),
        ] {
            let e = error(&hostile);
            assert!(
                !e.contains('\u{1b}') && !e.contains('\n') && e.len() < 2_000,
                "{e:.300}"
            );
        }
    }
}
