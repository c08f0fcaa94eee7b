//! The thin shim between the generated WIT types ([`super::bindings`]) and the host's types
//! ([`super::types`], [`ctxhost_format::ChatMessage`]). Versioned with the WIT package
//! (`ctxhost:plugin@0.1.0`): a new WIT version gets its own bindings and its own shim, and the
//! rest of the host keeps using the host types.
//!
//! Chat messages: WIT `tool-calls: list<tool-call>` ↔ `Option<Vec<ToolCall>>` (an empty list
//! is `None`, so a message without calls serializes without `tool_calls`); a tool call's
//! `type` is always `function`.

use ctxhost_format::{ChatMessage, ToolCall};

use super::bindings::compressor::exports::ctxhost::plugin::compressor as wit_compressor;
use super::bindings::message_store::exports::ctxhost::plugin::message_store as wit_store;
use super::bindings::request_format::exports::ctxhost::plugin::request_format as wit_format;
use super::bindings::{wit_llm, wit_types};
use super::error::PluginError;
use super::types::{
    AddedMessage, Completion, CompressConfig, CompressResult, Reply, RequestConfig, RequestInfo,
    StoreStats, SummaryInfo, Usage,
};

impl From<&ChatMessage> for wit_types::ChatMessage {
    fn from(m: &ChatMessage) -> Self {
        wit_types::ChatMessage {
            role: m.role.clone(),
            content: m.content.clone(),
            tool_calls: m
                .calls()
                .iter()
                .map(|c| wit_types::ToolCall {
                    id: c.id.clone(),
                    name: c.function.name.clone(),
                    arguments: c.function.arguments.clone(),
                })
                .collect(),
            tool_call_id: m.tool_call_id.clone(),
            tool_name: m.tool_name.clone(),
        }
    }
}

impl From<wit_types::ChatMessage> for ChatMessage {
    fn from(m: wit_types::ChatMessage) -> Self {
        let calls: Vec<ToolCall> = m
            .tool_calls
            .into_iter()
            .map(|c| ToolCall::new(c.id, c.name, c.arguments))
            .collect();
        ChatMessage {
            role: m.role,
            content: m.content,
            tool_calls: if calls.is_empty() { None } else { Some(calls) },
            tool_call_id: m.tool_call_id,
            tool_name: m.tool_name,
        }
    }
}

impl From<wit_types::Usage> for Usage {
    fn from(u: wit_types::Usage) -> Self {
        Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.total_tokens,
        }
    }
}

impl From<Usage> for wit_types::Usage {
    fn from(u: Usage) -> Self {
        wit_types::Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.total_tokens,
        }
    }
}

impl From<wit_types::PluginError> for PluginError {
    fn from(e: wit_types::PluginError) -> Self {
        match e {
            wit_types::PluginError::Io(s) => PluginError::Io(s),
            wit_types::PluginError::InvalidInput(s) => PluginError::InvalidInput(s),
            wit_types::PluginError::Llm(s) => PluginError::Llm(s),
            wit_types::PluginError::Unsupported(s) => PluginError::Unsupported(s),
            wit_types::PluginError::Internal(s) => PluginError::Internal(s),
        }
    }
}

impl From<Completion> for wit_llm::Completion {
    fn from(c: Completion) -> Self {
        wit_llm::Completion {
            message: (&c.message).into(),
            usage: c.usage.map(Into::into),
        }
    }
}

impl From<wit_store::StoreStats> for StoreStats {
    fn from(s: wit_store::StoreStats) -> Self {
        StoreStats {
            history_count: s.history_count,
            current_count: s.current_count,
            current_tokens: s.current_tokens,
        }
    }
}

impl From<wit_store::AddedMessage> for AddedMessage {
    fn from(a: wit_store::AddedMessage) -> Self {
        AddedMessage {
            seq: a.seq,
            tokens: a.tokens,
        }
    }
}

impl From<&RequestConfig> for wit_format::RequestConfig {
    fn from(c: &RequestConfig) -> Self {
        wit_format::RequestConfig {
            model: c.model.clone(),
            messages_file: c.messages_file.clone(),
            request_file: c.request_file.clone(),
            tools_file: c.tools_file.clone(),
            max_output_tokens: c.max_output_tokens,
            temperature: c.temperature,
        }
    }
}

impl From<wit_format::RequestInfo> for RequestInfo {
    fn from(i: wit_format::RequestInfo) -> Self {
        RequestInfo {
            endpoint_path: i.endpoint_path,
            bytes: i.bytes,
            messages: i.messages,
        }
    }
}

impl From<wit_format::Reply> for Reply {
    fn from(r: wit_format::Reply) -> Self {
        Reply {
            message: r.message.into(),
            usage: r.usage.map(Into::into),
            finish_reason: r.finish_reason,
        }
    }
}

impl From<&CompressConfig> for wit_compressor::CompressConfig {
    fn from(c: &CompressConfig) -> Self {
        wit_compressor::CompressConfig {
            context_length: c.context_length,
            threshold: c.threshold,
            keep_recent_messages: c.keep_recent_messages,
            summary_prompt: c.summary_prompt.clone(),
            reserve_output_tokens: c.reserve_output_tokens,
        }
    }
}

impl From<wit_compressor::SummaryInfo> for SummaryInfo {
    fn from(s: wit_compressor::SummaryInfo) -> Self {
        SummaryInfo {
            id: s.id,
            start_seq: s.start_seq,
            end_seq: s.end_seq,
            summary: s.summary,
            original_tokens: s.original_tokens,
            summary_tokens: s.summary_tokens,
        }
    }
}

impl From<wit_compressor::CompressResult> for CompressResult {
    fn from(r: wit_compressor::CompressResult) -> Self {
        CompressResult {
            context_file: r.context_file,
            summary: r.summary.map(Into::into),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_messages_round_trip_through_wit() {
        let m = ChatMessage {
            role: "assistant".into(),
            content: None,
            tool_calls: Some(vec![ToolCall::new("call_1", "read", r#"{"path":"a"}"#)]),
            ..Default::default()
        };
        let wit: wit_types::ChatMessage = (&m).into();
        assert_eq!(wit.tool_calls.len(), 1);
        assert_eq!(ChatMessage::from(wit), m);

        let t = ChatMessage {
            role: "tool".into(),
            content: Some("上下文".into()),
            tool_call_id: Some("call_1".into()),
            tool_name: Some("read".into()),
            ..Default::default()
        };
        assert_eq!(ChatMessage::from(wit_types::ChatMessage::from(&t)), t);
    }
}
