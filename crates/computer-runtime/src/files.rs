//! Reading, writing, listing and moving files (blocking; the runtime calls these off the async
//! threads).

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

use crate::error::ComputerError;

/// Limits on what one read returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimits {
    /// Lines returned when the request gives no limit, and the most it may ask for.
    pub max_lines: u64,
    /// Bytes of text returned at most.
    pub max_bytes: usize,
    /// Characters kept of one line; the rest is cut with a marker.
    pub max_line_chars: usize,
}

impl Default for ReadLimits {
    fn default() -> Self {
        Self { max_lines: 2000, max_bytes: 50 * 1024, max_line_chars: 2000 }
    }
}

/// Which part of a file to read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadRequest {
    /// The file.
    pub path: PathBuf,
    /// First line to return, 1-based (default 1).
    pub offset: Option<u64>,
    /// How many lines (default and maximum: the runtime's line limit).
    pub limit: Option<u64>,
}

/// Why a read stopped before the end of the requested range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadCut {
    /// The line limit.
    Lines,
    /// The byte limit.
    Bytes,
}

/// The outcome of a read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadState {
    /// The file read.
    pub path: PathBuf,
    /// The text of the lines returned, joined with `\n`.
    pub content: String,
    /// First line returned (1-based).
    pub start_line: u64,
    /// Last line returned (0 when none).
    pub end_line: u64,
    /// Lines in the whole file.
    pub total_lines: u64,
    /// Size of the file in bytes.
    pub size: u64,
    /// Set when the read stopped at a limit rather than at the end of the requested range.
    pub cut: Option<ReadCut>,
    /// How many returned lines were shortened to the line-length limit.
    pub long_lines_cut: u64,
    /// The offset to continue from, when there is more.
    pub next_offset: Option<u64>,
}

/// Reads a line range without loading the file: lines before the range are skipped with
/// `memchr` over a fixed buffer, and lines after it are only counted.
///
/// # Errors
///
/// Not found, a directory, a binary file (a NUL byte in the first 8 KiB), an offset past the end.
pub fn read(request: &ReadRequest, limits: ReadLimits) -> Result<ReadState, ComputerError> {
    let path = &request.path;
    let (file, metadata) = open_regular(path)?;
    let size = metadata.len();
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    if looks_binary(reader.fill_buf().map_err(|e| ComputerError::io(path, e))?) {
        return Err(ComputerError::Binary { path: path.clone(), size });
    }

    let start = request.offset.unwrap_or(1).max(1);
    let wanted = request.limit.unwrap_or(limits.max_lines).clamp(1, limits.max_lines);
    let io = |e| ComputerError::io(path, e);

    let skipped = skip_lines(&mut reader, start - 1).map_err(io)?;
    let mut content = String::new();
    let mut line = Vec::new();
    let mut taken = 0u64;
    let mut long_lines_cut = 0u64;
    let mut cut = None;
    while taken < wanted {
        line.clear();
        let (read, complete) =
            read_line_capped(&mut reader, &mut line, limits.max_line_chars * 4).map_err(io)?;
        if read == 0 {
            break;
        }
        while matches!(line.last(), Some(b'\n' | b'\r')) {
            line.pop();
        }
        let mut text = String::from_utf8_lossy(&line).into_owned();
        if !complete || text.chars().count() > limits.max_line_chars {
            let keep: String = text.chars().take(limits.max_line_chars).collect();
            text = format!("{keep}… [line truncated to {} characters]", limits.max_line_chars);
            long_lines_cut += 1;
        }
        if !content.is_empty() && content.len() + text.len() + 1 > limits.max_bytes {
            cut = Some(ReadCut::Bytes);
            // The line was consumed but not returned: count it as the first of the rest.
            let rest = count_lines(&mut reader).map_err(io)? + 1;
            return Ok(finish(
                path,
                content,
                start,
                taken,
                start - 1 + taken + rest,
                size,
                cut,
                long_lines_cut,
            ));
        }
        if taken > 0 {
            content.push('\n');
        }
        content.push_str(&text);
        taken += 1;
    }
    let rest = count_lines(&mut reader).map_err(io)?;
    let total = skipped + taken + rest;
    if skipped < start - 1 || (taken == 0 && start > 1) {
        return Err(ComputerError::OffsetPastEnd { path: path.clone(), offset: start, total_lines: total });
    }
    if rest > 0 && taken == wanted && request.limit.is_none_or(|l| l > limits.max_lines) {
        cut = Some(ReadCut::Lines);
    }
    Ok(finish(path, content, start, taken, total, size, cut, long_lines_cut))
}

#[allow(clippy::too_many_arguments)]
fn finish(
    path: &Path,
    content: String,
    start: u64,
    taken: u64,
    total: u64,
    size: u64,
    cut: Option<ReadCut>,
    long_lines_cut: u64,
) -> ReadState {
    let end = if taken == 0 { 0 } else { start + taken - 1 };
    ReadState {
        path: path.to_path_buf(),
        content,
        start_line: start,
        end_line: end,
        total_lines: total,
        size,
        cut,
        long_lines_cut,
        next_offset: (end < total && taken > 0).then_some(end + 1),
    }
}

/// A NUL byte in the first 8 KiB marks a file as binary, as git and ripgrep judge it.
pub fn looks_binary(head: &[u8]) -> bool {
    memchr::memchr(0, &head[..head.len().min(8192)]).is_some()
}

/// Skips `n` lines; returns how many there were (fewer at end of file, where a last line without
/// a newline still counts).
fn skip_lines(reader: &mut impl BufRead, n: u64) -> std::io::Result<u64> {
    let mut skipped = 0;
    let mut partial = false;
    while skipped < n {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(skipped + u64::from(partial));
        }
        let mut consumed = buf.len();
        for pos in memchr::memchr_iter(b'\n', buf) {
            skipped += 1;
            if skipped == n {
                consumed = pos + 1;
                break;
            }
        }
        partial = buf[consumed - 1] != b'\n';
        reader.consume(consumed);
    }
    Ok(skipped)
}

/// Reads one line, keeping at most `cap` bytes of it; returns (bytes read, whether it fit).
fn read_line_capped(
    reader: &mut impl BufRead,
    out: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<(usize, bool)> {
    let mut read = 0;
    let mut complete = true;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok((read, complete));
        }
        let (chunk, done) = match memchr::memchr(b'\n', buf) {
            Some(pos) => (&buf[..=pos], true),
            None => (buf, false),
        };
        let room = cap.saturating_sub(out.len());
        if chunk.len() > room {
            complete = false;
        }
        out.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let len = chunk.len();
        reader.consume(len);
        read += len;
        if done {
            return Ok((read, complete));
        }
    }
}

/// Counts the remaining lines (a final line without a newline counts).
fn count_lines(reader: &mut impl BufRead) -> std::io::Result<u64> {
    let mut lines = 0;
    let mut last = b'\n';
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(lines + u64::from(last != b'\n'));
        }
        lines += memchr::memchr_iter(b'\n', buf).count() as u64;
        last = buf[buf.len() - 1];
        let len = buf.len();
        reader.consume(len);
    }
}

/// What to write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteRequest {
    /// The file.
    pub path: PathBuf,
    /// The whole new content.
    pub content: String,
}

/// The outcome of a write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteState {
    /// The file written (a symlink's target when the path was a symlink).
    pub path: PathBuf,
    /// Whether the file is new.
    pub created: bool,
    /// Bytes written.
    pub bytes: u64,
    /// Lines written.
    pub lines: u64,
    /// Size before, when it existed.
    pub previous_bytes: Option<u64>,
}

/// Writes a whole file atomically: parents are created, the text goes to a temporary file in the
/// same folder which then replaces the target, so a reader never sees half a file. An existing
/// file keeps its permissions; a symlink keeps pointing where it did and its target is replaced.
///
/// # Errors
///
/// The path is a directory, or an I/O failure.
pub fn write(request: &WriteRequest) -> Result<WriteState, ComputerError> {
    let target = match fs::canonicalize(&request.path) {
        Ok(real) => real,
        Err(_) => request.path.clone(),
    };
    let previous = fs::metadata(&target).ok();
    if previous.as_ref().is_some_and(fs::Metadata::is_dir) {
        return Err(ComputerError::IsDirectory { path: target });
    }
    write_atomic(&target, request.content.as_bytes(), previous.as_ref())?;
    Ok(WriteState {
        path: target,
        created: previous.is_none(),
        bytes: request.content.len() as u64,
        lines: text_lines(&request.content),
        previous_bytes: previous.map(|m| m.len()),
    })
}

/// Replaces `target` with `bytes` through a temporary file and a rename.
pub(crate) fn write_atomic(
    target: &Path,
    bytes: &[u8],
    previous: Option<&fs::Metadata>,
) -> Result<(), ComputerError> {
    let parent = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    fs::create_dir_all(parent).map_err(|e| ComputerError::io(parent, e))?;
    let mut temp = tempfile::Builder::new()
        .prefix(".toolhost-write-")
        .tempfile_in(parent)
        .map_err(|e| ComputerError::io(parent, e))?;
    temp.write_all(bytes).map_err(|e| ComputerError::io(temp.path(), e))?;
    temp.as_file().sync_all().map_err(|e| ComputerError::io(temp.path(), e))?;
    let permissions = match previous {
        Some(metadata) => metadata.permissions(),
        None => {
            // tempfile creates 0600; a new file should get the usual 0644 less the umask.
            use std::os::unix::fs::PermissionsExt;
            fs::Permissions::from_mode(0o644)
        }
    };
    fs::set_permissions(temp.path(), permissions).map_err(|e| ComputerError::io(temp.path(), e))?;
    temp.persist(target).map_err(|e| ComputerError::io(target, e.error))?;
    Ok(())
}

/// Lines in a text (a final line without a newline counts).
pub fn text_lines(text: &str) -> u64 {
    let newlines = memchr::memchr_iter(b'\n', text.as_bytes()).count() as u64;
    newlines + u64::from(!text.is_empty() && !text.ends_with('\n'))
}

/// Opens a regular file for reading, and nothing else: a FIFO, socket or device is refused
/// without being opened (a FIFO's open blocks until a writer comes, pinning a thread), and one
/// swapped in after the check is caught by opening without blocking and checking again.
pub(crate) fn open_regular(path: &Path) -> Result<(File, fs::Metadata), ComputerError> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let check = |metadata: &fs::Metadata| -> Result<(), ComputerError> {
        let kind = metadata.file_type();
        let what = if kind.is_dir() {
            return Err(ComputerError::IsDirectory { path: path.to_path_buf() });
        } else if kind.is_fifo() {
            "FIFO"
        } else if kind.is_socket() {
            "socket"
        } else if kind.is_char_device() {
            "character device"
        } else if kind.is_block_device() {
            "block device"
        } else {
            return Ok(());
        };
        Err(ComputerError::NotRegular { path: path.to_path_buf(), what })
    };
    check(&fs::metadata(path).map_err(|e| ComputerError::io(path, e))?)?;
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| ComputerError::io(path, e))?;
    let metadata = file.metadata().map_err(|e| ComputerError::io(path, e))?;
    check(&metadata)?;
    Ok((file, metadata))
}

/// Reads a whole text file for editing, refusing binary and oversized files.
pub(crate) fn read_text_for_edit(path: &Path, limit: u64) -> Result<(String, fs::Metadata), ComputerError> {
    let metadata = fs::metadata(path).map_err(|e| ComputerError::io(path, e))?;
    if metadata.is_dir() {
        return Err(ComputerError::IsDirectory { path: path.to_path_buf() });
    }
    if metadata.len() > limit {
        return Err(ComputerError::TooLarge {
            path: path.to_path_buf(),
            size: metadata.len(),
            limit,
            advice: "edit it with a command-line tool instead",
        });
    }
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    let (mut file, _) = open_regular(path)?;
    file.read_to_end(&mut bytes).map_err(|e| ComputerError::io(path, e))?;
    if looks_binary(&bytes) {
        return Err(ComputerError::Binary { path: path.to_path_buf(), size: metadata.len() });
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| ComputerError::Binary { path: path.to_path_buf(), size: metadata.len() })?;
    Ok((text, metadata))
}

/// What to list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListRequest {
    /// The directory.
    pub path: PathBuf,
    /// Include entries whose names start with a dot.
    pub include_hidden: bool,
    /// At most this many entries.
    pub limit: usize,
}

/// Kinds of directory entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// Anything else (socket, device, fifo).
    Other,
}

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// File name.
    pub name: String,
    /// Kind.
    pub kind: EntryKind,
    /// Size in bytes (files).
    pub size: u64,
    /// Modification time, seconds since the epoch.
    pub modified: Option<u64>,
}

/// The outcome of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListState {
    /// The directory.
    pub path: PathBuf,
    /// Entries: directories first, then by name.
    pub entries: Vec<Entry>,
    /// Entries in the directory in all (before the limit and the hidden filter).
    pub total: usize,
    /// Whether the limit cut the list.
    pub truncated: bool,
}

/// Lists one directory.
///
/// # Errors
///
/// Not found, not a directory, or I/O.
pub fn list(request: &ListRequest) -> Result<ListState, ComputerError> {
    let path = &request.path;
    let reader = fs::read_dir(path).map_err(|e| ComputerError::io(path, e))?;
    let mut entries = Vec::new();
    let mut total = 0;
    for entry in reader {
        let entry = entry.map_err(|e| ComputerError::io(path, e))?;
        total += 1;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !request.include_hidden && name.starts_with('.') {
            continue;
        }
        let metadata = entry.metadata().ok();
        let file_type = entry.file_type().ok();
        let kind = match file_type {
            Some(t) if t.is_symlink() => EntryKind::Symlink,
            Some(t) if t.is_dir() => EntryKind::Directory,
            Some(t) if t.is_file() => EntryKind::File,
            _ => EntryKind::Other,
        };
        entries.push(Entry {
            name,
            kind,
            size: metadata.as_ref().map_or(0, fs::Metadata::len),
            modified: metadata
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map(|d| d.as_secs()),
        });
    }
    entries.sort_by(|a, b| {
        (a.kind != EntryKind::Directory, &a.name).cmp(&(b.kind != EntryKind::Directory, &b.name))
    });
    let truncated = entries.len() > request.limit;
    entries.truncate(request.limit);
    Ok(ListState { path: path.clone(), entries, total, truncated })
}

/// One move: `from` becomes `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveItem {
    /// Source path.
    pub from: PathBuf,
    /// Destination path.
    pub to: PathBuf,
}

/// The outcome of one move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveResult {
    /// Source path.
    pub from: PathBuf,
    /// Destination path.
    pub to: PathBuf,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

/// The outcome of a batch of moves; each item succeeds or fails on its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveState {
    /// One result per requested move, in order.
    pub results: Vec<MoveResult>,
}

impl MoveState {
    /// How many moves failed.
    pub fn failures(&self) -> usize {
        self.results.iter().filter(|r| r.error.is_some()).count()
    }
}

/// Moves each item, creating destination parents; never overwrites an existing destination.
pub fn move_items(items: &[MoveItem]) -> MoveState {
    let results = items
        .iter()
        .map(|item| MoveResult {
            from: item.from.clone(),
            to: item.to.clone(),
            error: move_one(&item.from, &item.to).err().map(|e| e.to_string()),
        })
        .collect();
    MoveState { results }
}

fn move_one(from: &Path, to: &Path) -> Result<(), ComputerError> {
    fs::symlink_metadata(from).map_err(|e| ComputerError::io(from, e))?;
    if fs::symlink_metadata(to).is_ok() {
        return Err(ComputerError::AlreadyExists { path: to.to_path_buf() });
    }
    if let Some(parent) = to.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(|e| ComputerError::io(parent, e))?;
    }
    fs::rename(from, to).map_err(|e| ComputerError::io(from, e))
}

/// Renames `path` to `new_name` in the same directory.
///
/// # Errors
///
/// A name with a path separator, a missing source, an existing destination.
pub fn rename(path: &Path, new_name: &str) -> Result<MoveResult, ComputerError> {
    if new_name.is_empty() || new_name.contains('/') || new_name == "." || new_name == ".." {
        return Err(ComputerError::InvalidRequest(format!(
            "`{new_name}` is not a file name; give a bare name, or use moveFiles to move across folders"
        )));
    }
    let to = path.with_file_name(new_name);
    move_one(path, &to)?;
    Ok(MoveResult { from: path.to_path_buf(), to, error: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_at(
        path: &Path,
        offset: Option<u64>,
        limit: Option<u64>,
        limits: ReadLimits,
    ) -> Result<ReadState, ComputerError> {
        read(&ReadRequest { path: path.to_path_buf(), offset, limit }, limits)
    }

    #[test]
    fn line_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.txt");
        let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        fs::write(&path, &text).unwrap();
        let small = ReadLimits { max_lines: 4, max_bytes: 1000, max_line_chars: 100 };
        // (offset, limit) → (content first/last line, start, end, next, cut)
        type Case = (Option<u64>, Option<u64>, &'static str, u64, u64, Option<u64>, Option<ReadCut>);
        let cases: &[Case] = &[
            (None, None, "line 1\nline 2\nline 3\nline 4", 1, 4, Some(5), Some(ReadCut::Lines)),
            (Some(3), Some(2), "line 3\nline 4", 3, 4, Some(5), None),
            (Some(9), None, "line 9\nline 10", 9, 10, None, None),
            (Some(10), Some(100), "line 10", 10, 10, None, None),
        ];
        for &(offset, limit, content, start, end, next, cut) in cases {
            let state = read_at(&path, offset, limit, small).unwrap();
            assert_eq!(
                (state.content.as_str(), state.start_line, state.end_line, state.next_offset, state.cut),
                (content, start, end, next, cut),
                "offset {offset:?} limit {limit:?}"
            );
            assert_eq!(state.total_lines, 10);
        }
        let past = read_at(&path, Some(11), None, small).unwrap_err();
        assert!(matches!(past, ComputerError::OffsetPastEnd { total_lines: 10, .. }), "{past}");
    }

    #[test]
    fn byte_limit_long_lines_and_no_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.txt");
        fs::write(&path, format!("short\n{}\nlast", "x".repeat(5000))).unwrap();
        let limits = ReadLimits { max_lines: 100, max_bytes: 1_000_000, max_line_chars: 10 };
        let state = read_at(&path, None, None, limits).unwrap();
        assert_eq!(state.content, "short\nxxxxxxxxxx… [line truncated to 10 characters]\nlast");
        assert_eq!((state.total_lines, state.long_lines_cut, state.next_offset), (3, 1, None));

        let tight = ReadLimits { max_lines: 100, max_bytes: 12, max_line_chars: 100 };
        fs::write(&path, "aaaaa\nbbbbb\nccccc\nddddd\n").unwrap();
        let state = read_at(&path, None, None, tight).unwrap();
        assert_eq!(
            (state.content.as_str(), state.cut, state.next_offset, state.total_lines),
            ("aaaaa\nbbbbb", Some(ReadCut::Bytes), Some(3), 4)
        );
    }

    #[test]
    fn binary_and_directories_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.bin");
        fs::write(&path, b"abc\0def").unwrap();
        assert!(matches!(
            read_at(&path, None, None, ReadLimits::default()),
            Err(ComputerError::Binary { size: 7, .. })
        ));
        assert!(matches!(
            read_at(dir.path(), None, None, ReadLimits::default()),
            Err(ComputerError::IsDirectory { .. })
        ));
        assert!(matches!(
            read_at(&dir.path().join("nope"), None, None, ReadLimits::default()),
            Err(ComputerError::NotFound { .. })
        ));
    }

    #[test]
    fn atomic_write_keeps_permissions_and_symlinks() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("deep/er/file.sh");
        let state = write(&WriteRequest { path: target.clone(), content: "a\nb".into() }).unwrap();
        assert!(state.created);
        assert_eq!((state.bytes, state.lines), (3, 2));
        fs::set_permissions(&target, fs::Permissions::from_mode(0o755)).unwrap();
        let link = dir.path().join("link.sh");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let state = write(&WriteRequest { path: link.clone(), content: "new\n".into() }).unwrap();
        assert!(!state.created);
        assert_eq!(state.previous_bytes, Some(3));
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(fs::read_to_string(&target).unwrap(), "new\n");
        assert_eq!(fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o755);
        let leftovers: Vec<_> = fs::read_dir(target.parent().unwrap()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temp files left behind");
    }

    #[test]
    fn list_move_rename() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::write(root.join("b.txt"), "b").unwrap();
        fs::write(root.join(".hidden"), "").unwrap();
        fs::create_dir(root.join("a_dir")).unwrap();
        let state =
            list(&ListRequest { path: root.to_path_buf(), include_hidden: false, limit: 10 }).unwrap();
        let names: Vec<_> = state.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a_dir", "b.txt"]);
        assert_eq!(state.total, 3);

        let moved = move_items(&[
            MoveItem { from: root.join("b.txt"), to: root.join("sub/c.txt") },
            MoveItem { from: root.join("missing"), to: root.join("x") },
            MoveItem { from: root.join("a_dir"), to: root.join("sub/c.txt") },
        ]);
        assert_eq!(moved.failures(), 2);
        assert!(moved.results[1].error.as_deref().unwrap().contains("does not exist"));
        assert!(moved.results[2].error.as_deref().unwrap().contains("already exists"));
        assert_eq!(fs::read_to_string(root.join("sub/c.txt")).unwrap(), "b");

        let renamed = rename(&root.join("sub/c.txt"), "d.txt").unwrap();
        assert_eq!(renamed.to, root.join("sub/d.txt"));
        assert!(matches!(rename(&root.join("sub/d.txt"), "../e"), Err(ComputerError::InvalidRequest(_))));
    }
}
