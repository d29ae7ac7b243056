//! `toolhost exec "task"`: the loop without a screen. No person is asked: what would ask is
//! blocked and the model reads why. The transcript goes to stdout as text or JSON lines (the
//! events of `docs/exec.md`, each valid against `docs/exec-events.schema.json`); the exit code
//! says how it ended.

use std::io::Write as _;
use std::sync::Arc;

use agent::{AgentEvent, Delta, Outcome};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tool_executor::ApprovalMode;

use crate::setup::{self, GuardArgs, ModelArgs};

/// Exit codes of `exec`.
pub mod code {
    /// The model answered.
    pub const ANSWERED: u8 = 0;
    /// The model could not be reached or refused (or the setup failed).
    pub const FAILED: u8 = 1;
    /// The turn limit or the token budget ended it.
    pub const LIMIT: u8 = 2;
    /// A `UserPromptSubmit` hook refused the task.
    pub const BLOCKED: u8 = 3;
    /// Ctrl-C.
    pub const CANCELLED: u8 = 130;
}

/// The arguments of `exec`.
#[derive(Debug, Clone, clap::Args)]
pub struct ExecArgs {
    /// The task (`-`: read it from standard input).
    pub task: String,
    /// `headless` (default: only what needs no approval runs), `auto-run` (what the policy lets
    /// run without asking, in the sandbox; what would still ask is blocked) or `read-only`.
    #[arg(long = "approval-mode", alias = "approve-mode", default_value = "headless", value_parser = setup::parse_mode)]
    pub mode: ApprovalMode,
    /// Print JSON lines (one event per line) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Trust the folder for this run only: its AGENTS.md, skills and hooks are used, as after
    /// `toolhost trust`, and nothing is remembered.
    #[arg(long)]
    pub trust: bool,
    /// Model replies at most.
    #[arg(long, default_value_t = 50)]
    pub max_turns: u32,
    /// Tokens (in and out) at most.
    #[arg(long)]
    pub token_budget: Option<u64>,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub guard: GuardArgs,
}

/// Runs the task; returns the exit code.
///
/// # Errors
///
/// Setup failures (no model, no journal).
pub async fn run(args: ExecArgs) -> anyhow::Result<u8> {
    if matches!(args.mode, ApprovalMode::Manual | ApprovalMode::AllowList) {
        anyhow::bail!(
            "exec has no person to ask: use --approval-mode headless, auto-run or read-only (the interactive \
             app asks)"
        );
    }
    let task = if args.task == "-" {
        let mut task = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut task)
            .map_err(|error| anyhow::anyhow!("reading the task from standard input: {error}"))?;
        task
    } else {
        args.task.clone()
    };
    if task.trim().is_empty() {
        anyhow::bail!("the task is empty: give it as an argument, or `-` and on standard input");
    }
    let profile = setup::model(&args.model)?;
    let folder = args.guard.folder()?;
    if args.trust {
        crate::trust::trust_for_this_run(&folder);
    }
    let mut args = args;
    args.guard.sub_agents = Some(setup::sub_agents(&profile));
    let executor = setup::executor(Arc::new(client_executor::device::NoOneToAsk), &args.guard).await?;
    let skills = setup::find_skills(&mut args.guard, &executor, &folder, Some(profile.context_window)).await;
    for (text, _) in skills.describe() {
        eprintln!("({text})");
    }
    for (text, _) in setup::find_hooks(&mut args.guard, &executor, &folder).await {
        eprintln!("({text})");
    }
    let session_id = setup::new_session_id(&folder);
    let session = setup::session(&executor, session_id.clone(), &folder, args.mode, true, &args.guard);
    let config = agent::AgentConfig {
        max_turns: args.max_turns,
        token_budget: args.token_budget,
        ..profile.agent_config()
    };
    // A trusted folder's AGENTS.md (and the person's own) reach the model here too; nobody is
    // asked to trust a folder.
    let instructions = crate::instructions::for_folder(executor.journal().map(AsRef::as_ref), &folder).await;
    for (text, _) in instructions.describe() {
        eprintln!("({text})");
    }
    let mut agent = agent::Agent::new(profile.client()?, executor, session, config)
        .with_instructions(&instructions.prompt)
        .with_hooks(args.guard.hooks.clone());
    for (hook, message) in agent.start_hooks("startup").await.1 {
        eprintln!("({hook}: {message})");
    }

    let cancel = CancellationToken::new();
    let interrupt = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            interrupt.cancel();
        }
    });
    let (events, mut received) = mpsc::unbounded_channel();
    let json = args.json;
    let mut out = Printer::new(json);
    if json {
        out.started(&session_id, &folder, &profile.model, args.mode);
    }
    let printer = tokio::spawn(async move {
        while let Some(event) = received.recv().await {
            out.event(&event);
        }
        out
    });
    let outcome = agent.run(&task, &events, &cancel).await;
    drop(events);
    let mut printer = printer.await?;
    printer.outcome(&outcome, agent.usage());
    Ok(match outcome {
        Outcome::Answered { .. } => code::ANSWERED,
        Outcome::Failed(_) => code::FAILED,
        Outcome::TurnLimit { .. } | Outcome::BudgetSpent { .. } => code::LIMIT,
        Outcome::Cancelled => code::CANCELLED,
        Outcome::Blocked { .. } => code::BLOCKED,
    })
}

/// Prints a transcript as it happens: text to stdout as it streams, one line per call result
/// (its tool's result card title), notices to stderr; or every event as a JSON line.
#[derive(Debug)]
pub struct Printer {
    json: bool,
    /// Reasoning streamed since the last reply (one `reasoning` item when the reply completes).
    reasoning: String,
    /// Messages and reasoning items so far, for their ids.
    items: u64,
    /// Each call's arguments, by id, for its result card.
    arguments: std::collections::HashMap<String, Value>,
    /// Text was printed without its final newline.
    line_open: bool,
}

impl Printer {
    pub fn new(json: bool) -> Self {
        Self {
            json,
            reasoning: String::new(),
            items: 0,
            line_open: false,
            arguments: std::collections::HashMap::new(),
        }
    }

    /// The first two JSON lines: the thread (this session) and its one turn.
    fn started(&mut self, session_id: &str, folder: &std::path::Path, model: &str, mode: ApprovalMode) {
        self.line(&json!({
            "type": "thread.started",
            "thread_id": session_id,
            "folder": folder.display().to_string(),
            "model": model,
            "approval_mode": mode.as_str().replace('_', "-"),
        }));
        self.line(&json!({ "type": "turn.started" }));
    }

    /// An item's id: `msg_1`, `reasoning_2`…
    fn item_id(&mut self, kind: &str) -> String {
        self.items += 1;
        format!("{kind}_{}", self.items)
    }

    /// An event's JSON lines (`docs/exec.md`).
    fn json_lines(&mut self, event: &AgentEvent) -> Vec<Value> {
        match event {
            AgentEvent::Delta(Delta::Reasoning(text)) => {
                self.reasoning.push_str(text);
                Vec::new()
            }
            AgentEvent::Delta(Delta::Retrying { attempt, delay_ms, reason }) => {
                vec![
                    json!({ "type": "retrying", "attempt": attempt, "delay_ms": delay_ms, "reason": reason }),
                ]
            }
            AgentEvent::Delta(_) => Vec::new(),
            AgentEvent::Reply { content, tool_calls, usage, .. } => {
                let mut lines = Vec::new();
                if !self.reasoning.is_empty() {
                    let text = std::mem::take(&mut self.reasoning);
                    let id = self.item_id("reasoning");
                    lines.push(json!({ "type": "item.completed", "item": { "id": id, "type": "reasoning", "text": text } }));
                }
                if !content.is_empty() {
                    let id = self.item_id("msg");
                    lines.push(json!({
                        "type": "item.completed",
                        "item": { "id": id, "type": "agent_message", "text": content },
                    }));
                }
                lines.push(json!({ "type": "usage", "usage": usage }));
                for call in tool_calls {
                    // What the model sent, parsed where it is JSON (else the text as it came).
                    let arguments = serde_json::from_str(&call.arguments)
                        .unwrap_or_else(|_| Value::String(call.arguments.clone()));
                    self.arguments.insert(call.id.clone(), arguments.clone());
                    lines.push(json!({
                        "type": "item.started",
                        "item": { "id": call.id, "type": "tool_call", "name": call.name, "arguments": arguments },
                    }));
                }
                lines
            }
            AgentEvent::Results(results) => results
                .iter()
                .map(|result| {
                    let arguments = self.arguments.remove(&result.call_id).unwrap_or(Value::Null);
                    let mut item = json!({
                        "id": result.call_id,
                        "type": "tool_call",
                        "name": result.name,
                        "arguments": arguments,
                        "status": result.status.as_str(),
                        "output": result.output.content,
                        "duration_ms": result.duration_ms,
                    });
                    if let (Some(tool), Some(api)) = (&result.tool, &result.api) {
                        item["tool"] = json!(tool);
                        item["api"] = json!(api);
                    }
                    if let Some(error) = &result.output.error {
                        item["error"] = json!({ "kind": error.kind.as_str(), "message": error.message });
                    }
                    json!({ "type": "item.completed", "item": item })
                })
                .collect(),
            AgentEvent::Resumed { reason } => {
                vec![json!({ "type": "notice", "kind": "resumed", "message": reason })]
            }
            AgentEvent::HookNote { hook, message } => {
                vec![json!({ "type": "notice", "kind": "hook_note", "hook": hook, "message": message })]
            }
            AgentEvent::KeptGoing { hook, reason } => {
                vec![json!({ "type": "notice", "kind": "kept_going", "hook": hook, "message": reason })]
            }
            AgentEvent::Compacted(c) => vec![json!({
                "type": "notice",
                "kind": "compacted",
                "message": format!(
                    "context compacted: ~{} → ~{} tokens; {} results elided, {} messages summarised",
                    c.before_tokens, c.after_tokens, c.elided_results, c.summarised_messages
                ),
            })],
        }
    }

    fn line(&mut self, value: &Value) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{value}");
        let _ = out.flush();
    }

    fn text(&mut self, text: &str) {
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "{text}");
        let _ = out.flush();
        self.line_open = !text.ends_with('\n');
    }

    fn close_line(&mut self) {
        if self.line_open {
            self.text("\n");
        }
    }

    pub fn event(&mut self, event: &AgentEvent) {
        if self.json {
            for value in self.json_lines(event) {
                self.line(&value);
            }
            return;
        }
        match event {
            AgentEvent::Delta(Delta::Text(text)) => self.text(text),
            AgentEvent::Delta(Delta::Retrying { attempt, delay_ms, reason }) => {
                self.close_line();
                eprintln!("(retrying, try {attempt} in {delay_ms} ms: {reason})");
            }
            AgentEvent::Results(results) => {
                self.close_line();
                for result in results {
                    let card = match (&result.tool, &result.api) {
                        (Some(tool), Some(api)) => {
                            let arguments = self.arguments.remove(&result.call_id).unwrap_or(Value::Null);
                            builtin_tools::Registry::builtin().render(tool).result(
                                api,
                                &arguments,
                                &result.output,
                            )
                        }
                        _ => tool_core::Card::new(result.name.clone()),
                    };
                    let status = result.status.as_str();
                    self.text(&format!("• {} [{status}]\n", card.title));
                    if !result.output.success {
                        let first = result.output.content.lines().next().unwrap_or_default();
                        self.text(&format!("  {first}\n"));
                    }
                }
            }
            AgentEvent::Resumed { reason } => {
                self.close_line();
                eprintln!("({reason})");
            }
            AgentEvent::HookNote { hook, message } => {
                self.close_line();
                eprintln!("({hook}: {message})");
            }
            AgentEvent::KeptGoing { hook, reason } => {
                self.close_line();
                eprintln!("({hook} did not let the model stop yet: {reason})");
            }
            AgentEvent::Compacted(c) => {
                self.close_line();
                eprintln!(
                    "(context compacted: ~{} → ~{} tokens; {} results elided, {} messages summarised)",
                    c.before_tokens, c.after_tokens, c.elided_results, c.summarised_messages
                );
            }
            AgentEvent::Reply { tool_calls, .. } => {
                for call in tool_calls {
                    let arguments = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
                    self.arguments.insert(call.id.clone(), arguments);
                }
            }
            AgentEvent::Delta(_) => {}
        }
    }

    pub fn outcome(&mut self, outcome: &Outcome, usage: agent::Usage) {
        if self.json {
            let mut value = match outcome {
                Outcome::Answered { text, truncated } => {
                    json!({ "type": "turn.completed", "outcome": "answered", "text": text, "truncated": truncated })
                }
                Outcome::TurnLimit { turns } => {
                    json!({ "type": "turn.completed", "outcome": "turn_limit", "turns": turns })
                }
                Outcome::BudgetSpent { used, budget } => {
                    json!({ "type": "turn.completed", "outcome": "budget_spent", "used": used, "budget": budget })
                }
                Outcome::Cancelled => json!({ "type": "turn.completed", "outcome": "cancelled" }),
                Outcome::Blocked { hook, reason } => {
                    json!({ "type": "turn.completed", "outcome": "blocked", "hook": hook, "reason": reason })
                }
                Outcome::Failed(error) => {
                    json!({ "type": "turn.failed", "error": { "message": error.to_string() } })
                }
            };
            value["usage"] = json!(usage);
            self.line(&value);
            return;
        }
        self.close_line();
        match outcome {
            Outcome::Answered { truncated: true, .. } => {
                eprintln!("(the answer was cut by the output length limit)")
            }
            Outcome::Answered { .. } => {}
            Outcome::TurnLimit { turns } => {
                eprintln!("stopped: the model was still working after {turns} replies")
            }
            Outcome::BudgetSpent { used, budget } => {
                eprintln!("stopped: {used} tokens used of a budget of {budget}")
            }
            Outcome::Cancelled => eprintln!("cancelled"),
            Outcome::Blocked { hook, reason } => eprintln!("{hook} refused the prompt: {reason}"),
            Outcome::Failed(error) => eprintln!("error: {error}"),
        }
    }
}
