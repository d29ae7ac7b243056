//! Anthropic messages, streamed: `message_start`, `content_block_start` (text, thinking,
//! tool_use), `content_block_delta` (`text_delta`, `thinking_delta`, `signature_delta`,
//! `input_json_delta`), `content_block_stop`, `message_delta` (stop reason, usage),
//! `message_stop`; `ping` and `error` between them.

use async_trait::async_trait;
use futures::StreamExt as _;
use serde_json::{Value, json};

use crate::message::{Delta, Message, Reasoning, Reply, StopReason, Usage};
use crate::provider::{
    CallAssembler, DeltaSink, Exchange, ModelClient, ModelRequest, ProviderError, RetryPolicy, TryError,
    events, send, with_retries,
};

const NAME: &str = "Anthropic";
const VERSION: &str = "2023-06-01";

/// The messages endpoint.
#[derive(Clone)]
pub struct AnthropicClient {
    http: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    model: String,
    thinking_budget: Option<u32>,
    retry: RetryPolicy,
}

impl std::fmt::Debug for AnthropicClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key never reaches a log.
        f.debug_struct("AnthropicClient")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .finish_non_exhaustive()
    }
}

impl AnthropicClient {
    /// A client of `base_url` (`https://api.anthropic.com`, with or without `/v1`, as Anthropic's
    /// SDK takes it).
    pub fn new(http: reqwest::Client, base_url: &str, api_key: Option<String>, model: &str) -> Self {
        Self {
            http,
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key: api_key.filter(|k| !k.is_empty()),
            model: model.to_owned(),
            thinking_budget: None,
            retry: RetryPolicy::default(),
        }
    }

    /// Asks for extended thinking with this many tokens.
    #[must_use]
    pub fn with_thinking(mut self, budget_tokens: Option<u32>) -> Self {
        self.thinking_budget = budget_tokens;
        self
    }

    /// Retries with this policy.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The request body. Consecutive tool results become one user message, as the API requires.
    pub fn body(&self, request: &ModelRequest<'_>) -> Value {
        let mut messages: Vec<Value> = Vec::with_capacity(request.messages.len());
        for message in request.messages {
            let (role, blocks) = match message {
                Message::User { content } => ("user", vec![json!({ "type": "text", "text": content })]),
                Message::Assistant { content, reasoning, tool_calls } => {
                    let mut blocks = Vec::new();
                    match reasoning {
                        Some(Reasoning { blocks: thinking, .. }) if !thinking.is_empty() => {
                            blocks.extend(thinking.iter().cloned());
                        }
                        Some(Reasoning { text, signature: Some(signature), .. }) => {
                            blocks.push(
                                json!({ "type": "thinking", "thinking": text, "signature": signature }),
                            );
                        }
                        _ => {}
                    }
                    if !content.is_empty() {
                        blocks.push(json!({ "type": "text", "text": content }));
                    }
                    for call in tool_calls {
                        // Arguments cut by the length limit are not an object; the call failed
                        // with that reason, and the block still needs an object.
                        let input = serde_json::from_str::<Value>(&call.arguments)
                            .ok()
                            .filter(Value::is_object)
                            .unwrap_or_else(|| json!({}));
                        blocks.push(
                            json!({ "type": "tool_use", "id": call.id, "name": call.name, "input": input }),
                        );
                    }
                    if blocks.is_empty() {
                        blocks.push(json!({ "type": "text", "text": "(no reply)" }));
                    }
                    ("assistant", blocks)
                }
                Message::Tool { call_id, content, is_error, .. } => (
                    "user",
                    vec![
                        json!({ "type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error }),
                    ],
                ),
            };
            // Same role twice in a row: one message (tool results after each other, or a note
            // after them).
            match messages.last_mut() {
                Some(last) if last["role"] == role => {
                    if let Some(existing) = last["content"].as_array_mut() {
                        existing.extend(blocks);
                    }
                }
                _ => messages.push(json!({ "role": role, "content": blocks })),
            }
        }
        let mut body = json!({
            "model": self.model,
            "max_tokens": request.max_tokens,
            "messages": messages,
            "stream": true,
        });
        if !request.system.is_empty() {
            body["system"] = request.system.into();
        }
        if !request.tools.is_empty() {
            body["tools"] = Value::Array(request.tools.to_vec());
        }
        if let Some(budget) = self.thinking_budget {
            body["thinking"] = json!({ "type": "enabled", "budget_tokens": budget });
        }
        body
    }
}

#[async_trait]
impl ModelClient for AnthropicClient {
    fn tool_format(&self) -> tool_core::provider::Provider {
        tool_core::provider::Provider::Anthropic
    }

    fn model(&self) -> &str {
        &self.model
    }

    async fn stream(&self, request: &ModelRequest<'_>, sink: DeltaSink<'_>) -> Result<Reply, ProviderError> {
        let exchange = AnthropicExchange { client: self, body: self.body(request) };
        with_retries(NAME, &self.retry, sink, &exchange).await
    }
}

struct AnthropicExchange<'a> {
    client: &'a AnthropicClient,
    body: Value,
}

#[async_trait]
impl Exchange for AnthropicExchange<'_> {
    async fn once(&self, sink: DeltaSink<'_>) -> Result<Reply, TryError> {
        let client = self.client;
        let url = crate::provider::endpoint(&client.base_url, "/messages");
        let mut request = client.http.post(&url).header("anthropic-version", VERSION).json(&self.body);
        if let Some(key) = &client.api_key {
            request = request.header("x-api-key", key);
        }
        let response = send(NAME, &client.retry, &url, request).await?;
        let mut stream = std::pin::pin!(events(response));
        let mut reply = ReplyBuilder::default();
        while let Some(event) = stream.next().await {
            let (_, data) = event.map_err(|message| TryError::Transient { message, retry_after: None })?;
            let event: Value = serde_json::from_str(&data).map_err(|e| {
                TryError::Fatal(ProviderError::Protocol {
                    provider: NAME,
                    message: format!("an event is not JSON: {e}"),
                })
            })?;
            if reply.event(&event, sink)? {
                return Ok(reply.finish());
            }
        }
        Err(TryError::Transient {
            message: "the stream ended before `message_stop`".into(),
            retry_after: None,
        })
    }
}

#[derive(Default)]
struct ReplyBuilder {
    content: String,
    reasoning: String,
    /// Thinking and redacted-thinking blocks by content index, as they will be sent back.
    thinking: Vec<(usize, Value)>,
    calls: CallAssembler,
    /// The kind of each content block, by its index.
    blocks: Vec<(usize, &'static str)>,
    stop: Option<StopReason>,
    usage: Usage,
}

impl ReplyBuilder {
    /// Takes one event; true once the message is whole.
    fn event(&mut self, event: &Value, sink: DeltaSink<'_>) -> Result<bool, TryError> {
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
        match event.get("type").and_then(Value::as_str).unwrap_or_default() {
            "message_start" => {
                if let Some(usage) = event.pointer("/message/usage") {
                    let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
                    self.usage.input_tokens = count("input_tokens")
                        + count("cache_read_input_tokens")
                        + count("cache_creation_input_tokens");
                    self.usage.output_tokens = count("output_tokens");
                }
            }
            "content_block_start" => {
                let block = event.get("content_block").cloned().unwrap_or_default();
                match block.get("type").and_then(Value::as_str).unwrap_or_default() {
                    "tool_use" => {
                        self.blocks.push((index, "tool_use"));
                        let (position, call, _) = self.calls.slot(index);
                        call.id = block.get("id").and_then(Value::as_str).unwrap_or_default().to_owned();
                        call.name = block.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
                        sink(Delta::ToolCall {
                            index: position,
                            id: call.id.clone(),
                            name: call.name.clone(),
                        });
                    }
                    "thinking" => {
                        self.blocks.push((index, "thinking"));
                        self.thinking
                            .push((index, json!({ "type": "thinking", "thinking": "", "signature": "" })));
                    }
                    "redacted_thinking" => {
                        self.blocks.push((index, "redacted"));
                        self.thinking.push((index, block.clone()));
                    }
                    _ => {
                        self.blocks.push((index, "text"));
                        if let Some(text) =
                            block.get("text").and_then(Value::as_str).filter(|t| !t.is_empty())
                        {
                            self.content.push_str(text);
                            sink(Delta::Text(text.to_owned()));
                        }
                    }
                }
            }
            "content_block_delta" => {
                let delta = event.get("delta").cloned().unwrap_or_default();
                let text = |key: &str| delta.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
                match delta.get("type").and_then(Value::as_str).unwrap_or_default() {
                    "text_delta" => {
                        let piece = text("text");
                        self.content.push_str(&piece);
                        sink(Delta::Text(piece));
                    }
                    "thinking_delta" => {
                        let piece = text("thinking");
                        self.reasoning.push_str(&piece);
                        if let Some((_, block)) = self.thinking.iter_mut().find(|(i, _)| *i == index) {
                            let so_far = block["thinking"].as_str().unwrap_or_default().to_owned();
                            block["thinking"] = Value::String(so_far + &piece);
                        }
                        sink(Delta::Reasoning(piece));
                    }
                    "signature_delta" => {
                        if let Some((_, block)) = self.thinking.iter_mut().find(|(i, _)| *i == index) {
                            let so_far = block["signature"].as_str().unwrap_or_default().to_owned();
                            block["signature"] = Value::String(so_far + &text("signature"));
                        }
                    }
                    "input_json_delta" => {
                        let fragment = text("partial_json");
                        if !self.blocks.contains(&(index, "tool_use")) {
                            return Err(TryError::Fatal(ProviderError::Protocol {
                                provider: NAME,
                                message: format!(
                                    "input_json_delta for block {index}, which is not a tool_use"
                                ),
                            }));
                        }
                        let (position, call, _) = self.calls.slot(index);
                        call.arguments.push_str(&fragment);
                        if !fragment.is_empty() {
                            sink(Delta::ToolArguments { index: position, fragment });
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = event.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop = Some(match reason {
                        "end_turn" | "stop_sequence" | "pause_turn" => StopReason::EndTurn,
                        "tool_use" => StopReason::ToolUse,
                        "max_tokens" | "model_context_window_exceeded" => StopReason::Length,
                        "refusal" => StopReason::Refused,
                        other => StopReason::Other(other.to_owned()),
                    });
                }
                if let Some(output) = event.pointer("/usage/output_tokens").and_then(Value::as_u64) {
                    self.usage.output_tokens = output;
                }
            }
            "message_stop" => return Ok(true),
            "error" => {
                let message = event
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("the provider reported an error")
                    .to_owned();
                let kind = event.pointer("/error/type").and_then(Value::as_str).unwrap_or_default();
                let message = if kind.is_empty() { message } else { format!("{message} ({kind})") };
                return Err(match kind {
                    "invalid_request_error" => {
                        TryError::Fatal(ProviderError::Rejected { provider: NAME, status: 400, message })
                    }
                    _ => TryError::Transient { message, retry_after: None },
                });
            }
            _ => {}
        }
        Ok(false)
    }

    fn finish(self) -> Reply {
        let tool_calls = self.calls.finish();
        let stop = self.stop.unwrap_or(if tool_calls.is_empty() {
            StopReason::EndTurn
        } else {
            StopReason::ToolUse
        });
        // A tool call without arguments streams none: its input is the empty object.
        let tool_calls = tool_calls
            .into_iter()
            .map(|mut call| {
                if call.arguments.is_empty() {
                    call.arguments = "{}".into();
                }
                call
            })
            .collect();
        Reply {
            content: self.content,
            reasoning: (!self.reasoning.is_empty() || !self.thinking.is_empty()).then_some(Reasoning {
                text: self.reasoning,
                signature: None,
                blocks: self.thinking.into_iter().map(|(_, block)| block).collect(),
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
    use crate::message::Message;

    #[test]
    fn thinking_blocks_go_back_verbatim_each_with_its_signature() {
        let events = [
            json!({ "type": "message_start", "message": { "usage": { "input_tokens": 5, "output_tokens": 1 } } }),
            json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "thinking", "thinking": "" } }),
            json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "thinking_delta", "thinking": "first" } }),
            json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "signature_delta", "signature": "sig-1" } }),
            json!({ "type": "content_block_start", "index": 1, "content_block": { "type": "redacted_thinking", "data": "opaque" } }),
            json!({ "type": "content_block_start", "index": 2, "content_block": { "type": "thinking", "thinking": "" } }),
            json!({ "type": "content_block_delta", "index": 2, "delta": { "type": "thinking_delta", "thinking": "second" } }),
            json!({ "type": "content_block_delta", "index": 2, "delta": { "type": "signature_delta", "signature": "sig-2" } }),
            json!({ "type": "content_block_start", "index": 3, "content_block": { "type": "tool_use", "id": "t1", "name": "readFile", "input": {} } }),
            json!({ "type": "message_delta", "delta": { "stop_reason": "tool_use" }, "usage": { "output_tokens": 9 } }),
            json!({ "type": "message_stop" }),
        ];
        let mut builder = ReplyBuilder::default();
        let mut sink = |_: Delta| {};
        for event in &events {
            builder.event(event, &mut sink).unwrap();
        }
        let reply = builder.finish();
        let client = AnthropicClient::new(
            reqwest::Client::new(),
            "http://127.0.0.1:1",
            Some("sk-ant-secret".into()),
            "m",
        );
        let messages = [Message::user("go"), reply.to_message()];
        let body = client.body(&ModelRequest { system: "", messages: &messages, tools: &[], max_tokens: 10 });
        let blocks = body["messages"][1]["content"].as_array().unwrap();
        assert_eq!(blocks[0], json!({ "type": "thinking", "thinking": "first", "signature": "sig-1" }));
        assert_eq!(blocks[1], json!({ "type": "redacted_thinking", "data": "opaque" }));
        assert_eq!(blocks[2], json!({ "type": "thinking", "thinking": "second", "signature": "sig-2" }));
        assert_eq!(blocks[3]["type"], "tool_use");
        assert_eq!(blocks[3]["input"], json!({}));
        assert!(!format!("{client:?}").contains("sk-ant-secret"), "{client:?}");
    }
}
