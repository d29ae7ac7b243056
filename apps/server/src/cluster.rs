//! Several instances behind one Redis: device presence, and one inbox list per instance through
//! which calls, results, progress, cancellations and approval decisions travel.
//!
//! Keys (under a prefix, `toolhost` by default):
//! * `{p}:instance:{id}` — present while the instance lives (refreshed every 3 s, expires in 10 s);
//! * `{p}:devices:{tenant}` — hash of device id → `{"instance", "tools"}`;
//! * `{p}:inbox:{id}` — the instance's inbox, a list of JSON [`ClusterMessage`]s.
//!
//! The inbox is read with `BLPOP` on a connection of its own with no response timeout, one second
//! at a time (DEPENDENCIES trap 4: a shared multiplexed connection would time the block out, and a
//! dropped `BLPOP` can lose an item). The loop is only stopped between two pops.

use std::sync::Arc;
use std::time::Duration;

use client_executor::ExecuteRequest;
use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tool_core::{Progress, ToolOutput};
use tool_executor::Decision;

/// What instances send each other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClusterMessage {
    /// Run this on a device connected to you; answer to `origin`.
    Execute {
        /// The instance that waits.
        origin: String,
        /// The tenant.
        tenant: String,
        /// The device.
        device_id: String,
        /// The request.
        request: ExecuteRequest,
        /// Sent before to a connection of the device that was lost: if the device is not here
        /// either, the call may or may not have run.
        #[serde(default)]
        resent: bool,
    },
    /// A device's result for a request `origin` sent.
    Result {
        /// The request.
        request_id: String,
        /// The result.
        output: ToolOutput,
    },
    /// A device's progress for a request.
    Progress {
        /// The request.
        request_id: String,
        /// The update.
        progress: Progress,
    },
    /// A device's result that reached another instance than the one holding the request (the
    /// device reconnected there).
    DeviceResult {
        /// The device's tenant (checked against the open request).
        tenant: String,
        /// The device.
        device_id: String,
        /// The request.
        request_id: String,
        /// The result.
        output: ToolOutput,
    },
    /// Stop a request.
    Cancel {
        /// The request.
        request_id: String,
    },
    /// A session ended on another instance: cancel its calls here and forget it.
    EndSession {
        /// The tenant.
        tenant: String,
        /// The session.
        session_id: String,
    },
    /// The operator reloaded keys and rules on one instance (`SIGHUP`): the others read theirs
    /// again too.
    Reload {
        /// The instance that was told.
        origin: String,
    },
    /// A person's decision on an approval that waits at the receiving instance.
    Decision {
        /// The tenant.
        tenant: String,
        /// The approval.
        approval_id: String,
        /// The decision.
        decision: Decision,
        /// Who decided.
        by: Option<String>,
    },
}

#[derive(Debug, Serialize, Deserialize)]
struct Presence {
    instance: String,
    tools: Vec<String>,
}

/// Why the cluster could not be joined.
#[derive(Debug, thiserror::Error)]
#[error("cannot use Redis at {url}: {source}")]
pub struct ClusterError {
    url: String,
    source: redis::RedisError,
}

/// This instance's handle on the cluster.
pub struct Cluster {
    instance_id: String,
    prefix: String,
    client: redis::Client,
    commands: ConnectionManager,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("instance_id", &self.instance_id).finish_non_exhaustive()
    }
}

impl Cluster {
    /// Connects to Redis.
    ///
    /// # Errors
    ///
    /// [`ClusterError`] when the URL is invalid or Redis does not answer.
    pub async fn connect(url: &str, prefix: &str, instance_id: &str) -> Result<Self, ClusterError> {
        let error = |source| ClusterError { url: redact(url), source };
        let client = redis::Client::open(url).map_err(error)?;
        let commands = client.get_connection_manager().await.map_err(error)?;
        let cluster =
            Self { instance_id: instance_id.to_owned(), prefix: prefix.to_owned(), client, commands };
        cluster.ping().await.map_err(error)?;
        Ok(cluster)
    }

    /// Whether Redis answers.
    ///
    /// # Errors
    ///
    /// Redis's error.
    pub async fn ping(&self) -> redis::RedisResult<()> {
        let mut commands = self.commands.clone();
        redis::cmd("PING").query_async::<String>(&mut commands).await.map(|_| ())
    }

    fn key(&self, parts: &[&str]) -> String {
        let mut key = self.prefix.clone();
        for part in parts {
            key.push(':');
            key.push_str(part);
        }
        key
    }

    /// Sends a message to an instance's inbox; false (and logged) when Redis did not take it.
    pub async fn send(&self, instance: &str, message: &ClusterMessage) -> bool {
        let Ok(text) = serde_json::to_string(message) else { return false };
        let mut commands = self.commands.clone();
        let inbox = self.key(&["inbox", instance]);
        // Sent once the push is acknowledged; the expiry (an inbox whose instance died does not
        // grow forever) is best effort.
        let pushed: redis::RedisResult<i64> = commands.rpush(&inbox, text).await;
        match pushed {
            Ok(_) => {
                let _: redis::RedisResult<bool> = commands.expire(&inbox, 3600).await;
                true
            }
            Err(error) => {
                tracing::warn!(%error, instance, "cluster send failed");
                false
            }
        }
    }

    /// The live instances (their presence keys), this one included.
    pub async fn instances(&self) -> Vec<String> {
        let mut commands = self.commands.clone();
        let prefix = self.key(&["instance", ""]);
        let mut found = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let page: redis::RedisResult<(u64, Vec<String>)> = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{prefix}*"))
                .arg("COUNT")
                .arg(100)
                .query_async(&mut commands)
                .await;
            let Ok((next, keys)) = page else { break };
            found.extend(keys.into_iter().filter_map(|k| k.strip_prefix(&prefix).map(str::to_owned)));
            if next == 0 {
                break;
            }
            cursor = next;
        }
        found
    }

    /// Announces a device connected here.
    pub async fn publish_device(&self, tenant: &str, device_id: &str, tools: &[String]) {
        let presence = Presence { instance: self.instance_id.clone(), tools: tools.to_vec() };
        let Ok(text) = serde_json::to_string(&presence) else { return };
        let mut commands = self.commands.clone();
        let result: redis::RedisResult<i64> =
            commands.hset(self.key(&["devices", tenant]), device_id, text).await;
        if let Err(error) = result {
            tracing::warn!(%error, "cluster publish_device failed");
        }
    }

    /// Withdraws a device, if it is still announced as connected here (compared and deleted in
    /// one script, so a device that just announced itself elsewhere is not withdrawn).
    pub async fn unpublish_device(&self, tenant: &str, device_id: &str) {
        const COMPARE_AND_DELETE: &str = "local v = redis.call('HGET', KEYS[1], ARGV[1]) \
            if v and string.find(v, ARGV[2], 1, true) then return redis.call('HDEL', KEYS[1], ARGV[1]) end \
            return 0";
        let mut commands = self.commands.clone();
        let ours = format!("\"instance\":\"{}\"", self.instance_id);
        let result: redis::RedisResult<i64> = redis::cmd("EVAL")
            .arg(COMPARE_AND_DELETE)
            .arg(1)
            .arg(self.key(&["devices", tenant]))
            .arg(device_id)
            .arg(ours)
            .query_async(&mut commands)
            .await;
        if let Err(error) = result {
            tracing::warn!(%error, "cluster unpublish_device failed");
        }
    }

    /// Another live instance holding a device of `tenant` (the given one, or any) that runs
    /// `tool` (or any tool).
    pub async fn find_device(
        &self,
        tenant: &str,
        device: Option<&str>,
        tool: Option<&str>,
    ) -> Option<(String, String)> {
        let mut commands = self.commands.clone();
        let all: std::collections::HashMap<String, String> =
            commands.hgetall(self.key(&["devices", tenant])).await.ok()?;
        let mut candidates: Vec<(String, Presence)> = all
            .into_iter()
            .filter(|(id, _)| device.is_none_or(|d| d == id))
            .filter_map(|(id, text)| serde_json::from_str::<Presence>(&text).ok().map(|p| (id, p)))
            .filter(|(_, p)| tool.is_none_or(|tool| p.tools.iter().any(|t| t == tool)))
            .filter(|(_, p)| p.instance != self.instance_id)
            .collect();
        candidates.sort_by(|a, b| a.0.cmp(&b.0));
        for (id, presence) in candidates {
            let alive: bool =
                commands.exists(self.key(&["instance", &presence.instance])).await.unwrap_or(false);
            if alive {
                return Some((presence.instance, id));
            }
        }
        None
    }

    /// Keeps this instance's presence key alive and reads its inbox until `shutdown`, handing each
    /// message to `handle`.
    pub fn spawn<F, Fut>(self: &Arc<Self>, shutdown: CancellationToken, handle: F)
    where
        F: Fn(ClusterMessage) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let presence = self.clone();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let key = presence.key(&["instance", &presence.instance_id]);
            let mut commands = presence.commands.clone();
            let mut ticks = tokio::time::interval(Duration::from_secs(3));
            loop {
                tokio::select! {
                    _ = ticks.tick() => {}
                    () = stop.cancelled() => {
                        let _: redis::RedisResult<i64> = commands.del(&key).await;
                        return;
                    }
                }
                let result: redis::RedisResult<()> = commands.set_ex(&key, 1, 10).await;
                if let Err(error) = result {
                    tracing::warn!(%error, "cluster presence refresh failed");
                }
            }
        });
        let inbox = self.clone();
        tokio::spawn(async move {
            let key = inbox.key(&["inbox", &inbox.instance_id]);
            let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
            let mut connection = None;
            while !shutdown.is_cancelled() {
                if connection.is_none() {
                    match inbox.client.get_multiplexed_async_connection_with_config(&config).await {
                        Ok(c) => connection = Some(c),
                        Err(error) => {
                            tracing::warn!(%error, "cluster inbox cannot connect; retrying");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            continue;
                        }
                    }
                }
                let Some(conn) = connection.as_mut() else { continue };
                let popped: redis::RedisResult<Option<(String, String)>> = conn.blpop(&key, 1.0).await;
                match popped {
                    Ok(Some((_, text))) => match serde_json::from_str::<ClusterMessage>(&text) {
                        Ok(message) => handle(message).await,
                        Err(error) => tracing::warn!(%error, "ignoring a malformed cluster message"),
                    },
                    Ok(None) => {}
                    Err(error) => {
                        tracing::warn!(%error, "cluster inbox read failed; reconnecting");
                        connection = None;
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        });
    }
}

fn redact(url: &str) -> String {
    // redis://user:password@host → redis://user:***@host
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}
