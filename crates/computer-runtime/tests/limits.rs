//! Limits on what a session's commands take, with the control groups of this kernel: a bounded
//! fork bomb stops at the process limit, a memory hog is killed at the memory limit with a clear
//! result, and what leaves its process group (`setsid`) still dies on timeout and session end.
//!
//! These need a control-group hierarchy this process may write (root on cgroup v1, or a
//! delegated v2 subtree), as CI has; without one they fail and say so.

use std::time::{Duration, Instant};

use computer_runtime::process::{CommandSpec, ProcessConfig, ProcessManager, RunState};
use sandbox::groups::Limits;
use tokio_util::sync::CancellationToken;
use tool_core::sandbox::{CallSandbox, SandboxPolicy};

fn manager(limits: Limits) -> ProcessManager {
    let manager = ProcessManager::new(ProcessConfig {
        kill_grace: Duration::from_millis(200),
        limits,
        enforce_limits: true,
        ..ProcessConfig::default()
    });
    assert_ne!(
        manager.limits().mechanism(),
        "rlimits",
        "these tests need control groups: {}",
        manager.limits().describe()
    );
    manager
}

fn spec(dir: &std::path::Path, owner: &str, command: &str, timeout: Duration) -> CommandSpec {
    CommandSpec {
        command: command.to_owned(),
        cwd: dir.to_path_buf(),
        env: Vec::new(),
        timeout,
        background: false,
        owner: owner.to_owned(),
        sandbox: CallSandbox { policy: SandboxPolicy::off(), ..CallSandbox::default() },
        live: None,
    }
}

async fn run(manager: &ProcessManager, spec: CommandSpec) -> RunState {
    manager.run(spec, &CancellationToken::new()).await.unwrap()
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()) != Some("Z")
    })
}

async fn gone_within(pid: i32, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn pid_after(text: &str, marker: &str) -> i32 {
    text.split(marker)
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap()
}

#[tokio::test]
async fn a_fork_bomb_stops_at_the_process_limit() {
    let dir = tempfile::tempdir().unwrap();
    let manager = manager(Limits { max_processes: 16, ..Limits::default() });
    // Forks as often as it can (bounded at 200 tries), each child sleeping: at most the limit live.
    let bomb = r#"python3 -c '
import os, time
n = 0
for _ in range(200):
    try:
        if os.fork() == 0:
            time.sleep(3)
            os._exit(0)
        n += 1
    except OSError:
        pass
print("forked", n)
'"#;
    let state = run(&manager, spec(dir.path(), "bomb", bomb, Duration::from_secs(20))).await;
    let forked = pid_after(&state.output.text, "forked ");
    assert!(forked < 16, "{forked} forks went through a limit of 16");
    let note = state.limit.clone().expect("the result says a limit was reached");
    assert!(note.contains("limit of 16 processes"), "{note}");
    assert!(computer_runtime::format::run(&state).contains("Limit reached"), "the model is told");
    // The session's other commands are refused forks only while the bomb's children live; once
    // the session ends they are gone and nothing is left in its group.
    manager.kill_owner("bomb").await;
    let after = run(&manager, spec(dir.path(), "bomb", "echo fine", Duration::from_secs(5))).await;
    assert!(after.output.text.contains("fine"), "{after:?}");
}

#[tokio::test]
async fn a_memory_hog_is_killed_at_the_memory_limit_with_a_clear_result() {
    let dir = tempfile::tempdir().unwrap();
    let manager = manager(Limits { max_memory_bytes: 64 << 20, ..Limits::default() });
    let hog = "python3 -c 'b = b\"x\" * (512 << 20); print(\"allocated\", len(b))'";
    let state = run(&manager, spec(dir.path(), "hog", hog, Duration::from_secs(30))).await;
    assert!(!state.output.text.contains("allocated"), "{}", state.output.text);
    let exit = state.exit.clone().expect("it ended");
    assert!(!exit.success, "{exit:?}");
    let note = state.limit.clone().expect("the result says the memory limit was reached");
    assert!(note.contains("memory limit (64 MiB)"), "{note}");
    // The session goes on: a small command still runs.
    let after = run(&manager, spec(dir.path(), "hog", "echo fine", Duration::from_secs(5))).await;
    assert!(after.output.text.contains("fine"));
}

#[tokio::test]
async fn what_leaves_its_process_group_dies_on_timeout_and_with_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let manager = manager(Limits::default());
    // Three levels: the shell, a setsid'd shell, and its sleep; the first two leave the group.
    let tree = "setsid sh -c 'sleep 300 & echo grandchild=$!; wait' & sleep 0.3; echo escaped=$!; sleep 100";
    let state = run(&manager, spec(dir.path(), "timed", tree, Duration::from_secs(1))).await;
    assert!(state.timed_out);
    let text = state.output.text.clone();
    let (escaped, grandchild) = (pid_after(&text, "escaped="), pid_after(&text, "grandchild="));
    assert!(gone_within(escaped, Duration::from_secs(1)).await, "the setsid'd shell outlived the timeout");
    assert!(gone_within(grandchild, Duration::from_secs(1)).await, "its child outlived the timeout");

    // A command that ends normally may leave a process behind (`server &`): it lives on with the
    // session, in the session's group, and dies when the session ends.
    let left = "setsid sleep 300 & echo left=$!";
    let state = run(&manager, spec(dir.path(), "ending", left, Duration::from_secs(5))).await;
    let left = pid_after(&state.output.text, "left=");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(alive(left), "a normal exit leaves what the command started on purpose");
    manager.kill_owner("ending").await;
    assert!(gone_within(left, Duration::from_secs(1)).await, "the session ended and it lived on");
}

#[tokio::test]
async fn a_crashed_processs_groups_are_swept_at_the_next_start() {
    let first = manager(Limits::default());
    // A group as a process that is gone would have left it, with a process still in it.
    let parent = first.limits().bases()[0].parent().unwrap().to_path_buf();
    let dead = parent.join("toolhost-999999999-1-0");
    std::fs::create_dir_all(&dead).unwrap();
    let mut orphan = std::process::Command::new("sleep").arg("300").spawn().unwrap();
    let pid = i32::try_from(orphan.id()).unwrap();
    std::fs::write(dead.join("cgroup.procs"), pid.to_string()).unwrap();
    let second = manager(Limits::default());
    assert!(second.swept_groups() >= 1, "nothing was swept");
    let start = Instant::now();
    while orphan.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < Duration::from_secs(2), "the crashed process's command outlived the sweep");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!dead.exists(), "the dead process's group is still there");
    // Live processes' groups are left alone: the first manager's still works.
    let dir = tempfile::tempdir().unwrap();
    let state = run(&first, spec(dir.path(), "still", "echo here", Duration::from_secs(5))).await;
    assert!(state.output.text.contains("here"));
}

#[tokio::test]
async fn a_command_filling_its_session_temp_folder_is_stopped_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let temp = dir.path().join("session-temp");
    let manager = ProcessManager::new(ProcessConfig {
        kill_grace: Duration::from_millis(200),
        max_temp_bytes: 32 << 20,
        ..ProcessConfig::default()
    });
    let mut fill = spec(
        dir.path(),
        "filler",
        "while true; do head -c 4M /dev/zero >> \"$TMPDIR/fill\"; sleep 0.02; done",
        Duration::from_secs(30),
    );
    fill.sandbox.temp_directory = Some(temp.clone());
    let started = Instant::now();
    let state = run(&manager, fill).await;
    assert!(started.elapsed() < Duration::from_secs(10), "it ran on past the cap");
    let note = state.limit.clone().expect("the result says why it stopped");
    assert!(note.contains("past its cap of 32 MiB"), "{note}");
    assert!(!state.exit.as_ref().is_some_and(|e| e.success), "{state:?}");
    let size = std::fs::metadata(temp.join("fill")).unwrap().len();
    assert!(size < 256 << 20, "the folder grew to {size} bytes");
}

#[tokio::test]
async fn a_command_filling_its_temp_folder_with_empty_files_is_stopped_too() {
    // Empty files take no blocks: past the entries that are measured, the folder counts as full,
    // or a command could make millions of them under a byte cap.
    let dir = tempfile::tempdir().unwrap();
    let temp = dir.path().join("session-temp");
    let manager = ProcessManager::new(ProcessConfig {
        kill_grace: Duration::from_millis(200),
        max_temp_bytes: 1 << 40,
        ..ProcessConfig::default()
    });
    let mut fill = spec(
        dir.path(),
        "many",
        "cd \"$TMPDIR\" && i=0; while true; do seq $i $((i + 4999)) | xargs touch; i=$((i + 5000)); done",
        Duration::from_secs(60),
    );
    fill.sandbox.temp_directory = Some(temp.clone());
    let state = run(&manager, fill).await;
    let note = state.limit.clone().expect("the result says why it stopped");
    assert!(note.contains("more than 100000 files"), "{note}");
    assert!(!state.timed_out, "stopped by the cap, not the timeout");
}
