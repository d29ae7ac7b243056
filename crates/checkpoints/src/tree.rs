//! The working tree as a command may change it: every file not ignored (`.gitignore`, `.git`
//! itself), kept in the store, hashed again only when its size, time or inode moved since the
//! folder's last scan (or its time is too recent to trust, as git's racy-clean check).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::CheckpointError;
use computer_runtime::beneath::Opener;

use crate::store::{Change, FileState, Store, mtime_ns};

/// The most files a scan takes.
pub const MAX_TREE_FILES: usize = 100_000;

/// A file a walk found: its path relative to the folder, its path, its size, time and inode.
type Found = (String, PathBuf, (u64, i64, u64));

/// What each file of a folder is, by path relative to it.
pub type Tree = BTreeMap<String, FileState>;

/// Scans `folder`, keeping what changed since the last scan in `store`; files are read beneath
/// `opener`'s roots.
///
/// # Errors
///
/// More than [`MAX_TREE_FILES`] files, or the store cannot be written.
pub fn scan(store: &Store, opener: &Opener, folder: &Path) -> Result<Tree, CheckpointError> {
    use std::os::unix::fs::MetadataExt as _;
    let shared = store.index(folder);
    let mut index = shared.lock().unwrap_or_else(|p| p.into_inner());
    let mut tree = Tree::new();
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
    // The walk and the `stat`s run on every core; what they found is then taken in order.
    let found: std::sync::Mutex<Vec<Found>> = std::sync::Mutex::default();
    ignore::WalkBuilder::new(folder)
        .hidden(false)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|entry| entry.file_name() != ".git")
        .build_parallel()
        .run(|| {
            let found = &found;
            Box::new(move |entry| {
                let Ok(entry) = entry else { return ignore::WalkState::Continue };
                if !entry.file_type().is_some_and(|t| t.is_file()) {
                    return ignore::WalkState::Continue;
                }
                let (Ok(relative), Ok(metadata)) = (entry.path().strip_prefix(folder), entry.metadata())
                else {
                    return ignore::WalkState::Continue;
                };
                let stamp = (metadata.len(), mtime_ns(&metadata), metadata.ino());
                let mut found = found.lock().unwrap_or_else(|p| p.into_inner());
                if found.len() > MAX_TREE_FILES {
                    return ignore::WalkState::Quit;
                }
                found.push((relative.display().to_string(), entry.into_path(), stamp));
                ignore::WalkState::Continue
            })
        });
    let found = found.into_inner().unwrap_or_else(|p| p.into_inner());
    if found.len() > MAX_TREE_FILES {
        return Err(CheckpointError::TooManyFiles(MAX_TREE_FILES));
    }
    // Files whose stamp moved (or is too recent to trust) are read and kept, on every core.
    let (known, moved): (Vec<_>, Vec<_>) = found.into_iter().partition(|(relative, _, stamp)| {
        // A time within two seconds of now may still move within its tick: hash it again.
        let settled = now_ns - stamp.1 > 2_000_000_000;
        index.get(relative).is_some_and(|(size, mtime, ino, _)| settled && (*size, *mtime, *ino) == *stamp)
    });
    for (relative, _, _) in known {
        let state = index.get(&relative).map(|(_, _, _, state)| state.clone());
        if let Some(state) = state {
            tree.insert(relative, state);
        }
    }
    let changed = !moved.is_empty();
    let workers = std::thread::available_parallelism().map_or(1, std::num::NonZero::get).min(8);
    let chunk = moved.len().div_ceil(workers).max(1);
    let captured: Vec<Result<Vec<_>, CheckpointError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = moved
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    let mut out = Vec::with_capacity(part.len());
                    for (relative, path, stamp) in part {
                        match store.capture(opener, path) {
                            Ok(state) => out.push((relative.clone(), *stamp, state)),
                            // A file that went away, cannot be read now, or lies through a link
                            // outside the roots is not part of the tree.
                            Err(CheckpointError::Io { .. } | CheckpointError::Files(_)) => {}
                            Err(other) => return Err(other),
                        }
                    }
                    Ok(out)
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
    for part in captured {
        for (relative, stamp, state) in part? {
            index.insert(relative.clone(), (stamp.0, stamp.1, stamp.2, state.clone()));
            tree.insert(relative, state);
        }
    }
    let before = index.len();
    index.retain(|path, _| tree.contains_key(path));
    if changed || index.len() != before {
        store.save_index(folder, &index);
    }
    Ok(tree)
}

/// What changed between two scans of one folder.
pub fn diff(before: &Tree, after: &Tree) -> Vec<Change> {
    let mut changes = Vec::new();
    for (path, was) in before {
        match after.get(path) {
            Some(now) if now == was => {}
            Some(now) => changes.push(Change { path: path.clone(), before: was.clone(), after: now.clone() }),
            None => {
                changes.push(Change { path: path.clone(), before: was.clone(), after: FileState::Absent })
            }
        }
    }
    for (path, now) in after {
        if !before.contains_key(path) {
            changes.push(Change { path: path.clone(), before: FileState::Absent, after: now.clone() });
        }
    }
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    changes
}
