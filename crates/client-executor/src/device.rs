//! The device: connects to a server, registers, runs what it is sent through its own pipeline,
//! answers each request exactly once, and reconnects when the connection drops.
//!
//! Results go to an outbox that outlives connections: a result finished while the device was
//! disconnected is sent on the next connection, and a request the server sends again after a
//! reconnect is answered from the results already kept (or not at all while it still runs), so a
//! call never runs twice.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_util::sync::CancellationToken;
use tool_core::{ErrorKind, ToolOutput};
use tool_executor::{
    ApprovalBroker, ApprovalMode, Batch, Decided, Decision, Event, Executor, RawCall, Session, SessionConfig,
    SessionPolicy, Toolbox,
};

use crate::protocol::{DEVICE_ALARM_MARGIN, DeviceMessage, ExecuteRequest, ServerMessage};

/// A connection that brings nothing (the server pings every 15 s) for this long is taken as dead.
const SILENT_FOR: Duration = Duration::from_secs(45);

/// How long finished results are kept to answer a repeated request: longer than the longest
/// deadline a server gives (800 s) plus its reaping margin, so a request is never run twice.
const KEEP_RESULTS: Duration = Duration::from_secs(900);

/// How a device connects.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// The server's WebSocket URL (`ws://host:port/v1/devices/connect`); an `http(s)://` base URL
    /// is turned into it.
    pub url: String,
    /// The bearer key of the tenant, when the server requires one.
    pub api_key: Option<String>,
    /// This device's id within its tenant.
    pub device_id: String,
    /// The tools it offers; `None` offers every tool of its toolbox.
    pub tools: Option<Vec<String>>,
    /// Only read-tier calls run here; write and exec calls are blocked on the device.
    pub read_only: bool,
    /// How this device decides (default `auto_run`: what the server approved runs unless the
    /// device's own audits flag it — a path outside its folder, a dangerous command — which is
    /// then blocked, since no one is at the device to ask).
    pub approval_mode: ApprovalMode,
    /// The folder calls run in here; the server cannot move it. `None` takes the session's.
    pub working_directory: Option<PathBuf>,
    /// The sandbox this device runs commands in: its own choice, never the server's (default:
    /// `workspace-write` with the network on, as on a person's own machine).
    pub sandbox: tool_core::SandboxPolicy,
    /// Wait between reconnection attempts.
    pub reconnect_delay: Duration,
    /// A person at this device answers what its own policy asks about (through the executor's
    /// broker). Without one (the default) whatever would ask is blocked.
    pub person_present: bool,
    /// What the device's front end adds to each session it opens for the server's calls (its
    /// person's hooks, checkpoints of its files).
    pub session_setup: Option<SessionSetup>,
}

/// A front end's setup of each device session (hooks, checkpoints…).
#[derive(Clone)]
pub struct SessionSetup(pub Arc<SetupFn>);

/// What a [`SessionSetup`] runs on each new device session.
pub type SetupFn = dyn Fn(&Arc<Session>) + Send + Sync;

impl std::fmt::Debug for SessionSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionSetup")
    }
}

impl DeviceConfig {
    /// A config for `url` with the defaults.
    pub fn new(url: impl Into<String>, device_id: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            api_key: None,
            device_id: device_id.into(),
            tools: None,
            read_only: false,
            approval_mode: ApprovalMode::AutoRun,
            working_directory: None,
            sandbox: tool_core::SandboxPolicy::workspace_write().with_network(tool_core::NetworkAccess::On),
            reconnect_delay: Duration::from_millis(500),
            person_present: false,
            session_setup: None,
        }
    }

    /// The WebSocket URL to dial.
    pub fn websocket_url(&self) -> String {
        let url = self.url.trim_end_matches('/');
        let url = if let Some(rest) = url.strip_prefix("http://") {
            format!("ws://{rest}")
        } else if let Some(rest) = url.strip_prefix("https://") {
            format!("wss://{rest}")
        } else {
            url.to_owned()
        };
        if url.ends_with(crate::protocol::DEVICE_PATH) {
            url
        } else {
            format!("{url}{}", crate::protocol::DEVICE_PATH)
        }
    }
}

/// Why the device stopped.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The server refused the connection or the registration (a bad key, an unknown tool…).
    #[error("the server refused this device: {0}")]
    Refused(String),
    /// The URL or a header could not be used.
    #[error("cannot connect to {url}: {source}")]
    Connect {
        /// The URL.
        url: String,
        /// Why.
        source: Box<tungstenite::Error>,
    },
}

/// The server's approval is necessary, not sufficient: a device decides for its own machine. Its
/// own pipeline audits paths on its own disk against its own folder, runs the shell audit, applies
/// its own mode, and whatever it would have to ask about is blocked — this device has no person to
/// ask (a front end with a person gives its own broker instead). This broker is the last guard
/// should a question reach it anyway: it denies.
#[derive(Debug, Default)]
pub struct NoOneToAsk;

#[async_trait]
impl ApprovalBroker for NoOneToAsk {
    async fn wait(
        &self,
        _request: &tool_executor::approval::ApprovalRequest,
        _cancel: &CancellationToken,
        _timeout: Duration,
    ) -> Option<Decided> {
        Some(Decided {
            decision: Decision::DenyWithMessage {
                message:
                    "the device's own policy needs a person to approve this, and no one is at the device"
                        .into(),
            },
            by: Some(tool_executor::approval::NO_ONE.into()),
        })
    }
}

/// The builtin tools over this machine's files and processes, with their audits.
///
/// # Errors
///
/// A tool's manifest the toolbox refuses (a builtin whose service is missing is left out).
pub fn builtin_toolbox() -> Result<Toolbox, String> {
    builtin_toolbox_with(tool_core::Services::new())
}

/// [`builtin_toolbox`], with services for the tools that keep data (a record store for memory
/// and documents, a knowledge store for knowledge bases): a front end with a journal of its own
/// (the terminal app) gives them; without them those tools are left out, as is any builtin whose
/// service this machine does not provide. This machine's computer is added to `services`.
///
/// # Errors
///
/// A tool's manifest the toolbox refuses.
pub fn builtin_toolbox_with(services: tool_core::Services) -> Result<Toolbox, String> {
    let computer: Arc<dyn computer_runtime::ComputerRuntime> =
        Arc::new(computer_runtime::LocalComputer::default());
    let mut services = services.with(computer);
    if services.get::<Arc<tool_core::UrlRouter>>().is_none() {
        services = services.with(Arc::new(builtin_tools::url_router()));
    }
    let mut toolbox = Toolbox::new();
    for (manifest, runtime) in builtin_tools::Registry::builtin().available_runtimes(&services).0 {
        toolbox.add_tool(manifest, runtime).map_err(|e| e.to_string())?;
    }
    for (name, audit) in builtin_tools::audits() {
        toolbox.add_audit(*name, *audit);
    }
    for (name, tier) in builtin_tools::tiers() {
        toolbox.add_tier(*name, *tier);
    }
    for (tool, api, prepare) in builtin_tools::preparations() {
        toolbox.add_prepare(tool, api, *prepare);
    }
    Ok(toolbox)
}

/// A device executor over [`builtin_toolbox`] that asks no one ([`NoOneToAsk`]).
///
/// # Errors
///
/// As [`builtin_toolbox`].
pub fn builtin_executor() -> Result<Executor, String> {
    Ok(Executor::builder(Arc::new(builtin_toolbox()?)).broker(Arc::new(NoOneToAsk)).build())
}

enum Request {
    Running(Arc<Session>),
    Done(ToolOutput, Instant),
}

struct Shared {
    executor: Executor,
    read_only: bool,
    mode: ApprovalMode,
    working_directory: Option<PathBuf>,
    sandbox: tool_core::SandboxPolicy,
    person_present: bool,
    session_setup: Option<SessionSetup>,
    requests: Mutex<HashMap<String, Request>>,
    outbox: mpsc::UnboundedSender<DeviceMessage>,
}

/// Runs the device until `shutdown`, reconnecting after every lost connection.
///
/// # Errors
///
/// [`DeviceError::Refused`] when the server rejects the key or the registration (retrying would
/// not help); [`DeviceError::Connect`] for a URL that cannot be dialled at all.
pub async fn run(
    config: DeviceConfig,
    executor: Executor,
    shutdown: CancellationToken,
) -> Result<(), DeviceError> {
    let (outbox, mut outgoing) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        executor,
        read_only: config.read_only,
        mode: config.approval_mode,
        working_directory: config.working_directory.clone(),
        sandbox: config.sandbox.clone(),
        person_present: config.person_present,
        session_setup: config.session_setup.clone(),
        requests: Mutex::default(),
        outbox,
    });
    let tools = config.tools.clone().unwrap_or_else(|| {
        shared.executor.toolbox().tools().iter().map(|t| t.manifest.identifier.clone()).collect()
    });
    let url = config.websocket_url();
    let boot = format!(
        "{}-{:x}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
    );
    // A frame taken from the outbox but not sent (the connection broke) goes first next time.
    let mut unsent: Option<DeviceMessage> = None;
    loop {
        if shutdown.is_cancelled() {
            return Ok(());
        }
        let mut request = url
            .as_str()
            .into_client_request()
            .map_err(|e| DeviceError::Connect { url: url.clone(), source: Box::new(e) })?;
        if let Some(key) = &config.api_key {
            let value = format!("Bearer {key}").parse().map_err(|_| {
                DeviceError::Refused("the API key contains characters a header cannot carry".into())
            })?;
            request.headers_mut().insert("authorization", value);
        }
        let connected = tokio::select! {
            connected = tokio_tungstenite::connect_async(request) => connected,
            () = shutdown.cancelled() => return Ok(()),
        };
        let mut socket = match connected {
            Ok((socket, _)) => socket,
            Err(tungstenite::Error::Http(response)) if matches!(response.status().as_u16(), 401 | 403) => {
                return Err(DeviceError::Refused(format!("HTTP {}", response.status())));
            }
            Err(error) => {
                tracing::warn!(%error, "device cannot connect; retrying");
                if !pause(config.reconnect_delay, &shutdown).await {
                    return Ok(());
                }
                continue;
            }
        };
        let register = DeviceMessage::Register {
            device_id: config.device_id.clone(),
            tools: tools.clone(),
            boot: Some(boot.clone()),
            working_directory: config.working_directory.as_ref().map(|d| d.display().to_string()),
        };
        if socket.send(Message::text(register.to_text())).await.is_err() {
            // Broken at once: the same pause as any lost connection.
            if !pause(config.reconnect_delay, &shutdown).await {
                return Ok(());
            }
            continue;
        }
        tracing::info!(device = %config.device_id, %url, "device connected");
        // The server pings every 15 s: a connection silent for much longer is dead (a laptop that
        // slept, a NAT that forgot us), and results must not go into it.
        let mut heard = tokio::time::Instant::now();
        let mut check = tokio::time::interval(Duration::from_secs(5));
        loop {
            if let Some(message) = unsent.take() {
                if socket.send(Message::text(message.to_text())).await.is_err() {
                    unsent = Some(message);
                    break;
                }
                continue;
            }
            tokio::select! {
                _ = check.tick() => {
                    if heard.elapsed() > SILENT_FOR {
                        tracing::warn!("no frame from the server for too long; reconnecting");
                        break;
                    }
                }
                frame = socket.next() => { heard = tokio::time::Instant::now(); match frame {
                    Some(Ok(Message::Text(text))) => match ServerMessage::parse(&text) {
                        Ok(ServerMessage::ToolExecute(request)) => on_execute(&shared, request),
                        Ok(ServerMessage::ToolCancel { request_id }) => on_cancel(&shared, &request_id),
                        Ok(ServerMessage::Registered { instance_id, .. }) => {
                            tracing::debug!(%instance_id, "device registered");
                        }
                        Ok(ServerMessage::Error { message }) => return Err(DeviceError::Refused(message)),
                        Err(error) => tracing::warn!(%error, "ignoring a frame the device cannot read"),
                    },
                    Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                    Some(Ok(_)) => {}
                }},
                message = outgoing.recv() => {
                    // The sender lives in `shared`, so the outbox never closes while we run.
                    unsent = message;
                }
                () = shutdown.cancelled() => {
                    let _ = socket.close(None).await;
                    return Ok(());
                }
            }
        }
        tracing::warn!(device = %config.device_id, "device connection lost; reconnecting");
        if !pause(config.reconnect_delay, &shutdown).await {
            return Ok(());
        }
    }
}

/// Waits before the next connection attempt; false when shutdown came first.
async fn pause(delay: Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        () = tokio::time::sleep(delay) => true,
        () = shutdown.cancelled() => false,
    }
}

fn on_cancel(shared: &Shared, request_id: &str) {
    if let Some(Request::Running(session)) =
        shared.requests.lock().unwrap_or_else(|p| p.into_inner()).get(request_id)
    {
        session.cancel();
    }
}

fn on_execute(shared: &Arc<Shared>, request: ExecuteRequest) {
    let session = {
        let mut requests = shared.requests.lock().unwrap_or_else(|p| p.into_inner());
        requests.retain(|_, r| !matches!(r, Request::Done(_, at) if at.elapsed() > KEEP_RESULTS));
        match requests.get(&request.request_id) {
            // Sent again after a reconnect: answer from what we have, never run twice.
            Some(Request::Done(output, _)) => {
                let _ = shared.outbox.send(DeviceMessage::ToolResult {
                    request_id: request.request_id.clone(),
                    output: output.clone(),
                });
                return;
            }
            Some(Request::Running(_)) => return,
            None => {}
        }
        let mode = if shared.read_only { ApprovalMode::ReadOnly } else { shared.mode };
        // The device's folder is its own: the server cannot move it.
        let working_directory = shared
            .working_directory
            .clone()
            .or_else(|| request.working_directory.as_ref().map(PathBuf::from));
        let session = shared.executor.open_session(SessionConfig {
            id: request.session_id.clone(),
            tenant: "device".into(),
            working_directory,
            policy: SessionPolicy { mode, no_person: !shared.person_present, ..SessionPolicy::default() },
            sandbox: shared.sandbox.clone(),
            active_tools: Some(vec![request.tool.clone()]),
            ..SessionConfig::default()
        });
        if let Some(setup) = &shared.session_setup {
            (setup.0)(&session);
        }
        requests.insert(request.request_id.clone(), Request::Running(session.clone()));
        session
    };
    let shared = shared.clone();
    tokio::spawn(async move {
        let request_id = request.request_id.clone();
        let output = run_request(&shared, &session, request).await;
        shared
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(request_id.clone(), Request::Done(output.clone(), Instant::now()));
        let _ = shared.outbox.send(DeviceMessage::ToolResult { request_id, output });
    });
}

async fn run_request(shared: &Arc<Shared>, session: &Arc<Session>, request: ExecuteRequest) -> ToolOutput {
    // Progress of this call goes to the server as it comes.
    let mut events = session.subscribe();
    let progress_outbox = shared.outbox.clone();
    let progress_id = request.request_id.clone();
    let forward = tokio::spawn(async move {
        while let Ok(event) = events.recv().await {
            if let Event::Progress { progress, .. } = event {
                let _ = progress_outbox
                    .send(DeviceMessage::Progress { request_id: progress_id.clone(), progress });
            }
        }
    });
    let alarm = Duration::from_millis(request.timeout_ms).saturating_sub(DEVICE_ALARM_MARGIN);
    let batch = Batch {
        message_id: Some(request.request_id.clone()),
        calls: vec![RawCall {
            id: request.call_id.clone(),
            name: format!("{}__{}", request.tool, request.api),
            arguments: request.arguments.to_string(),
        }],
        stopped_on_length: false,
    };
    let run = shared.executor.execute_batch(session, batch);
    tokio::pin!(run);
    let output = tokio::select! {
        results = &mut run => results.into_iter().next().map(|r| r.output),
        () = tokio::time::sleep(alarm) => {
            // Our alarm rings before the server's: stop the call, keep what it produced, and say
            // plainly that the device timed out.
            session.cancel();
            let partial = tokio::time::timeout(Duration::from_millis(300), &mut run)
                .await
                .ok()
                .and_then(|results| results.into_iter().next())
                .map(|r| r.output.content)
                .filter(|c| !c.is_empty());
            let mut message = format!(
                "client_executor_timeout: the device stopped the call after {} ms",
                alarm.as_millis()
            );
            if let Some(partial) = partial {
                message = format!("{message}; output so far:\n{partial}");
            }
            Some(ToolOutput::error(ErrorKind::Timeout, message))
        }
    };
    forward.abort();
    output
        .unwrap_or_else(|| ToolOutput::error(ErrorKind::Internal, "the device's pipeline returned no result"))
}
