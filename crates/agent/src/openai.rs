//! OpenAI-compatible chat completions, streamed (OpenAI, Ollama, vLLM, llama.cpp's server, LM
//! Studio, OpenRouter…): `chat.completion.chunk` deltas whose `tool_calls[index]` fragments build
//! the calls, ending with `[DONE]`.

use async_trait::async_trait;
use futures::StreamExt as _;
use serde_json::{Map, Value, json};

use crate::message::{Delta, Message, Reasoning, Reply, StopReason, Usage};
use crate::provider::{
    CallAssembler, DeltaSink, Exchange, ModelClient, ModelRequest, ProviderError, RetryPolicy, TryError,
    events, send, with_retries,
};

const NAME: &str = "OpenAI-compatible API";

/// A chat completions endpoint.
#[derive(Clone)]
pub struct OpenAiClient {
    http: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    model: String,
    retry: RetryPolicy,
}

impl std::fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key never reaches a log.
        f.debug_struct("OpenAiClient")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .finish_non_exhaustive()
    }
}

impl OpenAiClient {
    /// A client of `base_url` (`https://api.openai.com/v1`, `http://localhost:11434/v1`…).
    pub fn new(http: reqwest::Client, base_url: &str, api_key: Option<String>, model: &str) -> Self {
        Self {
            http,
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key: api_key.filter(|k| !k.is_empty()),
            model: model.to_owned(),
            retry: RetryPolicy::default(),
        }
    }

    /// Retries with this policy.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The request body.
    pub fn body(&self, request: &ModelRequest<'_>) -> Value {
        let mut messages = Vec::with_capacity(request.messages.len() + 1);
        if !request.system.is_empty() {
            messages.push(json!({ "role": "system", "content": request.system }));
        }
        for message in request.messages {
            messages.push(match message {
                Message::User { content } => json!({ "role": "user", "content": content }),
                Message::Assistant { content, tool_calls, .. } => {
                    let mut out = Map::new();
                    out.insert("role".into(), "assistant".into());
                    out.insert(
                        "content".into(),
                        if content.is_empty() && !tool_calls.is_empty() {
                            Value::Null
                        } else {
                            content.clone().into()
                        },
                    );
                    if !tool_calls.is_empty() {
                        let calls = tool_calls
                            .iter()
                            .map(|c| {
                                json!({
                                    "id": c.id,
                                    "type": "function",
                                    "function": { "name": c.name, "arguments": c.arguments },
                                })
                            })
                            .collect();
                        out.insert("tool_calls".into(), Value::Array(calls));
                    }
                    Value::Object(out)
                }
                Message::Tool { call_id, content, .. } => {
                    json!({ "role": "tool", "tool_call_id": call_id, "content": content })
                }
            });
        }
        let mut body = json!({
            "model": self.model,
            "messages": messages,
            "stream": true,
            "stream_options": { "include_usage": true },
        });
        // OpenAI's own API refuses `max_tokens` for its reasoning models; most compatible servers
        // know only `max_tokens`.
        let limit =
            if self.base_url.contains("api.openai.com") { "max_completion_tokens" } else { "max_tokens" };
        body[limit] = request.max_tokens.into();
        if !request.tools.is_empty() {
            body["tools"] = Value::Array(request.tools.to_vec());
        }
        body
    }
}

#[async_trait]
impl ModelClient for OpenAiClient {
    fn tool_format(&self) -> tool_core::provider::Provider {
        tool_core::provider::Provider::Openai
    }

    fn model(&self) -> &str {
        &self.model
    }

    async fn stream(&self, request: &ModelRequest<'_>, sink: DeltaSink<'_>) -> Result<Reply, ProviderError> {
        let exchange = OpenAiExchange { client: self, body: self.body(request) };
        with_retries(NAME, &self.retry, sink, &exchange).await
    }
}

struct OpenAiExchange<'a> {
    client: &'a OpenAiClient,
    body: Value,
}

#[async_trait]
impl Exchange for OpenAiExchange<'_> {
    async fn once(&self, sink: DeltaSink<'_>) -> Result<Reply, TryError> {
        let client = self.client;
        let url = crate::provider::endpoint(&client.base_url, "/chat/completions");
        let mut request = client.http.post(&url).json(&self.body);
        if let Some(key) = &client.api_key {
            request = request.bearer_auth(key);
        }
        let response = send(NAME, &client.retry, &url, request).await?;
        let mut stream = std::pin::pin!(events(response));
        let mut reply = ReplyBuilder::default();
        while let Some(event) = stream.next().await {
            let (_, data) = event.map_err(|message| TryError::Transient { message, retry_after: None })?;
            if data.trim() == "[DONE]" {
                return Ok(reply.finish());
            }
            let chunk: Value = serde_json::from_str(&data).map_err(|e| {
                TryError::Fatal(ProviderError::Protocol {
                    provider: NAME,
                    message: format!("a chunk is not JSON: {e}"),
                })
            })?;
            if let Some(message) =
                crate::provider::error_message(&data).filter(|_| chunk.get("error").is_some())
            {
                // An error inside a 200 stream (OpenRouter, vLLM): retryable only before anything
                // was shown.
                return Err(TryError::Transient { message, retry_after: None });
            }
            reply.chunk(&chunk, sink);
        }
        // Some servers end without `[DONE]`; a stream that said why it stopped is whole.
        if reply.stop.is_some() {
            Ok(reply.finish())
        } else {
            Err(TryError::Transient {
                message: "the stream ended before the reply did".into(),
                retry_after: None,
            })
        }
    }
}

#[derive(Default)]
struct ReplyBuilder {
    content: String,
    reasoning: String,
    calls: CallAssembler,
    stop: Option<StopReason>,
    usage: Usage,
}

impl ReplyBuilder {
    fn chunk(&mut self, chunk: &Value, sink: DeltaSink<'_>) {
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
            self.usage =
                Usage { input_tokens: count("prompt_tokens"), output_tokens: count("completion_tokens") };
        }
        let Some(choice) = chunk.get("choices").and_then(Value::as_array).and_then(|c| c.first()) else {
            return;
        };
        if let Some(delta) = choice.get("delta") {
            // `reasoning_content` (DeepSeek, vLLM, llama.cpp) or `reasoning` (OpenRouter, Ollama).
            let reasoning = delta.get("reasoning_content").or_else(|| delta.get("reasoning"));
            if let Some(text) = reasoning.and_then(Value::as_str).filter(|t| !t.is_empty()) {
                self.reasoning.push_str(text);
                sink(Delta::Reasoning(text.to_owned()));
            }
            if let Some(text) = delta.get("content").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                self.content.push_str(text);
                sink(Delta::Text(text.to_owned()));
            }
            for (n, piece) in
                delta.get("tool_calls").and_then(Value::as_array).into_iter().flatten().enumerate()
            {
                let id = piece.get("id").and_then(Value::as_str).filter(|id| !id.is_empty());
                let index = match piece.get("index").and_then(Value::as_u64) {
                    Some(index) => index as usize,
                    // Servers that leave `index` out: a new id is a new call, a piece without
                    // one continues the latest.
                    None => self.calls.index_for(id, n),
                };
                let (position, call, new) = self.calls.slot(index);
                if let Some(id) = id {
                    call.id = id.to_owned();
                }
                let function = piece.get("function");
                let unnamed = call.name.is_empty();
                if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str) {
                    call.name.push_str(name);
                }
                // Announced once its name is known (a few servers name a call after its first piece).
                if (new || unnamed) && !call.name.is_empty() {
                    sink(Delta::ToolCall { index: position, id: call.id.clone(), name: call.name.clone() });
                }
                if let Some(fragment) = function
                    .and_then(|f| f.get("arguments"))
                    .and_then(Value::as_str)
                    .filter(|f| !f.is_empty())
                {
                    call.arguments.push_str(fragment);
                    sink(Delta::ToolArguments { index: position, fragment: fragment.to_owned() });
                }
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.stop = Some(match reason {
                "stop" => StopReason::EndTurn,
                "tool_calls" | "function_call" => StopReason::ToolUse,
                "length" => StopReason::Length,
                "content_filter" => StopReason::Refused,
                other => StopReason::Other(other.to_owned()),
            });
        }
    }

    fn finish(self) -> Reply {
        let tool_calls = self.calls.finish();
        let stop = match self.stop {
            Some(stop) => stop,
            None if tool_calls.is_empty() => StopReason::EndTurn,
            None => StopReason::ToolUse,
        };
        Reply {
            content: self.content,
            reasoning: (!self.reasoning.is_empty()).then_some(Reasoning {
                text: self.reasoning,
                signature: None,
                blocks: Vec::new(),
            }),
            tool_calls,
            stop,
            usage: self.usage,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_without_an_index_are_told_apart_by_their_ids() {
        let mut reply = ReplyBuilder::default();
        let mut sink = |_: Delta| {};
        let pieces = [
            json!({ "id": "a", "function": { "name": "readFile", "arguments": "{\"path\":" } }),
            json!({ "function": { "arguments": "\"x\"}" } }),
            json!({ "id": "b", "function": { "name": "readFile", "arguments": "{\"path\":\"y\"}" } }),
        ];
        for piece in pieces {
            reply.chunk(&json!({ "choices": [{ "delta": { "tool_calls": [piece] } }] }), &mut sink);
        }
        let calls = reply.finish().tool_calls;
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert_eq!((calls[0].id.as_str(), calls[0].arguments.as_str()), ("a", "{\"path\":\"x\"}"));
        assert_eq!((calls[1].id.as_str(), calls[1].arguments.as_str()), ("b", "{\"path\":\"y\"}"));
    }

    #[test]
    fn a_huge_retry_after_is_capped_not_a_panic() {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("retry-after", "1e300".parse().unwrap());
        assert_eq!(crate::provider::retry_after_of(&headers), Some(std::time::Duration::from_secs(3600)));
        headers.insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(crate::provider::retry_after_of(&headers), Some(std::time::Duration::from_millis(250)));
    }
}
