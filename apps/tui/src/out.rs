//! Standard output for the subcommands that print (`journal`, `tools`, `call`): a reader that
//! went away (`toolhost journal | head`) ends the command quietly instead of a panic.

use std::fmt;
use std::io::Write as _;

/// Standard output was closed by its reader; `main` ends quietly (exit 0) on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("standard output was closed")
    }
}

impl std::error::Error for Closed {}

/// Writes `text` to standard output as it is (no new line added).
///
/// # Errors
///
/// [`Closed`] when the reader went away; another write error as it is.
pub fn text(text: impl fmt::Display) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match write!(out, "{text}").and_then(|()| out.flush()) {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Err(Closed.into()),
        other => Ok(other?),
    }
}

/// Writes `text` and a new line to standard output.
///
/// # Errors
///
/// As [`text`].
pub fn line(text: impl fmt::Display) -> anyhow::Result<()> {
    self::text(format_args!("{text}\n"))
}

/// Whether an error is the closed output (to end quietly on).
pub fn is_closed(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| cause.downcast_ref::<Closed>().is_some())
        || error.chain().any(|cause| {
            cause.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
        })
}
