//! The BM25 index a search ranks chunks with: built in memory from a base's chunks and kept per
//! base version, so a base's change (by any instance) is seen at the next search.
//!
//! Terms are the words of the text (letters and digits; `snake_case` and `kebab-case` words also
//! give their parts), lowercased, without English function words, stemmed (Snowball English).
//! A chunk's fields weigh differently (BM25F): its heading trail 2.5, its file's name 1.5, its
//! text 1. Scoring is term at a time over the query's posting lists into one accumulator, then
//! the best are picked: every query costs the length of its terms' lists, with no per-row
//! overhead of a full-text engine's ranking function.

use std::collections::HashMap;

use rust_stemmers::{Algorithm, Stemmer};

use crate::query::is_stopword;

/// BM25's term saturation.
const K1: f32 = 1.2;
/// BM25's length normalisation.
const B: f32 = 0.75;
/// Field weights.
const HEADING: f32 = 2.5;
const NAME: f32 = 1.5;
const TEXT: f32 = 1.0;

/// One chunk as the index reads it.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    /// Its id in the store.
    pub id: i64,
    /// Its source's path.
    pub path: &'a str,
    /// Its heading trail.
    pub heading: &'a str,
    /// Its text.
    pub text: &'a str,
    /// Its vector, when the base has them.
    pub embedding: Option<&'a [f32]>,
}

/// Turns text into index terms, remembering stems already computed.
pub struct Analyzer {
    stemmer: Stemmer,
    /// Each word seen, and its stem's term id (`u32::MAX` for a function word).
    stems: HashMap<String, u32>,
    /// Each stem's term id.
    ids: HashMap<Box<str>, u32>,
    /// Each term id's stem.
    terms: Vec<Box<str>>,
}

impl std::fmt::Debug for Analyzer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Analyzer").field("terms", &self.terms.len()).finish_non_exhaustive()
    }
}

impl Default for Analyzer {
    fn default() -> Self {
        Self {
            stemmer: Stemmer::create(Algorithm::English),
            stems: HashMap::new(),
            ids: HashMap::new(),
            terms: Vec::new(),
        }
    }
}

/// The words of `text`: runs of letters, digits and `_`, lowercased; a word joined by `_` or `-`
/// gives itself and its parts.
fn for_each_word(text: &str, mut each: impl FnMut(&str)) {
    let mut lower = String::new();
    for raw in text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-')) {
        let raw = raw.trim_matches(|c| c == '_' || c == '-');
        if raw.is_empty() || raw.len() > 64 {
            continue;
        }
        lower.clear();
        lower.extend(raw.chars().flat_map(char::to_lowercase));
        if lower.contains(['_', '-']) {
            let joined: String = lower.chars().filter(|c| *c != '-').collect();
            each(&joined);
            for part in lower.split(['_', '-']).filter(|part| !part.is_empty()) {
                each(part);
            }
        } else {
            each(&lower);
        }
    }
}

impl Analyzer {
    /// The term id of a word (`None` for a function word), adding it when new.
    fn term(&mut self, word: &str) -> Option<u32> {
        if let Some(id) = self.stems.get(word) {
            return (*id != u32::MAX).then_some(*id);
        }
        if is_stopword(word) {
            self.stems.insert(word.to_owned(), u32::MAX);
            return None;
        }
        let stem = self.stemmer.stem(word);
        let id = match self.ids.get(stem.as_ref()) {
            Some(id) => *id,
            None => {
                let id = self.terms.len() as u32;
                self.terms.push(stem.as_ref().into());
                self.ids.insert(stem.as_ref().into(), id);
                id
            }
        };
        self.stems.insert(word.to_owned(), id);
        Some(id)
    }

    /// The stem of each of the query's words (function words dropped, unless all are).
    pub fn query_stems(&self, query: &str) -> Vec<String> {
        let mut all = Vec::new();
        let mut topical = Vec::new();
        for_each_word(query, |word| {
            let stem = self.stemmer.stem(word).into_owned();
            if !is_stopword(word) && !topical.contains(&stem) {
                topical.push(stem.clone());
            }
            if !all.contains(&stem) {
                all.push(stem);
            }
        });
        if topical.is_empty() { all } else { topical }
    }
}

/// A base's index.
#[derive(Debug)]
pub struct Index {
    /// Each stem's postings: (document, weighted term frequency).
    postings: HashMap<Box<str>, Vec<(u32, f32)>>,
    /// Each document's store id and weighted length.
    documents: Vec<(i64, f32)>,
    average: f32,
    analyzer: Analyzer,
    /// The documents' vectors, one after another (`dimensions` each), for those that have one.
    vectors: Vec<f32>,
    /// Which document each vector is.
    vector_documents: Vec<u32>,
    dimensions: usize,
}

/// A file's name without its folders and extension: what the name field indexes.
fn file_name(path: &str) -> &str {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.rsplit_once('.').map_or(name, |(stem, _)| stem)
}

impl Index {
    /// Indexes the entries.
    pub fn build<'a>(entries: impl IntoIterator<Item = Entry<'a>>) -> Self {
        let mut analyzer = Analyzer::default();
        let mut by_term: Vec<Vec<(u32, f32)>> = Vec::new();
        let mut documents = Vec::new();
        let mut counts: HashMap<u32, f32> = HashMap::new();
        let mut vectors = Vec::new();
        let mut vector_documents = Vec::new();
        let mut dimensions = 0;
        for entry in entries {
            let document = documents.len() as u32;
            if let Some(vector) = entry.embedding.filter(|v| !v.is_empty()) {
                if dimensions == 0 {
                    dimensions = vector.len();
                }
                if vector.len() == dimensions {
                    vectors.extend_from_slice(vector);
                    vector_documents.push(document);
                }
            }
            counts.clear();
            let mut length = 0.0;
            for (text, weight) in
                [(entry.heading, HEADING), (file_name(entry.path), NAME), (entry.text, TEXT)]
            {
                for_each_word(text, |word| {
                    if let Some(term) = analyzer.term(word) {
                        *counts.entry(term).or_default() += weight;
                        length += weight;
                    }
                });
            }
            for (term, count) in &counts {
                let term = *term as usize;
                if by_term.len() <= term {
                    by_term.resize_with(term + 1, Vec::new);
                }
                by_term[term].push((document, *count));
            }
            documents.push((entry.id, length));
        }
        let average = if documents.is_empty() {
            1.0
        } else {
            (documents.iter().map(|(_, length)| f64::from(*length)).sum::<f64>() / documents.len() as f64)
                .max(1.0) as f32
        };
        let postings = analyzer
            .terms
            .iter()
            .cloned()
            .zip(by_term.into_iter().chain(std::iter::repeat_with(Vec::new)))
            .collect();
        Self { postings, documents, average, analyzer, vectors, vector_documents, dimensions }
    }

    /// How many chunks it holds.
    pub fn len(&self) -> usize {
        self.documents.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.documents.is_empty()
    }

    /// The query's stems, as this index analyses text.
    pub fn query_stems(&self, query: &str) -> Vec<String> {
        self.analyzer.query_stems(query)
    }

    /// About how many bytes it holds in memory (postings, documents, vectors, terms).
    pub fn memory_bytes(&self) -> usize {
        let postings: usize =
            self.postings.iter().map(|(term, list)| term.len() + 16 + list.capacity() * 8).sum();
        let analyzer: usize = self.analyzer.stems.keys().map(|word| word.len() + 32).sum::<usize>()
            + self.analyzer.terms.iter().map(|term| term.len() * 2 + 40).sum::<usize>();
        postings
            + analyzer
            + self.documents.capacity() * 16
            + self.vectors.capacity() * 4
            + self.vector_documents.capacity() * 4
    }

    /// Whether its chunks have vectors.
    pub fn has_vectors(&self) -> bool {
        !self.vector_documents.is_empty()
    }

    /// The `limit` chunks nearest to a unit vector (a flat scan: fine below a few hundred thousand
    /// chunks): (store id, cosine), nearest first.
    pub fn nearest(&self, query: &[f32], limit: usize) -> Vec<(i64, f32)> {
        if query.len() != self.dimensions || self.dimensions == 0 {
            return Vec::new();
        }
        let mut scored: Vec<(u32, f32)> = self
            .vectors
            .chunks_exact(self.dimensions)
            .zip(&self.vector_documents)
            .map(|(vector, document)| (*document, tool_core::embed::cosine(vector, query)))
            .collect();
        let by_score = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if scored.len() > limit {
            scored.select_nth_unstable_by(limit, by_score);
            scored.truncate(limit);
        }
        scored.sort_by(by_score);
        scored.into_iter().map(|(document, score)| (self.documents[document as usize].0, score)).collect()
    }

    /// The best `limit` chunks for the stems: (store id, score), best first.
    pub fn search(&self, stems: &[String], limit: usize) -> Vec<(i64, f32)> {
        let total = self.documents.len() as f32;
        let mut scores: Vec<f32> = Vec::new();
        let mut touched: Vec<u32> = Vec::new();
        for stem in stems {
            let Some(list) = self.postings.get(stem.as_str()) else { continue };
            if list.is_empty() {
                continue;
            }
            if scores.is_empty() {
                scores = vec![0.0; self.documents.len()];
            }
            let df = list.len() as f32;
            let idf = ((total - df + 0.5) / (df + 0.5) + 1.0).ln();
            for (document, tf) in list {
                let length = self.documents[*document as usize].1;
                let norm = K1 * (1.0 - B + B * length / self.average);
                let slot = &mut scores[*document as usize];
                if *slot == 0.0 {
                    touched.push(*document);
                }
                *slot += idf * tf * (K1 + 1.0) / (tf + norm);
            }
        }
        let by_score = |a: &u32, b: &u32| scores[*b as usize].total_cmp(&scores[*a as usize]).then(a.cmp(b));
        if touched.len() > limit {
            touched.select_nth_unstable_by(limit, by_score);
            touched.truncate(limit);
        }
        touched.sort_by(by_score);
        touched.into_iter().map(|d| (self.documents[d as usize].0, scores[d as usize])).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(id: i64, path: &'a str, heading: &'a str, text: &'a str) -> Entry<'a> {
        Entry { id, path, heading, text, embedding: None }
    }

    #[test]
    fn ranks_by_rarity_frequency_and_field() {
        let index = Index::build([
            entry(
                1,
                "/d/build.md",
                "Guide > Building",
                "Run the build with cargo build. Building takes time.",
            ),
            entry(
                2,
                "/d/overriding-dependencies.md",
                "Overriding",
                "Use a patch section to override a dependency.",
            ),
            entry(
                3,
                "/d/misc.md",
                "Misc",
                "The dependency list, the dependency graph and more dependencies.",
            ),
            entry(4, "/d/env.md", "Environment", "CARGO_HOME sets where cargo keeps its home."),
        ]);
        assert_eq!(index.len(), 4);
        let top = |query: &str| index.search(&index.query_stems(query), 3).first().map(|(id, _)| *id);
        assert_eq!(top("how do I override dependencies?"), Some(2), "the rare word wins");
        assert_eq!(top("building"), Some(1), "stems match and headings weigh");
        assert_eq!(top("cargo_home"), Some(4), "snake_case words whole");
        assert_eq!(top("home"), Some(4), "and in parts");
        assert!(index.search(&index.query_stems("zebra"), 3).is_empty());
        let all = index.search(&index.query_stems("dependency"), 10);
        assert!(all.windows(2).all(|pair| pair[0].1 >= pair[1].1), "best first");
    }

    #[test]
    fn queries_of_function_words_keep_them() {
        let analyzer = Analyzer::default();
        assert_eq!(analyzer.query_stems("How do I run tests?"), ["run", "test"]);
        assert_eq!(analyzer.query_stems("what is it"), ["what", "is", "it"]);
    }
}
