//! The WebSocket endpoint where client executors (devices) connect.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::IntoResponse as _;
use axum::response::Response;
use client_executor::{DeviceMessage, ServerMessage};
use futures::{SinkExt, StreamExt};
use tokio::sync::mpsc;

use crate::auth::Tenant;
use crate::error::ApiError;
use crate::state::AppState;

/// How long a new connection has to send its `register` frame.
const REGISTER_WITHIN: Duration = Duration::from_secs(10);
/// A connection that sends nothing (not even a pong to our pings) for this long is taken as dead.
const SILENT_FOR: Duration = Duration::from_secs(45);
/// How long one frame may take to go out before the connection is taken as dead.
const SEND_WITHIN: Duration = Duration::from_secs(10);
/// Largest frame a device may send.
const MAX_FRAME: usize = 16 * 1024 * 1024;

/// Upgrades to the device protocol (see `client_executor::protocol`). The key's tenant is the
/// device's tenant.
pub async fn connect(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    match ws {
        Ok(ws) => {
            ws.max_message_size(MAX_FRAME).on_upgrade(move |socket| serve_device(state, tenant, socket))
        }
        Err(rejection) => ApiError::new(
            rejection.status(),
            "bad_request",
            format!("a WebSocket upgrade is expected here: {}", rejection.body_text()),
        )
        .into_response(),
    }
}

fn text(message: &ServerMessage) -> Message {
    Message::text(message.to_text())
}

async fn serve_device(state: Arc<AppState>, tenant: String, socket: WebSocket) {
    let (mut sink, mut stream) = socket.split();
    let first = tokio::time::timeout(REGISTER_WITHIN, stream.next()).await;
    let (device_id, tools, boot) = match first {
        Ok(Some(Ok(Message::Text(frame)))) => match DeviceMessage::parse(&frame) {
            Ok(DeviceMessage::Register { device_id, tools, boot, working_directory }) => {
                tracing::info!(device = %device_id, folder = ?working_directory, "device registering");
                (device_id, tools, boot)
            }
            Ok(_) => return refuse(&mut sink, "the first frame must be `register`").await,
            Err(error) => return refuse(&mut sink, &error.to_string()).await,
        },
        _ => return refuse(&mut sink, "expected a `register` frame").await,
    };
    if device_id.is_empty() || device_id.len() > 128 || device_id.chars().any(char::is_control) {
        return refuse(&mut sink, "device_id must be 1 to 128 characters without control characters").await;
    }
    // A device may offer more than this server enables: it serves the tools both have.
    let offered = tools.len();
    let tools: Vec<String> = tools.into_iter().filter(|t| state.tools.contains(t)).collect();
    if tools.is_empty() {
        return refuse(
            &mut sink,
            &format!("this server enables none of the offered tools; it runs: {}", state.tools.join(", ")),
        )
        .await;
    }
    if tools.len() < offered {
        tracing::info!(device = %device_id, "device offers tools this server does not enable; using the rest");
    }
    let (sender, mut outgoing) = mpsc::unbounded_channel();
    let generation = state.devices.register(&tenant, &device_id, boot, tools.clone(), sender);
    // Announced before `registered` is sent: a registered device is reachable from every instance.
    if let Some(cluster) = &state.cluster {
        cluster.publish_device(&tenant, &device_id, &tools).await;
    }
    let registered =
        ServerMessage::Registered { device_id: device_id.clone(), instance_id: state.instance_id.clone() };
    if sink.send(text(&registered)).await.is_ok() {
        tracing::info!(%tenant, device = %device_id, "client executor connected");
        let mut ping = tokio::time::interval(Duration::from_secs(15));
        let mut heard = tokio::time::Instant::now();
        loop {
            tokio::select! {
                frame = stream.next() => {
                    heard = tokio::time::Instant::now();
                    match frame {
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
                    }
                },
                message = outgoing.recv() => match message {
                    Some(message) => {
                        // A device that stops reading must not block this loop (and its silence check).
                        match tokio::time::timeout(SEND_WITHIN, sink.send(text(&message))).await {
                            Ok(Ok(())) => {}
                            _ => break,
                        }
                    }
                    // Replaced by a newer connection of the same device.
                    None => break,
                },
                _ = ping.tick() => {
                    if heard.elapsed() > SILENT_FOR {
                        tracing::warn!(device = %device_id, "device silent for too long; dropping the connection");
                        break;
                    }
                    if sink.send(Message::Ping(Vec::new().into())).await.is_err() { break }
                }
                () = state.closing.cancelled() => {
                    // "Going away": the device reconnects (to another instance, behind a balancer).
                    let frame = axum::extract::ws::CloseFrame {
                        code: axum::extract::ws::close_code::AWAY,
                        reason: "the server is shutting down".into(),
                    };
                    let _ = sink.send(Message::Close(Some(frame))).await;
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
