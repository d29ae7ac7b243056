//! `toolhost exec "task"`: the loop without a screen. No person is asked: what would ask is
//! blocked and the model reads why. The transcript goes to stdout as text or JSON lines; the exit
//! code says how it ended.

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
    /// The task.
    pub task: String,
    /// `headless` (default: only what needs no approval runs), `auto-run` (what the policy lets
    /// run without asking, in the sandbox; what would still ask is blocked) or `read-only`.
    #[arg(long = "approval-mode", alias = "approve-mode", default_value = "headless", value_parser = setup::parse_mode)]
    pub mode: ApprovalMode,
    /// Print JSON lines (one event per line) instead of text.
    #[arg(long)]
    pub json: bool,
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
    let profile = setup::model(&args.model)?;
    let folder = args.guard.folder()?;
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
    let session =
        setup::session(&executor, setup::new_session_id(&folder), &folder, args.mode, true, &args.guard);
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
    let printer = tokio::spawn(async move {
        let mut out = Printer::new(json);
        while let Some(event) = received.recv().await {
            out.event(&event);
        }
        out
    });
    let outcome = agent.run(&args.task, &events, &cancel).await;
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
    /// Each call's arguments, by id, for its result card.
    arguments: std::collections::HashMap<String, Value>,
    /// Text was printed without its final newline.
    line_open: bool,
}

impl Printer {
    pub fn new(json: bool) -> Self {
        Self { json, line_open: false, arguments: std::collections::HashMap::new() }
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
            if let Some(value) = event_json(event) {
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
                    json!({ "type": "outcome", "outcome": "answered", "text": text, "truncated": truncated })
                }
                Outcome::TurnLimit { turns } => {
                    json!({ "type": "outcome", "outcome": "turn_limit", "turns": turns })
                }
                Outcome::BudgetSpent { used, budget } => {
                    json!({ "type": "outcome", "outcome": "budget_spent", "used": used, "budget": budget })
                }
                Outcome::Cancelled => json!({ "type": "outcome", "outcome": "cancelled" }),
                Outcome::Blocked { hook, reason } => {
                    json!({ "type": "outcome", "outcome": "blocked", "hook": hook, "reason": reason })
                }
                Outcome::Failed(error) => {
                    json!({ "type": "outcome", "outcome": "failed", "error": error.to_string() })
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

/// One event as a JSON line (argument fragments are left out: the whole call follows in `reply`).
fn event_json(event: &AgentEvent) -> Option<Value> {
    Some(match event {
        AgentEvent::Delta(Delta::Text(text)) => json!({ "type": "text", "delta": text }),
        AgentEvent::Delta(Delta::Reasoning(text)) => json!({ "type": "reasoning", "delta": text }),
        AgentEvent::Delta(Delta::ToolCall { index, id, name }) => {
            json!({ "type": "tool_call", "index": index, "id": id, "name": name })
        }
        AgentEvent::Delta(Delta::ToolArguments { .. }) => return None,
        AgentEvent::Delta(Delta::Retrying { attempt, delay_ms, reason }) => {
            json!({ "type": "retrying", "attempt": attempt, "delay_ms": delay_ms, "reason": reason })
        }
        AgentEvent::Reply { content, tool_calls, stop, usage } => {
            json!({ "type": "reply", "content": content, "tool_calls": tool_calls, "stop": stop, "usage": usage })
        }
        AgentEvent::Results(results) => json!({ "type": "results", "results": results }),
        AgentEvent::Resumed { reason } => json!({ "type": "resumed", "reason": reason }),
        AgentEvent::HookNote { hook, message } => {
            json!({ "type": "hook_note", "hook": hook, "message": message })
        }
        AgentEvent::KeptGoing { hook, reason } => {
            json!({ "type": "kept_going", "hook": hook, "reason": reason })
        }
        AgentEvent::Compacted(c) => json!({
            "type": "compacted", "before_tokens": c.before_tokens, "after_tokens": c.after_tokens,
            "elided_results": c.elided_results, "summarised_messages": c.summarised_messages,
        }),
    })
}
