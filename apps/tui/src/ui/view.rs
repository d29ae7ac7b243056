//! Drawing: a pure function of the state. Cards come from each tool's render hooks; only the cells
//! that fit on screen are laid out, so a long transcript costs no more than a short one.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use serde_json::Value;
use tool_core::render::Block as CardBlock;
use tool_core::{Card, Tone};
use unicode_width::UnicodeWidthChar as _;

use super::state::{App, Cell, Phase, ToolCell, View, live_progress};

/// Lines of a card block shown before it is cut to head and tail.
const BLOCK_LINES: usize = 12;
/// Lines of a card block's head and tail when it is cut.
const HEAD: usize = 4;
const TAIL: usize = 6;

/// Draws the whole screen.
pub fn render(app: &App, frame: &mut Frame<'_>) {
    render_view(app, frame);
    app.theme.apply(frame.buffer_mut());
}

fn render_view(app: &App, frame: &mut Frame<'_>) {
    let area = frame.area();
    if let View::Pager { cell, scroll } = &app.view {
        let lines = app.cells.get(*cell).map(|c| cell_lines(c, false, false)).unwrap_or_default();
        render_pager(lines, *scroll, "c copies · q closes", frame, area);
        return;
    }
    if let View::Log { path, lines, scroll, find, finding } = &app.view {
        let keys = if *finding {
            format!("find: {find}▏ (Enter finds, Esc stops)")
        } else if find.is_empty() {
            format!("/ finds · G the end · q closes · {path}")
        } else {
            format!("“{find}”: n next, N back · / finds · q closes · {path}")
        };
        render_log(lines, *scroll, &keys, frame, area);
        return;
    }
    if let View::Record { text, scroll, .. } = &app.view {
        let lines = text.lines().map(|l| Line::raw(l.to_owned())).collect();
        render_pager(lines, *scroll, "q closes", frame, area);
        return;
    }
    // The prompt grows with its text up to a third of the screen, then scrolls.
    let input_lines = {
        let (text, cursor) = prompt_text(app);
        let rows = PromptLayout::new(text, cursor, prompt_lead(app), usize::from(area.width)).rows.len();
        (rows as u16).clamp(1, (area.height / 3).max(1))
    };
    // A question's head (what would run) and its end (why, and the answer keys), wrapped to the box.
    // In a window too small for the keys' words, they are said in a line or two.
    let question = app.approvals.front().map(|pending| {
        let width = area.width.saturating_sub(2);
        let room = usize::from(area.height.saturating_sub(input_lines + 1 + 1 + 1 + 2));
        let split = |compact| {
            let (mut lines, tail) = question_lines(app, pending, compact);
            let end = lines.split_off(lines.len() - tail.min(lines.len()));
            (wrap_all(lines, width), wrap_all(end, width))
        };
        let full = split(false);
        if full.1.len() < room { full } else { split(true) }
    });
    // Half the screen, or more where the keys need it (a small window): the keys and a line of
    // what would run always fit, as long as one row is left for the transcript.
    let question_height = question.as_ref().map_or(0, |(head, end)| {
        let want = head.len() + end.len() + 2;
        let room = usize::from(area.height.saturating_sub(input_lines + 1 + 1 + 1));
        let share = usize::from(area.height / 2).max(end.len() + 2 + 2);
        want.min(share).min(room).max(3).min(usize::from(u16::MAX)) as u16
    });
    let [transcript, question_area, input_area, status_area] = Layout::vertical([
        Constraint::Min(1),
        Constraint::Length(question_height),
        Constraint::Length(input_lines + 1),
        Constraint::Length(1),
    ])
    .areas(area);

    match &app.view {
        View::Console => render_console(app, frame, transcript),
        View::Journal => render_journal(app, frame, transcript),
        View::Memory => render_memory(app, frame, transcript),
        View::Rewind => render_rewind(app, frame, transcript),
        View::Resume { items, selected } => render_resume(items, *selected, frame, transcript),
        _ => render_transcript(app, frame, transcript),
    }
    if let (Some(completion), View::Chat) = (&app.completion, &app.view) {
        render_completion(completion, frame, transcript);
    }
    if let Some((head, end)) = question {
        let what = match app.approvals.front().is_some_and(|p| p.request.question.is_some()) {
            true => "the agent asks",
            false => "approval needed",
        };
        let title = if app.approvals.len() > 1 {
            format!(" {what} (1 of {}) ", app.approvals.len())
        } else {
            format!(" {what} ")
        };
        let block = Block::default()
            .borders(Borders::ALL)
            .border_style(Style::default().fg(Color::Yellow))
            .title(title);
        frame.render_widget(Clear, question_area);
        let lines = fit_question(head, end, usize::from(question_area.height.saturating_sub(2)));
        frame.render_widget(Paragraph::new(lines).block(block), question_area);
    }
    render_input(app, frame, input_area);
    frame.render_widget(Paragraph::new(status_line(app, status_area.width)), status_area);
}

fn render_transcript(app: &App, frame: &mut Frame<'_>, area: Rect) {
    let width = area.width.max(1);
    let wanted = area.height as usize + app.scroll;
    // From the newest cell back, until the screen (and the scroll) is full.
    let mut chunks: Vec<Vec<Line<'static>>> = Vec::new();
    let mut total = 0;
    for (index, cell) in app.cells.iter().enumerate().rev() {
        let mut lines = cell_lines(cell, app.selected == Some(index), true);
        lines.push(Line::default());
        let wrapped = wrap_all(lines, width);
        total += wrapped.len();
        chunks.push(wrapped);
        if total >= wanted {
            break;
        }
    }
    let mut lines: Vec<Line<'static>> = chunks.into_iter().rev().flatten().collect();
    // What waits to be sent when the turn ends, and a second Esc's meaning, below the rest.
    let dim = Style::default().add_modifier(Modifier::DIM);
    let mut tail = Vec::new();
    for text in &app.queued {
        let first = text.lines().next().unwrap_or_default();
        tail.push(Line::from(vec![
            Span::styled("queued › ", Style::default().fg(Color::Magenta)),
            Span::styled(first.to_owned(), dim),
            Span::styled(" (sent when this turn ends)", dim),
        ]));
    }
    if app.quit_armed.is_some_and(|at| at.elapsed() < super::state::QUIT_WINDOW) && app.input.is_empty() {
        tail.push(Line::styled("press Ctrl-C again to quit", Style::default().fg(Color::Yellow)));
    }
    if app.clear_armed.is_some() && !app.input.is_empty() && !app.running {
        tail.push(Line::styled("press Esc (or Ctrl-C) again to clear the prompt; ↑ brings it back", dim));
    }
    lines.extend(wrap_all(tail, width));
    // Without a model, what to do about it stays at the end of the conversation, above what is
    // typed (which shows, and whose `/` commands work).
    if let Some(hint) = &app.setup_hint {
        let warn = Style::default().fg(Color::Yellow);
        let next = "Meanwhile: F2 or /console runs any tool without a model; F3 or /journal shows what ran \
                    here; /help lists the keys.";
        lines.extend(wrap_all(
            vec![
                Line::styled(hint.clone(), warn),
                Line::styled(next, Style::default().add_modifier(Modifier::DIM)),
            ],
            width,
        ));
    } else if lines.is_empty() {
        let newline = if app.shift_enter { "Shift-Enter" } else { "Alt-Enter or Ctrl-J" };
        let hint = Line::styled(
            format!(
                "Ask the agent to do something in this folder. {newline} starts a new line; Ctrl-T changes \
                 the approval mode; /help lists the keys."
            ),
            Style::default().add_modifier(Modifier::DIM),
        );
        lines = wrap_all(vec![hint], width);
    }
    let height = area.height as usize;
    let end = lines.len().saturating_sub(app.scroll.min(lines.len().saturating_sub(height)));
    let start = end.saturating_sub(height);
    let visible: Vec<Line<'static>> = lines.drain(start..end).collect();
    frame.render_widget(Paragraph::new(visible), area);
}

/// The first row's lead of the prompt area: the prompt sign, or the label of a field the question
/// box opened.
fn prompt_label(app: &App) -> &'static str {
    match &app.answering {
        Some(super::state::Answering::Reason(_)) => "why not? ",
        Some(super::state::Answering::Always(Some(_)))
            if app.approvals.front().is_some_and(|p| p.request.arguments.get("command").is_none()) =>
        {
            "always allow within: "
        }
        Some(super::state::Answering::Always(Some(_))) => "always allow commands starting: ",
        Some(super::state::Answering::Always(None)) => "always allow? Enter confirms, Esc goes back ",
        Some(super::state::Answering::Answer(_)) => {
            match app.approvals.front().and_then(|p| p.request.question.as_ref()) {
                Some(question) if !question.takes_text() => "why not answer? ",
                _ => "your answer: ",
            }
        }
        None => "› ",
    }
}

fn prompt_lead(app: &App) -> usize {
    str_width(prompt_label(app))
}

fn render_input(app: &App, frame: &mut Frame<'_>, area: Rect) {
    let prompt = prompt_label(app);
    let style = if app.answering.is_some() {
        Style::default().fg(Color::Yellow)
    } else if app.running {
        // Typing goes on while the agent works; Enter queues the message for when it ends.
        Style::default().add_modifier(Modifier::DIM)
    } else {
        Style::default().fg(Color::Cyan)
    };
    let block =
        Block::default().borders(Borders::TOP).border_style(Style::default().add_modifier(Modifier::DIM));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let keys = match app.view {
        View::Console if app.console.form.is_some() => {
            Some("type a value · ↑↓ Tab move · Enter runs · Esc back to the list")
        }
        View::Console => Some("↑↓ choose an API · Enter fills in its arguments · Esc to the conversation"),
        View::Resume { .. } => Some("↑↓ choose · Enter resumes it · Esc back to this conversation"),
        View::Journal if app.journal.showing_remembered => {
            Some("↑↓ · d revokes · r the calls · Esc to the conversation")
        }
        View::Journal => {
            Some("↑↓ · Enter the whole record · s status · t tool · r remembered decisions · Esc back")
        }
        View::Memory if app.memory.forgetting.is_some() => Some("y forgets it · any other key keeps it"),
        View::Memory => {
            Some("↑↓ · Enter the whole memory · d forgets it · r reloads · Esc to the conversation")
        }
        View::Rewind if app.rewind.confirming.is_some() => {
            Some("y overwrites them · any other key keeps them")
        }
        View::Rewind => Some(
            "↑↓ · Enter puts the files back to before the call · c the conversation too · Esc to the conversation",
        ),
        _ => None,
    };
    if let Some(keys) = keys {
        let dim = Style::default().add_modifier(Modifier::DIM);
        frame.render_widget(Paragraph::new(wrap_all(vec![Line::styled(keys, dim)], inner.width)), inner);
        return;
    }
    let (text, cursor) = prompt_text(app);
    let layout = PromptLayout::new(text, cursor, str_width(prompt), usize::from(inner.width));
    let height = usize::from(inner.height).max(1);
    // The rows around the cursor, when the text is taller than the area.
    let first = layout.cursor.0.saturating_sub(height - 1);
    let lines: Vec<Line<'static>> = layout
        .rows
        .iter()
        .enumerate()
        .skip(first)
        .take(height)
        .map(|(n, row)| {
            let lead = if n == 0 { prompt.to_owned() } else { "  ".to_owned() };
            Line::from(vec![Span::styled(lead, style), Span::raw(row.clone())])
        })
        .collect();
    frame.render_widget(Paragraph::new(lines), inner);
    let (row, column) = layout.cursor;
    let row = (row - first) as u16;
    if row < inner.height {
        frame.set_cursor_position((
            inner.x + (column as u16).min(inner.width.saturating_sub(1)),
            inner.y + row,
        ));
    }
}

/// What the prompt area edits: a field the question box opened, else the prompt; with the
/// cursor as a char index.
fn prompt_text(app: &App) -> (&str, usize) {
    match &app.answering {
        Some(
            super::state::Answering::Reason(text)
            | super::state::Answering::Always(Some(text))
            | super::state::Answering::Answer(text),
        ) => (text.as_str(), text.chars().count()),
        Some(super::state::Answering::Always(None)) => ("", 0),
        None => (app.input.as_str(), app.cursor),
    }
}

/// The prompt's text in screen rows: wrapped at words where a row has a space, else at the
/// width, after a lead (the first row's is the prompt sign or a field's label, the others two
/// columns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptLayout {
    /// Each row's text.
    pub rows: Vec<String>,
    /// The cursor's row and column (lead included).
    pub cursor: (usize, usize),
}

impl PromptLayout {
    /// Lays out `text` with the cursor at char `cursor` in `width` columns.
    pub fn new(text: &str, cursor: usize, first_lead: usize, width: usize) -> Self {
        let chars: Vec<char> = text.chars().collect();
        let room = |row: usize| {
            if row == 0 { width.saturating_sub(first_lead) } else { width.saturating_sub(2) }.max(1)
        };
        // Each line of the text in rows, the first row of the whole text after the lead.
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        let mut line_start = 0;
        for line in text.split('\n') {
            let count = line.chars().count();
            let before = ranges.len();
            for (s, e) in word_rows(line.chars(), |row| room(before + row)) {
                ranges.push((line_start + s, line_start + e));
            }
            line_start += count + 1;
        }
        let mut at = (0, 0);
        for (row, &(s, e)) in ranges.iter().enumerate() {
            if cursor >= s && cursor <= e {
                let lead = if row == 0 { first_lead } else { 2 };
                at = (row, lead + chars[s..cursor].iter().map(|c| c.width().unwrap_or(0)).sum::<usize>());
                if cursor < e {
                    break;
                }
            }
        }
        let rows = ranges.iter().map(|&(s, e)| chars[s..e].iter().collect()).collect();
        Self { rows, cursor: at }
    }
}

/// The status line, as much as `width` holds. What it says, in order: that the agent works, what
/// decides what runs (mode, sandbox), the model, the folder, tokens and the context left. A narrow
/// terminal gets them abbreviated, one step at a time ([`STATUS_STEPS`]), not cut: at 80 columns
/// every part is there.
fn status_line(app: &App, width: u16) -> Line<'static> {
    let dim = Style::default().add_modifier(Modifier::DIM);
    if let Some(status) = &app.status {
        return Line::from(vec![
            Span::styled(status.clone(), Style::default().fg(Color::Cyan)),
            Span::styled(" · ctrl-c twice quits", dim),
        ]);
    }
    // The home folder, read once (this runs every frame).
    static HOME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let home = HOME.get_or_init(|| std::env::var("HOME").unwrap_or_default());
    let mut line = Line::default();
    for step in 0..=STATUS_STEPS {
        line = status_at(app, step, home);
        if line.width() <= usize::from(width) {
            break;
        }
    }
    line
}

/// How many abbreviations [`status_at`] knows.
const STATUS_STEPS: usize = 9;

/// The status line with the first `step` abbreviations applied: 1 drops the token and context
/// words, 2 the model's profile name, 3 writes the home folder as `~`, 4 keeps the folder's last
/// part, 5 shortens the sandbox's words, 6 drops the key hints, 7 shortens the model's name to 20
/// columns, 8 leaves out the sandbox (`/status` still says it), 9 shortens the model and the
/// folder to 16 columns.
fn status_at(app: &App, step: usize, home: &str) -> Line<'static> {
    let dim = Style::default().add_modifier(Modifier::DIM);
    let sep = || Span::styled(" · ", dim);
    let mut spans = Vec::new();
    if app.running {
        let elapsed = app.turn_started.map_or(0, |at| at.elapsed().as_secs());
        const SPINNER: [&str; 4] = ["◐", "◓", "◑", "◒"];
        let frame =
            app.turn_started.map_or(0, |at| (at.elapsed().as_millis() / 250) as usize % SPINNER.len());
        let text = if step >= 6 {
            format!("{} {} · ", SPINNER[frame], clock(elapsed))
        } else {
            format!("{} working {} · esc cancels · ", SPINNER[frame], clock(elapsed))
        };
        spans.push(Span::styled(text, Style::default().fg(Color::Magenta)));
    }
    let mode_style = match app.mode {
        tool_executor::ApprovalMode::AutoRun => Style::default().fg(Color::Yellow),
        tool_executor::ApprovalMode::ReadOnly => Style::default().fg(Color::Green),
        _ => Style::default().fg(Color::Cyan),
    };
    spans.push(Span::styled(app.mode.as_str().replace('_', "-"), mode_style));
    if step < 6 {
        spans.push(Span::styled(" (ctrl-t)", dim));
    }
    if !app.sandbox.is_empty() && step < 8 {
        spans.push(sep());
        let sandbox = if step >= 5 {
            app.sandbox
                .trim_start_matches("commands: ")
                .replace("workspace-write", "ws-write")
                .replace("network ", "net ")
                .replace("commands unsandboxed", "unsandboxed")
        } else {
            app.sandbox.clone()
        };
        spans.push(Span::raw(sandbox));
    }
    spans.push(sep());
    let mut model = app.model.clone();
    if step >= 2
        && let Some(at) = model.rfind(" (")
        && model.ends_with(')')
    {
        model.truncate(at);
    }
    if step >= 7 {
        model = shorten(&model, if step >= 9 { 16 } else { 20 });
    }
    spans.push(Span::styled(model, Style::default().add_modifier(Modifier::BOLD)));
    spans.push(sep());
    spans.push(Span::raw(short_folder(&app.folder, home, step)));
    if app.usage.total() > 0 {
        spans.push(sep());
        let text = if step >= 1 {
            format!("{} tok", tokens(app.usage.total()))
        } else {
            format!("{} in / {} out", tokens(app.usage.input_tokens), tokens(app.usage.output_tokens))
        };
        spans.push(Span::styled(text, dim));
    }
    if app.context_window > 0 && app.context_used > 0 {
        let left = app.context_window.saturating_sub(app.context_used) * 100 / app.context_window;
        spans.push(sep());
        let text = if step >= 1 { format!("{left}% left") } else { format!("{left}% context left") };
        let style = if left < 15 { Style::default().fg(Color::Yellow) } else { dim };
        spans.push(Span::styled(text, style));
    }
    Line::from(spans)
}

/// The folder for the status line: whole, then with the home folder as `~` (step 3), then its
/// last part (step 4).
fn short_folder(folder: &str, home: &str, step: usize) -> String {
    let home = home.trim_end_matches('/');
    let mut shown = folder.to_owned();
    if step >= 3 && !home.is_empty() {
        if folder == home {
            shown = "~".to_owned();
        } else if let Some(rest) = folder.strip_prefix(home).filter(|r| r.starts_with('/')) {
            shown = format!("~{rest}");
        }
    }
    if step >= 4 {
        let last = shown.trim_end_matches('/').rsplit('/').next().unwrap_or_default();
        if !last.is_empty() && last != shown && last != "~" {
            shown = format!("…/{}", shorten(last, if step >= 9 { 16 } else { 24 }));
        }
    }
    shown
}

/// `text` in at most `max` columns: the start and the end, with `…` between.
fn shorten(text: &str, max: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    let width: usize = chars.iter().map(|c| c.width().unwrap_or(0)).sum();
    if width <= max || max < 3 {
        return text.to_owned();
    }
    let room = max - 1;
    let (head, tail) = (room - room / 2, room / 2);
    let mut out: String = chars.iter().take(head).collect();
    out.push('…');
    out.extend(chars[chars.len().saturating_sub(tail)..].iter());
    out
}

/// Seconds as `42s` or `2m05s`.
fn clock(seconds: u64) -> String {
    if seconds < 60 { format!("{seconds}s") } else { format!("{}m{:02}s", seconds / 60, seconds % 60) }
}

fn tokens(n: u64) -> String {
    if n >= 10_000 { format!("{}k", n / 1000) } else { n.to_string() }
}

/// Where the keys go while a question waits: a pane keeps them, and so does a draft until Tab.
fn where_to_answer(app: &App, lines: &mut Vec<Line<'static>>) {
    let said = if app.view != View::Chat {
        "Esc back to the conversation to answer"
    } else if !app.input.is_empty() && !app.question_focus {
        "your draft keeps the keys: Tab answers this question (the draft is kept)"
    } else {
        return;
    };
    lines.push(Line::styled(said, Style::default().fg(Color::Magenta)));
}

/// A question the agent asks: the question, its options (numbered, marked, the arrows' one
/// highlighted), and the keys.
/// An asked question's lines, and how many at the end (the options and keys) must stay in view.
fn asked_lines(app: &App, question: &tool_core::Question) -> (Vec<Line<'static>>, usize) {
    let key = Style::default().fg(Color::Cyan).add_modifier(Modifier::BOLD);
    let dim = Style::default().add_modifier(Modifier::DIM);
    let mut lines: Vec<Line<'static>> = question
        .question
        .lines()
        .map(|l| Line::styled(l.to_owned(), Style::default().add_modifier(Modifier::BOLD)))
        .collect();
    let asked = lines.len();
    for (n, option) in question.options.iter().enumerate() {
        let mark = match (question.multiple, app.marked.contains(&n)) {
            (true, true) => "[x] ",
            (true, false) => "[ ] ",
            (false, _) => "",
        };
        let label = if n < 9 { format!("{} ", n + 1) } else { "  ".to_owned() };
        let style = if n == app.option_cursor {
            Style::default().add_modifier(Modifier::REVERSED)
        } else {
            Style::default()
        };
        lines
            .push(Line::from(vec![Span::styled(label, key), Span::styled(format!("{mark}{option}"), style)]));
    }
    let keys = match (&app.answering, question.options.is_empty(), question.multiple) {
        (Some(_), _, _) if question.takes_text() => {
            "type your answer below · Enter sends it (empty: declines) · Esc back"
        }
        (Some(_), _, _) => "say why not below · Enter declines · Esc back to the options",
        (None, true, _) => "type your answer · Enter sends it (empty: declines)",
        (None, false, true) if question.allow_other => {
            "numbers or Space mark · Enter sends the marked · type (or Tab) to add your own words"
        }
        (None, false, true) => "numbers or Space mark · Enter sends the marked · Tab declines",
        (None, false, false) if question.allow_other => {
            "a number or ↑↓ Enter chooses · type (or Tab) to answer in your own words"
        }
        (None, false, false) => "a number or ↑↓ Enter chooses · Tab declines",
    };
    match app.pending_choice {
        Some((choice, _)) => lines.push(Line::styled(
            format!("{choice}… (Enter takes option {choice} now; typing on makes it your answer)"),
            Style::default().fg(Color::Magenta),
        )),
        None => lines.push(Line::styled(keys, dim)),
    }
    where_to_answer(app, &mut lines);
    if let Some(hint) = app.question_hint {
        lines.push(Line::styled(hint, Style::default().fg(Color::Magenta)));
    }
    let tail = lines.len() - asked;
    (lines, tail)
}

/// A question's lines, and how many at the end (why it asks, and the answer keys) must stay in
/// view however small the window.
fn question_lines(app: &App, pending: &super::state::Pending, compact: bool) -> (Vec<Line<'static>>, usize) {
    let request = &pending.request;
    if let Some(question) = &request.question {
        return asked_lines(app, question);
    }
    let card = builtin_tools::Registry::builtin()
        .render(&request.tool)
        .intervention(&request.api, &request.arguments);
    let mut lines = card_lines(&card, false, usize::MAX);
    let card_end = lines.len();
    lines.push(Line::from(vec![
        Span::styled("why asked: ", Style::default().add_modifier(Modifier::DIM)),
        Span::styled(request.reason.clone(), Style::default().fg(Color::Yellow)),
    ]));
    let key = Style::default().fg(Color::Cyan).add_modifier(Modifier::BOLD);
    let dim = Style::default().add_modifier(Modifier::DIM);
    let what = format!("{}/{}", request.tool, request.api);
    let suggestion = super::state::always_prefix(request);
    // Each key names exactly what it grants.
    let (session, always) = match &suggestion {
        Some(s) if s.exact_because.is_some() => (
            "yes, this exact command, for this session".to_owned(),
            format!(
                "always this exact command in this folder ({})",
                s.exact_because.as_deref().unwrap_or("")
            ),
        ),
        Some(s) => (
            "yes, this exact command, for this session".to_owned(),
            format!("always, in this folder: commands starting `{}` (editable)", s.prefix),
        ),
        None => match &request.scope {
            // A call naming files: both grant within the scope shown, never every path.
            Some(scope) => (
                format!("yes, {what} within {scope}, for this session"),
                format!("always, in this folder: {what} within {scope} (editable)"),
            ),
            None => (format!("yes, {what}, for this session"), format!("always {what} in this folder")),
        },
    };
    match &app.answering {
        Some(super::state::Answering::Reason(_) | super::state::Answering::Answer(_)) => {
            lines.push(Line::from(vec![
                Span::styled("why not? ", Style::default().fg(Color::Yellow)),
                Span::styled(
                    "type it below · Enter denies (empty: no reason) · Esc back to the choices",
                    dim,
                ),
            ]))
        }
        Some(super::state::Answering::Always(prefix)) => {
            let command = request.arguments.get("command").is_some();
            let what = match prefix {
                Some(_) if command => {
                    "edit the prefix below · Enter allows commands starting with it here, always"
                }
                Some(_) => {
                    "edit the file or folder below · Enter allows it and what is under it here, always"
                }
                None => "Enter allows it in this folder, always · Esc back to the choices",
            };
            lines.push(Line::from(vec![
                Span::styled("always: ", Style::default().fg(Color::Yellow)),
                Span::styled(what, dim),
            ]));
        }
        None if app.pending_choice.is_some() => {
            let (choice, _) = app.pending_choice.unwrap_or(('y', std::time::Instant::now()));
            lines.push(Line::styled(
                format!("{choice}… (Enter takes it now; typing on makes it a reason)"),
                Style::default().fg(Color::Magenta),
            ));
        }
        // Each key and what it grants (the scope or prefix too), in as few words as fit.
        None if compact => {
            let always = match (&suggestion, &request.scope) {
                (Some(s), _) if s.exact_because.is_none() => format!(" (`{}`…)", s.prefix),
                (None, Some(scope)) => format!(" (within {scope})"),
                _ => String::new(),
            };
            let session = match &request.scope {
                Some(scope) if suggestion.is_none() => format!(" (within {scope})"),
                _ => String::new(),
            };
            // A key and its word never part at a wrap (a no-break space holds them).
            lines.push(Line::from(vec![
                Span::styled("y\u{a0}", key),
                Span::raw("once · "),
                Span::styled("s\u{a0}", key),
                Span::raw(format!("session{session} · ")),
                Span::styled("a\u{a0}", key),
                Span::raw(format!("always{always} · ")),
                Span::styled("n\u{a0}", key),
                Span::raw("no"),
            ]));
            where_to_answer(app, &mut lines);
        }
        None => {
            for (k, text) in [
                ("y", "yes, this once".to_owned()),
                ("s", session),
                ("a", always),
                ("n", "no, and say why (Tab too; Enter alone just denies)".to_owned()),
            ] {
                lines.push(Line::from(vec![Span::styled(format!("{k} "), key), Span::raw(text)]));
            }
            where_to_answer(app, &mut lines);
        }
    }
    if let Some(hint) = app.question_hint {
        lines.push(Line::styled(hint, Style::default().fg(Color::Magenta)));
    }
    let tail = lines.len() - card_end;
    (lines, tail)
}

/// A question in `height` rows: when it does not fit, what would run gives way in its middle
/// (its first and last lines stay), and the end (why, and the keys) stays whole; in a window too
/// small even for that, the end's last rows (the keys) are what shows.
fn fit_question(head: Vec<Line<'static>>, end: Vec<Line<'static>>, height: usize) -> Vec<Line<'static>> {
    if head.len() + end.len() <= height {
        return head.into_iter().chain(end).collect();
    }
    if end.len() >= height {
        return end[end.len() - height..].to_vec();
    }
    // Rows for the head, one of them saying how much is hidden.
    let room = height - end.len();
    let more = |hidden: usize| {
        Line::styled(
            format!("… {hidden} more lines (Ctrl-P on the call's card shows it whole)"),
            Style::default().add_modifier(Modifier::DIM),
        )
    };
    let mut out: Vec<Line<'static>> = if room == 1 {
        vec![more(head.len())]
    } else {
        let shown = room - 1;
        let first = shown - shown / 2;
        let last = shown / 2;
        let mut out = head[..first].to_vec();
        out.push(more(head.len() - first - last));
        out.extend(head[head.len() - last..].iter().cloned());
        out
    };
    out.extend(end);
    out
}

fn render_pager(lines: Vec<Line<'static>>, scroll: usize, keys: &str, frame: &mut Frame<'_>, area: Rect) {
    let lines = wrap_all(lines, area.width.max(1));
    let height = area.height.saturating_sub(1) as usize;
    let scroll = scroll.min(lines.len().saturating_sub(height));
    let visible: Vec<Line<'static>> = lines.iter().skip(scroll).take(height).cloned().collect();
    render_paged(visible, (scroll, height, lines.len()), keys, frame, area);
}

/// A pager's screen: the `visible` lines, then a footer saying which `(from, height, of)` lines
/// show and the `keys`.
fn render_paged(
    visible: Vec<Line<'static>>,
    (scroll, height, total): (usize, usize, usize),
    keys: &str,
    frame: &mut Frame<'_>,
    area: Rect,
) {
    let [body, footer] = Layout::vertical([Constraint::Min(1), Constraint::Length(1)]).areas(area);
    frame.render_widget(Paragraph::new(visible), body);
    let footer_text = format!(
        "lines {}-{} of {total} · ↑↓ PgUp PgDn scroll · {keys}",
        scroll + 1,
        (scroll + height).min(total),
    );
    frame.render_widget(
        Paragraph::new(Line::styled(footer_text, Style::default().add_modifier(Modifier::REVERSED))),
        footer,
    );
}

/// A long text (a command's whole output) as the pager shows it, wrapping and drawing only the
/// lines on screen: hundreds of thousands of lines cost a frame what a screenful does.
fn render_log(lines: &[String], scroll: usize, keys: &str, frame: &mut Frame<'_>, area: Rect) {
    let height = area.height.saturating_sub(1) as usize;
    let scroll = scroll.min(lines.len().saturating_sub(height));
    let shown = lines[scroll..].iter().take(height).map(|l| Line::raw(l.clone())).collect();
    let visible: Vec<Line<'static>> = wrap_all(shown, area.width.max(1)).into_iter().take(height).collect();
    render_paged(visible, (scroll, height, lines.len()), keys, frame, area);
}

fn selected_style(selected: bool) -> Style {
    if selected { Style::default().add_modifier(Modifier::REVERSED) } else { Style::default() }
}

/// Keeps the highlighted row on screen: the first row to show of `len` in `height`.
fn window(selected: usize, len: usize, height: usize) -> usize {
    if len <= height { 0 } else { selected.saturating_sub(height / 2).min(len - height) }
}

fn render_console(app: &App, frame: &mut Frame<'_>, area: Rect) {
    let console = &app.console;
    let dim = Style::default().add_modifier(Modifier::DIM);
    let mut lines = Vec::new();
    if let Some(hint) = &app.setup_hint {
        lines.push(Line::styled(hint.clone(), Style::default().fg(Color::Yellow)));
    }
    lines.push(Line::styled(
        "Tool console: run any tool through the pipeline, no model needed",
        Style::default().add_modifier(Modifier::BOLD),
    ));
    lines.push(Line::default());
    let Some(form) = &console.form else {
        let height = (area.height as usize).saturating_sub(lines.len());
        let first = window(console.selected, console.catalogue.len(), height);
        for (index, entry) in console.catalogue.iter().enumerate().skip(first).take(height) {
            let room = usize::from(area.width).saturating_sub(33);
            let mut summary: String =
                entry.description.lines().next().unwrap_or_default().chars().take(room).collect();
            if summary.chars().count() == room && room > 0 {
                summary.pop();
                summary.push('…');
            }
            lines.push(Line::from(vec![
                Span::styled(
                    format!("{:<31}", format!("{}/{}", entry.tool, entry.api)),
                    selected_style(index == console.selected),
                ),
                Span::styled(format!(" {summary}"), dim),
            ]));
        }
        frame.render_widget(Paragraph::new(wrap_all(lines, area.width)), area);
        return;
    };
    let entry = &console.catalogue[form.entry];
    lines.push(Line::from(vec![
        Span::styled(format!("{}/{}", entry.tool, entry.api), Style::default().add_modifier(Modifier::BOLD)),
        Span::styled(format!(" ({})", entry.name), dim),
    ]));
    lines.push(Line::styled(entry.description.lines().next().unwrap_or_default().to_owned(), dim));
    lines.push(Line::default());
    for (index, field) in form.fields.iter().enumerate() {
        let marker = if field.required { "*" } else { " " };
        let focused = index == form.focus;
        lines.push(Line::from(vec![
            Span::styled(
                format!("{marker}{:<16}", field.name),
                Style::default().add_modifier(Modifier::BOLD),
            ),
            Span::styled(format!("{:<8}", field.kind), dim),
            Span::styled(
                format!("{}{}", field.value, if focused { "▏" } else { "" }),
                selected_style(focused),
            ),
        ]));
        if focused && !field.description.is_empty() {
            lines.push(Line::styled(
                format!("  {}", field.description.lines().next().unwrap_or_default()),
                dim,
            ));
        }
    }
    if let Some(error) = &form.error {
        lines.push(Line::default());
        lines.push(Line::styled(
            error.lines().next().unwrap_or_default().to_owned(),
            Style::default().fg(Color::Red),
        ));
    }
    if console.running {
        lines.push(Line::styled("running…", Style::default().fg(Color::Magenta)));
    }
    if let Some((result, arguments)) = &console.result {
        lines.push(Line::default());
        let card = builtin_tools::Registry::builtin().render(&entry.tool).result(
            &entry.api,
            arguments,
            &result.output,
        );
        lines.extend(card_lines(&card, false, BLOCK_LINES));
    }
    frame.render_widget(Paragraph::new(wrap_all(lines, area.width)), area);
}

/// What the word being typed could become, in a box at the bottom of the conversation.
fn render_completion(completion: &super::state::Completion, frame: &mut Frame<'_>, area: Rect) {
    let height = (completion.items.len() as u16 + 2).min(area.height);
    let box_area = Rect { y: area.y + area.height - height, height, ..area };
    let dim = Style::default().add_modifier(Modifier::DIM);
    let lines: Vec<Line<'static>> = completion
        .items
        .iter()
        .enumerate()
        .map(|(index, (item, what))| {
            let mut spans = vec![Span::styled(item.clone(), selected_style(index == completion.selected))];
            if !what.is_empty() {
                spans.push(Span::styled(format!("  {what}"), dim));
            }
            Line::from(spans)
        })
        .collect();
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(dim)
        .title(" Tab completes · ↑↓ choose · Esc hides ");
    frame.render_widget(Clear, box_area);
    frame.render_widget(Paragraph::new(lines).block(block), box_area);
}

fn render_resume(items: &[crate::chat::Saved], selected: usize, frame: &mut Frame<'_>, area: Rect) {
    let dim = Style::default().add_modifier(Modifier::DIM);
    let mut lines = vec![
        Line::styled("Earlier conversations in this folder", Style::default().add_modifier(Modifier::BOLD)),
        Line::default(),
    ];
    let height = (area.height as usize).saturating_sub(lines.len());
    let first = window(selected, items.len(), height);
    for (index, saved) in items.iter().enumerate().skip(first).take(height) {
        let room = usize::from(area.width).saturating_sub(36);
        let mut request: String = saved.first.chars().take(room).collect();
        if saved.first.chars().count() > room && room > 0 {
            request.pop();
            request.push('…');
        }
        lines.push(Line::from(vec![
            Span::styled(crate::setup::time_of(saved.saved_at), selected_style(index == selected)),
            Span::styled(format!("  {:>4} msgs  ", saved.messages), dim),
            Span::raw(request),
        ]));
    }
    frame.render_widget(Paragraph::new(lines), area);
}

fn render_memory(app: &App, frame: &mut Frame<'_>, area: Rect) {
    let view = &app.memory;
    let dim = Style::default().add_modifier(Modifier::DIM);
    let mut lines = vec![
        Line::from(vec![
            Span::styled("What the agent remembers about you", Style::default().add_modifier(Modifier::BOLD)),
            Span::styled(
                format!(
                    "  {} {} · also `toolhost memory list`",
                    view.rows.len(),
                    if view.rows.len() == 1 { "memory" } else { "memories" }
                ),
                dim,
            ),
        ]),
        Line::default(),
    ];
    if view.rows.is_empty() {
        lines.push(Line::styled("nothing yet", dim));
    }
    let height = (area.height as usize).saturating_sub(lines.len());
    let first = window(view.selected, view.rows.len(), height);
    for (index, record) in view.rows.iter().enumerate().skip(first).take(height) {
        let forgetting = view.forgetting.as_deref() == Some(record.id.as_str());
        let scope = if record.project.is_some() { " (this project)" } else { "" };
        let body: String = record.body.chars().take(100).collect();
        lines.push(Line::from(vec![
            Span::styled(format!("{:<11}", record.tag), selected_style(index == view.selected)),
            Span::raw(" "),
            Span::styled(
                format!("{}{scope}: ", record.title),
                if forgetting { Style::default().fg(Color::Red) } else { Style::default() },
            ),
            Span::styled(body, dim),
            Span::styled(if forgetting { "  forget? y/n" } else { "" }, Style::default().fg(Color::Red)),
        ]));
    }
    frame.render_widget(Paragraph::new(lines), area);
}

fn render_rewind(app: &App, frame: &mut Frame<'_>, area: Rect) {
    let view = &app.rewind;
    let dim = Style::default().add_modifier(Modifier::DIM);
    let mut lines = vec![
        Line::from(vec![
            Span::styled(
                "Rewind: this conversation's calls that changed files",
                Style::default().add_modifier(Modifier::BOLD),
            ),
            Span::styled("  newest first · also `toolhost rewind`", dim),
        ]),
        Line::default(),
    ];
    if let Some(ask) = &view.confirming {
        lines.push(Line::styled(
            format!("{} changed since the last call: overwrite? y/n", ask.conflicts.join(", ")),
            Style::default().fg(Color::Red),
        ));
        lines.push(Line::default());
    }
    if view.rows.is_empty() {
        lines.push(Line::styled("no call of this conversation changed files", dim));
    }
    let height = (area.height as usize).saturating_sub(lines.len());
    let first = window(view.selected, view.rows.len(), height);
    for (index, entry) in view.rows.iter().enumerate().skip(first).take(height) {
        let files: Vec<&str> = entry.files.iter().map(|c| c.path.as_str()).collect();
        let summary: String = entry.summary.chars().take(60).collect();
        lines.push(Line::from(vec![
            Span::styled(format!("{:<12}", entry.api), selected_style(index == view.selected)),
            Span::raw(format!(" {summary}  ")),
            Span::styled(files.join(", "), dim),
        ]));
    }
    frame.render_widget(Paragraph::new(lines), area);
}

fn render_journal(app: &App, frame: &mut Frame<'_>, area: Rect) {
    let view = &app.journal;
    let dim = Style::default().add_modifier(Modifier::DIM);
    let mut lines = Vec::new();
    if view.showing_remembered {
        lines.push(Line::styled(
            "Remembered decisions in this folder (\"always\" answers)",
            Style::default().add_modifier(Modifier::BOLD),
        ));
        lines.push(Line::default());
        if view.remembered.is_empty() {
            lines.push(Line::styled("none", dim));
        }
        for (index, decision) in view.remembered.iter().enumerate() {
            let spec = builtin_tools::Registry::builtin()
                .get(&decision.tool)
                .and_then(|entry| entry.manifest.apis.iter().find(|api| api.name == decision.api));
            let prefix = match decision.argument_prefix.as_deref() {
                // A command's prefix, as typed: `cargo test…`.
                Some(p) if spec.is_none_or(|spec| spec.command_param.is_some()) => format!(" `{p}…`"),
                prefix => match tool_executor::scope::describe(spec, prefix) {
                    described if described.is_empty() => String::new(),
                    described => format!(" {described}"),
                },
            };
            lines.push(Line::from(vec![
                Span::styled(
                    format!("{}/{}{prefix}", decision.tool, decision.api),
                    selected_style(index == view.selected),
                ),
                Span::styled(format!("  since {}", crate::setup::time_of(decision.created_at)), dim),
            ]));
        }
        frame.render_widget(Paragraph::new(wrap_all(lines, area.width)), area);
        return;
    }
    let status = view.status.map_or("all", journal::AttemptStatus::as_str);
    let tool = view.tool.as_deref().unwrap_or("all");
    lines.push(Line::from(vec![
        Span::styled("Journal of this folder", Style::default().add_modifier(Modifier::BOLD)),
        Span::styled(format!("  status: {status} · tool: {tool} · {} calls", view.rows.len()), dim),
    ]));
    lines.push(Line::default());
    if view.rows.is_empty() {
        lines.push(Line::styled("no calls", dim));
    }
    let height = (area.height as usize).saturating_sub(lines.len());
    let first = window(view.selected, view.rows.len(), height);
    for (index, row) in view.rows.iter().enumerate().skip(first).take(height) {
        let status_style = match row.status {
            journal::AttemptStatus::Executed | journal::AttemptStatus::Confirmed => {
                Style::default().fg(Color::Green)
            }
            journal::AttemptStatus::Failed | journal::AttemptStatus::Abandoned => {
                Style::default().fg(Color::Red)
            }
            journal::AttemptStatus::Blocked | journal::AttemptStatus::Denied => {
                Style::default().fg(Color::Yellow)
            }
            _ => dim,
        };
        let arguments: String = row.arguments.to_string().chars().take(60).collect();
        lines.push(Line::from(vec![
            Span::styled(crate::setup::time_of(row.attempted_at), selected_style(index == view.selected)),
            Span::raw(" "),
            Span::styled(format!("{:<9}", row.status.as_str()), status_style),
            Span::raw(format!(" {}/{} ", row.tool, row.api)),
            Span::styled(arguments, dim),
        ]));
    }
    frame.render_widget(Paragraph::new(lines), area);
}

/// The lines of a cell; `cut` shortens long blocks to head and tail.
pub fn cell_lines(cell: &Cell, selected: bool, cut: bool) -> Vec<Line<'static>> {
    let limit = if cut { BLOCK_LINES } else { usize::MAX };
    match cell {
        Cell::User(text) => text
            .lines()
            .enumerate()
            .map(|(n, line)| {
                let lead = if n == 0 { "› " } else { "  " };
                Line::from(vec![
                    Span::styled(lead, Style::default().fg(Color::Cyan)),
                    Span::styled(line.to_owned(), Style::default().add_modifier(Modifier::BOLD)),
                ])
            })
            .collect(),
        Cell::Assistant { text, reasoning } => {
            let mut lines: Vec<Line<'static>> = Vec::new();
            let dim = Style::default().add_modifier(Modifier::DIM | Modifier::ITALIC);
            let thoughts: Vec<&str> = reasoning.lines().collect();
            let skip = if cut { thoughts.len().saturating_sub(3) } else { 0 };
            if skip > 0 {
                lines.push(Line::styled(format!("(… {skip} lines of reasoning)"), dim));
            }
            for line in &thoughts[skip..] {
                lines.push(Line::styled((*line).to_owned(), dim));
            }
            lines.extend(markdown(text));
            lines
        }
        Cell::Tool(tool) => {
            let mut lines = card_lines(&tool_card(tool), tool.folded, limit);
            if selected && let Some(first) = lines.first_mut() {
                first.spans.insert(0, Span::styled("▶ ", Style::default().fg(Color::Cyan)));
            }
            lines
        }
        Cell::Notice { text, warning } => {
            let style = if *warning {
                Style::default().fg(Color::Yellow)
            } else {
                Style::default().add_modifier(Modifier::DIM)
            };
            text.lines().map(|line| Line::styled(format!("· {line}"), style)).collect()
        }
    }
}

/// A cell's text as the person would copy it: no wrapping, no decoration.
pub fn cell_text(cell: &Cell) -> String {
    // Whole: a card folded on the screen is unfolded here.
    match cell {
        Cell::Tool(tool) if tool.folded => {
            let mut whole = tool.clone();
            whole.folded = false;
            lines_text(&cell_lines(&Cell::Tool(whole), false, false))
        }
        _ => lines_text(&cell_lines(cell, false, false)),
    }
}

/// Lines as plain text, one per line, unwrapped.
pub fn lines_text(lines: &[Line<'_>]) -> String {
    let mut out = String::new();
    for line in lines {
        for span in &line.spans {
            out.push_str(&span.content);
        }
        out.push('\n');
    }
    out
}

/// The card a tool's render hooks give for where the call is.
pub fn tool_card(tool: &ToolCell) -> Card {
    let Some((identifier, api)) = tool.target.clone().or_else(|| {
        builtin_tools::Registry::builtin()
            .names()
            .resolve(&tool.name)
            .map(|(t, a)| (t.to_owned(), a.to_owned()))
    }) else {
        return Card::new(tool.name.clone());
    };
    let hooks = builtin_tools::Registry::builtin().render(&identifier);
    let arguments = || serde_json::from_str::<Value>(&tool.arguments).unwrap_or(Value::Null);
    match &tool.phase {
        Phase::Arguments => {
            let partial = tool_core::partial_json::parse_partial(&tool.arguments).unwrap_or(Value::Null);
            hooks.inspector(&api, &partial)
        }
        Phase::Waiting => hooks.placeholder(&api, &arguments()),
        Phase::Running => hooks.streaming(&api, &arguments(), &live_progress(&tool.output)),
        Phase::Done(result) => hooks.result(&api, &arguments(), &result.output),
    }
}

fn tone_style(tone: Tone) -> Style {
    match tone {
        Tone::Success => Style::default().fg(Color::Green),
        Tone::Warning => Style::default().fg(Color::Yellow),
        Tone::Danger => Style::default().fg(Color::Red),
        Tone::Info => Style::default().fg(Color::Blue),
        _ => Style::default().add_modifier(Modifier::DIM),
    }
}

/// A card as lines: its title and badge, subtitle, then its blocks (unless folded), each cut to
/// `limit` lines as head and tail.
pub fn card_lines(card: &Card, folded: bool, limit: usize) -> Vec<Line<'static>> {
    let mut title = vec![
        Span::styled("● ", Style::default().fg(Color::Blue)),
        Span::styled(card.title.clone(), Style::default().add_modifier(Modifier::BOLD)),
    ];
    if let Some(badge) = &card.badge {
        title.push(Span::raw(" "));
        title.push(Span::styled(format!("[{}]", badge.label), tone_style(badge.tone)));
    }
    if folded && !card.blocks.is_empty() {
        title.push(Span::styled(" (folded)", Style::default().add_modifier(Modifier::DIM)));
    }
    let mut lines = vec![Line::from(title)];
    if let Some(subtitle) = &card.subtitle {
        lines.push(Line::styled(format!("  {subtitle}"), Style::default().add_modifier(Modifier::DIM)));
    }
    if folded {
        return lines;
    }
    for block in &card.blocks {
        let body = block_lines(block);
        // A diff is never cut in its middle, where a change could hide: long runs of unchanged
        // lines fold instead, and every change and hunk stays.
        if let CardBlock::Diff { unified } = block
            && body.len() > limit
        {
            lines.extend(fold_diff(unified, body));
            continue;
        }
        if body.len() > limit {
            let hidden = body.len() - HEAD - TAIL;
            lines.extend(body[..HEAD].iter().cloned());
            lines.push(Line::styled(
                format!("  … +{hidden} lines (ctrl-p shows all)"),
                Style::default().add_modifier(Modifier::DIM),
            ));
            lines.extend(body[body.len() - TAIL..].iter().cloned());
        } else {
            lines.extend(body);
        }
    }
    lines
}

/// Unchanged lines kept on each side of a change when a diff is folded.
const DIFF_CONTEXT: usize = 2;

/// A diff's lines with runs of unchanged lines longer than twice [`DIFF_CONTEXT`] (plus one)
/// folded to their edges and a count; changes, hunk headers and file headers all stay.
/// What a line of a unified diff is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DiffRow {
    Hunk,
    Added,
    Removed,
    Unchanged,
    Other,
}

/// A unified diff's lines as a person reads them: the file headers left out (the card's title
/// names the file), each line of a hunk after its line number (the new file's, or the old one's
/// for a removed line).
fn diff_rows(unified: &str) -> Vec<(DiffRow, String)> {
    // Lines left in the current hunk, old and new: a `---` line inside a hunk is a removed line.
    let (mut old_left, mut new_left) = (0u64, 0u64);
    let (mut old_at, mut new_at) = (0u64, 0u64);
    let mut rows = Vec::new();
    for line in unified.lines() {
        let in_hunk = old_left > 0 || new_left > 0;
        if !in_hunk && let Some((old, new)) = hunk_starts(line) {
            (old_at, old_left, new_at, new_left) = (old.0, old.1, new.0, new.1);
            rows.push((DiffRow::Hunk, line.to_owned()));
            continue;
        }
        if !in_hunk {
            if !(line.starts_with("--- ") || line.starts_with("+++ ")) {
                rows.push((DiffRow::Other, line.to_owned()));
            }
            continue;
        }
        let (row, number) = match line.chars().next() {
            Some('+') => {
                new_left = new_left.saturating_sub(1);
                new_at += 1;
                (DiffRow::Added, new_at - 1)
            }
            Some('-') => {
                old_left = old_left.saturating_sub(1);
                old_at += 1;
                (DiffRow::Removed, old_at - 1)
            }
            Some('\\') => {
                rows.push((DiffRow::Other, line.to_owned()));
                continue;
            }
            _ => {
                old_left = old_left.saturating_sub(1);
                new_left = new_left.saturating_sub(1);
                (old_at, new_at) = (old_at + 1, new_at + 1);
                (DiffRow::Unchanged, new_at - 1)
            }
        };
        rows.push((row, format!("{number:>4} {line}")));
    }
    rows
}

/// `@@ -3,4 +3,5 @@` as ((3, 4), (3, 5)); a missing count is 1.
fn hunk_starts(line: &str) -> Option<((u64, u64), (u64, u64))> {
    let rest = line.strip_prefix("@@ -")?;
    let (ranges, _) = rest.split_once(" @@")?;
    let (old, new) = ranges.split_once(" +")?;
    let range = |text: &str| -> Option<(u64, u64)> {
        match text.split_once(',') {
            Some((start, count)) => Some((start.parse().ok()?, count.parse().ok()?)),
            None => Some((text.parse().ok()?, 1)),
        }
    };
    Some((range(old)?, range(new)?))
}

fn fold_diff(unified: &str, body: Vec<Line<'static>>) -> Vec<Line<'static>> {
    let changed: Vec<bool> = diff_rows(unified).iter().map(|(row, _)| *row != DiffRow::Unchanged).collect();
    let near_change = |i: usize| {
        let from = i.saturating_sub(DIFF_CONTEXT);
        let to = (i + DIFF_CONTEXT + 1).min(changed.len());
        changed[from..to].iter().any(|c| *c)
    };
    let mut out = Vec::with_capacity(body.len());
    // Unchanged lines waiting: folded when there are enough of them, else shown.
    let mut waiting: Vec<Line<'static>> = Vec::new();
    let settle = |waiting: &mut Vec<Line<'static>>, out: &mut Vec<Line<'static>>| {
        if waiting.len() >= 3 {
            out.push(Line::styled(
                format!("  ⋮ {} unchanged lines", waiting.len()),
                Style::default().add_modifier(Modifier::DIM),
            ));
            waiting.clear();
        } else {
            out.append(waiting);
        }
    };
    for (i, line) in body.into_iter().enumerate() {
        if changed.get(i).copied().unwrap_or(true) || near_change(i) {
            settle(&mut waiting, &mut out);
            out.push(line);
        } else {
            waiting.push(line);
        }
    }
    settle(&mut waiting, &mut out);
    out
}

fn block_lines(block: &CardBlock) -> Vec<Line<'static>> {
    let indent = |text: &str, style: Style| Line::styled(format!("  {text}"), style);
    let plain = Style::default();
    match block {
        CardBlock::Fields { fields } => fields
            .iter()
            .map(|f| {
                Line::from(vec![
                    Span::styled(format!("  {}: ", f.label), Style::default().add_modifier(Modifier::DIM)),
                    Span::raw(f.value.clone()),
                ])
            })
            .collect(),
        CardBlock::Code { text, language: Some(language) } => text
            .lines()
            .map(|l| {
                let mut line = super::highlight::line(language, l);
                line.spans.insert(0, Span::raw("  "));
                line
            })
            .collect(),
        CardBlock::Code { text, .. } => computer_runtime::terminal::plain(text)
            .lines()
            .map(|l| indent(l, Style::default().fg(Color::Gray)))
            .collect(),
        CardBlock::Diff { unified } => diff_rows(unified)
            .into_iter()
            .map(|(row, line)| {
                let style = match row {
                    DiffRow::Added => Style::default().fg(Color::Green),
                    DiffRow::Removed => Style::default().fg(Color::Red),
                    DiffRow::Hunk => Style::default().fg(Color::Cyan),
                    DiffRow::Unchanged | DiffRow::Other => plain,
                };
                indent(&line, style)
            })
            .collect(),
        CardBlock::Markdown { text } => markdown(text)
            .into_iter()
            .map(|mut l| {
                l.spans.insert(0, Span::raw("  "));
                l
            })
            .collect(),
        CardBlock::List { items, ordered } => items
            .iter()
            .enumerate()
            .map(|(n, item)| {
                if *ordered {
                    indent(&format!("{}. {item}", n + 1), plain)
                } else {
                    indent(&format!("- {item}"), plain)
                }
            })
            .collect(),
        CardBlock::Table { headers, rows } => {
            let mut out = vec![indent(&headers.join(" │ "), Style::default().add_modifier(Modifier::BOLD))];
            out.extend(rows.iter().map(|row| indent(&row.join(" │ "), plain)));
            out
        }
        CardBlock::Progress { label, fraction } => {
            let bar = fraction.map(|f| {
                let filled = (f.clamp(0.0, 1.0) * 20.0).round() as usize;
                format!(" [{}{}]", "█".repeat(filled), "░".repeat(20 - filled))
            });
            vec![indent(&format!("{label}{}", bar.unwrap_or_default()), Style::default().fg(Color::Magenta))]
        }
        CardBlock::File { path, mime, bytes } => {
            let mark = if mime.starts_with("image/") { "🖼" } else { "📄" };
            vec![indent(
                &format!("{mark} {path} ({mime}, {})", computer_runtime::format::size(*bytes)),
                Style::default().fg(Color::Cyan),
            )]
        }
        other => vec![indent(&serde_json::to_string(other).unwrap_or_default(), plain)],
    }
}

/// Markdown as a terminal can show it: headings bold, fenced code highlighted, lists with
/// bullets, quotes with a bar, tables with aligned columns, and inline `**bold**`, `*italic*`,
/// `_italic_`, `~~struck~~`, `` `code` `` and links (their text underlined, the address after it,
/// dimmed).
pub fn markdown(text: &str) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    // The language of the fenced block we are in, if any ("" for a fence without one).
    let mut code: Option<String> = None;
    let raw_lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < raw_lines.len() {
        let raw = raw_lines[i];
        i += 1;
        if let Some(fence) = raw.trim_start().strip_prefix("```") {
            code = match code {
                Some(_) => None,
                None => Some(fence.trim().to_owned()),
            };
            lines.push(Line::styled(raw.to_owned(), Style::default().add_modifier(Modifier::DIM)));
            continue;
        }
        if let Some(language) = &code {
            lines.push(super::highlight::line(language, raw));
            continue;
        }
        let trimmed = raw.trim_start();
        // A table: this row and the ones after it, when the next is a `|---|` separator.
        if trimmed.starts_with('|') && raw_lines.get(i).is_some_and(|next| is_table_separator(next)) {
            let mut rows = vec![table_cells(trimmed)];
            i += 1;
            while let Some(row) = raw_lines.get(i).map(|r| r.trim_start()).filter(|r| r.starts_with('|')) {
                rows.push(table_cells(row));
                i += 1;
            }
            lines.extend(table_lines(&rows));
            continue;
        }
        if let Some(heading) = raw.strip_prefix('#') {
            lines.push(Line::styled(
                heading.trim_start_matches('#').trim().to_owned(),
                Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
            ));
        } else if let Some(item) = trimmed.strip_prefix("- ").or_else(|| trimmed.strip_prefix("* ")) {
            let indent = " ".repeat(raw.len() - trimmed.len());
            let mut spans = vec![Span::raw(format!("{indent}• "))];
            spans.extend(inline_spans(item));
            lines.push(Line::from(spans));
        } else if let Some(quote) = trimmed.strip_prefix('>') {
            let mut spans = vec![Span::styled("│ ", Style::default().add_modifier(Modifier::DIM))];
            spans.extend(
                inline_spans(quote.trim_start()).into_iter().map(|s| s.patch_style(Modifier::ITALIC)),
            );
            lines.push(Line::from(spans));
        } else {
            lines.push(Line::from(inline_spans(raw)));
        }
    }
    lines
}

fn is_table_separator(line: &str) -> bool {
    let line = line.trim();
    line.starts_with('|') && line.contains('-') && line.chars().all(|c| matches!(c, '|' | '-' | ':' | ' '))
}

fn table_cells(row: &str) -> Vec<String> {
    let row = row.trim().trim_start_matches('|').trim_end_matches('|');
    row.split('|').map(|cell| cell.trim().to_owned()).collect()
}

/// A table's rows with each column padded to its widest cell, the header bold and underlined by a
/// rule.
fn table_lines(rows: &[Vec<String>]) -> Vec<Line<'static>> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let shown = |cell: &str| -> String { inline_spans(cell).iter().map(|s| s.content.as_ref()).collect() };
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().filter_map(|r| r.get(c)).map(|cell| str_width(&shown(cell))).max().unwrap_or(0))
        .collect();
    let mut out = Vec::new();
    for (n, row) in rows.iter().enumerate() {
        let mut spans = Vec::new();
        for (c, width) in widths.iter().enumerate() {
            if c > 0 {
                spans.push(Span::styled(" │ ", Style::default().add_modifier(Modifier::DIM)));
            }
            let cell = row.get(c).map_or("", String::as_str);
            let mut cell_spans = inline_spans(cell);
            if n == 0 {
                cell_spans = cell_spans.into_iter().map(|s| s.patch_style(Modifier::BOLD)).collect();
            }
            let pad = width.saturating_sub(str_width(&shown(cell)));
            spans.extend(cell_spans);
            spans.push(Span::raw(" ".repeat(pad)));
        }
        out.push(Line::from(spans));
        if n == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "─".repeat(*w)).collect();
            out.push(Line::styled(rule.join("─┼─"), Style::default().add_modifier(Modifier::DIM)));
        }
    }
    out
}

fn inline_spans(text: &str) -> Vec<Span<'static>> {
    let mut spans = Vec::new();
    let mut rest = text;
    let mut plain = String::new();
    let flush = |plain: &mut String, spans: &mut Vec<Span<'static>>| {
        if !plain.is_empty() {
            spans.push(Span::raw(std::mem::take(plain)));
        }
    };
    while let Some(c) = rest.chars().next() {
        // A link: [text](address).
        if c == '['
            && let Some(close) = rest.find("](")
            && let Some(end) = rest[close + 2..].find(')')
        {
            let (label, address) = (&rest[1..close], &rest[close + 2..close + 2 + end]);
            if !label.is_empty() && !address.contains(' ') {
                flush(&mut plain, &mut spans);
                spans.push(Span::styled(
                    label.to_owned(),
                    Style::default().add_modifier(Modifier::UNDERLINED),
                ));
                if address != label {
                    spans.push(Span::styled(
                        format!(" ({address})"),
                        Style::default().add_modifier(Modifier::DIM),
                    ));
                }
                rest = &rest[close + 2 + end + 1..];
                continue;
            }
        }
        let marked = [
            ("**", Style::default().add_modifier(Modifier::BOLD)),
            ("~~", Style::default().add_modifier(Modifier::CROSSED_OUT)),
            ("`", Style::default().fg(Color::LightYellow)),
            ("*", Style::default().add_modifier(Modifier::ITALIC)),
            ("_", Style::default().add_modifier(Modifier::ITALIC)),
        ];
        let opened =
            marked.iter().find(|(marker, _)| rest.starts_with(marker)).and_then(|(marker, style)| {
                let after = &rest[marker.len()..];
                // Emphasis hugs its text (`* a *` is not), and `_` only at a word's edge
                // (snake_case stays).
                let hugs = after.chars().next().is_some_and(|c| !c.is_whitespace());
                let at_edge = *marker != "_" || plain.chars().last().is_none_or(|c| !c.is_alphanumeric());
                let end = after.find(marker)?;
                let inner = &after[..end];
                let closes = !inner.is_empty() && (*marker == "`" || !inner.ends_with(char::is_whitespace));
                let closes_at_edge = *marker != "_"
                    || after[end + marker.len()..].chars().next().is_none_or(|c| !c.is_alphanumeric());
                (hugs && at_edge && closes && closes_at_edge).then_some((marker.len(), inner, *style))
            });
        match opened {
            Some((len, inner, style)) => {
                flush(&mut plain, &mut spans);
                spans.push(Span::styled(inner.to_owned(), style));
                rest = &rest[len + inner.len() + len..];
            }
            None => {
                plain.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    flush(&mut plain, &mut spans);
    spans
}

fn str_width(text: &str) -> usize {
    text.chars().map(|c| c.width().unwrap_or(0)).sum()
}

/// Lines wrapped to `width` columns at word boundaries (a word longer than a row is broken),
/// keeping styles.
pub fn wrap_all(lines: Vec<Line<'static>>, width: u16) -> Vec<Line<'static>> {
    let width = usize::from(width.max(1));
    let mut out = Vec::with_capacity(lines.len());
    for line in lines {
        if line.width() <= width {
            out.push(line);
            continue;
        }
        let cells: Vec<(char, Style)> =
            line.spans.iter().flat_map(|span| span.content.chars().map(move |c| (c, span.style))).collect();
        for (start, end) in word_rows(cells.iter().map(|(c, _)| *c), |_| width) {
            let mut spans: Vec<Span<'static>> = Vec::new();
            let mut piece = String::new();
            let mut style = cells.get(start).map_or_else(Style::default, |(_, s)| *s);
            for &(c, s) in &cells[start..end] {
                if s != style && !piece.is_empty() {
                    spans.push(Span::styled(std::mem::take(&mut piece), style));
                }
                style = s;
                piece.push(c);
            }
            if !piece.is_empty() {
                spans.push(Span::styled(piece, style));
            }
            out.push(Line::from(spans).style(line.style));
        }
    }
    out
}

/// Rows of `chars` (one line, no new lines) in `width` columns, as char ranges: a row ends after
/// its last space when the next word does not fit, or at the width inside a word longer than a
/// row.
fn word_rows(chars: impl Iterator<Item = char>, width: impl Fn(usize) -> usize) -> Vec<(usize, usize)> {
    let chars: Vec<(char, usize)> = chars.map(|c| (c, c.width().unwrap_or(0))).collect();
    let mut rows = Vec::new();
    let (mut start, mut used, mut space) = (0, 0, None::<usize>);
    for (i, &(c, w)) in chars.iter().enumerate() {
        if used + w > width(rows.len()) && i > start {
            match space {
                Some(at) if at + 1 > start && at + 1 < i => {
                    rows.push((start, at + 1));
                    start = at + 1;
                    used = chars[start..i].iter().map(|(_, w)| w).sum();
                }
                _ => {
                    rows.push((start, i));
                    (start, used) = (i, 0);
                }
            }
            space = None;
            if used + w > width(rows.len()) {
                rows.push((start, i));
                (start, used) = (i, 0);
            }
        }
        if c == ' ' {
            space = Some(i);
        }
        used += w;
    }
    rows.push((start, chars.len()));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A removed line reading `-- a comment` is `--- a comment` in the diff: inside a hunk it is a
    /// removed line with its number, not a file header; headers outside hunks are left out.
    #[test]
    fn diff_rows_number_lines_and_tell_headers_from_removed_lines() {
        let unified = "--- a/x.sql\n+++ b/x.sql\n@@ -7,3 +7,2 @@\n select 1;\n--- a comment\n-select 2;\n+select 3;\n\\ No newline at end of file\n";
        let rows = diff_rows(unified);
        let shown: Vec<(DiffRow, &str)> = rows.iter().map(|(r, t)| (*r, t.as_str())).collect();
        assert_eq!(
            shown,
            [
                (DiffRow::Hunk, "@@ -7,3 +7,2 @@"),
                (DiffRow::Unchanged, "   7  select 1;"),
                (DiffRow::Removed, "   8 --- a comment"),
                (DiffRow::Removed, "   9 -select 2;"),
                (DiffRow::Added, "   8 +select 3;"),
                (DiffRow::Other, "\\ No newline at end of file"),
            ]
        );
        assert_eq!(hunk_starts("@@ -1 +1 @@"), Some(((1, 1), (1, 1))));
        assert_eq!(hunk_starts("@@ nonsense"), None);
    }
}
