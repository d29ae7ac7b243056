//! What the sandbox adds to starting a command: `true` and `ls` under each policy against no
//! sandbox at all, side by side in one run. Each sample prepares the sandbox (paths resolved,
//! Landlock ruleset and seccomp filters built) and runs the command to its exit, as
//! `computer-runtime` does for every command.
//!
//! `cargo bench -p sandbox --bench overhead [-- --samples N]`

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sandbox::{Layout, Sandbox, SandboxSettings};
use tool_core::sandbox::{NetworkAccess, ReadAccess, SandboxPolicy};

fn main() {
    let samples = std::env::args()
        .skip_while(|arg| arg != "--samples")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(300usize);
    let dir = tempfile::tempdir().unwrap();
    let work = std::fs::canonicalize(dir.path()).unwrap();
    for i in 0..20 {
        std::fs::write(work.join(format!("file-{i}.txt")), "x").unwrap();
    }
    let layout = Layout { working_directory: work.clone(), temp_directory: None, output_files: vec![] };
    let sandbox = Sandbox::new(SandboxSettings::default());
    println!("kernel: {}; {samples} samples each; times per command, to its exit", sandbox.support());

    let policies: [(&str, Option<SandboxPolicy>); 5] = [
        ("no sandbox", None),
        ("off", Some(SandboxPolicy::off())),
        ("read-only", Some(SandboxPolicy::read_only())),
        ("workspace-write", Some(SandboxPolicy::workspace_write())),
        (
            "workspace-write, confined, net on",
            Some(
                SandboxPolicy::workspace_write()
                    .with_reads(ReadAccess::Confined)
                    .with_network(NetworkAccess::On),
            ),
        ),
    ];
    println!("| command | policy | p50 ms | p99 ms | mean ms | added p50 ms |");
    println!("|---|---|---|---|---|---|");
    for (label, program, args) in [("true", "/bin/true", &[][..]), ("ls", "/bin/ls", &["-la"][..])] {
        let mut baseline = None;
        for (name, policy) in &policies {
            // Warm up caches (page cache, dentries) before measuring.
            for _ in 0..10 {
                run(&sandbox, policy.as_ref(), &layout, program, args, &work);
            }
            let mut times: Vec<Duration> =
                (0..samples).map(|_| run(&sandbox, policy.as_ref(), &layout, program, args, &work)).collect();
            times.sort();
            let p50 = ms(times[times.len() / 2]);
            let p99 = ms(times[(times.len() * 99 / 100).min(times.len() - 1)]);
            let mean = ms(times.iter().sum::<Duration>() / u32::try_from(times.len()).unwrap());
            let base = *baseline.get_or_insert(p50);
            println!("| `{label}` | {name} | {p50:.3} | {p99:.3} | {mean:.3} | {:+.3} |", p50 - base);
        }
    }
}

fn run(
    sandbox: &Sandbox,
    policy: Option<&SandboxPolicy>,
    layout: &Layout,
    program: &str,
    args: &[&str],
    cwd: &Path,
) -> Duration {
    let started = Instant::now();
    let mut command = Command::new(program);
    command.args(args).current_dir(cwd).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    if let Some(policy) = policy {
        sandbox.prepare(policy, layout).unwrap().install(&mut command);
    }
    let status = command.status().unwrap();
    assert!(status.success());
    started.elapsed()
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
