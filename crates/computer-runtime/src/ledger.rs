//! A ledger on disk of the process groups a process started, so that what a crashed process left
//! running (a server killed with `SIGKILL`, by the OOM killer, by a failed deploy) is killed by the
//! next one that starts on the same host, instead of running on while the journal says its calls
//! were abandoned.
//!
//! Layout: `ROOT/INSTANCE/owner` holds `PID STARTTIME BOOT_ID` of the process that owns the
//! ledger; `ROOT/INSTANCE/PGID` holds the group leader's start time. A ledger whose owner is gone
//! is swept: each recorded group still alive is killed, then the ledger is removed.
//!
//! A recorded group id is only signalled when it can only be the same group: after a reboot
//! nothing is signalled (the boot id differs), and a group whose leader's pid now belongs to a
//! process with another start time was reused and is left alone. While any member of a group is
//! alive, the kernel does not hand out its id again, so a group whose leader has exited but whose
//! members remain is still the recorded one.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The ledger of this process.
#[derive(Debug)]
pub struct Ledger {
    dir: PathBuf,
}

/// What a sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Swept {
    /// Ledgers of processes that are gone.
    pub ledgers: usize,
    /// Process groups killed.
    pub killed: Vec<i32>,
}

impl Ledger {
    /// Creates (or takes over) the ledger `root/instance` for this process.
    ///
    /// # Errors
    ///
    /// The folder cannot be created or written.
    pub fn open(root: &Path, instance: &str) -> io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        let name: String =
            instance.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        let dir = root.join(name);
        fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
        let pid = std::process::id();
        let start = start_time(pid).unwrap_or(0);
        fs::write(dir.join("owner"), format!("{pid} {start} {}\n", boot_id()))?;
        Ok(Self { dir })
    }

    /// Records a group this process started.
    pub fn record(&self, pgid: i32) {
        let start = u32::try_from(pgid).ok().and_then(start_time).unwrap_or(0);
        // Best effort: a full disk must not stop a command; the group is then only killed by
        // the parent-death signal.
        let _ = fs::write(self.dir.join(pgid.to_string()), start.to_string());
    }

    /// Forgets a group that is gone (or that was killed).
    pub fn forget(&self, pgid: i32) {
        let _ = fs::remove_file(self.dir.join(pgid.to_string()));
    }

    /// Kills the groups recorded in every ledger under `root` whose owner is gone (never
    /// `except`, this process's own), and removes those ledgers.
    pub fn sweep(root: &Path, except: &str) -> Swept {
        let mut swept = Swept::default();
        let Ok(entries) = fs::read_dir(root) else { return swept };
        let boot = boot_id();
        for entry in entries.flatten() {
            let dir = entry.path();
            if entry.file_name() == except || !dir.is_dir() {
                continue;
            }
            let owner = fs::read_to_string(dir.join("owner")).unwrap_or_default();
            let mut fields = owner.split_whitespace();
            let (pid, start, owner_boot) = (
                fields.next().and_then(|f| f.parse::<u32>().ok()),
                fields.next().and_then(|f| f.parse::<u64>().ok()),
                fields.next().unwrap_or_default(),
            );
            if let (Some(pid), Some(start)) = (pid, start)
                && owner_boot == boot
                && start_time(pid) == Some(start)
            {
                continue; // its owner is alive: another live process on this host
            }
            swept.ledgers += 1;
            if owner_boot == boot {
                swept.killed.extend(kill_recorded(&dir));
            }
            let _ = fs::remove_dir_all(&dir);
        }
        swept
    }
}

fn kill_recorded(dir: &Path) -> Vec<i32> {
    let mut killed = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else { return killed };
    for entry in entries.flatten() {
        let Some(pgid) = entry.file_name().to_str().and_then(|name| name.parse::<i32>().ok()) else {
            continue;
        };
        let recorded: Option<u64> = fs::read_to_string(entry.path()).ok().and_then(|s| s.trim().parse().ok());
        let leader = u32::try_from(pgid).ok().and_then(start_time);
        let same = match (leader, recorded) {
            // The leader lives: it must be the one recorded.
            (Some(now), Some(then)) => now == then,
            // The leader is gone: while members remain the id is not reused.
            (None, _) => true,
            (Some(_), None) => false,
        };
        if same && super::process::signal_group(pgid, libc::SIGKILL).is_ok() {
            killed.push(pgid);
        }
    }
    killed.sort_unstable();
    killed
}

/// When a process started, in clock ticks since boot (`/proc/PID/stat`, field 22).
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_owned()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::process::Command;
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_dead_owners_groups_are_killed_and_a_live_owners_are_not() {
        let root = tempfile::tempdir().unwrap();
        // A "crashed" instance: its owner file names a process that is gone.
        let dead = Ledger::open(root.path(), "dead-instance").unwrap();
        let mut orphan = {
            use std::os::unix::process::CommandExt;
            Command::new("sleep").arg("30").process_group(0).spawn().unwrap()
        };
        let pgid = i32::try_from(orphan.id()).unwrap();
        dead.record(pgid);
        let mut gone = Command::new("true").spawn().unwrap();
        let gone_pid = gone.id();
        gone.wait().unwrap();
        fs::write(root.path().join("dead-instance/owner"), format!("{gone_pid} 1 {}\n", boot_id())).unwrap();
        // A live instance (this process), whose groups must be left alone.
        let live = Ledger::open(root.path(), "live-instance").unwrap();
        let mut kept = {
            use std::os::unix::process::CommandExt;
            Command::new("sleep").arg("30").process_group(0).spawn().unwrap()
        };
        live.record(i32::try_from(kept.id()).unwrap());

        let swept = Ledger::sweep(root.path(), "me");
        assert_eq!(swept, Swept { ledgers: 1, killed: vec![pgid] });
        let status = orphan.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
        assert!(!root.path().join("dead-instance").exists());
        std::thread::sleep(Duration::from_millis(50));
        assert!(kept.try_wait().unwrap().is_none(), "a live owner's group runs on");
        kept.kill().unwrap();
        kept.wait().unwrap();
    }

    #[test]
    fn a_reused_group_id_is_left_alone() {
        let root = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(root.path(), "dead").unwrap();
        let mut other = {
            use std::os::unix::process::CommandExt;
            Command::new("sleep").arg("30").process_group(0).spawn().unwrap()
        };
        let pgid = i32::try_from(other.id()).unwrap();
        // Recorded with another start time: the id now names someone else's group.
        fs::write(root.path().join("dead").join(pgid.to_string()), "1").unwrap();
        drop(ledger);
        fs::write(root.path().join("dead/owner"), format!("999999999 1 {}\n", boot_id())).unwrap();
        let swept = Ledger::sweep(root.path(), "me");
        assert_eq!(swept, Swept { ledgers: 1, killed: vec![] });
        assert!(other.try_wait().unwrap().is_none());
        other.kill().unwrap();
        other.wait().unwrap();
    }
}
