//! The one error type of the computer runtime.

use std::io;
use std::path::PathBuf;

use tool_core::ErrorKind;

use crate::edit::EditError;
use crate::process::ProcessError;

/// Why a file, search or process operation failed; every message says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum ComputerError {
    /// The path does not exist.
    #[error("{path} does not exist; check the path, or search for the file by name or glob")]
    NotFound {
        /// The path.
        path: PathBuf,
    },
    /// A directory where a file was expected.
    #[error("{path} is a directory; list it instead, or give a file path")]
    IsDirectory {
        /// The path.
        path: PathBuf,
    },
    /// A FIFO, socket or device where a regular file was expected; it was not opened (opening a
    /// FIFO blocks until someone writes to it).
    #[error("{path} is a {what}, not a regular file; it was not opened")]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// `FIFO`, `socket`, `character device` or `block device`.
        what: &'static str,
    },
    /// A file where a directory was expected.
    #[error("{path} is not a directory")]
    NotDirectory {
        /// The path.
        path: PathBuf,
    },
    /// The target exists and overwriting was not asked for.
    #[error("{path} already exists; choose another name or remove it first")]
    AlreadyExists {
        /// The path.
        path: PathBuf,
    },
    /// Binary content where text was expected.
    #[error("{path} is a binary file ({size} bytes) and cannot be read or edited as text")]
    Binary {
        /// The path.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// Too large for an operation that needs the whole file.
    #[error("{path} is {size} bytes, over the {limit}-byte limit for this operation; {advice}")]
    TooLarge {
        /// The path.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
        /// What to do instead.
        advice: &'static str,
    },
    /// A line range past the end of the file.
    #[error("offset {offset} is past the end of {path}, which has {total_lines} lines")]
    OffsetPastEnd {
        /// The path.
        path: PathBuf,
        /// The requested first line.
        offset: u64,
        /// Lines in the file.
        total_lines: u64,
    },
    /// A glob or regex that does not compile.
    #[error("invalid pattern `{pattern}`: {message}")]
    InvalidPattern {
        /// The pattern.
        pattern: String,
        /// The compiler's message.
        message: String,
    },
    /// Bad request values.
    #[error("{0}")]
    InvalidRequest(String),
    /// The operating system refused.
    #[error("permission denied: {path}")]
    PermissionDenied {
        /// The path.
        path: PathBuf,
    },
    /// The path leads out of every folder of the session and the session's boundary is hard.
    #[error(
        "{path} is outside this session's folders ({roots}); no approval can open it here, so work \
         inside them (or ask the operator to grant the folder)"
    )]
    Outside {
        /// The path.
        path: PathBuf,
        /// The session's folders, listed.
        roots: String,
    },
    /// The path is one of the server's own files, which no call may open.
    #[error("{path} is one of this server's own files; no tool call may open it")]
    Protected {
        /// The path.
        path: PathBuf,
    },
    /// A write beneath a folder granted for reading only.
    #[error("{path} is in a folder this session may only read ({root}); write somewhere else")]
    ReadOnlyRoot {
        /// The path.
        path: PathBuf,
        /// The read-only folder.
        root: PathBuf,
    },
    /// A path outside the session's folders that goes through a symbolic link: such a path is
    /// opened exactly as audited, and a link could be swapped after the audit.
    #[error(
        "{path} is outside this session's folders and goes through a symbolic link; give the real path \
         (with no link in it)"
    )]
    ThroughLink {
        /// The path.
        path: PathBuf,
    },
    /// The file at an approved path is not the one the person was shown (renamed over, removed).
    #[error(
        "{} is not the file that was approved: it was replaced or removed since; nothing was done \
         (call again to be asked about it as it is now)",
        path.display()
    )]
    Replaced {
        /// The path.
        path: PathBuf,
    },
    /// An edit could not be applied.
    #[error(transparent)]
    Edit(#[from] EditError),
    /// A command could not be run or found.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// Any other I/O failure.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A blocking task died.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ComputerError {
    /// Maps an I/O error on `path` to the most specific variant.
    pub fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        let path = path.into();
        match source.kind() {
            io::ErrorKind::NotFound => Self::NotFound { path },
            io::ErrorKind::PermissionDenied => Self::PermissionDenied { path },
            io::ErrorKind::AlreadyExists => Self::AlreadyExists { path },
            io::ErrorKind::IsADirectory => Self::IsDirectory { path },
            io::ErrorKind::NotADirectory => Self::NotDirectory { path },
            _ => Self::Io { path, source },
        }
    }

    /// The error kind a tool reports for this failure.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::NotFound { .. } => ErrorKind::NotFound,
            Self::Outside { .. } | Self::Protected { .. } => ErrorKind::Blocked,
            Self::ReadOnlyRoot { .. } => ErrorKind::PermissionDenied,
            Self::ThroughLink { .. } => ErrorKind::InvalidArguments,
            Self::Replaced { .. } => ErrorKind::Conflict,
            Self::PermissionDenied { .. } => ErrorKind::PermissionDenied,
            Self::AlreadyExists { .. } | Self::Edit(_) => ErrorKind::Conflict,
            Self::IsDirectory { .. }
            | Self::NotRegular { .. }
            | Self::NotDirectory { .. }
            | Self::Binary { .. }
            | Self::TooLarge { .. }
            | Self::OffsetPastEnd { .. }
            | Self::InvalidPattern { .. }
            | Self::InvalidRequest(_) => ErrorKind::InvalidArguments,
            Self::Process(ProcessError::NoSuchCommand { .. }) => ErrorKind::NotFound,
            Self::Process(ProcessError::Sandbox(_)) => ErrorKind::Blocked,
            Self::Process(ProcessError::TooManyJobs { .. } | ProcessError::TooManyTenantJobs { .. }) => {
                ErrorKind::Conflict
            }
            Self::Process(_) | Self::Io { .. } => ErrorKind::Execution,
            Self::Internal(_) => ErrorKind::Internal,
        }
    }
}
