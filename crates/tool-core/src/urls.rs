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
    fn schemes() {
        assert_eq!(scheme_of("skill://pdf/a.md"), Some(("skill", "pdf/a.md")));
        assert_eq!(scheme_of("journal://k"), Some(("journal", "k")));
        assert_eq!(scheme_of("/abs/path"), None);
        assert_eq!(scheme_of("dir/x://y"), None);
        assert_eq!(scheme_of("Skill://x"), None);
        assert_eq!(scheme_of("://x"), None);
    }
}
