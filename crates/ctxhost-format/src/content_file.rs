//! A reply's text kept in a file instead of memory (WIT `reply.content-file`, the
//! message store's `add-message-file`): the fold's sink that moves the text to a file once it
//! passes a threshold, and the bounded-memory passes over such a file (JSON escaping into a
//! line, the token estimate, a prefix).
//!
//! The file holds the text exactly as `content` would (UTF-8, not JSON-escaped). Every pass
//! reads it in blocks of [`BLOCK_BYTES`]; a character split between two blocks is carried
//! over, so the results are those of the text whole: [`copy_escaped`] writes the bytes
//! [`crate::jsonl::write_value`] writes for the string between its quotes, and
//! [`TextStats::tokens`] is [`crate::estimate_tokens`] of it.

use std::fmt;
use std::io::{self, Read, Write};

/// Past this many bytes a fold's text goes to a file ([`TextSink::spilling`]): 128 KiB. Smaller
/// replies keep the text in `content`. It bounds what a large reply costs the format
/// component's memory (a wasm memory never shrinks): the text up to here, in a `String` of at
/// most twice its size.
pub const CONTENT_FILE_THRESHOLD: usize = 128 * 1024;

/// Bytes read (and escaped) at a time by the passes over a content file: 16 KiB (what a pass
/// costs the memory of the component or process that makes it).
pub const BLOCK_BYTES: usize = 16 * 1024;

/// Opens the file a [`TextSink`] spills to (created or truncated).
pub type OpenSpill = Box<dyn FnMut() -> io::Result<Box<dyn Write>>>;

/// Where a fold puts the text it concatenates: in memory, and once it passes the threshold in
/// a file (what was gathered so far first, then each fragment as it comes, so the whole text
/// is never held).
#[derive(Default)]
pub struct TextSink {
    /// The text while it is in memory (`None`: no fragment yet).
    text: Option<String>,
    /// Spill to a file past `threshold` bytes: the file's name and how to open it.
    spill: Option<(String, OpenSpill, usize)>,
    /// The open file once spilled.
    file: Option<Box<dyn Write>>,
    /// Bytes of text so far.
    bytes: u64,
    /// The last part that gave text ([`TextSink::push_part`]).
    last_part: Option<u64>,
}

impl fmt::Debug for TextSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TextSink")
            .field("bytes", &self.bytes)
            .field("in_file", &self.file.is_some())
            .field("file", &self.spill.as_ref().map(|s| s.0.as_str()))
            .finish()
    }
}

/// What a [`TextSink`] holds at the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SunkText {
    /// No fragment came.
    None,
    /// The text, in memory.
    Text(String),
    /// The text is in this file (its name as given to [`TextSink::spilling`]), `bytes` long.
    File {
        /// The file.
        name: String,
        /// Its length (bytes of UTF-8 text).
        bytes: u64,
    },
}

impl TextSink {
    /// A sink that keeps the text in memory whatever its size.
    pub fn memory() -> Self {
        Self::default()
    }

    /// A sink that moves the text to the file `name` (opened by `open`) once it is longer than
    /// `threshold` bytes.
    pub fn spilling(name: impl Into<String>, threshold: usize, open: OpenSpill) -> Self {
        TextSink {
            spill: Some((name.into(), open, threshold)),
            ..Self::default()
        }
    }

    /// Adds `fragment`. Errors: creating or writing the file.
    pub fn push(&mut self, fragment: &str) -> io::Result<()> {
        self.bytes += fragment.len() as u64;
        if let Some(file) = self.file.as_mut() {
            return file.write_all(fragment.as_bytes());
        }
        let text = self.text.get_or_insert_with(String::new);
        text.push_str(fragment);
        if let Some((_, open, threshold)) = self.spill.as_mut()
            && text.len() > *threshold
        {
            let mut file = open()?;
            file.write_all(text.as_bytes())?;
            // The memory goes with it.
            self.text = Some(String::new());
            self.file = Some(file);
        }
        Ok(())
    }

    /// Adds `fragment` of part `index` (a content block, an output item) of a reply whose
    /// parts' texts are joined in order. Errors: text for a part before one that already gave
    /// text (`kind` names the parts: "block", "output item"), or the file.
    pub fn push_part(&mut self, index: u64, fragment: &str, kind: &str) -> Result<(), String> {
        if fragment.is_empty() {
            return Ok(());
        }
        match self.last_part {
            Some(last) if index < last => {
                return Err(format!(
                    "text for {kind} {index} after text of {kind} {last} ({kind}s out of order)"
                ));
            }
            _ => self.last_part = Some(index),
        }
        self.push(fragment)
            .map_err(|e| format!("writing the reply's text to its file: {e}"))
    }

    /// Bytes of text so far.
    pub fn len(&self) -> u64 {
        self.bytes
    }

    /// Whether no byte of text came (a fragment `""` may have).
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// The text, or where it is (the file flushed). Errors: flushing the file.
    pub fn finish(self) -> io::Result<SunkText> {
        match (self.file, self.spill, self.text) {
            (Some(mut file), Some((name, _, _)), _) => {
                file.flush()?;
                Ok(SunkText::File {
                    name,
                    bytes: self.bytes,
                })
            }
            (_, _, Some(text)) => Ok(SunkText::Text(text)),
            _ => Ok(SunkText::None),
        }
    }
}

/// What a pass over a content file found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TextStats {
    /// Bytes of text.
    pub bytes: u64,
    /// Whether it holds a character other than white space.
    pub has_non_space: bool,
}

impl TextStats {
    fn add(&mut self, text: &str) {
        self.bytes += text.len() as u64;
        if !self.has_non_space {
            self.has_non_space = !text.trim().is_empty();
        }
    }
}

/// The token estimate of a text read in parts ([`crate::estimate_tokens`] of the parts
/// joined): add each part, then take [`TokenCount::tokens`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenCount {
    /// The weight so far, in quarter tokens ([`crate::tokens::char_quarter_tokens`]).
    pub quarters: u64,
}

impl TokenCount {
    /// Adds `part` (whole characters).
    pub fn add(&mut self, part: &str) {
        self.quarters += part
            .chars()
            .map(crate::tokens::char_quarter_tokens)
            .sum::<u64>();
    }

    /// The estimated tokens of the parts added.
    pub fn tokens(&self) -> u64 {
        self.quarters.div_ceil(4)
    }
}

/// Why a pass over a content file failed.
#[derive(Debug)]
pub enum ContentError {
    /// Reading the file (or writing the output) failed.
    Io(io::Error),
    /// The file is not UTF-8 from this byte on.
    NotUtf8 {
        /// Offset of the first byte that is not part of a UTF-8 character.
        at: u64,
    },
}

impl fmt::Display for ContentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ContentError::Io(e) => write!(f, "{e}"),
            ContentError::NotUtf8 { at } => write!(f, "not UTF-8 text at byte {at}"),
        }
    }
}

impl std::error::Error for ContentError {}

impl From<io::Error> for ContentError {
    fn from(e: io::Error) -> Self {
        ContentError::Io(e)
    }
}

/// Reads `reader` to its end in blocks, calling `each` with every block's text (whole
/// characters: one split between blocks is carried to the next). Errors: reading, or bytes
/// that are not UTF-8 (with their offset).
pub fn for_each_text_block(
    mut reader: impl Read,
    mut each: impl FnMut(&str) -> Result<(), ContentError>,
) -> Result<TextStats, ContentError> {
    let mut buf = vec![0u8; BLOCK_BYTES + 4];
    let mut carried = 0usize;
    let mut offset = 0u64;
    let mut stats = TextStats::default();
    loop {
        let n = match reader.read(&mut buf[carried..BLOCK_BYTES + carried]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        let end = carried + n;
        if n == 0 {
            if carried > 0 {
                return Err(ContentError::NotUtf8 { at: offset });
            }
            return Ok(stats);
        }
        let valid = match std::str::from_utf8(&buf[..end]) {
            Ok(_) => end,
            // A character cut at the block's end: carried over; anything else is not UTF-8.
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(e) => {
                return Err(ContentError::NotUtf8 {
                    at: offset + e.valid_up_to() as u64,
                });
            }
        };
        // Checked just above.
        let text =
            std::str::from_utf8(&buf[..valid]).map_err(|_| ContentError::NotUtf8 { at: offset })?;
        stats.add(text);
        each(text)?;
        offset += valid as u64;
        buf.copy_within(valid..end, 0);
        carried = end - valid;
    }
}

/// Writes the text of `reader` to `out` JSON-escaped as [`crate::jsonl::write_value`] escapes a
/// string (U+2028 / U+2029 included), without the quotes around it: the inside of the
/// string's JSON. At most one block and its escaped copy are in memory. Returns what the pass
/// found (bytes). Errors: reading or writing, bytes that are not UTF-8.
pub fn copy_escaped(reader: impl Read, out: &mut dyn Write) -> Result<TextStats, ContentError> {
    let mut escaped = Vec::with_capacity(BLOCK_BYTES + BLOCK_BYTES / 4);
    for_each_text_block(reader, |text| {
        escaped.clear();
        // A string always serialises (into a Vec, without error).
        crate::jsonl::write_value(&mut escaped, text).map_err(io::Error::other)?;
        // `"…"`: JSON escapes each character alone, so the blocks' insides one after the
        // other are the inside of the whole text.
        out.write_all(&escaped[1..escaped.len() - 1])?;
        Ok(())
    })
}

/// The first `max_bytes` bytes of the text of `reader` (cut at a character boundary) and
/// whether the text is longer. Reads at most `max_bytes` + 4 bytes. Errors: reading; bytes
/// that are not UTF-8 are replaced (U+FFFD).
pub fn prefix(reader: impl Read, max_bytes: usize) -> io::Result<(String, bool)> {
    let mut buf = Vec::with_capacity(max_bytes.min(BLOCK_BYTES) + 4);
    reader.take(max_bytes as u64 + 4).read_to_end(&mut buf)?;
    let longer = buf.len() > max_bytes;
    if longer {
        buf.truncate(max_bytes);
        // Drop a character cut at the end (at most 3 continuation bytes and their lead).
        let cut = match std::str::from_utf8(&buf) {
            Ok(_) => buf.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => buf.len(),
        };
        buf.truncate(cut);
    }
    Ok((String::from_utf8_lossy(&buf).into_owned(), longer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// A writer the test can read back.
    #[derive(Clone, Default)]
    struct Shared(Rc<RefCell<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn tricky_text(n: usize) -> String {
        let unit = "ab\"c\\d\n\u{2028}é漢字😀\u{7f}\u{1}\t";
        unit.repeat(n / unit.len() + 1)
    }

    #[test]
    fn a_sink_keeps_small_text_and_spills_large_text_whole() {
        let mut s = TextSink::spilling("f", 10, Box::new(|| panic!("no spill")));
        s.push("hello").unwrap();
        assert_eq!(s.finish().unwrap(), SunkText::Text("hello".into()));
        assert_eq!(TextSink::memory().finish().unwrap(), SunkText::None);

        let out = Shared::default();
        let o = out.clone();
        let mut s = TextSink::spilling(
            "reply.content",
            10,
            Box::new(move || Ok(Box::new(o.clone()))),
        );
        for piece in ["0123456", "789abc", "", "def"] {
            s.push(piece).unwrap();
        }
        assert_eq!(
            s.finish().unwrap(),
            SunkText::File {
                name: "reply.content".into(),
                bytes: 16
            }
        );
        assert_eq!(out.0.borrow().as_slice(), b"0123456789abcdef");
    }

    #[test]
    fn escaping_in_blocks_equals_escaping_the_whole_string() {
        let text = tricky_text(3 * BLOCK_BYTES + 17);
        let mut out = Vec::new();
        let stats = copy_escaped(text.as_bytes(), &mut out).unwrap();
        let whole = crate::jsonl::to_line(&text).unwrap();
        assert_eq!(out, whole.as_bytes()[1..whole.len() - 1]);
        let mut count = TokenCount::default();
        for_each_text_block(text.as_bytes(), |part| {
            count.add(part);
            Ok(())
        })
        .unwrap();
        assert_eq!(count.tokens(), crate::estimate_tokens(&text));
        assert_eq!(stats.bytes, text.len() as u64);
        assert!(stats.has_non_space);
    }

    #[test]
    fn bytes_that_are_not_utf8_are_named_by_offset() {
        let mut bytes = b"abc".to_vec();
        bytes.push(0xff);
        let e = copy_escaped(&bytes[..], &mut Vec::new()).unwrap_err();
        assert!(matches!(e, ContentError::NotUtf8 { at: 3 }), "{e}");
        // A character cut at the end of the file.
        let e = copy_escaped(&"é".as_bytes()[..1], &mut Vec::new()).unwrap_err();
        assert!(matches!(e, ContentError::NotUtf8 { at: 0 }), "{e}");
        let blank = for_each_text_block(&b" \n\t"[..], |_| Ok(())).unwrap();
        assert!(!blank.has_non_space);
    }

    #[test]
    fn a_prefix_is_cut_at_a_character_boundary() {
        assert_eq!(prefix("ab漢".as_bytes(), 3).unwrap(), ("ab".into(), true));
        assert_eq!(prefix("ab".as_bytes(), 3).unwrap(), ("ab".into(), false));
    }
}
