//! Frame time of the full screen with a 1 000-cell transcript while a command prints 10 000 lines
//! a second, drawn on the VT100-emulated terminal (the emulator's own parsing is included, so a
//! real terminal costs less). Each frame folds in 16 ms worth of output (160 lines) and draws;
//! a key is typed every fifth frame, and its latency is measured from the key to the end of the
//! frame that shows it. Memory: the bytes the transcript holds at the end.
//!
//! `cargo bench -p toolhost --bench frame [-- --frames N]`

use std::time::{Duration, Instant};

use agent::{AgentEvent, Delta, StopReason, ToolCall, Usage};
use crossterm::event::{KeyCode, KeyEvent};
use ratatui::Terminal;
use serde_json::json;
use tool_core::{Progress, ToolOutput};
use tool_executor::{ApprovalMode, CallResult, Event};
use toolhost::ui::vt::Vt100Backend;
use toolhost::ui::{App, Cell, render};

fn main() {
    let frames = std::env::args()
        .skip_while(|arg| arg != "--frames")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(3_000usize);
    let mut app =
        App::new("bench", "/home/me/project", ApprovalMode::AutoRun, "workspace-write, network off");
    // 1 000 cells: 250 turns of a request, an answer and two calls with results.
    for turn in 0..250 {
        app.cells.push(Cell::User(format!("request {turn}: make the tests pass")));
        let read = json!({ "path": format!("src/module_{turn}.rs") }).to_string();
        let run = json!({ "command": "cargo test -q" }).to_string();
        for (index, (id, name, args)) in
            [(format!("r{turn}"), "readFile", read), (format!("t{turn}"), "runCommand", run)]
                .into_iter()
                .enumerate()
        {
            app.on_agent(AgentEvent::Delta(Delta::ToolCall { index, id: id.clone(), name: name.into() }));
            app.on_agent(AgentEvent::Delta(Delta::ToolArguments { index, fragment: args.clone() }));
            app.on_agent(AgentEvent::Reply {
                content: String::new(),
                tool_calls: vec![ToolCall { id: id.clone(), name: name.into(), arguments: args }],
                stop: StopReason::ToolUse,
                usage: Usage { input_tokens: 2_000, output_tokens: 100 },
            });
            let body: String = (0..60).map(|n| format!("line {n} of the result of {id}\n")).collect();
            let api = if name == "readFile" { "readFile" } else { "runCommand" };
            app.on_agent(AgentEvent::Results(vec![CallResult {
                call_id: id.clone(),
                name: name.into(),
                tool: Some("local-system".into()),
                api: Some(api.into()),
                status: journal::AttemptStatus::Executed,
                output: ToolOutput::ok(body),
                duration_ms: 5,
            }]));
        }
        app.on_agent(AgentEvent::Delta(Delta::Text(format!(
            "Turn {turn} done: **all green**. The fix was in `src/module_{turn}.rs`."
        ))));
        app.on_agent(AgentEvent::Reply {
            content: String::new(),
            tool_calls: Vec::new(),
            stop: StopReason::EndTurn,
            usage: Usage::default(),
        });
    }
    // The command that streams.
    let stream = json!({ "command": "yes | head -n 1000000" }).to_string();
    app.on_agent(AgentEvent::Delta(Delta::ToolCall {
        index: 0,
        id: "live".into(),
        name: "runCommand".into(),
    }));
    app.on_agent(AgentEvent::Reply {
        content: String::new(),
        tool_calls: vec![ToolCall { id: "live".into(), name: "runCommand".into(), arguments: stream }],
        stop: StopReason::ToolUse,
        usage: Usage::default(),
    });
    app.on_call(Event::Started { call_id: "live".into(), timeout_ms: 600_000 });
    app.running = true;
    println!("transcript: {} cells", app.cells.len());

    for (width, height) in [(120u16, 40u16), (200, 60)] {
        let mut terminal = Terminal::new(Vt100Backend::new(width, height)).unwrap();
        let mut frame_times = Vec::with_capacity(frames);
        let mut key_latencies = Vec::new();
        let mut line = 0u64;
        for n in 0..frames {
            // 16 ms at 10 000 lines a second: 160 lines, in the 100 ms pieces the runtime sends
            // (so some frames get a piece, most get none), here spread evenly.
            let output: String = (0..160)
                .map(|_| {
                    line += 1;
                    format!("y {line}\n")
                })
                .collect();
            app.on_call(Event::Progress {
                call_id: "live".into(),
                progress: Progress { output: Some(output), ..Progress::default() },
            });
            let typed = n % 5 == 0;
            let start = Instant::now();
            if typed {
                app.on_key(KeyEvent::from(KeyCode::Char('x')));
            }
            terminal.draw(|frame| render(&app, frame)).unwrap();
            let took = start.elapsed();
            frame_times.push(took);
            if typed {
                key_latencies.push(took);
            }
        }
        let held: usize = app
            .cells
            .iter()
            .map(|cell| match cell {
                Cell::Tool(tool) => tool.output.len() + tool.arguments.len(),
                Cell::User(text) => text.len(),
                Cell::Assistant { text, reasoning } => text.len() + reasoning.len(),
                Cell::Notice { text, .. } => text.len(),
            })
            .sum();
        report(&format!("frame {width}x{height}"), &mut frame_times);
        report(&format!("key to frame {width}x{height}"), &mut key_latencies);
        println!(
            "  output streamed: {line} lines; live output held: {} KiB (cap 64); transcript text held: {} KiB",
            match app.cells.last() {
                Some(Cell::Tool(tool)) => tool.output.len() / 1024,
                _ => 0,
            },
            held / 1024
        );
        app.input.clear();
        app.cursor = 0;
    }
}

fn report(name: &str, times: &mut [Duration]) {
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    println!(
        "{name}: n={} p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        times.len(),
        at(0.5).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3
    );
}
