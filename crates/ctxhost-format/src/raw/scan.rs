//! One pass over a chat message line of the shape the message store writes: an object whose
//! keys are among `role`, `content`, `tool_call_id`, `tool_name` (string or `null` values; a
//! string `role` required) and `tool_calls` (`null` only), each at most once, with JSON
//! whitespace anywhere between tokens. Strings are checked 8 bytes at a time for the bytes
//! that need a look (`"`, `\`, control characters, non-ASCII): escapes must be well formed with
//! UTF-16 surrogates paired, as serde_json requires to decode them into a `String`, and every
//! run of non-ASCII bytes must be UTF-8. Bytes outside strings must be ASCII JSON tokens, so an
//! accepted line is UTF-8 as a whole.
//!
//! [`message`] only accepts: every line it returns `None` for (another shape, or invalid) is
//! checked again by serde_json, which accepts it or explains what is wrong.

use super::{RawMessage, RawStr};

const ONES: u64 = u64::MAX / 255;
const HIGH: u64 = ONES << 7;

/// The fields [`message`] reads, in the order of its `seen` bits.
const KEYS: [&[u8]; 5] = [
    b"role",
    b"content",
    b"tool_call_id",
    b"tool_name",
    b"tool_calls",
];

/// The message in `line` when it has the shape above and is valid, else `None`.
pub(super) fn message(line: &[u8]) -> Option<RawMessage<'_>> {
    let mut s = Scanner { b: line, i: 0 };
    let mut values: [Option<RawStr>; 4] = [None; 4];
    let mut seen = 0u8;
    s.ws();
    s.eat(b'{')?;
    loop {
        s.ws();
        let key = s.key()?;
        if seen & (1 << key) != 0 {
            return None;
        }
        seen |= 1 << key;
        s.ws();
        s.eat(b':')?;
        s.ws();
        if key == 4 {
            s.null()?;
        } else {
            values[key] = s.string_or_null()?;
        }
        s.ws();
        match s.next()? {
            b',' => continue,
            b'}' => break,
            _ => return None,
        }
    }
    s.ws();
    if s.i != line.len() {
        return None;
    }
    let [role, content, tool_call_id, tool_name] = values;
    Some(RawMessage {
        role: role?,
        content,
        tool_calls: Vec::new(),
        tool_call_id,
        tool_name,
        is_error: false,
        reasoning: Vec::new(),
    })
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scanner<'a> {
    fn next(&mut self) -> Option<u8> {
        let c = *self.b.get(self.i)?;
        self.i += 1;
        Some(c)
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.next()? == c).then_some(())
    }

    /// Skips JSON whitespace.
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\r' | b'\n') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn null(&mut self) -> Option<()> {
        let end = self.i + 4;
        (self.b.get(self.i..end)? == b"null").then(|| self.i = end)
    }

    /// A key among [`KEYS`] written without escapes: its index.
    fn key(&mut self) -> Option<usize> {
        self.eat(b'"')?;
        let rest = &self.b[self.i..];
        let len = rest.iter().position(|c| *c == b'"')?;
        let index = KEYS.iter().position(|k| *k == &rest[..len])?;
        self.i += len + 1;
        Some(index)
    }

    /// `null` (`Some(None)`) or a string.
    fn string_or_null(&mut self) -> Option<Option<RawStr<'a>>> {
        match self.b.get(self.i)? {
            b'n' => self.null().map(|_| None),
            b'"' => self.string().map(Some),
            _ => None,
        }
    }

    /// The string starting at the current `"`.
    fn string(&mut self) -> Option<RawStr<'a>> {
        let b = self.b;
        let start = self.i;
        let mut i = start + 1;
        loop {
            while let Some(chunk) = b.get(i..i + 8) {
                let word = u64::from_le_bytes(chunk.try_into().ok()?);
                let mask = needs_a_look(word);
                if mask != 0 {
                    i += mask.trailing_zeros() as usize / 8;
                    break;
                }
                i += 8;
            }
            match *b.get(i)? {
                b'"' => {
                    self.i = i + 1;
                    return Some(RawStr(&b[start..=i]));
                }
                b'\\' => i = escape(b, i)?,
                0..=0x1f => return None,
                0x80.. => i = utf8_char(b, i)?,
                _ => i += 1,
            }
        }
    }
}

/// High bit set in each byte of `word` that is `"`, `\`, below 0x20 or not ASCII. The lowest
/// flagged byte is exact (the zero-byte tests only misflag bytes above a true match, through
/// the borrow), which is all [`Scanner::string`] uses.
fn needs_a_look(word: u64) -> u64 {
    let quote = word ^ (ONES * b'"' as u64);
    let backslash = word ^ (ONES * b'\\' as u64);
    let quote = quote.wrapping_sub(ONES) & !quote;
    let backslash = backslash.wrapping_sub(ONES) & !backslash;
    let control = word.wrapping_sub(ONES * 0x20) & !word;
    (quote | backslash | control | word) & HIGH
}

/// The escape at `b[i]` (`\`): where it ends, if serde_json decodes it into a `String`
/// (`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`, `\uXXXX` outside the surrogates, or a
/// leading surrogate escape followed by a trailing one).
fn escape(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i + 1)? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(i + 2),
        b'u' => match hex4(b.get(i + 2..i + 6)?)? {
            0xDC00..=0xDFFF => None,
            0xD800..=0xDBFF => {
                if b.get(i + 6..i + 8)? != b"\\u" {
                    return None;
                }
                let low = hex4(b.get(i + 8..i + 12)?)?;
                (0xDC00..=0xDFFF).contains(&low).then_some(i + 12)
            }
            _ => Some(i + 6),
        },
        _ => None,
    }
}

fn hex4(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0, |n, d| {
        let d = (*d as char).to_digit(16)?;
        Some(n * 16 + d)
    })
}

/// The UTF-8 encoded character starting at `b[i]` (not ASCII): where it ends, if it is
/// well formed (Unicode's table of well-formed byte sequences: no overlong forms, no
/// surrogates, nothing above U+10FFFF).
fn utf8_char(b: &[u8], i: usize) -> Option<usize> {
    let (len, second) = match b[i] {
        0xC2..=0xDF => (2, 0x80..=0xBF),
        0xE0 => (3, 0xA0..=0xBF),
        0xE1..=0xEC | 0xEE..=0xEF => (3, 0x80..=0xBF),
        0xED => (3, 0x80..=0x9F),
        0xF0 => (4, 0x90..=0xBF),
        0xF1..=0xF3 => (4, 0x80..=0xBF),
        0xF4 => (4, 0x80..=0x8F),
        _ => return None,
    };
    let tail = b.get(i + 1..i + len)?;
    (second.contains(&tail[0]) && tail[1..].iter().all(|c| (0x80..=0xBF).contains(c)))
        .then_some(i + len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_lines_take_the_one_pass_path() {
        for line in [
            r#"{"role":"user","content":"a \"q\" \\ \n\u001b[0m é 上下文 😀 \ud83d\ude00"}"#,
            r#" { "role" : "tool" , "content" : "" , "tool_call_id" : "c1" , "tool_name" : "read" } "#,
            r#"{"role":"assistant","content":null,"tool_calls":null}"#,
            r#"{"content":"x","role":"system"}"#,
        ] {
            let m = message(line.as_bytes()).unwrap_or_else(|| panic!("{line}"));
            let reference: crate::ChatMessage = serde_json::from_str(line).unwrap();
            assert_eq!(m.role.value(), reference.role);
            assert_eq!(m.content.map(|c| c.value().into_owned()), reference.content);
            assert_eq!(
                m.tool_call_id.map(|c| c.value().into_owned()),
                reference.tool_call_id
            );
        }
    }

    #[test]
    fn everything_else_is_left_to_serde() {
        for line in [
            // Valid, other shapes.
            r#"{"role":"assistant","tool_calls":[]}"#,
            r#"{"role":"user","extra":1}"#,
            r#"{"rol\u0065":"user"}"#,
            // Invalid.
            r#"{"content":"a"}"#,
            r#"{"role":null}"#,
            r#"{"role":"user","role":"user"}"#,
            r#"{"role":"user"} x"#,
            r#"{"role":"user","content":"\ud800"}"#,
            r#"{"role":"user","content":"\udc00"}"#,
            r#"{"role":"user","content":"\ud800\u0041"}"#,
            r#"{"role":"user","content":"\x"}"#,
            r#"{"role":"user","content":"\u12g4"}"#,
            "{\"role\":\"user\",\"content\":\"tab\there\"}",
            r#"{"role":"user","content":"a"#,
            r#"{"role":"user",}"#,
            r#"{"role":"user""#,
            r#"{}"#,
        ] {
            assert!(message(line.as_bytes()).is_none(), "{line}");
        }
        for bad in [
            &b"{\"role\":\"\xff\"}"[..],
            b"{\"role\":\"\xc3\"}",
            b"{\"role\":\"\xed\xa0\x80\"}",
        ] {
            assert!(message(bad).is_none());
        }
    }

    #[test]
    fn utf8_characters_are_checked_like_std() {
        let edges = [
            0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xF4, 0xFF,
        ];
        for lead in 0x80..=0xFFu8 {
            for &b1 in &edges {
                for &b2 in &edges {
                    for &b3 in &edges {
                        let seq = [lead, b1, b2, b3];
                        let std_len = (2..=4).find(|&n| std::str::from_utf8(&seq[..n]).is_ok());
                        assert_eq!(utf8_char(&seq, 0), std_len, "{seq:x?}");
                        if let Some(n) = std_len {
                            // Cut short, it is refused.
                            assert_eq!(utf8_char(&seq[..n - 1], 0), None, "{seq:x?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_lowest_flag_is_exact() {
        for word in [
            *b"ab\"c\\d\x01e",
            *b"\x1f\x1f\"\"\\\\\xff\xff",
            *b"\x00\"xxxxxx",
            *b"abcdefg\x80",
        ] {
            let first = word
                .iter()
                .position(|c| *c == b'"' || *c == b'\\' || *c < 0x20 || *c >= 0x80)
                .unwrap();
            let mask = needs_a_look(u64::from_le_bytes(word));
            assert_eq!(mask.trailing_zeros() as usize / 8, first, "{word:?}");
        }
        assert_eq!(needs_a_look(u64::from_le_bytes(*b"plain tx")), 0);
    }
}
