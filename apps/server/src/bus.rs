//! One view across instances: every event of every session, tenant by tenant.
//!
//! The pipeline hands the bus every event it emits ([`tool_executor::EventTap`]). The bus gives
//! it at once to this instance's watchers of the event's tenant (the session and tenant event
//! streams, the console) and, with several instances, to the other instances:
//!
//! * **Redis** (`--redis-url`): published on `{prefix}:events:{tenant}`, a JSON array of events
//!   per message (a publisher task takes what has queued and sends one `PUBLISH` per tenant in one
//!   pipeline); every instance subscribes to `{prefix}:events:*` on a connection of its own.
//! * **Postgres LISTEN/NOTIFY** (a Postgres journal without Redis): `pg_notify('toolhost_events',
//!   …)` on a connection of its own, batches cut to the 8 000 bytes a notification may carry (a
//!   result too long for one is cut, saying so; the journal has it whole).
//! * **Alone**: only this instance's watchers.
//!
//! **Architecture invariant:** a watcher sees each event once and, per call, in the order it
//! happened: an instance delivers its own events to its own watchers directly and ignores them
//! when they come back from the transport; each instance numbers its events, and a number not
//! above the last one seen from that instance is dropped. Events travel best effort: a watcher
//! that falls behind is told how many it missed, and what must not be lost is in the journal.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use tool_executor::Event;

/// Events one tenant's watchers at this instance may fall behind by before they miss some.
const TENANT_BUFFER: usize = 4096;
/// Events waiting to be sent to the other instances; past it they are dropped (and counted).
const OUTGOING: usize = 16_384;
/// The most a Postgres notification carries (its limit is 8 000 bytes).
const NOTIFY_BYTES: usize = 7_900;
/// The channel Postgres notifications travel on.
pub const NOTIFY_CHANNEL: &str = "toolhost_events";

/// One event of one session, as it travels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BusEvent {
    /// The instance whose pipeline emitted it.
    pub instance: String,
    /// Its number at that instance (increasing).
    pub seq: u64,
    /// The tenant.
    pub tenant: String,
    /// The session.
    pub session_id: String,
    /// When (Unix milliseconds).
    pub at: i64,
    /// The event.
    pub event: Event,
}

/// How events reach the other instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// None: one instance.
    Alone,
    /// Redis publish/subscribe.
    Redis,
    /// Postgres LISTEN/NOTIFY.
    Postgres,
}

impl Transport {
    /// Its name, as `/readyz` and the console show it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Alone => "in-process",
            Self::Redis => "redis",
            Self::Postgres => "postgres",
        }
    }
}

/// The event bus of this instance.
pub struct Bus {
    instance: String,
    seq: AtomicU64,
    tenants: RwLock<HashMap<String, broadcast::Sender<Arc<BusEvent>>>>,
    outgoing: Mutex<Option<mpsc::Sender<Arc<BusEvent>>>>,
    transport: Mutex<Transport>,
    /// The last number seen from each other instance.
    seen: Mutex<HashMap<String, u64>>,
    /// Events not sent to the other instances (the queue was full, or the transport failed).
    pub dropped: AtomicU64,
    /// This instance's own events, every tenant's (what only the instance that emitted an event
    /// acts on: notifications).
    local: broadcast::Sender<Arc<BusEvent>>,
}

impl std::fmt::Debug for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bus").field("instance", &self.instance).finish_non_exhaustive()
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

impl Bus {
    /// A bus for this instance, alone until a transport is started.
    pub fn new(instance: &str) -> Self {
        Self {
            instance: instance.to_owned(),
            seq: AtomicU64::new(0),
            tenants: RwLock::default(),
            outgoing: Mutex::new(None),
            transport: Mutex::new(Transport::Alone),
            seen: Mutex::default(),
            dropped: AtomicU64::new(0),
            local: broadcast::channel(TENANT_BUFFER).0,
        }
    }

    /// This instance's own events, every tenant's, from now on.
    pub fn subscribe_local(&self) -> broadcast::Receiver<Arc<BusEvent>> {
        self.local.subscribe()
    }

    /// How events reach the other instances.
    pub fn transport(&self) -> Transport {
        *self.transport.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every event of `tenant` from now on, from every instance.
    pub fn subscribe(&self, tenant: &str) -> broadcast::Receiver<Arc<BusEvent>> {
        if let Some(sender) = self.tenants.read().unwrap_or_else(PoisonError::into_inner).get(tenant) {
            return sender.subscribe();
        }
        let mut tenants = self.tenants.write().unwrap_or_else(PoisonError::into_inner);
        // Tenants nobody watches any more are let go as others arrive.
        tenants.retain(|_, sender| sender.receiver_count() > 0);
        tenants.entry(tenant.to_owned()).or_insert_with(|| broadcast::channel(TENANT_BUFFER).0).subscribe()
    }

    /// Publishes an event emitted here.
    pub fn publish(&self, tenant: &str, session_id: &str, event: &Event) {
        let watched = self
            .tenants
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tenant)
            .is_some_and(|sender| sender.receiver_count() > 0);
        let outgoing = self.outgoing.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let local = self.local.receiver_count() > 0;
        if !watched && outgoing.is_none() && !local {
            return;
        }
        let event = Arc::new(BusEvent {
            instance: self.instance.clone(),
            seq: self.seq.fetch_add(1, Ordering::Relaxed) + 1,
            tenant: tenant.to_owned(),
            session_id: session_id.to_owned(),
            at: now_ms(),
            event: event.clone(),
        });
        if let Some(outgoing) = outgoing
            && outgoing.try_send(event.clone()).is_err()
        {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        if local {
            let _ = self.local.send(event.clone());
        }
        if watched {
            self.deliver(event);
        }
    }

    /// Hands an event to this instance's watchers of its tenant.
    fn deliver(&self, event: Arc<BusEvent>) {
        if let Some(sender) = self.tenants.read().unwrap_or_else(PoisonError::into_inner).get(&event.tenant) {
            let _ = sender.send(event);
        }
    }

    /// An event from another instance: delivered once, in its instance's order.
    fn arrived(&self, event: BusEvent) {
        if event.instance == self.instance {
            return;
        }
        {
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            let last = seen.entry(event.instance.clone()).or_insert(0);
            if event.seq <= *last {
                return;
            }
            *last = event.seq;
        }
        self.deliver(Arc::new(event));
    }

    fn outgoing(&self, transport: Transport) -> mpsc::Receiver<Arc<BusEvent>> {
        let (sender, receiver) = mpsc::channel(OUTGOING);
        *self.outgoing.lock().unwrap_or_else(PoisonError::into_inner) = Some(sender);
        *self.transport.lock().unwrap_or_else(PoisonError::into_inner) = transport;
        receiver
    }

    /// Sends this instance's events to the others and receives theirs through Redis, until
    /// `stop` fires. Connections that fail are made again.
    ///
    /// # Errors
    ///
    /// The URL does not make a Redis client.
    pub fn spawn_redis(
        self: &Arc<Self>,
        url: &str,
        prefix: &str,
        stop: CancellationToken,
    ) -> redis::RedisResult<()> {
        let client = redis::Client::open(url)?;
        let mut queue = self.outgoing(Transport::Redis);
        let channel_prefix = format!("{prefix}:events:");
        let (bus, publisher, channels) = (self.clone(), client.clone(), channel_prefix.clone());
        let stopped = stop.clone();
        tokio::spawn(async move {
            let mut connection = None;
            let mut batch = Vec::with_capacity(256);
            loop {
                tokio::select! {
                    received = queue.recv_many(&mut batch, 256) => if received == 0 { return },
                    () = stopped.cancelled() => return,
                }
                if connection.is_none() {
                    connection = publisher.get_multiplexed_async_connection().await.ok();
                }
                let Some(conn) = connection.as_mut() else {
                    bus.dropped.fetch_add(batch.len() as u64, Ordering::Relaxed);
                    batch.clear();
                    continue;
                };
                let mut by_tenant: HashMap<&str, Vec<&BusEvent>> = HashMap::new();
                for event in &batch {
                    by_tenant.entry(event.tenant.as_str()).or_default().push(event);
                }
                let mut pipe = redis::pipe();
                for (tenant, events) in &by_tenant {
                    if let Ok(text) = serde_json::to_string(events) {
                        pipe.cmd("PUBLISH").arg(format!("{channels}{tenant}")).arg(text).ignore();
                    }
                }
                let sent: redis::RedisResult<()> = pipe.query_async(conn).await;
                if let Err(error) = sent {
                    tracing::warn!(%error, events = batch.len(), "events could not be sent to the other instances");
                    bus.dropped.fetch_add(batch.len() as u64, Ordering::Relaxed);
                    connection = None;
                }
                batch.clear();
            }
        });
        let pattern = format!("{channel_prefix}*");
        tokio::spawn(self.clone().keep_receiving(stop, "Redis", move || {
            let (client, pattern) = (client.clone(), pattern.clone());
            async move {
                use futures::StreamExt as _;
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.psubscribe(pattern).await?;
                redis::RedisResult::Ok(
                    pubsub.into_on_message().filter_map(|m| async move { m.get_payload().ok() }).boxed(),
                )
            }
        }));
        Ok(())
    }

    /// The same through Postgres LISTEN/NOTIFY on the journal's database.
    pub fn spawn_postgres(self: &Arc<Self>, url: &str, stop: CancellationToken) {
        let mut queue = self.outgoing(Transport::Postgres);
        let (bus, publish_url) = (self.clone(), url.to_owned());
        let stopped = stop.clone();
        tokio::spawn(async move {
            use sqlx::Connection as _;
            let mut connection: Option<sqlx::PgConnection> = None;
            let mut batch = Vec::with_capacity(256);
            loop {
                tokio::select! {
                    received = queue.recv_many(&mut batch, 256) => if received == 0 { return },
                    () = stopped.cancelled() => return,
                }
                if connection.is_none() {
                    connection = sqlx::PgConnection::connect(&publish_url).await.ok();
                }
                let Some(conn) = connection.as_mut() else {
                    bus.dropped.fetch_add(batch.len() as u64, Ordering::Relaxed);
                    batch.clear();
                    continue;
                };
                for payload in notification_payloads(&batch) {
                    let sent = sqlx::query("SELECT pg_notify($1, $2)")
                        .bind(NOTIFY_CHANNEL)
                        .bind(payload)
                        .execute(&mut *conn)
                        .await;
                    if let Err(error) = sent {
                        tracing::warn!(%error, "events could not be sent to the other instances");
                        bus.dropped.fetch_add(1, Ordering::Relaxed);
                        connection = None;
                        break;
                    }
                }
                batch.clear();
            }
        });
        let listen_url = url.to_owned();
        tokio::spawn(self.clone().keep_receiving(stop, "Postgres", move || {
            let url = listen_url.clone();
            async move {
                use futures::StreamExt as _;
                let mut listener = sqlx::postgres::PgListener::connect(&url).await?;
                listener.listen(NOTIFY_CHANNEL).await?;
                // A lost connection ends the stream (its notifications are gone): listen again.
                let payloads = listener
                    .into_stream()
                    .take_while(|notification| std::future::ready(notification.is_ok()))
                    .filter_map(
                        |notification| async move { notification.ok().map(|n| n.payload().to_owned()) },
                    );
                Ok::<_, sqlx::Error>(payloads.boxed())
            }
        }));
    }

    /// Receives the other instances' events from a subscription `subscribe` makes (a stream of
    /// payloads, each a JSON array of events), making it again — after 100 ms, doubling to 5 s
    /// while it fails — whenever it fails or ends, until `stop`.
    async fn keep_receiving<F, Fut, E>(
        self: Arc<Self>,
        stop: CancellationToken,
        transport: &'static str,
        subscribe: F,
    ) where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<futures::stream::BoxStream<'static, String>, E>>,
        E: std::fmt::Display,
    {
        use futures::StreamExt as _;
        let mut backoff = Duration::from_millis(100);
        while !stop.is_cancelled() {
            let mut payloads = match subscribe().await {
                Ok(payloads) => payloads,
                Err(error) => {
                    tracing::warn!(%error, transport, "cannot receive the other instances' events; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(backoff) => {}
                        () = stop.cancelled() => return,
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            };
            backoff = Duration::from_millis(100);
            loop {
                let payload = tokio::select! {
                    payload = payloads.next() => payload,
                    () = stop.cancelled() => return,
                };
                let Some(payload) = payload else { break };
                match serde_json::from_str::<Vec<BusEvent>>(&payload) {
                    Ok(events) => events.into_iter().for_each(|event| self.arrived(event)),
                    Err(error) => tracing::debug!(%error, "ignoring a malformed event message"),
                }
            }
            tracing::warn!(transport, "receiving the other instances' events stopped; receiving again");
        }
    }
}

impl tool_executor::EventTap for Bus {
    fn event(&self, session: &tool_executor::Session, event: &Event) {
        self.publish(&session.config.tenant, session.id(), event);
    }
}

/// A batch of events as notification payloads of at most [`NOTIFY_BYTES`] each (JSON arrays);
/// an event too long alone has its output cut.
fn notification_payloads(batch: &[Arc<BusEvent>]) -> Vec<String> {
    let mut payloads = Vec::new();
    let mut current: Vec<String> = Vec::new();
    let mut size = 2;
    for event in batch {
        let Some(text) = fitted(event) else { continue };
        if size + text.len() + 1 > NOTIFY_BYTES && !current.is_empty() {
            payloads.push(format!("[{}]", current.join(",")));
            current.clear();
            size = 2;
        }
        size += text.len() + 1;
        current.push(text);
    }
    if !current.is_empty() {
        payloads.push(format!("[{}]", current.join(",")));
    }
    payloads
}

/// One event's JSON within a notification's size, its output's content cut (and its state left
/// out) when the whole would not fit; `None` when even that does not fit.
fn fitted(event: &BusEvent) -> Option<String> {
    let text = serde_json::to_string(event).ok()?;
    if text.len() + 2 <= NOTIFY_BYTES {
        return Some(text);
    }
    let mut cut = event.clone();
    let note = "\n[cut in transit between instances: the journal holds the whole]";
    match &mut cut.event {
        Event::Finished { output, .. } | Event::Failed { output, .. } => {
            output.state = None;
            let mut end = NOTIFY_BYTES / 2;
            while !output.content.is_char_boundary(end.min(output.content.len())) {
                end -= 1;
            }
            output.content.truncate(end.min(output.content.len()));
            output.content.push_str(note);
        }
        Event::Progress { progress, .. } => {
            if let Some(output) = &mut progress.output {
                let mut end = (NOTIFY_BYTES / 2).min(output.len());
                while !output.is_char_boundary(end) {
                    end -= 1;
                }
                output.truncate(end);
                output.push_str(note);
            }
        }
        Event::Proposed { arguments, .. } => *arguments = serde_json::json!({"cut": note.trim()}),
        _ => return None,
    }
    let text = serde_json::to_string(&cut).ok()?;
    (text.len() + 2 <= NOTIFY_BYTES).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(content: &str) -> Event {
        Event::Finished { call_id: "c".into(), output: tool_core::ToolOutput::ok(content.to_owned()) }
    }

    #[test]
    fn each_event_once_in_its_instances_order() {
        let bus = Bus::new("me");
        let mut watcher = bus.subscribe("t");
        bus.publish("t", "s", &finished("mine"));
        let other = |seq| BusEvent {
            instance: "other".into(),
            seq,
            tenant: "t".into(),
            session_id: "s".into(),
            at: 0,
            event: finished(&format!("theirs {seq}")),
        };
        bus.arrived(other(1));
        bus.arrived(other(1));
        bus.arrived(other(3));
        bus.arrived(other(2));
        let mine = BusEvent { instance: "me".into(), ..other(9) };
        bus.arrived(mine);
        let mut seen = Vec::new();
        while let Ok(event) = watcher.try_recv() {
            seen.push(format!("{}:{}", event.instance, event.seq));
        }
        assert_eq!(seen, ["me:1", "other:1", "other:3"]);
        // Another tenant's watcher sees none of it.
        let mut elsewhere = bus.subscribe("u");
        bus.publish("t", "s", &finished("x"));
        assert!(elsewhere.try_recv().is_err());
    }

    #[test]
    fn notifications_fit_and_long_results_are_cut() {
        let event = |content: &str| {
            Arc::new(BusEvent {
                instance: "i".into(),
                seq: 1,
                tenant: "t".into(),
                session_id: "s".into(),
                at: 0,
                event: finished(content),
            })
        };
        let batch: Vec<_> =
            (0..50).map(|n| event(&"x".repeat(300 + n))).chain([event(&"y".repeat(50_000))]).collect();
        let payloads = notification_payloads(&batch);
        assert!(payloads.len() > 1);
        let mut all = Vec::new();
        for payload in &payloads {
            assert!(payload.len() <= NOTIFY_BYTES, "{}", payload.len());
            all.extend(serde_json::from_str::<Vec<BusEvent>>(payload).unwrap());
        }
        assert_eq!(all.len(), 51);
        let Event::Finished { output, .. } = &all[50].event else { panic!() };
        assert!(output.content.ends_with("the journal holds the whole]"));
    }
}
