//! Prompted tool calls, for models that do not emit native `tool_calls` (like a small local
//! model): the tools are described in the system prompt, the model answers with a JSON object
//! to call one, and the reply text is parsed back into OpenAI-shaped tool calls. Used by the
//! `prompted-tools` request format component; pure code, so it is tested natively.
//!
//! The protocol told to the model ([`tools_prompt`]): to call a tool, reply with exactly one
//! JSON object `{"tool": NAME, "arguments": {...}}`; to answer, reply with plain text. The
//! history is shown to the model the same way: an earlier call as that JSON text
//! ([`call_text`]), a tool result as a user message `Result of NAME:\n...` ([`result_text`]).
//!
//! [`parse_reply`] is lenient about what small models actually write: bare JSON, JSON in a
//! ```` ```json ```` fence or `<tool_call>` tags, JSON before or after prose, `name` instead of
//! `tool`, `parameters` or `args` instead of `arguments`, arguments as a JSON string, the OpenAI
//! `{"function": {"name", "arguments"}}` shape, an array of calls.

use serde_json::{Map, Value};

/// Longest tool description shown in the prompt, in characters (the rest is cut at a
/// character boundary and marked with `…`).
pub const MAX_DESCRIPTION_CHARS: usize = 160;

/// A tool call found in a reply: the tool name and its arguments as JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptedCall {
    /// The tool name.
    pub name: String,
    /// JSON text of the arguments (`{}` when the model gave none); a string argument value
    /// that is not JSON is passed on as written, for the host to reject with a clear message.
    pub arguments: String,
}

/// A parsed reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedReply {
    /// Text of the reply without the tool-call JSON (and its fences or tags), trimmed; `None`
    /// when nothing is left. The whole reply when it calls no tool.
    pub content: Option<String>,
    /// The tool calls, in reply order (empty for a plain answer).
    pub calls: Vec<PromptedCall>,
}

/// The system prompt addition describing `tools` (OpenAI tool definitions:
/// `{"type":"function","function":{"name","description","parameters"}}`) and the reply
/// protocol. Definitions without a function name are skipped; an empty string when no tool
/// remains.
///
/// Kept short for small models (measured with Qwen2.5-Coder-0.5B: with whole descriptions and
/// every parameter in the signature it answered without calling; with this form it called the
/// right tool): one line per tool, `name(required: type, ...): first sentence. Optional: x (type).`
pub fn tools_prompt(tools: &[Value]) -> String {
    let functions: Vec<&Value> = tools
        .iter()
        .map(|t| t.get("function").unwrap_or(t))
        .filter(|f| f.get("name").and_then(Value::as_str).is_some())
        .collect();
    if functions.is_empty() {
        return String::new();
    }
    let mut s = String::from("# Tools\n\nYou can call these tools:\n");
    for f in &functions {
        s.push_str("- ");
        s.push_str(&tool_line(f));
        s.push('\n');
    }
    s.push_str(
        "\nTo call a tool, reply with exactly one JSON object and nothing else, in this form:\n\
         {\"tool\": \"TOOL_NAME\", \"arguments\": {\"ARGUMENT_NAME\": \"VALUE\"}}\n",
    );
    s.push_str("For example:\n");
    s.push_str(&example_call(functions[0]));
    s.push_str(
        "\nThe tool's result comes back in the next message. Call one tool at a time.\n\
         When you have the final answer, reply with plain text only, without any JSON object.",
    );
    s
}

/// `name(req: type, ...): First sentence. Optional: opt (type), ...` for one function.
fn tool_line(f: &Value) -> String {
    let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
    let params = f.get("parameters");
    let props = params
        .and_then(|p| p.get("properties"))
        .and_then(Value::as_object);
    let required: Vec<&str> = params
        .and_then(|p| p.get("required"))
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let type_of = |k: &str| {
        props
            .and_then(|p| p.get(k))
            .map(type_name)
            .unwrap_or_else(|| "any".into())
    };
    let req: Vec<String> = required
        .iter()
        .map(|k| format!("{k}: {}", type_of(k)))
        .collect();
    let opt: Vec<String> = props
        .into_iter()
        .flat_map(|p| p.keys())
        .filter(|k| !required.contains(&k.as_str()))
        .map(|k| format!("{k} ({})", type_of(k)))
        .collect();
    let mut line = format!("{name}({})", req.join(", "));
    let description = f
        .get("description")
        .and_then(Value::as_str)
        .map(first_sentence)
        .unwrap_or_default();
    if !description.is_empty() {
        line.push_str(": ");
        line.push_str(&description);
    }
    if !opt.is_empty() {
        line.push_str(if description.is_empty() {
            ": Optional: "
        } else {
            " Optional: "
        });
        line.push_str(&opt.join(", "));
        line.push('.');
    }
    line
}

/// The first sentence of `text` on one line (up to the first `. `, or all of it), at most
/// [`MAX_DESCRIPTION_CHARS`] characters, ending with `.` or `…`.
fn first_sentence(text: &str) -> String {
    let text = one_line(text);
    let end = text.find(". ").map(|i| i + 1).unwrap_or(text.len());
    let sentence = cut_chars(&text[..end], MAX_DESCRIPTION_CHARS);
    if sentence.is_empty() || sentence.ends_with(['.', '…', '!', '?']) {
        sentence
    } else {
        format!("{sentence}.")
    }
}

/// A JSON Schema's type for the prompt: `string`, `number`, `array of string`, `string|null`, `any`.
fn type_name(schema: &Value) -> String {
    match schema.get("type") {
        Some(Value::String(t)) if t == "array" => match schema.get("items") {
            Some(items) if items.get("type").is_some() => format!("array of {}", type_name(items)),
            _ => "array".to_string(),
        },
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join("|"),
        _ => match schema.get("enum").and_then(Value::as_array) {
            Some(values) => values
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join("|"),
            None => "any".to_string(),
        },
    }
}

/// `{"tool": NAME, "arguments": {...}}` with placeholder values for the required arguments.
fn example_call(f: &Value) -> String {
    let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
    let params = f.get("parameters");
    let props = params
        .and_then(|p| p.get("properties"))
        .and_then(Value::as_object);
    let mut args = Map::new();
    for key in params
        .and_then(|p| p.get("required"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(key) = key.as_str() {
            let example = match props
                .and_then(|p| p.get(key))
                .and_then(|s| s.get("type"))
                .and_then(Value::as_str)
            {
                Some("number") | Some("integer") => Value::from(1),
                Some("boolean") => Value::from(true),
                Some("array") => Value::Array(vec![]),
                Some("object") => Value::Object(Map::new()),
                _ => Value::from("..."),
            };
            args.insert(key.to_string(), example);
        }
    }
    call_json(name, Value::Object(args))
}

fn call_json(name: &str, arguments: Value) -> String {
    // Keys in protocol order ("tool" first), whatever the map ordering.
    format!(
        "{{\"tool\": {}, \"arguments\": {}}}",
        Value::from(name),
        serde_json::to_string(&arguments).unwrap_or_else(|_| "{}".to_string())
    )
}

/// How an earlier tool call of the model is shown in the history:
/// `{"tool": NAME, "arguments": ARGS}` (the arguments text as JSON when it parses, else as a
/// JSON string).
pub fn call_text(name: &str, arguments: &str) -> String {
    let args = if arguments.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        serde_json::from_str(arguments).unwrap_or_else(|_| Value::from(arguments))
    };
    call_json(name, args)
}

/// The nudge after a tool result. Measured with Qwen2.5-Coder-0.5B: a bare result made it call
/// the same tool again and again; any mention of calling another tool did too; this wording made
/// it answer from the result (a model that needs more can still call a tool).
pub const RESULT_NUDGE: &str =
    "Now, based on this result, answer my question in plain text if you can.";

/// How a tool result is shown in the history (as a user message):
/// `Result of NAME:\nCONTENT\n` followed by [`RESULT_NUDGE`].
pub fn result_text(tool_name: Option<&str>, content: &str) -> String {
    let name = tool_name
        .filter(|n| !n.is_empty())
        .unwrap_or("the tool call");
    let sep = if content.ends_with('\n') { "" } else { "\n" };
    format!("Result of {name}:\n{content}{sep}{RESULT_NUDGE}")
}

/// Parse a model reply for tool calls; see the module doc for what is accepted. A reply
/// whose only JSON is `{"answer": TEXT}` is the plain answer TEXT.
pub fn parse_reply(text: &str) -> ParsedReply {
    let mut calls = Vec::new();
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut answer: Option<String> = None;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'{' && bytes[i] != b'[' {
            i += 1;
            continue;
        }
        let mut values = serde_json::Deserializer::from_str(&text[i..]).into_iter::<Value>();
        match values.next() {
            Some(Ok(value)) => {
                let end = i + values.byte_offset();
                let found = as_calls(&value);
                if !found.is_empty() {
                    calls.extend(found);
                    spans.push((i, end));
                } else if let Some(a) = value
                    .as_object()
                    .filter(|o| o.len() == 1)
                    .and_then(|o| o.get("answer"))
                    .and_then(Value::as_str)
                {
                    answer.get_or_insert_with(|| a.to_string());
                    spans.push((i, end));
                }
                // Skip the whole value: braces inside it are not candidates.
                i = end;
            }
            _ => i += 1,
        }
    }
    if calls.is_empty() {
        if let Some(a) = answer.filter(|_| strip(text, &spans).is_none()) {
            return ParsedReply {
                content: Some(a),
                calls,
            };
        }
        return ParsedReply {
            content: Some(text.to_string()),
            calls,
        };
    }
    ParsedReply {
        content: strip(text, &spans),
        calls,
    }
}

/// The calls `value` holds: one call object, or an array of call objects (all of them).
fn as_calls(value: &Value) -> Vec<PromptedCall> {
    match value {
        Value::Object(o) => as_call(o).into_iter().collect(),
        Value::Array(items) if !items.is_empty() => {
            let calls: Vec<PromptedCall> = items
                .iter()
                .filter_map(|v| v.as_object())
                .filter_map(as_call)
                .collect();
            if calls.len() == items.len() {
                calls
            } else {
                Vec::new()
            }
        }
        _ => Vec::new(),
    }
}

/// One call object: `{"tool": N, "arguments"?}`, `{"name": N, "arguments"|"parameters"}`,
/// or `{"function": {"name": N, "arguments"?}}`.
fn as_call(o: &Map<String, Value>) -> Option<PromptedCall> {
    if let Some(name) = o.get("tool").and_then(Value::as_str) {
        return Some(call(name, args_of(o)));
    }
    if let Some(f) = o.get("function").and_then(Value::as_object)
        && let Some(name) = f.get("name").and_then(Value::as_str)
    {
        return Some(call(name, args_of(f)));
    }
    if let (Some(name), Some(args)) = (o.get("name").and_then(Value::as_str), args_of(o)) {
        return Some(call(name, Some(args)));
    }
    None
}

/// The arguments of a call object: `arguments`, `parameters` or `args`.
fn args_of(o: &Map<String, Value>) -> Option<&Value> {
    ["arguments", "parameters", "args"]
        .iter()
        .find_map(|k| o.get(*k))
}

fn call(name: &str, arguments: Option<&Value>) -> PromptedCall {
    let arguments = match arguments {
        None | Some(Value::Null) => "{}".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    };
    PromptedCall {
        name: name.trim().to_string(),
        arguments,
    }
}

/// `text` without `spans`, code fences, `<tool_call>` tags and surrounding blank space;
/// `None` when nothing is left.
fn strip(text: &str, spans: &[(usize, usize)]) -> Option<String> {
    let mut rest = String::with_capacity(text.len());
    let mut at = 0;
    for &(start, end) in spans {
        rest.push_str(&text[at..start]);
        at = end;
    }
    rest.push_str(&text[at..]);
    let rest = rest.replace("<tool_call>", "").replace("</tool_call>", "");
    let lines: Vec<&str> = rest
        .lines()
        .filter(|l| {
            let t = l.trim();
            !(t.starts_with("```") && t[3..].chars().all(|c| c.is_ascii_alphanumeric()))
        })
        .collect();
    let joined = lines.join("\n");
    let trimmed = joined.trim();
    (!trimmed.is_empty()).then(|| trimmed.to_string())
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn cut_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", s[..i].trim_end()),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn calls(r: &ParsedReply) -> Vec<(&str, &str)> {
        r.calls
            .iter()
            .map(|c| (c.name.as_str(), c.arguments.as_str()))
            .collect()
    }

    #[test]
    fn bare_json_is_a_call() {
        let r = parse_reply(r#"{"tool": "read_text_file", "arguments": {"path": "src/main.rs"}}"#);
        assert_eq!(calls(&r), [("read_text_file", r#"{"path":"src/main.rs"}"#)]);
        assert_eq!(r.content, None);
    }

    #[test]
    fn fenced_json_is_a_call() {
        let r = parse_reply(
            "```json\n{\"tool\": \"list_directory\", \"arguments\": {\"path\": \".\"}}\n```",
        );
        assert_eq!(calls(&r), [("list_directory", r#"{"path":"."}"#)]);
        assert_eq!(r.content, None);
    }

    #[test]
    fn json_followed_by_prose_is_a_call_and_keeps_the_prose() {
        let r = parse_reply(
            "{\"tool\": \"read_text_file\", \"arguments\": {\"path\": \"a.txt\"}}\nThis reads the file so I can see it.",
        );
        assert_eq!(calls(&r), [("read_text_file", r#"{"path":"a.txt"}"#)]);
        assert_eq!(
            r.content.as_deref(),
            Some("This reads the file so I can see it.")
        );
    }

    #[test]
    fn prose_then_fenced_json_is_a_call() {
        let r = parse_reply(
            "Let me look at the directory first.\n\n```json\n{\"tool\":\"list_directory\",\"arguments\":{\"path\":\"/s\"}}\n```\n",
        );
        assert_eq!(calls(&r), [("list_directory", r#"{"path":"/s"}"#)]);
        assert_eq!(
            r.content.as_deref(),
            Some("Let me look at the directory first.")
        );
    }

    #[test]
    fn plain_answer_has_no_call() {
        let text = "The file defines `main`, which prints \"hi\".\nNothing else to do.";
        let r = parse_reply(text);
        assert!(r.calls.is_empty());
        assert_eq!(r.content.as_deref(), Some(text));
    }

    #[test]
    fn json_that_is_not_a_call_stays_an_answer() {
        for text in [
            "The config is {\"name\": \"demo\", \"port\": 8080}.",
            "Use `fn f() { let x = {1}; }` here.",
            "Broken: {\"tool\": \"read\", \"arguments\": {\"path\": ",
            "[1, 2, 3] are the numbers; {} is empty.",
        ] {
            let r = parse_reply(text);
            assert!(r.calls.is_empty(), "{text}");
            assert_eq!(r.content.as_deref(), Some(text));
        }
    }

    #[test]
    fn other_call_shapes_small_models_write() {
        let r = parse_reply(
            "<tool_call>\n{\"name\": \"read_text_file\", \"arguments\": {\"path\": \"x\"}}\n</tool_call>",
        );
        assert_eq!(calls(&r), [("read_text_file", r#"{"path":"x"}"#)]);
        assert_eq!(r.content, None);

        let r = parse_reply(r#"{"tool": "list_directory", "parameters": {"path": "."}}"#);
        assert_eq!(calls(&r), [("list_directory", r#"{"path":"."}"#)]);

        let r = parse_reply(r#"{"tool": "read_text_file", "arguments": "{\"path\": \"y\"}"}"#);
        assert_eq!(calls(&r), [("read_text_file", r#"{"path": "y"}"#)]);

        let r = parse_reply(
            r#"{"type":"function","function":{"name":"list_allowed_directories","arguments":{}}}"#,
        );
        assert_eq!(calls(&r), [("list_allowed_directories", "{}")]);

        let r = parse_reply(r#"{"tool": "list_allowed_directories"}"#);
        assert_eq!(calls(&r), [("list_allowed_directories", "{}")]);
    }

    #[test]
    fn several_calls_are_kept_in_order() {
        let r = parse_reply(
            "[{\"tool\":\"a\",\"arguments\":{\"n\":1}},{\"tool\":\"b\",\"arguments\":{}}]\nthen\n{\"tool\":\"c\"}",
        );
        assert_eq!(calls(&r), [("a", r#"{"n":1}"#), ("b", "{}"), ("c", "{}")]);
        assert_eq!(r.content.as_deref(), Some("then"));
    }

    #[test]
    fn answer_object_is_a_plain_answer() {
        let r = parse_reply("```json\n{\"answer\": \"It prints hi.\"}\n```");
        assert!(r.calls.is_empty());
        assert_eq!(r.content.as_deref(), Some("It prints hi."));
        // Prose around it: the reply is kept as written.
        let r = parse_reply("Done. {\"answer\": \"x\"}");
        assert_eq!(r.content.as_deref(), Some("Done. {\"answer\": \"x\"}"));
    }

    #[test]
    fn multibyte_text_around_a_call() {
        let r = parse_reply(
            "読みます。{\"tool\":\"read_text_file\",\"arguments\":{\"path\":\"é.txt\"}} ✓",
        );
        assert_eq!(calls(&r), [("read_text_file", r#"{"path":"é.txt"}"#)]);
        assert_eq!(r.content.as_deref(), Some("読みます。 ✓"));
    }

    #[test]
    fn prompt_lists_tools_and_the_protocol() {
        let tools = vec![
            json!({"type":"function","function":{"name":"read_text_file",
                "description":"Read the complete\n contents of a file. Handles encodings. Use it often.",
                "parameters":{"type":"object","properties":{"tail":{"type":"number"},"path":{"type":"string"},"head":{"type":"number"}},"required":["path"]}}}),
            json!({"type":"function","function":{"name":"list_directory","description":"x".repeat(500),
                "parameters":{"type":"object","properties":{"paths":{"type":"array","items":{"type":"string"}}}}}}),
            json!({"type":"function","function":{"name":"ping","parameters":{"type":"object","properties":{}}}}),
            json!({"type":"function","function":{"description":"nameless"}}),
        ];
        let p = tools_prompt(&tools);
        let lines: Vec<&str> = p.lines().filter(|l| l.starts_with("- ")).collect();
        assert_eq!(
            lines,
            [
                "- read_text_file(path: string): Read the complete contents of a file. Optional: head (number), tail (number).",
                &format!(
                    "- list_directory(): {}… Optional: paths (array of string).",
                    "x".repeat(MAX_DESCRIPTION_CHARS)
                ),
                "- ping()",
            ]
        );
        assert!(!p.contains("nameless"));
        assert!(
            p.contains(r#"{"tool": "read_text_file", "arguments": {"path":"..."}}"#),
            "{p}"
        );
        assert!(
            p.ends_with("reply with plain text only, without any JSON object."),
            "{p}"
        );
        // The example parses back as the call it shows.
        let example = p
            .lines()
            .find(|l| l.starts_with("{\"tool\": \"read_text_file\""))
            .unwrap();
        assert_eq!(
            calls(&parse_reply(example)),
            [("read_text_file", r#"{"path":"..."}"#)]
        );
        assert_eq!(tools_prompt(&[]), "");
    }

    #[test]
    fn history_texts_round_trip_through_the_parser() {
        let t = call_text("read_text_file", r#"{"path":"a"}"#);
        assert_eq!(
            t,
            r#"{"tool": "read_text_file", "arguments": {"path":"a"}}"#
        );
        assert_eq!(
            calls(&parse_reply(&t)),
            [("read_text_file", r#"{"path":"a"}"#)]
        );
        assert_eq!(call_text("x", ""), r#"{"tool": "x", "arguments": {}}"#);
        assert_eq!(
            call_text("x", "not json"),
            r#"{"tool": "x", "arguments": "not json"}"#
        );
        assert_eq!(
            result_text(Some("read_text_file"), "hi"),
            format!("Result of read_text_file:\nhi\n{RESULT_NUDGE}")
        );
        assert_eq!(
            result_text(None, "hi\n"),
            format!("Result of the tool call:\nhi\n{RESULT_NUDGE}")
        );
    }
}
