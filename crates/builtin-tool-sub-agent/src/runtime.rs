//! Running `callSubAgent`: the models sub-agents may use, and the nested loop.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use agent::{Agent, AgentConfig, AgentEvent, ModelClient, NestedHost, Outcome};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tool_core::{
    CallContext, ErrorKind, ExecutionMode, MissingService, Progress, Services, SessionFunction, ToolOutput,
    ToolRuntime, parse_arguments,
};

use super::{CallSubAgentArgs, IDENTIFIER, SUB_AGENT_PROMPT, SubAgentApi};

/// The limits of one sub-agent (its time is its call's timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubAgentLimits {
    /// Model replies it may take.
    pub max_turns: u32,
    /// Tokens (in and out) it may use.
    pub token_budget: u64,
}

impl Default for SubAgentLimits {
    fn default() -> Self {
        Self { max_turns: 25, token_budget: 400_000 }
    }
}

/// A model sub-agents may use.
#[derive(Debug, Clone)]
pub struct SubAgentModel {
    /// The profile's name (what a session names).
    pub name: String,
    /// Its client (its key comes from the front end's environment, never from a session).
    pub client: Arc<dyn ModelClient>,
    /// Its reply length and context window.
    pub config: AgentConfig,
}

/// A model name no profile has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no sub-agent model `{name}`; the configured ones are: {known}")]
pub struct UnknownModel {
    /// The name asked for.
    pub name: String,
    /// The names there are.
    pub known: String,
}

/// The models sub-agents may use, the one each session chose, and their limits: a service the
/// front end gives the registry (without it the tool is left out).
#[derive(Debug, Default)]
pub struct SubAgentModels {
    models: BTreeMap<String, SubAgentModel>,
    default: Option<String>,
    chosen: Mutex<HashMap<String, String>>,
    limits: SubAgentLimits,
}

impl SubAgentModels {
    /// No models yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a model; the first added is the default until [`Self::with_default`].
    #[must_use]
    pub fn with_model(mut self, model: SubAgentModel) -> Self {
        if self.default.is_none() {
            self.default = Some(model.name.clone());
        }
        self.models.insert(model.name.clone(), model);
        self
    }

    /// The model sessions use unless they name another.
    ///
    /// # Errors
    ///
    /// [`UnknownModel`] when no model has that name.
    pub fn with_default(mut self, name: &str) -> Result<Self, UnknownModel> {
        self.check(name)?;
        self.default = Some(name.to_owned());
        Ok(self)
    }

    /// Sets the limits of each sub-agent.
    #[must_use]
    pub fn with_limits(mut self, limits: SubAgentLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The limits of each sub-agent.
    pub fn limits(&self) -> SubAgentLimits {
        self.limits
    }

    /// The models' names.
    pub fn names(&self) -> Vec<String> {
        self.models.keys().cloned().collect()
    }

    /// Whether a model has this name.
    ///
    /// # Errors
    ///
    /// [`UnknownModel`], naming the models there are.
    pub fn check(&self, name: &str) -> Result<(), UnknownModel> {
        if self.models.contains_key(name) {
            return Ok(());
        }
        let known = if self.models.is_empty() { "none".to_owned() } else { self.names().join(", ") };
        Err(UnknownModel { name: name.to_owned(), known })
    }

    /// `session`'s sub-agents use `name` (`None`: the default again).
    ///
    /// # Errors
    ///
    /// [`UnknownModel`]; the session keeps what it had.
    pub fn choose(&self, session: &str, name: Option<&str>) -> Result<(), UnknownModel> {
        let mut chosen = self.chosen.lock().unwrap_or_else(|p| p.into_inner());
        match name {
            Some(name) => {
                self.check(name)?;
                chosen.insert(session.to_owned(), name.to_owned());
            }
            None => {
                chosen.remove(session);
            }
        }
        Ok(())
    }

    /// The session has ended.
    pub fn forget(&self, session: &str) {
        self.chosen.lock().unwrap_or_else(|p| p.into_inner()).remove(session);
    }

    /// The model `session`'s sub-agents use.
    pub fn for_session(&self, session: &str) -> Option<&SubAgentModel> {
        let chosen = self.chosen.lock().unwrap_or_else(|p| p.into_inner()).get(session).cloned();
        chosen.or_else(|| self.default.clone()).and_then(|name| self.models.get(&name))
    }
}

/// Runs `callSubAgent`.
#[derive(Debug, Clone)]
pub struct SubAgentRuntime {
    models: Arc<SubAgentModels>,
}

/// Builds the runtime from the front end's [`SubAgentModels`].
///
/// # Errors
///
/// [`MissingService`] when the front end configured no model for sub-agents (the tool is then
/// left out).
pub fn runtime(services: &Services) -> Result<Arc<dyn ToolRuntime>, MissingService> {
    let models = services
        .get::<Arc<SubAgentModels>>()
        .filter(|m| !m.models.is_empty())
        .cloned()
        .ok_or(MissingService("a model for sub-agents"))?;
    Ok(Arc::new(SubAgentRuntime { models }))
}

/// The functions a sub-agent is given: the session's, never this tool's, narrowed to `wanted`
/// (function or tool names) when given.
fn chosen_functions(
    all: Vec<SessionFunction>,
    wanted: Option<&[String]>,
) -> Result<Vec<SessionFunction>, String> {
    let mine: Vec<SessionFunction> = all.into_iter().filter(|f| f.tool != IDENTIFIER).collect();
    let Some(wanted) = wanted else { return Ok(mine) };
    let unknown: Vec<&str> = wanted
        .iter()
        .map(String::as_str)
        .filter(|w| !mine.iter().any(|f| f.name == *w || f.tool == *w))
        .collect();
    if !unknown.is_empty() {
        let names: Vec<&str> = mine.iter().map(|f| f.name.as_str()).collect();
        return Err(format!(
            "{} {} not among the functions a sub-agent may be given ({}); sub-agents cannot call sub-agents",
            unknown.join(", "),
            if unknown.len() == 1 { "is" } else { "are" },
            names.join(", ")
        ));
    }
    Ok(mine.into_iter().filter(|f| wanted.iter().any(|w| f.name == *w || f.tool == *w)).collect())
}

/// A short line of what a call was asked or gave, for the card.
fn gist(arguments: &str) -> String {
    let value: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
    let text = ["command", "path", "pattern", "query", "url", "expression", "question", "task"]
        .iter()
        .find_map(|key| value.get(key).and_then(Value::as_str))
        .unwrap_or_default();
    let line = text.lines().next().unwrap_or_default();
    let short: String = line.chars().take(80).collect();
    if short.len() < text.len() { format!("{short}…") } else { short }
}

impl ToolRuntime for SubAgentRuntime {
    fn execute<'a>(
        &'a self,
        api: &'a str,
        arguments: Value,
        context: &'a CallContext,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            if api.parse::<SubAgentApi>().is_err() {
                return ToolOutput::error(ErrorKind::UnknownTool, format!("sub-agent has no api `{api}`"));
            }
            let args: CallSubAgentArgs = match parse_arguments(api, arguments) {
                Ok(args) => args,
                Err(output) => return output,
            };
            if args.task.trim().is_empty() {
                return ToolOutput::error(ErrorKind::InvalidArguments, "the task is empty: say what to do");
            }
            let Some(model) = self.models.for_session(&context.session_id) else {
                return ToolOutput::error(ErrorKind::Internal, "no model is configured for sub-agents here");
            };
            let (Some(tools), Some(caller)) = (&context.tools, &context.nested) else {
                return ToolOutput::error(
                    ErrorKind::Internal,
                    "this front end cannot run sub-agents (its pipeline gives calls no nested calls)",
                );
            };
            let functions = match chosen_functions(tools.functions(), args.tools.as_deref()) {
                Ok(functions) => functions,
                Err(why) => return ToolOutput::error(ErrorKind::InvalidArguments, why),
            };
            let format = model.client.tool_format();
            let declarations: Vec<Value> =
                functions.iter().map(|f| format.declare(&f.name, &f.api)).collect();
            let mut tool_ids: Vec<String> = functions.iter().map(|f| f.tool.clone()).collect();
            tool_ids.dedup();
            let folder = context
                .working_directory
                .as_ref()
                .map_or_else(|| "(none)".to_owned(), |d| d.display().to_string());
            let values =
                BTreeMap::from([("date", tool_core::manifest::today()), ("working_directory", folder)]);
            let mut system = tool_core::manifest::render_template(SUB_AGENT_PROMPT, &values);
            let roles = tools.roles(&tool_ids);
            if !roles.trim().is_empty() {
                system.push_str("\n\n");
                system.push_str(&roles);
            }
            if let Some(instructions) = args.instructions.as_deref().map(str::trim).filter(|i| !i.is_empty())
            {
                system.push_str("\n\n<instructions-from-the-calling-agent>\n");
                system.push_str(instructions);
                system.push_str("\n</instructions-from-the-calling-agent>");
            }
            let sequential = functions
                .iter()
                .filter(|f| f.api.execution == ExecutionMode::Sequential)
                .map(|f| f.name.clone())
                .collect();
            let limits = self.models.limits();
            let config = AgentConfig {
                max_turns: limits.max_turns,
                token_budget: Some(limits.token_budget),
                ..model.config.clone()
            };
            let allowed = functions.iter().map(|f| f.name.clone()).collect();
            let host = NestedHost { caller: caller.clone(), allowed, sequential };
            let mut agent = Agent::nested(model.client.clone(), host, system, declarations, config);

            // What it does, as it does it: progress for people, the calls for the summary.
            let (events, seen) = mpsc::unbounded_channel();
            let watcher = tokio::spawn(watch(seen, context.progress.clone()));
            let outcome = agent.run(args.task.trim(), &events, &context.cancel).await;
            drop(events);
            let (calls, replies) = watcher.await.unwrap_or_default();
            let tokens = agent.usage().total();
            let summary = summary(&model.name, &calls, replies, tokens);
            let (output, answer, how) = ended_as(outcome, &summary);
            output.with_state(json!({
                "task": args.task,
                "model": model.name,
                "outcome": how,
                "answer": answer,
                "calls": calls,
                "turns": replies,
                "tokens": tokens,
                "tools": functions.iter().map(|f| f.name.clone()).collect::<Vec<_>>(),
            }))
        })
    }
}

/// Watches a sub-agent's events: progress for people as it works, and the calls it made (id,
/// name, status, the gist of its arguments) with the number of replies, for the summary.
async fn watch(
    mut seen: mpsc::UnboundedReceiver<AgentEvent>,
    progress: tool_core::runtime::ProgressSink,
) -> (Vec<Value>, u64) {
    let mut calls: Vec<Value> = Vec::new();
    let mut asked: HashMap<String, String> = HashMap::new();
    let mut replies = 0_u64;
    while let Some(event) = seen.recv().await {
        match event {
            AgentEvent::Reply { tool_calls, .. } => {
                replies += 1;
                if !tool_calls.is_empty() {
                    let names: Vec<&str> = tool_calls.iter().map(|c| c.name.as_str()).collect();
                    progress.message(format!("calling {}", names.join(", ")));
                }
                for call in tool_calls {
                    asked.insert(call.id.clone(), gist(&call.arguments));
                }
            }
            AgentEvent::Results(results) => {
                for result in results {
                    let gist = asked.remove(&result.call_id).unwrap_or_default();
                    progress.send(Progress {
                        message: Some(format!("{} {}", result.name, result.status.as_str())),
                        ..Progress::default()
                    });
                    calls.push(json!({
                        "id": result.call_id,
                        "name": result.name,
                        "status": result.status.as_str(),
                        "gist": gist,
                    }));
                }
            }
            _ => {}
        }
    }
    (calls, replies)
}

/// Counts of `items`, in the order each first came.
fn counted(items: impl Iterator<Item = String>) -> Vec<(String, usize)> {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for item in items {
        match counts.iter_mut().find(|(seen, _)| *seen == item) {
            Some((_, count)) => *count += 1,
            None => counts.push((item, 1)),
        }
    }
    counts
}

/// The line the calling agent reads under the answer: the calls by name, how those that did not
/// succeed ended (a command that ran and exited 1 "failed"; one a person refused "denied"; one
/// policy stopped "blocked"), replies and tokens.
fn summary(model: &str, calls: &[Value], replies: u64, tokens: u64) -> String {
    if calls.is_empty() {
        return format!("[sub-agent ({model}): no calls, {replies} replies, {tokens} tokens]");
    }
    let status = |call: &Value| call["status"].as_str().unwrap_or("failed").to_owned();
    let ended = counted(calls.iter().map(status).filter(|s| s != "executed"))
        .iter()
        .map(|(status, n)| format!("{n} {status}"))
        .collect::<Vec<_>>()
        .join(", ");
    let made = counted(calls.iter().map(|c| c["name"].as_str().unwrap_or("?").to_owned()))
        .iter()
        .map(|(name, n)| if *n == 1 { name.clone() } else { format!("{name} ×{n}") })
        .collect::<Vec<_>>()
        .join(", ");
    let ended = if ended.is_empty() { String::new() } else { format!(" ({ended})") };
    format!(
        "[sub-agent ({model}): {} calls — {made}{ended}; {replies} replies, {tokens} tokens]",
        calls.len()
    )
}

/// What the calling agent reads for how the sub-agent ended (with `summary` under it), its answer
/// if it gave one, and the outcome's name for the state.
fn ended_as(outcome: Outcome, summary: &str) -> (ToolOutput, Option<String>, &'static str) {
    match outcome {
        Outcome::Answered { text, truncated } => {
            let cut = if truncated { "\n[the answer was cut by the reply length limit]" } else { "" };
            (ToolOutput::ok(format!("{}{cut}\n\n{summary}", text.trim_end())), Some(text), "answered")
        }
        Outcome::TurnLimit { turns } => (
            ToolOutput::error(
                ErrorKind::Execution,
                format!(
                    "The sub-agent was still working after {turns} replies, its limit, and gave no answer. \
                     Narrow the task, or do the rest yourself.\n\n{summary}"
                ),
            ),
            None,
            "turn_limit",
        ),
        Outcome::BudgetSpent { used, budget } => (
            ToolOutput::error(
                ErrorKind::Execution,
                format!(
                    "The sub-agent used {used} tokens, past its budget of {budget}, and gave no answer. \
                     Narrow the task, or do the rest yourself.\n\n{summary}"
                ),
            ),
            None,
            "budget_spent",
        ),
        Outcome::Cancelled => (
            ToolOutput::error(
                ErrorKind::Cancelled,
                format!("The sub-agent was cancelled (or ran out of time).\n\n{summary}"),
            ),
            None,
            "cancelled",
        ),
        Outcome::Failed(error) => (
            ToolOutput::error(
                ErrorKind::Execution,
                format!("The sub-agent's model failed: {error}.\n\n{summary}"),
            ),
            None,
            "failed",
        ),
        Outcome::Blocked { hook, reason } => (
            ToolOutput::error(ErrorKind::Blocked, format!("{hook} blocked the sub-agent: {reason}")),
            None,
            "blocked",
        ),
    }
}
