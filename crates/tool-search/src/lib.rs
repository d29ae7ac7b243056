//! Finding the right tools among hundreds: a BM25F index over each tool's name (split at `_`, `-`
//! and camelCase), its server, its description, and its parameters' names and descriptions,
//! stemmed, without English function words; hybrid with embeddings (reciprocal rank fusion)
//! when the caller has vectors for the tools and the query.
//!
//! This is the ranking half of tool search (issue 27): what decides which tools a `searchTools`
//! call returns and activates. Scoring is term at a time into one array, so a query over 5 000
//! tools costs the length of its words' posting lists (docs/benchmarks.md).
//!
//! ```
//! use tool_search::{ToolDoc, ToolIndex};
//!
//! let index = ToolIndex::build(vec![
//!     ToolDoc::new("slack", "slack_post_message", "Post a new message to a Slack channel"),
//!     ToolDoc::new("github", "create_issue", "Create a new issue in a GitHub repository"),
//! ]);
//! let best = index.search("tell the channel the release is out", 5);
//! assert_eq!(index.doc(best[0].0).name, "slack_post_message");
//! ```
#![deny(missing_docs)]

use std::collections::HashMap;

use rust_stemmers::{Algorithm, Stemmer};
use serde_json::Value;

/// A tool as the index reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolDoc {
    /// The server (or builtin tool) it belongs to.
    pub server: String,
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its parameters: name and description.
    pub parameters: Vec<(String, String)>,
}

impl ToolDoc {
    /// A tool without parameters.
    pub fn new(server: impl Into<String>, name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            server: server.into(),
            name: name.into(),
            description: description.into(),
            parameters: Vec::new(),
        }
    }

    /// A tool with the parameters of its JSON Schema (`properties`, one level).
    pub fn with_schema(mut self, schema: &Value) -> Self {
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            self.parameters = properties
                .iter()
                .map(|(name, property)| {
                    let description = property.get("description").and_then(Value::as_str).unwrap_or_default();
                    (name.clone(), description.to_owned())
                })
                .collect();
        }
        self
    }

    /// A tool as MCP lists it: `{server?, name, description?, inputSchema?}`; `None` without a
    /// name.
    pub fn from_mcp(value: &Value) -> Option<Self> {
        let text = |key: &str| value.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        let name = value.get("name").and_then(Value::as_str)?;
        let schema = value.get("inputSchema").or_else(|| value.get("input_schema")).unwrap_or(&Value::Null);
        Some(Self::new(text("server"), name, text("description")).with_schema(schema))
    }

    /// `server/name`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.server, self.name)
    }
}

/// BM25's term saturation and length normalisation (tool texts are short: less of the latter).
const K1: f32 = 1.2;
const B: f32 = 0.5;

/// Field weights.
const NAME: f32 = 3.0;
const SERVER: f32 = 1.0;
const DESCRIPTION: f32 = 1.0;
const PARAMETER_NAME: f32 = 1.5;
const PARAMETER_DESCRIPTION: f32 = 0.5;

/// English function words (and words every tool's text has: they say nothing of which tool).
const STOPWORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "an", "and", "any", "are", "as", "at", "be", "been", "but", "by",
    "can", "could", "did", "do", "does", "for", "from", "get", "had", "has", "have", "how", "i", "if", "in",
    "into", "is", "it", "its", "just", "me", "my", "need", "no", "not", "of", "on", "or", "our", "out",
    "please", "should", "so", "some", "than", "that", "the", "their", "them", "then", "there", "these",
    "they", "this", "those", "to", "up", "us", "use", "want", "was", "we", "were", "what", "when", "where",
    "which", "while", "who", "will", "with", "would", "you", "your", "tool", "tools",
];

/// Words a task is phrased in and the words tools are described by: a query word also looks
/// for these, at [`RELATED`] of its weight. Generic actions and objects of tool descriptions
/// only (what any tool catalogue says), not any one server's vocabulary.
const RELATED_WORDS: &[(&str, &[&str])] = &[
    ("make", &["create", "new", "generate"]),
    ("add", &["create", "insert", "new"]),
    ("new", &["create"]),
    ("open", &["create", "get", "read"]),
    ("start", &["create", "run"]),
    ("remove", &["delete"]),
    ("erase", &["delete"]),
    ("drop", &["delete"]),
    ("wipe", &["delete", "clear"]),
    ("change", &["update", "edit", "set"]),
    ("modify", &["update", "edit"]),
    ("edit", &["update"]),
    ("rename", &["update", "move"]),
    ("close", &["update", "state"]),
    ("show", &["get", "list", "read"]),
    ("see", &["get", "list", "read"]),
    ("view", &["get", "read"]),
    ("find", &["search", "list"]),
    ("look", &["search", "get"]),
    ("lookup", &["search", "get"]),
    ("locate", &["search"]),
    ("fetch", &["get", "read"]),
    ("retrieve", &["get", "read"]),
    ("read", &["get"]),
    ("tell", &["send", "post", "message"]),
    ("notify", &["send", "post", "message"]),
    ("announce", &["post", "message"]),
    ("say", &["post", "message"]),
    ("write", &["create", "send", "post"]),
    ("save", &["write", "create"]),
    ("store", &["write", "create"]),
    ("picture", &["image"]),
    ("photo", &["image"]),
    ("bug", &["issue"]),
    ("ticket", &["issue"]),
    ("pr", &["pull", "request"]),
    ("repo", &["repository"]),
    ("mail", &["email"]),
    ("meeting", &["event", "calendar"]),
    ("appointment", &["event", "calendar"]),
    ("book", &["event", "create"]),
    ("schedule", &["event", "create"]),
    ("chat", &["message", "channel"]),
    ("folder", &["directory"]),
    ("coworker", &["user"]),
    ("colleague", &["user"]),
    ("person", &["user"]),
];

/// The weight of a related word against the word itself.
const RELATED: f32 = 0.4;

/// The words of a text: runs of letters and digits, split at camelCase, lowercased.
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for run in text.split(|c: char| !c.is_alphanumeric()) {
        let mut word = String::new();
        let mut previous: Option<char> = None;
        for c in run.chars() {
            // `createIssue` → create, issue; `HTTPServer` stays whole (no lower→upper turn).
            if let Some(p) = previous
                && p.is_lowercase()
                && c.is_uppercase()
                && !word.is_empty()
            {
                out.push(std::mem::take(&mut word));
            }
            word.extend(c.to_lowercase());
            previous = Some(c);
        }
        if !word.is_empty() {
            out.push(word);
        }
    }
    out
}

/// Text to stems, remembering stems already computed.
struct Analyzer {
    stemmer: Stemmer,
    cache: HashMap<String, Option<String>>,
}

impl Analyzer {
    fn new() -> Self {
        Self { stemmer: Stemmer::create(Algorithm::English), cache: HashMap::new() }
    }

    fn stem(&mut self, word: &str) -> Option<String> {
        if let Some(stem) = self.cache.get(word) {
            return stem.clone();
        }
        let stem = (!STOPWORDS.contains(&word)).then(|| self.stemmer.stem(word).into_owned());
        self.cache.insert(word.to_owned(), stem.clone());
        stem
    }
}

/// The index.
pub struct ToolIndex {
    docs: Vec<ToolDoc>,
    postings: HashMap<String, Vec<(u32, f32)>>,
    lengths: Vec<f32>,
    average: f32,
    stemmer: Stemmer,
    vectors: Vec<Option<Vec<f32>>>,
}

impl std::fmt::Debug for ToolIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolIndex")
            .field("tools", &self.docs.len())
            .field("terms", &self.postings.len())
            .finish()
    }
}

impl ToolIndex {
    /// Indexes the tools.
    pub fn build(docs: Vec<ToolDoc>) -> Self {
        let mut analyzer = Analyzer::new();
        let mut postings: HashMap<String, Vec<(u32, f32)>> = HashMap::new();
        let mut lengths = Vec::with_capacity(docs.len());
        for (number, doc) in docs.iter().enumerate() {
            let mut counts: HashMap<String, f32> = HashMap::new();
            let mut length = 0.0;
            let mut add = |text: &str, weight: f32, counts: &mut HashMap<String, f32>| {
                for word in words(text) {
                    if let Some(stem) = analyzer.stem(&word) {
                        *counts.entry(stem).or_default() += weight;
                        length += weight;
                    }
                }
            };
            add(&doc.name, NAME, &mut counts);
            add(&doc.server, SERVER, &mut counts);
            add(&doc.description, DESCRIPTION, &mut counts);
            for (name, description) in &doc.parameters {
                add(name, PARAMETER_NAME, &mut counts);
                add(description, PARAMETER_DESCRIPTION, &mut counts);
            }
            for (stem, count) in counts {
                postings.entry(stem).or_default().push((number as u32, count));
            }
            lengths.push(length);
        }
        let average = if lengths.is_empty() {
            1.0
        } else {
            (lengths.iter().sum::<f32>() / lengths.len() as f32).max(1.0)
        };
        let vectors = vec![None; docs.len()];
        Self { docs, postings, lengths, average, stemmer: Stemmer::create(Algorithm::English), vectors }
    }

    /// Gives the tools their vectors (unit length, one per tool in order; `None` where a tool has
    /// none), for [`ToolIndex::search_hybrid`].
    #[must_use]
    pub fn with_vectors(mut self, vectors: Vec<Option<Vec<f32>>>) -> Self {
        self.vectors = vectors;
        self.vectors.resize(self.docs.len(), None);
        self
    }

    /// How many tools it holds.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// A tool by its number.
    pub fn doc(&self, number: usize) -> &ToolDoc {
        &self.docs[number]
    }

    /// The stems a query looks for, with their weights: its words (function words dropped,
    /// unless all are) at 1, and words related to them ([`RELATED_WORDS`]) at [`RELATED`].
    fn query_stems(&self, query: &str) -> Vec<(String, f32)> {
        let all = words(query);
        let mut stems: Vec<(String, f32)> = Vec::new();
        let add = |stem: String, weight: f32, stems: &mut Vec<(String, f32)>| match stems
            .iter_mut()
            .find(|(known, _)| *known == stem)
        {
            Some((_, known)) => *known = known.max(weight),
            None => stems.push((stem, weight)),
        };
        let topical: Vec<&String> = all.iter().filter(|w| !STOPWORDS.contains(&w.as_str())).collect();
        let chosen: Vec<&String> = if topical.is_empty() { all.iter().collect() } else { topical };
        for word in chosen {
            add(self.stemmer.stem(word).into_owned(), 1.0, &mut stems);
            if let Some((_, related)) = RELATED_WORDS.iter().find(|(known, _)| *known == word.as_str()) {
                for other in *related {
                    add(self.stemmer.stem(other).into_owned(), RELATED, &mut stems);
                }
            }
        }
        stems
    }

    /// The best `limit` tools for a query by its words: (tool number, score), best first.
    pub fn search(&self, query: &str, limit: usize) -> Vec<(usize, f32)> {
        let total = self.docs.len() as f32;
        let mut scores = vec![0.0f32; self.docs.len()];
        let mut touched: Vec<u32> = Vec::new();
        for (stem, weight) in self.query_stems(query) {
            let Some(list) = self.postings.get(&stem) else { continue };
            let df = list.len() as f32;
            let idf = weight * ((total - df + 0.5) / (df + 0.5) + 1.0).ln();
            for (doc, tf) in list {
                let norm = K1 * (1.0 - B + B * self.lengths[*doc as usize] / self.average);
                let slot = &mut scores[*doc as usize];
                if *slot == 0.0 {
                    touched.push(*doc);
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
        touched.into_iter().map(|doc| (doc as usize, scores[doc as usize])).collect()
    }

    /// The best `limit` tools by words and by meaning (the query's vector against the tools'),
    /// fused by reciprocal rank: (tool number, fused score), best first. Without vectors, as
    /// [`ToolIndex::search`].
    pub fn search_hybrid(&self, query: &str, vector: Option<&[f32]>, limit: usize) -> Vec<(usize, f32)> {
        let pool = limit.max(50);
        let by_words = self.search(query, pool);
        let Some(vector) = vector.filter(|_| self.vectors.iter().any(Option::is_some)) else {
            return by_words.into_iter().take(limit).collect();
        };
        let mut by_meaning: Vec<(usize, f32)> = self
            .vectors
            .iter()
            .enumerate()
            .filter_map(|(doc, v)| v.as_deref().map(|v| (doc, tool_core::embed::cosine(v, vector))))
            .collect();
        by_meaning.sort_by(|a, b| b.1.total_cmp(&a.1));
        by_meaning.truncate(pool);
        let lists = [
            by_words.into_iter().map(|(doc, _)| doc).collect(),
            by_meaning.into_iter().map(|(doc, _)| doc).collect(),
        ];
        tool_core::embed::fuse(&lists, 60.0)
            .into_iter()
            .take(limit)
            .map(|(doc, score)| (doc, score as f32))
            .collect()
    }

    /// The text a tool is embedded by: its name's words, server, description and parameters.
    pub fn embedding_text(doc: &ToolDoc) -> String {
        let parameters: Vec<String> =
            doc.parameters.iter().map(|(name, description)| format!("{name}: {description}")).collect();
        format!(
            "{} ({}): {}\n{}",
            words(&doc.name).join(" "),
            doc.server,
            doc.description,
            parameters.join("\n")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_split_at_case_and_separators() {
        assert_eq!(words("createPullRequest"), ["create", "pull", "request"]);
        assert_eq!(words("slack_post_message"), ["slack", "post", "message"]);
        assert_eq!(words("git-diff HTTPServer v2"), ["git", "diff", "httpserver", "v2"]);
    }

    #[test]
    fn names_weigh_most_and_parameters_count() {
        let index = ToolIndex::build(vec![
            ToolDoc::new("github", "create_issue", "Create a new issue in a repository"),
            ToolDoc::new("github", "list_commits", "List commits of a branch"),
            ToolDoc::new("maps", "maps_distance_matrix", "Travel distance and time between points").with_schema(
                &json!({"properties": {"origins": {"description": "Starting addresses"}, "mode": {"description": "driving, walking or transit"}}}),
            ),
            ToolDoc::from_mcp(&json!({"server": "time", "name": "convert_time", "description": "Convert a time between timezones"})).unwrap(),
        ]);
        let top = |query: &str| index.search(query, 3).first().map(|(doc, _)| index.doc(*doc).id());
        assert_eq!(top("open an issue about the crash").as_deref(), Some("github/create_issue"));
        assert_eq!(
            top("how long is the walking route from the station").as_deref(),
            Some("maps/maps_distance_matrix")
        );
        assert_eq!(
            top("what time is it in Tokyo when it is noon in Paris, timezones").as_deref(),
            Some("time/convert_time")
        );
        assert!(index.search("zebra", 3).is_empty());
        let hybrid = index.with_vectors(vec![None, Some(vec![1.0, 0.0]), None, None]);
        let found = hybrid.search_hybrid("zebra", Some(&[1.0, 0.0]), 3);
        assert_eq!(hybrid.doc(found[0].0).name, "list_commits", "meaning finds what words miss");
    }
}
