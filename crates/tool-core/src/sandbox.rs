//! The sandbox policy of a session: what the commands it runs may read, write and reach.
//!
//! This is the contract between whoever opens a session (the server, the terminal app, the MCP
//! client) and whatever starts processes for it (`computer-runtime`, an MCP stdio server): pure
//! data, chosen by the session and never by the model's arguments. The `sandbox` crate enforces
//! it with the kernel (Landlock and seccomp on Linux).
//!
//! ```
//! use tool_core::sandbox::{NetworkAccess, SandboxMode, SandboxPolicy};
//!
//! let policy: SandboxPolicy = serde_json::from_str(r#"{"mode": "workspace-write"}"#).unwrap();
//! assert_eq!(policy.network, NetworkAccess::Off);
//! assert_eq!(policy, SandboxPolicy::workspace_write());
//! assert_eq!(SandboxMode::ReadOnly.as_str(), "read-only");
//! ```

use std::any::Any;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

/// How far a session's commands are boxed in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum SandboxMode {
    /// No sandbox: commands can do whatever the user running Toolhost can.
    Off,
    /// Reads (anywhere, or only in the confined set), no writes, no network.
    ReadOnly,
    /// Writes only in the working directory, the session's temp folder and named folders.
    #[default]
    WorkspaceWrite,
}

impl SandboxMode {
    /// Every mode, from the most open to the most closed.
    pub const ALL: [Self; 3] = [Self::Off, Self::WorkspaceWrite, Self::ReadOnly];

    /// The stable string form (`off`, `read-only`, `workspace-write`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::ReadOnly => "read-only",
            Self::WorkspaceWrite => "workspace-write",
        }
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing a [`SandboxMode`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown sandbox mode `{0}`; use off, read-only or workspace-write")]
pub struct UnknownSandboxMode(pub String);

impl FromStr for SandboxMode {
    type Err = UnknownSandboxMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|mode| mode.as_str() == s).ok_or_else(|| UnknownSandboxMode(s.to_owned()))
    }
}

/// Whether a session's commands may use the network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum NetworkAccess {
    /// No sockets but local (Unix) ones.
    #[default]
    Off,
    /// The network as the host has it.
    On,
}

/// The error of parsing a [`NetworkAccess`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown network setting `{0}`; use on or off")]
pub struct UnknownNetworkAccess(pub String);

impl FromStr for NetworkAccess {
    type Err = UnknownNetworkAccess;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "off" => Ok(Self::Off),
            "on" => Ok(Self::On),
            other => Err(UnknownNetworkAccess(other.to_owned())),
        }
    }
}

/// What a session's commands may read when the sandbox is on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ReadAccess {
    /// Everything the user may read, except [`SandboxPolicy::deny_read`] (a person's own machine).
    #[default]
    Anywhere,
    /// Only the system folders programs need (`/usr`, `/bin`, `/lib*`, `/etc`, a few devices,
    /// `/proc`), the session's own folders and [`SandboxPolicy::readable_roots`] (a server whose
    /// tenants share the machine).
    Confined,
}

/// A session's sandbox policy. The default is `workspace-write` without network, reads anywhere.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SandboxPolicy {
    /// How far commands are boxed in.
    #[serde(default)]
    pub mode: SandboxMode,
    /// Whether they may use the network.
    #[serde(default)]
    pub network: NetworkAccess,
    /// What they may read.
    #[serde(default)]
    pub reads: ReadAccess,
    /// Folders writable besides the working directory and the session's temp folder
    /// (`workspace-write` only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
    pub writable_roots: Vec<PathBuf>,
    /// Folders readable besides the system folders and the session's own (`confined` reads only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
    pub readable_roots: Vec<PathBuf>,
    /// Paths that must never be read, even where reads are open (the server's data folder,
    /// other tenants' roots). Landlock grants rather than denies, so a denied path is honoured by
    /// leaving out every folder that contains it and granting its siblings instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
    pub deny_read: Vec<PathBuf>,
    /// Whether a call may ask a person to run one command outside the sandbox.
    #[serde(default)]
    pub allow_escalation: bool,
    /// TCP ports commands may never connect to, even with the network on: the server's own API,
    /// which a command could otherwise use to open an unsandboxed session or approve itself.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_ports: Vec<u16>,
}

impl SandboxPolicy {
    /// No sandbox.
    pub fn off() -> Self {
        Self { mode: SandboxMode::Off, ..Self::default() }
    }

    /// Reads anywhere, writes nowhere, no network.
    pub fn read_only() -> Self {
        Self { mode: SandboxMode::ReadOnly, ..Self::default() }
    }

    /// Writes in the session's folders, no network.
    pub fn workspace_write() -> Self {
        Self::default()
    }

    /// The same policy with the network on or off.
    #[must_use]
    pub fn with_network(mut self, network: NetworkAccess) -> Self {
        self.network = network;
        self
    }

    /// The same policy with reads confined or open.
    #[must_use]
    pub fn with_reads(mut self, reads: ReadAccess) -> Self {
        self.reads = reads;
        self
    }

    /// Whether commands run unboxed.
    pub fn is_off(&self) -> bool {
        self.mode == SandboxMode::Off
    }

    /// One line saying what the policy allows, for results and status lines.
    pub fn describe(&self) -> String {
        match self.mode {
            SandboxMode::Off => "no sandbox".to_owned(),
            mode => format!(
                "sandbox {mode}, network {}, reads {}",
                match self.network {
                    NetworkAccess::Off => "off",
                    NetworkAccess::On => "on",
                },
                match self.reads {
                    ReadAccess::Anywhere => "anywhere",
                    ReadAccess::Confined => "confined",
                }
            ),
        }
    }
}

/// The sandbox a call's commands run in: the session's policy and the folders it applies to.
/// A session makes it once and its calls share it (`CallContext::sandbox` is an `Arc`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallSandbox {
    /// The session's policy.
    pub policy: SandboxPolicy,
    /// The session's own temp folder (`TMPDIR` of its commands, writable in `workspace-write`).
    pub temp_directory: Option<PathBuf>,
    /// Where the session's file calls may open files.
    pub files: FileBoundary,
    /// Whose budget of background commands the session's count against (its tenant), besides
    /// its own.
    pub tenant: Option<String>,
}

/// One folder a session's file calls open files beneath.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FileRoot {
    /// The folder, absolute (canonical where it could be resolved when the session opened).
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub path: PathBuf,
    /// Whether files beneath it may be written, moved or created.
    pub writable: bool,
}

impl FileRoot {
    /// A folder that may be read and written.
    pub fn writable(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into(), writable: true }
    }

    /// A folder that may only be read.
    pub fn read_only(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into(), writable: false }
    }
}

/// What a file call may do with a path beneath none of the session's roots.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutsideFiles {
    /// Open it exactly as it was audited and approved: no symbolic link in any component, so the
    /// file opened is the one the person was shown (a person's own machine, an open server).
    #[default]
    Exact,
    /// Never: the roots are a hard limit that no approval lifts (a server with keys, where the
    /// person approving is a tenant and the files beyond are other tenants' or the server's).
    Refuse,
}

/// Where a session's file calls may open files: every path is opened once, beneath a handle on
/// one of these folders pinned on the session's first file call (`openat2` with
/// `RESOLVE_BENEATH`), so a symbolic link swapped in after the audit cannot lead elsewhere.
///
/// Pure data chosen by whoever opens the session, never by the model's arguments; the pinned
/// handles live in [`Pins`], which only the runtime that opens files fills.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileBoundary {
    /// The folders, in no particular order (the deepest one holding a path is used).
    pub roots: Vec<FileRoot>,
    /// What happens to a path beneath none of them.
    pub outside: OutsideFiles,
    /// Paths never opened by a file call, inside the roots or out, in any mode: the server's own
    /// files (journal, state, keys, deny rules, configuration).
    pub protected: Vec<PathBuf>,
    /// The handles on `roots`, pinned by the runtime on first use and shared by every call.
    pub pins: Pins,
    /// For one call a person approved: the files its paths named when they were shown, by device
    /// and inode. A path opened outside the roots must still be that file (one renamed over it
    /// since is refused). Empty for sessions, and for calls nobody was asked about.
    pub approved: Vec<ApprovedFile>,
}

/// A file as it was when a person approved a call that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovedFile {
    /// The path as the call names it, absolute (relative ones joined to the working directory,
    /// `.` and `..` taken out).
    pub path: PathBuf,
    /// Its device.
    pub device: u64,
    /// Its inode.
    pub inode: u64,
}

/// A slot for the runtime's pinned handles on a session's roots (`tool-core` does no I/O, so it
/// only holds them). Clones share the slot; every slot compares equal, as it holds no policy.
#[derive(Clone, Default)]
pub struct Pins(Arc<OnceLock<Arc<dyn Any + Send + Sync>>>);

impl Pins {
    /// The pinned handles, made by `pin` on the first call and shared after.
    ///
    /// # Errors
    ///
    /// `pin`'s error, which is not remembered: the next call tries again.
    pub fn get_or_pin<T: Any + Send + Sync, E>(
        &self,
        pin: impl FnOnce() -> Result<T, E>,
    ) -> Result<Arc<dyn Any + Send + Sync>, E> {
        if let Some(pinned) = self.0.get() {
            return Ok(pinned.clone());
        }
        let made: Arc<dyn Any + Send + Sync> = Arc::new(pin()?);
        // Two first calls may race: the first stored wins and both use it.
        Ok(self.0.get_or_init(|| made).clone())
    }
}

impl fmt::Debug for Pins {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.get().is_some() { "Pins(pinned)" } else { "Pins(unpinned)" })
    }
}

impl PartialEq for Pins {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Pins {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_round_trip_through_strings_and_json() {
        for mode in SandboxMode::ALL {
            assert_eq!(mode.as_str().parse::<SandboxMode>(), Ok(mode));
            let json = serde_json::to_string(&mode).unwrap();
            assert_eq!(json, format!("\"{}\"", mode.as_str()));
        }
        assert_eq!(
            "workspace".parse::<SandboxMode>().unwrap_err().to_string(),
            "unknown sandbox mode `workspace`; use off, read-only or workspace-write"
        );
    }

    #[test]
    fn the_default_is_closed_to_the_network() {
        let policy = SandboxPolicy::default();
        assert_eq!(policy.mode, SandboxMode::WorkspaceWrite);
        assert_eq!(policy.network, NetworkAccess::Off);
        assert!(!policy.allow_escalation);
        assert_eq!(policy.describe(), "sandbox workspace-write, network off, reads anywhere");
        assert_eq!(SandboxPolicy::off().describe(), "no sandbox");
    }
}
