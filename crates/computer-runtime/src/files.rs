//! Reading, writing, listing and moving files (blocking; the runtime calls these off the async
//! threads).

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

use crate::beneath::Opener;
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
/// `memchr` over a fixed buffer, and lines after it are only counted. The file is opened once,
/// through `opener` (beneath the session's folders).
///
/// # Errors
///
/// Not found, a directory, a binary file (a NUL byte in the first 8 KiB), an offset past the end,
/// a path the session may not open.
pub fn read(opener: &Opener, request: &ReadRequest, limits: ReadLimits) -> Result<ReadState, ComputerError> {
    let path = &request.path;
    let (file, metadata) = open_regular(opener, path)?;
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
    /// For a text file written over: a unified diff from what it held (empty when it was new,
    /// unchanged, not text, or larger than [`DIFF_MAX_BYTES`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub diff: String,
}

/// A file written over is compared with what it held up to this size (larger ones get no diff).
pub const DIFF_MAX_BYTES: u64 = 1 << 20;

/// Writes a whole file atomically: parents are created, the text goes to a temporary file in the
/// same folder which then replaces the target, so a reader never sees half a file. An existing
/// file keeps its permissions; a symlink keeps pointing where it did and its target is replaced
/// (when the target is one the session may write). Every folder is opened through `opener`, and
/// the temporary file is made and renamed inside the handle of the checked parent.
///
/// # Errors
///
/// The path is a directory, a path the session may not write, or an I/O failure.
pub fn write(opener: &Opener, request: &WriteRequest) -> Result<WriteState, ComputerError> {
    let (target, previous, before) = match opener.open(&request.path, OFlags::PATH) {
        Ok(fd) => {
            let stat = rustix::fs::fstat(&fd).map_err(|e| ComputerError::io(&request.path, e.into()))?;
            let real = crate::beneath::real_path(&fd).unwrap_or_else(|| request.path.clone());
            // What it held, read through the same handle, for the diff a person sees.
            let before = (FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile
                && (stat.st_size as u64) <= DIFF_MAX_BYTES)
                .then(|| crate::beneath::reopen(&fd, OFlags::RDONLY).ok())
                .flatten()
                .and_then(|fd| {
                    let mut bytes = Vec::new();
                    File::from(fd).take(DIFF_MAX_BYTES).read_to_end(&mut bytes).ok()?;
                    String::from_utf8(bytes).ok()
                });
            (real, Some(stat), before)
        }
        Err(ComputerError::NotFound { .. }) => (request.path.clone(), None, None),
        Err(other) => return Err(other),
    };
    if previous.as_ref().is_some_and(|stat| FileType::from_raw_mode(stat.st_mode) == FileType::Directory) {
        return Err(ComputerError::IsDirectory { path: target });
    }
    let mode = previous.as_ref().map(|stat| stat.st_mode & 0o7777);
    write_atomic(opener, &target, request.content.as_bytes(), mode)?;
    let diff = match &before {
        Some(old) if *old != request.content => {
            crate::edit::unified_diff(old, &request.content, &target.display().to_string())
        }
        _ => String::new(),
    };
    Ok(WriteState {
        diff,
        path: target,
        created: previous.is_none(),
        bytes: request.content.len() as u64,
        lines: text_lines(&request.content),
        previous_bytes: previous.map(|stat| stat.st_size as u64),
    })
}

/// Replaces `target` with `bytes` through a temporary file and a rename, both inside the handle of
/// `target`'s parent (made when missing); the file gets `mode`, or `0644` when new.
pub(crate) fn write_atomic(
    opener: &Opener,
    target: &Path,
    bytes: &[u8],
    mode: Option<u32>,
) -> Result<(), ComputerError> {
    let parent = opener.parent(target, true)?;
    let io = |e: Errno| ComputerError::io(target, e.into());
    let (temp_name, fd) = create_temp(&parent.fd).map_err(io)?;
    let result = (|| {
        let mut file = File::from(fd);
        file.write_all(bytes).map_err(|e| ComputerError::io(target, e))?;
        file.sync_all().map_err(|e| ComputerError::io(target, e))?;
        // An explicit mode, so the umask does not decide what an existing file keeps.
        rustix::fs::fchmod(&file, Mode::from_raw_mode(mode.unwrap_or(0o644))).map_err(io)?;
        rustix::fs::renameat(&parent.fd, &temp_name, &parent.fd, &parent.name).map_err(io)
    })();
    if result.is_err() {
        let _ = rustix::fs::unlinkat(&parent.fd, &temp_name, AtFlags::empty());
    }
    result
}

/// A new temporary file in the folder `dir`, never through a link.
fn create_temp(dir: &OwnedFd) -> Result<(String, OwnedFd), Errno> {
    let mut attempts = 0;
    loop {
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes).map_err(|_| Errno::IO)?;
        let name = format!(".toolhost-write-{:016x}", u64::from_le_bytes(bytes));
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(dir, name.as_str(), flags, Mode::from_raw_mode(0o600)) {
            Err(Errno::EXIST) if attempts < 16 => attempts += 1,
            other => return other.map(|fd| (name, fd)),
        }
    }
}

/// Lines in a text (a final line without a newline counts).
pub fn text_lines(text: &str) -> u64 {
    let newlines = memchr::memchr_iter(b'\n', text.as_bytes()).count() as u64;
    newlines + u64::from(!text.is_empty() && !text.ends_with('\n'))
}

/// Opens a regular file for reading, and nothing else: a FIFO, socket or device is refused
/// without being opened (a FIFO's open blocks until a writer comes, pinning a thread). The file is
/// first opened as a handle that reads nothing (`O_PATH`), checked, then opened for reading
/// through that very handle, so the file read is the file checked.
pub(crate) fn open_regular(opener: &Opener, path: &Path) -> Result<(File, fs::Metadata), ComputerError> {
    let handle = opener.open(path, OFlags::PATH)?;
    let stat = rustix::fs::fstat(&handle).map_err(|e| ComputerError::io(path, e.into()))?;
    check_regular(path, FileType::from_raw_mode(stat.st_mode))?;
    let fd = crate::beneath::reopen(&handle, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY)
        .map_err(|e| ComputerError::io(path, e.into()))?;
    let file = File::from(fd);
    let metadata = file.metadata().map_err(|e| ComputerError::io(path, e))?;
    check_regular(path, FileType::from_raw_mode(std::os::unix::fs::MetadataExt::mode(&metadata)))?;
    Ok((file, metadata))
}

fn check_regular(path: &Path, kind: FileType) -> Result<(), ComputerError> {
    let what = match kind {
        FileType::RegularFile => return Ok(()),
        FileType::Directory => return Err(ComputerError::IsDirectory { path: path.to_path_buf() }),
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        _ => "special file",
    };
    Err(ComputerError::NotRegular { path: path.to_path_buf(), what })
}

/// Reads a whole text file for editing, refusing binary and oversized files; returns its text,
/// its mode and where it really is (a link's target, to be written in its place).
pub(crate) fn read_text_for_edit(
    opener: &Opener,
    path: &Path,
    limit: u64,
) -> Result<(String, u32, PathBuf), ComputerError> {
    let (mut file, metadata) = open_regular(opener, path)?;
    if metadata.len() > limit {
        return Err(ComputerError::TooLarge {
            path: path.to_path_buf(),
            size: metadata.len(),
            limit,
            advice: "edit it with a command-line tool instead",
        });
    }
    let real = crate::beneath::real_path(&file).unwrap_or_else(|| path.to_path_buf());
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    // Read no more than the limit, even if the file grew since it was checked.
    (&mut file).take(limit + 1).read_to_end(&mut bytes).map_err(|e| ComputerError::io(path, e))?;
    if bytes.len() as u64 > limit {
        return Err(ComputerError::TooLarge {
            path: path.to_path_buf(),
            size: bytes.len() as u64,
            limit,
            advice: "edit it with a command-line tool instead",
        });
    }
    if looks_binary(&bytes) {
        return Err(ComputerError::Binary { path: path.to_path_buf(), size: metadata.len() });
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| ComputerError::Binary { path: path.to_path_buf(), size: metadata.len() })?;
    Ok((text, std::os::unix::fs::MetadataExt::mode(&metadata) & 0o7777, real))
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

/// Lists one directory, read through a handle opened beneath the session's folders.
///
/// # Errors
///
/// Not found, not a directory, a path the session may not open, or I/O.
pub fn list(opener: &Opener, request: &ListRequest) -> Result<ListState, ComputerError> {
    let path = &request.path;
    let io = |e: Errno| ComputerError::io(path, e.into());
    let dir = opener.open(path, OFlags::RDONLY | OFlags::DIRECTORY)?;
    let reader = rustix::fs::Dir::read_from(&dir).map_err(io)?;
    let mut entries = Vec::new();
    let mut total = 0;
    for entry in reader {
        let entry = entry.map_err(io)?;
        let raw = entry.file_name().to_bytes();
        if raw == b"." || raw == b".." {
            continue;
        }
        total += 1;
        let name = String::from_utf8_lossy(raw).into_owned();
        if !request.include_hidden && name.starts_with('.') {
            continue;
        }
        // The entry itself, never what a link in it points at.
        let stat = rustix::fs::statat(&dir, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW).ok();
        let kind = match stat.as_ref().map(|s| FileType::from_raw_mode(s.st_mode)) {
            Some(FileType::Symlink) => EntryKind::Symlink,
            Some(FileType::Directory) => EntryKind::Directory,
            Some(FileType::RegularFile) => EntryKind::File,
            _ => EntryKind::Other,
        };
        entries.push(Entry {
            name,
            kind,
            size: stat.as_ref().map_or(0, |s| s.st_size as u64),
            modified: stat.as_ref().and_then(|s| u64::try_from(s.st_mtime).ok()),
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
/// Both parents are opened beneath the session's folders and the rename happens between their
/// handles (`RENAME_NOREPLACE`, so a destination that appears meanwhile is not overwritten).
pub fn move_items(opener: &Opener, items: &[MoveItem]) -> MoveState {
    let results = items
        .iter()
        .map(|item| MoveResult {
            from: item.from.clone(),
            to: item.to.clone(),
            error: move_one(opener, &item.from, &item.to).err().map(|e| e.to_string()),
        })
        .collect();
    MoveState { results }
}

fn move_one(opener: &Opener, from: &Path, to: &Path) -> Result<(), ComputerError> {
    let source = opener.parent(from, false)?;
    rustix::fs::statat(&source.fd, &source.name, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| ComputerError::io(from, e.into()))?;
    let destination = opener.parent(to, true)?;
    if rustix::fs::statat(&destination.fd, &destination.name, AtFlags::SYMLINK_NOFOLLOW).is_ok() {
        return Err(ComputerError::AlreadyExists { path: to.to_path_buf() });
    }
    let renamed = rustix::fs::renameat_with(
        &source.fd,
        &source.name,
        &destination.fd,
        &destination.name,
        RenameFlags::NOREPLACE,
    );
    match renamed {
        Err(Errno::EXIST) => Err(ComputerError::AlreadyExists { path: to.to_path_buf() }),
        // A filesystem without RENAME_NOREPLACE: the check above stands in for it.
        Err(Errno::INVAL | Errno::NOSYS) => {
            rustix::fs::renameat(&source.fd, &source.name, &destination.fd, &destination.name)
                .map_err(|e| ComputerError::io(from, e.into()))
        }
        Err(errno) => Err(ComputerError::io(from, errno.into())),
        Ok(()) => Ok(()),
    }
}

/// Renames `path` to `new_name` in the same directory.
///
/// # Errors
///
/// A name with a path separator, a missing source, an existing destination.
pub fn rename(opener: &Opener, path: &Path, new_name: &str) -> Result<MoveResult, ComputerError> {
    if new_name.is_empty() || new_name.contains('/') || new_name == "." || new_name == ".." {
        return Err(ComputerError::InvalidRequest(format!(
            "`{new_name}` is not a file name; give a bare name, or use moveFiles to move across folders"
        )));
    }
    let to = path.with_file_name(new_name);
    move_one(opener, path, &to)?;
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
        read(
            &Opener::rooted(path.parent().unwrap()),
            &ReadRequest { path: path.to_path_buf(), offset, limit },
            limits,
        )
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
        let opener = Opener::rooted(dir.path());
        let state = write(&opener, &WriteRequest { path: target.clone(), content: "a\nb".into() }).unwrap();
        assert!(state.created);
        assert_eq!((state.bytes, state.lines), (3, 2));
        fs::set_permissions(&target, fs::Permissions::from_mode(0o755)).unwrap();
        let link = dir.path().join("link.sh");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let state = write(&opener, &WriteRequest { path: link.clone(), content: "new\n".into() }).unwrap();
        assert!(!state.created);
        assert_eq!(state.previous_bytes, Some(3));
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(fs::read_to_string(&target).unwrap(), "new\n");
        assert_eq!(fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o755);
        let leftovers: Vec<_> = fs::read_dir(target.parent().unwrap()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temp files left behind");
    }

    #[test]
    fn a_file_written_over_carries_a_diff_with_plain_headers() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let opener = Opener::rooted(&root);
        let path = root.join("notes.txt");
        let created =
            write(&opener, &WriteRequest { path: path.clone(), content: "one\ntwo\n".into() }).unwrap();
        assert_eq!(created.diff, "", "a new file has no diff");
        let over = write(&opener, &WriteRequest { path: path.clone(), content: "one\n2\n".into() }).unwrap();
        let shown = path.display().to_string();
        assert!(over.diff.starts_with(&format!("--- {shown}\n+++ {shown}\n@@")), "{}", over.diff);
        assert!(over.diff.contains("-two\n+2\n"), "{}", over.diff);
        let same = write(&opener, &WriteRequest { path, content: "one\n2\n".into() }).unwrap();
        assert_eq!(same.diff, "", "nothing changed");
    }

    #[test]
    fn list_move_rename() {
        let dir = tempfile::tempdir().unwrap();
        let root = &dir.path().canonicalize().unwrap();
        let opener = Opener::rooted(root);
        fs::write(root.join("b.txt"), "b").unwrap();
        fs::write(root.join(".hidden"), "").unwrap();
        fs::create_dir(root.join("a_dir")).unwrap();
        let state =
            list(&opener, &ListRequest { path: root.to_path_buf(), include_hidden: false, limit: 10 })
                .unwrap();
        let names: Vec<_> = state.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a_dir", "b.txt"]);
        assert_eq!(state.total, 3);

        let moved = move_items(
            &opener,
            &[
                MoveItem { from: root.join("b.txt"), to: root.join("sub/c.txt") },
                MoveItem { from: root.join("missing"), to: root.join("x") },
                MoveItem { from: root.join("a_dir"), to: root.join("sub/c.txt") },
            ],
        );
        assert_eq!(moved.failures(), 2);
        assert!(moved.results[1].error.as_deref().unwrap().contains("does not exist"));
        assert!(moved.results[2].error.as_deref().unwrap().contains("already exists"));
        assert_eq!(fs::read_to_string(root.join("sub/c.txt")).unwrap(), "b");

        let renamed = rename(&opener, &root.join("sub/c.txt"), "d.txt").unwrap();
        assert_eq!(renamed.to, root.join("sub/d.txt"));
        assert!(matches!(
            rename(&opener, &root.join("sub/d.txt"), "../e"),
            Err(ComputerError::InvalidRequest(_))
        ));
    }
}
