//! One exchange with the provider: write the request file with the request-format component
//! (streaming the messages file), POST it with the transport, parse the response file with the
//! component. Shared by the agent loop (`request.json` / `response.json` from current.jsonl) and
//! the compressor's `llm` import (`llm_request.json` / `llm_response.json`).
//!
//! Both files are deleted after a successful exchange and kept after a failed one, for
//! debugging (a reply the caller rejects, such as an empty answer, included); every error says
//! which files were kept.

use std::time::Instant;

use crate::llm::{Interruption, PostOutcome, Transport, TransportError, keep_failed_stream};
use crate::runtime::{Reply, RequestConfig, RequestFormat, RequestInfo, RuntimeError};
use crate::task_dir::TaskDir;
use crate::untrusted;
use ctxhost_format::files::REPLY_STREAM;

/// Why an exchange failed. `Read` means the provider did answer (a call to count).
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The request file could not be written.
    #[error("building {request} from {messages} failed: {source}")]
    Build {
        /// The request file (relative to the task directory).
        request: String,
        /// The messages file it was built from.
        messages: String,
        /// The underlying error.
        source: RuntimeError,
    },
    /// The request format returned an endpoint path that is not a URL path (nothing was sent).
    #[error(
        "request format {component}: {reason} ({request} kept in the task directory for debugging)"
    )]
    Endpoint {
        /// The component: `builtin:NAME` or its path.
        component: String,
        /// Why it was refused ([`untrusted::endpoint_path`]).
        reason: String,
        /// The request file (relative to the task directory).
        request: String,
    },
    /// The POST failed (after the transport's retries), or gave way to a pause or stop (then
    /// the request file is deleted: it is written again from the context on resume).
    #[error("{source}{}", kept_note(source, request))]
    Post {
        /// The request file (relative to the task directory).
        request: String,
        /// Bytes of the request that was sent (or would have been).
        request_bytes: u64,
        /// The underlying error.
        source: TransportError,
    },
    /// The response could not be parsed.
    #[error(
        "the response could not be read: {source}{} ({request} and {response} kept in the task directory for debugging)",
        if *whole_stream { "; the stream came whole (not cut off), so it was not sent again: the same reply would fail the same way" } else { "" }
    )]
    Read {
        /// The request file (relative to the task directory).
        request: String,
        /// The response file.
        response: String,
        /// The underlying error.
        source: RuntimeError,
        /// A streamed reply that reached its end but cannot be folded (an event the format
        /// cannot read): deterministic, so neither the exchange nor the caller sends it again.
        whole_stream: bool,
    },
    /// The response was read, but the caller cannot use the reply (e.g. an empty answer).
    #[error(
        "the reply cannot be used: {reason} ({request} and {response} kept in the task directory for debugging)"
    )]
    Rejected {
        /// The request file (relative to the task directory).
        request: String,
        /// The response file.
        response: String,
        /// Why the caller rejected it.
        reason: String,
        /// Total tokens the provider reported for the call (0 when it reported none).
        usage_tokens: u64,
    },
}

/// Where the request of a failed POST is: kept for debugging, unless the call gave way to a
/// pause or stop.
fn kept_note(source: &TransportError, request: &str) -> String {
    if source.is_interrupted() {
        String::new()
    } else {
        format!(" ({request} kept in the task directory for debugging)")
    }
}

impl ExchangeError {
    /// Bytes of the request, when it was written and the POST failed or gave way; `None` for
    /// the other errors (the request file, when kept, tells).
    pub fn request_bytes(&self) -> Option<u64> {
        match self {
            ExchangeError::Post { request_bytes, .. } => Some(*request_bytes),
            _ => None,
        }
    }

    /// The provider answered (the call counts), but with a reply that could not be read or used:
    /// asking again may give a usable one. Not for a stream that came whole yet cannot be
    /// folded (`Read` with `whole_stream`): that fails the same way each time. Nor for a stream
    /// cut off: the exchange already sent it `llm.max_retries` times again, the whole budget of
    /// the call (asking again would multiply it).
    pub fn is_malformed_reply(&self) -> bool {
        match self {
            ExchangeError::Read {
                whole_stream,
                source,
                ..
            } => !whole_stream && !is_cut_off(source),
            ExchangeError::Rejected { .. } => true,
            _ => false,
        }
    }

    /// The call was given up for a pause or stop request of the task
    /// ([`TransportError::Interrupted`]).
    pub fn is_interrupted(&self) -> bool {
        matches!(self, ExchangeError::Post { source, .. } if source.is_interrupted())
    }

    /// The provider answered that the context is longer than the model's window
    /// ([`TransportError::is_context_overflow`]).
    pub fn is_context_overflow(&self) -> bool {
        matches!(self, ExchangeError::Post { source, .. } if source.is_context_overflow())
    }

    /// A short class of the failure for a span's `error.type` (no text from the provider): the
    /// HTTP status code of a non-2xx answer (`429`, `500`, as the semantic conventions say for
    /// HTTP errors), else a name (`timeout`, `connection_error`, `malformed_reply`, ...).
    pub fn error_type(&self) -> std::borrow::Cow<'static, str> {
        use crate::llm::TransportError as T;
        let name = if self.is_interrupted() {
            "interrupted"
        } else if self.is_context_overflow() {
            "context_overflow"
        } else {
            match self {
                ExchangeError::Build { .. } => "request_build",
                ExchangeError::Endpoint { .. } => "endpoint",
                ExchangeError::Post { source, .. } => match source {
                    T::Http { status, .. } => return status.to_string().into(),
                    T::Timeout { .. } => "timeout",
                    T::Connection { .. } => "connection_error",
                    T::TooLarge { .. } => "response_too_large",
                    _ => "http_error",
                },
                ExchangeError::Read { .. } => "malformed_reply",
                ExchangeError::Rejected { .. } => "rejected_reply",
            }
        };
        name.into()
    }
}

/// A completed exchange.
#[derive(Debug)]
pub struct Exchange {
    /// The parsed reply.
    pub reply: Reply,
    /// What the request format wrote.
    pub request: RequestInfo,
    /// How the POST went (status, attempts).
    pub post: PostOutcome,
    /// The error of a request the provider refused for its `stream_options` (HTTP 400 naming
    /// the argument: [`refuses_stream_options`]), after which the request was written without
    /// it and sent again within the call's budget; the reply's usage is then unknown.
    pub refused_stream_usage: Option<String>,
}

/// Run one exchange in `dir` (the task directory) for `config`, writing the response body to
/// `response_file` (relative to `dir`), finished by `deadline` when one is given and giving
/// way to a pause or stop with `interruption` (the `llm` import of a compressor or strategy).
/// The endpoint path the format returns is checked ([`untrusted::endpoint_path`]). On success
/// both files are deleted.
pub fn exchange(
    format: &mut RequestFormat,
    transport: &Transport,
    dir: &TaskDir,
    config: &RequestConfig,
    response_file: &str,
    deadline: Option<Instant>,
    interruption: Option<&Interruption<'_>>,
) -> Result<Exchange, ExchangeError> {
    exchange_checked(
        format,
        transport,
        dir,
        config,
        response_file,
        deadline,
        interruption,
        &|_| Ok(()),
    )
}

/// [`exchange`], with the reply checked by `accept` before the files are deleted: a reply it
/// rejects is [`ExchangeError::Rejected`] and both files are kept. With `interruption` the
/// POST gives way to a pause or stop of the task ([`Transport::post_file_with`]), with or
/// without a `deadline`.
#[allow(clippy::too_many_arguments)]
pub fn exchange_checked(
    format: &mut RequestFormat,
    transport: &Transport,
    dir: &TaskDir,
    config: &RequestConfig,
    response_file: &str,
    deadline: Option<Instant>,
    interruption: Option<&Interruption<'_>>,
    accept: &dyn Fn(&Reply) -> Result<(), String>,
) -> Result<Exchange, ExchangeError> {
    // A stream only for a format that reads one (not a builtin that always writes an
    // unstreamed request); otherwise the same request unstreamed. The request body
    // is never read back to learn what the format wrote (issue 37 item 12: that parse was
    // half the CPU of a 64 MiB step): a format that writes `"stream": false` all the same
    // gets a whole body, which the transport reads as a server ignoring the stream.
    let streamed = config.stream && format.reads_streams();
    let unstreamed;
    let config = if config.stream && !streamed {
        unstreamed = RequestConfig {
            stream: false,
            ..config.clone()
        };
        &unstreamed
    } else {
        config
    };
    let request_name = config.request_file.clone();
    let mut request = format
        .write_request(config)
        .map_err(|source| ExchangeError::Build {
            request: request_name.clone(),
            messages: config.messages_file.clone(),
            source,
        })?;
    let endpoint_path = untrusted::endpoint_path(&request.endpoint_path)
        .map_err(|reason| ExchangeError::Endpoint {
            component: format.component().to_string(),
            reason,
            request: request_name.clone(),
        })?
        .to_string();
    let endpoint = endpoint_path.as_str();
    let whole_file = response_file;
    let response_file = if streamed {
        REPLY_STREAM
    } else {
        response_file
    };
    // Set when a server answered a streamed request with one whole body.
    let mut whole = false;
    // What the reply is read from is bounded by the transport; what the format makes of it
    // (its reasoning items) is bounded alike.
    format.set_max_reply_bytes(transport.config().max_response_bytes);
    // A streamed reply cut off before its end without a transport error (or ended by an
    // error the provider documents as transient) is sent again, after the transport's backoff
    // and within its budget: one budget of `1 + max_retries` requests for the call, whatever
    // mix of failures. One that came whole but cannot be folded is not.
    let mut made = 0u32;
    // Set when a server refused `stream_options` and the request went again without it.
    let mut refused_stream_usage: Option<String> = None;
    let (post, reply) = loop {
        let posted = if streamed {
            transport.post_file_streamed(
                endpoint,
                dir,
                &request_name,
                response_file,
                deadline,
                interruption,
                made,
            )
        } else {
            transport.post_file_with(
                endpoint,
                dir,
                &request_name,
                response_file,
                deadline,
                interruption,
            )
        };
        // A strict OpenAI-compatible server that does not know `stream_options` (HTTP 400
        // naming it): the same request without it, once, as one more request of this call.
        if let Err(source) = &posted
            && streamed
            && config.stream_usage
            && refused_stream_usage.is_none()
            && let Some(attempts) = refuses_stream_options(source)
            && attempts <= transport.config().max_retries
        {
            tracing::warn!(
                attempt = attempts,
                "the server refused stream_options ({source}); sending the request again without it (the reply's usage is then unknown)"
            );
            let without = RequestConfig {
                stream_usage: false,
                ..config.clone()
            };
            request = format
                .write_request(&without)
                .map_err(|source| ExchangeError::Build {
                    request: request_name.clone(),
                    messages: config.messages_file.clone(),
                    source,
                })?;
            refused_stream_usage = Some(source.to_string());
            made = attempts;
            continue;
        }
        let interrupted = |source: TransportError| {
            if source.is_interrupted() {
                // Written again from the context when the task resumes; nothing to debug. An
                // abandoned stream goes too: it is no reply in flight (`show --follow` of the
                // paused task must not replay it).
                let abandoned = if streamed { Some(REPLY_STREAM) } else { None };
                for f in std::iter::once(request_name.as_str()).chain(abandoned) {
                    if let Err(e) = dir.remove_file_if_exists(f) {
                        tracing::warn!("cannot delete {}: {e}", dir.show(f));
                    }
                }
            }
            ExchangeError::Post {
                request: request_name.clone(),
                request_bytes: request.bytes,
                source,
            }
        };
        let post = posted.map_err(interrupted)?;
        made = post.attempts;
        if streamed && !post.streamed {
            // The server ignored the request for a stream and answered one JSON body: read
            // it as an unstreamed reply, under the unstreamed reply's name.
            dir.rename(REPLY_STREAM, whole_file)
                .map_err(|source| ExchangeError::Post {
                    request: request_name.clone(),
                    request_bytes: request.bytes,
                    source: crate::llm::TransportError::ResponseFile {
                        path: dir.file_path(whole_file),
                        source,
                    },
                })?;
            whole = true;
        }
        let (file, read_streamed) = if whole {
            (whole_file, false)
        } else {
            (response_file, streamed)
        };
        // A text file left by an earlier call is no reply of this one; and what the task
        // directory holds now is what a content file must not be (a task file renamed).
        remove_content_file(dir);
        let before = TaskFiles::of(dir);
        let read = format
            .read_response(file, read_streamed)
            .and_then(|mut reply| {
                let key = transport
                    .config()
                    .api_key
                    .as_deref()
                    .filter(|_| read_streamed);
                let checks = ContentChecks {
                    component: format.component(),
                    before: &before,
                    max_bytes: format.task_dir_bytes(),
                };
                check_content_file(dir, &checks, &mut reply, key)?;
                Ok(reply)
            });
        match read {
            Ok(mut reply) => {
                if read_streamed {
                    redact_reply(&mut reply, transport.config().api_key.as_deref());
                    // One rule for every format: the folded reply is held to
                    // `llm.max_response_mib` as an unstreamed body is.
                    let limit = transport.config().max_response_bytes;
                    if reply_json_bytes(dir, &reply) > limit {
                        remove_content_file(dir);
                        keep_failed_stream(dir, response_file);
                        return Err(ExchangeError::Post {
                            request: request_name.clone(),
                            request_bytes: request.bytes,
                            source: TransportError::TooLarge {
                                url: crate::llm::redact::url_without_credentials(
                                    &transport.config().url_for(endpoint),
                                )
                                .into_owned(),
                                streamed: false,
                                limit,
                            },
                        });
                    }
                }
                break (post, reply);
            }
            Err(source)
                if read_streamed
                    && is_cut_off(&source)
                    && made <= transport.config().max_retries =>
            {
                tracing::warn!(
                    attempt = made,
                    "the streamed reply cannot be read ({source}); sending the request again"
                );
                let kept = keep_failed_stream(dir, response_file);
                remove_content_file(dir);
                match transport.wait_before_retry(
                    made,
                    "stream broken off",
                    post.retry_after,
                    deadline,
                    interruption,
                ) {
                    crate::llm::RetryWait::Waited => {}
                    crate::llm::RetryWait::Interrupted => {
                        return Err(interrupted(TransportError::Interrupted {
                            url: crate::llm::redact::url_without_credentials(
                                &transport.config().url_for(endpoint),
                            )
                            .into_owned(),
                            attempts: made,
                        }));
                    }
                    crate::llm::RetryWait::GiveUp => {
                        return Err(ExchangeError::Read {
                            request: request_name.clone(),
                            response: kept.unwrap_or_else(|| response_file.to_string()),
                            source,
                            whole_stream: false,
                        });
                    }
                }
            }
            Err(source) => {
                // A text the format wrote before it failed is no reply.
                remove_content_file(dir);
                let response = if read_streamed {
                    keep_failed_stream(dir, response_file)
                        .unwrap_or_else(|| response_file.to_string())
                } else {
                    file.to_string()
                };
                let whole_stream = read_streamed && !is_cut_off(&source);
                return Err(ExchangeError::Read {
                    request: request_name.clone(),
                    response,
                    source,
                    whole_stream,
                });
            }
        }
    };
    let response_file = if whole { whole_file } else { response_file };
    if let Err(reason) = accept(&reply) {
        remove_content_file(dir);
        return Err(ExchangeError::Rejected {
            request: request_name,
            response: response_file.to_string(),
            reason,
            usage_tokens: reply.usage.map(|u| u.total_tokens).unwrap_or(0),
        });
    }
    // reply.stream stays until the next call (`show --follow`, debugging).
    // A streamed call also removes the whole body an earlier call of the task left after it
    // could not be read (a server that answered one JSON body then).
    let done: &[&str] = if streamed && !whole {
        &[request_name.as_str(), whole_file]
    } else {
        &[request_name.as_str(), response_file]
    };
    for f in done {
        if let Err(e) = dir.remove_file_if_exists(f) {
            tracing::warn!("cannot delete {}: {e}", dir.show(f));
        }
    }
    Ok(Exchange {
        reply,
        request,
        post,
        refused_stream_usage,
    })
}

/// The attempts of a call the provider answered with HTTP 400 naming `stream_options` (in its
/// error message or body), e.g. an OpenAI-compatible server's `Unrecognized request argument
/// supplied: stream_options`; `None` for any other error.
pub(crate) fn refuses_stream_options(error: &TransportError) -> Option<u32> {
    match error {
        TransportError::Http {
            status: 400,
            attempts,
            provider_error,
            body,
            ..
        } if body.contains("stream_options")
            || provider_error
                .as_deref()
                .is_some_and(|e| e.contains("stream_options")) =>
        {
            Some(*attempts)
        }
        _ => None,
    }
}

/// The regular files of a task directory before a component's call, by identity (device and
/// inode): a file a component hands over as new must be none of them (a task file renamed to
/// the new file's name keeps its inode). Empty when the directory cannot be walked (the check
/// then rests on the name alone, and the walk's error is logged).
pub(crate) struct TaskFiles(std::collections::HashMap<(u64, u64), String>);

impl TaskFiles {
    /// The regular files of `dir` now.
    pub(crate) fn of(dir: &TaskDir) -> TaskFiles {
        use cap_std::fs::MetadataExt as _;
        let mut ids = std::collections::HashMap::new();
        let walked = dir.walk(|name, m| {
            if m.is_file() {
                ids.insert((m.dev(), m.ino()), name.to_string());
            }
        });
        if let Err(e) = walked {
            tracing::warn!(
                "cannot list the task directory {}: {e}",
                dir.path().display()
            );
        }
        TaskFiles(ids)
    }

    /// The name the file with this identity had before the call, if it was there.
    pub(crate) fn name_of(&self, dev: u64, ino: u64) -> Option<&str> {
        self.0.get(&(dev, ino)).map(String::as_str)
    }
}

/// What [`check_content_file`] checks a reply's text file against.
struct ContentChecks<'a> {
    /// The request format that wrote it.
    component: &'a str,
    /// The task directory's files before its `read-response` call.
    before: &'a TaskFiles,
    /// The task directory's byte budget: a text file larger than that is refused unread.
    max_bytes: Option<u64>,
}

/// The checks on a reply whose text is in a file (WIT `content-file`), before anyone
/// reads it: a plain path in the task directory ([`untrusted::component_path`]) that is
/// exactly [`ctxhost_format::files::REPLY_CONTENT`], a file made by the call (a regular file
/// with one link whose inode was none of the task directory's files before it: a task file
/// renamed to `reply.content` is refused and put back under its name), at most the task
/// directory's byte budget (measured before it is read), UTF-8 text
/// (one pass in blocks, [`ctxhost_format::content_file`]); with `key` (a streamed reply), the
/// API key redacted in it as in a text ([`redact_reply`]; the file is copied through
/// [`crate::llm::redact::Redactor`] and renamed over itself). A text of white space only is given as `content` (empty: it cannot be a
/// reply's answer) and the file removed. The reply's `message.content` is `None` while the
/// text is in the file. Errors: the format's, as `read-response`'s.
fn check_content_file(
    dir: &TaskDir,
    checks: &ContentChecks<'_>,
    reply: &mut Reply,
    key: Option<&str>,
) -> Result<(), RuntimeError> {
    let Some(name) = reply.content_file.clone() else {
        return Ok(());
    };
    let fail = |reason: String| RuntimeError::Host {
        component: checks.component.to_string(),
        function: "read-response".to_string(),
        reason,
    };
    let name =
        untrusted::component_path(dir, &name).map_err(|e| fail(format!("content-file: {e}")))?;
    // The one name a format may give: any other could be a task file (messages.jsonl, which the
    // store would append into itself; metadata.json, which the host deletes after the append).
    if name != ctxhost_format::files::REPLY_CONTENT {
        return Err(fail(format!(
            "content-file `{}` refused: a reply's text file must be `{}`",
            untrusted::name(&name),
            ctxhost_format::files::REPLY_CONTENT
        )));
    }
    let open = || {
        dir.open_read_if_exists(&name)
            .map_err(|e| fail(format!("content-file {}: {e}", dir.show(&name))))?
            .ok_or_else(|| fail(format!("content-file {} does not exist", dir.show(&name))))
    };
    {
        use std::os::unix::fs::MetadataExt as _;
        let meta = open()?
            .metadata()
            .map_err(|e| fail(format!("content-file {}: {e}", dir.show(&name))))?;
        if let Some(task_file) = checks.before.name_of(meta.dev(), meta.ino()) {
            // A task file renamed (messages.jsonl: the host would delete the history after
            // the append). Put back under its name if that is free, else kept beside it: a
            // failed read deletes `reply.content`.
            let back = if dir.metadata(task_file).ok().flatten().is_none() {
                task_file.to_string()
            } else {
                format!("{task_file}.displaced")
            };
            let kept = match dir.rename(&name, &back) {
                Ok(()) => format!("; moved back to {}", dir.show(&back)),
                Err(e) => format!("; it could not be moved back ({e})"),
            };
            return Err(fail(format!(
                "content-file {} is the task file {} renamed (the same inode), not a text the call wrote; refused{kept}",
                dir.show(&name),
                untrusted::name(task_file),
            )));
        }
        if !meta.is_file() || meta.nlink() != 1 {
            return Err(fail(format!(
                "content-file {} is not a regular file of its own ({} links); refused",
                dir.show(&name),
                meta.nlink()
            )));
        }
        if let Some(max) = checks.max_bytes.filter(|max| meta.len() > *max) {
            return Err(fail(format!(
                "content-file {} holds {} bytes, over the task directory's budget of {max} bytes (context_storage.max_task_dir_mib); refused unread",
                dir.show(&name),
                meta.len()
            )));
        }
    }
    let stats =
        ctxhost_format::content_file::for_each_text_block(std::io::BufReader::new(open()?), |_| {
            Ok(())
        })
        .map_err(|e| fail(format!("content-file {}: {e}", dir.show(&name))))?;
    if !stats.has_non_space {
        reply.message.content = Some(String::new());
        reply.content_file = None;
        if let Err(e) = dir.remove_file_if_exists(&name) {
            tracing::warn!("cannot delete {}: {e}", dir.show(&name));
        }
        return Ok(());
    }
    reply.message.content = None;
    reply.content_file = Some(name.clone());
    if let Some(key) = key.filter(|k| crate::llm::redact::is_redactable(k)) {
        // Copied through the redactor (bounded: it holds back at most a key's length).
        let tmp = format!("{name}.tmp");
        let copied = (|| -> std::io::Result<()> {
            let out = std::io::BufWriter::new(dir.create(&tmp)?);
            let mut redactor = crate::llm::redact::Redactor::new(out, Some(key));
            std::io::copy(&mut open().map_err(std::io::Error::other)?, &mut redactor)?;
            std::io::Write::flush(&mut redactor.finish()?)?;
            dir.rename(&tmp, &name)
        })();
        copied.map_err(|e| fail(format!("redacting content-file {}: {e}", dir.show(&name))))?;
    }
    Ok(())
}

/// Deletes [`ctxhost_format::files::REPLY_CONTENT`] if a format left it (a reply that was not
/// used). A failure is logged.
pub fn remove_content_file(dir: &TaskDir) {
    let name = ctxhost_format::files::REPLY_CONTENT;
    if let Err(e) = dir.remove_file_if_exists(name) {
        tracing::warn!("cannot delete {}: {e}", dir.show(name));
    }
}

/// Whether a streamed reply's read error says the stream was cut off before its end (WIT
/// `plugin-error.stream-cut`): sending the request again may then give a whole one. Any
/// other error of a stream that the transport received to its end (an event the format cannot
/// read) would recur on each try.
fn is_cut_off(error: &RuntimeError) -> bool {
    matches!(
        error.plugin_error(),
        Some(crate::runtime::PluginError::StreamCut(_))
    )
}

/// Bytes of `reply` as JSON, as messages.jsonl stores it: its text (or its content file's,
/// counted as escaped JSON), tool calls and reasoning items. An estimate from above within a
/// few bytes per field; a content file that cannot be read counts its size.
fn reply_json_bytes(dir: &TaskDir, reply: &Reply) -> u64 {
    let escaped = |s: &str| serde_json::to_string(s).map_or(s.len(), |j| j.len()) as u64;
    let m = &reply.message;
    let mut n = m.content.as_deref().map_or(0, escaped);
    for call in m.tool_calls.iter().flatten() {
        n += escaped(&call.id) + escaped(&call.function.name) + escaped(&call.function.arguments);
    }
    for item in &m.reasoning {
        n += escaped(&item.provider) + escaped(&item.kind) + escaped(&item.data);
    }
    if let Some(name) = &reply.content_file {
        let text = dir.open_read_if_exists(name).ok().flatten().map(|f| {
            let mut total = 0u64;
            let counted = ctxhost_format::content_file::for_each_text_block(
                std::io::BufReader::new(f),
                |block| {
                    total += escaped(block);
                    Ok(())
                },
            );
            (counted, total)
        });
        n += match text {
            Some((Ok(_), total)) => total,
            _ => dir.metadata(name).ok().flatten().map_or(0, |m| m.len()),
        };
    }
    n
}

/// The API key out of a reply folded from a stream: the transport redacts it from the raw
/// bytes as they arrive, but a stream may split it between two events (and so between two
/// fragments of the text, a tool call's arguments or the reasoning), which only the folded
/// reply shows whole ([`crate::llm::redact::redact`]; nothing for a key too short to redact).
fn redact_reply(reply: &mut Reply, key: Option<&str>) {
    let Some(key) = key.filter(|k| crate::llm::redact::is_redactable(k)) else {
        return;
    };
    let clean = |s: &mut String| {
        if s.contains(key) {
            *s = crate::llm::redact::redact(s, Some(key));
        }
    };
    let m = &mut reply.message;
    if let Some(c) = m.content.as_mut() {
        clean(c);
    }
    // JSON texts: the key may be there JSON-escaped.
    let redact = |s: &mut String| *s = crate::llm::redact::redact(s, Some(key));
    for call in m.tool_calls.iter_mut().flatten() {
        clean(&mut call.function.name);
        redact(&mut call.function.arguments);
    }
    for item in &mut m.reasoning {
        redact(&mut item.data);
    }
}
