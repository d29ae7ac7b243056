//! The outputs folder: what code wrote there, listed after each run.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// The most entries listed (a run that writes more is told how many were left out).
const MAX_ENTRIES: usize = 1_000;

/// One file in the outputs folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputFile {
    /// Its path relative to the outputs folder.
    pub name: String,
    /// Its full path, as the file tools read it.
    pub path: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its media type, from its name.
    pub mime: String,
}

/// What the folder held: each file with its size and modification time.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    files: HashMap<PathBuf, (u64, Option<SystemTime>)>,
    pub(crate) truncated: bool,
}

/// Walks `root` (links are not followed; only regular files count).
pub(crate) fn snapshot(root: &Path) -> Snapshot {
    let mut snapshot = Snapshot::default();
    // Code may replace the folder with a link (to `/`, say): then nothing is listed.
    if !root.symlink_metadata().is_ok_and(|meta| meta.is_dir()) {
        return snapshot;
    }
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                if snapshot.files.len() >= MAX_ENTRIES {
                    snapshot.truncated = true;
                    return snapshot;
                }
                snapshot.files.insert(entry.path(), (meta.len(), meta.modified().ok()));
            }
        }
    }
    snapshot
}

impl Snapshot {
    /// Every file, sorted by name.
    pub(crate) fn all(&self, root: &Path) -> Vec<OutputFile> {
        let mut files: Vec<OutputFile> =
            self.files.iter().map(|(path, (bytes, _))| describe(root, path, *bytes)).collect();
        files.sort_by(|a, b| a.name.cmp(&b.name));
        files
    }

    /// The files new or changed since `before`, sorted by name.
    pub(crate) fn changed_since(&self, before: &Snapshot, root: &Path) -> Vec<OutputFile> {
        let mut files: Vec<OutputFile> = self
            .files
            .iter()
            .filter(|(path, now)| before.files.get(*path) != Some(now))
            .map(|(path, (bytes, _))| describe(root, path, *bytes))
            .collect();
        files.sort_by(|a, b| a.name.cmp(&b.name));
        files
    }
}

fn describe(root: &Path, path: &Path, bytes: u64) -> OutputFile {
    let name = path.strip_prefix(root).unwrap_or(path).display().to_string();
    OutputFile { mime: mime_of(&name).to_owned(), name, path: path.display().to_string(), bytes }
}

/// The media type of a file, by its extension.
pub(crate) fn mime_of(name: &str) -> &'static str {
    let extension = name.rsplit_once('.').map(|(_, ext)| ext.to_ascii_lowercase()).unwrap_or_default();
    match extension.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "pdf" => "application/pdf",
        "csv" => "text/csv",
        "tsv" => "text/tab-separated-values",
        "json" => "application/json",
        "html" | "htm" => "text/html",
        "md" => "text/markdown",
        "txt" | "log" => "text/plain",
        "xlsx" => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "parquet" => "application/vnd.apache.parquet",
        "zip" => "application/zip",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_new_and_changed_files_only_and_never_follows_links() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("old.txt"), "a").unwrap();
        let before = snapshot(root);
        std::fs::create_dir(root.join("charts")).unwrap();
        std::fs::write(root.join("charts/plot.png"), [0x89, b'P', b'N', b'G']).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("link")).unwrap();
        let after = snapshot(root);
        let changed = after.changed_since(&before, root);
        assert_eq!(changed.len(), 1, "{changed:?}");
        assert_eq!(changed[0].name, "charts/plot.png");
        assert_eq!(changed[0].mime, "image/png");
        assert_eq!(changed[0].bytes, 4);
        assert_eq!(after.all(root).len(), 2);
        // The folder replaced by a link to elsewhere lists nothing there.
        let linked = dir.path().join("linked");
        std::os::unix::fs::symlink("/etc", &linked).unwrap();
        assert!(snapshot(&linked).all(&linked).is_empty());
    }
}
