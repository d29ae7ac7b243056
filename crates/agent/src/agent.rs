//! The loop: the model streams a reply; the calls of the reply go through the pipeline as one
//! batch; their results go back in the model's order; until a final answer, the turn limit, the
//! budget, a provider failure, or the person cancels.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tool_core::NestedCaller;
use tool_executor::{AttemptStatus, Batch, CallResult, Executor, RawCall, Session};

use crate::message::{Delta, Message, Reply, StopReason, ToolCall, Usage};
use crate::provider::{ModelClient, ModelRequest, ProviderError};

/// The base of every system prompt; the active tools' own system roles follow it.
pub const BASE_PROMPT: &str = "\
You are a capable agent working for a person in the folder {{working_directory}}. Today is {{date}}.

Work in small, verifiable steps with the tools you have. Read before you change; after a change,
check it (run the tests or the program). Calls of one message may run in parallel: put calls that
depend on each other in separate messages. A call may be denied by the person or by policy; the
result says why, so adapt rather than repeat it. When the task is done, answer with a short
summary of what changed and how you checked it.";

/// What a person who cancels leaves in the conversation, so the model knows on the next turn.
/// What the model is told after the person interrupted a turn (a user message of its own).
pub const CANCELLED_NOTE: &str =
    "[The person interrupted this turn. Calls that had not finished were cancelled.]";

/// Limits of the loop.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    /// Model replies per request of the person.
    pub max_turns: u32,
    /// Tokens (in and out) per request of the person; `None` is no limit.
    pub token_budget: Option<u64>,
    /// The longest reply, in tokens.
    pub max_tokens: u32,
    /// The model's context window, in tokens.
    pub context_window: u64,
    /// Compaction starts when the conversation fills this share of the window.
    pub compact_at: f64,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            max_turns: 50,
            token_budget: None,
            max_tokens: 8_192,
            context_window: 128_000,
            compact_at: 0.8,
        }
    }
}

/// What happens, as it happens.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentEvent {
    /// A piece of the reply streaming in.
    Delta(Delta),
    /// The reply is whole.
    Reply {
        /// Its text.
        content: String,
        /// Its calls.
        tool_calls: Vec<ToolCall>,
        /// Why it ended.
        stop: StopReason,
        /// Tokens it used.
        usage: Usage,
    },
    /// The reply's calls have settled, in the model's order.
    Results(Vec<CallResult>),
    /// The conversation was made smaller to fit the window.
    Compacted(Compaction),
    /// The stream broke after part of the reply was shown: that part is kept, and the model is
    /// asked to continue from it.
    Resumed {
        /// What broke, and what is done about it.
        reason: String,
    },
    /// A person's hook said something for the person (it failed, or had a message).
    HookNote {
        /// The hook (`hook:NAME`).
        hook: String,
        /// What it said.
        message: String,
    },
    /// A `Stop` hook did not let the model finish yet: the turn goes on with its reason.
    KeptGoing {
        /// The hook (`hook:NAME`).
        hook: String,
        /// What the model is told.
        reason: String,
    },
}

/// How many times `Stop` hooks may keep one request going (a hook that never lets go does not
/// hold the turn forever; the turn limit bounds it too).
const MAX_STOP_BLOCKS: u32 = 8;

/// How often one turn resumes a reply whose stream broke after text was shown.
const MAX_RESUMES: u32 = 2;

/// What the model is told after its reply was cut by a broken stream.
pub const RESUME_NOTE: &str = "[Your previous reply was cut off by a network failure after the text above. Continue \
exactly where it stopped, without repeating what was already said.]";

/// What a compaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compaction {
    /// Estimated tokens before.
    pub before_tokens: u64,
    /// Estimated tokens after.
    pub after_tokens: u64,
    /// Old tool results reduced to a notice.
    pub elided_results: usize,
    /// Messages replaced by a summary (0 when reducing results was enough).
    pub summarised_messages: usize,
}

/// How a request of the person ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The model gave its final answer.
    Answered {
        /// The answer.
        text: String,
        /// The output length limit cut it.
        truncated: bool,
    },
    /// The model was still calling tools after this many replies.
    TurnLimit {
        /// The limit.
        turns: u32,
    },
    /// The token budget is spent.
    BudgetSpent {
        /// Tokens used by this request.
        used: u64,
        /// The budget.
        budget: u64,
    },
    /// The person cancelled.
    Cancelled,
    /// A person's `UserPromptSubmit` hook refused the prompt; it was not sent.
    Blocked {
        /// The hook (`hook:NAME`).
        hook: String,
        /// Why.
        reason: String,
    },
    /// The model could not be reached or refused.
    Failed(ProviderError),
}

/// Where an agent's calls run.
#[derive(Debug)]
enum Host {
    /// A session of its own: each reply's calls are one batch through the pipeline.
    Session { executor: Executor, session: Arc<Session> },
    /// Inside a running call (a sub-agent): each of its calls is a nested call of that one,
    /// through the same pipeline and session.
    Nested(NestedHost),
}

/// How an agent that runs inside a call (a sub-agent) runs its own calls.
#[derive(Debug, Clone)]
pub struct NestedHost {
    /// Runs one call through the pipeline as a nested call of the call the agent runs in
    /// (approved, sandboxed and journalled as any, linked to that call, cancelled with it).
    pub caller: NestedCaller,
    /// The functions its model was given: a call naming any other is refused without running
    /// (the pipeline would run any function by name for a nested call, `callSubAgent` included).
    pub allowed: Vec<String>,
    /// Functions that run alone, in the model's order; the rest of a reply's calls run together.
    pub sequential: Vec<String>,
}

/// A conversation with a model whose calls run through the pipeline.
#[derive(Debug)]
pub struct Agent {
    client: Arc<dyn ModelClient>,
    host: Host,
    system: String,
    tools: Vec<Value>,
    tools_chars: usize,
    /// The session's tools version the declarations were made at (tool search changes it).
    tools_version: u64,
    messages: Vec<Message>,
    usage: Usage,
    config: AgentConfig,
    hooks: Option<Arc<hooks::Hooks>>,
}

impl Agent {
    /// An agent over `session`'s active tools, declared in the client's format, with the base
    /// prompt and their system roles.
    pub fn new(
        client: Arc<dyn ModelClient>,
        executor: Executor,
        session: Arc<Session>,
        config: AgentConfig,
    ) -> Self {
        let tools = declarations(&executor, &session, client.tool_format());
        let system = system_prompt(&executor, &session);
        let tools_chars = tools.iter().map(|t| t.to_string().len()).sum();
        let tools_version = session.tools_version();
        Self {
            client,
            host: Host::Session { executor, session },
            system,
            tools,
            tools_chars,
            tools_version,
            messages: Vec::new(),
            usage: Usage::default(),
            config,
            hooks: None,
        }
    }

    /// An agent that runs inside a call (a sub-agent): `tools` are the declarations its model is
    /// given (in the client's format), `system` its whole system prompt, and its calls run as
    /// nested calls of that call through `host`. It has no hooks and no session of its own.
    pub fn nested(
        client: Arc<dyn ModelClient>,
        host: NestedHost,
        system: String,
        tools: Vec<Value>,
        config: AgentConfig,
    ) -> Self {
        let tools_chars = tools.iter().map(|t| t.to_string().len()).sum();
        Self {
            client,
            host: Host::Nested(host),
            system,
            tools,
            tools_chars,
            tools_version: 0,
            messages: Vec::new(),
            usage: Usage::default(),
            config,
            hooks: None,
        }
    }

    /// Where the person's hooks see this agent work (none inside a call).
    fn place(&self) -> Option<hooks::Place> {
        match &self.host {
            Host::Session { session, .. } => Some(hooks::Place::of(&session.config)),
            Host::Nested(_) => None,
        }
    }

    /// Adds instructions to the system prompt after the tools' roles (a project's `AGENTS.md`,
    /// as the front end found and the person allowed); empty text adds nothing.
    #[must_use]
    pub fn with_instructions(mut self, instructions: &str) -> Self {
        if !instructions.trim().is_empty() {
            self.system.push_str("\n\n");
            self.system.push_str(instructions.trim_end());
        }
        self
    }

    /// Runs the person's hooks at each prompt (`UserPromptSubmit`) and each final answer
    /// (`Stop`); [`Self::start_hooks`] runs `SessionStart`.
    #[must_use]
    pub fn with_hooks(mut self, hooks: Option<Arc<hooks::Hooks>>) -> Self {
        self.hooks = hooks.filter(|h| !h.is_empty());
        self
    }

    /// Runs `SessionStart` hooks (`source`: `startup`, `resume`, `clear`, `compact`): what they
    /// say for the model joins the system prompt. Returns that text (for an agent made again
    /// for the same session: [`Self::with_instructions`]) and what they say for the person.
    pub async fn start_hooks(&mut self, source: &str) -> (String, Vec<(String, String)>) {
        let (Some(hooks), Some(place)) = (self.hooks.clone(), self.place()) else {
            return (String::new(), Vec::new());
        };
        let answer = hooks.session_start(&place, source).await;
        let prompt: String = answer
            .context
            .iter()
            .map(|context| format!("<session-start-hook>\n{}\n</session-start-hook>", context.trim_end()))
            .collect::<Vec<_>>()
            .join("\n\n");
        if !prompt.is_empty() {
            self.system.push_str("\n\n");
            self.system.push_str(&prompt);
        }
        (prompt, answer.notes.into_iter().map(|n| (n.hook, n.message)).collect())
    }

    /// Continues an earlier conversation.
    #[must_use]
    pub fn with_history(mut self, messages: Vec<Message>) -> Self {
        self.messages = messages;
        self
    }

    /// The conversation so far.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The system prompt.
    pub fn system_prompt(&self) -> &str {
        &self.system
    }

    /// Declares the session's tools again when tool search found more since the last time.
    fn redeclare_if_changed(&mut self) {
        let Host::Session { executor, session } = &self.host else { return };
        let version = session.tools_version();
        if version != self.tools_version {
            self.tools = declarations(executor, session, self.client.tool_format());
            self.tools_chars = self.tools.iter().map(|t| t.to_string().len()).sum();
            self.tools_version = version;
        }
    }

    /// The tool declarations the model is given.
    pub fn tools(&self) -> &[Value] {
        &self.tools
    }

    /// Tokens used so far.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// The session its calls run in (none for an agent inside a call).
    pub fn session(&self) -> Option<&Arc<Session>> {
        match &self.host {
            Host::Session { session, .. } => Some(session),
            Host::Nested(_) => None,
        }
    }

    /// The model client.
    pub fn client(&self) -> &Arc<dyn ModelClient> {
        &self.client
    }

    /// Runs one request of the person to its end. Events go to `events` (a closed receiver is
    /// fine); `cancel` stops the turn: a streaming reply is cut, running calls settle as cancelled,
    /// and the model is told on the next request.
    pub async fn run(
        &mut self,
        input: &str,
        events: &mpsc::UnboundedSender<AgentEvent>,
        cancel: &CancellationToken,
    ) -> Outcome {
        // Where the conversation stood: a turn that fails before the model answered anything
        // takes its request back out, so that the person's next one is not joined to it.
        let mark = (
            self.messages.len(),
            match self.messages.last() {
                Some(Message::User { content }) => Some(content.len()),
                _ => None,
            },
        );
        let place = self.place();
        let input = match self.prompt_hooks(place.as_ref(), input, events, cancel).await {
            Ok(input) => input,
            Err(outcome) => return outcome,
        };
        self.push_user(&input);
        let start = self.usage;
        let mut turns = 0;
        let mut resumes = 0;
        let mut stop_blocks = 0;
        loop {
            if cancel.is_cancelled() {
                self.push_user(CANCELLED_NOTE);
                return Outcome::Cancelled;
            }
            if let Some(limit) = self.limit_reached(turns, start) {
                return limit;
            }
            // Before measuring: what tool search declared counts toward the window.
            self.redeclare_if_changed();
            match self.compact_if_needed(cancel).await {
                Ok(Some(compaction)) => {
                    let _ = events.send(AgentEvent::Compacted(compaction));
                }
                Ok(None) => {}
                Err(None) => {
                    self.push_user(CANCELLED_NOTE);
                    return Outcome::Cancelled;
                }
                Err(Some(error)) => return self.failed(error, mark),
            }
            turns += 1;

            let (result, partial) = self.stream_reply(events, cancel).await;
            let reply = match result {
                None => {
                    // The reply so far stays, marked, without its unfinished calls (a call
                    // without a result would break the conversation).
                    if !partial.is_empty() {
                        self.push_assistant_text(format!("{partial}\n[cut off]"));
                    }
                    self.push_user(CANCELLED_NOTE);
                    return Outcome::Cancelled;
                }
                // Text was shown, then the stream broke: what arrived stays, and the model is
                // asked to go on from it (a second reply from scratch would not be the same one).
                Some(Err(ProviderError::Stream { provider, message }))
                    if !partial.trim().is_empty() && resumes < MAX_RESUMES =>
                {
                    resumes += 1;
                    self.push_assistant_text(partial);
                    self.push_user(RESUME_NOTE);
                    let _ = events.send(AgentEvent::Resumed {
                        reason: format!(
                            "{provider}'s stream broke mid-reply ({message}); asking the model to continue from \
                             what arrived"
                        ),
                    });
                    continue;
                }
                Some(Err(error)) => return self.failed(error, mark),
                Some(Ok(reply)) => reply,
            };
            self.usage.add(reply.usage);
            let _ = events.send(AgentEvent::Reply {
                content: reply.content.clone(),
                tool_calls: reply.tool_calls.clone(),
                stop: reply.stop.clone(),
                usage: reply.usage,
            });
            if !reply.content.is_empty() || !reply.tool_calls.is_empty() || reply.reasoning.is_some() {
                self.messages.push(reply.to_message());
            }
            if reply.tool_calls.is_empty() {
                if self.hooks.is_some() && stop_blocks >= MAX_STOP_BLOCKS {
                    let _ = events.send(AgentEvent::HookNote {
                        hook: "Stop".into(),
                        message: format!(
                            "Stop hooks kept the model going {MAX_STOP_BLOCKS} times in this request; this answer ends it"
                        ),
                    });
                } else if self
                    .stop_hooks_keep_going(place.as_ref(), stop_blocks, &reply.content, events, cancel)
                    .await
                {
                    stop_blocks += 1;
                    continue;
                }
                return Outcome::Answered {
                    text: reply.content,
                    truncated: reply.stop == StopReason::Length,
                };
            }
            let (results, cancelled) = self.run_calls(&reply, cancel).await;
            self.push_results(&results);
            let _ = events.send(AgentEvent::Results(results));
            if cancelled {
                self.push_user(CANCELLED_NOTE);
                return Outcome::Cancelled;
            }
        }
    }

    /// The turn limit or the token budget, when this request's `turns` replies or its tokens
    /// since `start` reached one.
    fn limit_reached(&self, turns: u32, start: Usage) -> Option<Outcome> {
        if turns >= self.config.max_turns {
            return Some(Outcome::TurnLimit { turns });
        }
        let used = self.usage.total() - start.total();
        self.config.token_budget.filter(|b| used >= *b).map(|budget| Outcome::BudgetSpent { used, budget })
    }

    /// One model request: its deltas go out as events as they come; the reply, or `None` when
    /// cancelled, with the text that streamed (kept when the stream breaks or is cancelled).
    async fn stream_reply(
        &self,
        events: &mpsc::UnboundedSender<AgentEvent>,
        cancel: &CancellationToken,
    ) -> (Option<Result<Reply, ProviderError>>, String) {
        let mut partial = String::new();
        let request = ModelRequest {
            system: &self.system,
            messages: &self.messages,
            tools: &self.tools,
            max_tokens: self.config.max_tokens,
        };
        let mut sink = |delta: Delta| {
            match &delta {
                Delta::Text(text) => partial.push_str(text),
                Delta::Retrying { .. } => partial.clear(),
                _ => {}
            }
            let _ = events.send(AgentEvent::Delta(delta));
        };
        let result = tokio::select! {
            result = self.client.stream(&request, &mut sink) => Some(result),
            () = cancel.cancelled() => None,
        };
        (result, partial)
    }

    /// A reply of text alone (no reasoning, no calls) into the conversation.
    fn push_assistant_text(&mut self, content: String) {
        self.messages.push(Message::Assistant { content, reasoning: None, tool_calls: Vec::new() });
    }

    /// The person's message as the model gets it: `UserPromptSubmit` hooks may add context or
    /// block it (`Err`: the turn ends so, or cancelled while they ran).
    async fn prompt_hooks(
        &self,
        place: Option<&hooks::Place>,
        input: &str,
        events: &mpsc::UnboundedSender<AgentEvent>,
        cancel: &CancellationToken,
    ) -> Result<String, Outcome> {
        let mut input = input.to_owned();
        let (Some(hooks), Some(place)) = (self.hooks.clone(), place) else { return Ok(input) };
        let answer = tokio::select! {
            answer = hooks.user_prompt_submit(place, &input) => answer,
            () = cancel.cancelled() => return Err(Outcome::Cancelled),
        };
        for note in answer.notes {
            let _ = events.send(AgentEvent::HookNote { hook: note.hook, message: note.message });
        }
        if let Some((hook, reason)) = answer.block {
            return Err(Outcome::Blocked { hook, reason });
        }
        for context in answer.context {
            input.push_str("\n\n<user-prompt-submit-hook>\n");
            input.push_str(context.trim_end());
            input.push_str("\n</user-prompt-submit-hook>");
        }
        Ok(input)
    }

    /// Whether a `Stop` hook keeps the model going after an answer (its reason is then the next
    /// message). A cancel while they run lets the answer stand.
    async fn stop_hooks_keep_going(
        &mut self,
        place: Option<&hooks::Place>,
        stop_blocks: u32,
        answer_text: &str,
        events: &mpsc::UnboundedSender<AgentEvent>,
        cancel: &CancellationToken,
    ) -> bool {
        let (Some(hooks), Some(place)) = (self.hooks.clone(), place) else { return false };
        let answer = tokio::select! {
            answer = hooks.stop(place, stop_blocks > 0, answer_text) => answer,
            () = cancel.cancelled() => hooks::TurnAnswer::default(),
        };
        for note in answer.notes {
            let _ = events.send(AgentEvent::HookNote { hook: note.hook, message: note.message });
        }
        let Some((hook, reason)) = answer.block else { return false };
        let _ = events.send(AgentEvent::KeptGoing { hook: hook.clone(), reason: reason.clone() });
        // An answer with no text is not in the conversation: the note follows the last message,
        // as after a cancel.
        self.push_user(&format!("<stop-hook name=\"{hook}\">\n{reason}\n</stop-hook>"));
        true
    }

    /// The calls' results into the conversation, with how each failed (kept in a saved
    /// conversation; never sent to a model).
    fn push_results(&mut self, results: &[CallResult]) {
        for result in results {
            self.messages.push(Message::Tool {
                call_id: result.call_id.clone(),
                name: result.name.clone(),
                content: result.output.content.clone(),
                is_error: !result.output.success,
                kind: result.output.error.as_ref().map(|e| e.kind),
            });
        }
    }

    /// Runs a reply's calls as one batch, cancelled as a whole when the person cancels (running
    /// calls settle as cancelled, calls not yet started never run; each gets its one result).
    async fn run_calls(&self, reply: &Reply, cancel: &CancellationToken) -> (Vec<CallResult>, bool) {
        let batch = Batch {
            message_id: None,
            calls: reply
                .tool_calls
                .iter()
                .map(|c| RawCall { id: c.id.clone(), name: c.name.clone(), arguments: c.arguments.clone() })
                .collect(),
            stopped_on_length: reply.stop == StopReason::Length,
        };
        let results = match &self.host {
            Host::Session { executor, session } => executor.execute_batch_until(session, batch, cancel).await,
            Host::Nested(host) => run_nested(host, batch.calls).await,
        };
        (results, cancel.is_cancelled())
    }

    /// The turn failed. If nothing came back since its request was added (`mark`: the number of
    /// messages before, and the length of the user message it was joined to, if any), the
    /// request is taken out again: it is the person's to send again, and must not be joined to
    /// the next one.
    fn failed(&mut self, error: ProviderError, mark: (usize, Option<usize>)) -> Outcome {
        let (before, joined) = mark;
        let untouched = self.messages.len() == before + usize::from(joined.is_none())
            && matches!(self.messages.last(), Some(Message::User { .. }));
        if untouched {
            match (joined, self.messages.last_mut()) {
                (Some(length), Some(Message::User { content })) => content.truncate(length),
                _ => {
                    self.messages.pop();
                }
            }
        }
        Outcome::Failed(error)
    }

    /// A user message; one right after another user message joins it (providers want turns to
    /// alternate, and a note after a cancel is followed by the person's next request).
    fn push_user(&mut self, text: &str) {
        if let Some(Message::User { content }) = self.messages.last_mut() {
            content.push_str("\n\n");
            content.push_str(text);
        } else {
            self.messages.push(Message::user(text));
        }
    }

    /// Tokens the conversation is estimated to take: three characters a token, which errs high
    /// for prose and about right for code and JSON.
    pub fn estimated_tokens(&self) -> u64 {
        let chars =
            self.system.len() + self.tools_chars + self.messages.iter().map(Message::chars).sum::<usize>();
        (chars / 3) as u64
    }

    fn threshold(&self) -> u64 {
        let window = self.config.context_window;
        let share = (window as f64 * self.config.compact_at) as u64;
        // Room for the reply, but never less than half the window (a profile whose reply limit
        // is as large as its window would otherwise summarise on every turn).
        share.min(window.saturating_sub(u64::from(self.config.max_tokens))).max(window / 2)
    }

    /// Makes the conversation fit: first old tool results become notices, then, if that is not
    /// enough, everything before the latest reply is replaced by the model's own summary.
    /// `Err(None)` is a cancel during the summary.
    async fn compact_if_needed(
        &mut self,
        cancel: &CancellationToken,
    ) -> Result<Option<Compaction>, Option<ProviderError>> {
        let threshold = self.threshold();
        let before_tokens = self.estimated_tokens();
        if before_tokens <= threshold {
            return Ok(None);
        }
        // The results of the latest reply stay whole: the model has not read them yet.
        let latest = self.messages.iter().rposition(|m| matches!(m, Message::Assistant { .. })).unwrap_or(0);
        let mut elided_results = 0;
        for message in &mut self.messages[..latest] {
            if let Message::Tool { name, content, .. } = message
                && content.len() > 200
                && !content.starts_with("[Removed to fit")
            {
                *content = format!(
                    "[Removed to fit the context window: the result of {name} ({} characters). Call it \
                     again if it is still needed.]",
                    content.len()
                );
                elided_results += 1;
            }
        }
        let mut compaction = Compaction {
            before_tokens,
            after_tokens: self.estimated_tokens(),
            elided_results,
            summarised_messages: 0,
        };
        if compaction.after_tokens <= threshold {
            return Ok(Some(compaction));
        }
        if latest == 0 {
            // Nothing before the latest reply to summarise (a first request that is itself too
            // long): the provider's own error will say so if it does not fit.
            return Ok((elided_results > 0).then_some(compaction));
        }
        let summary = self.summarise(latest, cancel).await?;
        let request = self.messages[..latest].iter().rev().find_map(|m| match m {
            Message::User { content } => Some(content.clone()),
            _ => None,
        });
        let mut text =
            format!("[Summary of the conversation so far, written to fit the context window]\n{summary}");
        if let Some(request) = request {
            text.push_str("\n\nThe person's latest request, verbatim:\n");
            text.push_str(&request);
        }
        self.messages.splice(..latest, [Message::user(text)]);
        compaction.summarised_messages = latest;
        compaction.after_tokens = self.estimated_tokens();
        Ok(Some(compaction))
    }

    /// Makes the conversation smaller now, whatever its size (the person asked, `/compact`):
    /// the model writes a summary of all of it, which replaces it — unless the summary is no
    /// smaller, when the conversation is kept and nothing is summarised.
    ///
    /// # Errors
    ///
    /// `Err(None)` when cancelled; the provider's error, the conversation kept as it was.
    pub async fn compact_now(
        &mut self,
        cancel: &CancellationToken,
    ) -> Result<Option<Compaction>, Option<ProviderError>> {
        let upto = self.messages.len();
        if upto == 0 {
            return Ok(None);
        }
        let before_tokens = self.estimated_tokens();
        let summary = self.summarise(upto, cancel).await?;
        let summary = Message::user(format!(
            "[Summary of the conversation so far, written when the person asked to compact it]\n{summary}"
        ));
        // A conversation smaller than its summary stays as it is (nothing summarised).
        let kept: usize = self.messages.iter().map(Message::chars).sum();
        if summary.chars() >= kept {
            return Ok(Some(Compaction {
                before_tokens,
                after_tokens: before_tokens,
                elided_results: 0,
                summarised_messages: 0,
            }));
        }
        self.messages = vec![summary];
        Ok(Some(Compaction {
            before_tokens,
            after_tokens: self.estimated_tokens(),
            elided_results: 0,
            summarised_messages: upto,
        }))
    }

    async fn summarise(
        &mut self,
        upto: usize,
        cancel: &CancellationToken,
    ) -> Result<String, Option<ProviderError>> {
        let mut messages = self.messages[..upto].to_vec();
        messages.push(Message::user(
            "Summarise the conversation above for yourself, to continue the work from it: the person's \
             goal and constraints, what was done and found (files, commands, results), decisions made, \
             and what remains. Be specific and brief. Do not call tools.",
        ));
        // Without tools: the answer must be text. (Providers accept tool calls and results in the
        // history of a request that declares no tools.)
        let request = ModelRequest {
            system: "You summarise a conversation between a person and an agent so the agent can continue it.",
            messages: &messages,
            tools: &[],
            max_tokens: self.config.max_tokens,
        };
        let mut ignore = |_: Delta| {};
        let reply = tokio::select! {
            reply = self.client.stream(&request, &mut ignore) => reply.map_err(Some)?,
            () = cancel.cancelled() => return Err(None),
        };
        self.usage.add(reply.usage);
        if reply.content.trim().is_empty() {
            // An empty summary would wipe the history: keep it, and let the provider say if the
            // request no longer fits.
            return Err(Some(ProviderError::Protocol {
                provider: "compaction",
                message: "the model returned an empty summary; the conversation was kept as it was".into(),
            }));
        }
        Ok(reply.content)
    }
}

/// The declarations the session's model is given now in `format`, named as the session names
/// them: its direct functions and the deferred ones tool search has found.
pub fn declarations(
    executor: &Executor,
    session: &Session,
    format: tool_core::provider::Provider,
) -> Vec<Value> {
    tool_executor::session_functions(executor.toolbox(), session)
        .iter()
        .map(|function| format.declare(&function.name, &function.api))
        .collect()
}

/// The base prompt and the session's tools' system roles, with `{{date}}` and
/// `{{working_directory}}` filled in.
pub fn system_prompt(executor: &Executor, session: &Session) -> String {
    let values = tool_executor::role_values(executor.toolbox(), session);
    let mut prompt = tool_core::manifest::render_template(BASE_PROMPT, &values);
    // The base prompt gives the date; a tool's role that gives it too (for front ends without
    // this prompt) says it once here.
    let today = tool_core::manifest::render_template("Today is {{date}}.", &values);
    // The roles of tools the model is given from the start: a deferred tool's role would teach a
    // function the model has not seen (the prompt stays the same all session, for caching).
    for entry in executor.toolbox().tools() {
        let active = entry.manifest.apis.iter().any(|api| {
            session
                .names
                .name_of(&entry.manifest.identifier, &api.name)
                .is_some_and(|name| session.exposure_of(name) == tool_core::Exposure::Direct)
        });
        if active && !entry.manifest.system_role.trim().is_empty() {
            let role = entry.manifest.render_system_role(&values);
            let role = role.replace(&today, "");
            let role: Vec<&str> = role.lines().map(str::trim_end).collect();
            let mut role = role.join("\n");
            while role.contains("\n\n\n") {
                role = role.replace("\n\n\n", "\n\n");
            }
            let role = role.trim();
            if role.is_empty() {
                continue;
            }
            prompt.push_str("\n\n");
            prompt.push_str(role);
        }
    }
    prompt
}

/// Runs a reply's calls as nested calls: those that run alone one at a time in the model's order,
/// the others of a stretch between them together; each gets its one result.
async fn run_nested(host: &NestedHost, calls: Vec<RawCall>) -> Vec<CallResult> {
    let one = |call: RawCall| {
        let caller = host.caller.clone();
        async move {
            let started = std::time::Instant::now();
            if !host.allowed.contains(&call.name) {
                let output = tool_core::ToolOutput::error(
                    tool_core::ErrorKind::UnknownTool,
                    format!(
                        "`{}` is not one of the functions you were given ({}); it was not run",
                        call.name,
                        host.allowed.join(", ")
                    ),
                );
                return CallResult {
                    call_id: call.id,
                    name: call.name,
                    tool: None,
                    api: None,
                    status: AttemptStatus::Failed,
                    output,
                    duration_ms: 0,
                };
            }
            let arguments = match serde_json::from_str::<Value>(&call.arguments) {
                Ok(value) => value,
                // The pipeline diagnoses what is wrong with it.
                Err(_) => Value::String(call.arguments.clone()),
            };
            let output = caller.call(call.name.clone(), arguments).await;
            let status = match output.error.as_ref().map(|e| e.kind) {
                None if output.success => AttemptStatus::Executed,
                Some(tool_core::ErrorKind::Denied) => AttemptStatus::Denied,
                Some(tool_core::ErrorKind::Blocked) => AttemptStatus::Blocked,
                _ => AttemptStatus::Failed,
            };
            CallResult {
                call_id: call.id,
                name: call.name,
                tool: None,
                api: None,
                status,
                output,
                duration_ms: started.elapsed().as_millis() as u64,
            }
        }
    };
    let mut results = Vec::with_capacity(calls.len());
    let mut together = Vec::new();
    for call in calls {
        if host.sequential.contains(&call.name) {
            results.extend(futures::future::join_all(together.drain(..).map(one)).await);
            results.push(one(call).await);
        } else {
            together.push(call);
        }
    }
    results.extend(futures::future::join_all(together.into_iter().map(one)).await);
    results
}
