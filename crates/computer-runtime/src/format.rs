//! Compact text for the model, one formatter per state.
//!
//! The state keeps everything for people and programs; the model gets what it needs to act and,
//! whenever something was left out, a sentence saying how to get the rest.

use std::fmt::Write as _;
use std::path::Path;

use crate::EditState;
use crate::files::{EntryKind, ListState, MoveResult, MoveState, ReadCut, ReadState, WriteState};
use crate::process::{CapturedOutput, ExitInfo, KillState, OutputState, RunState};
use crate::search::{FoundState, GrepState};

/// A size as people read it: `512 B`, `12.3 KiB`, `4.0 MiB`.
pub fn size(bytes: u64) -> String {
    match bytes {
        0..1024 => format!("{bytes} B"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
    }
}

/// The lines read, then a notice when there is more.
pub fn read(state: &ReadState) -> String {
    let mut out = if state.total_lines == 0 { "(empty file)".to_owned() } else { state.content.clone() };
    if let Some(next) = state.next_offset {
        let why = match state.cut {
            Some(ReadCut::Bytes) => " (output limit reached)",
            Some(ReadCut::Lines) | None => "",
        };
        let _ = write!(
            out,
            "\n\n[Showing lines {}-{} of {}{why}. Use offset={next} to continue.]",
            state.start_line, state.end_line, state.total_lines
        );
    }
    if state.long_lines_cut > 0 {
        let _ = write!(
            out,
            "\n[{} long line(s) were cut; use grep or a command to see them whole.]",
            state.long_lines_cut
        );
    }
    out
}

/// One sentence about a write.
pub fn write(state: &WriteState) -> String {
    let what = match state.previous_bytes {
        None => "created".to_owned(),
        Some(before) => format!("replaced {before} bytes"),
    };
    format!("Wrote {} lines ({} bytes) to {} ({what}).", state.lines, state.bytes, state.path.display())
}

/// One sentence about an edit.
pub fn edit(state: &EditState) -> String {
    let fuzzy = if state.fuzzy {
        " The text matched only after normalising quotes, dashes or whitespace; check the result."
    } else {
        ""
    };
    format!(
        "Edited {}: {} replacement(s), +{} -{} lines, first change at line {}.{fuzzy}",
        state.path.display(),
        state.replacements,
        state.lines_added,
        state.lines_removed,
        state.first_changed_line
    )
}

/// A directory listing, folders marked with a trailing `/`.
pub fn list(state: &ListState) -> String {
    if state.entries.is_empty() {
        return format!("{} is empty.", state.path.display());
    }
    let mut out = String::new();
    for entry in &state.entries {
        match entry.kind {
            EntryKind::Directory => {
                let _ = writeln!(out, "{}/", entry.name);
            }
            EntryKind::Symlink => {
                let _ = writeln!(out, "{}@", entry.name);
            }
            EntryKind::File | EntryKind::Other => {
                let _ = writeln!(out, "{} ({} bytes)", entry.name, entry.size);
            }
        }
    }
    if state.truncated {
        let _ = writeln!(
            out,
            "[Showing {} of {} entries; use glob or search to narrow.]",
            state.entries.len(),
            state.total
        );
    }
    out.trim_end().to_owned()
}

/// Paths found, relative to the searched folder.
pub fn found(state: &FoundState, what: &str) -> String {
    if state.paths.is_empty() {
        return format!("No files match {what} under {}.", state.root.display());
    }
    let mut out = String::new();
    for path in &state.paths {
        let _ = writeln!(out, "{}", relative(&state.root, path));
    }
    if state.truncated {
        let _ = writeln!(
            out,
            "[Showing the first {} results; use a more specific pattern to see the rest.]",
            state.paths.len()
        );
    }
    out.trim_end().to_owned()
}

/// Matches as `path:line: text`, ripgrep-style.
pub fn grep(state: &GrepState, pattern: &str) -> String {
    if state.matches.is_empty() {
        return format!(
            "No matches for `{pattern}` in {} file(s) under {}. Try a broader pattern, case_insensitive, or another folder.",
            state.files_searched,
            state.root.display()
        );
    }
    let mut out = String::new();
    for m in &state.matches {
        let _ = writeln!(out, "{}:{}: {}", relative(&state.root, &m.path), m.line, m.text);
    }
    if state.truncated {
        let _ = writeln!(
            out,
            "[Showing the first {} matches; narrow the pattern or add a glob to see the rest.]",
            state.matches.len()
        );
    } else {
        let _ = writeln!(out, "[{} match(es) in {} file(s)]", state.matches.len(), state.files_matched);
    }
    out.trim_end().to_owned()
}

/// The result of a move batch.
pub fn moved(state: &MoveState) -> String {
    let mut out = String::new();
    for result in &state.results {
        let _ = writeln!(out, "{}", move_line(result));
    }
    let failed = state.failures();
    if failed > 0 {
        let _ = writeln!(out, "[{failed} of {} move(s) failed; the others were done.]", state.results.len());
    }
    out.trim_end().to_owned()
}

/// One move or rename.
pub fn move_line(result: &MoveResult) -> String {
    match &result.error {
        None => format!("Moved {} → {}", result.from.display(), result.to.display()),
        Some(error) => format!("Failed {} → {}: {error}", result.from.display(), result.to.display()),
    }
}

/// A command's outcome and output.
pub fn run(state: &RunState) -> String {
    let mut out = String::new();
    if let Some(id) = &state.command_id {
        let _ = writeln!(
            out,
            "Started in the background as `{id}` (pid {}). Use getCommandOutput with this id to read its output, killCommand to stop it.",
            state.pid
        );
    } else if state.timed_out {
        let _ = writeln!(
            out,
            "Timed out after {} ms; the command and its children were killed. Output so far:",
            state.duration_ms
        );
    } else if state.cancelled {
        let _ = writeln!(
            out,
            "Cancelled after {} ms; the command and its children were killed. Output so far:",
            state.duration_ms
        );
    } else if let Some(exit) = &state.exit {
        let _ = writeln!(out, "{} in {} ms.", exit_line(exit), state.duration_ms);
    }
    if let Some(limit) = &state.limit {
        let _ = writeln!(out, "Limit reached: {limit}.");
    }
    push_output(&mut out, &state.output, &state.output_path);
    dropped_notice(&mut out, state.dropped_bytes);
    if let Some(report) = &state.sandbox {
        sandbox_notice(&mut out, state, report);
    }
    out.trim_end().to_owned()
}

/// Says that the spill file was kept bounded by dropping the middle of the output.
fn dropped_notice(out: &mut String, dropped: u64) {
    if dropped > 0 {
        let _ = write!(
            out,
            "\n[The output was too large to keep whole: {dropped} bytes from its middle were dropped; \
             the first MiB and the end are kept. Redirect a command's output to a file in the working \
             directory to keep all of it.]"
        );
    }
}

/// What a model can do about a command the sandbox stopped: the words the kernel's refusals
/// print, matched in the output of a command that failed.
const DENIAL_MARKERS: &[&str] = &[
    "Permission denied",
    "Operation not permitted",
    "Read-only file system",
    "Invalid cross-device link",
    "Network is unreachable",
    "Temporary failure in name resolution",
    "Could not resolve host",
];

fn sandbox_notice(out: &mut String, state: &RunState, report: &sandbox::Report) {
    use tool_core::sandbox::{NetworkAccess, SandboxMode};
    if !report.missing.is_empty() {
        let _ = write!(
            out,
            "\n[The sandbox could only partly be enforced here: missing {}.]",
            report.missing.join(", ")
        );
    }
    let failed = state.exit.as_ref().is_some_and(|exit| !exit.success);
    if !failed || !DENIAL_MARKERS.iter().any(|marker| state.output.text.contains(marker)) {
        return;
    }
    let writes = match report.mode {
        SandboxMode::ReadOnly => "this session is read-only: nothing may be written",
        _ => "writes are allowed only in the working directory and the session's temp folder ($TMPDIR)",
    };
    let network = match report.network {
        NetworkAccess::Off => "; the network is off",
        NetworkAccess::On => "",
    };
    let _ = write!(
        out,
        "\n[This may have been denied by the sandbox ({} sandbox): {writes}{network}. \
         Work inside the working directory, or, if the command really needs more, run it again with \
         `escalate: true` to ask a person to approve running it outside the sandbox.]",
        report.mode
    );
}

/// New output of a background command.
pub fn output(state: &OutputState) -> String {
    let mut out = match (&state.exit, state.running) {
        (_, true) => format!("`{}` is still running.\n", state.command_id),
        (Some(exit), false) => format!("`{}` finished: {}.\n", state.command_id, exit_line(exit)),
        (None, false) => format!("`{}` has finished.\n", state.command_id),
    };
    if state.new_output.total_bytes == 0 {
        out.push_str("(no new output)");
    } else {
        push_output(&mut out, &state.new_output, &state.output_path);
    }
    dropped_notice(&mut out, state.dropped_bytes);
    out.trim_end().to_owned()
}

/// A kill.
pub fn kill(state: &KillState) -> String {
    let mut out = if state.was_running {
        format!("Killed `{}` and its process group.\n", state.command_id)
    } else {
        format!("`{}` had already finished; its process group was cleaned up.\n", state.command_id)
    };
    if state.new_output.total_bytes > 0 {
        push_output(&mut out, &state.new_output, &state.output_path);
    }
    out.trim_end().to_owned()
}

fn exit_line(exit: &ExitInfo) -> String {
    match (exit.code, exit.signal) {
        (Some(0), _) => "Exit code 0".to_owned(),
        (Some(code), _) => format!("Failed with exit code {code}"),
        (None, Some(signal)) => format!("Killed by signal {signal}"),
        (None, None) => "Ended with an unknown status".to_owned(),
    }
}

fn push_output(out: &mut String, output: &CapturedOutput, path: &Path) {
    if output.total_bytes == 0 {
        out.push_str("(no output)");
        return;
    }
    out.push_str(&output.text);
    if output.truncated {
        let _ = write!(
            out,
            "\n[Output was {} lines ({} bytes); the middle was left out. The full output is in {}: read it with offset/limit or grep it.]",
            output.total_lines,
            output.total_bytes,
            path.display()
        );
    }
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).unwrap_or(path).to_string_lossy().into_owned()
}
