//! Enforces a session's [`SandboxPolicy`] on the commands it runs.
//!
//! The policy is data from `tool-core` (the session chose it, the model did not); this crate turns
//! it into kernel objects. On Linux:
//!
//! * **Landlock** for the filesystem: reads granted anywhere or only in the system folders and the
//!   session's own; writes granted only in the working directory, the session's temp folder and
//!   named folders; denied paths carved out of granted trees ([`paths`]); with ABI 4 the TCP
//!   network, with ABI 6 signals and abstract Unix sockets scoped to the sandbox, so a command
//!   cannot signal the server or another session's commands.
//! * **seccomp** for what Landlock does not cover: sockets other than Unix ones when the network
//!   is off, and system calls that reach past any sandbox (`ptrace`, `mount`, keyrings, `bpf`,
//!   `io_uring`, new namespaces, open-by-handle).
//! * **Capabilities** dropped and `no_new_privs` set, so a server running as root gives its commands
//!   nothing, and a setuid binary gains nothing.
//!
//! Everything is built in the parent ([`Sandbox::prepare`]); the child only makes system calls on
//! the prepared data between fork and exec ([`Prepared::install`]). Both are inherited across exec
//! and fork, so children and grandchildren stay in the box.
//!
//! A policy the kernel cannot enforce is refused ([`SandboxError::Unsupported`]) unless the
//! operator allowed best effort, and then the result says what was missing: never silently
//! unsandboxed.
//!
//! ```
//! # #[cfg(target_os = "linux")] {
//! use sandbox::{Layout, Sandbox, SandboxSettings};
//! use tool_core::SandboxPolicy;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let sandbox = Sandbox::new(SandboxSettings::default());
//! let layout = Layout { working_directory: dir.path().to_owned(), temp_directory: None, output_files: vec![] };
//! let prepared = sandbox.prepare(&SandboxPolicy::read_only(), &layout).unwrap();
//! let mut command = std::process::Command::new("/bin/sh");
//! command.args(["-c", "echo hi > inside.txt"]).current_dir(dir.path());
//! prepared.install(&mut command);
//! let status = command.status().unwrap();
//! assert!(!status.success(), "read-only: the write was denied");
//! assert!(!dir.path().join("inside.txt").exists());
//! # }
//! ```
#![deny(missing_docs)]

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tool_core::sandbox::{NetworkAccess, SandboxMode, SandboxPolicy};

pub mod groups;
pub mod huge_pages;
#[cfg(target_os = "linux")]
mod linux;
pub mod paths;
#[cfg(target_os = "linux")]
pub mod protect;

pub use paths::Grants;

/// What the operator decided about kernels that cannot enforce a policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Enforcement {
    /// Refuse to run a command whose policy cannot be enforced in full.
    #[default]
    Required,
    /// Run it with what can be enforced, and say what could not.
    BestEffort,
}

/// How a [`Sandbox`] is set up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SandboxSettings {
    /// What to do when the kernel cannot enforce a policy.
    pub enforcement: Enforcement,
}

/// What the running kernel offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Support {
    /// The Landlock ABI version, if Landlock is enabled.
    pub landlock_abi: Option<u8>,
    /// Whether seccomp filters can be installed.
    pub seccomp: bool,
    /// Whether a command can get a mount namespace of its own (sealing everything but its
    /// writable folders read-only, keeping protected folders read-only).
    pub mount_namespace: bool,
    /// Whether this process runs as root, whose uid owns the system's files.
    pub root: bool,
}

impl Support {
    /// What this kernel offers (probed once per process).
    pub fn probe() -> Self {
        #[cfg(target_os = "linux")]
        {
            linux::support()
        }
        #[cfg(not(target_os = "linux"))]
        {
            Self { landlock_abi: None, seccomp: false, mount_namespace: false, root: false }
        }
    }

    /// What of `policy` this kernel cannot enforce, in words; empty when it can enforce it all.
    pub fn missing(&self, policy: &SandboxPolicy) -> Vec<String> {
        let mut missing = Vec::new();
        if policy.is_off() {
            return missing;
        }
        if self.landlock_abi.is_none() {
            missing.push("filesystem rules (Landlock is not enabled in this kernel)".to_owned());
        }
        if !self.seccomp {
            missing.push("system-call filter (seccomp is not available)".to_owned());
            if policy.network == NetworkAccess::Off && self.landlock_abi.is_none_or(|abi| abi < 4) {
                missing.push("network off (needs seccomp or Landlock ABI 4)".to_owned());
            }
        }
        if policy.network == NetworkAccess::On
            && !policy.blocked_ports.is_empty()
            && self.landlock_abi.is_none_or(|abi| abi < 4)
        {
            missing.push("closing the server's own ports to commands (needs Landlock ABI 4)".to_owned());
        }
        if self.root && !self.mount_namespace {
            missing.push(
                "a read-only filesystem outside the writable folders, for commands run as root \
                 (no mount namespace can be made here)"
                    .to_owned(),
            );
        }
        missing
    }

    /// What a workspace-write command in these folders lacks beyond [`missing`](Self::missing):
    /// protected folders that exist but cannot be kept read-only.
    fn missing_in(&self, protected: &[PathBuf]) -> Option<String> {
        (!protected.is_empty() && !self.mount_namespace).then(|| {
            "read-only .git/hooks, .git/config and .toolhost inside the writable folders \
             (no mount namespace can be made here)"
                .to_owned()
        })
    }
}

impl fmt::Display for Support {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.landlock_abi {
            Some(abi) => write!(f, "Landlock ABI {abi}")?,
            None => f.write_str("no Landlock")?,
        }
        f.write_str(if self.seccomp { ", seccomp" } else { ", no seccomp" })
    }
}

/// The folders a command runs with; they come from the session, never from the model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    /// The session's working directory.
    pub working_directory: PathBuf,
    /// The session's own temp folder.
    pub temp_directory: Option<PathBuf>,
    /// Descriptors of files the command must be able to reopen for writing (its own output
    /// files, reached through `/dev/stdout` or `/proc/self/fd`). They are granted by descriptor,
    /// never by path: a path in a folder the command can write could be swapped for a link to
    /// any file before the grant is made. The caller keeps them open until `prepare` returns.
    pub output_files: Vec<std::os::fd::RawFd>,
}

/// Why a command cannot be sandboxed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    /// The kernel cannot enforce the policy and the operator requires it.
    #[error(
        "the {mode} sandbox cannot be enforced on this machine: missing {}; \
         the command was not run (the operator can allow best-effort sandboxing)",
        missing.join(", ")
    )]
    Unsupported {
        /// The policy's mode.
        mode: SandboxMode,
        /// What is missing.
        missing: Vec<String>,
    },
    /// The working directory no longer is the folder the session opened on.
    #[error(
        "the working directory {} was moved or replaced since the session opened (it now resolves \
         to {}); the command was not run",
        path.display(),
        now.display()
    )]
    Moved {
        /// The session's working directory.
        path: PathBuf,
        /// Where it resolves now.
        now: PathBuf,
    },
    /// Building the rules failed.
    #[error("the sandbox could not be set up: {0}")]
    Setup(String),
}

/// What a sandboxed command was actually run under, for its result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// The mode.
    pub mode: SandboxMode,
    /// The network.
    pub network: NetworkAccess,
    /// Filesystem rules applied (Landlock).
    pub filesystem: bool,
    /// System-call filter applied (seccomp).
    pub syscalls: bool,
    /// What the policy asked for and the kernel could not give (best effort only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// Folders inside writable ones kept read-only (`.git/hooks`, `.git/config`, `.toolhost`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protected: Vec<PathBuf>,
}

/// The sandbox of one process: the operator's settings and what the kernel offers.
#[derive(Debug, Clone, Copy)]
pub struct Sandbox {
    settings: SandboxSettings,
    support: Support,
}

impl Sandbox {
    /// A sandbox with these settings on this kernel.
    pub fn new(settings: SandboxSettings) -> Self {
        Self { settings, support: Support::probe() }
    }

    /// What the kernel offers.
    pub fn support(&self) -> Support {
        self.support
    }

    /// The operator's settings.
    pub fn settings(&self) -> SandboxSettings {
        self.settings
    }

    /// Checks that `policy` can be enforced here (or that best effort is allowed).
    ///
    /// # Errors
    ///
    /// [`SandboxError::Unsupported`] when something is missing and enforcement is required.
    pub fn check(&self, policy: &SandboxPolicy) -> Result<Vec<String>, SandboxError> {
        self.settle(policy.mode, self.support.missing(policy))
    }

    /// The one place that decides: what is missing refuses the command, unless the operator
    /// allowed best effort, and then it is reported.
    fn settle(&self, mode: SandboxMode, missing: Vec<String>) -> Result<Vec<String>, SandboxError> {
        if !missing.is_empty() && self.settings.enforcement == Enforcement::Required {
            return Err(SandboxError::Unsupported { mode, missing });
        }
        Ok(missing)
    }

    /// Builds everything a command needs to enter the sandbox; `None` when the policy is off.
    ///
    /// # Errors
    ///
    /// [`SandboxError::Unsupported`] (see [`check`](Self::check)) and [`SandboxError::Setup`] when
    /// the kernel refuses the rules.
    pub fn prepare(&self, policy: &SandboxPolicy, layout: &Layout) -> Result<Prepared, SandboxError> {
        if policy.is_off() {
            self.check(policy)?;
            return Ok(Prepared { inner: None, report: None });
        }
        // Sessions pin their folder (resolved when they open); a folder that resolves elsewhere
        // now was swapped for a link, and its target must not become writable.
        if let Ok(now) = std::fs::canonicalize(&layout.working_directory)
            && now != layout.working_directory
        {
            return Err(SandboxError::Moved { path: layout.working_directory.clone(), now });
        }
        #[cfg(target_os = "linux")]
        {
            let mut roots = Vec::new();
            if policy.mode == SandboxMode::WorkspaceWrite {
                roots.push(layout.working_directory.clone());
                roots.extend(policy.writable_roots.iter().cloned());
            }
            let mut protected = protect::protected_paths(&roots);
            let mut missing = self.support.missing(policy);
            missing.extend(self.support.missing_in(&protected));
            let missing = self.settle(policy.mode, missing)?;

            let landlock = match self.support.landlock_abi {
                Some(abi) => Some(linux::ruleset(
                    &Grants::of(policy, layout),
                    &layout.output_files,
                    policy.network,
                    abi,
                )?),
                None => None,
            };
            let filters = if self.support.seccomp { linux::filters(policy.network)? } else { Arc::default() };
            // With the network off every TCP port is closed already; with it on, the blocked ones
            // are closed by a layer of their own.
            let ports = match self.support.landlock_abi {
                Some(abi)
                    if abi >= 4
                        && policy.network == NetworkAccess::On
                        && !policy.blocked_ports.is_empty() =>
                {
                    Some(linux::blocked_ports(&policy.blocked_ports)?)
                }
                _ => None,
            };
            let protect = if self.support.mount_namespace {
                // Writable: the writable roots, the session's temp folder and the folders of the
                // command's own output files (which Landlock still governs file by file).
                let mut writable = roots.clone();
                writable.extend(layout.temp_directory.iter().cloned());
                writable.extend(layout.output_files.iter().filter_map(|fd| {
                    std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?.parent().map(Path::to_path_buf)
                }));
                writable.retain(|dir| std::fs::symlink_metadata(dir).is_ok_and(|meta| meta.is_dir()));
                writable.sort();
                writable.dedup();
                let pinned: Vec<PathBuf> = roots
                    .iter()
                    .map(|root| root.join(".git"))
                    .filter(|git| std::fs::symlink_metadata(git).is_ok_and(|meta| meta.is_dir()))
                    .collect();
                protect::Plan::new(&protected)
                    .and_then(|plan| plan.sealing(&writable, &pinned, &layout.working_directory))
            } else {
                // Best effort allowed it (`settle` above): nothing can be bound read-only.
                protected.clear();
                protect::Plan::new(&[])
            }
            .map_err(|error| SandboxError::Setup(format!("protected folders: {error}")))?;
            let report = Report {
                mode: policy.mode,
                network: policy.network,
                filesystem: landlock.is_some(),
                syscalls: !filters.is_empty(),
                missing,
                protected,
            };
            Ok(Prepared {
                inner: Some(Arc::new(Inner { protect, landlock, ports, filters })),
                report: Some(report),
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = layout;
            Err(SandboxError::Unsupported { mode: policy.mode, missing: self.support.missing(policy) })
        }
    }
}

#[derive(Debug)]
struct Inner {
    #[cfg(target_os = "linux")]
    protect: protect::Plan,
    #[cfg(target_os = "linux")]
    landlock: Option<std::os::fd::OwnedFd>,
    #[cfg(target_os = "linux")]
    ports: Option<Arc<std::os::fd::OwnedFd>>,
    #[cfg(target_os = "linux")]
    filters: Arc<[seccompiler::BpfProgram]>,
}

/// A sandbox ready to be entered by one command.
#[derive(Debug, Clone)]
pub struct Prepared {
    inner: Option<Arc<Inner>>,
    report: Option<Report>,
}

impl Prepared {
    /// What the command will run under; `None` when the policy is off.
    pub fn report(&self) -> Option<&Report> {
        self.report.as_ref()
    }

    /// Makes `command` enter the sandbox between fork and exec. Nothing happens for a policy that
    /// is off. If entering fails, the command does not start: spawning it returns the error.
    #[allow(unsafe_code)]
    pub fn install(&self, command: &mut std::process::Command) {
        #[cfg(target_os = "linux")]
        if let Some(inner) = self.inner.clone() {
            use std::os::unix::process::CommandExt;
            // SAFETY: the hook runs in the child between fork and exec; `linux::enter` makes only
            // system calls on data prepared here, allocates nothing and takes no lock.
            unsafe {
                command.pre_exec(move || {
                    // The mount namespace first: it needs the capabilities `enter` drops, and the
                    // system calls its filter forbids.
                    inner.protect.apply()?;
                    linux::enter(inner.landlock.as_ref(), inner.ports.as_deref(), &inner.filters)
                });
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = command;
    }
}
