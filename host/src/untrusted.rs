//! What a component (or a provider) hands the host, made safe before the host uses it: the one
//! place where strings are bounded and escaped and returned paths and endpoint paths checked
//! (DESIGN.md §8).
//!
//! - [`text`]: every string from a component that reaches the database, a log line or an
//!   error (its `plugin-error` texts, log messages, stderr lines, trap frames, ids in messages)
//!   is cut at a character boundary to a byte bound, with the cut noted
//!   (`… [cut: 8192 of 52428800 bytes shown]`), and its control characters escaped (`\n`,
//!   `\u{1b}`, ...), so it can neither grow the database nor forge a log line.
//! - [`component_path`]: every path a component returns (the message store's
//!   `current-context-file`, a compressor's `context-file`, the `messages-file` of an `llm`
//!   call) must be a plain relative path inside the task directory: no `..`, not absolute,
//!   not through or onto a symbolic link.
//! - [`endpoint_path`]: the URL path a request format returns, appended to `llm.base_url`.

use std::borrow::Cow;
use std::path::{Component, Path};

use crate::task_dir::TaskDir;

/// Bound of a component's error text (`plugin-error`), bytes.
pub const MAX_ERROR_BYTES: usize = 8 * 1024;
/// Bound of one log line of a component (the `log` import, stderr, stdout), bytes.
pub const MAX_LOG_BYTES: usize = 16 * 1024;
/// Bound of a task's `error_message` in the database, bytes.
pub const MAX_DB_ERROR_BYTES: usize = 16 * 1024;
/// Bound of a short value quoted in a message (a file name, a tool call id), bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Longest path a component may return, bytes.
pub const MAX_PATH_BYTES: usize = 1024;
/// Longest endpoint path a request format may return, bytes.
pub const MAX_ENDPOINT_BYTES: usize = 2048;

/// Whether `c` must be escaped: ASCII and C1 control characters, the Unicode line and
/// paragraph separators, and the bidirectional overrides (which reorder what a terminal shows).
fn must_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
    }
}

/// `s` made safe for a log line, an error message or the database: control characters escaped
/// (`\n`, `\r`, `\t`, `\u{1b}`, ...) and the result cut at a character boundary so it holds at
/// most `max_bytes` bytes of `s`'s escaped text, followed by
/// ` … [cut: N of M bytes shown]` (M = `s.len()`) when cut. Borrowed when nothing changes.
pub fn text(s: &str, max_bytes: usize) -> Cow<'_, str> {
    if s.len() <= max_bytes && !s.chars().any(must_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len().min(max_bytes) + 48);
    let mut shown = 0usize;
    for c in s.chars() {
        let before = out.len();
        if must_escape(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
        if out.len() > max_bytes {
            out.truncate(before);
            out.push_str(&format!(" … [cut: {shown} of {} bytes shown]", s.len()));
            return Cow::Owned(out);
        }
        shown += c.len_utf8();
    }
    Cow::Owned(out)
}

/// `s` made safe to print on a terminal as lines: like [`text`] (escape sequences, NUL, the
/// line separators and bidirectional overrides escaped), but line breaks and tabs kept and
/// nothing cut. For what the CLI prints of LLM, tool and forge text (`ctxhost show`).
pub fn terminal(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c != '\n' && c != '\t' && must_escape(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if c != '\n' && c != '\t' && must_escape(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A value quoted in a message (a file name, an id): [`text`] with [`MAX_NAME_BYTES`].
pub fn name(s: &str) -> Cow<'_, str> {
    text(s, MAX_NAME_BYTES)
}

/// Why a path a component returned was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Not a plain relative path (empty, absolute, `.` or `..` components, control characters,
    /// too long).
    #[error(
        "`{shown}` is not a plain relative path inside the task directory (no `..`, not absolute, at most {MAX_PATH_BYTES} bytes); refused"
    )]
    NotPlain {
        /// The path as given, bounded and escaped.
        shown: String,
    },
    /// The path, or a folder on the way to it, is a symbolic link.
    #[error(
        "`{shown}` goes through the symbolic link `{link}` in the task directory; refused (the host never follows links there)"
    )]
    Symlink {
        /// The path as given, bounded and escaped.
        shown: String,
        /// The part of it that is a link.
        link: String,
    },
    /// Looking at the path failed.
    #[error("`{shown}`: {reason}")]
    Io {
        /// The path as given, bounded and escaped.
        shown: String,
        /// The I/O error.
        reason: String,
    },
}

/// Whether `path` is syntactically a plain relative path: non-empty, at most
/// [`MAX_PATH_BYTES`], only normal components (no root, `.`, `..`), no control characters.
pub fn is_plain_relative(path: &str) -> bool {
    !path.is_empty()
        && path.len() <= MAX_PATH_BYTES
        && !path.chars().any(must_escape)
        && !path.ends_with('/')
        && Path::new(path)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
        // `a//b` and `a/./b` are normalised away by `components`: refuse them too.
        && !path.contains("//")
        && !path.split('/').any(|p| p == ".")
}

/// The one check of a path a component returned: a plain relative path
/// ([`is_plain_relative`]) inside `dir`, not itself a symbolic link and not under one. The
/// file need not exist. Returns the path, unchanged.
pub fn component_path(dir: &TaskDir, path: &str) -> Result<String, PathError> {
    let shown = || name(path).into_owned();
    if !is_plain_relative(path) {
        return Err(PathError::NotPlain { shown: shown() });
    }
    let mut prefix = String::new();
    for part in path.split('/') {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(part);
        match dir.metadata(&prefix) {
            Ok(Some(m)) if m.is_symlink() => {
                return Err(PathError::Symlink {
                    shown: shown(),
                    link: name(&prefix).into_owned(),
                });
            }
            Ok(Some(_)) => {}
            // Nothing there: nothing below it either.
            Ok(None) => break,
            Err(e) => {
                return Err(PathError::Io {
                    shown: shown(),
                    reason: e.to_string(),
                });
            }
        }
    }
    Ok(path.to_string())
}

/// Check the endpoint path a request format returned (appended to `llm.base_url`): starts with
/// `/`, at most [`MAX_ENDPOINT_BYTES`], only the characters of a URL path and query (RFC 3986
/// `pchar`, `/`, `?`). Errors say why, with the value bounded and escaped.
pub fn endpoint_path(path: &str) -> Result<&str, String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=:@/%?".contains(c);
    if !path.starts_with('/') || path.len() > MAX_ENDPOINT_BYTES || !path.chars().all(ok_char) {
        return Err(format!(
            "endpoint path `{}` is not a URL path (it must start with `/`, use only URL path characters and be at most {MAX_ENDPOINT_BYTES} bytes); refused",
            name(path)
        ));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_keeps_lines_and_escapes_the_rest() {
        assert!(matches!(terminal("a\n\tb"), Cow::Borrowed("a\n\tb")));
        assert_eq!(
            terminal("red \u{1b}[31m\r\0 \u{2028}\u{202e}x\nnext"),
            "red \\u{1b}[31m\\r\\u{0} \\u{2028}\\u{202e}x\nnext"
        );
    }

    #[test]
    fn text_escapes_control_characters_and_cuts_on_a_char_boundary() {
        assert!(matches!(text("plain", 100), Cow::Borrowed("plain")));
        assert_eq!(
            text("a\nINFO forged\r\x1b[31m", 100),
            "a\\nINFO forged\\r\\u{1b}[31m"
        );
        assert_eq!(text("\u{202e}x\u{2028}", 100), "\\u{202e}x\\u{2028}");
        let long = "é".repeat(10); // 20 bytes
        let t = text(&long, 5);
        assert_eq!(t, "éé … [cut: 4 of 20 bytes shown]");
        let big = "x".repeat(50 * 1024 * 1024);
        let t = text(&big, MAX_ERROR_BYTES);
        assert!(t.len() < MAX_ERROR_BYTES + 64, "{}", t.len());
        assert!(
            t.ends_with(&format!("[cut: 8192 of {} bytes shown]", big.len())),
            "{}",
            &t[8000..]
        );
    }

    #[test]
    fn plain_relative_paths() {
        for ok in [
            "current.jsonl",
            "a/b.jsonl",
            "tool-results/3.txt",
            ".hidden",
        ] {
            assert!(is_plain_relative(ok), "{ok}");
        }
        for bad in [
            "",
            "..",
            "../x",
            "a/../../b",
            "/etc/passwd",
            "./x",
            "a/./b",
            "a//b",
            "a/",
            "x\ny",
            "x\u{0}",
        ] {
            assert!(!is_plain_relative(bad), "{bad:?}");
        }
        assert!(!is_plain_relative(&"a".repeat(MAX_PATH_BYTES + 1)));
    }

    #[test]
    fn component_paths_may_not_go_through_links() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        std::fs::create_dir(tmp.path().join("sub")).unwrap();
        std::os::unix::fs::symlink("/etc", tmp.path().join("etc")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", tmp.path().join("sub/p")).unwrap();
        assert_eq!(component_path(&dir, "new.jsonl").unwrap(), "new.jsonl");
        assert_eq!(
            component_path(&dir, "sub/new.jsonl").unwrap(),
            "sub/new.jsonl"
        );
        let e = component_path(&dir, "etc/passwd").unwrap_err();
        assert!(
            matches!(e, PathError::Symlink { ref link, .. } if link == "etc"),
            "{e}"
        );
        let e = component_path(&dir, "sub/p").unwrap_err().to_string();
        assert!(e.contains("symbolic link `sub/p`"), "{e}");
        let e = component_path(&dir, "../../x").unwrap_err().to_string();
        assert!(e.contains("`../../x` is not a plain relative path"), "{e}");
    }

    #[test]
    fn endpoint_paths() {
        assert_eq!(
            endpoint_path("/v1/chat/completions").unwrap(),
            "/v1/chat/completions"
        );
        assert!(endpoint_path("/api/chat?stream=false").is_ok());
        for bad in ["v1/chat", "/v1\nINFO forged", "/a b", "/x#y", ""] {
            let e = endpoint_path(bad).unwrap_err();
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
