//! Benchmarks for `computer_runtime::search::grep` (against the `rg` binary) and for
//! `computer_runtime::files::read` on a line range of a ~100 MB file.
//!
//! A plain program (no harness) that prints a Markdown report to stdout:
//!
//! ```text
//! cargo bench -p computer-runtime --bench files            # both parts
//! cargo bench -p computer-runtime --bench files -- grep    # grep vs ripgrep only
//! cargo bench -p computer-runtime --bench files -- read    # line-range read only
//! ```
//!
//! The grep tree is `TOOLHOST_BENCH_TREE`, else `$CARGO_HOME/registry/src`, else
//! `$HOME/.cargo/registry/src`. When both parts run, the read part runs first so that the peak
//! memory it reports is not raised by grep's result vectors.

use std::fs::File;
use std::hint::black_box;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use computer_runtime::beneath::Opener;
use computer_runtime::files::{self, ReadLimits, ReadRequest};
use computer_runtime::search::{self, GrepRequest, WalkOptions};

const RUNS: usize = 5;

fn main() {
    // cargo passes `--bench`; ignore it and any other flag.
    let part = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let (run_grep, run_read) = match part.as_deref() {
        None => (true, true),
        Some("grep") => (true, false),
        Some("read") => (false, true),
        Some(other) => {
            eprintln!("unknown part {other:?}: expected `grep` or `read`");
            std::process::exit(2);
        }
    };
    println!("# computer-runtime benchmarks\n");
    println!(
        "- available parallelism: {}",
        std::thread::available_parallelism().map_or_else(|_| "unknown".to_owned(), |n| n.to_string())
    );
    println!("- runs per measurement: {RUNS} (after one warm-up for grep)\n");
    if run_read {
        read_bench();
    }
    if run_grep {
        grep_bench();
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers

fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

fn min(times: &[Duration]) -> Duration {
    times.iter().copied().min().unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// A `Vm*` field of /proc/self/status, in bytes.
fn proc_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))?;
    let kib: u64 = line[field.len() + 1..].trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

fn show_mem(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "n/a".to_owned(), mib)
}

// ---------------------------------------------------------------------------------------------
// Part b: line-range reads of a ~100 MB file

const LINES: u64 = 1_000_000;

fn read_bench() {
    println!("## files::read: line ranges of a ~100 MB file\n");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("big.txt");
    let generate = Instant::now();
    {
        // Streamed through a small buffer so generating the file does not raise our peak memory.
        let mut out = BufWriter::with_capacity(8 * 1024, File::create(&path).expect("create big file"));
        for n in 1..=LINES {
            // 100 bytes per line, newline included.
            writeln!(out, "line {n:09} lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incid")
                .expect("write big file");
        }
        out.flush().expect("flush big file");
    }
    let generated = generate.elapsed();
    let size = std::fs::metadata(&path).expect("stat big file").len();
    println!("- file: {LINES} lines, {size} bytes ({}), generated in {}", mib(size), ms(generated));

    let hwm_before = proc_status_kib("VmHWM");
    let rss_before = proc_status_kib("VmRSS");

    let cases: [(&str, u64); 3] =
        [("first 100 lines", 1), ("100 lines in the middle", 500_000), ("last 100 lines", LINES - 99)];
    let mut rows = Vec::new();
    let opener = Opener::rooted(path.parent().expect("the big file has a folder"));
    for (label, offset) in cases {
        let request = ReadRequest { path: path.clone(), offset: Some(offset), limit: Some(100) };
        let mut times = Vec::with_capacity(RUNS);
        let mut last = None;
        for _ in 0..RUNS {
            let start = Instant::now();
            let state = files::read(&opener, black_box(&request), ReadLimits::default()).expect("read range");
            times.push(start.elapsed());
            last = Some(black_box(state));
        }
        let state = last.expect("at least one run");
        // Check the range really is what was asked for.
        assert_eq!(
            (state.start_line, state.end_line, state.total_lines),
            (offset, offset + 99, LINES),
            "{label}"
        );
        assert_eq!(state.content.lines().count(), 100, "{label}");
        assert!(state.content.starts_with(&format!("line {offset:09} ")), "{label}");
        rows.push((label, offset, median(&times), min(&times), state.content.len()));
    }
    let hwm_after = proc_status_kib("VmHWM");
    let rss_after = proc_status_kib("VmRSS");

    println!();
    println!("| range | offset | median | min | bytes returned |");
    println!("|---|---:|---:|---:|---:|");
    for (label, offset, med, lo, bytes) in rows {
        println!("| {label} | {offset} | {} | {} | {bytes} |", ms(med), ms(lo));
    }
    println!();
    println!("| memory | before reads | after reads |");
    println!("|---|---:|---:|");
    println!("| VmHWM (peak RSS so far) | {} | {} |", show_mem(hwm_before), show_mem(hwm_after));
    println!("| VmRSS | {} | {} |", show_mem(rss_before), show_mem(rss_after));
    println!();
    if let (Some(before), Some(after)) = (hwm_before, hwm_after) {
        println!(
            "Peak RSS after the reads is {} ({:.2}% of the {} file); the reads raised it by {}.\n",
            mib(after),
            after as f64 * 100.0 / size as f64,
            mib(size),
            mib(after.saturating_sub(before)),
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Part a: grep vs ripgrep

fn bench_tree() -> PathBuf {
    if let Some(tree) = std::env::var_os("TOOLHOST_BENCH_TREE") {
        return tree.into();
    }
    if let Some(cargo_home) = std::env::var_os("CARGO_HOME") {
        let tree = Path::new(&cargo_home).join("registry/src");
        if tree.is_dir() {
            return tree;
        }
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    Path::new(&home).join(".cargo/registry/src")
}

/// Every regular file under `root` (no symlinks followed, nothing skipped): (files, bytes).
fn tree_size(root: &Path) -> (u64, u64) {
    let (mut files, mut bytes) = (0, 0);
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let Ok(file_type) = entry.file_type() else { continue };
            if file_type.is_dir() {
                stack.push(entry.path());
            } else if file_type.is_file() {
                files += 1;
                bytes += entry.metadata().map_or(0, |m| m.len());
            }
        }
    }
    (files, bytes)
}

fn rg_available() -> Option<String> {
    let output = Command::new("rg").arg("--version").stdin(Stdio::null()).output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).lines().next().unwrap_or("rg").to_owned())
}

/// Runs `rg` and counts its output lines (one per matching line with `-n` and no context).
fn run_rg(pattern: &str, tree: &Path, no_require_git: bool) -> (Duration, u64) {
    let start = Instant::now();
    let mut command = Command::new("rg");
    command.args(["--no-config", "-n", "--max-columns", "500"]);
    if no_require_git {
        command.arg("--no-require-git");
    }
    let mut child = command
        .arg("-e")
        .arg(pattern)
        .arg(tree)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn rg");
    let mut stdout = child.stdout.take().expect("rg stdout");
    let mut buf = vec![0u8; 256 * 1024];
    let mut lines = 0u64;
    loop {
        match stdout.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => lines += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("reading rg output: {e}"),
        }
    }
    let status = child.wait().expect("wait for rg");
    let elapsed = start.elapsed();
    // Exit 1 means no match; 2 means an error (a partial result is still counted).
    assert!(status.code().is_some_and(|c| c <= 2), "rg failed: {status}");
    (elapsed, lines)
}

struct Ours {
    matches: usize,
    files_searched: usize,
    files_matched: usize,
}

fn run_ours(pattern: &str, tree: &Path) -> (Duration, Ours) {
    let request = GrepRequest {
        pattern: pattern.to_owned(),
        root: tree.to_path_buf(),
        glob: None,
        case_insensitive: false,
        fixed_strings: false,
        walk: WalkOptions::default(),
        max_matches: usize::MAX,
        max_line_chars: 500,
    };
    let start = Instant::now();
    let state = search::grep(&Opener::rooted(tree), black_box(&request)).expect("grep");
    let elapsed = start.elapsed();
    // Outside the timing: the contract is matches sorted by path, then line.
    assert!(
        state.matches.windows(2).all(|w| (&w[0].path, w[0].line) < (&w[1].path, w[1].line)),
        "grep results are not sorted by (path, line)"
    );
    let ours = Ours {
        matches: state.matches.len(),
        files_searched: state.files_searched,
        files_matched: state.files_matched,
    };
    drop(black_box(state));
    (elapsed, ours)
}

const PATTERNS: [(&str, &str); 3] =
    [("common literal", "fn "), ("regex", r"impl\s+\w+\s+for"), ("rare literal", "unsafe_op_in_unsafe_fn")];

fn grep_bench() {
    println!("## search::grep vs ripgrep\n");
    let tree = bench_tree();
    if !tree.is_dir() {
        println!("Tree `{}` is not a directory: set TOOLHOST_BENCH_TREE. Skipping grep.\n", tree.display());
        return;
    }
    let walk = Instant::now();
    let (files, bytes) = tree_size(&tree);
    println!("- tree: `{}`", tree.display());
    println!(
        "- tree size (every regular file, nothing skipped): {files} files, {bytes} bytes ({})",
        mib(bytes)
    );
    println!("- tree walk for that count: {}", ms(walk.elapsed()));
    let rg = rg_available();
    match &rg {
        Some(version) => println!(
            "- rg: {version}; run as `rg --no-config -n --max-columns 500 --no-require-git -e PATTERN TREE`, \
             stdout drained through a pipe and its lines counted"
        ),
        None => println!("- **rg is not on PATH: skipping the comparison with ripgrep (timing ours only).**"),
    }
    println!(
        "- ours: `search::grep` with max_matches = usize::MAX, max_line_chars = 500, default walk options, case sensitive\n"
    );

    let mut rows = Vec::new();
    for (kind, pattern) in PATTERNS {
        // Warm-up (also fills the page cache).
        let (_, ours) = run_ours(pattern, &tree);
        let rg_counts =
            rg.as_ref().map(|_| (run_rg(pattern, &tree, true).1, run_rg(pattern, &tree, false).1));
        let mut our_times = Vec::with_capacity(RUNS);
        let mut rg_times = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            our_times.push(run_ours(pattern, &tree).0);
            if rg.is_some() {
                rg_times.push(run_rg(pattern, &tree, true).0);
            }
        }
        rows.push((kind, pattern, our_times, rg_times, ours, rg_counts));
    }

    if rg.is_some() {
        println!(
            "| pattern | ours median | ours min | rg median | rg min | ours/rg (median) | our matches | rg matches | rg matches without --no-require-git | files searched / matched (ours) |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    } else {
        println!("| pattern | ours median | ours min | our matches | files searched / matched (ours) |");
        println!("|---|---:|---:|---:|---:|");
    }
    let mut notes = Vec::new();
    for (kind, pattern, our_times, rg_times, ours, rg_counts) in &rows {
        let label = format!("{kind} `{}`", pattern.replace('|', "\\|"));
        let files = format!("{} / {}", ours.files_searched, ours.files_matched);
        match rg_counts {
            Some((rg_count, rg_plain)) => {
                let ratio = median(our_times).as_secs_f64() / median(rg_times).as_secs_f64();
                println!(
                    "| {label} | {} | {} | {} | {} | {ratio:.2} | {} | {rg_count} | {rg_plain} | {files} |",
                    ms(median(our_times)),
                    ms(min(our_times)),
                    ms(median(rg_times)),
                    ms(min(rg_times)),
                    ours.matches,
                );
                if ours.matches as u64 != *rg_count {
                    notes.push(format!(
                        "- `{pattern}`: ours found {} matching lines, rg {rg_count} (difference {}).",
                        ours.matches,
                        ours.matches as i64 - *rg_count as i64
                    ));
                }
            }
            None => println!(
                "| {label} | {} | {} | {} | {files} |",
                ms(median(our_times)),
                ms(min(our_times)),
                ours.matches
            ),
        }
    }
    println!();
    if !notes.is_empty() {
        println!("Match counts differ:");
        for note in notes {
            println!("{note}");
        }
        println!(
            "Possible causes: our junk-folder filter (node_modules, .git, ...), lines that are not valid UTF-8 \
             (our UTF-8 sink stops searching that file), and rg's own binary/encoding handling.\n"
        );
    }
}
