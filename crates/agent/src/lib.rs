//! The agent loop both front ends share: a model behind one [`ModelClient`] trait (OpenAI-compatible
//! chat completions or Anthropic messages, both streaming, on reqwest), and an [`Agent`] whose turns
//! send every call through the one pipeline ([`tool_executor::Executor::execute_batch`]), so each
//! call is approved, sandboxed and journalled like any other.
//!
//! The adapters speak the providers' wire formats themselves (no SDK crates): OpenAI's
//! `chat.completion.chunk` deltas with `tool_calls[index]` fragments, Anthropic's content-block
//! events with `input_json_delta`. Both retry connection failures, 408/409/429/5xx (honouring
//! `retry-after`) and streams that break before anything was shown, with backoff; the agent resumes
//! a reply whose stream broke after text was shown.

pub mod agent;
pub mod anthropic;
pub mod config;
pub mod embeddings;
pub mod message;
pub mod openai;
pub mod provider;

pub use agent::{
    Agent, AgentConfig, AgentEvent, CANCELLED_NOTE, Compaction, NestedHost, Outcome, RESUME_NOTE,
    declarations, system_prompt,
};
pub use anthropic::AnthropicClient;
pub use config::{ConfigError, ConfigFile, ModelProfile, Overrides, ProviderKind};
pub use embeddings::OpenAiEmbedder;
pub use message::{Delta, Message, Reasoning, Reply, StopReason, ToolCall, Usage};
pub use openai::OpenAiClient;
pub use provider::{ModelClient, ModelRequest, ProviderError, RetryPolicy};
