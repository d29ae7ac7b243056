//! `toolhost rewind`: the calls of the folder's last session (or `--session`) that changed files,
//! with their diffs, and putting the folder back to before one of them (`--to CALL_ID`, or
//! `--last`). A file changed since the last call is not overwritten unless the person says so
//! (asked when standard input is a terminal, or `--force`). The rewind is journalled and the undone
//! calls' rows marked `compensated`.

use std::io::IsTerminal as _;
use std::path::PathBuf;

use anyhow::Context;

use crate::{out, setup};

/// `toolhost rewind …`.
#[derive(Debug, Clone, clap::Args)]
pub struct RewindArgs {
    /// Put the folder back to before this call (and undo every later one).
    #[arg(long, conflicts_with = "last")]
    pub to: Option<String>,
    /// Put the folder back to before the session's last call that changed files.
    #[arg(long)]
    pub last: bool,
    /// The session (default: the folder's last session that changed files).
    #[arg(long)]
    pub session: Option<String>,
    /// Show each call's diffs.
    #[arg(long)]
    pub diff: bool,
    /// Overwrite files changed since the last call without asking.
    #[arg(long)]
    pub force: bool,
    /// The folder (default: the current one).
    #[arg(long = "cd", short = 'C', value_name = "DIR")]
    pub folder: Option<PathBuf>,
}

/// Exit codes.
pub mod code {
    /// Listed, or rewound.
    pub const DONE: u8 = 0;
    /// Files changed since would have been overwritten, and the person did not say so.
    pub const CONFLICT: u8 = 3;
}

fn describe(state: &checkpoints::FileState) -> &'static str {
    match state {
        checkpoints::FileState::Absent => "absent",
        checkpoints::FileState::Stored { .. } => "kept",
        checkpoints::FileState::TooLarge { .. } => "too large to keep",
    }
}

/// Lists or rewinds; returns the exit code.
///
/// # Errors
///
/// No checkpoints for the folder, an unknown call, or a store or journal that fails.
pub async fn run(args: RewindArgs) -> anyhow::Result<u8> {
    let folder = match &args.folder {
        Some(folder) => folder.clone(),
        None => std::env::current_dir().context("finding the current folder")?,
    };
    let folder = std::fs::canonicalize(&folder)
        .with_context(|| format!("using {} as the folder", folder.display()))?;
    let store = checkpoints::Store::open(
        setup::data_dir()?.join("checkpoints"),
        checkpoints::DEFAULT_MAX_FILE_BYTES,
    )?;
    let session = match &args.session {
        Some(session) => session.clone(),
        None => store.sessions(&folder).into_iter().next().with_context(|| {
            format!("no session changed files in {} (nothing to rewind)", folder.display())
        })?,
    };
    if args.to.is_none() && !args.last {
        let calls = checkpoints::calls(&store, &folder, &session)?;
        out::line(format_args!(
            "session {session}: {} call(s) that changed files, newest first",
            calls.len()
        ))?;
        for entry in calls.iter().rev() {
            out::line(format_args!(
                "{}  {} {}  {}  ({})",
                setup::time_of(entry.at_ms),
                entry.call_id,
                entry.api,
                entry.summary,
                entry.files.iter().map(|c| c.path.as_str()).collect::<Vec<_>>().join(", ")
            ))?;
            if args.diff {
                for change in &entry.files {
                    out::text(checkpoints::diff(&store, change))?;
                }
            }
        }
        if !calls.is_empty() {
            out::line("rewind with: toolhost rewind --to CALL_ID (or --last)")?;
        }
        return Ok(code::DONE);
    }
    // Files are opened beneath the folder (and the temp folders a session may use), never
    // through a link swapped in since.
    let boundary = tool_core::sandbox::FileBoundary {
        roots: std::iter::once(folder.clone())
            .chain([PathBuf::from("/tmp"), PathBuf::from("/var/tmp"), std::env::temp_dir()])
            .map(|root| tool_core::FileRoot::writable(root.canonicalize().unwrap_or(root)))
            .collect(),
        outside: tool_core::sandbox::OutsideFiles::Exact,
        ..tool_core::sandbox::FileBoundary::default()
    };
    let opener = computer_runtime::beneath::Opener::new(&boundary);
    let plan = checkpoints::plan(&store, &opener, &folder, &session, args.to.as_deref())?;
    eprintln!("undoing {} call(s): {}", plan.calls.len(), plan.calls.join(", "));
    for restore in &plan.restores {
        eprintln!(
            "  {}: back to {}{}",
            restore.path,
            describe(&restore.to),
            if restore.conflict { " (changed since)" } else { "" }
        );
    }
    let conflicts: Vec<&str> = plan.conflicts().map(|r| r.path.as_str()).collect();
    let mut force = args.force;
    if !conflicts.is_empty() && !force {
        if std::io::stdin().is_terminal() {
            eprint!("{} changed since the last call; overwrite? [y/N] ", conflicts.join(", "));
            let mut answer = String::new();
            std::io::stdin().read_line(&mut answer)?;
            force = matches!(answer.trim(), "y" | "Y" | "yes");
        }
        if !force {
            eprintln!(
                "not rewound: {} changed since the last call (--force overwrites them)",
                conflicts.join(", ")
            );
            return Ok(code::CONFLICT);
        }
    }
    let applied = checkpoints::apply(&store, &opener, &folder, &plan, force)?;
    let journal = setup::journal(&setup::data_dir()?).await?;
    checkpoints::journal_rewind(journal.as_ref(), setup::TENANT, &plan, &applied, "terminal").await?;
    out::line(format_args!(
        "rewound to before {}: {} restored, {} removed",
        plan.to_call,
        applied.restored.len(),
        applied.removed.len()
    ))?;
    for (path, why) in &applied.skipped {
        eprintln!("  left as it is: {path} ({why})");
    }
    if !applied.failed.is_empty() {
        for (path, why) in &applied.failed {
            eprintln!("  could not be put back: {path} ({why})");
        }
        anyhow::bail!(
            "the rewind is incomplete: {} file(s) could not be put back; the calls stay listed",
            applied.failed.len()
        );
    }
    Ok(code::DONE)
}
