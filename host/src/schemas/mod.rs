//! The published JSON Schemas (draft 2020-12) of the files of a task directory
//! (`docs/schemas/*.schema.json`, DESIGN.md §2.1), embedded in the binary, and validation of a
//! file or a JSONL line against them.
//!
//! The schemas are the single source of truth for the on-disk field lists: DESIGN.md's field
//! tables are generated from them (a test compares), `ctxhost fsck` reports every line that does
//! not match ([`crate::fsck`], problem kind `schema-mismatch`), and the integration tests validate
//! every task directory they produce. Each schema file stands alone (no reference to another
//! file), so any validator of draft 2020-12 can use one without the others.
//!
//! | file | schema | unit |
//! |---|---|---|
//! | metadata.json | `metadata.schema.json` | the file |
//! | task_state.json | `task_state.schema.json` | the file |
//! | messages.jsonl | `messages.schema.json` | a line |
//! | current.jsonl | `current.schema.json` | a line |
//! | summaries.jsonl | `summaries.schema.json` | a line |
//! | tools.jsonl | `tools.schema.json` | a line |
//! | tools.json | `tool_definitions.schema.json` | the file |
//! | llm_calls.jsonl | `llm_calls.schema.json` | a line |
//! | planning/{uuid}.jsonl | `planning.schema.json` | a line |
//! | store_checkpoint.json | `store_checkpoint.schema.json` | the file |
//! | history_checkpoint.json | `history_checkpoint.schema.json` | the file |
//! | context_checkpoint.json | `context_checkpoint.schema.json` | the file |
//!
//! Validation asserts `format` (`date-time`, `uuid`): ctxhost's own readers rely on it, though
//! draft 2020-12 makes `format` an annotation by default. Schema keywords starting with `x-`
//! are annotations of ctxhost's own (`x-ctxhost-extension: true` marks what ctxhost adds to the
//! spec); validators ignore them.

#[cfg(test)]
mod doc;
#[cfg(test)]
mod ordered;

use std::fmt;
use std::sync::OnceLock;

use ctxhost_format::files;
use jsonschema::Validator;
use serde_json::Value;

/// One published schema: which task-directory file (or line of it) it describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Schema {
    /// `metadata.json` (the whole file).
    Metadata,
    /// `task_state.json` (the whole file).
    TaskState,
    /// A line of `messages.jsonl`.
    Messages,
    /// A line of `current.jsonl`.
    Current,
    /// A line of `summaries.jsonl`.
    Summaries,
    /// A line of `tools.jsonl`.
    Tools,
    /// `tools.json` (the whole file).
    ToolDefinitions,
    /// A line of `llm_calls.jsonl`.
    LlmCalls,
    /// A line of `planning/{uuid}.jsonl`.
    Planning,
    /// `store_checkpoint.json` (the whole file; builtin:jsonl-store's).
    StoreCheckpoint,
    /// `history_checkpoint.json` (the whole file).
    HistoryCheckpoint,
    /// `context_checkpoint.json` (the whole file).
    ContextCheckpoint,
    /// `workspace.json` (the whole file).
    Workspace,
}

impl Schema {
    /// Every schema, in the order DESIGN.md lists them.
    pub const ALL: [Schema; 13] = [
        Schema::Metadata,
        Schema::TaskState,
        Schema::Messages,
        Schema::Current,
        Schema::Summaries,
        Schema::Tools,
        Schema::ToolDefinitions,
        Schema::LlmCalls,
        Schema::Planning,
        Schema::StoreCheckpoint,
        Schema::HistoryCheckpoint,
        Schema::ContextCheckpoint,
        Schema::Workspace,
    ];

    /// The schema's file name in `docs/schemas/` (`messages.schema.json`).
    pub fn file_name(self) -> &'static str {
        match self {
            Schema::Metadata => "metadata.schema.json",
            Schema::TaskState => "task_state.schema.json",
            Schema::Messages => "messages.schema.json",
            Schema::Current => "current.schema.json",
            Schema::Summaries => "summaries.schema.json",
            Schema::Tools => "tools.schema.json",
            Schema::ToolDefinitions => "tool_definitions.schema.json",
            Schema::LlmCalls => "llm_calls.schema.json",
            Schema::Planning => "planning.schema.json",
            Schema::StoreCheckpoint => "store_checkpoint.schema.json",
            Schema::HistoryCheckpoint => "history_checkpoint.schema.json",
            Schema::ContextCheckpoint => "context_checkpoint.schema.json",
            Schema::Workspace => "workspace.schema.json",
        }
    }

    /// The task-directory file it describes, relative to the task directory
    /// (`planning/{uuid}.jsonl` for the planning history).
    pub fn task_file(self) -> &'static str {
        match self {
            Schema::Metadata => files::METADATA,
            Schema::TaskState => files::TASK_STATE,
            Schema::Messages => files::MESSAGES,
            Schema::Current => files::CURRENT,
            Schema::Summaries => files::SUMMARIES,
            Schema::Tools => files::TOOLS,
            Schema::ToolDefinitions => files::TOOL_DEFINITIONS,
            Schema::LlmCalls => files::LLM_CALLS,
            Schema::Planning => "planning/{uuid}.jsonl",
            Schema::StoreCheckpoint => files::STORE_CHECKPOINT,
            Schema::HistoryCheckpoint => files::HISTORY_CHECKPOINT,
            Schema::ContextCheckpoint => files::CONTEXT_CHECKPOINT,
            Schema::Workspace => files::WORKSPACE,
        }
    }

    /// Whether the schema describes one line of a JSON Lines file (else the whole JSON file).
    pub fn is_line(self) -> bool {
        !matches!(
            self,
            Schema::Metadata
                | Schema::TaskState
                | Schema::ToolDefinitions
                | Schema::StoreCheckpoint
                | Schema::HistoryCheckpoint
                | Schema::ContextCheckpoint
                | Schema::Workspace
        )
    }

    /// The schema for the task-directory file `name` (relative to the task directory:
    /// `messages.jsonl`, `planning/0193….jsonl`); `None` for a file no schema describes
    /// (temporaries, `tool-results/*.txt`, `.torn` files, a component's own files).
    pub fn for_task_file(name: &str) -> Option<Schema> {
        if let Some(rest) = name
            .strip_prefix(files::PLANNING_DIR)
            .and_then(|r| r.strip_prefix('/'))
        {
            return (rest.ends_with(".jsonl") && !rest.contains('/')).then_some(Schema::Planning);
        }
        Schema::ALL
            .into_iter()
            .find(|s| *s != Schema::Planning && s.task_file() == name)
    }

    /// The schema's text, as in `docs/schemas/` (embedded at build time).
    pub fn text(self) -> &'static str {
        match self {
            Schema::Metadata => include_str!("../../../docs/schemas/metadata.schema.json"),
            Schema::TaskState => include_str!("../../../docs/schemas/task_state.schema.json"),
            Schema::Messages => include_str!("../../../docs/schemas/messages.schema.json"),
            Schema::Current => include_str!("../../../docs/schemas/current.schema.json"),
            Schema::Summaries => include_str!("../../../docs/schemas/summaries.schema.json"),
            Schema::Tools => include_str!("../../../docs/schemas/tools.schema.json"),
            Schema::ToolDefinitions => {
                include_str!("../../../docs/schemas/tool_definitions.schema.json")
            }
            Schema::LlmCalls => include_str!("../../../docs/schemas/llm_calls.schema.json"),
            Schema::Planning => include_str!("../../../docs/schemas/planning.schema.json"),
            Schema::StoreCheckpoint => {
                include_str!("../../../docs/schemas/store_checkpoint.schema.json")
            }
            Schema::HistoryCheckpoint => {
                include_str!("../../../docs/schemas/history_checkpoint.schema.json")
            }
            Schema::ContextCheckpoint => {
                include_str!("../../../docs/schemas/context_checkpoint.schema.json")
            }
            Schema::Workspace => include_str!("../../../docs/schemas/workspace.schema.json"),
        }
    }

    /// The schema as JSON (parsed once). Errors: the embedded text is not JSON (a build of a
    /// broken `docs/schemas/`; the unit tests catch it).
    pub fn json(self) -> Result<&'static Value, SchemaError> {
        compiled(self).map(|c| &c.json)
    }

    /// Validate `value` (a whole file's JSON, or one line's) against this schema: every
    /// mismatch found, or an empty list when it matches. Errors: the embedded schema does not
    /// compile (see [`Schema::json`]).
    pub fn validate(self, value: &Value) -> Result<Vec<Mismatch>, SchemaError> {
        let c = compiled(self)?;
        Ok(c.validator
            .iter_errors(value)
            .map(|e| Mismatch {
                // Only a line schema has line kinds (a whole file's items have titles too).
                kind: self
                    .is_line()
                    .then(|| kind_title(&c.json, e.evaluation_path().as_str()))
                    .flatten(),
                path: e.instance_path().as_str().to_string(),
                message: e.masked_with(preview(e.instance())).to_string(),
            })
            .collect())
    }
}

impl fmt::Display for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.file_name())
    }
}

/// An embedded schema that does not parse or compile (a broken build, never bad input).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the embedded JSON Schema docs/schemas/{file} does not compile: {message}")]
pub struct SchemaError {
    /// The schema's file name.
    pub file: &'static str,
    /// What the JSON parser or the schema compiler said.
    pub message: String,
}

/// One way a value does not match its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The `title` of the line kind the value was checked as (`tool result`, `summary_call`),
    /// when the schema has kinds and the mismatch is inside one.
    pub kind: Option<String>,
    /// JSON Pointer to the offending value inside the file or line (`/tool_calls/0/id`);
    /// empty for the value itself.
    pub path: String,
    /// What is wrong (the validator's message, with long values shortened).
    pub message: String,
}

impl fmt::Display for Mismatch {
    /// `path: message` (`/tool_calls/0/id: 7 is not of type "string"`), or the message alone for
    /// the value itself; the kind is left to [`describe`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// The mismatches of one value for one line of a report: the line kind they were found in
/// (`as a tool result line: `), then at most `max` of them joined by `; `, then how many more.
pub fn describe(mismatches: &[Mismatch], max: usize) -> String {
    let mut parts: Vec<String> = mismatches.iter().take(max).map(|m| m.to_string()).collect();
    if mismatches.len() > max {
        parts.push(format!("and {} more", mismatches.len() - max));
    }
    match mismatches.iter().find_map(|m| m.kind.as_deref()) {
        Some(kind) => format!("as a {kind} line: {}", parts.join("; ")),
        None => parts.join("; "),
    }
}

struct Compiled {
    json: Value,
    validator: Validator,
}

fn compiled(schema: Schema) -> Result<&'static Compiled, SchemaError> {
    static CELLS: [OnceLock<Result<Compiled, SchemaError>>; Schema::ALL.len()] =
        [const { OnceLock::new() }; Schema::ALL.len()];
    let index = Schema::ALL
        .iter()
        .position(|s| *s == schema)
        .unwrap_or_default();
    CELLS[index]
        .get_or_init(|| compile(schema))
        .as_ref()
        .map_err(Clone::clone)
}

fn compile(schema: Schema) -> Result<Compiled, SchemaError> {
    let error = |message: String| SchemaError {
        file: schema.file_name(),
        message,
    };
    let json: Value = serde_json::from_str(schema.text()).map_err(|e| error(e.to_string()))?;
    let validator = jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&json)
        .map_err(|e| error(e.to_string()))?;
    Ok(Compiled { json, validator })
}

/// The innermost `title` on the way to `evaluation_path` (a JSON Pointer into the schema through
/// the `$ref`s taken, `/then/$ref/properties/tool_call_id/$ref/type`), below the root: the line
/// kind (`$defs/tool_result` → `tool result`). Follows local `$ref`s. (The canonical keyword
/// location would end in the shared `$defs/tool_call_id` and lose the kind.)
fn kind_title(schema: &Value, evaluation_path: &str) -> Option<String> {
    let mut node = schema;
    let mut title = None;
    for raw in evaluation_path.split('/').skip(1) {
        let segment = raw.replace("~1", "/").replace("~0", "~");
        if segment == "$ref" {
            let target = node.get("$ref").and_then(Value::as_str)?;
            node = schema.pointer(target.strip_prefix('#')?)?;
        } else {
            node = match node {
                Value::Object(o) => o.get(&segment)?,
                Value::Array(a) => a.get(segment.parse::<usize>().ok()?)?,
                _ => return title,
            };
        }
        // Only kinds (objects with a title under $defs) name a line kind; a property's own
        // schema does not.
        if let Some(t) = node.get("title").and_then(Value::as_str)
            && node.get("properties").is_some()
            && node.get("required").is_some()
        {
            title = Some(t.to_string());
        }
    }
    title
}

/// How a value is shown in a message: short scalars as JSON, the rest by kind and size (a
/// line can hold a whole tool output).
fn preview(value: &Value) -> String {
    const MAX: usize = 40;
    match value {
        Value::String(s) if s.len() > MAX => format!("a string of {} bytes", s.len()),
        Value::Array(a) => format!("an array of {} items", a.len()),
        Value::Object(o) if o.is_empty() => "{}".to_string(),
        Value::Object(_) => "the object".to_string(),
        other => {
            let text = other.to_string();
            if text.len() > MAX {
                format!("{}…", &text[..text.floor_char_boundary(MAX)])
            } else {
                text
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_schema_compiles_and_declares_draft_2020_12() {
        for s in Schema::ALL {
            let json = s.json().unwrap();
            assert_eq!(
                json["$schema"], "https://json-schema.org/draft/2020-12/schema",
                "{s}"
            );
            assert!(
                json["title"].is_string() && json["description"].is_string(),
                "{s}"
            );
            // The schema itself is a valid draft 2020-12 schema (checked against the
            // meta-schema, not only compiled).
            assert!(jsonschema::meta::is_valid(json), "{s}");
        }
    }

    #[test]
    fn each_task_file_has_its_schema() {
        assert_eq!(
            Schema::for_task_file("messages.jsonl"),
            Some(Schema::Messages)
        );
        assert_eq!(
            Schema::for_task_file("tools.json"),
            Some(Schema::ToolDefinitions)
        );
        assert_eq!(Schema::for_task_file("tools.jsonl"), Some(Schema::Tools));
        assert_eq!(
            Schema::for_task_file("planning/0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a01.jsonl"),
            Some(Schema::Planning)
        );
        assert_eq!(Schema::for_task_file("planning/x.jsonl.torn"), None);
        assert_eq!(Schema::for_task_file("messages.jsonl.torn"), None);
        assert_eq!(Schema::for_task_file("tool-results/3.txt"), None);
        assert_eq!(Schema::for_task_file("request.json"), None);
        for s in Schema::ALL {
            if s != Schema::Planning {
                assert_eq!(Schema::for_task_file(s.task_file()), Some(s));
            }
        }
        // Every lasting file of ctxhost_format::files has a schema, except the folder of cut
        // tool outputs (plain text) and the provider's raw stream bytes (reply.stream,
        // failed-streams/: server-sent events or NDJSON as received, not a format of ours) and
        // the runs' trace ids (trace_ids: 32 hex digits a line) and the workspace's patch
        // (changes.patch: git's own format).
        for f in files::TASK_FILES {
            if f.temporary
                || [
                    files::TOOL_RESULTS_DIR,
                    files::REPLY_STREAM,
                    files::FAILED_STREAMS_DIR,
                    files::TRACE_IDS,
                    files::CHANGES_PATCH,
                ]
                .contains(&f.name)
            {
                continue;
            }
            let name = if f.name == files::PLANNING_DIR {
                "planning/u.jsonl".to_string()
            } else {
                f.name.to_string()
            };
            assert!(Schema::for_task_file(&name).is_some(), "{}", f.name);
        }
    }

    #[test]
    fn schemas_repeat_shared_definitions_identically() {
        // Each schema stands alone; a definition used by several ($defs of the same name) must
        // be the same everywhere.
        let mut seen: std::collections::BTreeMap<String, (Schema, Value)> = Default::default();
        for s in Schema::ALL {
            let Some(defs) = s.json().unwrap()["$defs"].as_object() else {
                continue;
            };
            for (name, def) in defs {
                // Kinds and per-file definitions differ on purpose; shared ones are these.
                if !["timestamp", "tool_call_id", "tool_calls", "tool_call_item"]
                    .contains(&name.as_str())
                {
                    continue;
                }
                let mut def = def.clone();
                if name == "timestamp" {
                    // The sentence may name what the timestamp is; the type may not differ.
                    def["description"] = Value::Null;
                }
                match seen.get(name) {
                    Some((first, d)) => assert_eq!(d, &def, "$defs/{name}: {first} vs {s}"),
                    None => {
                        seen.insert(name.clone(), (s, def));
                    }
                }
            }
        }
        assert!(seen.contains_key("tool_call_item"), "{:?}", seen.keys());
    }

    #[test]
    fn mismatches_name_the_kind_the_path_and_the_value() {
        let line = json!({"seq": 3, "role": "tool", "content": "x", "timestamp": "2026-01-02T03:04:05.000Z",
            "tokens": 5, "tool_call_id": 7});
        let m = Schema::Messages.validate(&line).unwrap();
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(m[0].kind.as_deref(), Some("tool result"));
        assert_eq!(m[0].path, "/tool_call_id");
        assert_eq!(
            describe(&m, 3),
            "as a tool result line: /tool_call_id: 7 is not of type \"string\""
        );
        // An old string summary id, a missing field and a bad timestamp.
        let summary = json!({"seq": 9, "role": "assistant", "content": "s", "timestamp": "yesterday",
            "summary_id": "sum-1"});
        let m = Schema::Messages.validate(&summary).unwrap();
        let text = describe(&m, 10);
        assert!(text.starts_with("as a summary line: "), "{text}");
        assert!(text.contains("\"tokens\" is a required property"), "{text}");
        assert!(
            text.contains("/summary_id: \"sum-1\" is not of type \"integer\""),
            "{text}"
        );
        assert!(
            text.contains("/timestamp: \"yesterday\" is not a \"date-time\""),
            "{text}"
        );
        // A long value is not copied into the message.
        let big = "x".repeat(10_000);
        let m = Schema::Current
            .validate(&json!({"role": "user", "content": big, "extra": 1}))
            .unwrap();
        let text = describe(&m, 10);
        assert!(text.len() < 200, "{text}");
        assert!(text.contains("extra"), "{text}");
        assert_eq!(describe(&m, 0), "as a plain message line: and 1 more");
        // A whole file has no line kinds, though its items' schemas have titles.
        let m = Schema::ToolDefinitions
            .validate(&json!([{"type": "function", "function": {"name": "x"}}]))
            .unwrap();
        assert!(!m.is_empty() && m.iter().all(|x| x.kind.is_none()), "{m:?}");
    }

    #[test]
    fn reasoning_items_and_is_error_are_part_of_the_message_schemas() {
        let t = "2026-01-02T03:04:05.678Z";
        let call = json!({"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}});
        let item = json!({"provider": "anthropic", "type": "thinking",
            "data": r#"{"type":"thinking","thinking":"t","signature":"s"}"#});
        let assistant = json!({"role": "assistant", "content": null, "tool_calls": [call],
            "reasoning": [item]});
        let tool = json!({"role": "tool", "content": "Error: x", "tool_call_id": "c1",
            "tool_name": "read", "is_error": true});
        let with_seq = |m: &Value, seq: u64| {
            let mut h = m.clone();
            h["seq"] = json!(seq);
            h["timestamp"] = json!(t);
            h["tokens"] = json!(5);
            h
        };
        for (schema, line) in [
            (Schema::Current, assistant.clone()),
            (Schema::Current, tool.clone()),
            (Schema::Messages, with_seq(&assistant, 3)),
            (Schema::Messages, with_seq(&tool, 4)),
        ] {
            assert_eq!(schema.validate(&line).unwrap(), [], "{schema}: {line}");
        }
        // An item without data, an unknown field in one, an empty list, reasoning on a tool
        // result, is_error false (written only when true).
        let bad = [
            json!({"provider": "anthropic", "type": "thinking"}),
            json!({"provider": "anthropic", "type": "thinking", "data": "{}", "signature": "s"}),
        ];
        for b in bad {
            let mut m = assistant.clone();
            m["reasoning"] = json!([b]);
            assert!(!Schema::Current.validate(&m).unwrap().is_empty(), "{m}");
        }
        let mut m = assistant.clone();
        m["reasoning"] = json!([]);
        assert!(!Schema::Current.validate(&m).unwrap().is_empty(), "{m}");
        let mut m = tool.clone();
        m["reasoning"] = assistant["reasoning"].clone();
        assert!(!Schema::Current.validate(&m).unwrap().is_empty(), "{m}");
        let mut m = with_seq(&tool, 4);
        m["is_error"] = json!(false);
        let text = describe(&Schema::Messages.validate(&m).unwrap(), 3);
        assert!(text.contains("/is_error"), "{text}");
    }

    #[test]
    fn each_line_kind_is_told_apart() {
        let t = "2026-01-02T03:04:05.678Z";
        let call = json!({"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}});
        let ok = [
            (
                Schema::Messages,
                json!({"seq": 1, "role": "system", "content": "s", "timestamp": t, "tokens": 5}),
            ),
            (
                Schema::Messages,
                json!({"seq": 2, "role": "assistant", "content": null, "timestamp": t, "tokens": 5, "tool_calls": [call]}),
            ),
            (
                Schema::Messages,
                json!({"seq": 3, "role": "tool", "content": "r", "timestamp": t, "tokens": 5, "tool_name": "read", "tool_call_id": "c1"}),
            ),
            (
                Schema::Messages,
                json!({"seq": 4, "role": "assistant", "content": "sum", "timestamp": t, "tokens": 5, "summary_id": 1}),
            ),
            // A spec-only tool result (no ctxhost extension) matches too.
            (
                Schema::Messages,
                json!({"seq": 5, "role": "tool", "content": "r", "timestamp": t, "tokens": 5, "tool_name": "read"}),
            ),
            (
                Schema::Current,
                json!({"role": "assistant", "content": null, "tool_calls": [call]}),
            ),
            (
                Schema::LlmCalls,
                json!({"type": "compression", "timestamp": t, "before_tokens": 9, "after_tokens": 3}),
            ),
            (
                Schema::Tools,
                json!({"seq": 1, "tool": "read", "args": "{bad", "status": "error", "error": "Error: x", "duration_ms": 0, "timestamp": t}),
            ),
            (
                Schema::TaskState,
                json!({"paused_at": t, "resume_count": 0, "reason": null}),
            ),
        ];
        for (s, v) in ok {
            assert_eq!(s.validate(&v).unwrap(), [], "{s}: {v}");
        }
        let bad = [
            // A plain message may not carry a tool field; content null needs tool calls.
            (
                Schema::Messages,
                json!({"seq": 1, "role": "user", "content": "u", "timestamp": t, "tokens": 5, "tool_call_id": "c"}),
                "plain message",
            ),
            (
                Schema::Current,
                json!({"role": "assistant", "content": null}),
                "plain message",
            ),
            (
                Schema::Current,
                json!({"role": "assistant", "content": "x", "tool_calls": []}),
                "tool call",
            ),
            (
                Schema::LlmCalls,
                json!({"type": "call", "n": 0, "timestamp": t, "context_tokens": 1, "context_length": 1, "duration_ms": 1, "status": "ok"}),
                "call",
            ),
            (
                Schema::Tools,
                json!({"seq": 1, "tool": "read", "args": {}, "status": "error", "duration_ms": 0, "timestamp": t}),
                "",
            ),
        ];
        for (s, v, kind) in bad {
            let m = s.validate(&v).unwrap();
            assert!(!m.is_empty(), "{s}: {v}");
            if !kind.is_empty() {
                assert_eq!(m[0].kind.as_deref(), Some(kind), "{s}: {m:?}");
            }
        }
        let unknown = Schema::LlmCalls.validate(&json!({"type": "nap"})).unwrap();
        assert_eq!(unknown.len(), 1, "{unknown:?}");
        assert_eq!(unknown[0].path, "/type");
    }
}
