//! The recovery of a Responses API request whose reasoning items the provider cannot decrypt
//! (issue 37 item 8): OpenAI answers 400 `invalid_encrypted_content` when an encrypted
//! reasoning item was made under another key (another organisation or project, a rotated key,
//! a model that no longer reads it). Its documented recovery is to send the request again
//! without the reasoning items; the agent loop does that once per call, from a copy of the
//! context ([`WITHOUT_REASONING`]) whose assistant messages keep everything but those items.
//! current.jsonl and messages.jsonl keep them.

use std::io::{BufReader, BufWriter, Write};

use anyhow::Context;
use ctxhost_format::ChatMessage;
use ctxhost_format::jsonl::{LineReader, write_line};

use crate::agent::exchange::ExchangeError;
use crate::task_dir::TaskDir;

/// The context without the reasoning items, written for the one retry (a `.tmp` name: a
/// temporary of the step, deleted after it or by crash repair).
pub const WITHOUT_REASONING: &str = "current.no-reasoning.jsonl.tmp";

/// The error code of OpenAI's answer (`error.code`).
pub const INVALID_ENCRYPTED_CONTENT: &str = "invalid_encrypted_content";

/// Whether `e` is the provider's 400 saying an encrypted reasoning item could not be
/// decrypted (`"code": "invalid_encrypted_content"` in the error body).
pub fn is_invalid_encrypted_content(e: &ExchangeError) -> bool {
    use crate::llm::TransportError as T;
    matches!(e, ExchangeError::Post { source: T::Http { status: 400, body, provider_error, .. }, .. }
        if body.contains(INVALID_ENCRYPTED_CONTENT)
            || provider_error.as_deref().is_some_and(|p| p.contains(INVALID_ENCRYPTED_CONTENT)))
}

/// Writes [`WITHOUT_REASONING`] from the chat messages of `from`, each without its reasoning
/// items of `provider` (the order record included). Returns the messages whose items were
/// left out. Errors name the file and line of a message that cannot be read.
pub fn write(dir: &TaskDir, from: &str, provider: &str) -> anyhow::Result<u64> {
    let input = dir
        .open_read(from)
        .with_context(|| format!("opening {}", dir.show(from)))?;
    let mut lines = LineReader::new(BufReader::new(input), dir.show(from));
    let out = dir
        .create(WITHOUT_REASONING)
        .with_context(|| format!("creating {}", dir.show(WITHOUT_REASONING)))?;
    let mut out = BufWriter::new(out);
    let mut changed = 0;
    while let Some((_, mut m)) = lines.next_value::<ChatMessage>()? {
        let before = m.reasoning.len();
        m.reasoning.retain(|r| r.provider != provider);
        if m.reasoning.len() != before {
            changed += 1;
        }
        write_line(&mut out, &m)?;
    }
    out.flush()
        .with_context(|| format!("writing {}", dir.show(WITHOUT_REASONING)))?;
    Ok(changed)
}
