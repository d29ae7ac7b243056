//! The WebSocket endpoint where client executors (devices) connect.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use client_executor::{DeviceMessage, ServerMessage};
use futures::{SinkExt, StreamExt};
use tokio::sync::mpsc;

use crate::auth::Tenant;
use crate::state::AppState;

/// How long a new connection has to send its `register` frame.
const REGISTER_WITHIN: Duration = Duration::from_secs(10);
/// Largest frame a device may send.
const MAX_FRAME: usize = 16 * 1024 * 1024;

/// Upgrades to the device protocol (see `client_executor::protocol`). The key's tenant is the
/// device's tenant.
pub async fn connect(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    ws: WebSocketUpgrade,
) -> Response {
    ws.max_message_size(MAX_FRAME).on_upgrade(move |socket| serve_device(state, tenant, socket))
}

fn text(message: &ServerMessage) -> Message {
    Message::text(message.to_text())
}

async fn serve_device(state: Arc<AppState>, tenant: String, socket: WebSocket) {
    let (mut sink, mut stream) = socket.split();
    let first = tokio::time::timeout(REGISTER_WITHIN, stream.next()).await;
    let (device_id, tools) = match first {
        Ok(Some(Ok(Message::Text(frame)))) => match DeviceMessage::parse(&frame) {
            Ok(DeviceMessage::Register { device_id, tools }) => (device_id, tools),
            Ok(_) => return refuse(&mut sink, "the first frame must be `register`").await,
            Err(error) => return refuse(&mut sink, &error.to_string()).await,
        },
        _ => return refuse(&mut sink, "expected a `register` frame").await,
    };
    if device_id.is_empty() || device_id.len() > 128 || device_id.chars().any(char::is_control) {
        return refuse(&mut sink, "device_id must be 1 to 128 characters without control characters").await;
    }
    if let Some(unknown) = tools.iter().find(|t| !state.tools.contains(t)) {
        return refuse(&mut sink, &format!("this server has no enabled tool `{unknown}`")).await;
    }
    let (sender, mut outgoing) = mpsc::unbounded_channel();
    let generation = state.devices.register(&tenant, &device_id, tools.clone(), sender);
    // Announced before `registered` is sent: a registered device is reachable from every instance.
    if let Some(cluster) = &state.cluster {
        cluster.publish_device(&tenant, &device_id, &tools).await;
    }
    let registered =
        ServerMessage::Registered { device_id: device_id.clone(), instance_id: state.instance_id.clone() };
    if sink.send(text(&registered)).await.is_ok() {
        tracing::info!(%tenant, device = %device_id, "client executor connected");
        let mut ping = tokio::time::interval(Duration::from_secs(15));
        loop {
            tokio::select! {
                frame = stream.next() => match frame {
                    Some(Ok(Message::Text(frame))) => match DeviceMessage::parse(&frame) {
                        Ok(DeviceMessage::ToolResult { request_id, output }) => {
                            state.devices.on_result(&tenant, &device_id, &request_id, output).await;
                        }
                        Ok(DeviceMessage::Progress { request_id, progress }) => {
                            state.devices.on_progress(&tenant, &device_id, &request_id, progress).await;
                        }
                        Ok(DeviceMessage::Register { .. }) => {
                            tracing::warn!(device = %device_id, "ignoring a second register frame");
                        }
                        Err(error) => tracing::warn!(device = %device_id, %error, "ignoring a malformed frame"),
                    },
                    Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                    Some(Ok(_)) => {}
                },
                message = outgoing.recv() => match message {
                    Some(message) => if sink.send(text(&message)).await.is_err() { break },
                    // Replaced by a newer connection of the same device.
                    None => break,
                },
                _ = ping.tick() => if sink.send(Message::Ping(Vec::new().into())).await.is_err() { break },
                () = state.shutdown.cancelled() => {
                    let _ = sink.send(Message::Close(None)).await;
                    break;
                }
            }
        }
    }
    state.devices.disconnected(&tenant, &device_id, generation);
    tracing::info!(%tenant, device = %device_id, "client executor disconnected");
}

async fn refuse(sink: &mut futures::stream::SplitSink<WebSocket, Message>, message: &str) {
    let _ = sink.send(text(&ServerMessage::Error { message: message.to_owned() })).await;
    let _ = sink.send(Message::Close(None)).await;
}
