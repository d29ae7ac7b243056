//! The full screen on a VT100-emulated terminal: snapshots of each screen and card kind, keys
//! turned into commands, and the real event loop against a scripted model with real commands.

use std::sync::Arc;
use std::time::Duration;

use agent::{AgentEvent, Delta, StopReason, ToolCall, Usage};
use crossterm::event::{Event as TermEvent, KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use serde_json::json;
use test_support::model::{ScriptedModel, openai_reply};
use tool_core::ToolOutput;
use tool_executor::approval::ApprovalRequest;
use tool_executor::{ApprovalMode, CallResult, Decision, Event};
use toolhost::ui::vt::Vt100Backend;
use toolhost::ui::{App, Command, render};

const WIDTH: u16 = 80;
const HEIGHT: u16 = 24;

fn new_app() -> App {
    let mut app =
        App::new("scripted (env)", "/home/me/project", ApprovalMode::Manual, "workspace-write, network off");
    // Questions take keys at once here; `a_question_ignores_keys_typed_as_it_appears` tests the
    // grace, `a_reason_starting_with_a_choice_key_is_never_taken_as_that_key` the choice window.
    app.question_grace = Duration::ZERO;
    app.choice_window = Duration::ZERO;
    app
}

fn draw(app: &App) -> String {
    draw_sized(app, HEIGHT)
}

fn draw_sized(app: &App, height: u16) -> String {
    let mut terminal = Terminal::new(Vt100Backend::new(WIDTH, height)).unwrap();
    terminal.draw(|frame| render(app, frame)).unwrap();
    terminal.backend().text()
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

fn ctrl(c: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL)
}

fn type_text(app: &mut App, text: &str) -> Vec<Command> {
    text.chars().filter_map(|c| app.on_key(key(KeyCode::Char(c)))).collect()
}

/// A call streamed, proposed and run, as the agent and the pipeline report it.
fn call(app: &mut App, index: usize, id: &str, name: &str, arguments: &str, tool_api: (&str, &str)) {
    app.on_agent(AgentEvent::Delta(Delta::ToolCall { index, id: id.into(), name: name.into() }));
    app.on_agent(AgentEvent::Delta(Delta::ToolArguments { index, fragment: arguments.into() }));
    let _ = tool_api;
}

fn reply(app: &mut App, calls: &[(&str, &str, &str)]) {
    app.on_agent(AgentEvent::Reply {
        content: String::new(),
        tool_calls: calls
            .iter()
            .map(|(id, name, args)| ToolCall {
                id: (*id).into(),
                name: (*name).into(),
                arguments: (*args).into(),
            })
            .collect(),
        stop: StopReason::ToolUse,
        usage: Usage { input_tokens: 1200, output_tokens: 80 },
    });
}

fn settle(app: &mut App, id: &str, name: &str, (tool, api): (&str, &str), output: ToolOutput) {
    let status =
        if output.success { journal::AttemptStatus::Executed } else { journal::AttemptStatus::Failed };
    app.on_agent(AgentEvent::Results(vec![CallResult {
        call_id: id.into(),
        name: name.into(),
        tool: Some(tool.into()),
        api: Some(api.into()),
        status,
        output,
        duration_ms: 12,
    }]));
}

const RUN: (&str, &str) = ("local-system", "runCommand");

/// Ctrl-P on a long command's card opens its whole output, from the file its run kept: the end
/// (`G`) shows the `FAILED` the card's tail shows too, and `/` finds a line anywhere in it.
#[test]
fn the_pager_shows_a_commands_whole_output_with_search() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("cmd-1.log");
    let mut whole: String = (1..200_000).map(|n| format!("test case {n} ... ok\n")).collect();
    whole.push_str("test result: FAILED. 1 failed\n");
    std::fs::write(&log, &whole).unwrap();
    let mut app = new_app();
    let arguments = r#"{"command": "cargo test"}"#;
    call(&mut app, 0, "t1", "runCommand", arguments, RUN);
    reply(&mut app, &[("t1", "runCommand", arguments)]);
    let output = ToolOutput::ok("test case 1 ... ok\n… 199960 more lines …\ntest result: FAILED. 1 failed")
        .with_state(json!({ "output_path": log.display().to_string(), "exit": { "code": 101 } }));
    settle(&mut app, "t1", "runCommand", RUN, output);
    app.on_key(ctrl('p'));
    let first = draw(&app);
    assert!(first.contains("test case 1 ... ok") && first.contains("/ finds"), "{first}");
    app.on_key(key(KeyCode::Char('G')));
    assert!(draw(&app).contains("test result: FAILED. 1 failed"), "{}", draw(&app));
    type_text(&mut app, "/case 123456 ");
    assert!(draw(&app).contains("find: case 123456"), "{}", draw(&app));
    app.on_key(key(KeyCode::Enter));
    let found = draw(&app);
    assert!(found.lines().next().unwrap().starts_with("test case 123456 ... ok"), "{found}");
    app.on_key(key(KeyCode::Char('q')));
    assert!(!draw(&app).contains("/ finds"), "closed");

    // Another tool's state naming a file opens nothing: only the builtin commands' does.
    let arguments = r#"{"command": "cat"}"#;
    call(&mut app, 0, "m1", "mounted_run", arguments, ("mounted", "run"));
    reply(&mut app, &[("m1", "mounted_run", arguments)]);
    let output = ToolOutput::ok("done").with_state(json!({ "output_path": log.display().to_string() }));
    settle(&mut app, "m1", "mounted_run", ("mounted", "run"), output);
    app.on_key(ctrl('p'));
    let pager = draw(&app);
    assert!(!pager.contains("/ finds") && !pager.contains("test case 1 ... ok"), "{pager}");
}

/// Fifty fast calls whose events arrive after their results (the two come on different
/// channels): no card stays `[running]`, and each keeps its tool's title.
#[test]
fn cards_end_with_their_results_whatever_the_order_of_events() {
    let mut app = new_app();
    app.running = true;
    let calls: Vec<(String, String)> =
        (0..50).map(|n| (format!("c{n}"), json!({"expression": format!("{n} + 1")}).to_string())).collect();
    for (index, (id, arguments)) in calls.iter().enumerate() {
        call(&mut app, index, id, "calculate", arguments, ("calculator", "calculate"));
    }
    let listed: Vec<(&str, &str, &str)> =
        calls.iter().map(|(id, arguments)| (id.as_str(), "calculate", arguments.as_str())).collect();
    reply(&mut app, &listed);
    for (n, (id, _)) in calls.iter().enumerate() {
        settle(&mut app, id, "calculate", ("calculator", "calculate"), ToolOutput::ok(format!("{}", n + 1)));
        app.on_call(tool_executor::Event::Started { call_id: id.clone(), timeout_ms: 30_000 });
    }
    app.finish(&agent::Outcome::Answered { text: "done".into(), truncated: false });
    let screen = draw_sized(&app, 400);
    assert_eq!(screen.matches("Calculator [done]").count(), 50, "every card ended, titled: {screen}");
    assert!(!screen.contains("[running]"), "{screen}");
}

/// On a white background every coloured letter of the light theme reads (WCAG contrast at least
/// 4.5:1), and with no colour (`NO_COLOR`) none is left: a conversation with output, a diff, a
/// failed call and an approval waiting.
#[test]
fn the_light_theme_reads_on_white_and_none_has_no_colour() {
    use toolhost::ui::theme::{Theme, contrast, luminance};
    let mut app = new_app();
    app.running = true;
    let build = json!({ "command": "cargo build" }).to_string();
    call(&mut app, 0, "c1", "runCommand", &build, RUN);
    reply(&mut app, &[("c1", "runCommand", &build)]);
    settle(
        &mut app,
        "c1",
        "runCommand",
        RUN,
        ToolOutput::ok("Compiling toolhost\nwarning: unused\nerror: mismatched types"),
    );
    let edit = json!({"path": "src/lib.rs", "oldText": "a", "newText": "b"}).to_string();
    call(&mut app, 0, "c2", "editFile", &edit, ("local-system", "editFile"));
    reply(&mut app, &[("c2", "editFile", &edit)]);
    let diff = "--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1 +1 @@\n-let a = 1;\n+let b = 1;\n";
    settle(
        &mut app,
        "c2",
        "editFile",
        ("local-system", "editFile"),
        ToolOutput::ok("Edited").with_state(json!({"diff": diff})),
    );
    app.ask(question("a1", "rm -rf target/debug"));
    let white = luminance(255, 255, 255);
    for theme in [Theme::Light, Theme::None] {
        app.theme = theme;
        let mut terminal = Terminal::new(ratatui::backend::TestBackend::new(WIDTH, HEIGHT)).unwrap();
        terminal.draw(|frame| render(&app, frame)).unwrap();
        let buffer = terminal.backend().buffer().clone();
        let mut coloured = 0;
        for cell in buffer.content.iter().filter(|c| !c.symbol().trim().is_empty()) {
            match (theme, cell.fg) {
                (_, ratatui::style::Color::Reset) => {}
                (Theme::Light, ratatui::style::Color::Black) => coloured += 1,
                (Theme::Light, ratatui::style::Color::Rgb(r, g, b)) => {
                    coloured += 1;
                    let ratio = contrast(luminance(r, g, b), white);
                    assert!(ratio >= 4.5, "`{}` in {:?} is {ratio:.1}:1 on white", cell.symbol(), cell.fg);
                }
                (_, other) => panic!("`{}` keeps {other:?} in the {theme:?} theme", cell.symbol()),
            }
            if theme == Theme::None {
                assert_eq!(cell.bg, ratatui::style::Color::Reset, "{theme:?}");
            }
        }
        if theme == Theme::Light {
            assert!(coloured > 20, "the light theme still has colours: {coloured}");
        }
    }
}

#[test]
fn a_conversation_with_every_card_kind() {
    let mut app = new_app();
    assert_eq!(type_text(&mut app, "fix the build"), Vec::new());
    assert_eq!(app.on_key(key(KeyCode::Enter)), Some(Command::Submit("fix the build".into())));
    app.on_agent(AgentEvent::Delta(Delta::Reasoning("The build fails; look at the error first.".into())));
    app.on_agent(AgentEvent::Delta(Delta::Text("Running **cargo build** to see the `error`:".into())));
    let build = json!({ "command": "cargo build" }).to_string();
    call(&mut app, 0, "c1", "runCommand", &build, RUN);
    reply(&mut app, &[("c1", "runCommand", &build)]);
    let long: String = (1..=40).map(|n| format!("   Compiling crate-{n} v0.1.0\n")).collect();
    settle(&mut app, "c1", "runCommand", RUN, ToolOutput::ok(long));
    let test = json!({ "command": "cargo test -q" }).to_string();
    call(&mut app, 0, "c2", "runCommand", &test, RUN);
    reply(&mut app, &[("c2", "runCommand", &test)]);
    app.on_call(Event::Proposed {
        call_id: "c2".into(),
        tool: RUN.0.into(),
        api: RUN.1.into(),
        arguments: json!({}),
    });
    app.on_call(Event::Started { call_id: "c2".into(), timeout_ms: 120_000 });
    app.on_call(Event::Progress {
        call_id: "c2".into(),
        progress: tool_core::Progress {
            output: Some("running 3 tests\ntest a ... ok\n".into()),
            ..Default::default()
        },
    });
    insta::assert_snapshot!("conversation", draw_sized(&app, 44));

    // Ctrl-O folds the last card; Tab selects the one before; Ctrl-P opens it whole.
    app.on_key(ctrl('o'));
    assert!(draw(&app).contains("(folded)"));
    app.on_key(key(KeyCode::Tab));
    app.on_key(key(KeyCode::Tab));
    app.on_key(ctrl('p'));
    let pager = draw(&app);
    insta::assert_snapshot!("pager", pager);
    assert!(
        pager.contains("Compiling crate-1 ") && pager.contains("Compiling crate-20 "),
        "the whole output"
    );
    app.on_key(KeyCode::PageDown.into());
    assert!(draw(&app).contains("Compiling crate-40 "));
    match app.on_key(key(KeyCode::Char('c'))) {
        Some(Command::Copy(text)) => {
            assert!(text.contains("   Compiling crate-33 v0.1.0\n"), "copied text keeps its lines, unwrapped")
        }
        other => panic!("{other:?}"),
    }
    app.on_key(key(KeyCode::Char('q')));
    assert!(draw(&app).contains("fix the build"));
}

#[test]
fn a_document_the_model_wrote_opens_whole_in_the_pager() {
    let mut app = new_app();
    let content: String = (1..=80).map(|n| format!("Finding {n}: the cache is warm.\n")).collect();
    let arguments = json!({ "name": "report.md", "content": content }).to_string();
    call(&mut app, 0, "d1", "createDocument", &arguments, ("documents", "createDocument"));
    reply(&mut app, &[("d1", "createDocument", &arguments)]);
    settle(
        &mut app,
        "d1",
        "createDocument",
        ("documents", "createDocument"),
        ToolOutput::ok("Created report.md"),
    );
    let conversation = draw_sized(&app, 60);
    assert!(conversation.contains("Document · report.md"), "{conversation}");
    assert!(!conversation.contains("Finding 40:"), "the card is cut in the conversation: {conversation}");
    app.on_key(ctrl('p'));
    let pager = draw_sized(&app, 100);
    assert!(pager.contains("Finding 1:") && pager.contains("Finding 40:"), "the whole document: {pager}");
    app.on_key(KeyCode::PageDown.into());
    app.on_key(KeyCode::PageDown.into());
    assert!(draw_sized(&app, 100).contains("Finding 80:"));
    app.on_key(key(KeyCode::Char('q')));
}

#[test]
fn an_edit_shows_its_diff_in_colour_and_a_failure_its_reason() {
    let mut app = new_app();
    let edit = json!({ "path": "src/lib.rs", "old_text": "a", "new_text": "b" }).to_string();
    call(&mut app, 0, "e1", "editFile", &edit, ("local-system", "editFile"));
    reply(&mut app, &[("e1", "editFile", &edit)]);
    let diff = "--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1,3 +1,3 @@\n fn main() {\n-    let a = 1;\n+    let b = 1;\n }\n";
    let mut output = ToolOutput::ok("Edited src/lib.rs");
    output.state = Some(json!({ "path": "src/lib.rs", "diff": diff }));
    settle(&mut app, "e1", "editFile", ("local-system", "editFile"), output);
    let missing = json!({ "path": "nope.txt" }).to_string();
    call(&mut app, 0, "r1", "readFile", &missing, ("local-system", "readFile"));
    reply(&mut app, &[("r1", "readFile", &missing)]);
    settle(
        &mut app,
        "r1",
        "readFile",
        ("local-system", "readFile"),
        ToolOutput::error(tool_core::ErrorKind::NotFound, "nope.txt does not exist"),
    );
    app.on_agent(AgentEvent::Delta(Delta::Text("Done.\n```rust\nlet b = 1;\n```".into())));
    let mut terminal = Terminal::new(Vt100Backend::new(WIDTH, HEIGHT)).unwrap();
    terminal.draw(|frame| render(&app, frame)).unwrap();
    let text = terminal.backend().text();
    insta::assert_snapshot!("diff_and_failure", text);
    let rows: Vec<&str> = text.lines().collect();
    let added = rows.iter().position(|r| r.contains("+    let b = 1;")).unwrap() as u16;
    let removed = rows.iter().position(|r| r.contains("-    let a = 1;")).unwrap() as u16;
    let column = rows[added as usize].find('+').unwrap() as u16;
    assert_eq!(
        terminal.backend().foreground(added, column),
        Some(vt100::Color::Idx(2)),
        "added lines are green"
    );
    assert_eq!(
        terminal.backend().foreground(removed, column),
        Some(vt100::Color::Idx(1)),
        "removed lines are red"
    );
}

fn question(id: &str, command: &str) -> ApprovalRequest {
    ApprovalRequest {
        id: id.into(),
        tenant: "local".into(),
        session_id: "s".into(),
        call_id: format!("call-{id}"),
        tool: "local-system".into(),
        api: "runCommand".into(),
        arguments: json!({ "command": command }),
        reason: "commands need approval (rm deletes files)".into(),
        question: None,
        scope: None,
    }
}

#[test]
fn approvals_queue_inline_and_each_answer_is_written_to_the_transcript() {
    let mut app = new_app();
    app.running = true;
    app.ask(question("a1", "rm -rf target/debug"));
    app.ask(question("a2", "cargo test --workspace"));
    let asked = draw(&app);
    insta::assert_snapshot!("approval", asked);
    // Each key names what it grants; "always" for `rm -rf` is that exact command, with why.
    assert!(asked.contains("s yes, this exact command, for this session"), "{asked}");
    assert!(asked.contains("always this exact command in this folder (`rm`: it deletes files)"), "{asked}");
    assert_eq!(
        app.on_key(key(KeyCode::Char('y'))),
        Some(Command::Decide { approval_id: "a1".into(), decision: Decision::AllowOnce })
    );
    // The next question; "a" opens the prefix it proposes, editable, and Enter confirms it.
    let next = draw(&app);
    assert!(next.contains("always, in this folder: commands starting `cargo test` (editable)"), "{next}");
    assert_eq!(app.on_key(key(KeyCode::Char('a'))), None, "one key never stores a rule");
    assert!(draw(&app).contains("always allow commands starting: cargo test"));
    assert_eq!(
        app.on_key(key(KeyCode::Enter)),
        Some(Command::Decide {
            approval_id: "a2".into(),
            decision: Decision::AllowAlways { argument_prefix: Some("cargo test".into()) }
        })
    );
    // `n` opens the reason field: a reason that starts with a choice key is text there.
    app.ask(question("a3", "curl example.com | sh"));
    assert_eq!(app.on_key(key(KeyCode::Char('n'))), None);
    type_text(&mut app, "skip that, we are offline");
    assert!(draw(&app).contains("why not? skip that, we are offline"));
    assert_eq!(
        app.on_key(key(KeyCode::Enter)),
        Some(Command::Decide {
            approval_id: "a3".into(),
            decision: Decision::DenyWithMessage { message: "skip that, we are offline".into() }
        })
    );
    let screen = draw(&app);
    assert!(screen.contains("local-system/runCommand allowed once"), "{screen}");
    assert!(screen.contains("always allowed in this folder: commands starting"), "{screen}");
    assert!(screen.contains("denied: skip that, we are offline"), "{screen}");
    // A question whose call went away leaves.
    app.ask(question("a4", "make"));
    app.withdraw("a4");
    assert!(!draw(&app).contains("approval needed"));
}

/// A file call outside the folder: "for this session" and "always" name the folder they grant
/// (editable for "always"), and send it as the decision's scope, never the API for every path.
#[test]
fn a_file_grant_names_and_sends_its_scope() {
    let mut app = new_app();
    app.running = true;
    let outside = |id: &str, path: &str| ApprovalRequest {
        id: id.into(),
        tenant: "local".into(),
        session_id: "s".into(),
        call_id: format!("call-{id}"),
        tool: "local-system".into(),
        api: "readFile".into(),
        arguments: json!({ "path": path }),
        reason: "/etc/hostname is outside the working directory".into(),
        question: None,
        scope: Some("/etc".into()),
    };
    app.ask(outside("f1", "/etc/hostname"));
    let asked = draw(&app);
    assert!(asked.contains("s yes, local-system/readFile within /etc, for this session"), "{asked}");
    assert!(
        asked.contains("always, in this folder: local-system/readFile within /etc (editable)"),
        "{asked}"
    );
    assert_eq!(
        app.on_key(key(KeyCode::Char('s'))),
        Some(Command::Decide {
            approval_id: "f1".into(),
            decision: Decision::AllowSession { argument_prefix: Some("/etc".into()) }
        })
    );
    // "Always": the folder offered, narrowed by the person to the file.
    app.ask(outside("f2", "/etc/hostname"));
    assert_eq!(app.on_key(key(KeyCode::Char('a'))), None);
    assert!(draw(&app).contains("always allow within: /etc"));
    type_text(&mut app, "/hostname");
    assert_eq!(
        app.on_key(key(KeyCode::Enter)),
        Some(Command::Decide {
            approval_id: "f2".into(),
            decision: Decision::AllowAlways { argument_prefix: Some("/etc/hostname".into()) }
        })
    );
    let screen = draw(&app);
    assert!(screen.contains("allowed for this session within /etc"), "{screen}");
    assert!(screen.contains("always allowed in this folder within /etc/hostname"), "{screen}");
}

/// A sub-agent is one card: its calls show as lines while it works, and its result is the card
/// of its calls and its answer, which Ctrl-O folds to one line.
#[test]
fn a_sub_agent_is_one_card_that_unfolds_into_its_calls() {
    let mut app = new_app();
    app.running = true;
    let task = r#"{"task": "Find where the retry limit is set.", "tools": ["local-system"]}"#;
    call(&mut app, 0, "sa", "callSubAgent", task, ("sub-agent", "callSubAgent"));
    reply(&mut app, &[("sa", "callSubAgent", task)]);
    app.on_call(tool_executor::Event::Started { call_id: "sa".into(), timeout_ms: 600_000 });
    app.on_call(tool_executor::Event::Proposed {
        call_id: "sa/1".into(),
        tool: "local-system".into(),
        api: "grepContent".into(),
        arguments: json!({"pattern": "max_retries"}),
    });
    app.on_call(tool_executor::Event::Blocked {
        call_id: "sa/2".into(),
        reason: "outside the folder".into(),
    });
    let live = draw(&app);
    assert!(live.contains("Sub-agent: Find where the retry limit is set."), "{live}");
    assert!(
        live.contains("↳ grepContent max_retries") && live.contains("↳ blocked: outside the folder"),
        "{live}"
    );
    let state = json!({
        "task": "Find where the retry limit is set.", "model": "small", "outcome": "answered",
        "answer": "It is `max_retries = 5` in src/net.rs:42.",
        "calls": [
            {"id": "c1", "name": "grepContent", "status": "executed", "gist": "max_retries"},
            {"id": "c2", "name": "readFile", "status": "blocked", "gist": "/etc/net.conf"}
        ],
        "turns": 3, "tokens": 5400
    });
    settle(
        &mut app,
        "sa",
        "callSubAgent",
        ("sub-agent", "callSubAgent"),
        ToolOutput::ok("It is `max_retries = 5` in src/net.rs:42.").with_state(state),
    );
    let done = draw(&app);
    assert!(done.contains("2 calls · 3 replies · 5400 tokens small"), "{done}");
    assert!(
        done.contains("grepContent [executed] max_retries") && done.contains("readFile [blocked]"),
        "{done}"
    );
    assert!(done.contains("src/net.rs:42"), "{done}");
    app.on_key(ctrl('o'));
    let folded = draw(&app);
    assert!(folded.contains("Sub-agent: Find where the retry limit is set."), "{folded}");
    assert!(!folded.contains("grepContent [executed]"), "folded, the calls are hidden: {folded}");
}

fn asked(id: &str, options: &[&str], multiple: bool, allow_other: bool) -> ApprovalRequest {
    let question = tool_core::Question {
        question: "Which database should the service use?".into(),
        options: options.iter().map(|o| (*o).to_owned()).collect(),
        multiple,
        allow_other,
    };
    ApprovalRequest {
        id: id.into(),
        tenant: "local".into(),
        session_id: "s".into(),
        call_id: format!("call-{id}"),
        tool: "ask-user".into(),
        api: "askUser".into(),
        arguments: serde_json::to_value(&question).unwrap(),
        reason: tool_executor::approval::QUESTION.into(),
        question: Some(question),
        scope: None,
    }
}

fn answered(id: &str, choices: &[&str], text: Option<&str>) -> Option<Command> {
    Some(Command::Decide {
        approval_id: id.into(),
        decision: Decision::Answer {
            answer: tool_core::Answer {
                choices: choices.iter().map(|c| (*c).to_owned()).collect(),
                text: text.map(str::to_owned),
            },
        },
    })
}

/// A question the agent asks is drawn with its numbered options: a number (or the arrows and
/// Enter) chooses, Space and numbers mark where several may be chosen, typing answers in one's
/// own words where the question allows it, and Tab declines (with why) where it does not.
#[test]
fn the_agents_question_is_answered_with_keys_or_words() {
    let mut app = new_app();
    app.running = true;
    app.ask(asked("q1", &["SQLite", "Postgres", "MySQL"], false, false));
    let screen = draw(&app);
    assert!(
        screen.contains("the agent asks") && screen.contains("Which database should the service use?"),
        "{screen}"
    );
    assert!(screen.contains("2 Postgres") && screen.contains("a number or ↑↓ Enter chooses"), "{screen}");
    // A letter is not an answer to a question without words of one's own.
    assert_eq!(app.on_key(key(KeyCode::Char('y'))), None);
    assert!(draw(&app).contains("choose with a number"), "{}", draw(&app));
    assert_eq!(app.on_key(key(KeyCode::Char('7'))), None, "no option 7");
    assert_eq!(app.on_key(key(KeyCode::Char('2'))), answered("q1", &["Postgres"], None));
    assert!(draw(&app).contains("answered the agent's question: Postgres"), "{}", draw(&app));

    // The arrows and Enter.
    app.ask(asked("q2", &["SQLite", "Postgres", "MySQL"], false, false));
    app.on_key(key(KeyCode::Down));
    app.on_key(key(KeyCode::Down));
    assert_eq!(app.on_key(key(KeyCode::Enter)), answered("q2", &["MySQL"], None));

    // Several: numbers and Space mark, Enter sends them in the question's order.
    app.ask(asked("q3", &["lint", "test", "build"], true, false));
    assert_eq!(app.on_key(key(KeyCode::Enter)), None, "nothing marked yet");
    app.on_key(key(KeyCode::Char('3')));
    app.on_key(key(KeyCode::Char('1')));
    assert!(draw(&app).contains("[x] build") && draw(&app).contains("[ ] test"), "{}", draw(&app));
    assert_eq!(app.on_key(key(KeyCode::Enter)), answered("q3", &["lint", "build"], None));

    // Words of one's own: typing starts the answer, Enter sends it.
    app.ask(asked("q4", &["SQLite", "Postgres"], false, true));
    type_text(&mut app, "DuckDB");
    assert!(draw(&app).contains("your answer: DuckDB"), "{}", draw(&app));
    assert_eq!(app.on_key(key(KeyCode::Enter)), answered("q4", &[], Some("DuckDB")));

    // A question without options takes words only; an empty answer declines.
    app.ask(asked("q5", &[], false, false));
    type_text(&mut app, "the staging one");
    assert_eq!(app.on_key(key(KeyCode::Enter)), answered("q5", &[], Some("the staging one")));
    app.ask(asked("q6", &["a", "b"], false, false));
    assert_eq!(app.on_key(key(KeyCode::Tab)), None);
    assert!(draw(&app).contains("why not answer?"), "{}", draw(&app));
    type_text(&mut app, "ask Bob");
    assert_eq!(
        app.on_key(key(KeyCode::Enter)),
        Some(Command::Decide {
            approval_id: "q6".into(),
            decision: Decision::DenyWithMessage { message: "ask Bob".into() }
        })
    );
    assert!(draw(&app).contains("declined the agent's question: ask Bob"), "{}", draw(&app));
}

/// At 80 columns the status line still names the model, the folder, the tokens and the context
/// left, abbreviated rather than cut; a wide terminal shows them whole.
#[test]
fn the_status_line_abbreviates_to_keep_every_part_at_80_columns() {
    let mut app = App::new(
        "claude-sonnet-4-5-20250929 (anthropic)",
        "/srv/checkouts/customer-portal/services/billing-reconciliation",
        ApprovalMode::Manual,
        "commands: workspace-write, network off",
    );
    app.running = true;
    app.turn_started = Some(std::time::Instant::now());
    app.usage = Usage { input_tokens: 48_200, output_tokens: 3_100 };
    app.context_window = 200_000;
    app.context_used = 51_300;
    let last = |screen: String| screen.lines().last().unwrap().trim_end().to_owned();
    let narrow = last(draw(&app));
    for part in ["◐ 0s", "manual", "claude", "billing", "51k tok", "74% left"] {
        assert!(narrow.contains(part), "{part:?} in {narrow:?}");
    }
    assert!(narrow.chars().count() <= 80, "nothing cut: {narrow:?}");
    assert!(!narrow.contains("(anthropic)"), "the profile's name is the first to go: {narrow:?}");

    let mut terminal = Terminal::new(Vt100Backend::new(240, HEIGHT)).unwrap();
    terminal.draw(|frame| render(&app, frame)).unwrap();
    let wide = last(terminal.backend().text());
    for part in [
        "working 0s · esc cancels",
        "manual (ctrl-t)",
        "commands: workspace-write, network off",
        "claude-sonnet-4-5-20250929 (anthropic)",
        "/srv/checkouts/customer-portal/services/billing-reconciliation",
        "48k in / 3100 out",
        "74% context left",
    ] {
        assert!(wide.contains(part), "{part:?} in {wide:?}");
    }
}

/// Marks pressed fast (well inside the question's grace) all count, and so does the Enter that
/// sends them: only keys the box refuses, or typing in the prompt, start the pause again.
#[test]
fn several_marks_and_enter_in_quick_succession_are_all_taken() {
    let mut app = new_app();
    app.question_grace = Duration::from_millis(600);
    app.running = true;
    app.ask(asked("q1", &["lint", "test", "build"], true, false));
    app.approvals[0].arrived -= Duration::from_secs(5);
    app.last_typed = None;
    assert_eq!(app.on_key(key(KeyCode::Char('1'))), None);
    assert_eq!(app.on_key(key(KeyCode::Char('3'))), None);
    // The cursor is on the last mark (build); up to test.
    app.on_key(key(KeyCode::Up));
    assert_eq!(app.on_key(key(KeyCode::Char(' '))), None);
    assert!(draw(&app).contains("[x] build") && draw(&app).contains("[x] test"), "{}", draw(&app));
    assert_eq!(app.on_key(key(KeyCode::Enter)), answered("q1", &["lint", "test", "build"], None));

    // A refused key is typing: the Enter right after it waits for the pause.
    app.ask(asked("q2", &["lint", "test"], true, false));
    app.approvals[0].arrived -= Duration::from_secs(5);
    app.last_typed = None;
    assert_eq!(app.on_key(key(KeyCode::Char('2'))), None);
    assert_eq!(app.on_key(key(KeyCode::Char('x'))), None, "no option x");
    assert_eq!(app.on_key(key(KeyCode::Enter)), None, "amid typing");
    assert!(draw(&app).contains("press it again"), "{}", draw(&app));
    app.last_typed = None;
    assert_eq!(app.on_key(key(KeyCode::Enter)), answered("q2", &["test"], None));
}

/// Where a question takes words of one's own, a number followed by more typing is the start of
/// them ("2024"), never option 2; a number alone (or with Enter) still chooses.
#[test]
fn a_typed_answer_starting_with_a_number_is_not_taken_as_that_option() {
    let mut app = new_app();
    app.choice_window = Duration::from_secs(60);
    app.ask(asked("y1", &["2023", "2025"], false, true));
    assert!(type_text(&mut app, "2024 release").is_empty(), "typing answers nothing by itself");
    assert!(draw(&app).contains("your answer: 2024 release"), "{}", draw(&app));
    assert_eq!(app.on_key(key(KeyCode::Enter)), answered("y1", &[], Some("2024 release")));
    app.ask(asked("y2", &["2023", "2025"], false, true));
    assert!(type_text(&mut app, "2").is_empty(), "a number waits for what follows");
    assert!(draw(&app).contains("Enter takes option 2 now"), "{}", draw(&app));
    assert_eq!(app.on_key(key(KeyCode::Enter)), answered("y2", &["2025"], None));
}

/// A sentence typed at the question is a reason, whatever letter it starts with: a choice key is
/// taken only when no other key follows it within the choice window.
#[test]
fn a_reason_starting_with_a_choice_key_is_never_taken_as_that_key() {
    for sentence in ["skip that, we are offline", "avoid the network please", "yet another way", "not now"] {
        let mut app = new_app();
        app.choice_window = Duration::from_secs(60);
        app.running = true;
        app.ask(question("q", "wget example.com"));
        let commands = type_text(&mut app, sentence);
        assert!(commands.is_empty(), "{sentence}: nothing granted while typing: {commands:?}");
        let screen = draw(&app);
        assert!(screen.contains(&format!("why not? {sentence}")), "{sentence}: {screen}");
        assert_eq!(
            app.on_key(key(KeyCode::Enter)),
            Some(Command::Decide {
                approval_id: "q".into(),
                decision: Decision::DenyWithMessage { message: sentence.into() }
            }),
            "{sentence}"
        );
    }
    // A choice key alone is taken once its window passes (the event loop's timer), or at once
    // with Enter.
    let mut app = new_app();
    app.choice_window = Duration::from_millis(30);
    app.ask(question("q", "make"));
    assert_eq!(app.on_key(key(KeyCode::Char('s'))), None);
    assert!(draw(&app).contains("Enter takes it now"));
    std::thread::sleep(Duration::from_millis(40));
    assert_eq!(
        app.commit_due(),
        Some(Command::Decide {
            approval_id: "q".into(),
            decision: Decision::AllowSession { argument_prefix: None }
        })
    );
    assert!(draw(&app).contains("allowed: this exact command, for this session"));
    app.ask(question("q2", "make"));
    app.choice_window = Duration::from_secs(60);
    app.on_key(key(KeyCode::Char('y')));
    assert_eq!(
        app.on_key(key(KeyCode::Enter)),
        Some(Command::Decide { approval_id: "q2".into(), decision: Decision::AllowOnce })
    );
}

/// The review's cases: Esc drops a choice key instead of letting the timer take it; keys in the
/// journal or console are theirs, not answers; the next queued question gets its own grace; a
/// completion left over after Ctrl-U cannot put the cursor past the text.
#[test]
fn a_choice_is_dropped_by_esc_panes_keep_their_keys_and_each_question_gets_its_grace() {
    let mut app = new_app();
    app.choice_window = Duration::from_secs(60);
    app.running = true;
    app.ask(question("q1", "make"));
    assert_eq!(app.on_key(key(KeyCode::Char('y'))), None);
    assert_eq!(app.on_key(key(KeyCode::Esc)), None, "Esc drops the choice (and does not cancel the turn)");
    app.choice_window = Duration::ZERO;
    assert_eq!(app.commit_due(), None, "nothing left for the timer to take");
    assert_eq!(app.approvals.len(), 1);

    // In the journal, `s` is its status filter, not "allow for this session".
    app.view = toolhost::ui::View::Journal;
    let command = app.on_key(key(KeyCode::Char('s')));
    assert!(!matches!(command, Some(Command::Decide { .. })), "{command:?}");
    assert!(draw(&app).contains("Esc back to the conversation to answer"));
    app.view = toolhost::ui::View::Chat;

    // Answered: the next question's grace starts now, not when it was queued.
    app.ask(question("q2", "make"));
    app.question_grace = Duration::from_millis(600);
    app.approvals[0].arrived -= Duration::from_secs(5);
    app.approvals[1].arrived -= Duration::from_secs(5);
    app.last_typed = None;
    assert!(matches!(app.on_key(key(KeyCode::Char('y'))), Some(Command::Decide { .. })));
    assert_eq!(app.on_key(key(KeyCode::Char('y'))), None, "too soon for the next question");
    assert_eq!(app.approvals.len(), 1);

    // A completion cleared with its text cannot leave the cursor past it.
    let mut typing = new_app();
    typing.files = vec!["src/lib.rs".into()];
    type_text(&mut typing, "look at @sr");
    assert!(typing.completion.is_some());
    typing.on_key(ctrl('u'));
    typing.on_key(key(KeyCode::Tab));
    typing.on_key(key(KeyCode::Backspace));
    assert!(typing.cursor <= typing.input.chars().count());
    draw(&typing);
}

/// A question to write 60 lines to /etc/motd (taller than any question box), offering `scope`.
fn long_write(scope: Option<&str>) -> ApprovalRequest {
    let content: String = (1..=60).map(|n| format!("line {n}\n")).collect();
    ApprovalRequest {
        id: "w".into(),
        tenant: "local".into(),
        session_id: "s".into(),
        call_id: "call-w".into(),
        tool: "local-system".into(),
        api: "writeFile".into(),
        arguments: json!({ "path": "/etc/motd", "content": content }),
        reason: "outside the folder".into(),
        question: None,
        scope: scope.map(str::to_owned),
    }
}

/// A question taller than its box keeps what would run at its head and the keys at its end.
#[test]
fn a_long_question_keeps_its_head_and_its_keys() {
    let mut app = new_app();
    app.ask(long_write(None));
    let screen = draw(&app);
    assert!(screen.contains("Allow: Write /etc/motd"), "{screen}");
    assert!(screen.contains("more lines (Ctrl-P"), "{screen}");
    assert!(screen.contains("y yes, this once") && screen.contains("n no, and say why"), "{screen}");
}

/// In a small window the answer keys stay in view: what would run gives way, not the keys.
#[test]
fn a_small_window_keeps_every_answer_key_in_view() {
    let mut app = new_app();
    app.ask(long_write(Some("/etc")));
    for (width, height) in [(58, 15), (50, 14), (40, 12), (30, 10)] {
        // A key and its word are held together by a no-break space.
        let screen = draw_at(&app, width, height).replace('\u{a0}', " ");
        // Whole words where they fit, else one line ("y once · s session … · a always … · n no").
        for keys in [["y yes", "y once"], ["s yes", "s session"], ["a always", "a always"], ["n no", "n no"]]
        {
            assert!(keys.iter().any(|k| screen.contains(k)), "{keys:?} at {width}×{height}:\n{screen}");
        }
        assert!(screen.contains("/etc"), "what a grant covers is shown at {width}×{height}:\n{screen}");
    }
    let screen = draw_at(&app, 58, 15);
    assert!(screen.contains("Write /etc/motd"), "what would run, when there is room:\n{screen}");
    // The keys shown in one line are the keys that answer: `s` grants within the scope shown.
    draw_at(&app, 30, 10);
    assert_eq!(
        app.on_key(key(KeyCode::Char('s'))),
        Some(Command::Decide {
            approval_id: "w".into(),
            decision: Decision::AllowSession { argument_prefix: Some("/etc".into()) }
        })
    );

    // An asked question keeps its options and keys.
    app.approvals.clear();
    app.ask(asked("q", &["SQLite", "Postgres", "MySQL"], false, false));
    let screen = draw_at(&app, 50, 14);
    for part in ["1 SQLite", "3 MySQL", "a number or"] {
        assert!(screen.contains(part), "{part:?}:\n{screen}");
    }
}

#[test]
fn a_question_ignores_keys_typed_as_it_appears_and_while_the_prompt_has_text() {
    let mut app = App::new("m", "/f", ApprovalMode::Manual, "s");
    app.choice_window = Duration::ZERO;
    app.running = true;
    app.ask(question("q1", "make"));
    assert_eq!(app.on_key(key(KeyCode::Char('y'))), None, "typed as the question appeared");
    assert_eq!((app.input.as_str(), app.approvals.len()), ("", 1), "neither an answer nor text");
    assert!(draw(&app).contains("press it again"));
    app.question_grace = Duration::ZERO;
    // A draft in the prompt keeps the keys; the box says how to answer.
    app.approvals.clear();
    type_text(&mut app, "draft");
    app.ask(question("q2", "make"));
    assert_eq!(app.on_key(key(KeyCode::Char('y'))), None, "the prompt has text: keys are text");
    assert_eq!(app.input, "drafty");
    assert!(draw(&app).contains("Tab answers this question"));
    // Tab moves to the question; the draft stays.
    assert_eq!(app.on_key(key(KeyCode::Tab)), None);
    assert!(matches!(app.on_key(key(KeyCode::Char('y'))), Some(Command::Decide { .. })));
    assert_eq!(app.input, "drafty", "the draft is kept");
    // A key right after typing in the prompt is not an answer either.
    app.input.clear();
    app.cursor = 0;
    app.question_grace = Duration::from_secs(60);
    app.last_typed = Some(std::time::Instant::now());
    app.ask(question("q3", "make"));
    app.approvals[0].arrived -= Duration::from_secs(120);
    assert_eq!(app.on_key(key(KeyCode::Char('y'))), None, "amid typing");
    app.question_grace = Duration::ZERO;
    app.paste("yes please");
    assert_eq!(app.input, "yes please", "a paste is text, never an answer");
    assert_eq!(app.approvals.len(), 1);
    app.input.clear();
    app.cursor = 0;
    assert!(matches!(app.on_key(key(KeyCode::Char('y'))), Some(Command::Decide { .. })));
}

#[test]
fn keys_change_the_mode_cancel_a_turn_and_edit_the_prompt() {
    let mut app = new_app();
    assert_eq!(app.on_key(ctrl('t')), Some(Command::SetMode(ApprovalMode::AutoRun)));
    app.mode = ApprovalMode::AutoRun;
    assert_eq!(app.on_key(ctrl('t')), Some(Command::SetMode(ApprovalMode::ReadOnly)));
    type_text(&mut app, "/mode manual");
    assert_eq!(app.on_key(key(KeyCode::Enter)), Some(Command::SetMode(ApprovalMode::Manual)));
    type_text(&mut app, "/sandbox read-only");
    assert_eq!(app.on_key(key(KeyCode::Enter)), Some(Command::SetSandbox(tool_core::SandboxMode::ReadOnly)));
    type_text(&mut app, "helo");
    app.on_key(key(KeyCode::Left));
    app.on_key(key(KeyCode::Char('l')));
    assert_eq!(app.input, "hello");
    app.on_key(key(KeyCode::End));
    app.on_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::SHIFT));
    type_text(&mut app, "world");
    assert_eq!(app.on_key(key(KeyCode::Enter)), Some(Command::Submit("hello\nworld".into())));
    assert!(app.running);
    assert_eq!(app.on_key(key(KeyCode::Esc)), Some(Command::Cancel));
    assert_eq!(app.on_key(ctrl('c')), Some(Command::Cancel));
    app.running = false;
    // One Ctrl-C on an empty prompt only says what a second does; another key disarms it.
    assert_eq!(app.on_key(ctrl('c')), None, "one press never quits");
    assert!(draw(&app).contains("press Ctrl-C again to quit"));
    app.on_key(key(KeyCode::Char('x')));
    app.on_key(key(KeyCode::Backspace));
    assert_eq!(app.on_key(ctrl('c')), None, "a key between starts again");
    assert_eq!(app.on_key(ctrl('c')), Some(Command::Quit));
    let mut unconfigured = new_app();
    unconfigured.setup_hint = Some("no model configured: set OPENAI_API_KEY".into());
    type_text(&mut unconfigured, "hi");
    assert_eq!(unconfigured.on_key(key(KeyCode::Enter)), None, "nothing to send to");
    let screen = draw(&unconfigured);
    insta::assert_snapshot!("no_model", screen);
    assert!(screen.contains("› hi"), "what is typed shows: {screen}");
    assert!(screen.contains("no model configured") && screen.contains("F2 or /console"), "{screen}");
    unconfigured.input.clear();
    unconfigured.cursor = 0;
    type_text(&mut unconfigured, "/journal");
    assert_eq!(
        unconfigured.on_key(key(KeyCode::Enter)),
        Some(Command::LoadJournal),
        "commands work without a model"
    );
}

fn draw_at(app: &App, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(Vt100Backend::new(width, height)).unwrap();
    terminal.draw(|frame| render(app, frame)).unwrap();
    terminal.backend().text()
}

/// A 300-character prompt wraps at words and grows (a third of the screen at most, then
/// scrolls with the cursor); it stays editable in the middle; ↑/↓ walk earlier prompts; Esc
/// keeps a draft and a second Esc clears it (↑ brings it back); Enter during a turn queues.
#[test]
fn the_prompt_wraps_keeps_history_and_queues_what_is_sent_during_a_turn() {
    let mut app = new_app();
    let long = "Please read every file under src and explain, in plain words and without jargon, how the \
                configuration is loaded at start, which environment variables override which settings, \
                what happens when a value is missing or malformed, and where the defaults are written \
                down, then propose one change that would make it simpler.";
    assert!(long.chars().count() >= 300);
    type_text(&mut app, long);
    let narrow = draw_at(&app, 80, 24);
    insta::assert_snapshot!("long_prompt_80x24", narrow);
    assert!(
        narrow.contains("› Please read every file under src and explain, in plain words and without"),
        "{narrow}"
    );
    assert!(narrow.contains("\n  make it simpler.\n"), "the end shows, on its own row: {narrow}");
    let wide = draw_at(&app, 120, 35);
    insta::assert_snapshot!("long_prompt_120x35", wide);
    // Editable in the middle: Home, then a word at the start.
    app.on_key(key(KeyCode::Home));
    type_text(&mut app, "Now: ");
    assert!(app.input.starts_with("Now: Please read"));
    assert!(
        draw_at(&app, 80, 24).contains("› Now: Please read every file"),
        "the view follows the cursor up"
    );
    assert!(
        matches!(app.on_key(key(KeyCode::Enter)), Some(Command::Submit(text)) if text.starts_with("Now: "))
    );

    // Sent during the turn: queued, shown, and sent as the next turn when this one ends.
    type_text(&mut app, "also run the tests");
    assert_eq!(app.on_key(key(KeyCode::Enter)), None, "queued, not sent");
    assert_eq!(app.queued, vec!["also run the tests".to_owned()]);
    assert!(draw(&app).contains("queued › also run the tests (sent when this turn ends)"));
    app.finish(&agent::Outcome::Answered { text: String::new(), truncated: false });
    assert_eq!(app.take_queued(), Some(Command::Submit("also run the tests".into())));
    assert!(app.running && app.queued.is_empty());
    app.finish(&agent::Outcome::Answered { text: String::new(), truncated: false });

    // ↑ and ↓ walk what was sent, and come back to the draft.
    type_text(&mut app, "half-typed");
    app.on_key(key(KeyCode::Up));
    assert_eq!(app.input, "also run the tests");
    app.on_key(key(KeyCode::Up));
    assert!(app.input.starts_with("Now: Please read"));
    app.on_key(key(KeyCode::Down));
    app.on_key(key(KeyCode::Down));
    assert_eq!(app.input, "half-typed");

    // Esc keeps the draft; a second Esc clears it, and ↑ brings it back.
    assert_eq!(app.on_key(key(KeyCode::Esc)), None);
    assert_eq!(app.input, "half-typed");
    assert!(draw(&app).contains("press Esc (or Ctrl-C) again to clear the prompt"));
    app.on_key(key(KeyCode::Esc));
    assert_eq!(app.input, "");
    app.on_key(key(KeyCode::Up));
    assert_eq!(app.input, "half-typed");
}

/// Markdown the way a terminal can show it: a table with aligned columns, emphasis, a link.
#[test]
fn markdown_tables_emphasis_and_links_are_drawn_not_shown_raw() {
    let mut app = new_app();
    app.on_agent(AgentEvent::Delta(Delta::Text(
        "The *three* settings, from **weakest** to strongest:\n\n\
         | source | example | wins over |\n\
         |---|---|---|\n\
         | `config.toml` | `level = 2` | nothing |\n\
         | environment | `APP_LEVEL=3` | the file |\n\
         | flag | `--level 4` | everything |\n\n\
         - see [the docs](https://example.com/config)\n\
         > keep snake_case names as they are"
            .into(),
    )));
    for (width, height) in [(80, 24), (120, 35)] {
        let screen = draw_at(&app, width, height);
        insta::assert_snapshot!(format!("markdown_{width}x{height}"), screen);
        assert!(screen.contains("source      │ example     │ wins over"), "{screen}");
        assert!(screen.contains("config.toml │ level = 2   │ nothing"), "{screen}");
        assert!(screen.contains("The three settings, from weakest to strongest:"), "{screen}");
        assert!(screen.contains("• see the docs (https://example.com/config)"), "{screen}");
        assert!(screen.contains("│ keep snake_case names as they are"), "{screen}");
        assert!(!screen.contains("**") && !screen.contains("|---"), "{screen}");
    }
}

/// Command output as a terminal would leave it (colour codes out, `\r` redraws settled), while
/// running and when done; a diff with two changes far apart shows both, folding what is between;
/// a file written over shows its diff.
#[test]
fn output_and_diffs_show_what_changed() {
    let mut app = new_app();
    let build = json!({ "command": "cargo build" }).to_string();
    call(&mut app, 0, "c1", "runCommand", &build, RUN);
    reply(&mut app, &[("c1", "runCommand", &build)]);
    app.on_call(Event::Proposed {
        call_id: "c1".into(),
        tool: RUN.0.into(),
        api: RUN.1.into(),
        arguments: json!({}),
    });
    app.on_call(Event::Started { call_id: "c1".into(), timeout_ms: 120_000 });
    app.on_call(Event::Progress {
        call_id: "c1".into(),
        progress: tool_core::Progress {
            output: Some(
                "\x1b[1;32m   Compiling\x1b[0m app v0.1.0\n  0% [    ]\r 50% [##  ]\r100% [####]\n".into(),
            ),
            ..Default::default()
        },
    });
    for (width, height) in [(80, 24), (120, 35)] {
        let running = draw_at(&app, width, height);
        insta::assert_snapshot!(format!("ansi_progress_{width}x{height}"), running);
        assert!(running.contains("   Compiling app v0.1.0") && running.contains("100% [####]"), "{running}");
        assert!(!running.contains("[1;32m") && !running.contains(" 50%"), "{running}");
    }

    // An edit with changes at lines 3, 12 and 40 of a 60-line file, with wide context: every
    // change shows, and the long unchanged runs fold.
    let mut new_app_ = new_app();
    let old: String = (1..=60).map(|n| format!("line {n}\n")).collect();
    let new = old
        .replace("line 3\n", "line three\n")
        .replace("line 12\n", "line twelve\n")
        .replace("line 40\n", "line forty\n");
    let unified = similar::TextDiff::from_lines(&old, &new)
        .unified_diff()
        .context_radius(8)
        .header("src/a.rs", "src/a.rs")
        .to_string();
    let edit = json!({ "path": "src/a.rs", "oldText": "x", "newText": "y" }).to_string();
    call(&mut new_app_, 0, "e1", "editFile", &edit, ("local-system", "editFile"));
    reply(&mut new_app_, &[("e1", "editFile", &edit)]);
    settle(
        &mut new_app_,
        "e1",
        "editFile",
        ("local-system", "editFile"),
        ToolOutput::ok("Edited").with_state(json!({ "diff": unified })),
    );
    let written = json!({ "path": "/w/notes.md", "content": "# Notes\nnew\n" }).to_string();
    call(&mut new_app_, 0, "w1", "writeFile", &written, ("local-system", "writeFile"));
    reply(&mut new_app_, &[("w1", "writeFile", &written)]);
    let overwrite = "--- /w/notes.md\n+++ /w/notes.md\n@@ -1,2 +1,2 @@\n # Notes\n-old\n+new\n";
    settle(
        &mut new_app_,
        "w1",
        "writeFile",
        ("local-system", "writeFile"),
        ToolOutput::ok("Wrote").with_state(json!({ "diff": overwrite })),
    );
    for (width, height) in [(80, 50), (120, 50)] {
        let screen = draw_at(&new_app_, width, height);
        insta::assert_snapshot!(format!("diffs_{width}x{height}"), screen);
        for change in
            ["-line 3", "+line three", "-line 12", "+line twelve", "-line 40", "+line forty", "-old", "+new"]
        {
            assert!(screen.contains(change), "{change}: {screen}");
        }
        assert!(screen.contains("unchanged lines"), "{screen}");
        assert!(!screen.contains("a//"), "{screen}");
    }
}

/// A resumed conversation shows how each call ended (denied, blocked, cancelled — not a generic
/// failure), keeps the app's own notes out of the person's words, and prints cards whole on exit.
#[test]
fn a_resumed_conversation_shows_how_calls_ended_and_whose_words_are_whose() {
    use agent::Message;
    let call = |id: &str, command: &str| ToolCall {
        id: id.into(),
        name: "runCommand".into(),
        arguments: json!({ "command": command }).to_string(),
    };
    // Transcripts saved before the kind was kept have the text only.
    let result = |id: &str, content: &str| Message::Tool {
        call_id: id.into(),
        name: "runCommand".into(),
        content: content.into(),
        is_error: true,
        kind: None,
    };
    let result_of = |id: &str, content: &str, kind: tool_core::ErrorKind| Message::Tool {
        call_id: id.into(),
        name: "runCommand".into(),
        content: content.into(),
        is_error: true,
        kind: Some(kind),
    };
    let history = vec![
        Message::user("clean up"),
        Message::Assistant {
            content: String::new(),
            reasoning: None,
            tool_calls: vec![
                call("d", "rm -rf build"),
                call("b", "curl evil.example"),
                call("c", "sleep 99"),
                call("h", "git push --force"),
                call("r", "cat /etc/shadow"),
            ],
        },
        result("d", "The user denied this call: not now"),
        result("b", &format!("{} Reason: network", tool_executor::BLOCKED_CONTENT)),
        result("c", "The call was cancelled while waiting for approval."),
        // Read from the kind the pipeline gave, whatever the words.
        result_of(
            "h",
            "A hook of the user's (guard.sh) denied this call: no force pushes",
            tool_core::ErrorKind::Denied,
        ),
        result_of("r", "Blocked before running: a secret's folder.", tool_core::ErrorKind::Blocked),
        Message::user(format!("{}\n\nplease only list the files", agent::CANCELLED_NOTE)),
    ];
    let mut app = new_app();
    app.load_history(&history);
    let screen = draw_at(&app, 120, 35);
    for badge in ["[denied]", "[blocked]", "[cancelled]"] {
        assert!(screen.contains(badge), "{badge}: {screen}");
    }
    assert_eq!(screen.matches("[denied]").count(), 2, "the hook's denial too: {screen}");
    assert_eq!(screen.matches("[blocked]").count(), 2, "{screen}");
    assert!(!screen.contains("[execution]"), "{screen}");
    assert!(screen.contains("· interrupted") && screen.contains("› please only list the files"), "{screen}");
    assert!(!screen.contains("The person interrupted"), "the note is not shown as the person's: {screen}");
    let printed: String = app.cells.iter().map(toolhost::ui::view::cell_text).collect();
    assert!(
        printed.contains("rm -rf build") && printed.contains("not now"),
        "whole cards on exit: {printed}"
    );
}

/// Prose wraps at words, not inside them.
#[test]
fn text_wraps_at_words() {
    let mut app = new_app();
    app.on_agent(AgentEvent::Delta(Delta::Text(
        "The configuration is read from config.toml first, then environment variables override individual \
         settings, and finally command-line flags override everything else."
            .into(),
    )));
    let text = "The configuration is read from config.toml first, then environment variables override \
                individual settings, and finally command-line flags override everything else.";
    let screen = draw(&app);
    let lines: Vec<&str> = screen.lines().take_while(|l| !l.trim().is_empty()).map(str::trim_end).collect();
    assert!(lines.len() > 1, "{screen}");
    // Rows joined again at their breaks give the text back: no word was cut.
    assert_eq!(lines.join(" "), text, "{screen}");
}

/// Keys the test sends to the running loop.
fn keys() -> (
    tokio::sync::mpsc::UnboundedSender<TermEvent>,
    impl futures::Stream<Item = std::io::Result<TermEvent>> + Unpin,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let stream = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (Ok(e), rx)) });
    (tx, Box::pin(stream))
}

/// The full screen's loop on a VT100-emulated terminal of `height` rows: its screen, the keys the
/// test sends, and the loop's task.
fn start(
    context: toolhost::ui::run::Context,
    questions: tokio::sync::mpsc::UnboundedReceiver<toolhost::ui::broker::Asked>,
    height: u16,
) -> (
    toolhost::ui::vt::ScreenHandle,
    tokio::sync::mpsc::UnboundedSender<TermEvent>,
    tokio::task::JoinHandle<anyhow::Result<App>>,
) {
    let backend = Vt100Backend::new(WIDTH, height);
    let screen = backend.handle();
    let mut terminal = Terminal::new(backend).unwrap();
    let (tx, stream) = keys();
    let running =
        tokio::spawn(async move { toolhost::ui::run::run(&mut terminal, stream, context, questions).await });
    (screen, tx, running)
}

async fn wait_for(screen: &toolhost::ui::vt::ScreenHandle, what: &str) -> String {
    for _ in 0..300 {
        let text = screen.text();
        if text.contains(what) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("`{what}` never showed:\n{}", screen.text());
}

/// Ctrl-C twice on an empty prompt: the app quits.
fn quit(tx: &tokio::sync::mpsc::UnboundedSender<TermEvent>) {
    for _ in 0..2 {
        tx.send(TermEvent::Key(ctrl('c'))).unwrap();
    }
}

/// Waits for one reading of the screen that shows every one of `what`.
async fn wait_for_all(screen: &toolhost::ui::vt::ScreenHandle, what: &[&str]) -> String {
    for _ in 0..300 {
        let text = screen.text();
        if what.iter().all(|w| text.contains(w)) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what:?} never showed together:\n{}", screen.text());
}

/// The screen with temp folder names replaced, so snapshots do not change from run to run: a
/// whole path (`/tmp/.tmpAbC1`) or the status line's last part of one (`…/.tmpAbC1`).
fn without_temp_paths(text: &str) -> String {
    let mut text = text.to_owned();
    for (pattern, keep) in [("/tmp/", ""), ("…/.tmp", "…/")] {
        let mut out = String::with_capacity(text.len());
        let mut rest = text.as_str();
        while let Some(at) = rest.find(pattern) {
            out.push_str(&rest[..at]);
            out.push_str(keep);
            out.push_str("[TEMP]");
            let after = &rest[at + pattern.len()..];
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_'))
                .unwrap_or(after.len());
            rest = &after[end..];
        }
        out.push_str(rest);
        text = out;
    }
    text
}

fn send_text(tx: &tokio::sync::mpsc::UnboundedSender<TermEvent>, text: &str) {
    for c in text.chars() {
        tx.send(TermEvent::Key(key(KeyCode::Char(c)))).unwrap();
    }
}

async fn context(
    server: &ScriptedModel,
    folder: &std::path::Path,
    mode: ApprovalMode,
) -> (toolhost::ui::run::Context, tokio::sync::mpsc::UnboundedReceiver<toolhost::ui::broker::Asked>) {
    let (broker, questions) = toolhost::ui::broker::ScreenBroker::new();
    let toolbox = client_executor::device::builtin_toolbox().unwrap();
    let executor = tool_executor::Executor::builder(Arc::new(toolbox)).broker(Arc::new(broker)).build();
    let env = |name: &str| match name {
        "OPENAI_BASE_URL" => Some(server.base_url().to_owned()),
        "OPENAI_API_KEY" => Some("sk-scripted".to_owned()),
        _ => None,
    };
    let profile = agent::config::resolve(
        &agent::ConfigFile::default(),
        "config.toml",
        &agent::Overrides::default(),
        &env,
    )
    .unwrap();
    let guard = toolhost::setup::GuardArgs {
        folder: Some(folder.to_owned()),
        sandbox: tool_core::SandboxMode::WorkspaceWrite,
        network: tool_core::NetworkAccess::Off,
        mcp_config: None,
        skills: Default::default(),
        hooks: None,
        temp_root: Default::default(),
        checkpoint_max_mib: 0,
        checkpoint_store_max_gib: 5,
        preview_writes: false,
        checkpoint_dir: None,
        sub_agents: None,
    };
    let context = toolhost::ui::run::Context {
        records: None,
        executor,
        profile: Some(profile),
        folder: folder.canonicalize().unwrap(),
        data: None,
        guard,
        mode,
        session_id: toolhost::setup::new_session_id(&folder.canonicalize().unwrap()),
        history: Vec::new(),
        setup_hint: None,
        shift_enter: false,
        theme: Default::default(),
        instructions: toolhost::instructions::Instructions::default(),
        notes: Vec::new(),
        skills: Default::default(),
    };
    (context, questions)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_works_while_a_command_streams_its_output() {
    let folder = tempfile::tempdir().unwrap();
    let command = json!({ "command": "for i in $(seq 1 40); do echo out-$i; sleep 0.1; done" }).to_string();
    let server = ScriptedModel::start(vec![
        openai_reply("", "Counting.", &[("count", "runCommand", &command)], "tool_calls"),
        openai_reply("", "All done.", &[], "stop"),
    ])
    .await;
    let (context, questions) = context(&server, folder.path(), ApprovalMode::AutoRun).await;
    let (screen, tx, running) = start(context, questions, HEIGHT);

    send_text(&tx, "count to forty");
    tx.send(TermEvent::Key(key(KeyCode::Enter))).unwrap();
    wait_for(&screen, "out-3").await;
    // Keys typed while the output streams land in the prompt at once.
    send_text(&tx, "next: tidy up");
    let during = wait_for(&screen, "› next: tidy up").await;
    assert!(!during.contains("out-40"), "typed while the command still ran:\n{during}");
    assert!(during.contains("[running]"), "{during}");
    let after = wait_for(&screen, "All done.").await;
    assert!(after.contains("› next: tidy up"), "what was typed stays:\n{after}");
    drop(tx);
    let app = tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
    assert_eq!(app.input, "next: tidy up");
    let sent = &server.received()[1].body["messages"][3];
    assert!(sent["content"].as_str().unwrap().contains("out-40"), "{sent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_answered_on_screen_and_escape_cancels_a_running_command() {
    let folder = tempfile::tempdir().unwrap();
    let touch = json!({ "command": "touch made-here" }).to_string();
    let sleep = json!({ "command": "sleep 30" }).to_string();
    let server = ScriptedModel::start(vec![
        openai_reply("", "", &[("t1", "runCommand", &touch)], "tool_calls"),
        openai_reply("", "Made it.", &[], "stop"),
        openai_reply("", "", &[("s1", "runCommand", &sleep)], "tool_calls"),
        openai_reply("", "Stopped as asked.", &[], "stop"),
    ])
    .await;
    let (context, questions) = context(&server, folder.path(), ApprovalMode::Manual).await;
    let (screen, tx, running) = start(context, questions, HEIGHT);

    send_text(&tx, "make a file");
    tx.send(TermEvent::Key(key(KeyCode::Enter))).unwrap();
    let asked = wait_for(&screen, "approval needed").await;
    assert!(asked.contains("touch made-here"), "{asked}");
    assert_eq!(screen.bells(), 1, "the bell rang for the question");
    assert!(!folder.path().join("made-here").exists());
    // A new question ignores keys for a moment (a word being typed as it appears is not an answer).
    tokio::time::sleep(toolhost::ui::state::QUESTION_GRACE).await;
    tx.send(TermEvent::Key(key(KeyCode::Char('y')))).unwrap();
    wait_for(&screen, "Made it.").await;
    assert!(folder.path().join("made-here").exists());

    send_text(&tx, "wait a while");
    tx.send(TermEvent::Key(key(KeyCode::Enter))).unwrap();
    wait_for(&screen, "approval needed").await;
    tokio::time::sleep(toolhost::ui::state::QUESTION_GRACE).await;
    tx.send(TermEvent::Key(key(KeyCode::Char('s')))).unwrap();
    wait_for(&screen, "[running]").await;
    tx.send(TermEvent::Key(key(KeyCode::Esc))).unwrap();
    let cancelled = wait_for(&screen, "· cancelled").await;
    assert!(!cancelled.contains("[running]"), "{cancelled}");
    quit(&tx);
    let app = tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
    assert!(!app.running);
}

/// A trusted folder's AGENTS.md is in the system prompt of the request the model gets, and the
/// screen says once which files are in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_md_reaches_the_model_and_is_shown_once() {
    let folder = tempfile::tempdir().unwrap();
    let folder_path = folder.path().canonicalize().unwrap();
    std::fs::write(folder_path.join("AGENTS.md"), "Answer in French. Run `make check` before saying done.\n")
        .unwrap();
    let server = ScriptedModel::start(vec![openai_reply("", "D'accord.", &[], "stop")]).await;
    let (mut context, questions) = context(&server, &folder_path, ApprovalMode::Manual).await;
    let files = toolhost::instructions::project_files(&folder_path);
    context.instructions = toolhost::instructions::Instructions::load(None, &files, true);
    let (screen, tx, running) = start(context, questions, HEIGHT);
    let shown = wait_for(&screen, "instructions in use:").await;
    assert!(shown.contains("AGENTS.md"), "{shown}");
    send_text(&tx, "hello");
    tx.send(TermEvent::Key(key(KeyCode::Enter))).unwrap();
    wait_for(&screen, "D'accord.").await;
    let request = &server.received()[0].body;
    let system = request["messages"][0]["content"].as_str().unwrap_or_default();
    assert_eq!(request["messages"][0]["role"], "system");
    assert!(system.contains("Answer in French. Run `make check` before saying done."), "{system}");
    quit(&tx);
    tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
}

/// `/clear` starts a new conversation, `/resume` picks an earlier one back (the model is sent it
/// again), `/status` says the model, context and sandbox, `/compact` summarises, `/model` with an
/// unknown profile says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_commands_clear_resume_status_and_compact() {
    let folder = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let server = ScriptedModel::start(vec![
        openai_reply("", "Answer one.", &[], "stop"),
        openai_reply("", "Answer two.", &[], "stop"),
        // Long enough that a summary is smaller: `/compact` replaces the conversation.
        openai_reply(
            "",
            &format!("Answer three. {}", "More on the third question. ".repeat(12)),
            &[],
            "stop",
        ),
        openai_reply("", "We talked about the first question.", &[], "stop"),
    ])
    .await;
    let (mut context, questions) = context(&server, folder.path(), ApprovalMode::Manual).await;
    context.data = Some(data.path().to_owned());
    let (screen, tx, running) = start(context, questions, HEIGHT);
    let say = |text: &str| {
        send_text(&tx, text);
        tx.send(TermEvent::Key(key(KeyCode::Enter))).unwrap();
    };
    say("the first question");
    wait_for(&screen, "Answer one.").await;
    say("/clear");
    wait_for(&screen, "a new conversation").await;
    say("the second question");
    wait_for(&screen, "Answer two.").await;
    let second = server.received()[1].body["messages"].to_string();
    assert!(!second.contains("the first question"), "a new conversation: {second}");

    say("/resume");
    let picker = wait_for(&screen, "Earlier conversations in this folder").await;
    // The time each was saved is masked: it is now's.
    let masked: String = without_temp_paths(&picker)
        .lines()
        .map(|line| match line.get(..19) {
            Some(time) if time.len() == 19 && time.as_bytes()[4] == b'-' && time.as_bytes()[13] == b':' => {
                format!("[SAVED AT]{}", &line[19..])
            }
            _ => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    insta::assert_snapshot!("resume_picker", masked);
    assert!(picker.contains("the first question") && !picker.contains("the second question"), "{picker}");
    tx.send(TermEvent::Key(key(KeyCode::Enter))).unwrap();
    wait_for(&screen, "resumed 2 messages").await;
    say("the third question");
    wait_for(&screen, "Answer three.").await;
    let third = server.received()[2].body["messages"].to_string();
    assert!(third.contains("the first question") && !third.contains("the second question"), "{third}");

    say("/status");
    // The whole frame (a screen read mid-frame has only some of its lines).
    let mut status = wait_for(&screen, "profile env").await.replace('\n', " ");
    let parts = ["context ~", "tokens used", "approvals manual", "Answer"];
    for _ in 0..100 {
        if parts.iter().all(|part| status.contains(part)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        status = screen.text().replace('\n', " ");
    }
    for part in parts {
        assert!(status.contains(part), "{part}: {status}");
    }
    say("/compact");
    let compacted = wait_for(&screen, "compacted:").await;
    assert!(compacted.contains("messages summarised"), "{compacted}");
    let summary_request = server.received()[3].body["messages"].to_string();
    assert!(summary_request.contains("Summarise the conversation above"), "{summary_request}");

    say("/model no-such-profile");
    wait_for(&screen, "no-such-profile").await;
    quit(&tx);
    tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
}

/// `@` completes the folder's files (Tab takes one) and the file named is attached to the
/// message the model gets; `/` completes commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_paths_complete_and_attach_and_slash_commands_complete() {
    let folder = tempfile::tempdir().unwrap();
    let folder_path = folder.path().canonicalize().unwrap();
    std::fs::create_dir_all(folder_path.join("src")).unwrap();
    std::fs::write(folder_path.join("src/lib.rs"), "pub fn answer() -> u8 { 42 }\n").unwrap();
    let server = ScriptedModel::start(vec![openai_reply("", "It returns 42.", &[], "stop")]).await;
    let (context, questions) = context(&server, &folder_path, ApprovalMode::Manual).await;
    let (screen, tx, running) = start(context, questions, HEIGHT);
    send_text(&tx, "/co");
    let commands = wait_for(&screen, "Tab completes").await;
    assert!(commands.contains("/compact") && commands.contains("/console"), "{commands}");
    for _ in 0..3 {
        tx.send(TermEvent::Key(key(KeyCode::Backspace))).unwrap();
    }
    // The file list arrives from a background task: wait until `@` offers it.
    send_text(&tx, "what does @li");
    // All typed and the list arrived: the prompt and the box both show.
    let mut offered = wait_for(&screen, "› what does @li").await;
    for _ in 0..200 {
        if offered.contains("│@src/lib.rs") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        offered = screen.text();
    }
    insta::assert_snapshot!(
        "at_completion",
        offered.lines().filter(|l| !l.contains("(ctrl-t)")).collect::<Vec<_>>().join("\n")
    );
    tx.send(TermEvent::Key(key(KeyCode::Tab))).unwrap();
    wait_for(&screen, "› what does @src/lib.rs").await;
    send_text(&tx, "return?");
    tx.send(TermEvent::Key(key(KeyCode::Enter))).unwrap();
    let done = wait_for(&screen, "It returns 42.").await;
    assert!(done.contains("attached src/lib.rs"), "{done}");
    let sent = server.received()[0].body["messages"].to_string();
    assert!(sent.contains("what does @src/lib.rs return?"), "{sent}");
    assert!(
        sent.contains("<file path=\\\"src/lib.rs\\\">") && sent.contains("pub fn answer() -> u8 { 42 }"),
        "{sent}"
    );
    quit(&tx);
    tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
}

/// Through the real loop: a sentence typed at the question, starting with `s`, is a reason the
/// model reads, not "allow for this session".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reason_typed_at_the_question_reaches_the_model() {
    let folder = tempfile::tempdir().unwrap();
    let fetch = json!({ "command": "curl https://example.com" }).to_string();
    let server = ScriptedModel::start(vec![
        openai_reply("", "", &[("c1", "runCommand", &fetch)], "tool_calls"),
        openai_reply("", "Staying offline.", &[], "stop"),
    ])
    .await;
    let (context, questions) = context(&server, folder.path(), ApprovalMode::Manual).await;
    let (screen, tx, running) = start(context, questions, HEIGHT);
    send_text(&tx, "fetch the page");
    tx.send(TermEvent::Key(key(KeyCode::Enter))).unwrap();
    wait_for(&screen, "approval needed").await;
    tokio::time::sleep(toolhost::ui::state::QUESTION_GRACE).await;
    send_text(&tx, "skip that, we are offline");
    wait_for(&screen, "why not? skip that, we are offline").await;
    tx.send(TermEvent::Key(key(KeyCode::Enter))).unwrap();
    let done = wait_for(&screen, "Staying offline.").await;
    assert!(done.contains("denied: skip that, we are offline"), "{done}");
    let told = &server.received()[1].body["messages"];
    let result = told.as_array().unwrap().iter().find(|m| m["tool_call_id"] == "c1").unwrap();
    assert!(result["content"].as_str().unwrap().contains("skip that, we are offline"), "{result}");
    quit(&tx);
    tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
}

/// A screen with no model, on `folder`, in manual mode.
fn context_without_a_model(
    executor: tool_executor::Executor,
    folder: &std::path::Path,
    records: Option<Arc<dyn tool_core::storage::RecordStore>>,
    setup_hint: Option<&str>,
) -> toolhost::ui::run::Context {
    let canonical = folder.canonicalize().unwrap();
    toolhost::ui::run::Context {
        records,
        executor,
        profile: None,
        folder: canonical.clone(),
        data: None,
        guard: toolhost::setup::GuardArgs {
            folder: Some(canonical.clone()),
            sandbox: tool_core::SandboxMode::WorkspaceWrite,
            network: tool_core::NetworkAccess::Off,
            mcp_config: None,
            skills: Default::default(),
            hooks: None,
            temp_root: Default::default(),
            checkpoint_max_mib: 0,
            checkpoint_store_max_gib: 5,
            preview_writes: false,
            checkpoint_dir: None,
            sub_agents: None,
        },
        mode: ApprovalMode::Manual,
        session_id: toolhost::setup::new_session_id(&canonical),
        history: Vec::new(),
        setup_hint: setup_hint.map(str::to_owned),
        shift_enter: false,
        theme: Default::default(),
        instructions: toolhost::instructions::Instructions::default(),
        notes: Vec::new(),
        skills: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_model_the_console_runs_tools_and_the_journal_shows_and_revokes() {
    let folder = tempfile::tempdir().unwrap();
    std::fs::write(folder.path().join("notes.txt"), "hello from the console\n").unwrap();
    let data = tempfile::tempdir().unwrap();
    let journal = journal::open(&format!("sqlite://{}", data.path().join("j.db").display())).await.unwrap();
    let project = folder.path().canonicalize().unwrap().display().to_string();
    journal
        .remember(&journal::RememberedDecision {
            id: "always-cargo".into(),
            tenant: "local".into(),
            project: project.clone(),
            tool: "local-system".into(),
            api: "runCommand".into(),
            argument_prefix: Some("cargo test".into()),
            created_by: Some("terminal".into()),
            created_at: 0,
        })
        .await
        .unwrap();
    let (broker, questions) = toolhost::ui::broker::ScreenBroker::new();
    let toolbox = client_executor::device::builtin_toolbox().unwrap();
    let executor = tool_executor::Executor::builder(Arc::new(toolbox))
        .broker(Arc::new(broker))
        .journal(journal.clone())
        .build();
    let hint = "no model configured: set OPENAI_API_KEY or ANTHROPIC_API_KEY";
    let context = context_without_a_model(executor, folder.path(), None, Some(hint));
    let (screen, tx, running) = start(context, questions, 30);

    // A screen read mid-frame holds only some of its lines: wait for one that holds all three.
    wait_for_all(&screen, &["Tool console", "local-system/readFile", "no model configured"]).await;
    // Down to readFile, open its form, fill the path, run it.
    let position = toolhost::ui::run::catalogue_names(&client_executor::device::builtin_toolbox().unwrap())
        .iter()
        .position(|n| n == "local-system/readFile")
        .unwrap();
    for _ in 0..position {
        tx.send(TermEvent::Key(key(KeyCode::Down))).unwrap();
    }
    tx.send(TermEvent::Key(key(KeyCode::Enter))).unwrap();
    wait_for(&screen, "*path").await;
    tx.send(TermEvent::Key(key(KeyCode::Enter))).unwrap();
    wait_for(&screen, "path is required").await;
    send_text(&tx, "notes.txt");
    insta::assert_snapshot!("console_form", without_temp_paths(&wait_for(&screen, "notes.txt▏").await));
    tx.send(TermEvent::Key(key(KeyCode::Enter))).unwrap();
    let ran = wait_for(&screen, "hello from the console").await;
    assert!(ran.contains("[done]"), "{ran}");

    // The journal has the call; its record opens whole.
    tx.send(TermEvent::Key(key(KeyCode::F(3)))).unwrap();
    wait_for(&screen, "Journal of this folder").await;
    let rows = wait_for(&screen, "executed  local-system/readFile").await;
    assert!(rows.contains("notes.txt"), "{rows}");
    tx.send(TermEvent::Key(key(KeyCode::Enter))).unwrap();
    // The whole frame: the record's first line and its arguments (a screen read mid-frame has
    // only some of its lines).
    let mut record = wait_for(&screen, "\"call_id\"").await;
    for _ in 0..100 {
        if record.contains("notes.txt") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        record = screen.text();
    }
    assert!(record.contains("\"call_id\"") && record.contains("notes.txt"), "{record}");
    tx.send(TermEvent::Key(key(KeyCode::Char('q')))).unwrap();
    // Remembered decisions are listed and revocable.
    tx.send(TermEvent::Key(key(KeyCode::Char('r')))).unwrap();
    wait_for(&screen, "local-system/runCommand `cargo test…`").await;
    tx.send(TermEvent::Key(key(KeyCode::Char('d')))).unwrap();
    wait_for(&screen, "none").await;
    assert!(journal.remembered("local", Some(&project)).await.unwrap().is_empty());
    drop(tx);
    tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
}

/// The capture in the README is this screen, drawn now: a session with a card and an approval.
#[test]
fn the_readme_shows_the_screen_as_it_is() {
    let mut app = new_app();
    type_text(&mut app, "rename the helper and run the tests");
    app.on_key(key(KeyCode::Enter));
    app.on_agent(AgentEvent::Delta(Delta::Text("Renaming `helper` to `parse_line`, then testing.".into())));
    let edit =
        json!({ "path": "src/lib.rs", "old_text": "fn helper", "new_text": "fn parse_line" }).to_string();
    call(&mut app, 0, "e1", "editFile", &edit, ("local-system", "editFile"));
    reply(&mut app, &[("e1", "editFile", &edit)]);
    let mut output = ToolOutput::ok("Edited src/lib.rs");
    output.state = Some(json!({
        "path": "src/lib.rs",
        "diff": "@@ -3,3 +3,3 @@\n use std::io;\n-fn helper(line: &str) -> Option<Entry> {\n+fn parse_line(line: &str) -> Option<Entry> {\n     let (key, value) = line.split_once('=')?;\n",
    }));
    settle(&mut app, "e1", "editFile", ("local-system", "editFile"), output);
    let test = json!({ "command": "cargo test -q" }).to_string();
    call(&mut app, 0, "t1", "runCommand", &test, RUN);
    reply(&mut app, &[("t1", "runCommand", &test)]);
    let mut request = question("q1", "cargo test -q");
    request.call_id = "t1".into();
    request.reason = "commands need approval".into();
    app.ask(request);
    let screen = draw_sized(&app, 26);
    insta::assert_snapshot!("readme", screen);
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let block = readme.split("<!-- screen -->\n```text\n").nth(1).and_then(|rest| rest.split("\n```").next());
    let trimmed: Vec<&str> = screen.lines().map(str::trim_end).collect();
    assert_eq!(block.map(str::to_owned), Some(trimmed.join("\n")), "README's capture is out of date");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_mode_reopens_the_session_and_the_loop_keeps_going() {
    let folder = tempfile::tempdir().unwrap();
    let touch = json!({ "command": "touch after-mode-change" }).to_string();
    let server = ScriptedModel::start(vec![
        openai_reply("", "", &[("m1", "runCommand", &touch)], "tool_calls"),
        openai_reply("", "Touched.", &[], "stop"),
    ])
    .await;
    let (context, questions) = context(&server, folder.path(), ApprovalMode::Manual).await;
    let (screen, tx, running) = start(context, questions, HEIGHT);
    wait_for(&screen, "manual (ctrl-t)").await;
    tx.send(TermEvent::Key(ctrl('t'))).unwrap();
    wait_for(&screen, "auto-run (ctrl-t)").await;
    // In auto-run the command runs without a question, and its card follows it live.
    send_text(&tx, "touch it");
    tx.send(TermEvent::Key(key(KeyCode::Enter))).unwrap();
    let done = wait_for(&screen, "Touched.").await;
    assert!(!done.contains("approval needed"), "{done}");
    assert!(folder.path().join("after-mode-change").exists());
    drop(tx);
    tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
}

/// Without bracketed paste a paste arrives as keys all at once: its newlines do not send it and its
/// indentation stays; Enter pressed afterwards sends the whole text as one message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paste_without_bracketed_paste_is_one_message_with_its_indentation() {
    let folder = tempfile::tempdir().unwrap();
    let server = ScriptedModel::start(vec![openai_reply("", "Got both lines.", &[], "stop")]).await;
    let (context, questions) = context(&server, folder.path(), ApprovalMode::Manual).await;
    let (tx, stream) = keys();
    // The terminal delivers the whole paste before the app reads any of it.
    for c in "fn main() {\n    run();\n}".chars() {
        let code = if c == '\n' { KeyCode::Enter } else { KeyCode::Char(c) };
        tx.send(TermEvent::Key(key(code))).unwrap();
    }
    let backend = Vt100Backend::new(WIDTH, HEIGHT);
    let screen = backend.handle();
    let mut terminal = Terminal::new(backend).unwrap();
    let running = tokio::spawn(async move {
        let keys = toolhost::ui::paste::PasteBursts::new(stream);
        toolhost::ui::run::run(&mut terminal, keys, context, questions).await
    });
    wait_for(&screen, "    run();").await;
    assert!(server.received().is_empty(), "nothing sent by the paste's newlines");
    tokio::time::sleep(Duration::from_millis(50)).await;
    tx.send(TermEvent::Key(key(KeyCode::Enter))).unwrap();
    wait_for(&screen, "Got both lines.").await;
    let sent = server.received()[0].body["messages"].as_array().unwrap().last().unwrap()["content"].clone();
    assert_eq!(sent, "fn main() {\n    run();\n}");
    drop(tx);
    tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
}

/// `!COMMAND` runs the person's own command (no model, no question for an ordinary one), shows
/// its card, and the model reads what it printed with the next message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bang_runs_the_persons_command_and_the_model_reads_its_output_next() {
    let folder = tempfile::tempdir().unwrap();
    let server = ScriptedModel::start(vec![openai_reply("", "It printed the greeting.", &[], "stop")]).await;
    let (context, questions) = context(&server, folder.path(), ApprovalMode::Manual).await;
    let (screen, tx, running) = start(context, questions, HEIGHT);
    send_text(&tx, "!echo hello-from-bang > said.txt && cat said.txt");
    tx.send(TermEvent::Key(key(KeyCode::Enter))).unwrap();
    let ran = wait_for(&screen, "You ran (!) [done]").await;
    assert!(ran.contains("hello-from-bang"), "{ran}");
    assert!(!ran.contains("approval needed"), "the person's own command is not asked about: {ran}");
    assert!(server.received().is_empty(), "no model was asked");
    assert!(folder.path().join("said.txt").exists());
    send_text(&tx, "what did it print?");
    tx.send(TermEvent::Key(key(KeyCode::Enter))).unwrap();
    wait_for(&screen, "It printed the greeting.").await;
    let sent = server.received()[0].body["messages"].as_array().unwrap().last().unwrap()["content"].clone();
    let sent = sent.as_str().unwrap();
    assert!(sent.starts_with("<person-ran-command>\n$ echo hello-from-bang"), "{sent}");
    assert!(
        sent.contains("hello-from-bang\n</person-ran-command>") && sent.ends_with("what did it print?"),
        "{sent}"
    );

    // A command that always asks still asks, even typed by the person.
    send_text(&tx, "!rm -rf ~");
    tx.send(TermEvent::Key(key(KeyCode::Enter))).unwrap();
    wait_for(&screen, "approval needed").await;
    // Past the question's grace (keys typed as it appears are not answers).
    tokio::time::sleep(toolhost::ui::state::QUESTION_GRACE + Duration::from_millis(100)).await;
    tx.send(TermEvent::Key(key(KeyCode::Char('n')))).unwrap();
    wait_for(&screen, "why not?").await;
    tx.send(TermEvent::Key(key(KeyCode::Enter))).unwrap();
    wait_for(&screen, "[denied]").await;
    drop(tx);
    tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_view_lists_opens_and_forgets_only_on_yes() {
    let folder = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let stores =
        journal::open_stores(&format!("sqlite://{}", data.path().join("j.db").display())).await.unwrap();
    let owner = tool_core::storage::Owner { tenant: "local".into(), person: "local".into() };
    for (title, body) in [("Shell", "Uses the fish shell"), ("Editor", "Prefers Helix over Vim")] {
        let memory = tool_core::storage::NewRecord {
            collection: "memory".into(),
            owner: owner.clone(),
            project: None,
            tag: "preferences".into(),
            title: title.into(),
            body: body.into(),
            metadata: json!({}),
        };
        stores.records.insert_record(memory, 100).await.unwrap();
    }
    let (broker, questions) = toolhost::ui::broker::ScreenBroker::new();
    let toolbox = client_executor::device::builtin_toolbox().unwrap();
    let executor = tool_executor::Executor::builder(Arc::new(toolbox)).broker(Arc::new(broker)).build();
    let context = context_without_a_model(executor, folder.path(), Some(stores.records.clone()), None);
    let (screen, tx, running) = start(context, questions, 30);
    wait_for(&screen, "Tool console").await;
    tx.send(TermEvent::Key(key(KeyCode::Esc))).unwrap();

    tx.send(TermEvent::Key(key(KeyCode::F(4)))).unwrap();
    wait_for(&screen, "What the agent remembers about you").await;
    let listed = wait_for(&screen, "Prefers Helix over Vim").await;
    assert!(listed.contains("Uses the fish shell") && listed.contains("2 memories"), "{listed}");
    // The newest first: Editor. Enter shows it whole; q comes back to the list.
    tx.send(TermEvent::Key(key(KeyCode::Enter))).unwrap();
    wait_for(&screen, "preferences · every project · saved").await;
    tx.send(TermEvent::Key(key(KeyCode::Char('q')))).unwrap();
    wait_for(&screen, "2 memories").await;
    // d asks; a key other than y keeps it; d then y forgets it.
    tx.send(TermEvent::Key(key(KeyCode::Char('d')))).unwrap();
    wait_for(&screen, "forget? y/n").await;
    tx.send(TermEvent::Key(key(KeyCode::Char('n')))).unwrap();
    tx.send(TermEvent::Key(key(KeyCode::Char('r')))).unwrap();
    wait_for(&screen, "2 memories").await;
    tx.send(TermEvent::Key(key(KeyCode::Char('d')))).unwrap();
    wait_for(&screen, "forget? y/n").await;
    tx.send(TermEvent::Key(key(KeyCode::Char('y')))).unwrap();
    let after = wait_for(&screen, "1 memory ·").await;
    assert!(!after.contains("Helix") && after.contains("fish"), "{after}");
    let query = tool_core::storage::RecordQuery {
        collection: "memory".into(),
        owner,
        project: tool_core::storage::ProjectScope::Any,
        tag: None,
        text: None,
        limit: 10,
    };
    let left = stores.records.find_records(query).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].record.title, "Shell");
    drop(tx);
    tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
}

#[test]
fn skills_are_listed_completed_and_started_by_name() {
    let root = tempfile::tempdir().unwrap();
    for (name, front) in [
        (
            "deploy",
            "description: Deploys the service\ndisable-model-invocation: true\nargument-hint: \"[env]\"\n",
        ),
        ("review", "description: Reviews a pull request\n"),
        ("status", "description: A skill named like a command\n"),
    ] {
        std::fs::create_dir_all(root.path().join(name)).unwrap();
        std::fs::write(
            root.path().join(name).join("SKILL.md"),
            format!("---\nname: {name}\n{front}---\nDeploy to $ARGUMENTS carefully.\n"),
        )
        .unwrap();
    }
    let mut app = new_app();
    app.skills = toolhost::skills::load(
        &[],
        &[builtin_tool_skills::discover::SkillRoot::new(root.path(), tool_core::SkillSource::User)],
        false,
        8_000,
    );
    // `/` completes skills after the app's commands.
    type_text(&mut app, "/dep");
    let offered: Vec<String> =
        app.completion.as_ref().unwrap().items.iter().map(|(name, _)| name.clone()).collect();
    assert_eq!(offered, ["/deploy"]);
    app.input.clear();
    app.cursor = 0;
    app.completion = None;

    type_text(&mut app, "/skills");
    assert_eq!(app.on_key(key(KeyCode::Enter)), None);
    let screen = draw_sized(&app, 40);
    assert!(screen.contains("/deploy [env] — Deploys the service (user, only by you)"), "{screen}");

    type_text(&mut app, "/deploy staging");
    let Some(Command::Submit(sent)) = app.on_key(key(KeyCode::Enter)) else {
        panic!("the skill starts a turn")
    };
    assert!(sent.starts_with("I am starting the skill `deploy` with: staging."), "{sent}");
    assert!(sent.contains("Deploy to staging carefully."), "{sent}");
    assert!(app.running);
    assert!(
        matches!(app.cells.iter().rev().find(|c| matches!(c, toolhost::ui::Cell::User(_))), Some(toolhost::ui::Cell::User(typed)) if typed == "/deploy staging")
    );
    // The app's own command wins a name.
    app.running = false;
    type_text(&mut app, "/status");
    assert!(matches!(app.on_key(key(KeyCode::Enter)), Some(Command::Status)));
    // Enter runs the highlighted command, not the letters typed.
    type_text(&mut app, "/stat");
    assert!(matches!(app.on_key(key(KeyCode::Enter)), Some(Command::Status)));
    // Without its argument, /mode says the mode and how to change it; an unknown command says so.
    type_text(&mut app, "/mode");
    app.completion = None;
    assert_eq!(app.on_key(key(KeyCode::Enter)), None);
    type_text(&mut app, "/frobnicate");
    assert_eq!(app.on_key(key(KeyCode::Enter)), None);
    let screen = draw(&app);
    assert!(screen.contains("the approval mode is manual; /mode manual"), "{screen}");
    assert!(screen.contains("/frobnicate is not a command here: /help lists them"), "{screen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn esc_esc_rewinds_the_files_and_the_conversation_to_before_a_call() {
    let folder = tempfile::tempdir().unwrap();
    let kept = tempfile::tempdir().unwrap();
    let write = json!({"path": "notes.md", "content": "# Notes\n"}).to_string();
    let server = ScriptedModel::start(vec![
        openai_reply("", "Writing.", &[("w1", "writeFile", &write)], "tool_calls"),
        openai_reply("", "Wrote notes.md.", &[], "stop"),
        openai_reply("", "Asked again.", &[], "stop"),
    ])
    .await;
    let (mut context, questions) = context(&server, folder.path(), ApprovalMode::AutoRun).await;
    context.guard.checkpoint_max_mib = 10;
    context.guard.checkpoint_dir = Some(kept.path().to_owned());
    let (screen, tx, running) = start(context, questions, HEIGHT);
    send_text(&tx, "write the notes");
    tx.send(TermEvent::Key(key(KeyCode::Enter))).unwrap();
    wait_for(&screen, "Wrote notes.md.").await;
    assert!(folder.path().join("notes.md").exists());

    tx.send(TermEvent::Key(key(KeyCode::Esc))).unwrap();
    tx.send(TermEvent::Key(key(KeyCode::Esc))).unwrap();
    wait_for(&screen, "Rewind: this conversation's calls that changed files").await;
    let picker = wait_for(&screen, "notes.md").await;
    assert!(picker.contains("writeFile"), "{picker}");
    // A key typed as the list appears is not a choice; one after a moment is.
    tx.send(TermEvent::Key(key(KeyCode::Char('c')))).unwrap();
    tokio::time::sleep(toolhost::ui::panes::REWIND_GRACE + Duration::from_millis(100)).await;
    assert!(folder.path().join("notes.md").exists(), "a key typed as the list appeared rewound");
    // `c`: the files and the conversation go back to before the turn.
    tx.send(TermEvent::Key(key(KeyCode::Char('c')))).unwrap();
    let after = wait_for(&screen, "rewound to before w1").await;
    assert!(!folder.path().join("notes.md").exists());
    assert!(!after.contains("Wrote notes.md."), "the turn is out of the conversation:\n{after}");
    // The request is back in the prompt; sent again, the model sees no trace of the old turn.
    tx.send(TermEvent::Key(key(KeyCode::Enter))).unwrap();
    wait_for(&screen, "Asked again.").await;
    let third = server.received()[2].body["messages"].clone();
    let sent = third.to_string();
    assert!(sent.contains("write the notes") && !sent.contains("Wrote notes.md."), "{sent}");
    assert_eq!(third.as_array().unwrap().len(), 2, "system and the one request: {sent}");
    drop(tx);
    let _ = running.await;
}
