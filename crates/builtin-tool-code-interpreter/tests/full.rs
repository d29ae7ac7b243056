//! The full engine with real interpreters (the machine's `python3` and `node`), started through
//! the computer runtime in a workspace-write sandbox and the session's control group, as the
//! server runs them: state across calls, outputs, and every bad input the issue names, with
//! another session answering meanwhile.
//!
//! These need `python3` and `node` on `PATH` and a control-group hierarchy this process may
//! write (root, as CI has).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use builtin_tool_code_interpreter::{CodeInterpreter, InterpreterSettings};
use computer_runtime::process::ProcessConfig;
use computer_runtime::{ComputerRuntime, LocalComputer, LocalConfig};
use sandbox::groups::Limits;
use serde_json::{Value, json};
use tool_core::sandbox::{CallSandbox, SandboxPolicy};
use tool_core::{CallContext, ErrorKind, ToolOutput, ToolRuntime};

struct Fixture {
    _dir: tempfile::TempDir,
    work: PathBuf,
    temps: PathBuf,
    computer: Arc<dyn ComputerRuntime>,
    runtime: CodeInterpreter,
}

fn fixture(limits: Limits, settings: InterpreterSettings) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let temps = dir.path().join("temps");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&temps).unwrap();
    let process = ProcessConfig {
        kill_grace: Duration::from_millis(300),
        limits,
        enforce_limits: true,
        ..ProcessConfig::default()
    };
    let computer: Arc<dyn ComputerRuntime> =
        Arc::new(LocalComputer::new(LocalConfig { process, ..LocalConfig::default() }));
    let runtime = CodeInterpreter::new(Some(computer.clone()), settings);
    Fixture { _dir: dir, work, temps, computer, runtime }
}

impl Fixture {
    fn context(&self, session: &str) -> CallContext {
        let temp = self.temps.join(session);
        std::fs::create_dir_all(&temp).unwrap();
        let sandbox = CallSandbox {
            policy: SandboxPolicy::workspace_write(),
            temp_directory: Some(temp),
            ..CallSandbox::default()
        };
        CallContext::new("call", session).with_working_directory(&self.work).with_sandbox(Arc::new(sandbox))
    }

    async fn run(&self, session: &str, code: &str, extra: Value) -> ToolOutput {
        let mut args = json!({"language": "python", "code": code, "engine": "full"});
        for (key, value) in extra.as_object().into_iter().flatten() {
            args[key] = value.clone();
        }
        self.runtime.execute("runCode", args, &self.context(session)).await
    }
}

fn state(output: &ToolOutput) -> &Value {
    output.state.as_ref().expect("a run has state")
}

fn python_fixture() -> Fixture {
    fixture(Limits { max_processes: 64, ..Limits::default() }, InterpreterSettings::default())
}

#[tokio::test]
async fn state_values_output_and_reset() {
    let f = python_fixture();
    std::fs::write(f.work.join("data.csv"), "a,b\n1,2\n3,4\n").unwrap();
    let first = f
        .run(
            "s1",
            "import csv\nrows = list(csv.DictReader(open('data.csv')))\nprint('rows:', len(rows))",
            json!({}),
        )
        .await;
    assert!(first.success, "{}", first.content);
    assert!(first.content.contains("rows: 2"), "{}", first.content);
    assert!(first.content.contains("full interpreter"), "the engine is named: {}", first.content);
    assert!(state(&first)["started_ms"].as_u64().is_some(), "the first run starts the interpreter");

    let second =
        f.run("s1", "total = sum(int(r['a']) + int(r['b']) for r in rows)\ntotal * 10", json!({})).await;
    assert!(second.success, "{}", second.content);
    assert_eq!(state(&second)["value"], "100");
    assert!(state(&second).get("started_ms").is_none(), "a warm run reuses the interpreter");

    // Tracebacks show the user's code only.
    let error = f.run("s1", "def f():\n    return 1 / 0\nf()", json!({})).await;
    assert!(!error.success);
    assert_eq!(error.error.as_ref().unwrap().kind, ErrorKind::Execution);
    let traceback = state(&error)["error"].as_str().unwrap();
    assert!(traceback.contains("ZeroDivisionError") && traceback.contains("<cell-3>"), "{traceback}");
    assert!(!traceback.contains("python.py") && !traceback.contains("def run("), "{traceback}");

    // A missing package says so.
    let missing = f.run("s1", "import surely_not_a_package_here", json!({})).await;
    assert!(state(&missing)["error"].as_str().unwrap().contains("ModuleNotFoundError"));

    let reset = f.runtime.execute("resetInterpreter", json!({}), &f.context("s1")).await;
    assert!(reset.content.contains("Python"), "{}", reset.content);
    let after = f.run("s1", "total", json!({})).await;
    assert!(state(&after)["error"].as_str().unwrap().contains("NameError"), "{}", after.content);
}

#[tokio::test]
async fn files_written_to_outputs_are_reported_and_readable() {
    let f = python_fixture();
    let code = "import os, struct, zlib\n\
        def png(w, h):\n    raw = b''.join(b'\\x00' + b'\\xff\\x00\\x00' * w for _ in range(h))\n    \
        def chunk(t, d):\n        return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d))\n    \
        return b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b'')\n\
        open(os.path.join(os.environ['OUTPUTS_DIR'], 'red.png'), 'wb').write(png(4, 4))\n\
        open(os.path.join(os.environ['OUTPUTS_DIR'], 'table.csv'), 'w').write('x\\n1\\n')";
    let out = f.run("s1", code, json!({})).await;
    assert!(out.success, "{}", out.content);
    let files = state(&out)["files"].as_array().unwrap().clone();
    assert_eq!(files.len(), 2, "{files:?}");
    let png = files.iter().find(|f| f["name"] == "red.png").unwrap();
    assert_eq!(png["mime"], "image/png");
    let bytes = std::fs::read(png["path"].as_str().unwrap()).unwrap();
    assert!(bytes.starts_with(b"\x89PNG"));
    assert!(out.content.contains("red.png") && out.content.contains("image/png"), "{}", out.content);
    // A second run that writes nothing reports nothing new; the listing has both.
    let again = f.run("s1", "1", json!({})).await;
    assert!(state(&again)["files"].as_array().unwrap().is_empty());
    let listed = f.runtime.execute("listOutputs", json!({}), &f.context("s1")).await;
    assert!(listed.content.contains("red.png") && listed.content.contains("table.csv"), "{}", listed.content);
}

#[tokio::test]
async fn a_loop_is_interrupted_and_the_state_survives_while_another_session_answers() {
    let f = python_fixture();
    assert!(f.run("a", "kept = 41", json!({})).await.success);
    let looping = f.run("a", "while True:\n    pass", json!({"timeoutSecs": 2}));
    let other = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let started = Instant::now();
        let out = f.run("b", "6 * 7", json!({})).await;
        (out, started.elapsed())
    };
    let (looped, (other, took)) = tokio::join!(looping, other);
    assert_eq!(state(&other)["value"], "42", "{}", other.content);
    assert!(took < Duration::from_secs(2), "another session waited {took:?}");
    assert_eq!(looped.error.as_ref().unwrap().kind, ErrorKind::Timeout, "{}", looped.content);
    assert!(state(&looped)["error"].as_str().unwrap().contains("KeyboardInterrupt"), "{}", looped.content);
    let kept = f.run("a", "kept + 1", json!({})).await;
    assert_eq!(state(&kept)["value"], "42", "the interrupted interpreter kept its state: {}", kept.content);
}

#[tokio::test]
async fn hostile_code_ends_its_call_clearly_and_the_interpreter_comes_back() {
    let f = python_fixture();
    // A memory hog: the address-space limit turns it into a MemoryError, state kept.
    let hog = f.run("s", "x = 5\nblob = bytearray(20 * 1024 ** 3)", json!({})).await;
    assert!(state(&hog)["error"].as_str().unwrap().contains("MemoryError"), "{}", hog.content);
    assert_eq!(state(&f.run("s", "x", json!({})).await)["value"], "5");

    // A fork bomb stops at the session's process limit.
    let bomb = "import os, time\npids = []\ntry:\n    for _ in range(10000):\n        pid = os.fork()\n        \
                if pid == 0:\n            time.sleep(20)\n            os._exit(0)\n        pids.append(pid)\n\
                except OSError as e:\n    print('refused after', len(pids))\nfor p in pids:\n    os.kill(p, 9)\n    os.waitpid(p, 0)\nlen(pids)";
    let out = f.run("s", bomb, json!({"timeoutSecs": 30})).await;
    assert!(out.content.contains("refused after"), "{}", out.content);
    assert!(state(&out)["value"].as_str().unwrap().parse::<u64>().unwrap() < 64, "{}", out.content);

    // A gigabyte of output: head and tail, the rest in a bounded spill file.
    let flood = f
        .run(
            "s",
            "import sys\nfor _ in range(1024):\n    sys.stdout.write('x' * 1048575 + '\\n')\nprint('end')",
            json!({"timeoutSecs": 120}),
        )
        .await;
    assert!(flood.success, "{}", &flood.content[..flood.content.len().min(500)]);
    assert!(flood.content.len() < 40_000, "{} characters came back", flood.content.len());
    assert!(state(&flood)["dropped"].as_u64().unwrap() > 1_000_000_000);
    let spill = state(&flood)["spill"].as_str().unwrap().to_owned();
    assert!(std::fs::metadata(&spill).unwrap().len() <= 64 * 1024 * 1024);
    assert!(flood.content.contains("end"), "the tail is kept");

    // A write outside the writable folders.
    let outside = f.run("s", "open('/usr/toolhost-test-file', 'w').write('x')", json!({})).await;
    let error = state(&outside)["error"].as_str().unwrap();
    assert!(error.contains("PermissionError") || error.contains("Read-only file system"), "{error}");
    assert!(!Path::new("/usr/toolhost-test-file").exists());

    // The network is off.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let net = f
        .run(
            "s",
            &format!("import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)"),
            json!({}),
        )
        .await;
    let error = state(&net)["error"].as_str().unwrap();
    assert!(error.contains("PermissionError") || error.contains("Operation not permitted"), "{error}");

    // A crash: the call says so, state is lost, the next call starts a new interpreter.
    let crash = f.run("s", "import os\nos.kill(os.getpid(), 11)", json!({})).await;
    assert!(!crash.success);
    assert_eq!(state(&crash)["state_lost"], true, "{}", crash.content);
    assert!(
        crash.content.contains("signal 11") || crash.content.contains("segmentation"),
        "{}",
        crash.content
    );
    let fresh = f.run("s", "x", json!({})).await;
    assert!(state(&fresh)["started_ms"].as_u64().is_some());
    assert!(state(&fresh)["error"].as_str().unwrap().contains("NameError"));
}

#[tokio::test]
async fn a_session_end_stops_its_interpreter() {
    let f = python_fixture();
    let out = f.run("s", "import os\nos.getpid()", json!({})).await;
    let pid: i32 = state(&out)["value"].as_str().unwrap().parse().unwrap();
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    f.computer.end_owner("s").await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let gone = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
            stat.rsplit(')').next().and_then(|r| r.split_whitespace().next()) == Some("Z")
        })
    };
    while !gone() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone(), "the interpreter outlived its session");
    let next = f.run("s", "1 + 1", json!({})).await;
    assert_eq!(state(&next)["value"], "2", "{}", next.content);
    assert!(state(&next)["started_ms"].as_u64().is_some());
    assert!(state(&next)["note"].as_str().unwrap().contains("had stopped"), "{}", next.content);
}

#[tokio::test]
async fn javascript_keeps_its_state_too() {
    let f = python_fixture();
    let context = f.context("js");
    let first = f
        .runtime
        .execute(
            "runCode",
            json!({"language": "javascript", "code": "const xs = [1, 2, 3]; console.log('n', xs.length)"}),
            &context,
        )
        .await;
    assert!(first.success, "{}", first.content);
    assert!(first.content.contains("n 3"), "{}", first.content);
    let second = f
        .runtime
        .execute("runCode", json!({"language": "javascript", "code": "xs.map(x => x * 2)"}), &context)
        .await;
    assert_eq!(state(&second)["value"], "[ 2, 4, 6 ]", "{}", second.content);
    let spin = f
        .runtime
        .execute(
            "runCode",
            json!({"language": "javascript", "code": "while (true) {}", "timeoutSecs": 1}),
            &context,
        )
        .await;
    assert!(!spin.success, "{}", spin.content);
    assert!(spin.content.contains("timed out") || spin.content.contains("interrupted"), "{}", spin.content);
    assert_eq!(state(&spin)["state_lost"], false, "{}", spin.content);
    let thrown = f
        .runtime
        .execute("runCode", json!({"language": "javascript", "code": "missing + 1"}), &context)
        .await;
    assert!(thrown.content.contains("ReferenceError: missing is not defined"), "{}", thrown.content);
    let after =
        f.runtime.execute("runCode", json!({"language": "javascript", "code": "xs.length"}), &context).await;
    assert_eq!(state(&after)["value"], "3", "{}", after.content);
}

#[tokio::test]
async fn an_interpreter_never_outlives_its_sandbox_or_answers_for_a_run_given_up_on() {
    let f = python_fixture();
    let first = f.run("s", "x = 1", json!({})).await;
    assert!(first.success, "{}", first.content);
    // The session's sandbox tightens: the next run gets a new interpreter in the new sandbox.
    let mut context = f.context("s");
    let mut tighter = (*context.sandbox).clone();
    tighter.policy = SandboxPolicy::read_only();
    context.sandbox = Arc::new(tighter);
    let args = json!({"language": "python", "code": "open('made-here', 'w')", "engine": "full"});
    let out = f.runtime.execute("runCode", args, &context).await;
    assert!(state(&out)["note"].as_str().unwrap_or("").contains("sandbox"), "{}", out.content);
    assert!(
        state(&out)["error"].as_str().unwrap_or("").contains("Error"),
        "written in a read-only sandbox: {}",
        out.content
    );
    assert!(!f.work.join("made-here").exists());

    // A run whose call is dropped mid-way (the pipeline gave up on it) leaves no reply behind for
    // the next run to take as its own.
    let abandoned = f.run("t", "import time\ntime.sleep(3)\n'stale'", json!({}));
    assert!(tokio::time::timeout(Duration::from_millis(500), abandoned).await.is_err());
    let next = f.run("t", "'fresh'", json!({})).await;
    assert_eq!(state(&next)["value"], "'fresh'", "{}", next.content);
    assert!(state(&next)["note"].as_str().unwrap_or("").contains("given up on"), "{}", next.content);
}
