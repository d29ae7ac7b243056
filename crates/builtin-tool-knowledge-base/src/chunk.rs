//! Cutting a source into chunks that follow its structure: a heading starts a chunk, paragraphs
//! and fenced code blocks stay whole where they fit, and small ones are packed together up to a
//! target size. Chunks partition the source's lines (blank lines go with the chunk before them),
//! so the source can be read back from its chunks.
//!
//! ```
//! use builtin_tool_knowledge_base::chunk::{Kind, chunk};
//!
//! let text = "# Guide\n\nIntro.\n\n## Install\n\nRun `make`.\n";
//! let chunks = chunk(text, Kind::Markdown);
//! assert_eq!(chunks.len(), 2);
//! assert_eq!(chunks[1].heading, "Guide > Install");
//! assert_eq!((chunks[1].first_line, chunks[1].last_line), (5, 7));
//! ```

use tool_core::knowledge::Chunk;

/// How a source's text is structured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Markdown (and HTML and PDF text, once extracted to it).
    Markdown,
    /// Plain text: paragraphs.
    Text,
    /// Source code: blocks between blank lines.
    Code,
}

/// The size a chunk is packed up to, in bytes.
pub const TARGET: usize = 1_200;

/// The most a chunk holds; a longer block is cut between lines (a longer line is its own chunk).
pub const MAX: usize = 2_400;

/// One unit of packing: a heading line, or a block with the blank lines after it.
struct Unit {
    first: usize,
    last: usize,
    bytes: usize,
    /// The heading trail this unit starts, when it is a heading.
    starts: Option<String>,
}

/// Cuts `text` into chunks.
pub fn chunk(text: &str, kind: Kind) -> Vec<Chunk> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    if lines.is_empty() {
        return Vec::new();
    }
    let units = match kind {
        Kind::Markdown => markdown_units(&lines),
        Kind::Text | Kind::Code => block_units(&lines, kind),
    };
    pack(&lines, &units)
}

/// A heading line's level and title (`## Title ##` → 2, `Title`).
fn atx_heading(line: &str) -> Option<(usize, String)> {
    let trimmed = line.trim_end();
    let indent = trimmed.len() - trimmed.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &trimmed[indent..];
    let level = rest.bytes().take_while(|b| *b == b'#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let title = &rest[level..];
    if !title.is_empty() && !title.starts_with([' ', '\t']) {
        return None;
    }
    let title = title.trim().trim_end_matches('#').trim();
    Some((level, clean_heading(title)))
}

/// A heading's text without link and emphasis marks: `[Install](#install)` → `Install`.
fn clean_heading(title: &str) -> String {
    let mut out = String::with_capacity(title.len());
    let mut chars = title.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '[' | ']' | '*' | '`' => {}
            '(' if out.ends_with(|c: char| !c.is_whitespace()) && title.contains("](") => {
                // The target of a link: skipped up to its closing parenthesis.
                for next in chars.by_ref() {
                    if next == ')' {
                        break;
                    }
                }
            }
            c => out.push(c),
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A code fence's marker (three or more backticks or tildes), if the line opens or closes one.
fn fence(line: &str) -> Option<(char, usize)> {
    let trimmed = line.trim_start();
    if line.len() - trimmed.len() > 3 {
        return None;
    }
    let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let count = trimmed.chars().take_while(|c| *c == marker).count();
    (count >= 3).then_some((marker, count))
}

fn is_blank(line: &str) -> bool {
    line.trim().is_empty()
}

/// Units of markdown: headings (ATX and setext) open sections; blocks are paragraphs, lists or
/// fenced code (whole, blank lines inside included).
fn markdown_units(lines: &[&str]) -> Vec<Unit> {
    let mut units = Vec::new();
    let mut trail: Vec<(usize, String)> = Vec::new();
    let mut index = 0;
    while index < lines.len() {
        let line = lines[index];
        if let Some((level, title)) = atx_heading(line) {
            trail.retain(|(l, _)| *l < level);
            if !title.is_empty() {
                trail.push((level, title));
            }
            let last = trailing_blanks(lines, index);
            units.push(unit(lines, index, last, Some(joined(&trail))));
            index = last + 1;
            continue;
        }
        if is_blank(line) {
            // Leading blank lines of the source.
            let last = trailing_blanks(lines, index);
            units.push(unit(lines, index, last, None));
            index = last + 1;
            continue;
        }
        // A block: up to a blank line outside a fence, or a heading.
        let mut end = index;
        let mut open: Option<(char, usize)> = None;
        let mut setext: Option<(usize, String)> = None;
        while end < lines.len() {
            let current = lines[end];
            if let Some((marker, count)) = fence(current) {
                match open {
                    None => open = Some((marker, count)),
                    Some((m, c)) if m == marker && count >= c && current.trim().chars().all(|x| x == m) => {
                        open = None;
                    }
                    Some(_) => {}
                }
            } else if open.is_none() {
                if end > index && atx_heading(current).is_some() {
                    end -= 1;
                    break;
                }
                if is_blank(current) {
                    end -= 1;
                    break;
                }
                // `Title` over `===` or `---`: a setext heading, when the title is one line.
                let underline = current.trim();
                if end == index + 1
                    && !underline.is_empty()
                    && (underline.chars().all(|c| c == '=') || underline.chars().all(|c| c == '-'))
                {
                    let level = if underline.starts_with('=') { 1 } else { 2 };
                    setext = Some((level, clean_heading(lines[index].trim())));
                    break;
                }
            }
            end += 1;
        }
        let end = end.min(lines.len() - 1);
        let last = trailing_blanks(lines, end);
        match setext {
            Some((level, title)) => {
                trail.retain(|(l, _)| *l < level);
                if !title.is_empty() {
                    trail.push((level, title));
                }
                units.push(unit(lines, index, last, Some(joined(&trail))));
            }
            None => units.push(unit(lines, index, last, None)),
        }
        index = last + 1;
    }
    units
}

/// Units of text and code: blocks between blank lines.
fn block_units(lines: &[&str], _kind: Kind) -> Vec<Unit> {
    let mut units = Vec::new();
    let mut index = 0;
    while index < lines.len() {
        let mut end = index;
        while end + 1 < lines.len() && !is_blank(lines[end + 1]) && !is_blank(lines[end]) {
            end += 1;
        }
        let last = trailing_blanks(lines, end);
        units.push(unit(lines, index, last, None));
        index = last + 1;
    }
    units
}

/// The last line of the blank run after `line` (or `line` itself).
fn trailing_blanks(lines: &[&str], line: usize) -> usize {
    let mut last = line;
    while last + 1 < lines.len() && is_blank(lines[last + 1]) {
        last += 1;
    }
    last
}

fn unit(lines: &[&str], first: usize, last: usize, starts: Option<String>) -> Unit {
    Unit { first, last, bytes: lines[first..=last].iter().map(|l| l.len()).sum(), starts }
}

fn joined(trail: &[(usize, String)]) -> String {
    trail.iter().map(|(_, title)| title.as_str()).collect::<Vec<_>>().join(" > ")
}

/// Packs units into chunks: a heading always starts one; blocks join the open chunk while it
/// stays under [`TARGET`]; a block over [`MAX`] is cut between lines.
fn pack(lines: &[&str], units: &[Unit]) -> Vec<Chunk> {
    let mut chunks = Vec::new();
    let mut heading = String::new();
    // The open chunk's first line and size.
    let mut open: Option<(usize, usize)> = None;
    let mut last_line = 0;
    let flush = |chunks: &mut Vec<Chunk>, first: usize, last: usize, heading: &str| {
        if lines[first..=last].iter().all(|line| is_blank(line)) && !chunks.is_empty() {
            // Blank lines alone join the chunk before.
            let previous: &mut Chunk = chunks.last_mut().expect("a chunk");
            previous.last_line = number(last);
            previous.text.extend(lines[first..=last].iter().copied());
            return;
        }
        chunks.push(Chunk {
            ordinal: u32::try_from(chunks.len()).unwrap_or(u32::MAX),
            heading: heading.to_owned(),
            first_line: number(first),
            last_line: number(last),
            text: lines[first..=last].concat(),
        });
    };
    for unit in units {
        if let Some(trail) = &unit.starts {
            if let Some((first, _)) = open.take() {
                flush(&mut chunks, first, last_line, &heading);
            }
            heading.clone_from(trail);
        }
        if unit.bytes > MAX {
            if let Some((first, _)) = open.take() {
                flush(&mut chunks, first, last_line, &heading);
            }
            // Cut between lines into pieces of at most MAX (a longer line alone).
            let mut first = unit.first;
            let mut size = 0;
            for (line, text) in lines.iter().enumerate().take(unit.last + 1).skip(unit.first) {
                if size > 0 && size + text.len() > MAX {
                    flush(&mut chunks, first, line - 1, &heading);
                    first = line;
                    size = 0;
                }
                size += text.len();
            }
            open = Some((first, size));
            last_line = unit.last;
            continue;
        }
        open = match open {
            Some((first, size)) if size + unit.bytes <= TARGET => Some((first, size + unit.bytes)),
            Some((first, _)) => {
                flush(&mut chunks, first, last_line, &heading);
                Some((unit.first, unit.bytes))
            }
            None => Some((unit.first, unit.bytes)),
        };
        last_line = unit.last;
    }
    if let Some((first, _)) = open {
        flush(&mut chunks, first, last_line, &heading);
    }
    chunks
}

/// A 0-based line index as a 1-based line number.
fn number(index: usize) -> u32 {
    u32::try_from(index + 1).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(chunks: &[Chunk]) -> String {
        chunks.iter().map(|chunk| chunk.text.as_str()).collect()
    }

    fn check_partition(text: &str, chunks: &[Chunk]) {
        assert_eq!(whole(chunks), text, "chunks put together give the source back");
        let mut next = 1;
        for (index, chunk) in chunks.iter().enumerate() {
            assert_eq!(chunk.ordinal as usize, index);
            assert_eq!(chunk.first_line, next, "no gap or overlap");
            assert!(chunk.last_line >= chunk.first_line);
            assert_eq!(chunk.text.lines().count() as u32, chunk.last_line - chunk.first_line + 1);
            next = chunk.last_line + 1;
        }
    }

    #[test]
    fn headings_start_chunks_and_keep_their_trail() {
        let text = "Preface line.\n\n# Cargo\n\nIntro.\n\n## Build\n\nRun it.\n\n### Flags\n\n--release\n\n## Test\n\nCheck.\n";
        let chunks = chunk(text, Kind::Markdown);
        check_partition(text, &chunks);
        let trails: Vec<&str> = chunks.iter().map(|c| c.heading.as_str()).collect();
        assert_eq!(trails, ["", "Cargo", "Cargo > Build", "Cargo > Build > Flags", "Cargo > Test"]);
        assert!(chunks[3].text.starts_with("### Flags"));
    }

    #[test]
    fn a_code_fence_with_blank_lines_and_hashes_stays_one_block() {
        let text = "# Script\n\n```sh\n# not a heading\n\necho hi\n```\n\nAfter.\n";
        let chunks = chunk(text, Kind::Markdown);
        check_partition(text, &chunks);
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].heading, "Script");
    }

    #[test]
    fn setext_headings_and_link_marks_are_read() {
        let text = "Title\n=====\n\nBody.\n\n[Usage](#usage)\n-----\n\nMore.\n";
        let chunks = chunk(text, Kind::Markdown);
        check_partition(text, &chunks);
        assert_eq!(chunks[1].heading, "Title > Usage");
    }

    #[test]
    fn small_blocks_are_packed_and_large_ones_cut_between_lines() {
        let paragraph = "word ".repeat(40) + "\n";
        let mut text = String::from("# Long\n\n");
        for _ in 0..20 {
            text.push_str(&paragraph);
            text.push('\n');
        }
        text.push_str(&"x".repeat(100));
        text.push('\n');
        let block: String = (0..200).map(|i| format!("line {i} of a long block\n")).collect();
        text.push_str("\n## Block\n\n");
        text.push_str(&block);
        let chunks = chunk(&text, Kind::Markdown);
        check_partition(&text, &chunks);
        assert!(chunks.iter().all(|c| c.text.len() <= MAX + 200), "sizes bounded");
        assert!(chunks.len() >= 4 && chunks.len() < 20, "{} chunks", chunks.len());
        assert!(chunks.iter().filter(|c| c.heading == "Long").count() >= 3, "packing, not one per paragraph");
    }

    #[test]
    fn code_and_text_cut_at_blank_lines() {
        let text = "fn a() {}\n\nfn b() {\n    1\n}\n\n\n";
        let chunks = chunk(text, Kind::Code);
        check_partition(text, &chunks);
        assert_eq!(chunks.len(), 1, "small blocks packed");
        assert!(chunk("", Kind::Text).is_empty());
        let one = chunk("no newline at the end", Kind::Text);
        check_partition("no newline at the end", &one);
    }

    #[test]
    fn a_single_huge_line_is_its_own_chunk() {
        let text = format!("a\n{}\nb\n", "y".repeat(10_000));
        let chunks = chunk(&text, Kind::Text);
        check_partition(&text, &chunks);
    }
}
