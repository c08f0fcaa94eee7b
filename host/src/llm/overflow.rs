//! Recognising a provider's "the context is too long" answer, whatever the provider: it is not
//! worth retrying as it is, but a compressed context may pass (the agent loop compresses and
//! sends again, [`crate::agent`]).
//!
//! The wordings, as the servers send them (matched case-insensitively in the provider's error
//! message or the response body):
//!
//! | provider | answer |
//! |---|---|
//! | OpenAI | 400 `{"error": {"code": "context_length_exceeded", "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in …"}}` |
//! | Anthropic | 400 `invalid_request_error`: `prompt is too long: 210000 tokens > 200000 maximum` |
//! | vLLM | 400 `This model's maximum context length is 4096 tokens. However, you requested …`, or `… is longer than the maximum model length of 4096` |
//! | llama.cpp server | 400 (500 before 2025) `exceed_context_size_error`: `the request exceeds the available context size, try increasing it` |
//! | Ollama | 400 `the input length exceeds the context length` (also `input exceeds context length`) |
//! | LM Studio | 400 `Trying to keep the first 5000 tokens when context the overflows. However, the model is loaded with context length of only 4096 tokens …` |
//! | llama-cpp-python | `Requested tokens (2285) exceed context window of 2048` |

/// Lower-case phrases of a context-overflow answer (see the module docs).
pub const CONTEXT_OVERFLOW_PHRASES: &[&str] = &[
    "context_length_exceeded",
    "maximum context length",
    "prompt is too long",
    "exceed_context_size_error",
    "exceeds the available context size",
    "exceeds the context length",
    "exceeds context length",
    "exceed context window",
    "exceeds the context window",
    "longer than the maximum model length",
    "context the overflows",
    "when context overflows",
    "context length of only",
    "context length exceeded",
    "context window exceeded",
];

/// Whether `text` (a provider's error message or error body) says that the request's context is
/// longer than the model's window.
pub fn is_context_overflow(text: &str) -> bool {
    let lower = text.to_lowercase();
    CONTEXT_OVERFLOW_PHRASES.iter().any(|p| lower.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_provider_wording_is_recognised() {
        for body in [
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9013 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
            r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion).","type":"BadRequestError","code":400}"#,
            "The decoder prompt (length 5000) is longer than the maximum model length of 4096.",
            r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":14429,"n_ctx":8192}}"#,
            r#"{"error":{"code":500,"message":"the request exceeds the available context size. try increasing the context size or enable context shift","type":"invalid_request_error"}}"#,
            r#"{"error":"the input length exceeds the context length"}"#,
            "input exceeds context length",
            r#"{"error":"Trying to keep the first 4406 tokens when context the overflows. However, the model is loaded with context length of only 4096 tokens, which is not enough."}"#,
            "Requested tokens (2285) exceed context window of 2048",
        ] {
            assert!(is_context_overflow(body), "{body}");
        }
    }

    #[test]
    fn other_errors_are_not_overflows() {
        for body in [
            r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#,
            r#"{"error":{"message":"Invalid 'messages[2].content': string too long","type":"invalid_request_error"}}"#,
            "model not found",
            "<html>502 Bad Gateway</html>",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ] {
            assert!(!is_context_overflow(body), "{body}");
        }
    }
}
