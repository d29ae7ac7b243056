//! A real server on a loopback port, with its own journal, for the tests.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::oneshot;
use toolhost_server::{AppState, ServeArgs};

pub struct TestServer {
    pub base: String,
    pub state: Arc<AppState>,
    pub stop: Option<oneshot::Sender<()>>,
    pub handle: tokio::task::JoinHandle<anyhow::Result<()>>,
    pub dir: tempfile::TempDir,
    pub client: reqwest::Client,
    pub key: Option<String>,
}

pub fn args(dir: &std::path::Path) -> ServeArgs {
    let mut args = ServeArgs::default();
    args.listen = "127.0.0.1:0".parse().unwrap();
    args.database_url = Some(format!("sqlite://{}/journal.db", dir.display()));
    args.state_dir = Some(dir.join("state"));
    args.shutdown_grace_secs = 5;
    args.device_reconnect_grace_ms = 1000;
    args
}

impl TestServer {
    /// A server with default settings on a fresh SQLite journal.
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let args = args(dir.path());
        Self::start_with(dir, args).await
    }

    pub async fn start_with(dir: tempfile::TempDir, args: ServeArgs) -> Self {
        let listener = tokio::net::TcpListener::bind(args.listen).await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let state = AppState::build(args).await.unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let handle = tokio::spawn(toolhost_server::serve(state.clone(), listener, async move {
            let _ = stopped.await;
        }));
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        Self { base, state, stop: Some(stop), handle, dir, client, key: None }
    }

    pub fn with_key(mut self, key: &str) -> Self {
        self.key = Some(key.to_owned());
        self
    }

    /// The same server, spoken to with another key (this one keeps it running).
    #[allow(dead_code)]
    pub fn as_key(&self, key: &str) -> TestServer {
        TestServer {
            base: self.base.clone(),
            state: self.state.clone(),
            stop: None,
            handle: tokio::spawn(async { Ok(()) }),
            dir: tempfile::tempdir().unwrap(),
            client: self.client.clone(),
            key: Some(key.to_owned()),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn auth(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let response = self.auth(self.client.get(self.url(path))).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self.auth(self.client.post(self.url(path))).json(&body).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        let response = self.auth(self.client.delete(self.url(path))).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Opens a session; returns its id.
    pub async fn session(&self, body: Value) -> String {
        let (status, view) = self.post("/v1/sessions", body).await;
        assert_eq!(status, 201, "{view}");
        view["id"].as_str().unwrap().to_owned()
    }

    /// The function names a session's model is given now (its Anthropic catalogue).
    #[allow(dead_code)]
    pub async fn declared(&self, session: &str) -> Vec<String> {
        let (status, catalogue) =
            self.get(&format!("/v1/sessions/{session}/catalogue?provider=anthropic")).await;
        assert_eq!(status, 200, "{catalogue}");
        catalogue["functions"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f["name"].as_str())
            .map(str::to_owned)
            .collect()
    }

    /// Submits one call and returns its result.
    pub async fn call(&self, session: &str, id: &str, name: &str, arguments: Value) -> Value {
        let body = json!({"calls": [{"id": id, "name": name, "arguments": arguments.to_string()}]});
        let (status, response) = self.post(&format!("/v1/sessions/{session}/calls"), body).await;
        assert_eq!(status, 200, "{response}");
        response["results"][0].clone()
    }

    /// Waits until the tenant has a pending approval for `call_id`; returns its id.
    pub async fn wait_for_approval(&self, call_id: &str) -> String {
        for _ in 0..200 {
            let (_, list) = self.get("/v1/approvals").await;
            if let Some(found) = list.as_array().and_then(|l| l.iter().find(|a| a["call_id"] == call_id)) {
                return found["id"].as_str().unwrap().to_owned();
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("no approval for {call_id}");
    }

    /// Stops the server gracefully and waits for it.
    pub async fn stop(mut self) -> tempfile::TempDir {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(30), &mut self.handle).await.unwrap().unwrap().unwrap();
        self.dir
    }
}

/// A folder with `notes.txt` inside, for sessions.
pub fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "hello from inside\n").unwrap();
    dir
}

/// A file outside every session's scope (the path-scope audit lets sessions use the temp
/// folders, so it cannot be a temp file).
pub const OUTSIDE: &str = "/etc/passwd";

pub type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A hand-driven device: connects and registers, nothing else.
pub async fn raw_device(base: &str, key: Option<&str>, device_id: &str, tools: &[&str]) -> Socket {
    raw_device_boot(base, key, device_id, tools, None).await
}

/// A hand-driven device of a given process start (`boot`).
pub async fn raw_device_boot(
    base: &str,
    key: Option<&str>,
    device_id: &str,
    tools: &[&str],
    boot: Option<&str>,
) -> Socket {
    use futures::SinkExt as _;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let url = format!("{}{}", base.replace("http://", "ws://"), client_executor::protocol::DEVICE_PATH);
    let mut request = url.into_client_request().unwrap();
    if let Some(key) = key {
        request.headers_mut().insert("authorization", format!("Bearer {key}").parse().unwrap());
    }
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let register = client_executor::DeviceMessage::Register {
        device_id: device_id.into(),
        tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        boot: boot.map(str::to_owned),
        working_directory: None,
    };
    socket.send(tokio_tungstenite::tungstenite::Message::text(register.to_text())).await.unwrap();
    match next_message(&mut socket).await {
        Some(client_executor::ServerMessage::Registered { .. }) => socket,
        other => panic!("not registered: {other:?}"),
    }
}

/// The next protocol message (pings skipped); `None` when the socket closes.
pub async fn next_message(socket: &mut Socket) -> Option<client_executor::ServerMessage> {
    use futures::StreamExt as _;
    loop {
        let frame =
            tokio::time::timeout(Duration::from_secs(15), socket.next()).await.expect("no frame within 15 s");
        match frame {
            Some(Ok(tokio_tungstenite::tungstenite::Message::Text(text))) => {
                return Some(client_executor::ServerMessage::parse(&text).unwrap());
            }
            Some(Ok(tokio_tungstenite::tungstenite::Message::Close(_)) | Err(_)) | None => return None,
            Some(Ok(_)) => {}
        }
    }
}

/// The next `tool_execute`.
pub async fn next_execute(socket: &mut Socket) -> client_executor::ExecuteRequest {
    loop {
        match next_message(socket).await {
            Some(client_executor::ServerMessage::ToolExecute(request)) => return request,
            Some(_) => {}
            None => panic!("socket closed before a tool_execute"),
        }
    }
}

pub async fn send(socket: &mut Socket, message: &client_executor::DeviceMessage) {
    use futures::SinkExt as _;
    socket.send(tokio_tungstenite::tungstenite::Message::text(message.to_text())).await.unwrap();
}

/// Runs the reference device (`toolhost-device`'s library) against `base` until the token fires.
pub fn spawn_device(
    base: &str,
    key: Option<&str>,
    device_id: &str,
) -> (tokio_util::sync::CancellationToken, tokio::task::JoinHandle<()>) {
    spawn_device_in(base, key, device_id, None)
}

/// A device with a folder of its own (the server's sessions cannot move it).
pub fn spawn_device_in(
    base: &str,
    key: Option<&str>,
    device_id: &str,
    folder: Option<&std::path::Path>,
) -> (tokio_util::sync::CancellationToken, tokio::task::JoinHandle<()>) {
    let mut config = client_executor::device::DeviceConfig::new(base, device_id);
    config.api_key = key.map(str::to_owned);
    config.working_directory = folder.map(std::path::Path::to_path_buf);
    config.reconnect_delay = Duration::from_millis(100);
    let executor = client_executor::device::builtin_executor().unwrap();
    let token = tokio_util::sync::CancellationToken::new();
    let stop = token.clone();
    let handle = tokio::spawn(async move {
        client_executor::device::run(config, executor, stop).await.unwrap();
    });
    (token, handle)
}

/// Waits until the server lists `device_id` for the caller's tenant.
pub async fn wait_for_device(server: &TestServer, device_id: &str) {
    for _ in 0..400 {
        let (_, devices) = server.get("/v1/devices").await;
        if devices.as_array().is_some_and(|d| d.iter().any(|x| x["device_id"] == device_id)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("device {device_id} never connected");
}

/// Submits a batch in the background; the task yields the response body.
pub fn submit(server: &TestServer, session: &str, calls: Value) -> tokio::task::JoinHandle<Value> {
    let mut request = server
        .client
        .post(server.url(&format!("/v1/sessions/{session}/calls")))
        .json(&json!({"calls": calls}));
    if let Some(key) = &server.key {
        request = request.bearer_auth(key);
    }
    tokio::spawn(async move {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        response.json::<Value>().await.unwrap()
    })
}

/// A loopback port nothing listens on (for a server binary started by the test).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits until a server at `base` answers `/healthz` (10 s at most); whether it did.
pub async fn wait_healthy(base: &str) -> bool {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    for _ in 0..400 {
        if client.get(format!("{base}/healthz")).send().await.is_ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

/// The server binary with a clean environment (no `TOOLHOST_*` of the machine running the
/// tests), warnings only, and no standard streams.
pub fn server_binary() -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost-server"));
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    command
}
