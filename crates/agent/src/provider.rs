//! The model trait, its errors, and what both HTTP adapters share: retries with backoff and the
//! accumulation of streamed calls.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt as _;
use serde_json::Value;

use crate::message::{Delta, Message, Reply, ToolCall};

/// What a model is asked.
#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    /// The system prompt.
    pub system: &'a str,
    /// The conversation.
    pub messages: &'a [Message],
    /// The tool declarations, already in the adapter's [`ModelClient::tool_format`].
    pub tools: &'a [Value],
    /// The longest reply, in tokens.
    pub max_tokens: u32,
}

/// Where streamed pieces go.
pub type DeltaSink<'a> = &'a mut (dyn FnMut(Delta) + Send);

/// A model behind a provider's API.
#[async_trait]
pub trait ModelClient: Send + Sync + fmt::Debug {
    /// The form its tool declarations take.
    fn tool_format(&self) -> tool_core::provider::Provider;

    /// The model's name.
    fn model(&self) -> &str;

    /// Streams one reply, handing each piece to `sink` as it arrives. Dropping the future aborts
    /// the request.
    ///
    /// # Errors
    ///
    /// [`ProviderError`] once retries are spent or the error is not worth retrying.
    async fn stream(&self, request: &ModelRequest<'_>, sink: DeltaSink<'_>) -> Result<Reply, ProviderError>;
}

/// Why a model did not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The provider refused the key.
    #[error("{provider} refused the API key (HTTP {status}): {message}")]
    Auth {
        /// The provider's name.
        provider: &'static str,
        /// The HTTP status.
        status: u16,
        /// The provider's message, with a hint.
        message: String,
    },
    /// The provider rejected the request itself (a bad model name, a context too long…).
    #[error("{provider} rejected the request (HTTP {status}): {message}")]
    Rejected {
        /// The provider's name.
        provider: &'static str,
        /// The HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// The provider stayed unavailable or rate-limited through every retry.
    #[error("{provider} is unavailable after {attempts} tries: {message}")]
    Unavailable {
        /// The provider's name.
        provider: &'static str,
        /// Tries made.
        attempts: u32,
        /// The last failure.
        message: String,
    },
    /// The stream broke after part of the reply was shown, so it cannot be retried unseen.
    #[error("{provider}'s stream broke mid-reply: {message}")]
    Stream {
        /// The provider's name.
        provider: &'static str,
        /// What broke.
        message: String,
    },
    /// The provider sent something that is not its protocol.
    #[error("{provider} sent a malformed stream: {message}")]
    Protocol {
        /// The provider's name.
        provider: &'static str,
        /// What was wrong.
        message: String,
    },
}

/// How hard an adapter retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries in all, the first included.
    pub attempts: u32,
    /// The first wait; each later one doubles.
    pub initial_delay: Duration,
    /// The longest wait, a `retry-after` included.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { attempts: 5, initial_delay: Duration::from_millis(500), max_delay: Duration::from_secs(60) }
    }
}

impl RetryPolicy {
    /// The wait before try `attempt` (2 for the first retry), without a server's hint.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(2).min(16);
        self.initial_delay.saturating_mul(1 << doublings).min(self.max_delay)
    }
}

/// One try's failure, classified.
#[derive(Debug)]
pub(crate) enum TryError {
    /// Worth another try (after the hinted wait, if any).
    Transient { message: String, retry_after: Option<Duration> },
    /// Final.
    Fatal(ProviderError),
}

/// One exchange with a provider: a request sent and its stream read into a reply.
#[async_trait]
pub(crate) trait Exchange: Send + Sync {
    /// One try.
    async fn once(&self, sink: DeltaSink<'_>) -> Result<Reply, TryError>;
}

/// Sends a request until it gets a success status and returns the response whose body is the
/// stream. Connection failures, 408, 409, 429 and 5xx are transient (a `retry-after` or
/// `retry-after-ms` header gives the wait); 401 and 403 are the key; anything else is final.
pub(crate) async fn send(
    provider: &'static str,
    policy: &RetryPolicy,
    url: &str,
    request: reqwest::RequestBuilder,
) -> Result<reqwest::Response, TryError> {
    let response = match request.send().await {
        Ok(response) => response,
        Err(error) => {
            return Err(TryError::Transient {
                message: format!("{} ({url})", describe_reqwest(&error)),
                retry_after: None,
            });
        }
    };
    let status = response.status().as_u16();
    if response.status().is_success() {
        return Ok(response);
    }
    let retry_after = retry_after_of(response.headers()).map(|d| d.min(policy.max_delay));
    let body = response.text().await.unwrap_or_default();
    let mut message = error_message(&body).unwrap_or_else(|| format!("HTTP {status}"));
    // Which address answered: a wrong base URL shows itself here.
    if status == 404 || status == 405 {
        message = format!("{message}; {url} does not answer this API — check the base URL");
    }
    Err(match status {
        401 | 403 => TryError::Fatal(ProviderError::Auth { provider, status, message }),
        408 | 409 | 429 | 500..=599 => {
            TryError::Transient { message: format!("HTTP {status}: {message}"), retry_after }
        }
        _ => TryError::Fatal(ProviderError::Rejected { provider, status, message }),
    })
}

/// Runs `exchange` until it succeeds, fails for good, or the policy's tries are spent; each retry
/// is announced to `sink` first. A transient failure after part of the reply was streamed is
/// final: the person has already seen it, and a second reply would not be the same one.
pub(crate) async fn with_retries(
    provider: &'static str,
    policy: &RetryPolicy,
    sink: DeltaSink<'_>,
    exchange: &dyn Exchange,
) -> Result<Reply, ProviderError> {
    let mut attempt = 1;
    loop {
        let mut streamed = false;
        let result = {
            let mut tracking = |delta: Delta| {
                streamed = true;
                sink(delta);
            };
            exchange.once(&mut tracking).await
        };
        match result {
            Ok(reply) => return Ok(reply),
            Err(TryError::Fatal(error)) => return Err(error),
            Err(TryError::Transient { message, .. }) if streamed => {
                return Err(ProviderError::Stream { provider, message });
            }
            Err(TryError::Transient { message, retry_after }) => {
                if attempt >= policy.attempts {
                    return Err(ProviderError::Unavailable { provider, attempts: attempt, message });
                }
                attempt += 1;
                let delay = retry_after.unwrap_or_else(|| policy.backoff(attempt));
                sink(Delta::Retrying {
                    attempt,
                    delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    reason: message,
                });
                tokio::time::sleep(delay).await;
            }
        }
    }
}

pub(crate) fn retry_after_of(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    let seconds = match text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        Some(ms) => ms / 1000.0,
        None => text("retry-after")?.parse::<f64>().ok()?,
    };
    // Capped before converting: a huge or odd value must not overflow.
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds.min(3600.0)))
}

/// The message of an error body in OpenAI's (`{error: {message}}`), Anthropic's (`{type: "error",
/// error: {message}}`) or a plain `{message}`/`{error: "…"}` shape.
pub(crate) fn error_message(body: &str) -> Option<String> {
    let value: Value = serde_json::from_str(body).ok()?;
    let error = value.get("error").unwrap_or(&value);
    let message = match error {
        Value::String(text) => text.clone(),
        other => other.get("message")?.as_str()?.to_owned(),
    };
    Some(match error.get("type").and_then(Value::as_str) {
        Some(kind) if !message.contains(kind) => format!("{message} ({kind})"),
        _ => message,
    })
}

pub(crate) fn describe_reqwest(error: &reqwest::Error) -> String {
    let mut text = if error.is_connect() {
        "cannot connect".to_owned()
    } else if error.is_timeout() {
        "timed out".to_owned()
    } else {
        "request failed".to_owned()
    };
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A base URL as the provider's own SDK takes it, and the URL of `path` under it: OpenAI's with
/// `/v1` (added when the URL has no path at all, as for `http://localhost:11434`), Anthropic's
/// with or without it (its SDK and Claude Code take it without).
pub(crate) fn endpoint(base_url: &str, versioned_path: &str) -> String {
    let base = base_url.trim_end_matches('/');
    let has_path = base.split_once("://").map_or(base, |(_, rest)| rest).contains('/');
    if base.ends_with("/v1") {
        format!("{base}{versioned_path}")
    } else if has_path && !versioned_path.starts_with("/messages") {
        // A compatible server under a path of its own (`…/api/openai`): as given.
        format!("{base}{versioned_path}")
    } else {
        format!("{base}/v1{versioned_path}")
    }
}

/// The server-sent events of a response, as (event name, data) pairs.
pub(crate) fn events(
    response: reqwest::Response,
) -> impl futures::Stream<Item = Result<(Option<String>, String), String>> + Send {
    sse_stream::SseStream::from_bytes_stream(response.bytes_stream()).filter_map(|item| async move {
        match item {
            Ok(sse) => sse.data.map(|data| Ok((sse.event, data))),
            Err(error) => Some(Err(stream_failure(&error))),
        }
    })
}

/// Why a stream ended early, in words: a read that waited past the stall timeout says so.
fn stream_failure(error: &(dyn std::error::Error + 'static)) -> String {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = source {
        let timed_out = cause.downcast_ref::<reqwest::Error>().is_some_and(reqwest::Error::is_timeout)
            || cause
                .downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::TimedOut);
        if timed_out {
            return "the stream stalled: no data within the stall timeout (timed out)".to_owned();
        }
        source = cause.source();
    }
    format!("the stream broke: {error}")
}

/// Calls whose pieces arrive by index, in any interleaving.
#[derive(Debug, Default)]
pub(crate) struct CallAssembler {
    calls: Vec<(usize, ToolCall)>,
}

impl CallAssembler {
    /// The position in the reply's calls of the provider's `index`, made on first sight.
    pub(crate) fn slot(&mut self, index: usize) -> (usize, &mut ToolCall, bool) {
        match self.calls.iter().position(|(i, _)| *i == index) {
            Some(position) => (position, &mut self.calls[position].1, false),
            None => {
                self.calls.push((
                    index,
                    ToolCall { id: String::new(), name: String::new(), arguments: String::new() },
                ));
                let position = self.calls.len() - 1;
                (position, &mut self.calls[position].1, true)
            }
        }
    }

    /// The provider index of a piece that came without one: the call with its id, a new call
    /// for a new id, else the latest call (or `fallback` when there is none).
    pub(crate) fn index_for(&self, id: Option<&str>, fallback: usize) -> usize {
        let next = self.calls.iter().map(|(i, _)| i + 1).max().unwrap_or(fallback);
        match id {
            Some(id) => self.calls.iter().find(|(_, c)| c.id == id).map_or(next, |(i, _)| *i),
            None => self.calls.last().map_or(fallback, |(i, _)| *i),
        }
    }

    /// The calls, in the provider's index order; a call with no id gets one made from its
    /// position (some local servers leave ids out).
    pub(crate) fn finish(mut self) -> Vec<ToolCall> {
        self.calls.sort_by_key(|(i, _)| *i);
        self.calls
            .into_iter()
            .enumerate()
            .map(|(n, (_, mut call))| {
                if call.id.is_empty() {
                    call.id = format!("call_{n}");
                }
                call
            })
            .collect()
    }
}

#[cfg(test)]
mod endpoint_tests {
    use super::endpoint;

    #[test]
    fn base_urls_with_or_without_v1() {
        let cases = [
            ("https://api.openai.com/v1", "/chat/completions", "https://api.openai.com/v1/chat/completions"),
            ("http://localhost:11434", "/chat/completions", "http://localhost:11434/v1/chat/completions"),
            ("http://localhost:11434/", "/chat/completions", "http://localhost:11434/v1/chat/completions"),
            (
                "https://openrouter.ai/api/v1",
                "/chat/completions",
                "https://openrouter.ai/api/v1/chat/completions",
            ),
            ("https://gw.example/openai", "/chat/completions", "https://gw.example/openai/chat/completions"),
            ("https://api.anthropic.com", "/messages", "https://api.anthropic.com/v1/messages"),
            ("https://api.anthropic.com/v1", "/messages", "https://api.anthropic.com/v1/messages"),
            ("https://proxy.example/anthropic", "/messages", "https://proxy.example/anthropic/v1/messages"),
        ];
        for (base, path, url) in cases {
            assert_eq!(endpoint(base, path), url, "{base}");
        }
    }
}
