//! `toolhost approvals`: the approver inbox against a real `toolhost-server` on loopback (two
//! keys of one tenant: an agent that proposes, a person who decides), drawn on a VT100-emulated
//! terminal and driven by keys.

use std::time::Duration;

use crossterm::event::{Event as TermEvent, KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use serde_json::{Value, json};
use toolhost::inbox::{self, Server};
use toolhost::ui::vt::{ScreenHandle, Vt100Backend};
use toolhost_server::auth::{Role, stored_form_as};

const ALICE: &str = "key-alice-person";
const BOT: &str = "key-bot-agent";

struct Running {
    base: String,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
    folder: std::path::PathBuf,
}

async fn server() -> Running {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("acme");
    let folder = root.join("project");
    std::fs::create_dir_all(&folder).unwrap();
    let mut args = toolhost_server::ServeArgs::default();
    args.listen = "127.0.0.1:0".parse().unwrap();
    args.database_url = Some(format!("sqlite://{}/journal.db", dir.path().display()));
    args.state_dir = Some(dir.path().join("state"));
    args.api_keys = vec![
        stored_form_as("acme", Role::Person, "alice", ALICE),
        stored_form_as("acme", Role::Agent, "bot", BOT),
    ];
    args.workspace_roots = vec![toolhost_server::config::WorkspaceRoot::of("acme", &root)];
    let listener = tokio::net::TcpListener::bind(args.listen).await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let state = toolhost_server::AppState::build(args).await.unwrap();
    tokio::spawn(toolhost_server::serve(state, listener, std::future::pending()));
    Running { base, client: reqwest::Client::builder().no_proxy().build().unwrap(), _dir: dir, folder }
}

impl Running {
    async fn session(&self) -> String {
        let response: Value = self
            .client
            .post(format!("{}/v1/sessions", self.base))
            .bearer_auth(BOT)
            .json(&json!({"working_directory": self.folder}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        response["id"].as_str().unwrap_or_else(|| panic!("{response}")).to_owned()
    }

    /// Proposes a command as the agent; its result when it ends.
    fn propose(&self, session: &str, call: &str, command: &str) -> tokio::task::JoinHandle<Value> {
        let request = self
            .client
            .post(format!("{}/v1/sessions/{session}/calls", self.base))
            .bearer_auth(BOT)
            .json(&json!({"calls": [{"id": call, "name": "runCommand", "arguments": json!({"command": command}).to_string()}]}));
        tokio::spawn(async move {
            let response: Value = request.send().await.unwrap().json().await.unwrap();
            response["results"][0].clone()
        })
    }

    async fn get(&self, path: &str, key: &str) -> Value {
        self.client
            .get(format!("{}{path}", self.base))
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    async fn approval_of(&self, call: &str) -> String {
        for _ in 0..200 {
            let list = self.get("/v1/approvals", ALICE).await;
            if let Some(found) = list.as_array().and_then(|l| l.iter().find(|a| a["call_id"] == call)) {
                return found["id"].as_str().unwrap().to_owned();
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("no approval for {call}");
    }
}

fn key(c: char) -> TermEvent {
    TermEvent::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE))
}

async fn wait_for(screen: &ScreenHandle, what: &str) -> String {
    for _ in 0..300 {
        let text = screen.text();
        if text.contains(what) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("`{what}` never showed:\n{}", screen.text());
}

async fn wait_gone(screen: &ScreenHandle, what: &str) {
    for _ in 0..300 {
        if !screen.text().contains(what) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("`{what}` still shows:\n{}", screen.text());
}

async fn ended(pending: tokio::task::JoinHandle<Value>) -> Value {
    tokio::time::timeout(Duration::from_secs(20), pending).await.expect("the call ends").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_answers_a_servers_approvals_live_with_the_apps_keys() {
    let running = server().await;
    let session = running.session().await;
    // Waiting before the inbox opens: listed when it does.
    let first = running.propose(&session, "c1", "echo first");
    running.approval_of("c1").await;

    // Without a terminal it lists what waits and ends.
    let listed = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(["approvals", "--server", &running.base])
        .env("TOOLHOST_API_KEY", ALICE)
        .env("TOOLHOST_DATA_DIR", running._dir.path().join("app-data"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    assert!(text.contains("local-system/runCommand") && text.contains("needs approval"), "{text}");

    // A key the server does not know is refused with the server's reason.
    let stranger = Server::new(&running.base, Some("key-nobody".into())).unwrap();
    let refused = stranger.waiting().await.unwrap_err().to_string();
    assert!(refused.contains("401"), "{refused}");

    let backend = Vt100Backend::new(100, 32);
    let screen = backend.handle();
    let mut terminal = Terminal::new(backend).unwrap();
    let (keys, received) = tokio::sync::mpsc::unbounded_channel::<TermEvent>();
    let stream =
        Box::pin(futures::stream::unfold(
            received,
            |mut rx| async move { rx.recv().await.map(|e| (Ok(e), rx)) },
        ));
    let mut app = inbox::app(&running.base);
    app.question_grace = Duration::ZERO;
    app.choice_window = Duration::ZERO;
    let server = Server::new(&running.base, Some(ALICE.into())).unwrap();
    let inbox = tokio::spawn(async move { inbox::run(&mut terminal, stream, server, app).await });

    // The card and keys of the app's inline approvals; `y` allows it once.
    let shown = wait_for(&screen, "echo first").await;
    assert!(shown.contains("approval needed") && shown.contains("y yes, this once"), "{shown}");
    assert!(shown.contains("local-system/runCommand asked in session"), "{shown}");
    wait_for(&screen, "· live").await;
    keys.send(key('y')).unwrap();
    let result = ended(first).await;
    assert_eq!(result["status"], "executed", "{result}");
    let rows = running.get(&format!("/v1/journal?session_id={session}"), ALICE).await;
    let row = rows.as_array().unwrap().iter().find(|r| r["call_id"] == "c1").unwrap().clone();
    assert_eq!(row["decided_by"], "acme/person/alice via terminal", "{row}");
    assert_eq!(row["decision"], "allow_once");

    // Proposed while the inbox runs: it appears; decided elsewhere: it goes.
    let second = running.propose(&session, "c2", "echo second");
    wait_for(&screen, "echo second").await;
    let id = running.approval_of("c2").await;
    let decided = running
        .client
        .post(format!("{}/v1/approvals/{id}", running.base))
        .bearer_auth(ALICE)
        .json(&json!({"decision": {"kind": "deny"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(decided.status(), 200);
    wait_gone(&screen, "echo second").await;
    wait_for(&screen, "decided elsewhere").await;
    assert_eq!(ended(second).await["status"], "denied");

    // `n`, a reason and Enter: the model reads the reason.
    let third = running.propose(&session, "c3", "rm -rf build");
    wait_for(&screen, "rm -rf build").await;
    keys.send(key('n')).unwrap();
    for c in "use make clean".chars() {
        keys.send(key(c)).unwrap();
    }
    keys.send(TermEvent::Key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE))).unwrap();
    let result = ended(third).await;
    assert_eq!(result["status"], "denied", "{result}");
    assert!(result.to_string().contains("use make clean"), "{result}");

    // Ctrl-C twice quits (once only arms it, as in the agent's screen).
    for _ in 0..2 {
        keys.send(TermEvent::Key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL))).unwrap();
    }
    let app = tokio::time::timeout(Duration::from_secs(10), inbox).await.unwrap().unwrap().unwrap();
    assert!(app.approvals.is_empty());
}
