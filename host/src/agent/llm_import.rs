//! The host side of a compressor's `llm` import: a completion request through the task's own
//! request format and transport.
//!
//! The component names a JSONL file of chat messages in the task directory; the host writes
//! `llm_request.json` from it with its own request-format instance, POSTs it, parses
//! `llm_response.json`, and counts the call and its tokens (prompt-cache reads and writes too)
//! on the task's row. Both files are
//! deleted after a successful call and kept after a failed one (the error says so). With
//! [`HostLlm::interruptible`], a call gives way to a pause or stop of the task as the agent
//! loop's own calls do.

use std::io::BufRead;
use std::time::{Duration, Instant};

use ctxhost_format::{ChatMessage, estimate_message_tokens};

use super::exchange::{ExchangeError, exchange};
use crate::llm::{Interruption, Transport};
use crate::runtime::{Completion, LlmImport, RequestConfig, RequestFormat};
use crate::task::{CallLog, UsageDelta, UsageMeter};
use crate::task_dir::TaskDir;
use crate::untrusted;

/// The probe [`HostLlm::interruptible`] asks (its home is the task, which makes it).
pub use crate::task::InterruptProbe;

/// Request body of a compressor's completion, in the task directory.
pub const LLM_REQUEST_FILE: &str = ctxhost_format::files::LLM_REQUEST;
/// Response body of a compressor's completion, in the task directory.
pub const LLM_RESPONSE_FILE: &str = ctxhost_format::files::LLM_RESPONSE;

/// [`LlmImport`] backed by the task's request format and transport.
pub struct HostLlm {
    format: RequestFormat,
    transport: Transport,
    dir: TaskDir,
    model: String,
    temperature: Option<f32>,
    usage: UsageMeter,
    /// Whether the task was asked to pause or stop, and the grace of a reply in flight.
    interrupt: Option<(InterruptProbe, Duration)>,
    /// `llm.provider`, for the calls' spans.
    provider: String,
    /// Whose calls these are on the spans (`compressor`, `strategy`).
    purpose: &'static str,
}

impl HostLlm {
    /// For the task in `dir`, counting its calls with `usage`. `format` is a request-format
    /// instance of its own (not the agent loop's).
    pub fn new(
        format: RequestFormat,
        transport: Transport,
        dir: &TaskDir,
        model: &str,
        temperature: Option<f32>,
        usage: UsageMeter,
    ) -> HostLlm {
        HostLlm {
            format,
            transport,
            dir: dir.clone(),
            model: model.to_string(),
            temperature,
            usage,
            interrupt: None,
            provider: String::new(),
            purpose: "side_call",
        }
    }

    /// The calls' spans name `provider` (`llm.provider`) and `purpose` (`compressor`,
    /// `strategy`): [`crate::telemetry::genai::chat`].
    pub fn traced_as(mut self, provider: &str, purpose: &'static str) -> HostLlm {
        self.provider = provider.to_string();
        self.purpose = purpose;
        self
    }

    /// Calls that give way to a pause or stop of the task: `requested` is asked before each
    /// attempt and while it runs; a reply in flight gets `grace` (`llm.interrupt_grace_secs`),
    /// then the call fails with `interrupted` and the component's call fails with it.
    pub fn interruptible(mut self, requested: InterruptProbe, grace: Duration) -> HostLlm {
        self.interrupt = Some((requested, grace));
        self
    }

    /// Estimated tokens of the messages in `rel` (streamed), a path the component gave: it
    /// must pass [`untrusted::component_path`].
    fn estimate_file_tokens(&self, rel: &str) -> Result<u64, String> {
        let rel =
            untrusted::component_path(&self.dir, rel).map_err(|e| format!("messages-file: {e}"))?;
        let rel = rel.as_str();
        let f = self.dir.open_read(rel).map_err(|e| format!("{rel}: {e}"))?;
        let mut total = 0u64;
        for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
            let line = line.map_err(|e| format!("{rel}: line {}: {e}", i + 1))?;
            if line.trim().is_empty() {
                continue;
            }
            let m: ChatMessage = serde_json::from_str(&line)
                .map_err(|e| format!("{rel}: line {}: not a chat message: {e}", i + 1))?;
            total += estimate_message_tokens(&m);
        }
        Ok(total)
    }
}

impl LlmImport for HostLlm {
    fn interrupt_probe(&self) -> Option<InterruptProbe> {
        self.interrupt.as_ref().map(|(probe, _)| probe.clone())
    }

    fn complete(
        &mut self,
        messages_file: &str,
        max_output_tokens: u32,
        deadline: Instant,
    ) -> Result<Completion, String> {
        let prompt_tokens = self.estimate_file_tokens(messages_file)?;
        let config = RequestConfig {
            model: self.model.clone(),
            messages_file: messages_file.to_string(),
            request_file: LLM_REQUEST_FILE.to_string(),
            tools_file: None,
            max_output_tokens: Some(max_output_tokens),
            temperature: self.temperature,
            stream: false,
            stream_usage: false,
            reasoning: None,
        };
        let mut span = crate::telemetry::genai::chat(&self.provider, &self.model, self.purpose);
        let started = std::time::Instant::now();
        let probe = self.interrupt.as_ref().map(|(probe, _)| probe.clone());
        let asked = || probe.as_ref().is_some_and(InterruptProbe::requested);
        let interruption = self.interrupt.as_ref().map(|(_, grace)| Interruption {
            requested: &asked,
            grace: *grace,
        });
        let result = exchange(
            &mut self.format,
            &self.transport,
            &self.dir,
            &config,
            LLM_RESPONSE_FILE,
            Some(deadline),
            interruption.as_ref(),
        );
        let ms = started.elapsed().as_millis() as u64;
        let now = crate::db::now_rfc3339();
        let reply = match result {
            Ok(done) => {
                CallLog::new(&self.dir).record_summary_call(
                    prompt_tokens,
                    done.request.bytes,
                    ms,
                    done.reply.usage,
                    None,
                    false,
                    &now,
                );
                crate::telemetry::genai::chat_done(
                    &mut span,
                    done.reply.model.as_deref(),
                    done.reply.usage,
                    done.reply.finish_reason.as_deref(),
                );
                done.reply
            }
            Err(e) => {
                span.fail(&e.error_type(), &e.error_type());
                if e.is_interrupted()
                    && let Some((probe, _)) = &self.interrupt
                {
                    probe.mark_gave_way();
                }
                let bytes = e.request_bytes().unwrap_or_else(|| {
                    self.dir
                        .metadata(LLM_REQUEST_FILE)
                        .ok()
                        .flatten()
                        .map_or(0, |m| m.len())
                });
                CallLog::new(&self.dir).record_summary_call(
                    prompt_tokens,
                    bytes,
                    ms,
                    None,
                    Some(&e.to_string()),
                    e.is_interrupted(),
                    &now,
                );
                if matches!(e, ExchangeError::Read { .. }) {
                    // The provider answered: count the call (usage unknown).
                    self.usage
                        .add(UsageDelta::llm_call(0))
                        .map_err(|e| e.to_string())?;
                }
                return Err(e.to_string());
            }
        };
        let tokens = match reply.usage {
            Some(u) if u.total_tokens > 0 => u.total_tokens,
            _ => prompt_tokens + estimate_message_tokens(&reply.message),
        };
        if let Some(u) = reply.usage {
            self.usage
                .add(UsageDelta {
                    cache_read_tokens: u.cache_read_tokens,
                    cache_creation_tokens: u.cache_creation_tokens,
                    ..UsageDelta::default()
                })
                .map_err(|e| e.to_string())?;
        }
        self.usage
            .add(UsageDelta::llm_call(tokens))
            .map_err(|e| e.to_string())?;
        Ok(Completion {
            message: reply.message,
            usage: reply.usage,
        })
    }
}
