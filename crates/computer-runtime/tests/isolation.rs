//! Commands of one session cannot see, poll or kill another's; they start with a clean
//! environment in their session's own temp folder and sandbox.

use std::path::{Path, PathBuf};
use std::time::Duration;

use computer_runtime::env::EnvPolicy;
use computer_runtime::format;
use computer_runtime::process::{CommandSpec, ProcessConfig, ProcessError, ProcessManager, RunState};
use tokio_util::sync::CancellationToken;
use tool_core::sandbox::{CallSandbox, SandboxPolicy};

fn manager() -> ProcessManager {
    ProcessManager::new(ProcessConfig { kill_grace: Duration::from_millis(200), ..ProcessConfig::default() })
}

struct Session {
    id: &'static str,
    work: PathBuf,
    temp: PathBuf,
}

impl Session {
    fn new(root: &Path, id: &'static str) -> Self {
        let work = root.join(id).join("work");
        std::fs::create_dir_all(&work).unwrap();
        Self { id, work, temp: root.join(id).join("tmp") }
    }

    fn spec(&self, command: &str) -> CommandSpec {
        CommandSpec {
            command: command.to_owned(),
            cwd: self.work.clone(),
            env: Vec::new(),
            timeout: Duration::from_secs(20),
            background: false,
            owner: self.id.to_owned(),
            sandbox: CallSandbox {
                policy: SandboxPolicy::workspace_write(),
                temp_directory: Some(self.temp.clone()),
                ..CallSandbox::default()
            },
            live: None,
        }
    }

    async fn run(&self, m: &ProcessManager, command: &str) -> RunState {
        m.run(self.spec(command), &CancellationToken::new()).await.unwrap()
    }

    async fn start(&self, m: &ProcessManager, command: &str) -> String {
        self.start_with_output(m, command).await.0
    }

    /// Starts a background job: its id and the output it printed so far.
    async fn start_with_output(&self, m: &ProcessManager, command: &str) -> (String, String) {
        let spec = CommandSpec { background: true, ..self.spec(command) };
        let state = m.run(spec, &CancellationToken::new()).await.unwrap();
        (state.command_id.unwrap(), state.output.text)
    }
}

fn root() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    (dir, root)
}

#[tokio::test]
async fn jobs_belong_to_their_session() {
    let (_dir, root) = root();
    let m = manager();
    let (a, b) = (Session::new(&root, "a"), Session::new(&root, "b"));
    let (job_a, first_output) = a.start_with_output(&m, "echo from-a; sleep 30").await;
    let job_b = b.start(&m, "sleep 30").await;

    assert!(job_a.starts_with("cmd-") && job_a.len() == 4 + 24, "{job_a}");
    assert!(job_a[4..].chars().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(job_a, job_b);

    // B cannot poll or kill A's job, and is not told that it exists.
    for error in [m.output(b.id, &job_a).await.unwrap_err(), m.kill(b.id, &job_a).await.unwrap_err()] {
        assert!(matches!(error, ProcessError::NoSuchCommand { .. }));
        let message = error.to_string();
        let listed = message.split("are: ").nth(1).unwrap_or_default();
        assert!(listed.contains(&job_b) && !listed.contains(&job_a), "{message}");
    }
    // A's job is untouched by B's tries.
    // The output so far came with the start; polls bring only what is new.
    let mut seen = first_output;
    let mut polled = m.output(a.id, &job_a).await.unwrap();
    for _ in 0..200 {
        seen.push_str(&polled.new_output.text);
        if seen.contains("from-a") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        polled = m.output(a.id, &job_a).await.unwrap();
    }
    assert!(polled.running && seen.contains("from-a"), "{polled:?}");

    // Ending A kills A's jobs only, and deletes their output.
    let spill = polled.output_path.clone();
    assert!(spill.starts_with(&a.temp), "{spill:?} is in A's temp folder");
    assert_eq!(m.kill_owner(a.id).await, 1);
    assert!(!spill.exists());
    assert!(m.output(a.id, &job_a).await.is_err());
    assert!(m.output(b.id, &job_b).await.unwrap().running);
    m.shutdown().await;
}

#[tokio::test]
async fn commands_get_a_clean_environment_and_their_own_temp_folder() {
    let (_dir, root) = root();
    let m = manager();
    let a = Session::new(&root, "a");
    let state = a.run(&m, "env; echo tmp=$TMPDIR; mktemp").await;
    assert_eq!(state.exit.as_ref().map(|e| e.success), Some(true), "{}", state.output.text);
    let policy = EnvPolicy::default();
    for line in state.output.text.lines().filter(|line| line.contains('=') && !line.starts_with("tmp=")) {
        let (name, value) = line.split_once('=').unwrap();
        // bash itself exports PWD, SHLVL and `_`; TMPDIR is the session's.
        let from_bash = ["PWD", "SHLVL", "_", "OLDPWD", "TMPDIR"].contains(&name);
        assert!(from_bash || policy.allows(name, value), "`{name}` leaked into the command's environment");
    }
    assert!(state.output.text.contains(&format!("tmp={}", a.temp.display())));
    let made = state.output.text.lines().last().unwrap();
    assert!(Path::new(made).starts_with(&a.temp), "mktemp made {made}");
}

#[tokio::test]
async fn a_job_that_outlives_its_lifetime_is_killed() {
    let (_dir, root) = root();
    let m = ProcessManager::new(ProcessConfig {
        max_job_lifetime: Duration::from_millis(300),
        kill_grace: Duration::from_millis(100),
        ..ProcessConfig::default()
    });
    let a = Session::new(&root, "a");
    let job = a.start(&m, "sleep 30").await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let state = m.output(a.id, &job).await.unwrap();
    assert!(!state.running);
    assert_eq!(state.exit.and_then(|e| e.signal), Some(libc::SIGTERM));
}

#[tokio::test]
async fn a_denied_write_says_what_the_sandbox_allows() {
    let (_dir, root) = root();
    let m = manager();
    let a = Session::new(&root, "a");
    let outside = root.join("outside.txt");
    let state = a.run(&m, &format!("echo x > {}", outside.display())).await;
    assert!(!outside.exists());
    let report = state.sandbox.as_ref().expect("the command ran in the sandbox");
    assert!(report.filesystem && report.syscalls && report.missing.is_empty(), "{report:?}");
    let text = format::run(&state);
    assert!(text.contains("denied by the sandbox (workspace-write sandbox)"), "{text}");
    assert!(text.contains("escalate: true"), "{text}");

    // Inside, nothing to say.
    let state = a.run(&m, "echo x > inside.txt").await;
    assert!(!format::run(&state).contains("sandbox"));
    // Off: no report, the write lands.
    let mut spec = a.spec(&format!("echo x > {}", outside.display()));
    spec.sandbox.policy = SandboxPolicy::off();
    let state = m.run(spec, &CancellationToken::new()).await.unwrap();
    assert!(state.sandbox.is_none() && outside.exists());
}

#[tokio::test]
async fn a_working_directory_swapped_for_a_link_is_refused() {
    let (_dir, root) = root();
    let m = manager();
    let a = Session::new(&root, "a");
    let outside = root.join("someone-else");
    std::fs::create_dir_all(&outside).unwrap();
    // The session's folder is replaced by a link to another folder after it opened.
    std::fs::rename(&a.work, root.join("a/work-old")).unwrap();
    std::os::unix::fs::symlink(&outside, &a.work).unwrap();
    let error = m.run(a.spec("echo x > planted.txt"), &CancellationToken::new()).await.unwrap_err();
    assert!(matches!(error, ProcessError::Sandbox(sandbox::SandboxError::Moved { .. })), "{error}");
    assert!(error.to_string().contains("was moved or replaced"), "{error}");
    assert!(!outside.join("planted.txt").exists());
}

#[tokio::test]
async fn fifos_sockets_and_devices_are_refused_without_being_opened() {
    use computer_runtime::files::ReadRequest;
    use computer_runtime::{ComputerError, ComputerRuntime, EditRequest, LocalComputer};
    let (_dir, root) = root();
    let fifo = root.join("pipe");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let computer = LocalComputer::default();
    // The folder is the session's; /dev/zero is outside it, opened exactly (a person's machine).
    let files =
        tool_core::FileBoundary { roots: vec![tool_core::FileRoot::writable(&root)], ..Default::default() };
    for (path, what) in [(fifo.clone(), "FIFO"), (PathBuf::from("/dev/zero"), "character device")] {
        // Opening a FIFO for reading would block until a writer comes: this must answer at once.
        let read = tokio::time::timeout(
            Duration::from_secs(5),
            computer.read(&files, ReadRequest { path: path.clone(), offset: None, limit: None }),
        )
        .await
        .expect("a read of a FIFO must not block");
        let error = read.unwrap_err();
        assert!(matches!(error, ComputerError::NotRegular { .. }), "{error}");
        assert_eq!(
            error.to_string(),
            format!("{} is a {what}, not a regular file; it was not opened", path.display())
        );
        let edit = EditRequest {
            path: path.clone(),
            edits: vec![computer_runtime::edit::EditSpec {
                old_text: "a".into(),
                new_text: "b".into(),
                replace_all: false,
            }],
        };
        let error = tokio::time::timeout(Duration::from_secs(5), computer.edit(&files, edit))
            .await
            .unwrap()
            .unwrap_err();
        assert!(matches!(error, ComputerError::NotRegular { .. }), "{error}");
    }
}

#[tokio::test]
async fn a_huge_output_keeps_its_head_and_tail_within_the_cap() {
    use std::os::unix::fs::MetadataExt;
    let (_dir, root) = root();
    let m =
        ProcessManager::new(ProcessConfig { max_output_bytes: 4 * 1024 * 1024, ..ProcessConfig::default() });
    let a = Session::new(&root, "a");
    // 40 MiB, then a last line: far past the 4 MiB cap, paced so the trimming keeps up.
    let command = "echo FIRST; for i in $(seq 1 40); do head -c 1048576 /dev/zero | tr '\\0' x; echo; sleep 0.02; done; echo LAST";
    let state = a.run(&m, command).await;
    assert_eq!(state.exit.as_ref().map(|e| e.success), Some(true), "{}", state.output.text);
    let meta = std::fs::metadata(&state.output_path).unwrap();
    assert!(meta.len() > 40 * 1024 * 1024, "the file keeps its length ({} bytes)", meta.len());
    let on_disk = meta.blocks() * 512;
    assert!(on_disk <= 6 * 1024 * 1024, "{on_disk} bytes on disk for a 4 MiB cap");
    assert!(state.dropped_bytes > 30 * 1024 * 1024, "{}", state.dropped_bytes);
    assert!(state.output.text.starts_with("FIRST\n"), "the head is kept");
    assert!(state.output.text.trim_end().ends_with("LAST"), "the tail is kept");
    let text = computer_runtime::format::run(&state);
    assert!(
        text.contains("bytes from its middle were dropped"),
        "{}",
        &text[text.len().saturating_sub(400)..]
    );
}

#[tokio::test]
async fn a_sparse_output_a_terabyte_long_is_captured_at_once() {
    let (_dir, root) = root();
    let m = manager();
    let a = Session::new(&root, "a");
    // The command seeks its output a terabyte ahead and writes a last word there.
    let command = "echo first; python3 -c 'import os; os.lseek(1, 1 << 40, 1); os.write(1, b\"last\\n\")'";
    let state =
        tokio::time::timeout(Duration::from_secs(60), a.run(&m, command)).await.expect("captured in time");
    assert_eq!(state.exit.as_ref().map(|e| e.success), Some(true), "{}", state.output.text);
    assert!(state.output.total_bytes > 1 << 40);
    assert!(
        state.output.text.starts_with("first\n") && state.output.text.trim_end().ends_with("last"),
        "{:?}",
        &state.output.text[..40]
    );
}

#[tokio::test]
async fn a_session_holds_a_bounded_number_of_background_jobs() {
    let (_dir, root) = root();
    let m = ProcessManager::new(ProcessConfig { max_jobs_per_owner: 2, ..ProcessConfig::default() });
    let (a, b) = (Session::new(&root, "a"), Session::new(&root, "b"));
    let first = a.start(&m, "sleep 30").await;
    a.start(&m, "sleep 30").await;
    let spec = CommandSpec { background: true, ..a.spec("sleep 30") };
    let error = m.run(spec, &CancellationToken::new()).await.unwrap_err();
    assert!(matches!(error, ProcessError::TooManyJobs { limit: 2 }), "{error}");
    // Another session has its own allowance; killing a job frees a place.
    b.start(&m, "sleep 30").await;
    m.kill(a.id, &first).await.unwrap();
    a.start(&m, "sleep 30").await;
    m.shutdown().await;
}

#[tokio::test]
async fn a_tenants_sessions_share_a_bounded_number_of_background_jobs() {
    let (_dir, root) = root();
    let m = ProcessManager::new(ProcessConfig {
        max_jobs_per_owner: 2,
        max_jobs_per_tenant: 3,
        ..ProcessConfig::default()
    });
    let (a, b, c) = (Session::new(&root, "a"), Session::new(&root, "b"), Session::new(&root, "c"));
    let of = |session: &Session, tenant: &str| {
        let mut spec = CommandSpec { background: true, ..session.spec("sleep 30") };
        spec.sandbox.tenant = Some(tenant.to_owned());
        spec
    };
    let go = CancellationToken::new();
    m.run(of(&a, "acme"), &go).await.unwrap();
    m.run(of(&a, "acme"), &go).await.unwrap();
    m.run(of(&b, "acme"), &go).await.unwrap();
    // Session b is under its own limit, but acme's sessions hold three together.
    let error = m.run(of(&b, "acme"), &go).await.unwrap_err();
    assert!(matches!(error, ProcessError::TooManyTenantJobs { limit: 3 }), "{error}");
    assert!(error.to_string().contains("this tenant's sessions hold 3"), "{error}");
    // Another tenant has its own allowance.
    m.run(of(&c, "globex"), &go).await.unwrap();
    m.shutdown().await;
}

/// Started all at once on several threads, background commands still take no more places than
/// the budget holds: the count and the new job are one step.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn background_commands_started_at_once_stay_within_the_budget() {
    let (_dir, root) = root();
    let m = std::sync::Arc::new(ProcessManager::new(ProcessConfig {
        max_jobs_per_owner: 3,
        max_jobs_per_tenant: 3,
        ..ProcessConfig::default()
    }));
    let a = Session::new(&root, "a");
    let starts: Vec<_> = (0..24)
        .map(|_| {
            let (m, mut spec) = (m.clone(), CommandSpec { background: true, ..a.spec("sleep 30") });
            spec.sandbox.tenant = Some("acme".to_owned());
            tokio::spawn(async move { m.run(spec, &CancellationToken::new()).await })
        })
        .collect();
    let mut started = 0;
    for start in starts {
        match start.await.unwrap() {
            Ok(_) => started += 1,
            Err(ProcessError::TooManyJobs { .. } | ProcessError::TooManyTenantJobs { .. }) => {}
            Err(other) => panic!("{other}"),
        }
    }
    assert_eq!(started, 3, "exactly the budget's places were taken");
    m.shutdown().await;
}
