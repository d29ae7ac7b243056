//! Asking the person at this terminal: the intervention card of the tool's render hooks, then one
//! line — `y` once, `s` for this session, `a` always (for commands: this command's prefix), `n`
//! no, or any other text to deny and tell the model why.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{Mutex, mpsc};
use tokio_util::sync::CancellationToken;
use tool_executor::approval::ApprovalRequest;
use tool_executor::{ApprovalBroker, Decided, Decision};

/// Lines typed at the terminal, shared by the prompt and the questions (one reader at a time).
pub type Lines = Arc<Mutex<mpsc::UnboundedReceiver<String>>>;

/// Reads stdin line by line on its own thread (stdin is blocking) into a channel; the channel
/// closes at end of input.
pub fn stdin_lines() -> Lines {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        loop {
            line.clear();
            match std::io::stdin().read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if tx.send(line.trim_end_matches(['\r', '\n']).to_owned()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    Arc::new(Mutex::new(rx))
}

/// Asks at the terminal, one question at a time.
#[derive(Debug)]
pub struct TerminalBroker {
    lines: Lines,
}

impl TerminalBroker {
    /// A broker reading answers from `lines`.
    pub fn new(lines: Lines) -> Self {
        Self { lines }
    }
}

/// For a command, the prefix "always" remembers: its first two words (`cargo test`), or the
/// whole command when it is shorter.
pub fn command_prefix(command: &str) -> String {
    command.split_whitespace().take(2).collect::<Vec<_>>().join(" ")
}

/// The question as text: the tool's intervention card, the reason, and the choices.
pub fn question(request: &ApprovalRequest) -> String {
    let card = builtin_tools::Registry::builtin()
        .render(&request.tool)
        .intervention(&request.api, &request.arguments);
    // The same card the full screen draws, as plain text.
    let mut text = format!("\n? the agent wants to run {}/{}:\n", request.tool, request.api);
    text.push_str(&crate::ui::view::lines_text(&crate::ui::view::card_lines(&card, false, usize::MAX)));
    text.push_str(&format!("  why asked: {}\n", request.reason));
    let always = match request.arguments.get("command").and_then(|c| c.as_str()) {
        Some(command) => format!("always `{}…` here", command_prefix(command)),
        None => "always this tool here".to_owned(),
    };
    text.push_str(&format!(
        "  [y] yes once  [s] yes for this session  [a] {always}  [n] no  — or type why not\n> "
    ));
    text
}

/// The decision a typed answer means.
pub fn decision(answer: &str, request: &ApprovalRequest) -> Decision {
    let prefix = request.arguments.get("command").and_then(|c| c.as_str()).map(command_prefix);
    match answer.trim() {
        "y" | "Y" | "yes" => Decision::AllowOnce,
        "s" | "S" => Decision::AllowSession { argument_prefix: None },
        "a" | "A" => Decision::AllowAlways { argument_prefix: prefix },
        "" | "n" | "N" | "no" => Decision::Deny,
        reason => Decision::DenyWithMessage { message: reason.to_owned() },
    }
}

#[async_trait]
impl ApprovalBroker for TerminalBroker {
    async fn wait(
        &self,
        request: &ApprovalRequest,
        cancel: &CancellationToken,
        timeout: Duration,
    ) -> Option<Decided> {
        // One question at a time: the lock is held from the question to its answer.
        let mut lines = tokio::select! {
            lines = self.lines.lock() => lines,
            () = cancel.cancelled() => return None,
        };
        // Lines typed before the question was shown are not its answer.
        let mut early = 0;
        while lines.try_recv().is_ok() {
            early += 1;
        }
        if early > 0 {
            eprintln!("\n({early} line(s) typed before this question were set aside)");
        }
        eprint!("{}", question(request));
        let answer = tokio::select! {
            line = lines.recv() => line?,
            () = cancel.cancelled() => return None,
            () = tokio::time::sleep(timeout) => {
                eprintln!("(no answer in time: not run)");
                return None;
            }
        };
        let decision = decision(&answer, request);
        eprintln!("({})", decision.name().replace('_', " "));
        Some(Decided { decision, by: Some("terminal".into()) })
    }
}
