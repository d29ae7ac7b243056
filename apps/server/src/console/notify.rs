//! Telling people that a call waits for them: for each approval (or question) asked at this
//! instance, one message to each channel the operator configured for its tenant (`[notify]` in
//! the configuration file: webhooks, e-mail), with a deep link into the console; and a follow-up
//! when it expires undecided.
//!
//! One message per approval across all instances: only the instance whose pipeline asked sends
//! it (it reads its own events, not the other instances'). Sending never holds up the call: each
//! message goes out in a task of its own, retried with a backoff, and a channel that gives up is
//! logged (`notify.failed`).

use std::sync::Arc;

use serde_json::Value;
use tool_executor::Event;

use crate::state::AppState;

/// The channels of each tenant (`*`: every tenant's).
#[derive(Debug, Default)]
pub struct Notifications {
    channels: Vec<(String, notify::Notifier)>,
}

impl Notifications {
    /// The channels the settings name.
    ///
    /// # Errors
    ///
    /// A channel that cannot be made (an invalid URL or address).
    pub fn new(settings: &crate::config::NotifySettings) -> Result<Self, notify::NotifyError> {
        let mut channels = Vec::new();
        for (tenant, config) in settings.channels() {
            channels.push((tenant, notify::Notifier::new(&[config])?));
        }
        Ok(Self { channels })
    }

    /// Whether any channel is configured.
    pub fn is_empty(&self) -> bool {
        self.channels.is_empty()
    }

    fn send(&self, tenant: &str, message: &notify::Message) {
        for (owner, notifier) in &self.channels {
            if owner == "*" || owner == tenant {
                notifier.spawn(message.clone());
            }
        }
    }
}

/// A line about what waits: `tool/api` and the gist of its arguments (a command, a path).
fn summary(tool: &str, api: &str, arguments: &Value) -> String {
    let gist = ["command", "path", "url", "query", "question"]
        .iter()
        .find_map(|key| arguments.get(*key).and_then(Value::as_str))
        .map(|text| {
            let short: String = text.chars().take(160).collect();
            if text.chars().count() > 160 { format!("{short}…") } else { short }
        });
    match gist {
        Some(gist) => format!("{tool}/{api}: {gist}"),
        None => format!("{tool}/{api}"),
    }
}

/// Sends a message for every approval asked at this instance, until it stops.
pub fn spawn(state: &Arc<AppState>, notifications: Arc<Notifications>) {
    if notifications.is_empty() {
        return;
    }
    let mut events = state.bus.subscribe_local();
    let weak = Arc::downgrade(state);
    let closing = state.closing.clone();
    tokio::spawn(async move {
        loop {
            let event = tokio::select! {
                event = events.recv() => event,
                () = closing.cancelled() => return,
            };
            let event = match event {
                Ok(event) => event,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "notifications fell behind the events; some were not sent");
                    continue;
                }
                Err(_) => return,
            };
            let Some(state) = weak.upgrade() else { return };
            let (approval_id, expired) = match &event.event {
                Event::PermissionRequested { approval_id, .. } | Event::QuestionAsked { approval_id, .. } => {
                    (approval_id.clone(), false)
                }
                Event::PermissionDenied { approval_id: Some(id), outcome: Some(outcome), .. }
                    if outcome == "expired" =>
                {
                    (id.clone(), true)
                }
                _ => continue,
            };
            let Ok(Some(row)) = state.journal.get_approval(&event.tenant, &approval_id).await else {
                continue;
            };
            let link = format!("{}/console/approvals/{}", state.console_url(), row.id);
            let what = summary(&row.tool, &row.api, &row.arguments);
            let (subject, text) = if expired {
                (
                    format!("Expired: {}/{} was not decided", row.tool, row.api),
                    format!(
                        "No one decided in time, so it did not run. Tenant {}, session {}.\n{what}",
                        row.tenant, row.session_id
                    ),
                )
            } else if row.reason == tool_executor::approval::QUESTION {
                (
                    "A question waits for you".to_owned(),
                    format!("Tenant {}, session {}.\n{what}", row.tenant, row.session_id),
                )
            } else {
                (
                    format!("Approval needed: {}/{}", row.tool, row.api),
                    format!(
                        "{what}\nWhy: {}. Tenant {}, session {}.",
                        row.reason, row.tenant, row.session_id
                    ),
                )
            };
            let message = notify::Message::new(subject, text)
                .link(link)
                .field("event", if expired { "approval.expired" } else { "approval.asked" })
                .field("approval_id", row.id.clone())
                .field("tenant", row.tenant.clone())
                .field("session_id", row.session_id.clone())
                .field("call_id", row.call_id.clone())
                .field("tool", row.tool.clone())
                .field("api", row.api.clone())
                .field("summary", what)
                .field("reason", row.reason.clone())
                .field("created_at", row.created_at);
            notifications.send(&row.tenant, &message);
        }
    });
}
