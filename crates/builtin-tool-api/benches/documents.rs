//! What mounting an OpenAPI service costs, on the largest real document at hand: GitHub's REST
//! description (`@octokit/openapi`, OpenAPI 3.0, 13 MB, 1 000+ operations) read into operations
//! (YAML/JSON parse, `$ref` resolution, one input schema per operation), and the same through
//! `mount` (the file read, names, specs). Then what redaction costs every call: a 64 KiB output
//! with and without ten credentials held. Peak RSS is the process's VmHWM after the reads.
//!
//! `cargo bench -p builtin-tool-api --bench documents [-- --rounds N]` (needs the interop tools:
//! `bash .ci/interop-tools.sh`).

use std::time::{Duration, Instant};

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
}

fn peak_rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| status.lines().find(|l| l.starts_with("VmHWM:")).map(|l| l[6..].trim().to_owned()))
        .unwrap_or_else(|| "?".into())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let rounds = std::env::args()
        .skip_while(|arg| arg != "--rounds")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(7usize);
    let file =
        test_support::interop_dir().join("node/node_modules/@octokit/openapi/generated/api.github.com.json");
    let text = std::fs::read_to_string(&file).expect("the GitHub description (bash .ci/interop-tools.sh)");
    let mut parse = Vec::new();
    let mut operations = 0;
    for _ in 0..rounds {
        let started = Instant::now();
        let document = builtin_tool_api::document::parse(&text).unwrap();
        parse.push(started.elapsed());
        operations = document.operations.len();
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&file, dir.path().join("github.json")).unwrap();
    let apis = builtin_tool_api::mount::parse_config("[apis.github]\nopenapi = \"github.json\"\n").unwrap();
    let options =
        builtin_tool_api::mount::MountOptions { credentials: None, base_dir: Some(dir.path().to_owned()) };
    let mut mount = Vec::new();
    for _ in 0..rounds {
        let started = Instant::now();
        let (mounted, _) = builtin_tool_api::mount::mount(&apis, &options).await;
        mount.push(started.elapsed());
        assert_eq!(mounted[0].manifest.apis.len(), operations);
    }
    println!("document: {} ({} bytes, {operations} operations), {rounds} rounds", file.display(), text.len());
    println!("| step | median | min |");
    println!("|---|---:|---:|");
    println!(
        "| parse into operations | {} | {} |",
        ms(median(parse.clone())),
        ms(*parse.iter().min().unwrap())
    );
    println!(
        "| mount (read, parse, specs) | {} | {} |",
        ms(median(mount.clone())),
        ms(*mount.iter().min().unwrap())
    );
    println!("peak RSS: {}", peak_rss());

    // Redaction of one call's output: 64 KiB of JSON text (one line holding a credential, in the
    // last case), with no credential held and with ten (each in its dozen forms).
    let mut output: String =
        (0..2000).map(|i| format!("{{\"id\": {i}, \"name\": \"item number {i}\"}},\n")).collect();
    output.truncate(64 * 1024);
    let mut leaking = output.clone();
    leaking.replace_range(32_000..32_000, "\"token\": \"secret-value-0007-abcdefgh\",\n");
    let none = tool_core::Redactor::default();
    let held = tool_core::Redactor::new(
        (0..10).map(|i| (format!("cred{i}"), format!("secret-value-{i:04}-abcdefgh"))),
    );
    for (label, redactor, text) in [
        ("no credentials held", &none, &output),
        ("ten held, none in the text", &held, &output),
        ("ten held, one in the text", &held, &leaking),
    ] {
        let mut samples = Vec::new();
        for _ in 0..(rounds * 200) {
            let started = Instant::now();
            std::hint::black_box(redactor.redact(std::hint::black_box(text)));
            samples.push(started.elapsed());
        }
        println!(
            "| redact 64 KiB, {label} | {:.1} µs | {:.1} µs |",
            median(samples.clone()).as_secs_f64() * 1e6,
            samples.iter().min().unwrap().as_secs_f64() * 1e6
        );
    }
}
