//! The conversation in one neutral form; each provider adapter translates it to its own wire.

use serde::{Deserialize, Serialize};

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// What the person (or the agent on their behalf) said.
    User {
        /// The text.
        content: String,
    },
    /// What the model answered.
    Assistant {
        /// Its visible text.
        content: String,
        /// Its reasoning, when the provider streams it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning: Option<Reasoning>,
        /// The calls it asked for, in its order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one call, in the order of the calls.
    Tool {
        /// The call it answers.
        call_id: String,
        /// The function name the model used.
        name: String,
        /// What the model reads.
        content: String,
        /// Whether the call failed.
        #[serde(default)]
        is_error: bool,
        /// How it failed, as the pipeline said (kept with a saved conversation, so a resumed one
        /// labels a blocked or denied call as such; never sent to a model).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kind: Option<tool_core::ErrorKind>,
    },
}

impl Message {
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::User { content: content.into() }
    }

    /// The characters it holds (for context estimates).
    pub fn chars(&self) -> usize {
        match self {
            Self::User { content } => content.len(),
            Self::Assistant { content, reasoning, tool_calls } => {
                content.len()
                    + reasoning.as_ref().map_or(0, |r| r.text.len())
                    + tool_calls.iter().map(|c| c.name.len() + c.arguments.len() + c.id.len()).sum::<usize>()
            }
            Self::Tool { content, call_id, .. } => content.len() + call_id.len(),
        }
    }
}

/// A model's reasoning text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reasoning {
    /// The text, shown dimmed.
    pub text: String,
    /// Anthropic's signature, which must come back with the block on the next request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Anthropic's thinking and redacted-thinking blocks exactly as they came, each with its own
    /// signature or data, to send back verbatim and in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<serde_json::Value>,
}

/// A call as the model produced it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The model's id for it.
    pub id: String,
    /// The function name.
    pub name: String,
    /// The argument text, exactly as streamed (possibly cut).
    pub arguments: String,
}

/// Tokens used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens (cache reads included).
    pub input_tokens: u64,
    /// Completion tokens (reasoning included).
    pub output_tokens: u64,
}

impl Usage {
    /// Both counts together.
    pub fn total(self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    /// Adds another count.
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
    }
}

/// Why a reply ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished.
    EndTurn,
    /// The model wants its calls run.
    ToolUse,
    /// The output length limit cut it.
    Length,
    /// The provider's content filter stopped it.
    Refused,
    /// Something else the provider named.
    Other(String),
}

/// One whole reply of the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Its visible text.
    pub content: String,
    /// Its reasoning.
    pub reasoning: Option<Reasoning>,
    /// Its calls, in its order.
    pub tool_calls: Vec<ToolCall>,
    /// Why it ended.
    pub stop: StopReason,
    /// Tokens it used.
    pub usage: Usage,
}

impl Reply {
    /// The reply as a conversation message.
    pub fn to_message(&self) -> Message {
        Message::Assistant {
            content: self.content.clone(),
            reasoning: self.reasoning.clone(),
            tool_calls: self.tool_calls.clone(),
        }
    }
}

/// A piece of a reply as it streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delta {
    /// Visible text.
    Text(String),
    /// Reasoning text.
    Reasoning(String),
    /// A call began (its arguments follow in [`Delta::ToolArguments`]).
    ToolCall {
        /// Its position in the reply's calls.
        index: usize,
        /// Its id.
        id: String,
        /// Its function name.
        name: String,
    },
    /// A fragment of a call's arguments.
    ToolArguments {
        /// The call's position.
        index: usize,
        /// The fragment.
        fragment: String,
    },
    /// The request failed in a way worth another try; the adapter waits, then tries again and the
    /// reply so far is discarded.
    Retrying {
        /// The try about to be made (2 for the first retry).
        attempt: u32,
        /// How long it waits first.
        delay_ms: u64,
        /// What went wrong.
        reason: String,
    },
}
