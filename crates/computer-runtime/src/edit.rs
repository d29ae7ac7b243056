//! Find-and-replace edits on a file's text, for the agent's "edit file" tool.
//!
//! This module is a pure text engine: it never touches the file system. The
//! caller reads the file, calls [`apply_edits`], and writes
//! [`EditOutcome::new_content`] back.
//!
//! Matching is exact first. Only when an `old_text` is not found verbatim does
//! a fuzzy fallback run, which forgives the differences language models
//! typically introduce when they retype text: typographic quotes and dashes,
//! exotic spaces, compatibility characters and trailing whitespace. Every
//! [`EditError`] message is written to be read by the model and says what to
//! do next.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt::Write as _;
use std::ops::Range;
use std::time::Duration;

use memchr::memmem;
use similar::{DiffTag, TextDiff};
use unicode_normalization::UnicodeNormalization;

const BOM: char = '\u{FEFF}';

/// Below this similarity the "closest text" hint is more likely to mislead
/// than to help, so it is not shown.
const HINT_MIN_SIMILARITY: f32 = 0.5;
/// Longer `old_text`s get no hint: the message would be huge and the scan slow.
const HINT_MAX_OLD_LINES: usize = 200;
/// Upper bound on line-to-line comparisons for the hint scan. Large inputs
/// compare only a sample of `old_text`'s lines per window, and files with
/// more windows than this get no hint at all, so the scan stays linear.
const HINT_LINE_PAIR_BUDGET: usize = 400_000;
/// Windows that get the precise (and costlier) similarity after the scan.
const HINT_FINALISTS: usize = 3;
/// Keeps the precise similarity from running away on long, dissimilar texts.
const HINT_DIFF_TIMEOUT: Duration = Duration::from_millis(50);
/// Lines of the hint shown in the error message.
const HINT_MAX_SHOWN_LINES: usize = 40;

/// One replacement requested by the model.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EditSpec {
    /// Text to find. Must occur exactly once unless `replace_all` is set.
    pub old_text: String,
    /// Text that replaces `old_text`, inserted as given.
    pub new_text: String,
    /// Replace every (non-overlapping) occurrence instead of requiring a unique one.
    #[serde(default)]
    pub replace_all: bool,
}

/// What applying the edits produced.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EditOutcome {
    /// The whole new file text, with the original's BOM and dominant line ending.
    pub new_content: String,
    /// Total number of replaced occurrences over all edits.
    pub replacements: usize,
    /// True if any edit matched only through the fuzzy fallback.
    pub fuzzy: bool,
    /// Unified diff (3 lines of context) of the old and new text, with headers
    /// `a/<path>` and `b/<path>`, computed on LF-normalised text.
    pub diff: String,
    /// 1-based line of the first change in the new text.
    pub first_changed_line: usize,
    /// Lines added according to the diff.
    pub lines_added: usize,
    /// Lines removed according to the diff.
    pub lines_removed: usize,
}

/// The part of the file that most resembles an `old_text` that was not found.
#[derive(Debug, Clone, PartialEq)]
pub struct Closest {
    /// 1-based line where the candidate starts.
    pub start_line: usize,
    /// The candidate lines, LF-separated, without a trailing newline.
    pub text: String,
    /// Similarity to `old_text`, from 0.0 (unrelated) to 1.0 (identical).
    pub similarity: f32,
}

// `similarity` is always a finite ratio, never NaN, so equality is reflexive.
impl Eq for Closest {}

/// Why the edits could not be applied.
///
/// `edit`, `first` and `second` are 0-based indexes into the `edits` slice;
/// the messages show them 1-based, as the model numbers its edits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// The call contained no edits at all.
    #[error(
        "no edits were given; pass at least one edit with old_text (the exact text to replace) and new_text"
    )]
    NoEdits,
    /// An edit's `old_text` is empty.
    #[error(
        "edit {}: old_text is empty; copy the exact text to replace from the file. To create a new file or overwrite a whole file, use the write tool instead",
        .edit + 1
    )]
    EmptyOldText {
        /// Index of the offending edit.
        edit: usize,
    },
    /// An edit's `old_text` occurs nowhere in the file, not even fuzzily.
    #[error("edit {}: {}", .edit + 1, describe_not_found(.closest.as_ref()))]
    NotFound {
        /// Index of the offending edit.
        edit: usize,
        /// The most similar part of the file, if anything is similar enough.
        closest: Option<Closest>,
    },
    /// An edit's `old_text` occurs several times and `replace_all` is not set.
    #[error(
        "edit {}: old_text occurs {count} times in the file; add surrounding lines to make it unique, or set replace_all to replace every occurrence",
        .edit + 1
    )]
    Ambiguous {
        /// Index of the offending edit.
        edit: usize,
        /// Number of occurrences found (overlapping ones included).
        count: usize,
    },
    /// Two edits matched overlapping parts of the file.
    #[error(
        "edits {} and {} overlap in the file; merge them into one edit, or shorten their old_text so they cover disjoint parts of the file",
        .first + 1,
        .second + 1
    )]
    Overlap {
        /// Index of the earlier of the two edits.
        first: usize,
        /// Index of the later of the two edits.
        second: usize,
    },
    /// Applying the edits would leave the file unchanged.
    #[error(
        "the edit changes nothing: old_text and new_text are identical (or the edits cancel out). Put the intended change into new_text; if the file already contains it, no edit is needed"
    )]
    NoOp,
}

fn describe_not_found(closest: Option<&Closest>) -> String {
    const ADVICE: &str = "Re-read the file and copy the exact text, including whitespace.";
    let Some(closest) = closest else {
        return format!(
            "old_text was not found in the file, and nothing in the file closely resembles it. {ADVICE}"
        );
    };
    let mut message = format!(
        "old_text was not found in the file. The closest text ({:.0}% similar) is at line {}:\n",
        closest.similarity * 100.0,
        closest.start_line
    );
    let lines: Vec<&str> = closest.text.split('\n').collect();
    for (number, line) in (closest.start_line..).zip(lines.iter().take(HINT_MAX_SHOWN_LINES)) {
        let _ = writeln!(message, "{number:>6}\t{line}");
    }
    if lines.len() > HINT_MAX_SHOWN_LINES {
        let _ = writeln!(message, "   ... ({} more lines)", lines.len() - HINT_MAX_SHOWN_LINES);
    }
    message.push_str(ADVICE);
    message
}

/// Applies `edits` to `original` and returns the new text with a diff.
///
/// Every edit is matched against the original text, not against the result
/// of earlier edits, and all replacements are applied together; matches of
/// different edits must not overlap. A leading BOM is preserved, and the new
/// text uses the original's dominant line ending (CRLF or LF) throughout;
/// matching itself is done on LF text, with CRLF in `old_text`/`new_text`
/// normalised to LF. `display_path` only appears in the diff headers.
///
/// An `old_text` that is not found verbatim is retried fuzzily: typographic
/// quotes, dashes and spaces, NFKC compatibility characters and trailing
/// whitespace at line ends are ignored when comparing. The replaced range is
/// the matching range of the original text and `new_text` is inserted as
/// given.
///
/// # Errors
///
/// Fails without changing anything if there are no edits, an `old_text` is
/// empty, not found or (without `replace_all`) not unique, two edits overlap,
/// or the result equals the original. See [`EditError`].
pub fn apply_edits(original: &str, display_path: &str, edits: &[EditSpec]) -> Result<EditOutcome, EditError> {
    if edits.is_empty() {
        return Err(EditError::NoEdits);
    }
    let (bom, body) = match original.strip_prefix(BOM) {
        Some(rest) => (true, rest),
        None => (false, original),
    };
    let crlf = uses_crlf(body);
    let text = to_lf(body);

    let new_texts: Vec<Cow<'_, str>> = edits.iter().map(|e| to_lf(&e.new_text)).collect();
    // Built on first use: most edits match exactly and never need it.
    let mut fuzzy_text: Option<Normalized> = None;
    let mut fuzzy = false;
    let mut replacements: Vec<Replacement> = Vec::new();

    for (index, edit) in edits.iter().enumerate() {
        let old = to_lf(&edit.old_text);
        if old.is_empty() {
            return Err(EditError::EmptyOldText { edit: index });
        }
        let ambiguous = |count| EditError::Ambiguous { edit: index, count };
        let mut ranges = find_matches(&text, &old, edit.replace_all).map_err(ambiguous)?;
        if ranges.is_empty() {
            let haystack = fuzzy_text.get_or_insert_with(|| Normalized::new(&text));
            let needle = Normalized::new(&old).text;
            if !needle.is_empty() {
                ranges = find_matches(&haystack.text, &needle, edit.replace_all)
                    .map_err(ambiguous)?
                    .into_iter()
                    .map(|range| haystack.source_range(&text, range))
                    .collect();
            }
            if ranges.is_empty() {
                return Err(EditError::NotFound { edit: index, closest: closest_match(&text, &old) });
            }
            fuzzy = true;
        }
        replacements.extend(ranges.into_iter().map(|range| Replacement { range, edit: index }));
    }

    replacements.sort_by_key(|r| (r.range.start, r.range.end));
    // Sorted by start, so checking neighbours is enough to find any overlap.
    if let Some(pair) = replacements.windows(2).find(|pair| pair[1].range.start < pair[0].range.end) {
        let (a, b) = (pair[0].edit, pair[1].edit);
        return Err(EditError::Overlap { first: a.min(b), second: a.max(b) });
    }

    let mut new_lf = String::with_capacity(text.len());
    let mut cursor = 0;
    for replacement in &replacements {
        new_lf.push_str(&text[cursor..replacement.range.start]);
        new_lf.push_str(&new_texts[replacement.edit]);
        cursor = replacement.range.end;
    }
    new_lf.push_str(&text[cursor..]);
    if new_lf == text {
        return Err(EditError::NoOp);
    }

    let summary = DiffSummary::new(&text, &new_lf, display_path);
    let mut new_content = String::with_capacity(new_lf.len() + 3);
    if bom {
        new_content.push(BOM);
    }
    if crlf {
        new_content.push_str(&new_lf.replace('\n', "\r\n"));
    } else {
        new_content.push_str(&new_lf);
    }

    Ok(EditOutcome {
        new_content,
        replacements: replacements.len(),
        fuzzy,
        diff: summary.unified,
        first_changed_line: summary.first_changed_line,
        lines_added: summary.lines_added,
        lines_removed: summary.lines_removed,
    })
}

/// The diff-derived parts of an [`EditOutcome`].
struct DiffSummary {
    unified: String,
    first_changed_line: usize,
    lines_added: usize,
    lines_removed: usize,
}

/// A unified diff of `old` to `new` with three lines of context. Headers name the file as
/// `a/PATH` and `b/PATH` for a relative path, and as the path itself for an absolute one (git's
/// `a/` before a `/` would read `a//tmp/…`).
pub fn unified_diff(old: &str, new: &str, display_path: &str) -> String {
    unified_of(&TextDiff::from_lines(old, new), display_path)
}

fn unified_of<'a>(diff: &'a TextDiff<'a, 'a, 'a, str>, display_path: &str) -> String {
    let (from, to) = if display_path.starts_with('/') {
        (display_path.to_owned(), display_path.to_owned())
    } else {
        (format!("a/{display_path}"), format!("b/{display_path}"))
    };
    diff.unified_diff().context_radius(3).header(&from, &to).to_string()
}

impl DiffSummary {
    fn new(old: &str, new: &str, display_path: &str) -> Self {
        let diff = TextDiff::from_lines(old, new);
        let mut summary = DiffSummary {
            unified: unified_of(&diff, display_path),
            first_changed_line: 0,
            lines_added: 0,
            lines_removed: 0,
        };
        for op in diff.ops() {
            let (tag, old_range, new_range) = op.as_tag_tuple();
            if tag == DiffTag::Equal {
                continue;
            }
            if summary.first_changed_line == 0 {
                summary.first_changed_line = new_range.start + 1;
            }
            summary.lines_removed += old_range.len();
            summary.lines_added += new_range.len();
        }
        // Callers only diff texts that differ, so a change was always found;
        // keep the field 1-based regardless.
        summary.first_changed_line = summary.first_changed_line.max(1);
        summary
    }
}

/// A matched byte range of the LF text and the edit whose `new_text` replaces it.
struct Replacement {
    range: Range<usize>,
    edit: usize,
}

/// Whether CRLF is the dominant line ending; a tie goes to the first ending.
fn uses_crlf(text: &str) -> bool {
    let bytes = text.as_bytes();
    let crlf = memmem::find_iter(bytes, b"\r\n").count();
    let lf_only = memchr::memchr_iter(b'\n', bytes).count() - crlf;
    match crlf.cmp(&lf_only) {
        Ordering::Greater => true,
        Ordering::Less => false,
        Ordering::Equal => memchr::memchr(b'\n', bytes).is_some_and(|at| at > 0 && bytes[at - 1] == b'\r'),
    }
}

fn to_lf(text: &str) -> Cow<'_, str> {
    if memmem::find(text.as_bytes(), b"\r\n").is_some() {
        Cow::Owned(text.replace("\r\n", "\n"))
    } else {
        Cow::Borrowed(text)
    }
}

/// Byte ranges where `needle` occurs in `haystack`.
///
/// With `all`, every non-overlapping occurrence. Otherwise the single
/// occurrence, or `Err(count)` when there are several; occurrences that
/// overlap each other count too, since replacing either one would be a guess.
/// An empty vector means no occurrence.
fn find_matches(haystack: &str, needle: &str, all: bool) -> Result<Vec<Range<usize>>, usize> {
    let (hay, pattern) = (haystack.as_bytes(), needle.as_bytes());
    let ranges: Vec<Range<usize>> =
        memmem::find_iter(hay, pattern).map(|start| start..start + pattern.len()).collect();
    if all || ranges.is_empty() {
        return Ok(ranges);
    }
    let count = match ranges.as_slice() {
        // The scan above skips occurrences that start inside the one it found,
        // and only those can be missing, so look for them in that stretch.
        [only] => {
            let stretch = &hay[only.start..hay.len().min(only.end + pattern.len() - 1)];
            let finder = memmem::Finder::new(pattern);
            let mut count = 0;
            let mut from = 0;
            while let Some(at) = finder.find(&stretch[from..]) {
                count += 1;
                from += at + 1;
            }
            count
        }
        many => many.len(),
    };
    if count > 1 { Err(count) } else { Ok(ranges) }
}

/// Text folded for fuzzy matching, remembering where each byte came from.
struct Normalized {
    text: String,
    /// For each byte of `text`, the byte offset in the source of the
    /// character that produced it.
    origin: Vec<usize>,
}

impl Normalized {
    fn new(source: &str) -> Self {
        let mut text = String::with_capacity(source.len());
        let mut origin = Vec::with_capacity(source.len());
        let mut line_start = 0;
        for (offset, c) in source.char_indices() {
            if c == '\n' {
                trim_line_end(&mut text, &mut origin, line_start);
                text.push('\n');
                origin.push(offset);
                line_start = text.len();
            } else {
                push_folded(c, &mut text);
                origin.resize(text.len(), offset);
            }
        }
        trim_line_end(&mut text, &mut origin, line_start);
        Normalized { text, origin }
    }

    /// Maps a non-empty byte range of `self.text` back to `source`, widened to
    /// whole source characters.
    fn source_range(&self, source: &str, range: Range<usize>) -> Range<usize> {
        let start = self.origin[range.start];
        let last = self.origin[range.end - 1];
        let end = last + source[last..].chars().next().map_or(0, char::len_utf8);
        start..end
    }
}

fn trim_line_end(text: &mut String, origin: &mut Vec<usize>, line_start: usize) {
    let kept = text[line_start..].trim_end_matches([' ', '\t']).len() + line_start;
    text.truncate(kept);
    origin.truncate(kept);
}

fn push_folded(c: char, out: &mut String) {
    if c.is_ascii() {
        out.push(c);
    } else if let Some(folded) = fold_typography(c) {
        out.push(folded);
    } else {
        // Typography is folded before NFKC too, because NFKC would turn e.g.
        // a double prime into two primes rather than one quote.
        out.extend(std::iter::once(c).nfkc().map(|n| fold_typography(n).unwrap_or(n)));
    }
}

/// The ASCII character models tend to type in place of `c`.
fn fold_typography(c: char) -> Option<char> {
    match c {
        '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' | '\u{2032}' => Some('\''),
        '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' | '\u{2033}' => Some('"'),
        '\u{2010}'..='\u{2015}' | '\u{2212}' => Some('-'),
        '\u{00A0}' | '\u{2000}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => Some(' '),
        _ => None,
    }
}

/// Lines of LF text, without a phantom empty line after a final newline.
fn split_lines(text: &str) -> Vec<&str> {
    let text = text.strip_suffix('\n').unwrap_or(text);
    text.split('\n').collect()
}

/// Finds the window of the file, as many lines long as `old`, that most
/// resembles `old`.
///
/// Windows are ranked cheaply by aligned line-to-line bigram similarity
/// (on trimmed lines, so wrong indentation does not hide the right place),
/// then the best few are scored precisely with a character diff.
fn closest_match(text: &str, old: &str) -> Option<Closest> {
    let file_lines = split_lines(text);
    let old_lines = split_lines(old);
    if old_lines.len() > HINT_MAX_OLD_LINES {
        return None;
    }
    let width = old_lines.len().min(file_lines.len());
    let windows = file_lines.len() - width + 1;
    if windows > HINT_LINE_PAIR_BUDGET {
        return None;
    }
    let probes = (HINT_LINE_PAIR_BUDGET / windows).clamp(1, width);
    let probe_offsets: Vec<usize> = (0..probes).map(|k| k * width / probes).collect();
    let old_grams: Vec<Vec<u64>> = probe_offsets.iter().map(|&offset| bigrams(old_lines[offset])).collect();
    let file_grams: Vec<Vec<u64>> = file_lines.iter().map(|line| bigrams(line)).collect();

    let mut ranked: Vec<(f32, usize)> = (0..windows)
        .map(|start| {
            let total: f32 = probe_offsets
                .iter()
                .zip(&old_grams)
                .map(|(&offset, grams)| dice(grams, &file_grams[start + offset]))
                .sum();
            (total / probes as f32, start)
        })
        .collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));

    let old = old.strip_suffix('\n').unwrap_or(old);
    ranked
        .iter()
        .take(HINT_FINALISTS)
        .map(|&(_, start)| {
            let candidate = file_lines[start..start + width].join("\n");
            let similarity =
                TextDiff::configure().timeout(HINT_DIFF_TIMEOUT).diff_chars(old, candidate.as_str()).ratio();
            Closest { start_line: start + 1, text: candidate, similarity }
        })
        // `max_by` keeps the last of equals; reversing makes earlier lines win ties.
        .rev()
        .max_by(|a, b| a.similarity.total_cmp(&b.similarity))
        .filter(|closest| closest.similarity >= HINT_MIN_SIMILARITY)
}

/// Sorted character bigrams of the trimmed line, padded at both ends so that
/// even empty and one-character lines have some.
fn bigrams(line: &str) -> Vec<u64> {
    const EDGE: u64 = 0x11_0000; // not a valid char, so it cannot collide
    let mut previous = EDGE;
    let mut grams: Vec<u64> = line
        .trim()
        .chars()
        .map(|c| {
            let gram = previous << 32 | u64::from(c);
            previous = u64::from(c);
            gram
        })
        .collect();
    grams.push(previous << 32 | EDGE);
    grams.sort_unstable();
    grams
}

/// Sørensen–Dice coefficient of two sorted, non-empty bigram multisets.
fn dice(a: &[u64], b: &[u64]) -> f32 {
    let (mut i, mut j, mut common) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            Ordering::Less => i += 1,
            Ordering::Greater => j += 1,
            Ordering::Equal => {
                common += 1;
                i += 1;
                j += 1;
            }
        }
    }
    (2 * common) as f32 / (a.len() + b.len()) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(old_text: &str, new_text: &str) -> EditSpec {
        EditSpec { old_text: old_text.into(), new_text: new_text.into(), replace_all: false }
    }

    fn spec_all(old_text: &str, new_text: &str) -> EditSpec {
        EditSpec { replace_all: true, ..spec(old_text, new_text) }
    }

    struct Success {
        name: &'static str,
        original: &'static str,
        edits: Vec<EditSpec>,
        expected: &'static str,
        replacements: usize,
        fuzzy: bool,
    }

    fn check_success(case: &Success) {
        let outcome = apply_edits(case.original, "f.txt", &case.edits)
            .unwrap_or_else(|e| panic!("{}: unexpected error: {e}", case.name));
        assert_eq!(outcome.new_content, case.expected, "{}", case.name);
        assert_eq!(outcome.replacements, case.replacements, "{}", case.name);
        assert_eq!(outcome.fuzzy, case.fuzzy, "{}", case.name);
    }

    #[test]
    fn successful_edits() {
        let cases = [
            Success {
                name: "single exact edit",
                original: "fn main() {\n    println!(\"hi\");\n}\n",
                edits: vec![spec("println!(\"hi\")", "println!(\"bye\")")],
                expected: "fn main() {\n    println!(\"bye\");\n}\n",
                replacements: 1,
                fuzzy: false,
            },
            Success {
                name: "CRLF file, LF edit text",
                original: "a\r\nb\r\nc\r\n",
                edits: vec![spec("b\nc", "B\nC\nD")],
                expected: "a\r\nB\r\nC\r\nD\r\n",
                replacements: 1,
                fuzzy: false,
            },
            Success {
                name: "CRLF file, CRLF edit text",
                original: "a\r\nb\r\nc\r\n",
                edits: vec![spec("a\r\nb", "x\r\ny")],
                expected: "x\r\ny\r\nc\r\n",
                replacements: 1,
                fuzzy: false,
            },
            Success {
                name: "mostly CRLF file becomes all CRLF",
                original: "a\r\nb\r\nc\nd\r\n",
                edits: vec![spec("a", "A")],
                expected: "A\r\nb\r\nc\r\nd\r\n",
                replacements: 1,
                fuzzy: false,
            },
            Success {
                name: "LF file stays LF even with CRLF edit text",
                original: "a\nb\n",
                edits: vec![spec("a\r\nb", "x\r\ny")],
                expected: "x\ny\n",
                replacements: 1,
                fuzzy: false,
            },
            Success {
                name: "BOM kept",
                original: "\u{FEFF}hello world\n",
                edits: vec![spec("hello", "goodbye")],
                expected: "\u{FEFF}goodbye world\n",
                replacements: 1,
                fuzzy: false,
            },
            Success {
                name: "BOM and CRLF together",
                original: "\u{FEFF}one\r\ntwo\r\nthree",
                edits: vec![spec("one\ntwo", "1\n2")],
                expected: "\u{FEFF}1\r\n2\r\nthree",
                replacements: 1,
                fuzzy: false,
            },
            Success {
                name: "replace_all counts every occurrence",
                original: "x = 1; y = 1;\nz = 1;\n",
                edits: vec![spec_all("1", "2")],
                expected: "x = 2; y = 2;\nz = 2;\n",
                replacements: 3,
                fuzzy: false,
            },
            Success {
                name: "replace_all with a single occurrence",
                original: "only one\n",
                edits: vec![spec_all("one", "two")],
                expected: "only two\n",
                replacements: 1,
                fuzzy: false,
            },
            Success {
                name: "smart quotes in file, ASCII in old_text",
                original: "print(\u{201C}hello\u{201D})\nlet s = \u{2018}a\u{2019};\n",
                edits: vec![spec("print(\"hello\")", "print(\"bye\")")],
                expected: "print(\"bye\")\nlet s = \u{2018}a\u{2019};\n",
                replacements: 1,
                fuzzy: true,
            },
            Success {
                name: "ASCII quotes in file, smart in old_text",
                original: "say('hi')\nsay(\"there\")\n",
                edits: vec![spec("say(\u{2018}hi\u{2019})", "say('yo')")],
                expected: "say('yo')\nsay(\"there\")\n",
                replacements: 1,
                fuzzy: true,
            },
            Success {
                name: "en and em dashes in file",
                original: "range: 1\u{2013}10 \u{2014} inclusive\n",
                edits: vec![spec("1-10 - inclusive", "1-20 - inclusive")],
                expected: "range: 1-20 - inclusive\n",
                replacements: 1,
                fuzzy: true,
            },
            Success {
                name: "em dash in old_text",
                original: "a - b\nc\n",
                edits: vec![spec("a \u{2014} b", "a + b")],
                expected: "a + b\nc\n",
                replacements: 1,
                fuzzy: true,
            },
            Success {
                name: "trailing whitespace in file only",
                original: "let a = 1;   \nlet b = 2;\t\nlet c = 3;\n",
                edits: vec![spec("let a = 1;\nlet b = 2;", "let a = 10;\nlet b = 20;")],
                // The match ends at "2;", so the tab after it is left alone.
                expected: "let a = 10;\nlet b = 20;\t\nlet c = 3;\n",
                replacements: 1,
                fuzzy: true,
            },
            Success {
                name: "trailing whitespace in old_text only",
                original: "if x {\n    y();\n}\n",
                edits: vec![spec("if x {  \n    y();\t\n", "if z {\n    w();\n")],
                expected: "if z {\n    w();\n}\n",
                replacements: 1,
                fuzzy: true,
            },
            Success {
                name: "NBSP in file",
                original: "price:\u{A0}10 EUR\n",
                edits: vec![spec("price: 10", "price: 20")],
                expected: "price: 20 EUR\n",
                replacements: 1,
                fuzzy: true,
            },
            Success {
                name: "NFKC compatibility characters",
                original: "x\u{FF1D}\u{FF11}\n",
                edits: vec![spec("x=1", "x=2")],
                expected: "x=2\n",
                replacements: 1,
                fuzzy: true,
            },
            Success {
                // Applied one after the other, edit 2 would find "beta" twice.
                name: "edits match against the original",
                original: "alpha\nbeta\ngamma\n",
                edits: vec![spec("alpha", "beta"), spec("beta", "delta")],
                expected: "beta\ndelta\ngamma\n",
                replacements: 2,
                fuzzy: false,
            },
            Success {
                name: "swap through two edits",
                original: "let (x, y) = (1, 2);\n",
                edits: vec![spec("1", "2"), spec("2", "1")],
                expected: "let (x, y) = (2, 1);\n",
                replacements: 2,
                fuzzy: false,
            },
            Success {
                name: "edits given out of file order",
                original: "one\ntwo\nthree\n",
                edits: vec![spec("three", "3"), spec("one", "1")],
                expected: "1\ntwo\n3\n",
                replacements: 2,
                fuzzy: false,
            },
            Success {
                name: "adjacent edits touch without overlapping",
                original: "abcdef\n",
                edits: vec![spec("def", "DEF"), spec("abc", "ABC")],
                expected: "ABCDEF\n",
                replacements: 2,
                fuzzy: false,
            },
            Success {
                name: "exact and fuzzy edits together",
                original: "a \u{2013} b\nc\n",
                edits: vec![spec("c", "C"), spec("a - b", "a to b")],
                expected: "a to b\nC\n",
                replacements: 2,
                fuzzy: true,
            },
            Success {
                name: "deleting text",
                original: "keep\ndrop\nkeep too\n",
                edits: vec![spec("drop\n", "")],
                expected: "keep\nkeep too\n",
                replacements: 1,
                fuzzy: false,
            },
        ];
        for case in &cases {
            check_success(case);
        }
    }

    #[test]
    fn failing_edits() {
        let cases: [(&str, &str, Vec<EditSpec>, EditError); 10] = [
            ("no edits", "text\n", vec![], EditError::NoEdits),
            (
                "repeated match",
                "foo\nfoo\nfoo\n",
                vec![spec("foo", "bar")],
                EditError::Ambiguous { edit: 0, count: 3 },
            ),
            (
                "overlapping occurrences are ambiguous too",
                "aaa\n",
                vec![spec("aa", "b")],
                EditError::Ambiguous { edit: 0, count: 2 },
            ),
            (
                "ambiguous fuzzy match",
                "it\u{2019}s\nit\u{2018}s\n",
                vec![spec("it's", "it is")],
                EditError::Ambiguous { edit: 0, count: 2 },
            ),
            ("identical old and new text", "foo bar\n", vec![spec("foo", "foo")], EditError::NoOp),
            ("edits cancel out", "ab\n", vec![spec("a", "a"), spec("b", "b")], EditError::NoOp),
            ("empty old_text", "text\n", vec![spec("", "new")], EditError::EmptyOldText { edit: 0 }),
            (
                "overlapping edits",
                "let x = 1;\nlet y = 2;\n",
                vec![spec("y = 2", "y = 3"), spec("x = 1;\nlet y", "x = 0;\nlet z")],
                EditError::Overlap { first: 0, second: 1 },
            ),
            (
                "second edit not found",
                "alpha\n",
                vec![spec("alpha", "beta"), spec("zzzz", "y")],
                EditError::NotFound { edit: 1, closest: None },
            ),
            (
                "error of the first failing edit wins",
                "x\nx\n",
                vec![spec("", "a"), spec("x", "y")],
                EditError::EmptyOldText { edit: 0 },
            ),
        ];
        for (name, original, edits, expected) in cases {
            assert_eq!(apply_edits(original, "f.txt", &edits), Err(expected), "{name}");
        }
    }

    #[test]
    fn crlf_survives_byte_for_byte() {
        let outcome =
            apply_edits("\u{FEFF}first\r\nsecond\r\nthird\r\n", "f.txt", &[spec("second\n", "2nd\nextra\n")])
                .unwrap();
        let bytes = outcome.new_content.as_bytes();
        assert!(bytes.starts_with("\u{FEFF}".as_bytes()));
        assert_eq!(memmem::find_iter(bytes, b"\r\n").count(), 4);
        assert!(
            bytes.iter().enumerate().all(|(i, &b)| b != b'\n' || (i > 0 && bytes[i - 1] == b'\r')),
            "lone LF in {:?}",
            outcome.new_content
        );
        // The diff is computed on LF text.
        assert!(!outcome.diff.contains('\r'));
    }

    #[test]
    fn unified_diff_and_counts() {
        let original = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let outcome = apply_edits(original, "src/x.rs", &[spec("f\n", "F1\nF2\n")]).unwrap();
        assert_eq!(
            outcome.diff,
            "--- a/src/x.rs\n+++ b/src/x.rs\n@@ -3,6 +3,7 @@\n c\n d\n e\n-f\n+F1\n+F2\n g\n h\n"
        );
        assert_eq!(outcome.first_changed_line, 6);
        assert_eq!(outcome.lines_added, 2);
        assert_eq!(outcome.lines_removed, 1);
    }

    #[test]
    fn not_found_points_at_the_closest_text() {
        let mut original = String::new();
        for n in 1..=60 {
            let _ = writeln!(original, "    let value_{n} = compute({n}, \"label {n}\");");
        }
        let edits = [spec(
            "    let value_42 = compute(42, \"label 42\")\n    let value_43 = compte(43, \"label 43\");",
            "replacement",
        )];
        let Err(EditError::NotFound { edit: 0, closest: Some(closest) }) =
            apply_edits(&original, "f.txt", &edits)
        else {
            panic!("expected a NotFound error with a candidate");
        };
        assert_eq!(closest.start_line, 42);
        assert_eq!(
            closest.text,
            "    let value_42 = compute(42, \"label 42\");\n    let value_43 = compute(43, \"label 43\");"
        );
        assert!(closest.similarity > 0.9, "{}", closest.similarity);

        let message = EditError::NotFound { edit: 0, closest: Some(closest) }.to_string();
        assert_eq!(
            message,
            "edit 1: old_text was not found in the file. The closest text (99% similar) is at line 42:\n\
             \x20   42\t    let value_42 = compute(42, \"label 42\");\n\
             \x20   43\t    let value_43 = compute(43, \"label 43\");\n\
             Re-read the file and copy the exact text, including whitespace."
        );
    }

    #[test]
    fn not_found_without_a_similar_candidate() {
        let result = apply_edits("fn main() {}\n", "f.txt", &[spec("completely unrelated words here", "x")]);
        assert_eq!(result, Err(EditError::NotFound { edit: 0, closest: None }));
    }

    #[test]
    fn closest_candidate_in_a_short_file() {
        // old_text longer than the file: the whole file is the only window.
        let closest = closest_match("alpha\nbeta\n", "alpha\nbeta\ngamma\n").unwrap();
        assert_eq!(closest.start_line, 1);
        assert_eq!(closest.text, "alpha\nbeta");
    }

    #[test]
    fn large_inputs_stay_bounded() {
        let mut original = String::new();
        for n in 0..30_000 {
            let _ = writeln!(original, "line number {n}");
        }
        let old: String = (0..150).map(|n| format!("lime numbr {}\n", n + 20_000)).collect();
        let Err(EditError::NotFound { closest, .. }) = apply_edits(&original, "f.txt", &[spec(&old, "x")])
        else {
            panic!("expected NotFound");
        };
        // The sampled scan may settle on a nearby window; it must still be close.
        let closest = closest.unwrap();
        assert!(closest.start_line.abs_diff(20_001) < 10, "{}", closest.start_line);
    }

    #[test]
    fn error_messages_are_actionable() {
        let cases: [(EditError, &[&str]); 7] = [
            (EditError::NoEdits, &["old_text", "new_text"]),
            (EditError::EmptyOldText { edit: 0 }, &["edit 1:", "write tool"]),
            (EditError::NotFound { edit: 2, closest: None }, &["edit 3:", "not found", "Re-read the file"]),
            (
                EditError::NotFound {
                    edit: 0,
                    closest: Some(Closest { start_line: 7, text: "a\nb".into(), similarity: 0.75 }),
                },
                &["at line 7", "75% similar", "     7\ta\n     8\tb\n", "Re-read"],
            ),
            (
                EditError::Ambiguous { edit: 0, count: 3 },
                &["edit 1: old_text occurs 3 times in the file", "surrounding lines", "replace_all"],
            ),
            (
                EditError::Overlap { first: 0, second: 2 },
                &["edits 1 and 3 overlap", "merge them into one edit", "disjoint"],
            ),
            (EditError::NoOp, &["changes nothing", "identical", "new_text"]),
        ];
        for (error, needles) in cases {
            let message = error.to_string();
            for needle in needles {
                assert!(message.contains(needle), "{message:?} lacks {needle:?}");
            }
        }
    }

    #[test]
    fn fuzzy_ranges_map_back_to_whole_characters() {
        // The ligature expands to two bytes under NFKC; the match covers it whole.
        let outcome = apply_edits("\u{FB01}le \u{2014} x\n", "f", &[spec("file - x", "path")]).unwrap();
        assert_eq!(outcome.new_content, "path\n");
        assert!(outcome.fuzzy);
    }

    #[test]
    fn edit_spec_deserializes_without_replace_all() {
        let parsed: EditSpec = serde_json::from_str(r#"{"old_text": "a", "new_text": "b"}"#).unwrap();
        assert_eq!(parsed, spec("a", "b"));
    }
}
