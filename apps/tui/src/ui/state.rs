//! The screen's state and how input and events change it. No I/O here: keys become
//! [`Command`]s the event loop carries out, and events from the agent and the pipeline are folded
//! in as they come.

use std::collections::{HashMap, VecDeque};

use agent::{AgentEvent, Delta, Outcome, Usage};
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use tool_core::{Progress, ToolOutput};
use tool_executor::approval::ApprovalRequest;
use tool_executor::{ApprovalMode, CallResult, Decision, Event};

/// Output kept per running call (the tail); the result has the whole of it.
pub const LIVE_OUTPUT_LIMIT: usize = 64 * 1024;

/// Approval modes `Ctrl-T` cycles through.
pub const MODES: [ApprovalMode; 3] = [ApprovalMode::Manual, ApprovalMode::AutoRun, ApprovalMode::ReadOnly];

/// One entry of the transcript.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// What the person said.
    User(String),
    /// What the model said.
    Assistant {
        /// The visible text.
        text: String,
        /// The reasoning, shown dimmed.
        reasoning: String,
    },
    /// A call.
    Tool(ToolCell),
    /// A line from the app (a decision, a retry, an outcome).
    Notice {
        /// The text.
        text: String,
        /// Whether it is a problem.
        warning: bool,
    },
}

/// Where a call is.
#[derive(Debug, Clone, PartialEq)]
pub enum Phase {
    /// Its arguments are streaming.
    Arguments,
    /// Proposed, waiting to run (or for a person).
    Waiting,
    /// Running.
    Running,
    /// Settled.
    Done(Box<CallResult>),
}

/// A call's card.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCell {
    /// The model's call id.
    pub call_id: String,
    /// The function name the model used.
    pub name: String,
    /// The tool and API it resolved to (once known).
    pub target: Option<(String, String)>,
    /// The argument text so far.
    pub arguments: String,
    /// Where it is.
    pub phase: Phase,
    /// The tail of its live output.
    pub output: String,
    /// Only the title is shown.
    pub folded: bool,
}

/// A question waiting for the person.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    /// The question.
    pub request: ApprovalRequest,
    /// When it appeared: keys typed just before are not taken as its answer.
    pub arrived: std::time::Instant,
}

/// How long a new question ignores keys, so a word being typed when it appears does not answer it;
/// also the pause after typing into the prompt before a key answers.
pub const QUESTION_GRACE: std::time::Duration = std::time::Duration::from_millis(600);

/// What the word being typed could become.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The candidates, best first, each with a short description (empty for files).
    pub items: Vec<(String, String)>,
    /// The highlighted one.
    pub selected: usize,
    /// Where the word starts (a char index into the prompt).
    pub start: usize,
}

/// The commands `/` completes, with what each does.
pub const COMMANDS: &[(&str, &str)] = &[
    ("/clear", "start a new conversation"),
    ("/compact", "summarise the conversation to free the context window"),
    ("/console", "run any tool without a model"),
    ("/help", "the keys and commands"),
    ("/init", "draft an AGENTS.md for this folder"),
    ("/journal", "what ran in this folder"),
    ("/memory", "what the agent remembers about you"),
    ("/mode", "manual, auto-run or read-only"),
    ("/theme", "dark, light or none (colours for the terminal's background)"),
    ("/model", "switch to a profile of config.toml"),
    ("/quit", "leave"),
    ("/resume", "continue an earlier conversation"),
    ("/rewind", "put files (and the conversation) back to before a call; also Esc Esc"),
    ("/sandbox", "workspace-write, read-only or off"),
    ("/skills", "the skills you and the model can start"),
    ("/status", "model, context, tokens, sandbox"),
    ("/trust", "use this folder's AGENTS.md, skills and hooks"),
];

/// How long a choice key waits for another before it is taken as a choice: typing runs at a key
/// every 100–250 ms, so a key followed that soon by more is the start of a sentence.
pub const CHOICE_WINDOW: std::time::Duration = std::time::Duration::from_millis(350);

/// A field the question box opened: what is typed goes here, never to the choices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answering {
    /// Why not: Enter denies with it (an empty one denies without a reason).
    Reason(String),
    /// "Always": the command prefix to remember, editable (`None`: the whole tool's API, for a
    /// call that is not a command). Enter confirms.
    Always(Option<String>),
    /// An answer to a question in one's own words (for a question that takes none: why one
    /// declines). Enter sends it; an empty one declines.
    Answer(String),
}

/// The prefix "always" proposes for a question's command, if it is one.
pub fn always_prefix(request: &ApprovalRequest) -> Option<tool_executor::approval::PrefixSuggestion> {
    request
        .arguments
        .get("command")
        .and_then(serde_json::Value::as_str)
        .map(tool_executor::approval::suggest_prefix)
}

/// What the screen shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum View {
    /// The conversation.
    #[default]
    Chat,
    /// One cell whole, scrolled (the portal).
    Pager {
        /// The cell.
        cell: usize,
        /// Lines scrolled from the top.
        scroll: usize,
    },
    /// The tool console.
    Console,
    /// The journal.
    Journal,
    /// The earlier conversations of this folder, to pick one to resume.
    Resume {
        /// Newest first.
        items: Vec<crate::chat::Saved>,
        /// The highlighted one.
        selected: usize,
    },
    /// One journal record whole.
    Record {
        /// The record, pretty JSON.
        text: String,
        /// Lines scrolled from the top.
        scroll: usize,
        /// It is a memory (closing it goes back to the memory view, not the journal).
        memory: bool,
    },
    /// A command's whole output, from the file its run kept (Ctrl-P on its card), with search.
    Log {
        /// The file, for the footer.
        path: String,
        /// Its lines (colour codes out).
        lines: Vec<String>,
        /// Lines scrolled from the top.
        scroll: usize,
        /// What `/` looks for.
        find: String,
        /// `/` was pressed and the query is being typed.
        finding: bool,
    },
    /// What the memory tool keeps about the person.
    Memory,
    /// The session's calls that changed files, to rewind to before one (Esc Esc).
    Rewind,
}

/// What a key asks the event loop to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Send this to the agent.
    Submit(String),
    /// Cancel the running turn.
    Cancel,
    /// Answer a question.
    Decide {
        /// The approval's id.
        approval_id: String,
        /// The answer.
        decision: Decision,
    },
    /// Reopen the session in this approval mode.
    SetMode(ApprovalMode),
    /// Reopen the session with this sandbox.
    SetSandbox(tool_core::SandboxMode),
    /// Put this text on the clipboard (OSC 52).
    Copy(String),
    /// Run one call from the console.
    RunTool {
        /// The function name.
        name: String,
        /// The arguments.
        arguments: serde_json::Value,
    },
    /// Load the journal view's rows (and remembered decisions) with its filters.
    LoadJournal,
    /// Trust the folder: its instructions (and later skills and hooks) are used, remembered.
    Trust,
    /// Start a new conversation in the same folder (the old one stays resumable).
    Clear,
    /// Say the model, tokens, sandbox and mode.
    Status,
    /// Switch to another profile of config.toml, keeping the conversation.
    SwitchModel(String),
    /// Summarise the conversation now to free the context window.
    Compact,
    /// List the earlier conversations of the folder (the `/resume` picker).
    ListConversations,
    /// Continue this earlier conversation.
    Resume(String),
    /// Revoke a remembered decision.
    Revoke(String),
    /// Load the memory view's memories.
    LoadMemories,
    /// Forget a memory, then load the memories again.
    Forget(String),
    /// Load the rewind view's calls.
    LoadRewind,
    /// Put the files back to before this call (and the conversation, with `conversation`).
    Rewind {
        /// The call.
        call_id: String,
        /// The conversation goes back to before the turn that made it, too.
        conversation: bool,
        /// Overwrite files changed since.
        force: bool,
    },
    /// Run a command the person typed after `!` (its card is already on screen as `call_id`).
    Shell {
        /// The card's id.
        call_id: String,
        /// The command line.
        command: String,
    },
    /// Leave.
    Quit,
}

/// The whole state of the screen.
#[derive(Debug, Clone, Default)]
pub struct App {
    /// The transcript.
    pub cells: Vec<Cell>,
    /// The prompt being typed.
    pub input: String,
    /// The cursor, as a char index into `input`.
    pub cursor: usize,
    /// Questions, oldest first; the first is shown.
    pub approvals: VecDeque<Pending>,
    /// A field the question box opened for typing (a denial's reason, the "always" prefix).
    pub answering: Option<Answering>,
    /// The person pressed Tab to answer the question while the prompt holds a draft.
    pub question_focus: bool,
    /// A key reached the question box too soon (as it appeared, or amid typing) or was not one
    /// of its keys: the box says so instead of taking it.
    pub question_hint: Option<&'static str>,
    /// When a key last went into the prompt: a question takes single keys only after a pause.
    pub last_typed: Option<std::time::Instant>,
    /// A choice key pressed on the question, taken once no other key follows it within
    /// [`App::choice_window`]: a key followed by more typing was the start of a sentence (a
    /// reason), not a choice.
    pub pending_choice: Option<(char, std::time::Instant)>,
    /// How long a choice waits for a following key ([`CHOICE_WINDOW`]; tests set zero).
    pub choice_window: std::time::Duration,
    /// The model, as shown.
    pub model: String,
    /// The folder.
    pub folder: String,
    /// The approval mode.
    pub mode: ApprovalMode,
    /// The sandbox, described.
    pub sandbox: String,
    /// The colours, for the terminal's background (`/theme`, `TOOLHOST_THEME`, `NO_COLOR`).
    pub theme: super::theme::Theme,
    /// Tokens used.
    pub usage: Usage,
    /// Tokens the conversation took in the latest request (what the context window holds).
    pub context_used: u64,
    /// The model's context window in tokens (0: no model, nothing said about what is left).
    pub context_window: u64,
    /// A turn is running.
    pub running: bool,
    /// Lines scrolled up from the bottom of the transcript (0 follows it).
    pub scroll: usize,
    /// The selected tool cell (folding and the pager act on it; else the last one).
    pub selected: Option<usize>,
    /// What is shown.
    pub view: View,
    /// No model is configured: this line says how.
    pub setup_hint: Option<String>,
    /// The tool console.
    pub console: super::panes::Console,
    /// The journal view.
    pub journal: super::panes::JournalView,
    /// The memory view.
    pub memory: super::panes::MemoryView,
    /// How long a new question ignores keys ([`QUESTION_GRACE`]; tests set zero).
    pub question_grace: std::time::Duration,
    /// Prompts sent before, oldest first (this folder's, loaded at start); ↑ and ↓ walk them.
    pub history: Vec<String>,
    /// Where ↑/↓ are in `history`, and the draft they started from.
    browsing: Option<(usize, String)>,
    /// Messages sent while a turn runs: they go as one message when it ends.
    pub queued: Vec<String>,
    /// Prompts sent since the event loop last saved the history.
    pub unsaved_prompts: Vec<String>,
    /// Commands the person ran with `!` and what they printed, for the model with the next
    /// message.
    pub shell_notes: Vec<String>,
    /// `!` commands run so far (their cards' ids).
    shell_runs: u64,
    /// The folder's files, for `@` completion (listed by the event loop).
    pub files: Vec<String>,
    /// The skills found for the folder (`/skills`, `/NAME` starts one).
    pub skills: crate::skills::Skills,
    /// What the word at the cursor could become (`@` files, `/` commands); Tab takes it.
    pub completion: Option<Completion>,
    /// When Esc or Ctrl-C was pressed over a draft: a second press soon after clears it.
    pub clear_armed: Option<std::time::Instant>,
    /// When Ctrl-C was pressed on an empty prompt with nothing running: a second press soon after
    /// quits (one press never does: it is also how a turn is cancelled).
    pub quit_armed: Option<std::time::Instant>,
    /// The rewind view's state.
    pub rewind: super::panes::RewindView,
    /// The terminal tells Shift-Enter from Enter (else Alt-Enter or Ctrl-J make a new line).
    pub shift_enter: bool,
    /// When the running turn started (the status line shows for how long).
    pub turn_started: Option<std::time::Instant>,
    /// A question's options marked so far (several may be chosen), by index.
    pub marked: Vec<usize>,
    /// The option the arrows are on.
    pub option_cursor: usize,
    /// In place of the status line's mode, sandbox and model (the approver inbox says what it
    /// is connected to).
    pub status: Option<String>,
    /// Each call's cell, by call id.
    calls: HashMap<String, usize>,
    /// The assistant cell being streamed.
    streaming: Option<usize>,
    /// Tool cells of the reply being streamed, by the reply's call index.
    streaming_calls: HashMap<usize, usize>,
}

/// Appends live output, keeping the last [`LIVE_OUTPUT_LIMIT`] bytes.
fn push_live(output: &mut String, text: &str) {
    output.push_str(text);
    if output.len() > LIVE_OUTPUT_LIMIT {
        let mut cut = output.len() - LIVE_OUTPUT_LIMIT;
        while !output.is_char_boundary(cut) {
            cut += 1;
        }
        output.drain(..cut);
    }
}

impl App {
    /// An empty screen.
    pub fn new(
        model: impl Into<String>,
        folder: impl Into<String>,
        mode: ApprovalMode,
        sandbox: impl Into<String>,
    ) -> Self {
        Self {
            model: model.into(),
            folder: folder.into(),
            mode,
            sandbox: sandbox.into(),
            view: View::Chat,
            question_grace: QUESTION_GRACE,
            choice_window: CHOICE_WINDOW,
            ..Self::default()
        }
    }

    /// Empties the screen for a new conversation.
    pub fn clear_conversation(&mut self) {
        self.cells.clear();
        self.calls.clear();
        self.streaming = None;
        self.streaming_calls.clear();
        self.usage = Usage::default();
        self.context_used = 0;
        self.selected = None;
        self.scroll = 0;
    }

    /// Adds a notice.
    pub fn notice(&mut self, text: impl Into<String>, warning: bool) {
        self.cells.push(Cell::Notice { text: text.into(), warning });
    }

    /// Shows an earlier conversation (a resumed one).
    pub fn load_history(&mut self, messages: &[agent::Message]) {
        for message in messages {
            match message {
                agent::Message::User { content } => {
                    // The app's own notes to the model (an interruption, a resumed reply) were
                    // joined to the person's next words: they show as notes, not as the person's.
                    let mut rest = content.as_str();
                    for note in [agent::CANCELLED_NOTE, agent::RESUME_NOTE] {
                        if let Some(after) = rest.strip_prefix(note) {
                            let said = if note == agent::CANCELLED_NOTE {
                                "interrupted"
                            } else {
                                "resumed after a broken stream"
                            };
                            self.notice(said, true);
                            rest = after.trim_start();
                        }
                    }
                    if !rest.is_empty() {
                        self.cells.push(Cell::User(rest.to_owned()));
                    }
                }
                agent::Message::Assistant { content, tool_calls, .. } => {
                    if !content.is_empty() {
                        self.cells.push(Cell::Assistant { text: content.clone(), reasoning: String::new() });
                    }
                    for call in tool_calls {
                        self.calls.insert(call.id.clone(), self.cells.len());
                        self.cells.push(Cell::Tool(ToolCell {
                            call_id: call.id.clone(),
                            name: call.name.clone(),
                            target: None,
                            arguments: call.arguments.clone(),
                            phase: Phase::Waiting,
                            output: String::new(),
                            folded: true,
                        }));
                    }
                }
                agent::Message::Tool { call_id, content, is_error, kind, .. } => {
                    if let Some(Cell::Tool(cell)) =
                        self.calls.get(call_id).and_then(|i| self.cells.get_mut(*i))
                    {
                        // How it ended: as the pipeline said, or (a transcript saved before that
                        // was kept) from what it told the model.
                        let (kind, status) = match kind {
                            Some(kind) if *is_error => (Some(*kind), status_of(*kind)),
                            _ => settled_as(content, *is_error),
                        };
                        let output = match kind {
                            Some(kind) => ToolOutput::error(kind, content.clone()),
                            None => ToolOutput::ok(content.clone()),
                        };
                        cell.phase = Phase::Done(Box::new(CallResult {
                            call_id: call_id.clone(),
                            name: cell.name.clone(),
                            tool: None,
                            api: None,
                            status,
                            output,
                            duration_ms: 0,
                        }));
                    }
                }
            }
        }
        self.calls.clear();
    }

    /// Folds in what the agent reports.
    pub fn on_agent(&mut self, event: AgentEvent) {
        match event {
            AgentEvent::Delta(Delta::Text(text)) => {
                let index = self.assistant_cell();
                if let Cell::Assistant { text: t, .. } = &mut self.cells[index] {
                    t.push_str(&text);
                }
            }
            AgentEvent::Delta(Delta::Reasoning(text)) => {
                let index = self.assistant_cell();
                if let Cell::Assistant { reasoning, .. } = &mut self.cells[index] {
                    reasoning.push_str(&text);
                }
            }
            AgentEvent::Delta(Delta::ToolCall { index, id, name }) => {
                let position = self.cells.len();
                self.cells.push(Cell::Tool(ToolCell {
                    call_id: id.clone(),
                    name,
                    target: None,
                    arguments: String::new(),
                    phase: Phase::Arguments,
                    output: String::new(),
                    folded: false,
                }));
                self.streaming_calls.insert(index, position);
                self.calls.insert(id, position);
            }
            AgentEvent::Delta(Delta::ToolArguments { index, fragment }) => {
                if let Some(Cell::Tool(cell)) =
                    self.streaming_calls.get(&index).and_then(|i| self.cells.get_mut(*i))
                {
                    cell.arguments.push_str(&fragment);
                }
            }
            AgentEvent::Delta(Delta::Retrying { attempt, delay_ms, reason }) => {
                // What streamed of the failed try is discarded by the adapter: so here.
                if let Some(index) = self.streaming.take()
                    && matches!(&self.cells[index], Cell::Assistant { .. })
                {
                    self.cells.truncate(index);
                    // Nothing may point past the cells that are left.
                    if self.selected.is_some_and(|selected| selected >= index) {
                        self.selected = None;
                    }
                    if matches!(self.view, View::Pager { cell, .. } if cell >= index) {
                        self.view = View::Chat;
                    }
                }
                self.streaming_calls.clear();
                self.notice(format!("retrying (try {attempt} in {delay_ms} ms): {reason}"), true);
            }
            AgentEvent::Reply { tool_calls, usage, .. } => {
                self.streaming = None;
                self.usage.add(usage);
                self.context_used = usage.input_tokens + usage.output_tokens;
                // The whole calls replace what streamed (ids may have been filled in late).
                for (index, call) in tool_calls.iter().enumerate() {
                    if let Some(Cell::Tool(cell)) =
                        self.streaming_calls.get(&index).and_then(|i| self.cells.get_mut(*i))
                    {
                        cell.arguments.clone_from(&call.arguments);
                        cell.call_id.clone_from(&call.id);
                        if cell.phase == Phase::Arguments {
                            cell.phase = Phase::Waiting;
                        }
                    }
                    if let Some(position) = self.streaming_calls.get(&index) {
                        self.calls.insert(call.id.clone(), *position);
                    }
                }
                self.streaming_calls.clear();
            }
            AgentEvent::Results(results) => {
                for result in results {
                    if let Some(Cell::Tool(cell)) =
                        self.calls.get(&result.call_id).and_then(|i| self.cells.get_mut(*i))
                    {
                        if let (Some(tool), Some(api)) = (&result.tool, &result.api) {
                            cell.target = Some((tool.clone(), api.clone()));
                        }
                        cell.phase = Phase::Done(Box::new(result));
                    }
                }
            }
            AgentEvent::Resumed { reason } => {
                // What streamed stays as it is; the continuation goes in a cell of its own.
                self.streaming = None;
                self.streaming_calls.clear();
                self.notice(reason, true);
            }
            AgentEvent::HookNote { hook, message } => self.notice(format!("{hook}: {message}"), true),
            AgentEvent::KeptGoing { hook, reason } => {
                self.streaming = None;
                self.notice(format!("{hook} did not let the model stop yet: {reason}"), false);
            }
            AgentEvent::Compacted(c) => self.notice(
                format!(
                    "context compacted: ~{} → ~{} tokens ({} results elided, {} messages summarised)",
                    c.before_tokens, c.after_tokens, c.elided_results, c.summarised_messages
                ),
                false,
            ),
        }
    }

    /// Folds in what the pipeline reports about a call.
    pub fn on_call(&mut self, event: Event) {
        // A call made by a running call (a sub-agent's, say) shows as a line of its card.
        if !self.calls.contains_key(event.call_id())
            && let Some((parent, _)) = event.call_id().split_once('/')
            && let Some(Cell::Tool(cell)) = self.calls.get(parent).and_then(|i| self.cells.get_mut(*i))
        {
            let line = match &event {
                Event::Proposed { api, arguments, .. } => {
                    let gist = ["command", "path", "pattern", "query", "url"]
                        .iter()
                        .find_map(|key| arguments.get(key).and_then(serde_json::Value::as_str))
                        .map(|g| format!(" {}", g.lines().next().unwrap_or_default()))
                        .unwrap_or_default();
                    Some(format!("↳ {api}{gist}\n"))
                }
                Event::PermissionDenied { message, .. } => Some(format!("↳ denied: {message}\n")),
                Event::Blocked { reason, .. } => Some(format!("↳ blocked: {reason}\n")),
                Event::Failed { output, .. } => {
                    Some(format!("↳ failed: {}\n", output.content.lines().next().unwrap_or_default()))
                }
                _ => None,
            };
            if let Some(line) = line {
                push_live(&mut cell.output, &line);
            }
            return;
        }
        let Some(Cell::Tool(cell)) = self.calls.get(event.call_id()).and_then(|i| self.cells.get_mut(*i))
        else {
            return;
        };
        match event {
            Event::Proposed { tool, api, .. } => {
                cell.target = Some((tool, api));
                if cell.phase == Phase::Arguments {
                    cell.phase = Phase::Waiting;
                }
            }
            // The call's events and its result come on different channels: a start read after
            // the result must not put a settled card back to running.
            Event::Started { .. } if !matches!(cell.phase, Phase::Done(_)) => cell.phase = Phase::Running,
            Event::Progress { progress, .. } => {
                if let Some(output) = progress.output {
                    push_live(&mut cell.output, &output);
                }
            }
            _ => {}
        }
    }

    /// A question arrived.
    pub fn ask(&mut self, request: ApprovalRequest) {
        self.approvals.push_back(Pending { request, arrived: std::time::Instant::now() });
    }

    /// A question went away without an answer (its call was cancelled or timed out).
    pub fn withdraw(&mut self, approval_id: &str) {
        let before = self.approvals.len();
        self.approvals.retain(|p| p.request.id != approval_id);
        if self.approvals.len() != before {
            self.answering = None;
            self.marked.clear();
            self.option_cursor = 0;
            self.question_focus = false;
            self.question_hint = None;
            self.pending_choice = None;
        }
    }

    /// The turn ended.
    pub fn finish(&mut self, outcome: &Outcome) {
        self.running = false;
        self.turn_started = None;
        self.streaming = None;
        self.streaming_calls.clear();
        match outcome {
            Outcome::Answered { truncated: true, .. } => {
                self.notice("the answer was cut by the output length limit", true)
            }
            Outcome::Answered { .. } => {}
            Outcome::TurnLimit { turns } => {
                self.notice(format!("stopped: still working after {turns} replies"), true)
            }
            Outcome::BudgetSpent { used, budget } => {
                self.notice(format!("stopped: {used} tokens used of a budget of {budget}"), true);
            }
            Outcome::Cancelled => self.notice("cancelled", true),
            Outcome::Failed(error) => {
                self.notice(error.to_string(), true);
                self.restore_request();
            }
            Outcome::Blocked { hook, reason } => {
                self.notice(format!("{hook} refused the prompt: {reason}"), true);
                self.restore_request();
            }
        }
    }

    /// The conversation goes back to before the turn whose reply made `call_id`: its cells from
    /// that turn's request on are taken out, and the request is back in the prompt to edit.
    /// Returns whether the call was found.
    pub fn rewind_conversation(&mut self, call_id: &str) -> bool {
        let Some(tool) = self.cells.iter().position(|c| matches!(c, Cell::Tool(t) if t.call_id == call_id))
        else {
            return false;
        };
        let Some(request) = self.cells[..tool].iter().rposition(|c| matches!(c, Cell::User(_))) else {
            return false;
        };
        if let Some(Cell::User(text)) = self.cells.get(request).cloned()
            && self.input.is_empty()
        {
            self.cursor = text.chars().count();
            self.input = text;
        }
        self.cells.truncate(request);
        true
    }

    /// The request is not part of the conversation any more (the model never answered it, or a
    /// hook refused it): it is back in the prompt to send again, unless something is typed there.
    fn restore_request(&mut self) {
        if self.input.is_empty()
            && self.queued.is_empty()
            && let Some(text) = self.cells.iter().rev().find_map(|c| match c {
                Cell::User(text) => Some(text.clone()),
                _ => None,
            })
        {
            self.cursor = text.chars().count();
            self.input = text;
        }
    }

    fn assistant_cell(&mut self) -> usize {
        if let Some(index) = self.streaming {
            return index;
        }
        self.cells.push(Cell::Assistant { text: String::new(), reasoning: String::new() });
        let index = self.cells.len() - 1;
        self.streaming = Some(index);
        index
    }

    /// Pasted text goes into what is being typed, as text (never as keys that could answer a
    /// question or act in a pane).
    pub fn paste(&mut self, text: &str) {
        match &mut self.answering {
            Some(Answering::Reason(field) | Answering::Always(Some(field)) | Answering::Answer(field)) => {
                field.push_str(&text.replace(['\r', '\n'], " "));
                return;
            }
            Some(Answering::Always(None)) => return,
            None => {}
        }
        if self.view == View::Console {
            if let Some(field) = self.console.form.as_mut().and_then(|f| f.fields.get_mut(f.focus)) {
                field.value.push_str(text);
            }
            return;
        }
        if self.view == View::Chat {
            for c in text.chars() {
                self.insert(if c == '\r' { '\n' } else { c });
            }
            self.last_typed = Some(std::time::Instant::now());
        }
    }

    /// The tool cell folding and the pager act on.
    pub fn target_cell(&self) -> Option<usize> {
        self.selected.or_else(|| self.cells.iter().rposition(|c| matches!(c, Cell::Tool(_))))
    }

    /// Turns a key into a change of state and, perhaps, a command.
    pub fn on_key(&mut self, key: KeyEvent) -> Option<Command> {
        if key.kind == KeyEventKind::Release {
            return None;
        }
        if let Some(command) = self.on_page_key(key) {
            return command;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let esc = key.code == KeyCode::Esc;
        if esc && self.completion.is_some() && self.answering.is_none() {
            self.completion = None;
            return None;
        }
        let pane = matches!(self.view, View::Console | View::Journal | View::Memory | View::Rewind);
        if ctrl && key.code == KeyCode::Char('c') || esc && (!pane || self.answering.is_some()) {
            return self.on_interrupt(ctrl);
        }
        self.clear_armed = None;
        self.quit_armed = None;
        if ctrl {
            self.completion = None;
            return self.on_ctrl_key(key);
        }
        // Questions take keys in the conversation only: in the console and the journal, `s` or
        // `y` are a filter or a value, never an answer (the box says to go back to answer).
        if self.view == View::Chat
            && let Some(command) = self.on_question_key(key)
        {
            return command;
        }
        if let Some(command) = self.on_pane_key(key) {
            return command;
        }
        if let Some(command) = self.on_completion_key(key) {
            return command;
        }
        let command = self.on_prompt_key(key);
        self.update_completion();
        command
    }

    /// A key for a view that takes the whole screen (the resume picker, a command's output, a
    /// record, the pager) or one of the F keys that open the panes. `None`: none of these.
    fn on_page_key(&mut self, key: KeyEvent) -> Option<Option<Command>> {
        if let View::Resume { items, selected } = &mut self.view {
            match key.code {
                KeyCode::Esc | KeyCode::Char('q') => self.view = View::Chat,
                KeyCode::Down | KeyCode::Char('j') => {
                    *selected = (*selected + 1).min(items.len().saturating_sub(1))
                }
                KeyCode::Up | KeyCode::Char('k') => *selected = selected.saturating_sub(1),
                KeyCode::Enter => {
                    let chosen = items.get(*selected).map(|saved| saved.session_id.clone());
                    self.view = View::Chat;
                    return Some(chosen.map(Command::Resume));
                }
                _ => {}
            }
            return Some(None);
        }
        if matches!(self.view, View::Log { .. }) {
            self.on_log_key(key);
            return Some(None);
        }
        if let View::Record { scroll, memory, .. } = &mut self.view {
            match key.code {
                KeyCode::Esc | KeyCode::Char('q') => {
                    self.view = if *memory { View::Memory } else { View::Journal };
                }
                code => scrolled(code, scroll),
            }
            return Some(None);
        }
        match key.code {
            KeyCode::F(2) => {
                self.view = View::Console;
                return Some(None);
            }
            KeyCode::F(3) => {
                self.view = View::Journal;
                return Some(Some(Command::LoadJournal));
            }
            KeyCode::F(4) => {
                self.view = View::Memory;
                return Some(Some(Command::LoadMemories));
            }
            _ => {}
        }
        if let View::Pager { cell, scroll } = &mut self.view {
            match key.code {
                KeyCode::Esc | KeyCode::Char('q') => self.view = View::Chat,
                KeyCode::Char('c') => {
                    let text = crate::ui::view::cell_text(&self.cells[*cell]);
                    return Some(Some(Command::Copy(text)));
                }
                code => scrolled(code, scroll),
            }
            return Some(None);
        }
        None
    }

    /// Ctrl-C, or Esc outside a pane: drop a choice key, leave a field, cancel the turn, or arm
    /// (then do) the clear, the rewind view or quitting.
    fn on_interrupt(&mut self, ctrl: bool) -> Option<Command> {
        self.completion = None;
        // A choice key just pressed is dropped, never taken later by the timer.
        if self.pending_choice.take().is_some() {
            return None;
        }
        // Out of a field the question box opened, back to its choices.
        if self.answering.is_some() {
            self.answering = None;
            return None;
        }
        if self.running {
            // The draft stays: cancelling the turn is not clearing what is being typed.
            return Some(Command::Cancel);
        }
        if self.input.is_empty() {
            if ctrl {
                if self.quit_armed.is_some_and(|at| at.elapsed() < QUIT_WINDOW) {
                    return Some(Command::Quit);
                }
                self.quit_armed = Some(std::time::Instant::now());
                return None;
            }
            // Esc Esc on an empty prompt: the rewind view.
            if self.view == View::Chat && self.clear_armed.is_some_and(|at| at.elapsed() < CLEAR_WINDOW) {
                self.clear_armed = None;
                self.view = View::Rewind;
                return Some(Command::LoadRewind);
            }
            self.clear_armed = Some(std::time::Instant::now());
            return None;
        }
        // A draft is cleared by a second press, and even then ↑ brings it back.
        if self.clear_armed.is_some_and(|at| at.elapsed() < CLEAR_WINDOW) {
            self.clear_armed = None;
            let draft = std::mem::take(&mut self.input);
            self.remember(draft);
            self.cursor = 0;
            self.browsing = None;
        } else {
            self.clear_armed = Some(std::time::Instant::now());
        }
        None
    }

    /// A Ctrl key in the conversation.
    fn on_ctrl_key(&mut self, key: KeyEvent) -> Option<Command> {
        match key.code {
            // A new line in every terminal (Shift-Enter needs one that reports it).
            KeyCode::Char('j') if self.view == View::Chat => {
                self.insert('\n');
                None
            }
            KeyCode::Char('d') if self.input.is_empty() => Some(Command::Quit),
            KeyCode::Char('t') => {
                let next = MODES.iter().position(|m| *m == self.mode).map_or(0, |i| (i + 1) % MODES.len());
                Some(Command::SetMode(MODES[next]))
            }
            KeyCode::Char('o') => {
                if let Some(Cell::Tool(cell)) = self.target_cell().and_then(|i| self.cells.get_mut(i)) {
                    cell.folded = !cell.folded;
                }
                None
            }
            KeyCode::Char('p') => {
                if let Some(cell) = self.target_cell() {
                    // A command's whole output where its run kept it; else the card whole.
                    self.view = match self.cells.get(cell).and_then(whole_output) {
                        Some((path, lines)) => {
                            View::Log { path, lines, scroll: 0, find: String::new(), finding: false }
                        }
                        None => View::Pager { cell, scroll: 0 },
                    };
                }
                None
            }
            KeyCode::Char('u') => {
                let draft = std::mem::take(&mut self.input);
                self.remember(draft);
                self.cursor = 0;
                None
            }
            _ => None,
        }
    }

    /// A key for the pane on screen (console, journal, memory, rewind). `None`: no pane is.
    fn on_pane_key(&mut self, key: KeyEvent) -> Option<Option<Command>> {
        if self.view == View::Console {
            return Some(match self.console.on_key(key) {
                super::panes::ConsoleAction::None => None,
                super::panes::ConsoleAction::Leave => {
                    self.view = View::Chat;
                    None
                }
                super::panes::ConsoleAction::Run { name, arguments } => {
                    Some(Command::RunTool { name, arguments })
                }
            });
        }
        if self.view == View::Journal {
            let mut tools: Vec<String> = self.console.catalogue.iter().map(|e| e.tool.clone()).collect();
            tools.dedup();
            return Some(match self.journal.on_key(key, &tools) {
                super::panes::JournalAction::None => None,
                super::panes::JournalAction::Leave => {
                    self.view = View::Chat;
                    None
                }
                super::panes::JournalAction::Reload => Some(Command::LoadJournal),
                super::panes::JournalAction::Open(text) => {
                    self.view = View::Record { text, scroll: 0, memory: false };
                    None
                }
                super::panes::JournalAction::Revoke(id) => Some(Command::Revoke(id)),
            });
        }
        if self.view == View::Memory {
            return Some(match self.memory.on_key(key) {
                super::panes::MemoryAction::None => None,
                super::panes::MemoryAction::Leave => {
                    self.view = View::Chat;
                    None
                }
                super::panes::MemoryAction::Reload => Some(Command::LoadMemories),
                super::panes::MemoryAction::Open(text) => {
                    self.view = View::Record { text, scroll: 0, memory: true };
                    None
                }
                super::panes::MemoryAction::Forget(id) => Some(Command::Forget(id)),
            });
        }
        if self.view == View::Rewind {
            return Some(match self.rewind.on_key(key) {
                super::panes::RewindAction::None => None,
                super::panes::RewindAction::Leave => {
                    self.view = View::Chat;
                    None
                }
                super::panes::RewindAction::Reload => Some(Command::LoadRewind),
                super::panes::RewindAction::Rewind { call_id, conversation, force } => {
                    Some(Command::Rewind { call_id, conversation, force })
                }
            });
        }
        None
    }

    /// A key for the completion list, when one is open. `None`: it does not take the key.
    fn on_completion_key(&mut self, key: KeyEvent) -> Option<Option<Command>> {
        let completion = self.completion.as_mut()?;
        match key.code {
            KeyCode::Tab => {
                let (choice, _) = completion.items[completion.selected].clone();
                let length = self.input.chars().count();
                self.cursor = self.cursor.min(length);
                let start = completion.start.min(self.cursor);
                let (from, to) = (self.byte_at(start), self.byte_at(self.cursor));
                let replacement = format!("{choice} ");
                self.input.replace_range(from..to, &replacement);
                self.cursor = start + replacement.chars().count();
                self.completion = None;
                return Some(None);
            }
            // A slash command being typed: Enter runs the highlighted one (`/st` runs
            // `/status`), as Tab then Enter would.
            KeyCode::Enter
                if key.modifiers.is_empty()
                    && completion.start == 0
                    && completion.items[completion.selected].0.starts_with('/') =>
            {
                let (choice, _) = completion.items[completion.selected].clone();
                let rest = self.input.split_once(char::is_whitespace).map_or("", |(_, rest)| rest).to_owned();
                self.input = if rest.is_empty() { choice.to_owned() } else { format!("{choice} {rest}") };
                self.cursor = self.input.chars().count();
                self.completion = None;
                return Some(self.submit());
            }
            KeyCode::Down => {
                completion.selected = (completion.selected + 1) % completion.items.len();
                return Some(None);
            }
            KeyCode::Up => {
                completion.selected =
                    completion.selected.checked_sub(1).unwrap_or(completion.items.len() - 1);
                return Some(None);
            }
            _ => {}
        }
        None
    }

    /// A key for the prompt itself (no question, pane or completion took it).
    fn on_prompt_key(&mut self, key: KeyEvent) -> Option<Command> {
        match key.code {
            KeyCode::Enter
                if key.modifiers.contains(KeyModifiers::SHIFT)
                    || key.modifiers.contains(KeyModifiers::ALT) =>
            {
                self.insert('\n');
            }
            KeyCode::Enter => return self.submit(),
            KeyCode::Char(c) => {
                self.insert(c);
                self.last_typed = Some(std::time::Instant::now());
            }
            KeyCode::Backspace if self.cursor > 0 => {
                self.cursor -= 1;
                let at = self.byte_at(self.cursor);
                self.input.remove(at);
            }
            KeyCode::Delete if self.cursor < self.input.chars().count() => {
                let at = self.byte_at(self.cursor);
                self.input.remove(at);
            }
            KeyCode::Left => self.cursor = self.cursor.saturating_sub(1),
            KeyCode::Right => self.cursor = (self.cursor + 1).min(self.input.chars().count()),
            KeyCode::Home => self.cursor = 0,
            KeyCode::End => self.cursor = self.input.chars().count(),
            KeyCode::PageUp => self.scroll += 10,
            KeyCode::PageDown => self.scroll = self.scroll.saturating_sub(10),
            // On the first line ↑ goes back in the history, on the last ↓ forward; elsewhere
            // they move between the draft's lines.
            KeyCode::Up if !self.input[..self.byte_at(self.cursor)].contains('\n') => self.history_back(),
            KeyCode::Down
                if self.browsing.is_some() && !self.input[self.byte_at(self.cursor)..].contains('\n') =>
            {
                self.history_forward();
            }
            KeyCode::Up => self.cursor = self.line_move(false),
            KeyCode::Down => self.cursor = self.line_move(true),
            KeyCode::Tab => self.select_previous_tool(),
            _ => {}
        }
        None
    }

    /// A key while a question waits. `None`: the question does not take it (it goes on to the
    /// prompt); `Some(command)`: it was the question's, with what to do.
    ///
    /// The box takes single keys only when it has the focus — the prompt is empty, or the
    /// person pressed Tab to answer over a draft — and only once the question has been on screen
    /// and the keyboard quiet for [`QUESTION_GRACE`]: a word being typed as the box appears is
    /// not an answer. A reason or an "always" prefix is typed in a field opened by its key, so
    /// no letter of a sentence is ever read as a choice.
    fn on_question_key(&mut self, key: KeyEvent) -> Option<Option<Command>> {
        if let Some(command) = self.commit_due() {
            return Some(Some(command));
        }
        let pending = self.approvals.front()?;
        if pending.request.question.is_some() {
            return self.on_asked_key(key);
        }
        let id = pending.request.id.clone();
        // A choice key just pressed: more typing makes it the start of a reason; Enter takes it
        // now; Esc drops it.
        if let Some((choice, _)) = self.pending_choice {
            match key.code {
                KeyCode::Char(c) => {
                    self.pending_choice = None;
                    self.answering = Some(Answering::Reason(format!("{choice}{c}")));
                    self.question_hint = Some("that was typing, so it is a reason: Enter denies with it");
                    return Some(None);
                }
                KeyCode::Enter => {
                    self.pending_choice = None;
                    return Some(self.choose(choice));
                }
                // Anything else (Esc, Backspace, an arrow…) drops the choice.
                _ => {
                    self.pending_choice = None;
                    return Some(None);
                }
            }
        }
        if let Some(field) = &mut self.answering {
            let decision = match (key.code, field) {
                (KeyCode::Enter, Answering::Reason(reason)) => {
                    let message = std::mem::take(reason);
                    if message.trim().is_empty() {
                        Decision::Deny
                    } else {
                        Decision::DenyWithMessage { message: message.trim().to_owned() }
                    }
                }
                (KeyCode::Enter, Answering::Always(prefix)) => {
                    match prefix.as_ref().map(|p| p.trim().to_owned()) {
                        Some(prefix) if prefix.is_empty() => {
                            let command = self
                                .approvals
                                .front()
                                .is_some_and(|p| p.request.arguments.get("command").is_some());
                            self.question_hint = Some(if command {
                                "an empty prefix would allow every command"
                            } else {
                                "name the file, or a folder holding it"
                            });
                            return Some(None);
                        }
                        prefix => Decision::AllowAlways { argument_prefix: prefix },
                    }
                }
                (
                    KeyCode::Backspace,
                    Answering::Reason(text) | Answering::Always(Some(text)) | Answering::Answer(text),
                ) => {
                    text.pop();
                    return Some(None);
                }
                (
                    KeyCode::Char(c),
                    Answering::Reason(text) | Answering::Always(Some(text)) | Answering::Answer(text),
                ) => {
                    text.push(c);
                    return Some(None);
                }
                _ => return Some(None),
            };
            self.answering = None;
            return Some(Some(self.decided(id, decision)));
        }
        let draft = !self.input.is_empty();
        // Over a draft whose word is being completed, Tab completes it.
        if key.code == KeyCode::Tab && draft && !self.question_focus && self.completion.is_some() {
            return None;
        }
        if key.code == KeyCode::Tab {
            // Over a draft, Tab moves to the question (the draft is kept); on the question, it
            // opens the reason field.
            if draft && !self.question_focus {
                self.question_focus = true;
            } else {
                self.answering = Some(Answering::Reason(String::new()));
            }
            self.question_hint = None;
            return Some(None);
        }
        if draft && !self.question_focus {
            return None;
        }
        let KeyCode::Char(c) = key.code else {
            // Enter, arrows and the rest answer nothing; they do not reach the prompt either.
            return if key.code == KeyCode::Enter { Some(None) } else { None };
        };
        let quiet = self.last_typed.is_none_or(|at| at.elapsed() >= self.question_grace);
        // Keys the box takes count as typing too: a choice must follow a pause in all typing.
        self.last_typed = Some(std::time::Instant::now());
        if pending.arrived.elapsed() < self.question_grace || !quiet {
            self.question_hint =
                Some("that key came as the question appeared or amid typing: press it again");
            return Some(None);
        }
        self.question_hint = None;
        if !matches!(c, 'y' | 's' | 'a' | 'n') {
            self.question_hint = Some("answer with y, s, a or n (Tab or n to say why not)");
            return Some(None);
        }
        self.pending_choice = Some((c, std::time::Instant::now()));
        if self.choice_window.is_zero() {
            return Some(self.commit_due());
        }
        Some(None)
    }

    /// A key while the first question waiting is one the agent asks (`askUser`): digits choose
    /// (or mark, where several may be chosen), ↑↓ and Enter too, Space marks; Tab opens a field
    /// for an answer in one's own words (or, where the question takes none, for why one
    /// declines); Enter on an empty field declines. Choices follow a pause, as for approvals.
    fn on_asked_key(&mut self, key: KeyEvent) -> Option<Option<Command>> {
        let pending = self.approvals.front()?;
        let id = pending.request.id.clone();
        let question = pending.request.question.clone()?;
        let arrived = pending.arrived;
        let count = question.options.len();
        if let Some(Answering::Answer(text)) = &mut self.answering {
            match key.code {
                KeyCode::Enter => {
                    let text = std::mem::take(text).trim().to_owned();
                    self.answering = None;
                    let decision = self.in_words(&question, text);
                    return Some(Some(self.decided(id, decision)));
                }
                KeyCode::Backspace => {
                    text.pop();
                }
                KeyCode::Char(c) => text.push(c),
                _ => {}
            }
            return Some(None);
        }
        // A number just pressed: more typing makes it the start of one's own words; Enter takes
        // it now; anything else drops it.
        if let Some((choice, _)) = self.pending_choice {
            self.pending_choice = None;
            return Some(match key.code {
                KeyCode::Char(c) => {
                    self.answering = Some(Answering::Answer(format!("{choice}{c}")));
                    self.question_hint = Some("that was typing, so it is your answer: Enter sends it");
                    None
                }
                KeyCode::Enter => self.choose(choice),
                _ => None,
            });
        }
        let draft = !self.input.is_empty();
        if key.code == KeyCode::Tab && draft && !self.question_focus && self.completion.is_some() {
            return None;
        }
        if key.code == KeyCode::Tab {
            if draft && !self.question_focus {
                self.question_focus = true;
            } else {
                self.answering = Some(Answering::Answer(String::new()));
            }
            self.question_hint = None;
            return Some(None);
        }
        if draft && !self.question_focus {
            return None;
        }
        match key.code {
            KeyCode::Up => {
                self.option_cursor = self.option_cursor.saturating_sub(1);
                return Some(None);
            }
            KeyCode::Down => {
                self.option_cursor = (self.option_cursor + 1).min(count.saturating_sub(1));
                return Some(None);
            }
            _ => {}
        }
        // A key the question took (a mark, a move) is the person answering, not typing: the next
        // one may follow at once, so three marks and Enter in half a second all count. A key it
        // refused is typing, and the pause starts again.
        let quiet = self.last_typed.is_none_or(|at| at.elapsed() >= self.question_grace);
        let early = arrived.elapsed() < self.question_grace || !quiet;
        let chosen = match key.code {
            KeyCode::Enter => Some(self.option_cursor),
            KeyCode::Char(' ') if question.multiple => Some(self.option_cursor),
            KeyCode::Char(c @ '1'..='9') => Some(c as usize - '1' as usize),
            KeyCode::Char(c) if question.takes_text() => {
                // Typing starts an answer of one's own (sent only by Enter).
                self.answering = Some(Answering::Answer(c.to_string()));
                self.question_hint = None;
                return Some(None);
            }
            KeyCode::Char(_) => {
                self.last_typed = Some(std::time::Instant::now());
                self.question_hint =
                    Some("choose with a number or ↑↓ and Enter (Tab to decline and say why)");
                return Some(None);
            }
            _ => return None,
        };
        if early {
            self.last_typed = Some(std::time::Instant::now());
            self.question_hint =
                Some("that key came as the question appeared or amid typing: press it again");
            return Some(None);
        }
        self.question_hint = None;
        Some(self.take_chosen(key, chosen, &question, id))
    }

    /// The key chose option `chosen` (a number, Space or Enter on the cursor's): marked, taken,
    /// or — where words are an answer too — the start of them.
    fn take_chosen(
        &mut self,
        key: KeyEvent,
        chosen: Option<usize>,
        question: &tool_core::Question,
        id: String,
    ) -> Option<Command> {
        let digit = match key.code {
            KeyCode::Char(c @ '1'..='9') => Some(c),
            _ => None,
        };
        let count = question.options.len();
        let Some(index) = chosen.filter(|i| *i < count) else {
            match digit {
                // Where words are an answer, a number that is no option starts one ("2024").
                Some(c) if question.takes_text() => self.answering = Some(Answering::Answer(c.to_string())),
                _ if count == 0 => self.answering = Some(Answering::Answer(String::new())),
                _ => self.question_hint = Some("there is no option with that number"),
            }
            return None;
        };
        // Where words are an answer too, a number followed by more typing is the start of them:
        // it is taken as an option only once no key follows it within the choice window.
        if let Some(c) = digit
            && question.takes_text()
        {
            self.pending_choice = Some((c, std::time::Instant::now()));
            if self.choice_window.is_zero() {
                return self.commit_due();
            }
            return None;
        }
        if key.code == KeyCode::Enter && question.multiple {
            let choices = self.marked_labels(question);
            if choices.is_empty() {
                self.question_hint = Some("mark options with their numbers or Space first (Tab to decline)");
                return None;
            }
            let answer = tool_core::Answer { choices, text: None };
            return Some(self.decided(id, Decision::Answer { answer }));
        }
        self.take_option(index, question, id)
    }

    /// What Enter in the words field answers: `text` with the options marked where the question
    /// takes words (one's own words replace a single choice), else a decline with `text` as why;
    /// nothing typed and nothing marked declines.
    fn in_words(&self, question: &tool_core::Question, text: String) -> Decision {
        let choices = self.marked_labels(question);
        if text.is_empty() && choices.is_empty() {
            Decision::Deny
        } else if !question.takes_text() {
            if text.is_empty() { Decision::Deny } else { Decision::DenyWithMessage { message: text } }
        } else {
            let text = Some(text).filter(|t| !t.is_empty());
            let choices = if !question.multiple && text.is_some() { Vec::new() } else { choices };
            Decision::Answer { answer: tool_core::Answer { choices, text } }
        }
    }

    /// Option `index` of the question: marked (or unmarked) where several may be chosen, else
    /// the answer.
    fn take_option(&mut self, index: usize, question: &tool_core::Question, id: String) -> Option<Command> {
        let label = question.options.get(index)?.clone();
        if question.multiple {
            self.option_cursor = index;
            match self.marked.iter().position(|m| *m == index) {
                Some(at) => {
                    self.marked.remove(at);
                }
                None => self.marked.push(index),
            }
            return None;
        }
        let answer = tool_core::Answer { choices: vec![label], text: None };
        Some(self.decided(id, Decision::Answer { answer }))
    }

    /// The labels of the options marked, in the question's order.
    fn marked_labels(&self, question: &tool_core::Question) -> Vec<String> {
        let mut marked = self.marked.clone();
        marked.sort_unstable();
        marked.into_iter().filter_map(|i| question.options.get(i).cloned()).collect()
    }

    /// Takes the choice key pressed on the question once nothing followed it in time.
    pub fn commit_due(&mut self) -> Option<Command> {
        let (choice, at) = self.pending_choice?;
        if at.elapsed() < self.choice_window {
            return None;
        }
        self.pending_choice = None;
        self.choose(choice)
    }

    /// When the pending choice is taken, if there is one.
    pub fn choice_deadline(&self) -> Option<std::time::Instant> {
        self.pending_choice.map(|(_, at)| at + self.choice_window)
    }

    /// What a choice key does: `y` and `s` answer; `a` opens the "always" field with the
    /// proposed prefix; `n` opens the reason field.
    fn choose(&mut self, choice: char) -> Option<Command> {
        let pending = self.approvals.front()?;
        let id = pending.request.id.clone();
        if let Some(question) = pending.request.question.clone() {
            let index = (choice as usize).checked_sub('1' as usize)?;
            return self.take_option(index, &question, id);
        }
        let decision = match choice {
            'y' => Decision::AllowOnce,
            // A command: this one word for word; files: within the scope shown.
            's' => Decision::AllowSession { argument_prefix: pending.request.scope.clone() },
            'a' => {
                let prefix = always_prefix(&pending.request)
                    .map(|s| s.prefix)
                    .or_else(|| pending.request.scope.clone());
                self.answering = Some(Answering::Always(prefix));
                return None;
            }
            _ => {
                self.answering = Some(Answering::Reason(String::new()));
                return None;
            }
        };
        Some(self.decided(id, decision))
    }

    fn decided(&mut self, approval_id: String, decision: Decision) -> Command {
        self.question_focus = false;
        self.question_hint = None;
        self.pending_choice = None;
        let answered = self.approvals.pop_front();
        // The next question is new to the person now: its grace starts now.
        if let Some(next) = self.approvals.front_mut() {
            next.arrived = std::time::Instant::now();
        }
        self.marked.clear();
        self.option_cursor = 0;
        if answered.as_ref().is_some_and(|p| p.request.question.is_some()) {
            let said = match &decision {
                Decision::Answer { answer } => format!("answered the agent's question: {}", answer.summary()),
                Decision::DenyWithMessage { message } => format!("declined the agent's question: {message}"),
                _ => "declined the agent's question".to_owned(),
            };
            self.notice(said, !matches!(decision, Decision::Answer { .. }));
        } else if let Some(pending) = answered {
            let what = format!("{}/{}", pending.request.tool, pending.request.api);
            let said = match &decision {
                Decision::AllowOnce => "allowed once".to_owned(),
                Decision::AllowSession { .. } if pending.request.arguments.get("command").is_some() => {
                    "allowed: this exact command, for this session".to_owned()
                }
                Decision::AllowSession { argument_prefix: Some(scope) } => {
                    format!("allowed for this session within {scope}")
                }
                Decision::AllowSession { .. } => "allowed for this session".to_owned(),
                Decision::AllowAlways { argument_prefix: Some(prefix) }
                    if pending.request.arguments.get("command").is_some() =>
                {
                    format!("always allowed in this folder: commands starting `{prefix}`")
                }
                Decision::AllowAlways { argument_prefix: Some(scope) } => {
                    format!("always allowed in this folder within {scope}")
                }
                Decision::AllowAlways { argument_prefix: None } => "always allowed here".to_owned(),
                Decision::Deny => "denied".to_owned(),
                Decision::DenyWithMessage { message } => format!("denied: {message}"),
                Decision::Answer { .. } => "answered".to_owned(),
            };
            self.notice(format!("{what} {said}"), !decision.allows());
        }
        Command::Decide { approval_id, decision }
    }

    fn select_previous_tool(&mut self) {
        let before = self.selected.unwrap_or(self.cells.len());
        self.selected = self.cells[..before]
            .iter()
            .rposition(|c| matches!(c, Cell::Tool(_)))
            .or_else(|| self.cells.iter().rposition(|c| matches!(c, Cell::Tool(_))));
    }

    /// Keeps a prompt in the history (not twice in a row, not empty).
    fn remember(&mut self, text: String) {
        let text = text.trim_end().to_owned();
        if !text.trim().is_empty() && self.history.last() != Some(&text) {
            self.history.push(text);
        }
    }

    fn history_back(&mut self) {
        let (at, draft) = match self.browsing.take() {
            Some((at, draft)) => (at, draft),
            None => (self.history.len(), self.input.clone()),
        };
        let Some(previous) = at.checked_sub(1) else {
            self.browsing = Some((at, draft));
            return;
        };
        self.input = self.history[previous].clone();
        self.cursor = self.input.chars().count();
        self.browsing = Some((previous, draft));
    }

    fn history_forward(&mut self) {
        let Some((at, draft)) = self.browsing.take() else { return };
        if at + 1 < self.history.len() {
            self.input = self.history[at + 1].clone();
            self.browsing = Some((at + 1, draft));
        } else {
            self.input = draft;
        }
        self.cursor = self.input.chars().count();
    }

    /// The cursor one line up or down in the draft, at the same column where the line is long
    /// enough.
    fn line_move(&self, down: bool) -> usize {
        let chars: Vec<char> = self.input.chars().collect();
        let start = chars[..self.cursor].iter().rposition(|c| *c == '\n').map_or(0, |i| i + 1);
        let column = self.cursor - start;
        let (from, to) = if down {
            let Some(end) = chars[self.cursor..].iter().position(|c| *c == '\n').map(|i| self.cursor + i)
            else {
                return self.cursor;
            };
            let next_end =
                chars[end + 1..].iter().position(|c| *c == '\n').map_or(chars.len(), |i| end + 1 + i);
            (end + 1, next_end)
        } else {
            if start == 0 {
                return self.cursor;
            }
            let previous = chars[..start - 1].iter().rposition(|c| *c == '\n').map_or(0, |i| i + 1);
            (previous, start - 1)
        };
        (from + column).min(to)
    }

    /// A key in a command's whole output: `/` types what to find (Enter finds it, Esc stops),
    /// `n`/`N` the next and previous match round the end, the usual keys scroll, `q` closes.
    fn on_log_key(&mut self, key: KeyEvent) {
        let View::Log { lines, scroll, find, finding, .. } = &mut self.view else { return };
        if *finding {
            match key.code {
                KeyCode::Enter => {
                    *finding = false;
                    *scroll = next_match(lines, find, *scroll, true).unwrap_or(*scroll);
                }
                KeyCode::Esc => {
                    *finding = false;
                    find.clear();
                }
                KeyCode::Backspace => {
                    find.pop();
                }
                KeyCode::Char(c) => find.push(c),
                _ => {}
            }
            return;
        }
        match key.code {
            KeyCode::Esc | KeyCode::Char('q') => self.view = View::Chat,
            KeyCode::Char('/') => {
                *finding = true;
                find.clear();
            }
            KeyCode::Char('n') => *scroll = next_match(lines, find, *scroll + 1, true).unwrap_or(*scroll),
            KeyCode::Char('N') => {
                *scroll = next_match(lines, find, scroll.saturating_sub(1), false).unwrap_or(*scroll);
            }
            KeyCode::End | KeyCode::Char('G') => *scroll = lines.len().saturating_sub(1),
            code => scrolled(code, scroll),
        }
    }

    /// `!COMMAND`: the person runs a command themselves. Its card shows at once; the event loop
    /// runs it (auto-run: only what always asks, asks) and [`App::shell_finished`] settles it.
    fn shell(&mut self, command: &str) -> Option<Command> {
        self.input.clear();
        self.cursor = 0;
        self.browsing = None;
        if command.is_empty() {
            self.notice("! runs a command yourself, and the model reads what it printed: !git status", false);
            return None;
        }
        let typed = format!("!{command}");
        self.remember(typed.clone());
        self.unsaved_prompts.push(typed.clone());
        self.shell_runs += 1;
        let call_id = format!("shell-{}", self.shell_runs);
        self.cells.push(Cell::User(typed));
        self.calls.insert(call_id.clone(), self.cells.len());
        self.cells.push(Cell::Tool(ToolCell {
            call_id: call_id.clone(),
            name: "runCommand".into(),
            target: Some(("local-system".into(), "runCommand".into())),
            arguments: serde_json::json!({ "command": command, "description": SHELL_DESCRIPTION })
                .to_string(),
            phase: Phase::Running,
            output: String::new(),
            folded: false,
        }));
        self.scroll = 0;
        Some(Command::Shell { call_id, command: command.to_owned() })
    }

    /// A `!` command ended: its card settles, and what it printed waits for the next message.
    pub fn shell_finished(&mut self, command: &str, result: CallResult) {
        let note = format!(
            "<person-ran-command>\n$ {command}\n[{}] {}\n</person-ran-command>",
            result.status.as_str(),
            result.output.content.trim_end()
        );
        self.shell_notes.push(note);
        if let Some(Cell::Tool(cell)) = self.calls.get(&result.call_id).and_then(|i| self.cells.get_mut(*i)) {
            cell.phase = Phase::Done(Box::new(result));
        }
    }

    /// The turn ended: what was queued meanwhile is sent now, as one message.
    pub fn take_queued(&mut self) -> Option<Command> {
        if self.queued.is_empty() || self.running {
            return None;
        }
        let text = std::mem::take(&mut self.queued).join("\n\n");
        self.start_turn(text.clone());
        Some(Command::Submit(text))
    }

    fn start_turn(&mut self, text: String) {
        self.scroll = 0;
        self.selected = None;
        self.running = true;
        self.turn_started = Some(std::time::Instant::now());
        self.cells.push(Cell::User(text));
    }

    fn byte_at(&self, chars: usize) -> usize {
        self.input.char_indices().nth(chars).map_or(self.input.len(), |(i, _)| i)
    }

    /// Looks at the word before the cursor: `@…` offers the folder's matching files, a first
    /// word `/…` the matching commands.
    pub fn update_completion(&mut self) {
        let before: Vec<char> = self.input.chars().take(self.cursor).collect();
        let start = before.iter().rposition(|c| c.is_whitespace()).map_or(0, |i| i + 1);
        let word: String = before[start..].iter().collect();
        let items: Vec<(String, String)> = if let Some(typed) = word.strip_prefix('@') {
            crate::attach::complete(&self.files, typed, 8)
                .into_iter()
                .map(|f| (format!("@{f}"), String::new()))
                .collect()
        } else if start == 0 && word.starts_with('/') {
            let skills = self.skills.set.all().iter().filter(|s| s.user_invocable).map(|s| {
                let what: String = s.description.chars().take(80).collect();
                (format!("/{}", s.name), format!("skill: {what}"))
            });
            COMMANDS
                .iter()
                .map(|(name, what)| ((*name).to_owned(), (*what).to_owned()))
                .chain(skills)
                .filter(|(name, _)| name.starts_with(&word) && *name != word)
                .collect()
        } else {
            Vec::new()
        };
        let selected = match &self.completion {
            Some(old) if old.start == start => old.selected.min(items.len().saturating_sub(1)),
            _ => 0,
        };
        self.completion = (!items.is_empty()).then_some(Completion { items, selected, start });
    }

    fn insert(&mut self, c: char) {
        let at = self.byte_at(self.cursor);
        self.input.insert(at, c);
        self.cursor += 1;
    }

    /// `/NAME arguments`: the skill's instructions go to the model; the person's words show.
    fn start_skill(&mut self, typed: &str, name: &str, arguments: &str) -> Option<Command> {
        if self.setup_hint.is_some() {
            self.notice("nothing was sent: no model is set up yet (how, below)", true);
            return None;
        }
        if self.running {
            self.notice("a skill can start when this turn ends (Esc cancels it)", true);
            return None;
        }
        match crate::skills::started_by_person(&self.skills.set, name, arguments) {
            Ok(message) => {
                self.input.clear();
                self.cursor = 0;
                self.remember(typed.to_owned());
                self.unsaved_prompts.push(typed.to_owned());
                self.start_turn(typed.to_owned());
                Some(Command::Submit(message))
            }
            Err(error) => {
                self.notice(error, true);
                None
            }
        }
    }

    /// `/theme`, `/mode`, `/sandbox`: with a value, change it; without, say what is in force.
    fn setting(&mut self, setting: &str, value: Option<&str>) -> Option<Command> {
        match (setting, value) {
            ("theme", None) => {
                self.notice(
                format!(
                    "the theme is {}; /theme dark, /theme light or /theme none changes it (TOOLHOST_THEME sets it at start; NO_COLOR means none)",
                    self.theme.name()
                ),
                false,
            );
                None
            }
            ("theme", Some(name)) => {
                match name.parse::<super::theme::Theme>() {
                    Ok(theme) => {
                        self.theme = theme;
                        self.notice(format!("theme: {}", theme.name()), false);
                    }
                    Err(error) => self.notice(error, true),
                }
                None
            }
            ("mode", None) => {
                let mode = self.mode.as_str().replace('_', "-");
                self.notice(
                format!("the approval mode is {mode}; /mode manual, /mode auto-run or /mode read-only changes it (Ctrl-T cycles)"),
                false,
            );
                None
            }
            ("sandbox", None) => {
                self.notice(
                format!(
                    "commands run in the {} sandbox; /sandbox workspace-write, /sandbox read-only or /sandbox off changes it",
                    self.sandbox
                ),
                false,
            );
                None
            }
            ("mode", Some(mode)) => match crate::setup::parse_mode(mode) {
                Ok(mode) => Some(Command::SetMode(mode)),
                Err(error) => {
                    self.notice(error, true);
                    None
                }
            },
            ("sandbox", Some(mode)) => match mode.parse::<tool_core::SandboxMode>() {
                Ok(mode) => Some(Command::SetSandbox(mode)),
                Err(error) => {
                    self.notice(error.to_string(), true);
                    None
                }
            },
            _ => None,
        }
    }

    /// `/COMMAND …`, one of the app's own (the prompt is emptied; an unknown one says so).
    fn own_command(&mut self, command: &str) -> Option<Command> {
        self.input.clear();
        self.cursor = 0;
        let mut words = command.split_whitespace();
        match (words.next(), words.next()) {
            (Some("quit" | "exit"), _) => Some(Command::Quit),
            (Some("skills"), _) => {
                self.notice(self.skills.listing(), false);
                None
            }
            (Some("console"), _) => {
                self.view = View::Console;
                None
            }
            (Some("journal"), _) => {
                self.view = View::Journal;
                Some(Command::LoadJournal)
            }
            (Some("memory"), _) => {
                self.view = View::Memory;
                Some(Command::LoadMemories)
            }
            (Some("rewind"), _) if self.running => {
                self.notice("rewinding can start when this turn ends (Esc cancels it)", true);
                None
            }
            (Some("rewind"), _) => {
                self.view = View::Rewind;
                Some(Command::LoadRewind)
            }
            (Some("trust"), _) => Some(Command::Trust),
            (Some("clear" | "new"), _) if self.running => {
                self.notice("a new conversation can start when this turn ends (Esc cancels it)", true);
                None
            }
            (Some("clear" | "new"), _) => Some(Command::Clear),
            (Some("status"), _) => Some(Command::Status),
            (Some("resume"), _) if self.running => {
                self.notice("an earlier conversation can be resumed when this turn ends", true);
                None
            }
            (Some("resume"), _) => Some(Command::ListConversations),
            (Some("model"), Some(name)) if !self.running => Some(Command::SwitchModel(name.to_owned())),
            (Some("model"), None) => {
                self.notice(
                    format!(
                        "the model is {}; /model PROFILE switches to a profile of config.toml",
                        self.model
                    ),
                    false,
                );
                None
            }
            (Some("compact"), _) if !self.running && self.setup_hint.is_none() => {
                self.running = true;
                self.turn_started = Some(std::time::Instant::now());
                Some(Command::Compact)
            }
            (Some("init"), _) if !self.running && self.setup_hint.is_none() => {
                self.start_turn(INIT_PROMPT.to_owned());
                Some(Command::Submit(INIT_PROMPT.to_owned()))
            }
            (Some("help"), _) => {
                self.notice(HELP, false);
                None
            }
            (Some(setting @ ("theme" | "mode" | "sandbox")), value) => self.setting(setting, value),
            (Some(name @ ("model" | "compact" | "init")), _) => {
                let why = if self.running { "when this turn ends" } else { "once a model is set up" };
                self.notice(format!("/{name} can run {why}"), true);
                None
            }
            (Some(other), _) => {
                self.notice(format!("/{other} is not a command here: /help lists them"), true);
                None
            }
            (None, _) => {
                self.notice(HELP, false);
                None
            }
        }
    }

    /// Enter on the prompt: `!` runs a command, `/` one of the app's commands or a skill, anything
    /// else is the next message (queued while a turn runs).
    fn submit(&mut self) -> Option<Command> {
        let text = self.input.trim().to_owned();
        if text.is_empty() {
            return None;
        }
        if let Some(command) = text.strip_prefix('!') {
            return self.shell(command.trim());
        }
        if let Some(command) = text.strip_prefix('/') {
            let (name, arguments) = command.split_once(char::is_whitespace).unwrap_or((command, ""));
            let own = COMMANDS.iter().any(|(own, _)| own[1..] == *name) || matches!(name, "exit" | "new");
            if !own && self.skills.set.get(name).is_some() {
                return self.start_skill(&text, name, arguments);
            }
            return self.own_command(command);
        }
        if self.setup_hint.is_some() {
            self.notice("nothing was sent: no model is set up yet (how, below)", true);
            return None;
        }
        self.input.clear();
        self.cursor = 0;
        self.browsing = None;
        self.remember(text.clone());
        self.unsaved_prompts.push(text.clone());
        if self.running {
            // Sent when this turn ends (shown below the transcript until then).
            self.queued.push(text);
            return None;
        }
        self.start_turn(text.clone());
        Some(Command::Submit(text))
    }
}

/// The keys every page view scrolls with: ↑↓ and j/k a line, PgUp/PgDn and Space a page, Home
/// and g to the top.
fn scrolled(code: KeyCode, scroll: &mut usize) {
    match code {
        KeyCode::Down | KeyCode::Char('j') => *scroll += 1,
        KeyCode::Up | KeyCode::Char('k') => *scroll = scroll.saturating_sub(1),
        KeyCode::PageDown | KeyCode::Char(' ') => *scroll += 20,
        KeyCode::PageUp => *scroll = scroll.saturating_sub(20),
        KeyCode::Home | KeyCode::Char('g') => *scroll = 0,
        _ => {}
    }
}

/// The most of a command's output file the pager reads.
const LOG_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// A settled command's whole output, from the file its run kept (`output_path` in its state):
/// the path and the lines (colour codes out; the first 16 MiB of a larger file). Only the
/// builtin command APIs' state names a file to open: another tool's (a mounted server's) could
/// name any file.
fn whole_output(cell: &Cell) -> Option<(String, Vec<String>)> {
    let Cell::Tool(ToolCell { phase: Phase::Done(result), .. }) = cell else { return None };
    let own = result.tool.as_deref() == Some("local-system")
        && matches!(result.api.as_deref(), Some("runCommand" | "getCommandOutput"));
    if !own {
        return None;
    }
    let path = result.output.state.as_ref()?.get("output_path")?.as_str()?.to_owned();
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(std::fs::File::open(&path).ok()?, LOG_MAX_BYTES),
        &mut bytes,
    )
    .ok()?;
    let text = computer_runtime::terminal::plain(&String::from_utf8_lossy(&bytes)).into_owned();
    Some((path, text.lines().map(str::to_owned).collect()))
}

/// The first line at or after `from` (at or before it, going back) holding `find`, going round
/// the end.
fn next_match(lines: &[String], find: &str, from: usize, forward: bool) -> Option<usize> {
    if find.is_empty() {
        return None;
    }
    let from = from.min(lines.len().saturating_sub(1));
    if forward {
        (from..lines.len()).chain(0..from).find(|&i| lines[i].contains(find))
    } else {
        (0..=from).rev().chain((from + 1..lines.len()).rev()).find(|&i| lines[i].contains(find))
    }
}

/// The description a `!` command's card (and its journal row) carries.
pub const SHELL_DESCRIPTION: &str = "You ran (!)";

/// What `/init` asks the model: a first `AGENTS.md` for the folder.
pub const INIT_PROMPT: &str = "Draft an AGENTS.md for this folder: read its README, build files and layout first, then \
write AGENTS.md at the top of the folder with what an agent needs to work here — how to build, test and lint, \
the layout, the conventions to keep, and what not to touch. Keep it short and specific; do not invent what \
you did not find. If an AGENTS.md exists, propose improvements instead of overwriting it.";

/// How soon a second Ctrl-C on an empty prompt must follow the first to quit.
pub const QUIT_WINDOW: std::time::Duration = std::time::Duration::from_millis(2000);

/// How soon a second Esc (or Ctrl-C) must follow the first to clear a draft.
pub const CLEAR_WINDOW: std::time::Duration = std::time::Duration::from_millis(1500);

/// What the keys do.
pub const HELP: &str = "F2 or /console: the tool console · F3 or /journal: the journal · F4 or /memory: what the agent remembers about you · Enter sends (during a turn: queued for its end) · \
Shift-Enter or Alt-Enter new line (Ctrl-J in any terminal) · ↑↓ earlier prompts · Esc or Ctrl-C cancels the turn; twice clears the prompt; Esc twice on an empty prompt opens the rewind (or /rewind) · Ctrl-C twice on an empty prompt (or Ctrl-D, /quit) quits · \
Ctrl-U clears it · !COMMAND runs a command yourself (the model reads what it printed with your next message) · Ctrl-T approval mode · Tab selects a card · Ctrl-O folds it · Ctrl-P opens it whole (c copies, q closes) · PgUp/PgDn scroll · \
/mode manual|auto-run|read-only · /sandbox workspace-write|read-only|off · /theme dark|light|none · /trust this folder (its AGENTS.md, skills and hooks) · /skills · /NAME starts a skill · \
/init drafts an AGENTS.md · /clear a new conversation · /resume an earlier one · /compact · /model PROFILE · /status · /help · /quit";

/// How a call of a saved conversation ended, read from the result its model was given: the
/// pipeline's own words for a denial, a block and a cancel; any other error is the tool's.
/// The journal's status for a call that failed with `kind`.
fn status_of(kind: tool_core::ErrorKind) -> journal::AttemptStatus {
    match kind {
        tool_core::ErrorKind::Blocked => journal::AttemptStatus::Blocked,
        tool_core::ErrorKind::Denied => journal::AttemptStatus::Denied,
        _ => journal::AttemptStatus::Failed,
    }
}

fn settled_as(content: &str, is_error: bool) -> (Option<tool_core::ErrorKind>, journal::AttemptStatus) {
    use journal::AttemptStatus as S;
    use tool_core::ErrorKind as K;
    if !is_error {
        return (None, S::Executed);
    }
    // Every blocked text starts so (`BLOCKED_CONTENT`, "Blocked: …", "Blocked before running: …").
    if content.starts_with("Blocked") {
        (Some(K::Blocked), S::Blocked)
    } else if content.starts_with("The user denied this call")
        || content.starts_with("No one approved this call")
    {
        (Some(K::Denied), S::Denied)
    } else if content.contains("was cancelled") || content.starts_with("Cancelled") {
        (Some(K::Cancelled), S::Failed)
    } else {
        (Some(K::Execution), S::Failed)
    }
}

/// A progress list holding one call's live output, for its tool's streaming card.
pub fn live_progress(output: &str) -> Vec<Progress> {
    if output.is_empty() {
        Vec::new()
    } else {
        // As the terminal would show it: colour codes out, progress redraws settled.
        let shown = computer_runtime::terminal::plain(output).into_owned();
        vec![Progress { output: Some(shown), ..Progress::default() }]
    }
}
