//! Every file API against a racer: real threads swap a symbolic link, and a folder, between an
//! inside and an outside target as fast as the kernel lets them, while each API runs in a loop.
//! Nothing outside is ever read, listed, written, moved or created, with a hard boundary and with
//! one that opens approved outside paths exactly.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use computer_runtime::edit::EditSpec;
use computer_runtime::files::{ListRequest, MoveItem, ReadRequest, WriteRequest};
use computer_runtime::search::{GlobRequest, GrepRequest, NameSearchRequest, WalkOptions};
use computer_runtime::{ComputerRuntime, EditRequest, LocalComputer};
use rustix::fs::RenameFlags;
use tool_core::{FileBoundary, FileRoot, OutsideFiles};

/// Calls of each API per boundary.
const ROUNDS: usize = 600;
const SECRET: &str = "outside-secret";

struct Scene {
    _dir: tempfile::TempDir,
    work: PathBuf,
    outside: PathBuf,
}

/// `work/` is the session's; `outside/` is another tenant's. `work/link` is a link that points at
/// `work/inside.txt` or at `outside/secret.txt`; `work/dir` is a real folder or a link to
/// `outside/`, exchanged with `work/dir-alt` by `RENAME_EXCHANGE`.
fn scene() -> Scene {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let (work, outside) = (base.join("work"), base.join("outside"));
    std::fs::create_dir_all(work.join("dir")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), SECRET).unwrap();
    std::fs::write(outside.join("f.txt"), SECRET).unwrap();
    std::fs::write(work.join("inside.txt"), "inside").unwrap();
    std::fs::write(work.join("dir/f.txt"), "inside").unwrap();
    std::os::unix::fs::symlink("inside.txt", work.join("link")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), work.join("link-out")).unwrap();
    std::os::unix::fs::symlink(&outside, work.join("dir-alt")).unwrap();
    Scene { _dir: dir, work, outside }
}

/// Swaps both pairs until told to stop; returns how many swaps it made.
fn racer(work: PathBuf, stop: Arc<AtomicBool>, swaps: Arc<AtomicU64>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            for (a, b) in [("link", "link-out"), ("dir", "dir-alt")] {
                if rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    work.join(a),
                    rustix::fs::CWD,
                    work.join(b),
                    RenameFlags::EXCHANGE,
                )
                .is_ok()
                {
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    })
}

fn outside_untouched(outside: &Path) {
    let mut names: Vec<String> = std::fs::read_dir(outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["f.txt", "secret.txt"], "something was created in or moved out of the outside folder");
    for name in names {
        assert_eq!(std::fs::read_to_string(outside.join(&name)).unwrap(), SECRET, "{name} was written");
    }
}

async fn every_api_against_the_racer(outside_files: OutsideFiles) {
    let scene = scene();
    let (work, outside) = (scene.work.clone(), scene.outside.clone());
    let files = FileBoundary {
        roots: vec![FileRoot::writable(&work)],
        outside: outside_files,
        ..FileBoundary::default()
    };
    let computer = LocalComputer::default();
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let racers: Vec<_> = (0..2).map(|_| racer(work.clone(), stop.clone(), swaps.clone())).collect();
    let (link, in_dir) = (work.join("link"), work.join("dir/f.txt"));
    let mut done = [0usize; 9];

    for round in 0..ROUNDS {
        for path in [&link, &in_dir] {
            if let Ok(state) =
                computer.read(&files, ReadRequest { path: path.clone(), offset: None, limit: None }).await
            {
                assert!(!state.content.contains(SECRET), "read {} returned the outside file", path.display());
                done[0] += 1;
            }
            let write = WriteRequest { path: path.clone(), content: format!("inside {round}") };
            if computer.write(&files, write).await.is_ok() {
                done[1] += 1;
            }
            let edit = EditRequest {
                path: path.clone(),
                edits: vec![EditSpec {
                    old_text: "secret".into(),
                    new_text: "PWNED".into(),
                    replace_all: true,
                }],
            };
            if computer.edit(&files, edit).await.is_ok() {
                done[2] += 1;
            }
        }
        // Out of the swapped folder and back into it; the way back is retried (through the API,
        // which cannot go astray) until the folder is the real one again.
        let there = work.join("moved.txt");
        let out = MoveItem { from: in_dir.clone(), to: there.clone() };
        if computer.move_items(&files, vec![out]).await.is_ok_and(|s| s.failures() == 0) {
            done[3] += 1;
            let mut tries = 0;
            while computer
                .move_items(&files, vec![MoveItem { from: there.clone(), to: in_dir.clone() }])
                .await
                .is_ok_and(|s| s.failures() > 0)
            {
                tries += 1;
                assert!(tries < 100_000, "the file never went back");
            }
        }
        let listed = computer
            .list(&files, ListRequest { path: work.join("dir"), include_hidden: true, limit: 100 })
            .await;
        if let Ok(state) = listed {
            assert!(state.entries.iter().all(|e| e.name != "secret.txt"), "listed the outside folder");
            done[4] += 1;
        }
        let walk = WalkOptions { include_hidden: true, include_ignored: true, ..WalkOptions::default() };
        let globbed = computer
            .glob(
                &files,
                GlobRequest { pattern: "**/*".into(), root: work.clone(), walk: walk.clone(), limit: 100 },
            )
            .await;
        if let Ok(state) = globbed {
            assert!(state.paths.iter().all(|p| !p.ends_with("secret.txt")), "globbed {:?}", state.paths);
            done[5] += 1;
        }
        let found = computer
            .search(
                &files,
                NameSearchRequest {
                    query: "secret".into(),
                    root: work.clone(),
                    walk: walk.clone(),
                    limit: 100,
                },
            )
            .await;
        if let Ok(state) = found {
            assert!(state.paths.is_empty(), "found {:?}", state.paths);
            done[6] += 1;
        }
        let grep = GrepRequest {
            pattern: SECRET.into(),
            root: work.clone(),
            glob: None,
            case_insensitive: false,
            fixed_strings: true,
            walk: walk.clone(),
            max_matches: 10,
            max_line_chars: 100,
        };
        if let Ok(state) = computer.grep(&files, grep).await {
            assert!(state.matches.is_empty(), "grep read the outside folder: {:?}", state.matches);
            done[7] += 1;
        }
        if computer.rename(&files, in_dir.clone(), "g.txt".into()).await.is_ok() {
            done[8] += 1;
            let mut tries = 0;
            while computer.rename(&files, work.join("dir/g.txt"), "f.txt".into()).await.is_err() {
                tries += 1;
                assert!(tries < 100_000, "the file never got its name back");
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for racer in racers {
        racer.join().unwrap();
    }
    let swaps = swaps.load(Ordering::Relaxed);
    assert!(swaps > 10_000, "the racer made only {swaps} swaps");
    // Each API got through while the racer ran (each path is inside about half the time).
    for (api, count) in
        ["read", "write", "edit", "move", "list", "glob", "search", "grep", "rename"].iter().zip(done)
    {
        if *api != "edit" {
            assert!(count > ROUNDS / 50, "{api} succeeded only {count} times in {ROUNDS} rounds");
        }
    }
    outside_untouched(&outside);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_outside_is_reached_with_a_hard_boundary() {
    every_api_against_the_racer(OutsideFiles::Refuse).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_outside_is_reached_when_outside_paths_open_exactly() {
    every_api_against_the_racer(OutsideFiles::Exact).await;
}
