//! The builtin components, embedded in the binary: `builtin:NAME` is the file
//! `<CTXHOST_GUEST_DIR>/<NAME with - → _>.wasm` built by `host/build.rs` from
//! `guest-components/`.
//!
//! To add a builtin, add its crate to `guest-components/` and a line to [`BUILTINS`].

/// `(NAME, component bytes)` of every builtin.
const BUILTINS: &[(&str, &[u8])] = &[
    (
        "jsonl-store",
        include_bytes!(concat!(env!("CTXHOST_GUEST_DIR"), "/jsonl_store.wasm")),
    ),
    (
        "openai-chat",
        include_bytes!(concat!(env!("CTXHOST_GUEST_DIR"), "/openai_chat.wasm")),
    ),
    (
        "openai-responses",
        include_bytes!(concat!(env!("CTXHOST_GUEST_DIR"), "/openai_responses.wasm")),
    ),
    (
        "ollama-chat",
        include_bytes!(concat!(env!("CTXHOST_GUEST_DIR"), "/ollama_chat.wasm")),
    ),
    (
        "llm-summarizer",
        include_bytes!(concat!(env!("CTXHOST_GUEST_DIR"), "/llm_summarizer.wasm")),
    ),
    (
        "observation-masking",
        include_bytes!(concat!(
            env!("CTXHOST_GUEST_DIR"),
            "/observation_masking.wasm"
        )),
    ),
    (
        "prompted-tools",
        include_bytes!(concat!(env!("CTXHOST_GUEST_DIR"), "/prompted_tools.wasm")),
    ),
    (
        "anthropic-messages",
        include_bytes!(concat!(
            env!("CTXHOST_GUEST_DIR"),
            "/anthropic_messages.wasm"
        )),
    ),
    (
        "react",
        include_bytes!(concat!(env!("CTXHOST_GUEST_DIR"), "/react.wasm")),
    ),
    (
        "plan-execute",
        include_bytes!(concat!(env!("CTXHOST_GUEST_DIR"), "/plan_execute.wasm")),
    ),
];

/// The builtin request formats that always write an unstreamed request (`"stream": false`),
/// whatever `stream-reply` asks: the host asks them for none, so it never reads a request
/// body back to learn what was written (issue 37 item 12).
const WHOLE_BODY_FORMATS: &[&str] = &["prompted-tools"];

/// Whether the component `spec` (`builtin:NAME` or a path) is a builtin request format that
/// never asks for a stream ([`WHOLE_BODY_FORMATS`]).
pub fn writes_whole_body_requests(spec: &str) -> bool {
    spec.strip_prefix("builtin:")
        .is_some_and(|name| WHOLE_BODY_FORMATS.contains(&name))
}

/// The bytes of builtin `name` (without the `builtin:` prefix).
pub fn bytes(name: &str) -> Option<&'static [u8]> {
    BUILTINS.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
}

/// Every builtin's NAME (without the `builtin:` prefix), in a stable order.
pub fn names() -> Vec<&'static str> {
    BUILTINS.iter().map(|(n, _)| *n).collect()
}
