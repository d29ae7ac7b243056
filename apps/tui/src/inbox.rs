//! `toolhost approvals --server URL`: a person's approver inbox in the terminal. The calls and
//! questions waiting for the key's tenant on a Toolhost server (every instance's), shown with the
//! same cards and keys as the app's own inline approvals (`y` once, `s` for the session, `a`
//! always with the prefix to edit, `n` with a reason), kept live from the server's tenant event
//! stream (`/v1/events`), answered through `POST /v1/approvals/{id}` with `"via": "terminal"`, so
//! the journal says `KEY via terminal`.
//!
//! The key comes from `--key` or `TOOLHOST_API_KEY`, else from the credential store
//! (`toolhost creds set toolhost-server`; `--key-credential` names another entry).

use std::collections::HashSet;
use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use crossterm::event::Event as TermEvent;
use futures::{Stream, StreamExt as _};
use ratatui::Terminal;
use ratatui::backend::Backend;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tool_executor::approval::ApprovalRequest;
use tool_executor::{ApprovalMode, Decision};

use crate::ui::state::{App, Command};

/// `toolhost approvals`.
#[derive(Debug, clap::Args)]
pub struct InboxArgs {
    /// The server's base URL (`https://toolhost.example.com`).
    #[arg(long, env = "TOOLHOST_SERVER")]
    pub server: String,
    /// A person or approver key (prefer `TOOLHOST_API_KEY`, or the credential store: a flag shows
    /// in the process list).
    #[arg(long, env = "TOOLHOST_API_KEY", hide_env_values = true)]
    pub key: Option<String>,
    /// The credential store's entry that holds the key when none is given.
    #[arg(long, default_value = "toolhost-server")]
    pub key_credential: String,
}

/// The server, as the inbox speaks to it.
#[derive(Debug, Clone)]
pub struct Server {
    base: String,
    key: Option<String>,
    client: reqwest::Client,
}

/// What the event stream says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// The stream is open (again): what waits may have changed while it was away.
    Open,
    /// Something that changes what waits (a call asked, decided, ended).
    Changed,
    /// The stream broke; it is tried again.
    Lost(String),
}

impl Server {
    /// A server at `base` (no trailing `/` needed), spoken to with `key`.
    ///
    /// # Errors
    ///
    /// An address that is not `http://` or `https://`.
    pub fn new(base: &str, key: Option<String>) -> anyhow::Result<Self> {
        let base = base.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            anyhow::bail!("--server {base}: an http:// or https:// address");
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .context("making the HTTP client")?;
        Ok(Self { base, key, client })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.client.request(method, format!("{}{path}", self.base));
        match &self.key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// What waits for a person of the key's tenant, oldest first.
    ///
    /// # Errors
    ///
    /// The server could not be reached, or refused (with its message).
    pub async fn waiting(&self) -> anyhow::Result<Vec<ApprovalRequest>> {
        let response = self
            .request(reqwest::Method::GET, "/v1/approvals")
            .timeout(Duration::from_secs(15))
            .send()
            .await
            .with_context(|| format!("reaching {}", self.base))?;
        let rows: Vec<Value> = refusal(response).await?.json().await.context("reading the approvals")?;
        Ok(rows.iter().filter_map(request_of).collect())
    }

    /// Sends a decision; the server's outcome (`delivered`, `forwarded`).
    ///
    /// # Errors
    ///
    /// The server refused it (decided already, a key that may not decide…) or was not reached.
    pub async fn decide(&self, approval_id: &str, decision: &Decision) -> anyhow::Result<String> {
        let response = self
            .request(reqwest::Method::POST, &format!("/v1/approvals/{approval_id}"))
            .json(&json!({"decision": decision, "via": "terminal"}))
            .timeout(Duration::from_secs(15))
            .send()
            .await
            .with_context(|| format!("reaching {}", self.base))?;
        let outcome: Value = refusal(response).await?.json().await.unwrap_or(Value::Null);
        Ok(outcome["outcome"].as_str().unwrap_or("delivered").to_owned())
    }

    /// Listens to the tenant's events until `heard` closes, telling it what changes what waits;
    /// a broken stream is opened again after a pause that grows to 10 s.
    pub fn watch(&self, heard: mpsc::UnboundedSender<Heard>) {
        let server = self.clone();
        tokio::spawn(async move {
            let mut pause = Duration::from_millis(500);
            loop {
                let outcome = server.listen(&heard).await;
                let reason = match outcome {
                    Ok(()) => "the server ended the stream".to_owned(),
                    Err(error) => format!("{error:#}"),
                };
                if heard.send(Heard::Lost(reason)).is_err() {
                    return;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(10));
            }
        });
    }

    async fn listen(&self, heard: &mpsc::UnboundedSender<Heard>) -> anyhow::Result<()> {
        let response = self
            .request(reqwest::Method::GET, "/v1/events")
            .header("accept", "text/event-stream")
            .send()
            .await
            .with_context(|| format!("reaching {}", self.base))?;
        let mut response = refusal(response).await?;
        if heard.send(Heard::Open).is_err() {
            return Ok(());
        }
        let mut buffer = String::new();
        // Keep-alives come every 15 s; a silent minute is a dead connection.
        while let Some(chunk) = tokio::time::timeout(Duration::from_secs(60), response.chunk())
            .await
            .context("the event stream went silent")??
        {
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buffer.find("\n\n") {
                let event: String = buffer.drain(..end + 2).collect();
                let kind = event.lines().find_map(|line| line.strip_prefix("event:")).map(str::trim);
                let changes = matches!(
                    kind,
                    Some(
                        "permission.requested"
                            | "permission.granted"
                            | "permission.denied"
                            | "question.asked"
                            | "question.settled"
                            | "call.finished"
                            | "call.failed"
                            | "call.blocked"
                    )
                );
                if changes && heard.send(Heard::Changed).is_err() {
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}

/// A response that is not a success, as an error with the server's message.
async fn refusal(response: reqwest::Response) -> anyhow::Result<reqwest::Response> {
    if response.status().is_success() {
        return Ok(response);
    }
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    let message = body["error"]["message"].as_str().unwrap_or("no reason given");
    anyhow::bail!("{status}: {message}")
}

/// An approval as `GET /v1/approvals` lists it, as the pipeline's request.
fn request_of(row: &Value) -> Option<ApprovalRequest> {
    let text = |key: &str| row.get(key).and_then(Value::as_str).map(str::to_owned);
    Some(ApprovalRequest {
        id: text("id")?,
        tenant: text("tenant").unwrap_or_default(),
        session_id: text("session_id").unwrap_or_default(),
        call_id: text("call_id").unwrap_or_default(),
        tool: text("tool")?,
        api: text("api")?,
        arguments: row.get("arguments").cloned().unwrap_or(Value::Null),
        reason: text("reason").unwrap_or_default(),
        question: row.get("question").and_then(|q| serde_json::from_value(q.clone()).ok()),
        scope: text("scope"),
    })
}

/// The key: the flag or variable, else the credential store's entry.
///
/// # Errors
///
/// Neither holds one.
pub fn key(args: &InboxArgs) -> anyhow::Result<String> {
    if let Some(key) = args.key.clone().filter(|k| !k.trim().is_empty()) {
        return Ok(key);
    }
    let credentials = crate::creds::load()?;
    credentials.get(&args.key_credential).map(|secret| secret.expose().to_owned()).with_context(|| {
        format!("no key: set TOOLHOST_API_KEY, or store it with `toolhost creds set {}`", args.key_credential)
    })
}

/// An app state for the inbox: no agent, the server in the status line.
pub fn app(server: &str) -> App {
    let mut app = App::new("approver inbox", server, ApprovalMode::Manual, "");
    app.status = Some(format!("approver inbox · {server} · connecting"));
    app.theme = crate::ui::theme::Theme::detect(crate::setup::configured_theme().as_deref(), None);
    app
}

/// What a reconcile did, for the notices.
fn reconcile(app: &mut App, waiting: Vec<ApprovalRequest>, answered: &HashSet<String>) -> (usize, usize) {
    let listed: HashSet<String> = waiting.iter().map(|r| r.id.clone()).collect();
    let shown: Vec<String> = app.approvals.iter().map(|p| p.request.id.clone()).collect();
    let mut gone = 0;
    for id in shown.iter().filter(|id| !listed.contains(*id)) {
        app.withdraw(id);
        gone += 1;
    }
    let mut added = 0;
    for request in waiting {
        if !shown.contains(&request.id) && !answered.contains(&request.id) {
            let what = match &request.question {
                Some(_) => "a question".to_owned(),
                None => format!("{}/{}", request.tool, request.api),
            };
            app.notice(
                format!("{what} asked in session {} (call {})", request.session_id, request.call_id),
                false,
            );
            app.ask(request);
            added += 1;
        }
    }
    (added, gone)
}

enum Done {
    Listed(anyhow::Result<Vec<ApprovalRequest>>),
    Decided(String, String, anyhow::Result<String>),
}

/// The inbox's loop: keys answer the first waiting item; the event stream and the answers keep
/// the list as the server has it. Ends on Ctrl-C (or Ctrl-D on an empty prompt).
///
/// # Errors
///
/// A terminal that cannot be drawn on.
pub async fn run<B, K>(
    terminal: &mut Terminal<B>,
    mut keys: K,
    server: Server,
    mut app: App,
) -> anyhow::Result<App>
where
    B: Backend + Write,
    B::Error: Send + Sync + 'static,
    K: Stream<Item = std::io::Result<TermEvent>> + Unpin,
{
    let (heard_sender, mut heard) = mpsc::unbounded_channel();
    server.watch(heard_sender);
    let (done_sender, mut done) = mpsc::unbounded_channel::<Done>();
    let base = server.base.clone();
    // Answered here and not yet gone from the server's list: not shown again meanwhile.
    let mut answered: HashSet<String> = HashSet::new();
    let mut listing;
    let mut list_again = false;
    let mut first_list = true;
    let list = |server: &Server, done: &mpsc::UnboundedSender<Done>| {
        let (server, done) = (server.clone(), done.clone());
        tokio::spawn(async move {
            let _ = done.send(Done::Listed(server.waiting().await));
        });
    };
    list(&server, &done_sender);
    listing = true;
    let mut dirty = true;
    let mut last_frame = Instant::now() - crate::ui::run::FRAME;
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        if dirty && last_frame.elapsed() >= crate::ui::run::FRAME {
            terminal.draw(|frame| crate::ui::view::render(&app, frame))?;
            last_frame = Instant::now();
            dirty = false;
        }
        tokio::select! {
            biased;
            key = keys.next() => {
                match key {
                    Some(Ok(TermEvent::Key(key))) => match app.on_key(key) {
                        Some(Command::Quit) => break,
                        Some(Command::Decide { approval_id, decision }) => {
                            answered.insert(approval_id.clone());
                            let (server, done) = (server.clone(), done_sender.clone());
                            tokio::spawn(async move {
                                let outcome = server.decide(&approval_id, &decision).await;
                                let _ = done.send(Done::Decided(approval_id, decision.name().to_owned(), outcome));
                            });
                        }
                        Some(Command::Submit(_)) => {
                            app.notice("this inbox answers approvals: there is no agent here to send to", true);
                        }
                        _ => {}
                    },
                    Some(Ok(_)) => {}
                    Some(Err(error)) => return Err(error).context("reading keys"),
                    None => break,
                }
                // A key is drawn at once.
                last_frame = Instant::now() - crate::ui::run::FRAME;
                dirty = true;
            }
            Some(event) = heard.recv() => {
                match event {
                    Heard::Open => {
                        app.status = Some(format!("approver inbox · {base} · live"));
                        list_again = true;
                    }
                    Heard::Lost(reason) => {
                        app.status = Some(format!("approver inbox · {base} · reconnecting ({reason})"));
                    }
                    Heard::Changed => list_again = true,
                }
                dirty = true;
            }
            Some(finished) = done.recv() => {
                if matches!(finished, Done::Listed(_)) {
                    listing = false;
                }
                match finished {
                    Done::Listed(Ok(waiting)) => {
                        let ids: HashSet<String> = waiting.iter().map(|r| r.id.clone()).collect();
                        answered.retain(|id| ids.contains(id));
                        let count = waiting.len();
                        let (_, gone) = reconcile(&mut app, waiting, &answered);
                        if first_list {
                            first_list = false;
                            app.notice(format!("{count} waiting for a person at {base}"), false);
                        } else if gone > 0 {
                            app.notice(format!("{gone} decided elsewhere or ended"), false);
                        }
                    }
                    Done::Listed(Err(error)) => app.notice(format!("listing what waits: {error:#}"), true),
                    Done::Decided(_, name, Ok(outcome)) => {
                        app.notice(format!("{name}: {outcome} to the call"), false);
                    }
                    Done::Decided(id, name, Err(error)) => {
                        answered.remove(&id);
                        app.notice(format!("{name} was not taken: {error:#}"), true);
                        list_again = true;
                    }
                }
                dirty = true;
            }
            _ = tick.tick() => dirty = !app.approvals.is_empty() || dirty,
        }
        // One listing at a time; a change heard meanwhile lists again when it ends.
        if !listing && list_again {
            list(&server, &done_sender);
            listing = true;
            list_again = false;
        }
    }
    Ok(app)
}

/// `toolhost approvals` without a terminal: one line a waiting item (`ID  tool/api  reason`).
///
/// # Errors
///
/// No key, a bad address, a server that refuses.
pub async fn list(args: InboxArgs) -> anyhow::Result<u8> {
    let server = Server::new(&args.server, Some(key(&args)?))?;
    for request in server.waiting().await? {
        let what = match &request.question {
            Some(question) => format!("question: {}", question.question),
            None => request.reason.clone(),
        };
        crate::out::line(format_args!("{}\t{}/{}\t{what}", request.id, request.tool, request.api))?;
    }
    Ok(0)
}

/// Runs `toolhost approvals` on this terminal.
///
/// # Errors
///
/// No key, a bad address, a terminal that cannot be drawn on.
pub async fn screen(args: InboxArgs) -> anyhow::Result<u8> {
    let key = key(&args)?;
    let server = Server::new(&args.server, Some(key))?;
    // A key the server refuses (or a server not there) is said before the screen opens.
    server.waiting().await?;
    let mut terminal = ratatui::try_init()?;
    let _ = crossterm::execute!(std::io::stdout(), crossterm::event::EnableBracketedPaste);
    let keys = crossterm::event::EventStream::new();
    let app = app(&server.base);
    let result = run(&mut terminal, keys, server, app).await;
    let _ = crossterm::execute!(std::io::stdout(), crossterm::event::DisableBracketedPaste);
    ratatui::try_restore()?;
    let app = result?;
    for cell in &app.cells {
        println!("{}", crate::ui::view::cell_text(cell));
    }
    Ok(0)
}
