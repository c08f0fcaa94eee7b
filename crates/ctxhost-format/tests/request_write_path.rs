//! The fast request write path (`stream::copy_chat_array`: lines validated without building a
//! value, bytes copied) against the reference (`stream::write_chat_array`: every line parsed
//! into a `ChatMessage`, converted, re-serialised), for the three builtin request formats'
//! shapes, over random current.jsonl files:
//!
//! - messages of every role with random Unicode text (control characters, quotes,
//!   backslashes, astral characters), tool calls with JSON or broken arguments, absent and
//!   `null` fields, unknown fields;
//! - written the way any JSON writer might: escapes chosen per character (`\u00e9`, surrogate
//!   pairs, `\/`), fields in any order, whitespace between tokens, blank lines (spaces, tabs,
//!   `\r`), `\r\n` endings, a last line with or without its newline;
//! - read in random small pieces (lines cut across reads).
//!
//! Both must give the same number of messages and requests that parse to the same JSON value;
//! with one line broken, both must fail with the same error (file and line).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{self, Read};

use ctxhost_format::shape::MessageShape;
use ctxhost_format::shape::ollama::OllamaShape;
use ctxhost_format::shape::openai::OpenAiShape;
use ctxhost_format::shape::prompted::PromptedShape;
use ctxhost_format::stream::{copy_chat_array, write_chat_array};
use proptest::prelude::*;
use serde_json::Value;

/// A value of a generated line: how it is written is decided separately.
#[derive(Debug, Clone)]
enum Json {
    Null,
    Bool(bool),
    Int(i64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

/// How strings and whitespace are written.
#[derive(Debug, Clone)]
struct Style {
    /// Per character: 0 = as is where allowed, 1 = `\u` escape, 2 = short escape where one exists.
    escapes: Vec<u8>,
    /// Whitespace put between tokens (cycled).
    spaces: Vec<&'static str>,
}

struct Writer<'a> {
    style: &'a Style,
    out: String,
    n: usize,
}

impl Writer<'_> {
    fn pick_escape(&mut self) -> u8 {
        self.n += 1;
        self.style.escapes[self.n % self.style.escapes.len()]
    }

    fn space(&mut self) {
        self.n += 1;
        let s = self.style.spaces[self.n % self.style.spaces.len()];
        self.out.push_str(s);
    }

    fn string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            let how = self.pick_escape();
            let short = match c {
                '"' => Some("\\\""),
                '\\' => Some("\\\\"),
                '\n' => Some("\\n"),
                '\r' => Some("\\r"),
                '\t' => Some("\\t"),
                '\u{8}' => Some("\\b"),
                '\u{c}' => Some("\\f"),
                '/' => Some("\\/"),
                _ => None,
            };
            let must_escape = c == '"' || c == '\\' || (c as u32) < 0x20;
            match (how, short) {
                (2, Some(short)) => self.out.push_str(short),
                _ if how == 1 || (must_escape && short.is_none()) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        self.out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                (_, Some(short)) if must_escape => self.out.push_str(short),
                _ => self.out.push(c),
            }
        }
        self.out.push('"');
    }

    fn value(&mut self, v: &Json) {
        match v {
            Json::Null => self.out.push_str("null"),
            Json::Bool(b) => self.out.push_str(if *b { "true" } else { "false" }),
            Json::Int(i) => self.out.push_str(&i.to_string()),
            Json::Str(s) => self.string(s),
            Json::Arr(items) => {
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.space();
                    self.value(item);
                    self.space();
                }
                self.out.push(']');
            }
            Json::Obj(fields) => {
                self.out.push('{');
                for (i, (k, item)) in fields.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.space();
                    self.string(k);
                    self.space();
                    self.out.push(':');
                    self.space();
                    self.value(item);
                    self.space();
                }
                self.out.push('}');
            }
        }
    }
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        // Any Unicode scalar values, control characters included.
        any::<String>(),
        // Text with the characters that need care.
        proptest::collection::vec(
            prop_oneof![
                Just("\"".to_string()),
                Just("\\".to_string()),
                Just("\n".to_string()),
                Just("\u{1b}[31m".to_string()),
                Just("é".to_string()),
                Just("上下文".to_string()),
                Just("😀".to_string()),
                Just("\u{2028}".to_string()),
                Just("\\ud800".to_string()),
                "[a-z ]{0,12}",
            ],
            0..12
        )
        .prop_map(|parts| parts.concat()),
    ]
}

fn role() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => Just("user".to_string()),
        3 => Just("assistant".to_string()),
        3 => Just("tool".to_string()),
        1 => Just("system".to_string()),
        1 => text(),
    ]
}

/// A field that may be absent (`None`), `null` or a value.
fn maybe(value: impl Strategy<Value = Json>) -> impl Strategy<Value = Option<Json>> {
    prop_oneof![
        2 => Just(None),
        1 => Just(Some(Json::Null)),
        4 => value.prop_map(Some),
    ]
}

fn arguments() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("{}".to_string()),
        Just(String::new()),
        (text(), any::<i64>()).prop_map(|(s, n)| {
            serde_json::json!({"path": s, "n": n, "deep": {"a": [1, 2.5, null]}}).to_string()
        }),
        text(),
    ]
}

fn tool_call() -> impl Strategy<Value = Json> {
    (
        text(),
        proptest::option::of(prop_oneof![Just("function".to_string()), text()]),
        text(),
        arguments(),
        any::<bool>(),
    )
        .prop_map(|(id, kind, name, arguments, extra)| {
            let mut fields = vec![("id".to_string(), Json::Str(id))];
            if let Some(kind) = kind {
                fields.push(("type".to_string(), Json::Str(kind)));
            }
            let mut function = vec![
                ("name".to_string(), Json::Str(name)),
                ("arguments".to_string(), Json::Str(arguments)),
            ];
            if extra {
                function.push(("strict".to_string(), Json::Bool(true)));
                fields.push(("index".to_string(), Json::Int(0)));
            }
            fields.push(("function".to_string(), Json::Obj(function)));
            Json::Obj(fields)
        })
}

fn unknown_value() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        any::<i64>().prop_map(Json::Int),
        text().prop_map(Json::Str),
    ];
    leaf.prop_recursive(3, 12, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Json::Arr),
            proptest::collection::vec(("[a-z]{1,6}", inner), 0..4).prop_map(Json::Obj),
        ]
    })
}

/// One chat message line's fields, in a random order, with unknown fields mixed in.
fn message() -> impl Strategy<Value = Json> {
    (
        role(),
        maybe(text().prop_map(Json::Str)),
        maybe(proptest::collection::vec(tool_call(), 0..3).prop_map(Json::Arr)),
        maybe(text().prop_map(Json::Str)),
        maybe(text().prop_map(Json::Str)),
        proptest::collection::vec(("x_[a-z]{1,5}", unknown_value()), 0..2),
        any::<u64>(),
    )
        .prop_map(
            |(role, content, tool_calls, tool_call_id, tool_name, unknown, order)| {
                let mut fields = vec![("role".to_string(), Json::Str(role))];
                for (key, value) in [
                    ("content", content),
                    ("tool_calls", tool_calls),
                    ("tool_call_id", tool_call_id),
                    ("tool_name", tool_name),
                ] {
                    if let Some(v) = value {
                        fields.push((key.to_string(), v));
                    }
                }
                fields.extend(unknown);
                // A deterministic shuffle from `order`.
                let mut seed = order;
                for i in (1..fields.len()).rev() {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                    fields.swap(i, (seed >> 33) as usize % (i + 1));
                }
                Json::Obj(fields)
            },
        )
}

fn style() -> impl Strategy<Value = Style> {
    (
        proptest::collection::vec(
            prop_oneof![6 => Just(0u8), 1 => Just(1u8), 2 => Just(2u8)],
            1..8,
        ),
        proptest::collection::vec(
            prop_oneof![4 => Just(""), 1 => Just(" "), 1 => Just("\t"), 1 => Just(" \r ")],
            1..6,
        ),
    )
        .prop_map(|(escapes, spaces)| Style { escapes, spaces })
}

/// A current.jsonl: the lines, blank lines between them, `\n` or `\r\n`, and whether the last
/// line has its terminator.
fn history() -> impl Strategy<Value = String> {
    (
        proptest::collection::vec(
            (
                message(),
                style(),
                prop_oneof![Just(""), Just("\n"), Just("  \n"), Just("\t\r\n")],
                prop_oneof![3 => Just("\n"), 1 => Just("\r\n")],
            ),
            1..12,
        ),
        any::<bool>(),
    )
        .prop_map(|(lines, last_newline)| {
            let mut file = String::new();
            let count = lines.len();
            for (i, (message, style, blank, end)) in lines.into_iter().enumerate() {
                file.push_str(blank);
                let mut w = Writer {
                    style: &style,
                    out: String::new(),
                    n: 0,
                };
                w.value(&message);
                file.push_str(&w.out);
                if i + 1 < count || last_newline {
                    file.push_str(end);
                }
            }
            file
        })
}

/// A reader handing out `input` in pieces of the given sizes (cycled), so lines are cut
/// across reads.
struct Pieces<'a> {
    input: &'a [u8],
    /// Where the next read starts.
    at: usize,
    sizes: Vec<usize>,
    n: usize,
}

impl Read for Pieces<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.n += 1;
        let rest = &self.input[self.at.min(self.input.len())..];
        let size = self.sizes[self.n % self.sizes.len()]
            .min(buf.len())
            .min(rest.len());
        buf[..size].copy_from_slice(&rest[..size]);
        self.at += size;
        Ok(size)
    }
}

/// The request build seeks back to copy a long line's strings.
impl io::Seek for Pieces<'_> {
    fn seek(&mut self, to: io::SeekFrom) -> io::Result<u64> {
        self.at = match to {
            io::SeekFrom::Start(at) => at as usize,
            io::SeekFrom::Current(by) => (self.at as i64 + by) as usize,
            io::SeekFrom::End(by) => (self.input.len() as i64 + by) as usize,
        };
        Ok(self.at as u64)
    }
}

/// What one write path gave: (messages, parsed request array), or its error as text.
type Outcome = Result<(u64, Value), String>;

/// The outcome of both paths.
fn both<S: MessageShape + Clone>(
    input: &str,
    pieces: &[usize],
    mut fast_shape: S,
    mut reference_shape: S,
) -> (Outcome, Outcome) {
    let mut fast = Vec::new();
    let reader = Pieces {
        input: input.as_bytes(),
        at: 0,
        sizes: pieces.to_vec(),
        n: 0,
    };
    let fast = copy_chat_array(reader, "current.jsonl", &mut fast, &mut fast_shape)
        .map(|n| {
            (
                n,
                serde_json::from_slice(&fast).expect("fast output is JSON"),
            )
        })
        .map_err(|e| e.to_string());
    let mut reference = Vec::new();
    let reference = write_chat_array(input.as_bytes(), "current.jsonl", &mut reference, |m| {
        reference_shape.reference(m)
    })
    .map(|n| {
        (
            n,
            serde_json::from_slice(&reference).expect("reference output is JSON"),
        )
    })
    .map_err(|e| e.to_string());
    (fast, reference)
}

fn check_all_shapes(input: &str, pieces: &[usize]) -> Result<(), TestCaseError> {
    let (fast, reference) = both(input, pieces, OpenAiShape, OpenAiShape);
    prop_assert_eq!(fast, reference, "openai, input:\n{}", input);
    let (fast, reference) = both(input, pieces, OllamaShape, OllamaShape);
    prop_assert_eq!(fast, reference, "ollama, input:\n{}", input);
    let prompt = "# Tools\n\nYou can call these tools:\n- read_file(path: string)".to_string();
    for prompt in [String::new(), prompt] {
        let (fast, reference) = both(
            input,
            pieces,
            PromptedShape::new(prompt.clone()),
            PromptedShape::new(prompt.clone()),
        );
        prop_assert_eq!(fast, reference, "prompted, input:\n{}", input);
    }
    Ok(())
}

fn pieces() -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(1usize..300, 1..5)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn fast_path_parses_equal_to_the_reference(input in history(), pieces in pieces()) {
        let (fast, reference) = both(&input, &pieces, OpenAiShape, OpenAiShape);
        // Every generated line is a chat message: both must succeed.
        prop_assert!(reference.is_ok(), "{:?}\n{}", reference, input);
        prop_assert_eq!(fast, reference, "input:\n{}", input);
        check_all_shapes(&input, &pieces)?;
    }

    #[test]
    fn a_broken_line_is_refused_alike(
        input in history(),
        pieces in pieces(),
        cut in any::<prop::sample::Index>(),
        insert in prop_oneof![
            Just(""), Just("\""), Just("\\"), Just("\u{1}"), Just("\t"), Just("}"), Just(","),
            Just("\\ud800"), Just("\\udc00"), Just("\\ud800\\u0041"), Just("\\ud800\\udc00"),
            Just("\\u12"), Just("\\x"), Just("x"), Just("\n"), Just("null"), Just("é"),
            Just("\"role\":\"user\","),
        ],
    ) {
        // Cut the file somewhere (a torn line) or insert a stray token there.
        let mut at = cut.index(input.len() + 1);
        while !input.is_char_boundary(at) {
            at -= 1;
        }
        let broken = if insert.is_empty() {
            input[..at].to_string()
        } else {
            format!("{}{insert}{}", &input[..at], &input[at..])
        };
        check_all_shapes(&broken, &pieces)?;
    }
}

/// `both` over bytes that need not be UTF-8.
fn both_bytes(input: &[u8], pieces: &[usize]) -> (Result<u64, String>, Result<u64, String>) {
    let reader = Pieces {
        input,
        at: 0,
        sizes: pieces.to_vec(),
        n: 0,
    };
    let mut fast = Vec::new();
    let fast = copy_chat_array(reader, "current.jsonl", &mut fast, &mut OpenAiShape)
        .map_err(|e| e.to_string());
    let reference = write_chat_array(input, "current.jsonl", &mut Vec::new(), |m| {
        OpenAiShape.reference(m)
    })
    .map_err(|e| e.to_string());
    (fast, reference)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn a_stray_byte_is_refused_alike(
        input in history(),
        pieces in pieces(),
        at in any::<prop::sample::Index>(),
        byte in prop_oneof![0x80u8..=0xff, 0u8..0x20],
    ) {
        let mut bytes = input.into_bytes();
        bytes.insert(at.index(bytes.len() + 1), byte);
        let (fast, reference) = both_bytes(&bytes, &pieces);
        prop_assert_eq!(fast, reference, "input: {:?}", String::from_utf8_lossy(&bytes));
    }
}

#[test]
fn invalid_utf8_is_refused_alike() {
    let input: &[u8] =
        b"{\"role\":\"user\",\"content\":\"a\"}\n{\"role\":\"user\",\"content\":\"\xc3\x28\"}\n";
    let mut fast = Vec::new();
    let reader = Pieces {
        input,
        at: 0,
        sizes: vec![7],
        n: 0,
    };
    let fast = copy_chat_array(reader, "current.jsonl", &mut fast, &mut OpenAiShape).unwrap_err();
    let reference = write_chat_array(input, "current.jsonl", &mut Vec::new(), |m| m).unwrap_err();
    assert_eq!(fast.to_string(), reference.to_string());
    assert_eq!(fast.to_string(), "current.jsonl line 2: not valid UTF-8");
}

#[test]
fn lines_longer_than_a_block_are_read_whole() {
    let long = "é\"\\".repeat(200_000);
    let line = serde_json::to_string(&ctxhost_format::ChatMessage::text("tool", long)).unwrap();
    let input = format!("{line}\n\n{line}\n{line}");
    assert!(input.len() > 3 * ctxhost_format::jsonl::BLOCK_BYTES);
    let (fast, reference) = both(&input, &[65536, 1000, 7], OpenAiShape, OpenAiShape);
    let (n, fast) = fast.unwrap();
    assert_eq!(n, 3);
    assert_eq!(fast, reference.unwrap().1);
}
