//! The local-system runtime over a real LocalComputer in a temp folder.

use std::sync::Arc;
use std::time::{Duration, Instant};

use builtin_tool_local_system::LocalSystemRuntime;
use computer_runtime::LocalComputer;
use serde_json::{Value, json};
use tool_core::{CallContext, ErrorKind, ToolOutput, ToolRuntime};

struct Fixture {
    dir: tempfile::TempDir,
    runtime: LocalSystemRuntime,
}

impl Fixture {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            runtime: LocalSystemRuntime::new(Arc::new(LocalComputer::default())),
        }
    }

    fn context(&self) -> CallContext {
        CallContext::new("call-1", "session-1").with_working_directory(self.dir.path())
    }

    async fn call(&self, api: &str, args: Value) -> ToolOutput {
        self.runtime.execute(api, args, &self.context()).await
    }

    fn write(&self, name: &str, bytes: &[u8]) {
        std::fs::write(self.dir.path().join(name), bytes).unwrap();
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.dir.path().join(name)).unwrap()
    }
}

#[tokio::test]
async fn write_read_edit_round_trip() {
    let f = Fixture::new();
    let out = f.call("writeFile", json!({"path": "src/a.txt", "content": "one\ntwo\nthree\n"})).await;
    assert!(out.success, "{}", out.content);
    assert_eq!(out.state.as_ref().unwrap()["created"], true);

    let out = f.call("readFile", json!({"path": "src/a.txt", "offset": 2, "limit": 1})).await;
    assert_eq!(out.content, "two\n\n[Showing lines 2-2 of 3. Use offset=3 to continue.]");

    let out = f.call("editFile", json!({"path": "src/a.txt", "oldText": "two", "newText": "2"})).await;
    assert!(out.success, "{}", out.content);
    assert!(out.state.as_ref().unwrap()["diff"].as_str().unwrap().contains("-two\n+2\n"));
    assert_eq!(f.read("src/a.txt"), b"one\n2\nthree\n");
}

#[tokio::test]
async fn edit_keeps_crlf_and_bom_on_disk() {
    let f = Fixture::new();
    f.write("w.txt", "\u{feff}alpha\r\nbeta\r\ngamma\r\n".as_bytes());
    let out = f
        .call("editFile", json!({"path": "w.txt", "edits": [{"oldText": "alpha", "newText": "ALPHA"}, {"oldText": "gamma\n", "newText": "GAMMA\n"}]}))
        .await;
    assert!(out.success, "{}", out.content);
    assert_eq!(f.read("w.txt"), "\u{feff}ALPHA\r\nbeta\r\nGAMMA\r\n".as_bytes());
}

#[tokio::test]
async fn edit_failures_are_actionable_and_change_nothing() {
    let f = Fixture::new();
    f.write("r.txt", b"x = 1\nx = 1\n");
    let cases = [
        (
            json!({"path": "r.txt", "oldText": "x = 1", "newText": "x = 2"}),
            ErrorKind::Conflict,
            "occurs 2 times",
        ),
        (
            json!({"path": "r.txt", "oldText": "x = 1", "newText": "x = 1", "replaceAll": true}),
            ErrorKind::Conflict,
            "changes nothing",
        ),
        (
            json!({"path": "r.txt", "oldText": "y = 1"}),
            ErrorKind::InvalidArguments,
            "both oldText and newText",
        ),
        (json!({"path": "r.txt"}), ErrorKind::InvalidArguments, "nothing to edit"),
        (
            json!({"path": "missing.txt", "oldText": "a", "newText": "b"}),
            ErrorKind::NotFound,
            "does not exist",
        ),
    ];
    for (args, kind, needle) in cases {
        let out = f.call("editFile", args.clone()).await;
        assert!(!out.success, "{args}");
        assert_eq!(out.error.as_ref().unwrap().kind, kind, "{args}: {}", out.content);
        assert!(out.content.contains(needle), "{args}: {}", out.content);
    }
    assert_eq!(f.read("r.txt"), b"x = 1\nx = 1\n");
}

#[tokio::test]
async fn search_apis_find_things() {
    let f = Fixture::new();
    std::fs::create_dir_all(f.dir.path().join("src")).unwrap();
    f.write("src/lib.rs", b"pub fn answer() -> u32 { 42 }\n");
    f.write("README.md", b"# Demo\n");
    let glob = f.call("globFiles", json!({"pattern": "**/*.rs"})).await;
    assert_eq!(glob.content, "src/lib.rs");
    let grep = f.call("grepContent", json!({"pattern": "answer\\(\\)"})).await;
    assert_eq!(grep.content, "src/lib.rs:1: pub fn answer() -> u32 { 42 }\n[1 match(es) in 1 file(s)]");
    let search = f.call("searchFiles", json!({"query": "readme"})).await;
    assert_eq!(search.content, "README.md");
    let bad = f.call("grepContent", json!({"pattern": "("})).await;
    assert_eq!(bad.error.unwrap().kind, ErrorKind::InvalidArguments);
    let moved =
        f.call("moveFiles", json!({"items": [{"oldPath": "README.md", "newPath": "docs/README.md"}]})).await;
    assert!(moved.success, "{}", moved.content);
    assert!(f.dir.path().join("docs/README.md").exists());
}

#[tokio::test]
async fn commands_time_out_with_output_and_background_jobs_are_polled() {
    let f = Fixture::new();
    let context = f.context().with_deadline(Instant::now() + Duration::from_millis(700));
    let started = Instant::now();
    let out = f.runtime.execute("runCommand", json!({"command": "echo before; sleep 30"}), &context).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(out.error.as_ref().unwrap().kind, ErrorKind::Timeout);
    assert!(out.content.contains("before"), "{}", out.content);

    let out = f.call("runCommand", json!({"command": "exit 3"})).await;
    assert_eq!(out.error.as_ref().unwrap().kind, ErrorKind::Execution);
    assert!(out.content.contains("exit code 3"), "{}", out.content);

    let out =
        f.call("runCommand", json!({"command": "echo tick; sleep 0.2; echo tock", "background": true})).await;
    assert!(out.success, "{}", out.content);
    let id = out.state.as_ref().unwrap()["command_id"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let polled = f.call("getCommandOutput", json!({"commandId": id})).await;
    let seen = format!("{}\n{}", out.content, polled.content);
    assert_eq!((seen.matches("tick").count(), seen.matches("tock").count()), (1, 1), "{seen}");
    assert!(polled.content.contains("finished: Exit code 0"), "{}", polled.content);
    let killed = f.call("killCommand", json!({"commandId": id})).await;
    assert!(killed.success, "{}", killed.content);
    let unknown = f.call("getCommandOutput", json!({"commandId": id})).await;
    assert_eq!(unknown.error.unwrap().kind, ErrorKind::NotFound);
}

#[tokio::test]
async fn relative_paths_need_a_working_directory() {
    let runtime = LocalSystemRuntime::new(Arc::new(LocalComputer::default()));
    let context = CallContext::new("c", "s");
    let out = runtime.execute("readFile", json!({"path": "a.txt"}), &context).await;
    assert_eq!(out.error.unwrap().kind, ErrorKind::InvalidArguments);
    let out = runtime.execute("runCommand", json!({"command": "true"}), &context).await;
    assert!(out.content.contains("no working directory"), "{}", out.content);
    let out = runtime.execute("nope", json!({}), &context).await;
    assert_eq!(out.error.unwrap().kind, ErrorKind::UnknownTool);
}

#[tokio::test]
async fn escalation_runs_outside_the_sandbox_only_where_the_session_allows_it() {
    let f = Fixture::new();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("escaped.txt");
    let command = format!("echo x > {}", target.display());

    // The default sandbox denies the write, and says what to do.
    let out = f.call("runCommand", json!({"command": command})).await;
    assert!(!out.success && out.content.contains("denied by the sandbox"), "{}", out.content);
    // Escalating where the session does not allow it is blocked, and nothing runs.
    let out = f.call("runCommand", json!({"command": command, "escalate": true})).await;
    assert_eq!(out.error.as_ref().map(|e| e.kind), Some(ErrorKind::Blocked), "{}", out.content);
    assert!(out.content.contains("may not run commands outside its sandbox"), "{}", out.content);
    assert!(!target.exists());

    // A session that allows it (the pipeline has asked a person by then) runs it unboxed.
    let mut context = f.context();
    std::sync::Arc::make_mut(&mut context.sandbox).policy.allow_escalation = true;
    let out = f.runtime.execute("runCommand", json!({"command": command, "escalate": true}), &context).await;
    assert!(out.success, "{}", out.content);
    assert!(target.exists());
}

#[test]
fn escalation_always_asks_a_person() {
    use tool_core::{Intervention, InterventionPolicy};
    let spec = builtin_tool_local_system::LocalSystemApi::RunCommand.spec();
    let manifest = builtin_tool_local_system::manifest();
    let InterventionPolicy::Rules { rules } = manifest.policy_of(&spec) else {
        panic!("runCommand has rules")
    };
    assert_eq!(rules[0].policy, Intervention::Always);
    assert!(rules[0].matchers.contains_key("escalate"));
    assert_eq!(rules.last().unwrap().policy, Intervention::Required);
}

#[tokio::test]
async fn model_caps_are_clamped_and_walks_stop_when_the_call_does() {
    let f = Fixture::new();
    for i in 0..1100 {
        f.write(&format!("f{i:04}.txt"), b"needle\n");
    }
    let out = f.call("grepContent", json!({"pattern": "needle", "maxResults": 1_000_000})).await;
    assert!(out.success, "{}", out.content);
    let state = out.state.unwrap();
    assert_eq!(state["matches"].as_array().unwrap().len(), 1000, "the cap is bounded");
    assert_eq!(state["truncated"], true);
    let out = f.call("searchFiles", json!({"query": "f0", "limit": 1_000_000})).await;
    assert!(out.state.unwrap()["paths"].as_array().unwrap().len() <= 1000);

    // A call whose token has fired walks nothing.
    let context = f.context();
    context.cancel.cancel();
    let out = f.runtime.execute("globFiles", json!({"pattern": "**/*.txt"}), &context).await;
    assert_eq!(out.state.map(|s| s["paths"].as_array().map(Vec::len)), Some(Some(0)), "{}", out.content);
}

#[tokio::test]
async fn line_selectors_on_paths_and_addresses_without_a_reader() {
    let f = Fixture::new();
    f.write("a.txt", b"one\ntwo\nthree\nfour\n");
    let out = f.call("readFile", json!({"path": "a.txt:2-3"})).await;
    assert_eq!(out.content, "two\nthree\n\n[Showing lines 2-3 of 4. Use offset=4 to continue.]");
    let raw = f.call("readFile", json!({"path": "a.txt:2-3:raw"})).await;
    assert_eq!(raw.content, "two\nthree");
    let from = f.call("readFile", json!({"path": "a.txt:3-"})).await;
    assert_eq!(from.content, "three\nfour");
    // A file really named like a selector is read by its name without one (what the audit saw).
    f.write("b.txt:1-2", b"named so\n");
    let named = f.call("readFile", json!({"path": "b.txt:1-2"})).await;
    assert_eq!(named.error.as_ref().unwrap().kind, ErrorKind::NotFound, "{}", named.content);
    // An address no reader serves is an error, never a file of that name.
    std::fs::create_dir_all(f.dir.path().join("skill:/x")).unwrap();
    f.write("skill:/x/y", b"a file, not a skill\n");
    let address = f.call("readFile", json!({"path": "skill://x/y"})).await;
    assert_eq!(address.error.as_ref().unwrap().kind, ErrorKind::InvalidArguments);
    assert!(!address.content.contains("a file, not a skill"), "{}", address.content);
}
