//! What a session's commands may take together: the control groups of a [`ProcessManager`]'s
//! sessions, made on a session's first command and ended with it (see `sandbox::groups`).
//!
//! [`ProcessManager`]: crate::process::ProcessManager

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use sandbox::groups::{CommandGroup, Groups, Limits, Pressure, Rlimits, SessionGroup};

use crate::process::ProcessError;

/// The groups of every session of one process manager.
#[derive(Debug)]
pub(crate) struct SessionGroups {
    groups: Groups,
    rlimits: Rlimits,
    sessions: Mutex<HashMap<String, Arc<SessionGroup>>>,
    /// Groups of crashed processes swept when this one started.
    swept: usize,
}

/// A command's place in its session's group, and what the session had been refused before it.
#[derive(Debug, Clone)]
pub(crate) struct Placed {
    pub(crate) group: CommandGroup,
    session: Arc<SessionGroup>,
    before: Pressure,
}

impl SessionGroups {
    /// Control groups with `limits` when `enforce` (the best mechanism the host allows), else only
    /// the floor of resource limits every command gets.
    pub(crate) fn new(limits: Limits, enforce: bool) -> Self {
        let groups = if enforce { Groups::setup(limits) } else { Groups::floor_only(limits) };
        // What a crashed process of ours left in its groups dies now.
        let swept = if enforce { groups.sweep() } else { 0 };
        let rlimits = Rlimits::of(&groups);
        Self { groups, rlimits, sessions: Mutex::new(HashMap::new()), swept }
    }

    pub(crate) fn groups(&self) -> &Groups {
        &self.groups
    }

    pub(crate) fn swept(&self) -> usize {
        self.swept
    }

    /// Puts the command that `command` will start into a group of its own beneath `owner`'s
    /// session group (made now if this is the session's first command), with the resource-limit
    /// floor; `None` where only resource limits apply.
    pub(crate) fn place(
        &self,
        owner: &str,
        name: &str,
        command: &mut std::process::Command,
    ) -> Result<Option<Placed>, ProcessError> {
        let io = |context: &str| {
            let context = context.to_owned();
            move |source| ProcessError::Io { context, source }
        };
        let placed = match self.session(owner).map_err(io("making the session's control group"))? {
            Some(session) => {
                let group = session.command(name).map_err(io("making the command's control group"))?;
                // First, so that the command is in its group before anything else it does.
                group.install(command);
                let before = session.pressure();
                Some(Placed { group, session, before })
            }
            None => None,
        };
        self.rlimits.install(command);
        Ok(placed)
    }

    fn session(&self, owner: &str) -> std::io::Result<Option<Arc<SessionGroup>>> {
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(group) = sessions.get(owner) {
            return Ok(Some(group.clone()));
        }
        let Some(group) = self.groups.session(owner)? else { return Ok(None) };
        let group = Arc::new(group);
        sessions.insert(owner.to_owned(), group.clone());
        Ok(Some(group))
    }

    /// Kills everything `owner`'s commands left running and removes its groups (its session
    /// ended). Killing waits for the processes to go (up to about half a second), so it runs on
    /// a blocking thread, not on the async worker that asked.
    pub(crate) async fn end(&self, owner: &str) {
        let group = self.sessions.lock().unwrap_or_else(PoisonError::into_inner).remove(owner);
        if let Some(group) = group {
            // A panic there is the thread's alone; the group is swept at the next start.
            let _ended = tokio::task::spawn_blocking(move || group.end()).await;
        }
    }
}

impl Placed {
    /// What the kernel refused the command's session while it ran, in words a model can act on.
    pub(crate) fn note(&self) -> Option<String> {
        // Counted in the session's group or in the command's, by kernel: the larger of the two.
        let (session, own) = (self.session.pressure(), self.group.pressure());
        let oom_kills = session.oom_kills.saturating_sub(self.before.oom_kills).max(own.oom_kills);
        let refusals = session.fork_refusals.saturating_sub(self.before.fork_refusals).max(own.fork_refusals);
        let limits = self.session.limits();
        let mut notes = Vec::new();
        if oom_kills > 0 {
            notes.push(format!(
                "the session's commands reached their memory limit ({} MiB) and the kernel killed \
                 {oom_kills} of their processes; use less memory (stream the data, process it in parts)",
                limits.max_memory_bytes >> 20,
            ));
        }
        if refusals > 0 {
            notes.push(format!(
                "the session's commands reached their limit of {} processes and {refusals} new ones were \
                 refused; run fewer processes at once",
                limits.max_processes,
            ));
        }
        (!notes.is_empty()).then(|| notes.join("; "))
    }
}

/// How often a running command's session temp folder is measured.
const DISK_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// Resolves (with the bytes in use) once the session's temp folder uses more than `cap` bytes of
/// disk, or holds more entries than are measured; never without a temp folder.
pub(crate) async fn disk_full(temp: Option<std::path::PathBuf>, cap: u64) -> DiskFull {
    let Some(temp) = temp else { return std::future::pending().await };
    loop {
        tokio::time::sleep(DISK_EVERY).await;
        let dir = temp.clone();
        let used = tokio::task::spawn_blocking(move || measured(&dir)).await.unwrap_or(DiskFull::Bytes(0));
        match used {
            DiskFull::Bytes(bytes) if bytes <= cap => {}
            full => return full,
        }
    }
}

/// Recent measurements by folder: the commands of one session share a folder, and one walk of it
/// each [`DISK_EVERY`] serves them all (32 background commands would otherwise walk it 32 times).
static MEASURED: std::sync::Mutex<
    Option<std::collections::HashMap<std::path::PathBuf, (std::time::Instant, DiskFull)>>,
> = std::sync::Mutex::new(None);

/// The folder's use, walked now unless another command of its session did within the interval.
fn measured(dir: &std::path::Path) -> DiskFull {
    let fresh = |at: &std::time::Instant| at.elapsed() < DISK_EVERY;
    {
        let cache = MEASURED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, used)) = cache.as_ref().and_then(|map| map.get(dir)).filter(|(at, _)| fresh(at)) {
            return *used;
        }
    }
    let used = disk_use(dir);
    let mut cache = MEASURED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let map = cache.get_or_insert_with(std::collections::HashMap::new);
    // Folders no command measured for a while are forgotten (their sessions ended).
    map.retain(|_, (at, _)| at.elapsed() < DISK_EVERY * 40);
    map.insert(dir.to_path_buf(), (std::time::Instant::now(), used));
    used
}

/// What a session's temp folder holds: bytes, or more entries than [`MAX_ENTRIES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DiskFull {
    /// Disk in use.
    Bytes(u64),
    /// Too many files to measure: past the cap too, or millions of empty files would pass it.
    Entries,
}

/// Entries of a temp folder measured at most.
const MAX_ENTRIES: usize = 100_000;

/// The result's words for a command stopped at the temp folder's cap.
pub(crate) fn disk_note(used: DiskFull, cap: u64) -> String {
    let what = match used {
        DiskFull::Bytes(bytes) => {
            format!("used {} MiB of disk, past its cap of {} MiB", bytes >> 20, cap >> 20)
        }
        DiskFull::Entries => format!("holds more than {MAX_ENTRIES} files and folders, past its cap"),
    };
    format!(
        "the session's temp folder {what}, and the command was stopped; write large outputs into the \
         working directory, or delete what is no longer needed"
    )
}

/// Disk used by a folder's files (allocated blocks, so a sparse spill file counts what it holds),
/// links not followed; past [`MAX_ENTRIES`] entries, [`DiskFull::Entries`].
fn disk_use(dir: &std::path::Path) -> DiskFull {
    use std::os::unix::fs::MetadataExt;
    let mut used = 0u64;
    let mut seen = 0usize;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else { continue };
        for entry in entries.flatten() {
            seen += 1;
            if seen > MAX_ENTRIES {
                return DiskFull::Entries;
            }
            let Ok(metadata) = entry.metadata() else { continue };
            used = used.saturating_add(metadata.blocks().saturating_mul(512));
            if metadata.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    DiskFull::Bytes(used)
}
