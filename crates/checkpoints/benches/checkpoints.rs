//! What checkpoints cost: a small file write through the pipeline with and without them, and a
//! command's tree comparison (one scan, index warm) on a folder of 10 000 files.
//!
//! `cargo bench -p checkpoints --bench checkpoints` (what `cargo xtask bench` runs).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use checkpoints::{Checkpointer, Store};
use tool_executor::{ApprovalMode, Executor, RawCall, SessionConfig, SessionPolicy};

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    runtime.block_on(async {
        writes().await;
        tree();
    });
}

fn median(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (ms(samples[samples.len() / 2]), ms(samples[samples.len() * 95 / 100]))
}

async fn writes() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let folder = dir.path().join("work");
    std::fs::create_dir(&folder).expect("a folder");
    // The builtin tools as a front end has them (tiers, audits and preparations included).
    let toolbox = client_executor::device::builtin_toolbox().expect("the builtin tools");
    let executor = Executor::builder(Arc::new(toolbox)).build();
    let open = |id: &str| {
        executor.open_session(SessionConfig {
            id: id.into(),
            tenant: "t".into(),
            working_directory: Some(folder.clone()),
            policy: SessionPolicy { mode: ApprovalMode::AutoRun, ..SessionPolicy::default() },
            ..SessionConfig::default()
        })
    };
    let bare = open("bare");
    let kept = open("kept");
    let store = Arc::new(
        Store::open(dir.path().join("checkpoints"), checkpoints::DEFAULT_MAX_FILE_BYTES).expect("a store"),
    );
    Checkpointer::attach(store, &kept).expect("a working folder");
    let call = |i: usize, name: &str| RawCall {
        id: format!("c{i}"),
        name: "writeFile".into(),
        arguments: serde_json::json!({"path": name, "content": format!("line {i}\n").repeat(40)}).to_string(),
    };
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for i in 0..520 {
        let started = Instant::now();
        executor.execute(&bare, None, call(i, "bare.txt")).await;
        let a = started.elapsed();
        let started = Instant::now();
        executor.execute(&kept, None, call(i, "kept.txt")).await;
        let b = started.elapsed();
        if i >= 20 {
            without.push(a);
            with.push(b);
        }
    }
    let (a, a95) = median(without);
    let (b, b95) = median(with);
    println!("## checkpoints: a small file write (writeFile, 400 B)\n");
    println!("| | median | p95 |\n|---|---:|---:|");
    println!("| without checkpoints | {a:.3} ms | {a95:.3} ms |");
    println!("| with checkpoints | {b:.3} ms | {b95:.3} ms |");
    println!("\nA checkpoint adds {:.3} ms (median; target under 1 ms).\n", b - a);
}

fn tree() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let folder = dir.path().join("repo");
    for i in 0..10_000 {
        let sub = folder.join(format!("src/m{:03}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&sub).expect("a folder");
        }
        std::fs::write(
            sub.join(format!("f{i}.rs")),
            format!("pub fn f{i}() -> usize {{ {i} }}\n").repeat(20),
        )
        .expect("a file");
    }
    // Files older than the racy-clean window, as a checked-out repository's are.
    let old = std::time::SystemTime::now() - Duration::from_secs(60);
    for entry in walk(&folder) {
        let file = std::fs::File::options().write(true).open(&entry).expect("a file");
        file.set_modified(old).expect("a time");
    }
    let store =
        Store::open(dir.path().join("checkpoints"), checkpoints::DEFAULT_MAX_FILE_BYTES).expect("a store");
    let opener = computer_runtime::beneath::Opener::rooted(&folder);
    let started = Instant::now();
    let first = checkpoints::scan(&store, &opener, &folder).expect("a scan");
    let cold = started.elapsed();
    let mut samples = Vec::new();
    for _ in 0..30 {
        let started = Instant::now();
        let tree = checkpoints::scan(&store, &opener, &folder).expect("a scan");
        samples.push(started.elapsed());
        assert_eq!(tree.tree.len(), first.tree.len());
    }
    let (warm, warm95) = median(samples);
    println!("## checkpoints: a command's tree scan, 10 000 files (2.7 MB)\n");
    println!("| scan | median | p95 |\n|---|---:|---:|");
    println!("| first (every file hashed and kept) | {:.1} ms | |", cold.as_secs_f64() * 1000.0);
    println!("| later (index warm; a command scans before and after) | {warm:.1} ms | {warm95:.1} ms |\n");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a folder").flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}
