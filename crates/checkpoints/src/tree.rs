//! The working tree as a command may change it: every file not ignored (`.gitignore`, `.git`
//! itself, the checkpoint store), kept in the store, hashed again only when its stamp (size,
//! modification and change times, inode) moved since the folder's last scan. A file whose times
//! were within two seconds of the scan is not put in the index (git's racy-clean rule: it could
//! still change within the same tick), so the next scan reads it again.
//!
//! A scan is all or nothing: a folder that cannot be walked or a file that cannot be read fails
//! it, so a file is never taken for created because the scan before missed it.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use computer_runtime::beneath::Opener;

use crate::CheckpointError;
use crate::store::{Change, FileState, Stamp, Store, stamp};

/// The most files a scan takes.
pub const MAX_TREE_FILES: usize = 100_000;

/// How recent a time must not be for a file to go in the index.
const RACY_NS: i64 = 2_000_000_000;

/// A file a walk found: its path relative to the folder, its path, its stamp.
type Found = (String, PathBuf, Stamp);

/// A file read in a scan: its path relative to the folder, its stamp, what it is.
type Captured = (String, Stamp, FileState);

/// What each file of a folder is, by path relative to it.
pub type Tree = BTreeMap<String, FileState>;

/// One scan: the files, their modification times, and when it began.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// The files.
    pub tree: Tree,
    /// Each file's modification time (nanoseconds).
    pub mtimes: HashMap<String, i64>,
    /// When the scan began (nanoseconds).
    pub started_ns: i64,
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Scans `folder`, keeping what changed since the last scan in `store`; files are read beneath
/// `opener`'s roots.
///
/// # Errors
///
/// More than [`MAX_TREE_FILES`] files, a folder that cannot be walked, a file that cannot be
/// read, or a store that cannot be written.
pub fn scan(store: &Store, opener: &Opener, folder: &Path) -> Result<Scan, CheckpointError> {
    let started_ns = now_ns();
    let shared = store.index(folder);
    let mut index = shared.lock().unwrap_or_else(|p| p.into_inner());
    let store_root = store.root().to_owned();
    // The walk and the `stat`s run on every core; what they found is then taken in order.
    let found: std::sync::Mutex<Vec<Found>> = std::sync::Mutex::default();
    let failed: std::sync::Mutex<Option<String>> = std::sync::Mutex::default();
    ignore::WalkBuilder::new(folder)
        .hidden(false)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |entry| entry.file_name() != ".git" && !entry.path().starts_with(&store_root))
        .build_parallel()
        .run(|| {
            let (found, failed) = (&found, &failed);
            Box::new(move |entry| {
                let entry = match entry {
                    Ok(entry) => entry,
                    Err(error) => {
                        *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(error.to_string());
                        return ignore::WalkState::Quit;
                    }
                };
                if !entry.file_type().is_some_and(|t| t.is_file()) {
                    return ignore::WalkState::Continue;
                }
                let (Ok(relative), Ok(metadata)) = (entry.path().strip_prefix(folder), entry.metadata())
                else {
                    // Gone since it was listed: not part of the tree.
                    return ignore::WalkState::Continue;
                };
                let mut found = found.lock().unwrap_or_else(|p| p.into_inner());
                if found.len() > MAX_TREE_FILES {
                    return ignore::WalkState::Quit;
                }
                found.push((relative.display().to_string(), entry.into_path(), stamp(&metadata)));
                ignore::WalkState::Continue
            })
        });
    if let Some(error) = failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(CheckpointError::Invalid(format!("the folder could not be walked: {error}")));
    }
    let found = found.into_inner().unwrap_or_else(|p| p.into_inner());
    if found.len() > MAX_TREE_FILES {
        return Err(CheckpointError::TooManyFiles(MAX_TREE_FILES));
    }
    let mut scan = Scan { started_ns, ..Scan::default() };
    // Files whose stamp moved are read and kept, on every core.
    let (known, moved): (Vec<_>, Vec<_>) = found
        .into_iter()
        .partition(|(relative, _, stamp)| index.get(relative).is_some_and(|(known, _)| known == stamp));
    for (relative, _, stamp) in known {
        if let Some((_, state)) = index.get(&relative) {
            scan.mtimes.insert(relative.clone(), stamp.1);
            scan.tree.insert(relative, state.clone());
        }
    }
    let workers = std::thread::available_parallelism().map_or(1, std::num::NonZero::get).min(8);
    let chunk = moved.len().div_ceil(workers).max(1);
    let captured: Vec<Result<Vec<Captured>, CheckpointError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = moved
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|(relative, path, stamp)| {
                            store.capture(opener, path).map(|state| (relative.clone(), *stamp, state))
                        })
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| Err(CheckpointError::Invalid("a scan thread failed".into())))
            })
            .collect()
    });
    let mut changed = false;
    for part in captured {
        for (relative, stamp, state) in part? {
            // A file that vanished between the walk and the read is not part of the tree.
            if state == FileState::Absent {
                continue;
            }
            if started_ns - stamp.1 > RACY_NS && started_ns - stamp.2 > RACY_NS {
                index.insert(relative.clone(), (stamp, state.clone()));
                changed = true;
            }
            scan.mtimes.insert(relative.clone(), stamp.1);
            scan.tree.insert(relative, state);
        }
    }
    let before = index.len();
    index.retain(|path, _| scan.tree.contains_key(path));
    if changed || index.len() != before {
        store.save_index(folder, &index);
    }
    Ok(scan)
}

/// What changed between two scans of one folder. A file the scan before did not see, last
/// modified before it began, is not counted as created: it was there, left out (a `.gitignore`
/// that changed hides and shows files without creating them).
pub fn diff(before: &Scan, after: &Scan) -> Vec<Change> {
    let mut changes = Vec::new();
    for (path, was) in &before.tree {
        match after.tree.get(path) {
            Some(now) if now == was => {}
            Some(now) => changes.push(Change { path: path.clone(), before: was.clone(), after: now.clone() }),
            None => {
                changes.push(Change { path: path.clone(), before: was.clone(), after: FileState::Absent })
            }
        }
    }
    for (path, now) in &after.tree {
        let new = after.mtimes.get(path).is_some_and(|mtime| *mtime >= before.started_ns - RACY_NS);
        if !before.tree.contains_key(path) && new {
            changes.push(Change { path: path.clone(), before: FileState::Absent, after: now.clone() });
        }
    }
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    changes
}
