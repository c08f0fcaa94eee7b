//! A task file's value against its schema in docs/schemas/, as fsck words a mismatch (used for
//! the files and the checkpoints alike).

use crate::schemas::{self, Schema};

/// `does not match <schema>: <what>` for a value that does not match `schema`.
pub(crate) fn schema_mismatch(schema: Schema, value: &serde_json::Value) -> Option<String> {
    match schema.validate(value) {
        Ok(m) if m.is_empty() => None,
        Ok(m) => {
            let sep = if m.iter().any(|x| x.kind.is_some()) {
                " "
            } else {
                ": "
            };
            Some(format!(
                "does not match docs/schemas/{schema}{sep}{}",
                schemas::describe(&m, MAX_MISMATCHES)
            ))
        }
        Err(e) => Some(e.to_string()),
    }
}

/// Mismatches named per line (the rest are counted).
const MAX_MISMATCHES: usize = 5;
