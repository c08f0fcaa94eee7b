//! Secrets out of everything the host keeps or prints of a provider exchange: the API key in
//! any text ([`redact`]) and in a response body as it is streamed to disk ([`Redactor`]),
//! whatever the HTTP status; the credentials of a URL ([`url_without_credentials`]).
//!
//! Policy for short keys: a secret shorter than [`MIN_REDACTED_SECRET_BYTES`] is not redacted
//! ([`is_redactable`]). Replacing it inside other text would mangle ordinary words (a key `x`
//! turns `max_retries` into `ma[redacted]_retries`) and so tell every reader the key; no real
//! provider key is that short, while local servers take dummy keys. `ctxhost run` warns once
//! at start when the configured key is that short ([`short_key_warning`]).

use std::borrow::Cow;
use std::io::{self, Write};

/// What replaces the API key.
pub const REDACTED: &str = "[redacted]";

/// Shortest secret that is redacted, bytes: a shorter one is treated as a placeholder (module
/// doc).
pub const MIN_REDACTED_SECRET_BYTES: usize = 8;

/// Whether `secret` is long enough to be redacted ([`MIN_REDACTED_SECRET_BYTES`]).
pub fn is_redactable(secret: &str) -> bool {
    secret.len() >= MIN_REDACTED_SECRET_BYTES
}

/// The warning `ctxhost run` logs once at start for an API key (read from the variable `var`)
/// that is too short to be redacted; `None` for a key that is redacted. Never quotes the key.
pub fn short_key_warning(var: &str, key: &str) -> Option<String> {
    (!is_redactable(key)).then(|| {
        format!(
            "llm.api_key_env: the API key in {var} is shorter than {MIN_REDACTED_SECRET_BYTES} bytes: too short to be \
             protected, so it is treated as a placeholder (as local servers take dummy keys) and not redacted \
             from bodies, errors and logs; a real key must be at least {MIN_REDACTED_SECRET_BYTES} bytes"
        )
    })
}

/// `text` with every occurrence of `secret` replaced by `[redacted]` (unchanged without a
/// secret, or for one shorter than [`MIN_REDACTED_SECRET_BYTES`]).
pub fn redact(text: &str, secret: Option<&str>) -> String {
    match secret {
        Some(s) if is_redactable(s) => {
            let mut out = text.replace(s, REDACTED);
            let escaped = json_escaped(s);
            if escaped != s {
                out = out.replace(&escaped, REDACTED);
            }
            out
        }
        _ => text.to_string(),
    }
}

/// `s` as it appears inside a JSON string (without the quotes).
fn json_escaped(s: &str) -> String {
    let quoted = serde_json::Value::String(s.to_string()).to_string();
    quoted[1..quoted.len() - 1].to_string()
}

/// A writer that copies bytes to `inner` with every occurrence of a secret (as given, and as
/// escaped inside a JSON string) replaced by `[redacted]`, across write boundaries: it holds
/// back the last bytes that could begin an occurrence until more come or [`Redactor::finish`].
pub struct Redactor<W: Write> {
    inner: W,
    patterns: Vec<Vec<u8>>,
    /// Longest pattern, bytes.
    longest: usize,
    pending: Vec<u8>,
}

impl<W: Write> Redactor<W> {
    /// A redactor of `secret` writing to `inner` (none, or one shorter than
    /// [`MIN_REDACTED_SECRET_BYTES`]: bytes pass unchanged).
    pub fn new(inner: W, secret: Option<&str>) -> Redactor<W> {
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        if let Some(s) = secret.filter(|s| is_redactable(s)) {
            patterns.push(s.as_bytes().to_vec());
            let escaped = json_escaped(s);
            if escaped != s {
                patterns.push(escaped.into_bytes());
            }
        }
        let longest = patterns.iter().map(Vec::len).max().unwrap_or(0);
        Redactor {
            inner,
            patterns,
            longest,
            pending: Vec::new(),
        }
    }

    /// Write what is held back and return the inner writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.drain(true)?;
        Ok(self.inner)
    }

    /// Write out `pending`, redacted, keeping back (unless `last`) only a tail that is the
    /// start of a secret (a proper prefix of one of the patterns): any other byte is written at
    /// once, so what a live reader sees lags the received bytes only by a partial key.
    fn drain(&mut self, last: bool) -> io::Result<()> {
        if self.patterns.is_empty() {
            self.inner.write_all(&self.pending)?;
            self.pending.clear();
            return Ok(());
        }
        let mut out = Vec::with_capacity(self.pending.len());
        let mut i = 0;
        let n = self.pending.len();
        while i < n {
            // Jump to the next byte that can start a pattern.
            let next = self.pending[i..]
                .iter()
                .position(|b| self.patterns.iter().any(|p| p[0] == *b))
                .map(|p| i + p);
            let Some(j) = next else {
                // No byte left can start a secret: nothing to hold back.
                out.extend_from_slice(&self.pending[i..]);
                i = n;
                break;
            };
            out.extend_from_slice(&self.pending[i..j]);
            i = j;
            if let Some(p) = self
                .patterns
                .iter()
                .find(|p| self.pending[i..].starts_with(p))
            {
                out.extend_from_slice(REDACTED.as_bytes());
                i += p.len();
            } else if !last
                && n - i < self.longest
                && self
                    .patterns
                    .iter()
                    .any(|p| p.starts_with(&self.pending[i..]))
            {
                // The start of a secret that the next write may complete.
                break;
            } else {
                out.push(self.pending[i]);
                i += 1;
            }
        }
        self.inner.write_all(&out)?;
        self.pending.drain(..i);
        Ok(())
    }
}

impl<W: Write> Write for Redactor<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(buf);
        self.drain(false)?;
        Ok(buf.len())
    }

    /// Flushes the inner writer; bytes held back stay held until [`Redactor::finish`].
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The user information of `url`'s authority (`user:secret` of `https://user:secret@host/`),
/// if any.
pub fn url_credentials(url: &str) -> Option<&str> {
    let scheme_end = url.find("://")?;
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    rest[..authority_end].rfind('@').map(|at| &rest[..at])
}

/// `url` with the user information of its authority (`https://user:secret@host/` →
/// `https://***@host/`) hidden; unchanged when it has none. For every URL the host prints.
pub fn url_without_credentials(url: &str) -> Cow<'_, str> {
    match url_credentials(url) {
        Some(creds) => {
            let start = url.find("://").map_or(0, |i| i + 3);
            Cow::Owned(format!(
                "{}***{}",
                &url[..start],
                &url[start + creds.len()..]
            ))
        }
        None => Cow::Borrowed(url),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redacted(chunks: &[&str], secret: Option<&str>) -> String {
        let mut r = Redactor::new(Vec::new(), secret);
        for c in chunks {
            r.write_all(c.as_bytes()).unwrap();
        }
        String::from_utf8(r.finish().unwrap()).unwrap()
    }

    #[test]
    fn the_key_is_replaced_across_write_boundaries() {
        let key = Some("sk-test-SECRET");
        assert_eq!(
            redacted(&["{\"error\":\"bad key sk-te", "st-SECRET\"}"], key),
            "{\"error\":\"bad key [redacted]\"}"
        );
        assert_eq!(
            redacted(&["sk-test-SECRETsk-test-SECRET"], key),
            "[redacted][redacted]"
        );
        assert_eq!(redacted(&["s", "k", "-", "x"], key), "sk-x");
        assert_eq!(
            redacted(&["ends with sk-test-SEC"], key),
            "ends with sk-test-SEC"
        );
        assert_eq!(redacted(&["no key here"], None), "no key here");
        // One byte at a time.
        let text = "a sk-test-SECRET b";
        let chunks: Vec<String> = text.chars().map(String::from).collect();
        let chunks: Vec<&str> = chunks.iter().map(String::as_str).collect();
        assert_eq!(redacted(&chunks, key), "a [redacted] b");
    }

    #[test]
    fn only_the_start_of_a_key_is_held_back_between_writes() {
        let key = Some("sk-test-SECRET");
        // The stream's last bytes share the key's first byte but cannot begin it: written at
        // once (a live reader sees the whole event before a stall), nothing held back.
        let mut r = Redactor::new(Vec::new(), key);
        r.write_all(b"data: {\"stop\":\"s\"}\n\n").unwrap();
        assert_eq!(r.inner, b"data: {\"stop\":\"s\"}\n\n");
        // A real start of the key is held until the next write decides.
        let mut r = Redactor::new(Vec::new(), key);
        r.write_all(b"x sk-te").unwrap();
        assert_eq!(r.inner, b"x ");
        r.write_all(b"st-SECRET y").unwrap();
        assert_eq!(
            String::from_utf8(r.finish().unwrap()).unwrap(),
            "x [redacted] y"
        );
    }

    #[test]
    fn the_json_escaped_form_is_replaced_too() {
        let key = Some("abc/def\"g");
        assert_eq!(redact("x abc/def\"g y", key), "x [redacted] y");
        assert_eq!(redact("x abc/def\\\"g y", key), "x [redacted] y");
        assert_eq!(redacted(&["x abc/def\\\"g y"], key), "x [redacted] y");
    }

    #[test]
    fn a_key_shorter_than_8_bytes_is_a_placeholder_and_left_alone() {
        let text = "llm.max_response_mib: x must be at least 1";
        for key in ["x", "ma", "dummy", "1234567"] {
            assert_eq!(redact(text, Some(key)), text, "{key}");
            assert_eq!(redacted(&[text], Some(key)), text, "{key}");
            let warning = short_key_warning("FAKE_KEY", key).unwrap();
            assert!(
                warning.contains("FAKE_KEY") && warning.contains("placeholder"),
                "{warning}"
            );
        }
        // 8 bytes and more: redacted everywhere, no warning.
        let key = "sk-12345";
        assert_eq!(redact("a sk-12345 b", Some(key)), "a [redacted] b");
        assert_eq!(redacted(&["a sk-1", "2345 b"], Some(key)), "a [redacted] b");
        assert_eq!(short_key_warning("FAKE_KEY", key), None);
        // Bytes, not characters: "ééää" is 8 bytes.
        assert_eq!(redact("x ééää y", Some("ééää")), "x [redacted] y");
    }

    #[test]
    fn url_credentials_are_hidden() {
        assert_eq!(
            url_without_credentials("https://user:secret@api.example.com/v1"),
            "https://***@api.example.com/v1"
        );
        assert_eq!(
            url_without_credentials("http://tok@h:8080"),
            "http://***@h:8080"
        );
        assert_eq!(
            url_without_credentials("http://h:8080/a@b"),
            "http://h:8080/a@b"
        );
        assert_eq!(url_without_credentials("not a url"), "not a url");
    }
}
