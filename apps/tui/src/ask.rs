//! Asking the person at this terminal: the intervention card of the tool's render hooks, then one
//! line — `y` once, `s` this exact command (or tool) for this session, `a` always (for commands:
//! the narrowest sensible prefix), `n` no, or any other line to deny and tell the model why.

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

/// For a command, the prefix "always" proposes: the narrowest sensible one, or the whole command
/// when widening it would allow more than was shown (see
/// [`tool_executor::approval::suggest_prefix`]).
pub fn command_prefix(command: &str) -> String {
    tool_executor::approval::suggest_prefix(command).prefix
}

/// The question as text: the tool's intervention card, the reason, and the choices, each naming
/// what it grants.
pub fn question(request: &ApprovalRequest) -> String {
    let card = builtin_tools::Registry::builtin()
        .render(&request.tool)
        .intervention(&request.api, &request.arguments);
    // The same card the full screen draws, as plain text.
    let mut text = format!("\n? the agent wants to run {}/{}:\n", request.tool, request.api);
    text.push_str(&crate::ui::view::lines_text(&crate::ui::view::card_lines(&card, false, usize::MAX)));
    text.push_str(&format!("  why asked: {}\n", request.reason));
    let what = format!("{}/{}", request.tool, request.api);
    let (session, always) = match crate::ui::state::always_prefix(request) {
        Some(s) => (
            "this exact command, for this session".to_owned(),
            match s.exact_because {
                Some(why) => format!("this exact command in this folder, always ({why})"),
                None => format!("commands starting `{}` in this folder, always", s.prefix),
            },
        ),
        None => match &request.scope {
            Some(scope) => (
                format!("{what} within {scope}, for this session"),
                format!("{what} within {scope}, always (in this folder)"),
            ),
            None => (format!("{what}, for this session"), format!("{what} in this folder, always")),
        },
    };
    text.push_str(&format!(
        "  y = yes, once · s = {session} · a = {always} · n = no\n  (a whole line; any other line denies and tells the model why)\n> "
    ));
    text
}

/// The decision a typed answer (a whole line) means: only the exact choice words choose; any
/// other line is a reason for a denial.
pub fn decision(answer: &str, request: &ApprovalRequest) -> Decision {
    let prefix = crate::ui::state::always_prefix(request).map(|s| s.prefix).or_else(|| request.scope.clone());
    match answer.trim() {
        "y" | "Y" | "yes" => Decision::AllowOnce,
        // A command: this one word for word; files: within the scope shown.
        "s" | "S" => Decision::AllowSession { argument_prefix: request.scope.clone() },
        "a" | "A" => Decision::AllowAlways { argument_prefix: prefix },
        "" | "n" | "N" | "no" => Decision::Deny,
        reason => Decision::DenyWithMessage { message: reason.to_owned() },
    }
}

/// A question the agent asks, as text: the question, its numbered options, how to answer.
pub fn asked(question: &tool_core::Question) -> String {
    let mut text = format!("\n? the agent asks: {}\n", question.question);
    for (n, option) in question.options.iter().enumerate() {
        text.push_str(&format!("  {}. {option}\n", n + 1));
    }
    let how = match (question.options.is_empty(), question.multiple, question.allow_other) {
        (true, _, _) => "type your answer",
        (false, true, true) => "numbers separated by commas (1,3), or your own words",
        (false, true, false) => "numbers separated by commas (1,3)",
        (false, false, true) => "a number, or your own words",
        (false, false, false) => "a number",
    };
    text.push_str(&format!("  ({how}; an empty line declines)\n> "));
    text
}

/// What a typed line answers to `question`: the options its numbers name (or, where the question
/// takes them, the words themselves); an empty line declines. `Err` says why the line does not
/// answer, to ask again.
pub fn answer(line: &str, question: &tool_core::Question) -> Result<Decision, String> {
    let line = line.trim();
    if line.is_empty() {
        return Ok(Decision::Deny);
    }
    let numbers: Option<Vec<usize>> = if question.options.is_empty() {
        None
    } else {
        line.split([',', ' ']).filter(|p| !p.is_empty()).map(|p| p.parse::<usize>().ok()).collect()
    };
    let answer = match numbers {
        Some(numbers) => {
            let mut choices = Vec::new();
            for n in numbers {
                let option = n.checked_sub(1).and_then(|i| question.options.get(i));
                match option {
                    Some(option) if !choices.contains(option) => choices.push(option.clone()),
                    Some(_) => {}
                    None => return Err(format!("there is no option {n}")),
                }
            }
            tool_core::Answer { choices, text: None }
        }
        None if question.takes_text() => {
            tool_core::Answer { choices: Vec::new(), text: Some(line.to_owned()) }
        }
        None => return Err("answer with the number of an option".into()),
    };
    question.check_answer(&answer)?;
    Ok(Decision::Answer { answer })
}

/// What the model reads when nobody can answer any more.
pub const STDIN_ENDED: &str = "no answer: standard input ended";

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
        // Lines typed at a terminal before the question was shown are not its answer; piped
        // answers are read in order, as a script gave them.
        if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
            let mut early = 0;
            while lines.try_recv().is_ok() {
                early += 1;
            }
            if early > 0 {
                eprintln!("\n({early} line(s) typed before this question were set aside)");
            }
        }
        if let Some(question) = &request.question {
            eprint!("{}", asked(question));
            loop {
                let line = tokio::select! {
                    line = lines.recv() => line,
                    () = cancel.cancelled() => return None,
                    () = tokio::time::sleep(timeout) => {
                        eprintln!("(no answer in time)");
                        return None;
                    }
                };
                let Some(line) = line else {
                    eprintln!("({STDIN_ENDED})");
                    return Some(Decided {
                        decision: Decision::DenyWithMessage { message: STDIN_ENDED.to_owned() },
                        by: Some(tool_executor::approval::NO_ONE.into()),
                    });
                };
                match answer(&line, question) {
                    Ok(decision) => {
                        let said = match &decision {
                            Decision::Answer { answer } => format!("answered: {}", answer.summary()),
                            _ => "declined".to_owned(),
                        };
                        eprintln!("({said})");
                        return Some(Decided { decision, by: Some("terminal".into()) });
                    }
                    Err(why) => eprint!("({why}; try again)\n> "),
                }
            }
        }
        eprint!("{}", question(request));
        let answer = tokio::select! {
            line = lines.recv() => match line {
                Some(line) => line,
                None => {
                    eprintln!("({STDIN_ENDED}: not run)");
                    return Some(Decided {
                        decision: Decision::DenyWithMessage { message: STDIN_ENDED.to_owned() },
                        by: Some("terminal".into()),
                    });
                }
            },
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
