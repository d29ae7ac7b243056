//! Internal URLs: `scheme://…` names that `readFile` reads like files — a skill's files
//! (`skill://NAME/PATH`) now, other schemes as their handlers are registered — with line
//! selectors on files and URLs alike (`:N-M`, `:N-`, `:N`) and `:raw` for the text without
//! line-range notes.
//!
//! A front end registers its readers in a [`UrlRouter`] among the [`crate::Services`]; the file
//! tools ask it for any path with a scheme it knows. Readers decide what a session may read: each
//! gets the call's [`CallContext`].

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::runtime::{CallContext, ToolOutput};

/// Which lines of a file or URL to read, from a `:N-M` suffix or the call's own arguments.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lines {
    /// First line, 1-based.
    pub offset: Option<u64>,
    /// How many lines.
    pub limit: Option<u64>,
    /// `:raw`: the text alone, without notes about the range.
    pub raw: bool,
}

/// A path or URL and the selector its suffix held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selected<'a> {
    /// The path or URL without its suffix.
    pub target: &'a str,
    /// The lines the suffix selects (all `None` without one).
    pub lines: Lines,
}

/// Splits a `:N-M`, `:N-`, `:N` or `:raw` suffix (also `:N-M:raw`) off `text`. Text without one
/// is returned whole. `N` counts from 1; `M` before `N` is not a selector.
pub fn select(text: &str) -> Selected<'_> {
    let mut target = text;
    let mut lines = Lines::default();
    if let Some(rest) = target.strip_suffix(":raw") {
        target = rest;
        lines.raw = true;
    }
    if let Some((head, range)) = target.rsplit_once(':')
        && !head.is_empty()
        && let Some((offset, limit)) = parse_range(range)
    {
        target = head;
        lines.offset = Some(offset);
        lines.limit = limit;
    }
    Selected { target, lines }
}

fn parse_range(range: &str) -> Option<(u64, Option<u64>)> {
    let digits = |s: &str| !s.is_empty() && s.len() <= 12 && s.bytes().all(|b| b.is_ascii_digit());
    match range.split_once('-') {
        Some((from, "")) if digits(from) => Some((from.parse().ok().filter(|n| *n > 0)?, None)),
        Some((from, to)) if digits(from) && digits(to) => {
            let (from, to): (u64, u64) = (from.parse().ok()?, to.parse().ok()?);
            (from > 0 && to >= from).then(|| (from, Some(to - from + 1)))
        }
        None if digits(range) => Some((range.parse().ok().filter(|n| *n > 0)?, Some(1))),
        _ => None,
    }
}

/// The scheme of `text` when it is an internal URL (`scheme://…`, the scheme lowercase letters,
/// digits, `+`, `-` or `.`, starting with a letter), with what follows `://`.
pub fn scheme_of(text: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_lowercase()
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '+' | '-' | '.')))
    .then_some((scheme, rest))
}

/// The most lines one read of an address returns (as `readFile` of a file).
pub const MAX_LINES: u64 = 2_000;
/// The most bytes of text one read of an address returns.
pub const MAX_BYTES: usize = 50 * 1024;

/// Characters of one line of an address's text: a longer line is read in pieces this long, each
/// counted as a line (a minified JSON output is one line; it is read on piece by piece).
pub const PIECE_CHARS: usize = 2_000;

/// The lines of `text` as addresses count them: its lines, each longer one in pieces of
/// [`PIECE_CHARS`] characters.
pub fn pieces(text: &str) -> impl Iterator<Item = &str> {
    text.lines().flat_map(|line| {
        let mut rest = line;
        let mut done = false;
        std::iter::from_fn(move || {
            if done {
                return None;
            }
            match rest.char_indices().nth(PIECE_CHARS) {
                Some((at, _)) => {
                    let (piece, after) = rest.split_at(at);
                    rest = after;
                    Some(piece)
                }
                None => {
                    done = true;
                    Some(rest)
                }
            }
        })
    })
}

/// The lines of `text` that `lines` selects (as [`pieces`] counts them), at most [`MAX_LINES`] and
/// [`MAX_BYTES`], with a note that says how to read on from `address` (unless `:raw`). `None`
/// when the first line asked for is past the end.
pub fn read_lines(text: &str, lines: Lines, address: &str) -> Option<String> {
    let total = pieces(text).count() as u64;
    let start = lines.offset.unwrap_or(1).max(1);
    if start > total.max(1) {
        return None;
    }
    let wanted = lines.limit.unwrap_or(MAX_LINES).clamp(1, MAX_LINES);
    let mut out = String::new();
    let mut end = start - 1;
    for line in pieces(text).skip((start - 1) as usize).take(wanted as usize) {
        if !out.is_empty() && out.len() + line.len() + 1 > MAX_BYTES {
            break;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(line);
        end += 1;
    }
    if !lines.raw && end < total {
        out.push_str(&format!(
            "\n\n[Showing lines {start}-{end} of {total} (a long line counts as pieces of {PIECE_CHARS} \
             characters). Read on with readFile \"{address}:{}-\".]",
            end + 1
        ));
    }
    Some(out)
}

/// `key` as the rest of an address: letters, digits and `-_.` as they are, anything else as
/// `%XX` (a `:` would read as a line selector, a `/` as a path).
pub fn encode(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for byte in key.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The key [`encode`] made (`None` for a malformed escape or bytes that are not UTF-8).
pub fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Reads one scheme's URLs.
pub trait UrlReader: Send + Sync + fmt::Debug {
    /// The scheme it reads (`skill`).
    fn scheme(&self) -> &'static str;

    /// One line on what the scheme names, for errors that list what can be read.
    fn describe(&self) -> &'static str;

    /// Reads `rest` (what follows `scheme://`, without its selector) for the call's session:
    /// the lines selected, as `readFile` returns a file (or an error the model can act on).
    fn read<'a>(&'a self, rest: &'a str, lines: Lines, context: &'a CallContext)
    -> BoxFuture<'a, ToolOutput>;
}

/// The readers a front end offers, by scheme.
#[derive(Debug, Clone, Default)]
pub struct UrlRouter {
    readers: Vec<Arc<dyn UrlReader>>,
}

impl UrlRouter {
    /// No readers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a reader (a later one for the same scheme replaces it).
    #[must_use]
    pub fn with(mut self, reader: Arc<dyn UrlReader>) -> Self {
        self.readers.retain(|r| r.scheme() != reader.scheme());
        self.readers.push(reader);
        self
    }

    /// The reader of `scheme`.
    pub fn reader(&self, scheme: &str) -> Option<&Arc<dyn UrlReader>> {
        self.readers.iter().find(|r| r.scheme() == scheme)
    }

    /// `scheme://` and what it names, one per line.
    pub fn describe(&self) -> String {
        self.readers
            .iter()
            .map(|r| format!("{}:// — {}", r.scheme(), r.describe()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors() {
        let s = select("skill://pdf/SKILL.md:10-40");
        assert_eq!(s.target, "skill://pdf/SKILL.md");
        assert_eq!(s.lines, Lines { offset: Some(10), limit: Some(31), raw: false });
        assert_eq!(select("a.rs:7").lines, Lines { offset: Some(7), limit: Some(1), raw: false });
        assert_eq!(select("a.rs:7-").lines, Lines { offset: Some(7), limit: None, raw: false });
        let raw = select("a.rs:3-4:raw");
        assert_eq!((raw.target, raw.lines), ("a.rs", Lines { offset: Some(3), limit: Some(2), raw: true }));
        assert_eq!(select("a.rs:raw").lines, Lines { raw: true, ..Lines::default() });
        for plain in ["a.rs", "c:\\x", "a.rs:0-3", "a.rs:9-3", "a.rs:x-3", ":12", "a.rs:-3"] {
            let s = select(plain);
            assert_eq!(s.target, plain, "{plain}");
            assert_eq!(s.lines, Lines::default(), "{plain}");
        }
    }

    #[test]
    fn keys_round_trip_and_lines_read_on() {
        for key in ["m1:call_0", "msg/1:c 2", "é%:", ""] {
            assert_eq!(decode(&encode(key)).as_deref(), Some(key));
            assert!(!encode(key).contains([':', '/']));
        }
        assert_eq!(decode("%4"), None);
        assert_eq!(decode("%zz"), None);
        let text = "a\nb\nc\nd";
        let first =
            read_lines(text, Lines { offset: Some(2), limit: Some(2), raw: false }, "journal://k").unwrap();
        assert!(first.starts_with("b\nc\n\n[Showing lines 2-3 of 4 "), "{first}");
        assert!(first.ends_with("Read on with readFile \"journal://k:4-\".]"), "{first}");
        assert_eq!(read_lines(text, Lines { offset: Some(4), ..Lines::default() }, "x").unwrap(), "d");
        assert_eq!(read_lines(text, Lines { offset: Some(9), ..Lines::default() }, "x"), None);
        let long = "é".repeat(MAX_BYTES);
        assert!(
            read_lines(&long, Lines::default(), "x").unwrap().len() <= MAX_BYTES,
            "cut at a char boundary"
        );
    }

    #[test]
    fn schemes() {
        assert_eq!(scheme_of("skill://pdf/a.md"), Some(("skill", "pdf/a.md")));
        assert_eq!(scheme_of("journal://k"), Some(("journal", "k")));
        assert_eq!(scheme_of("/abs/path"), None);
        assert_eq!(scheme_of("dir/x://y"), None);
        assert_eq!(scheme_of("Skill://x"), None);
        assert_eq!(scheme_of("://x"), None);
    }
}
