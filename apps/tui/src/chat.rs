//! `toolhost`: a conversation with the agent in this folder, in the terminal's own scrollback
//! (plain lines: the terminal keeps the history, and copied text has no hard wraps). Questions are
//! asked inline; Ctrl-C cancels the turn; `/mode` and `/sandbox` change the guards from the prompt.
//! The transcript is saved after every turn; `--resume` continues the last one of this folder.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent::{Agent, Message};
use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tool_executor::{ApprovalMode, Executor};

use crate::ask::{self, TerminalBroker};
use crate::exec::Printer;
use crate::setup::{self, GuardArgs, ModelArgs};

/// The arguments of the conversation mode.
#[derive(Debug, Clone, clap::Args)]
pub struct ChatArgs {
    /// Continue the last conversation in this folder.
    #[arg(long)]
    pub resume: bool,
    /// Plain lines instead of the full screen (the default when stdin or stdout is not a
    /// terminal).
    #[arg(long)]
    pub plain: bool,
    /// `manual` (ask as policy says), `auto-run` (ask only for what policy always asks about),
    /// `read-only` or `allow-list`. Default: manual, or with `--resume` the mode the
    /// conversation was left in.
    #[arg(long = "approval-mode", value_parser = setup::parse_mode)]
    pub mode: Option<ApprovalMode>,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub guard: GuardArgs,
}

/// A saved conversation.
#[derive(Debug, Serialize, Deserialize)]
pub struct Transcript {
    /// The session it ran in.
    pub session_id: String,
    /// The folder.
    pub folder: PathBuf,
    /// The model.
    pub model: String,
    /// The approval mode it was in when saved (older transcripts have none: the mode stays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ApprovalMode>,
    /// The conversation.
    pub messages: Vec<Message>,
}

fn transcripts_dir(data: &Path, folder: &Path) -> PathBuf {
    data.join("sessions").join(setup::folder_key(folder))
}

/// Prompts kept per folder for ↑ in the prompt.
const PROMPTS_KEPT: usize = 500;

fn prompts_file(data: &Path, folder: &Path) -> PathBuf {
    data.join("prompts").join(format!("{}.jsonl", setup::folder_key(folder)))
}

/// The prompts sent in `folder` before, oldest first (the newest [`PROMPTS_KEPT`]); none when
/// there is no history yet or it cannot be read.
pub fn load_prompts(data: &Path, folder: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(prompts_file(data, folder)) else { return Vec::new() };
    let prompts: Vec<String> = text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
    prompts[prompts.len().saturating_sub(PROMPTS_KEPT)..].to_vec()
}

/// Adds prompts to `folder`'s history, one JSON string a line (a prompt may hold new lines);
/// past twice [`PROMPTS_KEPT`] lines the file is cut to the newest.
///
/// # Errors
///
/// The file cannot be written.
pub fn save_prompts(data: &Path, folder: &Path, prompts: &[String]) -> anyhow::Result<()> {
    use std::io::Write as _;
    let path = prompts_file(data, folder);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
    for prompt in prompts {
        writeln!(file, "{}", serde_json::to_string(prompt)?)?;
    }
    drop(file);
    let lines = std::fs::read_to_string(&path)?.lines().count();
    if lines > 2 * PROMPTS_KEPT {
        let kept = load_prompts(data, folder);
        let text: String =
            kept.iter().filter_map(|p| serde_json::to_string(p).ok()).map(|l| l + "\n").collect();
        let partial = path.with_extension("jsonl.partial");
        std::fs::write(&partial, text)?;
        std::fs::rename(&partial, &path)?;
    }
    Ok(())
}

/// Saves a transcript (atomically: a crash leaves the previous one).
///
/// # Errors
///
/// The file cannot be written.
pub fn save(data: &Path, transcript: &Transcript) -> anyhow::Result<()> {
    let dir = transcripts_dir(data, &transcript.folder);
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{}.json", transcript.session_id));
    let partial = path.with_extension("json.partial");
    std::fs::write(&partial, serde_json::to_vec(transcript)?)?;
    std::fs::rename(&partial, &path)?;
    Ok(())
}

/// One saved conversation of a folder, as the `/resume` picker lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saved {
    /// Its session id (the file's name).
    pub session_id: String,
    /// When it was last saved (Unix milliseconds).
    pub saved_at: i64,
    /// The person's first request, on one line.
    pub first: String,
    /// How many messages it holds.
    pub messages: usize,
}

/// The saved conversations of `folder`, newest first (unreadable files left out).
pub fn conversations(data: &Path, folder: &Path) -> Vec<Saved> {
    let Ok(entries) = std::fs::read_dir(transcripts_dir(data, folder)) else { return Vec::new() };
    let mut out: Vec<Saved> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|entry| {
            let modified = entry.metadata().ok()?.modified().ok()?;
            let saved_at = modified.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis();
            let transcript: Transcript = serde_json::from_slice(&std::fs::read(entry.path()).ok()?).ok()?;
            let first = transcript
                .messages
                .iter()
                .find_map(|m| match m {
                    Message::User { content } => Some(content.lines().next().unwrap_or_default().to_owned()),
                    _ => None,
                })
                .unwrap_or_default();
            Some(Saved {
                session_id: transcript.session_id,
                saved_at: i64::try_from(saved_at).unwrap_or(i64::MAX),
                first,
                messages: transcript.messages.len(),
            })
        })
        .collect();
    out.sort_by_key(|b| std::cmp::Reverse(b.saved_at));
    out
}

/// The saved conversation `session_id` of `folder`.
///
/// # Errors
///
/// No such conversation, or it cannot be read.
pub fn load(data: &Path, folder: &Path, session_id: &str) -> anyhow::Result<Transcript> {
    // A session id names a file only as this app wrote it.
    anyhow::ensure!(
        !session_id.is_empty()
            && session_id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
        "`{session_id}` is not a conversation of this folder"
    );
    let path = transcripts_dir(data, folder).join(format!("{session_id}.json"));
    let text = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&text).with_context(|| format!("reading {}", path.display()))
}

/// The newest saved transcript of `folder`.
///
/// # Errors
///
/// A transcript that cannot be read.
pub fn last(data: &Path, folder: &Path) -> anyhow::Result<Option<Transcript>> {
    let Ok(entries) = std::fs::read_dir(transcripts_dir(data, folder)) else {
        return Ok(None);
    };
    let newest = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max();
    let Some((_, path)) = newest else { return Ok(None) };
    let text = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(Some(serde_json::from_slice(&text).with_context(|| format!("reading {}", path.display()))?))
}

/// The mode a conversation runs in: the one asked for on the command line, else the one a resumed
/// conversation was left in, else manual.
fn resumed_mode(asked: Option<ApprovalMode>, resumed: Option<&Transcript>) -> ApprovalMode {
    asked.or_else(|| resumed.and_then(|t| t.mode)).unwrap_or(ApprovalMode::Manual)
}

struct Chat {
    executor: Executor,
    profile: agent::ModelProfile,
    folder: PathBuf,
    data: PathBuf,
    guard: GuardArgs,
    mode: ApprovalMode,
    session_id: String,
    /// The instructions section of the system prompt.
    instructions: String,
    /// What `SessionStart` hooks said for the model when the session started.
    hook_prompt: String,
}

impl Chat {
    /// One turn of the plain conversation: printed as it happens, cancelled by Ctrl-C (through
    /// `running`), then the transcript saved.
    async fn turn(
        &self,
        agent: &mut Agent,
        running: &std::sync::Mutex<Option<CancellationToken>>,
        text: &str,
    ) -> anyhow::Result<()> {
        let cancel = CancellationToken::new();
        *running.lock().unwrap_or_else(|p| p.into_inner()) = Some(cancel.clone());
        let (events, mut received) = mpsc::unbounded_channel();
        let printer = tokio::spawn(async move {
            let mut out = Printer::new(false);
            while let Some(event) = received.recv().await {
                out.event(&event);
            }
            out
        });
        let outcome = agent.run(text, &events, &cancel).await;
        running.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(events);
        printer.await?.outcome(&outcome, agent.usage());
        let transcript = Transcript {
            session_id: self.session_id.clone(),
            folder: self.folder.clone(),
            model: self.profile.model.clone(),
            mode: Some(self.mode),
            messages: agent.messages().to_vec(),
        };
        if let Err(error) = save(&self.data, &transcript) {
            eprintln!("(the transcript could not be saved: {error:#})");
        }
        Ok(())
    }

    fn agent(&self, history: Vec<Message>) -> anyhow::Result<Agent> {
        let session = setup::session(
            &self.executor,
            self.session_id.clone(),
            &self.folder,
            self.mode,
            false,
            &self.guard,
        );
        let config = self.profile.agent_config();
        Ok(Agent::new(self.profile.client()?, self.executor.clone(), session, config)
            .with_instructions(&self.instructions)
            .with_instructions(&self.hook_prompt)
            .with_hooks(self.guard.hooks.clone())
            .with_history(history))
    }

    fn status(&self) -> String {
        format!(
            "{} ({}) in {} · approvals {} · sandbox {}",
            self.profile.model,
            self.profile.name,
            self.folder.display(),
            self.mode.as_str().replace('_', "-"),
            self.guard.sandbox().describe()
        )
    }
}

/// Runs the conversation until end of input or `/quit`.
///
/// # Errors
///
/// Setup failures (no model, no journal).
pub async fn run(args: ChatArgs) -> anyhow::Result<u8> {
    let profile = match setup::model(&args.model) {
        Ok(profile) => profile,
        Err(error) => {
            eprintln!("{error:#}");
            eprintln!(
                "Meanwhile `toolhost tools` lists the tools, and `toolhost journal` what they did here."
            );
            return Ok(crate::exec::code::FAILED);
        }
    };
    let folder = args.guard.folder()?;
    let data = setup::data_dir()?;
    let lines = ask::stdin_lines();
    let mut args = args;
    args.guard.sub_agents = Some(setup::sub_agents(&profile));
    let executor = setup::executor(Arc::new(TerminalBroker::new(lines.clone())), &args.guard).await?;
    let resumed = if args.resume { last(&data, &folder)? } else { None };
    let mode = resumed_mode(args.mode, resumed.as_ref());
    let (session_id, history) = resumed_or_new(resumed, args.resume, &folder, mode);
    let instructions = crate::instructions::for_folder(executor.journal().map(AsRef::as_ref), &folder).await;
    for (text, _) in instructions.describe() {
        eprintln!("({})", text.replace("/trust uses", "the full screen's /trust uses"));
    }
    let mut guard = args.guard;
    let skills = setup::find_skills(&mut guard, &executor, &folder, Some(profile.context_window)).await;
    for (text, _) in skills.describe() {
        eprintln!("({})", text.replace("/trust uses", "the full screen's /trust uses"));
    }
    for (text, _) in setup::find_hooks(&mut guard, &executor, &folder).await {
        eprintln!("({})", text.replace("(/trust)", "(the full screen's /trust)"));
    }
    let mut chat = Chat {
        executor,
        profile,
        folder,
        data,
        guard,
        mode,
        session_id,
        instructions: instructions.prompt,
        hook_prompt: String::new(),
    };
    let source = if history.is_empty() { "startup" } else { "resume" };
    let mut agent = chat.agent(history)?;
    let (hook_prompt, notes) = agent.start_hooks(source).await;
    chat.hook_prompt = hook_prompt;
    for (hook, message) in notes {
        eprintln!("({hook}: {message})");
    }
    // Ctrl-C cancels the running turn; at the prompt it quits.
    let running: Arc<std::sync::Mutex<Option<CancellationToken>>> = Arc::default();
    let turn = running.clone();
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            match turn.lock().unwrap_or_else(|p| p.into_inner()).take() {
                Some(cancel) => cancel.cancel(),
                None => std::process::exit(i32::from(crate::exec::code::CANCELLED)),
            }
        }
    });
    eprintln!("toolhost · {}", chat.status());
    eprintln!("Ctrl-C cancels a turn · /mode MODE · /sandbox MODE · /status · /skills · /quit");
    loop {
        eprint!("› ");
        let Some(line) = lines.lock().await.recv().await else { break };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        // `/NAME arguments` starts a skill: the model is sent its instructions.
        let mut started = None;
        if let Some(command) = line.strip_prefix('/') {
            let (name, arguments) = command.split_once(char::is_whitespace).unwrap_or((command, ""));
            // The app's own commands come first.
            let own = ["quit", "exit", "skills", "status", "mode", "sandbox"].contains(&name);
            if !own && chat.guard.skills.get(name).is_some() {
                match crate::skills::started_by_person(&chat.guard.skills, name, arguments) {
                    Ok(message) => started = Some(message),
                    Err(error) => {
                        eprintln!("{error}");
                        continue;
                    }
                }
            }
        }
        if let Some(command) = line.strip_prefix('/').filter(|_| started.is_none()) {
            let mut words = command.split_whitespace();
            match (words.next(), words.next()) {
                (Some("quit" | "exit"), _) => break,
                (Some("skills"), _) => eprintln!("{}", skills.listing()),
                (Some("status"), _) => eprintln!("{}", chat.status()),
                (Some("mode"), Some(mode)) => match setup::parse_mode(mode) {
                    Ok(mode) => {
                        chat.mode = mode;
                        agent = chat.agent(agent.messages().to_vec())?;
                        eprintln!("approvals: {}", mode.as_str().replace('_', "-"));
                    }
                    Err(error) => eprintln!("{error}"),
                },
                (Some("sandbox"), Some(mode)) => match mode.parse::<tool_core::SandboxMode>() {
                    Ok(mode) => {
                        chat.guard.sandbox = mode;
                        agent = chat.agent(agent.messages().to_vec())?;
                        eprintln!("sandbox: {}", chat.guard.sandbox().describe());
                    }
                    Err(error) => eprintln!("{error}"),
                },
                _ => eprintln!(
                    "commands: /mode manual|auto-run|read-only|allow-list · /sandbox workspace-write|read-only|off · /status · /skills · /SKILL [arguments] · /quit"
                ),
            }
            continue;
        }
        chat.turn(&mut agent, &running, started.as_deref().unwrap_or(line)).await?;
    }
    Ok(0)
}

/// The conversation `--resume` found (said on stderr with the mode it goes on in), else a new
/// one.
fn resumed_or_new(
    resumed: Option<Transcript>,
    asked: bool,
    folder: &Path,
    mode: ApprovalMode,
) -> (String, Vec<Message>) {
    match resumed {
        Some(transcript) => {
            eprintln!(
                "(resuming {} messages of {}; approvals {})",
                transcript.messages.len(),
                transcript.session_id,
                mode.as_str().replace('_', "-")
            );
            (transcript.session_id, transcript.messages)
        }
        None => {
            if asked {
                eprintln!("(no earlier conversation in {} to resume: this is a new one)", folder.display());
            }
            (setup::new_session_id(folder), Vec::new())
        }
    }
}

/// The full-screen conversation: the alternate screen while it runs, then the transcript printed
/// to the terminal's own scrollback as plain text (so the history survives, unwrapped).
///
/// # Errors
///
/// Setup failures, or a terminal that cannot be drawn on.
pub async fn screen(args: ChatArgs) -> anyhow::Result<u8> {
    use crate::ui;
    let folder = args.guard.folder()?;
    let data = setup::data_dir()?;
    let (profile, setup_hint) = match setup::model(&args.model) {
        Ok(profile) => (Some(profile), None),
        Err(error) => (None, Some(format!("{error:#}"))),
    };
    let (broker, questions) = ui::broker::ScreenBroker::new();
    let mut args = args;
    args.guard.sub_agents = profile.as_ref().map(setup::sub_agents);
    let (executor, records) = setup::executor_and_records(Arc::new(broker), &args.guard).await?;
    let resumed = if args.resume { last(&data, &folder)? } else { None };
    let nothing_to_resume = args.resume && resumed.is_none();
    let mode = resumed_mode(args.mode, resumed.as_ref());
    let (session_id, history) = match resumed {
        Some(transcript) => (transcript.session_id, transcript.messages),
        None => (setup::new_session_id(&folder), Vec::new()),
    };
    let mut terminal = ratatui::try_init()?;
    // The colours: as chosen, else for the background the terminal says it has (asked before
    // anything else reads the keyboard).
    let configured = setup::configured_theme();
    let theme = ui::theme::Theme::chosen(configured.as_deref()).unwrap_or_else(|| {
        ui::theme::Theme::detect(None, ui::theme::query_background(std::time::Duration::from_millis(300)))
    });
    let _ = crossterm::execute!(std::io::stdout(), crossterm::event::EnableBracketedPaste);
    // Where the terminal speaks the keyboard protocol, Shift-Enter is told apart from Enter.
    let shift_enter = crossterm::terminal::supports_keyboard_enhancement().unwrap_or(false)
        && crossterm::execute!(
            std::io::stdout(),
            crossterm::event::PushKeyboardEnhancementFlags(
                crossterm::event::KeyboardEnhancementFlags::DISAMBIGUATE_ESCAPE_CODES
            )
        )
        .is_ok();
    let instructions = crate::instructions::for_folder(executor.journal().map(AsRef::as_ref), &folder).await;
    let notes = if nothing_to_resume {
        vec![(format!("no earlier conversation in {} to resume: this is a new one", folder.display()), true)]
    } else {
        Vec::new()
    };
    let mut guard = args.guard;
    let window = profile.as_ref().map(|p| p.context_window);
    let skills = setup::find_skills(&mut guard, &executor, &folder, window).await;
    let mut notes = notes;
    if let Some(unknown) = configured.filter(|t| t.parse::<ui::theme::Theme>().is_err()) {
        notes.push((
            format!("config.toml: theme = \"{unknown}\" is not dark, light or none; it is ignored"),
            true,
        ));
    }
    notes.extend(setup::find_hooks(&mut guard, &executor, &folder).await);
    let context = ui::run::Context {
        notes,
        instructions,
        skills,
        executor,
        records: Some(records),
        profile,
        folder,
        data: Some(data),
        guard,
        mode,
        session_id,
        history,
        setup_hint,
        shift_enter,
        theme,
    };
    // Without bracketed paste, a paste arrives as keys: those arriving together are one paste.
    let keys = ui::paste::PasteBursts::new(crossterm::event::EventStream::new());
    let result = ui::run::run(&mut terminal, keys, context, questions).await;
    if shift_enter {
        let _ = crossterm::execute!(std::io::stdout(), crossterm::event::PopKeyboardEnhancementFlags);
    }
    let _ = crossterm::execute!(std::io::stdout(), crossterm::event::DisableBracketedPaste);
    ratatui::try_restore()?;
    let app = result?;
    // The conversation stays in the terminal's scrollback, as text a person can copy.
    for cell in &app.cells {
        println!("{}", ui::view::cell_text(cell));
    }
    Ok(0)
}
