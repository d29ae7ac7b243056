//! The event loop. Keys, the agent's stream, the pipeline's call events and questions all arrive
//! as messages; each changes the state; a frame is drawn at most every 16 ms when something
//! changed, and at once after a key. The agent runs in its own task, so drawing never waits on a
//! model or a tool.

use std::collections::HashMap;
use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::{Agent, AgentEvent, Message, ModelProfile, Outcome};
use anyhow::Context as _;
use crossterm::event::Event as TermEvent;
use futures::{Stream, StreamExt as _};
use ratatui::Terminal;
use ratatui::backend::Backend;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tool_executor::{ApprovalMode, Batch, CallResult, Decided, Event, Executor, RawCall, Session};

use super::broker::Asked;
use super::panes::ApiEntry;
use super::panes::RewindAsk;
use super::state::{App, Command, View};
use crate::setup::GuardArgs;

/// The shortest time between two frames.
pub const FRAME: Duration = Duration::from_millis(16);

/// Everything the loop needs.
#[derive(Debug)]
pub struct Context {
    /// The pipeline (its broker is the [`super::broker::ScreenBroker`] whose questions arrive here).
    pub executor: Executor,
    /// The memory tool's store, for the memory view (`None`: the view says there is none).
    pub records: Option<std::sync::Arc<dyn tool_core::storage::RecordStore>>,
    /// The model; `None` shows how to configure one.
    pub profile: Option<ModelProfile>,
    /// The folder.
    pub folder: PathBuf,
    /// Where transcripts are saved (`None`: not saved).
    pub data: Option<PathBuf>,
    /// The guards.
    pub guard: GuardArgs,
    /// The approval mode.
    pub mode: ApprovalMode,
    /// The session's id.
    pub session_id: String,
    /// A resumed conversation.
    pub history: Vec<Message>,
    /// What to show when no model is configured.
    pub setup_hint: Option<String>,
    /// The terminal reports Shift-Enter apart from Enter (the keyboard protocol is on).
    pub shift_enter: bool,
    /// The colours ([`super::theme::Theme::detect`] for a real terminal).
    pub theme: super::theme::Theme,
    /// The `AGENTS.md` instructions found for the folder (read, or listed as untrusted).
    pub instructions: crate::instructions::Instructions,
    /// Notes shown at the start (text, and whether it is a warning).
    pub notes: Vec<(String, bool)>,
    /// The skills found for the folder (`guard.skills` is what sessions are given).
    pub skills: crate::skills::Skills,
}

enum ToAgent {
    Turn(String, CancellationToken),
    Reopen(ApprovalMode, GuardArgs),
    /// New instructions for the system prompt (the folder was trusted).
    Instructions(String),
    /// A new conversation under this session id.
    Clear(String),
    /// Another model, the conversation kept.
    Model(Box<ModelProfile>),
    /// Summarise the conversation now.
    Compact(CancellationToken),
    /// An earlier conversation, under its session id.
    Resume(String, Vec<Message>),
    /// The conversation goes back to before the turn whose reply made this call.
    RewindTo(String),
}

enum FromAgent {
    Session(Arc<Session>),
    Done(Outcome, Vec<Message>),
    /// A compaction the person asked for ended.
    Compacted(Result<Option<agent::Compaction>, String>, Vec<Message>),
    /// Another model could not be used.
    Failed(String),
}

/// A folder's hooks as found again, and what to tell the person.
type HooksFound = (Option<Arc<hooks::Hooks>>, Vec<(String, bool)>);

/// What the console and journal tasks bring back.
enum FromPane {
    Ran(Box<CallResult>, serde_json::Value),
    /// A `!` command ended.
    Shell(Box<CallResult>, String),
    /// The folder's files, for `@` completion.
    Files(Vec<String>),
    Trusted(crate::instructions::Instructions, crate::skills::Skills, HooksFound),
    Journal(Vec<journal::Attempt>, Vec<journal::RememberedDecision>),
    Memories(Vec<tool_core::storage::Record>),
    /// The rewind view's calls, newest first.
    RewindRows(Vec<checkpoints::Entry>),
    /// A rewind would overwrite files changed since: the person is asked.
    RewindConflicts(RewindAsk),
    /// A rewind is done: what it did, and whether the conversation goes back too.
    Rewound(String, String, bool),
    Failed(String),
}

/// `tool/api` of every API of a toolbox, in the console's order.
pub fn catalogue_names(toolbox: &tool_executor::Toolbox) -> Vec<String> {
    toolbox
        .tools()
        .iter()
        .flat_map(|t| t.manifest.apis.iter().map(|a| format!("{}/{}", t.manifest.identifier, a.name)))
        .collect()
}

/// Every API of the toolbox, named as a model would call it.
fn catalogue(executor: &Executor) -> Vec<ApiEntry> {
    let names = executor.toolbox().names(None);
    let mut out = Vec::new();
    for entry in executor.toolbox().tools() {
        for api in &entry.manifest.apis {
            let name = names.name_of(&entry.manifest.identifier, &api.name).unwrap_or(&api.name).to_owned();
            out.push(ApiEntry {
                tool: entry.manifest.identifier.clone(),
                api: api.name.clone(),
                name,
                description: api.description.clone(),
                parameters: api.parameters.clone(),
            });
        }
    }
    out
}

/// Runs until the person quits or the keys end; returns the final state (its transcript is
/// printed to the terminal's own scrollback by the caller).
///
/// # Errors
///
/// The terminal cannot be drawn on.
pub async fn run<B, K>(
    terminal: &mut Terminal<B>,
    mut keys: K,
    context: Context,
    mut questions: mpsc::UnboundedReceiver<Asked>,
) -> anyhow::Result<App>
where
    B: Backend + Write,
    B::Error: Send + Sync + 'static,
    K: Stream<Item = std::io::Result<TermEvent>> + Unpin,
{
    let app = first_screen(&context);
    let (pane_results, mut from_pane) = mpsc::unbounded_channel::<FromPane>();
    list_files(&context.folder, &pane_results);
    let AgentChannels { to_agent, events: mut agent_stream, mut from_agent } = start_agent(&context)?;

    let mut st = Running {
        app,
        guard: context.guard.clone(),
        session_id: context.session_id.clone(),
        profile: context.profile.clone(),
        current_session: None,
        answers: HashMap::new(),
        cancel: None,
        console_runs: 0,
        to_agent,
        pane_results,
    };
    let mut calls: Option<broadcast::Receiver<Event>> = None;
    let mut dirty = true;
    // A key is drawn at once: input latency is one frame's drawing, not the frame pacing.
    let mut urgent = false;
    let mut last_frame = Instant::now() - FRAME;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        if dirty && (urgent || last_frame.elapsed() >= FRAME) {
            terminal.draw(|frame| super::view::render(&st.app, frame))?;
            last_frame = Instant::now();
            dirty = false;
            urgent = false;
        }
        let next_frame = tokio::time::sleep_until((last_frame + FRAME).into());
        tokio::select! {
            biased;
            key = keys.next() => {
                match key {
                    Some(Ok(TermEvent::Key(key))) => {
                        if let Some(command) = st.app.on_key(key)
                            && st.on_command(&context, terminal.backend_mut(), command).is_break()
                        {
                            break;
                        }
                    }
                    Some(Ok(TermEvent::Paste(text))) => st.app.paste(&text),
                    Some(Ok(TermEvent::Resize(..))) => {
                        let _ = terminal.autoresize();
                    }
                    Some(Ok(_)) => {}
                    Some(Err(error)) => return Err(error.into()),
                    None => break,
                }
                st.save_prompts(&context);
                dirty = true;
                urgent = true;
            }
            Some(event) = agent_stream.recv() => {
                st.app.on_agent(event);
                dirty = true;
            }
            event = async { calls.as_mut()?.recv().await.into() }, if calls.is_some() => {
                match event {
                    Some(Ok(event)) => st.app.on_call(event),
                    // Fell behind: the cards catch up with the next events and the results.
                    Some(Err(broadcast::error::RecvError::Lagged(_))) => {}
                    // The session was replaced (a mode change); its successor arrives as
                    // `FromAgent::Session`.
                    Some(Err(broadcast::error::RecvError::Closed)) | None => calls = None,
                }
                dirty = true;
            }
            Some(asked) = questions.recv() => {
                st.on_asked(asked, terminal.backend_mut());
                dirty = true;
            }
            Some(message) = from_agent.recv() => {
                if let FromAgent::Session(session) = &message {
                    calls = Some(session.subscribe());
                    st.current_session = Some(session.clone());
                }
                st.on_agent_message(&context, message);
                dirty = true;
            }
            Some(result) = from_pane.recv() => {
                st.on_pane(&context, result);
                dirty = true;
            }
            _ = tick.tick() => {
                // The working indicator's spinner and clock move; questions may have gone.
                dirty |= st.app.running | st.withdraw_gone();
            }
            () = async {
                if let Some(deadline) = st.app.choice_deadline() {
                    tokio::time::sleep_until(deadline.into()).await;
                }
            }, if st.app.pending_choice.is_some() => {
                // A choice key nothing followed: it is the answer.
                if let Some(Command::Decide { approval_id, decision }) = st.app.commit_due() {
                    st.answer(&approval_id, decision);
                }
                dirty = true;
            }
            () = next_frame, if dirty => {}
        }
    }
    if let Some(token) = st.cancel {
        token.cancel();
    }
    Ok(st.app)
}

/// The screen as it opens: the model, folder, mode and sandbox in the status line, the notes and
/// what the model reads, the earlier prompts and conversation, the console's catalogue (and the
/// console itself when there is no model to talk to).
fn first_screen(context: &Context) -> App {
    let mut app = App::new(
        context
            .profile
            .as_ref()
            .map_or_else(|| "no model".to_owned(), |p| format!("{} ({})", p.model, p.name)),
        context.folder.display().to_string(),
        context.mode,
        context.guard.label(),
    );
    app.setup_hint.clone_from(&context.setup_hint);
    app.context_window = context.profile.as_ref().map_or(0, |p| p.context_window);
    app.shift_enter = context.shift_enter;
    app.theme = context.theme;
    for (text, warning) in &context.notes {
        app.notice(text.clone(), *warning);
    }
    // Which instructions and skills the model reads, shown once.
    for (text, warning) in context.instructions.describe().into_iter().chain(context.skills.describe()) {
        app.notice(text, warning);
    }
    app.skills = context.skills.clone();
    if let Some(data) = &context.data {
        app.history = crate::chat::load_prompts(data, &context.folder);
    }
    app.load_history(&context.history);
    app.console.catalogue = catalogue(&context.executor);
    if context.profile.is_none() {
        // Nothing to talk to yet: the tools themselves are here.
        app.view = View::Console;
    }
    app
}

/// The loop's ends of the agent's task: what it sends the task, the model's stream, and the
/// task's messages.
struct AgentChannels {
    to_agent: mpsc::UnboundedSender<ToAgent>,
    events: mpsc::UnboundedReceiver<AgentEvent>,
    from_agent: mpsc::UnboundedReceiver<FromAgent>,
}

/// The channels to and from the agent's task, started when there is a model (without one the
/// channels stay quiet and the console works alone).
fn start_agent(context: &Context) -> anyhow::Result<AgentChannels> {
    let (agent_events, agent_stream) = mpsc::unbounded_channel::<AgentEvent>();
    let (to_agent, from_screen) = mpsc::unbounded_channel::<ToAgent>();
    let (to_screen, from_agent) = mpsc::unbounded_channel::<FromAgent>();
    if let Some(profile) = context.profile.clone() {
        let client = profile.client()?;
        let task = AgentTask {
            executor: context.executor.clone(),
            client,
            profile,
            folder: context.folder.clone(),
            session_id: context.session_id.clone(),
            instructions: context.instructions.prompt.clone(),
            hook_prompt: String::new(),
        };
        let history = context.history.clone();
        let (mode, guard) = (context.mode, context.guard.clone());
        tokio::spawn(task.run(history, mode, guard, from_screen, to_screen, agent_events));
    }
    Ok(AgentChannels { to_agent, events: agent_stream, from_agent })
}

/// What changes while the app runs, beside the screen's own state: the conversation's id
/// (`/clear`, `/resume`), the model, the sandbox and skills of the sessions it opens, the
/// questions waiting for an answer, and the way to the agent's task.
struct Running {
    app: App,
    guard: GuardArgs,
    session_id: String,
    profile: Option<ModelProfile>,
    /// The agent's current session (whose file boundary a rewind writes beneath).
    current_session: Option<Arc<Session>>,
    answers: HashMap<String, oneshot::Sender<Decided>>,
    /// Cancels the running turn (or compaction).
    cancel: Option<CancellationToken>,
    console_runs: u64,
    to_agent: mpsc::UnboundedSender<ToAgent>,
    pane_results: mpsc::UnboundedSender<FromPane>,
}

impl Running {
    /// A question arrived: it waits on screen, and the terminal's bell rings so a person in
    /// another window knows.
    fn on_asked(&mut self, asked: Asked, out: &mut impl Write) {
        self.answers.insert(asked.request.id.clone(), asked.answer);
        self.app.ask(asked.request);
        let _ = write!(out, "\x07");
        let _ = Write::flush(out);
    }

    /// The person's answer to question `approval_id`, to the call waiting for it.
    fn answer(&mut self, approval_id: &str, decision: tool_executor::Decision) {
        if let Some(answer) = self.answers.remove(approval_id) {
            let _ = answer.send(Decided { decision, by: Some("terminal".into()) });
        }
    }

    /// Takes away the questions whose calls were cancelled or timed out; whether any went.
    fn withdraw_gone(&mut self) -> bool {
        let gone: Vec<String> =
            self.answers.iter().filter(|(_, a)| a.is_closed()).map(|(id, _)| id.clone()).collect();
        for id in &gone {
            self.answers.remove(id);
            self.app.withdraw(id);
        }
        !gone.is_empty()
    }

    /// Sends `text` as the next turn (with its `@` files and what `!` commands printed).
    fn send_turn(&mut self, context: &Context, text: &str) {
        let token = CancellationToken::new();
        self.cancel = Some(token.clone());
        let text = outgoing(&context.folder, &mut self.app, text);
        let _ = self.to_agent.send(ToAgent::Turn(text, token));
    }

    /// Runs one call without the model in a session of its own (`{session}-{kind}`, in `mode`),
    /// beside the loop; `done` makes its result the loop's message.
    fn run_beside(
        &self,
        context: &Context,
        kind: &str,
        mode: ApprovalMode,
        call: RawCall,
        done: impl FnOnce(CallResult) -> FromPane + Send + 'static,
    ) {
        let id = format!("{}-{kind}", self.session_id);
        let session = crate::setup::session(&context.executor, id, &context.folder, mode, false, &self.guard);
        let executor = context.executor.clone();
        let results = self.pane_results.clone();
        tokio::spawn(async move {
            let batch = Batch { message_id: None, calls: vec![call], stopped_on_length: false };
            if let Some(result) = executor.execute_batch(&session, batch).await.pop() {
                let _ = results.send(done(result));
            }
        });
    }

    /// `/resume`'s choice: conversation `id` again, in the mode it was left in.
    fn resume(&mut self, context: &Context, id: &str) {
        let loaded = context
            .data
            .as_deref()
            .ok_or_else(|| anyhow::anyhow!("this app keeps no conversations"))
            .and_then(|data| crate::chat::load(data, &context.folder, id));
        match loaded {
            Ok(transcript) => {
                self.session_id = transcript.session_id.clone();
                self.app.clear_conversation();
                self.app.load_history(&transcript.messages);
                self.app.notice(format!("resumed {} messages", transcript.messages.len()), false);
                // The session goes on in the mode it was left in.
                if let Some(mode) = transcript.mode.filter(|m| *m != self.app.mode) {
                    self.app.mode = mode;
                    self.app.notice(
                        format!(
                            "approvals: {}, as this conversation was left",
                            mode.as_str().replace('_', "-")
                        ),
                        false,
                    );
                    let _ = self.to_agent.send(ToAgent::Reopen(mode, self.guard.clone()));
                }
                let _ = self.to_agent.send(ToAgent::Resume(self.session_id.clone(), transcript.messages));
            }
            Err(error) => self.app.notice(format!("{error:#}"), true),
        }
    }

    /// `/model NAME`: the profile's model from the next request on (the skills' share of the
    /// prompt follows its window).
    fn switch_model(&mut self, name: &str) {
        let args = crate::setup::ModelArgs { profile: Some(name.to_owned()), ..Default::default() };
        match crate::setup::model(&args).and_then(|p| p.client().map(|_| p).map_err(Into::into)) {
            Ok(next) => {
                self.app.model = format!("{} ({})", next.model, next.name);
                self.app.context_window = next.context_window;
                self.app.notice(format!("model: {}", self.app.model), false);
                // The skills' share of the prompt follows the new window.
                let budget = crate::skills::prompt_budget(next.context_window);
                self.guard.skills = Arc::new((*self.guard.skills).clone().with_prompt_budget(budget));
                self.profile = Some(next.clone());
                let _ = self.to_agent.send(ToAgent::Model(Box::new(next)));
                let _ = self.to_agent.send(ToAgent::Reopen(self.app.mode, self.guard.clone()));
            }
            Err(error) => self.app.notice(format!("{error:#}"), true),
        }
    }

    /// Does what a key asked for; `Break` quits. `out` is the terminal (for OSC 52 copies).
    fn on_command(&mut self, context: &Context, out: &mut impl Write, command: Command) -> ControlFlow<()> {
        match command {
            Command::Quit => return ControlFlow::Break(()),
            Command::Submit(text) => self.send_turn(context, &text),
            Command::Cancel => {
                if let Some(token) = &self.cancel {
                    token.cancel();
                }
            }
            Command::Decide { approval_id, decision } => self.answer(&approval_id, decision),
            Command::SetMode(mode) => {
                if self.app.running {
                    self.app.notice("the approval mode can change when this turn ends", true);
                } else {
                    self.app.mode = mode;
                    self.app.notice(format!("approvals: {}", mode.as_str().replace('_', "-")), false);
                    let _ = self.to_agent.send(ToAgent::Reopen(mode, self.guard.clone()));
                }
            }
            Command::SetSandbox(mode) => {
                if self.app.running {
                    self.app.notice("the sandbox can change when this turn ends", true);
                } else {
                    self.guard.sandbox = mode;
                    self.app.sandbox = self.guard.label();
                    self.app.notice(format!("sandbox: {}", self.guard.sandbox().describe()), false);
                    let _ = self.to_agent.send(ToAgent::Reopen(self.app.mode, self.guard.clone()));
                }
            }
            Command::RunTool { name, arguments } => {
                self.console_runs += 1;
                let call = RawCall {
                    id: format!("console-{}", self.console_runs),
                    name,
                    arguments: arguments.to_string(),
                };
                self.run_beside(context, "console", self.app.mode, call, |result| {
                    FromPane::Ran(Box::new(result), arguments)
                });
            }
            Command::Shell { call_id, command } => {
                // The person's own command: auto-run (what always asks, such as `rm -rf ~`,
                // still asks), in the sandbox, journalled.
                let arguments =
                    serde_json::json!({ "command": command, "description": super::state::SHELL_DESCRIPTION });
                let call =
                    RawCall { id: call_id, name: "runCommand".into(), arguments: arguments.to_string() };
                self.run_beside(context, "shell", ApprovalMode::AutoRun, call, |result| {
                    FromPane::Shell(Box::new(result), command)
                });
            }
            Command::Trust => trust_folder(context, &self.pane_results),
            Command::Clear => {
                self.session_id = crate::setup::new_session_id(&context.folder);
                self.app.clear_conversation();
                self.app.notice("a new conversation (/resume brings back the earlier one)", false);
                let _ = self.to_agent.send(ToAgent::Clear(self.session_id.clone()));
            }
            Command::ListConversations => {
                let items: Vec<crate::chat::Saved> = context
                    .data
                    .as_deref()
                    .map(|data| crate::chat::conversations(data, &context.folder))
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|saved| saved.session_id != self.session_id)
                    .collect();
                if items.is_empty() {
                    self.app.notice("no earlier conversation in this folder", false);
                } else {
                    self.app.view = View::Resume { items, selected: 0 };
                }
            }
            Command::Resume(id) => self.resume(context, &id),
            Command::Status => {
                let text = status_text(&self.app, self.profile.as_ref(), context, &self.guard);
                self.app.notice(text, false);
            }
            Command::SwitchModel(name) => self.switch_model(&name),
            Command::Compact => {
                let token = CancellationToken::new();
                self.cancel = Some(token.clone());
                let _ = self.to_agent.send(ToAgent::Compact(token));
            }
            Command::LoadJournal => load_journal(context, &self.app, &self.pane_results, None),
            Command::Revoke(id) => load_journal(context, &self.app, &self.pane_results, Some(id)),
            Command::LoadMemories => load_memories(context, &self.pane_results, None),
            Command::Forget(id) => load_memories(context, &self.pane_results, Some(id)),
            Command::LoadRewind => load_rewind(context, &self.guard, &self.session_id, &self.pane_results),
            Command::Rewind { call_id, conversation, force } => rewind(
                context,
                &self.guard,
                self.current_session.clone(),
                &self.session_id,
                RewindAsk { call_id, conversation, conflicts: Vec::new() },
                force,
                &self.pane_results,
            ),
            Command::Copy(text) => {
                let _ = write!(out, "\x1b]52;c;{}\x07", base64(text.as_bytes()));
                let _ = Write::flush(out);
                self.app.notice(format!("copied {} characters", text.chars().count()), false);
            }
        }
        ControlFlow::Continue(())
    }

    /// Keeps the prompts sent since the last key in the folder's history.
    fn save_prompts(&mut self, context: &Context) {
        if !self.app.unsaved_prompts.is_empty() {
            let prompts = std::mem::take(&mut self.app.unsaved_prompts);
            if let Some(data) = &context.data
                && let Err(error) = crate::chat::save_prompts(data, &context.folder, &prompts)
            {
                self.app.notice(format!("the prompt history could not be saved: {error:#}"), true);
            }
        }
    }

    /// A message from the agent's task (its session is taken by the loop).
    fn on_agent_message(&mut self, context: &Context, message: FromAgent) {
        match message {
            FromAgent::Session(_) => {}
            FromAgent::Failed(error) => self.app.notice(error, true),
            FromAgent::Compacted(result, messages) => {
                self.app.running = false;
                self.app.turn_started = None;
                self.cancel = None;
                match result {
                    Ok(Some(c)) if c.summarised_messages == 0 => self.app.notice(
                        format!(
                            "kept as it is: at ~{} tokens the conversation is smaller than a summary of it",
                            c.before_tokens
                        ),
                        false,
                    ),
                    Ok(Some(c)) => self.app.notice(
                        format!(
                            "compacted: ~{} → ~{} tokens ({} messages summarised)",
                            c.before_tokens, c.after_tokens, c.summarised_messages
                        ),
                        false,
                    ),
                    Ok(None) => self.app.notice("nothing to compact yet", false),
                    Err(error) => {
                        self.app.notice(format!("compacting failed, the conversation is kept: {error}"), true)
                    }
                }
                save_transcript(context, &self.session_id, &mut self.app, messages);
                // What was typed meanwhile goes now, as after a turn.
                if let Some(Command::Submit(text)) = self.app.take_queued() {
                    self.send_turn(context, &text);
                }
            }
            FromAgent::Done(outcome, messages) => {
                self.app.finish(&outcome);
                self.cancel = None;
                // What was typed during the turn goes now, as the next turn.
                if let Some(Command::Submit(text)) = self.app.take_queued() {
                    self.send_turn(context, &text);
                }
                // The turn may have made or removed files.
                list_files(&context.folder, &self.pane_results);
                save_transcript(context, &self.session_id, &mut self.app, messages);
            }
        }
    }

    /// A result of work done beside the loop (the console, `!`, the journal, memory, rewind…).
    fn on_pane(&mut self, context: &Context, result: FromPane) {
        match result {
            FromPane::Ran(result, arguments) => self.app.console.finished(*result, arguments),
            FromPane::Shell(result, command) => self.app.shell_finished(&command, *result),
            FromPane::Journal(rows, remembered) => {
                self.app.journal.rows = rows;
                self.app.journal.remembered = remembered;
                let len = if self.app.journal.showing_remembered {
                    self.app.journal.remembered.len()
                } else {
                    self.app.journal.rows.len()
                };
                self.app.journal.selected = self.app.journal.selected.min(len.saturating_sub(1));
            }
            FromPane::Memories(rows) => {
                self.app.memory.selected = self.app.memory.selected.min(rows.len().saturating_sub(1));
                self.app.memory.rows = rows;
            }
            FromPane::Failed(error) => self.app.notice(error, true),
            FromPane::RewindRows(rows) => {
                self.app.rewind.selected = self.app.rewind.selected.min(rows.len().saturating_sub(1));
                self.app.rewind.rows = rows;
                self.app.rewind.shown = Some(Instant::now());
            }
            FromPane::RewindConflicts(ask) => {
                self.app.rewind.confirming = Some(ask);
                self.app.rewind.shown = Some(Instant::now());
            }
            FromPane::Rewound(summary, call_id, conversation) => {
                self.app.view = View::Chat;
                // The conversation first: the notice stays after what it took out.
                if conversation && self.app.rewind_conversation(&call_id) {
                    let _ = self.to_agent.send(ToAgent::RewindTo(call_id));
                }
                self.app.notice(summary, false);
            }
            FromPane::Files(files) => {
                self.app.files = files;
                // An `@` typed before the list came is offered its files now.
                self.app.update_completion();
            }
            FromPane::Trusted(instructions, skills, (hooks, hook_notes)) => {
                self.app.notice(format!("{} is trusted from now on", context.folder.display()), false);
                for (text, warning) in
                    instructions.describe().into_iter().chain(skills.describe()).chain(hook_notes)
                {
                    self.app.notice(text, warning);
                }
                // Sessions opened from now on (the agent's, the console's) have the
                // project's skills and hooks too.
                self.guard.skills = skills.set.clone();
                self.guard.hooks = hooks;
                self.app.skills = skills;
                let _ = self.to_agent.send(ToAgent::Instructions(instructions.prompt));
                let _ = self.to_agent.send(ToAgent::Reopen(self.app.mode, self.guard.clone()));
            }
        }
    }
}

/// Loads the journal view's rows (this folder's, with its filters) and remembered decisions, first
/// revoking `revoke` if given; the result comes back as a [`FromPane`].
fn load_journal(
    context: &Context,
    app: &App,
    results: &mpsc::UnboundedSender<FromPane>,
    revoke: Option<String>,
) {
    let Some(journal) = context.executor.journal().cloned() else {
        let _ = results.send(FromPane::Failed("this app has no journal".into()));
        return;
    };
    let filter = journal::AttemptFilter {
        status: app.journal.status,
        tool: app.journal.tool.clone(),
        limit: Some(1000),
        ..journal::AttemptFilter::default()
    };
    let key = format!("{}-", crate::setup::folder_key(&context.folder));
    let project = context.folder.display().to_string();
    let results = results.clone();
    tokio::spawn(async move {
        let tenant = crate::setup::TENANT;
        if let Some(id) = revoke
            && let Err(error) = journal.revoke(tenant, &id).await
        {
            let _ = results.send(FromPane::Failed(format!("revoking: {error}")));
        }
        let rows = journal.query(tenant, &filter).await;
        let remembered = journal.remembered(tenant, Some(&project)).await;
        let _ = match (rows, remembered) {
            (Ok(rows), Ok(remembered)) => {
                let rows = rows.into_iter().filter(|row| row.session_id.starts_with(&key)).collect();
                results.send(FromPane::Journal(rows, remembered))
            }
            (Err(error), _) | (_, Err(error)) => {
                results.send(FromPane::Failed(format!("reading the journal: {error}")))
            }
        };
    });
}

/// Loads the person's memories (forgetting one first), off the event loop.
/// The rewind view's calls: this conversation's that changed files, newest first.
fn load_rewind(
    context: &Context,
    guard: &GuardArgs,
    session_id: &str,
    results: &mpsc::UnboundedSender<FromPane>,
) {
    let (folder, session_id, guard, results) =
        (context.folder.clone(), session_id.to_owned(), guard.clone(), results.clone());
    tokio::task::spawn_blocking(move || {
        let rows = crate::setup::checkpoint_store(&guard)
            .and_then(|store| {
                store.ok_or_else(|| anyhow::anyhow!("checkpoints are off (--checkpoint-max-mib 0)"))
            })
            .and_then(|store| Ok(checkpoints::calls(&store, &folder, &session_id)?));
        let _ = results.send(match rows {
            Ok(mut rows) => {
                rows.reverse();
                FromPane::RewindRows(rows)
            }
            Err(error) => FromPane::Failed(format!("rewind: {error:#}")),
        });
    });
}

/// Puts the folder back to before a call of this conversation (beneath the session's folders),
/// journalled; with files changed since and no `force`, the person is asked first.
fn rewind(
    context: &Context,
    guard: &GuardArgs,
    session: Option<Arc<Session>>,
    session_id: &str,
    ask: RewindAsk,
    force: bool,
    results: &mpsc::UnboundedSender<FromPane>,
) {
    let (folder, session_id, guard, results) =
        (context.folder.clone(), session_id.to_owned(), guard.clone(), results.clone());
    let journal = context.executor.journal().cloned();
    tokio::spawn(async move {
        let done = tokio::task::spawn_blocking(move || -> anyhow::Result<Result<_, RewindAsk>> {
            let store = crate::setup::checkpoint_store(&guard)?.context("checkpoints are off")?;
            let opener = match &session {
                Some(session) => computer_runtime::beneath::Opener::new(session.file_boundary()),
                None => computer_runtime::beneath::Opener::rooted(&folder),
            };
            let plan = checkpoints::plan(&store, &opener, &folder, &session_id, Some(&ask.call_id))?;
            let conflicts: Vec<String> = plan.conflicts().map(|r| r.path.clone()).collect();
            if !conflicts.is_empty() && !force {
                return Ok(Err(RewindAsk { conflicts, ..ask }));
            }
            let applied = checkpoints::apply(&store, &opener, &folder, &plan, force)?;
            Ok(Ok((plan, applied, ask)))
        })
        .await;
        let message = match done {
            Ok(Ok(Ok((plan, applied, ask)))) => {
                if let Some(journal) = journal
                    && let Err(error) = checkpoints::journal_rewind(
                        journal.as_ref(),
                        crate::setup::TENANT,
                        &plan,
                        &applied,
                        "terminal",
                    )
                    .await
                {
                    let _ = results.send(FromPane::Failed(format!("the rewind was not journalled: {error}")));
                }
                let mut summary = format!(
                    "rewound to before {}: {} restored, {} removed",
                    plan.to_call,
                    applied.restored.len(),
                    applied.removed.len()
                );
                for (path, why) in &applied.skipped {
                    summary.push_str(&format!("; {path} left as it is ({why})"));
                }
                for (path, why) in &applied.failed {
                    summary.push_str(&format!("; {path} could not be put back ({why})"));
                }
                FromPane::Rewound(summary, ask.call_id, ask.conversation)
            }
            Ok(Ok(Err(ask))) => FromPane::RewindConflicts(ask),
            Ok(Err(error)) => FromPane::Failed(format!("rewind: {error:#}")),
            Err(error) => FromPane::Failed(format!("rewind: {error}")),
        };
        let _ = results.send(message);
    });
}

fn load_memories(context: &Context, results: &mpsc::UnboundedSender<FromPane>, forget: Option<String>) {
    let Some(records) = context.records.clone() else {
        let _ = results.send(FromPane::Failed("this app keeps no memories".into()));
        return;
    };
    let results = results.clone();
    tokio::spawn(async move {
        let owner = tool_core::storage::Owner {
            tenant: crate::setup::TENANT.into(),
            person: crate::memory::PERSON.into(),
        };
        let collection = builtin_tool_memory::COLLECTION;
        if let Some(id) = forget {
            match records.remove_record(&owner, collection, &id).await {
                Ok(true) => {}
                Ok(false) => {
                    let _ = results.send(FromPane::Failed(format!("memory {id} was already gone")));
                }
                Err(error) => {
                    let _ = results.send(FromPane::Failed(format!("forgetting: {error}")));
                }
            }
        }
        let query = tool_core::storage::RecordQuery {
            collection: collection.into(),
            owner,
            project: tool_core::storage::ProjectScope::Any,
            tag: None,
            text: None,
            limit: 1000,
        };
        let _ = match records.find_records(query).await {
            Ok(hits) => results.send(FromPane::Memories(hits.into_iter().map(|hit| hit.record).collect())),
            Err(error) => results.send(FromPane::Failed(format!("reading the memories: {error}"))),
        };
    });
}

/// Lists the folder's files for `@` completion, off the event loop.
fn list_files(folder: &std::path::Path, results: &mpsc::UnboundedSender<FromPane>) {
    let (folder, results) = (folder.to_owned(), results.clone());
    tokio::task::spawn_blocking(move || {
        let _ = results.send(FromPane::Files(crate::attach::list_files(&folder)));
    });
}

/// The message as the model gets it: what the person's `!` commands printed since the last
/// message, then the text with the files its `@path`s name attached (the screen says what was
/// attached).
fn outgoing(folder: &std::path::Path, app: &mut App, text: &str) -> String {
    let attached = crate::attach::expand(folder, text);
    for (path, bytes) in &attached.files {
        app.notice(format!("attached {path} ({bytes} bytes)"), false);
    }
    for skipped in &attached.skipped {
        app.notice(format!("not attached: {skipped}"), true);
    }
    // What a command printed is never read for `@path`s.
    let ran = std::mem::take(&mut app.shell_notes);
    if ran.is_empty() { attached.text } else { format!("{}\n\n{}", ran.join("\n"), attached.text) }
}

/// Saves the conversation under `session_id` in the data folder (when there is one).
fn save_transcript(context: &Context, session_id: &str, app: &mut App, messages: Vec<Message>) {
    let Some(data) = &context.data else { return };
    let transcript = crate::chat::Transcript {
        session_id: session_id.to_owned(),
        folder: context.folder.clone(),
        model: app.model.clone(),
        mode: Some(app.mode),
        messages,
    };
    if let Err(error) = crate::chat::save(data, &transcript) {
        app.notice(format!("the transcript could not be saved: {error:#}"), true);
    }
}

/// What `/status` says: the model and where it is, the context window, tokens, sandbox, mode.
fn status_text(app: &App, profile: Option<&ModelProfile>, context: &Context, guard: &GuardArgs) -> String {
    let mut parts = Vec::new();
    match profile {
        Some(p) => {
            parts.push(format!("model {} (profile {}, {:?} at {})", p.model, p.name, p.provider, p.base_url));
            let window = p.context_window.max(1);
            let used = app.context_used.min(window);
            parts.push(format!(
                "context ~{} of {} tokens used, ~{} left ({}%)",
                used,
                window,
                window - used,
                used * 100 / window
            ));
        }
        None => parts.push("no model set up".to_owned()),
    }
    parts.push(format!(
        "this session {} in / {} out tokens (the profile gives no prices)",
        app.usage.input_tokens, app.usage.output_tokens
    ));
    parts.push(format!("approvals {}", app.mode.as_str().replace('_', "-")));
    parts.push(guard.sandbox().describe());
    parts.push(format!("folder {}", context.folder.display()));
    parts.join(" · ")
}

/// Trusts the folder (remembered in the journal) and reads its instructions again.
fn trust_folder(context: &Context, results: &mpsc::UnboundedSender<FromPane>) {
    let Some(journal) = context.executor.journal().cloned() else {
        let _ = results.send(FromPane::Failed("this app has no journal to remember trust in".into()));
        return;
    };
    let (folder, results) = (context.folder.clone(), results.clone());
    let budget = context.skills.set.prompt_budget;
    tokio::spawn(async move {
        match crate::trust::trust(journal.as_ref(), &folder).await {
            Ok(()) => {
                let global = crate::instructions::global_file();
                let files = crate::instructions::project_files(&folder);
                let loaded = crate::instructions::Instructions::load(global.as_deref(), &files, true);
                let skills = crate::skills::for_folder(Some(journal.as_ref()), &folder, budget).await;
                let hooks = crate::setup::hooks_for(&folder, true);
                let _ = results.send(FromPane::Trusted(loaded, skills, hooks));
            }
            Err(error) => {
                let _ = results.send(FromPane::Failed(format!("trusting the folder: {error}")));
            }
        }
    });
}

struct AgentTask {
    executor: Executor,
    client: Arc<dyn agent::ModelClient>,
    profile: ModelProfile,
    folder: PathBuf,
    session_id: String,
    /// The instructions section of the system prompt.
    instructions: String,
    /// What `SessionStart` hooks said for the model when the session started.
    hook_prompt: String,
}

impl AgentTask {
    fn agent(&self, history: Vec<Message>, mode: ApprovalMode, guard: &GuardArgs) -> Agent {
        let session =
            crate::setup::session(&self.executor, self.session_id.clone(), &self.folder, mode, false, guard);
        let config = self.profile.agent_config();
        Agent::new(self.client.clone(), self.executor.clone(), session, config)
            .with_instructions(&self.instructions)
            .with_instructions(&self.hook_prompt)
            .with_hooks(guard.hooks.clone())
            .with_history(history)
    }

    /// Runs `SessionStart` hooks for `agent`'s new session; what they said for the model is kept
    /// for the agents made again for it, what they said for the person is shown.
    async fn start_hooks(
        &mut self,
        agent: &mut Agent,
        source: &str,
        events: &mpsc::UnboundedSender<AgentEvent>,
    ) {
        let (prompt, notes) = agent.start_hooks(source).await;
        self.hook_prompt = prompt;
        for (hook, message) in notes {
            let _ = events.send(AgentEvent::HookNote { hook, message });
        }
    }

    async fn run(
        mut self,
        history: Vec<Message>,
        mode: ApprovalMode,
        guard: GuardArgs,
        mut requests: mpsc::UnboundedReceiver<ToAgent>,
        replies: mpsc::UnboundedSender<FromAgent>,
        events: mpsc::UnboundedSender<AgentEvent>,
    ) {
        let source = if history.is_empty() { "startup" } else { "resume" };
        let mut agent = self.agent(history, mode, &guard);
        self.start_hooks(&mut agent, source, &events).await;
        let mut current = (mode, guard);
        if let Some(session) = agent.session() {
            let _ = replies.send(FromAgent::Session(session.clone()));
        }
        while let Some(request) = requests.recv().await {
            match request {
                ToAgent::Turn(input, cancel) => {
                    let outcome = agent.run(&input, &events, &cancel).await;
                    let _ = replies.send(FromAgent::Done(outcome, agent.messages().to_vec()));
                }
                ToAgent::Reopen(mode, guard) => {
                    current = (mode, guard);
                    agent = self.agent(agent.messages().to_vec(), current.0, &current.1);
                    if let Some(session) = agent.session() {
                        let _ = replies.send(FromAgent::Session(session.clone()));
                    }
                }
                ToAgent::Instructions(instructions) => {
                    self.instructions = instructions;
                    agent = self.agent(agent.messages().to_vec(), current.0, &current.1);
                    if let Some(session) = agent.session() {
                        let _ = replies.send(FromAgent::Session(session.clone()));
                    }
                }
                ToAgent::Clear(session_id) => {
                    self.session_id = session_id;
                    self.hook_prompt.clear();
                    agent = self.agent(Vec::new(), current.0, &current.1);
                    self.start_hooks(&mut agent, "clear", &events).await;
                    if let Some(session) = agent.session() {
                        let _ = replies.send(FromAgent::Session(session.clone()));
                    }
                }
                ToAgent::RewindTo(call_id) => {
                    let messages = agent.messages();
                    let reply = messages.iter().position(|m| {
                        matches!(m, Message::Assistant { tool_calls, .. } if tool_calls.iter().any(|c| c.id == call_id))
                    });
                    let request = reply.and_then(|at| {
                        messages[..at].iter().rposition(|m| matches!(m, Message::User { .. }))
                    });
                    if let Some(request) = request {
                        let kept = messages[..request].to_vec();
                        agent = self.agent(kept, current.0, &current.1);
                        if let Some(session) = agent.session() {
                            let _ = replies.send(FromAgent::Session(session.clone()));
                        }
                    }
                }
                ToAgent::Resume(session_id, history) => {
                    self.session_id = session_id;
                    self.hook_prompt.clear();
                    agent = self.agent(history, current.0, &current.1);
                    self.start_hooks(&mut agent, "resume", &events).await;
                    if let Some(session) = agent.session() {
                        let _ = replies.send(FromAgent::Session(session.clone()));
                    }
                }
                ToAgent::Model(profile) => match profile.client() {
                    Ok(client) => {
                        self.client = client;
                        self.profile = *profile;
                        agent = self.agent(agent.messages().to_vec(), current.0, &current.1);
                        if let Some(session) = agent.session() {
                            let _ = replies.send(FromAgent::Session(session.clone()));
                        }
                    }
                    Err(error) => {
                        let _ =
                            replies.send(FromAgent::Failed(format!("the model could not be used: {error}")));
                    }
                },
                ToAgent::Compact(cancel) => {
                    let result = agent
                        .compact_now(&cancel)
                        .await
                        .map_err(|error| error.map_or_else(|| "cancelled".to_owned(), |e| e.to_string()));
                    let _ = replies.send(FromAgent::Compacted(result, agent.messages().to_vec()));
                }
            }
        }
    }
}

/// Standard base64, for OSC 52.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_matches_the_standard() {
        assert_eq!(super::base64(b""), "");
        assert_eq!(super::base64(b"f"), "Zg==");
        assert_eq!(super::base64(b"fo"), "Zm8=");
        assert_eq!(super::base64(b"foo"), "Zm9v");
        assert_eq!(super::base64(b"foobar"), "Zm9vYmFy");
    }
}
