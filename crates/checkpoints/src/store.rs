//! The content-addressed store: file contents by SHA-256 (deflate-compressed, written once), each
//! session's log of the calls that changed files, and each folder's index of what its files were
//! at the last scan (so a scan hashes only what changed).

use std::collections::HashMap;
use std::io::{Read as _, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use computer_runtime::ComputerError;
use computer_runtime::beneath::Opener;

use crate::CheckpointError;

/// A file as read for a checkpoint.
pub(crate) enum Read {
    Absent,
    Large { size: u64, mtime_ns: i64 },
    Bytes { bytes: Vec<u8>, mode: u32 },
}

/// What a file was at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FileState {
    /// There was no file.
    Absent,
    /// Its content is in the store.
    Stored {
        /// The content's SHA-256, in hex.
        hash: String,
        /// Its permission bits.
        mode: u32,
        /// Its size in bytes.
        size: u64,
    },
    /// Larger than the store keeps: it cannot be put back.
    TooLarge {
        /// Its size in bytes.
        size: u64,
        /// Its modification time (nanoseconds), to tell whether it changed.
        mtime_ns: i64,
    },
}

impl FileState {
    /// Whether the content can be put back.
    pub fn recoverable(&self) -> bool {
        !matches!(self, Self::TooLarge { .. })
    }
}

/// One file a call changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Relative to the folder (or absolute, for a file outside it).
    pub path: String,
    /// What it was before the call.
    pub before: FileState,
    /// What the call left.
    pub after: FileState,
}

/// One call that changed files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The call id.
    pub call_id: String,
    /// The call's journal key (its row).
    #[serde(default)]
    pub key: String,
    /// The tool.
    pub tool: String,
    /// The API.
    pub api: String,
    /// What the call did, in a few words (the command, the path).
    pub summary: String,
    /// When it ended (Unix milliseconds).
    pub at_ms: i64,
    /// The files it changed.
    pub files: Vec<Change>,
    /// What it changed could not all be kept (a file could not be read, the folder could not be
    /// scanned): files cannot be rewound to before it, and this says why.
    #[serde(default)]
    pub incomplete: Option<String>,
    /// A rewind put these files back.
    #[serde(default)]
    pub undone: bool,
}

impl Entry {
    /// What names the call in the log: its journal key, or (recorded without one) its id.
    pub fn id(&self) -> &str {
        if self.key.is_empty() { &self.call_id } else { &self.key }
    }
}

/// What a collection removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Collected {
    /// Contents removed.
    pub objects: u64,
    /// Bytes freed.
    pub bytes: u64,
}

/// A line of a session's log: a call's entry, or the calls a rewind undid (appended, never
/// rewritten, so a call recorded meanwhile is never lost).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum Line {
    Undone { undone: Vec<String> },
    Entry(Box<Entry>),
}

/// What identifies a file's content without reading it: size, modification and change times
/// (nanoseconds), inode.
pub(crate) type Stamp = (u64, i64, i64, u64);

/// What a folder's files were at the last scan, by path: their stamp and the state kept.
pub(crate) type Index = HashMap<String, (Stamp, FileState)>;

/// The store, in one folder (the data folder's `checkpoints`).
#[derive(Debug)]
pub struct Store {
    root: PathBuf,
    /// The largest file kept.
    pub max_file_bytes: u64,
    /// The most bytes the kept contents may take (compressed); past it nothing more is kept.
    budget: u64,
    /// What the kept contents take now (counted at open, then as they are written).
    used: std::sync::atomic::AtomicU64,
    /// Each folder's index, once read from disk (a scan then costs a walk and a `stat` a file).
    indexes: std::sync::Mutex<HashMap<PathBuf, std::sync::Arc<std::sync::Mutex<Index>>>>,
}

/// A file name for a folder or session: readable, and unique by a hash of the whole.
pub fn key_of(text: &str) -> String {
    let hash: String = Sha256::digest(text.as_bytes()).iter().take(8).map(|b| format!("{b:02x}")).collect();
    let name: String = text
        .rsplit('/')
        .next()
        .unwrap_or("")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .take(40)
        .collect();
    format!("{name}-{hash}")
}

/// Writes through a temporary file renamed into place: a reader sees the old or the new whole.
/// (Not synced: a checkpoint lost to a power cut costs an undo, and syncing each of a first
/// scan's thousands of files would cost seconds.)
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let parent = path.parent().unwrap_or(Path::new("."));
    make_private_dirs(parent)?;
    let mut temp = tempfile_in(parent)?;
    if let Err(error) = temp.1.write_all(bytes).and_then(|()| std::fs::rename(&temp.0, path)) {
        let _ = std::fs::remove_file(&temp.0);
        return Err(error);
    }
    Ok(())
}

/// Folders of the store are the person's (or the server's) alone: what they keep is the
/// content of files, secrets included.
fn make_private_dirs(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(path)
}

fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    loop {
        let name = format!(".tmp-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let path = dir.join(name);
        use std::os::unix::fs::OpenOptionsExt as _;
        match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path) {
            Ok(file) => return Ok((path, file)),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(error),
        }
    }
}

impl Store {
    /// The store in `root` (made if missing), keeping files up to `max_file_bytes`.
    ///
    /// # Errors
    ///
    /// The folder cannot be made.
    pub fn open(root: impl Into<PathBuf>, max_file_bytes: u64) -> Result<Self, CheckpointError> {
        let root = root.into();
        make_private_dirs(&root.join("objects")).map_err(|e| CheckpointError::io(&root, e))?;
        let used = folder_bytes(&root.join("objects"));
        Ok(Self {
            root,
            max_file_bytes,
            budget: u64::MAX,
            used: std::sync::atomic::AtomicU64::new(used),
            indexes: std::sync::Mutex::default(),
        })
    }

    /// At most `bytes` of kept contents (compressed): past it a call's changes are not kept, and
    /// that call cannot be rewound across (said in its entry).
    #[must_use]
    pub fn with_budget(mut self, bytes: u64) -> Self {
        self.budget = bytes;
        self
    }

    /// What the kept contents take now, in bytes.
    pub fn used(&self) -> u64 {
        self.used.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The store's folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn object(&self, hash: &str) -> PathBuf {
        let (head, tail) = hash.split_at(2.min(hash.len()));
        self.root.join("objects").join(head).join(tail)
    }

    /// Keeps `bytes`; returns their hash. Content already kept is not written again.
    ///
    /// # Errors
    ///
    /// The store cannot be written.
    pub fn put(&self, bytes: &[u8]) -> Result<String, CheckpointError> {
        let hash: String = Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect();
        let path = self.object(&hash);
        if path.exists() {
            // Used again now: a collection spares what was touched within the hour.
            if let Ok(file) = std::fs::File::options().write(true).open(&path) {
                let _ = file.set_modified(std::time::SystemTime::now());
            }
            return Ok(hash);
        }
        // Whole or not at all: a temporary file renamed into place, so a write cut short (a
        // crash, a full disk) never leaves an object that later writes would trust.
        let mut encoder = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(bytes).map_err(|e| CheckpointError::io(&path, e))?;
        let compressed = encoder.finish().map_err(|e| CheckpointError::io(&path, e))?;
        let size = compressed.len() as u64;
        let before = self.used.fetch_add(size, std::sync::atomic::Ordering::Relaxed);
        if before.saturating_add(size) > self.budget {
            self.used.fetch_sub(size, std::sync::atomic::Ordering::Relaxed);
            return Err(CheckpointError::Full(self.budget));
        }
        if let Err(error) = write_atomically(&path, &compressed) {
            self.used.fetch_sub(size, std::sync::atomic::Ordering::Relaxed);
            return Err(CheckpointError::io(&path, error));
        }
        Ok(hash)
    }

    /// The content kept under `hash`.
    ///
    /// # Errors
    ///
    /// It is not kept, or the store cannot be read, or it does not match its hash.
    pub fn get(&self, hash: &str) -> Result<Vec<u8>, CheckpointError> {
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(CheckpointError::Missing(hash.to_owned()));
        }
        let path = self.object(hash);
        let file = std::fs::File::open(&path).map_err(|_| CheckpointError::Missing(hash.to_owned()))?;
        let mut bytes = Vec::new();
        flate2::read::DeflateDecoder::new(file)
            .read_to_end(&mut bytes)
            .map_err(|e| CheckpointError::io(&path, e))?;
        let found: String = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
        if found != hash {
            return Err(CheckpointError::Corrupt(hash.to_owned()));
        }
        Ok(bytes)
    }

    /// What `path` is now, keeping its content if it is a regular file no larger than the cap.
    /// The file is opened once beneath `opener`'s roots (a folder swapped for a link is not
    /// followed out of them); a link or a folder counts as absent (checkpoints keep files).
    ///
    /// # Errors
    ///
    /// It exists but cannot be read (or is outside the roots), or the store cannot be written.
    pub fn capture(&self, opener: &Opener, path: &Path) -> Result<FileState, CheckpointError> {
        match self.read(opener, path, Some(self.max_file_bytes))? {
            Read::Absent => Ok(FileState::Absent),
            Read::Large { size, mtime_ns } => Ok(FileState::TooLarge { size, mtime_ns }),
            Read::Bytes { bytes, mode } => {
                let hash = self.put(&bytes)?;
                Ok(FileState::Stored { hash, mode, size: bytes.len() as u64 })
            }
        }
    }

    /// Reads `path` beneath `opener`'s roots: absent, larger than `cap`, or its bytes and mode.
    pub(crate) fn read(
        &self,
        opener: &Opener,
        path: &Path,
        cap: Option<u64>,
    ) -> Result<Read, CheckpointError> {
        use rustix::fs::OFlags;
        use std::io::Read as _;
        let fd = match opener.open(path, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK) {
            Ok(fd) => fd,
            Err(ComputerError::NotFound { .. }) => return Ok(Read::Absent),
            // A link (O_NOFOLLOW refuses it) is not a file the checkpoints keep.
            Err(_) if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) => {
                return Ok(Read::Absent);
            }
            Err(error) => return Err(CheckpointError::Files(error.to_string())),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| CheckpointError::io(path, e.into()))?;
        if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
            return Ok(Read::Absent);
        }
        let size = u64::try_from(stat.st_size).unwrap_or(0);
        let mtime_ns = stat
            .st_mtime
            .saturating_mul(1_000_000_000)
            .saturating_add(i64::try_from(stat.st_mtime_nsec).unwrap_or(0));
        if cap.is_some_and(|cap| size > cap) {
            return Ok(Read::Large { size, mtime_ns });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        std::fs::File::from(fd).read_to_end(&mut bytes).map_err(|e| CheckpointError::io(path, e))?;
        Ok(Read::Bytes { bytes, mode: stat.st_mode & 0o7777 })
    }

    fn folder_dir(&self, folder: &Path) -> PathBuf {
        self.root.join("sessions").join(key_of(&folder.display().to_string()))
    }

    fn log(&self, folder: &Path, session: &str) -> PathBuf {
        self.folder_dir(folder).join(format!("{}.jsonl", key_of(session)))
    }

    /// Adds `entry` to the session's log.
    ///
    /// # Errors
    ///
    /// The log cannot be written.
    pub fn append(&self, folder: &Path, session: &str, entry: &Entry) -> Result<(), CheckpointError> {
        let path = self.log(folder, session);
        let dir = self.folder_dir(folder);
        make_private_dirs(&dir).map_err(|e| CheckpointError::io(&dir, e))?;
        // The session's id, once, so the log can be found by it.
        let id_file = path.with_extension("id");
        if !id_file.exists() {
            std::fs::write(&id_file, session).map_err(|e| CheckpointError::io(&id_file, e))?;
        }
        self.append_line(&path, &Line::Entry(Box::new(entry.clone())))
    }

    fn append_line(&self, path: &Path, line: &Line) -> Result<(), CheckpointError> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut line = serde_json::to_vec(line).map_err(|e| CheckpointError::Invalid(e.to_string()))?;
        line.push(b'\n');
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| CheckpointError::io(path, e))?;
        file.write_all(&line).map_err(|e| CheckpointError::io(path, e))
    }

    /// The session's entries, oldest first, with what rewinds undid marked (a line that does not
    /// read is left out, with a warning).
    ///
    /// # Errors
    ///
    /// The log exists but cannot be read.
    pub fn entries(&self, folder: &Path, session: &str) -> Result<Vec<Entry>, CheckpointError> {
        let path = self.log(folder, session);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(CheckpointError::io(&path, error)),
        };
        let mut entries: Vec<Entry> = Vec::new();
        for line in text.lines().filter(|line| !line.trim().is_empty()) {
            match serde_json::from_str::<Line>(line) {
                Ok(Line::Entry(entry)) => entries.push(*entry),
                Ok(Line::Undone { undone }) => {
                    for entry in &mut entries {
                        if undone.contains(&entry.id().to_owned()) {
                            entry.undone = true;
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!(log = %path.display(), %error, "a checkpoint line that does not read");
                }
            }
        }
        Ok(entries)
    }

    /// Marks these calls (by [`Entry::id`]) of the session undone.
    ///
    /// # Errors
    ///
    /// The log cannot be written.
    pub fn mark_undone(&self, folder: &Path, session: &str, ids: &[String]) -> Result<(), CheckpointError> {
        self.append_line(&self.log(folder, session), &Line::Undone { undone: ids.to_vec() })
    }

    /// Forgets a session's checkpoints (its log, in whichever folder); returns whether it had any.
    /// Their contents go at the next [`Store::collect_garbage`].
    pub fn forget_session(&self, session: &str) -> bool {
        let name = format!("{}.jsonl", key_of(session));
        let Ok(folders) = std::fs::read_dir(self.root.join("sessions")) else { return false };
        let mut found = false;
        for folder in folders.filter_map(Result::ok) {
            let log = folder.path().join(&name);
            if std::fs::remove_file(&log).is_ok() {
                let _ = std::fs::remove_file(log.with_extension("id"));
                found = true;
            }
        }
        found
    }

    /// Removes the contents no session's log and no folder's index names, except what was written
    /// or used within the last hour (a call in flight holds what its files were only in memory).
    ///
    /// # Errors
    ///
    /// The store cannot be read.
    pub fn collect_garbage(&self) -> Result<Collected, CheckpointError> {
        let mut kept: std::collections::HashSet<String> = std::collections::HashSet::new();
        let mut keep = |state: &FileState| {
            if let FileState::Stored { hash, .. } = state {
                kept.insert(hash.clone());
            }
        };
        if let Ok(folders) = std::fs::read_dir(self.root.join("sessions")) {
            for log in
                folders.filter_map(Result::ok).flat_map(|f| std::fs::read_dir(f.path()).into_iter().flatten())
            {
                let Ok(log) = log else { continue };
                let Ok(text) = std::fs::read_to_string(log.path()) else { continue };
                for line in text.lines() {
                    if let Ok(Line::Entry(entry)) = serde_json::from_str::<Line>(line) {
                        for change in &entry.files {
                            keep(&change.before);
                            keep(&change.after);
                        }
                    }
                }
            }
        }
        if let Ok(indexes) = std::fs::read_dir(self.root.join("index")) {
            for file in indexes.filter_map(Result::ok) {
                let index: Index = std::fs::read(file.path())
                    .ok()
                    .and_then(|bytes| serde_json::from_slice(&bytes).ok())
                    .unwrap_or_default();
                index.values().for_each(|(_, state)| keep(state));
            }
        }
        for index in self.indexes.lock().unwrap_or_else(|p| p.into_inner()).values() {
            index.lock().unwrap_or_else(|p| p.into_inner()).values().for_each(|(_, state)| keep(state));
        }
        let recent = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        let mut collected = Collected::default();
        let Ok(heads) = std::fs::read_dir(self.root.join("objects")) else { return Ok(collected) };
        for object in
            heads.filter_map(Result::ok).flat_map(|h| std::fs::read_dir(h.path()).into_iter().flatten())
        {
            let Ok(object) = object else { continue };
            let path = object.path();
            let hash = format!(
                "{}{}",
                path.parent()
                    .and_then(Path::file_name)
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                object.file_name().to_string_lossy()
            );
            let Ok(metadata) = object.metadata() else { continue };
            if kept.contains(&hash) || metadata.modified().is_ok_and(|at| at > recent) {
                continue;
            }
            if std::fs::remove_file(&path).is_ok() {
                collected.objects += 1;
                collected.bytes += metadata.len();
                self.used.fetch_sub(metadata.len().min(self.used()), std::sync::atomic::Ordering::Relaxed);
            }
        }
        Ok(collected)
    }

    /// The sessions with checkpoints in `folder`, the most recently changed first.
    pub fn sessions(&self, folder: &Path) -> Vec<String> {
        let Ok(read) = std::fs::read_dir(self.folder_dir(folder)) else { return Vec::new() };
        let mut found: Vec<(std::time::SystemTime, String)> = read
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
            .filter_map(|e| {
                let modified = e.metadata().ok()?.modified().ok()?;
                let id = std::fs::read_to_string(e.path().with_extension("id")).ok()?;
                Some((modified, id))
            })
            .collect();
        found.sort_by_key(|b| std::cmp::Reverse(b.0));
        found.into_iter().map(|(_, id)| id).collect()
    }

    fn index_path(&self, folder: &Path) -> PathBuf {
        self.root.join("index").join(format!("{}.json", key_of(&folder.display().to_string())))
    }

    /// The folder's index: read from disk on first use, then kept here (one scan at a time per
    /// folder holds it).
    pub(crate) fn index(&self, folder: &Path) -> std::sync::Arc<std::sync::Mutex<Index>> {
        let mut indexes = self.indexes.lock().unwrap_or_else(|p| p.into_inner());
        indexes
            .entry(folder.to_owned())
            .or_insert_with(|| {
                let index: Index = std::fs::read(self.index_path(folder))
                    .ok()
                    .and_then(|bytes| serde_json::from_slice(&bytes).ok())
                    .unwrap_or_default();
                std::sync::Arc::new(std::sync::Mutex::new(index))
            })
            .clone()
    }

    pub(crate) fn save_index(&self, folder: &Path, index: &Index) {
        let path = self.index_path(folder);
        let saved = serde_json::to_vec(index)
            .map_err(std::io::Error::other)
            .and_then(|b| write_atomically(&path, &b));
        if let Err(error) = saved {
            tracing::warn!(index = %path.display(), %error, "the checkpoint index could not be saved");
        }
    }
}

/// The bytes of the files beneath `dir`.
fn folder_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(Result::ok)
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => folder_bytes(&entry.path()),
            Ok(_) => entry.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

/// A file's stamp.
pub(crate) fn stamp(metadata: &std::fs::Metadata) -> Stamp {
    use std::os::unix::fs::MetadataExt as _;
    let ctime = metadata.ctime().saturating_mul(1_000_000_000).saturating_add(metadata.ctime_nsec());
    (metadata.len(), mtime_ns(metadata), ctime, metadata.ino())
}

/// Modification time in nanoseconds.
pub(crate) fn mtime_ns(metadata: &std::fs::Metadata) -> i64 {
    use std::os::unix::fs::MetadataExt as _;
    metadata.mtime().saturating_mul(1_000_000_000).saturating_add(metadata.mtime_nsec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_kept_once_compressed_and_checked_on_the_way_out() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 1024).unwrap();
        let text = "hello\n".repeat(100);
        let hash = store.put(text.as_bytes()).unwrap();
        assert_eq!(store.put(text.as_bytes()).unwrap(), hash);
        let kept = store.object(&hash);
        assert!(std::fs::metadata(&kept).unwrap().len() < 100, "compressed");
        assert_eq!(store.get(&hash).unwrap(), text.as_bytes());
        std::fs::write(&kept, b"garbage").unwrap();
        assert!(store.get(&hash).is_err());
        assert!(matches!(store.get("../../etc/passwd"), Err(CheckpointError::Missing(_))));

        let opener = Opener::rooted(dir.path());
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join("big"), vec![b'x'; 2000]).unwrap();
        assert!(matches!(
            store.capture(&opener, &root.join("big")).unwrap(),
            FileState::TooLarge { size: 2000, .. }
        ));
        assert_eq!(store.capture(&opener, &root.join("none")).unwrap(), FileState::Absent);
        std::os::unix::fs::symlink("/etc/hostname", root.join("link")).unwrap();
        assert_eq!(
            store.capture(&opener, &root.join("link")).unwrap(),
            FileState::Absent,
            "a link is not followed"
        );
    }
}
