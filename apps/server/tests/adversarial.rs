//! A hostile tenant against the real `toolhost-server` binary, started with two tenants and an
//! environment full of secrets: every try is refused, and the refusal shows in the result or the
//! status code.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

const SECRET_VALUES: [&str; 4] = ["hunter2-db", "tok-3f9a", "redis-pw-77", "acme:"];

struct Server {
    child: Child,
    base: String,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
    data: PathBuf,
    root_a: PathBuf,
    root_b: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a process is alive (not a zombie).
fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()) != Some("Z")
    })
}

/// Waits up to five seconds for `pid` to be gone.
async fn gone(pid: u64) -> bool {
    for _ in 0..100 {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Server {
    async fn start() -> Self {
        Self::start_in(tempfile::tempdir().unwrap()).await
    }

    /// Starts the server on the folders of `dir` (a restart reuses them).
    async fn start_in(dir: tempfile::TempDir) -> Self {
        Self::start_with(dir, &[]).await
    }

    /// Starts the server on the folders of `dir`, with more variables in its environment.
    async fn start_with(dir: tempfile::TempDir, more: &[(&str, &str)]) -> Self {
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let (data, root_a, root_b) = (root.join("data"), root.join("acme"), root.join("globex"));
        for folder in [&data, &root_a, &root_b] {
            std::fs::create_dir_all(folder).unwrap();
        }
        std::fs::write(root_a.join("secret.txt"), "acme's secret\n").unwrap();
        let approver = toolhost_server::auth::Role::Approver;
        let keys = [
            toolhost_server::auth::stored_form("acme", "key-acme"),
            toolhost_server::auth::stored_form("globex", "key-globex"),
            toolhost_server::auth::stored_form_as("acme", approver, "alice", "key-acme-alice"),
        ]
        .join(",");
        let deny = root.join("deny.json");
        std::fs::write(
            &deny,
            r#"[{"tool": "local-system", "api": "runCommand", "match": {"command": "curl *"}, "reason": "no downloads"}]"#,
        )
        .unwrap();
        let port = free_port();
        let base = format!("http://127.0.0.1:{port}");
        let child = Command::new(env!("CARGO_BIN_EXE_toolhost-server"))
            .env("TOOLHOST_LISTEN", format!("127.0.0.1:{port}"))
            .env("TOOLHOST_DATABASE_URL", format!("sqlite://{}/journal.db", data.display()))
            .env("TOOLHOST_STATE_DIR", &data)
            .env("TOOLHOST_API_KEYS", &keys)
            .env(
                "TOOLHOST_ALLOW_LIST_PERMITS",
                "local-system/runCommand,local-system/getCommandOutput,local-system/killCommand",
            )
            .env("TOOLHOST_DENY_RULES_FILE", &deny)
            .env("TOOLHOST_WORKSPACE_ROOTS", format!("acme={},globex={}", root_a.display(), root_b.display()))
            // What an operator has lying around in the server's environment.
            .env("DATABASE_PASSWORD", "hunter2-db")
            .env("SERVICE_TOKEN", "tok-3f9a")
            .env("CACHE", "redis://:redis-pw-77@127.0.0.1:6379/0")
            .env("RUST_LOG", "warn")
            .envs(more.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let server = Self { child, base, client, _dir: dir, data, root_a, root_b };
        for _ in 0..400 {
            if server.client.get(format!("{}/healthz", server.base)).send().await.is_ok() {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the server did not start");
    }

    /// Kills the server with SIGKILL and hands back its folders.
    fn crash(mut self) -> tempfile::TempDir {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        std::mem::replace(&mut self._dir, tempfile::tempdir().unwrap())
    }

    async fn request(
        &self,
        key: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self.client.request(method, format!("{}{path}", self.base)).bearer_auth(key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn session(&self, key: &str, body: Value) -> (u16, Value) {
        self.request(key, reqwest::Method::POST, "/v1/sessions", Some(body)).await
    }

    /// A session whose allow-list runs commands without asking (so the sandbox is what stands in
    /// the way).
    async fn open(&self, key: &str, root: &Path) -> String {
        let allow = ["local-system/runCommand", "local-system/getCommandOutput", "local-system/killCommand"];
        let (status, view) = self
            .session(
                key,
                json!({"working_directory": root, "approval_mode": "allow_list", "allow_list": allow}),
            )
            .await;
        assert_eq!(status, 201, "{view}");
        assert_eq!(view["sandbox"], json!({"mode": "workspace-write", "network": "off"}), "{view}");
        view["id"].as_str().unwrap().to_owned()
    }

    async fn call(&self, key: &str, session: &str, name: &str, arguments: Value) -> Value {
        let id = format!("c{}", free_port());
        let body = json!({"calls": [{"id": id, "name": name, "arguments": arguments.to_string()}]});
        let (status, response) = self
            .request(key, reqwest::Method::POST, &format!("/v1/sessions/{session}/calls"), Some(body))
            .await;
        assert_eq!(status, 200, "{response}");
        response["results"][0].clone()
    }

    async fn run(&self, key: &str, session: &str, command: &str) -> Value {
        self.call(key, session, "runCommand", json!({"command": command})).await
    }
}

fn content(result: &Value) -> &str {
    result["output"]["content"].as_str().unwrap_or_default()
}

fn succeeded(result: &Value) -> bool {
    result["status"] == "executed"
}

#[tokio::test]
async fn a_hostile_tenant_gets_its_folder_and_nothing_else() {
    let server = Server::start().await;
    let acme = server.open("key-acme", &server.root_a).await;
    let globex = server.open("key-globex", &server.root_b).await;

    // Another tenant's root is not this tenant's to open.
    let (status, body) = server.session("key-globex", json!({"working_directory": server.root_a})).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("outside this tenant's workspace roots"),
        "{body}"
    );

    // The server's environment stays the server's.
    let env = server.run("key-globex", &globex, "env").await;
    assert!(succeeded(&env), "{env}");
    for secret in SECRET_VALUES {
        assert!(!content(&env).contains(secret), "`{secret}` leaked: {}", content(&env));
    }
    assert!(!content(&env).contains("TOOLHOST_"), "{}", content(&env));

    // Another tenant's folder can be neither read nor written.
    let secret = server.root_a.join("secret.txt");
    let read = server.run("key-globex", &globex, &format!("cat {}", secret.display())).await;
    assert!(!succeeded(&read) && content(&read).contains("Permission denied"), "{read}");
    let write = server
        .run("key-globex", &globex, &format!("echo owned > {}/planted.txt", server.root_a.display()))
        .await;
    assert!(!succeeded(&write), "{write}");
    assert!(content(&write).contains("denied by the sandbox"), "the model is told why: {write}");
    assert!(!server.root_a.join("planted.txt").exists());
    // Nor the server's journal and data, nor the shared temp folder.
    for target in [server.data.display().to_string(), "/tmp".to_owned()] {
        let listed = server.run("key-globex", &globex, &format!("ls {target}")).await;
        assert!(!succeeded(&listed), "{target}: {listed}");
    }
    // Its own folder works as it should.
    let own = server
        .run(
            "key-globex",
            &globex,
            "echo mine > notes.txt && cat notes.txt && echo tmp > $TMPDIR/x && cat $TMPDIR/x",
        )
        .await;
    assert!(succeeded(&own) && content(&own).contains("mine"), "{own}");

    // Jobs: ids cannot be guessed, and another tenant's id is not found.
    let started = server
        .call(
            "key-acme",
            &acme,
            "runCommand",
            json!({"command": "echo acme-job; sleep 30", "background": true}),
        )
        .await;
    assert!(succeeded(&started), "{started}");
    let job = started["output"]["state"]["command_id"].as_str().unwrap().to_owned();
    assert!(job.len() > 20, "{job}");
    for api in ["getCommandOutput", "killCommand"] {
        let stolen = server.call("key-globex", &globex, api, json!({"commandId": job})).await;
        assert_eq!(stolen["output"]["error"]["kind"], "not_found", "{stolen}");
        assert!(!content(&stolen).contains("are: cmd-"), "no ids are listed: {stolen}");
    }
    // The output so far came with the start; later polls bring only what is new.
    let mut seen = content(&started).to_owned();
    for _ in 0..100 {
        let polled = server.call("key-acme", &acme, "getCommandOutput", json!({"commandId": job})).await;
        assert!(content(&polled).contains("still running"), "{polled}");
        seen.push_str(content(&polled));
        if seen.contains("acme-job") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(seen.contains("acme-job"), "its owner reads the job's output: {seen}");

    // A signal cannot reach another tenant's process either.
    let pid = started["output"]["state"]["pid"].as_u64().unwrap();
    let kill = server.run("key-globex", &globex, &format!("kill -9 -{pid} || kill -9 {pid}")).await;
    assert!(!succeeded(&kill), "{kill}");
    let polled = server.call("key-acme", &acme, "getCommandOutput", json!({"commandId": job})).await;
    assert!(content(&polled).contains("still running"), "{polled}");

    // A command's full output is in the session's own folders, closed to everyone else.
    let ran = server.run("key-globex", &globex, "echo spilled").await;
    let spill = PathBuf::from(ran["output"]["state"]["output_path"].as_str().unwrap());
    use std::os::unix::fs::PermissionsExt;
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&spill), 0o600, "{spill:?}");
    assert_eq!(mode(spill.parent().unwrap()), 0o700);
    assert_eq!(mode(spill.parent().unwrap().parent().unwrap()), 0o700);
    let peek = server.run("key-acme", &acme, &format!("cat {}", spill.display())).await;
    assert!(!succeeded(&peek), "another tenant reads no one's output: {peek}");

    // Reads of FIFOs fail at once and pin nothing: the other tenant goes on as before.
    let fifo = server.root_b.join("trap");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let reads = (0..48).map(|_| server.call("key-globex", &globex, "readFile", json!({"path": "trap"})));
    let results =
        tokio::time::timeout(Duration::from_secs(20), futures::future::join_all(reads)).await.unwrap();
    for result in &results {
        assert!(content(result).contains("is a FIFO, not a regular file"), "{result}");
    }
    std::fs::write(server.root_a.join("fine.txt"), "still served\n").unwrap();
    let fine = server.call("key-acme", &acme, "readFile", json!({"path": "fine.txt"})).await;
    assert!(content(&fine).contains("still served"), "{fine}");

    // Keyed tenants cannot turn the sandbox off or the network on.
    let (status, body) = server
        .session("key-globex", json!({"working_directory": server.root_b, "sandbox": {"mode": "off"}}))
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("not allowed on this server"), "{body}");
    let (status, body) = server
        .session("key-globex", json!({"working_directory": server.root_b, "sandbox": {"network": "on"}}))
        .await;
    assert_eq!(status, 400, "{body}");

    // Ending a session kills its jobs.
    let (status, _) =
        server.request("key-acme", reqwest::Method::DELETE, &format!("/v1/sessions/{acme}"), None).await;
    assert_eq!(status, 200);
    let mut gone = false;
    for _ in 0..100 {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "the ended session's job {pid} is still running");
}

#[tokio::test]
async fn an_agent_key_cannot_approve_its_own_calls_or_widen_its_session() {
    let server = Server::start().await;
    // No auto-run, and no allow-list that runs writes, for a key holder.
    let (status, body) = server
        .session("key-acme", json!({"working_directory": server.root_a, "approval_mode": "auto_run"}))
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("`auto_run` is not allowed"), "{body}");
    let (status, body) = server
        .session(
            "key-acme",
            json!({"working_directory": server.root_a, "approval_mode": "allow_list", "allow_list": ["local-system"]}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("local-system/writeFile"), "{body}");
    // An approver key proposes nothing.
    let (status, body) = server.session("key-acme-alice", json!({"working_directory": server.root_a})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (403, Some("forbidden")), "{body}");

    // A manual session: a command waits for a person.
    let (status, view) = server.session("key-acme", json!({"working_directory": server.root_a})).await;
    assert_eq!(status, 201, "{view}");
    let session = view["id"].as_str().unwrap().to_owned();
    let waiting = {
        let (client, base, session) = (server.client.clone(), server.base.clone(), session.clone());
        tokio::spawn(async move {
            let body = json!({"calls": [{"id": "w", "name": "runCommand", "arguments": r#"{"command": "echo approved"}"#}]});
            client
                .post(format!("{base}/v1/sessions/{session}/calls"))
                .bearer_auth("key-acme")
                .json(&body)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        })
    };
    let mut approval = None;
    for _ in 0..200 {
        let (_, list) = server.request("key-acme", reqwest::Method::GET, "/v1/approvals", None).await;
        if let Some(id) = list.as_array().and_then(|l| l.first()).and_then(|a| a["id"].as_str()) {
            approval = Some(id.to_owned());
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let path = format!("/v1/approvals/{}", approval.expect("the command asked"));
    let decision = json!({"decision": {"kind": "allow_once"}, "by": "mallory"});
    // The agent cannot decide its own call; the approver can, and is recorded as who decided.
    let (status, body) =
        server.request("key-acme", reqwest::Method::POST, &path, Some(decision.clone())).await;
    assert_eq!((status, body["error"]["code"].as_str()), (403, Some("forbidden")), "{body}");
    let (status, body) = server.request("key-acme-alice", reqwest::Method::POST, &path, Some(decision)).await;
    assert_eq!(status, 200, "{body}");
    let result = tokio::time::timeout(Duration::from_secs(20), waiting).await.unwrap().unwrap();
    assert_eq!(result["results"][0]["status"], "executed", "{result}");
    let (_, rows) = server
        .request("key-acme", reqwest::Method::GET, &format!("/v1/journal?session_id={session}"), None)
        .await;
    assert_eq!(rows[0]["decided_by"], "acme/approver/alice", "{rows}");

    // The operator's deny list holds even where the allow-list would run the call.
    let open = server.open("key-acme", &server.root_a).await;
    let denied = server.run("key-acme", &open, "curl http://127.0.0.1:1/x").await;
    assert_eq!(denied["status"], "blocked", "{denied}");
    assert!(content(&denied).contains("no downloads"), "{denied}");
}

#[tokio::test]
async fn commands_die_with_a_killed_server() {
    let server = Server::start().await;
    let session = server.open("key-acme", &server.root_a).await;
    // A background job whose shell has a child of its own (a grandchild of the server).
    let started = server
        .call(
            "key-acme",
            &session,
            "runCommand",
            json!({"command": "sleep 300 & echo child=$!; wait", "background": true}),
        )
        .await;
    assert!(succeeded(&started), "{started}");
    let shell = started["output"]["state"]["pid"].as_u64().unwrap();
    // The output so far came with the start; polls bring only what is new.
    let mut seen = content(&started).to_owned();
    let mut child = None;
    for _ in 0..100 {
        if let Some(pid) = seen.split("child=").nth(1).and_then(|rest| rest.split_whitespace().next()) {
            child = pid.parse::<u64>().ok();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let polled = server
            .call(
                "key-acme",
                &session,
                "getCommandOutput",
                json!({"commandId": started["output"]["state"]["command_id"]}),
            )
            .await;
        seen.push_str(content(&polled));
    }
    let child = child.expect("the job printed its child's pid");
    assert!(alive(shell) && alive(child));

    // SIGKILL: no shutdown code runs. The shell dies with its parent at once...
    let dir = server.crash();
    assert!(gone(shell).await, "the job's shell outlived the server");
    // ...and what it started is killed by the next start on this host, from the ledger.
    let restarted = Server::start_in(dir).await;
    assert!(gone(child).await, "the job's child {child} outlived the restart");
    drop(restarted);
}

/// The server's threads named by Tokio: its workers and its blocking pool.
fn tokio_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("tokio-r"))
        .count()
}

#[tokio::test]
async fn file_calls_of_every_tenant_share_a_bounded_pool_of_threads() {
    const CAP: usize = 2;
    const WORKERS: usize = 2;
    let server = Server::start_with(
        tempfile::tempdir().unwrap(),
        &[("TOOLHOST_BLOCKING_THREADS", "2"), ("TOKIO_WORKER_THREADS", "2")],
    )
    .await;
    // Enough text that a search of it keeps a thread busy for a while.
    for root in [&server.root_a, &server.root_b] {
        for i in 0..64 {
            std::fs::write(root.join(format!("f{i}.txt")), "no match on this line at all\n".repeat(2_000))
                .unwrap();
        }
    }
    let acme = server.open("key-acme", &server.root_a).await;
    let globex = server.open("key-globex", &server.root_b).await;
    // 16 calls a tenant at once (each tenant's own bound): 32 wanting a thread.
    let calls = (0..32).map(|i| {
        let (key, session) = if i % 2 == 0 { ("key-acme", &acme) } else { ("key-globex", &globex) };
        server.call(key, session, "grepContent", json!({"pattern": "needle"}))
    });
    let results = futures::future::join_all(calls).await;
    for result in &results {
        assert!(succeeded(result), "a call waits for a thread, it does not fail: {result}");
    }
    // Idle blocking threads live on for ten seconds: what the burst started is still there.
    let threads = tokio_threads(server.child.id());
    assert!(threads > WORKERS, "the burst ran no blocking thread ({threads} Tokio threads)");
    assert!(threads <= WORKERS + CAP, "{threads} Tokio threads for {WORKERS} workers and a pool of {CAP}");
}

#[tokio::test]
async fn no_approval_opens_a_path_past_the_tenants_folders() {
    let server = Server::start().await;
    std::fs::write(server.root_b.join("theirs.txt"), "globex's file\n").unwrap();
    // A manual session: a path outside its folder would ask, but past the tenant's folders
    // nothing is asked: the person approving is a tenant too.
    let (status, view) = server.session("key-acme", json!({"working_directory": server.root_a})).await;
    assert_eq!(status, 201, "{view}");
    let session = view["id"].as_str().unwrap().to_owned();
    let past = [
        server.root_b.join("theirs.txt"),
        server.data.join("journal.db"),
        server.data.parent().unwrap().join("deny.json"),
        PathBuf::from("/etc/shadow"),
        server.root_a.join("../globex/theirs.txt"),
    ];
    for path in &past {
        for (api, arguments) in [
            ("readFile", json!({"path": path})),
            ("writeFile", json!({"path": path, "content": "owned"})),
            ("grepContent", json!({"pattern": "x", "path": path})),
        ] {
            let result = tokio::time::timeout(
                Duration::from_secs(10),
                server.call("key-acme", &session, api, arguments),
            )
            .await
            .expect("refused at once, not asked");
            assert_eq!(result["status"], "blocked", "{api} {}: {result}", path.display());
            assert!(content(&result).contains("no approval can open it"), "{api}: {result}");
        }
    }
    let (_, waiting) = server.request("key-acme", reqwest::Method::GET, "/v1/approvals", None).await;
    assert_eq!(waiting, json!([]), "nobody was asked");
    assert_eq!(std::fs::read_to_string(server.root_b.join("theirs.txt")).unwrap(), "globex's file\n");
    // Its own folder still works.
    let own = server.call("key-acme", &session, "readFile", json!({"path": "secret.txt"})).await;
    assert!(succeeded(&own) && content(&own).contains("acme's secret"), "{own}");
}

#[tokio::test]
async fn a_link_swapped_under_file_calls_never_reaches_another_tenant() {
    let server = Server::start().await;
    let theirs = server.root_b.join("theirs.txt");
    std::fs::write(&theirs, "globex-secret\n").unwrap();
    std::fs::write(server.root_a.join("mine.txt"), "mine\n").unwrap();
    let session = server.open("key-acme", &server.root_a).await;
    // The tenant's own command swaps a link in its folder between its file and the other's.
    let racer = format!("while true; do ln -sfn mine.txt link; ln -sfn {} link; done", theirs.display());
    let started =
        server.call("key-acme", &session, "runCommand", json!({"command": racer, "background": true})).await;
    assert!(succeeded(&started), "{started}");
    let (mut read, mut wrote) = (0, 0);
    for i in 0..300 {
        let result = server.call("key-acme", &session, "readFile", json!({"path": "link"})).await;
        assert!(
            !content(&result).contains("globex-secret"),
            "round {i} read the other tenant's file: {result}"
        );
        read += usize::from(succeeded(&result));
        if i % 5 == 0 {
            let result = server
                .call("key-acme", &session, "writeFile", json!({"path": "link", "content": "owned\n"}))
                .await;
            wrote += usize::from(succeeded(&result));
        }
    }
    let job = started["output"]["state"]["command_id"].clone();
    server.call("key-acme", &session, "killCommand", json!({"commandId": job})).await;
    assert_eq!(
        std::fs::read_to_string(&theirs).unwrap(),
        "globex-secret\n",
        "the other tenant's file was written"
    );
    // The racer really raced: some calls got through to the tenant's own file.
    assert!(read > 0 && wrote > 0, "read {read}, wrote {wrote}");
}

#[tokio::test]
async fn a_killed_servers_command_tree_is_gone_within_a_second() {
    let server = Server::start().await;
    // The server says what holds its commands in; on this kernel, control groups.
    let (status, ready) = server.request("key-acme", reqwest::Method::GET, "/readyz", None).await;
    assert_eq!(status, 200, "{ready}");
    assert_ne!(ready["command_limits"]["mechanism"], "rlimits", "{ready}");
    let session = server.open("key-acme", &server.root_a).await;
    // Three levels: the job's shell, a shell that left its process group (setsid), and its child.
    let tree = "setsid sh -c 'sleep 300 & echo low=$!; wait' & echo top=$!; wait";
    let started =
        server.call("key-acme", &session, "runCommand", json!({"command": tree, "background": true})).await;
    assert!(succeeded(&started), "{started}");
    let shell = started["output"]["state"]["pid"].as_u64().unwrap();
    let mut seen = content(&started).to_owned();
    // Outputs are joined as they come: a pid is the digits after its marker.
    let pid_of = |seen: &str, marker: &str| {
        let rest = seen.split(marker).nth(1)?;
        rest[..rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len())].parse::<u64>().ok()
    };
    for _ in 0..100 {
        if pid_of(&seen, "low=").is_some() && pid_of(&seen, "top=").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let id = started["output"]["state"]["command_id"].clone();
        let polled = server.call("key-acme", &session, "getCommandOutput", json!({"commandId": id})).await;
        seen.push_str(content(&polled));
    }
    let (child, grandchild) = (pid_of(&seen, "top=").expect(&seen), pid_of(&seen, "low=").expect(&seen));
    assert!(alive(shell) && alive(child) && alive(grandchild));

    let _dir = server.crash();
    let killed = std::time::Instant::now();
    for pid in [shell, child, grandchild] {
        while alive(pid) {
            assert!(
                killed.elapsed() < Duration::from_secs(1),
                "{pid} outlived the server by a second: {seen}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test]
async fn a_restart_removes_the_session_folders_of_a_crashed_instance() {
    let temp = tempfile::tempdir().unwrap();
    let tmpdir = temp.path().display().to_string();
    let server = Server::start_with(tempfile::tempdir().unwrap(), &[("TMPDIR", &tmpdir)]).await;
    let session = server.open("key-acme", &server.root_a).await;
    // A command leaves output in the session's temp folder.
    let wrote = server.run("key-acme", &session, "echo tenant-output > $TMPDIR/left.txt").await;
    assert!(succeeded(&wrote), "{wrote}");
    let folders = || -> Vec<PathBuf> {
        std::fs::read_dir(temp.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("toolhost-sessions-"))
            .map(|e| e.path())
            .collect()
    };
    let before = folders();
    assert_eq!(before.len(), 1, "{before:?}");
    let dir = server.crash();
    assert!(before[0].exists(), "a crash removes nothing by itself");
    let restarted = Server::start_with(dir, &[("TMPDIR", &tmpdir)]).await;
    let after = folders();
    assert!(!before[0].exists(), "the crashed instance's session folders are still there: {after:?}");
    assert_eq!(after.len(), 1, "the new instance has its own: {after:?}");
    drop(restarted);
}

#[tokio::test]
async fn a_fork_bomb_stops_at_the_process_limit_and_another_tenant_is_not_slowed() {
    let server = Server::start_with(
        tempfile::tempdir().unwrap(),
        &[("TOOLHOST_COMMAND_MAX_PROCESSES", "32"), ("TOOLHOST_COMMAND_CPU_WEIGHT", "10")],
    )
    .await;
    std::fs::write(server.root_b.join("notes.txt"), "globex's notes\n").unwrap();
    let acme = server.open("key-acme", &server.root_a).await;
    let globex = server.open("key-globex", &server.root_b).await;
    // For four seconds it forks whenever it can; each child sleeps, so the limit is what stops it.
    // (The system's Python: with keys, commands read only the system's folders and their own.)
    let bomb = r#"/usr/bin/python3 -c '
import os, time
end, n = time.time() + 4, 0
while time.time() < end:
    try:
        if os.fork() == 0:
            time.sleep(6)
            os._exit(0)
        n += 1
    except OSError:
        pass
print("forked", n)
'"#;
    let started =
        server.call("key-acme", &acme, "runCommand", json!({"command": bomb, "background": true})).await;
    assert!(succeeded(&started), "{started}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Meanwhile the other tenant's calls answer as usual.
    let mut times = Vec::new();
    let began = std::time::Instant::now();
    while began.elapsed() < Duration::from_secs(3) {
        let start = std::time::Instant::now();
        let read = server.call("key-globex", &globex, "readFile", json!({"path": "notes.txt"})).await;
        times.push(start.elapsed());
        assert!(succeeded(&read) && content(&read).contains("globex's notes"), "{read}");
    }
    times.sort();
    let p99 = times[(times.len() * 99 / 100).min(times.len() - 1)];
    assert!(p99 < Duration::from_millis(100), "p99 {p99:?} over {} calls during the bomb", times.len());
    // The bomb ends by itself; its result says how far it got and which limit stopped it.
    let id = started["output"]["state"]["command_id"].clone();
    let mut seen = content(&started).to_owned();
    for _ in 0..200 {
        if seen.contains("forked ") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let polled = server.call("key-acme", &acme, "getCommandOutput", json!({"commandId": id})).await;
        seen.push_str(content(&polled));
    }
    let forked: usize = seen
        .split("forked ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .expect(&seen);
    assert!(forked < 32, "{forked} processes forked under a limit of 32");
}
