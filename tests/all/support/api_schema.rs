//! The official request schemas of the APIs the fake LLM server plays
//! (`tests/golden/api-schemas/`, sources in its README.md), as validators: OpenAI's
//! `CreateResponse` and `CreateChatCompletionRequest` from its OpenAPI document, and the
//! Anthropic Messages request from the SDK's types. The fake's checks
//! ([`super::responses_api::Issued::check_request`], [`super::anthropic_api::check_request`])
//! refuse a body that does not validate, so every request a test sends is checked.
#![allow(dead_code)]

use std::sync::OnceLock;

use jsonschema::Validator;
use serde_json::{Value, json};

/// Which request schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `POST /v1/responses`: OpenAI `CreateResponse`.
    Responses,
    /// `POST /v1/chat/completions`: OpenAI `CreateChatCompletionRequest`.
    ChatCompletions,
    /// `POST /v1/messages`: Anthropic `MessageCreateParams`.
    Messages,
}

fn golden(name: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/golden/api-schemas")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The OpenAPI document's schema `name` as a root schema (its `$ref`s resolve in the
/// document's `components`).
fn openai(name: &str) -> Value {
    let doc = golden("openai.json");
    json!({"$ref": format!("#/components/schemas/{name}"), "components": doc["components"]})
}

fn validator(api: Api) -> &'static Validator {
    static CELLS: [OnceLock<Validator>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let (i, schema): (usize, fn() -> Value) = match api {
        Api::Responses => (0, || openai("CreateResponse")),
        Api::ChatCompletions => (1, || openai("CreateChatCompletionRequest")),
        Api::Messages => (2, || golden("anthropic-messages.json")),
    };
    CELLS[i].get_or_init(|| {
        jsonschema::draft202012::options()
            .build(&schema())
            .unwrap_or_else(|e| panic!("{api:?} schema: {e}"))
    })
}

/// `Err` with every place `body` breaks the official schema of `api` (`at /path: what`).
pub fn check(api: Api, body: &Value) -> Result<(), String> {
    let errors: Vec<String> = validator(api)
        .iter_errors(body)
        .map(|e| format!("at {}: {e}", e.instance_path().as_str()))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the request does not validate against the official {api:?} schema: {}",
            errors.join("; ")
        ))
    }
}
