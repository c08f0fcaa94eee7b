//! The host's rules for a model's reply, whatever the format plugin returned: not empty, role
//! and tool calls normalised, its text's prefix kept for the strategy's hooks when the text came
//! in a file.

use super::*;

/// A malformed reply (it cannot be read, or it is empty) is asked for again this many times
/// before the task fails (the files of the last attempt are kept).
pub const MAX_MALFORMED_REPLY_RETRIES: u32 = 2;

/// Bytes of a reply's text the loop keeps in memory when the text came in a file (WIT
/// `content-file`): what the strategy's hooks are given of it (`after-reply`'s `reply`): 64 KiB.
pub const MAX_REPLY_PREFIX_BYTES: usize = 64 * 1024;

/// The first [`MAX_REPLY_PREFIX_BYTES`] of the text in `file`, with a note of how much was
/// left out when it is longer (empty when it cannot be read: the text is in the history).
pub(super) fn text_prefix(dir: &crate::task_dir::TaskDir, file: &str) -> String {
    let read = dir.open_read_if_exists(file).and_then(|f| {
        let f = f.ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
        let len = f.metadata()?.len();
        let (mut text, longer) = ctxhost_format::content_file::prefix(f, MAX_REPLY_PREFIX_BYTES)?;
        if longer {
            text.push_str(&format!(
                "\n[… {} more bytes of this reply are in messages.jsonl]",
                len - text.len() as u64
            ));
        }
        Ok(text)
    });
    read.unwrap_or_else(|e| {
        tracing::warn!("cannot read the start of {}: {e}", dir.show(file));
        String::new()
    })
}

/// The reply of an LLM call cannot be used when it has neither text nor tool calls.
pub(super) fn reject_empty_reply(reply: &Reply) -> Result<(), String> {
    let m = &reply.message;
    // A text in a file holds more than white space (the exchange checked it).
    if m.calls().is_empty()
        && reply.content_file.is_none()
        && m.content.as_deref().is_none_or(|c| c.trim().is_empty())
    {
        return Err(format!(
            "the model returned an empty answer (no content and no tool calls; finish_reason: {})",
            untrusted::name(reply.finish_reason.as_deref().unwrap_or("none"))
        ));
    }
    Ok(())
}

/// The host's rules for an assistant reply, whatever the format plugin returned: role
/// `assistant`; every tool call has the `function` type and arguments (`{}` when empty). Ids
/// are made unique in the conversation by [`TaskContext::make_call_ids_unique`].
pub(super) fn normalise_reply(mut message: ChatMessage) -> ChatMessage {
    message.role = "assistant".to_string();
    message.tool_call_id = None;
    message.tool_name = None;
    if let Some(calls) = message.tool_calls.as_mut() {
        for call in calls.iter_mut() {
            call.kind = "function".to_string();
            if call.function.arguments.trim().is_empty() {
                call.function.arguments = "{}".to_string();
            }
        }
        if calls.is_empty() {
            message.tool_calls = None;
        }
    }
    message
}
