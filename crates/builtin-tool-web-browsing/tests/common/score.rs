//! Bag-of-words precision, recall and F1 of extracted text against the expected main text, as
//! article-extraction benchmarks score it: lower-cased alphanumeric tokens, counted with
//! multiplicity. Markdown link targets and image sources are dropped first (the model reads
//! them, but they are not words of the page).

use std::collections::HashMap;

/// Precision, recall and F1 of one page.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score {
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
}

/// The markdown without link targets: `[text](url)` keeps `text`.
pub fn strip_link_targets(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    let mut rest = markdown;
    while let Some(at) = rest.find("](") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        match after.find(')') {
            Some(end) => rest = &after[end + 1..],
            None => {
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

pub fn tokens(text: &str) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for token in text.split(|c: char| !c.is_alphanumeric()).filter(|t| !t.is_empty()) {
        *counts.entry(token.to_lowercase()).or_insert(0) += 1;
    }
    counts
}

pub fn score(extracted_markdown: &str, expected: &str) -> Score {
    let got = tokens(&strip_link_targets(extracted_markdown));
    let want = tokens(expected);
    let common: usize = got.iter().map(|(t, n)| (*n).min(want.get(t).copied().unwrap_or(0))).sum();
    let total_got: usize = got.values().sum();
    let total_want: usize = want.values().sum();
    let precision = if total_got == 0 { 0.0 } else { common as f64 / total_got as f64 };
    let recall = if total_want == 0 { 0.0 } else { common as f64 / total_want as f64 };
    let f1 = if precision + recall == 0.0 { 0.0 } else { 2.0 * precision * recall / (precision + recall) };
    Score { precision, recall, f1 }
}

/// The corpus: (name, html bytes, expected text), sorted by name.
pub fn corpus(folder: &std::path::Path) -> Vec<(String, Vec<u8>, String)> {
    let mut pages: Vec<_> = std::fs::read_dir(folder)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "html"))
        .map(|html| {
            let name = html.file_stem().unwrap().to_string_lossy().into_owned();
            let expected = std::fs::read_to_string(html.with_extension("txt")).unwrap();
            (name, std::fs::read(&html).unwrap(), expected)
        })
        .collect();
    pages.sort_by(|a, b| a.0.cmp(&b.0));
    pages
}
