//! Client executors: devices connected over WebSocket, and the runtime that sends a session's
//! calls to them.
//!
//! Every dispatched call has exactly one result. The runtime future waits on a one-shot channel
//! that only the first of these can fill: the device's `tool_result` (from whichever connection
//! of that device is current — a request still open when a device reconnects is sent again to
//! the new connection, and the device answers repeats from what it kept), the deadline, the
//! session's cancellation, or the device staying away longer than the reconnect grace. Later
//! answers find no open request and are dropped.
//!
//! With a cluster (Redis), a call taken by this instance for a device connected to another one is
//! forwarded to that instance's inbox; the result comes back through this instance's inbox. The
//! waits of a batch's calls are independent futures, so a batch shares one deadline instead of
//! waiting in turn.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use client_executor::{ExecuteRequest, ServerMessage};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tool_core::{CallContext, ErrorKind, Progress, ProgressSink, ToolOutput, ToolRuntime};

use crate::cluster::{Cluster, ClusterMessage};
use crate::metrics::Metrics;

/// Where a session's calls run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// In the server's process, in turn with the tenant's other runs there.
    Server {
        /// The session's tenant.
        tenant: String,
    },
    /// On a device of the tenant (devices of other tenants are never used): the named one, or any
    /// that runs the tool.
    Device {
        /// The session's tenant.
        tenant: String,
        /// The device, when the session names one.
        device_id: Option<String>,
    },
}

type DeviceKey = (String, String);

fn is_device(key: &DeviceKey, tenant: &str, device_id: &str) -> bool {
    key.0 == tenant && key.1 == device_id
}

struct Connection {
    generation: u64,
    tools: Vec<String>,
    sender: mpsc::UnboundedSender<ServerMessage>,
    connected_at: Instant,
}

enum Reply {
    /// A runtime future of this instance waits.
    Local { sender: oneshot::Sender<ToolOutput>, progress: ProgressSink },
    /// An instance of the cluster waits.
    Remote { origin: String },
}

struct Inflight {
    device: DeviceKey,
    request: ExecuteRequest,
    reply: Reply,
    /// After this nobody waits for the answer any more (the deadline plus a margin): the entry is
    /// reaped and never sent again to a reconnecting device.
    expires: Instant,
}

/// What is added to a request's deadline before its open entry is reaped.
const EXPIRY_MARGIN: Duration = Duration::from_secs(5);

struct RemoteWait {
    sender: oneshot::Sender<ToolOutput>,
    progress: ProgressSink,
    /// The device it was sent to: only that device's answer settles it.
    device: DeviceKey,
}

/// The devices connected to this instance and the calls open on them.
pub struct Devices {
    instance_id: String,
    metrics: Arc<Metrics>,
    cluster: Option<Arc<Cluster>>,
    reconnect_grace: Duration,
    default_timeout: Duration,
    connections: Mutex<HashMap<DeviceKey, Connection>>,
    /// The generation of each device's last lost connection (so only the latest loss's grace
    /// timer acts).
    departed: Mutex<HashMap<DeviceKey, u64>>,
    /// Requests this instance passed to another one (for a device there, or following a device
    /// that moved there): where they went, until when. Cancels go the same way.
    sent_to: Mutex<HashMap<String, (String, Instant)>>,
    /// The boot id each device last registered with.
    boots: Mutex<HashMap<DeviceKey, Option<String>>>,
    inflight: Mutex<HashMap<String, Inflight>>,
    remote_waits: Mutex<HashMap<String, RemoteWait>>,
    routes: RwLock<HashMap<String, Route>>,
    next: AtomicU64,
}

impl std::fmt::Debug for Devices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Devices").field("instance_id", &self.instance_id).finish_non_exhaustive()
    }
}

/// A device as listed by the API.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct DeviceInfo {
    /// The device's id.
    pub device_id: String,
    /// The tools it runs.
    pub tools: Vec<String>,
    /// Seconds since it connected.
    pub connected_for_s: u64,
    /// The instance holding its connection.
    pub instance_id: String,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

fn failure(kind: ErrorKind, code: &str, message: String) -> ToolOutput {
    ToolOutput::error(kind, message).with_state(json!({"type": code}))
}

impl Devices {
    /// No devices yet.
    pub fn new(
        instance_id: String,
        metrics: Arc<Metrics>,
        cluster: Option<Arc<Cluster>>,
        reconnect_grace: Duration,
        default_timeout: Duration,
    ) -> Self {
        Self {
            instance_id,
            metrics,
            cluster,
            reconnect_grace,
            default_timeout,
            connections: Mutex::default(),
            departed: Mutex::default(),
            boots: Mutex::default(),
            sent_to: Mutex::default(),
            inflight: Mutex::default(),
            remote_waits: Mutex::default(),
            routes: RwLock::default(),
            next: AtomicU64::new(1),
        }
    }

    /// Sets where a session's calls run.
    pub fn set_route(&self, session_id: &str, route: Route) {
        self.routes.write().unwrap_or_else(|p| p.into_inner()).insert(session_id.to_owned(), route);
    }

    /// Forgets a session's route.
    pub fn forget_route(&self, session_id: &str) {
        self.routes.write().unwrap_or_else(|p| p.into_inner()).remove(session_id);
    }

    fn route(&self, session_id: &str) -> Option<Route> {
        self.routes.read().unwrap_or_else(|p| p.into_inner()).get(session_id).cloned()
    }

    /// The devices of a tenant connected to this instance.
    pub fn list(&self, tenant: &str) -> Vec<DeviceInfo> {
        let mut list: Vec<DeviceInfo> = lock(&self.connections)
            .iter()
            .filter(|((t, _), _)| t == tenant)
            .map(|((_, id), c)| DeviceInfo {
                device_id: id.clone(),
                tools: c.tools.clone(),
                connected_for_s: c.connected_at.elapsed().as_secs(),
                instance_id: self.instance_id.clone(),
            })
            .collect();
        list.sort_by(|a, b| a.device_id.cmp(&b.device_id));
        list
    }

    /// Registers a connection; a previous connection of the same device is replaced (its sender
    /// dropped, so its socket closes) and requests still open on the device are sent again.
    /// Returns the connection's generation. The caller announces the device to the cluster.
    pub fn register(
        self: &Arc<Self>,
        tenant: &str,
        device_id: &str,
        boot: Option<String>,
        tools: Vec<String>,
        sender: mpsc::UnboundedSender<ServerMessage>,
    ) -> u64 {
        let generation = self.next.fetch_add(1, Ordering::Relaxed);
        let key = (tenant.to_owned(), device_id.to_owned());
        let restarted: Vec<Inflight> = {
            // The locks in the order inflight → connections → boots (as everywhere), so no request
            // registered in between is missed.
            let mut inflight = lock(&self.inflight);
            let mut connections = lock(&self.connections);
            let previous = lock(&self.boots).insert(key.clone(), boot.clone());
            // Another process under this id (a restart, or a second device with the same id) did
            // not run these and may not know them: they fail rather than run twice.
            let same_process = match (&previous, &boot) {
                (Some(Some(before)), Some(now)) => before == now,
                _ => true,
            };
            // Expired ones stay for the reaper; the rest go again, or fail for a new process.
            let restarted: Vec<Inflight> = if same_process {
                for open in inflight.values_mut().filter(|open| open.device == key) {
                    if let Some(left) = remaining(open.expires) {
                        open.request.timeout_ms = left.as_millis() as u64;
                        let _ = sender.send(ServerMessage::ToolExecute(open.request.clone()));
                    }
                }
                Vec::new()
            } else {
                inflight
                    .extract_if(|_, open| open.device == key && remaining(open.expires).is_some())
                    .map(|(_, open)| open)
                    .collect()
            };
            let connection =
                Connection { generation, tools: tools.clone(), sender, connected_at: Instant::now() };
            if connections.insert(key.clone(), connection).is_none() {
                self.metrics.devices.fetch_add(1, Ordering::Relaxed);
            }
            restarted
        };
        if !restarted.is_empty() {
            let devices = self.clone();
            tokio::spawn(async move {
                for open in restarted {
                    devices.deliver(open.reply, &open.request.request_id, restarted_output(&key.1)).await;
                }
            });
        }
        generation
    }

    /// A connection ended. If it was still the device's current one, the device has the reconnect
    /// grace to come back; after that its open requests fail.
    pub fn disconnected(self: &Arc<Self>, tenant: &str, device_id: &str, generation: u64) {
        let key = (tenant.to_owned(), device_id.to_owned());
        {
            let mut connections = lock(&self.connections);
            match connections.get(&key) {
                Some(c) if c.generation == generation => {
                    connections.remove(&key);
                    lock(&self.departed).insert(key.clone(), generation);
                    self.metrics.devices.fetch_sub(1, Ordering::Relaxed);
                }
                _ => return,
            }
        }
        let devices = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(devices.reconnect_grace).await;
            // Decided and taken under the locks, so a device that comes back meanwhile keeps its
            // requests, and only the grace of the latest loss acts.
            let mut open: Vec<Inflight> = {
                let mut inflight = lock(&devices.inflight);
                let connections = lock(&devices.connections);
                let mut departed = lock(&devices.departed);
                if connections.contains_key(&key) || departed.get(&key) != Some(&generation) {
                    return;
                }
                departed.remove(&key);
                inflight.extract_if(|_, i| i.device == key).map(|(_, i)| i).collect()
            };
            if let Some(cluster) = &devices.cluster {
                // Withdraws only this instance's announcement: one made elsewhere since stays.
                cluster.unpublish_device(&key.0, &key.1).await;
                // Came back to another instance? Then its open requests follow it there.
                if !open.is_empty()
                    && let Some((instance, _)) = cluster.find_device(&key.0, Some(&key.1), None).await
                {
                    open = devices.follow(cluster, &instance, open).await;
                }
            }
            for open in open {
                let output = disconnected(&key.1, devices.reconnect_grace);
                devices.deliver(open.reply, &open.request.request_id, output).await;
            }
        });
    }

    /// Sends open requests of a device that reconnected to `instance` there (the device answers
    /// requests it already ran from its kept results); returns those that could not follow.
    async fn follow(&self, cluster: &Cluster, instance: &str, open: Vec<Inflight>) -> Vec<Inflight> {
        let mut stranded = Vec::new();
        for entry in open {
            let Inflight { device, mut request, reply, expires } = entry;
            let request_id = request.request_id.clone();
            let Some(left) = remaining(expires) else {
                stranded.push(Inflight { device, request, reply, expires });
                continue;
            };
            request.timeout_ms = left.as_millis() as u64;
            let origin = match &reply {
                Reply::Local { .. } => self.instance_id.clone(),
                Reply::Remote { origin } => origin.clone(),
            };
            let execute = ClusterMessage::Execute {
                origin,
                tenant: device.0.clone(),
                device_id: device.1.clone(),
                request: request.clone(),
                resent: true,
            };
            if let Reply::Local { sender, progress } = reply {
                if sender.is_closed() {
                    // Nobody waits any more (the call's future was dropped meanwhile).
                    continue;
                }
                lock(&self.sent_to).insert(request_id.clone(), (instance.to_owned(), expires));
                lock(&self.remote_waits)
                    .insert(request_id.clone(), RemoteWait { sender, progress, device: device.clone() });
                if !cluster.send(instance, &execute).await
                    && let Some(wait) = lock(&self.remote_waits).remove(&request_id)
                {
                    stranded.push(Inflight {
                        device,
                        request,
                        reply: Reply::Local { sender: wait.sender, progress: wait.progress },
                        expires,
                    });
                }
            } else {
                lock(&self.sent_to).insert(request_id.clone(), (instance.to_owned(), expires));
                if !cluster.send(instance, &execute).await {
                    stranded.push(Inflight { device, request, reply, expires });
                }
            }
        }
        stranded
    }

    /// Reaps open requests nobody waits for any more, every few seconds until `stop`.
    pub fn spawn_reaper(self: &Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let devices = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(EXPIRY_MARGIN);
            loop {
                tokio::select! {
                    _ = ticks.tick() => {}
                    () = stop.cancelled() => return,
                }
                let Some(devices) = devices.upgrade() else { return };
                let now = Instant::now();
                lock(&devices.inflight).retain(|_, open| open.expires > now);
                lock(&devices.sent_to).retain(|_, (_, expires)| *expires > now);
            }
        });
    }

    async fn deliver(&self, reply: Reply, request_id: &str, output: ToolOutput) {
        match reply {
            Reply::Local { sender, .. } => {
                let _ = sender.send(output);
            }
            Reply::Remote { origin } => {
                if let Some(cluster) = &self.cluster {
                    cluster
                        .send(&origin, &ClusterMessage::Result { request_id: request_id.to_owned(), output })
                        .await;
                }
            }
        }
    }

    /// A device's `tool_result`: the first answer for an open request of this device wins.
    pub async fn on_result(&self, tenant: &str, device_id: &str, request_id: &str, output: ToolOutput) {
        let Some(output) = self.settle_here(tenant, device_id, request_id, output).await else { return };
        // Not open here: the device may have reconnected to this instance while the request was
        // sent from another one, which still holds it.
        if let (Some(cluster), Some(origin)) = (&self.cluster, origin_of(request_id))
            && origin != self.instance_id
        {
            let message = ClusterMessage::DeviceResult {
                tenant: tenant.to_owned(),
                device_id: device_id.to_owned(),
                request_id: request_id.to_owned(),
                output,
            };
            cluster.send(origin, &message).await;
            return;
        }
        tracing::debug!(request_id, "ignoring a result for no open request (duplicate or late)");
    }

    /// Delivers a result for a request open here on this device; gives the output back when none is.
    async fn settle_here(
        &self,
        tenant: &str,
        device_id: &str,
        request_id: &str,
        output: ToolOutput,
    ) -> Option<ToolOutput> {
        let open = {
            let mut inflight = lock(&self.inflight);
            match inflight.get(request_id) {
                Some(open) if is_device(&open.device, tenant, device_id) => inflight.remove(request_id),
                _ => None,
            }
        };
        if let Some(open) = open {
            self.deliver(open.reply, request_id, output).await;
            return None;
        }
        // A request this instance forwarded (or that followed its device): the waiter is here.
        let wait = {
            let mut waits = lock(&self.remote_waits);
            match waits.get(request_id) {
                Some(wait) if is_device(&wait.device, tenant, device_id) => waits.remove(request_id),
                _ => None,
            }
        };
        match wait {
            Some(wait) => {
                let _ = wait.sender.send(output);
                None
            }
            None => Some(output),
        }
    }

    /// A device's progress update.
    pub async fn on_progress(&self, tenant: &str, device_id: &str, request_id: &str, progress: Progress) {
        let target = {
            let inflight = lock(&self.inflight);
            match inflight.get(request_id) {
                Some(open) if is_device(&open.device, tenant, device_id) => match &open.reply {
                    Reply::Local { progress: sink, .. } => {
                        sink.send(progress);
                        return;
                    }
                    Reply::Remote { origin } => origin.clone(),
                },
                _ => return,
            }
        };
        if let Some(cluster) = &self.cluster {
            cluster
                .send(&target, &ClusterMessage::Progress { request_id: request_id.to_owned(), progress })
                .await;
        }
    }

    /// A message from another instance.
    pub async fn on_cluster_message(&self, message: ClusterMessage) {
        match message {
            ClusterMessage::Execute { origin, tenant, device_id, request, resent } => {
                let key = (tenant, device_id);
                let request_id = request.request_id.clone();
                let sent = {
                    let mut inflight = lock(&self.inflight);
                    let connections = lock(&self.connections);
                    match connections.get(&key) {
                        Some(connection) => {
                            let _ = connection.sender.send(ServerMessage::ToolExecute(request.clone()));
                            let expires =
                                Instant::now() + Duration::from_millis(request.timeout_ms) + EXPIRY_MARGIN;
                            inflight.insert(
                                request_id.clone(),
                                Inflight {
                                    device: key.clone(),
                                    request,
                                    reply: Reply::Remote { origin: origin.clone() },
                                    expires,
                                },
                            );
                            true
                        }
                        None => false,
                    }
                };
                if !sent {
                    let output =
                        if resent { disconnected(&key.1, self.reconnect_grace) } else { unavailable(&key.1) };
                    self.deliver(Reply::Remote { origin }, &request_id, output).await;
                }
            }
            ClusterMessage::Result { request_id, output } => {
                if let Some(wait) = lock(&self.remote_waits).remove(&request_id) {
                    let _ = wait.sender.send(output);
                }
            }
            ClusterMessage::Progress { request_id, progress } => {
                if let Some(wait) = lock(&self.remote_waits).get(&request_id) {
                    wait.progress.send(progress);
                }
            }
            ClusterMessage::Cancel { request_id } => self.cancel_here(&request_id).await,
            ClusterMessage::DeviceResult { tenant, device_id, request_id, output } => {
                if self.settle_here(&tenant, &device_id, &request_id, output).await.is_some() {
                    tracing::debug!(request_id, "a forwarded result found no open request (late)");
                }
            }
            // Handled by the server state, not by the devices.
            ClusterMessage::Decision { .. }
            | ClusterMessage::EndSession { .. }
            | ClusterMessage::Reload { .. } => {}
        }
    }

    /// Tells the device running a request to stop: through its connection here, or through the
    /// instance the request was passed to.
    async fn cancel_here(&self, request_id: &str) {
        {
            let inflight = lock(&self.inflight);
            if let Some(open) = inflight.get(request_id) {
                if let Some(connection) = lock(&self.connections).get(&open.device) {
                    let _ = connection
                        .sender
                        .send(ServerMessage::ToolCancel { request_id: request_id.to_owned() });
                }
                return;
            }
        }
        let sent_to = lock(&self.sent_to).get(request_id).map(|(instance, _)| instance.clone());
        if let (Some(instance), Some(cluster)) = (sent_to, &self.cluster) {
            cluster.send(&instance, &ClusterMessage::Cancel { request_id: request_id.to_owned() }).await;
        }
    }

    fn pick_local(&self, tenant: &str, device: Option<&str>, tool: &str) -> Option<String> {
        lock(&self.connections)
            .iter()
            .filter(|((t, id), c)| {
                t == tenant && device.is_none_or(|d| d == id) && c.tools.iter().any(|x| x == tool)
            })
            .max_by_key(|(_, c)| c.generation)
            .map(|((_, id), _)| id.clone())
    }

    /// Runs a call on a device of the route's tenant; always one result.
    pub async fn dispatch(
        &self,
        tenant: &str,
        device: Option<&str>,
        tool: &str,
        api: &str,
        arguments: Value,
        context: &CallContext,
    ) -> ToolOutput {
        let timeout = context.remaining().unwrap_or(self.default_timeout);
        let deadline = tokio::time::Instant::now() + timeout;
        let request = ExecuteRequest {
            request_id: format!("dev-{}-{:x}", self.instance_id, self.next.fetch_add(1, Ordering::Relaxed)),
            call_id: context.call_id.clone(),
            session_id: context.session_id.clone(),
            tool: tool.to_owned(),
            api: api.to_owned(),
            arguments,
            timeout_ms: timeout.as_millis() as u64,
            working_directory: context.working_directory.as_ref().map(|p| p.display().to_string()),
        };
        let request_id = request.request_id.clone();
        let (sender, receiver) = oneshot::channel();
        self.metrics.device_waits.fetch_add(1, Ordering::Relaxed);
        let _waiting = Waiting(self, request_id.clone());

        if let Some(device_id) = self.pick_local(tenant, device, tool) {
            let key = (tenant.to_owned(), device_id);
            let mut inflight = lock(&self.inflight);
            if let Some(connection) = lock(&self.connections).get(&key) {
                let _ = connection.sender.send(ServerMessage::ToolExecute(request.clone()));
            }
            inflight.insert(
                request_id.clone(),
                Inflight {
                    device: key,
                    request,
                    reply: Reply::Local { sender, progress: context.progress.clone() },
                    expires: Instant::now() + timeout + EXPIRY_MARGIN,
                },
            );
        } else {
            let found = match &self.cluster {
                Some(cluster) => cluster.find_device(tenant, device, Some(tool)).await,
                None => None,
            };
            let Some((instance, device_id)) = found else {
                return unavailable_for(device, tool);
            };
            lock(&self.remote_waits).insert(
                request_id.clone(),
                RemoteWait {
                    sender,
                    progress: context.progress.clone(),
                    device: (tenant.to_owned(), device_id.clone()),
                },
            );
            let execute = ClusterMessage::Execute {
                origin: self.instance_id.clone(),
                tenant: tenant.to_owned(),
                device_id,
                request,
                resent: false,
            };
            let sent = match &self.cluster {
                Some(cluster) => cluster.send(&instance, &execute).await,
                None => false,
            };
            if !sent {
                return unavailable_for(device, tool);
            }
            lock(&self.sent_to)
                .insert(request_id.clone(), (instance, Instant::now() + timeout + EXPIRY_MARGIN));
        }

        tokio::pin!(receiver);
        tokio::select! {
            output = &mut receiver => return output.unwrap_or_else(|_| lost()),
            () = tokio::time::sleep_until(deadline) => {}
            () = context.cancel.cancelled() => {}
        }
        // Cancelled or out of time: tell the device, then give it a moment to answer with what it
        // has (the pipeline's referee bounds this wait too).
        self.cancel_here(&request_id).await;
        match tokio::time::timeout(Duration::from_secs(1), &mut receiver).await {
            Ok(Ok(output)) => output,
            _ if context.cancel.is_cancelled() && tokio::time::Instant::now() < deadline => {
                failure(ErrorKind::Cancelled, "cancelled", "The call was cancelled.".into())
            }
            _ => failure(
                ErrorKind::Timeout,
                "client_executor_timeout",
                format!("The client executor did not answer within {} ms.", timeout.as_millis()),
            ),
        }
    }
}

/// The instance that sent a request: ids are `dev-{instance}-{n}` (instance ids may hold `-`, the
/// hex counter does not).
fn origin_of(request_id: &str) -> Option<&str> {
    request_id.strip_prefix("dev-")?.rsplit_once('-').map(|(instance, _)| instance)
}

/// Removes a request's open entries however its wait ends (a dropped future included).
struct Waiting<'a>(&'a Devices, String);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        lock(&self.0.inflight).remove(&self.1);
        lock(&self.0.remote_waits).remove(&self.1);
        lock(&self.0.sent_to).remove(&self.1);
        self.0.metrics.device_waits.fetch_sub(1, Ordering::Relaxed);
    }
}

fn disconnected(device: &str, grace: Duration) -> ToolOutput {
    failure(
        ErrorKind::Execution,
        "client_executor_disconnected",
        format!(
            "The client executor `{device}` disconnected while running this call and did not come back within \
             {} s; the call may or may not have run on the device.",
            grace.as_secs_f32()
        ),
    )
}

fn restarted_output(device: &str) -> ToolOutput {
    failure(
        ErrorKind::Execution,
        "client_executor_restarted",
        format!(
            "The client executor `{device}` restarted while running this call; the call may or may not have \
             run on the device."
        ),
    )
}

/// Time left before an open request's deadline (its expiry less the margin).
fn remaining(expires: Instant) -> Option<Duration> {
    expires.checked_duration_since(Instant::now())?.checked_sub(EXPIRY_MARGIN).filter(|d| !d.is_zero())
}

fn lost() -> ToolOutput {
    failure(ErrorKind::Execution, "client_executor_lost", "The client executor's answer was lost.".into())
}

fn unavailable(device: &str) -> ToolOutput {
    failure(
        ErrorKind::Execution,
        "client_executor_unavailable",
        format!("The client executor `{device}` is not connected, so the call was not run."),
    )
}

fn unavailable_for(device: Option<&str>, tool: &str) -> ToolOutput {
    let who =
        device.map_or_else(|| "No client executor".to_owned(), |d| format!("The client executor `{d}`"));
    failure(
        ErrorKind::Execution,
        "client_executor_unavailable",
        format!(
            "{who} that runs `{tool}` is connected for this session, so the call was not run. Ask the user to \
             connect their device (toolhost-device)."
        ),
    )
}

/// A tool's runtime that runs in process or on a device, by the session's route.
pub struct Routed {
    tool: String,
    local: Arc<dyn ToolRuntime>,
    devices: Arc<Devices>,
    limits: Arc<crate::limits::Limits>,
    /// The tool's data lives on the server (memories): it runs here even in a device's session.
    server_only: bool,
}

impl std::fmt::Debug for Routed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routed").field("tool", &self.tool).finish_non_exhaustive()
    }
}

impl Routed {
    /// Wraps a tool's in-process runtime.
    pub fn new(
        tool: String,
        local: Arc<dyn ToolRuntime>,
        devices: Arc<Devices>,
        limits: Arc<crate::limits::Limits>,
    ) -> Self {
        let server_only = SERVER_ONLY.contains(&tool.as_str());
        Self { tool, local, devices, limits, server_only }
    }
}

/// Tools whose data is the server's (the person's memories, the model's documents, the
/// knowledge bases, the session's deferred tools, the operator's skills): never sent to a device.
const SERVER_ONLY: &[&str] = &[
    builtin_tool_memory::IDENTIFIER,
    builtin_tool_documents::IDENTIFIER,
    builtin_tool_knowledge_base::IDENTIFIER,
    builtin_tool_tool_search::IDENTIFIER,
    builtin_tool_skills::IDENTIFIER,
    // Its model and key are the server's; its own calls are routed one by one.
    builtin_tool_sub_agent::IDENTIFIER,
    // The operator's credentials, named by the server's mounts.
    builtin_tool_creds::IDENTIFIER,
];

/// A read of an internal address (`skill://…`) names the server's data, not the device's files.
fn reads_an_address(tool: &str, api: &str, arguments: &Value) -> bool {
    tool == "local-system"
        && api == "readFile"
        && arguments
            .get("path")
            .and_then(Value::as_str)
            .is_some_and(|path| tool_core::urls::scheme_of(path).is_some())
}

impl ToolRuntime for Routed {
    fn execute<'a>(
        &'a self,
        api: &'a str,
        arguments: Value,
        context: &'a CallContext,
    ) -> BoxFuture<'a, ToolOutput> {
        let route = match self.devices.route(&context.session_id) {
            Some(Route::Device { tenant, .. })
                if self.server_only || reads_an_address(&self.tool, api, &arguments) =>
            {
                Some(Route::Server { tenant })
            }
            route => route,
        };
        match route {
            Some(Route::Device { tenant, device_id }) => Box::pin(async move {
                self.devices
                    .dispatch(&tenant, device_id.as_deref(), &self.tool, api, arguments, context)
                    .await
            }),
            // A tenant's runs on this machine take turns in the tenant's own pool: one whose calls
            // hang (slow disks, huge trees) waits behind itself, never in front of another.
            Some(Route::Server { tenant }) => Box::pin(async move {
                let turn = tokio::select! {
                    turn = self.limits.run_turn(&tenant) => turn,
                    () = context.cancel.cancelled() => {
                        return ToolOutput::error(
                            ErrorKind::Cancelled,
                            "The call was cancelled (or ran out of time) while waiting for a turn: this \
                             tenant had as many calls running on the server as it may.",
                        );
                    }
                };
                let output = self.local.execute(api, arguments, context).await;
                drop(turn);
                output
            }),
            // Only a session held here has a route; one that ended meanwhile runs nothing.
            None => Box::pin(async {
                ToolOutput::error(ErrorKind::Cancelled, "The session ended before the call could run.")
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_request_id_names_the_instance_that_sent_it() {
        assert_eq!(super::origin_of("dev-host-12-345-ab-1-1f"), Some("host-12-345-ab-1"));
        assert_eq!(super::origin_of("dev-x-0"), Some("x"));
        assert_eq!(super::origin_of("nope"), None);
        assert_eq!(super::origin_of("dev-nodash"), None);
    }
}
