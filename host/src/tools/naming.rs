//! Names under which MCP tools are offered to the model.
//!
//! Rule: a tool keeps its own name (made valid for OpenAI: `[A-Za-z0-9_-]`, at most 64
//! characters, other characters become `_`) unless two servers offer the same name; then each
//! of the clashing tools is offered as `SERVER__TOOL`. A name still taken after that gets a
//! `_2`, `_3`, ... suffix. Names are assigned in server-name order, then the server's tool order,
//! so the same configuration always yields the same names.

use std::collections::{BTreeMap, BTreeSet};

/// Longest function name OpenAI accepts.
pub const MAX_NAME_LEN: usize = 64;

/// Separator between server and tool name in a prefixed name.
pub const PREFIX_SEPARATOR: &str = "__";

/// `name` with every character outside `[A-Za-z0-9_-]` replaced by `_`, cut to
/// [`MAX_NAME_LEN`]; `tool` when nothing is left.
pub fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_NAME_LEN)
        .collect();
    if s.is_empty() { "tool".to_string() } else { s }
}

/// Exposed names for `(server, tool)` pairs, in the order given; see the module doc.
pub fn exposed_names(pairs: &[(String, String)]) -> Vec<String> {
    let mut servers_per_name: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    for (server, tool) in pairs {
        servers_per_name
            .entry(sanitize(tool))
            .or_default()
            .insert(server);
    }
    let mut taken = BTreeSet::new();
    pairs
        .iter()
        .map(|(server, tool)| {
            let plain = sanitize(tool);
            let base = if servers_per_name[&plain].len() > 1 {
                sanitize(&format!("{server}{PREFIX_SEPARATOR}{tool}"))
            } else {
                plain
            };
            let mut name = base.clone();
            let mut n = 2;
            while taken.contains(&name) {
                let suffix = format!("_{n}");
                let keep = MAX_NAME_LEN.saturating_sub(suffix.len()).min(base.len());
                name = format!("{}{suffix}", &base[..keep]);
                n += 1;
            }
            taken.insert(name.clone());
            name
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(s, t)| (s.to_string(), t.to_string()))
            .collect()
    }

    #[test]
    fn names_stay_plain_without_clash() {
        let names = exposed_names(&pairs(&[("fs", "read_text_file"), ("git", "git_log")]));
        assert_eq!(names, ["read_text_file", "git_log"]);
    }

    #[test]
    fn clashing_names_get_the_server_prefix() {
        let names = exposed_names(&pairs(&[("a", "echo"), ("a", "add"), ("b", "echo")]));
        assert_eq!(names, ["a__echo", "add", "b__echo"]);
    }

    #[test]
    fn invalid_characters_and_long_names_are_fixed() {
        let long = "x".repeat(100);
        let names = exposed_names(&pairs(&[("s", "files.read"), ("s", &long), ("s", "")]));
        assert_eq!(names[0], "files_read");
        assert_eq!(names[1].len(), MAX_NAME_LEN);
        assert_eq!(names[2], "tool");
    }

    #[test]
    fn names_that_only_clash_after_sanitizing_get_a_suffix() {
        let names = exposed_names(&pairs(&[("s", "a.b"), ("s", "a_b")]));
        assert_eq!(names, ["a_b", "a_b_2"]);
    }
}
