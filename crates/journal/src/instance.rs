//! Which process is this, and is another one still alive.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::InstanceInfo;
use crate::rows::now_ms;

/// This process as an instance: the host name, the pid and its start time in clock ticks, under
/// the id given (use [`new_instance_id`] for a fresh one per process start).
pub fn current_instance(id: String) -> InstanceInfo {
    let pid = std::process::id();
    InstanceInfo {
        id,
        host: host_name(),
        pid,
        start_ticks: process_stat(pid).map(|stat| stat.start_ticks),
        ..InstanceInfo::default()
    }
}

/// A fresh instance id: host, pid, start ticks and the time, plus a counter so that two journals
/// of one process differ.
pub fn new_instance_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let pid = std::process::id();
    let ticks = process_stat(pid).map_or(0, |stat| stat.start_ticks);
    format!("{}-{pid}-{ticks}-{}-{}", host_name(), now_ms(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// This machine's host name (`/proc/sys/kernel/hostname`, else `/etc/hostname`, else `unknown`).
pub fn host_name() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .map(|text| text.trim().to_owned())
        .find(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// What `/proc/<pid>/stat` tells about a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    /// Field 3: `R`, `S`, `D`, `Z` (zombie), `X` (dead)…
    pub(crate) state: char,
    /// Field 22: the start time in clock ticks after boot.
    pub(crate) start_ticks: u64,
}

/// Reads `/proc/<pid>/stat`; `None` when there is no such process (or no `/proc`).
pub(crate) fn process_stat(pid: u32) -> Option<ProcStat> {
    if pid == 0 {
        return None;
    }
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Parses a `stat` line. Field 2 is `(comm)`, which may hold spaces and parentheses, so the
/// fields are counted after the last `)`: there the state is field 3 and the start time field 22.
pub(crate) fn parse_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Fields 4..=21 come next; the start time is the 19th after the state.
    let start_ticks = fields.nth(18)?.parse().ok()?;
    Some(ProcStat { state, start_ticks })
}

/// Whether the process `pid` on this host is still the one that registered: it exists, is not a
/// zombie, and (when the start ticks were recorded) started at the same tick.
pub(crate) fn local_process_alive(pid: i64, start_ticks: Option<i64>) -> bool {
    let Ok(pid) = u32::try_from(pid) else { return false };
    match process_stat(pid) {
        None => false,
        Some(stat) => {
            !matches!(stat.state, 'Z' | 'X' | 'x')
                && start_ticks
                    .is_none_or(|ticks| u64::try_from(ticks).is_ok_and(|ticks| ticks == stat.start_ticks))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_comm_with_spaces_and_parentheses() {
        let line = "1234 (a) b (c) S 1 1234 1234 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 1000 50";
        assert_eq!(parse_stat(line), Some(ProcStat { state: 'S', start_ticks: 987_654 }));
    }

    #[test]
    fn this_process_is_alive_and_a_reaped_one_is_not() {
        let me = current_instance("me".into());
        assert_eq!(me.pid, std::process::id());
        let ticks = me.start_ticks.expect("this process's start ticks");
        assert!(local_process_alive(i64::from(me.pid), Some(ticks as i64)));
        assert!(local_process_alive(i64::from(me.pid), None));
        assert!(
            !local_process_alive(i64::from(me.pid), Some(ticks as i64 + 1)),
            "another start time is another process"
        );
        let mut child = std::process::Command::new("true").spawn().expect("spawn true");
        let pid = child.id();
        child.wait().expect("reap true");
        assert!(!local_process_alive(i64::from(pid), None));
        assert!(!local_process_alive(-1, None));
    }

    #[test]
    fn instance_ids_are_fresh() {
        assert_ne!(new_instance_id(), new_instance_id());
        assert!(!host_name().is_empty());
    }
}
