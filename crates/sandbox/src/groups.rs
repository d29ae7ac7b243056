//! What a session's commands may take together, and a command's whole tree killed at once.
//!
//! Landlock and seccomp say what a command may touch; nothing there bounds how much it takes. A
//! fork bomb, a memory hog or a process that leaves its group with `setsid` was limited only by
//! the host. Here each session's commands run in a **control group** with the operator's
//! [`Limits`] (processes, memory, a CPU weight), and each command in a group of its own beneath
//! it, which is killed as a whole (what `setsid` left behind included) when the command times
//! out, is cancelled or ends, and with the session when it ends.
//!
//! * **cgroup v2** where this process sits in a subtree it may manage (systemd `Delegate=yes`,
//!   with the `pids` and `memory` controllers available): the process moves itself into a leaf
//!   (`toolhost-self`, as the v2 rule against processes in inner groups requires), enables the
//!   controllers for its subtree and makes the sessions' groups beside it.
//! * **cgroup v1** where the `pids` (and `memory`, `cpu`) hierarchies are writable, as on hosts
//!   that still mount v1 (and on the machine this was built on: v1 with an empty v2 mount).
//! * **Resource limits** as the floor everywhere (`RLIMIT_CORE` 0, `RLIMIT_NOFILE`, and
//!   `RLIMIT_AS` from the memory limit when no memory group can be made).
//!
//! A command enters its group between fork and exec (a write of `0` to the group's
//! `cgroup.procs`, through a descriptor opened before the fork), so it and everything it starts
//! are counted from their first instruction. Groups are named after the process that made them
//! (`toolhost-PID-STARTTIME`), so a later start on the host can tell a crashed process's groups
//! from a live one's and kill and remove them ([`Groups::sweep`]).

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What one session's commands may take together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Processes (and threads) at once.
    pub max_processes: u64,
    /// Memory in bytes, page cache included (the kernel reclaims that first).
    pub max_memory_bytes: u64,
    /// CPU weight against other sessions, 1–10 000 (100 is an ordinary share); `None` leaves it.
    pub cpu_weight: Option<u64>,
    /// Open files per process (`RLIMIT_NOFILE`).
    pub max_open_files: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_processes: 256, max_memory_bytes: 2 << 30, cpu_weight: None, max_open_files: 4096 }
    }
}

/// Which mechanism bounds the sessions' commands on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    V2 { base: PathBuf },
    V1 { pids: PathBuf, memory: Option<PathBuf>, cpu: Option<PathBuf> },
    Rlimits { why: String },
}

/// The control groups of this process's sessions.
#[derive(Debug)]
pub struct Groups {
    kind: Kind,
    limits: Limits,
    /// Whether the limits were asked for (the address space bounds memory where no group can).
    asked: bool,
    /// Kills what is in the groups once this process is gone, however it went.
    reaper: Option<Reaper>,
}

/// A small process that outlives this one by design: it waits on a pipe whose only writer is this
/// process, and when the pipe closes (this process exited, was killed with `SIGKILL`, or dropped
/// its groups) it kills every process left in the groups and removes them. So nothing a command
/// started runs on after a crash, not even what left its process group and escaped the shell's
/// parent-death signal, and not only at the next start.
#[derive(Debug)]
struct Reaper {
    child: std::process::Child,
}

impl Reaper {
    /// The reaper of the groups under `bases` (at most three levels: base, session, command).
    fn spawn(bases: &[PathBuf]) -> io::Result<Self> {
        use std::os::unix::process::CommandExt;
        // Only shell builtins and `rmdir`: it must work when nothing else can be started.
        const SCRIPT: &str = r#"
while read -r _; do :; done
for round in 1 2 3 4 5 6 7 8 9 10; do
  found=0
  for base in "$@"; do
    for procs in "$base"/cgroup.procs "$base"/*/cgroup.procs "$base"/*/*/cgroup.procs; do
      [ -r "$procs" ] || continue
      while read -r pid; do
        # 0: a process in another pid namespace (`kill 0` would be this group); itself: born in
        # the server's own leaf on cgroup v2.
        case "$pid" in ''|0|1|"$$") continue ;; esac
        found=1; kill -9 "$pid" 2>/dev/null
      done < "$procs"
    done
  done
  [ "$found" = 0 ] && break
  sleep 0.05
done
for base in "$@"; do rmdir "$base"/*/* "$base"/* "$base" 2>/dev/null; done
exit 0
"#;
        let mut command = std::process::Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(SCRIPT)
            .arg("toolhost-reaper")
            .args(bases)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            // Its own process group: a signal to this process's group does not reach it.
            .process_group(0);
        Ok(Self { child: command.spawn()? })
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        // Closing the pipe starts it; it ends in about half a second.
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// The group of one session: its limits hold for all its commands together.
#[derive(Debug)]
pub struct SessionGroup {
    /// One folder per hierarchy (v2: one; v1: pids, and memory and cpu where they are).
    dirs: Vec<PathBuf>,
    v2: bool,
    limits: Limits,
}

/// The group of one command, beneath its session's.
#[derive(Debug, Clone)]
pub struct CommandGroup {
    inner: Arc<CommandDirs>,
}

#[derive(Debug)]
struct CommandDirs {
    dirs: Vec<PathBuf>,
    /// `cgroup.procs` of each, opened before the fork: the child writes `0` to enter.
    procs: Vec<OwnedFd>,
    v2: bool,
}

/// How many times the kernel refused a session something, read before and after a command.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pressure {
    /// Processes killed for memory.
    pub oom_kills: u64,
    /// Forks refused at the process limit.
    pub fork_refusals: u64,
}

impl Groups {
    /// Sets up the groups for this process's sessions, with the best mechanism the host allows;
    /// [`Groups::describe`] says which one is in force. With groups, a reaper process is started
    /// that kills whatever is left in them as soon as this process is gone, a `SIGKILL` included.
    pub fn setup(limits: Limits) -> Self {
        let kind = detect().unwrap_or_else(|why| Kind::Rlimits { why });
        let mut groups = Self { kind, limits, asked: true, reaper: None };
        let bases = groups.bases();
        if !bases.is_empty() {
            groups.reaper = Reaper::spawn(&bases).ok();
        }
        groups
    }

    /// No groups and no memory bound, only the floor every command gets (no core dumps, a bound
    /// on open files): a person's own machine, whose builds may need all of it.
    pub fn floor_only(limits: Limits) -> Self {
        Self { kind: Kind::Rlimits { why: "not asked for".to_owned() }, limits, asked: false, reaper: None }
    }

    /// The limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The folders this process's session groups are made in (one per hierarchy; none where
    /// only resource limits apply).
    pub fn bases(&self) -> Vec<PathBuf> {
        match &self.kind {
            Kind::V2 { base } => vec![base.clone()],
            Kind::V1 { pids, memory, cpu } => {
                std::iter::once(pids).chain(memory).chain(cpu).cloned().collect()
            }
            Kind::Rlimits { .. } => Vec::new(),
        }
    }

    /// `cgroup-v2`, `cgroup-v1` or `rlimits`.
    pub fn mechanism(&self) -> &'static str {
        match self.kind {
            Kind::V2 { .. } => "cgroup-v2",
            Kind::V1 { .. } => "cgroup-v1",
            Kind::Rlimits { .. } => "rlimits",
        }
    }

    /// One line for the start-up log and `/readyz`.
    pub fn describe(&self) -> String {
        let limits = format!(
            "{} processes, {} MiB memory per session",
            self.limits.max_processes,
            self.limits.max_memory_bytes >> 20
        );
        match &self.kind {
            Kind::V2 { base } => format!("control groups v2 under {} ({limits})", base.display()),
            Kind::V1 { memory, cpu, .. } => format!(
                "control groups v1 (pids{}{}; {limits})",
                if memory.is_some() { ", memory" } else { "" },
                if cpu.is_some() { ", cpu" } else { "" }
            ),
            Kind::Rlimits { why } => format!(
                "resource limits only ({why}): no process count per session, memory as address space \
                 ({} MiB a process)",
                self.limits.max_memory_bytes >> 20
            ),
        }
    }

    /// Whether a process outside this one kills what is left in the groups once this process is
    /// gone (see [`Groups::setup`]).
    pub fn reaped(&self) -> bool {
        self.reaper.is_some()
    }

    /// Makes the group of a session (`name` is made safe for a folder name); `None` where only
    /// resource limits apply.
    ///
    /// # Errors
    ///
    /// The group could not be made or limited.
    pub fn session(&self, name: &str) -> io::Result<Option<SessionGroup>> {
        let name = safe(name);
        let (dirs, v2) = match &self.kind {
            Kind::Rlimits { .. } => return Ok(None),
            Kind::V2 { base } => (vec![base.join(&name)], true),
            Kind::V1 { pids, memory, cpu } => {
                (std::iter::once(pids).chain(memory).chain(cpu).map(|h| h.join(&name)).collect(), false)
            }
        };
        for dir in &dirs {
            match fs::create_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        let group = SessionGroup { dirs, v2, limits: self.limits };
        group.limit()?;
        Ok(Some(group))
    }

    /// Kills what is left in the groups of processes that are gone (a server killed with
    /// `SIGKILL`) and removes them; returns how many groups were swept.
    pub fn sweep(&self) -> usize {
        let bases = self.bases();
        let mut swept = 0;
        for base in bases.iter().filter_map(|base| base.parent()) {
            let Ok(entries) = fs::read_dir(base) else { continue };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if owner_alive(&name) != Some(false) {
                    continue;
                }
                kill_tree(&entry.path(), matches!(self.kind, Kind::V2 { .. }));
                remove_tree(&entry.path());
                swept += 1;
            }
        }
        swept
    }
}

impl Drop for Groups {
    /// This process's groups go with it: whatever still runs in them is killed.
    fn drop(&mut self) {
        let v2 = matches!(self.kind, Kind::V2 { .. });
        for base in self.bases() {
            kill_tree(&base, v2);
            remove_tree(&base);
        }
    }
}

impl SessionGroup {
    fn limit(&self) -> io::Result<()> {
        let limits = self.limits;
        if self.v2 {
            let dir = &self.dirs[0];
            write(&dir.join("pids.max"), &limits.max_processes.to_string())?;
            write(&dir.join("memory.max"), &limits.max_memory_bytes.to_string())?;
            // Past the limit the group's processes are killed, not left to thrash in swap.
            let _ = write(&dir.join("memory.swap.max"), "0");
            if let Some(weight) = limits.cpu_weight {
                let _ = write(&dir.join("cpu.weight"), &weight.clamp(1, 10_000).to_string());
            }
            return Ok(());
        }
        for dir in &self.dirs {
            if dir.join("pids.max").exists() {
                write(&dir.join("pids.max"), &limits.max_processes.to_string())?;
            }
            if dir.join("memory.limit_in_bytes").exists() {
                // Children count against this group's limit only with hierarchy on (the default
                // on current kernels; set before any child exists).
                let _ = write(&dir.join("memory.use_hierarchy"), "1");
                write(&dir.join("memory.limit_in_bytes"), &limits.max_memory_bytes.to_string())?;
                let _ = write(&dir.join("memory.memsw.limit_in_bytes"), &limits.max_memory_bytes.to_string());
                let _ = write(&dir.join("memory.swappiness"), "0");
            }
            if let (Some(weight), true) = (limits.cpu_weight, dir.join("cpu.shares").exists()) {
                let _ = write(
                    &dir.join("cpu.shares"),
                    &(weight.clamp(1, 10_000) * 1024 / 100).max(2).to_string(),
                );
            }
        }
        Ok(())
    }

    /// Makes the group of one command beneath this session's.
    ///
    /// # Errors
    ///
    /// The group could not be made, or its `cgroup.procs` opened.
    pub fn command(&self, name: &str) -> io::Result<CommandGroup> {
        let name = safe(name);
        let mut dirs = Vec::new();
        let mut procs = Vec::new();
        for dir in &self.dirs {
            let child = dir.join(&name);
            fs::create_dir(&child)?;
            dirs.push(child.clone());
            let file = fs::OpenOptions::new().write(true).open(child.join("cgroup.procs"))?;
            procs.push(OwnedFd::from(file));
        }
        Ok(CommandGroup { inner: Arc::new(CommandDirs { dirs, procs, v2: self.v2 }) })
    }

    /// What the kernel refused the session's own group so far (where a command's events are
    /// counted depends on the kernel: see [`CommandGroup::pressure`]).
    pub fn pressure(&self) -> Pressure {
        pressure_of(&self.dirs, self.v2)
    }

    /// The limits the session runs under.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Kills every process of the session's commands and removes its groups.
    pub fn end(&self) {
        for dir in &self.dirs {
            kill_tree(dir, self.v2);
            remove_tree(dir);
        }
    }
}

impl Drop for SessionGroup {
    fn drop(&mut self) {
        self.end();
    }
}

impl CommandGroup {
    /// Makes `command` enter this group between fork and exec; a command that cannot enter it
    /// does not start (spawning it returns the error).
    #[allow(unsafe_code)]
    pub fn install(&self, command: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        let inner = self.inner.clone();
        // SAFETY: the hook runs in the child between fork and exec and only calls `write` on
        // descriptors opened before the fork, with a static buffer: async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                for fd in &inner.procs {
                    if libc::write(fd.as_raw_fd(), b"0".as_ptr().cast(), 1) != 1 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }

    /// Kills every process in the group (what left the command's process group included) and
    /// waits briefly for them to be gone; returns how many were signalled. It blocks for at most
    /// a few hundred milliseconds.
    pub fn kill(&self) -> usize {
        self.inner.dirs.first().map_or(0, |dir| kill_tree(dir, self.inner.v2))
    }

    /// What the kernel refused the command's processes: cgroup v1 counts a refused fork and an
    /// out-of-memory kill in the group of the process they hit, not in the session's group whose
    /// limit was reached (v2 counts memory there too).
    pub fn pressure(&self) -> Pressure {
        pressure_of(&self.inner.dirs, self.inner.v2)
    }

    /// The processes in the group now.
    pub fn pids(&self) -> Vec<i32> {
        self.inner.dirs.first().map(|dir| procs(dir)).unwrap_or_default()
    }
}

impl Drop for CommandDirs {
    /// An empty group goes; one that a command left processes in (`server &` and exit) stays,
    /// counted against its session, until the session ends.
    fn drop(&mut self) {
        for dir in &self.dirs {
            let _ = fs::remove_dir(dir);
        }
    }
}

/// Resource limits every command gets, whatever else holds it: no core dumps, a bound on open
/// files, and, where no memory group bounds it, the address space.
#[derive(Debug, Clone, Copy)]
pub struct Rlimits {
    open_files: u64,
    address_space: Option<u64>,
}

impl Rlimits {
    /// The floor for `groups`' limits.
    pub fn of(groups: &Groups) -> Self {
        let memory_group = match &groups.kind {
            Kind::V2 { .. } => true,
            Kind::V1 { memory, .. } => memory.is_some(),
            Kind::Rlimits { .. } => false,
        };
        Self {
            open_files: groups.limits.max_open_files,
            address_space: (groups.asked && !memory_group).then_some(groups.limits.max_memory_bytes),
        }
    }

    /// Sets them in `command`'s child between fork and exec (only lowered, never raised).
    #[allow(unsafe_code)]
    pub fn install(self, command: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        // SAFETY: getrlimit and setrlimit on stack values are async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                lower(libc::RLIMIT_CORE, 0)?;
                lower(libc::RLIMIT_NOFILE, self.open_files)?;
                if let Some(bytes) = self.address_space {
                    lower(libc::RLIMIT_AS, bytes)?;
                }
                Ok(())
            });
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
type Resource = libc::__rlimit_resource_t;
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
type Resource = libc::c_int;

/// Lowers a resource limit (soft and hard) to `value`, leaving it where it is already lower.
#[allow(unsafe_code)]
fn lower(resource: Resource, value: u64) -> io::Result<()> {
    let mut current = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: a valid pointer to a stack value.
    if unsafe { libc::getrlimit(resource, &raw mut current) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let new = libc::rlimit { rlim_cur: current.rlim_cur.min(value), rlim_max: current.rlim_max.min(value) };
    // SAFETY: a valid pointer to a stack value.
    if unsafe { libc::setrlimit(resource, &raw const new) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A new group name of this process's: `toolhost-PID-STARTTIME-N`, N counting the [`Groups`] it
/// made (each is dropped, and its groups killed, on its own).
fn own_name() -> String {
    static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let pid = std::process::id();
    let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("toolhost-{pid}-{}-{n}", start_time(pid).unwrap_or(0))
}

/// Whether the process that named a group `toolhost-PID-STARTTIME-N` still runs; `None` for a
/// name of another form (not ours to touch).
fn owner_alive(name: &str) -> Option<bool> {
    let mut parts = name.strip_prefix("toolhost-")?.split('-');
    let (pid, start) = (parts.next()?.parse::<u32>().ok()?, parts.next()?.parse::<u64>().ok()?);
    Some(start_time(pid) == Some(start))
}

/// When a process started, in clock ticks since boot (`/proc/PID/stat`, field 22).
fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn detect() -> Result<Kind, String> {
    let own =
        fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    let mounts =
        fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("cannot read mountinfo: {e}"))?;
    let name = own_name();
    detect_v2(&own, &mounts, &name)
        .or_else(|v2| detect_v1(&own, &mounts, &name).map_err(|v1| format!("{v2}; {v1}")))
}

/// cgroup v2: our own group must offer `pids` and `memory`, and be ours to manage.
fn detect_v2(own: &str, mounts: &str, name: &str) -> Result<Kind, String> {
    let path = own.lines().find_map(|line| line.strip_prefix("0::")).ok_or("no cgroup v2 group")?;
    let group = mounts
        .lines()
        .find_map(|line| {
            let (_, after) = line.split_once(" - ")?;
            let fstype = after.split_whitespace().next()?;
            (fstype == "cgroup2").then(|| group_in(line, path)).flatten()
        })
        .ok_or("no cgroup2 mount")?;
    let controllers = fs::read_to_string(group.join("cgroup.controllers")).unwrap_or_default();
    let offered: Vec<&str> = controllers.split_whitespace().collect();
    if !offered.contains(&"pids") || !offered.contains(&"memory") {
        return Err(format!(
            "cgroup v2 group {} offers no pids and memory controllers (delegate them: systemd Delegate=yes)",
            group.display()
        ));
    }
    let leaf = group.join("toolhost-self");
    let made = (|| -> io::Result<PathBuf> {
        match fs::create_dir(&leaf) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        // No processes in an inner group: this process moves to a leaf of its own first.
        write(&leaf.join("cgroup.procs"), &std::process::id().to_string())?;
        let mut enable = String::from("+pids +memory");
        if offered.contains(&"cpu") {
            enable.push_str(" +cpu");
        }
        write(&group.join("cgroup.subtree_control"), &enable)?;
        let base = group.join(name);
        fs::create_dir(&base)?;
        write(&base.join("cgroup.subtree_control"), &enable)?;
        Ok(base)
    })();
    made.map(|base| Kind::V2 { base })
        .map_err(|e| format!("cgroup v2 group {} cannot be managed by this process: {e}", group.display()))
}

/// Where the group `path` (as `/proc/self/cgroup` names it) is under the mount a
/// `/proc/self/mountinfo` line describes: the mount point, joined with the path relative to the
/// mount's root (in a container the hierarchy is often mounted from `/docker/…` or
/// `/kubepods/…`, and the path starts with that root).
fn group_in(mountinfo_line: &str, path: &str) -> Option<PathBuf> {
    let mut fields = mountinfo_line.split_whitespace();
    let root = fields.nth(3)?;
    let mount_point = fields.next()?;
    let relative = match path.strip_prefix(root) {
        Some(rest) if root != "/" && (rest.is_empty() || rest.starts_with('/')) => rest,
        _ => path,
    };
    Some(PathBuf::from(mount_point).join(relative.trim_start_matches('/')))
}

/// cgroup v1: the `pids` hierarchy (at least) must be writable where this process sits.
fn detect_v1(own: &str, mounts: &str, name: &str) -> Result<Kind, String> {
    let hierarchy = |controller: &str| -> Option<PathBuf> {
        let path = own.lines().find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
            names.split(',').any(|n| n == controller).then_some(path)
        })?;
        let group = mounts.lines().find_map(|line| {
            let (_, after) = line.split_once(" - ")?;
            let mut fields = after.split_whitespace();
            let (fstype, _source, options) = (fields.next()?, fields.next()?, fields.next()?);
            (fstype == "cgroup" && options.split(',').any(|o| o == controller))
                .then(|| group_in(line, path))
                .flatten()
        })?;
        let base = group.join(name);
        match fs::create_dir(&base) {
            Ok(()) => Some(base),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Some(base),
            Err(_) => None,
        }
    };
    let pids = hierarchy("pids").ok_or("no writable cgroup v1 pids hierarchy")?;
    let memory = hierarchy("memory");
    if let Some(memory) = &memory {
        let _ = write(&memory.join("memory.use_hierarchy"), "1");
    }
    let cpu = hierarchy("cpu");
    Ok(Kind::V1 { pids, memory, cpu })
}

fn pressure_of(dirs: &[PathBuf], v2: bool) -> Pressure {
    let mut pressure = Pressure::default();
    for dir in dirs {
        let memory = if v2 { dir.join("memory.events") } else { dir.join("memory.oom_control") };
        pressure.oom_kills += field(&memory, "oom_kill");
        pressure.fork_refusals += field(&dir.join("pids.events"), "max");
    }
    pressure
}

fn safe(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    fs::write(path, value)
        .map_err(|e| io::Error::new(e.kind(), format!("writing {value} to {}: {e}", path.display())))
}

/// A `NAME VALUE` line's value in a control group's file, 0 when absent.
fn field(path: &Path, name: &str) -> u64 {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0)
}

/// The processes directly in a group.
fn procs(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

/// Kills every process in `dir` and the groups beneath it, until none is left (a process that
/// forks while it is being killed is found on the next round); returns how many were signalled.
fn kill_tree(dir: &Path, v2: bool) -> usize {
    if v2 && write(&dir.join("cgroup.kill"), "1").is_ok() {
        wait_empty(dir);
        return 0;
    }
    let mut signalled = 0;
    for _ in 0..200 {
        let mut all = Vec::new();
        collect(dir, &mut all);
        if all.is_empty() {
            break;
        }
        for pid in all {
            // SAFETY: kill takes two integers; a pid that exited meanwhile is ESRCH.
            #[allow(unsafe_code)]
            if pid > 1 && unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
                signalled += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    signalled
}

fn wait_empty(dir: &Path) {
    for _ in 0..200 {
        let mut all = Vec::new();
        collect(dir, &mut all);
        if all.is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn collect(dir: &Path, into: &mut Vec<i32>) {
    into.extend(procs(dir));
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                collect(&entry.path(), into);
            }
        }
    }
}

/// Removes a group and the groups beneath it (deepest first; a group is removed with `rmdir`).
fn remove_tree(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&entry.path());
            }
        }
    }
    for _ in 0..50 {
        match fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            // Busy while the last processes are being torn down.
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_group_is_found_under_its_mounts_root() {
        let host = "30 25 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw";
        assert_eq!(super::group_in(host, "/user.slice/app"), Some("/sys/fs/cgroup/user.slice/app".into()));
        let container = "41 38 0:31 /docker/abc /sys/fs/cgroup/pids ro - cgroup cgroup rw,pids";
        assert_eq!(super::group_in(container, "/docker/abc"), Some("/sys/fs/cgroup/pids".into()));
        assert_eq!(super::group_in(container, "/docker/abc/inner"), Some("/sys/fs/cgroup/pids/inner".into()));
        assert_eq!(
            super::group_in(container, "/docker/abcdef"),
            Some("/sys/fs/cgroup/pids/docker/abcdef".into())
        );
    }

    use super::*;

    #[test]
    fn group_names_say_whose_they_are() {
        assert_eq!(owner_alive(&own_name()), Some(true));
        assert_eq!(owner_alive("toolhost-999999999-1-0"), Some(false));
        assert_eq!(owner_alive("system.slice"), None);
        assert_eq!(safe("sess/../x y"), "sess____x_y");
    }

    #[test]
    fn v1_and_v2_are_read_from_proc() {
        let mounts = "30 25 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
                      35 25 0:31 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n";
        let own = "8:pids:/\n0::/\n";
        // The v2 group offers no controllers there: v1 is the one.
        assert!(detect_v2(own, mounts, "toolhost-test").is_err());
    }
}
